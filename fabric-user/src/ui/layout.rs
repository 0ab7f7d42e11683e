//! Where each node of a testbed goes in a picture: one row per tier (ATSWs on top, then CTSWs,
//! RTSWs, hosts), racks side by side in zone order, each CTSW over its zone and each RTSW over its
//! hosts. Above [`HOST_DETAIL_LIMIT`] hosts, each rack's hosts become one node (and their links
//! one edge), so a 2,048-host fabric stays a picture of a few hundred elements.
use serde::Serialize;

use crate::model::plan::{LinkId, NodeId, Plan, Role};

/// Above this many hosts, hosts are drawn one node per rack.
pub const HOST_DETAIL_LIMIT: usize = 64;

const HOST_W: f64 = 96.0;
const SWITCH_W: f64 = 84.0;
const ZONE_GAP: f64 = 40.0;
const ROW_GAP: f64 = 180.0;
const MARGIN: f64 = 50.0;

/// A node of the picture: one switch, one host, or a rack's hosts.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Box2 {
    /// The name the CLI uses (`z0r1`, `z0r1h0`), or `z0r1/hosts` for a rack's hosts.
    pub name: String,
    pub label: String,
    pub role: Role,
    pub x: f64,
    pub y: f64,
    /// The plan's nodes this box stands for.
    #[serde(skip)]
    pub members: Vec<NodeId>,
}

/// An edge of the picture: one link, or a rack's host links. `lower` is the end a tier down.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Edge {
    /// `LOWER:PORT` as `fabric link` names links (`z0r1:z0c3`), or `z0r1/hosts:z0r1`.
    pub id: String,
    pub lower: usize,
    pub upper: usize,
    /// Among the parallel edges between the same two boxes: which one, and how many.
    pub lane: usize,
    pub lanes: usize,
    #[serde(skip)]
    pub links: Vec<LinkId>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Layout {
    pub testbed: String,
    pub width: f64,
    pub height: f64,
    /// Hosts drawn one box per rack.
    pub racks_aggregated: bool,
    pub boxes: Vec<Box2>,
    pub edges: Vec<Edge>,
}

impl Layout {
    /// Lays out a plan; hosts per rack when there are more than [`HOST_DETAIL_LIMIT`].
    pub fn of(plan: &Plan) -> Layout {
        Layout::with_detail(plan, plan.hosts().count() <= HOST_DETAIL_LIMIT)
    }

    pub fn with_detail(plan: &Plan, every_host: bool) -> Layout {
        let has_atsw = plan.nodes.iter().any(|n| n.role == Role::Atsw);
        let mut p = Placer {
            plan,
            every_host,
            top_row: if has_atsw { 0.0 } else { 1.0 },
            x: MARGIN,
            boxes: Vec::new(),
            box_of: vec![usize::MAX; plan.nodes.len()],
        };
        let zones = plan.nodes.iter().filter_map(|n| n.zone).max().map_or(0, |z| z + 1);
        for zone in 0..zones {
            p.zone(zone);
        }
        let atsws: Vec<NodeId> = plan.switches().filter(|&n| plan.nodes[n].role == Role::Atsw).collect();
        let right = (p.x - ZONE_GAP).max(MARGIN + atsws.len() as f64 * SWITCH_W);
        for (i, a) in atsws.iter().enumerate() {
            p.put(node_box(plan, *a, spread(MARGIN, right, i, atsws.len()), p.row_y(Role::Atsw)));
        }
        let edges = edges(plan, &p.boxes, &p.box_of);
        Layout {
            testbed: plan.topology.prefix.clone(),
            width: right + MARGIN,
            height: p.row_y(Role::Host) + MARGIN + 10.0,
            racks_aggregated: !every_host,
            boxes: p.boxes,
            edges,
        }
    }

    pub fn box_named(&self, name: &str) -> Option<&Box2> {
        self.boxes.iter().find(|b| b.name == name)
    }
}

/// Places boxes left to right, zone by zone.
struct Placer<'p> {
    plan: &'p Plan,
    every_host: bool,
    /// The row of the highest tier present (ATSWs if any, else CTSWs).
    top_row: f64,
    /// Where the next rack starts.
    x: f64,
    boxes: Vec<Box2>,
    /// The box of each plan node.
    box_of: Vec<usize>,
}

