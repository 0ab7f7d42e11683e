//! Fuzzing the compiled switch program through BPF_PROG_TEST_RUN, with the host code as the
//! oracle. A deterministic pseudo-random sequence of frames (seeded: `FABRIC_XDP_FUZZ_SEED`,
//! `FABRIC_XDP_FUZZ_CASES` change it for longer runs) goes to the fixture switch:
//! (a) random bytes of random length 14..=1500 (half of them with a plausible Ethernet/IP start);
//! (b) valid frames from `fixture::frame` with random `FrameSpec` fields and destinations;
//! (c) those frames mutated: bit flips, byte changes, truncation, insertion and removal, corrupted
//!     length fields (IPv4 IHL/total length, IPv6 payload length, UDP length), fragment bits.
//!
//! The run goes through every hash mode, with port 0 first as the fixture registers it (a switch
//! port), then as a host port whose source guard admits only host A's addresses.
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
//! Needs root, like tests/xdp.rs: without it `FixtureSwitch` fails loudly (no skip).
use std::{
    collections::BTreeMap,
    net::{Ipv4Addr, Ipv6Addr},
    time::Instant,
};

use fabric_common::{
    config::{HashMode, PortInfo, SwitchConfig},
    counters::{DropReason, MemberCounters, PassReason, PortCounters},
    forward::{Decision, ForwardingTables, decide},
    parse::{IpHeader, ParseError, parse_packet},
    route::{EcmpGroup, GroupMember, MAX_GROUPS, ROUTE_LOCAL, RouteTarget},
    wire::{ethernet, ipv4, ipv6, udp},
};
use fabric_testkit::fixture::{
    FixtureSwitch, FrameSpec, GROUP_HOST_A, GROUP_UPLINKS, HOST_A_V4, HOST_A_V6, SWITCH_V4, UPLINKS, frame,
    in_private_netns, neighbour_mac, port_mac,
};
use fabric_user::dataplane::PROGRAM_SWITCH;

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_REDIRECT: u32 = 4;

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
    Mutated,
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

