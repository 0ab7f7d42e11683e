//! `parse_packet` on the shared rxe capture, cross-checked field by field against Wireshark's
//! InfiniBand dissector (tshark), an independent decoder.
mod common;

use common::*;
use fabric_common::parse::{IpHeader, parse_packet};
use std::process::Command;

const TSHARK: &str = "/usr/bin/tshark";

/// The BTH as tshark decodes it, one per frame.
#[derive(Debug)]
struct TsharkRow {
    frame_number: usize,
    opcode: u8,
    dest_qp: u32,
    psn: u32,
    solicited: bool,
    ack_request: bool,
    pkey: u16,
}

/// tshark prints some fields in decimal and others (destqp) in hex with a 0x prefix.
fn int(field: &str) -> u64 {
    match field.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => field.parse(),
    }
    .unwrap_or_else(|e| panic!("tshark field {field:?} is not a number: {e}"))
}

fn flag(field: &str) -> bool {
    match field {
        "1" | "True" | "true" => true,
        "0" | "False" | "false" => false,
        other => panic!("tshark flag field {other:?}"),
    }
}

/// Runs tshark over the capture (port 4791 decoded as InfiniBand) and returns one row per frame.
fn tshark_rows() -> Vec<TsharkRow> {
    let fields = [
        "frame.number",
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
        "infiniband.bth.se",
        "infiniband.bth.a",
        "infiniband.bth.p_key",
    ];
    let mut cmd = Command::new(TSHARK);
    cmd.args(["-r", CAPTURE, "-d", "udp.port==4791,infiniband", "-T", "fields"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run {TSHARK} ({e}): this test needs tshark; install it with `apt-get install tshark`")
    });
    assert!(out.status.success(), "tshark failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).expect("tshark output is not UTF-8");
    stdout
        .lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), fields.len(), "unexpected tshark row {line:?}");
            assert!(cols.iter().all(|c| !c.is_empty() && !c.contains(',')), "frame without exactly one BTH: {line:?}");
            TsharkRow {
                frame_number: int(cols[0]) as usize,
                opcode: int(cols[1]) as u8,
                dest_qp: int(cols[2]) as u32,
                psn: int(cols[3]) as u32,
                solicited: flag(cols[4]),
                ack_request: flag(cols[5]),
                pkey: int(cols[6]) as u16,
            }
        })
        .collect()
}

#[test]
fn capture_parses_like_tshark() {
    let frames = capture_frames();
    let rows = tshark_rows();
    assert!(!rows.is_empty(), "tshark decoded no frames");
    assert_eq!(rows.len(), frames.len(), "tshark rows vs pcap frames");

    for (i, (frame, row)) in frames.iter().zip(&rows).enumerate() {
        assert_eq!(row.frame_number, i + 1, "tshark rows out of order");
        let p = parse_packet(&frame[..]).unwrap_or_else(|e| panic!("frame {}: {e:?}", i + 1));
        assert!(matches!(p.ip, IpHeader::V4 { .. }), "frame {}: IPv4 expected", i + 1);
        assert_eq!(p.ports.map(|(_, d)| d), Some(ROCE_PORT), "frame {}", i + 1);
        let bth = p.bth.unwrap_or_else(|| panic!("frame {}: no BTH", i + 1));
        assert_eq!(bth.opcode, row.opcode, "frame {}: opcode", i + 1);
        assert_eq!(bth.dest_qp, row.dest_qp, "frame {}: dest QP", i + 1);
        assert_eq!(bth.psn, row.psn, "frame {}: PSN", i + 1);
        assert_eq!(bth.solicited, row.solicited, "frame {}: solicited", i + 1);
        assert_eq!(bth.ack_request, row.ack_request, "frame {}: ack request", i + 1);
        assert_eq!(bth.pkey, row.pkey, "frame {}: P_Key", i + 1);
    }
}

#[test]
fn capture_is_mixed_traffic() {
    // The comparison above is only meaningful if the capture exercises several opcodes and QPs
    // (a capture of identical packets would make a broken field offset look right).
    let rows = tshark_rows();
    let opcodes: std::collections::BTreeSet<u8> = rows.iter().map(|r| r.opcode).collect();
    let qps: std::collections::BTreeSet<u32> = rows.iter().map(|r| r.dest_qp).collect();
    let psns: std::collections::BTreeSet<u32> = rows.iter().map(|r| r.psn).collect();
    assert!(opcodes.len() >= 3, "opcodes {opcodes:?}");
    assert!(qps.len() >= 2, "QPs {qps:?}");
    assert!(psns.len() >= rows.len() / 4, "PSNs {psns:?}");
}
