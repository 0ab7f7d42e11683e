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

pub use super::harness::TwinModel;
use super::harness::{Case, Control, Ctx};
use crate::{
    forwarding::fabric::SimFabric,
    sim::{
        MemberLoad, SimOptions, SimResult,
        packet::{PacketOptions, simulate_packet_cases_with_load},
    },
};

/// The twin's settings for experiments: links of 1 µs, a 10 s deadline per step.
pub const PACKET: PacketOptions =
    PacketOptions { link_delay_ns: 1_000, deadline_ns: 10_000_000_000, seed: 1, memory_limit_bytes: 8 << 30 };

/// Runs `runs` (case index, options) on `fabric`, every seed, and adds each result's metrics to
/// its case.
pub fn run_cases(ctx: &Ctx, fabric: &SimFabric, runs: &[(usize, SimOptions)], cases: &mut [Case]) -> Result<()> {
    run_cases_with(ctx, fabric, runs, cases, |_, _, _| {})
}

/// [`run_cases`], then `extra` adds what a scenario reads beyond [`push`]'s metrics (from the
/// result and the bytes every ECMP member carried).
pub fn run_cases_with(
    ctx: &Ctx,
    fabric: &SimFabric,
    runs: &[(usize, SimOptions)],
    cases: &mut [Case],
    extra: impl Fn(&mut Case, &SimResult, &MemberLoad),
) -> Result<()> {
    let mut all = Vec::new();
    for &seed in &ctx.seeds {
        for (i, o) in runs {
            let mut o = SimOptions { hash_seed: Some(seed as u32), ..o.clone() };
            // A negative control acts on the twin's cases as on the testbed's runs.
            match ctx.control {
                Some(Control::Hash { from, to }) if o.hash == from => o.hash = to,
                Some(Control::Cc { from, to }) if o.endpoint.cc == from => o.endpoint.cc = to,
                _ => {}
            }
            all.push((*i, seed, o));
        }
    }
    let options: Vec<SimOptions> = all.iter().map(|a| a.2.clone()).collect();
    let results = simulate_packet_cases_with_load(fabric, &options, &PACKET)?;
    for ((i, seed, _), (r, load)) in all.iter().zip(&results) {
        if ctx.verbose {
            eprintln!("{} seed {seed}: {:.3} ms modelled, {:.2} s wall", cases[*i].key, r.completion_s * 1e3, r.wall_s);
        }
        push(&mut cases[*i], r)?;
        extra(&mut cases[*i], r, load);
    }
    Ok(())
}

/// `fabric` with the link `spec` (`SWITCH:PORT`) at `fraction` of its rate: the twin's port
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
    c.push("max_over_mean", rtsw.map_or(1.0, |t| t.mean_max_over_mean));
    c.push("worst_max_over_mean", rtsw.map_or(1.0, |t| t.worst_max_over_mean));
    c.push("jain", rtsw.map_or(1.0, |t| t.mean_jain));
    c.push("pfc_frames", p.tiers.iter().filter(|t| t.tier != "host").map(|t| t.pauses_sent).sum::<u64>() as f64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use fabric_common::config::HashMode;

    use super::*;
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

    #[test]
    fn scenarios_without_a_twin_variant_say_so() {
        let opts = Options { twin: Some(TwinModel { scale: None }), ..Default::default() };
        let err = crate::experiment::run("incast", &opts).unwrap_err().to_string();
        assert!(err.contains("incast: no packet-model variant yet"), "{err}");
    }
}
