//! Reliable Connection queue pairs doing RDMA WRITE, as sans-IO state machines: packets go in
//! and out as UDP payloads (BTH to ICRC), the time is an argument, nothing here reads a clock or
//! touches a socket.
//!
//! - [`Requester`]: queues messages, sends their packets within a window of unacknowledged
//!   packets and a pacer's rate, completes them on cumulative ACKs, goes back to the NAKed PSN on
//!   a sequence-error NAK, and back to the oldest unacknowledged PSN when its timer expires
//!   (go-back-N, as RC requesters do).
//! - [`Responder`]: accepts exactly the expected PSN, NAKs the first packet after a gap (once per
//!   gap), re-acknowledges duplicates, and coalesces ACKs.
//!
//! Both run either transport of [`super::transport`]: go-back-N above, or reorder-tolerant, where
//! the responder places every packet where its RETH says, keeps a bitmap of what arrived beyond
//! the expected PSN and answers gaps with SACKs, and the requester retransmits only what it
//! takes for lost. Either way the responder measures the reordering it sees ([`super::reorder`]).
//!
//! Payload bytes are zeros: the endpoint exists to put realistic RoCE traffic on the fabric, not to
//! move data. ICRCs follow the design in [`super::icrc`]; incoming ICRCs are the driver's to check
//! ([`Connection::verify_incoming`]) because only it knows the packet's UDP source port.
use std::collections::VecDeque;

use bytes::Bytes;
use fabric_common::queue::WIRE_OVERHEAD_BYTES;

use super::{
    buf::PacketBuf,
    icrc::{self, IpPair},
    pacer::{Pacer, PacerConfig},
    psn::Psn,
    reorder::ReorderMeter,
    segment::{self, PathMtu, Position, Segment},
    transport::Transport,
    wire::{
        AethRepr, Body, BthFields, CREDIT_UNLIMITED, IPV4_FRAME_HEADERS_LEN, IPV6_FRAME_HEADERS_LEN, NakCode, RethRepr,
        RocePacketRepr, SACK_BITS, Syndrome, WireError,
    },
};

/// The default partition key, as rxe and most NICs use.
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// The largest single WRITE posted: RoCE messages are at most 2 GiB, so larger admissions go
/// out as WRITEs of 1 GiB.
pub const MAX_WRITE_BYTES: u64 = 1 << 30;

/// Payload source: the endpoint sends zeros, at most one path MTU per packet.
static ZEROS: [u8; 4096] = [0; 4096];

/// One end of an RC connection: the QP numbers and the header fields the ICRC covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connection {
    pub local_qp: u32,
    pub remote_qp: u32,
    pub pkey: u16,
    /// Source (this end) and destination (the peer) of the packets this end sends.
    pub ip: IpPair,
    /// UDP source port of the packets this end sends (covered by the ICRC; ECMP hashes it).
    pub udp_src_port: u16,
}

impl Connection {
    /// Ethernet + IP + UDP headers around a UDP payload this end sends: with the payload, the
    /// frame as XDP sees it (no FCS).
    pub fn frame_overhead_bytes(&self) -> u32 {
        let headers = match self.ip {
            IpPair::V4 { .. } => IPV4_FRAME_HEADERS_LEN,
            IpPair::V6 { .. } => IPV6_FRAME_HEADERS_LEN,
        };
        headers as u32
    }

    /// Whether a UDP payload received from the peer, sent from `peer_udp_src_port`, has a good
    /// ICRC (assuming the peer sends as we do: see [`super::icrc`]).
    pub fn verify_incoming(&self, peer_udp_src_port: u16, udp_payload: &[u8]) -> bool {
        icrc::verify(self.ip.reversed(), peer_udp_src_port, udp_payload)
    }

    fn bth(&self, psn: Psn, ack_req: bool) -> BthFields {
        BthFields { pkey: self.pkey, dest_qp: self.remote_qp, psn, ack_req, ..BthFields::default() }
    }

    /// The packet's bytes with the ICRC filled in.
    fn finish(&self, repr: &RocePacketRepr<'_>) -> Vec<u8> {
        let mut bytes = repr.to_bytes();
        icrc::write_icrc(self.ip, self.udp_src_port, &mut bytes);
        bytes
    }

    /// [`Self::finish`] into `buf`: the same bytes, no allocation of their own.
    fn finish_into(&self, repr: &RocePacketRepr<'_>, buf: &mut PacketBuf) -> Bytes {
        buf.packet(repr.buffer_len(), |bytes| {
            repr.emit(bytes);
            icrc::write_icrc(self.ip, self.udp_src_port, bytes);
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Requester

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequesterConfig {
    pub connection: Connection,
    pub mtu: PathMtu,
    pub first_psn: Psn,
    /// Most packets sent and not yet acknowledged.
    pub window_packets: u32,
    /// `None`: as fast as the window allows.
    pub pacer: Option<PacerConfig>,
    /// What each packet costs the pacer beyond its UDP payload: Ethernet + IP + UDP headers
    /// ([`Connection::frame_overhead_bytes`]) and what a link charges every frame beyond that
    /// ([`WIRE_OVERHEAD_BYTES`]: preamble, FCS, inter-frame gap), so that a rate is a link's.
    pub wire_overhead_bytes: u32,
    pub retransmit_timeout_ns: u64,
    /// Timeouts in a row without progress before the QP gives up (IB's retry count, at most 7).
    pub retry_limit: u32,
    /// Where every WRITE lands on the responder (RETH address and key).
    pub remote_addr: u64,
    pub rkey: u32,
    pub transport: Transport,
    /// Reorder-tolerant only: a PSN not yet acknowledged is taken for lost (and retransmitted,
    /// once) when at least this many later PSNs have been selectively acknowledged. Reordering
    /// deeper than this costs spurious retransmissions; a larger value leaves more losses to
    /// the timer.
    pub loss_threshold_packets: u32,
}

impl RequesterConfig {
    /// Defaults: 1024-byte MTU, PSN 0, 128 packets in flight, unpaced, 1 ms timeout, 7 retries.
    pub fn new(connection: Connection) -> Self {
        RequesterConfig {
            connection,
            mtu: PathMtu::Mtu1024,
            first_psn: Psn::new(0),
            window_packets: 128,
            pacer: None,
            // Headers only, a sender paced at its link's rate overran the link by the framing
            // (2.2% at MTU 1024) and built a queue that never drained.
            wire_overhead_bytes: connection.frame_overhead_bytes() + WIRE_OVERHEAD_BYTES as u32,
            retransmit_timeout_ns: 1_000_000,
            retry_limit: 7,
            remote_addr: 0,
            rkey: 0,
            transport: Transport::GoBackN,
            loss_threshold_packets: DEFAULT_LOSS_THRESHOLD_PACKETS,
        }
    }
}

/// See [`RequesterConfig::loss_threshold_packets`]: deeper than the reordering a sprayed fabric
/// of equal paths produces, well within a window.
pub const DEFAULT_LOSS_THRESHOLD_PACKETS: u32 = 16;

/// A message the responder has acknowledged in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub msg_id: u64,
    pub len: u32,
    /// The `now_ns` of the ACK that completed it.
    pub completed_ns: u64,
}

/// Why a requester stopped: like an RC QP entering the error state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("no progress after the retry limit of retransmission timeouts")]
    RetryLimitExceeded,
    #[error("the responder sent NAK {0:?}")]
    Nak(NakCode),
    #[error("the responder sent an RNR NAK (receiver not ready: impossible for RDMA WRITE)")]
    RnrNak,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    #[error(
        "{outstanding_packets} packets would be outstanding: PSN order needs fewer than 2^23 per QP (spread a \
         transfer this large over more QPs, or send less)"
    )]
    PsnSpaceExhausted { outstanding_packets: u64 },
    #[error("the queue pair has failed: {0}")]
    Failed(Failure),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequesterCounters {
    /// Every packet handed out, retransmissions included.
    pub packets_sent: u64,
    pub packets_retransmitted: u64,
    /// Payload bytes of every packet handed out.
    pub bytes_sent: u64,
    pub acks_received: u64,
    pub naks_received: u64,
    /// ACKs and sequence NAKs that acknowledged nothing new (stale, repeated, or beyond what was
    /// sent): ignored.
    pub duplicate_acks: u64,
    pub timeouts: u64,
    pub cnps_received: u64,
    pub messages_completed: u64,
    /// Packets for another QP, or of a kind a requester does not take.
    pub ignored_packets: u64,
}

#[derive(Clone, Copy, Debug)]
struct OutboundMessage {
    msg_id: u64,
    len: u32,
    remote_addr: u64,
    first_psn: Psn,
    packets: u32,
}

impl OutboundMessage {
    fn end_psn(&self) -> Psn {
        self.first_psn + self.packets
    }

