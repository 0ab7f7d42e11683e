//! `fabric-bench bringup`: time to bring up and tear down each shipped topology and synthetic
//! ones of growing size (8 to 4,096 hosts), how the time grows with the number of links, and the
//! kernel memory a testbed takes per namespace.
//!
//! Memory is read from /proc/meminfo: the growth of `Slab + VmallocUsed + Percpu` (the
//! kernel's own allocations: network devices, sockets, routes, neighbours, sysctl tables, BPF
//! maps and programs) from just before `up` to just after it, divided by the testbed's
//! namespaces. Before each `up` the bench waits for the kernel to finish freeing the previous
//! testbed (namespaces are destroyed in the background after `down`). The machine's other
//! processes move these counters too, so it is a median over the repetitions, not an exact
//! account.
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use fabric_user::{model::plan::Plan, model::topology::Topology, testbed};
use serde::Serialize;

use crate::stats::median;

/// What the bench runs; the defaults fit in about ten minutes on a 2-core machine.
#[derive(Debug, Clone)]
pub struct BringupOptions {
    /// Host counts of the large synthetic series (16 hosts per rack, 16 spines).
    pub sizes: Vec<u32>,
    /// Repetitions of each size of the large series below 4,096 hosts.
    pub reps: usize,
    /// Repetitions at 4,096 hosts (about two minutes each on a busy 2-core machine).
    pub reps_4096: usize,
}

impl Default for BringupOptions {
    fn default() -> Self {
        BringupOptions { sizes: vec![512, 1024, 2048, 4096], reps: 3, reps_4096: 2 }
    }
}

#[derive(Debug, Serialize)]
pub struct BringupReport {
    pub rows: Vec<BringupRow>,
    /// Least-squares fit of up time over links, small synthetic series (8..256 hosts, 4 per
    /// rack): seconds = intercept + per_link * links.
    pub fit_intercept_s: f64,
    pub fit_per_link_ms: f64,
    /// Coefficient of determination of that fit (1 = perfectly linear).
    pub fit_r2: f64,
    /// The same fit over the large series (512..4,096 hosts, 16 per rack, 16 spines), on the
    /// median up time of each size.
    pub large_fit_intercept_s: f64,
    pub large_fit_per_link_ms: f64,
    pub large_fit_r2: f64,
    /// What the memory columns measure.
    pub memory_measure: String,
    /// Least squares without intercept over the testbeds of at least 100 namespaces:
    /// kernel KiB = per_switch * switches + per_host * hosts (small testbeds are within noise).
    pub memory_kib_per_switch: f64,
    pub memory_kib_per_host: f64,
    /// Repetitions that succeeded, of all attempted.
    pub reps_ok: usize,
    pub reps_total: usize,
}

#[derive(Debug, Serialize)]
pub struct BringupRow {
    pub topology: String,
    pub hosts: usize,
    pub namespaces: usize,
    pub links: usize,
    pub switches: usize,
    /// LPM entries (IPv4 and IPv6) written into all switches at `up`: the part of bring-up's work
    /// that grows with switches x racks rather than with links.
    pub routes: usize,
    pub reps: usize,
    pub reps_ok: usize,
    /// Why the failed repetitions failed.
    pub errors: Vec<String>,
    /// Median over the successful repetitions.
    pub up_s: f64,
    pub up_s_min: f64,
    pub up_s_max: f64,
    pub down_s: f64,
    pub up_ms_per_link: f64,
    /// Kernel memory (Slab + VmallocUsed + Percpu) the testbed added, per namespace.
    pub kib_per_namespace: f64,
    pub slab_kib_per_namespace: f64,
    pub vmalloc_kib_per_namespace: f64,
    pub percpu_kib_per_namespace: f64,
    /// Median wall time of each phase of `up`.
    pub phases: Vec<(String, f64)>,
}

/// The kernel counters of /proc/meminfo the bench reads, in KiB.
#[derive(Debug, Clone, Copy, Default)]
struct KernelMemory {
    slab: u64,
    vmalloc: u64,
    percpu: u64,
}

