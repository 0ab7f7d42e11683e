//! `fabric run WORKLOAD`: a collective on the testbed's hosts with our RoCEv2 endpoints, and what
//! the fabric did meanwhile (uplink load and balance from the XDP counters).
use anyhow::{Context as _, Result, ensure};
use fabric_common::config::HashMode;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::{
    endpoint::{
        EndpointOptions, SportPolicy,
        engine::{FlowResult, HostTransfer, run_step},
    },
    placement::Placement,
    stats::{UplinkBytes, UplinkLoad},
    testbed::{self, State},
    workload::{Collective, schedule},
};

/// A run as the command line or a workload file states it (one definition for both).
#[derive(Clone, Debug, clap::Args, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// allreduce (ring), alltoall, incast, permutation.
    #[arg(value_enum, required_unless_present = "file")]
    pub workload: Option<Collective>,
    /// Number of ranks (default: every host).
    #[arg(long)]
    #[serde(default)]
    pub ranks: Option<usize>,
    /// Message size per rank, bytes (K, M, G = x1000; Ki, Mi, Gi = x1024).
    #[arg(long, default_value = "4Mi")]
    #[serde(default = "RunSpec::default_message")]
    pub message: String,
    #[arg(long, default_value_t = 1)]
    #[serde(default = "RunSpec::one")]
    pub iterations: u32,
    /// contiguous, fragmented, random:SEED or hosts:H1,H2,...
    #[arg(long, default_value = "contiguous")]
    #[serde(default = "RunSpec::default_placement")]
    pub placement: String,
    /// QPs per connection (QP scaling).
    #[arg(long, default_value_t = 1)]
    #[serde(default = "RunSpec::one")]
    pub qps: u32,
    /// UDP source port policy.
    #[arg(long, value_enum, default_value = "per-qp")]
    #[serde(default = "RunSpec::default_sport")]
    pub sport: SportPolicy,
    /// Set every switch's hash mode first: five-tuple, eecmp, pin.
    #[arg(long)]
    #[serde(default)]
    pub hash: Option<String>,
    /// Re-seed every switch's hash.
    #[arg(long)]
    #[serde(default)]
    pub hash_seed: Option<u32>,
    /// Rate of one connection (all its QPs), bits/s (K, M, G = x1000).
    #[arg(long, default_value = "100M")]
    #[serde(default = "RunSpec::default_rate")]
    pub rate: String,
    /// RoCE path MTU (256, 512, 1024, 2048).
    #[arg(long, default_value_t = 1024)]
    #[serde(default = "RunSpec::default_path_mtu")]
    pub path_mtu: u32,
    /// The responder ACKs every N packets (and at message end).
    #[arg(long, default_value_t = 4)]
    #[serde(default = "RunSpec::default_ack_every")]
    pub ack_every: u32,
    /// Workload seed (permutation).
    #[arg(long, default_value_t = 1)]
    #[serde(default = "RunSpec::one_u64")]
    pub seed: u64,
}

impl RunSpec {
    fn default_message() -> String {
        "4Mi".into()
    }
    fn one() -> u32 {
        1
    }
    fn one_u64() -> u64 {
        1
    }
    fn default_placement() -> String {
        "contiguous".into()
    }
    fn default_sport() -> SportPolicy {
        SportPolicy::PerQp
    }
    fn default_rate() -> String {
        "100M".into()
    }
    fn default_path_mtu() -> u32 {
        1024
    }
    fn default_ack_every() -> u32 {
        4
    }

    /// Reads a workload file (TOML; the fields are the long flags of `fabric run`).
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading workload {}", path.display()))?;
        let spec: RunSpec = toml::from_str(&text).with_context(|| format!("workload file {}", path.display()))?;
        ensure!(spec.workload.is_some(), "{}: `workload` is missing", path.display());
        Ok(spec)
    }

    pub fn to_options(&self) -> Result<RunOptions> {
        let hash = self
            .hash
            .as_deref()
            .map(|h| HashMode::parse(h).with_context(|| format!("hash: unknown mode {h:?}; five-tuple, eecmp or pin")))
            .transpose()?;
        Ok(RunOptions {
            collective: self.workload.context("no workload given")?,
            ranks: self.ranks,
            message_bytes: parse_size(&self.message).map_err(|e| anyhow::anyhow!("message: {e}"))?,
            iterations: self.iterations,
            placement: Placement::parse(&self.placement)?,
            hash,
            hash_seed: self.hash_seed,
            seed: self.seed,
            endpoint: EndpointOptions {
                qps: self.qps,
                sport: self.sport,
                path_mtu: self.path_mtu,
                rate_bps: parse_size(&self.rate).map_err(|e| anyhow::anyhow!("rate: {e}"))?,
                ack_every: self.ack_every,
                ..Default::default()
            },
        })
    }
}

