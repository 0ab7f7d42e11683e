//! `fabric-bench`: the benchmarks `cargo xtask bench` runs. Each prints a table and writes JSON
//! under `results/bench/`. Figures are ratios against a baseline measured in the same run; the
//! absolute times depend on the machine.
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

mod bringup;
mod dataplane;
mod endpoint;
mod forwarding;
mod sim;
mod stats;
mod twin;

#[derive(Parser)]
#[command(name = "fabric-bench", about = "fabric's benchmarks")]
struct Cli {
    #[command(subcommand)]
    which: BenchCommand,
}

/// `--modes`: the routing modes a benchmark measures.
#[derive(clap::Args)]
struct Modes {
    /// Routing modes, comma-separated (default: every one).
    #[arg(long = "modes", value_delimiter = ',', value_parser = fabric_user::model::topology::parse_hash_mode)]
    modes: Vec<fabric_common::config::HashMode>,
}

impl Modes {
    /// The modes given, or every routing mode.
    fn or_every(self) -> Vec<fabric_common::config::HashMode> {
        if self.modes.is_empty() { fabric_common::config::HashMode::ROUTING.to_vec() } else { self.modes }
    }
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Time to bring up and tear down each shipped topology and synthetic ones of 8..4,096
    /// hosts (repeated), time per link and kernel memory per namespace.
    Bringup {
        #[arg(long, default_value = "results/bench/bringup.json")]
        json: PathBuf,
        /// Host counts of the large series (16 hosts per rack, 16 spines).
        #[arg(long, value_delimiter = ',', default_value = "512,1024,2048,4096")]
        sizes: Vec<u32>,
        /// Repetitions of each large size below 4,096 hosts.
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Repetitions at 4,096 hosts (about two minutes each on a busy 2-core machine).
        #[arg(long, default_value_t = 2)]
        reps_4096: usize,
    },
    /// Packets/s per core of the RoCEv2 endpoint vs raw UDP, and of a whole AllReduce.
    Endpoint {
        #[arg(long, default_value = "results/bench/endpoint.json")]
        json: PathBuf,
    },
    /// Per-packet cost of the switch program vs XDP_PASS and parse + fixed redirect.
    Dataplane {
        /// Packets per case and round (at least one test_run call's 200).
        #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(200..))]
        packets: u64,
        /// Rounds per case (the median is reported).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
        rounds: u32,
        /// The routing modes to measure, without and with the congestion model.
        #[command(flatten)]
        modes: Modes,
        /// Where to write the JSON report.
        #[arg(long, default_value = "results/bench/dataplane.json")]
        json: PathBuf,
    },
    /// Wall time of `fabric sim` on 1K, 4K and 24K GPUs (ring AllReduce, eecmp, 8 QPs).
    Sim {
        #[arg(long, default_value = "results/bench/sim.json")]
        json: PathBuf,
    },
    /// The packet-level twin vs htsim on a 1,024-host permutation (wall times, ratio, events/s).
    Twin {
        #[arg(long, default_value = "results/bench/twin.json")]
        json: PathBuf,
        /// htsim's source folder (with `sim/`; default: `$HTSIM_SRC`), built into `target/htsim`.
        #[arg(long)]
        htsim_src: Option<PathBuf>,
    },
    /// Packets/s per core through RTSW-CTSW-RTSW: the XDP switch (plain, and with the congestion
    /// model in every routing mode) vs Linux kernel forwarding, measured in the same run.
    Forwarding {
        #[arg(long, default_value = "results/bench/forwarding.json")]
        json: PathBuf,
        /// The routing modes to measure with the congestion model on (every mode pays its own
        /// code on the path's one-member groups: flowlet its table update, adaptive and wcmp
        /// their reads).
        #[command(flatten)]
        modes: Modes,
        /// Rounds (the median is reported); each round measures every case once.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Seconds per case and round.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Frame sizes in bytes (64..=1500).
        #[arg(long, value_delimiter = ',', default_value = "64")]
        sizes: Vec<usize>,
        /// What sends the frames: BPF_PROG_TEST_RUN with live frames, or a loop of frames sent
        /// once and circulating through the path and back (for kernels or sandboxes that refuse
        /// live frames); auto takes live frames where they are allowed.
        #[arg(long, value_enum, default_value_t = forwarding::Driver::Auto)]
        driver: forwarding::Driver,
    },
}

fn main() -> std::process::ExitCode {
    fabric_user::exit_code(run())
}

fn run() -> Result<()> {
    match Cli::parse().which {
        BenchCommand::Sim { json } => {
            let report = sim::sim()?;
            sim::print_sim(&report);
            write_json(&json, &report)?;
        }
        BenchCommand::Bringup { json, sizes, reps, reps_4096 } => {
            remove_owned_testbeds_on_interrupt()?;
            let report = bringup::bringup(&bringup::BringupOptions { sizes, reps, reps_4096 })?;
            bringup::print_bringup(&report);
            write_json(&json, &report)?;
            if report.reps_ok != report.reps_total {
                anyhow::bail!(
                    "{} of {} bring-ups failed (see the table)",
                    report.reps_total - report.reps_ok,
                    report.reps_total
                );
            }
        }
        BenchCommand::Endpoint { json } => {
            remove_owned_testbeds_on_interrupt()?;
            let report = endpoint::endpoint()?;
            endpoint::print_endpoint(&report);
            write_json(&json, &report)?;
        }
        BenchCommand::Twin { json, htsim_src } => {
            let htsim_src = htsim_src.or_else(|| std::env::var_os("HTSIM_SRC").map(PathBuf::from));
            let report = twin::twin(htsim_src.as_deref())?;
            twin::print_twin(&report);
            write_json(&json, &report)?;
        }
        BenchCommand::Forwarding { json, modes, rounds, seconds, sizes, driver } => {
            let opts = forwarding::Options { modes: modes.or_every(), rounds, seconds, sizes, driver };
            let report = forwarding::forwarding(&opts)?;
            forwarding::print_forwarding(&report);
            write_json(&json, &report)?;
        }
        BenchCommand::Dataplane { packets, rounds, modes, json } => {
            let report = dataplane::dataplane(packets, rounds, &modes.or_every())?;
            dataplane::print_dataplane(&report);
            write_json(&json, &report)?;
        }
    }
    Ok(())
}

/// For the benchmarks that build testbeds (`bringup`, `endpoint`): Ctrl-C, SIGTERM or SIGHUP
/// removes them, as a drop would not run (their guards are `DownOnDrop::owned`).
fn remove_owned_testbeds_on_interrupt() -> Result<()> {
    fabric_user::testbed::interrupt::remove_owned_on_interrupt(|p| fabric_user::testbed::down(p).map(drop))
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, serde_json::to_vec_pretty(value)?).with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
