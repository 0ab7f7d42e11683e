//! Our RoCEv2 endpoints on a real testbed: collectives complete with every byte accounted for,
//! the packets are RoCEv2 that tshark decodes, and QP scaling only adds ECMP entropy together
//! with E-ECMP when the source port is fixed (the paper's point). Hosts obey PFC from their
//! rack switch, and every congestion control mode runs collectives to completion. Needs root.
mod common;

use std::{
    collections::BTreeMap,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    process::Command,
    sync::{Arc, Mutex, atomic::AtomicBool},
    time::{Duration, Instant, SystemTime},
};

use fabric_common::{
    config::HashMode,
    pfc::{CLASSES, PauseFrame, quanta_to_ns},
};
use fabric_user::{
    endpoint::{CcMode, EndpointOptions, SlowReceiver, SportPolicy, engine::host_link_rate_bps, socket},
    model::placement::Placement,
    model::workload::Collective,
    run::{RunOptions, RunResult, run},
    state::State,
    sys::netns,
    testbed::DownOnDrop,
};

fn testbed(tag: char) -> (DownOnDrop, State) {
    common::up(None, &common::unique_prefix(tag, 0))
}

fn opts(collective: Collective, qps: u32, sport: SportPolicy, hash: HashMode, seed: u32) -> RunOptions {
    RunOptions {
        collective,
        ranks: None,
        message_bytes: 1 << 20,
        iterations: 1,
        placement: Placement::Contiguous,
        hash: Some(hash),
        hash_seed: Some(seed),
        seed: 1,
        endpoint: EndpointOptions { qps, sport, ..Default::default() },
    }
}

fn go(state: &State, o: &RunOptions) -> RunResult {
    run(state, o, true).unwrap_or_else(|e| panic!("{e:#}"))
}

#[test]
fn allreduce_completes_with_every_byte_accounted_for() {
    let (_guard, state) = testbed('e');
    for collective in [Collective::Allreduce, Collective::Alltoall, Collective::Incast, Collective::Permutation] {
        let r = go(&state, &opts(collective, 2, SportPolicy::PerQp, HashMode::Eecmp, 1));
        let expected: u64 = match collective {
            // 2(N-1) steps of N chunks of message/N.
            Collective::Allreduce => 14 * 8 * (1 << 17),
            Collective::Alltoall => 8 * 7 * (1 << 17),
            Collective::Incast => 7 * (1 << 20),
            Collective::Permutation => 8 * (1 << 20),
        };
        assert_eq!(r.bytes_needed, expected, "{collective:?}");
        assert_eq!(r.bytes_delivered, expected, "{collective:?}: every byte arrives exactly once");
        assert!(r.iterations[0].completion_ns > 0);
        for f in &r.flows {
            assert_eq!(f.bytes_received, f.bytes, "{} -> {}", f.src, f.dst);
            assert_eq!(f.qps, 2);
            assert_eq!(f.icrc_errors, 0);
        }
        // The fabric carried it: the RTSW uplinks saw at least the cross-rack payload.
        let uplink_bytes: u64 = r.uplinks.iter().flat_map(|u| u.tx_bytes.iter().map(|t| t.1)).sum();
        assert!(uplink_bytes > 0, "{collective:?}");
    }
}

#[test]
fn with_a_fixed_source_port_only_qp_scaling_plus_eecmp_spreads_the_uplinks() {
    let (_guard, state) = testbed('q');
    for seed in [1, 2, 3] {
        let base = go(&state, &opts(Collective::Allreduce, 1, SportPolicy::Fixed, HashMode::FiveTuple, seed));
        let scaled = go(&state, &opts(Collective::Allreduce, 8, SportPolicy::Fixed, HashMode::FiveTuple, seed));
        let eecmp = go(&state, &opts(Collective::Allreduce, 8, SportPolicy::Fixed, HashMode::Eecmp, seed));
        let (b, s, e) =
            (base.balance.mean_max_over_mean, scaled.balance.mean_max_over_mean, eecmp.balance.mean_max_over_mean);
        // One five-tuple per connection: every QP of it on one uplink, however many QPs.
        assert!(b > 3.0, "seed {seed}: 1 QP, five-tuple should load one uplink of four (max/mean {b:.2})");
        assert!((s - b).abs() < 0.3, "seed {seed}: QP scaling alone changed nothing: {b:.2} vs {s:.2}");
        // E-ECMP hashes the QP: most of the imbalance goes.
        assert!(e < 0.6 * b, "seed {seed}: eecmp with 8 QPs should spread: {b:.2} -> {e:.2}");
        assert!(eecmp.balance.mean_jain > base.balance.mean_jain + 0.3, "seed {seed}");
        for r in [&base, &scaled, &eecmp] {
            assert_eq!(r.bytes_delivered, r.bytes_needed);
        }
    }
}

