//! How busy the machine's CPUs were: the host-side measure that tells a CPU-bound run (the
//! software endpoints could not keep up) from one whose pace the modelled fabric set. And
//! pinning a thread to one CPU.

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

/// Asks the kernel to end the calling thread's timed sleeps on time. A thread's default timer
/// slack lets each sleep end up to 50 µs late (so that wakes can be batched); a paced endpoint
/// at the testbed's time scale has about 90 µs per packet, so with the default more than half
/// of its sleeps woke over a packet late. With 1 ns slack a single flow's late wakes fell to
/// 1-2% (`cargo test -p fabric-user --test twin -- --nocapture`).
pub fn precise_timers() -> std::io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and changes only the calling thread's slack.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// The calling thread's scheduler accounting (`/proc/thread-self/schedstat`): the time it ran,
/// and the time it was runnable but waited for a CPU, ns. The wait is what a CPU-bound testbed
/// costs a host thread directly, whether it woke on a timer or on a packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSched {
    pub run_ns: u64,
    pub wait_ns: u64,
}

impl ThreadSched {
    pub fn read() -> std::io::Result<Self> {
        let text = std::fs::read_to_string("/proc/thread-self/schedstat")?;
        Self::parse(&text).ok_or_else(|| std::io::Error::other(format!("unexpected schedstat {text:?}")))
    }

    /// Another task's, by pid (`/proc/PID/schedstat`).
    pub fn of_task(pid: u32) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))?;
        Self::parse(&text).ok_or_else(|| std::io::Error::other(format!("unexpected schedstat {text:?}")))
    }

    /// Parses `run_ns wait_ns timeslices`.
    pub fn parse(text: &str) -> Option<Self> {
        let mut v = text.split_whitespace().map(|x| x.parse::<u64>().ok());
        Some(ThreadSched { run_ns: v.next()??, wait_ns: v.next()?? })
    }

    /// What accrued between `earlier` and `self`.
    pub fn since(&self, earlier: &ThreadSched) -> ThreadSched {
        ThreadSched {
            run_ns: self.run_ns.saturating_sub(earlier.run_ns),
            wait_ns: self.wait_ns.saturating_sub(earlier.wait_ns),
        }
    }
}

/// Pins the calling thread to `cpu` (benchmarks, and tests whose programs keep per-CPU state).
pub fn pin_thread(cpu: usize) -> anyhow::Result<()> {
    use anyhow::Context as _;
    anyhow::ensure!(cpu < libc::CPU_SETSIZE as usize, "CPU {cpu} out of range");
    // SAFETY: cpu_set_t is plain data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: an index inside the set, checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; valid set of the stated size.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("pinning a thread to CPU {cpu}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_parses_and_subtracts() {
        let a = ThreadSched::parse("524608 0 1\n").unwrap();
        let b = ThreadSched::parse("1524608 300 7").unwrap();
        assert_eq!(a, ThreadSched { run_ns: 524_608, wait_ns: 0 });
        assert_eq!(b.since(&a), ThreadSched { run_ns: 1_000_000, wait_ns: 300 });
        assert_eq!(ThreadSched::parse("12"), None);
        assert_eq!(ThreadSched::parse("x 1 2"), None);
    }

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
