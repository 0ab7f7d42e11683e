//! The endpoints: `fabric-roce`'s queue pairs ([`SenderQp`] around a [`Requester`],
//! [`ReceiverQp`] around a [`Responder`]) and each host's congestion control, set up as the
//! testbed's engine sets them up, and driven with simulated nanoseconds through the
//! payload-less entry points (`poll_transmit_repr`, `on_repr`).
use std::{collections::HashMap, net::Ipv4Addr};

use fabric_common::parse::{IpHeader, ParsedPacket};
use fabric_roce::{
    cc::{CongestionControl, ReceiverQp, SenderQp},
    icrc::IpPair,
    pacer::PacerConfig,
    psn::Psn,
    qp::{Connection, DEFAULT_PKEY, PostError, Requester, RequesterConfig, Responder, ResponderConfig},
    traffic_class::{CONTROL_TOS, data_tos},
};

use crate::{
    event::Nanos,
    packet::Payload,
    workload::{EndpointConfig, QpSpec},
};

/// One host's run-time state.
#[derive(Debug)]
pub struct Host {
    /// Global index of its one port.
    pub port: u32,
    pub cc: Box<dyn CongestionControl>,
    /// QPs that start here (indices in the run), served round-robin.
    pub senders: Vec<u32>,
    pub next_sender: usize,
    /// QPs that end here, by their local QP number.
    pub receivers: HashMap<u32, u32>,
    /// A wake-up is pending for this time.
    pub wake_at: Option<Nanos>,
}

impl Host {
    pub fn new(port: u32, cc: Box<dyn CongestionControl>) -> Self {
        Host { port, cc, senders: Vec::new(), next_sender: 0, receivers: HashMap::new(), wake_at: None }
    }
}

/// Both ends of one QP.
#[derive(Debug)]
pub struct QpState {
    pub spec: QpSpec,
    pub sender: SenderQp,
    pub receiver: ReceiverQp,
    pub completed_ns: Option<Nanos>,
    /// The lowest pacing rate its congestion control set (DCQCN's cuts).
    pub min_rate_bps: Option<u64>,
    /// Ethernet + IP + UDP bytes around every packet's UDP payload.
    pub wire_overhead: u32,
    pub data_tos: u8,
}

/// The IPv4 addresses the switches see in a parsed packet.
fn addresses(pkt: &ParsedPacket) -> (Ipv4Addr, Ipv4Addr) {
    match pkt.ip {
        IpHeader::V4 { src, dst, .. } => (src.into(), dst.into()),
        // The ICRC is never computed here: any pair of addresses will do for one.
        IpHeader::V6 { .. } => (Ipv4Addr::UNSPECIFIED, Ipv4Addr::UNSPECIFIED),
    }
}

impl QpState {
    /// Both ends of `spec`, registered with their hosts' congestion controls at `now`, the
    /// requester paced at `rate_bps` as the engine paces it.
    pub fn new(
        spec: QpSpec,
        cfg: &EndpointConfig,
        rate_bps: u64,
        sender_cc: &mut dyn CongestionControl,
        receiver_cc: &mut dyn CongestionControl,
        now: Nanos,
    ) -> Result<Self, PostError> {
        let (src, dst) = addresses(&spec.data_packet);
        let req_end = Connection {
            local_qp: spec.req_qpn,
            remote_qp: spec.resp_qpn,
            pkey: DEFAULT_PKEY,
            ip: IpPair::V4 { src, dst },
            udp_src_port: spec.sport,
        };
        let resp_end =
            Connection { local_qp: spec.resp_qpn, remote_qp: spec.req_qpn, ip: req_end.ip.reversed(), ..req_end };
        let mut rc = RequesterConfig::new(req_end);
        rc.mtu = cfg.mtu;
        rc.window_packets = cfg.transport.window_packets(cfg.window_packets);
        rc.transport = cfg.transport;
        rc.retransmit_timeout_ns = cfg.retransmit_timeout_ns;
        rc.retry_limit = cfg.retry_limit;
        rc.first_psn = Psn::new(spec.first_psn);
        rc.pacer = Some(PacerConfig { rate_bps, burst_bytes: cfg.burst_bytes });
        // Not `rc.wire_overhead_bytes`: that is the pacer's charge, the link's framing
        // included, which the links add to a frame themselves.
        let wire_overhead = req_end.frame_overhead_bytes();
        let mut sc = ResponderConfig::new(resp_end);
        sc.first_psn = rc.first_psn;
        sc.ack_every = cfg.ack_every;
        sc.transport = cfg.transport;
        let sender = SenderQp::new(Requester::new(rc), spec.bytes, sender_cc, now)?;
        let receiver = ReceiverQp::new(Responder::new(sc), spec.bytes, receiver_cc);
        let data_tos = data_tos(cfg.dscp, cfg.ecn);
        let min_rate_bps = sender.rate_bps();
        Ok(QpState { spec, sender, receiver, completed_ns: None, min_rate_bps, wire_overhead, data_tos })
    }

    /// The frame length of a packet of this QP (Ethernet header to ICRC).
    pub fn frame_len(&self, payload: &Payload) -> u32 {
        let udp_payload = match payload {
            Payload::Roce(r) => r.buffer_len(),
            Payload::Control(b) => b.len(),
        };
        udp_payload as u32 + self.wire_overhead
    }

    /// Notes the pacing rate in force (after anything that may have changed it).
    pub fn note_rate(&mut self) {
        if let Some(r) = self.sender.rate_bps() {
            self.min_rate_bps = Some(self.min_rate_bps.map_or(r, |m| m.min(r)));
        }
    }

    /// The TOS of a response (ACK, NAK) or of feedback (CNP, grant).
    pub fn tos_of(&self, feedback: bool) -> u8 {
        if feedback { CONTROL_TOS } else { self.data_tos }
    }
}
