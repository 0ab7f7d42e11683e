//! The whole fabric in namespaces: bring a testbed up from a topology, reach every host pair
//! through the XDP switches only, fail a spine link and keep reaching them, repair it, tear
//! down, and check nothing is left. Needs root.
mod common;

use common::{assert_all_reachable as all_reachable, assert_nothing_left, root_links, topology, unique_prefix};
use std::time::{Duration, Instant};

use aya::maps::{Array, Map, MapData};
use fabric_common::{config::PortInfo, maps};
use fabric_user::{
    state::{State, bpf_dir},
    sys::netns,
    testbed,
    testbed::{DownOnDrop as Teardown, probe},
};

/// Bytes sent on both ends of a link, from the switches' XDP counters.
fn link_tx(state: &State, link: usize) -> u64 {
    let l = &state.plan.links[link];
    [(l.a, l.a_port), (l.b, l.b_port)]
        .into_iter()
        .filter(|&(n, _)| state.plan.nodes[n].role.is_switch())
        .map(|(n, p)| state.dataplane(n).unwrap().port_counters(p as u32).unwrap().tx_packets)
        .sum()
}

fn agent_log(prefix: &str) -> String {
    std::fs::read_to_string(fabric_user::agent::log_path(prefix)).unwrap_or_default()
}

