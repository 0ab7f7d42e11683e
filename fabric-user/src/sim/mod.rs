//! `fabric sim`: the workloads of `fabric run` on a flow-level model of a fabric of any size,
//! with the data path's own hash and the controller's own group layout.
//!
//! What is shared with the real thing, so that at testbed scale the prediction is exact
//! (`tests/sim.rs` checks it against the XDP member counters, packet for packet):
//! - the fabric: [`crate::model::plan::Plan`] (node ids, ports, addresses, per-switch seeds via
//!   [`crate::model::plan::switch_seed`]) and the controller's ECMP groups in installed order
//!   ([`crate::forwarding::fabric::SimFabric`]);
//! - the member choice: [`fabric_common::hash::select_member`] on the packet the switch parses,
//!   under the [`fabric_common::config::SwitchConfig`] `fabric run --hash --hash-seed` installs;
//! - the flows: [`crate::endpoint::engine::plan_qps`] (QP numbers, UDP source ports, striping),
//!   [`crate::model::workload::schedule`] and [`crate::model::placement::Placement`]; both directions of
//!   every QP (WRITEs and ACKs), with the frames the RoCE state machines emit ([`crate::forwarding::flows::qp_wire`]).
//!
//! The model behind the times (an estimate, not a packet simulation):
//! - flow level: a QP's data direction is one fluid flow, all flows of a step start together,
//!   a step ends when its last flow ends (the engine's step barrier), steps run back to back;
//! - no queueing, no loss, no PFC/ECN, no pacing and no CPU limits: every flow takes its
//!   max-min fair share of every link (progressive filling, recomputed as flows finish), i.e.
//!   an ideal congestion control over the links' rates as the topology states them;
//! - ACKs count towards the link loads and member counters but not towards the fair share;
//! - a hash collision costs what it costs a fluid flow: the colliding flows split the link.
//!
//! Imbalance is reported per tier, over every ECMP group with two or more members that carried
//! bytes: max/mean and Jain's index of the bytes on its members, averaged over groups, and the
//! worst group's max/mean.
pub mod cli;
pub mod fairshare;
pub mod packet;
pub mod record;
pub mod schedule;
pub mod tenants;
pub mod trace;
pub mod whatif;

use std::time::Instant;

use anyhow::{Context as _, Result, ensure};
use fabric_common::config::HashMode;
use fabric_twin::report::{PausedTime, StepReport, TierReport};
use serde::Serialize;

use self::fairshare::{Paths, completion_time};
use crate::forwarding::{
    fabric::SimFabric,
    flows::{Direction, step_flows},
    route,
};
use crate::{
    endpoint::EndpointOptions,
    model::balance::summarize,
    model::placement::Placement,
    model::plan::{NodeId, Role},
    model::workload::HostTransfer,
    model::workload::{Collective, Transfer, schedule_runs},
};

/// One simulated case.
#[derive(Clone, Debug, Serialize)]
pub struct SimOptions {
    pub collective: Collective,
    /// Ranks (default: every host).
    pub ranks: Option<usize>,
    pub message_bytes: u64,
    pub placement: Placement,
    /// Workload seed (permutation).
    pub seed: u64,
    #[serde(with = "crate::model::topology::hash_mode_serde")]
    pub hash: HashMode,
    /// Re-seed the switches as `fabric run --hash-seed` does (default: the topology's seeds).
    pub hash_seed: Option<u32>,
    pub endpoint: EndpointOptions,
}

/// Load per ECMP group member: packets and frame bytes, indexed by [`SimFabric::slot`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberLoad {
    pub packets: Vec<u64>,
    pub bytes: Vec<u64>,
}

impl MemberLoad {
    pub fn new(fabric: &SimFabric) -> Self {
        MemberLoad { packets: vec![0; fabric.slot_count()], bytes: vec![0; fabric.slot_count()] }
    }
}

