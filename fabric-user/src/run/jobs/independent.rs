//! The independent mode of `fabric run --jobs`: each job runs as a cluster runs it.
//!
//! Design: every job has its own thread, which waits for the job's `start_ms`, then runs the
//! job's steps back to back, each on an engine of its own ([`run_step_shaped`]: a thread per host
//! of the job, the job's own QPs and QP count) against the one shared fabric. Nothing aligns the
//! jobs: a job starts while another is mid-step, and a fast job runs ahead of a slow one. A host
//! runs one engine at a time (its RoCE port), so the jobs of this mode hold disjoint hosts
//! ([`super::JobsFile::resolve`] refuses others; the rounds mode runs jobs that share hosts).
//!
//! Shared between the job threads, under one lock: the forwarding model (and the TE placement
//! it mirrors), the running jobs' current step loads, the run's counts and the degraded links
//! of slow NICs. In `te` mode the controller places the flows of every running job's remaining
//! steps together whenever a job starts or ends. Each step's predicted uplink bytes are the
//! forwarding model's at the step's start; the neighbours a step is attributed to are the jobs
//! whose steps were in flight when it started.
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use fabric_common::config::HashMode;

use super::{
    JobsPlan,
    interference::LinkBytes,
    shared::{
        JobsOutcome, Live, Tally, TeKey, finish, gauges, install_te, job_shape, predict_round, record_step, summarize,
        uplink_labels,
    },
    straggler_delay_ns,
};
use crate::{
    endpoint::engine::{RunClock, host_link_rate_bps, run_step_shaped},
    forwarding::{fabric::SimFabric, flows::step_flows_shaped},
    model::workload::on_hosts,
    run::RunResult,
    run::job::{JobClock, JobRecord},
    state::State,
    telemetry::stats::UplinkBytes,
    testbed,
};

/// What the job threads share.
struct Shared {
    fabric: SimFabric,
    /// Each running job's step in flight: its predicted bytes per uplink.
    in_flight: BTreeMap<usize, BTreeMap<String, u64>>,
    te_placements: usize,
    steps_run: usize,
    predicted_total: BTreeMap<String, u64>,
    retransmitted: u64,
    slow_nics: super::shared::SlowNics,
}

/// Everything a job thread needs.
struct Run<'a> {
    state: &'a State,
    jp: &'a JobsPlan,
    names: Vec<String>,
    labels: HashMap<u32, (String, String, String)>,
    clock: RunClock,
    run_id: String,
    quiet: bool,
    shared: Mutex<Shared>,
    live: Vec<Mutex<Live>>,
    failed: AtomicBool,
}

/// A job stopped because another job failed (that one's error says why).
#[derive(Debug, thiserror::Error)]
#[error("another job failed")]
struct AnotherJobFailed;

