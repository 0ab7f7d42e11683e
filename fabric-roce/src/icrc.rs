//! The ICRC of a RoCEv2 packet we send or receive through a UDP socket.
//!
//! The ICRC (annex A17.3.3) covers the IP and UDP headers, with the fields routers change masked
//! (IPv4 TOS, TTL, header checksum; IPv6 traffic class, flow label, hop limit; UDP checksum; the
//! BTH FECN/BECN byte). Our endpoint only sees the UDP payload: the kernel writes the headers. So
//! we rebuild them as the kernel will send them and let [`fabric_common::icrc`] do the masking
//! and the CRC, the same code the switch tests verify rxe's frames with.
//!
//! # The IPv4 identification
//!
//! IPv4's identification and flags/fragment-offset words are *not* masked, and the kernel
//! chooses the identification. Linux (`ip_select_ident_segs`, include/net/ip.h, since 2023):
//! - a *connected* socket numbers its datagrams from a per-socket counter that starts at a
//!   random value: unpredictable;
//! - an *unconnected* socket sending with DF set (`IP_MTU_DISCOVER = IP_PMTUDISC_DO`) sends
//!   identification 0 (RFC 6864: atomic datagrams need no unique ID);
//! - without DF, a hashed per-destination generator with random jumps: unpredictable.
//!
//! rxe writes its own IP header with the hashed generator, which is why every frame of
//! The rxe capture (fabric-user/tests/data/rxe-rc-mixed.pcap) has DF and a non-zero, incrementing ID (0xf356, 0xf357, ...).
//! We checked the socket cases on this machine's 6.18 kernel with tcpdump: `sendto` on an
//! unconnected DF socket gave ID 0 on every datagram; `send` after `connect` gave 25422, 25423,
//! ...; without DF, 50086, 50087, ....
//!
//! Design: **our endpoint sends with `sendto` on an unconnected UDP socket with
//! `IP_PMTUDISC_DO`**, so every IPv4 packet carries ID 0 and flags DF ([`Ipv4Ident::SENT_BY_US`]),
//! no options; the sender computes the ICRC from fields it knows: addresses, UDP source port,
//! lengths. A receiver on a UDP socket cannot see the peer's IP identification either; it checks
//! with the same assumption, which holds for packets from our endpoint. Packets from rxe or a NIC
//! (random IDs) can be checked only where the real IP header is visible (raw socket, AF_PACKET,
//! XDP) with [`fabric_common::icrc::verify`], or here with [`icrc_with_ipv4_ident`] given the
//! real fields, as the capture test does. IPv6 has no identification: nothing to predict.
use std::net::{Ipv4Addr, Ipv6Addr};

use fabric_common::wire::{bth, ipv4, ipv6, udp};

/// Don't Fragment, in the IPv4 flags/fragment word.
pub use fabric_common::wire::ipv4::FLAG_DONT_FRAGMENT as IPV4_FLAG_DONT_FRAGMENT;

/// Source and destination addresses of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpPair {
    V4 { src: Ipv4Addr, dst: Ipv4Addr },
    V6 { src: Ipv6Addr, dst: Ipv6Addr },
}

impl IpPair {
    /// The same pair seen from the other end.
    pub const fn reversed(self) -> Self {
        match self {
            IpPair::V4 { src, dst } => IpPair::V4 { src: dst, dst: src },
            IpPair::V6 { src, dst } => IpPair::V6 { src: dst, dst: src },
        }
    }
}

/// The two unmasked IPv4 words the kernel chooses: identification, and flags + fragment offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Ident {
    pub identification: u16,
    pub flags_fragment: u16,
}

impl Ipv4Ident {
    /// What Linux writes for a DF datagram sent with `sendto` on an unconnected socket.
    pub const SENT_BY_US: Ipv4Ident = Ipv4Ident { identification: 0, flags_fragment: IPV4_FLAG_DONT_FRAGMENT };
}

/// The ICRC of a packet we send: `udp_payload_without_icrc` (BTH onwards, pad included) from
/// `udp_src` to port 4791 between `ip`, with IPv4 identification 0 and DF (see the module docs).
pub fn icrc_for(ip: IpPair, udp_src: u16, udp_payload_without_icrc: &[u8]) -> u32 {
    icrc_with_ipv4_ident(ip, Ipv4Ident::SENT_BY_US, udp_src, udp_payload_without_icrc)
}

