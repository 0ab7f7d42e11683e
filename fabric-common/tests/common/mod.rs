//! Helpers shared by the integration tests: frame builders (on top of etherparse), a
//! deterministic pseudo-random generator, and access to the shared rxe capture.
//!
//! Each test binary uses a different subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use etherparse::{IpNumber, Ipv4Header, PacketBuilder};
use fabric_common::checksum::internet_checksum;
use fabric_common::parse::{Bth, IpHeader, ParsedPacket};

pub const SRC_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
pub const DST_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];
pub const ROCE_PORT: u16 = 4791;

/// SplitMix64: a tiny, well-mixed, deterministic generator, so that every run sees the same
/// "random" flows and a failure is reproducible.
pub struct Rng(fabric_common::rng::SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(fabric_common::rng::SplitMix64::new(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    pub fn next_u16(&mut self) -> u16 {
        (self.next_u64() >> 48) as u16
    }

    pub fn next_u8(&mut self) -> u8 {
        (self.next_u64() >> 56) as u8
    }

    /// Uniform in `0..n` (n small: modulo bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next_u8();
        }
    }
}

/// The 12 BTH bytes for the given fields (IBTA vol. 1, 9.2). Transport version 0, pad 0.
pub fn bth_bytes(opcode: u8, solicited: bool, ack_request: bool, pkey: u16, dest_qp: u32, psn: u32) -> [u8; 12] {
    let q = dest_qp.to_be_bytes();
    let p = psn.to_be_bytes();
    let k = pkey.to_be_bytes();
    [
        opcode,
        if solicited { 0x80 } else { 0x00 },
        k[0],
        k[1],
        0x00, // FECN/BECN/reserved
        q[1],
        q[2],
        q[3],
        if ack_request { 0x80 } else { 0x00 },
        p[1],
        p[2],
        p[3],
    ]
}

/// A RoCEv2 UDP payload: BTH, `payload_len` bytes of pattern, then a (dummy) 4-byte ICRC.
pub fn roce_payload(bth: &[u8; 12], payload_len: usize) -> Vec<u8> {
    let mut v = bth.to_vec();
    v.extend((0..payload_len).map(|i| (i * 7 + 3) as u8));
    v.extend_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]);
    v
}

/// A BTH with distinctive values in every field, to catch swapped offsets.
pub fn sample_bth() -> [u8; 12] {
    bth_bytes(0x0A, true, true, 0x8001, 0xABCDEF, 0x123456)
}

pub const V4_SRC: [u8; 4] = [10, 1, 2, 3];
pub const V4_DST: [u8; 4] = [10, 4, 5, 6];
pub const V6_SRC: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x11];
pub const V6_DST: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0x22];

/// Ethernet + IPv4 + UDP(sport -> dport) + `udp_payload`.
pub fn udp_v4(sport: u16, dport: u16, ttl: u8, udp_payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC).ipv4(V4_SRC, V4_DST, ttl).udp(sport, dport);
    let mut out = Vec::with_capacity(b.size(udp_payload.len()));
    b.write(&mut out, udp_payload).unwrap();
    out
}

/// Ethernet + IPv6 + UDP(sport -> dport) + `udp_payload`.
pub fn udp_v6(sport: u16, dport: u16, hop_limit: u8, udp_payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC).ipv6(V6_SRC, V6_DST, hop_limit).udp(sport, dport);
    let mut out = Vec::with_capacity(b.size(udp_payload.len()));
    b.write(&mut out, udp_payload).unwrap();
    out
}

/// Ethernet + 802.1Q(vid, PCP 0) + IPv4 + UDP + `udp_payload`. Callers patch the PCP bits.
pub fn udp_v4_vlan(vid: u16, sport: u16, dport: u16, udp_payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
        .single_vlan(etherparse::VlanId::try_new(vid).unwrap())
        .ipv4(V4_SRC, V4_DST, 64)
        .udp(sport, dport);
    let mut out = Vec::with_capacity(b.size(udp_payload.len()));
    b.write(&mut out, udp_payload).unwrap();
    out
}

