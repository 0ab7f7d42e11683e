//! Several jobs on one fabric (`fabric run --jobs`): every byte of every job delivered, and the
//! jobs' bytes per uplink (the forwarding model's attribution) adding up to what the switches
//! counted; a host carrying ranks of two jobs; TE placing the running jobs' flows together; bad
//! jobs files refused before anything is sent. Needs root.
mod common;

use fabric_common::config::HashMode;
use fabric_user::{
    run::job::JobRecord,
    run::jobs::{JobsFile, runner},
    telemetry::stats::UplinkBytes,
};

/// Jobs a and b over the four racks, and c on hosts of both (z0r0h0 runs ranks of a and c).
fn three_jobs(hash: &str) -> JobsFile {
    let text = format!(
        r#"
[run]
qps = 4
hash = "{hash}"
[[job]]
name = "a"
workload = "allreduce"
ranks = 4
message = "256Ki"
placement = "fragmented"
[[job]]
name = "b"
workload = "allreduce"
ranks = 4
message = "256Ki"
placement = "hosts:z0r0h1,z0r1h1,z0r2h1,z0r3h1"
iterations = 2
[[job]]
name = "c"
workload = "permutation"
ranks = 2
message = "128Ki"
placement = "hosts:z0r0h0,z0r3h1"
start_ms = 1
"#
    );
    toml::from_str(&text).unwrap()
}

/// Frame bytes one retransmitted packet can add (the largest frame at this MTU).
const LARGEST_FRAME: u64 = 1024 + 100;

fn check_run(prefix: &str, hash: HashMode) -> runner::JobsSummary {
    let state = fabric_user::state::State::load(prefix).unwrap();
    let plan = three_jobs(hash.as_str()).resolve(&state.plan, HashMode::Eecmp).unwrap_or_else(|e| panic!("{e:#}"));
    let out = runner::run_jobs(&state, &plan, true).unwrap_or_else(|e| panic!("{e:#}"));
    let s = &out.summary;
    assert_eq!(s.jobs.len(), 3);
    for (j, r) in s.jobs.iter().zip(&out.results) {
        assert!(j.bytes_needed > 0);
        assert_eq!(j.bytes_delivered, j.bytes_needed, "job {} lost bytes", j.name);
        assert_eq!(r.bytes_delivered, r.bytes_needed);
        assert_eq!(r.hash, hash.as_str());
    }
    assert_eq!(s.jobs[1].completion_ns.len(), 2, "b ran two iterations");
    // Every job crossed an uplink (each has ranks in different racks), with bytes of its own.
    for j in &s.jobs {
        assert!(j.uplink_bytes.values().sum::<u64>() > 0, "job {} has no uplink bytes", j.name);
    }
    // The jobs' bytes add up to the switches' counters, link by link: exactly when nothing was
    // retransmitted, and within the retransmitted frames otherwise.
    let slack = s.retransmitted_packets * LARGEST_FRAME;
    let links: std::collections::BTreeSet<&String> =
        s.uplinks_counted.keys().chain(s.uplinks_predicted.keys()).collect();
    for l in links {
        let counted = s.uplinks_counted.get(l).copied().unwrap_or(0);
        let jobs: u64 = s.jobs.iter().map(|j| j.uplink_bytes.get(l).copied().unwrap_or(0)).sum();
        assert_eq!(jobs, s.uplinks_predicted.get(l).copied().unwrap_or(0), "{l}");
        assert!(jobs <= counted && counted <= jobs + slack, "{l}: jobs {jobs} B, counted {counted} B, slack {slack}");
    }
    // Records: one per job, named, with its uplink bytes; the summary and report find them.
    for j in &s.jobs {
        let rec = JobRecord::load(&j.job_id).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(rec.name.as_deref(), Some(j.name.as_str()));
        assert_eq!(rec.uplink_bytes, j.uplink_bytes);
    }
    s.save().unwrap();
    runner::report(&s.run_id).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(runner::JobsSummary::load(&s.run_id).is_some());
    s.clone()
}

fn remove_records(s: &runner::JobsSummary) {
    for j in &s.jobs {
        let _ = std::fs::remove_file(JobRecord::path(&j.job_id));
    }
    let _ = std::fs::remove_file(runner::JobsSummary::path(&s.run_id));
}

