//! `fabric`: the controller's command line.
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use fabric_user::{
    dataplane::SwitchDataplane, model::topology::Topology, state::State, telemetry::stats, testbed, testbed::probe,
};

#[derive(Parser)]
#[command(
    name = "fabric",
    version,
    about = "A RoCEv2 AI-training fabric built from XDP switches in network namespaces"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Which testbed: by prefix, or the prefix of a topology file.
#[derive(clap::Args)]
struct Which {
    /// Testbed prefix (default: the prefix of --topology, else of the default topology).
    #[arg(long, value_parser = fabric_user::model::topology::validate::parse_prefix, conflicts_with = "topology")]
    prefix: Option<String>,
    /// Topology file whose prefix to use.
    #[arg(long)]
    topology: Option<PathBuf>,
}

impl Which {
    fn prefix(&self) -> Result<String> {
        if let Some(p) = &self.prefix {
            return Ok(p.clone());
        }
        let topology = Topology::load(self.topology.as_deref());
        // Only the prefix is needed: a file edited since `up` must not stand in the way.
        Ok(topology.context("reading the testbed's prefix from --topology (or give it with --prefix)")?.prefix)
    }
}

#[derive(Subcommand)]
enum LinkAction {
    /// Take a link down and repair every ECMP group around it.
    Down {
        /// A link as SWITCH:PEER, e.g. z0r0:z0c1 (either end; `fabric status` lists them); one of
        /// parallel links as SWITCH:PEER.K, e.g. z0r0:z0c1.0.
        link: String,
    },
    /// Bring a link back and restore the groups (a link of a switch that is down comes back with
    /// `fabric switch up`, unless also taken down on its own).
    Up {
        /// A link as SWITCH:PEER, e.g. z0r0:z0c1 (SWITCH:PEER.K for one of parallel links).
        link: String,
    },
    /// A gray failure: lower the link's modelled rate and/or make it lose frames (at its switch
    /// ends, on what they send): `fabric link degrade z0r0:z0c1 --rate 100 --loss 0.1%`. A later
    /// degrade of the same link keeps what it does not give.
    Degrade {
        /// A link as SWITCH:PEER, e.g. z0r0:z0c1 (SWITCH:PEER.K for one of parallel links).
        link: String,
        /// Modelled rate in Gbit/s, above 0 and at most the link's own (which gives the rate back).
        #[arg(long)]
        rate: Option<f64>,
        /// Share of frames lost, in percent (0%..=100%), by a seeded draw per frame.
        #[arg(long, value_parser = parse_loss_arg)]
        loss: Option<u32>,
        /// Seed of the loss draws (default: the link's earlier degradation's, else 1).
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Give a degraded link back its own rate and no loss.
    Restore {
        /// A link as SWITCH:PEER, e.g. z0r0:z0c1 (SWITCH:PEER.K for one of parallel links).
        link: String,
    },
    /// Take a link down and up repeatedly, routing repaired each time (stopped by Ctrl-C,
    /// SIGTERM or SIGHUP, it brings the link back up first).
    Flap {
        /// A link as SWITCH:PEER, e.g. z0r0:z0c1 (SWITCH:PEER.K for one of parallel links).
        link: String,
        /// One down-and-up cycle, half down and half up (e.g. 200ms, 2s; 10ms to 1h).
        #[arg(long, default_value = "200ms", value_parser = parse_period_arg)]
        period: std::time::Duration,
        /// Cycles.
        #[arg(long, default_value_t = 3)]
        count: u32,
    },
}

#[derive(Subcommand)]
enum SwitchAction {
    /// Every link of the switch down at once (a reboot, a drain), routing repaired around it.
    Down {
        /// A switch by name, e.g. z0c1.
        switch: String,
    },
    /// Bring back every link the switch's `down` took down (links also taken down on their own,
    /// or whose other switch is down, stay down).
    Up {
        /// A switch by name, e.g. z0c1.
        switch: String,
    },
}

/// `--watch`: whole seconds, at least 1 (0 would redraw without pause and keep a core busy).
fn parse_watch(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1 second".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}: a whole number of seconds, at least 1")),
    }
}

fn parse_loss_arg(s: &str) -> Result<u32, String> {
    fabric_user::model::fault::parse_loss(s).map_err(|e| e.to_string())
}

