//! The congestion model in the compiled switch program, under BPF_PROG_TEST_RUN: ECN marking on
//! ECT packets only (checksums intact), lossy overflow drops, lossless classes never dropped,
//! XOFF requests to the agent, and PFC frames consumed and pausing their port. Needs root.
use fabric_common::{
    checksum::internet_checksum,
    config::HashMode,
    counters::DropReason,
    pfc::{CLASSES, PauseFrame},
    qos::{BufferMode, PfcEvent, QosConfig},
    queue::{ECN_CE, ECN_MASK, RedParams},
};
use fabric_testkit::fixture::{
    FixtureSwitch, FrameSpec, UPLINKS, XDP_DROP, XDP_REDIRECT, frame, in_private_netns, neighbour_mac, set_tos,
};
use fabric_user::{agent::monotonic_ns, dataplane::PROGRAM_SWITCH};

/// RoCE data: DSCP 26 (class 3, lossless) with ECT(0); the same without ECT; best effort ECT(0).
const TOS_ROCE_ECT: u8 = 26 << 2 | 0b10;
const TOS_ROCE_NOT_ECT: u8 = 26 << 2;
const TOS_LOSSY_ECT: u8 = 0b10;

fn with_switch(qos: QosConfig, rate_bps: u64, f: impl FnOnce(&mut FixtureSwitch) -> anyhow::Result<()> + Send) {
    in_private_netns(|| {
        let mut sw = FixtureSwitch::new(HashMode::FiveTuple, 7)?;
        sw.dp.set_qos(qos)?;
        for p in 0..=UPLINKS {
            sw.dp.set_port_rate(p, rate_bps)?;
        }
        f(&mut sw)
    })
    .unwrap_or_else(|e| panic!("{e:#}"));
}

fn qos() -> QosConfig {
    QosConfig {
        enabled: 1,
        lossless_classes: 1 << 3,
        red: RedParams::new(0, 1, 1.0),
        xoff_bytes: 1 << 30,
        xon_bytes: 1 << 29,
        headroom_bytes: 4_000,
        buffer_mode: BufferMode::Static as u32,
        port_buffer_bytes: 1 << 20,
        alpha_x256: 256,
        pool_bytes: 0,
    }
}

fn roce(tos: u8, ipv6: bool) -> Vec<u8> {
    let mut f = frame(&FrameSpec { ipv6, payload_len: 1000, ..Default::default() });
    set_tos(&mut f, tos);
    f
}

fn tos_of(f: &[u8]) -> u8 {
    if f[14] >> 4 == 4 { f[15] } else { (f[14] << 4) | (f[15] >> 4) }
}

/// The uplink that counted a queued packet (all classes).
fn queued_on(sw: &mut FixtureSwitch, class: usize) -> Vec<u64> {
    (1..=UPLINKS).map(|p| sw.dp.class_counters(p, class).unwrap().packets).collect()
}

#[test]
fn ce_is_set_only_on_ect_packets_and_checksums_stay_valid() {
    with_switch(qos(), 1_000_000_000, |sw| {
        for ipv6 in [false, true] {
            for (tos, expect_ce) in [(TOS_ROCE_ECT, true), (TOS_ROCE_ECT & !3 | 1, true), (TOS_ROCE_NOT_ECT, false)] {
                let (res, out) = sw.run(PROGRAM_SWITCH, 0, &roce(tos, ipv6))?;
                assert_eq!(res.return_value, XDP_REDIRECT);
                let ecn = tos_of(&out) & ECN_MASK;
                assert_eq!(ecn == ECN_CE, expect_ce, "tos {tos:#x} ipv6 {ipv6}: ecn {ecn:#b}");
                assert_eq!(tos_of(&out) >> 2, 26, "the DSCP is untouched");
                if !ipv6 {
                    assert_eq!(internet_checksum(&out[14..34]), 0, "IPv4 header checksum still valid");
                }
                // The TTL was still decremented (the rewrite runs after the mark).
                let ttl = if ipv6 { out[14 + 7] } else { out[14 + 8] };
                assert_eq!(ttl, 63);
            }
        }
        let marked: u64 = (1..=UPLINKS).map(|p| sw.dp.class_counters(p, 3).unwrap().ecn_marked).sum();
        assert_eq!(marked, 4, "two ECT packets per family");
        Ok(())
    });
}

