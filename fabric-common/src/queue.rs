//! The modelled egress queue of a switch port and class, RED/ECN marking on it, and the
//! per-ingress accounting that PFC decisions read.
//!
//! An XDP program cannot hold a packet, so a switch keeps a *phantom* queue per egress port and
//! class (HULL, NSDI 2012): every packet sent to the port adds its bytes, and the depth drains at
//! the port's (time-scaled) line rate by elapsed time. Packets are still forwarded at once; ECN
//! marks, drops and PFC thresholds read the modelled depth (`docs/congestion-model.md`: a paused
//! upstream *switch* keeps forwarding, and the bytes it sends while paused are counted as the
//! model's error).
//!
//! The queue is kept as one number, [`EgressQueue::tail_ns`]: the time its last queued byte
//! leaves. Enqueueing is `tail = max(tail, now, paused_until) + transmit time`, and the depth at
//! `now` is the bytes the port sends between `max(now, paused_until)` and `tail`. One number
//! means every CPU can update it with a single compare-and-swap, and draining needs no writer
//! at all. Pure arithmetic here; the XDP glue keeps one [`EgressQueue`] per port and class.

/// One modelled egress queue, shared by every CPU that forwards to the port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct EgressQueue {
    /// Monotonic time (ns) at which the last byte queued so far leaves the port. Updated with
    /// compare-and-swap by every forwarding CPU; shifted by pauses.
    pub tail_ns: u64,
    /// PFC: the class may not transmit before this time. Written only by the port's own
    /// receive path (the PFC frame arrives on the port it pauses), so one writer.
    pub paused_until_ns: u64,
    /// When the current pause began (meaningful while `paused_until_ns > now`).
    pub paused_since_ns: u64,
    /// Total time paused, ns (one writer, as `paused_until_ns`).
    pub paused_total_ns: u64,
    /// Deepest the modelled queue has been, bytes (atomic max).
    pub max_depth_bytes: u64,
    /// PFC frames received for this class on this port.
    pub pauses_received: u64,
}

const _: () = assert!(core::mem::size_of::<EgressQueue>() == 48);

// The arithmetic below runs in the XDP program, where LLVM's BPF target has no 128-bit
// arithmetic (not even the overflow check of a 64-bit multiply) and divides with a real
// division instruction even by a constant (no multiply-high to do it by reciprocal). A 64-bit
// division costs the live switch several nanoseconds, and a packet through the model needed six
// of them; so a port's rate comes with its reciprocals, computed once by [`LineRate::new`] when
// the rate is set, and the per-packet work is a multiply and a shift.

/// `bytes = ns x kbps / 8e6`: a port at 1 kbit/s takes 8e6 ns a byte.
const NS_PER_BYTE_AT_1_KBPS: u64 = 8_000_000;

/// A port's line rate and the fixed-point factors that turn time into bytes and back without a
/// division: what the switch's `PORT_RATE` map holds per port, and what every simulator uses
/// for the same arithmetic. Rates are whole kbit/s. Results are those of the exact integer
/// formulas (`ns x kbps / 8e6`, `bytes x 8e6 / kbps`, rounded down), or one more: the factors
/// are rounded up (so that whole results stay whole), and the fast path takes inputs below
/// 2^32 (4.3 s, 4 GiB) whose product with the factor fits 64 bits (at 400 Gbit/s, spans up to
/// 86 ms), where a factor's rounding adds less than one; longer inputs take the exact division.
/// The default is [`Self::STOPPED`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct LineRate {
    /// The rate, bit/s, as set.
    pub bps: u64,
    kbps: u64,
    /// Bytes per ns, 32 fractional bits, rounded up.
    bytes_per_ns_q32: u64,
    /// The longest time the fast `bytes_in` takes (below 2^32, and without overflow); longer
    /// uses the division.
    fast_ns_max: u64,
    /// Ns per byte, 32 fractional bits, rounded up.
    ns_per_byte_q32: u64,
    /// The most bytes the fast `transmit_ns` takes (as `fast_ns_max`).
    fast_bytes_max: u64,
}

const _: () = assert!(core::mem::size_of::<LineRate>() == 48);

