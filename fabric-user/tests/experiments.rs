//! Every `fabric experiment` scenario in its CI variant (small sizes, 2 seeds) on a live testbed.
//! Each test checks every headline verdict of its scenario by name: with two seeds a comparison
//! may stay inconclusive, but it must never say "does not match" for what the fabric does; where
//! the effect is robust, the headline's direction is also asserted on every seed's values (so an
//! inconclusive interval cannot hide a reversed effect); and the properties every run must have
//! (nothing lost, a bound held) must hold. Negative controls
//! run a scenario with one mode secretly swapped for another and require the verdict that
//! depends on it to come out "does not match": the verdicts can fail. Needs root. The scenarios
//! run one at a time (they share two cores and time matters).
mod common;

use std::sync::Mutex;

use fabric_common::config::HashMode;
use fabric_user::{
    endpoint::CcMode,
    experiment::{self, Control, Decision, ExperimentReport, Options, Verdict},
};

/// One scenario at a time: each saturates the machine's cores, and results depend on timing.
static SERIAL: Mutex<()> = Mutex::new(());

fn run(name: &str, tag: char) -> ExperimentReport {
    run_with(name, tag, None, 2)
}

/// `seeds`: a control of a noisy count needs more than the CI variant's two seeds for its
/// interval to exclude the claimed gain.
fn run_with(name: &str, tag: char, control: Option<Control>, seeds: u32) -> ExperimentReport {
    run_at(name, tag, control, seeds, None)
}

/// `time_scale`: a control may run faster than the scenario does (a "does not match" stands on
/// CPU-bound runs; see `experiment::verdict`).
fn run_at(name: &str, tag: char, control: Option<Control>, seeds: u32, time_scale: Option<u64>) -> ExperimentReport {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fabric_user::sys::netns::require_capabilities().expect("these tests need root: they build network namespaces");
    common::use_fabric_binary();
    let out = std::env::temp_dir().join(format!("fabric-experiments-{}-{tag}", std::process::id()));
    let opts = Options {
        full: false,
        seeds: Some(seeds),
        out: out.clone(),
        prefix: Some(format!("{tag}{}", std::process::id() % 1000)),
        verbose: true,
        // Calibrated: a debug build's endpoints need a slower fabric than a release build's.
        time_scale,
        control,
        twin: None,
    };
    let (r, dir) = experiment::run(name, &opts).unwrap_or_else(|e| panic!("{e:#}"));
    experiment::print_summary(&r, &dir);
    for f in ["report.md", "results.json"] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    let charts = r.files.iter().filter(|f| f.ends_with(".png")).count();
    assert!(charts >= 1 && charts == r.files.iter().filter(|f| f.ends_with(".svg")).count(), "{:?}", r.files);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for v in &r.outcome.verdicts {
        assert!(report.contains(&format!("`{}`", v.key)), "the report names verdict {}", v.key);
    }
    assert_eq!(r.seeds.len(), seeds as usize);
    // Nothing of the testbeds is left.
    for c in 'a'..='e' {
        common::assert_nothing_left(&format!("{}{c}", opts.prefix.as_ref().unwrap()));
    }
    let _ = std::fs::remove_dir_all(&out);
    r
}

fn verdict<'a>(r: &'a ExperimentReport, key: &str) -> &'a Verdict {
    r.outcome.verdicts.iter().find(|v| v.key == key).unwrap_or_else(|| panic!("{}: no verdict {key}", r.name))
}

/// The scenario's headline verdicts are exactly `keys`, and none of them says "does not match".
fn assert_headlines(r: &ExperimentReport, keys: &[&str]) {
    let headlines: Vec<&str> = r.outcome.verdicts.iter().filter(|v| v.headline).map(|v| v.key).collect();
    assert_eq!(headlines, keys, "{}: the headline verdicts", r.name);
    for k in keys {
        let v = verdict(r, k);
        assert_ne!(v.direction, Decision::DoesNotMatch, "{k}: {} ({})", v.measured, v.evidence());
    }
}

