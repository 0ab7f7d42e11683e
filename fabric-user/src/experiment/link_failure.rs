//! `link-failure`: an RTSW-CTSW link fails in the middle of a ring AllReduce, under pinning and
//! under E-ECMP: completion before, during and after, and where the failed uplink's load went.
use std::time::Duration;

use anyhow::{Context as _, Result};
use fabric_common::config::HashMode;

use super::case::find as case;
use super::{
    harness::{
        Better, Case, Ctx, FaultRuns, Metric, Outcome, Scenario, Sizes, Table, busiest_uplink, completion_ms,
        fragmented_ring, uplink_share,
    },
    verdict::{Verdict, cpu_bound, gain_pct, per_seed},
};
use crate::{run::RunOptions, run::RunResult, state::State, testbed};

pub const SCENARIO: Scenario = Scenario {
    name: "link-failure",
    summary: "A CTSW link fails in the middle of a ring AllReduce (as `fabric link down` takes it down), under path pinning \
              and under E-ECMP with QP scaling: completion with and without the failure, and how the failed \
              uplink's load was redistributed.",
    paper: "Path pinning was fine with whole racks and no failures; link failures reshuffle pinned flows onto \
            shared paths (the pinned slice is recomputed over the surviving uplinks), creating collisions. \
            E-ECMP with QP scaling spreads many QPs and absorbs a lost uplink more evenly.",
    run,
};

const RTSW: &str = "z0r0";

/// A routing mode compared: case key, label, hash mode, QPs per connection.
type Mode = (&'static str, &'static str, HashMode, u32);

/// The modes compared. TE recomputes its placement over the surviving links as the link fails
/// (testbed::set_link).
const MODES: [Mode; 3] = [
    ("pin", "pin", HashMode::Pin, 1),
    ("eecmp", "E-ECMP 8 QPs", HashMode::Eecmp, 8),
    ("te", "TE (controller) 8 QPs", HashMode::Te, 8),
];

/// A healthy run and the same run with the link `RTSW:victim` failing part-way (`None`: it
/// failed twice, see [`FaultRuns`]).
struct FailurePair {
    victim: String,
    link: String,
    healthy: RunResult,
    failed: Option<RunResult>,
}

/// What the runs leave besides the cases' metrics.
#[derive(Default)]
struct Runs {
    /// Rows of the redistribution table.
    redistribution: Vec<Vec<String>>,
    /// The failed links (`RTSW:port`), in run order.
    failed_links: Vec<String>,
    /// Bytes the runs with a failure that finished delivered, of the bytes they needed.
    delivered: u64,
    needed: u64,
    /// The runs with a failure, as attempted.
    faults: FaultRuns,
}

fn run(ctx: &Ctx) -> Result<Outcome> {
    if let Some(model) = ctx.twin {
        return run_twin(ctx, model);
    }
    let cal = ctx.time_scale()?;
    let topo = super::path_pinning::topology(1, 400.0, cal.time_scale);
    let mut t4 = topo.clone();
    // Four uplinks per RTSW: a failure leaves three, and pinning re-maps every slice.
    t4.zones[0].spines = 4;
    let sizes = Sizes { ranks: 8, message: ctx.pick(2 << 20, 4 << 20), iterations: ctx.pick(2, 4) };
    // Two cases per mode, healthy then with the failure: mode `mi`'s are `2 * mi` and `2 * mi + 1`.
    let mut cases = Vec::new();
    for m in &MODES {
        cases.push(Case::new(&format!("{}-healthy", m.0), &format!("{}, healthy", m.1)));
        cases.push(Case::new(&format!("{}-failure", m.0), &format!("{}, link fails mid-run", m.1)));
    }
    let mut runs = Runs::default();
    ctx.with_testbed(t4, |state| {
        for &seed in &ctx.seeds {
            for (mi, mode) in MODES.iter().enumerate() {
                let pair = healthy_and_failed(ctx, state, &sizes, mode, seed, &mut runs.faults)?;
                push_metrics(&mut cases[2 * mi], Some(&pair.healthy), &pair.victim);
                push_metrics(&mut cases[2 * mi + 1], pair.failed.as_ref(), &pair.victim);
                runs.add(seed, mode.0, &pair);
            }
        }
        Ok(())
    })?;
    let verdicts = verdicts(&cases, &runs);
    let notes = runs.faults.notes();
    let mut out = outcome(&cal.describe(), &sizes, cases, verdicts, runs);
    out.notes.extend(notes);
    Ok(out)
}

