//! The packet accessor: the one place that turns offsets into packet pointers.
use aya_ebpf::programs::XdpContext;
use fabric_common::wire::PacketBytes;

/// `data`..`data_end` of the packet being processed. One per program invocation: it stands for
/// the packet's bytes, so a mutable view of them borrows it mutably (see [`Self::bytes_mut`]).
pub struct XdpPacket {
    data: usize,
    data_end: usize,
}

impl XdpPacket {
    #[inline(always)]
    pub fn new(ctx: &XdpContext) -> Self {
        Self { data: ctx.data(), data_end: ctx.data_end() }
    }

    /// Pointer to `N` bytes at `offset` if they lie inside the packet. The comparison is made on
    /// the pointer itself (`data + offset + N > data_end`), which is what the verifier tracks.
    #[inline(always)]
    fn ptr_at<const N: usize>(&self, offset: usize) -> Option<*mut [u8; N]> {
        let start = self.data + offset;
        if start + N > self.data_end {
            return None;
        }
        Some(start as *mut [u8; N])
    }

    /// Mutable view of `N` bytes at `offset`. It borrows the packet mutably, so no other view of
    /// the packet's bytes (mutable or not) can be alive at the same time.
    #[inline(always)]
    pub fn bytes_mut<const N: usize>(&mut self, offset: usize) -> Option<&mut [u8; N]> {
        // SAFETY: `ptr_at` returned the pointer only if `data + offset + N <= data_end` (the
        // check the verifier tracks), so the N bytes lie inside the packet, which is valid for
        // the program's run; XDP packet data is writable, and `[u8; N]` has alignment 1. `&mut
        // self` guarantees that no other reference into the packet from this accessor is alive.
        self.ptr_at::<N>(offset).map(|p| unsafe { &mut *p })
    }
}

impl PacketBytes for XdpPacket {
    #[inline(always)]
    fn len(&self) -> usize {
        self.data_end - self.data
    }

    #[inline(always)]
    fn bytes<const N: usize>(&self, offset: usize) -> Option<&[u8; N]> {
        // SAFETY: `ptr_at` returned the pointer only if the N bytes at `offset` lie inside
        // `data..data_end` (the packet, valid for the program's run); `[u8; N]` has alignment 1;
        // the shared borrow of `self` excludes a live `bytes_mut` view.
        self.ptr_at::<N>(offset).map(|p| unsafe { &*p })
    }
}

#[cfg(test)]
mod tests {
    use fabric_common::{
        parse::{IpHeader, parse_packet},
        wire::{PacketBytes, ethernet, ipv4},
    };

    use super::XdpPacket;

    /// The accessor over a host buffer, as the kernel hands it `data`..`data_end`. The buffer
    /// must outlive the packet and not be touched while the packet is in use.
    fn over(buf: &mut [u8]) -> XdpPacket {
        let data = buf.as_mut_ptr() as usize;
        XdpPacket { data, data_end: data + buf.len() }
    }

    /// The same answer as the slice accessor `fabric_common` is tested with, for one size.
    fn agrees_with_slice<const N: usize>(bytes: &[u8]) {
        let mut buf = bytes.to_vec();
        let pkt = over(&mut buf);
        for offset in 0..bytes.len() + N + 2 {
            assert_eq!(pkt.bytes::<N>(offset), bytes.bytes::<N>(offset), "N = {N}, offset {offset}");
        }
    }

    #[test]
    fn bounds_check_admits_exactly_the_bytes_inside_the_packet() {
        let bytes: Vec<u8> = (0..20).collect();
        let mut buf = bytes.clone();
        let pkt = over(&mut buf);
        assert_eq!(pkt.len(), 20);
        assert_eq!(pkt.bytes::<4>(16), Some(&[16, 17, 18, 19]));
        assert_eq!(pkt.bytes::<4>(17), None);
        assert_eq!(pkt.bytes::<20>(0).map(|b| b[19]), Some(19));
        assert_eq!(pkt.bytes::<21>(0), None);
        assert_eq!(pkt.bytes::<1>(20), None);
        assert_eq!(pkt.u16_at(18), Some(0x1213));
        assert_eq!(pkt.u16_at(19), None);
        agrees_with_slice::<1>(&bytes);
        agrees_with_slice::<2>(&bytes);
        agrees_with_slice::<6>(&bytes);
        agrees_with_slice::<20>(&bytes);
    }

    #[test]
    fn an_empty_packet_has_no_bytes() {
        let mut buf = [0u8; 0];
        let mut pkt = over(&mut buf);
        assert_eq!(pkt.len(), 0);
        assert!(pkt.is_empty());
        assert_eq!(pkt.bytes::<1>(0), None);
        assert!(pkt.bytes_mut::<1>(0).is_none());
    }

    #[test]
    fn bytes_mut_writes_the_packet_in_place() {
        let mut buf = [0u8; 16];
        let mut pkt = over(&mut buf);
        pkt.bytes_mut::<2>(14).expect("inside").copy_from_slice(&[0xAB, 0xCD]);
        assert!(pkt.bytes_mut::<2>(15).is_none());
        assert_eq!(pkt.bytes::<2>(14), Some(&[0xAB, 0xCD]));
        assert_eq!(buf[13..], [0, 0xAB, 0xCD]);
    }

    /// An Ethernet/IPv4/UDP/RoCEv2 frame with 4 payload bytes and the ICRC.
    fn roce_frame() -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
        let ip_len: u16 = 20 + 8 + 12 + 4 + 4;
        f.extend_from_slice(&[0x45, 0x02]);
        f.extend_from_slice(&ip_len.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 1, 1]);
        f.extend_from_slice(&[0xC0, 0x00, 0x12, 0xB7]);
        f.extend_from_slice(&(ip_len - 20).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&[0x04, 0, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 1]);
        f.extend_from_slice(&[1, 2, 3, 4, 0xDE, 0xAD, 0xBE, 0xEF]);
        f
    }

    #[test]
    fn parser_sees_the_same_packet_through_the_xdp_accessor_at_every_length() {
        let frame = roce_frame();
        let mut buf = frame.clone();
        let full = parse_packet(&over(&mut buf)).expect("a well-formed RoCEv2 frame");
        assert!(full.is_roce());
        assert_eq!(full.l3_offset, ethernet::HEADER_LEN);
        assert!(
            matches!(full.ip, IpHeader::V4 { ttl: 64, header_len, .. } if header_len as usize == ipv4::MIN_HEADER_LEN)
        );
        for len in 0..=frame.len() {
            let mut buf = frame[..len].to_vec();
            assert_eq!(parse_packet(&over(&mut buf)), parse_packet(&frame[..len]), "truncated to {len} bytes");
        }
    }
}
