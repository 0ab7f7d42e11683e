//! `fabric sim schedule`: a scheduler's stream of jobs on the flow model. Jobs arrive, are placed
//! by the min-cut placement on the free hosts ([`place_on`]), run and leave; as they come and go
//! the free hosts scatter over the racks and later jobs' placements fragment, as they do in a
//! production cluster. At every job start, all running jobs' AllReduce steps are measured
//! together under path pinning, ECMP with one QP and E-ECMP with 8 QPs: the paper's
//! fragmented-placement story, as it happens.
//!
//! The model, stated:
//! - **Arrivals**: Poisson, one job per time unit on average (seeded). A job's ranks are drawn
//!   uniformly from `--sizes`; its duration is exponential, with the mean that makes the offered
//!   load `--load` (the share of the hosts that would be busy on average if no job waited).
//! - **Scheduling**: first come, first served, no backfilling: a job that does not fit waits, and
//!   the jobs behind it wait with it. A started job keeps its hosts until it leaves.
//! - **Measurement** (the flow model of `fabric sim`): every running job mid-way through a ring
//!   AllReduce step at once (the worst overlap); each QP one fluid flow at its max-min fair share
//!   of every link; a job's step time is its slowest QP's. The yardstick is the line rate: a
//!   step's bytes over the host link's rate, what a job would see with perfect routing and no
//!   neighbours. A job's *slowdown* is its step time over that ideal.
use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;

use anyhow::{Context as _, Result, ensure};
use fabric_common::{config::HashMode, rng::SplitMix64};
use serde::Serialize;

use super::{
    MemberLoad, capacities,
    fairshare::{Paths, max_min},
    trace_step,
};
use crate::{
    endpoint::EndpointOptions,
    forwarding::fabric::{Scale, SimFabric},
    model::partition::{Graph, place_on},
    model::plan::{NodeId, Plan, Role},
    model::units::Size,
    model::workload::{Collective, on_hosts, schedule_runs},
};

pub const SCHEMA: &str = "fabric.schedule/1";

/// The routing modes measured: name, hash mode, QPs per connection.
pub const MODES: [(&str, HashMode, u32); 3] =
    [("pin", HashMode::Pin, 1), ("ecmp", HashMode::FiveTuple, 1), ("eecmp", HashMode::Eecmp, 8)];