#[test]
fn default_testbed_forwards_only_through_xdp_survives_a_link_failure_and_leaves_nothing() {
    netns::require_capabilities().expect("this test needs root");
    common::use_fabric_binary();
    let before = root_links();
    let prefix = unique_prefix('t', 0);
    let guard = Teardown(prefix.clone());
    let topo = topology(None, &prefix);
    let up = testbed::up(&topo, true).expect("up");
    assert_eq!((up.switches, up.hosts, up.links), (8, 8, 24));
    let err = testbed::up(&topo, true).expect_err("a second up on the same prefix must refuse");
    assert!(format!("{err:#}").contains("already exists"), "{err:#}");
    let status = testbed::status(&prefix).unwrap();
    assert!(status.healthy, "{status:?}\nagent log:\n{}", agent_log(&prefix));

    let state = State::load(&prefix).unwrap();
    // The kernel cannot forward in switch namespaces: only XDP can.
    for sw in state.plan.switches() {
        let fwd =
            netns::in_named(&state.plan.netns(sw), || Ok(std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward")?))
                .unwrap();
        assert_eq!(fwd.trim(), "0", "{} forwards in the kernel", state.plan.nodes[sw].name);
    }
    let pairs = all_reachable(&state);
    assert_eq!(pairs, 8 * 7 * 2, "every ordered pair, over IPv4 and IPv6");
    // Every echo request and reply crossed an RTSW into a host port: the XDP counters saw them.
    let delivered: u64 = state
        .plan
        .hosts()
        .map(|h| {
            let port = &state.plan.nodes[h].ports[0];
            let rtsw = port.peer_node;
            state.dataplane(rtsw).unwrap().port_counters(port.peer_port as u32).unwrap().tx_packets
        })
        .sum();
    assert!(delivered >= 2 * pairs as u64, "XDP delivered {delivered} packets to hosts for {pairs} pings");

    // Fail a spine link: everything stays reachable, and the dead link carries nothing.
    let label = testbed::set_link(&prefix, "z0r0:z0c1", false).unwrap();
    assert_eq!(label, "z0r0:z0c1");
    let state = State::load(&prefix).unwrap();
    let dead = testbed::find_link(&state.plan, "z0r0:z0c1").unwrap();
    let dead_before = link_tx(&state, dead);
    all_reachable(&state);
    assert_eq!(link_tx(&state, dead), dead_before, "no packet is sent onto the failed link");
    assert_eq!(testbed::status(&prefix).unwrap().down_links, vec!["z0r0:z0c1".to_string()]);

    // Repair: it carries traffic again.
    testbed::set_link(&prefix, "z0c1:z0r0", true).unwrap();
    let state = State::load(&prefix).unwrap();
    assert!(state.down_links.is_empty());
    for _ in 0..3 {
        all_reachable(&state);
    }
    assert!(link_tx(&state, dead) > dead_before, "the repaired link is used again");
    // A link that went down and up keeps its addresses (the kernel drops a down port's IPv6
    // ones unless told not to): a host link too, whose host then still has its IPv6 route.
    testbed::check_addresses(&state.plan).expect("a repaired spine link keeps its addresses");
    testbed::set_link(&prefix, "z0r0:z0r0h0", false).unwrap();
    // `ping` with a host cut off: that host's pairs are reported unreachable (its own echoes
    // find no route at all), every other pair answers.
    let r = probe::all_pairs(&State::load(&prefix).unwrap()).unwrap();
    assert_eq!((r.pairs, r.reachable, r.unreachable.len()), (112, 84, 28), "{:?}", r.unreachable);
    assert!(r.unreachable.iter().all(|(s, d)| s == "z0r0h0" || d.starts_with("z0r0h0 ")), "{:?}", r.unreachable);
    testbed::set_link(&prefix, "z0r0:z0r0h0", true).unwrap();
    let state = State::load(&prefix).unwrap();
    testbed::check_addresses(&state.plan).expect("a repaired host link keeps its addresses");
    all_reachable(&state);

    // Down removes everything, and is safe to repeat.
    let s = testbed::down(&prefix).unwrap();
    assert_eq!(s.namespaces, 16);
    assert_nothing_left(&prefix);
    assert_eq!(testbed::down(&prefix).unwrap().namespaces, 0);
    assert_eq!(root_links(), before, "nothing was created in the root namespace");
    drop(guard);
}

/// Two zones through the ATSW layer, and the reference file's parallel links (dotted port names).
#[test]
fn two_zones_and_parallel_links_reach_every_host() {
    netns::require_capabilities().expect("this test needs root");
    common::use_fabric_binary();
    for (tag, file) in [('z', "two-zones.toml"), ('r', "reference.toml")] {
        let prefix = unique_prefix(tag, 0);
        let _guard = Teardown(prefix.clone());
        let topo = topology(Some(file), &prefix);
        testbed::up(&topo, true).unwrap_or_else(|e| panic!("{file}: {e:#}"));
        let state = State::load(&prefix).unwrap();
        all_reachable(&state);
        assert!(testbed::status(&prefix).unwrap().healthy, "{file}");
        testbed::down(&prefix).unwrap();
        assert!(netns::list_named(&format!("{prefix}-")).unwrap().is_empty());
    }
}

/// Without CAP_NET_ADMIN / CAP_BPF the controller refuses with a message naming them, and
/// creates nothing.
#[test]
fn refuses_clearly_without_capabilities() {
    let prefix = unique_prefix('c', 0);
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(env!("CARGO_BIN_EXE_fabric"))
        .args(["up", "--quiet", "--prefix", &prefix])
        .output()
        .expect("setpriv (util-linux) runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CAP_NET_ADMIN") && err.contains("CAP_BPF"), "{err}");
    assert!(netns::list_named(&format!("{prefix}-")).unwrap().is_empty());
}

#[test]
fn a_half_built_testbed_is_removed_by_down() {
    netns::require_capabilities().expect("this test needs root");
    let prefix = unique_prefix('h', 0);
    let _guard = Teardown(prefix.clone());
    // What a crash part-way through `up` leaves: some namespaces, no state, no pins.
    for node in ["z0r0", "z0c0", "z0r0h0"] {
        netns::create_named(&format!("{prefix}-{node}")).unwrap();
    }
    let st = testbed::status(&prefix).unwrap();
    assert!(!st.healthy);
    assert_eq!(st.unexpected_namespaces.len(), 3);
    assert_eq!(testbed::down(&prefix).unwrap().namespaces, 3);
    assert!(netns::list_named(&format!("{prefix}-")).unwrap().is_empty());
}

/// The switch agent lives and dies with its testbed: `up` starts it, `status` notices when it is
/// gone (a crash), `down` stops it and still cleans up after a crash; with the congestion model
/// off there is none.
#[test]
fn the_switch_agent_follows_its_testbed() {
    netns::require_capabilities().expect("this test needs root");
    common::use_fabric_binary();
    let prefix = unique_prefix('g', 0);
    let _guard = Teardown(prefix.clone());
    testbed::up(&topology(None, &prefix), true).expect("up");
    // `up` returns once the agent has opened every switch: no grace period.
    let s = testbed::status(&prefix).unwrap();
    assert!(s.agent_expected && s.agent_running && s.healthy, "{s:?}\nagent log:\n{}", agent_log(&prefix));
    // A crashed agent: the testbed is no longer healthy, and `down` still removes everything.
    let pid = fabric_user::agent::running(&prefix).expect("an agent pid");
    // SAFETY: signalling the agent this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: reaping our own child (the agent was spawned by this process).
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    let s = testbed::status(&prefix).unwrap();
    assert!(!s.agent_running && !s.healthy, "{s:?}");
    testbed::down(&prefix).unwrap();
    assert_nothing_left(&prefix);

    // With the congestion model off, no agent is started and the testbed is healthy without one.
    let mut topo = topology(None, &prefix);
    topo.congestion.enabled = false;
    testbed::up(&topo, true).expect("up");
    let s = testbed::status(&prefix).unwrap();
    assert!(!s.agent_expected && !s.agent_running && s.healthy, "{s:?}");
    testbed::down(&prefix).unwrap();
    assert_nothing_left(&prefix);
}

/// The XDP program's slow-path records reach the agent's log, naming the switch: a switch port
/// whose registration is taken back (PORTS written through the pins, as any `fabric` command
/// reopens them) sees its host's next frames as coming from no port, and says so.
#[test]
fn the_agent_log_names_the_switch_that_saw_a_frame_on_an_unregistered_port() {
    let prefix = unique_prefix('l', 0);
    let (_guard, state) = common::up(Some("rxe-smoke.toml"), &prefix);
    all_reachable(&state);
    assert!(!agent_log(&prefix).contains(" xdp: "), "a working testbed logs nothing:\n{}", agent_log(&prefix));

    let plan = &state.plan;
    let host = plan.hosts().next().expect("a host");
    let link = &plan.nodes[host].ports[0];
    let (rtsw, name) = (link.peer_node, &plan.nodes[link.peer_node].name);
    let ifname = &plan.nodes[rtsw].ports[link.peer_port].ifname;
    let ifindex = netns::in_named(&plan.netns(rtsw), || netns::ifindex(ifname)).unwrap();
    let pin = bpf_dir(&prefix).join(name).join(maps::PORTS);
    let mut ports: Array<MapData, PortInfo> = Map::Array(MapData::from_pin(&pin).unwrap()).try_into().unwrap();
    ports.set(ifindex, PortInfo::default(), 0).unwrap();
    // The host's pings now arrive at its switch on no registered port (and get no answer).
    let r = probe::all_pairs(&state).unwrap();
    assert!(r.reachable < r.pairs, "{r:?}");

    let expected = format!("frame on ifindex {ifindex}, which is no registered port: passed to the kernel");
    let switch = format!("switch={name}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = agent_log(&prefix);
        let found = log
            .lines()
            .any(|l| l.contains(" WARN xdp: ") && l.contains(&expected) && l.split_whitespace().any(|w| w == switch));
        if found {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no XDP record from {name} about ifindex {ifindex} in the agent log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    testbed::down(&prefix).unwrap();
    assert_nothing_left(&prefix);
}

/// `fabric ping --sample N` on the default testbed: every host sends and receives, the pairs
/// depend only on the seed, every probe is answered; the covering sample reaches every rack
/// pair; the command line says what it checked.
#[test]
fn sampled_ping_covers_every_host_and_rack_pair() {
    use fabric_user::testbed::probe::{self, Selection};
    let prefix = unique_prefix('p', 0);
    let (_guard, state) = common::up(None, &prefix);
    let hosts = state.plan.hosts().count();
    let a = probe::ping(&state, Selection::Sample(10), 7).unwrap();
    assert_eq!(a.reachable, a.pairs, "unreachable: {:?}", a.unreachable);
    assert_eq!(a.coverage.pairs, 10);
    assert_eq!(a.pairs, 2 * 10, "each pair over IPv4 and IPv6");
    assert!(a.coverage.every_host_source && a.coverage.every_host_destination, "{:?}", a.coverage);
    let again = probe::ping(&state, Selection::Sample(10), 7).unwrap();
    assert_eq!(again.coverage, a.coverage);

    let cover = probe::ping(&state, Selection::Cover, 3).unwrap();
    assert_eq!(cover.reachable, cover.pairs, "unreachable: {:?}", cover.unreachable);
    assert_eq!((cover.coverage.rack_pairs, cover.coverage.rack_pairs_total), (16, 16));
    assert!(cover.coverage.pairs < hosts * (hosts - 1));

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fabric"))
        .args(["ping", "--prefix", &prefix, "--sample", "10", "--seed", "7"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("checked 10 of 56 pairs: every host as source and destination"), "{text}");
    assert!(text.contains("20 of 20 probes answered"), "{text}");
    // The default testbed is small enough that every pair is checked: a seed there has nothing
    // to choose, and is refused rather than ignored.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fabric"))
        .args(["ping", "--prefix", &prefix, "--seed", "7"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--seed: this testbed's 8 hosts"), "{err}");
    testbed::down(&prefix).unwrap();
    assert_nothing_left(&prefix);
}

/// An address the kernel dropped (as it does when it cannot re-create an address's routes) is
/// reported by name, not left for a later route or ping to trip over.
#[test]
fn a_lost_address_is_reported() {
    let prefix = unique_prefix('a', 0);
    let (_guard, state) = common::up(None, &prefix);
    testbed::check_addresses(&state.plan).expect("a fresh testbed has every address");
    let host = state.plan.hosts().next().unwrap();
    let port = &state.plan.nodes[host].ports[0];
    netns::in_named(&state.plan.netns(host), || {
        netns::ip(&["-6", "addr", "del", &format!("{}/127", port.ipv6), "dev", &port.ifname])
    })
    .unwrap();
    let err = format!("{:#}", testbed::check_addresses(&state.plan).unwrap_err());
    assert!(err.contains(&format!("port {} has lost its address {}", port.ifname, port.ipv6)), "{err}");
    testbed::down(&prefix).unwrap();
    assert_nothing_left(&prefix);
}

/// Two `up`s of one prefix at once: the second finds the prefix claimed (its state folder made
/// by the first, before the first has a state file or a namespace) and stops without building or
/// removing anything; `down` then removes the folder.
#[test]
fn an_up_that_finds_its_prefix_claimed_builds_nothing_and_removes_nothing() {
    netns::require_capabilities().expect("this test needs root");
    let prefix = unique_prefix('k', 0);
    let _guard = Teardown(prefix.clone());
    let dir = fabric_user::state::state_dir(&prefix);
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("being-built-by-another-up");
    std::fs::write(&marker, b"").unwrap();
    let err = testbed::up(&topology(None, &prefix), true).expect_err("a claimed prefix must refuse");
    assert!(format!("{err:#}").contains("already exists or is being brought up"), "{err:#}");
    assert!(marker.exists(), "the refused up removed the other one's folder");
    assert!(netns::list_named(&format!("{prefix}-")).unwrap().is_empty(), "the refused up built something");
    let down = testbed::down(&prefix).unwrap();
    assert!(down.state_removed && !dir.exists());
}