/// What a redirected frame must look like: the input with the MACs of `port`'s member and the
/// TTL / hop limit one less (the IPv4 checksum is checked separately).
fn check_forwarded(input: &[u8], output: &[u8], port: u32) -> Result<(), String> {
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
        IpHeader::V6 { hop_limit, .. } => expected[l3 + ipv6::HOP_LIMIT] = hop_limit - 1,
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

#[derive(Default)]
struct Report {
    fed: BTreeMap<Kind, u64>,
    outcomes: BTreeMap<String, u64>,
    failures: BTreeMap<&'static str, u64>,
    shown: Vec<String>,
}

impl Report {
    fn fail(&mut self, what: &'static str, case: usize, kind: Kind, ingress: u32, f: &[u8], detail: String) {
        *self.failures.entry(what).or_default() += 1;
        if self.shown.len() < SHOWN_FAILURES {
            self.shown.push(format!("case {case} ({kind:?}, port {ingress}): {what}: {detail}\n    frame {}", hex(f)));
        }
    }
}

#[test]
fn switch_program_agrees_with_the_host_on_fuzzed_frames() {
    let seed: u64 = env_or("FABRIC_XDP_FUZZ_SEED", DEFAULT_SEED);
    let cases: usize = env_or("FABRIC_XDP_FUZZ_CASES", DEFAULT_CASES);
    // Every hash mode, each with port 0 as the fixture registers it (a switch port) and as a host
    // port whose source guard admits only host A's addresses.
    let phases = [
        (HashMode::Eecmp, 0x5eed_0001u32, false),
        (HashMode::FiveTuple, 0x5eed_0002, false),
        (HashMode::Pin, 0x5eed_0003, false),
        (HashMode::Eecmp, 0x5eed_0004, true),
        (HashMode::FiveTuple, 0x5eed_0005, true),
        (HashMode::Pin, 0x5eed_0006, true),
    ];
    with_switch(phases[0].0, phases[0].1, |sw| {
        let start = Instant::now();
        let tables = HostTables::fixture();
        let mut port_info: Vec<PortInfo> = (0..=UPLINKS).map(|p| PortInfo::new(p, port_mac(p))).collect();
        let mut rng = Rng(fabric_common::rng::SplitMix64::new(seed));
        let mut report = Report::default();
        let ports = UPLINKS as usize + 1;
        let mut model = vec![PortCounters::default(); ports];
        let mut members: BTreeMap<(u32, u32), MemberCounters> = BTreeMap::new();
        let mut fed = 0u64;
        for case in 0..cases {
            let (mode, hash_seed, host_port) = phases[case * phases.len() / cases.max(1)];
            let cfg = FixtureSwitch::config(mode, hash_seed);
            if case == 0 || phases[(case - 1) * phases.len() / cases] != (mode, hash_seed, host_port) {
                sw.set_mode(mode, hash_seed)?;
                port_info[0] = if host_port {
                    PortInfo::host(0, port_mac(0), HOST_A_V4.octets(), HOST_A_V6.octets())
                } else {
                    PortInfo::new(0, port_mac(0))
                };
                sw.dp.add_port(sw.ifindex[0], port_info[0])?;
            }
            let ingress = if rng.chance(70) { 0 } else { rng.range(1, UPLINKS as usize) as u32 };
            let kind = match rng.range(0, 9) {
                0 | 1 => Kind::Random,
                2 | 3 => Kind::RandomIpLike,
                4 | 5 => Kind::Valid,
                _ => Kind::Mutated,
            };
            let f = match kind {
                Kind::Random => random_frame(&mut rng, ingress, false),
                Kind::RandomIpLike => random_frame(&mut rng, ingress, true),
                Kind::Valid => valid_frame(&mut rng, ingress),
                Kind::Mutated => {
                    let v = valid_frame(&mut rng, ingress);
                    mutate(&mut rng, v)
                }
            };
            *report.fed.entry(kind).or_default() += 1;

            let (fate, roce) = predict(&tables, &cfg, &port_info[ingress as usize], &f);
            let (res, out) = sw.run(PROGRAM_SWITCH, ingress, &f)?;
            fed += 1;
            let action = res.return_value;
            *report.outcomes.entry(format!("{fate:?}").split(" {").next().unwrap().to_string()).or_default() += 1;

            let host_rejects = parse_packet(&f[..]).is_err();
            if action == XDP_REDIRECT && host_rejects {
                report.fail("redirected a frame parse_packet rejects", case, kind, ingress, &f, format!("{fate:?}"));
            }
            if action != fate.action() {
                report.fail(
                    "action differs from the host",
                    case,
                    kind,
                    ingress,
                    &f,
                    format!("got {action}, host {fate:?}"),
                );
            }
            match fate {
                Fate::Forward { port, .. } if action == XDP_REDIRECT => {
                    if let Err(e) = check_forwarded(&f, &out, port) {
                        report.fail("bad rewrite", case, kind, ingress, &f, e);
                    }
                    if kind == Kind::Valid {
                        let l3 = l3_offset(&f);
                        if f[l3] >> 4 == 4 && !ipv4_checksum_verifies(&out[l3..l3 + (f[l3] & 0x0F) as usize * 4]) {
                            report.fail(
                                "IPv4 checksum of a valid frame does not verify",
                                case,
                                kind,
                                ingress,
                                &f,
                                String::new(),
                            );
                        }
                    }
                }
                _ if out != f => {
                    report.fail("a frame not forwarded was modified", case, kind, ingress, &f, hex(&out));
                }
                _ => {}
            }

            // The counters move exactly as the host predicts.
            let m = &mut model[ingress as usize];
            m.rx_packets += 1;
            m.rx_bytes += f.len() as u64;
            m.rx_roce_packets += roce as u64;
            match fate {
                Fate::PfcConsumed => m.rx_pfc_frames += 1,
                Fate::Pass(r) => m.passes[r as usize] += 1,
                Fate::Drop(r) => m.drops[r as usize] += 1,
                Fate::Forward { group, member_index, port } => {
                    let t = &mut model[port as usize];
                    t.tx_packets += 1;
                    t.tx_bytes += f.len() as u64;
                    t.tx_roce_packets += roce as u64;
                    let mc = members.entry((group, member_index)).or_default();
                    mc.packets += 1;
                    mc.bytes += f.len() as u64;
                }
            }
            for (p, expected) in model.iter_mut().enumerate() {
                let got = sw.dp.port_counters(p as u32)?;
                let diff = counter_diff(expected, &got);
                if !diff.is_empty() {
                    report.fail(
                        "counters differ from the host",
                        case,
                        kind,
                        ingress,
                        &f,
                        format!("port {p}: {}", diff.join(", ")),
                    );
                    *expected = got; // resynchronise, so one miscount is reported once
                }
            }
        }

        // Totals.
        let got: Vec<PortCounters> =
            (0..ports as u32).map(|p| sw.dp.port_counters(p)).collect::<anyhow::Result<_>>()?;
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
                let expected = members.get(&(group, i)).copied().unwrap_or_default();
                if (c.packets, c.bytes) != (expected.packets, expected.bytes) {
                    report.shown.push(format!(
                        "member {i} of group {group}: {} packets / {} bytes, expected {} / {}",
                        c.packets, c.bytes, expected.packets, expected.bytes
                    ));
                    *report.failures.entry("member counters differ").or_default() += 1;
                }
            }
        }
        let elapsed = start.elapsed();
        println!(
            "xdp fuzz: seed {seed:#x}, {fed} cases in {elapsed:.1?} ({:?}); host fates {:?}; \
             rx {rx}, tx {tx}, drops {drops}, passes {passes}, pfc {pfc}; failures {:?}",
            report.fed, report.outcomes, report.failures
        );
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
        assert!(
            report.failures.is_empty() && problems.is_empty(),
            "the XDP program and the host disagree (seed {seed:#x}, {fed} cases): {:?} {problems:?}\n{}",
            report.failures,
            report.shown.join("\n")
        );
        Ok(())
    });
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
