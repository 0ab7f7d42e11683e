//! `fabric-bench twin`: the packet-level twin against htsim, Broadcom's packet-level
//! simulator, on one workload measured in the same run: a 1,024-host three-tier non-blocking
//! Clos at 400 Gbit/s, lossless (PFC), ECMP, a random permutation of 1,024 flows of 2,000,000
//! bytes, every flow finished. Reports both wall times and their ratio, and the twin's packet
//! hops and events per second and peak memory. Then the twin alone at scale: a 1,024-GPU ring
//! AllReduce of 64 MiB per rank and a 24,576-GPU permutation of 1 MiB per GPU, 8 QPs and
//! E-ECMP each (targets: under 5 minutes; under 8 GiB at 24K).
//!
//! htsim is built from its sources, given by `--htsim-src` or `HTSIM_SRC`, into
//! `target/htsim` (once); without them the twin runs alone and the table says htsim was
//! skipped. The shapes differ in detail: htsim's fat tree (K = 16: 16 pods of 8 ToRs with 8
//! hosts, 1 µs links, MTU 4000, flows starting within 20 µs) and our `--scale 1k` Clos (2
//! zones of 32 racks of 16 hosts, 16 CTSWs per zone, 32 ATSWs; 1 µs links, RoCE path MTU 4096,
//! flows starting together); both are non-blocking and cross at most 6 links.
use std::{path::Path, process::Command, time::Instant};

use anyhow::{Context as _, Result, bail, ensure};
use fabric_common::config::HashMode;
use fabric_user::{
    endpoint::{CcMode, EndpointOptions, SportPolicy},
    forwarding::fabric::Scale,
    model::{placement::Placement, workload::Collective},
    sim::{
        SimOptions, SimResult,
        cli::build_fabric,
        packet::{PacketOptions, QueueModel, simulate_packet},
    },
};
use serde::Serialize;

const HOSTS: usize = 1024;
const FLOW_BYTES: u64 = 2_000_000;

