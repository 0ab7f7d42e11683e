//! Links: each port's sending side. A port holds its queued packets per priority class,
//! serializes one frame at a time at its rate (the frame's wire time, preamble, FCS and
//! inter-frame gap included: [`fabric_common::queue::frame_transmit_ns`]), obeys the PFC frames
//! its peer sends ([`fabric_roce::pause::PauseState`], the hosts' own obedience code), and
//! delivers after the propagation delay.
use std::collections::VecDeque;

use fabric_common::{
    pfc::{CLASSES, PauseFrame},
    queue::{self, IngressAccount, LineRate},
};
use fabric_roce::pause::PauseState;

use crate::event::Nanos;

/// Bytes a frame of `frame_len` (as XDP sees it) occupies on the wire and in a queue's depth:
/// the unit of every depth, threshold and limit here, as in the XDP queue model.
#[inline]
pub const fn wire_bytes(frame_len: u32) -> u64 {
    frame_len as u64 + queue::WIRE_OVERHEAD_BYTES
}

/// Counters of one port's sending side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    pub packets: u64,
    /// Frame bytes sent (Ethernet header to ICRC, as the XDP counters count).
    pub bytes: u64,
    pub ecn_marked: u64,
    pub drops: u64,
    /// Frames this port sent that its lossy link lost (the XDP drop reason `link_loss`).
    pub link_loss: u64,
    pub over_headroom: u64,
    /// PFC frames received (this port was paused or resumed by its peer).
    pub pauses_received: u64,
    /// PFC frames sent from this port to its peer (pause, refresh and resume).
    pub pauses_sent: u64,
    /// ... of which refreshes of a pause in force, and resumes (quanta 0).
    pub refreshes_sent: u64,
    pub resumes_sent: u64,
    /// Deepest any class's queue has been, wire bytes.
    pub max_depth_bytes: u64,
    /// Packets sent while the peer had this port's class paused: the XDP switch's model error,
    /// so only [`crate::switch::QueueModel::Phantom`] counts any (a held queue stops).
    pub sent_while_paused: u64,
    /// Per class: how long the peer's PFC frames held this port paused in total, and its
    /// longest continuous pause (filled in when the step reports).
    pub paused_ns: [Nanos; CLASSES],
    pub longest_pause_ns: [Nanos; CLASSES],
}

impl PortCounters {
    /// Adds `repeat` times `other`'s counts (the steps of a job that repeat one step) and takes
    /// the larger of each maximum. Every field is named, so that a new counter cannot be left
    /// out of a job's totals.
    pub fn add_repeated(&mut self, other: &PortCounters, repeat: u64) {
        let PortCounters {
            packets,
            bytes,
            ecn_marked,
            drops,
            link_loss,
            over_headroom,
            pauses_received,
            pauses_sent,
            refreshes_sent,
            resumes_sent,
            max_depth_bytes,
            sent_while_paused,
            paused_ns,
            longest_pause_ns,
        } = other;
        self.packets += repeat * packets;
        self.bytes += repeat * bytes;
        self.ecn_marked += repeat * ecn_marked;
        self.drops += repeat * drops;
        self.link_loss += repeat * link_loss;
        self.over_headroom += repeat * over_headroom;
        self.pauses_received += repeat * pauses_received;
        self.pauses_sent += repeat * pauses_sent;
        self.refreshes_sent += repeat * refreshes_sent;
        self.resumes_sent += repeat * resumes_sent;
        self.max_depth_bytes = self.max_depth_bytes.max(*max_depth_bytes);
        self.sent_while_paused += repeat * sent_while_paused;
        for class in 0..CLASSES {
            self.paused_ns[class] += repeat * paused_ns[class];
            self.longest_pause_ns[class] = self.longest_pause_ns[class].max(longest_pause_ns[class]);
        }
    }
}

/// A queued packet: its index, and what dequeuing and sending it need without touching the
/// packet itself (its frame length and the port it entered the switch by).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queued {
    pub id: u32,
    pub frame_len: u32,
    pub ingress: u32,
}

/// One port: its egress queues, its link's state and its ingress accounting.
///
/// Laid out hot first and aligned to a cache line: at a large fabric the ports outnumber the
/// cache, and every event at a port reads its first line (the scalars and, in the next, the
/// bytes queued and held per class).
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Port {
    pub node: u32,
    /// Global index of the port at the other end.
    pub peer: u32,
    /// Until when the frame being sent occupies the link.
    pub busy_until: Nanos,
    /// The link's rate (`line.bps`) with its factors: the switch's arithmetic for transmit
    /// times and depths.
    pub line: LineRate,
    pub delay_ns: u64,
    /// A Resume event is pending for this time.
    pub resume_at: Option<Nanos>,
    pub busy: bool,
    /// Bit n set: class n has packets queued.
    nonempty: u8,
    /// Ingress side: classes this port is pausing upstream (bit n: class n).
    pub pausing: u8,
    /// Ingress side: classes with a PFC tending event pending (bit n: class n).
    pub tending: u8,
    /// A PFC frame has reached this port: only then is `pause` read.
    ever_paused: bool,
    /// Wire bytes queued per class.
    pub queued_bytes: [u64; CLASSES],
    /// Ingress side: wire bytes this port's arrivals hold in the switch, per class.
    pub held: [u64; CLASSES],
    queues: [VecDeque<Queued>; CLASSES],
    /// PFC obedience for what this port sends.
    pause: PauseState,
    /// Ingress side: when the last pause frame of each class went out.
    pub last_pause_ns: [Nanos; CLASSES],
    pub counters: PortCounters,
}

