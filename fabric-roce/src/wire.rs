//! The RoCEv2 UDP payload of an RC RDMA WRITE endpoint: BTH, RETH, AETH and the packets built
//! from them (IBTA vol. 1, 9.2–9.4; annex A17 for RoCEv2 and the CNP), smoltcp style.
//!
//! Each header has a `*Packet<T>` view over bytes (`new_checked`, getters, setters on
//! `AsMut<[u8]>`) and a `*Repr` with `parse`/`emit`. [`RocePacketRepr`] is the whole UDP payload:
//! BTH, extension header, payload, pad, and room for the 4-byte ICRC trailer, which needs the IP
//! and UDP headers and is filled in by [`super::icrc`].
use std::fmt;

/// The BTH's layout, flags and opcodes are the switch parser's own ([`fabric_common::wire::bth`]),
/// so both agree by construction.
pub use fabric_common::wire::bth::{HEADER_LEN as BTH_LEN, ICRC_LEN, TRANSPORT_VERSION, opcode};
use fabric_common::wire::{bth as layout, ethernet, ipv4, ipv6, udp};

use super::psn::Psn;

/// Ethernet + IPv4 + UDP headers around a RoCEv2 datagram sent over IPv4: with the UDP payload,
/// the frame as XDP sees it (no FCS). Every count of frame bytes (the pacer's, the hosts'
/// downlink model's, the flow tables') starts from this one.
pub const IPV4_FRAME_HEADERS_LEN: usize = ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN + udp::HEADER_LEN;
/// The same over IPv6 (the fixed header, no extension headers: RoCEv2 senders put none).
pub const IPV6_FRAME_HEADERS_LEN: usize = ethernet::HEADER_LEN + ipv6::HEADER_LEN + udp::HEADER_LEN;

pub const RETH_LEN: usize = 16;
pub const AETH_LEN: usize = 4;
/// A CNP carries 16 reserved bytes after its BTH (annex A17.9.3).
pub const CNP_RESERVED_LEN: usize = 16;
/// The selective acknowledgement that follows the AETH of a reorder-tolerant QP's ACK: a 128-bit
/// bitmap, big-endian, bit `i` (counted from the least significant) saying whether PSN
/// `BTH.psn + 1 + i` has arrived. See [`Body::Sack`].
pub const SACK_LEN: usize = 16;
/// PSNs a SACK can describe: the reorder-tolerant window.
pub const SACK_BITS: u32 = (SACK_LEN * 8) as u32;

/// Byte offsets inside the extension headers (the BTH's are [`layout`]'s).
mod field {
    pub mod reth {
        use fabric_common::wire::Field;

        pub const VIRTUAL_ADDR: Field = 0..8;
        pub const RKEY: Field = 8..12;
        pub const DMA_LEN: Field = 12..16;
    }

    pub mod aeth {
        use fabric_common::wire::Field;

        pub const SYNDROME: usize = 0;
        pub const MSN: Field = 1..4;
    }
}

/// The header a length problem was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    Bth,
    Reth,
    Aeth,
    CnpReserved,
    Sack,
    Icrc,
}

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Header::Bth => "BTH",
            Header::Reth => "RETH",
            Header::Aeth => "AETH",
            Header::CnpReserved => "CNP reserved bytes",
            Header::Sack => "SACK bitmap",
            Header::Icrc => "ICRC",
        })
    }
}

/// Why bytes are not a RoCEv2 packet this endpoint understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated {header}: needs {needed} bytes, {available} left")]
    Truncated { header: Header, needed: usize, available: usize },
    #[error("BTH transport version {0}, only 0 is defined")]
    UnsupportedTransportVersion(u8),
    #[error("opcode {0:#04x} is not an RC RDMA WRITE, an ACKNOWLEDGE or a CNP")]
    UnsupportedOpcode(u8),
    #[error("{0}-byte packet: RoCE packets are padded to a multiple of 4 bytes")]
    UnalignedLength(usize),
    #[error("pad count {pad_count} exceeds the {padded_len}-byte payload")]
    PadLongerThanPayload { pad_count: u8, padded_len: usize },
    #[error("opcode {opcode:#04x} carries no payload (an ACK at most a {SACK_LEN}-byte SACK), found {len} bytes")]
    UnexpectedPayload { opcode: u8, len: usize },
    #[error("AETH syndrome {0:#04x} is reserved")]
    ReservedSyndrome(u8),
}

fn truncated(header: Header, needed: usize, available: usize) -> WireError {
    WireError::Truncated { header, needed, available }
}

fn read_u24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

fn write_u24(b: &mut [u8], value: u32) {
    b.copy_from_slice(&value.to_be_bytes()[1..]);
}

fn set_bit(byte: &mut u8, mask: u8, on: bool) {
    if on { *byte |= mask } else { *byte &= !mask }
}

/// Pad bytes that bring a payload of `payload_len` bytes to a multiple of 4.
pub const fn pad_count(payload_len: usize) -> u8 {
    ((4 - payload_len % 4) % 4) as u8
}

// ---------------------------------------------------------------------------------------------
// BTH

