//! What both modes of `fabric run --jobs` share: a job's bookkeeping while it runs, a step's
//! record, the forwarding model's attribution of its bytes, TE placement, slow NICs, the
//! exporter's gauges, and the run's summary (schema `fabric.jobs/1`).
use std::collections::{BTreeMap, HashMap};

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::{
    JobsMode, JobsPlan, PlannedJob, Straggler,
    interference::{LinkBytes, SharedStep, StepLoad, attribute, job_totals},
};
use crate::{
    endpoint::EndpointOptions,
    endpoint::engine::{FlowResult, HostResult, StepShape},
    forwarding::{fabric::SimFabric, flows::step_flows_shaped, route},
    model::fault::Degradation,
    model::plan::{NodeId, Plan, Role},
    model::workload::HostTransfer,
    run::job::{JobClock, JobFaults, JobRecord},
    run::result::{CPU_BOUND_LATE_SHARE, cpu_wait_share, late_wake_share},
    run::{Endpoints, IterationResult, NoExtras, RESULTS_SCHEMA, RunResult, accumulate_hosts, balance},
    state::State,
    telemetry::jobs::{JobGauge, JobsGauges},
    telemetry::stats::{StatsReport, UplinkBytes, UplinkLoad},
    testbed,
};

pub use crate::run::job::JOBS_SCHEMA;

/// One job's line in the run summary.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct JobSummary {
    pub name: String,
    pub job_id: String,
    pub placement: Vec<String>,
    pub start_ms: u64,
    /// When the job's first step began and its last ended, ms after the run's start (measured).
    #[serde(default)]
    pub started_ms: u64,
    #[serde(default)]
    pub ended_ms: u64,
    pub completion_ns: Vec<u64>,
    pub bytes_needed: u64,
    pub bytes_delivered: u64,
    /// The job's own frame bytes per RTSW uplink (forwarding model), over its lifetime.
    pub uplink_bytes: BTreeMap<String, u64>,
    /// Its slow steps and who it shared them with.
    pub shared_steps: Vec<SharedStep>,
}

/// The summary of a `fabric run --jobs` (schema `fabric.jobs/1`), `results/jobs/RUN.json`.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct JobsSummary {
    pub schema: String,
    pub run_id: String,
    pub testbed: String,
    pub hash: String,
    /// `independent` (each job its own engine and pace) or `rounds` (steps aligned).
    #[serde(default = "rounds_mode")]
    pub mode: String,
    /// Steps the endpoints ran: shared rounds (`rounds`), or every job's steps (`independent`).
    pub rounds: usize,
    /// Times the controller placed the running jobs' flows (te mode: at every start and end).
    pub te_placements: usize,
    pub jobs: Vec<JobSummary>,
    /// Every RTSW uplink's bytes as its switch counted them over the whole run, and the jobs'
    /// predicted bytes on it summed.
    pub uplinks_counted: BTreeMap<String, u64>,
    pub uplinks_predicted: BTreeMap<String, u64>,
    /// Packets the endpoints retransmitted (their bytes are counted by the switches, not
    /// predicted).
    pub retransmitted_packets: u64,
}

fn rounds_mode() -> String {
    JobsMode::Rounds.as_str().into()
}

/// What a jobs run produced.
pub struct JobsOutcome {
    pub summary: JobsSummary,
    pub results: Vec<RunResult>,
    pub records: Vec<JobRecord>,
}

/// A job while it runs.
#[derive(Default)]
pub(super) struct Live {
    pub(super) started: Option<(JobClock, StatsReport, Option<Vec<String>>)>,
    pub(super) done: bool,
    /// Steps done over all iterations.
    pub(super) next: usize,
    pub(super) step_ns: Vec<u64>,
    pub(super) iterations: Vec<IterationResult>,
    pub(super) loads: Vec<StepLoad>,
    pub(super) flows: Vec<FlowResult>,
    pub(super) hosts: Vec<HostResult>,
    pub(super) bytes_needed: u64,
    pub(super) bytes_delivered: u64,
    pub(super) iteration_uplinks: Vec<Vec<UplinkLoad>>,
    pub(super) last_iteration_uplinks: Vec<Vec<UplinkLoad>>,
    pub(super) uplinks_before: Option<UplinkBytes>,
    pub(super) uplinks: Vec<UplinkLoad>,
    /// Completion of each finished iteration (the results keep theirs once the job ends).
    pub(super) completions: Vec<u64>,
    /// When its first step began and its last ended, ms after the run's start.
    pub(super) started_at_ms: u64,
    pub(super) ended_at_ms: u64,
}

