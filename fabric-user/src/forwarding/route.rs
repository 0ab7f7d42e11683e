//! The path of a flow: at every switch, the destination's ECMP group and the member that
//! [`fabric_common::forward::choose_member`] (the XDP program's own choice: the hash of
//! [`fabric_common::hash::select_member`], or a TE entry) picks for the packet, under that
//! switch's [`fabric_common::config::SwitchConfig`].
use anyhow::{Result, bail};
use fabric_common::{
    forward::choose_member,
    parse::{Bth, IpHeader, ParsedPacket},
    wire::{ipv4::PROTO_UDP, udp::ROCEV2_PORT},
};

use super::{fabric::SimFabric, flows::Flow};
use crate::model::plan::{LinkId, NodeId};

/// One switch hop of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    pub switch: NodeId,
    pub group: u32,
    pub member: u32,
    /// Egress port of the switch.
    pub port: usize,
}

/// The packet the switches parse for a flow (the fields the hash modes read; `dst_mac` is the
/// first switch's ingress port, as the host's neighbour entry makes it).
pub fn packet(fabric: &SimFabric, flow: &Flow) -> ParsedPacket {
    let host = &fabric.plan.nodes[flow.src].ports[0];
    ParsedPacket {
        dst_mac: fabric.plan.nodes[host.peer_node].ports[host.peer_port].mac,
        vlan_tci: None,
        l3_offset: 14,
        ip: IpHeader::V4 { src: flow.src_ip.octets(), dst: flow.dst_ip.octets(), ttl: 64, tos: 0, header_len: 20 },
        protocol: PROTO_UDP,
        ports: Some((flow.sport, ROCEV2_PORT)),
        bth: Some(Bth { opcode: 0, solicited: false, ack_request: false, pkey: 0xFFFF, dest_qp: flow.dest_qp, psn: 0 }),
    }
}

/// Directed link id: `2 * link`, plus 1 when crossed from the upper end `b` down to `a`.
#[inline]
pub fn directed(fabric: &SimFabric, node: NodeId, port: usize) -> u32 {
    let link: LinkId = fabric.plan.nodes[node].ports[port].link;
    2 * link as u32 + u32::from(fabric.plan.links[link].a != node)
}

/// Calls `hop` for every switch hop of `flow`, and `link` for every directed link it crosses
/// (the source host's uplink first).
pub fn trace(fabric: &SimFabric, flow: &Flow, mut hop: impl FnMut(Hop), mut link: impl FnMut(u32)) -> Result<()> {
    let pkt = packet(fabric, flow);
    let plan = &fabric.plan;
    link(directed(fabric, flow.src, 0));
    let mut at = plan.nodes[flow.src].ports[0].peer_node;
    for _ in 0..16 {
        if at == flow.dst {
            return Ok(());
        }
        if !plan.nodes[at].role.is_switch() {
            bail!(
                "{} reached host {} instead of {}",
                plan.nodes[flow.src].name,
                plan.nodes[at].name,
                plan.nodes[flow.dst].name
            );
        }
        let Some(group) = fabric.group_of(at, flow.dst) else {
            bail!("{} has no route to {}", plan.nodes[at].name, plan.nodes[flow.dst].name);
        };
        let members = fabric.members(at, group);
        if members.is_empty() {
            bail!("{}: empty group {group}", plan.nodes[at].name);
        }
        let n = members.len() as u32;
        // `forward::decide`'s own choice: in `te` mode the controller's entry, if it fits.
        let state = FlowState { fabric, at };
        let member = choose_member(&fabric.configs[at], &pkt, group, n, &state);
        let port = members[member as usize];
        hop(Hop { switch: at, group, member, port });
        link(directed(fabric, at, port));
        at = plan.nodes[at].ports[port].peer_node;
    }
    bail!("{} -> {}: routing loop", plan.nodes[flow.src].name, plan.nodes[flow.dst].name)
}

/// The flow model's state of switch `at` for the member choice: its TE entries, and WCMP
/// weights from its links' rates (degraded ones included). A flow is one path here: `flowlet`
/// sees idle queues at time 0, so its one flowlet's member (`sim::cli` refuses the modes that
/// split a flow per packet).
struct FlowState<'a> {
    fabric: &'a SimFabric,
    at: NodeId,
}

