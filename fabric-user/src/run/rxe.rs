//! Workloads on rxe hosts (`fabric up --endpoints rxe`): perftest point to point through the
//! fabric with rxe's own counters, the XDP uplink counters and the UDP source ports seen on the
//! wire; and `fabric rxe smoke`, the end-to-end check `cargo xtask vm` runs.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};
use serde::Serialize;

use crate::{
    endpoint::{CcMode, rxe_udp_sport},
    model::topology::Topology,
    run::{Endpoints, IterationResult, RESULTS_SCHEMA, RunResult},
    state::State,
    telemetry::stats::{self, CongestionTotals, UplinkBytes, UplinkLoad},
    testbed,
    testbed::UpSummary,
    testbed::rxe::{self, ERROR_COUNTERS, PFC_NOTE, RETRY_COUNTERS, RxeHost, RxeLayout, RxeOptions},
};

#[derive(Debug, clap::Args)]
pub struct RxeArgs {
    #[command(subcommand)]
    pub command: RxeCommand,
}

impl RxeArgs {
    /// Whether the command brings up a testbed of its own (the smoke test), which Ctrl-C must
    /// not leave behind.
    pub fn builds_testbeds(&self) -> bool {
        matches!(self.command, RxeCommand::Smoke { .. })
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum RxeCommand {
    /// perftest (ib_write_bw / ib_send_bw / ib_read_bw) between two rxe hosts of a testbed.
    Perftest {
        #[command(flatten)]
        spec: PerftestSpec,
        /// Testbed prefix (default: the one testbed with rxe hosts).
        #[arg(long, value_parser = crate::model::topology::validate::parse_prefix)]
        prefix: Option<String>,
        /// Write the result (JSON, schema fabric.rxe-perftest/1) here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Ring AllReduce over every rxe host with our verbs program (fabric-verbs-allreduce, one
    /// process per rank): a fabric.run/2 result, plus rxe's counters.
    Allreduce {
        #[command(flatten)]
        spec: AllreduceSpec,
        /// Testbed prefix (default: the one testbed with rxe hosts).
        #[arg(long, value_parser = crate::model::topology::validate::parse_prefix)]
        prefix: Option<String>,
        /// Write the result (JSON, schema fabric.run/2 with `endpoints: "rxe"`) here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Bring up testbed/rxe-smoke.toml with rxe hosts, run `ib_write_bw -q 4` across racks with
    /// ECT traffic, check it (uplinks both used, no packet lost, reordered or corrupted), tear
    /// down.
    Smoke {
        /// Topology file of the rxe testbed (relative to the current folder).
        #[arg(long, default_value = "testbed/rxe-smoke.toml")]
        topology: PathBuf,
        /// Directory for the result JSON and the capture.
        #[arg(long, default_value = "results/rxe")]
        out: PathBuf,
        /// Also run the verbs ring AllReduce (fabric-user/verbs) on the same fabric. Off in the
        /// default (CI) run: under software emulation it has hung once in a few runs.
        #[arg(long)]
        allreduce: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PerftestKind {
    Write,
    Send,
    Read,
}

impl PerftestKind {
    fn binary(self) -> &'static str {
        match self {
            PerftestKind::Write => "ib_write_bw",
            PerftestKind::Send => "ib_send_bw",
            PerftestKind::Read => "ib_read_bw",
        }
    }
}

#[derive(Clone, Debug, Serialize, clap::Args)]
pub struct PerftestSpec {
    /// The perftest to run: ib_write_bw (RDMA WRITE), ib_send_bw (SEND) or ib_read_bw (READ).
    #[arg(long, value_enum, default_value = "write")]
    pub test: PerftestKind,
    /// Client (requester) host, e.g. z0r0h0 (default: the first host).
    #[arg(long)]
    pub from: Option<String>,
    /// Server host (default: the last host).
    #[arg(long)]
    pub to: Option<String>,
    /// QPs (perftest -q).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub qps: u32,
    /// Message size, bytes (perftest -s).
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u32).range(1..))]
    pub size: u32,
    /// Iterations (perftest -n, at least 5).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(5..))]
    pub iters: u32,
    /// IP traffic class (perftest --tclass): 106 = DSCP 26 (lossless class 3) + ECT(0).
    #[arg(long, default_value_t = 106)]
    pub tclass: u8,
    /// Outstanding work requests per QP (perftest -t). Under software emulation rxe moves a
    /// few thousand packets per second: a deep queue outlasts the retransmission timer.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub tx_depth: u32,
    /// QP retransmission timeout exponent, 4.096 us x 2^N (perftest -u; the IB field holds
    /// 0..=31); 18 is about 1 s.
    #[arg(long, default_value_t = 18, value_parser = clap::value_parser!(u8).range(0..=31))]
    pub qp_timeout: u8,
    /// TCP port of perftest's connection exchange.
    #[arg(long, default_value_t = 18515, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// Capture the RoCE frames arriving at the server's veth (UDP source ports, CE marks); the
    /// server's own ACKs and responses are not in it.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub capture: bool,
}

/// One UDP source port seen on the wire.
#[derive(Clone, Debug, Serialize)]
pub struct SportSeen {
    pub sport: u16,
    pub dest_qps: Vec<u32>,
    pub packets: u64,
    pub ce_marked: u64,
}

/// A QP pair as perftest reports it, and the source port rxe derives from it.
#[derive(Clone, Debug, Serialize)]
pub struct QpPair {
    pub local_qpn: u32,
    pub remote_qpn: u32,
    pub rxe_udp_sport: u16,
}

#[derive(Debug, Serialize)]
pub struct PerftestResult {
    pub schema: &'static str,
    pub testbed: String,
    pub endpoints: &'static str,
    pub kernel: String,
    pub spec: PerftestSpec,
    pub from: String,
    pub to: String,
    pub devices: (String, String),
    pub gid_indexes: (u32, u32),
    pub gbps_average: f64,
    pub gbps_peak: f64,
    /// Ethernet bytes of the RoCE frames that reached the server's veth over the capture's span.
    pub gbps_wire: f64,
    pub mpps: f64,
    pub seconds: f64,
    /// RTSW uplink bytes during the run (XDP counters) and their balance.
    pub uplinks: Vec<UplinkLoad>,
    /// The client RTSW's uplinks that carried at least 10 % of its uplink bytes.
    pub client_rtsw_uplinks_used: usize,
    pub congestion: CongestionTotals,
    /// rxe hw_counters of both devices, what the run added.
    pub rxe_counters: BTreeMap<String, BTreeMap<String, u64>>,
    /// Non-zero error counters (must be empty).
    pub rxe_errors: Vec<String>,
    /// Non-zero counters of rxe's retransmission timer: the hosts' timing, reported.
    pub rxe_retries: Vec<String>,
    /// Every packet one device sent the other received (a frame failing the ICRC check would be
    /// dropped by the receiver and break this).
    pub packets_conserved: bool,
    pub qp_pairs: Vec<QpPair>,
    /// Source ports of the RoCE frames that reached the server (empty without capture).
    pub udp_sports: Vec<SportSeen>,
    pub captured_frames: u64,
    pub pfc: &'static str,
    pub perftest_output: String,
}

pub fn main(args: &RxeArgs) -> Result<()> {
    match &args.command {
        RxeCommand::Perftest { spec, prefix, json } => {
            let prefix = match prefix {
                Some(p) => p.clone(),
                None => crate::testbed::rxe::the_rxe_testbed()?,
            };
            let state = State::load(&prefix)?;
            let layout = RxeLayout::load(&prefix)?;
            let r = perftest(&state, &layout, spec, None)?;
            print(&r);
            let path =
                json.clone().unwrap_or_else(|| PathBuf::from(format!("results/rxe-{}.json", spec.test.binary())));
            crate::sys::file::write_json(&path, &r)?;
        }
        RxeCommand::Smoke { topology, out, allreduce } => smoke(topology, out, *allreduce)?,
        RxeCommand::Allreduce { spec, prefix, json } => {
            let prefix = match prefix {
                Some(p) => p.clone(),
                None => crate::testbed::rxe::the_rxe_testbed()?,
            };
            let state = State::load(&prefix)?;
            let layout = RxeLayout::load(&prefix)?;
            let r = allreduce(&state, &layout, spec)?;
            print_allreduce(&r);
            let path = json.clone().unwrap_or_else(|| PathBuf::from("results/rxe-allreduce.json"));
            crate::sys::file::write_json(&path, &r)?;
        }
    }
    Ok(())
}

/// What one position of reordering costs a go-back-N RC QP (what rxe runs), measured on
/// `fabric_roce`'s go-back-N requester and responder over a simulated channel.
#[derive(Clone, Copy, Debug)]
pub struct ReorderingCost {
    pub in_order_gbps: f64,
    pub reordered_gbps: f64,
    pub resent_per_mib: f64,
}

const COST_SEEDS: u64 = 3;

/// One 1 MiB WRITE through [`fabric_roce::channel`] (its defaults: 100 Gbit/s, 1024-byte MTU),
/// in order and with packets overtaking one another by one position, mean of [`COST_SEEDS`].
pub fn go_back_n_reordering_cost() -> ReorderingCost {
    use fabric_roce::{
        channel::{ChannelConfig, transfer},
        transport::Transport,
    };
    let run = |window: u32| {
        let (mut gbps, mut resent) = (0.0, 0.0);
        for seed in 0..COST_SEEDS {
            let mut cfg = ChannelConfig::new(Transport::GoBackN);
            cfg.reorder_window = window;
            cfg.seed = seed;
            let r = transfer(&[1 << 20], &cfg);
            gbps += r.goodput_bps() / 1e9;
            resent += r.requester.packets_retransmitted as f64;
        }
        (gbps / COST_SEEDS as f64, resent / COST_SEEDS as f64)
    };
    let ((in_order_gbps, _), (reordered_gbps, resent_per_mib)) = (run(0), run(2));
    ReorderingCost { in_order_gbps, reordered_gbps, resent_per_mib }
}

/// `fabric up --endpoints rxe`.
pub fn up_and_report(topo: &Topology, quiet: bool) -> Result<UpSummary> {
    let tiers = topo.reordering_tiers();
    if !tiers.is_empty() {
        let cost = go_back_n_reordering_cost();
        for (tier, mode) in tiers {
            eprintln!(
                "warning: tiers.{tier}.hash = {:?} sends one flow's packets over several paths; rxe's RC is \
                 go-back-N, so every reordered packet costs a NAK and a resend of the rest of the window. \
                 Measured now on our go-back-N RC (one 1 MiB WRITE at 100 Gbit/s, {} seeds): {:.1} Gbit/s in \
                 order, {:.1} Gbit/s when packets overtake one another by one position ({:.0} packets \
                 resent per MiB). `fabric run --hash {}` with our endpoints prints the retransmissions.",
                mode.as_str(),
                COST_SEEDS,
                cost.in_order_gbps,
                cost.reordered_gbps,
                cost.resent_per_mib,
                mode.as_str()
            );
        }
    }
    let (s, layout) = testbed::up_rxe(topo, quiet, RxeOptions { create_devices: true })?;
    for h in &layout.hosts {
        println!(
            "rxe host {}: {} on {} ({}), GID index {}{}",
            h.host,
            h.device.as_deref().unwrap_or("-"),
            h.ifname,
            h.ipv4,
            h.gid_index.map_or("-".into(), |i| i.to_string()),
            h.netns.as_ref().map_or(String::new(), |n| format!(", namespace {n}"))
        );
    }
    println!("note: {PFC_NOTE}");
    Ok(s)
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string()
}

fn command_in(host: &RxeHost, program: &str) -> Command {
    match &host.netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => Command::new(program),
    }
}

/// Whether something listens on TCP `port` in this thread's namespace.
fn tcp_listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).any(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            c.len() > 3 && c[1].ends_with(&want) && c[3] == "0A"
        })
    })
}

