//! Faults a testbed can be given beyond a clean link down: gray failures (a link whose modelled
//! rate drops, a link that loses a fraction of its frames), flapping links and whole switches
//! going down, and the log of every fault with its time, which job records join to their runs.
use std::time::Duration;

use fabric_common::{fault::MAX_LOSS_PPM, queue::MIN_RATE_BPS};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A gray failure of one link, applied at its switch ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Degradation {
    /// The link's modelled rate in Gbit/s; `None` keeps the topology's.
    pub rate_gbps: Option<f64>,
    /// Frames lost per million, by each switch end of the link on what it sends.
    pub loss_ppm: u32,
    /// Seed of the loss draws.
    pub seed: u64,
}

impl Degradation {
    /// A link's state before its first degradation: its own rate, no loss, and the loss draws'
    /// seed a degradation takes when none is given.
    pub const NONE: Self = Self { rate_gbps: None, loss_ppm: 0, seed: 1 };

    /// This degradation changed by a later `fabric link degrade`: a rate, loss or seed given
    /// replaces this one's, one not given is kept (so `--rate` then `--loss` leaves both). A
    /// rate equal to the link's own, `nominal_gbps`, gives it back.
    pub fn updated(self, rate_gbps: Option<f64>, loss_ppm: Option<u32>, seed: Option<u64>, nominal_gbps: f64) -> Self {
        let rate_gbps = rate_gbps.or(self.rate_gbps).filter(|&r| r != nominal_gbps);
        Self { rate_gbps, loss_ppm: loss_ppm.unwrap_or(self.loss_ppm), seed: seed.unwrap_or(self.seed) }
    }

    /// Whether it changes nothing (its own rate, no loss).
    pub fn is_none(&self) -> bool {
        self.rate_gbps.is_none() && self.loss_ppm == 0
    }

    /// "100 Gbit/s (of 400), 0.1% loss" style.
    pub fn describe(&self, nominal_gbps: f64) -> String {
        let mut parts = Vec::new();
        if let Some(r) = self.rate_gbps {
            parts.push(format!("{r} Gbit/s (of {nominal_gbps})"));
        }
        if self.loss_ppm > 0 {
            parts.push(format!("{}% loss", self.loss_ppm as f64 / 1e4));
        }
        if parts.is_empty() { "nothing".into() } else { parts.join(", ") }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum FaultError {
    #[error("--loss {0:?}: write it as a percentage, e.g. 0.1%")]
    LossNotPercent(String),
    #[error("--loss {0:?} is not a number of percent")]
    LossNotNumber(String),
    #[error("--loss {0}% is outside 0%..=100%")]
    LossOutOfRange(f64),
    #[error("rate {rate} Gbit/s: a degraded link's rate must be above 0 and at most its own {nominal} Gbit/s")]
    RateOutOfRange { rate: f64, nominal: f64 },
    #[error(
        "rate {rate} Gbit/s at time_scale {time_scale} is below the {MIN_RATE_BPS} bit/s a testbed port sends at: \
         at least {least} Gbit/s"
    )]
    RateBelowTestbedFloor { rate: f64, time_scale: u64, least: f64 },
    #[error("--period {0:?}: expected a duration such as 200ms or 2s, from 10ms to 1h")]
    BadPeriod(String),
    #[error("--count 0: a flap needs at least one down-and-up")]
    ZeroCount,
    #[error("give --rate, --loss or both (or `fabric link restore` to clear a degradation)")]
    NothingToDo,
}

/// Parses a loss such as `0.1%` into frames per million (rounded to the nearest).
pub fn parse_loss(s: &str) -> Result<u32, FaultError> {
    let number = s.trim().strip_suffix('%').ok_or_else(|| FaultError::LossNotPercent(s.into()))?;
    let percent: f64 = number.trim().parse().map_err(|_| FaultError::LossNotNumber(s.into()))?;
    if !(0.0..=100.0).contains(&percent) {
        return Err(FaultError::LossOutOfRange(percent));
    }
    Ok(((percent * 1e4).round() as u32).min(MAX_LOSS_PPM))
}

/// Checks a degraded rate against the link's own: a degradation may only slow a link.
pub fn check_rate(rate_gbps: f64, nominal_gbps: f64) -> Result<f64, FaultError> {
    if rate_gbps.is_finite() && rate_gbps > 0.0 && rate_gbps <= nominal_gbps {
        Ok(rate_gbps)
    } else {
        Err(FaultError::RateOutOfRange { rate: rate_gbps, nominal: nominal_gbps })
    }
}

/// [`check_rate`] for a testbed link of `topology`: the rate scaled by its time scale must
/// still be one a port sends at ([`MIN_RATE_BPS`]), or the link would carry nothing.
pub fn check_testbed_rate(
    rate_gbps: f64,
    nominal_gbps: f64,
    topology: &super::topology::Topology,
) -> Result<f64, FaultError> {
    let rate = check_rate(rate_gbps, nominal_gbps)?;
    if !topology.testbed_sends_at(rate) {
        let (time_scale, least) = (topology.time_scale, topology.least_testbed_rate_gbps());
        return Err(FaultError::RateBelowTestbedFloor { rate, time_scale, least });
    }
    Ok(rate)
}

