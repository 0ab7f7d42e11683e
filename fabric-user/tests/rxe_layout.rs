//! The rxe host layout (`fabric up --endpoints rxe`) without rxe: this machine's kernel has none,
//! and its root namespace must not be touched, so a thread unshares into a fresh namespace that
//! plays "the initial namespace" and builds the layout there with the rxe step skipped. ICMP
//! between the hosts must cross the RTSWs' XDP uplinks; `down` must remove everything, also
//! without the saved layout (after a crash). The rxe part runs in the VM (`cargo xtask vm`).
//! Needs root.
mod common;

use std::{process::Command, time::Duration};

use fabric_user::{
    state::State,
    sys::netns,
    telemetry::stats::UplinkBytes,
    testbed,
    testbed::rxe::{self, RxeLayout, RxeOptions},
};

fn ip_out(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn uplink_total(state: &State, rtsw: &str, since: &UplinkBytes) -> u64 {
    UplinkBytes::read(state)
        .unwrap()
        .since(since)
        .iter()
        .filter(|u| u.rtsw == rtsw)
        .flat_map(|u| u.tx_bytes.iter().map(|t| t.1))
        .sum()
}

fn layout_test(prefix: &str) {
    netns::ip(&["link", "set", "lo", "up"]).unwrap();
    let topo = common::topology(Some("rxe-smoke.toml"), prefix);
    let guard = testbed::DownOnDrop(prefix.into());
    let (_, layout) =
        testbed::up_rxe(&topo, true, RxeOptions { create_devices: false }).unwrap_or_else(|e| panic!("{e:#}"));
    let state = State::load(prefix).unwrap();
    assert!(!layout.per_host_netns);
    assert_eq!(layout.hosts.len(), 2);
    // Host namespaces are gone; their veths are here, with the layout's rules.
    for h in &layout.hosts {
        assert!(netns::list_named(&state.plan.netns(h.node)).unwrap().is_empty(), "{} kept its namespace", h.host);
        assert!(netns::ifindex(&h.ifname).is_ok(), "no {} in the initial namespace", h.ifname);
    }
    let rules = ip_out(&["-4", "rule", "show"]);
    for h in &layout.hosts {
        assert!(rules.contains(&format!("50:\tfrom all iif {} lookup local", h.ifname)), "{rules}");
        assert!(rules.contains(&format!("100:\tfrom {} lookup {}", h.ipv4, h.table)), "{rules}");
        let table = ip_out(&["-4", "route", "show", "table", &h.table.to_string()]);
        assert!(table.contains(&format!("default via {} dev {}", h.gateway, h.ifname)), "{table}");
    }
    assert!(rules.contains("1000:\tfrom all lookup local"), "{rules}");
    assert!(!rules.lines().any(|l| l.starts_with("0:")), "the local rule is still at pref 0: {rules}");

    // ICMP both ways crosses each host's RTSW uplinks (the XDP counters), not the loopback.
    let (a, b) = (&layout.hosts[0], &layout.hosts[1]);
    let rtsw = |h: &rxe::RxeHost| state.plan.nodes[state.plan.rtsw_of(h.node)].name.clone();
    let before = UplinkBytes::read(&state).unwrap();
    for i in 0..5 {
        assert!(
            rxe::ping(a.ipv4, b.ipv4, 0x7100 + i, Duration::from_secs(3)).unwrap(),
            "{} -> {}: no reply",
            a.ipv4,
            b.ipv4
        );
        assert!(
            rxe::ping(b.ipv4, a.ipv4, 0x7200 + i, Duration::from_secs(3)).unwrap(),
            "{} -> {}: no reply",
            b.ipv4,
            a.ipv4
        );
    }
    let (up_a, up_b) = (uplink_total(&state, &rtsw(a), &before), uplink_total(&state, &rtsw(b), &before));
    // Each RTSW sent 5 echo requests and 5 replies up: 59-byte frames (17 bytes of payload).
    assert!(up_a >= 10 * 59 && up_b >= 10 * 59, "uplink bytes: {} {up_a}, {} {up_b}", rtsw(a), rtsw(b));

    // Down removes veths, rules, tables and restores the local rule.
    drop(guard);
    let rules = ip_out(&["-4", "rule", "show"]);
    assert!(rules.lines().any(|l| l.starts_with("0:\tfrom all lookup local")), "{rules}");
    assert!(!rules.contains(&format!("{prefix}-")) && !rules.contains("1000:"), "{rules}");
    for h in &layout.hosts {
        assert!(netns::ifindex(&h.ifname).is_err(), "{} left behind", h.ifname);
        assert!(!rules.contains(&format!("lookup {}", h.table)), "{rules}");
    }
    assert!(RxeLayout::load(prefix).is_err());

    // After a crash that lost the record: down finds everything by name and table.
    let guard = testbed::DownOnDrop(prefix.into());
    testbed::up_rxe(&topo, true, RxeOptions { create_devices: false }).unwrap_or_else(|e| panic!("{e:#}"));
    std::fs::remove_file(RxeLayout::path(prefix)).unwrap();
    let s = testbed::down(prefix).unwrap();
    assert!(s.rxe_removed >= 2 * 2 + 2, "removed only {}", s.rxe_removed);
    let rules = ip_out(&["-4", "rule", "show"]);
    assert!(
        !rules.contains(&format!("{prefix}-")) && rules.lines().any(|l| l.starts_with("0:\tfrom all lookup local")),
        "{rules}"
    );
    assert!(!ip_out(&["link", "show"]).contains(&format!("{prefix}-")));
    drop(guard);
}

#[test]
fn rxe_layout_routes_host_traffic_through_the_fabric_and_down_removes_it() {
    netns::require_capabilities().expect("this test needs root: it builds network namespaces");
    common::use_fabric_binary();
    let prefix = common::unique_prefix('x', 7);
    std::thread::spawn(move || {
        // This thread's fresh namespace is the layout's "initial namespace".
        netns::unshare_thread().unwrap();
        layout_test(&prefix);
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p));
}
