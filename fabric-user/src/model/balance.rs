//! How evenly load spreads over the members of a group: the two figures every report uses, and
//! their average over a fabric's groups (one definition for `fabric run`, trace replay and
//! `fabric sim`).
use serde::Serialize;

/// max/mean and Jain's index of a load vector.
pub fn imbalance(loads: &[u64]) -> (f64, f64) {
    let n = loads.len() as f64;
    let sum: f64 = loads.iter().map(|&x| x as f64).sum();
    if loads.is_empty() || sum == 0.0 {
        return (0.0, 1.0);
    }
    let max = loads.iter().copied().max().unwrap_or(0) as f64;
    let squares: f64 = loads.iter().map(|&x| (x as f64) * (x as f64)).sum();
    (max / (sum / n), sum * sum / (n * squares))
}

/// Balance over many groups: the mean and worst max/mean, and the mean Jain index.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BalanceSummary {
    pub mean_max_over_mean: f64,
    pub worst_max_over_mean: f64,
    pub mean_jain: f64,
    /// Groups averaged: those with two or more members that carried bytes (a group of one has
    /// nothing to balance, an idle one nothing to say).
    pub groups: usize,
}

impl BalanceSummary {
    /// The figures, or NaN where no group carried traffic: nothing was measured, which is not a
    /// perfect balance (max/mean 0 would read better than 1). For comparisons and charts; the
    /// stored summary keeps its zeros with `groups: 0`.
    pub fn or_unmeasured(&self) -> BalanceSummary {
        if self.groups > 0 {
            return self.clone();
        }
        BalanceSummary { mean_max_over_mean: f64::NAN, worst_max_over_mean: f64::NAN, mean_jain: f64::NAN, groups: 0 }
    }
}

/// Averages [`imbalance`] over the groups (each the bytes on its members) that have a choice
/// and carried traffic; all zero with `groups: 0` when none did.
pub fn summarize<G: AsRef<[u64]>>(groups: impl IntoIterator<Item = G>) -> BalanceSummary {
    let figures: Vec<(f64, f64)> = groups
        .into_iter()
        .filter(|g| g.as_ref().len() >= 2 && g.as_ref().iter().any(|&b| b > 0))
        .map(|g| imbalance(g.as_ref()))
        .collect();
    if figures.is_empty() {
        return BalanceSummary::default();
    }
    let k = figures.len() as f64;
    BalanceSummary {
        mean_max_over_mean: figures.iter().map(|f| f.0).sum::<f64>() / k,
        worst_max_over_mean: figures.iter().map(|f| f.0).fold(0.0, f64::max),
        mean_jain: figures.iter().map(|f| f.1).sum::<f64>() / k,
        groups: figures.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::{imbalance, summarize};

    #[test]
    fn one_member_and_idle_groups_are_left_out() {
        let s = summarize([vec![30, 10], vec![500], vec![0, 0, 0], vec![10, 10]]);
        assert_eq!(s.groups, 2);
        assert!((s.mean_max_over_mean - 1.25).abs() < 1e-9, "{s:?}");
        assert!((s.worst_max_over_mean - 1.5).abs() < 1e-9);
        assert!((s.mean_jain - 0.9).abs() < 1e-9);
        assert_eq!(summarize(Vec::<Vec<u64>>::new()).groups, 0);
        assert!(summarize(Vec::<Vec<u64>>::new()).or_unmeasured().mean_max_over_mean.is_nan());
        assert_eq!(s.or_unmeasured().mean_max_over_mean, s.mean_max_over_mean);
    }

    #[test]
    fn imbalance_figures() {
        assert_eq!(imbalance(&[10, 10, 10, 10]), (1.0, 1.0));
        let (m, j) = imbalance(&[40, 0, 0, 0]);
        assert_eq!((m, j), (4.0, 0.25));
        assert_eq!(imbalance(&[0, 0]), (0.0, 1.0));
        let (m, j) = imbalance(&[30, 10]);
        assert!((m - 1.5).abs() < 1e-9 && (j - 0.8).abs() < 1e-9);
    }
}
