//! The QP state machines driven through a [`CongestionControl`], sans-IO: what the endpoint's
//! host loop (or a simulator) calls for each QP, so the whole chain is testable without sockets.
//!
//! - [`SenderQp`]: a [`Requester`] and the bytes it has to send. It posts what the scheme admits,
//!   hands the scheme every CNP, control message and completion, charges it what it sends, and
//!   sets the requester's pacing rate to whatever the scheme answers.
//! - [`ReceiverQp`]: a [`Responder`]; it tells the scheme of every arrival (and its CE mark) and
//!   every message received, and turns the scheme's [`Feedback`] into packets.
use bytes::Bytes;

use super::control::{CONTROL_OPCODE, CongestionControl, Feedback};
use crate::{
    buf::PacketBuf,
    qp::{Completion, MAX_WRITE_BYTES, PostError, Requester, Responder},
    wire::{BthPacket, RocePacketRepr, WireError},
};

/// What a packet from the peer was to a [`SenderQp`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SenderInput {
    /// A control message ([`CONTROL_OPCODE`]), handed to the congestion control.
    Control,
    /// An ACK, NAK or CNP for the requester, and the messages it completed.
    Transport(Vec<Completion>),
}

/// Why a packet for a [`SenderQp`] could not be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SenderError {
    /// The requester's parser refused it (counted by the caller, never dropped silently).
    #[error(transparent)]
    Wire(#[from] WireError),
    /// What the scheme admitted could not be posted.
    #[error("posting a write: {0:?}")]
    Post(#[from] PostError),
}

/// The sending side of a QP under congestion control.
#[derive(Clone, Debug)]
pub struct SenderQp {
    pub requester: Requester,
    bytes: u64,
    posted: u64,
    next_msg_id: u64,
}

impl SenderQp {
    /// A requester with `bytes` to send: registered with `cc` (which may set its starting rate),
    /// and what `cc` admits at once posted.
    pub fn new(
        requester: Requester,
        bytes: u64,
        cc: &mut dyn CongestionControl,
        now_ns: u64,
    ) -> Result<Self, PostError> {
        let mut qp = SenderQp { requester, bytes, posted: 0, next_msg_id: 0 };
        let rate = cc.add_sender(qp.qp(), bytes, qp.rate_bps(), now_ns);
        qp.apply(now_ns, rate);
        qp.post_admitted(cc)?;
        Ok(qp)
    }

    /// The local QP number: the flow's key in the congestion control.
    pub fn qp(&self) -> u32 {
        self.requester.config().connection.local_qp
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether every byte has been posted.
    pub fn all_posted(&self) -> bool {
        self.posted >= self.bytes
    }

    /// Whether every byte has been posted and acknowledged.
    pub fn is_complete(&self) -> bool {
        self.all_posted() && self.requester.outstanding_messages() == 0
    }

    /// The pacing rate in force (`None`: unpaced).
    pub fn rate_bps(&self) -> Option<u64> {
        self.requester.rate_bps()
    }

    pub fn cnps_received(&self) -> u64 {
        self.requester.counters().cnps_received
    }

    fn apply(&mut self, now_ns: u64, rate: Option<u64>) {
        if let Some(rate) = rate {
            self.requester.set_rate(now_ns, rate);
        }
    }

    /// Posts what the scheme admits now, in WRITEs of at most [`MAX_WRITE_BYTES`].
    fn post_admitted(&mut self, cc: &mut dyn CongestionControl) -> Result<(), PostError> {
        while let Some(mut len) = cc.poll_post(self.qp(), self.bytes.saturating_sub(self.posted)) {
            if len == 0 {
                break;
            }
            self.posted += len;
            while len > 0 {
                let write = len.min(MAX_WRITE_BYTES);
                self.requester.post_write(self.next_msg_id, write as u32)?;
                self.next_msg_id += 1;
                len -= write;
            }
        }
        Ok(())
    }

    /// Runs the scheme's timers, then hands up to `budget` packets to `emit` (written into
    /// `buf`, see [`crate::buf`]) and charges their bytes on the wire to the scheme. Returns
    /// how many went.
    pub fn poll_transmit(
        &mut self,
        cc: &mut dyn CongestionControl,
        now_ns: u64,
        budget: usize,
        buf: &mut PacketBuf,
        mut emit: impl FnMut(Bytes),
    ) -> usize {
        self.transmit_with(cc, now_ns, budget, |req| {
            let packet = req.poll_transmit_into(now_ns, buf)?;
            let len = packet.len();
            emit(packet);
            Some(len)
        })
    }

    /// [`Self::poll_transmit`] without the bytes: each packet handed to `emit` as a
    /// [`RocePacketRepr`] (see [`Requester::poll_transmit_repr`]), charged to the scheme at
    /// the length its bytes would have.
    pub fn poll_transmit_repr(
        &mut self,
        cc: &mut dyn CongestionControl,
        now_ns: u64,
        budget: usize,
        mut emit: impl FnMut(RocePacketRepr<'static>),
    ) -> usize {
        self.transmit_with(cc, now_ns, budget, |req| {
            let packet = req.poll_transmit_repr(now_ns)?;
            let len = packet.buffer_len();
            emit(packet);
            Some(len)
        })
    }

    /// The scheme's timers, then up to `budget` packets from `send` (which hands one out and
    /// returns its UDP payload length), then the scheme charged for them: every way of sending.
    fn transmit_with(
        &mut self,
        cc: &mut dyn CongestionControl,
        now_ns: u64,
        budget: usize,
        mut send: impl FnMut(&mut Requester) -> Option<usize>,
    ) -> usize {
        let qp = self.qp();
        let rate = cc.poll_rate(qp, now_ns);
        self.apply(now_ns, rate);
        let overhead = u64::from(self.requester.config().wire_overhead_bytes);
        let (mut sent, mut wire_bytes) = (0, 0);
        while sent < budget {
            let Some(len) = send(&mut self.requester) else { break };
            wire_bytes += len as u64 + overhead;
            sent += 1;
        }
        if sent > 0 {
            let rate = cc.on_sent(qp, wire_bytes, now_ns);
            self.apply(now_ns, rate);
        }
        sent
    }

    /// A packet from the peer (ICRC already checked). A control message goes to the scheme
    /// (and what it then admits is posted); anything else to [`Requester::on_packet`], a CNP
    /// then to the scheme as well.
    pub fn on_packet(
        &mut self,
        cc: &mut dyn CongestionControl,
        udp_payload: &[u8],
        now_ns: u64,
    ) -> Result<SenderInput, SenderError> {
        let qp = self.qp();
        if BthPacket::new_checked(udp_payload).is_ok_and(|bth| bth.opcode() == CONTROL_OPCODE) {
            cc.on_control(qp, udp_payload, now_ns);
            self.post_admitted(cc)?;
            return Ok(SenderInput::Control);
        }
        let packet = RocePacketRepr::parse(udp_payload)?;
        Ok(SenderInput::Transport(self.on_repr(cc, &packet, now_ns)?))
    }

    /// [`Self::on_packet`] for an ACK, NAK or CNP already parsed (or never serialized: a
    /// simulator's); control messages come as bytes, through [`Self::on_packet`]. Returns the
    /// messages it completed.
    pub fn on_repr(
        &mut self,
        cc: &mut dyn CongestionControl,
        packet: &RocePacketRepr<'_>,
        now_ns: u64,
    ) -> Result<Vec<Completion>, PostError> {
        let qp = self.qp();
        let cnps = self.cnps_received();
        let completed = self.requester.on_repr(packet, now_ns);
        if self.cnps_received() > cnps {
            let rate = cc.on_cnp(qp, now_ns);
            self.apply(now_ns, rate);
        }
        if !completed.is_empty() {
            for c in &completed {
                cc.on_completed(qp, u64::from(c.len), now_ns);
            }
            self.post_admitted(cc)?;
        }
        Ok(completed)
    }

    /// When to poll next without new input: the requester's time or the scheme's timer.
    pub fn poll_timeout(&self, cc: &dyn CongestionControl, now_ns: u64) -> Option<u64> {
        match (self.requester.poll_timeout(now_ns), cc.sender_timeout(self.qp())) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The receiving side of a QP under congestion control.
#[derive(Clone, Debug)]
pub struct ReceiverQp {
    pub responder: Responder,
    ce_packets: u64,
}

impl ReceiverQp {
    /// A responder expecting `bytes`, registered with `cc`.
    pub fn new(responder: Responder, bytes: u64, cc: &mut dyn CongestionControl) -> Self {
        cc.add_receiver(&responder.config().connection, bytes);
        ReceiverQp { responder, ce_packets: 0 }
    }

    /// The local QP number: the flow's key in the congestion control.
    pub fn qp(&self) -> u32 {
        self.responder.config().connection.local_qp
    }

    /// Packets that arrived marked CE (counted whatever the congestion control).
    pub fn ce_packets(&self) -> u64 {
        self.ce_packets
    }

    pub fn cnps_sent(&self) -> u64 {
        self.responder.counters().cnps_sent
    }

    /// A packet from the peer (ICRC already checked) that arrived with ECN `ce` marked: the
    /// ACK or NAK it calls for, written into `buf`. The scheme hears of the arrival and of
    /// every message it completed; what it sends back comes from its
    /// [`CongestionControl::poll_feedback`].
    pub fn on_packet(
        &mut self,
        cc: &mut dyn CongestionControl,
        udp_payload: &[u8],
        ce: bool,
        now_ns: u64,
        buf: &mut PacketBuf,
    ) -> Option<Bytes> {
        let response = self.responder.on_packet_into(udp_payload, now_ns, buf);
        self.after_arrival(cc, ce, now_ns);
        response
    }

    /// [`Self::on_packet`] for a packet already parsed (or never serialized: a simulator's):
    /// the response without bytes (see [`Responder::on_repr`]).
    pub fn on_repr(
        &mut self,
        cc: &mut dyn CongestionControl,
        packet: &RocePacketRepr<'_>,
        ce: bool,
        now_ns: u64,
    ) -> Option<RocePacketRepr<'static>> {
        let response = self.responder.on_repr(packet, now_ns);
        self.after_arrival(cc, ce, now_ns);
        response
    }

    /// The scheme hears of an arrival and of every message it completed.
    fn after_arrival(&mut self, cc: &mut dyn CongestionControl, ce: bool, now_ns: u64) {
        if ce {
            self.ce_packets += 1;
        }
        let qp = self.qp();
        cc.on_arrival(qp, ce, now_ns);
        while let Some(write) = self.responder.poll_completion() {
            cc.on_message_received(qp, write.len, now_ns);
        }
    }

    /// The packet of a [`Feedback`] for this QP: a CNP is built (and counted) here.
    pub fn feedback_packet(&mut self, feedback: Feedback, buf: &mut PacketBuf) -> Bytes {
        match feedback {
            Feedback::Cnp { .. } => self.responder.congestion_notification_into(buf),
            Feedback::Packet { packet, .. } => packet,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, net::Ipv4Addr};

    use super::*;
    use crate::{
        cc::{cts::Cts, dcqcn::Dcqcn, none::PfcOnly},
        cts::CtsConfig,
        dcqcn::DcqcnParams,
        icrc::IpPair,
        pacer::PacerConfig,
        qp::{Connection, DEFAULT_PKEY, RequesterConfig, ResponderConfig},
        wire::{Body, RocePacketRepr},
    };

    fn ends() -> (Connection, Connection) {
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 6));
        let req = Connection {
            local_qp: 0x11,
            remote_qp: 0x12,
            pkey: DEFAULT_PKEY,
            ip: IpPair::V4 { src: a, dst: b },
            udp_src_port: 0xC011,
        };
        (req, Connection { local_qp: 0x12, remote_qp: 0x11, ip: req.ip.reversed(), ..req })
    }

    /// The receiver's feedback at `now`, as packets of `rx`.
    fn feedback(cc: &mut dyn CongestionControl, rx: &mut ReceiverQp, now: u64, buf: &mut PacketBuf) -> Vec<Bytes> {
        let mut out = Vec::new();
        cc.poll_feedback(now, true, buf, &mut out);
        out.into_iter().map(|f| rx.feedback_packet(f, buf)).collect()
    }

    /// The engine's DCQCN chain with a zero-delay network: data packets marked CE by `mark(t)`,
    /// NP -> CNP -> RP -> pacer. Returns every rate change as (time, rate) and the CNP times.
    fn run_chain(
        line: u64,
        params: DcqcnParams,
        until: u64,
        mark: impl Fn(u64) -> bool,
    ) -> (Vec<(u64, u64)>, Vec<u64>, ReceiverQp) {
        let (req_end, resp_end) = ends();
        let mut cfg = RequesterConfig::new(req_end);
        cfg.pacer = Some(PacerConfig { rate_bps: line, burst_bytes: 2200 });
        // Two hosts, each with its own DCQCN: the sender's RPs, the receiver's NPs.
        let (mut tx_cc, mut rx_cc) = (Dcqcn::new(params, line), Dcqcn::new(params, line));
        let mut tx = SenderQp::new(Requester::new(cfg), 1 << 30, &mut tx_cc, 0).unwrap();
        let mut rx = ReceiverQp::new(Responder::new(ResponderConfig::new(resp_end)), 1 << 30, &mut rx_cc);
        let mut buf = PacketBuf::new();
        let (mut rates, mut cnp_times) = (vec![(0, tx.rate_bps().unwrap())], Vec::new());
        let mut now = 0;
        while now < until {
            let (mut sent, mut back) = (Vec::new(), Vec::new());
            tx.poll_transmit(&mut tx_cc, now, 8, &mut buf, |p| sent.push(p));
            for p in sent {
                back.extend(rx.on_packet(&mut rx_cc, &p, mark(now), now, &mut buf));
            }
            back.extend(feedback(&mut rx_cc, &mut rx, now, &mut buf));
            for p in back {
                if matches!(RocePacketRepr::parse(&p).unwrap().body, Body::Cnp) {
                    cnp_times.push(now);
                }
                tx.on_packet(&mut tx_cc, &p, now).unwrap();
            }
            // Rate changes land on the pacer, and RP timer events too.
            tx.poll_transmit(&mut tx_cc, now, 0, &mut buf, |_| {});
            let r = tx.rate_bps().unwrap();
            if rates.last().unwrap().1 != r {
                rates.push((now, r));
            }
            let next = [tx.poll_timeout(&tx_cc, now), rx_cc.receiver_timeout()].into_iter().flatten().min().unwrap();
            now = next.max(now + 1);
        }
        (rates, cnp_times, rx)
    }

    #[test]
    fn ce_marks_become_cnps_and_rate_cuts() {
        let params = DcqcnParams::default();
        let line = 10_000_000_000;
        // Marks for 20 µs from the start, and for 10 µs from 100 µs.
        let mark = |t: u64| t <= 20_000 || (100_000..=110_000).contains(&t);
        let (rates, cnps, rx) = run_chain(line, params, 3_000_000, mark);
        // NP: the first mark answered at once, the rest of its interval owes one CNP at 50 µs;
        // the same again from the first mark after 100 µs.
        assert_eq!(cnps.len(), 4, "{cnps:?}");
        assert_eq!(cnps[0], 0);
        assert_eq!(cnps[1], 50_000);
        assert!((100_000..104_000).contains(&cnps[2]), "{cnps:?}");
        assert_eq!(cnps[3], cnps[2] + 50_000);
        assert_eq!(rx.cnps_sent(), 4);
        assert!(rx.ce_packets() > 4, "every marked packet is counted");
        // RP: α starts at 1 and CNPs 50 µs apart leave no time for it to decay (K = 55 µs) or
        // for a rate increase (55 µs): each CNP halves the rate.
        let cuts: Vec<u64> = rates.iter().skip(1).take(4).map(|r| r.1).collect();
        assert_eq!(cuts, [5_000_000_000, 2_500_000_000, 1_250_000_000, 625_000_000], "{rates:?}");
        assert_eq!(rates[4].0, cnps[3]);
        // Then recovery: fast recovery toward R_T = 1.25 Gbit/s, additive increase beyond.
        let after: Vec<u64> = rates.iter().skip(5).map(|r| r.1).collect();
        assert!(after.windows(2).all(|w| w[1] > w[0]), "only increases after the last CNP");
        assert_eq!(after[0], (1_250_000_000 + 625_000_000) / 2, "the first step is fast recovery");
        assert!(*after.last().unwrap() > 2_000_000_000 && *after.last().unwrap() < line);
    }

    #[test]
    fn time_scale_stretches_the_chain() {
        // Slowed 100 times: the same cuts at 1/100 of the rates, CNPs 100 times further apart.
        let s = 100;
        let params = DcqcnParams::default().scaled(s);
        let line = 10_000_000_000 / s;
        let mark = |t: u64| t <= 20_000 * s;
        let (rates, cnps, _) = run_chain(line, params, 200_000 * s, mark);
        assert_eq!(cnps[..2], [0, 50_000 * s]);
        assert_eq!(rates[1].1, 50_000_000);
        assert_eq!(rates[2].1, 25_000_000);
    }

    #[test]
    fn without_dcqcn_marks_are_counted_and_nothing_else() {
        let (req_end, resp_end) = ends();
        let (mut tx_cc, mut rx_cc) = (PfcOnly, PfcOnly);
        let mut tx = SenderQp::new(Requester::new(RequesterConfig::new(req_end)), 10_000, &mut tx_cc, 0).unwrap();
        let mut rx = ReceiverQp::new(Responder::new(ResponderConfig::new(resp_end)), 10_000, &mut rx_cc);
        let mut buf = PacketBuf::new();
        let mut sent = Vec::new();
        tx.poll_transmit(&mut tx_cc, 0, 100, &mut buf, |p| sent.push(p));
        for p in sent {
            let responses = rx.on_packet(&mut rx_cc, &p, true, 0, &mut buf);
            assert!(feedback(&mut rx_cc, &mut rx, 0, &mut buf).is_empty(), "no CNP");
            if let Some(a) = responses {
                tx.on_packet(&mut tx_cc, &a, 0).unwrap();
            }
        }
        assert_eq!(rx.ce_packets(), 10);
        assert_eq!((rx.cnps_sent(), rx_cc.receiver_timeout()), (0, None));
        assert_eq!(tx.rate_bps(), None, "unpaced as configured");
        assert_eq!(tx.requester.outstanding_messages(), 0);
        assert!(tx.is_complete());
    }

    /// Senders into one receiver under CTS, zero-delay network: nothing is sent before a grant,
    /// the WRITEs posted at once never exceed channels x buffer, and every byte arrives.
    #[test]
    fn cts_chain_sends_only_what_the_receiver_granted() {
        let cfg = CtsConfig { channels: 2, buffer_bytes: 8 * 1024, resend_after_ns: 1_000_000 };
        let (mut tx_cc, mut rx_cc) = (Cts::new(cfg), Cts::new(cfg));
        let mut buf = PacketBuf::new();
        let sizes = [20_000u64, 33_333, 8 * 1024];
        let (mut txs, mut rxs) = (BTreeMap::new(), BTreeMap::new());
        for (k, &bytes) in sizes.iter().enumerate() {
            let (mut req_end, mut resp_end) = ends();
            (req_end.local_qp, req_end.remote_qp) = (0x100 + k as u32, 0x200 + k as u32);
            (resp_end.local_qp, resp_end.remote_qp) = (req_end.remote_qp, req_end.local_qp);
            let tx = SenderQp::new(Requester::new(RequesterConfig::new(req_end)), bytes, &mut tx_cc, 0).unwrap();
            assert_eq!(tx.requester.outstanding_messages(), 0, "nothing posted before a grant");
            txs.insert(req_end.local_qp, tx);
            rxs.insert(
                resp_end.local_qp,
                ReceiverQp::new(Responder::new(ResponderConfig::new(resp_end)), bytes, &mut rx_cc),
            );
        }
        let mut acked: BTreeMap<u32, u64> = BTreeMap::new();
        let mut now = 0;
        while !txs.values().all(SenderQp::is_complete) {
            assert!(now < 1_000, "stalled");
            let mut grants = Vec::new();
            for r in rxs.values_mut() {
                grants.extend(feedback(&mut rx_cc, r, now, &mut buf).into_iter().map(|p| (r.qp(), p)));
            }
            for (_, g) in grants {
                let dest = BthPacket::new_checked(&g[..]).unwrap().dest_qp();
                assert_eq!(txs.get_mut(&dest).unwrap().on_packet(&mut tx_cc, &g, now), Ok(SenderInput::Control));
            }
            let writes: u64 = txs.iter().map(|(qp, t)| t.posted - acked.get(qp).unwrap_or(&0)).sum();
            assert!(writes <= cfg.bound_bytes(), "{writes} bytes posted and not acknowledged");
            for tx in txs.values_mut() {
                let mut sent = Vec::new();
                tx.poll_transmit(&mut tx_cc, now, usize::MAX, &mut buf, |p| sent.push(p));
                let r = rxs.get_mut(&tx.requester.config().connection.remote_qp).unwrap();
                for p in sent {
                    if let Some(ack) = r.on_packet(&mut rx_cc, &p, false, now, &mut buf) {
                        let SenderInput::Transport(done) = tx.on_packet(&mut tx_cc, &ack, now).unwrap() else {
                            panic!("an ACK is no control message")
                        };
                        *acked.entry(tx.qp()).or_default() += done.iter().map(|c| u64::from(c.len)).sum::<u64>();
                    }
                }
            }
            now += 1;
        }
        for (r, &bytes) in rxs.values().zip(&sizes) {
            assert_eq!(r.responder.counters().bytes_received, bytes);
        }
        assert_eq!(rx_cc.max_in_flight_bytes(), cfg.bound_bytes());
        assert!(rx_cc.receiver().is_done());
    }

    /// A QP paced below the host's DCQCN line (one of 8 QPs of its transfer, or under a slow
    /// NIC) starts at its own rate, is cut from it, and recovers to it, never to the line.
    #[test]
    fn a_dcqcn_sender_starts_and_recovers_at_its_own_rate() {
        let (line, own) = (10_000_000_000, 1_250_000_000);
        let mut cfg = RequesterConfig::new(ends().0);
        cfg.pacer = Some(PacerConfig { rate_bps: own, burst_bytes: 2200 });
        let mut cc = Dcqcn::new(DcqcnParams::default(), line);
        let tx = SenderQp::new(Requester::new(cfg), 1 << 20, &mut cc, 0).unwrap();
        assert_eq!(tx.rate_bps(), Some(own), "not the host's line");
        assert_eq!(cc.reaction_point(tx.qp()).unwrap().line_rate_bps(), own);
        assert_eq!(cc.on_cnp(tx.qp(), 1_000), Some(own / 2));
        let mut rate = own / 2;
        while let Some(at) = cc.sender_timeout(tx.qp()) {
            if let Some(r) = cc.poll_rate(tx.qp(), at) {
                assert!(r <= own, "{r} bit/s above its own rate");
                rate = r;
            }
            assert!(at < 1_000_000_000, "recovered within a second");
        }
        assert_eq!(rate, own, "recovered to its own rate");
    }

    /// A scheme written here and nowhere else (one WRITE of at most 3000 bytes in flight at a
    /// time) runs through the same glue: the trait is all a new scheme needs.
    #[test]
    fn a_scheme_of_its_own_plugs_into_the_same_qps() {
        #[derive(Debug, Default)]
        struct OneAtATime {
            in_flight: bool,
        }
        impl CongestionControl for OneAtATime {
            fn poll_post(&mut self, _qp: u32, unposted: u64) -> Option<u64> {
                if self.in_flight || unposted == 0 {
                    return None;
                }
                self.in_flight = true;
                Some(unposted.min(3000))
            }
            fn on_completed(&mut self, _qp: u32, _len: u64, _now_ns: u64) {
                self.in_flight = false;
            }
        }
        let (req_end, resp_end) = ends();
        let (mut tx_cc, mut rx_cc) = (OneAtATime::default(), PfcOnly);
        let mut tx = SenderQp::new(Requester::new(RequesterConfig::new(req_end)), 10_000, &mut tx_cc, 0).unwrap();
        let mut rx = ReceiverQp::new(Responder::new(ResponderConfig::new(resp_end)), 10_000, &mut rx_cc);
        let mut buf = PacketBuf::new();
        for now in 0..100 {
            assert!(tx.requester.outstanding_messages() <= 1, "one WRITE at a time");
            let mut sent = Vec::new();
            tx.poll_transmit(&mut tx_cc, now, usize::MAX, &mut buf, |p| sent.push(p));
            for p in sent {
                if let Some(ack) = rx.on_packet(&mut rx_cc, &p, false, now, &mut buf) {
                    tx.on_packet(&mut tx_cc, &ack, now).unwrap();
                }
            }
        }
        assert!(tx.is_complete());
        assert_eq!(rx.responder.counters().messages_completed, 4, "3000 + 3000 + 3000 + 1000");
        assert_eq!(rx.responder.counters().bytes_received, 10_000);
    }
}
