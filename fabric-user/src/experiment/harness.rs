//! The machinery every experiment shares: options, the context that builds testbeds and
//! calibrates the time scale, cases, metrics, verdicts and the report type.
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::Serialize;

pub use super::case::{Better, Case, mean};
use crate::{
    model::topology::Topology,
    run::{RunOptions, RunResult},
    state::State,
    testbed,
    testbed::DownOnDrop,
};

/// One scenario of the registry.
pub struct Scenario {
    pub name: &'static str,
    /// One line for `fabric experiment list`.
    pub summary: &'static str,
    /// What the paper says (from the published record), quoted in the report.
    pub paper: &'static str,
    pub run: fn(&Ctx) -> Result<Outcome>,
}

/// How to run a scenario.
#[derive(Clone, Debug)]
pub struct Options {
    /// Bigger messages and more seeds (what users run); false: the CI variant.
    pub full: bool,
    /// Seeds (default: 2 for the CI variant, 5 for --full).
    pub seeds: Option<u32>,
    /// Results go to `out/NAME/`.
    pub out: PathBuf,
    /// Testbed prefixes start with this (1..=5 chars); default `x` + the pid's last three digits.
    pub prefix: Option<String>,
    /// Print each run's one-line summary.
    pub verbose: bool,
    /// Time scale of the ECMP and placement scenarios (default: calibrated).
    pub time_scale: Option<u64>,
    /// A negative control (tests): runs asking for one mode secretly get another.
    pub control: Option<Control>,
    /// Run on the packet-level twin instead of the testbed (`--model packet`).
    pub twin: Option<TwinModel>,
}

/// How the twin runs an experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TwinModel {
    /// A synthetic fabric (default: the scenario's own testbed topology).
    pub scale: Option<crate::forwarding::fabric::Scale>,
}

impl TwinModel {
    pub fn describe(&self) -> String {
        match self.scale {
            Some(s) => format!(
                "packet-level twin, --scale {} ({} hosts)",
                s.as_str(),
                crate::model::plan::Plan::new(&s.topology()).hosts().count()
            ),
            None => "packet-level twin, the scenario's testbed topology".into(),
        }
    }

    /// The fabric of `topo` (the scenario's), or of `--scale` with `adapt` applied to it.
    pub fn fabric(&self, topo: Topology, adapt: impl Fn(&mut Topology)) -> crate::forwarding::fabric::SimFabric {
        let topo = match self.scale {
            Some(s) => {
                let mut t = s.topology();
                adapt(&mut t);
                t
            }
            None => topo,
        };
        crate::forwarding::fabric::SimFabric::from_controller(
            &crate::model::plan::Plan::new(&topo),
            &Default::default(),
        )
    }
}

/// A negative control: the scenario runs unchanged, except that every run asking for `from` is
/// given `to`. The cases keep their names, so a verdict that still matches could not tell the
/// modes apart: a control shows that the verdict can come out the other way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Hash { from: fabric_common::config::HashMode, to: fabric_common::config::HashMode },
    Cc { from: crate::endpoint::CcMode, to: crate::endpoint::CcMode },
}

impl Control {
    pub fn describe(&self) -> String {
        match self {
            Control::Hash { from, to } => {
                format!("every run asking for hash {} got {} (the cases keep their names)", from.as_str(), to.as_str())
            }
            Control::Cc { from, to } => {
                format!("every run asking for --cc {from:?} got {to:?} (the cases keep their names)")
            }
        }
    }

    /// The hash mode a run asking for `mode` gets under this control (runs that do not go
    /// through [`Ctx::run`], e.g. several jobs at once).
    pub fn hash_for(&self, mode: fabric_common::config::HashMode) -> fabric_common::config::HashMode {
        match *self {
            Control::Hash { from, to } if mode == from => to,
            _ => mode,
        }
    }

    fn apply(&self, o: &mut RunOptions) {
        match *self {
            Control::Hash { from, to } if o.hash == Some(from) => o.hash = Some(to),
            Control::Cc { from, to } if o.endpoint.cc == from => o.endpoint.cc = to,
            _ => {}
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            full: false,
            seeds: None,
            out: PathBuf::from("results"),
            prefix: None,
            verbose: false,
            time_scale: None,
            control: None,
            twin: None,
        }
    }
}