/// The failure as a what-if on the twin (`sim/whatif.rs`): the scenario's fabric (or
/// `--scale`'s), every host a rank of a fragmented ring AllReduce. Per mode and seed, the
/// healthy run's busiest uplink of z0r0 fails a third of the way into the job; what is queued on
/// it or routed into it is lost until the controller's repaired routes are in force
/// [`super::twin::DETECT_NS`] later (under TE with its entries placed again around the link, as
/// `fabric link down` does on the testbed), and the endpoints' go-back-N recovers it.
fn run_twin(ctx: &Ctx, model: super::twin::TwinModel) -> Result<Outcome> {
    use crate::sim::{WhatIfKind, whatif};
    let (fabric, message) = super::path_pinning::ring_fabric(ctx, model);
    let hosts = fabric.plan.hosts().count();
    let mut cases = Vec::new();
    for m in &MODES {
        cases.push(Case::new(&format!("{}-healthy", m.0), &format!("{}, healthy", m.1)));
        cases.push(Case::new(&format!("{}-failure", m.0), &format!("{}, link fails mid-run", m.1)));
        cases.push(Case::new(&format!("{}-drain", m.0), &format!("{}, link drained mid-run", m.1)));
    }
    let (mut rows, mut finished, mut runs) = (Vec::new(), 0u64, 0u64);
    for &seed in &ctx.seeds {
        for (mi, m) in MODES.iter().enumerate() {
            let o = super::twin::seeded(ctx, &twin_options(message, m), seed);
            let (healthy, load) =
                super::twin::run_one(ctx, &fabric, &o, seed, &format!("{} healthy seed {seed}", m.0))?;
            let victim = super::twin::busiest_uplink(&fabric, &load, RTSW).context("z0r0 sent nothing up")?;
            let at_ns = (healthy.completion_s * 1e9 / 3.0) as u64;
            let w = whatif::WhatIf { kind: WhatIfKind::Fail, target: format!("{RTSW}:{victim}"), at_ns, flap: None };
            let report = super::twin::run_whatif(ctx, &fabric, &o, seed, &w)?;
            let drained = super::twin::run_whatif(
                ctx,
                &fabric,
                &o,
                seed,
                &whatif::WhatIf { kind: WhatIfKind::Drain, ..w.clone() },
            )?;
            super::twin::push(&mut cases[3 * mi], &healthy)?;
            let share = super::twin::uplink_share(&fabric, &load, RTSW, &victim) * 100.0;
            cases[3 * mi].push("victim_share_pct", share);
            cases[3 * mi + 2].push("completion_ms", drained.completion_s * 1e3);
            let failed = &mut cases[3 * mi + 1];
            failed.push("completion_ms", report.completion_s * 1e3);
            failed.push("lost_packets", report.lost_packets as f64);
            failed.push("retransmitted", report.retransmissions as f64);
            finished += u64::from(report.finished);
            runs += 1;
            rows.push(vec![
                seed.to_string(),
                m.0.to_string(),
                w.target.clone(),
                format!("{:.1} µs", at_ns as f64 / 1e3),
                format!("{:.3} -> {:.3}", report.baseline_completion_s * 1e3, report.completion_s * 1e3),
                report.lost_packets.to_string(),
                report.retransmissions.to_string(),
                format!("{:.3}", drained.completion_s * 1e3),
            ]);
        }
    }
    let verdicts = vec![
        pin_suffers_more(&cases, "drain").headline(),
        pin_suffers_more(&cases, "failure"),
        twin_keeps_delivering(finished, runs),
    ];
    Ok(twin_outcome(hosts, message, cases, verdicts, rows))
}

/// On the twin: `finished` of the `runs` with a failure completed every QP.
fn twin_keeps_delivering(finished: u64, runs: u64) -> Verdict {
    Verdict::fact(
        "keeps-delivering",
        "The fabric keeps delivering after the failure (routes repaired, losses resent): every QP of every run \
         completes",
        format!("{finished} of {runs} runs with a failure completed every QP"),
        finished == runs && runs > 0,
    )
}

