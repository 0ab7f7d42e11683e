//! `fabric analyze`: a real rxe capture and crafted ones (VLAN, IPv6, snap-length cuts, ARP,
//! TCP, fragments, malformed frames, Linux cooked capture, pcapng with several link types), and
//! the prediction against `select_member`; and our endpoints' traffic captured on a live testbed,
//! against the switch's counters, the run's report and `fabric sim`. Only that last test needs root.
mod common;

use std::{
    borrow::Cow,
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use fabric_common::{
    config::{HashMode, SwitchConfig},
    hash::select_member,
    parse::parse_packet,
};
use fabric_user::{
    analyze::{
        Analyzer, Group, Report, analyze_file,
        cli::{AnalyzeArgs, group_of},
    },
    endpoint::EndpointOptions,
    forwarding::{fabric::SimFabric, flows::step_flows},
    model::placement::Placement,
    model::plan::{NodeId, Plan},
    model::workload::Collective,
    model::workload::HostTransfer,
    run::{RunOptions, RunResult, run},
    sim::{SimOptions, predict_member_load, steps_of},
    state::State,
};
use pcap_file::{
    DataLink,
    pcap::{PcapHeader, PcapPacket, PcapWriter},
    pcapng::{
        PcapNgWriter,
        blocks::{enhanced_packet::EnhancedPacketBlock, interface_description::InterfaceDescriptionBlock},
    },
};

/// A scratch file's path in a folder of its own, which goes when the test ends (or panics).
struct Scratch {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

fn tmp(name: &str) -> Scratch {
    let dir = tempfile::Builder::new().prefix("fabric-analyze-").tempdir().unwrap();
    let path = dir.path().join(name);
    Scratch { _dir: dir, path }
}

fn group(uplinks: u32, seed: u32) -> Group {
    Group { uplinks, seed, pin_shift: 1, modes: HashMode::ALL.to_vec() }
}

// ---- frame builders ----

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

fn eth(ethertype: u16, vlan: Option<u16>, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&MAC_B);
    f.extend_from_slice(&MAC_A);
    if let Some(tci) = vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, frag: u16, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut h = vec![0x45, 0x68];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0, 1]);
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(payload);
    h
}

fn ipv6(src: [u8; 16], dst: [u8; 16], next: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x66, 0x80, 0, 0];
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(payload);
    h
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(payload);
    h
}

/// BTH + `len` bytes of payload + ICRC.
fn bth(opcode: u8, dest_qp: u32, psn: u32, len: usize) -> Vec<u8> {
    let q = dest_qp.to_be_bytes();
    let p = psn.to_be_bytes();
    let mut h = vec![opcode, 0, 0xFF, 0xFF, 0, q[1], q[2], q[3], 0x80, p[1], p[2], p[3]];
    h.resize(12 + len + 4, 0xAB);
    h
}

fn roce4(src: [u8; 4], dst: [u8; 4], sport: u16, opcode: u8, qp: u32, len: usize, vlan: Option<u16>) -> Vec<u8> {
    eth(0x0800, vlan, &ipv4(src, dst, 17, 0, &udp(sport, 4791, &bth(opcode, qp, 1, len))))
}

const H1: [u8; 4] = [10, 0, 0, 1];
const H2: [u8; 4] = [10, 0, 0, 2];
const H3: [u8; 4] = [10, 0, 1, 3];

fn v6(last: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[0xfd, 0, 0, 0x18]);
    a[15] = last;
    a
}

/// (frame as captured, original length)
type Rec = (Vec<u8>, u32);

fn full(f: Vec<u8>) -> Rec {
    let n = f.len() as u32;
    (f, n)
}

fn cut(f: Vec<u8>, caplen: usize) -> Rec {
    let n = f.len() as u32;
    (f[..caplen].to_vec(), n)
}

fn write_pcap(path: &Path, linktype: DataLink, recs: &[Rec]) {
    write_pcap_snap(path, linktype, 65535, recs)
}

