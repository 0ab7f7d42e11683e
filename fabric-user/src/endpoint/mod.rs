//! Our own RoCEv2 endpoints on the testbed's hosts: RC QPs from [`fabric_roce`] driven over UDP
//! sockets inside each host's namespace, one thread per host.
//!
//! A step of a collective is a set of transfers (host to host, bytes); each is striped over
//! `qps` QPs, one message per QP, as a collective library does with
//! `NCCL_IB_QPS_PER_CONNECTION`. A step ends when every requester has every message acknowledged.
//!
//! Congestion handling, as a RoCE NIC and collective library do it (the sans-IO parts are in
//! [`fabric_roce`]): packets carry a DSCP (the switches' priority class is `DSCP >> 3`) and ECT(0);
//! each host obeys the PFC frames its rack switch sends ([`fabric_roce::pause`]); `cc` picks the
//! congestion control on top ([`CcMode`]: none, DCQCN or receiver-driven admission), a
//! [`fabric_roce::cc::CongestionControl`] the engine drives without knowing which.
//! Time is slowed by `time_scale` S as the fabric models it: rates divided by S, timers times S.
pub mod downlink;
pub mod engine;
pub mod socket;

use fabric_roce::{
    cc::{CongestionControl, cts::Cts, dcqcn::Dcqcn, none::PfcOnly},
    cts::CtsConfig,
    transport::Transport,
};
use serde::{Deserialize, Serialize};

/// How a QP's UDP source port is chosen: it decides the entropy plain ECMP sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SportPolicy {
    /// From the QP numbers, as Linux rxe does (0xC000 + a fold of local x remote QPN).
    PerQp,
    /// One port per host pair, whatever the QP: QP scaling then adds no entropy to the
    /// five-tuple, and only E-ECMP can tell the QPs apart.
    Fixed,
}

impl SportPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            SportPolicy::PerQp => "per-qp",
            SportPolicy::Fixed => "fixed",
        }
    }
}

/// rxe's source port: the IPv6 flow label it derives from the QP pair, folded into 14 bits.
pub fn rxe_udp_sport(local_qpn: u32, remote_qpn: u32) -> u16 {
    let mut v = local_qpn as u64 * remote_qpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0xF_FFFF) as u32;
    let folded = (fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14);
    0xC000 | folded as u16
}

/// One port per host pair (symmetric, so both directions agree).
pub fn fixed_udp_sport(a: std::net::Ipv4Addr, b: std::net::Ipv4Addr) -> u16 {
    let x = u32::from(a) ^ u32::from(b);
    0xC000 | ((fabric_common::hash::fmix32(x) & 0x3FFF) as u16)
}

/// Congestion control on top of PFC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum CcMode {
    /// PFC only: senders pace at their configured rate (Meta's production choice).
    #[default]
    None,
    /// DCQCN: CE marks -> CNPs -> rate cuts at the sender.
    Dcqcn,
    /// Receiver-driven admission: a sender writes a chunk only after the receiver's clear to send.
    Cts,
}

impl CcMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CcMode::None => "none",
            CcMode::Dcqcn => "dcqcn",
            CcMode::Cts => "cts",
        }
    }

    /// The scheme one host runs, from `opts` (checked here: the step calls this once before its
    /// threads start). `line_rate_bps` is a sender's rate in slowed time, `resend_after_ns` the
    /// (scaled) time after which a lost control message is sent again.
    pub fn congestion_control(
        self,
        opts: &EndpointOptions,
        line_rate_bps: u64,
        resend_after_ns: u64,
    ) -> anyhow::Result<Box<dyn CongestionControl>> {
        Ok(match self {
            CcMode::None => Box::new(PfcOnly),
            CcMode::Dcqcn => {
                opts.dcqcn.validate()?;
                Box::new(Dcqcn::new(opts.dcqcn.scaled(opts.time_scale.max(1)), line_rate_bps))
            }
            CcMode::Cts => {
                let config =
                    CtsConfig { channels: opts.cts_channels, buffer_bytes: opts.cts_buffer_bytes, resend_after_ns };
                config.validate()?;
                Box::new(Cts::new(config))
            }
        })
    }
}

