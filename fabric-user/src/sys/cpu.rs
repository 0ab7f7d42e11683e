//! How busy the machine's CPUs were: the host-side measure that tells a CPU-bound run (the
//! software endpoints could not keep up) from one whose pace the modelled fabric set.

/// Cumulative CPU time of all CPUs (`/proc/stat`'s first line), in clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub busy: u64,
    pub total: u64,
}

impl CpuTimes {
    pub fn read() -> std::io::Result<Self> {
        Ok(Self::parse(&std::fs::read_to_string("/proc/stat")?).unwrap_or_default())
    }

    /// Parses `cpu  user nice system idle iowait irq softirq steal ...`; idle and iowait are the
    /// idle time, the rest busy (guest time is already inside user).
    pub fn parse(stat: &str) -> Option<Self> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line.split_whitespace().skip(1).take(8).map(|x| x.parse().ok()).collect::<Option<_>>()?;
        if v.len() < 8 {
            return None;
        }
        let idle = v[3] + v[4];
        let total: u64 = v.iter().sum();
        Some(CpuTimes { busy: total - idle, total })
    }

    /// The busy share of the CPU time between `earlier` and `self` (0..=1; `None` if no tick passed).
    pub fn busy_since(&self, earlier: &CpuTimes) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let busy = self.busy.checked_sub(earlier.busy)?;
        (total > 0).then(|| busy as f64 / total as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_share_counts_everything_but_idle_and_iowait() {
        let a = CpuTimes::parse("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8\n").unwrap();
        assert_eq!(a, CpuTimes { busy: 150, total: 1000 });
        let b = CpuTimes::parse("cpu  400 0 150 1000 50 10 40 0 0 0\n").unwrap();
        // 400 busy ticks (300 user, 100 system... + 50 irq/softirq) of 650.
        assert_eq!(b.busy_since(&a), Some(450.0 / 650.0));
        assert_eq!(a.busy_since(&a), None);
        assert_eq!(CpuTimes::parse("intr 1 2 3\n"), None);
    }
}