/// With a snap length below the original lengths, as `tcpdump -s N` writes (pcap-file refuses
/// to read such records; analyze must not).
fn write_pcap_snap(path: &Path, linktype: DataLink, snaplen: u32, recs: &[Rec]) {
    let file = std::fs::File::create(path).unwrap();
    let header = PcapHeader { datalink: linktype, snaplen, ..Default::default() };
    let mut w = PcapWriter::with_header(file, header).unwrap();
    for (i, (data, orig)) in recs.iter().enumerate() {
        w.write_packet(&PcapPacket::new(Duration::from_micros(i as u64), *orig, data)).unwrap();
    }
}

/// The Ethernet-capture mix: what each frame is, and what analyze must make of it.
fn mixed() -> Vec<Rec> {
    let big = roce4(H1, H3, 50000, 0x06, 0x100, 1024, None);
    let mut bad_udp = roce4(H2, H3, 50002, 0x0A, 0x300, 64, None);
    // UDP length larger than the IP payload, not a snap-length cut: malformed.
    bad_udp[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&2000u16.to_be_bytes());
    // An IPv4 RoCE packet whose BTH ends early inside a consistent IP datagram.
    let short_bth = eth(0x0800, None, &ipv4(H1, H2, 17, 0, &udp(50003, 4791, &[0x04, 0, 0xFF, 0xFF, 0, 0])));
    let mut arp = eth(0x0806, None, &[0u8; 28]);
    arp.resize(60, 0);
    vec![
        // QP 0x100, H1 -> H3: WRITE FIRST (full), WRITE LAST cut at 54 + 10 bytes (BTH captured).
        full(big.clone()),
        cut(roce4(H1, H3, 50000, 0x08, 0x100, 1024, None), 14 + 20 + 8 + 12 + 10),
        // The same five-tuple, another destination QP (two QPs on one flow).
        full(roce4(H1, H3, 50000, 0x0A, 0x101, 200, None)),
        // VLAN 100 tagged, H2 -> H3.
        full(roce4(H2, H3, 50001, 0x04, 0x200, 100, Some((3 << 13) | 100))),
        full(roce4(H2, H3, 50001, 0x04, 0x200, 100, Some((3 << 13) | 100))),
        // IPv6 RoCE.
        full(eth(0x86DD, None, &ipv6(v6(1), v6(2), 17, &udp(50010, 4791, &bth(0x11, 0x400, 7, 4))))),
        // Cut in the UDP header (before the BTH): unknown.
        cut(big.clone(), 14 + 20 + 6),
        // Cut in the BTH.
        cut(big.clone(), 14 + 20 + 8 + 5),
        // Cut in the IP header.
        cut(big.clone(), 20),
        // ARP, TCP, DNS.
        full(arp),
        full(eth(0x0800, None, &ipv4(H1, H2, 6, 0, &[0u8; 40]))),
        full(eth(0x0800, None, &ipv4(H1, H2, 17, 0, &udp(5353, 53, &[0u8; 30])))),
        // A later IPv4 fragment (offset 185 x 8).
        full(eth(0x0800, None, &ipv4(H1, H3, 17, 185, &[0u8; 100]))),
        full(bad_udp),
        full(short_bth),
    ]
}

