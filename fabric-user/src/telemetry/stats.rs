//! `fabric stats`: counters of every switch port, and how evenly each RTSW spreads its load over
//! its uplinks (max/mean and Jain's fairness index).
use std::collections::BTreeMap;

use anyhow::Result;
use fabric_common::counters::{DropReason, PassReason, PortCounters};
use serde::Serialize;

pub use crate::model::balance::imbalance;
use crate::{model::plan::Role, state::State};

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
    pub rx_pfc_frames: u64,
    /// The congestion model per priority class (classes that saw anything).
    pub classes: Vec<ClassStats>,
    /// What `fabric link degrade` set on the port's link (rate, loss), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
}

/// One port and priority class of the congestion model: the egress queue's counters and depth,
/// and the ingress side's pause requests.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClassStats {
    pub class: usize,
    pub queued_packets: u64,
    pub queued_bytes: u64,
    pub ecn_marked: u64,
    pub overflow_drops: u64,
    pub over_headroom: u64,
    pub sent_while_paused: u64,
    /// Modelled depth now and at most, bytes.
    pub depth_bytes: u64,
    pub max_depth_bytes: u64,
    /// PFC frames received for this class (this egress was paused), and for how long (wall ns).
    pub pauses_received: u64,
    pub paused_ns: u64,
    /// Ingress side: XOFF requests raised, and held bytes at most.
    pub xoff_events: u64,
    pub max_held_bytes: u64,
}

impl ClassStats {
    fn is_idle(&self) -> bool {
        self.queued_packets == 0 && self.pauses_received == 0 && self.xoff_events == 0 && self.overflow_drops == 0
    }
}

/// Totals of the congestion model over a testbed, or over a run (see [`CongestionTotals::since`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct CongestionTotals {
    pub ecn_marked: u64,
    /// Lossy packets dropped on a full queue.
    pub overflow_drops: u64,
    /// Lossless packets above limit + headroom (a real switch would have dropped them).
    pub over_headroom: u64,
    /// Packets forwarded into a paused egress: the phantom-queue model's error.
    pub sent_while_paused: u64,
    pub pfc_frames_received: u64,
    /// Wall ns of paused egress port/classes, summed.
    pub paused_ns: u64,
    /// PFC frames the switch agents sent: XOFF, refreshes, XON.
    pub pfc_xoff_sent: u64,
    pub pfc_refresh_sent: u64,
    pub pfc_xon_sent: u64,
    pub watchdog_storms: u64,
    /// Deepest modelled queue seen anywhere, bytes.
    pub max_depth_bytes: u64,
}

impl CongestionTotals {
    /// What happened between `before` and `self` (the max depth is the later figure).
    pub fn since(&self, before: &CongestionTotals) -> CongestionTotals {
        CongestionTotals {
            ecn_marked: self.ecn_marked - before.ecn_marked.min(self.ecn_marked),
            overflow_drops: self.overflow_drops.saturating_sub(before.overflow_drops),
            over_headroom: self.over_headroom.saturating_sub(before.over_headroom),
            sent_while_paused: self.sent_while_paused.saturating_sub(before.sent_while_paused),
            pfc_frames_received: self.pfc_frames_received.saturating_sub(before.pfc_frames_received),
            paused_ns: self.paused_ns.saturating_sub(before.paused_ns),
            pfc_xoff_sent: self.pfc_xoff_sent.saturating_sub(before.pfc_xoff_sent),
            pfc_refresh_sent: self.pfc_refresh_sent.saturating_sub(before.pfc_refresh_sent),
            pfc_xon_sent: self.pfc_xon_sent.saturating_sub(before.pfc_xon_sent),
            watchdog_storms: self.watchdog_storms.saturating_sub(before.watchdog_storms),
            max_depth_bytes: self.max_depth_bytes,
        }
    }
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
            rx_pfc_frames: c.rx_pfc_frames,
            classes: Vec::new(),
            degraded: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SwitchStats {
    pub switch: String,
    pub role: Role,
    pub ports: Vec<PortStats>,
    /// Moves of the balancing modes (zero in the hash modes).
    pub moves: crate::dataplane::BalanceMoves,
}

/// Load over one RTSW's uplinks.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
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
    /// Modelled rates are real rates / time_scale; modelled times are wall times / time_scale.
    pub time_scale: u64,
    pub switches: Vec<SwitchStats>,
    pub uplinks: Vec<UplinkLoad>,
    pub congestion: CongestionTotals,
    /// What the switch agents report: PFC frames sent, XOFF delay, watchdog storms, sampled
    /// queue depth distributions.
    pub agents: Vec<crate::agent::SwitchTelemetry>,
    /// The jobs of the last `fabric run --jobs` on this testbed (per job: progress, bytes).
    pub jobs: Vec<crate::telemetry::jobs::JobGauge>,
}