fn wait_child(child: &mut Child, timeout: Duration, what: &str) -> Result<std::process::Output> {
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut out = std::process::Output { status: child.wait()?, stdout: Vec::new(), stderr: Vec::new() };
    use std::io::Read as _;
    if let Some(mut s) = child.stdout.take() {
        s.read_to_end(&mut out.stdout)?;
    }
    if let Some(mut s) = child.stderr.take() {
        s.read_to_end(&mut out.stderr)?;
    }
    Ok(out)
}

fn counters_of(dev: &str) -> Result<BTreeMap<String, u64>> {
    rxe::hw_counters(dev)
}

fn delta(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after.iter().map(|(k, v)| (k.clone(), v.saturating_sub(before.get(k).copied().unwrap_or(0)))).collect()
}

/// The fabric's counters (uplink bytes, congestion) and rxe devices' hw_counters before a run,
/// to report what the run added.
struct Baseline {
    uplinks: UplinkBytes,
    congestion: CongestionTotals,
    devices: Vec<(String, BTreeMap<String, u64>)>,
}

/// What a run added to the counters of its [`Baseline`].
struct RunCounters {
    uplinks: Vec<UplinkLoad>,
    congestion: CongestionTotals,
    /// Per device, in the order given to [`Baseline::take`].
    devices: Vec<(String, BTreeMap<String, u64>)>,
}

impl Baseline {
    fn take(state: &State, devices: &[String]) -> Result<Baseline> {
        let uplinks = UplinkBytes::read(state)?;
        let congestion = stats::congestion_totals(state)?;
        let devices = devices.iter().map(|d| Ok((d.clone(), counters_of(d)?))).collect::<Result<Vec<_>>>()?;
        Ok(Baseline { uplinks, congestion, devices })
    }

    fn since(&self, state: &State) -> Result<RunCounters> {
        let uplinks = UplinkBytes::read(state)?.since(&self.uplinks);
        let congestion = stats::congestion_totals(state)?.since(&self.congestion);
        let devices = self
            .devices
            .iter()
            .map(|(d, before)| Ok((d.clone(), delta(&counters_of(d)?, before))))
            .collect::<Result<Vec<_>>>()?;
        Ok(RunCounters { uplinks, congestion, devices })
    }
}

impl RunCounters {
    /// The error counters the devices counted during the run, as `device: counter = value`.
    fn rxe_errors(&self) -> Vec<String> {
        counted(&self.devices, ERROR_COUNTERS)
    }

    /// The retransmission timer's counters, in the same form: the hosts' timing, reported.
    fn rxe_retries(&self) -> Vec<String> {
        counted(&self.devices, RETRY_COUNTERS)
    }
}

