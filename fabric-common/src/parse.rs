//! Parsing Ethernet / 802.1Q / IPv4 / IPv6 / UDP / BTH, written once for kernel and host.
//!
//! Every read goes through [`PacketBytes`], so a truncated packet is an `Err` naming the first
//! header that is missing, never an out-of-bounds read. Lengths taken from the packet are checked
//! before they are trusted.
use crate::counters::DropReason;
use crate::wire::{PacketBytes, bth, ethernet, ipv4, ipv6, udp};

/// The network-layer part of a parsed packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpHeader {
    V4 {
        src: [u8; 4],
        dst: [u8; 4],
        ttl: u8,
        tos: u8,
        /// Header length including options.
        header_len: u8,
    },
    V6 {
        src: [u8; 16],
        dst: [u8; 16],
        hop_limit: u8,
        traffic_class: u8,
    },
}

/// The fields of an InfiniBand BTH that the fabric uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bth {
    pub opcode: u8,
    pub solicited: bool,
    pub ack_request: bool,
    pub pkey: u16,
    /// 24 bits.
    pub dest_qp: u32,
    /// 24 bits.
    pub psn: u32,
}

/// What the switch needs to know about a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParsedPacket {
    pub dst_mac: [u8; 6],
    /// The 802.1Q TCI, when the frame carries one tag.
    pub vlan_tci: Option<u16>,
    /// Offset of the IP header.
    pub l3_offset: usize,
    pub ip: IpHeader,
    /// IPv4 protocol or IPv6 next header.
    pub protocol: u8,
    /// UDP source and destination ports (none for other protocols and non-first fragments).
    pub ports: Option<(u16, u16)>,
    /// The BTH of a RoCEv2 packet (UDP destination port 4791).
    pub bth: Option<Bth>,
}

impl ParsedPacket {
    /// The packet's priority class: the 802.1Q PCP, 0 when untagged.
    pub fn priority(&self) -> u8 {
        match self.vlan_tci {
            Some(tci) => ethernet::tci_pcp(tci),
            None => 0,
        }
    }

    pub fn is_roce(&self) -> bool {
        self.bth.is_some()
    }

    /// The same packet with IPv4 TOS (IPv6 traffic class) `tos`: a simulator's packet of a flow
    /// whose header it built once, as it carries one class or ECN mark or another.
    pub const fn with_tos(mut self, tos: u8) -> Self {
        match &mut self.ip {
            IpHeader::V4 { tos: t, .. } => *t = tos,
            IpHeader::V6 { traffic_class: t, .. } => *t = tos,
        }
        self
    }
}

/// Why a packet could not be parsed for forwarding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Not IPv4 or IPv6: the kernel's business (ARP, LLDP, PFC is handled before parsing).
    NotIp { ethertype: u16 },
    /// Malformed or truncated: dropped and counted.
    Malformed(DropReason),
}

use ParseError::Malformed;

/// Parses a frame. See the module docs for what is checked.
#[inline(always)]
pub fn parse_packet<P: PacketBytes + ?Sized>(p: &P) -> Result<ParsedPacket, ParseError> {
    let dst_mac = *p.bytes::<6>(ethernet::DST.start).ok_or(Malformed(DropReason::TruncatedEthernet))?;
    let mut ethertype = p.u16_at(ethernet::ETHERTYPE.start).ok_or(Malformed(DropReason::TruncatedEthernet))?;
    let mut l3_offset = ethernet::HEADER_LEN;
    let mut vlan_tci = None;
    if ethertype == ethernet::ETHERTYPE_VLAN {
        vlan_tci = Some(p.u16_at(ethernet::VLAN_TCI.start).ok_or(Malformed(DropReason::TruncatedVlan))?);
        ethertype = p.u16_at(ethernet::VLAN_TCI.end).ok_or(Malformed(DropReason::TruncatedVlan))?;
        l3_offset += ethernet::VLAN_TAG_LEN;
    }

    let (ip, protocol, l4_offset, l3_len, fragment) = match ethertype {
        ethernet::ETHERTYPE_IPV4 => parse_ipv4(p, l3_offset)?,
        ethernet::ETHERTYPE_IPV6 => parse_ipv6(p, l3_offset)?,
        other => return Err(ParseError::NotIp { ethertype: other }),
    };

    let mut ports = None;
    let mut bth = None;
    if protocol == ipv4::PROTO_UDP && fragment != Fragment::Later {
        let hdr = p.bytes::<{ udp::HEADER_LEN }>(l4_offset).ok_or(Malformed(DropReason::TruncatedUdp))?;
        // Headers must lie inside the IP datagram, not in the Ethernet padding after it (a first
        // fragment skips the UDP length check below, so this is its only guard).
        let ip_payload = l3_len - (l4_offset - l3_offset);
        if ip_payload < udp::HEADER_LEN {
            return Err(Malformed(DropReason::TruncatedUdp));
        }
        let src_port = u16::from_be_bytes([hdr[udp::SRC_PORT.start], hdr[udp::SRC_PORT.start + 1]]);
        let dst_port = u16::from_be_bytes([hdr[udp::DST_PORT.start], hdr[udp::DST_PORT.start + 1]]);
        let udp_len = u16::from_be_bytes([hdr[udp::LENGTH.start], hdr[udp::LENGTH.start + 1]]) as usize;
        ports = Some((src_port, dst_port));
        if dst_port == udp::ROCEV2_PORT {
            bth = Some(parse_bth(p, l4_offset + udp::HEADER_LEN)?);
            if ip_payload < udp::HEADER_LEN + bth::HEADER_LEN {
                return Err(Malformed(DropReason::TruncatedBth));
            }
        }
        // The IP length was checked against the frame; the UDP length must fit in the IP payload.
        // (A first fragment carries the header of a datagram longer than itself.)
        if udp_len < udp::HEADER_LEN || (udp_len > ip_payload && fragment == Fragment::None) {
            return Err(Malformed(DropReason::BadUdpLength));
        }
        if bth.is_some() && udp_len < udp::HEADER_LEN + bth::HEADER_LEN {
            return Err(Malformed(DropReason::TruncatedBth));
        }
    }

    Ok(ParsedPacket { dst_mac, vlan_tci, l3_offset, ip, protocol, ports, bth })
}

