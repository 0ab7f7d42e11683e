//! `cargo xtask fuzz [--seconds N] [--seeds] [TARGET]`: the cargo-fuzz (libFuzzer) targets of
//! fabric-common/fuzz, each run for N seconds from the seed corpus, with one summary line per
//! target. Fails, naming the artifact and the command that reproduces it, if any target crashes.
//!
//! cargo-fuzz is installed if missing. The targets build with nightly; `roce_wire` and the seed
//! generator need fabric-user, built with AYA_BUILD_SKIP=1 (they do not load the XDP object).
//! The seed corpus (fabric-common/fuzz/corpus/<target>/, small, committed) is regenerated from
//! the rxe capture and the fixture frames with `--seeds`, or when it is missing. What libFuzzer
//! adds goes to fabric-common/fuzz/target/corpus/<target>/, so the seeds stay as committed and
//! later runs start from what earlier ones found.
use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

use crate::util::{output, run as run_cmd, succeeds, workspace_root};

/// Every target, in the order they run.
pub const TARGETS: &[&str] = &["parse_packet", "icrc", "pfc", "roce_wire"];
const NIGHTLY: &str = "nightly";
/// The release checked to build with this repository's stable and nightly toolchains.
const CARGO_FUZZ_VERSION: &str = "0.13.2";
/// Enables `roce_wire` and the seed generator (they depend on fabric-user). Always passed, so
/// that switching targets never flips features and rebuilds.
const FEATURES: &str = "user";

/// What one target's run came to.
struct Outcome {
    target: &'static str,
    executions: Option<u64>,
    seconds: f64,
    exec_per_sec: Option<u64>,
    /// Crash, leak, timeout or OOM inputs libFuzzer wrote.
    artifacts: Vec<PathBuf>,
    /// libFuzzer's exit status was not success.
    failed: bool,
}

pub fn run(seconds: u64, target: Option<&str>, regenerate_seeds: bool) -> Result<()> {
    if seconds == 0 {
        bail!("--seconds must be at least 1");
    }
    let targets: Vec<&'static str> = match target {
        None => TARGETS.to_vec(),
        Some(t) => match TARGETS.iter().find(|&&k| k == t) {
            Some(&k) => vec![k],
            None => bail!("no fuzz target {t:?}; the targets are {}", TARGETS.join(", ")),
        },
    };
    let fuzz_dir = fuzz_dir();
    let mut did = Vec::new();
    nightly(&mut did)?;
    cargo_fuzz(&mut did)?;
    if did.is_empty() {
        println!("fuzz: nightly and cargo-fuzz already installed");
    } else {
        println!("fuzz: {}", did.join("; "));
    }

    let missing: Vec<&str> =
        TARGETS.iter().copied().filter(|t| is_empty_dir(&fuzz_dir.join("corpus").join(t))).collect();
    if regenerate_seeds || !missing.is_empty() {
        if !missing.is_empty() && !regenerate_seeds {
            println!("fuzz: no seed corpus for {}: generating it", missing.join(", "));
        }
        generate_seeds()?;
    }

    println!(
        "fuzz: building {} (cargo +{NIGHTLY} fuzz build)",
        if targets.len() == 1 { targets[0] } else { "every target" }
    );
    let mut build = fuzz_command();
    build.args(["build", "--features", FEATURES]);
    if let [only] = targets[..] {
        build.arg(only);
    }
    run_cmd(&mut build)?;

    let mut outcomes = Vec::new();
    for &t in &targets {
        outcomes.push(run_target(t, seconds)?);
    }

    println!();
    for o in &outcomes {
        let execs = o.executions.map_or("?".into(), |n| n.to_string());
        let rate = o.exec_per_sec.map_or(String::new(), |r| format!(" ({r} exec/s)"));
        println!(
            "fuzz: {:<12} {execs} executions in {:.0} s{rate}, {} crashes",
            o.target,
            o.seconds,
            o.artifacts.len().max(o.failed as usize)
        );
    }
    let bad: Vec<&Outcome> = outcomes.iter().filter(|o| o.failed || !o.artifacts.is_empty()).collect();
    if bad.is_empty() {
        return Ok(());
    }
    eprintln!();
    for o in &bad {
        if o.artifacts.is_empty() {
            eprintln!("fuzz: {} failed without writing an artifact: see its output above", o.target);
        }
        for a in &o.artifacts {
            eprintln!("fuzz: {} crashed; input: {}", o.target, a.display());
            eprintln!(
                "      reproduce: cd {} && AYA_BUILD_SKIP=1 cargo +{NIGHTLY} fuzz run --features {FEATURES} {} {}",
                fuzz_dir.parent().expect("fabric-common").display(),
                o.target,
                a.display()
            );
        }
    }
    bail!(
        "fuzzing found {} failing target(s): {}",
        bad.len(),
        bad.iter().map(|o| o.target).collect::<Vec<_>>().join(", ")
    )
}

fn fuzz_dir() -> PathBuf {
    workspace_root().join("fabric-common/fuzz")
}

fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut entries| entries.next().is_none())
}

/// `cargo +nightly fuzz` run from fabric-common (cargo-fuzz finds fuzz/ there), with the
/// environment fabric-user's build script needs to skip the XDP object.
fn fuzz_command() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(workspace_root().join("fabric-common"))
        .env("AYA_BUILD_SKIP", "1")
        .arg(format!("+{NIGHTLY}"))
        .arg("fuzz");
    cmd
}