fn skips(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// Every QP's member in the report is `select_member` on the parse of its frames.
fn check_members_against_kernel(r: &Report, frames: &[Vec<u8>]) {
    let g = &r.group;
    let mut checked = 0;
    for f in frames {
        let Ok(p) = parse_packet(&f[..]) else { continue };
        let Some(b) = p.bth else { continue };
        let (sport, _) = p.ports.unwrap();
        let q = r
            .qps
            .iter()
            .find(|q| q.src_port == sport && q.dest_qp == b.dest_qp && ip_of(&p) == (q.src, q.dst))
            .expect("a RoCE frame's QP is in the report");
        for &mode in &HashMode::ALL {
            let cfg = SwitchConfig::new(mode, g.seed, g.pin_shift);
            assert_eq!(q.members[mode.as_str()], select_member(&cfg, &p, g.uplinks), "{mode:?} {q:?}");
        }
        checked += 1;
    }
    assert!(checked > 0);
}

fn ip_of(p: &fabric_common::parse::ParsedPacket) -> (std::net::IpAddr, std::net::IpAddr) {
    match p.ip {
        fabric_common::parse::IpHeader::V4 { src, dst, .. } => (src.into(), dst.into()),
        fabric_common::parse::IpHeader::V6 { src, dst, .. } => (src.into(), dst.into()),
    }
}

#[test]
fn the_rxe_capture() {
    let path = common::rxe_capture();
    let r = analyze_file(&path, &group(4, 0)).unwrap();
    assert_eq!((r.format.as_str(), r.frames, r.roce_packets), ("pcap", 110, 110));
    assert_eq!(r.roce_bytes, r.captured_bytes);
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    // perftest-like traffic between two rxe devices: 7 QPs, each with its own UDP source port,
    // both directions.
    assert_eq!((r.flows.len(), r.qps.len()), (14, 14));
    let qps: std::collections::BTreeSet<u32> = r.qps.iter().map(|q| q.dest_qp).collect();
    assert_eq!(qps, (0x11..=0x17).collect());
    let all_ops: std::collections::BTreeSet<&str> =
        r.flows.iter().flat_map(|f| f.opcodes.iter().map(String::as_str)).collect();
    for op in ["RC_WRITE_FIRST", "RC_WRITE_MIDDLE", "RC_WRITE_LAST", "RC_SEND_ONLY", "RC_READ_REQUEST", "RC_ACK"] {
        assert!(all_ops.contains(op), "{op} missing from {all_ops:?}");
    }
    assert_eq!(r.flows.iter().map(|f| f.packets).sum::<u64>(), 110);
    // pin sees two destinations; five-tuple and eecmp see a key per QP.
    let m = |name: &str| r.modes.iter().find(|m| m.mode == name).unwrap();
    assert_eq!(m("pin").hash_inputs, 2);
    assert_eq!(m("five-tuple").hash_inputs, 14);
    for mode in &r.modes {
        assert_eq!(mode.uplink_bytes.iter().sum::<u64>(), r.roce_bytes);
        assert_eq!(mode.uplink_packets.iter().sum::<u64>(), 110);
        assert!(mode.member_entropy_bits <= mode.max_entropy_bits + 1e-9);
        assert!(mode.member_entropy_bits <= mode.input_entropy_bits + 1e-9);
    }
    let frames = fabric_testkit::capture::read_pcap(&path).unwrap();
    check_members_against_kernel(&r, &frames);
    // Another group: the answer changes, and still matches the kernel's function.
    let r8 = analyze_file(&path, &group(8, 0xDEAD_BEEF)).unwrap();
    assert_eq!(r8.modes[0].uplink_bytes.len(), 8);
    check_members_against_kernel(&r8, &frames);
}

#[test]
fn crafted_ethernet_capture_with_everything_a_real_one_has() {
    let recs = mixed();
    let path = tmp("mixed.pcap");
    write_pcap(&path, DataLink::ETHERNET, &recs);
    let r = analyze_file(&path, &group(4, 7)).unwrap();
    assert_eq!(r.frames, recs.len() as u64);
    assert_eq!(
        r.skipped,
        skips(&[
            ("truncated_before_bth", 3),
            ("not_ip", 1),
            ("not_roce", 2),
            ("ip_fragment", 1),
            ("malformed:bad_udp_length", 1),
            ("malformed:truncated_bth", 1),
        ])
    );
    assert_eq!(r.roce_packets, 6);
    // Flows: H1->H3 (2 QPs), H2->H3 (VLAN 100), the IPv6 one.
    assert_eq!(r.flows.len(), 3);
    let f13 = r.flows.iter().find(|f| f.src_port == 50000).unwrap();
    assert_eq!(f13.dest_qps, [0x100, 0x101]);
    assert_eq!(f13.packets, 3);
    // The cut WRITE LAST weighs its original length.
    let big = roce4(H1, H3, 50000, 0x06, 0x100, 1024, None).len() as u64;
    let small = roce4(H1, H3, 50000, 0x0A, 0x101, 200, None).len() as u64;
    assert_eq!(f13.bytes, 2 * big + small);
    assert_eq!(f13.opcodes, ["RC_WRITE_FIRST", "RC_WRITE_LAST", "RC_WRITE_ONLY"]);
    let vlan = r.flows.iter().find(|f| f.src_port == 50001).unwrap();
    assert_eq!((vlan.vlans.as_slice(), vlan.packets), (&[100u16][..], 2));
    let v6f = r.flows.iter().find(|f| f.src.is_ipv6()).unwrap();
    assert_eq!((v6f.dest_qps.as_slice(), v6f.opcodes.as_slice()), (&[0x400u32][..], &["RC_ACK".to_string()][..]));
    assert_eq!(r.qps.len(), 4);
    // Members of the full frames against the kernel's function (the cut one is covered by its
    // QP's full sibling).
    let frames: Vec<Vec<u8>> = recs.iter().filter(|(d, o)| d.len() as u32 == *o).map(|(d, _)| d.clone()).collect();
    check_members_against_kernel(&r, &frames);
    // Under eecmp the two QPs of one five-tuple hash apart or together by their QP alone; under
    // five-tuple they share a member.
    assert_eq!(f13.members["five-tuple"].len(), 1);
}

#[test]
fn linux_cooked_capture_and_raw_ip() {
    let frame = roce4(H1, H3, 50000, 0x06, 0x100, 64, None);
    let ip = frame[14..].to_vec();
    // SLL: packet type, ARPHRD_ETHER, address length, address (8), protocol.
    let mut sll = vec![0, 4, 0, 1, 0, 6];
    sll.extend_from_slice(&MAC_A);
    sll.extend_from_slice(&[0, 0]);
    sll.extend_from_slice(&0x0800u16.to_be_bytes());
    sll.extend_from_slice(&ip);
    let mut arp = vec![0, 4, 0, 1, 0, 6];
    arp.extend_from_slice(&MAC_A);
    arp.extend_from_slice(&[0, 0, 0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]);
    let path = tmp("cooked.pcap");
    write_pcap(&path, DataLink::LINUX_SLL, &[full(sll.clone()), full(arp), cut(sll.clone(), 16 + 20 + 8 + 12)]);
    let r = analyze_file(&path, &group(4, 0)).unwrap();
    assert_eq!(r.link_types, BTreeMap::from([("LINUX_SLL".to_string(), 3)]));
    assert_eq!(r.skipped, skips(&[("not_ip", 1)]));
    assert_eq!((r.roce_packets, r.qps.len()), (2, 1));
    // Weighed as the Ethernet frame it was.
    assert_eq!(r.roce_bytes, 2 * frame.len() as u64);
    check_members_against_kernel(&r, std::slice::from_ref(&frame));

    let path = tmp("raw.pcap");
    write_pcap(&path, DataLink::RAW, &[full(ip)]);
    let r = analyze_file(&path, &group(4, 0)).unwrap();
    assert_eq!((r.roce_packets, r.roce_bytes), (1, frame.len() as u64));
    check_members_against_kernel(&r, &[frame]);
}

#[test]
fn pcapng_with_several_interfaces_and_link_types() {
    let path = tmp("multi.pcapng");
    let frame = roce4(H2, H3, 51000, 0x0A, 0x500, 32, None);
    {
        let file = std::fs::File::create(&*path).unwrap();
        let mut w = PcapNgWriter::new(file).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 0)).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::IEEE802_11, 0)).unwrap();
        let epb = |iface: u32, data: &[u8], orig: u32| EnhancedPacketBlock {
            interface_id: iface,
            timestamp: Duration::ZERO,
            original_len: orig,
            data: Cow::Owned(data.to_vec()),
            options: vec![],
        };
        for _ in 0..3 {
            w.write_pcapng_block(epb(0, &frame, frame.len() as u32)).unwrap();
        }
        w.write_pcapng_block(epb(1, &[0u8; 40], 40)).unwrap();
        w.write_pcapng_block(epb(1, &[0u8; 40], 40)).unwrap();
    }
    let r = analyze_file(&path, &group(2, 1)).unwrap();
    assert_eq!(r.format, "pcapng");
    assert_eq!(r.frames, 5);
    assert_eq!(r.skipped, skips(&[("not_ethernet_link_type", 2)]));
    assert_eq!((r.roce_packets, r.qps.len()), (3, 1));
    check_members_against_kernel(&r, &[frame]);
}

