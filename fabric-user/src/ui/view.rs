//! The live view's model: what the page shows, built from one reading of the testbed's counters
//! (the same [`StatsReport`] `fabric stats` prints) and the reading before it. Pure: the server
//! only reads counters and serialises this.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    agent::SwitchTelemetry,
    model::{
        balance::imbalance,
        plan::{NodeId, Plan},
    },
    run::job::JobProgress,
    telemetry::stats::{CongestionTotals, PortStats, StatsReport},
    ui::{
        layout::{Edge, Layout},
        load,
    },
};

/// An agent that has not written a switch's telemetry for this long no longer tends it (it
/// writes every 100 ms).
pub const AGENT_SILENT_NS: u64 = 3_000_000_000;

/// Whether the testbed can be seen.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Up,
    /// Up, but some switch is unhealthy.
    Degraded,
    /// No testbed under this prefix (never built, taken down, or being rebuilt).
    Down,
}

/// One reading of a testbed: the counters and what else says whether it is healthy.
pub struct Reading {
    pub report: StatsReport,
    /// Switches whose counters could not be read, and why.
    pub unreadable: Vec<(String, String)>,
    /// Namespaces the plan has and the system does not.
    pub missing_namespaces: Vec<String>,
    pub agent_expected: bool,
    pub agent_running: bool,
    /// The monotonic clock (as the agent's `updated_ns`) when read.
    pub now_ns: u64,
    pub job: Option<JobProgress>,
}

/// Per switch port, the counters the view turns into rates and marks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct PortCount {
    tx_bytes: u64,
    rx_bytes: u64,
    ecn: u64,
    /// Dropped on the egress queue (full) and on ingress (any reason).
    egress_drops: u64,
    ingress_drops: u64,
    pfc_received: u64,
}

impl PortCount {
    fn of(p: &PortStats) -> PortCount {
        PortCount {
            tx_bytes: p.tx_bytes,
            rx_bytes: p.rx_bytes,
            ecn: p.classes.iter().map(|c| c.ecn_marked).sum(),
            egress_drops: p.classes.iter().map(|c| c.overflow_drops).sum(),
            ingress_drops: p.drops.values().sum(),
            pfc_received: p.rx_pfc_frames,
        }
    }
}

/// The counters of one reading, by switch and port name, and when they were read (seconds).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    at_s: f64,
    ports: BTreeMap<(String, String), PortCount>,
    /// PFC XOFF, refresh and XON frames each agent sent, by switch and port.
    pfc_sent: BTreeMap<(String, String), u64>,
}

impl Snapshot {
    pub fn of(report: &StatsReport, agents: &[SwitchTelemetry], at_s: f64) -> Snapshot {
        let ports = report
            .switches
            .iter()
            .flat_map(|s| s.ports.iter().map(move |p| ((s.switch.clone(), p.port.clone()), PortCount::of(p))))
            .collect();
        let mut pfc_sent = BTreeMap::new();
        for a in agents {
            for p in &a.pfc {
                *pfc_sent.entry((a.node.clone(), p.ifname.clone())).or_insert(0) +=
                    p.xoff_sent + p.refresh_sent + p.xon_sent;
            }
        }
        Snapshot { at_s, ports, pfc_sent }
    }
}

/// One direction of a link (or of a rack's host links).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Dir {
    /// Modelled Gbit/s over the last interval, and as a share of the rate.
    pub gbps: f64,
    pub util: f64,
    pub colour: &'static str,
    pub label: String,
    /// Since the testbed came up: CE marks, drops, PFC frames that reached the sender.
    pub ecn: u64,
    pub drops: u64,
    pub pauses: u64,
    /// The same, over the last interval.
    pub ecn_new: u64,
    pub drops_new: u64,
    pub pauses_new: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LinkView {
    pub id: String,
    /// False when any of its links is down.
    pub up: bool,
    /// What `fabric link degrade` set on it (rate, loss), or empty.
    pub degraded: String,
    /// Upward (towards the spine) and downward.
    pub up_dir: Dir,
    pub down_dir: Dir,
    /// What the picture writes on the link: its load, and its marks of the last interval.
    pub label: String,
    pub marks: String,
}

