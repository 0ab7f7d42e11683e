//! `load-balancing`: the paper's answer to low-entropy collectives (QP scaling + E-ECMP, and
//! TE) against what the rest of the field does: flowlet switching, adaptive routing on the
//! modelled egress queues, per-packet spraying (with the RC endpoint's go-back-N and with the
//! reorder-tolerant endpoint), and WCMP, on a healthy fabric and with one uplink degraded to a
//! quarter of its rate.
use anyhow::Result;
use fabric_common::config::HashMode;
use fabric_roce::transport::Transport;

use super::case::find as case;
use super::{
    harness::{
        Better, Case, Ctx, FaultRuns, Metric, Outcome, Scenario, Table, base_options, completion_ms, uplink_share,
    },
    verdict::{Verdict, cpu_bound, gain_pct, per_seed},
};
use crate::{
    endpoint::SportPolicy, model::placement::Placement, model::workload::Collective, run::RunOptions, run::RunResult,
    state::State, testbed,
};

pub const SCENARIO: Scenario = Scenario {
    name: "load-balancing",
    summary: "Ring AllReduce (and all-to-all with --full) under ECMP 1 QP, E-ECMP 8 QPs, TE, flowlet, adaptive, \
              spray with go-back-N, spray with the reorder-tolerant endpoint and WCMP, on a healthy fabric and \
              with one RTSW uplink at a quarter of its rate: completion, uplink balance, the slow uplink's share, \
              retransmissions, reordering seen by the receivers, ECN and PFC.",
    paper: "QP scaling + E-ECMP (and TE) fix the low entropy of collective traffic. The field's alternatives: \
            flowlets (re-route a flow when it pauses), adaptive routing on queue depth, per-packet spraying \
            (which reorders, costly for a go-back-N RC endpoint, cheap for one that places out of order), and \
            WCMP (weights by capacity, so a slow link gets its share). No peer runs them on a real data path.",
    run,
};

const RTSW: &str = "z0r0";
/// The uplink degraded in the second half, and its rate as a fraction of its own.
const SLOW_UPLINK: &str = "z0c0";
const DEGRADED_FRACTION: f64 = 0.25;
/// The smallest gain that counts, %.
const MARGIN_PCT: f64 = 10.0;

/// A load-balancing mode: case key, label, switch mode, QPs per connection, endpoint transport.
/// Modes that choose per packet or per flowlet run one QP (they need no QP entropy); the hashed
/// ones run 8.
type Mode = (&'static str, &'static str, HashMode, u32, Transport);

const MODES: [Mode; 8] = [
    ("ecmp", "ECMP 1 QP", HashMode::FiveTuple, 1, Transport::GoBackN),
    ("eecmp", "E-ECMP 8 QPs", HashMode::Eecmp, 8, Transport::GoBackN),
    ("te", "TE 8 QPs", HashMode::Te, 8, Transport::GoBackN),
    ("flowlet", "flowlet 1 QP", HashMode::Flowlet, 1, Transport::GoBackN),
    ("adaptive", "adaptive 1 QP", HashMode::Adaptive, 1, Transport::GoBackN),
    ("spray-gbn", "spray, go-back-N", HashMode::Spray, 1, Transport::GoBackN),
    ("spray-ooo", "spray, reorder-tolerant", HashMode::Spray, 1, Transport::ReorderTolerant),
    ("wcmp", "WCMP 8 QPs", HashMode::Wcmp, 8, Transport::GoBackN),
];

/// The fabric's two states (key, label): healthy, and z0r0-z0c0 at a quarter of its rate.
const STATES: [(&str, &str); 2] = [("healthy", "healthy"), ("slow", "slow uplink")];

fn key(mode: &str, collective: Collective, state: &str) -> String {
    format!("{mode}-{}-{state}", collective.as_str())
}