fn parse_period_arg(s: &str) -> Result<std::time::Duration, String> {
    fabric_user::model::fault::parse_period(s).map_err(|e| e.to_string())
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum GraphFormat {
    Svg,
    Dot,
}

#[derive(Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once per process; boxing would buy nothing (allow: whether it fires depends on which argument struct is largest)"
)]
enum Command {
    /// Build a testbed: namespaces, veths, addresses, XDP switches with their routes.
    Up {
        /// Topology file (default: the embedded one-zone, 4x2 topology).
        #[arg(long)]
        topology: Option<PathBuf>,
        /// Override the topology's prefix.
        #[arg(long, value_parser = fabric_user::model::topology::validate::parse_prefix)]
        prefix: Option<String>,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
        /// Host endpoints: own (our RoCEv2 endpoints, a namespace per host) or rxe (the kernel's
        /// soft-RoCE; host veths in the initial namespace with policy routing, see the README's
        /// "Soft-RoCE (rxe) hosts").
        #[arg(long, value_enum, default_value = "own")]
        endpoints: fabric_user::testbed::rxe::Endpoints,
    },
    /// Remove every namespace, link and pinned object of a testbed (safe to repeat).
    Down {
        #[command(flatten)]
        which: Which,
    },
    /// The switch agent of a testbed (started by `up`, stopped by `down`): sends the PFC
    /// frames its XDP data plane asks for, samples queues, runs the PFC watchdog.
    #[command(hide = true)]
    Agent {
        #[arg(long, value_parser = fabric_user::model::topology::validate::parse_prefix)]
        prefix: String,
    },
    /// What exists of a testbed and whether it is healthy.
    Status {
        #[command(flatten)]
        which: Which,
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Fail or repair a link: `fabric link down z0r0:z0c1`.
    Link {
        #[command(subcommand)]
        action: LinkAction,
        #[command(flatten)]
        which: Which,
    },
    /// Take a whole switch down or up: `fabric switch down z0c1`.
    Switch {
        #[command(subcommand)]
        action: SwitchAction,
        #[command(flatten)]
        which: Which,
    },
    /// Per-port counters and per-RTSW uplink balance.
    Stats {
        #[command(flatten)]
        which: Which,
        /// Print the counters as JSON.
        #[arg(long)]
        json: bool,
        /// Refresh every N seconds (1 or more) until interrupted.
        #[arg(long, value_name = "SECONDS", value_parser = parse_watch)]
        watch: Option<u64>,
        /// Print the counters in the Prometheus text format instead.
        #[arg(long, conflicts_with = "json")]
        prometheus: bool,
    },
    /// Serve the testbed's counters in the Prometheus text format at http://ADDR/metrics
    /// (loopback unless --allow-remote).
    Exporter {
        #[command(flatten)]
        which: Which,
        /// Address and port to serve on.
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: std::net::SocketAddr,
        /// Listen on a non-loopback address too (the counters are then visible to the network).
        #[arg(long)]
        allow_remote: bool,
    },
    /// A live web view of a testbed: its topology by tier, every link coloured by its load in each
    /// direction, ECN marks, PFC pauses and drops, uplink balance, unhealthy switches, the job
    /// running. Served at http://ADDR/ (loopback unless --allow-remote), with /metrics too.
    Ui {
        #[command(flatten)]
        which: Which,
        /// Address and port to serve on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Listen on a non-loopback address too (the counters are then visible to the network).
        #[arg(long)]
        allow_remote: bool,
        /// Milliseconds between two readings of the counters.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..))]
        interval_ms: u64,
    },
    /// The topology as a picture (SVG or Graphviz DOT), nodes and links named as the CLI names
    /// them: `fabric graph --topology testbed/two-zones.toml > fabric.svg`.
    Graph {
        /// Topology file (default: the embedded default topology).
        #[arg(long)]
        topology: Option<PathBuf>,
        /// svg (a drawing) or dot (Graphviz's input, to lay out or style with its tools).
        #[arg(long, value_enum, default_value = "svg")]
        format: GraphFormat,
        /// Draw every host even above 64 hosts (else one box per rack).
        #[arg(long)]
        every_host: bool,
    },
    /// A job's report: its completion times joined with the network's counters over its
    /// lifetime, and a short diagnosis (JOB: an id from `fabric run`, or a job JSON file).
    Report {
        /// A job id (printed by `fabric run`), a job record, or the run result `fabric run` wrote.
        job: String,
    },
    /// Run a collective with the project's RoCEv2 endpoints and report completion times and
    /// uplink balance.
    /// `fabric run trace FILE` replays a Chakra or PARAM trace (testbed/traces/README.md).
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Run {
        #[command(subcommand)]
        trace: Option<fabric_user::run::trace::replay::RunSub>,
        #[command(flatten)]
        spec: fabric_user::run::RunSpec,
        /// Read the run from a workload file (testbed/workloads/*.toml) instead of the flags.
        #[arg(long, conflicts_with = "workload")]
        file: Option<PathBuf>,
        /// Run several jobs at once from a jobs file (testbed/tenants/README.md); the summary goes
        /// to results/jobs/RUN.json (`fabric report RUN`).
        #[arg(long, conflicts_with_all = ["workload", "file"])]
        jobs: Option<PathBuf>,
        /// HOST:FACTOR: that host of the job computes FACTOR times slower (a per-step delay
        /// before the round sends; see testbed/tenants/README.md).
        #[arg(long, value_name = "HOST:FACTOR")]
        straggler: Option<String>,
        #[command(flatten)]
        which: Which,
        /// Write the result (JSON, schema fabric.run/2) here; default results/run-<workload>-<time>.json.
        /// Not with --jobs or --straggler, which make a jobs run: it writes its summary and job
        /// records to results/jobs/ and its results to results/run-JOB.json.
        #[arg(long, conflicts_with_all = ["jobs", "straggler"])]
        json: Option<PathBuf>,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// ICMP and ICMPv6 echo between host pairs, through the fabric: every ordered pair up to 64
    /// hosts; above, a seeded sample with every host as source and destination and every rack
    /// pair (all pairs grow with the square of the hosts).
    Ping {
        #[command(flatten)]
        which: Which,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Check at least N ordered pairs, drawn at random: every host as source and as
        /// destination, the rest at random (so at least as many pairs as hosts).
        #[arg(long, value_name = "N", conflicts_with = "all")]
        sample: Option<usize>,
        /// Check every ordered pair, however many hosts.
        #[arg(long)]
        all: bool,
        /// Seed of the sample: the same seed checks the same pairs (default 1; a run of every
        /// pair has no sample to seed).
        #[arg(long, conflicts_with = "all")]
        seed: Option<u64>,
    },
    /// Simulate a collective on a flow-level model of a fabric of any size (same hash, groups
    /// and flows as the XDP switches and endpoints): uplink balance and fair-share times.
    /// `fabric sim schedule` takes options of its own: those of `fabric sim` before it are
    /// refused, not ignored.
    #[command(args_conflicts_with_subcommands = true)]
    Sim(fabric_user::sim::cli::SimArgs),
    /// RoCEv2 flows and QPs of a pcap/pcapng capture, their ECMP entropy per hash mode and the
    /// predicted load per uplink (the switch's own parser and hash).
    Analyze(fabric_user::analyze::cli::AnalyzeArgs),
    /// Load the XDP switch program through the verifier and report whether this kernel runs it.
    Check,
    /// Experiments that reproduce the paper's results in kind, with reports and charts under
    /// results/NAME/: `fabric experiment list`, `fabric experiment NAME`, `fabric experiment all`.
    Experiment(fabric_user::experiment::cli::ExperimentArgs),
    /// Topology-aware rank placement: a rank-to-host map that minimises the traffic crossing
    /// zones (min-cut partitioning of the job's traffic graph).
    Place(fabric_user::model::partition::PlaceArgs),
    /// Workloads on rxe hosts (`up --endpoints rxe`): perftest point to point, the smoke test.
    Rxe(fabric_user::run::rxe::RxeArgs),
}

fn main() -> std::process::ExitCode {
    let result = run();
    testbed::interrupt::await_interrupt_cleanup();
    fabric_user::exit_code(result)
}

fn run() -> Result<()> {
    // Behave like a Unix tool when piped into `head`: die quietly on a closed pipe.
    // SAFETY: restoring the default disposition of SIGPIPE before any other thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches)
        .map_err(|e| e.format(&mut <Cli as clap::CommandFactory>::command()))
        .unwrap_or_else(|e| e.exit());
    // RUST_LOG when set; else errors only, except in the switch agent, whose log (its stderr,
    // a file) is where the XDP programs' slow-path records go, at info and above. No colour
    // codes in a file.
    let default_filter = if matches!(cli.command, Command::Agent { .. }) { "info" } else { "error" };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Up { topology, prefix, quiet, endpoints } => up(topology, prefix, quiet, endpoints)?,
        Command::Down { which } => down(&which.prefix()?)?,
        Command::Agent { prefix } => fabric_user::agent::run(&prefix)?,
        Command::Status { which, json } => status(&which.prefix()?, json)?,
        Command::Link { action, which } => link(&which.prefix()?, action)?,
        Command::Switch { action, which } => {
            let (name, up) = match &action {
                SwitchAction::Down { switch } => (switch, false),
                SwitchAction::Up { switch } => (switch, true),
            };
            let change = testbed::fault::set_switch(&which.prefix()?, name, up)?;
            let state = if up { "up" } else { "down" };
            let links = &change.changed;
            if links.is_empty() {
                println!("switch {name} is {state}: none of its links changed");
            } else {
                println!(
                    "switch {name} is {state}: {} links {state} ({}); ECMP groups reprogrammed",
                    links.len(),
                    links.join(", ")
                );
            }
            if !change.held_down.is_empty() {
                println!("still down: {}", change.held_down.join(", "));
            }
        }
        Command::Exporter { which, listen, allow_remote } => {
            fabric_user::telemetry::prometheus::serve(&which.prefix()?, listen, allow_remote, None)?;
        }
        Command::Ui { which, listen, allow_remote, interval_ms } => {
            fabric_user::ui::server::serve(&fabric_user::ui::server::UiOptions {
                prefix: which.prefix()?,
                listen,
                allow_remote,
                interval: std::time::Duration::from_millis(interval_ms),
            })?
        }
        Command::Graph { topology, format, every_host } => graph(topology, format, every_host)?,
        Command::Report { job } => fabric_user::run::jobs::runner::report(&job)?,
        Command::Stats { which, json, watch, prometheus } => stats(&which.prefix()?, json, watch, prometheus)?,
        Command::Ping { which, json, sample, all, seed } => {
            ping(&State::load(&which.prefix()?)?, json, sample, all, seed)?
        }
        Command::Run { trace: Some(fabric_user::run::trace::replay::RunSub::Trace(args)), .. } => {
            fabric_user::run::trace::replay::main(&args)?
        }
        Command::Run { trace: None, spec, file, jobs, straggler, which, json, quiet } => {
            refuse_ignored_run_flags(&matches, jobs.as_deref(), file.as_deref())?;
            let jobs_path = jobs.clone();
            let jobs_file = match (jobs, straggler) {
                (Some(f), s) => {
                    let mut file = fabric_user::run::jobs::JobsFile::from_file(&f)?;
                    if let Some(s) = s {
                        file.set_straggler(&s)?;
                    }
                    Some(file)
                }
                (None, Some(s)) => {
                    let mut spec = match file {
                        Some(f) => fabric_user::run::RunSpec::from_file(&f)?,
                        None => {
                            // Checked as flags here: the jobs run checks its spec as a file's.
                            spec.to_options()?;
                            spec
                        }
                    };
                    // As in a plain run: the hosts a `hosts:` placement names, else every host.
                    if spec.ranks.is_none() {
                        let every_host = State::load(&which.prefix()?)?.plan.hosts().count();
                        spec.ranks = Some(spec.placement.rank_count(None, every_host));
                    }
                    let mut file = fabric_user::run::jobs::JobsFile::of_run(&spec)?;
                    file.set_straggler(&s)?;
                    Some(file)
                }
                (None, None) => {
                    let spec = match file {
                        Some(f) => fabric_user::run::RunSpec::from_file(&f)?,
                        None => spec,
                    };
                    run_collective(&spec, &which.prefix()?, json, quiet)?;
                    None
                }
            };
            if let Some(f) = jobs_file {
                run_jobs(&f, jobs_path.as_deref(), &which.prefix()?, quiet)?
            }
        }
        Command::Sim(args) => fabric_user::sim::cli::main(&args)?,
        Command::Analyze(args) => fabric_user::analyze::cli::main(&args)?,
        Command::Rxe(args) => {
            remove_owned_testbeds_on_interrupt(args.builds_testbeds())?;
            fabric_user::run::rxe::main(&args)?
        }
        Command::Experiment(args) => {
            remove_owned_testbeds_on_interrupt(args.builds_testbeds())?;
            fabric_user::experiment::cli::main(&args)?
        }
        Command::Place(args) => fabric_user::model::partition::main(&args)?,
        Command::Check => {
            SwitchDataplane::load()?;
            println!("ok: the XDP switch program and its maps load and pass this kernel's verifier");
        }
    }
    Ok(())
}

/// `fabric up`.
fn up(
    topology: Option<PathBuf>,
    prefix: Option<String>,
    quiet: bool,
    endpoints: fabric_user::testbed::rxe::Endpoints,
) -> Result<()> {
    let mut topo = Topology::load(topology.as_deref())?;
    if let Some(p) = prefix {
        topo.prefix = p;
        topo = Topology::parse(&toml_of(&topo)?, "--prefix")?;
    }
    let s = match endpoints {
        fabric_user::testbed::rxe::Endpoints::Own => testbed::up(&topo, quiet)?,
        fabric_user::testbed::rxe::Endpoints::Rxe => fabric_user::run::rxe::up_and_report(&topo, quiet)?,
    };
    println!(
        "testbed {:?} (prefix {}) is up: {} switches, {} hosts, {} links in {:.2} s",
        s.name, s.prefix, s.switches, s.hosts, s.links, s.seconds
    );
    Ok(())
}

/// `fabric graph`: the topology's picture on stdout.
fn graph(topology: Option<PathBuf>, format: GraphFormat, every_host: bool) -> Result<()> {
    use fabric_user::ui::{graph, layout::Layout};
    let plan = fabric_user::model::plan::Plan::new(&Topology::load(topology.as_deref())?);
    let layout = if every_host { Layout::with_detail(&plan, true) } else { Layout::of(&plan) };
    match format {
        GraphFormat::Svg => print!("{}", graph::svg(&layout, None)),
        GraphFormat::Dot => print!("{}", graph::dot(&layout)),
    }
    Ok(())
}

/// `fabric down`.
fn down(prefix: &str) -> Result<()> {
    let s = testbed::down(prefix)?;
    println!(
        "testbed {prefix}: removed {} namespaces{}{}{}{}",
        s.namespaces,
        if s.rxe_removed > 0 { format!(", {} rxe devices/rules/veths", s.rxe_removed) } else { String::new() },
        if s.agent_stopped { ", the switch agent" } else { "" },
        if s.pins_removed { ", pinned XDP objects" } else { "" },
        if s.state_removed { ", state" } else { "" }
    );
    Ok(())
}

/// `fabric link ...`: one link's faults.
fn link(prefix: &str, action: LinkAction) -> Result<()> {
    match action {
        LinkAction::Down { link } => {
            let label = testbed::set_link(prefix, &link, false)?;
            println!("link {label} is down; ECMP groups reprogrammed");
        }
        LinkAction::Up { link } => {
            let label = testbed::set_link(prefix, &link, true)?;
            println!("link {label} is up; ECMP groups reprogrammed");
        }
        LinkAction::Degrade { link, rate, loss, seed } => {
            let what = testbed::fault::degrade(prefix, &link, rate, loss, seed)?;
            println!("link {what}");
        }
        LinkAction::Restore { link } => {
            let label = testbed::fault::restore(prefix, &link)?;
            println!("link {label}: its own rate again, no loss");
        }
        LinkAction::Flap { link, period, count } => {
            bring_back_up_on_interrupt(prefix, &link)?;
            let label = testbed::fault::flap(prefix, &link, period, count)?;
            println!(
                "link {label} flapped {count} times ({period:?} per cycle); it is up, ECMP groups repaired each time"
            );
        }
    }
    Ok(())
}

/// `fabric status`: exits 1 when the testbed is not healthy.
fn status(prefix: &str, json: bool) -> Result<()> {
    let s = testbed::status(prefix)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        println!("{}", status_line(&s));
    }
    if !s.healthy {
        std::process::exit(1);
    }
    Ok(())
}

