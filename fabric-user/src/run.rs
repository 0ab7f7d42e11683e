//! `fabric run WORKLOAD`: a collective on the testbed's hosts with our RoCEv2 endpoints, and what
//! the fabric did meanwhile (uplink load and balance from the XDP counters).
use anyhow::{Context as _, Result, ensure};
use fabric_common::config::HashMode;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::{
    endpoint::{
        CcMode, EndpointOptions, SlowReceiver, SportPolicy,
        engine::{FlowResult, HostResult, HostTransfer, RunClock, run_step_in},
    },
    placement::Placement,
    roce::dcqcn::DcqcnParams,
    stats::{UplinkBytes, UplinkLoad},
    testbed::{self, State},
    workload::{Collective, schedule},
};

/// A run as the command line or a workload file states it (one definition for both).
#[derive(Clone, Debug, clap::Args, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// allreduce (ring), alltoall, incast, permutation.
    #[arg(value_enum, required_unless_present = "file")]
    pub workload: Option<Collective>,
    /// Number of ranks (default: every host).
    #[arg(long)]
    #[serde(default)]
    pub ranks: Option<usize>,
    /// Message size per rank, bytes (K, M, G = x1000; Ki, Mi, Gi = x1024).
    #[arg(long, default_value = "4Mi")]
    #[serde(default = "RunSpec::default_message")]
    pub message: String,
    #[arg(long, default_value_t = 1)]
    #[serde(default = "RunSpec::one")]
    pub iterations: u32,
    /// contiguous, fragmented, random:SEED or hosts:H1,H2,...
    #[arg(long, default_value = "contiguous")]
    #[serde(default = "RunSpec::default_placement")]
    pub placement: String,
    /// QPs per connection (QP scaling).
    #[arg(long, default_value_t = 1)]
    #[serde(default = "RunSpec::one")]
    pub qps: u32,
    /// UDP source port policy.
    #[arg(long, value_enum, default_value = "per-qp")]
    #[serde(default = "RunSpec::default_sport")]
    pub sport: SportPolicy,
    /// Set every switch's routing mode first: five-tuple, eecmp, pin, or te (the controller places
    /// this job's flows, greedy largest-first on the least-loaded link; see `fabric_user::te`).
    #[arg(long)]
    #[serde(default)]
    pub hash: Option<String>,
    /// Re-seed every switch's hash.
    #[arg(long)]
    #[serde(default)]
    pub hash_seed: Option<u32>,
    /// Rate of one connection (all its QPs), bits/s (K, M, G = x1000); default: the host
    /// link's modelled rate (tiers.host.rate_gbps / time_scale).
    #[arg(long)]
    #[serde(default)]
    pub rate: Option<String>,
    /// RoCE path MTU (256, 512, 1024, 2048).
    #[arg(long, default_value_t = 1024)]
    #[serde(default = "RunSpec::default_path_mtu")]
    pub path_mtu: u32,
    /// The responder ACKs every N packets (and at message end).
    #[arg(long, default_value_t = 4)]
    #[serde(default = "RunSpec::default_ack_every")]
    pub ack_every: u32,
    /// Most unacknowledged packets per QP. A RoCE NIC does not window RC WRITEs, so the default
    /// is large (4 MiB at a 1024-byte MTU): only a dead receiver stops a sender.
    #[arg(long, default_value_t = 4096)]
    #[serde(default = "RunSpec::default_window")]
    pub window: u32,
    /// Workload seed (permutation).
    #[arg(long, default_value_t = 1)]
    #[serde(default = "RunSpec::one_u64")]
    pub seed: u64,
    /// Congestion control on top of PFC: none, dcqcn, cts.
    #[arg(long, value_enum, default_value = "none")]
    #[serde(default)]
    pub cc: CcMode,
    /// DSCP of data and ACKs (class = DSCP >> 3; 26 is the lossless class 3).
    #[arg(long, default_value_t = 26)]
    #[serde(default = "RunSpec::default_dscp")]
    pub dscp: u8,
    /// Send data and ACKs ECN-capable (ECT(0)), so switches mark CE instead of dropping.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    #[serde(default = "RunSpec::yes")]
    pub ecn: bool,
    /// CTS: chunks each receiver grants at once.
    #[arg(long, default_value_t = 4)]
    #[serde(default = "RunSpec::default_cts_channels")]
    pub cts_channels: u32,
    /// CTS: bytes of one chunk (Ki, Mi = x1024).
    #[arg(long, default_value = "256Ki")]
    #[serde(default = "RunSpec::default_cts_buffer")]
    pub cts_buffer: String,
    /// HOST[:SECONDS]: that host acts as a NIC with a full buffer for SECONDS (default 1) from
    /// the start: it sends PFC XOFF to its switch and reads nothing.
    #[arg(long, value_name = "HOST[:SECONDS]")]
    #[serde(default)]
    pub slow_receiver: Option<String>,
    /// DCQCN parameters in unslowed time (a `[dcqcn]` table in workload files; the fields of
    /// `roce::dcqcn::DcqcnParams`, each optional).
    #[arg(skip)]
    #[serde(default)]
    pub dcqcn: Option<DcqcnParams>,
}