impl LinkView {
    /// Modelled Gbit/s up and down (`↑41 ↓0`), `down`, or nothing when idle.
    fn label(&self) -> String {
        if !self.up {
            return "down".into();
        }
        let idle = self.up_dir.label == "0" && self.down_dir.label == "0";
        let load =
            if idle { String::new() } else { format!("\u{2191}{} \u{2193}{}", self.up_dir.label, self.down_dir.label) };
        match (self.degraded.is_empty(), idle) {
            (true, _) => load,
            (false, true) => "degraded".into(),
            (false, false) => format!("{load} degraded"),
        }
    }

    /// CE marks, PFC frames and drops of the last interval, both ways: `E12 P3 D1`, or nothing.
    fn marks(&self) -> String {
        let n = |f: fn(&Dir) -> u64| f(&self.up_dir) + f(&self.down_dir);
        [("E", n(|d| d.ecn_new)), ("P", n(|d| d.pauses_new)), ("D", n(|d| d.drops_new))]
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| format!("{k}{v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SwitchHealth {
    pub name: String,
    pub healthy: bool,
    pub problems: Vec<String>,
}

/// Uplink balance of one RTSW: over the last interval, and since the testbed came up.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Balance {
    pub rtsw: String,
    pub max_over_mean: f64,
    pub jain: f64,
    pub since_up_max_over_mean: f64,
    pub since_up_jain: f64,
    /// Modelled Gbit/s sent on each uplink over the last interval.
    pub uplinks: Vec<(String, f64)>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct JobView {
    pub job_id: String,
    pub collective: String,
    pub iteration: u32,
    pub iterations: u32,
    pub step: usize,
    pub steps: usize,
    pub fraction: f64,
}

/// One job of the testbed's last `fabric run --jobs` (running or finished): its progress.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct JobsRow {
    pub name: String,
    pub job_id: String,
    /// `waiting` (no step done yet), `running`, `done`, or `stopped` (its run's process ended
    /// before it was done).
    pub state: &'static str,
    pub steps_done: u64,
    pub steps: u64,
    pub fraction: f64,
    /// Iterations finished, and the last one's completion (wall ms).
    pub iterations_done: usize,
    pub last_completion_ms: Option<f64>,
    pub bytes_delivered: u64,
}

impl JobsRow {
    pub fn of(g: &crate::telemetry::jobs::JobGauge) -> Self {
        let state = match (g.done, g.stopped, g.steps_done) {
            (true, _, _) => "done",
            (false, true, _) => "stopped",
            (false, false, 0) => "waiting",
            (false, false, _) => "running",
        };
        JobsRow {
            name: g.job.clone(),
            job_id: g.job_id.clone(),
            state,
            steps_done: g.steps_done,
            steps: g.steps,
            fraction: if g.steps == 0 { 0.0 } else { g.steps_done as f64 / g.steps as f64 },
            iterations_done: g.completion_ns.len(),
            last_completion_ms: g.completion_ns.last().map(|&ns| ns as f64 / 1e6),
            bytes_delivered: g.bytes_delivered,
        }
    }
}

/// What the page shows.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct View {
    pub testbed: String,
    pub status: Status,
    pub message: String,
    /// Changes when the picture (nodes and links) changes: the page then fetches it again.
    pub layout_key: String,
    pub interval_s: f64,
    pub time_scale: u64,
    pub links: Vec<LinkView>,
    pub switches: Vec<SwitchHealth>,
    pub balance: Vec<Balance>,
    pub job: Option<JobView>,
    /// Every job of the last `fabric run --jobs`, in the file's order.
    pub jobs: Vec<JobsRow>,
    pub totals: CongestionTotals,
}

impl View {
    /// The view of a testbed that cannot be read (`why`): the page keeps its last picture greyed.
    pub fn down(testbed: &str, why: &str, layout_key: &str) -> View {
        View {
            testbed: testbed.into(),
            status: Status::Down,
            message: format!("testbed {testbed} is down or being rebuilt: {why}. The view recovers when it is back."),
            layout_key: layout_key.into(),
            interval_s: 0.0,
            time_scale: 1,
            links: Vec::new(),
            switches: Vec::new(),
            balance: Vec::new(),
            job: None,
            jobs: Vec::new(),
            totals: CongestionTotals::default(),
        }
    }
}

