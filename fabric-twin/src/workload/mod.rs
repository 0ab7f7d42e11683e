//! What the endpoints do: queue pairs (one RDMA WRITE stream each) that start together, as one
//! step of a collective, and how every endpoint is configured.
use std::net::Ipv4Addr;

use fabric_common::parse::ParsedPacket;
use fabric_roce::{
    cc::{CongestionControl, cts::Cts, dcqcn::Dcqcn, none::PfcOnly},
    cts::CtsConfig,
    dcqcn::DcqcnParams,
    icrc::IpPair,
    qp::{Connection, DEFAULT_PKEY, RequesterConfig, ResponderConfig},
    segment::PathMtu,
    traffic_class::DSCP_ROCE,
    transport::Transport,
};

/// One RC queue pair: `bytes` from host `src` to host `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSpec {
    /// Node indices of the requester's and the responder's hosts.
    pub src: usize,
    pub dst: usize,
    pub bytes: u64,
    pub req_qpn: u32,
    pub resp_qpn: u32,
    /// UDP source port of both directions (the engine's policy).
    pub sport: u16,
    /// PSN both ends start at.
    pub first_psn: u32,
    /// What the switches parse of its data packets and of its ACKs: the hash input.
    pub data_packet: ParsedPacket,
    pub ack_packet: ParsedPacket,
}

/// The congestion control every host runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CcChoice {
    /// PFC only: senders keep their configured rate.
    None,
    Dcqcn(DcqcnParams),
    Cts(CtsConfig),
}

impl CcChoice {
    pub fn as_str(&self) -> &'static str {
        match self {
            CcChoice::None => "none",
            CcChoice::Dcqcn(_) => "dcqcn",
            CcChoice::Cts(_) => "cts",
        }
    }

    /// The scheme of one host whose senders run at `line_rate_bps`.
    pub fn build(&self, line_rate_bps: u64) -> Box<dyn CongestionControl> {
        match *self {
            CcChoice::None => Box::new(PfcOnly),
            CcChoice::Dcqcn(p) => Box::new(Dcqcn::new(p, line_rate_bps)),
            CcChoice::Cts(c) => Box::new(Cts::new(c)),
        }
    }
}

/// How every endpoint is set up (the same for all hosts).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EndpointConfig {
    pub mtu: PathMtu,
    pub ack_every: u32,
    /// Outstanding packets per QP.
    pub window_packets: u32,
    pub retransmit_timeout_ns: u64,
    pub retry_limit: u32,
    /// Pacing rate of each QP, and the congestion control's line (DCQCN starts and recovers
    /// there); 0: its host link's rate (the host's QPs share the link, which serializes their
    /// packets in turn).
    pub qp_rate_bps: u64,
    /// Pacer burst, bytes.
    pub burst_bytes: u64,
    /// DSCP of data, ACKs and NAKs.
    pub dscp: u8,
    /// Data, ACKs and NAKs are ECT(0).
    pub ecn: bool,
    pub cc: CcChoice,
    /// Go-back-N or reorder-tolerant: the testbed's endpoints' choice, the same code.
    pub transport: Transport,
}

impl EndpointConfig {
    /// A QP's pace on a host whose link runs at `host_line_bps`: the set rate, or that line.
    pub fn qp_pace_bps(&self, host_line_bps: u64) -> u64 {
        match self.qp_rate_bps {
            0 => host_line_bps,
            r => r,
        }
    }

    /// `fabric-roce`'s own defaults ([`RequesterConfig::new`], [`ResponderConfig::new`]) at
    /// path MTU `mtu` under `cc`: the lossless DSCP, ECN-capable, paced at the host link's rate
    /// with a burst of two full packets.
    pub fn new(mtu: PathMtu, cc: CcChoice) -> Self {
        let any = Connection {
            local_qp: 0,
            remote_qp: 0,
            pkey: DEFAULT_PKEY,
            ip: IpPair::V4 { src: Ipv4Addr::UNSPECIFIED, dst: Ipv4Addr::UNSPECIFIED },
            udp_src_port: 0,
        };
        let (req, resp) = (RequesterConfig::new(any), ResponderConfig::new(any));
        EndpointConfig {
            mtu,
            ack_every: resp.ack_every,
            window_packets: req.window_packets,
            retransmit_timeout_ns: req.retransmit_timeout_ns,
            retry_limit: req.retry_limit,
            qp_rate_bps: 0,
            burst_bytes: 2 * u64::from(mtu.bytes() + req.wire_overhead_bytes),
            dscp: DSCP_ROCE,
            ecn: true,
            cc,
            transport: Transport::GoBackN,
        }
    }
}
