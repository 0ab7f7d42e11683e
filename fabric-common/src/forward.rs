//! The forwarding decision of one switch for one packet, over abstract tables so that the XDP
//! program (map lookups), the controller and the simulator all run the same code.
use crate::balance::{MemberState, balance};
use crate::config::{HashMode, PortInfo, SwitchConfig};
use crate::counters::{DropReason, PassReason};
use crate::hash::select_member;
use crate::parse::{IpHeader, ParsedPacket};
pub use crate::route::verifier_mask;
use crate::route::{EcmpGroup, GroupMember, MAX_GROUP_MEMBERS, ROUTE_LOCAL, RouteTarget};
use crate::te::te_key;
use crate::wire::ethernet;

/// The switch's routing state: the XDP program backs it with maps, tests with plain structs.
/// What the member choice reads beyond the routes and groups (the TE table, the flowlet table,
/// queues, weights) is its [`MemberState`].
pub trait ForwardingTables: MemberState {
    fn route_v4(&self, dst: &[u8; 4]) -> Option<RouteTarget>;
    fn route_v6(&self, dst: &[u8; 16]) -> Option<RouteTarget>;
    fn group(&self, id: u32) -> Option<&EcmpGroup>;
}

/// What happens to a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision<'a> {
    /// Hand it to the kernel's stack (XDP_PASS).
    Pass(PassReason),
    /// Drop it and count why.
    Drop(DropReason),
    /// Send it out of `member.port` after rewriting MACs and TTL.
    Forward { group: u32, member_index: u32, member: &'a GroupMember },
}

/// Decides the fate of a parsed packet that arrived on `port`. Order: frames not for this
/// switch's MAC go to the kernel; so do packets for the switch itself (its own addresses, and
/// IPv6 link-local destinations, which are never routed); a host port then accepts only its
/// host's source address for what it forwards; then the TTL, the group and the member.
///
/// The source guard comes after the local check because it protects the fabric's forwarding:
/// a host's link-local traffic to its own switch (neighbour discovery, a ping to fe80::) has a
/// link-local source, not the host's address, and belongs to the switch's kernel.
#[inline(always)]
pub fn decide<'a, T: ForwardingTables>(
    tables: &'a T,
    cfg: &SwitchConfig,
    port: &PortInfo,
    pkt: &ParsedPacket,
) -> Decision<'a> {
    if ethernet::is_group_address(&pkt.dst_mac) {
        return Decision::Pass(PassReason::Local);
    }
    if pkt.dst_mac != port.mac {
        return Decision::Pass(PassReason::OtherHost);
    }
    let (target, ttl) = match &pkt.ip {
        IpHeader::V6 { dst, .. } if is_ipv6_link_local(dst) => return Decision::Pass(PassReason::Local),
        IpHeader::V4 { dst, ttl, .. } => (tables.route_v4(dst), *ttl),
        IpHeader::V6 { dst, hop_limit, .. } => (tables.route_v6(dst), *hop_limit),
    };
    if target == Some(ROUTE_LOCAL) {
        return Decision::Pass(PassReason::Local);
    }
    if port.is_host() {
        let genuine = match &pkt.ip {
            IpHeader::V4 { src, .. } => *src == port.host_ipv4,
            IpHeader::V6 { src, .. } => *src == port.host_ipv6,
        };
        if !genuine {
            return Decision::Drop(DropReason::SpoofedSource);
        }
    }
    let Some(group_id) = target else {
        return Decision::Drop(DropReason::NoRoute);
    };
    if ttl <= 1 {
        return Decision::Pass(PassReason::TtlExpired);
    }
    let Some(group) = tables.group(group_id) else {
        return Decision::Drop(DropReason::NoRoute);
    };
    let n = group.len;
    if n == 0 || n as usize > MAX_GROUP_MEMBERS {
        return Decision::Drop(DropReason::EmptyGroup);
    }
    let chosen = choose_member(cfg, pkt, group_id, n, tables);
    let member_index = verifier_mask(chosen, MAX_GROUP_MEMBERS as u32 - 1);
    match group.members.get(member_index as usize) {
        Some(member) => Decision::Forward { group: group_id, member_index, member },
        None => Decision::Drop(DropReason::EmptyGroup),
    }
}

/// The member index (in `0..n`) of group `group_id` that a switch configured with `cfg` sends
/// `pkt` to: in `te` mode the controller's entry (`state.te_entry`) if it still fits the
/// group, else the hash ([`select_member`]); in `flowlet`, `adaptive`, `spray` and `wcmp` the
/// rule of [`crate::balance`] over `state`; else the hash. `n` must be non-zero. [`decide`] and
/// the simulators call this one function.
#[inline(always)]
pub fn choose_member<S: MemberState + ?Sized>(
    cfg: &SwitchConfig,
    pkt: &ParsedPacket,
    group_id: u32,
    n: u32,
    state: &S,
) -> u32 {
    match HashMode::from_u32(cfg.hash_mode) {
        HashMode::Te => match state.te_entry(&te_key(pkt)) {
            Some(e) if e.group == group_id && e.member_index < n => e.member_index,
            _ => select_member(cfg, pkt, n),
        },
        HashMode::FiveTuple | HashMode::Eecmp | HashMode::Pin => select_member(cfg, pkt, n),
        _ => balance(cfg, pkt, group_id, n, state).unwrap_or_else(|| select_member(cfg, pkt, n)),
    }
}

/// fe80::/10: link-local unicast, scoped to one link, so never forwarded.
#[inline(always)]
pub const fn is_ipv6_link_local(addr: &[u8; 16]) -> bool {
    addr[0] == 0xfe && addr[1] & 0xc0 == 0x80
}
