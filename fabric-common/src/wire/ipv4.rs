//! IPv4 header (RFC 791).
use super::Field;

pub const MIN_HEADER_LEN: usize = 20;
pub const MAX_HEADER_LEN: usize = 60;

pub const VER_IHL: usize = 0;
pub const TOS: usize = 1;
pub const TOTAL_LEN: Field = 2..4;
/// Chosen by the sender; not masked by the RoCEv2 ICRC (see `fabric_roce::icrc`).
pub const IDENTIFICATION: Field = 4..6;
pub const FLAGS_FRAG: Field = 6..8;
pub const TTL: usize = 8;
pub const PROTOCOL: usize = 9;
pub const CHECKSUM: Field = 10..12;
pub const SRC: Field = 12..16;
pub const DST: Field = 16..20;

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
