//! The one result type of a run on the testbed (`fabric.run/2`), and how it is printed.
use fabric_common::config::HashMode;
use serde::Serialize;

pub use crate::model::balance::BalanceSummary;
use crate::model::balance::summarize;
use crate::{
    endpoint::CcMode, endpoint::EndpointOptions, endpoint::engine::FlowResult, endpoint::engine::HostResult,
    model::placement::Placement, model::workload::Collective, telemetry::stats::UplinkLoad,
};

/// The version of the results schema (documented in `testbed/workloads/README.md`).
/// 2: congestion control (`cc`, per-flow CE/CNP counts and rate trajectories, per-host PFC),
/// and the default rate is the host link's modelled rate.
pub const RESULTS_SCHEMA: &str = "fabric.run/2";

/// A run is CPU-bound when more than this share of its endpoints' timed sleeps woke later than
/// one packet's transmit time after their deadline (see `HostResult::late_wakes`): then the
/// scheduler, not the modelled fabric, set the pace of a tenth of the sends or more.
pub const CPU_BOUND_LATE_SHARE: f64 = 0.10;

/// A run's modelled times are comparable with another model's (the twin's) only when its endpoint
/// threads waited for a CPU less than this share of their time. Measured on a 2-core VM: a
/// single flow or a 7-to-1 incast (one link's packets) waits 3-11%, eight hosts sending at
/// once wait 64% and finish up to 3 times later than the twin.
pub const CPU_WAIT_SHARE_MAX: f64 = 0.25;

/// The share of the endpoint threads' time they were runnable but waited for a CPU, over `hosts`.
pub fn cpu_wait_share(hosts: &[crate::endpoint::engine::HostResult]) -> Option<f64> {
    let active: u64 = hosts.iter().map(|h| h.active_ns).sum();
    let wait: u64 = hosts.iter().map(|h| h.cpu_wait_ns).sum();
    (active > 0).then(|| wait as f64 / active as f64)
}

/// Why the CPU, not the modelled fabric, set a run's pace, if it did, from its late-wake share
/// and its CPU-wait share (a run without the measures counts as CPU-bound): then its modelled
/// times are not comparable with another model's.
pub fn cpu_bound(late: Option<f64>, wait: Option<f64>) -> Option<String> {
    let (late, wait) = (late.unwrap_or(1.0), wait.unwrap_or(1.0));
    if late > CPU_BOUND_LATE_SHARE {
        Some(format!("{:.1}% of its sleeps woke late", 100.0 * late))
    } else if wait > CPU_WAIT_SHARE_MAX {
        Some(format!("its endpoints waited for a CPU {:.0}% of the time", 100.0 * wait))
    } else {
        None
    }
}

/// The share of the endpoints' timed sleeps that woke late, over `hosts`.
pub fn late_wake_share(hosts: &[crate::endpoint::engine::HostResult]) -> Option<f64> {
    let timed: u64 = hosts.iter().map(|h| h.timed_wakes).sum();
    let late: u64 = hosts.iter().map(|h| h.late_wakes).sum();
    (timed > 0).then(|| late as f64 / timed as f64)
}

#[derive(Clone, Debug, Serialize)]
pub struct RunOptions {
    pub collective: Collective,
    /// Number of ranks (default: one per host of a `hosts:` placement, else every host).
    pub ranks: Option<usize>,
    pub message_bytes: u64,
    pub iterations: u32,
    pub placement: Placement,
    /// Hash mode to set on every switch before the run (default: leave as configured); the
    /// result's `hash` field records the mode in force.
    #[serde(skip)]
    pub hash: Option<HashMode>,
    /// Re-seed every switch's hash (per switch: derived from this and its position).
    pub hash_seed: Option<u32>,
    /// Seed of the workload itself (permutation).
    pub seed: u64,
    pub endpoint: EndpointOptions,
}

#[derive(Clone, Debug, Serialize)]
pub struct IterationResult {
    /// Collective completion time, wall-clock ns.
    pub completion_ns: u64,
    /// The same in the modelled network's time (wall / `RunResult::time_scale`).
    pub modelled_completion_ns: f64,
    pub step_ns: Vec<u64>,
}

/// Whose endpoints ran the collective: ours (`fabric-roce` over UDP sockets), or the kernel's
/// soft-RoCE (rxe) through libibverbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Endpoints {
    Fabric,
    Rxe,
}

/// What a result of our own endpoints adds to the common fields: nothing (the rxe runs add
/// their devices' counters, see `run::rxe::RxeDetails`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct NoExtras {}

