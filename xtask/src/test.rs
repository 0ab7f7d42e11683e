//! `cargo xtask test`: setup, then every test. The namespace and BPF tests need root; they
//! fail loudly without it rather than skip.
use std::{
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use crate::util::{is_root, workspace_root};

pub fn run() -> Result<()> {
    if !is_root() {
        bail!(
            "the tests build network namespaces and load XDP programs: run them as root \
             (e.g. `sudo -E env PATH=$PATH cargo xtask test`)"
        );
    }
    crate::setup::run()?;
    // Output is passed through as it comes; the per-binary "test result" lines are added up so
    // the run ends with one total (the last binary alone may well have no tests).
    let mut child = Command::new("cargo")
        .current_dir(workspace_root())
        .args(["test", "--locked", "--no-fail-fast"])
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo test")?;
    let (mut passed, mut failed, mut ignored) = (0u64, 0u64, 0u64);
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            for part in rest.split(';') {
                let mut words = part.split_whitespace().rev();
                let (Some(what), Some(n)) = (words.next(), words.next()) else { continue };
                let n: u64 = n.parse().unwrap_or(0);
                match what {
                    "passed" => passed += n,
                    "failed" => failed += n,
                    "ignored" => ignored += n,
                    _ => {}
                }
            }
        }
    }
    let status = child.wait()?;
    println!("\ntests: {passed} passed, {failed} failed, {ignored} skipped");
    if !status.success() {
        bail!("cargo test failed ({status})");
    }
    if passed == 0 {
        bail!("cargo test ran no test");
    }
    Ok(())
}
