//! Central route computation, as a traffic-engineering controller does it: for every switch and
//! every destination host, the ECMP group of all next hops on shortest paths over the links that
//! are up. The result is written into the switches' XDP maps by [`crate::testbed`].
use std::{
    collections::{BTreeSet, HashMap, VecDeque},
    net::{Ipv4Addr, Ipv6Addr},
};

use fabric_common::route::{EcmpGroup, GroupMember, ROUTE_LOCAL, RouteTarget};

use crate::model::plan::{LinkId, NodeId, Plan};

/// One switch's forwarding state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwitchTables {
    /// Member port indices of each group (sorted, so `pin` indexes a stable order).
    pub groups: Vec<Vec<usize>>,
    pub routes_v4: Vec<(Ipv4Addr, u8, RouteTarget)>,
    pub routes_v6: Vec<(Ipv6Addr, u8, RouteTarget)>,
}

impl SwitchTables {
    /// The map value of group `id` of switch `node`. A validated topology's groups fit when every
    /// link is up; failed links can make more: a CTSW cut off from a rack reaches it down through
    /// every other rack, a group the XDP map cannot hold, which is an error here, not a panic.
    pub fn ecmp_group(&self, plan: &Plan, node: NodeId, id: usize) -> anyhow::Result<EcmpGroup> {
        let ports = &plan.nodes[node].ports;
        let members: Vec<GroupMember> = self.groups[id]
            .iter()
            .map(|&p| GroupMember {
                port: p as u32,
                dst_mac: plan.nodes[ports[p].peer_node].ports[ports[p].peer_port].mac,
                src_mac: ports[p].mac,
            })
            .collect();
        EcmpGroup::from_members(&members).map_err(|e| {
            anyhow::anyhow!(
                "{}'s routes around the links that are down need a group of {} ports, more than the {} a \
                 switch holds",
                plan.nodes[node].name,
                e.0,
                fabric_common::route::MAX_GROUP_MEMBERS
            )
        })
    }

    /// The route a packet to `dst` takes here: the longest prefix that holds it, as the XDP
    /// program's LPM trie finds it.
    pub fn route_v4(&self, dst: Ipv4Addr) -> Option<RouteTarget> {
        let dst = u32::from(dst);
        let holds = |a: Ipv4Addr, len: u8| len == 0 || (u32::from(a) ^ dst) >> (32 - u32::from(len)) == 0;
        self.routes_v4.iter().filter(|&&(a, len, _)| holds(a, len)).max_by_key(|r| r.1).map(|r| r.2)
    }

    /// The group ports a destination host's traffic may take from this switch.
    pub fn next_hops_v4(&self, dst: Ipv4Addr) -> Option<&[usize]> {
        let target = self.route_v4(dst).filter(|&t| t != ROUTE_LOCAL)?;
        self.groups.get(target as usize).map(Vec::as_slice)
    }
}

/// Hop distance from `dst` to every node over links that are up; hosts other than `dst` are not
/// transited (they are leaves anyway).
fn distances(plan: &Plan, dst: NodeId, down: &BTreeSet<LinkId>) -> Vec<Option<u32>> {
    let mut dist = vec![None; plan.nodes.len()];
    dist[dst] = Some(0);
    let mut queue = VecDeque::from([dst]);
    while let Some(n) = queue.pop_front() {
        if n != dst && !plan.nodes[n].role.is_switch() {
            continue;
        }
        let d = dist[n].expect("queued nodes have a distance");
        for port in &plan.nodes[n].ports {
            if down.contains(&port.link) || dist[port.peer_node].is_some() {
                continue;
            }
            dist[port.peer_node] = Some(d + 1);
            queue.push_back(port.peer_node);
        }
    }
    dist
}