fn run(ctx: &Ctx) -> Result<Outcome> {
    if let Some(model) = ctx.twin {
        return run_twin(ctx, model);
    }
    let cal = ctx.time_scale()?;
    let mut topo = super::path_pinning::topology(1, 400.0, cal.time_scale);
    topo.zones[0].spines = 4;
    let collectives = ctx.pick(vec![Collective::Allreduce], vec![Collective::Allreduce, Collective::Alltoall]);
    let message: u64 = ctx.pick(2 << 20, 8 << 20);
    let mut cases = Vec::new();
    for &c in &collectives {
        for (state, state_label) in STATES {
            for m in &MODES {
                cases.push(Case::new(&key(m.0, c, state), &format!("{}, {}, {state_label}", m.1, c.as_str())));
            }
        }
    }
    let mut rows = Vec::new();
    let (mut delivered, mut needed) = (0, 0);
    // Every run's delivery is what `keeps-delivering` judges: a failed run is measured.
    let mut faults = FaultRuns::default();
    ctx.with_testbed(topo, |state| {
        for &seed in &ctx.seeds {
            for (fabric_state, _) in STATES {
                let slow = fabric_state == "slow";
                if slow {
                    degrade(state, true)?;
                }
                for &c in &collectives {
                    for m in &MODES {
                        let o = options(c, message, m, seed);
                        let label = format!("{} {} {fabric_state} seed {seed}", m.0, c.as_str());
                        let r = faults.attempt(&label, || Ok(ctx.run_once(state, &label, &o)))?;
                        let i = cases.iter().position(|k| k.key == key(m.0, c, fabric_state)).expect("a case per run");
                        push_metrics(&mut cases[i], r.as_ref());
                        let Some(r) = r else { continue };
                        delivered += r.bytes_delivered;
                        needed += r.bytes_needed;
                        rows.push(row(seed, m, c, fabric_state, &r));
                    }
                }
                if slow {
                    degrade(state, false)?;
                }
            }
        }
        Ok(())
    })?;
    let verdicts = verdicts(&cases, (delivered, needed, "bytes"), &faults);
    let mut out = outcome(&cal.describe(), message, &collectives, cases, verdicts, rows);
    out.notes.extend(faults.notes());
    Ok(out)
}

/// The same modes on the twin: the scenario's testbed fabric (or `--scale`'s), every host a
/// rank of a fragmented ring AllReduce, healthy and with z0r0-z0c0 at a quarter of the twin's
/// link rate. The twin's queues hold packets: the slow port's queue really builds (adaptive
/// routing reads its depth, WCMP its rate), and sprayed packets really overtake each other.
fn run_twin(ctx: &Ctx, model: super::twin::TwinModel) -> Result<Outcome> {
    let (healthy, message) = super::path_pinning::ring_fabric(ctx, model);
    let slow = super::twin::slowed(&healthy, &format!("{RTSW}:{SLOW_UPLINK}"), DEGRADED_FRACTION)?;
    let c = Collective::Allreduce;
    let mut cases = Vec::new();
    for (state, state_label) in STATES {
        for m in &MODES {
            cases.push(Case::new(&key(m.0, c, state), &format!("{}, {}, {state_label}", m.1, c.as_str())));
        }
    }
    let qps = std::cell::Cell::new((0u64, 0u64));
    for (state, fabric) in [(STATES[0].0, &healthy), (STATES[1].0, &slow)] {
        let runs: Vec<(usize, crate::sim::SimOptions)> = MODES
            .iter()
            .map(|m| {
                let i = cases.iter().position(|k| k.key == key(m.0, c, state)).expect("a case per mode");
                (i, twin_options(message, m))
            })
            .collect();
        super::twin::run_cases_with(ctx, fabric, &runs, &mut cases, |case, r, _, load| {
            let p = r.packet.as_ref().expect("a packet result");
            let share = super::twin::uplink_share(fabric, load, RTSW, SLOW_UPLINK);
            case.push("slow_share_pct", share * 100.0);
            case.push("retransmitted", p.retransmissions as f64);
            case.push("reordered", p.reordered_packets as f64);
            case.push("reorder_depth", p.reorder_depth_max as f64);
            case.push("ecn_marked", p.ecn_marks as f64);
            let per_qp = p.flow_completion_s.iter().flatten();
            let (done, all) = qps.get();
            qps.set((done + per_qp.clone().filter(|t| t.is_some()).count() as u64, all + per_qp.count() as u64));
        })?;
    }
    let (done, all) = qps.get();
    let verdicts = verdicts(&cases, (done, all, "QPs"), &FaultRuns::default());
    Ok(twin_outcome(healthy.plan.hosts().count(), message, cases, verdicts))
}

