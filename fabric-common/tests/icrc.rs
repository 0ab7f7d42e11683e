//! The RoCEv2 ICRC against real frames captured from Linux rxe (soft-RoCE), whose ICRC the
//! kernel computed, and against an independent reference of the IBTA masking rules.
mod common;

use common::*;
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use fabric_common::icrc::{icrc, verify};

/// Checks that `frame` is Ethernet (untagged) + IPv4 without options + UDP to 4791, exactly as
/// long as the IP total length says (no padding).
fn check_layout(i: usize, frame: &[u8]) {
    let s = SlicedPacket::from_ethernet(frame).unwrap_or_else(|e| panic!("frame {}: {e}", i + 1));
    assert!(s.link_exts.is_empty(), "frame {}: expected no VLAN tag", i + 1);
    let Some(NetSlice::Ipv4(ip)) = &s.net else { panic!("frame {}: expected IPv4", i + 1) };
    assert_eq!(ip.header().ihl(), 5, "frame {}: expected no IPv4 options", i + 1);
    assert_eq!(ip.header().total_len() as usize + 14, frame.len(), "frame {}: padded frame", i + 1);
    let Some(TransportSlice::Udp(udp)) = &s.transport else { panic!("frame {}: expected UDP", i + 1) };
    assert_eq!(udp.destination_port(), ROCE_PORT, "frame {}", i + 1);
}

/// Offsets, from the IP header, of the bytes the ICRC masks in an IPv4 RoCE packet without
/// options (IBTA annex A17.3.3): TOS, TTL, header checksum, UDP checksum, BTH byte 4
/// (FECN, BECN, reserved).
const V4_MASKED: [usize; 7] = [1, 8, 10, 11, 20 + 6, 20 + 7, 28 + 4];

