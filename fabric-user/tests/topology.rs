//! The topology file format: the shipped files under `testbed/`, and one test per kind of bad
//! input (inline, or a file under `tests/topology/` that states the expected error).
use std::path::{Path, PathBuf};

use fabric_common::config::HashMode;
use fabric_user::model::topology::{Addressing, AtswLayer, DEFAULT_TOPOLOGY, Tiers, Topology, Zone};

fn testbed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed")
}

fn shipped(file: &str) -> (String, Topology) {
    let path = testbed_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let topo = Topology::parse(&text, file).unwrap_or_else(|e| panic!("{e}"));
    (text, topo)
}

/// A zone table.
fn zone(name: &str, racks: u32, hosts: u32, spines: u32, ups: u32) -> String {
    format!(
        "[[zones]]\nname = \"{name}\"\nracks = {racks}\nhosts_per_rack = {hosts}\nspines = {spines}\n\
         uplinks_per_spine = {ups}\n"
    )
}

/// A topology: `top` are top-level keys, `tables` the tables after them.
fn doc(top: &str, tables: &str) -> String {
    format!("name = \"t\"\n{top}\n{tables}")
}

/// A valid single-zone topology with extra top-level keys / tables.
fn one_zone(top: &str, extra_tables: &str) -> String {
    doc(top, &format!("{}{extra_tables}", zone("z0", 4, 2, 4, 1)))
}

/// Parses `text`, expecting an error containing every needle; returns the message.
#[track_caller]
fn expect_err(text: &str, needles: &[&str]) -> String {
    let msg = match Topology::parse(text, "<test>") {
        Ok(t) => panic!("expected an error containing {needles:?}, but it parsed: {t:?}\n--- input:\n{text}"),
        Err(e) => e.to_string(),
    };
    assert!(msg.starts_with("<test>: "), "error does not name the source: {msg}");
    for n in needles {
        assert!(msg.contains(n), "error does not contain {n:?}:\n{msg}\n--- input:\n{text}");
    }
    msg
}

#[track_caller]
fn expect_ok(text: &str) -> Topology {
    Topology::parse(text, "<test>").unwrap_or_else(|e| panic!("{e}\n--- input:\n{text}"))
}

// ---------------------------------------------------------------------------------------------
// Shipped files.

#[test]
fn default_file_is_the_embedded_default() {
    let (text, topo) = shipped("default.toml");
    assert_eq!(text, DEFAULT_TOPOLOGY, "the embedded default is testbed/default.toml");
    let expected = Topology {
        name: "default".into(),
        prefix: "fab".into(),
        mtu: 1500,
        addressing: Addressing::default(),
        tiers: Tiers::default(),
        zones: vec![Zone { name: "z0".into(), racks: 4, hosts_per_rack: 2, spines: 4, uplinks_per_spine: 1 }],
        atsw: None,
        time_scale: fabric_user::model::topology::DEFAULT_TIME_SCALE,
        flowlet_gap_us: 50.0,
        congestion: Default::default(),
    };
    assert_eq!(topo, expected);
    assert_eq!(Topology::default_topology(), expected);
    assert_eq!(topo.hosts(), 8);
    assert_eq!(topo.node_count(), 8 + 4 + 4);
    assert_eq!(topo.link_count(), 8 + 4 * 4);
}

#[test]
fn two_zones_file() {
    let (_, t) = shipped("two-zones.toml");
    assert_eq!(t.prefix, "fab2");
    assert_eq!(t.zones.len(), 2);
    assert_ne!(t.zones[0].name, t.zones[1].name);
    for z in &t.zones {
        assert_eq!((z.racks, z.hosts_per_rack, z.spines, z.uplinks_per_spine), (2, 2, 2, 1), "zone {}", z.name);
    }
    let atsw = t.atsw.as_ref().expect("an ATSW layer");
    assert_eq!(*atsw, AtswLayer { count: 1, uplinks_per_ctsw: 1 });
    assert_eq!(t.hosts(), 8);
    assert_eq!(t.node_count(), 8 + 4 + 4 + 1);
    assert_eq!(t.link_count(), 8 + 2 * 2 * 2 + 4);
    // 2:1 oversubscribed across zones, all links at the same rate.
    assert_eq!(t.tiers.rtsw.rate_gbps, t.tiers.ctsw.rate_gbps);
    for z in &t.zones {
        let down = f64::from(z.racks * z.uplinks_per_spine) * t.tiers.rtsw.rate_gbps;
        let up = f64::from(atsw.count * atsw.uplinks_per_ctsw) * t.tiers.ctsw.rate_gbps;
        assert_eq!(down / up, 2.0, "zone {}", z.name);
    }
}

