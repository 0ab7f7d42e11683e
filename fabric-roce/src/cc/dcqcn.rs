//! DCQCN behind [`CongestionControl`]: a [`ReactionPoint`] per sending QP sets its pacing rate
//! (cut on each CNP, raised again by its timer and byte counter), a [`NotificationPoint`] per
//! receiving QP answers CE-marked packets with CNPs. The algorithm is [`crate::dcqcn`]'s; this
//! file only wires it to the hooks.
use std::collections::BTreeMap;

use super::control::{CongestionControl, Feedback, post_everything};
use crate::{
    buf::PacketBuf,
    dcqcn::{DcqcnParams, NotificationPoint, ReactionPoint},
    qp::Connection,
};

/// DCQCN at one host: see the module docs.
#[derive(Clone, Debug)]
pub struct Dcqcn {
    params: DcqcnParams,
    line_rate_bps: u64,
    rps: BTreeMap<u32, ReactionPoint>,
    nps: BTreeMap<u32, NotificationPoint>,
    /// Receivers whose NP answered a CE packet at once: a CNP each, at the next feedback.
    cnps_due: Vec<u32>,
}

impl Dcqcn {
    /// Each sender's reaction point starts at, and recovers to, its requester's own pacing
    /// rate; `line_rate_bps` is the line of an unpaced requester only. `params` and the rates
    /// are already time-scaled ([`DcqcnParams::scaled`]).
    ///
    /// # Panics
    /// On the first sender, if `params` fail [`DcqcnParams::validate`] or the rate is 0.
    pub fn new(params: DcqcnParams, line_rate_bps: u64) -> Self {
        Dcqcn { params, line_rate_bps, rps: BTreeMap::new(), nps: BTreeMap::new(), cnps_due: Vec::new() }
    }

    /// The reaction point of sender `qp`.
    pub fn reaction_point(&self, qp: u32) -> Option<&ReactionPoint> {
        self.rps.get(&qp)
    }

    /// The notification point of receiver `qp`.
    pub fn notification_point(&self, qp: u32) -> Option<&NotificationPoint> {
        self.nps.get(&qp)
    }

    fn rp(&mut self, qp: u32) -> Option<&mut ReactionPoint> {
        self.rps.get_mut(&qp)
    }
}

impl CongestionControl for Dcqcn {
    /// A run-wide line would override what the requester's rate already counts (its
    /// transfer's QP count, a slow NIC's cap): the QP's own rate is its line.
    fn add_sender(&mut self, qp: u32, _bytes: u64, rate_bps: Option<u64>, now_ns: u64) -> Option<u64> {
        let line = rate_bps.unwrap_or(self.line_rate_bps);
        self.rps.insert(qp, ReactionPoint::new(line, self.params, now_ns));
        Some(line)
    }

    fn poll_post(&mut self, _qp: u32, unposted: u64) -> Option<u64> {
        post_everything(unposted)
    }

    fn poll_rate(&mut self, qp: u32, now_ns: u64) -> Option<u64> {
        self.rp(qp)?.poll(now_ns)
    }

    fn on_sent(&mut self, qp: u32, wire_bytes: u64, now_ns: u64) -> Option<u64> {
        self.rp(qp)?.on_bytes_sent(wire_bytes, now_ns)
    }

    fn on_cnp(&mut self, qp: u32, now_ns: u64) -> Option<u64> {
        self.rp(qp)?.on_cnp(now_ns)
    }

    fn sender_timeout(&self, qp: u32) -> Option<u64> {
        self.rps.get(&qp)?.poll_timeout()
    }

    fn sets_rate(&self) -> bool {
        true
    }

    fn add_receiver(&mut self, connection: &Connection, _bytes: u64) {
        self.nps.insert(connection.local_qp, NotificationPoint::new(&self.params));
    }

    fn on_arrival(&mut self, qp: u32, ce: bool, now_ns: u64) {
        if ce && self.nps.get_mut(&qp).is_some_and(|np| np.on_ce_packet(now_ns)) {
            self.cnps_due.push(qp);
        }
    }

    /// CNPs answering marks at once first, then those owed for marks inside an interval that
    /// is now over.
    fn poll_feedback(&mut self, now_ns: u64, _admit: bool, _buf: &mut PacketBuf, out: &mut Vec<Feedback>) {
        out.extend(self.cnps_due.drain(..).map(|qp| Feedback::Cnp { qp }));
        for (&qp, np) in &mut self.nps {
            if np.poll(now_ns) {
                out.push(Feedback::Cnp { qp });
            }
        }
    }

