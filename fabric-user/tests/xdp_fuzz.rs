//! Fuzzing the compiled switch program through BPF_PROG_TEST_RUN, with the host code as the
//! oracle. A deterministic pseudo-random sequence of frames (seeded: `FABRIC_XDP_FUZZ_SEED`,
//! `FABRIC_XDP_FUZZ_CASES` change it for longer runs) goes to the fixture switch:
//! (a) random bytes of random length 14..=1500 (half of them with a plausible Ethernet/IP start);
//! (b) valid frames from `fixture::frame` with random `FrameSpec` fields and destinations;
//! (c) those frames mutated: bit flips, byte changes, truncation, insertion and removal, corrupted
//!     length fields (IPv4 IHL/total length, IPv6 payload length, UDP length), fragment bits.
//!
//! The run goes through every hash mode: `adaptive` at idle queues, `wcmp` with no rates (so no
//! weights), and `spray` and `flowlet`, whose choice a random number or the clock makes, checked
//! to leave through a live member of the host's group and to count on that member, with port 0 first as the fixture registers it (a switch port), then as a host
//! port whose source guard admits only host A's addresses.
//!
//! For every frame: the action agrees with `parse_packet` + `decide` on the host over tables that
//! mirror what `FixtureSwitch::new` installs (in particular nothing the host parser rejects is
//! redirected); a redirected frame leaves through the predicted port and differs from the input
//! in exactly the MACs, the TTL / hop limit and the IPv4 checksum, which is the correct
//! incremental update (and verifies whenever the input's did); a frame that is passed or dropped
//! comes back unchanged; and every per-port counter moves exactly as the host predicts (one fate
//! per packet, counted on the right port under the right reason). At the end, per-member counters
//! match, rx_packets equals the cases fed and tx + drops + passes adds up to it.
//!
//! A second run does the same with the congestion model on (queues at port rates of 1 to
//! 100 Mbit/s, RED marking, a lossless class, PFC) and TE entries installed, in `te` phases
//! among others, and `wcmp` phases weighted by those rates. The program reads the clock itself, so each rule is checked against the queue
//! before and after the run and clock readings around it: a lossless frame is never dropped, a
//! lossy one only over the limit and a forwarded lossy one never over it; the queue's tail grows
//! by exactly the frame (and not at all when it is dropped); CE only on ECT frames, never at or
//! below Kmin and always above Kmax, with the checksum updated; over-headroom, sent-while-paused,
//! the ingress account and XOFF requests as the model says; PFC frames pause or resume exactly
//! their enabled classes. At the end the class counters add up to the port counters and, every
//! port resumed, no queue is paused, holds more than was put into it, or (lossy) exceeds its
//! limit; and some frames were decided by TE entries, some by the hash past a stale entry.
//!
//! Needs root, like tests/xdp.rs: without it `FixtureSwitch` fails loudly (no skip).
use std::{
    collections::{BTreeMap, HashMap},
    net::{Ipv4Addr, Ipv6Addr},
    time::Instant,
};

use fabric_common::{
    balance::{MemberState, WcmpWeights},
    config::{HashMode, PortInfo, SwitchConfig},
    counters::{DropReason, MemberCounters, PassReason, PortCounters},
    forward::{Decision, ForwardingTables, decide},
    parse::{IpHeader, ParseError, parse_packet},
    pfc::{CLASSES, PauseFrame, quanta_to_ns},
    qos::{self, BufferMode, ClassCounters, QosConfig},
    queue::{
        ECN_CE, EgressQueue, IngressAccount, RedParams, WIRE_OVERHEAD_BYTES, depth_bytes, enqueue_tail,
        frame_transmit_ns, is_ect,
    },
    route::{EcmpGroup, GroupMember, MAX_GROUPS, ROUTE_LOCAL, RouteTarget},
    te::{TeEntry, TeKey, te_key},
    wire::{ethernet, ipv4, ipv6, udp},
};
use fabric_testkit::fixture::{
    FixtureSwitch, FrameSpec, GROUP_HOST_A, GROUP_UPLINKS, HOST_A_V4, HOST_A_V6, SWITCH_V4, UPLINKS, XDP_DROP,
    XDP_PASS, XDP_REDIRECT, frame, in_private_netns, neighbour_mac, port_mac,
};
use fabric_user::{agent::monotonic_ns, dataplane::PROGRAM_SWITCH};

const DEFAULT_SEED: u64 = 0x00FA_B21C_F022;
const DEFAULT_CASES: usize = 100_000;
/// How many failures are shown in full.
const SHOWN_FAILURES: usize = 12;

/// Runs `f` against a fresh fixture switch (which turns IPv6 autoconfiguration chatter off, so
/// per-port counters are exactly the frames fed); panics with the error chain on failure.
fn with_switch(mode: HashMode, seed: u32, f: impl FnOnce(&mut FixtureSwitch) -> anyhow::Result<()> + Send) {
    in_private_netns(|| {
        let mut sw = FixtureSwitch::new(mode, seed)?;
        f(&mut sw)
    })
    .unwrap_or_else(|e| panic!("{e:#}"));
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok().and_then(|n| n.to_string().parse().ok()),
                None => v.parse().ok(),
            };
            parsed.unwrap_or_else(|| panic!("{name}={v} is not a number"))
        }
        Err(_) => default,
    }
}

// ---------------------------------------------------------------------------------------------
// Deterministic randomness

/// SplitMix64: the same sequence on every machine.
struct Rng(fabric_common::rng::SplitMix64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    /// True with probability `percent`/100.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn byte(&mut self) -> u8 {
        self.next() as u8
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }

    fn mac(&mut self) -> [u8; 6] {
        let b = self.bytes(6);
        [b[0], b[1], b[2], b[3], b[4], b[5]]
    }
}

// ---------------------------------------------------------------------------------------------
// The host's view of the fixture switch

/// What `FixtureSwitch::new` installs, as plain tables: the ECMP groups, and the routes with
/// longest-prefix match. The groups array has `MAX_GROUPS` slots like the BPF array (a slot never
/// written reads as an empty group).
struct HostTables {
    v4: Vec<(Ipv4Addr, u8, RouteTarget)>,
    v6: Vec<(Ipv6Addr, u8, RouteTarget)>,
    groups: Vec<EcmpGroup>,
    /// The TE entries installed in the switch's `TE_FLOWS`.
    te: HashMap<TeKey, TeEntry>,
    /// Per group, the WCMP weights its members' port rates give (none without rates).
    wcmp: Vec<Option<WcmpWeights>>,
}

fn member(p: u32) -> GroupMember {
    GroupMember { port: p, dst_mac: neighbour_mac(p), src_mac: port_mac(p) }
}

impl HostTables {
    fn fixture() -> Self {
        let mut groups = vec![EcmpGroup::default(); MAX_GROUPS as usize];
        let uplinks: Vec<_> = (1..=UPLINKS).map(member).collect();
        groups[GROUP_UPLINKS as usize] = EcmpGroup::from_members(&uplinks).unwrap();
        groups[GROUP_HOST_A as usize] = EcmpGroup::from_members(&[member(0)]).unwrap();
        HostTables {
            v4: vec![
                (Ipv4Addr::new(198, 18, 1, 0), 24, GROUP_UPLINKS),
                (HOST_A_V4, 32, GROUP_HOST_A),
                (SWITCH_V4, 32, ROUTE_LOCAL),
            ],
            v6: vec![(Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0), 64, GROUP_UPLINKS), (HOST_A_V6, 128, GROUP_HOST_A)],
            groups,
            te: HashMap::new(),
            wcmp: vec![None; MAX_GROUPS as usize],
        }
    }
}