/// Directed RTSW uplink (forwarding model's id) -> `rtsw->peer` label and the counter's
/// (rtsw, port) names.
pub(super) fn uplink_labels(fabric: &SimFabric) -> HashMap<u32, (String, String, String)> {
    let plan = &fabric.plan;
    let mut out = HashMap::new();
    for r in plan.switches().filter(|&s| plan.nodes[s].role == Role::Rtsw) {
        for p in plan.uplinks(r) {
            let port = &plan.nodes[r].ports[p];
            let (rn, peer) = (&plan.nodes[r].name, &plan.nodes[port.peer_node].name);
            out.insert(route::directed(fabric, r, p), (format!("{rn}->{peer}"), rn.clone(), port.ifname.clone()));
        }
    }
    out
}

/// Per job name, its frame bytes per uplink label in a round of `transfers` (`owner[i]`: the job
/// of transfer i), from the forwarding model.
pub fn predict_round(
    fabric: &SimFabric,
    labels: &HashMap<u32, (String, String, String)>,
    transfers: &[HostTransfer],
    shape: &StepShape,
    owner: &[String],
    endpoint: &EndpointOptions,
) -> Result<LinkBytes> {
    let mut out = LinkBytes::new();
    for f in step_flows_shaped(&fabric.plan, transfers, shape, endpoint) {
        let job = out.entry(owner[f.transfer].clone()).or_default();
        route::trace(
            fabric,
            &f,
            |_| {},
            |l| {
                if let Some((label, _, _)) = labels.get(&l) {
                    *job.entry(label.clone()).or_default() += f.frame_bytes;
                }
            },
        )?;
    }
    Ok(out)
}

/// A flow as TE places it: (source host, destination host, UDP source port, destination QP).
pub(super) type TeKey = (NodeId, NodeId, u16, u32);

/// The controller places `by_key` (each flow's frame bytes), installs the placement in every
/// switch and in the forwarding model.
pub(super) fn install_te(state: &State, fabric: &mut SimFabric, by_key: HashMap<TeKey, u64>) -> Result<()> {
    let flows: Vec<crate::te::TeFlow> = by_key
        .into_iter()
        .map(|((src, dst, sport, dest_qp), bytes)| crate::te::TeFlow { src, dst, sport, dest_qp, bytes })
        .collect();
    let placement = crate::te::install(&state.plan.topology.prefix, &flows)?;
    fabric.te =
        placement.entries.into_iter().flat_map(|(n, es)| es.into_iter().map(move |(k, e)| ((n, k), e))).collect();
    Ok(())
}

/// Each transfer's QPs: its job's (`owner[i]`: the job of transfer i); and the NIC rate of
/// each slow NIC among the jobs' hosts (slowed by `time_scale`, as the links' rates are).
pub(super) fn job_shape(jobs: &[PlannedJob], owner: &[usize], time_scale: u64) -> StepShape {
    let nic_rate_bps = owner
        .iter()
        .filter_map(|&j| jobs[j].slow_nic.as_ref())
        .map(|(host, _, gbps)| (*host, ((gbps * 1e9) as u64 / time_scale.max(1)).max(1)))
        .collect();
    StepShape { qps: owner.iter().map(|&j| jobs[j].options.endpoint.qps).collect(), nic_rate_bps }
}

/// What a run counted besides the jobs' results.
pub(super) struct Tally {
    pub rounds: usize,
    pub te_placements: usize,
    pub predicted_total: BTreeMap<String, u64>,
    pub retransmitted: u64,
    pub counted_before: UplinkBytes,
    /// Per job, when it started and ended (ms after the run's start).
    pub times: Vec<(u64, u64)>,
}

