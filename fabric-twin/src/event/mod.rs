//! The clock and the event queue: simulated nanoseconds, and what happens at each of them.
//!
//! A binary heap of small, `Copy` events ordered by (time, sequence number): events at the same
//! nanosecond run in the order they were scheduled, so a run is deterministic. The heap keeps
//! its allocation, so a running simulation allocates nothing per event.
use std::{cmp::Ordering, collections::BinaryHeap};

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
}

impl Kind {
    pub const COUNT: usize = 6;
    pub const ALL: [Kind; Kind::COUNT] =
        [Kind::Arrive, Kind::TxDone, Kind::Pause, Kind::Resume, Kind::HostWake, Kind::PfcTend];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Arrive => "arrive",
            Kind::TxDone => "tx-done",
            Kind::Pause => "pause",
            Kind::Resume => "resume",
            Kind::HostWake => "host-wake",
            Kind::PfcTend => "pfc-tend",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub time: Nanos,
    seq: u64,
    pub kind: Kind,
    pub port: u32,
    pub arg: u32,
}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: `BinaryHeap` is a max-heap and the earliest event must come out first.
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The pending events and the clock.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Event>,
    next_seq: u64,
    now: Nanos,
    processed: u64,
    by_kind: [u64; Kind::COUNT],
}

impl EventQueue {
    pub fn new() -> Self {
        Self::default()
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
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Schedules an event at `time` (never before now: the past cannot change).
    pub fn schedule(&mut self, time: Nanos, kind: Kind, port: u32, arg: u32) {
        debug_assert!(time >= self.now, "event at {time} scheduled at {}", self.now);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Event { time: time.max(self.now), seq, kind, port, arg });
    }

    /// The next event, the clock moved to its time.
    pub fn pop(&mut self) -> Option<Event> {
        let e = self.heap.pop()?;
        self.now = e.time;
        self.processed += 1;
        self.by_kind[e.kind as usize] += 1;
        Some(e)
    }

    /// Forgets every pending event and rewinds the clock (a new run).
    pub fn reset(&mut self) {
        self.heap.clear();
        self.now = 0;
        self.processed = 0;
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
}
