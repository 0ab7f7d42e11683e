//! `cargo xtask demo`: the first thing a new user runs. Sets up what is missing, brings up the
//! default testbed and shows it forwarding through XDP, runs the `ecmp-entropy` experiment in its
//! CI variant (ring AllReduce: five-tuple ECMP with 1 QP, QP scaling with a fixed or per-QP
//! source port, QP scaling with E-ECMP; it brings up and tears down a testbed of its own), prints
//! its table and where its report is, then tears everything down.
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
        step(
            "ring AllReduce: 5-tuple ECMP with 1 QP vs QP scaling (fixed / per-QP source port) vs E-ECMP \
             (its own testbed, 2 seeds, about a minute)",
            &["experiment", "ecmp-entropy", "--out", "results"],
        )?;
        println!(
            "\nreport, charts (SVG, PNG) and JSON: results/ecmp-entropy/; all experiments: fabric experiment list"
        );
        step("health check", &["status"])
    })();
    step("tear down", &["down"])?;
    result
}