impl fabric_common::balance::MemberState for FlowState<'_> {
    fn te_entry(&self, key: &fabric_common::te::TeKey) -> Option<fabric_common::te::TeEntry> {
        self.fabric.te.get(&(self.at, *key)).copied()
    }

    fn wcmp_pick(&self, group: u32, h: u32, n: u32) -> Option<u32> {
        let plan = &self.fabric.plan;
        let rates: Vec<u64> = self
            .fabric
            .members(self.at, group)
            .iter()
            .map(|&p| plan.topology.modelled_rate_bps(plan.links[plan.nodes[self.at].ports[p].link].rate_gbps))
            .collect();
        fabric_common::balance::WcmpWeights::from_weights(&rates).ok()?.pick(h, n)
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeSet, net::Ipv4Addr};

    use fabric_common::{
        config::{HashMode, PortInfo},
        forward::{Decision, ForwardingTables, decide},
        route::{EcmpGroup, RouteTarget},
    };

    use super::*;
    use crate::{
        endpoint::EndpointOptions,
        endpoint::SportPolicy,
        forwarding::flows::step_flows,
        model::plan::Plan,
        model::routing::{self, SwitchTables},
        model::topology::Topology,
        model::workload::HostTransfer,
    };

    /// A switch's controller tables as the XDP program's maps would hold them.
    struct Tables {
        v4: SwitchTables,
        groups: Vec<EcmpGroup>,
    }

    impl fabric_common::balance::MemberState for Tables {}

    impl ForwardingTables for Tables {
        fn route_v4(&self, dst: &[u8; 4]) -> Option<RouteTarget> {
            self.v4.route_v4(Ipv4Addr::from(*dst))
        }
        fn route_v6(&self, _: &[u8; 16]) -> Option<RouteTarget> {
            None
        }
        fn group(&self, id: u32) -> Option<&EcmpGroup> {
            self.groups.get(id as usize)
        }
    }

    fn tables(plan: &Plan, sw: NodeId, t: &SwitchTables) -> Tables {
        Tables { v4: t.clone(), groups: (0..t.groups.len()).map(|g| t.ecmp_group(plan, sw, g).unwrap()).collect() }
    }

    #[test]
    fn predicted_paths_equal_the_forwarding_decision_on_the_controllers_tables() {
        for topo in [Topology::default_topology(), crate::forwarding::fabric::synthetic(2, 3, 2, 3, 2)] {
            let plan = Plan::new(&topo);
            let ctl = routing::compute(&plan, &BTreeSet::new());
            let xdp: Vec<Option<Tables>> =
                ctl.iter().enumerate().map(|(n, t)| t.as_ref().map(|t| tables(&plan, n, t))).collect();
            let hosts: Vec<NodeId> = plan.hosts().collect();
            let transfers: Vec<HostTransfer> = (0..hosts.len())
                .flat_map(|i| (0..hosts.len()).filter(move |&j| j != i).map(move |j| (i, j)))
                .map(|(i, j)| HostTransfer { src: hosts[i], dst: hosts[j], bytes: 5000 })
                .collect();
            for mode in HashMode::ALL {
                for sport in [SportPolicy::PerQp, SportPolicy::Fixed] {
                    let opts = EndpointOptions { qps: 3, sport, ..Default::default() };
                    let flows = step_flows(&plan, &transfers, &opts);
                    let mut sims = vec![SimFabric::from_controller(&plan, &BTreeSet::new())];
                    sims.push(SimFabric::clos(plan.clone()).unwrap());
                    for s in &mut sims {
                        s.set_hash(mode, Some(42));
                    }
                    let mut checked = 0;
                    for f in &flows {
                        let mut pkt = packet(&sims[0], f);
                        let mut paths = Vec::new();
                        for s in &sims {
                            let mut hops = Vec::new();
                            trace(s, f, |h| hops.push(h), |_| {}).unwrap();
                            paths.push(hops);
                        }
                        // Both group lookups choose the same ports.
                        let ports = |p: &Vec<Hop>| p.iter().map(|h| (h.switch, h.port)).collect::<Vec<_>>();
                        assert_eq!(ports(&paths[0]), ports(&paths[1]));
                        // And every hop is what `forward::decide` does with the XDP tables.
                        let mut ingress = plan.nodes[f.src].ports[0].peer_port;
                        for h in &paths[0] {
                            let node = &plan.nodes[h.switch];
                            pkt.dst_mac = node.ports[ingress].mac;
                            let port = &node.ports[ingress];
                            let info = if plan.nodes[port.peer_node].role.is_switch() {
                                PortInfo::new(ingress as u32, port.mac)
                            } else {
                                PortInfo::host(ingress as u32, port.mac, f.src_ip.octets(), [0; 16])
                            };
                            let t = xdp[h.switch].as_ref().unwrap();
                            match decide(t, &sims[0].configs[h.switch], &info, &pkt) {
                                Decision::Forward { group, member_index, member } => {
                                    assert_eq!(
                                        (group, member_index, member.port as usize),
                                        (h.group, h.member, h.port)
                                    );
                                }
                                d => panic!("{d:?}"),
                            }
                            ingress = node.ports[h.port].peer_port;
                            checked += 1;
                        }
                    }
                    assert!(checked > flows.len());
                }
            }
        }
    }
}
