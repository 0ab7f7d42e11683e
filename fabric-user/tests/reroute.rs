//! Routing updates are safe for packets in flight: spine links fail and recover while a
//! collective runs, and afterwards no switch has dropped a packet for want of a route or a
//! group (what a torn or renumbered group, or a route naming a group not written yet, shows as),
//! every byte of the job was delivered, and every switch's port counters add up. Needs root.
mod common;

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use fabric_common::counters::DropReason;
use fabric_user::{
    endpoint::{EndpointOptions, SportPolicy},
    model::{placement::Placement, workload::Collective},
    run::{RunOptions, run},
    state::State,
    testbed,
};

fn ring() -> RunOptions {
    RunOptions {
        collective: Collective::Allreduce,
        ranks: None,
        message_bytes: 4 << 20,
        iterations: 1,
        placement: Placement::Fragmented,
        hash: Some(fabric_common::config::HashMode::Eecmp),
        hash_seed: None,
        seed: 1,
        endpoint: EndpointOptions { qps: 4, sport: SportPolicy::PerQp, ..Default::default() },
    }
}

/// The drop reasons that mean the tables were wrong for a moment.
const TABLE_DROPS: [DropReason; 3] = [DropReason::NoRoute, DropReason::EmptyGroup, DropReason::RedirectFailed];

#[test]
fn links_fail_and_recover_under_traffic_without_a_misrouted_packet() {
    let prefix = common::unique_prefix('q', 0);
    let (_guard, state) = common::up(None, &prefix);
    let flaps = ["z0r0:z0c1", "z0r1:z0c2", "z0r2:z0c0", "z0r3:z0c3", "z0r0:z0c2", "z0r1:z0c1"];
    let running = AtomicBool::new(true);
    let (result, flapped) = std::thread::scope(|s| {
        let flapper = s.spawn(|| {
            let mut n = 0;
            while running.load(Ordering::Relaxed) {
                let link = flaps[n % flaps.len()];
                testbed::set_link(&prefix, link, false).unwrap_or_else(|e| panic!("{link} down: {e:#}"));
                std::thread::sleep(Duration::from_millis(50));
                testbed::set_link(&prefix, link, true).unwrap_or_else(|e| panic!("{link} up: {e:#}"));
                std::thread::sleep(Duration::from_millis(50));
                n += 1;
            }
            n
        });
        let r = run(&state, &ring(), true);
        running.store(false, Ordering::Relaxed);
        (r, flapper.join().expect("flapper"))
    });
    let r = result.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(flapped >= 2, "the links flapped {flapped} times while the job ran: too short to tell");
    assert_eq!(r.bytes_delivered, r.bytes_needed, "every byte of the job arrived");

    let state = State::load(&prefix).unwrap();
    assert!(state.down_links.is_empty(), "every link came back");
    for sw in state.plan.switches() {
        let mut dp = state.dataplane(sw).unwrap();
        let (mut rx, mut out) = (0u64, 0u64);
        for port in 0..state.plan.nodes[sw].ports.len() as u32 {
            let c = dp.port_counters(port).unwrap();
            for reason in TABLE_DROPS {
                assert_eq!(
                    c.drops[reason as usize],
                    0,
                    "{} port {port}: {} packets dropped as {} after {flapped} flaps",
                    state.plan.nodes[sw].name,
                    c.drops[reason as usize],
                    reason.as_str()
                );
            }
            rx += c.rx_packets;
            out += c.tx_packets + c.drops.iter().sum::<u64>() + c.passes.iter().sum::<u64>() + c.rx_pfc_frames;
        }
        assert_eq!(
            rx, out,
            "{}: every received frame is redirected, dropped, passed or consumed",
            state.plan.nodes[sw].name
        );
    }
    // The kernel's own counts: a frame the switch redirected into a veth that could not take it
    // (a link already down) is dropped after XDP and counted by the ingress veth as an XDP drop
    // beyond the program's own (its drop reasons and consumed PFC frames), or by the egress
    // veth as a transmit error. None, since every link is rerouted around before it goes down
    // and comes up before it is routed onto.
    for sw in state.plan.switches() {
        let mut dp = state.dataplane(sw).unwrap();
        for (i, port) in state.plan.nodes[sw].ports.iter().enumerate() {
            let c = dp.port_counters(i as u32).unwrap();
            let k = veth_stats(&state.plan.netns(sw), &port.ifname);
            let ours = c.drops.iter().sum::<u64>() + c.rx_pfc_frames;
            let name = format!("{}:{}", state.plan.nodes[sw].name, port.ifname);
            assert_eq!(
                k.xdp_drops,
                ours,
                "{name}: the kernel dropped {} frames after XDP",
                k.xdp_drops as i64 - ours as i64
            );
            assert_eq!(k.xmit_errors, 0, "{name}: {} redirected frames the veth could not send", k.xmit_errors);
        }
    }
    // Nothing was lost on a link, the failed ones included: what one switch redirected into a
    // link the other received (it may receive more: its neighbour's kernel sends its own frames,
    // neighbour discovery when a link comes up, which no XDP program counts on the way out).
    for link in &state.plan.links {
        let (a, b) = (&state.plan.nodes[link.a], &state.plan.nodes[link.b]);
        if !(a.role.is_switch() && b.role.is_switch()) {
            continue;
        }
        let count = |n, port: usize| state.dataplane(n).unwrap().port_counters(port as u32).unwrap();
        let (at_a, at_b) = (count(link.a, link.a_port), count(link.b, link.b_port));
        let name = format!("{}:{}", a.name, b.name);
        assert!(at_b.rx_packets >= at_a.tx_packets, "{name}: sent {} received {}", at_a.tx_packets, at_b.rx_packets);
        assert!(
            at_a.rx_packets >= at_b.tx_packets,
            "{name} (back): sent {} received {}",
            at_b.tx_packets,
            at_a.rx_packets
        );
    }
}

/// A veth's XDP counters (ethtool -S): frames the XDP program of this port dropped, or whose
/// redirect failed; and frames redirected into this veth that it failed to send.
struct VethStats {
    xdp_drops: u64,
    xmit_errors: u64,
}

fn veth_stats(netns: &str, ifname: &str) -> VethStats {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", netns, "ethtool", "-S", ifname])
        .output()
        .expect("ethtool (installed by cargo xtask setup)");
    assert!(out.status.success(), "ethtool -S {ifname}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let stat = |name: &str| -> u64 {
        text.lines()
            .filter_map(|l| l.trim().strip_prefix(name))
            .map(|v| v.trim_start_matches(':').trim().parse::<u64>().expect("a count"))
            .sum()
    };
    VethStats { xdp_drops: stat("rx_queue_0_xdp_drops"), xmit_errors: stat("tx_queue_0_xdp_xmit_errors") }
}