/// A host that behaves like a NIC whose receive buffer is full: for `duration_ns` from the start
/// of the run it sends PFC XOFF for the data class to its rack switch and takes in nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlowReceiver {
    pub host: String,
    pub duration_ns: u64,
}

impl SlowReceiver {
    /// `HOST[:SECONDS]` (default 1 s).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (host, secs) = match s.split_once(':') {
            Some((h, t)) => (h, t.parse::<f64>().map_err(|e| format!("{t:?}: {e}"))?),
            None => (s, 1.0),
        };
        if host.is_empty() || !(secs.is_finite() && secs > 0.0) {
            return Err(format!("{s:?}: expected HOST[:SECONDS] with SECONDS > 0"));
        }
        Ok(SlowReceiver { host: host.into(), duration_ns: (secs * 1e9) as u64 })
    }
}

/// The RoCE path MTUs (IBTA: 256 to 4096 bytes, powers of two).
pub const PATH_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// The most QPs per connection (a RoCE NIC offers thousands; the testbed's endpoints, one
/// thread per host, stay responsive up to here).
pub const MAX_QPS: u32 = 256;

/// Endpoint settings of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EndpointOptions {
    pub qps: u32,
    pub sport: SportPolicy,
    /// RoCE path MTU in bytes (256..=4096, must fit the link MTU).
    pub path_mtu: u32,
    /// Sending rate of one transfer (all its QPs together), bits/s in the options' time; 0 (the
    /// default): the host link's modelled rate (`tiers.host.rate_gbps` / `time_scale`), which
    /// follows the topology's rates and time scale.
    pub rate_bps: u64,
    /// The responder ACKs every this many packets (and at message end).
    pub ack_every: u32,
    /// Outstanding packets per QP.
    pub window: u32,
    /// In unslowed time (multiplied by `time_scale`, then capped at 1 s of wall time).
    pub retransmit_timeout_ns: u64,
    /// Give up on a step after this long (wall time).
    pub step_timeout_ns: u64,
    /// DSCP of data, ACKs and NAKs (CNPs and CTS messages use 48).
    pub dscp: u8,
    /// Data, ACKs and NAKs are ECN-capable (ECT(0)), so switches mark rather than drop.
    pub ecn: bool,
    pub cc: CcMode,
    /// DCQCN parameters in unslowed time (the engine applies `DcqcnParams::scaled`).
    pub dcqcn: fabric_roce::dcqcn::DcqcnParams,
    /// CTS: chunks granted at once per receiver.
    pub cts_channels: u32,
    /// CTS: bytes of one chunk; in flight toward a receiver <= channels x this.
    pub cts_buffer_bytes: u64,
    /// S: the fabric's slowdown (the topology's); rates / S, timers x S.
    pub time_scale: u64,
    pub slow_receiver: Option<SlowReceiver>,
    /// Go-back-N (RC as NICs run it) or reorder-tolerant ([`fabric_roce::transport`]); a
    /// reorder-tolerant QP keeps at most [`Transport::max_window_packets`] packets in flight
    /// whatever `window` says.
    #[serde(default)]
    pub transport: Transport,
}

impl EndpointOptions {
    /// The largest IP packet the endpoints send: a WRITE FIRST carrying one path MTU (IPv4,
    /// UDP, BTH, RETH, payload, ICRC).
    pub fn largest_ip_packet(&self) -> u32 {
        use fabric_common::wire::{bth, ipv4, udp};
        let headers =
            ipv4::MIN_HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN + fabric_roce::wire::RETH_LEN + bth::ICRC_LEN;
        self.path_mtu + headers as u32
    }

    /// Refuses a path MTU whose packets the links cannot carry.
    pub fn check_fits(&self, link_mtu: u32) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.largest_ip_packet() <= link_mtu,
            "path MTU {}: its packets ({} bytes of IP) do not fit the topology's MTU {link_mtu}",
            self.path_mtu,
            self.largest_ip_packet()
        );
        Ok(())
    }
}

