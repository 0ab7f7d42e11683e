//! `fabric experiment list | all | NAME [--full] [--seeds N] [--out DIR]`.
use std::path::PathBuf;

use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use super::{ALL, Options};

/// `--time-scale`: a topology's time scale ([`crate::model::topology::TIME_SCALES`]).
fn parse_time_scale(s: &str) -> Result<u64, String> {
    let range = crate::model::topology::TIME_SCALES;
    let v: u64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if range.contains(&v) { Ok(v) } else { Err(format!("{v} is not in {}..={}", range.start(), range.end())) }
}

#[derive(Clone, Debug, clap::Args)]
pub struct ExperimentArgs {
    /// `list`, `all`, or a scenario: ecmp-entropy, path-pinning, link-failure, incast, pfc-storm,
    /// cc-at-400g (twin only), cross-zone, ...
    pub name: String,
    /// The full variant (bigger messages, 5 seeds) instead of the CI one (small, 2 seeds).
    #[arg(long)]
    pub full: bool,
    /// Number of seeds (default: 2, or 5 with --full).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub seeds: Option<u32>,
    /// Results go to DIR/NAME/ (report.md, charts, results.json).
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Testbed prefix to start from: 1..=5 characters of [a-z0-9] starting with a letter (each
    /// testbed of the experiment appends one); default: x and the pid's last three digits.
    #[arg(long, value_parser = parse_base_prefix)]
    pub prefix: Option<String>,
    /// Time scale of the experiments (default: the ECMP and placement ones calibrate it on this
    /// machine, from 20000 doubling until the endpoints keep 70% of their rate; incast and
    /// pfc-storm run at 16000, where a 2-core machine's endpoints keep up with an incast).
    #[arg(long, value_parser = parse_time_scale)]
    pub time_scale: Option<u64>,
    /// A line per run on stderr.
    #[arg(long, short)]
    pub verbose: bool,
    /// Where the cases run: the testbed (default) or the packet-level twin (`packet`; results
    /// under DIR/NAME-packet/).
    #[arg(long, value_enum, default_value_t = ExperimentModel::Testbed)]
    pub model: ExperimentModel,
    /// With --model packet: a synthetic fabric instead of the scenario's testbed topology.
    #[arg(long, value_enum)]
    pub scale: Option<crate::forwarding::fabric::Scale>,
}

/// Where an experiment's cases run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExperimentModel {
    Testbed,
    Packet,
}

impl ExperimentArgs {
    /// Whether the command brings up testbeds of its own (any run on the testbed), which Ctrl-C
    /// must not leave behind.
    pub fn builds_testbeds(&self) -> bool {
        self.name != "list" && self.model == ExperimentModel::Testbed
    }
}

/// The longest `--prefix`: each testbed of an experiment appends a character to it
/// (`Ctx::fresh_prefix`), and a testbed's prefix has at most `MAX_PREFIX_LEN`.
const BASE_PREFIX_LEN: usize = crate::model::topology::validate::MAX_PREFIX_LEN - 1;

/// `--prefix`: a testbed prefix short enough for the experiment's testbeds to extend.
fn parse_base_prefix(s: &str) -> Result<String, String> {
    let what = "an experiment's prefix (each of its testbeds appends a character)";
    crate::model::topology::validate::parse_prefix_up_to(s, BASE_PREFIX_LEN, what)
}

/// Options that would be ignored, refused by name.
fn check(args: &ExperimentArgs) -> Result<()> {
    // The twin builds no testbed and keeps modelled time itself (at time scale 1).
    let testbed_only = [("--prefix", args.prefix.is_some()), ("--time-scale", args.time_scale.is_some())];
    let given = testbed_only.iter().find(|(_, given)| *given).map(|(flag, _)| flag);
    match given {
        Some(flag) if args.model == ExperimentModel::Packet => {
            bail!("{flag}: a testbed's option, and --model packet runs no testbed (drop it, or drop --model packet)")
        }
        Some(flag) if args.name == super::cc_at_400g::SCENARIO.name => {
            bail!("{flag}: a testbed's option, and {} runs on the packet twin only", args.name)
        }
        _ => Ok(()),
    }
}

