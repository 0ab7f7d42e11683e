//! Everything a testbed consists of, derived from its [`Topology`]: nodes (hosts and switches),
//! links, ports with their names, MACs and addresses. Pure and deterministic, so `up`, `down`,
//! `stats`, the tests and the simulator all agree on names without storing them twice.
use std::net::{Ipv4Addr, Ipv6Addr};

use fabric_common::config::HashMode;
use serde::{Deserialize, Serialize};

use crate::model::topology::Topology;

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Host,
    Rtsw,
    Ctsw,
    Atsw,
}

impl Role {
    pub fn is_switch(self) -> bool {
        self != Role::Host
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Host => "host",
            Role::Rtsw => "rtsw",
            Role::Ctsw => "ctsw",
            Role::Atsw => "atsw",
        }
    }
}

pub type NodeId = usize;
pub type LinkId = usize;

/// One end of a link, on a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Port {
    /// Interface name inside the node's namespace: the neighbour's node name, plus `.k` for the
    /// k-th of several parallel links.
    pub ifname: String,
    pub link: LinkId,
    pub mac: [u8; 6],
    pub ipv4: Ipv4Addr,
    pub ipv6: Ipv6Addr,
    /// The node and port index at the other end.
    pub peer_node: NodeId,
    pub peer_port: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Short name, unique in the testbed: `z0r3h1`, `z0r3`, `z0c1`, `a0`.
    pub name: String,
    pub role: Role,
    /// Zone index (ATSWs have none).
    pub zone: Option<usize>,
    /// Rack index within the zone (hosts and RTSWs).
    pub rack: Option<usize>,
    pub ports: Vec<Port>,
    /// ECMP hash mode and this switch's own seed (hosts: unused).
    #[serde(with = "crate::model::topology::hash_mode_serde")]
    pub hash: HashMode,
    pub seed: u32,
}

/// A point-to-point link (a veth pair). `a` is the lower tier end (host below RTSW, RTSW below
/// CTSW, CTSW below ATSW).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub a: NodeId,
    pub a_port: usize,
    pub b: NodeId,
    pub b_port: usize,
    pub rate_gbps: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub topology: Topology,
    pub nodes: Vec<Node>,
    pub links: Vec<Link>,
}

impl Plan {
    /// Derives the testbed of a (validated) topology.
    pub fn new(topology: &Topology) -> Self {
        let mut b = Builder { topo: topology, nodes: Vec::new(), links: Vec::new() };
        b.build();
        Plan { topology: topology.clone(), nodes: b.nodes, links: b.links }
    }

    /// The namespace of a node: `<prefix>-<name>`.
    pub fn netns(&self, node: NodeId) -> String {
        netns_name(&self.topology.prefix, &self.nodes[node].name)
    }

    pub fn hosts(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.nodes.len()).filter(|&n| self.nodes[n].role == Role::Host)
    }

    pub fn switches(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.nodes.len()).filter(|&n| self.nodes[n].role.is_switch())
    }

    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The link named `NODE:PORT` (either end), as the CLI names links.
    pub fn find_link(&self, spec: &str) -> anyhow::Result<LinkId> {
        use anyhow::Context as _;
        let (node, ifname) =
            spec.split_once(':').with_context(|| format!("{spec:?}: expected SWITCH:PEER, e.g. z0r0:z0c1"))?;
        let n = self.node_by_name(node).with_context(|| format!("no node {node:?} in this fabric"))?;
        let port = self.nodes[n].ports.iter().find(|p| p.ifname == ifname).with_context(|| {
            let names: Vec<&str> = self.nodes[n].ports.iter().map(|p| p.ifname.as_str()).collect();
            format!("{node} has no port {ifname:?}; its ports: {}", names.join(", "))
        })?;
        Ok(port.link)
    }

    /// `node:port` of a link's lower end: the name the CLI prints.
    pub fn link_label(&self, l: LinkId) -> String {
        let link = &self.links[l];
        format!("{}:{}", self.nodes[link.a].name, self.nodes[link.a].ports[link.a_port].ifname)
    }

    /// A host's address (the host end of its only link).
    pub fn host_ipv4(&self, host: NodeId) -> Ipv4Addr {
        self.nodes[host].ports[0].ipv4
    }

    pub fn host_ipv6(&self, host: NodeId) -> Ipv6Addr {
        self.nodes[host].ports[0].ipv6
    }

    /// The RTSW a host hangs off.
    pub fn rtsw_of(&self, host: NodeId) -> NodeId {
        self.nodes[host].ports[0].peer_node
    }

    /// Ports of `node` that go up a tier (RTSW: to CTSWs; CTSW: to ATSWs).
    pub fn uplinks(&self, node: NodeId) -> Vec<usize> {
        self.nodes[node]
            .ports
            .iter()
            .enumerate()
            .filter(|(_, p)| self.links[p.link].a == node)
            .map(|(i, _)| i)
            .collect()
    }
}