/// What a scenario gets: its variant, seeds, and a source of unique testbed prefixes.
pub struct Ctx {
    pub full: bool,
    pub seeds: Vec<u64>,
    pub verbose: bool,
    time_scale: Option<u64>,
    pub control: Option<Control>,
    /// `--model packet`: the scenario runs its cases on the twin.
    pub twin: Option<TwinModel>,
    prefix_base: String,
    next: std::cell::Cell<u32>,
    /// Runs that failed once and were repeated (see [`Ctx::run`]), for the report's notes.
    pub repeated: std::cell::RefCell<Vec<String>>,
}

impl Ctx {
    /// The time scale for the ECMP and placement scenarios: `--time-scale` if given, else
    /// calibrated once per process (see [`SLOW_TIME_SCALE`]).
    pub fn time_scale(&self) -> Result<Calibration> {
        if let Some(s) = self.time_scale {
            return Ok(Calibration { time_scale: s, trials: vec![] });
        }
        let mut cal = CALIBRATION.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cal.as_ref() {
            return Ok(c.clone());
        }
        let mut trials = Vec::new();
        let mut scale = SLOW_TIME_SCALE;
        loop {
            let mut topo = Topology::default_topology();
            topo.time_scale = scale;
            let achieved = self.with_testbed(topo, |state| {
                let mut o = base_options(crate::model::workload::Collective::Allreduce, 8, 1 << 20);
                o.hash = Some(fabric_common::config::HashMode::Eecmp);
                let r = self.run(state, &format!("calibration at time scale {scale}"), &o)?;
                r.achieved_over_intended.context("our endpoints report their achieved rate")
            })?;
            trials.push((scale, achieved));
            if achieved >= CALIBRATION_TARGET || scale >= MAX_CALIBRATION_FACTOR * SLOW_TIME_SCALE {
                break;
            }
            scale *= 2;
        }
        let c = Calibration { time_scale: scale, trials };
        *cal = Some(c.clone());
        Ok(c)
    }

    /// The congestion scenarios' time scale (incast, pfc-storm): `--time-scale`, else
    /// [`CONGESTION_TIME_SCALE`].
    pub fn congestion_time_scale(&self) -> u64 {
        self.time_scale.unwrap_or(CONGESTION_TIME_SCALE)
    }

