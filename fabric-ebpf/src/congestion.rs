//! The congestion model's glue: the modelled egress queue of every forwarded packet (ECN marks,
//! overflow drops, PFC accounting at the ingress) and the PFC frames a port receives.
//!
//! Decisions are `fabric_common::qos` / `fabric_common::queue`; this module reads the maps,
//! the clock and the packet, and applies them. The one shared, multi-writer value is a queue's
//! tail, updated with compare-and-swap; everything else has a single writer (a port's own
//! receive path) or is per-CPU.
use core::{
    intrinsics::{AtomicOrdering, atomic_cxchg, atomic_xadd},
    ptr::{addr_of, addr_of_mut, read_volatile, write_volatile},
};

use aya_ebpf::helpers::{bpf_get_prandom_u32, bpf_ktime_get_ns};
use fabric_common::{
    counters::DropReason,
    parse::{IpHeader, ParsedPacket},
    pfc::{CLASSES, PauseFrame, quanta_to_ns},
    qos::{ClassCounters, PfcEvent, Verdict, class_of, class_slot, tos_of},
    queue::{depth_bytes, enqueue_tail, mark_ce_ipv4, mark_ce_ipv6, pause_shift, paused_time_delta, transmit_ns},
    wire::ipv4,
};

use crate::maps::{ACCOUNTS, CLASS_COUNTERS, PFC_EVENTS, PFC_XOFF, POOL_USED, PORT_RATE, QOS, QUEUES};
use crate::packet::XdpPacket;

/// Compare-and-swap attempts on a queue's tail before falling back to an atomic add (which is
/// exact whenever the queue is busy, the only time CPUs collide on it).
const CAS_TRIES: usize = 4;
/// `BPF_RB_FORCE_WAKEUP` of bpf_ringbuf_output.
const BPF_RB_FORCE_WAKEUP: u64 = 2;

#[inline(always)]
fn cas(ptr: *mut u64, old: u64, new: u64) -> (u64, bool) {
    // SAFETY: `ptr` points into a map value, valid for the program's run; BPF_CMPXCHG.
    unsafe { atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(ptr, old, new) }
}

/// Atomic add whose result is not used: BPF CPU v1 encodes only that form (XADD).
#[inline(always)]
fn fetch_add(ptr: *mut u64, v: u64) {
    // SAFETY: as for `cas`.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::SeqCst }>(ptr, v) };
}

#[inline(always)]
fn class_counters(slot: u32) -> Option<&'static mut ClassCounters> {
    // SAFETY: per-CPU slot; this CPU is the only writer during the program's run.
    CLASS_COUNTERS.get_ptr_mut(slot).map(|p| unsafe { &mut *p })
}

/// Offers a packet about to leave through `egress` to its modelled queue. `Err` means drop it;
/// `Ok` means forward it (the packet may have been marked CE). Must run before the TTL rewrite,
/// which updates the IPv4 checksum from the one in the packet.
#[inline(always)]
pub fn offer(pkt: &XdpPacket, parsed: &ParsedPacket, ingress: u32, egress: u32, len: u64) -> Result<(), DropReason> {
    let Some(qos) = QOS.get(0) else { return Ok(()) };
    if qos.enabled == 0 {
        return Ok(());
    }
    let tos = tos_of(parsed);
    let class = class_of(tos);
    let slot = class_slot(egress, class);
    let Some(q) = QUEUES.get_ptr_mut(slot) else { return Ok(()) };
    let rate = PORT_RATE.get(egress).copied().unwrap_or(0);
    // SAFETY: helpers without preconditions.
    let (now, random) = unsafe { (bpf_ktime_get_ns(), bpf_get_prandom_u32()) };
    let tx = transmit_ns(len, rate);
    let limit = qos.queue_limit(POOL_USED.get(0).copied().unwrap_or(0));

    // SAFETY: `q` is a valid map value; fields are read and written through raw pointers
    // (volatile or atomic) because other CPUs update them concurrently.
    let tail_ptr = unsafe { addr_of_mut!((*q).tail_ns) };
    let paused_until = unsafe { read_volatile(addr_of!((*q).paused_until_ns)) };
    let mut tail = unsafe { read_volatile(tail_ptr) };
    let mut new_tail = enqueue_tail(tail, paused_until, now, tx);
    let verdict = qos.verdict(tos, depth_bytes(new_tail, paused_until, now, rate), limit, random);
    let counters = class_counters(slot);
    let Verdict::Forward { mark, over_headroom } = verdict else {
        if let Some(c) = counters {
            c.overflow_drops += 1;
        }
        return Err(DropReason::BufferOverflow);
    };

    let mut queued = false;
    for _ in 0..CAS_TRIES {
        let (seen, ok) = cas(tail_ptr, tail, new_tail);
        if ok {
            queued = true;
            break;
        }
        tail = seen;
        new_tail = enqueue_tail(tail, paused_until, now, tx);
    }
    if !queued {
        fetch_add(tail_ptr, tx);
        // SAFETY: as above.
        new_tail = unsafe { read_volatile(tail_ptr) };
    }
    let depth = depth_bytes(new_tail, paused_until, now, rate);
    // SAFETY: as above. A racy maximum: telemetry, and only a simultaneous new maximum is lost.
    unsafe {
        let max_ptr = addr_of_mut!((*q).max_depth_bytes);
        if depth > read_volatile(max_ptr) {
            write_volatile(max_ptr, depth);
        }
    }

    if let Some(c) = counters {
        c.packets += 1;
        c.bytes += len;
        c.over_headroom += over_headroom as u64;
        c.sent_while_paused += (paused_until > now) as u64;
        c.ecn_marked += mark as u64;
    }
    if mark {
        mark_ce(pkt, parsed);
    }
    if qos.is_lossless(class) {
        account_ingress(ingress, class, now, len, new_tail, qos.xoff_bytes as u64);
    }
    Ok(())
}