/// The ICRC with the IPv4 identification and flags given (ignored for IPv6): for packets whose
/// real IP header is known, such as captured rxe frames.
pub fn icrc_with_ipv4_ident(ip: IpPair, ident: Ipv4Ident, udp_src: u16, udp_payload_without_icrc: &[u8]) -> u32 {
    // The lengths count the ICRC trailer, which is part of the datagram.
    let udp_len = udp::HEADER_LEN + udp_payload_without_icrc.len() + bth::ICRC_LEN;
    // The headers as the kernel writes them, on the stack: the payload is not copied.
    let mut headers = [0u8; ipv6::HEADER_LEN + udp::HEADER_LEN];
    let ip_len = match ip {
        IpPair::V4 { src, dst } => {
            let total = u16::try_from(ipv4::MIN_HEADER_LEN + udp_len).unwrap_or(u16::MAX);
            let h = &mut headers[..ipv4::MIN_HEADER_LEN];
            h[ipv4::VER_IHL] = ipv4::VER_IHL_NO_OPTIONS;
            h[ipv4::TOTAL_LEN].copy_from_slice(&total.to_be_bytes());
            h[ipv4::IDENTIFICATION].copy_from_slice(&ident.identification.to_be_bytes());
            h[ipv4::FLAGS_FRAG].copy_from_slice(&ident.flags_fragment.to_be_bytes());
            h[ipv4::PROTOCOL] = ipv4::PROTO_UDP;
            // TOS, TTL and checksum stay zero: the ICRC masks them.
            h[ipv4::SRC].copy_from_slice(&src.octets());
            h[ipv4::DST].copy_from_slice(&dst.octets());
            ipv4::MIN_HEADER_LEN
        }
        IpPair::V6 { src, dst } => {
            let payload_len = u16::try_from(udp_len).unwrap_or(u16::MAX);
            let h = &mut headers[..ipv6::HEADER_LEN];
            h[ipv6::VER_TC_FLOW.start] = ipv6::VER_TC_ZERO;
            h[ipv6::PAYLOAD_LEN].copy_from_slice(&payload_len.to_be_bytes());
            h[ipv6::NEXT_HEADER] = ipv4::PROTO_UDP;
            h[ipv6::SRC].copy_from_slice(&src.octets());
            h[ipv6::DST].copy_from_slice(&dst.octets());
            ipv6::HEADER_LEN
        }
    };
    let u = &mut headers[ip_len..ip_len + udp::HEADER_LEN];
    u[udp::SRC_PORT].copy_from_slice(&udp_src.to_be_bytes());
    u[udp::DST_PORT].copy_from_slice(&udp::ROCEV2_PORT.to_be_bytes());
    u[udp::LENGTH].copy_from_slice(&u16::try_from(udp_len).unwrap_or(u16::MAX).to_be_bytes());
    // The checksum stays zero: masked.
    fabric_common::icrc::icrc_parts(&headers[..ip_len + udp::HEADER_LEN], udp_payload_without_icrc)
        .expect("an IP + UDP header built above, and a payload of at least a BTH")
}

/// Fills the last 4 bytes of `udp_payload` (as [`super::wire::RocePacketRepr::emit`] leaves
/// them) with the ICRC of the rest, little-endian as on the wire. Panics if shorter than 4 bytes.
pub fn write_icrc(ip: IpPair, udp_src: u16, udp_payload: &mut [u8]) {
    let body_len = udp_payload.len() - bth::ICRC_LEN;
    let crc = icrc_for(ip, udp_src, &udp_payload[..body_len]);
    udp_payload[body_len..].copy_from_slice(&crc.to_le_bytes());
}

/// Whether the trailer of a received `udp_payload` matches, assuming the sender is one of ours
/// (IPv4 ID 0, DF). `ip` and `udp_src` are the packet's, as `recvfrom` and `IP_PKTINFO` report.
pub fn verify(ip: IpPair, udp_src: u16, udp_payload: &[u8]) -> bool {
    let Some(body_len) = udp_payload.len().checked_sub(bth::ICRC_LEN) else { return false };
    if body_len < bth::HEADER_LEN {
        return false;
    }
    let (body, trailer) = udp_payload.split_at(body_len);
    icrc_for(ip, udp_src, body).to_le_bytes() == trailer
}

#[cfg(test)]
mod tests {
    use etherparse::PacketBuilder;

    use super::*;