fn lpm<const N: usize>(routes: impl Iterator<Item = ([u8; N], u8, RouteTarget)>, dst: &[u8; N]) -> Option<RouteTarget> {
    let matches = |prefix: &[u8; N], len: u8| {
        (0..len as usize).all(|bit| (prefix[bit / 8] ^ dst[bit / 8]) & (0x80 >> (bit % 8)) == 0)
    };
    routes.filter(|(p, len, _)| matches(p, *len)).max_by_key(|(_, len, _)| *len).map(|(_, _, t)| t)
}

impl ForwardingTables for HostTables {
    fn route_v4(&self, dst: &[u8; 4]) -> Option<RouteTarget> {
        lpm(self.v4.iter().map(|(a, l, t)| (a.octets(), *l, *t)), dst)
    }

    fn route_v6(&self, dst: &[u8; 16]) -> Option<RouteTarget> {
        lpm(self.v6.iter().map(|(a, l, t)| (a.octets(), *l, *t)), dst)
    }

    fn group(&self, id: u32) -> Option<&EcmpGroup> {
        self.groups.get(id as usize)
    }
}

impl MemberState for HostTables {
    fn te_entry(&self, key: &TeKey) -> Option<TeEntry> {
        self.te.get(key).copied()
    }

    fn wcmp_pick(&self, group: u32, h: u32, n: u32) -> Option<u32> {
        self.wcmp.get(group as usize)?.as_ref()?.pick(h, n)
    }
}

/// The host's prediction for one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// A valid PFC frame: consumed (it pauses the port), counted in `rx_pfc_frames`.
    PfcConsumed,
    Pass(PassReason),
    Drop(DropReason),
    Forward {
        group: u32,
        member_index: u32,
        port: u32,
    },
}

impl Fate {
    fn action(self) -> u32 {
        match self {
            Fate::Pass(_) => XDP_PASS,
            Fate::Drop(_) | Fate::PfcConsumed => XDP_DROP,
            Fate::Forward { .. } => XDP_REDIRECT,
        }
    }
}