#[derive(Clone, Debug, clap::Args)]
pub struct ScheduleArgs {
    /// Topology file (default: `--scale 1k`).
    #[arg(long, conflicts_with = "scale")]
    pub topology: Option<PathBuf>,
    /// A synthetic fabric: 1k, 4k or 24k.
    #[arg(long, value_enum)]
    pub scale: Option<Scale>,
    /// How many jobs arrive (at least 2).
    #[arg(long, default_value_t = 60)]
    pub jobs: usize,
    /// Offered load: the share of the hosts busy on average if no job waited (0 < load <= 1).
    #[arg(long, default_value_t = 0.9)]
    pub load: f64,
    /// Job sizes in ranks, drawn uniformly (each at least 2, at most the fabric's hosts).
    #[arg(long, value_delimiter = ',', default_value = "8,16,32,64,128")]
    pub sizes: Vec<usize>,
    /// AllReduce message per rank (K, M, G = x1000; Ki, Mi, Gi = x1024).
    #[arg(long, default_value_t = Size(64 << 20))]
    pub message: Size,
    /// Seed of the arrivals, sizes, durations and placements.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// A job of the stream.
#[derive(Clone, Debug, Serialize)]
pub struct JobSpec {
    pub id: usize,
    pub ranks: usize,
    pub arrival: f64,
    pub duration: f64,
}

/// One mode's view of the fabric when a job started.
#[derive(Clone, Debug, Serialize)]
pub struct ModeAtStart {
    pub mode: &'static str,
    /// The new job's slowdown alone on its hosts (placement and hashing, no neighbours).
    pub alone: f64,
    /// The new job's slowdown among the running jobs.
    pub together: f64,
    /// Mean and worst slowdown of every running job, the new one included.
    pub mean: f64,
    pub worst: f64,
}

/// A job start.
#[derive(Clone, Debug, Serialize)]
pub struct Start {
    pub job: usize,
    pub time: f64,
    pub waited: f64,
    pub end: f64,
    pub ranks: usize,
    pub hosts: Vec<NodeId>,
    /// Racks the job's hosts span, and the fewest that could hold it.
    pub racks: usize,
    pub min_racks: usize,
    /// Jobs running once this one started, and the hosts they hold.
    pub running: usize,
    pub busy_hosts: usize,
    /// Racks neither empty nor full just before the job was placed, % of racks.
    pub split_racks_pct: f64,
    pub modes: Vec<ModeAtStart>,
}

/// One mode over the whole stream, early starts against late ones (by start order).
#[derive(Clone, Debug, Serialize)]
pub struct ModeSummary {
    pub mode: &'static str,
    pub mean_slowdown_first_half: f64,
    pub mean_slowdown_second_half: f64,
    pub new_job_alone_first_half: f64,
    pub new_job_alone_second_half: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScheduleReport {
    pub schema: &'static str,
    pub fabric: String,
    pub hosts: usize,
    pub jobs: Vec<JobSpec>,
    pub mean_duration: f64,
    pub starts: Vec<Start>,
    /// Mean of racks spanned over the fewest possible, first and second half of the starts.
    pub rack_spread_first_half: f64,
    pub rack_spread_second_half: f64,
    pub modes: Vec<ModeSummary>,
}

/// Checks the arguments against the fabric before anything runs.
fn check(a: &ScheduleArgs, hosts: usize) -> Result<()> {
    // The report compares the first half of the starts with the second: one job has no halves.
    ensure!(
        a.jobs >= 2,
        "--jobs {}: at least 2 (the report compares the first half of the starts with the second)",
        a.jobs
    );
    ensure!(a.load > 0.0 && a.load <= 1.0, "--load {}: must be above 0 and at most 1", a.load);
    ensure!(!a.sizes.is_empty(), "--sizes: at least one job size");
    for &s in &a.sizes {
        ensure!(
            (2..=hosts).contains(&s),
            "--sizes: a job of {s} ranks does not fit (2 to {hosts} ranks on this fabric)"
        );
    }
    ensure!(a.message.0 > 0, "--message: must be above 0");
    Ok(())
}

/// The stream of jobs: Poisson arrivals at one per time unit, sizes uniform over `sizes`,
/// exponential durations whose mean makes the offered load `load`.
pub fn generate(jobs: usize, sizes: &[usize], load: f64, hosts: usize, seed: u64) -> (Vec<JobSpec>, f64) {
    let mean_size = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
    let mean_duration = load * hosts as f64 / mean_size;
    let mut rng = SplitMix64::new(seed ^ 0x5C4E_D01E);
    let mut exp = |mean: f64| -(1.0 - (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64).ln() * mean;
    let mut t = 0.0;
    let mut out = Vec::with_capacity(jobs);
    for id in 0..jobs {
        t += exp(1.0);
        let duration = exp(mean_duration);
        out.push(JobSpec { id, ranks: 0, arrival: t, duration });
    }
    let mut pick = SplitMix64::new(seed ^ 0x512E_5EED);
    for j in &mut out {
        j.ranks = sizes[pick.below(sizes.len())];
    }
    (out, mean_duration)
}

impl ScheduleArgs {
    /// The synthetic fabric to build: `--scale`, or 1k when no topology file is given.
    pub fn scale_or_default(&self) -> Option<Scale> {
        if self.topology.is_none() { Some(self.scale.unwrap_or(Scale::K1)) } else { self.scale }
    }
}

/// `fabric sim schedule` on `fabric` (built from the arguments' topology or scale).
pub fn main(a: &ScheduleArgs, fabric: SimFabric) -> Result<()> {
    let report = run(a, fabric)?;
    print(&report);
    if let Some(path) = &a.json {
        crate::sys::file::write_json(path, &report)?;
    }
    Ok(())
}

pub fn run(a: &ScheduleArgs, fabric: SimFabric) -> Result<ScheduleReport> {
    let hosts = fabric.plan.hosts().count();
    check(a, hosts)?;
    let (jobs, mean_duration) = generate(a.jobs, &a.sizes, a.load, hosts, a.seed);
    let fabrics = MODES.map(|(_, mode, _)| {
        let mut f = fabric.clone();
        f.set_hash(mode, None);
        f
    });
    let mut sched = Scheduler::new(&fabric.plan);
    let mut starts = Vec::new();
    for placed in sched.play(&jobs, a.seed)? {
        let modes = MODES
            .iter()
            .zip(&fabrics)
            .map(|(&(name, _, qps), f)| measure(f, name, qps, a.message.0, &placed))
            .collect::<Result<Vec<_>>>()?;
        starts.push(placed.into_start(&fabric.plan, modes));
    }
    Ok(summarize(&fabric, hosts, jobs, mean_duration, starts))
}

/// What the scheduler knows when a job starts.
pub struct Placed {
    pub job: JobSpec,
    pub time: f64,
    pub hosts: Vec<NodeId>,
    /// Every running job's hosts, the new one's last.
    pub running: Vec<Vec<NodeId>>,
    pub split_racks_pct: f64,
}

impl Placed {
    fn into_start(self, plan: &Plan, modes: Vec<ModeAtStart>) -> Start {
        let racks: BTreeSet<(Option<usize>, Option<usize>)> =
            self.hosts.iter().map(|&h| (plan.nodes[h].zone, plan.nodes[h].rack)).collect();
        let rack_size = largest_rack(plan);
        Start {
            job: self.job.id,
            time: self.time,
            waited: self.time - self.job.arrival,
            end: self.time + self.job.duration,
            ranks: self.job.ranks,
            racks: racks.len(),
            min_racks: self.job.ranks.div_ceil(rack_size),
            running: self.running.len(),
            busy_hosts: self.running.iter().map(Vec::len).sum(),
            split_racks_pct: self.split_racks_pct,
            hosts: self.hosts,
            modes,
        }
    }
}

/// First come, first served over the free hosts of a plan.
pub struct Scheduler<'p> {
    plan: &'p Plan,
    free: BTreeSet<NodeId>,
    /// (end time, job id, hosts).
    running: Vec<(f64, usize, Vec<NodeId>)>,
    waiting: VecDeque<JobSpec>,
}

impl<'p> Scheduler<'p> {
    pub fn new(plan: &'p Plan) -> Self {
        Scheduler { plan, free: plan.hosts().collect(), running: Vec::new(), waiting: VecDeque::new() }
    }

