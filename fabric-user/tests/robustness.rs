//! Hostile traffic in a live testbed, a controller killed mid-`up`, and testbeds side by side.
//! Needs root.
mod common;

use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::Duration,
};

use common::{assert_all_reachable, assert_nothing_left as nothing_left, root_links, unique_prefix as prefix};

use etherparse::PacketBuilder;
use fabric_common::counters::{DropReason, PortCounters};
use fabric_user::{
    sys::netns,
    testbed::{self, DownOnDrop},
};

/// An AF_PACKET socket for injecting raw frames on `dev` (in the calling thread's namespace).
fn raw_socket(dev: &str) -> (OwnedFd, libc::sockaddr_ll) {
    // SAFETY: plain socket syscall; ownership taken below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
    // SAFETY: fresh fd.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_ifindex = netns::ifindex(dev).unwrap() as i32;
    sll.sll_halen = 6;
    (fd, sll)
}

fn inject(fd: &OwnedFd, sll: &libc::sockaddr_ll, frame: &[u8]) -> bool {
    // SAFETY: valid fd, buffer and sockaddr_ll.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (sll as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    n == frame.len() as isize
}

fn udp_frame(src_mac: [u8; 6], dst_mac: [u8; 6], src: [u8; 4], dst: [u8; 4], dport: u16, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(src_mac, dst_mac).ipv4(src, dst, 64).udp(0xC123, dport);
    let mut out = Vec::new();
    b.write(&mut out, payload).unwrap();
    out
}

/// ICMP and ICMPv6 echo requests and replies the kernel of namespace `netns_name` has sent (its
/// SNMP counters).
fn echoes_sent(netns_name: &str) -> u64 {
    netns::in_named(netns_name, || {
        // /proc/net follows the process's namespace; thread-self follows this thread's.
        let v4 = std::fs::read_to_string("/proc/thread-self/net/snmp")?;
        let v6 = std::fs::read_to_string("/proc/thread-self/net/snmp6")?;
        Ok(snmp_field(&v4, "Icmp:", "OutEchos")
            + snmp_field(&v4, "Icmp:", "OutEchoReps")
            + snmp6_field(&v6, "Icmp6OutEchos")
            + snmp6_field(&v6, "Icmp6OutEchoReplies"))
    })
    .unwrap()
}

