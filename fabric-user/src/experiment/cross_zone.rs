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
    let less = |key, claim, metric| Comparison {
        key,
        claim,
        metric,
        unit: "",
        cases: ("aware", "random"),
        better: Better::Lower,
        margin_pct: 5.0,
    };
    let verdicts = vec![
        less(
            "aware-crosses-less",
            "Topology-aware (min-cut) placement sends fewer bytes across zones than random placement",
            "cross_zone_mib",
        )
        .judge(&cases)
        .headline(),
        less(
            "aware-completes-sooner",
            "Less cross-zone traffic over the oversubscribed ATSW tier completes the AllReduce sooner",
            "completion_ms",
        )
        .judge(&cases),
    ];
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
        metrics: vec![
            Metric::new("cross_zone_mib", "cross-zone bytes (measured)", "MiB", Better::Lower, true),
            Metric::new(
                "predicted_cross_zone_mib",
                "cross-zone bytes (cut of the traffic graph)",
                "MiB",
                Better::Lower,
                false,
            ),
            Metric::new("completion_ms", "AllReduce completion", "ms wall", Better::Lower, true),
            Metric::new("pfc_frames", "PFC frames sent by switches", "", Better::Lower, false),
        ],
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