/// The largest input of [`LineRate`]'s fast path: a factor rounded up by less than one unit in
/// 2^32 then adds less than one to the result.
const FAST_INPUT_MAX: u64 = u32::MAX as u64;

impl Default for LineRate {
    fn default() -> Self {
        Self::STOPPED
    }
}

/// The fastest rate [`LineRate`] takes, bit/s: the slow path's products stay below 2^63.
pub const MAX_RATE_BPS: u64 = 1_000_000_000_000_000;
/// The slowest rate at which a [`LineRate`] port sends at all, bit/s (its factors count kbit/s).
pub const MIN_RATE_BPS: u64 = 1000;

impl LineRate {
    /// A port that never sends (no rate set).
    pub const STOPPED: LineRate = LineRate::new(0);

    /// The factors for `bps` (below 1 kbit/s a port never sends: zero bytes in any time, and a
    /// transmit time of `u64::MAX / 4`; above [`MAX_RATE_BPS`] it sends at that rate).
    pub const fn new(bps: u64) -> Self {
        let bps = if bps > MAX_RATE_BPS { MAX_RATE_BPS } else { bps };
        let kbps = bps / 1000;
        if bps < MIN_RATE_BPS {
            return LineRate {
                bps,
                kbps,
                bytes_per_ns_q32: 0,
                fast_ns_max: u64::MAX,
                ns_per_byte_q32: 0,
                fast_bytes_max: 0,
            };
        }
        const fn min(a: u64, b: u64) -> u64 {
            if a < b { a } else { b }
        }
        // kbps x 2^32 / 8e6, rounded up, split so that no step overflows (kbps % 8e6 < 2^23).
        let whole = (kbps / NS_PER_BYTE_AT_1_KBPS) << 32;
        let rest = ((kbps % NS_PER_BYTE_AT_1_KBPS) << 32).div_ceil(NS_PER_BYTE_AT_1_KBPS);
        let bytes_per_ns_q32 = whole + rest;
        let ns_per_byte_q32 = (NS_PER_BYTE_AT_1_KBPS << 32).div_ceil(kbps);
        LineRate {
            bps,
            kbps,
            bytes_per_ns_q32,
            fast_ns_max: min(u64::MAX / bytes_per_ns_q32, FAST_INPUT_MAX),
            ns_per_byte_q32,
            fast_bytes_max: min(u64::MAX / ns_per_byte_q32, FAST_INPUT_MAX),
        }
    }

    /// Bytes the port sends in `ns` nanoseconds (at most 2^40 ns, 18 minutes, are counted).
    #[inline(always)]
    pub const fn bytes_in(&self, ns: u64) -> u64 {
        if ns <= self.fast_ns_max {
            return (ns * self.bytes_per_ns_q32) >> 32;
        }
        // Beyond the fast range: whole 8 ms periods and the rest, exact (each product below
        // 2^63 for any rate below 10^15 bit/s).
        let ns = if ns > 1 << 40 { 1 << 40 } else { ns };
        (ns / NS_PER_BYTE_AT_1_KBPS) * self.kbps + ((ns % NS_PER_BYTE_AT_1_KBPS) * self.kbps) / NS_PER_BYTE_AT_1_KBPS
    }

    /// Nanoseconds the port takes to send `bytes` (at most 2^40 bytes are counted).
    #[inline(always)]
    pub const fn transmit_ns(&self, bytes: u64) -> u64 {
        if self.kbps == 0 {
            return u64::MAX / 4;
        }
        let bytes = if bytes > 1 << 40 { 1 << 40 } else { bytes };
        if bytes <= self.fast_bytes_max {
            return (bytes * self.ns_per_byte_q32) >> 32;
        }
        (bytes * NS_PER_BYTE_AT_1_KBPS) / self.kbps
    }

    /// Nanoseconds the port is busy with a frame of `frame_len` bytes as XDP sees it (without
    /// FCS): its wire time, [`WIRE_OVERHEAD_BYTES`] included. Queue depths derived from it are
    /// in wire bytes.
    #[inline(always)]
    pub const fn frame_transmit_ns(&self, frame_len: u64) -> u64 {
        self.transmit_ns(frame_len.saturating_add(WIRE_OVERHEAD_BYTES))
    }

