//! `cargo xtask bench [NAME]`: runs the benchmarks of the `fabric` binary.
use std::process::Command;

use anyhow::{Result, bail};

use crate::util::{build_fabric, run as run_cmd, workspace_root};

const BENCHES: &[&str] = &["dataplane", "endpoint", "bringup", "forwarding", "sim"];

pub fn run(name: Option<&str>) -> Result<()> {
    let selected: Vec<&str> = match name {
        None => BENCHES.to_vec(),
        Some(n) if BENCHES.contains(&n) => vec![n],
        Some(n) => bail!("no benchmark {n:?}; there are: {}", BENCHES.join(", ")),
    };
    let fabric = build_fabric()?;
    for b in selected {
        run_cmd(Command::new(&fabric).current_dir(workspace_root()).args(["bench", b]))?;
    }
    Ok(())
}