    pub fn new(opts: &Options) -> Self {
        let seeds = opts.seeds.unwrap_or(if opts.full { 5 } else { 2 }).max(1);
        let prefix_base = opts.prefix.clone().unwrap_or_else(|| format!("x{}", std::process::id() % 1000));
        Ctx {
            full: opts.full,
            seeds: (1..=u64::from(seeds)).collect(),
            verbose: opts.verbose,
            time_scale: opts.time_scale,
            control: opts.control,
            twin: opts.twin,
            prefix_base,
            next: std::cell::Cell::new(0),
            repeated: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// CI or full.
    pub fn variant(&self) -> &'static str {
        if self.full { "full" } else { "ci" }
    }

    /// A prefix no other testbed of this process uses (and, by the pid, of other processes).
    pub fn fresh_prefix(&self) -> String {
        let n = self.next.get();
        self.next.set(n + 1);
        let tag = (b'a' + (n % 26) as u8) as char;
        format!("{}{tag}", self.prefix_base)
    }

    /// `CI` or `full` value.
    pub fn pick<T>(&self, ci: T, full: T) -> T {
        if self.full { full } else { ci }
    }

    /// Brings up `topo` under a fresh prefix and hands it to `f`; the testbed is torn down
    /// afterwards, also on error or panic.
    pub fn with_testbed<T>(&self, mut topo: Topology, f: impl FnOnce(&State) -> Result<T>) -> Result<T> {
        topo.prefix = self.fresh_prefix();
        let topo = Topology::parse(&toml::to_string(&topo)?, "experiment topology")?;
        let prefix = topo.prefix.clone();
        // A leftover of a crashed earlier run under the same prefix would make `up` refuse.
        let _ = testbed::down(&prefix);
        let _guard = DownOnDrop::owned(prefix.clone());
        testbed::interrupt::guarded_step(|| testbed::up(&topo, true))
            .with_context(|| format!("bringing up the testbed of the experiment ({prefix})"))?;
        let state = State::load(&prefix)?;
        f(&state)
    }

    /// Runs a collective, quietly; prints a summary line when verbose. A run whose endpoints
    /// fail (on a loaded 2-core machine: a host thread starved long enough for its QP to give
    /// up) is repeated once, and the report says so; a second failure is the experiment's error.
    /// Runs under a fault, whose delivery is what a verdict judges, go through [`FaultRuns`]
    /// and [`Ctx::run_once`] instead.
    pub fn run(&self, state: &State, label: &str, opts: &RunOptions) -> Result<RunResult> {
        self.retry(label, || Ok(self.run_once(state, label, opts)))
    }

    /// Makes `attempt` (a run: the outer error is a setup error, returned at once, the inner the
    /// run's) once more if the run failed, and notes the first failure in the report.
    pub fn retry<T>(&self, label: &str, mut attempt: impl FnMut() -> Result<Result<T>>) -> Result<T> {
        match attempt()? {
            Ok(t) => Ok(t),
            Err(e) => {
                let first = format!("run {label:?} failed once and was repeated: {e:#}");
                eprintln!("  {first}");
                self.repeated.borrow_mut().push(first);
                attempt()?.with_context(|| format!("run {label:?}, repeated"))
            }
        }
    }

    /// Runs a collective once, quietly; prints a summary line when verbose.
    pub fn run_once(&self, state: &State, label: &str, opts: &RunOptions) -> Result<RunResult> {
        let mut opts = opts.clone();
        if let Some(c) = &self.control {
            c.apply(&mut opts);
        }
        let r = crate::run::run(state, &opts, true)?;
        if self.verbose {
            eprintln!(
                "  {label}: {:.1} ms wall, max/mean {:.2}, Jain {:.3}, PFC {} , ECN {}",
                completion_ms(&r),
                r.balance.mean_max_over_mean,
                r.balance.mean_jain,
                r.congestion.pfc_xoff_sent + r.congestion.pfc_refresh_sent,
                r.congestion.ecn_marked
            );
        }
        Ok(r)
    }
}

/// The runs of a scenario under injected faults, whose delivery a fact judges
/// ([`FaultRuns::delivery_fact`]). A run that fails is no error of the experiment but a
/// measurement: it is tried once more with its fault injected again (a starved host thread on
/// a loaded 2-core machine can make a QP give up), and what failed is kept.
#[derive(Debug, Default)]
pub struct FaultRuns {
    /// Runs attempted.
    pub runs: usize,
    /// Runs whose first attempt failed and whose second finished: label and the first error.
    pub repeated: Vec<String>,
    /// Runs whose both attempts failed: label and the last error.
    pub failed: Vec<String>,
}

impl FaultRuns {
    /// Attempts `run` (at most twice) for the run `label`. `run`'s outer error is the setup's
    /// (injecting or clearing the fault), the experiment's error; its inner one is the run's
    /// failure, a measurement. `None` when both attempts failed.
    pub fn attempt<T>(&mut self, label: &str, mut run: impl FnMut() -> Result<Result<T>>) -> Result<Option<T>> {
        self.runs += 1;
        let first = match run()? {
            Ok(t) => return Ok(Some(t)),
            Err(e) => format!("{e:#}"),
        };
        eprintln!("  run {label:?} under its fault failed once and is repeated with the fault again: {first}");
        match run()? {
            Ok(t) => {
                self.repeated.push(format!("{label}: {first}"));
                Ok(Some(t))
            }
            Err(e) => {
                self.failed.push(format!("{label}: {e:#}"));
                Ok(None)
            }
        }
    }

    /// The report's notes: every run under a fault that failed once or twice, and its error.
    pub fn notes(&self) -> Vec<String> {
        let once = self.repeated.iter().map(|r| format!("run under a fault failed once and was repeated: {r}"));
        once.chain(self.failed.iter().map(|r| format!("run under a fault failed twice (not measured): {r}"))).collect()
    }

    /// "Every run under a fault delivers every byte": does not match when a run failed twice or
    /// delivered less than it needed (`delivered` and `needed` are over the runs that finished);
    /// inconclusive when every run delivered but one needed its second attempt (the first
    /// failure may have been the host's or the fabric's); matches otherwise.
    pub fn delivery_fact(
        &self,
        key: &'static str,
        claim: &str,
        delivered: u64,
        needed: u64,
    ) -> super::verdict::Verdict {
        let measured = format!("the runs that finished delivered {delivered} of {needed} bytes");
        self.judged(super::verdict::Verdict::fact(key, claim, measured, delivered == needed && needed > 0))
    }