impl KernelMemory {
    fn read() -> Result<Self> {
        let text = std::fs::read_to_string("/proc/meminfo")?;
        let field = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        Ok(KernelMemory { slab: field("Slab"), vmalloc: field("VmallocUsed"), percpu: field("Percpu") })
    }

    fn total(&self) -> u64 {
        self.slab + self.vmalloc + self.percpu
    }

    /// Waits (at most `limit`) until the counters stop falling: the namespaces of a testbed
    /// that was just taken down are freed by the kernel in the background.
    fn settled(limit: Duration) -> Result<Self> {
        let deadline = Instant::now() + limit;
        let mut last = KernelMemory::read()?;
        let mut steady = 0;
        loop {
            std::thread::sleep(Duration::from_millis(500));
            let now = KernelMemory::read()?;
            // Twice within 4 MiB of half a second before: nothing big is being freed any more.
            steady = if now.total().abs_diff(last.total()) < 4096 { steady + 1 } else { 0 };
            if steady >= 2 || Instant::now() >= deadline {
                return Ok(now);
            }
            last = now;
        }
    }
}

fn synthetic(hosts: u32) -> Topology {
    let mut t = Topology::default_topology();
    t.name = format!("synthetic-{hosts}");
    t.zones[0].hosts_per_rack = 4;
    t.zones[0].racks = hosts / 4;
    t.zones[0].spines = if hosts > 64 { 8 } else { 4 };
    t
}

/// The shape of the large testbed: 16 hosts per rack, 16 spines (two links per host).
fn synthetic_large(hosts: u32) -> Topology {
    let mut t = Topology::default_topology();
    t.name = format!("large-{hosts}");
    t.zones[0].hosts_per_rack = 16;
    t.zones[0].racks = hosts / 16;
    t.zones[0].spines = 16;
    t
}

/// Least squares of y over x: (intercept, slope, R^2).
fn fit(pts: &[(f64, f64)]) -> (f64, f64, f64) {
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let (mx, my) = (pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n);
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let ss_tot: f64 = pts.iter().map(|p| (p.1 - my).powi(2)).sum();
    let ss_res: f64 = pts.iter().map(|p| (p.1 - intercept - slope * p.0).powi(2)).sum();
    (intercept, slope, 1.0 - ss_res / ss_tot)
}

/// Kernel memory = a * switches + b * hosts, least squares over the rows of at least 100
/// namespaces: (a, b) in KiB.
fn memory_fit(rows: &[BringupRow]) -> (f64, f64) {
    let pts: Vec<(f64, f64, f64)> = rows
        .iter()
        .filter(|r| r.namespaces >= 100 && r.reps_ok > 0)
        .map(|r| (r.switches as f64, r.hosts as f64, r.kib_per_namespace * r.namespaces as f64))
        .collect();
    let (sxx, sxy, syy) = pts.iter().fold((0.0, 0.0, 0.0), |a, p| (a.0 + p.0 * p.0, a.1 + p.0 * p.1, a.2 + p.1 * p.1));
    let (sxz, syz) = pts.iter().fold((0.0, 0.0), |a, p| (a.0 + p.0 * p.2, a.1 + p.1 * p.2));
    let det = sxx * syy - sxy * sxy;
    if pts.len() < 2 || det.abs() < 1e-9 {
        return (f64::NAN, f64::NAN);
    }
    ((sxz * syy - syz * sxy) / det, (syz * sxx - sxz * sxy) / det)
}

const PREFIX: &str = "fbup";

