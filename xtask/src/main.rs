//! `cargo xtask`: project chores. One module per subcommand.
use anyhow::Result;
use clap::{Parser, Subcommand};

use xtask::{bench, demo, fuzz, lint, mutants, setup, test, testbed, vm};

#[derive(Parser)]
#[command(name = "xtask", about = "fabric project tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install what the build and the tests need (idempotent): Debian packages, the nightly
    /// toolchain's rust-src, bpf-linker built against the toolchain's own libLLVM, and cargo-mutants.
    Setup,
    /// Mutation testing (cargo-mutants) of fabric-common and fabric-roce with their host tests;
    /// reports under results/mutants/CRATE/, one summary line per crate. Installs cargo-mutants
    /// if missing.
    Mutants {
        /// fabric-common or fabric-roce (default: both, one after the other).
        #[arg(long = "crate", value_name = "NAME")]
        krate: Option<String>,
        /// Only mutate files matching this glob (repeatable), e.g. `fabric-roce/src/dcqcn.rs`.
        #[arg(long, value_name = "GLOB")]
        file: Vec<String>,
        /// Mutants built and tested at once; each job is a full build (2 cores here: keep it low).
        #[arg(long, short, default_value_t = 2)]
        jobs: u32,
        /// Seconds one mutant's tests may run before it counts as a timeout.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
        /// Test only the mutants that the previous run (results/mutants/CRATE/) did not catch.
        #[arg(long)]
        iterate: bool,
    },
    /// Setup, then every test of the workspace (host, BPF_PROG_TEST_RUN, namespaces). Needs root.
    Test,
    /// Benchmarks; each prints a table and writes JSON under results/bench/.
    Bench {
        /// Which benchmark (default: all).
        name: Option<String>,
    },
    /// Bring up the default testbed, run the main demo, tear down.
    Demo,
    /// Boot a Debian 6.1 kernel under qemu (virtme-ng) and run a command in it (default:
    /// `fabric check`, the XDP program passes the oldest supported kernel's verifier, then
    /// `fabric rxe smoke`, soft-RoCE across the XDP fabric).
    Vm {
        /// Kernel package to boot (default: the 6.1 image `linux-image-amd64` depends on).
        #[arg(long)]
        kernel: Option<String>,
        /// Command to run inside.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Fuzz the parsers (cargo-fuzz, nightly): every target or one, N seconds each, from the
    /// seed corpus; fails on a crash. Installs cargo-fuzz if missing.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Regenerate the seed corpus (fabric-common/fuzz/corpus/) from the rxe capture first.
        #[arg(long)]
        seeds: bool,
        /// parse_packet, icrc, pfc or roce_wire (default: all).
        target: Option<String>,
    },
    /// rustfmt check, clippy with warnings denied on every crate, and no import cycle between
    /// modules (`--modules`: only the module graph, printed).
    Lint {
        #[arg(long)]
        modules: bool,
    },
    /// Thin wrapper over `fabric up|down|status|...`.
    Testbed {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Setup => setup::run(),
        Command::Test => test::run(),
        Command::Bench { name } => bench::run(name.as_deref()),
        Command::Demo => demo::run(),
        Command::Fuzz { seconds, seeds, target } => fuzz::run(seconds, target.as_deref(), seeds),
        Command::Mutants { krate, file, jobs, timeout, iterate } => {
            mutants::run(&mutants::Options { krate: krate.as_deref(), files: &file, jobs, timeout, iterate })
        }
        Command::Lint { modules: true } => lint::modules(),
        Command::Lint { modules: false } => lint::run_all(),
        Command::Testbed { args } => testbed::run(&args),
        Command::Vm { kernel, command } => vm::run(kernel.as_deref(), &command),
    }
}
