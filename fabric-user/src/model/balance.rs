//! How evenly load spreads over the members of a group: the two figures every report uses.

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

#[cfg(test)]
mod tests {
    use super::imbalance;

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
