//! `path-pinning`: routing by destination slice with whole racks vs fragmented placement, against
//! E-ECMP, and the "2x RTSW uplinks" band-aid.
use anyhow::Result;
use fabric_common::config::HashMode;

use super::harness::{Better, Case, Ctx, Metric, Outcome, Scenario, Verdict, base_options, compare, completion_ms};
use crate::{
    endpoint::SportPolicy, model::placement::Placement, model::topology::Topology, model::workload::Collective,
};

/// (key, label, topology (uplinks per spine, uplink rate), placement, hash, qps).
type PinCase = (&'static str, &'static str, (u32, f64), Placement, HashMode, u32);

pub const SCENARIO: Scenario = Scenario {
    name: "path-pinning",
    summary: "Path pinning (route by destination slice) with whole racks vs fragmented placement, against \
              E-ECMP with QP scaling, and the band-aid of doubling the RTSW uplinks (twice the links, or \
              twice their rate).",
    paper: "Path pinning routes by destination \"slice\" (the RTSW downlink index). It was fine with whole \
            racks per job and no failures; with fragmented placement (one of two hosts in a rack used) \
            training degraded by more than 30%. The short-term fix was to double the RTSW uplink bandwidth \
            (1:2 under-subscription), too expensive to keep; QP scaling + E-ECMP replaced it.",
    run,
};

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

fn run(ctx: &Ctx) -> Result<Outcome> {
    let ranks = 6;
    let cal = ctx.time_scale()?;
    let message: u64 = ctx.pick(2 << 20, 4 << 20);
    let iterations = ctx.pick(1, 2);
    // (key, label, topology (uplinks per spine, uplink rate), placement, hash, qps)
    let plan: [PinCase; 6] = [
        ("pin-contiguous", "pin, whole racks", (1, 400.0), Placement::Contiguous, HashMode::Pin, 1),
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
    ];
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
                    c.push("max_over_mean", r.balance.mean_max_over_mean);
                    c.push("jain", r.balance.mean_jain);
                    c.push("pfc_frames", (r.congestion.pfc_xoff_sent + r.congestion.pfc_refresh_sent) as f64);
                    c.push("paused_ms", r.congestion.paused_ns as f64 / 1e6);
                }
            }
            Ok(())
        })?;
    }
    let degradation = {
        let (f, c) = (cases[1].mean("completion_ms"), cases[0].mean("completion_ms"));
        let pct = (f / c - 1.0) * 100.0;
        Verdict {
            claim: "Pinning degrades with fragmented placement: slower than with whole racks (paper: >30%)".into(),
            measured: format!("fragmented {f:.1} ms vs whole racks {c:.1} ms: {pct:+.1}%"),
            matches: f > c,
            headline: true,
        }
    };
    let verdicts = vec![
        degradation,
        compare(
            "E-ECMP with QP scaling does not suffer from fragmentation as pinning does",
            &cases,
            "completion_ms",
            " ms",
            ("eecmp-fragmented", "pin-fragmented"),
            true,
            false,
        ),
        compare(
            "Centralised traffic engineering avoids fragmented pinning's collisions",
            &cases,
            "completion_ms",
            " ms",
            ("te-fragmented", "pin-fragmented"),
            true,
            false,
        ),
        compare(
            "Doubling the RTSW uplinks (2 links per CTSW) relieves fragmented pinning",
            &cases,
            "completion_ms",
            " ms",
            ("pin-fragmented-2x-links", "pin-fragmented"),
            true,
            false,
        ),
        compare(
            "Doubling the RTSW uplink bandwidth (800G) relieves fragmented pinning",
            &cases,
            "completion_ms",
            " ms",
            ("pin-fragmented-2x-rate", "pin-fragmented"),
            true,
            false,
        ),
    ];
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