/// The result of a run (`fabric.run/2`), one type for every kind of endpoint: `F` is what a flow
/// reports, `X` the fields only that kind of run has (flattened into the same document). What
/// an endpoint cannot measure is `None` and written as `null`.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult<F = FlowResult, X = NoExtras> {
    pub schema: &'static str,
    pub endpoints: Endpoints,
    /// The job this run was (`fabric report JOB`; `results/jobs/JOB.json`).
    pub job_id: Option<String>,
    pub testbed: String,
    pub options: RunOptions,
    /// Host of each rank.
    pub placement: Vec<String>,
    /// Switch hash mode during the run.
    pub hash: String,
    pub iterations: Vec<IterationResult>,
    /// Every flow of every step of the last iteration.
    pub flows: Vec<F>,
    pub uplinks: Vec<UplinkLoad>,
    pub balance: BalanceSummary,
    /// Bytes the collective had to move, and bytes the receivers accepted (in order, once).
    pub bytes_needed: u64,
    pub bytes_delivered: u64,
    /// Achieved over possible rate, averaged over flows (possible: the intended rate capped by a
    /// fair share of the flow's busier host link): well under 1 means this machine's CPU, or
    /// congestion inside the fabric, limited the run.
    pub achieved_over_intended: Option<f64>,
    /// What the switches' congestion model did during the run: ECN marks, drops, pauses (the
    /// frames the agents sent and the switches received), paused time, the model's error.
    pub congestion: crate::telemetry::stats::CongestionTotals,
    /// The job report's short diagnosis (see `fabric report`).
    pub diagnosis: Vec<String>,
    /// With `hash = "te"`: how many flows the controller placed (their entries take precedence
    /// over the hash in every switch).
    pub te_flows: Option<usize>,
    /// Whether the endpoints woke late for more than [`CPU_BOUND_LATE_SHARE`] of their timed
    /// sleeps: then the CPU, not the modelled fabric, set the run's pace.
    pub cpu_limited: Option<bool>,
    /// That share (see [`late_wake_share`]).
    pub late_wake_share: Option<f64>,
    /// The share of the endpoint threads' time they waited for a CPU (see [`cpu_wait_share`]
    /// and [`CPU_WAIT_SHARE_MAX`]).
    pub cpu_wait_share: Option<f64>,
    /// The busy share of the machine's CPU time during the run's iterations (`/proc/stat`).
    pub host_cpu_busy: Option<f64>,
    /// Congestion control on top of PFC.
    pub cc: CcMode,
    /// The endpoints' reliability: `gbn` or `ooo` (rxe: always `gbn`).
    pub transport: fabric_roce::transport::Transport,
    /// The topology's time scale the endpoints ran at (rates / S, timers x S).
    pub time_scale: u64,
    /// Per host, over every step of every iteration: PFC frames received and sent, paused time
    /// (summed), CTS's most bytes in flight toward it (max).
    pub hosts: Vec<HostResult>,
    /// CTS: the bound on bytes in flight toward one receiver (channels x buffer).
    pub cts_bound_bytes: Option<u64>,
    #[serde(flatten)]
    pub extra: X,
}

/// Adds a step's host counters to the run's (also the trace replay's).
pub fn accumulate_hosts(all: &mut Vec<HostResult>, step: &[HostResult]) {
    for h in step {
        let i = match all.iter().position(|a| a.host == h.host) {
            Some(i) => i,
            None => {
                all.push(HostResult { host: h.host.clone(), ..Default::default() });
                all.len() - 1
            }
        };
        let a = &mut all[i];
        a.pause_frames_received += h.pause_frames_received;
        a.paused_ns += h.paused_ns;
        a.pause_frames_sent += h.pause_frames_sent;
        a.cts_max_in_flight_bytes = a.cts_max_in_flight_bytes.max(h.cts_max_in_flight_bytes);
        a.udp_receive_drops += h.udp_receive_drops;
        a.timed_wakes += h.timed_wakes;
        a.late_wakes += h.late_wakes;
        a.active_ns += h.active_ns;
        a.cpu_wait_ns += h.cpu_wait_ns;
    }
}

/// Uplink balance over the RTSWs (their uplink groups; see [`summarize`]).
pub fn balance(uplinks: &[UplinkLoad]) -> BalanceSummary {
    summarize(uplinks.iter().map(|u| u.tx_bytes.iter().map(|t| t.1).collect::<Vec<u64>>()))
}

