//! `fabric analyze`: the command line over the analyzer, its terminal report and its charts.
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail, ensure};

use super::{chart, report};
use crate::analyze::*;

/// `fabric analyze`.
#[derive(Clone, Debug, clap::Args)]
pub struct AnalyzeArgs {
    /// A pcap or pcapng file, taken anywhere (port mirror, testbed veth, tcpdump -i any).
    pub capture: PathBuf,
    /// ECMP group size to predict for (an RTSW's uplinks; default 4, or the --switch's).
    #[arg(long)]
    pub uplinks: Option<u32>,
    /// The switch's hash seed, decimal or 0x-hex (default 0, or the --switch's).
    #[arg(long, value_parser = crate::model::units::parse_seed)]
    pub seed: Option<u32>,
    /// Hash mode(s): five-tuple, eecmp, pin (repeatable; default all three).
    #[arg(long)]
    pub hash: Vec<String>,
    /// `pin` mode's shift (low destination bits dropped; the testbed installs 1).
    #[arg(long, default_value_t = fabric_common::config::SwitchConfig::TESTBED_PIN_SHIFT,
          value_parser = clap::value_parser!(u32).range(0..=31))]
    pub pin_shift: u32,
    /// Take the seed and group size from this switch of a topology (e.g. z0r0), as `fabric up`
    /// installs them.
    #[arg(long)]
    pub switch: Option<String>,
    /// Topology file for --switch (default: the embedded default testbed).
    #[arg(long, requires = "switch")]
    pub topology: Option<PathBuf>,
    /// List every QP (five-tuple + destination QP) with its predicted member per mode.
    #[arg(long)]
    pub per_qp: bool,
    /// Write the report as JSON (schema fabric.analyze/1).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw the per-uplink load per mode as SVG (and PNG beside it).
    #[arg(long)]
    pub chart: Option<PathBuf>,
}

/// The group of `args`: explicit values over the --switch's over defaults.
pub fn group_of(args: &AnalyzeArgs) -> Result<Group> {
    let mut modes = Vec::new();
    for h in &args.hash {
        // Only the modes that choose by the packet alone: `te` needs the controller's table, the
        // balancing modes the switch's state.
        match HashMode::parse(h) {
            // A mode named twice is predicted once.
            Some(m) if modes.contains(&m) => {}
            Some(m) if HashMode::ALL.contains(&m) => modes.push(m),
            Some(_) => bail!(
                "--hash {h:?}: chooses by more than the packet, so a capture cannot predict it (five-tuple, eecmp or pin)"
            ),
            None => bail!("--hash {h:?}: no such hash mode; a capture predicts five-tuple, eecmp or pin"),
        }
    }
    if modes.is_empty() {
        modes = HashMode::ALL.to_vec();
    }
    let (mut uplinks, mut seed) = (4, 0);
    if let Some(name) = &args.switch {
        let topo = crate::model::topology::Topology::load(args.topology.as_deref())?;
        let plan = crate::model::plan::Plan::new(&topo);
        let node = plan.node_by_name(name).with_context(|| format!("no node {name} in topology {}", topo.name))?;
        ensure!(plan.nodes[node].role.is_switch(), "{name} is not a switch");
        uplinks = plan.uplinks(node).len() as u32;
        seed = plan.nodes[node].seed;
        ensure!(uplinks > 0, "{name} has no uplinks");
    }
    let uplinks = args.uplinks.unwrap_or(uplinks);
    ensure!((1..=64).contains(&uplinks), "--uplinks must be 1..64 (an ECMP group's size)");
    Ok(Group { uplinks, seed: args.seed.unwrap_or(seed), pin_shift: args.pin_shift, modes })
}

pub fn main(args: &AnalyzeArgs) -> Result<()> {
    let group = group_of(args)?;
    let r = analyze_file(&args.capture, &group)?;
    report::print(&r, args.per_qp);
    if let Some(path) = &args.json {
        crate::sys::file::write_json(path, &r)?;
    }
    if let Some(path) = &args.chart {
        for f in chart::write(&r, path)? {
            println!("wrote {}", f.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_hash(hash: &str) -> AnalyzeArgs {
        AnalyzeArgs {
            capture: PathBuf::from("unused.pcap"),
            uplinks: None,
            seed: None,
            hash: vec![hash.into()],
            pin_shift: 1,
            switch: None,
            topology: None,
            per_qp: false,
            json: None,
            chart: None,
        }
    }

    /// A mode the switch has but a capture cannot predict is told apart from a name that is no
    /// mode at all; the three packet-only modes are taken.
    #[test]
    fn unknown_and_unpredictable_hash_modes_are_told_apart() {
        let err = |h: &str| format!("{:#}", group_of(&with_hash(h)).unwrap_err());
        assert!(err("bogus").contains("--hash \"bogus\": no such hash mode"), "{}", err("bogus"));
        for mode in ["te", "flowlet", "adaptive", "spray", "wcmp"] {
            assert!(err(mode).contains("a capture cannot predict it"), "{mode}: {}", err(mode));
        }
        for mode in ["five-tuple", "eecmp", "pin"] {
            assert_eq!(group_of(&with_hash(mode)).unwrap().modes, [HashMode::parse(mode).unwrap()]);
        }
        // Named twice, a mode is predicted once.
        let twice = AnalyzeArgs { hash: vec!["eecmp".into(), "pin".into(), "eecmp".into()], ..with_hash("eecmp") };
        assert_eq!(group_of(&twice).unwrap().modes, [HashMode::Eecmp, HashMode::Pin]);
    }
}
