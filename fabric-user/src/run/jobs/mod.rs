//! `fabric run --jobs FILE`: several jobs on one fabric at once.
//!
//! A jobs file (TOML, `testbed/tenants/README.md`) names each job with its collective, ranks,
//! message, placement (or `place`: the min-cut placement of `fabric place` on the hosts no other
//! job holds), start offset, iterations and its own QPs per connection; the other endpoint
//! options (source ports, congestion control, hash mode) are the run's, in a `[run]` table with
//! the fields of a workload file (its `qps` is the default of a job that names none).
//!
//! [`JobsFile::resolve`] checks everything against the testbed's plan before a packet is sent;
//! [`runner::run_jobs`] runs the jobs, in the file's [`JobsMode`] ([`independent`] or [`rounds`], on
//! what [`shared`] keeps); [`interference`] attributes each job's uplink bytes and
//! names the neighbour on the busiest uplink of its slow steps.
pub mod independent;
pub mod interference;
pub mod rounds;
pub mod runner;
pub mod shared;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, Result, bail, ensure};
use fabric_common::config::HashMode;
use serde::Deserialize;

use super::{RunOptions, RunSpec};
use crate::{
    model::partition::{Graph, check_ranks_fit, place_on},
    model::placement::Placement,
    model::plan::{NodeId, Plan},
    model::topology::hash_mode_serde,
    model::units::Size,
    model::workload::{Collective, Transfer, schedule},
};

/// A jobs file as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsFile {
    /// The run's options, shared by every job: the fields of a workload file, without the ones a
    /// job gives (`workload`, `ranks`, `message`, `iterations`, `placement`).
    #[serde(default)]
    pub run: RunSpec,
    #[serde(default)]
    pub job: Vec<JobSpec>,
    /// How the jobs advance; default `independent` when no two jobs share a host, else `rounds`.
    #[serde(default)]
    pub mode: Option<JobsMode>,
    /// `--straggler HOST:FACTOR`: on the job that holds the host.
    #[serde(skip)]
    pub straggler_flag: Option<Straggler>,
}

pub use crate::run::job::Straggler;

/// How the jobs of a run advance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobsMode {
    /// Each job on its own engine, its own QPs and its own pace: it starts at its `start_ms`
    /// and runs its steps back to back, whatever the others do ([`independent`]). A host runs
    /// one engine, so the jobs must not share a host.
    Independent,
    /// Steps aligned: every running job's next step together, round after round, on one
    /// engine ([`rounds`]); jobs may share hosts, and their interference repeats run to run.
    Rounds,
}

impl JobsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            JobsMode::Independent => "independent",
            JobsMode::Rounds => "rounds",
        }
    }
}

/// One `[[job]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Letters, digits, `_`, `.` and `-`, not starting with `.`: it names the job's record file.
    pub name: String,
    /// A collective, or else `trace`.
    #[serde(default)]
    pub workload: Option<Collective>,
    /// A Chakra or PARAM trace (a rank's file or a directory, as `fabric run trace` takes it),
    /// replayed in the rounds of its dependency graph.
    #[serde(default)]
    pub trace: Option<std::path::PathBuf>,
    /// Multiply every op of the trace by this (as `fabric run trace --scale`).
    #[serde(default)]
    pub scale: Option<f64>,
    /// Ranks: a collective needs them; a trace has its own (if given, they must agree).
    #[serde(default)]
    pub ranks: Option<usize>,
    /// A collective's message per rank (default the run's default); a trace gives its own.
    #[serde(default)]
    pub message: Option<Size>,
    /// `contiguous`, `fragmented`, `random:SEED`, `hosts:H1,...`, or `place`.
    #[serde(default = "default_placement")]
    pub placement: String,
    /// Milliseconds after the run starts (wall time).
    #[serde(default)]
    pub start_ms: u64,
    #[serde(default = "default_iterations")]
    pub iterations: u32,
    /// The hash mode the job expects the switches to run; every job that states one must agree
    /// with the others and with `[run].hash`.
    #[serde(default, deserialize_with = "hash_mode_serde::option::deserialize")]
    pub hash: Option<HashMode>,
    /// QPs per connection of this job's transfers (default `[run].qps`): each job opens its own
    /// count, so two jobs of one run may differ (each transfer's rate is shared by its QPs).
    #[serde(default)]
    pub qps: Option<u32>,
    #[serde(default)]
    pub straggler: Option<Straggler>,
    /// A host of the job whose NIC is slower: its host link's modelled rate, Gbit/s.
    #[serde(default)]
    pub slow_nic: Option<SlowNic>,
}

