//! A token bucket that spaces a sender's packets at a rate, on the caller's clock. The rate is
//! the knob congestion control (DCQCN) will turn.
//!
//! Credit is kept exactly in integers: bits × 10^9, so `rate (bit/s) × elapsed (ns)` adds to it
//! with no rounding. A packet may go whenever the credit is not negative and may drive it below
//! zero (a deficit): any burst size works, even one smaller than a packet, and the long-run rate
//! is exact.

/// Units of credit per bit.
const PER_BIT: i128 = 1_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacerConfig {
    pub rate_bps: u64,
    /// Bytes that may leave back to back after an idle period (plus the packet that overdraws).
    pub burst_bytes: u64,
}

#[derive(Clone, Debug)]
pub struct Pacer {
    rate_bps: u64,
    burst_bytes: u64,
    /// Bits × 10^9; negative while paying off the last packet.
    credit: i128,
    /// When `credit` was last brought up to date.
    updated_ns: u64,
}

impl Pacer {
    /// A pacer with a full bucket.
    pub fn new(config: PacerConfig) -> Self {
        Pacer {
            rate_bps: config.rate_bps,
            burst_bytes: config.burst_bytes,
            credit: Self::bytes_to_credit(config.burst_bytes),
            updated_ns: 0,
        }
    }

    fn bytes_to_credit(bytes: u64) -> i128 {
        bytes as i128 * 8 * PER_BIT
    }

    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    pub fn burst_bytes(&self) -> u64 {
        self.burst_bytes
    }

    /// Adds the credit earned since the last update, up to the burst. A clock that goes
    /// backwards earns nothing.
    fn refill(&mut self, now_ns: u64) {
        let elapsed = now_ns.saturating_sub(self.updated_ns);
        let cap = Self::bytes_to_credit(self.burst_bytes);
        self.credit = (self.credit + self.rate_bps as i128 * elapsed as i128).min(cap);
        self.updated_ns = self.updated_ns.max(now_ns);
    }

    /// Changes the rate from `now_ns` on; credit earned so far is kept.
    pub fn set_rate(&mut self, now_ns: u64, rate_bps: u64) {
        self.refill(now_ns);
        self.rate_bps = rate_bps;
    }

    /// Whether a packet may leave at `now_ns`.
    pub fn is_ready(&mut self, now_ns: u64) -> bool {
        self.refill(now_ns);
        self.credit >= 0
    }

    /// Charges a packet of `bytes` sent at `now_ns`.
    pub fn consume(&mut self, now_ns: u64, bytes: u64) {
        self.refill(now_ns);
        self.credit -= Self::bytes_to_credit(bytes);
    }

    /// The earliest time a packet may leave (`u64::MAX` at rate 0 with a deficit).
    pub fn ready_at(&self) -> u64 {
        if self.credit >= 0 {
            return self.updated_ns;
        }
        if self.rate_bps == 0 {
            return u64::MAX;
        }
        let rate = self.rate_bps as i128;
        let wait = (-self.credit + rate - 1) / rate;
        self.updated_ns.saturating_add(u64::try_from(wait).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_bucket_then_one_packet_per_serialisation_time() {
        // 1 Gbit/s: a 1000-byte packet takes 8 µs.
        let mut p = Pacer::new(PacerConfig { rate_bps: 1_000_000_000, burst_bytes: 2000 });
        assert!(p.is_ready(0));
        p.consume(0, 1000);
        assert!(p.is_ready(0));
        p.consume(0, 1000);
        assert!(p.is_ready(0), "exactly the burst used: credit 0");
        p.consume(0, 1000);
        assert!(!p.is_ready(0));
        assert_eq!(p.ready_at(), 8_000);
        assert!(!p.is_ready(7_999));
        assert!(p.is_ready(8_000));
    }

    #[test]
    fn idle_time_refills_only_up_to_the_burst() {
        let mut p = Pacer::new(PacerConfig { rate_bps: 8_000, burst_bytes: 10 }); // 1 byte per ms
        p.consume(0, 10);
        assert!(p.is_ready(0));
        p.consume(0, 1);
        assert_eq!(p.ready_at(), 1_000_000);
        assert!(p.is_ready(1_000_000_000));
        p.consume(1_000_000_000, 10);
        assert!(p.is_ready(1_000_000_000), "a second of idling bought only 10 bytes");
        p.consume(1_000_000_000, 1);
        assert!(!p.is_ready(1_000_000_000));
    }

    #[test]
    fn rate_changes_apply_from_now() {
        let mut p = Pacer::new(PacerConfig { rate_bps: 1_000_000_000, burst_bytes: 0 });
        p.consume(0, 1000); // 8 µs at 1 Gbit/s
        p.set_rate(4_000, 500_000_000); // half paid off; the rest at half speed: 8 µs more
        assert_eq!(p.ready_at(), 12_000);
        p.set_rate(5_000, 0);
        assert_eq!(p.ready_at(), u64::MAX);
        assert!(!p.is_ready(1_000_000_000_000));
    }

    #[test]
    fn a_clock_going_backwards_earns_nothing() {
        let mut p = Pacer::new(PacerConfig { rate_bps: 1_000_000_000, burst_bytes: 0 });
        p.consume(10_000, 1000);
        assert!(!p.is_ready(5_000));
        assert_eq!(p.ready_at(), 18_000);
    }
}
