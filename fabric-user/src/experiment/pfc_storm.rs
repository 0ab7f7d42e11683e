//! `pfc-storm`: a receiver that stops draining (a NIC with a full buffer) under an incast: how far
//! its pauses propagate, tier by tier, and whether the PFC watchdog notices.
use std::collections::BTreeMap;

use anyhow::Result;

use super::{
    harness::{Better, Case, Ctx, FaultRuns, Metric, Outcome, Scenario, Table, completion_ms, switch_drops},
    verdict::{Comparison, Verdict, per_seed},
};
use crate::{
    endpoint::{CcMode, SlowReceiver},
    model::plan::Role,
    run::{RunOptions, RunResult},
    state::State,
    telemetry::stats,
};

pub const SCENARIO: Scenario = Scenario {
    name: "pfc-storm",
    summary: "A slow receiver (a host sending PFC XOFF for its data class, as a NIC with a full buffer) under \
              a 4-to-1 incast: pause frames per switch tier (RTSW, CTSW) against the same incast with a \
              healthy receiver, and the PFC watchdog.",
    paper: "PFC's risk is pause propagation: a congested or stuck receiver pauses its switch, which fills and \
            pauses its upstream, up to the spines and other racks (head-of-line blocking, PFC storms). Meta \
            reports that with their tuning CTSWs did not persistently pause RTSWs; a PFC watchdog detects \
            ports paused for too long.",
    run,
};

/// Watchdog storms so far: everywhere, and on the receiver's RTSW port toward the receiver (the
/// only port a stuck receiver pauses; a healthy incast pauses the ports feeding the RTSW).
#[derive(Clone, Copy, Default)]
struct Storms {
    all: u64,
    at_receiver: u64,
}

/// PFC frames (XOFF + refresh) each switch tier's agents have sent, and watchdog storms, so far.
/// A run and the switches' counters read around it.
struct Counted {
    r: RunResult,
    before: BTreeMap<&'static str, u64>,
    storms_before: Storms,
    after: BTreeMap<&'static str, u64>,
    storms_after: Storms,
    /// Frames the switches dropped during the run.
    dropped: u64,
}

/// One attempt of `o` with the counters read around it: the outer error is reading them (a
/// setup error), the inner the run's.
fn counted_run(ctx: &Ctx, state: &State, label: &str, o: &RunOptions) -> Result<Result<Counted>> {
    let (before, storms_before) = tier_pauses(state)?;
    let dropped_before = switch_drops(state)?;
    let r = ctx.run_once(state, label, o);
    let (after, storms_after) = tier_pauses(state)?;
    let dropped = switch_drops(state)?.saturating_sub(dropped_before);
    Ok(r.map(|r| Counted { r, before, storms_before, after, storms_after, dropped }))
}

impl Counted {
    /// PFC frames the hosts sent during the run.
    fn host_pfc(&self) -> u64 {
        self.r.hosts.iter().map(|h| h.pause_frames_sent).sum()
    }

    /// PFC frames the switches of `tier` sent during the run.
    fn tier_pfc(&self, tier: &str) -> u64 {
        self.after.get(tier).copied().unwrap_or(0) - self.before.get(tier).copied().unwrap_or(0)
    }
}

/// The case metrics of one run; NaN (not measured) for a run that failed twice.
fn push_metrics(c: &mut Case, m: Option<&Counted>) {
    c.push_of("host_pfc", m, |m| m.host_pfc() as f64);
    c.push_of("rtsw_pfc", m, |m| m.tier_pfc("rtsw") as f64);
    c.push_of("ctsw_pfc", m, |m| m.tier_pfc("ctsw") as f64);
    c.push_of("storms", m, |m| (m.storms_after.all - m.storms_before.all) as f64);
    c.push_of("receiver_storms", m, |m| (m.storms_after.at_receiver - m.storms_before.at_receiver) as f64);
    c.push_of("completion_ms", m, |m| completion_ms(&m.r));
    c.push_of("host_paused_ms", m, |m| m.r.hosts.iter().map(|h| h.paused_ns).sum::<u64>() as f64 / 1e6);
    // Frames the switches dropped during the run: PFC keeps the class lossless.
    c.push_of("dropped", m, |m| m.dropped as f64);
    if let Some(m) = m {
        c.push_run(&m.r);
    }
}