#[test]
fn a_full_lossy_queue_drops_and_a_lossless_one_never_does() {
    // 1 Mbit/s drains nothing in the microseconds this test takes; 3000 bytes of buffer hold two
    // 1100-byte frames.
    let q = QosConfig { port_buffer_bytes: 3_000, red: RedParams::new(1 << 20, 2 << 20, 0.0), ..qos() };
    with_switch(q, 1_000_000, |sw| {
        let lossy = roce(TOS_LOSSY_ECT, false);
        let actions: Vec<u32> = (0..5).map(|_| sw.run(PROGRAM_SWITCH, 0, &lossy).unwrap().0.return_value).collect();
        assert_eq!(actions, [XDP_REDIRECT, XDP_REDIRECT, XDP_DROP, XDP_DROP, XDP_DROP]);
        assert_eq!(sw.dp.port_counters(0)?.drops[DropReason::BufferOverflow as usize], 3);
        let overflow: u64 = (1..=UPLINKS).map(|p| sw.dp.class_counters(p, 0).unwrap().overflow_drops).sum();
        assert_eq!(overflow, 3);
        assert_eq!(queued_on(sw, 0).iter().sum::<u64>(), 2);

        let lossless = roce(TOS_ROCE_ECT, false);
        let actions: Vec<u32> = (0..8).map(|_| sw.run(PROGRAM_SWITCH, 0, &lossless).unwrap().0.return_value).collect();
        assert!(actions.iter().all(|&a| a == XDP_REDIRECT), "lossless: {actions:?}");
        let c = (1..=UPLINKS).map(|p| sw.dp.class_counters(p, 3).unwrap()).fold(
            Default::default(),
            |mut a: fabric_common::qos::ClassCounters, c| {
                a.accumulate(&c);
                a
            },
        );
        assert_eq!(c.packets, 8);
        assert!(c.over_headroom > 0, "8 x 1100 bytes exceed 3000 + 4000 of headroom");
        assert_eq!(c.overflow_drops, 0);
        let counts = queued_on(sw, 3);
        let port = 1 + counts.iter().position(|&n| n > 0).unwrap() as u32;
        let q = sw.dp.queue(port, 3)?;
        assert!(q.max_depth_bytes >= 8 * 1_000, "max depth {}", q.max_depth_bytes);
        Ok(())
    });
}

#[test]
fn crossing_xoff_asks_the_agent_once() {
    let q = QosConfig { xoff_bytes: 2_500, xon_bytes: 1_000, ..qos() };
    with_switch(q, 1_000_000, |sw| {
        let mut events = sw.dp.take_pfc_events()?;
        let f = roce(TOS_ROCE_ECT, false);
        let before = monotonic_ns();
        for _ in 0..6 {
            assert_eq!(sw.run(PROGRAM_SWITCH, 0, &f)?.0.return_value, XDP_REDIRECT);
        }
        let mut seen = Vec::new();
        while let Some(item) = events.next() {
            // SAFETY: the program writes one PfcEvent per record.
            seen.push(unsafe { std::ptr::read_unaligned::<PfcEvent>(item.as_ptr().cast()) });
        }
        assert_eq!(seen.len(), 1, "one request until the agent clears it: {seen:?}");
        let ev = seen[0];
        assert_eq!((ev.port, ev.class), (0, 3), "the ingress port and the lossless class");
        assert!(ev.held_bytes > 2_500 && ev.time_ns >= before);
        assert!(sw.dp.xoff_flag(0, 3)? >= before);
        assert_eq!(sw.dp.class_counters(0, 3)?.xoff_events, 1);
        // The agent clears the request; the next packet above Xoff asks again.
        sw.dp.clear_xoff(0, 3)?;
        sw.run(PROGRAM_SWITCH, 0, &f)?;
        assert!(events.next().is_some());
        // A lossy class never pauses.
        let lossy = roce(TOS_LOSSY_ECT, false);
        for _ in 0..6 {
            sw.run(PROGRAM_SWITCH, 0, &lossy)?;
        }
        assert_eq!(sw.dp.class_counters(0, 0)?.xoff_events, 0);
        Ok(())
    });
}