impl Placer<'_> {
    fn row_y(&self, role: Role) -> f64 {
        let row = match role {
            Role::Atsw => 0.0,
            Role::Ctsw => 1.0,
            Role::Rtsw => 2.0,
            Role::Host => 3.0,
        };
        MARGIN + (row - self.top_row) * ROW_GAP
    }

    fn put(&mut self, b: Box2) {
        for &m in &b.members {
            self.box_of[m] = self.boxes.len();
        }
        self.boxes.push(b);
    }

    fn in_zone(&self, role: Role, zone: usize) -> Vec<NodeId> {
        let plan = self.plan;
        plan.switches().filter(|&n| plan.nodes[n].role == role && plan.nodes[n].zone == Some(zone)).collect()
    }

    /// A zone's racks side by side, its CTSWs spread over them.
    fn zone(&mut self, zone: usize) {
        let start = self.x;
        for rtsw in self.in_zone(Role::Rtsw, zone) {
            self.rack(rtsw);
        }
        let ctsws = self.in_zone(Role::Ctsw, zone);
        self.x = self.x.max(start + ctsws.len() as f64 * SWITCH_W);
        for (i, &c) in ctsws.iter().enumerate() {
            self.put(node_box(self.plan, c, spread(start, self.x, i, ctsws.len()), self.row_y(Role::Ctsw)));
        }
        self.x += ZONE_GAP;
    }

    /// An RTSW over its hosts (or over its rack's one box of hosts).
    fn rack(&mut self, rtsw: NodeId) {
        let plan = self.plan;
        let hosts: Vec<NodeId> = plan.hosts().filter(|&h| plan.rtsw_of(h) == rtsw).collect();
        let start = self.x;
        let width = if self.every_host {
            for (i, &h) in hosts.iter().enumerate() {
                self.put(node_box(plan, h, start + (i as f64 + 0.5) * HOST_W, self.row_y(Role::Host)));
            }
            (hosts.len() as f64 * HOST_W).max(SWITCH_W)
        } else {
            if !hosts.is_empty() {
                let name = format!("{}/hosts", plan.nodes[rtsw].name);
                let label = format!("{} hosts", hosts.len());
                let (x, y) = (start + SWITCH_W / 2.0, self.row_y(Role::Host));
                self.put(Box2 { name, label, role: Role::Host, x, y, members: hosts });
            }
            SWITCH_W
        };
        self.put(node_box(plan, rtsw, start + width / 2.0, self.row_y(Role::Rtsw)));
        self.x = start + width;
    }
}

fn node_box(plan: &Plan, n: NodeId, x: f64, y: f64) -> Box2 {
    let name = plan.nodes[n].name.clone();
    Box2 { label: name.clone(), name, role: plan.nodes[n].role, x, y, members: vec![n] }
}

/// The centre of the `i`-th of `n` equal slots between `from` and `to`.
fn spread(from: f64, to: f64, i: usize, n: usize) -> f64 {
    from + (to - from) * (i as f64 + 0.5) / n.max(1) as f64
}