pub fn print(r: &RunResult) {
    let o = &r.options;
    println!(
        "{} on {} ranks ({}), {} bytes x {} iterations; {} QP(s) per connection, sport {}, switch hash {}",
        o.collective.as_str(),
        r.placement.len(),
        match &o.placement {
            Placement::Contiguous => "contiguous".to_string(),
            Placement::Fragmented => "fragmented".to_string(),
            Placement::Random { seed } => format!("random:{seed}"),
            Placement::Explicit { .. } => "explicit".to_string(),
        },
        o.message_bytes,
        o.iterations,
        o.endpoint.qps,
        o.endpoint.sport.as_str(),
        r.hash
    );
    for (i, it) in r.iterations.iter().enumerate() {
        println!(
            "  iteration {}: completion {:.2} ms wall = {:.2} µs modelled (time scale {})",
            i + 1,
            it.completion_ns as f64 / 1e6,
            it.completion_ns as f64 / 1e3 / r.time_scale.max(1) as f64,
            r.time_scale
        );
    }
    println!("{:<8} {:>9} {:>6}  bytes per uplink (this run)", "rtsw", "max/mean", "jain");
    for u in &r.uplinks {
        let loads: Vec<String> = u.tx_bytes.iter().map(|(p, b)| format!("{p}={b}")).collect();
        println!("{:<8} {:>9.2} {:>6.3}  {}", u.rtsw, u.max_over_mean, u.jain, loads.join(" "));
    }
    println!(
        "uplink balance: mean max/mean {:.2}, worst {:.2}, mean Jain {:.3}",
        r.balance.mean_max_over_mean, r.balance.worst_max_over_mean, r.balance.mean_jain
    );
    let retx: u64 = r.flows.iter().map(|f| f.retransmitted).sum();
    let reordered: u64 = r.flows.iter().map(|f| f.reordered_packets).sum();
    let depth = r.flows.iter().map(|f| f.reorder_depth_max).max().unwrap_or(0);
    let dups: u64 = r.flows.iter().map(|f| f.duplicate_psns).sum();
    println!(
        "transport {}: receivers saw {reordered} packets out of order (deepest {depth} PSNs), {dups} duplicate PSNs",
        r.transport
    );
    let achieved = r.achieved_over_intended.map_or_else(|| "not measured".into(), |a| format!("{a:.2}"));
    let cpu = match (r.host_cpu_busy, r.late_wake_share) {
        (Some(b), Some(l)) => format!(
            "; CPUs {:.0}% busy, {:.1}% of the endpoints' timed sleeps woke late, waited for a CPU {:.1}% of the time{}",
            b * 100.0,
            l * 100.0,
            100.0 * r.cpu_wait_share.unwrap_or(f64::NAN),
            if r.cpu_limited == Some(true) { ": CPU-bound, the CPU set the pace" } else { "" }
        ),
        _ => String::new(),
    };
    println!("endpoints: achieved/intended rate {achieved}; {retx} retransmitted packets{cpu}");
    print_congestion(r);
}

/// The congestion table: what CE marks, CNPs, PFC and CTS did.
fn print_congestion(r: &RunResult) {
    println!("congestion control: {} (time scale {})", r.cc.as_str(), r.time_scale);
    let c = &r.congestion;
    println!(
        "switches: {} ECN marks, {} lossy drops, PFC sent {} (xoff {} refresh {} xon {}) received {}, \
         paused {:.1} ms, max queue {:.0} KiB, {} sent into a paused port (model error), {} above headroom, {} watchdog storms",
        c.ecn_marked,
        c.overflow_drops,
        c.pfc_xoff_sent + c.pfc_refresh_sent + c.pfc_xon_sent,
        c.pfc_xoff_sent,
        c.pfc_refresh_sent,
        c.pfc_xon_sent,
        c.pfc_frames_received,
        c.paused_ns as f64 / 1e6,
        c.max_depth_bytes as f64 / 1024.0,
        c.sent_while_paused,
        c.over_headroom,
        c.watchdog_storms
    );
    let marked: Vec<&FlowResult> =
        r.flows.iter().filter(|f| f.ce_packets + f.cnps_sent + f.cnps_received > 0).collect();
    if !marked.is_empty() || r.cc == CcMode::Dcqcn {
        println!(
            "  {:<20} {:>8} {:>8} {:>8} {:>12} {:>12}",
            "flow", "CE pkts", "CNP tx", "CNP rx", "min Mbit/s", "last Mbit/s"
        );
        for f in r.flows.iter().filter(|f| r.cc == CcMode::Dcqcn || f.ce_packets > 0) {
            let min = f.rate_trajectory.iter().map(|s| s.1).min();
            let last = f.rate_trajectory.last().map(|s| s.1);
            let mbit = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{:.2}", v as f64 / 1e6));
            println!(
                "  {:<20} {:>8} {:>8} {:>8} {:>12} {:>12}",
                format!("{}->{}", f.src, f.dst),
                f.ce_packets,
                f.cnps_sent,
                f.cnps_received,
                mbit(min),
                mbit(last)
            );
        }
    }
    let busy: Vec<&HostResult> = r
        .hosts
        .iter()
        .filter(|h| h.pause_frames_received + h.pause_frames_sent + h.cts_max_in_flight_bytes > 0)
        .collect();
    if busy.is_empty() {
        println!("  no PFC frame reached or left a host");
    } else {
        println!("  {:<10} {:>10} {:>12} {:>10} {:>16}", "host", "PFC rx", "paused ms", "PFC tx", "CTS max in flight");
        for h in busy {
            println!(
                "  {:<10} {:>10} {:>12.2} {:>10} {:>16}",
                h.host,
                h.pause_frames_received,
                h.paused_ns as f64 / 1e6,
                h.pause_frames_sent,
                h.cts_max_in_flight_bytes
            );
        }
    }
    if let Some(b) = r.cts_bound_bytes {
        println!("  CTS bound: {b} bytes in flight per receiver");
    }
    let host_drops: u64 = r.hosts.iter().map(|h| h.udp_receive_drops).sum();
    if host_drops > 0 {
        println!(
            "  hosts' kernels dropped {host_drops} datagrams on full receive sockets (the software endpoints \
             fell behind: loss outside the fabric, resent by go-back-N)"
        );
    }
}
