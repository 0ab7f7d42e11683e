//! `cargo xtask demo`: the first thing a new user runs. Sets up what is missing, brings up the
//! default testbed, shows it forwarding through XDP, runs the ECMP-entropy story (ring AllReduce
//! with a fixed source port: 1 QP, 8 QPs on five-tuple ECMP, 8 QPs on E-ECMP), fails a spine link
//! and shows the fabric route around it, then tears everything down.
use std::process::Command;

use anyhow::{Result, bail};

use crate::util::{build_fabric, is_root, run as run_cmd, workspace_root};

pub fn run() -> Result<()> {
    if !is_root() {
        bail!("the demo builds network namespaces and loads XDP programs: run it as root");
    }
    crate::setup::run()?;
    let fabric = build_fabric()?;
    let step = |title: &str, args: &[&str]| -> Result<()> {
        println!("\n==> fabric {}    # {title}", args.join(" "));
        run_cmd(Command::new(&fabric).current_dir(workspace_root()).args(args))
    };
    // A leftover testbed from an interrupted demo would make `up` refuse.
    step("remove any leftover default testbed", &["down"])?;
    let result = (|| -> Result<()> {
        step("build the default Clos: 4 RTSWs x 2 hosts, 4 CTSWs", &["up"])?;
        step("every host pair, through the XDP switches only", &["ping"])?;
        for (what, file) in [
            ("1 QP per connection, five-tuple ECMP", "allreduce-1qp"),
            ("8 QPs, same five-tuple (fixed source port): QP scaling alone", "allreduce-8qp-five-tuple"),
            ("8 QPs with Enhanced ECMP hashing the destination QP", "allreduce-8qp-eecmp"),
        ] {
            let path = format!("testbed/workloads/{file}.toml");
            let json = format!("results/demo/{file}.json");
            step(&format!("ring AllReduce, {what}"), &["run", "--file", &path, "--json", &json, "--quiet"])?;
        }
        step("fail a spine link; ECMP groups are repaired", &["link", "down", "z0r0:z0c1"])?;
        step("traffic survives on the remaining paths", &["ping"])?;
        step("bring it back", &["link", "up", "z0r0:z0c1"])?;
        step("health check", &["status"])
    })();
    step("tear down", &["down"])?;
    result
}
