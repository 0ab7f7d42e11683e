//! Receiver-driven admission ("clear to send"), sans-IO: a sender posts a WRITE only when the
//! receiver has granted it room, so the data in flight toward one receiver never exceeds
//! `channels × buffer_bytes`, however many senders it has. This is the admission Meta describes
//! for its collective library on RoCE: the receiver hands out its staging buffers, one chunk
//! at a time, and the fabric never has to hold an incast.
//!
//! # The receiver ([`CtsReceiver`], one per receiving host)
//!
//! It knows what it expects (in a collective every receive is posted: transfers and their
//! sizes are known), as per-QP flows. It has `channels` buffers of `buffer_bytes`; each grant
//! gives one buffer to one flow, for one chunk (at most `buffer_bytes`), round robin over the
//! flows that still need grants. A buffer comes back when the WRITE of its chunk has arrived in
//! full ([`CtsReceiver::on_chunk_received`]).
//!
//! # On the wire ([`emit`], [`parse`])
//!
//! A grant travels as a RoCE SEND ONLY (opcode 0x04) on the reverse direction of the data QP
//! itself: from the responder's QP to the requester's QP, so no QP numbers are added (another
//! tool predicts them). The payload is 8 bytes, big-endian: the *cumulative* bytes granted to
//! that QP so far. Grants are therefore idempotent and a later one carries every earlier one: a
//! lost CTS is repaired by sending the latest total again ([`CtsReceiver::poll_resend`]), and
//! no PSN tracking or ACK is needed (AckReq clear; the PSN counts the QP's CTS messages). The
//! IP header puts it in the high-priority class (DSCP 48, see [`super::traffic_class`]).
//!
//! # The sender ([`CtsSender`], one per requester QP)
//!
//! On a grant it posts WRITEs for the newly granted bytes, each at most one chunk.
use std::collections::VecDeque;

use bytes::Bytes;
use fabric_common::wire::Field;

use super::{
    buf::PacketBuf,
    icrc,
    psn::Psn,
    qp::{Connection, MAX_WRITE_BYTES},
    wire::{BTH_LEN, BthPacket, BthRepr, ICRC_LEN, opcode},
};

/// Admission settings of a receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtsConfig {
    /// Chunks granted and not yet received, at most.
    pub channels: u32,
    /// Bytes of one chunk (one staging buffer).
    pub buffer_bytes: u64,
    /// A flow with a chunk granted and no data for this long gets its grant again.
    pub resend_after_ns: u64,
}

impl CtsConfig {
    /// The bound on bytes in flight toward one receiver (saturating: a bound, never a wrapped
    /// one, whatever settings a caller has not validated yet).
    pub fn bound_bytes(&self) -> u64 {
        u64::from(self.channels).saturating_mul(self.buffer_bytes)
    }

    /// Refuses settings the admission cannot keep. A buffer larger than the largest single
    /// WRITE ([`MAX_WRITE_BYTES`]) is one: its chunk would go out as several WRITEs, and the
    /// receiver, which frees one buffer per WRITE received, would free buffers for chunks
    /// still on their way and let more than [`Self::bound_bytes`] into flight.
    pub fn validate(&self) -> Result<(), InvalidCtsConfig> {
        if self.channels == 0 {
            return Err(InvalidCtsConfig::NoChannel);
        }
        if self.buffer_bytes == 0 {
            return Err(InvalidCtsConfig::EmptyBuffer);
        }
        if self.buffer_bytes > MAX_WRITE_BYTES {
            return Err(InvalidCtsConfig::BufferOverOneWrite { buffer_bytes: self.buffer_bytes });
        }
        Ok(())
    }
}

/// Why a [`CtsConfig`] was refused ([`CtsConfig::validate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCtsConfig {
    #[error("CTS needs at least one channel")]
    NoChannel,
    #[error("CTS needs a buffer of at least one byte")]
    EmptyBuffer,
    #[error(
        "a CTS buffer of {buffer_bytes} bytes is larger than the largest single WRITE ({MAX_WRITE_BYTES} bytes): \
         its chunk would arrive as several WRITEs, each freeing a buffer"
    )]
    BufferOverOneWrite { buffer_bytes: u64 },
}

/// One grant: the flow's new cumulative total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub flow: u32,
    pub granted_total: u64,
}

#[derive(Clone, Debug)]
struct InboundFlow {
    key: u32,
    bytes: u64,
    granted: u64,
    /// Sizes of chunks granted and not yet received, oldest first.
    chunks: VecDeque<u64>,
    /// Last grant or received chunk: when a resend is due.
    last_activity_ns: u64,
}

