//! Verdicts that could come out either way: a claim of the paper is decided from the per-seed
//! measurements with an uncertainty, and may match, not match, or stay inconclusive.
//!
//! **The statistic.** A comparison "A is better than B" is judged on the per-seed *gain* of A
//! over B, in percent of the larger of the two (so a gain lies in -100..=100 and a count that
//! drops to zero is a 100% gain). Seeds are paired: every case of a seed runs under the same hash
//! seed, on the same testbed, one after the other, so the pairing removes what the seed shares.
//!
//! **The interval.** A two-sided 95% Student-t interval of the mean gain over the seeds. With the
//! handful of seeds a testbed can afford (2 in CI, 5 with `--full`) a bootstrap has too few
//! samples to resample, and a sign test cannot reach 5% below five seeds whatever the data; the
//! t interval uses the spread the seeds show, and with identical results (a deterministic case)
//! it shrinks to the point, which is right.
//!
//! **The decision.** Each comparison states a margin: the smallest gain worth the claim.
//! - matches: the whole interval lies above the margin;
//! - does not match: the whole interval lies below it (no gain as large as the margin is
//!   compatible with the seeds: absent, negligible or reversed);
//! - inconclusive: the interval contains the margin, or fewer than two seeds.
//!
//! A run is CPU-bound when its endpoints woke late for more than a tenth of their timed sleeps
//! (the CPU, not the fabric, set the pace; `crate::run::result::CPU_BOUND_LATE_SHARE`). A
//! comparison of a metric that depends on pace and rests on such a run never matches: "matches"
//! becomes inconclusive, while "does not match" stands with the CPU named in its evidence.
//!
//! A magnitude the paper gives ("up to 40%", "more than 30%") is a band of gains; it is judged
//! the same way: inside the band, outside it, or overlapping its edge.
use serde::Serialize;

pub use super::case::LATE_WAKES;
use super::case::{Better, Case, find};

/// One verdict's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    Matches,
    DoesNotMatch,
    Inconclusive,
}

impl Decision {
    pub fn describe(self) -> &'static str {
        match self {
            Decision::Matches => "matches",
            Decision::DoesNotMatch => "does not match",
            Decision::Inconclusive => "inconclusive",
        }
    }
}

/// What a verdict is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// One case against another, over seeds: a reproduced claim.
    Comparison,
    /// A property every run must have (nothing lost, a bound held): a count, decided exactly.
    Fact,
    /// True by construction of the setup; reported for the reader, not counted as reproduced.
    Identity,
}

/// A 95% interval of a mean, in the unit of its samples.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    pub estimate: f64,
    pub lo: f64,
    pub hi: f64,
    pub n: usize,
}

/// Two-sided 97.5% quantiles of Student's t for 1..=30 degrees of freedom.
const T_975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
    2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
];
/// The normal quantile, for more than 31 samples.
const Z_975: f64 = 1.960;

impl Interval {
    /// The 95% t interval of the mean of `samples`; `None` below two samples or with a value
    /// that is not finite.
    pub fn t95(samples: &[f64]) -> Option<Interval> {
        let n = samples.len();
        if n < 2 || samples.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mean = samples.iter().sum::<f64>() / n as f64;
        let var = samples.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let t = T_975.get(n - 2).copied().unwrap_or(Z_975);
        let half = t * (var / n as f64).sqrt();
        Some(Interval { estimate: mean, lo: mean - half, hi: mean + half, n })
    }

    /// Whole interval above `threshold`: matches; whole interval below: does not; else neither.
    pub fn against(&self, threshold: f64) -> Decision {
        if self.lo > threshold {
            Decision::Matches
        } else if self.hi < threshold {
            Decision::DoesNotMatch
        } else {
            Decision::Inconclusive
        }
    }

    /// Inside `band` (inclusive): matches; disjoint from it: does not; overlapping an edge: neither.
    pub fn within(&self, band: (f64, f64)) -> Decision {
        if self.lo >= band.0 && self.hi <= band.1 {
            Decision::Matches
        } else if self.hi < band.0 || self.lo > band.1 {
            Decision::DoesNotMatch
        } else {
            Decision::Inconclusive
        }
    }
}

/// The gain of `a` over `b` in percent of the larger magnitude: positive when `a` is better.
pub fn gain_pct(a: f64, b: f64, better: Better) -> f64 {
    // Not measured on either side: no gain to speak of (`f64::max` would drop the NaN).
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    let scale = a.abs().max(b.abs());
    if scale == 0.0 {
        return 0.0;
    }
    let d = match better {
        Better::Lower => b - a,
        Better::Higher | Better::None => a - b,
    };
    d / scale * 100.0
}

