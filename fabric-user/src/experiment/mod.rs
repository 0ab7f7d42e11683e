//! `fabric experiment NAME`: scenarios that reproduce the published results in kind. Each brings
//! up its own testbed (a unique prefix, torn down whatever happens), runs its cases over several
//! seeds with [`crate::run::run`], and writes `results/NAME/` with `report.md`, charts (SVG and
//! PNG) and `results.json`. A report states the paper's claim, the per-seed values and means,
//! and whether the measured direction matches, computed from the numbers.
//!
//! The default is the CI variant (small messages, 2 seeds); `--full` uses bigger messages and
//! more seeds.
pub mod case;
pub mod cc_at_400g;
pub mod chart;
pub mod cli;
pub mod cross_zone;
pub mod ecmp_entropy;
pub mod gray_failure;
pub mod harness;
pub mod heatmap;
pub mod incast;
pub mod link_failure;
pub mod load_balancing;
pub mod multi_tenant;
pub mod path_pinning;
pub mod pfc_storm;
pub mod report;
pub mod twin;
pub mod verdict;

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

pub use self::{
    harness::{
        Better, Calibration, Case, Control, Ctx, DepthSnapshot, ExperimentReport, Metric, Options, Outcome, SCHEMA,
        Scenario, Table, base_options, completion_ms, mean, modelled_us, shipped_topology,
    },
    verdict::{Decision, Kind, Verdict},
};

/// Every scenario, in the order `all` runs them.
pub const ALL: &[Scenario] = &[
    ecmp_entropy::SCENARIO,
    path_pinning::SCENARIO,
    link_failure::SCENARIO,
    incast::SCENARIO,
    pfc_storm::SCENARIO,
    cc_at_400g::SCENARIO,
    cross_zone::SCENARIO,
    gray_failure::SCENARIO,
    load_balancing::SCENARIO,
    multi_tenant::SCENARIO,
];

pub fn find(name: &str) -> Result<&'static Scenario> {
    match ALL.iter().find(|s| s.name == name) {
        Some(s) => Ok(s),
        None => {
            let names: Vec<&str> = ALL.iter().map(|s| s.name).collect();
            bail!("no experiment {name:?}; there are: {}", names.join(", "))
        }
    }
}

/// Runs one scenario and writes its results under `opts.out/NAME/`.
pub fn run(name: &str, opts: &Options) -> Result<(ExperimentReport, PathBuf)> {
    let scenario = find(name)?;
    // cc-at-400g runs on the twin either way.
    if opts.twin.is_none() && name != cc_at_400g::SCENARIO.name {
        crate::sys::netns::require_capabilities()?;
    } else if !TWIN_SCENARIOS.contains(&name) {
        bail!("{name}: no packet-model variant yet (--model packet runs {})", TWIN_SCENARIOS.join(", "));
    }
    let ctx = Ctx::new(opts);
    let start = Instant::now();
    let mut outcome = (scenario.run)(&ctx).with_context(|| format!("experiment {name}"))?;
    outcome.notes.extend(ctx.repeated.borrow().iter().cloned());
    // The twin's results go beside the testbed's, not over them.
    let dir = match &opts.twin {
        Some(m) => {
            outcome.setup.insert(0, format!("Run on the {}.", m.describe()));
            opts.out.join(format!("{name}-packet"))
        }
        None => opts.out.join(name),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut report = ExperimentReport {
        schema: SCHEMA,
        name: name.into(),
        summary: scenario.summary.into(),
        paper: scenario.paper.into(),
        variant: ctx.variant().into(),
        seeds: ctx.seeds.clone(),
        control: ctx.control.map(|c| c.describe()),
        wall_seconds: start.elapsed().as_secs_f64(),
        outcome,
        files: Vec::new(),
        rerun: opts.rerun(name),
        modelled_time: opts.twin.is_some() || name == cc_at_400g::SCENARIO.name,
    };
    report.files = chart::write_all(&report, &dir)?;
    let heatmap = heatmap::write(&report, &dir)?;
    report.files.extend(heatmap);
    report::write(&mut report, &dir)?;
    Ok((report, dir))
}

/// The scenarios with a packet-model (twin) variant.
pub const TWIN_SCENARIOS: [&str; 10] = [
    "ecmp-entropy",
    "path-pinning",
    "incast",
    "pfc-storm",
    "cc-at-400g",
    "load-balancing",
    "gray-failure",
    "link-failure",
    "cross-zone",
    "multi-tenant",
];

/// The verdict table in plain text (for the terminal).
pub fn print_summary(r: &ExperimentReport, dir: &Path) {
    println!("experiment {} ({} variant, seeds {:?}, {:.0} s)", r.name, r.variant, r.seeds, r.wall_seconds);
    if let Some(c) = &r.control {
        println!("NEGATIVE CONTROL: {c}");
    }
    print!("{}", report::metrics_table_text(r));
    for v in &r.outcome.verdicts {
        println!(
            "  [{}] {} ({})\n      measured: {}\n      evidence: {}",
            v.direction.describe(),
            v.claim,
            v.key,
            v.measured,
            v.evidence()
        );
    }
    println!("report: {}", dir.join("report.md").display());
}