/// A capture that ends inside a record (tcpdump killed, a copy taken while it wrote): the whole
/// records before the cut are analysed and the report says the file was cut short, in pcap and
/// pcapng alike, wherever the cut falls. A whole file says nothing of the kind, and bytes that
/// are not a record at all are still an error naming the record.
#[test]
fn a_capture_cut_inside_a_record_is_analysed_up_to_the_cut() {
    let frame = roce4(H2, H3, 51000, 0x0A, 0x500, 32, None);
    let pcap = tmp("whole.pcap");
    write_pcap(&pcap, DataLink::ETHERNET, &[full(frame.clone()), full(frame.clone()), full(frame.clone())]);
    let pcapng = tmp("whole.pcapng");
    {
        let mut w = PcapNgWriter::new(std::fs::File::create(&*pcapng).unwrap()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 0)).unwrap();
        for _ in 0..3 {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::ZERO,
                original_len: frame.len() as u32,
                data: Cow::Owned(frame.clone()),
                options: vec![],
            })
            .unwrap();
        }
    }
    // A record's length: pcap's 16-byte header, or pcapng's 28-byte block header, data padded to
    // 4 bytes and the 4-byte trailing length.
    let (pcap_record, pcapng_record) = (16 + frame.len(), 32 + frame.len().next_multiple_of(4));
    for (whole, record) in [(&pcap, pcap_record), (&pcapng, pcapng_record)] {
        let bytes = std::fs::read(&**whole).unwrap();
        let r = analyze_file(whole, &group(2, 1)).unwrap();
        assert_eq!((r.frames, r.cut_short), (3, false), "{}", whole.display());
        // Cut in the last record's header, in its data, and one byte short of its end.
        for cut in [bytes.len() - record + 4, bytes.len() - record / 2, bytes.len() - 1] {
            let path = tmp(&format!("cut-{cut}-{}", whole.file_name().unwrap().to_str().unwrap()));
            std::fs::write(&*path, &bytes[..cut]).unwrap();
            let r = analyze_file(&path, &group(2, 1)).unwrap_or_else(|e| panic!("cut at {cut}: {e:#}"));
            assert_eq!((r.frames, r.roce_packets, r.cut_short), (2, 2, true), "{} cut at {cut}", whole.display());
            let text = fabric_user::analyze::report::render(&r, false);
            assert!(text.contains("ends inside a record, after 2 whole packets"), "{text}");
        }
    }
    // Corrupt, not cut: a record whose microseconds field holds two seconds, and one claiming
    // 4 GiB of data in the middle of the file (which reads as running past its end).
    let second = 24 + pcap_record;
    for (field, value) in [(4, 2_000_000u32), (8, u32::MAX)] {
        let mut bytes = std::fs::read(&*pcap).unwrap();
        bytes[second + field..second + field + 4].copy_from_slice(&value.to_le_bytes());
        let path = tmp("corrupt.pcap");
        std::fs::write(&*path, &bytes).unwrap();
        let e = format!("{:#}", analyze_file(&path, &group(2, 1)).unwrap_err());
        assert!(e.contains("corrupt record 2 (after 1 whole ones)"), "{e}");
    }
    // A pcapng block claiming more bytes than a record may have, in the middle of the file.
    let mut bytes = std::fs::read(&*pcapng).unwrap();
    let second_packet = bytes.len() - 2 * pcapng_record;
    bytes[second_packet + 4..second_packet + 8].copy_from_slice(&0x7FFF_FFF0u32.to_le_bytes());
    let path = tmp("corrupt.pcapng");
    std::fs::write(&*path, &bytes).unwrap();
    let e = format!("{:#}", analyze_file(&path, &group(2, 1)).unwrap_err());
    assert!(e.contains("(after 1 whole packets)"), "{e}");
    // Captures of hosts of both byte orders, concatenated: a big-endian section header after
    // the little-endian section, cut inside its byte-order magic and after it. Its length is
    // read in its own byte order (in the first section's, 28 reads as 469 MB: corrupt).
    let mut bytes = std::fs::read(&*pcapng).unwrap();
    let big_endian_section = [
        &[0x0A, 0x0D, 0x0D, 0x0A][..],
        &28u32.to_be_bytes(),
        &0x1A2B_3C4Du32.to_be_bytes(),
        &[0, 1, 0, 0],
        &[0xFF; 8],
        &28u32.to_be_bytes(),
    ]
    .concat();
    bytes.extend_from_slice(&big_endian_section);
    for cut in [10, 20] {
        let path = tmp(&format!("mixed-{cut}.pcapng"));
        std::fs::write(&*path, &bytes[..bytes.len() - 28 + cut]).unwrap();
        let r = analyze_file(&path, &group(2, 1)).unwrap_or_else(|e| panic!("cut at {cut}: {e:#}"));
        assert_eq!((r.frames, r.cut_short), (3, true), "mixed byte orders, cut {cut} bytes into the header");
    }
}