/// Balance of one tier's ECMP groups.
#[derive(Clone, Debug, Serialize)]
pub struct TierBalance {
    pub tier: &'static str,
    /// Groups of two or more members that carried bytes.
    pub groups: usize,
    pub mean_max_over_mean: f64,
    pub worst_max_over_mean: f64,
    pub mean_jain: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SimResult {
    pub case: String,
    /// `flow` (max-min fair share) or `packet` (the twin).
    pub model: &'static str,
    pub topology: String,
    pub hosts: usize,
    pub ranks: usize,
    pub collective: &'static str,
    pub hash: &'static str,
    pub qps: u32,
    pub sport: &'static str,
    pub message_bytes: u64,
    pub steps: usize,
    /// Steps that differ from their predecessor (the others reuse its result).
    pub distinct_steps: usize,
    /// QPs of the largest step.
    pub qps_per_step: usize,
    pub tiers: Vec<TierBalance>,
    /// Modelled completion time of one iteration, seconds.
    pub completion_s: f64,
    /// Modelled duration of each distinct step, seconds.
    pub step_s: Vec<f64>,
    /// Fair-share recomputations over all distinct steps.
    pub fair_share_rounds: usize,
    /// Wall time of this simulation, seconds.
    pub wall_s: f64,
    /// The packet model's own results (`None` for the flow model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packet: Option<PacketStats>,
    /// The flow model's what-if (`--flap`, time-sliced): the job with the event, where every
    /// other field is the job without it. The packet model's is in `packet`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whatif: Option<WhatIfReport>,
}

/// What the twin adds to a case's result.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PacketStats {
    pub cc: &'static str,
    /// The endpoints' reliability, `gbn` or `ooo`.
    pub transport: &'static str,
    pub link_delay_ns: u64,
    /// Every QP of every distinct step completed.
    pub finished: bool,
    /// Per distinct step, per QP: completion time, seconds (`None`: did not finish).
    pub flow_completion_s: Vec<Vec<Option<f64>>>,
    /// Over one iteration (distinct steps times their repeats).
    pub ecn_marks: u64,
    pub drops: u64,
    /// Frames lost to injected link loss (`--loss`), the testbed's `link_loss`.
    pub link_loss: u64,
    /// Packets a switch had no route for (a what-if's failure cut a host off until the routes
    /// were repaired, or for good): dropped there.
    pub unroutable: u64,
    pub retransmissions: u64,
    /// What the responders saw of the network's reordering ([`fabric_roce::reorder`]): packets
    /// that arrived after a higher PSN, the deepest of them (PSNs), PSNs that arrived twice.
    pub reordered_packets: u64,
    pub reorder_depth_max: u64,
    pub duplicate_psns: u64,
    pub timeouts: u64,
    /// NAKs the requesters received (a receiver saw a gap: a packet lost or overtaken).
    pub naks: u64,
    pub cnps: u64,
    /// Per switch tier (and `host`): PFC frames sent and received, queue depths.
    pub tiers: Vec<TierReport>,
    /// Per pair of tiers and class with any pause, over one iteration: how long the pausing
    /// tier's PFC frames held the paused tier's ports (`pausing: ctsw, paused: rtsw` is the
    /// paper's "CTSWs pausing RTSWs"), the longest continuous pause, the share of time paused.
    pub paused: Vec<PausedTime>,
    /// Simulation effort over the distinct steps.
    pub events: u64,
    pub events_by_kind: Vec<(&'static str, u64)>,
    pub packet_hops: u64,
    pub peak_packets: usize,
    /// `--fail-at` / `--drain-at` / `--flap`: the job with the event, where every other field
    /// (of this and of the case) is the job without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whatif: Option<WhatIfReport>,
}

impl PacketStats {
    /// Adds a distinct step repeated `repeat` times.
    pub fn add_step(&mut self, r: &StepReport, repeat: u64) {
        self.finished &= r.finished;
        self.flow_completion_s.push(r.qps.iter().map(|q| q.completed_ns.map(|t| t as f64 * 1e-9)).collect());
        let tiers_sum = |f: fn(&TierReport) -> u64| r.tiers.iter().map(f).sum::<u64>();
        self.ecn_marks += repeat * tiers_sum(|t| t.ecn_marked);
        self.drops += repeat * tiers_sum(|t| t.drops);
        self.link_loss += repeat * r.lost_to_loss;
        self.unroutable += repeat * r.unroutable;
        self.retransmissions += repeat * r.retransmitted();
        self.reordered_packets += repeat * r.reordered();
        self.reorder_depth_max = self.reorder_depth_max.max(r.reorder_depth_max());
        self.duplicate_psns += repeat * r.qps.iter().map(|q| q.duplicate_psns).sum::<u64>();
        self.timeouts += repeat * r.qps.iter().map(|q| q.timeouts).sum::<u64>();
        self.cnps += repeat * r.qps.iter().map(|q| q.cnps_received).sum::<u64>();
        self.naks += repeat * r.qps.iter().map(|q| q.naks).sum::<u64>();
        if self.tiers.is_empty() {
            self.tiers = r.tiers.iter().map(|t| TierReport { tier: t.tier.clone(), ..Default::default() }).collect();
        }
        for (acc, t) in self.tiers.iter_mut().zip(&r.tiers) {
            acc.add_repeated(t, repeat);
        }
        for p in &r.paused {
            let same = |a: &&mut PausedTime| a.pausing == p.pausing && a.paused == p.paused && a.class == p.class;
            match self.paused.iter_mut().find(same) {
                Some(acc) => acc.add(p, repeat),
                None => {
                    let mut acc = PausedTime { paused_ns: 0, port_ns: 0, ..p.clone() };
                    acc.add(p, repeat);
                    self.paused.push(acc);
                }
            }
        }
        self.events += r.events;
        if self.events_by_kind.is_empty() {
            self.events_by_kind = r.events_by_kind.iter().map(|(k, _)| (*k, 0)).collect();
        }
        for (acc, (_, n)) in self.events_by_kind.iter_mut().zip(&r.events_by_kind) {
            acc.1 += n;
        }
        self.packet_hops += r.packet_hops;
        self.peak_packets = self.peak_packets.max(r.peak_packets);
    }
}

/// `--fail-at`, `--drain-at` or `--flap` ([`whatif`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WhatIfKind {
    Fail,
    Drain,
    /// Down for the first half of each period, `count` periods.
    Flap,
}