/// The admission of one receiver.
#[derive(Clone, Debug)]
pub struct CtsReceiver {
    config: CtsConfig,
    flows: Vec<InboundFlow>,
    /// Round-robin position.
    next: usize,
    granted_bytes: u64,
    received_bytes: u64,
    max_in_flight: u64,
}

impl CtsReceiver {
    /// # Panics
    /// If `config` fails [`CtsConfig::validate`].
    pub fn new(config: CtsConfig) -> Self {
        if let Err(e) = config.validate() {
            panic!("{e}");
        }
        CtsReceiver { config, flows: Vec::new(), next: 0, granted_bytes: 0, received_bytes: 0, max_in_flight: 0 }
    }

    pub fn config(&self) -> &CtsConfig {
        &self.config
    }

    /// Expects `bytes` on flow `key` (the local QP number, say).
    pub fn add_flow(&mut self, key: u32, bytes: u64) {
        self.flows.push(InboundFlow { key, bytes, granted: 0, chunks: VecDeque::new(), last_activity_ns: 0 });
    }

    fn chunks_out(&self) -> usize {
        self.flows.iter().map(|f| f.chunks.len()).sum()
    }

    /// Bytes granted and not yet received.
    pub fn in_flight_bytes(&self) -> u64 {
        self.granted_bytes - self.received_bytes
    }

    /// The most bytes ever granted and not yet received at once.
    pub fn max_in_flight_bytes(&self) -> u64 {
        self.max_in_flight
    }

    /// The next grant, if a buffer is free and a flow still needs one.
    pub fn poll_grant(&mut self, now_ns: u64) -> Option<Grant> {
        if self.chunks_out() >= self.config.channels as usize || self.flows.is_empty() {
            return None;
        }
        let n = self.flows.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let f = &mut self.flows[i];
            if f.granted < f.bytes {
                let chunk = (f.bytes - f.granted).min(self.config.buffer_bytes);
                f.granted += chunk;
                f.chunks.push_back(chunk);
                f.last_activity_ns = now_ns;
                let grant = Grant { flow: f.key, granted_total: f.granted };
                self.granted_bytes += chunk;
                self.max_in_flight = self.max_in_flight.max(self.in_flight_bytes());
                self.next = (i + 1) % n;
                return Some(grant);
            }
        }
        None
    }

    /// The oldest chunk granted to `key` arrived in full (its WRITE completed): its buffer is
    /// free. Returns whether a chunk was outstanding.
    pub fn on_chunk_received(&mut self, key: u32, now_ns: u64) -> bool {
        let Some(f) = self.flows.iter_mut().find(|f| f.key == key) else {
            return false;
        };
        let Some(chunk) = f.chunks.pop_front() else {
            return false;
        };
        f.last_activity_ns = now_ns;
        self.received_bytes += chunk;
        true
    }

    /// Grants to send again: flows with a chunk outstanding and nothing heard for
    /// `resend_after_ns` (the CTS, or the data, was lost).
    pub fn poll_resend(&mut self, now_ns: u64) -> Vec<Grant> {
        let after = self.config.resend_after_ns;
        let mut again = Vec::new();
        for f in &mut self.flows {
            if !f.chunks.is_empty() && now_ns >= f.last_activity_ns.saturating_add(after) {
                f.last_activity_ns = now_ns;
                again.push(Grant { flow: f.key, granted_total: f.granted });
            }
        }
        again
    }

    /// When [`Self::poll_resend`] may next have something.
    pub fn poll_timeout(&self) -> Option<u64> {
        let after = self.config.resend_after_ns;
        self.flows.iter().filter(|f| !f.chunks.is_empty()).map(|f| f.last_activity_ns.saturating_add(after)).min()
    }

    /// Whether every expected byte has been granted and received.
    pub fn is_done(&self) -> bool {
        self.flows.iter().all(|f| f.granted == f.bytes && f.chunks.is_empty())
    }
}

/// The sending side of one QP under CTS: what has been granted and posted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtsSender {
    granted: u64,
    posted: u64,
}

impl CtsSender {
    /// A grant of cumulative total `granted_total` arrived: the WRITE lengths to post now (each
    /// at most `chunk_bytes`), nothing for a stale or repeated grant.
    pub fn on_grant(&mut self, granted_total: u64, chunk_bytes: u64) -> Vec<u32> {
        self.grant(granted_total);
        std::iter::from_fn(|| self.next_post(chunk_bytes)).collect()
    }

    /// A grant of cumulative total `granted_total` arrived (stale and repeated ones change
    /// nothing); [`Self::next_post`] hands out what it allows.
    pub fn grant(&mut self, granted_total: u64) {
        self.granted = self.granted.max(granted_total);
    }