/// Runs every job of `jp` on its own engine and thread; the jobs must hold disjoint hosts.
pub fn run_independent(state: &State, jp: &JobsPlan, quiet: bool) -> Result<JobsOutcome> {
    let plan = &state.plan;
    testbed::set_hash_mode(state, jp.hash, jp.hash_seed)?;
    let mut fabric = SimFabric::from_controller(plan, &state.down_links);
    fabric.set_hash(jp.hash, jp.hash_seed);
    let counted_before = UplinkBytes::read_uplinks(state)?;
    let run = Run {
        state,
        jp,
        names: jp.jobs.iter().map(|j| j.name.clone()).collect(),
        labels: uplink_labels(&fabric),
        clock: RunClock { start: Instant::now() },
        run_id: JobClock::start(plan).id,
        quiet,
        shared: Mutex::new(Shared {
            fabric,
            in_flight: BTreeMap::new(),
            te_placements: 0,
            steps_run: 0,
            predicted_total: BTreeMap::new(),
            retransmitted: 0,
            slow_nics: super::shared::SlowNics::new(&plan.topology.prefix),
        }),
        live: jp.jobs.iter().map(|_| Mutex::new(Live::default())).collect(),
        failed: AtomicBool::new(false),
    };
    let outcomes: Vec<Result<(RunResult, JobRecord)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..jp.jobs.len())
            .map(|j| {
                let run = &run;
                s.spawn(move || {
                    let r = run_job(run, j).with_context(|| format!("job {:?}", run.names[j]));
                    if r.is_err() {
                        run.failed.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        while !handles.iter().all(|h| h.is_finished()) {
            write_gauges(&run);
            std::thread::sleep(Duration::from_millis(50));
        }
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    write_gauges(&run);
    let (mut results, mut records, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    for o in outcomes {
        match o {
            Ok((r, rec)) => {
                results.push(r);
                records.push(rec);
            }
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        let root = errors.iter().position(|e| e.root_cause().downcast_ref::<AnotherJobFailed>().is_none());
        return Err(errors.swap_remove(root.unwrap_or(0)));
    }
    let shared = run.shared.into_inner().expect("not poisoned");
    let times = run.live.iter().map(|l| l.lock().map(|l| (l.started_at_ms, l.ended_at_ms)).unwrap_or((0, 0))).collect();
    let tally = Tally {
        rounds: shared.steps_run,
        te_placements: shared.te_placements,
        predicted_total: shared.predicted_total,
        retransmitted: shared.retransmitted,
        counted_before,
        times,
    };
    summarize(state, jp, &run.run_id, tally, results, records)
}

fn write_gauges(run: &Run<'_>) {
    let guards: Vec<_> = run.live.iter().map(|l| l.lock().expect("not poisoned")).collect();
    let refs: Vec<&Live> = guards.iter().map(|g| &**g).collect();
    gauges(run.jp, &refs, &run.names, &run.run_id).write(&run.state.plan.topology.prefix);
}

/// Job `j` from its start to its result and record.
fn run_job(run: &Run<'_>, j: usize) -> Result<(RunResult, JobRecord)> {
    let (state, job) = (run.state, &run.jp.jobs[j]);
    let plan = &state.plan;
    while run.clock.start.elapsed() < Duration::from_millis(job.start_ms) {
        anyhow::ensure!(!run.failed.load(Ordering::Relaxed), AnotherJobFailed);
        std::thread::sleep(Duration::from_millis(1).min(Duration::from_millis(job.start_ms)));
    }
    start(run, j)?;
    let mut endpoint = job.options.endpoint.clone();
    endpoint.time_scale = plan.topology.time_scale;
    let link_rate = host_link_rate_bps(plan, plan.topology.time_scale);
    let name = &run.names[j];
    for k in 0..job.steps.len() * job.options.iterations as usize {
        anyhow::ensure!(!run.failed.load(Ordering::Relaxed), AnotherJobFailed);
        let step = &job.steps[k % job.steps.len()];
        // The straggler model: the job waits for its straggler's extra compute before it sends.
        let delay = job.straggler.map_or(0, |(_, f)| straggler_delay_ns(step, f, link_rate));
        std::thread::sleep(Duration::from_nanos(delay));
        let transfers = on_hosts(step, &job.hosts);
        let shape = job_shape(&run.jp.jobs, &vec![j; transfers.len()], plan.topology.time_scale);
        let round = {
            let mut sh = run.shared.lock().expect("not poisoned");
            let owners = vec![name.clone(); transfers.len()];
            let own = predict_round(&sh.fabric, &run.labels, &transfers, &shape, &owners, &endpoint)?;
            let own = own.get(name).cloned().unwrap_or_default();
            for (link, b) in &own {
                *sh.predicted_total.entry(link.clone()).or_default() += b;
            }
            sh.in_flight.insert(j, own);
            let round: LinkBytes = sh.in_flight.iter().map(|(&o, l)| (run.names[o].clone(), l.clone())).collect();
            round
        };
        let before = UplinkBytes::read_uplinks(state)?;
        let r = run_step_shaped(plan, &transfers, &shape, &endpoint, &run.clock)
            .with_context(|| format!("step {} of iteration {}", k % job.steps.len() + 1, k / job.steps.len() + 1))?;
        let measured = UplinkBytes::read_uplinks(state)?.since(&before);
        let duration = r.flows.iter().map(|f| f.completion_ns).max().unwrap_or(0) + delay;
        let retransmitted = {
            let mut l = run.live[j].lock().expect("not poisoned");
            record_step(plan, job, &mut l, r.flows, &r.hosts, duration, &measured, &round)
        };
        let mut sh = run.shared.lock().expect("not poisoned");
        sh.retransmitted += retransmitted;
        sh.steps_run += 1;
    }
    end(run, j)
}

/// Job `j` starts: its clocks and counters, its slow NIC, and (te) a placement with it.
fn start(run: &Run<'_>, j: usize) -> Result<()> {
    let (state, job) = (run.state, &run.jp.jobs[j]);
    let mut sh = run.shared.lock().expect("not poisoned");
    {
        let mut l = run.live[j].lock().expect("not poisoned");
        let clock = JobClock::start_named(&run.run_id, &job.name);
        l.started = Some((clock, crate::telemetry::stats::collect(state)?, Some(super::shared::faulty_links(state))));
        l.uplinks_before = Some(UplinkBytes::read(state)?);
        l.started_at_ms = run.clock.start.elapsed().as_millis() as u64;
    }
    if let Some((_, link, rate)) = &job.slow_nic {
        sh.slow_nics.degrade(j, link, *rate)?;
    }
    sh.in_flight.insert(j, BTreeMap::new());
    if !run.quiet {
        println!("job {} starts at +{:.2} s", job.name, run.clock.start.elapsed().as_secs_f64());
    }
    place(run, &mut sh)
}

/// Job `j` has run its last step: its uplinks, its slow NIC restored, (te) the others placed
/// without it, and its result and record.
fn end(run: &Run<'_>, j: usize) -> Result<(RunResult, JobRecord)> {
    let (state, job) = (run.state, &run.jp.jobs[j]);
    {
        let mut sh = run.shared.lock().expect("not poisoned");
        sh.in_flight.remove(&j);
        if let Some((_, link, _)) = &job.slow_nic {
            sh.slow_nics.restore(j, link)?;
        }
        place(run, &mut sh)?;
    }
    let mut l = run.live[j].lock().expect("not poisoned");
    l.done = true;
    l.ended_at_ms = run.clock.start.elapsed().as_millis() as u64;
    l.uplinks = UplinkBytes::read(state)?.since(l.uplinks_before.as_ref().expect("started"));
    if !run.quiet {
        println!("job {} ends at +{:.2} s", job.name, run.clock.start.elapsed().as_secs_f64());
    }
    finish(state, run.jp, j, &mut l, &run.names[j])
}

/// In te mode: the controller places the remaining steps of every running job together.
fn place(run: &Run<'_>, sh: &mut Shared) -> Result<()> {
    if run.jp.hash != HashMode::Te || sh.in_flight.is_empty() {
        return Ok(());
    }
    let plan = &run.state.plan;
    let mut by_key: HashMap<TeKey, u64> = HashMap::new();
    for &j in sh.in_flight.keys() {
        let job = &run.jp.jobs[j];
        let next = run.live[j].lock().expect("not poisoned").next;
        let mut endpoint = job.options.endpoint.clone();
        endpoint.time_scale = plan.topology.time_scale;
        for k in next..job.steps.len() * job.options.iterations as usize {
            let transfers = on_hosts(&job.steps[k % job.steps.len()], &job.hosts);
            let shape = job_shape(&run.jp.jobs, &vec![j; transfers.len()], plan.topology.time_scale);
            for f in step_flows_shaped(plan, &transfers, &shape, &endpoint) {
                *by_key.entry((f.src, f.dst, f.sport, f.dest_qp)).or_default() += f.frame_bytes;
            }
        }
    }
    install_te(run.state, &mut sh.fabric, by_key)?;
    sh.te_placements += 1;
    Ok(())
}