fn status_line(s: &testbed::Status) -> String {
    let health = if s.healthy {
        "healthy"
    } else if s.namespaces_present == 0 && !s.state_file {
        "absent"
    } else {
        "NOT healthy"
    };
    let down =
        if s.down_links.is_empty() { String::new() } else { format!("; links down: {}", s.down_links.join(", ")) };
    let switches_down = if s.down_switches.is_empty() {
        String::new()
    } else {
        format!("; switches down: {}", s.down_switches.join(", "))
    };
    let degraded = if s.degraded_links.is_empty() {
        String::new()
    } else {
        format!("; links degraded: {}", s.degraded_links.join(", "))
    };
    let missing = if s.missing_namespaces.is_empty() {
        String::new()
    } else {
        format!("; missing: {}", s.missing_namespaces.join(", "))
    };
    let agent = match (s.agent_expected, s.agent_running) {
        (true, true) => "; switch agent running",
        (true, false) => "; switch agent NOT running (PFC frames cannot be sent)",
        (false, true) => "; a switch agent runs although the congestion model is off",
        (false, false) => "",
    };
    format!(
        "testbed {}: {health} ({} of {} namespaces, {} of {} XDP links pinned{down}{switches_down}{degraded}{missing}{agent})",
        s.prefix, s.namespaces_present, s.namespaces_expected, s.xdp_links_pinned, s.xdp_links_expected
    )
}

