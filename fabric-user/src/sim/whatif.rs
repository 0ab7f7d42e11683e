//! Operational what-ifs on the twin: `fabric sim --model packet --fail-at TARGET@TIME` or
//! `--drain-at TARGET@TIME` (TARGET a link `SWITCH:PORT` or a switch), and the job's slowdown
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
//!
//! TIME is in the job's modelled time (`250us`, `1.5ms`, `2s`, `800ns`). The job's steps run
//! back to back as in [`super::packet::simulate_packet`]; a step that ends before the event
//! keeps its result, a step that runs into it is simulated with the event at its offset, and
//! steps that start once every change happened are simulated once on the changed fabric and
//! counted as often as they repeat. An event after the job's end changes nothing.
use std::collections::BTreeSet;

use anyhow::{Context as _, Result, bail, ensure};
use fabric_common::config::HashMode;
use fabric_twin::{Change, Scheduled, Twin};
use serde::Serialize;

use super::{
    SimOptions, SimResult,
    packet::{PacketOptions, endpoint_config, network, qp_specs, simulate_packet},
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
    /// A link (`SWITCH:PORT`) or a switch.
    pub target: String,
    pub at_ns: u64,
}

impl WhatIf {
    /// `TARGET@TIME`, `option` naming the flag in errors.
    pub fn parse(kind: WhatIfKind, spec: &str) -> Result<Self> {
        let option = match kind {
            WhatIfKind::Fail => "--fail-at",
            WhatIfKind::Drain => "--drain-at",
        };
        let (target, time) = spec
            .rsplit_once('@')
            .with_context(|| format!("{option} {spec:?}: expected TARGET@TIME, e.g. z0r0:z0c1@200us"))?;
        ensure!(!target.is_empty(), "{option} {spec:?}: no link or switch before the @");
        let at_ns = parse_time_ns(time).with_context(|| format!("{option} {spec:?}"))?;
        Ok(WhatIf { kind, target: target.to_string(), at_ns })
    }
}

/// `250us`, `1.5ms`, `2s`, `800ns` to nanoseconds.
pub fn parse_time_ns(s: &str) -> Result<u64> {
    let s = s.trim();
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
        let link = &plan.links[l];
        if let Some(h) = [link.a, link.b].into_iter().find(|&n| plan.nodes[n].role == Role::Host) {
            bail!(
                "{}: the link of host {} (hosts are single-homed: without it the job cannot finish)",
                plan.link_label(l),
                plan.nodes[h].name
            );
        }
    }
    Ok(links)
}

/// A change in the job's time.
enum JobChange {
    Down { node: usize, port: usize },
    Routes,
}