/// `slow_nic = { host = "z0r0h0", rate_gbps = 100 }`: while the job runs, the host's link runs at
/// that modelled rate (`fabric link degrade` on the host link; restored when the job ends).
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SlowNic {
    pub host: String,
    pub rate_gbps: f64,
}

fn default_placement() -> String {
    "contiguous".into()
}
fn default_iterations() -> u32 {
    1
}

/// A job checked against the testbed: its hosts and its steps.
#[derive(Clone, Debug)]
pub struct PlannedJob {
    pub name: String,
    pub options: RunOptions,
    pub hosts: Vec<NodeId>,
    pub steps: Vec<Vec<Transfer>>,
    pub start_ms: u64,
    /// `allreduce`, ..., or `trace FILE`.
    pub workload_label: String,
    pub straggler: Option<(NodeId, f64)>,
    /// The slow NIC's host, its host link to degrade while the job runs (`NODE:PORT`, as
    /// `fabric link` names it), and its modelled rate (Gbit/s), which the host also sends at.
    pub slow_nic: Option<(NodeId, String, f64)>,
}

/// Every job of a file, checked, and the run's hash mode.
#[derive(Clone, Debug)]
pub struct JobsPlan {
    pub jobs: Vec<PlannedJob>,
    pub mode: JobsMode,
    pub hash: HashMode,
    pub hash_seed: Option<u32>,
}

impl JobsFile {
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading jobs file {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("jobs file {}", path.display()))
    }

    /// A single run as a file of one job, named after its collective (a run with `--straggler`).
    pub fn of_run(spec: &RunSpec) -> Result<Self> {
        let workload = spec.workload.context("no workload given")?;
        let job = JobSpec {
            name: workload.as_str().into(),
            workload: Some(workload),
            trace: None,
            scale: None,
            ranks: Some(spec.ranks.context("--ranks: give the ranks of a run with --straggler")?),
            message: Some(spec.message),
            placement: spec.placement.spelling(),
            start_ms: 0,
            iterations: spec.iterations,
            hash: None,
            qps: None,
            straggler: None,
            slow_nic: None,
        };
        let run = RunSpec {
            workload: None,
            ranks: None,
            message: RunSpec::default().message,
            iterations: RunSpec::default().iterations,
            placement: RunSpec::default().placement,
            ..spec.clone()
        };
        Ok(JobsFile { run, job: vec![job], mode: None, straggler_flag: None })
    }

    /// `--straggler HOST:FACTOR`: on the job that has that host (the first, if several do).
    pub fn set_straggler(&mut self, flag: &str) -> Result<()> {
        self.straggler_flag = Some(Straggler::parse(flag)?);
        Ok(())
    }

    /// Checks the file against `plan` and places every job; nothing runs. `default_hash` is the
    /// switches' mode when neither `[run]` nor a job names one.
    pub fn resolve(&self, plan: &Plan, default_hash: HashMode) -> Result<JobsPlan> {
        let r = &self.run;
        for (field, set) in [
            ("workload", r.workload.is_some()),
            ("ranks", r.ranks.is_some()),
            ("message", r.message != RunSpec::default().message),
            ("iterations", r.iterations != RunSpec::default().iterations),
            ("placement", r.placement != RunSpec::default().placement),
        ] {
            ensure!(!set, "[run].{field}: give it in each [[job]], not for the whole run");
        }
        ensure!(!self.job.is_empty(), "no [[job]] in the file");
        let hash = self.hash_mode(default_hash)?;
        let mut names = BTreeSet::new();
        for j in &self.job {
            check_job_name(&j.name)?;
            ensure!(names.insert(j.name.as_str()), "job {:?}: two jobs have this name", j.name);
        }
        let mut planned: Vec<Option<PlannedJob>> = vec![None; self.job.len()];
        let mut used: BTreeSet<NodeId> = BTreeSet::new();
        // Fixed placements first, so that `place` takes the hosts they leave.
        let order = (0..self.job.len())
            .filter(|&i| self.job[i].placement != "place")
            .chain((0..self.job.len()).filter(|&i| self.job[i].placement == "place"));
        for i in order {
            let p = self.job[i].plan(plan, r, hash, &used).with_context(|| format!("job {:?}", self.job[i].name))?;
            used.extend(p.hosts.iter().copied());
            planned[i] = Some(p);
        }
        let mut jobs: Vec<PlannedJob> = planned.into_iter().map(|p| p.expect("every job planned")).collect();
        if let Some(s) = &self.straggler_flag {
            let h = plan.node_by_name(&s.host).with_context(|| format!("--straggler: no host {:?}", s.host))?;
            let job = jobs
                .iter_mut()
                .find(|j| j.hosts.contains(&h))
                .with_context(|| format!("--straggler: no job runs on {}", s.host))?;
            job.straggler = Some((h, check_factor(s.factor).context("--straggler")?));
        }
        let mode = self.mode(&jobs, plan)?;
        Ok(JobsPlan { jobs, mode, hash, hash_seed: r.hash_seed })
    }

    /// The file's mode, or its default: independent unless two jobs share a host.
    fn mode(&self, jobs: &[PlannedJob], plan: &Plan) -> Result<JobsMode> {
        let shared = jobs.iter().enumerate().find_map(|(i, a)| {
            jobs[i + 1..].iter().find_map(|b| a.hosts.iter().find(|h| b.hosts.contains(h)).map(|&h| (a, b, h)))
        });
        match (self.mode, shared) {
            (Some(JobsMode::Independent), Some((a, b, h))) => bail!(
                "mode = \"independent\": jobs {:?} and {:?} both run on {} (a host runs one engine): give them other hosts or use mode = \"rounds\"",
                a.name,
                b.name,
                plan.nodes[h].name
            ),
            (Some(m), _) => Ok(m),
            (None, Some(_)) => Ok(JobsMode::Rounds),
            (None, None) => Ok(JobsMode::Independent),
        }
    }

    /// The one hash mode of the run: `[run].hash`, or what the jobs expect, or the switches'.
    fn hash_mode(&self, default_hash: HashMode) -> Result<HashMode> {
        let mut stated: BTreeMap<&str, &str> = BTreeMap::new();
        if let Some(h) = self.run.hash {
            stated.insert("[run]", h.as_str());
        }
        for j in &self.job {
            if let Some(h) = j.hash {
                stated.insert(&j.name, h.as_str());
            }
        }
        let modes: BTreeSet<&str> = stated.values().copied().collect();
        if modes.len() > 1 {
            let list: Vec<String> = stated.iter().map(|(w, h)| format!("{w}: {h}")).collect();
            bail!("hash: the switches run one mode, but the jobs expect several ({})", list.join(", "));
        }
        Ok(self.run.hash.or_else(|| self.job.iter().find_map(|j| j.hash)).unwrap_or(default_hash))
    }
}