#[test]
fn json_report_and_chart() {
    let dir = tmp("out");
    let args = AnalyzeArgs {
        capture: common::rxe_capture(),
        uplinks: Some(4),
        seed: Some(0x1234),
        hash: vec!["eecmp".into(), "five-tuple".into()],
        pin_shift: 1,
        switch: None,
        topology: None,
        per_qp: true,
        json: Some(dir.join("a.json")),
        chart: Some(dir.join("a.svg")),
    };
    fabric_user::analyze::cli::main(&args).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("a.json")).unwrap()).unwrap();
    assert_eq!(v["schema"], "fabric.analyze/1");
    assert_eq!(v["group"]["seed"], 0x1234);
    assert_eq!(v["modes"].as_array().unwrap().len(), 2);
    assert_eq!(v["modes"][0]["mode"], "eecmp");
    assert_eq!(v["qps"][0]["members"].as_object().unwrap().len(), 2);
    assert!(std::fs::read_to_string(dir.join("a.svg")).unwrap().contains("<svg"));
    assert_eq!(&std::fs::read(dir.join("a.png")).unwrap()[1..4], b"PNG");
    // Named by its PNG, the chart is still written both ways (the PNG once wrote over the SVG).
    fabric_user::analyze::cli::main(&AnalyzeArgs { chart: Some(dir.join("b.png")), json: None, ..args }).unwrap();
    assert!(std::fs::read_to_string(dir.join("b.svg")).unwrap().contains("<svg"));
    assert_eq!(&std::fs::read(dir.join("b.png")).unwrap()[1..4], b"PNG");
    let text = fabric_user::analyze::report::render(&analyze_file(&common::rxe_capture(), &group(4, 0)).unwrap(), true);
    assert!(text.contains("RoCEv2: 110 packets") && text.contains("skipped: none"), "{text}");
}

