//! Operational what-ifs on the twin: `fabric sim --model packet --fail-at TARGET@TIME` or
//! `--drain-at TARGET@TIME` (TARGET a link `SWITCH:PEER` or a switch), and the job's slowdown
//! against the same run without the event.
//!
//! The model:
//! - **fail**: at TIME the link (or every link of the switch) stops carrying frames both ways;
//!   what is queued at either end or in flight on it is lost, and so is what the switches keep
//!   routing into it. After `--detect-us` the controller's routes without it are in force
//!   (its own tables: [`SimFabric::from_controller`] with the link down). The endpoints
//!   recover the losses with their own go-back-N (a NAK on the next packet that arrives, or
//!   their retransmission timeout).
//! - **drain**: at TIME the routes without it are in force and nothing is lost (the operator
//!   moves traffic away first; what is already queued there still leaves).
//! - **flap** (`--flap TARGET[@START] --period T --count N`): from START, the link fails as
//!   above for the first half of each period and comes back up for the second (empty, carrying
//!   what the routes send it from then on); the controller routes around it `--detect-us` after
//!   each failure if it is still down then, and back over it when it is up. Each failure loses
//!   what was on the link. The flow model time-slices instead ([`simulate_flap_flow`]).
//!
//! TIME is in the job's modelled time (`250us`, `1.5ms`, `2s`, `800ns`). The job's steps run
//! back to back as in [`super::packet::simulate_packet`]; a step that ends before the event
//! keeps its result, a step that runs into it is simulated with the event at its offset, and
//! steps that start once every change happened are simulated once on the changed fabric and
//! counted as often as they repeat. An event after the job's end changes nothing.
use std::collections::BTreeSet;

use anyhow::{Context as _, Result, bail, ensure};
use fabric_twin::{Change, Scheduled};
use serde::Serialize;

use super::{
    SimOptions, SimResult,
    packet::{PacketOptions, endpoint_config, network, qp_specs, simulate_packet, twin_of},
    steps_of,
};
pub use super::{WhatIfKind, WhatIfReport};
use crate::{
    forwarding::fabric::SimFabric,
    model::plan::{LinkId, Plan, Role},
};

/// An event as the command line states it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WhatIf {
    pub kind: WhatIfKind,
    /// A link (`SWITCH:PEER`) or a switch.
    pub target: String,
    pub at_ns: u64,
    /// A flap: down for the first half of each period, `count` periods from `at_ns`.
    pub flap: Option<Flap>,
}

/// `--flap TARGET[@START] --period T --count N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Flap {
    pub period_ns: u64,
    pub count: u32,
}

impl Flap {
    /// Each period's down interval, `[down, up)`, from `at_ns`.
    pub fn intervals(&self, at_ns: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..u64::from(self.count)).map(move |k| {
            let down = at_ns.saturating_add(k.saturating_mul(self.period_ns));
            (down, down.saturating_add(self.period_ns / 2))
        })
    }
}

impl WhatIf {
    /// `TARGET@TIME`, `option` naming the flag in errors.
    pub fn parse(kind: WhatIfKind, spec: &str) -> Result<Self> {
        let option = match kind {
            WhatIfKind::Fail => "--fail-at",
            WhatIfKind::Drain => "--drain-at",
            WhatIfKind::Flap => "--flap",
        };
        let (target, time) = spec
            .rsplit_once('@')
            .with_context(|| format!("{option} {spec:?}: expected TARGET@TIME, e.g. z0r0:z0c1@200us"))?;
        ensure!(!target.is_empty(), "{option} {spec:?}: no link or switch before the @");
        let at_ns = parse_time_ns(time).with_context(|| format!("{option} {spec:?}"))?;
        Ok(WhatIf { kind, target: target.to_string(), at_ns, flap: None })
    }