    fn contains(&self, psn: Psn) -> bool {
        self.first_psn.distance_to(psn) < self.packets
    }
}

/// The sending side of one RC QP. PSNs in order: `oldest_unacked <= next_psn <= sent_end <=
/// posted_end`; go-back-N moves `next_psn` back to `oldest_unacked` or to a NAKed PSN.
#[derive(Clone, Debug)]
pub struct Requester {
    config: RequesterConfig,
    pacer: Option<Pacer>,
    /// Posted messages not yet completed, oldest first, with consecutive PSN ranges.
    messages: VecDeque<OutboundMessage>,
    /// Index in `messages` of the one holding `next_psn`, when that is known.
    cursor: usize,
    oldest_unacked: Psn,
    next_psn: Psn,
    /// One past the highest PSN ever sent.
    sent_end: Psn,
    /// One past the last PSN of the last posted message.
    posted_end: Psn,
    retransmit_deadline_ns: Option<u64>,
    timeouts_in_a_row: u32,
    failure: Option<Failure>,
    counters: RequesterCounters,
    /// Reorder-tolerant only (zero under go-back-N), bit `i` for PSN `oldest_unacked + i`:
    /// selectively acknowledged, taken for lost and not yet resent, resent since last taken.
    sacked: u128,
    lost: u128,
    resent: u128,
    /// For a resent PSN `p`, at `p`'s value mod [`SACK_BITS`] (the window holds fewer): one past
    /// the highest PSN sent when `p` was last resent. PSNs from there on were first sent after
    /// the resend, so enough of them acknowledged while `p` is not says the resend was lost.
    resent_horizon: [Psn; SACK_BITS as usize],
    /// Reorder-tolerant: when to take the tail's holes for lost (see [`Self::arm_tail_check`]).
    tail_deadline_ns: Option<u64>,
}

/// A reorder-tolerant requester with nothing new to send waits this fraction of its
/// retransmission timeout before taking holes behind its last acknowledged packet for lost.
pub const TAIL_LOSS_DELAY_DIVISOR: u64 = 8;

/// `bits >> n`, zero when `n` is 128 or more.
fn shift_down(bits: u128, n: u32) -> u128 {
    bits.checked_shr(n).unwrap_or(0)
}

/// The low `n` bits set.
fn low_bits(n: u32) -> u128 {
    if n >= 128 { u128::MAX } else { (1u128 << n) - 1 }
}

impl Requester {
    pub fn new(config: RequesterConfig) -> Self {
        assert!(config.window_packets > 0, "a window of 0 packets never sends");
        assert!(config.window_packets < Psn::WINDOW, "the window must stay within half the PSN space");
        assert!(
            config.transport == Transport::GoBackN || config.window_packets <= SACK_BITS,
            "a reorder-tolerant window must fit the {SACK_BITS}-PSN SACK bitmap"
        );
        let psn = config.first_psn;
        Requester {
            config,
            pacer: config.pacer.map(Pacer::new),
            messages: VecDeque::new(),
            cursor: 0,
            oldest_unacked: psn,
            next_psn: psn,
            sent_end: psn,
            posted_end: psn,
            retransmit_deadline_ns: None,
            timeouts_in_a_row: 0,
            failure: None,
            counters: RequesterCounters::default(),
            sacked: 0,
            lost: 0,
            resent: 0,
            resent_horizon: [Psn::new(0); SACK_BITS as usize],
            tail_deadline_ns: None,
        }
    }

    pub fn config(&self) -> &RequesterConfig {
        &self.config
    }

    pub fn counters(&self) -> &RequesterCounters {
        &self.counters
    }

    pub fn failure(&self) -> Option<Failure> {
        self.failure
    }

    /// Messages posted and not yet completed.
    pub fn outstanding_messages(&self) -> usize {
        self.messages.len()
    }

    /// Packets sent (at least once) and not yet acknowledged.
    pub fn unacked_packets(&self) -> u32 {
        self.oldest_unacked.distance_to(self.sent_end)
    }

    pub fn next_psn(&self) -> Psn {
        self.next_psn
    }

    pub fn oldest_unacked(&self) -> Psn {
        self.oldest_unacked
    }

    /// Queues an RDMA WRITE of `len` bytes to the configured remote address; its completion
    /// will carry `msg_id`.
    pub fn post_write(&mut self, msg_id: u64, len: u32) -> Result<(), PostError> {
        self.post_write_at(msg_id, len, self.config.remote_addr)
    }

    /// [`Self::post_write`] to `remote_addr`.
    pub fn post_write_at(&mut self, msg_id: u64, len: u32, remote_addr: u64) -> Result<(), PostError> {
        if let Some(failure) = self.failure {
            return Err(PostError::Failed(failure));
        }
        let packets = segment::packet_count(len, self.config.mtu);
        let outstanding = self.oldest_unacked.distance_to(self.posted_end) as u64 + packets as u64;
        if outstanding >= Psn::WINDOW as u64 {
            return Err(PostError::PsnSpaceExhausted { outstanding_packets: outstanding });
        }
        self.messages.push_back(OutboundMessage { msg_id, len, remote_addr, first_psn: self.posted_end, packets });
        self.posted_end += packets;
        Ok(())
    }

    /// Changes the pacing rate from `now_ns` on (the congestion-control hook). An unpaced
    /// requester starts pacing, with a burst of one full packet.
    pub fn set_rate(&mut self, now_ns: u64, rate_bps: u64) {
        match &mut self.pacer {
            Some(pacer) => pacer.set_rate(now_ns, rate_bps),
            None => {
                let burst = (self.config.mtu.bytes() + 64 + self.config.wire_overhead_bytes) as u64;
                let mut pacer = Pacer::new(PacerConfig { rate_bps, burst_bytes: burst });
                pacer.set_rate(now_ns, rate_bps);
                self.pacer = Some(pacer);
            }
        }
    }

    pub fn rate_bps(&self) -> Option<u64> {
        self.pacer.as_ref().map(Pacer::rate_bps)
    }

    fn window_open(&self) -> bool {
        match self.config.transport {
            Transport::GoBackN => {
                self.next_psn != self.posted_end
                    && self.oldest_unacked.distance_to(self.next_psn) < self.config.window_packets
            }
            Transport::ReorderTolerant => {
                self.lost != 0
                    || (self.sent_end != self.posted_end
                        && self.oldest_unacked.distance_to(self.sent_end) < self.config.window_packets)
            }
        }
    }

    /// The PSN the next packet carries: go-back-N's `next_psn`; reorder-tolerant, the oldest
    /// PSN taken for lost, else the next new one.
    fn psn_to_send(&self) -> Psn {
        match self.config.transport {
            Transport::GoBackN => self.next_psn,
            Transport::ReorderTolerant if self.lost != 0 => self.oldest_unacked + self.lost.trailing_zeros(),
            Transport::ReorderTolerant => self.sent_end,
        }
    }

    /// The WRITE packet for `seg` of `message`. Reorder-tolerant MIDDLE and LAST packets carry a
    /// RETH with their own address (see [`super::transport`]).
    fn write_body(&self, message: &OutboundMessage, seg: Segment) -> Body<'static> {
        let payload = &ZEROS[..seg.len as usize];
        let at = |offset: u32| RethRepr {
            virtual_addr: message.remote_addr.wrapping_add(u64::from(offset)),
            rkey: self.config.rkey,
            dma_len: message.len,
        };
        let reth = at(0);
        let every = self.config.transport == Transport::ReorderTolerant;
        match seg.position {
            Position::First => Body::WriteFirst { reth, payload },
            Position::Middle if every => Body::WriteMiddleAt { reth: at(seg.offset), payload },
            Position::Middle => Body::WriteMiddle { payload },
            Position::Last if every => Body::WriteLastAt { reth: at(seg.offset), payload },
            Position::Last => Body::WriteLast { payload },
            Position::Only => Body::WriteOnly { reth, payload },
        }
    }

    /// The next packet to send at `now_ns` (new data or a retransmission), or `None` if the
    /// window, the pacer or an empty queue holds it back. Also runs the retransmission timer.
    pub fn poll_transmit(&mut self, now_ns: u64) -> Option<Vec<u8>> {
        let repr = self.next_packet(now_ns)?;
        Some(self.config.connection.finish(&repr))
    }

    /// [`Self::poll_transmit`] written into `buf`: the same bytes, without an allocation per
    /// packet (see [`super::buf`]).
    pub fn poll_transmit_into(&mut self, now_ns: u64, buf: &mut PacketBuf) -> Option<Bytes> {
        let repr = self.next_packet(now_ns)?;
        Some(self.config.connection.finish_into(&repr, buf))
    }

