//! Job-attributed telemetry: every run is a job with an id; its record joins the collective's
//! completion times (per step) with what the network did over the job's lifetime — per-uplink
//! load per step, and per port and class the ECN marks, pauses, paused time, drops — plus the
//! endpoints' retransmissions, and ends in a short diagnosis naming where to look.
//! `fabric report JOB` prints it; records live in `results/jobs/JOB.json` (they outlive the
//! testbed).
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use serde::{Deserialize, Serialize};

use crate::{
    model::fault::{FaultEvent, FaultKind, during},
    model::plan::Plan,
    run::result::RunResult,
    telemetry::stats::{StatsReport, UplinkLoad},
};

pub const JOB_SCHEMA: &str = "fabric.job/1";
/// The schema of a jobs run's summary (`run::jobs::shared::JobsSummary`), here so that a job
/// record's loader can name it.
pub const JOBS_SCHEMA: &str = "fabric.jobs/1";

/// Where job records are kept.
pub fn jobs_dir() -> PathBuf {
    PathBuf::from("results/jobs")
}

/// What a job did to one switch port (deltas over the job's lifetime).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PortDelta {
    pub switch: String,
    pub port: String,
    pub tx_bytes: u64,
    pub ecn_marked: u64,
    /// Frames the switch dropped at this port for any reason but a lossy link.
    pub drops: u64,
    /// Frames a degraded link lost (`fabric link degrade --loss`): not congestion. The XDP
    /// switch counts them at the port they came in on, the twin at the port that sent them.
    #[serde(default)]
    pub link_lost: u64,
    pub pauses_received: u64,
    pub paused_ns: u64,
    pub sent_while_paused: u64,
    pub xoff_events: u64,
}

impl PortDelta {
    fn congestion_score(&self) -> u64 {
        self.ecn_marked + 10 * self.pauses_received + 10 * self.xoff_events + 100 * self.drops
    }
}

/// One step of the job's last iteration.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepRecord {
    pub index: usize,
    pub duration_ns: u64,
    pub uplinks: Vec<UplinkLoad>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobRecord {
    pub schema: String,
    pub job_id: String,
    pub testbed: String,
    pub collective: String,
    pub hash: String,
    pub placement: Vec<String>,
    pub started_unix_ms: u64,
    pub ended_unix_ms: u64,
    pub time_scale: u64,
    pub completion_ns: Vec<u64>,
    pub steps: Vec<StepRecord>,
    /// Ports the job moved any counter of, busiest first.
    pub ports: Vec<PortDelta>,
    pub retransmitted_packets: u64,
    pub cnps: u64,
    /// Faults injected while the job ran (`fabric link`, `fabric switch`), with their times.
    #[serde(default)]
    pub faults: Vec<FaultEvent>,
    /// Links already down or degraded when the job started.
    #[serde(default)]
    pub faulty_at_start: Vec<String>,
    /// In a run of several jobs (`fabric run --jobs`): the job's name in the jobs file.
    #[serde(default)]
    pub name: Option<String>,
    /// The job's own frame bytes per RTSW uplink (`rtsw->ctsw`), from the forwarding model.
    #[serde(default)]
    pub uplink_bytes: std::collections::BTreeMap<String, u64>,
    /// Its slow steps, each with the job that shared its busiest uplink.
    #[serde(default)]
    pub shared_steps: Vec<SharedStep>,
    /// A host of the job that computes slower than the others.
    #[serde(default)]
    pub straggler: Option<Straggler>,
    /// What the balancing modes moved while the job ran, over every switch (zero in the hash
    /// modes and in simulated runs).
    #[serde(default)]
    pub moves: crate::dataplane::BalanceMoves,
    pub diagnosis: Vec<String>,
}

