//! Runs the jobs of a [`JobsPlan`] on the testbed together.
//!
//! The model: jobs advance in rounds. In a round every running job runs its next step, all of
//! them at once on the same endpoints (a host carrying ranks of several jobs runs all their QPs),
//! and the round ends when every transfer of it is acknowledged. A job's step time is its own
//! last transfer's completion in the round, so a job slowed by a neighbour shows it, but a job
//! whose step ended early waits for the round before its next step (the rounds keep the jobs'
//! steps aligned, which is what makes their interference reproducible). A job joins at the first
//! round that starts after its `start_ms`; in `te` mode the controller places the flows of every
//! running job together, again whenever a job starts or ends.
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use fabric_common::config::HashMode;
use serde::Serialize;

use super::{
    JobsPlan, PlannedJob, Straggler,
    interference::{LinkBytes, SharedStep, StepLoad, attribute, job_totals},
    straggler_delay_ns,
};
use crate::{
    endpoint::EndpointOptions,
    endpoint::engine::{FlowResult, HostResult, RunClock, StepShape, run_step_shaped},
    forwarding::{fabric::SimFabric, flows::step_flows_shaped, route},
    model::plan::{NodeId, Plan, Role},
    model::workload::{HostTransfer, on_hosts},
    run::job::{JobClock, JobFaults, JobRecord},
    run::result::{CPU_BOUND_LATE_SHARE, late_wake_share},
    run::{Endpoints, IterationResult, NoExtras, RESULTS_SCHEMA, RunResult, accumulate_hosts, balance},
    state::State,
    telemetry::jobs::{JobGauge, JobsGauges},
    telemetry::stats::{StatsReport, UplinkBytes, UplinkLoad},
    testbed,
};

pub const JOBS_SCHEMA: &str = "fabric.jobs/1";

/// One job's line in the run summary.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct JobSummary {
    pub name: String,
    pub job_id: String,
    pub placement: Vec<String>,
    pub start_ms: u64,
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

/// What a jobs run produced.
pub struct JobsOutcome {
    pub summary: JobsSummary,
    pub results: Vec<RunResult>,
    pub records: Vec<JobRecord>,
}

/// A job while it runs.
#[derive(Default)]
struct Live {
    started: Option<(JobClock, StatsReport, Option<Vec<String>>)>,
    done: bool,
    /// Steps done over all iterations.
    next: usize,
    step_ns: Vec<u64>,
    iterations: Vec<IterationResult>,
    loads: Vec<StepLoad>,
    flows: Vec<FlowResult>,
    hosts: Vec<HostResult>,
    bytes_needed: u64,
    bytes_delivered: u64,
    iteration_uplinks: Vec<Vec<UplinkLoad>>,
    last_iteration_uplinks: Vec<Vec<UplinkLoad>>,
    uplinks_before: Option<UplinkBytes>,
    uplinks: Vec<UplinkLoad>,
    /// Completion of each finished iteration (the results keep theirs once the job ends).
    completions: Vec<u64>,
}

