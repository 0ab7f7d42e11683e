//! `path-pinning`: routing by destination slice with whole racks vs fragmented placement, against
//! E-ECMP, and the "2x RTSW uplinks" band-aid.
use anyhow::Result;
use fabric_common::config::HashMode;

use super::{
    harness::{Better, Case, Ctx, Metric, Outcome, Scenario, base_options, completion_ms},
    verdict::{Band, Comparison, Verdict, gain_pct, per_seed},
};
use crate::{
    endpoint::SportPolicy, model::placement::Placement, model::topology::Topology, model::workload::Collective,
};

/// (key, label, topology (uplinks per spine, uplink rate), placement, hash, qps).
type PinCase = (&'static str, &'static str, (u32, f64), Placement, HashMode, u32);

/// The smallest gain that counts, %.
const MARGIN_PCT: f64 = 5.0;
/// "More than 30% worse" as a gain of the better case: 1 - 1/1.3.
const THIRTY_PCT_WORSE_AS_GAIN: f64 = (1.0 - 1.0 / 1.3) * 100.0;

pub const SCENARIO: Scenario = Scenario {
    name: "path-pinning",
    summary: "Path pinning (route by destination slice) with whole racks vs fragmented placement, against \
              E-ECMP with QP scaling and TE, and the band-aid of doubling the RTSW uplinks (twice the links, \
              or twice their rate).",
    paper: "Path pinning routes by destination \"slice\" (the RTSW downlink index). It was fine with whole \
            racks per job and no failures; with fragmented placement (one of two hosts in a rack used) \
            training degraded by more than 30%. The short-term fix was to double the RTSW uplink bandwidth \
            (1:2 under-subscription), too expensive to keep; QP scaling + E-ECMP replaced it.",
    run,
};

/// The fabric the load, failure and gray-failure scenarios run their ring on: one zone with
/// four spines (or `--scale`'s fabric), with the ring's bytes per rank, 1 MiB (4 MiB with
/// `--full`) per ring step at any scale, so that steps are bandwidth-bound.
pub fn ring_fabric(ctx: &Ctx, model: super::harness::TwinModel) -> (crate::forwarding::fabric::SimFabric, u64) {
    let mut topo = topology(1, 400.0, 1);
    topo.zones[0].spines = 4;
    let fabric = model.fabric(topo, |_| {});
    let hosts = fabric.plan.hosts().count() as u64;
    let message = ctx.pick(1 << 20, 4 << 20) * hosts;
    (fabric, message)
}

/// 4 racks x 2 hosts with 2 CTSWs: an RTSW has as many uplinks as host ports, so the pin slice,
/// (host address >> 1) mod uplinks, is the host's RTSW downlink index, as in the paper.
pub fn topology(uplinks_per_spine: u32, rtsw_rate_gbps: f64, time_scale: u64) -> Topology {
    let mut t = Topology::default_topology();
    t.name = "pinning".into();
    t.zones[0].spines = 2;
    t.zones[0].uplinks_per_spine = uplinks_per_spine;
    t.tiers.rtsw.rate_gbps = rtsw_rate_gbps;
    t.time_scale = time_scale;
    t
}

/// (key, label, topology (uplinks per spine, uplink rate), placement, hash, qps).
fn pin_cases() -> [PinCase; 7] {
    [
        ("pin-contiguous", "pin, whole racks", (1, 400.0), Placement::Contiguous, HashMode::Pin, 1),
        ("eecmp-contiguous", "E-ECMP 8 QPs, whole racks", (1, 400.0), Placement::Contiguous, HashMode::Eecmp, 8),
        ("pin-fragmented", "pin, fragmented", (1, 400.0), Placement::Fragmented, HashMode::Pin, 1),
        ("eecmp-fragmented", "E-ECMP 8 QPs, fragmented", (1, 400.0), Placement::Fragmented, HashMode::Eecmp, 8),
        ("te-fragmented", "TE (controller) 8 QPs, fragmented", (1, 400.0), Placement::Fragmented, HashMode::Te, 8),
        ("pin-fragmented-2x-links", "pin, fragmented, 2x uplinks", (2, 400.0), Placement::Fragmented, HashMode::Pin, 1),
        (
            "pin-fragmented-2x-rate",
            "pin, fragmented, 800G uplinks",
            (1, 800.0),
            Placement::Fragmented,
            HashMode::Pin,
            1,
        ),
    ]
}