fn predict(tables: &HostTables, cfg: &SwitchConfig, port: &PortInfo, f: &[u8]) -> (Fate, bool) {
    // MAC control frames never reach the parser: PFC is consumed, anything else dropped.
    if f.len() >= ethernet::HEADER_LEN && f[12..14] == ethernet::ETHERTYPE_MAC_CONTROL.to_be_bytes() {
        return match fabric_common::pfc::PauseFrame::parse(f) {
            Ok(_) => (Fate::PfcConsumed, false),
            Err(_) => (Fate::Drop(DropReason::BadMacControl), false),
        };
    }
    match parse_packet(f) {
        Err(ParseError::NotIp { .. }) => (Fate::Pass(PassReason::NotIp), false),
        Err(ParseError::Malformed(reason)) => (Fate::Drop(reason), false),
        Ok(p) => {
            let fate = match decide(tables, cfg, port, &p) {
                Decision::Pass(r) => Fate::Pass(r),
                Decision::Drop(r) => Fate::Drop(r),
                Decision::Forward { group, member_index, member } => {
                    Fate::Forward { group, member_index, port: member.port }
                }
            };
            (fate, p.is_roce())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Checksums, computed here rather than with fabric_common::checksum

/// Ones'-complement sum of 16-bit words, reduced mod 0xFFFF (so +0 and -0 compare equal).
fn ones_sum_mod(bytes: &[u8]) -> u64 {
    let sum: u64 = bytes.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u64).sum();
    sum % 0xFFFF
}

fn ipv4_checksum_verifies(header: &[u8]) -> bool {
    ones_sum_mod(header) == 0
}

/// Makes the IPv4 header checksum right (over the header as far as the frame holds it).
fn set_ipv4_checksum(f: &mut [u8], l3: usize) {
    if f.len() < l3 + ipv4::MIN_HEADER_LEN {
        return;
    }
    let hl = ((f[l3] & 0x0F) as usize * 4).clamp(ipv4::MIN_HEADER_LEN, f.len() - l3);
    f[l3 + ipv4::CHECKSUM.start..l3 + ipv4::CHECKSUM.end].fill(0);
    let s = ones_sum_mod(&f[l3..l3 + hl]) as u16;
    f[l3 + ipv4::CHECKSUM.start..l3 + ipv4::CHECKSUM.end].copy_from_slice(&(!s).to_be_bytes());
}

// ---------------------------------------------------------------------------------------------
// Frames

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Random,
    RandomIpLike,
    Valid,
    /// A valid frame of a flow with a TE entry.
    TeFlow,
    Mutated,
    /// The PFC frames that resume every port at the end of a congestion run.
    Resume,
}

/// Random bytes; for `ip_like`, an Ethernet header for one of the switch's ports and an IPv4 or
/// IPv6 version nibble (optionally behind an 802.1Q tag), so the parser gets past its first checks.
fn random_frame(rng: &mut Rng, ingress: u32, ip_like: bool) -> Vec<u8> {
    let len = rng.range(ethernet::HEADER_LEN, 1500);
    let mut f = rng.bytes(len);
    // Now and then a MAC control frame: PFC (valid when long enough and the opcode is right)
    // or some other MAC control frame.
    if !ip_like && rng.chance(5) {
        f[12..14].copy_from_slice(&ethernet::ETHERTYPE_MAC_CONTROL.to_be_bytes());
        if rng.chance(70) && len >= 16 {
            f[14..16].copy_from_slice(&fabric_common::pfc::OPCODE_PFC.to_be_bytes());
        }
        return f;
    }
    if ip_like {
        if rng.chance(80) {
            f[ethernet::DST].copy_from_slice(&port_mac(ingress));
        }
        let mut l3 = ethernet::HEADER_LEN;
        if rng.chance(25) && len >= l3 + 4 {
            f[12..14].copy_from_slice(&ethernet::ETHERTYPE_VLAN.to_be_bytes());
            l3 += 4;
        }
        let v6 = rng.chance(50);
        let et = if v6 { ethernet::ETHERTYPE_IPV6 } else { ethernet::ETHERTYPE_IPV4 };
        f[l3 - 2..l3].copy_from_slice(&et.to_be_bytes());
        if let Some(b) = f.get_mut(l3) {
            *b = if v6 { 0x60 | (*b & 0x0F) } else { 0x45 + (rng.byte() % 11) };
        }
    }
    f
}

/// A valid frame from the fixture's builder, with random fields and a random destination:
/// across the uplinks, to host A, to the switch itself, or nowhere routed; and now and then a
/// source address other than host A's (for the source guard).
fn valid_frame(rng: &mut Rng, ingress: u32) -> Vec<u8> {
    let dst_mac = match rng.range(0, 9) {
        0 => port_mac((ingress + 1) % (UPLINKS + 1)),
        1 => [0xff; 6],
        2 => {
            let mut m = rng.mac();
            m[0] |= 1;
            m
        }
        3 => rng.mac(),
        _ => port_mac(ingress),
    };
    let ttl = match rng.range(0, 9) {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => rng.byte(),
    };
    let spec = FrameSpec {
        src_mac: rng.mac(),
        dst_mac,
        vlan: if rng.chance(30) { Some(rng.range(0, 4095) as u16) } else { None },
        ipv6: rng.chance(50),
        ttl,
        src_port: rng.next() as u16,
        dst_port: if rng.chance(60) { udp::ROCEV2_PORT } else { rng.next() as u16 },
        dest_qp: rng.next() as u32 & 0xFF_FFFF,
        payload_len: if rng.chance(50) { rng.range(0, 64) } else { rng.range(0, 1400) },
    };
    let mut f = frame(&spec);
    let l3 = ethernet::HEADER_LEN + if spec.vlan.is_some() { 4 } else { 0 };
    let choice = rng.range(0, 9);
    if spec.ipv6 {
        let dst: [u8; 16] = match choice {
            0..=5 => {
                let (a, b, c) = (rng.next() as u16, rng.next() as u16, rng.next() as u16);
                Ipv6Addr::new(0xfd00, 1, 0, 0, a, 0, b, c).octets()
            }
            6 | 7 => HOST_A_V6.octets(),
            _ => rng.bytes(16).try_into().unwrap(),
        };
        f[l3 + ipv6::DST.start..l3 + ipv6::DST.end].copy_from_slice(&dst);
        if rng.chance(15) {
            let src = rng.bytes(16);
            f[l3 + ipv6::SRC.start..l3 + ipv6::SRC.end].copy_from_slice(&src);
        }
    } else {
        let dst: [u8; 4] = match choice {
            0..=5 => [198, 18, 1, rng.byte()],
            6 => HOST_A_V4.octets(),
            7 => SWITCH_V4.octets(),
            _ => rng.bytes(4).try_into().unwrap(),
        };
        f[l3 + ipv4::DST.start..l3 + ipv4::DST.end].copy_from_slice(&dst);
        if rng.chance(15) {
            let src = rng.bytes(4);
            f[l3 + ipv4::SRC.start..l3 + ipv4::SRC.end].copy_from_slice(&src);
        }
        set_ipv4_checksum(&mut f, l3);
    }
    f
}

/// Where the length fields of a frame built by [`valid_frame`] are.
fn l3_offset(f: &[u8]) -> usize {
    if f.len() >= 14 && f[12..14] == ethernet::ETHERTYPE_VLAN.to_be_bytes() { 18 } else { 14 }
}

/// One to four mutations of a valid frame; the result is at least an Ethernet header long.
fn mutate(rng: &mut Rng, mut f: Vec<u8>) -> Vec<u8> {
    for _ in 0..rng.range(1, 4) {
        let l3 = l3_offset(&f);
        let v4 = f.get(l3).is_some_and(|b| b >> 4 == 4);
        let n = f.len();
        match rng.range(0, 11) {
            0 | 1 => {
                let i = rng.range(0, n - 1);
                f[i] ^= 1 << rng.range(0, 7);
            }
            2 => {
                let i = rng.range(0, n - 1);
                f[i] = rng.byte();
            }
            3 => f.truncate(rng.range(ethernet::HEADER_LEN, n)),
            4 => {
                let at = rng.range(0, n);
                let count = rng.range(1, 8);
                let extra = rng.bytes(count);
                f.splice(at..at, extra);
            }
            5 => {
                let at = rng.range(0, n - 1);
                let end = (at + rng.range(1, 8)).min(n);
                f.drain(at..end);
            }
            // Length fields: replace, or nudge by a little.
            6..=8 => {
                let at = match (rng.range(0, 2), v4) {
                    (0, true) => l3 + ipv4::TOTAL_LEN.start,
                    (0, false) => l3 + ipv6::PAYLOAD_LEN.start,
                    (1, true) => l3 + ((f[l3] & 0x0F) as usize * 4) + udp::LENGTH.start,
                    (1, false) => l3 + ipv6::HEADER_LEN + udp::LENGTH.start,
                    _ => {
                        // IPv4 IHL, IPv6 version / traffic class
                        if let Some(b) = f.get_mut(l3) {
                            *b = (*b & 0xF0) | (rng.byte() & 0x0F);
                        }
                        continue;
                    }
                };
                if at + 2 <= f.len() {
                    let old = u16::from_be_bytes([f[at], f[at + 1]]);
                    let new = if rng.chance(50) {
                        rng.next() as u16
                    } else {
                        old.wrapping_add(rng.range(0, 16) as u16).wrapping_sub(8)
                    };
                    f[at..at + 2].copy_from_slice(&new.to_be_bytes());
                    if v4 && rng.chance(50) && f.len() >= l3 + ipv4::MIN_HEADER_LEN {
                        set_ipv4_checksum(&mut f, l3);
                    }
                }
            }
            // IPv4 fragment bits.
            9 if v4 && f.len() >= l3 + ipv4::MIN_HEADER_LEN => {
                let word: u16 = match rng.range(0, 2) {
                    0 => ipv4::FLAG_MORE_FRAGMENTS,
                    1 => rng.range(1, 0x1FFF) as u16,
                    _ => rng.next() as u16,
                };
                f[l3 + ipv4::FLAGS_FRAG.start..l3 + ipv4::FLAGS_FRAG.end].copy_from_slice(&word.to_be_bytes());
                set_ipv4_checksum(&mut f, l3);
            }
            // EtherType, or a trailer after the datagram (Ethernet padding).
            10 => {
                let et: u16 = [0x0800, 0x86DD, 0x8100, 0x0806, 0x8808, rng.next() as u16][rng.range(0, 5)];
                f[12..14].copy_from_slice(&et.to_be_bytes());
            }
            _ => {
                let pad = rng.range(1, 40);
                f.extend(rng.bytes(pad));
            }
        }
        if f.len() < ethernet::HEADER_LEN {
            f.resize(ethernet::HEADER_LEN, 0);
        }
    }
    f
}

// ---------------------------------------------------------------------------------------------
// Checking one frame

fn hex(f: &[u8]) -> String {
    let shown: String = f.iter().take(96).map(|b| format!("{b:02x}")).collect();
    if f.len() > 96 { format!("{shown}... ({} bytes)", f.len()) } else { shown }
}

/// What a redirected frame must look like: the input with the MACs of `port`'s member, the
/// TTL / hop limit one less and, if the congestion model marked it (`ce`), ECN set to CE (the
/// IPv4 checksum is checked separately, as an incremental update of the input's).
fn check_forwarded(input: &[u8], output: &[u8], port: u32, ce: bool) -> Result<(), String> {
    if output.len() != input.len() {
        return Err(format!("length {} became {}", input.len(), output.len()));
    }
    let p = parse_packet(input).map_err(|e| format!("redirected a frame the host rejects: {e:?}"))?;
    let mut expected = input.to_vec();
    expected[ethernet::DST].copy_from_slice(&neighbour_mac(port));
    expected[ethernet::SRC].copy_from_slice(&port_mac(port));
    let l3 = p.l3_offset;
    match p.ip {
        IpHeader::V4 { ttl, header_len, .. } => {
            expected[l3 + ipv4::TTL] = ttl - 1;
            if ce {
                expected[l3 + 1] |= ECN_CE;
            }
            let cs = l3 + ipv4::CHECKSUM.start..l3 + ipv4::CHECKSUM.end;
            expected[cs.clone()].copy_from_slice(&output[cs]);
            let hl = header_len as usize;
            let (before, after) = (&input[l3..l3 + hl], &output[l3..l3 + hl]);
            if ones_sum_mod(before) != ones_sum_mod(after) {
                return Err("the IPv4 checksum is not the incremental update of the old one".into());
            }
            if ipv4_checksum_verifies(before) && !ipv4_checksum_verifies(after) {
                return Err("the IPv4 checksum no longer verifies".into());
            }
        }
        IpHeader::V6 { hop_limit, .. } => {
            expected[l3 + ipv6::HOP_LIMIT] = hop_limit - 1;
            if ce {
                // The traffic class straddles the first two bytes: ECN is bits 4-5 of the second.
                expected[l3 + 1] |= ECN_CE << 4;
            }
        }
    }
    if output != expected {
        let diff: Vec<usize> = (0..output.len()).filter(|&i| output[i] != expected[i]).collect();
        return Err(format!("bytes {diff:?} differ from the expected rewrite"));
    }
    Ok(())
}

fn counter_diff(expected: &PortCounters, got: &PortCounters) -> Vec<String> {
    let mut d = Vec::new();
    let mut field = |name: &str, e: u64, g: u64| {
        if e != g {
            d.push(format!("{name} {g} (expected {e})"));
        }
    };
    field("rx_packets", expected.rx_packets, got.rx_packets);
    field("rx_bytes", expected.rx_bytes, got.rx_bytes);
    field("tx_packets", expected.tx_packets, got.tx_packets);
    field("tx_bytes", expected.tx_bytes, got.tx_bytes);
    field("rx_roce_packets", expected.rx_roce_packets, got.rx_roce_packets);
    field("tx_roce_packets", expected.tx_roce_packets, got.tx_roce_packets);
    field("rx_pfc_frames", expected.rx_pfc_frames, got.rx_pfc_frames);
    for r in DropReason::ALL {
        field(r.as_str(), expected.drops[r as usize], got.drops[r as usize]);
    }
    for r in PassReason::ALL {
        field(r.as_str(), expected.passes[r as usize], got.passes[r as usize]);
    }
    d
}

/// One frame fed to the switch: its place in the sequence, what made it, and its port.
struct Case<'a> {
    index: usize,
    kind: Kind,
    ingress: u32,
    frame: &'a [u8],
}

