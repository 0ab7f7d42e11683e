//! The simulated fabric: the testbed's [`Plan`] (same node ids, ports, addresses and per-switch
//! seeds as `fabric up` derives), each switch's [`SwitchConfig`], and its ECMP groups with their
//! member ports in the order the controller installs them.
//!
//! Two ways to find a destination's group:
//! - [`SimFabric::from_controller`]: the controller's own tables (`routing::compute`), with the
//!   controller's group ids: exact for any topology and any set of failed links, so that
//!   predictions index the XDP member counters. Its tables grow as switches x hosts.
//! - [`SimFabric::clos`]: the same groups derived from the Clos structure (RTSW: one group per
//!   local host, then the uplinks; CTSW: one per rack of its zone, then the ATSW ports; ATSW: one
//!   per zone), with every link up. Linear in the fabric's size, for 24K-GPU fabrics; a unit
//!   test checks that it yields the controller's member ports for every switch and destination.
use std::collections::{BTreeSet, HashMap};

use anyhow::{Result, ensure};
use fabric_common::{
    config::{HashMode, SwitchConfig},
    route::ROUTE_LOCAL,
};

use crate::{
    model::plan::{LinkId, NodeId, Plan, Role, switch_seed},
    model::routing,
    model::topology::{AtswLayer, Topology, Zone},
};

/// How a switch finds the group of a destination host.
#[derive(Clone, Debug)]
enum Lookup {
    Clos,
    /// Per switch: destination host -> controller group id.
    Table(Vec<HashMap<NodeId, u32>>),
}

#[derive(Clone, Debug)]
pub struct SimFabric {
    pub plan: Plan,
    /// Per node (hosts: unused): what the XDP program's CONFIG map holds.
    pub configs: Vec<SwitchConfig>,
    /// Per node, per group id: member port indices, in installed order.
    groups: Vec<Vec<Vec<usize>>>,
    /// Per node, per group id: index of the group's first member in a flat member array.
    slot_base: Vec<Vec<usize>>,
    slots: usize,
    lookup: Lookup,
    /// In `te` mode: the controller's entries per (switch, flow key), as the TE_FLOWS maps hold
    /// them.
    pub te: HashMap<(NodeId, fabric_common::te::TeKey), fabric_common::te::TeEntry>,
    /// Injected loss per switch port (node, port index, parts per million), as `fabric link
    /// degrade --loss` sets it on the testbed; only the packet model reads it.
    pub loss: Vec<(NodeId, usize, u32)>,
}

impl SimFabric {
    fn new(plan: Plan, groups: Vec<Vec<Vec<usize>>>, lookup: Lookup) -> Self {
        let configs = plan.nodes.iter().map(|n| plan.topology.switch_config(n.hash, n.seed)).collect();
        let mut slots = 0;
        let slot_base = groups
            .iter()
            .map(|gs| {
                gs.iter()
                    .map(|g| {
                        let b = slots;
                        slots += g.len();
                        b
                    })
                    .collect()
            })
            .collect();
        SimFabric { plan, configs, groups, slot_base, slots, lookup, te: HashMap::new(), loss: Vec::new() }
    }

    /// The controller's tables with `down` links out of service; group ids are the controller's.
    pub fn from_controller(plan: &Plan, down: &BTreeSet<LinkId>) -> Self {
        let tables = routing::compute(plan, down);
        // Hosts by address, so that each route (a prefix) finds the hosts it holds.
        let mut by_ip: Vec<(u32, NodeId)> = plan.hosts().map(|h| (u32::from(plan.host_ipv4(h)), h)).collect();
        by_ip.sort_unstable();
        let mut groups = Vec::new();
        let mut lookups = Vec::new();
        for t in &tables {
            let mut map = HashMap::new();
            match t {
                Some(t) => {
                    // Host routes never overlap (`routing::aggregate`); local routes hold no host.
                    for &(addr, len, target) in t.routes_v4.iter().filter(|r| r.2 != ROUTE_LOCAL) {
                        let first = u32::from(addr);
                        let last = first | u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
                        let from = by_ip.partition_point(|&(a, _)| a < first);
                        for &(_, h) in by_ip[from..].iter().take_while(|&&(a, _)| a <= last) {
                            map.insert(h, target);
                        }
                    }
                    groups.push(t.groups.clone());
                }
                None => groups.push(Vec::new()),
            }
            lookups.push(map);
        }
        Self::new(plan.clone(), groups, Lookup::Table(lookups))
    }