fn run(ctx: &Ctx) -> Result<Outcome> {
    if let Some(model) = ctx.twin {
        return run_twin(ctx, model);
    }
    let ranks = 6;
    let cal = ctx.time_scale()?;
    let message: u64 = ctx.pick(2 << 20, 4 << 20);
    let iterations = ctx.pick(1, 2);
    let plan = pin_cases();
    let mut cases: Vec<Case> = plan.iter().map(|p| Case::new(p.0, p.1)).collect();
    let mut topos: Vec<(u32, f64)> = plan.iter().map(|p| p.2).collect();
    topos.dedup();
    for t in topos {
        ctx.with_testbed(topology(t.0, t.1, cal.time_scale), |state| {
            for &seed in &ctx.seeds {
                for (i, (key, _, _, placement, hash, qps)) in plan.iter().enumerate().filter(|(_, p)| p.2 == t) {
                    let mut o = base_options(Collective::Allreduce, ranks, message);
                    o.iterations = iterations;
                    o.placement = placement.clone();
                    o.hash = Some(*hash);
                    o.hash_seed = Some(seed as u32);
                    o.endpoint.qps = *qps;
                    o.endpoint.sport = SportPolicy::Fixed;
                    let r = ctx.run(state, &format!("{key} seed {seed}"), &o)?;
                    let c = &mut cases[i];
                    c.push("completion_ms", completion_ms(&r));
                    c.push("max_over_mean", r.balance.or_unmeasured().mean_max_over_mean);
                    c.push("jain", r.balance.or_unmeasured().mean_jain);
                    c.push("pfc_frames", (r.congestion.pfc_xoff_sent + r.congestion.pfc_refresh_sent) as f64);
                    c.push("paused_ms", r.congestion.paused_ns as f64 / 1e6);
                    c.push_run(&r);
                }
            }
            Ok(())
        })?;
    }
    let verdicts = verdicts(&cases);
    Ok(Outcome {
        setup: vec![
            "Testbed: 1 zone, 4 racks x 2 hosts, 2 CTSWs (an RTSW has 2 host ports and 2 uplinks, so pin's \
             slice `(dst >> 1) mod uplinks` is the destination's RTSW downlink index, as in the paper); \
             400 Gbit/s links."
                .into(),
            cal.describe(),
            format!(
                "Ring AllReduce over {ranks} of the 8 hosts, {} MiB per rank, {iterations} iteration(s), 1 QP, \
                 fixed source port. Whole racks: `contiguous` (racks 0-2 full); fragmented: `fragmented` \
                 (one host per rack first: 4 racks used, two of them by one host).",
                message >> 20
            ),
            "Band-aids: the same testbed with `uplinks_per_spine = 2` (4 uplinks per RTSW, pinning over 4 \
             members) and with `tiers.rtsw.rate_gbps = 800` (the same links at twice the rate)."
                .into(),
            "Pinning is deterministic (the destination decides), so seeds only repeat the measurement; for \
             E-ECMP each seed re-seeds the switches' hashes."
                .into(),
        ],
        metrics: vec![
            Metric::new("completion_ms", "AllReduce completion", "ms wall", Better::Lower, true),
            Metric::new("max_over_mean", "uplink max/mean (mean over RTSWs)", "", Better::Lower, true),
            Metric::new("jain", "uplink Jain index", "", Better::Higher, false),
            Metric::new("pfc_frames", "PFC frames sent by switches", "", Better::Lower, false),
            Metric::new("paused_ms", "paused time of switch ports", "ms wall, summed", Better::Lower, false),
        ],
        cases,
        verdicts,
        notes: vec![
            "With fragmented placement two ring connections leave the same RTSW towards destinations of the \
             same slice, so pinning puts both on one uplink (and one CTSW downlink) while the other uplink \
             idles; with whole racks each RTSW has one cross-rack connection."
                .into(),
            "Pinning by destination can still map two connections to the same member of a larger group, so \
             more parallel links help only where they split a collision; twice the rate halves the cost of \
             every collision."
                .into(),
        ],
        tables: vec![],
    })
}

