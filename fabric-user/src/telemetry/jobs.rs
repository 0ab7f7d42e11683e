//! The jobs running on a testbed, as `fabric run --jobs` leaves them in the testbed's state
//! directory as its jobs progress (`jobs.json`): what the Prometheus exporter labels by job.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One job's progress and its own bytes so far.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct JobGauge {
    pub job: String,
    pub job_id: String,
    /// Steps done over all iterations, and the job's total.
    pub steps_done: u64,
    pub steps: u64,
    pub done: bool,
    /// Completion of each finished iteration, wall ns.
    pub completion_ns: Vec<u64>,
    /// Bytes the job's receivers accepted.
    pub bytes_delivered: u64,
    /// The job's frame bytes per RTSW uplink (`rtsw->ctsw`), from the forwarding model.
    pub uplink_bytes: BTreeMap<String, u64>,
    /// Not done, and the process that ran it has ended (killed, or failed before writing its
    /// last gauges): the job will make no more progress. Worked out when read, never written.
    #[serde(default, skip_serializing)]
    pub stopped: bool,
}

/// Every job of the run in progress, and the process running it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct JobsGauges {
    pub pid: u32,
    /// The process's start time (`sys::process::start_time`), so that another process that
    /// took its pid is not taken for it; 0 in a file of an older binary (the pid alone).
    #[serde(default)]
    pub started: u64,
    pub jobs: Vec<JobGauge>,
}

fn path(prefix: &str) -> std::path::PathBuf {
    crate::state::state_dir(prefix).join("jobs.json")
}

impl JobsGauges {
    /// Best effort: a scrape that misses one update loses nothing that matters to the run. Whole
    /// or not at all: a reader between a truncation and a write would find no jobs at all.
    pub fn write(&self, prefix: &str) {
        if let Ok(bytes) = serde_json::to_vec(self) {
            let _ = crate::sys::file::write_whole(&path(prefix), &bytes);
        }
    }

    /// The gauges of this process, for its jobs.
    pub fn of_this_process(jobs: Vec<JobGauge>) -> Self {
        let started = crate::state::Owner::this_process().map_or(0, |o| o.started);
        JobsGauges { pid: std::process::id(), started, jobs }
    }

    /// The last jobs run's gauges (kept after the run, so the final values can be scraped),
    /// its unfinished jobs marked `stopped` if its process has ended.
    pub fn read(prefix: &str) -> Vec<JobGauge> {
        Self::read_from(&path(prefix))
    }

    fn read_from(path: &std::path::Path) -> Vec<JobGauge> {
        let Some(g) = std::fs::read(path).ok().and_then(|b| serde_json::from_slice::<JobsGauges>(&b).ok()) else {
            return Vec::new();
        };
        let running = crate::state::Owner { pid: g.pid, started: g.started }.is_running();
        g.jobs.into_iter().map(|j| JobGauge { stopped: !j.done && !running, ..j }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Jobs of a process that has ended and that were not done are stopped; a done job stays
    /// done, and the jobs of a process still running are not stopped.
    #[test]
    fn unfinished_jobs_of_an_ended_run_are_stopped() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("jobs.json");
        let job = |name: &str, done| JobGauge { job: name.into(), done, steps: 4, steps_done: 2, ..Default::default() };
        let live = JobsGauges::of_this_process(vec![job("a", false), job("b", true)]);
        std::fs::write(&path, serde_json::to_vec(&live).unwrap()).unwrap();
        let read = JobsGauges::read_from(&path);
        assert_eq!(read.iter().map(|j| j.stopped).collect::<Vec<_>>(), [false, false]);
        // The same run, its process gone (a start time no process of this pid has).
        let ended = JobsGauges { started: live.started + 1, ..live.clone() };
        std::fs::write(&path, serde_json::to_vec(&ended).unwrap()).unwrap();
        let read = JobsGauges::read_from(&path);
        assert_eq!(read.iter().map(|j| (j.done, j.stopped)).collect::<Vec<_>>(), [(false, true), (true, false)]);
        assert!(!String::from_utf8(serde_json::to_vec(&read[0]).unwrap()).unwrap().contains("stopped"));
    }
}
