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