    /// `--flap TARGET[@START]` (START default 0) with `--period` and `--count`.
    pub fn flap(spec: &str, period: &str, count: u32) -> Result<Self> {
        let at = if spec.contains('@') { spec.to_string() } else { format!("{spec}@0us") };
        let mut w = Self::parse(WhatIfKind::Flap, &at)?;
        let period_ns = parse_time_ns(period).with_context(|| format!("--period {period:?}"))?;
        ensure!(period_ns >= 2, "--period {period:?}: a flap needs a period of at least 2 ns");
        ensure!(count >= 1, "--count: a flap needs at least one period");
        // Every period's changes are laid out before the run: a bound keeps them in memory.
        ensure!(
            count <= MAX_FLAP_PERIODS,
            "--count {count}: at most {MAX_FLAP_PERIODS} periods (their changes are laid out before the run); \
             for a longer flap take a longer --period"
        );
        w.flap = Some(Flap { period_ns, count });
        Ok(w)
    }
}

/// The most periods a flap may have: about 13 MB of laid-out changes per link at this bound.
pub const MAX_FLAP_PERIODS: u32 = 100_000;

/// `250us`, `1.5ms`, `2s`, `800ns` to nanoseconds.
pub fn parse_time_ns(s: &str) -> Result<u64> {
    let s = s.trim();
    ensure!(!s.starts_with('-'), "{s:?}: a time cannot be negative");
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => bail!("{s:?}: the time needs a unit: ns, us, ms or s"),
    };
    let v: f64 = num.parse().with_context(|| format!("{s:?}: {num:?} is not a number"))?;
    ensure!(v.is_finite() && v >= 0.0, "{s:?}: not a time");
    Ok((v * scale).round() as u64)
}

/// The links a what-if takes away: one link, or every link of a switch. Hosts are
/// single-homed, so a link to a host (or a host) is refused: the job could not finish.
pub fn resolve_links(plan: &Plan, w: &WhatIf) -> Result<Vec<LinkId>> {
    let links = if w.target.contains(':') {
        vec![plan.find_link(&w.target)?]
    } else {
        let n = plan.node_by_name(&w.target).with_context(|| format!("no node {:?} in this fabric", w.target))?;
        ensure!(plan.nodes[n].role != Role::Host, "{} is a host, not a switch or a link", w.target);
        plan.nodes[n].ports.iter().map(|p| p.link).collect()
    };
    for &l in &links {
        refuse_host_link(plan, l)?;
    }
    Ok(links)
}

/// Refuses to take away link `l` when it is a host's: hosts are single-homed, so a job on that
/// host could not finish.
pub fn refuse_host_link(plan: &Plan, l: LinkId) -> Result<()> {
    let link = &plan.links[l];
    if let Some(h) = [link.a, link.b].into_iter().find(|&n| plan.nodes[n].role == Role::Host) {
        bail!(
            "{}: the link of host {} (hosts are single-homed: without it the job cannot finish)",
            plan.link_label(l),
            plan.nodes[h].name
        );
    }
    Ok(())
}

/// A change in the job's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JobChange {
    Down {
        node: usize,
        port: usize,
    },
    Up {
        node: usize,
        port: usize,
    },
    /// The controller's routes without the links.
    Around,
    /// The routes with them again.
    Back,
}

/// The event's changes in the job's time, in time order.
fn job_changes(plan: &Plan, links: &[LinkId], w: &WhatIf, detect_ns: u64) -> Vec<(u64, JobChange)> {
    let ends = |l: LinkId| (plan.links[l].a, plan.links[l].a_port);
    let mut job: Vec<(u64, JobChange)> = Vec::new();
    match (w.kind, w.flap) {
        (WhatIfKind::Fail, _) => {
            job.extend(links.iter().map(|&l| (w.at_ns, JobChange::Down { node: ends(l).0, port: ends(l).1 })));
            job.push((w.at_ns.saturating_add(detect_ns), JobChange::Around));
        }
        (WhatIfKind::Drain, _) => job.push((w.at_ns, JobChange::Around)),
        (WhatIfKind::Flap, Some(f)) => {
            for (down, up) in f.intervals(w.at_ns) {
                job.extend(links.iter().map(|&l| (down, JobChange::Down { node: ends(l).0, port: ends(l).1 })));
                // The controller routes around a link down longer than its detection time, and
                // back over it once it is up.
                if down.saturating_add(detect_ns) < up {
                    job.push((down.saturating_add(detect_ns), JobChange::Around));
                    job.push((up, JobChange::Back));
                }
                job.extend(links.iter().map(|&l| (up, JobChange::Up { node: ends(l).0, port: ends(l).1 })));
            }
        }
        (WhatIfKind::Flap, None) => {}
    }
    job.sort_by_key(|(at, _)| *at);
    job
}