/// Tables for every node (`None` for hosts), with the links in `down` out of service.
///
/// Each switch routes the address block of a host link (the host's address and its gateway's,
/// a /31 and a /127) towards the group of next hops to that host, and blocks of neighbouring
/// host links that share a group as one prefix ([`aggregate`]): a rack's hosts, which the plan
/// numbers consecutively, become one route on every switch outside the rack, as a rack's prefix
/// is advertised in a real fabric. A switch then holds routes for its racks, not for every host:
/// the tables of a 4,096-host testbed shrink 16-fold and bring-up stops growing with
/// switches x hosts. Exactly the host links' addresses are routed, no others.
pub fn compute(plan: &Plan, down: &BTreeSet<LinkId>) -> Vec<Option<SwitchTables>> {
    let mut tables: Vec<Option<SwitchTables>> =
        plan.nodes.iter().map(|n| n.role.is_switch().then(SwitchTables::default)).collect();
    let mut group_ids: Vec<HashMap<Vec<usize>, u32>> = vec![HashMap::new(); plan.nodes.len()];
    // Per switch, each reachable host's group, by host.
    let mut host_groups: Vec<Vec<(NodeId, u32)>> = vec![Vec::new(); plan.nodes.len()];

    for host in plan.hosts() {
        let dist = distances(plan, host, down);
        for sw in plan.switches() {
            let Some(d) = dist[sw] else { continue };
            let hops: Vec<usize> = plan.nodes[sw]
                .ports
                .iter()
                .enumerate()
                .filter(|(_, p)| !down.contains(&p.link) && dist[p.peer_node] == Some(d - 1))
                .map(|(i, _)| i)
                .collect();
            let t = tables[sw].as_mut().expect("switches have tables");
            let next = t.groups.len() as u32;
            let id = *group_ids[sw].entry(hops.clone()).or_insert_with(|| {
                t.groups.push(hops);
                next
            });
            host_groups[sw].push((host, id));
        }
    }
    for sw in plan.switches() {
        let t = tables[sw].as_mut().expect("switches have tables");
        let v4: Vec<(u128, RouteTarget)> =
            host_groups[sw].iter().map(|&(h, g)| (u128::from(u32::from(plan.host_ipv4(h)) & !1), g)).collect();
        let v6: Vec<(u128, RouteTarget)> =
            host_groups[sw].iter().map(|&(h, g)| (u128::from(plan.host_ipv6(h)) & !1, g)).collect();
        t.routes_v4 = aggregate(v4, 32).into_iter().map(|(a, len, g)| (Ipv4Addr::from(a as u32), len, g)).collect();
        t.routes_v6 = aggregate(v6, 128).into_iter().map(|(a, len, g)| (Ipv6Addr::from(a), len, g)).collect();
        for port in &plan.nodes[sw].ports {
            t.routes_v4.push((port.ipv4, 32, ROUTE_LOCAL));
            t.routes_v6.push((port.ipv6, 128, ROUTE_LOCAL));
        }
    }
    tables
}

/// The fewest prefixes that route every block (a /`bits - 1` pair of addresses, given by its
/// even address) to its group and hold no other address: a prefix is taken whole only when
/// every block in it is listed and all share one group, otherwise its halves are tried.
pub fn aggregate(mut blocks: Vec<(u128, RouteTarget)>, bits: u8) -> Vec<(u128, u8, RouteTarget)> {
    fn cover(blocks: &[(u128, RouteTarget)], base: u128, len: u8, bits: u8, out: &mut Vec<(u128, u8, RouteTarget)>) {
        let size_in_blocks = 1u128 << (bits - len - 1);
        let group = blocks[0].1;
        if blocks.len() as u128 == size_in_blocks && blocks.iter().all(|b| b.1 == group) {
            out.push((base, len, group));
            return;
        }
        let half = base + (1u128 << (bits - len - 1));
        let split = blocks.partition_point(|b| b.0 < half);
        for (part, base) in [(&blocks[..split], base), (&blocks[split..], half)] {
            if !part.is_empty() {
                cover(part, base, len + 1, bits, out);
            }
        }
    }
    blocks.sort_unstable();
    blocks.dedup_by_key(|b| b.0);
    let mut out = Vec::new();
    if !blocks.is_empty() {
        cover(&blocks, 0, 0, bits, &mut out);
    }
    out
}

