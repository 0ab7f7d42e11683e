//! `fabric run trace FILE`: replays a trace's job-wide ops on the testbed's endpoints.
//!
//! The replay runs in rounds ([`Job::rounds`]): every op whose dependencies have completed takes
//! part in the next round with its next step, and a round is one engine step (all its transfers
//! at once, until every byte is acknowledged). An op's start is the start of its first round, its
//! end the end of its last. Compute nodes are skipped, not slept.
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, ensure};
use serde::Serialize;

use super::{Job, OpKind, files::load};
use crate::{
    endpoint::CcMode,
    endpoint::EndpointOptions,
    endpoint::SportPolicy,
    endpoint::engine::HostResult,
    endpoint::engine::RunClock,
    endpoint::engine::run_step_in,
    model::placement::Placement,
    model::workload::HostTransfer,
    run::{BalanceSummary, RunSpec, balance},
    state::State,
    telemetry::stats::{UplinkBytes, UplinkLoad},
    testbed,
};

/// The version of the trace results schema (documented in `testbed/workloads/README.md`).
pub const TRACE_SCHEMA: &str = "fabric.trace/1";

/// `fabric run trace`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum RunSub {
    /// Replay a Chakra (.et) or PARAM (.json) trace: one file of a rank (its siblings are the
    /// other ranks) or a directory of them; see testbed/traces/README.md.
    Trace(TraceArgs),
}

#[derive(Clone, Debug, clap::Args)]
pub struct TraceArgs {
    /// A rank's trace file (NAME.RANK.et, NAME<RANK>.json) or a directory of them.
    pub file: PathBuf,
    /// Ranks, for a lone trace file without a rank number (every rank runs it).
    #[arg(long)]
    pub ranks: Option<usize>,
    /// Multiply every op's size by this (at least 1 byte per op).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Replays of the trace; each reports its completion time.
    #[arg(long, default_value_t = 1)]
    pub iterations: u32,
    /// contiguous, fragmented, random:SEED or hosts:H1,H2,... (rank i on the i-th host).
    #[arg(long, default_value_t = RunSpec::default().placement)]
    pub placement: Placement,
    /// QPs per connection.
    #[arg(long, default_value_t = RunSpec::default().qps)]
    pub qps: u32,
    /// UDP source port: per-qp (rxe's rule, from the QP numbers) or fixed (one per host pair).
    #[arg(long, value_enum, default_value_t = RunSpec::default().sport)]
    pub sport: SportPolicy,
    /// Set every switch's routing mode first: five-tuple, eecmp, pin, te, flowlet, adaptive, spray
    /// or wcmp (docs/routing-modes.md).
    #[arg(long, value_parser = crate::model::topology::parse_hash_mode)]
    pub hash: Option<fabric_common::config::HashMode>,
    /// Re-seed every switch's hash first (with --hash).
    #[arg(long, value_parser = crate::model::units::parse_seed, requires = "hash")]
    pub hash_seed: Option<u32>,
    /// Rate of one connection, in bits/s of wall time (as `fabric run --rate`; default: the host
    /// link's rate slowed by the time scale, tiers.host.rate_gbps / time_scale).
    #[arg(long)]
    pub rate: Option<crate::model::units::Size>,
    /// RoCE path MTU, bytes.
    #[arg(long, default_value_t = RunSpec::default().path_mtu)]
    pub path_mtu: u32,
    /// Congestion control on top of PFC: none, dcqcn, cts.
    #[arg(long, value_enum, default_value_t = RunSpec::default().cc)]
    pub cc: CcMode,
    /// DSCP of data and ACKs; the switches' priority class is DSCP >> 3 (26: lossless class 3).
    #[arg(long, default_value_t = 26)]
    pub dscp: u8,
    /// Send data and ACKs ECN-capable (ECT(0)), so that switches mark CE.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub ecn: bool,
    /// Testbed prefix (default: the prefix of --topology, else of the default topology).
    #[arg(long, value_parser = crate::model::topology::validate::parse_prefix, conflicts_with = "topology")]
    pub prefix: Option<String>,
    /// Topology file whose prefix to use.
    #[arg(long)]
    pub topology: Option<PathBuf>,
    /// Write the result (JSON, schema fabric.trace/1) here; default results/trace-<name>-<time>.json.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

impl TraceArgs {
    /// Arguments for `file` with every other setting at its default.
    pub fn for_file(file: impl Into<PathBuf>) -> Self {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct P {
            #[command(subcommand)]
            s: RunSub,
        }
        let f: PathBuf = file.into();
        let RunSub::Trace(mut a) = P::parse_from(["p", "trace", "x"]).s;
        a.file = f;
        a
    }

