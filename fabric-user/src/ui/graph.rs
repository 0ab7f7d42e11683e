//! The picture of a topology: `fabric graph` (SVG or Graphviz DOT) and the live view's base
//! drawing. One drawing for both: the page serves the same SVG, with the current load on it,
//! and its script only recolours and relabels elements by id.
use std::fmt::Write as _;

use crate::{
    model::plan::Role,
    ui::{
        layout::{Edge, Layout},
        load,
        view::{LinkView, View},
    },
};

/// XML text and attribute escaping.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const BOX_W: f64 = 70.0;
const BOX_H: f64 = 26.0;
/// The two directions of a link are drawn this far apart, each side of the centre line.
const DIR_OFFSET: f64 = 2.5;
const LANE_GAP: f64 = 8.0;
/// The smallest scale a page may draw the picture at.
const MIN_SCALE: f64 = 0.7;

fn fill(role: Role) -> &'static str {
    match role {
        Role::Host => "#e8eef5",
        Role::Rtsw => "#cfe3f7",
        Role::Ctsw => "#d9d2f2",
        Role::Atsw => "#f2d9e6",
    }
}

/// The end points of one direction of an edge, shifted off the centre line (upward traffic to
/// the left of the line as it rises, downward to the right) and by its lane.
fn direction_line(layout: &Layout, e: &Edge, upward: bool) -> (f64, f64, f64, f64) {
    let (a, b) = (&layout.boxes[e.lower], &layout.boxes[e.upper]);
    let (x1, y1, x2, y2) = (a.x, a.y - BOX_H / 2.0, b.x, b.y + BOX_H / 2.0);
    let len = ((x2 - x1).powi(2) + (y2 - y1).powi(2)).sqrt().max(1.0);
    let (nx, ny) = (-(y2 - y1) / len, (x2 - x1) / len);
    let lane = (e.lane as f64 - (e.lanes as f64 - 1.0) / 2.0) * LANE_GAP;
    let off = lane + if upward { -DIR_OFFSET } else { DIR_OFFSET };
    (x1 + nx * off, y1 + ny * off, x2 + nx * off, y2 + ny * off)
}

/// Where an edge's label goes. A host link's label sits near the host (the links of a rack's
/// hosts converge on their RTSW). Between switch tiers the links cross: links of the same slope
/// (the same sideways offset) are parallel and never meet, so each slope gets a height of its
/// own and the labels of crossing links sit a line apart.
fn label_point(layout: &Layout, i: usize) -> (f64, f64) {
    let e = &layout.edges[i];
    let (a, b) = (&layout.boxes[e.lower], &layout.boxes[e.upper]);
    let t = if a.role == Role::Host {
        0.1
    } else {
        let offset = |e: &Edge| (layout.boxes[e.upper].x - layout.boxes[e.lower].x).round() as i64;
        let mut slopes: Vec<i64> = layout
            .edges
            .iter()
            .filter(|o| layout.boxes[o.lower].role == a.role && layout.boxes[o.upper].role == b.role)
            .map(offset)
            .collect();
        slopes.sort_unstable();
        slopes.dedup();
        let k = slopes.iter().position(|&s| s == offset(e)).unwrap_or(0);
        let level = 0.12 + 0.64 * k as f64 / (slopes.len().max(2) - 1) as f64;
        level + 0.05 * e.lane as f64
    };
    let (x1, y1, x2, y2) = (a.x, a.y - BOX_H / 2.0, b.x, b.y + BOX_H / 2.0);
    (x1 + (x2 - x1) * t, y1 + (y2 - y1) * t)
}

/// The topology as SVG, with the load of `view` on it when given.
pub fn svg(layout: &Layout, view: Option<&View>) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" id="fabric" class="{dense}" viewBox="0 0 {w:.0} {h:.0}" width="{w:.0}" height="{h:.0}" style="min-width:{min:.0}px" data-testbed="{tb}" font-family="DejaVu Sans, Arial, sans-serif">"#,
        w = layout.width,
        h = layout.height,
        // A page shrinks the picture to its width, but not below this: a large fabric scrolls
        // sideways rather than shrinking its names out of sight.
        min = layout.width * MIN_SCALE,
        // Hundreds of crossing links leave no room for their labels: the page hides them (the
        // colours and each link's tooltip remain).
        dense = if layout.racks_aggregated { "dense" } else { "" },
        tb = esc(&layout.testbed)
    );
    let _ = writeln!(o, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    for (i, e) in layout.edges.iter().enumerate() {
        let live = view.and_then(|v| v.links.iter().find(|l| l.id == e.id));
        edge_svg(&mut o, layout, i, e, live);
    }
    for b in &layout.boxes {
        let healthy = view.and_then(|v| v.switches.iter().find(|s| s.name == b.name)).is_none_or(|s| s.healthy);
        // The look of a failure is the class's (the page's style sheet): the script toggles
        // classes as readings come, and an attribute drawn here would outlive the recovery.
        let _ = writeln!(
            o,
            r##"<g class="node {role}{bad}" id="node-{n}" data-name="{n}" data-role="{role}"><title>{title}</title><rect x="{x:.1}" y="{y:.1}" width="{BOX_W}" height="{BOX_H}" rx="5" fill="{fill}" stroke="#34495e" stroke-width="1"/><text x="{cx:.1}" y="{ty:.1}" text-anchor="middle" font-size="12">{label}</text></g>"##,
            role = b.role.as_str(),
            bad = if healthy { "" } else { " unhealthy" },
            n = esc(&b.name),
            title = esc(&b.name),
            x = b.x - BOX_W / 2.0,
            y = b.y - BOX_H / 2.0,
            fill = fill(b.role),
            cx = b.x,
            ty = b.y + 4.0,
            label = esc(&b.label),
        );
    }
    o.push_str("</svg>\n");
    o
}

