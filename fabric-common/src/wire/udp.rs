//! UDP header (RFC 768).
use core::mem::offset_of;

use network_types::udp::UdpHdr;

use super::Field;

pub const HEADER_LEN: usize = UdpHdr::LEN;
pub const SRC_PORT: Field = offset_of!(UdpHdr, src)..offset_of!(UdpHdr, dst);
pub const DST_PORT: Field = offset_of!(UdpHdr, dst)..offset_of!(UdpHdr, len);
pub const LENGTH: Field = offset_of!(UdpHdr, len)..offset_of!(UdpHdr, check);
pub const CHECKSUM: Field = offset_of!(UdpHdr, check)..HEADER_LEN;

/// The IANA port of RoCEv2.
pub const ROCEV2_PORT: u16 = 4791;

// The layout as RFC 768 draws it.
const _: () = assert!(HEADER_LEN == 8 && DST_PORT.start == 2 && CHECKSUM.start == 6);