impl JobSpec {
    /// The job's steps (in ranks), its rank count and what it runs.
    fn workload(&self, seed: u64) -> Result<(Vec<Vec<Transfer>>, usize, String)> {
        match (self.workload, &self.trace) {
            (Some(w), None) => {
                ensure!(self.scale.is_none(), "scale: only for a trace");
                let ranks = self.ranks().context("ranks: a collective job needs its ranks (or a hosts: placement)")?;
                ensure!(ranks >= 2, "ranks: a collective needs at least 2");
                Ok((schedule(w, ranks, self.message().get(), seed), ranks, w.as_str().into()))
            }
            (None, Some(path)) => {
                // Refused rather than ignored: the trace's ops carry their own sizes.
                ensure!(self.message.is_none(), "message: only for a collective job; a trace gives its own sizes");
                let scale = self.scale.unwrap_or(1.0);
                // Checked here, named as the field (the replay names its flag).
                ensure!(scale > 0.0 && scale.is_finite(), "scale: {scale} is not a positive number");
                let mut args = crate::run::trace::replay::TraceArgs::for_file(path);
                args.ranks = self.ranks;
                args.scale = scale;
                let job = crate::run::trace::replay::job(&args).context("trace")?;
                ensure!(
                    self.ranks.is_none_or(|r| r == job.ranks),
                    "ranks: {} but the trace has {}",
                    self.ranks.unwrap_or(0),
                    job.ranks
                );
                let steps: Vec<Vec<Transfer>> = job
                    .rounds()
                    .iter()
                    .map(|round| round.iter().flat_map(|&(op, step)| job.ops[op].steps()[step].clone()).collect())
                    .collect();
                ensure!(!steps.is_empty(), "trace: {} moves no bytes", path.display());
                Ok((steps, job.ranks, format!("trace {}", path.display())))
            }
            (Some(_), Some(_)) => bail!("give either `workload` or `trace`, not both"),
            (None, None) => bail!("workload: give a collective (or a `trace`)"),
        }
    }