    /// Depth in bytes at `now_ns` of the port's queue whose tail is `tail_ns`, paused until
    /// `paused_until_ns`: what is left after the port resumes and sends until `tail_ns`.
    #[inline(always)]
    pub const fn depth_bytes(&self, tail_ns: u64, paused_until_ns: u64, now_ns: u64) -> u64 {
        let from = max(now_ns, paused_until_ns);
        if tail_ns <= from { 0 } else { self.bytes_in(tail_ns - from) }
    }
}

/// Bytes a port at `rate_bps` sends in `ns` nanoseconds ([`LineRate::bytes_in`]).
#[inline(always)]
pub const fn bytes_in(ns: u64, rate_bps: u64) -> u64 {
    LineRate::new(rate_bps).bytes_in(ns)
}

/// What an Ethernet frame costs a link beyond the bytes XDP sees: preamble and start delimiter
/// (8), frame check sequence (4) and the inter-frame gap (12). About 2% of a 1 KiB frame.
pub const WIRE_OVERHEAD_BYTES: u64 = 8 + 4 + 12;

/// [`LineRate::frame_transmit_ns`] for a port at `rate_bps`.
#[inline(always)]
pub const fn frame_transmit_ns(frame_len: u64, rate_bps: u64) -> u64 {
    LineRate::new(rate_bps).frame_transmit_ns(frame_len)
}

/// [`LineRate::transmit_ns`] for a port at `rate_bps`.
#[inline(always)]
pub const fn transmit_ns(bytes: u64, rate_bps: u64) -> u64 {
    LineRate::new(rate_bps).transmit_ns(bytes)
}

#[inline(always)]
const fn max(a: u64, b: u64) -> u64 {
    if a > b { a } else { b }
}

/// [`LineRate::depth_bytes`] for a port at `rate_bps`.
#[inline(always)]
pub const fn depth_bytes(tail_ns: u64, paused_until_ns: u64, now_ns: u64, rate_bps: u64) -> u64 {
    LineRate::new(rate_bps).depth_bytes(tail_ns, paused_until_ns, now_ns)
}

/// The new tail after a packet that takes `transmit_ns` joins the queue at `now_ns`. An idle
/// queue starts at `now` (or at the end of a pause); a busy one grows from its tail.
#[inline(always)]
pub const fn enqueue_tail(tail_ns: u64, paused_until_ns: u64, now_ns: u64, transmit_ns: u64) -> u64 {
    max(max(tail_ns, now_ns), paused_until_ns) + transmit_ns
}

/// What a PFC frame does to a queue: how far its tail (and its paused time) moves. A pause that
/// extends the paused interval delays every queued byte by the extension; an early resume
/// (quanta 0) brings them forward. An empty queue does not move. The result is a wrapping
/// (two's complement) delta so that the XDP code can apply it with one atomic add.
#[inline(always)]
pub const fn pause_shift(tail_ns: u64, old_until_ns: u64, new_until_ns: u64, now_ns: u64) -> u64 {
    let old_from = max(now_ns, old_until_ns);
    let new_from = max(now_ns, new_until_ns);
    if tail_ns <= old_from {
        return 0;
    }
    new_from.wrapping_sub(old_from)
}

/// The paused interval a PFC frame adds (or, wrapping, removes) to the paused-time total.
#[inline(always)]
pub const fn paused_time_delta(old_until_ns: u64, new_until_ns: u64, now_ns: u64) -> u64 {
    max(now_ns, new_until_ns).wrapping_sub(max(now_ns, old_until_ns))
}

/// Bytes held in the switch's buffer on behalf of one ingress port and class: what PFC's Xoff
/// and Xon compare against. Written only by that ingress port's receive path (one NAPI
/// context per veth queue), so it needs no atomics.
///
/// The exact figure would need a record per queued packet. The model keeps the bytes held at the
/// last update and the time the last of them leaves its egress queue, and lets them drain
/// linearly in between: exact for a single egress queue fed by this ingress alone, and the
/// average for a FIFO queue shared fairly with other ingresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct IngressAccount {
    pub held_bytes: u64,
    pub updated_ns: u64,
    /// When the last byte held for this ingress leaves the switch.
    pub drained_by_ns: u64,
    /// Deepest the account has been.
    pub max_held_bytes: u64,
}