/// A step of a job and the neighbour on its busiest uplink.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SharedStep {
    pub iteration: u32,
    /// 1-based, as `fabric report` prints steps.
    pub step: usize,
    pub duration_ns: u64,
    /// Over the job's median step.
    pub slowdown: f64,
    /// Of the uplinks this job crossed in the step, the one with the most bytes of all jobs.
    pub link: String,
    pub own_bytes: u64,
    /// The job with most bytes on that link besides this one, and its share of the link's bytes.
    pub other: Option<String>,
    pub other_bytes: u64,
    pub other_share: f64,
}

impl SharedStep {
    /// "job b's step 5 shared z0r1->z0c3 with job a, 61% of the bytes".
    pub fn sentence(&self, job: &str) -> String {
        match &self.other {
            Some(o) => format!(
                "job {job}'s step {} (iteration {}, {:.1}x its median step) shared {} with job {o}, {:.0}% of the bytes",
                self.step,
                self.iteration,
                self.slowdown,
                self.link,
                100.0 * self.other_share
            ),
            None => format!(
                "job {job}'s step {} (iteration {}, {:.1}x its median step) had {} to itself",
                self.step, self.iteration, self.slowdown, self.link
            ),
        }
    }
}

/// A straggler: `host` computes `factor` times slower than the others (see [`straggler_delay_ns`]).
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Straggler {
    pub host: String,
    pub factor: f64,
}

impl Straggler {
    /// `HOST:FACTOR` (the `--straggler` flag).
    pub fn parse(s: &str) -> Result<Self> {
        let (host, factor) = s.split_once(':').with_context(|| format!("--straggler {s:?}: use HOST:FACTOR"))?;
        let factor = factor.parse().with_context(|| format!("--straggler {s:?}: factor {factor:?} is not a number"))?;
        Ok(Straggler { host: host.to_string(), factor })
    }
}

/// What a job's record needs to know of the testbed's faults.
#[derive(Debug, Default)]
pub struct JobFaults {
    /// The testbed's fault log as it stands when the job ends.
    pub log: Vec<FaultEvent>,
    /// Links down or degraded when the job started (labels).
    pub at_start: Vec<String>,
}

