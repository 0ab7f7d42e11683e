//! How loaded a link is, in numbers and in colour. Colours come in a few bands rather than a
//! gradient: a band can be named in the legend and told apart at a glance (and in a test).
use serde::Serialize;

/// One band of the load scale: links at or above `from` (share of the link rate) and below the
/// next band's `from` get `colour`.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Band {
    pub from: f64,
    pub colour: &'static str,
    pub label: &'static str,
}

/// The load scale, lowest first. Idle is grey so that what carries traffic stands out.
pub const BANDS: [Band; 6] = [
    Band { from: 0.0, colour: "#b8c0c8", label: "idle" },
    Band { from: 0.005, colour: "#2b9348", label: "< 25%" },
    Band { from: 0.25, colour: "#80b918", label: "25-50%" },
    Band { from: 0.5, colour: "#f2a900", label: "50-75%" },
    Band { from: 0.75, colour: "#e85d04", label: "75-90%" },
    Band { from: 0.9, colour: "#d00000", label: ">= 90%" },
];

/// A link that is down.
pub const DOWN_COLOUR: &str = "#444444";

/// The colour of a link carrying `util` of its rate.
pub fn colour(util: f64) -> &'static str {
    BANDS.iter().rev().find(|b| util >= b.from).map_or(BANDS[0].colour, |b| b.colour)
}

/// Share of a link's rate used, from bytes counted over `seconds` of wall time. The testbed runs
/// in slowed time: a link of `rate_gbps` carries `rate_gbps / time_scale` Gbit/s of wall time.
pub fn utilisation(bytes: u64, seconds: f64, rate_gbps: f64, time_scale: u64) -> f64 {
    if seconds <= 0.0 || rate_gbps <= 0.0 {
        return 0.0;
    }
    let wall_bps = rate_gbps * 1e9 / time_scale.max(1) as f64;
    bytes as f64 * 8.0 / seconds / wall_bps
}

/// The modelled rate, Gbit/s, of `bytes` counted over `seconds` of wall time.
pub fn modelled_gbps(bytes: u64, seconds: f64, time_scale: u64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    bytes as f64 * 8.0 / seconds * time_scale.max(1) as f64 / 1e9
}

/// A short rate label: `0`, `3.2`, `41`, `400` (Gbit/s, two significant figures below 10).
pub fn gbps_label(gbps: f64) -> String {
    if gbps < 0.05 {
        "0".into()
    } else if gbps < 10.0 {
        format!("{gbps:.1}")
    } else {
        format!("{gbps:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_rise_with_load_and_idle_is_apart() {
        assert_eq!(colour(0.0), "#b8c0c8");
        assert_eq!(colour(0.001), "#b8c0c8");
        assert_eq!(colour(0.1), "#2b9348");
        assert_eq!(colour(0.6), "#f2a900");
        assert_eq!(colour(0.95), "#d00000");
        assert_eq!(colour(3.0), "#d00000", "bursts over the rate stay red");
        assert!(BANDS.windows(2).all(|w| w[0].from < w[1].from));
        let distinct: std::collections::BTreeSet<_> = BANDS.iter().map(|b| b.colour).chain([DOWN_COLOUR]).collect();
        assert_eq!(distinct.len(), BANDS.len() + 1);
    }

    #[test]
    fn utilisation_is_in_slowed_time() {
        // 400 Gbit/s modelled at time scale 4000 is 100 Mbit/s of wall time: 12.5 MB/s is full.
        assert!((utilisation(12_500_000, 1.0, 400.0, 4000) - 1.0).abs() < 1e-9);
        assert!((utilisation(6_250_000, 2.0, 400.0, 4000) - 0.25).abs() < 1e-9);
        assert_eq!(utilisation(5, 0.0, 400.0, 4000), 0.0);
        assert!((modelled_gbps(12_500_000, 1.0, 4000) - 400.0).abs() < 1e-9);
        assert_eq!(gbps_label(0.01), "0");
        assert_eq!(gbps_label(3.25), "3.2");
        assert_eq!(gbps_label(399.6), "400");
    }
}