fn edge_svg(o: &mut String, layout: &Layout, i: usize, e: &Edge, live: Option<&LinkView>) {
    let id = esc(&e.id);
    let up = live.is_none_or(|l| l.up);
    let degraded = live.is_some_and(|l| !l.degraded.is_empty());
    let class = match (up, degraded) {
        (false, _) => " down",
        (true, true) => " degraded",
        (true, false) => "",
    };
    let _ = write!(o, r#"<g class="link{class}" id="link-{id}" data-link="{id}"><title>{id}</title>"#);
    for (upward, name) in [(true, "up"), (false, "down")] {
        let (x1, y1, x2, y2) = direction_line(layout, e, upward);
        let dir = live.map(|l| if upward { &l.up_dir } else { &l.down_dir });
        let colour = dir.map_or(load::BANDS[0].colour, |d| d.colour);
        let util = dir.map_or(0.0, |d| d.util);
        let _ = write!(
            o,
            r#"<line class="dir {name}" id="{id}/{name}" data-util="{util:.3}" x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{colour}" stroke-width="3"/>"#
        );
    }
    let (lx, ly) = label_point(layout, i);
    let label = live.map_or("", |l| &l.label);
    let marks = live.map_or("", |l| &l.marks);
    let _ = writeln!(
        o,
        r##"<text class="load" id="{id}/label" x="{lx:.1}" y="{ly:.1}" text-anchor="middle" font-size="11" font-weight="bold" fill="#1b2631" stroke="#ffffff" stroke-width="3" paint-order="stroke">{}</text><text class="marks" id="{id}/marks" x="{lx:.1}" y="{my:.1}" text-anchor="middle" font-size="10" fill="#8e44ad" stroke="#ffffff" stroke-width="3" paint-order="stroke">{}</text></g>"##,
        esc(label),
        esc(marks),
        my = ly + 12.0,
    );
}

/// The topology in Graphviz DOT: one node per box (switches and hosts by the CLI's names), one
/// edge per link named as `fabric link` names it, tiers as ranks, positions for `neato -n`.
pub fn dot(layout: &Layout) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "graph \"{}\" {{", dot_esc(&layout.testbed));
    let _ = writeln!(o, "  rankdir=BT;\n  node [shape=box, style=\"rounded,filled\", fontname=\"DejaVu Sans\"];");
    for role in [Role::Host, Role::Rtsw, Role::Ctsw, Role::Atsw] {
        let members: Vec<&crate::ui::layout::Box2> = layout.boxes.iter().filter(|b| b.role == role).collect();
        if members.is_empty() {
            continue;
        }
        let _ = writeln!(o, "  subgraph tier_{} {{\n    rank=same;", role.as_str());
        for b in members {
            let _ = writeln!(
                o,
                "    \"{}\" [label=\"{}\", tier=\"{}\", fillcolor=\"{}\", pos=\"{:.0},{:.0}\"];",
                dot_esc(&b.name),
                dot_esc(&b.label),
                role.as_str(),
                fill(role),
                b.x,
                layout.height - b.y
            );
        }
        o.push_str("  }\n");
    }
    for e in &layout.edges {
        let _ = writeln!(
            o,
            "  \"{}\" -- \"{}\" [id=\"{}\", tooltip=\"{}\"];",
            dot_esc(&layout.boxes[e.lower].name),
            dot_esc(&layout.boxes[e.upper].name),
            dot_esc(&e.id),
            dot_esc(&e.id)
        );
    }
    o.push_str("}\n");
    o
}