/// A magnitude the paper states, as a band of gains (%), with where it comes from.
#[derive(Clone, Debug, Serialize)]
pub struct Band {
    pub lo_pct: f64,
    pub hi_pct: f64,
    pub source: &'static str,
}

/// The magnitude verdict: the gain's interval against the paper's band.
#[derive(Clone, Debug, Serialize)]
pub struct Magnitude {
    pub band: Band,
    pub decision: Decision,
}

/// A claim of the paper checked against the measurement.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// A stable name: tests and readers refer to a verdict by it.
    pub key: &'static str,
    /// The claim, as the paper makes it (in kind).
    pub claim: String,
    /// What this run measured.
    pub measured: String,
    pub kind: Kind,
    /// Whether the measured direction is the paper's.
    pub direction: Decision,
    /// Whether the measured size is the paper's, where the paper gives one.
    pub magnitude: Option<Magnitude>,
    /// The 95% interval of the gain (%), for comparisons.
    pub interval: Option<Interval>,
    /// The smallest gain that counts (%), for comparisons.
    pub margin_pct: Option<f64>,
    /// Per-seed gains (%), for comparisons.
    pub gains_pct: Vec<f64>,
    /// Why the verdict is inconclusive, when it is.
    pub reason: Option<String>,
    /// A CPU-bound run under a verdict that did not match (see [`Verdict::unless_cpu_bound`]).
    pub cpu_note: Option<String>,
    /// The headline result of the scenario.
    pub headline: bool,
}

impl Verdict {
    pub fn matches(&self) -> bool {
        self.direction == Decision::Matches
    }

    /// A property decided exactly from counts: `holds` or not.
    pub fn fact(key: &'static str, claim: impl Into<String>, measured: impl Into<String>, holds: bool) -> Self {
        Verdict {
            key,
            claim: claim.into(),
            measured: measured.into(),
            kind: Kind::Fact,
            direction: if holds { Decision::Matches } else { Decision::DoesNotMatch },
            magnitude: None,
            interval: None,
            margin_pct: None,
            gains_pct: vec![],
            reason: None,
            cpu_note: None,
            headline: false,
        }
    }

    /// Something true by construction: shown, never counted as a reproduced claim.
    pub fn identity(key: &'static str, claim: impl Into<String>, measured: impl Into<String>, holds: bool) -> Self {
        Verdict { kind: Kind::Identity, ..Self::fact(key, claim, measured, holds) }
    }

    /// This comparison as an identity: its figures shown, its outcome not counted as a
    /// reproduced claim (the setup decides it, e.g. a delay the runner adds).
    pub fn as_identity(mut self) -> Self {
        self.kind = Kind::Identity;
        self
    }

    pub fn headline(mut self) -> Self {
        self.headline = true;
        self
    }

    /// Judges per-seed gains (%) against `margin_pct` and, if given, the paper's band.
    pub fn from_gains(key: &'static str, claim: &str, measured: String, gains: Vec<f64>, margin_pct: f64) -> Self {
        let interval = Interval::t95(&gains);
        let unmeasured = gains.iter().filter(|g| !g.is_finite()).count();
        let (direction, reason) = match interval {
            Some(iv) => (iv.against(margin_pct), None),
            None if unmeasured > 0 => (
                Decision::Inconclusive,
                Some(format!(
                    "{unmeasured} of {} seed(s) measured nothing to compare (a run without the figure)",
                    gains.len()
                )),
            ),
            None => (Decision::Inconclusive, Some(format!("{} seed(s): no interval", gains.len()))),
        };
        Verdict {
            key,
            claim: claim.into(),
            measured,
            kind: Kind::Comparison,
            direction,
            magnitude: None,
            interval,
            margin_pct: Some(margin_pct),
            gains_pct: gains,
            reason,
            cpu_note: None,
            headline: false,
        }
    }

    /// Adds the magnitude verdict against `band`.
    pub fn with_band(mut self, band: Band) -> Self {
        let decision = match (&self.interval, &self.reason) {
            (Some(iv), None) => iv.within((band.lo_pct, band.hi_pct)),
            _ => Decision::Inconclusive,
        };
        self.magnitude = Some(Magnitude { band, decision });
        self
    }