#[derive(Default)]
struct Report {
    fed: BTreeMap<Kind, u64>,
    outcomes: BTreeMap<String, u64>,
    failures: BTreeMap<&'static str, u64>,
    shown: Vec<String>,
}

impl Report {
    fn fail(&mut self, what: &'static str, c: &Case<'_>, detail: String) {
        *self.failures.entry(what).or_default() += 1;
        if self.shown.len() < SHOWN_FAILURES {
            let (index, kind, ingress, f) = (c.index, c.kind, c.ingress, c.frame);
            self.shown.push(format!("case {index} ({kind:?}, port {ingress}): {what}: {detail}\n    frame {}", hex(f)));
        }
    }

    fn count(&mut self, outcome: &str) {
        *self.outcomes.entry(outcome.to_string()).or_default() += 1;
    }
}

// ---------------------------------------------------------------------------------------------
// The congestion model's rules, checked around each run
//
// The program reads the clock itself, so the host cannot know a queue's exact depth when the
// program judged a frame; it knows the queue before and after, and a bracket [t0, t1] of clock
// readings around the run. A queue only drains as time passes, so the depth the frame met lies
// between the depth at t1 and the depth at t0 (computed from the state before): every rule is
// checked against the bound that makes it hold whatever the timing.

/// The host's view of the congestion model: its configuration and each port's rate; and per
/// egress port/class, the wire bytes ever forwarded into the queue.
struct Congestion {
    qos: QosConfig,
    rates: Vec<u64>,
    wire_bytes_in: BTreeMap<(u32, usize), u64>,
}

/// Lossless class 3 (RoCE's DSCP 26); small queues and port rates from 1 to 100 Mbit/s, so that
/// at BPF_PROG_TEST_RUN's pace some queues stay empty and others fill, mark, overflow and
/// cross XOFF.
fn congestion_model() -> Congestion {
    let qos = QosConfig {
        enabled: 1,
        lossless_classes: 1 << 3,
        red: RedParams::new(4_000, 24_000, 0.5),
        xoff_bytes: 32_000,
        xon_bytes: 16_000,
        headroom_bytes: 8_000,
        buffer_mode: BufferMode::Static as u32,
        port_buffer_bytes: 48_000,
        alpha_x256: 256,
        pool_bytes: 0,
    };
    let rates = vec![100_000_000, 10_000_000, 4_000_000, 2_000_000, 1_000_000];
    assert_eq!(rates.len(), UPLINKS as usize + 1);
    Congestion { qos, rates, wire_bytes_in: BTreeMap::new() }
}

/// TOS values the congestion run gives valid frames: each class's ECN codepoints, the lossless
/// class most often.
fn random_tos(rng: &mut Rng) -> u8 {
    const TOS: [u8; 8] = [26 << 2 | 0b10, 26 << 2 | 0b01, 26 << 2, 26 << 2 | 0b11, 0b10, 0, 48 << 2 | 0b10, 8 << 2];
    if rng.chance(10) { rng.byte() } else { TOS[rng.range(0, TOS.len() - 1)] }
}

/// Sets the TOS / traffic class of a frame built by [`valid_frame`] (IPv4 checksum made right).
fn set_tos_at(f: &mut [u8], tos: u8) {
    let l3 = l3_offset(f);
    if f[l3] >> 4 == 4 {
        f[l3 + 1] = tos;
        set_ipv4_checksum(f, l3);
    } else {
        f[l3] = (f[l3] & 0xF0) | (tos >> 4);
        f[l3 + 1] = (f[l3 + 1] & 0x0F) | (tos << 4);
    }
}

/// The model's state for one egress port/class and one ingress port/class.
#[derive(Clone, Copy, Debug)]
struct ModelState {
    queue: EgressQueue,
    egress: ClassCounters,
    account: IngressAccount,
    xoff_flag: u64,
    ingress: ClassCounters,
}

fn read_state(sw: &mut FixtureSwitch, ingress: u32, egress: u32, class: usize) -> anyhow::Result<ModelState> {
    Ok(ModelState {
        queue: sw.dp.queue(egress, class)?,
        egress: sw.dp.class_counters(egress, class)?,
        account: sw.dp.account(ingress, class)?,
        xoff_flag: sw.dp.xoff_flag(ingress, class)?,
        ingress: sw.dp.class_counters(ingress, class)?,
    })
}

/// A forwardable frame offered to its queue: where, its class, TOS and length, and the clock
/// bracket of its run.
struct Offered {
    egress: u32,
    class: usize,
    tos: u8,
    len: u64,
    t0: u64,
    t1: u64,
}