    /// [`Self::poll_transmit`] without the bytes: the packet as a [`RocePacketRepr`] whose
    /// payload borrows a static buffer of zeros, and no ICRC. For a simulator that carries
    /// lengths rather than bytes; the state changes are those of every other way of sending.
    pub fn poll_transmit_repr(&mut self, now_ns: u64) -> Option<RocePacketRepr<'static>> {
        self.next_packet(now_ns)
    }

    /// Up to `budget` packets for `now_ns` (for batched sends such as `sendmmsg`).
    pub fn poll_transmit_many(&mut self, now_ns: u64, budget: usize) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| self.poll_transmit(now_ns)).take(budget).collect()
    }

    /// The packet [`Self::poll_transmit`] sends, its state changes made (pacer, PSNs, counters,
    /// timer): every way of sending goes through here.
    fn next_packet(&mut self, now_ns: u64) -> Option<RocePacketRepr<'static>> {
        self.run_timer(now_ns);
        if self.failure.is_some() || !self.window_open() {
            return None;
        }
        if let Some(pacer) = &mut self.pacer
            && !pacer.is_ready(now_ns)
        {
            return None;
        }
        let psn = self.psn_to_send();
        let message = *self.locate(psn);
        let seg = segment::segment(message.len, self.config.mtu, message.first_psn, message.first_psn.distance_to(psn));
        // Ask for an ACK when the window fills too, or a responder that coalesces more packets
        // than the window holds would leave us waiting for the timer.
        let fills_window = self.oldest_unacked.distance_to(psn + 1) >= self.config.window_packets;
        let body = self.write_body(&message, seg);
        let repr = RocePacketRepr { bth: self.config.connection.bth(psn, seg.ack_req || fills_window), body };

        if let Some(pacer) = &mut self.pacer {
            pacer.consume(now_ns, (repr.buffer_len() + self.config.wire_overhead_bytes as usize) as u64);
        }
        if psn.is_before(self.sent_end) {
            self.counters.packets_retransmitted += 1;
            let bit = 1u128 << self.oldest_unacked.distance_to(psn).min(127);
            self.lost &= !bit;
            self.resent |= bit;
            self.resent_horizon[(psn.value() % SACK_BITS) as usize] = self.sent_end;
        } else {
            self.sent_end = psn + 1;
        }
        self.counters.packets_sent += 1;
        self.counters.bytes_sent += seg.len as u64;
        self.next_psn = match self.config.transport {
            Transport::GoBackN => psn + 1,
            Transport::ReorderTolerant => self.sent_end,
        };
        if self.retransmit_deadline_ns.is_none() {
            self.retransmit_deadline_ns = Some(now_ns + self.config.retransmit_timeout_ns);
        }
        Some(repr)
    }

    /// When to call [`Self::poll_transmit`] next without new input: `now_ns` if a packet can go
    /// now, the pacer's or the timer's time otherwise; `None` if only an ACK or a post can help.
    pub fn poll_timeout(&self, now_ns: u64) -> Option<u64> {
        if self.failure.is_some() {
            return None;
        }
        let send_at = self.window_open().then(|| self.pacer.as_ref().map_or(now_ns, |p| p.ready_at().max(now_ns)));
        [send_at, self.retransmit_deadline_ns, self.tail_deadline_ns].into_iter().flatten().min()
    }

    /// The posted message holding `psn` (which must be in `oldest_unacked..posted_end`).
    fn locate(&mut self, psn: Psn) -> &OutboundMessage {
        let hint_holds = self.messages.get(self.cursor).is_some_and(|m| m.contains(psn));
        if !hint_holds {
            self.cursor = if self.messages.get(self.cursor + 1).is_some_and(|m| m.contains(psn)) {
                self.cursor + 1
            } else {
                self.messages.iter().position(|m| m.contains(psn)).expect("PSN inside a posted message")
            };
        }
        &self.messages[self.cursor]
    }

    fn run_timer(&mut self, now_ns: u64) {
        if let Some(tail) = self.tail_deadline_ns
            && now_ns >= tail
        {
            self.tail_deadline_ns = None;
            // Only holes behind the highest PSN acknowledged: anything sent since (more was
            // posted meanwhile) is still in flight.
            let behind_top = low_bits(u128::BITS - self.sacked.leading_zeros()) >> 1;
            self.lost |= !self.sacked & !self.resent & behind_top;
        }
        let Some(deadline) = self.retransmit_deadline_ns else { return };
        if now_ns < deadline || self.failure.is_some() {
            return;
        }
        if self.oldest_unacked == self.sent_end {
            self.retransmit_deadline_ns = None;
            return;
        }
        self.counters.timeouts += 1;
        self.timeouts_in_a_row += 1;
        if self.timeouts_in_a_row > self.config.retry_limit {
            self.fail(Failure::RetryLimitExceeded);
            return;
        }
        match self.config.transport {
            Transport::GoBackN => self.next_psn = self.oldest_unacked,
            Transport::ReorderTolerant => {
                // Everything not selectively acknowledged goes again, once.
                let sent = low_bits(self.oldest_unacked.distance_to(self.sent_end));
                self.resent = 0;
                self.lost = !self.sacked & sent;
            }
        }
        self.retransmit_deadline_ns = Some(now_ns + self.config.retransmit_timeout_ns);
    }

    fn fail(&mut self, failure: Failure) {
        self.failure = Some(failure);
        self.retransmit_deadline_ns = None;
    }

    /// Handles an ACK or NAK whose BTH carried `psn`; returns the messages it completes.
    pub fn on_ack(&mut self, aeth: AethRepr, psn: Psn, now_ns: u64) -> Vec<Completion> {
        if self.failure.is_some() {
            return Vec::new();
        }
        let sent = self.oldest_unacked.distance_to(self.sent_end);
        match aeth.syndrome {
            Syndrome::Ack { .. } => {
                self.counters.acks_received += 1;
                // Cumulative: everything up to and including `psn`.
                let acked = self.oldest_unacked.distance_to(psn + 1);
                if acked == 0 || acked > sent {
                    self.counters.duplicate_acks += 1;
                    return Vec::new();
                }
                self.advance(psn + 1, now_ns)
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                self.counters.naks_received += 1;
                // Everything before `psn` arrived; go back to `psn` itself.
                if self.oldest_unacked.distance_to(psn) >= sent {
                    self.counters.duplicate_acks += 1;
                    return Vec::new();
                }
                let completed = self.advance(psn, now_ns);
                match self.config.transport {
                    Transport::GoBackN => self.next_psn = psn,
                    Transport::ReorderTolerant => self.lost |= 1 & !self.resent,
                }
                self.retransmit_deadline_ns = Some(now_ns + self.config.retransmit_timeout_ns);
                completed
            }
            Syndrome::Nak(code) => {
                self.counters.naks_received += 1;
                self.fail(Failure::Nak(code));
                Vec::new()
            }
            Syndrome::RnrNak { .. } => {
                self.counters.naks_received += 1;
                self.fail(Failure::RnrNak);
                Vec::new()
            }
        }
    }

    /// Everything before `new_oldest` is acknowledged: complete those messages.
    fn advance(&mut self, new_oldest: Psn, now_ns: u64) -> Vec<Completion> {
        let acked = self.oldest_unacked.distance_to(new_oldest);
        let mut completed = Vec::new();
        while let Some(m) = self.messages.front()
            && self.oldest_unacked.distance_to(m.end_psn()) <= acked
        {
            completed.push(Completion { msg_id: m.msg_id, len: m.len, completed_ns: now_ns });
            self.messages.pop_front();
            self.cursor = self.cursor.saturating_sub(1);
        }
        self.counters.messages_completed += completed.len() as u64;
        if acked > 0 {
            self.timeouts_in_a_row = 0;
            self.sacked = shift_down(self.sacked, acked);
            self.lost = shift_down(self.lost, acked);
            self.resent = shift_down(self.resent, acked);
        }
        if self.next_psn.is_before(new_oldest) {
            self.next_psn = new_oldest;
        }
        self.oldest_unacked = new_oldest;
        self.retransmit_deadline_ns =
            (new_oldest != self.sent_end).then_some(now_ns + self.config.retransmit_timeout_ns);
        completed
    }

    /// Handles a SACK whose BTH carried the cumulative acknowledgement `psn` (to a go-back-N
    /// requester, an ACK like any other); returns the messages it completes.
    pub fn on_sack(&mut self, aeth: AethRepr, psn: Psn, received: u128, now_ns: u64) -> Vec<Completion> {
        let selective = matches!(aeth.syndrome, Syndrome::Ack { .. })
            && self.config.transport == Transport::ReorderTolerant
            && self.failure.is_none();
        if !selective {
            return self.on_ack(aeth, psn, now_ns);
        }
        self.counters.acks_received += 1;
        let acked = self.oldest_unacked.distance_to(psn + 1);
        if acked > self.oldest_unacked.distance_to(self.sent_end) {
            self.counters.duplicate_acks += 1;
            return Vec::new();
        }
        let completed = if acked > 0 { self.advance(psn + 1, now_ns) } else { Vec::new() };
        // Bit `i` of the bitmap is PSN `psn + 1 + i`: now `oldest_unacked + i`.
        let received = received & low_bits(self.oldest_unacked.distance_to(self.sent_end));
        let news = received & !self.sacked;
        if news != 0 {
            self.timeouts_in_a_row = 0;
        } else if acked == 0 {
            self.counters.duplicate_acks += 1;
        }
        self.sacked |= received;
        self.lost &= !self.sacked;
        self.mark_lost();
        self.arm_tail_check(now_ns);
        completed
    }

    /// Early retransmit for the tail: with nothing new left to send, a hole behind the highest
    /// PSN sent may never see the threshold of later PSNs acknowledged. Once the highest PSN
    /// has been, holes still neither lost nor resent after a reorder delay (a fraction of the
    /// timeout) are taken for lost, instead of waiting for the whole timeout.
    fn arm_tail_check(&mut self, now_ns: u64) {
        let sent = self.oldest_unacked.distance_to(self.sent_end);
        let waiting = !self.sacked & !self.resent & !self.lost & low_bits(sent);
        let top_acked = sent > 0 && self.sacked & (1u128 << (sent - 1).min(127)) != 0;
        if self.sent_end == self.posted_end && top_acked && waiting != 0 && self.tail_deadline_ns.is_none() {
            self.tail_deadline_ns = Some(now_ns + self.config.retransmit_timeout_ns / TAIL_LOSS_DELAY_DIVISOR);
        }
    }

    /// Takes for lost every PSN with at least the threshold of later PSNs selectively
    /// acknowledged, unless it was resent since it was last taken for lost; and every resent PSN
    /// still missing with the threshold of PSNs first sent after its resend acknowledged (the
    /// resend was lost too: without this only the timer would find out).
    fn mark_lost(&mut self) {
        let threshold = self.config.loss_threshold_packets;
        let mut resent = self.resent & !self.sacked;
        while resent != 0 {
            let i = resent.trailing_zeros();
            resent &= resent - 1;
            let horizon = self.resent_horizon[((self.oldest_unacked + i).value() % SACK_BITS) as usize];
            let from = self.oldest_unacked.offset_to(horizon).max(0) as u32;
            if shift_down(self.sacked, from).count_ones() >= threshold {
                self.resent &= !(1u128 << i);
            }
        }
        let sent = self.oldest_unacked.distance_to(self.sent_end).min(SACK_BITS);
        for i in 0..sent {
            let later_sacked = shift_down(self.sacked, i + 1).count_ones();
            if later_sacked < self.config.loss_threshold_packets {
                break; // fewer still above every later PSN
            }
            let bit = 1u128 << i;
            if (self.sacked | self.resent) & bit == 0 {
                self.lost |= bit;
            }
        }
    }

    /// Handles a UDP payload from the peer (ICRC already checked): ACKs and NAKs for this QP go to
    /// [`Self::on_ack`], SACKs to [`Self::on_sack`], CNPs are counted; anything else is ignored.
    pub fn on_packet(&mut self, udp_payload: &[u8], now_ns: u64) -> Result<Vec<Completion>, WireError> {
        let packet = RocePacketRepr::parse(udp_payload)?;
        Ok(self.on_repr(&packet, now_ns))
    }

    /// [`Self::on_packet`] for a packet already parsed (or never serialized: a simulator's).
    pub fn on_repr(&mut self, packet: &RocePacketRepr<'_>, now_ns: u64) -> Vec<Completion> {
        if packet.bth.dest_qp != self.config.connection.local_qp {
            self.counters.ignored_packets += 1;
            return Vec::new();
        }
        match packet.body {
            Body::Ack(aeth) => self.on_ack(aeth, packet.bth.psn, now_ns),
            Body::Sack { aeth, received } => self.on_sack(aeth, packet.bth.psn, received, now_ns),
            Body::Cnp => {
                self.counters.cnps_received += 1;
                Vec::new()
            }
            _ => {
                self.counters.ignored_packets += 1;
                Vec::new()
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Responder

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponderConfig {
    pub connection: Connection,
    /// The PSN the requester starts at.
    pub first_psn: Psn,
    /// Acknowledge every `ack_every` accepted packets, and always on AckReq or a message's end.
    pub ack_every: u32,
    /// Must be the requester's.
    pub transport: Transport,
}

impl ResponderConfig {
    /// Defaults: PSN 0, an ACK every 4 packets, go-back-N.
    pub fn new(connection: Connection) -> Self {
        ResponderConfig { connection, first_psn: Psn::new(0), ack_every: 4, transport: Transport::GoBackN }
    }
}

/// An RDMA WRITE the responder has received in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceivedWrite {
    pub remote_addr: u64,
    pub rkey: u32,
    /// Bytes received (the RETH's length, unless `length_mismatches` counted it).
    pub len: u64,
    pub completed_ns: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResponderCounters {
    /// Well-formed WRITE packets for this QP, whatever their PSN.
    pub packets_received: u64,
    /// Packets accepted in order: each PSN once.
    pub packets_accepted: u64,
    /// Payload bytes of accepted packets.
    pub bytes_received: u64,
    pub messages_completed: u64,
    /// Packets behind the expected PSN (re-acknowledged).
    pub duplicates: u64,
    /// Packets ahead of the expected PSN (dropped).
    pub out_of_order: u64,
    pub acks_sent: u64,
    pub naks_sent: u64,
    pub cnps_sent: u64,
    /// MIDDLE or LAST without a FIRST, or FIRST or ONLY inside a message (NAKed).
    pub invalid_requests: u64,
    /// Messages whose byte count differs from their RETH's DMA length.
    pub length_mismatches: u64,
    /// Bytes that did not parse, or opcodes this endpoint does not implement (SEND, READ).
    pub malformed: u64,
    /// Packets for another QP, or ACKs and CNPs, which a responder does not take.
    pub ignored_packets: u64,
    /// Packets that arrived after a higher PSN, their own PSN for the first time (see
    /// [`super::reorder`]: the network's reordering, whatever the transport made of it).
    pub reordered_packets: u64,
    /// The deepest of those: PSNs below the highest PSN seen.
    pub reorder_depth_max: u64,
    /// Packets whose PSN had arrived before (unlike `duplicates`, which counts the packets
    /// behind the expected PSN, a go-back-N responder's dropped early packets come back as these).
    pub duplicate_psns: u64,
    /// Reorder-tolerant: ACKs that carried a SACK bitmap (also counted in `acks_sent`).
    pub sacks_sent: u64,
    /// Reorder-tolerant: packets too far ahead for the SACK bitmap (dropped).
    pub beyond_window: u64,
}

#[derive(Clone, Copy, Debug)]
struct InboundMessage {
    reth: RethRepr,
    received: u64,
}

/// A reorder-tolerant responder's record of a packet placed ahead of the expected PSN: what the
/// in-order accounting needs when the gap before it fills.
#[derive(Clone, Copy, Debug)]
struct Placed {
    position: Position,
    len: u32,
    reth: RethRepr,
}

/// Bytes a responder writes WRITE payloads into, for tests that check every byte landed where it
/// belongs (the endpoint itself sends zeros and keeps no memory).
#[derive(Clone, Debug)]
struct Memory {
    base: u64,
    bytes: Vec<u8>,
}

/// The receiving side of one RC QP.
#[derive(Clone, Debug)]
pub struct Responder {
    config: ResponderConfig,
    expected_psn: Psn,
    /// Messages completed, mod 2^24, as every AETH reports.
    msn: u32,
    packets_since_ack: u32,
    /// A sequence-error NAK went out for the current gap: stay quiet until it is filled.
    gap_nakked: bool,
    inbound: Option<InboundMessage>,
    completions: VecDeque<ReceivedWrite>,
    counters: ResponderCounters,
    /// Reorder-tolerant only: entry `i` for PSN `expected_psn + i` (entry 0 is always a gap:
    /// the expected PSN is consumed on arrival), at most [`SACK_BITS`] long.
    ahead: VecDeque<Option<Placed>>,
    meter: ReorderMeter,
    memory: Option<Memory>,
}

impl Responder {
    pub fn new(config: ResponderConfig) -> Self {
        assert!(config.ack_every > 0, "ack_every counts packets per ACK: at least 1");
        Responder {
            config,
            expected_psn: config.first_psn,
            msn: 0,
            packets_since_ack: 0,
            gap_nakked: false,
            inbound: None,
            completions: VecDeque::new(),
            counters: ResponderCounters::default(),
            ahead: VecDeque::new(),
            meter: ReorderMeter::default(),
            memory: None,
        }
    }

    /// The responder writing payloads into `len` bytes at address `base` (bytes outside are
    /// not written): see [`Self::memory`].
    pub fn with_memory(mut self, base: u64, len: usize) -> Self {
        self.memory = Some(Memory { base, bytes: vec![0; len] });
        self
    }

    /// What [`Self::with_memory`]'s bytes hold now.
    pub fn memory(&self) -> Option<&[u8]> {
        self.memory.as_ref().map(|m| &m.bytes[..])
    }

    fn place(&mut self, addr: u64, payload: &[u8]) {
        let Some(m) = &mut self.memory else { return };
        for (i, &b) in payload.iter().enumerate() {
            let at = addr.wrapping_add(i as u64).wrapping_sub(m.base);
            if let Some(slot) = usize::try_from(at).ok().and_then(|at| m.bytes.get_mut(at)) {
                *slot = b;
            }
        }
    }

    pub fn config(&self) -> &ResponderConfig {
        &self.config
    }

    pub fn counters(&self) -> &ResponderCounters {
        &self.counters
    }

    pub fn expected_psn(&self) -> Psn {
        self.expected_psn
    }

    /// The oldest WRITE received in full and not yet taken (they queue until taken).
    pub fn poll_completion(&mut self) -> Option<ReceivedWrite> {
        self.completions.pop_front()
    }

    /// A congestion notification for the requester (to send when a packet arrives ECN-marked).
    pub fn congestion_notification(&mut self) -> Vec<u8> {
        self.counters.cnps_sent += 1;
        let c = &self.config.connection;
        c.finish(&RocePacketRepr::cnp(c.remote_qp, c.pkey))
    }

    /// [`Self::congestion_notification`] written into `buf`.
    pub fn congestion_notification_into(&mut self, buf: &mut PacketBuf) -> Bytes {
        self.counters.cnps_sent += 1;
        let c = &self.config.connection;
        c.finish_into(&RocePacketRepr::cnp(c.remote_qp, c.pkey), buf)
    }

    /// [`Self::congestion_notification`] without the bytes (see [`Requester::poll_transmit_repr`]).
    pub fn congestion_notification_repr(&mut self) -> RocePacketRepr<'static> {
        self.counters.cnps_sent += 1;
        let c = &self.config.connection;
        RocePacketRepr::cnp(c.remote_qp, c.pkey)
    }

    /// The ACK or NAK for `psn`, counted.
    fn response(&mut self, psn: Psn, syndrome: Syndrome) -> RocePacketRepr<'static> {
        match syndrome {
            Syndrome::Ack { .. } => self.counters.acks_sent += 1,
            _ => self.counters.naks_sent += 1,
        }
        let c = &self.config.connection;
        RocePacketRepr { bth: c.bth(psn, false), body: Body::Ack(AethRepr { syndrome, msn: self.msn }) }
    }

    /// Handles a UDP payload from the requester (ICRC already checked); returns the ACKs and
    /// NAKs to send back.
    pub fn on_packet(&mut self, udp_payload: &[u8], now_ns: u64) -> Vec<Vec<u8>> {
        let response = self.receive(udp_payload, now_ns);
        response.map(|r| self.config.connection.finish(&r)).into_iter().collect()
    }

    /// [`Self::on_packet`] with its response (there is at most one) written into `buf`.
    pub fn on_packet_into(&mut self, udp_payload: &[u8], now_ns: u64, buf: &mut PacketBuf) -> Option<Bytes> {
        let response = self.receive(udp_payload, now_ns)?;
        Some(self.config.connection.finish_into(&response, buf))
    }

    /// What [`Self::on_packet`] does, up to the bytes of its response.
    fn receive(&mut self, udp_payload: &[u8], now_ns: u64) -> Option<RocePacketRepr<'static>> {
        let Ok(packet) = RocePacketRepr::parse_with(udp_payload, self.config.transport.reth_on()) else {
            self.counters.malformed += 1;
            return None;
        };
        self.on_repr(&packet, now_ns)
    }

    /// What [`Self::on_packet`] does, for a packet already parsed (or never serialized: a
    /// simulator's): its response, if any, as a [`RocePacketRepr`] without bytes or ICRC.
    pub fn on_repr(&mut self, packet: &RocePacketRepr<'_>, now_ns: u64) -> Option<RocePacketRepr<'static>> {
        let (position, payload, reth) = match packet.body {
            Body::WriteFirst { reth, payload } => (Position::First, payload, Some(reth)),
            Body::WriteMiddle { payload } => (Position::Middle, payload, None),
            Body::WriteLast { payload } => (Position::Last, payload, None),
            Body::WriteOnly { reth, payload } => (Position::Only, payload, Some(reth)),
            Body::WriteMiddleAt { reth, payload } => (Position::Middle, payload, Some(reth)),
            Body::WriteLastAt { reth, payload } => (Position::Last, payload, Some(reth)),
            Body::Ack(_) | Body::Sack { .. } | Body::Cnp => {
                self.counters.ignored_packets += 1;
                return None;
            }
        };
        if packet.bth.dest_qp != self.config.connection.local_qp {
            self.counters.ignored_packets += 1;
            return None;
        }
        self.counters.packets_received += 1;
        let psn = packet.bth.psn;
        let accepted_before = self.expected_psn.offset_to(psn) < 0;
        self.meter.observe(psn, accepted_before);
        let seen = self.meter.counters();
        self.counters.reordered_packets = seen.reordered_packets;
        self.counters.reorder_depth_max = seen.reorder_depth_max;
        self.counters.duplicate_psns = seen.duplicate_psns;
        let arrival = WritePacket { psn, ack_req: packet.bth.ack_req, position, payload, reth };
        match self.config.transport {
            Transport::GoBackN => self.receive_in_order(arrival, now_ns),
            Transport::ReorderTolerant => self.receive_out_of_order(arrival, now_ns),
        }
    }

    /// Go-back-N: the expected PSN is accepted, an early one NAKed (once per gap) and dropped.
    fn receive_in_order(&mut self, arrival: WritePacket<'_>, now_ns: u64) -> Option<RocePacketRepr<'static>> {
        let WritePacket { psn, ack_req, position, payload, reth } = arrival;
        let ahead = self.expected_psn.offset_to(psn);
        if ahead < 0 {
            // Our ACK was lost or the requester went back too far: say again where we are.
            self.counters.duplicates += 1;
            return Some(self.response(self.expected_psn - 1, Syndrome::Ack { credit: CREDIT_UNLIMITED }));
        }
        if ahead > 0 {
            self.counters.out_of_order += 1;
            if self.gap_nakked {
                return None;
            }
            self.gap_nakked = true;
            return Some(self.response(self.expected_psn, Syndrome::Nak(NakCode::PsnSequenceError)));
        }
        if position.starts_message() != self.inbound.is_none() {
            self.counters.invalid_requests += 1;
            return Some(self.response(self.expected_psn, Syndrome::Nak(NakCode::InvalidRequest)));
        }

        self.expected_psn = psn + 1;
        self.gap_nakked = false;
        self.counters.packets_accepted += 1;
        self.counters.bytes_received += payload.len() as u64;
        self.packets_since_ack += 1;
        let addr = match (reth, &self.inbound) {
            (Some(reth), _) => reth.virtual_addr,
            (None, Some(m)) => m.reth.virtual_addr.wrapping_add(m.received),
            (None, None) => unreachable!("checked: inside a message"),
        };
        self.place(addr, payload);
        self.account(position, payload.len() as u32, reth, now_ns);
        if ack_req || position.ends_message() || self.packets_since_ack >= self.config.ack_every {
            self.packets_since_ack = 0;
            return Some(self.response(psn, Syndrome::Ack { credit: CREDIT_UNLIMITED }));
        }
        None
    }

    /// A packet taken in PSN order into its message (`reth` present on FIRST and ONLY); the
    /// message completes at its end. Returns whether one did. A packet that does not fit the
    /// message structure is counted as an invalid request and left out.
    fn account(&mut self, position: Position, len: u32, reth: Option<RethRepr>, now_ns: u64) -> bool {
        let message = match (position.starts_message(), reth, self.inbound.is_some()) {
            (true, Some(reth), inside) => {
                self.counters.invalid_requests += u64::from(inside);
                self.inbound.insert(InboundMessage { reth, received: 0 })
            }
            (false, _, true) => self.inbound.as_mut().expect("inside a message"),
            _ => {
                self.counters.invalid_requests += 1;
                return false;
            }
        };
        message.received += u64::from(len);
        if !position.ends_message() {
            return false;
        }
        let message = self.inbound.take().expect("inside a message");
        if message.received != message.reth.dma_len as u64 {
            self.counters.length_mismatches += 1;
        }
        self.completions.push_back(ReceivedWrite {
            remote_addr: message.reth.virtual_addr,
            rkey: message.reth.rkey,
            len: message.received,
            completed_ns: now_ns,
        });
        self.counters.messages_completed += 1;
        self.msn = (self.msn + 1) & Psn::MASK;
        true
    }

    /// Reorder-tolerant: any PSN in the bitmap's reach is placed where its RETH says and
    /// recorded; the in-order accounting (completions, MSN) follows the expected PSN as gaps
    /// fill. Early packets, duplicates and gap fills are answered at once (a SACK while
    /// anything is missing); in-order ones coalesce as under go-back-N.
    fn receive_out_of_order(&mut self, arrival: WritePacket<'_>, now_ns: u64) -> Option<RocePacketRepr<'static>> {
        let WritePacket { psn, ack_req, position, payload, reth } = arrival;
        let Some(reth) = reth else {
            // Without its address a packet cannot be placed out of order: the peer is not
            // running this transport.
            self.counters.invalid_requests += 1;
            return Some(self.response(self.expected_psn, Syndrome::Nak(NakCode::InvalidRequest)));
        };
        let ahead = self.expected_psn.offset_to(psn);
        if ahead < 0 {
            self.counters.duplicates += 1;
            return Some(self.selective_ack());
        }
        let ahead = ahead as u32;
        if ahead >= SACK_BITS {
            self.counters.beyond_window += 1;
            return Some(self.selective_ack());
        }
        let slot = ahead as usize;
        if self.ahead.len() <= slot {
            self.ahead.resize(slot + 1, None);
        }
        if self.ahead[slot].is_some() {
            self.counters.duplicates += 1;
            return Some(self.selective_ack());
        }
        self.place(reth.virtual_addr, payload);
        self.ahead[slot] = Some(Placed { position, len: payload.len() as u32, reth });
        self.counters.packets_accepted += 1;
        self.counters.bytes_received += payload.len() as u64;
        if ahead > 0 {
            self.counters.out_of_order += 1;
            return Some(self.selective_ack());
        }
        let mut taken = 0;
        let mut completed = false;
        while let Some(Some(placed)) = self.ahead.front().copied() {
            self.ahead.pop_front();
            self.expected_psn += 1;
            taken += 1;
            completed |= self.account(placed.position, placed.len, Some(placed.reth), now_ns);
        }
        self.packets_since_ack += 1;
        let due = ack_req || completed || taken > 1 || !self.ahead.is_empty();
        if due || self.packets_since_ack >= self.config.ack_every {
            self.packets_since_ack = 0;
            return Some(self.selective_ack());
        }
        None
    }

    /// The cumulative ACK of everything before the expected PSN, with the SACK bitmap of what
    /// arrived after it if anything did (a plain ACK otherwise).
    fn selective_ack(&mut self) -> RocePacketRepr<'static> {
        let cumulative = self.expected_psn - 1;
        let received =
            self.ahead.iter().enumerate().filter(|(_, p)| p.is_some()).fold(0u128, |bits, (i, _)| bits | 1 << i);
        if received == 0 {
            return self.response(cumulative, Syndrome::Ack { credit: CREDIT_UNLIMITED });
        }
        self.counters.acks_sent += 1;
        self.counters.sacks_sent += 1;
        let c = &self.config.connection;
        let aeth = AethRepr { syndrome: Syndrome::Ack { credit: CREDIT_UNLIMITED }, msn: self.msn };
        RocePacketRepr { bth: c.bth(cumulative, false), body: Body::Sack { aeth, received } }
    }
}

/// One WRITE packet as the responder takes it, whatever its layout.
#[derive(Clone, Copy, Debug)]
struct WritePacket<'a> {
    psn: Psn,
    ack_req: bool,
    position: Position,
    payload: &'a [u8],
    reth: Option<RethRepr>,
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::wire::opcode;

    const REQUESTER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
    const RESPONDER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 6);
    const PORT: u16 = 0xC011;
    const REQUESTER_QP: u32 = 0x11;
    const RESPONDER_QP: u32 = 0x12;

    fn requester_side() -> Connection {
        Connection {
            local_qp: REQUESTER_QP,
            remote_qp: RESPONDER_QP,
            pkey: DEFAULT_PKEY,
            ip: IpPair::V4 { src: REQUESTER_IP, dst: RESPONDER_IP },
            udp_src_port: PORT,
        }
    }

    fn responder_side() -> Connection {
        Connection {
            local_qp: RESPONDER_QP,
            remote_qp: REQUESTER_QP,
            pkey: DEFAULT_PKEY,
            ip: IpPair::V4 { src: RESPONDER_IP, dst: REQUESTER_IP },
            udp_src_port: PORT,
        }
    }

    /// Whether to lose the `n`th packet in one direction, given its bytes.
    type DropRule = Box<dyn FnMut(usize, &[u8]) -> bool>;

    /// A requester and a responder joined by two one-way links with a fixed delay; packets can be
    /// dropped by their index in each direction. Every packet's ICRC is checked on arrival.
    struct Pair {
        req: Requester,
        resp: Responder,
        now: u64,
        delay_ns: u64,
        to_responder: VecDeque<(u64, Vec<u8>)>,
        to_requester: VecDeque<(u64, Vec<u8>)>,
        data_packets: usize,
        responses: usize,
        drop_data: DropRule,
        drop_response: DropRule,
        completions: Vec<Completion>,
        /// (time, bytes on the wire) of each packet the requester sent.
        sent_log: Vec<(u64, usize)>,
        max_unacked: u32,
    }

    impl Pair {
        fn new(req: RequesterConfig, resp: ResponderConfig, delay_ns: u64) -> Self {
            Pair {
                req: Requester::new(req),
                resp: Responder::new(resp),
                now: 0,
                delay_ns,
                to_responder: VecDeque::new(),
                to_requester: VecDeque::new(),
                data_packets: 0,
                responses: 0,
                drop_data: Box::new(|_, _| false),
                drop_response: Box::new(|_, _| false),
                completions: Vec::new(),
                sent_log: Vec::new(),
                max_unacked: 0,
            }
        }

        /// Runs until nothing is left to happen or `until_ns` is reached.
        fn run(&mut self, until_ns: u64) {
            loop {
                while let Some(p) = self.req.poll_transmit(self.now) {
                    self.sent_log.push((self.now, p.len() + self.req.config().wire_overhead_bytes as usize));
                    self.max_unacked = self.max_unacked.max(self.req.unacked_packets());
                    let n = self.data_packets;
                    self.data_packets += 1;
                    if !(self.drop_data)(n, &p) {
                        self.to_responder.push_back((self.now + self.delay_ns, p));
                    }
                }
                while self.to_responder.front().is_some_and(|(t, _)| *t <= self.now) {
                    let (_, p) = self.to_responder.pop_front().unwrap();
                    assert!(self.resp.config().connection.verify_incoming(PORT, &p), "ICRC of a data packet");
                    for r in self.resp.on_packet(&p, self.now) {
                        let n = self.responses;
                        self.responses += 1;
                        if !(self.drop_response)(n, &r) {
                            self.to_requester.push_back((self.now + self.delay_ns, r));
                        }
                    }
                }
                let mut delivered = false;
                while self.to_requester.front().is_some_and(|(t, _)| *t <= self.now) {
                    let (_, r) = self.to_requester.pop_front().unwrap();
                    assert!(self.req.config().connection.verify_incoming(PORT, &r), "ICRC of a response");
                    self.completions.extend(self.req.on_packet(&r, self.now).unwrap());
                    delivered = true;
                }
                if delivered {
                    continue; // the window may have opened at this very instant
                }
                let next = [
                    self.req.poll_timeout(self.now),
                    self.to_responder.front().map(|(t, _)| *t),
                    self.to_requester.front().map(|(t, _)| *t),
                ]
                .into_iter()
                .flatten()
                .min();
                match next {
                    Some(t) if t < until_ns => {
                        assert!(t > self.now, "nothing happened at {} yet {t} is next", self.now);
                        self.now = t;
                    }
                    _ => return,
                }
            }
        }

        fn received(&mut self) -> Vec<ReceivedWrite> {
            std::iter::from_fn(|| self.resp.poll_completion()).collect()
        }
    }

    fn psn_of(p: &[u8]) -> Psn {
        Psn::new(u32::from_be_bytes([0, p[9], p[10], p[11]]))
    }

    /// Posts `sizes` and checks the transfer ends with every message delivered once, whole.
    fn assert_delivered_exactly_once(pair: &mut Pair, sizes: &[u32]) {
        let ids: Vec<u64> = pair.completions.iter().map(|c| c.msg_id).collect();
        assert_eq!(ids, (0..sizes.len() as u64).collect::<Vec<_>>(), "every message completes once, in order");
        let received = pair.received();
        let lens: Vec<u64> = received.iter().map(|w| w.len).collect();
        assert_eq!(lens, sizes.iter().map(|&s| s as u64).collect::<Vec<_>>());
        let total: u64 = sizes.iter().map(|&s| s as u64).sum();
        let c = pair.resp.counters();
        assert_eq!(c.bytes_received, total, "no byte accepted twice");
        assert_eq!(c.messages_completed, sizes.len() as u64);
        assert_eq!(c.length_mismatches, 0);
        assert_eq!(pair.req.outstanding_messages(), 0);
        assert_eq!(pair.req.failure(), None);
    }

    fn post_all(pair: &mut Pair, sizes: &[u32]) {
        for (id, &len) in sizes.iter().enumerate() {
            pair.req.post_write(id as u64, len).unwrap();
        }
    }

    #[test]
    fn one_write_only_is_acknowledged_and_completes() {
        let mut pair = Pair::new(RequesterConfig::new(requester_side()), ResponderConfig::new(responder_side()), 5_000);
        pair.req.post_write(7, 100).unwrap();
        pair.run(u64::MAX);
        assert_eq!(pair.completions, [Completion { msg_id: 7, len: 100, completed_ns: 10_000 }]);
        assert_eq!(pair.received()[0], ReceivedWrite { remote_addr: 0, rkey: 0, len: 100, completed_ns: 5_000 });
        assert_eq!((pair.req.counters().packets_sent, pair.resp.counters().acks_sent), (1, 1));
        assert_eq!(pair.req.poll_timeout(pair.now), None, "idle: nothing to send, no timer");
    }

    #[test]
    fn packets_carry_reth_opcodes_and_ack_req_as_segmented() {
        let mut cfg = RequesterConfig::new(requester_side());
        cfg.remote_addr = 0x1000;
        cfg.rkey = 0x42;
        let mut req = Requester::new(cfg);
        req.post_write(1, 2500).unwrap();
        req.post_write(2, 10).unwrap();
        let packets: Vec<_> = std::iter::from_fn(|| req.poll_transmit(0)).collect();
        let reprs: Vec<_> = packets.iter().map(|p| RocePacketRepr::parse(p).unwrap()).collect();
        let ops: Vec<u8> = reprs.iter().map(|r| r.body.opcode()).collect();
        assert_eq!(
            ops,
            [opcode::RC_WRITE_FIRST, opcode::RC_WRITE_MIDDLE, opcode::RC_WRITE_LAST, opcode::RC_WRITE_ONLY]
        );
        let acks: Vec<bool> = reprs.iter().map(|r| r.bth.ack_req).collect();
        assert_eq!(acks, [false, false, true, true]);
        let lens: Vec<usize> = reprs.iter().map(|r| r.body.payload().len()).collect();
        assert_eq!(lens, [1024, 1024, 452, 10]);
        assert_eq!(reprs[0].body.reth(), Some(RethRepr { virtual_addr: 0x1000, rkey: 0x42, dma_len: 2500 }));
        assert_eq!(reprs[3].body.reth().unwrap().dma_len, 10);
        assert!(reprs.iter().all(|r| r.bth.dest_qp == RESPONDER_QP && r.bth.pkey == DEFAULT_PKEY));
        let psns: Vec<u32> = reprs.iter().map(|r| r.bth.psn.value()).collect();
        assert_eq!(psns, [0, 1, 2, 3]);
    }

    #[test]
    fn ack_coalescing_every_4_over_16_packets() {
        let mut resp_cfg = ResponderConfig::new(responder_side());
        resp_cfg.ack_every = 4;
        let mut pair = Pair::new(RequesterConfig::new(requester_side()), resp_cfg, 1_000);
        post_all(&mut pair, &[16 * 1024]);
        pair.run(u64::MAX);
        assert_eq!(pair.resp.counters().packets_accepted, 16);
        assert_eq!(pair.resp.counters().acks_sent, 4, "ACKs after packets 4, 8, 12 and 16");
        assert_eq!(pair.req.counters().acks_received, 4);
        assert_delivered_exactly_once(&mut pair, &[16 * 1024]);

        // Coalescing never delays the end of a message: 8 one-packet messages, 8 ACKs.
        let mut pair = Pair::new(RequesterConfig::new(requester_side()), resp_cfg, 1_000);
        post_all(&mut pair, &[100; 8]);
        pair.run(u64::MAX);
        assert_eq!(pair.resp.counters().acks_sent, 8);
    }

    #[test]
    fn psn_wraps_through_2_pow_24_in_a_full_transfer() {
        let first = Psn::new(Psn::MODULUS - 20);
        let mut req_cfg = RequesterConfig::new(requester_side());
        req_cfg.first_psn = first;
        req_cfg.window_packets = 16;
        let mut resp_cfg = ResponderConfig::new(responder_side());
        resp_cfg.first_psn = first;
        let mut pair = Pair::new(req_cfg, resp_cfg, 2_000);
        // Drop the first try of one packet on each side of the wrap, more than a window apart so
        // the second loss is a gap of its own: go-back-N across the wrap too.
        let mut dropped = std::collections::HashSet::new();
        pair.drop_data = Box::new(move |_, p| {
            let psn = psn_of(p).value();
            (psn == Psn::MASK - 1 || psn == 20) && dropped.insert(psn)
        });
        let sizes = [5000u32; 10]; // 5 packets each: 50 packets from 2^24 - 20
        post_all(&mut pair, &sizes);
        pair.run(u64::MAX);
        assert_delivered_exactly_once(&mut pair, &sizes);
        assert_eq!(pair.resp.expected_psn(), Psn::new(30));
        assert_eq!(pair.req.next_psn(), Psn::new(30));
        assert!(pair.req.counters().packets_retransmitted > 0);
        assert_eq!(pair.resp.counters().naks_sent, 2);
    }

    #[test]
    fn payload_less_entry_points_follow_the_byte_ones_packet_for_packet() {
        let mut cfg = RequesterConfig::new(requester_side());
        cfg.window_packets = 8;
        let (mut a_req, mut b_req) = (Requester::new(cfg), Requester::new(cfg));
        let resp_cfg = ResponderConfig::new(responder_side());
        let (mut a_resp, mut b_resp) = (Responder::new(resp_cfg), Responder::new(resp_cfg));
        for (id, len) in [(0, 3000), (1, 1), (2, 9000), (3, 0)] {
            a_req.post_write(id, len).unwrap();
            b_req.post_write(id, len).unwrap();
        }
        let (mut sent, mut now) = (0, 0);
        while a_req.outstanding_messages() > 0 {
            assert!(sent < 100, "the transfer ends");
            let (a, b) = (a_req.poll_transmit(now), b_req.poll_transmit_repr(now));
            assert_eq!(a.as_deref().map(|p| RocePacketRepr::parse(p).unwrap()), b, "packet {sent}");
            let (Some(a), Some(b)) = (a, b) else {
                now = a_req.poll_timeout(now).expect("a timer runs");
                continue;
            };
            sent += 1;
            if sent == 5 {
                continue; // lost on both paths: go-back-N on both
            }
            let (ra, rb) = (a_resp.on_packet(&a, now), b_resp.on_repr(&b, now));
            let parsed: Vec<RocePacketRepr<'_>> = ra.iter().map(|p| RocePacketRepr::parse(p).unwrap()).collect();
            assert_eq!(parsed, rb.into_iter().collect::<Vec<_>>(), "response to packet {sent}");
            for (pa, pb) in ra.iter().zip(rb) {
                assert_eq!(a_req.on_packet(pa, now).unwrap(), b_req.on_repr(&pb, now));
            }
            now += 100;
        }
        assert_eq!(b_req.outstanding_messages(), 0);
        assert_eq!(a_req.counters(), b_req.counters());
        assert!(a_req.counters().packets_retransmitted > 0);
        assert_eq!(a_resp.counters(), b_resp.counters());
        let cnp = a_resp.congestion_notification();
        assert_eq!(RocePacketRepr::parse(&cnp).unwrap(), b_resp.congestion_notification_repr());
    }

    #[test]
    fn go_back_n_after_a_dropped_packet() {
        let mut req_cfg = RequesterConfig::new(requester_side());
        req_cfg.window_packets = 32;
        let mut pair = Pair::new(req_cfg, ResponderConfig::new(responder_side()), 10_000);
        pair.drop_data = Box::new(|n, _| n == 5);
        let sizes = [3000u32, 1024, 1, 0, 8192, 2049, 4096, 700];
        post_all(&mut pair, &sizes);
        pair.run(u64::MAX);
        assert_delivered_exactly_once(&mut pair, &sizes);
        let (rc, sc) = (pair.req.counters(), pair.resp.counters());
        assert!(rc.packets_retransmitted > 0);
        assert_eq!(rc.timeouts, 0, "the NAK, not the timer, recovered");
        assert_eq!(rc.naks_received, 1);
        assert_eq!(sc.naks_sent, 1, "one NAK per gap");
        assert!(sc.out_of_order > 0);
        assert_eq!(sc.packets_accepted, rc.packets_sent - rc.packets_retransmitted);
        assert_eq!(sc.packets_received, rc.packets_sent - 1, "all but the dropped one arrived");
    }

    #[test]
    fn timeout_recovers_when_the_last_ack_is_lost() {
        let mut req_cfg = RequesterConfig::new(requester_side());
        req_cfg.retransmit_timeout_ns = 200_000;
        let mut pair = Pair::new(req_cfg, ResponderConfig::new(responder_side()), 10_000);
        let sizes = [4096u32, 4096];
        post_all(&mut pair, &sizes);
        // ack_every 4 and AckReq at each message end: responses 0 and 1 are the messages' ACKs.
        pair.drop_response = Box::new(|n, _| n == 1);
        pair.run(u64::MAX);
        assert_delivered_exactly_once(&mut pair, &sizes);
        let (rc, sc) = (pair.req.counters(), pair.resp.counters());
        assert_eq!(rc.timeouts, 1);
        assert!(rc.packets_retransmitted >= 1);
        assert!(sc.duplicates >= 1, "the retransmission was a duplicate, re-acknowledged");
        assert_eq!(sc.naks_sent, 0);
        // Message 0's ACK (20 µs) re-armed the 200 µs timer: it fires at 220 µs, and the
        // re-ACK of the first retransmitted packet is back at 240 µs.
        assert_eq!(pair.completions[1].completed_ns, 240_000);
    }

    #[test]
    fn pacing_at_1_gbit_s_for_10_ms_sends_1_25_mb() {
        let mut req_cfg = RequesterConfig::new(requester_side());
        req_cfg.pacer = Some(PacerConfig { rate_bps: 1_000_000_000, burst_bytes: 4 * 1100 });
        let mut pair = Pair::new(req_cfg, ResponderConfig::new(responder_side()), 20_000);
        post_all(&mut pair, &[1 << 20; 4]); // 4 MiB: more than 10 ms can carry
        pair.run(10_000_000);
        let wire_bytes: usize = pair.sent_log.iter().filter(|(t, _)| *t < 10_000_000).map(|(_, b)| b).sum();
        let expected = 1_250_000.0;
        let error = (wire_bytes as f64 - expected).abs() / expected;
        assert!(error < 0.05, "{wire_bytes} bytes on the wire in 10 ms at 1 Gbit/s");
        // Evenly spaced, not in bursts: the gap after the first burst is one packet's time.
        let (t1, b1) = pair.sent_log[10];
        let (t2, _) = pair.sent_log[11];
        assert_eq!(t2 - t1, b1 as u64 * 8, "8 ns per byte at 1 Gbit/s");
        assert_eq!(pair.req.counters().packets_retransmitted, 0);
    }

    #[test]
    fn window_caps_packets_in_flight_and_fills_ask_for_acks() {
        let mut req_cfg = RequesterConfig::new(requester_side());
        req_cfg.window_packets = 4;
        let mut resp_cfg = ResponderConfig::new(responder_side());
        resp_cfg.ack_every = 64; // would never ACK mid-message without AckReq
        let mut pair = Pair::new(req_cfg, resp_cfg, 50_000);
        let sizes = [40 * 1024u32];
        post_all(&mut pair, &sizes);
        pair.run(u64::MAX);
        assert_delivered_exactly_once(&mut pair, &sizes);
        assert_eq!(pair.max_unacked, 4);
        assert_eq!(pair.req.counters().timeouts, 0);
        assert_eq!(pair.resp.counters().acks_sent, 10, "one per window of 4");
        // Each window takes one round trip.
        assert_eq!(pair.completions[0].completed_ns, 10 * 100_000);
    }

    #[test]
    fn a_silent_peer_exhausts_the_retries() {
        let mut req_cfg = RequesterConfig::new(requester_side());
        req_cfg.retry_limit = 3;
        let mut pair = Pair::new(req_cfg, ResponderConfig::new(responder_side()), 1_000);
        pair.drop_data = Box::new(|_, _| true);
        post_all(&mut pair, &[2048]);
        pair.run(u64::MAX);
        assert_eq!(pair.req.failure(), Some(Failure::RetryLimitExceeded));
        assert_eq!(pair.req.counters().timeouts, 4);
        assert_eq!(pair.req.counters().packets_sent, 2 * 4);
        assert_eq!(pair.now, 4_000_000, "four timeouts of 1 ms");
        assert_eq!(pair.req.poll_transmit(pair.now + 1), None);
        assert_eq!(pair.req.post_write(9, 1), Err(PostError::Failed(Failure::RetryLimitExceeded)));
    }

    fn ack(syndrome: Syndrome) -> AethRepr {
        AethRepr { syndrome, msn: 0 }
    }

    const OK: Syndrome = Syndrome::Ack { credit: CREDIT_UNLIMITED };

    #[test]
    fn requester_ignores_acks_for_nothing_new() {
        let mut req = Requester::new(RequesterConfig::new(requester_side()));
        req.post_write(1, 3 * 1024).unwrap();
        req.post_write(2, 1024).unwrap();
        for _ in 0..3 {
            req.poll_transmit(0).unwrap();
        }
        assert!(req.on_ack(ack(OK), Psn::new(5), 1).is_empty(), "beyond what was sent");
        assert!(req.on_ack(ack(OK), Psn::new(Psn::MASK), 1).is_empty(), "before anything was sent");
        assert_eq!(req.counters().duplicate_acks, 2);
        assert_eq!(req.on_ack(ack(OK), Psn::new(2), 1), [Completion { msg_id: 1, len: 3072, completed_ns: 1 }]);
        assert!(req.on_ack(ack(OK), Psn::new(2), 2).is_empty(), "repeated");
        assert_eq!(req.counters().duplicate_acks, 3);
        assert_eq!(req.unacked_packets(), 0);
        assert_eq!(req.poll_timeout(5), Some(5), "message 2 is ready to go");
    }

    #[test]
    fn requester_goes_back_to_the_nakked_psn() {
        let mut req = Requester::new(RequesterConfig::new(requester_side()));
        req.post_write(1, 1024).unwrap();
        req.post_write(2, 4 * 1024).unwrap();
        let sent: Vec<_> = std::iter::from_fn(|| req.poll_transmit(0)).collect();
        assert_eq!(sent.len(), 5);
        // Packet 2 went missing: PSNs 0 and 1 arrived, so message 1 completes.
        let done = req.on_ack(ack(Syndrome::Nak(NakCode::PsnSequenceError)), Psn::new(2), 10);
        assert_eq!(done, [Completion { msg_id: 1, len: 1024, completed_ns: 10 }]);
        assert_eq!((req.oldest_unacked(), req.next_psn()), (Psn::new(2), Psn::new(2)));
        let again: Vec<_> = std::iter::from_fn(|| req.poll_transmit(10)).collect();
        assert_eq!(again, sent[2..], "the same bytes again");
        assert_eq!(req.counters().packets_retransmitted, 3);
        // A fatal NAK stops the QP.
        req.on_ack(ack(Syndrome::Nak(NakCode::RemoteAccessError)), Psn::new(2), 20);
        assert_eq!(req.failure(), Some(Failure::Nak(NakCode::RemoteAccessError)));
        assert_eq!(req.poll_timeout(20), None);
    }

    fn write(psn: u32, body: Body<'_>) -> Vec<u8> {
        let c = requester_side();
        c.finish(&RocePacketRepr { bth: c.bth(Psn::new(psn), false), body })
    }

    fn reth(len: u32) -> RethRepr {
        RethRepr { virtual_addr: 0x10, rkey: 1, dma_len: len }
    }

    fn parse_response(bytes: &[u8]) -> (Psn, AethRepr) {
        let r = RocePacketRepr::parse(bytes).unwrap();
        assert_eq!(r.bth.dest_qp, REQUESTER_QP);
        match r.body {
            Body::Ack(aeth) => (r.bth.psn, aeth),
            other => panic!("not an ACK: {other:?}"),
        }
    }

    #[test]
    fn responder_naks_once_per_gap_and_reacks_duplicates() {
        let mut cfg = ResponderConfig::new(responder_side());
        cfg.ack_every = 100;
        let mut resp = Responder::new(cfg);
        let data = [0u8; 1024];
        assert!(resp.on_packet(&write(0, Body::WriteFirst { reth: reth(4096), payload: &data }), 0).is_empty());
        // PSN 1 lost: 2 and 3 are out of order; only the first of them is NAKed.
        let r = resp.on_packet(&write(2, Body::WriteMiddle { payload: &data }), 1);
        assert_eq!(parse_response(&r[0]), (Psn::new(1), ack(Syndrome::Nak(NakCode::PsnSequenceError))));
        assert!(resp.on_packet(&write(3, Body::WriteLast { payload: &data }), 2).is_empty());
        // A duplicate of 0 is re-acknowledged with the last PSN accepted.
        let r = resp.on_packet(&write(0, Body::WriteFirst { reth: reth(4096), payload: &data }), 3);
        assert_eq!(parse_response(&r[0]), (Psn::new(0), ack(OK)));
        // The gap fills; a later gap gets its own NAK.
        assert!(resp.on_packet(&write(1, Body::WriteMiddle { payload: &data }), 4).is_empty());
        let r = resp.on_packet(&write(3, Body::WriteLast { payload: &data }), 5);
        assert_eq!(parse_response(&r[0]).0, Psn::new(2));
        let c = resp.counters();
        assert_eq!((c.naks_sent, c.out_of_order, c.duplicates, c.packets_accepted), (2, 3, 1, 2));
        assert_eq!(c.bytes_received, 2048);
    }

    fn ooo_write(psn: u32, body: Body<'_>) -> RocePacketRepr<'_> {
        RocePacketRepr { bth: requester_side().bth(Psn::new(psn), false), body }
    }

    #[test]
    fn ooo_responder_places_early_packets_sacks_them_and_completes_when_whole() {
        let mut cfg = ResponderConfig::new(responder_side());
        cfg.transport = Transport::ReorderTolerant;
        let mut resp = Responder::new(cfg).with_memory(0x100, 12);
        let at = |offset: u64| RethRepr { virtual_addr: 0x100 + offset, rkey: 1, dma_len: 12 };
        // A 12-byte message in three 4-byte packets (PSNs 0, 1, 2), arriving 2, 1, 2, 0.
        let last = ooo_write(2, Body::WriteLastAt { reth: at(8), payload: b"ijkl" });
        let r = resp.on_repr(&last, 1).unwrap();
        let sack = |received| Body::Sack { aeth: AethRepr { syndrome: OK, msn: 0 }, received };
        assert_eq!((r.bth.psn, r.body), (Psn::new(Psn::MASK), sack(0b100)), "cumulative: nothing yet");
        let r = resp.on_repr(&ooo_write(1, Body::WriteMiddleAt { reth: at(4), payload: b"efgh" }), 2).unwrap();
        assert_eq!(r.body, sack(0b110));
        let r = resp.on_repr(&last, 3).unwrap();
        assert_eq!(r.body, sack(0b110), "a duplicate is answered with the same SACK");
        assert_eq!(resp.poll_completion(), None, "not whole yet");
        let r = resp.on_repr(&ooo_write(0, Body::WriteFirst { reth: at(0), payload: b"abcd" }), 4).unwrap();
        assert_eq!((r.bth.psn, r.body), (Psn::new(2), Body::Ack(AethRepr { syndrome: OK, msn: 1 })), "a plain ACK");
        assert_eq!(
            resp.poll_completion(),
            Some(ReceivedWrite { remote_addr: 0x100, rkey: 1, len: 12, completed_ns: 4 })
        );
        assert_eq!(resp.memory(), Some(&b"abcdefghijkl"[..]));
        let c = resp.counters();
        assert_eq!((c.packets_accepted, c.out_of_order, c.duplicates, c.sacks_sent, c.acks_sent), (3, 2, 1, 3, 4));
        assert_eq!((c.reordered_packets, c.reorder_depth_max, c.duplicate_psns), (2, 2, 1));
        // Beyond the bitmap: dropped and counted; a packet without its address is refused.
        resp.on_repr(&ooo_write(3 + SACK_BITS, Body::WriteOnly { reth: at(0), payload: b"" }), 5);
        assert_eq!(resp.counters().beyond_window, 1);
        let r = resp.on_repr(&ooo_write(3, Body::WriteMiddle { payload: b"" }), 6).unwrap();
        assert_eq!(r.body, Body::Ack(AethRepr { syndrome: Syndrome::Nak(NakCode::InvalidRequest), msn: 1 }));
    }

    #[test]
    fn ooo_tail_check_resends_only_holes_behind_the_highest_acknowledged_psn() {
        let mut cfg = RequesterConfig::new(requester_side());
        cfg.transport = Transport::ReorderTolerant;
        let mut req = Requester::new(cfg);
        req.post_write(1, 4 * 1024).unwrap();
        assert_eq!(std::iter::from_fn(|| req.poll_transmit_repr(0)).count(), 4);
        // PSN 1 missing, 0 acknowledged, 2 and 3 selectively: 2 later PSNs, under the threshold.
        assert!(req.on_sack(ack(OK), Psn::new(0), 0b110, 10).is_empty());
        assert_eq!(req.poll_timeout(10), Some(10 + 1_000_000 / TAIL_LOSS_DELAY_DIVISOR), "the tail check");
        // More is posted and sent before the check: in flight, not lost.
        req.post_write(2, 2 * 1024).unwrap();
        let psns: Vec<u32> = std::iter::from_fn(|| req.poll_transmit_repr(20)).map(|p| p.bth.psn.value()).collect();
        assert_eq!(psns, [4, 5]);
        let at = 10 + 1_000_000 / TAIL_LOSS_DELAY_DIVISOR;
        let psns: Vec<u32> = std::iter::from_fn(|| req.poll_transmit_repr(at)).map(|p| p.bth.psn.value()).collect();
        assert_eq!(psns, [1], "the hole, not what was sent since");
        assert_eq!((req.counters().packets_retransmitted, req.counters().timeouts), (1, 0));
    }

    #[test]
    fn go_back_n_responders_count_the_reordering_they_see() {
        let mut resp = Responder::new(ResponderConfig::new(responder_side()));
        let data = [0u8; 1024];
        let mid = |psn| write(psn, Body::WriteMiddle { payload: &data });
        resp.on_packet(&write(0, Body::WriteFirst { reth: reth(8192), payload: &data }), 0);
        for psn in [3, 1, 2, 5, 4, 3] {
            resp.on_packet(&mid(psn), 0);
        }
        let c = resp.counters();
        // 3 is dropped early (NAK), 1 and 2 arrive late, 5 early (NAK), 4 late but still early
        // (dropped), 3 a second time: accepted, yet a duplicate for the network.
        assert_eq!((c.reordered_packets, c.reorder_depth_max, c.duplicate_psns), (3, 2, 1));
        assert_eq!((c.packets_accepted, c.out_of_order, c.naks_sent), (4, 3, 2));
    }

    #[test]
    fn responder_reports_msn_and_completions() {
        let mut resp = Responder::new(ResponderConfig::new(responder_side()));
        let r = resp.on_packet(&write(0, Body::WriteOnly { reth: reth(3), payload: b"abc" }), 7);
        assert_eq!(parse_response(&r[0]), (Psn::new(0), AethRepr { syndrome: OK, msn: 1 }));
        assert_eq!(resp.poll_completion(), Some(ReceivedWrite { remote_addr: 0x10, rkey: 1, len: 3, completed_ns: 7 }));
        assert_eq!(resp.poll_completion(), None);
        // A DMA length that the data does not match is counted, not hidden.
        resp.on_packet(&write(1, Body::WriteOnly { reth: reth(9), payload: b"abc" }), 8);
        assert_eq!(resp.counters().length_mismatches, 1);
    }

    #[test]
    fn responder_refuses_what_it_cannot_take() {
        let mut resp = Responder::new(ResponderConfig::new(responder_side()));
        // MIDDLE without FIRST: NAK invalid request, PSN not consumed.
        let r = resp.on_packet(&write(0, Body::WriteMiddle { payload: &[0; 256] }), 0);
        assert_eq!(parse_response(&r[0]), (Psn::new(0), ack(Syndrome::Nak(NakCode::InvalidRequest))));
        assert_eq!(resp.expected_psn(), Psn::new(0));
        // Garbage, another QP, an ACK: dropped and counted, no response.
        assert!(resp.on_packet(&[1, 2, 3], 0).is_empty());
        let mut other_qp = write(0, Body::WriteOnly { reth: reth(0), payload: &[] });
        other_qp[7] = 0x99;
        assert!(resp.on_packet(&other_qp, 0).is_empty());
        assert!(resp.on_packet(&write(0, Body::Ack(ack(OK))), 0).is_empty());
        let c = resp.counters();
        assert_eq!((c.invalid_requests, c.malformed, c.ignored_packets), (1, 1, 2));
    }

    #[test]
    fn cnps_reach_the_requester() {
        let mut resp = Responder::new(ResponderConfig::new(responder_side()));
        let cnp = resp.congestion_notification();
        assert!(requester_side().verify_incoming(PORT, &cnp));
        let mut req = Requester::new(RequesterConfig::new(requester_side()));
        assert!(req.on_packet(&cnp, 0).unwrap().is_empty());
        assert_eq!(req.counters().cnps_received, 1);
        req.set_rate(0, 5_000_000_000);
        assert_eq!(req.rate_bps(), Some(5_000_000_000));
    }

    /// The reused-buffer path writes exactly the bytes of the allocating one: data, ACKs, NAKs
    /// and CNPs, ICRC included (the allocating path is the one checked against rxe and tshark).
    #[test]
    fn buffered_packets_are_byte_for_byte_the_allocated_ones() {
        let mut cfg = RequesterConfig::new(requester_side());
        cfg.remote_addr = 0x7f00_0000_1000;
        cfg.rkey = 0x1234;
        cfg.first_psn = Psn::new(Psn::MASK - 1);
        let (mut a, mut b) = (Requester::new(cfg), Requester::new(cfg));
        let mut cfg = ResponderConfig::new(responder_side());
        cfg.first_psn = Psn::new(Psn::MASK - 1);
        cfg.ack_every = 2;
        let (mut ra, mut rb) = (Responder::new(cfg), Responder::new(cfg));
        let mut buf = PacketBuf::new();
        for (id, len) in [(1, 3001), (2, 0), (3, 5), (4, 1024)] {
            a.post_write(id, len).unwrap();
            b.post_write(id, len).unwrap();
        }
        let mut n = 0;
        while let Some(p) = a.poll_transmit(0) {
            let q = b.poll_transmit_into(0, &mut buf).expect("the same packets");
            assert_eq!(&q[..], &p[..], "data packet {n}");
            // Skip one packet: the responders answer the gap with the same NAK.
            if n != 2 {
                assert_eq!(rb.on_packet_into(&q, 0, &mut buf).map(|r| r.to_vec()), ra.on_packet(&p, 0).pop());
            }
            n += 1;
        }
        assert!(b.poll_transmit_into(0, &mut buf).is_none());
        assert_eq!((n, ra.counters().naks_sent, rb.counters().acks_sent), (6, 1, ra.counters().acks_sent));
        assert_eq!(&rb.congestion_notification_into(&mut buf)[..], &ra.congestion_notification()[..]);
        assert_eq!(rb.counters(), ra.counters());
    }

    #[test]
    fn posting_more_than_half_the_psn_space_is_refused() {
        let mut cfg = RequesterConfig::new(requester_side());
        cfg.mtu = PathMtu::Mtu256;
        let mut req = Requester::new(cfg);
        req.post_write(0, ((1 << 23) - 1) * 256).unwrap(); // 2^23 - 1 packets
        assert_eq!(req.post_write(1, 1), Err(PostError::PsnSpaceExhausted { outstanding_packets: 1 << 23 }));
    }

    /// Paced at a link's rate, a requester must send no faster than the link serializes its
    /// frames (preamble, FCS and gap included, as the switches' queue model charges them): its
    /// packets fed to that queue model leave no backlog beyond the frame on the wire.
    #[test]
    fn a_requester_paced_at_a_links_rate_never_outruns_the_link() {
        use fabric_common::queue::{LineRate, enqueue_tail};
        let rate = 8_000_000_000;
        let mut cfg = RequesterConfig::new(requester_side());
        cfg.pacer = Some(PacerConfig { rate_bps: rate, burst_bytes: 1 });
        (cfg.window_packets, cfg.retransmit_timeout_ns) = (4096, 1_000_000_000);
        assert_eq!(cfg.wire_overhead_bytes, 14 + 20 + 8 + 24, "headers and framing");
        assert_eq!(requester_side().frame_overhead_bytes(), 14 + 20 + 8);
        let mut req = Requester::new(cfg);
        req.post_write(0, 2000 * 1024).unwrap();
        let (line, mut now, mut tail) = (LineRate::new(rate), 0, 0);
        for _ in 0..2000 {
            now = req.poll_timeout(now).unwrap();
            let p = req.poll_transmit_repr(now).expect("due at its pacer's time");
            let wire_ns =
                line.frame_transmit_ns((p.buffer_len() as u32 + cfg.connection.frame_overhead_bytes()).into());
            tail = enqueue_tail(tail, 0, now, wire_ns);
            // Headers only, the backlog grew by 24 bytes' time a packet: 48 µs by the end. The
            // pacer may round its time down by a nanosecond.
            assert!(tail - now <= wire_ns + 1, "{} ns queued at {now} ns", tail - now);
        }
    }
}
