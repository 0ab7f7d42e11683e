//! Runs the jobs of a [`JobsPlan`] on the testbed together, in the plan's mode: independent
//! ([`super::independent`], each job on its own engine) or in rounds ([`super::rounds`], steps
//! aligned); and prints a run's summary.
use anyhow::Result;

pub use super::shared::{JOBS_SCHEMA, JobSummary, JobsOutcome, JobsSummary, predict_round};
use super::{JobsMode, JobsPlan};
use crate::{run::job::JobRecord, state::State};

/// Runs every job of `jp` on the testbed (in its mode); each job's result and record, and the
/// run's summary.
pub fn run_jobs(state: &State, jp: &JobsPlan, quiet: bool) -> Result<JobsOutcome> {
    crate::sys::netns::require_capabilities()?;
    match jp.mode {
        JobsMode::Rounds => super::rounds::run_rounds(state, jp, quiet),
        JobsMode::Independent => super::independent::run_independent(state, jp, quiet),
    }
}

/// The run's table: each job's completion and what it shared.
pub fn print(s: &JobsSummary) {
    println!(
        "run {} on {}: {} job{}, hash {}, mode {}, {} steps run",
        s.run_id,
        s.testbed,
        s.jobs.len(),
        if s.jobs.len() == 1 { "" } else { "s" },
        s.hash,
        s.mode,
        s.rounds
    );
    println!("{:<12} {:>8} {:>15} {:>14} {:>10}  job id", "job", "start ms", "ran ms", "completion ms", "delivered");
    for j in &s.jobs {
        let c: Vec<String> = j.completion_ns.iter().map(|c| format!("{:.1}", *c as f64 / 1e6)).collect();
        let ok = if j.bytes_delivered == j.bytes_needed { "all" } else { "SHORT" };
        let ran = format!("{}-{}", j.started_ms, j.ended_ms);
        println!("{:<12} {:>8} {:>15} {:>14} {:>10}  {}", j.name, j.start_ms, ran, c.join(","), ok, j.job_id);
        for st in &j.shared_steps {
            println!("  - {}", st.sentence(&j.name));
        }
    }
}

/// `fabric report ID`: a run of several jobs (every job's record), or one job.
pub fn report(id: &str) -> Result<()> {
    match JobsSummary::load(id) {
        Some(s) => {
            print(&s);
            for j in &s.jobs {
                println!();
                crate::run::job::print(&JobRecord::load(&j.job_id)?);
            }
        }
        None => crate::run::job::print(&JobRecord::load(id)?),
    }
    Ok(())
}
