//! Which job put which bytes on which uplink, and who a job shared its slow steps with.
//!
//! The bytes are the forwarding model's ([`crate::forwarding`]): every flow of a round (each job's
//! step, run together) is traced through the switches' own member choice, so each directed RTSW
//! uplink gets the frame bytes of every job that crossed it. The namespace test checks that the
//! jobs' bytes add up to the switches' port counters.
use std::collections::BTreeMap;

pub use crate::run::job::SharedStep;

/// Per job, per uplink label (`z0r1->z0c3`), frame bytes.
pub type LinkBytes = BTreeMap<String, BTreeMap<String, u64>>;

/// One step of one job, as run in a round with the others.
#[derive(Clone, Debug)]
pub struct StepLoad {
    pub iteration: u32,
    /// 0-based step in the iteration.
    pub step: usize,
    pub duration_ns: u64,
    /// Every job of the round (this one included): its bytes per uplink.
    pub round: LinkBytes,
}

/// A step is slow when it took at least this much longer than the job's median step.
pub const SLOW_STEP: f64 = 1.25;

/// For each slow step of `job` (at least [`SLOW_STEP`] x its median), the uplink it shared most
/// and with whom.
pub fn attribute(job: &str, steps: &[StepLoad]) -> Vec<SharedStep> {
    let mut d: Vec<u64> = steps.iter().map(|s| s.duration_ns).collect();
    d.sort_unstable();
    let median = d.get(d.len() / 2).copied().unwrap_or(0).max(1) as f64;
    let mut out = Vec::new();
    for s in steps {
        let slowdown = s.duration_ns as f64 / median;
        if slowdown < SLOW_STEP {
            continue;
        }
        let Some(mine) = s.round.get(job) else { continue };
        let total = |link: &str| s.round.values().filter_map(|l| l.get(link)).sum::<u64>();
        let Some((link, &own)) = mine.iter().filter(|(_, b)| **b > 0).max_by_key(|(l, _)| total(l)) else {
            continue;
        };
        let other = s
            .round
            .iter()
            .filter(|(j, _)| j.as_str() != job)
            .filter_map(|(j, l)| l.get(link).filter(|b| **b > 0).map(|b| (j, *b)))
            .max_by_key(|(_, b)| *b);
        let all = total(link).max(1) as f64;
        out.push(SharedStep {
            iteration: s.iteration,
            step: s.step + 1,
            duration_ns: s.duration_ns,
            slowdown,
            link: link.clone(),
            own_bytes: own,
            other: other.map(|(j, _)| j.clone()),
            other_bytes: other.map_or(0, |o| o.1),
            other_share: other.map_or(0.0, |o| o.1 as f64 / all),
        });
    }
    out
}

/// Bytes of `job` over all its steps, per uplink.
pub fn job_totals(job: &str, steps: &[StepLoad]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for s in steps {
        for (l, b) in s.round.get(job).into_iter().flatten() {
            *out.entry(l.clone()).or_default() += b;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(entries: &[(&str, &str, u64)]) -> LinkBytes {
        let mut r = LinkBytes::new();
        for (j, l, b) in entries {
            r.entry(j.to_string()).or_default().insert(l.to_string(), *b);
        }
        r
    }

    #[test]
    fn a_slow_step_names_the_neighbour_on_its_busiest_uplink() {
        let alone = |step| StepLoad {
            iteration: 1,
            step,
            duration_ns: 10,
            round: round(&[("b", "z0r1->z0c3", 100), ("b", "z0r1->z0c0", 100)]),
        };
        let mut steps: Vec<StepLoad> = (0..4).map(alone).collect();
        steps.push(StepLoad {
            iteration: 1,
            step: 4,
            duration_ns: 20,
            round: round(&[
                ("b", "z0r1->z0c3", 100),
                ("b", "z0r1->z0c0", 100),
                ("a", "z0r1->z0c3", 161),
                ("a", "z0r2->z0c1", 500),
                ("c", "z0r1->z0c3", 1),
            ]),
        });
        let s = attribute("b", &steps);
        assert_eq!(s.len(), 1, "only the slow step: {s:?}");
        assert_eq!((s[0].step, s[0].link.as_str(), s[0].other.as_deref()), (5, "z0r1->z0c3", Some("a")));
        assert!((s[0].other_share - 161.0 / 262.0).abs() < 1e-9);
        assert_eq!(
            s[0].sentence("b"),
            "job b's step 5 (iteration 1, 2.0x its median step) shared z0r1->z0c3 with job a, 61% of the bytes"
        );
        // A slow step on links nobody else used names no one; even steps name nothing.
        let mut lonely = steps.clone();
        lonely[4].round = round(&[("b", "z0r1->z0c3", 100)]);
        let s = attribute("b", &lonely);
        assert_eq!(s[0].other, None);
        assert!(s[0].sentence("b").contains("to itself"));
        assert!(attribute("b", &steps[..4]).is_empty());
        assert_eq!(job_totals("b", &steps)["z0r1->z0c3"], 500);
    }
}