/// `fabric stats`, once or every `watch` seconds.
fn stats(prefix: &str, json: bool, watch: Option<u64>, prometheus: bool) -> Result<()> {
    loop {
        // Read each pass: links taken down or degraded meanwhile, or a testbed brought up again,
        // show as they are now.
        let report = stats::collect(&State::load(prefix)?)?;
        if prometheus {
            print!("{}", fabric_user::telemetry::prometheus::render(&report));
        } else if json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            stats::print(&report);
        }
        let Some(secs) = watch else { return Ok(()) };
        std::thread::sleep(std::time::Duration::from_secs(secs));
        // Clear the screen for the table only: JSON and the Prometheus text are for programs.
        if !json && !prometheus {
            print!("\x1b[2J\x1b[H");
        }
    }
}

/// `fabric ping`: all pairs, or a seeded sample on a large testbed; exits 1 when a probe goes
/// unanswered.
fn ping(state: &State, json: bool, sample: Option<usize>, all: bool, seed: Option<u64>) -> Result<()> {
    let selection = match (sample, all) {
        (_, true) => probe::Selection::All,
        (Some(n), false) => probe::Selection::Sample(n),
        (None, false) => probe::Selection::default_for(state.plan.hosts().count()),
    };
    anyhow::ensure!(
        seed.is_none() || selection != probe::Selection::All,
        "--seed: this testbed's {} hosts are few enough that every pair is checked, so there is no sample to \
         seed (give --sample N to draw one)",
        state.plan.hosts().count()
    );
    let seed = seed.unwrap_or(1);
    let r = probe::ping(state, selection, seed)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        let how = match selection {
            probe::Selection::All => "all pairs".to_string(),
            probe::Selection::Cover => format!("covering sample, --seed {seed}"),
            probe::Selection::Sample(n) => format!("--sample {n} --seed {seed}"),
        };
        println!("{} ({how})", r.coverage.describe());
        println!(
            "{} of {} probes answered through the fabric (each pair over IPv4 and IPv6)",
            probe::thousands(r.reachable),
            probe::thousands(r.pairs)
        );
        for (a, b) in &r.unreachable {
            println!("  no reply: {a} -> {b}");
        }
    }
    if r.reachable != r.pairs {
        std::process::exit(1);
    }
    Ok(())
}