    /// Groups from the Clos structure (every link up), linear in the fabric's size.
    pub fn clos(plan: Plan) -> Result<Self> {
        let mut groups = Vec::with_capacity(plan.nodes.len());
        for (n, node) in plan.nodes.iter().enumerate() {
            let peer = |p: &crate::model::plan::Port| &plan.nodes[p.peer_node];
            let mut down: Vec<Vec<usize>> = Vec::new();
            let mut up = Vec::new();
            let put = |down: &mut Vec<Vec<usize>>, i: usize, p: usize| {
                if down.len() <= i {
                    down.resize(i + 1, Vec::new());
                }
                down[i].push(p);
            };
            for (i, p) in node.ports.iter().enumerate() {
                let pn = peer(p);
                match (node.role, pn.role) {
                    (Role::Host, _) => {}
                    (Role::Rtsw, Role::Host) => {
                        ensure!(i == down.len(), "{}: host ports must come first", node.name);
                        put(&mut down, i, i);
                    }
                    (Role::Rtsw, Role::Ctsw) | (Role::Ctsw, Role::Atsw) => up.push(i),
                    (Role::Ctsw, Role::Rtsw) => put(&mut down, pn.rack.expect("rtsw rack"), i),
                    (Role::Atsw, Role::Ctsw) => put(&mut down, pn.zone.expect("ctsw zone"), i),
                    (a, b) => anyhow::bail!("{}: unexpected {a:?}-{b:?} link for a Clos", plan.nodes[n].name),
                }
            }
            if node.role.is_switch() {
                ensure!(down.iter().all(|g| !g.is_empty()), "{}: a child without links", node.name);
                if node.role != Role::Atsw {
                    down.push(up);
                }
            }
            groups.push(down);
        }
        Ok(Self::new(plan, groups, Lookup::Clos))
    }

    /// Sets every switch's hash mode, and optionally re-seeds them, exactly as
    /// `testbed::set_hash_mode` (and so `fabric run --hash --hash-seed`) does.
    pub fn set_hash(&mut self, mode: HashMode, seed: Option<u32>) {
        for sw in 0..self.plan.nodes.len() {
            let node = &self.plan.nodes[sw];
            if node.role.is_switch() {
                let seed = seed.map_or(node.seed, |s| switch_seed(s, sw));
                self.configs[sw] = self.plan.topology.switch_config(mode, seed);
            }
        }
    }

    /// The group id `sw` routes `dst`'s traffic by.
    #[inline]
    pub fn group_of(&self, sw: NodeId, dst: NodeId) -> Option<u32> {
        match &self.lookup {
            Lookup::Table(t) => t[sw].get(&dst).copied(),
            Lookup::Clos => {
                let (me, d) = (&self.plan.nodes[sw], &self.plan.nodes[dst]);
                let up = self.groups[sw].len().saturating_sub(1) as u32;
                Some(match me.role {
                    Role::Rtsw if (me.zone, me.rack) == (d.zone, d.rack) => d.ports[0].peer_port as u32,
                    Role::Rtsw => up,
                    Role::Ctsw if me.zone == d.zone => d.rack? as u32,
                    Role::Ctsw => up,
                    Role::Atsw => d.zone? as u32,
                    Role::Host => return None,
                })
            }
        }
    }

    pub fn members(&self, sw: NodeId, group: u32) -> &[usize] {
        &self.groups[sw][group as usize]
    }

    pub fn group_count(&self, sw: NodeId) -> usize {
        self.groups[sw].len()
    }

    /// Index of (switch, group, member) in a flat per-member array of [`Self::slot_count`].
    #[inline]
    pub fn slot(&self, sw: NodeId, group: u32, member: u32) -> usize {
        self.slot_base[sw][group as usize] + member as usize
    }