/// A mode's case on the twin: fixed source port (the entropy is the QPs' or the switch's own),
/// no congestion control on top of PFC.
fn twin_options(message: u64, m: &Mode) -> crate::sim::SimOptions {
    let &(_, _, hash, qps, transport) = m;
    let endpoint = crate::endpoint::EndpointOptions { qps, sport: SportPolicy::Fixed, transport, ..Default::default() };
    super::twin::ring_options(message, hash, endpoint)
}

/// Where a variant's figures come from.
#[derive(Clone, Copy, PartialEq)]
enum Model {
    /// Wall time; spraying barely reorders on veth pairs, so reordering is not charted.
    Testbed,
    /// Modelled time; the twin's queues hold packets and sprayed packets overtake each other.
    Twin,
}

fn metrics(model: Model) -> Vec<Metric> {
    let (completion, unit) = match model {
        Model::Testbed => ("completion (mean of iterations)", "ms wall"),
        Model::Twin => ("AllReduce completion", "ms modelled"),
    };
    vec![
        Metric::new("completion_ms", completion, unit, Better::Lower, true),
        Metric::new("max_over_mean", "uplink max/mean (mean over RTSWs)", "", Better::Lower, true),
        Metric::new("slow_share_pct", "z0r0-z0c0's share of z0r0's uplink bytes", "%", Better::None, true),
        Metric::new("retransmitted", "retransmitted packets", "", Better::Lower, true),
        Metric::new("reordered", "packets the receivers saw out of order", "", Better::Lower, model == Model::Twin),
        Metric::new("reorder_depth", "deepest reordering (PSNs)", "", Better::Lower, false),
        Metric::new("ecn_marked", "ECN marks", "", Better::Lower, false),
        Metric::new("pfc_frames", "PFC frames sent by switches", "", Better::Lower, false),
    ]
}

fn twin_outcome(hosts: usize, message: u64, cases: Vec<Case>, verdicts: Vec<Verdict>) -> Outcome {
    Outcome {
        setup: vec![
            format!(
                "Ring AllReduce over all {hosts} hosts, fragmented placement, {} MiB per rank (1/{hosts} of it per \
                 ring step), fixed UDP source port, no congestion control on top of PFC. Per-packet and per-flowlet \
                 modes run 1 QP per connection, hashed modes (E-ECMP, TE, WCMP) 8.",
                message >> 20
            ),
            format!(
                "Every mode runs on the healthy fabric, then with the twin's {RTSW}-{SLOW_UPLINK} link at a quarter \
                 of its rate (its queue builds; WCMP weighs members by their rate, adaptive routing by their depth)."
            ),
            "completion_ms is modelled time; reordering, retransmissions and ECN marks are the twin's endpoints' and \
             switches' own counts over one iteration."
                .into(),
        ],
        metrics: metrics(Model::Twin),
        cases,
        verdicts,
        notes: vec![
            "keeps-delivering counts the QPs the twin saw complete, of every QP of every distinct step.".into(),
            "A slow link is slow both ways: the bytes other racks send down z0c0 into z0r0 cross it too, and \
             their RTSWs' WCMP weights see only their own (full-rate) uplinks. WCMP moves z0r0's own bytes off \
             the slow uplink (its share drops) but not the ones coming down it, so on the twin it slows no less \
             than E-ECMP."
                .into(),
        ],
        tables: vec![],
    }
}

/// Degrades (or restores) the slow uplink.
fn degrade(state: &State, on: bool) -> Result<()> {
    let prefix = state.plan.topology.prefix.as_str();
    let link = format!("{RTSW}:{SLOW_UPLINK}");
    if on {
        let rate = state.plan.topology.tiers.rtsw.rate_gbps * DEGRADED_FRACTION;
        testbed::fault::degrade(prefix, &link, Some(rate), None, Some(0))?;
    } else {
        testbed::fault::restore(prefix, &link)?;
    }
    Ok(())
}