/// Checks what the program did with an offered frame against the model's rules; returns
/// whether it was forwarded, and whether marked CE.
fn judge_offer(
    c: &Congestion,
    o: &Offered,
    b: &ModelState,
    a: &ModelState,
    action: u32,
) -> Result<(bool, bool), String> {
    let (qos, rate) = (&c.qos, c.rates[o.egress as usize]);
    let (tail, paused) = (b.queue.tail_ns, b.queue.paused_until_ns);
    let tx = frame_transmit_ns(o.len, rate);
    let tail_at = |t: u64| enqueue_tail(tail, paused, t, tx);
    // The depth with the frame, were it judged at t: the most at t0, the least at t1.
    let depth_at = |t: u64| depth_bytes(tail_at(t), paused, t, rate);
    let (most, least) = (depth_at(o.t0), depth_at(o.t1));
    let limit = qos.queue_limit(0);
    let lossless = qos.is_lossless(o.class);
    let (d, q) = (delta(&b.egress, &a.egress), &a.queue);
    let check = |ok: bool, what: &str| if ok { Ok(()) } else { Err(format!("{what}: before {b:?}, after {a:?}")) };
    check(q.paused_until_ns == paused, "a forwarded frame changed its queue's pause")?;
    if action == XDP_DROP {
        check(!lossless, "a lossless frame was dropped")?;
        check(most > limit, &format!("dropped at depth <= {most}, within the limit {limit}"))?;
        check(q.tail_ns == tail, "a dropped frame moved the queue's tail")?;
        let only_overflow = ClassCounters { overflow_drops: 1, ..Default::default() };
        check(ClassCounters { xoff_events: 0, xoff_events_lost: 0, ..d } == only_overflow, "class counters")?;
        return Ok((false, false));
    }
    check(lossless || least <= limit, &format!("a lossy frame forwarded at depth >= {least}, over {limit}"))?;
    check((tail_at(o.t0)..=tail_at(o.t1)).contains(&q.tail_ns), "the tail is not the old one plus the frame")?;
    check(q.max_depth_bytes >= b.queue.max_depth_bytes.max(least), "the queue's maximum depth")?;
    check((d.packets, d.bytes, d.overflow_drops) == (1, o.len, 0), "class packets and bytes")?;
    check(d.ecn_marked <= 1 && d.over_headroom <= 1 && d.sent_while_paused <= 1, "one count per frame")?;
    let marked = d.ecn_marked == 1;
    check(!marked || (is_ect(o.tos) && most > qos.red.kmin_bytes as u64), "marked a frame RED never marks")?;
    check(marked || !is_ect(o.tos) || least <= qos.red.kmax_bytes as u64, "an ECT frame over Kmax unmarked")?;
    let headroom_end = limit + qos.headroom_bytes as u64;
    check(d.over_headroom == 0 || (lossless && most > headroom_end), "over_headroom below limit + headroom")?;
    check(d.over_headroom == 1 || !lossless || least <= headroom_end, "over limit + headroom, uncounted")?;
    check(d.sent_while_paused == u64::from(paused > o.t1) || (o.t0..=o.t1).contains(&paused), "sent while paused")?;
    if lossless {
        judge_ingress(c, o, b, a)?;
    } else {
        check(a.account == b.account, "a lossy frame was charged to its ingress")?;
    }
    Ok((true, marked))
}

/// A lossless frame is charged to its ingress port/class, which asks for a pause (once, until
/// the agent clears the flag) when it holds more than XOFF.
fn judge_ingress(c: &Congestion, o: &Offered, b: &ModelState, a: &ModelState) -> Result<(), String> {
    let check = |ok: bool, what: &str| if ok { Ok(()) } else { Err(format!("{what}: before {b:?}, after {a:?}")) };
    let held = a.account.held_bytes;
    let (most, least) = (b.account.held_at(o.t0) + o.len, b.account.held_at(o.t1) + o.len);
    check((least..=most).contains(&held), "the ingress account is not what it held plus the frame")?;
    check((o.t0..=o.t1).contains(&a.account.updated_ns), "the ingress account's time")?;
    // Drained once the last byte it holds has left: the frame's departure, or later.
    let drained_by = b.account.drained_by_ns.max(a.queue.tail_ns);
    check((drained_by..=drained_by.max(o.t1 + 1)).contains(&a.account.drained_by_ns), "the account's drain time")?;
    let d = delta(&b.ingress, &a.ingress);
    let xoff = c.qos.xoff_bytes as u64;
    let asked = b.xoff_flag == 0 && held > xoff;
    check(d.xoff_events + d.xoff_events_lost == u64::from(asked), "an XOFF request iff the account crossed XOFF")?;
    check(a.xoff_flag == 0 || b.xoff_flag != 0 || (asked && d.xoff_events == 1), "the XOFF flag")?;
    Ok(())
}

/// A valid PFC frame on `port` pauses (quanta > 0) or resumes (0) exactly its enabled classes.
fn judge_pause(
    c: &Congestion,
    port: u32,
    frame: &PauseFrame,
    t: (u64, u64),
    b: &[EgressQueue],
    a: &[EgressQueue],
) -> Result<(), String> {
    let rate = c.rates[port as usize];
    for class in 0..CLASSES {
        let (qb, qa) = (&b[class], &a[class]);
        let Some(quanta) = frame.class_quanta(class) else {
            if qa != qb {
                return Err(format!("class {class} not enabled, yet its queue changed: {qb:?} -> {qa:?}"));
            }
            continue;
        };
        let ns = quanta_to_ns(quanta, rate);
        let until_ok =
            if quanta == 0 { qa.paused_until_ns == 0 } else { (t.0 + ns..=t.1 + ns).contains(&qa.paused_until_ns) };
        if !until_ok || qa.pauses_received != qb.pauses_received + 1 {
            return Err(format!("class {class}, {quanta} quanta: {qb:?} -> {qa:?}"));
        }
    }
    Ok(())
}

fn delta(b: &ClassCounters, a: &ClassCounters) -> ClassCounters {
    ClassCounters {
        packets: a.packets - b.packets,
        bytes: a.bytes - b.bytes,
        ecn_marked: a.ecn_marked - b.ecn_marked,
        overflow_drops: a.overflow_drops - b.overflow_drops,
        over_headroom: a.over_headroom - b.over_headroom,
        sent_while_paused: a.sent_while_paused - b.sent_while_paused,
        xoff_events: a.xoff_events - b.xoff_events,
        xoff_events_lost: a.xoff_events_lost - b.xoff_events_lost,
    }
}

// ---------------------------------------------------------------------------------------------
// Traffic engineering

/// Flows with TE entries: valid frames from host A across the uplinks and, per flow, the
/// controller's choice. Most fit the group; some name the member one beyond it or another group
/// (stale entries), for which the program must fall back to the hash, as the host does.
fn te_flows(rng: &mut Rng, n: usize) -> (Vec<Vec<u8>>, Vec<(TeKey, TeEntry)>) {
    (0..n)
        .map(|_| {
            let spec = FrameSpec {
                ipv6: rng.chance(50),
                src_port: rng.next() as u16,
                dest_qp: rng.next() as u32 & 0xFF_FFFF,
                payload_len: rng.range(0, 1200),
                ..Default::default()
            };
            let f = frame(&spec);
            let key = te_key(&parse_packet(&f[..]).expect("a valid frame"));
            let group = if rng.chance(10) { GROUP_HOST_A } else { GROUP_UPLINKS };
            let member_index = rng.range(0, UPLINKS as usize) as u32;
            (f, (key, TeEntry { group, member_index }))
        })
        .unzip()
}

// ---------------------------------------------------------------------------------------------
// The fuzz run

/// A hash mode, its seed, and whether port 0 is a host port (with host A's source guard).
type Phase = (HashMode, u32, bool);

/// The host's model of the fixture switch, and what the run has seen.
struct Fuzz {
    tables: HostTables,
    port_info: Vec<PortInfo>,
    cfg: SwitchConfig,
    rng: Rng,
    report: Report,
    /// Per port, the counters the host expects.
    model: Vec<PortCounters>,
    members: BTreeMap<(u32, u32), MemberCounters>,
    fed: u64,
    congestion: Option<Congestion>,
    /// Frames of the flows with TE entries, which `te` phases draw valid frames from.
    te_frames: Vec<Vec<u8>>,
}

