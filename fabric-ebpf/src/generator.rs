//! A traffic generator for `fabric-bench forwarding`: run with BPF_PROG_TEST_RUN in live-frame
//! mode, it sends every frame out of the generator's veth (XDP_TX) towards the first switch.
//!
//! Live-frame pages are recycled without being re-initialised, so a frame comes back to this
//! program as the fabric left it (MACs rewritten, TTL decremented): the program writes the
//! MACs and the TTL, and recomputes the IPv4 header checksum, every time.
use aya_ebpf::{
    bindings::xdp_action,
    macros::{map, xdp},
    maps::Array,
    programs::XdpContext,
};
use fabric_common::{
    config::GeneratorConfig,
    wire::{ethernet, ipv4},
};

use crate::packet::XdpPacket;

/// What the generator writes into every frame (one entry, set by the benchmark).
#[map]
pub static GENERATOR: Array<GeneratorConfig> = Array::with_max_entries(1, 0);

/// Version 4, a 20-byte header: the only shape the benchmark sends.
const VERSION_IHL_NO_OPTIONS: u8 = 0x45;

#[xdp]
pub fn traffic_generator(ctx: XdpContext) -> u32 {
    let mut pkt = XdpPacket::new(&ctx);
    let Some(cfg) = GENERATOR.get(0) else {
        return xdp_action::XDP_ABORTED;
    };
    let Some(eth) = pkt.bytes_mut::<{ ethernet::HEADER_LEN }>(0) else {
        return xdp_action::XDP_ABORTED;
    };
    if eth[ethernet::ETHERTYPE] != ethernet::ETHERTYPE_IPV4.to_be_bytes() {
        return xdp_action::XDP_ABORTED;
    }
    eth[ethernet::DST].copy_from_slice(&cfg.dst_mac);
    eth[ethernet::SRC].copy_from_slice(&cfg.src_mac);
    let Some(ip) = pkt.bytes_mut::<{ ipv4::MIN_HEADER_LEN }>(ethernet::HEADER_LEN) else {
        return xdp_action::XDP_ABORTED;
    };
    if ip[ipv4::VER_IHL] != VERSION_IHL_NO_OPTIONS {
        return xdp_action::XDP_ABORTED;
    }
    ip[ipv4::TTL] = cfg.ttl;
    ip[ipv4::CHECKSUM].copy_from_slice(&[0, 0]);
    let sum = header_checksum(ip);
    ip[ipv4::CHECKSUM].copy_from_slice(&sum.to_be_bytes());
    xdp_action::XDP_TX
}

/// The checksum of a 20-byte IPv4 header whose checksum field is zero. Ten 16-bit words sum to
/// less than 2^20, so two folds always suffice: a loop "until no carry", as in
/// `fabric_common::checksum::internet_checksum`, is one the verifier cannot bound.
#[inline(always)]
fn header_checksum(ip: &[u8; ipv4::MIN_HEADER_LEN]) -> u16 {
    let mut sum = 0u32;
    let mut i = 0;
    while i < ipv4::MIN_HEADER_LEN {
        sum += u16::from_be_bytes([ip[i], ip[i + 1]]) as u32;
        i += 2;
    }
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use fabric_common::{checksum::internet_checksum, wire::ipv4};

    use super::header_checksum;

    #[test]
    fn checksum_of_a_known_header() {
        // 192.168.0.1 -> 192.168.0.199, UDP, TTL 64: the checksum is 0xB861.
        let ip = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xC0, 0xA8, 0x00, 0x01, 0xC0, 0xA8,
            0x00, 0xC7,
        ];
        assert_eq!(header_checksum(&ip), 0xB861);
    }

    /// Two folds give what folding until no carry gives, for the largest sums too, and a header
    /// carrying its checksum sums to zero.
    #[test]
    fn two_folds_match_the_unbounded_checksum() {
        // 0xFFFF + 0xFFFF + 0x0001 = 0x1FFFF: the first fold gives 0x10000, so the second is needed.
        let mut carries_twice = [0u8; ipv4::MIN_HEADER_LEN];
        carries_twice[..6].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x01]);
        let mut headers = vec![[0u8; ipv4::MIN_HEADER_LEN], [0xFF; ipv4::MIN_HEADER_LEN], carries_twice];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..1_000 {
            let mut h = [0u8; ipv4::MIN_HEADER_LEN];
            for b in &mut h {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            headers.push(h);
        }
        for mut h in headers {
            h[ipv4::CHECKSUM].copy_from_slice(&[0, 0]);
            let sum = header_checksum(&h);
            assert_eq!(sum, internet_checksum(&h), "header {h:02x?}");
            h[ipv4::CHECKSUM].copy_from_slice(&sum.to_be_bytes());
            assert_eq!(internet_checksum(&h), 0, "header {h:02x?}");
        }
    }
}