const _: () = assert!(core::mem::size_of::<IngressAccount>() == 32);

impl IngressAccount {
    /// Bytes still held at `now_ns`.
    #[inline(always)]
    pub const fn held_at(&self, now_ns: u64) -> u64 {
        if now_ns >= self.drained_by_ns || self.held_bytes == 0 {
            return 0;
        }
        if now_ns <= self.updated_ns {
            return self.held_bytes;
        }
        // held x left / span in 16-bit fixed point (no 128-bit products in BPF).
        const CAP: u64 = 1 << 47;
        let left = self.drained_by_ns - now_ns;
        let span = self.drained_by_ns - self.updated_ns;
        let left = if left > CAP { CAP } else { left };
        let fraction = (left << 16) / span;
        let held = if self.held_bytes > CAP { CAP } else { self.held_bytes };
        (held * fraction) >> 16
    }

    /// When the account, draining linearly as [`Self::held_at`] has it, holds `bytes` or fewer
    /// (at the earliest: arrivals in between only delay it). Rounded late, never early: the
    /// account holds at most `bytes` then.
    #[inline(always)]
    pub const fn drains_to(&self, bytes: u64) -> u64 {
        if self.held_bytes <= bytes || self.drained_by_ns <= self.updated_ns {
            return self.updated_ns;
        }
        // left = span x bytes / held in 16-bit fixed point, as held_at (no 128-bit products in
        // BPF), the fraction rounded down so that the time rounds late.
        const CAP: u64 = 1 << 47;
        let span = self.drained_by_ns - self.updated_ns;
        let span = if span > CAP { CAP } else { span };
        // Both byte counts scaled alike, so that the held one fits 47 bits and the ratio stays
        // (held rounded up, `bytes` < held down: the fraction only shrinks).
        let shift = if self.held_bytes > CAP { 17 - self.held_bytes.leading_zeros() } else { 0 };
        let held = ((self.held_bytes - 1) >> shift) + 1;
        let fraction = ((bytes >> shift) << 16) / held;
        let left = (span * fraction) >> 16;
        self.drained_by_ns - left
    }

    /// A packet of `len` bytes from this ingress was queued at `now_ns` and leaves the switch at
    /// `departs_ns`. Returns the bytes held after it.
    #[inline(always)]
    pub fn admit(&mut self, now_ns: u64, len: u64, departs_ns: u64) -> u64 {
        let held = self.held_at(now_ns) + len;
        self.held_bytes = held;
        self.updated_ns = now_ns;
        self.drained_by_ns = max(max(self.drained_by_ns, departs_ns), now_ns + 1);
        if held > self.max_held_bytes {
            self.max_held_bytes = held;
        }
        held
    }
}

/// RED marking on the instantaneous depth, as DCQCN switches do: no marks below `kmin`, a
/// probability rising linearly to `pmax` at `kmax`, every packet above `kmax`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct RedParams {
    pub kmin_bytes: u32,
    pub kmax_bytes: u32,
    /// Marking probability at `kmax`, in units of 1/2^32 (`u32::MAX` = 1).
    pub pmax: u32,
    pub _reserved: u32,
}

impl RedParams {
    /// Kmin/Kmax in bytes and Pmax as a fraction in 0..=1.
    pub fn new(kmin_bytes: u32, kmax_bytes: u32, pmax: f64) -> Self {
        let pmax = (pmax.clamp(0.0, 1.0) * u32::MAX as f64) as u32;
        RedParams { kmin_bytes, kmax_bytes, pmax, _reserved: 0 }
    }

    /// The probability as a fraction of 2^32 for a given depth.
    #[inline(always)]
    pub const fn probability(&self, depth_bytes: u64) -> u64 {
        let (kmin, kmax) = (self.kmin_bytes as u64, self.kmax_bytes as u64);
        if depth_bytes <= kmin {
            0
        } else if depth_bytes > kmax || kmax <= kmin {
            1 << 32
        } else {
            (self.pmax as u64 * (depth_bytes - kmin)) / (kmax - kmin)
        }
    }

