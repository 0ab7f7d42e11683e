//! `multi-tenant`: two ring AllReduce jobs on the default testbed, each alone and then together,
//! under five-tuple ECMP with 1 QP, E-ECMP with 8 QPs and TE with 8 QPs: how much each job slows
//! when it shares the fabric, and which uplinks the jobs shared (`fabric run --jobs`).
use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use fabric_common::config::HashMode;

use super::{
    case::LATE_WAKES,
    harness::{Better, Case, Ctx, Metric, Outcome, Scenario, Table},
    verdict::{Comparison, Verdict},
};
use crate::run::jobs::{JobsFile, runner};

pub const SCENARIO: Scenario = Scenario {
    name: "multi-tenant",
    summary: "Two ring AllReduce jobs interleaved over the four racks of the default testbed, alone and \
              together, under 5-tuple ECMP (1 QP), E-ECMP (8 QPs) and TE (8 QPs): each job's completion \
              alone vs together, and the uplinks they shared (per-job bytes from the forwarding model).",
    paper: "A production cluster runs many jobs at once, and a job's slowdown is often its neighbour's doing: \
            flows of different jobs hashed onto one uplink collide. More entropy (QP scaling with E-ECMP) \
            spreads each job over the uplinks, so collisions are partial; a controller that places every \
            running job's flows together can avoid them.",
    run,
};

/// (key, label, QPs, hash).
pub const MODES: [(&str, &str, u32, HashMode); 3] = [
    ("ecmp-1qp", "5-tuple ECMP, 1 QP", 1, HashMode::FiveTuple),
    ("eecmp-8qp", "E-ECMP, 8 QPs", 8, HashMode::Eecmp),
    ("te-8qp", "TE, 8 QPs", 8, HashMode::Te),
];

/// The jobs: a on slot 0 of every rack, b on slot 1, so both rings cross every RTSW's uplinks.
fn jobs_file(qps: u32, hash: HashMode, message: u64, iterations: u32, only: Option<&str>) -> Result<JobsFile> {
    let job = |name: &str, slot: u32| {
        format!(
            "[[job]]\nname = \"{name}\"\nworkload = \"allreduce\"\nranks = 4\nmessage = \"{message}\"\n\
             iterations = {iterations}\nplacement = \"hosts:z0r0h{slot},z0r1h{slot},z0r2h{slot},z0r3h{slot}\"\n"
        )
    };
    // Rounds: the two rings' steps aligned, so that what one does to the other repeats seed to
    // seed (the paired comparison's premise); independent jobs drift apart by scheduling noise.
    let mut text = format!("mode = \"rounds\"\n[run]\nqps = {qps}\nhash = \"{}\"\nsport = \"fixed\"\n", hash.as_str());
    for (name, slot) in [("a", 0), ("b", 1)] {
        if only.is_none_or(|o| o == name) {
            text.push_str(&job(name, slot));
        }
    }
    toml::from_str(&text).context("the experiment's jobs file")
}

/// The largest share of late wakes over a jobs run's jobs; NaN if one did not measure it.
fn worst_late_wakes(results: &[crate::run::RunResult]) -> f64 {
    results.iter().map(|r| r.late_wake_share.unwrap_or(f64::NAN)).fold(0.0, worse)
}

/// The larger share, or NaN if either is unmeasured (`f64::max` would drop a NaN).
fn worse(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }
}

/// Mean completion of each job's iterations, ms wall, by job name.
fn completions(s: &runner::JobsSummary) -> Vec<(String, f64)> {
    s.jobs.iter().map(|j| (j.name.clone(), super::harness::mean_ms(&j.completion_ns))).collect()
}

/// Whether the jobs' predicted uplink bytes add up to the counters, link by link (up to the
/// frames retransmitted), on every link either names: a link predicted but never counted fails.
fn adds_up(s: &runner::JobsSummary) -> bool {
    links_add_up(&s.uplinks_counted, &s.uplinks_predicted, s.retransmitted_packets)
}

fn links_add_up(counted: &BTreeMap<String, u64>, predicted: &BTreeMap<String, u64>, retransmitted: u64) -> bool {
    let slack = retransmitted * 1200;
    counted.keys().chain(predicted.keys()).all(|l| {
        let (c, p) = (counted.get(l).copied().unwrap_or(0), predicted.get(l).copied().unwrap_or(0));
        p <= c && c <= p + slack
    })
}

