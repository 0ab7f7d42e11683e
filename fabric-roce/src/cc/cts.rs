//! Receiver-driven admission ("clear to send") behind [`CongestionControl`]: a sender posts a
//! WRITE only for bytes its receiver granted, one chunk per grant; the receiving host hands out
//! its staging buffers to its flows round robin and takes one back per WRITE received. The
//! algorithm and the grant's wire format are [`crate::cts`]'s; this file wires them to the hooks.
use std::collections::BTreeMap;

use super::control::{CongestionControl, Feedback};
use crate::{
    buf::PacketBuf,
    cts::{self, CtsConfig, CtsReceiver, CtsSender, Grant},
    qp::Connection,
};

/// A receiving QP's end, on which its grants go out.
#[derive(Clone, Copy, Debug)]
struct GrantPath {
    connection: Connection,
    /// PSN of the next CTS on this QP.
    seq: u32,
}

/// CTS at one host: see the module docs.
#[derive(Clone, Debug)]
pub struct Cts {
    chunk_bytes: u64,
    receiver: CtsReceiver,
    senders: BTreeMap<u32, CtsSender>,
    paths: BTreeMap<u32, GrantPath>,
    grants: Vec<Grant>,
}

impl Cts {
    /// # Panics
    /// If `config` fails [`CtsConfig::validate`].
    pub fn new(config: CtsConfig) -> Self {
        Cts {
            chunk_bytes: config.buffer_bytes,
            receiver: CtsReceiver::new(config),
            senders: BTreeMap::new(),
            paths: BTreeMap::new(),
            grants: Vec::new(),
        }
    }

    /// The receiving side's admission.
    pub fn receiver(&self) -> &CtsReceiver {
        &self.receiver
    }

    /// What sender `qp` was granted and posted.
    pub fn sender(&self, qp: u32) -> Option<&CtsSender> {
        self.senders.get(&qp)
    }
}

impl CongestionControl for Cts {
    fn add_sender(&mut self, qp: u32, _bytes: u64, _rate_bps: Option<u64>, _now_ns: u64) -> Option<u64> {
        self.senders.insert(qp, CtsSender::default());
        None
    }

    /// Granted bytes only, a chunk at a time.
    fn poll_post(&mut self, qp: u32, unposted: u64) -> Option<u64> {
        if unposted == 0 {
            return None;
        }
        let len = self.senders.get_mut(&qp)?.next_post(self.chunk_bytes.min(unposted))?;
        Some(u64::from(len))
    }

    fn on_control(&mut self, qp: u32, udp_payload: &[u8], _now_ns: u64) {
        if let (Some(sender), Some((_, total))) = (self.senders.get_mut(&qp), cts::parse(udp_payload)) {
            sender.grant(total);
        }
    }

    fn add_receiver(&mut self, connection: &Connection, bytes: u64) {
        self.receiver.add_flow(connection.local_qp, bytes);
        self.paths.insert(connection.local_qp, GrantPath { connection: *connection, seq: 0 });
    }

    /// Each WRITE is one chunk: its buffer is free again.
    fn on_message_received(&mut self, qp: u32, _len: u64, now_ns: u64) {
        self.receiver.on_chunk_received(qp, now_ns);
    }

    /// New grants while buffers are free, then the grants to repeat (nothing heard for the
    /// resend time): none of either while the host takes nothing in.
    fn poll_feedback(&mut self, now_ns: u64, admit: bool, buf: &mut PacketBuf, out: &mut Vec<Feedback>) {
        if !admit {
            return;
        }
        self.grants.clear();
        while let Some(g) = self.receiver.poll_grant(now_ns) {
            self.grants.push(g);
        }
        self.grants.extend(self.receiver.poll_resend(now_ns));
        for g in &self.grants {
            let path = self.paths.get_mut(&g.flow).expect("CTS flows are this host's receivers");
            let packet = cts::emit_into(&path.connection, path.seq, g.granted_total, buf);
            path.seq = path.seq.wrapping_add(1);
            out.push(Feedback::Packet { qp: g.flow, packet });
        }
    }

    fn receiver_timeout(&self) -> Option<u64> {
        self.receiver.poll_timeout()
    }

