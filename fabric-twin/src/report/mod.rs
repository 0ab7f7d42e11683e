//! What a run reports: per QP its completion and transport counters, per port what it sent,
//! per tier ECN marks, drops, PFC frames and the distribution of queue depths, and per pair of
//! tiers how long one tier's PFC frames held the other's ports paused ([`PausedTime`]).
use serde::Serialize;

use fabric_common::pfc::CLASSES;

use crate::{event::Nanos, link::PortCounters};

/// Queue depths in 1 KiB buckets (the last one holds everything deeper).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DepthHistogram {
    buckets: Vec<u64>,
    max: u64,
    samples: u64,
}

impl DepthHistogram {
    const BUCKET_BYTES: u64 = 1024;
    const BUCKETS: usize = 64 * 1024;

    pub fn new() -> Self {
        DepthHistogram { buckets: Vec::new(), max: 0, samples: 0 }
    }

    #[inline]
    pub fn record(&mut self, depth: u64) {
        let b = ((depth / Self::BUCKET_BYTES) as usize).min(Self::BUCKETS - 1);
        if self.buckets.len() <= b {
            self.buckets.resize(b + 1, 0);
        }
        self.buckets[b] += 1;
        self.max = self.max.max(depth);
        self.samples += 1;
    }

    /// The depth below which a fraction `q` of the samples lie (the upper edge of its bucket,
    /// at most the deepest sample).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.samples == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.samples as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return ((i as u64 + 1) * Self::BUCKET_BYTES).min(self.max);
            }
        }
        self.max
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }
}

impl Default for DepthHistogram {
    fn default() -> Self {
        Self::new()
    }
}

/// One QP's outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QpOutcome {
    pub src: usize,
    pub dst: usize,
    pub bytes: u64,
    /// When its last byte was acknowledged (`None`: it did not finish).
    pub completed_ns: Option<Nanos>,
    pub packets_sent: u64,
    pub retransmitted: u64,
    pub timeouts: u64,
    pub naks: u64,
    pub ce_packets: u64,
    pub cnps_received: u64,
    /// The lowest pacing rate its congestion control set.
    pub min_rate_bps: Option<u64>,
    /// The requester failed (retry limit, fatal NAK).
    pub failed: bool,
    /// The responder's view of the network's reordering ([`fabric_roce::reorder`]): packets
    /// that arrived after a higher PSN, the deepest of them in PSNs, and PSNs that came twice.
    pub reordered_packets: u64,
    pub reorder_depth_max: u64,
    pub duplicate_psns: u64,
}

/// What the ports of one tier (switch tiers, then `host`) saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TierReport {
    pub tier: String,
    pub packets: u64,
    pub bytes: u64,
    pub ecn_marked: u64,
    pub drops: u64,
    pub over_headroom: u64,
    /// Packets sent into a paused port (only the XDP testbed's queue model sends any).
    pub sent_while_paused: u64,
    pub pauses_sent: u64,
    pub pauses_received: u64,
    pub max_depth_bytes: u64,
    pub depth_p50_bytes: u64,
    pub depth_p99_bytes: u64,
    #[serde(skip)]
    pub depth: DepthHistogram,
}

impl TierReport {
    /// Adds `other` (the same tier, another step) counted `repeat` times: its counters summed,
    /// its depths (the deepest queue and the depth quantiles) the larger of the two. Every field
    /// is named, so a new one cannot be left out unnoticed.
    pub fn add_repeated(&mut self, other: &TierReport, repeat: u64) {
        let TierReport {
            tier: _,
            packets,
            bytes,
            ecn_marked,
            drops,
            over_headroom,
            sent_while_paused,
            pauses_sent,
            pauses_received,
            max_depth_bytes,
            depth_p50_bytes,
            depth_p99_bytes,
            // Not kept across steps: the quantiles above are each step's own.
            depth: _,
        } = other;
        self.packets += repeat * packets;
        self.bytes += repeat * bytes;
        self.ecn_marked += repeat * ecn_marked;
        self.drops += repeat * drops;
        self.over_headroom += repeat * over_headroom;
        self.sent_while_paused += repeat * sent_while_paused;
        self.pauses_sent += repeat * pauses_sent;
        self.pauses_received += repeat * pauses_received;
        self.max_depth_bytes = self.max_depth_bytes.max(*max_depth_bytes);
        self.depth_p50_bytes = self.depth_p50_bytes.max(*depth_p50_bytes);
        self.depth_p99_bytes = self.depth_p99_bytes.max(*depth_p99_bytes);
    }
}