/// An agent that does not drain PFC_EVENTS: once the ring is full an XOFF request is lost and
/// counted (the one lost request, not every packet before it).
#[test]
fn a_full_pfc_event_ring_loses_the_xoff_and_counts_it() {
    let q = QosConfig { xoff_bytes: 2_500, xon_bytes: 1_000, ..qos() };
    with_switch(q, 1_000_000, |sw| {
        let f = roce(TOS_ROCE_ECT, false);
        // Each request sets the port/class's flag; clearing it (as the agent does after XON)
        // lets the next packet ask again. 64 KiB of 32-byte records fill in about 2048.
        let mut sent = 0;
        while sw.dp.class_counters(0, 3)?.xoff_events_lost == 0 {
            assert!(sent < 10_000, "the PFC_EVENTS ring never filled");
            assert_eq!(sw.run(PROGRAM_SWITCH, 0, &f)?.0.return_value, XDP_REDIRECT);
            sw.dp.clear_xoff(0, 3)?;
            sent += 1;
        }
        let c = sw.dp.class_counters(0, 3)?;
        // The first packets stay under Xoff; every one after asked, and only the last was lost.
        assert_eq!(c.xoff_events_lost, 1);
        assert!(c.xoff_events > 1_000 && c.xoff_events < sent, "{} requests in {sent} packets", c.xoff_events);
        Ok(())
    });
}

/// A slow port, so that a pause outlasts any stall of the test's thread between two runs: the
/// checks below must not depend on how soon the next run comes.
const SLOW_PORT_BPS: u64 = 10_000_000;

#[test]
fn a_pfc_frame_is_consumed_and_pauses_its_port_until_quanta_zero() {
    with_switch(qos(), SLOW_PORT_BPS, |sw| {
        let mut quanta = [0; CLASSES];
        const QUANTA: u16 = 10_000;
        const PAUSE_NS: u64 = QUANTA as u64 * 512 * 1_000_000_000 / SLOW_PORT_BPS; // 512 bit times each: 512 ms
        quanta[3] = QUANTA;
        quanta[5] = 7; // not enabled: ignored
        let pause = PauseFrame { src: neighbour_mac(2), class_enable: 1 << 3, quanta }.emit();
        let before = monotonic_ns();
        let (res, _) = sw.run(PROGRAM_SWITCH, 2, &pause)?;
        assert_eq!(res.return_value, XDP_DROP, "consumed, never forwarded");
        let c = sw.dp.port_counters(2)?;
        assert_eq!((c.rx_pfc_frames, c.total_drops(), c.tx_packets), (1, 0, 0));
        let q = sw.dp.queue(2, 3)?;
        assert!(q.paused_until_ns >= before + PAUSE_NS && q.paused_until_ns <= monotonic_ns() + PAUSE_NS, "{q:?}");
        assert_eq!(q.pauses_received, 1);
        assert_eq!(sw.dp.queue(2, 5)?.paused_until_ns, 0, "class 5 was not enabled");
        assert_eq!(sw.dp.queue(1, 3)?.paused_until_ns, 0, "only the receiving port pauses");

        // Quanta 0 resumes at once; the paused time is what elapsed.
        let resume = PauseFrame { src: neighbour_mac(2), class_enable: 1 << 3, quanta: [0; CLASSES] }.emit();
        sw.run(PROGRAM_SWITCH, 2, &resume)?;
        let resumed_by = monotonic_ns();
        let q = sw.dp.queue(2, 3)?;
        assert_eq!(q.paused_until_ns, 0);
        assert!(q.paused_total_ns <= resumed_by - before, "paused longer than the test ran: {q:?}");
        assert!(q.paused_total_ns < PAUSE_NS, "resumed early: {} ns paused", q.paused_total_ns);

        // 802.3x PAUSE (opcode 1) is MAC control too, but not PFC: consumed, counted as bad.
        let mut x = pause;
        x[15] = 0x01;
        x[14] = 0x00;
        let (res, _) = sw.run(PROGRAM_SWITCH, 2, &x)?;
        assert_eq!(res.return_value, XDP_DROP);
        assert_eq!(sw.dp.port_counters(2)?.drops[DropReason::BadMacControl as usize], 1);
        Ok(())
    });
}

