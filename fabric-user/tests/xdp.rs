//! The compiled switch program under BPF_PROG_TEST_RUN: crafted frames in, action, rewritten
//! frame and counters out. Each test builds its own switch in a private network namespace, with
//! maps written by the controller's own code (`fabric_user::dataplane`). Needs root.
mod common;

use aya::programs::{TestRun as _, TestRunOptions, TestRunResult};
use common::LogCapture;
use etherparse::{NetHeaders, PacketHeaders};
use fabric_common::{
    balance::{FlowletSlot, MemberState, candidates, flow_hash, flowlet_hash},
    checksum::internet_checksum,
    config::{GeneratorConfig, HashMode, SwitchConfig},
    counters::{DropReason, PassReason, PortCounters},
    forward::choose_member,
    hash::select_member,
    parse::parse_packet,
    qos::class_of,
    queue::EgressQueue,
    route::{EcmpGroup, GroupMember},
    wire::{ethernet, ipv4},
};
use fabric_testkit::{
    capture,
    fixture::{
        FixtureSwitch, FrameSpec, GROUP_UPLINKS, UPLINKS, XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_REDIRECT, frame,
        in_private_netns, neighbour_mac, port_mac, xdp_md,
    },
};
use fabric_user::{
    dataplane::{PROGRAM_LOOP, PROGRAM_SWITCH},
    sys::netns,
};

/// Runs `f` against a fresh fixture switch; panics with the error chain on failure.
fn with_switch(mode: HashMode, seed: u32, f: impl FnOnce(&mut FixtureSwitch) -> anyhow::Result<()> + Send) {
    in_private_netns(|| {
        let mut sw = FixtureSwitch::new(mode, seed)?;
        f(&mut sw)
    })
    .unwrap_or_else(|e| panic!("{e:#}"));
}

fn counters(sw: &mut FixtureSwitch) -> Vec<PortCounters> {
    (0..=UPLINKS).map(|p| sw.dp.port_counters(p).expect("counters")).collect()
}

fn run(sw: &mut FixtureSwitch, f: &[u8]) -> (TestRunResult, Vec<u8>) {
    sw.run(PROGRAM_SWITCH, 0, f).expect("test_run")
}

/// The uplink port the host-side code predicts for `frame` under the switch's configuration.
fn predicted_uplink(mode: HashMode, seed: u32, f: &[u8]) -> u32 {
    let parsed = parse_packet(f).expect("fixture frames parse");
    1 + select_member(&FixtureSwitch::config(mode, seed), &parsed, UPLINKS)
}

/// Asserts that exactly one port transmitted one packet since `before`, and returns it.
fn egress_port(before: &[PortCounters], after: &[PortCounters]) -> u32 {
    let moved: Vec<u32> =
        (0..before.len()).filter(|&p| after[p].tx_packets != before[p].tx_packets).map(|p| p as u32).collect();
    assert_eq!(moved.len(), 1, "exactly one egress port must count the packet: {moved:?}");
    let p = moved[0] as usize;
    assert_eq!(after[p].tx_packets - before[p].tx_packets, 1);
    moved[0]
}

/// Checks a forwarded frame against its input: MACs rewritten for `port`, TTL/hop limit one
/// less, IPv4 checksum valid, everything after the IP header untouched.
fn assert_forwarded(input: &[u8], output: &[u8], port: u32) {
    assert_eq!(output.len(), input.len());
    assert_eq!(&output[ethernet::DST], &neighbour_mac(port));
    assert_eq!(&output[ethernet::SRC], &port_mac(port));
    let (i, o) =
        (PacketHeaders::from_ethernet_slice(input).unwrap(), PacketHeaders::from_ethernet_slice(output).unwrap());
    match (i.net.clone().unwrap(), o.net.clone().unwrap()) {
        (NetHeaders::Ipv4(a, _), NetHeaders::Ipv4(b, _)) => {
            assert_eq!(b.time_to_live, a.time_to_live - 1);
            assert_eq!(b.header_checksum, b.calc_header_checksum(), "IPv4 checksum after the TTL update");
            let mut b2 = b.clone();
            b2.time_to_live = a.time_to_live;
            b2.header_checksum = a.header_checksum;
            assert_eq!(a, b2, "only TTL and checksum change in the IPv4 header");
        }
        (NetHeaders::Ipv6(a, _), NetHeaders::Ipv6(b, _)) => {
            assert_eq!(b.hop_limit, a.hop_limit - 1);
            let mut b2 = b.clone();
            b2.hop_limit = a.hop_limit;
            assert_eq!(a, b2);
        }
        other => panic!("unexpected headers {other:?}"),
    }
    assert_eq!(i.vlan(), o.vlan(), "the VLAN tag is kept");
    assert_eq!(i.payload.slice(), o.payload.slice(), "payload untouched");
}

