//! `fabric_common::parse::parse_packet` on arbitrary frames, then `forward::decide` on what it
//! returns, against a small table.
//!
//! Properties (any failure aborts the run with the input as an artifact):
//! - parsing never panics (no out-of-bounds read, no arithmetic overflow: overflow checks are on);
//! - parsing is deterministic and does not depend on how the bytes are reached: a slice and a
//!   copy of the XDP program's pointer accessor (`data + offset + N > data_end`) agree;
//! - when it succeeds, every header it reports lies inside the frame and inside the IP datagram,
//!   every length it relied on was checked, and every field it returns is the byte at that
//!   header's offset;
//! - when it succeeds, cutting the frame's trailer after the IP datagram changes nothing (what
//!   the switch decides comes from the datagram, not from Ethernet padding);
//! - `decide` follows the documented order (group MAC, other MAC, a host port's source guard,
//!   route, local, TTL, group, empty group) and, when it forwards, picks a live member of the
//!   routed group: index below the group's length, the member stored at that index.
//!
//! This target found one bug, since fixed: for an IPv4 *first fragment* (MF set, offset 0)
//! `parse_packet` read the UDP header and the BTH from the Ethernet padding after a short
//! datagram. The "inside the IP datagram" checks below guard against its return.

#![no_main]

use fabric_common::{
    config::{HashMode, PortInfo, SwitchConfig},
    counters::{DropReason, PassReason},
    forward::{Decision, ForwardingTables, decide},
    hash::{crc32, select_member},
    parse::{IpHeader, ParseError, ParsedPacket, parse_packet},
    route::{EcmpGroup, GroupMember, MAX_GROUP_MEMBERS, ROUTE_LOCAL, RouteTarget},
    wire::{PacketBytes, bth, ethernet, ipv4, ipv6, udp},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = parse_packet(data);
    assert_eq!(parsed, parse_packet(data), "deterministic");
    assert_eq!(parsed, parse_packet(&PtrPacket::new(data)), "slice and XDP-style accessor agree");
    match parsed {
        Ok(p) => {
            check_parsed(data, &p);
            check_decisions(data, &p);
        }
        Err(ParseError::NotIp { ethertype }) => {
            assert!(ethertype != ethernet::ETHERTYPE_IPV4 && ethertype != ethernet::ETHERTYPE_IPV6);
            let inner = if be16(data, 12) == ethernet::ETHERTYPE_VLAN { be16(data, 16) } else { be16(data, 12) };
            assert_eq!(ethertype, inner, "NotIp names the frame's (inner) EtherType");
        }
        Err(ParseError::Malformed(reason)) => {
            assert!(!matches!(
                reason,
                DropReason::NoRoute | DropReason::EmptyGroup | DropReason::RedirectFailed | DropReason::SpoofedSource
            ));
        }
    }
});

/// Whether to skip the checks the known first-fragment bug breaks (see the module docs).
fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

/// The XDP program's accessor (fabric-ebpf/src/packet.rs) over host memory: the same pointer
/// arithmetic and bound check, so the generic parser is exercised through both accessors.
struct PtrPacket<'a> {
    data: usize,
    data_end: usize,
    _bytes: core::marker::PhantomData<&'a [u8]>,
}

impl<'a> PtrPacket<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        let data = bytes.as_ptr() as usize;
        PtrPacket { data, data_end: data + bytes.len(), _bytes: core::marker::PhantomData }
    }
}

impl PacketBytes for PtrPacket<'_> {
    fn len(&self) -> usize {
        self.data_end - self.data
    }

    fn bytes<const N: usize>(&self, offset: usize) -> Option<&[u8; N]> {
        let start = self.data + offset;
        if start + N > self.data_end {
            return None;
        }
        // SAFETY: start..start + N lies inside the borrowed slice (checked just above).
        Some(unsafe { &*(start as *const [u8; N]) })
    }
}

