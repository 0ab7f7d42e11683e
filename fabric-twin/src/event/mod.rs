//! The clock and the event queue: simulated nanoseconds, and what happens at each of them.
//!
//! Time only moves forward and no event is scheduled in the past, so the queue is a radix heap
//! (Ahuja, Mehlhorn, Orlin and Tarjan, 1990): an event waits in the bucket of the highest bit in
//! which its time differs from the last time taken out, and a bucket is split into lower ones
//! only when its turn comes. Each event moves down at most 64 times and usually a few, with no
//! comparisons of whole heaps: several times faster than a binary heap at the simulator's
//! sizes. Events of the same nanosecond come out in the order they were scheduled, so a run is
//! deterministic. Buckets keep their allocations: a running simulation allocates nothing per
//! event.

/// Simulated time, nanoseconds since the start of a run.
pub type Nanos = u64;

/// What happens. `port` is a global port index ([`crate::net::Network::port_index`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The last bit of packet `arg` reached `port` (the receiving end of a link).
    Arrive,
    /// `port` finished serializing its frame: it may send the next one.
    TxDone,
    /// A PFC frame reached egress `port`: class `arg >> 16`, quanta `arg & 0xFFFF`.
    Pause,
    /// A pause of egress `port` may have ended: look at its queues again.
    Resume,
    /// Host node `arg`'s timers (pacer, retransmission, congestion control) may be due.
    HostWake,
    /// Ingress `port` pauses class `arg`: refresh the pause or lift it (the agent's tending).
    PfcTend,
    /// Change `arg` of the step's scheduled changes to the network happens (a link fails, the
    /// routes change).
    Change,
}

impl Kind {
    pub const COUNT: usize = 7;
    pub const ALL: [Kind; Kind::COUNT] =
        [Kind::Arrive, Kind::TxDone, Kind::Pause, Kind::Resume, Kind::HostWake, Kind::PfcTend, Kind::Change];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Arrive => "arrive",
            Kind::TxDone => "tx-done",
            Kind::Pause => "pause",
            Kind::Resume => "resume",
            Kind::HostWake => "host-wake",
            Kind::PfcTend => "pfc-tend",
            Kind::Change => "change",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub time: Nanos,
    pub port: u32,
    pub arg: u32,
    pub kind: Kind,
}

/// Buckets: 0 holds events at exactly the last time taken out; bucket `b` > 0 those whose
/// time differs from it first in bit `b - 1`.
const BUCKETS: usize = 65;

/// The pending events and the clock.
#[derive(Debug)]
pub struct EventQueue {
    buckets: Vec<Vec<Event>>,
    /// Bucket 0 is taken from the front (FIFO); events before `head` are gone.
    head: usize,
    /// Bit `b` set: bucket `b` is not empty (bucket 0: has events from `head` on).
    occupied: u128,
    len: usize,
    now: Nanos,
    processed: u64,
    by_kind: [u64; Kind::COUNT],
}

impl Default for EventQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl EventQueue {
    pub fn new() -> Self {
        EventQueue {
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            head: 0,
            occupied: 0,
            len: 0,
            now: 0,
            processed: 0,
            by_kind: [0; Kind::COUNT],
        }
    }

    /// The time of the event being handled (or of the last one handled).
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Events taken out so far.
    pub fn processed(&self) -> u64 {
        self.processed
    }

    /// Events taken out so far, by [`Kind`] (in [`Kind::ALL`] order).
    pub fn processed_by_kind(&self) -> [u64; Kind::COUNT] {
        self.by_kind
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn bucket_of(&self, time: Nanos) -> usize {
        (64 - (time ^ self.now).leading_zeros()) as usize
    }

    /// Schedules an event at `time`; a time in the past is taken as now (the past cannot
    /// change).
    #[inline]
    pub fn schedule(&mut self, time: Nanos, kind: Kind, port: u32, arg: u32) {
        debug_assert!(time >= self.now, "event at {time} scheduled at {}", self.now);
        let time = time.max(self.now);
        let b = self.bucket_of(time);
        self.buckets[b].push(Event { time, port, arg, kind });
        self.occupied |= 1 << b;
        self.len += 1;
    }

    /// The next event, the clock moved to its time.
    pub fn pop(&mut self) -> Option<Event> {
        if self.occupied & 1 == 0 {
            self.refill()?;
        }
        let e = self.buckets[0][self.head];
        self.head += 1;
        if self.head == self.buckets[0].len() {
            self.buckets[0].clear();
            self.head = 0;
            self.occupied &= !1;
        }
        self.len -= 1;
        self.processed += 1;
        self.by_kind[e.kind as usize] += 1;
        Some(e)
    }

    /// Bucket 0 is empty: the clock moves to the earliest time in the first non-empty bucket,
    /// whose events are spread over the buckets below it (in order, so ties stay FIFO).
    fn refill(&mut self) -> Option<()> {
        if self.occupied == 0 {
            return None;
        }
        let b = self.occupied.trailing_zeros() as usize;
        let mut moving = std::mem::take(&mut self.buckets[b]);
        self.occupied &= !(1 << b);
        self.now = moving.iter().map(|e| e.time).min().expect("an occupied bucket");
        for e in moving.drain(..) {
            let to = self.bucket_of(e.time);
            self.buckets[to].push(e);
            self.occupied |= 1 << to;
        }
        // Keep the emptied bucket's allocation for its next events.
        self.buckets[b] = moving;
        Some(())
    }

    /// Forgets every pending event and rewinds the clock (a new run).
    pub fn reset(&mut self) {
        for b in &mut self.buckets {
            b.clear();
        }
        (self.head, self.occupied, self.len, self.now, self.processed) = (0, 0, 0, 0, 0);
        self.by_kind = [0; Kind::COUNT];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_by_time_then_in_scheduling_order() {
        let mut q = EventQueue::new();
        q.schedule(30, Kind::TxDone, 1, 0);
        q.schedule(10, Kind::Arrive, 2, 0);
        q.schedule(30, Kind::Arrive, 3, 0);
        q.schedule(10, Kind::Pause, 4, 0);
        let order: Vec<(u64, u32)> = std::iter::from_fn(|| q.pop()).map(|e| (e.time, e.port)).collect();
        assert_eq!(order, [(10, 2), (10, 4), (30, 1), (30, 3)]);
        assert_eq!((q.now(), q.processed()), (30, 4));
    }

    #[test]
    fn random_schedules_come_out_sorted_and_stable() {
        // Events scheduled at random future times while others are taken out, as the
        // simulator does: times never go back, and ties keep their scheduling order.
        let mut q = EventQueue::new();
        let mut rng = fabric_common::rng::SplitMix64::new(5);
        let mut out: Vec<(u64, u32)> = Vec::new();
        let mut n = 0;
        for _ in 0..2_000 {
            for _ in 0..rng.below(4) {
                let t = q.now() + rng.below(3) as u64 * rng.below(1_000) as u64;
                q.schedule(t, Kind::Arrive, n, 0);
                n += 1;
            }
            if let Some(e) = q.pop() {
                out.push((e.time, e.port));
            }
        }
        while let Some(e) = q.pop() {
            out.push((e.time, e.port));
        }
        assert_eq!(out.len(), n as usize);
        assert!(out.windows(2).all(|w| w[0].0 < w[1].0 || (w[0].0 == w[1].0 && w[0].1 < w[1].1)));
    }
}