#[test]
fn forwards_roce_ipv4_ipv6_and_vlan_to_the_predicted_uplink() {
    for mode in HashMode::ALL {
        with_switch(mode, 0x1234, |sw| {
            for spec in [
                FrameSpec::default(),
                FrameSpec { ipv6: true, ..Default::default() },
                FrameSpec { vlan: Some(100), ..Default::default() },
                FrameSpec { vlan: Some(7), ipv6: true, dest_qp: 0x99, ..Default::default() },
                // Non-RoCE UDP is forwarded too (and not counted as RoCE).
                FrameSpec { dst_port: 9000, ..Default::default() },
            ] {
                let f = frame(&spec);
                let before = counters(sw);
                let (res, out) = run(sw, &f);
                assert_eq!(res.return_value, XDP_REDIRECT, "{spec:?}");
                let after = counters(sw);
                let port = egress_port(&before, &after);
                assert_eq!(port, predicted_uplink(mode, 0x1234, &f), "kernel and host choose the same uplink");
                assert_forwarded(&f, &out, port);
                let roce = spec.dst_port == 4791;
                assert_eq!(after[0].rx_roce_packets - before[0].rx_roce_packets, roce as u64);
                assert_eq!(after[port as usize].tx_roce_packets - before[port as usize].tx_roce_packets, roce as u64);
                assert_eq!(after[0].rx_packets - before[0].rx_packets, 1);
                assert_eq!(after[0].rx_bytes - before[0].rx_bytes, f.len() as u64);
            }
            Ok(())
        });
    }
}

#[test]
fn eecmp_spreads_queue_pairs_of_one_five_tuple_and_five_tuple_does_not() {
    for (mode, expect_spread) in [(HashMode::FiveTuple, false), (HashMode::Eecmp, true), (HashMode::Pin, false)] {
        with_switch(mode, 7, |sw| {
            let mut used = std::collections::BTreeSet::new();
            for qp in 0..32 {
                let f = frame(&FrameSpec { dest_qp: 0x100 + qp, ..Default::default() });
                assert_eq!(run(sw, &f).0.return_value, XDP_REDIRECT);
                used.insert(predicted_uplink(mode, 7, &f));
            }
            // The member counters agree with the prediction, member by member.
            let mut carried = 0;
            for m in 0..UPLINKS {
                let c = sw.dp.member_counters(GROUP_UPLINKS, m)?;
                assert_eq!(c.packets > 0, used.contains(&(m + 1)), "member {m} of {mode:?}");
                carried += c.packets;
            }
            assert_eq!(carried, 32);
            if expect_spread {
                assert!(used.len() >= 3, "{mode:?} should use most uplinks for 32 QPs, used {used:?}");
            } else {
                assert_eq!(used.len(), 1, "{mode:?} ignores the QP: one uplink for one five-tuple");
            }
            Ok(())
        });
    }
}

#[test]
fn ttl_one_goes_to_the_kernel_unchanged() {
    with_switch(HashMode::Eecmp, 1, |sw| {
        for ipv6 in [false, true] {
            let f = frame(&FrameSpec { ttl: 1, ipv6, ..Default::default() });
            let (res, out) = run(sw, &f);
            assert_eq!(res.return_value, XDP_PASS);
            assert_eq!(out, f);
        }
        let c = counters(sw);
        assert_eq!(c[0].passes[PassReason::TtlExpired as usize], 2);
        assert_eq!(c.iter().map(|c| c.tx_packets).sum::<u64>(), 0);
        Ok(())
    });
}

#[test]
fn arp_local_and_foreign_frames_go_to_the_kernel_and_unrouted_ones_are_dropped() {
    with_switch(HashMode::FiveTuple, 1, |sw| {
        // ARP request (broadcast).
        let mut arp = vec![0xff; 6];
        arp.extend_from_slice(&neighbour_mac(0));
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        arp.resize(60, 0);
        assert_eq!(run(sw, &arp).0.return_value, XDP_PASS);
        // Unicast for another MAC.
        let f = frame(&FrameSpec { dst_mac: [0x02, 0xee, 0, 0, 0, 1], ..Default::default() });
        assert_eq!(run(sw, &f).0.return_value, XDP_PASS);
        // To the switch's own address (a ROUTE_LOCAL entry).
        let mut to_switch = frame(&FrameSpec::default());
        let l3 = ethernet::HEADER_LEN;
        to_switch[l3 + 16..l3 + 20].copy_from_slice(&fabric_testkit::fixture::SWITCH_V4.octets());
        assert_eq!(run(sw, &to_switch).0.return_value, XDP_PASS);
        // No route: 198.19.0.1 is outside every prefix.
        let mut unrouted = frame(&FrameSpec::default());
        unrouted[l3 + 16..l3 + 20].copy_from_slice(&[198, 19, 0, 1]);
        assert_eq!(run(sw, &unrouted).0.return_value, XDP_DROP);

        let c = &counters(sw)[0];
        assert_eq!(c.passes[PassReason::NotIp as usize], 1);
        assert_eq!(c.passes[PassReason::OtherHost as usize], 1);
        assert_eq!(c.passes[PassReason::Local as usize], 1);
        assert_eq!(c.drops[DropReason::NoRoute as usize], 1);
        assert_eq!(c.rx_packets, 4);
        Ok(())
    });
}