    /// The evidence in one line: the gain's interval against the margin, the band, the reason.
    pub fn evidence(&self) -> String {
        let mut parts = Vec::new();
        if let (Some(iv), Some(m)) = (&self.interval, self.margin_pct) {
            parts.push(format!(
                "gain {:+.1}% (95% t interval {:+.1}..{:+.1}%, {} seeds; counts above {m:.0}%)",
                iv.estimate, iv.lo, iv.hi, iv.n
            ));
        }
        if let Some(mg) = &self.magnitude {
            parts.push(format!(
                "magnitude {} against the band {:.0}..{:.0}% ({})",
                mg.decision.describe(),
                mg.band.lo_pct,
                mg.band.hi_pct,
                mg.band.source
            ));
        }
        if let Some(r) = &self.reason {
            parts.push(format!("inconclusive because {r}"));
        }
        if let Some(c) = &self.cpu_note {
            parts.push(format!("note: {c}"));
        }
        match self.kind {
            Kind::Fact => parts.push("a property of every run, decided exactly".into()),
            Kind::Identity => parts.push("true by construction of the setup; not counted as reproduced".into()),
            Kind::Comparison => {}
        }
        parts.join("; ")
    }

    /// A comparison resting on a CPU-bound run (`why`) never matches: a "matches" becomes
    /// inconclusive. A "does not match" stands, with the CPU named in its evidence: it is what
    /// this machine measured, though a faster one might have shown the effect.
    pub fn unless_cpu_bound(mut self, why: Option<String>) -> Self {
        let Some(why) = why else { return self };
        if self.direction == Decision::Matches {
            self.direction = Decision::Inconclusive;
            self.reason = Some(why);
        } else {
            self.cpu_note = Some(why);
        }
        if let Some(m) = &mut self.magnitude
            && m.decision == Decision::Matches
        {
            m.decision = Decision::Inconclusive;
        }
        self
    }
}

pub use crate::run::result::CPU_BOUND_LATE_SHARE;

/// How many of `verdicts` (identities left out) matched, did not, and were inconclusive.
pub fn tally(verdicts: &[Verdict]) -> (usize, usize, usize) {
    let counted = || verdicts.iter().filter(|v| v.kind != Kind::Identity);
    let n = |d: Decision| counted().filter(|v| v.direction == d).count();
    (n(Decision::Matches), n(Decision::DoesNotMatch), n(Decision::Inconclusive))
}

/// "A's `metric` is better than B's by more than `margin_pct`", over paired seeds.
pub struct Comparison<'a> {
    pub key: &'static str,
    pub claim: &'a str,
    pub metric: &'a str,
    pub unit: &'a str,
    /// (A, B) case keys.
    pub cases: (&'a str, &'a str),
    pub better: Better,
    pub margin_pct: f64,
}

impl Comparison<'_> {
    pub fn judge(&self, cases: &[Case]) -> Verdict {
        let (a, b) = (find(cases, self.cases.0), find(cases, self.cases.1));
        let (va, vb) = (a.values_of(self.metric), b.values_of(self.metric));
        let gains: Vec<f64> = va.iter().zip(&vb).map(|(&x, &y)| gain_pct(x, y, self.better)).collect();
        let unit = if self.unit.is_empty() { unit_of_key(self.metric) } else { self.unit };
        let measured = format!(
            "{} per seed, {}: {} vs {}: {}{}",
            self.metric,
            a.label,
            per_seed(&va, unit),
            b.label,
            per_seed(&vb, unit),
            if va.len() == vb.len() { String::new() } else { " (seed counts differ)".into() }
        );
        let verdict = Verdict::from_gains(self.key, self.claim, measured, gains, self.margin_pct);
        if depends_on_pace(self.metric) { verdict.unless_cpu_bound(cpu_bound(&[a, b])) } else { verdict }
    }
}

/// The unit a metric's key names by its suffix (`completion_ms`, `cross_zone_mib`, `pfc_frames`),
/// for a comparison that states none; empty for a ratio (max/mean, Jain) or a count.
fn unit_of_key(metric: &str) -> &'static str {
    let units = [("_ms", " ms"), ("_us", " µs"), ("_mib", " MiB"), ("_pct", "%"), ("_frames", " frames")];
    units.iter().find(|(suffix, _)| metric.ends_with(suffix)).map_or("", |u| u.1)
}