/// A switch's own hash seed, from a base (its tier's seed, or a run's `--hash-seed`) and its node
/// id: what `up` installs and `testbed::set_hash_mode` derives, and what the simulator uses.
pub fn switch_seed(base: u32, node: NodeId) -> u32 {
    fabric_common::hash::fmix32(base ^ (node as u32).wrapping_mul(0x9E37_79B9))
}

/// The namespace name of a node of a testbed.
pub fn netns_name(prefix: &str, node: &str) -> String {
    format!("{prefix}-{node}")
}

struct Builder<'a> {
    topo: &'a Topology,
    nodes: Vec<Node>,
    links: Vec<Link>,
}

impl Builder<'_> {
    fn node(&mut self, name: String, role: Role, zone: Option<usize>, rack: Option<usize>) -> NodeId {
        let tiers = &self.topo.tiers;
        let tier = match role {
            Role::Host => &tiers.host,
            Role::Rtsw => &tiers.rtsw,
            Role::Ctsw => &tiers.ctsw,
            Role::Atsw => &tiers.atsw,
        };
        let id = self.nodes.len();
        // Each switch its own seed: tier seed mixed with the node id, so that neither tiers nor
        // switches of one tier make correlated choices.
        let seed = switch_seed(tier.seed, id);
        self.nodes.push(Node { name, role, zone, rack, ports: Vec::new(), hash: tier.hash, seed });
        id
    }

    /// Adds `parallel` links between `a` (lower) and `b` (upper).
    fn connect(&mut self, a: NodeId, b: NodeId, parallel: u32, rate_gbps: f64) {
        for k in 0..parallel {
            let link = self.links.len();
            let suffix = if parallel > 1 { format!(".{k}") } else { String::new() };
            let (a_port, b_port) = (self.nodes[a].ports.len(), self.nodes[b].ports.len());
            let (v4a, v4b, v6a, v6b) = link_addresses(self.topo, link);
            let a_name = format!("{}{suffix}", self.nodes[b].name);
            let b_name = format!("{}{suffix}", self.nodes[a].name);
            self.nodes[a].ports.push(Port {
                ifname: a_name,
                link,
                mac: mac(a, a_port),
                ipv4: v4a,
                ipv6: v6a,
                peer_node: b,
                peer_port: b_port,
            });
            self.nodes[b].ports.push(Port {
                ifname: b_name,
                link,
                mac: mac(b, b_port),
                ipv4: v4b,
                ipv6: v6b,
                peer_node: a,
                peer_port: a_port,
            });
            self.links.push(Link { a, a_port, b, b_port, rate_gbps });
        }
    }

    fn build(&mut self) {
        let topo = self.topo;
        let mut zone_ctsws = Vec::new();
        for (z, zone) in topo.zones.iter().enumerate() {
            let ctsws: Vec<NodeId> =
                (0..zone.spines).map(|c| self.node(format!("{}c{c}", zone.name), Role::Ctsw, Some(z), None)).collect();
            for r in 0..zone.racks as usize {
                let rtsw = self.node(format!("{}r{r}", zone.name), Role::Rtsw, Some(z), Some(r));
                for h in 0..zone.hosts_per_rack {
                    let host = self.node(format!("{}r{r}h{h}", zone.name), Role::Host, Some(z), Some(r));
                    self.connect(host, rtsw, 1, topo.tiers.host.rate_gbps);
                }
                for &c in &ctsws {
                    self.connect(rtsw, c, zone.uplinks_per_spine, topo.tiers.rtsw.rate_gbps);
                }
            }
            zone_ctsws.push(ctsws);
        }
        if let Some(atsw) = &topo.atsw {
            let atsws: Vec<NodeId> =
                (0..atsw.count).map(|a| self.node(format!("a{a}"), Role::Atsw, None, None)).collect();
            for ctsws in &zone_ctsws {
                for &c in ctsws {
                    for &a in &atsws {
                        self.connect(c, a, atsw.uplinks_per_ctsw, topo.tiers.ctsw.rate_gbps);
                    }
                }
            }
        }
    }
}

