//! `forward::decide` over an in-memory implementation of `ForwardingTables` with a real
//! longest-prefix match, and `route::EcmpGroup`.
mod common;

use common::*;
use fabric_common::balance::MemberState;
use fabric_common::config::{HashMode, PortInfo, SwitchConfig};
use fabric_common::counters::{DropReason, PassReason};
use fabric_common::forward::{Decision, ForwardingTables, decide, verifier_mask};
use fabric_common::hash::select_member;
use fabric_common::parse::{IpHeader, ParsedPacket};
use fabric_common::route::{EcmpGroup, GroupMember, MAX_GROUP_MEMBERS, ROUTE_LOCAL, RouteTarget, TooManyMembers};
use fabric_common::te::{TeEntry, TeKey, te_key};

/// The receiving port's MAC: the test packets are addressed to it (common::DST_MAC).
const PORT_MAC: [u8; 6] = DST_MAC;

fn port() -> PortInfo {
    PortInfo::new(1, PORT_MAC)
}

fn cfg(mode: HashMode) -> SwitchConfig {
    SwitchConfig::new(mode, 0xC0FF_EE00, 0)
}

/// Routing tables as plain vectors, with the same semantics as the kernel's LPM trie: the
/// longest matching prefix wins, whatever the insertion order.
#[derive(Default)]
struct Tables {
    v4: Vec<([u8; 4], u8, RouteTarget)>,
    v6: Vec<([u8; 16], u8, RouteTarget)>,
    groups: Vec<(u32, EcmpGroup)>,
    te: Vec<(TeKey, TeEntry)>,
}

/// True when the first `len` bits of `addr` and `prefix` agree.
fn prefix_matches(addr: &[u8], prefix: &[u8], len: u8) -> bool {
    (0..len as usize).all(|bit| {
        let mask = 0x80u8 >> (bit % 8);
        addr[bit / 8] & mask == prefix[bit / 8] & mask
    })
}

fn longest_match<const N: usize>(routes: &[([u8; N], u8, RouteTarget)], dst: &[u8; N]) -> Option<RouteTarget> {
    routes
        .iter()
        .filter(|(prefix, len, _)| prefix_matches(dst, prefix, *len))
        .max_by_key(|(_, len, _)| *len)
        .map(|&(_, _, target)| target)
}

impl ForwardingTables for Tables {
    fn route_v4(&self, dst: &[u8; 4]) -> Option<RouteTarget> {
        longest_match(&self.v4, dst)
    }

    fn route_v6(&self, dst: &[u8; 16]) -> Option<RouteTarget> {
        longest_match(&self.v6, dst)
    }

    fn group(&self, id: u32) -> Option<&EcmpGroup> {
        self.groups.iter().find(|(gid, _)| *gid == id).map(|(_, g)| g)
    }
}

impl MemberState for Tables {
    fn te_entry(&self, key: &TeKey) -> Option<TeEntry> {
        self.te.iter().find(|(k, _)| k == key).map(|(_, e)| *e)
    }
}

/// Member `i` of group `g`: a distinct port and MACs, so a wrong member is visible.
fn member(g: u32, i: u32) -> GroupMember {
    GroupMember {
        port: 100 * g + i,
        dst_mac: [0x02, 0xAA, 0, 0, g as u8, i as u8],
        src_mac: [0x02, 0xBB, 0, 0, g as u8, i as u8],
    }
}

/// A group of `n` members whose unused slots are filled with a poison member, so that picking
/// a slot at or beyond `len` is caught.
fn group(g: u32, n: u32) -> EcmpGroup {
    let members: Vec<_> = (0..n).map(|i| member(g, i)).collect();
    let mut grp = EcmpGroup::from_members(&members).unwrap();
    for slot in &mut grp.members[n as usize..] {
        *slot = GroupMember { port: 0xDEAD, dst_mac: [0xFF; 6], src_mac: [0xFF; 6] };
    }
    grp
}