/// The run's summary from the finished jobs' results and records (in any order).
pub(super) fn summarize(
    state: &State,
    jp: &JobsPlan,
    run_id: &str,
    t: Tally,
    results: Vec<RunResult>,
    mut records: Vec<JobRecord>,
) -> Result<JobsOutcome> {
    let plan = &state.plan;
    let names: Vec<String> = jp.jobs.iter().map(|j| j.name.clone()).collect();
    let counted = UplinkBytes::read_uplinks(state)?.since(&t.counted_before);
    let uplinks_counted = counted_by_label(plan, &counted);
    records.sort_by_key(|r| names.iter().position(|n| Some(n) == r.name.as_ref()));
    let summary = JobsSummary {
        schema: JOBS_SCHEMA.into(),
        run_id: run_id.to_string(),
        testbed: plan.topology.prefix.clone(),
        hash: jp.hash.as_str().into(),
        mode: jp.mode.as_str().into(),
        rounds: t.rounds,
        te_placements: t.te_placements,
        jobs: records
            .iter()
            .zip(&results)
            .zip(&jp.jobs)
            .zip(&t.times)
            .map(|(((rec, res), job), &(started_ms, ended_ms))| JobSummary {
                name: job.name.clone(),
                job_id: rec.job_id.clone(),
                placement: res.placement.clone(),
                start_ms: job.start_ms,
                started_ms,
                ended_ms,
                completion_ns: res.iterations.iter().map(|i| i.completion_ns).collect(),
                bytes_needed: res.bytes_needed,
                bytes_delivered: res.bytes_delivered,
                uplink_bytes: rec.uplink_bytes.clone(),
                shared_steps: rec.shared_steps.clone(),
            })
            .collect(),
        uplinks_counted,
        uplinks_predicted: t.predicted_total,
        retransmitted_packets: t.retransmitted,
    };
    Ok(JobsOutcome { summary, results, records })
}

/// One finished step of `job` into its `l`: bytes, hosts, step time, loads (`round`: what every
/// job ran meanwhile, by the forwarding model), and the iteration's completion after its last
/// step. Returns the packets the step's flows retransmitted.
#[allow(clippy::too_many_arguments)]
pub(super) fn record_step(
    plan: &Plan,
    job: &PlannedJob,
    l: &mut Live,
    mine: Vec<FlowResult>,
    step_hosts: &[HostResult],
    duration: u64,
    measured: &[UplinkLoad],
    round: &LinkBytes,
) -> u64 {
    l.bytes_needed += mine.iter().map(|f| f.bytes).sum::<u64>();
    l.bytes_delivered += mine.iter().map(|f| f.bytes_received).sum::<u64>();
    let retransmitted = mine.iter().map(|f| f.retransmitted).sum::<u64>();
    let hosts_of_job: Vec<String> = job.hosts.iter().map(|&h| plan.nodes[h].name.clone()).collect();
    let step_hosts: Vec<HostResult> = step_hosts.iter().filter(|h| hosts_of_job.contains(&h.host)).cloned().collect();
    accumulate_hosts(&mut l.hosts, &step_hosts);
    let steps = job.steps.len();
    let iteration = (l.next / steps) as u32 + 1;
    if l.next.is_multiple_of(steps) {
        l.flows.clear();
    }
    l.flows.extend(mine);
    l.step_ns.push(duration);
    l.iteration_uplinks.push(measured.to_vec());
    l.loads.push(StepLoad { iteration, step: l.next % steps, duration_ns: duration, round: round.clone() });
    l.next += 1;
    if l.next.is_multiple_of(steps) {
        let step_ns = std::mem::take(&mut l.step_ns);
        let completion_ns: u64 = step_ns.iter().sum();
        let modelled_completion_ns = completion_ns as f64 / plan.topology.time_scale.max(1) as f64;
        l.iterations.push(IterationResult { completion_ns, modelled_completion_ns, step_ns });
        l.completions.push(completion_ns);
        l.last_iteration_uplinks = std::mem::take(&mut l.iteration_uplinks);
    }
    retransmitted
}

/// Host links degraded for slow NICs, put back as they were (a degradation of the user's
/// included) when the last job that slowed them ends, or when the run fails. Jobs that share a
/// host (`mode = "rounds"`) may slow one link together: it stays slow until both have ended.
pub(super) struct SlowNics {
    prefix: String,
    links: SlowLinks,
}

impl SlowNics {
    pub(super) fn new(prefix: &str) -> Self {
        SlowNics { prefix: prefix.to_string(), links: SlowLinks::default() }
    }

    /// Job `job`'s slow NIC: link `link` at `rate_gbps`.
    pub(super) fn degrade(&mut self, job: usize, link: &str, rate_gbps: f64) -> Result<()> {
        let (set, before) = testbed::fault::slow_for_a_while(&self.prefix, link, rate_gbps).context("slow NIC")?;
        self.links.slowed(job, link, set, before);
        Ok(())
    }