/// The same cases on the twin: on the scenario's topologies, or on `--scale`'s fabric with the
/// same changes (uplinks per spine, uplink rate) and three quarters of its hosts as ranks.
fn run_twin(ctx: &Ctx, model: super::twin::TwinModel) -> Result<Outcome> {
    let plan = pin_cases();
    let mut cases: Vec<Case> = plan.iter().map(|p| Case::new(p.0, p.1)).collect();
    let mut topos: Vec<(u32, f64)> = plan.iter().map(|p| p.2).collect();
    topos.dedup();
    let mut setup = Vec::new();
    for t in topos {
        let fabric = model.fabric(topology(t.0, t.1, 1), |topo| {
            topo.zones.iter_mut().for_each(|z| z.uplinks_per_spine = t.0);
            topo.tiers.rtsw.rate_gbps = t.1;
        });
        let hosts = fabric.plan.hosts().count();
        let ranks = if model.scale.is_some() { hosts * 3 / 4 } else { 6 };
        let message: u64 = ctx.pick(1 << 20, 4 << 20) * ranks as u64;
        if setup.is_empty() {
            setup.push(format!(
                "Ring AllReduce over {ranks} of {hosts} hosts, {} MiB per rank (1/{ranks} of it per ring step), \
                 1 QP (8 for E-ECMP and TE), fixed source port; completion_ms is modelled time on the twin.",
                message >> 20
            ));
        }
        let runs: Vec<(usize, crate::sim::SimOptions)> = plan
            .iter()
            .enumerate()
            .filter(|(_, p)| p.2 == t)
            .map(|(i, (_, _, _, placement, hash, qps))| {
                let placement = scattered(model, placement);
                let endpoint =
                    crate::endpoint::EndpointOptions { qps: *qps, sport: SportPolicy::Fixed, ..Default::default() };
                let o = crate::sim::SimOptions {
                    collective: Collective::Allreduce,
                    ranks: Some(ranks),
                    message_bytes: message,
                    placement,
                    seed: 1,
                    hash: *hash,
                    hash_seed: None,
                    endpoint,
                };
                (i, o)
            })
            .collect();
        super::twin::run_cases(ctx, &fabric, &runs, &mut cases)?;
    }
    setup.push("Band-aids: the same fabric with 2 uplinks per spine, and with 800 Gbit/s RTSW uplinks.".into());
    if model.scale.is_some() {
        setup.push(
            "At --scale, the fragmented cases place the ranks on randomly chosen hosts in a random ring order \
             (`random:SEED`, redrawn per seed): see the notes."
                .into(),
        );
    }
    let verdicts = verdicts(&cases);
    Ok(Outcome {
        setup,
        metrics: vec![
            Metric::new("completion_ms", "AllReduce completion", "ms modelled", Better::Lower, true),
            Metric::new("max_over_mean", "uplink max/mean (mean over RTSWs)", "", Better::Lower, true),
            Metric::new("jain", "uplink Jain index", "", Better::Higher, false),
            Metric::new("pfc_frames", "PFC frames sent by switches", "", Better::Lower, false),
        ],
        cases,
        verdicts,
        notes: if model.scale.is_some() { vec![SCATTERED_NOTE.into()] } else { vec![] },
        tables: vec![],
    })
}

/// Why the fragmented cases at scale are scattered rather than `fragmented`.
const SCATTERED_NOTE: &str = "`fragmented` at scale is a best case for pinning, not the paper's fragmentation: \
    with 16 hosts per rack it fills slot 0 of every rack, then slot 1, ..., so each ring hop goes from slot k of \
    a rack to slot k of the next rack, and an RTSW's ring destinations all sit in different slices (distinct \
    uplinks). Measured at 1k (`--placement fragmented`, 768 ranks): pinning 53.5 ms, the same as whole racks and \
    as TE (line rate), E-ECMP 8 QPs 77.5 ms. The paper's jobs got whatever hosts were free: ranks on scattered \
    hosts in no particular order, which the random placement models; there two connections leaving a rack \
    towards the same slice collide on one uplink. Pinning by destination at the CTSWs too (towards the ATSWs) \
    concentrates cross-zone traffic further.";

