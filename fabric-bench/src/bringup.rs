//! `fabric-bench bringup`: time to bring up and tear down each shipped topology and synthetic
//! ones of growing size, and how the time grows with the number of links.
use anyhow::Result;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct BringupReport {
    pub rows: Vec<BringupRow>,
    /// Least-squares fit of up time over links: seconds = intercept + per_link * links.
    pub fit_intercept_s: f64,
    pub fit_per_link_ms: f64,
    /// Coefficient of determination of that fit (1 = perfectly linear).
    pub fit_r2: f64,
}

#[derive(Debug, Serialize)]
pub struct BringupRow {
    pub topology: String,
    pub hosts: usize,
    pub namespaces: usize,
    pub links: usize,
    pub up_s: f64,
    pub down_s: f64,
    pub up_ms_per_link: f64,
}

fn synthetic(hosts: u32) -> fabric_user::model::topology::Topology {
    let mut t = fabric_user::model::topology::Topology::default_topology();
    t.name = format!("synthetic-{hosts}");
    t.zones[0].hosts_per_rack = 4;
    t.zones[0].racks = hosts / 4;
    t.zones[0].spines = if hosts > 64 { 8 } else { 4 };
    t
}

pub fn bringup() -> Result<BringupReport> {
    use fabric_user::{model::topology::Topology, testbed};
    const PREFIX: &str = "fbup";
    let _guard = fabric_user::testbed::DownOnDrop(PREFIX.into());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed");
    let mut topologies = Vec::new();
    for f in ["default.toml", "two-zones.toml", "large.toml"] {
        let path = dir.join(f);
        topologies.push(Topology::parse(&std::fs::read_to_string(&path)?, &path.display().to_string())?);
    }
    for hosts in [8, 16, 32, 64, 128, 256] {
        topologies.push(synthetic(hosts));
    }
    let mut rows = Vec::new();
    for mut t in topologies {
        t.prefix = PREFIX.into();
        testbed::down(PREFIX)?;
        let plan = fabric_user::model::plan::Plan::new(&t);
        let start = std::time::Instant::now();
        testbed::up(&t, true)?;
        let up_s = start.elapsed().as_secs_f64();
        let start = std::time::Instant::now();
        testbed::down(PREFIX)?;
        let down_s = start.elapsed().as_secs_f64();
        rows.push(BringupRow {
            topology: t.name.clone(),
            hosts: plan.hosts().count(),
            namespaces: plan.nodes.len(),
            links: plan.links.len(),
            up_s,
            down_s,
            up_ms_per_link: up_s * 1e3 / plan.links.len() as f64,
        });
    }
    // Fit over the synthetic series only (same shape, growing size).
    let pts: Vec<(f64, f64)> =
        rows.iter().filter(|r| r.topology.starts_with("synthetic")).map(|r| (r.links as f64, r.up_s)).collect();
    let n = pts.len() as f64;
    let (mx, my) = (pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n);
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let ss_tot: f64 = pts.iter().map(|p| (p.1 - my).powi(2)).sum();
    let ss_res: f64 = pts.iter().map(|p| (p.1 - intercept - slope * p.0).powi(2)).sum();
    Ok(BringupReport { rows, fit_intercept_s: intercept, fit_per_link_ms: slope * 1e3, fit_r2: 1.0 - ss_res / ss_tot })
}

pub fn print_bringup(r: &BringupReport) {
    println!("bringup: `fabric up` / `fabric down` wall time per topology");
    println!(
        "{:<22} {:>6} {:>11} {:>6} {:>8} {:>8} {:>12}",
        "topology", "hosts", "namespaces", "links", "up s", "down s", "up ms/link"
    );
    for row in &r.rows {
        println!(
            "{:<22} {:>6} {:>11} {:>6} {:>8.2} {:>8.2} {:>12.2}",
            row.topology, row.hosts, row.namespaces, row.links, row.up_s, row.down_s, row.up_ms_per_link
        );
    }
    println!(
        "growth (synthetic series): up = {:.2} s + {:.2} ms x links, R^2 = {:.3}",
        r.fit_intercept_s, r.fit_per_link_ms, r.fit_r2
    );
}