    /// `fact`, a property of the runs that finished, judged with the runs that did not: it does
    /// not match when a run failed twice (named in its evidence), and a match is inconclusive
    /// when a run needed its second attempt.
    pub fn judged(&self, mut fact: super::verdict::Verdict) -> super::verdict::Verdict {
        use super::verdict::Decision;
        if !self.failed.is_empty() {
            fact.measured += &format!(
                "; {} of {} runs failed twice and finished nothing: {}",
                self.failed.len(),
                self.runs,
                self.failed.join("; ")
            );
            fact.direction = Decision::DoesNotMatch;
        } else if fact.direction == Decision::Matches && !self.repeated.is_empty() {
            fact.direction = Decision::Inconclusive;
            fact.reason = Some(format!(
                "{} run(s) failed once and delivered everything when repeated with the fault injected again (the \
                 host, a starved thread, or the fabric may have failed it): {}",
                self.repeated.len(),
                self.repeated.join("; ")
            ));
        }
        fact
    }
}

/// Mean completion time of a run's iterations, wall ms; NaN (not measured) with none.
pub fn completion_ms(r: &RunResult) -> f64 {
    mean_ms(&r.iterations.iter().map(|i| i.completion_ns).collect::<Vec<_>>())
}

/// The mean of `ns` in ms; NaN (not measured) when empty, never 0.
pub fn mean_ms(ns: &[u64]) -> f64 {
    if ns.is_empty() { f64::NAN } else { ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1e6 }
}

/// Mean completion time in the modelled network's time, µs.
pub fn modelled_us(r: &RunResult) -> f64 {
    completion_ms(r) * 1e3 / r.time_scale.max(1) as f64
}

/// A measured quantity, one value per case and seed.
#[derive(Clone, Debug, Serialize)]
pub struct Metric {
    pub key: &'static str,
    pub label: &'static str,
    pub unit: &'static str,
    pub better: Better,
    /// Draw a chart of it.
    pub chart: bool,
}

impl Metric {
    pub const fn new(key: &'static str, label: &'static str, unit: &'static str, better: Better, chart: bool) -> Self {
        Metric { key, label, unit, better, chart }
    }
}

/// Everything a scenario produced.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// What was run: topology, workload, sizes.
    pub setup: Vec<String>,
    pub metrics: Vec<Metric>,
    pub cases: Vec<Case>,
    pub verdicts: Vec<super::verdict::Verdict>,
    /// Anything a reader should know (caveats, parameter choices).
    pub notes: Vec<String>,
    /// Extra tables: (title, header, rows).
    pub tables: Vec<Table>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Outcome {
    pub fn case(&self, key: &str) -> &Case {
        super::case::find(&self.cases, key)
    }
}

/// What `fabric experiment` writes and returns.
#[derive(Debug, Serialize)]
pub struct ExperimentReport {
    pub schema: &'static str,
    pub name: String,
    pub summary: String,
    pub paper: String,
    pub variant: String,
    pub seeds: Vec<u64>,
    /// A negative control this report ran under (never in a user's run).
    pub control: Option<String>,
    pub wall_seconds: f64,
    pub outcome: Outcome,
    /// The files written (relative to the results directory).
    pub files: Vec<String>,
    /// The command that runs this report's experiment again, with every option that shaped it.
    pub rerun: String,
    /// Its times are the twin's modelled time (`--model packet`, and cc-at-400g always), not
    /// wall time on this machine.
    pub modelled_time: bool,
}

pub const SCHEMA: &str = "fabric.experiment/1";

impl Options {
    /// `fabric experiment NAME` with the options of this run that change what it measures (not
    /// `--out`, `--prefix` or `--verbose`).
    pub fn rerun(&self, name: &str) -> String {
        let mut cmd = format!("fabric experiment {name}");
        if self.full {
            cmd += " --full";
        }
        if let Some(n) = self.seeds {
            cmd += &format!(" --seeds {n}");
        }
        if let Some(t) = self.time_scale {
            cmd += &format!(" --time-scale {t}");
        }
        if let Some(m) = self.twin {
            cmd += " --model packet";
            if let Some(s) = m.scale {
                cmd += &format!(" --scale {}", s.as_str());
            }
        }
        cmd
    }
}

/// The time scale of the congestion scenarios: 400 Gbit/s modelled = 25 Mbit/s of wall rate. At
/// the topology's 4000 a line-rate 4-to-1 incast kept a 2-core machine's endpoints late for 20
/// to 80% of their timed sleeps (CPU-bound, so no timing verdict could match); at 16000, 1 to 2%.
pub const CONGESTION_TIME_SCALE: u64 = 16_000;

/// The first time scale tried for the scenarios about ECMP and placement: 400 Gbit/s modelled =
/// 20 Mbit/s of wall rate. At the default 4000 (100 Mbit/s) eight endpoints on a 2-core machine
/// reach only about a third of their rate, so every case runs at the CPU's pace and collisions
/// never congest the modelled links. [`Ctx::time_scale`] starts here and doubles until the
/// endpoints keep [`CALIBRATION_TARGET`] of their rate on an uncongested ring.
pub const SLOW_TIME_SCALE: u64 = 20_000;
/// Achieved over intended rate the endpoints must keep at the chosen time scale.
pub const CALIBRATION_TARGET: f64 = 0.7;

/// Calibration doubles the time scale up to this many times [`SLOW_TIME_SCALE`].
const MAX_CALIBRATION_FACTOR: u64 = 16;

/// The calibrated time scale of this process and the trials that chose it.
static CALIBRATION: std::sync::Mutex<Option<Calibration>> = std::sync::Mutex::new(None);

#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    pub time_scale: u64,
    /// (time scale, achieved/intended rate) of each trial.
    pub trials: Vec<(u64, f64)>,
}

