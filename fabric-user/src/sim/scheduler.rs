//! The scheduler scenario in the flow model: jobs arrive and leave over time, each placed by the
//! min-cut placement (`fabric place`) on the hosts free when it starts, so fragmentation grows as
//! the cluster fills and empties, as it does in production; each job's ring AllReduce is then
//! simulated on its placement under every routing mode asked for.
//!
//! The arrival pattern: Poisson arrivals (exponential gaps of mean `mean_gap`, in abstract time
//! units), each job holding its hosts for an exponential time of mean `mean_hold`, with a size
//! drawn uniformly from `sizes`; jobs start first come, first served (a job that does not fit
//! waits, and so do the ones behind it). How long a job holds its hosts is drawn, not simulated:
//! the arrivals decide the occupancy, the network model decides what each placement costs. Each
//! job's collective is simulated alone on its hosts (the neighbours' traffic is not in its
//! fair share; `fabric run --jobs` measures interference on the testbed).
use anyhow::{Result, ensure};
use fabric_common::{config::HashMode, rng::SplitMix64};
use serde::Serialize;

use super::{SimOptions, simulate};
use crate::{
    endpoint::{EndpointOptions, SportPolicy},
    forwarding::fabric::SimFabric,
    model::partition::{Graph, place_on},
    model::placement::Placement,
    model::plan::{NodeId, Plan},
    model::workload::Collective,
};

#[derive(Clone, Debug, Serialize)]
pub struct SchedulerOptions {
    pub jobs: usize,
    pub seed: u64,
    pub mean_gap: f64,
    pub mean_hold: f64,
    /// Job sizes (ranks), drawn uniformly.
    pub sizes: Vec<usize>,
    pub message_bytes: u64,
    /// (routing mode, QPs per connection) to simulate each job under.
    #[serde(skip)]
    pub modes: Vec<(HashMode, u32)>,
}

/// One job as the scheduler ran it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ScheduledJob {
    pub index: usize,
    pub arrival: f64,
    pub start: f64,
    pub end: f64,
    pub ranks: usize,
    /// Hosts free when it started (itself included).
    pub free_hosts: usize,
    pub racks: usize,
    /// Racks spanned over the fewest racks that could hold it (1 = as compact as possible).
    pub fragmentation: f64,
    #[serde(skip)]
    pub hosts: Vec<NodeId>,
}

