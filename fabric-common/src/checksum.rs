//! Internet checksum helpers (RFC 1071, incremental update per RFC 1624).

/// The ones'-complement checksum of `bytes` (an IPv4 header with its checksum field zeroed
/// yields the value to store).
pub fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum = 0u32;
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        sum += (*last as u32) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// The checksum after one 16-bit word of the covered data changes from `old` to `new`:
/// HC' = ~(~HC + ~m + m') (RFC 1624, eqn. 3), which never yields the wrong zero.
#[inline(always)]
pub const fn update_word(checksum: u16, old: u16, new: u16) -> u16 {
    let mut sum = (!checksum) as u32 + (!old) as u32 + new as u32;
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    !(sum as u16)
}

/// The IPv4 header checksum after the TTL drops from `ttl` to `ttl - 1`. TTL shares its
/// 16-bit word with the protocol byte. The caller has checked `ttl > 1` (wraps otherwise).
#[inline(always)]
pub const fn ipv4_ttl_decrement(checksum: u16, ttl: u8, protocol: u8) -> u16 {
    let old = ((ttl as u16) << 8) | protocol as u16;
    let new = ((ttl.wrapping_sub(1) as u16) << 8) | protocol as u16;
    update_word(checksum, old, new)
}