    /// The next WRITE to post (at most `chunk_bytes`, at most [`MAX_WRITE_BYTES`]), counted as posted; `None`
    /// once everything granted is posted.
    pub fn next_post(&mut self, chunk_bytes: u64) -> Option<u32> {
        if self.posted >= self.granted {
            return None;
        }
        let len = (self.granted - self.posted).min(chunk_bytes.clamp(1, MAX_WRITE_BYTES));
        self.posted += len;
        Some(len as u32)
    }

    pub fn posted_bytes(&self) -> u64 {
        self.posted
    }
}

/// The SEND payload of a CTS: the cumulative grant, big-endian, right after the BTH.
const GRANTED_TOTAL: Field = BTH_LEN..BTH_LEN + 8;

/// Bytes of a CTS UDP payload: BTH, 8 bytes of payload, ICRC.
pub const CTS_LEN: usize = GRANTED_TOTAL.end + ICRC_LEN;

/// A CTS from `connection` (the receiver's end of the QP) to its peer: SEND ONLY, cumulative
/// `granted_total`, with PSN `seq` and the ICRC filled in.
pub fn emit(connection: &Connection, seq: u32, granted_total: u64) -> Vec<u8> {
    let mut bytes = vec![0; CTS_LEN];
    write(connection, seq, granted_total, &mut bytes);
    bytes
}

/// [`emit`] written into `buf`.
pub fn emit_into(connection: &Connection, seq: u32, granted_total: u64, buf: &mut PacketBuf) -> Bytes {
    buf.packet(CTS_LEN, |bytes| write(connection, seq, granted_total, bytes))
}

/// Writes a CTS into `bytes` (zeroed, [`CTS_LEN`] long).
fn write(connection: &Connection, seq: u32, granted_total: u64, bytes: &mut [u8]) {
    BthRepr {
        opcode: opcode::RC_SEND_ONLY,
        solicited: false,
        migreq: false,
        pad_count: 0,
        pkey: connection.pkey,
        fecn: false,
        becn: false,
        dest_qp: connection.remote_qp,
        ack_req: false,
        psn: Psn::new(seq & Psn::MASK),
    }
    .emit(&mut BthPacket::new_unchecked(&mut *bytes));
    bytes[GRANTED_TOTAL].copy_from_slice(&granted_total.to_be_bytes());
    icrc::write_icrc(connection.ip, connection.udp_src_port, bytes);
}