/// 10.0.0.0/8 -> group 1 (4 members), 10.1.0.0/16 -> group 2 (5 members), 10.1.2.3/32 -> the
/// switch, 10.9.0.0/16 -> group 3 (empty), 10.8.0.0/16 -> group 4 (not in the group table);
/// fd00::/8 -> group 5 (3 members). The /8 is inserted last: order must not matter.
fn tables() -> Tables {
    Tables {
        v4: vec![
            ([10, 1, 0, 0], 16, 2),
            ([10, 1, 2, 3], 32, ROUTE_LOCAL),
            ([10, 9, 0, 0], 16, 3),
            ([10, 8, 0, 0], 16, 4),
            ([10, 0, 0, 0], 8, 1),
        ],
        v6: vec![([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8, 5)],
        groups: vec![(1, group(1, 4)), (2, group(2, 5)), (3, EcmpGroup::default()), (5, group(5, 3))],
        te: Vec::new(),
    }
}

fn to(dst: [u8; 4]) -> ParsedPacket {
    pkt_v4([10, 200, 0, 1], dst, Some((0xC000, ROCE_PORT)), Some(0x11))
}

fn with_ttl(mut p: ParsedPacket, new_ttl: u8) -> ParsedPacket {
    match &mut p.ip {
        IpHeader::V4 { ttl, .. } => *ttl = new_ttl,
        IpHeader::V6 { hop_limit, .. } => *hop_limit = new_ttl,
    }
    p
}

fn v6_to(dst: [u8; 16]) -> ParsedPacket {
    let mut p = to([0; 4]);
    p.ip = IpHeader::V6 { src: V6_SRC, dst, hop_limit: 64, traffic_class: 0 };
    p
}

#[test]
fn test_tables_do_longest_prefix_match() {
    // The tables are test code; check them so that the decide tests mean what they say.
    let t = tables();
    assert_eq!(t.route_v4(&[10, 1, 2, 3]), Some(ROUTE_LOCAL));
    assert_eq!(t.route_v4(&[10, 1, 2, 4]), Some(2));
    assert_eq!(t.route_v4(&[10, 1, 255, 255]), Some(2));
    assert_eq!(t.route_v4(&[10, 2, 0, 1]), Some(1));
    assert_eq!(t.route_v4(&[10, 255, 0, 1]), Some(1));
    assert_eq!(t.route_v4(&[11, 1, 2, 3]), None);
    assert_eq!(t.route_v4(&[192, 168, 0, 1]), None);
    assert!(prefix_matches(&[0b1010_1111], &[0b1010_0000], 4));
    assert!(!prefix_matches(&[0b1011_0000], &[0b1010_0000], 4));
    assert!(prefix_matches(&[1, 2, 3, 4], &[9, 9, 9, 9], 0), "/0 matches everything");
    assert_eq!(t.route_v6(&V6_DST), Some(5));
    assert_eq!(t.route_v6(&[0xfe; 16]), None);
}

#[test]
fn group_mac_goes_to_the_kernel() {
    let t = tables();
    for mac in [[0xFF; 6], [0x01, 0x00, 0x5E, 0x00, 0x00, 0x01], [0x33, 0x33, 0, 0, 0, 1], [0x03, 0, 0, 0, 0, 0]] {
        // Routable and with TTL 1 as well: the group address is checked first.
        for ttl in [1, 64] {
            let mut p = with_ttl(to([10, 2, 0, 1]), ttl);
            p.dst_mac = mac;
            assert_eq!(decide(&t, &cfg(HashMode::Eecmp), &port(), &p), Decision::Pass(PassReason::Local), "{mac:02x?}");
        }
    }
}

#[test]
fn unicast_for_another_host_is_passed() {
    let t = tables();
    for mac in [[0x02, 0, 0, 0, 0, 0x03], [0x00, 0x11, 0x22, 0x33, 0x44, 0x55], [0x02, 0, 0, 0, 1, 0x02]] {
        let mut p = to([10, 2, 0, 1]);
        p.dst_mac = mac;
        assert_eq!(decide(&t, &cfg(HashMode::Eecmp), &port(), &p), Decision::Pass(PassReason::OtherHost));
    }
}

#[test]
fn no_route_is_dropped() {
    let t = tables();
    let c = cfg(HashMode::Eecmp);
    assert_eq!(decide(&t, &c, &port(), &to([192, 168, 1, 1])), Decision::Drop(DropReason::NoRoute));
    assert_eq!(decide(&t, &c, &port(), &v6_to([0x20; 16])), Decision::Drop(DropReason::NoRoute));
    // A route to a group the group table does not hold.
    assert_eq!(decide(&t, &c, &port(), &to([10, 8, 0, 1])), Decision::Drop(DropReason::NoRoute));
    // No route wins over an expiring TTL: the packet is not ours to answer for.
    assert_eq!(decide(&t, &c, &port(), &with_ttl(to([192, 168, 1, 1]), 1)), Decision::Drop(DropReason::NoRoute));
}

#[test]
fn local_route_goes_to_the_kernel() {
    let t = tables();
    // Even with TTL 1: a packet for the switch itself is delivered, not expired.
    for ttl in [1, 2, 64] {
        let p = with_ttl(to([10, 1, 2, 3]), ttl);
        assert_eq!(decide(&t, &cfg(HashMode::Eecmp), &port(), &p), Decision::Pass(PassReason::Local), "ttl {ttl}");
    }
}

#[test]
fn expiring_ttl_goes_to_the_kernel() {
    let t = tables();
    let c = cfg(HashMode::Eecmp);
    for ttl in [0, 1] {
        assert_eq!(decide(&t, &c, &port(), &with_ttl(to([10, 2, 0, 1]), ttl)), Decision::Pass(PassReason::TtlExpired));
        assert_eq!(decide(&t, &c, &port(), &with_ttl(v6_to(V6_DST), ttl)), Decision::Pass(PassReason::TtlExpired));
    }
    // TTL 2 leaves with TTL 1: forwarded.
    assert!(matches!(decide(&t, &c, &port(), &with_ttl(to([10, 2, 0, 1]), 2)), Decision::Forward { .. }));
    assert!(matches!(decide(&t, &c, &port(), &with_ttl(v6_to(V6_DST), 2)), Decision::Forward { .. }));
}

#[test]
fn empty_or_corrupt_group_is_dropped() {
    let mut t = tables();
    let c = cfg(HashMode::Eecmp);
    assert_eq!(decide(&t, &c, &port(), &to([10, 9, 0, 1])), Decision::Drop(DropReason::EmptyGroup));
    // A length the group cannot hold (as a corrupt map value could have) must not index out of it.
    t.groups[2].1 = EcmpGroup { len: MAX_GROUP_MEMBERS as u32 + 1, ..group(3, 4) };
    assert_eq!(decide(&t, &c, &port(), &to([10, 9, 0, 1])), Decision::Drop(DropReason::EmptyGroup));
    t.groups[2].1.len = u32::MAX;
    assert_eq!(decide(&t, &c, &port(), &to([10, 9, 0, 1])), Decision::Drop(DropReason::EmptyGroup));
}

/// Forwards `p` and checks the decision against the group the tables hold.
fn check_forward(t: &Tables, c: &SwitchConfig, p: &ParsedPacket, expect_group: u32) -> u32 {
    let Decision::Forward { group: gid, member_index, member } = decide(t, c, &port(), p) else {
        panic!("expected Forward for {p:?}, got {:?}", decide(t, c, &port(), p));
    };
    assert_eq!(gid, expect_group, "longest prefix decides the group");
    let g = t.group(gid).unwrap();
    assert!(member_index < g.len, "member {member_index} of {}", g.len);
    if t.te.is_empty() || c.hash_mode != HashMode::Te as u32 {
        assert_eq!(member_index, select_member(c, p, g.len), "decide uses select_member");
    }
    // The very member stored in the table, not a copy of another slot.
    assert!(std::ptr::eq(member, &g.members[member_index as usize]));
    assert_eq!(*member, self::member(gid, member_index));
    member_index
}

#[test]
fn forward_picks_a_live_member() {
    let t = tables();
    let mut rng = Rng::new(41);
    for mode in HashMode::ALL {
        let c = cfg(mode);
        let mut used = [[false; 5]; 6];
        for _ in 0..2000 {
            let src = [10, 200, rng.next_u8(), rng.next_u8()];
            let sport = rng.next_u16();
            let qp = rng.next_u32() & 0xFF_FFFF;
            // Group 2 (5 members, not a power of two) via the /16, group 1 via the /8.
            let a = [10, 1, rng.next_u8(), rng.next_u8()];
            // Second octet 10..200: clear of the /16s for groups 2, 3 and 4.
            let b = [10, 10 + rng.below(190) as u8, rng.next_u8(), rng.next_u8()];
            if a == [10, 1, 2, 3] {
                continue;
            }
            let i = check_forward(&t, &c, &pkt_v4(src, a, Some((sport, ROCE_PORT)), Some(qp)), 2);
            used[2][i as usize] = true;
            let i = check_forward(&t, &c, &pkt_v4(src, b, Some((sport, ROCE_PORT)), Some(qp)), 1);
            used[1][i as usize] = true;
            let mut dst6 = V6_DST;
            rng.fill(&mut dst6[8..]);
            let mut p6 = v6_to(dst6);
            p6.ports = Some((sport, ROCE_PORT));
            let i = check_forward(&t, &c, &p6, 5);
            used[5][i as usize] = true;
        }
        // Every live member carries traffic.
        assert_eq!(used[1][..4], [true; 4], "{mode:?} group 1");
        assert_eq!(used[2], [true; 5], "{mode:?} group 2");
        assert_eq!(used[5][..3], [true; 3], "{mode:?} group 5");
    }
}

#[test]
fn forward_in_pin_mode_follows_the_destination() {
    let t = tables();
    let c = SwitchConfig { pin_shift: 8, ..cfg(HashMode::Pin) };
    // Destinations 10.1.x.7 (group 2, 5 members): the member is (dst >> 8) % 5.
    for third in 0..=255u8 {
        let i = check_forward(&t, &c, &to([10, 1, third, 7]), 2);
        assert_eq!(i, (u32::from_be_bytes([10, 1, third, 7]) >> 8) % 5);
    }
}

#[test]
fn ecmp_group_from_members() {
    let members: Vec<_> = (0..65).map(|i| member(9, i)).collect();
    assert_eq!(EcmpGroup::from_members(&members), Err(TooManyMembers(65)));
    assert_eq!(EcmpGroup::from_members(&members[..64]).map(|g| g.len), Ok(64));
    let g = EcmpGroup::from_members(&members[..3]).unwrap();
    assert_eq!(g.len, 3);
    assert_eq!(g.live(), &members[..3]);
    assert!(g.members[3..].iter().all(|m| *m == GroupMember::default()));
    let empty = EcmpGroup::from_members(&[]).unwrap();
    assert_eq!(empty.len, 0);
    assert!(empty.live().is_empty());
    // live() never reaches past the array, whatever len says.
    let corrupt = EcmpGroup { len: 1000, ..g };
    assert_eq!(corrupt.live().len(), MAX_GROUP_MEMBERS);
}

#[test]
fn verifier_mask_masks() {
    assert_eq!(verifier_mask(5, 63), 5);
    assert_eq!(verifier_mask(64, 63), 0);
    assert_eq!(verifier_mask(0xFFFF_FFFF, 63), 63);
}

/// A host port accepts only its host's source address; other ports accept any.
#[test]
fn host_ports_drop_spoofed_sources() {
    let t = tables();
    let cfg = SwitchConfig::new(HashMode::FiveTuple, 1, 0);
    let pkt = to([10, 1, 0, 9]);
    let src = [10, 200, 0, 1];
    let genuine = PortInfo::host(1, PORT_MAC, src, [0; 16]);
    assert!(matches!(decide(&t, &cfg, &genuine, &pkt), Decision::Forward { .. }));
    let other = PortInfo::host(1, PORT_MAC, [198, 18, 9, 9], [0; 16]);
    assert_eq!(decide(&t, &cfg, &other, &pkt), Decision::Drop(DropReason::SpoofedSource));
    assert!(matches!(decide(&t, &cfg, &PortInfo::new(1, PORT_MAC), &pkt), Decision::Forward { .. }));
}

/// Traffic for the switch itself is the switch kernel's, whatever its source: a host's
/// link-local IPv6 to its own switch used to be dropped as spoofed. What it would forward is
/// still guarded.
#[test]
fn local_traffic_passes_before_the_source_guard() {
    let t = tables();
    let cfg = SwitchConfig::new(HashMode::FiveTuple, 1, 0);
    let host_v6 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
    let host_port = PortInfo::host(1, PORT_MAC, [198, 18, 0, 1], host_v6);
    let fe80 = |last: u8| [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last];
    // fe80::1 -> fe80::2 (the switch): a link-local source is not the host's address.
    let mut ll = v6_to(fe80(2));
    ll.ip = IpHeader::V6 { src: fe80(1), dst: fe80(2), hop_limit: 255, traffic_class: 0 };
    assert_eq!(decide(&t, &cfg, &host_port, &ll), Decision::Pass(PassReason::Local));
    // A link-local destination is never routed, on any port (febf:: is still fe80::/10).
    let mut edge = ll;
    edge.ip = IpHeader::V6 {
        src: fe80(1),
        dst: [0xfe, 0xbf, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        hop_limit: 64,
        traffic_class: 0,
    };
    assert_eq!(decide(&t, &cfg, &PortInfo::new(1, PORT_MAC), &edge), Decision::Pass(PassReason::Local));
    // fec0:: is outside fe80::/10: routed (and here unknown).
    let mut site = ll;
    site.ip = IpHeader::V6 {
        src: host_v6,
        dst: [0xfe, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        hop_limit: 64,
        traffic_class: 0,
    };
    assert_eq!(decide(&t, &cfg, &host_port, &site), Decision::Drop(DropReason::NoRoute));
    // A spoofed IPv4 source to the switch's own address goes to its kernel ...
    assert_eq!(decide(&t, &cfg, &host_port, &to([10, 1, 2, 3])), Decision::Pass(PassReason::Local));
    // ... but one it would forward is dropped, link-local source or not.
    assert_eq!(decide(&t, &cfg, &host_port, &to([10, 1, 0, 9])), Decision::Drop(DropReason::SpoofedSource));
    let mut ll_out = v6_to([0xfd, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
    ll_out.ip = IpHeader::V6 {
        src: fe80(1),
        dst: [0xfd, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7],
        hop_limit: 64,
        traffic_class: 0,
    };
    assert_eq!(decide(&t, &cfg, &host_port, &ll_out), Decision::Drop(DropReason::SpoofedSource));
}

#[test]
fn te_mode_follows_the_controllers_entry_and_falls_back_to_eecmp() {
    let mut t = tables();
    let p = to([10, 200, 7, 7]); // group 1, 4 members
    let te = cfg(HashMode::Te);
    let hashed = select_member(&cfg(HashMode::Eecmp), &p, 4);
    // No entry: exactly E-ECMP's choice (the TE mode hashes the eecmp key).
    assert_eq!(check_forward(&t, &te, &p, 1), hashed);
    assert_eq!(select_member(&te, &p, 4), hashed);
    // An entry for this flow and group wins, whatever the hash says.
    let want = (hashed + 1) % 4;
    t.te.push((te_key(&p), TeEntry { group: 1, member_index: want }));
    assert_eq!(check_forward(&t, &te, &p, 1), want);
    // Other modes ignore the table.
    assert_eq!(check_forward(&t, &cfg(HashMode::Eecmp), &p, 1), hashed);
    // Another QP of the same five-tuple is another flow: no entry, hashed.
    let mut other_qp = p;
    other_qp.bth.as_mut().unwrap().dest_qp ^= 1;
    assert_eq!(check_forward(&t, &te, &other_qp, 1), select_member(&cfg(HashMode::Eecmp), &other_qp, 4));
    // A stale entry (another group, or a member the group no longer has) is ignored.
    t.te[0].1 = TeEntry { group: 2, member_index: want };
    assert_eq!(check_forward(&t, &te, &p, 1), hashed);
    t.te[0].1 = TeEntry { group: 1, member_index: 4 };
    assert_eq!(check_forward(&t, &te, &p, 1), hashed);
}
