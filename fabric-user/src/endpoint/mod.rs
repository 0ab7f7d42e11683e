//! Our own RoCEv2 endpoints on the testbed's hosts: RC QPs from [`crate::roce`] driven over UDP
//! sockets inside each host's namespace, one thread per host.
//!
//! A step of a collective is a set of transfers (host to host, bytes); each is striped over
//! `qps` QPs, one message per QP, as a collective library does with
//! `NCCL_IB_QPS_PER_CONNECTION`. A step ends when every requester has every message acknowledged.
pub mod engine;
pub mod socket;

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

/// Endpoint settings of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EndpointOptions {
    pub qps: u32,
    pub sport: SportPolicy,
    /// RoCE path MTU in bytes (256..=4096, must fit the link MTU).
    pub path_mtu: u32,
    /// Sending rate of one transfer (all its QPs together), bits/s.
    pub rate_bps: u64,
    /// The responder ACKs every this many packets (and at message end).
    pub ack_every: u32,
    /// Outstanding packets per QP.
    pub window: u32,
    pub retransmit_timeout_ns: u64,
    /// Give up on a step after this long.
    pub step_timeout_ns: u64,
}

impl Default for EndpointOptions {
    fn default() -> Self {
        EndpointOptions {
            qps: 1,
            sport: SportPolicy::PerQp,
            path_mtu: 1024,
            rate_bps: 100_000_000,
            ack_every: 4,
            window: 128,
            // 64 ms: what a RoCE NIC waits with the usual local ACK timeout exponent (14).
            retransmit_timeout_ns: 64_000_000,
            step_timeout_ns: 60_000_000_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sport_policies() {
        assert!(rxe_udp_sport(0x11, 0x12) >= 0xC000);
        assert_ne!(rxe_udp_sport(0x11, 0x12), rxe_udp_sport(0x13, 0x14));
        let (a, b) = ("198.18.0.1".parse().unwrap(), "198.18.0.9".parse().unwrap());
        assert_eq!(fixed_udp_sport(a, b), fixed_udp_sport(b, a));
    }
}
