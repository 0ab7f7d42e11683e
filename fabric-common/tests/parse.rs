//! `parse::parse_packet` against frames built with etherparse (and patched by hand where a test
//! needs a field etherparse will not produce).
mod common;

use common::*;
use etherparse::{ArpHardwareId, ArpOperation, ArpPacket, EtherType, PacketBuilder};
use fabric_common::counters::DropReason;
use fabric_common::parse::{Bth, IpHeader, ParseError, ParsedPacket, parse_packet};

/// Frame layout of the standard test frames (see `common`): 14-byte Ethernet, 20-byte IPv4.
const L3: usize = 14;
const L4_V4: usize = L3 + 20;
const L4_V6: usize = L3 + 40;

fn parse(frame: &[u8]) -> Result<ParsedPacket, ParseError> {
    parse_packet(frame)
}

fn malformed(reason: DropReason) -> Result<ParsedPacket, ParseError> {
    Err(ParseError::Malformed(reason))
}

fn expected_sample_bth() -> Bth {
    Bth { opcode: 0x0A, solicited: true, ack_request: true, pkey: 0x8001, dest_qp: 0xABCDEF, psn: 0x123456 }
}

// ---------------------------------------------------------------------------------------------
// Well-formed packets
// ---------------------------------------------------------------------------------------------

#[test]
fn ipv4_roce_all_fields() {
    let mut f = roce_v4();
    // A TOS value so that the TOS byte is distinguishable from zero.
    f[L3 + 1] = 0xB8;
    fix_ipv4_checksum(&mut f, L3);
    let p = parse(&f).expect("valid RoCEv2 IPv4 frame");
    assert_eq!(p.dst_mac, DST_MAC);
    assert_eq!(p.vlan_tci, None);
    assert_eq!(p.priority(), 0, "untagged frames are priority 0");
    assert_eq!(p.l3_offset, 14);
    assert_eq!(p.ip, IpHeader::V4 { src: V4_SRC, dst: V4_DST, ttl: 64, tos: 0xB8, header_len: 20 });
    assert_eq!(p.protocol, 17);
    assert_eq!(p.ports, Some((0xC000, 4791)));
    assert_eq!(p.bth, Some(expected_sample_bth()));
    assert!(p.is_roce());
}

#[test]
fn bth_flags_are_single_bits() {
    // Every other bit of the flags byte (MigReq, pad count, TVer) and of the AckReq byte
    // (reserved) set, the two flags themselves clear: they must read as false, and the 24-bit
    // fields must not pick up the neighbouring bytes.
    let mut bth = bth_bytes(0x11, false, false, 0xFFFF, 0x000001, 0xFFFFFF);
    bth[1] |= 0x7F;
    bth[4] = 0xFF; // FECN/BECN/reserved, just before dest_qp
    bth[8] |= 0x7F; // reserved, just before the PSN
    let f = udp_v4(1, ROCE_PORT, 64, &roce_payload(&bth, 0));
    let b = parse(&f).unwrap().bth.unwrap();
    assert_eq!(b, Bth { opcode: 0x11, solicited: false, ack_request: false, pkey: 0xFFFF, dest_qp: 1, psn: 0xFFFFFF });

    // And the flags alone.
    let bth = bth_bytes(0x81, true, false, 0, 0, 0);
    let b = parse(&udp_v4(1, ROCE_PORT, 64, &roce_payload(&bth, 0))).unwrap().bth.unwrap();
    assert!(b.solicited && !b.ack_request);
    assert_eq!(b.opcode, 0x81);
    let bth = bth_bytes(0x81, false, true, 0, 0, 0);
    let b = parse(&udp_v4(1, ROCE_PORT, 64, &roce_payload(&bth, 0))).unwrap().bth.unwrap();
    assert!(!b.solicited && b.ack_request);
}

#[test]
fn ipv6_roce_all_fields() {
    let mut f = roce_v6();
    // Traffic class 0xB8 spans the low nibble of byte 0 and the high nibble of byte 1; the
    // flow label (low nibble of byte 1 onwards) is set too, and must not leak into it.
    f[L3] = 0x60 | 0x0B;
    f[L3 + 1] = 0x80 | 0x0F;
    f[L3 + 2] = 0xFF;
    f[L3 + 3] = 0xFF;
    let p = parse(&f).expect("valid RoCEv2 IPv6 frame");
    assert_eq!(p.dst_mac, DST_MAC);
    assert_eq!(p.vlan_tci, None);
    assert_eq!(p.l3_offset, 14);
    assert_eq!(p.ip, IpHeader::V6 { src: V6_SRC, dst: V6_DST, hop_limit: 64, traffic_class: 0xB8 });
    assert_eq!(p.protocol, 17);
    assert_eq!(p.ports, Some((0xC000, 4791)));
    assert_eq!(p.bth, Some(expected_sample_bth()));
}