impl Calibration {
    pub fn describe(&self) -> String {
        let rate = format!(
            "Time scale {} ({:.0} Mbit/s of wall rate per 400G link)",
            self.time_scale,
            400e3 / self.time_scale as f64
        );
        let t: Vec<String> = self.trials.iter().map(|(s, a)| format!("{a:.2} at {s}")).collect();
        match self.trials.last() {
            None => format!("{rate}, as --time-scale set it: not calibrated, so nothing here says the CPU kept pace."),
            Some(&(_, achieved)) if achieved >= CALIBRATION_TARGET => format!(
                "{rate}, calibrated on this machine: the smallest scale from {SLOW_TIME_SCALE} (doubling) at which an \
                 uncongested 8-rank ring keeps {CALIBRATION_TARGET} of its rate (achieved/intended: {}). Below that \
                 the CPU, not the fabric, sets the pace.",
                t.join(", ")
            ),
            Some(_) => format!(
                "{rate}: calibration stopped at its largest scale ({}x {SLOW_TIME_SCALE}) without an uncongested \
                 8-rank ring keeping {CALIBRATION_TARGET} of its rate (achieved/intended: {}): the CPU, not the \
                 fabric, may set the pace of every run here.",
                MAX_CALIBRATION_FACTOR,
                t.join(", ")
            ),
        }
    }
}

/// The size of a ring AllReduce a scenario runs.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub ranks: usize,
    pub message: u64,
    pub iterations: u32,
}

/// A ring AllReduce of `sizes` with fragmented placement (every rack's ring hop crosses the
/// spine), a fixed source port, and `hash` with `qps` QPs seeded by `seed`.
pub fn fragmented_ring(sizes: &Sizes, hash: fabric_common::config::HashMode, qps: u32, seed: u64) -> RunOptions {
    let mut o = base_options(crate::model::workload::Collective::Allreduce, sizes.ranks, sizes.message);
    o.iterations = sizes.iterations;
    o.placement = crate::model::placement::Placement::Fragmented;
    o.hash = Some(hash);
    o.hash_seed = Some(seed as u32);
    o.endpoint.qps = qps;
    o.endpoint.sport = crate::endpoint::SportPolicy::Fixed;
    o
}

/// A run with the defaults of `fabric run` (endpoint rate: the host link's modelled rate).
pub fn base_options(collective: crate::model::workload::Collective, ranks: usize, message_bytes: u64) -> RunOptions {
    RunOptions {
        collective,
        ranks: Some(ranks),
        message_bytes,
        iterations: 1,
        placement: crate::model::placement::Placement::Contiguous,
        hash: None,
        hash_seed: None,
        seed: 1,
        endpoint: crate::endpoint::EndpointOptions::default(),
    }
}