#[test]
fn concurrent_jobs_deliver_everything_and_their_uplink_bytes_add_up_to_the_counters() {
    let (_guard, state) = common::up(None, &common::unique_prefix('m', 0));
    let prefix = state.plan.topology.prefix.clone();

    // Bad files are refused before anything is sent: the counters do not move.
    let before = UplinkBytes::read_uplinks(&state).unwrap();
    for (text, needle) in [
        (
            "[[job]]\nname = \"a\"\nworkload = \"allreduce\"\nranks = 6\n[[job]]\nname = \"b\"\nworkload = \"allreduce\"\nranks = 4\nplacement = \"place\"\n",
            "free hosts",
        ),
        ("[[job]]\nname = \"a\"\nworkload = \"allreduce\"\nranks = 2\nplacement = \"hosts:z0r0h0,z7r0h0\"\n", "z7r0h0"),
        (
            "[[job]]\nname = \"a\"\nworkload = \"allreduce\"\nranks = 2\n[[job]]\nname = \"a\"\nworkload = \"allreduce\"\nranks = 2\n",
            "two jobs",
        ),
        ("[[job]]\nname = \"a\"\nworkload = \"allreduce\"\nranks = 2\nwhen = 3\n", "when"),
    ] {
        let e = toml::from_str::<JobsFile>(text)
            .map_err(anyhow::Error::from)
            .and_then(|f| f.resolve(&state.plan, HashMode::Eecmp))
            .expect_err(text);
        assert!(format!("{e:#}").contains(needle), "{text}: {e:#}");
    }
    assert_eq!(UplinkBytes::read_uplinks(&state).unwrap(), before, "a refused file sent nothing");

    let s = check_run(&prefix, HashMode::Eecmp);
    assert_eq!(s.te_placements, 0);
    remove_records(&s);

    // TE: the controller places the running jobs' flows together, again whenever the set of
    // running jobs changes (a ends after its one iteration, b runs on), and its placement is the
    // one the forwarding model predicts with: the counters still match job by job.
    let s = check_run(&prefix, HashMode::Te);
    assert!(s.te_placements >= 2, "placed at the start and when a job ended: {}", s.te_placements);
    remove_records(&s);

    // A straggler and a slow NIC: recorded in the job's record; the NIC's link is degraded while
    // the job runs (in its faults, with times) and restored after it.
    // With them, a trace job (Chakra, 8 ranks) on hosts the other two use too.
    let mut f = three_jobs("eecmp");
    f.job.truncate(2);
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/../testbed/traces/dp-step");
    let extra: JobsFile = toml::from_str(&format!("[[job]]\nname = \"t\"\ntrace = \"{trace}\"\n")).unwrap();
    f.job.extend(extra.job);
    f.job[1].straggler = Some(fabric_user::run::jobs::Straggler { host: "z0r1h1".into(), factor: 2.0 });
    f.job[1].slow_nic = Some(fabric_user::run::jobs::SlowNic { host: "z0r2h1".into(), rate_gbps: 100.0 });
    let plan = f.resolve(&state.plan, HashMode::Eecmp).unwrap_or_else(|e| panic!("{e:#}"));
    let out = runner::run_jobs(&state, &plan, true).unwrap_or_else(|e| panic!("{e:#}"));
    for j in &out.summary.jobs {
        assert_eq!(j.bytes_delivered, j.bytes_needed, "job {}", j.name);
    }
    assert_eq!(out.summary.jobs[2].bytes_needed, 14 * (2 * 32768 + 2 * 16384), "the trace's four buckets");
    assert!(JobRecord::load(&out.summary.jobs[2].job_id).unwrap().collective.starts_with("trace "));
    let b = JobRecord::load(&out.summary.jobs[1].job_id).unwrap();
    assert_eq!(b.straggler.as_ref().map(|s| (s.host.as_str(), s.factor)), Some(("z0r1h1", 2.0)));
    assert!(b.diagnosis.iter().any(|d| d.starts_with("straggler z0r1h1 computes 2.0x slower")), "{:?}", b.diagnosis);
    let kinds: Vec<String> = b.faults.iter().map(|f| format!("{} {:?}", f.target, f.kind)).collect();
    assert!(
        kinds.iter().any(|k| k.contains("z0r2h1") && k.contains("LinkDegraded"))
            && kinds.iter().any(|k| k.contains("z0r2h1") && k.contains("LinkRestored")),
        "{kinds:?}"
    );
    assert!(fabric_user::state::State::load(&prefix).unwrap().degraded.is_empty(), "the NIC's link was restored");
    remove_records(&out.summary);
}

/// Two jobs of 2 and 8 QPs per connection (the run's default is 4).
fn jobs_of_their_own_qps() -> JobsFile {
    toml::from_str(
        r#"
[run]
qps = 4
hash = "eecmp"
[[job]]
name = "two"
workload = "allreduce"
ranks = 4
message = "256Ki"
placement = "hosts:z0r0h0,z0r1h0,z0r2h0,z0r3h0"
qps = 2
[[job]]
name = "eight"
workload = "allreduce"
ranks = 4
message = "256Ki"
placement = "hosts:z0r0h1,z0r1h1,z0r2h1,z0r3h1"
qps = 8
"#,
    )
    .unwrap()
}

#[test]
fn each_job_runs_its_own_qps_and_delivers_every_byte() {
    let (_guard, state) = common::up(None, &common::unique_prefix('q', 0));
    let plan = jobs_of_their_own_qps().resolve(&state.plan, HashMode::Eecmp).unwrap_or_else(|e| panic!("{e:#}"));
    let out = runner::run_jobs(&state, &plan, true).unwrap_or_else(|e| panic!("{e:#}"));
    for ((j, r), want) in out.summary.jobs.iter().zip(&out.results).zip([2u32, 8]) {
        assert!(j.bytes_needed > 0);
        assert_eq!(j.bytes_delivered, j.bytes_needed, "job {} lost bytes", j.name);
        assert_eq!(r.options.endpoint.qps, want, "job {}", j.name);
        assert!(!r.flows.is_empty());
        for f in r.flows.iter().filter(|f| f.bytes >= u64::from(want)) {
            // Measured at the receiver: the QPs that carried this transfer's bytes.
            assert_eq!(f.qps_receiving, want, "job {}: {} -> {}", j.name, f.src, f.dst);
            assert_eq!(f.sport_count(), want as usize, "job {}: {} -> {} source ports", j.name, f.src, f.dst);
        }
    }
    remove_records(&out.summary);
}