/// Brings `t` up and down `reps` times under the bench's prefix.
fn measure(mut t: Topology, reps: usize) -> Result<BringupRow> {
    t.prefix = PREFIX.into();
    let plan = Plan::new(&t);
    let (namespaces, links) = (plan.nodes.len(), plan.links.len());
    let (mut ups, mut downs, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    let (mut mem, mut slab, mut vmalloc, mut percpu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut phases: Vec<(String, Vec<f64>)> = Vec::new();
    for _ in 0..reps {
        testbed::down(PREFIX)?;
        let before = KernelMemory::settled(Duration::from_secs(60))?;
        let start = Instant::now();
        // Guarded: a Ctrl-C meanwhile waits for `up` to end, then removes what it built.
        match testbed::interrupt::guarded_step(|| testbed::up(&t, true)) {
            Ok(summary) => {
                ups.push(start.elapsed().as_secs_f64());
                let after = KernelMemory::read()?;
                let per_ns = |a: u64, b: u64| (a as f64 - b as f64) / namespaces as f64;
                mem.push(per_ns(after.total(), before.total()));
                slab.push(per_ns(after.slab, before.slab));
                vmalloc.push(per_ns(after.vmalloc, before.vmalloc));
                percpu.push(per_ns(after.percpu, before.percpu));
                for (i, (name, s)) in summary.phases.into_iter().enumerate() {
                    match phases.get_mut(i) {
                        Some(p) => p.1.push(s),
                        None => phases.push((name, vec![s])),
                    }
                }
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
        let start = Instant::now();
        testbed::down(PREFIX)?;
        downs.push(start.elapsed().as_secs_f64());
    }
    let up_s = median(&mut ups);
    Ok(BringupRow {
        topology: t.name.clone(),
        hosts: plan.hosts().count(),
        namespaces,
        links,
        switches: plan.switches().count(),
        routes: route_entries(&plan),
        reps,
        reps_ok: ups.len(),
        errors,
        up_s,
        up_s_min: ups.first().copied().unwrap_or(f64::NAN),
        up_s_max: ups.last().copied().unwrap_or(f64::NAN),
        down_s: median(&mut downs),
        up_ms_per_link: up_s * 1e3 / links as f64,
        kib_per_namespace: median(&mut mem),
        slab_kib_per_namespace: median(&mut slab),
        vmalloc_kib_per_namespace: median(&mut vmalloc),
        percpu_kib_per_namespace: median(&mut percpu),
        phases: phases.into_iter().map(|(n, mut s)| (n, median(&mut s))).collect(),
    })
}

pub fn bringup(opts: &BringupOptions) -> Result<BringupReport> {
    let _guard = fabric_user::testbed::DownOnDrop::owned(PREFIX.into());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed");
    let mut runs = Vec::new();
    for f in ["default.toml", "two-zones.toml", "large.toml"] {
        let path = dir.join(f);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        runs.push((Topology::parse(&text, &path.display().to_string())?, 1));
    }
    for hosts in [8, 16, 32, 64, 128, 256] {
        runs.push((synthetic(hosts), 1));
    }
    for &hosts in &opts.sizes {
        if !hosts.is_multiple_of(16) || hosts == 0 || hosts > 4096 {
            bail!("--sizes: {hosts} is not a multiple of 16 in 16..=4096 (16 hosts per rack, at most 256 racks)");
        }
        runs.push((synthetic_large(hosts), if hosts >= 4096 { opts.reps_4096 } else { opts.reps }));
    }
    let mut rows = Vec::new();
    for (t, reps) in runs {
        if reps == 0 {
            continue;
        }
        let row = measure(t, reps)?;
        eprintln!(
            "bringup: {} ({} links): {}/{} up, median {:.2} s",
            row.topology, row.links, row.reps_ok, row.reps, row.up_s
        );
        for e in &row.errors {
            eprintln!("    failed: {e}");
        }
        rows.push(row);
    }
    // A size whose every repetition failed has no up time (NaN): it would spoil the fit.
    let small: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.topology.starts_with("synthetic-") && r.reps_ok > 0)
        .map(|r| (r.links as f64, r.up_s))
        .collect();
    let large: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.topology.starts_with("large-") && r.reps_ok > 0)
        .map(|r| (r.links as f64, r.up_s))
        .collect();
    let (fit_intercept_s, slope, fit_r2) = fit(&small);
    let (memory_kib_per_switch, memory_kib_per_host) = memory_fit(&rows);
    let (large_fit_intercept_s, large_slope, large_fit_r2) = fit(&large);
    Ok(BringupReport {
        reps_ok: rows.iter().map(|r| r.reps_ok).sum(),
        reps_total: rows.iter().map(|r| r.reps).sum(),
        rows,
        fit_intercept_s,
        fit_per_link_ms: slope * 1e3,
        fit_r2,
        large_fit_intercept_s,
        large_fit_per_link_ms: large_slope * 1e3,
        large_fit_r2,
        memory_kib_per_switch,
        memory_kib_per_host,
        memory_measure: "growth of Slab + VmallocUsed + Percpu in /proc/meminfo from just before `up` (the previous \
                         testbed's memory freed) to just after it, per namespace; median over repetitions"
            .into(),
    })
}

/// The routes `up` writes into every switch, both families.
fn route_entries(plan: &Plan) -> usize {
    let tables = fabric_user::model::routing::compute(plan, &Default::default());
    tables.iter().flatten().map(|t| t.routes_v4.len() + t.routes_v6.len()).sum()
}

pub fn print_bringup(r: &BringupReport) {
    println!(
        "bringup: `fabric up` / `fabric down` wall time per topology (median over the repetitions that succeeded)"
    );
    println!(
        "{:<16} {:>6} {:>6} {:>6} {:>8} {:>5} {:>8} {:>15} {:>7} {:>8} {:>9} {:>24}",
        "topology",
        "hosts",
        "netns",
        "links",
        "routes",
        "ok",
        "up s",
        "up s min..max",
        "down s",
        "ms/link",
        "KiB/netns",
        "slab+vmalloc+percpu KiB"
    );
    for row in &r.rows {
        println!(
            "{:<16} {:>6} {:>6} {:>6} {:>8} {:>5} {:>8.2} {:>15} {:>7.2} {:>8.2} {:>9.0} {:>24}",
            row.topology,
            row.hosts,
            row.namespaces,
            row.links,
            row.routes,
            format!("{}/{}", row.reps_ok, row.reps),
            row.up_s,
            format!("{:.1}..{:.1}", row.up_s_min, row.up_s_max),
            row.down_s,
            row.up_ms_per_link,
            row.kib_per_namespace,
            format!(
                "{:.0}+{:.0}+{:.0}",
                row.slab_kib_per_namespace, row.vmalloc_kib_per_namespace, row.percpu_kib_per_namespace
            ),
        );
        for e in &row.errors {
            println!("    failed: {e}");
        }
    }
    let phase_names: Vec<&str> =
        r.rows.first().map_or(Vec::new(), |row| row.phases.iter().map(|p| p.0.as_str()).collect());
    println!("phases of `up` (median s): {}", phase_names.join(" | "));
    for row in r.rows.iter().filter(|row| row.topology.starts_with("large-")) {
        let p: Vec<String> = row.phases.iter().map(|p| format!("{:.2}", p.1)).collect();
        println!("  {:<14} {}", row.topology, p.join(" | "));
    }
    println!(
        "growth, small series (8..256 hosts, 4 per rack): up = {:.2} s + {:.2} ms x links, R^2 = {:.3}",
        r.fit_intercept_s, r.fit_per_link_ms, r.fit_r2
    );
    println!(
        "growth, large series (16 hosts per rack, 16 spines): up = {:.2} s + {:.2} ms x links, R^2 = {:.3}",
        r.large_fit_intercept_s, r.large_fit_per_link_ms, r.large_fit_r2
    );
    println!("memory: {}", r.memory_measure);
    println!(
        "memory fit (testbeds of 100+ namespaces): {:.0} KiB per switch + {:.0} KiB per host",
        r.memory_kib_per_switch, r.memory_kib_per_host
    );
    println!("repetitions: {} of {} succeeded", r.reps_ok, r.reps_total);
}