/// A capture without RoCE traffic has no balance to report: not a perfect one (1.0), nothing.
#[test]
fn a_capture_without_roce_reports_no_balance() {
    let path = tmp("empty.pcap");
    write_pcap(&path, DataLink::ETHERNET, &[full(eth(0x0806, None, &[0u8; 46]))]);
    let r = analyze_file(&path, &group(4, 0)).unwrap();
    for m in &r.modes {
        assert!(m.max_over_mean.is_nan() && m.jain.is_nan(), "{}: {} {}", m.mode, m.max_over_mean, m.jain);
    }
    let text = fabric_user::analyze::report::render(&r, false);
    let row = text.lines().find(|l| l.starts_with("eecmp")).unwrap();
    assert!(row.contains(" -      -  ") && !row.contains("1.000"), "{row}");
    // With RoCE bytes, the figures are there.
    let r = analyze_file(&common::rxe_capture(), &group(4, 0)).unwrap();
    assert!(r.modes.iter().all(|m| m.max_over_mean >= 1.0 && m.jain > 0.0));
}

/// Captures, on every host of `rtsw`'s rack, the RoCE frames it sends out of the rack: the
/// frames `rtsw` sends up its uplinks. (An uplink itself cannot be tapped: the switches move
/// frames between veths with XDP redirects, which no packet socket sees.)
fn capture_rack_uplink_traffic(state: &State, rtsw: NodeId, tag: &str, dir: &Path) -> Vec<common::Tcpdump> {
    let plan = &state.plan;
    let rack: Vec<NodeId> = plan.hosts().filter(|&h| plan.rtsw_of(h) == rtsw).collect();
    let rack_dsts: Vec<String> = rack.iter().map(|&h| format!("dst host {}", plan.host_ipv4(h))).collect();
    rack.iter()
        .map(|&h| {
            let filter =
                format!("udp dst port 4791 and src host {} and not ({})", plan.host_ipv4(h), rack_dsts.join(" or "));
            let path = dir.join(format!("testbed-{tag}-{}.pcap", plan.nodes[h].name));
            // A snap length of 128 keeps every header up to the RETH; analyze weighs each frame
            // by its original length.
            common::Tcpdump::start(&plan.netns(h), &plan.nodes[h].ports[0].ifname, &filter, 128, path)
        })
        .collect()
}