fn tier_pauses(state: &State) -> Result<(BTreeMap<&'static str, u64>, Storms)> {
    let r = stats::collect(state)?;
    let mut tiers = BTreeMap::new();
    let mut storms = Storms::default();
    for a in &r.agents {
        let role = state.plan.node_by_name(&a.node).map(|n| state.plan.nodes[n].role);
        let tier = match role {
            Some(Role::Rtsw) => "rtsw",
            Some(Role::Ctsw) => "ctsw",
            Some(Role::Atsw) => "atsw",
            _ => continue,
        };
        *tiers.entry(tier).or_insert(0) += a.pfc.iter().map(|p| p.xoff_sent + p.refresh_sent).sum::<u64>();
        storms.all += a.storms.len() as u64;
        let receiver = super::incast::RECEIVER;
        storms.at_receiver += a.storms.iter().filter(|e| a.node == "z0r0" && e.ifname == receiver).count() as u64;
    }
    Ok((tiers, storms))
}

fn run(ctx: &Ctx) -> Result<Outcome> {
    if let Some(model) = ctx.twin {
        return run_twin(ctx, model);
    }
    let message: u64 = ctx.pick(2 << 20, 4 << 20);
    let mut topo = super::harness::shipped_topology(None)?;
    let shipped_scale = topo.time_scale;
    topo.time_scale = ctx.congestion_time_scale();
    // The stall is wall time: it lasts as long, in modelled time, at any time scale.
    let stall_s: f64 = ctx.pick(1.0, 2.0) * topo.time_scale as f64 / shipped_scale as f64;
    let scale = topo.time_scale;
    topo.congestion.watchdog_us = 50.0;
    let watchdog_wall_ms = topo.congestion.watchdog_us * topo.time_scale as f64 / 1e3;
    let mut cases = vec![Case::new("healthy", "healthy receiver"), Case::new("slow", "slow receiver")];
    let mut rows = Vec::new();
    let mut faults = FaultRuns::default();
    ctx.with_testbed(topo, |state| {
        for &seed in &ctx.seeds {
            for (i, slow) in [false, true].into_iter().enumerate() {
                let mut o = super::incast::incast(CcMode::None, message);
                if slow {
                    o.endpoint.slow_receiver = Some(SlowReceiver {
                        host: super::incast::RECEIVER.into(),
                        duration_ns: (stall_s * 1e9) as u64,
                    });
                }
                let label = format!("{} seed {seed}", cases[i].key);
                // The stalled runs' delivery is what `stall-loses-no-data` judges: a failed one
                // is measured, not the experiment's error. Each attempt reads the switches'
                // counters around itself, so a failed attempt's pauses and drops are not counted.
                let m = if slow {
                    faults.attempt(&label, || counted_run(ctx, state, &label, &o))?
                } else {
                    Some(ctx.retry(&label, || counted_run(ctx, state, &label, &o))?)
                };
                push_metrics(&mut cases[i], m.as_ref());
                let Some(m) = m else { continue };
                rows.push(vec![
                    seed.to_string(),
                    cases[i].label.clone(),
                    m.host_pfc().to_string(),
                    m.tier_pfc("rtsw").to_string(),
                    m.tier_pfc("ctsw").to_string(),
                    (m.storms_after.all - m.storms_before.all).to_string(),
                    (m.storms_after.at_receiver - m.storms_before.at_receiver).to_string(),
                ]);
            }
        }
        Ok(())
    })?;
    let verdicts = verdicts(&cases, &format!("50 µs modelled = {watchdog_wall_ms:.0} ms wall"), &faults);
    let fault_notes = faults.notes();
    Ok(Outcome {
        setup: vec![
            format!(
                "Default testbed (4 racks x 2 hosts, 4 CTSWs), time scale {} (`--time-scale` sets it), \
                 `congestion.watchdog_us = 50` (modelled; {watchdog_wall_ms:.0} ms wall).",
                scale
            ),
            format!(
                "Incast of {} MiB from {} into {} with PFC only; in the slow case the receiver sends XOFF to its \
                 RTSW every half pause time for {stall_s} s from the start and reads nothing, then resumes.",
                message >> 20,
                super::incast::HOSTS[1..].join(", "),
                super::incast::RECEIVER
            ),
            "Per tier: PFC frames (XOFF + refresh) the switch agents of that tier sent during the run.".into(),
        ],
        metrics: vec![
            Metric::new("host_pfc", "PFC frames sent by hosts (the slow receiver)", "", Better::None, false),
            Metric::new("rtsw_pfc", "PFC frames sent by RTSWs", "", Better::Lower, true),
            Metric::new("ctsw_pfc", "PFC frames sent by CTSWs", "", Better::Lower, true),
            Metric::new("storms", "PFC watchdog storms", "", Better::None, true),
            Metric::new(
                "receiver_storms",
                "watchdog storms on z0r0's port toward the receiver",
                "",
                Better::None,
                false,
            ),
            Metric::new("completion_ms", "incast completion", "ms wall", Better::Lower, false),
            Metric::new("host_paused_ms", "paused time of hosts", "ms wall, summed", Better::Lower, false),
        ],
        cases,
        verdicts,
        notes: fault_notes,
        tables: vec![Table {
            title: "Pause propagation per run".into(),
            header: ["seed", "receiver", "host PFC", "RTSW PFC", "CTSW PFC", "watchdog storms", "at z0r0->receiver"]
                .map(String::from)
                .to_vec(),
            rows,
        }],
    })
}

