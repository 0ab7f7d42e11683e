//! Packet buffers without an allocation per packet.
//!
//! Every packet the endpoint sends is written into a [`PacketBuf`]: one [`BytesMut`] block from
//! which each packet is cut as a [`Bytes`] (`split().freeze()`). A block is allocated once and
//! handed out packet by packet; when it is used up, the next packet reclaims it whole if every
//! packet cut from it has been dropped, and a new block is allocated only if some are still held
//! (queued behind a paused class, say). A driver that sends each packet and drops it, such as a
//! packet-level simulator, so runs on one block forever; one that queues pays one allocation
//! per block of packets, not one per packet.
use bytes::{Bytes, BytesMut};

/// Bytes of one block: about 60 packets at a 1024-byte path MTU.
pub const BLOCK_BYTES: usize = 64 * 1024;

/// Where packets are written: see the module docs.
#[derive(Debug)]
pub struct PacketBuf {
    block: BytesMut,
}

impl Default for PacketBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl PacketBuf {
    pub fn new() -> Self {
        PacketBuf { block: BytesMut::with_capacity(BLOCK_BYTES) }
    }

    /// A packet of `len` bytes: zeroed, then filled by `write`.
    pub fn packet(&mut self, len: usize, write: impl FnOnce(&mut [u8])) -> Bytes {
        debug_assert!(self.block.is_empty(), "every packet is split off whole");
        if self.block.capacity() < len {
            // Reclaims the block if nothing cut from it is alive, else allocates a new one.
            self.block.reserve(BLOCK_BYTES.max(len));
        }
        self.block.resize(len, 0);
        write(&mut self.block);
        self.block.split().freeze()
    }

    /// A copy of `bytes` as a packet (a received datagram kept for later, say).
    pub fn copy(&mut self, bytes: &[u8]) -> Bytes {
        self.packet(bytes.len(), |b| b.copy_from_slice(bytes))
    }

    /// Bytes left in the current block before the next reclaim or allocation.
    pub fn room(&self) -> usize {
        self.block.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_cut_from_one_block_and_it_is_reclaimed_once_they_are_dropped() {
        let mut buf = PacketBuf::new();
        let a = buf.packet(1000, |b| b[0] = 1);
        let base = a.as_ptr();
        let b = buf.copy(&[7; 24]);
        assert_eq!((a.len(), a[0], a[999]), (1000, 1, 0), "zeroed, then written");
        assert_eq!(&b[..], &[7; 24]);
        assert_eq!(b.as_ptr() as usize - base as usize, 1000, "the next packet follows in the same block");
        assert_eq!(buf.room(), BLOCK_BYTES - 1024);
        drop((a, b));
        // Use the block up: its packets are dropped as they go, so the block comes back whole.
        for _ in 0..3 * BLOCK_BYTES / 1000 {
            let p = buf.packet(1000, |_| {});
            assert!(p.as_ptr() >= base && p.as_ptr() < base.wrapping_add(BLOCK_BYTES), "reclaimed, not reallocated");
        }
    }

    #[test]
    fn a_block_still_shared_is_left_alone_and_a_new_one_taken() {
        let mut buf = PacketBuf::new();
        let held: Vec<Bytes> = (0..BLOCK_BYTES / 4096).map(|i| buf.packet(4096, |b| b.fill(i as u8))).collect();
        assert_eq!(buf.room(), 0);
        let next = buf.packet(4096, |b| b.fill(0xEE));
        let first = held[0].as_ptr();
        assert!(!(first..first.wrapping_add(BLOCK_BYTES)).contains(&next.as_ptr()), "a new block");
        assert!(held.iter().enumerate().all(|(i, p)| p.iter().all(|&x| x == i as u8)), "held packets intact");
        assert!(next.iter().all(|&x| x == 0xEE));
        // Larger than a block: one of its own.
        assert_eq!(buf.packet(BLOCK_BYTES + 1, |_| {}).len(), BLOCK_BYTES + 1);
    }
}
