//! The congestion model's glue: the modelled egress queue of every forwarded packet (ECN marks,
//! overflow drops, PFC accounting at the ingress) and the PFC frames a port receives.
//!
//! Decisions are `fabric_common::qos` / `fabric_common::queue`; this module reads the maps,
//! the clock and the packet, and applies them. The one shared, multi-writer value is a queue's
//! tail, updated with compare-and-swap; everything else has a single writer (a port's own
//! receive path) or is per-CPU.
use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};

use aya_ebpf::helpers::{bpf_get_prandom_u32, bpf_ktime_get_ns};
use fabric_common::{
    counters::DropReason,
    parse::{IpHeader, ParsedPacket},
    pfc::{CLASSES, PauseFrame, quanta_to_ns},
    qos::{BufferMode, ClassCounters, PfcEvent, QosConfig, Verdict, class_of, class_slot, tos_of},
    queue::{LineRate, enqueue_tail, mark_ce_ipv4, mark_ce_ipv6, pause_shift, paused_time_delta},
    wire::ipv4,
};

use crate::packet::XdpPacket;
use crate::{
    atomic::{cas, fetch_add, load_shared},
    maps::{ACCOUNTS, CLASS_COUNTERS, PFC_EVENTS, PFC_XOFF, POOL_USED, PORT_RATE, QOS, QUEUES},
};

/// Compare-and-swap attempts on a queue's tail before falling back to an atomic add (which is
/// exact whenever the queue is busy, the only time CPUs collide on it).
const CAS_TRIES: usize = 4;
/// `BPF_RB_FORCE_WAKEUP` of bpf_ringbuf_output.
const BPF_RB_FORCE_WAKEUP: u64 = 2;

#[inline(always)]
fn class_counters(slot: u32) -> Option<&'static mut ClassCounters> {
    // SAFETY: `get_ptr_mut` returned a pointer only for an in-bounds slot: this CPU's copy of a
    // per-CPU array value, valid while the program runs. XDP runs in NAPI (softirq) context, so no
    // other program run on this CPU interleaves with this one; callers hold one such reference at
    // a time (`offer` is done with its own before `account_ingress` takes one).
    CLASS_COUNTERS.get_ptr_mut(slot).map(|p| unsafe { &mut *p })
}