/// Where a packet stands in IP fragmentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fragment {
    None,
    /// Offset 0 with more to come: carries the L4 header.
    First,
    /// Offset non-zero: no L4 header.
    Later,
}

/// Returns the header, protocol, L4 offset, IP length (header + payload) and the fragment kind.
#[inline(always)]
fn parse_ipv4<P: PacketBytes + ?Sized>(p: &P, l3: usize) -> Result<(IpHeader, u8, usize, usize, Fragment), ParseError> {
    let hdr = p.bytes::<{ ipv4::MIN_HEADER_LEN }>(l3).ok_or(Malformed(DropReason::TruncatedIpv4))?;
    let ver_ihl = hdr[ipv4::VER_IHL];
    // At most 15 * 4 = 60 bytes: a bound the verifier can see.
    let header_len = ((ver_ihl & 0x0F) as usize) * 4;
    if ver_ihl >> 4 != 4 || header_len < ipv4::MIN_HEADER_LEN {
        return Err(Malformed(DropReason::BadIpv4Header));
    }
    let total_len = u16::from_be_bytes([hdr[ipv4::TOTAL_LEN.start], hdr[ipv4::TOTAL_LEN.start + 1]]) as usize;
    let flags_frag = u16::from_be_bytes([hdr[ipv4::FLAGS_FRAG.start], hdr[ipv4::FLAGS_FRAG.start + 1]]);
    let ip = IpHeader::V4 {
        src: [hdr[12], hdr[13], hdr[14], hdr[15]],
        dst: [hdr[16], hdr[17], hdr[18], hdr[19]],
        ttl: hdr[ipv4::TTL],
        tos: hdr[ipv4::TOS],
        header_len: header_len as u8,
    };
    let protocol = hdr[ipv4::PROTOCOL];
    // Options present in full?
    if header_len > ipv4::MIN_HEADER_LEN && p.u8_at(l3 + header_len - 1).is_none() {
        return Err(Malformed(DropReason::TruncatedIpv4));
    }
    if total_len < header_len || l3 + total_len > p.len() {
        return Err(Malformed(DropReason::IpLength));
    }
    let fragment = if flags_frag & ipv4::FRAG_OFFSET_MASK != 0 {
        Fragment::Later
    } else if flags_frag & ipv4::FLAG_MORE_FRAGMENTS != 0 {
        Fragment::First
    } else {
        Fragment::None
    };
    Ok((ip, protocol, l3 + header_len, total_len, fragment))
}

/// The fixed IPv6 header only: extension headers are not followed, so a packet with one (a
/// hop-by-hop or a fragment header, say) parses with that header's number as its protocol and
/// no UDP ports or BTH. It is still routed by its destination, but hashed without its ports and
/// QP, and not counted as RoCE. RoCEv2 senders put UDP right after the fixed header (our
/// endpoints and rxe do); following a chain in XDP would cost a bounded loop per packet.
#[inline(always)]
fn parse_ipv6<P: PacketBytes + ?Sized>(p: &P, l3: usize) -> Result<(IpHeader, u8, usize, usize, Fragment), ParseError> {
    let hdr = p.bytes::<{ ipv6::HEADER_LEN }>(l3).ok_or(Malformed(DropReason::TruncatedIpv6))?;
    if hdr[0] >> 4 != 6 {
        return Err(Malformed(DropReason::BadIpv6Header));
    }
    let traffic_class = (hdr[0] << 4) | (hdr[1] >> 4);
    let payload_len = u16::from_be_bytes([hdr[ipv6::PAYLOAD_LEN.start], hdr[ipv6::PAYLOAD_LEN.start + 1]]) as usize;
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&hdr[ipv6::SRC]);
    dst.copy_from_slice(&hdr[ipv6::DST]);
    let ip = IpHeader::V6 { src, dst, hop_limit: hdr[ipv6::HOP_LIMIT], traffic_class };
    let total_len = ipv6::HEADER_LEN + payload_len;
    if l3 + total_len > p.len() {
        return Err(Malformed(DropReason::IpLength));
    }
    // Fragments use an extension header, whose next header is not UDP: never parsed as UDP.
    Ok((ip, hdr[ipv6::NEXT_HEADER], l3 + ipv6::HEADER_LEN, total_len, Fragment::None))
}

#[inline(always)]
fn parse_bth<P: PacketBytes + ?Sized>(p: &P, offset: usize) -> Result<Bth, ParseError> {
    let hdr = p.bytes::<{ bth::HEADER_LEN }>(offset).ok_or(Malformed(DropReason::TruncatedBth))?;
    Ok(Bth {
        opcode: hdr[bth::OPCODE],
        solicited: hdr[bth::FLAGS] & bth::FLAG_SOLICITED != 0,
        ack_request: hdr[bth::ACK_REQ] & bth::FLAG_ACK_REQ != 0,
        pkey: u16::from_be_bytes([hdr[bth::PKEY.start], hdr[bth::PKEY.start + 1]]),
        dest_qp: u32::from_be_bytes([0, hdr[5], hdr[6], hdr[7]]),
        psn: u32::from_be_bytes([0, hdr[9], hdr[10], hdr[11]]),
    })
}