/// IPv6 link-local destinations are the switch kernel's (neighbour discovery, a host pinging its
/// switch's fe80:: address): never routed, never judged by the source guard. Before, they were
/// dropped as unrouted (or, on a host port, as spoofed).
#[test]
fn ipv6_link_local_unicast_goes_to_the_switch_kernel() {
    with_switch(HashMode::FiveTuple, 1, |sw| {
        let mut ll = frame(&FrameSpec { ipv6: true, ..Default::default() });
        let l3 = ethernet::HEADER_LEN;
        let fe80 = |last: u8| [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last];
        ll[l3 + 8..l3 + 24].copy_from_slice(&fe80(1));
        ll[l3 + 24..l3 + 40].copy_from_slice(&fe80(2));
        let (res, out) = run(sw, &ll);
        assert_eq!(res.return_value, XDP_PASS);
        assert_eq!(out, ll, "handed to the kernel unchanged");
        let c = &counters(sw)[0];
        assert_eq!((c.passes[PassReason::Local as usize], c.drops.iter().sum::<u64>()), (1, 0));
        Ok(())
    });
}

/// The reason the kernel program must give for a frame cut to `len` bytes, by the documented
/// parse order (first missing header).
fn truncation_reason(spec: &FrameSpec, len: usize) -> DropReason {
    let l3 = ethernet::HEADER_LEN + if spec.vlan.is_some() { 4 } else { 0 };
    let ip_len = if spec.ipv6 { 40 } else { 20 };
    if len < l3 {
        DropReason::TruncatedVlan
    } else if len < l3 + ip_len {
        if spec.ipv6 { DropReason::TruncatedIpv6 } else { DropReason::TruncatedIpv4 }
    } else {
        // The IP header is whole but its length field promises more than the frame holds.
        DropReason::IpLength
    }
}

#[test]
fn truncated_at_every_length_is_dropped_with_its_reason_and_never_forwarded() {
    with_switch(HashMode::Eecmp, 3, |sw| {
        for spec in [
            FrameSpec { payload_len: 8, ..Default::default() },
            FrameSpec { payload_len: 8, ipv6: true, ..Default::default() },
            FrameSpec { payload_len: 8, vlan: Some(5), ..Default::default() },
        ] {
            let f = frame(&spec);
            // BPF_PROG_TEST_RUN refuses frames shorter than an Ethernet header.
            for len in ethernet::HEADER_LEN..f.len() {
                let before = counters(sw);
                let (res, _) = run(sw, &f[..len]);
                assert_eq!(res.return_value, XDP_DROP, "{spec:?} cut to {len}");
                let after = counters(sw);
                let reason = truncation_reason(&spec, len);
                assert_eq!(
                    after[0].drops[reason as usize] - before[0].drops[reason as usize],
                    1,
                    "{spec:?} cut to {len}: expected {}",
                    reason.as_str()
                );
                assert_eq!(
                    after.iter().map(|c| c.tx_packets).sum::<u64>(),
                    before.iter().map(|c| c.tx_packets).sum::<u64>()
                );
            }
        }
        // Headers present but lengths lying: a UDP length beyond the IP payload, a BTH cut short.
        let mut bad_udp = frame(&FrameSpec::default());
        let udp_len_at = ethernet::HEADER_LEN + 20 + 4;
        bad_udp[udp_len_at..udp_len_at + 2].copy_from_slice(&2000u16.to_be_bytes());
        assert_eq!(run(sw, &bad_udp).0.return_value, XDP_DROP);
        let mut short_bth = frame(&FrameSpec { payload_len: 0, ..Default::default() });
        let cut = short_bth.len() - 6;
        short_bth.truncate(cut);
        let ip_total = (cut - ethernet::HEADER_LEN) as u16;
        short_bth[ethernet::HEADER_LEN + 2..ethernet::HEADER_LEN + 4].copy_from_slice(&ip_total.to_be_bytes());
        let udp_len = ip_total - 20;
        short_bth[udp_len_at..udp_len_at + 2].copy_from_slice(&udp_len.to_be_bytes());
        assert_eq!(run(sw, &short_bth).0.return_value, XDP_DROP);
        let c = &counters(sw)[0];
        assert_eq!(c.drops[DropReason::BadUdpLength as usize], 1);
        assert_eq!(c.drops[DropReason::TruncatedBth as usize], 1);
        Ok(())
    });
}