/// `fabric run WORKLOAD`: runs, prints and writes the result.
fn run_collective(spec: &fabric_user::run::RunSpec, prefix: &str, json: Option<PathBuf>, quiet: bool) -> Result<()> {
    let opts = spec.to_options()?;
    let state = State::load(prefix)?;
    let result = fabric_user::run::run(&state, &opts, quiet)?;
    fabric_user::run::print(&result);
    let path = json.unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        PathBuf::from(format!("results/run-{}-{t}.json", opts.collective.as_str()))
    });
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&result)?)?;
    match &result.job_id {
        Some(id) => println!("wrote {} and the job record (fabric report {id})", path.display()),
        None => println!("wrote {}", path.display()),
    }
    Ok(())
}

/// For `fabric link flap`: a stop signal (Ctrl-C, SIGTERM, SIGHUP) leaves the link up, not in
/// its down half.
fn bring_back_up_on_interrupt(prefix: &str, link: &str) -> Result<()> {
    use std::io::Write as _;
    let (prefix, link) = (prefix.to_string(), link.to_string());
    testbed::interrupt::on_stop_signal(move |why| {
        let said = match testbed::fault::end_flap(&prefix, &link) {
            Ok(done) => format!("{why}: {done}"),
            Err(e) => format!("{why}: link {link} may be left down: {e:#} (fabric link up {link})"),
        };
        // Stderr may be gone with the terminal: the link is up either way.
        let _ = writeln!(std::io::stderr(), "{said}");
    })
}

