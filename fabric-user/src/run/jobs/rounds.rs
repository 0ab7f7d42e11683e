//! The rounds mode of `fabric run --jobs`: jobs advance in rounds.
//!
//! In a round every running job runs its next step, all of
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

use super::shared::{
    JobsOutcome, Live, SlowNics, Tally, TeKey, faulty_links, finish, gauges, install_te, job_shape, predict_round,
    record_step, summarize, uplink_labels,
};
use super::{JobsPlan, PlannedJob, straggler_delay_ns};
use crate::{
    endpoint::EndpointOptions,
    endpoint::engine::{FlowResult, RunClock, run_step_shaped},
    forwarding::{fabric::SimFabric, flows::step_flows_shaped},
    model::workload::{HostTransfer, on_hosts},
    run::RunResult,
    run::job::JobClock,
    state::State,
    telemetry::stats::UplinkBytes,
    testbed,
};

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
    let mut by_key: HashMap<TeKey, u64> = HashMap::new();
    for k in 0..rounds {
        let (merged, owner) = round_transfers(plan_jobs, live, running, k);
        for f in step_flows_shaped(plan, &merged, &job_shape(plan_jobs, &owner, plan.topology.time_scale), endpoint) {
            *by_key.entry((f.src, f.dst, f.sport, f.dest_qp)).or_default() += f.frame_bytes;
        }
    }
    install_te(state, fabric, by_key)
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

/// The rounds mode: every running job's next step together, round after round.
pub(super) fn run_rounds(state: &State, jp: &JobsPlan, quiet: bool) -> Result<JobsOutcome> {
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
    let mut slow_nics = SlowNics::new(&plan.topology.prefix);
    loop {
        gauges(jp, &live.iter().collect::<Vec<_>>(), &names, &run_clock.id).write(&plan.topology.prefix);
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
                live[j].started_at_ms = run_start.elapsed().as_millis() as u64;
                if let Some((_, link, rate)) = &jp.jobs[j].slow_nic {
                    slow_nics.degrade(j, link, *rate)?;
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
        let shape = job_shape(&jp.jobs, &owner, plan.topology.time_scale);
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
            let mine: Vec<FlowResult> =
                r.flows.iter().zip(&owner).filter(|(_, o)| **o == j).map(|(f, _)| f.clone()).collect();
            let duration = mine.iter().map(|f| f.completion_ns).max().unwrap_or(0) + delays[k];
            retransmitted += record_step(plan, job, l, mine, &r.hosts, duration, &measured, &predicted);
            if l.next == job.steps.len() * job.options.iterations as usize {
                l.done = true;
                l.ended_at_ms = run_start.elapsed().as_millis() as u64;
                l.uplinks = UplinkBytes::read(state)?.since(l.uplinks_before.as_ref().expect("started"));
                if !quiet {
                    println!("job {} ends at +{:.2} s", job.name, run_start.elapsed().as_secs_f64());
                }
                if let Some((_, link, _)) = &job.slow_nic {
                    slow_nics.restore(j, link)?;
                }
                let (result, record) = finish(state, jp, j, l, &names[j])?;
                results[j] = Some(result);
                records.push(record);
            }
        }
    }
    gauges(jp, &live.iter().collect::<Vec<_>>(), &names, &run_clock.id).write(&plan.topology.prefix);
    let results: Vec<RunResult> = results.into_iter().map(|r| r.expect("every job finished")).collect();
    let times: Vec<(u64, u64)> = live.iter().map(|l| (l.started_at_ms, l.ended_at_ms)).collect();
    let tally = Tally { rounds, te_placements, predicted_total, retransmitted, counted_before, times };
    summarize(state, jp, &run_clock.id, tally, results, records)
}