/// A view of a Base Transport Header at the start of `buffer`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BthPacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        BthPacket { buffer }
    }

    /// The view, or an error if `buffer` is shorter than a BTH.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < BTH_LEN { Err(truncated(Header::Bth, BTH_LEN, len)) } else { Ok(()) }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn opcode(&self) -> u8 {
        self.b()[layout::OPCODE]
    }

    pub fn solicited(&self) -> bool {
        self.b()[layout::FLAGS] & layout::FLAG_SOLICITED != 0
    }

    pub fn migreq(&self) -> bool {
        self.b()[layout::FLAGS] & layout::FLAG_MIGREQ != 0
    }

    pub fn pad_count(&self) -> u8 {
        (self.b()[layout::FLAGS] & layout::PAD_COUNT_MASK) >> layout::PAD_COUNT_SHIFT
    }

    pub fn transport_version(&self) -> u8 {
        self.b()[layout::FLAGS] & layout::TRANSPORT_VERSION_MASK
    }

    pub fn pkey(&self) -> u16 {
        let f = &self.b()[layout::PKEY];
        u16::from_be_bytes([f[0], f[1]])
    }

    pub fn fecn(&self) -> bool {
        self.b()[layout::FECN_BECN] & layout::FLAG_FECN != 0
    }

    pub fn becn(&self) -> bool {
        self.b()[layout::FECN_BECN] & layout::FLAG_BECN != 0
    }

    pub fn dest_qp(&self) -> u32 {
        read_u24(&self.b()[layout::DEST_QP])
    }

    pub fn ack_req(&self) -> bool {
        self.b()[layout::ACK_REQ] & layout::FLAG_ACK_REQ != 0
    }

    pub fn psn(&self) -> Psn {
        Psn::new(read_u24(&self.b()[layout::PSN]))
    }

    /// Everything after the BTH.
    pub fn payload(&self) -> &[u8] {
        &self.b()[BTH_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthPacket<T> {
    fn b_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    pub fn set_opcode(&mut self, value: u8) {
        self.b_mut()[layout::OPCODE] = value;
    }

    pub fn set_solicited(&mut self, on: bool) {
        set_bit(&mut self.b_mut()[layout::FLAGS], layout::FLAG_SOLICITED, on);
    }

    pub fn set_migreq(&mut self, on: bool) {
        set_bit(&mut self.b_mut()[layout::FLAGS], layout::FLAG_MIGREQ, on);
    }

    /// `value` is taken mod 4.
    pub fn set_pad_count(&mut self, value: u8) {
        let flags = &mut self.b_mut()[layout::FLAGS];
        *flags = (*flags & !layout::PAD_COUNT_MASK) | ((value << layout::PAD_COUNT_SHIFT) & layout::PAD_COUNT_MASK);
    }

    pub fn set_transport_version(&mut self, value: u8) {
        let flags = &mut self.b_mut()[layout::FLAGS];
        *flags = (*flags & !layout::TRANSPORT_VERSION_MASK) | (value & layout::TRANSPORT_VERSION_MASK);
    }

    pub fn set_pkey(&mut self, value: u16) {
        self.b_mut()[layout::PKEY].copy_from_slice(&value.to_be_bytes());
    }

    pub fn set_fecn(&mut self, on: bool) {
        set_bit(&mut self.b_mut()[layout::FECN_BECN], layout::FLAG_FECN, on);
    }

    pub fn set_becn(&mut self, on: bool) {
        set_bit(&mut self.b_mut()[layout::FECN_BECN], layout::FLAG_BECN, on);
    }

    /// `value` is taken mod 2^24.
    pub fn set_dest_qp(&mut self, value: u32) {
        write_u24(&mut self.b_mut()[layout::DEST_QP], value & layout::U24_MASK);
    }

    pub fn set_ack_req(&mut self, on: bool) {
        set_bit(&mut self.b_mut()[layout::ACK_REQ], layout::FLAG_ACK_REQ, on);
    }

    pub fn set_psn(&mut self, value: Psn) {
        write_u24(&mut self.b_mut()[layout::PSN], value.value());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.b_mut()[BTH_LEN..]
    }
}

/// Every field of a BTH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BthRepr {
    pub opcode: u8,
    pub solicited: bool,
    pub migreq: bool,
    pub pad_count: u8,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    /// 24 bits.
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: Psn,
}

impl BthRepr {
    /// Reads a BTH; rejects short buffers and transport versions other than 0.
    pub fn parse<T: AsRef<[u8]>>(packet: &BthPacket<T>) -> Result<Self, WireError> {
        packet.check_len()?;
        if packet.transport_version() != TRANSPORT_VERSION {
            return Err(WireError::UnsupportedTransportVersion(packet.transport_version()));
        }
        Ok(BthRepr {
            opcode: packet.opcode(),
            solicited: packet.solicited(),
            migreq: packet.migreq(),
            pad_count: packet.pad_count(),
            pkey: packet.pkey(),
            fecn: packet.fecn(),
            becn: packet.becn(),
            dest_qp: packet.dest_qp(),
            ack_req: packet.ack_req(),
            psn: packet.psn(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        BTH_LEN
    }

    /// Writes all 12 bytes, reserved bits as zero. Panics if the view is shorter than a BTH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut BthPacket<T>) {
        packet.b_mut()[..BTH_LEN].fill(0);
        packet.set_opcode(self.opcode);
        packet.set_solicited(self.solicited);
        packet.set_migreq(self.migreq);
        packet.set_pad_count(self.pad_count);
        packet.set_transport_version(TRANSPORT_VERSION);
        packet.set_pkey(self.pkey);
        packet.set_fecn(self.fecn);
        packet.set_becn(self.becn);
        packet.set_dest_qp(self.dest_qp);
        packet.set_ack_req(self.ack_req);
        packet.set_psn(self.psn);
    }
}

// ---------------------------------------------------------------------------------------------
// RETH

/// A view of an RDMA Extended Transport Header (first or only packet of an RDMA WRITE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RethPacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        RethPacket { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < RETH_LEN { Err(truncated(Header::Reth, RETH_LEN, len)) } else { Ok(()) }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn virtual_addr(&self) -> u64 {
        let f = &self.buffer.as_ref()[field::reth::VIRTUAL_ADDR];
        u64::from_be_bytes(f.try_into().expect("8-byte field"))
    }

    pub fn rkey(&self) -> u32 {
        let f = &self.buffer.as_ref()[field::reth::RKEY];
        u32::from_be_bytes(f.try_into().expect("4-byte field"))
    }

    pub fn dma_len(&self) -> u32 {
        let f = &self.buffer.as_ref()[field::reth::DMA_LEN];
        u32::from_be_bytes(f.try_into().expect("4-byte field"))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RethPacket<T> {
    pub fn set_virtual_addr(&mut self, value: u64) {
        self.buffer.as_mut()[field::reth::VIRTUAL_ADDR].copy_from_slice(&value.to_be_bytes());
    }

    pub fn set_rkey(&mut self, value: u32) {
        self.buffer.as_mut()[field::reth::RKEY].copy_from_slice(&value.to_be_bytes());
    }

    pub fn set_dma_len(&mut self, value: u32) {
        self.buffer.as_mut()[field::reth::DMA_LEN].copy_from_slice(&value.to_be_bytes());
    }
}

/// Where an RDMA WRITE lands: remote virtual address, remote key, total message length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RethRepr {
    pub virtual_addr: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

impl RethRepr {
    pub fn parse<T: AsRef<[u8]>>(packet: &RethPacket<T>) -> Result<Self, WireError> {
        packet.check_len()?;
        Ok(RethRepr { virtual_addr: packet.virtual_addr(), rkey: packet.rkey(), dma_len: packet.dma_len() })
    }

    pub const fn buffer_len(&self) -> usize {
        RETH_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut RethPacket<T>) {
        packet.set_virtual_addr(self.virtual_addr);
        packet.set_rkey(self.rkey);
        packet.set_dma_len(self.dma_len);
    }
}

// ---------------------------------------------------------------------------------------------
// AETH

/// The credit count that means "no end-to-end credits" (what rxe sends on every ACK).
pub const CREDIT_UNLIMITED: u8 = 0x1F;

/// A view of an ACK Extended Transport Header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AethPacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        AethPacket { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < AETH_LEN { Err(truncated(Header::Aeth, AETH_LEN, len)) } else { Ok(()) }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The raw syndrome byte; [`Syndrome::from_byte`] decodes it.
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[field::aeth::SYNDROME]
    }

    /// Message sequence number: messages the responder has completed, mod 2^24.
    pub fn msn(&self) -> u32 {
        read_u24(&self.buffer.as_ref()[field::aeth::MSN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AethPacket<T> {
    pub fn set_syndrome(&mut self, value: u8) {
        self.buffer.as_mut()[field::aeth::SYNDROME] = value;
    }

    pub fn set_msn(&mut self, value: u32) {
        write_u24(&mut self.buffer.as_mut()[field::aeth::MSN], value & layout::U24_MASK);
    }
}

/// NAK codes (IBTA vol. 1, table 44).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakCode {
    /// The responder expected another PSN: go back to the one in the NAK.
    PsnSequenceError = 0,
    InvalidRequest = 1,
    RemoteAccessError = 2,
    RemoteOperationalError = 3,
    InvalidRdRequest = 4,
}

/// What an ACK says: bits 6..5 select ACK (00), RNR NAK (01) or NAK (11); bits 4..0 the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syndrome {
    Ack { credit: u8 },
    RnrNak { timer: u8 },
    Nak(NakCode),
}

impl Syndrome {
    pub fn from_byte(byte: u8) -> Result<Self, WireError> {
        let value = byte & 0x1F;
        match byte >> 5 {
            0b000 => Ok(Syndrome::Ack { credit: value }),
            0b001 => Ok(Syndrome::RnrNak { timer: value }),
            0b011 => Ok(Syndrome::Nak(match value {
                0 => NakCode::PsnSequenceError,
                1 => NakCode::InvalidRequest,
                2 => NakCode::RemoteAccessError,
                3 => NakCode::RemoteOperationalError,
                4 => NakCode::InvalidRdRequest,
                _ => return Err(WireError::ReservedSyndrome(byte)),
            })),
            // 0b010 and bit 7 set are reserved.
            _ => Err(WireError::ReservedSyndrome(byte)),
        }
    }

    pub fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credit } => credit & 0x1F,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1F),
            Syndrome::Nak(code) => 0x60 | code as u8,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AethRepr {
    pub syndrome: Syndrome,
    /// 24 bits.
    pub msn: u32,
}

impl AethRepr {
    pub fn parse<T: AsRef<[u8]>>(packet: &AethPacket<T>) -> Result<Self, WireError> {
        packet.check_len()?;
        Ok(AethRepr { syndrome: Syndrome::from_byte(packet.syndrome())?, msn: packet.msn() })
    }

    pub const fn buffer_len(&self) -> usize {
        AETH_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut AethPacket<T>) {
        packet.set_syndrome(self.syndrome.to_byte());
        packet.set_msn(self.msn);
    }
}

// ---------------------------------------------------------------------------------------------
// Whole packets

/// The BTH fields a sender chooses; the opcode and pad count follow from the [`Body`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BthFields {
    pub pkey: u16,
    /// 24 bits.
    pub dest_qp: u32,
    pub psn: Psn,
    pub ack_req: bool,
    pub solicited: bool,
    pub migreq: bool,
    pub fecn: bool,
    pub becn: bool,
}

/// What follows the BTH, one variant per supported opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    WriteFirst {
        reth: RethRepr,
        payload: &'a [u8],
    },
    WriteMiddle {
        payload: &'a [u8],
    },
    WriteLast {
        payload: &'a [u8],
    },
    WriteOnly {
        reth: RethRepr,
        payload: &'a [u8],
    },
    /// A MIDDLE of a reorder-tolerant QP: a RETH with this packet's own address (the message's
    /// address plus the packet's offset), the message's key and its whole length.
    WriteMiddleAt {
        reth: RethRepr,
        payload: &'a [u8],
    },
    /// A LAST of a reorder-tolerant QP, its RETH as [`Body::WriteMiddleAt`]'s.
    WriteLastAt {
        reth: RethRepr,
        payload: &'a [u8],
    },
    Ack(AethRepr),
    /// An ACK of a reorder-tolerant QP with PSNs missing: the AETH (syndrome ACK; the BTH's PSN
    /// is the cumulative acknowledgement), then [`SACK_LEN`] bytes saying which PSNs after it
    /// have arrived (bit `i`: PSN `BTH.psn + 1 + i`). Opcode ACKNOWLEDGE, so every RoCE decoder
    /// shows a valid BTH and AETH; the bitmap sits where an ACK has nothing.
    Sack {
        aeth: AethRepr,
        received: u128,
    },
    /// Congestion notification: 16 reserved bytes, sent as zero and ignored on receipt.
    Cnp,
}