    const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 6);
    const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    /// An ACK from 198.18.0.6 to 198.18.0.2, UDP 0xC000 -> 4791, QP 0x12, PSN 5, AETH syndrome
    /// 0x1F, MSN 1. By hand from annex A17.3.3: CRC-32 (zlib) over
    ///   ff ff ff ff ff ff ff ff                          (the absent LRH)
    ///   45 ff 00 30 00 00 40 00 ff 11 ff ff c6 12 00 06  (IPv4: TOS, TTL, checksum all ones;
    ///   c6 12 00 02                                       length 48, ID 0, DF)
    ///   c0 00 12 b7 00 1c ff ff                          (UDP: length 28, checksum all ones)
    ///   11 00 ff ff ff 00 00 12 00 00 00 05              (BTH: byte 4 all ones)
    ///   1f 00 00 01                                      (AETH)
    /// = 0xF2414034 (Python: `zlib.crc32(bytes)`), sent as 34 40 41 f2.
    #[test]
    fn hand_computed_ack_vector() {
        let payload = [0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00, 0x00, 0x05, 0x1f, 0x00, 0x00, 0x01];
        let ip = IpPair::V4 { src: A, dst: B };
        assert_eq!(icrc_for(ip, 0xC000, &payload), 0xF241_4034);
        let mut with_trailer = [&payload[..], &[0; 4]].concat();
        write_icrc(ip, 0xC000, &mut with_trailer);
        assert_eq!(with_trailer[16..], [0x34, 0x40, 0x41, 0xf2]);
        assert!(verify(ip, 0xC000, &with_trailer));
        // The BTH FECN/BECN byte is masked: a switch may set it without breaking the ICRC.
        with_trailer[4] = 0x80;
        assert!(verify(ip, 0xC000, &with_trailer));
        // Everything else is covered.
        assert!(!verify(ip.reversed(), 0xC000, &with_trailer));
        assert!(!verify(ip, 0xC001, &with_trailer));
        with_trailer[15] ^= 1;
        assert!(!verify(ip, 0xC000, &with_trailer));
    }

    /// The pseudo-header matches a real one written by etherparse (which, like Linux for our
    /// sockets, writes ID 0 and DF) as the switch's own ICRC code reads it, for both IP versions.
    #[test]
    fn agrees_with_fabric_common_on_full_packets() {
        let payload: Vec<u8> = (0..60u8).collect();
        let check = |builder: etherparse::PacketBuilderStep<etherparse::UdpHeader>, ip: IpPair| {
            let mut body = payload.clone();
            body.extend_from_slice(&[0; 4]);
            write_icrc(ip, 0xC123, &mut body);
            let mut frame = Vec::new();
            builder.write(&mut frame, &body).unwrap();
            assert!(fabric_common::icrc::verify(&frame[14..]), "{ip:?}");
        };
        let v4 = IpPair::V4 { src: A, dst: B };
        check(PacketBuilder::ethernet2([2; 6], [4; 6]).ipv4(A.octets(), B.octets(), 64).udp(0xC123, 4791), v4);
        let (s6, d6): (Ipv6Addr, Ipv6Addr) = ("fd00::1".parse().unwrap(), "fd00:1::7".parse().unwrap());
        let v6 = IpPair::V6 { src: s6, dst: d6 };
        check(PacketBuilder::ethernet2([2; 6], [4; 6]).ipv6(s6.octets(), d6.octets(), 64).udp(0xC123, 4791), v6);
    }

    /// The shortest packet there is: a BTH and nothing else (RC SEND Only, no payload, AckReq,
    /// QP 0x12, PSN 7). By hand as above: CRC-32 (zlib) over
    ///   ff ff ff ff ff ff ff ff
    ///   45 ff 00 2c 00 00 40 00 ff 11 ff ff c6 12 00 06 c6 12 00 02   (length 44)
    ///   c0 00 12 b7 00 18 ff ff                                      (UDP length 24)
    ///   04 00 ff ff ff 00 00 12 80 00 00 07
    /// = 0x1D91C97A, sent as 7a c9 91 1d.
    #[test]
    fn a_bare_bth_verifies() {
        let ip = IpPair::V4 { src: A, dst: B };
        let packet = [0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x00, 0x00, 0x07, 0x7a, 0xc9, 0x91, 0x1d];
        assert_eq!(icrc_for(ip, 0xC000, &packet[..12]), 0x1D91_C97A);
        assert!(verify(ip, 0xC000, &packet), "12 bytes of BTH then the ICRC: long enough");
    }

    #[test]
    fn verify_rejects_impossible_lengths() {
        let ip = IpPair::V4 { src: A, dst: B };
        assert!(!verify(ip, 1, &[]));
        assert!(!verify(ip, 1, &[0; 3]));
        assert!(!verify(ip, 1, &[0; 15]));
    }
}