    /// Plays the stream (sorted by arrival) to its end: every job's start, in start order.
    pub fn play(&mut self, jobs: &[JobSpec], seed: u64) -> Result<Vec<Placed>> {
        let mut out = Vec::with_capacity(jobs.len());
        for j in jobs {
            self.depart_until(j.arrival, seed, &mut out)?;
            self.waiting.push_back(j.clone());
            self.start_waiting(j.arrival, seed, &mut out)?;
        }
        self.depart_until(f64::INFINITY, seed, &mut out)?;
        ensure!(self.waiting.is_empty(), "internal: {} jobs never started", self.waiting.len());
        Ok(out)
    }

    /// Retires the jobs that end by `t`, in end order, starting waiting jobs as hosts free up.
    fn depart_until(&mut self, t: f64, seed: u64, out: &mut Vec<Placed>) -> Result<()> {
        while let Some(i) = self.next_departure().filter(|&i| self.running[i].0 <= t) {
            let (end, _, hosts) = self.running.swap_remove(i);
            self.free.extend(hosts);
            self.start_waiting(end, seed, out)?;
        }
        Ok(())
    }

    fn next_departure(&self) -> Option<usize> {
        (0..self.running.len()).min_by(|&a, &b| self.running[a].0.total_cmp(&self.running[b].0))
    }