/// What rxe's resends were, printed after them when every packet sent was received with no
/// sequence error on a write or send (see [`RETRY_COUNTERS`]).
const RESENDS_BY_TIMER: &str = " (every packet arrived once, in order: the retransmission timer, the hosts' timing)";

/// The counters among `names` that a device counted, as `device: counter = value`.
fn counted(devices: &[(String, BTreeMap<String, u64>)], names: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (dev, d) in devices {
        for &k in names {
            if let Some(&v) = d.get(k)
                && v > 0
            {
                out.push(format!("{dev}: {k} = {v}"));
            }
        }
    }
    out
}

/// Whether every packet each of two devices sent, the other received (rxe counts a packet
/// received only once its ICRC checks). Resent packets count at both ends, so the timer's
/// retries keep it; a packet lost in the fabric, even at a message's tail, breaks it.
fn packets_conserved(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> bool {
    let get = |d: &BTreeMap<String, u64>, k: &str| d.get(k).copied().unwrap_or(0);
    get(a, "sent_pkts") == get(b, "rcvd_pkts") && get(b, "sent_pkts") == get(a, "rcvd_pkts")
}

/// A pcap record: timestamp, captured bytes, original length.
type TimedFrame = (Duration, Vec<u8>, u32);

/// A perftest's client (`from`) and server (`to`) hosts, with their rxe devices and GID indexes.
struct PerftestEnds<'a> {
    from: &'a RxeHost,
    to: &'a RxeHost,
    dev_a: String,
    dev_b: String,
    gid_a: u32,
    gid_b: u32,
}

impl<'a> PerftestEnds<'a> {
    /// The hosts `spec` names; by default the first and the last.
    fn resolve(layout: &'a RxeLayout, spec: &PerftestSpec) -> Result<Self> {
        let from = match &spec.from {
            Some(h) => layout.host(h)?,
            None => layout.hosts.first().context("no rxe hosts")?,
        };
        let to = match &spec.to {
            Some(h) => layout.host(h)?,
            None => layout.hosts.last().context("no rxe hosts")?,
        };
        ensure!(from.host != to.host, "--from and --to are the same host");
        let (dev_a, dev_b) = (
            from.device.clone().context("the client host has no rxe device")?,
            to.device.clone().context("the server host has no rxe device")?,
        );
        let (gid_a, gid_b) = (from.gid_index.context("no GID index")?, to.gid_index.context("no GID index")?);
        Ok(PerftestEnds { from, to, dev_a, dev_b, gid_a, gid_b })
    }
}

/// What one perftest run gave: the client's output and figures, and the frames captured.
struct PerftestRun {
    text: String,
    seconds: f64,
    gbps_peak: f64,
    gbps_average: f64,
    mpps: f64,
    captured: Vec<TimedFrame>,
}

/// Runs one perftest between two rxe hosts. `capture_dir`: where to keep the pcap.
pub fn perftest(
    state: &State,
    layout: &RxeLayout,
    spec: &PerftestSpec,
    capture_dir: Option<&Path>,
) -> Result<PerftestResult> {
    ensure!(spec.iters >= 5, "perftest needs at least 5 iterations");
    let ends = PerftestEnds::resolve(layout, spec)?;
    let baseline = Baseline::take(state, &[ends.dev_a.clone(), ends.dev_b.clone()])?;
    let pcap = capture_dir.map(|d| d.join(format!("rxe-{}-q{}.pcap", spec.test.binary(), spec.qps)));
    let run = run_perftest(spec, &ends, pcap.as_deref())?;
    let counters = baseline.since(state)?;
    Ok(perftest_result(state, spec, ends, run, counters))
}

/// perftest's options for one side (the client adds the server's address).
fn perftest_args(spec: &PerftestSpec, dev: &str, gid: u32) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "-d".into(),
        dev.into(),
        "-x".into(),
        gid.to_string(),
        "-q".into(),
        spec.qps.to_string(),
        "-s".into(),
        spec.size.to_string(),
        "-n".into(),
        spec.iters.to_string(),
        "-p".into(),
        spec.port.to_string(),
        "-t".into(),
        spec.tx_depth.to_string(),
        "-u".into(),
        spec.qp_timeout.to_string(),
        "-F".into(),
        "--report_gbits".into(),
    ];
    if spec.tclass != 0 {
        v.push(format!("--tclass={}", spec.tclass));
    }
    v
}