/// `4Mi`, `100M`, `1500`: K, M, G multiply by 1000 (rates), Ki, Mi, Gi by 1024 (sizes).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        None => (s, 1u64),
        Some((i, _)) => {
            let mult = match &s[i..] {
                "K" | "k" => 1_000,
                "M" => 1_000_000,
                "G" => 1_000_000_000,
                "Ki" => 1 << 10,
                "Mi" => 1 << 20,
                "Gi" => 1 << 30,
                other => return Err(format!("unknown suffix {other:?}: use K, M, G (x1000) or Ki, Mi, Gi (x1024)")),
            };
            (&s[..i], mult)
        }
    };
    num.parse::<u64>().map(|n| n * mult).map_err(|e| format!("{s:?}: {e}"))
}

/// The version of the results schema (documented in `testbed/workloads/README.md`).
pub const RESULTS_SCHEMA: &str = "fabric.run/1";

#[derive(Clone, Debug, Serialize)]
pub struct RunOptions {
    pub collective: Collective,
    /// Number of ranks (default: every host).
    pub ranks: Option<usize>,
    pub message_bytes: u64,
    pub iterations: u32,
    pub placement: Placement,
    /// Hash mode to set on every switch before the run (default: leave as configured); the
    /// result's `hash` field records the mode in force.
    #[serde(skip)]
    pub hash: Option<HashMode>,
    /// Re-seed every switch's hash (per switch: derived from this and its position).
    pub hash_seed: Option<u32>,
    /// Seed of the workload itself (permutation).
    pub seed: u64,
    pub endpoint: EndpointOptions,
}

#[derive(Clone, Debug, Serialize)]
pub struct IterationResult {
    /// Collective completion time, ns.
    pub completion_ns: u64,
    pub step_ns: Vec<u64>,
}

/// Uplink balance over all RTSWs that carried traffic.
#[derive(Clone, Debug, Serialize)]
pub struct BalanceSummary {
    pub mean_max_over_mean: f64,
    pub worst_max_over_mean: f64,
    pub mean_jain: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub schema: &'static str,
    pub testbed: String,
    pub options: RunOptions,
    /// Host of each rank.
    pub placement: Vec<String>,
    /// Switch hash mode during the run.
    pub hash: String,
    pub iterations: Vec<IterationResult>,
    /// Every flow of every step of the last iteration.
    pub flows: Vec<FlowResult>,
    pub uplinks: Vec<UplinkLoad>,
    pub balance: BalanceSummary,
    /// Bytes the collective had to move, and bytes the receivers accepted (in order, once).
    pub bytes_needed: u64,
    pub bytes_delivered: u64,
    /// Achieved over intended rate, averaged over flows: well under 1 means this machine's CPU,
    /// not the fabric, limited the run.
    pub achieved_over_intended: f64,
    pub cpu_limited: bool,
}

pub fn balance(uplinks: &[UplinkLoad]) -> BalanceSummary {
    let active: Vec<&UplinkLoad> = uplinks.iter().filter(|u| u.tx_bytes.iter().any(|t| t.1 > 0)).collect();
    let n = active.len().max(1) as f64;
    BalanceSummary {
        mean_max_over_mean: active.iter().map(|u| u.max_over_mean).sum::<f64>() / n,
        worst_max_over_mean: active.iter().map(|u| u.max_over_mean).fold(0.0, f64::max),
        mean_jain: active.iter().map(|u| u.jain).sum::<f64>() / n,
    }
}