/// The addresses of link `i`: (a's v4, b's v4, a's v6, b's v6). The link's /31 is
/// `base + 2i`; the lower end `a` (a host, on host links) takes the odd address and the upper end
/// the even one, so that a host's gateway is always its address minus one.
fn link_addresses(topo: &Topology, i: usize) -> (Ipv4Addr, Ipv4Addr, Ipv6Addr, Ipv6Addr) {
    let v4 = u32::from(topo.addressing.ipv4) + 2 * i as u32;
    let v6 = u128::from(topo.addressing.ipv6) + 2 * i as u128;
    (Ipv4Addr::from(v4 + 1), Ipv4Addr::from(v4), Ipv6Addr::from(v6 + 1), Ipv6Addr::from(v6))
}

/// A locally administered MAC from node and port: 02:fa:NN:NN:PP:PP.
pub fn mac(node: NodeId, port: usize) -> [u8; 6] {
    let n = (node as u16).to_be_bytes();
    let p = (port as u16).to_be_bytes();
    [0x02, 0xfa, n[0], n[1], p[0], p[1]]
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn default_plan_names_addresses_and_macs_are_unique_and_consistent() {
        let plan = Plan::new(&Topology::default_topology());
        assert_eq!(plan.nodes.len(), 16);
        assert_eq!(plan.links.len(), 24);
        let mut macs = HashSet::new();
        let mut v4 = HashSet::new();
        for (n, node) in plan.nodes.iter().enumerate() {
            let mut names = HashSet::new();
            for p in &node.ports {
                assert!(names.insert(&p.ifname), "duplicate port {} on {}", p.ifname, node.name);
                assert!(p.ifname.len() <= 15);
                assert!(macs.insert(p.mac));
                assert!(v4.insert(p.ipv4));
                // Both ends of a link agree on each other, and share a /31.
                let peer = &plan.nodes[p.peer_node].ports[p.peer_port];
                assert_eq!((peer.peer_node, peer.link), (n, p.link));
                assert_eq!(u32::from(p.ipv4) >> 1, u32::from(peer.ipv4) >> 1);
            }
        }
        for h in plan.hosts() {
            let gw = plan.nodes[plan.rtsw_of(h)].ports[plan.nodes[h].ports[0].peer_port].ipv4;
            assert_eq!(u32::from(plan.host_ipv4(h)), u32::from(gw) + 1, "a host's gateway is its address - 1");
            assert_eq!(plan.uplinks(h).len(), 1);
        }
        assert_eq!(plan.uplinks(plan.node_by_name("z0r0").unwrap()).len(), 4);
        assert_eq!(plan.netns(0), format!("fab-{}", plan.nodes[0].name));
    }
}