#[derive(Debug, Serialize)]
pub struct TwinRun {
    pub wall_s: f64,
    pub completion_s: f64,
    pub finished: bool,
    pub events: u64,
    pub events_by_kind: Vec<(&'static str, u64)>,
    pub packet_hops: u64,
    pub events_per_s: f64,
    pub packet_hops_per_s: f64,
    pub pfc_frames: u64,
    pub retransmissions: u64,
}

#[derive(Debug, Serialize)]
pub struct HtsimRun {
    pub wall_s: f64,
    pub peak_rss_kib: i64,
    pub flows_finished: usize,
}

#[derive(Debug, Serialize)]
pub struct TwinBenchReport {
    pub hosts: usize,
    pub flow_bytes: u64,
    /// Two twin runs, one before and one after htsim's (the machine is shared).
    pub twin: Vec<TwinRun>,
    pub twin_peak_rss_kib: i64,
    pub htsim: Option<HtsimRun>,
    /// Why htsim did not run, if it did not.
    pub htsim_skipped: Option<String>,
    /// Mean twin wall time over htsim's: the target is at most 1/3.
    pub twin_over_htsim: Option<f64>,
    pub at_scale: Vec<ScaleRun>,
}

/// The twin alone on a larger case.
#[derive(Debug, Serialize)]
pub struct ScaleRun {
    pub case: String,
    pub hosts: usize,
    /// Steps of the collective, and distinct ones (each simulated once).
    pub steps: usize,
    pub distinct_steps: usize,
    pub qps_per_step: usize,
    pub run: TwinRun,
    /// This process's peak resident set after the run (a maximum over everything before too).
    pub peak_rss_kib: i64,
}

pub fn twin(htsim_src: Option<&Path>) -> Result<TwinBenchReport> {
    let first = run_twin()?;
    let (htsim, htsim_skipped) = match htsim_src {
        Some(src) => (Some(run_htsim(src)?), None),
        None => (None, Some("no htsim sources: pass --htsim-src DIR or set HTSIM_SRC".to_string())),
    };
    let second = run_twin()?;
    let twin_peak_rss_kib = peak_rss_kib(libc::RUSAGE_SELF);
    let mean = (first.wall_s + second.wall_s) / 2.0;
    // A twin run cut off at its deadline did less work than htsim's finished one: no ratio (the
    // table's `finished` column says why).
    let finished = first.finished && second.finished;
    let twin_over_htsim = htsim.as_ref().filter(|_| finished).map(|h| mean / h.wall_s);
    let at_scale = vec![
        run_at_scale(Scale::K1, Collective::Allreduce, 64 << 20)?,
        run_at_scale(Scale::K24, Collective::Permutation, 1 << 20)?,
    ];
    Ok(TwinBenchReport {
        hosts: HOSTS,
        flow_bytes: FLOW_BYTES,
        twin: vec![first, second],
        twin_peak_rss_kib,
        htsim,
        htsim_skipped,
        twin_over_htsim,
        at_scale,
    })
}

/// The case of `collective` with `message_bytes` per rank, `qps` QPs and `hash`, every host a
/// rank, PFC only, RoCE path MTU 4096, 1 µs links.
fn case(collective: Collective, message_bytes: u64, qps: u32, hash: HashMode) -> SimOptions {
    SimOptions {
        collective,
        ranks: None,
        message_bytes,
        placement: Placement::Contiguous,
        seed: 1,
        hash,
        hash_seed: None,
        endpoint: EndpointOptions {
            qps,
            sport: SportPolicy::PerQp,
            path_mtu: 4096,
            cc: CcMode::None,
            ..Default::default()
        },
    }
}

const PACKET: PacketOptions = PacketOptions {
    link_delay_ns: 1_000,
    deadline_ns: 1_000_000_000,
    seed: 1,
    memory_limit_bytes: 8 << 30,
    queues: QueueModel::Held,
};

fn run_twin() -> Result<TwinRun> {
    let mut fabric = build_fabric(None, Some(Scale::K1))?;
    ensure!(fabric.plan.hosts().count() == HOSTS, "the 1k scale has {} hosts", fabric.plan.hosts().count());
    let o = case(Collective::Permutation, FLOW_BYTES, 1, HashMode::FiveTuple);
    let t = Instant::now();
    let r = simulate_packet(&mut fabric, &o, &PACKET)?;
    twin_run(r, t.elapsed().as_secs_f64())
}

/// A larger case on the twin alone (8 QPs, E-ECMP).
fn run_at_scale(scale: Scale, collective: Collective, message_bytes: u64) -> Result<ScaleRun> {
    let mut fabric = build_fabric(None, Some(scale))?;
    let o = case(collective, message_bytes, 8, HashMode::Eecmp);
    let t = Instant::now();
    let r = simulate_packet(&mut fabric, &o, &PACKET)?;
    let wall_s = t.elapsed().as_secs_f64();
    Ok(ScaleRun {
        case: format!("{} {} {} B/rank", scale.as_str(), r.case, message_bytes),
        hosts: r.hosts,
        steps: r.steps,
        distinct_steps: r.distinct_steps,
        qps_per_step: r.qps_per_step,
        run: twin_run(r, wall_s)?,
        peak_rss_kib: peak_rss_kib(libc::RUSAGE_SELF),
    })
}

fn twin_run(r: SimResult, wall_s: f64) -> Result<TwinRun> {
    let s = r.packet.context("a packet-model result")?;
    Ok(TwinRun {
        wall_s,
        completion_s: r.completion_s,
        finished: s.finished,
        events: s.events,
        events_by_kind: s.events_by_kind.clone(),
        packet_hops: s.packet_hops,
        events_per_s: s.events as f64 / wall_s,
        packet_hops_per_s: s.packet_hops as f64 / wall_s,
        pfc_frames: s.tiers.iter().map(|t| t.pauses_sent).sum(),
        retransmissions: s.retransmissions,
    })
}

/// Builds htsim into `target/htsim` (once) and runs the workload; the wall time is the
/// simulation's alone (the permutation is generated before).
fn run_htsim(src: &Path) -> Result<HtsimRun> {
    let root = std::env::current_dir()?.join("target/htsim");
    let main = root.join("sim/datacenter/htsim_roce");
    if !main.exists() {
        ensure!(src.join("sim/datacenter").is_dir(), "{}: not htsim's sources (no sim/datacenter)", src.display());
        std::fs::create_dir_all("target")?;
        // What a failed or interrupted build left: `cp -r` would copy into it, not over it.
        if root.exists() {
            std::fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
        }
        run(Command::new("cp").arg("-r").arg(src).arg(&root))?;
        run(Command::new("make").arg("-C").arg(root.join("sim")).args(["-j2", "libhtsim.a"]))?;
        run(Command::new("make").arg("-C").arg(root.join("sim/datacenter")).args(["-j2", "htsim_roce"]))?;
    }
    let cm = root.join("perm.cm");
    let generator = root.join("sim/datacenter/connection_matrices/gen_permutation.py");
    let (n, bytes) = (HOSTS.to_string(), FLOW_BYTES.to_string());
    run(Command::new("python3").arg(&generator).arg(&cm).args([&n, &n, &bytes, "0", "1"]))?;
    let log = root.join("htsim.log");
    let t = Instant::now();
    // htsim writes files of its own (an id map) into its working directory: keep them there.
    let stderr_path = root.join("htsim.stderr");
    let stderr = std::fs::File::create(&stderr_path).with_context(|| format!("creating {}", stderr_path.display()))?;
    let mut child = Command::new(&main)
        .current_dir(&root)
        .args(["-nodes", &n, "-tm"])
        .arg(&cm)
        .args(["-strat", "ecmp_host", "-paths", "64", "-q", "100", "-queue_type", "lossless_input"])
        .args(["-end", "100000", "-linkspeed", "400000", "-mtu", "4000", "-o"])
        .arg(&log)
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("running {}", main.display()))?;
    // Read whole before the wait (a full pipe would stall htsim), and whatever the bytes: an
    // error here must not leave the child unwaited.
    let mut stdout = Vec::new();
    let read = child.stdout.take().map(|mut out| std::io::Read::read_to_end(&mut out, &mut stdout));
    let (status, peak_rss_kib) = wait_with_peak_rss(child.id())?;
    read.context("htsim's stdout")?.context("reading htsim's stdout")?;
    let stdout = String::from_utf8_lossy(&stdout);
    let wall_s = t.elapsed().as_secs_f64();
    if !status.success() {
        let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        bail!("htsim failed ({status}): {err}");
    }
    let flows_finished = stdout.lines().filter(|l| l.contains(" finished at ")).count();
    ensure!(flows_finished == HOSTS, "htsim finished {flows_finished} of {HOSTS} flows");
    Ok(HtsimRun { wall_s, peak_rss_kib, flows_finished })
}