/// What an event did to one case's job.
#[derive(Clone, Debug, Serialize)]
pub struct WhatIfReport {
    pub kind: WhatIfKind,
    pub target: String,
    pub at_ns: u64,
    /// Fail, flap: from the failure to the repaired routes (drain: 0).
    pub detect_ns: u64,
    /// Whether the routes changed at all: a flap whose outages are shorter than the detection
    /// time never reroutes (its frames are lost to the link until it is up again).
    pub rerouted: bool,
    /// Flap: its period and how many periods (0 otherwise).
    pub period_ns: u64,
    pub count: u32,
    /// The links it took away.
    pub links: Vec<String>,
    /// One iteration, without and with the event, seconds.
    pub baseline_completion_s: f64,
    pub completion_s: f64,
    /// completion / baseline - 1.
    pub slowdown: f64,
    /// Every QP of every step completed (every byte delivered).
    pub finished: bool,
    /// Steps whose time the event changed; `None` (left out of the JSON) where the model does
    /// not follow steps (the flow model's flap slices the job's whole time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps_affected: Option<usize>,
    /// Packets lost on the failed links (queued, in flight, or routed into them before the
    /// repair), retransmissions, retransmission timeouts: over the affected steps.
    pub lost_packets: u64,
    pub retransmissions: u64,
    pub timeouts: u64,
}

impl WhatIfReport {
    /// The event came after the job had ended, so it changed no step: a time to pick again.
    pub fn after_the_job(&self) -> bool {
        self.steps_affected.unwrap_or(0) == 0 && self.at_ns as f64 > self.baseline_completion_s * 1e9
    }

    /// The event as a case names it: `fail z0r0:z0c1@200us`.
    pub fn describe(&self) -> String {
        match self.kind {
            WhatIfKind::Fail => format!("fail {}@{}us", self.target, self.at_ns as f64 / 1e3),
            WhatIfKind::Drain => format!("drain {}@{}us", self.target, self.at_ns as f64 / 1e3),
            WhatIfKind::Flap => {
                format!(
                    "flap {}@{}us period {}us x{}",
                    self.target,
                    self.at_ns as f64 / 1e3,
                    self.period_ns as f64 / 1e3,
                    self.count
                )
            }
        }
    }
}

/// How many QPs one step may have before we refuse (memory: ~100 bytes per QP and direction).
pub const MAX_QPS_PER_STEP: usize = 20_000_000;