/// Started when a run starts.
pub struct JobClock {
    pub id: String,
    started_unix_ms: u64,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl JobClock {
    pub fn start(plan: &Plan) -> Self {
        let t = unix_ms();
        JobClock { id: format!("{}-{t}-{}", plan.topology.prefix, std::process::id() % 100_000), started_unix_ms: t }
    }

    /// A job of the run `run_id` (several start in one millisecond: the name tells them apart).
    pub fn start_named(run_id: &str, name: &str) -> Self {
        JobClock { id: Self::named_id(run_id, name), started_unix_ms: unix_ms() }
    }

    /// The id of job `name` of the run `run_id`.
    pub fn named_id(run_id: &str, name: &str) -> String {
        format!("{run_id}-{name}")
    }

    /// The record of a finished run, from the stats before and after it.
    pub fn finish(
        self,
        r: &RunResult,
        before: &StatsReport,
        after: &StatsReport,
        step_uplinks: Vec<Vec<UplinkLoad>>,
        faults: &JobFaults,
    ) -> JobRecord {
        let ended_unix_ms = unix_ms();
        let ports = port_deltas(before, after);
        let last = r.iterations.last();
        let steps = step_uplinks
            .into_iter()
            .enumerate()
            .map(|(index, uplinks)| StepRecord {
                index,
                duration_ns: last.and_then(|it| it.step_ns.get(index)).copied().unwrap_or(0),
                uplinks,
            })
            .collect();
        let mut rec = JobRecord {
            schema: JOB_SCHEMA.into(),
            job_id: self.id,
            testbed: r.testbed.clone(),
            collective: r.options.collective.as_str().into(),
            hash: r.hash.clone(),
            placement: r.placement.clone(),
            started_unix_ms: self.started_unix_ms,
            ended_unix_ms,
            time_scale: r.time_scale,
            completion_ns: r.iterations.iter().map(|i| i.completion_ns).collect(),
            steps,
            ports,
            retransmitted_packets: r.flows.iter().map(|f| f.retransmitted).sum(),
            cnps: r.flows.iter().map(|f| f.cnps_received).sum(),
            faults: during(&faults.log, self.started_unix_ms, ended_unix_ms),
            faulty_at_start: faults.at_start.clone(),
            name: None,
            uplink_bytes: Default::default(),
            shared_steps: Vec::new(),
            straggler: None,
            moves: moves_between(before, after),
            diagnosis: Vec::new(),
        };
        rec.diagnosis = diagnose(&rec);
        rec
    }
}

/// The switches' balancing moves between two reports (a switch missing before counts from 0).
fn moves_between(before: &StatsReport, after: &StatsReport) -> crate::dataplane::BalanceMoves {
    let mut total = crate::dataplane::BalanceMoves::default();
    for a in &after.switches {
        let b = before.switches.iter().find(|b| b.switch == a.switch).map(|b| b.moves).unwrap_or_default();
        total.flowlet_moves += a.moves.flowlet_moves.saturating_sub(b.flowlet_moves);
        total.adaptive_second_choices += a.moves.adaptive_second_choices.saturating_sub(b.adaptive_second_choices);
    }
    total
}

const LINK_LOSS: &str = fabric_common::counters::DropReason::LinkLoss.as_str();

/// A port's drops but a lossy link's.
fn congestion_drops(p: &crate::telemetry::stats::PortStats) -> u64 {
    p.drops.iter().filter(|(reason, _)| **reason != LINK_LOSS).map(|(_, n)| n).sum()
}

fn link_lost(p: &crate::telemetry::stats::PortStats) -> u64 {
    p.drops.get(LINK_LOSS).copied().unwrap_or(0)
}

fn port_deltas(before: &StatsReport, after: &StatsReport) -> Vec<PortDelta> {
    let mut out = Vec::new();
    for (sa, sb) in after.switches.iter().zip(&before.switches) {
        for (pa, pb) in sa.ports.iter().zip(&sb.ports) {
            let sum = |ps: &crate::telemetry::stats::PortStats,
                       f: fn(&crate::telemetry::stats::ClassStats) -> u64|
             -> u64 { ps.classes.iter().map(f).sum() };
            let d = PortDelta {
                switch: sa.switch.clone(),
                port: pa.port.clone(),
                tx_bytes: pa.tx_bytes.saturating_sub(pb.tx_bytes),
                ecn_marked: sum(pa, |c| c.ecn_marked).saturating_sub(sum(pb, |c| c.ecn_marked)),
                drops: congestion_drops(pa).saturating_sub(congestion_drops(pb)),
                link_lost: link_lost(pa).saturating_sub(link_lost(pb)),
                pauses_received: sum(pa, |c| c.pauses_received).saturating_sub(sum(pb, |c| c.pauses_received)),
                paused_ns: sum(pa, |c| c.paused_ns).saturating_sub(sum(pb, |c| c.paused_ns)),
                sent_while_paused: sum(pa, |c| c.sent_while_paused).saturating_sub(sum(pb, |c| c.sent_while_paused)),
                xoff_events: sum(pa, |c| c.xoff_events).saturating_sub(sum(pb, |c| c.xoff_events)),
            };
            if d != (PortDelta { switch: d.switch.clone(), port: d.port.clone(), ..Default::default() }) {
                out.push(d);
            }
        }
    }
    sort_busiest(&mut out);
    out
}

/// Most congested first, then busiest: the order of [`JobRecord::ports`].
pub fn sort_busiest(ports: &mut [PortDelta]) {
    ports.sort_by(|a, b| b.congestion_score().cmp(&a.congestion_score()).then(b.tx_bytes.cmp(&a.tx_bytes)));
}

/// A step this much slower than the median step stands out, and is explained (or not).
const SLOW_STEP: f64 = 1.25;
/// Steps whose worst uplink imbalances lie within this share of each other had the same one.
const SAME_IMBALANCE: f64 = 0.1;

/// A step's worst uplink imbalance: (max/mean, RTSW, its busiest uplink).
fn worst_uplink(step: &StepRecord) -> Option<(f64, &str, &str)> {
    let u = step
        .uplinks
        .iter()
        .filter(|u| u.tx_bytes.iter().any(|p| p.1 > 0))
        .max_by(|a, b| a.max_over_mean.total_cmp(&b.max_over_mean))?;
    let busiest = u.tx_bytes.iter().max_by_key(|p| p.1).map_or("-", |p| p.0.as_str());
    Some((u.max_over_mean, u.rtsw.as_str(), busiest))
}

/// The steps' times beside their uplink imbalance. An imbalance the same in every step (a ring
/// uses the same QPs in each) is said to be so, not blamed on the slowest step; a slowest step
/// is named only when it stands out ([`SLOW_STEP`]).
fn steps_sentence(rec: &JobRecord) -> Option<String> {
    let mut durations: Vec<u64> = rec.steps.iter().map(|s| s.duration_ns).collect();
    durations.sort_unstable();
    let median = durations.get(durations.len() / 2).copied().unwrap_or(0).max(1);
    let slow = rec.steps.iter().max_by_key(|s| s.duration_ns)?;
    let (imbalance, rtsw, busiest) = worst_uplink(slow)?;
    let uplink = format!("{imbalance:.1}x on {rtsw} (busiest uplink {busiest})");
    let factor = slow.duration_ns as f64 / median as f64;
    let worst: Vec<f64> = rec.steps.iter().filter_map(worst_uplink).map(|w| w.0).collect();
    let same = worst.iter().all(|&m| (m - imbalance).abs() <= SAME_IMBALANCE * imbalance);
    let (what, step) = (&rec.collective, slow.index + 1);
    Some(match (rec.steps.len(), factor >= SLOW_STEP, same) {
        (1, _, _) => format!("uplink imbalance {uplink} during the {what}"),
        (_, true, false) => format!(
            "{what} step {step} was slowest ({:.1} ms, {factor:.1}x the median step), with uplink imbalance {uplink}",
            slow.duration_ns as f64 / 1e6
        ),
        (_, true, true) => format!(
            "{what} step {step} was slowest ({:.1} ms, {factor:.1}x the median step); the uplink imbalance, {uplink}, \
             was the same in every step, so it does not explain this one",
            slow.duration_ns as f64 / 1e6
        ),
        (_, false, true) => {
            format!("uplink imbalance {uplink} in every step; no step stands out (the slowest {factor:.1}x the median)")
        }
        (_, false, false) => {
            let (top, top_step) = rec
                .steps
                .iter()
                .filter_map(|s| worst_uplink(s).map(|w| (w, s.index + 1)))
                .max_by(|a, b| a.0.0.total_cmp(&b.0.0))?;
            format!(
                "uplink imbalance up to {:.1}x on {} (busiest uplink {}) in step {top_step}, at least {:.1}x in every \
                 step; no step stands out (the slowest {factor:.1}x the median)",
                top.0,
                top.1,
                top.2,
                worst.iter().copied().fold(f64::MAX, f64::min)
            )
        }
    })
}

/// A few sentences on where the job's time went, from its own figures.
pub fn diagnose(rec: &JobRecord) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(steps_sentence(rec));
    if let Some(p) = rec.ports.first().filter(|p| p.congestion_score() > 0) {
        out.push(format!(
            "most congested port {}:{}: {} ECN marks, {} pauses received ({:.1} ms paused), {} XOFF requests, {} drops",
            p.switch,
            p.port,
            p.ecn_marked,
            p.pauses_received,
            p.paused_ns as f64 / 1e6,
            p.xoff_events,
            p.drops
        ));
    }
    let lost: Vec<&PortDelta> = rec.ports.iter().filter(|p| p.link_lost > 0).collect();
    if !lost.is_empty() {
        let at: Vec<String> = lost.iter().map(|p| format!("{} at {}:{}", p.link_lost, p.switch, p.port)).collect();
        out.push(format!(
            "{} frames lost on degraded links, not to congestion ({})",
            lost.iter().map(|p| p.link_lost).sum::<u64>(),
            at.join(", ")
        ));
    }
    if !rec.faulty_at_start.is_empty() {
        out.push(format!("links already faulty when the job started: {}", rec.faulty_at_start.join(", ")));
    }
    if !rec.faults.is_empty() {
        let at = |f: &FaultEvent| {
            let t = f.at_unix_ms.saturating_sub(rec.started_unix_ms) as f64 / 1e3;
            let detail = if f.detail.is_empty() { String::new() } else { format!(" ({})", f.detail) };
            format!("{} {}{detail} at +{t:.2} s", f.target, fault_verb(f.kind))
        };
        out.push(format!("faults during the job: {}", rec.faults.iter().map(at).collect::<Vec<_>>().join(", ")));
    }
    let name = rec.name.as_deref().unwrap_or(&rec.job_id);
    for s in rec.shared_steps.iter().take(3) {
        out.push(s.sentence(name));
    }
    if let Some(s) = &rec.straggler {
        let slow: Vec<String> = rec.shared_steps.iter().map(|s| s.step.to_string()).collect();
        out.push(format!(
            "straggler {} computes {:.1}x slower: every step of the job waits for it{}",
            s.host,
            s.factor,
            if slow.is_empty() { String::new() } else { format!(" (slow steps {})", slow.join(", ")) }
        ));
    }
    if rec.retransmitted_packets > 0 {
        out.push(format!("{} packets were retransmitted: something was lost", rec.retransmitted_packets));
    }
    if out.is_empty() {
        out.push("no imbalance or congestion in the fabric: look at the hosts".into());
    }
    out
}