/// Metrics that say where bytes went (decided by routing and placement), not how fast: a busy
/// CPU slows a run but does not move its bytes to another uplink.
const PACE_FREE_METRICS: [&str; 5] =
    ["max_over_mean", "worst_max_over_mean", "jain", "cross_zone_mib", "victim_share_pct"];

pub fn depends_on_pace(metric: &str) -> bool {
    !PACE_FREE_METRICS.contains(&metric)
}

/// Why `cases` are CPU-bound, if any of their runs was.
pub fn cpu_bound(cases: &[&Case]) -> Option<String> {
    let busy: Vec<(String, f64)> = cases
        .iter()
        .flat_map(|c| c.values_of(LATE_WAKES).into_iter().map(|b| (c.label.clone(), b)))
        .filter(|(_, b)| *b > CPU_BOUND_LATE_SHARE)
        .collect();
    let (label, b) = busy.first()?;
    Some(format!(
        "{} run(s) CPU-bound ({:.0}% of the endpoints' sleeps woke late in a run of {label}; limit {:.0}%)",
        busy.len(),
        b * 100.0,
        CPU_BOUND_LATE_SHARE * 100.0
    ))
}

/// `[1.230, 1.300] unit`, or `[40, 44] unit` when every value is whole (counts); a value not
/// measured (NaN) is `-`.
pub fn per_seed(v: &[f64], unit: &str) -> String {
    let whole = v.iter().filter(|x| x.is_finite()).all(|x| x.fract() == 0.0 && x.abs() < 1e15);
    let parts: Vec<String> = v
        .iter()
        .map(|x| match (x.is_finite(), whole) {
            (false, _) => "-".to_string(),
            (true, true) => format!("{x:.0}"),
            (true, false) => format!("{x:.3}"),
        })
        .collect();
    format!("[{}]{unit}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(key: &str, metric: &str, values: &[f64]) -> Case {
        let mut c = Case::new(key, key);
        for &v in values {
            c.push(metric, v);
            c.push(LATE_WAKES, 0.01);
        }
        c
    }

    fn faster(a: &[f64], b: &[f64], margin: f64) -> Verdict {
        let cases = [case("a", "t", a), case("b", "t", b)];
        Comparison {
            key: "k",
            claim: "a faster",
            metric: "t",
            unit: " ms",
            cases: ("a", "b"),
            better: Better::Lower,
            margin_pct: margin,
        }
        .judge(&cases)
    }

    #[test]
    fn t_interval_matches_a_hand_computed_one() {
        // Samples 1, 2, 3: mean 2, s = 1, t(0.975, 2) = 4.303, half width 4.303 / sqrt(3) = 2.4843.
        let iv = Interval::t95(&[1.0, 2.0, 3.0]).unwrap();
        assert!((iv.estimate - 2.0).abs() < 1e-12);
        assert!((iv.hi - 4.4843).abs() < 1e-3 && (iv.lo + 0.4843).abs() < 1e-3, "{iv:?}");
        assert_eq!(Interval::t95(&[1.0]), None);
        assert_eq!(Interval::t95(&[1.0, f64::NAN]), None);
        // Identical seeds: the interval is the point.
        let p = Interval::t95(&[7.0, 7.0]).unwrap();
        assert_eq!((p.lo, p.hi), (7.0, 7.0));
    }

    #[test]
    fn gain_is_relative_to_the_larger_and_signed_by_what_is_better() {
        assert_eq!(gain_pct(60.0, 100.0, Better::Lower), 40.0);
        assert_eq!(gain_pct(100.0, 60.0, Better::Lower), -40.0);
        assert_eq!(gain_pct(0.0, 50.0, Better::Lower), 100.0);
        assert_eq!(gain_pct(0.0, 0.0, Better::Lower), 0.0);
        assert!(gain_pct(0.0, f64::NAN, Better::Lower).is_nan() && gain_pct(f64::NAN, 0.0, Better::Higher).is_nan());
        assert!((gain_pct(0.9, 0.6, Better::Higher) - 100.0 / 3.0).abs() < 1e-9);
    }

    /// A seed whose run measured nothing (NaN) leaves the verdict inconclusive, saying so, and
    /// prints as `-`, never as a value.
    #[test]
    fn a_missing_measurement_is_inconclusive_and_named() {
        let v = faster(&[60.0, f64::NAN, 61.0], &[100.0, 101.0, 100.0], 5.0);
        assert_eq!(v.direction, Decision::Inconclusive, "{v:?}");
        assert!(v.evidence().contains("1 of 3 seed(s) measured nothing to compare"), "{}", v.evidence());
        assert!(v.measured.starts_with("t per seed, a: [60, -, 61] ms vs b:"), "{}", v.measured);
        assert_eq!(faster(&[60.0], &[100.0], 5.0).reason.as_deref(), Some("1 seed(s): no interval"));
    }

    #[test]
    fn a_clear_consistent_gain_matches() {
        let v = faster(&[60.0, 62.0, 61.0], &[100.0, 101.0, 100.0], 5.0);
        assert_eq!(v.direction, Decision::Matches, "{v:?}");
        assert_eq!(v.kind, Kind::Comparison);
    }

    #[test]
    fn no_gain_or_a_loss_does_not_match() {
        assert_eq!(faster(&[100.0, 100.0], &[100.0, 100.0], 5.0).direction, Decision::DoesNotMatch);
        assert_eq!(faster(&[120.0, 119.0, 121.0], &[100.0, 100.0, 100.0], 5.0).direction, Decision::DoesNotMatch);
        // A real but small gain, under the margin, is not the claim.
        assert_eq!(faster(&[98.0, 98.0, 98.1], &[100.0, 100.0, 100.0], 5.0).direction, Decision::DoesNotMatch);
    }

    #[test]
    fn scattered_seeds_or_one_seed_are_inconclusive() {
        let v = faster(&[60.0, 110.0], &[100.0, 100.0], 5.0);
        assert_eq!(v.direction, Decision::Inconclusive, "{v:?}");
        let one = faster(&[60.0], &[100.0], 5.0);
        assert_eq!(one.direction, Decision::Inconclusive);
        assert!(one.reason.unwrap().contains("1 seed"));
    }

    /// "a faster than b (100 ms)", with a's second seed CPU-bound (40% of its sleeps late).
    fn faster_with_a_cpu_bound_seed(a_ms: &[f64]) -> Verdict {
        let mut a = case("a", "t", a_ms);
        a.values.insert(LATE_WAKES.into(), vec![0.01, 0.4]);
        let cases = [a, case("b", "t", &[100.0, 100.0])];
        let (metric, better) = ("t", Better::Lower);
        Comparison { key: "k", claim: "", metric, unit: "", cases: ("a", "b"), better, margin_pct: 5.0 }.judge(&cases)
    }

    #[test]
    fn a_cpu_bound_run_never_matches_but_a_miss_stands() {
        let v = faster_with_a_cpu_bound_seed(&[100.0, 100.0]);
        assert_eq!(v.direction, Decision::DoesNotMatch);
        assert!(v.evidence().contains("CPU-bound"), "{}", v.evidence());
    }

    #[test]
    fn a_cpu_bound_run_makes_even_a_clear_gain_inconclusive() {
        let v = faster_with_a_cpu_bound_seed(&[60.0, 61.0]);
        assert_eq!(v.direction, Decision::Inconclusive);
        assert!(v.reason.unwrap().contains("CPU-bound"));
    }

    #[test]
    fn magnitude_inside_outside_and_on_the_edge_of_the_band() {
        let band = || Band { lo_pct: 10.0, hi_pct: 40.0, source: "test" };
        let inside = faster(&[70.0, 71.0, 70.0], &[100.0, 100.0, 100.0], 5.0).with_band(band());
        assert_eq!(inside.magnitude.unwrap().decision, Decision::Matches);
        let beyond = faster(&[40.0, 41.0, 40.0], &[100.0, 100.0, 100.0], 5.0).with_band(band());
        assert_eq!(beyond.magnitude.unwrap().decision, Decision::DoesNotMatch);
        let edge = faster(&[88.0, 92.0, 90.0], &[100.0, 100.0, 100.0], 5.0).with_band(band());
        assert_eq!(edge.magnitude.unwrap().decision, Decision::Inconclusive);
    }

    #[test]
    fn per_seed_values_print_counts_whole() {
        assert_eq!(per_seed(&[40.0, 44.0], " frames"), "[40, 44] frames");
        assert_eq!(per_seed(&[1.5, 2.0], ""), "[1.500, 2.000]");
    }

    #[test]
    fn facts_and_identities_are_exact() {
        assert_eq!(Verdict::fact("f", "c", "m", true).direction, Decision::Matches);
        assert_eq!(Verdict::fact("f", "c", "m", false).direction, Decision::DoesNotMatch);
        assert_eq!(Verdict::identity("i", "c", "m", true).kind, Kind::Identity);
    }
}