    fn max_in_flight_bytes(&self) -> u64 {
        self.receiver.max_in_flight_bytes()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::{icrc::IpPair, qp::DEFAULT_PKEY};

    /// The receiver's end of QP `qp`; the sender's QP is `qp + 0x100`.
    fn receiving_end(qp: u32) -> Connection {
        let ip = IpPair::V4 { src: Ipv4Addr::new(198, 18, 0, 6), dst: Ipv4Addr::new(198, 18, 0, 2) };
        Connection { local_qp: qp, remote_qp: qp + 0x100, pkey: DEFAULT_PKEY, ip, udp_src_port: 0xC0DE }
    }

    fn sending_end(qp: u32) -> Connection {
        let r = receiving_end(qp);
        Connection { local_qp: r.remote_qp, remote_qp: r.local_qp, ip: r.ip.reversed(), ..r }
    }

    fn config(channels: u32) -> CtsConfig {
        CtsConfig { channels, buffer_bytes: 1000, resend_after_ns: 10_000 }
    }

    fn feedback(cc: &mut Cts, now: u64, admit: bool) -> Vec<(u32, u32, u64)> {
        let mut out = Vec::new();
        cc.poll_feedback(now, admit, &mut PacketBuf::new(), &mut out);
        out.iter()
            .map(|f| match f {
                Feedback::Packet { qp, packet } => {
                    let (dest_qp, total) = cts::parse(packet).expect("a CTS");
                    assert!(sending_end(*qp).verify_incoming(0xC0DE, packet), "ICRC");
                    (*qp, dest_qp, total)
                }
                Feedback::Cnp { .. } => panic!("CTS sends no CNP"),
            })
            .collect()
    }

    #[test]
    fn a_sender_posts_nothing_before_a_grant_and_then_one_chunk_per_grant() {
        let mut cc = Cts::new(config(2));
        assert_eq!(cc.add_sender(0x112, 2500, Some(1), 0), None, "CTS does not pace");
        assert_eq!(cc.poll_post(0x112, 2500), None, "nothing granted yet");
        let grant = cts::emit(&receiving_end(0x12), 0, 1000);
        cc.on_control(0x112, &grant, 5);
        assert_eq!((cc.poll_post(0x112, 2500), cc.poll_post(0x112, 1500)), (Some(1000), None));
        // Cumulative: a total of 2500 carries everything granted so far, in chunks.
        let grant = cts::emit(&receiving_end(0x12), 1, 2500);
        cc.on_control(0x112, &grant, 6);
        assert_eq!(
            [cc.poll_post(0x112, 1500), cc.poll_post(0x112, 500), cc.poll_post(0x112, 0)],
            [Some(1000), Some(500), None]
        );
        // Not a CTS, or for a QP that sends nothing here: ignored.
        cc.on_control(0x112, &grant[..20], 7);
        cc.on_control(0x42, &grant, 7);
        assert_eq!((cc.poll_post(0x112, 0), cc.poll_post(0x42, 100)), (None, None));
        assert_eq!(cc.sender(0x112).unwrap().posted_bytes(), 2500);
    }

    #[test]
    fn receivers_grant_within_their_channels_take_buffers_back_and_resend() {
        let mut cc = Cts::new(config(2));
        for qp in [0x12, 0x14, 0x16] {
            cc.add_receiver(&receiving_end(qp), 1500);
        }
        assert!(feedback(&mut cc, 0, false).is_empty(), "a host that takes nothing in grants nothing");
        // Two channels: the first two flows get a chunk each, on their own QPs, PSN 0.
        assert_eq!(feedback(&mut cc, 0, true), [(0x12, 0x112, 1000), (0x14, 0x114, 1000)]);
        assert!(feedback(&mut cc, 1, true).is_empty(), "no buffer free");
        assert_eq!(cc.max_in_flight_bytes(), 2000);
        // A WRITE arrives in full: its buffer goes to the next flow in turn.
        cc.on_message_received(0x12, 1000, 100);
        assert_eq!(feedback(&mut cc, 100, true), [(0x16, 0x116, 1000)]);
        // Nothing heard from 0x14 for the resend time: its grant again, same total.
        assert_eq!(cc.receiver_timeout(), Some(10_000));
        assert_eq!(feedback(&mut cc, 10_000, true), [(0x14, 0x114, 1000)]);
        assert_eq!(cc.max_in_flight_bytes(), 2000, "never more than channels x buffer");
        assert!(cc.receiver().in_flight_bytes() <= config(2).bound_bytes());
    }
}