impl Fuzz {
    fn new(sw: &mut FixtureSwitch, seed: u64, congestion: Option<Congestion>, te: usize) -> anyhow::Result<Self> {
        let mut rng = Rng(fabric_common::rng::SplitMix64::new(seed));
        let mut tables = HostTables::fixture();
        let (te_frames, entries) = te_flows(&mut rng, te);
        sw.dp.set_te_flows(&entries)?;
        tables.te = entries.into_iter().collect();
        if let Some(c) = &congestion {
            sw.dp.set_qos(c.qos)?;
            for (port, &rate) in c.rates.iter().enumerate() {
                sw.dp.set_port_rate(port as u32, rate)?;
            }
            // WCMP: the controller reweighs the groups for the new rates; the host computes
            // the weights from the rates itself.
            sw.dp.refresh_wcmp()?;
            for g in [GROUP_UPLINKS, GROUP_HOST_A] {
                let rates: Vec<u64> =
                    tables.groups[g as usize].live().iter().map(|m| c.rates[m.port as usize]).collect();
                let w = WcmpWeights::from_weights(&rates)?;
                anyhow::ensure!(sw.dp.wcmp(g)? == w, "group {g}: the controller's WCMP weights differ from the rates'");
                tables.wcmp[g as usize] = Some(w);
            }
        }
        Ok(Fuzz {
            tables,
            port_info: (0..=UPLINKS).map(|p| PortInfo::new(p, port_mac(p))).collect(),
            cfg: FixtureSwitch::config(HashMode::Eecmp, 0),
            rng,
            report: Report::default(),
            model: vec![PortCounters::default(); UPLINKS as usize + 1],
            members: BTreeMap::new(),
            fed: 0,
            congestion,
            te_frames,
        })
    }

    fn enter_phase(&mut self, sw: &mut FixtureSwitch, (mode, hash_seed, host_port): Phase) -> anyhow::Result<()> {
        self.cfg = FixtureSwitch::config(mode, hash_seed);
        sw.set_mode(mode, hash_seed)?;
        self.port_info[0] = if host_port {
            PortInfo::host(0, port_mac(0), HOST_A_V4.octets(), HOST_A_V6.octets())
        } else {
            PortInfo::new(0, port_mac(0))
        };
        sw.dp.add_port(sw.ifindex[0], self.port_info[0])
    }

    /// The next frame of the sequence, arriving on `ingress`.
    fn next_frame(&mut self, ingress: u32) -> (Kind, Vec<u8>) {
        let rng = &mut self.rng;
        let kind = match rng.range(0, 9) {
            0 | 1 => Kind::Random,
            2 | 3 => Kind::RandomIpLike,
            4 | 5 => Kind::Valid,
            _ => Kind::Mutated,
        };
        match kind {
            Kind::Random => (kind, random_frame(rng, ingress, false)),
            Kind::RandomIpLike => (kind, random_frame(rng, ingress, true)),
            Kind::Valid => self.valid(ingress),
            _ => {
                let (_, v) = self.valid(ingress);
                (Kind::Mutated, mutate(&mut self.rng, v))
            }
        }
    }

    /// A valid frame: in `te` mode half of them from a flow with a TE entry; with the congestion
    /// model, with a random class and ECN codepoint.
    fn valid(&mut self, ingress: u32) -> (Kind, Vec<u8>) {
        let te = HashMode::from_u32(self.cfg.hash_mode) == HashMode::Te && !self.te_frames.is_empty();
        let (kind, mut f) = if te && self.rng.chance(50) {
            let mut f = self.te_frames[self.rng.range(0, self.te_frames.len() - 1)].clone();
            f[ethernet::DST].copy_from_slice(&port_mac(ingress));
            (Kind::TeFlow, f)
        } else {
            (Kind::Valid, valid_frame(&mut self.rng, ingress))
        };
        if self.congestion.is_some() {
            set_tos_at(&mut f, random_tos(&mut self.rng));
        }
        (kind, f)
    }
}

/// Where a frame the host forwards meets the congestion model: its egress port, class and TOS.
fn offered_to(fate: Fate, f: &[u8]) -> Option<(u32, usize, u8)> {
    let Fate::Forward { port, .. } = fate else { return None };
    let tos = qos::tos_of(&parse_packet(f).ok()?);
    Some((port, qos::class_of(tos), tos))
}

impl Fuzz {
    /// Runs one frame and checks everything about it.
    fn feed(&mut self, sw: &mut FixtureSwitch, c: &Case<'_>) -> anyhow::Result<()> {
        let (ingress, f) = (c.ingress, c.frame);
        *self.report.fed.entry(c.kind).or_default() += 1;
        let (fate, roce) = predict(&self.tables, &self.cfg, &self.port_info[ingress as usize], f);
        let modelled = self.congestion.is_some();
        let offered = offered_to(fate, f).filter(|_| modelled);
        let before = offered.map(|(egress, class, _)| read_state(sw, ingress, egress, class)).transpose()?;
        let paused_before = (modelled && fate == Fate::PfcConsumed).then(|| read_queues(sw, ingress)).transpose()?;
        let t0 = monotonic_ns();
        let (res, out) = sw.run(PROGRAM_SWITCH, ingress, f)?;
        let t1 = monotonic_ns();
        self.fed += 1;
        let action = res.return_value;
        let fate = self.adopt_free_choice(c, fate, action, &out);
        let (fate, ce) = match (offered, before) {
            (Some((egress, class, tos)), Some(b)) => {
                let o = Offered { egress, class, tos, len: f.len() as u64, t0, t1 };
                self.judge_offered(sw, c, fate, &o, &b, action)?
            }
            _ => (fate, false),
        };
        if let Some(b) = paused_before {
            let a = read_queues(sw, ingress)?;
            let frame = PauseFrame::parse(f).expect("the host parsed it");
            let model = self.congestion.as_ref().expect("modelled");
            if let Err(e) = judge_pause(model, ingress, &frame, (t0, t1), &b, &a) {
                self.report.fail("a PFC frame paused the wrong queues", c, e);
            }
        }
        self.report.count(format!("{fate:?}").split(" {").next().unwrap());
        if let Some(te) = self.te_decision(fate, f) {
            self.report.count(te);
        }
        if ce {
            self.report.count("marked CE");
        }
        self.check_action_and_frame(c, fate, action, &out, ce);
        self.count(ingress, f.len() as u64, fate, roce);
        self.compare_counters(sw, c)
    }

    /// `spray` and `flowlet` choose a member by a random number or by the clock, which the host
    /// cannot replay. For them the oracle is weaker but still independent of the program's
    /// bookkeeping: a frame the host forwards must leave rewritten for a live member of the group
    /// the host chose (read from the frame's new destination MAC), and from there on that member
    /// is the prediction: its port's and its member counters must move, and the rewrite must be
    /// exactly that member's.
    fn adopt_free_choice(&mut self, c: &Case<'_>, fate: Fate, action: u32, out: &[u8]) -> Fate {
        let Fate::Forward { group, .. } = fate else { return fate };
        let free = matches!(HashMode::from_u32(self.cfg.hash_mode), HashMode::Spray | HashMode::Flowlet);
        if !free || action != XDP_REDIRECT || out.len() < ethernet::HEADER_LEN {
            return fate;
        }
        let live = self.tables.groups[group as usize].live();
        match live.iter().position(|m| out[ethernet::DST] == m.dst_mac) {
            Some(i) => {
                self.report.count(&format!("left through member {i} of group {group} (free choice)"));
                Fate::Forward { group, member_index: i as u32, port: live[i].port }
            }
            None => {
                self.report.fail("left through no member of its group", c, hex(&out[..ethernet::HEADER_LEN]));
                fate
            }
        }
    }

