//! Running commands with their output shown, and finding the workspace.
use std::{
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask is inside the workspace").to_path_buf()
}

/// Runs `cmd` with inherited stdio; fails naming the command if it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd.status().with_context(|| format!("could not start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

/// Runs `cmd` quietly and returns whether it succeeded (for probes).
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Runs `cmd` and returns its stdout.
pub fn output(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().with_context(|| format!("could not start {shown}"))?;
    if !out.status.success() {
        bail!("{shown} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8(out.stdout)?)
}

pub fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_ok_and(|s| s.trim() == "0")
}

/// Builds the controller in release mode and returns the path of the `fabric` binary.
pub fn build_fabric() -> Result<PathBuf> {
    build_release(&["fabric-user"])?;
    Ok(release_dir().join("fabric"))
}

/// Builds `packages` in release mode.
pub fn build_release(packages: &[&str]) -> Result<()> {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(workspace_root()).args(["build", "--release", "--locked"]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    run(&mut cmd)
}

/// Where cargo puts release binaries: CARGO_TARGET_DIR (relative to the workspace) if set.
pub fn release_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), |d| workspace_root().join(d))
        .join("release")
}