/// Traces one step's flows: adds their packets and bytes (times `repeat`) to `load` and returns
/// the data flows' paths and sizes in bits.
pub fn trace_step(
    fabric: &SimFabric,
    transfers: &[HostTransfer],
    endpoint: &EndpointOptions,
    repeat: u64,
    load: &mut MemberLoad,
) -> Result<(Paths, Vec<f64>, usize)> {
    let flows = step_flows(&fabric.plan, transfers, endpoint);
    let mut paths = Paths::new();
    let mut bits = Vec::new();
    for f in &flows {
        let data = f.direction == Direction::Data;
        if data {
            paths.start_flow();
            bits.push(8.0 * f.frame_bytes as f64);
        }
        route::trace(
            fabric,
            f,
            |h| {
                let s = fabric.slot(h.switch, h.group, h.member);
                load.packets[s] += f.packets * repeat;
                load.bytes[s] += f.frame_bytes * repeat;
            },
            |l| {
                if data {
                    paths.extend_last(l);
                }
            },
        )?;
    }
    Ok((paths, bits, flows.len() / 2))
}

/// The ranks' hosts and the steps (host to host) of a case.
/// Runs of identical steps: (step, how many times in a row).
pub type StepRuns = Vec<(Vec<Transfer>, usize)>;

/// Steps come as runs: (step, how many times in a row).
pub fn steps_of(fabric: &SimFabric, o: &SimOptions) -> Result<(Vec<NodeId>, StepRuns)> {
    let ranks = o.placement.rank_count(o.ranks, fabric.plan.hosts().count());
    let hosts = o.placement.place(&fabric.plan, ranks)?;
    let transfers = match o.collective {
        Collective::Alltoall => ranks * (ranks - 1),
        _ => ranks,
    };
    ensure!(
        transfers * o.endpoint.qps.max(1) as usize <= MAX_QPS_PER_STEP,
        "{} ranks x {} QPs: {} QPs in one step is more than the simulator holds ({MAX_QPS_PER_STEP}); use --ranks",
        ranks,
        o.endpoint.qps,
        transfers * o.endpoint.qps.max(1) as usize
    );
    Ok((hosts, schedule_runs(o.collective, ranks, o.message_bytes, o.seed)))
}

/// Member loads of `iterations` iterations of a case: what the XDP member counters of a
/// lossless `fabric run` with the same options add up.
pub fn predict_member_load(fabric: &SimFabric, o: &SimOptions, iterations: u32) -> Result<MemberLoad> {
    let mut fabric = fabric.clone();
    fabric.set_hash(o.hash, o.hash_seed);
    let (hosts, steps) = steps_of(&fabric, o)?;
    let mut load = MemberLoad::new(&fabric);
    for (step, times) in &steps {
        let t = crate::model::workload::on_hosts(step, &hosts);
        trace_step(&fabric, &t, &o.endpoint, u64::from(iterations) * *times as u64, &mut load)?;
    }
    Ok(load)
}

/// Per-tier balance of member loads (the same averaging as `fabric run`'s uplink balance).
pub fn tier_balance(fabric: &SimFabric, load: &MemberLoad) -> Vec<TierBalance> {
    let mut out = Vec::new();
    for role in [Role::Rtsw, Role::Ctsw, Role::Atsw] {
        let groups = fabric.plan.switches().filter(|&s| fabric.plan.nodes[s].role == role).flat_map(|sw| {
            (0..fabric.group_count(sw) as u32).map(move |g| {
                let n = fabric.members(sw, g).len() as u32;
                (0..n).map(|m| load.bytes[fabric.slot(sw, g, m)]).collect::<Vec<u64>>()
            })
        });
        let s = summarize(groups);
        if s.groups == 0 {
            continue;
        }
        out.push(TierBalance {
            tier: role.as_str(),
            groups: s.groups,
            mean_max_over_mean: s.mean_max_over_mean,
            worst_max_over_mean: s.worst_max_over_mean,
            mean_jain: s.mean_jain,
        });
    }
    out
}

/// Capacity of every directed link, bits/s.
pub fn capacities(fabric: &SimFabric) -> Vec<f64> {
    fabric.plan.links.iter().flat_map(|l| [l.rate_gbps * 1e9; 2]).collect()
}

/// In `te` mode, the controller's placement of this job's flows (`fabric_user::te`) as `fabric
/// run --hash te` installs it; in other modes, no TE entries.
pub fn install_te(fabric: &mut SimFabric, o: &SimOptions, hosts: &[NodeId], steps: &StepRuns) -> Result<()> {
    let rounds: Vec<(Vec<HostTransfer>, usize)> =
        steps.iter().map(|(step, repeat)| (crate::model::workload::on_hosts(step, hosts), *repeat)).collect();
    install_te_on(fabric, o.hash, &o.endpoint, &rounds)
}