    /// Job `job` ended: its link is put back once no other job's slow NIC holds it.
    pub(super) fn restore(&mut self, job: usize, link: &str) -> Result<()> {
        let Some((set, before)) = self.links.ended(job, link) else { return Ok(()) };
        testbed::fault::put_back(&self.prefix, link, set, before).map(drop).context("slow NIC")
    }
}

impl Drop for SlowNics {
    fn drop(&mut self) {
        for (link, s) in std::mem::take(&mut self.links.0) {
            if let Err(e) = testbed::fault::put_back(&self.prefix, &link, s.set, s.before) {
                log::warn!("restoring the slow NIC's link {link}: {e:#}");
            }
        }
    }
}

/// Which jobs' slow NICs hold each link, and what to put back when the last ends.
#[derive(Default)]
struct SlowLinks(BTreeMap<String, Slowed>);

/// A link that slow NICs slowed.
struct Slowed {
    /// The jobs whose slow NIC it is.
    jobs: Vec<usize>,
    /// The last degradation they set.
    set: Degradation,
    /// What was in force before them (or what the user put on it between them).
    before: Degradation,
}

impl SlowLinks {
    /// Job `job` set `set` on `link`, which had `before`.
    fn slowed(&mut self, job: usize, link: &str, set: Degradation, before: Degradation) {
        match self.0.get_mut(link) {
            Some(slowed) => {
                // Another job slowed it already; a degradation the user put on it since is what
                // comes back at the end.
                if before != slowed.set {
                    slowed.before = before;
                }
                slowed.jobs.push(job);
                slowed.set = set;
            }
            None => {
                self.0.insert(link.to_string(), Slowed { jobs: vec![job], set, before });
            }
        }
    }

    /// Job `job` ended: what to put back on `link` (the last degradation set, to check it is
    /// still in force, and the one before) if no other job holds it.
    fn ended(&mut self, job: usize, link: &str) -> Option<(Degradation, Degradation)> {
        let slowed = self.0.get_mut(link)?;
        slowed.jobs.retain(|&j| j != job);
        if !slowed.jobs.is_empty() {
            return None;
        }
        self.0.remove(link).map(|s| (s.set, s.before))
    }
}

/// Every job's progress and bytes so far, for the exporter (`job` label).
pub(super) fn gauges(jp: &JobsPlan, live: &[&Live], names: &[String], run_id: &str) -> JobsGauges {
    let jobs = jp
        .jobs
        .iter()
        .zip(live)
        .zip(names)
        .map(|((job, l), name)| JobGauge {
            job: name.clone(),
            job_id: JobClock::named_id(run_id, name),
            steps_done: l.next as u64,
            steps: (job.steps.len() * job.options.iterations as usize) as u64,
            done: l.done,
            completion_ns: l.completions.clone(),
            bytes_delivered: l.bytes_delivered,
            uplink_bytes: job_totals(name, &l.loads),
            stopped: false,
        })
        .collect();
    JobsGauges::of_this_process(jobs)
}

/// The counters' uplink bytes under the forwarding model's labels (`rtsw->peer`).
fn counted_by_label(plan: &Plan, loads: &[UplinkLoad]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for u in loads {
        let Some(r) = plan.node_by_name(&u.rtsw) else { continue };
        for (port, bytes) in &u.tx_bytes {
            let p = plan.nodes[r].ports.iter().find(|p| &p.ifname == port);
            if let Some(p) = p {
                out.insert(format!("{}->{}", u.rtsw, plan.nodes[p.peer_node].name), *bytes);
            }
        }
    }
    out
}