/// How long the ports of one tier (`paused`) toward another (`pausing`) were held paused by
/// the PFC frames the other tier sent, in one priority class: the paper's "CTSWs pausing
/// RTSWs" is `pausing: ctsw, paused: rtsw`. A pause runs from the frame's arrival to its
/// resume (quanta 0) or expiry; refreshes before it expires extend it, so a pause kept in
/// force by refreshes counts as one continuous pause.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PausedTime {
    pub pausing: String,
    pub paused: String,
    pub class: usize,
    /// Ports of `paused` whose link leads to `pausing`.
    pub ports: u64,
    /// ... of which paused at least once.
    pub ports_paused: u64,
    /// Paused time summed over the ports.
    pub paused_ns: Nanos,
    /// The longest continuous pause of any one port.
    pub longest_pause_ns: Nanos,
    /// `ports` times the time observed (the step's duration, summed over the steps counted):
    /// what `paused_ns` is a share of.
    pub port_ns: Nanos,
    /// `paused_ns / port_ns`: the share of the ports' time spent paused.
    pub paused_share: f64,
}

impl PausedTime {
    /// Adds `other` (the same pair and class) counted `repeat` times.
    pub fn add(&mut self, other: &PausedTime, repeat: u64) {
        self.ports = self.ports.max(other.ports);
        self.ports_paused = self.ports_paused.max(other.ports_paused);
        self.paused_ns += repeat * other.paused_ns;
        self.longest_pause_ns = self.longest_pause_ns.max(other.longest_pause_ns);
        self.port_ns += repeat * other.port_ns;
        self.paused_share = share(self.paused_ns, self.port_ns);
    }
}

fn share(part: Nanos, whole: Nanos) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

/// Per (pausing tier, paused tier, class) with any pause, the paused time of `ports` (the global
/// ports' counters) over `duration_ns`. `tier_of_port(p)` is the tier of the node of port `p`,
/// `peer(p)` the port at its other end.
pub fn paused_time(
    tiers: &[String],
    ports: &[PortCounters],
    tier_of_port: impl Fn(usize) -> usize,
    peer: impl Fn(usize) -> usize,
    duration_ns: Nanos,
) -> Vec<PausedTime> {
    let n = tiers.len();
    // Index (pausing, paused, class); ports per (pausing, paused).
    let mut acc = vec![PausedTime::default(); n * n * CLASSES];
    let mut links = vec![0u64; n * n];
    for (p, c) in ports.iter().enumerate() {
        let (paused, pausing) = (tier_of_port(p), tier_of_port(peer(p)));
        links[pausing * n + paused] += 1;
        for class in 0..CLASSES {
            let a = &mut acc[(pausing * n + paused) * CLASSES + class];
            a.ports_paused += u64::from(c.paused_ns[class] > 0);
            a.paused_ns += c.paused_ns[class];
            a.longest_pause_ns = a.longest_pause_ns.max(c.longest_pause_ns[class]);
        }
    }
    let mut out = Vec::new();
    for (i, mut a) in acc.into_iter().enumerate() {
        if a.paused_ns == 0 {
            continue;
        }
        let (pair, class) = (i / CLASSES, i % CLASSES);
        let (pausing, paused) = (pair / n, pair % n);
        a.pausing = tiers[pausing].clone();
        a.paused = tiers[paused].clone();
        a.class = class;
        a.ports = links[pair];
        a.port_ns = a.ports * duration_ns;
        a.paused_share = share(a.paused_ns, a.port_ns);
        out.push(a);
    }
    out
}

