//! `cargo xtask mutants [--crate NAME] [--file GLOB]...`: mutation testing (cargo-mutants) of the
//! pure core, fabric-common then fabric-roce, with one summary line per crate.
//!
//! Each crate is mutated with `--package CRATE` and tested with its own host tests only (the
//! package's `cargo test`, `test_workspace = false` in .cargo/mutants.toml): no root, no
//! namespaces, no eBPF toolchain; the crate's tests need none of them, and fabric-user's, which
//! do, never run. cargo-mutants writes its report (caught.txt, missed.txt, mutants.json, the
//! logs) under results/mutants/CRATE/mutants.out/. docs/mutants.md has the scores and what the
//! surviving mutants mean.
use std::{path::Path, process::Command, time::Instant};

use anyhow::{Context as _, Result, bail};

use crate::util::workspace_root;

/// The crates mutated, in the order they run when no `--crate` is given.
pub const CRATES: &[&str] = &["fabric-common", "fabric-roce"];

/// What `cargo xtask mutants` was asked for.
pub struct Options<'a> {
    /// One of [`CRATES`], or all of them.
    pub krate: Option<&'a str>,
    /// cargo-mutants `--file` globs (a glob with a slash matches the path from the workspace root).
    pub files: &'a [String],
    /// Mutants built and tested at once (each in its own copy of the tree).
    pub jobs: u32,
    /// Seconds one mutant's tests may run before it counts as a timeout.
    pub timeout: u64,
    /// cargo-mutants `--iterate`: test only the mutants the previous run under
    /// results/mutants/CRATE/ did not catch (after adding tests, far quicker than a full run).
    pub iterate: bool,
}

/// The outcome counts of one crate's run, read from cargo-mutants' per-outcome lists.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub caught: usize,
    pub missed: usize,
    pub unviable: usize,
    pub timeout: usize,
    /// With `--iterate`: the mutants earlier runs caught or found unviable, not tested again.
    pub previously_caught: usize,
}

impl Summary {
    /// Reads `DIR/mutants.out/{caught,missed,unviable,timeout}.txt` (one mutant a line); a list
    /// that is absent (no mutant was found) counts zero.
    pub fn read(output: &Path) -> Result<Summary> {
        let count = |name: &str| -> Result<usize> {
            let path = output.join("mutants.out").join(name);
            match std::fs::read_to_string(&path) {
                Ok(text) => Ok(text.lines().filter(|l| !l.trim().is_empty()).count()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
                Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
            }
        };
        Ok(Summary {
            caught: count("caught.txt")?,
            missed: count("missed.txt")?,
            unviable: count("unviable.txt")?,
            timeout: count("timeout.txt")?,
            previously_caught: count("previously_caught.txt")?,
        })
    }

    /// caught / (caught + missed): the share of the mutants that build and finish whose change
    /// some test notices. Unviable mutants say nothing about the tests, and a timeout is neither
    /// (usually an endless loop, which a real test run would also notice, but slowly).
    pub fn score(&self) -> Option<f64> {
        let judged = self.caught + self.missed;
        (judged > 0).then(|| self.caught as f64 / judged as f64)
    }

    pub fn line(&self, krate: &str) -> String {
        let score = self.score().map_or_else(|| "n/a".to_string(), |s| format!("{:.1}%", s * 100.0));
        let line = format!(
            "{krate}: {} caught, {} missed, {} unviable, {} timeout; score {score}",
            self.caught, self.missed, self.unviable, self.timeout
        );
        if self.previously_caught == 0 {
            line
        } else {
            // cargo-mutants keeps one list of the earlier caught and unviable mutants, so the
            // score of the whole crate cannot be told apart here: this run's counts only.
            format!("{line} of this run; {} caught or unviable earlier, not retested", self.previously_caught)
        }
    }
}

pub fn run(options: &Options) -> Result<()> {
    let crates: Vec<&str> = match options.krate {
        None => CRATES.to_vec(),
        Some(k) if CRATES.contains(&k) => vec![k],
        Some(k) => bail!("cargo xtask mutants covers {}; not {k:?}", CRATES.join(" and ")),
    };
    if options.jobs == 0 || options.timeout == 0 {
        bail!("--jobs and --timeout must be at least 1");
    }
    let mut did = Vec::new();
    crate::setup::cargo_mutants(&mut did)?;
    if !did.is_empty() {
        println!("mutants: {}", did.join("; "));
    }
    let root = workspace_root();
    let mut summaries = Vec::new();
    for krate in crates {
        let output = root.join("results/mutants").join(krate);
        std::fs::create_dir_all(&output).with_context(|| format!("creating {}", output.display()))?;
        let start = Instant::now();
        let mut cmd = Command::new("cargo");
        cmd.current_dir(&root)
            // A shared CARGO_TARGET_DIR would make every copy of the tree build into one
            // directory, serialised on cargo's lock; each copy keeps its own target/ instead.
            .env_remove("CARGO_TARGET_DIR")
            .args(["mutants", "--package", krate, "--test-workspace=false"])
            .args(["--jobs", &options.jobs.to_string(), "--timeout", &options.timeout.to_string()])
            .arg("--output")
            .arg(&output);
        if options.iterate {
            cmd.arg("--iterate");
        }
        for glob in options.files {
            cmd.args(["--file", glob]);
        }
        println!("mutants: {cmd:?}");
        let status = cmd.status().context("running cargo mutants")?;
        // cargo-mutants exits 2 when some mutant was missed and 3 when some timed out: that is
        // its report, not a failure of the run. Anything else (4: the unmutated tests fail) is.
        if !matches!(status.code(), Some(0 | 2 | 3)) {
            bail!("cargo mutants on {krate} failed ({status}); see {}/mutants.out/", output.display());
        }
        let summary = Summary::read(&output)?;
        println!("mutants: {} ({:.0?})", summary.line(krate), start.elapsed());
        summaries.push((krate, summary));
    }
    println!("\nmutants summary (the missed ones are in results/mutants/CRATE/mutants.out/missed.txt):");
    for (krate, summary) in &summaries {
        println!("  {}", summary.line(krate));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_leaves_out_unviable_and_timed_out_mutants() {
        let s = Summary { caught: 3, missed: 1, unviable: 10, timeout: 2, previously_caught: 0 };
        assert_eq!(s.score(), Some(0.75));
        assert_eq!(s.line("x"), "x: 3 caught, 1 missed, 10 unviable, 2 timeout; score 75.0%");
        assert_eq!(Summary::default().score(), None);
    }

    #[test]
    fn summary_counts_the_lines_of_each_list_and_absent_lists_as_zero() {
        let dir = std::env::temp_dir().join(format!("xtask-mutants-{}", std::process::id()));
        let out = dir.join("mutants.out");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("caught.txt"), "a.rs:1:1: replace f\na.rs:2:1: replace g\n").unwrap();
        std::fs::write(out.join("missed.txt"), "a.rs:3:1: replace h\n").unwrap();
        let s = Summary::read(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(s, Summary { caught: 2, missed: 1, unviable: 0, timeout: 0, previously_caught: 0 });
    }
}