    /// Whether to mark, given a uniform random `u32`.
    #[inline(always)]
    pub const fn should_mark(&self, depth_bytes: u64, random: u32) -> bool {
        (random as u64) < self.probability(depth_bytes)
    }

    /// [`Self::should_mark`], calling `draw` for the random number only when the probability is
    /// strictly between 0 and 1 (the answer is the same for every number otherwise).
    #[inline(always)]
    pub fn should_mark_with(&self, depth_bytes: u64, draw: impl FnOnce() -> u32) -> bool {
        match self.probability(depth_bytes) {
            0 => false,
            p if p > u32::MAX as u64 => true,
            p => (draw() as u64) < p,
        }
    }
}

/// The two ECN bits of a TOS / traffic class byte.
pub const ECN_MASK: u8 = 0b11;
pub const ECN_NOT_ECT: u8 = 0b00;
pub const ECN_CE: u8 = 0b11;

/// Whether the sender declared the packet ECN-capable (ECT(0) or ECT(1)).
#[inline(always)]
pub const fn is_ect(tos: u8) -> bool {
    let e = tos & ECN_MASK;
    e == 0b01 || e == 0b10
}

/// Sets CE in an IPv4 header: the new TOS byte and header checksum (the TOS shares its 16-bit
/// word with the version/IHL byte).
#[inline(always)]
pub const fn mark_ce_ipv4(ver_ihl: u8, tos: u8, checksum: u16) -> (u8, u16) {
    let new_tos = tos | ECN_CE;
    let old = ((ver_ihl as u16) << 8) | tos as u16;
    let new = ((ver_ihl as u16) << 8) | new_tos as u16;
    (new_tos, crate::checksum::update_word(checksum, old, new))
}