pub fn collect(state: &State) -> Result<StatsReport> {
    let (report, unreadable) = collect_each(state);
    match unreadable.into_iter().next() {
        Some((switch, e)) => Err(e.context(format!("reading the counters of switch {switch}"))),
        None => Ok(report),
    }
}

/// [`collect`], carrying on past a switch whose maps cannot be read (its namespace or pins gone):
/// the report of the switches that could be read, and the error of each one that could not. The
/// live view draws such a switch as unhealthy rather than losing the whole picture.
pub fn collect_each(state: &State) -> (StatsReport, Vec<(String, anyhow::Error)>) {
    let plan = &state.plan;
    let mut switches = Vec::new();
    let mut uplinks = Vec::new();
    let mut unreadable = Vec::new();
    for sw in plan.switches() {
        let node = &plan.nodes[sw];
        let read = switch_ports(state, sw).and_then(|p| Ok((p, state.dataplane(sw)?.balance_counters()?)));
        let (ports, moves) = match read {
            Ok(p) => p,
            Err(e) => {
                unreadable.push((node.name.clone(), e));
                continue;
            }
        };
        if node.role == Role::Rtsw {
            let up = plan.uplinks(sw);
            let tx: Vec<(String, u64)> = up.iter().map(|&p| (ports[p].port.clone(), ports[p].tx_bytes)).collect();
            let loads: Vec<u64> = tx.iter().map(|t| t.1).collect();
            let (max_over_mean, jain) = imbalance(&loads);
            uplinks.push(UplinkLoad { rtsw: node.name.clone(), tx_bytes: tx, max_over_mean, jain });
        }
        switches.push(SwitchStats { switch: node.name.clone(), role: node.role, ports, moves });
    }
    let agents = crate::agent::read_telemetry(&plan.topology.prefix);
    let congestion = totals(&switches, &agents);
    let report = StatsReport {
        testbed: plan.topology.prefix.clone(),
        time_scale: plan.topology.time_scale,
        switches,
        uplinks,
        congestion,
        agents,
        jobs: crate::telemetry::jobs::JobsGauges::read(&plan.topology.prefix),
    };
    (report, unreadable)
}