/// Runs case `o` without and with `w`: the baseline's result with the what-if's report in its
/// packet section. `base_down`: the links already down (`--down`).
pub fn simulate_whatif(
    plan: &Plan,
    base_down: &BTreeSet<LinkId>,
    o: &SimOptions,
    p: &PacketOptions,
    w: &WhatIf,
    detect_ns: u64,
) -> Result<SimResult> {
    ensure!(o.hash != HashMode::Te, "--hash te: what-ifs would need the controller to re-place its TE entries");
    let links = resolve_links(plan, w)?;
    let mut base = SimFabric::from_controller(plan, base_down);
    let mut result = simulate_packet(&mut base, o, p)?;
    let mut down = base_down.clone();
    down.extend(links.iter().copied());
    let mut fixed = SimFabric::from_controller(plan, &down);
    fixed.set_hash(o.hash, o.hash_seed);
    let (hosts, steps) = steps_of(&base, o)?;
    let (net, fixed_net) = (network(&base, p.link_delay_ns)?, network(&fixed, p.link_delay_ns)?);
    let routes_at = match w.kind {
        WhatIfKind::Fail => w.at_ns.saturating_add(detect_ns),
        WhatIfKind::Drain => w.at_ns,
    };
    let mut job: Vec<(u64, JobChange)> = Vec::new();
    if w.kind == WhatIfKind::Fail {
        job.extend(
            links.iter().map(|&l| (w.at_ns, JobChange::Down { node: plan.links[l].a, port: plan.links[l].a_port })),
        );
    }
    job.push((routes_at, JobChange::Routes));
    let mut twin = Twin::new(&net, endpoint_config(&o.endpoint)?, p.seed);
    let mut report = WhatIfReport {
        kind: w.kind,
        target: w.target.clone(),
        at_ns: w.at_ns,
        detect_ns: if w.kind == WhatIfKind::Fail { detect_ns } else { 0 },
        links: links.iter().map(|&l| plan.link_label(l)).collect(),
        baseline_completion_s: 0.0,
        completion_s: 0.0,
        slowdown: 0.0,
        finished: true,
        steps_affected: 0,
        lost_packets: 0,
        retransmissions: 0,
        timeouts: 0,
    };
    let (mut t0, mut baseline_ns) = (0u64, 0u64);
    for (i, (step, repeat)) in steps.iter().enumerate() {
        let qps = qp_specs(&base, &crate::model::workload::on_hosts(step, &hosts), &o.endpoint);
        let healthy = twin.run_step(&qps, p.deadline_ns).with_context(|| format!("step {i}"))?.completion_ns;
        baseline_ns += healthy * *repeat as u64;
        // The step's result once every change happened before it began.
        let mut changed: Option<u64> = None;
        for _ in 0..*repeat {
            let took = if job.iter().all(|(at, _)| *at > t0 + healthy) {
                healthy
            } else if job.iter().all(|(at, _)| *at <= t0) && changed.is_some() {
                changed.expect("just checked")
            } else {
                let changes: Vec<Scheduled<'_, _>> = job
                    .iter()
                    .map(|(at, c)| Scheduled {
                        at_ns: at.saturating_sub(t0),
                        change: match *c {
                            JobChange::Down { node, port } => Change::LinkDown { node, port },
                            JobChange::Routes => Change::Routes(&fixed_net),
                        },
                    })
                    .collect();
                let r = twin.run_step_with(&qps, p.deadline_ns, &changes).with_context(|| format!("step {i}"))?;
                report.finished &= r.finished;
                report.lost_packets += r.lost_to_failures;
                report.retransmissions += r.retransmitted();
                report.timeouts += r.qps.iter().map(|q| q.timeouts).sum::<u64>();
                if job.iter().all(|(at, _)| *at <= t0) {
                    changed = Some(r.completion_ns);
                }
                r.completion_ns
            };
            report.steps_affected += usize::from(took != healthy);
            t0 += took;
        }
    }
    report.baseline_completion_s = baseline_ns as f64 * 1e-9;
    report.completion_s = t0 as f64 * 1e-9;
    report.slowdown = t0 as f64 / baseline_ns.max(1) as f64 - 1.0;
    result.case = format!("{} {}", result.case, describe(&report));
    if let Some(stats) = result.packet.as_mut() {
        stats.whatif = Some(report);
    }
    Ok(result)
}

/// `fail z0r0:z0c1 at 200 us`.
pub fn describe(r: &WhatIfReport) -> String {
    let kind = match r.kind {
        WhatIfKind::Fail => "fail",
        WhatIfKind::Drain => "drain",
    };
    format!("{kind} {}@{}us", r.target, r.at_ns as f64 / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        endpoint::{CcMode, EndpointOptions, SportPolicy},
        model::{placement::Placement, topology::Topology, workload::Collective},
    };

    const PACKET: PacketOptions =
        PacketOptions { link_delay_ns: 1_000, deadline_ns: 10_000_000_000, seed: 1, memory_limit_bytes: 1 << 32 };

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
        let w = WhatIf { kind, target: target.into(), at_ns };
        let r = simulate_whatif(plan, &BTreeSet::new(), &allreduce(), &PACKET, &w, 20_000).unwrap();
        r.packet.unwrap().whatif.unwrap()
    }

    #[test]
    fn a_failure_mid_job_slows_it_and_delivers_every_byte_one_after_it_changes_nothing() {
        let plan = Plan::new(&Topology::default_topology());
        let mid = whatif(&plan, WhatIfKind::Fail, "z0r0:z0c0", 30_000);
        assert!(mid.finished, "every QP of every step completed: {mid:?}");
        assert!(mid.lost_packets > 0 && mid.retransmissions > 0, "{mid:?}");
        assert!(mid.slowdown > 0.0 && mid.steps_affected > 0, "{mid:?}");
        let after_s = mid.baseline_completion_s;
        let after = whatif(&plan, WhatIfKind::Fail, "z0r0:z0c0", (after_s * 1e9) as u64 + 1_000);
        assert_eq!((after.slowdown, after.steps_affected, after.lost_packets), (0.0, 0, 0), "{after:?}");
        assert_eq!(after.completion_s, after.baseline_completion_s);
        // A whole spine failing costs at least as much as one of its links.
        let spine = whatif(&plan, WhatIfKind::Fail, "z0c0", 30_000);
        assert!(spine.finished && spine.links.len() == 4 && spine.lost_packets >= mid.lost_packets, "{spine:?}");
    }

    #[test]
    fn a_drain_loses_nothing() {
        let plan = Plan::new(&Topology::default_topology());
        let r = whatif(&plan, WhatIfKind::Drain, "z0c0", 30_000);
        assert!(r.finished && r.lost_packets == 0, "{r:?}");
        assert!(r.steps_affected > 0, "the ring's steps crossed the drained spine: {r:?}");
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