impl<'a> Body<'a> {
    pub const fn opcode(&self) -> u8 {
        match self {
            Body::WriteFirst { .. } => opcode::RC_WRITE_FIRST,
            Body::WriteMiddle { .. } | Body::WriteMiddleAt { .. } => opcode::RC_WRITE_MIDDLE,
            Body::WriteLast { .. } | Body::WriteLastAt { .. } => opcode::RC_WRITE_LAST,
            Body::WriteOnly { .. } => opcode::RC_WRITE_ONLY,
            Body::Ack(_) | Body::Sack { .. } => opcode::RC_ACK,
            Body::Cnp => opcode::CNP,
        }
    }

    /// The RDMA WRITE data this packet carries (empty for ACKs and CNPs), without pad.
    pub const fn payload(&self) -> &'a [u8] {
        match *self {
            Body::WriteFirst { payload, .. }
            | Body::WriteMiddle { payload }
            | Body::WriteLast { payload }
            | Body::WriteOnly { payload, .. }
            | Body::WriteMiddleAt { payload, .. }
            | Body::WriteLastAt { payload, .. } => payload,
            Body::Ack(_) | Body::Sack { .. } | Body::Cnp => &[],
        }
    }

    pub const fn reth(&self) -> Option<RethRepr> {
        match *self {
            Body::WriteFirst { reth, .. }
            | Body::WriteOnly { reth, .. }
            | Body::WriteMiddleAt { reth, .. }
            | Body::WriteLastAt { reth, .. } => Some(reth),
            _ => None,
        }
    }

    /// Length of the extension header between the BTH and the payload.
    const fn extension_len(&self) -> usize {
        match self {
            Body::WriteFirst { .. }
            | Body::WriteOnly { .. }
            | Body::WriteMiddleAt { .. }
            | Body::WriteLastAt { .. } => RETH_LEN,
            Body::Ack(_) => AETH_LEN,
            Body::Sack { .. } => AETH_LEN + SACK_LEN,
            Body::Cnp => CNP_RESERVED_LEN,
            Body::WriteMiddle { .. } | Body::WriteLast { .. } => 0,
        }
    }
}