impl JobRecord {
    pub fn path(id: &str) -> PathBuf {
        jobs_dir().join(format!("{id}.json"))
    }

    pub fn save(&self) -> Result<()> {
        std::fs::create_dir_all(jobs_dir())?;
        std::fs::write(Self::path(&self.job_id), serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", Self::path(&self.job_id).display()))
    }

    /// Loads a job by id, or from a path: a job record, or the run result `fabric run` wrote
    /// (whose job's record it then loads).
    pub fn load(id_or_path: &str) -> Result<Self> {
        let is_path = id_or_path.ends_with(".json") || id_or_path.contains('/');
        let path = if is_path { PathBuf::from(id_or_path) } else { Self::path(id_or_path) };
        let text = std::fs::read(&path).with_context(|| format!("no job record {}", path.display()))?;
        let value: serde_json::Value =
            serde_json::from_slice(&text).with_context(|| format!("{} is not JSON", path.display()))?;
        match value["schema"].as_str() {
            Some(super::result::RESULTS_SCHEMA) => {
                let id = value["job_id"]
                    .as_str()
                    .with_context(|| format!("{} is a run result that names no job (no job_id)", path.display()))?;
                let record = Self::path(id);
                let text = std::fs::read(&record).with_context(|| {
                    format!(
                        "{} is the run result of job {id}, whose record {} is missing",
                        path.display(),
                        record.display()
                    )
                })?;
                return serde_json::from_slice(&text)
                    .with_context(|| format!("corrupt job record {}", record.display()));
            }
            Some(JOBS_SCHEMA) => {
                bail!("{} is a jobs run's summary ({JOBS_SCHEMA}) that does not read as one", path.display())
            }
            Some(schema) if schema != JOB_SCHEMA => bail!(
                "{} is a {schema} file, not a job record ({JOB_SCHEMA}): `fabric report` takes a job id, a job \
                 record (results/jobs/JOB.json), a run result of `fabric run` ({}) or a jobs run's summary \
                 ({JOBS_SCHEMA})",
                path.display(),
                super::result::RESULTS_SCHEMA
            ),
            _ => {}
        }
        serde_json::from_value(value).with_context(|| format!("corrupt job record {}", path.display()))
    }
}

/// The job running on a testbed and how far it got, for the live view (`fabric ui`): written
/// by `fabric run` at its start and after every step, removed when it ends.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct JobProgress {
    pub job_id: String,
    pub collective: String,
    /// 1-based iteration and steps done in it.
    pub iteration: u32,
    pub iterations: u32,
    pub step: usize,
    pub steps: usize,
    pub started_unix_ms: u64,
    /// The running `fabric run`: a record whose process is gone is stale (a process that took
    /// its pid since, or its zombie, is not it).
    #[serde(flatten)]
    pub process: crate::state::Owner,
}

