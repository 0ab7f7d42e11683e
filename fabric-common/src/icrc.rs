//! The RoCEv2 invariant CRC (IBTA annex A17.3.3): CRC-32 over the packet with the fields that
//! routers may change masked to all ones, prefixed by 64 bits of ones for the absent LRH.
use crate::hash::crc32_update;
use crate::wire::{bth, ipv4, ipv6, udp};

/// Byte `i` of the IP header as the ICRC sees it: variant fields set to all ones.
fn masked_ip_byte(version: u8, i: usize, b: u8) -> u8 {
    if version == 4 {
        let variant = i == ipv4::TOS || i == ipv4::TTL || ipv4::CHECKSUM.contains(&i);
        if variant { 0xFF } else { b }
    } else {
        // Traffic class and flow label (everything after the version nibble), hop limit.
        match i {
            0 => b | 0x0F,
            1..=3 => 0xFF,
            _ if i == ipv6::HOP_LIMIT => 0xFF,
            _ => b,
        }
    }
}

/// Computes the ICRC of a RoCEv2 packet given from its IP header up to (not including) the
/// 4-byte ICRC trailer. Returns `None` if the bytes are not IPv4/IPv6 + UDP + BTH.
pub fn icrc(l3: &[u8]) -> Option<u32> {
    let ip_len = ip_header_len(l3)?;
    if l3.len() < ip_len + udp::HEADER_LEN + bth::HEADER_LEN {
        return None;
    }
    let (headers, udp_payload) = l3.split_at(ip_len + udp::HEADER_LEN);
    icrc_parts(headers, udp_payload)
}

/// The length of the IP header `l3` starts with (IPv4: its IHL), `None` if neither version.
fn ip_header_len(l3: &[u8]) -> Option<usize> {
    match *l3.first()? >> 4 {
        4 => Some(((l3[0] & 0x0F) as usize) * 4),
        6 => Some(ipv6::HEADER_LEN),
        _ => None,
    }
}

/// [`icrc`] of a packet given in two parts: the IP and UDP headers, and the UDP payload from the
/// BTH up to the trailer. A sender that builds the headers apart from the payload needs no copy.
/// `None` if `ip_udp` is not exactly an IPv4/IPv6 header and a UDP header, or `udp_payload` is
/// shorter than a BTH.
pub fn icrc_parts(ip_udp: &[u8], udp_payload: &[u8]) -> Option<u32> {
    let version = *ip_udp.first()? >> 4;
    let ip_len = ip_header_len(ip_udp)?;
    if ip_udp.len() != ip_len + udp::HEADER_LEN || udp_payload.len() < bth::HEADER_LEN {
        return None;
    }
    let mut crc = crc32_update(!0, &[0xFF; 8]);
    for (i, &b) in ip_udp[..ip_len].iter().enumerate() {
        crc = crc32_update(crc, &[masked_ip_byte(version, i, b)]);
    }
    let udp_hdr = &ip_udp[ip_len..];
    crc = crc32_update(crc, &udp_hdr[..udp::CHECKSUM.start]);
    crc = crc32_update(crc, &[0xFF, 0xFF]);
    crc = crc32_update(crc, &udp_payload[..bth::FECN_BECN]);
    crc = crc32_update(crc, &[0xFF]);
    crc = crc32_update(crc, &udp_payload[bth::FECN_BECN + 1..]);
    Some(!crc)
}

/// Checks the trailer of a RoCEv2 packet given from its IP header to the end of the ICRC.
pub fn verify(l3_with_icrc: &[u8]) -> bool {
    let Some(body_len) = l3_with_icrc.len().checked_sub(bth::ICRC_LEN) else { return false };
    let (body, trailer) = l3_with_icrc.split_at(body_len);
    let stored = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    icrc(body) == Some(stored)
}
