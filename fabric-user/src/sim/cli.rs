//! The command line of `fabric sim`.
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail, ensure};
use fabric_common::config::HashMode;
use serde::Serialize;

use super::{
    SimOptions, SimResult,
    packet::{PacketOptions, simulate_packet_cases},
    print, simulate,
};
use crate::forwarding::fabric::{Scale, SimFabric};
use crate::{
    endpoint::{CcMode, EndpointOptions, SportPolicy},
    endpoint::{MAX_QPS, PATH_MTUS},
    model::fault::check_rate,
    model::placement::Placement,
    model::plan::Plan,
    model::topology::Topology,
    model::topology::parse_hash_mode,
    model::units::Size,
    model::workload::Collective,
};

/// Which simulator runs the cases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// Flow level: max-min fair shares, no queues (fast; balance and a bound on time).
    #[default]
    Flow,
    /// Packet level: the twin, with queues, ECN, PFC and the endpoints' congestion control.
    Packet,
}

#[derive(Clone, Debug, clap::Args)]
pub struct SimArgs {
    /// flow (max-min fair share) or packet (the packet-level twin).
    #[arg(long, value_enum, default_value_t = Model::Flow)]
    pub model: Model,
    /// Packet model: congestion control on top of PFC (repeatable; default: none).
    #[arg(long, value_enum)]
    pub cc: Vec<CcMode>,
    /// Packet model: propagation delay of every link, ns (a topology file states none).
    #[arg(long, default_value_t = 1_000)]
    pub link_delay_ns: u64,
    /// Packet model: a step not finished after this much modelled time is reported unfinished.
    #[arg(long, default_value_t = 10_000)]
    pub deadline_ms: u64,
    /// Packet model: refuse a case whose estimated memory is larger (GiB).
    #[arg(long, default_value_t = 8.0)]
    pub memory_limit_gib: f64,
    /// Topology file (default: the embedded default testbed).
    #[arg(long, conflicts_with = "scale")]
    pub topology: Option<PathBuf>,
    /// A synthetic fabric: 1k, 4k or 24k (= meta: 8 zones x 192 racks x 16 GPUs).
    #[arg(long, value_enum)]
    pub scale: Option<Scale>,
    #[arg(long, value_enum, default_value = "allreduce")]
    pub workload: Collective,
    /// Routing mode(s) to simulate (repeatable; default: five-tuple, eecmp and pin).
    #[arg(long, value_parser = parse_hash_mode)]
    pub hash: Vec<HashMode>,
    /// QPs per connection (repeatable; default: 1 and 8).
    #[arg(long)]
    pub qps: Vec<u32>,
    #[arg(long, value_enum, default_value_t = EndpointOptions::default().sport)]
    pub sport: SportPolicy,
    /// Message size per rank (K, M, G = x1000; Ki, Mi, Gi = x1024); larger than `fabric run`'s
    /// default, since a simulated fabric costs no wall time per byte.
    #[arg(long = "message", alias = "size", default_value_t = Size(256 << 20))]
    pub message: Size,
    /// Ranks (default: every host).
    #[arg(long)]
    pub ranks: Option<usize>,
    /// contiguous, fragmented, random:SEED or hosts:H1,H2,...
    #[arg(long, default_value_t = Placement::Contiguous)]
    pub placement: Placement,
    /// Workload seed (permutation).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Re-seed every switch's hash, as `fabric run --hash-seed`.
    #[arg(long)]
    pub hash_seed: Option<u32>,
    /// RoCE path MTU (the same default as `fabric run`).
    #[arg(long, default_value_t = EndpointOptions::default().path_mtu)]
    pub path_mtu: u32,
    #[arg(long, default_value_t = EndpointOptions::default().ack_every)]
    pub ack_every: u32,
    /// Take a link out of service (repeatable), as `fabric link down` does: routing goes
    /// around it (the controller's tables, at any scale).
    #[arg(long = "down", value_name = "LINK")]
    pub down: Vec<String>,
    /// A degraded link (repeatable): `z0r0:z0c1=100` gives it 100 Gbit/s instead of its own,
    /// as `fabric link degrade --rate` does on the testbed.
    #[arg(long = "degrade", value_name = "LINK=GBPS")]
    pub degrade: Vec<String>,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Faults to simulate, as the CLI names them.
#[derive(Clone, Debug, Default)]
pub struct SimFaults {
    pub down: Vec<String>,
    /// `LINK=GBPS`.
    pub degrade: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct SimReport {
    pub schema: &'static str,
    /// Seconds to build the fabric description (plan and groups).
    pub build_s: f64,
    pub results: Vec<SimResult>,
}

/// The fabric of `--topology` / `--scale`: the controller's tables for small fabrics, the Clos
/// structure for large ones.
pub fn build_fabric(topology: Option<&std::path::Path>, scale: Option<Scale>) -> Result<SimFabric> {
    build_fabric_with(topology, scale, &SimFaults::default())
}

/// The same with `faults`: degraded links get their new rate (the fair share's capacity), and
/// down links send the fabric through the controller's tables without them, at any size.
pub fn build_fabric_with(
    topology: Option<&std::path::Path>,
    scale: Option<Scale>,
    faults: &SimFaults,
) -> Result<SimFabric> {
    let topo = match scale {
        Some(s) => s.topology(),
        None => Topology::load(topology)?,
    };
    let mut plan = Plan::new(&topo);
    for d in &faults.degrade {
        let (spec, rate) = d.split_once('=').with_context(|| format!("--degrade {d:?}: expected LINK=GBPS"))?;
        let l = plan.find_link(spec).with_context(|| format!("--degrade {d:?}"))?;
        let rate: f64 = rate.trim().parse().with_context(|| format!("--degrade {d:?}: {rate:?} is not Gbit/s"))?;
        let nominal = plan.links[l].rate_gbps;
        plan.links[l].rate_gbps = check_rate(rate, nominal).with_context(|| format!("--degrade {d:?}"))?;
    }
    let down = faults
        .down
        .iter()
        .map(|spec| plan.find_link(spec).with_context(|| format!("--down {spec:?}")))
        .collect::<Result<std::collections::BTreeSet<_>>>()?;
    let hosts = plan.hosts().count();
    if hosts <= 512 || !down.is_empty() { Ok(SimFabric::from_controller(&plan, &down)) } else { SimFabric::clos(plan) }
}

pub fn run(a: &SimArgs) -> Result<SimReport> {
    let t = std::time::Instant::now();
    let faults = SimFaults { down: a.down.clone(), degrade: a.degrade.clone() };
    let mut fabric = build_fabric_with(a.topology.as_deref(), a.scale, &faults)?;
    let build_s = t.elapsed().as_secs_f64();
    let modes: Vec<HashMode> = if a.hash.is_empty() { HashMode::ALL.to_vec() } else { a.hash.clone() };
    let qps = if a.qps.is_empty() { vec![1, 8] } else { a.qps.clone() };
    for &q in &qps {
        ensure!((1..=MAX_QPS).contains(&q), "--qps: {q} is not in 1..={MAX_QPS}");
    }
    ensure!(a.message.get() > 0, "--message: must be at least 1 byte");
    ensure!(PATH_MTUS.contains(&a.path_mtu), "--path-mtu: {} is not a RoCE path MTU ({PATH_MTUS:?})", a.path_mtu);
    ensure!(a.ack_every >= 1, "--ack-every: must be at least 1");
    ensure!(a.memory_limit_gib > 0.0, "--memory-limit-gib: must be above 0");
    let packet = PacketOptions {
        link_delay_ns: a.link_delay_ns,
        deadline_ns: a.deadline_ms.saturating_mul(1_000_000),
        seed: a.seed,
        memory_limit_bytes: (a.memory_limit_gib * f64::from(1 << 30)) as u64,
    };
    if a.model != Model::Packet
        && let Some(m) = modes.iter().find(|m| m.reorders_within_a_flow())
    {
        bail!(
            "--hash {}: sends one flow's packets over several paths, and the flow model routes a flow \
             on one (use --model packet)",
            m.as_str()
        );
    }
    let ccs = if a.cc.is_empty() { vec![EndpointOptions::default().cc] } else { a.cc.clone() };
    ensure!(
        a.model == Model::Packet || ccs == [EndpointOptions::default().cc],
        "--cc: the flow model has no congestion control (use --model packet)"
    );
    let mut cases = Vec::new();
    for &hash in &modes {
        for (&q, &cc) in qps.iter().flat_map(|q| ccs.iter().map(move |c| (q, c))) {
            cases.push(SimOptions {
                collective: a.workload,
                ranks: a.ranks,
                message_bytes: a.message.get(),
                placement: a.placement.clone(),
                seed: a.seed,
                hash,
                hash_seed: a.hash_seed,
                endpoint: EndpointOptions {
                    qps: q,
                    sport: a.sport,
                    path_mtu: a.path_mtu,
                    ack_every: a.ack_every,
                    cc,
                    ..Default::default()
                },
            });
        }
    }
    let results = match a.model {
        Model::Flow => cases.iter().map(|o| simulate(&mut fabric, o)).collect::<Result<Vec<_>>>()?,
        Model::Packet => simulate_packet_cases(&fabric, &cases, &packet)?,
    };
    Ok(SimReport { schema: "fabric.sim/1", build_s, results })
}

/// `fabric sim`: run, print, write JSON.
pub fn main(a: &SimArgs) -> Result<()> {
    let report = run(a)?;
    print(&report.results);
    println!("fabric description built in {:.3} s", report.build_s);
    if let Some(path) = &a.json {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    fn completion(args: &[&str]) -> f64 {
        let cli = Cli::try_parse_from([&["sim"], args].concat()).unwrap();
        let report = run(&cli.sim).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(report.results.len(), 1);
        report.results[0].completion_s
    }

    /// Rack z0r0's four uplinks at a quarter of their rate: the ring's one QP out of the rack,
    /// hashed onto one uplink, takes four times as long; eight QPs spread by E-ECMP over the
    /// four uplinks lose less. A down spine link is routed around.
    #[test]
    fn degraded_and_down_links_change_completion_as_the_fair_share_says() {
        let quarter: Vec<String> = (0..4).map(|c| format!("--degrade=z0r0:z0c{c}=100")).collect();
        let quarter: Vec<&str> = quarter.iter().map(String::as_str).collect();
        let one_qp = ["--hash", "five-tuple", "--qps", "1"];
        let (healthy, slow) = (completion(&one_qp), completion(&[&one_qp[..], &quarter].concat()));
        assert!((slow / healthy - 4.0).abs() < 1e-6, "one QP: {slow} s vs {healthy} s");
        let eight = ["--hash", "eecmp", "--qps", "8"];
        let (healthy8, slow8) = (completion(&eight), completion(&[&eight[..], &quarter].concat()));
        assert!(slow8 / healthy8 < 4.0 - 1e-6, "eight QPs lose less: {slow8} s vs {healthy8} s");
        let down = completion(&[&one_qp[..], &["--down", "z0r2:z0c0"]].concat());
        assert!(down.is_finite() && down > 0.0);
    }

    /// One uplink of z0r0 at a quarter of its rate: E-ECMP leaves as many QPs on it as on the
    /// others, WCMP weighs it down, so the ring is never slower with WCMP and often faster. The modes that
    /// split a flow per packet have no flow-model meaning and are refused.
    #[test]
    fn wcmp_weighs_down_a_degraded_uplink_in_the_flow_model() {
        let mut better = 0;
        for seed in ["1", "2", "3"] {
            for q in ["16", "32"] {
                let slow = ["--degrade=z0r0:z0c0=100", "--qps", q, "--hash-seed", seed];
                let eecmp = completion(&[&slow[..], &["--hash", "eecmp"]].concat());
                let wcmp = completion(&[&slow[..], &["--hash", "wcmp"]].concat());
                assert!(wcmp <= eecmp, "seed {seed}, {q} QPs: wcmp {wcmp} s vs eecmp {eecmp} s");
                better += (wcmp < eecmp) as u32;
            }
        }
        // Where E-ECMP's hash collisions elsewhere set the pace, both finish together.
        assert!(better >= 2, "wcmp finished sooner in {better} of 6 cases");
        for mode in ["spray", "adaptive"] {
            let cli = Cli::try_parse_from(["sim", "--hash", mode]).unwrap();
            let e = format!("{:#}", run(&cli.sim).unwrap_err());
            assert!(e.contains(&format!("--hash {mode}")) && e.contains("--model packet"), "{e}");
        }
    }

    #[test]
    fn bad_faults_are_refused_by_name() {
        let err = |args: &[&str]| {
            format!("{:#}", run(&Cli::try_parse_from([&["sim"], args].concat()).unwrap().sim).unwrap_err())
        };
        assert!(err(&["--degrade", "z0r0:z0c0"]).contains("expected LINK=GBPS"));
        assert!(err(&["--degrade", "z0r0:z0c0=500"]).contains("at most its own 400"));
        assert!(err(&["--degrade", "z0r0:z9=100"]).contains("has no port"));
        assert!(err(&["--down", "nope:z0c0"]).contains("no node"));
    }
}
