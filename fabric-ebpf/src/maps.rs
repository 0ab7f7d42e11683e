//! Every map of the switch program, and the [`ForwardingTables`] view the decision code uses.
//! Names are the contract with the controller (`fabric_user::dataplane`).
use aya_ebpf::{
    macros::map,
    maps::{Array, DevMap, PerCpuArray, lpm_trie::{Key, LpmTrie}},
};
use fabric_common::{
    config::{MAX_IFINDEX, MAX_PORTS, PortInfo, SwitchConfig},
    counters::{MemberCounters, PortCounters},
    forward::ForwardingTables,
    route::{EcmpGroup, MAX_GROUP_MEMBERS, MAX_GROUPS, MAX_ROUTES, RouteTarget},
};

/// Switch-wide settings (one entry).
#[map]
pub static CONFIG: Array<SwitchConfig> = Array::with_max_entries(1, 0);

/// Ingress ifindex -> port.
#[map]
pub static PORTS: Array<PortInfo> = Array::with_max_entries(MAX_IFINDEX, 0);

/// Port index -> egress ifindex.
#[map]
pub static EGRESS: DevMap = DevMap::with_max_entries(MAX_PORTS, 0);

#[map]
pub static ROUTES_V4: LpmTrie<[u8; 4], RouteTarget> = LpmTrie::with_max_entries(MAX_ROUTES, 0);

#[map]
pub static ROUTES_V6: LpmTrie<[u8; 16], RouteTarget> = LpmTrie::with_max_entries(MAX_ROUTES, 0);

#[map]
pub static GROUPS: Array<EcmpGroup> = Array::with_max_entries(MAX_GROUPS, 0);

#[map]
pub static PORT_COUNTERS: PerCpuArray<PortCounters> = PerCpuArray::with_max_entries(MAX_PORTS, 0);

/// Indexed by `group * MAX_GROUP_MEMBERS + member`.
#[map]
pub static MEMBER_COUNTERS: PerCpuArray<MemberCounters> =
    PerCpuArray::with_max_entries(MAX_GROUPS * MAX_GROUP_MEMBERS as u32, 0);

/// The maps as the shared decision code sees them.
pub struct Tables;

impl ForwardingTables for Tables {
    #[inline(always)]
    fn route_v4(&self, dst: &[u8; 4]) -> Option<RouteTarget> {
        ROUTES_V4.get(Key::new(32, *dst)).copied()
    }

    #[inline(always)]
    fn route_v6(&self, dst: &[u8; 16]) -> Option<RouteTarget> {
        ROUTES_V6.get(Key::new(128, *dst)).copied()
    }

    #[inline(always)]
    fn group(&self, id: u32) -> Option<&EcmpGroup> {
        GROUPS.get(id)
    }
}