/// The case's collective over 8 ranks, fragmented placement (every rack's traffic crosses the
/// spine), fixed source port (the entropy is the QPs' or the switch's own).
fn options(c: Collective, message: u64, m: &Mode, seed: u64) -> RunOptions {
    let &(_, _, hash, qps, transport) = m;
    let mut o = base_options(c, 8, message);
    o.placement = Placement::Fragmented;
    o.hash = Some(hash);
    o.hash_seed = Some(seed as u32);
    o.endpoint.qps = qps;
    o.endpoint.sport = SportPolicy::Fixed;
    o.endpoint.transport = transport;
    o
}

fn retransmitted(r: &RunResult) -> u64 {
    r.flows.iter().map(|f| f.retransmitted).sum()
}

fn reordered(r: &RunResult) -> u64 {
    r.flows.iter().map(|f| f.reordered_packets).sum()
}

/// The case metrics of one run; NaN (not measured) for a run that failed twice.
fn push_metrics(c: &mut Case, r: Option<&RunResult>) {
    c.push_of("completion_ms", r, completion_ms);
    c.push_of("max_over_mean", r, |r| r.balance.or_unmeasured().mean_max_over_mean);
    c.push_of("slow_share_pct", r, |r| uplink_share(r, RTSW, SLOW_UPLINK) * 100.0);
    c.push_of("retransmitted", r, |r| retransmitted(r) as f64);
    c.push_of("reordered", r, |r| reordered(r) as f64);
    c.push_of("reorder_depth", r, |r| r.flows.iter().map(|f| f.reorder_depth_max).max().unwrap_or(0) as f64);
    c.push_of("ecn_marked", r, |r| r.congestion.ecn_marked as f64);
    c.push_of("pfc_frames", r, |r| (r.congestion.pfc_xoff_sent + r.congestion.pfc_refresh_sent) as f64);
    if let Some(r) = r {
        c.push_run(r);
    }
}

fn row(seed: u64, m: &Mode, c: Collective, state: &str, r: &RunResult) -> Vec<String> {
    vec![
        seed.to_string(),
        m.1.to_string(),
        c.as_str().to_string(),
        state.to_string(),
        format!("{:.0}", completion_ms(r)),
        format!("{:.2}", r.balance.mean_max_over_mean),
        format!("{:.0}%", uplink_share(r, RTSW, SLOW_UPLINK) * 100.0),
        retransmitted(r).to_string(),
        reordered(r).to_string(),
    ]
}

/// Per-seed gains of case `a` over case `b` in `metric`.
fn gains(cases: &[Case], a: &str, b: &str, metric: &str, better: Better) -> Vec<f64> {
    let (a, b) = (case(cases, a).values_of(metric), case(cases, b).values_of(metric));
    a.iter().zip(&b).map(|(&a, &b)| gain_pct(a, b, better)).collect()
}

/// Per seed, how much the slow uplink slowed mode `m`'s AllReduce (% of the slower run).
fn slowdown(cases: &[Case], m: &str) -> Vec<f64> {
    let c = Collective::Allreduce;
    gains(cases, &key(m, c, "healthy"), &key(m, c, "slow"), "completion_ms", Better::Lower)
}