/// What a step run on the changed fabric gave: reused for its repeats, counts and all.
#[derive(Clone, Copy)]
struct ChangedStep {
    completion_ns: u64,
    finished: bool,
    lost: u64,
    retransmitted: u64,
    timeouts: u64,
}

/// A step that starts at `t0` of the job: the changes that set the fabric's state at its start
/// (what happened before, at offset 0) and those to come (at their offsets).
fn step_changes(job: &[(u64, JobChange)], t0: u64) -> Vec<(u64, JobChange)> {
    let mut down: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut around = false;
    for (_, c) in job.iter().filter(|(at, _)| *at <= t0) {
        match *c {
            JobChange::Down { node, port } => {
                down.insert((node, port));
            }
            JobChange::Up { node, port } => {
                down.remove(&(node, port));
            }
            JobChange::Around => around = true,
            JobChange::Back => around = false,
        }
    }
    let mut out: Vec<(u64, JobChange)> =
        down.into_iter().map(|(node, port)| (0, JobChange::Down { node, port })).collect();
    if around {
        out.push((0, JobChange::Around));
    }
    out.extend(job.iter().filter(|(at, _)| *at > t0).map(|&(at, c)| (at - t0, c)));
    out
}

/// The controller's fabric once `down` is out of service: its routes around the links and,
/// under `--hash te`, its TE entries placed again over the links that remain (as `fabric link
/// down` re-places them on the testbed); the entries before the failure stay on `base`'s.
fn repaired(
    plan: &Plan,
    down: &BTreeSet<LinkId>,
    o: &SimOptions,
    hosts: &[crate::model::plan::NodeId],
    steps: &super::StepRuns,
) -> Result<SimFabric> {
    let mut fixed = SimFabric::from_controller(plan, down);
    fixed.set_hash(o.hash, o.hash_seed);
    super::install_te(&mut fixed, o, hosts, steps).context("placing TE entries around the failure")?;
    Ok(fixed)
}