/// [`install_te`] for rounds of transfers already on hosts (several jobs' steps together, say):
/// every flow weighed by its bytes over all the rounds.
pub fn install_te_on(
    fabric: &mut SimFabric,
    hash: HashMode,
    endpoint: &EndpointOptions,
    rounds: &[(Vec<HostTransfer>, usize)],
) -> Result<()> {
    fabric.te.clear();
    if hash != HashMode::Te {
        return Ok(());
    }
    let mut by_key: std::collections::HashMap<(NodeId, NodeId, u16, u32), u64> = Default::default();
    for (t, repeat) in rounds {
        for f in step_flows(&fabric.plan, t, endpoint) {
            *by_key.entry((f.src, f.dst, f.sport, f.dest_qp)).or_default() += f.frame_bytes * *repeat as u64;
        }
    }
    let flows: Vec<crate::te::TeFlow> = by_key
        .into_iter()
        .map(|((src, dst, sport, dest_qp), bytes)| crate::te::TeFlow { src, dst, sport, dest_qp, bytes })
        .collect();
    let placement = crate::te::assign_on(fabric, &flows)?;
    fabric.te =
        placement.entries.into_iter().flat_map(|(n, es)| es.into_iter().map(move |(k, e)| ((n, k), e))).collect();
    Ok(())
}

/// Simulates one case: loads, balance and the modelled completion time of one iteration.
pub fn simulate(fabric: &mut SimFabric, o: &SimOptions) -> Result<SimResult> {
    let start = Instant::now();
    fabric.set_hash(o.hash, o.hash_seed);
    let (hosts, steps) = steps_of(fabric, o)?;
    install_te(fabric, o, &hosts, &steps)?;
    let capacity = capacities(fabric);
    let mut load = MemberLoad::new(fabric);
    let mut step_s = Vec::new();
    let mut completion_s = 0.0;
    let mut rounds = 0;
    let mut qps_per_step = 0;
    let mut step_count = 0;
    // Runs of identical steps (a ring's 2(N-1) steps are one) are simulated once.
    for (i, (step, repeat)) in steps.iter().enumerate() {
        let t = crate::model::workload::on_hosts(step, &hosts);
        let (paths, bits, qps) =
            trace_step(fabric, &t, &o.endpoint, *repeat as u64, &mut load).with_context(|| format!("step {i}"))?;
        qps_per_step = qps_per_step.max(qps);
        let (s, r) = completion_time(&capacity, &paths, &bits, 64);
        rounds += r;
        step_s.push(s);
        completion_s += s * *repeat as f64;
        step_count += repeat;
    }
    let times = StepTimes { step_s, completion_s, steps: step_count, qps_per_step };
    let mut r = SimResult::of_case(fabric, o, hosts.len(), &load, times, "flow");
    r.fair_share_rounds = rounds;
    r.wall_s = start.elapsed().as_secs_f64();
    Ok(r)
}

/// What a model measured of one case's steps.
pub struct StepTimes {
    /// Duration of each distinct step, seconds.
    pub step_s: Vec<f64>,
    /// One iteration: every step times its repeats, seconds.
    pub completion_s: f64,
    /// Steps, repeats included.
    pub steps: usize,
    pub qps_per_step: usize,
}

impl SimResult {
    /// The result of case `o` of `model` (the case's options, balance and times; the model's own
    /// figures, the fair share's rounds, the wall time and the packet section, left to fill).
    pub fn of_case(
        fabric: &SimFabric,
        o: &SimOptions,
        ranks: usize,
        load: &MemberLoad,
        t: StepTimes,
        model: &'static str,
    ) -> Self {
        let e = &o.endpoint;
        SimResult {
            case: format!("{} {} qps={} sport={}", o.collective.as_str(), o.hash.as_str(), e.qps, e.sport.as_str()),
            model,
            topology: fabric.plan.topology.name.clone(),
            hosts: fabric.plan.hosts().count(),
            ranks,
            collective: o.collective.as_str(),
            hash: o.hash.as_str(),
            qps: e.qps,
            sport: e.sport.as_str(),
            message_bytes: o.message_bytes,
            steps: t.steps,
            distinct_steps: t.step_s.len(),
            qps_per_step: t.qps_per_step,
            tiers: tier_balance(fabric, load),
            completion_s: t.completion_s,
            step_s: t.step_s,
            fair_share_rounds: 0,
            wall_s: 0.0,
            packet: None,
            whatif: None,
        }
    }
}