#[test]
fn large_file() {
    let (_, t) = shipped("large.toml");
    assert_eq!(t.prefix, "fabl");
    assert_eq!(t.zones.len(), 1);
    let z = &t.zones[0];
    assert_eq!((z.racks, z.hosts_per_rack, z.spines, z.uplinks_per_spine), (16, 4, 8, 1));
    assert!(t.atsw.is_none());
    assert_eq!(t.hosts(), 64);
    assert_eq!(t.node_count(), 88, "64 hosts + 16 RTSWs + 8 CTSWs");
    assert_eq!(t.link_count(), 64 + 16 * 8);
}

#[test]
fn reference_file_parses_and_documents_the_defaults() {
    let (text, t) = shipped("reference.toml");
    assert_eq!(t.zones.len(), 2);
    assert!(t.atsw.is_some());
    assert!(t.zones.iter().any(|z| z.uplinks_per_spine > 1), "shows parallel links");
    // The values it spells out are the defaults it claims to document.
    let minimal = expect_ok(&one_zone("", ""));
    assert_eq!(t.mtu, minimal.mtu);
    assert_eq!(t.addressing, minimal.addressing);
    assert_eq!(t.tiers, minimal.tiers);
    assert_eq!(t.time_scale, minimal.time_scale);
    assert_eq!(t.congestion, minimal.congestion);
    assert!(text.contains(&format!("Default \"{}\"", minimal.prefix)), "documents the default prefix");
    // Every field of the format appears in it as `key = ...`.
    let value: toml::Table = toml::from_str(&toml::to_string(&t).expect("serialises")).expect("reparses");
    let mut keys = Vec::new();
    collect_keys(&toml::Value::Table(value), &mut keys);
    assert!(keys.len() >= 20, "walked the whole structure: {keys:?}");
    for key in keys {
        let assigned = text.lines().any(|l| l.trim_start_matches(['#', ' ']).starts_with(&format!("{key} =")));
        assert!(assigned, "reference.toml does not show field {key:?}");
    }
}

fn collect_keys(v: &toml::Value, out: &mut Vec<String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                if !v.is_table() && !v.is_array() {
                    out.push(k.clone());
                }
                collect_keys(v, out);
            }
        }
        toml::Value::Array(a) => a.iter().for_each(|v| collect_keys(v, out)),
        _ => {}
    }
}