/// Runs case `o` without and with `w`: the result without it (its label too), with the
/// what-if's report in its packet section. `base_down`: the links already down (`--down`).
pub fn simulate_whatif(
    plan: &Plan,
    base_down: &BTreeSet<LinkId>,
    o: &SimOptions,
    p: &PacketOptions,
    w: &WhatIf,
    detect_ns: u64,
) -> Result<SimResult> {
    let links = resolve_links(plan, w)?;
    let mut base = SimFabric::from_controller(plan, base_down);
    let mut result = simulate_packet(&mut base, o, p)?;
    let mut down = base_down.clone();
    down.extend(links.iter().copied());
    let (hosts, steps) = steps_of(&base, o)?;
    let fixed = repaired(plan, &down, o, &hosts, &steps)?;
    let (net, fixed_net) = (network(&base, p.link_delay_ns)?, network(&fixed, p.link_delay_ns)?);
    let job = job_changes(plan, &links, w, detect_ns);
    let mut twin = twin_of(&net, &base, endpoint_config(&o.endpoint)?, p);
    let mut report = WhatIfReport {
        kind: w.kind,
        target: w.target.clone(),
        at_ns: w.at_ns,
        detect_ns: if w.kind == WhatIfKind::Drain { 0 } else { detect_ns },
        rerouted: job.iter().any(|(_, c)| matches!(c, JobChange::Around)),
        period_ns: w.flap.map_or(0, |f| f.period_ns),
        count: w.flap.map_or(0, |f| f.count),
        links: links.iter().map(|&l| plan.link_label(l)).collect(),
        baseline_completion_s: 0.0,
        completion_s: 0.0,
        slowdown: 0.0,
        finished: true,
        steps_affected: Some(0),
        lost_packets: 0,
        retransmissions: 0,
        timeouts: 0,
    };
    let (mut t0, mut baseline_ns) = (0u64, 0u64);
    for (i, (step, repeat)) in steps.iter().enumerate() {
        let qps = qp_specs(&base, &crate::model::workload::on_hosts(step, &hosts), &o.endpoint);
        let healthy = twin.run_step(&qps, p.deadline_ns).with_context(|| format!("step {i}"))?.completion_ns;
        baseline_ns += healthy * *repeat as u64;
        // The step's result once every change happened before it began: each repeat on the
        // changed fabric counts its losses, resends and timeouts again.
        let mut changed: Option<ChangedStep> = None;
        for _ in 0..*repeat {
            let changes = step_changes(&job, t0);
            let all_past = changes.iter().all(|(at, _)| *at == 0);
            let took = if changes.iter().all(|(at, _)| *at > healthy) {
                healthy
            } else if let (true, Some(c)) = (all_past, changed) {
                report.finished &= c.finished;
                report.lost_packets += c.lost;
                report.retransmissions += c.retransmitted;
                report.timeouts += c.timeouts;
                c.completion_ns
            } else {
                let changes: Vec<Scheduled<'_, _>> = changes
                    .iter()
                    .map(|&(at_ns, c)| Scheduled {
                        at_ns,
                        change: match c {
                            JobChange::Down { node, port } => Change::LinkDown { node, port },
                            JobChange::Up { node, port } => Change::LinkUp { node, port },
                            JobChange::Around => Change::Routes(&fixed_net),
                            JobChange::Back => Change::Routes(&net),
                        },
                    })
                    .collect();
                let r = twin.run_step_with(&qps, p.deadline_ns, &changes).with_context(|| format!("step {i}"))?;
                let c = ChangedStep {
                    completion_ns: r.completion_ns,
                    finished: r.finished,
                    lost: r.lost_to_failures,
                    retransmitted: r.retransmitted(),
                    timeouts: r.qps.iter().map(|q| q.timeouts).sum::<u64>(),
                };
                report.finished &= c.finished;
                report.lost_packets += c.lost;
                report.retransmissions += c.retransmitted;
                report.timeouts += c.timeouts;
                if all_past {
                    changed = Some(c);
                }
                c.completion_ns
            };
            *report.steps_affected.get_or_insert(0) += usize::from(took != healthy);
            t0 += took;
        }
    }
    report.baseline_completion_s = baseline_ns as f64 * 1e-9;
    report.completion_s = t0 as f64 * 1e-9;
    report.slowdown = t0 as f64 / baseline_ns.max(1) as f64 - 1.0;
    if let Some(stats) = result.packet.as_mut() {
        stats.whatif = Some(report);
    }
    Ok(result)
}

/// The flow model's flap, by time-slicing: the job progresses at its healthy rate while the
/// links are up and at its rate on the fabric without them (the controller's routes around
/// them, from [`super::simulate`]) while they are down; the detection delay, the loss and the
/// retransmissions a failure costs are not modelled (the packet model has them).
pub fn simulate_flap_flow(plan: &Plan, base_down: &BTreeSet<LinkId>, o: &SimOptions, w: &WhatIf) -> Result<SimResult> {
    let flap = w.flap.context("a flap what-if without its period")?;
    let links = resolve_links(plan, w)?;
    let mut result = super::simulate(&mut SimFabric::from_controller(plan, base_down), o)?;
    let mut down = base_down.clone();
    down.extend(links.iter().copied());
    let failed = super::simulate(&mut SimFabric::from_controller(plan, &down), o)?;
    let healthy_ns = result.completion_s * 1e9;
    let took_ns = time_sliced_ns(healthy_ns, failed.completion_s * 1e9, w.at_ns, flap);
    let report = WhatIfReport {
        kind: WhatIfKind::Flap,
        target: w.target.clone(),
        at_ns: w.at_ns,
        detect_ns: 0,
        // The flow model routes around the links while they are down.
        rerouted: true,
        period_ns: flap.period_ns,
        count: flap.count,
        links: links.iter().map(|&l| plan.link_label(l)).collect(),
        baseline_completion_s: result.completion_s,
        completion_s: took_ns * 1e-9,
        slowdown: took_ns / healthy_ns.max(f64::MIN_POSITIVE) - 1.0,
        finished: true,
        steps_affected: None,
        lost_packets: 0,
        retransmissions: 0,
        timeouts: 0,
    };
    result.whatif = Some(report);
    Ok(result)
}