/// The table `fabric sim` prints.
pub fn print(results: &[SimResult]) {
    let Some(first) = results.first() else { return };
    let w = case_width(results);
    let model = match first.model {
        "packet" => "packet-level twin: queues, ECN, PFC, the endpoints' congestion control",
        _ => "flow-level model, max-min fair share, no queueing",
    };
    println!(
        "{} ({} hosts), {} ranks, {} bytes per rank; {model}",
        first.topology, first.hosts, first.ranks, first.message_bytes
    );
    let tiers: Vec<&str> = ["rtsw", "ctsw", "atsw"]
        .into_iter()
        .filter(|t| results.iter().any(|r| r.tiers.iter().any(|b| b.tier == *t)))
        .collect();
    let mut head = format!("{:<w$}", "case");
    for t in &tiers {
        head += &format!(" {:>13} {:>7}", format!("{t} max/mean"), "jain");
    }
    println!("{head} {:>14} {:>9}", "completion (s)", "wall (s)");
    for r in results {
        let mut line = format!("{:<w$}", r.case);
        for t in &tiers {
            match r.tiers.iter().find(|b| b.tier == *t) {
                Some(b) => line += &format!(" {:>13.2} {:>7.3}", b.mean_max_over_mean, b.mean_jain),
                None => line += &format!(" {:>13} {:>7}", "-", "-"),
            }
        }
        // A packet run stopped at its deadline did not finish by then: its time is a bound.
        let unfinished = r.packet.as_ref().is_some_and(|p| !p.finished);
        let completion = format!("{}{:.6}", if unfinished { ">" } else { "" }, r.completion_s);
        println!("{line} {completion:>14} {:>9.3}", r.wall_s);
    }
    print_packet(results);
    print_whatifs(results);
}

/// The width of the case column: the longest case label, and at least 36.
fn case_width(results: &[SimResult]) -> usize {
    results.iter().map(|r| r.case.chars().count()).max().unwrap_or(0).max(36)
}

/// `--fail-at` / `--drain-at` / `--flap`: each case's job without and with the event.
fn print_whatifs(results: &[SimResult]) {
    let mut said = false;
    for r in results {
        let Some(w) = r.whatif.as_ref().or_else(|| r.packet.as_ref().and_then(|p| p.whatif.as_ref())) else {
            continue;
        };
        if !std::mem::replace(&mut said, true) {
            println!("what-if (the rows above are each case without the event; here, with it):");
        }
        println!(
            "{} with {}: {} link(s) [{}], {}; completion {:.6} s -> {:.6} s ({:+.1}%), \
             {}, {} packets lost, {} retransmitted, {} timeouts, {}",
            r.case,
            w.describe(),
            w.links.len(),
            if w.links.len() <= 6 { w.links.join(" ") } else { format!("{} ...", w.links[..6].join(" ")) },
            if w.rerouted {
                format!("routes changed {} us after it", w.detect_ns as f64 / 1e3)
            } else {
                format!("routes never changed (each outage shorter than the {} us detection)", w.detect_ns as f64 / 1e3)
            },
            w.baseline_completion_s,
            w.completion_s,
            100.0 * w.slowdown,
            match w.steps_affected {
                Some(n) => format!("{n} step(s) affected"),
                None => "steps not followed (flow model)".into(),
            },
            w.lost_packets,
            w.retransmissions,
            w.timeouts,
            if w.finished { "every byte delivered" } else { "NOT every byte delivered (deadline)" }
        );
        if w.after_the_job() {
            println!(
                "  note: the event at {} us comes after the job ended ({:.1} us): it changed nothing; pick an \
                 earlier time",
                w.at_ns as f64 / 1e3,
                w.baseline_completion_s * 1e6
            );
        }
    }
}