/// Which WRITE packets carry a RETH (see [`RocePacketRepr::parse_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RethOn {
    /// The IBTA's layout: FIRST and ONLY.
    #[default]
    FirstAndOnly,
    /// Every WRITE packet (the reorder-tolerant transport: each packet says where it goes).
    EveryWrite,
}

/// A whole RoCEv2 UDP payload: BTH + extension header + payload + pad + ICRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RocePacketRepr<'a> {
    pub bth: BthFields,
    pub body: Body<'a>,
}

impl<'a> RocePacketRepr<'a> {
    /// A congestion notification to `dest_qp` (the sender of the marked flow), BECN set as
    /// annex A17.9.3 requires; PSN 0.
    pub fn cnp(dest_qp: u32, pkey: u16) -> Self {
        RocePacketRepr { bth: BthFields { pkey, dest_qp, becn: true, ..BthFields::default() }, body: Body::Cnp }
    }

    /// Parses a UDP payload that ends with the 4-byte ICRC (not checked here: see
    /// [`super::icrc::verify`]). The returned payload excludes the pad bytes. WRITE packets are
    /// read as the IBTA lays them out (RETH on FIRST and ONLY).
    pub fn parse(udp_payload: &'a [u8]) -> Result<Self, WireError> {
        Self::parse_with(udp_payload, RethOn::FirstAndOnly)
    }