/// How many runs the attribution was checked on, and how many of them added up.
#[derive(Default)]
struct Attribution {
    checked: u32,
    added_up: u32,
}

impl Attribution {
    fn record(&mut self, adds_up: bool) {
        self.checked += 1;
        self.added_up += u32::from(adds_up);
    }

    /// Every checked run added up, and at least one was checked.
    fn verdict(&self, how: &str) -> Verdict {
        Verdict::fact(
            "attribution-adds-up",
            "The jobs' uplink bytes (forwarding model) add up to the switches' uplink counters in every run",
            format!("{} of {} runs checked added up, every link {how}", self.added_up, self.checked),
            self.checked > 0 && self.added_up == self.checked,
        )
    }
}

/// Each mode's two cases: every job alone, and all of them together.
fn alone_and_together_cases() -> Vec<Case> {
    MODES
        .iter()
        .flat_map(|m| {
            [
                Case::new(&format!("{}-alone", m.0), &format!("{}, each job alone", m.1)),
                Case::new(&format!("{}-together", m.0), &format!("{}, both jobs together", m.1)),
            ]
        })
        .collect()
}

fn run(ctx: &Ctx) -> Result<Outcome> {
    if let Some(model) = ctx.twin {
        return run_twin(ctx, model);
    }
    let mut topo = super::harness::shipped_topology(None)?;
    let cal = ctx.time_scale()?;
    topo.time_scale = cal.time_scale;
    let message: u64 = ctx.pick(1 << 20, 4 << 20);
    let iterations = ctx.pick(1, 2);
    let mut cases = alone_and_together_cases();
    let mut shared_rows = Vec::new();
    let mut attribution = Attribution::default();
    ctx.with_testbed(topo, |state| {
        let default_hash = HashMode::Eecmp;
        for &seed in &ctx.seeds {
            for (i, &(key, _, qps, hash)) in MODES.iter().enumerate() {
                // Each run's summary and its jobs' worst late-wake share (the CPU's pace, for
                // `verdict::cpu_bound`; NaN if a job did not measure it).
                let mut run_file = |only: Option<&str>| -> Result<(runner::JobsSummary, f64)> {
                    // A negative control swaps the mode the switches run (the case keeps its name).
                    let hash = ctx.control.as_ref().map_or(hash, |c| c.hash_for(hash));
                    let mut f = jobs_file(qps, hash, message, iterations, only)?;
                    f.run.hash_seed = Some(seed as u32);
                    let plan = f.resolve(&state.plan, default_hash)?;
                    let out = runner::run_jobs(state, &plan, true).with_context(|| format!("{key} seed {seed}"))?;
                    attribution.record(adds_up(&out.summary));
                    Ok((out.summary, worst_late_wakes(&out.results)))
                };
                let mut alone_late = 0.0f64;
                let mut alone: Vec<(String, f64)> = Vec::new();
                for j in ["a", "b"] {
                    let (s, late) = run_file(Some(j))?;
                    alone.push(completions(&s)[0].clone());
                    alone_late = worse(alone_late, late);
                }
                let (together, together_late) = run_file(None)?;
                cases[2 * i].push(LATE_WAKES, alone_late);
                cases[2 * i + 1].push(LATE_WAKES, together_late);
                let both = completions(&together);
                let mean = |v: &[(String, f64)]| v.iter().map(|x| x.1).sum::<f64>() / v.len().max(1) as f64;
                let slowdown = both.iter().zip(&alone).map(|(t, a)| t.1 / a.1.max(1e-9)).sum::<f64>() / 2.0;
                cases[2 * i].push("completion_ms", mean(&alone));
                cases[2 * i].push("slowdown", 1.0);
                cases[2 * i + 1].push("completion_ms", mean(&both));
                cases[2 * i + 1].push("slowdown", slowdown);
                for j in &together.jobs {
                    for s in &j.shared_steps {
                        shared_rows.push(vec![key.to_string(), seed.to_string(), s.sentence(&j.name)]);
                    }
                }
                if ctx.verbose {
                    eprintln!("  {key} seed {seed}: alone {alone:?}, together {both:?}, slowdown {slowdown:.2}");
                }
            }
        }
        Ok(())
    })?;
    let verdicts = verdicts(&cases, attribution.verdict("within the retransmitted frames"));
    Ok(Outcome {
        setup: vec![
            "Default testbed: 1 zone, 4 racks x 2 hosts, 4 CTSWs; every link 400 Gbit/s modelled.".into(),
            cal.describe(),
            format!(
                "Job a: ring AllReduce on z0r{{0..3}}h0; job b: the same on z0r{{0..3}}h1; {} MiB per rank, \
                 {iterations} iteration(s); fixed UDP source port. Each seed re-seeds the switches' hash. \
                 Per mode: a alone, b alone, then both (`fabric run --jobs`, rounds: every running job's \
                 step at once).",
                message as f64 / (1 << 20) as f64
            ),
        ],
        metrics: vec![
            Metric::new("completion_ms", "AllReduce completion (mean over the jobs)", "ms wall", Better::Lower, true),
            Metric::new("slowdown", "completion together / alone (mean over the jobs)", "x", Better::Lower, true),
        ],
        cases,
        verdicts,
        notes: vec![
            "A job's step time in a shared run is its own last transfer's completion in the round; the \
             per-job uplink bytes are the forwarding model's (the same hash as the switches), checked \
             against the switches' counters (verdict attribution-adds-up)."
                .into(),
            "Four ranks per job over four racks put two connections (one per job) on each RTSW's four \
             uplinks. Under 5-tuple ECMP with 1 QP two of them can hash onto one uplink; with 8 QPs per \
             connection under E-ECMP each uplink carries about a quarter of each, so the uplinks may \
             leave no interference for TE to remove: then te-less-interference does not match, which \
             says that on this load E-ECMP is already enough, not that TE does harm."
                .into(),
        ],
        tables: vec![Table {
            title: "Slow steps and the neighbour on their busiest uplink".into(),
            header: vec!["mode".into(), "seed".into(), "attribution".into()],
            rows: shared_rows,
        }],
    })
}