#[test]
fn vlan_tag_tci_and_priority() {
    for pcp in 0u16..=7 {
        for dei in [0u16, 1] {
            let vid = 0x123;
            let mut f = roce_vlan();
            // etherparse writes PCP 0; set PCP and DEI in the TCI (bytes 14..16) by hand.
            let tci = (pcp << 13) | (dei << 12) | vid;
            set_u16(&mut f, 14, tci);
            let p = parse(&f).unwrap_or_else(|e| panic!("pcp {pcp}: {e:?}"));
            assert_eq!(p.vlan_tci, Some(tci));
            assert_eq!(p.priority(), pcp as u8, "priority is the PCP (tci {tci:#06x})");
            assert_eq!(p.l3_offset, 18);
            assert_eq!(p.ports, Some((0xC000, 4791)));
            assert_eq!(p.bth, Some(expected_sample_bth()));
            assert!(matches!(p.ip, IpHeader::V4 { src: V4_SRC, dst: V4_DST, .. }));
        }
    }
}

#[test]
fn vlan_tag_with_non_ip_inner_type() {
    let mut f = roce_vlan();
    set_u16(&mut f, 16, 0x0806);
    assert_eq!(parse(&f), Err(ParseError::NotIp { ethertype: 0x0806 }));
}

#[test]
fn ipv4_with_options() {
    // IHL 6 (one 4-byte option: NOP NOP NOP EOL) and IHL 15 (40 bytes of NOPs + EOL).
    let mut long = [0x01u8; 40];
    long[39] = 0x00;
    for opts in [&[1u8, 1, 1, 0][..], &long[..]] {
        let f = udp_v4_with_options(opts, 0xC001, ROCE_PORT, &roce_payload(&sample_bth(), 8));
        let ihl = 20 + opts.len();
        assert_eq!((f[L3] & 0x0F) as usize * 4, ihl, "builder must produce IHL {}", ihl / 4);
        assert_eq!(fabric_common::checksum::internet_checksum(&f[L3..L3 + ihl]), 0, "header checksum");
        let p = parse(&f).expect("IPv4 with options");
        assert_eq!(p.ip, IpHeader::V4 { src: V4_SRC, dst: V4_DST, ttl: 64, tos: 0, header_len: ihl as u8 });
        // UDP and BTH are found after the options.
        assert_eq!(p.ports, Some((0xC001, 4791)));
        assert_eq!(p.bth, Some(expected_sample_bth()));
    }
}

#[test]
fn non_roce_udp_has_ports_but_no_bth() {
    let p = parse(&udp_v4(5353, 53, 64, b"0123456789abcdefghij")).unwrap();
    assert_eq!(p.protocol, 17);
    assert_eq!(p.ports, Some((5353, 53)));
    assert_eq!(p.bth, None);
    assert!(!p.is_roce());

    // 4791 as the *source* port is not RoCE: only the destination port counts.
    let p = parse(&udp_v4(ROCE_PORT, 1000, 64, &roce_payload(&sample_bth(), 0))).unwrap();
    assert_eq!(p.ports, Some((ROCE_PORT, 1000)));
    assert_eq!(p.bth, None);

    let p = parse(&udp_v6(5353, 53, 64, b"hello")).unwrap();
    assert_eq!(p.ports, Some((5353, 53)));
    assert_eq!(p.bth, None);
}

#[test]
fn non_udp_protocols_have_no_ports() {
    // TCP to port 4791: ports are only reported for UDP.
    let b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC).ipv4(V4_SRC, V4_DST, 64).tcp(1234, ROCE_PORT, 1, 1000);
    let mut tcp = Vec::new();
    b.write(&mut tcp, &[0u8; 20]).unwrap();
    let p = parse(&tcp).unwrap();
    assert_eq!(p.protocol, 6);
    assert_eq!(p.ports, None);
    assert_eq!(p.bth, None);

    let b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC).ipv4(V4_SRC, V4_DST, 64).icmpv4_echo_request(7, 8);
    let mut icmp = Vec::new();
    b.write(&mut icmp, b"ping").unwrap();
    let p = parse(&icmp).unwrap();
    assert_eq!(p.protocol, 1);
    assert_eq!(p.ports, None);

    let b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC).ipv6(V6_SRC, V6_DST, 64).icmpv6_echo_request(7, 8);
    let mut icmp6 = Vec::new();
    b.write(&mut icmp6, b"ping").unwrap();
    let p = parse(&icmp6).unwrap();
    assert_eq!(p.protocol, 58);
    assert_eq!(p.ports, None);
    assert!(matches!(p.ip, IpHeader::V6 { .. }));
}