/// Offers a packet about to leave through `egress` to its modelled queue. `Err` means drop it;
/// `Ok` means forward it (the packet may have been marked CE). Must run before the TTL rewrite,
/// which updates the IPv4 checksum from the one in the packet.
#[inline(always)]
pub fn offer(
    pkt: &mut XdpPacket,
    parsed: &ParsedPacket,
    qos: &QosConfig,
    now: u64,
    ingress: u32,
    egress: u32,
    len: u64,
) -> Result<(), DropReason> {
    let tos = tos_of(parsed);
    let class = class_of(tos);
    let slot = class_slot(egress, class);
    let Some(q) = QUEUES.get_ptr_mut(slot) else { return Ok(()) };
    // The rate's factors, set with it: no division per packet (`LineRate`).
    let line = PORT_RATE.get(egress).unwrap_or(&LineRate::STOPPED);
    let tx = line.frame_transmit_ns(len);
    // The pool's use matters in shared-buffer mode only: a static buffer skips the lookup.
    let pool_used =
        if qos.buffer_mode == BufferMode::Shared as u32 { POOL_USED.get(0).copied().unwrap_or(0) } else { 0 };
    let limit = qos.queue_limit(pool_used);

    // SAFETY: `q` came from `QUEUES.get_ptr_mut` for an in-bounds slot: an array map value,
    // valid (and 8-byte aligned) while the program runs. Its fields are only ever accessed through
    // raw pointers (volatile or atomic), never through a reference, because other CPUs update
    // them concurrently; this only computes a field's address.
    let tail_ptr = unsafe { addr_of_mut!((*q).tail_ns) };
    // SAFETY: `q` is valid and aligned (above). An aligned u64 volatile read is one untorn load
    // (READ_ONCE); the field's one writer is the egress port's receive path (`receive_pause`),
    // perhaps on another CPU, with untorn volatile stores.
    let paused_until = unsafe { read_volatile(addr_of!((*q).paused_until_ns)) };
    // RED's random number only where it decides (see `QosConfig::verdict_with`).
    // SAFETY: bpf_get_prandom_u32 takes no arguments and has no preconditions.
    let draw = || unsafe { bpf_get_prandom_u32() };
    let judge = |new_tail: u64| qos.verdict_with(tos, line.depth_bytes(new_tail, paused_until, now), limit, draw);
    // SAFETY: `tail_ptr` is a valid, aligned field of the map value `q` (above), which every
    // CPU changes only with `cas` and `fetch_add` and reads with `load_shared`.
    let (verdict, new_tail) = unsafe { judge_and_enqueue(tail_ptr, paused_until, now, tx, judge) };
    let counters = class_counters(slot);
    let Verdict::Forward { mark, over_headroom } = verdict else {
        if let Some(c) = counters {
            c.overflow_drops += 1;
        }
        return Err(DropReason::BufferOverflow);
    };
    let depth = line.depth_bytes(new_tail, paused_until, now);
    // SAFETY: `q` is a valid, aligned map value (above); the field is accessed only through
    // volatile, untorn u64 loads and stores (READ_ONCE/WRITE_ONCE), never a reference. A racy
    // maximum: telemetry, and only a simultaneous new maximum is lost.
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

/// Judges a packet that takes `tx` ns and, unless the verdict is to drop it, queues it behind
/// the tail at `tail_ptr`, shared by every CPU that forwards to the port: the verdict and the
/// tail it was judged on (the new tail when queued). Each attempt reads the tail, computes the
/// new one and judges the depth it gives, then moves the tail by compare-and-swap from the value
/// it read: the verdict is always that of the queue the packet joins. After [`CAS_TRIES`]
/// failed swaps (CPUs colliding on a busy queue), the last tail seen is judged and an atomic add
/// moves the tail by what that attempt would have: the packet's transmit time plus any idle gap
/// before it (an add of `tx` alone would start an idle queue's packet in the past).
///
/// # Safety
/// `tail_ptr` as for [`cas`].
#[inline(always)]
unsafe fn judge_and_enqueue(
    tail_ptr: *mut u64,
    paused_until: u64,
    now: u64,
    tx: u64,
    judge: impl Fn(u64) -> Verdict,
) -> (Verdict, u64) {
    // SAFETY: the caller's promise (above), for this load and the swaps and the add below.
    let mut tail = unsafe { load_shared(tail_ptr) };
    for _ in 0..CAS_TRIES {
        let new_tail = enqueue_tail(tail, paused_until, now, tx);
        let verdict = judge(new_tail);
        if !matches!(verdict, Verdict::Forward { .. }) {
            return (verdict, tail);
        }
        // SAFETY: as for the load above.
        let (seen, ok) = unsafe { cas(tail_ptr, tail, new_tail) };
        if ok {
            return (verdict, new_tail);
        }
        tail = seen;
    }
    let new_tail = enqueue_tail(tail, paused_until, now, tx);
    let verdict = judge(new_tail);
    if matches!(verdict, Verdict::Forward { .. }) {
        // SAFETY: as for the load above.
        unsafe { fetch_add(tail_ptr, new_tail - tail) };
    }
    (verdict, new_tail)
}

/// Sets CE in the IP header (the TOS byte and checksum for IPv4).
#[inline(always)]
fn mark_ce(pkt: &mut XdpPacket, parsed: &ParsedPacket) {
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
    // SAFETY: `acc` came from `ACCOUNTS.get_ptr_mut` for an in-bounds slot, so it is a valid,
    // aligned map value for the program's run. Only this ingress port's receive path writes it:
    // a port is a veth with one receive queue, whose NAPI poll (where this program runs for the
    // port) runs on one CPU at a time, so the `&mut` that `admit` takes is unique; the agent only
    // reads it, through the bpf syscall's copy.
    let held = unsafe { (*acc).admit(now, len, departs) };
    if held <= xoff {
        return;
    }
    let Some(flag) = PFC_XOFF.get_ptr_mut(slot) else { return };
    // SAFETY: `flag` came from `PFC_XOFF.get_ptr_mut` for an in-bounds slot: a valid, aligned
    // u64 map value. The agent clears it concurrently (through the bpf syscall), so it is read
    // with an untorn load and set with compare-and-swap.
    if unsafe { load_shared(flag) } != 0 || !unsafe { cas(flag, 0, now) }.1 {
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
        // The agent is not draining the ring: this pause is not sent. Counted
        // (`xoff_events_lost`, in `fabric stats`), not logged: the message alone cost the
        // verifier 26k instructions per switch, which every `up` pays.
        // Let a later packet ask again.
        // SAFETY: `flag` is a valid, aligned u64 map value (above); an untorn volatile store. The
        // CAS above made this run the one that set it, so the only other possible writer is the
        // agent clearing it, which stores the same 0.
        unsafe { write_volatile(flag, 0) };
    }
}

/// A MAC control frame arrived on port `port`: if it is PFC, pause (or resume) that port's
/// classes. Returns whether it was a valid PFC frame. The frame itself is always consumed.
#[inline(always)]
pub fn receive_pause(pkt: &XdpPacket, port: u32) -> bool {
    let Ok(frame) = PauseFrame::read(pkt) else { return false };
    let Some(qos) = QOS.get(0) else { return true };
    let rate = PORT_RATE.get(port).map_or(0, |l| l.bps);
    if qos.enabled == 0 || rate == 0 {
        return true;
    }
    // SAFETY: bpf_ktime_get_ns takes no arguments and has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    for class in 0..CLASSES {
        let Some(quanta) = frame.class_quanta(class) else { continue };
        let Some(q) = QUEUES.get_ptr_mut(class_slot(port, class)) else { continue };
        let until = if quanta == 0 { 0 } else { now + quanta_to_ns(quanta, rate) };
        // SAFETY: `q` came from `QUEUES.get_ptr_mut` for an in-bounds slot: a valid, aligned map
        // value for the program's run, accessed only through raw pointers (no reference). The
        // pause fields and `pauses_received` have one writer, this port's receive path (a veth
        // with one receive queue: its NAPI poll runs on one CPU at a time), so the volatile
        // read-modify-writes do not race with another writer, only with untorn volatile reads on
        // other CPUs. The tail is shared by every forwarding CPU, so it moves by an atomic add.
        unsafe {
            let old = read_volatile(addr_of!((*q).paused_until_ns));
            let tail_ptr = addr_of_mut!((*q).tail_ns);
            let shift = pause_shift(load_shared(tail_ptr), old, until, now);
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

#[cfg(test)]
mod tests {
    use core::sync::atomic::{AtomicU64, Ordering};

    use fabric_common::qos::Verdict;

    use super::{CAS_TRIES, judge_and_enqueue};

    // The enqueue on an `AtomicU64`: valid, 8-byte aligned, and accessed only atomically (by it
    // and by the tests' own atomic loads and adds), as the function requires.

    fn enqueue_on(v: &AtomicU64, paused: u64, now: u64, tx: u64, judge: impl Fn(u64) -> Verdict) -> (Verdict, u64) {
        // SAFETY: `v` is a live AtomicU64 (above).
        unsafe { judge_and_enqueue(v.as_ptr(), paused, now, tx, judge) }
    }

    const FORWARD: Verdict = Verdict::Forward { mark: false, over_headroom: false };

    fn always_forward(_: u64) -> Verdict {
        FORWARD
    }

    #[test]
    fn enqueue_queues_behind_the_real_tail() {
        // Another CPU moved the tail to 1_000: this one queues behind it.
        let tail = AtomicU64::new(1_000);
        assert_eq!(enqueue_on(&tail, 0, 50, 30, always_forward), (FORWARD, 1_030));
        assert_eq!(tail.load(Ordering::SeqCst), 1_030);
    }

    #[test]
    fn enqueue_on_an_idle_queue_starts_now_or_after_the_pause() {
        let tail = AtomicU64::new(40);
        assert_eq!(enqueue_on(&tail, 0, 500, 10, always_forward).1, 510);
        let tail = AtomicU64::new(40);
        assert_eq!(enqueue_on(&tail, 900, 500, 10, always_forward).1, 910);
        assert_eq!(tail.load(Ordering::SeqCst), 910);
    }

    /// The verdict is taken on the tail the packet joins, and a dropped packet leaves the queue
    /// as it was.
    #[test]
    fn the_verdict_is_the_queue_it_joins_and_a_drop_queues_nothing() {
        let limit_tail = 1_000;
        let judge = |new_tail: u64| if new_tail > limit_tail { Verdict::Overflow } else { FORWARD };
        let tail = AtomicU64::new(980);
        assert_eq!(enqueue_on(&tail, 0, 0, 30, judge), (Verdict::Overflow, 980));
        assert_eq!(tail.load(Ordering::SeqCst), 980, "a dropped packet is not queued");
        let tail = AtomicU64::new(900);
        assert_eq!(enqueue_on(&tail, 0, 0, 30, judge), (FORWARD, 930));
    }

    /// CPUs racing on one queue: every packet's transmit time is counted exactly once, whether
    /// it got in by compare-and-swap or by the fallback add, and never earlier than its arrival.
    #[test]
    fn concurrent_enqueues_lose_no_packet() {
        const THREADS: u64 = 4;
        const PACKETS: u64 = 20_000;
        let tx = 3;
        let tail = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..PACKETS {
                        let (_, got) = enqueue_on(&tail, 0, 0, tx, always_forward);
                        assert!(got >= tx);
                    }
                });
            }
        });
        assert_eq!(tail.load(Ordering::SeqCst), THREADS * PACKETS * tx);
    }

    /// The fallback add on an idle queue: a packet arriving at `now` after the tail ends at
    /// `now + tx`, not at `old tail + tx` in the past. Forced here by a tail that moves on every
    /// attempt (another CPU always wins the swap) and then stops.
    #[test]
    fn the_fallback_add_does_not_start_a_packet_in_the_past() {
        let tail = AtomicU64::new(0);
        let now = 10_000;
        let tries = std::cell::Cell::new(0);
        // The judge runs before each swap: moving the tail there makes every swap fail.
        let judge = |_: u64| {
            let n = tries.get();
            if n < CAS_TRIES {
                tail.fetch_add(1, Ordering::SeqCst);
            }
            tries.set(n + 1);
            FORWARD
        };
        let (_, got) = enqueue_on(&tail, 0, now, 7, judge);
        assert_eq!(got, now + 7);
        assert_eq!(tail.load(Ordering::SeqCst), now + 7, "the idle gap was added with the packet");
    }
}
