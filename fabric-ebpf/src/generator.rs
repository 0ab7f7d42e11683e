//! The traffic generators of `fabric-bench forwarding`.
//!
//! `traffic_generator` is run with BPF_PROG_TEST_RUN in live-frame mode: it sends every frame
//! out of the generator's veth (XDP_TX) towards the first switch. Live-frame pages are recycled
//! without being re-initialised, so a frame comes back to this program as the fabric left it
//! (MACs rewritten, TTL decremented): the program writes the MACs and the TTL, and recomputes
//! the IPv4 header checksum, every time.
//!
//! `traffic_loop` is for kernels or sandboxes that refuse live frames: attached where a chain of
//! veths ends, it rewrites each arriving frame the same way and redirects it into the chain's
//! start, so that a few frames sent once circulate, each lap a packet through the chain. It
//! counts laps per CPU and drops frames once its CPU's count reaches the lease the benchmark
//! keeps moving ahead ([`GeneratorConfig::lease_allows`]): the loop ends by itself when the
//! benchmark stops.
use aya_ebpf::{
    bindings::xdp_action,
    helpers::bpf_redirect,
    macros::{map, xdp},
    maps::{Array, PerCpuArray},
    programs::XdpContext,
};
use fabric_common::{
    config::GeneratorConfig,
    wire::{ethernet, ipv4},
};

use crate::packet::XdpPacket;

/// What the generators write into every frame (one entry, set by the benchmark).
#[map]
pub static GENERATOR: Array<GeneratorConfig> = Array::with_max_entries(1, 0);

/// `traffic_loop`'s laps, per CPU.
#[map]
pub static GENERATOR_LAPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Version 4, a 20-byte header: the only shape the benchmark sends.
const VERSION_IHL_NO_OPTIONS: u8 = 0x45;

#[xdp]
pub fn traffic_generator(ctx: XdpContext) -> u32 {
    let Some(cfg) = GENERATOR.get(0) else {
        return xdp_action::XDP_ABORTED;
    };
    match write_headers(&ctx, cfg) {
        Ok(()) => xdp_action::XDP_TX,
        Err(action) => action,
    }
}

#[xdp]
pub fn traffic_loop(ctx: XdpContext) -> u32 {
    let (Some(cfg), Some(laps)) = (GENERATOR.get(0), GENERATOR_LAPS.get_ptr_mut(0)) else {
        return xdp_action::XDP_ABORTED;
    };
    // SAFETY: this CPU's slot of a per-CPU array, valid while the program runs; XDP runs with
    // preemption off, so no other program touches the slot meanwhile.
    let done = unsafe { *laps };
    if !cfg.lease_allows(done) {
        return xdp_action::XDP_DROP;
    }
    if let Err(action) = write_headers(&ctx, cfg) {
        return action;
    }
    // SAFETY: as above.
    unsafe { *laps = done + 1 };
    // SAFETY: a helper call with plain integer arguments; it only records where the frame goes.
    unsafe { bpf_redirect(cfg.out_ifindex, 0) as u32 }
}

/// Writes the MACs and the TTL the benchmark set into an IPv4 frame, with its header checksum;
/// any other frame is refused with the action to return (the benchmark sends no other).
#[inline(always)]
fn write_headers(ctx: &XdpContext, cfg: &GeneratorConfig) -> Result<(), u32> {
    let mut pkt = XdpPacket::new(ctx);
    let eth = pkt.bytes_mut::<{ ethernet::HEADER_LEN }>(0).ok_or(xdp_action::XDP_ABORTED)?;
    if eth[ethernet::ETHERTYPE] != ethernet::ETHERTYPE_IPV4.to_be_bytes() {
        return Err(xdp_action::XDP_ABORTED);
    }
    eth[ethernet::DST].copy_from_slice(&cfg.dst_mac);
    eth[ethernet::SRC].copy_from_slice(&cfg.src_mac);
    let ip = pkt.bytes_mut::<{ ipv4::MIN_HEADER_LEN }>(ethernet::HEADER_LEN).ok_or(xdp_action::XDP_ABORTED)?;
    if ip[ipv4::VER_IHL] != VERSION_IHL_NO_OPTIONS {
        return Err(xdp_action::XDP_ABORTED);
    }
    ip[ipv4::TTL] = cfg.ttl;
    ip[ipv4::CHECKSUM].copy_from_slice(&[0, 0]);
    let sum = header_checksum(ip);
    ip[ipv4::CHECKSUM].copy_from_slice(&sum.to_be_bytes());
    Ok(())
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
