//! `fabric run WORKLOAD`: a collective on the testbed's hosts with our RoCEv2 endpoints, and what
//! the fabric did meanwhile (uplink load and balance from the XDP counters).
pub mod job;
pub mod jobs;
pub mod result;
pub mod rxe;
pub mod trace;

pub use self::result::{
    BalanceSummary, Endpoints, IterationResult, NoExtras, RESULTS_SCHEMA, RunOptions, RunResult, accumulate_hosts,
    balance, print,
};

use anyhow::{Context as _, Result, bail, ensure};
use fabric_common::config::HashMode;
use fabric_roce::cts::{CtsConfig, InvalidCtsConfig};
use indicatif::{ProgressBar, ProgressStyle};

use crate::{
    endpoint::CcMode,
    endpoint::EndpointOptions,
    endpoint::SlowReceiver,
    endpoint::SportPolicy,
    endpoint::engine::RunClock,
    endpoint::engine::run_step_in,
    endpoint::{MAX_QPS, PATH_MTUS},
    model::placement::Placement,
    model::topology::{hash_mode_serde, parse_hash_mode},
    model::units::Size,
    model::workload::HostTransfer,
    model::workload::{Collective, schedule},
    state::State,
    telemetry::stats::UplinkBytes,
    testbed,
};
use fabric_roce::{dcqcn::DcqcnParams, transport::Transport};
use result::{CPU_BOUND_LATE_SHARE, cpu_wait_share, late_wake_share};

/// A run as the command line or a workload file states it (one definition for both). Values are
/// typed where they come in; every default is [`RunSpec::default`]'s, which the flags show and
/// workload files fall back to.
#[derive(Clone, Debug, clap::Args, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunSpec {
    /// allreduce (ring), alltoall, incast, permutation.
    #[arg(value_enum, required_unless_present_any = ["file", "jobs"])]
    pub workload: Option<Collective>,
    /// Number of ranks (default: the hosts of a `hosts:` placement, else every host).
    #[arg(long)]
    pub ranks: Option<usize>,
    /// Message size per rank, bytes (K, M, G = x1000; Ki, Mi, Gi = x1024).
    #[arg(long, default_value_t = RunSpec::default().message)]
    pub message: Size,
    /// Repetitions; each reports its collective completion time.
    #[arg(long, default_value_t = RunSpec::default().iterations)]
    pub iterations: u32,
    /// contiguous, fragmented, random:SEED or hosts:H1,H2,...
    #[arg(long, default_value_t = RunSpec::default().placement)]
    #[serde(deserialize_with = "Placement::deserialize_spelling")]
    pub placement: Placement,
    /// QPs per connection (QP scaling).
    #[arg(long, default_value_t = RunSpec::default().qps)]
    pub qps: u32,
    /// UDP source port policy.
    #[arg(long, value_enum, default_value_t = RunSpec::default().sport)]
    pub sport: SportPolicy,
    /// Set every switch's routing mode first: five-tuple, eecmp, pin, te (the controller places
    /// this job's flows, greedy largest-first on the least-loaded link), flowlet, adaptive,
    /// spray or wcmp (docs/routing-modes.md).
    #[arg(long, value_parser = parse_hash_mode)]
    #[serde(deserialize_with = "hash_mode_serde::option::deserialize")]
    pub hash: Option<HashMode>,
    /// Re-seed every switch's hash (with --hash, which sets the mode it seeds; a jobs run seeds
    /// each job's mode).
    #[arg(long, value_parser = crate::model::units::parse_seed)]
    pub hash_seed: Option<u32>,
    /// Rate of one connection (all its QPs), in bits/s of wall time (K, M, G = x1000): the
    /// testbed's slowed time, not the modelled network's (unlike `fabric link degrade --rate`,
    /// in modelled Gbit/s). Default: the host link's rate slowed by the topology's time scale
    /// (tiers.host.rate_gbps / time_scale: 400 Gbit/s / 4000 = 100 Mbit/s by default).
    #[arg(long)]
    pub rate: Option<Size>,
    /// RoCE path MTU (256, 512, 1024, 2048, 4096; at most the topology's MTU).
    #[arg(long, default_value_t = RunSpec::default().path_mtu)]
    pub path_mtu: u32,
    /// The responder ACKs every N packets (and at message end).
    #[arg(long, default_value_t = RunSpec::default().ack_every)]
    pub ack_every: u32,
    /// Most unacknowledged packets per QP. A RoCE NIC does not window RC WRITEs, so the default
    /// is large (4 MiB at a 1024-byte MTU): only a dead receiver stops a sender.
    #[arg(long, default_value_t = RunSpec::default().window)]
    pub window: u32,
    /// Workload seed (permutation).
    #[arg(long, default_value_t = RunSpec::default().seed)]
    pub seed: u64,
    /// The endpoints' reliability: gbn (go-back-N, as RC NICs do) or ooo (reorder-tolerant:
    /// out-of-order placement, SACK, selective retransmission; at most 128 packets in flight
    /// per QP). Our endpoints only: rxe is go-back-N.
    #[arg(long, default_value_t = RunSpec::default().transport, value_parser = parse_transport)]
    pub transport: Transport,
    /// Congestion control on top of PFC: none, dcqcn, cts.
    #[arg(long, value_enum, default_value_t = RunSpec::default().cc)]
    pub cc: CcMode,
    /// DSCP of data and ACKs (class = DSCP >> 3; 26 is the lossless class 3).
    #[arg(long, default_value_t = RunSpec::default().dscp)]
    pub dscp: u8,
    /// Send data and ACKs ECN-capable (ECT(0)), so switches mark CE instead of dropping.
    #[arg(long, default_value_t = RunSpec::default().ecn, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub ecn: bool,
    /// CTS: chunks each receiver grants at once.
    #[arg(long, default_value_t = RunSpec::default().cts_channels)]
    pub cts_channels: u32,
    /// CTS: bytes of one chunk (Ki, Mi = x1024).
    #[arg(long, default_value_t = RunSpec::default().cts_buffer)]
    pub cts_buffer: Size,
    /// HOST[:SECONDS]: that host acts as a NIC with a full buffer for SECONDS (default 1) from
    /// the start: it sends PFC XOFF to its switch and reads nothing.
    #[arg(long, value_name = "HOST[:SECONDS]")]
    pub slow_receiver: Option<String>,
    /// DCQCN parameters in unslowed time (a `[dcqcn]` table in workload files; the fields of
    /// `fabric_roce::dcqcn::DcqcnParams`, each optional).
    #[arg(skip)]
    pub dcqcn: Option<DcqcnParams>,
}

