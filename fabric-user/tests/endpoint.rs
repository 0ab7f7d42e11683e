//! Our RoCEv2 endpoints on a real testbed: collectives complete with every byte accounted for,
//! the packets are RoCEv2 that tshark decodes, and QP scaling only adds ECMP entropy together
//! with E-ECMP when the source port is fixed (the paper's point). Needs root.
mod common;

use std::{collections::BTreeMap, process::Command, time::Duration};

use fabric_common::config::HashMode;
use fabric_user::{
    endpoint::{EndpointOptions, SportPolicy},
    placement::Placement,
    run::{RunOptions, RunResult, run},
    testbed::{DownOnDrop, State},
    workload::Collective,
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
    let mut tcpdump = Command::new("ip")
        .args(["netns", "exec", &state.plan.netns(dst), "tcpdump", "--immediate-mode", "-B", "16384", "-U"])
        .args(["-s", "0", "-i", &ifname, "-w"])
        .arg(&pcap)
        .args(["udp", "port", "4791"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("tcpdump (apt-get install tcpdump)");
    std::thread::sleep(Duration::from_millis(500));
    let mut o = opts(Collective::Permutation, 3, SportPolicy::PerQp, HashMode::Eecmp, 1);
    o.ranks = Some(2);
    o.placement = Placement::Explicit { hosts: vec!["z0r0h0".into(), "z0r2h1".into()] };
    o.message_bytes = 64 * 1024;
    let r = go(&state, &o);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(tcpdump.id() as i32, libc::SIGINT) };
    tcpdump.wait().unwrap();
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
