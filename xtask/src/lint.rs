//! `cargo xtask lint`: rustfmt, clippy with warnings denied on every crate (the eBPF crate
//! compiled for the host, as its tests are), and the module graph of every crate free of import
//! cycles.
use std::process::Command;

use anyhow::{Result, bail};

use crate::{
    modgraph,
    util::{run, workspace_root},
};

/// The crates whose module graphs must be acyclic.
const CRATES: &[&str] = &[
    "fabric-common",
    "fabric-roce",
    "fabric-twin",
    "fabric-ebpf",
    "fabric-user",
    "fabric-testkit",
    "fabric-bench",
    "xtask",
];

pub fn run_all() -> Result<()> {
    let root = workspace_root();
    run(Command::new("cargo").current_dir(&root).args(["fmt", "--all", "--check"]))?;
    run(Command::new("cargo").current_dir(&root).args([
        "clippy",
        "--locked",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    modules()?;
    println!("lint: rustfmt, clippy and the module graphs are clean");
    Ok(())
}

/// fabric-user's folders, lowest layer first (the table in fabric-user/src/lib.rs).
const FABRIC_USER_LAYERS: &[&str] = &[
    "sys",
    "model",
    "dataplane",
    "state",
    "endpoint",
    "forwarding",
    "te",
    "agent",
    "telemetry",
    "testbed",
    "run",
    "sim",
    "experiment",
    "analyze",
    "ui",
];

/// Prints each crate's top-level module graph and fails on any cycle, between folders or files.
pub fn modules() -> Result<()> {
    let mut problems = Vec::new();
    for krate in CRATES {
        let g = modgraph::read_crate(&workspace_root().join(krate).join("src"))?;
        let top = modgraph::top_level(&g);
        if *krate == "fabric-user" {
            println!("{krate}: modules and what each imports from");
            for (m, deps) in top.iter().filter(|(m, _)| !m.is_empty()) {
                let deps: Vec<&str> = deps.iter().map(String::as_str).filter(|d| !d.is_empty()).collect();
                println!("  {m:<12} <- {}", deps.join(", "));
            }
        }
        if *krate == "fabric-user" {
            problems.extend(modgraph::layer_violations(&top, FABRIC_USER_LAYERS));
        }
        for cycle in modgraph::cycles(&g).into_iter().chain(modgraph::cycles(&top)) {
            problems.push(format!("{krate}: import cycle between {}", cycle.join(", ")));
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    println!("module graphs: {} crates, no import cycle; fabric-user's layers in order", CRATES.len());
    Ok(())
}