/// A shipped topology file (`testbed/FILE`) or the embedded default.
pub fn shipped_topology(file: Option<&str>) -> Result<Topology> {
    match file {
        None => Ok(Topology::default_topology()),
        Some(f) => {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed").join(f);
            if path.exists() {
                Topology::load(Some(&path))
            } else {
                // Installed elsewhere: the file relative to the working directory.
                Topology::load(Some(&Path::new("testbed").join(f)))
            }
        }
    }
}

/// The switch agents' sampled queue-depth histograms (log2 buckets), to find the deepest queue of
/// one run: the testbed's own maximum only ever grows.
pub struct DepthSnapshot(std::collections::BTreeMap<(String, String, usize), Vec<u64>>);

impl DepthSnapshot {
    pub fn read(state: &State) -> Self {
        let mut m = std::collections::BTreeMap::new();
        for a in crate::agent::read_telemetry(&state.plan.topology.prefix) {
            for h in a.depth_histograms {
                m.insert((a.node.clone(), h.ifname, h.class), h.buckets);
            }
        }
        DepthSnapshot(m)
    }

    /// The deepest sampled queue between `before` and `self`, bytes: the upper end of the highest
    /// log2 bucket that gained samples (bucket k holds depths in [2^(k-1), 2^k)).
    pub fn max_since(&self, before: &DepthSnapshot) -> u64 {
        self.max_since_where(before, |_, _| true)
    }

    /// [`Self::max_since`] on one switch port (every class).
    pub fn max_since_on(&self, before: &DepthSnapshot, node: &str, ifname: &str) -> u64 {
        self.max_since_where(before, |n, i| n == node && i == ifname)
    }

    fn max_since_where(&self, before: &DepthSnapshot, on: impl Fn(&str, &str) -> bool) -> u64 {
        let mut top = 0;
        for (k, after) in self.0.iter().filter(|(k, _)| on(&k.0, &k.1)) {
            let old = before.0.get(k);
            for (b, &n) in after.iter().enumerate() {
                let was = old.and_then(|o| o.get(b)).copied().unwrap_or(0);
                if n > was {
                    top = top.max(b);
                }
            }
        }
        if top == 0 { 0 } else { 1u64 << top }
    }
}

/// The share of RTSW `rtsw`'s uplink bytes in `r` that went over its port `port` (NaN if it
/// sent nothing).
pub fn uplink_share(r: &RunResult, rtsw: &str, port: &str) -> f64 {
    let Some(u) = r.uplinks.iter().find(|u| u.rtsw == rtsw) else { return f64::NAN };
    let total: u64 = u.tx_bytes.iter().map(|t| t.1).sum();
    let on = u.tx_bytes.iter().find(|t| t.0 == port).map_or(0, |t| t.1);
    if total == 0 { f64::NAN } else { on as f64 / total as f64 }
}

/// The uplink of RTSW `rtsw` that carried the most bytes in `r`.
pub fn busiest_uplink(r: &RunResult, rtsw: &str) -> Option<String> {
    let u = r.uplinks.iter().find(|u| u.rtsw == rtsw)?;
    u.tx_bytes.iter().filter(|t| t.1 > 0).max_by_key(|t| t.1).map(|t| t.0.clone())
}

/// Every drop of every switch port so far, all reasons (malformed frames, no route, full
/// queues): a run's difference says whether anything was lost inside the fabric.
pub fn switch_drops(state: &State) -> Result<u64> {
    let r = crate::telemetry::stats::collect(state)?;
    Ok(r.switches.iter().flat_map(|s| &s.ports).flat_map(|p| p.drops.values()).sum())
}