/// The data-plane benchmark times repeated runs on one buffer (non-live test_run). With real
/// next hops only the first run forwards: it rewrites the destination MAC, and every later run
/// sees a frame for another host and passes it. With the benchmark's hairpinned next hops every
/// run forwards, and the transmit counters, the TTL and the action say so.
#[test]
fn repeated_runs_forward_every_time_only_with_hairpinned_next_hops() {
    with_switch(HashMode::Eecmp, 9, |sw| {
        const RUNS: u32 = 50;
        let sent = frame(&FrameSpec { ttl: 200, ..Default::default() });
        let ttl_after = |f: &[u8]| match parse_packet(f).expect("an IP frame").ip {
            fabric_common::parse::IpHeader::V4 { ttl, .. } => ttl,
            fabric_common::parse::IpHeader::V6 { hop_limit, .. } => hop_limit,
        };
        let tx = |sw: &mut FixtureSwitch| counters(sw).iter().map(|c| c.tx_packets).sum::<u64>();

        let before = tx(sw);
        let real = sw.time(PROGRAM_SWITCH, 0, &sent, RUNS)?;
        assert_eq!(real.action, XDP_PASS, "the last run passed a frame no longer for the switch");
        assert_eq!(ttl_after(&real.frame), 199, "only the first run forwarded");
        assert_eq!(tx(sw) - before, 1);
        assert_eq!(counters(sw)[0].passes[PassReason::OtherHost as usize], u64::from(RUNS) - 1);

        sw.hairpin_next_hops()?;
        let before = tx(sw);
        let hairpin = sw.time(PROGRAM_SWITCH, 0, &sent, RUNS)?;
        assert_eq!(hairpin.action, XDP_REDIRECT);
        assert_eq!(ttl_after(&hairpin.frame), 200 - RUNS as u8, "every run forwarded");
        assert_eq!(tx(sw) - before, u64::from(RUNS));
        Ok(())
    });
}

/// The forwarding benchmark's looping generator (`traffic_loop`, for kernels that refuse live
/// frames): inside its lease it writes the MACs, the TTL and a valid IPv4 checksum into the
/// frame, counts a lap and redirects; once its CPU's laps reach the lease it drops the frame
/// and counts nothing, until the lease moves ahead; a frame that is not IPv4 is refused.
#[test]
fn the_loop_generator_forwards_only_inside_its_lease() {
    with_switch(HashMode::Eecmp, 9, |sw| {
        // The lease is per CPU: every run on the same one.
        fabric_user::sys::cpu::pin_thread(0)?;
        let (mut config, laps) = sw.dp.take_generator_maps()?;
        let laps_now = || -> anyhow::Result<u64> { Ok(laps.get(&0, 0)?.iter().sum()) };
        let sent = frame(&FrameSpec { ttl: 3, ..Default::default() });
        let cfg = GeneratorConfig::new([2, 0xaa, 0, 0, 0, 1], [2, 0xbb, 0, 0, 0, 2], 64).looping(sw.ifindex[1], 2);
        config.set(0, cfg, 0)?;
        for lap in 1..=2 {
            let (res, out) = sw.run(PROGRAM_LOOP, 0, &sent)?;
            assert_eq!(res.return_value, XDP_REDIRECT, "lap {lap}");
            assert_eq!((&out[..6], &out[6..12]), (&cfg.dst_mac[..], &cfg.src_mac[..]));
            let ip = &out[ethernet::HEADER_LEN..ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN];
            assert_eq!(ip[ipv4::TTL], 64);
            assert_eq!(internet_checksum(ip), 0, "the header checksum is valid");
            assert_eq!(laps_now()?, lap);
        }
        let (res, _) = sw.run(PROGRAM_LOOP, 0, &sent)?;
        assert_eq!(res.return_value, XDP_DROP, "the lease is used up");
        assert_eq!(laps_now()?, 2, "a dropped frame is no lap");
        config.set(0, cfg.looping(cfg.out_ifindex, 3), 0)?;
        assert_eq!(sw.run(PROGRAM_LOOP, 0, &sent)?.0.return_value, XDP_REDIRECT, "the lease moved ahead");
        config.set(0, cfg.looping(cfg.out_ifindex, 10), 0)?;
        let v6 = frame(&FrameSpec { ipv6: true, ..Default::default() });
        assert_eq!(sw.run(PROGRAM_LOOP, 0, &v6)?.0.return_value, XDP_ABORTED);
        assert_eq!(laps_now()?, 3, "a refused frame is no lap");
        Ok(())
    });
}