/// Offsets and fields of a successful parse, against the bytes.
fn check_parsed(d: &[u8], p: &ParsedPacket) {
    let len = d.len();
    assert!(len >= ethernet::HEADER_LEN);
    assert_eq!(p.dst_mac[..], d[ethernet::DST]);
    let tagged = be16(d, 12) == ethernet::ETHERTYPE_VLAN;
    let l3 = p.l3_offset;
    if tagged {
        assert_eq!(p.vlan_tci, Some(be16(d, 14)));
        assert_eq!(l3, ethernet::HEADER_LEN + ethernet::VLAN_TAG_LEN);
    } else {
        assert_eq!(p.vlan_tci, None);
        assert_eq!(l3, ethernet::HEADER_LEN);
    }
    let ethertype = be16(d, l3 - 2);
    // (l4 offset, end of the IP datagram, is a later fragment)
    let (l4, ip_end, later_fragment, first_fragment) = match p.ip {
        IpHeader::V4 { src, dst, ttl, tos, header_len } => {
            assert_eq!(ethertype, ethernet::ETHERTYPE_IPV4);
            let hl = header_len as usize;
            assert!((ipv4::MIN_HEADER_LEN..=ipv4::MAX_HEADER_LEN).contains(&hl));
            assert!(l3 + hl <= len, "IPv4 header (options included) inside the frame");
            assert_eq!(d[l3] >> 4, 4);
            assert_eq!(hl, (d[l3] & 0x0F) as usize * 4);
            assert_eq!(src[..], d[l3 + ipv4::SRC.start..l3 + ipv4::SRC.end]);
            assert_eq!(dst[..], d[l3 + ipv4::DST.start..l3 + ipv4::DST.end]);
            assert_eq!(ttl, d[l3 + ipv4::TTL]);
            assert_eq!(tos, d[l3 + ipv4::TOS]);
            assert_eq!(p.protocol, d[l3 + ipv4::PROTOCOL]);
            let total = be16(d, l3 + ipv4::TOTAL_LEN.start) as usize;
            assert!(total >= hl, "IPv4 total length covers the header");
            assert!(l3 + total <= len, "IPv4 datagram inside the frame");
            let flags_frag = be16(d, l3 + ipv4::FLAGS_FRAG.start);
            let later = flags_frag & ipv4::FRAG_OFFSET_MASK != 0;
            let first = !later && flags_frag & ipv4::FLAG_MORE_FRAGMENTS != 0;
            (l3 + hl, l3 + total, later, first)
        }
        IpHeader::V6 { src, dst, hop_limit, traffic_class } => {
            assert_eq!(ethertype, ethernet::ETHERTYPE_IPV6);
            assert!(l3 + ipv6::HEADER_LEN <= len, "IPv6 header inside the frame");
            assert_eq!(d[l3] >> 4, 6);
            assert_eq!(traffic_class, (d[l3] << 4) | (d[l3 + 1] >> 4));
            assert_eq!(src[..], d[l3 + ipv6::SRC.start..l3 + ipv6::SRC.end]);
            assert_eq!(dst[..], d[l3 + ipv6::DST.start..l3 + ipv6::DST.end]);
            assert_eq!(hop_limit, d[l3 + ipv6::HOP_LIMIT]);
            assert_eq!(p.protocol, d[l3 + ipv6::NEXT_HEADER]);
            let total = ipv6::HEADER_LEN + be16(d, l3 + ipv6::PAYLOAD_LEN.start) as usize;
            assert!(l3 + total <= len, "IPv6 datagram inside the frame");
            (l3 + ipv6::HEADER_LEN, l3 + total, false, false)
        }
    };
    match p.ports {
        Some((sport, dport)) => {
            assert_eq!(p.protocol, ipv4::PROTO_UDP, "ports only for UDP");
            assert!(!later_fragment, "no ports in a later fragment");
            assert!(l4 + udp::HEADER_LEN <= len, "UDP header inside the frame");
            assert!(l4 + udp::HEADER_LEN <= ip_end, "UDP header inside the IP datagram");
            assert_eq!(sport, be16(d, l4 + udp::SRC_PORT.start));
            assert_eq!(dport, be16(d, l4 + udp::DST_PORT.start));
            let udp_len = be16(d, l4 + udp::LENGTH.start) as usize;
            assert!(udp_len >= udp::HEADER_LEN);
            // A first fragment carries the header of a datagram longer than itself.
            assert!(first_fragment || l4 + udp_len <= ip_end, "UDP length inside the IP datagram");
            assert_eq!(p.bth.is_some(), dport == udp::ROCEV2_PORT, "a BTH exactly for port 4791");
        }
        None => {
            assert!(p.protocol != ipv4::PROTO_UDP || later_fragment, "UDP has ports unless a later fragment");
            assert!(p.bth.is_none());
        }
    }
    if let Some(b) = p.bth {
        let at = l4 + udp::HEADER_LEN;
        assert!(at + bth::HEADER_LEN <= len, "BTH inside the frame");
        assert!(at + bth::HEADER_LEN <= ip_end, "BTH inside the IP datagram");
        assert!(be16(d, l4 + udp::LENGTH.start) as usize >= udp::HEADER_LEN + bth::HEADER_LEN);
        assert_eq!(b.opcode, d[at + bth::OPCODE]);
        assert_eq!(b.solicited, d[at + bth::FLAGS] & bth::FLAG_SOLICITED != 0);
        assert_eq!(b.ack_request, d[at + bth::ACK_REQ] & bth::FLAG_ACK_REQ != 0);
        assert_eq!(b.pkey, be16(d, at + bth::PKEY.start));
        assert_eq!(b.dest_qp, u32::from_be_bytes([0, d[at + 5], d[at + 6], d[at + 7]]));
        assert_eq!(b.psn, u32::from_be_bytes([0, d[at + 9], d[at + 10], d[at + 11]]));
        assert!(b.dest_qp < 1 << 24 && b.psn < 1 << 24);
    }
    // The trailer after the datagram (Ethernet padding, FCS, garbage) must not matter.
    assert_eq!(parse_packet(&d[..ip_end]), Ok(*p), "parse depends on bytes after the IP datagram");
}