/// A job that takes `healthy_ns` on the healthy fabric and `failed_ns` without the links: its
/// completion when they are down for the first half of each of `flap`'s periods from `at_ns`
/// (progress at 1/healthy_ns per ns while up, 1/failed_ns while down).
pub fn time_sliced_ns(healthy_ns: f64, failed_ns: f64, at_ns: u64, flap: Flap) -> f64 {
    let (mut t, mut left) = (0.0f64, 1.0f64);
    for (down, up) in flap.intervals(at_ns) {
        for (until, rate) in [(down as f64, 1.0 / healthy_ns), (up as f64, 1.0 / failed_ns)] {
            let span = (until - t).max(0.0);
            if span * rate >= left {
                return t + left / rate;
            }
            left -= span * rate;
            t = t.max(until);
        }
    }
    t + left * healthy_ns
}

#[cfg(test)]
mod tests {
    use fabric_common::config::HashMode;

    use super::*;
    use crate::{
        endpoint::{CcMode, EndpointOptions, SportPolicy},
        model::{placement::Placement, topology::Topology, workload::Collective},
    };

    const PACKET: PacketOptions = PacketOptions { memory_limit_bytes: 1 << 32, ..crate::sim::packet::PACKET_DEFAULTS };

    fn allreduce() -> SimOptions {
        SimOptions {
            collective: Collective::Allreduce,
            ranks: None,
            message_bytes: 4 << 20,
            placement: Placement::Contiguous,
            seed: 1,
            hash: HashMode::Eecmp,
            hash_seed: None,
            endpoint: EndpointOptions { qps: 4, sport: SportPolicy::PerQp, cc: CcMode::None, ..Default::default() },
        }
    }

    fn whatif(plan: &Plan, kind: WhatIfKind, target: &str, at_ns: u64) -> WhatIfReport {
        let w = WhatIf { kind, target: target.into(), at_ns, flap: None };
        let r = simulate_whatif(plan, &BTreeSet::new(), &allreduce(), &PACKET, &w, 20_000).unwrap();
        r.packet.unwrap().whatif.unwrap()
    }

    #[test]
    fn a_failure_mid_job_slows_it_and_delivers_every_byte_one_after_it_changes_nothing() {
        let plan = Plan::new(&Topology::default_topology());
        let mid = whatif(&plan, WhatIfKind::Fail, "z0r0:z0c0", 30_000);
        assert!(mid.finished, "every QP of every step completed: {mid:?}");
        assert!(mid.lost_packets > 0 && mid.retransmissions > 0, "{mid:?}");
        assert!(mid.slowdown > 0.0 && mid.steps_affected > Some(0), "{mid:?}");
        let after_s = mid.baseline_completion_s;
        let after = whatif(&plan, WhatIfKind::Fail, "z0r0:z0c0", (after_s * 1e9) as u64 + 1_000);
        assert_eq!((after.slowdown, after.steps_affected, after.lost_packets), (0.0, Some(0), 0), "{after:?}");
        assert_eq!(after.completion_s, after.baseline_completion_s);
        // A whole spine failing costs at least as much as one of its links.
        let spine = whatif(&plan, WhatIfKind::Fail, "z0c0", 30_000);
        assert!(spine.finished && spine.links.len() == 4 && spine.lost_packets >= mid.lost_packets, "{spine:?}");
    }