impl RunSpec {
    fn default_message() -> String {
        "4Mi".into()
    }
    fn one() -> u32 {
        1
    }
    fn one_u64() -> u64 {
        1
    }
    fn default_placement() -> String {
        "contiguous".into()
    }
    fn default_sport() -> SportPolicy {
        SportPolicy::PerQp
    }
    fn default_dscp() -> u8 {
        crate::roce::traffic_class::DSCP_ROCE
    }
    fn yes() -> bool {
        true
    }
    fn default_cts_channels() -> u32 {
        4
    }
    fn default_cts_buffer() -> String {
        "256Ki".into()
    }
    fn default_path_mtu() -> u32 {
        1024
    }
    fn default_ack_every() -> u32 {
        4
    }
    fn default_window() -> u32 {
        4096
    }

    /// Reads a workload file (TOML; the fields are the long flags of `fabric run`).
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading workload {}", path.display()))?;
        let spec: RunSpec = toml::from_str(&text).with_context(|| format!("workload file {}", path.display()))?;
        ensure!(spec.workload.is_some(), "{}: `workload` is missing", path.display());
        Ok(spec)
    }

    pub fn to_options(&self) -> Result<RunOptions> {
        let hash = self
            .hash
            .as_deref()
            .map(|h| {
                HashMode::parse(h).with_context(|| format!("hash: unknown mode {h:?}; five-tuple, eecmp, pin or te"))
            })
            .transpose()?;
        Ok(RunOptions {
            collective: self.workload.context("no workload given")?,
            ranks: self.ranks,
            message_bytes: parse_size(&self.message).map_err(|e| anyhow::anyhow!("message: {e}"))?,
            iterations: self.iterations,
            placement: Placement::parse(&self.placement)?,
            hash,
            hash_seed: self.hash_seed,
            seed: self.seed,
            endpoint: EndpointOptions {
                qps: self.qps,
                sport: self.sport,
                path_mtu: self.path_mtu,
                rate_bps: match &self.rate {
                    Some(r) => parse_size(r).map_err(|e| anyhow::anyhow!("rate: {e}"))?,
                    None => 0,
                },
                ack_every: self.ack_every,
                window: {
                    ensure!(
                        (1..=1 << 20).contains(&self.window),
                        "window: {} must be 1..=1048576 packets",
                        self.window
                    );
                    self.window
                },
                dscp: {
                    ensure!(self.dscp < 64, "dscp: {} is not a 6-bit DSCP", self.dscp);
                    self.dscp
                },
                ecn: self.ecn,
                cc: self.cc,
                dcqcn: match self.dcqcn {
                    Some(p) => {
                        p.validate().context("[dcqcn]")?;
                        p
                    }
                    None => DcqcnParams::default(),
                },
                cts_channels: self.cts_channels,
                cts_buffer_bytes: parse_size(&self.cts_buffer).map_err(|e| anyhow::anyhow!("cts_buffer: {e}"))?,
                slow_receiver: self
                    .slow_receiver
                    .as_deref()
                    .map(SlowReceiver::parse)
                    .transpose()
                    .map_err(|e| anyhow::anyhow!("slow_receiver: {e}"))?,
                ..Default::default()
            },
        })
    }
}