/// Every port of one switch: its counters and the congestion model's classes that saw anything.
fn switch_ports(state: &State, sw: crate::model::plan::NodeId) -> Result<Vec<PortStats>> {
    let node = &state.plan.nodes[sw];
    let mut dp = state.dataplane(sw)?;
    let mut ports = Vec::new();
    for (i, port) in node.ports.iter().enumerate() {
        let c = dp.port_counters(i as u32)?;
        let mut p = PortStats::new(&port.ifname, !state.down_links.contains(&port.link), &c);
        p.degraded = state.degraded.get(&port.link).map(|d| d.describe(state.plan.links[port.link].rate_gbps));
        let rate = dp.port_rate(i as u32)?;
        for class in 0..fabric_common::pfc::CLASSES {
            let (cc, q, acc) =
                (dp.class_counters(i as u32, class)?, dp.queue(i as u32, class)?, dp.account(i as u32, class)?);
            // The clock read after the queue: a pause that began before the read is then never
            // in the future, so the paused time (a counter) cannot come out lower than the last.
            let now = crate::agent::monotonic_ns();
            // A pause still in force counts up to now.
            let pending = q.paused_until_ns.saturating_sub(now);
            let cs = ClassStats {
                class,
                queued_packets: cc.packets,
                queued_bytes: cc.bytes,
                ecn_marked: cc.ecn_marked,
                overflow_drops: cc.overflow_drops,
                over_headroom: cc.over_headroom,
                sent_while_paused: cc.sent_while_paused,
                depth_bytes: fabric_common::queue::depth_bytes(q.tail_ns, q.paused_until_ns, now, rate),
                max_depth_bytes: q.max_depth_bytes,
                pauses_received: q.pauses_received,
                paused_ns: q.paused_total_ns.saturating_sub(pending),
                xoff_events: cc.xoff_events,
                max_held_bytes: acc.max_held_bytes,
            };
            if !cs.is_idle() {
                p.classes.push(cs);
            }
        }
        ports.push(p);
    }
    Ok(ports)
}

fn totals(switches: &[SwitchStats], agents: &[crate::agent::SwitchTelemetry]) -> CongestionTotals {
    let mut t = CongestionTotals::default();
    for p in switches.iter().flat_map(|s| &s.ports) {
        t.pfc_frames_received += p.rx_pfc_frames;
        for c in &p.classes {
            t.ecn_marked += c.ecn_marked;
            t.overflow_drops += c.overflow_drops;
            t.over_headroom += c.over_headroom;
            t.sent_while_paused += c.sent_while_paused;
            t.paused_ns += c.paused_ns;
            t.max_depth_bytes = t.max_depth_bytes.max(c.max_depth_bytes);
        }
    }
    for a in agents {
        for p in &a.pfc {
            t.pfc_xoff_sent += p.xoff_sent;
            t.pfc_refresh_sent += p.refresh_sent;
            t.pfc_xon_sent += p.xon_sent;
        }
        t.watchdog_storms += a.storms.len() as u64;
    }
    t
}