    /// The endpoint settings, validated as `fabric run`'s.
    pub fn endpoint(&self) -> Result<(EndpointOptions, Option<fabric_common::config::HashMode>)> {
        let spec = RunSpec {
            workload: Some(crate::model::workload::Collective::Allreduce),
            qps: self.qps,
            sport: self.sport,
            hash: self.hash,
            hash_seed: self.hash_seed,
            rate: self.rate,
            path_mtu: self.path_mtu,
            cc: self.cc,
            dscp: self.dscp,
            ecn: self.ecn,
            ..RunSpec::default()
        };
        let o = spec.to_options()?;
        Ok((o.endpoint, o.hash))
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct TraceInfo {
    pub path: String,
    pub format: &'static str,
    pub ranks: usize,
    pub ops: usize,
    pub rounds: usize,
    /// Compute / memory / metadata nodes (PARAM: compute and no-data entries) not replayed, and
    /// their traced duration (Chakra `duration_micros`), over all ranks.
    pub skipped_nodes: usize,
    pub skipped_micros: u64,
    pub scale: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TraceIteration {
    /// The step's completion time (all ops), wall ns, and in modelled time.
    pub completion_ns: u64,
    pub modelled_completion_ns: f64,
    pub round_ns: Vec<u64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct OpResult {
    pub id: usize,
    pub name: String,
    pub kind: String,
    pub group: Option<String>,
    pub ranks: Vec<usize>,
    /// Host of each rank of `ranks`.
    pub hosts: Vec<String>,
    /// The op's size as the trace states it (after --scale).
    pub bytes: u64,
    /// `[rank, node id]` of each per-rank part (PARAM: entry index).
    pub nodes: Vec<(usize, u64)>,
    pub deps: Vec<usize>,
    pub steps: usize,
    /// Rounds it ran in (none for a barrier).
    pub first_round: Option<usize>,
    pub last_round: Option<usize>,
    /// From the iteration's start, wall ns.
    pub start_ns: u64,
    pub end_ns: u64,
    /// end - start, wall and modelled.
    pub completion_ns: u64,
    pub modelled_completion_ns: f64,
    pub bytes_needed: u64,
    pub bytes_delivered: u64,
    pub flows: usize,
    pub retransmitted: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TraceResult {
    pub schema: &'static str,
    pub testbed: String,
    pub trace: TraceInfo,
    pub placement: Vec<String>,
    pub hash: String,
    pub iterations: Vec<TraceIteration>,
    /// Every op, timed in the last iteration.
    pub ops: Vec<OpResult>,
    /// Over every iteration.
    pub bytes_needed: u64,
    pub bytes_delivered: u64,
    pub endpoint: EndpointOptions,
    pub time_scale: u64,
    pub uplinks: Vec<UplinkLoad>,
    pub balance: BalanceSummary,
    pub congestion: crate::telemetry::stats::CongestionTotals,
    pub hosts: Vec<HostResult>,
}

/// Loads, matches and scales a trace.
pub fn job(args: &TraceArgs) -> Result<Job> {
    ensure!(args.scale > 0.0 && args.scale.is_finite(), "--scale must be a positive number");
    let input = load(&args.file, args.ranks)?;
    let mut job = Job::build(&input).with_context(|| format!("trace {}", args.file.display()))?;
    if args.scale != 1.0 {
        for op in &mut job.ops {
            if op.kind != OpKind::Barrier {
                op.bytes = ((op.bytes as f64 * args.scale).round() as u64).max(1);
            }
        }
    }
    Ok(job)
}

pub fn run(state: &State, args: &TraceArgs) -> Result<TraceResult> {
    crate::sys::netns::require_capabilities()?;
    let plan = &state.plan;
    refuse_te(args)?;
    let job = job(args)?;
    ensure!(args.iterations >= 1, "at least one iteration");
    let (mut endpoint, hash_mode) = args.endpoint()?;
    endpoint.check_fits(plan.topology.mtu)?;
    endpoint.time_scale = plan.topology.time_scale;
    let hosts =
        args.placement.place(plan, job.ranks).with_context(|| format!("placing the trace's {} ranks", job.ranks))?;
    if let Some(mode) = hash_mode {
        testbed::set_hash_mode(state, mode, args.hash_seed)?;
    }
    let hash = match hash_mode {
        Some(m) => m.as_str().to_string(),
        None => plan.nodes[plan.switches().next().context("no switches")?].hash.as_str().to_string(),
    };
    let rounds = job.rounds();
    let steps: Vec<Vec<Vec<crate::model::workload::Transfer>>> = job.ops.iter().map(|o| o.steps()).collect();
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(u64::from(args.iterations) * rounds.len() as u64)
    };
    let before = UplinkBytes::read(state)?;
    let congestion_before = crate::telemetry::stats::congestion_totals(state)?;
    let clock = RunClock { start: std::time::Instant::now() };
    let scale = plan.topology.time_scale.max(1) as f64;
    let (mut bytes_needed, mut bytes_delivered) = (0, 0);
    let mut iterations = Vec::new();
    let mut host_results: Vec<HostResult> = Vec::new();
    let mut ops: Vec<OpResult> = Vec::new();
    for _ in 0..args.iterations {
        ops = job
            .ops
            .iter()
            .map(|o| OpResult {
                id: o.id,
                name: o.name.clone(),
                kind: o.kind.as_str().into(),
                group: o.group.clone(),
                ranks: o.ranks.clone(),
                hosts: o.ranks.iter().map(|&r| plan.nodes[hosts[r]].name.clone()).collect(),
                bytes: o.bytes,
                nodes: o.nodes.clone(),
                deps: o.deps.clone(),
                steps: steps[o.id].len(),
                ..Default::default()
            })
            .collect();
        let mut t = 0u64;
        let mut round_ns = Vec::new();
        for (ri, round) in rounds.iter().enumerate() {
            let mut transfers = Vec::new();
            let mut owner = Vec::new();
            for &(o, s) in round {
                for tr in &steps[o][s] {
                    transfers.push(HostTransfer { src: hosts[tr.src], dst: hosts[tr.dst], bytes: tr.bytes });
                    owner.push(o);
                }
                if ops[o].first_round.is_none() {
                    ops[o].first_round = Some(ri);
                    ops[o].start_ns = t;
                }
            }
            let r = run_step_in(plan, &transfers, &endpoint, &clock).with_context(|| {
                let names: Vec<String> =
                    round.iter().map(|&(o, s)| format!("op {o} {:?} step {s}", job.ops[o].name)).collect();
                format!("round {ri} ({})", names.join(", "))
            })?;
            t += r.duration_ns;
            round_ns.push(r.duration_ns);
            for (k, f) in r.flows.iter().enumerate() {
                let op = &mut ops[owner[k]];
                op.bytes_needed += transfers[k].bytes;
                op.bytes_delivered += f.bytes_received;
                op.flows += 1;
                op.retransmitted += f.retransmitted;
            }
            for &(o, _) in round {
                ops[o].last_round = Some(ri);
                ops[o].end_ns = t;
            }
            crate::run::accumulate_hosts(&mut host_results, &r.hosts);
            bar.inc(1);
        }
        // Ops without steps (barriers) end when their last dependency does.
        for i in 0..ops.len() {
            if ops[i].first_round.is_none() {
                let end = ops[i].deps.iter().map(|&d| ops[d].end_ns).max().unwrap_or(0);
                ops[i].start_ns = end;
                ops[i].end_ns = end;
            }
        }
        for op in &mut ops {
            op.completion_ns = op.end_ns - op.start_ns;
            op.modelled_completion_ns = op.completion_ns as f64 / scale;
            bytes_needed += op.bytes_needed;
            bytes_delivered += op.bytes_delivered;
        }
        iterations.push(TraceIteration { completion_ns: t, modelled_completion_ns: t as f64 / scale, round_ns });
    }
    bar.finish_and_clear();
    let uplinks = UplinkBytes::read(state)?.since(&before);
    std::thread::sleep(std::time::Duration::from_millis(250));
    let congestion = crate::telemetry::stats::congestion_totals(state)?.since(&congestion_before);
    host_results.sort_by(|a, b| a.host.cmp(&b.host));
    Ok(TraceResult {
        schema: TRACE_SCHEMA,
        testbed: plan.topology.prefix.clone(),
        trace: TraceInfo {
            path: args.file.display().to_string(),
            format: job.format,
            ranks: job.ranks,
            ops: job.ops.len(),
            rounds: rounds.len(),
            skipped_nodes: job.skipped_nodes,
            skipped_micros: job.skipped_micros,
            scale: args.scale,
        },
        placement: hosts.iter().map(|&h| plan.nodes[h].name.clone()).collect(),
        hash,
        iterations,
        ops,
        bytes_needed,
        bytes_delivered,
        time_scale: endpoint.time_scale,
        endpoint,
        balance: balance(&uplinks),
        uplinks,
        congestion,
        hosts: host_results,
    })
}

pub fn print(r: &TraceResult) {
    let t = &r.trace;
    println!(
        "trace {} ({}): {} ranks, {} ops in {} rounds; {} compute/other nodes skipped (traced {:.1} ms of compute, not slept)",
        t.path,
        t.format,
        t.ranks,
        t.ops,
        t.rounds,
        t.skipped_nodes,
        t.skipped_micros as f64 / 1e3
    );
    println!("placement {}; switch hash {}; time scale {}", r.placement.join(","), r.hash, r.time_scale);
    for (i, it) in r.iterations.iter().enumerate() {
        println!(
            "  step {}: completion {:.2} ms wall = {:.2} µs modelled",
            i + 1,
            it.completion_ns as f64 / 1e6,
            it.modelled_completion_ns / 1e3
        );
    }
    println!(
        "  {:>3} {:<32} {:<14} {:<10} {:>8} {:>5} {:>9} {:>9} {:>11} {:>17}",
        "op", "name", "kind", "ranks", "bytes", "steps", "start ms", "end ms", "modelled µs", "delivered/needed"
    );
    for o in &r.ops {
        let ranks = match o.ranks.as_slice() {
            [a, b] if o.kind == "send-recv" => format!("{a}->{b}"),
            rs if rs.windows(2).all(|w| w[1] == w[0] + 1) && !rs.is_empty() => {
                format!("{}-{}", rs[0], rs[rs.len() - 1])
            }
            rs => rs.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
        };
        println!(
            "  {:>3} {:<32} {:<14} {:<10} {:>8} {:>5} {:>9.2} {:>9.2} {:>11.2} {:>8}/{:<8}",
            o.id,
            o.name,
            o.kind,
            ranks,
            o.bytes,
            o.steps,
            o.start_ns as f64 / 1e6,
            o.end_ns as f64 / 1e6,
            o.modelled_completion_ns / 1e3,
            o.bytes_delivered,
            o.bytes_needed
        );
    }
    println!(
        "bytes delivered {} of {} needed; uplink balance: mean max/mean {:.2}, worst {:.2}; {} ECN marks, {} PFC frames",
        r.bytes_delivered,
        r.bytes_needed,
        r.balance.mean_max_over_mean,
        r.balance.worst_max_over_mean,
        r.congestion.ecn_marked,
        r.congestion.pfc_frames_received
    );
}

/// `--hash te` needs the controller to place each flow, which a replay does not do: the switches
/// would fall back to the hash while the result said `te`.
fn refuse_te(args: &TraceArgs) -> Result<()> {
    ensure!(
        args.hash != Some(fabric_common::config::HashMode::Te),
        "--hash te: a trace replay places no flows for traffic engineering, so te would hash like eecmp \
         (`fabric run --hash te` places a collective's flows)"
    );
    Ok(())
}

/// The command: loads the testbed's state, replays, prints, writes the JSON.
pub fn main(args: &TraceArgs) -> Result<()> {
    // Check and decode first: a bad option or a malformed trace is reported before anything
    // touches the testbed.
    refuse_te(args)?;
    job(args)?;
    let prefix = match &args.prefix {
        Some(p) => p.clone(),
        None => crate::model::topology::Topology::load(args.topology.as_deref())?.prefix,
    };
    let state = State::load(&prefix)?;
    let result = run(&state, args)?;
    print(&result);
    let path = args.json.clone().unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let name = trace_name(&args.file);
        PathBuf::from(format!("results/trace-{name}-{t}.json"))
    });
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&result)?)
        .with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

fn trace_name(p: &Path) -> String {
    let p = if p.is_dir() { p } else { p.parent().unwrap_or(p) };
    p.file_name().map_or_else(|| "trace".into(), |n| n.to_string_lossy().into_owned())
}