#[test]
fn counters_add_up_to_the_packets_fed() {
    with_switch(HashMode::Eecmp, 9, |sw| {
        let mut fed = 0u64;
        let mut bytes = 0u64;
        for i in 0..200u32 {
            let spec = FrameSpec {
                dest_qp: i,
                ipv6: i % 3 == 0,
                ttl: if i % 17 == 0 { 1 } else { 64 },
                src_port: 0xC000 + (i % 5) as u16,
                ..Default::default()
            };
            let mut f = frame(&spec);
            if i % 23 == 0 {
                f.truncate(30);
            }
            run(sw, &f);
            fed += 1;
            bytes += f.len() as u64;
        }
        let c = counters(sw);
        assert_eq!(c[0].rx_packets, fed);
        assert_eq!(c[0].rx_bytes, bytes);
        let tx: u64 = c.iter().map(|c| c.tx_packets).sum();
        assert_eq!(tx + c[0].total_drops() + c[0].total_passes(), fed, "every packet has exactly one fate");
        let members: u64 = (0..UPLINKS).map(|m| sw.dp.member_counters(GROUP_UPLINKS, m).unwrap().packets).sum();
        assert_eq!(members, tx);
        Ok(())
    });
}

/// Every frame written by the kernel's rxe goes through the XDP program: it is recognised as
/// RoCE, forwarded to the uplink that E-ECMP over tshark's destination QP predicts, and its
/// ICRC still verifies after the TTL rewrite (TTL is a masked field).
#[test]
fn rxe_capture_frames_forward_by_the_qp_tshark_decodes() {
    let path = common::rxe_capture();
    let frames = capture::read_pcap(&path).unwrap();
    let decoded = capture::tshark_bth(&path).unwrap();
    assert_eq!(frames.len(), decoded.len());
    assert!(frames.len() >= 100);
    with_switch(HashMode::Eecmp, 0xabc, |sw| {
        // The capture's hosts: route them over the uplinks.
        for host in [[198, 18, 0, 2], [198, 18, 0, 6]] {
            sw.dp.set_route_v4(host.into(), 32, GROUP_UPLINKS)?;
        }
        let cfg = FixtureSwitch::config(HashMode::Eecmp, 0xabc);
        for (n, (captured, bth)) in frames.iter().zip(&decoded).enumerate() {
            let bth = bth.unwrap_or_else(|| panic!("tshark found no BTH in frame {}", n + 1));
            let mut f = captured.clone();
            f[ethernet::DST].copy_from_slice(&port_mac(0));
            let mut parsed = parse_packet(&f[..]).expect("rxe frames parse");
            let ours = parsed.bth.expect("a BTH");
            assert_eq!((ours.opcode, ours.dest_qp, ours.psn), (bth.opcode, bth.dest_qp, bth.psn), "frame {}", n + 1);
            // Predict with tshark's QP, not ours.
            parsed.bth = Some(fabric_common::parse::Bth { dest_qp: bth.dest_qp, ..ours });
            let expected = 1 + select_member(&cfg, &parsed, UPLINKS);
            let before = counters(sw);
            let (res, out) = run(sw, &f);
            assert_eq!(res.return_value, XDP_REDIRECT, "frame {}", n + 1);
            let after = counters(sw);
            assert_eq!(egress_port(&before, &after), expected, "frame {}", n + 1);
            assert_eq!(after[0].rx_roce_packets - before[0].rx_roce_packets, 1);
            assert!(fabric_common::icrc::verify(&out[ethernet::HEADER_LEN..]), "ICRC of forwarded frame {}", n + 1);
            assert_forwarded(&f, &out, expected);
        }
        Ok(())
    });
}