/// Slot `slot` of every rack (the hosts under each RTSW, in the plan's order): a ring that
/// crosses every RTSW's uplinks, as job a (slot 0) and job b (slot 1) do on the testbed.
fn slot_of_every_rack(plan: &crate::model::plan::Plan, slot: usize) -> Vec<String> {
    let mut racks: Vec<(usize, Vec<String>)> = Vec::new();
    for h in plan.hosts() {
        let rtsw = plan.nodes[h].ports[0].peer_node;
        match racks.iter_mut().find(|r| r.0 == rtsw) {
            Some(r) => r.1.push(plan.nodes[h].name.clone()),
            None => racks.push((rtsw, vec![plan.nodes[h].name.clone()])),
        }
    }
    racks.into_iter().filter_map(|(_, hosts)| hosts.get(slot).cloned()).collect()
}

/// The scenario on the twin (`--model packet [--scale]`): the same two interleaved rings, each
/// alone and both together in rounds ([`crate::sim::tenants`]), per mode and seed.
fn run_twin(ctx: &Ctx, model: super::twin::TwinModel) -> Result<Outcome> {
    use crate::sim::{SimOptions, tenants::simulate_packet_tenants};
    let fabric = model.fabric(crate::model::topology::Topology::default_topology(), |_| {});
    let (a, b) = (slot_of_every_rack(&fabric.plan, 0), slot_of_every_rack(&fabric.plan, 1));
    anyhow::ensure!(a.len() >= 2 && a.len() == b.len(), "multi-tenant: the fabric needs two hosts in every rack");
    let ranks = a.len();
    // Each ring step moves 1 MiB (4 MiB with --full) per rank, as ecmp-entropy's twin variant.
    let message = ctx.pick(1u64 << 20, 4 << 20) * ranks as u64;
    let mut cases = alone_and_together_cases();
    let mut attribution = Attribution::default();
    for &seed in &ctx.seeds {
        for (i, &(key, _, qps, hash)) in MODES.iter().enumerate() {
            let hash = ctx.control.as_ref().map_or(hash, |c| c.hash_for(hash));
            let job = |hosts: &[String]| SimOptions {
                collective: crate::model::workload::Collective::Allreduce,
                ranks: Some(ranks),
                message_bytes: message,
                placement: crate::model::placement::Placement::Explicit { hosts: hosts.to_vec() },
                seed: 1,
                hash,
                hash_seed: Some(seed as u32),
                endpoint: crate::endpoint::EndpointOptions {
                    qps,
                    sport: crate::endpoint::SportPolicy::Fixed,
                    ..Default::default()
                },
            };
            let (ja, jb) = (job(&a), job(&b));
            let p = super::twin::PACKET;
            let alone_a = simulate_packet_tenants(&mut fabric.clone(), std::slice::from_ref(&ja), &p)?;
            let alone_b = simulate_packet_tenants(&mut fabric.clone(), std::slice::from_ref(&jb), &p)?;
            let both = simulate_packet_tenants(&mut fabric.clone(), &[ja.clone(), jb.clone()], &p)?;
            anyhow::ensure!(both.finished && alone_a.finished && alone_b.finished, "{key} seed {seed}: unfinished QPs");
            // The forwarding model's per-job bytes must add up to the twin's member counters (TE's
            // joint placement is made for both jobs at once, so only the hashed modes are checked).
            if hash != HashMode::Te && both.retransmitted == 0 {
                let pa = crate::sim::predict_member_load(&fabric, &ja, 1)?;
                let pb = crate::sim::predict_member_load(&fabric, &jb, 1)?;
                attribution.record((0..both.load.bytes.len()).all(|s| both.load.bytes[s] == pa.bytes[s] + pb.bytes[s]));
            }
            let ms = |s: f64| s * 1e3;
            let alone = [ms(alone_a.completion_s[0]), ms(alone_b.completion_s[0])];
            let together = [ms(both.completion_s[0]), ms(both.completion_s[1])];
            let slowdown = (together[0] / alone[0] + together[1] / alone[1]) / 2.0;
            cases[2 * i].push("completion_ms", (alone[0] + alone[1]) / 2.0);
            cases[2 * i].push("slowdown", 1.0);
            cases[2 * i + 1].push("completion_ms", (together[0] + together[1]) / 2.0);
            cases[2 * i + 1].push("slowdown", slowdown);
            if ctx.verbose {
                eprintln!("  {key} seed {seed}: alone {alone:?} ms, together {together:?} ms, slowdown {slowdown:.3}");
            }
        }
    }
    let verdicts = verdicts(&cases, attribution.verdict("exactly, of the runs that resent nothing (TE left out)"));
    Ok(Outcome {
        setup: vec![
            format!(
                "Twin: {} hosts; job a: ring AllReduce on the first host of each of the {ranks} racks, job b on the \
                 second; {} MiB per rank, fixed UDP source port. Each seed re-seeds the switches' hash.",
                fabric.plan.hosts().count(),
                message >> 20
            ),
            "Per mode: a alone, b alone, then both in rounds (step i of both jobs at once; a job's step ends with its \
             own last QP). completion_ms is modelled time."
                .into(),
        ],
        metrics: vec![
            Metric::new(
                "completion_ms",
                "AllReduce completion (mean over the jobs)",
                "ms modelled",
                Better::Lower,
                true,
            ),
            Metric::new("slowdown", "completion together / alone (mean over the jobs)", "x", Better::Lower, true),
        ],
        cases,
        verdicts,
        notes: vec![
            "attribution-adds-up on the twin: the forwarding model's bytes of each job alone, summed, equal the \
             twin's ECMP member counters of the two jobs together, member by member (5-tuple ECMP and E-ECMP; TE \
             places both jobs' flows at once, so it is not predicted per job)."
                .into(),
        ],
        tables: vec![],
    })
}