/// For a command that `builds` testbeds of its own: Ctrl-C, SIGTERM or SIGHUP removes them.
fn remove_owned_testbeds_on_interrupt(builds: bool) -> Result<()> {
    if builds {
        testbed::interrupt::remove_owned_on_interrupt(|p| testbed::down(p).map(drop))?;
    }
    Ok(())
}

/// `fabric run --jobs FILE` and `--file FILE` take the run from the file: a run flag given with
/// them would be silently ignored, so it is refused by name.
fn refuse_ignored_run_flags(
    matches: &clap::ArgMatches,
    jobs: Option<&std::path::Path>,
    file: Option<&std::path::Path>,
) -> Result<()> {
    let (flag, path, what) = match (jobs, file) {
        (Some(p), _) => ("--jobs", p, "each job's run ([run] and [[job]] tables)"),
        (None, Some(p)) => ("--file", p, "the run"),
        (None, None) => return Ok(()),
    };
    let Some(("run", run)) = matches.subcommand() else { return Ok(()) };
    let spec = <fabric_user::run::RunSpec as clap::Args>::augment_args(clap::Command::new("run"));
    let given: Vec<String> = spec
        .get_arguments()
        .filter(|a| run.value_source(a.get_id().as_str()) == Some(clap::parser::ValueSource::CommandLine))
        .map(|a| format!("--{}", a.get_long().unwrap_or(a.get_id().as_str())))
        .collect();
    anyhow::ensure!(
        given.is_empty(),
        "{flag} {}: the file sets {what}, so {} would be ignored; write {} into the file instead",
        path.display(),
        given.join(", "),
        if given.len() == 1 { "it" } else { "them" }
    );
    Ok(())
}