/// A finished job's result (`fabric.run/2`) and record (`fabric.job/1`, with its uplink bytes
/// and shared steps).
pub(super) fn finish(
    state: &State,
    jp: &JobsPlan,
    j: usize,
    l: &mut Live,
    name: &str,
) -> Result<(RunResult, JobRecord)> {
    let plan = &state.plan;
    let job = &jp.jobs[j];
    let (clock, stats_before, at_start) = l.started.take().expect("started");
    let stats_after = crate::telemetry::stats::collect(state)?;
    let late = late_wake_share(&l.hosts);
    let mut opts = job.options.clone();
    opts.endpoint.time_scale = plan.topology.time_scale;
    let mut result = RunResult {
        schema: RESULTS_SCHEMA,
        endpoints: Endpoints::Fabric,
        job_id: Some(clock.id.clone()),
        testbed: plan.topology.prefix.clone(),
        placement: job.hosts.iter().map(|&h| plan.nodes[h].name.clone()).collect(),
        hash: jp.hash.as_str().into(),
        iterations: std::mem::take(&mut l.iterations),
        flows: std::mem::take(&mut l.flows),
        balance: balance(&l.uplinks),
        uplinks: std::mem::take(&mut l.uplinks),
        bytes_needed: l.bytes_needed,
        bytes_delivered: l.bytes_delivered,
        achieved_over_intended: None,
        congestion: stats_after.congestion.since(&stats_before.congestion),
        diagnosis: Vec::new(),
        te_flows: None,
        cpu_limited: late.map(|s| s > CPU_BOUND_LATE_SHARE),
        late_wake_share: late,
        cpu_wait_share: cpu_wait_share(&l.hosts),
        host_cpu_busy: None,
        cc: opts.endpoint.cc,
        transport: opts.endpoint.transport,
        time_scale: opts.endpoint.time_scale,
        hosts: std::mem::take(&mut l.hosts),
        cts_bound_bytes: None,
        extra: NoExtras {},
        options: opts,
    };
    let faults = JobFaults {
        log: State::load(&plan.topology.prefix).map(|s| s.faults).unwrap_or_default(),
        at_start: at_start.unwrap_or_default(),
    };
    let mut record =
        clock.finish(&result, &stats_before, &stats_after, std::mem::take(&mut l.last_iteration_uplinks), &faults);
    record.name = Some(name.to_string());
    record.collective.clone_from(&job.workload_label);
    record.uplink_bytes = job_totals(name, &l.loads);
    record.shared_steps = attribute(name, &l.loads);
    record.straggler = job.straggler.map(|(h, factor)| Straggler { host: plan.nodes[h].name.clone(), factor });
    record.diagnosis = crate::run::job::diagnose(&record);
    result.diagnosis = record.diagnosis.clone();
    record.save()?;
    Ok((result, record))
}

/// Labels of the links down or degraded in `state` (as `fabric run` records them).
pub(super) fn faulty_links(state: &State) -> Vec<String> {
    crate::run::faulty_links(state)
}

impl JobsSummary {
    pub fn path(run_id: &str) -> std::path::PathBuf {
        crate::run::job::jobs_dir().join(format!("{run_id}.json"))
    }

    pub fn save(&self) -> Result<()> {
        std::fs::create_dir_all(crate::run::job::jobs_dir())?;
        let path = Self::path(&self.run_id);
        std::fs::write(&path, serde_json::to_vec_pretty(self)?).with_context(|| format!("writing {}", path.display()))
    }

    /// A run summary by id or path, if that is what the file holds.
    pub fn load(id_or_path: &str) -> Option<Self> {
        let path = if id_or_path.ends_with(".json") { id_or_path.into() } else { Self::path(id_or_path) };
        let s: JobsSummary = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        (s.schema == JOBS_SCHEMA).then_some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two jobs slowing one link (rounds that share a host): put back once, when the last of
    /// them ends, whichever order they end in; a degradation of the user's between them is
    /// what comes back.
    #[test]
    fn a_link_slowed_by_two_jobs_comes_back_when_both_have_ended() {
        let none = Degradation::NONE;
        let rate = |r: f64| Degradation { rate_gbps: Some(r), ..Degradation::NONE };
        for first_to_end in [0, 1] {
            let mut links = SlowLinks::default();
            links.slowed(0, "h:p", rate(100.0), none);
            links.slowed(1, "h:p", rate(50.0), rate(100.0));
            assert_eq!(links.ended(first_to_end, "h:p"), None, "the other job still holds it");
            assert_eq!(links.ended(1 - first_to_end, "h:p"), Some((rate(50.0), none)));
            assert!(links.0.is_empty());
        }
        let mut links = SlowLinks::default();
        links.slowed(0, "h:p", rate(100.0), none);
        // The user degraded it to 200 between the two jobs.
        links.slowed(1, "h:p", rate(50.0), rate(200.0));
        links.slowed(2, "h:q", rate(10.0), none);
        assert_eq!(links.ended(0, "h:p"), None);
        assert_eq!(links.ended(2, "h:q"), Some((rate(10.0), none)), "another link is its own");
        assert_eq!(links.ended(1, "h:p"), Some((rate(50.0), rate(200.0))));
        assert_eq!(links.ended(1, "h:p"), None, "ended twice: nothing left to put back");
    }
}