/// A short key of a layout's shape.
pub fn layout_key(layout: &Layout) -> String {
    // FNV-1a over the names of boxes and edges: equal pictures, equal keys.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for s in layout.boxes.iter().map(|b| &b.name).chain(layout.edges.iter().map(|e| &e.id)) {
        for byte in s.bytes().chain([0]) {
            h = (h ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
        }
    }
    format!("{}-{h:016x}", layout.testbed)
}

/// Builds the view of a reading, with rates over the time since `prev` (none on the first).
pub fn build(plan: &Plan, layout: &Layout, reading: &Reading, prev: Option<&Snapshot>, at_s: f64) -> (View, Snapshot) {
    let now = Snapshot::of(&reading.report, &reading.report.agents, at_s);
    let interval = prev.map_or(0.0, |p| at_s - p.at_s);
    let ts = plan.topology.time_scale;
    let links = layout.edges.iter().map(|e| link_view(plan, e, &now, prev, interval, ts, &reading.report)).collect();
    let switches = health(plan, reading);
    let unhealthy: Vec<&str> = switches.iter().filter(|s| !s.healthy).map(|s| s.name.as_str()).collect();
    let (status, message) = if unhealthy.is_empty() {
        (Status::Up, format!("testbed {} is up", plan.topology.prefix))
    } else {
        (Status::Degraded, format!("testbed {} is up; unhealthy: {}", plan.topology.prefix, unhealthy.join(", ")))
    };
    let view = View {
        testbed: plan.topology.prefix.clone(),
        status,
        message,
        layout_key: layout_key(layout),
        interval_s: interval,
        time_scale: ts,
        links,
        switches,
        balance: balance(&reading.report, &now, prev, interval, ts),
        job: reading.job.as_ref().map(|j| JobView {
            job_id: j.job_id.clone(),
            collective: j.collective.clone(),
            iteration: j.iteration,
            iterations: j.iterations,
            step: j.step,
            steps: j.steps,
            fraction: j.fraction(),
        }),
        jobs: reading.report.jobs.iter().map(JobsRow::of).collect(),
        totals: reading.report.congestion.clone(),
    };
    (view, now)
}

/// The counters of one direction of one link: (bytes, ecn, drops, pauses) in a snapshot; None
/// if a switch at either end is missing from it (unreadable then), whose counters would be
/// taken for 0.
fn direction_counts(plan: &Plan, s: &Snapshot, from: (NodeId, usize), to: (NodeId, usize)) -> Option<[u64; 4]> {
    let key = |(n, p): (NodeId, usize)| (plan.nodes[n].name.clone(), plan.nodes[n].ports[p].ifname.clone());
    let end = |(n, p): (NodeId, usize)| match plan.nodes[n].role.is_switch() {
        true => s.ports.get(&key((n, p))).map(Some),
        false => Some(None),
    };
    let (sender, receiver) = (end(from)?, end(to)?);
    // Bytes as the sender counted them; a host sender counts nothing, so its switch's receipt.
    let bytes = sender.map_or_else(|| receiver.map_or(0, |r| r.rx_bytes), |t| t.tx_bytes);
    let ecn = sender.map_or(0, |t| t.ecn);
    let drops = sender.map_or(0, |t| t.egress_drops) + receiver.map_or(0, |r| r.ingress_drops);
    // PFC frames (XOFF, refresh and XON alike) that reached the sender: a switch counts what it
    // received; a host's are what its RTSW sent it.
    let pauses = match sender {
        Some(t) => t.pfc_received,
        None => s.pfc_sent.get(&key(to)).copied().unwrap_or(0),
    };
    Some([bytes, ecn, drops, pauses])
}