/// A capture of a run, decoded by tshark: only RC WRITE and ACK opcodes, data to the
/// responders' QPs, PSNs consecutive per QP (nothing was lost), source ports as the policy says.
#[test]
fn a_captured_run_decodes_in_tshark() {
    let (_guard, state) = testbed('p');
    let src = state.plan.node_by_name("z0r0h0").unwrap();
    let dst = state.plan.node_by_name("z0r2h1").unwrap();
    let pcap = std::env::temp_dir().join(format!("fabric-run-{}.pcap", std::process::id()));
    let ifname = state.plan.nodes[dst].ports[0].ifname.clone();
    // Whole frames; started once tcpdump listens, stopped once its file stops growing, and
    // failed if the kernel dropped any frame it matched.
    let tcpdump = common::Tcpdump::start(&state.plan.netns(dst), &ifname, "udp port 4791", 0, pcap.clone());
    let mut o = opts(Collective::Permutation, 3, SportPolicy::PerQp, HashMode::Eecmp, 1);
    o.ranks = Some(2);
    o.placement = Placement::Explicit { hosts: vec!["z0r0h0".into(), "z0r2h1".into()] };
    o.message_bytes = 64 * 1024;
    let r = go(&state, &o);
    tcpdump.stop();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args(["-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=,"])
        .args(["-e", "ip.src", "-e", "udp.srcport", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp"])
        .args(["-e", "infiniband.bth.psn", "-e", "_ws.malformed"])
        .output()
        .expect("tshark (apt-get install tshark)");
    let _ = std::fs::remove_file(&pcap);
    let text = String::from_utf8(out.stdout).unwrap();
    let src_ip = state.plan.host_ipv4(src).to_string();
    let mut psns: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let (mut data, mut acks) = (0, 0);
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 6, "{line}");
        assert!(f[5].is_empty(), "tshark calls a packet malformed: {line}");
        let opcode: u64 = f[2].parse().unwrap();
        let qp = u64::from_str_radix(f[3].trim_start_matches("0x"), 16).unwrap();
        let psn: u64 = f[4].parse().unwrap();
        let sport: u16 = f[1].parse().unwrap();
        assert!(sport >= 0xC000, "per-QP source ports are in 0xC000..: {line}");
        match opcode {
            6 | 7 | 8 | 10 => {
                if f[0] == src_ip {
                    data += 1;
                    psns.entry(qp).or_default().push(psn);
                }
            }
            17 => acks += 1,
            other => panic!("unexpected opcode {other}: {line}"),
        }
    }
    // Each of the 3 QPs of the flow into z0r2h1 carried its share, in PSN order.
    let into_dst = r.flows.iter().find(|f| f.dst == "z0r2h1").unwrap();
    assert_eq!(psns.len(), 3, "3 QPs seen: {:?}", psns.keys());
    let packets: usize = psns.values().map(Vec::len).sum();
    assert_eq!(packets as u64, into_dst.packets_sent, "every data packet captured once");
    for (qp, v) in &psns {
        for w in v.windows(2) {
            assert_eq!(w[1], (w[0] + 1) % (1 << 24), "QP {qp:#x}: PSNs consecutive");
        }
    }
    assert!(data > 0 && acks > 0);
    assert_eq!(into_dst.sport_count(), 3, "per-QP ports differ per QP");
}

/// Records when each RoCE data-class frame (DSCP 26) leaves `ifname`: an `AF_PACKET` socket
/// for every protocol sees outgoing frames too. Runs until `stop`.
fn watch_outgoing_roce(ifname: &str, stop: &AtomicBool, seen: &Mutex<Vec<SystemTime>>) -> anyhow::Result<()> {
    let ifindex = netns::ifindex(ifname)?;
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain syscalls on a socket we own; buffers of the stated sizes.
    unsafe {
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto));
        assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
        let fd = OwnedFd::from_raw_fd(fd);
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        let rc = libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as u32,
        );
        assert_eq!(rc, 0);
        // Kernel timestamps: when the frame left, not when this thread got round to reading it
        // (on a busy runner a late read would place a frame sent before a pause inside it).
        let on: libc::c_int = 1;
        let rc = libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as u32,
        );
        assert_eq!(rc, 0, "SO_TIMESTAMPNS: {}", std::io::Error::last_os_error());
        netns::set_receive_timeout(std::os::fd::AsFd::as_fd(&fd), Duration::from_millis(20))?;
        let mut buf = [0u8; 128];
        let mut control = [0u64; 16];
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let mut from: libc::sockaddr_ll = std::mem::zeroed();
            let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
            msg.msg_namelen = size_of::<libc::sockaddr_ll>() as u32;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = size_of_val(&control);
            let n = libc::recvmsg(fd.as_raw_fd(), &mut msg, 0);
            if n < 42 || from.sll_pkttype != libc::PACKET_OUTGOING {
                continue;
            }
            let f = &buf[..n as usize];
            let ihl = usize::from(f[14] & 0x0F) * 4;
            let is_roce_data = f[12..14] == [0x08, 0x00]
                && f[23] == 17
                && f.len() >= 14 + ihl + 4
                && u16::from_be_bytes([f[14 + ihl + 2], f[14 + ihl + 3]]) == 4791
                && f[15] >> 2 == 26;
            if !is_roce_data {
                continue;
            }
            // The frame's kernel timestamp (SCM_TIMESTAMPNS), where the kernel gave one.
            let mut at = None;
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    at = Some(SystemTime::UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
            seen.lock().unwrap().push(at.expect("SO_TIMESTAMPNS: every frame carries its timestamp"));
        }
    }
    Ok(())
}

