//! `fabric sim --model packet --job-record`: a twin run written in the testbed's own schemas, a
//! job record (`fabric.job/1`, `results/jobs/JOB.json`, what `fabric report JOB` prints) and a
//! run result (`fabric.run/2`, `results/twin/JOB.json`), so that the reports read a twin run
//! as they read a testbed run.
//!
//! What the twin fills in, and how it differs from a testbed run:
//! - times are modelled nanoseconds (`time_scale` 1); the job's wall-clock start and end are the
//!   simulation's;
//! - per step (every repetition of a distinct step, as the testbed lists them): its duration
//!   and its RTSWs' uplink load; per switch port, over the job: bytes sent, ECN marks, drops,
//!   PFC frames received, XOFF frames sent (new pauses, not refreshes);
//! - `sent_while_paused` is 0 by construction (a paused twin port holds its queue) unless the
//!   run models the testbed's phantom queues (`--queues phantom`); the endpoints' CPU
//!   measures (`cpu_limited`, late wakes) are `null`: the twin has no CPU;
//! - `flows` lists each distinct step's flows once (a ring's 2(N-1) identical steps would
//!   repeat the same flows); the extra `twin` section says so, and adds the per-tier PFC
//!   frames and queue depth distributions.
use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use fabric_twin::{
    link::PortCounters,
    report::{StepReport, TierReport},
};
use serde::Serialize;

use super::{
    SimOptions,
    packet::{PacketRun, RunStep},
};
use crate::{
    endpoint::CcMode,
    endpoint::engine::{FlowResult, HostResult},
    forwarding::fabric::SimFabric,
    model::balance::imbalance,
    model::plan::Role,
    model::workload::HostTransfer,
    run::job::{JOB_SCHEMA, JobRecord, PortDelta, StepRecord, diagnose, sort_busiest},
    run::result::{Endpoints, IterationResult, RESULTS_SCHEMA, RunOptions, RunResult, balance},
    telemetry::stats::{CongestionTotals, UplinkLoad},
};

/// What a twin run adds to `fabric.run/2` (flattened into the document as `twin`).
#[derive(Clone, Debug, Serialize)]
pub struct TwinExtras {
    pub twin: TwinSection,
}

#[derive(Clone, Debug, Serialize)]
pub struct TwinSection {
    pub model: &'static str,
    pub link_delay_ns: u64,
    /// `flows` holds each distinct step's flows once; `steps` counts every step.
    pub flows_cover: &'static str,
    pub distinct_steps: usize,
    pub steps: usize,
    /// Per switch tier and the hosts: PFC frames, ECN marks, drops, queue depths (p50, p99,
    /// max over every enqueue of the distinct steps).
    pub tiers: Vec<TierReport>,
}

/// The twin run's result in the testbed's schema.
pub type TwinRunResult = RunResult<FlowResult, TwinExtras>;