const MARGIN_PCT: f64 = 5.0;

fn compare(key: &'static str, claim: &str, metric: &str, ab: (&str, &str), cases: &[Case]) -> Verdict {
    Comparison { key, claim, metric, unit: "", cases: ab, better: Better::Lower, margin_pct: MARGIN_PCT }.judge(cases)
}

fn verdicts(cases: &[Case], attribution: Verdict) -> Vec<Verdict> {
    vec![
        compare(
            "ecmp-neighbours-slow-each-other",
            "Under 5-tuple ECMP with 1 QP, two jobs sharing the uplinks complete slower together than alone",
            "completion_ms",
            ("ecmp-1qp-alone", "ecmp-1qp-together"),
            cases,
        )
        .headline(),
        compare(
            "eecmp-less-interference",
            "E-ECMP with 8 QPs suffers less from the neighbour than 5-tuple ECMP with 1 QP (smaller slowdown)",
            "slowdown",
            ("eecmp-8qp-together", "ecmp-1qp-together"),
            cases,
        )
        .headline(),
        compare(
            "te-less-interference",
            "TE placing both jobs' flows together suffers less from the neighbour than E-ECMP",
            "slowdown",
            ("te-8qp-together", "eecmp-8qp-together"),
            cases,
        ),
        attribution,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::verdict::Decision;

    type Three = [f64; 3];

    fn cases(ecmp: (Three, Three, Three), eecmp_slow: Three, te_slow: Three) -> Vec<Case> {
        let c = |k: &str, ms: Three, s: Three| Case::with(k, &[("completion_ms", &ms), ("slowdown", &s)]);
        vec![
            c("ecmp-1qp-alone", ecmp.0, [1.0; 3]),
            c("ecmp-1qp-together", ecmp.1, ecmp.2),
            c("eecmp-8qp-alone", [50.0, 52.0, 51.0], [1.0; 3]),
            c("eecmp-8qp-together", [60.0, 61.0, 62.0], eecmp_slow),
            c("te-8qp-alone", [50.0, 52.0, 51.0], [1.0; 3]),
            c("te-8qp-together", [55.0, 56.0, 57.0], te_slow),
        ]
    }

    fn decision(v: &[Verdict], key: &str) -> Decision {
        v.iter().find(|v| v.key == key).unwrap().direction
    }

    const KEYS: [&str; 4] =
        ["ecmp-neighbours-slow-each-other", "eecmp-less-interference", "te-less-interference", "attribution-adds-up"];

    #[test]
    fn the_verdicts_follow_the_numbers_both_ways() {
        let alone = [50.0, 52.0, 51.0];
        let (all, one_off) = (Attribution { checked: 3, added_up: 3 }, Attribution { checked: 3, added_up: 2 });
        let good = verdicts(
            &cases((alone, [80.0, 84.0, 82.0], [1.6; 3]), [1.2, 1.18, 1.19], [1.05, 1.07, 1.06]),
            all.verdict("test"),
        );
        for k in KEYS {
            assert_eq!(decision(&good, k), Decision::Matches, "{k}");
        }
        // No interference at all, and E-ECMP and TE worse, not better: every verdict fails.
        let bad = verdicts(&cases((alone, alone, [1.0; 3]), [1.3; 3], [1.5; 3]), one_off.verdict("test"));
        for k in KEYS {
            assert_eq!(decision(&bad, k), Decision::DoesNotMatch, "{k}");
        }
    }

    #[test]
    fn the_attribution_needs_a_checked_run_and_every_link_of_either_side() {
        let mut a = Attribution::default();
        assert_eq!(a.verdict("t").direction, Decision::DoesNotMatch, "nothing checked: nothing shown");
        a.record(true);
        assert_eq!(a.verdict("t").direction, Decision::Matches);
        a.record(false);
        assert_eq!(a.verdict("t").direction, Decision::DoesNotMatch);

        let map = |v: &[(&str, u64)]| v.iter().map(|&(l, b)| (l.to_string(), b)).collect::<BTreeMap<_, _>>();
        let counted = map(&[("z0r0:z0c0", 1000), ("z0r0:z0c1", 2000)]);
        assert!(links_add_up(&counted, &counted, 0));
        // Retransmitted frames are counted, not predicted: allowed up to their bytes.
        let predicted = map(&[("z0r0:z0c0", 1000), ("z0r0:z0c1", 1500)]);
        assert!(links_add_up(&counted, &predicted, 1) && !links_add_up(&counted, &predicted, 0));
        // A link the jobs were predicted to use but that counted nothing, and more counted than resent.
        let extra = map(&[("z0r0:z0c0", 1000), ("z0r0:z0c1", 2000), ("z0r0:z0c2", 500)]);
        assert!(!links_add_up(&counted, &extra, 0), "a predicted link missing from the counters");
        assert!(!links_add_up(&extra, &counted, 0), "bytes counted that no job was predicted to send");
    }

    #[test]
    fn the_jobs_file_resolves_in_every_mode() {
        let plan = crate::model::plan::Plan::new(&crate::model::topology::Topology::default_topology());
        for &(_, _, qps, hash) in &MODES {
            let p = jobs_file(qps, hash, 1 << 20, 1, None).unwrap().resolve(&plan, HashMode::Eecmp).unwrap();
            assert_eq!((p.jobs.len(), p.hash, p.jobs[0].options.endpoint.qps), (2, hash, qps));
            let a = jobs_file(qps, hash, 1 << 20, 1, Some("a")).unwrap().resolve(&plan, HashMode::Eecmp).unwrap();
            assert_eq!(a.jobs.len(), 1);
        }
    }
}
