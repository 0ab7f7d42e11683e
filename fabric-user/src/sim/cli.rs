//! The command line of `fabric sim`.
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail, ensure};
use fabric_common::config::HashMode;
use serde::Serialize;

use super::{
    SimOptions, SimResult,
    packet::{PACKET_DEFAULTS, PacketOptions, QueueModel, simulate_packet_cases, simulate_packet_run},
    print,
    record::{records, save},
    simulate,
    trace::{TraceSimOptions, TraceSimResult, simulate_input},
    whatif::{WhatIf, WhatIfKind, resolve_links, simulate_flap_flow, simulate_whatif},
};
use crate::forwarding::fabric::{Scale, SimFabric};
use crate::{
    endpoint::{CcMode, EndpointOptions, SportPolicy},
    endpoint::{MAX_QPS, PATH_MTUS},
    model::fault::{check_rate, parse_loss},
    model::placement::Placement,
    model::plan::Plan,
    model::topology::Topology,
    model::topology::parse_hash_mode,
    model::units::Size,
    model::workload::Collective,
};

/// Which simulator runs the cases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// Flow level: max-min fair shares, no queues (fast; balance and a bound on time).
    #[default]
    Flow,
    /// Packet level: the twin, with queues, ECN, PFC and the endpoints' congestion control.
    Packet,
}

/// Scenarios of `fabric sim` beyond one case.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum SimScenario {
    /// A scheduler's stream of jobs: Poisson arrivals placed by min-cut on the free hosts, so
    /// that placement fragments over time; every start measured under pin, ECMP and E-ECMP.
    Schedule(super::schedule::ScheduleArgs),
}

