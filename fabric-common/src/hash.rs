//! The switch hash and ECMP member selection.
//!
//! Switch ASICs hash with CRC variants; we do the same: a table-driven CRC-32 (the reflected
//! IEEE polynomial, shared with the RoCEv2 ICRC) over a fixed 16-byte [`FlowKey`], seeded per
//! switch. CRC is linear, so a different seed alone would only XOR every hash with a constant:
//! with a power-of-two group that merely permutes the members, and two tiers would still make
//! correlated choices (polarisation). A final avalanche (murmur3's `fmix32`) breaks that.

use crate::config::{HashMode, SwitchConfig};
use crate::parse::{IpHeader, ParsedPacket};

/// CRC-32 lookup tables for the reflected polynomial 0xEDB88320, for slicing by four:
/// `CRC32_TABLES[0]` is the classic byte table, `[k]` advances a byte through k more zero bytes.
pub static CRC32_TABLES: [[u32; 256]; 4] = crc32_tables();

/// The classic byte-at-a-time table.
pub static CRC32_TABLE: [u32; 256] = CRC32_TABLES[0];

const fn crc32_tables() -> [[u32; 256]; 4] {
    let mut t = [[0u32; 256]; 4];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut k = 1;
        while k < 4 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            k += 1;
        }
        i += 1;
    }
    t
}

/// Feeds `bytes` into a running CRC-32 register (no pre/post inversion: callers decide).
/// Host code (the ICRC of every packet our endpoints send and receive): whole words slicing by
/// four, the tail a byte at a time. The XDP program hashes with [`crc32_update_words`].
#[inline]
pub fn crc32_update(mut crc: u32, bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(4);
    for c in &mut chunks {
        crc = crc32_update_words(crc, &[u32::from_le_bytes([c[0], c[1], c[2], c[3]])]);
    }
    for &b in chunks.remainder() {
        crc = CRC32_TABLE[((crc ^ b as u32) & 0xFF) as usize] ^ (crc >> 8);
    }
    crc
}

/// The same CRC over whole little-endian 32-bit words, four table lookups per word (slicing by
/// four): a quarter of the byte loop's work. Each index is a shift and an AND of the register,
/// which the verifier bounds on every kernel (6.1 loses the bounds of an XOR with a non-constant
/// operand, which is what LLVM makes of the byte loop's index).
#[inline(always)]
pub fn crc32_update_words(mut crc: u32, words: &[u32]) -> u32 {
    for &w in words {
        crc ^= w;
        crc = CRC32_TABLES[3][(crc & 0xFF) as usize]
            ^ CRC32_TABLES[2][((crc >> 8) & 0xFF) as usize]
            ^ CRC32_TABLES[1][((crc >> 16) & 0xFF) as usize]
            ^ CRC32_TABLES[0][((crc >> 24) & 0xFF) as usize];
    }
    crc
}

/// The standard CRC-32 (zlib, Ethernet FCS) of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    !crc32_update(!0, bytes)
}

/// murmur3's 32-bit finaliser: every input bit affects every output bit.
#[inline(always)]
pub const fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85EB_CA6B);
    h ^= h >> 13;
    h = h.wrapping_mul(0xC2B2_AE35);
    h ^= h >> 16;
    h
}

/// The fields a hash mode selects, laid out as the bytes that are hashed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowKey {
    /// Source and destination addresses; IPv6 addresses are folded to 32 bits (XOR of their
    /// words), as ASICs compress wide fields, so one key layout serves both families.
    pub src: u32,
    pub dst: u32,
    pub protocol: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// The BTH destination QP (24 bits); 0 unless the mode is `eecmp` and the packet is RoCE.
    pub dest_qp: u32,
}