#[test]
fn shipped_files_have_distinct_prefixes_and_names() {
    let files = ["default.toml", "two-zones.toml", "large.toml", "reference.toml", "rxe-smoke.toml"];
    let topos: Vec<Topology> = files.iter().map(|f| shipped(f).1).collect();
    for (i, a) in topos.iter().enumerate() {
        for b in &topos[i + 1..] {
            assert_ne!(a.prefix, b.prefix, "{} and {} could not run side by side", a.name, b.name);
            assert_ne!(a.name, b.name);
        }
    }
    // Every .toml in testbed/ is one of the above (a new file needs a test).
    let mut on_disk: Vec<String> = std::fs::read_dir(testbed_dir())
        .expect("testbed/")
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = files.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

// ---------------------------------------------------------------------------------------------
// Accepted edge cases (so that the rules below are not simply rejecting everything).

#[test]
fn limits_themselves_are_accepted() {
    // A 64-member RTSW group, a 256-port RTSW (192 hosts + 64 uplinks), the 15-character
    // namespace "abcde-zzzr0h191" and a 6-character prefix.
    let t = expect_ok(&doc("prefix = \"abcde\"", &zone("zzz", 1, 192, 64, 1)));
    assert_eq!(t.zones[0].spines * t.zones[0].uplinks_per_spine, 64);
    assert_eq!(t.link_count(), 256);
    expect_ok(&doc("prefix = \"abcdef\"", &zone("zzz", 1, 2, 2, 1)));
    // The 24 links of one_zone fit a /26 (room for 32) and a /122; the plan may sit at the very
    // end of its range. The MTU limits themselves are allowed.
    expect_ok(&one_zone(
        "mtu = 1280",
        "[addressing]\nipv4 = \"198.19.255.192\"\nipv4_prefix_len = 26\nipv6 = \"fdff::ffc0\"\nipv6_prefix_len = 122\n",
    ));
    expect_ok(&one_zone("mtu = 3506", ""));
    // One zone may still have an ATSW layer; parallel links on both tiers.
    let t = expect_ok(&doc("", &format!("{}[atsw]\ncount = 2\nuplinks_per_ctsw = 32\n", zone("z0", 2, 2, 2, 32))));
    assert_eq!(t.link_count(), 4 + 2 * 2 * 32 + 2 * 2 * 32);
    // ... but not a /27 (room for 16).
    expect_err(
        &one_zone(
            "",
            "[addressing]\nipv4 = \"198.18.0.0\"\nipv4_prefix_len = 27\nipv6 = \"fd00::\"\nipv6_prefix_len = 64\n",
        ),
        &["addressing.ipv4_prefix_len", "24 links", "only 16 links fit", "at most /26"],
    );
}

// ---------------------------------------------------------------------------------------------
// Top-level scalars.

#[test]
fn empty_name() {
    expect_err(&format!("name = \"  \"\n{}", zone("z0", 1, 1, 1, 1)), &["name:", "must not be empty"]);
}

#[test]
fn bad_prefix() {
    for (prefix, why) in [
        ("", "is empty"),
        ("abcdefg", "too long"),
        ("Fab", "not allowed"),
        ("fa-b", "not allowed"),
        ("1fab", "start with a letter"),
    ] {
        expect_err(&one_zone(&format!("prefix = \"{prefix}\""), ""), &["prefix:", why, "1..=6", "[a-z0-9]"]);
    }
}

#[test]
fn mtu_out_of_range() {
    for mtu in [0, 1279, 3507, 9000] {
        expect_err(&one_zone(&format!("mtu = {mtu}"), ""), &["mtu:", &mtu.to_string(), "1280..=3506"]);
    }
}

// ---------------------------------------------------------------------------------------------
// Zones.

#[test]
fn no_zones() {
    expect_err("name = \"t\"\nzones = []\n", &["zones:", "at least 1 zone"]);
}

#[test]
fn duplicate_zone_names() {
    let text = doc(
        "",
        &format!("{}{}{}[atsw]\ncount = 1\n", zone("z0", 1, 1, 1, 1), zone("z1", 1, 1, 1, 1), zone("z0", 1, 1, 1, 1)),
    );
    expect_err(&text, &["zones[2].name:", "\"z0\"", "zones[0]", "unique"]);
}

#[test]
fn bad_zone_names() {
    for (name, why) in [
        ("", "is empty"),
        ("zone", "too long"),
        ("Z0", "not allowed"),
        ("z_", "not allowed"),
        ("0z", "start with a letter"),
    ] {
        expect_err(&doc("", &zone(name, 1, 1, 1, 1)), &["zones[0].name:", why, "1..=3", "[a-z0-9]"]);
    }
}

#[test]
fn zero_counts() {
    for (field, counts) in [
        ("racks", (0, 1, 1, 1)),
        ("hosts_per_rack", (1, 0, 1, 1)),
        ("spines", (1, 1, 0, 1)),
        ("uplinks_per_spine", (1, 1, 1, 0)),
    ] {
        let (r, h, s, u) = counts;
        // In the second zone, so that the index in the path is checked too.
        let text = doc("", &format!("{}{}[atsw]\ncount = 1\n", zone("z0", 1, 1, 1, 1), zone("z1", r, h, s, u)));
        expect_err(&text, &[&format!("zones[1].{field}:"), "must be at least 1"]);
    }
    expect_err(
        &doc("", &zone("z0", 1, 1, 1, 0)),
        &[
            "zones[0].uplinks_per_spine: must be at least 1 (a rack with no uplinks cannot reach the rest of the fabric)",
        ],
    );
}

#[test]
fn several_zones_need_an_atsw_layer() {
    let text = doc("", &format!("{}{}", zone("z0", 1, 1, 1, 1), zone("z1", 1, 1, 1, 1)));
    expect_err(&text, &["atsw:", "2 zones", "[atsw]"]);
}

#[test]
fn bad_atsw_layer() {
    let zones = format!("{}{}", zone("z0", 1, 1, 1, 1), zone("z1", 1, 1, 1, 1));
    expect_err(&doc("", &format!("{zones}[atsw]\ncount = 0\n")), &["atsw.count:", "at least 1"]);
    expect_err(
        &doc("", &format!("{zones}[atsw]\ncount = 1\nuplinks_per_ctsw = 0\n")),
        &["atsw.uplinks_per_ctsw:", "at least 1"],
    );
}

// ---------------------------------------------------------------------------------------------
// Group sizes, port counts, names.

#[test]
fn rtsw_uplink_group_too_large() {
    expect_err(
        &doc("", &zone("z0", 1, 1, 33, 2)),
        &["zones[0].spines/uplinks_per_spine:", "RTSW", "33 x 2 = 66", "at most 64"],
    );
    expect_err(
        &doc("", &zone("z0", 1, 1, 65, 1)),
        &["zones[0].spines/uplinks_per_spine:", "65 x 1 = 65", "at most 64"],
    );
}

#[test]
fn ctsw_group_towards_a_rack_too_large() {
    // Always also too large for the RTSW; the CTSW side is reported on its own.
    expect_err(
        &doc("", &zone("z0", 1, 1, 1, 65)),
        &["zones[0].uplinks_per_spine:", "towards a rack", "65 members", "at most 64"],
    );
}

#[test]
fn ctsw_group_towards_the_atsw_layer_too_large() {
    let text = doc("", &format!("{}[atsw]\ncount = 5\nuplinks_per_ctsw = 13\n", zone("z0", 1, 1, 1, 1)));
    expect_err(&text, &["atsw:", "towards the ATSW layer", "5 x 13 = 65", "at most 64"]);
}

#[test]
fn atsw_group_towards_a_zone_too_large() {
    let zones = format!("{}{}", zone("z0", 1, 1, 2, 1), zone("z1", 1, 1, 33, 1));
    let msg = expect_err(
        &doc("", &format!("{zones}[atsw]\ncount = 1\nuplinks_per_ctsw = 2\n")),
        &["zones[1].spines/atsw.uplinks_per_ctsw:", "ATSW", "\"z1\"", "33 x 2 = 66", "at most 64"],
    );
    assert!(!msg.contains("zones[0].spines/atsw"), "zone z0 is fine: {msg}");
}

#[test]
fn rtsw_with_too_many_ports() {
    expect_err(&doc("", &zone("z0", 1, 250, 8, 1)), &["zones[0]:", "RTSW would have 258 ports", "at most 256"]);
}

#[test]
fn ctsw_with_too_many_ports() {
    expect_err(&doc("", &zone("z0", 257, 1, 1, 1)), &["zones[0]:", "CTSW would have 257 ports", "at most 256"]);
    // The ATSW links count too: 254 racks + 4 ATSW links.
    let text = doc("", &format!("{}[atsw]\ncount = 2\nuplinks_per_ctsw = 2\n", zone("z0", 254, 1, 1, 1)));
    expect_err(&text, &["zones[0]:", "CTSW would have 258 ports", "atsw.count x atsw.uplinks_per_ctsw", "at most 256"]);
}

#[test]
fn atsw_with_too_many_ports() {
    let zones: String = (0..5).map(|i| zone(&format!("z{i}"), 1, 1, 60, 1)).collect();
    expect_err(
        &doc("", &format!("{zones}[atsw]\ncount = 1\n")),
        &["atsw.uplinks_per_ctsw:", "ATSW would have 300 ports", "at most 256"],
    );
}

#[test]
fn namespace_name_too_long() {
    // "abcdef-zzzr0h191" is 16 characters.
    expect_err(
        &doc("prefix = \"abcdef\"", &zone("zzz", 1, 192, 64, 1)),
        &["zones[0]:", "namespace name \"abcdef-zzzr0h191\"", "16 characters", "15", "prefix"],
    );
    // The last ATSW's name ("abcdef-a99999999") can be too long as well.
    let text = doc("prefix = \"abcdef\"", &format!("{}[atsw]\ncount = 100000000\n", zone("z0", 1, 1, 1, 1)));
    expect_err(&text, &["atsw.count:", "namespace name \"abcdef-a99999999\"", "16 characters"]);
}

#[test]
fn interface_name_too_long() {
    // Cannot happen while the port limits hold, but the names are checked on their own.
    let msg = expect_err(
        &doc("prefix = \"f\"", &zone("zzz", 4_000_000_000, 1, 1, 1)),
        &["zones[0]:", "interface name \"zzzr3999999999h0\"", "16 characters", "at most 15"],
    );
    assert!(msg.contains("CTSW would have"), "and the ports: {msg}");
    assert!(msg.contains("problems:"), "several problems are all listed: {msg}");
}

#[test]
fn too_many_nodes() {
    let zones = format!("{}{}", zone("z0", 255, 200, 1, 1), zone("z1", 255, 200, 1, 1));
    expect_err(&doc("", &format!("{zones}[atsw]\ncount = 1\n")), &["zones:", "102513 nodes", "at most 65536"]);
}

// ---------------------------------------------------------------------------------------------
// Tiers.

#[test]
fn bad_rates() {
    for tier in ["host", "rtsw", "ctsw", "atsw"] {
        for rate in ["0.0", "-1.5", "nan", "inf", "-inf"] {
            expect_err(
                &one_zone("", &format!("[tiers.{tier}]\nrate_gbps = {rate}\n")),
                &[&format!("tiers.{tier}.rate_gbps:"), "finite", "greater than 0"],
            );
        }
    }
    // A rate that the time scale (4000 by default) brings below what a port sends at: such a
    // link would carry nothing.
    expect_err(
        &one_zone("", "[tiers.rtsw]\nrate_gbps = 0.000001\n"),
        &["tiers.rtsw.rate_gbps:", "time_scale 4000 is 0 bit/s", "at least 0.004 Gbit/s"],
    );
    expect_ok(&one_zone("", "[tiers.rtsw]\nrate_gbps = 0.004\n"));
}

// ---------------------------------------------------------------------------------------------
// Address plan.

fn addressing(v4: &str, v4_len: u8, v6: &str, v6_len: u8) -> String {
    one_zone(
        "",
        &format!(
            "[addressing]\nipv4 = \"{v4}\"\nipv4_prefix_len = {v4_len}\nipv6 = \"{v6}\"\nipv6_prefix_len = {v6_len}\n"
        ),
    )
}

#[test]
fn ipv4_plan_outside_the_benchmarking_range() {
    expect_err(
        &addressing("10.0.0.0", 16, "fd00::", 64),
        &["addressing.ipv4:", "10.0.0.0/16", "not inside 198.18.0.0/15"],
    );
    expect_err(&addressing("198.20.0.0", 16, "fd00::", 64), &["addressing.ipv4:", "not inside 198.18.0.0/15"]);
    // The right network, but a prefix that reaches outside it.
    expect_err(
        &addressing("198.16.0.0", 14, "fd00::", 64),
        &["addressing.ipv4_prefix_len:", "not inside 198.18.0.0/15", "15..=31"],
    );
    expect_err(&addressing("0.0.0.0", 0, "fd00::", 64), &["addressing.ipv4_prefix_len:", "not inside"]);
}

#[test]
fn ipv4_prefix_len_too_long() {
    expect_err(
        &addressing("198.18.0.0", 32, "fd00::", 64),
        &["addressing.ipv4_prefix_len:", "32 is too long", "15..=31"],
    );
}

#[test]
fn ipv4_plan_not_aligned() {
    expect_err(
        &addressing("198.18.1.0", 16, "fd00::", 64),
        &["addressing.ipv4:", "not aligned", "/16", "use 198.18.0.0"],
    );
}

#[test]
fn ipv4_plan_too_small() {
    // The default topology has 8 host links + 16 RTSW-CTSW links; a /28 holds 8.
    expect_err(
        &addressing("198.18.0.0", 28, "fd00::", 64),
        &["addressing.ipv4_prefix_len:", "24 links", "only 8 links fit", "at most /26"],
    );
}

#[test]
fn ipv6_plan_outside_fd00() {
    expect_err(
        &addressing("198.18.0.0", 15, "2001:db8::", 64),
        &["addressing.ipv6:", "2001:db8::/64", "not inside fd00::/8"],
    );
    expect_err(
        &addressing("198.18.0.0", 15, "fc00::", 7),
        &["addressing.ipv6_prefix_len:", "not inside fd00::/8", "8..=127"],
    );
}

#[test]
fn ipv6_prefix_len_too_long() {
    expect_err(
        &addressing("198.18.0.0", 15, "fd00::", 128),
        &["addressing.ipv6_prefix_len:", "128 is too long", "8..=127"],
    );
}

#[test]
fn ipv6_plan_not_aligned() {
    expect_err(&addressing("198.18.0.0", 15, "fd00::1", 64), &["addressing.ipv6:", "not aligned", "/64", "use fd00::"]);
}

#[test]
fn ipv6_plan_too_small() {
    expect_err(
        &addressing("198.18.0.0", 15, "fd00::", 124),
        &["addressing.ipv6_prefix_len:", "24 links", "only 8 links fit", "at most /122"],
    );
}

#[test]
fn both_plans_reported_at_once() {
    let msg =
        expect_err(&addressing("10.0.0.0", 8, "fd00::1", 64), &["2 problems", "addressing.ipv4", "addressing.ipv6:"]);
    assert_eq!(msg.lines().count(), 3, "{msg}");
}

// ---------------------------------------------------------------------------------------------
// Errors found by serde (TOML syntax, unknown fields, types) name the field too.

#[test]
fn unknown_fields() {
    expect_err(&one_zone("nmae = \"x\"", ""), &["nmae:", "unknown field `nmae`", "expected one of"]);
    let text = doc("", &format!("{}{}bogus = 1\n[atsw]\ncount = 1\n", zone("z0", 1, 1, 1, 1), zone("z1", 1, 1, 1, 1)));
    expect_err(&text, &["zones[1].bogus:", "unknown field `bogus`", "uplinks_per_spine"]);
    expect_err(
        &one_zone("", "[atsw]\ncount = 1\nuplinks = 2\n"),
        &["atsw.uplinks:", "unknown field `uplinks`", "uplinks_per_ctsw"],
    );
    expect_err(&one_zone("", "[tiers.rtsw]\nrate = 100\n"), &["tiers.rtsw.rate:", "unknown field `rate`", "rate_gbps"]);
    expect_err(&one_zone("", "[tiers.spine]\nseed = 1\n"), &["tiers.spine:", "unknown field `spine`"]);
}

#[test]
fn wrong_types() {
    let z1 = zone("z1", 1, 1, 1, 1).replace("racks = 1", "racks = \"four\"");
    let text = doc("", &format!("{}{z1}[atsw]\ncount = 1\n", zone("z0", 1, 1, 1, 1)));
    expect_err(&text, &["zones[1].racks:", "invalid type", "expected u32"]);
    expect_err(&one_zone("mtu = 1500.5", ""), &["mtu:", "invalid type", "expected u32"]);
    expect_err(&format!("name = 3\n{}", zone("z0", 1, 1, 1, 1)), &["name:", "invalid type", "expected a string"]);
    expect_err(&one_zone("", "[tiers.ctsw]\nrate_gbps = \"fast\"\n"), &["tiers.ctsw.rate_gbps:", "invalid type"]);
    expect_err(
        &doc("", &zone("z0", 1, 1, 1, 1).replace("racks = 1", "racks = -1")),
        &["zones[0].racks:", "-1", "expected u32"],
    );
    expect_err(&doc("", "zones = 1\n"), &["zones:", "invalid type", "sequence"]);
    // Inline tables are located too.
    expect_err(
        &doc("zones = [ { name = \"z0\", racks = 1, hosts_per_rack = 1, spines = true } ]", ""),
        &["zones[0].spines:", "invalid type"],
    );
}

#[test]
fn bad_enum_and_address_syntax() {
    expect_err(
        &one_zone("", "[tiers.rtsw]\nhash = \"ecmp\"\n"),
        &["tiers.rtsw.hash:", "unknown hash mode \"ecmp\"", "five-tuple", "eecmp", "pin"],
    );
    expect_err(
        &one_zone(
            "",
            "[addressing]\nipv4 = \"198.18.0\"\nipv4_prefix_len = 15\nipv6 = \"fd00::\"\nipv6_prefix_len = 64\n",
        ),
        &["addressing.ipv4:", "invalid IPv4 address syntax"],
    );
    expect_err(
        &one_zone(
            "",
            "[addressing]\nipv4 = \"198.18.0.0\"\nipv4_prefix_len = 15\nipv6 = \"fd00:::\"\nipv6_prefix_len = 64\n",
        ),
        &["addressing.ipv6:", "invalid IPv6 address syntax"],
    );
    // All routing modes are accepted; an unknown one is named with the list.
    expect_err(
        &one_zone("", "[tiers.ctsw]\nhash = \"reps\"\n"),
        &["unknown hash mode \"reps\"", "flowlet, adaptive, spray, wcmp"],
    );
    for m in HashMode::ROUTING {
        let t = expect_ok(&one_zone("", &format!("[tiers.ctsw]\nhash = \"{}\"\n", m.as_str())));
        assert_eq!(t.tiers.ctsw.hash, m);
    }
}

#[test]
fn missing_fields() {
    expect_err(&zone("z0", 1, 1, 1, 1), &["missing field `name`"]);
    expect_err("name = \"t\"\n", &["missing field `zones`"]);
    expect_err(&doc("", &zone("z0", 1, 1, 1, 1).replace("spines = 1\n", "")), &["zones[0]:", "missing field `spines`"]);
    expect_err(
        &one_zone("", "[addressing]\nipv4 = \"198.18.0.0\"\n"),
        &["addressing:", "missing field `ipv4_prefix_len`"],
    );
    expect_err(&one_zone("", "[atsw]\nuplinks_per_ctsw = 1\n"), &["atsw:", "missing field `count`"]);
}

#[test]
fn toml_syntax_error() {
    expect_err("name = \"t\" zones = []\n", &["TOML parse error at line 1"]);
    expect_err(&one_zone("", "[[zones]\n"), &["TOML parse error"]);
}

// ---------------------------------------------------------------------------------------------
// Bad files under tests/topology/: each states what its error must contain in `# expect:` lines.

#[test]
fn bad_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/topology");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the bad files are there: {files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).expect("readable");
        let needles: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("# expect: ")).collect();
        assert!(!needles.is_empty(), "{} has no `# expect:` line", path.display());
        let name = path.display().to_string();
        match Topology::parse(&text, &name) {
            Ok(_) => panic!("{name} parsed, but should fail with {needles:?}"),
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.starts_with(&format!("{name}: ")), "{msg}");
                for n in needles {
                    assert!(msg.contains(n), "{name}: error does not contain {n:?}:\n{msg}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The congestion model's section.

#[test]
fn congestion_settings_are_validated_field_by_field() {
    expect_err(&one_zone("time_scale = 0", ""), &["time_scale", "1..=1000000"]);
    expect_err(&one_zone("", "[congestion]\nlossless_classes = [3, 9]\n"), &["congestion.lossless_classes", "class 9"]);
    expect_err(
        &one_zone("", "[congestion]\nlossless_classes = [3, 3]\n"),
        &["congestion.lossless_classes", "class 3 is named twice"],
    );
    expect_ok(&one_zone("", "[congestion]\nlossless_classes = [3, 4]\n"));
    expect_err(&one_zone("", "[congestion]\npause_quanta = 0\n"), &["congestion.pause_quanta"]);
    expect_err(&one_zone("", "[congestion]\nwatchdog_us = -1.0\n"), &["congestion.watchdog_us"]);
    let tier = |body: &str| {
        one_zone(
            "",
            &format!(
                "[congestion.ctsw]\nbuffer = \"static\"\nbuffer_kb = 100\necn_kmin_kb = 10\necn_kmax_kb = 40\n\
                 ecn_pmax = 0.1\nxoff_kb = 50\nxon_kb = 20\nheadroom_kb = 30\n{body}"
            ),
        )
    };
    expect_ok(&tier(""));
    expect_err(&tier("alpha = 0.0\n"), &["congestion.ctsw.alpha"]);
    // The switches keep alpha in 256ths, rounded: below half of one it would become 0, a queue
    // limit of 0.
    expect_err(&tier("alpha = 0.001\n"), &["congestion.ctsw.alpha", "would become 0", "256ths"]);
    expect_ok(&tier("alpha = 0.003\n"));
    // A static buffer is held in 32 bits, a shared pool in 64.
    let buffer = |kind: &str| one_zone("", &format!("[congestion.ctsw]\nbuffer = \"{kind}\"\nbuffer_kb = 8000000\n"));
    expect_err(&buffer("static"), &["congestion.ctsw.buffer_kb", "static buffer (at most 4 GiB)"]);
    expect_ok(&buffer("shared"));
    let bad = one_zone(
        "",
        "[congestion.rtsw]\nbuffer = \"shared\"\nbuffer_kb = 0\necn_kmin_kb = 50\necn_kmax_kb = 40\n\
         ecn_pmax = 1.5\nxoff_kb = 50\nxon_kb = 50\nheadroom_kb = 30\n",
    );
    let msg = expect_err(
        &bad,
        &[
            "congestion.rtsw.buffer_kb",
            "congestion.rtsw.ecn_kmin_kb",
            "congestion.rtsw.ecn_pmax",
            "congestion.rtsw.xon_kb",
        ],
    );
    assert!(msg.contains("4 problems"), "{msg}");
    expect_err(&one_zone("", "[congestion.rtsw]\nbuffer = \"deep\"\n"), &["congestion.rtsw"]);
    expect_err(&one_zone("", "[congestion]\nenabeld = false\n"), &["enabeld"]);
}

#[test]
fn congestion_settings_become_what_the_switch_reads() {
    let t = expect_ok(&one_zone("time_scale = 1000", "[congestion]\nlossless_classes = [3, 4]\n"));
    let q = t.congestion.qos_config(&t.congestion.rtsw);
    assert_eq!(q.enabled, 1);
    assert_eq!(q.lossless_classes, 0b1_1000);
    assert_eq!((q.xoff_bytes, q.xon_bytes, q.headroom_bytes), (512 * 1024, 256 * 1024, 256 * 1024));
    assert_eq!(q.buffer_mode, fabric_common::qos::BufferMode::Shared as u32);
    assert_eq!(q.pool_bytes, 32 << 20);
    assert_eq!(q.alpha_x256, 256);
    assert_eq!((q.red.kmin_bytes, q.red.kmax_bytes), (100 * 1024, 400 * 1024));
    let c = t.congestion.qos_config(&t.congestion.ctsw);
    assert_eq!((c.buffer_mode, c.port_buffer_bytes), (fabric_common::qos::BufferMode::Static as u32, 16 << 20));
    // 400 Gbit/s at time scale 1000 is 400 Mbit/s; 1 modelled µs is 1 ms of wall time.
    assert_eq!(t.modelled_rate_bps(400.0), 400_000_000);
    assert_eq!(t.wall_ns(1_000.0), 1_000_000);
}

#[test]
fn the_flowlet_gap_is_positive_and_fits_the_switch_in_wall_clock_time() {
    for bad in ["0.0", "-5.0", "nan", "inf"] {
        expect_err(&one_zone(&format!("flowlet_gap_us = {bad}"), ""), &["flowlet_gap_us", "positive"]);
    }
    // 2 ms modelled at the default time scale is 8 s of wall-clock time: beyond 32 bits of ns.
    expect_err(&one_zone("flowlet_gap_us = 2000.0", ""), &["flowlet_gap_us", "wall-clock", "4294967295"]);
    let t = expect_ok(&one_zone("flowlet_gap_us = 20.0\ntime_scale = 1000", ""));
    assert_eq!(t.flowlet_gap_wall_ns(), 20_000_000);
    let cfg = t.switch_config(HashMode::Flowlet, 9);
    assert_eq!((cfg.mode(), cfg.seed, cfg.flowlet_gap_ns), (HashMode::Flowlet, 9, 20_000_000));
    // The default: 50 us modelled.
    assert_eq!(expect_ok(&one_zone("", "")).flowlet_gap_us, 50.0);
}
