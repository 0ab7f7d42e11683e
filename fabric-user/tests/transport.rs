//! The reorder-tolerant transport on a real testbed: our endpoints carry a collective to
//! completion with `--transport ooo`, every byte delivered once, the choice recorded in the
//! result, and the packets (WRITEs carrying a RETH each, ACKs) decode in tshark as RoCE.
//! Needs root.
mod common;

use std::{process::Command, time::Duration};

use fabric_common::config::HashMode;
use fabric_roce::transport::Transport;
use fabric_user::{
    endpoint::{EndpointOptions, SportPolicy},
    model::{placement::Placement, workload::Collective},
    run::{RunOptions, run},
};

fn options(collective: Collective, transport: Transport) -> RunOptions {
    RunOptions {
        collective,
        ranks: None,
        message_bytes: 256 * 1024,
        iterations: 1,
        placement: Placement::Contiguous,
        hash: Some(HashMode::Eecmp),
        hash_seed: Some(1),
        seed: 1,
        endpoint: EndpointOptions { qps: 2, sport: SportPolicy::PerQp, transport, ..Default::default() },
    }
}

#[test]
fn reorder_tolerant_endpoints_deliver_every_byte_and_decode_in_tshark() {
    let (_guard, state) = common::up(None, &common::unique_prefix('o', 0));
    let r = run(&state, &options(Collective::Allreduce, Transport::ReorderTolerant), true).unwrap();
    assert_eq!(r.transport, Transport::ReorderTolerant);
    assert_eq!(r.bytes_delivered, r.bytes_needed, "every byte arrives exactly once");
    for f in &r.flows {
        assert_eq!(f.bytes_received, f.bytes, "{} -> {}", f.src, f.dst);
        assert_eq!((f.icrc_errors, f.wire_errors), (0, 0), "{} -> {}", f.src, f.dst);
    }
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["transport"], "ooo");
    assert_eq!(json["options"]["endpoint"]["transport"], "ooo");
    assert!(json["flows"][0]["reordered_packets"].is_u64() && json["flows"][0]["reorder_depth_max"].is_u64());

    // One flow captured at its receiver: the WRITEs and ACKs tshark shows.
    let dst = state.plan.node_by_name("z0r2h1").unwrap();
    let pcap = std::env::temp_dir().join(format!("fabric-ooo-{}.pcap", std::process::id()));
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
    let mut o = options(Collective::Permutation, Transport::ReorderTolerant);
    o.ranks = Some(2);
    o.placement = Placement::Explicit { hosts: vec!["z0r0h0".into(), "z0r2h1".into()] };
    o.message_bytes = 64 * 1024;
    let r = run(&state, &o, true).unwrap();
    assert_eq!(r.bytes_delivered, r.bytes_needed);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(tcpdump.id() as i32, libc::SIGINT) };
    tcpdump.wait().unwrap();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args(["-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=,"])
        .args(["-e", "infiniband.bth.opcode", "-e", "data.len", "-e", "_ws.malformed"])
        .output()
        .expect("tshark (apt-get install tshark)");
    let _ = std::fs::remove_file(&pcap);
    let text = String::from_utf8(out.stdout).unwrap();
    let (mut middles, mut acks) = (0, 0);
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 3, "{line}");
        assert!(f[2].is_empty(), "tshark calls a packet malformed: {line}");
        match f[0].parse::<u64>().unwrap() {
            // A MIDDLE's RETH is, to tshark, the first 16 bytes of its data.
            7 => {
                assert_eq!(f[1], "1040", "{line}");
                middles += 1;
            }
            6 | 8 | 10 => {}
            17 => acks += 1,
            other => panic!("unexpected opcode {other}: {line}"),
        }
    }
    assert!(middles > 0 && acks > 0, "{text}");
}
