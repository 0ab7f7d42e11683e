//! The fabric switch: one XDP program attached to every port of a switch.
//!
//! Thin glue: read the packet through [`packet::XdpPacket`], let `fabric_common` parse it and
//! decide, then apply the decision (rewrite, redirect) and count.
//!
//! The crate also compiles for the host (stable, with std), like any other workspace member, so
//! that `cargo clippy`/`cargo test` cover it: the bpf-only pieces (`no_std`, `no_main`, the
//! nightly intrinsics, the panic handler) are behind `target_arch = "bpf"`.
//!
//! Slow paths only log (aya-log: a record in the `AYA_LOGS` ring buffer, which the switch agent
//! writes into its log with the switch's name): a frame on an ifindex the controller did not
//! register, a port index beyond the counter arrays, a missing `CONFIG` entry, a redirect to a
//! port whose `EGRESS` slot is empty, and an XOFF request lost to a full `PFC_EVENTS` ring (see
//! `congestion`). Each is a controller bug or an overload the model cannot absorb, never a
//! per-packet event of a working switch; every log call is extra verifier work, so the fast path
//! has none.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// Atomic compare-and-swap on the modelled queues: the BPF target has no `AtomicU64::compare_exchange`
// (see `congestion::cas`; the host uses `AtomicU64`).
#![cfg_attr(target_arch = "bpf", expect(internal_features, reason = "core::intrinsics::atomic_cxchg/atomic_xadd"))]
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]

mod atomic;
mod congestion;
mod fault;
mod generator;
mod maps;
mod packet;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use aya_log_ebpf::{error, warn};
use fabric_common::{
    checksum,
    config::{PortInfo, SwitchConfig},
    counters::{DropReason, PassReason, PortCounters},
    forward::{Decision, decide},
    parse::{IpHeader, ParseError, parse_packet},
    qos::QosConfig,
    wire::PacketBytes,
    wire::{ethernet, ipv4, ipv6},
};
use maps::{CONFIG, EGRESS, MEMBER_COUNTERS, PORT_COUNTERS, PORTS, QOS, Tables};
use packet::XdpPacket;

#[xdp]
pub fn fabric_switch(ctx: XdpContext) -> u32 {
    let mut pkt = XdpPacket::new(&ctx);
    // A port the controller did not register is not ours to switch.
    let ifindex = ctx.ingress_ifindex() as u32;
    let Some(port) = PORTS.get(ifindex).filter(|p| p.is_present()) else {
        warn!(&ctx, "frame on ifindex {}, which is no registered port: passed to the kernel", ifindex);
        return xdp_action::XDP_PASS;
    };
    let Some(cfg) = CONFIG.get(0) else {
        error!(&ctx, "the CONFIG entry is missing: passed to the kernel");
        return xdp_action::XDP_PASS;
    };
    let qos = QOS.get(0).filter(|q| q.enabled != 0);
    let len = pkt.len() as u64;
    let Some(rx) = port_counters(port.index) else {
        error!(&ctx, "port {} (ifindex {}) is beyond the counter arrays: passed to the kernel", port.index, ifindex);
        return xdp_action::XDP_PASS;
    };
    rx.rx_packets += 1;
    rx.rx_bytes += len;
    // MAC control frames are link-local: a PFC frame pauses this port, and none is forwarded.
    if pkt.u16_at(ethernet::ETHERTYPE.start) == Some(ethernet::ETHERTYPE_MAC_CONTROL) {
        if !congestion::receive_pause(&pkt, port.index) {
            return drop(rx, DropReason::BadMacControl);
        }
        rx.rx_pfc_frames += 1;
        return xdp_action::XDP_DROP;
    }
    // The settings by reference, not copied: a 16-byte copy on the stack takes the program over
    // the 512-byte stack limit of Linux 6.1's verifier (which rounds the main frame up to 32).
    let sw = Switch { cfg, qos };
    switch_packet(&ctx, &mut pkt, &sw, port, rx, len)
}

/// The switch's settings, read once per run.
struct Switch<'a> {
    cfg: &'a SwitchConfig,
    /// The congestion model's settings, when it is on.
    qos: Option<&'a QosConfig>,
}