#[test]
fn packets_sent_into_a_paused_port_count_as_the_models_error() {
    // u16::MAX quanta: 3.4 s at this rate, longer than the checks below take.
    with_switch(qos(), SLOW_PORT_BPS, |sw| {
        let f = roce(TOS_ROCE_ECT, false);
        let (_, out) = sw.run(PROGRAM_SWITCH, 0, &f)?;
        // Which uplink does this flow take? The one whose class-3 queue counted it.
        let counts = queued_on(sw, 3);
        let port = 1 + counts.iter().position(|&n| n == 1).expect("one uplink queued it") as u32;
        assert_eq!(&out[0..6], &neighbour_mac(port));
        let mut quanta = [0; CLASSES];
        quanta[3] = u16::MAX;
        let pause = PauseFrame { src: neighbour_mac(port), class_enable: 1 << 3, quanta }.emit();
        sw.run(PROGRAM_SWITCH, port, &pause)?;
        for _ in 0..3 {
            assert_eq!(sw.run(PROGRAM_SWITCH, 0, &f)?.0.return_value, XDP_REDIRECT);
        }
        let c = sw.dp.class_counters(port, 3)?;
        assert_eq!(c.sent_while_paused, 3);
        // A paused queue does not drain: all four packets are still in it.
        let q = sw.dp.queue(port, 3)?;
        let depth = fabric_common::queue::depth_bytes(q.tail_ns, q.paused_until_ns, monotonic_ns(), SLOW_PORT_BPS);
        assert!(depth >= 3 * f.len() as u64, "depth {depth}");
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// A live testbed: the switch agents send real PFC frames, and pauses spread hop by hop.

mod common;

use std::{process::Command, time::Duration};

use fabric_user::{state::State, sys::netns, telemetry::stats};

/// Sends DSCP 26 / ECT(0) UDP datagrams from `host` to `dst` as fast as it can for `secs`,
/// ignoring pauses (a misbehaving NIC, or rather one without PFC: the veth has none).
fn blast(state: &State, host: &str, dst: std::net::Ipv4Addr, secs: f64) -> u64 {
    let n = state.plan.node_by_name(host).unwrap();
    netns::in_named(&state.plan.netns(n), || {
        let sock = std::net::UdpSocket::bind("0.0.0.0:0")?;
        let tos: libc::c_int = TOS_ROCE_ECT.into();
        // SAFETY: a valid socket and option value.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&sock),
                libc::IPPROTO_IP,
                libc::IP_TOS,
                (&tos as *const libc::c_int).cast(),
                4,
            )
        };
        let buf = [0x5a_u8; 1000];
        let end = std::time::Instant::now() + Duration::from_secs_f64(secs);
        let mut sent = 0;
        while std::time::Instant::now() < end {
            for _ in 0..64 {
                if sock.send_to(&buf, (dst, 9999)).is_ok() {
                    sent += 1;
                }
            }
        }
        Ok(sent)
    })
    .unwrap()
}

#[test]
fn switch_agents_send_pfc_that_spreads_from_the_receivers_rack_to_the_spine_and_the_senders() {
    let prefix = common::unique_prefix('q', 1);
    let mut topo = common::topology(None, &prefix);
    // A watchdog of 50 modelled µs (200 ms here): the blasting senders never stop.
    topo.congestion.watchdog_us = 50.0;
    common::use_fabric_binary();
    let _guard = fabric_user::testbed::DownOnDrop(prefix.clone());
    fabric_user::testbed::up(&topo, true).unwrap_or_else(|e| panic!("{e:#}"));
    let state = State::load(&prefix).unwrap();
    let plan = &state.plan;
    let receiver = plan.host_ipv4(plan.node_by_name("z0r0h0").unwrap());

    // Capture what a remote sender's NIC receives from its RTSW.
    let watched = plan.node_by_name("z0r1h0").unwrap();
    let pcap = std::env::temp_dir().join(format!("fabric-pfc-{}.pcap", std::process::id()));
    let mut tcpdump = Command::new("ip")
        .args(["netns", "exec", &plan.netns(watched), "tcpdump", "--immediate-mode", "-B", "4096", "-U", "-s", "0"])
        .args(["-i", &plan.nodes[watched].ports[0].ifname, "-w"])
        .arg(&pcap)
        .args(["ether", "proto", "0x8808"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("tcpdump (apt-get install tcpdump)");
    std::thread::sleep(Duration::from_millis(500));

    std::thread::scope(|s| {
        for h in ["z0r0h1", "z0r1h0", "z0r2h0"] {
            let state = &state;
            s.spawn(move || blast(state, h, receiver, 2.0));
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(tcpdump.id() as i32, libc::SIGINT) };
    tcpdump.wait().unwrap();

    let r = stats::collect(&state).unwrap();
    let agent = |n: &str| r.agents.iter().find(|a| a.node == n).unwrap_or_else(|| panic!("no telemetry from {n}"));
    // The receiver's RTSW paused the same-rack sender and the spines that feed it.
    let rtsw = agent("z0r0");
    assert!(rtsw.pfc.iter().any(|p| p.ifname == "z0r0h1" && p.class == 3 && p.xoff_sent >= 1), "{:?}", rtsw.pfc);
    assert!(rtsw.pfc.iter().any(|p| p.ifname.starts_with("z0c") && p.xoff_sent >= 1), "{:?}", rtsw.pfc);
    assert!(rtsw.pfc.iter().all(|p| p.ifname != "z0r0h0"), "the receiver sends nothing to pause");
    // ... a spine paused by it paused the remote senders' RTSWs in turn, and those their hosts.
    let spine_pauses: u64 =
        r.agents.iter().filter(|a| a.node.starts_with("z0c")).flat_map(|a| &a.pfc).map(|p| p.xoff_sent).sum();
    assert!(spine_pauses >= 1, "no spine paused its upstream");
    for (rack, host) in [("z0r1", "z0r1h0"), ("z0r2", "z0r2h0")] {
        assert!(agent(rack).pfc.iter().any(|p| p.ifname == host && p.xoff_sent >= 1), "{rack}: {:?}", agent(rack).pfc);
    }
    // The paused spine ports saw the frames and stopped draining (their queues count the time).
    let spine_paused: Vec<_> = r
        .switches
        .iter()
        .filter(|s| s.switch.starts_with("z0c"))
        .flat_map(|s| &s.ports)
        .filter(|p| p.port == "z0r0")
        .flat_map(|p| &p.classes)
        .filter(|c| c.class == 3 && c.pauses_received > 0)
        .collect();
    assert!(!spine_paused.is_empty(), "no spine port towards z0r0 was paused");
    assert!(spine_paused.iter().all(|c| c.paused_ns > 0));
    // The lossless class lost nothing; pausing spines kept forwarding, which the model counts.
    assert_eq!(
        r.switches
            .iter()
            .flat_map(|s| &s.ports)
            .flat_map(|p| &p.classes)
            .filter(|c| c.class == 3)
            .map(|c| c.overflow_drops)
            .sum::<u64>(),
        0
    );
    assert!(r.congestion.sent_while_paused > 0);
    // XOFF delays were measured, and the senders never stopped: the watchdog fired.
    // (At least the two XOFFs asserted above: the host port's and a spine port's.)
    assert!(rtsw.xoff_delay.count >= 2 && rtsw.xoff_delay.median_ns > 0, "{:?}", rtsw.xoff_delay);
    assert!(r.congestion.watchdog_storms >= 1, "no PFC storm reported");

    // What the sender's NIC received decodes as PFC in tshark: from its RTSW's port, class 3,
    // the configured quanta.
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args(["-T", "fields", "-E", "separator=,", "-e", "eth.dst", "-e", "eth.src", "-e", "macc.opcode"])
        .args(["-e", "macc.cbfc.enbv.c3", "-e", "macc.cbfc.pause_time.c3", "-e", "macc.cbfc.enbv.c0"])
        .output()
        .expect("tshark (apt-get install tshark)");
    let _ = std::fs::remove_file(&pcap);
    let text = String::from_utf8(out.stdout).unwrap();
    let rtsw_mac = plan.nodes[plan.node_by_name("z0r1").unwrap()].ports[0].mac;
    let rtsw_mac = rtsw_mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
    let frames: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').collect()).collect();
    assert!(frames.len() >= 2, "expected an XOFF and refreshes, got {text:?}");
    for f in &frames {
        assert_eq!(f[0], "01:80:c2:00:00:01", "{f:?}");
        assert_eq!(f[1], rtsw_mac, "{f:?}");
        assert_eq!(f[2], "0x0101", "{f:?}");
        assert!(f[3] == "1" || f[3] == "True", "class 3 enabled: {f:?}");
        assert_eq!(f[4], "65535", "{f:?}");
        assert!(f[5] == "0" || f[5] == "False", "class 0 not enabled: {f:?}");
    }
}

/// A link taken down while its switch holds a pause on it: the agent ends that pause and goes
/// on. (Its refresh or XON on the down port used to fail and end the switch's agent thread for
/// good: no more PFC frames, watchdog or telemetry from that switch, even after `link up`.)
#[test]
fn a_link_going_down_under_a_pause_leaves_its_switch_agent_running() {
    let prefix = common::unique_prefix('q', 2);
    common::use_fabric_binary();
    let _guard = fabric_user::testbed::DownOnDrop(prefix.clone());
    fabric_user::testbed::up(&common::topology(None, &prefix), true).unwrap_or_else(|e| panic!("{e:#}"));
    let state = State::load(&prefix).unwrap();
    let receiver = state.plan.host_ipv4(state.plan.node_by_name("z0r0h0").unwrap());
    // XOFFs z0r0 sent its same-rack sender z0r0h1, as its agent last reported them.
    let xoffs = || -> u64 {
        let r = stats::collect(&state).unwrap();
        let rtsw = r.agents.iter().find(|a| a.node == "z0r0").expect("z0r0's telemetry");
        rtsw.pfc.iter().filter(|p| p.ifname == "z0r0h1").map(|p| p.xoff_sent).sum()
    };
    let incast = |secs: f64| {
        std::thread::scope(|s| {
            for h in ["z0r0h1", "z0r1h0", "z0r2h0"] {
                let state = &state;
                s.spawn(move || blast(state, h, receiver, secs));
            }
        })
    };
    std::thread::scope(|s| {
        s.spawn(|| incast(2.5));
        // The pause in force right now (the XDP program's outstanding XOFF, which the agent
        // clears at XON): its next refresh, or its XON, goes out of a port that is down.
        let rtsw = state.plan.node_by_name("z0r0").unwrap();
        let port = state.plan.nodes[rtsw].ports.iter().position(|p| p.ifname == "z0r0h1").unwrap() as u32;
        let held = || state.dataplane(rtsw).unwrap().xoff_flag(port, 3).unwrap() != 0;
        let paused = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            xoffs() >= 1 && held()
        });
        assert!(paused, "z0r0 never held a pause on z0r0h1");
        fabric_user::testbed::set_link(&prefix, "z0r0:z0r0h1", false).unwrap();
    });
    fabric_user::testbed::set_link(&prefix, "z0r0:z0r0h1", true).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let before = xoffs();
    incast(1.5);
    std::thread::sleep(Duration::from_millis(500));
    let after = xoffs();
    assert!(after > before, "z0r0's agent sent no XOFF after the link came back ({before} -> {after})");
}

// ---------------------------------------------------------------------------------------------
// Our endpoints on the default testbed: a 4-to-1 incast under each congestion control.

use fabric_user::{
    endpoint::{CcMode, EndpointOptions, SlowReceiver},
    experiment::{harness::DepthSnapshot, incast::cts_queue_limit_bytes},
    model::placement::Placement,
    model::workload::Collective,
    run::{RunOptions, RunResult, run},
};

/// Four senders (one in the receiver's rack, three behind the spines) into z0r0h0.
fn incast(cc: CcMode, message_bytes: u64) -> RunOptions {
    RunOptions {
        collective: Collective::Incast,
        ranks: Some(5),
        message_bytes,
        iterations: 1,
        placement: Placement::Explicit {
            hosts: ["z0r0h0", "z0r0h1", "z0r1h0", "z0r2h0", "z0r3h0"].map(String::from).to_vec(),
        },
        hash: None,
        hash_seed: None,
        seed: 1,
        endpoint: EndpointOptions { cc, cts_channels: 4, cts_buffer_bytes: 64 * 1024, ..Default::default() },
    }
}

fn go(state: &State, o: &RunOptions) -> RunResult {
    run(state, o, true).unwrap_or_else(|e| panic!("{e:#}"))
}

fn lossless_drops(state: &State) -> u64 {
    let r = stats::collect(state).unwrap();
    r.switches
        .iter()
        .flat_map(|s| &s.ports)
        .flat_map(|p| &p.classes)
        .filter(|c| c.class == 3)
        .map(|c| c.overflow_drops)
        .sum()
}

#[test]
fn incast_pfc_only_pauses_without_loss_dcqcn_pauses_less_and_cts_stays_under_its_bound() {
    let (_guard, state) = common::up(None, &common::unique_prefix('i', 0));

    // The deepest queue toward the receiver during a run, as the switch agents sampled it.
    let downlink_queue = |run: &dyn Fn() -> RunResult| {
        let before = DepthSnapshot::read(&state);
        let r = run();
        (DepthSnapshot::read(&state).max_since_on(&before, "z0r0", "z0r0h0"), r)
    };

    // PFC only (Meta's production choice): the fabric pauses, nothing is lost or resent.
    let (queue_none, none) = downlink_queue(&|| go(&state, &incast(CcMode::None, 4 << 20)));
    assert_eq!(none.bytes_delivered, none.bytes_needed);
    let pfc_none = none.congestion.pfc_xoff_sent + none.congestion.pfc_refresh_sent;
    assert!(pfc_none > 0, "an incast at line rate must pause: {:?}", none.congestion);
    eprintln!("pfc only: {:?}", none.congestion);
    assert_eq!(none.congestion.overflow_drops, 0, "nothing lossy was sent");
    assert_eq!(lossless_drops(&state), 0);
    // Lossless: nothing is resent unless a host's own socket overflowed (a software endpoint
    // falling behind on a busy runner: loss outside the fabric, which the fabric cannot prevent).
    let resent: u64 = none.flows.iter().map(|f| f.retransmitted).sum();
    let host_drops: u64 = none.hosts.iter().map(|h| h.udp_receive_drops).sum();
    eprintln!("pfc only: {resent} packets resent, {host_drops} datagrams dropped by hosts' sockets");
    assert!(resent == 0 || host_drops > 0, "lossless: {resent} packets resent, yet no host dropped any");
    assert!(none.congestion.ecn_marked > 0);

    // DCQCN: CE marks become CNPs, senders slow down, and the fabric pauses less.
    // One CNP per QP every 4 µs (mlx5's `np_min_time_between_cnps` default) rather than the
    // paper's 50 µs: at 400 Gbit/s an incast fills Xoff in about 50 µs, and a notification
    // point that may speak once per 50 µs cannot act before PFC does.
    let mut o = incast(CcMode::Dcqcn, 4 << 20);
    o.endpoint.dcqcn.cnp_interval_ns = 4_000;
    let dcqcn = go(&state, &o);
    assert_eq!(dcqcn.bytes_delivered, dcqcn.bytes_needed);
    let cnps: u64 = dcqcn.flows.iter().map(|f| f.cnps_received).sum();
    assert!(cnps > 0, "no CNP reached a sender");
    assert!(
        dcqcn.flows.iter().all(|f| f.rate_trajectory.iter().any(|s| s.1 < f.intended_bps)),
        "every sender cut its rate"
    );
    let pfc_dcqcn = dcqcn.congestion.pfc_xoff_sent + dcqcn.congestion.pfc_refresh_sent;
    eprintln!("dcqcn: {:?}", dcqcn.congestion);
    assert!(
        pfc_dcqcn < pfc_none && dcqcn.congestion.paused_ns < none.congestion.paused_ns,
        "DCQCN must pause less than PFC alone: {:?} vs {:?}",
        dcqcn.congestion,
        none.congestion
    );

    // CTS: the receiver admits at most channels x buffer in flight, and so never needs to pause.
    // Measured in the network: the queue toward the receiver stays within the bound's log2
    // bucket, which PFC alone's queue exceeds (so the measure can tell the two apart).
    let (queue_cts, cts) = downlink_queue(&|| go(&state, &incast(CcMode::Cts, 4 << 20)));
    assert_eq!(cts.bytes_delivered, cts.bytes_needed);
    let limit = cts_queue_limit_bytes(cts.cts_bound_bytes.expect("a CTS run reports its bound"));
    eprintln!("deepest queue z0r0 -> z0r0h0: CTS {queue_cts} B, PFC only {queue_none} B, CTS limit {limit} B");
    assert!(queue_cts > 0 && queue_cts <= limit, "CTS queued {queue_cts} B toward the receiver, over {limit} B");
    assert!(queue_none > limit, "PFC alone queued {queue_none} B, within CTS's {limit} B: the measure cannot tell");
    let pfc_cts = cts.congestion.pfc_xoff_sent + cts.congestion.pfc_refresh_sent;
    assert!(pfc_cts < pfc_none, "CTS must pause less than PFC alone: {:?}", cts.congestion);
    assert_eq!(lossless_drops(&state), 0);
}

#[test]
fn a_receiver_that_stops_draining_spreads_pauses_to_the_spine_and_fires_the_watchdog() {
    let prefix = common::unique_prefix('w', 0);
    let mut topo = common::topology(None, &prefix);
    topo.congestion.watchdog_us = 50.0; // 200 ms of wall time at the default scale
    common::use_fabric_binary();
    let _guard = fabric_user::testbed::DownOnDrop(prefix.clone());
    fabric_user::testbed::up(&topo, true).unwrap_or_else(|e| panic!("{e:#}"));
    let state = State::load(&prefix).unwrap();

    let mut o = incast(CcMode::None, 2 << 20);
    o.endpoint.slow_receiver = Some(SlowReceiver { host: "z0r0h0".into(), duration_ns: 1_500_000_000 });
    let r = go(&state, &o);
    assert_eq!(r.bytes_delivered, r.bytes_needed, "the receiver catches up afterwards");
    assert!(r.hosts.iter().find(|h| h.host == "z0r0h0").unwrap().pause_frames_sent >= 2);

    let s = stats::collect(&state).unwrap();
    // The host paused its RTSW's port towards it long enough for the watchdog ...
    let rtsw = s.agents.iter().find(|a| a.node == "z0r0").unwrap();
    assert!(rtsw.storms.iter().any(|e| e.ifname == "z0r0h0" && e.class == 3), "no storm on z0r0h0: {:?}", rtsw.storms);
    // ... the RTSW, filling, paused the spines, and they the other racks: pauses spread up and out.
    assert!(rtsw.pfc.iter().any(|p| p.ifname.starts_with("z0c") && p.xoff_sent > 0), "{:?}", rtsw.pfc);
    let spines_pausing: Vec<&str> = s
        .agents
        .iter()
        .filter(|a| a.node.starts_with("z0c") && a.pfc.iter().any(|p| p.xoff_sent > 0))
        .map(|a| a.node.as_str())
        .collect();
    assert!(!spines_pausing.is_empty(), "no spine paused its upstream");
    assert!(r.congestion.watchdog_storms >= 1);
    assert_eq!(lossless_drops(&state), 0);
}
