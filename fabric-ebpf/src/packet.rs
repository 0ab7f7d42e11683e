//! The packet accessor: the one place that turns offsets into packet pointers.
use aya_ebpf::programs::XdpContext;
use fabric_common::wire::PacketBytes;

/// `data`..`data_end` of the packet being processed.
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

    /// Mutable view of `N` bytes at `offset`.
    #[inline(always)]
    pub fn bytes_mut<const N: usize>(&self, offset: usize) -> Option<&mut [u8; N]> {
        // SAFETY: bounds checked against data_end; the packet buffer is writable in XDP and the
        // program holds no other reference to these bytes while this one is alive.
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
        // SAFETY: bounds checked against data_end by ptr_at.
        self.ptr_at::<N>(offset).map(|p| unsafe { &*p })
    }
}