/// The fragmented placement of the twin's cases: `fragmented` on the scenario's small fabric,
/// scattered hosts (`random`, redrawn per seed) at `--scale` (see [`SCATTERED_NOTE`]).
fn scattered(model: super::twin::TwinModel, placement: &Placement) -> Placement {
    match placement {
        Placement::Fragmented if model.scale.is_some() => Placement::Random { seed: 1 },
        p => p.clone(),
    }
}

fn completion(key: &'static str, claim: &str, (a, b): (&str, &str), cases: &[Case]) -> Verdict {
    Comparison {
        key,
        claim,
        metric: "completion_ms",
        unit: " ms",
        cases: (a, b),
        better: Better::Lower,
        margin_pct: MARGIN_PCT,
    }
    .judge(cases)
}

fn thirty_pct_band(source: &'static str) -> Band {
    Band { lo_pct: THIRTY_PCT_WORSE_AS_GAIN, hi_pct: 100.0, source }
}

/// Routing modes compared under one placement (the headline), placement as its own factor, and
/// the band-aids.
fn verdicts(cases: &[Case]) -> Vec<Verdict> {
    vec![
        completion(
            "eecmp-beats-pin-fragmented",
            "Under fragmented placement E-ECMP with QP scaling completes faster than path pinning (paper: pinning \
             degraded by more than 30%)",
            ("eecmp-fragmented", "pin-fragmented"),
            cases,
        )
        .with_band(thirty_pct_band("paper: training degraded by more than 30% with pinning and fragmented placement"))
        .headline(),
        completion(
            "pin-fragmentation-penalty",
            "Pinning is slower with fragmented than with whole-rack placement (placement as a factor: the \
             fragmented ring also crosses the spine more often, whatever the routing)",
            ("pin-contiguous", "pin-fragmented"),
            cases,
        ),
        fragmentation_interaction(cases),
        completion(
            "te-beats-pin-fragmented",
            "Centralised traffic engineering avoids fragmented pinning's collisions",
            ("te-fragmented", "pin-fragmented"),
            cases,
        ),
        completion(
            "2x-links-relieve-pin",
            "Doubling the RTSW uplinks (2 links per CTSW) relieves fragmented pinning",
            ("pin-fragmented-2x-links", "pin-fragmented"),
            cases,
        ),
        completion(
            "2x-rate-relieves-pin",
            "Doubling the RTSW uplink bandwidth (800G) relieves fragmented pinning",
            ("pin-fragmented-2x-rate", "pin-fragmented"),
            cases,
        ),
    ]
}

