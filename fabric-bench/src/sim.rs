//! `fabric-bench sim`: wall time of the simulator on 1K, 4K and 24K-GPU fabrics (ring AllReduce,
//! eecmp, 8 QPs per connection), absolute and as a ratio against the 1K run of the same
//! benchmark (this machine is noisy; ratios are what compare across runs).
use std::time::Instant;

use anyhow::Result;
use fabric_common::config::HashMode;
use serde::Serialize;

use fabric_user::{
    endpoint::{EndpointOptions, SportPolicy},
    model::placement::Placement,
    model::workload::Collective,
};
use fabric_user::{
    forwarding::fabric::Scale,
    sim::{SimOptions, cli::build_fabric, simulate},
};

/// Rounds per scale; the median is reported.
const ROUNDS: usize = 3;

#[derive(Debug, Serialize)]
pub struct SimBenchRow {
    pub scale: &'static str,
    pub hosts: usize,
    pub qps_per_step: usize,
    /// Building the fabric description (plan, groups), seconds (median).
    pub build_s: f64,
    /// Simulating the collective (flows, paths, fair share), seconds (median).
    pub simulate_s: f64,
    pub total_s: f64,
    pub total_vs_1k: f64,
    pub rtsw_max_over_mean: f64,
    pub completion_s: f64,
}

#[derive(Debug, Serialize)]
pub struct SimBenchReport {
    pub workload: &'static str,
    pub hash: &'static str,
    pub qps: u32,
    pub rounds: usize,
    pub rows: Vec<SimBenchRow>,
    /// The 24K-GPU run's total wall time; the target is under 10 s.
    pub total_24k_s: f64,
}

pub fn sim() -> Result<SimBenchReport> {
    let mut rows: Vec<SimBenchRow> = Vec::new();
    for scale in [Scale::K1, Scale::K4, Scale::K24] {
        let mut samples = Vec::new();
        for _ in 0..ROUNDS {
            let t = Instant::now();
            let mut fabric = build_fabric(None, Some(scale))?;
            let build_s = t.elapsed().as_secs_f64();
            let o = SimOptions {
                collective: Collective::Allreduce,
                ranks: None,
                message_bytes: 256 << 20,
                placement: Placement::Contiguous,
                seed: 1,
                hash: HashMode::Eecmp,
                hash_seed: None,
                endpoint: EndpointOptions { qps: 8, sport: SportPolicy::PerQp, path_mtu: 4096, ..Default::default() },
            };
            let t = Instant::now();
            let r = simulate(&mut fabric, &o)?;
            samples.push((build_s, t.elapsed().as_secs_f64(), r));
        }
        samples.sort_by(|a, b| (a.0 + a.1).total_cmp(&(b.0 + b.1)));
        let (build_s, simulate_s, r) = samples.swap_remove(ROUNDS / 2);
        let base = rows.first().map_or(build_s + simulate_s, |b| b.total_s);
        rows.push(SimBenchRow {
            scale: scale.as_str(),
            hosts: r.hosts,
            qps_per_step: r.qps_per_step,
            build_s,
            simulate_s,
            total_s: build_s + simulate_s,
            total_vs_1k: (build_s + simulate_s) / base,
            rtsw_max_over_mean: r.tiers.iter().find(|t| t.tier == "rtsw").map_or(0.0, |t| t.mean_max_over_mean),
            completion_s: r.completion_s,
        });
    }
    let total_24k_s = rows.last().map_or(0.0, |r| r.total_s);
    Ok(SimBenchReport { workload: "allreduce", hash: "eecmp", qps: 8, rounds: ROUNDS, rows, total_24k_s })
}

pub fn print_sim(r: &SimBenchReport) {
    println!("simulator wall time: ring AllReduce, {}, {} QPs, median of {} rounds", r.hash, r.qps, r.rounds);
    println!(
        "{:<6} {:>7} {:>10} {:>9} {:>11} {:>9} {:>8} {:>14} {:>14}",
        "scale", "hosts", "QPs/step", "build s", "simulate s", "total s", "vs 1k", "rtsw max/mean", "modelled s"
    );
    for w in &r.rows {
        println!(
            "{:<6} {:>7} {:>10} {:>9.3} {:>11.3} {:>9.3} {:>8.2} {:>14.2} {:>14.4}",
            w.scale,
            w.hosts,
            w.qps_per_step,
            w.build_s,
            w.simulate_s,
            w.total_s,
            w.total_vs_1k,
            w.rtsw_max_over_mean,
            w.completion_s
        );
    }
    println!(
        "24K GPUs: {:.2} s ({} the 10 s target)",
        r.total_24k_s,
        if r.total_24k_s < 10.0 { "within" } else { "OVER" }
    );
}