/// The slow paths write an aya-log record into the switch's AYA_LOGS ring buffer, read here as
/// the agent reads it (`take_logger`, found through the map's id); the fast path writes none.
#[test]
fn slow_paths_log_a_record_and_the_fast_path_logs_none() {
    with_switch(HashMode::FiveTuple, 5, |sw| {
        let capture = LogCapture::default();
        let mut logs = sw.dp.take_logger(capture.clone())?;
        // Forwarded, passed and dropped frames of a working switch: silence.
        let f = frame(&FrameSpec::default());
        assert_eq!(run(sw, &f).0.return_value, XDP_REDIRECT);
        assert_eq!(run(sw, &frame(&FrameSpec { ttl: 1, ..Default::default() })).0.return_value, XDP_PASS);
        assert_eq!(run(sw, &f[..30]).0.return_value, XDP_DROP);
        logs.flush();
        assert_eq!(capture.take(), vec![], "the fast path logs nothing");

        // A frame on an interface the controller never registered as a port (the peer end of
        // port 1's veth): passed to the kernel, uncounted, and logged.
        let stranger = netns::ifindex("n1")?;
        let before = counters(sw);
        let ctx = xdp_md(f.len(), stranger);
        let res = sw.dp.program(PROGRAM_SWITCH)?.test_run(TestRunOptions {
            data_in: Some(&f),
            ctx_in: Some(&ctx),
            ..Default::default()
        })?;
        assert_eq!(res.return_value, XDP_PASS);
        assert_eq!(counters(sw), before, "no port counts a frame from an unregistered interface");
        logs.flush();
        let expected = format!("frame on ifindex {stranger}, which is no registered port: passed to the kernel");
        assert_eq!(capture.take(), vec![(log::Level::Warn, expected)]);

        // A route whose only member is a port without an EGRESS slot: dropped, and logged.
        let member = GroupMember { port: 9, dst_mac: neighbour_mac(9), src_mac: port_mac(9) };
        sw.dp.set_group(GROUP_UPLINKS, &EcmpGroup::from_members(&[member]).expect("fits"))?;
        assert_eq!(run(sw, &f).0.return_value, XDP_DROP);
        assert_eq!(counters(sw)[0].drops[DropReason::RedirectFailed as usize], 1);
        logs.flush();
        assert_eq!(
            capture.take(),
            vec![(log::Level::Error, "redirect to port 9 failed (no EGRESS slot): dropped".into())]
        );
        Ok(())
    });
}

// ---- The routing modes that read switch state (`fabric_common::balance`) ------------------

/// The uplink (port) the host's `choose_member` picks for `f` given `state`.
fn host_choice(cfg: &SwitchConfig, f: &[u8], state: &impl MemberState) -> u32 {
    let parsed = parse_packet(f).expect("fixture frames parse");
    1 + choose_member(cfg, &parsed, GROUP_UPLINKS, UPLINKS, state)
}

/// Frame `i` of many distinct flows (one QP each).
fn flow_frame(i: u32) -> Vec<u8> {
    frame(&FrameSpec { dest_qp: 0x1000 + i, ..Default::default() })
}

/// The uplink a frame left by, after checking it was forwarded there.
fn forwarded_port(sw: &mut FixtureSwitch, f: &[u8]) -> u32 {
    let before = counters(sw);
    let (res, out) = run(sw, f);
    assert_eq!(res.return_value, XDP_REDIRECT);
    let port = egress_port(&before, &counters(sw));
    assert_forwarded(f, &out, port);
    port
}

/// The host-side state of a switch whose queues are idle and that has no flowlets yet.
struct Idle;
impl MemberState for Idle {}

/// A queue that the model sees as `paused` (until far in the future) or `deep` (its tail far
/// in the future: at any port rate, more bytes than any other queue holds).
fn crafted_queue(paused: bool) -> EgressQueue {
    let far = u64::MAX / 4;
    if paused {
        EgressQueue { paused_until_ns: far, tail_ns: far, ..Default::default() }
    } else {
        EgressQueue { tail_ns: far, ..Default::default() }
    }
}

#[test]
fn adaptive_flowlet_and_wcmp_at_idle_queues_choose_what_the_host_predicts() {
    for mode in [HashMode::Adaptive, HashMode::Flowlet, HashMode::Wcmp] {
        with_switch(mode, 0x55, |sw| {
            let cfg = FixtureSwitch::config(mode, 0x55);
            for i in 0..64 {
                let f = flow_frame(i);
                assert_eq!(forwarded_port(sw, &f), host_choice(&cfg, &f, &Idle), "{mode:?} flow {i}");
                // Idle queues and no weights (the fixture models no rates): the E-ECMP member.
                assert_eq!(host_choice(&cfg, &f, &Idle), predicted_uplink(HashMode::Eecmp, 0x55, &f));
            }
            Ok(())
        });
    }
}

#[test]
fn adaptive_avoids_a_deep_or_paused_first_candidate_as_the_host_predicts() {
    with_switch(HashMode::Adaptive, 0x77, |sw| {
        for port in 1..=UPLINKS {
            sw.dp.set_port_rate(port, 1_000_000)?;
        }
        let cfg = FixtureSwitch::config(HashMode::Adaptive, 0x77);
        let mut moved = 0;
        for paused in [false, true] {
            for i in 0..32 {
                let f = flow_frame(i);
                let parsed = parse_packet(&f[..]).unwrap();
                let (first, second) = candidates(flow_hash(&cfg, &parsed), UPLINKS);
                // Crafted state: the first candidate's queue deep (or paused), every other idle.
                for port in 1..=UPLINKS {
                    let q = if port == first + 1 { crafted_queue(paused) } else { EgressQueue::default() };
                    sw.dp.set_queue(port, class_of(0), q)?;
                }
                let port = forwarded_port(sw, &f);
                assert_eq!(port, second + 1, "flow {i}, paused {paused}: the second candidate");
                moved += (port != predicted_uplink(HashMode::Eecmp, 0x77, &f)) as u32;
            }
        }
        assert_eq!(moved, 64, "every flow left its E-ECMP member");
        Ok(())
    });
}