/// Bitwise standard CRC-32 (init and final XOR all ones), independent of the crate's table.
fn crc32_reference(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// The ICRC written from the spec: CRC-32 over 8 bytes of ones (the absent LRH) followed by
/// the packet from the IP header up to the ICRC, with the variant fields set to ones.
fn icrc_reference(l3_without_icrc: &[u8]) -> u32 {
    let mut masked = l3_without_icrc.to_vec();
    let (ip_len, ip_masks): (usize, Vec<(usize, u8)>) = match masked[0] >> 4 {
        // TOS, TTL, checksum.
        4 => (((masked[0] & 0xF) as usize) * 4, vec![(1, 0xFF), (8, 0xFF), (10, 0xFF), (11, 0xFF)]),
        // Traffic class and flow label (all but the version nibble), hop limit.
        6 => (40, vec![(0, 0x0F), (1, 0xFF), (2, 0xFF), (3, 0xFF), (7, 0xFF)]),
        v => panic!("IP version {v}"),
    };
    for (at, bits) in ip_masks {
        masked[at] |= bits;
    }
    masked[ip_len + 6] = 0xFF; // UDP checksum
    masked[ip_len + 7] = 0xFF;
    masked[ip_len + 8 + 4] = 0xFF; // BTH FECN/BECN/reserved
    let mut pseudo = vec![0xFFu8; 8];
    pseudo.extend_from_slice(&masked);
    crc32_reference(&pseudo)
}

fn trailer(l3: &[u8]) -> u32 {
    u32::from_le_bytes(l3[l3.len() - 4..].try_into().unwrap())
}

#[test]
fn captured_rxe_frames_verify() {
    let frames = capture_frames();
    for (i, f) in frames.iter().enumerate() {
        check_layout(i, f);
        let l3 = &f[14..];
        assert!(verify(l3), "frame {}: ICRC {:#010x} does not verify", i + 1, trailer(l3));
        let body = &l3[..l3.len() - 4];
        // The trailer is the CRC stored least-significant byte first, as rxe writes it.
        assert_eq!(icrc(body), Some(trailer(l3)), "frame {}", i + 1);
        // The reference agrees with rxe too, which validates it for the IPv6 test below.
        assert_eq!(icrc_reference(body), trailer(l3), "frame {}: reference", i + 1);
    }
}

#[test]
fn captured_frames_every_invariant_byte_is_covered() {
    // Flip one bit of every byte that is not masked (IP addresses and lengths, UDP ports and
    // length, BTH, payload, the ICRC itself): verification must fail. A single-bit error is
    // always detected by CRC-32, so any `true` here means the byte is wrongly masked or skipped.
    for (i, f) in capture_frames().iter().enumerate() {
        let l3 = &f[14..];
        for at in (0..l3.len()).filter(|at| !V4_MASKED.contains(at)) {
            let mut g = l3.to_vec();
            g[at] ^= 1 << (at % 8);
            assert!(!verify(&g), "frame {}: flipping byte {at} of the IP packet went unnoticed", i + 1);
        }
    }
}

#[test]
fn captured_frames_payload_corruption_is_detected() {
    // A whole-byte change in the payload (not just one bit), at the start, middle and end.
    for (i, f) in capture_frames().iter().enumerate() {
        let l3 = &f[14..];
        let payload = 20 + 8 + 12..l3.len() - 4;
        for at in [payload.start, (payload.start + payload.end) / 2, payload.end - 1] {
            let mut g = l3.to_vec();
            g[at] = !g[at];
            assert!(!verify(&g), "frame {}: payload byte {at}", i + 1);
        }
    }
}

#[test]
fn captured_frames_masked_fields_do_not_matter() {
    // What routers rewrite (TTL, TOS/ECN, the IP checksum, the UDP checksum, FECN/BECN) must
    // not change the ICRC: every value of each field, and random combinations.
    let mut rng = Rng::new(31);
    for (i, f) in capture_frames().iter().enumerate() {
        let l3 = &f[14..];
        for &at in &V4_MASKED {
            for v in 0..=255u8 {
                let mut g = l3.to_vec();
                g[at] = v;
                assert!(verify(&g), "frame {}: masked byte {at} = {v:#04x} broke the ICRC", i + 1);
            }
        }
        for _ in 0..50 {
            let mut g = l3.to_vec();
            for &at in &V4_MASKED {
                g[at] = rng.next_u8();
            }
            assert!(verify(&g), "frame {}", i + 1);
        }
    }
}

/// A RoCEv2 IPv6 frame's IP packet with a correct ICRC trailer from the reference.
fn v6_packet_with_icrc() -> Vec<u8> {
    let f = roce_v6();
    let mut l3 = f[14..f.len() - 4].to_vec();
    let crc = icrc_reference(&l3);
    l3.extend_from_slice(&crc.to_le_bytes());
    l3
}

#[test]
fn ipv6_icrc_matches_reference_and_masks() {
    let l3 = v6_packet_with_icrc();
    assert!(verify(&l3), "IPv6 ICRC disagrees with the reference");
    let mut rng = Rng::new(32);
    // Masked: traffic class, flow label (byte 0 low nibble, bytes 1..4), hop limit, UDP
    // checksum, BTH byte 4.
    for _ in 0..200 {
        let mut g = l3.clone();
        g[0] = 0x60 | (rng.next_u8() & 0x0F);
        for at in [1, 2, 3, 7, 40 + 6, 40 + 7, 48 + 4] {
            g[at] = rng.next_u8();
        }
        assert!(verify(&g), "masked IPv6 fields changed the ICRC");
    }
    // Everything else is covered.
    let masked = [1usize, 2, 3, 7, 46, 47, 52];
    for at in (0..l3.len()).filter(|at| !masked.contains(at)) {
        let bits: &[u8] = if at == 0 { &[0x10, 0x20, 0x40, 0x80] } else { &[0x01, 0x80] };
        for &bit in bits {
            let mut g = l3.clone();
            g[at] ^= bit;
            assert!(!verify(&g), "IPv6: flipping bit {bit:#04x} of byte {at} went unnoticed");
        }
    }
}

#[test]
fn ipv4_with_options_is_covered() {
    // Options are part of the invariant header; the masked offsets move with the IHL.
    let f = udp_v4_with_options(&[1, 1, 1, 0], 0xC000, ROCE_PORT, &roce_payload(&sample_bth(), 16));
    let mut l3 = f[14..f.len() - 4].to_vec();
    let crc = icrc_reference(&l3);
    assert_eq!(icrc(&l3), Some(crc));
    l3.extend_from_slice(&crc.to_le_bytes());
    for at in [24 + 6, 24 + 7, 32 + 4] {
        let mut g = l3.clone();
        g[at] ^= 0xFF;
        assert!(verify(&g), "byte {at} is masked with IHL 6");
    }
    for at in [20, 23, 24, 28, 32, 35, 37] {
        let mut g = l3.clone();
        g[at] ^= 0x01;
        assert!(!verify(&g), "byte {at} is covered with IHL 6");
    }
}

#[test]
fn malformed_inputs_are_rejected() {
    assert_eq!(icrc(&[]), None);
    assert!(!verify(&[]));
    assert!(!verify(&[0x45, 0, 0]));
    // Not IPv4/IPv6.
    let mut l3 = roce_v4()[14..].to_vec();
    l3[0] = 0x55;
    assert_eq!(icrc(&l3), None);
    // Too short for IP + UDP + BTH.
    let l3 = roce_v4()[14..14 + 20 + 8 + 11].to_vec();
    assert_eq!(icrc(&l3), None);
    let l3 = roce_v6()[14..14 + 40 + 8 + 11].to_vec();
    assert_eq!(icrc(&l3), None);
    // Exactly IP + UDP + BTH is enough (an empty payload).
    let l3 = roce_v4()[14..14 + 20 + 8 + 12].to_vec();
    assert_eq!(icrc(&l3), Some(icrc_reference(&l3)));
}

/// The two-part ICRC (headers apart from the UDP payload) is the one-slice ICRC, split where the
/// UDP payload starts, for every captured frame, IPv6 and IPv4 with options; any other split
/// is refused rather than computed over the wrong bytes.
#[test]
fn icrc_in_two_parts_is_the_same_crc() {
    use fabric_common::icrc::icrc_parts;
    let mut packets: Vec<(Vec<u8>, usize)> =
        capture_frames().iter().map(|f| (f[14..f.len() - 4].to_vec(), 20 + 8)).collect();
    let v6 = roce_v6();
    packets.push((v6[14..v6.len() - 4].to_vec(), 40 + 8));
    let opts = udp_v4_with_options(&[1, 1, 1, 0], 0xC000, ROCE_PORT, &roce_payload(&sample_bth(), 16));
    packets.push((opts[14..opts.len() - 4].to_vec(), 24 + 8));
    for (l3, at) in &packets {
        let (headers, payload) = l3.split_at(*at);
        assert_eq!(icrc_parts(headers, payload), icrc(l3));
        assert_eq!(icrc_parts(headers, payload), Some(icrc_reference(l3)));
        let (short, long) = l3.split_at(at - 1);
        assert_eq!(icrc_parts(short, long), None, "headers one byte short");
        let (long, short) = l3.split_at(at + 1);
        assert_eq!(icrc_parts(long, short), None, "headers one byte long");
        assert_eq!(icrc_parts(headers, &payload[..11]), None, "payload shorter than a BTH");
    }
    assert_eq!(icrc_parts(&[], &[0; 12]), None);
}