pub fn run(state: &State, opts: &RunOptions, quiet: bool) -> Result<RunResult> {
    crate::netns::require_capabilities()?;
    let plan = &state.plan;
    ensure!(opts.iterations >= 1, "at least one iteration");
    ensure!(opts.endpoint.path_mtu + 20 + 8 + 12 + 16 + 4 <= plan.topology.mtu, "path MTU {} does not fit the link MTU {}", opts.endpoint.path_mtu, plan.topology.mtu);
    let ranks = opts.ranks.unwrap_or_else(|| plan.hosts().count());
    let hosts = opts.placement.place(plan, ranks)?;
    if let Some(mode) = opts.hash {
        testbed::set_hash_mode(state, mode, opts.hash_seed)?;
    }
    let hash = match opts.hash {
        Some(m) => m.as_str().to_string(),
        None => plan.nodes[plan.switches().next().context("no switches")?].hash.as_str().to_string(),
    };
    let steps = schedule(opts.collective, ranks, opts.message_bytes, opts.seed);
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(u64::from(opts.iterations) * steps.len() as u64) };
    bar.set_style(ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} steps {msg}").expect("valid"));

    let before = UplinkBytes::read(state)?;
    let mut iterations = Vec::new();
    let mut flows = Vec::new();
    let mut bytes_needed = 0;
    let mut bytes_delivered = 0;
    for it in 0..opts.iterations {
        bar.set_message(format!("iteration {}", it + 1));
        let mut step_ns = Vec::new();
        flows.clear();
        for step in &steps {
            let transfers: Vec<HostTransfer> =
                step.iter().map(|t| HostTransfer { src: hosts[t.src], dst: hosts[t.dst], bytes: t.bytes }).collect();
            bytes_needed += transfers.iter().map(|t| t.bytes).sum::<u64>();
            let r = run_step(plan, &transfers, &opts.endpoint)?;
            step_ns.push(r.duration_ns);
            bytes_delivered += r.flows.iter().map(|f| f.bytes_received).sum::<u64>();
            flows.extend(r.flows);
            bar.inc(1);
        }
        iterations.push(IterationResult { completion_ns: step_ns.iter().sum(), step_ns });
    }
    bar.finish_and_clear();
    let uplinks = UplinkBytes::read(state)?.since(&before);
    let achieved: Vec<f64> = flows.iter().map(|f| f.goodput_bps / f.intended_bps as f64).collect();
    let achieved_over_intended = achieved.iter().sum::<f64>() / achieved.len().max(1) as f64;
    Ok(RunResult {
        schema: RESULTS_SCHEMA,
        testbed: plan.topology.prefix.clone(),
        options: opts.clone(),
        placement: hosts.iter().map(|&h| plan.nodes[h].name.clone()).collect(),
        hash,
        iterations,
        bytes_delivered,
        bytes_needed,
        balance: balance(&uplinks),
        uplinks,
        flows,
        achieved_over_intended,
        cpu_limited: achieved_over_intended < 0.8,
    })
}

pub fn print(r: &RunResult) {
    let o = &r.options;
    println!(
        "{} on {} ranks ({}), {} bytes x {} iterations; {} QP(s) per connection, sport {}, switch hash {}",
        o.collective.as_str(),
        r.placement.len(),
        match &o.placement {
            Placement::Contiguous => "contiguous".to_string(),
            Placement::Fragmented => "fragmented".to_string(),
            Placement::Random { seed } => format!("random:{seed}"),
            Placement::Explicit { .. } => "explicit".to_string(),
        },
        o.message_bytes,
        o.iterations,
        o.endpoint.qps,
        o.endpoint.sport.as_str(),
        r.hash
    );
    for (i, it) in r.iterations.iter().enumerate() {
        println!("  iteration {}: completion {:.2} ms", i + 1, it.completion_ns as f64 / 1e6);
    }
    println!("{:<8} {:>9} {:>6}  bytes per uplink (this run)", "rtsw", "max/mean", "jain");
    for u in &r.uplinks {
        let loads: Vec<String> = u.tx_bytes.iter().map(|(p, b)| format!("{p}={b}")).collect();
        println!("{:<8} {:>9.2} {:>6.3}  {}", u.rtsw, u.max_over_mean, u.jain, loads.join(" "));
    }
    println!(
        "uplink balance: mean max/mean {:.2}, worst {:.2}, mean Jain {:.3}",
        r.balance.mean_max_over_mean, r.balance.worst_max_over_mean, r.balance.mean_jain
    );
    let retx: u64 = r.flows.iter().map(|f| f.retransmitted).sum();
    println!(
        "endpoints: achieved/intended rate {:.2}{}; {} retransmitted packets",
        r.achieved_over_intended,
        if r.cpu_limited { " (CPU-limited: this machine, not the fabric, set the pace)" } else { "" },
        retx
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_rates() {
        assert_eq!(parse_size("4Mi"), Ok(4 << 20));
        assert_eq!(parse_size("100M"), Ok(100_000_000));
        assert_eq!(parse_size("1500"), Ok(1500));
        assert!(parse_size("3X").is_err());
        assert!(parse_size("M").is_err());
    }

    #[test]
    fn every_shipped_workload_file_is_valid() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed/workloads");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let spec = RunSpec::from_file(&path).unwrap_or_else(|e| panic!("{e:#}"));
                spec.to_options().unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 5);
    }

    #[test]
    fn bad_workload_files_name_the_problem() {
        let dir = std::env::temp_dir().join(format!("fabric-wl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (text, expect) in [
            ("workload = \"allreduce\"\nqpz = 3\n", "qpz"),
            ("workload = \"ring\"\n", "ring"),
            ("qps = 3\n", "workload"),
            ("workload = \"allreduce\"\nhash = \"random\"\n", "hash"),
            ("workload = \"allreduce\"\nmessage = \"4X\"\n", "message"),
        ] {
            let p = dir.join("w.toml");
            std::fs::write(&p, text).unwrap();
            let err = RunSpec::from_file(&p).and_then(|s| s.to_options()).expect_err(text);
            assert!(format!("{err:#}").contains(expect), "{text}: {err:#}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
