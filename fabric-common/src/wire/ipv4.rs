//! IPv4 header (RFC 791).
use core::mem::offset_of;

use network_types::ip::Ipv4Hdr;

use super::Field;

pub const MIN_HEADER_LEN: usize = Ipv4Hdr::LEN;
pub const MAX_HEADER_LEN: usize = 60;

pub const VER_IHL: usize = offset_of!(Ipv4Hdr, vihl);
pub const TOS: usize = offset_of!(Ipv4Hdr, tos);
pub const TOTAL_LEN: Field = offset_of!(Ipv4Hdr, tot_len)..offset_of!(Ipv4Hdr, id);
/// Chosen by the sender; not masked by the RoCEv2 ICRC (see `fabric_roce::icrc`).
pub const IDENTIFICATION: Field = offset_of!(Ipv4Hdr, id)..offset_of!(Ipv4Hdr, frags);
pub const FLAGS_FRAG: Field = offset_of!(Ipv4Hdr, frags)..offset_of!(Ipv4Hdr, ttl);
pub const TTL: usize = offset_of!(Ipv4Hdr, ttl);
pub const PROTOCOL: usize = offset_of!(Ipv4Hdr, proto);
pub const CHECKSUM: Field = offset_of!(Ipv4Hdr, check)..offset_of!(Ipv4Hdr, src_addr);
pub const SRC: Field = offset_of!(Ipv4Hdr, src_addr)..offset_of!(Ipv4Hdr, dst_addr);
pub const DST: Field = offset_of!(Ipv4Hdr, dst_addr)..MIN_HEADER_LEN;

/// The version/IHL byte of a header without options: version 4, five 32-bit words.
pub const VER_IHL_NO_OPTIONS: u8 = 0x45;

/// In the flags/fragment word: don't fragment.
pub const FLAG_DONT_FRAGMENT: u16 = 0x4000;
/// In the flags/fragment word: more fragments follow.
pub const FLAG_MORE_FRAGMENTS: u16 = 0x2000;
/// In the flags/fragment word: the fragment offset (non-zero: no L4 header here).
pub const FRAG_OFFSET_MASK: u16 = 0x1FFF;

pub const PROTO_UDP: u8 = 17;
pub const PROTO_TCP: u8 = 6;

// The layout as RFC 791 draws it (a check on the crate we read it from).
const _: () = assert!(MIN_HEADER_LEN == 20 && TTL == 8 && PROTOCOL == 9 && CHECKSUM.start == 10 && SRC.start == 12);