impl Port {
    pub fn new(node: u32, peer: u32, rate_bps: u64, delay_ns: u64) -> Self {
        Port {
            node,
            peer,
            busy_until: 0,
            line: LineRate::new(rate_bps),
            delay_ns,
            resume_at: None,
            busy: false,
            nonempty: 0,
            pausing: 0,
            tending: 0,
            ever_paused: false,
            queued_bytes: [0; CLASSES],
            held: [0; CLASSES],
            queues: Default::default(),
            pause: PauseState::new(rate_bps),
            last_pause_ns: [0; CLASSES],
            counters: PortCounters::default(),
        }
    }

    /// A PFC frame from the peer reached this port at `now`.
    pub fn on_pause_frame(&mut self, frame: &PauseFrame, now: Nanos) {
        self.ever_paused = true;
        self.pause.on_frame(frame, now);
        self.counters.pauses_received += 1;
    }

    /// The counters with each class's paused time up to `now` filled in.
    pub fn counters_at(&self, now: Nanos) -> PortCounters {
        let mut c = self.counters;
        if self.ever_paused {
            for class in 0..CLASSES {
                c.paused_ns[class] = self.pause.paused_ns(class, now);
                c.longest_pause_ns[class] = self.pause.longest_pause_ns(class, now);
            }
        }
        c
    }

    /// Whether `class` may send at `now`.
    #[inline]
    pub fn may_send(&self, class: usize, now: Nanos) -> bool {
        !self.ever_paused || self.pause.may_send(class, now)
    }

    /// When `class` may send again (at or before now if it may).
    pub fn resume_at(&self, class: usize) -> Nanos {
        self.pause.resume_at(class)
    }

    /// Until when `class` is paused, as the XDP switch's `EgressQueue::paused_until_ns` says
    /// it (0 if it never was).
    pub fn paused_until(&self, class: usize) -> Nanos {
        if self.ever_paused { self.pause.resume_at(class) } else { 0 }
    }

    /// Time the link is busy with a frame of `frame_len`.
    #[inline]
    pub fn transmit_ns(&self, frame_len: u32) -> Nanos {
        self.line.frame_transmit_ns(u64::from(frame_len))
    }

    /// Queues a packet in `class`; returns the class's depth with it, wire bytes.
    #[inline]
    pub fn enqueue(&mut self, class: usize, q: Queued) -> u64 {
        self.queues[class].push_back(q);
        self.nonempty |= 1 << class;
        self.queued_bytes[class] += wire_bytes(q.frame_len);
        self.queued_bytes[class]
    }

    /// Takes the packet at the head of the highest class with a packet queued that may be sent
    /// at `now` (strict priority: CNPs and grants in class 6 go before data in class 3).
    #[inline]
    pub fn dequeue(&mut self, now: Nanos) -> Option<(usize, Queued)> {
        let mut classes = self.nonempty;
        while classes != 0 {
            let class = 7 - classes.leading_zeros() as usize;
            classes &= !(1 << class);
            if !self.may_send(class, now) {
                continue;
            }
            let q = self.queues[class].pop_front().expect("a non-empty class");
            if self.queues[class].is_empty() {
                self.nonempty &= !(1 << class);
            }
            self.queued_bytes[class] -= wire_bytes(q.frame_len);
            return Some((class, q));
        }
        None
    }

    /// Takes every queued packet out, paused or not (the link failed under them).
    pub fn take_all(&mut self) -> Vec<(usize, Queued)> {
        let mut out = Vec::new();
        for class in 0..CLASSES {
            out.extend(self.queues[class].drain(..).map(|q| (class, q)));
            self.queued_bytes[class] = 0;
        }
        self.nonempty = 0;
        out
    }

    /// When the earliest paused class with a packet queued may send again.
    pub fn earliest_resume(&self) -> Option<Nanos> {
        (0..CLASSES).filter(|&c| self.nonempty & (1 << c) != 0).map(|c| self.pause.resume_at(c)).min()
    }

    pub fn is_pausing(&self, class: usize) -> bool {
        self.pausing & (1 << class) != 0
    }
}

/// The lanes of [`PhantomPort::downlink_ns`].
pub const DOWNLINK_DATA: usize = 0;
pub const DOWNLINK_CONTROL: usize = 1;

/// One port's state under [`crate::switch::QueueModel::Phantom`], per class: the XDP switch's
/// own records, kept by the same `fabric-common` arithmetic. The egress side's queue is one
/// tail time ([`queue::enqueue_tail`]); the ingress side's held bytes are an
/// [`IngressAccount`] of frame bytes (lossless classes only), which PFC's Xoff and Xon read.
#[derive(Clone, Copy, Debug, Default)]
pub struct PhantomPort {
    pub tail_ns: [Nanos; CLASSES],
    pub account: [IngressAccount; CLASSES],
    /// A port towards a host: when the host's modelled downlink will have delivered everything
    /// sent so far, data ([`DOWNLINK_DATA`]) and control ([`DOWNLINK_CONTROL`]: CNPs, CTS)
    /// apart, each at the link's rate, as the testbed host's `Downlink` keeps them.
    pub downlink_ns: [Nanos; 2],
}