/// `delivered` of `needed` `unit`s: the testbed counts bytes, the twin QPs that completed;
/// `faults`: the testbed's runs as attempted (none on the twin).
fn verdicts(cases: &[Case], (delivered, needed, unit): (u64, u64, &str), faults: &FaultRuns) -> Vec<Verdict> {
    let ar = |m: &str, s: &str| key(m, Collective::Allreduce, s);
    let pace = |keys: &[String]| cpu_bound(&keys.iter().map(|k| case(cases, k)).collect::<Vec<_>>());
    let spray_balance =
        gains(cases, &ar("spray-ooo", "healthy"), &ar("ecmp", "healthy"), "max_over_mean", Better::Lower);
    let spray_ooo =
        gains(cases, &ar("spray-ooo", "healthy"), &ar("spray-gbn", "healthy"), "completion_ms", Better::Lower);
    let (wcmp, eecmp) = (slowdown(cases, "wcmp"), slowdown(cases, "eecmp"));
    let wcmp_vs_eecmp: Vec<f64> = eecmp.iter().zip(&wcmp).map(|(e, w)| e - w).collect();
    let adaptive_share = gains(cases, &ar("adaptive", "slow"), &ar("eecmp", "slow"), "slow_share_pct", Better::Lower);
    let adaptive = slowdown(cases, "adaptive");
    let adaptive_vs_eecmp: Vec<f64> = eecmp.iter().zip(&adaptive).map(|(e, a)| e - a).collect();
    vec![
        Verdict::from_gains(
            "spray-balances",
            "Spraying packets balances the uplinks better than ECMP with one QP (max/mean of uplink bytes)",
            format!("gain of spray over ECMP 1 QP in uplink max/mean per seed: {}", per_seed(&spray_balance, "%")),
            spray_balance,
            MARGIN_PCT,
        )
        .headline(),
        Verdict::from_gains(
            "ooo-makes-spray-pay",
            "Under spraying, the reorder-tolerant endpoint completes faster than go-back-N",
            format!("gain of reorder-tolerant over go-back-N under spray per seed: {}", per_seed(&spray_ooo, "%")),
            spray_ooo,
            MARGIN_PCT,
        )
        .unless_cpu_bound(pace(&[ar("spray-ooo", "healthy"), ar("spray-gbn", "healthy")])),
        Verdict::from_gains(
            "wcmp-absorbs-slow-link",
            "A 1/4-rate uplink slows WCMP (weights by capacity) less than E-ECMP (slowdown difference, points)",
            format!(
                "slowdown from the slow uplink per seed: E-ECMP {}, WCMP {}",
                per_seed(&eecmp, "%"),
                per_seed(&wcmp, "%")
            ),
            wcmp_vs_eecmp,
            MARGIN_PCT,
        )
        .unless_cpu_bound(pace(&[
            ar("wcmp", "healthy"),
            ar("wcmp", "slow"),
            ar("eecmp", "healthy"),
            ar("eecmp", "slow"),
        ])),
        Verdict::from_gains(
            "adaptive-absorbs-slow-link",
            "A 1/4-rate uplink slows adaptive routing (queue depth) less than E-ECMP (slowdown difference, points)",
            format!(
                "slowdown from the slow uplink per seed: E-ECMP {}, adaptive {}",
                per_seed(&eecmp, "%"),
                per_seed(&adaptive, "%")
            ),
            adaptive_vs_eecmp,
            MARGIN_PCT,
        )
        .unless_cpu_bound(pace(&[
            ar("adaptive", "healthy"),
            ar("adaptive", "slow"),
            ar("eecmp", "healthy"),
            ar("eecmp", "slow"),
        ])),
        Verdict::from_gains(
            "adaptive-avoids-slow-link",
            "Adaptive routing (queue depth) sends the slow uplink a smaller share of the bytes than E-ECMP",
            format!(
                "gain of adaptive over E-ECMP in the slow uplink's share per seed: {}",
                per_seed(&adaptive_share, "%")
            ),
            adaptive_share,
            MARGIN_PCT,
        ),
        faults.judged(Verdict::fact(
            "keeps-delivering",
            "Every run delivers every byte, whatever the mode and transport",
            format!("delivered {delivered} of {needed} {unit}"),
            delivered == needed && needed > 0,
        )),
    ]
}