/// The defaults of a run: the endpoints' own ([`EndpointOptions::default`]) and the workload's.
impl Default for RunSpec {
    fn default() -> Self {
        let e = EndpointOptions::default();
        RunSpec {
            workload: None,
            ranks: None,
            message: Size(4 << 20),
            iterations: 1,
            placement: Placement::Contiguous,
            qps: e.qps,
            sport: e.sport,
            hash: None,
            hash_seed: None,
            rate: None,
            path_mtu: e.path_mtu,
            ack_every: e.ack_every,
            window: e.window,
            seed: 1,
            transport: e.transport,
            cc: e.cc,
            dscp: e.dscp,
            ecn: e.ecn,
            cts_channels: e.cts_channels,
            cts_buffer: Size(e.cts_buffer_bytes),
            slow_receiver: None,
            dcqcn: None,
        }
    }
}

/// How a message names an option of a run: as the flag typed on the command line, or as the
/// field of a workload or jobs file (the flag's name with underscores).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Named {
    Flag,
    Field,
}

impl Named {
    /// The option whose long flag is `--flag`, named so.
    fn name(self, flag: &str) -> String {
        match self {
            Named::Flag => format!("--{flag}"),
            Named::Field => flag.replace('-', "_"),
        }
    }
}

impl RunSpec {
    /// Reads a workload file (TOML; the fields are the long flags of `fabric run`).
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading workload {}", path.display()))?;
        let spec: RunSpec = toml::from_str(&text).with_context(|| format!("workload file {}", path.display()))?;
        ensure!(spec.workload.is_some(), "{}: `workload` is missing", path.display());
        // Checked here too, so that a bad value is named with its file and field.
        spec.options(Named::Field).with_context(|| format!("workload file {}", path.display()))?;
        Ok(spec)
    }

    /// The options of the run as the command line gave them, every value range-checked, and
    /// combinations that cannot work refused; the message names the flag and what it allows.
    pub fn to_options(&self) -> Result<RunOptions> {
        self.options(Named::Flag)
    }

    /// [`Self::to_options`] of a run stated as `named` (a file's fields name the options so).
    pub fn options(&self, named: Named) -> Result<RunOptions> {
        self.check(named)?;
        Ok(RunOptions {
            collective: self.workload.context("no workload given")?,
            ranks: self.ranks,
            message_bytes: self.message.get(),
            iterations: self.iterations,
            placement: self.placement.clone(),
            hash: self.hash,
            hash_seed: self.hash_seed,
            seed: self.seed,
            endpoint: EndpointOptions {
                qps: self.qps,
                sport: self.sport,
                path_mtu: self.path_mtu,
                rate_bps: self.rate.map_or(0, Size::get),
                ack_every: self.ack_every,
                window: self.window,
                transport: self.transport,
                dscp: self.dscp,
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
                cts_buffer_bytes: self.cts_buffer.get(),
                slow_receiver: self
                    .slow_receiver
                    .as_deref()
                    .map(SlowReceiver::parse)
                    .transpose()
                    .map_err(|e| anyhow::anyhow!("{}: {e}", named.name("slow-receiver")))?,
                ..Default::default()
            },
        })
    }

    /// Ranges of single options, then combinations; the message names each option as `named`.
    fn check(&self, named: Named) -> Result<()> {
        let n = |flag: &str| named.name(flag);
        ensure!(self.ranks.is_none_or(|r| r >= 2), "{}: a collective needs at least 2 ranks", n("ranks"));
        ensure!(
            self.message.get() > 0,
            "{}: must be at least 1 byte (a collective of 0 bytes moves nothing)",
            n("message")
        );
        ensure!(
            self.message.get() <= MAX_MESSAGE_BYTES,
            "{}: {} bytes is above the largest message, 1 TiB ({MAX_MESSAGE_BYTES} bytes)",
            n("message"),
            self.message.get()
        );
        ensure!(self.iterations >= 1, "{}: must be at least 1", n("iterations"));
        ensure!(
            self.hash_seed.is_none() || self.hash.is_some(),
            "{}: it seeds the mode that {} sets, so give {} too",
            n("hash-seed"),
            n("hash"),
            n("hash")
        );
        ensure!((1..=MAX_QPS).contains(&self.qps), "{}: {} is not in 1..={MAX_QPS}", n("qps"), self.qps);
        ensure!(
            self.rate.is_none_or(|r| r.get() > 0),
            "{}: must be above 0 bit/s (leave it out for the link rate)",
            n("rate")
        );
        ensure!(
            PATH_MTUS.contains(&self.path_mtu),
            "{}: {} is not a RoCE path MTU ({PATH_MTUS:?})",
            n("path-mtu"),
            self.path_mtu
        );
        ensure!(self.ack_every >= 1, "{}: must be at least 1", n("ack-every"));
        ensure!((1..=1 << 20).contains(&self.window), "{}: {} must be 1..=1048576 packets", n("window"), self.window);
        ensure!(self.dscp < 64, "{}: {} is not a 6-bit DSCP (0..=63)", n("dscp"), self.dscp);
        ensure!(
            self.cts_buffer.get() >= u64::from(self.path_mtu),
            "{}: a chunk must hold at least one packet ({} bytes)",
            n("cts-buffer"),
            self.path_mtu
        );
        // The admission's own rule for its settings, the one the endpoints apply.
        if let Err(e) = cts_config(self.cts_channels, self.cts_buffer.get()).validate() {
            let flag = if e == InvalidCtsConfig::NoChannel { "cts-channels" } else { "cts-buffer" };
            bail!("{}: {e}", n(flag));
        }
        ensure!(
            self.cc != CcMode::Dcqcn || self.ecn,
            "{} dcqcn needs {} true: without ECN-capable packets no switch can mark CE, so no CNP is ever sent",
            n("cc"),
            n("ecn")
        );
        Ok(())
    }
}