/// One step's outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StepReport {
    /// Every QP completed.
    pub finished: bool,
    /// When the last QP completed (or the run stopped).
    pub completion_ns: Nanos,
    pub qps: Vec<QpOutcome>,
    /// Per global port: what its sending side did.
    #[serde(skip)]
    pub ports: Vec<PortCounters>,
    /// Packets and frame bytes per ECMP member, as the XDP counters count them (empty unless
    /// the routing numbers its members: [`crate::net::Routing::member_slots`]).
    #[serde(skip)]
    pub member_packets: Vec<u64>,
    #[serde(skip)]
    pub member_bytes: Vec<u64>,
    pub tiers: Vec<TierReport>,
    /// Per pair of tiers and class with any pause: how long one held the other paused.
    pub paused: Vec<PausedTime>,
    /// Events handled.
    pub events: u64,
    /// ... by kind, as (name, count).
    pub events_by_kind: Vec<(&'static str, u64)>,
    /// Packets put on a link (every hop of every packet).
    pub packet_hops: u64,
    /// Packets that reached a host.
    pub packets_delivered: u64,
    /// Packets switches had no route for.
    pub unroutable: u64,
    /// Packets lost to a failed link: queued at either end, in flight on it, or routed into it
    /// before the routes were repaired.
    pub lost_to_failures: u64,
    /// Frames lost to injected link loss ([`crate::engine::Twin::set_loss`]).
    pub lost_to_loss: u64,
    /// The most packets in flight at once.
    pub peak_packets: usize,
}

impl StepReport {
    pub fn retransmitted(&self) -> u64 {
        self.qps.iter().map(|q| q.retransmitted).sum()
    }

    /// Packets the responders saw arrive out of order, summed over the QPs.
    pub fn reordered(&self) -> u64 {
        self.qps.iter().map(|q| q.reordered_packets).sum()
    }

    /// The paused time `pausing` held `paused`'s ports in, summed over the classes (zero if it
    /// never paused them).
    pub fn paused_between(&self, pausing: &str, paused: &str) -> PausedTime {
        sum_pairs(&self.paused, pausing, paused)
    }

    /// The deepest reordering any responder saw, PSNs.
    pub fn reorder_depth_max(&self) -> u64 {
        self.qps.iter().map(|q| q.reorder_depth_max).max().unwrap_or(0)
    }
}

/// The entries of `pairs` from `pausing` to `paused`, summed over their classes (ports and
/// `port_ns` are per class, so the largest is kept rather than summed).
pub fn sum_pairs(pairs: &[PausedTime], pausing: &str, paused: &str) -> PausedTime {
    let mut out = PausedTime { pausing: pausing.to_string(), paused: paused.to_string(), ..Default::default() };
    for p in pairs.iter().filter(|p| p.pausing == pausing && p.paused == paused) {
        out.class = p.class;
        out.ports = out.ports.max(p.ports);
        out.ports_paused = out.ports_paused.max(p.ports_paused);
        out.paused_ns += p.paused_ns;
        out.longest_pause_ns = out.longest_pause_ns.max(p.longest_pause_ns);
        out.port_ns = out.port_ns.max(p.port_ns);
    }
    out.paused_share = share(out.paused_ns, out.port_ns);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tier_added_repeatedly_sums_its_counters_and_keeps_the_deepest_queue() {
        let step = |n: u64, depth: u64| TierReport {
            tier: "rtsw".into(),
            packets: n,
            bytes: 2 * n,
            ecn_marked: 3 * n,
            drops: 4 * n,
            over_headroom: 5 * n,
            sent_while_paused: 6 * n,
            pauses_sent: 7 * n,
            pauses_received: 8 * n,
            max_depth_bytes: depth,
            depth_p50_bytes: depth / 4,
            depth_p99_bytes: depth / 2,
            depth: DepthHistogram::new(),
        };
        let mut acc = TierReport { tier: "rtsw".into(), ..Default::default() };
        acc.add_repeated(&step(1, 4096), 3);
        acc.add_repeated(&step(10, 1024), 1);
        let counters = [
            acc.packets,
            acc.bytes,
            acc.ecn_marked,
            acc.drops,
            acc.over_headroom,
            acc.sent_while_paused,
            acc.pauses_sent,
            acc.pauses_received,
        ];
        assert_eq!(counters, [13, 26, 39, 52, 65, 78, 91, 104], "3 x step 1 + 1 x step 2");
        assert_eq!((acc.max_depth_bytes, acc.depth_p50_bytes, acc.depth_p99_bytes), (4096, 1024, 2048));
    }
}