/// Job record and run result of one case, `job_id` naming both.
pub fn records(fabric: &SimFabric, o: &SimOptions, run: &PacketRun, job_id: &str) -> (JobRecord, TwinRunResult) {
    let plan = &fabric.plan;
    let r = &run.result;
    let stats = r.packet.as_ref().expect("a packet run");
    let mut ports: BTreeMap<(usize, usize), PortCounters> = BTreeMap::new();
    let mut steps = Vec::new();
    let mut flows = Vec::new();
    let mut step_ns = Vec::new();
    let (mut bytes_needed, mut bytes_delivered) = (0u64, 0);
    for s in &run.steps {
        let uplinks = uplink_load(fabric, &s.report.ports);
        for _ in 0..s.repeat {
            steps.push(StepRecord {
                index: steps.len(),
                duration_ns: s.report.completion_ns,
                uplinks: uplinks.clone(),
            });
            step_ns.push(s.report.completion_ns);
        }
        add_ports(fabric, &s.report, s.repeat as u64, &mut ports);
        flows.extend(flow_results(fabric, s, o.endpoint.rate_bps));
        let step_needed = HostTransfer::total_bytes(&s.transfers);
        bytes_needed = bytes_needed.saturating_add((s.repeat as u64).saturating_mul(step_needed));
        bytes_delivered += s.repeat as u64 * done_bytes(&s.report);
    }
    let completion_ns: u64 = step_ns.iter().sum();
    let mut deltas: Vec<PortDelta> = ports
        .iter()
        .filter(|((n, _), c)| plan.nodes[*n].role != Role::Host && **c != PortCounters::default())
        .map(|(&(n, p), c)| PortDelta {
            switch: plan.nodes[n].name.clone(),
            port: plan.nodes[n].ports[p].ifname.clone(),
            tx_bytes: c.bytes,
            ecn_marked: c.ecn_marked,
            drops: c.drops,
            link_lost: c.link_loss,
            pauses_received: c.pauses_received,
            paused_ns: c.paused_ns.iter().sum(),
            sent_while_paused: c.sent_while_paused,
            xoff_events: c.pauses_sent - c.refreshes_sent - c.resumes_sent,
        })
        .collect();
    sort_busiest(&mut deltas);
    let now = unix_ms();
    let started = now.saturating_sub((r.wall_s * 1e3) as u64);
    let retransmitted = run.steps.iter().map(|s| s.repeat as u64 * s.report.retransmitted()).sum();
    let cnps =
        run.steps.iter().map(|s| s.repeat as u64 * s.report.qps.iter().map(|q| q.cnps_received).sum::<u64>()).sum();
    let placement: Vec<String> = run.hosts.iter().map(|&h| plan.nodes[h].name.clone()).collect();
    let mut job = JobRecord {
        schema: JOB_SCHEMA.into(),
        job_id: job_id.into(),
        testbed: r.topology.clone(),
        collective: r.collective.into(),
        hash: r.hash.into(),
        placement: placement.clone(),
        started_unix_ms: started,
        ended_unix_ms: now,
        time_scale: 1,
        completion_ns: vec![completion_ns],
        steps,
        ports: deltas,
        retransmitted_packets: retransmitted,
        cnps,
        faults: Vec::new(),
        faulty_at_start: Vec::new(),
        name: None,
        uplink_bytes: Default::default(),
        shared_steps: Vec::new(),
        straggler: None,
        moves: Default::default(),
        diagnosis: Vec::new(),
    };
    job.diagnosis = diagnose(&job);
    let total = |f: fn(&PortCounters) -> u64| -> u64 {
        ports.iter().filter(|((n, _), _)| plan.nodes[*n].role != Role::Host).map(|(_, c)| f(c)).sum()
    };
    let congestion = CongestionTotals {
        ecn_marked: total(|c| c.ecn_marked),
        overflow_drops: total(|c| c.drops),
        over_headroom: total(|c| c.over_headroom),
        sent_while_paused: total(|c| c.sent_while_paused),
        pfc_frames_received: total(|c| c.pauses_received),
        paused_ns: total(|c| c.paused_ns.iter().sum()),
        pfc_xoff_sent: total(|c| c.pauses_sent - c.refreshes_sent - c.resumes_sent),
        pfc_refresh_sent: total(|c| c.refreshes_sent),
        pfc_xon_sent: total(|c| c.resumes_sent),
        watchdog_storms: 0,
        max_depth_bytes: stats.tiers.iter().filter(|t| t.tier != "host").map(|t| t.max_depth_bytes).max().unwrap_or(0),
    };
    let last_uplinks = job.steps.last().map(|s| s.uplinks.clone()).unwrap_or_default();
    let uplinks = sum_uplinks(&job.steps).unwrap_or(last_uplinks);
    let result = RunResult {
        schema: RESULTS_SCHEMA,
        endpoints: Endpoints::Fabric,
        job_id: Some(job_id.into()),
        testbed: r.topology.clone(),
        options: RunOptions {
            collective: o.collective,
            ranks: o.ranks,
            message_bytes: o.message_bytes,
            iterations: 1,
            placement: o.placement.clone(),
            hash: Some(o.hash),
            hash_seed: o.hash_seed,
            seed: o.seed,
            endpoint: o.endpoint.clone(),
        },
        placement,
        hash: r.hash.into(),
        iterations: vec![IterationResult { completion_ns, modelled_completion_ns: completion_ns as f64, step_ns }],
        achieved_over_intended: None,
        balance: balance(&uplinks),
        uplinks,
        flows,
        bytes_needed,
        bytes_delivered,
        congestion,
        diagnosis: job.diagnosis.clone(),
        te_flows: None,
        cpu_limited: None,
        late_wake_share: None,
        cpu_wait_share: None,
        host_cpu_busy: None,
        cc: o.endpoint.cc,
        transport: o.endpoint.transport,
        time_scale: 1,
        hosts: host_results(fabric, &ports),
        cts_bound_bytes: (o.endpoint.cc == CcMode::Cts)
            .then(|| u64::from(o.endpoint.cts_channels) * o.endpoint.cts_buffer_bytes),
        extra: TwinExtras {
            twin: TwinSection {
                model: "packet",
                link_delay_ns: stats.link_delay_ns,
                flows_cover: "each distinct step once",
                distinct_steps: run.steps.len(),
                steps: job.steps.len(),
                tiers: stats.tiers.clone(),
            },
        },
    };
    (job, result)
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Bytes of the QPs that completed (all of theirs, acknowledged).
fn done_bytes(r: &StepReport) -> u64 {
    r.qps.iter().filter(|q| q.completed_ns.is_some()).map(|q| q.bytes).sum()
}

/// Per (node, port): a step's port counters, `repeat` times.
fn add_ports(fabric: &SimFabric, r: &StepReport, repeat: u64, out: &mut BTreeMap<(usize, usize), PortCounters>) {
    let mut global = 0;
    for (n, node) in fabric.plan.nodes.iter().enumerate() {
        for p in 0..node.ports.len() {
            let c = &r.ports[global];
            global += 1;
            out.entry((n, p)).or_default().add_repeated(c, repeat);
        }
    }
}

/// Each RTSW's uplink load in one step (ports numbered node by node, as the twin's).
fn uplink_load(fabric: &SimFabric, ports: &[PortCounters]) -> Vec<UplinkLoad> {
    let plan = &fabric.plan;
    let mut base = Vec::with_capacity(plan.nodes.len());
    let mut total = 0;
    for node in &plan.nodes {
        base.push(total);
        total += node.ports.len();
    }
    plan.switches()
        .filter(|&sw| plan.nodes[sw].role == Role::Rtsw)
        .map(|sw| {
            let tx: Vec<(String, u64)> = plan
                .uplinks(sw)
                .into_iter()
                .map(|p| (plan.nodes[sw].ports[p].ifname.clone(), ports[base[sw] + p].bytes))
                .collect();
            let (max_over_mean, jain) = imbalance(&tx.iter().map(|t| t.1).collect::<Vec<_>>());
            UplinkLoad { rtsw: plan.nodes[sw].name.clone(), tx_bytes: tx, max_over_mean, jain }
        })
        .collect()
}

/// The uplink load over every step.
fn sum_uplinks(steps: &[StepRecord]) -> Option<Vec<UplinkLoad>> {
    let mut acc = steps.first()?.uplinks.clone();
    for s in &steps[1..] {
        for (a, u) in acc.iter_mut().zip(&s.uplinks) {
            for (t, v) in a.tx_bytes.iter_mut().zip(&u.tx_bytes) {
                t.1 += v.1;
            }
        }
    }
    for a in &mut acc {
        (a.max_over_mean, a.jain) = imbalance(&a.tx_bytes.iter().map(|t| t.1).collect::<Vec<_>>());
    }
    Some(acc)
}

/// One flow per transfer of the step: its QPs (consecutive in the step's QP list) summed.
/// `rate_bps` is the run's rate per transfer (0: the host link's), as the endpoints paced it.
fn flow_results(fabric: &SimFabric, s: &RunStep, rate_bps: u64) -> Vec<FlowResult> {
    let names = |n: usize| fabric.plan.nodes[n].name.clone();
    let mut out: Vec<FlowResult> = Vec::new();
    for (spec, q) in s.qps.iter().zip(&s.report.qps) {
        let same = out.last().is_some_and(|f| f.src == names(q.src) && f.dst == names(q.dst));
        if !same {
            out.push(FlowResult {
                src: names(q.src),
                dst: names(q.dst),
                bytes: 0,
                qps: 0,
                qps_receiving: 0,
                udp_sports: Vec::new(),
                completion_ns: 0,
                goodput_bps: 0.0,
                intended_bps: match rate_bps {
                    0 => (fabric.plan.links[fabric.plan.nodes[q.src].ports[0].link].rate_gbps * 1e9) as u64,
                    r => r,
                },
                packets_sent: 0,
                retransmitted: 0,
                timeouts: 0,
                naks: 0,
                icrc_errors: 0,
                wire_errors: 0,
                bytes_received: 0,
                ce_packets: 0,
                cnps_sent: 0,
                cnps_received: 0,
                rate_trajectory: Vec::new(),
                reordered_packets: 0,
                reorder_depth_max: 0,
                duplicate_psns: 0,
            });
        }
        let f = out.last_mut().expect("just pushed");
        f.bytes += q.bytes;
        f.qps += 1;
        f.udp_sports.push(spec.sport);
        f.completion_ns = f.completion_ns.max(q.completed_ns.unwrap_or(s.report.completion_ns));
        f.packets_sent += q.packets_sent;
        f.retransmitted += q.retransmitted;
        f.timeouts += q.timeouts;
        f.naks += q.naks;
        f.bytes_received += if q.completed_ns.is_some() { q.bytes } else { 0 };
        f.qps_receiving += u32::from(q.completed_ns.is_some() && q.bytes > 0);
        f.ce_packets += q.ce_packets;
        f.reordered_packets += q.reordered_packets;
        f.reorder_depth_max = f.reorder_depth_max.max(q.reorder_depth_max);
        f.duplicate_psns += q.duplicate_psns;
        // The twin's CNPs cross a lossless fabric: every one sent arrives (a failed link aside).
        f.cnps_sent += q.cnps_received;
        f.cnps_received += q.cnps_received;
    }
    for f in &mut out {
        f.goodput_bps = 8.0 * f.bytes_received as f64 / (f.completion_ns.max(1) as f64 * 1e-9);
    }
    out
}

/// Per host: the PFC frames its port received and sent.
fn host_results(fabric: &SimFabric, ports: &BTreeMap<(usize, usize), PortCounters>) -> Vec<HostResult> {
    let mut out: Vec<HostResult> = ports
        .iter()
        .filter(|((n, _), _)| fabric.plan.nodes[*n].role == Role::Host)
        .map(|(&(n, _), c)| HostResult {
            host: fabric.plan.nodes[n].name.clone(),
            pause_frames_received: c.pauses_received,
            pause_frames_sent: c.pauses_sent,
            paused_ns: c.paused_ns.iter().sum(),
            ..Default::default()
        })
        .collect();
    out.sort_by(|a, b| a.host.cmp(&b.host));
    out
}

/// Writes the job record to `results/jobs/JOB.json` and the run result to
/// `results/twin/JOB.json`; returns their paths.
pub fn save(job: &JobRecord, result: &TwinRunResult) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let dir = std::path::PathBuf::from("results/twin");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let run_path = dir.join(format!("{}.json", job.job_id));
    let text = serde_json::to_vec_pretty(result)?;
    job.save()?;
    std::fs::write(&run_path, text).with_context(|| format!("writing {}", run_path.display()))?;
    Ok((JobRecord::path(&job.job_id), run_path))
}