/// The largest message per rank, 1 TiB: far beyond a testbed's run. Byte counts over a run
/// (message x ranks x steps x iterations) can still pass `u64::MAX` with absurd iteration
/// counts: they are summed saturating.
pub const MAX_MESSAGE_BYTES: u64 = 1 << 40;

/// The admission settings of a run's receivers, as far as the run's options give them (the
/// resend time is the endpoints' to choose).
fn cts_config(channels: u32, buffer_bytes: u64) -> CtsConfig {
    CtsConfig { channels, buffer_bytes, resend_after_ns: 0 }
}

/// `--transport`: a name of [`Transport`], or an error that lists them.
pub fn parse_transport(s: &str) -> Result<Transport, String> {
    s.parse().map_err(|e: fabric_roce::transport::UnknownTransport| e.to_string())
}

/// Refuses a transport the testbed's hosts cannot run: rxe (the kernel's soft-RoCE) implements
/// RC as the IBTA defines it, go-back-N only.
pub fn check_transport(endpoints: Endpoints, transport: Transport) -> Result<()> {
    ensure!(
        endpoints == Endpoints::Fabric || transport == Transport::GoBackN,
        "transport {transport}: the testbed's hosts are rxe (kernel soft-RoCE), whose RC is go-back-N only; \
         use the gbn transport, or bring the testbed up with our endpoints (`fabric up` without --endpoints rxe)"
    );
    Ok(())
}