/// A field of /proc/net/snmp: a header line of names and a line of values, both under `table`.
fn snmp_field(text: &str, table: &str, name: &str) -> u64 {
    let mut rows = text.lines().filter(|l| l.starts_with(table));
    let (names, values) = (rows.next().unwrap(), rows.next().unwrap());
    let i = names.split_whitespace().position(|n| n == name).unwrap_or_else(|| panic!("no {name} in {table}"));
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

/// A field of /proc/net/snmp6: a name and a value per line.
fn snmp6_field(text: &str, name: &str) -> u64 {
    let line = text.lines().find(|l| l.split_whitespace().next() == Some(name));
    line.and_then(|l| l.split_whitespace().nth(1)).unwrap_or_else(|| panic!("no {name}")).parse().unwrap()
}

fn set_u16(f: &mut [u8], at: usize, v: u16) {
    f[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Recomputes the IPv4 header checksum of a frame (after editing the header).
fn fix_ipv4_checksum(f: &mut [u8]) {
    f[24..26].copy_from_slice(&[0, 0]);
    let c = fabric_common::checksum::internet_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn hostile_traffic_is_counted_and_not_one_frame_of_it_leaves_the_rack() {
    netns::require_capabilities().expect("this test needs root");
    let p = prefix('x', 0);
    let (_guard, state) = common::up(None, &p);
    let plan = &state.plan;
    let bad_host = plan.node_by_name("z0r0h0").unwrap();
    let victim = plan.node_by_name("z0r3h1").unwrap();
    let other = plan.node_by_name("z0r1h0").unwrap();
    let port = &plan.nodes[bad_host].ports[0];
    let rtsw = port.peer_node;
    let rtsw_port = port.peer_port as u32;
    let gw_mac = plan.nodes[rtsw].ports[port.peer_port].mac;
    let (me, dst) = (plan.host_ipv4(bad_host).octets(), plan.host_ipv4(victim).octets());
    let uplinks = plan.uplinks(rtsw);
    let uplink_tx = || -> u64 {
        let mut dp = state.dataplane(rtsw).unwrap();
        uplinks.iter().map(|&u| dp.port_counters(u as u32).unwrap().tx_packets).sum()
    };
    let host_port = || -> PortCounters { state.dataplane(rtsw).unwrap().port_counters(rtsw_port).unwrap() };

    let mut bth = [0u8; 12];
    bth[0] = 0x0A;
    let good_roce = udp_frame(port.mac, gw_mac, me, dst, 4791, &[&bth[..], &[0u8; 64]].concat());
    // A RoCE packet whose UDP payload holds half a BTH.
    let short_bth = udp_frame(port.mac, gw_mac, me, dst, 4791, &bth[..6]);
    // A UDP length longer than the IP payload.
    let mut bad_udp_len = good_roce.clone();
    set_u16(&mut bad_udp_len, 38, 4000);
    // The source address of another host.
    let spoofed =
        udp_frame(port.mac, gw_mac, plan.host_ipv4(other).octets(), dst, 4791, &[&bth[..], &[0u8; 64]].concat());
    // A PFC frame, as a misbehaving NIC would send it: pause all classes for the maximum.
    let mut pfc = vec![0x01, 0x80, 0xC2, 0, 0, 0x01];
    pfc.extend_from_slice(&port.mac);
    pfc.extend_from_slice(&[0x88, 0x08, 0x01, 0x01, 0x00, 0xFF]);
    pfc.extend(std::iter::repeat_n([0xFF, 0xFF], 8).flatten());
    pfc.resize(60, 0);
    // IP fragments: a first fragment (MF) and a later one.
    let mut first_frag = good_roce.clone();
    set_u16(&mut first_frag, 20, 0x2000);
    fix_ipv4_checksum(&mut first_frag);
    let mut later_frag = good_roce.clone();
    set_u16(&mut later_frag, 20, 0x0010);
    fix_ipv4_checksum(&mut later_frag);
    // Over the MTU: the veth refuses it before any switch sees it.
    let jumbo = udp_frame(port.mac, gw_mac, me, dst, 9999, &vec![0u8; 6000]);

    // The rack of the flooding host: the pings its hosts send are all that may leave it.
    let rack: Vec<_> = plan.hosts().filter(|&h| plan.rtsw_of(h) == rtsw).collect();
    let (in_rack, elsewhere) = (rack.len() as u64, plan.hosts().count() as u64 - rack.len() as u64);
    let rack_echoes = || -> u64 { rack.iter().map(|&h| echoes_sent(&plan.netns(h))).sum() };

    const N: u64 = 300;
    let tx0 = uplink_tx();
    let echoes0 = rack_echoes();
    let c0 = host_port();
    // Floods on one thread while every host pair pings on others.
    let sent_jumbo = std::thread::scope(|s| {
        let flood = s.spawn(|| {
            netns::in_named(&plan.netns(bad_host), || {
                let (fd, sll) = raw_socket(&port.ifname);
                for _ in 0..N {
                    for f in [&short_bth, &bad_udp_len, &spoofed, &pfc] {
                        assert!(inject(&fd, &sll, f), "injecting: {}", std::io::Error::last_os_error());
                    }
                }
                Ok(inject(&fd, &sll, &jumbo))
            })
            .unwrap()
        });
        assert_all_reachable(&state);
        flood.join().unwrap()
    });
    std::thread::sleep(Duration::from_millis(100));
    let c1 = host_port();
    let d = |r: DropReason| c1.drops[r as usize] - c0.drops[r as usize];
    assert_eq!(d(DropReason::TruncatedBth), N, "half a BTH");
    assert_eq!(d(DropReason::BadUdpLength), N, "UDP length beyond the packet");
    assert_eq!(d(DropReason::SpoofedSource), N, "another host's source address");
    // PFC from a host is consumed by its RTSW: it pauses the RTSW's port towards that host (all
    // eight classes) and goes no further, so a host cannot pause a spine it is not attached to.
    assert_eq!(c1.rx_pfc_frames - c0.rx_pfc_frames, N, "PFC frames stay with the RTSW");
    let mut rdp = state.dataplane(rtsw).unwrap();
    for class in 0..8 {
        assert!(rdp.queue(rtsw_port, class).unwrap().pauses_received >= N, "class {class} of the host port paused");
    }
    for sw in plan.switches().filter(|&n| n != rtsw) {
        let mut dp = state.dataplane(sw).unwrap();
        for (i, _) in plan.nodes[sw].ports.iter().enumerate() {
            assert_eq!(
                dp.port_counters(i as u32).unwrap().rx_pfc_frames,
                0,
                "{} saw a host's PFC",
                plan.nodes[sw].name
            );
        }
    }
    assert!(!sent_jumbo, "a frame over the MTU does not leave the host");
    // Only the pings reached the uplinks: not one of the 4 x 300 hostile frames did. All pairs
    // pinged once over IPv4 and once over IPv6 (no retries), and every pair answered, so each
    // rack host sent a request and a reply to every other host per family, as its kernel's
    // counters confirm; those to hosts outside the rack, and nothing else, went up.
    let echoes = rack_echoes() - echoes0;
    assert_eq!(echoes, 4 * in_rack * (in_rack + elsewhere - 1), "echoes the rack's kernels sent");
    let went_up = uplink_tx() - tx0;
    assert_eq!(went_up, 4 * in_rack * elsewhere, "packets up from {}: only the pings may leave", plan.nodes[rtsw].name);
    assert_all_reachable(&state);

    // Fragments are forwarded (later fragments hash on addresses only).
    let before = uplink_tx();
    netns::in_named(&plan.netns(bad_host), || {
        let (fd, sll) = raw_socket(&port.ifname);
        for _ in 0..50 {
            assert!(inject(&fd, &sll, &first_frag) && inject(&fd, &sll, &later_frag));
        }
        Ok(())
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(uplink_tx() - before, 100, "both kinds of fragment cross the fabric");
    testbed::down(&p).unwrap();
    nothing_left(&p);
}

/// `kill -9` of the controller at points all through `up`, then `down`: nothing remains.
#[test]
fn a_controller_killed_during_up_leaves_nothing_after_down() {
    netns::require_capabilities().expect("this test needs root");
    let before = root_links();
    for (i, delay_ms) in [5u64, 40, 120, 250, 400, 700].into_iter().enumerate() {
        let p = prefix('k', i as u32);
        let _guard = DownOnDrop(p.clone());
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fabric"))
            .args(["up", "--quiet", "--prefix", &p, "--topology"])
            .arg(format!("{}/../testbed/large.toml", env!("CARGO_MANIFEST_DIR")))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        let st = testbed::status(&p).unwrap();
        assert!(!st.healthy || delay_ms >= 400, "killed after {delay_ms} ms yet healthy?");
        let s = testbed::down(&p).unwrap();
        nothing_left(&p);
        assert_eq!(testbed::down(&p).unwrap().namespaces, 0, "down twice is harmless");
        eprintln!("killed after {delay_ms} ms: down removed {} namespaces", s.namespaces);
    }
    assert_eq!(root_links(), before, "nothing was left in the root namespace");
}

/// Ctrl-C during an experiment removes the testbed it built under a prefix its user never saw,
/// says so, and dies of the signal; without the handler the interrupted process would leave the
/// whole testbed behind (its namespaces, pins, state and switch agent). The signal comes as
/// soon as the testbed's state exists, while `up` may still be building it: the handler waits
/// for the bring-up, then removes all of it.
#[test]
fn an_interrupted_experiment_removes_its_testbed() {
    use std::os::unix::process::ExitStatusExt as _;
    netns::require_capabilities().expect("this test needs root");
    // `fabric experiment --prefix` takes 1..=5 characters; its first testbed adds an `a`.
    let base = format!("i{}", std::process::id() % 1000);
    let built = format!("{base}a");
    let _guard = DownOnDrop(built.clone());
    // A leftover of an earlier run under the same name would look like this one's testbed.
    testbed::down(&built).unwrap();
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().to_str().unwrap();
    let args = ["experiment", "incast", "--seeds", "1", "--prefix", &base, "--out", out_dir];
    let testbed_up = || fabric_user::state::State::load(&built).is_ok();
    let (status, err) =
        common::signal_when_ready(&args, "the experiment", testbed_up, libc::SIGINT, Duration::from_secs(120));
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}: {err}");
    assert!(err.contains(&format!("interrupted: removing testbed {built}")), "{err}");
    nothing_left(&built);
}

/// A `--prefix` that could name a path outside the testbed's folders (`..`, a slash, nothing)
/// is refused by every command before it touches anything: `down` removes what a prefix names.
#[test]
fn a_prefix_that_is_not_a_testbed_name_is_refused_and_touches_nothing() {
    let canary_name = format!("fabric-canary-{}", std::process::id());
    let canary = std::path::Path::new("/run").join(&canary_name);
    std::fs::create_dir_all(canary.join("agent")).unwrap();
    std::fs::write(canary.join("state.json"), "keep").unwrap();
    let outside = format!("../{canary_name}");
    for (args, prefix) in [
        (&["down"][..], outside.as_str()),
        (&["down"], ".."),
        (&["down"], ""),
        (&["down"], "Fab"),
        (&["status"], outside.as_str()),
        (&["stats"], "a/b"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_fabric"))
            .args(args)
            .args(["--prefix", prefix])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} --prefix {prefix:?} succeeded: {err}");
        assert!(err.contains("--prefix") && err.contains("a testbed prefix is 1..=6 characters"), "{args:?}: {err}");
    }
    // The library refuses too, not only the command line.
    let err = format!("{:#}", testbed::down(&outside).unwrap_err());
    assert!(err.contains("a testbed prefix is 1..=6 characters"), "{err}");
    assert_eq!(std::fs::read_to_string(canary.join("state.json")).unwrap(), "keep", "nothing outside was touched");
    assert!(canary.join("agent").is_dir());
    std::fs::remove_dir_all(&canary).unwrap();
}

/// Flags that a file or a subcommand would override are refused by name before anything runs:
/// `run --jobs` and `run --file` with run flags, and `sim`'s own options before `sim schedule`.
/// Without those flags the same commands get past the check (and stop at the missing testbed,
/// or run the schedule).
#[test]
fn flags_that_would_be_ignored_are_refused_by_name() {
    let fabric = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_fabric")).args(args).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let file = |rel: &str| format!("{}/../testbed/{rel}", env!("CARGO_MANIFEST_DIR"));
    let (jobs, workload) = (file("tenants/two-rings.toml"), file("workloads/alltoall.toml"));
    // A prefix no testbed uses, so that a run that passes the check stops at once.
    let absent = ["--prefix", "zz9"];
    let (ok, err) = fabric(&[&["run", "--jobs", &jobs, "--hash", "spray", "--qps", "8"][..], &absent].concat());
    assert!(!ok && err.contains("would be ignored") && err.contains("--qps, --hash"), "{err}");
    let (ok, err) = fabric(&[&["run", "--file", &workload, "--qps", "8"][..], &absent].concat());
    assert!(!ok && err.contains("--file") && err.contains("--qps would be ignored"), "{err}");
    for args in [&["run", "--jobs", &jobs][..], &["run", "--file", &workload]] {
        let (ok, err) = fabric(&[args, &absent].concat());
        assert!(!ok && !err.contains("would be ignored") && err.contains("no testbed"), "{args:?}: {err}");
    }
    // Options that do nothing alone, or that a replay cannot honour.
    let (ok, err) = fabric(&[&["run", "allreduce", "--hash-seed", "7"][..], &absent].concat());
    assert!(!ok && err.contains("--hash-seed") && err.contains("--hash"), "{err}");
    let trace = file("traces/dp-step");
    let (ok, err) = fabric(&[&["run", "trace", &trace, "--hash", "te"][..], &absent].concat());
    assert!(!ok && err.contains("--hash te: a trace replay places no flows"), "{err}");
    let (ok, err) = fabric(&[&["run", "trace", &trace, "--hash", "eecmp"][..], &absent].concat());
    assert!(!ok && err.contains("no testbed"), "{err}");
    let (ok, err) = fabric(&["link", "--prefix", "zz9", "--topology", &file("default.toml"), "down", "z0r0:z0c0"]);
    assert!(!ok && err.contains("'--prefix <PREFIX>' cannot be used with '--topology"), "{err}");
    let (ok, err) = fabric(&["sim", "--topology", &file("default.toml"), "schedule", "--jobs", "2"]);
    assert!(!ok && err.contains("'schedule' cannot be used with '--topology"), "{err}");
    let (ok, err) = fabric(&["sim", "schedule", "--topology", &file("default.toml"), "--jobs", "2", "--sizes", "2"]);
    assert!(ok, "{err}");
}

#[test]
fn two_testbeds_run_side_by_side() {
    netns::require_capabilities().expect("this test needs root");
    let (a, b) = (prefix('s', 1), prefix('s', 2));
    let (_ga, sa) = common::up(None, &a);
    let (_gb, sb) = common::up(Some("two-zones.toml"), &b);
    assert_all_reachable(&sa);
    assert_all_reachable(&sb);
    testbed::down(&a).unwrap();
    nothing_left(&a);
    // The other one is untouched.
    assert!(testbed::status(&b).unwrap().healthy);
    assert_all_reachable(&sb);
    testbed::down(&b).unwrap();
    nothing_left(&b);
}