/// The capture (when asked for), the server, the client; then the capture is stopped, kept at
/// `pcap`, and the client's output checked and parsed.
fn run_perftest(spec: &PerftestSpec, ends: &PerftestEnds, pcap: Option<&Path>) -> Result<PerftestRun> {
    let tcpdump = if spec.capture { start_capture(ends.to)? } else { None };
    let mut server = start_server(spec, ends)?;
    let start = Instant::now();
    let mut client = command_in(ends.from, spec.test.binary())
        .args(perftest_args(spec, &ends.dev_a, ends.gid_a))
        .arg(ends.to.ipv4.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let client_out = wait_child(&mut client, Duration::from_secs(300), "the perftest client");
    let server_out = wait_child(&mut server, Duration::from_secs(30), "the perftest server");
    let seconds = start.elapsed().as_secs_f64();
    // Stopped and cleaned up before a failed client or server is reported.
    let captured = match tcpdump {
        Some(capture) => finish_capture(capture, pcap)?,
        None => Vec::new(),
    };
    let client_out = client_out?;
    let server_out = server_out?;
    let text = client_text(spec, &client_out, &server_out)?;
    let (gbps_peak, gbps_average, mpps) = parse_bw(&text).with_context(|| format!("no bandwidth line in:\n{text}"))?;
    Ok(PerftestRun { text, seconds, gbps_peak, gbps_average, mpps, captured })
}

/// Starts tcpdump on the server's veth for the RoCE frames to the server; `None` (a warning)
/// if tcpdump does not start.
fn start_capture(to: &RxeHost) -> Result<Option<(Child, PathBuf)>> {
    // Captured to local storage (tcpdump runs as its own user), copied to `capture_dir` after.
    let dir = std::env::temp_dir().join(format!("fabric-rxe-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // World-writable: tcpdump drops to its own user before opening the file.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
    let file = dir.join("capture.pcap");
    let mut c = command_in(to, "tcpdump");
    c.args(["-i", &to.ifname, "-Z", "root", "-nn", "-s", "96", "-c", "20000", "-w"])
        .arg(&file)
        .args(["udp", "dst", "port", "4791", "and", "dst", "host", &to.ipv4.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    match c.spawn() {
        Ok(child) => {
            // tcpdump says "listening on" once its socket is open.
            std::thread::sleep(Duration::from_millis(1500));
            Ok(Some((child, file)))
        }
        Err(e) => {
            eprintln!("warning: no capture (tcpdump: {e})");
            Ok(None)
        }
    }
}

/// Stops tcpdump and reads its capture (a warning if it cannot be read); copies it to `pcap`
/// and removes the local one.
fn finish_capture((mut child, file): (Child, PathBuf), pcap: Option<&Path>) -> Result<Vec<TimedFrame>> {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let _ = wait_child(&mut child, Duration::from_secs(10), "tcpdump");
    let mut captured = Vec::new();
    match read_pcap_timed(&file) {
        Ok(c) => captured = c,
        Err(e) => eprintln!("warning: could not read the capture: {e:#}"),
    }
    if let Some(p) = pcap {
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::copy(&file, p).with_context(|| format!("copying the capture to {}", p.display()))?;
    }
    let _ = std::fs::remove_dir_all(file.parent().expect("in a directory"));
    Ok(captured)
}

/// Starts the perftest server and waits (up to 30 s) until it listens on its port.
fn start_server(spec: &PerftestSpec, ends: &PerftestEnds) -> Result<Child> {
    let mut server = command_in(ends.to, spec.test.binary())
        .args(perftest_args(spec, &ends.dev_b, ends.gid_b))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} (apt-get install perftest)", spec.test.binary()))?;
    let t0 = Instant::now();
    while !tcp_listening(spec.port) {
        if server.try_wait()?.is_some() || t0.elapsed() > Duration::from_secs(30) {
            let out = wait_child(&mut server, Duration::from_secs(1), "server")?;
            bail!("the perftest server did not start: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(server)
}

/// The client's stdout and stderr; an error with the server's output too if the client failed.
fn client_text(
    spec: &PerftestSpec,
    client_out: &std::process::Output,
    server_out: &std::process::Output,
) -> Result<String> {
    let text = String::from_utf8_lossy(&client_out.stdout).into_owned() + &String::from_utf8_lossy(&client_out.stderr);
    ensure!(
        client_out.status.success(),
        "{} client failed ({}):\n{text}\nserver:\n{}{}",
        spec.test.binary(),
        client_out.status,
        String::from_utf8_lossy(&server_out.stdout),
        String::from_utf8_lossy(&server_out.stderr)
    );
    Ok(text)
}

/// The result document of a perftest run.
fn perftest_result(
    state: &State,
    spec: &PerftestSpec,
    ends: PerftestEnds,
    run: PerftestRun,
    counters: RunCounters,
) -> PerftestResult {
    let (rxe_errors, rxe_retries) = (counters.rxe_errors(), counters.rxe_retries());
    let packets_conserved = packets_conserved(&counters.devices[0].1, &counters.devices[1].1);
    let client_rtsw_uplinks_used = rtsw_uplinks_used(state, ends.from, &counters.uplinks);
    let frames: Vec<Vec<u8>> = run.captured.iter().map(|c| c.1.clone()).collect();
    PerftestResult {
        schema: "fabric.rxe-perftest/1",
        testbed: state.plan.topology.prefix.clone(),
        endpoints: "rxe",
        kernel: kernel(),
        spec: spec.clone(),
        from: ends.from.host.clone(),
        to: ends.to.host.clone(),
        devices: (ends.dev_a, ends.dev_b),
        gid_indexes: (ends.gid_a, ends.gid_b),
        gbps_average: run.gbps_average,
        gbps_peak: run.gbps_peak,
        gbps_wire: wire_gbps(&run.captured),
        mpps: run.mpps,
        seconds: run.seconds,
        uplinks: counters.uplinks,
        client_rtsw_uplinks_used,
        congestion: counters.congestion,
        rxe_counters: counters.devices.into_iter().collect(),
        rxe_errors,
        rxe_retries,
        packets_conserved,
        qp_pairs: qp_pairs(&run.text),
        udp_sports: sports_seen(&frames),
        captured_frames: run.captured.len() as u64,
        pfc: PFC_NOTE,
        perftest_output: run.text,
    }
}

/// How many uplinks of `host`'s RTSW carried at least 10 % of its uplink bytes.
fn rtsw_uplinks_used(state: &State, host: &RxeHost, uplinks: &[UplinkLoad]) -> usize {
    let rtsw = &state.plan.nodes[state.plan.rtsw_of(host.node)].name;
    uplinks.iter().find(|u| &u.rtsw == rtsw).map_or(0, |u| {
        let total: u64 = u.tx_bytes.iter().map(|t| t.1).sum();
        u.tx_bytes.iter().filter(|t| total > 0 && t.1 * 10 >= total).count()
    })
}

/// The rate of the captured frames (their original lengths) over the capture's span.
fn wire_gbps(captured: &[TimedFrame]) -> f64 {
    // perftest's own figure is 0 when its cycle-counter calibration fails (it does under
    // software emulation); the capture gives the rate that reached the server.
    match (captured.first(), captured.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => {
            captured.iter().map(|c| c.2 as f64 * 8.0).sum::<f64>() / (b.0 - a.0).as_secs_f64() / 1e9
        }
        _ => 0.0,
    }
}

/// Frames of a (classic, Ethernet) pcap file with their timestamps and original lengths. Read here
/// rather than with pcap-file, which rejects records of a capture with a short snap length.
fn read_pcap_timed(path: &Path) -> Result<Vec<TimedFrame>> {
    let d = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(d.len() >= 24, "{} is not a pcap file", path.display());
    let (le, nanos) = match &d[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] => (true, false),
        [0x4d, 0x3c, 0xb2, 0xa1] => (true, true),
        [0xa1, 0xb2, 0xc3, 0xd4] => (false, false),
        [0xa1, 0xb2, 0x3c, 0x4d] => (false, true),
        _ => bail!("{} is not a pcap file", path.display()),
    };
    let u32_at = |o: usize| {
        let b = [d[o], d[o + 1], d[o + 2], d[o + 3]];
        if le { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) }
    };
    let mut out = Vec::new();
    let mut o = 24;
    while o + 16 <= d.len() {
        let (sec, frac, incl, orig) = (u32_at(o), u32_at(o + 4), u32_at(o + 8) as usize, u32_at(o + 12));
        let Some(data) = d.get(o + 16..o + 16 + incl) else { break };
        let t = Duration::from_secs(sec as u64)
            + if nanos { Duration::from_nanos(frac as u64) } else { Duration::from_micros(frac as u64) };
        out.push((t, data.to_vec(), orig));
        o += 16 + incl;
    }
    Ok(out)
}

/// (peak, average, Mpps) from perftest's result line `bytes iters peak avg msgrate`.
fn parse_bw(text: &str) -> Option<(f64, f64, f64)> {
    text.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() == 5 && f[0].parse::<u64>().is_ok() && f[1].parse::<u64>().is_ok() {
            Some((f[2].parse().ok()?, f[3].parse().ok()?, f[4].parse().ok()?))
        } else {
            None
        }
    })
}

/// The QPNs of perftest's `local address: ... QPN 0x0011 ...` and `remote address:` lines, paired
/// in order, with the UDP source port rxe derives from each pair.
fn qp_pairs(text: &str) -> Vec<QpPair> {
    let qpn = |prefix: &str| -> Vec<u32> {
        text.lines()
            .filter(|l| l.trim_start().starts_with(prefix))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let i = f.iter().position(|w| *w == "QPN")?;
                u32::from_str_radix(f.get(i + 1)?.trim_start_matches("0x"), 16).ok()
            })
            .collect()
    };
    qpn("local address")
        .into_iter()
        .zip(qpn("remote address"))
        .map(|(l, r)| QpPair { local_qpn: l, remote_qpn: r, rxe_udp_sport: rxe_udp_sport(l, r) })
        .collect()
}

/// UDP source port, BTH destination QP and CE mark of every RoCEv2 frame.
fn sports_seen(frames: &[Vec<u8>]) -> Vec<SportSeen> {
    let mut by: BTreeMap<u16, SportSeen> = BTreeMap::new();
    for f in frames {
        if f.len() < 14 + 20 + 8 + 12 || u16::from_be_bytes([f[12], f[13]]) != 0x0800 {
            continue;
        }
        let ihl = ((f[14] & 0x0f) as usize) * 4;
        let (tos, udp) = (f[15], 14 + ihl);
        let Some(hdr) = f.get(udp..udp + 8 + 12) else { continue };
        let sport = u16::from_be_bytes([hdr[0], hdr[1]]);
        let dqp = u32::from_be_bytes([0, hdr[8 + 5], hdr[8 + 6], hdr[8 + 7]]);
        let e = by.entry(sport).or_insert_with(|| SportSeen { sport, dest_qps: Vec::new(), packets: 0, ce_marked: 0 });
        e.packets += 1;
        e.ce_marked += (tos & 3 == 3) as u64;
        if !e.dest_qps.contains(&dqp) {
            e.dest_qps.push(dqp);
        }
    }
    by.into_values().collect()
}

pub fn print(r: &PerftestResult) {
    println!(
        "{} {} -> {} ({} -> {}), -q {} -s {} -n {} --tclass {}: {:.3} Gbit/s average ({:.3} peak; {:.3} Gbit/s at the server's veth) in {:.1} s",
        r.spec.test.binary(),
        r.from,
        r.to,
        r.devices.0,
        r.devices.1,
        r.spec.qps,
        r.spec.size,
        r.spec.iters,
        r.spec.tclass,
        r.gbps_average,
        r.gbps_peak,
        r.gbps_wire,
        r.seconds
    );
    for u in &r.uplinks {
        let parts: Vec<String> = u.tx_bytes.iter().map(|(p, b)| format!("{p}={b}")).collect();
        println!("  uplinks of {}: {} (max/mean {:.2}, Jain {:.2})", u.rtsw, parts.join(" "), u.max_over_mean, u.jain);
    }
    for p in &r.qp_pairs {
        println!("  QP 0x{:x} -> 0x{:x}: rxe UDP source port {}", p.local_qpn, p.remote_qpn, p.rxe_udp_sport);
    }
    for s in &r.udp_sports {
        let qps: Vec<String> = s.dest_qps.iter().map(|q| format!("0x{q:x}")).collect();
        println!(
            "  seen: UDP source port {} -> QP {}: {} frames, {} CE-marked",
            s.sport,
            qps.join(","),
            s.packets,
            s.ce_marked
        );
    }
    println!(
        "  switches: {} ECN-marked, {} PFC XOFF sent, {} overflow drops",
        r.congestion.ecn_marked, r.congestion.pfc_xoff_sent, r.congestion.overflow_drops
    );
    for (dev, c) in &r.rxe_counters {
        let nz: Vec<String> = c.iter().filter(|(_, v)| **v > 0).map(|(k, v)| format!("{k}={v}")).collect();
        println!("  rxe {dev}: {}", nz.join(" "));
    }
    println!(
        "  rxe errors: {}; packets conserved: {}",
        if r.rxe_errors.is_empty() { "none".to_string() } else { r.rxe_errors.join(", ") },
        r.packets_conserved
    );
    if !r.rxe_retries.is_empty() {
        let clean = r.rxe_errors.is_empty() && r.packets_conserved && r.spec.test != PerftestKind::Read;
        println!("  rxe resends: {}{}", r.rxe_retries.join(", "), if clean { RESENDS_BY_TIMER } else { "" });
    }
    println!("  note: {}", r.pfc);
}

/// What the smoke test checked.
#[derive(Debug, Serialize)]
pub struct SmokeReport {
    pub schema: &'static str,
    pub kernel: String,
    pub up_seconds: f64,
    pub per_host_netns: bool,
    pub ping_across_racks: bool,
    pub perftest: PerftestResult,
    /// fabric.run/2 of a ring AllReduce by our verbs program (absent when it is not built).
    pub allreduce: Option<RxeRunResult>,
    pub checks: Vec<(String, bool)>,
    pub passed: bool,
}

/// `fabric rxe smoke`: see [`RxeCommand::Smoke`].
pub fn smoke(topology: &Path, out: &Path, with_allreduce: bool) -> Result<()> {
    let topo = Topology::load(Some(topology))?;
    let prefix = topo.prefix.clone();
    let _ = testbed::down(&prefix);
    let started = Instant::now();
    let guard = testbed::DownOnDrop::owned(prefix.clone());
    let (_, layout) =
        testbed::interrupt::guarded_step(|| testbed::up_rxe(&topo, true, RxeOptions { create_devices: true }))?;
    let up_seconds = started.elapsed().as_secs_f64();
    println!(
        "rxe smoke: testbed {prefix} up with rxe hosts in {up_seconds:.1} s (per-host namespaces: {})",
        layout.per_host_netns
    );
    let state = State::load(&prefix)?;
    ensure!(layout.hosts.len() >= 2, "the smoke topology needs two hosts");
    let (a, b) = (&layout.hosts[0], &layout.hosts[layout.hosts.len() - 1]);
    let ping = layout.per_host_netns || rxe::ping(a.ipv4, b.ipv4, 0x5253, Duration::from_secs(5))?;
    let spec = smoke_perftest_spec(a, b);
    std::fs::create_dir_all(out)?;
    let r = perftest(&state, &layout, &spec, Some(out))?;
    print(&r);
    let mut checks = perftest_checks(&r, &spec, a, b, ping);
    // The same fabric with a collective from our verbs program, when asked for.
    let allreduce_result = if with_allreduce {
        smoke_allreduce(&state, &layout, &mut checks)
    } else {
        println!("  (verbs AllReduce not requested: `fabric rxe smoke --allreduce`)");
        None
    };
    let passed = checks.iter().all(|c| c.1);
    for (what, ok) in &checks {
        println!("  [{}] {what}", if *ok { "ok" } else { "FAIL" });
    }
    println!("  ECN: the switches marked {} packets CE during the run", r.congestion.ecn_marked);
    let report = SmokeReport {
        schema: "fabric.rxe-smoke/1",
        kernel: kernel(),
        up_seconds,
        per_host_netns: layout.per_host_netns,
        ping_across_racks: ping,
        perftest: r,
        allreduce: allreduce_result,
        checks,
        passed,
    };
    crate::sys::file::write_json(&out.join("rxe-smoke.json"), &report)?;
    drop(guard);
    ensure!(RxeLayout::load(&prefix).is_err(), "down left the rxe layout behind");
    println!("rxe smoke: {} ({:.1} s)", if passed { "passed" } else { "FAILED" }, started.elapsed().as_secs_f64());
    ensure!(passed, "the rxe smoke test failed");
    Ok(())
}

/// `ib_write_bw -q 4` from host `a` to host `b` with ECT traffic, captured at `b`.
fn smoke_perftest_spec(a: &RxeHost, b: &RxeHost) -> PerftestSpec {
    PerftestSpec {
        test: PerftestKind::Write,
        from: Some(a.host.clone()),
        to: Some(b.host.clone()),
        qps: 4,
        size: 16384,
        iters: 200,
        tclass: 106,
        tx_depth: 16,
        qp_timeout: 18,
        port: 18515,
        capture: true,
    }
}

/// What the smoke test checks of the ping and the perftest run, each with whether it held.
fn perftest_checks(
    r: &PerftestResult,
    spec: &PerftestSpec,
    a: &RxeHost,
    b: &RxeHost,
    ping: bool,
) -> Vec<(String, bool)> {
    let distinct_sports = r.udp_sports.iter().filter(|s| s.packets > 0).count();
    vec![
        (format!("ICMP {} -> {} crosses the fabric", a.ipv4, b.ipv4), ping),
        (
            format!(
                "ib_write_bw -q 4 moved data ({:.3} Gbit/s by perftest, {:.3} at the server's veth)",
                r.gbps_average, r.gbps_wire
            ),
            r.gbps_average > 0.0 || r.gbps_wire > 0.0,
        ),
        (
            format!("E-ECMP spread the 4 QPs over {} uplinks of the client's RTSW", r.client_rtsw_uplinks_used),
            r.client_rtsw_uplinks_used >= 2,
        ),
        (
            format!(
                "rxe saw no sequence gap, failed transfer or host error: error counters zero ({})",
                if r.rxe_errors.is_empty() { "none".into() } else { r.rxe_errors.join(", ") }
            ),
            r.rxe_errors.is_empty(),
        ),
        (
            "every rxe packet sent was received, and no other (no loss, duplicate or ICRC drop)".into(),
            r.packets_conserved,
        ),
        (
            format!("{distinct_sports} distinct UDP source ports seen (rxe: one per QP pair)"),
            !spec.capture || distinct_sports >= 2,
        ),
    ]
}

/// The verbs ring AllReduce on the smoke fabric, its checks added to `checks`.
fn smoke_allreduce(state: &State, layout: &RxeLayout, checks: &mut Vec<(String, bool)>) -> Option<RxeRunResult> {
    // Asked for and not runnable: a failed check, not a silent pass.
    if let Err(e) = verbs_program() {
        checks.push((format!("verbs ring AllReduce requested, but not runnable: {e:#}"), false));
        return None;
    }
    let spec = AllreduceSpec {
        message: crate::model::units::Size(256 << 10),
        iterations: 2,
        qps: 2,
        tclass: 106,
        qp_timeout: 18,
        port_base: 19000,
    };
    match allreduce(state, layout, &spec) {
        Ok(v) => {
            print_allreduce(&v);
            checks.push(("verbs ring AllReduce: sums verified".into(), v.extra.verified));
            checks.push((
                format!("verbs ring AllReduce: rxe error counters zero ({:?})", v.extra.rxe_errors),
                v.extra.rxe_errors.is_empty(),
            ));
            checks.push((
                "verbs ring AllReduce: every rxe packet sent was received, and no other".into(),
                v.extra.rxe_packets_conserved,
            ));
            Some(v)
        }
        Err(e) => {
            checks.push((format!("verbs ring AllReduce ran: {e:#}"), false));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The warning's figures are measured, not written down: in order go-back-N runs near the
    /// channel's rate and resends nothing; one position of reordering costs it resends and most
    /// of its goodput.
    #[test]
    fn the_reordering_warning_measures_what_go_back_n_loses() {
        let c = go_back_n_reordering_cost();
        eprintln!("{c:?}");
        assert!(c.in_order_gbps > 80.0 && c.in_order_gbps <= 100.0, "{c:?}");
        assert!(c.reordered_gbps < 0.5 * c.in_order_gbps, "{c:?}");
        assert!(c.resent_per_mib > 100.0, "{c:?}");
    }

    #[test]
    fn perftest_output_is_parsed() {
        let text = " local address: LID 0000 QPN 0x0011 PSN 0x1 RKey 0x1 VAddr 0x1\n GID: 00:00\n \
                    local address: LID 0000 QPN 0x0012 PSN 0x2\n remote address: LID 0000 QPN 0x0013 PSN 0x3\n \
                    remote address: LID 0000 QPN 0x0014 PSN 0x4\n \
                    #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n \
                    16384      800              0.21               0.19 \t\t   0.001450\n";
        assert_eq!(parse_bw(text), Some((0.21, 0.19, 0.00145)));
        let q = qp_pairs(text);
        assert_eq!(q.len(), 2);
        assert_eq!((q[0].local_qpn, q[0].remote_qpn, q[1].local_qpn, q[1].remote_qpn), (0x11, 0x13, 0x12, 0x14));
        assert_eq!(q[0].rxe_udp_sport, rxe_udp_sport(0x11, 0x13));
    }

    #[test]
    fn short_snaplen_captures_are_read_and_ports_counted() {
        // One record: Ethernet / IPv4 (TOS CE) / UDP 0xC123 -> 4791 / BTH to QP 0x11, cut at 60 bytes.
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[15] = 0x03;
        f[34..36].copy_from_slice(&0xC123u16.to_be_bytes());
        f[36..38].copy_from_slice(&4791u16.to_be_bytes());
        f[42 + 5..42 + 8].copy_from_slice(&[0, 0, 0x11]);
        let mut pcap = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 60, 0, 0, 0, 1, 0, 0, 0];
        for v in [7u32, 500, 60, 1078] {
            pcap.extend_from_slice(&v.to_le_bytes());
        }
        pcap.extend_from_slice(&f);
        let path = std::env::temp_dir().join(format!("rxe-run-test-{}.pcap", std::process::id()));
        std::fs::write(&path, &pcap).unwrap();
        let frames = read_pcap_timed(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!((frames[0].0, frames[0].2), (Duration::new(7, 500_000), 1078));
        let seen = sports_seen(&[frames[0].1.clone()]);
        assert_eq!(
            (seen[0].sport, seen[0].dest_qps.clone(), seen[0].packets, seen[0].ce_marked),
            (0xC123, vec![0x11], 1, 1)
        );
    }

    /// The counters of the CI run where rxe's timer fired on the 6.1 kernel under emulation:
    /// every packet arrived once in order, plus the resent copies.
    fn timer_retry_run() -> Vec<(String, BTreeMap<String, u64>)> {
        let dev = |name: &str, counters: &[(&str, u64)]| {
            (name.to_string(), counters.iter().map(|(k, v)| (k.to_string(), *v)).collect())
        };
        vec![
            dev("a", &[("completer_retry_err", 3), ("rcvd_pkts", 838), ("send_err", 11), ("sent_pkts", 12838)]),
            dev("b", &[("duplicate_request", 38), ("rcvd_pkts", 12838), ("sent_pkts", 838)]),
        ]
    }

    #[test]
    fn timer_retries_are_reported_and_loss_or_reordering_are_errors() {
        let run = timer_retry_run();
        assert!(counted(&run, ERROR_COUNTERS).is_empty());
        assert_eq!(counted(&run, RETRY_COUNTERS), ["a: completer_retry_err = 3", "b: duplicate_request = 38"]);
        assert!(packets_conserved(&run[0].1, &run[1].1));
        // A gap the fabric made: the receiver NAKs it, the sender counts the NAK.
        let mut reordered = timer_retry_run();
        reordered[1].1.insert("out_of_seq_request".into(), 1);
        reordered[0].1.insert("rcvd_seq_err".into(), 1);
        assert_eq!(counted(&reordered, ERROR_COUNTERS), ["a: rcvd_seq_err = 1", "b: out_of_seq_request = 1"]);
        // A message's last packet lost (or failing its ICRC): no gap follows it, the timer
        // resends, and one packet sent was never received.
        let mut tail_lost = timer_retry_run();
        tail_lost[1].1.insert("rcvd_pkts".into(), 12837);
        assert!(counted(&tail_lost, ERROR_COUNTERS).is_empty());
        assert!(!packets_conserved(&tail_lost[0].1, &tail_lost[1].1));
    }

    #[test]
    fn table_base_is_stable_and_leaves_room() {
        let b = rxe::table_base("rxs");
        assert_eq!(b, rxe::table_base("rxs"));
        assert_eq!(b & 0xff, 0);
        assert!(b > 255);
    }
}

/// A ring AllReduce on the rxe hosts (every host, in plan order).
#[derive(Clone, Debug, Serialize, clap::Args)]
pub struct AllreduceSpec {
    /// Message size per rank, bytes (K, M, G = x1000; Ki, Mi, Gi = x1024).
    #[arg(long, default_value_t = crate::model::units::Size(1 << 20))]
    pub message: crate::model::units::Size,
    /// How many AllReduces, one after the other.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub iterations: u32,
    /// QPs per connection (QP scaling).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub qps: u32,
    /// IP traffic class: 106 = DSCP 26 + ECT(0).
    #[arg(long, default_value_t = 106)]
    pub tclass: u8,
    /// QP retransmission timeout exponent (4.096 us x 2^N; the IB field holds 0..=31).
    #[arg(long, default_value_t = 18, value_parser = clap::value_parser!(u8).range(0..=31))]
    pub qp_timeout: u8,
    /// First TCP port of the ranks' connection exchange (rank r listens on PORT + r, so the
    /// last rank's port must fit too: checked against the ranks when the run starts).
    #[arg(long, default_value_t = 19000, value_parser = clap::value_parser!(u16).range(1..))]
    pub port_base: u16,
}

/// The verbs program: `$FABRIC_VERBS_ALLREDUCE`, else next to this executable.
pub fn verbs_program() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("FABRIC_VERBS_ALLREDUCE") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let p = exe.parent().context("executable has a directory")?.join("fabric-verbs-allreduce");
    ensure!(
        p.exists(),
        "{} is missing: build it with `cc -O2 -o {} fabric-user/verbs/ring_allreduce.c -libverbs` \
         (apt-get install libibverbs-dev), or run `cargo xtask vm` / `cargo xtask setup`",
        p.display(),
        p.display()
    );
    Ok(p)
}

/// One rank's report (printed by the verbs program).
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct RankReport {
    pub rank: usize,
    pub device: String,
    pub chunk_bytes: u64,
    pub qps: u32,
    pub mtu: u32,
    pub verified: bool,
    pub tx_qpns: Vec<u32>,
    pub next_rx_qpns: Vec<u32>,
    pub iteration_ns: Vec<u64>,
    pub step_ns: Vec<u64>,
}

/// Runs the ring AllReduce and returns its result: a [`RunResult`] like `fabric run`'s, with
/// what rxe cannot report `None`, and rxe's counters added.
pub fn allreduce(state: &State, layout: &RxeLayout, spec: &AllreduceSpec) -> Result<RxeRunResult> {
    let program = verbs_program()?;
    let n = layout.hosts.len();
    ensure!(n >= 2, "a ring needs two rxe hosts");
    ensure!(
        usize::from(spec.port_base) + n - 1 <= usize::from(u16::MAX),
        "--port-base {}: rank {} would listen on port {}, beyond 65535",
        spec.port_base,
        n - 1,
        usize::from(spec.port_base) + n - 1
    );
    ensure!(layout.hosts.iter().all(|h| h.device.is_some() && h.gid_index.is_some()), "hosts without rxe devices");
    let options = allreduce_options(spec)?;
    let devices: Vec<String> = layout.hosts.iter().map(|h| h.device.clone().expect("checked")).collect();
    let baseline = Baseline::take(state, &devices)?;
    let mut children = spawn_ranks(layout, spec, &program)?;
    let reports = wait_for_ranks(layout, &mut children)?;
    let counters = baseline.since(state)?;
    Ok(allreduce_result(state, layout, spec, options, reports, counters))
}

/// The options `fabric run` would have for this AllReduce (they go into the result).
fn allreduce_options(spec: &AllreduceSpec) -> Result<crate::run::RunOptions> {
    let run_spec = crate::run::RunSpec {
        workload: Some(crate::model::workload::Collective::Allreduce),
        message: spec.message,
        iterations: spec.iterations,
        qps: spec.qps,
        dscp: spec.tclass >> 2,
        ecn: spec.tclass & 3 != 0,
        ..Default::default()
    };
    run_spec.to_options()
}

/// One verbs program per host (rank = plan order), each connected to the next host of the ring.
fn spawn_ranks(layout: &RxeLayout, spec: &AllreduceSpec, program: &Path) -> Result<Vec<Child>> {
    let n = layout.hosts.len();
    let message = spec.message.get();
    let mut children: Vec<Child> = Vec::new();
    for (r, h) in layout.hosts.iter().enumerate() {
        let next = &layout.hosts[(r + 1) % n];
        let child = command_in(h, program.to_str().context("program path")?)
            .args(["--dev", h.device.as_deref().expect("checked")])
            .args(["--gid-index", &h.gid_index.expect("checked").to_string()])
            .args(["--rank", &r.to_string(), "--ranks", &n.to_string()])
            .args(["--next-ip", &next.ipv4.to_string(), "--port-base", &spec.port_base.to_string()])
            .args(["--bytes", &message.to_string(), "--iters", &spec.iterations.to_string()])
            .args(["--qps", &spec.qps.to_string(), "--tclass", &spec.tclass.to_string()])
            .args(["--timeout", &spec.qp_timeout.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        children.push(child);
    }
    Ok(children)
}

/// Every rank's report (its last JSON line), sorted by rank; an error naming the first rank that
/// failed or did not report.
fn wait_for_ranks(layout: &RxeLayout, children: &mut [Child]) -> Result<Vec<RankReport>> {
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    // One deadline for all ranks; on any failure the others are killed (a rank left running
    // would hold its rxe device, and `rdma link delete` would wait for it).
    let deadline = Instant::now() + Duration::from_secs(180);
    for (r, child) in children.iter_mut().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
        let out = match wait_child(child, left, "a verbs AllReduce rank") {
            Ok(o) => o,
            Err(e) => {
                failures.push(format!("rank {r} ({}): {e:#}", layout.hosts[r].host));
                break;
            }
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        match stdout.lines().rev().find_map(|l| serde_json::from_str::<RankReport>(l).ok()) {
            Some(rep) if out.status.success() => reports.push(rep),
            _ => {
                let err = String::from_utf8_lossy(&out.stderr);
                failures.push(format!("rank {r} ({}): {} {stdout}{err}", layout.hosts[r].host, out.status));
                break;
            }
        }
    }
    if !failures.is_empty() {
        for c in children.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    ensure!(failures.is_empty(), "the verbs AllReduce failed:\n{}", failures.join("\n"));
    reports.sort_by_key(|r| r.rank);
    Ok(reports)
}

/// The fabric.run/2 document of a verbs AllReduce (`reports`: one per rank, by rank).
fn allreduce_result(
    state: &State,
    layout: &RxeLayout,
    spec: &AllreduceSpec,
    options: crate::run::RunOptions,
    reports: Vec<RankReport>,
    counters: RunCounters,
) -> RxeRunResult {
    let n = layout.hosts.len();
    let (rxe_errors, rxe_retries) = (counters.rxe_errors(), counters.rxe_retries());
    let rxe_counters: BTreeMap<String, BTreeMap<String, u64>> = counters.devices.into_iter().collect();
    let sent: u64 = rxe_counters.values().map(|c| c.get("sent_pkts").copied().unwrap_or(0)).sum();
    let rcvd: u64 = rxe_counters.values().map(|c| c.get("rcvd_pkts").copied().unwrap_or(0)).sum();
    let scale = state.plan.topology.time_scale.max(1);
    let chunk = reports[0].chunk_bytes;
    let bytes_needed = 2 * (n as u64 - 1) * n as u64 * chunk * spec.iterations as u64;
    let verified = reports.iter().all(|r| r.verified);
    let hash = state.plan.nodes[state.plan.rtsw_of(layout.hosts[0].node)].hash;
    RxeRunResult {
        schema: RESULTS_SCHEMA,
        endpoints: Endpoints::Rxe,
        job_id: None,
        testbed: state.plan.topology.prefix.clone(),
        options,
        placement: layout.hosts.iter().map(|h| h.host.clone()).collect(),
        hash: hash.as_str().into(),
        iterations: iteration_results(&reports, spec.iterations, scale),
        flows: last_iteration_flows(layout, &reports),
        balance: crate::run::balance(&counters.uplinks),
        uplinks: counters.uplinks,
        bytes_needed,
        bytes_delivered: if verified { bytes_needed } else { 0 },
        achieved_over_intended: None,
        congestion: counters.congestion,
        diagnosis: Vec::new(),
        te_flows: None,
        cpu_limited: None,
        late_wake_share: None,
        cpu_wait_share: None,
        host_cpu_busy: None,
        cc: CcMode::None,
        transport: fabric_roce::transport::Transport::GoBackN,
        time_scale: scale,
        hosts: Vec::new(),
        cts_bound_bytes: None,
        extra: RxeDetails {
            kernel: kernel(),
            verified,
            ranks: reports,
            rxe_counters,
            rxe_errors,
            rxe_retries,
            rxe_packets_conserved: sent == rcvd,
            pfc: PFC_NOTE,
            udp_sports_note: "rxe: one UDP source port per QP pair, 0xC000 + a fold of the two QPNs (flow label 0)",
        },
    }
}

/// Per iteration: the slowest rank's completion, and per step the slowest rank's step time.
fn iteration_results(reports: &[RankReport], iterations: u32, scale: u64) -> Vec<IterationResult> {
    (0..iterations as usize)
        .map(|i| {
            let c = reports.iter().map(|r| r.iteration_ns.get(i).copied().unwrap_or(0)).max().unwrap_or(0);
            let step_ns: Vec<u64> = (0..reports[0].step_ns.len())
                .map(|s| reports.iter().map(|r| r.step_ns[s]).max().unwrap_or(0))
                .collect();
            IterationResult { completion_ns: c, modelled_completion_ns: c as f64 / scale as f64, step_ns }
        })
        .collect()
}

/// Flows of the last iteration: every step, every rank to the next, one chunk over `qps` QPs.
fn last_iteration_flows(layout: &RxeLayout, reports: &[RankReport]) -> Vec<RxeFlow> {
    let n = layout.hosts.len();
    let mut flows = Vec::new();
    for rep in reports {
        let next = &layout.hosts[(rep.rank + 1) % n];
        let sports: Vec<u16> = rep.tx_qpns.iter().zip(&rep.next_rx_qpns).map(|(&l, &r)| rxe_udp_sport(l, r)).collect();
        for (s, &ns) in rep.step_ns.iter().enumerate() {
            flows.push(RxeFlow {
                src: layout.hosts[rep.rank].host.clone(),
                dst: next.host.clone(),
                step: s,
                bytes: rep.chunk_bytes,
                qps: rep.qps,
                udp_sports: sports.clone(),
                completion_ns: ns,
                goodput_bps: if ns > 0 { rep.chunk_bytes as f64 * 8e9 / ns as f64 } else { 0.0 },
                bytes_received: rep.chunk_bytes,
                ..Default::default()
            });
        }
    }
    flows
}

/// A flow of an rxe run: what the verbs program reports; what only our endpoints count is `None`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RxeFlow {
    pub src: String,
    pub dst: String,
    pub step: usize,
    pub bytes: u64,
    pub qps: u32,
    pub udp_sports: Vec<u16>,
    pub completion_ns: u64,
    pub goodput_bps: f64,
    pub intended_bps: Option<u64>,
    pub packets_sent: Option<u64>,
    pub retransmitted: Option<u64>,
    pub timeouts: Option<u64>,
    pub naks: Option<u64>,
    pub icrc_errors: Option<u64>,
    pub wire_errors: Option<u64>,
    pub bytes_received: u64,
    pub ce_packets: Option<u64>,
    pub cnps_sent: Option<u64>,
    pub cnps_received: Option<u64>,
    pub rate_trajectory: Vec<(u64, u64)>,
}

/// What an rxe run adds to the common result: the kernel, the ranks' own reports, and rxe's
/// hardware counters (deltas over the run) with the error counters that must stay zero.
#[derive(Clone, Debug, Serialize)]
pub struct RxeDetails {
    pub kernel: String,
    pub verified: bool,
    pub ranks: Vec<RankReport>,
    pub rxe_counters: BTreeMap<String, BTreeMap<String, u64>>,
    pub rxe_errors: Vec<String>,
    /// Counters of rxe's retransmission timer: the hosts' timing, reported.
    pub rxe_retries: Vec<String>,
    pub rxe_packets_conserved: bool,
    pub pfc: &'static str,
    pub udp_sports_note: &'static str,
}

/// The result of an rxe ring AllReduce: the same document as `fabric run` writes.
pub type RxeRunResult = RunResult<RxeFlow, RxeDetails>;

pub fn print_allreduce(r: &RxeRunResult) {
    let iters: Vec<String> = r.iterations.iter().map(|i| format!("{:.1} ms", i.completion_ns as f64 / 1e6)).collect();
    println!(
        "rxe ring AllReduce over {} ranks ({} QPs per connection): iterations {}; sums verified: {}",
        r.placement.len(),
        r.options.endpoint.qps,
        iters.join(", "),
        r.extra.verified
    );
    for u in &r.uplinks {
        println!("  uplinks of {}: {:?} (Jain {:.2})", u.rtsw, u.tx_bytes, u.jain);
    }
    println!("  rxe errors: {:?}; packets conserved: {}", r.extra.rxe_errors, r.extra.rxe_packets_conserved);
    if !r.extra.rxe_retries.is_empty() {
        let clean = r.extra.rxe_errors.is_empty() && r.extra.rxe_packets_conserved;
        println!("  rxe resends: {}{}", r.extra.rxe_retries.join(", "), if clean { RESENDS_BY_TIMER } else { "" });
    }
    println!("  note: {PFC_NOTE}");
}
