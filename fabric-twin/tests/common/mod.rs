//! Small fabrics for the twin's tests: a star (hosts on one switch) and a leaf-spine, built by
//! hand with explicit routes.
#![allow(dead_code, reason = "each test file uses part of the helpers")]
use fabric_common::{
    config::{HashMode, SwitchConfig},
    parse::{Bth, IpHeader, ParsedPacket},
    qos::{BufferMode, QosConfig},
    queue::RedParams,
};
use fabric_roce::segment::PathMtu;
use fabric_twin::{
    net::{Network, NodeKind, NodeSpec, PortSpec, SwitchSpec, TableRouting},
    workload::{CcChoice, EndpointConfig, QpSpec},
};

/// fabric-roce's endpoint defaults at a 4096-byte MTU, with a window deep enough that the
/// tests' flows are never window-bound.
pub fn endpoints(cc: CcChoice) -> EndpointConfig {
    EndpointConfig { window_packets: 4096, ..EndpointConfig::new(PathMtu::Mtu4096, cc) }
}

/// 8 Gbit/s: one byte per nanosecond, so wire times are whole and easy to add up by hand.
pub const RATE: u64 = 8_000_000_000;
pub const DELAY: u64 = 1_000;

/// A switch with a large static buffer, no ECN marks, no lossless class.
pub fn plain_qos() -> QosConfig {
    QosConfig {
        enabled: 1,
        lossless_classes: 0,
        red: RedParams::new(u32::MAX - 1, u32::MAX, 0.0),
        xoff_bytes: u32::MAX,
        xon_bytes: u32::MAX - 1,
        headroom_bytes: 0,
        buffer_mode: BufferMode::Static as u32,
        port_buffer_bytes: 1 << 30,
        alpha_x256: 256,
        pool_bytes: 1 << 30,
    }
}

pub fn switch(qos: QosConfig, mode: HashMode, seed: u32) -> NodeKind {
    NodeKind::Switch(SwitchSpec { config: SwitchConfig::testbed(mode, seed), qos, pause_quanta: u16::MAX, tier: 0 })
}

pub fn host_ip(h: usize) -> [u8; 4] {
    [10, 0, (h >> 8) as u8, h as u8]
}

/// What a switch parses of a packet from `src` to `dst` with UDP source port `sport` to QP
/// `dest_qp`.
pub fn parsed(src: usize, dst: usize, sport: u16, dest_qp: u32) -> ParsedPacket {
    ParsedPacket {
        dst_mac: [0; 6],
        vlan_tci: None,
        l3_offset: 14,
        ip: IpHeader::V4 { src: host_ip(src), dst: host_ip(dst), ttl: 64, tos: 0, header_len: 20 },
        protocol: 17,
        ports: Some((sport, 4791)),
        bth: Some(Bth { opcode: 0, solicited: false, ack_request: false, pkey: 0xFFFF, dest_qp, psn: 0 }),
    }
}

/// QP number `k` from `src` to `dst` carrying `bytes`.
pub fn qp(src: usize, dst: usize, bytes: u64, k: u32) -> QpSpec {
    let (req_qpn, resp_qpn, sport) = (0x11 + k, 0x211 + k, 0xC000 + k as u16 * 7);
    QpSpec {
        src,
        dst,
        bytes,
        req_qpn,
        resp_qpn,
        sport,
        first_psn: 0,
        data_packet: parsed(src, dst, sport, resp_qpn),
        ack_packet: parsed(dst, src, sport, req_qpn),
    }
}

/// A shallow static buffer of `buffer` bytes per port and class; class 3 lossless when `pfc`
/// (Xoff 20 KB, Xon 10 KB); RED from 20 KB to 200 KB when `ecn`.
pub fn shallow_qos(buffer: u32, pfc: bool, ecn: bool) -> QosConfig {
    QosConfig {
        lossless_classes: if pfc { 1 << 3 } else { 0 },
        red: if ecn { RedParams::new(20_000, 200_000, 0.2) } else { plain_qos().red },
        xoff_bytes: 20_000,
        xon_bytes: 10_000,
        headroom_bytes: 1 << 20,
        port_buffer_bytes: buffer,
        ..plain_qos()
    }
}