    /// The congestion model's part in a frame the host forwards: the rules checked, and the
    /// frame's fate (dropped if the program dropped it) and whether it was marked CE.
    fn judge_offered(
        &mut self,
        sw: &mut FixtureSwitch,
        c: &Case<'_>,
        fate: Fate,
        o: &Offered,
        before: &ModelState,
        action: u32,
    ) -> anyhow::Result<(Fate, bool)> {
        let after = read_state(sw, c.ingress, o.egress, o.class)?;
        let model = self.congestion.as_mut().expect("modelled");
        let judged = judge_offer(model, o, before, &after, action);
        if let Ok((true, _)) = judged {
            *model.wire_bytes_in.entry((o.egress, o.class)).or_default() += o.len + WIRE_OVERHEAD_BYTES;
        }
        if let Err(e) = &judged {
            self.report.fail("the congestion model broke a rule", c, e.clone());
        }
        // A drop is the model's (the host forwards): count it so, even if it broke a rule, so
        // that one broken rule is not reported again as every counter after it.
        let fate = if action == XDP_DROP { Fate::Drop(DropReason::BufferOverflow) } else { fate };
        Ok((fate, matches!(judged, Ok((true, true)))))
    }

    /// For a frame the host forwards in `te` mode with an entry for its flow: whether the entry
    /// decided, or was stale and the hash did.
    fn te_decision(&self, fate: Fate, f: &[u8]) -> Option<&'static str> {
        let Fate::Forward { group, .. } = fate else { return None };
        if HashMode::from_u32(self.cfg.hash_mode) != HashMode::Te {
            return None;
        }
        let e = self.tables.te_entry(&te_key(&parse_packet(f).ok()?))?;
        let fits = e.group == group && e.member_index < self.tables.groups[group as usize].len;
        Some(if fits { "decided by a TE entry" } else { "stale TE entry, hashed" })
    }

    /// The action is the host's, a forwarded frame is rewritten exactly (CE included if
    /// marked), and any other frame comes back unchanged.
    fn check_action_and_frame(&mut self, c: &Case<'_>, fate: Fate, action: u32, out: &[u8], ce: bool) {
        let (report, f) = (&mut self.report, c.frame);
        if action == XDP_REDIRECT && parse_packet(f).is_err() {
            report.fail("redirected a frame parse_packet rejects", c, format!("{fate:?}"));
        }
        if action != fate.action() {
            report.fail("action differs from the host", c, format!("got {action}, host {fate:?}"));
        }
        match fate {
            Fate::Forward { port, .. } if action == XDP_REDIRECT => {
                if let Err(e) = check_forwarded(f, out, port, ce) {
                    report.fail("bad rewrite", c, e);
                }
                let l3 = l3_offset(f);
                let valid_v4 = matches!(c.kind, Kind::Valid | Kind::TeFlow) && f[l3] >> 4 == 4;
                if valid_v4 && !ipv4_checksum_verifies(&out[l3..l3 + (f[l3] & 0x0F) as usize * 4]) {
                    report.fail("IPv4 checksum of a valid frame does not verify", c, String::new());
                }
            }
            _ if out != f => report.fail("a frame not forwarded was modified", c, hex(out)),
            _ => {}
        }
    }

    /// Moves the host's counters by one frame of `len` bytes that arrived on `ingress`.
    fn count(&mut self, ingress: u32, len: u64, fate: Fate, roce: bool) {
        let m = &mut self.model[ingress as usize];
        m.rx_packets += 1;
        m.rx_bytes += len;
        m.rx_roce_packets += roce as u64;
        match fate {
            Fate::PfcConsumed => m.rx_pfc_frames += 1,
            Fate::Pass(r) => m.passes[r as usize] += 1,
            Fate::Drop(r) => m.drops[r as usize] += 1,
            Fate::Forward { group, member_index, port } => {
                let t = &mut self.model[port as usize];
                t.tx_packets += 1;
                t.tx_bytes += len;
                t.tx_roce_packets += roce as u64;
                let mc = self.members.entry((group, member_index)).or_default();
                mc.packets += 1;
                mc.bytes += len;
            }
        }
    }

    /// Every port's counters against the host's, after each frame.
    fn compare_counters(&mut self, sw: &mut FixtureSwitch, c: &Case<'_>) -> anyhow::Result<()> {
        for (p, expected) in self.model.iter_mut().enumerate() {
            let got = sw.dp.port_counters(p as u32)?;
            let diff = counter_diff(expected, &got);
            if !diff.is_empty() {
                self.report.fail("counters differ from the host", c, format!("port {p}: {}", diff.join(", ")));
                *expected = got; // resynchronise, so one miscount is reported once
            }
        }
        Ok(())
    }
}

/// The eight class queues of `port`.
fn read_queues(sw: &mut FixtureSwitch, port: u32) -> anyhow::Result<Vec<EgressQueue>> {
    (0..CLASSES).map(|class| sw.dp.queue(port, class)).collect()
}

impl Fuzz {
    /// The totals every run must add up to: each frame fed had one fate, and the member
    /// counters saw every transmitted one.
    fn totals(&mut self, sw: &mut FixtureSwitch) -> anyhow::Result<Vec<String>> {
        let got: Vec<PortCounters> = (0..=UPLINKS).map(|p| sw.dp.port_counters(p)).collect::<anyhow::Result<_>>()?;
        let rx: u64 = got.iter().map(|c| c.rx_packets).sum();
        let tx: u64 = got.iter().map(|c| c.tx_packets).sum();
        let drops: u64 = got.iter().map(|c| c.total_drops()).sum();
        let passes: u64 = got.iter().map(|c| c.total_passes()).sum();
        let pfc: u64 = got.iter().map(|c| c.rx_pfc_frames).sum();
        let mut member_total = 0;
        for (group, len) in [(GROUP_UPLINKS, UPLINKS), (GROUP_HOST_A, 1)] {
            for i in 0..len {
                let c = sw.dp.member_counters(group, i)?;
                member_total += c.packets;
                let expected = self.members.get(&(group, i)).copied().unwrap_or_default();
                if (c.packets, c.bytes) != (expected.packets, expected.bytes) {
                    self.report.shown.push(format!(
                        "member {i} of group {group}: {} packets / {} bytes, expected {} / {}",
                        c.packets, c.bytes, expected.packets, expected.bytes
                    ));
                    *self.report.failures.entry("member counters differ").or_default() += 1;
                }
            }
        }
        let fed = self.fed;
        let mut problems = Vec::new();
        if rx != fed {
            problems.push(format!("rx_packets {rx} != cases fed {fed}"));
        }
        if tx + drops + passes + pfc != fed {
            problems.push(format!("tx {tx} + drops {drops} + passes {passes} + pfc {pfc} != cases fed {fed}"));
        }
        if member_total != tx {
            problems.push(format!("member counters {member_total} != tx {tx}"));
        }
        if self.congestion.is_some() {
            problems.extend(self.congestion_totals(sw, &got)?);
        }
        Ok(problems)
    }