/// The PFC watchdog on the twin, modelled µs: as the testbed variant sets it.
const TWIN_WATCHDOG_US: f64 = 50.0;

/// The same two cases on the twin: the incast of `incast`'s twin variant, the receiver (rank 0)
/// healthy or stalled. The twin has no watchdog process: a port counts as a storm when one of
/// its pauses lasted longer than the watchdog's time, read from the paused time per tier pair.
fn run_twin(ctx: &Ctx, model: super::twin::TwinModel) -> Result<Outcome> {
    use super::twin::{TwinRun, run_twin_cases_then};
    use crate::sim::packet::Stall;
    let fabric = model.fabric(crate::model::topology::Topology::default_topology(), |_| {});
    let message: u64 = ctx.pick(2 << 20, 4 << 20);
    let ranks = if model.scale.is_some() { 17 } else { super::incast::HOSTS.len() };
    let stall_us: u64 = ctx.pick(500, 1000);
    let endpoint = super::incast::incast(CcMode::None, message).endpoint;
    let o = super::incast::twin_options(crate::model::workload::Collective::Incast, ranks, message, endpoint);
    let stall = Stall { rank: 0, duration_ns: stall_us * 1000 };
    let runs = [
        TwinRun { case: 0, fabric: &fabric, options: o.clone(), stall: None },
        TwinRun { case: 1, fabric: &fabric, options: o, stall: Some(stall) },
    ];
    let mut cases = vec![Case::new("healthy", "healthy receiver"), Case::new("slow", "slow receiver")];
    run_twin_cases_then(ctx, &runs, &mut cases, |c, r, _, _| push_twin_metrics(c, r))?;
    let verdicts =
        verdicts(&cases, &format!("{TWIN_WATCHDOG_US} µs modelled, the twin's longest pauses"), &FaultRuns::default());
    Ok(Outcome {
        setup: vec![
            format!(
                "Incast of {} MiB from {} senders, each on a rack of its own, into one receiver with PFC only; in the \
                 slow case the receiver's NIC sends XOFF to its RTSW every half pause time for {stall_us} µs from the \
                 start, then a resume.",
                message >> 20,
                ranks - 1
            ),
            format!(
                "Per tier: PFC frames the switches of that tier sent (XOFF, refresh and resume). Watchdog: a port \
                 whose longest continuous pause exceeded {TWIN_WATCHDOG_US} µs counts as a storm (the twin keeps each \
                 port's longest pause; `receiver_storms` reads the RTSW ports paused by hosts, `storms` counts the \
                 tier pairs with such a pause)."
            ),
        ],
        metrics: vec![
            Metric::new("host_pfc", "PFC frames sent by hosts (the slow receiver)", "", Better::None, false),
            Metric::new("rtsw_pfc", "PFC frames sent by RTSWs", "", Better::Lower, true),
            Metric::new("ctsw_pfc", "PFC frames sent by CTSWs", "", Better::Lower, true),
            Metric::new("storms", "tier pairs paused longer than the watchdog", "", Better::None, true),
            Metric::new(
                "receiver_storms",
                "RTSW port toward a host paused longer than the watchdog",
                "",
                Better::None,
                false,
            ),
            Metric::new("completion_ms", "incast completion", "ms modelled", Better::Lower, false),
            Metric::new("host_paused_ms", "paused time of hosts", "ms, summed", Better::Lower, false),
            Metric::new("ctsw_rtsw_longest_us", "longest pause of an RTSW port by a CTSW", "µs", Better::Lower, false),
        ],
        cases,
        verdicts,
        notes: vec![],
        tables: vec![],
    })
}

fn push_twin_metrics(c: &mut Case, r: &crate::sim::SimResult) {
    let Some(p) = r.packet.as_ref() else { return };
    let sent = |tier: &str| p.tiers.iter().filter(|t| t.tier == tier).map(|t| t.pauses_sent).sum::<u64>() as f64;
    c.push("host_pfc", sent("host"));
    c.push("rtsw_pfc", sent("rtsw"));
    c.push("ctsw_pfc", sent("ctsw"));
    let watchdog_ns = (TWIN_WATCHDOG_US * 1e3) as u64;
    let over = |t: &&fabric_twin::report::PausedTime| t.longest_pause_ns > watchdog_ns;
    c.push("storms", p.paused.iter().filter(over).count() as f64);
    let receiver = p.paused.iter().filter(|t| t.pausing == "host" && t.paused == "rtsw").filter(over).count();
    c.push("receiver_storms", receiver as f64);
    // A run that did not finish counts as a drop: it lost data somewhere.
    c.push("dropped", f64::from(u8::from(!p.finished)) + p.drops as f64);
}