fn twin_options(message: u64, m: &Mode) -> crate::sim::SimOptions {
    let endpoint =
        crate::endpoint::EndpointOptions { qps: m.3, sport: crate::endpoint::SportPolicy::Fixed, ..Default::default() };
    super::twin::ring_options(message, m.2, endpoint)
}

fn twin_outcome(
    hosts: usize,
    message: u64,
    cases: Vec<Case>,
    verdicts: Vec<Verdict>,
    rows: Vec<Vec<String>>,
) -> Outcome {
    Outcome {
        setup: vec![
            format!(
                "Ring AllReduce over all {hosts} hosts, fragmented placement, {} MiB per rank, fixed source port; \
                 pin with 1 QP, E-ECMP and TE with 8 QPs; go-back-N endpoints, no congestion control on top of \
                 PFC.",
                message >> 20
            ),
            format!(
                "Each case runs healthy first; then the busiest uplink of {RTSW} in that run fails a third of the \
                 way into the job (a what-if: frames queued on it or routed into it are lost), and the \
                 controller's routes without it (and under TE its entries, placed again over the links that \
                 remain) are in force {} µs later.",
                super::twin::DETECT_NS / 1_000
            ),
            "completion_ms is modelled time.".into(),
        ],
        metrics: vec![
            Metric::new("completion_ms", "AllReduce completion", "ms modelled", Better::Lower, true),
            Metric::new("victim_share_pct", "failed uplink's share of z0r0's uplink bytes", "%", Better::None, true),
            Metric::new("lost_packets", "packets lost to the failure", "", Better::Lower, true),
            Metric::new("retransmitted", "retransmitted packets", "", Better::Lower, true),
        ],
        cases,
        verdicts,
        notes: vec![],
        tables: vec![Table {
            title: "Failures: healthy -> with the failure".into(),
            header: ["seed", "routing", "failed link", "at", "completion ms", "lost", "retransmitted", "drained ms"]
                .map(String::from)
                .to_vec(),
            rows,
        }],
    }
}

/// One mode and seed: a healthy run, then the same run with the healthy run's busiest uplink of
/// z0r0 failing a third of the way in (a second attempt fails it again). The link is brought
/// back up after each attempt, before anything is reported.
fn healthy_and_failed(
    ctx: &Ctx,
    state: &State,
    sizes: &Sizes,
    mode: &Mode,
    seed: u64,
    faults: &mut FaultRuns,
) -> Result<FailurePair> {
    let &(key, _, hash, qps) = mode;
    let o = fragmented_ring(sizes, hash, qps, seed);
    let healthy = ctx.run(state, &format!("{key} healthy seed {seed}"), &o)?;
    let victim = busiest_uplink(&healthy, RTSW).context("z0r0 carried nothing")?;
    let link = format!("{RTSW}:{victim}");
    let delay = Duration::from_secs_f64(completion_ms(&healthy) * sizes.iterations as f64 / 1e3 / 3.0);
    let label = format!("{key} failure seed {seed}");
    let failed = faults.attempt(&label, || {
        let r = run_with_link_down(ctx, state, &link, delay, &label, &o);
        testbed::set_link(&state.plan.topology.prefix, &link, true)?;
        r
    })?;
    Ok(FailurePair { victim, link, healthy, failed })
}

/// Runs `o` once while a thread takes `link` down after `delay`: the outer error is the
/// link's (a setup error), the inner the run's.
fn run_with_link_down(
    ctx: &Ctx,
    state: &State,
    link: &str,
    delay: Duration,
    label: &str,
    o: &RunOptions,
) -> Result<Result<RunResult>> {
    let prefix = state.plan.topology.prefix.as_str();
    std::thread::scope(|s| -> Result<Result<RunResult>> {
        let killer = s.spawn(move || {
            std::thread::sleep(delay);
            testbed::set_link(prefix, link, false)
        });
        let r = ctx.run_once(state, label, o);
        killer.join().expect("no panic")?;
        Ok(r)
    })
}