fn outcome(
    calibration: &str,
    message: u64,
    collectives: &[Collective],
    cases: Vec<Case>,
    verdicts: Vec<Verdict>,
    rows: Vec<Vec<String>>,
) -> Outcome {
    let names: Vec<&str> = collectives.iter().map(|c| c.as_str()).collect();
    Outcome {
        setup: vec![
            "Testbed: 1 zone, 4 racks x 2 hosts, 4 CTSWs (four uplinks per RTSW), 400 Gbit/s.".into(),
            calibration.to_string(),
            format!(
                "{} over 8 ranks, fragmented placement, {} MiB per rank, fixed UDP source port. Per-packet and \
                 per-flowlet modes run 1 QP per connection, hashed modes (E-ECMP, TE, WCMP) 8.",
                names.join(" and "),
                message >> 20
            ),
            format!(
                "Every mode runs on the healthy fabric, then with {RTSW}-{SLOW_UPLINK} degraded to 100 Gbit/s \
                 (`fabric link degrade --rate`, WCMP's weights follow), restored afterwards."
            ),
        ],
        metrics: metrics(Model::Testbed),
        cases,
        verdicts,
        notes: vec![
            "A flowlet gap only opens when a sender pauses (window, ACK clock, PFC): a paced connection at line \
             rate never pauses, so its flowlets are the whole flow and flowlet routing is the hash."
                .into(),
            "On the testbed the modelled queues count bytes but never hold a packet, and every path is a veth \
             pair: sprayed packets arrive out of order only when the host's scheduling reorders them, so the \
             reorder-tolerant endpoint has little to win here. The twin's queues hold packets \
             (`fabric sim --model packet --hash spray --transport gbn|ooo`), where spraying reorders as queues \
             differ."
                .into(),
        ],
        tables: vec![Table {
            title: "Every run".into(),
            header: ["seed", "mode", "collective", "fabric", "ms", "max/mean", "slow uplink", "retx", "reordered"]
                .map(String::from)
                .to_vec(),
            rows,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::verdict::Decision;

    /// Cases for every mode and state: completion 100 ms, max/mean 1.5, slow share 25%,
    /// then the overrides.
    fn cases(overrides: &[(&str, &str, [f64; 3])]) -> Vec<Case> {
        let mut out = Vec::new();
        for (state, _) in STATES {
            for m in &MODES {
                let k = key(m.0, Collective::Allreduce, state);
                let get = |metric: &str, default: f64| {
                    overrides.iter().find(|o| o.0 == k && o.1 == metric).map_or([default; 3], |o| o.2)
                };
                out.push(Case::with(
                    &k,
                    &[
                        ("completion_ms", &get("completion_ms", 100.0)),
                        ("max_over_mean", &get("max_over_mean", 1.5)),
                        ("slow_share_pct", &get("slow_share_pct", 25.0)),
                    ],
                ));
            }
        }
        out
    }

    #[test]
    fn verdicts_can_match_and_can_fail() {
        let good = cases(&[
            ("spray-ooo-allreduce-healthy", "max_over_mean", [1.0, 1.01, 1.02]),
            ("spray-ooo-allreduce-healthy", "completion_ms", [60.0, 61.0, 59.0]),
            ("eecmp-allreduce-slow", "completion_ms", [200.0, 201.0, 199.0]),
            ("wcmp-allreduce-slow", "completion_ms", [110.0, 111.0, 109.0]),
            ("adaptive-allreduce-slow", "slow_share_pct", [5.0, 6.0, 4.0]),
            ("adaptive-allreduce-slow", "completion_ms", [101.0, 102.0, 100.0]),
        ]);
        let v = verdicts(&good, (10, 10, "bytes"), &FaultRuns::default());
        assert_eq!(
            v.iter().map(|v| v.key).collect::<Vec<_>>(),
            [
                "spray-balances",
                "ooo-makes-spray-pay",
                "wcmp-absorbs-slow-link",
                "adaptive-absorbs-slow-link",
                "adaptive-avoids-slow-link",
                "keeps-delivering"
            ]
        );
        for v in &v {
            assert_eq!(v.direction, Decision::Matches, "{}: {}", v.key, v.evidence());
        }
        // Every mode alike (no gain anywhere), and a byte missing.
        let v = verdicts(&cases(&[]), (9, 10, "bytes"), &FaultRuns::default());
        for v in &v {
            assert_eq!(v.direction, Decision::DoesNotMatch, "{}: {}", v.key, v.evidence());
        }
    }
}
