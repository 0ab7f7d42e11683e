//! `fabric experiment NAME --model packet [--scale 1k|4k|24k]`: the scenarios' cases on the
//! packet-level twin instead of the testbed, judged by the same verdicts.
//!
//! A case becomes a [`SimOptions`] on a [`SimFabric`] (the default testbed's topology, the
//! scenario's own variant of it, or a synthetic fabric of `--scale`); each seed re-seeds the
//! switches' hashes as `hash_seed` does on the testbed. Cases run in parallel, one per core
//! ([`simulate_packet_cases`]). The metrics keep the testbed runs' names, so the verdicts read
//! them unchanged; on the twin `completion_ms` is modelled time (the twin has no wall clock),
//! and the twin's balance is the ECMP members' bytes per tier (the testbed's: RTSW uplinks).
use anyhow::{Result, ensure};
use fabric_twin::report::{PausedTime, sum_pairs};

pub use super::harness::TwinModel;
use super::harness::{Case, Control, Ctx};
use crate::{
    forwarding::fabric::SimFabric,
    sim::{
        MemberLoad, SimOptions, SimResult,
        packet::{
            PACKET_DEFAULTS, PacketJob, PacketOptions, Stall, simulate_packet_jobs_with_load, simulate_packet_with_load,
        },
    },
};

/// From a link's failure to the controller's repaired routes, in the twin's what-ifs.
pub const DETECT_NS: u64 = 20_000;

/// The twin's settings for experiments: `fabric sim`'s defaults (links of 1 µs, a 10 s
/// deadline per step, held queues).
pub const PACKET: PacketOptions = PACKET_DEFAULTS;

/// A ring AllReduce over every host of the fabric with placement `fragmented` (every ring hop
/// crosses the spine), `message` bytes per rank, under `hash` with `endpoint`'s QPs, source
/// ports and transport: the case the load, failure and entropy scenarios run on the twin.
pub fn ring_options(
    message: u64,
    hash: fabric_common::config::HashMode,
    endpoint: crate::endpoint::EndpointOptions,
) -> SimOptions {
    SimOptions {
        collective: crate::model::workload::Collective::Allreduce,
        ranks: None,
        message_bytes: message,
        placement: crate::model::placement::Placement::Fragmented,
        seed: 1,
        hash,
        hash_seed: None,
        endpoint,
    }
}

/// Runs `runs` (case index, options) on `fabric`, every seed, and adds each result's metrics to
/// its case.
pub fn run_cases(ctx: &Ctx, fabric: &SimFabric, runs: &[(usize, SimOptions)], cases: &mut [Case]) -> Result<()> {
    run_cases_with(ctx, fabric, runs, cases, |_, _, _, _| {})
}

/// One run of a case on the twin: the case's index, its fabric, options and stalled receiver.
pub struct TwinRun<'f> {
    pub case: usize,
    pub fabric: &'f SimFabric,
    pub options: SimOptions,
    pub stall: Option<Stall>,
}

/// [`run_cases`], then `more` adds what a scenario reads beyond [`push`]'s metrics: from the
/// result, the run's options and the bytes every ECMP member carried over one iteration.
pub fn run_cases_with(
    ctx: &Ctx,
    fabric: &SimFabric,
    runs: &[(usize, SimOptions)],
    cases: &mut [Case],
    more: impl Fn(&mut Case, &SimResult, &SimOptions, &MemberLoad),
) -> Result<()> {
    let runs: Vec<TwinRun<'_>> =
        runs.iter().map(|(case, o)| TwinRun { case: *case, fabric, options: o.clone(), stall: None }).collect();
    run_twin_cases_then(ctx, &runs, cases, more)
}