    /// The job's rank count as its fields give it: `ranks`, else one per host of a `hosts:`
    /// placement (as `fabric run --placement hosts:...` counts them).
    fn ranks(&self) -> Option<usize> {
        self.ranks.or_else(|| Placement::parse(&self.placement).ok()?.named_hosts())
    }

    /// The message per rank of the job: its own, or the run's default.
    fn message(&self) -> Size {
        self.message.unwrap_or(RunSpec::default().message)
    }

    /// Refuses `ranks` ranks that the hosts cannot hold: the testbed's, and for `place` the ones
    /// the jobs placed before leave.
    fn check_fits(&self, plan: &Plan, ranks: usize, used: &BTreeSet<NodeId>) -> Result<()> {
        let all = plan.hosts().count();
        // Named as the field the count came from: a trace's own, unless `ranks` was given.
        let field = if self.trace.is_some() && self.ranks.is_none() { "trace" } else { "ranks" };
        check_ranks_fit(ranks, all, all).context(field)?;
        if self.placement == "place" {
            // `place_on`'s own check, made before the schedule is built.
            check_ranks_fit(ranks, all - used.len(), all)
                .context("placement = \"place\": the jobs placed before it")?;
        }
        Ok(())
    }

    fn plan(&self, plan: &Plan, run: &RunSpec, hash: HashMode, used: &BTreeSet<NodeId>) -> Result<PlannedJob> {
        // Before the schedule is built when the fields give the count: it grows as ranks squared
        // (all-to-all). A trace without `ranks` gives its own count, checked once read.
        let stated = self.ranks();
        if let Some(ranks) = stated {
            self.check_fits(plan, ranks, used)?;
        }
        let (steps, ranks, workload_label) = self.workload(run.seed)?;
        if stated.is_none() {
            self.check_fits(plan, ranks, used)?;
        }
        let mut spec = run.clone();
        // A trace job's results name a collective too (the schema's field): its label says more.
        spec.workload = Some(self.workload.unwrap_or(Collective::Allreduce));
        spec.ranks = Some(ranks);
        spec.message = self.message();
        spec.iterations = self.iterations;
        spec.hash = Some(hash);
        spec.qps = self.qps.unwrap_or(run.qps);
        let hosts = if self.placement == "place" {
            let free: Vec<NodeId> = plan.hosts().filter(|h| !used.contains(h)).collect();
            place_on(plan, &free, &graph_of(ranks, &steps), run.seed)?
        } else {
            let p = Placement::parse(&self.placement).context("placement")?;
            p.place(plan, ranks).context("placement")?
        };
        spec.placement = Placement::Explicit { hosts: hosts.iter().map(|&h| plan.nodes[h].name.clone()).collect() };
        let options = spec.options(crate::run::Named::Field)?;
        options.endpoint.check_fits(plan.topology.mtu)?;
        let straggler = match &self.straggler {
            Some(s) => {
                let h = plan
                    .node_by_name(&s.host)
                    .filter(|&h| hosts.contains(&h))
                    .with_context(|| format!("straggler: {:?} is not one of this job's hosts", s.host))?;
                Some((h, check_factor(s.factor).context("straggler")?))
            }
            None => None,
        };
        let slow_nic = match &self.slow_nic {
            Some(n) => {
                let h = plan
                    .node_by_name(&n.host)
                    .filter(|&h| hosts.contains(&h))
                    .with_context(|| format!("slow_nic: {:?} is not one of this job's hosts", n.host))?;
                let link = plan.nodes[h].ports[0].link;
                crate::model::fault::check_testbed_rate(n.rate_gbps, plan.links[link].rate_gbps, &plan.topology)
                    .context("slow_nic.rate_gbps")?;
                Some((h, plan.link_label(link), n.rate_gbps))
            }
            None => None,
        };
        Ok(PlannedJob {
            slow_nic,
            workload_label,
            name: self.name.clone(),
            steps,
            options,
            hosts,
            start_ms: self.start_ms,
            straggler,
        })
    }
}

