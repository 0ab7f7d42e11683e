//! What a scenario measures: its cases, each with per-seed values of its metrics.
use serde::Serialize;

use crate::run::RunResult;

/// The metric key every scenario records per run: the share of the endpoints' timed sleeps that
/// woke late (see `crate::run::result::late_wake_share`).
pub const LATE_WAKES: &str = "late_wake_share";

/// Which way is better for a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Lower,
    Higher,
    /// Neither: a descriptive figure.
    None,
}

/// One configuration of a scenario and what each seed measured.
#[derive(Clone, Debug, Serialize)]
pub struct Case {
    pub key: String,
    pub label: String,
    /// metric key -> value per seed (in seed order).
    pub values: std::collections::BTreeMap<String, Vec<f64>>,
    /// Bytes each RTSW sent on each of its uplinks, over every run of the case (the report's
    /// heat map).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub uplinks: std::collections::BTreeMap<String, Vec<(String, u64)>>,
}

impl Case {
    pub fn new(key: &str, label: &str) -> Self {
        Case { key: key.into(), label: label.into(), values: Default::default(), uplinks: Default::default() }
    }

    /// A case with the given per-seed values (tests of verdict functions), on a machine that
    /// kept up (no late wakes).
    pub fn with(key: &str, metrics: &[(&str, &[f64])]) -> Self {
        let mut c = Case::new(key, key);
        for (m, vs) in metrics {
            for &v in *vs {
                c.push(m, v);
            }
        }
        if let Some((_, vs)) = metrics.first() {
            c.values.insert(LATE_WAKES.into(), vec![0.0; vs.len()]);
        }
        c
    }

    pub fn push(&mut self, metric: &str, v: f64) {
        self.values.entry(metric.into()).or_default().push(v);
    }

    /// Pushes `metric` as `read` finds it in run `r`, or NaN (not measured) when there is no run
    /// (it failed twice). A scenario names each metric once, in one list, for both.
    pub fn push_of<R>(&mut self, metric: &str, r: Option<&R>, read: impl FnOnce(&R) -> f64) {
        self.push(metric, r.map_or(f64::NAN, read));
    }

    pub fn mean(&self, metric: &str) -> f64 {
        self.values.get(metric).map_or(f64::NAN, |v| mean(v))
    }

    /// The per-seed values of `metric` (empty if never measured).
    pub fn values_of(&self, metric: &str) -> Vec<f64> {
        self.values.get(metric).cloned().unwrap_or_default()
    }

    /// Records what every run of a case records besides its metrics: what the host did during
    /// `r` (how punctually its endpoints woke, see `super::verdict::cpu_bound`, and how busy the
    /// machine was) and the bytes on each RTSW uplink.
    pub fn push_run(&mut self, r: &RunResult) {
        self.push(LATE_WAKES, r.late_wake_share.unwrap_or(f64::NAN));
        self.push("cpu_busy", r.host_cpu_busy.unwrap_or(f64::NAN));
        self.add_uplinks(&r.uplinks);
    }

    /// Adds one run's bytes per RTSW uplink to the case's.
    pub fn add_uplinks(&mut self, loads: &[crate::telemetry::stats::UplinkLoad]) {
        for u in loads {
            let sum = self.uplinks.entry(u.rtsw.clone()).or_default();
            for (port, bytes) in &u.tx_bytes {
                match sum.iter_mut().find(|(p, _)| p == port) {
                    Some((_, b)) => *b += bytes,
                    None => sum.push((port.clone(), *bytes)),
                }
            }
        }
    }
}

pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 }
}

/// The case named `key` of a scenario (a scenario's verdicts name only cases it ran).
pub fn find<'a>(cases: &'a [Case], key: &str) -> &'a Case {
    cases.iter().find(|c| c.key == key).unwrap_or_else(|| panic!("no case {key}"))
}

/// Support for the scenarios' verdict tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Case, find};
    use crate::experiment::verdict::{Decision, Verdict};

    /// A comparison a scenario makes: its verdict's key, the two cases (the one claimed better
    /// first) and the metric it compares them on.
    pub type Compared<'a> = (&'a str, (&'a str, &'a str), &'a str);

    /// `cases` with the per-seed values of `metric` of cases `a` and `b` exchanged.
    pub fn swapped(cases: &[Case], (a, b): (&str, &str), metric: &str) -> Vec<Case> {
        let (va, vb) = (find(cases, a).values_of(metric), find(cases, b).values_of(metric));
        assert!(!va.is_empty() && !vb.is_empty(), "cases {a} and {b} both measure {metric}");
        let mut out = cases.to_vec();
        for c in &mut out {
            if c.key == a {
                c.values.insert(metric.into(), vb.clone());
            } else if c.key == b {
                c.values.insert(metric.into(), va.clone());
            }
        }
        out
    }

    /// Each comparison matches on `cases` and does not match once its two cases' values are
    /// exchanged: the verdict is decided by those cases and that metric, in the claimed
    /// direction, and can come out either way.
    pub fn assert_each_can_fail(cases: &[Case], verdicts: impl Fn(&[Case]) -> Vec<Verdict>, compared: &[Compared]) {
        let decision = |v: &[Verdict], key: &str| {
            let v = v.iter().find(|v| v.key == key).unwrap_or_else(|| panic!("no verdict {key}"));
            (v.direction, v.evidence())
        };
        let ok = verdicts(cases);
        for &(key, pair, metric) in compared {
            let (d, why) = decision(&ok, key);
            assert_eq!(d, Decision::Matches, "{key} on the cases as given: {why}");
            let (d, why) = decision(&verdicts(&swapped(cases, pair, metric)), key);
            assert_eq!(d, Decision::DoesNotMatch, "{key} with {pair:?} exchanged on {metric}: {why}");
        }
    }
}
