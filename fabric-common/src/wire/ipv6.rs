//! IPv6 fixed header (RFC 8200).
use super::Field;

pub const HEADER_LEN: usize = 40;

/// Version (4 bits), traffic class (8), flow label (20).
pub const VER_TC_FLOW: Field = 0..4;
/// The first byte of a header with traffic class 0: version 6.
pub const VER_TC_ZERO: u8 = 0x60;
pub const PAYLOAD_LEN: Field = 4..6;
pub const NEXT_HEADER: usize = 6;
pub const HOP_LIMIT: usize = 7;
pub const SRC: Field = 8..24;
pub const DST: Field = 24..40;
