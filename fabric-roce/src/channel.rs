//! A requester and a responder joined by a modelled link that reorders, loses and duplicates
//! data packets: the pure harness behind the reorder-tolerant transport's tests and the
//! measurement of what reordering costs each transport (`cargo run -p fabric-roce --example
//! reordering`).
//!
//! The requester is paced at the link's rate, so data packets leave one serialization time
//! apart; each then takes the propagation delay plus, with a reorder window of `k`, a seeded
//! uniform extra of 0..=k packet times: packets overtake one another by up to k - 1 positions
//! (k = 0 and 1: in order). ACKs come back in order after the propagation delay. Every data
//! packet's payload is replaced by bytes that name its message and true offset, so the
//! responder's memory shows whether each byte landed where it belongs.
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{
    icrc::IpPair,
    pacer::PacerConfig,
    qp::{Completion, Connection, DEFAULT_PKEY, ReceivedWrite, Requester, RequesterConfig, Responder, ResponderConfig},
    segment,
    transport::Transport,
    wire::{Body, RocePacketRepr},
};

/// Where the messages are written on the responder, one after the other.
pub const REMOTE_ADDR: u64 = 0x10_0000;

/// The seeded generator of the channel's reorderings and losses (the same seed, the same
/// reordering): the workspace's one SplitMix64.
pub use fabric_common::rng::SplitMix64 as SplitMix;

/// What the link does to data packets; see the module docs.
#[derive(Clone, Debug)]
pub struct ChannelConfig {
    pub transport: Transport,
    pub rate_bps: u64,
    pub delay_ns: u64,
    /// k: packets overtake one another by up to k - 1 positions.
    pub reorder_window: u32,
    pub seed: u64,
    /// PSNs whose first transmission is lost.
    pub lose_first_try: BTreeSet<u32>,
    /// PSNs whose first retransmission is lost as well.
    pub lose_first_resend: BTreeSet<u32>,
    /// Data packets (by sending order, from 0) delivered twice.
    pub duplicate: BTreeSet<usize>,
    pub window_packets: u32,
    /// Stop (and report unfinished) after this much modelled time.
    pub give_up_ns: u64,
}

impl ChannelConfig {
    /// 100 Gbit/s, 2 µs each way, in order, nothing lost, a window of 128 packets.
    pub fn new(transport: Transport) -> Self {
        ChannelConfig {
            transport,
            rate_bps: 100_000_000_000,
            delay_ns: 2_000,
            reorder_window: 0,
            seed: 1,
            lose_first_try: BTreeSet::new(),
            lose_first_resend: BTreeSet::new(),
            duplicate: BTreeSet::new(),
            window_packets: 128,
            give_up_ns: 10_000_000_000,
        }
    }
}

/// How a transfer went.
#[derive(Clone, Debug)]
pub struct TransferReport {
    pub completions: Vec<Completion>,
    pub received: Vec<ReceivedWrite>,
    /// When the last message completed at the requester (or when the run gave up).
    pub finished_ns: u64,
    pub bytes: u64,
    pub requester: super::qp::RequesterCounters,
    pub responder: super::qp::ResponderCounters,
    /// PSN of every retransmitted packet, in sending order.
    pub retransmitted_psns: Vec<u32>,
    /// The responder's memory at the end, and what it should hold.
    pub memory: Vec<u8>,
    pub expected_memory: Vec<u8>,
}

impl TransferReport {
    pub fn goodput_bps(&self) -> f64 {
        self.bytes as f64 * 8.0 / (self.finished_ns.max(1) as f64 * 1e-9)
    }
}

/// The byte message `msg` holds at `offset` (never the memory's initial zero... mostly: a
/// mismatch needs more than one coincidence).
fn pattern(msg: usize, offset: u64) -> u8 {
    ((offset.wrapping_mul(131) ^ (msg as u64).wrapping_mul(0x9D)) % 251) as u8 + 1
}

fn ends(local_qp: u32, remote_qp: u32, src: [u8; 4], dst: [u8; 4]) -> Connection {
    Connection {
        local_qp,
        remote_qp,
        pkey: DEFAULT_PKEY,
        ip: IpPair::V4 { src: src.into(), dst: dst.into() },
        udp_src_port: 0xC000,
    }
}