/// The congestion totals of a testbed now (switch counters and agent reports).
pub fn congestion_totals(state: &State) -> Result<CongestionTotals> {
    Ok(collect(state)?.congestion)
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
    let moved: Vec<String> = r
        .switches
        .iter()
        .filter(|s| s.moves != Default::default())
        .map(|s| {
            format!(
                "{}: flowlet moves {}, adaptive second choices {}",
                s.switch, s.moves.flowlet_moves, s.moves.adaptive_second_choices
            )
        })
        .collect();
    if !moved.is_empty() {
        println!();
        println!("balancing moves: {}", moved.join("; "));
    }
    let busy: Vec<(&str, &PortStats, &ClassStats)> = r
        .switches
        .iter()
        .flat_map(|s| s.ports.iter().flat_map(move |p| p.classes.iter().map(move |c| (s.switch.as_str(), p, c))))
        .collect();
    if !busy.is_empty() {
        println!();
        println!("congestion model (time scale {}: modelled time = wall time / {})", r.time_scale, r.time_scale);
        println!(
            "{:<8} {:<10} {:>2} {:>10} {:>9} {:>8} {:>8} {:>10} {:>10} {:>11} {:>7} {:>10} {:>6}",
            "switch",
            "port",
            "tc",
            "queued",
            "ecn",
            "drops",
            "hdroom!",
            "sent-psd",
            "depth KiB",
            "max KiB",
            "pauses",
            "paused ms",
            "xoff"
        );
        for (sw, p, c) in busy {
            println!(
                "{:<8} {:<10} {:>2} {:>10} {:>9} {:>8} {:>8} {:>10} {:>10.1} {:>11.1} {:>7} {:>10.1} {:>6}",
                sw,
                p.port,
                c.class,
                c.queued_packets,
                c.ecn_marked,
                c.overflow_drops,
                c.over_headroom,
                c.sent_while_paused,
                c.depth_bytes as f64 / 1024.0,
                c.max_depth_bytes as f64 / 1024.0,
                c.pauses_received,
                c.paused_ns as f64 / 1e6,
                c.xoff_events
            );
        }
    }
    for a in r.agents.iter().filter(|a| !a.pfc.is_empty() || !a.storms.is_empty()) {
        let sent: Vec<String> = a
            .pfc
            .iter()
            .map(|p| {
                format!(
                    "{}/tc{}: xoff {} refresh {} xon {} ({:.1} ms)",
                    p.ifname,
                    p.class,
                    p.xoff_sent,
                    p.refresh_sent,
                    p.xon_sent,
                    p.pausing_ns as f64 / 1e6
                )
            })
            .collect();
        println!(
            "agent {:<6} PFC sent: {}; XOFF delay median {:.0} µs max {:.0} µs; watchdog storms {}",
            a.node,
            sent.join(", "),
            a.xoff_delay.median_ns as f64 / 1e3,
            a.xoff_delay.max_ns as f64 / 1e3,
            a.storms.len()
        );
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
    /// The RTSW uplink counters only (cheap: what a per-step snapshot needs).
    pub fn read_uplinks(state: &State) -> Result<Self> {
        let plan = &state.plan;
        let mut out = BTreeMap::new();
        for sw in plan.switches().filter(|&s| plan.nodes[s].role == Role::Rtsw) {
            let mut dp = state.dataplane(sw)?;
            let mut v = Vec::new();
            for p in plan.uplinks(sw) {
                v.push((plan.nodes[sw].ports[p].ifname.clone(), dp.port_counters(p as u32)?.tx_bytes));
            }
            out.insert(plan.nodes[sw].name.clone(), v);
        }
        Ok(UplinkBytes(out))
    }

    pub fn read(state: &State) -> Result<Self> {
        let r = collect(state)?;
        Ok(UplinkBytes(r.uplinks.into_iter().map(|u| (u.rtsw, u.tx_bytes)).collect()))
    }

    /// Per-RTSW load that happened between `before` and `self`, port by port (by name). A
    /// counter lower than before (the testbed built again in between) counts from 0.
    pub fn since(&self, before: &UplinkBytes) -> Vec<UplinkLoad> {
        self.0
            .iter()
            .map(|(rtsw, now)| {
                let old = before.0.get(rtsw);
                let was = |port: &str| old.and_then(|o| o.iter().find(|(p, _)| p == port)).map_or(0, |o| o.1);
                let tx: Vec<(String, u64)> =
                    now.iter().map(|(p, b)| (p.clone(), if *b >= was(p) { b - was(p) } else { *b })).collect();
                let loads: Vec<u64> = tx.iter().map(|t| t.1).collect();
                let (max_over_mean, jain) = imbalance(&loads);
                UplinkLoad { rtsw: rtsw.clone(), tx_bytes: tx, max_over_mean, jain }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ports are paired by name, not position, and a counter that went back (a testbed built
    /// again) counts from 0 instead of wrapping.
    #[test]
    fn uplink_load_pairs_ports_by_name_and_survives_a_counter_reset() {
        let bytes = |ports: &[(&str, u64)]| {
            UplinkBytes(BTreeMap::from([(
                "z0r0".to_string(),
                ports.iter().map(|&(p, b)| (p.to_string(), b)).collect::<Vec<_>>(),
            )]))
        };
        let before = bytes(&[("z0c1", 100), ("z0c0", 1000)]);
        let after = bytes(&[("z0c0", 1500), ("z0c1", 40)]);
        let load = after.since(&before);
        assert_eq!(load[0].tx_bytes, [("z0c0".to_string(), 500), ("z0c1".to_string(), 40)]);
    }
}
