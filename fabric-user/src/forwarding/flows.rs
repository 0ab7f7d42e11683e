//! Flows as the endpoints make them: one per QP and direction, with the QP numbers and UDP
//! source ports of [`crate::endpoint::engine::plan_qps`] (the function the engine itself runs,
//! so the two cannot drift), and the packets and frame bytes each direction puts on the wire.
use std::net::Ipv4Addr;

use fabric_common::wire::bth;

use crate::{
    endpoint::EndpointOptions,
    endpoint::engine::{StepShape, plan_qps_shaped},
    model::plan::{NodeId, Plan},
    model::workload::HostTransfer,
};

/// Ethernet + IPv4 + UDP + BTH + ICRC: every RoCEv2 frame has them (the bytes XDP counts).
pub const FRAME_OVERHEAD: u64 = (fabric_roce::wire::IPV4_FRAME_HEADERS_LEN + bth::HEADER_LEN + bth::ICRC_LEN) as u64;
/// The RETH on the first (or only) packet of a WRITE.
pub const RETH_LEN: u64 = fabric_roce::wire::RETH_LEN as u64;
/// An ACK: the common headers plus the AETH.
pub const ACK_FRAME: u64 = FRAME_OVERHEAD + fabric_roce::wire::AETH_LEN as u64;
/// The engine posts one WRITE per QP, split into messages of at most this many bytes (the
/// requester's own bound).
pub const MAX_MESSAGE: u64 = fabric_roce::qp::MAX_WRITE_BYTES;

/// Which way a flow runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// WRITE packets, requester to responder.
    Data,
    /// ACKs, responder to requester.
    Ack,
}

/// One direction of one QP: what the switches hash, and what it puts on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// Index of the transfer in its step.
    pub transfer: usize,
    pub direction: Direction,
    pub src: NodeId,
    pub dst: NodeId,
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    /// UDP source port (the destination port is 4791).
    pub sport: u16,
    /// BTH destination QP: the responder's QPN for data, the requester's for ACKs.
    pub dest_qp: u32,
    pub packets: u64,
    /// Frame bytes (what the XDP counters count: Ethernet header to ICRC).
    pub frame_bytes: u64,
}

/// Packets and frame bytes of one QP's share of a transfer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wire {
    pub data_packets: u64,
    pub data_bytes: u64,
    pub ack_packets: u64,
    pub ack_bytes: u64,
}

/// What a QP carrying `bytes` puts on the wire without loss: the WRITE cut at `path_mtu` (a
/// RETH on each message's first packet, the last packet's payload padded to 4 bytes), and the
/// responder's coalesced ACKs (one every `ack_every` packets and one at each message end). Not
/// modelled: the extra ACK a requester asks for when its window fills, which only happens when
/// ACKs lag a whole window (never with `ack_every` = 1), and retransmissions.
pub fn qp_wire(bytes: u64, path_mtu: u32, ack_every: u32) -> Wire {
    let mtu = u64::from(path_mtu);
    let a = u64::from(ack_every.max(1));
    let mut w = Wire::default();
    let mut left = bytes;
    while left > 0 {
        let len = left.min(MAX_MESSAGE);
        left -= len;
        let p = len.div_ceil(mtu);
        let last = len - (p - 1) * mtu;
        w.data_packets += p;
        w.data_bytes += p * FRAME_OVERHEAD + len + (4 - last % 4) % 4 + RETH_LEN;
        w.ack_packets += p.div_ceil(a);
    }
    w.ack_bytes = w.ack_packets * ACK_FRAME;
    w
}

/// Every flow (data and ACK direction of every QP that carries bytes) of one step, in the
/// engine's QP order.
pub fn step_flows(plan: &Plan, transfers: &[HostTransfer], opts: &EndpointOptions) -> Vec<Flow> {
    step_flows_shaped(plan, transfers, &StepShape::default(), opts)
}