/// Ethernet + IPv4 with the given raw options (length a multiple of 4, up to 40) + UDP.
/// etherparse sets IHL, total length and the header checksum.
pub fn udp_v4_with_options(options: &[u8], sport: u16, dport: u16, udp_payload: &[u8]) -> Vec<u8> {
    let mut ip = Ipv4Header::new(0, 64, IpNumber::UDP, V4_SRC, V4_DST).unwrap();
    ip.options = options.try_into().expect("options must be a multiple of 4 bytes, at most 40");
    let b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
        .ip(etherparse::IpHeaders::Ipv4(ip, Default::default()))
        .udp(sport, dport);
    let mut out = Vec::with_capacity(b.size(udp_payload.len()));
    b.write(&mut out, udp_payload).unwrap();
    out
}

/// A complete RoCEv2 IPv4 frame carrying [`sample_bth`] and 32 payload bytes.
pub fn roce_v4() -> Vec<u8> {
    udp_v4(0xC000, ROCE_PORT, 64, &roce_payload(&sample_bth(), 32))
}

pub fn roce_v6() -> Vec<u8> {
    udp_v6(0xC000, ROCE_PORT, 64, &roce_payload(&sample_bth(), 32))
}

pub fn roce_vlan() -> Vec<u8> {
    udp_v4_vlan(100, 0xC000, ROCE_PORT, &roce_payload(&sample_bth(), 32))
}

/// Recomputes the IPv4 header checksum in place (header at `l3`, length from IHL).
pub fn fix_ipv4_checksum(frame: &mut [u8], l3: usize) {
    let ihl = ((frame[l3] & 0x0F) as usize) * 4;
    frame[l3 + 10] = 0;
    frame[l3 + 11] = 0;
    let ck = internet_checksum(&frame[l3..l3 + ihl]);
    frame[l3 + 10..l3 + 12].copy_from_slice(&ck.to_be_bytes());
}

pub fn set_u16(frame: &mut [u8], at: usize, v: u16) {
    frame[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// A parsed IPv4 packet built field by field, for the hash and forwarding tests (which do not
/// need bytes).
pub fn pkt_v4(src: [u8; 4], dst: [u8; 4], ports: Option<(u16, u16)>, dest_qp: Option<u32>) -> ParsedPacket {
    ParsedPacket {
        dst_mac: DST_MAC,
        vlan_tci: None,
        l3_offset: 14,
        ip: IpHeader::V4 { src, dst, ttl: 64, tos: 0, header_len: 20 },
        protocol: 17,
        ports,
        bth: dest_qp.map(|qp| Bth {
            opcode: 0x04,
            solicited: false,
            ack_request: false,
            pkey: 0xFFFF,
            dest_qp: qp,
            psn: 0,
        }),
    }
}

/// A RoCEv2 packet (UDP to 4791 with a BTH for `dest_qp`).
pub fn roce_pkt(src: u32, dst: u32, sport: u16, dest_qp: u32) -> ParsedPacket {
    pkt_v4(src.to_be_bytes(), dst.to_be_bytes(), Some((sport, ROCE_PORT)), Some(dest_qp))
}

/// The rxe capture: fabric-user/tests/data/rxe-rc-mixed.pcap (so that a clone
/// anywhere runs these tests).
pub const CAPTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fabric-user/tests/data/rxe-rc-mixed.pcap");

/// Every frame of the shared rxe capture. Panics (never skips) when the file is missing.
pub fn capture_frames() -> Vec<Vec<u8>> {
    let file = std::fs::File::open(CAPTURE)
        .unwrap_or_else(|e| panic!("the rxe capture {CAPTURE} is required by this test and could not be opened: {e}"));
    let mut reader = pcap_file::pcap::PcapReader::new(file).expect("capture is not a pcap file");
    assert_eq!(reader.header().datalink, pcap_file::DataLink::ETHERNET, "capture must be Ethernet-framed");
    let mut frames = Vec::new();
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.expect("corrupt pcap record");
        assert_eq!(pkt.data.len(), pkt.orig_len as usize, "frame {} was cut by the snap length", frames.len() + 1);
        frames.push(pkt.data.into_owned());
    }
    assert!(!frames.is_empty(), "capture {CAPTURE} holds no frames");
    frames
}
