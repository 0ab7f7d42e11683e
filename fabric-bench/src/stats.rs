//! The statistics every benchmark reports its rounds with.

/// The median of `v` (sorted in place): the middle value, or the mean of the two middle ones
/// when the count is even; NaN when `v` is empty (a case with no successful round).
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len().is_multiple_of(2) { (v[m - 1] + v[m]) / 2.0 } else { v[m] }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_or_the_mean_of_the_two_middle_values() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5, "even count: not the upper middle");
        assert_eq!(median(&mut [5.0]), 5.0);
        assert!(median(&mut []).is_nan());
    }
}