pub fn main(args: &ExperimentArgs) -> Result<()> {
    check(args)?;
    let opts = Options {
        full: args.full,
        seeds: args.seeds,
        out: args.out.clone(),
        prefix: args.prefix.clone(),
        verbose: args.verbose,
        time_scale: args.time_scale,
        control: None,
        twin: match args.model {
            ExperimentModel::Packet => Some(super::twin::TwinModel { scale: args.scale }),
            ExperimentModel::Testbed if args.scale.is_some() => bail!("--scale: needs --model packet"),
            ExperimentModel::Testbed => None,
        },
    };
    match args.name.as_str() {
        "list" => {
            for s in ALL {
                println!("{}\n    {}\n", s.name, textwrap(s.summary, 92, "    "));
            }
            println!(
                "Run one with `fabric experiment NAME [--full] [--seeds N] [--out DIR]`, all with `fabric experiment \
                 all`."
            );
        }
        "all" => {
            let bar = ProgressBar::new(ALL.len() as u64);
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} {msg}").expect("valid"),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            let mut failed = Vec::new();
            let mut summary = Vec::new();
            for s in ALL {
                bar.set_message(s.name);
                match bar.suspend(|| super::run(s.name, &opts)) {
                    Ok((r, dir)) => {
                        bar.suspend(|| super::print_summary(&r, &dir));
                        let (yes, no, unsure) = super::verdict::tally(&r.outcome.verdicts);
                        summary.push(format!(
                            "{:<14} {yes} match, {no} do not, {unsure} inconclusive  {:>5.0} s  {}",
                            s.name,
                            r.wall_seconds,
                            dir.join("report.md").display()
                        ));
                    }
                    Err(e) => {
                        bar.suspend(|| eprintln!("experiment {} failed: {e:#}", s.name));
                        failed.push(s.name);
                    }
                }
                bar.inc(1);
            }
            bar.finish_and_clear();
            println!("\nsummary:");
            for l in summary {
                println!("  {l}");
            }
            if !failed.is_empty() {
                bail!("{} experiment(s) failed: {}", failed.len(), failed.join(", "));
            }
        }
        name => {
            let (r, dir) = super::run(name, &opts)?;
            super::print_summary(&r, &dir);
        }
    }
    Ok(())
}

fn textwrap(s: &str, width: usize, indent: &str) -> String {
    let mut out = String::new();
    let mut line = 0;
    for w in s.split_whitespace() {
        if line > 0 && line + 1 + w.len() > width {
            out.push('\n');
            out.push_str(indent);
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(w);
        line += w.len();
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::ExperimentArgs;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        experiment: ExperimentArgs,
    }

    /// `--prefix` and `--time-scale` set up testbeds: with the packet twin they are refused,
    /// with the testbed taken.
    #[test]
    fn testbed_options_with_the_packet_twin_are_refused_by_name() {
        let check = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["experiment", "incast"][..], args].concat()).unwrap();
            super::check(&cli.experiment).map_err(|e| e.to_string())
        };
        for flag in [&["--prefix", "ab"][..], &["--time-scale", "16000"]] {
            check(flag).unwrap();
            let e = check(&[flag, &["--model", "packet"]].concat()).unwrap_err();
            assert!(e.starts_with(flag[0]) && e.contains("--model packet runs no testbed"), "{e}");
        }
        check(&["--model", "packet", "--seeds", "3"]).unwrap();
        let cli = Cli::try_parse_from(["experiment", "cc-at-400g", "--time-scale", "16000"]).unwrap();
        let e = super::check(&cli.experiment).unwrap_err().to_string();
        assert!(e.contains("cc-at-400g runs on the packet twin only"), "{e}");
    }

    /// `--prefix` leaves room for the character each testbed appends, and says so when it is too
    /// long; otherwise it is checked as a testbed's prefix.
    #[test]
    fn an_experiment_prefix_leaves_room_for_its_testbeds() {
        let parse = |p: &str| Cli::try_parse_from(["experiment", "incast", "--prefix", p]).map(|c| c.experiment.prefix);
        assert_eq!(parse("abcde").unwrap().as_deref(), Some("abcde"));
        for (bad, said) in [("abcdef", "too long"), ("1ab", "does not start with a letter")] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(said) && e.contains("an experiment's prefix") && e.contains("1..=5"), "{bad}: {e}");
        }
    }

    /// `--seeds 0` and time scales no topology may have are refused at the command line, by name.
    #[test]
    fn seeds_and_time_scales_out_of_range_are_refused_by_name() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from([&["experiment", "incast"][..], args].concat())
                .map(|c| (c.experiment.seeds, c.experiment.time_scale))
        };
        assert_eq!(parse(&["--seeds", "3", "--time-scale", "16000"]).unwrap(), (Some(3), Some(16000)));
        for bad in [&["--seeds", "0"][..], &["--time-scale", "0"], &["--time-scale", "2000000"]] {
            let e = parse(bad).expect_err("refused").to_string();
            assert!(e.contains(bad[0]), "{bad:?}: {e}");
        }
    }
}