/// `4Mi`, `100M`, `1500`: K, M, G multiply by 1000 (rates), Ki, Mi, Gi by 1024 (sizes).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        None => (s, 1u64),
        Some((i, _)) => {
            let mult = match &s[i..] {
                "K" | "k" => 1_000,
                "M" => 1_000_000,
                "G" => 1_000_000_000,
                "Ki" => 1 << 10,
                "Mi" => 1 << 20,
                "Gi" => 1 << 30,
                other => {
                    return Err(format!("unknown suffix {other:?}: use K, M, G (x1000) or Ki, Mi, Gi (x1024)"));
                }
            };
            (&s[..i], mult)
        }
    };
    num.parse::<u64>().map(|n| n * mult).map_err(|e| format!("{s:?}: {e}"))
}

/// The version of the results schema (documented in `testbed/workloads/README.md`).
/// 2: congestion control (`cc`, per-flow CE/CNP counts and rate trajectories, per-host PFC),
/// and the default rate is the host link's modelled rate.
pub const RESULTS_SCHEMA: &str = "fabric.run/2";

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
    /// Collective completion time, wall-clock ns.
    pub completion_ns: u64,
    /// The same in the modelled network's time (wall / `RunResult::time_scale`).
    pub modelled_completion_ns: f64,
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
    /// The job this run was (`fabric report JOB`; `results/jobs/JOB.json`).
    pub job_id: String,
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
    /// Achieved over possible rate, averaged over flows (possible: the intended rate capped by a
    /// fair share of the flow's busier host link): well under 1 means this machine's CPU, or
    /// congestion inside the fabric, limited the run.
    pub achieved_over_intended: f64,
    /// What the switches' congestion model did during the run: ECN marks, drops, pauses (the
    /// frames the agents sent and the switches received), paused time, the model's error.
    pub congestion: crate::stats::CongestionTotals,
    /// The job report's short diagnosis (see `fabric report`).
    pub diagnosis: Vec<String>,
    /// With `hash = "te"`: how many flows the controller placed (their entries take precedence
    /// over the hash in every switch).
    pub te_flows: Option<usize>,
    pub cpu_limited: bool,
    /// Congestion control on top of PFC.
    pub cc: CcMode,
    /// The topology's time scale the endpoints ran at (rates / S, timers x S).
    pub time_scale: u64,
    /// Per host, over every step of every iteration: PFC frames received and sent, paused time
    /// (summed), CTS's most bytes in flight toward it (max).
    pub hosts: Vec<HostResult>,
    /// CTS: the bound on bytes in flight toward one receiver (channels x buffer).
    pub cts_bound_bytes: Option<u64>,
}