/// One edge per link, except that the links of an aggregated rack to its RTSW are one edge.
fn edges(plan: &Plan, boxes: &[Box2], box_of: &[usize]) -> Vec<Edge> {
    let mut out: Vec<Edge> = Vec::new();
    for (id, link) in plan.links.iter().enumerate() {
        let (lower, upper) = (box_of[link.a], box_of[link.b]);
        if boxes[lower].members.len() > 1 {
            if let Some(e) = out.iter_mut().find(|e| e.lower == lower && e.upper == upper) {
                e.links.push(id);
                continue;
            }
            let id_text = format!("{}:{}", boxes[lower].name, boxes[upper].name);
            out.push(Edge { id: id_text, lower, upper, lane: 0, lanes: 1, links: vec![id] });
            continue;
        }
        let id_text = format!("{}:{}", plan.nodes[link.a].name, plan.nodes[link.a].ports[link.a_port].ifname);
        out.push(Edge { id: id_text, lower, upper, lane: 0, lanes: 1, links: vec![id] });
    }
    // Parallel links between the same two switches are drawn side by side.
    for i in 0..out.len() {
        let same: Vec<usize> =
            (0..out.len()).filter(|&j| out[j].lower == out[i].lower && out[j].upper == out[i].upper).collect();
        out[i].lanes = same.len();
        out[i].lane = same.iter().position(|&j| j == i).unwrap_or(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::topology::Topology;

    fn plan(toml: &str) -> Plan {
        Plan::new(&Topology::parse(toml, "test").unwrap())
    }

    pub(crate) fn default_plan() -> Plan {
        Plan::new(&Topology::load(None).unwrap())
    }

    #[test]
    fn every_node_and_link_of_the_default_testbed_is_placed_by_tier() {
        let p = default_plan();
        let l = Layout::of(&p);
        assert!(!l.racks_aggregated);
        assert_eq!(l.boxes.len(), p.nodes.len());
        assert_eq!(l.edges.len(), p.links.len());
        let y = |name: &str| l.box_named(name).unwrap().y;
        assert!(y("z0c0") < y("z0r0") && y("z0r0") < y("z0r0h0"), "tiers go top to bottom");
        // Each RTSW sits over its own hosts.
        let r1 = l.box_named("z0r1").unwrap().x;
        assert!(l.box_named("z0r1h0").unwrap().x < r1 && r1 < l.box_named("z0r1h1").unwrap().x);
        assert!(l.boxes.iter().all(|b| b.x > 0.0 && b.x < l.width && b.y < l.height));
        assert!(l.edges.iter().any(|e| e.id == "z0r1:z0c3"), "links are named as `fabric link` names them");
    }

    #[test]
    fn parallel_links_get_lanes_and_atsws_a_row_of_their_own() {
        let p = plan(
            "name = \"t\"\nprefix = \"t\"\n[[zones]]\nname = \"z0\"\nracks = 2\nhosts_per_rack = 1\nspines = 2\n\
             uplinks_per_spine = 2\n[[zones]]\nname = \"z1\"\nracks = 2\nhosts_per_rack = 1\nspines = 2\n\
             uplinks_per_spine = 2\n[atsw]\ncount = 1\nuplinks_per_ctsw = 1\n",
        );
        let l = Layout::of(&p);
        assert_eq!(l.edges.len(), p.links.len());
        let pair: Vec<&Edge> = l.edges.iter().filter(|e| e.id.starts_with("z0r0:z0c0")).collect();
        assert_eq!(pair.len(), 2);
        assert_eq!((pair[0].lanes, pair[0].lane, pair[1].lane), (2, 0, 1));
        let atsw = l.boxes.iter().find(|b| b.role == Role::Atsw).unwrap();
        assert!(atsw.y < l.box_named("z0c0").unwrap().y);
        assert!(l.box_named("z0c0").unwrap().x < l.box_named("z1c0").unwrap().x, "zones side by side");
    }

    #[test]
    fn a_2048_host_fabric_draws_one_box_per_rack() {
        let p = plan(
            "name = \"big\"\nprefix = \"big\"\n[[zones]]\nname = \"z0\"\nracks = 32\nhosts_per_rack = 32\n\
             spines = 8\nuplinks_per_spine = 1\n[[zones]]\nname = \"z1\"\nracks = 32\nhosts_per_rack = 32\n\
             spines = 8\nuplinks_per_spine = 1\n[atsw]\ncount = 2\nuplinks_per_ctsw = 1\n",
        );
        assert_eq!(p.hosts().count(), 2048);
        let l = Layout::of(&p);
        assert!(l.racks_aggregated);
        let racks = l.boxes.iter().filter(|b| b.role == Role::Host).count();
        assert_eq!(racks, 64);
        assert!(l.boxes.iter().filter(|b| b.role == Role::Host).all(|b| b.members.len() == 32));
        // Host links fold into one edge per rack; every link is on exactly one edge.
        let mut seen: Vec<LinkId> = l.edges.iter().flat_map(|e| e.links.iter().copied()).collect();
        seen.sort();
        assert_eq!(seen, (0..p.links.len()).collect::<Vec<_>>());
        assert_eq!(l.edges.len(), p.links.len() - 2048 + 64);
    }
}