/// A data packet on the link: its arrival time, a tie-breaker, the packet, and its payload.
type InFlight = (u64, u64, RocePacketRepr<'static>, Vec<u8>);

/// The packet with `payload` in place of its own.
fn with_payload<'a>(packet: &RocePacketRepr<'static>, payload: &'a [u8]) -> RocePacketRepr<'a> {
    let body = match packet.body {
        Body::WriteFirst { reth, .. } => Body::WriteFirst { reth, payload },
        Body::WriteMiddle { .. } => Body::WriteMiddle { payload },
        Body::WriteLast { .. } => Body::WriteLast { payload },
        Body::WriteOnly { reth, .. } => Body::WriteOnly { reth, payload },
        Body::WriteMiddleAt { reth, .. } => Body::WriteMiddleAt { reth, payload },
        Body::WriteLastAt { reth, .. } => Body::WriteLastAt { reth, payload },
        other => other,
    };
    RocePacketRepr { bth: packet.bth, body }
}

/// Sends messages of `sizes` bytes through the channel until all complete (or `give_up_ns`).
pub fn transfer(sizes: &[u32], cfg: &ChannelConfig) -> TransferReport {
    let mut rc = RequesterConfig::new(ends(1, 2, [198, 18, 0, 1], [198, 18, 0, 2]));
    rc.transport = cfg.transport;
    rc.window_packets = cfg.window_packets;
    rc.remote_addr = REMOTE_ADDR;
    rc.pacer = Some(PacerConfig { rate_bps: cfg.rate_bps, burst_bytes: 1 });
    let mut sc = ResponderConfig::new(ends(2, 1, [198, 18, 0, 2], [198, 18, 0, 1]));
    sc.transport = cfg.transport;
    let total: usize = sizes.iter().map(|&s| s as usize).sum();
    let (mut req, mut resp) = (Requester::new(rc), Responder::new(sc).with_memory(REMOTE_ADDR, total));

    // Ground truth: each PSN's message and offset, and the memory the messages leave.
    let mut truth = BTreeMap::new();
    let mut expected_memory = Vec::with_capacity(total);
    let mut psn = rc.first_psn;
    for (msg, &len) in sizes.iter().enumerate() {
        let at = REMOTE_ADDR + expected_memory.len() as u64;
        req.post_write_at(msg as u64, len, at).expect("room for the messages");
        for seg in segment::segments(len, rc.mtu, psn) {
            truth.insert(seg.psn.value(), (msg, u64::from(seg.offset)));
        }
        psn += segment::packet_count(len, rc.mtu);
        expected_memory.extend((0..u64::from(len)).map(|offset| pattern(msg, offset)));
    }

    let packet_ns = |bytes: usize| (bytes as u64 + u64::from(rc.wire_overhead_bytes)) * 8_000_000_000 / cfg.rate_bps;
    let mut rng = SplitMix::new(cfg.seed);
    let mut to_responder: BTreeSet<(u64, u64)> = BTreeSet::new();
    let mut in_flight: BTreeMap<(u64, u64), InFlight> = BTreeMap::new();
    let mut to_requester: VecDeque<(u64, RocePacketRepr<'static>)> = VecDeque::new();
    let mut tries: BTreeMap<u32, u32> = BTreeMap::new();
    let (mut now, mut sent, mut seq) = (0u64, 0usize, 0u64);
    let mut report = TransferReport {
        completions: Vec::new(),
        received: Vec::new(),
        finished_ns: 0,
        bytes: sizes.iter().map(|&s| u64::from(s)).sum(),
        requester: Default::default(),
        responder: Default::default(),
        retransmitted_psns: Vec::new(),
        memory: Vec::new(),
        expected_memory,
    };
    while req.outstanding_messages() > 0 && now < cfg.give_up_ns && req.failure().is_none() {
        while let Some(p) = req.poll_transmit_repr(now) {
            let psn = p.bth.psn.value();
            let try_count = tries.entry(psn).or_insert(0);
            *try_count += 1;
            if *try_count > 1 {
                report.retransmitted_psns.push(psn);
            }
            let copies = if cfg.duplicate.contains(&sent) { 2 } else { 1 };
            let lost = match *try_count {
                1 => cfg.lose_first_try.contains(&psn),
                2 => cfg.lose_first_resend.contains(&psn),
                _ => false,
            };
            sent += 1;
            if lost {
                continue;
            }
            let (msg, offset) = truth[&psn];
            let payload: Vec<u8> = (0..p.body.payload().len() as u64).map(|i| pattern(msg, offset + i)).collect();
            for _ in 0..copies {
                let extra = if cfg.reorder_window > 0 { rng.below(cfg.reorder_window as usize + 1) as u64 } else { 0 };
                let at = now + cfg.delay_ns + extra * packet_ns(p.buffer_len());
                seq += 1;
                to_responder.insert((at, seq));
                in_flight.insert((at, seq), (at, seq, p, payload.clone()));
            }
        }
        while let Some(&key) = to_responder.first().filter(|(t, _)| *t <= now) {
            to_responder.remove(&key);
            let (_, _, p, payload) = in_flight.remove(&key).expect("queued");
            if let Some(r) = resp.on_repr(&with_payload(&p, &payload), now) {
                to_requester.push_back((now + cfg.delay_ns, r));
            }
        }
        while let Some((_, r)) = to_requester.front().filter(|(t, _)| *t <= now).copied() {
            to_requester.pop_front();
            let done = req.on_repr(&r, now);
            report.finished_ns = done.last().map_or(report.finished_ns, |c| c.completed_ns);
            report.completions.extend(done);
        }
        let next = [req.poll_timeout(now), to_responder.first().map(|k| k.0), to_requester.front().map(|r| r.0)]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(t) => now = t.max(now + 1).min(cfg.give_up_ns),
            None => break,
        }
    }
    if req.outstanding_messages() > 0 {
        report.finished_ns = now;
    }
    report.received = std::iter::from_fn(|| resp.poll_completion()).collect();
    report.requester = *req.counters();
    report.responder = *resp.counters();
    report.memory = resp.memory().expect("given memory").to_vec();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_seeded_and_spreads() {
        let (mut a, mut b) = (SplitMix::new(7), SplitMix::new(7));
        let xs: Vec<usize> = (0..1000).map(|_| a.below(8)).collect();
        assert_eq!(xs, (0..1000).map(|_| b.below(8)).collect::<Vec<_>>());
        for v in 0..8 {
            let n = xs.iter().filter(|&&x| x == v).count();
            assert!((90..160).contains(&n), "{v} drawn {n} times of 1000");
        }
    }
}
