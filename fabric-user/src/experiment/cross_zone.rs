//! `cross-zone`: a ring AllReduce on the two-zone testbed (zones joined by an oversubscribed ATSW
//! tier) with random rank placement vs topology-aware placement (min-cut, `fabric place`).
use anyhow::Result;

use super::{
    harness::{Better, Case, Ctx, Metric, Outcome, Scenario, base_options, completion_ms},
    verdict::Comparison,
};
use crate::{
    model::partition::{self, Graph},
    model::placement::Placement,
    model::workload::Collective,
    run::RunResult,
    state::State,
};

pub const SCENARIO: Scenario = Scenario {
    name: "cross-zone",
    summary: "Ring AllReduce over the two-zone testbed (two AI zones joined by a 2:1 oversubscribed ATSW \
              tier) with random rank placement vs topology-aware placement (min-cut partitioning of the \
              job's traffic graph over the zones, `fabric place`): cross-zone bytes and completion time.",
    paper: "The ATSW (cross-zone) tier is oversubscribed by design (about 1:7). The job scheduler finds a \
            \"minimum cut\" when dividing a job's nodes among zones, learning servers' positions in the \
            logical topology and recommending rank assignments that reduce cross-zone traffic.",
    run,
};

/// Bytes that crossed between zones in the run's last iteration (every flow of every step).
pub fn measured_cross_zone_bytes(state: &State, r: &RunResult) -> f64 {
    let plan = &state.plan;
    let zone = |name: &str| plan.node_by_name(name).and_then(|n| plan.nodes[n].zone);
    r.flows.iter().filter(|f| zone(&f.src) != zone(&f.dst)).map(|f| f.bytes_received as f64).sum()
}

fn run(ctx: &Ctx) -> Result<Outcome> {
    if let Some(model) = ctx.twin {
        return run_twin(ctx, model);
    }
    let mut topo = super::harness::shipped_topology(Some("two-zones.toml"))?;
    let cal = ctx.time_scale()?;
    topo.time_scale = cal.time_scale;
    let ranks = 8;
    let message: u64 = ctx.pick(2 << 20, 4 << 20);
    let mut cases = vec![Case::new("random", "random placement"), Case::new("aware", "topology-aware (min-cut)")];
    let mut placements = Vec::new();
    ctx.with_testbed(topo, |state| {
        let g = Graph::of_collective(Collective::Allreduce, ranks, message, 1);
        for &seed in &ctx.seeds {
            let aware = partition::place(&state.plan, &g, seed)?;
            let aware_names: Vec<String> = aware.iter().map(|&h| state.plan.nodes[h].name.clone()).collect();
            let random = Placement::Random { seed };
            let random_hosts = random.place(&state.plan, ranks)?;
            placements.push(vec![
                seed.to_string(),
                random_hosts.iter().map(|&h| state.plan.nodes[h].name.clone()).collect::<Vec<_>>().join(" "),
                aware_names.join(" "),
            ]);
            for (i, p) in [random, Placement::Explicit { hosts: aware_names }].into_iter().enumerate() {
                let mut o = base_options(Collective::Allreduce, ranks, message);
                o.placement = p;
                o.hash_seed = Some(seed as u32);
                o.endpoint.qps = 4;
                let r = ctx.run(state, &format!("{} seed {seed}", cases[i].key), &o)?;
                let hosts: Vec<usize> = r.placement.iter().filter_map(|n| state.plan.node_by_name(n)).collect();
                let c = &mut cases[i];
                c.push("cross_zone_mib", measured_cross_zone_bytes(state, &r) / (1u64 << 20) as f64);
                c.push(
                    "predicted_cross_zone_mib",
                    partition::cross_zone_bytes(&state.plan, &g, &hosts) / (1u64 << 20) as f64,
                );
                c.push("completion_ms", completion_ms(&r));
                c.push("pfc_frames", (r.congestion.pfc_xoff_sent + r.congestion.pfc_refresh_sent) as f64);
                c.push_run(&r);
            }
        }
        Ok(())
    })?;
    let verdicts = verdicts(&cases);
    Ok(Outcome {
        setup: vec![
            "testbed/two-zones.toml: two zones of 2 racks x 2 hosts, 2 CTSWs each, one ATSW with one link per \
             CTSW: traffic leaving a zone is 2:1 oversubscribed. 400 Gbit/s links."
                .into(),
            cal.describe(),
            format!(
                "Ring AllReduce over all {ranks} hosts, {} MiB per rank, 4 QPs per connection (per-QP source \
                 ports), E-ECMP as configured.",
                message >> 20
            ),
            "Random: `random:SEED`. Topology-aware: `fabric_user::model::partition::place` on the job's traffic graph \
             (recursive bisection with Fiduccia–Mattheyses refinement, zone sizes as capacities; then racks \
             within each zone), the same as `fabric place --topology testbed/two-zones.toml --job JOB.toml`."
                .into(),
            "Cross-zone bytes: what receivers accepted on flows whose ends are in different zones, in the \
             run's iteration; `predicted` is the cut of the traffic graph for that placement."
                .into(),
        ],
        metrics: metrics("cross-zone bytes (measured)", "ms wall"),
        cases,
        verdicts,
        notes: vec![],
        tables: vec![super::harness::Table {
            title: "Placements (rank 0 first)".into(),
            header: ["seed", "random", "topology-aware"].map(String::from).to_vec(),
            rows: placements,
        }],
    })
}

