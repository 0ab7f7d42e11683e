//! `cc-at-400g`: congestion control at 400 Gbit/s on the twin: PFC only (no transport
//! congestion control) against DCQCN with ECN thresholds carried over from 200G and DCQCN with
//! thresholds scaled to 400G, on a ring AllReduce and an all-to-all.
//!
//! A scenario of its own rather than cases of `incast`: the paper's claim is about training
//! traffic at scale (collectives over many racks, the spine tier between them) and about which
//! tier pauses which; `incast` is a 4-to-1 microbenchmark whose cases vary the control, not the
//! switches' thresholds. Here each case carries its own ECN thresholds (the topology's
//! `congestion.*.ecn_kmin_kb` / `ecn_kmax_kb`, set per case with
//! [`Congestion::with_ecn_thresholds`](crate::model::topology::Congestion::with_ecn_thresholds)).
//! It runs on the twin only: the testbed's veth links do not run at 400 Gbit/s.
use anyhow::{Result, anyhow};

use super::{
    harness::{Better, Case, Ctx, Metric, Outcome, Scenario, base_options},
    twin::{TwinModel, TwinRun, run_twin_cases},
    verdict::{Comparison, Verdict, per_seed},
};
use crate::{endpoint::CcMode, forwarding::fabric::SimFabric, model::topology::Topology, model::workload::Collective};

pub const SCENARIO: Scenario = Scenario {
    name: "cc-at-400g",
    summary: "On the twin at 400 Gbit/s: PFC only against DCQCN with ECN thresholds carried over from 200G \
              (half the bytes) and DCQCN with thresholds scaled to 400G, on a ring AllReduce, an all-to-all and an \
              incast: completion, and how long CTSWs paused RTSWs.",
    paper: "DCQCN was used at 200G. At 400G, default DCQCN with ECN thresholds carried over from 200G did worse, \
            and Meta ran for over a year with PFC only, no transport congestion control, without persistent \
            congestion: CTSWs did not persistently pause RTSWs.",
    run,
};

/// ECN thresholds scaled to 400G, KiB: the topology's (Kmin 100, Kmax 400: 2 µs and 8 µs of
/// queue at 400 Gbit/s).
pub const ECN_400G_KB: (u32, u32) = (100, 400);
/// The same queueing delays at 200 Gbit/s are half the bytes: carried over to 400G, they mark
/// at half the delay, below the fabric's bandwidth-delay product.
pub const ECN_200G_KB: (u32, u32) = (50, 200);

/// A pause of an RTSW port by a CTSW is persistent when it lasts longer than this: longer than
/// one pause of the topology's 65,535 quanta at 400 Gbit/s (83.9 µs), i.e. the CTSW stayed over
/// Xon through a refresh. Persistence is a property of one pause, not of a run: the share of
/// the run's time the RTSWs' uplinks spent paused is reported beside it, but a short run of a
/// single incast can spend a large share of its 200 µs in pauses that each clear within tens of
/// µs, which is congestion, not persistence.
pub const PERSISTENT_PAUSE_US: f64 = 100.0;

/// One case: key, label, workload, congestion control, ECN thresholds.
type CcCase = (&'static str, &'static str, Collective, CcMode, (u32, u32));

pub const CASES: [CcCase; 9] = [
    ("ar-pfc", "AllReduce, PFC only", Collective::Allreduce, CcMode::None, ECN_400G_KB),
    ("ar-dcqcn-200g", "AllReduce, DCQCN, 200G thresholds", Collective::Allreduce, CcMode::Dcqcn, ECN_200G_KB),
    ("ar-dcqcn-400g", "AllReduce, DCQCN, 400G thresholds", Collective::Allreduce, CcMode::Dcqcn, ECN_400G_KB),
    ("a2a-pfc", "all-to-all, PFC only", Collective::Alltoall, CcMode::None, ECN_400G_KB),
    ("a2a-dcqcn-200g", "all-to-all, DCQCN, 200G thresholds", Collective::Alltoall, CcMode::Dcqcn, ECN_200G_KB),
    ("a2a-dcqcn-400g", "all-to-all, DCQCN, 400G thresholds", Collective::Alltoall, CcMode::Dcqcn, ECN_400G_KB),
    ("incast-pfc", "incast, PFC only", Collective::Incast, CcMode::None, ECN_400G_KB),
    ("incast-dcqcn-200g", "incast, DCQCN, 200G thresholds", Collective::Incast, CcMode::Dcqcn, ECN_200G_KB),
    ("incast-dcqcn-400g", "incast, DCQCN, 400G thresholds", Collective::Incast, CcMode::Dcqcn, ECN_400G_KB),
];