/// Sets CE in the first two bytes of an IPv6 header (version, traffic class, flow label high
/// nibble). IPv6 has no header checksum, and the RoCEv2 ICRC masks the traffic class.
#[inline(always)]
pub const fn mark_ce_ipv6(first_two: [u8; 2]) -> [u8; 2] {
    // The traffic class straddles the bytes: its ECN bits are bits 5..4 of byte 1.
    [first_two[0], first_two[1] | (ECN_CE << 4)]
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBPS: u64 = 1_000_000_000;

    /// The exact formulas, in 128 bits: what [`LineRate`] stands in for.
    fn exact_bytes_in(ns: u64, kbps: u64) -> u128 {
        u128::from(ns.min(1 << 40)) * u128::from(kbps) / 8_000_000
    }
    fn exact_transmit_ns(bytes: u64, kbps: u64) -> u128 {
        u128::from(bytes.min(1 << 40)) * 8_000_000 / u128::from(kbps)
    }

    #[test]
    fn line_rate_factors_give_the_exact_results_or_one_more_just_below_an_integer() {
        let mut rng = crate::rng::SplitMix64::new(7);
        let rates = [1_000, 999_999, 25 * GBPS / 4000, 100 * GBPS / 4000, 400 * GBPS, 1_600 * GBPS, 1_000_000 * GBPS];
        for &bps in &rates {
            let line = LineRate::new(bps);
            let kbps = bps / 1000;
            let edges = [line.fast_ns_max, line.fast_bytes_max, u32::MAX as u64, 1 << 40]
                .into_iter()
                .flat_map(|e| [e.saturating_sub(1), e, e.saturating_add(1)]);
            for (i, edge) in (0..4000u32).zip(edges.chain(core::iter::repeat(0))) {
                // The fast path's limits and the caps, short spans and frames, and spans and byte
                // counts beyond the fast range.
                let x = match i % 5 {
                    _ if i < 12 => edge,
                    4 => rng.next_u64() % 2_000,
                    0 => rng.next_u64() % 10_000,
                    1 => rng.next_u64() % 100_000_000,
                    2 => rng.next_u64() >> (rng.next_u64() % 64),
                    _ => u64::MAX - rng.next_u64() % 1000,
                };
                let (got, exact) = (u128::from(line.bytes_in(x)), exact_bytes_in(x, kbps));
                assert!(got == exact || got == exact + 1, "{bps} bit/s, {x} ns: {got} bytes, exact {exact}");
                let (got, exact) = (u128::from(line.transmit_ns(x)), exact_transmit_ns(x, kbps));
                assert!(got == exact || got == exact + 1, "{bps} bit/s, {x} bytes: {got} ns, exact {exact}");
            }
        }
        // Faster than the limit: the limit.
        assert_eq!(LineRate::new(u64::MAX), LineRate::new(MAX_RATE_BPS));
        // Whole results stay whole: 100 Gbit/s is 12.5 bytes and 0.08 ns a byte.
        let line = LineRate::new(100 * GBPS);
        assert_eq!((line.bytes_in(800), line.transmit_ns(10_000), line.transmit_ns(1)), (10_000, 800, 0));
        // Below 1 kbit/s a port never sends.
        let stopped = LineRate::new(999);
        assert_eq!((stopped.bytes_in(u64::MAX), stopped.transmit_ns(1)), (0, u64::MAX / 4));
    }

    #[test]
    fn drains_at_the_line_rate_and_not_while_paused() {
        // 100 Gbit/s sends 12.5 bytes per ns: 10 000 bytes take 800 ns.
        let rate = 100 * GBPS;
        assert_eq!(transmit_ns(10_000, rate), 800);
        // A 1000-byte frame holds a 100 Gbit/s port for 1024 bytes of wire time.
        assert_eq!(frame_transmit_ns(1_000, 100_000_000_000), transmit_ns(1_024, 100_000_000_000));
        assert_eq!(frame_transmit_ns(1_000, 100_000_000_000), 81);
        let tail = enqueue_tail(0, 0, 1_000, transmit_ns(10_000, rate));
        assert_eq!(tail, 1_800);
        assert_eq!(depth_bytes(tail, 0, 1_000, rate), 10_000);
        assert_eq!(depth_bytes(tail, 0, 1_400, rate), 5_000);
        // A pause from 1400 until 2400 delays the 5000 bytes left by 1000 ns.
        let shift = pause_shift(tail, 0, 2_400, 1_400);
        assert_eq!(shift, 1_000);
        let tail = tail.wrapping_add(shift);
        assert_eq!(depth_bytes(tail, 2_400, 2_000, rate), 5_000, "paused: no drain");
        assert_eq!(depth_bytes(tail, 2_400, 2_600, rate), 2_500, "drains only after the pause");
        assert_eq!(depth_bytes(tail, 2_400, 10_000, rate), 0);
        assert_eq!(paused_time_delta(0, 2_400, 1_400), 1_000);
    }

    #[test]
    fn an_early_resume_brings_the_bytes_forward() {
        let rate = 100 * GBPS;
        // 8000 bytes queued at 0 behind a pause until 10 000: they leave by 10 640.
        let tail = enqueue_tail(0, 10_000, 0, transmit_ns(8_000, rate));
        assert_eq!(tail, 10_640);
        assert_eq!(depth_bytes(tail, 10_000, 5_000, rate), 8_000);
        // Quanta 0 at 5000: resume now.
        let shift = pause_shift(tail, 10_000, 0, 5_000);
        let tail = tail.wrapping_add(shift);
        assert_eq!(tail, 5_640);
        assert_eq!(depth_bytes(tail, 0, 5_320, rate), 4_000);
        assert_eq!(paused_time_delta(10_000, 0, 5_000) as i64, -5_000);
        // An empty queue does not move.
        assert_eq!(pause_shift(100, 0, 9_000, 200), 0);
    }

    #[test]
    fn a_busy_queue_grows_from_its_tail() {
        let rate = GBPS; // 1 byte per 8 ns
        let mut tail = 0;
        for _ in 0..4 {
            tail = enqueue_tail(tail, 0, 0, transmit_ns(1_000, rate));
        }
        assert_eq!(depth_bytes(tail, 0, 0, rate), 4_000);
        assert_eq!(depth_bytes(tail, 0, 16_000, rate), 2_000);
        // An idle queue restarts at now.
        assert_eq!(enqueue_tail(tail, 0, 1_000_000, 8), 1_000_008);
    }

    #[test]
    fn ingress_accounts_drain_linearly_until_the_last_byte_leaves() {
        let mut a = IngressAccount::default();
        assert_eq!(a.admit(1_000, 1_000, 2_000), 1_000);
        assert_eq!(a.held_at(1_500), 500);
        assert_eq!(a.held_at(2_000), 0);
        assert_eq!(a.admit(1_500, 1_000, 3_500), 1_500);
        assert_eq!(a.held_at(2_500), 750);
        assert_eq!(a.max_held_bytes, 1_500);
        // A packet that leaves at once still counts until then.
        let mut b = IngressAccount::default();
        assert_eq!(b.admit(10, 64, 10), 64);
        assert_eq!(b.held_at(10), 64);
        assert_eq!(b.held_at(11), 0);
    }

    #[test]
    fn an_account_drains_to_a_level_at_the_time_held_at_says_rounded_late() {
        let mut a = IngressAccount::default();
        a.admit(1_000, 1_500, 3_500);
        assert_eq!(a.drains_to(750), 2_250);
        assert_eq!(a.drains_to(1_500), 1_000, "already there");
        assert_eq!(a.drains_to(0), 3_500);
        // Over spans and depths a switch sees, and beyond, the time is never early and late by
        // at most a 32768th of the span (the fixed point's resolution is a 65536th of it).
        for (span, held) in [(7, 5_000), (81_920, 512 << 10), (40_000_000, 3 << 20), (1 << 46, 1 << 40)] {
            let acct =
                IngressAccount { held_bytes: held, updated_ns: 100, drained_by_ns: 100 + span, max_held_bytes: held };
            for level in [1, held / 3, held / 2, held - 1] {
                let t = acct.drains_to(level);
                assert!(acct.held_at(t) <= level, "span {span} held {held} level {level}: late enough");
                let slack = (span >> 15) + 1;
                assert!(
                    t <= 100 + span && (t <= 100 + slack || acct.held_at(t - slack) > level),
                    "span {span} held {held} level {level}: t {t} not late by more"
                );
            }
        }
        // Beyond 47 bits of bytes the ratio still decides: half drains at half the span.
        let huge = IngressAccount { held_bytes: 1 << 62, updated_ns: 0, drained_by_ns: 1 << 30, max_held_bytes: 0 };
        assert_eq!(huge.drains_to(1 << 61), 1 << 29);
        assert_eq!(huge.drains_to((1 << 61) + 1), 1 << 29, "rounded late: the fraction only shrinks");
    }

    #[test]
    fn red_probability_is_linear_between_the_thresholds() {
        let red = RedParams { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: (u32::MAX / 100), _reserved: 0 };
        assert_eq!(red.probability(5_000), 0);
        assert_eq!(red.probability(200_000), red.pmax as u64);
        assert_eq!(red.probability(200_001), 1 << 32);
        let mid = red.probability(102_500);
        assert_eq!(mid, red.pmax as u64 / 2);
        // Over a uniform sweep of random values, the mark rate follows the probability.
        let marks = (0..10_000u64).filter(|i| red.should_mark(102_500, (i * 429_497) as u32)).count();
        assert!((40..=60).contains(&marks), "{marks} marks of 10000 at p = 0.5%");
        assert!(!red.should_mark(1_000, 0));
        assert!(red.should_mark(300_000, u32::MAX));
        assert_eq!(RedParams::new(1, 2, 1.0).pmax, u32::MAX);
    }

    /// The lazy draw: the same answers as `should_mark` for every random number, and a draw
    /// only where the answer depends on it (between Kmin and Kmax).
    #[test]
    fn red_draws_only_between_the_thresholds() {
        let red = RedParams { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: (u32::MAX / 100), _reserved: 0 };
        for depth in [0, 5_000, 5_001, 102_500, 200_000, 200_001, 1 << 40] {
            let needs = depth > 5_000 && depth <= 200_000;
            for random in [0, 1, 429_497 * 7, u32::MAX / 200, u32::MAX / 100, u32::MAX] {
                let drawn = core::cell::Cell::new(false);
                let lazy = red.should_mark_with(depth, || {
                    drawn.set(true);
                    random
                });
                assert_eq!(lazy, red.should_mark(depth, random), "depth {depth}, random {random}");
                assert_eq!(drawn.get(), needs, "depth {depth}: drew {}", drawn.get());
            }
        }
    }

    #[test]
    fn ce_marking_keeps_the_ipv4_checksum_valid() {
        // 45 02 (ECT(0)) ... a header with a valid checksum.
        let mut h = [0x45, 0x02, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 9];
        let c = crate::checksum::internet_checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(is_ect(h[1]) && !is_ect(0) && !is_ect(ECN_CE));
        let (tos, csum) = mark_ce_ipv4(h[0], h[1], c);
        h[1] = tos;
        h[10..12].copy_from_slice(&csum.to_be_bytes());
        assert_eq!(tos & ECN_MASK, ECN_CE);
        assert_eq!(crate::checksum::internet_checksum(&h), 0, "checksum still valid");
    }

    #[test]
    fn ce_marking_an_ipv6_traffic_class() {
        // Version 6, traffic class 0x6A (DSCP 26, ECT(0)), flow label 0x12345.
        let first = [0x66, 0xA1];
        let tc = |b: [u8; 2]| ((b[0] & 0x0F) << 4) | (b[1] >> 4);
        assert_eq!(tc(first), 0x6A);
        let marked = mark_ce_ipv6(first);
        assert_eq!(tc(marked), 0x6B);
        assert_eq!(marked[0] >> 4, 6, "version untouched");
        assert_eq!(marked[1] & 0x0F, 0x1, "flow label untouched");
    }

    #[test]
    fn bytes_in_over_more_than_one_8_ms_period() {
        // 100 Gbit/s for 10 ms: 12.5 GB/s x 0.01 s.
        assert_eq!(bytes_in(10_000_000, 100 * GBPS), 125_000_000);
        // 1 Gbit/s for 1 s.
        assert_eq!(bytes_in(1_000_000_000, GBPS), 125_000_000);
    }

    #[test]
    fn wire_overhead_is_preamble_sfd_fcs_and_gap() {
        // IEEE 802.3: preamble 7 + start delimiter 1, FCS 4, inter-frame gap 12.
        assert_eq!(WIRE_OVERHEAD_BYTES, 24);
        // At 1 Gbit/s a byte is 8 ns: a 1000-byte frame holds the port for 1024 x 8 ns.
        assert_eq!(frame_transmit_ns(1_000, GBPS), 8_192);
    }

    #[test]
    fn transmit_time_of_a_sub_kbit_port_and_of_a_huge_count() {
        // Below 1 kbit/s: "never" (more than a century), not a small number.
        assert!(transmit_ns(1, 999) > 1 << 61);
        // At most 2^40 bytes count: 2^40 x 8 bits at 100 Gbit/s is 87.96 s.
        assert_eq!(transmit_ns(u64::MAX, 100 * GBPS), 87_960_930_222);
        assert_eq!(transmit_ns(1 << 40, 100 * GBPS), 87_960_930_222);
    }

    #[test]
    fn an_account_long_drained_holds_nothing() {
        let mut a = IngressAccount::default();
        a.admit(1_000, 1_000, 2_000);
        assert_eq!(a.held_at(1_000_000), 0);
    }

    /// Spans and byte counts past 2^47 (39 hours, 140 TB) are far beyond any queue; they are
    /// capped so the fixed-point products cannot overflow (a panic in tests, a wrong value in BPF).
    #[test]
    fn absurd_accounts_saturate_instead_of_overflowing() {
        // 2^50 bytes held, half drained: the held bytes are capped at 2^47, and half of it is 2^46.
        let a = IngressAccount { held_bytes: 1 << 50, updated_ns: 0, drained_by_ns: 2_000, max_held_bytes: 0 };
        assert_eq!(a.held_at(1_000), 1 << 46);
        // A 2^50 ns span: the time left is capped at 2^47 ns, an eighth of the span.
        let b = IngressAccount { held_bytes: 8_000, updated_ns: 0, drained_by_ns: 1 << 50, max_held_bytes: 0 };
        assert_eq!(b.held_at(1), 1_000);
    }
}
