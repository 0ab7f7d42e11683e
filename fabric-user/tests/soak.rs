//! A bounded soak: the default testbed carries AllReduce and incast jobs back to back for a fixed
//! time while spine links fail and recover, the switch agent is killed (SIGKILL) and restarted,
//! and the counters are read concurrently as `fabric stats` does. At the end every byte of every
//! job was delivered, nothing was dropped for want of a route, what the congestion model did is
//! in named counters, and on every switch the port counters add up. Needs root.
mod common;

use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::{Duration, Instant},
};

use fabric_common::{config::HashMode, counters::DropReason};
use fabric_user::{
    agent,
    endpoint::{CcMode, EndpointOptions, SportPolicy},
    model::{placement::Placement, workload::Collective},
    run::{RunOptions, job::JobRecord, run},
    state::State,
    telemetry::stats,
    testbed,
};

/// How long the jobs keep coming at least (each takes a few seconds on this machine).
const SOAK: Duration = Duration::from_secs(20);
/// How long they may keep coming on a slower machine, until the soak has had the jobs, faults,
/// restarts and reads it asks for.
const SOAK_AT_MOST: Duration = Duration::from_secs(90);

fn job(collective: Collective, n: u64) -> RunOptions {
    let (ranks, placement) = match collective {
        Collective::Incast => (Some(4), Placement::Fragmented),
        _ => (None, Placement::Fragmented),
    };
    RunOptions {
        collective,
        ranks,
        message_bytes: 1 << 20,
        iterations: 1,
        placement,
        hash: Some(HashMode::Eecmp),
        hash_seed: Some(n as u32),
        seed: n,
        endpoint: EndpointOptions { qps: 4, sport: SportPolicy::PerQp, cc: CcMode::None, ..Default::default() },
    }
}

#[test]
fn jobs_survive_link_faults_an_agent_restart_and_concurrent_stats() {
    let prefix = common::unique_prefix('k', 0);
    let (_guard, state) = common::up(None, &prefix);
    let hosts = common::assert_all_reachable(&state);
    let stop = AtomicBool::new(false);
    let (faults, restarts, reads) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let mut jobs = Vec::new();
    std::thread::scope(|s| {
        // Link faults, one spine link at a time.
        s.spawn(|| {
            let links = ["z0r0:z0c1", "z0r2:z0c3", "z0r1:z0c0", "z0r3:z0c2"];
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let l = links[n % links.len()];
                testbed::set_link(&prefix, l, false).unwrap_or_else(|e| panic!("{l} down: {e:#}"));
                std::thread::sleep(Duration::from_millis(300));
                testbed::set_link(&prefix, l, true).unwrap_or_else(|e| panic!("{l} up: {e:#}"));
                faults.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(300));
                n += 1;
            }
        });
        // The agent dies without cleaning up, and is started again.
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(4));
                let pid = agent::running(&prefix).expect("the agent runs");
                // SAFETY: a signal to the agent process this testbed started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                while agent::running(&prefix).is_some() {
                    // SAFETY: non-blocking reap of our own child, if it is one.
                    unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
                    std::thread::sleep(Duration::from_millis(10));
                }
                agent::spawn(&prefix).unwrap_or_else(|e| panic!("restarting the agent: {e:#}"));
                restarts.fetch_add(1, Ordering::Relaxed);
            }
        });
        // `fabric stats`, concurrently.
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let state = State::load(&prefix).expect("state");
                stats::collect(&state).unwrap_or_else(|e| panic!("stats during the soak: {e:#}"));
                reads.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        // The threads above stop even when a job below panics: a failed job fails the test
        // instead of leaving it waiting for them.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        let start = Instant::now();
        let mut n = 0;
        let enough = |jobs: usize| {
            jobs >= 4
                && faults.load(Ordering::Relaxed) >= 4
                && restarts.load(Ordering::Relaxed) >= 2
                && reads.load(Ordering::Relaxed) >= 20
        };
        while start.elapsed() < SOAK || (!enough(jobs.len()) && start.elapsed() < SOAK_AT_MOST) {
            let collective = if n % 2 == 0 { Collective::Allreduce } else { Collective::Incast };
            let state = State::load(&prefix).unwrap();
            let r =
                run(&state, &job(collective, n), true).unwrap_or_else(|e| panic!("job {n} ({collective:?}): {e:#}"));
            jobs.push((collective, r));
            n += 1;
        }
    });
    let (faults, restarts, reads) = (faults.into_inner(), restarts.into_inner(), reads.into_inner());
    assert!(
        jobs.len() >= 4 && faults >= 4 && restarts >= 2 && reads >= 20,
        "too short a soak in {SOAK_AT_MOST:?}: {} jobs, {faults} faults, {restarts} restarts, {reads} reads",
        jobs.len()
    );

    let mut faults_seen = 0;
    for (i, (c, r)) in jobs.iter().enumerate() {
        assert_eq!(r.bytes_delivered, r.bytes_needed, "job {i} ({c:?}) lost bytes");
        // Its record lists the link changes the fault thread made while it ran: one every
        // 300 ms and the time a change takes, so a job of two seconds or more saw some.
        let id = r.job_id.as_ref().expect("a run on our endpoints is a job");
        let rec = JobRecord::load(id).unwrap();
        let (start, end) = (rec.started_unix_ms, rec.ended_unix_ms);
        assert!(rec.faults.iter().all(|f| (start..=end).contains(&f.at_unix_ms)), "job {i}: {:?}", rec.faults);
        if end - start >= 2000 {
            assert!(!rec.faults.is_empty(), "job {i} ran {} ms and its record lists no fault", end - start);
        }
        faults_seen += rec.faults.len();
        let _ = std::fs::remove_file(JobRecord::path(id));
    }
    assert!(faults_seen > 0, "no job record saw a fault");
    let state = State::load(&prefix).unwrap();
    assert!(state.down_links.is_empty());
    assert!(agent::running(&prefix).is_some(), "the restarted agent still runs");
    let mut packets = 0u64;
    for sw in state.plan.switches() {
        let name = &state.plan.nodes[sw].name;
        let mut dp = state.dataplane(sw).unwrap();
        let (mut rx, mut out) = (0u64, 0u64);
        for port in 0..state.plan.nodes[sw].ports.len() as u32 {
            let c = dp.port_counters(port).unwrap();
            for reason in [DropReason::NoRoute, DropReason::EmptyGroup, DropReason::RedirectFailed] {
                assert_eq!(c.drops[reason as usize], 0, "{name} port {port}: dropped as {}", reason.as_str());
            }
            rx += c.rx_packets;
            out += c.tx_packets + c.drops.iter().sum::<u64>() + c.passes.iter().sum::<u64>() + c.rx_pfc_frames;
        }
        assert_eq!(rx, out, "{name}: every received frame is redirected, dropped, passed or consumed");
        packets += rx;
    }
    println!(
        "soak: {hosts} host pairs reached, {} jobs, {faults} link faults, {restarts} agent restarts, \
         {reads} concurrent stats reads, {packets} switch packets checked",
        jobs.len()
    );
}