/// Waits for child `pid` and returns its exit status and its own peak RSS (KiB): `wait4`'s
/// usage is that child's alone, where `getrusage(RUSAGE_CHILDREN)` is the largest of every child
/// waited for (the compiler that built htsim, the permutation's generator).
fn wait_with_peak_rss(pid: u32) -> Result<(std::process::ExitStatus, i64)> {
    use std::os::unix::process::ExitStatusExt as _;
    let mut status: libc::c_int = 0;
    // SAFETY: zeroed is a valid rusage (plain integers), which wait4 only writes into.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to a status word and a rusage struct, for a child of this process
    // that nothing else waits for (the `Child` handle is dropped without waiting).
    let reaped = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    if reaped < 0 {
        return Err(std::io::Error::last_os_error()).context("waiting for htsim");
    }
    Ok((std::process::ExitStatus::from_raw(status), usage.ru_maxrss))
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// The peak resident set of this process or of its waited-for children, KiB.
fn peak_rss_kib(who: libc::c_int) -> i64 {
    // SAFETY: getrusage writes only into the struct we pass, which is zero-initialised.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage struct and a valid `who`.
    unsafe { libc::getrusage(who, &mut usage) };
    usage.ru_maxrss
}

pub fn print_twin(r: &TwinBenchReport) {
    println!("{} hosts, permutation of {} B flows, 400 Gbit/s, PFC, ECMP", r.hosts, r.flow_bytes);
    println!(
        "{:<10} {:>9} {:>14} {:>12} {:>14} {:>16} {:>10}",
        "run", "wall (s)", "completion (s)", "events", "events/s", "packet hops/s", "finished"
    );
    for (i, t) in r.twin.iter().enumerate() {
        println!(
            "{:<10} {:>9.2} {:>14.6} {:>12} {:>14.0} {:>16.0} {:>10}",
            format!("twin #{}", i + 1),
            t.wall_s,
            t.completion_s,
            t.events,
            t.events_per_s,
            t.packet_hops_per_s,
            t.finished
        );
    }
    println!("twin peak memory: {} MiB", r.twin_peak_rss_kib / 1024);
    match (&r.htsim, &r.htsim_skipped) {
        (Some(h), _) => {
            println!(
                "htsim: {:.2} s wall, {} MiB peak, {} flows finished",
                h.wall_s,
                h.peak_rss_kib / 1024,
                h.flows_finished
            );
            match r.twin_over_htsim {
                Some(ratio) => println!("twin / htsim wall time: {ratio:.3} (target: at most 0.333)"),
                None => println!("twin / htsim wall time: none, the twin did not finish the permutation"),
            }
        }
        (None, Some(why)) => println!("htsim: skipped ({why})"),
        (None, None) => {}
    }
    println!("the twin at scale (distinct steps simulated once):");
    for s in &r.at_scale {
        println!(
            "  {}: {} hosts, {} QPs per step, {} steps ({} distinct): {:.2} s wall, {:.0} packet hops/s, \
             {} MiB peak, finished {}",
            s.case,
            s.hosts,
            s.qps_per_step,
            s.steps,
            s.distinct_steps,
            s.run.wall_s,
            s.run.packet_hops_per_s,
            s.peak_rss_kib / 1024,
            s.run.finished
        );
    }
}
