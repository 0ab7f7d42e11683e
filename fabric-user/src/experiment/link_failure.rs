//! `link-failure`: an RTSW-CTSW link fails in the middle of a ring AllReduce, under pinning and
//! under E-ECMP: completion before, during and after, and where the failed uplink's load went.
use std::time::Duration;

use anyhow::{Context as _, Result};
use fabric_common::config::HashMode;

use super::harness::{Better, Case, Ctx, Metric, Outcome, Scenario, Table, Verdict, base_options, completion_ms};
use crate::{endpoint::SportPolicy, model::placement::Placement, model::workload::Collective, run::RunResult, testbed};

pub const SCENARIO: Scenario = Scenario {
    name: "link-failure",
    summary: "A CTSW link fails in the middle of a ring AllReduce (testbed::set_link), under path pinning \
              and under E-ECMP with QP scaling: completion with and without the failure, and how the failed \
              uplink's load was redistributed.",
    paper: "Path pinning was fine with whole racks and no failures; link failures reshuffle pinned flows onto \
            shared paths (the pinned slice is recomputed over the surviving uplinks), creating collisions. \
            E-ECMP with QP scaling spreads many QPs and absorbs a lost uplink more evenly.",
    run,
};

const RTSW: &str = "z0r0";

fn run(ctx: &Ctx) -> Result<Outcome> {
    let cal = ctx.time_scale()?;
    let topo = super::path_pinning::topology(1, 400.0, cal.time_scale);
    let mut t4 = topo.clone();
    // Four uplinks per RTSW: a failure leaves three, and pinning re-maps every slice.
    t4.zones[0].spines = 4;
    let ranks = 8;
    let message: u64 = ctx.pick(2 << 20, 4 << 20);
    let iterations = ctx.pick(2, 4);
    // TE recomputes its placement over the surviving links as the link fails (testbed::set_link).
    let modes = [
        ("pin", "pin", HashMode::Pin, 1u32),
        ("eecmp", "E-ECMP 8 QPs", HashMode::Eecmp, 8),
        ("te", "TE (controller) 8 QPs", HashMode::Te, 8),
    ];
    let mut cases = Vec::new();
    for m in &modes {
        cases.push(Case::new(&format!("{}-healthy", m.0), &format!("{}, healthy", m.1)));
        cases.push(Case::new(&format!("{}-failure", m.0), &format!("{}, link fails mid-run", m.1)));
    }
    let mut redistribution = Vec::new();
    let mut failed_links = Vec::new();
    let (mut delivered, mut needed) = (0u64, 0u64);
    ctx.with_testbed(t4, |state| {
        let prefix = state.plan.topology.prefix.clone();
        for &seed in &ctx.seeds {
            for (mi, &(key, _, hash, qps)) in modes.iter().enumerate() {
                let mut o = base_options(Collective::Allreduce, ranks, message);
                o.iterations = iterations;
                o.placement = Placement::Fragmented;
                o.hash = Some(hash);
                o.hash_seed = Some(seed as u32);
                o.endpoint.qps = qps;
                o.endpoint.sport = SportPolicy::Fixed;
                let healthy = ctx.run(state, &format!("{key} healthy seed {seed}"), &o)?;
                // Fail the busiest uplink of z0r0 a third of the way into the run.
                let victim = busiest_uplink(&healthy).context("z0r0 carried nothing")?;
                let spec = format!("{RTSW}:{victim}");
                let delay = Duration::from_secs_f64(completion_ms(&healthy) * iterations as f64 / 1e3 / 3.0);
                let failed = std::thread::scope(|s| -> Result<RunResult> {
                    let prefix = prefix.clone();
                    let spec2 = spec.clone();
                    let killer = s.spawn(move || {
                        std::thread::sleep(delay);
                        testbed::set_link(&prefix, &spec2, false)
                    });
                    let r = ctx.run(state, &format!("{key} failure seed {seed}"), &o);
                    killer.join().expect("no panic")?;
                    r
                });
                testbed::set_link(&prefix, &spec, true)?;
                let failed = failed?;
                delivered += failed.bytes_delivered;
                needed += failed.bytes_needed;
                failed_links.push(spec.clone());
                for (ci, r) in [(2 * mi, &healthy), (2 * mi + 1, &failed)] {
                    let c = &mut cases[ci];
                    c.push("victim_share_pct", uplink_share(r, &victim) * 100.0);
                    c.push("completion_ms", completion_ms(r));
                    c.push("last_iteration_ms", r.iterations.last().map_or(f64::NAN, |i| i.completion_ns as f64 / 1e6));
                    c.push("max_over_mean", r.balance.mean_max_over_mean);
                    c.push("retransmitted", r.flows.iter().map(|f| f.retransmitted).sum::<u64>() as f64);
                    c.push("pfc_frames", (r.congestion.pfc_xoff_sent + r.congestion.pfc_refresh_sent) as f64);
                }
                let share = |r: &RunResult| -> String {
                    let u = r.uplinks.iter().find(|u| u.rtsw == RTSW);
                    let Some(u) = u else { return "-".into() };
                    let total: u64 = u.tx_bytes.iter().map(|t| t.1).sum::<u64>().max(1);
                    u.tx_bytes
                        .iter()
                        .map(|(p, b)| format!("{p} {:.0}%", *b as f64 * 100.0 / total as f64))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                redistribution.push(vec![
                    seed.to_string(),
                    key.to_string(),
                    spec.clone(),
                    share(&healthy),
                    share(&failed),
                    format!("{:.2} -> {:.2}", healthy.balance.mean_max_over_mean, failed.balance.mean_max_over_mean),
                ]);
            }
        }
        Ok(())
    })?;
    let slowdown = |k: &str| {
        cases.iter().find(|c| c.key == format!("{k}-failure")).unwrap().mean("completion_ms")
            / cases.iter().find(|c| c.key == format!("{k}-healthy")).unwrap().mean("completion_ms")
    };
    let (sp, se) = (slowdown("pin"), slowdown("eecmp"));
    let moved = |k: &str| {
        let c = |s: &str| cases.iter().find(|c| c.key == format!("{k}-{s}")).unwrap();
        (c("healthy").values["victim_share_pct"].clone(), c("failure").values["victim_share_pct"].clone())
    };
    let (pin_moved, eecmp_moved, te_moved) = (moved("pin"), moved("eecmp"), moved("te"));
    let all_moved = [&pin_moved, &eecmp_moved, &te_moved].iter().all(|(h, f)| h.iter().zip(f).all(|(h, f)| f < h));
    let st = slowdown("te");
    let verdicts = vec![
        Verdict {
            claim: "The failed link's traffic is redistributed over the surviving uplinks (groups repaired)".into(),
            measured: format!(
                "failed uplink's share of {RTSW}'s bytes, healthy -> with failure, per seed: pin {:?} -> {:?} %, \
                 E-ECMP {:?} -> {:?} %, TE {:?} -> {:?} %",
                pin_moved.0.iter().map(|v| v.round()).collect::<Vec<_>>(),
                pin_moved.1.iter().map(|v| v.round()).collect::<Vec<_>>(),
                eecmp_moved.0.iter().map(|v| v.round()).collect::<Vec<_>>(),
                eecmp_moved.1.iter().map(|v| v.round()).collect::<Vec<_>>(),
                te_moved.0.iter().map(|v| v.round()).collect::<Vec<_>>(),
                te_moved.1.iter().map(|v| v.round()).collect::<Vec<_>>()
            ),
            matches: all_moved,
            headline: true,
        },
        Verdict {
            claim: "A link failure hurts pinned routing more than E-ECMP with QP scaling (relative slowdown)".into(),
            measured: format!("completion with failure / healthy: pin {sp:.2}x, E-ECMP {se:.2}x, TE {st:.2}x"),
            matches: sp > se,
            headline: false,
        },
        Verdict {
            claim: "The fabric keeps delivering after the failure (ECMP groups repaired)".into(),
            measured: format!("runs with a failure delivered {delivered} of {needed} bytes"),
            matches: delivered == needed && needed > 0,
            headline: false,
        },
    ];
    Ok(Outcome {
        setup: vec![
            "Testbed: 1 zone, 4 racks x 2 hosts, 4 CTSWs (four uplinks per RTSW), 400 Gbit/s.".into(),
            cal.describe(),
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
            format!("Links failed: {}.", {
                failed_links.dedup();
                failed_links.join(", ")
            }),
        ],
        tables: vec![Table {
            title: format!("Redistribution: share of {RTSW}'s uplink bytes, healthy vs with the failure"),
            header: ["seed", "routing", "failed link", "healthy", "with failure", "max/mean"]
                .map(String::from)
                .to_vec(),
            rows: redistribution,
        }],
    })
}

/// The share of z0r0's uplink bytes that went over `port`.
fn uplink_share(r: &RunResult, port: &str) -> f64 {
    let Some(u) = r.uplinks.iter().find(|u| u.rtsw == RTSW) else { return f64::NAN };
    let total: u64 = u.tx_bytes.iter().map(|t| t.1).sum();
    let on = u.tx_bytes.iter().find(|t| t.0 == port).map_or(0, |t| t.1);
    if total == 0 { f64::NAN } else { on as f64 / total as f64 }
}

/// The uplink of z0r0 that carried the most bytes.
fn busiest_uplink(r: &RunResult) -> Option<String> {
    let u = r.uplinks.iter().find(|u| u.rtsw == RTSW)?;
    u.tx_bytes.iter().filter(|t| t.1 > 0).max_by_key(|t| t.1).map(|t| t.0.clone())
}