fn link_view(
    plan: &Plan,
    e: &Edge,
    now: &Snapshot,
    prev: Option<&Snapshot>,
    interval: f64,
    ts: u64,
    report: &StatsReport,
) -> LinkView {
    let down_links: Vec<bool> = e.links.iter().map(|&l| !port_up(report, plan, l)).collect();
    let rate: f64 = e.links.iter().map(|&l| plan.links[l].rate_gbps).sum();
    let dir = |upward: bool| {
        let mut total = [0u64; 4];
        let mut delta = [0u64; 4];
        for &l in &e.links {
            let link = &plan.links[l];
            let (from, to) = ((link.a, link.a_port), (link.b, link.b_port));
            let (from, to) = if upward { (from, to) } else { (to, from) };
            let n = direction_counts(plan, now, from, to);
            let p = prev.map_or(n, |p| direction_counts(plan, p, from, to));
            for i in 0..4 {
                total[i] += n.map_or(0, |n| n[i]);
                // Only between two readings that both have the link's switches: one missing
                // from the last would make everything since `up` look new. A rebuilt testbed
                // starts its counters again: a fall counts as nothing new.
                if let (Some(n), Some(p)) = (n, p) {
                    delta[i] += n[i].saturating_sub(p[i]);
                }
            }
        }
        let util = load::utilisation(delta[0], interval, rate, ts);
        let gbps = load::modelled_gbps(delta[0], interval, ts);
        Dir {
            gbps,
            util,
            colour: load::colour(util),
            label: load::gbps_label(gbps),
            ecn: total[1],
            drops: total[2],
            pauses: total[3],
            ecn_new: delta[1],
            drops_new: delta[2],
            pauses_new: delta[3],
        }
    };
    let up = !down_links.iter().any(|d| *d);
    let (mut up_dir, mut down_dir) = (dir(true), dir(false));
    if !up {
        up_dir.colour = load::DOWN_COLOUR;
        down_dir.colour = load::DOWN_COLOUR;
    }
    let degraded = e.links.iter().filter_map(|&l| port_of(report, plan, l).and_then(|p| p.degraded.clone())).collect();
    let (label, marks) = (String::new(), String::new());
    let mut l = LinkView { id: e.id.clone(), up, degraded, up_dir, down_dir, label, marks };
    (l.label, l.marks) = (l.label(), l.marks());
    l
}

/// A link is up unless the switch end's port says down.
fn port_up(report: &StatsReport, plan: &Plan, l: usize) -> bool {
    port_of(report, plan, l).is_none_or(|p| p.up)
}

/// The counters of link `l`'s upper end (always a switch).
fn port_of<'a>(report: &'a StatsReport, plan: &Plan, l: usize) -> Option<&'a crate::telemetry::stats::PortStats> {
    let link = &plan.links[l];
    let name = &plan.nodes[link.b].name;
    let port = &plan.nodes[link.b].ports[link.b_port].ifname;
    report.switches.iter().find(|s| &s.switch == name).and_then(|s| s.ports.iter().find(|p| &p.port == port))
}

fn health(plan: &Plan, r: &Reading) -> Vec<SwitchHealth> {
    plan.switches()
        .map(|sw| {
            let name = plan.nodes[sw].name.clone();
            let mut problems = Vec::new();
            if let Some((_, e)) = r.unreadable.iter().find(|(s, _)| *s == name) {
                problems.push(format!("counters unreadable: {e}"));
            }
            if r.missing_namespaces.contains(&plan.netns(sw)) {
                problems.push("its namespace is gone".into());
            }
            if r.agent_expected && !r.agent_running {
                problems.push("the switch agent is not running: no PFC frames, no watchdog".into());
            } else if r.agent_expected {
                match r.report.agents.iter().find(|a| a.node == name) {
                    None => problems.push("the switch agent reports nothing for it".into()),
                    Some(a) if r.now_ns.saturating_sub(a.updated_ns) > AGENT_SILENT_NS => problems.push(format!(
                        "the switch agent has been silent for {:.0} s",
                        r.now_ns.saturating_sub(a.updated_ns) as f64 / 1e9
                    )),
                    Some(_) => {}
                }
            }
            SwitchHealth { name, healthy: problems.is_empty(), problems }
        })
        .collect()
}