/// Group ids of the test table, chosen by the last byte of the destination address.
const GROUP_ONE: u32 = 0;
const GROUP_THREE: u32 = 1;
const GROUP_FULL: u32 = 2;
const GROUP_EMPTY: u32 = 3;
/// A corrupt map entry: `len` beyond the array.
const GROUP_OVERLONG: u32 = 4;
/// Routed to, but no such group.
const GROUP_MISSING: u32 = 5;

struct Tables {
    groups: [EcmpGroup; 5],
}

fn member(port: u32) -> GroupMember {
    GroupMember { port, dst_mac: [0x02, 0xfb, 0, 0, 0, port as u8], src_mac: [0x02, 0xfa, 0, 0, 0, port as u8] }
}

impl Tables {
    fn new() -> Self {
        let group = |n: u32| EcmpGroup::from_members(&(0..n).map(|i| member(100 + i)).collect::<Vec<_>>()).unwrap();
        let mut overlong = group(MAX_GROUP_MEMBERS as u32);
        overlong.len = MAX_GROUP_MEMBERS as u32 + 1;
        Tables { groups: [group(1), group(3), group(MAX_GROUP_MEMBERS as u32), group(0), overlong] }
    }

    fn route(last_byte: u8) -> Option<RouteTarget> {
        match last_byte % 8 {
            0 => Some(GROUP_ONE),
            1 => Some(GROUP_THREE),
            2 => Some(GROUP_FULL),
            3 => Some(GROUP_EMPTY),
            4 => Some(GROUP_OVERLONG),
            5 => Some(GROUP_MISSING),
            6 => Some(ROUTE_LOCAL),
            _ => None,
        }
    }
}

impl fabric_common::balance::MemberState for Tables {}

impl ForwardingTables for Tables {
    fn route_v4(&self, dst: &[u8; 4]) -> Option<RouteTarget> {
        Self::route(dst[3])
    }

    fn route_v6(&self, dst: &[u8; 16]) -> Option<RouteTarget> {
        Self::route(dst[15])
    }

    fn group(&self, id: u32) -> Option<&EcmpGroup> {
        self.groups.get(id as usize)
    }
}

