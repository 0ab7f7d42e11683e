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

use fabric_common::{
    queue::{LineRate, enqueue_tail},
    wire::{ethernet, ipv4, udp},
};

/// Ethernet + IPv4 + UDP headers around a RoCE datagram: the frame XDP sees.
pub const FRAME_OVERHEAD: u64 = (ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN + udp::HEADER_LEN) as u64;

/// A received datagram waiting for its modelled arrival.
#[derive(Debug)]
pub struct Pending<T> {
    pub due_ns: u64,
    pub item: T,
}

/// The host's downlink: a FIFO of received datagrams, each released when the link would have
/// delivered its last byte.
#[derive(Debug)]
pub struct Downlink<T> {
    /// The link's rate with its factors: no division per datagram.
    line: LineRate,
    /// When the link finishes delivering everything queued so far.
    tail_ns: u64,
    queue: VecDeque<Pending<T>>,
}

impl<T> Downlink<T> {
    pub fn new(rate_bps: u64) -> Self {
        Downlink { line: LineRate::new(rate_bps), tail_ns: 0, queue: VecDeque::new() }
    }

    /// A datagram of `udp_payload` bytes arrived (at veth speed) at `now_ns`.
    pub fn arrive(&mut self, now_ns: u64, udp_payload: usize, item: T) {
        let frame = udp_payload as u64 + FRAME_OVERHEAD;
        self.tail_ns = enqueue_tail(self.tail_ns, 0, now_ns, self.line.frame_transmit_ns(frame));
        self.queue.push_back(Pending { due_ns: self.tail_ns, item });
    }

    /// The next datagram the link has delivered by `now_ns`.
    pub fn deliver(&mut self, now_ns: u64) -> Option<T> {
        if self.queue.front().is_some_and(|p| p.due_ns <= now_ns) {
            return self.queue.pop_front().map(|p| p.item);
        }
        None
    }

    /// When the next datagram is due, if any waits.
    pub fn next_due(&self) -> Option<u64> {
        self.queue.front().map(|p| p.due_ns)
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
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
            d.arrive(0, 1000, i);
        }
        assert_eq!(d.next_due(), Some(85_280));
        assert_eq!(d.deliver(85_279), None);
        assert_eq!(d.deliver(85_280), Some(0));
        assert_eq!(d.deliver(170_559), None, "the second is due at 170 560");
        assert_eq!(d.deliver(255_840), Some(1));
        assert_eq!(d.deliver(255_840), Some(2));
        assert!(d.is_empty());
        // An idle link starts again from now.
        d.arrive(1_000_000, 1000, 9);
        assert_eq!(d.next_due(), Some(1_085_280));
    }
}
