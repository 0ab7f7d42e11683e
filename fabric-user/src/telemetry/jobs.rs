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
}

/// Every job of the run in progress, and the process running it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct JobsGauges {
    pub pid: u32,
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

    /// The last jobs run's gauges (kept after the run, so the final values can be scraped).
    pub fn read(prefix: &str) -> Vec<JobGauge> {
        std::fs::read(path(prefix))
            .ok()
            .and_then(|b| serde_json::from_slice::<JobsGauges>(&b).ok())
            .map(|g| g.jobs)
            .unwrap_or_default()
    }
}