impl JobProgress {
    fn path(prefix: &str) -> PathBuf {
        crate::state::state_dir(prefix).join("job.json")
    }

    /// Done share over all iterations, 0..=1.
    pub fn fraction(&self) -> f64 {
        let total = self.iterations as f64 * self.steps.max(1) as f64;
        ((self.iteration.saturating_sub(1) as f64 * self.steps as f64 + self.step as f64) / total).clamp(0.0, 1.0)
    }

    /// Best effort: a view that misses one update loses nothing that matters to the run.
    pub fn write(&self, prefix: &str) {
        if let Ok(bytes) = serde_json::to_vec(self) {
            // Whole: the live view reads it while it is rewritten.
            let _ = crate::sys::file::write_whole(&Self::path(prefix), &bytes);
        }
    }

    pub fn clear(prefix: &str) {
        let _ = std::fs::remove_file(Self::path(prefix));
    }

    /// The job running on a testbed, if its process still runs.
    pub fn read(prefix: &str) -> Option<JobProgress> {
        let p: JobProgress = serde_json::from_slice(&std::fs::read(Self::path(prefix)).ok()?).ok()?;
        p.process.is_running().then_some(p)
    }
}

/// A completion time of `wall_ns`, with the modelled time it stands for at `time_scale`.
fn completion(wall_ns: u64, time_scale: u64) -> String {
    let ms = wall_ns as f64 / 1e6;
    match time_scale {
        0 | 1 => format!("{ms:.3} ms"),
        scale => format!("{ms:.3} ms wall ({:.3} µs modelled)", wall_ns as f64 / 1e3 / scale as f64),
    }
}