/// Hosts 0..n on switch n (port i to host i), every link at `RATE` with `DELAY`.
pub fn star(n: usize, qos: QosConfig) -> Network<TableRouting> {
    let link = |peer_node, peer_port| PortSpec { peer_node, peer_port, rate_bps: RATE, delay_ns: DELAY };
    let mut nodes: Vec<NodeSpec> =
        (0..n).map(|h| NodeSpec { name: format!("h{h}"), kind: NodeKind::Host, ports: vec![link(n, h)] }).collect();
    nodes.push(NodeSpec {
        name: "sw".into(),
        kind: switch(qos, HashMode::FiveTuple, 1),
        ports: (0..n).map(|h| link(h, 0)).collect(),
    });
    let mut routing = TableRouting { routes: vec![Vec::new(); n + 1], groups: vec![Vec::new(); n + 1], te: vec![] };
    routing.routes[n] = (0..n).map(|h| (h, h as u32)).collect();
    routing.groups[n] = (0..n).map(|h| vec![h]).collect();
    Network::new(nodes, vec!["sw".into()], routing).unwrap()
}

/// Two leaves of `per_leaf` hosts each and `spines` spines. Hosts 0..per_leaf on leaf L0,
/// the next on L1. Leaf ports: hosts first, then one uplink per spine (group `per_leaf`: the
/// uplinks). Spine port 0 to L0, 1 to L1.
pub fn leaf_spine(per_leaf: usize, spines: usize, mode: HashMode, qos: QosConfig) -> Network<TableRouting> {
    let hosts = 2 * per_leaf;
    let (l0, s0) = (hosts, hosts + 2);
    let link = |peer_node, peer_port| PortSpec { peer_node, peer_port, rate_bps: RATE, delay_ns: DELAY };
    let mut nodes: Vec<NodeSpec> = (0..hosts)
        .map(|h| NodeSpec {
            name: format!("h{h}"),
            kind: NodeKind::Host,
            ports: vec![link(l0 + h / per_leaf, h % per_leaf)],
        })
        .collect();
    let mut routing = TableRouting {
        routes: vec![Vec::new(); hosts + 2 + spines],
        groups: vec![Vec::new(); hosts + 2 + spines],
        te: vec![Vec::new(); hosts + 2 + spines],
    };
    for l in 0..2 {
        let mut ports: Vec<PortSpec> = (0..per_leaf).map(|i| link(l * per_leaf + i, 0)).collect();
        ports.extend((0..spines).map(|s| link(s0 + s, l)));
        nodes.push(NodeSpec { name: format!("L{l}"), kind: switch(qos, mode, 10 + l as u32), ports });
        let leaf = l0 + l;
        routing.groups[leaf] = (0..per_leaf).map(|i| vec![i]).collect();
        routing.groups[leaf].push((per_leaf..per_leaf + spines).collect());
        routing.routes[leaf] =
            (0..hosts).map(|h| (h, if h / per_leaf == l { (h % per_leaf) as u32 } else { per_leaf as u32 })).collect();
    }
    for s in 0..spines {
        let ports = vec![link(l0, per_leaf + s), link(l0 + 1, per_leaf + s)];
        nodes.push(NodeSpec { name: format!("S{s}"), kind: switch(qos, mode, 20 + s as u32), ports });
        routing.groups[s0 + s] = vec![vec![0], vec![1]];
        routing.routes[s0 + s] = (0..hosts).map(|h| (h, (h / per_leaf) as u32)).collect();
    }
    for n in &mut nodes {
        if let NodeKind::Switch(s) = &mut n.kind {
            s.tier = usize::from(n.name.starts_with('S'));
        }
    }
    Network::new(nodes, vec!["leaf".into(), "spine".into()], routing).unwrap()
}