/// What the XDP member counters of `rtsw`'s uplink group say now: (packets, bytes) per member.
fn uplink_member_counters(state: &State, fabric: &SimFabric, rtsw: NodeId, group: u32) -> Vec<(u64, u64)> {
    let mut dp = state.dataplane(rtsw).unwrap();
    let slot = state.group_slot(rtsw, group);
    (0..fabric.members(rtsw, group).len() as u32)
        .map(|m| dp.member_counters(slot, m).map(|c| (c.packets, c.bytes)).unwrap())
        .collect()
}

/// The QPs that leave `rtsw`'s rack, data and ACKs, as `fabric sim` builds them.
fn sim_qps_leaving(fabric: &SimFabric, o: &SimOptions, rtsw: NodeId) -> BTreeSet<(IpAddr, IpAddr, u16, u32)> {
    let plan = &fabric.plan;
    let (hosts, steps) = steps_of(fabric, o).unwrap();
    let mut qps = BTreeSet::new();
    for (step, _) in &steps {
        let t: Vec<HostTransfer> =
            step.iter().map(|t| HostTransfer { src: hosts[t.src], dst: hosts[t.dst], bytes: t.bytes }).collect();
        for f in step_flows(plan, &t, &o.endpoint) {
            if plan.rtsw_of(f.src) == rtsw && plan.rtsw_of(f.dst) != rtsw {
                qps.insert((f.src_ip.into(), f.dst_ip.into(), f.sport, f.dest_qp));
            }
        }
    }
    qps
}

/// One alltoall of our endpoints, as `fabric sim` and `fabric run` take it.
fn live_options(hash: HashMode, qps: u32) -> (SimOptions, RunOptions) {
    // ACK every packet, so that the ACKs, like the data, are fixed by the job alone.
    let endpoint = EndpointOptions { qps, ack_every: 1, ..Default::default() };
    let sim = SimOptions {
        collective: Collective::Alltoall,
        ranks: None,
        message_bytes: 48 * 1024,
        placement: Placement::Contiguous,
        seed: 1,
        hash,
        // The switches keep the topology's seeds, which is what `--switch` reads.
        hash_seed: None,
        endpoint: endpoint.clone(),
    };
    let run = RunOptions {
        collective: sim.collective,
        ranks: None,
        message_bytes: sim.message_bytes,
        iterations: 1,
        placement: sim.placement.clone(),
        hash: Some(hash),
        hash_seed: None,
        seed: sim.seed,
        endpoint,
    };
    (sim, run)
}

/// `fabric analyze --switch SWITCH --hash MODE` over several captures at once: the group it
/// derived, and its report.
fn analyze_as_switch(paths: &[PathBuf], hash: HashMode, switch: &str) -> (Group, Report) {
    let args = AnalyzeArgs {
        capture: paths[0].clone(),
        uplinks: None,
        seed: None,
        hash: vec![hash.as_str().into()],
        pin_shift: 1,
        switch: Some(switch.into()),
        topology: None,
        per_qp: false,
        json: None,
        chart: None,
    };
    let g = group_of(&args).unwrap();
    let mut a = Analyzer::new();
    for p in paths {
        fabric_user::analyze::read_capture(p, &mut a).unwrap();
    }
    let r = a.report("testbed", "pcap", &g);
    (g, r)
}

/// Every UDP source port the run reports for a flow out of `rack`'s hosts is a captured flow.
fn assert_run_flows_captured(plan: &Plan, result: &RunResult, r: &Report, rack: &str) {
    let ip = |name: &str| IpAddr::from(plan.host_ipv4(plan.node_by_name(name).unwrap()));
    for f in result.flows.iter().filter(|f| f.src.starts_with(rack) && !f.dst.starts_with(rack)) {
        for &sport in &f.udp_sports {
            let flow = (ip(&f.src), ip(&f.dst), sport);
            assert!(r.flows.iter().any(|c| (c.src, c.dst, c.src_port) == flow), "{f:?} was not captured");
        }
    }
}