/// Min-cut against random placement: fewer bytes across zones, and sooner.
/// The metrics of both variants; the testbed measures wall time, the twin modelled time, and
/// they read the cross-zone bytes at different places.
fn metrics(measured: &'static str, unit: &'static str) -> Vec<Metric> {
    vec![
        Metric::new("cross_zone_mib", measured, "MiB", Better::Lower, true),
        Metric::new(
            "predicted_cross_zone_mib",
            "cross-zone bytes (cut of the traffic graph)",
            "MiB",
            Better::Lower,
            false,
        ),
        Metric::new("completion_ms", "AllReduce completion", unit, Better::Lower, true),
        Metric::new("pfc_frames", "PFC frames sent by switches", "", Better::Lower, false),
    ]
}

fn verdicts(cases: &[Case]) -> Vec<super::verdict::Verdict> {
    let less = |key, claim, metric| Comparison {
        key,
        claim,
        metric,
        unit: "",
        cases: ("aware", "random"),
        better: Better::Lower,
        margin_pct: 5.0,
    };
    vec![
        less(
            "aware-crosses-less",
            "Topology-aware (min-cut) placement sends fewer bytes across zones than random placement",
            "cross_zone_mib",
        )
        .judge(cases)
        .headline(),
        less(
            "aware-completes-sooner",
            "Less cross-zone traffic over the oversubscribed ATSW tier completes the AllReduce sooner",
            "completion_ms",
        )
        .judge(cases),
    ]
}

/// The ATSW tier at about 1:7: each CTSW's links up to the ATSWs carry a seventh of what its
/// links down from the RTSWs can (the paper's cross-zone oversubscription), by the ATSW links'
/// rate, so the fabric's shape is the scenario's or `--scale`'s own.
const ATSW_OVERSUBSCRIPTION: f64 = 7.0;

fn oversubscribe(t: &mut crate::model::topology::Topology) {
    let Some(atsw) = t.atsw.as_ref() else { return };
    let up_links = f64::from(atsw.count * atsw.uplinks_per_ctsw);
    let z = &t.zones[0];
    let down = f64::from(z.racks * z.uplinks_per_spine) * t.tiers.rtsw.rate_gbps;
    t.tiers.ctsw.rate_gbps = down / up_links / ATSW_OVERSUBSCRIPTION;
}

