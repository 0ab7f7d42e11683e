//! The last hop's serialisation, modelled at the receiving host.
//!
//! The switches model their queues but forward every packet at once (an XDP program cannot hold
//! one), and a veth delivers far faster than the modelled link. Without more, a receiver would
//! see data the moment it was sent, however congested its link: ACKs, CTS grants and CE marks
//! would come back too early, and receiver-driven admission (CTS) or any window would clock at
//! veth speed instead of link speed. So each host holds what it receives until the time its
//! modelled link (the RTSW's egress port towards it, at the time-scaled rate) would have
//! finished delivering it, and only then processes it. Same arithmetic as the switch's phantom
//! queue ([`fabric_common::queue`]).
use std::collections::VecDeque;

use fabric_common::queue::{LineRate, enqueue_tail};

/// Ethernet + IPv4 + UDP headers around a RoCE datagram (the endpoints speak IPv4): the frame
/// XDP sees.
pub const FRAME_OVERHEAD: u64 = fabric_roce::wire::IPV4_FRAME_HEADERS_LEN as u64;

/// A received datagram waiting for its modelled arrival.
#[derive(Debug)]
pub struct Pending<T> {
    pub due_ns: u64,
    pub item: T,
}

/// The host's downlink: two FIFOs of received datagrams, data and control (CNPs, CTS messages,
/// whose class the switches keep apart), each released when the link would have delivered its
/// last byte. Like the switches' phantom queues, each class drains at the link's rate on its
/// own: a CNP does not wait behind the data queued for the host.
#[derive(Debug)]
pub struct Downlink<T> {
    /// The link's rate with its factors: no division per datagram.
    line: LineRate,
    data: Lane<T>,
    control: Lane<T>,
}

/// One class's FIFO and when the link finishes delivering everything queued in it.
#[derive(Debug)]
struct Lane<T> {
    tail_ns: u64,
    queue: VecDeque<Pending<T>>,
}

impl<T> Lane<T> {
    fn new() -> Self {
        Lane { tail_ns: 0, queue: VecDeque::new() }
    }
}

impl<T> Downlink<T> {
    pub fn new(rate_bps: u64) -> Self {
        Downlink { line: LineRate::new(rate_bps), data: Lane::new(), control: Lane::new() }
    }

    /// A datagram of `udp_payload` bytes arrived (at veth speed) at `now_ns`, in the control
    /// class or not.
    pub fn arrive(&mut self, now_ns: u64, udp_payload: usize, control: bool, item: T) {
        let frame = udp_payload as u64 + FRAME_OVERHEAD;
        let lane = if control { &mut self.control } else { &mut self.data };
        lane.tail_ns = enqueue_tail(lane.tail_ns, 0, now_ns, self.line.frame_transmit_ns(frame));
        lane.queue.push_back(Pending { due_ns: lane.tail_ns, item });
    }

    /// The next datagram the link has delivered by `now_ns`: the one due first (control on a
    /// tie), so that a host that wakes late still takes them in the order they arrived.
    pub fn deliver(&mut self, now_ns: u64) -> Option<T> {
        let due = |l: &Lane<T>| l.queue.front().map(|p| p.due_ns).filter(|&d| d <= now_ns);
        let lane = match (due(&self.control), due(&self.data)) {
            (Some(c), Some(d)) if d < c => &mut self.data,
            (Some(_), _) => &mut self.control,
            (None, Some(_)) => &mut self.data,
            (None, None) => return None,
        };
        lane.queue.pop_front().map(|p| p.item)
    }

    /// When the next datagram is due, if any waits.
    pub fn next_due(&self) -> Option<u64> {
        [&self.control, &self.data].iter().filter_map(|l| l.queue.front().map(|p| p.due_ns)).min()
    }

    pub fn len(&self) -> usize {
        self.control.queue.len() + self.data.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_at_the_link_rate_in_order() {
        // 100 Mbit/s: a 1000-byte datagram is a 1042-byte frame, 1066 bytes of wire time with
        // preamble, FCS and inter-frame gap: 85 280 ns.
        let mut d = Downlink::new(100_000_000);
        for i in 0..3 {
            d.arrive(0, 1000, false, i);
        }
        assert_eq!(d.next_due(), Some(85_280));
        assert_eq!(d.deliver(85_279), None);
        assert_eq!(d.deliver(85_280), Some(0));
        assert_eq!(d.deliver(170_559), None, "the second is due at 170 560");
        assert_eq!(d.deliver(255_840), Some(1));
        assert_eq!(d.deliver(255_840), Some(2));
        assert!(d.is_empty());
        // An idle link starts again from now.
        d.arrive(1_000_000, 1000, false, 9);
        assert_eq!(d.next_due(), Some(1_085_280));
    }

    /// A CNP behind a standing data queue: released after its own wire time, not the queue's.
    /// A host that wakes late takes what is due in the order it came due.
    #[test]
    fn control_does_not_wait_behind_data() {
        let mut d = Downlink::new(100_000_000);
        for i in 0..10 {
            d.arrive(0, 1000, false, i);
        }
        // A CNP: 32 bytes of UDP payload (BTH, 16 reserved, ICRC), a 74-byte frame, 98 bytes of
        // wire time: 7 840 ns.
        d.arrive(0, 32, true, 100);
        assert_eq!(d.next_due(), Some(7_840));
        assert_eq!(d.deliver(7_840), Some(100), "the CNP first");
        assert_eq!(d.deliver(85_280), Some(0), "then the data, on its own schedule");
        assert_eq!(d.len(), 9);
        // Data due at 170 560, a CNP arriving at 100 000 due at 107 840: woken at 200 000, the
        // CNP comes first; a CNP due after the data waits its turn.
        d.arrive(100_000, 32, true, 101);
        assert_eq!(d.deliver(200_000), Some(101));
        assert_eq!(d.deliver(200_000), Some(1));
        d.arrive(250_000, 32, true, 102);
        assert_eq!(d.deliver(260_000), Some(2), "data due at 255 840, before the CNP's 257 840");
        assert_eq!(d.deliver(260_000), Some(102));
    }
}