impl FlowKey {
    pub const LEN: usize = 16;

    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let s = self.src.to_be_bytes();
        let d = self.dst.to_be_bytes();
        let sp = self.src_port.to_be_bytes();
        let dp = self.dst_port.to_be_bytes();
        let q = self.dest_qp.to_be_bytes();
        [s[0], s[1], s[2], s[3], d[0], d[1], d[2], d[3], self.protocol, sp[0], sp[1], dp[0], dp[1], q[1], q[2], q[3]]
    }

    /// The key `mode` hashes for `pkt`. Packets without ports (non-UDP, later fragments) hash on
    /// addresses and protocol; non-RoCE packets in `eecmp` mode get exactly the five-tuple key.
    #[inline(always)]
    pub fn for_packet(mode: HashMode, pkt: &ParsedPacket) -> Self {
        let (src, dst) = folded_addresses(&pkt.ip);
        let (src_port, dst_port) = pkt.ports.unwrap_or((0, 0));
        let dest_qp = match (mode, pkt.bth) {
            (HashMode::Eecmp | HashMode::Te | HashMode::Flowlet | HashMode::Adaptive | HashMode::Wcmp, Some(bth)) => {
                bth.dest_qp
            }
            _ => 0,
        };
        FlowKey { src, dst, protocol: pkt.protocol, src_port, dst_port, dest_qp }
    }
}

#[inline(always)]
fn fold16(a: &[u8; 16]) -> u32 {
    u32::from_be_bytes([a[0], a[1], a[2], a[3]])
        ^ u32::from_be_bytes([a[4], a[5], a[6], a[7]])
        ^ u32::from_be_bytes([a[8], a[9], a[10], a[11]])
        ^ u32::from_be_bytes([a[12], a[13], a[14], a[15]])
}

#[inline(always)]
fn folded_addresses(ip: &IpHeader) -> (u32, u32) {
    match ip {
        IpHeader::V4 { src, dst, .. } => (u32::from_be_bytes(*src), u32::from_be_bytes(*dst)),
        IpHeader::V6 { src, dst, .. } => (fold16(src), fold16(dst)),
    }
}

/// The low 32 bits of the destination address: what `pin` mode indexes by.
#[inline(always)]
fn destination_low32(ip: &IpHeader) -> u32 {
    match ip {
        IpHeader::V4 { dst, .. } => u32::from_be_bytes(*dst),
        IpHeader::V6 { dst, .. } => u32::from_be_bytes([dst[12], dst[13], dst[14], dst[15]]),
    }
}

/// The seeded switch hash of a key: the CRC of its bytes (as [`FlowKey::to_bytes`] lays them
/// out), computed a word at a time.
#[inline(always)]
pub fn hash_key(seed: u32, key: &FlowKey) -> u32 {
    let b = key.to_bytes();
    let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    fmix32(crc32_update_words(seed, &[w(0), w(4), w(8), w(12)]))
}

/// Maps a 32-bit hash onto `0..n` by multiply-shift (uses the high bits, no division).
#[inline(always)]
pub const fn scale_to_members(hash: u32, n: u32) -> u32 {
    ((hash as u64 * n as u64) >> 32) as u32
}

/// The member index (in `0..n`) that a switch configured with `cfg` picks for `pkt`.
/// `n` must be non-zero.
///
/// `pin` models path pinning: the member is a fixed function of the destination alone,
/// `(dst >> pin_shift) mod n`, i.e. a destination "slice" (its RTSW downlink index when the
/// controller sets `pin_shift` to the bits of a host's link prefix). Only the low five bits of
/// `pin_shift` count (a shift is at most 31).
#[inline(always)]
pub fn select_member(cfg: &SwitchConfig, pkt: &ParsedPacket, n: u32) -> u32 {
    match HashMode::from_u32(cfg.hash_mode) {
        HashMode::Pin => (destination_low32(&pkt.ip) >> (cfg.pin_shift & 31)) % n,
        mode => scale_to_members(hash_key(cfg.seed, &FlowKey::for_packet(mode, pkt)), n),
    }
}
