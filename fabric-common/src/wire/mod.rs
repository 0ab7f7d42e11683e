//! Header layouts, smoltcp style: one module per header with named byte offsets.
//!
//! Parsing goes through [`PacketBytes`], the single bounds-checked accessor: the XDP program
//! implements it with a `data`/`data_end` pointer check the verifier understands, the host
//! implements it for byte slices, and [`crate::parse`] is written once against it.

pub mod bth;
pub mod ethernet;
pub mod ipv4;
pub mod ipv6;
pub mod udp;

/// A byte range inside a header.
pub type Field = core::ops::Range<usize>;

/// Bounds-checked, read-only access to a packet's bytes.
pub trait PacketBytes {
    /// Total length of the packet in bytes.
    fn len(&self) -> usize;

    /// The `N` bytes starting at `offset`, or `None` when the packet ends before them.
    fn bytes<const N: usize>(&self, offset: usize) -> Option<&[u8; N]>;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline(always)]
    fn u8_at(&self, offset: usize) -> Option<u8> {
        self.bytes::<1>(offset).map(|b| b[0])
    }

    #[inline(always)]
    fn u16_at(&self, offset: usize) -> Option<u16> {
        self.bytes::<2>(offset).map(|b| u16::from_be_bytes(*b))
    }
}

impl PacketBytes for [u8] {
    #[inline(always)]
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    #[inline(always)]
    fn bytes<const N: usize>(&self, offset: usize) -> Option<&[u8; N]> {
        let end = offset.checked_add(N)?;
        self.get(offset..end)?.try_into().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Slices have inherent `len`/`is_empty`: the trait's are called by path.
    #[test]
    fn is_empty_only_for_a_packet_of_no_bytes() {
        assert!(PacketBytes::is_empty(&[][..]));
        assert!(!PacketBytes::is_empty(&[0u8][..]));
    }

    #[test]
    fn accessors_read_big_endian_within_bounds_and_none_past_the_end() {
        let p: &[u8] = &[0x12, 0x34, 0x56];
        assert_eq!(p.u8_at(0), Some(0x12));
        assert_eq!(p.u8_at(2), Some(0x56));
        assert_eq!(p.u8_at(3), None);
        assert_eq!(p.u16_at(1), Some(0x3456));
        assert_eq!(p.u16_at(2), None);
        assert_eq!(p.bytes::<2>(usize::MAX), None, "offset + N overflows: no panic, None");
    }
}
