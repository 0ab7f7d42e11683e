//! Congestion control wired around the QP state machines, sans-IO: what the endpoint's host loop
//! drives for each QP, so the whole chain is testable without sockets.
//!
//! - [`SenderQp`]: a [`Requester`] with an optional DCQCN [`ReactionPoint`]. A CNP from the peer
//!   cuts the rate ([`ReactionPoint::on_cnp`]), the RP's timers and byte counter raise it again,
//!   and every change goes to [`Requester::set_rate`].
//! - [`ReceiverQp`]: a [`Responder`] with an optional DCQCN [`NotificationPoint`]: a CE-marked
//!   packet earns a CNP when the NP says so, and an owed CNP goes out when its interval ends.
//! - [`RateTrajectory`]: a bounded, evenly spaced record of a rate over time.
use super::{
    dcqcn::{DcqcnParams, NotificationPoint, ReactionPoint},
    qp::{Completion, Requester, Responder},
    wire::WireError,
};

/// The sending side of a QP and its rate control.
#[derive(Clone, Debug)]
pub struct SenderQp {
    pub requester: Requester,
    rp: Option<ReactionPoint>,
}

impl SenderQp {
    /// Without `dcqcn` the requester keeps the rate it was configured with. With it, it starts
    /// paced at `line_rate_bps` (already divided by the time scale, as `params` are scaled).
    pub fn new(mut requester: Requester, dcqcn: Option<DcqcnParams>, line_rate_bps: u64, now_ns: u64) -> Self {
        let rp = dcqcn.map(|params| {
            requester.set_rate(now_ns, line_rate_bps);
            ReactionPoint::new(line_rate_bps, params, now_ns)
        });
        SenderQp { requester, rp }
    }

    pub fn reaction_point(&self) -> Option<&ReactionPoint> {
        self.rp.as_ref()
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

    /// Runs the RP's timers, then hands out up to `budget` packets and charges their bytes to
    /// the RP's byte counter.
    pub fn poll_transmit_many(&mut self, now_ns: u64, budget: usize) -> Vec<Vec<u8>> {
        let rate = self.rp.as_mut().and_then(|rp| rp.poll(now_ns));
        self.apply(now_ns, rate);
        let packets = self.requester.poll_transmit_many(now_ns, budget);
        if !packets.is_empty() {
            let overhead = u64::from(self.requester.config().wire_overhead_bytes);
            let bytes: u64 = packets.iter().map(|p| p.len() as u64 + overhead).sum();
            let rate = self.rp.as_mut().and_then(|rp| rp.on_bytes_sent(bytes, now_ns));
            self.apply(now_ns, rate);
        }
        packets
    }

    /// A packet from the peer (ICRC already checked): ACKs as [`Requester::on_packet`]; a CNP
    /// also goes to the RP.
    pub fn on_packet(&mut self, udp_payload: &[u8], now_ns: u64) -> Result<Vec<Completion>, WireError> {
        let cnps = self.cnps_received();
        let completed = self.requester.on_packet(udp_payload, now_ns)?;
        if self.cnps_received() > cnps {
            let rate = self.rp.as_mut().and_then(|rp| rp.on_cnp(now_ns));
            self.apply(now_ns, rate);
        }
        Ok(completed)
    }

    /// When to poll next without new input: the requester's time or the RP's timer.
    pub fn poll_timeout(&self, now_ns: u64) -> Option<u64> {
        let rp = self.rp.as_ref().and_then(ReactionPoint::poll_timeout);
        match (self.requester.poll_timeout(now_ns), rp) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// What a packet for a [`ReceiverQp`] calls for: ACKs/NAKs (data class), maybe a CNP (its own,
/// high-priority class).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiverReply {
    pub responses: Vec<Vec<u8>>,
    pub cnp: Option<Vec<u8>>,
}

/// The receiving side of a QP and its congestion notification.
#[derive(Clone, Debug)]
pub struct ReceiverQp {
    pub responder: Responder,
    np: Option<NotificationPoint>,
    ce_packets: u64,
}

impl ReceiverQp {
    /// With `dcqcn`, CE-marked packets are answered with CNPs as its NP decides.
    pub fn new(responder: Responder, dcqcn: Option<&DcqcnParams>) -> Self {
        ReceiverQp { responder, np: dcqcn.map(NotificationPoint::new), ce_packets: 0 }
    }

    /// Packets that arrived marked CE (counted whatever the congestion control).
    pub fn ce_packets(&self) -> u64 {
        self.ce_packets
    }

    pub fn cnps_sent(&self) -> u64 {
        self.responder.counters().cnps_sent
    }

    /// A packet from the peer (ICRC already checked) that arrived with ECN `ce` marked.
    pub fn on_packet(&mut self, udp_payload: &[u8], ce: bool, now_ns: u64) -> ReceiverReply {
        let responses = self.responder.on_packet(udp_payload, now_ns);
        let mut cnp = None;
        if ce {
            self.ce_packets += 1;
            if self.np.as_mut().is_some_and(|np| np.on_ce_packet(now_ns)) {
                cnp = Some(self.responder.congestion_notification());
            }
        }
        ReceiverReply { responses, cnp }
    }

    /// The CNP owed for marks inside the last interval, once the interval is over.
    pub fn poll(&mut self, now_ns: u64) -> Option<Vec<u8>> {
        if self.np.as_mut().is_some_and(|np| np.poll(now_ns)) {
            return Some(self.responder.congestion_notification());
        }
        None
    }

    /// When an owed CNP may go.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.np.as_ref().and_then(NotificationPoint::poll_timeout)
    }
}

/// A rate sampled every `interval_ns`, at most `max_len` samples: when full, every other sample
/// goes and the interval doubles, so a run of any length keeps an evenly spaced trace. Two
/// trajectories sampled at the same times stay aligned (same timestamps), so they can be summed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateTrajectory {
    interval_ns: u64,
    max_len: usize,
    next_ns: u64,
    samples: Vec<(u64, u64)>,
}