/// [`step_flows`] of a step whose transfers run their own QP counts (`shape`).
pub fn step_flows_shaped(
    plan: &Plan,
    transfers: &[HostTransfer],
    shape: &StepShape,
    opts: &EndpointOptions,
) -> Vec<Flow> {
    let qps = plan_qps_shaped(plan, transfers, shape, opts);
    let mut flows = Vec::with_capacity(2 * qps.len());
    for q in qps.iter().filter(|q| q.bytes > 0) {
        let t = &transfers[q.flow];
        let w = qp_wire(q.bytes, opts.path_mtu, opts.ack_every);
        let (a, b) = (plan.host_ipv4(t.src), plan.host_ipv4(t.dst));
        flows.push(Flow {
            transfer: q.flow,
            direction: Direction::Data,
            src: t.src,
            dst: t.dst,
            src_ip: a,
            dst_ip: b,
            sport: q.sport,
            dest_qp: q.resp_qpn,
            packets: w.data_packets,
            frame_bytes: w.data_bytes,
        });
        flows.push(Flow {
            transfer: q.flow,
            direction: Direction::Ack,
            src: t.dst,
            dst: t.src,
            src_ip: b,
            dst_ip: a,
            sport: q.sport,
            dest_qp: q.req_qpn,
            packets: w.ack_packets,
            frame_bytes: w.ack_bytes,
        });
    }
    flows
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_roce::{
        icrc::IpPair,
        qp::{Connection, DEFAULT_PKEY, Requester, RequesterConfig, Responder, ResponderConfig},
        segment::PathMtu,
    };

    /// Runs a requester and a responder back to back, losslessly, and counts frames.
    fn loopback(bytes: u64, mtu: u32, ack_every: u32) -> Wire {
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 3));
        let conn = |local_qp, remote_qp, src, dst| Connection {
            local_qp,
            remote_qp,
            pkey: DEFAULT_PKEY,
            ip: IpPair::V4 { src, dst },
            udp_src_port: 0xC011,
        };
        let mut rc = RequesterConfig::new(conn(0x11, 0x12, a, b));
        rc.mtu = PathMtu::from_bytes(mtu).unwrap();
        let mut req = Requester::new(rc);
        let mut sc = ResponderConfig::new(conn(0x12, 0x11, b, a));
        sc.ack_every = ack_every;
        let mut resp = Responder::new(sc);
        let mut left = bytes;
        let mut id = 0;
        while left > 0 {
            let len = left.min(MAX_MESSAGE);
            req.post_write(id, len as u32).unwrap();
            left -= len;
            id += 1;
        }
        let mut w = Wire::default();
        let l2 = 14 + 20 + 8;
        while let Some(p) = req.poll_transmit(0) {
            w.data_packets += 1;
            w.data_bytes += p.len() as u64 + l2;
            for ack in resp.on_packet(&p, 0) {
                w.ack_packets += 1;
                w.ack_bytes += ack.len() as u64 + l2;
                req.on_packet(&ack, 0).unwrap();
            }
        }
        assert_eq!(req.outstanding_messages(), 0);
        w
    }

    #[test]
    fn wire_counts_equal_the_roce_state_machines() {
        for mtu in [256, 1024, 4096] {
            for bytes in [1, 3, 255, 256, 257, 1023, 1024, 1025, 5000, 65_537, 131_072, 1_000_003] {
                for ack_every in [1, 3, 4, 64] {
                    assert_eq!(
                        qp_wire(bytes, mtu, ack_every),
                        loopback(bytes, mtu, ack_every),
                        "{bytes} B, mtu {mtu}, ack {ack_every}"
                    );
                }
            }
        }
    }

    #[test]
    fn flows_use_the_engines_qp_numbers_and_ports() {
        use crate::{endpoint::SportPolicy, endpoint::rxe_udp_sport, model::topology::Topology};
        let plan = Plan::new(&Topology::default_topology());
        let h: Vec<NodeId> = plan.hosts().collect();
        let t =
            [HostTransfer { src: h[0], dst: h[3], bytes: 10_000 }, HostTransfer { src: h[3], dst: h[0], bytes: 10 }];
        let opts = EndpointOptions { qps: 2, sport: SportPolicy::PerQp, ..Default::default() };
        let f = step_flows(&plan, &t, &opts);
        assert_eq!(f.len(), 8);
        // h0 allocates 0x11, 0x12 for its requesters, h3 0x11, 0x12 for its responders, then
        // the reverse transfer takes 0x13, 0x14 on both.
        assert_eq!((f[0].dest_qp, f[1].dest_qp, f[0].sport), (0x11, 0x11, rxe_udp_sport(0x11, 0x11)));
        assert_eq!((f[4].src, f[4].dest_qp, f[4].sport), (h[3], 0x13, rxe_udp_sport(0x13, 0x13)));
        assert_eq!((f[1].src, f[1].dst, f[1].direction), (h[3], h[0], Direction::Ack));
        assert_eq!(f[0].frame_bytes, qp_wire(5000, 1024, 4).data_bytes);
    }
}
