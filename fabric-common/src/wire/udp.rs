//! UDP header (RFC 768).
use super::Field;

pub const HEADER_LEN: usize = 8;
pub const SRC_PORT: Field = 0..2;
pub const DST_PORT: Field = 2..4;
pub const LENGTH: Field = 4..6;
pub const CHECKSUM: Field = 6..8;

/// The IANA port of RoCEv2.
pub const ROCEV2_PORT: u16 = 4791;