/// The clock read just before and just after a frame was sent.
#[derive(Clone, Copy)]
struct Sent {
    before: SystemTime,
    after: SystemTime,
}

fn pfc_class3(src: [u8; 6], quanta: u16) -> [u8; 60] {
    let mut q = [0; CLASSES];
    q[3] = quanta;
    PauseFrame { src, class_enable: 1 << 3, quanta: q }.emit()
}

/// A host paused for class 3 by frames written on the RTSW's end of its link stops sending data
/// for the pause time (0xFFFF quanta at the host link's modelled rate) and resumes by itself,
/// and resumes at once on quanta 0; it counts the frames and the paused time.
#[test]
fn a_host_obeys_pfc_from_its_rack_switch() {
    let (_guard, state) = testbed('f');
    let plan = &state.plan;
    let src = plan.node_by_name("z0r0h0").unwrap();
    let port = &plan.nodes[src].ports[0];
    let sw_port = &plan.nodes[port.peer_node].ports[port.peer_port];
    let pause = Duration::from_nanos(quanta_to_ns(0xFFFF, host_link_rate_bps(plan, plan.topology.time_scale)));
    assert!(pause >= Duration::from_millis(150), "time scale too small to watch a pause: {pause:?}");
    let margin = Duration::from_millis(25);

    let mut o = opts(Collective::Incast, 1, SportPolicy::PerQp, HashMode::Eecmp, 1);
    o.ranks = Some(2);
    o.placement = Placement::Explicit { hosts: vec!["z0r2h1".into(), "z0r0h0".into()] };
    o.message_bytes = 6 << 20;
    o.endpoint.rate_bps = 20_000_000;
    let stop = AtomicBool::new(false);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (result, marks) = std::thread::scope(|s| {
        let watcher = s.spawn(|| netns::in_named(&plan.netns(src), || watch_outgoing_roce(&port.ifname, &stop, &seen)));
        let runner = s.spawn(|| go(&state, &o));
        // When a frame was sent lies between the two clock reads around it: a pause's window
        // starts after its XOFF was sent and ends before its XON was, so that a thread preempted
        // between its send and its clock read cannot move a frame sent after the XON into the pause.
        let inject = |quanta: u16| {
            netns::in_named(&plan.netns(port.peer_node), || {
                let fd = socket::pfc_socket(&sw_port.ifname)?;
                let before = SystemTime::now();
                socket::send_frame(&fd, &pfc_class3(sw_port.mac, quanta))?;
                Ok(Sent { before, after: SystemTime::now() })
            })
            .unwrap()
        };
        let waited = Instant::now();
        while seen.lock().unwrap().len() < 50 {
            assert!(waited.elapsed() < Duration::from_secs(20), "the host never started sending");
            std::thread::sleep(Duration::from_millis(5));
        }
        let xoff_a = inject(0xFFFF);
        std::thread::sleep(pause + Duration::from_millis(250));
        let xoff_b = inject(0xFFFF);
        std::thread::sleep(Duration::from_millis(150));
        let xon = inject(0);
        std::thread::sleep(Duration::from_millis(250));
        let result = runner.join().unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        watcher.join().unwrap().unwrap();
        (result, [xoff_a, xoff_b, xon])
    });
    let [xoff_a, xoff_b, xon] = marks;
    let seen = seen.lock().unwrap();
    let within = |from: SystemTime, to: SystemTime| -> Vec<Duration> {
        seen.iter().filter(|t| **t > from && **t < to).map(|t| t.duration_since(from).unwrap()).collect()
    };
    let count = |from: SystemTime, to: SystemTime| within(from, to).len();
    assert!(xon.after + Duration::from_millis(250) < *seen.last().unwrap(), "the transfer outlasted the test's frames");
    let first = within(xoff_a.after + margin, xoff_a.before + pause - margin);
    assert!(first.is_empty(), "data left during the pause, this long after XOFF+{margin:?}: {first:?}");
    assert!(
        count(xoff_a.after + pause + margin, xoff_a.after + pause + Duration::from_millis(250)) > 5,
        "no resume when the pause ran out"
    );
    let second = within(xoff_b.after + margin, xon.before);
    assert!(second.is_empty(), "data left during the second pause, this long after XOFF+{margin:?}: {second:?}");
    assert!(count(xon.after + margin, xon.after + Duration::from_millis(250)) > 5, "no resume on quanta 0");
    assert_eq!(result.bytes_delivered, result.bytes_needed);
    let h = result.hosts.iter().find(|h| h.host == "z0r0h0").expect("the sender's host counters");
    assert!(h.pause_frames_received >= 3, "{h:?}");
    let second_pause = |from: SystemTime, to: SystemTime| to.duration_since(from).expect("XON after the second XOFF");
    let (shortest, longest) =
        (pause + second_pause(xoff_b.after, xon.before), pause + second_pause(xoff_b.before, xon.after));
    let paused = Duration::from_nanos(h.paused_ns);
    assert!(
        paused + margin >= shortest && paused <= longest + Duration::from_millis(150),
        "paused {paused:?}, expected {shortest:?} to {longest:?}"
    );
}