fn balance(report: &StatsReport, now: &Snapshot, prev: Option<&Snapshot>, interval: f64, ts: u64) -> Vec<Balance> {
    report
        .uplinks
        .iter()
        .map(|u| {
            let sent: Vec<(String, u64)> = u
                .tx_bytes
                .iter()
                .map(|(port, _)| {
                    let key = (u.rtsw.clone(), port.clone());
                    let n = now.ports.get(&key).map_or(0, |c| c.tx_bytes);
                    let p = prev.and_then(|p| p.ports.get(&key)).map_or(n, |c| c.tx_bytes);
                    (port.clone(), n.saturating_sub(p))
                })
                .collect();
            let (max_over_mean, jain) = imbalance(&sent.iter().map(|s| s.1).collect::<Vec<_>>());
            Balance {
                rtsw: u.rtsw.clone(),
                max_over_mean,
                jain,
                since_up_max_over_mean: u.max_over_mean,
                since_up_jain: u.jain,
                uplinks: sent.into_iter().map(|(p, b)| (p, load::modelled_gbps(b, interval, ts))).collect(),
            }
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{
        model::{plan::Role, topology::Topology},
        telemetry::stats::{ClassStats, SwitchStats, UplinkLoad},
    };

    pub(crate) fn default_plan() -> Plan {
        Plan::new(&Topology::load(None).unwrap())
    }

    /// A report of the plan with every counter zero, and `tx` bytes sent on `z0r1`'s uplink
    /// to `z0c3` (plus CE marks there).
    pub(crate) fn report(plan: &Plan, tx: u64) -> StatsReport {
        let switches = plan
            .switches()
            .map(|sw| SwitchStats {
                switch: plan.nodes[sw].name.clone(),
                role: plan.nodes[sw].role,
                ports: plan.nodes[sw]
                    .ports
                    .iter()
                    .map(|p| {
                        let hot = plan.nodes[sw].name == "z0r1" && p.ifname == "z0c3";
                        PortStats {
                            port: p.ifname.clone(),
                            up: true,
                            rx_packets: 0,
                            rx_bytes: 0,
                            tx_packets: 0,
                            tx_bytes: if hot { tx } else { 0 },
                            rx_roce_packets: 0,
                            tx_roce_packets: 0,
                            drops: Default::default(),
                            to_kernel: Default::default(),
                            rx_pfc_frames: 0,
                            classes: if hot {
                                vec![ClassStats { class: 3, ecn_marked: tx / 1000, ..Default::default() }]
                            } else {
                                Vec::new()
                            },
                            degraded: None,
                        }
                    })
                    .collect(),
                moves: Default::default(),
            })
            .collect::<Vec<_>>();
        let uplinks = plan
            .switches()
            .filter(|&s| plan.nodes[s].role == Role::Rtsw)
            .map(|s| {
                let tx_bytes: Vec<(String, u64)> = plan
                    .uplinks(s)
                    .iter()
                    .map(|&p| {
                        let name = plan.nodes[s].ports[p].ifname.clone();
                        let b = if plan.nodes[s].name == "z0r1" && name == "z0c3" { tx } else { 0 };
                        (name, b)
                    })
                    .collect();
                let (max_over_mean, jain) = imbalance(&tx_bytes.iter().map(|t| t.1).collect::<Vec<_>>());
                UplinkLoad { rtsw: plan.nodes[s].name.clone(), tx_bytes, max_over_mean, jain }
            })
            .collect();
        StatsReport {
            testbed: plan.topology.prefix.clone(),
            time_scale: plan.topology.time_scale,
            switches,
            uplinks,
            congestion: CongestionTotals::default(),
            agents: Vec::new(),
            jobs: Vec::new(),
        }
    }

    pub(crate) fn reading(plan: &Plan, tx: u64) -> Reading {
        Reading {
            report: report(plan, tx),
            unreadable: Vec::new(),
            missing_namespaces: Vec::new(),
            agent_expected: false,
            agent_running: false,
            now_ns: 0,
            job: None,
        }
    }

    #[test]
    fn a_loaded_uplink_is_coloured_and_unbalances_its_rtsw() {
        let plan = default_plan();
        let layout = Layout::of(&plan);
        let (first, snap) = build(&plan, &layout, &reading(&plan, 0), None, 10.0);
        assert_eq!(first.status, Status::Up);
        assert_eq!(first.links.len(), plan.links.len());
        assert!(first.links.iter().all(|l| l.up_dir.colour == load::BANDS[0].colour && l.up));
        // A second of the link's full rate, in slowed time.
        let rate = plan.links[0].rate_gbps;
        let bytes = (rate * 1e9 / plan.topology.time_scale as f64 / 8.0) as u64;
        let (v, _) = build(&plan, &layout, &reading(&plan, bytes), Some(&snap), 11.0);
        let hot = v.links.iter().find(|l| l.id == "z0r1:z0c3").unwrap();
        assert!((hot.up_dir.util - 1.0).abs() < 1e-6, "{hot:?}");
        assert_eq!(hot.up_dir.colour, load::colour(1.0));
        assert_eq!(hot.down_dir.colour, load::BANDS[0].colour, "the other direction stays idle");
        assert_eq!((hot.up_dir.ecn_new, hot.up_dir.ecn), (bytes / 1000, bytes / 1000));
        assert!(v.links.iter().filter(|l| l.id != "z0r1:z0c3").all(|l| l.up_dir.util == 0.0));
        let b = v.balance.iter().find(|b| b.rtsw == "z0r1").unwrap();
        assert!((b.max_over_mean - 4.0).abs() < 1e-9 && (b.jain - 0.25).abs() < 1e-9, "{b:?}");
        assert!(v.balance.iter().filter(|b| b.rtsw != "z0r1").all(|b| b.max_over_mean == 0.0));
    }

    #[test]
    fn counters_that_start_again_count_as_nothing_new() {
        let plan = default_plan();
        let layout = Layout::of(&plan);
        let (_, big) = build(&plan, &layout, &reading(&plan, 1 << 30), None, 1.0);
        let (v, _) = build(&plan, &layout, &reading(&plan, 10), Some(&big), 2.0);
        assert!(v.links.iter().all(|l| l.up_dir.util == 0.0 && l.up_dir.ecn_new == 0));
    }

    /// A switch missing from one reading (unreadable for a moment) and back in the next: what
    /// it counted since `up` is not new load.
    #[test]
    fn a_switch_missing_from_the_last_reading_shows_no_burst_when_back() {
        let plan = default_plan();
        let layout = Layout::of(&plan);
        let mut gap = reading(&plan, 1 << 30);
        gap.report.switches.retain(|s| s.switch != "z0r1");
        gap.unreadable.push(("z0r1".into(), "a moment".into()));
        let (_, missing) = build(&plan, &layout, &gap, None, 1.0);
        let (v, _) = build(&plan, &layout, &reading(&plan, 1 << 30), Some(&missing), 2.0);
        let hot = v.links.iter().find(|l| l.id == "z0r1:z0c3").unwrap();
        assert_eq!((hot.up_dir.util, hot.up_dir.ecn_new), (0.0, 0), "{hot:?}");
        assert_eq!(hot.up_dir.ecn, (1 << 30) / 1000, "the totals are still shown");
    }

    #[test]
    fn a_dead_agent_or_unreadable_switch_is_unhealthy_and_a_down_link_is_marked() {
        let plan = default_plan();
        let layout = Layout::of(&plan);
        let mut r = reading(&plan, 0);
        r.agent_expected = true;
        r.agent_running = true;
        r.now_ns = 10 * AGENT_SILENT_NS;
        r.report.agents = plan
            .switches()
            .map(|s| SwitchTelemetry {
                node: plan.nodes[s].name.clone(),
                updated_ns: if plan.nodes[s].name == "z0c2" { 0 } else { r.now_ns },
                ..Default::default()
            })
            .collect();
        r.unreadable.push(("z0r3".into(), "no pins".into()));
        let port = r.report.switches.iter_mut().find(|s| s.switch == "z0c1").unwrap();
        port.ports.iter_mut().find(|p| p.port == "z0r0").unwrap().up = false;
        let (v, _) = build(&plan, &layout, &r, None, 0.0);
        assert_eq!(v.status, Status::Degraded);
        let bad: Vec<&str> = v.switches.iter().filter(|s| !s.healthy).map(|s| s.name.as_str()).collect();
        assert_eq!(bad, ["z0c2", "z0r3"]);
        assert!(v.message.contains("z0c2") && v.message.contains("z0r3"));
        let down: Vec<&str> = v.links.iter().filter(|l| !l.up).map(|l| l.id.as_str()).collect();
        assert_eq!(down, ["z0r0:z0c1"]);
        assert!(v.links.iter().all(|l| l.degraded.is_empty()));
        // A degraded link is named so, in its label and (in the picture) its dash.
        let port = r.report.switches.iter_mut().find(|s| s.switch == "z0c2").unwrap();
        port.ports.iter_mut().find(|p| p.port == "z0r1").unwrap().degraded = Some("100 Gbit/s (of 400)".into());
        let (v, _) = build(&plan, &layout, &r, None, 0.0);
        let degraded: Vec<(&str, &str)> =
            v.links.iter().filter(|l| !l.degraded.is_empty()).map(|l| (l.id.as_str(), l.label.as_str())).collect();
        assert_eq!(degraded, [("z0r1:z0c2", "degraded")]);
        let svg = crate::ui::graph::svg(&layout, Some(&v));
        assert!(svg.contains(r#"<g class="link degraded" id="link-z0r1:z0c2""#), "the picture marks it");
        r.agent_running = false;
        let (v, _) = build(&plan, &layout, &r, None, 0.0);
        assert!(v.switches.iter().all(|s| !s.healthy), "no agent: no switch sends PFC frames");
    }

    #[test]
    fn a_running_job_shows_its_progress_every_job_of_a_run_too_and_a_down_testbed_says_so() {
        use crate::telemetry::jobs::JobGauge;
        let plan = default_plan();
        let layout = Layout::of(&plan);
        let mut r = reading(&plan, 0);
        r.job = Some(JobProgress {
            job_id: "j".into(),
            collective: "allreduce".into(),
            iteration: 2,
            iterations: 2,
            step: 7,
            steps: 14,
            started_unix_ms: 0,
            process: crate::state::Owner { pid: 1, started: 0 },
        });
        let (v, _) = build(&plan, &layout, &r, None, 0.0);
        assert!((v.job.unwrap().fraction - 0.75).abs() < 1e-9);
        assert!(v.jobs.is_empty(), "no jobs run");
        // A jobs run: one job done after its two iterations, one mid-run, one not started.
        let gauge = |job: &str, steps_done: u64, done: bool, completion_ns: Vec<u64>| JobGauge {
            job: job.into(),
            job_id: format!("run-{job}"),
            steps_done,
            steps: 12,
            done,
            completion_ns,
            bytes_delivered: 1000 * steps_done,
            uplink_bytes: Default::default(),
            stopped: false,
        };
        r.report.jobs = vec![
            gauge("a", 12, true, vec![4_000_000, 5_500_000]),
            gauge("b", 3, false, vec![]),
            gauge("c", 0, false, vec![]),
            JobGauge { stopped: true, ..gauge("d", 5, false, vec![]) },
        ];
        let (v, _) = build(&plan, &layout, &r, None, 0.0);
        let states: Vec<(&str, &str, f64)> = v.jobs.iter().map(|j| (j.name.as_str(), j.state, j.fraction)).collect();
        let stopped = ("d", "stopped", 5.0 / 12.0);
        assert_eq!(states, [("a", "done", 1.0), ("b", "running", 0.25), ("c", "waiting", 0.0), stopped]);
        assert_eq!((v.jobs[0].iterations_done, v.jobs[0].last_completion_ms), (2, Some(5.5)));
        assert_eq!((v.jobs[1].iterations_done, v.jobs[1].last_completion_ms), (0, None));
        let d = View::down("fab", "no state file", &v.layout_key);
        assert_eq!(d.status, Status::Down);
        assert!(d.message.contains("down") && d.message.contains("recovers"));
    }
}
