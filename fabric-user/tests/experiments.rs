//! Every `fabric experiment` scenario in its CI variant (small sizes, 2 seeds) on a live testbed,
//! asserting the direction of its headline result and that its report, charts and JSON are
//! written. Needs root. The scenarios run one at a time (they share two cores and time matters).
mod common;

use std::sync::Mutex;

use fabric_user::experiment::{self, ExperimentReport, Options};

/// One scenario at a time: each saturates the machine's cores, and results depend on timing.
static SERIAL: Mutex<()> = Mutex::new(());

fn run(name: &str, tag: char) -> ExperimentReport {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fabric_user::sys::netns::require_capabilities().expect("these tests need root: they build network namespaces");
    common::use_fabric_binary();
    let out = std::env::temp_dir().join(format!("fabric-experiments-{}", std::process::id()));
    let opts = Options {
        full: false,
        seeds: None,
        out: out.clone(),
        prefix: Some(format!("{tag}{}", std::process::id() % 1000)),
        verbose: true,
        // Calibrated: a debug build's endpoints need a slower fabric than a release build's.
        time_scale: None,
    };
    let (r, dir) = experiment::run(name, &opts).unwrap_or_else(|e| panic!("{e:#}"));
    experiment::print_summary(&r, &dir);
    for f in ["report.md", "results.json"] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    let charts = r.files.iter().filter(|f| f.ends_with(".png")).count();
    assert!(charts >= 1 && charts == r.files.iter().filter(|f| f.ends_with(".svg")).count(), "{:?}", r.files);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("matches"), "the report states whether the direction matches");
    assert_eq!(r.seeds.len(), 2, "the CI variant runs 2 seeds");
    // Nothing of the testbeds is left.
    for c in 'a'..='e' {
        common::assert_nothing_left(&format!("{}{c}", opts.prefix.as_ref().unwrap()));
    }
    let _ = std::fs::remove_dir_all(&out);
    r
}

fn mean(r: &ExperimentReport, case: &str, metric: &str) -> f64 {
    r.outcome.case(case).mean(metric)
}

fn values(r: &ExperimentReport, case: &str, metric: &str) -> Vec<f64> {
    r.outcome.case(case).values[metric].clone()
}

#[test]
fn ecmp_entropy_eecmp_qp_scaling_balances_and_fixed_sport_alone_does_not() {
    let r = run("ecmp-entropy", 'e');
    let base = mean(&r, "ft-1qp", "max_over_mean");
    let eecmp = mean(&r, "eecmp-8qp", "max_over_mean");
    let fixed = mean(&r, "ft-8qp-fixed", "max_over_mean");
    let perqp = mean(&r, "ft-8qp-perqp", "max_over_mean");
    assert!(eecmp < base, "E-ECMP + 8 QPs max/mean {eecmp} must be below 1-QP five-tuple {base}");
    assert!(fixed >= 0.95 * base, "a fixed source port must give no gain: {fixed} vs {base}");
    assert!(perqp < base, "per-QP source ports spread under five-tuple: {perqp} vs {base}");
    // Centralised TE (issue 9): the controller's placement beats E-ECMP's hash on uplink balance.
    let te = mean(&r, "te-8qp", "max_over_mean");
    assert!(te < eecmp, "TE max/mean {te} must be below E-ECMP's {eecmp}");
    assert!(
        mean(&r, "eecmp-8qp", "completion_ms") < mean(&r, "ft-1qp", "completion_ms"),
        "E-ECMP + QP scaling must complete sooner: {:?} vs {:?}",
        values(&r, "eecmp-8qp", "completion_ms"),
        values(&r, "ft-1qp", "completion_ms")
    );
}

#[test]
fn path_pinning_fragmented_placement_is_slower_than_whole_racks() {
    let r = run("path-pinning", 'p');
    let (frag, contig) = (mean(&r, "pin-fragmented", "completion_ms"), mean(&r, "pin-contiguous", "completion_ms"));
    assert!(frag > contig, "fragmented pinning {frag} ms must be slower than whole racks {contig} ms");
    // Whole racks: one cross-rack connection per RTSW, nothing collides, nothing pauses; fragmented:
    // two connections pinned onto one link congest it.
    assert!(
        mean(&r, "pin-fragmented", "pfc_frames") > mean(&r, "pin-contiguous", "pfc_frames"),
        "fragmented pinning must congest a link: {:?} vs {:?}",
        values(&r, "pin-fragmented", "pfc_frames"),
        values(&r, "pin-contiguous", "pfc_frames")
    );
}

#[test]
fn link_failure_is_survived_and_redistributed() {
    let r = run("link-failure", 'l');
    let headline = r.outcome.verdicts.iter().find(|v| v.headline).unwrap();
    eprintln!("headline: {} -> {}", headline.measured, headline.matches);
    let delivered = r.outcome.verdicts.iter().find(|v| v.claim.contains("keeps delivering")).unwrap();
    assert!(delivered.matches, "{}", delivered.measured);
    assert!(headline.matches, "pinning must suffer more from the failure: {}", headline.measured);
}

#[test]
fn incast_pfc_only_pauses_more_than_cts() {
    let r = run("incast", 'i');
    let (none, cts) = (mean(&r, "pfc-only", "pfc_frames"), mean(&r, "cts", "pfc_frames"));
    assert!(none > 0.0, "a line-rate incast must pause");
    assert!(cts < none, "CTS {cts} must pause less than PFC only {none}");
    assert_eq!(mean(&r, "pfc-only", "drops"), 0.0);
}

#[test]
fn pfc_storm_pauses_reach_the_spine_tier() {
    let r = run("pfc-storm", 's');
    assert!(values(&r, "slow", "ctsw_pfc").iter().all(|&v| v > 0.0), "{:?}", values(&r, "slow", "ctsw_pfc"));
    assert!(mean(&r, "slow", "ctsw_pfc") > mean(&r, "healthy", "ctsw_pfc"));
    assert!(values(&r, "slow", "storms").iter().all(|&v| v >= 1.0), "the watchdog fires");
}

#[test]
fn cross_zone_topology_aware_placement_crosses_less() {
    let r = run("cross-zone", 'z');
    let (aware, random) = (mean(&r, "aware", "cross_zone_mib"), mean(&r, "random", "cross_zone_mib"));
    assert!(aware < random, "topology-aware {aware} MiB must cross less than random {random} MiB");
}