/// "E-ECMP does not suffer from fragmentation as pinning does": per seed, the fragmentation
/// penalty (gain of whole racks over fragmented, %) under pinning minus that under E-ECMP. The
/// extra cross-rack hops of a fragmented ring cost both modes alike and cancel out.
fn fragmentation_interaction(cases: &[Case]) -> Verdict {
    let v = |k: &str| super::case::find(cases, k).values_of("completion_ms");
    let penalty = |contig: Vec<f64>, frag: Vec<f64>| -> Vec<f64> {
        contig.iter().zip(&frag).map(|(&c, &f)| gain_pct(c, f, Better::Lower)).collect()
    };
    let pin = penalty(v("pin-contiguous"), v("pin-fragmented"));
    let eecmp = penalty(v("eecmp-contiguous"), v("eecmp-fragmented"));
    let diff: Vec<f64> = pin.iter().zip(&eecmp).map(|(p, e)| p - e).collect();
    let measured =
        format!("fragmentation penalty per seed: pin {} vs E-ECMP {}", per_seed(&pin, "%"), per_seed(&eecmp, "%"));
    let used: Vec<&Case> = cases
        .iter()
        .filter(|c| {
            ["pin-contiguous", "pin-fragmented", "eecmp-contiguous", "eecmp-fragmented"].contains(&c.key.as_str())
        })
        .collect();
    Verdict::from_gains(
        "eecmp-unaffected-by-fragmentation",
        "E-ECMP with QP scaling suffers less from fragmentation than pinning (penalty difference, points)",
        measured,
        diff,
        MARGIN_PCT,
    )
    .unless_cpu_bound(super::verdict::cpu_bound(&used))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{case::testing::assert_each_can_fail, verdict::Decision};

    fn cases(eecmp_contig: [f64; 3], eecmp_frag: [f64; 3]) -> Vec<Case> {
        let c = |k, t: [f64; 3]| Case::with(k, &[("completion_ms", &t)]);
        vec![
            c("pin-contiguous", [60.0, 61.0, 59.0]),
            c("eecmp-contiguous", eecmp_contig),
            c("pin-fragmented", [100.0, 101.0, 99.0]),
            c("eecmp-fragmented", eecmp_frag),
            c("te-fragmented", [66.0, 65.0, 67.0]),
            c("pin-fragmented-2x-links", [99.0, 100.0, 98.0]),
            c("pin-fragmented-2x-rate", [62.0, 63.0, 61.0]),
        ]
    }

    #[test]
    fn the_fragmentation_interaction_cancels_what_placement_costs_every_mode() {
        // E-ECMP pays a little for the extra spine crossings, pinning pays for collisions too.
        let v = fragmentation_interaction(&cases([60.0, 61.0, 59.0], [66.0, 67.0, 65.0]));
        assert_eq!(v.direction, Decision::Matches, "{}", v.evidence());
        // Both pay the same: no interaction, whatever the absolute times.
        let same = fragmentation_interaction(&cases([30.0, 30.5, 29.5], [50.0, 50.5, 49.5]));
        assert_eq!(same.direction, Decision::DoesNotMatch, "{}", same.evidence());
    }

    #[test]
    fn the_headline_compares_modes_under_one_placement_with_the_thirty_percent_band() {
        let v = verdicts(&cases([60.0, 61.0, 59.0], [66.0, 67.0, 65.0]));
        let head = v.iter().find(|v| v.headline).unwrap();
        assert_eq!(head.key, "eecmp-beats-pin-fragmented");
        assert_eq!(head.direction, Decision::Matches);
        assert_eq!(head.magnitude.as_ref().unwrap().decision, Decision::Matches, "{}", head.evidence());
        let v = verdicts(&cases([60.0, 61.0, 59.0], [100.0, 101.0, 99.0]));
        assert_eq!(v[0].direction, Decision::DoesNotMatch);
        assert_eq!(v.iter().find(|v| v.key == "2x-links-relieve-pin").unwrap().direction, Decision::DoesNotMatch);
        // Twice the links as fast as twice the rate: then they relieve pinning too.
        let mut relieved = cases([60.0, 61.0, 59.0], [66.0, 67.0, 65.0]);
        relieved[5] = Case::with("pin-fragmented-2x-links", &[("completion_ms", &[62.0, 63.0, 61.0])]);
        let v = verdicts(&relieved);
        assert_eq!(v.iter().find(|v| v.key == "2x-links-relieve-pin").unwrap().direction, Decision::Matches);
    }

    #[test]
    fn the_comparisons_turn_with_their_cases() {
        assert_each_can_fail(
            &cases([60.0, 61.0, 59.0], [66.0, 67.0, 65.0]),
            verdicts,
            &[
                ("eecmp-beats-pin-fragmented", ("eecmp-fragmented", "pin-fragmented"), "completion_ms"),
                ("pin-fragmentation-penalty", ("pin-contiguous", "pin-fragmented"), "completion_ms"),
                ("te-beats-pin-fragmented", ("te-fragmented", "pin-fragmented"), "completion_ms"),
                ("2x-rate-relieves-pin", ("pin-fragmented-2x-rate", "pin-fragmented"), "completion_ms"),
            ],
        );
    }
}