/// Senders of the incast: the testbed's 4 on its fabric, 16 at `--scale`.
fn incast_ranks(model: TwinModel) -> usize {
    if model.scale.is_some() { 17 } else { 5 }
}

/// `fabric`'s copy with every switch's ECN thresholds set to `kb`.
fn with_thresholds(fabric: &SimFabric, (kmin, kmax): (u32, u32)) -> Result<SimFabric> {
    let mut f = fabric.clone();
    let c = &mut f.plan.topology.congestion;
    *c = c.with_ecn_thresholds(kmin, kmax).map_err(|e| anyhow!("ECN thresholds {kmin}..{kmax} KiB: {e}"))?;
    Ok(f)
}

fn run(ctx: &Ctx) -> Result<Outcome> {
    let model = ctx.twin.unwrap_or(TwinModel { scale: None });
    let fabric = model.fabric(Topology::default_topology(), |_| {});
    let hosts = fabric.plan.hosts().count();
    // All-to-all: every pair a QP, so at most 64 ranks (4,032 QPs in its one step).
    let a2a_ranks = hosts.min(64);
    // 1 MiB per ring step: two colliding flows then outgrow Xoff (512 KiB), as a step of a
    // large model's AllReduce does.
    let ar_message: u64 = ctx.pick(1 << 20, 4 << 20) * hosts as u64;
    let a2a_message: u64 = ctx.pick(64 << 10, 1 << 20) * a2a_ranks as u64;
    let incast_message: u64 = ctx.pick(2 << 20, 8 << 20);
    let fabrics = [with_thresholds(&fabric, ECN_200G_KB)?, with_thresholds(&fabric, ECN_400G_KB)?];
    let runs: Vec<TwinRun<'_>> = CASES
        .iter()
        .enumerate()
        .map(|(i, &(_, _, collective, cc, ecn))| {
            let (ranks, message) = match collective {
                Collective::Alltoall => (a2a_ranks, a2a_message),
                Collective::Incast => (incast_ranks(model), incast_message),
                _ => (hosts, ar_message),
            };
            let mut endpoint = base_options(collective, ranks, message).endpoint;
            endpoint.cc = cc;
            let options = super::incast::twin_options(collective, ranks, message, endpoint);
            let fabric = if ecn == ECN_200G_KB { &fabrics[0] } else { &fabrics[1] };
            TwinRun { case: i, fabric, options, stall: None }
        })
        .collect();
    let mut cases: Vec<Case> = CASES.iter().map(|c| Case::new(c.0, c.1)).collect();
    run_twin_cases(ctx, &runs, &mut cases)?;
    let verdicts = verdicts(&cases);
    let mut setup = Vec::new();
    if ctx.twin.is_none() {
        setup.push(format!("Run on the {} (this scenario has no testbed variant).", model.describe()));
    }
    setup.extend([
        format!(
            "{hosts} hosts, every link 400 Gbit/s with 1 µs of propagation; PFC on class 3 (Xoff 512 KiB, Xon 256 \
             KiB per ingress), E-ECMP, 1 QP per connection, placement `fragmented` (one host per rack first)."
        ),
        format!(
            "Ring AllReduce over all {hosts} hosts, {} KiB per ring step; all-to-all over {a2a_ranks} hosts, {} KiB \
             per pair, all at once; incast (a gather's many-to-one phase): {} senders on racks of their own, {} MiB \
             each into one host.",
            (ar_message / hosts as u64) >> 10,
            (a2a_message / a2a_ranks as u64) >> 10,
            incast_ranks(model) - 1,
            incast_message >> 20
        ),
        format!(
            "ECN thresholds on every switch: 400G-scaled Kmin {} KiB / Kmax {} KiB (2 µs / 8 µs of queue at 400 \
             Gbit/s); 200G-era Kmin {} KiB / Kmax {} KiB (the same delays at 200 Gbit/s, carried over). DCQCN \
             with the DCQCN paper's parameters (fabric_roce::dcqcn defaults).",
            ECN_400G_KB.0, ECN_400G_KB.1, ECN_200G_KB.0, ECN_200G_KB.1
        ),
        format!(
            "Persistent CTSW→RTSW pause: a pause of an RTSW port by a CTSW longer than {PERSISTENT_PAUSE_US} µs \
             (one 65,535-quanta pause at 400 Gbit/s is 83.9 µs: a longer one was refreshed while the CTSW stayed \
             over Xon). The share of the RTSW uplinks' time paused is reported, not judged: it grows as the run \
             shortens."
        ),
        "completion_ms is modelled time; each seed re-seeds the switches' hashes.".into(),
    ]);
    Ok(Outcome {
        setup,
        metrics: vec![
            Metric::new("completion_ms", "completion", "ms modelled", Better::Lower, true),
            Metric::new("ctsw_rtsw_longest_us", "longest pause of an RTSW port by a CTSW", "µs", Better::Lower, true),
            Metric::new("ctsw_rtsw_paused_pct", "RTSW ports toward CTSWs: time paused", "%", Better::Lower, true),
            Metric::new("pfc_frames", "PFC frames sent by switches", "", Better::Lower, true),
            Metric::new("paused_ms", "paused time of switch ports", "ms, summed", Better::Lower, false),
            Metric::new("host_paused_ms", "paused time of hosts", "ms, summed", Better::Lower, false),
        ],
        cases,
        verdicts,
        notes: vec![],
        tables: vec![],
    })
}