#[test]
fn arp_is_not_ip() {
    let arp = ArpPacket::new(
        ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        ArpOperation::REQUEST,
        &SRC_MAC,
        &V4_SRC,
        &[0; 6],
        &V4_DST,
    )
    .unwrap();
    let mut f = Vec::new();
    PacketBuilder::ethernet2(SRC_MAC, [0xFF; 6]).arp(arp).write(&mut f).unwrap();
    assert_eq!(u16::from_be_bytes([f[12], f[13]]), 0x0806, "builder wrote an ARP frame");
    assert_eq!(parse(&f), Err(ParseError::NotIp { ethertype: 0x0806 }));

    // Any other non-IP EtherType is reported as such, e.g. LLDP, with just an Ethernet header.
    let mut lldp = [0u8; 14];
    lldp[12..14].copy_from_slice(&0x88CCu16.to_be_bytes());
    assert_eq!(parse(&lldp), Err(ParseError::NotIp { ethertype: 0x88CC }));
}

#[test]
fn ethernet_padding_is_ignored() {
    // The IP total length, not the frame length, bounds the packet: trailing bytes (Ethernet
    // minimum-size padding, or an FCS left on by a capture) must not change the result.
    for f in [roce_v4(), roce_v6(), roce_vlan(), udp_v4(1, 2, 64, b"x")] {
        let unpadded = parse(&f).unwrap();
        for pad in [1usize, 2, 4, 26, 100] {
            let mut g = f.clone();
            g.extend(std::iter::repeat_n(0xA5, pad));
            assert_eq!(parse(&g), Ok(unpadded), "padding of {pad} bytes");
        }
    }
    // A short UDP frame padded to the 60-byte Ethernet minimum.
    let mut f = udp_v4(1, 2, 64, b"");
    assert_eq!(f.len(), 42);
    f.resize(60, 0);
    assert_eq!(parse(&f).unwrap().ports, Some((1, 2)));
}

// ---------------------------------------------------------------------------------------------
// Truncation: every prefix of a valid frame
// ---------------------------------------------------------------------------------------------

/// Checks `parse_packet` on every prefix `frame[..len]`, `len` in `0..frame.len()`.
///
/// `boundaries` lists (end offset, reason) for each fixed-size header in order: a prefix shorter
/// than an end offset must fail with that header's reason (the first missing header). Once all
/// headers are present, the IP total length (still that of the full packet) exceeds the frame,
/// and parse.rs checks it before looking at UDP, so the reason is `IpLength`.
fn check_every_prefix(name: &str, frame: &[u8], boundaries: &[(usize, DropReason)]) {
    assert!(parse(frame).is_ok(), "{name}: the full frame must parse");
    for len in 0..frame.len() {
        let expected =
            boundaries.iter().find(|(end, _)| len < *end).map(|&(_, reason)| reason).unwrap_or(DropReason::IpLength);
        assert_eq!(parse(&frame[..len]), malformed(expected), "{name} truncated to {len} of {} bytes", frame.len());
    }
}

#[test]
fn truncated_ipv4_roce_at_every_length() {
    use DropReason::*;
    check_every_prefix("IPv4 RoCE", &roce_v4(), &[(14, TruncatedEthernet), (34, TruncatedIpv4)]);
}

#[test]
fn truncated_ipv6_roce_at_every_length() {
    use DropReason::*;
    check_every_prefix("IPv6 RoCE", &roce_v6(), &[(14, TruncatedEthernet), (54, TruncatedIpv6)]);
}

#[test]
fn truncated_vlan_roce_at_every_length() {
    use DropReason::*;
    check_every_prefix(
        "802.1Q RoCE",
        &roce_vlan(),
        &[(14, TruncatedEthernet), (18, TruncatedVlan), (38, TruncatedIpv4)],
    );
}