/// The traffic of one iteration of `steps` over `ranks` ranks, for `place`.
fn graph_of(ranks: usize, steps: &[Vec<Transfer>]) -> Graph {
    let mut g = Graph::new(ranks);
    for t in steps.iter().flatten() {
        g.add(t.src, t.dst, t.bytes as f64);
    }
    g
}

/// Job names become file names (`results/jobs/RUN-NAME.json`): only characters that are safe
/// there, and no leading `.` (a hidden file, or `..`).
fn check_job_name(name: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    ensure!(
        !name.is_empty() && !name.starts_with('.') && name.chars().all(allowed),
        "job {name:?}: name: use letters, digits, '_', '.' and '-', not starting with '.' (it names the job's record file)"
    );
    Ok(())
}

/// The largest straggler factor: the model sleeps `(factor - 1) x` a step's nominal compute, so
/// a huge factor would hang the run rather than slow it.
pub const MAX_STRAGGLER_FACTOR: f64 = 1000.0;

pub fn check_factor(factor: f64) -> Result<f64> {
    ensure!(
        factor.is_finite() && (1.0..=MAX_STRAGGLER_FACTOR).contains(&factor),
        "factor {factor} must be 1..={MAX_STRAGGLER_FACTOR} (1 = as fast as the others)"
    );
    Ok(factor)
}

/// The straggler model: every rank computes for a step's nominal time before it sends (the time
/// its largest transfer takes at the host link's modelled rate), a straggler `factor` times as
/// long; the others' compute overlaps the previous step's tail, so what a step loses is the
/// straggler's extra compute, `(factor - 1) x nominal`, before the straggler's first packet.
pub fn straggler_delay_ns(step: &[Transfer], factor: f64, link_rate_bps: u64) -> u64 {
    ((factor - 1.0).max(0.0) * nominal_compute_ns(step, link_rate_bps)) as u64
}

