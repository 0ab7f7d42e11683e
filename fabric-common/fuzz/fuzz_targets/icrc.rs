//! `fabric_common::icrc::{icrc, verify}` on arbitrary bytes (an IP packet, from its IP header).
//!
//! Properties:
//! - neither panics, whatever the bytes (version nibble, IHL, length);
//! - `verify` accepts exactly a packet ending with its own ICRC (little-endian, as on the wire);
//! - the CRC ignores the variant fields (IPv4 TOS/TTL/checksum, IPv6 traffic class/flow
//!   label/hop limit, UDP checksum, BTH FECN/BECN byte) and sees every other byte after the BTH's
//!   FECN byte: changing one such byte changes the ICRC (CRC-32 catches every error burst of up to
//!   32 bits).
#![no_main]

use fabric_common::{
    icrc::{icrc, verify},
    wire::{bth, ipv4, ipv6, udp},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let stored = verify(data);
    let Some(crc) = icrc(data) else {
        return;
    };
    assert_eq!(icrc(data), Some(crc), "deterministic");

    let mut with_trailer = data.to_vec();
    with_trailer.extend_from_slice(&crc.to_le_bytes());
    assert!(verify(&with_trailer), "a packet carrying its own ICRC verifies");
    let mut wrong = with_trailer.clone();
    let last = wrong.len() - 1;
    wrong[last] ^= 0x01;
    assert!(!verify(&wrong), "a wrong trailer does not verify");
    if stored {
        let body = &data[..data.len() - bth::ICRC_LEN];
        assert_eq!(icrc(body).map(u32::to_le_bytes).as_ref().map(|b| &b[..]), Some(&data[body.len()..]));
    }

    // icrc returned Some: version 4 or 6 and room for IP header + UDP + BTH.
    let version = data[0] >> 4;
    let ip_len = if version == 4 { (data[0] & 0x0F) as usize * 4 } else { ipv6::HEADER_LEN };
    let bth_at = ip_len + udp::HEADER_LEN;
    assert!(data.len() >= bth_at + bth::HEADER_LEN);

    // Variant fields: any value, same ICRC.
    let salt = data[data.len() - 1] | 1;
    let mut masked = data.to_vec();
    let mut variant: Vec<usize> = Vec::new();
    if version == 4 {
        variant.extend([ipv4::TOS, ipv4::TTL, ipv4::CHECKSUM.start, ipv4::CHECKSUM.start + 1]);
    } else {
        variant.extend([1, 2, 3, ipv6::HOP_LIMIT]);
        masked[0] ^= salt & 0x0F; // traffic class, high nibble (the version nibble stays)
    }
    variant.extend([ip_len + udp::CHECKSUM.start, ip_len + udp::CHECKSUM.start + 1, bth_at + bth::FECN_BECN]);
    for i in variant {
        // With IHL < 5 the "header" is shorter than the IPv4 offsets: those bytes are UDP/BTH.
        if i >= ip_len && i < ipv4::MIN_HEADER_LEN && version == 4 {
            continue;
        }
        masked[i] ^= salt;
    }
    assert_eq!(icrc(&masked), Some(crc), "variant fields are masked");

    // Any byte after the FECN/BECN byte is covered.
    let first = bth_at + bth::FECN_BECN + 1;
    let at = first + salt as usize % (data.len() - first);
    let mut changed = data.to_vec();
    changed[at] ^= salt;
    assert_ne!(icrc(&changed), Some(crc), "byte {at} is covered by the ICRC");
});