/// The same comparison on the twin: `two-zones.toml` (or `--scale`'s fabric) with the ATSW tier
/// at 1:7; a ring AllReduce over every host (three quarters of them at `--scale`, more than a
/// zone holds, so the ring must cross); per seed a random placement and the min-cut placement
/// of the same job. Cross-zone bytes are what the ATSWs forwarded (frames, ACKs included).
fn run_twin(ctx: &Ctx, model: super::twin::TwinModel) -> Result<Outcome> {
    let mut topo = super::harness::shipped_topology(Some("two-zones.toml"))?;
    oversubscribe(&mut topo);
    let fabric = model.fabric(topo, oversubscribe);
    let plan = &fabric.plan;
    let hosts = plan.hosts().count();
    let ranks = if model.scale.is_some() { hosts * 3 / 4 } else { hosts };
    let message: u64 = ctx.pick(1 << 20, 4 << 20) * ranks as u64;
    let mut cases = vec![Case::new("random", "random placement"), Case::new("aware", "topology-aware (min-cut)")];
    let g = Graph::of_collective(Collective::Allreduce, ranks, message, 1);
    for &seed in &ctx.seeds {
        let aware = partition::place(plan, &g, seed)?;
        let aware = Placement::Explicit { hosts: aware.iter().map(|&h| plan.nodes[h].name.clone()).collect() };
        for (i, placement) in [Placement::Random { seed }, aware].into_iter().enumerate() {
            let endpoint = crate::endpoint::EndpointOptions { qps: 4, ..Default::default() };
            let o = crate::sim::SimOptions {
                collective: Collective::Allreduce,
                ranks: Some(ranks),
                message_bytes: message,
                placement: placement.clone(),
                seed: 1,
                hash: fabric_common::config::HashMode::Eecmp,
                hash_seed: None,
                endpoint,
            };
            let label = format!("{} seed {seed}", cases[i].key);
            let (r, _) = super::twin::run_one(ctx, &fabric, &o, seed, &label)?;
            let placed = placement.place(plan, ranks)?;
            let p = r.packet.as_ref().expect("a packet result");
            let atsw = p.tiers.iter().find(|t| t.tier == "atsw").map_or(0, |t| t.bytes);
            let c = &mut cases[i];
            super::twin::push(c, &r)?;
            c.push("cross_zone_mib", atsw as f64 / (1u64 << 20) as f64);
            c.push("predicted_cross_zone_mib", partition::cross_zone_bytes(plan, &g, &placed) / (1u64 << 20) as f64);
        }
    }
    let verdicts = verdicts(&cases);
    let ctsw = plan.topology.tiers.ctsw.rate_gbps;
    Ok(Outcome {
        setup: vec![
            format!(
                "{hosts} hosts in {} zones; the ATSW links at {ctsw:.1} Gbit/s, so each CTSW's uplinks to the ATSWs \
                 carry 1/{ATSW_OVERSUBSCRIPTION} of what its RTSW downlinks can (about 1:7, as in the paper).",
                plan.topology.zones.len()
            ),
            format!(
                "Ring AllReduce over {ranks} ranks, {} MiB per rank, 4 QPs per connection (per-QP source ports), \
                 E-ECMP; no congestion control on top of PFC. completion_ms is modelled time.",
                message >> 20
            ),
            "Random: `random:SEED`. Topology-aware: `partition::place` on the job's traffic graph (recursive \
             min-cut bisection, zone sizes as capacities), as `fabric place` does."
                .into(),
            "Cross-zone bytes: what the ATSWs forwarded over the iteration (data and ACK frames, headers \
             included); `predicted` is the cut of the traffic graph for that placement (payload only)."
                .into(),
        ],
        metrics: metrics("cross-zone bytes (ATSW tier, measured)", "ms modelled"),
        cases,
        verdicts,
        notes: vec![],
        tables: vec![],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::verdict::Decision;

    fn cases(aware_mib: [f64; 3], aware_ms: [f64; 3]) -> Vec<Case> {
        vec![
            Case::with("random", &[("cross_zone_mib", &[60.0, 90.0, 75.0]), ("completion_ms", &[1.6, 3.0, 2.4])]),
            Case::with("aware", &[("cross_zone_mib", &aware_mib), ("completion_ms", &aware_ms)]),
        ]
    }

    #[test]
    fn min_cut_verdicts_follow_the_bytes_and_the_times_both_ways() {
        let v = verdicts(&cases([30.0, 30.0, 30.0], [1.0, 1.1, 1.0]));
        assert!(
            v.iter().all(|v| v.direction == Decision::Matches),
            "{:?}",
            v.iter().map(|v| v.evidence()).collect::<Vec<_>>()
        );
        // A "min-cut" that crossed as much as random, and finished no sooner.
        let v = verdicts(&cases([62.0, 91.0, 76.0], [1.7, 3.0, 2.5]));
        assert!(
            v.iter().all(|v| v.direction == Decision::DoesNotMatch),
            "{:?}",
            v.iter().map(|v| v.evidence()).collect::<Vec<_>>()
        );
    }

    /// The oversubscription is 1:7 on the shipped two-zone fabric and on the 1k one.
    #[test]
    fn the_atsw_tier_is_oversubscribed_seven_to_one() {
        for mut t in [
            super::super::harness::shipped_topology(Some("two-zones.toml")).unwrap(),
            crate::forwarding::fabric::Scale::K1.topology(),
        ] {
            oversubscribe(&mut t);
            let atsw = t.atsw.as_ref().unwrap();
            let z = &t.zones[0];
            let down = f64::from(z.racks * z.uplinks_per_spine) * t.tiers.rtsw.rate_gbps;
            let up = f64::from(atsw.count * atsw.uplinks_per_ctsw) * t.tiers.ctsw.rate_gbps;
            assert!((down / up - 7.0).abs() < 1e-9, "{} : {}", down, up);
        }
    }
}