/// `fabric report JOB`.
pub fn print(rec: &JobRecord) {
    println!(
        "job {} on {}: {} ({} ranks, hash {}), completion {}",
        rec.job_id,
        rec.testbed,
        rec.collective,
        rec.placement.len(),
        rec.hash,
        rec.completion_ns.iter().map(|&c| completion(c, rec.time_scale)).collect::<Vec<_>>().join(", ")
    );
    if rec.time_scale > 1 {
        println!(
            "times below are wall times, in the testbed's slowed time: divide by the time scale ({}) for the \
             modelled network's",
            rec.time_scale
        );
    }
    println!("{:>5} {:>10}  worst RTSW uplink max/mean", "step", "ms");
    for s in &rec.steps {
        let w = s.uplinks.iter().max_by(|a, b| a.max_over_mean.total_cmp(&b.max_over_mean));
        println!(
            "{:>5} {:>10.3}  {}",
            s.index + 1,
            s.duration_ns as f64 / 1e6,
            w.map_or("-".into(), |u| format!("{:.2} on {}", u.max_over_mean, u.rtsw))
        );
    }
    println!(
        "{:<8} {:<10} {:>12} {:>8} {:>8} {:>10} {:>6} {:>6} {:>9}",
        "switch", "port", "tx bytes", "ecn", "pauses", "paused ms", "xoff", "drops", "link lost"
    );
    for p in rec.ports.iter().take(12) {
        println!(
            "{:<8} {:<10} {:>12} {:>8} {:>8} {:>10.1} {:>6} {:>6} {:>9}",
            p.switch,
            p.port,
            p.tx_bytes,
            p.ecn_marked,
            p.pauses_received,
            p.paused_ns as f64 / 1e6,
            p.xoff_events,
            p.drops,
            p.link_lost
        );
    }
    println!("retransmitted packets {}, CNPs {}", rec.retransmitted_packets, rec.cnps);
    println!("diagnosis:");
    for d in &rec.diagnosis {
        println!("  - {d}");
    }
}