/// `holds(a, b)` for every seed's values of `metric` in cases `a` and `b`: a headline's direction
/// checked on each seed, where two seeds are too few for its interval to decide.
fn assert_every_seed(r: &ExperimentReport, (a, b): (&str, &str), metric: &str, holds: impl Fn(f64, f64) -> bool) {
    let (va, vb) = (values(r, a, metric), values(r, b, metric));
    assert!(!va.is_empty() && va.len() == vb.len(), "{metric}: {a} {va:?}, {b} {vb:?}");
    assert!(va.iter().zip(&vb).all(|(&x, &y)| holds(x, y)), "{metric} per seed: {a} {va:?} against {b} {vb:?}");
}

fn assert_decision(r: &ExperimentReport, key: &str, expected: Decision) {
    let v = verdict(r, key);
    assert_eq!(v.direction, expected, "{key}: {} ({})", v.measured, v.evidence());
}

/// A delivery fact: it matches, or (on a loaded machine) it is inconclusive because a run under
/// its fault failed once and delivered everything when repeated with the fault again. It never
/// may not match: every run must deliver in the end.
fn assert_delivered(r: &ExperimentReport, key: &str) {
    let v = verdict(r, key);
    match v.direction {
        Decision::Matches => {}
        Decision::Inconclusive => {
            let why = v.reason.as_deref().unwrap_or_default();
            assert!(why.contains("failed once and delivered everything when repeated"), "{key}: {}", v.evidence());
            eprintln!("{key}: inconclusive on this machine: {why}");
        }
        Decision::DoesNotMatch => panic!("{key}: {} ({})", v.measured, v.evidence()),
    }
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
    assert_headlines(&r, &["eecmp-balance", "eecmp-completion"]);
    assert_decision(&r, "fixed-sport-no-entropy", Decision::Matches);
    let base = mean(&r, "ft-1qp", "max_over_mean");
    let eecmp = mean(&r, "eecmp-8qp", "max_over_mean");
    let perqp = mean(&r, "ft-8qp-perqp", "max_over_mean");
    assert!(eecmp < base, "E-ECMP + 8 QPs max/mean {eecmp} must be below 1-QP five-tuple {base}");
    assert!(perqp < base, "per-QP source ports spread under five-tuple: {perqp} vs {base}");
    // Centralised TE (issue 9): the controller's placement beats E-ECMP's hash on uplink balance.
    let te = mean(&r, "te-8qp", "max_over_mean");
    assert!(te < eecmp, "TE max/mean {te} must be below E-ECMP's {eecmp}");
}

/// The falsification test: the E-ECMP case's switches secretly hash the plain five-tuple, so its
/// eight fixed-port QPs take the one QP's path: the balance verdict must say "does not match".
#[test]
fn ecmp_entropy_negative_control_eecmp_secretly_five_tuple_does_not_match() {
    let r = run_with("ecmp-entropy", 'f', Some(Control::Hash { from: HashMode::Eecmp, to: HashMode::FiveTuple }), 2);
    assert!(r.control.is_some());
    assert_decision(&r, "eecmp-balance", Decision::DoesNotMatch);
    assert_ne!(verdict(&r, "eecmp-completion").direction, Decision::Matches);
}