/// The case metrics of one run (`victim`: the uplink that fails); NaN (not measured) for a run
/// that failed twice.
fn push_metrics(c: &mut Case, r: Option<&RunResult>, victim: &str) {
    c.push_of("victim_share_pct", r, |r| uplink_share(r, RTSW, victim) * 100.0);
    c.push_of("completion_ms", r, completion_ms);
    c.push_of("last_iteration_ms", r, |r| r.iterations.last().map_or(f64::NAN, |i| i.completion_ns as f64 / 1e6));
    c.push_of("max_over_mean", r, |r| r.balance.or_unmeasured().mean_max_over_mean);
    c.push_of("retransmitted", r, |r| r.flows.iter().map(|f| f.retransmitted).sum::<u64>() as f64);
    c.push_of("pfc_frames", r, |r| (r.congestion.pfc_xoff_sent + r.congestion.pfc_refresh_sent) as f64);
    if let Some(r) = r {
        c.push_run(r);
    }
}

impl Runs {
    fn add(&mut self, seed: u64, key: &str, p: &FailurePair) {
        self.failed_links.push(p.link.clone());
        let (shares, balance) = match &p.failed {
            Some(f) => {
                self.delivered += f.bytes_delivered;
                self.needed += f.bytes_needed;
                (uplink_shares(f), format!("{:.2}", f.balance.mean_max_over_mean))
            }
            None => ("(the run failed twice)".into(), "-".into()),
        };
        self.redistribution.push(vec![
            seed.to_string(),
            key.to_string(),
            p.link.clone(),
            uplink_shares(&p.healthy),
            shares,
            format!("{:.2} -> {balance}", p.healthy.balance.mean_max_over_mean),
        ]);
    }
}