impl RateTrajectory {
    pub fn new(interval_ns: u64, max_len: usize) -> Self {
        assert!(max_len >= 2 && interval_ns > 0);
        RateTrajectory { interval_ns, max_len, next_ns: 0, samples: Vec::new() }
    }

    /// Records `rate_bps` at `now_ns` if a sample is due.
    pub fn sample(&mut self, now_ns: u64, rate_bps: u64) {
        if now_ns < self.next_ns {
            return;
        }
        if self.samples.len() == self.max_len {
            let mut i = 0;
            self.samples.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.interval_ns *= 2;
        }
        self.samples.push((now_ns, rate_bps));
        self.next_ns = now_ns + self.interval_ns;
    }

    /// `(time ns, rate bit/s)`, oldest first.
    pub fn samples(&self) -> &[(u64, u64)] {
        &self.samples
    }

    /// The sum of aligned trajectories (a flow's QPs); samples whose times differ are dropped.
    pub fn sum(all: &[&RateTrajectory]) -> Vec<(u64, u64)> {
        let Some(first) = all.first() else {
            return Vec::new();
        };
        first
            .samples
            .iter()
            .enumerate()
            .filter(|(i, (t, _))| all.iter().all(|r| r.samples.get(*i).is_some_and(|s| s.0 == *t)))
            .map(|(i, (t, _))| (*t, all.iter().map(|r| r.samples[i].1).sum()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::{
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
        let mut requester = Requester::new(cfg);
        requester.post_write(0, 1 << 30).unwrap();
        let mut tx = SenderQp::new(requester, Some(params), line, 0);
        let mut rx = ReceiverQp::new(Responder::new(ResponderConfig::new(resp_end)), Some(&params));
        let (mut rates, mut cnp_times) = (vec![(0, tx.rate_bps().unwrap())], Vec::new());
        let mut now = 0;
        while now < until {
            let mut back = Vec::new();
            for p in tx.poll_transmit_many(now, 8) {
                let reply = rx.on_packet(&p, mark(now), now);
                back.extend(reply.responses);
                back.extend(reply.cnp);
            }
            back.extend(rx.poll(now));
            for p in back {
                if matches!(RocePacketRepr::parse(&p).unwrap().body, Body::Cnp) {
                    cnp_times.push(now);
                }
                tx.on_packet(&p, now).unwrap();
            }
            // Rate changes land on the pacer, and RP timer events too.
            tx.poll_transmit_many(now, 0);
            let r = tx.rate_bps().unwrap();
            if rates.last().unwrap().1 != r {
                rates.push((now, r));
            }
            let next = [tx.poll_timeout(now), rx.poll_timeout()].into_iter().flatten().min().unwrap();
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
        let mut requester = Requester::new(RequesterConfig::new(req_end));
        requester.post_write(0, 10_000).unwrap();
        let mut tx = SenderQp::new(requester, None, 1_000, 0);
        let mut rx = ReceiverQp::new(Responder::new(ResponderConfig::new(resp_end)), None);
        for p in tx.poll_transmit_many(0, 100) {
            let r = rx.on_packet(&p, true, 0);
            assert!(r.cnp.is_none());
            for a in r.responses {
                tx.on_packet(&a, 0).unwrap();
            }
        }
        assert_eq!(rx.ce_packets(), 10);
        assert_eq!((rx.cnps_sent(), rx.poll_timeout()), (0, None));
        assert_eq!(tx.rate_bps(), None, "unpaced as configured");
        assert_eq!(tx.requester.outstanding_messages(), 0);
    }

    #[test]
    fn trajectories_are_bounded_evenly_spaced_and_summable() {
        let mut a = RateTrajectory::new(10, 4);
        let mut b = RateTrajectory::new(10, 4);
        for t in 0..100 {
            a.sample(t, 5);
            b.sample(t, t);
        }
        assert!(a.samples().len() <= 4);
        let times: Vec<u64> = a.samples().iter().map(|s| s.0).collect();
        assert_eq!(times, [0, 40, 80]);
        assert_eq!(RateTrajectory::sum(&[&a, &b]), [(0, 5), (40, 45), (80, 85)]);
    }
}