#[test]
fn a_flowlet_keeps_its_member_within_the_gap_and_moves_after_it() {
    with_switch(HashMode::Flowlet, 0x99, |sw| {
        let cfg = FixtureSwitch::config(HashMode::Flowlet, 0x99).with_flowlet_gap(1_000);
        sw.dp.set_config(cfg)?;
        // The times are crafted, not waited for: a slot last seen in the future is within any
        // gap; one last seen at time 0 is beyond a 1 us gap.
        let future = u64::MAX / 2;
        for i in 0..32 {
            let f = flow_frame(i);
            let parsed = parse_packet(&f[..]).unwrap();
            let flow = flow_hash(&cfg, &parsed);
            // A new flow: its E-ECMP member, recorded as generation 0.
            let first = forwarded_port(sw, &f);
            assert_eq!(first, predicted_uplink(HashMode::Eecmp, 0x99, &f));
            let slot = sw.dp.flowlet(flow)?.expect("the switch recorded the flow");
            assert_eq!((slot.group as u32, slot.member as u32 + 1, slot.generation), (GROUP_UPLINKS, first, 0));
            // Within the gap: the slot's member, whatever it is, even with its queue paused.
            let kept = (i % UPLINKS) as u8;
            sw.dp.set_queue(kept as u32 + 1, class_of(0), crafted_queue(true))?;
            sw.dp.set_flowlet(
                flow,
                FlowletSlot { last_ns: future, flow, group: GROUP_UPLINKS as u16, member: kept, generation: 3 },
            )?;
            assert_eq!(forwarded_port(sw, &f), kept as u32 + 1, "flow {i} within the gap");
            let slot = sw.dp.flowlet(flow)?.unwrap();
            assert!(slot.last_ns < future && slot.generation == 3, "the packet refreshed the slot: {slot:?}");
            // After the gap: generation 4's best of two, the paused member counting as full.
            sw.dp.set_flowlet(
                flow,
                FlowletSlot { last_ns: 0, flow, group: GROUP_UPLINKS as u16, member: kept, generation: 3 },
            )?;
            let (c1, c2) = candidates(flowlet_hash(flow, 4), UPLINKS);
            let expect = if c1 == kept as u32 { c2 } else { c1 };
            assert_eq!(forwarded_port(sw, &f), expect + 1, "flow {i} after the gap");
            let slot = sw.dp.flowlet(flow)?.unwrap();
            assert_eq!((slot.member as u32, slot.generation), (expect, 4));
            sw.dp.set_queue(kept as u32 + 1, class_of(0), EgressQueue::default())?;
        }
        Ok(())
    });
}

