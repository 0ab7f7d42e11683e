//! The [`CongestionControl`] trait: what every scheme is told and what it may decide.
use std::fmt;

use bytes::Bytes;

use crate::{buf::PacketBuf, qp::Connection, wire::opcode};

/// Control messages of a scheme (CTS's grants, say) travel as RC SEND ONLY on the data QP's
/// reverse direction: the endpoint's data are RDMA WRITEs, so a SEND reaching a requester is
/// never data, and goes to [`CongestionControl::on_control`].
pub const CONTROL_OPCODE: u8 = opcode::RC_SEND_ONLY;

/// Something a receiver's congestion control sends back to a sender, on one of its responder
/// QPs (the flow's local QP number here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Feedback {
    /// A RoCEv2 congestion notification (annex A17.9.3): the responder builds and counts it.
    Cnp { qp: u32 },
    /// A message of the scheme's own, a whole UDP payload with its ICRC (CTS's grant).
    Packet { qp: u32, packet: Bytes },
}

impl Feedback {
    /// The responder QP it goes out on.
    pub fn qp(&self) -> u32 {
        match self {
            Feedback::Cnp { qp } | Feedback::Packet { qp, .. } => *qp,
        }
    }
}

/// A congestion-control scheme at one host, sans-IO: the sending half of every QP that starts
/// there and the receiving half of every QP that ends there, each flow known by its local QP
/// number. The time is a `u64` of nanoseconds passed in; nothing here reads a clock, sends a
/// packet or starts a thread. [`super::SenderQp`] and [`super::ReceiverQp`] call these hooks
/// around the QP state machines, so a driver (the endpoint, a simulator) only forwards packets.
///
/// One object per host rather than per QP, because some schemes share state across a host's
/// flows (CTS's receiver hands out one set of staging buffers to all its senders).
///
/// Sender side: the scheme decides what a requester may post ([`Self::poll_post`]) and at
/// what rate it is paced (each hook that can change the rate returns the new one, which the
/// caller hands to [`crate::qp::Requester::set_rate`]). Receiver side: it hears of every
/// packet's arrival and CE mark and of every message received, and says what to send back
/// ([`Self::poll_feedback`]). Every hook but [`Self::poll_post`] has a default that does
/// nothing, so a scheme spells out only what it reacts to.
pub trait CongestionControl: fmt::Debug + Send {
    // ---- sender side (requester QPs) ----

    /// A requester QP `qp` starts here with `bytes` to send, paced at `rate_bps` (`None`:
    /// unpaced). That rate is the QP's own (its share of its transfer, under a slow NIC's
    /// cap), so a scheme that sets rates starts and recovers there rather than at a rate of
    /// its own. Returns the pacing rate it starts at, if the scheme sets one (`None`: the
    /// requester keeps its configured rate).
    fn add_sender(&mut self, qp: u32, bytes: u64, rate_bps: Option<u64>, now_ns: u64) -> Option<u64> {
        let _ = (qp, bytes, rate_bps, now_ns);
        None
    }

    /// The length of the next WRITE sender `qp` may post now, given `unposted` bytes not yet
    /// posted; `None` when it must wait. Asked after [`Self::add_sender`], [`Self::on_control`]
    /// and [`Self::on_completed`], until it says `None`.
    fn poll_post(&mut self, qp: u32, unposted: u64) -> Option<u64>;

    /// The sender's timers at `now_ns` (asked before each transmit): a new rate, if one is due.
    fn poll_rate(&mut self, qp: u32, now_ns: u64) -> Option<u64> {
        let _ = (qp, now_ns);
        None
    }

    /// Sender `qp` just sent packets of `wire_bytes` in all (headers and the link's framing
    /// included, as the pacer charges them): a new rate, if that changes it.
    fn on_sent(&mut self, qp: u32, wire_bytes: u64, now_ns: u64) -> Option<u64> {
        let _ = (qp, wire_bytes, now_ns);
        None
    }

    /// A CNP reached sender `qp`: a new rate, if that changes it.
    fn on_cnp(&mut self, qp: u32, now_ns: u64) -> Option<u64> {
        let _ = (qp, now_ns);
        None
    }

    /// A control message ([`CONTROL_OPCODE`], ICRC checked) reached sender `qp`: a grant, say.
    /// What it allows is then asked of [`Self::poll_post`].
    fn on_control(&mut self, qp: u32, udp_payload: &[u8], now_ns: u64) {
        let _ = (qp, udp_payload, now_ns);
    }

    /// A WRITE of `len` bytes that sender `qp` posted is acknowledged in full. What that allows
    /// is then asked of [`Self::poll_post`].
    fn on_completed(&mut self, qp: u32, len: u64, now_ns: u64) {
        let _ = (qp, len, now_ns);
    }

    /// When sender `qp`'s timers next want [`Self::poll_rate`].
    fn sender_timeout(&self, qp: u32) -> Option<u64> {
        let _ = qp;
        None
    }

    /// Whether the scheme sets the senders' rates (then their trajectory is worth recording).
    fn sets_rate(&self) -> bool {
        false
    }

    // ---- receiver side (responder QPs) ----

    /// A responder QP ends here (`connection` is its end) and expects `bytes`.
    fn add_receiver(&mut self, connection: &Connection, bytes: u64) {
        let _ = (connection, bytes);
    }

    /// A packet for receiver `qp` arrived (ICRC checked), marked CE or not.
    fn on_arrival(&mut self, qp: u32, ce: bool, now_ns: u64) {
        let _ = (qp, ce, now_ns);
    }

    /// A WRITE of `len` bytes completed on receiver `qp` (its last packet arrived in order).
    fn on_message_received(&mut self, qp: u32, len: u64, now_ns: u64) {
        let _ = (qp, len, now_ns);
    }

    /// Appends to `out` what the receivers send back at `now_ns`, packets of the scheme's own
    /// written into `buf`. `admit` is false while the host takes nothing in (a receiver whose
    /// buffer is full): a receiver-driven scheme admits nothing new then. Called once per round
    /// of the driver, not in a loop.
    fn poll_feedback(&mut self, now_ns: u64, admit: bool, buf: &mut PacketBuf, out: &mut Vec<Feedback>) {
        let _ = (now_ns, admit, buf, out);
    }

    /// When [`Self::poll_feedback`] may next have something (at or before now: at once).
    fn receiver_timeout(&self) -> Option<u64> {
        None
    }

    /// Receiver-driven schemes: the most bytes admitted toward this host and not yet received
    /// at once; 0 for a scheme that admits nothing.
    fn max_in_flight_bytes(&self) -> u64 {
        0
    }
}

/// [`CongestionControl::poll_post`] for schemes that do not gate posting: everything at once.
pub fn post_everything(unposted: u64) -> Option<u64> {
    (unposted > 0).then_some(unposted)
}