/// `fabric run --jobs FILE` (or a single run with `--straggler`).
fn run_jobs(
    file: &fabric_user::run::jobs::JobsFile,
    path: Option<&std::path::Path>,
    prefix: &str,
    quiet: bool,
) -> Result<()> {
    let state = State::load(prefix)?;
    let default_hash = state.plan.nodes[state.plan.switches().next().context("no switches")?].hash;
    let plan = file.resolve(&state.plan, default_hash).with_context(|| match path {
        Some(p) => format!("jobs file {}", p.display()),
        None => "the run".into(),
    })?;
    let out = fabric_user::run::jobs::runner::run_jobs(&state, &plan, quiet)?;
    out.summary.save()?;
    for r in &out.results {
        let path = PathBuf::from(format!("results/run-{}.json", r.job_id.as_deref().unwrap_or("job")));
        std::fs::create_dir_all("results")?;
        std::fs::write(&path, serde_json::to_vec_pretty(r)?)?;
    }
    fabric_user::run::jobs::runner::print(&out.summary);
    println!(
        "wrote {} (fabric report {})",
        fabric_user::run::jobs::runner::JobsSummary::path(&out.summary.run_id).display(),
        out.summary.run_id
    );
    Ok(())
}

/// The topology as TOML again (to re-validate after a command-line override).
fn toml_of(t: &Topology) -> Result<String> {
    Ok(toml::to_string(t)?)
}