/// The moves counters: `adaptive` counts a packet sent to its second candidate, and only that;
/// `flowlet` counts a new flowlet of a flow on another member than its last, and neither a new
/// flow, nor a packet within the gap, nor a new flowlet that lands on the same member.
#[test]
fn balance_counters_count_moves_and_only_moves() {
    with_switch(HashMode::Adaptive, 0x77, |sw| {
        for port in 1..=UPLINKS {
            sw.dp.set_port_rate(port, 1_000_000)?;
        }
        let cfg = FixtureSwitch::config(HashMode::Adaptive, 0x77);
        for i in 0..16 {
            forwarded_port(sw, &flow_frame(i));
        }
        let idle = sw.dp.balance_counters()?;
        assert_eq!((idle.adaptive_second_choices, idle.flowlet_moves), (0, 0), "idle queues: no move");
        for i in 0..16 {
            let f = flow_frame(i);
            let (first, _) = candidates(flow_hash(&cfg, &parse_packet(&f[..]).unwrap()), UPLINKS);
            for port in 1..=UPLINKS {
                let q = if port == first + 1 { crafted_queue(false) } else { EgressQueue::default() };
                sw.dp.set_queue(port, class_of(0), q)?;
            }
            forwarded_port(sw, &f);
        }
        let deep = sw.dp.balance_counters()?;
        assert_eq!((deep.adaptive_second_choices, deep.flowlet_moves), (16, 0), "one move per deep first candidate");
        Ok(())
    });
    with_switch(HashMode::Flowlet, 0x99, |sw| {
        let cfg = FixtureSwitch::config(HashMode::Flowlet, 0x99).with_flowlet_gap(1_000);
        sw.dp.set_config(cfg)?;
        let moves = |sw: &mut FixtureSwitch| sw.dp.balance_counters().map(|m| m.flowlet_moves);
        let slot =
            |flow, last_ns, member| FlowletSlot { last_ns, flow, group: GROUP_UPLINKS as u16, member, generation: 3 };
        for i in 0..16 {
            let f = flow_frame(i);
            let flow = flow_hash(&cfg, &parse_packet(&f[..]).unwrap());
            // Idle queues: a new flowlet (generation 4) takes its first candidate.
            let (c1, _) = candidates(flowlet_hash(flow, 4), UPLINKS);
            let other = ((c1 + 1) % UPLINKS) as u8;
            forwarded_port(sw, &f);
            assert_eq!(moves(sw)?, i as u64, "flow {i}: a new flow is no move");
            sw.dp.set_flowlet(flow, slot(flow, u64::MAX / 2, other))?;
            assert_eq!(forwarded_port(sw, &f), other as u32 + 1);
            assert_eq!(moves(sw)?, i as u64, "flow {i}: within the gap, no move");
            sw.dp.set_flowlet(flow, slot(flow, 0, c1 as u8))?;
            assert_eq!(forwarded_port(sw, &f), c1 + 1);
            assert_eq!(moves(sw)?, i as u64, "flow {i}: a new flowlet on the same member is no move");
            sw.dp.set_flowlet(flow, slot(flow, 0, other))?;
            assert_eq!(forwarded_port(sw, &f), c1 + 1);
            assert_eq!(moves(sw)?, i as u64 + 1, "flow {i}: a new flowlet on another member is a move");
        }
        assert_eq!(sw.dp.balance_counters()?.adaptive_second_choices, 0);
        Ok(())
    });
}

#[test]
fn spray_spreads_the_packets_of_one_flow_over_every_uplink() {
    with_switch(HashMode::Spray, 1, |sw| {
        let f = flow_frame(0);
        let before = counters(sw);
        const PACKETS: u64 = 4000;
        for _ in 0..PACKETS {
            assert_eq!(run(sw, &f).0.return_value, XDP_REDIRECT);
        }
        let after = counters(sw);
        let sent: Vec<u64> = (1..=UPLINKS as usize).map(|p| after[p].tx_packets - before[p].tx_packets).collect();
        println!("spray: one flow's {PACKETS} packets per uplink: {sent:?}");
        assert_eq!(sent.iter().sum::<u64>(), PACKETS);
        // 1000 expected per uplink, binomial sd ~27: 7 sd either side.
        assert!(sent.iter().all(|&n| (810..=1190).contains(&n)), "{sent:?}");
        Ok(())
    });
}

#[test]
fn wcmp_gives_each_uplink_its_rates_share_and_follows_a_rate_change() {
    with_switch(HashMode::Wcmp, 0x33, |sw| {
        let cfg = FixtureSwitch::config(HashMode::Wcmp, 0x33);
        // Three uplinks at 100 Mbit/s and one degraded to 25: weights follow the rates.
        for (rates, expected) in
            [([100u64, 100, 100, 25], [0.2353, 0.2353, 0.2353, 0.0588]), ([100, 100, 100, 100], [0.25; 4])]
        {
            for (i, r) in rates.iter().enumerate() {
                sw.dp.set_port_rate(i as u32 + 1, r * 1_000_000)?;
            }
            sw.dp.refresh_wcmp()?;
            let weights = sw.dp.wcmp(GROUP_UPLINKS)?;
            let mut sent = [0u32; UPLINKS as usize];
            const FLOWS: u32 = 2000;
            for i in 0..FLOWS {
                let f = flow_frame(i);
                let parsed = parse_packet(&f[..]).unwrap();
                let port = forwarded_port(sw, &f);
                assert_eq!(port, 1 + weights.pick(flow_hash(&cfg, &parsed), UPLINKS).unwrap(), "flow {i}");
                sent[port as usize - 1] += 1;
            }
            println!("wcmp: rates {rates:?} Mbit/s, flows per uplink {sent:?}");
            let total = rates.iter().sum::<u64>() as f64;
            for (p, &n) in sent.iter().enumerate() {
                let share = rates[p] as f64 / total;
                assert!((share - expected[p] * (1.0 / expected.iter().sum::<f64>())).abs() < 0.01);
                // Binomial sd at most 22 flows of 2000: 5 sd.
                assert!((n as f64 - share * FLOWS as f64).abs() < 110.0, "uplink {p}: {n} of {FLOWS}, share {share}");
            }
        }
        Ok(())
    });
}