/// Directed RTSW uplink (forwarding model's id) -> `rtsw->peer` label and the counter's
/// (rtsw, port) names.
fn uplink_labels(fabric: &SimFabric) -> HashMap<u32, (String, String, String)> {
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

/// The running jobs' flows until the next job ends (while the set of running jobs holds, the
/// rounds are known), placed together by the controller and installed in every switch.
fn place_running(
    state: &State,
    fabric: &mut SimFabric,
    plan_jobs: &[PlannedJob],
    live: &[Live],
    running: &[usize],
    endpoint: &EndpointOptions,
) -> Result<()> {
    let plan = &state.plan;
    let left = |j: usize| plan_jobs[j].steps.len() * plan_jobs[j].options.iterations as usize - live[j].next;
    let rounds = running.iter().map(|&j| left(j)).min().unwrap_or(0);
    let mut by_key: HashMap<(NodeId, NodeId, u16, u32), u64> = HashMap::new();
    for k in 0..rounds {
        let (merged, owner) = round_transfers(plan_jobs, live, running, k);
        for f in step_flows_shaped(plan, &merged, &job_shape(plan_jobs, &owner), endpoint) {
            *by_key.entry((f.src, f.dst, f.sport, f.dest_qp)).or_default() += f.frame_bytes;
        }
    }
    let flows: Vec<crate::te::TeFlow> = by_key
        .into_iter()
        .map(|((src, dst, sport, dest_qp), bytes)| crate::te::TeFlow { src, dst, sport, dest_qp, bytes })
        .collect();
    let placement = crate::te::install(state, &flows)?;
    fabric.te =
        placement.entries.into_iter().flat_map(|(n, es)| es.into_iter().map(move |(k, e)| ((n, k), e))).collect();
    Ok(())
}

/// Each transfer's QPs: its job's (`owner[i]`: the job of transfer i).
fn job_shape(jobs: &[PlannedJob], owner: &[usize]) -> StepShape {
    StepShape { qps: owner.iter().map(|&j| jobs[j].options.endpoint.qps).collect() }
}

/// The transfers of the round `ahead` rounds from now: each running job's step, in job order.
fn round_transfers(
    jobs: &[PlannedJob],
    live: &[Live],
    running: &[usize],
    ahead: usize,
) -> (Vec<HostTransfer>, Vec<usize>) {
    let mut merged = Vec::new();
    let mut owner = Vec::new();
    for &j in running {
        let steps = &jobs[j].steps;
        let t = on_hosts(&steps[(live[j].next + ahead) % steps.len()], &jobs[j].hosts);
        owner.extend(std::iter::repeat_n(j, t.len()));
        merged.extend(t);
    }
    (merged, owner)
}

/// Runs every job of `jp` on the testbed; each job's result and record, and the run's summary.
pub fn run_jobs(state: &State, jp: &JobsPlan, quiet: bool) -> Result<JobsOutcome> {
    crate::sys::netns::require_capabilities()?;
    let plan = &state.plan;
    testbed::set_hash_mode(state, jp.hash, jp.hash_seed)?;
    let mut fabric = SimFabric::from_controller(plan, &state.down_links);
    fabric.set_hash(jp.hash, jp.hash_seed);
    let labels = uplink_labels(&fabric);
    let mut endpoint = jp.jobs[0].options.endpoint.clone();
    endpoint.time_scale = plan.topology.time_scale;
    let link_rate = crate::endpoint::engine::host_link_rate_bps(plan, plan.topology.time_scale);
    let run_start = Instant::now();
    let clock = RunClock { start: run_start };
    let run_clock = JobClock::start(plan);
    let names: Vec<String> = jp.jobs.iter().map(|j| j.name.clone()).collect();
    let mut live: Vec<Live> = jp.jobs.iter().map(|_| Live::default()).collect();
    let counted_before = UplinkBytes::read_uplinks(state)?;
    let (mut rounds, mut te_placements, mut previous) = (0, 0, Vec::new());
    let mut records = Vec::new();
    let mut results: Vec<Option<RunResult>> = jp.jobs.iter().map(|_| None).collect();
    let mut predicted_total: BTreeMap<String, u64> = BTreeMap::new();
    let mut retransmitted = 0;
    let mut slow_nics = SlowNics { prefix: plan.topology.prefix.clone(), active: Vec::new() };
    loop {
        gauges(jp, &live, &names, &run_clock.id).write(&plan.topology.prefix);
        let now_ms = run_start.elapsed().as_millis() as u64;
        if live.iter().all(|l| l.done) {
            break;
        }
        let running: Vec<usize> =
            (0..jp.jobs.len()).filter(|&j| !live[j].done && jp.jobs[j].start_ms <= now_ms).collect();
        if running.is_empty() {
            let next = jp.jobs.iter().zip(&live).filter(|(_, l)| !l.done).map(|(j, _)| j.start_ms).min().unwrap_or(0);
            std::thread::sleep(Duration::from_millis(next.saturating_sub(now_ms)));
            continue;
        }
        for &j in &running {
            if live[j].started.is_none() {
                let clock = JobClock::start_named(&run_clock.id, &jp.jobs[j].name);
                live[j].started = Some((clock, crate::telemetry::stats::collect(state)?, Some(faulty_links(state))));
                live[j].uplinks_before = Some(UplinkBytes::read(state)?);
                if let Some((link, rate)) = &jp.jobs[j].slow_nic {
                    slow_nics.degrade(link, *rate)?;
                }
                if !quiet {
                    println!("job {} starts at +{:.2} s", jp.jobs[j].name, run_start.elapsed().as_secs_f64());
                }
            }
        }
        if running != previous && jp.hash == HashMode::Te {
            place_running(state, &mut fabric, &jp.jobs, &live, &running, &endpoint)?;
            te_placements += 1;
        }
        previous.clone_from(&running);
        let (merged, owner) = round_transfers(&jp.jobs, &live, &running, 0);
        let owner_names: Vec<String> = owner.iter().map(|&j| names[j].clone()).collect();
        let shape = job_shape(&jp.jobs, &owner);
        let predicted = predict_round(&fabric, &labels, &merged, &shape, &owner_names, &endpoint)?;
        for l in predicted.values() {
            for (k, b) in l {
                *predicted_total.entry(k.clone()).or_default() += b;
            }
        }
        // The straggler model (`straggler_delay_ns`): the round waits for the slowest
        // straggler's extra compute before anyone sends; its job's step counts the wait.
        let delays: Vec<u64> = running
            .iter()
            .map(|&j| {
                let job = &jp.jobs[j];
                job.straggler
                    .map_or(0, |(_, f)| straggler_delay_ns(&job.steps[live[j].next % job.steps.len()], f, link_rate))
            })
            .collect();
        // Real wall time in which nobody of the round sends; only the straggler's job counts it.
        std::thread::sleep(Duration::from_nanos(delays.iter().copied().max().unwrap_or(0)));
        let before = UplinkBytes::read_uplinks(state)?;
        let r = run_step_shaped(plan, &merged, &shape, &endpoint, &clock).context("a round of the jobs")?;
        let measured = UplinkBytes::read_uplinks(state)?.since(&before);
        rounds += 1;
        for (k, &j) in running.iter().enumerate() {
            let job = &jp.jobs[j];
            let l = &mut live[j];
            let mine: Vec<&FlowResult> = r.flows.iter().zip(&owner).filter(|(_, o)| **o == j).map(|(f, _)| f).collect();
            let duration = mine.iter().map(|f| f.completion_ns).max().unwrap_or(0) + delays[k];
            l.bytes_needed += mine.iter().map(|f| f.bytes).sum::<u64>();
            l.bytes_delivered += mine.iter().map(|f| f.bytes_received).sum::<u64>();
            retransmitted += mine.iter().map(|f| f.retransmitted).sum::<u64>();
            let hosts_of_job: Vec<String> = job.hosts.iter().map(|&h| plan.nodes[h].name.clone()).collect();
            let step_hosts: Vec<HostResult> =
                r.hosts.iter().filter(|h| hosts_of_job.contains(&h.host)).cloned().collect();
            accumulate_hosts(&mut l.hosts, &step_hosts);
            let steps = job.steps.len();
            let iteration = (l.next / steps) as u32 + 1;
            if l.next.is_multiple_of(steps) {
                l.flows.clear();
            }
            l.flows.extend(mine.into_iter().cloned());
            l.step_ns.push(duration);
            l.iteration_uplinks.push(measured.clone());
            l.loads.push(StepLoad { iteration, step: l.next % steps, duration_ns: duration, round: predicted.clone() });
            l.next += 1;
            if l.next.is_multiple_of(steps) {
                let step_ns = std::mem::take(&mut l.step_ns);
                let completion_ns: u64 = step_ns.iter().sum();
                let modelled_completion_ns = completion_ns as f64 / plan.topology.time_scale.max(1) as f64;
                l.iterations.push(IterationResult { completion_ns, modelled_completion_ns, step_ns });
                l.completions.push(completion_ns);
                l.last_iteration_uplinks = std::mem::take(&mut l.iteration_uplinks);
            }
            if l.next == steps * job.options.iterations as usize {
                l.done = true;
                l.uplinks = UplinkBytes::read(state)?.since(l.uplinks_before.as_ref().expect("started"));
                if !quiet {
                    println!("job {} ends at +{:.2} s", job.name, run_start.elapsed().as_secs_f64());
                }
                if let Some((link, _)) = &job.slow_nic {
                    slow_nics.restore(link)?;
                }
                let (result, record) = finish(state, jp, j, l, &names[j])?;
                results[j] = Some(result);
                records.push(record);
            }
        }
    }
    gauges(jp, &live, &names, &run_clock.id).write(&plan.topology.prefix);
    let counted = UplinkBytes::read_uplinks(state)?.since(&counted_before);
    let uplinks_counted = counted_by_label(plan, &counted);
    let results: Vec<RunResult> = results.into_iter().map(|r| r.expect("every job finished")).collect();
    records.sort_by_key(|r| names.iter().position(|n| Some(n) == r.name.as_ref()));
    let summary = JobsSummary {
        schema: JOBS_SCHEMA.into(),
        run_id: run_clock.id.clone(),
        testbed: plan.topology.prefix.clone(),
        hash: jp.hash.as_str().into(),
        rounds,
        te_placements,
        jobs: records
            .iter()
            .zip(&results)
            .zip(&jp.jobs)
            .map(|((rec, res), job)| JobSummary {
                name: job.name.clone(),
                job_id: rec.job_id.clone(),
                placement: res.placement.clone(),
                start_ms: job.start_ms,
                completion_ns: res.iterations.iter().map(|i| i.completion_ns).collect(),
                bytes_needed: res.bytes_needed,
                bytes_delivered: res.bytes_delivered,
                uplink_bytes: rec.uplink_bytes.clone(),
                shared_steps: rec.shared_steps.clone(),
            })
            .collect(),
        uplinks_counted,
        uplinks_predicted: predicted_total,
        retransmitted_packets: retransmitted,
    };
    Ok(JobsOutcome { summary, results, records })
}

/// Host links degraded for slow NICs, restored when their job ends, or when the run fails.
struct SlowNics {
    prefix: String,
    active: Vec<String>,
}

impl SlowNics {
    fn degrade(&mut self, link: &str, rate_gbps: f64) -> Result<()> {
        testbed::fault::degrade(&self.prefix, link, Some(rate_gbps), None, 0).context("slow NIC")?;
        self.active.push(link.to_string());
        Ok(())
    }

    fn restore(&mut self, link: &str) -> Result<()> {
        self.active.retain(|l| l != link);
        testbed::fault::restore(&self.prefix, link).map(|_| ()).context("slow NIC")
    }
}

impl Drop for SlowNics {
    fn drop(&mut self) {
        for l in std::mem::take(&mut self.active) {
            if let Err(e) = testbed::fault::restore(&self.prefix, &l) {
                log::warn!("restoring the slow NIC's link {l}: {e:#}");
            }
        }
    }
}

/// Every job's progress and bytes so far, for the exporter (`job` label).
fn gauges(jp: &JobsPlan, live: &[Live], names: &[String], run_id: &str) -> JobsGauges {
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
        })
        .collect();
    JobsGauges { pid: std::process::id(), jobs }
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
fn finish(state: &State, jp: &JobsPlan, j: usize, l: &mut Live, name: &str) -> Result<(RunResult, JobRecord)> {
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
fn faulty_links(state: &State) -> Vec<String> {
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

/// The run's table: each job's completion and what it shared.
pub fn print(s: &JobsSummary) {
    println!("run {} on {}: {} jobs, hash {}, {} rounds", s.run_id, s.testbed, s.jobs.len(), s.hash, s.rounds);
    println!("{:<12} {:>8} {:>14} {:>12}  job id", "job", "start ms", "completion ms", "delivered");
    for j in &s.jobs {
        let c: Vec<String> = j.completion_ns.iter().map(|c| format!("{:.1}", *c as f64 / 1e6)).collect();
        let ok = if j.bytes_delivered == j.bytes_needed { "all" } else { "SHORT" };
        println!("{:<12} {:>8} {:>14} {:>12}  {}", j.name, j.start_ms, c.join(","), ok, j.job_id);
        for st in &j.shared_steps {
            println!("  - {}", st.sentence(&j.name));
        }
    }
}

/// `fabric report ID`: a run of several jobs (every job's record), or one job.
pub fn report(id: &str) -> Result<()> {
    match JobsSummary::load(id) {
        Some(s) => {
            print(&s);
            for j in &s.jobs {
                println!();
                crate::run::job::print(&JobRecord::load(&j.job_id)?);
            }
        }
        None => crate::run::job::print(&JobRecord::load(id)?),
    }
    Ok(())
}