/// The packet model's congestion figures, one line per case and tier.
fn print_packet(results: &[SimResult]) {
    let cases: Vec<(&SimResult, &PacketStats)> =
        results.iter().filter_map(|r| r.packet.as_ref().map(|p| (r, p))).collect();
    if cases.is_empty() {
        return;
    }
    let w = case_width(results);
    println!(
        "packet model (link delay {} ns): per iteration; queue depths in bytes, over the distinct steps",
        cases[0].1.link_delay_ns
    );
    println!(
        "{:<w$} {:>6} {:>10} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10} {:>10} {:>10}",
        "case",
        "tier",
        "ecn marks",
        "drops",
        "pfc sent",
        "pfc recv",
        "retrans",
        "finished",
        "depth p50",
        "depth p99",
        "depth max"
    );
    for (r, p) in cases {
        // A switch tier the topology does not have (ATSWs in one zone) has nothing to show.
        let absent = |t: &&fabric_twin::report::TierReport| {
            t.tier != "host"
                && !r.tiers.iter().any(|b| b.tier == t.tier)
                && t.ecn_marked + t.drops + t.pauses_sent + t.pauses_received + t.max_depth_bytes == 0
        };
        for t in p.tiers.iter().filter(|t| !absent(t)) {
            println!(
                "{:<w$} {:>6} {:>10} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10} {:>10} {:>10}",
                r.case,
                t.tier,
                t.ecn_marked,
                t.drops,
                t.pauses_sent,
                t.pauses_received,
                p.retransmissions,
                p.finished,
                t.depth_p50_bytes,
                t.depth_p99_bytes,
                t.max_depth_bytes
            );
        }
        println!(
            "{:<w$} {}; {} events, {} packet hops, {:.2} s wall",
            r.case,
            flow_completion(&p.flow_completion_s),
            p.events,
            p.packet_hops,
            r.wall_s
        );
        for t in &p.paused {
            println!(
                "{:<w$} {} paused by {} (class {}): {} of {} ports, {:.3} ms in total, longest {:.1} µs, {:.2}% of the time",
                r.case,
                t.paused,
                t.pausing,
                t.class,
                t.ports_paused,
                t.ports,
                t.paused_ns as f64 / 1e6,
                t.longest_pause_ns as f64 / 1e3,
                100.0 * t.paused_share
            );
        }
        let sent_while_paused: u64 = p.tiers.iter().map(|t| t.sent_while_paused).sum();
        if sent_while_paused > 0 {
            println!(
                "{:<w$} phantom queues: the switches sent {sent_while_paused} packets into paused ports (the XDP \
                 testbed's model error)",
                r.case
            );
        }
        if p.link_loss > 0 {
            println!("{:<w$} link loss: {} frames lost to --loss", r.case, p.link_loss);
        }
        if p.unroutable > 0 {
            println!(
                "{:<w$} no route: {} packets dropped at a switch with no route to their host",
                r.case, p.unroutable
            );
        }
        println!(
            "{:<w$} transport {}: {} packets reordered at the receivers (deepest {} PSNs), {} duplicate PSNs",
            r.case, p.transport, p.reordered_packets, p.reorder_depth_max, p.duplicate_psns
        );
    }
}

/// The flow-completion line of a packet run: quantiles over the QPs that finished, and how
/// many did not (their time is unknown, not zero: a deadline or a cut-off host stopped them).
fn flow_completion(per_step: &[Vec<Option<f64>>]) -> String {
    let all = per_step.iter().flatten();
    let mut done: Vec<f64> = all.clone().flatten().copied().collect();
    let unfinished = all.filter(|t| t.is_none()).count();
    done.sort_by(f64::total_cmp);
    let at = |q: f64| done[((done.len() as f64 * q).ceil() as usize).clamp(1, done.len()) - 1];
    let quantiles = if done.is_empty() {
        "no QP finished".to_string()
    } else {
        format!("flow completion p50 {:.6} s, p99 {:.6} s, max {:.6} s", at(0.5), at(0.99), at(1.0))
    };
    match unfinished {
        0 => quantiles,
        n => format!("{quantiles} ({n} of {} QPs unfinished, left out)", done.len() + n),
    }
}

#[cfg(test)]
mod tests {
    use super::flow_completion;

    #[test]
    fn flow_completion_leaves_out_unfinished_qps_and_says_how_many() {
        let all = flow_completion(&[vec![Some(1.0), Some(3.0)], vec![Some(2.0)]]);
        assert_eq!(all, "flow completion p50 2.000000 s, p99 3.000000 s, max 3.000000 s");
        let some = flow_completion(&[vec![Some(1.0), None], vec![None]]);
        assert_eq!(
            some,
            "flow completion p50 1.000000 s, p99 1.000000 s, max 1.000000 s (2 of 3 QPs unfinished, left out)"
        );
        assert_eq!(flow_completion(&[vec![None, None]]), "no QP finished (2 of 2 QPs unfinished, left out)");
    }
}