    fn receiver_timeout(&self) -> Option<u64> {
        if !self.cnps_due.is_empty() {
            return Some(0);
        }
        self.nps.values().filter_map(NotificationPoint::poll_timeout).min()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::{icrc::IpPair, qp::DEFAULT_PKEY};

    const LINE: u64 = 10_000_000_000;

    fn receiver(qp: u32) -> Connection {
        let ip = IpPair::V4 { src: Ipv4Addr::new(198, 18, 0, 6), dst: Ipv4Addr::new(198, 18, 0, 2) };
        Connection { local_qp: qp, remote_qp: qp - 1, pkey: DEFAULT_PKEY, ip, udp_src_port: 0xC011 }
    }

    fn feedback(cc: &mut Dcqcn, now: u64) -> Vec<Feedback> {
        let mut out = Vec::new();
        cc.poll_feedback(now, true, &mut PacketBuf::new(), &mut out);
        out
    }

    #[test]
    fn senders_start_at_line_rate_post_everything_and_a_cnp_halves_the_rate() {
        let mut cc = Dcqcn::new(DcqcnParams::default(), LINE);
        assert_eq!(cc.add_sender(0x11, 1 << 20, None, 0), Some(LINE), "paced at line rate from the start");
        assert_eq!((cc.poll_post(0x11, 1 << 20), cc.poll_post(0x11, 0)), (Some(1 << 20), None));
        assert!(cc.sets_rate());
        assert_eq!(cc.sender_timeout(0x11), None, "not limited: no timer");
        assert_eq!(cc.poll_rate(0x11, 1_000_000), None, "nothing happens without a CNP");
        assert_eq!(cc.on_sent(0x11, 20_000_000, 1_000_000), None, "the byte counter runs only when limited");
        // α = 1: a cut to half, then the rate-increase timer runs.
        assert_eq!(cc.on_cnp(0x11, 2_000_000), Some(LINE / 2));
        assert_eq!(cc.sender_timeout(0x11), Some(2_055_000));
        assert_eq!(cc.poll_rate(0x11, 2_054_999), None);
        let up = cc.poll_rate(0x11, 2_055_000).expect("fast recovery at the timer");
        assert!(up > LINE / 2 && up < LINE, "{up}");
        assert_eq!(cc.reaction_point(0x11).unwrap().cnps_received(), 1);
        // Another QP's CNP is another RP's: this one keeps its rate.
        cc.add_sender(0x13, 1, None, 0);
        assert_eq!(cc.on_cnp(0x13, 2_100_000), Some(LINE / 2));
        assert_eq!(cc.reaction_point(0x11).unwrap().rate_bps(), up);
        assert_eq!(cc.on_cnp(0x99, 0), None, "no such sender");
    }

    #[test]
    fn bytes_sent_while_limited_feed_the_byte_counter() {
        let mut cc = Dcqcn::new(DcqcnParams::default(), LINE);
        cc.add_sender(0x11, 1 << 30, None, 0);
        assert_eq!(cc.on_cnp(0x11, 0), Some(LINE / 2), "R_C 5 G, R_T 10 G");
        // B = 10 MB sent before the timer's first event: one fast-recovery step, R_C = (10 + 5)/2 G.
        assert_eq!(cc.on_sent(0x11, 9_999_999, 1_000), None, "one byte short of B");
        assert_eq!(cc.on_sent(0x11, 1, 2_000), Some(7_500_000_000));
        assert_eq!(cc.reaction_point(0x11).unwrap().byte_events(), 1);
        assert_eq!(cc.on_sent(0x99, 10_000_000, 3_000), None, "no such sender");
    }

    #[test]
    fn ce_marks_earn_one_cnp_per_interval_and_unmarked_packets_none() {
        let mut cc = Dcqcn::new(DcqcnParams::default(), LINE);
        cc.add_receiver(&receiver(0x12), 1 << 20);
        cc.add_receiver(&receiver(0x14), 1 << 20);
        cc.on_arrival(0x12, false, 0);
        assert!(feedback(&mut cc, 0).is_empty(), "not marked");
        assert_eq!(cc.receiver_timeout(), None);
        cc.on_arrival(0x12, true, 1_000);
        assert_eq!(cc.receiver_timeout(), Some(0), "a CNP to send at once");
        assert_eq!(feedback(&mut cc, 1_000), [Feedback::Cnp { qp: 0x12 }]);
        // More marks inside N = 50 µs: one CNP owed, at the interval's end.
        cc.on_arrival(0x12, true, 2_000);
        cc.on_arrival(0x12, true, 3_000);
        assert!(feedback(&mut cc, 3_000).is_empty());
        assert_eq!(cc.receiver_timeout(), Some(51_000));
        assert!(feedback(&mut cc, 50_999).is_empty());
        assert_eq!(feedback(&mut cc, 51_000), [Feedback::Cnp { qp: 0x12 }]);
        assert!(feedback(&mut cc, 200_000).is_empty(), "owed once only");
        // Each receiver QP has its own NP: a mark on the other is answered at once.
        cc.on_arrival(0x14, true, 60_000);
        cc.on_arrival(0x77, true, 60_000);
        assert_eq!(feedback(&mut cc, 60_000), [Feedback::Cnp { qp: 0x14 }], "and an unknown QP none");
        assert_eq!(cc.notification_point(0x12).unwrap().ce_packets(), 3);
    }
}
