//! `cargo xtask test`: setup, then every test. The namespace and BPF tests need root; they
//! fail loudly without it rather than skip.
use std::process::Command;

use anyhow::{Result, bail};

use crate::util::{is_root, run as run_cmd, workspace_root};

pub fn run() -> Result<()> {
    if !is_root() {
        bail!(
            "the tests build network namespaces and load XDP programs: run them as root \
             (e.g. `sudo -E env PATH=$PATH cargo xtask test`)"
        );
    }
    crate::setup::run()?;
    run_cmd(Command::new("cargo").current_dir(workspace_root()).args(["test", "--workspace", "--locked"]))
}
