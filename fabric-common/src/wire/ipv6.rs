//! IPv6 fixed header (RFC 8200).
use core::mem::offset_of;

use network_types::ip::Ipv6Hdr;

use super::Field;

pub const HEADER_LEN: usize = Ipv6Hdr::LEN;

/// Version (4 bits), traffic class (8), flow label (20).
pub const VER_TC_FLOW: Field = offset_of!(Ipv6Hdr, vcf)..offset_of!(Ipv6Hdr, payload_len);
/// The first byte of a header with traffic class 0: version 6.
pub const VER_TC_ZERO: u8 = 0x60;
pub const PAYLOAD_LEN: Field = offset_of!(Ipv6Hdr, payload_len)..offset_of!(Ipv6Hdr, next_hdr);
pub const NEXT_HEADER: usize = offset_of!(Ipv6Hdr, next_hdr);
pub const HOP_LIMIT: usize = offset_of!(Ipv6Hdr, hop_limit);
pub const SRC: Field = offset_of!(Ipv6Hdr, src_addr)..offset_of!(Ipv6Hdr, dst_addr);
pub const DST: Field = offset_of!(Ipv6Hdr, dst_addr)..HEADER_LEN;

// The layout as RFC 8200 draws it.
const _: () = assert!(HEADER_LEN == 40 && NEXT_HEADER == 6 && HOP_LIMIT == 7 && SRC.start == 8 && DST.start == 24);