/// `--cc dcqcn` and `--cc cts` run collectives to completion; CNPs follow CE marks, the CTS
/// receivers keep within channels x buffer; a slow receiver pauses its switch and still gets
/// every byte once it recovers.
#[test]
fn congestion_control_modes_complete() {
    let (_guard, state) = testbed('c');
    let line = host_link_rate_bps(&state.plan, state.plan.topology.time_scale);
    for (collective, cc) in
        [(Collective::Allreduce, CcMode::Dcqcn), (Collective::Incast, CcMode::Dcqcn), (Collective::Incast, CcMode::Cts)]
    {
        let mut o = opts(collective, 2, SportPolicy::PerQp, HashMode::Eecmp, 1);
        o.message_bytes = 512 * 1024;
        o.endpoint.rate_bps = 0;
        o.endpoint.cc = cc;
        o.endpoint.cts_channels = 2;
        o.endpoint.cts_buffer_bytes = 32 * 1024;
        let r = go(&state, &o);
        let what = format!("{collective:?} {cc:?}");
        assert_eq!(r.cc, cc);
        assert_eq!(r.time_scale, state.plan.topology.time_scale);
        assert_eq!(r.bytes_delivered, r.bytes_needed, "{what}");
        for f in &r.flows {
            assert_eq!(f.intended_bps, line, "{what}: the default rate is the host link's");
            assert!(f.cnps_sent <= f.ce_packets && f.cnps_received <= f.cnps_sent, "{what}: {f:?}");
            if cc == CcMode::Dcqcn {
                assert!(!f.rate_trajectory.is_empty(), "{what}");
                assert!(f.rate_trajectory.iter().all(|s| s.1 <= line), "{what}");
                if f.ce_packets > 0 {
                    assert!(f.cnps_sent > 0, "{what}: CE marks without a CNP: {f:?}");
                }
            } else {
                assert!(f.rate_trajectory.is_empty() && f.cnps_sent == 0, "{what}");
            }
        }
        if cc == CcMode::Cts {
            let bound = r.cts_bound_bytes.unwrap();
            assert_eq!(bound, 64 * 1024);
            let root = r.hosts.iter().find(|h| h.host == r.placement[0]).unwrap();
            assert!(root.cts_max_in_flight_bytes > 0 && root.cts_max_in_flight_bytes <= bound, "{root:?}");
        }
    }
    // A slow receiver: the incast root pauses its switch for 0.6 s, then catches up.
    let mut o = opts(Collective::Incast, 1, SportPolicy::PerQp, HashMode::Eecmp, 1);
    o.ranks = Some(3);
    o.message_bytes = 256 * 1024;
    o.endpoint.slow_receiver = Some(SlowReceiver { host: "z0r0h0".into(), duration_ns: 600_000_000 });
    let r = go(&state, &o);
    assert_eq!(r.bytes_delivered, r.bytes_needed);
    // The slow period counts from the run's clock, which starts before the step's (thread and
    // socket setup), so the step itself lasts at least most of it.
    assert!(
        r.iterations[0].completion_ns >= 400_000_000,
        "data was taken in while slow: the step took {} ms",
        r.iterations[0].completion_ns / 1_000_000
    );
    let root = r.hosts.iter().find(|h| h.host == "z0r0h0").unwrap();
    let refresh = quanta_to_ns(0xFFFF, line) / 2;
    assert!(root.pause_frames_sent >= 600_000_000 / refresh, "XOFF every half pause time, then XON: {root:?}");
}
