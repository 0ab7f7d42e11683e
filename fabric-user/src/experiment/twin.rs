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
        SimOptions, SimResult,
        packet::{PacketJob, PacketOptions, Stall, simulate_packet_jobs},
    },
};

/// The twin's settings for experiments: links of 1 µs, a 10 s deadline per step.
pub const PACKET: PacketOptions =
    PacketOptions { link_delay_ns: 1_000, deadline_ns: 10_000_000_000, seed: 1, memory_limit_bytes: 8 << 30 };

/// Runs `runs` (case index, options) on `fabric`, every seed, and adds each result's metrics to
/// its case.
pub fn run_cases(ctx: &Ctx, fabric: &SimFabric, runs: &[(usize, SimOptions)], cases: &mut [Case]) -> Result<()> {
    let runs: Vec<TwinRun<'_>> =
        runs.iter().map(|(case, o)| TwinRun { case: *case, fabric, options: o.clone(), stall: None }).collect();
    run_twin_cases(ctx, &runs, cases)
}

/// One run of a case on the twin: the case's index, its fabric, options and stalled receiver.
pub struct TwinRun<'f> {
    pub case: usize,
    pub fabric: &'f SimFabric,
    pub options: SimOptions,
    pub stall: Option<Stall>,
}

/// [`run_cases`], with `more` adding a scenario's own metrics of each result to its case.
pub fn run_twin_cases_with(
    ctx: &Ctx,
    fabric: &SimFabric,
    runs: &[(usize, SimOptions)],
    cases: &mut [Case],
    more: impl Fn(&mut Case, &SimResult, &SimOptions),
) -> Result<()> {
    let runs: Vec<TwinRun<'_>> =
        runs.iter().map(|(case, o)| TwinRun { case: *case, fabric, options: o.clone(), stall: None }).collect();
    run_twin_cases_then(ctx, &runs, cases, more)
}

/// [`run_cases`] for runs on fabrics of their own (a case's own ECN thresholds, say), or with
/// a stalled receiver.
pub fn run_twin_cases(ctx: &Ctx, runs: &[TwinRun<'_>], cases: &mut [Case]) -> Result<()> {
    run_twin_cases_then(ctx, runs, cases, |_, _, _| {})
}

/// [`run_twin_cases`], with `more` adding a scenario's own metrics of each result to its case.
pub fn run_twin_cases_then(
    ctx: &Ctx,
    runs: &[TwinRun<'_>],
    cases: &mut [Case],
    more: impl Fn(&mut Case, &SimResult, &SimOptions),
) -> Result<()> {
    let mut all = Vec::new();
    for &seed in &ctx.seeds {
        for TwinRun { case: i, fabric, options: o, stall } in runs {
            let mut o = SimOptions { hash_seed: Some(seed as u32), ..o.clone() };
            // A negative control acts on the twin's cases as on the testbed's runs.
            match ctx.control {
                Some(Control::Hash { from, to }) if o.hash == from => o.hash = to,
                Some(Control::Cc { from, to }) if o.endpoint.cc == from => o.endpoint.cc = to,
                _ => {}
            }
            all.push((*i, seed, PacketJob { fabric, options: o, stall: *stall }));
        }
    }
    let jobs: Vec<PacketJob<'_>> = all.iter().map(|a| a.2.clone()).collect();
    let results = simulate_packet_jobs(&jobs, &PACKET)?;
    let all_options: Vec<SimOptions> = all.iter().map(|a| a.2.options.clone()).collect();
    for (k, ((i, seed, _), r)) in all.iter().zip(&results).enumerate() {
        if ctx.verbose {
            eprintln!("{} seed {seed}: {:.3} ms modelled, {:.2} s wall", cases[*i].key, r.completion_s * 1e3, r.wall_s);
        }
        push(&mut cases[*i], r)?;
        more(&mut cases[*i], r, &all_options[k]);
    }
    Ok(())
}

/// The metrics of one result, under the testbed runs' names.
pub fn push(c: &mut Case, r: &SimResult) -> Result<()> {
    let p = r.packet.as_ref().expect("a packet result");
    ensure!(p.finished, "{}: the twin did not finish every QP within its deadline", r.case);
    let rtsw = r.tiers.iter().find(|t| t.tier == "rtsw");
    c.push("completion_ms", r.completion_s * 1e3);
    c.push("modelled_us", r.completion_s * 1e6);
    c.push("max_over_mean", rtsw.map_or(1.0, |t| t.mean_max_over_mean));
    c.push("worst_max_over_mean", rtsw.map_or(1.0, |t| t.worst_max_over_mean));
    c.push("jain", rtsw.map_or(1.0, |t| t.mean_jain));
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

#[cfg(test)]
mod tests {
    use fabric_common::config::HashMode;

    use super::*;
    use crate::endpoint::CcMode;
    use crate::experiment::{Options, verdict::Decision};

    fn run(name: &str, control: Option<Control>) -> Vec<(String, Decision)> {
        let out = std::env::temp_dir().join(format!("fabric-twin-exp-{}-{name}", std::process::id()));
        let opts = Options { out: out.clone(), control, twin: Some(TwinModel { scale: None }), ..Default::default() };
        let (r, dir) = crate::experiment::run(name, &opts).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(dir.ends_with(format!("{name}-packet")) && dir.join("report.md").exists());
        let _ = std::fs::remove_dir_all(out);
        r.outcome.verdicts.iter().map(|v| (v.key.to_string(), v.direction)).collect()
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

    #[test]
    fn scenarios_without_a_twin_variant_say_so() {
        let opts = Options { twin: Some(TwinModel { scale: None }), ..Default::default() };
        let err = crate::experiment::run("multi-tenant", &opts).unwrap_err().to_string();
        assert!(err.contains("multi-tenant: no packet-model variant yet"), "{err}");
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