/// Where each of a switch's groups lives in its `GROUPS` map (slot per group, in the order of
/// [`SwitchTables::groups`]). An update must never rewrite a slot that the routes in force
/// point at: a packet forwarded meanwhile would see a torn group, or a group renumbered under
/// its route. So a group whose members did not change keeps its slot, and every other one gets
/// a slot that the installed tables do not use; the routes are switched after the groups are
/// written, one atomic map update each, and the slots they no longer name are free for the next
/// update. The first installation (`installed = None`) puts group `i` in slot `i`.
pub fn assign_slots(
    installed: Option<(&SwitchTables, &[u32])>,
    new: &SwitchTables,
    capacity: u32,
) -> Result<Vec<u32>, String> {
    let Some((old, old_slots)) = installed else {
        if new.groups.len() > capacity as usize {
            return Err(format!("{} ECMP groups do not fit the switch's {capacity}", new.groups.len()));
        }
        return Ok((0..new.groups.len() as u32).collect());
    };
    let live: HashMap<&[usize], u32> = old.groups.iter().map(Vec::as_slice).zip(old_slots.iter().copied()).collect();
    let mut used: BTreeSet<u32> = old_slots.iter().copied().collect();
    let mut slots = Vec::with_capacity(new.groups.len());
    for g in &new.groups {
        let slot = match live.get(g.as_slice()) {
            Some(&s) => s,
            None => {
                let free = (0..capacity).find(|s| !used.contains(s)).ok_or_else(|| {
                    format!(
                        "no free ECMP group slot: {} groups in force and {} new ones exceed the switch's {capacity}",
                        old.groups.len(),
                        new.groups.len()
                    )
                })?;
                used.insert(free);
                free
            }
        };
        slots.push(slot);
    }
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{model::plan::Role, model::topology::Topology};

    fn default_plan() -> Plan {
        Plan::new(&Topology::default_topology())
    }

    fn tables(groups: &[&[usize]]) -> SwitchTables {
        SwitchTables { groups: groups.iter().map(|g| g.to_vec()).collect(), ..Default::default() }
    }

    #[test]
    fn an_update_never_writes_a_slot_in_force() {
        let old = tables(&[&[1, 2, 3, 4], &[0], &[2, 3, 4]]);
        let old_slots = assign_slots(None, &old, 8).unwrap();
        assert_eq!(old_slots, [0, 1, 2]);
        // A link down: one group shrinks, one is new, one is unchanged and one gone.
        let new = tables(&[&[0], &[1, 3, 4], &[3, 4], &[2, 3, 4]]);
        let slots = assign_slots(Some((&old, &old_slots)), &new, 8).unwrap();
        assert_eq!(slots[0], 1, "an unchanged group keeps its slot");
        assert_eq!(slots[3], 2);
        for s in [slots[1], slots[2]] {
            assert!(!old_slots.contains(&s), "slot {s} is in force");
        }
        assert_ne!(slots[1], slots[2]);
        // The next update may reuse what the routes no longer name (slot 0), never slots[..].
        let newer = tables(&[&[1, 2, 3, 4], &[0]]);
        let again = assign_slots(Some((&new, &slots)), &newer, 8).unwrap();
        assert_eq!(again[1], 1);
        assert!(!slots.contains(&again[0]));
        // Too many groups for the map: an error naming the limit, not a wrapped slot.
        let e = assign_slots(Some((&old, &old_slots)), &tables(&[&[9], &[8], &[7]]), 4).unwrap_err();
        assert!(e.contains("exceed the switch's 4"), "{e}");
        assert!(assign_slots(None, &tables(&[&[1], &[2]]), 1).is_err());
    }

    #[test]
    fn rtsw_spreads_remote_hosts_over_every_spine_and_local_hosts_go_down() {
        let plan = default_plan();
        let t = compute(&plan, &BTreeSet::new());
        let r0 = plan.node_by_name("z0r0").unwrap();
        let tables = t[r0].as_ref().unwrap();
        let remote = plan.host_ipv4(plan.node_by_name("z0r3h1").unwrap());
        let local = plan.host_ipv4(plan.node_by_name("z0r0h1").unwrap());
        assert_eq!(tables.next_hops_v4(remote).unwrap(), plan.uplinks(r0).as_slice());
        assert_eq!(tables.next_hops_v4(remote).unwrap().len(), 4);
        let down = tables.next_hops_v4(local).unwrap();
        assert_eq!(down.len(), 1);
        assert_eq!(plan.nodes[r0].ports[down[0]].peer_node, plan.node_by_name("z0r0h1").unwrap());
        // A CTSW reaches a rack over that rack's links only.
        let c2 = plan.node_by_name("z0c2").unwrap();
        let hops = t[c2].as_ref().unwrap().next_hops_v4(remote).unwrap();
        assert_eq!(hops.len(), 1);
        assert_eq!(plan.nodes[plan.nodes[c2].ports[hops[0]].peer_node].name, "z0r3");
        // Every switch owns its port addresses.
        assert!(
            tables
                .routes_v4
                .iter()
                .any(|&(a, l, tgt)| a == plan.nodes[r0].ports[0].ipv4 && l == 32 && tgt == ROUTE_LOCAL)
        );
    }

    #[test]
    fn a_failed_spine_link_leaves_the_other_paths_in_the_groups() {
        let plan = default_plan();
        let r0 = plan.node_by_name("z0r0").unwrap();
        let c1 = plan.node_by_name("z0c1").unwrap();
        let link = plan.nodes[r0].ports.iter().find(|p| p.peer_node == c1).unwrap().link;
        let t = compute(&plan, &BTreeSet::from([link]));
        let remote = plan.host_ipv4(plan.node_by_name("z0r2h0").unwrap());
        let hops = t[r0].as_ref().unwrap().next_hops_v4(remote).unwrap();
        assert_eq!(hops.len(), 3);
        assert!(hops.iter().all(|&p| plan.nodes[r0].ports[p].link != link));
        // c1 can no longer reach rack 0 directly: it goes down to another rack and back up.
        let h00 = plan.host_ipv4(plan.node_by_name("z0r0h0").unwrap());
        let via = t[c1].as_ref().unwrap().next_hops_v4(h00).unwrap();
        assert_eq!(via.len(), 3, "c1 reaches rack 0 through the three other RTSWs");
        assert!(via.iter().all(|&p| plan.nodes[plan.nodes[c1].ports[p].peer_node].role == Role::Rtsw));
    }

    /// 100 racks under 2 spines validate (groups of at most 2 members), but with z0r0-z0c0 down
    /// z0c0 reaches rack 0 through the 99 other RTSWs: an error naming the switch, not a panic.
    #[test]
    fn a_group_too_large_after_a_failure_is_an_error() {
        let plan = Plan::new(&crate::forwarding::fabric::synthetic(1, 100, 1, 2, 0));
        let r0 = plan.node_by_name("z0r0").unwrap();
        let c0 = plan.node_by_name("z0c0").unwrap();
        let link = plan.nodes[r0].ports.iter().find(|p| p.peer_node == c0).unwrap().link;
        let groups = |down: BTreeSet<usize>| {
            let t = compute(&plan, &down);
            let tables = t[c0].as_ref().unwrap();
            (0..tables.groups.len()).map(|id| tables.ecmp_group(&plan, c0, id)).collect::<anyhow::Result<Vec<_>>>()
        };
        assert!(groups(BTreeSet::new()).is_ok());
        let e = groups(BTreeSet::from([link])).unwrap_err().to_string();
        assert!(e.starts_with("z0c0's routes around the links that are down need a group of 99 ports"), "{e}");
    }

    #[test]
    fn groups_become_ecmp_groups_with_the_neighbours_macs() {
        let plan = default_plan();
        let t = compute(&plan, &BTreeSet::new());
        let r1 = plan.node_by_name("z0r1").unwrap();
        let tables = t[r1].as_ref().unwrap();
        for id in 0..tables.groups.len() {
            let g = tables.ecmp_group(&plan, r1, id).unwrap();
            for m in g.live() {
                let port = &plan.nodes[r1].ports[m.port as usize];
                assert_eq!(m.src_mac, port.mac);
                assert_eq!(m.dst_mac, plan.nodes[port.peer_node].ports[port.peer_port].mac);
            }
        }
    }

    /// LPM over aggregated prefixes, as a list (the XDP trie's rule).
    fn lookup(routes: &[(u128, u8, RouteTarget)], bits: u8, addr: u128) -> Option<RouteTarget> {
        let holds = |base: u128, len: u8| len == 0 || (base ^ addr) >> (bits - len) == 0;
        routes.iter().filter(|r| holds(r.0, r.1)).max_by_key(|r| r.1).map(|r| r.2)
    }

    /// Random sets of blocks and groups: every listed block's two addresses route to its group,
    /// every unlisted address routes nowhere, and no prefix overlaps another.
    #[test]
    fn aggregated_prefixes_route_exactly_the_listed_blocks() {
        let mut rng = fabric_common::rng::SplitMix64::new(5);
        for trial in 0..300 {
            let groups = 1 + rng.below(3) as u32;
            let mut blocks: Vec<(u128, RouteTarget)> = Vec::new();
            for b in 0..128u128 {
                if rng.below(4) != 0 {
                    blocks.push((2 * b, rng.below(groups as usize) as u32));
                }
            }
            let routes = aggregate(blocks.clone(), 8);
            for addr in 0..256u128 {
                let want = blocks.iter().find(|b| b.0 == addr & !1).map(|b| b.1);
                assert_eq!(lookup(&routes, 8, addr), want, "trial {trial}, address {addr}: {routes:?}");
            }
            for (i, a) in routes.iter().enumerate() {
                for b in &routes[i + 1..] {
                    let (short, long) = if a.1 <= b.1 { (a, b) } else { (b, a) };
                    assert!(short.1 > 0 && (short.0 ^ long.0) >> (8 - short.1) != 0, "{a:?} overlaps {b:?}");
                }
            }
        }
    }

    /// One group for every block makes one prefix when the blocks fill it, and a gap splits it.
    #[test]
    fn full_runs_of_one_group_become_one_prefix() {
        let run = |n: u128, from: u128| (from..from + n).map(|b| (2 * b, 7)).collect::<Vec<_>>();
        assert_eq!(aggregate(run(16, 16), 32), [(32, 27, 7)]);
        assert_eq!(aggregate(run(2, 0), 128), [(0, 126, 7)]);
        let mut gap = run(16, 16);
        gap.remove(3);
        assert_eq!(aggregate(gap, 32).len(), 4, "a 32-address block missing one pair: /28 + /29 + /30 + /31");
        assert!(aggregate(Vec::new(), 32).is_empty());
    }

    /// On a zone of 16 hosts and 16 spines per rack (a rack's links fill an aligned block of 64
    /// addresses) every switch outside a rack routes it with one prefix per family, and every
    /// host still gets the group `routing` chose for it.
    #[test]
    fn a_rack_is_one_route_outside_it() {
        let topo = crate::forwarding::fabric::synthetic(1, 4, 16, 16, 1);
        let plan = Plan::new(&topo);
        let t = compute(&plan, &BTreeSet::new());
        let spine = plan.switches().find(|&s| plan.nodes[s].role == Role::Ctsw).unwrap();
        let st = t[spine].as_ref().unwrap();
        let host_routes = st.routes_v4.iter().filter(|r| r.2 != ROUTE_LOCAL).count();
        assert_eq!(host_routes, 4, "one per rack: {:?}", st.routes_v4);
        assert_eq!(st.routes_v6.iter().filter(|r| r.2 != ROUTE_LOCAL).count(), 4);
        for h in plan.hosts() {
            let hops = st.next_hops_v4(plan.host_ipv4(h)).unwrap();
            assert_eq!(hops, [plan.nodes[spine].ports.iter().position(|p| p.peer_node == plan.rtsw_of(h)).unwrap()]);
        }
    }
}