pub fn run(state: &State, opts: &RunOptions, quiet: bool) -> Result<RunResult> {
    let prefix = &state.plan.topology.prefix;
    let endpoints = if testbed::rxe::RxeLayout::path(prefix).exists() { Endpoints::Rxe } else { Endpoints::Fabric };
    check_transport(endpoints, opts.endpoint.transport)?;
    crate::sys::netns::require_capabilities()?;
    let plan = &state.plan;
    ensure!(opts.iterations >= 1, "at least one iteration");
    opts.endpoint.check_fits(plan.topology.mtu)?;
    let ranks = opts.placement.rank_count(opts.ranks, plan.hosts().count());
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
        let host_steps: Vec<Vec<HostTransfer>> =
            steps.iter().map(|s| crate::model::workload::on_hosts(s, &hosts)).collect();
        let flows = crate::te::job_flows(plan, &host_steps, &opts.endpoint);
        Some(crate::te::install(&state.plan.topology.prefix, &flows)?.placed())
    } else {
        None
    };
    let bar =
        if quiet { ProgressBar::hidden() } else { ProgressBar::new(u64::from(opts.iterations) * steps.len() as u64) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} steps {msg}").expect("valid"),
    );

    let before = UplinkBytes::read(state)?;
    let stats_before = crate::telemetry::stats::collect(state)?;
    let congestion_before = stats_before.congestion.clone();
    let job = crate::run::job::JobClock::start(plan);
    let mut progress = crate::run::job::JobProgress {
        job_id: job.id.clone(),
        collective: opts.collective.as_str().to_string(),
        iteration: 1,
        iterations: opts.iterations,
        step: 0,
        steps: steps.len(),
        started_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        process: crate::state::Owner::this_process()?,
    };
    let prefix = &plan.topology.prefix;
    progress.write(prefix);
    let link_rate = crate::endpoint::engine::host_link_rate_bps(plan, plan.topology.time_scale);
    // Per flow: achieved goodput over what the flow could get, i.e. its intended rate capped by
    // a fair share of the busier of its two host links.
    let mut achieved = Vec::new();
    let mut iterations = Vec::new();
    let mut flows = Vec::new();
    let mut last_step_uplinks = Vec::new();
    let mut bytes_needed: u64 = 0;
    let mut bytes_delivered = 0;
    let cpu_before = crate::sys::cpu::CpuTimes::read()?;
    for it in 0..opts.iterations {
        bar.set_message(format!("iteration {}", it + 1));
        progress.iteration = it + 1;
        progress.step = 0;
        let mut step_ns = Vec::new();
        flows.clear();
        let mut step_uplinks = Vec::new();
        let mut step_before = UplinkBytes::read_uplinks(state)?;
        for step in &steps {
            let transfers = crate::model::workload::on_hosts(step, &hosts);
            bytes_needed = HostTransfer::total_bytes(&transfers).saturating_add(bytes_needed);
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
            progress.step += 1;
            progress.write(prefix);
        }
        last_step_uplinks = step_uplinks;
        let completion_ns: u64 = step_ns.iter().sum();
        let modelled_completion_ns = completion_ns as f64 / plan.topology.time_scale.max(1) as f64;
        iterations.push(IterationResult { completion_ns, modelled_completion_ns, step_ns });
    }
    bar.finish_and_clear();
    crate::run::job::JobProgress::clear(prefix);
    let uplinks = UplinkBytes::read(state)?.since(&before);
    // The agents write their telemetry every 100 ms: wait for the last of this run.
    std::thread::sleep(std::time::Duration::from_millis(250));
    let congestion = crate::telemetry::stats::congestion_totals(state)?.since(&congestion_before);
    let host_cpu_busy = crate::sys::cpu::CpuTimes::read()?.busy_since(&cpu_before);
    let late_share = late_wake_share(&hosts_result);
    let achieved_over_intended = achieved.iter().sum::<f64>() / achieved.len().max(1) as f64;
    let stats_after = crate::telemetry::stats::collect(state)?;
    let mut result = RunResult {
        endpoints: Endpoints::Fabric,
        job_id: Some(job.id.clone()),
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
        achieved_over_intended: Some(achieved_over_intended),
        cpu_limited: late_share.map(|l| l > CPU_BOUND_LATE_SHARE),
        late_wake_share: late_share,
        cpu_wait_share: cpu_wait_share(&hosts_result),
        host_cpu_busy,
        congestion,
        te_flows,
        cc: opts.endpoint.cc,
        transport: opts.endpoint.transport,
        time_scale: opts.endpoint.time_scale,
        hosts: {
            hosts_result.sort_by(|a, b| a.host.cmp(&b.host));
            hosts_result
        },
        extra: NoExtras {},
        cts_bound_bytes: (opts.endpoint.cc == CcMode::Cts)
            .then(|| cts_config(opts.endpoint.cts_channels, opts.endpoint.cts_buffer_bytes).bound_bytes()),
        diagnosis: Vec::new(),
    };
    // Every run is a job: its counters over its lifetime, joined with its completion times.
    let faults = crate::run::job::JobFaults {
        // Re-read: `fabric link` and `fabric switch` log faults from other processes meanwhile.
        log: State::load(&plan.topology.prefix).map(|s| s.faults).unwrap_or_default(),
        at_start: faulty_links(state),
    };
    let record = job.finish(&result, &stats_before, &stats_after, last_step_uplinks, &faults);
    result.diagnosis = record.diagnosis.clone();
    record.save()?;
    Ok(result)
}

