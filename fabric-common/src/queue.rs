//! The modelled egress queue of a switch port and class, and RED/ECN marking on it.
//!
//! An XDP program cannot hold a packet, so a switch keeps a *phantom* queue per egress port and
//! class (HULL, NSDI 2012): every packet sent to the port adds its bytes, and the depth drains at
//! the port's (time-scaled) line rate by elapsed time. ECN marks and PFC thresholds read this
//! depth. Pure arithmetic here; the XDP glue keeps one per port and class in a map.
//! Groundwork for the congestion model: not wired into the data plane yet.

/// One modelled queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PhantomQueue {
    pub depth_bytes: u64,
    /// When the depth was last brought up to date.
    pub updated_ns: u64,
    /// While paused (PFC), the queue does not drain.
    pub paused_until_ns: u64,
    /// Deepest the queue has been.
    pub max_depth_bytes: u64,
}

/// What became of a packet offered to a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Queued; the depth after it.
    Queued { depth_bytes: u64 },
    /// The buffer limit would be exceeded: a lossy class drops it.
    Overflow,
}

/// Bytes a port at `rate_bps` sends in `ns` nanoseconds (u128: no overflow at any rate).
#[inline(always)]
pub const fn bytes_in(ns: u64, rate_bps: u64) -> u64 {
    ((ns as u128 * rate_bps as u128) / 8_000_000_000) as u64
}

impl PhantomQueue {
    /// Drains the queue for the time since the last update, except the time it was paused.
    #[inline(always)]
    pub fn drain(&mut self, now_ns: u64, rate_bps: u64) {
        if now_ns <= self.updated_ns {
            return;
        }
        let from = if self.paused_until_ns > self.updated_ns { self.paused_until_ns } else { self.updated_ns };
        if now_ns > from {
            let sent = bytes_in(now_ns - from, rate_bps);
            self.depth_bytes = self.depth_bytes.saturating_sub(sent);
        }
        self.updated_ns = now_ns;
    }

    /// Offers a packet of `len` bytes at `now_ns`, with a buffer of `limit_bytes`.
    #[inline(always)]
    pub fn offer(&mut self, now_ns: u64, rate_bps: u64, len: u64, limit_bytes: u64) -> Admission {
        self.drain(now_ns, rate_bps);
        if self.depth_bytes + len > limit_bytes {
            return Admission::Overflow;
        }
        self.depth_bytes += len;
        if self.depth_bytes > self.max_depth_bytes {
            self.max_depth_bytes = self.depth_bytes;
        }
        Admission::Queued { depth_bytes: self.depth_bytes }
    }

    /// Pauses draining until `until_ns` (a PFC pause; 0 quanta resumes at once).
    pub fn pause(&mut self, now_ns: u64, rate_bps: u64, until_ns: u64) {
        self.drain(now_ns, rate_bps);
        self.paused_until_ns = until_ns;
    }
}

/// RED marking on the instantaneous depth, as DCQCN switches do: no marks below `kmin`, a
/// probability rising linearly to `pmax` at `kmax`, every packet above `kmax`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct RedParams {
    pub kmin_bytes: u32,
    pub kmax_bytes: u32,
    /// Marking probability at `kmax`, in units of 1/2^32 (`u32::MAX` = 1).
    pub pmax: u32,
    pub _reserved: u32,
}

impl RedParams {
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

#[cfg(test)]
mod tests {
    use super::*;

    const GBPS: u64 = 1_000_000_000;

    #[test]
    fn drains_at_the_line_rate_and_not_while_paused() {
        let mut q = PhantomQueue::default();
        // 100 Gbit/s drains 12.5 bytes per ns.
        assert_eq!(q.offer(0, 100 * GBPS, 10_000, 1 << 20), Admission::Queued { depth_bytes: 10_000 });
        q.drain(400, 100 * GBPS);
        assert_eq!(q.depth_bytes, 5_000);
        q.pause(400, 100 * GBPS, 1_400);
        q.drain(1_000, 100 * GBPS);
        assert_eq!(q.depth_bytes, 5_000, "paused: no drain");
        q.drain(1_600, 100 * GBPS);
        assert_eq!(q.depth_bytes, 2_500, "drains only the 200 ns after the pause");
        q.drain(100_000, 100 * GBPS);
        assert_eq!(q.depth_bytes, 0);
        assert_eq!(q.max_depth_bytes, 10_000);
    }

    #[test]
    fn overflow_at_the_buffer_limit() {
        let mut q = PhantomQueue::default();
        assert!(matches!(q.offer(0, GBPS, 1_000, 1_500), Admission::Queued { .. }));
        assert_eq!(q.offer(0, GBPS, 1_000, 1_500), Admission::Overflow);
        assert_eq!(q.depth_bytes, 1_000, "an overflowing packet adds nothing");
        // 8 µs later at 1 Gbit/s, 1000 bytes have left.
        assert!(matches!(q.offer(8_000, GBPS, 1_000, 1_500), Admission::Queued { depth_bytes: 1_000 }));
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
}
