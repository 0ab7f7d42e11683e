//! `fabric stats`: counters of every switch port, and how evenly each RTSW spreads its load over
//! its uplinks (max/mean and Jain's fairness index).
use std::collections::BTreeMap;

use anyhow::Result;
use fabric_common::counters::{DropReason, PassReason, PortCounters};
use serde::Serialize;

use crate::{plan::Role, testbed::State};

#[derive(Debug, Clone, Serialize)]
pub struct PortStats {
    pub port: String,
    pub up: bool,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_roce_packets: u64,
    pub tx_roce_packets: u64,
    /// Non-zero drop reasons.
    pub drops: BTreeMap<&'static str, u64>,
    /// Non-zero reasons for handing packets to the kernel.
    pub to_kernel: BTreeMap<&'static str, u64>,
}

impl PortStats {
    fn new(port: &str, up: bool, c: &PortCounters) -> Self {
        let nonzero = |names: &[&'static str], values: &[u64]| {
            names.iter().zip(values).filter(|(_, v)| **v > 0).map(|(n, v)| (*n, *v)).collect()
        };
        let drop_names: Vec<&str> = DropReason::ALL.iter().map(|r| r.as_str()).collect();
        let pass_names: Vec<&str> = PassReason::ALL.iter().map(|r| r.as_str()).collect();
        PortStats {
            port: port.into(),
            up,
            rx_packets: c.rx_packets,
            rx_bytes: c.rx_bytes,
            tx_packets: c.tx_packets,
            tx_bytes: c.tx_bytes,
            rx_roce_packets: c.rx_roce_packets,
            tx_roce_packets: c.tx_roce_packets,
            drops: nonzero(&drop_names, &c.drops),
            to_kernel: nonzero(&pass_names, &c.passes),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SwitchStats {
    pub switch: String,
    pub role: Role,
    pub ports: Vec<PortStats>,
}

/// Load over one RTSW's uplinks.
#[derive(Debug, Clone, Serialize)]
pub struct UplinkLoad {
    pub rtsw: String,
    /// Bytes sent on each uplink (by port name).
    pub tx_bytes: Vec<(String, u64)>,
    /// Busiest uplink over the mean (1 = perfectly even; 0 when idle).
    pub max_over_mean: f64,
    /// Jain's fairness index (1 = even, 1/n = everything on one uplink; 1 when idle).
    pub jain: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StatsReport {
    pub testbed: String,
    pub switches: Vec<SwitchStats>,
    pub uplinks: Vec<UplinkLoad>,
}

/// max/mean and Jain's index of a load vector.
pub fn imbalance(loads: &[u64]) -> (f64, f64) {
    let n = loads.len() as f64;
    let sum: f64 = loads.iter().map(|&x| x as f64).sum();
    if loads.is_empty() || sum == 0.0 {
        return (0.0, 1.0);
    }
    let max = loads.iter().copied().max().unwrap_or(0) as f64;
    let squares: f64 = loads.iter().map(|&x| (x as f64) * (x as f64)).sum();
    (max / (sum / n), sum * sum / (n * squares))
}

pub fn collect(state: &State) -> Result<StatsReport> {
    let plan = &state.plan;
    let mut switches = Vec::new();
    let mut uplinks = Vec::new();
    for sw in plan.switches() {
        let node = &plan.nodes[sw];
        let mut dp = state.dataplane(sw)?;
        let mut ports = Vec::new();
        for (i, port) in node.ports.iter().enumerate() {
            let c = dp.port_counters(i as u32)?;
            ports.push(PortStats::new(&port.ifname, !state.down_links.contains(&port.link), &c));
        }
        if node.role == Role::Rtsw {
            let up = plan.uplinks(sw);
            let tx: Vec<(String, u64)> = up.iter().map(|&p| (ports[p].port.clone(), ports[p].tx_bytes)).collect();
            let loads: Vec<u64> = tx.iter().map(|t| t.1).collect();
            let (max_over_mean, jain) = imbalance(&loads);
            uplinks.push(UplinkLoad { rtsw: node.name.clone(), tx_bytes: tx, max_over_mean, jain });
        }
        switches.push(SwitchStats { switch: node.name.clone(), role: node.role, ports });
    }
    Ok(StatsReport { testbed: plan.topology.prefix.clone(), switches, uplinks })
}

pub fn print(r: &StatsReport) {
    println!("testbed {}", r.testbed);
    println!(
        "{:<8} {:<10} {:>4} {:>10} {:>12} {:>10} {:>12} {:>9} {:>9}  drops / to kernel",
        "switch", "port", "up", "rx pkts", "rx bytes", "tx pkts", "tx bytes", "rx roce", "tx roce"
    );
    for s in &r.switches {
        for p in &s.ports {
            let extra: Vec<String> = p
                .drops
                .iter()
                .map(|(k, v)| format!("drop:{k}={v}"))
                .chain(p.to_kernel.iter().map(|(k, v)| format!("kernel:{k}={v}")))
                .collect();
            println!(
                "{:<8} {:<10} {:>4} {:>10} {:>12} {:>10} {:>12} {:>9} {:>9}  {}",
                s.switch,
                p.port,
                if p.up { "yes" } else { "DOWN" },
                p.rx_packets,
                p.rx_bytes,
                p.tx_packets,
                p.tx_bytes,
                p.rx_roce_packets,
                p.tx_roce_packets,
                extra.join(" ")
            );
        }
    }
    println!();
    println!("{:<8} {:>9} {:>6}  tx bytes per uplink", "rtsw", "max/mean", "jain");
    for u in &r.uplinks {
        let loads: Vec<String> = u.tx_bytes.iter().map(|(p, b)| format!("{p}={b}")).collect();
        println!("{:<8} {:>9.2} {:>6.3}  {}", u.rtsw, u.max_over_mean, u.jain, loads.join(" "));
    }
}

/// Bytes sent on each RTSW uplink, for measuring what one run added.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UplinkBytes(pub BTreeMap<String, Vec<(String, u64)>>);

impl UplinkBytes {
    pub fn read(state: &State) -> Result<Self> {
        let r = collect(state)?;
        Ok(UplinkBytes(r.uplinks.into_iter().map(|u| (u.rtsw, u.tx_bytes)).collect()))
    }

    /// Per-RTSW load that happened between `before` and `self`.
    pub fn since(&self, before: &UplinkBytes) -> Vec<UplinkLoad> {
        self.0
            .iter()
            .map(|(rtsw, now)| {
                let old = before.0.get(rtsw);
                let tx: Vec<(String, u64)> = now
                    .iter()
                    .enumerate()
                    .map(|(i, (p, b))| (p.clone(), b - old.and_then(|o| o.get(i)).map_or(0, |o| o.1)))
                    .collect();
                let loads: Vec<u64> = tx.iter().map(|t| t.1).collect();
                let (max_over_mean, jain) = imbalance(&loads);
                UplinkLoad { rtsw: rtsw.clone(), tx_bytes: tx, max_over_mean, jain }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::imbalance;

    #[test]
    fn imbalance_figures() {
        assert_eq!(imbalance(&[10, 10, 10, 10]), (1.0, 1.0));
        let (m, j) = imbalance(&[40, 0, 0, 0]);
        assert_eq!((m, j), (4.0, 0.25));
        assert_eq!(imbalance(&[0, 0]), (0.0, 1.0));
        let (m, j) = imbalance(&[30, 10]);
        assert!((m - 1.5).abs() < 1e-9 && (j - 0.8).abs() < 1e-9);
    }
}