    /// A spine that flaps (down half of each period, over the whole job) slows the ring against
    /// the healthy fabric and less than the same spine failing for good, in both models, when
    /// the spines' capacity is what the job needs. (Each flap's failure loses what was on the
    /// links, so in the packet model many short flaps can cost more than one failure.)
    #[test]
    fn a_flapping_spine_slows_the_job_less_than_its_failure() {
        let mut plan = Plan::new(&Topology::default_topology());
        // Rack z0r0's uplinks at a quarter of their rate: its ring traffic needs all four, so
        // without one the job loses capacity for as long as the link is down.
        for (r, c) in (0..4).flat_map(|r| (0..4).map(move |c| (r, c))) {
            let l = plan.find_link(&format!("z0r{r}:z0c{c}")).unwrap();
            plan.links[l].rate_gbps = 25.0;
        }
        let plan = plan;
        let mut o = allreduce();
        // A NIC's timeout after a loss would dwarf the job (64 ms against a few hundred us):
        // one short enough that the fabric's capacity, not the timer, decides.
        o.endpoint.retransmit_timeout_ns = 50_000;
        o.endpoint.qps = 8;
        let run = |w: &WhatIf| {
            let r = simulate_whatif(&plan, &BTreeSet::new(), &o, &PACKET, w, 20_000).unwrap();
            r.packet.unwrap().whatif.unwrap()
        };
        let failed = run(&WhatIf { kind: WhatIfKind::Fail, target: "z0c0".into(), at_ns: 0, flap: None });
        let healthy_ns = (failed.baseline_completion_s * 1e9) as u64;
        let flap = |count: u32, period: u64| run(&WhatIf::flap("z0c0", &format!("{period}ns"), count).unwrap());
        let flapping = flap(8, healthy_ns / 4);
        assert!(flapping.finished && failed.finished, "{flapping:?}");
        assert_eq!((flapping.period_ns, flapping.count), (healthy_ns / 4, 8));
        assert!(flapping.lost_packets > 0 && flapping.steps_affected > Some(0), "{flapping:?}");
        // Down for longer than the 20 us detection: rerouted; a flap of 2 ns outages: never.
        assert!(flapping.rerouted && failed.rerouted);
        assert!(!flap(3, 2).rerouted);
        assert!(
            0.0 < flapping.slowdown && flapping.slowdown < failed.slowdown,
            "flap {:+.3} vs failure {:+.3}",
            flapping.slowdown,
            failed.slowdown
        );
        // The flow model, time-sliced: healthy < flapping < failed (32 QPs: enough that the
        // hash spreads them over the spines in proportion, so one spine fewer costs capacity).
        let mut o = allreduce();
        o.endpoint.qps = 32;
        let w = WhatIf::flap("z0c0", "100us", 1000).unwrap();
        let r = simulate_flap_flow(&plan, &BTreeSet::new(), &o, &w).unwrap();
        let f = r.whatif.unwrap();
        let down = plan.nodes[plan.node_by_name("z0c0").unwrap()].ports.iter().map(|p| p.link).collect();
        let failed = crate::sim::simulate(&mut SimFabric::from_controller(&plan, &down), &o).unwrap();
        assert!(
            f.baseline_completion_s < f.completion_s && f.completion_s < failed.completion_s,
            "flow model: healthy {} s, flapping {} s, failed {} s",
            f.baseline_completion_s,
            f.completion_s,
            failed.completion_s
        );
        // It slices the job's time, not its steps: it does not say how many steps were hit.
        assert_eq!(f.steps_affected, None);
    }

    #[test]
    fn time_slicing_progresses_at_each_rate_in_turn() {
        let flap = Flap { period_ns: 100, count: 2 };
        // Healthy 100 ns, failed 200 ns: from 0 to 50 down (a quarter done), 50 to 100 up (half
        // more), 100 to 150 down (the last quarter).
        assert_eq!(time_sliced_ns(100.0, 200.0, 0, flap), 150.0);
        // The flap begins after the job: nothing changes; as slow as failed, it is the failure.
        assert_eq!(time_sliced_ns(100.0, 200.0, 1_000, flap), 100.0);
        assert_eq!(time_sliced_ns(100.0, 100.0, 0, flap), 100.0);
        // After the last period, healthy again: 2 x 25 done in the down halves, 50 in the up
        // half between them... 25 + 50 + 25 = 100% at 150 ns; a longer job continues healthy.
        assert_eq!(time_sliced_ns(200.0, 400.0, 0, flap), 200.0 + 50.0);
        let w = WhatIf::flap("z0c0", "0ns", 1);
        assert!(format!("{:#}", w.unwrap_err()).contains("--period"));
        assert!(format!("{:#}", WhatIf::flap("z0c0", "1ms", 0).unwrap_err()).contains("--count"));
        assert_eq!(WhatIf::flap("z0c0@5us", "1ms", 3).unwrap().at_ns, 5_000);
    }