/// Parses a flap period (`200ms`, `2s`); shorter than 10 ms is refused: each half of a cycle
/// reprograms every switch's routes, which takes longer than that. Longer than an hour is
/// refused too (and would overflow a `Duration` far beyond).
pub fn parse_period(s: &str) -> Result<Duration, FaultError> {
    let bad = || FaultError::BadPeriod(s.into());
    let t = s.trim();
    let (number, unit_ms) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e3)
    } else {
        return Err(bad());
    };
    let ms = number.trim().parse::<f64>().map_err(|_| bad())? * unit_ms;
    // A flap cycles while the command runs: an hour is longer than anyone waits for one.
    if !ms.is_finite() || !(10.0..=3_600_000.0).contains(&ms) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(ms / 1e3))
}

/// What happened to a link or switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    LinkDown,
    LinkUp,
    LinkDegraded,
    LinkRestored,
    SwitchDown,
    SwitchUp,
}

/// One entry of a testbed's fault log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultEvent {
    pub at_unix_ms: u64,
    pub kind: FaultKind,
    /// The link (`node:port`) or switch, as the CLI names it.
    pub target: String,
    /// For a degradation: what it set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

impl FaultEvent {
    pub fn now(kind: FaultKind, target: impl Into<String>, detail: impl Into<String>) -> Self {
        let at_unix_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        FaultEvent { at_unix_ms, kind, target: target.into(), detail: detail.into() }
    }
}

/// The faults a job saw: those logged between its start and end (inclusive).
pub fn during(log: &[FaultEvent], start_unix_ms: u64, end_unix_ms: u64) -> Vec<FaultEvent> {
    log.iter().filter(|f| (start_unix_ms..=end_unix_ms).contains(&f.at_unix_ms)).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_degradation_keeps_what_it_does_not_give() {
        let rate = Degradation::NONE.updated(Some(100.0), None, None, 400.0);
        assert_eq!(rate, Degradation { rate_gbps: Some(100.0), loss_ppm: 0, seed: 1 });
        let both = rate.updated(None, Some(1000), Some(7), 400.0);
        assert_eq!(both, Degradation { rate_gbps: Some(100.0), loss_ppm: 1000, seed: 7 });
        let seed_kept = both.updated(Some(200.0), None, None, 400.0);
        assert_eq!(seed_kept, Degradation { rate_gbps: Some(200.0), loss_ppm: 1000, seed: 7 });
        let own_rate = seed_kept.updated(Some(400.0), None, None, 400.0);
        assert_eq!(own_rate, Degradation { rate_gbps: None, loss_ppm: 1000, seed: 7 });
        assert!(!own_rate.is_none() && own_rate.updated(None, Some(0), None, 400.0).is_none());
    }

    /// Every bad value named in the issue, and its neighbours, against the good ones.
    #[test]
    fn loss_rate_and_period_are_range_checked() {
        assert_eq!(parse_loss("0.1%"), Ok(1_000));
        assert_eq!(parse_loss("100%"), Ok(MAX_LOSS_PPM));
        assert_eq!(parse_loss("0%"), Ok(0));
        assert_eq!(parse_loss("150%"), Err(FaultError::LossOutOfRange(150.0)));
        assert_eq!(parse_loss("-1%"), Err(FaultError::LossOutOfRange(-1.0)));
        assert_eq!(parse_loss("0.1"), Err(FaultError::LossNotPercent("0.1".into())));
        assert_eq!(parse_loss("x%"), Err(FaultError::LossNotNumber("x%".into())));
        assert_eq!(check_rate(100.0, 400.0), Ok(100.0));
        assert_eq!(check_rate(400.0, 400.0), Ok(400.0));
        for bad in [0.0, -5.0, 401.0, f64::NAN] {
            assert!(check_rate(bad, 400.0).is_err(), "{bad}");
        }
        // At the default time scale (4000) a testbed port needs 0.004 Gbit/s to send at all.
        let topo = crate::model::topology::Topology::default_topology();
        assert_eq!(check_testbed_rate(0.004, 400.0, &topo), Ok(0.004));
        let e = check_testbed_rate(0.000001, 400.0, &topo).unwrap_err();
        assert!(e.to_string().contains("time_scale 4000") && e.to_string().contains("at least 0.004 Gbit/s"), "{e}");
        assert!(matches!(check_testbed_rate(500.0, 400.0, &topo), Err(FaultError::RateOutOfRange { .. })));
        assert_eq!(parse_period("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_period("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_period("3600s"), Ok(Duration::from_secs(3600)));
        for bad in ["5ms", "200", "fast", "-1s", "3601s", "1e20s", "inf s"] {
            assert!(parse_period(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_job_sees_the_faults_of_its_lifetime() {
        let at =
            |t| FaultEvent { at_unix_ms: t, kind: FaultKind::LinkDown, target: "a:b".into(), detail: String::new() };
        let log = [at(5), at(10), at(15), at(21)];
        let seen: Vec<u64> = during(&log, 10, 20).iter().map(|f| f.at_unix_ms).collect();
        assert_eq!(seen, [10, 15]);
    }
}