    /// With the congestion model: the class counters add up to the port counters, and once every
    /// port is resumed no queue is paused, none holds more than was ever put into it, and no
    /// lossy one more than its limit.
    fn congestion_totals(&mut self, sw: &mut FixtureSwitch, ports: &[PortCounters]) -> anyhow::Result<Vec<String>> {
        let mut classes = ClassCounters::default();
        for p in 0..=UPLINKS {
            sw.dp.port_class_counters(p)?.iter().for_each(|c| classes.accumulate(c));
        }
        let tx: u64 = ports.iter().map(|c| c.tx_packets).sum();
        let overflow: u64 = ports.iter().map(|c| c.drops[DropReason::BufferOverflow as usize]).sum();
        let marked = self.report.outcomes.get("marked CE").copied().unwrap_or(0);
        println!("congestion model, all classes: {classes:?}");
        let mut problems = Vec::new();
        if (classes.packets, classes.overflow_drops, classes.ecn_marked) != (tx, overflow, marked) {
            problems.push(format!("class counters {classes:?}: tx {tx}, overflow drops {overflow}, CE marks {marked}"));
        }
        for p in 0..=UPLINKS {
            let resume = PauseFrame { src: neighbour_mac(p), class_enable: 0xFF, quanta: [0; CLASSES] }.emit();
            self.feed(sw, &Case { index: usize::MAX, kind: Kind::Resume, ingress: p, frame: &resume })?;
        }
        let c = self.congestion.as_ref().expect("modelled");
        let now = monotonic_ns();
        for p in 0..=UPLINKS {
            for class in 0..CLASSES {
                let q = sw.dp.queue(p, class)?;
                let depth = depth_bytes(q.tail_ns, q.paused_until_ns, now, c.rates[p as usize]);
                let put_in = c.wire_bytes_in.get(&(p, class)).copied().unwrap_or(0);
                let lossy_over = !c.qos.is_lossless(class) && depth > c.qos.queue_limit(0);
                if q.paused_until_ns != 0 || depth > put_in || lossy_over {
                    problems.push(format!("port {p} class {class}: depth {depth} of {put_in} bytes put in, {q:?}"));
                }
            }
        }
        Ok(problems)
    }
}

/// Feeds `cases` frames through `phases` (each an equal share, in order) and checks them all.
fn fuzz(phases: &[Phase], congestion: Option<Congestion>, te_flows: usize) {
    let seed: u64 = env_or("FABRIC_XDP_FUZZ_SEED", DEFAULT_SEED);
    let cases: usize = env_or("FABRIC_XDP_FUZZ_CASES", DEFAULT_CASES);
    with_switch(phases[0].0, phases[0].1, |sw| {
        let start = Instant::now();
        let mut fz = Fuzz::new(sw, seed, congestion, te_flows)?;
        let phase_of = |case: usize| phases[case * phases.len() / cases.max(1)];
        for case in 0..cases {
            if case == 0 || phase_of(case - 1) != phase_of(case) {
                fz.enter_phase(sw, phase_of(case))?;
            }
            let ingress = if fz.rng.chance(70) { 0 } else { fz.rng.range(1, UPLINKS as usize) as u32 };
            let (kind, f) = fz.next_frame(ingress);
            fz.feed(sw, &Case { index: case, kind, ingress, frame: &f })?;
        }
        let mut problems = fz.totals(sw)?;
        let free_members = fz.report.outcomes.keys().filter(|k| k.ends_with("(free choice)")).count();
        if phases.iter().any(|p| p.0 == HashMode::Spray) && free_members < 2 {
            problems.push(format!("spray phases left through {free_members} member(s): nothing was sprayed"));
        }
        for te in ["decided by a TE entry", "stale TE entry, hashed"] {
            if te_flows > 0 && !fz.report.outcomes.contains_key(te) {
                problems.push(format!("no frame was {te}: the TE table went unexercised"));
            }
        }
        let r = &fz.report;
        println!(
            "xdp fuzz: seed {seed:#x}, {} frames in {:.1?} ({:?}); fates {:?}; failures {:?}",
            fz.fed,
            start.elapsed(),
            r.fed,
            r.outcomes,
            r.failures
        );
        assert!(
            r.failures.is_empty() && problems.is_empty(),
            "the XDP program and the host disagree (seed {seed:#x}, {cases} cases): {:?} {problems:?}\n{}",
            r.failures,
            r.shown.join("\n")
        );
        Ok(())
    });
}

#[test]
fn switch_program_agrees_with_the_host_on_fuzzed_frames() {
    // Every hash mode, each with port 0 as the fixture registers it (a switch port) and as a host
    // port whose source guard admits only host A's addresses.
    fuzz(
        &[
            (HashMode::Eecmp, 0x5eed_0001, false),
            (HashMode::FiveTuple, 0x5eed_0002, false),
            (HashMode::Pin, 0x5eed_0003, false),
            (HashMode::Eecmp, 0x5eed_0004, true),
            (HashMode::FiveTuple, 0x5eed_0005, true),
            (HashMode::Pin, 0x5eed_0006, true),
            // Queues stay idle without the congestion model: adaptive is deterministic.
            (HashMode::Adaptive, 0x5eed_0007, false),
            (HashMode::Adaptive, 0x5eed_0008, true),
            (HashMode::Wcmp, 0x5eed_0009, false),
            // A random number or the clock chooses the member: any live member of the host's
            // group is right, and the frame's rewrite names it (`Fuzz::adopt_free_choice`).
            (HashMode::Spray, 0x5eed_000a, false),
            (HashMode::Spray, 0x5eed_000b, true),
            (HashMode::Flowlet, 0x5eed_000c, false),
        ],
        None,
        0,
    );
}

/// The same, with the congestion model on (queues, RED marking, lossy overflow, lossless
/// headroom, PFC pauses and XOFF accounting) and, in the `te` phases, TE entries in force.
#[test]
fn switch_program_keeps_the_congestion_model_rules_and_te_entries_on_fuzzed_frames() {
    fuzz(
        &[
            (HashMode::Te, 0x5eed_0011, false),
            (HashMode::Te, 0x5eed_0012, true),
            (HashMode::Eecmp, 0x5eed_0013, false),
            (HashMode::Pin, 0x5eed_0014, true),
            // Weighted by the port rates of the run (adaptive, flowlet and spray read the clock
            // or a random number, so their choice is not fixed by the state: tests/xdp.rs).
            (HashMode::Wcmp, 0x5eed_0015, false),
            (HashMode::Wcmp, 0x5eed_0016, true),
        ],
        Some(congestion_model()),
        256,
    );
}

/// Regression (found by the `parse_packet` fuzz target): for an IPv4 first fragment (MF set,
/// offset 0) the parser used to read the UDP header and the BTH from the Ethernet padding after a
/// short datagram, so the switch forwarded, hashed on and counted as RoCE bytes that were not part
/// of the packet. The padding must change nothing: both frames are dropped as truncated.
#[test]
fn first_fragment_decision_does_not_depend_on_ethernet_padding() {
    with_switch(HashMode::Eecmp, 1, |sw| {
        let l3 = ethernet::HEADER_LEN;
        for datagram_payload in [0usize, 8, 16] {
            let mut f = frame(&FrameSpec { payload_len: 24, ..Default::default() });
            // A first fragment whose datagram holds `datagram_payload` bytes after the IPv4
            // header; the rest of the frame (UDP header, BTH, ...) is now trailer.
            let total = (ipv4::MIN_HEADER_LEN + datagram_payload) as u16;
            f[l3 + ipv4::TOTAL_LEN.start..l3 + ipv4::TOTAL_LEN.end].copy_from_slice(&total.to_be_bytes());
            f[l3 + ipv4::FLAGS_FRAG.start..l3 + ipv4::FLAGS_FRAG.end]
                .copy_from_slice(&ipv4::FLAG_MORE_FRAGMENTS.to_be_bytes());
            set_ipv4_checksum(&mut f, l3);
            let unpadded = f[..l3 + total as usize].to_vec();
            let with_padding = sw.run(PROGRAM_SWITCH, 0, &f)?.0.return_value;
            let without = sw.run(PROGRAM_SWITCH, 0, &unpadded)?.0.return_value;
            assert_eq!(
                with_padding,
                without,
                "first fragment with {datagram_payload} payload bytes: {} with Ethernet padding, {} without \
                 (host parse with padding: {:?}; without: {:?})",
                with_padding,
                without,
                parse_packet(&f[..]),
                parse_packet(&unpadded[..]),
            );
        }
        Ok(())
    });
}