    /// Under TE the controller places its entries again around a failed link, as on the
    /// testbed: before the failure some of them send z0r0's traffic over it, after it none do,
    /// and the job completes, slowed by the loss.
    #[test]
    fn te_entries_are_placed_again_around_a_failure() {
        let plan = Plan::new(&Topology::default_topology());
        let o = SimOptions { hash: HashMode::Te, ..allreduce() };
        let link = plan.find_link("z0r0:z0c0").unwrap();
        let mut base = SimFabric::from_controller(&plan, &BTreeSet::new());
        base.set_hash(o.hash, o.hash_seed);
        let (hosts, steps) = steps_of(&base, &o).unwrap();
        crate::sim::install_te(&mut base, &o, &hosts, &steps).unwrap();
        let fixed = repaired(&plan, &BTreeSet::from([link]), &o, &hosts, &steps).unwrap();
        // The TE entries whose chosen member's link is `link`.
        let over_link = |f: &SimFabric| {
            f.te.iter()
                .filter(|((node, _), e)| {
                    let port = f.members(*node, e.group)[e.member_index as usize];
                    plan.nodes[*node].ports[port].link == link
                })
                .count()
        };
        assert!(over_link(&base) > 0, "no TE entry used z0r0:z0c0 before the failure");
        assert!(!fixed.te.is_empty(), "no TE entry after the failure");
        assert_eq!(over_link(&fixed), 0, "an entry placed after the failure still uses the failed link");
        let w = WhatIf { kind: WhatIfKind::Fail, target: "z0r0:z0c0".into(), at_ns: 30_000, flap: None };
        let r = simulate_whatif(&plan, &BTreeSet::new(), &o, &PACKET, &w, 20_000).unwrap();
        let r = r.packet.unwrap().whatif.unwrap();
        assert!(r.finished && r.lost_packets > 0 && r.slowdown > 0.0, "{r:?}");
    }

    #[test]
    fn a_drain_loses_nothing() {
        let plan = Plan::new(&Topology::default_topology());
        let r = whatif(&plan, WhatIfKind::Drain, "z0c0", 30_000);
        assert!(r.finished && r.lost_packets == 0, "{r:?}");
        assert!(r.steps_affected > Some(0), "the ring's steps crossed the drained spine: {r:?}");
    }

    #[test]
    fn bad_what_ifs_are_refused_by_name() {
        let plan = Plan::new(&Topology::default_topology());
        let err = |kind, spec: &str| {
            let w = WhatIf::parse(kind, spec)?;
            resolve_links(&plan, &w).map(|_| ())
        };
        let msg = |r: Result<()>| format!("{:#}", r.unwrap_err());
        assert!(msg(err(WhatIfKind::Fail, "z0r0:z0c0")).contains("--fail-at \"z0r0:z0c0\": expected TARGET@TIME"));
        assert!(msg(err(WhatIfKind::Drain, "z0c0@5")).contains("needs a unit"));
        assert!(msg(err(WhatIfKind::Fail, "z0r0:z0c0@1.2.3us")).contains("is not a number"));
        assert!(msg(err(WhatIfKind::Fail, "nope@5us")).contains("no node \"nope\""));
        assert!(msg(err(WhatIfKind::Fail, "z0r0h0@5us")).contains("is a host"));
        assert!(msg(err(WhatIfKind::Fail, "z0r0:z0r0h0@5us")).contains("single-homed"));
        assert!(err(WhatIfKind::Drain, "z0c1@1.5ms").is_ok());
        assert_eq!(parse_time_ns("1.5ms").unwrap(), 1_500_000);
    }
}