/// Sets CE in the IP header (the TOS byte and checksum for IPv4).
#[inline(always)]
fn mark_ce(pkt: &XdpPacket, parsed: &ParsedPacket) {
    match parsed.ip {
        IpHeader::V4 { .. } => {
            if let Some(ip) = pkt.bytes_mut::<{ ipv4::MIN_HEADER_LEN }>(parsed.l3_offset) {
                let csum = u16::from_be_bytes([ip[ipv4::CHECKSUM.start], ip[ipv4::CHECKSUM.start + 1]]);
                let (tos, csum) = mark_ce_ipv4(ip[0], ip[1], csum);
                ip[1] = tos;
                ip[ipv4::CHECKSUM].copy_from_slice(&csum.to_be_bytes());
            }
        }
        IpHeader::V6 { .. } => {
            if let Some(ip) = pkt.bytes_mut::<2>(parsed.l3_offset) {
                *ip = mark_ce_ipv6(*ip);
            }
        }
    }
}

/// Charges the packet to its ingress port/class and asks the agent for a pause when the bytes
/// held on that ingress's behalf cross Xoff (once: the agent refreshes and resumes).
#[inline(always)]
fn account_ingress(ingress: u32, class: usize, now: u64, len: u64, departs: u64, xoff: u64) {
    let slot = class_slot(ingress, class);
    let Some(acc) = ACCOUNTS.get_ptr_mut(slot) else { return };
    // SAFETY: only this ingress port's receive path writes its account.
    let held = unsafe { (*acc).admit(now, len, departs) };
    if held <= xoff {
        return;
    }
    let Some(flag) = PFC_XOFF.get_ptr_mut(slot) else { return };
    // SAFETY: a map value; the agent clears it concurrently, hence the atomic.
    if unsafe { read_volatile(flag) } != 0 || !cas(flag, 0, now).1 {
        return;
    }
    let event = PfcEvent { time_ns: now, held_bytes: held, port: ingress, class: class as u32 };
    // Wake the agent at once: an XOFF is rare and late is costly.
    let sent = PFC_EVENTS.output::<PfcEvent>(&event, BPF_RB_FORCE_WAKEUP).is_ok();
    if let Some(c) = class_counters(slot) {
        if sent {
            c.xoff_events += 1;
        } else {
            c.xoff_events_lost += 1;
        }
    }
    if !sent {
        // Let a later packet ask again.
        // SAFETY: as above.
        unsafe { write_volatile(flag, 0) };
    }
}

/// A MAC control frame arrived on port `port`: if it is PFC, pause (or resume) that port's
/// classes. Returns whether it was a valid PFC frame. The frame itself is always consumed.
#[inline(always)]
pub fn receive_pause(pkt: &XdpPacket, port: u32) -> bool {
    let Ok(frame) = PauseFrame::read(pkt) else { return false };
    let Some(qos) = QOS.get(0) else { return true };
    let rate = PORT_RATE.get(port).copied().unwrap_or(0);
    if qos.enabled == 0 || rate == 0 {
        return true;
    }
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    for class in 0..CLASSES {
        let Some(quanta) = frame.class_quanta(class) else { continue };
        let Some(q) = QUEUES.get_ptr_mut(class_slot(port, class)) else { continue };
        let until = if quanta == 0 { 0 } else { now + quanta_to_ns(quanta, rate) };
        // SAFETY: `q` is a valid map value. This port's receive path is the only writer of the
        // pause fields; the tail is shared, so it moves by an atomic add.
        unsafe {
            let old = read_volatile(addr_of!((*q).paused_until_ns));
            let tail_ptr = addr_of_mut!((*q).tail_ns);
            let shift = pause_shift(read_volatile(tail_ptr), old, until, now);
            if shift != 0 {
                fetch_add(tail_ptr, shift);
            }
            let total = read_volatile(addr_of!((*q).paused_total_ns));
            write_volatile(addr_of_mut!((*q).paused_total_ns), total.wrapping_add(paused_time_delta(old, until, now)));
            if old <= now && until > now {
                write_volatile(addr_of_mut!((*q).paused_since_ns), now);
            }
            write_volatile(addr_of_mut!((*q).paused_until_ns), until);
            let n = read_volatile(addr_of!((*q).pauses_received));
            write_volatile(addr_of_mut!((*q).pauses_received), n + 1);
        }
    }
    true
}
