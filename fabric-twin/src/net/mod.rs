//! What the twin simulates: nodes (hosts and switches), their ports and links, each switch's
//! configuration (hash mode and seed, QoS), and its routes and ECMP groups.
//!
//! The description is plain data built by the caller (`fabric sim` builds it from the
//! testbed's plan and the controller's groups); routes are behind [`Routing`] so that a
//! 24,576-host fabric need not hold a table of switches x hosts.
use fabric_common::{
    config::SwitchConfig,
    qos::QosConfig,
    te::{TeEntry, TeKey},
};

/// Where a switch sends a destination host's traffic: the controller's routes and groups.
pub trait Routing {
    /// The ECMP group `switch` routes traffic for `dst_host` by (node indices).
    fn group_of(&self, switch: usize, dst_host: usize) -> Option<u32>;
    /// The member ports (the switch's own port indices) of a group, in installed order.
    fn members(&self, switch: usize, group: u32) -> &[usize];
    /// In `te` mode: the controller's entry for a flow at `switch` (none by default).
    fn te_entry(&self, switch: usize, key: &TeKey) -> Option<TeEntry> {
        let _ = (switch, key);
        None
    }
    /// How many (switch, group, member) counters the XDP program keeps, as a flat array; 0
    /// (the default): the twin counts per port only.
    fn member_slots(&self) -> usize {
        0
    }
    /// The index of (switch, group, member) in that array.
    fn member_slot(&self, switch: usize, group: u32, member: u32) -> usize {
        let _ = (switch, group, member);
        0
    }
}

/// The longest propagation delay a link may have: 1 s (a link around the earth takes 0.2 s).
/// Event times are u64 nanoseconds; this keeps every sum of them far from wrapping.
pub const MAX_DELAY_NS: u64 = 1_000_000_000;

/// One end of a link: the sending side of a node's port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortSpec {
    pub peer_node: usize,
    pub peer_port: usize,
    pub rate_bps: u64,
    /// Propagation delay to the peer.
    pub delay_ns: u64,
}

/// A switch's configuration, as its XDP program's maps would hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchSpec {
    pub config: SwitchConfig,
    pub qos: QosConfig,
    /// Quanta of each pause frame it sends (refreshed at half their time while above Xon).
    pub pause_quanta: u16,
    /// Index into [`Network::tiers`], for the per-tier report.
    pub tier: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Host,
    Switch(SwitchSpec),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub kind: NodeKind,
    pub ports: Vec<PortSpec>,
}

/// A topology the twin can run.
#[derive(Clone, Debug)]
pub struct Network<R> {
    pub nodes: Vec<NodeSpec>,
    /// Tier names of the switches (`rtsw`, `ctsw`, ...), by [`SwitchSpec::tier`].
    pub tiers: Vec<String>,
    pub routing: R,
    /// Global index of each node's port 0 (ports are numbered node by node).
    port_base: Vec<u32>,
}

/// A description the twin cannot simulate, naming the field at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    #[error("{node}.ports[{port}]: peer {peer_node}.{peer_port} does not exist")]
    NoPeer { node: String, port: usize, peer_node: usize, peer_port: usize },
    #[error("{node}.ports[{port}]: its peer's port does not lead back to it")]
    Asymmetric { node: String, port: usize },
    #[error("{node}.ports[{port}].rate_bps: {rate_bps} is below 1 kbit/s")]
    Rate { node: String, port: usize, rate_bps: u64 },
    #[error("{node}.ports[{port}].delay_ns: {delay_ns} is more than {MAX_DELAY_NS} (1 s)")]
    Delay { node: String, port: usize, delay_ns: u64 },
    #[error("{node}.ports: a host has exactly one port, not {ports}")]
    HostPorts { node: String, ports: usize },
    #[error("{node}.tier: {tier} is not one of the {tiers} tiers")]
    Tier { node: String, tier: usize, tiers: usize },
    #[error("{0} ports: more than the twin's 2^32 port indices")]
    TooManyPorts(usize),
}

impl<R: Routing> Network<R> {
    /// Checks the description: links symmetric, rates usable, hosts single-homed.
    pub fn new(nodes: Vec<NodeSpec>, tiers: Vec<String>, routing: R) -> Result<Self, NetworkError> {
        for (n, node) in nodes.iter().enumerate() {
            if matches!(node.kind, NodeKind::Host) && node.ports.len() != 1 {
                return Err(NetworkError::HostPorts { node: node.name.clone(), ports: node.ports.len() });
            }
            if let NodeKind::Switch(s) = node.kind
                && s.tier >= tiers.len()
            {
                return Err(NetworkError::Tier { node: node.name.clone(), tier: s.tier, tiers: tiers.len() });
            }
            for (p, port) in node.ports.iter().enumerate() {
                let Some(peer) = nodes.get(port.peer_node).and_then(|x| x.ports.get(port.peer_port)) else {
                    let (peer_node, peer_port) = (port.peer_node, port.peer_port);
                    return Err(NetworkError::NoPeer { node: node.name.clone(), port: p, peer_node, peer_port });
                };
                if (peer.peer_node, peer.peer_port) != (n, p) {
                    return Err(NetworkError::Asymmetric { node: node.name.clone(), port: p });
                }
                if port.rate_bps < 1000 {
                    return Err(NetworkError::Rate { node: node.name.clone(), port: p, rate_bps: port.rate_bps });
                }
                if port.delay_ns > MAX_DELAY_NS {
                    return Err(NetworkError::Delay { node: node.name.clone(), port: p, delay_ns: port.delay_ns });
                }
            }
        }
        let mut port_base = Vec::with_capacity(nodes.len());
        let mut total = 0usize;
        for node in &nodes {
            port_base.push(u32::try_from(total).map_err(|_| NetworkError::TooManyPorts(total))?);
            total += node.ports.len();
        }
        u32::try_from(total).map_err(|_| NetworkError::TooManyPorts(total))?;
        Ok(Network { nodes, tiers, routing, port_base })
    }
}

impl<R> Network<R> {
    /// The global index of `node`'s port `port`.
    #[inline]
    pub fn port_index(&self, node: usize, port: usize) -> u32 {
        self.port_base[node] + port as u32
    }

    pub fn port_count(&self) -> usize {
        self.nodes.iter().map(|n| n.ports.len()).sum()
    }

    pub fn is_host(&self, node: usize) -> bool {
        matches!(self.nodes[node].kind, NodeKind::Host)
    }
}

/// Routes as explicit tables: per switch, destination host to group, and each group's member
/// ports. For small fabrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableRouting {
    /// Per node: (destination host, group id).
    pub routes: Vec<Vec<(usize, u32)>>,
    /// Per node, per group id: member ports.
    pub groups: Vec<Vec<Vec<usize>>>,
    /// Per node: TE entries.
    pub te: Vec<Vec<(TeKey, TeEntry)>>,
}

impl Routing for TableRouting {
    fn group_of(&self, switch: usize, dst_host: usize) -> Option<u32> {
        self.routes.get(switch)?.iter().find(|(h, _)| *h == dst_host).map(|(_, g)| *g)
    }

    fn members(&self, switch: usize, group: u32) -> &[usize] {
        &self.groups[switch][group as usize]
    }

    fn te_entry(&self, switch: usize, key: &TeKey) -> Option<TeEntry> {
        self.te.get(switch)?.iter().find(|(k, _)| k == key).map(|(_, e)| *e)
    }
}