fn nightly(did: &mut Vec<String>) -> Result<()> {
    if succeeds(Command::new("rustc").arg(format!("+{NIGHTLY}")).arg("--version")) {
        return Ok(());
    }
    if !succeeds(Command::new("rustup").arg("--version")) {
        bail!("rustup is missing: install it (https://rustup.rs); cargo-fuzz needs a nightly toolchain");
    }
    println!("fuzz: installing the {NIGHTLY} toolchain");
    run_cmd(Command::new("rustup").args(["toolchain", "install", NIGHTLY, "--profile", "minimal"]))?;
    did.push(format!("installed the {NIGHTLY} toolchain"));
    Ok(())
}

/// Installs cargo-fuzz unless some version of it already runs.
fn cargo_fuzz(did: &mut Vec<String>) -> Result<()> {
    if let Ok(v) = output(Command::new("cargo").args(["fuzz", "--version"])) {
        println!("fuzz: using {}", v.trim());
        return Ok(());
    }
    println!("fuzz: installing cargo-fuzz {CARGO_FUZZ_VERSION} (cargo install --locked; a minute or two)");
    run_cmd(Command::new("cargo").current_dir(workspace_root()).args([
        "install",
        "cargo-fuzz",
        "--locked",
        "--version",
        CARGO_FUZZ_VERSION,
    ]))
    .context("installing cargo-fuzz")?;
    let v = output(Command::new("cargo").args(["fuzz", "--version"]))
        .context("cargo-fuzz was installed but `cargo fuzz --version` fails (is ~/.cargo/bin on PATH?)")?;
    did.push(format!("installed {}", v.trim()));
    Ok(())
}

/// Rewrites fabric-common/fuzz/corpus/ with the seed generator (examples/seeds.rs).
fn generate_seeds() -> Result<()> {
    let pcap = workspace_root().join("fabric-user/tests/data/rxe-rc-mixed.pcap");
    if !pcap.exists() {
        bail!("the seed corpus is made from the rxe capture {}, which is missing", pcap.display());
    }
    println!("fuzz: writing the seed corpus from {} and the fixture frames", pcap.display());
    run_cmd(
        Command::new("cargo")
            .current_dir(fuzz_dir())
            .env("AYA_BUILD_SKIP", "1")
            .arg(format!("+{NIGHTLY}"))
            .args(["run", "--features", FEATURES, "--example", "seeds", "--"])
            .arg(&pcap),
    )
}

/// Runs one target for `seconds`, passing libFuzzer's output through (without its per-input
/// progress lines), and reads its final statistics.
fn run_target(target: &'static str, seconds: u64) -> Result<Outcome> {
    let dir = fuzz_dir();
    let work = dir.join("target/corpus").join(target);
    let seeds = dir.join("corpus").join(target);
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    println!("\nfuzz: {target} for {seconds} s (corpus {} + seeds {})", work.display(), seeds.display());
    let mut cmd = fuzz_command();
    cmd.args(["run", "--features", FEATURES, target])
        .arg(&work)
        .arg(&seeds)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        // An input that takes this long is a hang: reported as a crash (timeout-* artifact).
        .arg("-timeout=10")
        .arg("-print_final_stats=1")
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("running {cmd:?}"))?;
    // `cargo fuzz run` may rebuild first: the clock starts when libFuzzer does.
    let mut start = Instant::now();
    let mut outcome =
        Outcome { target, executions: None, seconds: 0.0, exec_per_sec: None, artifacts: Vec::new(), failed: false };
    let mut done_seconds = None;
    for line in BufReader::new(child.stderr.take().expect("piped")).lines() {
        let line = line?;
        let progress = line.starts_with('#') && (line.contains(" NEW ") || line.contains(" REDUCE "));
        if !progress {
            eprintln!("{line}");
        }
        if line.starts_with("INFO: Seed:") {
            start = Instant::now();
        }
        if let Some(n) = stat(&line, "stat::number_of_executed_units:") {
            outcome.executions = Some(n);
        } else if let Some(n) = stat(&line, "stat::average_exec_per_sec:") {
            outcome.exec_per_sec = Some(n);
        } else if let Some(rest) = line.strip_prefix("Done ") {
            // "Done 575848 runs in 21 second(s)"
            let words: Vec<&str> = rest.split_whitespace().collect();
            if let [runs, "runs", "in", secs, ..] = words[..] {
                outcome.executions = outcome.executions.or(runs.parse().ok());
                done_seconds = secs.parse::<f64>().ok();
            }
        } else if let Some(i) = line.find("Test unit written to ") {
            let path = PathBuf::from(line[i + "Test unit written to ".len()..].trim());
            outcome.artifacts.push(if path.is_absolute() {
                path
            } else {
                workspace_root().join("fabric-common").join(path)
            });
        }
    }
    let status = child.wait()?;
    outcome.failed = !status.success();
    outcome.seconds = done_seconds.unwrap_or_else(|| start.elapsed().as_secs_f64());
    Ok(outcome)
}

fn stat(line: &str, key: &str) -> Option<u64> {
    line.strip_prefix(key)?.trim().parse().ok()
}
