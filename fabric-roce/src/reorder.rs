//! Reordering as a receiver sees it, whatever its transport does with the packets (RFC 4737's
//! view applied to PSNs): a packet is *reordered* when a higher PSN arrived before it and its
//! own PSN had not; its *depth* is how far below the highest PSN seen it is; a *duplicate* is a
//! PSN that had arrived before (a retransmission of something that got through, or of a packet
//! a go-back-N responder dropped for being early). The first arrival of a lost packet's
//! retransmission also comes below the highest PSN: it counts as reordered, as RFC 4737 has it.
//!
//! The meter remembers the last [`HISTORY`] PSNs below the highest seen. A PSN further back than
//! that (only a requester with a larger window can send one) counts as a duplicate if the
//! transport had already accepted it, as reordered otherwise.
use super::psn::Psn;

/// PSNs below the highest seen that the meter tells apart exactly.
pub const HISTORY: u32 = 1024;
const WORDS: usize = (HISTORY / 64) as usize;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorderCounters {
    /// Packets that arrived after a higher PSN, their own PSN for the first time.
    pub reordered_packets: u64,
    /// The largest distance, in PSNs, of such a packet below the highest PSN seen.
    pub reorder_depth_max: u64,
    /// Packets whose PSN had arrived before.
    pub duplicate_psns: u64,
}

/// What one arrival was (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The highest PSN so far.
    InOrder,
    /// Below the highest PSN seen, by `depth`, for the first time.
    Reordered {
        depth: u32,
    },
    Duplicate,
}

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub struct ReorderMeter {
    highest: Option<Psn>,
    /// Bit `i`: PSN `highest - i` has arrived (bit 0, the highest itself, always set).
    seen: [u64; WORDS],
    counters: ReorderCounters,
}

impl ReorderMeter {
    pub fn counters(&self) -> ReorderCounters {
        self.counters
    }

    /// Records the arrival of `psn`; `accepted_before` says whether the transport had already
    /// taken it (it settles PSNs beyond the history).
    pub fn observe(&mut self, psn: Psn, accepted_before: bool) -> Arrival {
        let Some(highest) = self.highest else {
            self.highest = Some(psn);
            self.seen[0] = 1;
            return Arrival::InOrder;
        };
        let ahead = highest.offset_to(psn);
        if ahead > 0 {
            self.shift_up(ahead as u32);
            self.seen[0] |= 1;
            self.highest = Some(psn);
            return Arrival::InOrder;
        }
        let depth = ahead.unsigned_abs();
        let already = if depth < HISTORY { self.test_and_set(depth) } else { accepted_before };
        if already {
            self.counters.duplicate_psns += 1;
            return Arrival::Duplicate;
        }
        self.counters.reordered_packets += 1;
        self.counters.reorder_depth_max = self.counters.reorder_depth_max.max(u64::from(depth));
        Arrival::Reordered { depth }
    }

    fn test_and_set(&mut self, bit: u32) -> bool {
        let (word, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
        let was = self.seen[word] & mask != 0;
        self.seen[word] |= mask;
        was
    }

    /// The highest PSN moves up by `n`: every remembered PSN is `n` further below it.
    fn shift_up(&mut self, n: u32) {
        if n >= HISTORY {
            self.seen = [0; WORDS];
            return;
        }
        let (words, bits) = ((n / 64) as usize, n % 64);
        for i in (0..WORDS).rev() {
            let low = i.checked_sub(words).map_or(0, |j| self.seen[j]);
            let carry = match (bits, i.checked_sub(words + 1)) {
                (0, _) | (_, None) => 0,
                (b, Some(j)) => self.seen[j] >> (64 - b),
            };
            self.seen[i] = (low << bits) | carry;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(psns: &[u32]) -> (Vec<Arrival>, ReorderCounters) {
        let mut m = ReorderMeter::default();
        let arrivals = psns.iter().map(|&p| m.observe(Psn::new(p), false)).collect();
        (arrivals, m.counters())
    }

    #[test]
    fn in_order_arrivals_are_neither_reordered_nor_duplicates() {
        let (_, c) = run(&(0..3000).collect::<Vec<_>>());
        assert_eq!(c, ReorderCounters::default());
    }

    #[test]
    fn a_swap_a_late_packet_and_duplicates() {
        use Arrival::*;
        let (a, c) = run(&[0, 2, 1, 3, 7, 4, 5, 6, 5, 7, 0]);
        assert_eq!(
            a,
            [
                InOrder,
                InOrder,
                Reordered { depth: 1 },
                InOrder,
                InOrder,
                Reordered { depth: 3 },
                Reordered { depth: 2 },
                Reordered { depth: 1 },
                Duplicate,
                Duplicate,
                Duplicate
            ]
        );
        assert_eq!(c, ReorderCounters { reordered_packets: 4, reorder_depth_max: 3, duplicate_psns: 3 });
    }

    #[test]
    fn history_survives_jumps_across_words_and_the_psn_wrap() {
        let top = Psn::MASK;
        let mut m = ReorderMeter::default();
        m.observe(Psn::new(top - 100), false);
        m.observe(Psn::new(top - 30), false);
        // Jump 200 ahead across the wrap: both older PSNs are still remembered.
        m.observe(Psn::new(top - 30) + 200, false);
        assert_eq!(m.observe(Psn::new(top - 100), false), Arrival::Duplicate);
        assert_eq!(m.observe(Psn::new(top - 30), false), Arrival::Duplicate);
        assert_eq!(m.observe(Psn::new(top - 31), false), Arrival::Reordered { depth: 201 });
        // Beyond the history the transport's word decides.
        m.observe(Psn::new(top - 30) + 200 + HISTORY, false);
        assert_eq!(m.observe(Psn::new(top - 50), true), Arrival::Duplicate);
        assert_eq!(m.observe(Psn::new(top - 51), false), Arrival::Reordered { depth: 220 + HISTORY + 51 - 50 });
    }
}