/// A CTS's destination QP and cumulative grant; `None` if the payload is not a CTS.
pub fn parse(udp_payload: &[u8]) -> Option<(u32, u64)> {
    if udp_payload.len() != CTS_LEN {
        return None;
    }
    let bth = BthRepr::parse(&BthPacket::new_checked(udp_payload).ok()?).ok()?;
    if bth.opcode != opcode::RC_SEND_ONLY || bth.pad_count != 0 {
        return None;
    }
    let total = u64::from_be_bytes(udp_payload[GRANTED_TOTAL].try_into().ok()?);
    Some((bth.dest_qp, total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{icrc::IpPair, qp::DEFAULT_PKEY};

    fn config(channels: u32, buffer_bytes: u64) -> CtsConfig {
        CtsConfig { channels, buffer_bytes, resend_after_ns: 1_000 }
    }

    /// Eight senders into one receiver, chunks arriving in a scrambled order: in flight never
    /// exceeds channels x buffer, every byte is granted once, and flows take turns.
    #[test]
    fn in_flight_stays_within_channels_times_buffer() {
        let cfg = config(4, 64 * 1024);
        let mut rx = CtsReceiver::new(cfg);
        let sizes: Vec<u64> = (0..8).map(|i| 100_000 + i * 77_777).collect();
        for (k, &b) in sizes.iter().enumerate() {
            rx.add_flow(k as u32, b);
        }
        let mut senders = vec![CtsSender::default(); sizes.len()];
        let mut posted: Vec<(u32, u32)> = Vec::new(); // (flow, WRITE length) in flight
        let mut order = Vec::new();
        let mut rng = fabric_common::rng::SplitMix64(7);
        let mut now = 0;
        while !rx.is_done() {
            now += 10;
            while let Some(g) = rx.poll_grant(now) {
                order.push(g.flow);
                for len in senders[g.flow as usize].on_grant(g.granted_total, cfg.buffer_bytes) {
                    posted.push((g.flow, len));
                }
                let writes: u64 = posted.iter().map(|p| u64::from(p.1)).sum();
                assert!(writes <= cfg.bound_bytes(), "{writes} bytes of WRITEs posted at once");
                assert!(rx.in_flight_bytes() <= cfg.bound_bytes());
            }
            // Some flow's oldest chunk completes (per-flow order holds on an RC QP).
            assert!(!posted.is_empty(), "nothing in flight and not done: a stall");
            let i = rng.below(posted.len());
            let flow = posted[i].0;
            let first = posted.iter().position(|p| p.0 == flow).unwrap();
            posted.remove(first);
            assert!(rx.on_chunk_received(flow, now));
        }
        assert_eq!(rx.max_in_flight_bytes(), cfg.bound_bytes(), "the bound is reached, not exceeded");
        for (s, &b) in senders.iter().zip(&sizes) {
            assert_eq!(s.posted_bytes(), b);
        }
        assert_eq!(&order[..4], &[0, 1, 2, 3], "round robin from the first flow");
        assert!(!rx.on_chunk_received(0, now), "nothing outstanding");
    }

    #[test]
    fn grants_are_cumulative_idempotent_and_resent() {
        let mut s = CtsSender::default();
        assert_eq!(s.on_grant(3000, 1024), [1024, 1024, 952], "a lost grant is carried by the next");
        assert!(s.on_grant(3000, 1024).is_empty(), "repeated");
        assert!(s.on_grant(2000, 1024).is_empty(), "stale");
        assert_eq!(s.on_grant(3500, 1024), [500]);

        let mut rx = CtsReceiver::new(config(1, 1000));
        rx.add_flow(9, 2500);
        assert_eq!(rx.poll_grant(0), Some(Grant { flow: 9, granted_total: 1000 }));
        assert_eq!(rx.poll_grant(0), None, "one channel");
        assert!(rx.poll_resend(999).is_empty());
        assert_eq!(rx.poll_timeout(), Some(1000));
        assert_eq!(rx.poll_resend(1000), [Grant { flow: 9, granted_total: 1000 }]);
        assert!(rx.on_chunk_received(9, 1500));
        assert_eq!(rx.poll_grant(1500), Some(Grant { flow: 9, granted_total: 2000 }));
        assert!(rx.on_chunk_received(9, 1600));
        assert_eq!(rx.poll_grant(1600), Some(Grant { flow: 9, granted_total: 2500 }));
        assert!(rx.on_chunk_received(9, 1700));
        assert!(rx.is_done() && rx.poll_grant(2000).is_none() && rx.poll_timeout().is_none());
    }

    #[test]
    fn cts_wire_format() {
        let c = Connection {
            local_qp: 0x12,
            remote_qp: 0x11,
            pkey: DEFAULT_PKEY,
            ip: IpPair::V4 { src: "198.18.0.6".parse().unwrap(), dst: "198.18.0.2".parse().unwrap() },
            udp_src_port: 0xC123,
        };
        let b = emit(&c, 5, 0x0102_0304_0506);
        assert_eq!(b.len(), 24);
        assert_eq!(b[0], 0x04, "SEND ONLY");
        assert_eq!(&b[5..8], &[0, 0, 0x11]);
        assert_eq!(b[8] & 0x80, 0, "no AckReq");
        assert_eq!(&b[12..20], &0x0102_0304_0506u64.to_be_bytes());
        assert_eq!(parse(&b), Some((0x11, 0x0102_0304_0506)));
        // The peer's end verifies the ICRC like any packet of the QP.
        let peer = Connection { local_qp: 0x11, remote_qp: 0x12, ip: c.ip.reversed(), ..c };
        assert!(peer.verify_incoming(0xC123, &b));
        assert_eq!(parse(&b[..20]), None);
        let mut write = b.clone();
        write[0] = opcode::RC_WRITE_ONLY;
        assert_eq!(parse(&write), None);
    }

    /// A buffer larger than one WRITE would be sent as several WRITEs, each freeing a buffer at
    /// the receiver: refused, and the largest WRITE itself accepted.
    #[test]
    fn a_buffer_larger_than_one_write_is_refused() {
        assert_eq!(config(4, MAX_WRITE_BYTES).validate(), Ok(()));
        assert_eq!(
            config(4, MAX_WRITE_BYTES + 1).validate(),
            Err(InvalidCtsConfig::BufferOverOneWrite { buffer_bytes: MAX_WRITE_BYTES + 1 })
        );
        assert_eq!(config(0, 1).validate(), Err(InvalidCtsConfig::NoChannel));
        assert_eq!(config(1, 0).validate(), Err(InvalidCtsConfig::EmptyBuffer));
        let refused = std::panic::catch_unwind(|| CtsReceiver::new(config(1, 2 * MAX_WRITE_BYTES)));
        assert!(refused.is_err(), "nor does a receiver take it");
    }
}