/// A step's nominal compute in the straggler model: the time its largest transfer takes at the
/// host link's rate `link_rate_bps`, ns.
pub fn nominal_compute_ns(step: &[Transfer], link_rate_bps: u64) -> f64 {
    let largest = step.iter().map(|t| t.bytes).max().unwrap_or(0);
    largest as f64 * 8e9 / link_rate_bps.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::topology::Topology;

    fn plan() -> Plan {
        Plan::new(&Topology::default_topology())
    }

    fn resolve(text: &str) -> Result<JobsPlan> {
        let f: JobsFile = toml::from_str(text)?;
        f.resolve(&plan(), HashMode::Eecmp)
    }

    const TWO: &str = r#"
[run]
qps = 8
hash = "eecmp"
[[job]]
name = "a"
workload = "allreduce"
ranks = 4
placement = "hosts:z0r0h0,z0r1h0,z0r2h0,z0r3h0"
[[job]]
name = "b"
workload = "allreduce"
ranks = 4
placement = "place"
start_ms = 100
iterations = 2
hash = "eecmp"
straggler = { host = "z0r0h1", factor = 2.0 }
"#;

    #[test]
    fn a_file_of_two_jobs_resolves_and_place_takes_free_hosts() {
        let p = resolve(TWO).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(p.hash, HashMode::Eecmp);
        let (a, b) = (&p.jobs[0], &p.jobs[1]);
        assert_eq!((a.name.as_str(), b.name.as_str()), ("a", "b"));
        assert!(b.hosts.iter().all(|h| !a.hosts.contains(h)), "place uses only free hosts");
        assert_eq!((b.start_ms, b.options.iterations, b.options.endpoint.qps), (100, 2, 8));
        let p = resolve(&TWO.replace("iterations = 2", "qps = 2")).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!((p.jobs[0].options.endpoint.qps, p.jobs[1].options.endpoint.qps), (8, 2), "a job's own QPs");
        assert_eq!(a.steps.len(), 6);
        assert_eq!(p.mode, JobsMode::Independent, "disjoint hosts run independently by default");
        let p = resolve(&format!("mode = \"rounds\"\n{TWO}")).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(p.mode, JobsMode::Rounds);
        let pl = plan();
        assert_eq!(b.straggler, Some((pl.node_by_name("z0r0h1").unwrap(), 2.0)));
        let text = TWO.replace("iterations = 2", "slow_nic = { host = \"z0r1h1\", rate_gbps = 100 }");
        let p = resolve(&text).unwrap_or_else(|e| panic!("{e:#}"));
        let (host, link, rate) = p.jobs[1].slow_nic.clone().unwrap();
        assert_eq!(host, plan().node_by_name("z0r1h1").unwrap());
        assert_eq!(rate, 100.0);
        assert!(link.contains("z0r1h1"), "{link}");
    }

    #[test]
    fn bad_jobs_files_are_refused_naming_the_problem() {
        let job = |extra: &str| format!("[[job]]\nname = \"a\"\nworkload = \"allreduce\"\nranks = 4\n{extra}");
        let cases: Vec<(String, &str)> = vec![
            (format!("{}\n{}", job(""), job("")), "two jobs have this name"),
            (job("colour = 3"), "colour"),
            (job("placement = \"hosts:z0r0h0,z0r0h1,z0r1h0,z9r9h9\""), "z9r9h9"),
            (job("straggler = { host = \"nowhere\", factor = 2.0 }"), "nowhere"),
            (job("straggler = { host = \"z0r0h0\", factor = 0.5 }"), "factor"),
            (job("slow_nic = { host = \"z0r3h1\", rate_gbps = 100 }"), "slow_nic"),
            (job("slow_nic = { host = \"z0r0h0\", rate_gbps = 900 }"), "slow_nic.rate_gbps"),
            // Replaced, not appended: a second `ranks` key would be refused by TOML itself.
            (job("").replace("ranks = 4", "ranks = 9"), "ranks: 9 ranks but the topology has only 8 hosts"),
            (
                format!(
                    "{}\n{}",
                    job("placement = \"contiguous\""),
                    job("").replace("\"a\"", "\"b\"").replace("ranks = 4", "ranks = 6\nplacement = \"place\"")
                ),
                "placement = \"place\": the jobs placed before it: 6 ranks but only 4 hosts are free (4 busy)",
            ),
            (format!("[run]\nhash = \"te\"\n{}", job("hash = \"eecmp\"")), "one mode"),
            (format!("[run]\nqps = 4\n{}", job("qps = 0")), ": qps: 0 is not in"),
            (
                format!(
                    "mode = \"independent\"\n{}\n{}",
                    job("placement = \"hosts:z0r0h0,z0r0h1,z0r1h0,z0r1h1\""),
                    job("placement = \"hosts:z0r2h0,z0r2h1,z0r3h0,z0r1h1\"").replace("\"a\"", "\"b\"")
                ),
                "jobs \"a\" and \"b\" both run on z0r1h1",
            ),
            (format!("mode = \"lockstep\"\n{}", job("")), "lockstep"),
            (job("qps = 999"), ": qps: 999 is not in"),
            (format!("[run]\nworkload = \"allreduce\"\n{}", job("")), "[run].workload"),
            ("[run]\nqps = 4\n".to_string(), "no [[job]]"),
            (format!("[run]\nqps = 0\n{}", job("")), ": qps: 0 is not in"),
            (job("trace = \"../testbed/traces/dp-step\""), "not both"),
            ("[[job]]\nname = \"t\"\nranks = 4\n".into(), "workload"),
            ("[[job]]\nname = \"t\"\nworkload = \"allreduce\"\n".into(), "ranks"),
        ];
        for (text, needle) in cases {
            let e = resolve(&text).expect_err(&text);
            assert!(format!("{e:#}").contains(needle), "{text}\n=> {e:#}");
        }
    }

    /// A job's name becomes a file name: only `[A-Za-z0-9_.-]`, not starting with `.`.
    #[test]
    fn job_names_that_are_not_plain_file_names_are_refused() {
        let named = |name: &str| format!("[[job]]\nname = {name:?}\nworkload = \"allreduce\"\nranks = 4\n");
        for bad in ["a/b", "../x", ".hidden", "", "a b", "a\\b", "ä"] {
            let e = format!("{:#}", resolve(&named(bad)).expect_err(bad));
            assert!(e.contains(&format!("job {bad:?}: name: use letters, digits, '_', '.' and '-'")), "{bad}: {e}");
        }
        for good in ["a", "Job-1.v2_x", "9"] {
            resolve(&named(good)).unwrap_or_else(|e| panic!("{good}: {e:#}"));
        }
    }

    /// The rank count is checked against the hosts before the schedule is built (all-to-all:
    /// n(n-1) transfers), and before a trace is read.
    #[test]
    fn too_many_ranks_are_refused_before_the_schedule_is_built() {
        let text = "[[job]]\nname = \"a\"\nworkload = \"alltoall\"\nranks = 100000\n";
        let e = format!("{:#}", resolve(text).unwrap_err());
        assert!(e.ends_with("ranks: 100000 ranks but the topology has only 8 hosts"), "{e}");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed/traces/dp-step");
        let text = format!("[[job]]\nname = \"t\"\ntrace = \"{}\"\nranks = 100000\n", dir.display());
        let e = format!("{:#}", resolve(&text).unwrap_err());
        assert!(e.ends_with("ranks: 100000 ranks but the topology has only 8 hosts"), "{e}");
    }

    /// A trace gives its own sizes: a `message` beside it is refused, not ignored.
    #[test]
    fn a_trace_job_refuses_a_message() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed/traces/dp-step");
        let text = format!("[[job]]\nname = \"t\"\ntrace = \"{}\"\nmessage = \"1Mi\"\n", dir.display());
        let e = format!("{:#}", resolve(&text).unwrap_err());
        assert!(e.contains("message: only for a collective job; a trace gives its own sizes"), "{e}");
        resolve(&text.replace("message = \"1Mi\"\n", "")).unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// A huge straggler factor would sleep for ever: at most 1000, in a file and from the flag.
    #[test]
    fn the_straggler_factor_is_bounded() {
        let text = |factor: &str| TWO.replace("factor = 2.0", &format!("factor = {factor}"));
        let e = format!("{:#}", resolve(&text("1e9")).unwrap_err());
        assert!(e.contains("straggler: factor 1000000000 must be 1..=1000"), "{e}");
        let p = resolve(&text("1000.0")).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(p.jobs[1].straggler.map(|s| s.1), Some(1000.0));
        let mut f: JobsFile = toml::from_str(TWO).unwrap();
        f.set_straggler("z0r0h0:1e9").unwrap();
        let e = format!("{:#}", f.resolve(&plan(), HashMode::Eecmp).unwrap_err());
        assert!(e.contains("--straggler: factor 1000000000 must be 1..=1000"), "{e}");
    }

    #[test]
    fn the_shipped_jobs_files_are_valid() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed/tenants");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let f = JobsFile::from_file(&path).unwrap_or_else(|e| panic!("{e:#}"));
                f.resolve(&plan(), HashMode::Eecmp).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 1);
    }

    #[test]
    fn a_trace_job_runs_its_rounds_and_place_uses_its_traffic() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed/traces/dp-step");
        let text =
            format!("[[job]]\nname = \"t\"\ntrace = \"{}\"\nscale = 2.0\nplacement = \"place\"\n", dir.display());
        let p = resolve(&text).unwrap_or_else(|e| panic!("{e:#}"));
        let t = &p.jobs[0];
        assert_eq!(t.hosts.len(), 8);
        assert!(t.workload_label.starts_with("trace "));
        // Four buckets of 32, 32, 16, 16 KiB, each all-reduced over 8 ranks in a ring (14 steps
        // of 8 chunks of 1/8: 14 x the bucket), doubled by the scale.
        let bytes: u64 = t.steps.iter().flatten().map(|x| x.bytes).sum();
        assert_eq!(bytes, 2 * 14 * (2 * 32768 + 2 * 16384));
        let e = format!("{:#}", resolve(&text.replace("scale = 2.0", "scale = 0.0")).expect_err("scale 0"));
        assert!(e.contains("scale: 0 is not a positive number") && !e.contains("--scale"), "{e}");
        let e = resolve(&text.replace("scale = 2.0", "ranks = 4")).expect_err("ranks disagree");
        assert!(format!("{e:#}").contains("ranks 4 given, but") && format!("{e:#}").contains("(8 files)"), "{e:#}");
    }

    #[test]
    fn a_straggler_delays_by_its_extra_compute() {
        let step = [Transfer { src: 0, dst: 1, bytes: 1_000_000 }, Transfer { src: 1, dst: 0, bytes: 500 }];
        // 1 MB at 8 Mbit/s is 1 s nominal; factor 3 adds 2 s, factor 1 nothing.
        assert_eq!(straggler_delay_ns(&step, 3.0, 8_000_000), 2_000_000_000);
        assert_eq!(straggler_delay_ns(&step, 1.0, 8_000_000), 0);
        assert_eq!(Straggler::parse("z0r0h0:2.5").unwrap(), Straggler { host: "z0r0h0".into(), factor: 2.5 });
        assert!(Straggler::parse("z0r0h0").is_err());
    }
}