/// Each uplink's share of z0r0's uplink bytes, e.g. `ctsw0 30%, ctsw1 20%, ...` (`-`: no z0r0).
fn uplink_shares(r: &RunResult) -> String {
    let u = r.uplinks.iter().find(|u| u.rtsw == RTSW);
    let Some(u) = u else { return "-".into() };
    let total: u64 = u.tx_bytes.iter().map(|t| t.1).sum::<u64>().max(1);
    u.tx_bytes
        .iter()
        .map(|(p, b)| format!("{p} {:.0}%", *b as f64 * 100.0 / total as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Mode `k`'s failed-uplink share per seed (%): healthy, with the failure.
fn victim_shares(cases: &[Case], k: &str) -> (Vec<f64>, Vec<f64>) {
    let c = |s: &str| case(cases, &format!("{k}-{s}"));
    (c("healthy").values["victim_share_pct"].clone(), c("failure").values["victim_share_pct"].clone())
}

/// Percentages to print: whole numbers.
fn rounded(v: &[f64]) -> Vec<f64> {
    v.iter().map(|v| v.round()).collect()
}

fn verdicts(cases: &[Case], runs: &Runs) -> Vec<Verdict> {
    let (pin_moved, eecmp_moved, te_moved) =
        (victim_shares(cases, "pin"), victim_shares(cases, "eecmp"), victim_shares(cases, "te"));
    // Moved: with the failure, the failed uplink carried less than in the healthy run, every seed.
    let all_moved = [&pin_moved, &eecmp_moved, &te_moved].iter().all(|(h, f)| h.iter().zip(f).all(|(h, f)| f < h));
    vec![
        pin_suffers_more(cases, "failure").headline(),
        runs.faults.judged(Verdict::fact(
            "redistributed",
            "The failed link's traffic is redistributed over the surviving uplinks (groups repaired)",
            format!(
                "failed uplink's share of {RTSW}'s bytes, healthy -> with failure, per seed: pin {:?} -> {:?} %, \
                 E-ECMP {:?} -> {:?} %, TE {:?} -> {:?} %",
                rounded(&pin_moved.0),
                rounded(&pin_moved.1),
                rounded(&eecmp_moved.0),
                rounded(&eecmp_moved.1),
                rounded(&te_moved.0),
                rounded(&te_moved.1)
            ),
            all_moved,
        )),
        runs.faults.delivery_fact(
            "keeps-delivering",
            "The fabric keeps delivering after the failure (ECMP groups repaired)",
            runs.delivered,
            runs.needed,
        ),
    ]
}

/// Per seed, how much the failure slowed a mode down (gain of healthy over failed, %); pinning's
/// minus E-ECMP's, so that what the failure costs every mode alike (a lost uplink) cancels.
/// `fault`: the cases' suffix, `failure` (the link fails) or, on the twin, `drain` (the same
/// re-routing, nothing lost, so no retransmission timeout hides it).
fn pin_suffers_more(cases: &[Case], fault: &str) -> Verdict {
    let penalty = |k: &str| -> Vec<f64> {
        let (h, f) = (case(cases, &format!("{k}-healthy")), case(cases, &format!("{k}-{fault}")));
        let (h, f) = (h.values_of("completion_ms"), f.values_of("completion_ms"));
        h.iter().zip(&f).map(|(&h, &f)| gain_pct(h, f, Better::Lower)).collect()
    };
    let te = penalty("te");
    let (pin, eecmp) = (penalty("pin"), penalty("eecmp"));
    let diff: Vec<f64> = pin.iter().zip(&eecmp).map(|(p, e)| p - e).collect();
    let measured = format!(
        "slowdown from the {fault} per seed (% of the slower run): pin {}, E-ECMP {}, TE {}",
        per_seed(&pin, "%"),
        per_seed(&eecmp, "%"),
        per_seed(&te, "%")
    );
    let used: Vec<&Case> = ["pin-healthy", &format!("pin-{fault}"), "eecmp-healthy", &format!("eecmp-{fault}")]
        .map(|k| case(cases, k))
        .to_vec();
    let (key, claim) = match fault {
        "drain" => (
            "pin-suffers-more-drained",
            "Re-routing around a drained link hurts pinned routing more than E-ECMP with QP scaling (slowdown \
             difference, points)",
        ),
        _ => (
            "pin-suffers-more",
            "A link failure hurts pinned routing more than E-ECMP with QP scaling (slowdown difference, points)",
        ),
    };
    Verdict::from_gains(key, claim, measured, diff, 5.0).unless_cpu_bound(cpu_bound(&used))
}

/// The scenario's report: setup, metrics, cases, verdicts, notes and the redistribution table.
fn outcome(calibration: &str, sizes: &Sizes, cases: Vec<Case>, verdicts: Vec<Verdict>, runs: Runs) -> Outcome {
    let Runs { redistribution, mut failed_links, .. } = runs;
    let Sizes { ranks, message, iterations } = *sizes;
    failed_links.dedup();
    Outcome {
        setup: vec![
            "Testbed: 1 zone, 4 racks x 2 hosts, 4 CTSWs (four uplinks per RTSW), 400 Gbit/s.".into(),
            calibration.to_string(),
            format!(
                "Ring AllReduce over {ranks} ranks, fragmented placement, {} MiB per rank, {iterations} iterations, \
                 fixed source port; pin with 1 QP, E-ECMP and TE with 8 QPs (TE's controller recomputes its \
                 placement over the surviving links when the link fails).",
                message >> 20
            ),
            format!(
                "Each case runs healthy first; then the busiest uplink of {RTSW} in that healthy run is taken down \
                 (`fabric link down`, both veth ends, every ECMP group repaired) a third of the way into an \
                 identical run, and brought back afterwards."
            ),
        ],
        metrics: vec![
            Metric::new("completion_ms", "AllReduce completion (mean of iterations)", "ms wall", Better::Lower, true),
            Metric::new("last_iteration_ms", "last iteration (after the failure)", "ms wall", Better::Lower, true),
            Metric::new("max_over_mean", "uplink max/mean (mean over RTSWs)", "", Better::Lower, false),
            Metric::new("victim_share_pct", "failed uplink's share of z0r0's uplink bytes", "%", Better::None, true),
            Metric::new("retransmitted", "retransmitted packets", "", Better::Lower, false),
            Metric::new("pfc_frames", "PFC frames sent by switches", "", Better::Lower, false),
        ],
        cases,
        verdicts,
        notes: vec![
            "Whether pinning suffers more depends on where the recomputed slices land: with 4 uplinks and two \
             connections per RTSW here, `slice mod 3` may or may not put two connections on one link, so the \
             slowdown comparison is close to the run-to-run spread on this testbed."
                .into(),
            format!("Links failed: {}.", failed_links.join(", ")),
        ],
        tables: vec![Table {
            title: format!("Redistribution: share of {RTSW}'s uplink bytes, healthy vs with the failure"),
            header: ["seed", "routing", "failed link", "healthy", "with failure", "max/mean"]
                .map(String::from)
                .to_vec(),
            rows: redistribution,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::verdict::Decision;

    fn cases(pin_failure: [f64; 3]) -> Vec<Case> {
        let c = |k, t: [f64; 3], share: [f64; 3]| Case::with(k, &[("completion_ms", &t), ("victim_share_pct", &share)]);
        vec![
            c("pin-healthy", [100.0, 100.0, 100.0], [50.0, 50.0, 50.0]),
            c("pin-failure", pin_failure, [20.0, 25.0, 30.0]),
            c("eecmp-healthy", [80.0, 81.0, 79.0], [25.0, 26.0, 24.0]),
            c("eecmp-failure", [88.0, 89.0, 87.0], [10.0, 9.0, 11.0]),
            c("te-healthy", [70.0, 70.0, 70.0], [25.0, 25.0, 25.0]),
            c("te-failure", [75.0, 75.0, 75.0], [0.0, 0.0, 0.0]),
        ]
    }

    /// What the runs delivered: `delivered` of `needed` bytes, every run finished first time.
    fn runs(delivered: u64, needed: u64) -> Runs {
        Runs { delivered, needed, ..Default::default() }
    }

    #[test]
    fn pinning_suffering_more_is_a_difference_of_slowdowns() {
        // Pin slows 40%, E-ECMP 10%.
        let v = verdicts(&cases([140.0, 141.0, 139.0]), &runs(10, 10));
        assert_eq!(v[0].key, "pin-suffers-more");
        assert_eq!(v[0].direction, Decision::Matches, "{}", v[0].evidence());
        assert_eq!(v[1].direction, Decision::Matches);
        assert_eq!(v[2].direction, Decision::Matches);
        // Pin slows as much as E-ECMP (10%); and one run lost bytes.
        let v = verdicts(&cases([110.0, 111.0, 109.0]), &runs(9, 10));
        assert_eq!(v[0].direction, Decision::DoesNotMatch, "{}", v[0].evidence());
        assert_eq!(v[2].direction, Decision::DoesNotMatch);
    }

    /// The twin's drained variant of the headline: the same difference of slowdowns, either way.
    #[test]
    fn pin_suffering_more_from_a_drain_can_go_either_way() {
        let drained = |pin: [f64; 3]| -> Vec<Case> {
            let rename = |mut c: Case| {
                c.key = c.key.replace("-failure", "-drain");
                c
            };
            cases(pin).into_iter().map(rename).collect()
        };
        let v = pin_suffers_more(&drained([140.0, 141.0, 139.0]), "drain");
        assert_eq!((v.key, v.direction), ("pin-suffers-more-drained", Decision::Matches), "{}", v.evidence());
        let v = pin_suffers_more(&drained([110.0, 111.0, 109.0]), "drain");
        assert_eq!(v.direction, Decision::DoesNotMatch, "{}", v.evidence());
    }

    #[test]
    fn redistributed_needs_the_failed_link_to_carry_less_in_every_mode_and_seed() {
        assert_eq!(verdicts(&cases([140.0, 141.0, 139.0]), &runs(10, 10))[1].key, "redistributed");
        // One seed of one mode whose failed link carried as much as when healthy: groups not repaired.
        for (mode, seed) in [(1, 0), (3, 2), (5, 1)] {
            let mut c = cases([140.0, 141.0, 139.0]);
            let healthy = c[mode - 1].values_of("victim_share_pct")[seed];
            c[mode].values.get_mut("victim_share_pct").unwrap()[seed] = healthy;
            let v = verdicts(&c, &runs(10, 10));
            assert_eq!(v[1].direction, Decision::DoesNotMatch, "{} seed {seed}: {}", c[mode].key, v[1].measured);
        }
    }

    #[test]
    fn on_the_twin_every_run_with_a_failure_must_complete() {
        assert_eq!(twin_keeps_delivering(6, 6).direction, Decision::Matches);
        assert_eq!(twin_keeps_delivering(5, 6).direction, Decision::DoesNotMatch);
        assert_eq!(twin_keeps_delivering(0, 0).direction, Decision::DoesNotMatch, "no run: nothing shown");
    }
}