/// The exponential draw of mean `mean` (inverse transform of a uniform in (0, 1]).
fn exponential(rng: &mut SplitMix64, mean: f64) -> f64 {
    let u = ((rng.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    -mean * u.ln()
}

/// Runs the arrivals and departures and places every job; pure and seeded.
pub fn schedule(plan: &Plan, o: &SchedulerOptions) -> Result<Vec<ScheduledJob>> {
    let all: Vec<NodeId> = plan.hosts().collect();
    ensure!(
        !o.sizes.is_empty() && o.sizes.iter().all(|&s| (2..=all.len()).contains(&s)),
        "sizes: each in 2..={}",
        all.len()
    );
    ensure!(o.mean_gap > 0.0 && o.mean_hold > 0.0, "mean gap and hold must be above 0");
    let per_rack = all
        .iter()
        .filter(|&&h| (plan.nodes[h].zone, plan.nodes[h].rack) == (plan.nodes[all[0]].zone, plan.nodes[all[0]].rack))
        .count()
        .max(1);
    let mut rng = SplitMix64::new(o.seed);
    let mut t = 0.0;
    let arrivals: Vec<(f64, usize, f64)> = (0..o.jobs)
        .map(|_| {
            t += exponential(&mut rng, o.mean_gap);
            (t, o.sizes[rng.below(o.sizes.len())], exponential(&mut rng, o.mean_hold))
        })
        .collect();
    let mut free: Vec<bool> = vec![true; plan.nodes.len()];
    let mut running: Vec<(f64, Vec<NodeId>)> = Vec::new();
    let mut out = Vec::new();
    let mut now = 0.0f64;
    for (index, &(arrival, ranks, hold)) in arrivals.iter().enumerate() {
        now = now.max(arrival);
        loop {
            // Departures up to now free their hosts.
            running.retain(|(end, hosts)| {
                if *end <= now {
                    hosts.iter().for_each(|&h| free[h] = true);
                    false
                } else {
                    true
                }
            });
            let available: Vec<NodeId> = all.iter().copied().filter(|&h| free[h]).collect();
            if available.len() >= ranks {
                let g = Graph::of_collective(Collective::Allreduce, ranks, o.message_bytes, o.seed);
                let hosts = place_on(plan, &available, &g, o.seed.wrapping_add(index as u64))?;
                hosts.iter().for_each(|&h| free[h] = false);
                let mut racks: Vec<(Option<usize>, Option<usize>)> =
                    hosts.iter().map(|&h| (plan.nodes[h].zone, plan.nodes[h].rack)).collect();
                racks.sort_unstable();
                racks.dedup();
                let end = now + hold;
                out.push(ScheduledJob {
                    index,
                    arrival,
                    start: now,
                    end,
                    ranks,
                    free_hosts: available.len(),
                    racks: racks.len(),
                    fragmentation: racks.len() as f64 / ranks.div_ceil(per_rack) as f64,
                    hosts: hosts.clone(),
                });
                running.push((end, hosts));
                break;
            }
            // Wait for the next departure (first come, first served).
            now = running.iter().map(|r| r.0).fold(f64::INFINITY, f64::min);
            ensure!(now.is_finite(), "job {index}: {ranks} ranks never fit the {} hosts", all.len());
        }
    }
    Ok(out)
}

/// A job's simulated completion under each mode.
#[derive(Clone, Debug, Serialize)]
pub struct JobOutcome {
    pub job: ScheduledJob,
    /// (mode label, seconds) per mode.
    pub completion_s: Vec<(String, f64)>,
}

/// Schedules the jobs and simulates each one's ring AllReduce on its placement.
pub fn run(fabric: &mut SimFabric, o: &SchedulerOptions) -> Result<Vec<JobOutcome>> {
    let jobs = schedule(&fabric.plan, o)?;
    let mut out = Vec::new();
    for job in jobs {
        let names: Vec<String> = job.hosts.iter().map(|&h| fabric.plan.nodes[h].name.clone()).collect();
        let mut completion_s = Vec::new();
        for &(hash, qps) in &o.modes {
            let so = SimOptions {
                collective: Collective::Allreduce,
                ranks: Some(job.ranks),
                message_bytes: o.message_bytes,
                placement: Placement::Explicit { hosts: names.clone() },
                seed: o.seed,
                hash,
                hash_seed: None,
                endpoint: EndpointOptions { qps, sport: SportPolicy::Fixed, ..Default::default() },
            };
            completion_s.push((format!("{} {qps}qp", hash.as_str()), simulate(fabric, &so)?.completion_s));
        }
        out.push(JobOutcome { job, completion_s });
    }
    Ok(out)
}

/// Per mode, the mean completion of the least and the most fragmented third of the jobs: what
/// fragmentation costs under that mode (a ring's completion hardly depends on its size: each
/// rank moves 2(N-1)/N of the message).
pub fn fragmentation_cost(jobs: &[JobOutcome]) -> Vec<(String, f64, f64)> {
    let mut order: Vec<&JobOutcome> = jobs.iter().collect();
    order.sort_by(|a, b| a.job.fragmentation.total_cmp(&b.job.fragmentation));
    let third = (order.len() / 3).max(1);
    let modes = jobs.first().map_or(0, |j| j.completion_s.len());
    (0..modes)
        .map(|m| {
            let mean = |s: &[&JobOutcome]| s.iter().map(|j| j.completion_s[m].1).sum::<f64>() / s.len().max(1) as f64;
            let (lo, hi) = (mean(&order[..third.min(order.len())]), mean(&order[order.len().saturating_sub(third)..]));
            (jobs[0].completion_s[m].0.clone(), lo, hi)
        })
        .collect()
}

/// `fabric sim --scheduler N`: the table.
pub fn print(jobs: &[JobOutcome]) {
    let modes: Vec<&str> =
        jobs.first().map(|j| j.completion_s.iter().map(|c| c.0.as_str()).collect()).unwrap_or_default();
    print!("{:>4} {:>8} {:>8} {:>5} {:>5} {:>5} {:>6}", "job", "arrival", "start", "ranks", "free", "racks", "frag");
    for m in &modes {
        print!(" {:>14}", format!("{m} ms"));
    }
    println!();
    for j in jobs {
        let s = &j.job;
        print!(
            "{:>4} {:>8.2} {:>8.2} {:>5} {:>5} {:>5} {:>6.2}",
            s.index, s.arrival, s.start, s.ranks, s.free_hosts, s.racks, s.fragmentation
        );
        for c in &j.completion_s {
            print!(" {:>14.3}", c.1 * 1e3);
        }
        println!();
    }
    for (m, lo, hi) in fragmentation_cost(jobs) {
        println!(
            "{m}: completion of the most fragmented third of the jobs {:.3} ms vs the least {:.3} ms ({:.2}x)",
            hi * 1e3,
            lo * 1e3,
            hi / lo.max(f64::MIN_POSITIVE)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::topology::Topology;

    /// `testbed/large.toml`: 16 racks x 4 hosts, 8 CTSWs.
    fn large() -> Plan {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed/large.toml");
        Plan::new(&Topology::load(Some(&path)).unwrap())
    }

    fn options(jobs: usize) -> SchedulerOptions {
        SchedulerOptions {
            jobs,
            seed: 7,
            mean_gap: 1.0,
            mean_hold: 6.0,
            sizes: vec![3, 6, 10],
            message_bytes: 64 << 20,
            modes: vec![(HashMode::Pin, 1), (HashMode::FiveTuple, 1), (HashMode::Eecmp, 8)],
        }
    }

    #[test]
    fn jobs_never_share_hosts_and_fragmentation_grows_as_the_cluster_fills() {
        let plan = large();
        let o = options(60);
        let jobs = schedule(&plan, &o).unwrap();
        assert_eq!(jobs.len(), 60);
        assert_eq!(jobs, schedule(&plan, &o).unwrap(), "seeded");
        for (i, a) in jobs.iter().enumerate() {
            assert!(a.start >= a.arrival && a.end > a.start && a.fragmentation >= 1.0);
            assert!(i == 0 || a.start >= jobs[i - 1].start, "first come, first served");
            for b in &jobs[..i] {
                if b.end > a.start {
                    assert!(a.hosts.iter().all(|h| !b.hosts.contains(h)), "jobs {} and {} overlap", b.index, a.index);
                }
            }
        }
        // The first job gets an empty cluster and whole racks; later ones take what is left.
        assert_eq!(jobs[0].fragmentation, 1.0);
        let late = jobs[20..].iter().map(|j| j.fragmentation).fold(0.0, f64::max);
        assert!(late > 1.0, "no job after the first 20 was fragmented: {late}");
    }

    #[test]
    fn the_simulated_cost_of_fragmentation_is_reported_per_mode() {
        let mut fabric = SimFabric::from_controller(&large(), &Default::default());
        let jobs = run(&mut fabric, &options(12)).unwrap();
        assert_eq!(jobs.len(), 12);
        assert!(jobs.iter().all(|j| j.completion_s.len() == 3 && j.completion_s.iter().all(|c| c.1 > 0.0)));
        let cost = fragmentation_cost(&jobs);
        assert_eq!(cost.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), ["pin 1qp", "five-tuple 1qp", "eecmp 8qp"]);
    }
}