fn verdicts(cases: &[Case]) -> Vec<Verdict> {
    let slower = |key, claim, (a, b)| {
        Comparison {
            key,
            claim,
            metric: "completion_ms",
            unit: " ms",
            cases: (a, b),
            better: Better::Lower,
            margin_pct: 5.0,
        }
        .judge(cases)
    };
    vec![
        no_persistent_pauses(
            "pfc-only-no-persistent-spine-pauses",
            "With PFC only at 400G, training collectives (ring AllReduce, all-to-all) do not make CTSWs \
             persistently pause RTSWs",
            cases,
            &["ar-pfc", "a2a-pfc"],
        )
        .headline(),
        no_persistent_pauses(
            "incast-pfc-no-persistent-spine-pauses",
            "... nor does an incast with nothing to admit it (the paper credits the collective library's \
             receiver-driven admission; here there is none)",
            cases,
            &["incast-pfc"],
        ),
        slower(
            "a2a-dcqcn-200g-slower",
            "At 400G, DCQCN with ECN thresholds carried over from 200G does worse than PFC only: PFC only completes \
             the all-to-all sooner",
            ("a2a-pfc", "a2a-dcqcn-200g"),
        )
        .headline(),
        slower("ar-dcqcn-200g-slower", "... and the ring AllReduce", ("ar-pfc", "ar-dcqcn-200g")),
        slower("incast-dcqcn-200g-slower", "... and the incast", ("incast-pfc", "incast-dcqcn-200g")).headline(),
        slower(
            "incast-400g-thresholds-help",
            "DCQCN with thresholds scaled to 400G completes the incast sooner than with 200G thresholds",
            ("incast-dcqcn-400g", "incast-dcqcn-200g"),
        ),
        slower(
            "a2a-400g-thresholds-help",
            "DCQCN with thresholds scaled to 400G completes the all-to-all sooner than with 200G thresholds",
            ("a2a-dcqcn-400g", "a2a-dcqcn-200g"),
        ),
    ]
}

