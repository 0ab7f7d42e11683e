//! What a run reports: per QP its completion and transport counters, per port what it sent,
//! per tier ECN marks, drops, PFC frames and the distribution of queue depths.
use serde::Serialize;

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
    pub pauses_sent: u64,
    pub pauses_received: u64,
    pub max_depth_bytes: u64,
    pub depth_p50_bytes: u64,
    pub depth_p99_bytes: u64,
    #[serde(skip)]
    pub depth: DepthHistogram,
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

    /// The deepest reordering any responder saw, PSNs.
    pub fn reorder_depth_max(&self) -> u64 {
        self.qps.iter().map(|q| q.reorder_depth_max).max().unwrap_or(0)
    }
}