#[inline(always)]
fn switch_packet(
    ctx: &XdpContext,
    pkt: &mut XdpPacket,
    sw: &Switch,
    port: &PortInfo,
    rx: &mut PortCounters,
    len: u64,
) -> u32 {
    let parsed = match parse_packet(&*pkt) {
        Ok(p) => p,
        Err(ParseError::NotIp { .. }) => return pass(rx, PassReason::NotIp),
        Err(ParseError::Malformed(reason)) => return drop(rx, reason),
    };
    if parsed.is_roce() {
        rx.rx_roce_packets += 1;
    }
    // The clock is read at most once per packet, where it is first needed (the clocked modes'
    // choice, else the congestion model), and that one reading serves both.
    let tables = Tables::default();
    let (group, member_index, member) = match decide(&tables, sw.cfg, port, &parsed) {
        Decision::Forward { group, member_index, member } => (group, member_index, member),
        Decision::Pass(reason) => return pass(rx, reason),
        Decision::Drop(reason) => return drop(rx, reason),
    };

    // The egress first: a packet the DEVMAP cannot take must not be charged to the queue model,
    // the ingress account or the class counters. bpf_redirect_map only records the target; a
    // later XDP_DROP discards it.
    let action = match EGRESS.redirect(member.port, 0) {
        Ok(action) => action,
        Err(_) => {
            error!(ctx, "redirect to port {} failed (no EGRESS slot): dropped", member.port);
            return drop(rx, DropReason::RedirectFailed);
        }
    };
    // The modelled egress queue: may drop (a full lossy class) or mark CE; before the TTL
    // rewrite, which reads the checksum that marking updates.
    if let Some(qos) = sw.qos
        && let Err(reason) = congestion::offer(pkt, &parsed, qos, tables.clock(), port.index, member.port, len)
    {
        return drop(rx, reason);
    }
    // Injected loss: the frame was queued and sent, and the link lost it.
    if fault::link_loses(member.port) {
        return drop(rx, DropReason::LinkLoss);
    }

    // Rewrite: MACs, then TTL / hop limit (IPv4 checksum updated incrementally).
    let Some(eth) = pkt.bytes_mut::<{ ethernet::HEADER_LEN }>(0) else {
        return drop(rx, DropReason::TruncatedEthernet);
    };
    eth[ethernet::DST].copy_from_slice(&member.dst_mac);
    eth[ethernet::SRC].copy_from_slice(&member.src_mac);
    match parsed.ip {
        IpHeader::V4 { ttl, .. } => {
            let Some(ip) = pkt.bytes_mut::<{ ipv4::MIN_HEADER_LEN }>(parsed.l3_offset) else {
                return drop(rx, DropReason::TruncatedIpv4);
            };
            let csum = u16::from_be_bytes([ip[ipv4::CHECKSUM.start], ip[ipv4::CHECKSUM.start + 1]]);
            let csum = checksum::ipv4_ttl_decrement(csum, ttl, parsed.protocol);
            ip[ipv4::TTL] = ttl - 1;
            ip[ipv4::CHECKSUM].copy_from_slice(&csum.to_be_bytes());
        }
        IpHeader::V6 { hop_limit, .. } => {
            let Some(ip) = pkt.bytes_mut::<{ ipv6::HEADER_LEN }>(parsed.l3_offset) else {
                return drop(rx, DropReason::TruncatedIpv6);
            };
            ip[ipv6::HOP_LIMIT] = hop_limit - 1;
        }
    }

    // A route may send a packet back out of the port it came in on: its counters are then `rx`
    // itself, and a second `&mut` to them (from `port_counters`) would alias it.
    let tx = if member.port == port.index { Some(rx) } else { port_counters(member.port) };
    if let Some(tx) = tx {
        tx.tx_packets += 1;
        tx.tx_bytes += len;
        if parsed.is_roce() {
            tx.tx_roce_packets += 1;
        }
    }
    if let Some(m) = MEMBER_COUNTERS.get_ptr_mut(fabric_common::counters::member_slot(group, member_index)) {
        // SAFETY: `get_ptr_mut` returned a pointer only for an in-bounds slot: this CPU's copy of
        // a per-CPU array value, valid while the program runs. XDP runs in NAPI (softirq) context,
        // so no other program run on this CPU interleaves with this one, and this is the only
        // reference to the slot this run makes.
        let m = unsafe { &mut *m };
        m.packets += 1;
        m.bytes += len;
    }
    action
}

#[inline(always)]
fn port_counters(index: u32) -> Option<&'static mut PortCounters> {
    // SAFETY: `get_ptr_mut` returned a pointer only for an in-bounds slot: this CPU's copy of a
    // per-CPU array value, valid while the program runs. XDP runs in NAPI (softirq) context, so no
    // other program run on this CPU interleaves with this one; the reference does not outlive the
    // invocation, and a run takes one per port (`switch_packet` reuses `rx` when the egress is the
    // ingress port).
    PORT_COUNTERS.get_ptr_mut(index).map(|p| unsafe { &mut *p })
}

#[inline(always)]
fn pass(c: &mut PortCounters, reason: PassReason) -> u32 {
    if let Some(n) = c.passes.get_mut(reason as usize) {
        *n += 1;
    }
    xdp_action::XDP_PASS
}

#[inline(always)]
fn drop(c: &mut PortCounters, reason: DropReason) -> u32 {
    if let Some(n) = c.drops.get_mut(reason as usize) {
        *n += 1;
    }
    xdp_action::XDP_DROP
}

/// A bare XDP_PASS: the benchmark floor, and the program a host-side veth needs so that frames
/// redirected into it are delivered (veth only receives XDP_REDIRECT with NAPI on the peer).
#[xdp]
pub fn xdp_pass(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

/// Benchmark baseline: parse every header, then redirect to port 0 without routing or hashing.
#[xdp]
pub fn bench_parse_redirect(ctx: XdpContext) -> u32 {
    let pkt = XdpPacket::new(&ctx);
    match parse_packet(&pkt) {
        Ok(_) => EGRESS.redirect(0, 0).unwrap_or(xdp_action::XDP_ABORTED),
        Err(ParseError::NotIp { .. }) => xdp_action::XDP_PASS,
        Err(ParseError::Malformed(_)) => xdp_action::XDP_DROP,
    }
}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// The host build of this crate exists for clippy and the unit tests only; a bin target needs a
/// `main` to link, and running it does nothing (the programs above run in the kernel, loaded
/// from the bpf build by `fabric-user`).
#[cfg(not(target_arch = "bpf"))]
fn main() {}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