    pub fn slot_count(&self) -> usize {
        self.slots
    }
}

/// The synthetic fabrics of `fabric sim --scale`: 16 GPUs (hosts) per rack, 16 CTSWs per zone,
/// an ATSW layer joining the zones (32 ATSWs, one link from each CTSW to each: 6:1
/// oversubscribed above the CTSWs, as Meta's ATSW layer is), 400G everywhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// 2 zones x 32 racks x 16 = 1,024 GPUs.
    #[value(name = "1k")]
    K1,
    /// 4 zones x 64 racks x 16 = 4,096 GPUs.
    #[value(name = "4k")]
    K4,
    /// 8 zones x 192 racks x 16 = 24,576 GPUs (Meta's Llama 3 cluster).
    #[value(name = "24k", alias = "meta")]
    K24,
}

impl Scale {
    pub fn as_str(self) -> &'static str {
        match self {
            Scale::K1 => "1k",
            Scale::K4 => "4k",
            Scale::K24 => "24k",
        }
    }

    pub fn topology(self) -> Topology {
        let (zones, racks) = match self {
            Scale::K1 => (2, 32),
            Scale::K4 => (4, 64),
            Scale::K24 => (8, 192),
        };
        synthetic(zones, racks, 16, 16, 32)
    }
}

/// A Clos of `zones` x `racks` x `hosts_per_rack`, `spines` CTSWs per zone and `atsws` ATSWs,
/// built as a [`Topology`] without the namespace testbed's limits (it is never brought up).
pub fn synthetic(zones: u32, racks: u32, hosts_per_rack: u32, spines: u32, atsws: u32) -> Topology {
    // Through serde rather than a struct literal: every field this does not name keeps its
    // documented default, and `Topology::parse`'s netns limits are not applied.
    let mut t: Topology =
        toml::from_str(&format!("name = \"sim-{zones}x{racks}x{hosts_per_rack}\"\nprefix = \"sim\"\nzones = []\n"))
            .expect("a minimal topology");
    t.zones = (0..zones)
        .map(|z| Zone { name: format!("z{z}"), racks, hosts_per_rack, spines, uplinks_per_spine: 1 })
        .collect();
    t.atsw = (zones > 1).then_some(AtswLayer { count: atsws, uplinks_per_ctsw: 1 });
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped(file: &str) -> Topology {
        let path = std::path::PathBuf::from(format!("{}/../testbed/{file}", env!("CARGO_MANIFEST_DIR")));
        Topology::load(Some(&path)).unwrap()
    }

    #[test]
    fn clos_groups_are_the_controllers_groups() {
        for topo in [Topology::default_topology(), shipped("two-zones.toml"), synthetic(2, 3, 2, 3, 2)] {
            let plan = Plan::new(&topo);
            let ctl = SimFabric::from_controller(&plan, &BTreeSet::new());
            let clos = SimFabric::clos(plan.clone()).unwrap();
            for sw in plan.switches() {
                for h in plan.hosts() {
                    let (a, b) = (ctl.group_of(sw, h).unwrap(), clos.group_of(sw, h).unwrap());
                    assert_eq!(
                        ctl.members(sw, a),
                        clos.members(sw, b),
                        "{} -> {}",
                        plan.nodes[sw].name,
                        plan.nodes[h].name
                    );
                }
            }
        }
    }

    #[test]
    fn meta_scale_fits_the_address_plan_and_mac_space() {
        let plan = Plan::new(&Scale::K24.topology());
        assert_eq!(plan.hosts().count(), 24_576);
        let f = SimFabric::clos(plan).unwrap();
        let r = f.plan.node_by_name("z7r191").unwrap();
        assert_eq!(f.members(r, f.group_count(r) as u32 - 1).len(), 16);
        // Addresses stay distinct (one /31 per link inside 198.18.0.0/15).
        let last = f.plan.links.len() - 1;
        let l = &f.plan.links[last];
        assert!(u32::from(f.plan.nodes[l.a].ports[l.a_port].ipv4) < u32::from(std::net::Ipv4Addr::new(198, 20, 0, 0)));
    }
}