/// Adds a step's host counters to the run's (also the trace replay's).
pub(crate) fn accumulate_hosts(all: &mut Vec<HostResult>, step: &[HostResult]) {
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
    }
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
    ensure!(
        opts.endpoint.path_mtu + 20 + 8 + 12 + 16 + 4 <= plan.topology.mtu,
        "path MTU {} does not fit the link MTU {}",
        opts.endpoint.path_mtu,
        plan.topology.mtu
    );
    let ranks = opts.ranks.unwrap_or_else(|| plan.hosts().count());
    let hosts = opts.placement.place(plan, ranks)?;
    if let Some(mode) = opts.hash {
        testbed::set_hash_mode(state, mode, opts.hash_seed)?;
    }
    let hash = match opts.hash {
        Some(m) => m.as_str().to_string(),
        None => plan.nodes[plan.switches().next().context("no switches")?].hash.as_str().to_string(),
    };
    // The endpoints run in the topology's slowed time.
    let mut opts = opts.clone();
    opts.endpoint.time_scale = plan.topology.time_scale;
    let opts = &opts;
    let clock = RunClock { start: std::time::Instant::now() };
    let mut hosts_result = Vec::new();
    let steps = schedule(opts.collective, ranks, opts.message_bytes, opts.seed);
    // Traffic engineering: the controller places this job's flows before it starts.
    let te_flows = if opts.hash == Some(fabric_common::config::HashMode::Te) {
        let host_steps: Vec<Vec<HostTransfer>> = steps.iter().map(|s| crate::workload::on_hosts(s, &hosts)).collect();
        let flows = crate::te::job_flows(plan, &host_steps, &opts.endpoint);
        Some(crate::te::install(state, &flows)?.flows)
    } else {
        None
    };
    let bar =
        if quiet { ProgressBar::hidden() } else { ProgressBar::new(u64::from(opts.iterations) * steps.len() as u64) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} steps {msg}").expect("valid"),
    );

    let before = UplinkBytes::read(state)?;
    let stats_before = crate::stats::collect(state)?;
    let congestion_before = stats_before.congestion.clone();
    let job = crate::job::JobClock::start(plan);
    let link_rate = crate::endpoint::engine::host_link_rate_bps(plan, plan.topology.time_scale);
    // Per flow: achieved goodput over what the flow could get, i.e. its intended rate capped by
    // a fair share of the busier of its two host links.
    let mut achieved = Vec::new();
    let mut iterations = Vec::new();
    let mut flows = Vec::new();
    let mut last_step_uplinks = Vec::new();
    let mut bytes_needed = 0;
    let mut bytes_delivered = 0;
    for it in 0..opts.iterations {
        bar.set_message(format!("iteration {}", it + 1));
        let mut step_ns = Vec::new();
        flows.clear();
        let mut step_uplinks = Vec::new();
        let mut step_before = UplinkBytes::read_uplinks(state)?;
        for step in &steps {
            let transfers = crate::workload::on_hosts(step, &hosts);
            bytes_needed += transfers.iter().map(|t| t.bytes).sum::<u64>();
            let r = run_step_in(plan, &transfers, &opts.endpoint, &clock)?;
            step_ns.push(r.duration_ns);
            accumulate_hosts(&mut hosts_result, &r.hosts);
            bytes_delivered += r.flows.iter().map(|f| f.bytes_received).sum::<u64>();
            for f in &r.flows {
                let out_degree = r.flows.iter().filter(|g| g.src == f.src).count().max(1);
                let in_degree = r.flows.iter().filter(|g| g.dst == f.dst).count().max(1);
                let fair = link_rate as f64 / out_degree.max(in_degree) as f64;
                achieved.push(f.goodput_bps / (f.intended_bps as f64).min(fair).max(1.0));
            }
            flows.extend(r.flows);
            // Per-step uplink load, for the job's report (which step was slow, and where).
            let now = UplinkBytes::read_uplinks(state)?;
            step_uplinks.push(now.since(&step_before));
            step_before = now;
            bar.inc(1);
        }
        last_step_uplinks = step_uplinks;
        let completion_ns: u64 = step_ns.iter().sum();
        let modelled_completion_ns = completion_ns as f64 / plan.topology.time_scale.max(1) as f64;
        iterations.push(IterationResult { completion_ns, modelled_completion_ns, step_ns });
    }
    bar.finish_and_clear();
    let uplinks = UplinkBytes::read(state)?.since(&before);
    // The agents write their telemetry every 100 ms: wait for the last of this run.
    std::thread::sleep(std::time::Duration::from_millis(250));
    let congestion = crate::stats::congestion_totals(state)?.since(&congestion_before);
    let achieved_over_intended = achieved.iter().sum::<f64>() / achieved.len().max(1) as f64;
    let stats_after = crate::stats::collect(state)?;
    let mut result = RunResult {
        job_id: job.id.clone(),
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
        congestion,
        te_flows,
        cc: opts.endpoint.cc,
        time_scale: opts.endpoint.time_scale,
        hosts: {
            hosts_result.sort_by(|a, b| a.host.cmp(&b.host));
            hosts_result
        },
        cts_bound_bytes: (opts.endpoint.cc == CcMode::Cts)
            .then(|| u64::from(opts.endpoint.cts_channels) * opts.endpoint.cts_buffer_bytes),
        diagnosis: Vec::new(),
    };
    // Every run is a job: its counters over its lifetime, joined with its completion times.
    let record = job.finish(&result, &stats_before, &stats_after, last_step_uplinks);
    result.diagnosis = record.diagnosis.clone();
    record.save()?;
    Ok(result)
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
    println!(
        "endpoints: achieved/intended rate {:.2}{}; {} retransmitted packets",
        r.achieved_over_intended,
        if r.cpu_limited { " (under 0.8: the CPU or congestion in the fabric set the pace)" } else { "" },
        retx
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_rates() {
        assert_eq!(parse_size("4Mi"), Ok(4 << 20));
        assert_eq!(parse_size("100M"), Ok(100_000_000));
        assert_eq!(parse_size("1500"), Ok(1500));
        assert!(parse_size("3X").is_err());
        assert!(parse_size("M").is_err());
    }

    #[test]
    fn every_shipped_workload_file_is_valid() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed/workloads");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let spec = RunSpec::from_file(&path).unwrap_or_else(|e| panic!("{e:#}"));
                spec.to_options().unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 5);
    }

    #[test]
    fn congestion_fields_of_a_workload_file() {
        let spec: RunSpec = toml::from_str(
            "workload = \"incast\"\ncc = \"dcqcn\"\necn = false\ndscp = 24\nslow_receiver = \"z0r0h0:2\"\n\
             cts_buffer = \"64Ki\"\n[dcqcn]\ncnp_interval_ns = 4000\n",
        )
        .unwrap();
        let o = spec.to_options().unwrap().endpoint;
        assert_eq!((o.cc, o.ecn, o.dscp, o.cts_buffer_bytes, o.rate_bps), (CcMode::Dcqcn, false, 24, 65536, 0));
        assert_eq!(o.dcqcn.cnp_interval_ns, 4000);
        assert_eq!(o.dcqcn.g, DcqcnParams::default().g, "unnamed parameters keep their defaults");
        assert_eq!(o.slow_receiver, Some(SlowReceiver { host: "z0r0h0".into(), duration_ns: 2_000_000_000 }));
        let o = toml::from_str::<RunSpec>("workload = \"incast\"\n").unwrap().to_options().unwrap().endpoint;
        assert_eq!((o.cc, o.ecn, o.dscp, o.cts_channels), (CcMode::None, true, 26, 4));
    }

    #[test]
    fn bad_workload_files_name_the_problem() {
        let dir = std::env::temp_dir().join(format!("fabric-wl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (text, expect) in [
            ("workload = \"allreduce\"\nqpz = 3\n", "qpz"),
            ("workload = \"ring\"\n", "ring"),
            ("qps = 3\n", "workload"),
            ("workload = \"allreduce\"\nhash = \"random\"\n", "hash"),
            ("workload = \"allreduce\"\nmessage = \"4X\"\n", "message"),
            ("workload = \"allreduce\"\ncc = \"reno\"\n", "reno"),
            ("workload = \"allreduce\"\n[dcqcn]\ng = 2.0\n", "dcqcn"),
            ("workload = \"allreduce\"\n[dcqcn]\ngain = 0.5\n", "gain"),
            ("workload = \"allreduce\"\nslow_receiver = \"z0r0h0:x\"\n", "slow_receiver"),
            ("workload = \"allreduce\"\ndscp = 64\n", "dscp"),
        ] {
            let p = dir.join("w.toml");
            std::fs::write(&p, text).unwrap();
            let err = RunSpec::from_file(&p).and_then(|s| s.to_options()).expect_err(text);
            assert!(format!("{err:#}").contains(expect), "{text}: {err:#}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