fn fault_verb(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::LinkDown | FaultKind::SwitchDown => "down",
        FaultKind::LinkUp | FaultKind::SwitchUp => "up",
        FaultKind::LinkDegraded => "degraded",
        FaultKind::LinkRestored => "restored",
    }
}

#[cfg(test)]
mod tests {
    use crate::dataplane::BalanceMoves;
    use crate::telemetry::prometheus::tests::full_report;

    #[test]
    fn the_record_counts_the_moves_made_during_the_run_only() {
        let before = full_report();
        let mut after = full_report();
        let moves = |f, a| BalanceMoves { flowlet_moves: f, adaptive_second_choices: a };
        assert_eq!(super::moves_between(&before, &after), moves(0, 0), "nothing moved during the run");
        after.switches[0].moves = moves(10, 4);
        let mut second = after.switches[0].clone();
        second.switch = "z0r1".into();
        second.moves = moves(1, 2);
        after.switches.push(second);
        // z0r0 had 3 flowlet moves before; z0r1 was not in the first report.
        assert_eq!(super::moves_between(&before, &after), moves(7 + 1, 4 + 2));
    }

    /// A record of an allreduce with no steps, ports or counts (a fixture to fill in).
    fn empty_record() -> super::JobRecord {
        serde_json::from_value(serde_json::json!({
            "schema": "fabric.job/1", "job_id": "j", "testbed": "t", "collective": "allreduce", "hash": "eecmp",
            "placement": [], "started_unix_ms": 0, "ended_unix_ms": 0, "time_scale": 1, "completion_ns": [],
            "steps": [], "ports": [], "retransmitted_packets": 0, "cnps": 0, "diagnosis": []
        }))
        .unwrap()
    }

    fn step(index: usize, ms: u64, imbalance: f64) -> super::StepRecord {
        let uplinks = vec![crate::telemetry::stats::UplinkLoad {
            rtsw: "z0r2".into(),
            tx_bytes: vec![("z0c0".into(), 300), ("z0c1".into(), 100)],
            max_over_mean: imbalance,
            jain: 0.8,
        }];
        super::StepRecord { index, duration_ns: ms * 1_000_000, uplinks }
    }

    /// The diagnosis names a slowest step only when it stands out, and says when the imbalance
    /// was the same in every step (it then explains no one step).
    #[test]
    fn a_steady_imbalance_is_not_blamed_on_the_slowest_step() {
        let sentence = |steps: Vec<super::StepRecord>| {
            let rec = super::JobRecord { steps, ..empty_record() };
            super::steps_sentence(&rec).unwrap()
        };
        let steady = sentence(vec![step(0, 50, 2.5), step(1, 55, 2.5), step(2, 50, 2.49)]);
        assert!(steady.starts_with("uplink imbalance 2.5x on z0r2 (busiest uplink z0c0) in every step"), "{steady}");
        let outlier_same = sentence(vec![step(0, 50, 2.5), step(1, 80, 2.5), step(2, 50, 2.5)]);
        assert!(
            outlier_same.contains("step 2 was slowest") && outlier_same.contains("does not explain"),
            "{outlier_same}"
        );
        let outlier = sentence(vec![step(0, 50, 1.1), step(1, 80, 2.5), step(2, 50, 1.1)]);
        assert!(outlier.ends_with("with uplink imbalance 2.5x on z0r2 (busiest uplink z0c0)"), "{outlier}");
        let varied = sentence(vec![step(0, 50, 1.1), step(1, 55, 2.5), step(2, 50, 1.5)]);
        assert!(
            varied.starts_with("uplink imbalance up to 2.5x on z0r2 (busiest uplink z0c0) in step 2, at least 1.1x"),
            "{varied}"
        );
    }