/// `faults`: the stalled runs on the testbed, as attempted (none on the twin).
fn verdicts(cases: &[Case], watchdog: &str, faults: &FaultRuns) -> Vec<Verdict> {
    let (healthy, slow) = (&cases[0], &cases[1]);
    let storms = (slow.values_of("receiver_storms"), healthy.values_of("receiver_storms"));
    vec![
        Comparison {
            key: "pauses-reach-spine",
            claim: "A stuck receiver's pauses propagate beyond its rack: the spine tier (CTSW) pauses its upstream",
            metric: "ctsw_pfc",
            unit: " frames",
            cases: ("slow", "healthy"),
            better: Better::Higher,
            // A healthy incast makes CTSWs pause too (5 to 11 frames a run here): the claim is
            // that a stuck receiver adds clearly more.
            margin_pct: 20.0,
        }
        .judge(cases)
        .headline(),
        Verdict::fact(
            "watchdog-fires",
            "The PFC watchdog detects the port the stuck receiver pauses (z0r0's port toward it), and does not \
             fire there for a healthy receiver",
            format!(
                "watchdog storms on z0r0's port toward the receiver per run: slow receiver {}, healthy {} (watchdog \
                 {watchdog}; storms anywhere: slow {}, healthy {})",
                per_seed(&storms.0, ""),
                per_seed(&storms.1, ""),
                per_seed(&slow.values_of("storms"), ""),
                per_seed(&healthy.values_of("storms"), "")
            ),
            !storms.0.is_empty() && storms.0.iter().all(|&v| v >= 1.0) && storms.1.iter().all(|&v| v == 0.0),
        ),
        faults.judged(Verdict::fact(
            "stall-loses-no-data",
            "Lossless: the stall costs time, not data (no frame dropped, every run finished)",
            format!(
                "frames the switches dropped per run with the slow receiver: {}",
                per_seed(&slow.values_of("dropped"), "")
            ),
            slow.values_of("dropped").iter().all(|&v| v == 0.0),
        )),
        Comparison {
            key: "stall-costs-time",
            claim: "The stall costs the incast time: the healthy receiver's incast completes sooner",
            metric: "completion_ms",
            unit: " ms",
            cases: ("healthy", "slow"),
            better: Better::Lower,
            margin_pct: 5.0,
        }
        .judge(cases),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{case::testing::assert_each_can_fail, verdict::Decision};

    fn cases(slow_storms: [f64; 3], healthy_storms: [f64; 3], lost: [f64; 3]) -> Vec<Case> {
        let c = |k: &str, pfc: [f64; 3], storms: [f64; 3], ms: [f64; 3], lost: [f64; 3]| {
            Case::with(
                k,
                &[
                    ("ctsw_pfc", &pfc),
                    ("receiver_storms", &storms),
                    ("storms", &storms),
                    ("completion_ms", &ms),
                    ("dropped", &lost),
                ],
            )
        };
        vec![
            c("healthy", [5.0, 6.0, 5.0], healthy_storms, [800.0, 810.0, 790.0], [0.0; 3]),
            c("slow", [16.0, 17.0, 18.0], slow_storms, [2500.0, 2510.0, 2490.0], lost),
        ]
    }

    #[test]
    fn the_watchdog_must_fire_for_the_stuck_receiver_only() {
        let v = verdicts(&cases([1.0; 3], [0.0; 3], [0.0; 3]), "test", &FaultRuns::default());
        assert!(v.iter().all(|v| v.direction == Decision::Matches), "{v:#?}");
        let v = verdicts(&cases([1.0; 3], [0.0, 1.0, 0.0], [0.0; 3]), "test", &FaultRuns::default());
        assert_eq!(v[1].direction, Decision::DoesNotMatch, "a storm in a healthy run");
        let v = verdicts(&cases([1.0, 0.0, 1.0], [0.0; 3], [0.0, 4096.0, 0.0]), "test", &FaultRuns::default());
        assert_eq!(v[1].direction, Decision::DoesNotMatch, "a stall the watchdog missed");
        assert_eq!(v[2].direction, Decision::DoesNotMatch, "a dropped frame");
    }

    #[test]
    fn the_comparisons_turn_with_their_cases() {
        assert_each_can_fail(
            &cases([1.0; 3], [0.0; 3], [0.0; 3]),
            |c| verdicts(c, "test", &FaultRuns::default()),
            &[
                ("pauses-reach-spine", ("slow", "healthy"), "ctsw_pfc"),
                ("stall-costs-time", ("healthy", "slow"), "completion_ms"),
            ],
        );
    }
}