    /// [`Self::parse`] for a QP whose WRITE packets carry their RETH as `reth_on` says: the
    /// bytes alone cannot tell a MIDDLE with a RETH from one whose data starts with 16 bytes.
    pub fn parse_with(udp_payload: &'a [u8], reth_on: RethOn) -> Result<Self, WireError> {
        let bth_packet = BthPacket::new_checked(udp_payload)?;
        let bth = BthRepr::parse(&bth_packet)?;
        let every = reth_on == RethOn::EveryWrite;
        let ext_len = match bth.opcode {
            opcode::RC_WRITE_FIRST | opcode::RC_WRITE_ONLY => RETH_LEN,
            opcode::RC_WRITE_MIDDLE | opcode::RC_WRITE_LAST if every => RETH_LEN,
            opcode::RC_WRITE_MIDDLE | opcode::RC_WRITE_LAST => 0,
            opcode::RC_ACK => AETH_LEN,
            opcode::CNP => CNP_RESERVED_LEN,
            other => return Err(WireError::UnsupportedOpcode(other)),
        };
        let after_bth = &udp_payload[BTH_LEN..];
        if after_bth.len() < ext_len {
            let header = match bth.opcode {
                opcode::RC_ACK => Header::Aeth,
                opcode::CNP => Header::CnpReserved,
                _ => Header::Reth,
            };
            return Err(truncated(header, ext_len, after_bth.len()));
        }
        let (ext, rest) = after_bth.split_at(ext_len);
        let Some(padded_len) = rest.len().checked_sub(ICRC_LEN) else {
            return Err(truncated(Header::Icrc, ICRC_LEN, rest.len()));
        };
        if !udp_payload.len().is_multiple_of(4) {
            return Err(WireError::UnalignedLength(udp_payload.len()));
        }
        let Some(payload_len) = padded_len.checked_sub(bth.pad_count as usize) else {
            return Err(WireError::PadLongerThanPayload { pad_count: bth.pad_count, padded_len });
        };
        let payload = &rest[..payload_len];
        let body = match bth.opcode {
            opcode::RC_WRITE_FIRST => {
                Body::WriteFirst { reth: RethRepr::parse(&RethPacket::new_unchecked(ext))?, payload }
            }
            opcode::RC_WRITE_ONLY => {
                Body::WriteOnly { reth: RethRepr::parse(&RethPacket::new_unchecked(ext))?, payload }
            }
            opcode::RC_WRITE_MIDDLE if every => {
                Body::WriteMiddleAt { reth: RethRepr::parse(&RethPacket::new_unchecked(ext))?, payload }
            }
            opcode::RC_WRITE_LAST if every => {
                Body::WriteLastAt { reth: RethRepr::parse(&RethPacket::new_unchecked(ext))?, payload }
            }
            opcode::RC_WRITE_MIDDLE => Body::WriteMiddle { payload },
            opcode::RC_WRITE_LAST => Body::WriteLast { payload },
            opcode::RC_ACK if padded_len == SACK_LEN && bth.pad_count == 0 => {
                let bitmap: [u8; SACK_LEN] = rest[..SACK_LEN].try_into().expect("length checked");
                let aeth = AethRepr::parse(&AethPacket::new_unchecked(ext))?;
                Body::Sack { aeth, received: u128::from_be_bytes(bitmap) }
            }
            opcode::RC_ACK | opcode::CNP => {
                if padded_len != 0 {
                    return Err(WireError::UnexpectedPayload { opcode: bth.opcode, len: padded_len });
                }
                if bth.opcode == opcode::RC_ACK {
                    Body::Ack(AethRepr::parse(&AethPacket::new_unchecked(ext))?)
                } else {
                    Body::Cnp
                }
            }
            _ => unreachable!("opcode checked above"),
        };
        let bth = BthFields {
            pkey: bth.pkey,
            dest_qp: bth.dest_qp,
            psn: bth.psn,
            ack_req: bth.ack_req,
            solicited: bth.solicited,
            migreq: bth.migreq,
            fecn: bth.fecn,
            becn: bth.becn,
        };
        Ok(RocePacketRepr { bth, body })
    }

    /// The complete BTH this packet is sent with.
    pub fn bth_repr(&self) -> BthRepr {
        BthRepr {
            opcode: self.body.opcode(),
            solicited: self.bth.solicited,
            migreq: self.bth.migreq,
            pad_count: pad_count(self.body.payload().len()),
            pkey: self.bth.pkey,
            fecn: self.bth.fecn,
            becn: self.bth.becn,
            dest_qp: self.bth.dest_qp,
            ack_req: self.bth.ack_req,
            psn: self.bth.psn,
        }
    }

    /// Bytes of the UDP payload, ICRC included.
    pub fn buffer_len(&self) -> usize {
        let payload = self.body.payload().len();
        BTH_LEN + self.body.extension_len() + payload + pad_count(payload) as usize + ICRC_LEN
    }

    /// Writes the first [`Self::buffer_len`] bytes of `buffer`: headers, payload, zero pad and a
    /// zero ICRC for [`super::icrc::write_icrc`] to fill. Panics if `buffer` is shorter.
    pub fn emit(&self, buffer: &mut [u8]) {
        let total = self.buffer_len();
        let buffer = &mut buffer[..total];
        self.bth_repr().emit(&mut BthPacket::new_unchecked(&mut *buffer));
        let rest = &mut buffer[BTH_LEN..];
        let (ext, rest) = rest.split_at_mut(self.body.extension_len());
        match self.body {
            Body::WriteFirst { reth, .. }
            | Body::WriteOnly { reth, .. }
            | Body::WriteMiddleAt { reth, .. }
            | Body::WriteLastAt { reth, .. } => reth.emit(&mut RethPacket::new_unchecked(ext)),
            Body::Ack(aeth) => aeth.emit(&mut AethPacket::new_unchecked(ext)),
            Body::Sack { aeth, received } => {
                let (aeth_bytes, bitmap) = ext.split_at_mut(AETH_LEN);
                aeth.emit(&mut AethPacket::new_unchecked(aeth_bytes));
                bitmap.copy_from_slice(&received.to_be_bytes());
            }
            Body::Cnp => ext.fill(0),
            Body::WriteMiddle { .. } | Body::WriteLast { .. } => {}
        }
        let payload = self.body.payload();
        rest[..payload.len()].copy_from_slice(payload);
        // Pad and ICRC: zero, whatever the buffer held before.
        rest[payload.len()..].fill(0);
    }