impl Default for EndpointOptions {
    fn default() -> Self {
        EndpointOptions {
            qps: 1,
            sport: SportPolicy::PerQp,
            path_mtu: 1024,
            rate_bps: 0,
            ack_every: 4,
            window: 4096,
            // 64 ms: what a RoCE NIC waits with the usual local ACK timeout exponent (14).
            retransmit_timeout_ns: 64_000_000,
            step_timeout_ns: 60_000_000_000,
            dscp: fabric_roce::traffic_class::DSCP_ROCE,
            ecn: true,
            cc: CcMode::None,
            dcqcn: fabric_roce::dcqcn::DcqcnParams::default(),
            // Four 256 KiB staging buffers, NCCL's default channel buffer size.
            cts_channels: 4,
            cts_buffer_bytes: 256 * 1024,
            time_scale: 1,
            slow_receiver: None,
            transport: Transport::GoBackN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux's rdma_calc_flow_label (v = lqpn * rqpn; v ^= v >> 20; v ^= v >> 40; 20 bits)
    /// and rdma_flow_label_to_udp_sport ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14), | 0xC000).
    /// QPNs are 24 bits, so v < 2^48 and the second fold is v >> 40 of the original v.
    #[test]
    fn rxe_sport_is_linuxs_flow_label_folded() {
        // 0x11 x 0x12 = 0x132: nothing to fold.
        assert_eq!(rxe_udp_sport(0x11, 0x12), 0xC132);
        // 0xABCDEF x 0x123456 = 0xC37_9A59_BA4A. v >> 20 = 0xC3_79A5, v >> 40 = 0xC; the low
        // 20 bits: 0x9BA4A ^ 0x379A5 ^ 0xC = 0xAC3E3 = fl. Its low 14 bits 0x03E3, its high 6
        // bits 0x2B: 0x03E3 ^ 0x2B = 0x03C8, so the port is 0xC3C8.
        assert_eq!(rxe_udp_sport(0xAB_CDEF, 0x12_3456), 0xC3C8);
        assert_ne!(rxe_udp_sport(0x11, 0x12), rxe_udp_sport(0x13, 0x14));
    }

    #[test]
    fn sport_policies() {
        let (a, b) = ("198.18.0.1".parse().unwrap(), "198.18.0.9".parse().unwrap());
        assert_eq!(fixed_udp_sport(a, b), fixed_udp_sport(b, a));
    }

    /// A CTS buffer larger than one WRITE would be sent as several WRITEs, each freeing a
    /// staging buffer: the run refuses it.
    #[test]
    fn a_cts_buffer_over_one_write_is_refused() {
        let max = fabric_roce::qp::MAX_WRITE_BYTES;
        let opts = |cts_buffer_bytes| EndpointOptions { cc: CcMode::Cts, cts_buffer_bytes, ..Default::default() };
        assert!(CcMode::Cts.congestion_control(&opts(max), 1, 1).is_ok());
        let err = CcMode::Cts.congestion_control(&opts(max + 1), 1, 1).unwrap_err();
        assert!(err.to_string().contains("larger than the largest single WRITE"), "{err}");
        assert!(CcMode::Cts.congestion_control(&opts(0), 1, 1).is_err());
    }

    #[test]
    fn slow_receiver_flag() {
        assert_eq!(
            SlowReceiver::parse("z0r0h1:2.5"),
            Ok(SlowReceiver { host: "z0r0h1".into(), duration_ns: 2_500_000_000 })
        );
        assert_eq!(SlowReceiver::parse("z0r0h1").unwrap().duration_ns, 1_000_000_000);
        assert!(SlowReceiver::parse("z0r0h1:0").is_err());
        assert!(SlowReceiver::parse(":3").is_err());
        assert!(SlowReceiver::parse("h:x").is_err());
    }
}