/// Our endpoints' traffic, captured on a live testbed as it leaves an RTSW's rack and analysed
/// with that RTSW's seed and group size (`--switch`), shows the split the RTSW made: every
/// member's packets and bytes equal the switch's member counters, every uplink's bytes what the
/// run reports, the QPs those the job opened; and `fabric sim` predicts the same split.
#[test]
fn a_live_capture_agrees_with_the_switch_counters_the_run_and_fabric_sim() {
    let (_guard, state) = common::up(None, &common::unique_prefix('a', 0));
    let plan = &state.plan;
    let rtsw = plan.node_by_name("z0r0").unwrap();
    let fabric = SimFabric::from_controller(plan, &state.down_links);
    let up = fabric.group_count(rtsw) as u32 - 1;
    let members = fabric.members(rtsw, up).to_vec();
    for (hash, qps) in [(HashMode::FiveTuple, 1), (HashMode::Eecmp, 4), (HashMode::Pin, 2)] {
        let (sim, run_opts) = live_options(hash, qps);
        // A run that resent because a host fell behind is run again, captures and all.
        let (result, (before, after, paths, _captures)) = common::until_no_host_drop_resends(hash.as_str(), || {
            let before = uplink_member_counters(&state, &fabric, rtsw, up);
            let captures = tempfile::Builder::new().prefix("fabric-analyze-").tempdir().unwrap();
            let tcpdumps = capture_rack_uplink_traffic(&state, rtsw, hash.as_str(), captures.path());
            let result = run(&state, &run_opts, true).unwrap_or_else(|e| panic!("{hash:?}: {e:#}"));
            let paths: Vec<PathBuf> = tcpdumps.into_iter().map(common::Tcpdump::stop).collect();
            (result, (before, uplink_member_counters(&state, &fabric, rtsw, up), paths, captures))
        });
        assert_eq!(result.bytes_delivered, result.bytes_needed, "{hash:?}");
        let retransmitted: u64 = result.flows.iter().map(|f| f.retransmitted).sum();
        assert_eq!(retransmitted, 0, "{hash:?}: the run retransmitted, so no exact prediction is possible");

        let (g, r) = analyze_as_switch(&paths, hash, "z0r0");
        assert_eq!((g.seed, g.uplinks), (plan.nodes[rtsw].seed, members.len() as u32));
        assert!(r.skipped.is_empty() && r.roce_packets > 0, "{hash:?}: {:?}", r.skipped);
        let analyzed: Vec<(u64, u64)> =
            r.modes[0].uplink_packets.iter().copied().zip(r.modes[0].uplink_bytes.iter().copied()).collect();
        // The switch's own counters.
        let counted: Vec<(u64, u64)> = before.iter().zip(&after).map(|(b, a)| (a.0 - b.0, a.1 - b.1)).collect();
        assert_eq!(analyzed, counted, "{hash:?}: (packets, bytes) per member: analyze vs the XDP member counters");
        // The run's report: bytes per uplink port.
        let reported = &result.uplinks.iter().find(|u| u.rtsw == "z0r0").unwrap().tx_bytes;
        let by_port: Vec<(String, u64)> =
            members.iter().zip(&analyzed).map(|(&p, &(_, b))| (plan.nodes[rtsw].ports[p].ifname.clone(), b)).collect();
        assert_eq!(&by_port, reported, "{hash:?}: bytes per uplink: analyze vs the run");
        // The QPs seen are those the job opened out of the rack (data and ACKs).
        let seen: BTreeSet<_> = r.qps.iter().map(|q| (q.src, q.dst, q.src_port, q.dest_qp)).collect();
        assert_eq!(seen, sim_qps_leaving(&fabric, &sim, rtsw), "{hash:?}: QPs captured vs the job's");
        assert_run_flows_captured(plan, &result, &r, "z0r0h");
        // And `fabric sim` predicts the same split from the options alone.
        let load = predict_member_load(&fabric, &sim, 1).unwrap();
        let predicted: Vec<(u64, u64)> = (0..members.len() as u32)
            .map(|m| fabric.slot(rtsw, up, m))
            .map(|s| (load.packets[s], load.bytes[s]))
            .collect();
        assert_eq!(analyzed, predicted, "{hash:?}: (packets, bytes) per member: analyze vs fabric sim");
        eprintln!("{hash:?}: {} RoCE frames captured, per member {analyzed:?}", r.roce_packets);
    }
}