    /// The packet as a new buffer (ICRC zero).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut buffer = vec![0; self.buffer_len()];
        self.emit(&mut buffer);
        buffer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame 1 of the rxe capture (fabric-user/tests/data/rxe-rc-mixed.pcap) (rxe, ib_write_bw): RDMA WRITE FIRST to QP
    /// 0x11, PSN 16346650 (0xF96E1A), RETH VA 0x55578a4f8000, R_Key 0x29c, 3000 bytes.
    const RXE_WRITE_FIRST_HEADERS: [u8; 28] = [
        0x06, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0xf9, 0x6e, 0x1a, // BTH
        0x00, 0x00, 0x55, 0x57, 0x8a, 0x4f, 0x80, 0x00, 0x00, 0x00, 0x02, 0x9c, 0x00, 0x00, 0x0b, 0xb8,
    ];

    /// Frame 4 of the same capture: the ACK for PSN 0xF96E1C, syndrome 0x1F (ACK, credit
    /// invalid), MSN 1, then rxe's ICRC.
    const RXE_ACK: [u8; 20] = [
        0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0xf9, 0x6e, 0x1c, // BTH
        0x1f, 0x00, 0x00, 0x01, // AETH
        0x4b, 0xe9, 0x9f, 0x65, // ICRC
    ];

    /// A ConnectX CNP (NVIDIA's "RoCEv2 CNP Packet Format Example"): BECN set, QP 0xd2.
    const CX_CNP: [u8; 32] = [
        0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x00, 0xd2, 0x00, 0x00, 0x00, 0x00, // BTH
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // reserved
        0xe4, 0x2d, 0xad, 0x81, // ICRC
    ];

    fn rxe_bth() -> BthRepr {
        BthRepr {
            opcode: opcode::RC_WRITE_FIRST,
            solicited: false,
            migreq: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x11,
            ack_req: false,
            psn: Psn::new(16_346_650),
        }
    }

    fn rxe_reth() -> RethRepr {
        RethRepr { virtual_addr: 0x0000_5557_8a4f_8000, rkey: 0x29c, dma_len: 3000 }
    }

    #[test]
    fn bth_deconstruct() {
        let p = BthPacket::new_checked(&RXE_WRITE_FIRST_HEADERS[..]).unwrap();
        assert_eq!(p.opcode(), opcode::RC_WRITE_FIRST);
        assert!(!p.solicited() && !p.migreq() && !p.fecn() && !p.becn() && !p.ack_req());
        assert_eq!((p.pad_count(), p.transport_version()), (0, 0));
        assert_eq!(p.pkey(), 0xffff);
        assert_eq!(p.dest_qp(), 0x11);
        assert_eq!(p.psn(), Psn::new(0xF9_6E1A));
        assert_eq!(p.payload().len(), RETH_LEN);
        assert_eq!(BthRepr::parse(&p).unwrap(), rxe_bth());
    }

    #[test]
    fn bth_construct() {
        let mut bytes = [0xAAu8; BTH_LEN];
        rxe_bth().emit(&mut BthPacket::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, RXE_WRITE_FIRST_HEADERS[..BTH_LEN]);
    }

    #[test]
    fn bth_setters_touch_only_their_bits() {
        let mut bytes = [0u8; BTH_LEN];
        let mut p = BthPacket::new_unchecked(&mut bytes[..]);
        p.set_solicited(true);
        p.set_migreq(true);
        p.set_pad_count(3);
        p.set_becn(true);
        p.set_ack_req(true);
        p.set_dest_qp(0x1AB_CDEF); // 25 bits: the top one is dropped
        p.set_psn(Psn::new(0xFF_FFFF));
        assert_eq!(bytes, [0, 0xF0, 0, 0, 0x40, 0xAB, 0xCD, 0xEF, 0x80, 0xFF, 0xFF, 0xFF]);
        let mut p = BthPacket::new_unchecked(&mut bytes[..]);
        p.set_pad_count(1);
        p.set_becn(false);
        assert_eq!(&bytes[1..5], &[0xD0, 0, 0, 0]);
    }

    #[test]
    fn bth_round_trip() {
        let repr = BthRepr {
            opcode: opcode::RC_WRITE_LAST,
            solicited: true,
            migreq: false,
            pad_count: 2,
            pkey: 0x8001,
            fecn: true,
            becn: false,
            dest_qp: 0xFF_FFFE,
            ack_req: true,
            psn: Psn::new(0xFF_FFFF),
        };
        let mut bytes = [0u8; BTH_LEN];
        repr.emit(&mut BthPacket::new_unchecked(&mut bytes[..]));
        assert_eq!(BthRepr::parse(&BthPacket::new_checked(&bytes[..]).unwrap()).unwrap(), repr);
    }

    #[test]
    fn bth_rejects_short_buffers_and_unknown_versions() {
        assert_eq!(
            BthPacket::new_checked(&RXE_ACK[..11]).unwrap_err(),
            WireError::Truncated { header: Header::Bth, needed: 12, available: 11 }
        );
        let mut bytes = RXE_ACK;
        bytes[1] = 0x01;
        let p = BthPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(BthRepr::parse(&p).unwrap_err(), WireError::UnsupportedTransportVersion(1));
    }

