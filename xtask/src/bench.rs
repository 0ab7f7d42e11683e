//! `cargo xtask bench [NAME]`: runs the benchmarks of the `fabric-bench` binary (the crate of
//! that name), with `fabric` beside it for the switch agent the testbed benchmarks start.
use std::process::Command;

use anyhow::{Result, bail};

use crate::util::{build_release, release_dir, run as run_cmd, workspace_root};

const BENCHES: &[&str] = &["dataplane", "endpoint", "bringup", "forwarding", "sim", "twin"];

pub fn run(name: Option<&str>) -> Result<()> {
    let selected: Vec<&str> = match name {
        None => BENCHES.to_vec(),
        Some(n) if BENCHES.contains(&n) => vec![n],
        Some(n) => bail!("no benchmark {n:?}; there are: {}", BENCHES.join(", ")),
    };
    build_release(&["fabric-user", "fabric-bench"])?;
    let bench = release_dir().join("fabric-bench");
    for b in selected {
        run_cmd(
            Command::new(&bench).current_dir(workspace_root()).env("FABRIC_BIN", release_dir().join("fabric")).arg(b),
        )?;
    }
    Ok(())
}
