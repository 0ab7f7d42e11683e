//! Types and pure functions shared by the XDP data plane (`fabric-ebpf`) and the controller
//! (`fabric-user`).
//!
//! Everything the kernel program decides is decided here, so that it is unit-tested on the host
//! with `cargo test` and the XDP code stays thin glue over packets and maps:
//! - [`wire`]: header layouts (named field offsets) and the [`wire::PacketBytes`] accessor;
//! - [`parse`]: Ethernet / 802.1Q / IPv4 / IPv6 / UDP / InfiniBand BTH parsing;
//! - [`hash`]: the switch hash (CRC32 + avalanche) and ECMP member selection per mode;
//! - [`config`]: per-switch settings (hash mode, seed) and port descriptors;
//! - [`route`]: the LPM and ECMP-group map layouts;
//! - [`maps`]: the names of the switch's maps (the kernel/controller contract);
//! - [`te`]: per-flow entries of centralised traffic engineering;
//! - [`balance`]: the routing modes that read switch state (flowlet, adaptive, spray, wcmp);
//! - [`forward`]: the forwarding decision built from the above;
//! - [`checksum`]: incremental Internet checksum updates;
//! - [`counters`]: per-port counters and drop reasons;
//! - [`fault`]: injected link loss, a seeded draw per frame;
//! - [`icrc`]: the RoCEv2 invariant CRC;
//! - [`queue`]: the modelled (phantom) egress queue, ingress accounting, RED/ECN marking;
//! - [`qos`]: priority classes, buffer limits, thresholds and the per-packet queue verdict;
//! - [`pfc`]: 802.1Qbb priority flow control frames.
#![cfg_attr(not(test), no_std)]

pub mod balance;
pub mod checksum;
pub mod config;
pub mod counters;
pub mod fault;
pub mod forward;
pub mod hash;
pub mod icrc;
pub mod maps;
pub mod parse;
pub mod pfc;
pub mod qos;
pub mod queue;
pub mod rng;
pub mod route;
pub mod te;
pub mod wire;

#[cfg(feature = "user")]
mod pod;