/// [`run_cases`] for runs on fabrics of their own (a case's own ECN thresholds, say), or with
/// a stalled receiver.
pub fn run_twin_cases(ctx: &Ctx, runs: &[TwinRun<'_>], cases: &mut [Case]) -> Result<()> {
    run_twin_cases_then(ctx, runs, cases, |_, _, _, _| {})
}

/// [`run_twin_cases`], with `more` as in [`run_cases_with`].
pub fn run_twin_cases_then(
    ctx: &Ctx,
    runs: &[TwinRun<'_>],
    cases: &mut [Case],
    more: impl Fn(&mut Case, &SimResult, &SimOptions, &MemberLoad),
) -> Result<()> {
    let mut all = Vec::new();
    for &seed in &ctx.seeds {
        for TwinRun { case: i, fabric, options: o, stall } in runs {
            all.push((*i, seed, PacketJob { fabric, options: seeded(ctx, o, seed), stall: *stall }));
        }
    }
    let jobs: Vec<PacketJob<'_>> = all.iter().map(|a| a.2.clone()).collect();
    let results = simulate_packet_jobs_with_load(&jobs, &PACKET)?;
    for ((i, seed, job), (r, load)) in all.iter().zip(&results) {
        if ctx.verbose {
            eprintln!("{} seed {seed}: {:.3} ms modelled, {:.2} s wall", cases[*i].key, r.completion_s * 1e3, r.wall_s);
        }
        push(&mut cases[*i], r)?;
        more(&mut cases[*i], r, &job.options, load);
    }
    Ok(())
}

/// `o` for `seed`: the seed re-seeds the switches' hashes (and redraws a random placement), and
/// a negative control acts on the twin's cases as on the testbed's runs.
pub fn seeded(ctx: &Ctx, o: &SimOptions, seed: u64) -> SimOptions {
    let mut o = SimOptions { hash_seed: Some(seed as u32), ..o.clone() };
    if let crate::model::placement::Placement::Random { seed: s } = &mut o.placement {
        *s = seed;
    }
    match ctx.control {
        Some(Control::Hash { from, to }) if o.hash == from => o.hash = to,
        Some(Control::Cc { from, to }) if o.endpoint.cc == from => o.endpoint.cc = to,
        _ => {}
    }
    o
}

/// One run of `o` for `seed` on `fabric`, for scenarios whose next run depends on this one (a
/// fault on the link it loaded most); the seed also seeds the twin's draws (RED, injected
/// loss). The caller pushes the metrics.
pub fn run_one(
    ctx: &Ctx,
    fabric: &SimFabric,
    o: &SimOptions,
    seed: u64,
    label: &str,
) -> Result<(SimResult, MemberLoad)> {
    let p = PacketOptions { seed, ..PACKET };
    let (r, load) = simulate_packet_with_load(&mut fabric.clone(), &seeded(ctx, o, seed), &p)?;
    if ctx.verbose {
        eprintln!("{label}: {:.3} ms modelled, {:.2} s wall", r.completion_s * 1e3, r.wall_s);
    }
    Ok((r, load))
}

/// The neighbour (a CTSW) behind the uplink of `rtsw` that carried the most bytes.
pub fn busiest_uplink(fabric: &SimFabric, load: &MemberLoad, rtsw: &str) -> Option<String> {
    let plan = &fabric.plan;
    let sw = plan.node_by_name(rtsw)?;
    plan.nodes[sw]
        .ports
        .iter()
        .map(|p| &plan.nodes[p.peer_node])
        .filter(|n| n.role == crate::model::plan::Role::Ctsw)
        .map(|n| (uplink_share(fabric, load, rtsw, &n.name), &n.name))
        .filter(|(share, _)| *share > 0.0)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| name.clone())
}

/// `fabric` with both switch ends of the link `spec` dropping `ppm` of their frames (as
/// `fabric link degrade --loss` does on the testbed); [`run_one`] seeds the draws.
pub fn lossy(fabric: &SimFabric, spec: &str, ppm: u32) -> Result<SimFabric> {
    let mut f = fabric.clone();
    let link = f.plan.links[f.plan.find_link(spec)?].clone();
    for (node, port) in [(link.a, link.a_port), (link.b, link.b_port)] {
        if f.plan.nodes[node].role.is_switch() {
            f.loss.push((node, port, ppm));
        }
    }
    Ok(f)
}

/// `fabric` with the link `spec` (`SWITCH:PEER`) at `fraction` of its rate: the twin's port
/// runs at that rate, so queues build behind it, adaptive routing sees their depth and WCMP's
/// weights follow the rate (as `fabric link degrade --rate` makes them on the testbed).
pub fn slowed(fabric: &SimFabric, spec: &str, fraction: f64) -> Result<SimFabric> {
    ensure!(fraction > 0.0 && fraction <= 1.0, "{spec}: a rate fraction must be in (0, 1], not {fraction}");
    let mut f = fabric.clone();
    let l = f.plan.find_link(spec)?;
    f.plan.links[l].rate_gbps *= fraction;
    Ok(f)
}

/// The share of the bytes RTSW `rtsw` sent up its ECMP groups that went to the neighbour
/// `peer` (NaN when it sent none): the twin's counterpart of the testbed's
/// [`super::harness::uplink_share`].
pub fn uplink_share(fabric: &SimFabric, load: &MemberLoad, rtsw: &str, peer: &str) -> f64 {
    let plan = &fabric.plan;
    let Some(sw) = plan.node_by_name(rtsw) else { return f64::NAN };
    let ports = &plan.nodes[sw].ports;
    let (mut on, mut total) = (0u64, 0u64);
    for g in 0..fabric.group_count(sw) as u32 {
        for (m, &port) in fabric.members(sw, g).iter().enumerate() {
            let peer_node = &plan.nodes[ports[port].peer_node];
            if peer_node.role != crate::model::plan::Role::Ctsw {
                continue;
            }
            let bytes = load.bytes[fabric.slot(sw, g, m as u32)];
            total += bytes;
            if peer_node.name == peer {
                on += bytes;
            }
        }
    }
    if total == 0 { f64::NAN } else { on as f64 / total as f64 }
}

/// The metrics of one result, under the testbed runs' names.
pub fn push(c: &mut Case, r: &SimResult) -> Result<()> {
    let p = r.packet.as_ref().expect("a packet result");
    ensure!(p.finished, "{}: the twin did not finish every QP within its deadline", r.case);
    let rtsw = r.tiers.iter().find(|t| t.tier == "rtsw");
    c.push("completion_ms", r.completion_s * 1e3);
    c.push("modelled_us", r.completion_s * 1e6);
    // No RTSW tier: nothing measured (NaN), not a perfect balance.
    c.push("max_over_mean", rtsw.map_or(f64::NAN, |t| t.mean_max_over_mean));
    c.push("worst_max_over_mean", rtsw.map_or(f64::NAN, |t| t.worst_max_over_mean));
    c.push("jain", rtsw.map_or(f64::NAN, |t| t.mean_jain));
    c.push("pfc_frames", p.tiers.iter().filter(|t| t.tier != "host").map(|t| t.pauses_sent).sum::<u64>() as f64);
    // Paused time, as the testbed's runs report it: switch ports, and hosts.
    let paused = |f: &dyn Fn(&PausedTime) -> bool| p.paused.iter().filter(|t| f(t)).map(|t| t.paused_ns).sum::<u64>();
    c.push("paused_ms", paused(&|t| t.paused != "host") as f64 / 1e6);
    c.push("host_paused_ms", paused(&|t| t.paused == "host") as f64 / 1e6);
    // The paper's "CTSWs pausing RTSWs": the RTSWs' ports toward CTSWs, paused by them.
    let spine = sum_pairs(&p.paused, "ctsw", "rtsw");
    c.push("ctsw_rtsw_longest_us", spine.longest_pause_ns as f64 / 1e3);
    c.push("ctsw_rtsw_paused_pct", 100.0 * spine.paused_share);
    Ok(())
}

/// What-if `w` on `fabric` (its controller's routes, no link down before it) for case `o` and
/// `seed`, routes repaired [`DETECT_NS`] after a failure: the what-if's report.
pub fn run_whatif(
    ctx: &Ctx,
    fabric: &SimFabric,
    o: &SimOptions,
    seed: u64,
    w: &crate::sim::whatif::WhatIf,
) -> Result<crate::sim::WhatIfReport> {
    let p = PacketOptions { seed, ..PACKET };
    let r = crate::sim::whatif::simulate_whatif(
        &fabric.plan,
        &Default::default(),
        &seeded(ctx, o, seed),
        &p,
        w,
        DETECT_NS,
    )?;
    r.packet.and_then(|p| p.whatif).ok_or_else(|| anyhow::anyhow!("{}: the what-if left no report", w.target))
}

/// `o` for `seed` while link `spec` (`SWITCH:PEER`) flaps `count` times from `at_ns`, each
/// cycle `period_ns` long and down for its first half (`fabric sim --flap`): the what-if's
/// report, whose completion is the job's with the flaps.
pub fn flapping(
    ctx: &Ctx,
    fabric: &SimFabric,
    o: &SimOptions,
    seed: u64,
    spec: &str,
    (at_ns, period_ns, count): (u64, u64, u32),
) -> Result<crate::sim::WhatIfReport> {
    use crate::sim::whatif::{Flap, WhatIf};
    let w = WhatIf {
        kind: crate::sim::WhatIfKind::Flap,
        target: spec.into(),
        at_ns,
        flap: Some(Flap { period_ns, count }),
    };
    run_whatif(ctx, fabric, o, seed, &w)
}

/// `o`'s AllReduce as one training step replayed from a Chakra trace on the twin: every rank
/// computes first, for the jobs runner's nominal compute of the AllReduce's steps
/// ([`crate::run::jobs::nominal_compute_ns`]), and the AllReduce waits for every rank's compute;
/// `straggler` computes its factor times as long (`fabric sim --trace --straggler`).
pub fn compute_then_allreduce(
    ctx: &Ctx,
    fabric: &SimFabric,
    o: &SimOptions,
    seed: u64,
    straggler: Option<crate::run::job::Straggler>,
) -> Result<crate::sim::trace::TraceSimResult> {
    use crate::run::trace::{
        TraceInput,
        chakra::{CollectiveCommType, build, from_nodes},
    };
    let o = seeded(ctx, o, seed);
    let (hosts, steps) = crate::sim::steps_of(fabric, &o)?;
    let rate = crate::endpoint::engine::host_link_rate_bps(&fabric.plan, 1);
    let compute_ns: f64 =
        steps.iter().map(|(step, repeat)| crate::run::jobs::nominal_compute_ns(step, rate) * *repeat as f64).sum();
    let nodes = [
        build::comp(1, "compute", (compute_ns / 1e3).ceil() as u64, &[]),
        build::coll(2, "allreduce", CollectiveCommType::AllReduce, o.message_bytes, None, &[1]),
    ];
    let ranks = (0..hosts.len()).map(|r| from_nodes(&nodes, &format!("rank {r}"))).collect::<Result<_>>()?;
    let input = TraceInput { format: "chakra", ranks, groups: Default::default() };
    let t = crate::sim::trace::TraceSimOptions {
        file: "compute, then AllReduce".into(),
        spmd_ranks: None,
        placement: o.placement.clone(),
        hash: o.hash,
        hash_seed: o.hash_seed,
        endpoint: o.endpoint.clone(),
        gpu_speedup: 1.0,
        straggler,
    };
    crate::sim::trace::simulate_input(&mut fabric.clone(), &input, &t, &PacketOptions { seed, ..PACKET })
}

#[cfg(test)]
mod tests {
    use fabric_common::config::HashMode;

    use super::*;
    use crate::endpoint::CcMode;
    use crate::experiment::{Options, verdict::Decision};

    fn run(name: &str, control: Option<Control>) -> Vec<(String, Decision)> {
        decisions(&run_report(name, control))
    }

    fn decisions(r: &crate::experiment::ExperimentReport) -> Vec<(String, Decision)> {
        r.outcome.verdicts.iter().map(|v| (v.key.to_string(), v.direction)).collect()
    }

    fn run_report(name: &str, control: Option<Control>) -> crate::experiment::ExperimentReport {
        let out = std::env::temp_dir().join(format!("fabric-twin-exp-{}-{name}", std::process::id()));
        let opts = Options { out: out.clone(), control, twin: Some(TwinModel { scale: None }), ..Default::default() };
        let (r, dir) = crate::experiment::run(name, &opts).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(dir.ends_with(format!("{name}-packet")) && dir.join("report.md").exists());
        let _ = std::fs::remove_dir_all(out);
        r
    }

    /// The mean of `metric` over `case`'s seeds in `r`.
    fn mean_of(r: &crate::experiment::ExperimentReport, case: &str, metric: &str) -> f64 {
        let c = r.outcome.cases.iter().find(|c| c.key == case).unwrap_or_else(|| panic!("no case {case}"));
        let v = c.values_of(metric);
        assert!(!v.is_empty(), "{case}: no {metric}");
        v.iter().sum::<f64>() / v.len() as f64
    }

    fn decision(v: &[(String, Decision)], key: &str) -> Decision {
        v.iter().find(|(k, _)| k == key).unwrap_or_else(|| panic!("no verdict {key}")).1
    }

    /// The real small-scale run on the twin (the default testbed's fabric, 2 seeds): E-ECMP with
    /// 8 QPs beats one QP under 5-tuple ECMP. Under a negative control that gives the E-ECMP case
    /// the 5-tuple hash (its 8 QPs share a fixed source port), the same verdict comes out the
    /// other way.
    #[test]
    fn ecmp_entropy_on_the_twin_matches_and_its_negative_control_does_not() {
        let real = run("ecmp-entropy", None);
        assert_eq!(decision(&real, "eecmp-completion"), Decision::Matches, "{real:?}");
        let control = Control::Hash { from: HashMode::Eecmp, to: HashMode::FiveTuple };
        let fooled = run("ecmp-entropy", Some(control));
        assert_eq!(decision(&fooled, "eecmp-completion"), Decision::DoesNotMatch, "{fooled:?}");
        assert_eq!(decision(&fooled, "eecmp-balance"), Decision::DoesNotMatch, "{fooled:?}");
    }

    /// Path pinning on the twin: TE avoids fragmented pinning's collisions, and twice the uplink
    /// rate relieves them; a control that turns pinning into TE removes the gap.
    #[test]
    fn path_pinning_on_the_twin_decides_its_verdicts() {
        let real = run("path-pinning", None);
        assert_eq!(decision(&real, "te-beats-pin-fragmented"), Decision::Matches, "{real:?}");
        assert_eq!(decision(&real, "2x-rate-relieves-pin"), Decision::Matches, "{real:?}");
        let control = Control::Hash { from: HashMode::Pin, to: HashMode::Te };
        let fooled = run("path-pinning", Some(control));
        assert_eq!(decision(&fooled, "te-beats-pin-fragmented"), Decision::DoesNotMatch, "{fooled:?}");
    }

    /// Load balancing on the twin: spraying reorders there, so the reorder-tolerant endpoint
    /// beats go-back-N under spray; a control that turns spray into 5-tuple ECMP (nothing
    /// reorders, both transports alike) makes the same verdict come out the other way.
    #[test]
    fn load_balancing_on_the_twin_decides_spray_against_reordering() {
        let real = run("load-balancing", None);
        for key in ["ooo-makes-spray-pay", "spray-balances", "adaptive-avoids-slow-link", "keeps-delivering"] {
            assert_eq!(decision(&real, key), Decision::Matches, "{key}: {real:?}");
        }
        let control = Control::Hash { from: HashMode::Spray, to: HashMode::FiveTuple };
        let fooled = run("load-balancing", Some(control));
        assert_eq!(decision(&fooled, "ooo-makes-spray-pay"), Decision::DoesNotMatch, "{fooled:?}");
        assert_eq!(decision(&fooled, "spray-balances"), Decision::DoesNotMatch, "{fooled:?}");
    }

    /// Gray failures on the twin: a 1/4-rate uplink slows even E-ECMP (hashing keeps its share
    /// there), go-back-N resends more than the lossy link lost, a flapping uplink slows the ring
    /// and every run completes, and a straggler's extra compute is on the step's critical path:
    /// the step grows by it (the AllReduce waits for every rank's compute), no more and no less.
    #[test]
    fn gray_failure_on_the_twin_decides_slow_lossy_flapping_and_straggling() {
        let r = run_report("gray-failure", None);
        let real = decisions(&r);
        for key in [
            "slow-link-slows-eecmp",
            "hash-keeps-share",
            "go-back-n-amplifies",
            "keeps-delivering",
            "straggler-slows-ring",
        ] {
            assert_eq!(decision(&real, key), Decision::Matches, "{key}: {real:?}");
        }
        let ms = |case: &str| mean_of(&r, case, "completion_ms");
        assert!(ms("eecmp-flap") > ms("eecmp-healthy"), "the flaps cost nothing");
        // Every rank computes first for as long as the straggler computes more.
        let (base, slow, healthy) = (ms("eecmp-jobs"), ms("eecmp-straggler"), ms("eecmp-healthy"));
        let compute = base - healthy;
        assert!(compute > 0.0, "no compute before the AllReduce: {base} vs {healthy} ms");
        assert!((slow - base - compute).abs() < 1e-3 * base, "straggler {slow} ms, no straggler {base} ms");
    }

    /// A link failing mid-job on the twin (a what-if): every QP still completes, TE's included
    /// (its entries are placed again around the link).
    #[test]
    fn link_failure_on_the_twin_recovers_every_qp() {
        let r = run_report("link-failure", None);
        let real = decisions(&r);
        assert_eq!(decision(&real, "keeps-delivering"), Decision::Matches, "{real:?}");
        assert!(real.iter().any(|(k, _)| k == "pin-suffers-more-drained"), "{real:?}");
        assert!(mean_of(&r, "te-failure", "completion_ms") > mean_of(&r, "te-healthy", "completion_ms"));
    }

    /// Min-cut placement across the 1:7 ATSW tier on the twin (5 seeds: random placements vary):
    /// fewer bytes through the ATSWs, and sooner.
    #[test]
    fn cross_zone_on_the_twin_decides_min_cut_against_random() {
        let out = std::env::temp_dir().join(format!("fabric-twin-exp-{}-cross-zone", std::process::id()));
        let opts =
            Options { out: out.clone(), seeds: Some(5), twin: Some(TwinModel { scale: None }), ..Default::default() };
        let (r, _) = crate::experiment::run("cross-zone", &opts).unwrap_or_else(|e| panic!("{e:#}"));
        let _ = std::fs::remove_dir_all(out);
        let v: Vec<(String, Decision)> = r.outcome.verdicts.iter().map(|v| (v.key.to_string(), v.direction)).collect();
        assert_eq!(decision(&v, "aware-crosses-less"), Decision::Matches, "{v:?}");
        assert_eq!(decision(&v, "aware-completes-sooner"), Decision::Matches, "{v:?}");
    }

    /// The faults the twin's scenarios inject change only the link named, and refuse what is
    /// not a link or not a fraction by name.
    #[test]
    fn slowed_and_lossy_fabrics_change_one_link_and_refuse_bad_input() {
        let fabric = TwinModel { scale: None }.fabric(crate::model::topology::Topology::default_topology(), |_| {});
        let l = fabric.plan.find_link("z0r0:z0c0").unwrap();
        let slow = slowed(&fabric, "z0r0:z0c0", 0.25).unwrap();
        for (i, (a, b)) in fabric.plan.links.iter().zip(&slow.plan.links).enumerate() {
            let want = if i == l { a.rate_gbps * 0.25 } else { a.rate_gbps };
            assert_eq!(b.rate_gbps, want, "link {i}");
        }
        assert!(slowed(&fabric, "z0r0:z0c0", 0.0).unwrap_err().to_string().contains("(0, 1], not 0"));
        assert!(slowed(&fabric, "z0r0:nope", 0.5).is_err());
        let lossy = lossy(&fabric, "z0r0:z0c0", 5_000).unwrap();
        let link = &fabric.plan.links[l];
        assert_eq!(lossy.loss, vec![(link.a, link.a_port, 5_000), (link.b, link.b_port, 5_000)]);
        assert!(fabric.loss.is_empty());
    }

    /// The uplink shares of an RTSW add up to one, and the busiest uplink is the one with the
    /// largest share.
    #[test]
    fn uplink_shares_add_up_and_the_busiest_is_the_largest() {
        let fabric = TwinModel { scale: None }.fabric(crate::model::topology::Topology::default_topology(), |_| {});
        let o = SimOptions {
            collective: crate::model::workload::Collective::Allreduce,
            ranks: None,
            message_bytes: 1 << 20,
            placement: crate::model::placement::Placement::Fragmented,
            seed: 1,
            hash: HashMode::FiveTuple,
            hash_seed: Some(1),
            endpoint: Default::default(),
        };
        let (_, load) = simulate_packet_with_load(&mut fabric.clone(), &o, &PACKET).unwrap();
        let shares: Vec<(String, f64)> =
            (0..4).map(|c| format!("z0c{c}")).map(|c| (c.clone(), uplink_share(&fabric, &load, "z0r0", &c))).collect();
        let sum: f64 = shares.iter().map(|s| s.1).sum();
        assert!((sum - 1.0).abs() < 1e-9, "{shares:?}");
        let busiest = busiest_uplink(&fabric, &load, "z0r0").unwrap();
        let max = shares.iter().map(|s| s.1).fold(0.0, f64::max);
        assert_eq!(shares.iter().find(|s| s.0 == busiest).unwrap().1, max, "{shares:?}");
        assert!(uplink_share(&fabric, &load, "nope", "z0c0").is_nan());
    }

    /// Two interleaved rings on the twin: under 5-tuple ECMP with 1 QP they slow each other, and
    /// E-ECMP with 8 QPs suffers less; the member counters of both together are the forwarding
    /// model's bytes of each alone. Under a negative control that hashes the 8-QP case on the
    /// 5-tuple (one fixed source port: its 8 QPs are one flow), E-ECMP no longer suffers less.
    #[test]
    fn multi_tenant_on_the_twin_decides_its_verdicts() {
        let real = run("multi-tenant", None);
        assert_eq!(decision(&real, "ecmp-neighbours-slow-each-other"), Decision::Matches, "{real:?}");
        assert_eq!(decision(&real, "eecmp-less-interference"), Decision::Matches, "{real:?}");
        assert_eq!(decision(&real, "attribution-adds-up"), Decision::Matches, "{real:?}");
        let control = Control::Hash { from: HashMode::Eecmp, to: HashMode::FiveTuple };
        let neg = run("multi-tenant", Some(control));
        assert_ne!(decision(&neg, "eecmp-less-interference"), Decision::Matches, "{neg:?}");
    }

    /// Every scenario has a packet-model variant; one added without must be listed as such
    /// (`--model packet` then refuses it by name).
    #[test]
    fn every_scenario_runs_on_the_twin() {
        let mut all: Vec<&str> = crate::experiment::ALL.iter().map(|s| s.name).collect();
        let mut twin = crate::experiment::TWIN_SCENARIOS.to_vec();
        all.sort_unstable();
        twin.sort_unstable();
        assert_eq!(all, twin);
    }

    /// The incast on the twin (the testbed's fabric): CTS under Xoff pauses less than PFC alone
    /// and bounds every queue; PFC keeps the class lossless. Under a negative control that
    /// gives the CTS cases no congestion control, CTS no longer pauses less.
    #[test]
    fn incast_on_the_twin_decides_its_verdicts() {
        let real = run("incast", None);
        assert_eq!(decision(&real, "cts-pauses-less"), Decision::Matches, "{real:?}");
        assert_eq!(decision(&real, "cts-bounds-in-flight"), Decision::Matches, "{real:?}");
        assert_eq!(decision(&real, "lossless"), Decision::Matches, "{real:?}");
        let control = Control::Cc { from: CcMode::Cts, to: CcMode::None };
        let fooled = run("incast", Some(control));
        assert_eq!(decision(&fooled, "cts-pauses-less"), Decision::DoesNotMatch, "{fooled:?}");
        assert_eq!(decision(&fooled, "cts-bounds-in-flight"), Decision::DoesNotMatch, "{fooled:?}");
    }

    /// cc-at-400g on the twin (the testbed's fabric): PFC only leaves no persistent CTSW→RTSW
    /// pause. A negative control that turns DCQCN off makes the DCQCN cases PFC-only runs, and
    /// "DCQCN with 200G thresholds is slower" can no longer come out.
    #[test]
    fn cc_at_400g_on_the_twin_decides_its_verdicts() {
        let real = run("cc-at-400g", None);
        assert_eq!(decision(&real, "pfc-only-no-persistent-spine-pauses"), Decision::Matches, "{real:?}");
        let control = Control::Cc { from: CcMode::Dcqcn, to: CcMode::None };
        let fooled = run("cc-at-400g", Some(control));
        for key in ["incast-dcqcn-200g-slower", "a2a-dcqcn-200g-slower", "ar-dcqcn-200g-slower"] {
            assert_eq!(decision(&fooled, key), Decision::DoesNotMatch, "{key}: {fooled:?}");
        }
    }

    /// A stuck receiver on the twin: its RTSW port is paused past the watchdog's time (a
    /// healthy receiver's never is), and the stall costs time, not data.
    #[test]
    fn pfc_storm_on_the_twin_decides_its_verdicts() {
        let real = run("pfc-storm", None);
        assert_eq!(decision(&real, "watchdog-fires"), Decision::Matches, "{real:?}");
        assert_eq!(decision(&real, "stall-loses-no-data"), Decision::Matches, "{real:?}");
        assert_eq!(decision(&real, "stall-costs-time"), Decision::Matches, "{real:?}");
    }
}
