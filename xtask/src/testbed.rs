//! `cargo xtask testbed up|down|status|...`: a thin wrapper over the `fabric` binary.
use std::process::Command;

use anyhow::Result;

use crate::util::{build_fabric, run as run_cmd, workspace_root};

pub fn run(args: &[String]) -> Result<()> {
    let fabric = build_fabric()?;
    let args: Vec<String> = if args.is_empty() { vec!["status".into()] } else { args.to_vec() };
    run_cmd(Command::new(fabric).current_dir(workspace_root()).args(&args))
}