/// "PFC only has no persistent CTSW→RTSW pauses": in every run of the PFC-only cases, no pause
/// of an RTSW port by a CTSW longer than [`PERSISTENT_PAUSE_US`].
fn no_persistent_pauses(key: &'static str, claim: &str, cases: &[Case], keys: &[&str]) -> Verdict {
    let of = |m: &str| -> Vec<f64> { keys.iter().flat_map(|k| super::case::find(cases, k).values_of(m)).collect() };
    let (longest, share) = (of("ctsw_rtsw_longest_us"), of("ctsw_rtsw_paused_pct"));
    let holds = !longest.is_empty() && longest.iter().all(|&l| l <= PERSISTENT_PAUSE_US);
    Verdict::fact(
        key,
        claim,
        format!(
            "PFC-only runs ({}, every seed): longest pause of an RTSW port by a CTSW {} (persistent above \
             {PERSISTENT_PAUSE_US} µs); share of the RTSWs' uplink time paused {}",
            keys.join(", "),
            per_seed(&longest, " µs"),
            per_seed(&share, "%")
        ),
        holds,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::verdict::Decision;

    fn cases(pfc_longest: [f64; 2], pfc_share: [f64; 2], a2a_ms: [f64; 3]) -> Vec<Case> {
        let c = |k: &str, longest: [f64; 2], share: [f64; 2], ms: [f64; 2]| {
            Case::with(
                k,
                &[("ctsw_rtsw_longest_us", &longest), ("ctsw_rtsw_paused_pct", &share), ("completion_ms", &ms)],
            )
        };
        vec![
            c("ar-pfc", pfc_longest, pfc_share, [10.0, 10.2]),
            c("ar-dcqcn-200g", [0.0; 2], [0.0; 2], [14.0, 14.5]),
            c("ar-dcqcn-400g", [0.0; 2], [0.0; 2], [12.0, 12.5]),
            c("a2a-pfc", [20.0, 30.0], [0.1, 0.2], [a2a_ms[0], a2a_ms[0] * 1.01]),
            c("a2a-dcqcn-200g", [0.0; 2], [0.0; 2], [a2a_ms[1], a2a_ms[1] * 1.01]),
            c("a2a-dcqcn-400g", [0.0; 2], [0.0; 2], [a2a_ms[2], a2a_ms[2] * 1.01]),
            c("incast-pfc", [10.0, 12.0], [0.1, 0.1], [a2a_ms[0], a2a_ms[0] * 1.01]),
            c("incast-dcqcn-200g", [0.0; 2], [0.0; 2], [a2a_ms[1], a2a_ms[1] * 1.01]),
            c("incast-dcqcn-400g", [0.0; 2], [0.0; 2], [a2a_ms[2], a2a_ms[2] * 1.01]),
        ]
    }

    fn decision(v: &[Verdict], key: &str) -> Decision {
        v.iter().find(|v| v.key == key).unwrap_or_else(|| panic!("no verdict {key}")).direction
    }

    #[test]
    fn a_pause_that_outlives_its_refresh_is_persistent_and_short_ones_are_not() {
        let ok = verdicts(&cases([40.0, 60.0], [0.2, 0.5], [5.0, 8.0, 6.0]));
        assert_eq!(decision(&ok, "pfc-only-no-persistent-spine-pauses"), Decision::Matches);
        assert_eq!(decision(&ok, "incast-pfc-no-persistent-spine-pauses"), Decision::Matches);
        let mut incast = cases([40.0, 60.0], [0.2, 0.5], [5.0, 8.0, 6.0]);
        incast[6].values.insert("ctsw_rtsw_longest_us".into(), vec![270.0, 20.0]);
        let v = verdicts(&incast);
        assert_eq!(decision(&v, "incast-pfc-no-persistent-spine-pauses"), Decision::DoesNotMatch);
        assert_eq!(decision(&v, "pfc-only-no-persistent-spine-pauses"), Decision::Matches, "judged apart");
        // One pause that outlived its refresh...
        let long = verdicts(&cases([40.0, 150.0], [0.2, 0.5], [5.0, 8.0, 6.0]));
        assert_eq!(decision(&long, "pfc-only-no-persistent-spine-pauses"), Decision::DoesNotMatch);
        // Short pauses, however often, are congestion, not persistence.
        let often = verdicts(&cases([40.0, 60.0], [0.2, 30.0], [5.0, 8.0, 6.0]));
        assert_eq!(decision(&often, "pfc-only-no-persistent-spine-pauses"), Decision::Matches);
        // No PFC-only run at all: nothing to judge.
        let none: Vec<Case> = cases([40.0, 60.0], [0.2, 0.5], [5.0, 8.0, 6.0])
            .into_iter()
            .map(|c| if c.key.ends_with("-pfc") { Case::new(&c.key, &c.label) } else { c })
            .collect();
        assert_eq!(decision(&verdicts(&none), "pfc-only-no-persistent-spine-pauses"), Decision::DoesNotMatch);
    }

    #[test]
    fn dcqcn_with_200g_thresholds_must_be_slower_than_pfc_only_to_match() {
        let slower = verdicts(&cases([40.0, 60.0], [0.2, 0.5], [5.0, 8.0, 6.0]));
        assert_eq!(decision(&slower, "a2a-dcqcn-200g-slower"), Decision::Matches);
        assert_eq!(decision(&slower, "ar-dcqcn-200g-slower"), Decision::Matches);
        assert_eq!(decision(&slower, "incast-dcqcn-200g-slower"), Decision::Matches);
        assert_eq!(decision(&slower, "a2a-400g-thresholds-help"), Decision::Matches);
        assert_eq!(decision(&slower, "incast-400g-thresholds-help"), Decision::Matches);
        // DCQCN as fast as PFC only (what a control that turns DCQCN off gives).
        let same = verdicts(&cases([40.0, 60.0], [0.2, 0.5], [5.0, 5.0, 5.0]));
        assert_eq!(decision(&same, "a2a-dcqcn-200g-slower"), Decision::DoesNotMatch);
        assert_eq!(decision(&same, "incast-dcqcn-200g-slower"), Decision::DoesNotMatch);
        assert_eq!(decision(&same, "a2a-400g-thresholds-help"), Decision::DoesNotMatch);
        assert_eq!(decision(&same, "incast-400g-thresholds-help"), Decision::DoesNotMatch);
    }
}