#[test]
fn truncated_ipv4_options_at_every_length() {
    use DropReason::*;
    // IHL 6: a prefix with the fixed 20 bytes but not the option word is still TruncatedIpv4.
    let f = udp_v4_with_options(&[1, 1, 1, 0], 1, ROCE_PORT, &roce_payload(&sample_bth(), 8));
    check_every_prefix("IPv4+options RoCE", &f, &[(14, TruncatedEthernet), (38, TruncatedIpv4)]);
}

/// Cuts `frame` to `len` and rewrites the IP length to match, so the IP layer is consistent and
/// the missing part is UDP, the BTH, or data the UDP length promises.
fn cut_with_consistent_ip_length(frame: &[u8], l3: usize, len: usize) -> Vec<u8> {
    let mut g = frame[..len].to_vec();
    if g[l3] >> 4 == 4 {
        set_u16(&mut g, l3 + 2, (len - l3) as u16);
        fix_ipv4_checksum(&mut g, l3);
    } else {
        set_u16(&mut g, l3 + 4, (len - l3 - 40) as u16);
    }
    g
}

#[test]
fn truncated_transport_with_consistent_ip_length() {
    // With the IP length matching the cut, the order documented by parse.rs is: UDP header
    // (TruncatedUdp), BTH read for port 4791 (TruncatedBth), then the UDP length (that of the
    // full packet) is larger than the IP payload (BadUdpLength). Never Ok.
    for (name, frame, l3, l4) in
        [("IPv4", roce_v4(), L3, L4_V4), ("IPv6", roce_v6(), L3, L4_V6), ("802.1Q", roce_vlan(), 18, 18 + 20)]
    {
        for len in l4..frame.len() {
            let g = cut_with_consistent_ip_length(&frame, l3, len);
            let expected = if len < l4 + 8 {
                DropReason::TruncatedUdp
            } else if len < l4 + 8 + 12 {
                DropReason::TruncatedBth
            } else {
                DropReason::BadUdpLength
            };
            assert_eq!(parse(&g), malformed(expected), "{name} cut to {len} with IP length fixed");
        }
        // The uncut frame is fine through the same helper.
        assert!(parse(&cut_with_consistent_ip_length(&frame, l3, frame.len())).is_ok());
    }
}

// ---------------------------------------------------------------------------------------------
// Malformed headers
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_ipv4_version() {
    for version in (0u8..16).filter(|&v| v != 4) {
        let mut f = roce_v4();
        f[L3] = (version << 4) | 5;
        fix_ipv4_checksum(&mut f, L3);
        assert_eq!(parse(&f), malformed(DropReason::BadIpv4Header), "version {version}");
    }
}

#[test]
fn ipv4_ihl_below_five() {
    for ihl in 0u8..5 {
        let mut f = roce_v4();
        f[L3] = 0x40 | ihl;
        assert_eq!(parse(&f), malformed(DropReason::BadIpv4Header), "IHL {ihl}");
    }
}

#[test]
fn bad_ipv6_version() {
    let mut f = roce_v6();
    f[L3] = 0x40;
    assert_eq!(parse(&f), malformed(DropReason::BadIpv6Header));
}

#[test]
fn ipv4_total_length_inconsistent() {
    let f = roce_v4();
    // Shorter than the header itself.
    for total in [0u16, 1, 19] {
        let mut g = f.clone();
        set_u16(&mut g, L3 + 2, total);
        fix_ipv4_checksum(&mut g, L3);
        assert_eq!(parse(&g), malformed(DropReason::IpLength), "total length {total}");
    }
    // Longer than the frame by one byte.
    let mut g = f.clone();
    set_u16(&mut g, L3 + 2, (f.len() - L3 + 1) as u16);
    fix_ipv4_checksum(&mut g, L3);
    assert_eq!(parse(&g), malformed(DropReason::IpLength));
    // IPv6 payload length one byte too long.
    let mut g = roce_v6();
    let payload = (g.len() - L4_V6) as u16;
    set_u16(&mut g, L3 + 4, payload + 1);
    assert_eq!(parse(&g), malformed(DropReason::IpLength));
}