    /// Starts waiting jobs at `t`, in arrival order, while the first one fits.
    fn start_waiting(&mut self, t: f64, seed: u64, out: &mut Vec<Placed>) -> Result<()> {
        while let Some(j) = self.waiting.front().filter(|j| j.ranks <= self.free.len()).cloned() {
            self.waiting.pop_front();
            let split = split_racks_pct(self.plan, &self.free);
            let g = Graph::of_collective(Collective::Allreduce, j.ranks, 1 << 20, seed);
            let free: Vec<NodeId> = self.free.iter().copied().collect();
            let hosts = place_on(self.plan, &free, &g, seed.wrapping_add(j.id as u64))
                .with_context(|| format!("placing job {}", j.id))?;
            for h in &hosts {
                self.free.remove(h);
            }
            self.running.push((t + j.duration, j.id, hosts.clone()));
            let running = self.running.iter().map(|r| r.2.clone()).collect();
            out.push(Placed { job: j, time: t, hosts, running, split_racks_pct: split });
        }
        Ok(())
    }
}

/// The most hosts any rack has.
fn largest_rack(plan: &Plan) -> usize {
    let mut per_rack = std::collections::BTreeMap::new();
    for h in plan.hosts() {
        *per_rack.entry((plan.nodes[h].zone, plan.nodes[h].rack)).or_insert(0usize) += 1;
    }
    per_rack.into_values().max().unwrap_or(1)
}

/// Racks with some hosts free and some busy, % of racks.
fn split_racks_pct(plan: &Plan, free: &BTreeSet<NodeId>) -> f64 {
    let mut racks: std::collections::BTreeMap<_, (usize, usize)> = Default::default();
    for h in plan.hosts() {
        let e = racks.entry((plan.nodes[h].zone, plan.nodes[h].rack)).or_default();
        e.0 += 1;
        e.1 += usize::from(free.contains(&h));
    }
    let split = racks.values().filter(|(all, free)| *free > 0 && free < all).count();
    100.0 * split as f64 / racks.len().max(1) as f64
}

/// The rate of a host's link, bit/s.
fn host_rate_bps(plan: &Plan) -> f64 {
    let is_host = |n: NodeId| plan.nodes[n].role == Role::Host;
    plan.links.iter().find(|l| is_host(l.a) || is_host(l.b)).map_or(0.0, |l| l.rate_gbps * 1e9)
}

/// Each job's ring AllReduce step time (s) when all `jobs` step at once on `fabric`, and its
/// line-rate ideal: the step's wire bits of one rank over the host link's rate.
pub fn step_times(fabric: &SimFabric, jobs: &[Vec<NodeId>], qps: u32, message: u64) -> Result<Vec<(f64, f64)>> {
    let endpoint = EndpointOptions { qps, ..Default::default() };
    let capacity = capacities(fabric);
    let mut scratch = MemberLoad::new(fabric);
    let (mut all, mut bits, mut owner) = (Paths::new(), Vec::new(), Vec::new());
    let mut ideal = Vec::with_capacity(jobs.len());
    for (j, hosts) in jobs.iter().enumerate() {
        let step = &schedule_runs(Collective::Allreduce, hosts.len(), message, 0)[0].0;
        let (paths, b, _) = trace_step(fabric, &on_hosts(step, hosts), &endpoint, 1, &mut scratch)?;
        for f in 0..paths.len() {
            all.push(paths.path(f).iter().copied());
            owner.push(j);
        }
        ideal.push(b.iter().sum::<f64>() / hosts.len() as f64 / host_rate_bps(&fabric.plan));
        bits.extend(b);
    }
    let rate = max_min(&capacity, &all, &vec![true; all.len()]);
    let mut time = vec![0.0f64; jobs.len()];
    for f in 0..all.len() {
        time[owner[f]] = time[owner[f]].max(bits[f] / rate[f]);
    }
    Ok(time.into_iter().zip(ideal).collect())
}

/// One mode's measurement at a start: the new job alone and every running job together.
fn measure(fabric: &SimFabric, mode: &'static str, qps: u32, message: u64, p: &Placed) -> Result<ModeAtStart> {
    let slow = |(t, ideal): (f64, f64)| t / ideal;
    let alone = slow(step_times(fabric, std::slice::from_ref(&p.hosts), qps, message)?[0]);
    let all: Vec<f64> = step_times(fabric, &p.running, qps, message)?.into_iter().map(slow).collect();
    Ok(ModeAtStart {
        mode,
        alone,
        together: *all.last().context("no running job")?,
        mean: all.iter().sum::<f64>() / all.len() as f64,
        worst: all.iter().copied().fold(0.0, f64::max),
    })
}

fn halves_mean(v: &[f64]) -> (f64, f64) {
    let mean = |s: &[f64]| if s.is_empty() { f64::NAN } else { s.iter().sum::<f64>() / s.len() as f64 };
    let (a, b) = v.split_at(v.len() / 2);
    (mean(a), mean(b))
}

fn summarize(
    fabric: &SimFabric,
    hosts: usize,
    jobs: Vec<JobSpec>,
    mean_duration: f64,
    starts: Vec<Start>,
) -> ScheduleReport {
    let spread: Vec<f64> = starts.iter().map(|s| s.racks as f64 / s.min_racks as f64).collect();
    let (rack_spread_first_half, rack_spread_second_half) = halves_mean(&spread);
    let modes = MODES
        .iter()
        .enumerate()
        .map(|(i, &(mode, _, _))| {
            let mean: Vec<f64> = starts.iter().map(|s| s.modes[i].mean).collect();
            let alone: Vec<f64> = starts.iter().map(|s| s.modes[i].alone).collect();
            let (m1, m2) = halves_mean(&mean);
            let (a1, a2) = halves_mean(&alone);
            ModeSummary {
                mode,
                mean_slowdown_first_half: m1,
                mean_slowdown_second_half: m2,
                new_job_alone_first_half: a1,
                new_job_alone_second_half: a2,
            }
        })
        .collect();
    ScheduleReport {
        schema: SCHEMA,
        fabric: fabric.plan.topology.name.clone(),
        hosts,
        jobs,
        mean_duration,
        starts,
        rack_spread_first_half,
        rack_spread_second_half,
        modes,
    }
}

fn print(r: &ScheduleReport) {
    println!(
        "{} jobs on {} ({} hosts), mean duration {:.1} time units; slowdown = step time / line-rate step time",
        r.jobs.len(),
        r.fabric,
        r.hosts,
        r.mean_duration
    );
    print!(
        "{:>5} {:>8} {:>6} {:>6} {:>11} {:>8} {:>7}",
        "job", "start", "ranks", "racks", "split racks", "running", "busy"
    );
    for (m, _, q) in MODES {
        print!(" {:>16}", format!("{m} {q}QP alone/tog"));
    }
    println!();
    for s in &r.starts {
        print!(
            "{:>5} {:>8.1} {:>6} {:>6} {:>10.0}% {:>8} {:>7}",
            s.job,
            s.time,
            s.ranks,
            format!("{}/{}", s.racks, s.min_racks),
            s.split_racks_pct,
            s.running,
            s.busy_hosts
        );
        for m in &s.modes {
            print!(" {:>16}", format!("{:.2}/{:.2}", m.alone, m.together));
        }
        println!();
    }
    println!(
        "racks spanned / fewest possible: {:.2} over the first half of the starts, {:.2} over the second",
        r.rack_spread_first_half, r.rack_spread_second_half
    );
    for m in &r.modes {
        println!(
            "{:>6}: mean slowdown of the running jobs {:.2} -> {:.2}; a new job alone on its hosts {:.2} -> {:.2} \
             (first half -> second half of the starts)",
            m.mode,
            m.mean_slowdown_first_half,
            m.mean_slowdown_second_half,
            m.new_job_alone_first_half,
            m.new_job_alone_second_half
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forwarding::fabric::synthetic;

    fn fabric(topo: crate::model::topology::Topology) -> SimFabric {
        SimFabric::clos(Plan::new(&topo)).unwrap()
    }

    /// 4 racks x 2 hosts, 2 CTSWs: the pin slice, (host address >> 1) mod 2, is the host's index
    /// in its rack.
    fn two_spines() -> SimFabric {
        let mut t = crate::model::topology::Topology::default_topology();
        t.zones[0].spines = 2;
        fabric(t)
    }

    fn host(f: &SimFabric, name: &str) -> NodeId {
        f.plan.node_by_name(name).unwrap()
    }

    /// Two flows of one rack to destinations of the same pin slice share an uplink: pinning's
    /// step takes twice the line-rate time (max-min: half the link each), by hand.
    #[test]
    fn pinning_collides_where_a_rack_sends_to_one_slice_twice() {
        let mut f = two_spines();
        // Ring r0h0 -> r1h0 -> r0h1 -> r2h0 -> r0h0: r0 sends to r1h0 and r2h0, both slice 0.
        let job: Vec<NodeId> = ["z0r0h0", "z0r1h0", "z0r0h1", "z0r2h0"].iter().map(|n| host(&f, n)).collect();
        f.set_hash(HashMode::Pin, None);
        let (t, ideal) = step_times(&f, std::slice::from_ref(&job), 1, 64 << 20).unwrap()[0];
        assert!((t / ideal - 2.0).abs() < 0.01, "pin slowdown {}", t / ideal);
        // E-ECMP with 8 QPs spreads those two connections' 16 QPs over both uplinks.
        f.set_hash(HashMode::Eecmp, None);
        let (t, ideal) = step_times(&f, &[job], 8, 64 << 20).unwrap()[0];
        assert!(t / ideal < 1.9, "E-ECMP slowdown {}", t / ideal);
    }

    #[test]
    fn a_whole_rack_alone_runs_at_line_rate_and_a_neighbour_on_its_uplink_halves_it() {
        let mut f = fabric(synthetic(1, 4, 4, 4, 0));
        f.set_hash(HashMode::Eecmp, None);
        let rack0: Vec<NodeId> = (0..4).map(|h| host(&f, &format!("z0r0h{h}"))).collect();
        let (t, ideal) = step_times(&f, std::slice::from_ref(&rack0), 8, 8 << 20).unwrap()[0];
        assert!((t / ideal - 1.0).abs() < 1e-6, "inside one rack nothing but the host links: {}", t / ideal);
        // Pinned, job a (r0h0 <-> r1h0) and job b (r0h1 <-> r2h0) each run at line rate alone;
        // together r0's sends to r1h0 and r2h0 (both slice 0) share one uplink: half each.
        let mut f = two_spines();
        f.set_hash(HashMode::Pin, None);
        let a: Vec<NodeId> = ["z0r0h0", "z0r1h0"].iter().map(|n| host(&f, n)).collect();
        let b: Vec<NodeId> = ["z0r0h1", "z0r2h0"].iter().map(|n| host(&f, n)).collect();
        for job in [&a, &b] {
            let (t, ideal) = step_times(&f, std::slice::from_ref(job), 1, 8 << 20).unwrap()[0];
            assert!((t / ideal - 1.0).abs() < 1e-6, "alone: {}", t / ideal);
        }
        for (t, ideal) in step_times(&f, &[a, b], 1, 8 << 20).unwrap() {
            assert!((t / ideal - 2.0).abs() < 1e-6, "together: {}", t / ideal);
        }
    }

    #[test]
    fn the_scheduler_never_double_books_a_host_and_starts_every_job_after_it_arrives() {
        let f = fabric(synthetic(1, 8, 4, 4, 0));
        let (jobs, _) = generate(40, &[2, 4, 6, 8], 1.0, 32, 7);
        let placed = Scheduler::new(&f.plan).play(&jobs, 7).unwrap();
        assert_eq!(placed.len(), jobs.len());
        let mut seen: Vec<usize> = placed.iter().map(|p| p.job.id).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..40).collect::<Vec<_>>(), "every job starts exactly once");
        for p in &placed {
            assert!(p.time >= p.job.arrival);
            assert_eq!(p.hosts.len(), p.job.ranks);
        }
        // No host in two jobs whose [start, end) intervals overlap.
        for (i, a) in placed.iter().enumerate() {
            for b in &placed[i + 1..] {
                let overlap = a.time < b.time + b.job.duration && b.time < a.time + a.job.duration;
                if overlap {
                    assert!(
                        a.hosts.iter().all(|h| !b.hosts.contains(h)),
                        "jobs {} and {} share a host",
                        a.job.id,
                        b.job.id
                    );
                }
            }
        }
        // Under full load some job had to wait: the FIFO queue is exercised.
        assert!(placed.iter().any(|p| p.time > p.job.arrival));
    }

    #[test]
    fn the_stream_is_seeded_and_its_load_is_as_stated() {
        let (a, mean_a) = generate(2000, &[8, 16], 0.5, 1024, 3);
        let (b, _) = generate(2000, &[8, 16], 0.5, 1024, 3);
        assert_eq!(
            a.iter().map(|j| (j.ranks, j.arrival)).collect::<Vec<_>>(),
            b.iter().map(|j| (j.ranks, j.arrival)).collect::<Vec<_>>()
        );
        // Offered load = arrival rate x mean size x mean duration / hosts, within sampling error.
        let rate = a.len() as f64 / a.last().unwrap().arrival;
        let size = a.iter().map(|j| j.ranks as f64).sum::<f64>() / a.len() as f64;
        let duration = a.iter().map(|j| j.duration).sum::<f64>() / a.len() as f64;
        let load = rate * size * duration / 1024.0;
        assert!((load - 0.5).abs() < 0.05, "offered load {load} (mean duration {mean_a})");
    }

    #[test]
    fn bad_arguments_are_named() {
        let args = |jobs, load, sizes: Vec<usize>| ScheduleArgs {
            topology: None,
            scale: None,
            jobs,
            load,
            sizes,
            message: Size(1 << 20),
            seed: 1,
            json: None,
        };
        let err = |a: ScheduleArgs| check(&a, 64).unwrap_err().to_string();
        assert!(err(args(0, 0.5, vec![8])).contains("--jobs"));
        assert!(err(args(1, 0.5, vec![8])).contains("--jobs 1: at least 2"));
        assert!(err(args(5, 1.5, vec![8])).contains("--load 1.5"));
        assert!(err(args(5, 0.0, vec![8])).contains("--load"));
        assert!(err(args(5, 0.5, vec![8, 128])).contains("128 ranks does not fit"));
        assert!(err(args(5, 0.5, vec![1])).contains("1 ranks"));
        assert!(check(&args(5, 0.5, vec![2, 64]), 64).is_ok());
    }
}