/// The switches down, and the labels of the links down (but for those of a down switch) or
/// degraded, in `state`.
pub(crate) fn faulty_links(state: &State) -> Vec<String> {
    let label = |l| crate::testbed::link_label(&state.plan, l);
    let switches = state.down_switches.iter().map(|&sw| format!("switch {} down", state.plan.nodes[sw].name));
    let with_switches = state.out_of_service(&std::collections::BTreeSet::new(), &state.down_switches);
    let down = (state.down_links.iter())
        .filter(|l| state.links_taken_down.contains(l) || !with_switches.contains(l))
        .map(|&l| format!("{} down", label(l)));
    let degraded = state
        .degraded
        .iter()
        .map(|(&l, d)| format!("{} degraded ({})", label(l), d.describe(state.plan.links[l].rate_gbps)));
    switches.chain(down).chain(degraded).collect()
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    /// `fabric run`'s flags as the CLI has them (with its `--file` beside the spec).
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        spec: RunSpec,
        #[arg(long)]
        file: Option<std::path::PathBuf>,
        #[arg(long)]
        jobs: Option<std::path::PathBuf>,
    }

    fn from_flags(flags: &[&str]) -> Result<RunOptions> {
        let argv = ["run", "allreduce"].into_iter().chain(flags.iter().copied());
        Cli::try_parse_from(argv)?.spec.to_options()
    }

    #[test]
    fn the_flags_and_workload_files_share_their_defaults() {
        let flags = Cli::try_parse_from(["run", "allreduce"]).unwrap().spec;
        let file: RunSpec = toml::from_str("workload = \"allreduce\"").unwrap();
        assert_eq!(format!("{flags:?}"), format!("{file:?}"));
        let o = flags.to_options().unwrap();
        assert_eq!((o.message_bytes, o.endpoint.path_mtu, o.endpoint.qps), (4 << 20, 1024, 1));
        assert_eq!(
            format!("{:?}", o.endpoint.cts_buffer_bytes),
            format!("{:?}", EndpointOptions::default().cts_buffer_bytes)
        );
    }

    #[test]
    fn bad_options_are_refused_naming_the_option() {
        let refused: &[(&[&str], &str)] = &[
            (&["--qps", "0"], "--qps"),
            (&["--qps", "257"], "--qps"),
            (&["--message", "0"], "--message"),
            (&["--rate", "0"], "--rate"),
            (&["--cc", "dcqcn", "--ecn", "false"], "--cc dcqcn needs --ecn true"),
            (&["--path-mtu", "1000"], "--path-mtu"),
            (&["--iterations", "0"], "--iterations"),
            (&["--ranks", "1"], "--ranks"),
            (&["--window", "0"], "--window"),
            (&["--dscp", "64"], "--dscp"),
            (&["--ack-every", "0"], "--ack-every"),
            (&["--cts-buffer", "100"], "--cts-buffer"),
            (
                &["--cts-buffer", "1025Mi"],
                "--cts-buffer: a CTS buffer of 1074790400 bytes is larger than the largest single WRITE",
            ),
            (&["--cts-channels", "0"], "--cts-channels: CTS needs at least one channel"),
            (
                &["--cts-buffer", "18000000000000000000"],
                "--cts-buffer: a CTS buffer of 18000000000000000000 bytes is larger",
            ),
            (&["--message", "1025Gi"], "--message: 1100585369600 bytes is above the largest message, 1 TiB"),
            (&["--slow-receiver", "z0r0h0:-1"], "--slow-receiver"),
            (&["--hash-seed", "7"], "--hash"),
        ];
        for (flags, needle) in refused {
            let e = from_flags(flags).expect_err(&format!("{flags:?} was accepted"));
            assert!(format!("{e:#}").contains(needle), "{flags:?}: {e:#}");
        }
        // Malformed values never reach the run: the parser names the flag.
        for flags in [&["--message", "4X"][..], &["--hash", "ecmp"], &["--placement", "nowhere"], &["--rate", "fast"]] {
            let e = from_flags(flags).expect_err(&format!("{flags:?} was accepted"));
            assert!(format!("{e:#}").contains(flags[0]), "{flags:?}: {e:#}");
        }
        // The same options, in range, run.
        for flags in [
            &["--qps", "8"][..],
            &["--cc", "dcqcn"],
            &["--rate", "10M"],
            &["--path-mtu", "4096"],
            &["--hash", "te"],
            &["--hash", "eecmp", "--hash-seed", "0x7"],
        ] {
            from_flags(flags).unwrap_or_else(|e| panic!("{flags:?}: {e:#}"));
        }
    }

    /// The largest message and CTS chunk are accepted; sums and products of byte counts
    /// saturate instead of overflowing.
    #[test]
    fn byte_counts_are_bounded_and_do_not_overflow() {
        let o = from_flags(&["--message", "1024Gi", "--cts-buffer", "1Gi", "--cts-channels", "4294967295"]).unwrap();
        assert_eq!((o.message_bytes, o.endpoint.cts_buffer_bytes), (1 << 40, 1 << 30));
        assert_eq!(cts_config(u32::MAX, u64::MAX).bound_bytes(), u64::MAX);
        assert_eq!(cts_config(4, 1 << 20).bound_bytes(), 4 << 20);
        let t = |bytes| HostTransfer { src: 0, dst: 1, bytes };
        assert_eq!(HostTransfer::total_bytes(&[t(u64::MAX), t(1)]), u64::MAX);
        assert_eq!(HostTransfer::total_bytes(&[t(2), t(3)]), 5);
    }

    #[test]
    fn workload_files_are_checked_like_the_flags() {
        for (text, needle) in [
            ("workload = \"allreduce\"\nqps = 0", "qps: 0 is not in"),
            ("workload = \"allreduce\"\nmessage = \"0\"", "message: must be"),
            ("workload = \"incast\"\ncc = \"dcqcn\"\necn = false", "cc dcqcn needs ecn true"),
            ("workload = \"allreduce\"\nhash_seed = 7", "hash_seed: it seeds the mode that hash sets"),
            ("workload = \"allreduce\"\nslow_receiver = \"z0r0h0:x\"", "slow_receiver: "),
        ] {
            let spec: RunSpec = toml::from_str(text).unwrap();
            let e = format!("{:#}", spec.options(Named::Field).expect_err(text));
            assert!(e.starts_with(needle), "{text}: {e}");
            // The same value from the command line is named as its flag.
            let flag = format!("{:#}", spec.to_options().expect_err(text));
            assert!(flag.starts_with("--"), "{text}: {flag}");
        }
        for text in ["workload = \"allreduce\"\nhash = \"ecmp\"", "workload = \"allreduce\"\nmessage = \"4X\""] {
            let e = toml::from_str::<RunSpec>(text).expect_err(text);
            assert!(e.to_string().contains("unknown"), "{text}: {e}");
        }
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
            "workload = \"incast\"\ncc = \"cts\"\necn = false\ndscp = 24\nslow_receiver = \"z0r0h0:2\"\n\
             cts_buffer = \"64Ki\"\n[dcqcn]\ncnp_interval_ns = 4000\n",
        )
        .unwrap();
        let o = spec.to_options().unwrap().endpoint;
        assert_eq!((o.cc, o.ecn, o.dscp, o.cts_buffer_bytes, o.rate_bps), (CcMode::Cts, false, 24, 65536, 0));
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
            ("workload = \"allreduce\"\nslow_receiver = \"z0r0h0:x\"\n", ": slow_receiver: "),
            ("workload = \"allreduce\"\ndscp = 64\n", "dscp"),
            // Named as the file names them, not as flags.
            ("workload = \"allreduce\"\npath_mtu = 1000\n", ": path_mtu: 1000 is not a RoCE path MTU"),
            ("workload = \"allreduce\"\ncc = \"dcqcn\"\necn = false\n", ": cc dcqcn needs ecn true"),
        ] {
            let p = dir.join("w.toml");
            std::fs::write(&p, text).unwrap();
            let err = RunSpec::from_file(&p).and_then(|s| s.to_options()).expect_err(text);
            assert!(format!("{err:#}").contains(expect), "{text}: {err:#}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_transport_flag_and_field_choose_the_endpoints_reliability() {
        assert_eq!(from_flags(&[]).unwrap().endpoint.transport, Transport::GoBackN);
        assert_eq!(from_flags(&["--transport", "ooo"]).unwrap().endpoint.transport, Transport::ReorderTolerant);
        let spec: RunSpec = toml::from_str("workload = \"allreduce\"\ntransport = \"ooo\"\n").unwrap();
        assert_eq!(spec.to_options().unwrap().endpoint.transport, Transport::ReorderTolerant);
        // An unknown name lists the choices, on the command line and in a file.
        let e = from_flags(&["--transport", "sack"]).unwrap_err().to_string();
        assert!(e.contains("--transport") && e.contains("`sack`") && e.contains("gbn") && e.contains("ooo"), "{e}");
        let e = toml::from_str::<RunSpec>("workload = \"allreduce\"\ntransport = \"sack\"\n").unwrap_err();
        assert!(e.to_string().contains("sack") && e.to_string().contains("ooo"), "{e}");
    }

    #[test]
    fn rxe_hosts_refuse_the_reorder_tolerant_transport() {
        check_transport(Endpoints::Fabric, Transport::ReorderTolerant).unwrap();
        check_transport(Endpoints::Rxe, Transport::GoBackN).unwrap();
        let e = check_transport(Endpoints::Rxe, Transport::ReorderTolerant).unwrap_err().to_string();
        assert!(e.contains("transport ooo") && e.contains("rxe") && e.contains("go-back-N only"), "{e}");
    }
}