#[test]
fn udp_length_checks() {
    for (name, frame, l4) in [("IPv4", roce_v4(), L4_V4), ("IPv6", roce_v6(), L4_V6)] {
        let ip_payload = frame.len() - l4;
        let with_udp_len = |v: u16| {
            let mut g = frame.clone();
            set_u16(&mut g, l4 + 4, v);
            g
        };
        // Below the UDP header size.
        for v in 0u16..8 {
            assert_eq!(parse(&with_udp_len(v)), malformed(DropReason::BadUdpLength), "{name} UDP length {v}");
        }
        // Larger than the IP payload.
        for v in [ip_payload as u16 + 1, 0xFFFF] {
            assert_eq!(parse(&with_udp_len(v)), malformed(DropReason::BadUdpLength), "{name} UDP length {v}");
        }
        // Exactly the IP payload: fine.
        assert!(parse(&with_udp_len(ip_payload as u16)).is_ok());
        // Room for the UDP header but not the whole BTH: the BTH is in the frame, yet the UDP
        // datagram does not cover it.
        for v in 8u16..20 {
            assert_eq!(parse(&with_udp_len(v)), malformed(DropReason::TruncatedBth), "{name} UDP length {v}");
        }
        assert!(parse(&with_udp_len(20)).is_ok(), "{name}: a bare BTH is a complete RoCE header");
    }

    // Non-RoCE: a short UDP length is only a UDP problem, no BTH is expected.
    let mut g = udp_v4(1, 53, 64, b"abcdef");
    set_u16(&mut g, L4_V4 + 4, 7);
    assert_eq!(parse(&g), malformed(DropReason::BadUdpLength));
    set_u16(&mut g, L4_V4 + 4, 8);
    assert!(parse(&g).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Fragments
// ---------------------------------------------------------------------------------------------

fn set_flags_frag(frame: &mut [u8], value: u16) {
    set_u16(frame, L3 + 6, value);
    fix_ipv4_checksum(frame, L3);
}

#[test]
fn ipv4_later_fragment_has_no_ports() {
    // Fragment offsets 1 (8 bytes), 185, 0x1000 (only the top offset bit), and the maximum;
    // with and without More Fragments.
    for offset in [1u16, 185, 0x1000, 0x1FFF] {
        for mf in [0u16, 0x2000] {
            let mut f = roce_v4();
            set_flags_frag(&mut f, mf | offset);
            let p = parse(&f).unwrap_or_else(|e| panic!("offset {offset}: {e:?}"));
            assert_eq!(p.protocol, 17, "still UDP by protocol");
            assert_eq!(p.ports, None, "a later fragment carries no UDP header (offset {offset}, mf {mf:#x})");
            assert_eq!(p.bth, None);
        }
    }
    // A later fragment too short to hold a UDP header, and one whose "UDP length" would be
    // invalid: the data is not a UDP header, so neither is an error.
    let mut f = udp_v4(1, 2, 64, b"");
    set_u16(&mut f, L3 + 2, 24);
    f.truncate(L3 + 24);
    set_flags_frag(&mut f, 10);
    assert_eq!(parse(&f).unwrap().ports, None);
    let mut f = udp_v4(1, 2, 64, b"abcd");
    set_u16(&mut f, L4_V4 + 4, 0);
    set_flags_frag(&mut f, 10);
    assert_eq!(parse(&f).unwrap().ports, None);
}

#[test]
fn ipv4_dont_fragment_is_not_a_fragment() {
    let mut f = roce_v4();
    set_flags_frag(&mut f, 0x4000);
    assert_eq!(parse(&f).unwrap().bth, Some(expected_sample_bth()));
}

/// The first fragment of a fragmented UDP datagram (MF set, offset 0) carries the UDP header,
/// whose length covers the *whole datagram*, i.e. more than this fragment's IP payload: it must
/// still parse, with its ports (a regression test: it used to be dropped as BadUdpLength).
#[test]
fn ipv4_first_fragment_keeps_ports() {
    // A 108-byte UDP datagram (8 + 100) of which this first fragment carries 48 bytes.
    let mut f = udp_v4(5000, 53, 64, &[0x55; 100]);
    assert_eq!(u16::from_be_bytes([f[L4_V4 + 4], f[L4_V4 + 5]]), 108);
    let first_fragment_ip_len = 20 + 48;
    f.truncate(L3 + first_fragment_ip_len);
    set_u16(&mut f, L3 + 2, first_fragment_ip_len as u16);
    set_flags_frag(&mut f, 0x2000); // MF, offset 0
    let p = parse(&f);
    assert_eq!(
        p.map(|p| p.ports),
        Ok(Some((5000, 53))),
        "first fragment of a UDP datagram must be parsed with its ports, not dropped"
    );
}