    #[test]
    fn reth_deconstruct_construct_round_trip() {
        let bytes = &RXE_WRITE_FIRST_HEADERS[BTH_LEN..];
        let p = RethPacket::new_checked(bytes).unwrap();
        assert_eq!((p.virtual_addr(), p.rkey(), p.dma_len()), (0x0000_5557_8a4f_8000, 0x29c, 3000));
        assert_eq!(RethRepr::parse(&p).unwrap(), rxe_reth());
        let mut out = [0u8; RETH_LEN];
        rxe_reth().emit(&mut RethPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert_eq!(
            RethPacket::new_checked(&bytes[..15]).unwrap_err(),
            WireError::Truncated { header: Header::Reth, needed: 16, available: 15 }
        );
    }

    #[test]
    fn aeth_deconstruct_construct_round_trip() {
        let bytes = &RXE_ACK[BTH_LEN..BTH_LEN + AETH_LEN];
        let p = AethPacket::new_checked(bytes).unwrap();
        assert_eq!((p.syndrome(), p.msn()), (0x1f, 1));
        let repr = AethRepr::parse(&p).unwrap();
        assert_eq!(repr, AethRepr { syndrome: Syndrome::Ack { credit: CREDIT_UNLIMITED }, msn: 1 });
        let mut out = [0u8; AETH_LEN];
        repr.emit(&mut AethPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(AethPacket::new_checked(&bytes[..3]).is_err());
    }

    #[test]
    fn syndromes_encode_as_the_spec_numbers_them() {
        let cases = [
            (0x00, Syndrome::Ack { credit: 0 }),
            (0x1F, Syndrome::Ack { credit: 0x1F }),
            (0x2E, Syndrome::RnrNak { timer: 0x0E }),
            (0x60, Syndrome::Nak(NakCode::PsnSequenceError)),
            (0x61, Syndrome::Nak(NakCode::InvalidRequest)),
            (0x62, Syndrome::Nak(NakCode::RemoteAccessError)),
            (0x63, Syndrome::Nak(NakCode::RemoteOperationalError)),
            (0x64, Syndrome::Nak(NakCode::InvalidRdRequest)),
        ];
        for (byte, syndrome) in cases {
            assert_eq!(Syndrome::from_byte(byte), Ok(syndrome), "{byte:#x}");
            assert_eq!(syndrome.to_byte(), byte);
        }
        for reserved in [0x40, 0x5F, 0x65, 0x7F, 0x80, 0x9F, 0xFF] {
            assert_eq!(Syndrome::from_byte(reserved), Err(WireError::ReservedSyndrome(reserved)));
        }
    }

    fn fields(psn: u32) -> BthFields {
        BthFields { pkey: 0xffff, dest_qp: 0x11, psn: Psn::new(psn), ..BthFields::default() }
    }

    #[test]
    fn ack_packet_deconstruct_and_construct() {
        let repr = RocePacketRepr::parse(&RXE_ACK).unwrap();
        let expected = RocePacketRepr {
            bth: fields(0xF9_6E1C),
            body: Body::Ack(AethRepr { syndrome: Syndrome::Ack { credit: CREDIT_UNLIMITED }, msn: 1 }),
        };
        assert_eq!(repr, expected);
        assert_eq!(expected.buffer_len(), RXE_ACK.len());
        let mut out = [0xEEu8; 24];
        expected.emit(&mut out);
        assert_eq!(out[..16], RXE_ACK[..16]);
        assert_eq!(out[16..20], [0; 4], "room for the ICRC, zeroed");
        assert_eq!(out[20..], [0xEE; 4], "nothing past buffer_len");
    }

    #[test]
    fn cnp_deconstruct_and_construct() {
        let repr = RocePacketRepr::parse(&CX_CNP).unwrap();
        assert_eq!(repr, RocePacketRepr::cnp(0xd2, 0xffff));
        assert!(repr.bth.becn);
        let bytes = repr.to_bytes();
        assert_eq!(bytes.len(), 32);
        assert_eq!(bytes[..28], CX_CNP[..28]);
    }

    #[test]
    fn write_first_deconstruct() {
        let mut bytes = RXE_WRITE_FIRST_HEADERS.to_vec();
        bytes.extend_from_slice(&[7; 1024]);
        bytes.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let repr = RocePacketRepr::parse(&bytes).unwrap();
        assert_eq!(repr.bth, fields(16_346_650));
        assert_eq!(repr.body, Body::WriteFirst { reth: rxe_reth(), payload: &[7; 1024] });
        let mut again = repr.to_bytes();
        again[bytes.len() - ICRC_LEN..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(again, bytes);
    }

    #[test]
    fn every_body_round_trips_with_every_pad() {
        let data: Vec<u8> = (0..40).collect();
        for len in [0, 1, 2, 3, 4, 5, 39, 40] {
            let payload = &data[..len];
            let bodies = [
                Body::WriteFirst { reth: rxe_reth(), payload },
                Body::WriteMiddle { payload },
                Body::WriteLast { payload },
                Body::WriteOnly { reth: rxe_reth(), payload },
            ];
            for body in bodies {
                let repr = RocePacketRepr { bth: BthFields { ack_req: true, ..fields(9) }, body };
                let bytes = repr.to_bytes();
                assert_eq!(bytes.len() % 4, 0);
                let bth = BthPacket::new_checked(&bytes[..]).unwrap();
                assert_eq!(bth.pad_count() as usize, (4 - len % 4) % 4);
                assert_eq!(RocePacketRepr::parse(&bytes).unwrap(), repr, "{body:?}");
            }
        }
        let ack = RocePacketRepr {
            bth: fields(3),
            body: Body::Ack(AethRepr { syndrome: Syndrome::Nak(NakCode::PsnSequenceError), msn: 0xFF_FFFF }),
        };
        assert_eq!(RocePacketRepr::parse(&ack.to_bytes()).unwrap(), ack);
    }

    #[test]
    fn reorder_tolerant_bodies_round_trip_under_their_own_layout() {
        let data: Vec<u8> = (0..40).collect();
        let reth = RethRepr { virtual_addr: 0x1000 + 3 * 1024, rkey: 7, dma_len: 4000 };
        for len in [0, 1, 3, 40] {
            let payload = &data[..len];
            for body in [Body::WriteMiddleAt { reth, payload }, Body::WriteLastAt { reth, payload }] {
                let repr = RocePacketRepr { bth: fields(9), body };
                let bytes = repr.to_bytes();
                assert_eq!(bytes.len(), BTH_LEN + RETH_LEN + len + pad_count(len) as usize + ICRC_LEN);
                assert_eq!(RocePacketRepr::parse_with(&bytes, RethOn::EveryWrite).unwrap(), repr);
                // Read as the IBTA lays a MIDDLE out, the RETH is the first 16 bytes of data.
                let plain = RocePacketRepr::parse(&bytes).unwrap();
                assert_eq!(plain.body.opcode(), body.opcode());
                assert_eq!(plain.body.payload().len(), RETH_LEN + len);
            }
        }
        // A WRITE FIRST parses the same either way.
        let first = RocePacketRepr { bth: fields(2), body: Body::WriteFirst { reth, payload: &data } }.to_bytes();
        assert_eq!(RocePacketRepr::parse_with(&first, RethOn::EveryWrite), RocePacketRepr::parse(&first));
    }

    #[test]
    fn a_sack_is_an_ack_with_its_bitmap_after_the_aeth() {
        let received = (1u128 << 127) | 0b1011_0110;
        let aeth = AethRepr { syndrome: Syndrome::Ack { credit: CREDIT_UNLIMITED }, msn: 5 };
        let repr = RocePacketRepr { bth: fields(41), body: Body::Sack { aeth, received } };
        let bytes = repr.to_bytes();
        assert_eq!(bytes.len(), BTH_LEN + AETH_LEN + SACK_LEN + ICRC_LEN);
        assert_eq!(bytes[0], opcode::RC_ACK);
        assert_eq!(&bytes[BTH_LEN..BTH_LEN + AETH_LEN], &[0x1F, 0, 0, 5], "a valid AETH");
        assert_eq!(bytes[BTH_LEN + AETH_LEN], 0x80, "big-endian: bit 127 first");
        assert_eq!(bytes[BTH_LEN + AETH_LEN + SACK_LEN - 1], 0b1011_0110);
        assert_eq!(RocePacketRepr::parse(&bytes).unwrap(), repr);
        // Any other length after an AETH is still refused by name.
        let mut longer = bytes.clone();
        longer.splice(BTH_LEN + AETH_LEN..BTH_LEN + AETH_LEN, [0; 4]);
        assert_eq!(
            RocePacketRepr::parse(&longer).unwrap_err(),
            WireError::UnexpectedPayload { opcode: opcode::RC_ACK, len: SACK_LEN + 4 }
        );
    }

    #[test]
    fn write_only_pads_five_bytes_to_eight() {
        let repr = RocePacketRepr { bth: fields(1), body: Body::WriteOnly { reth: rxe_reth(), payload: b"hello" } };
        let bytes = repr.to_bytes();
        assert_eq!(bytes.len(), BTH_LEN + RETH_LEN + 8 + ICRC_LEN);
        assert_eq!(bytes[1], 0x30, "pad count 3");
        assert_eq!(&bytes[BTH_LEN + RETH_LEN..][..8], b"hello\0\0\0");
    }

    #[test]
    fn parse_names_what_is_wrong() {
        let ack = RXE_ACK;
        let err = |bytes: &[u8]| RocePacketRepr::parse(bytes).unwrap_err();
        assert_eq!(err(&ack[..5]), WireError::Truncated { header: Header::Bth, needed: 12, available: 5 });
        assert_eq!(err(&ack[..14]), WireError::Truncated { header: Header::Aeth, needed: 4, available: 2 });
        assert_eq!(err(&ack[..16]), WireError::Truncated { header: Header::Icrc, needed: 4, available: 0 });
        assert_eq!(
            err(&RXE_WRITE_FIRST_HEADERS[..20]),
            WireError::Truncated { header: Header::Reth, needed: 16, available: 8 }
        );
        assert_eq!(err(&CX_CNP[..24]), WireError::Truncated { header: Header::CnpReserved, needed: 16, available: 12 });

        let mut ack_with_data = RXE_ACK.to_vec();
        ack_with_data.extend_from_slice(&[0; 4]);
        assert_eq!(err(&ack_with_data), WireError::UnexpectedPayload { opcode: opcode::RC_ACK, len: 4 });

        let mut send = RXE_ACK;
        send[0] = opcode::RC_SEND_ONLY;
        assert_eq!(err(&send), WireError::UnsupportedOpcode(opcode::RC_SEND_ONLY));

        let middle = RocePacketRepr { bth: fields(1), body: Body::WriteMiddle { payload: &[1; 8] } }.to_bytes();
        assert_eq!(err(&middle[..middle.len() - 1]), WireError::UnalignedLength(middle.len() - 1));
        let mut short_pad = RocePacketRepr { bth: fields(1), body: Body::WriteMiddle { payload: &[] } }.to_bytes();
        short_pad[1] |= 0x20;
        assert_eq!(err(&short_pad), WireError::PadLongerThanPayload { pad_count: 2, padded_len: 0 });

        let mut nak = RXE_ACK;
        nak[BTH_LEN] = 0x6F;
        assert_eq!(err(&nak), WireError::ReservedSyndrome(0x6F));
    }
}