fn dot_esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ui::view;

    /// The start tags of an SVG and whether every element closes (a small well-formedness check).
    fn tags(svg: &str) -> Vec<String> {
        let mut open = Vec::new();
        let mut seen = Vec::new();
        for part in svg.split('<').skip(1) {
            let tag = part.split(['>', ' ', '/']).next().unwrap().to_string();
            let body = part.split('>').next().unwrap();
            if let Some(closing) = body.strip_prefix('/') {
                assert_eq!(open.pop().as_deref(), Some(closing), "unbalanced </{closing}>");
            } else if !body.ends_with('/') {
                open.push(tag.clone());
            }
            if !body.starts_with('/') {
                seen.push(tag);
            }
        }
        assert!(open.is_empty(), "unclosed {open:?}");
        seen
    }

    #[test]
    fn the_svg_has_every_switch_host_and_link_of_the_default_testbed() {
        let plan = view::tests::default_plan();
        let layout = Layout::of(&plan);
        let s = svg(&layout, None);
        assert!(s.contains(r#"id="fabric" class="""#), "a small fabric's links keep their labels");
        let tags = tags(&s);
        assert_eq!(tags.iter().filter(|t| *t == "line").count(), 2 * plan.links.len(), "two directions per link");
        assert_eq!(tags.iter().filter(|t| *t == "rect").count(), plan.nodes.len() + 1);
        for n in &plan.nodes {
            assert!(s.contains(&format!("id=\"node-{}\"", n.name)), "{} missing", n.name);
        }
        for l in 0..plan.links.len() {
            let name = crate::testbed::link_label(&plan, l);
            assert!(s.contains(&format!("id=\"link-{name}\"")), "{name} missing");
        }
    }

    #[test]
    fn the_svg_carries_the_live_load_and_health() {
        let plan = view::tests::default_plan();
        let layout = Layout::of(&plan);
        let (_, snap) = view::build(&plan, &layout, &view::tests::reading(&plan, 0), None, 0.0);
        let mut r = view::tests::reading(&plan, 12_500_000);
        r.unreadable.push(("z0c0".into(), "gone".into()));
        let (v, _) = view::build(&plan, &layout, &r, Some(&snap), 1.0);
        let s = svg(&layout, Some(&v));
        let hot = v.links.iter().find(|l| l.id == "z0r1:z0c3").unwrap();
        assert!(s.contains(&format!(r#"id="z0r1:z0c3/up" data-util="{:.3}""#, hot.up_dir.util)));
        assert!(s.contains(&format!(r#"stroke="{}""#, hot.up_dir.colour)));
        assert!(s.contains(&format!(">{}</text>", hot.label)) && hot.label.starts_with('\u{2191}'), "{}", hot.label);
        assert!(s.contains(r#"class="node ctsw unhealthy" id="node-z0c0""#));
        tags(&s);
    }

    #[test]
    fn the_dot_names_every_node_and_link_and_parses_back() {
        let plan = view::tests::default_plan();
        let d = dot(&Layout::of(&plan));
        assert!(d.starts_with("graph \"fab\" {") && d.trim_end().ends_with('}'));
        // Parse it back: node statements `"name" [..]`, edge statements `"a" -- "b" [id=".."]`.
        let quoted = |l: &str| l.split('"').nth(1).unwrap().to_string();
        let nodes: Vec<String> =
            d.lines().map(str::trim).filter(|l| l.starts_with('"') && !l.contains(" -- ")).map(quoted).collect();
        let edges: Vec<(String, String, String)> = d
            .lines()
            .filter(|l| l.contains(" -- "))
            .map(|l| {
                let f: Vec<&str> = l.split('"').collect();
                (f[1].to_string(), f[3].to_string(), f[5].to_string())
            })
            .collect();
        let mut names: Vec<String> = plan.nodes.iter().map(|n| n.name.clone()).collect();
        let mut got = nodes.clone();
        names.sort();
        got.sort();
        assert_eq!(got, names);
        assert_eq!(edges.len(), plan.links.len());
        for (l, link) in plan.links.iter().enumerate() {
            let id = crate::testbed::link_label(&plan, l);
            let (a, b) = (&plan.nodes[link.a].name, &plan.nodes[link.b].name);
            assert!(edges.contains(&(a.clone(), b.clone(), id.clone())), "{id}: {a} -- {b} missing");
        }
        // Tiers are ranks.
        assert_eq!(d.matches("rank=same").count(), 3);
    }

    #[test]
    fn a_2048_host_fabric_stays_a_picture_of_a_few_hundred_links() {
        let toml = "name = \"big\"\nprefix = \"big\"\n[[zones]]\nname = \"z0\"\nracks = 32\nhosts_per_rack = 32\n\
                    spines = 8\nuplinks_per_spine = 1\n[[zones]]\nname = \"z1\"\nracks = 32\nhosts_per_rack = 32\n\
                    spines = 8\nuplinks_per_spine = 1\n[atsw]\ncount = 2\nuplinks_per_ctsw = 1\n";
        let plan = crate::model::plan::Plan::new(&crate::model::topology::Topology::parse(toml, "big").unwrap());
        let layout = Layout::of(&plan);
        let (v, _) = view::build(&plan, &layout, &view::tests::reading(&plan, 0), None, 0.0);
        let s = svg(&layout, Some(&v));
        let t = tags(&s);
        assert!(s.contains(r#"id="fabric" class="dense""#), "a large fabric's page hides the link labels");
        // 64 rack edges, 512 RTSW uplinks, 32 CTSW uplinks; two lines each.
        assert_eq!(t.iter().filter(|t| *t == "line").count(), 2 * (64 + 512 + 32));
        assert_eq!(v.links.len(), 64 + 512 + 32);
        assert_eq!(v.switches.len(), 64 + 16 + 2);
        let json = serde_json::to_string(&v).unwrap();
        assert!(json.len() < 1 << 20 && s.len() < 1 << 20, "view {} bytes, picture {} bytes", json.len(), s.len());
    }
}
