//! InfiniBand Base Transport Header (IBTA spec vol. 1, 9.2), as RoCEv2 carries it over UDP.
use super::Field;

pub const HEADER_LEN: usize = 12;

pub const OPCODE: usize = 0;
/// Solicited event (bit 7), MigReq (6), pad count (5..4), transport version (3..0).
pub const FLAGS: usize = 1;
pub const PKEY: Field = 2..4;
/// FECN (bit 7), BECN (bit 6), reserved: masked in the ICRC.
pub const FECN_BECN: usize = 4;
pub const DEST_QP: Field = 5..8;
/// AckReq (bit 7), reserved (6..0).
pub const ACK_REQ: usize = 8;
pub const PSN: Field = 9..12;

/// In [`FLAGS`]: solicited event.
pub const FLAG_SOLICITED: u8 = 0x80;
/// In [`FLAGS`]: migration request.
pub const FLAG_MIGREQ: u8 = 0x40;
/// In [`FLAGS`]: the pad count (bytes that bring the payload to a multiple of 4), bits 5..4.
pub const PAD_COUNT_MASK: u8 = 0x30;
pub const PAD_COUNT_SHIFT: u8 = 4;
/// In [`FLAGS`]: the transport header version, bits 3..0.
pub const TRANSPORT_VERSION_MASK: u8 = 0x0F;
/// The only transport header version defined.
pub const TRANSPORT_VERSION: u8 = 0;
/// In [`FECN_BECN`]: forward explicit congestion notification.
pub const FLAG_FECN: u8 = 0x80;
/// In [`FECN_BECN`]: backward explicit congestion notification (set on every CNP).
pub const FLAG_BECN: u8 = 0x40;
/// In [`ACK_REQ`]: the requester asks for an acknowledgement.
pub const FLAG_ACK_REQ: u8 = 0x80;
/// Destination QP numbers and PSNs are 24-bit fields.
pub const U24_MASK: u32 = 0xFF_FFFF;

/// The ICRC trailer that ends every RoCEv2 packet.
pub const ICRC_LEN: usize = 4;

/// Reliable-connection opcodes (transport 000, the low five bits).
pub mod opcode {
    pub const RC_SEND_FIRST: u8 = 0x00;
    pub const RC_SEND_MIDDLE: u8 = 0x01;
    pub const RC_SEND_LAST: u8 = 0x02;
    pub const RC_SEND_ONLY: u8 = 0x04;
    pub const RC_WRITE_FIRST: u8 = 0x06;
    pub const RC_WRITE_MIDDLE: u8 = 0x07;
    pub const RC_WRITE_LAST: u8 = 0x08;
    pub const RC_WRITE_ONLY: u8 = 0x0A;
    pub const RC_READ_REQUEST: u8 = 0x0C;
    pub const RC_READ_RESPONSE_FIRST: u8 = 0x0D;
    pub const RC_READ_RESPONSE_MIDDLE: u8 = 0x0E;
    pub const RC_READ_RESPONSE_LAST: u8 = 0x0F;
    pub const RC_READ_RESPONSE_ONLY: u8 = 0x10;
    pub const RC_ACK: u8 = 0x11;
    /// Congestion notification packet (RoCEv2 annex A17).
    pub const CNP: u8 = 0x81;
}
