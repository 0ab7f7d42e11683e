//! `fabric run WORKLOAD`: a collective on the testbed's hosts with our RoCEv2 endpoints, and what
//! the fabric did meanwhile (uplink load and balance from the XDP counters).
use anyhow::{Context as _, Result, ensure};
use fabric_common::config::HashMode;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::{
    endpoint::{
        EndpointOptions,
        engine::{FlowResult, HostTransfer, run_step},
    },
    placement::Placement,
    stats::{UplinkBytes, UplinkLoad},
    testbed::{self, State},
    workload::{Collective, schedule},
};

/// The version of the results schema (documented in `testbed/workloads/README.md`).
pub const RESULTS_SCHEMA: &str = "fabric.run/1";

#[derive(Clone, Debug, Serialize)]
pub struct RunOptions {
    pub collective: Collective,
    /// Number of ranks (default: every host).
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
    /// Collective completion time, ns.
    pub completion_ns: u64,
    pub step_ns: Vec<u64>,
}

/// Uplink balance over all RTSWs that carried traffic.
#[derive(Clone, Debug, Serialize)]
pub struct BalanceSummary {
    pub mean_max_over_mean: f64,
    pub worst_max_over_mean: f64,
    pub mean_jain: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub schema: &'static str,
    pub testbed: String,
    pub options: RunOptions,
    /// Host of each rank.
    pub placement: Vec<String>,
    /// Switch hash mode during the run.
    pub hash: String,
    pub iterations: Vec<IterationResult>,
    /// Every flow of every step of the last iteration.
    pub flows: Vec<FlowResult>,
    pub uplinks: Vec<UplinkLoad>,
    pub balance: BalanceSummary,
    /// Bytes the collective had to move, and bytes the receivers accepted (in order, once).
    pub bytes_needed: u64,
    pub bytes_delivered: u64,
    /// Achieved over intended rate, averaged over flows: well under 1 means this machine's CPU,
    /// not the fabric, limited the run.
    pub achieved_over_intended: f64,
    pub cpu_limited: bool,
}

pub fn balance(uplinks: &[UplinkLoad]) -> BalanceSummary {
    let active: Vec<&UplinkLoad> = uplinks.iter().filter(|u| u.tx_bytes.iter().any(|t| t.1 > 0)).collect();
    let n = active.len().max(1) as f64;
    BalanceSummary {
        mean_max_over_mean: active.iter().map(|u| u.max_over_mean).sum::<f64>() / n,
        worst_max_over_mean: active.iter().map(|u| u.max_over_mean).fold(0.0, f64::max),
        mean_jain: active.iter().map(|u| u.jain).sum::<f64>() / n,
    }
}

pub fn run(state: &State, opts: &RunOptions, quiet: bool) -> Result<RunResult> {
    crate::netns::require_capabilities()?;
    let plan = &state.plan;
    ensure!(opts.iterations >= 1, "at least one iteration");
    ensure!(opts.endpoint.path_mtu + 20 + 8 + 12 + 16 + 4 <= plan.topology.mtu, "path MTU {} does not fit the link MTU {}", opts.endpoint.path_mtu, plan.topology.mtu);
    let ranks = opts.ranks.unwrap_or_else(|| plan.hosts().count());
    let hosts = opts.placement.place(plan, ranks)?;
    if let Some(mode) = opts.hash {
        testbed::set_hash_mode(state, mode, opts.hash_seed)?;
    }
    let hash = match opts.hash {
        Some(m) => m.as_str().to_string(),
        None => plan.nodes[plan.switches().next().context("no switches")?].hash.as_str().to_string(),
    };
    let steps = schedule(opts.collective, ranks, opts.message_bytes, opts.seed);
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(u64::from(opts.iterations) * steps.len() as u64) };
    bar.set_style(ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} steps {msg}").expect("valid"));

    let before = UplinkBytes::read(state)?;
    let mut iterations = Vec::new();
    let mut flows = Vec::new();
    let mut bytes_needed = 0;
    let mut bytes_delivered = 0;
    for it in 0..opts.iterations {
        bar.set_message(format!("iteration {}", it + 1));
        let mut step_ns = Vec::new();
        flows.clear();
        for step in &steps {
            let transfers: Vec<HostTransfer> =
                step.iter().map(|t| HostTransfer { src: hosts[t.src], dst: hosts[t.dst], bytes: t.bytes }).collect();
            bytes_needed += transfers.iter().map(|t| t.bytes).sum::<u64>();
            let r = run_step(plan, &transfers, &opts.endpoint)?;
            step_ns.push(r.duration_ns);
            bytes_delivered += r.flows.iter().map(|f| f.bytes_received).sum::<u64>();
            flows.extend(r.flows);
            bar.inc(1);
        }
        iterations.push(IterationResult { completion_ns: step_ns.iter().sum(), step_ns });
    }
    bar.finish_and_clear();
    let uplinks = UplinkBytes::read(state)?.since(&before);
    let achieved: Vec<f64> = flows.iter().map(|f| f.goodput_bps / f.intended_bps as f64).collect();
    let achieved_over_intended = achieved.iter().sum::<f64>() / achieved.len().max(1) as f64;
    Ok(RunResult {
        schema: RESULTS_SCHEMA,
        testbed: plan.topology.prefix.clone(),
        options: opts.clone(),
        placement: hosts.iter().map(|&h| plan.nodes[h].name.clone()).collect(),
        hash,
        iterations,
        bytes_delivered,
        bytes_needed,
        balance: balance(&uplinks),
        uplinks,
        flows,
        achieved_over_intended,
        cpu_limited: achieved_over_intended < 0.8,
    })
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
        println!("  iteration {}: completion {:.2} ms", i + 1, it.completion_ns as f64 / 1e6);
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
    println!(
        "endpoints: achieved/intended rate {:.2}{}; {} retransmitted packets",
        r.achieved_over_intended,
        if r.cpu_limited { " (CPU-limited: this machine, not the fabric, set the pace)" } else { "" },
        retx
    );
}
