//! No congestion control on top of PFC: every sender posts all it has at once and keeps the rate
//! it was configured with; marks are counted by the QPs and answered by nobody (Meta's
//! production choice for its training fabric).
use super::control::{CongestionControl, post_everything};

/// PFC only: see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PfcOnly;

impl CongestionControl for PfcOnly {
    fn poll_post(&mut self, _qp: u32, unposted: u64) -> Option<u64> {
        post_everything(unposted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::PacketBuf;

    #[test]
    fn posts_everything_at_once_and_never_answers_or_paces() {
        let mut cc = PfcOnly;
        assert_eq!(cc.add_sender(0x11, 5000, Some(1_000), 0), None, "the configured rate stays");
        assert_eq!(cc.poll_post(0x11, 5000), Some(5000));
        assert_eq!(cc.poll_post(0x11, 0), None, "nothing left");
        for t in [0, 1_000, 1_000_000] {
            cc.on_arrival(0x12, true, t);
            assert_eq!((cc.on_cnp(0x11, t), cc.on_sent(0x11, 1 << 20, t), cc.poll_rate(0x11, t)), (None, None, None));
        }
        let mut out = Vec::new();
        cc.poll_feedback(2_000_000, true, &mut PacketBuf::new(), &mut out);
        assert!(out.is_empty(), "CE marks earn no CNP");
        assert_eq!((cc.sender_timeout(0x11), cc.receiver_timeout(), cc.sets_rate()), (None, None, false));
    }
}