#[derive(Clone, Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("failure").args(["fail_at", "flap"]))]
pub struct SimArgs {
    #[command(subcommand)]
    pub scenario: Option<SimScenario>,
    /// flow (max-min fair share) or packet (the packet-level twin).
    #[arg(long, value_enum, default_value_t = Model::Flow)]
    pub model: Model,
    /// Packet model: congestion control on top of PFC (repeatable; default: none).
    #[arg(long, value_enum)]
    pub cc: Vec<CcMode>,
    /// Packet model: the endpoints' reliability, gbn or ooo (as `fabric run --transport`; the
    /// twin's hosts run the same QP code).
    #[arg(long, default_value_t = EndpointOptions::default().transport, value_parser = crate::run::parse_transport)]
    pub transport: fabric_roce::transport::Transport,
    /// Packet model: propagation delay of every link, ns (a topology file states none).
    #[arg(long, default_value_t = PACKET_DEFAULTS.link_delay_ns)]
    pub link_delay_ns: u64,
    /// Packet model: a step not finished after this much modelled time is reported unfinished.
    #[arg(long, default_value_t = PACKET_DEFAULTS.deadline_ns / 1_000_000)]
    pub deadline_ms: u64,
    /// Packet model: refuse a case whose estimated memory is larger (GiB).
    #[arg(long, default_value_t = (PACKET_DEFAULTS.memory_limit_bytes >> 30) as f64)]
    pub memory_limit_gib: f64,
    /// Packet model: the switches' egress queues. `held` (the twin's: a queue holds its
    /// packets, a paused port stops) or `phantom` (the XDP testbed's: packets leave at once,
    /// marks and PFC read a modelled depth, a paused switch keeps sending), to measure what the
    /// testbed's model changes.
    #[arg(long, default_value = PACKET_DEFAULTS.queues.name(), value_parser = super::packet::parse_queue_model)]
    pub queues: QueueModel,
    /// Topology file (default: the embedded default testbed).
    #[arg(long, conflicts_with = "scale")]
    pub topology: Option<PathBuf>,
    /// A synthetic fabric: 1k, 4k or 24k (= meta: 8 zones x 192 racks x 16 GPUs).
    #[arg(long, value_enum)]
    pub scale: Option<Scale>,
    /// The collective to simulate.
    #[arg(long, value_enum, default_value = "allreduce")]
    pub workload: Collective,
    /// Routing mode(s) to simulate (repeatable; default: five-tuple, eecmp and pin).
    #[arg(long, value_parser = parse_hash_mode)]
    pub hash: Vec<HashMode>,
    /// QPs per connection (repeatable; default: 1 and 8).
    #[arg(long)]
    pub qps: Vec<u32>,
    /// UDP source port: per-qp (rxe's rule, from the QP numbers) or fixed (one per host pair).
    #[arg(long, value_enum, default_value_t = EndpointOptions::default().sport)]
    pub sport: SportPolicy,
    /// Message size per rank (K, M, G = x1000; Ki, Mi, Gi = x1024); larger than `fabric run`'s
    /// default, since a simulated fabric costs no wall time per byte.
    #[arg(long = "message", alias = "size", default_value_t = DEFAULT_MESSAGE)]
    pub message: Size,
    /// Ranks (default: every host).
    #[arg(long)]
    pub ranks: Option<usize>,
    /// contiguous, fragmented, random:SEED or hosts:H1,H2,...
    #[arg(long, default_value_t = Placement::Contiguous)]
    pub placement: Placement,
    /// Seed of the workload's random permutation and, in the packet model, of the switches'
    /// random draws (RED's ECN marking, `--loss`).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Re-seed every switch's hash, as `fabric run --hash-seed`.
    #[arg(long, value_parser = crate::model::units::parse_seed)]
    pub hash_seed: Option<u32>,
    /// RoCE path MTU (the same default as `fabric run`). The simulators model real links: unlike
    /// the testbed, whose veths cap a frame at the topology's `mtu`, they take any path MTU.
    #[arg(long, default_value_t = EndpointOptions::default().path_mtu)]
    pub path_mtu: u32,
    /// The receiver ACKs every N packets (and at each message's end), as `fabric run`.
    #[arg(long, default_value_t = EndpointOptions::default().ack_every)]
    pub ack_every: u32,
    /// Take a link out of service (repeatable), as `fabric link down` does: routing goes
    /// around it (the controller's tables, at any scale).
    #[arg(long = "down", value_name = "LINK")]
    pub down: Vec<String>,
    /// A degraded link (repeatable): `z0r0:z0c1=100` gives it 100 Gbit/s instead of its own,
    /// as `fabric link degrade --rate` does on the testbed.
    #[arg(long = "degrade", value_name = "LINK=GBPS")]
    pub degrade: Vec<String>,
    /// Packet model: a lossy link (repeatable): `z0r0:z0c1=0.5%` drops that share of the frames
    /// each switch end sends, by the XDP switch's own seeded draw (`--seed`), as `fabric link
    /// degrade --loss` does on the testbed.
    #[arg(long = "loss", value_name = "LINK=PCT%")]
    pub loss: Vec<String>,
    /// Packet model: a link (SWITCH:PEER) or a switch fails at a modelled time of the job
    /// (`z0r0:z0c1@200us`); the routes are repaired `--detect-us` later. Reports the job's
    /// slowdown against the same run without it.
    #[arg(long = "fail-at", value_name = "TARGET@TIME", conflicts_with = "drain_at")]
    pub fail_at: Option<String>,
    /// Packet model: a link or a switch is drained at a modelled time of the job (the routes
    /// avoid it from then on; nothing is lost).
    #[arg(long = "drain-at", value_name = "TARGET@TIME")]
    pub drain_at: Option<String>,
    /// A link (SWITCH:PEER) or a switch flaps from a modelled time of the job
    /// (`z0r0:z0c1@200us`, default @0): down for the first half of each `--period`, `--count`
    /// times. Reports the job's slowdown against the same run without it. The packet model
    /// simulates it (loss, routes around it `--detect-us` after each failure if it stays down
    /// that long, back when it is up); the flow model time-slices the job between its healthy
    /// rate and its rate without the link.
    #[arg(long, value_name = "TARGET[@START]", conflicts_with_all = ["fail_at", "drain_at"], requires = "period")]
    pub flap: Option<String>,
    /// `--flap`: the flap's period (`1ms`, `250us`).
    #[arg(long, value_name = "TIME", requires = "flap")]
    pub period: Option<String>,
    /// `--flap`: how many periods (at most 100000).
    #[arg(long, default_value_t = 1, requires = "flap")]
    pub count: u32,
    /// Packet model: from a failure to the controller's repaired routes, microseconds (default
    /// 100).
    #[arg(long, requires = "failure")]
    pub detect_us: Option<f64>,
    /// Packet model: also write each case as the testbed writes a run: its job record
    /// (`results/jobs/JOB.json`, for `fabric report JOB`) and its run result
    /// (`results/twin/JOB.json`, schema fabric.run/2).
    #[arg(long)]
    pub job_record: bool,
    /// Packet model: replay this Chakra or PARAM trace (as `fabric run trace` takes it)
    /// instead of `--workload`: a training step's compute and communication.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Ranks of a single-file (SPMD) trace.
    #[arg(long, requires = "trace")]
    pub trace_ranks: Option<usize>,
    /// With --trace: the modelled GPU's speed over the traced one's (compute takes traced /
    /// this).
    #[arg(long, default_value_t = 1.0, requires = "trace")]
    pub gpu_speedup: f64,
    /// With --trace: HOST:FACTOR, a host whose GPU computes FACTOR times slower than the
    /// others (as `fabric run --straggler`); its rank's compute nodes take that much longer.
    #[arg(long, value_name = "HOST:FACTOR", requires = "trace", value_parser = crate::run::job::Straggler::parse)]
    pub straggler: Option<crate::run::job::Straggler>,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `--message` when not given.
const DEFAULT_MESSAGE: Size = Size(256 << 20);

/// `--detect-us` when not given: from a failure to the controller's repaired routes, microseconds.
const DEFAULT_DETECT_US: f64 = 100.0;

/// Faults to simulate, as the CLI names them.
#[derive(Clone, Debug, Default)]
pub struct SimFaults {
    pub down: Vec<String>,
    /// `LINK=GBPS`.
    pub degrade: Vec<String>,
    /// `LINK=PCT%`.
    pub loss: Vec<String>,
}

impl SimFaults {
    /// The faults as a report names them: `down LINK`, `degrade LINK=GBPS Gbit/s`, `loss LINK=PCT%`.
    fn describe(&self) -> Vec<String> {
        let down = self.down.iter().map(|s| format!("down {s}"));
        let degrade = self.degrade.iter().map(|s| format!("degrade {s} Gbit/s"));
        down.chain(degrade).chain(self.loss.iter().map(|s| format!("loss {s}"))).collect()
    }
}

/// The schema of `fabric sim --json`. Version 2: a what-if case's `case` is the case without
/// its event, which `whatif` names (version 1 named the event in `case`); `faults` is new.
pub const SIM_SCHEMA: &str = "fabric.sim/2";

#[derive(Debug, Serialize)]
pub struct SimReport {
    pub schema: &'static str,
    /// Seconds to build the fabric description (plan and groups).
    pub build_s: f64,
    /// The faults every case ran with (`--down`, `--degrade`, `--loss`); empty for a healthy
    /// fabric.
    pub faults: Vec<String>,
    pub results: Vec<SimResult>,
    /// `--trace`: one training step per case.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<TraceSimResult>,
}

/// The fabric of `--topology` / `--scale`: the controller's tables for small fabrics, the Clos
/// structure for large ones.
pub fn build_fabric(topology: Option<&std::path::Path>, scale: Option<Scale>) -> Result<SimFabric> {
    build_fabric_with(topology, scale, &SimFaults::default())
}

/// The same with `faults`: degraded links get their new rate (the fair share's capacity), and
/// down links send the fabric through the controller's tables without them, at any size.
pub fn build_fabric_with(
    topology: Option<&std::path::Path>,
    scale: Option<Scale>,
    faults: &SimFaults,
) -> Result<SimFabric> {
    let topo = match scale {
        Some(s) => s.topology(),
        None => Topology::load(topology)?,
    };
    let mut plan = Plan::new(&topo);
    for d in &faults.degrade {
        let (spec, rate) = d.split_once('=').with_context(|| format!("--degrade {d:?}: expected LINK=GBPS"))?;
        let l = plan.find_link(spec).with_context(|| format!("--degrade {d:?}"))?;
        let rate: f64 = rate.trim().parse().with_context(|| format!("--degrade {d:?}: {rate:?} is not Gbit/s"))?;
        let nominal = plan.links[l].rate_gbps;
        plan.links[l].rate_gbps = check_rate(rate, nominal).with_context(|| format!("--degrade {d:?}"))?;
    }
    let down = faults
        .down
        .iter()
        .map(|spec| plan.find_link(spec).with_context(|| format!("--down {spec:?}")))
        .collect::<Result<std::collections::BTreeSet<_>>>()?;
    let loss = lossy_ports(&plan, &faults.loss)?;
    let hosts = plan.hosts().count();
    let mut fabric = if hosts <= 512 || !down.is_empty() {
        SimFabric::from_controller(&plan, &down)
    } else {
        SimFabric::clos(plan)?
    };
    fabric.loss = loss;
    Ok(fabric)
}

/// The switch ports that `--loss LINK=PCT%` makes lossy: both ends of the link that are
/// switches, as on the testbed (a host's own sending is not modelled by a switch).
fn lossy_ports(plan: &Plan, loss: &[String]) -> Result<Vec<(usize, usize, u32)>> {
    let mut out = Vec::new();
    for d in loss {
        let (spec, pct) = d.split_once('=').with_context(|| format!("--loss {d:?}: expected LINK=PCT%"))?;
        let l = plan.find_link(spec).with_context(|| format!("--loss {d:?}"))?;
        let ppm = parse_loss(pct).with_context(|| format!("--loss {d:?}"))?;
        let link = &plan.links[l];
        for (node, port) in [(link.a, link.a_port), (link.b, link.b_port)] {
            if plan.nodes[node].role.is_switch() {
                out.push((node, port, ppm));
            }
        }
    }
    Ok(out)
}

pub fn run(a: &SimArgs) -> Result<SimReport> {
    let t = std::time::Instant::now();
    refuse_ignored_flags(a)?;
    let faults = SimFaults { down: a.down.clone(), degrade: a.degrade.clone(), loss: a.loss.clone() };
    let mut fabric = build_fabric_with(a.topology.as_deref(), a.scale, &faults)?;
    let build_s = t.elapsed().as_secs_f64();
    // A trace gives its own rank count: read it once, for the check and for every case.
    let trace = match &a.trace {
        Some(file) => Some(crate::run::trace::files::load(file, a.trace_ranks)?),
        None => None,
    };
    let ranks = match &trace {
        Some(input) => {
            crate::run::trace::Job::build(input)
                .with_context(|| {
                    format!("trace {}", a.trace.as_ref().map_or(String::new(), |f| f.display().to_string()))
                })?
                .ranks
        }
        None => a.placement.rank_count(a.ranks, fabric.plan.hosts().count()),
    };
    refuse_down_hosts_of_the_job(a, &fabric.plan, ranks)?;
    let modes: Vec<HashMode> = if a.hash.is_empty() { HashMode::ALL.to_vec() } else { distinct(&a.hash) };
    let qps = if a.qps.is_empty() { vec![1, 8] } else { distinct(&a.qps) };
    for &q in &qps {
        ensure!((1..=MAX_QPS).contains(&q), "--qps: {q} is not in 1..={MAX_QPS}");
    }
    ensure!(
        (1..=crate::run::MAX_MESSAGE_BYTES).contains(&a.message.get()),
        "--message: must be 1 byte to {} bytes (1 TiB)",
        crate::run::MAX_MESSAGE_BYTES
    );
    ensure!(PATH_MTUS.contains(&a.path_mtu), "--path-mtu: {} is not a RoCE path MTU ({PATH_MTUS:?})", a.path_mtu);
    ensure!(a.ack_every >= 1, "--ack-every: must be at least 1");
    ensure!(a.memory_limit_gib > 0.0, "--memory-limit-gib: must be above 0");
    ensure!(a.deadline_ms >= 1, "--deadline-ms: must be at least 1");
    ensure!(
        a.link_delay_ns <= fabric_twin::net::MAX_DELAY_NS,
        "--link-delay-ns: {} is more than {} (1 s)",
        a.link_delay_ns,
        fabric_twin::net::MAX_DELAY_NS
    );
    let packet = PacketOptions {
        link_delay_ns: a.link_delay_ns,
        deadline_ns: a.deadline_ms.saturating_mul(1_000_000),
        seed: a.seed,
        memory_limit_bytes: (a.memory_limit_gib * f64::from(1 << 30)) as u64,
        queues: a.queues,
    };
    if a.model != Model::Packet
        && let Some(m) = modes.iter().find(|m| m.reorders_within_a_flow())
    {
        bail!(
            "--hash {}: sends one flow's packets over several paths, and the flow model routes a flow \
             on one (use --model packet)",
            m.as_str()
        );
    }
    let ccs = if a.cc.is_empty() { vec![EndpointOptions::default().cc] } else { distinct(&a.cc) };
    let mut cases = Vec::new();
    for &hash in &modes {
        for (&q, &cc) in qps.iter().flat_map(|q| ccs.iter().map(move |c| (q, c))) {
            cases.push(SimOptions {
                collective: a.workload,
                ranks: a.ranks,
                message_bytes: a.message.get(),
                placement: a.placement.clone(),
                seed: a.seed,
                hash,
                hash_seed: a.hash_seed,
                endpoint: EndpointOptions {
                    qps: q,
                    sport: a.sport,
                    path_mtu: a.path_mtu,
                    ack_every: a.ack_every,
                    cc,
                    transport: a.transport,
                    ..Default::default()
                },
            });
        }
    }
    ensure!(
        a.loss.is_empty() || (a.fail_at.is_none() && a.drain_at.is_none() && a.flap.is_none()),
        "--loss: not with --fail-at/--drain-at/--flap (a what-if rebuilds the fabric without the loss)"
    );
    if let (Some(file), Some(input)) = (&a.trace, &trace) {
        let mut traces = Vec::new();
        for o in &cases {
            let t = TraceSimOptions {
                file: file.clone(),
                spmd_ranks: a.trace_ranks,
                placement: a.placement.clone(),
                hash: o.hash,
                hash_seed: o.hash_seed,
                endpoint: o.endpoint.clone(),
                gpu_speedup: a.gpu_speedup,
                straggler: a.straggler.clone(),
            };
            traces.push(simulate_input(&mut fabric, input, &t, &packet)?);
        }
        return Ok(SimReport { schema: SIM_SCHEMA, build_s, faults: faults.describe(), results: Vec::new(), traces });
    }
    let whatif = match (&a.fail_at, &a.drain_at, &a.flap) {
        (Some(s), _, _) => Some(WhatIf::parse(WhatIfKind::Fail, s)?),
        (_, Some(s), _) => Some(WhatIf::parse(WhatIfKind::Drain, s)?),
        (_, _, Some(s)) => Some(WhatIf::flap(s, a.period.as_deref().unwrap_or_default(), a.count)?),
        _ => None,
    };
    let results = match (a.model, whatif) {
        (Model::Flow, None) => cases.iter().map(|o| simulate(&mut fabric, o)).collect::<Result<Vec<_>>>()?,
        (Model::Flow, Some(w)) if w.kind == WhatIfKind::Flap => {
            ensure!(
                a.detect_us.is_none(),
                "--detect-us: the flow model's flap has no detection delay (its rate changes at once); use --model packet"
            );
            let plan = &fabric.plan;
            let down = down_links(plan, &a.down)?;
            cases.iter().map(|o| simulate_flap_flow(plan, &down, o, &w)).collect::<Result<Vec<_>>>()?
        }
        (Model::Flow, Some(_)) => bail!("--fail-at, --drain-at: what-ifs need the packet model (--model packet)"),
        (Model::Packet, None) if a.job_record => {
            let mut out = Vec::new();
            let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
            for (i, o) in cases.iter().enumerate() {
                let run = simulate_packet_run(&mut fabric, o, &packet, true)?;
                let id = format!("twin-{stamp}-{i}");
                let (job, result) = records(&fabric, o, &run, &id);
                let (job_path, run_path) = save(&job, &result)?;
                println!("{}: job {id}: wrote {} and {}", run.result.case, job_path.display(), run_path.display());
                out.push(run.result);
            }
            out
        }
        (Model::Packet, None) => simulate_packet_cases(&fabric, &cases, &packet)?,
        (Model::Packet, Some(_)) if a.job_record => bail!("--job-record: not with --fail-at or --drain-at"),
        (Model::Packet, Some(w)) => {
            let detect_us = a.detect_us.unwrap_or(DEFAULT_DETECT_US);
            ensure!(detect_us.is_finite() && detect_us >= 0.0, "--detect-us: {detect_us} is not a delay");
            let detect_ns = (detect_us * 1e3).round() as u64;
            let plan = &fabric.plan;
            let down = down_links(plan, &a.down)?;
            resolve_links(plan, &w)?;
            cases.iter().map(|o| simulate_whatif(plan, &down, o, &packet, &w, detect_ns)).collect::<Result<Vec<_>>>()?
        }
    };
    Ok(SimReport { schema: SIM_SCHEMA, build_s, faults: faults.describe(), results, traces: Vec::new() })
}

/// Refuses, by name, a flag that the chosen model or scenario would silently ignore.
fn refuse_ignored_flags(a: &SimArgs) -> Result<()> {
    let defaults = EndpointOptions::default();
    if a.model != Model::Packet {
        // Flags of the packet model alone, given a value other than their default.
        let packet_only = [
            (!a.loss.is_empty(), "--loss: the flow model has no loss (fluid flows)"),
            (!a.cc.iter().all(|&c| c == defaults.cc), "--cc: the flow model has no congestion control"),
            (a.transport != defaults.transport, "--transport: the flow model has no packets to reorder"),
            (a.job_record, "--job-record: needs the packet model"),
            (a.trace.is_some(), "--trace: needs the packet model"),
            (a.queues != PACKET_DEFAULTS.queues, "--queues: the flow model has no queues"),
            (a.link_delay_ns != PACKET_DEFAULTS.link_delay_ns, "--link-delay-ns: the flow model has no delay"),
            (a.deadline_ms != PACKET_DEFAULTS.deadline_ns / 1_000_000, "--deadline-ms: the flow model has no deadline"),
            (
                a.memory_limit_gib != (PACKET_DEFAULTS.memory_limit_bytes >> 30) as f64,
                "--memory-limit-gib: the flow model's memory is not limited",
            ),
        ];
        if let Some((_, what)) = packet_only.iter().find(|(given, _)| *given) {
            bail!("{what}; use --model packet");
        }
    }
    if a.trace.is_some() {
        // The trace says what each rank does, to whom and how much.
        let by_the_trace = [
            (a.fail_at.is_some() || a.drain_at.is_some() || a.flap.is_some(), "--fail-at, --drain-at, --flap"),
            (a.job_record, "--job-record"),
            (a.workload != Collective::Allreduce, "--workload"),
            (a.message != DEFAULT_MESSAGE, "--message"),
            (a.ranks.is_some(), "--ranks"),
        ];
        if let Some((_, flag)) = by_the_trace.iter().find(|(given, _)| *given) {
            bail!("{flag}: not with --trace (the trace gives each rank's work, its peers and its sizes)");
        }
    }
    Ok(())
}

/// `--down` on the link of a host the job's `ranks` ranks run on: hosts are single-homed, so the
/// job could not finish. A host the job leaves out may lose its link. (A placement that fails is
/// reported where the job is placed.)
fn refuse_down_hosts_of_the_job(a: &SimArgs, plan: &Plan, ranks: usize) -> Result<()> {
    if a.down.is_empty() {
        return Ok(());
    }
    let Ok(hosts) = a.placement.place(plan, ranks) else { return Ok(()) };
    for spec in &a.down {
        let l = plan.find_link(spec).with_context(|| format!("--down {spec:?}"))?;
        let link = &plan.links[l];
        if hosts.contains(&link.a) || hosts.contains(&link.b) {
            super::whatif::refuse_host_link(plan, l).with_context(|| format!("--down {spec:?}"))?;
        }
    }
    Ok(())
}

/// The values of a repeatable option, each once, in the order first given: a repeated value
/// would run the same case twice.
fn distinct<T: PartialEq + Clone>(values: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for v in values {
        if !out.contains(v) {
            out.push(v.clone());
        }
    }
    out
}

/// The links of `--down`.
fn down_links(
    plan: &crate::model::plan::Plan,
    specs: &[String],
) -> Result<std::collections::BTreeSet<crate::model::plan::LinkId>> {
    specs.iter().map(|spec| plan.find_link(spec).with_context(|| format!("--down {spec:?}"))).collect()
}

/// `fabric sim`: run, print, write JSON.
pub fn main(a: &SimArgs) -> Result<()> {
    if let Some(SimScenario::Schedule(s)) = &a.scenario {
        return super::schedule::main(s, build_fabric(s.topology.as_deref(), s.scale_or_default())?);
    }
    let report = run(a)?;
    if !report.faults.is_empty() {
        println!("every case with: {}", report.faults.join(", "));
    }
    print(&report.results);
    super::trace::print(&report.traces);
    println!("fabric description built in {:.3} s", report.build_s);
    if let Some(path) = &a.json {
        crate::sys::file::write_json(path, &report)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    fn completion(args: &[&str]) -> f64 {
        let cli = Cli::try_parse_from([&["sim"], args].concat()).unwrap();
        let report = run(&cli.sim).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(report.results.len(), 1);
        report.results[0].completion_s
    }

    /// Rack z0r0's four uplinks at a quarter of their rate: the ring's one QP out of the rack,
    /// hashed onto one uplink, takes four times as long; eight QPs spread by E-ECMP over the
    /// four uplinks lose less. A down spine link is routed around.
    #[test]
    fn degraded_and_down_links_change_completion_as_the_fair_share_says() {
        let quarter: Vec<String> = (0..4).map(|c| format!("--degrade=z0r0:z0c{c}=100")).collect();
        let quarter: Vec<&str> = quarter.iter().map(String::as_str).collect();
        let one_qp = ["--hash", "five-tuple", "--qps", "1"];
        let (healthy, slow) = (completion(&one_qp), completion(&[&one_qp[..], &quarter].concat()));
        assert!((slow / healthy - 4.0).abs() < 1e-6, "one QP: {slow} s vs {healthy} s");
        let eight = ["--hash", "eecmp", "--qps", "8"];
        let (healthy8, slow8) = (completion(&eight), completion(&[&eight[..], &quarter].concat()));
        assert!(slow8 / healthy8 < 4.0 - 1e-6, "eight QPs lose less: {slow8} s vs {healthy8} s");
        let down = completion(&[&one_qp[..], &["--down", "z0r2:z0c0"]].concat());
        assert!(down.is_finite() && down > 0.0);
    }

    /// One uplink of z0r0 at a quarter of its rate: E-ECMP leaves as many QPs on it as on the
    /// others, WCMP weighs it down, so the ring is never slower with WCMP and often faster. The modes that
    /// split a flow per packet have no flow-model meaning and are refused.
    #[test]
    fn wcmp_weighs_down_a_degraded_uplink_in_the_flow_model() {
        let mut better = 0;
        for seed in ["1", "2", "3"] {
            for q in ["16", "32"] {
                let slow = ["--degrade=z0r0:z0c0=100", "--qps", q, "--hash-seed", seed];
                let eecmp = completion(&[&slow[..], &["--hash", "eecmp"]].concat());
                let wcmp = completion(&[&slow[..], &["--hash", "wcmp"]].concat());
                assert!(wcmp <= eecmp, "seed {seed}, {q} QPs: wcmp {wcmp} s vs eecmp {eecmp} s");
                better += (wcmp < eecmp) as u32;
            }
        }
        // Where E-ECMP's hash collisions elsewhere set the pace, both finish together.
        assert!(better >= 2, "wcmp finished sooner in {better} of 6 cases");
        for mode in ["spray", "adaptive"] {
            let cli = Cli::try_parse_from(["sim", "--hash", mode]).unwrap();
            let e = format!("{:#}", run(&cli.sim).unwrap_err());
            assert!(e.contains(&format!("--hash {mode}")) && e.contains("--model packet"), "{e}");
        }
    }

    #[test]
    fn bad_faults_are_refused_by_name() {
        let err = |args: &[&str]| {
            format!("{:#}", run(&Cli::try_parse_from([&["sim"], args].concat()).unwrap().sim).unwrap_err())
        };
        assert!(err(&["--degrade", "z0r0:z0c0"]).contains("expected LINK=GBPS"));
        assert!(err(&["--degrade", "z0r0:z0c0=500"]).contains("at most its own 400"));
        assert!(err(&["--degrade", "z0r0:z9=100"]).contains("has no port"));
        assert!(err(&["--down", "nope:z0c0"]).contains("no node"));
        let packet = ["--model", "packet", "--hash", "eecmp", "--qps", "1", "--message", "64K"];
        assert!(err(&["--loss", "z0r0:z0c0=1%"]).contains("the flow model has no loss"));
        assert!(err(&[&packet[..], &["--loss", "z0r0:z0c0=150%"]].concat()).contains("150"));
        assert!(err(&[&packet[..], &["--loss", "z0r0:z0c0"]].concat()).contains("expected LINK=PCT%"));
        assert!(err(&[&packet[..], &["--loss", "z0r0:z0c0=1%", "--fail-at", "z0c1@10us"]].concat()).contains("--loss"));
        // A host's only link, down: refused as --fail-at refuses it, before the job runs, when
        // the job runs on that host; a host the job leaves out may lose its link.
        let host_link = err(&["--down", "z0r0:z0r0h0"]);
        assert!(host_link.contains("--down \"z0r0:z0r0h0\"") && host_link.contains("single-homed"), "{host_link}");
        let spare = ["--down", "z0r3:z0r3h1", "--ranks", "4", "--hash", "eecmp", "--qps", "1"];
        assert!(run(&Cli::try_parse_from([&["sim"][..], &spare].concat()).unwrap().sim).is_ok());
        // A trace's ranks too (its 8 ranks, contiguous, take every host of the default fabric).
        let trace = format!("{}/../testbed/traces/dp-step", env!("CARGO_MANIFEST_DIR"));
        let traced =
            err(&[&packet[..2], &["--hash", "eecmp", "--qps", "1", "--trace", &trace, "--down", "z0r0:z0r0h0"]]
                .concat());
        assert!(traced.contains("--down \"z0r0:z0r0h0\"") && traced.contains("single-homed"), "{traced}");
        assert!(err(&[&packet[..], &["--deadline-ms", "0"]].concat()).contains("--deadline-ms: must be at least 1"));
        assert!(err(&["--job-record"]).contains("--job-record: needs the packet model"));
        assert!(err(&[&packet[..], &["--fail-at", "z0c1@-5us"]].concat()).contains("cannot be negative"));
    }

    /// Options that only act with another are refused without it, and a repeated value runs
    /// its case once.
    #[test]
    fn options_without_their_scenario_are_refused_and_repeats_run_once() {
        for lone in [&["--gpu-speedup", "2"][..], &["--trace-ranks", "4"], &["--detect-us", "5"]] {
            let e = Cli::try_parse_from([&["sim"], lone].concat()).map(|_| ()).unwrap_err().to_string();
            assert!(e.contains("required arguments were not provided"), "{lone:?}: {e}");
        }
        assert!(Cli::try_parse_from(["sim", "--detect-us", "5", "--fail-at", "z0c1@1us"]).is_ok());
        let flap = ["sim", "--detect-us", "5", "--flap", "z0c1", "--period", "1ms", "--hash", "eecmp", "--qps", "1"];
        let e = format!("{:#}", run(&Cli::try_parse_from(flap).unwrap().sim).unwrap_err());
        assert!(e.contains("--detect-us: the flow model's flap has no detection delay"), "{e}");
        let cli =
            Cli::try_parse_from(["sim", "--hash", "pin", "--hash", "eecmp", "--hash", "pin", "--qps", "1"]).unwrap();
        let cases: Vec<String> = run(&cli.sim).unwrap().results.into_iter().map(|r| r.case).collect();
        assert_eq!(cases.len(), 2, "{cases:?}");
        assert!(cases[0].contains(" pin ") && cases[1].contains(" eecmp "), "{cases:?}");
    }

    /// A flag the chosen model or scenario would ignore is refused by name when given another
    /// value than its default, and accepted at its default; the faults every case ran with are
    /// in the report, and none for a healthy fabric.
    #[test]
    fn ignored_flags_are_refused_and_standing_faults_are_reported() {
        let small = ["sim", "--hash", "eecmp", "--qps", "1"];
        let refused = [
            (&["--queues", "phantom"][..], "--queues: the flow model has no queues; use --model packet"),
            (&["--link-delay-ns", "5"], "--link-delay-ns"),
            (&["--deadline-ms", "1"], "--deadline-ms"),
            (&["--memory-limit-gib", "1"], "--memory-limit-gib"),
            (&["--transport", "ooo"], "--transport"),
            (&["--model", "packet", "--trace", "t.json", "--ranks", "4"], "--ranks: not with --trace"),
            (&["--model", "packet", "--trace", "t.json", "--workload", "alltoall"], "--workload: not with --trace"),
            (
                &["--model", "packet", "--link-delay-ns", "18446744073709551615"],
                "--link-delay-ns: 18446744073709551615 is more than",
            ),
        ];
        for (flags, said) in refused {
            let cli = Cli::try_parse_from([&small[..], flags].concat()).unwrap();
            let e = format!("{:#}", run(&cli.sim).unwrap_err());
            assert!(e.starts_with(said), "{flags:?}: {e}");
        }
        let small = ["sim", "--hash", "eecmp", "--qps", "1", "--message", "1Mi"];
        let at_default = ["--queues", PACKET_DEFAULTS.queues.name(), "--link-delay-ns", "1000"];
        let healthy = run(&Cli::try_parse_from([&small[..], &at_default].concat()).unwrap().sim).unwrap();
        assert!(healthy.faults.is_empty(), "{:?}", healthy.faults);
        let faults = ["--down", "z0r2:z0c0", "--degrade", "z0r0:z0c1=100"];
        let faulty = run(&Cli::try_parse_from([&small[..], &faults].concat()).unwrap().sim).unwrap();
        assert_eq!(faulty.faults, ["down z0r2:z0c0", "degrade z0r0:z0c1=100 Gbit/s"]);
    }

    /// A failure after the job has ended is told apart from one during it.
    #[test]
    fn a_failure_after_the_job_is_told_apart() {
        let whatif = |at: &str| {
            let args = ["sim", "--model", "packet", "--hash", "eecmp", "--qps", "1", "--message", "256Ki"];
            let cli = Cli::try_parse_from([&args[..], &["--fail-at", &format!("z0r0:z0c0@{at}")]].concat()).unwrap();
            let r = run(&cli.sim).unwrap_or_else(|e| panic!("{e:#}"));
            r.results[0].packet.as_ref().and_then(|p| p.whatif.clone()).expect("a what-if")
        };
        let late = whatif("10s");
        assert!(late.after_the_job() && late.steps_affected == Some(0), "{late:?}");
        let early = whatif("1us");
        assert!(!early.after_the_job(), "{early:?}");
    }

    /// Seeds as topology files write them: decimal or 0x-hex, the same seed either way.
    #[test]
    fn a_hash_seed_may_be_hex() {
        let seed = |s: &str| Cli::try_parse_from(["sim", "--hash-seed", s]).map(|c| c.sim.hash_seed);
        assert_eq!(seed("0x10").unwrap(), Some(16));
        assert_eq!(seed("16").unwrap(), Some(16));
        let e = seed("0xzz").unwrap_err().to_string();
        assert!(e.contains("decimal or 0x-hex"), "{e}");
    }

    /// `--loss` in the packet model: the lossy uplink's switch end drops frames by the testbed's
    /// seeded draw, the endpoints resend them, and every QP still completes; a healthy run of the
    /// same case loses nothing.
    #[test]
    fn a_lossy_link_loses_frames_in_the_twin_and_the_endpoints_recover() {
        let report = |extra: &[&str]| {
            let base = ["--model", "packet", "--hash", "five-tuple", "--qps", "1", "--message", "4M", "--ranks", "8"];
            run(&Cli::try_parse_from([&["sim"], &base[..], extra].concat()).unwrap().sim)
                .unwrap_or_else(|e| panic!("{e:#}"))
        };
        let loss: Vec<String> = (0..4).map(|c| format!("--loss=z0r0:z0c{c}=2%")).collect();
        let loss: Vec<&str> = loss.iter().map(String::as_str).collect();
        let lossy = report(&loss);
        let p = lossy.results[0].packet.as_ref().unwrap();
        assert!(p.finished, "every QP completes despite the loss");
        assert!(
            p.link_loss > 0 && p.retransmissions >= p.link_loss,
            "lost {}, resent {}",
            p.link_loss,
            p.retransmissions
        );
        let healthy = report(&[]);
        assert_eq!(healthy.results[0].packet.as_ref().unwrap().link_loss, 0);
    }

    /// `--flap` from the command line: both models report the flap with the job's slowdown;
    /// it needs `--period`, and it is one what-if of three, never two at once.
    #[test]
    fn a_flap_on_the_command_line_reaches_both_models() {
        let flap = ["--flap", "z0c0", "--period", "200us", "--count", "3", "--hash", "eecmp", "--message", "256Ki"];
        for model in ["flow", "packet"] {
            let cli = Cli::try_parse_from([&["sim", "--model", model][..], &flap].concat()).unwrap();
            let r = run(&cli.sim).unwrap_or_else(|e| panic!("{model}: {e:#}"));
            let w = r.results[0].whatif.as_ref().or(r.results[0].packet.as_ref().and_then(|p| p.whatif.as_ref()));
            let w = w.unwrap_or_else(|| panic!("{model}: no what-if in the result"));
            assert_eq!((w.kind, w.period_ns, w.count, w.links.len()), (WhatIfKind::Flap, 200_000, 3, 4), "{model}");
            assert!(w.slowdown >= 0.0 && w.finished, "{model}: {w:?}");
            assert_eq!(w.describe(), "flap z0c0@0us period 200us x3", "{model}");
            assert!(!r.results[0].case.contains("flap"), "the case's row is the job without the flap");
        }
        assert!(Cli::try_parse_from(["sim", "--flap", "z0c0"]).is_err(), "--flap needs --period");
        assert!(Cli::try_parse_from(["sim", "--flap", "z0c0", "--period", "1ms", "--fail-at", "z0c0@1us"]).is_err());
        let cli = Cli::try_parse_from(["sim", "--flap", "z0r0h0", "--period", "1ms"]).unwrap();
        assert!(format!("{:#}", run(&cli.sim).unwrap_err()).contains("is a host"));
        let cli = Cli::try_parse_from(["sim", "--flap", "z0c0", "--period", "1us", "--count", "4000000000"]).unwrap();
        assert!(format!("{:#}", run(&cli.sim).unwrap_err()).contains("--count 4000000000: at most 100000 periods"));
    }

    /// `--transport` reaches the twin's hosts: both transports carry a small allreduce to the
    /// end in the packet model, and the report says which ran. The flow model, which has no
    /// packets, refuses it, and an unknown name lists the choices.
    #[test]
    fn the_packet_model_runs_either_transport() {
        let small = ["--model", "packet", "--hash", "eecmp", "--qps", "2", "--message", "256Ki"];
        for transport in ["gbn", "ooo"] {
            let cli = Cli::try_parse_from([&["sim"][..], &small, &["--transport", transport]].concat()).unwrap();
            let report = run(&cli.sim).unwrap_or_else(|e| panic!("{e:#}"));
            let p = report.results[0].packet.as_ref().expect("packet stats");
            assert!(p.finished, "{transport}");
            assert_eq!(p.transport, transport);
            assert_eq!(p.retransmissions, 0, "{transport}: lossless, per-flow paths");
            assert_eq!(p.reordered_packets, 0, "{transport}: per-flow paths keep order");
        }
        let cli = Cli::try_parse_from(["sim", "--transport", "ooo"]).unwrap();
        assert!(format!("{:#}", run(&cli.sim).unwrap_err()).contains("--transport: the flow model"));
        let e = Cli::try_parse_from(["sim", "--transport", "irn"]).err().unwrap().to_string();
        assert!(e.contains("`irn`") && e.contains("gbn") && e.contains("ooo"), "{e}");
    }
}