/// `decide` under every hash mode (and an unknown one), for a switch port whose MAC is the
/// frame's destination, one whose MAC is not, and host ports (source guard) whose host is and is
/// not the frame's source.
fn check_decisions(d: &[u8], p: &ParsedPacket) {
    let tables = Tables::new();
    let seed = crc32(d);
    // Any shift, including ones past 31 (only the low five bits count).
    let pin_shift = d.len() as u32 ^ seed;
    for hash_mode in [HashMode::FiveTuple as u32, HashMode::Eecmp as u32, HashMode::Pin as u32, 7] {
        let cfg = SwitchConfig { hash_mode, seed, pin_shift, flowlet_gap_ns: 0 };
        for n in [1, 2, 3, 5, MAX_GROUP_MEMBERS as u32] {
            assert!(select_member(&cfg, p, n) < n, "member index out of 0..{n}");
        }
        let (src4, src6) = match p.ip {
            IpHeader::V4 { src, .. } => (src, [0; 16]),
            IpHeader::V6 { src, .. } => ([0; 4], src),
        };
        let ports = [
            PortInfo::new(0, p.dst_mac),
            PortInfo::new(0, [0x02, 0, 0, 0, 0, 0x42]),
            PortInfo::host(0, p.dst_mac, src4, src6),
            PortInfo::host(0, p.dst_mac, [198, 18, 0, 1], [0xfd; 16]),
        ];
        for port in ports {
            let got = decide(&tables, &cfg, &port, p);
            let expected = expected_decision(&tables, &port, p);
            match (got, expected) {
                (Decision::Forward { group, member_index, member }, Expected::Forward(routed)) => {
                    assert_eq!(group, routed, "forwards through the routed group");
                    let g = tables.group(group).expect("routed group exists");
                    assert!(g.len >= 1 && g.len as usize <= MAX_GROUP_MEMBERS);
                    assert!(member_index < g.len, "member {member_index} outside a group of {}", g.len);
                    assert!(core::ptr::eq(member, &g.members[member_index as usize]), "the member at that index");
                    assert_eq!(member_index, select_member(&cfg, p, g.len));
                }
                (Decision::Pass(a), Expected::Pass(b)) => assert_eq!(a, b),
                (Decision::Drop(a), Expected::Drop(b)) => assert_eq!(a, b),
                (got, expected) => panic!("decide gave {got:?}, the documented order gives {expected:?}"),
            }
        }
    }
}

#[derive(Debug)]
enum Expected {
    Pass(PassReason),
    Drop(DropReason),
    Forward(u32),
}

/// The forwarding decision as the README and `forward.rs` document it, written out separately.
fn expected_decision(tables: &Tables, port: &PortInfo, p: &ParsedPacket) -> Expected {
    if p.dst_mac[0] & 1 != 0 {
        return Expected::Pass(PassReason::Local);
    }
    if p.dst_mac != port.mac {
        return Expected::Pass(PassReason::OtherHost);
    }
    // Traffic for the switch itself (an IPv6 link-local destination, fe80::/10, or a route to
    // one of its own addresses) is its kernel's, before the source guard.
    if let IpHeader::V6 { dst, .. } = p.ip
        && dst[0] == 0xfe
        && dst[1] & 0xc0 == 0x80
    {
        return Expected::Pass(PassReason::Local);
    }
    let (route, ttl) = match p.ip {
        IpHeader::V4 { dst, ttl, .. } => (tables.route_v4(&dst), ttl),
        IpHeader::V6 { dst, hop_limit, .. } => (tables.route_v6(&dst), hop_limit),
    };
    if route == Some(ROUTE_LOCAL) {
        return Expected::Pass(PassReason::Local);
    }
    let genuine = match p.ip {
        IpHeader::V4 { src, .. } => src == port.host_ipv4,
        IpHeader::V6 { src, .. } => src == port.host_ipv6,
    };
    if port.is_host() && !genuine {
        return Expected::Drop(DropReason::SpoofedSource);
    }
    let Some(id) = route else {
        return Expected::Drop(DropReason::NoRoute);
    };
    if ttl < 2 {
        return Expected::Pass(PassReason::TtlExpired);
    }
    match tables.group(id) {
        None => Expected::Drop(DropReason::NoRoute),
        Some(g) if g.len == 0 || g.len as usize > MAX_GROUP_MEMBERS => Expected::Drop(DropReason::EmptyGroup),
        Some(_) => Expected::Forward(id),
    }
}