#[test]
fn path_pinning_routing_modes_compared_under_one_placement() {
    let r = run("path-pinning", 'p');
    // Whether E-ECMP beats pinning on this small testbed is what the experiment measures (two
    // uplinks per RTSW; it varies with the hash seed): reported either way, asserted by name only.
    let headlines: Vec<&str> = r.outcome.verdicts.iter().filter(|v| v.headline).map(|v| v.key).collect();
    assert_eq!(headlines, ["eecmp-beats-pin-fragmented"]);
    // Pinning's collisions under fragmentation are deterministic (the destination decides).
    for key in ["pin-fragmentation-penalty", "te-beats-pin-fragmented", "2x-rate-relieves-pin"] {
        assert_ne!(verdict(&r, key).direction, Decision::DoesNotMatch, "{key}: {}", verdict(&r, key).evidence());
    }
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

/// E-ECMP secretly pinned: "E-ECMP beats pinning" compares pinning with itself.
#[test]
fn path_pinning_negative_control_eecmp_secretly_pinned_does_not_match() {
    let r = run_with("path-pinning", 'q', Some(Control::Hash { from: HashMode::Eecmp, to: HashMode::Pin }), 2);
    assert_ne!(verdict(&r, "eecmp-beats-pin-fragmented").direction, Decision::Matches);
    assert_ne!(verdict(&r, "eecmp-unaffected-by-fragmentation").direction, Decision::Matches);
}

#[test]
fn link_failure_is_survived_and_redistributed() {
    let r = run("link-failure", 'l');
    // Whether pinning suffers more is what the experiment measures; it is reported either way.
    assert_eq!(
        r.outcome.verdicts.iter().filter(|v| v.headline).map(|v| v.key).collect::<Vec<_>>(),
        ["pin-suffers-more"]
    );
    assert_decision(&r, "redistributed", Decision::Matches);
    assert_delivered(&r, "keeps-delivering");
}

#[test]
fn incast_cts_under_xoff_pauses_less_and_nothing_is_lost() {
    let r = run("incast", 'i');
    assert_headlines(&r, &["cts-pauses-less"]);
    assert_decision(&r, "lossless", Decision::Matches);
    assert_decision(&r, "cts-bounds-in-flight", Decision::Matches);
    assert!(values(&r, "pfc-only", "pfc_frames").iter().all(|&v| v > 0.0), "a line-rate incast must pause");
    // The headline on every seed, whatever two seeds' interval says: CTS under Xoff paused
    // none of the 41-47 times PFC alone did here.
    assert_every_seed(&r, ("cts", "pfc-only"), "pfc_frames", |cts, pfc| cts < pfc / 2.0);
}

/// CTS secretly off: the CTS case is PFC alone, so it pauses as much, and its queue toward the
/// receiver exceeds the CTS bound.
#[test]
fn incast_negative_control_cts_secretly_off_does_not_match() {
    let control = Some(Control::Cc { from: CcMode::Cts, to: CcMode::None });
    let r = run_at("incast", 'j', control, 5, Some(4000));
    assert_decision(&r, "cts-pauses-less", Decision::DoesNotMatch);
    assert_decision(&r, "cts-bounds-in-flight", Decision::DoesNotMatch);
}

#[test]
fn pfc_storm_pauses_reach_the_spine_tier() {
    let r = run("pfc-storm", 's');
    assert_headlines(&r, &["pauses-reach-spine"]);
    assert_decision(&r, "watchdog-fires", Decision::Matches);
    assert_delivered(&r, "stall-loses-no-data");
    // The headline on every seed: the spines paused more with the stuck receiver (39-41 frames
    // against a healthy incast's 11-15 here), and the incast took longer.
    assert_every_seed(&r, ("slow", "healthy"), "ctsw_pfc", |slow, healthy| slow > healthy);
    assert_every_seed(&r, ("slow", "healthy"), "completion_ms", |slow, healthy| slow > healthy);
}

#[test]
fn cross_zone_topology_aware_placement_crosses_less() {
    let r = run("cross-zone", 'z');
    assert_headlines(&r, &["aware-crosses-less"]);
    let (aware, random) = (mean(&r, "aware", "cross_zone_mib"), mean(&r, "random", "cross_zone_mib"));
    assert!(aware < random, "topology-aware {aware} MiB must cross less than random {random} MiB");
}

/// The gray failures on a live testbed: whether ECMP with one QP suffers more than E-ECMP is
/// what the experiment measures (reported either way); a slow link slowing E-ECMP, and the facts,
/// must hold, and the loss must show in the switches' counters.
#[test]
fn gray_failure_slow_lossy_and_flapping_links_deliver_everything() {
    let r = run("gray-failure", 'g');
    assert_headlines(&r, &["slow-link-slows-eecmp"]);
    assert_delivered(&r, "keeps-delivering");
    assert_decision(&r, "go-back-n-amplifies", Decision::Matches);
    assert!(values(&r, "eecmp-lossy", "lost_frames").iter().all(|&v| v > 0.0), "a 0.5% lossy link must drop frames");
    let (healthy, degraded) = (mean(&r, "ecmp-healthy", "completion_ms"), mean(&r, "ecmp-degraded", "completion_ms"));
    assert!(
        degraded > healthy,
        "ECMP 1 QP behind a 1/4-rate uplink ({degraded} ms) must be slower than healthy ({healthy} ms)"
    );
    // The headline on every seed: E-ECMP behind the slow uplink took longer (56-63% here).
    assert_every_seed(&r, ("eecmp-degraded", "eecmp-healthy"), "completion_ms", |slow, healthy| slow > healthy);
}

#[test]
fn multi_tenant_neighbours_collide_under_ecmp_and_the_attribution_adds_up() {
    let r = run("multi-tenant", 'm');
    assert_headlines(&r, &["ecmp-neighbours-slow-each-other", "eecmp-less-interference"]);
    assert_decision(&r, "attribution-adds-up", Decision::Matches);
    // Both headlines on every seed: under ECMP the jobs took about 3x as long together as alone
    // here, E-ECMP's 1.01-1.03x.
    assert_every_seed(&r, ("ecmp-1qp-together", "ecmp-1qp-alone"), "completion_ms", |both, alone| both > alone);
    assert_every_seed(&r, ("eecmp-8qp-together", "ecmp-1qp-together"), "slowdown", |eecmp, ecmp| eecmp < ecmp);
    for key in ["ecmp-1qp", "eecmp-8qp", "te-8qp"] {
        assert_eq!(values(&r, &format!("{key}-alone"), "slowdown"), [1.0, 1.0]);
        assert!(values(&r, &format!("{key}-together"), "completion_ms").iter().all(|&v| v > 0.0));
    }
}

/// The E-ECMP case's switches secretly hash the plain five-tuple: its 8 QPs on one source port
/// collide as one QP does, so E-ECMP no longer suffers less from the neighbour.
#[test]
fn multi_tenant_negative_control_eecmp_secretly_five_tuple_does_not_match() {
    let r = run_with("multi-tenant", 'n', Some(Control::Hash { from: HashMode::Eecmp, to: HashMode::FiveTuple }), 3);
    assert_ne!(verdict(&r, "eecmp-less-interference").direction, Decision::Matches);
}

/// Every load-balancing mode on a live testbed, healthy and with a slow uplink: spraying must
/// balance the uplinks (the headline), and every run deliver every byte; how adaptive routing,
/// WCMP and the reorder-tolerant endpoint fare is what the experiment measures.
#[test]
fn load_balancing_spray_balances_and_every_mode_delivers() {
    let r = run("load-balancing", 'b');
    assert_headlines(&r, &["spray-balances"]);
    assert_delivered(&r, "keeps-delivering");
    let spray = mean(&r, "spray-ooo-allreduce-healthy", "max_over_mean");
    let ecmp = mean(&r, "ecmp-allreduce-healthy", "max_over_mean");
    assert!(spray < ecmp, "spray's uplink max/mean {spray} must be below one-QP ECMP's {ecmp}");
}

/// The sprayed cases' switches secretly hash the five-tuple: one QP per connection collides as
/// ECMP does, so spraying no longer balances better.
#[test]
fn load_balancing_negative_control_spray_secretly_five_tuple_does_not_match() {
    let r = run_with("load-balancing", 'c', Some(Control::Hash { from: HashMode::Spray, to: HashMode::FiveTuple }), 2);
    assert_decision(&r, "spray-balances", Decision::DoesNotMatch);
}