/// The upper end of the log2 bucket `bytes` falls in (as [`DepthSnapshot`] reports depths).
pub fn log2_bucket_top(bytes: u64) -> u64 {
    if bytes == 0 { 0 } else { 1u64 << (64 - bytes.leading_zeros()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rerun_command_carries_every_option_that_shapes_the_report() {
        let mut o = Options {
            full: false,
            seeds: None,
            out: "results".into(),
            prefix: Some("q".into()),
            verbose: true,
            time_scale: None,
            control: None,
            twin: None,
        };
        assert_eq!(o.rerun("incast"), "fabric experiment incast");
        o.full = true;
        o.seeds = Some(3);
        o.time_scale = Some(8000);
        o.twin = Some(TwinModel { scale: Some(crate::forwarding::fabric::Scale::K4) });
        assert_eq!(
            o.rerun("incast"),
            "fabric experiment incast --full --seeds 3 --time-scale 8000 --model packet --scale 4k"
        );
    }

    /// A run without a fault that fails once is made again and noted; twice, or a setup error,
    /// is the experiment's error.
    #[test]
    fn a_failed_run_is_repeated_once_and_noted() {
        let o = Options {
            full: false,
            seeds: None,
            out: "results".into(),
            prefix: Some("q".into()),
            verbose: false,
            time_scale: None,
            control: None,
            twin: None,
        };
        let ctx = Ctx::new(&o);
        let mut tries = 0;
        assert_eq!(
            ctx.retry("fine", || {
                tries += 1;
                Ok(Ok(1))
            })
            .unwrap(),
            1
        );
        assert_eq!((tries, ctx.repeated.borrow().len()), (1, 0));
        tries = 0;
        let second = ctx.retry("flaky", || {
            tries += 1;
            Ok(if tries == 1 { Err(anyhow::anyhow!("QP gave up")) } else { Ok(2) })
        });
        assert_eq!((second.unwrap(), tries), (2, 2));
        assert_eq!(*ctx.repeated.borrow(), ["run \"flaky\" failed once and was repeated: QP gave up"]);
        tries = 0;
        let twice = ctx.retry("broken", || -> Result<Result<u32>> {
            tries += 1;
            Ok(Err(anyhow::anyhow!("QP gave up again")))
        });
        assert_eq!(tries, 2);
        assert!(format!("{:#}", twice.unwrap_err()).starts_with("run \"broken\", repeated: QP gave up again"));
        tries = 0;
        let setup = ctx.retry("setup", || -> Result<Result<u32>> {
            tries += 1;
            Err(anyhow::anyhow!("no testbed"))
        });
        assert_eq!((format!("{:#}", setup.unwrap_err()), tries), ("no testbed".to_string(), 1));
        assert_eq!(ctx.repeated.borrow().len(), 2, "the flaky and the broken runs are noted");
    }

    /// A fault run that fails is a measurement: once, the fact is inconclusive, naming it;
    /// twice, it does not match; a setup error stops the experiment.
    #[test]
    fn a_failed_fault_run_is_measured_not_an_error() {
        use crate::experiment::verdict::Decision;
        let fact = |f: &FaultRuns, delivered| f.delivery_fact("keeps-delivering", "claim", delivered, 100);
        let mut f = FaultRuns::default();
        assert_eq!(f.attempt("a", || Ok(Ok(1))).unwrap(), Some(1));
        assert_eq!(fact(&f, 100).direction, Decision::Matches);
        assert_eq!(fact(&f, 99).direction, Decision::DoesNotMatch);
        let mut tries = 0;
        let once = f.attempt("b", || {
            tries += 1;
            Ok(if tries == 1 { Err(anyhow::anyhow!("QP gave up")) } else { Ok(2) })
        });
        assert_eq!(once.unwrap(), Some(2));
        let v = fact(&f, 100);
        assert_eq!(v.direction, Decision::Inconclusive);
        assert!(v.evidence().contains("b: QP gave up"), "{}", v.evidence());
        let twice = f.attempt("c", || Ok(Err::<u32, _>(anyhow::anyhow!("timed out"))));
        assert_eq!(twice.unwrap(), None);
        let v = fact(&f, 100);
        assert_eq!(v.direction, Decision::DoesNotMatch);
        assert!(
            v.measured.contains("1 of 3 runs failed twice") && v.measured.contains("c: timed out"),
            "{}",
            v.measured
        );
        assert!(f.attempt("d", || Err::<Result<u32>, _>(anyhow::anyhow!("no such link"))).is_err());
    }

    #[test]
    fn a_calibration_says_how_its_scale_was_chosen() {
        let given = Calibration { time_scale: 8000, trials: vec![] }.describe();
        assert!(given.contains("as --time-scale set it: not calibrated"), "{given}");
        let kept = Calibration { time_scale: 40_000, trials: vec![(20_000, 0.5), (40_000, 0.8)] }.describe();
        assert!(kept.contains("calibrated on this machine") && kept.contains("0.50 at 20000, 0.80 at 40000"), "{kept}");
        let capped = Calibration { time_scale: 320_000, trials: vec![(160_000, 0.3), (320_000, 0.4)] }.describe();
        assert!(
            capped.contains("calibration stopped at its largest scale") && !capped.contains("calibrated on"),
            "{capped}"
        );
    }
}
