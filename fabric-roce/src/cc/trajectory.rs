//! A rate over time, bounded in size: what the endpoint records of each QP's pacing rate.

/// A rate sampled every `interval_ns`, at most `max_len` samples: when full, every other sample
/// goes and the interval doubles, so a run of any length keeps an evenly spaced trace. Two
/// trajectories sampled at the same times stay aligned (same timestamps), so they can be summed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateTrajectory {
    interval_ns: u64,
    max_len: usize,
    next_ns: u64,
    samples: Vec<(u64, u64)>,
}

impl RateTrajectory {
    pub fn new(interval_ns: u64, max_len: usize) -> Self {
        assert!(max_len >= 2 && interval_ns > 0);
        RateTrajectory { interval_ns, max_len, next_ns: 0, samples: Vec::new() }
    }

    /// Records `rate_bps` at `now_ns` if a sample is due.
    pub fn sample(&mut self, now_ns: u64, rate_bps: u64) {
        if now_ns < self.next_ns {
            return;
        }
        if self.samples.len() == self.max_len {
            let mut i = 0;
            self.samples.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.interval_ns *= 2;
        }
        self.samples.push((now_ns, rate_bps));
        self.next_ns = now_ns + self.interval_ns;
    }

    /// `(time ns, rate bit/s)`, oldest first.
    pub fn samples(&self) -> &[(u64, u64)] {
        &self.samples
    }

    /// The sum of aligned trajectories (a flow's QPs); samples whose times differ are dropped.
    pub fn sum(all: &[&RateTrajectory]) -> Vec<(u64, u64)> {
        let Some(first) = all.first() else {
            return Vec::new();
        };
        first
            .samples
            .iter()
            .enumerate()
            .filter(|(i, (t, _))| all.iter().all(|r| r.samples.get(*i).is_some_and(|s| s.0 == *t)))
            .map(|(i, (t, _))| (*t, all.iter().map(|r| r.samples[i].1).sum()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trajectories_are_bounded_evenly_spaced_and_summable() {
        let mut a = RateTrajectory::new(10, 4);
        let mut b = RateTrajectory::new(10, 4);
        for t in 0..100 {
            a.sample(t, 5);
            b.sample(t, t);
        }
        assert!(a.samples().len() <= 4);
        let times: Vec<u64> = a.samples().iter().map(|s| s.0).collect();
        assert_eq!(times, [0, 40, 80]);
        assert_eq!(RateTrajectory::sum(&[&a, &b]), [(0, 5), (40, 45), (80, 85)]);
    }
}