    /// A lossy link's drops are kept apart from the switch's own: they do not make a port the
    /// most congested, and the diagnosis names them as loss.
    #[test]
    fn link_loss_is_not_congestion() {
        let before = full_report();
        let mut after = full_report();
        let drops = &mut after.switches[0].ports[0].drops;
        *drops.get_mut("no_route").unwrap() += 1;
        drops.insert("link_loss", 2);
        let d = super::port_deltas(&before, &after);
        assert_eq!((d[0].port.as_str(), d[0].drops, d[0].link_lost), ("z0c1", 1, 2));
        let mut lossy = after.clone();
        *lossy.switches[0].ports[0].drops.get_mut("no_route").unwrap() -= 1;
        let d = super::port_deltas(&before, &lossy);
        assert_eq!((d[0].drops, d[0].link_lost, d[0].congestion_score()), (0, 2, 0));
        let diagnosis = super::diagnose(&super::JobRecord { ports: d, ..empty_record() });
        assert!(!diagnosis.iter().any(|l| l.starts_with("most congested port")), "{diagnosis:?}");
        assert!(diagnosis.contains(&"2 frames lost on degraded links, not to congestion (2 at z0r0:z0c1)".into()));
    }

    /// `fabric report FILE` takes the run result `fabric run` wrote too, and says what a file is
    /// when it is not a job record.
    #[test]
    fn a_run_result_leads_to_its_job_and_other_files_are_named() {
        let dir = std::env::temp_dir().join(format!("fabric-job-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        let err = |p: &str| format!("{:#}", super::JobRecord::load(p).unwrap_err());
        let run = file("run.json", r#"{"schema": "fabric.run/2", "job_id": "zz-no-such-job"}"#);
        let e = err(&run);
        assert!(
            e.contains("is the run result of job zz-no-such-job, whose record results/jobs/zz-no-such-job.json"),
            "{e}"
        );
        let anonymous = file("anon.json", r#"{"schema": "fabric.run/2"}"#);
        assert!(err(&anonymous).contains("is a run result that names no job"), "{}", err(&anonymous));
        assert!(err(&file("text.json", "not json")).contains("text.json is not JSON"));
        assert!(err(&file("other.json", "{}")).contains("corrupt job record"));
        let sim = file("sim.json", r#"{"schema": "fabric.sim/2", "results": []}"#);
        assert!(
            err(&sim).contains("sim.json is a fabric.sim/2 file, not a job record (fabric.job/1)"),
            "{}",
            err(&sim)
        );
        let summary = file("summary.json", r#"{"schema": "fabric.jobs/1"}"#);
        assert!(err(&summary).contains("summary.json is a jobs run's summary (fabric.jobs/1) that does not read"));
        // A path without .json is a path, not an id under results/jobs.
        assert!(err(dir.to_str().unwrap()).starts_with(&format!("no job record {}", dir.display())));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A job's progress names its process by pid and start time: this process's reads as
    /// running, and the same pid with another start time (a later process) does not. A
    /// progress file of an older binary, with the pid alone, is judged by the pid.
    #[test]
    fn a_jobs_progress_is_running_only_while_its_process_is() {
        let me = crate::state::Owner::this_process().unwrap();
        let progress = |process: serde_json::Value| {
            let mut v = serde_json::json!({
                "job_id": "j", "collective": "allreduce", "iteration": 1, "iterations": 1, "step": 0,
                "steps": 2, "started_unix_ms": 0
            });
            v.as_object_mut().unwrap().extend(process.as_object().unwrap().clone());
            serde_json::from_value::<super::JobProgress>(v).unwrap()
        };
        let now = progress(serde_json::to_value(me).unwrap());
        assert_eq!(now.process, me);
        assert!(now.process.is_running());
        let later = progress(serde_json::json!({"pid": me.pid, "started": me.started + 1}));
        assert!(!later.process.is_running(), "another process with this pid");
        let old = progress(serde_json::json!({"pid": me.pid}));
        assert!(old.process.is_running(), "an older binary's file, by pid");
        assert!(!progress(serde_json::json!({"pid": 1u32 << 23})).process.is_running());
    }
}
