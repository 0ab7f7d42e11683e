//! Per-port counters and the reasons a packet is dropped or handed to the kernel.
//!
//! The XDP program keeps one [`PortCounters`] per port in a per-CPU array (no atomics on the hot
//! path); userspace sums the CPUs. Layouts are shared so the two sides cannot drift.

/// Why a packet was dropped (or, for the `ToKernel*` reasons, handed to the kernel).
/// The discriminant is the index into [`PortCounters::drops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum DropReason {
    TruncatedEthernet = 0,
    TruncatedVlan = 1,
    TruncatedIpv4 = 2,
    BadIpv4Header = 3,
    TruncatedIpv6 = 4,
    BadIpv6Header = 5,
    IpLength = 6,
    TruncatedUdp = 7,
    BadUdpLength = 8,
    TruncatedBth = 9,
    NoRoute = 10,
    EmptyGroup = 11,
    RedirectFailed = 12,
    /// From a host port, with a source address that is not that host's.
    SpoofedSource = 13,
    /// The modelled egress queue of a lossy class was full.
    BufferOverflow = 14,
    /// A MAC control frame (EtherType 0x8808) that is not a valid PFC frame. MAC control frames
    /// are link-local: a valid one is consumed (it pauses the port), never forwarded.
    BadMacControl = 15,
    /// Lost on a link given injected loss (`fabric link degrade --loss`): the frame was queued
    /// and sent, and the link lost it (see [`crate::fault`]).
    LinkLoss = 16,
}

impl DropReason {
    pub const COUNT: usize = 17;

    pub const ALL: [DropReason; Self::COUNT] = [
        Self::TruncatedEthernet,
        Self::TruncatedVlan,
        Self::TruncatedIpv4,
        Self::BadIpv4Header,
        Self::TruncatedIpv6,
        Self::BadIpv6Header,
        Self::IpLength,
        Self::TruncatedUdp,
        Self::BadUdpLength,
        Self::TruncatedBth,
        Self::NoRoute,
        Self::EmptyGroup,
        Self::RedirectFailed,
        Self::SpoofedSource,
        Self::BufferOverflow,
        Self::BadMacControl,
        Self::LinkLoss,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TruncatedEthernet => "truncated_ethernet",
            Self::TruncatedVlan => "truncated_vlan",
            Self::TruncatedIpv4 => "truncated_ipv4",
            Self::BadIpv4Header => "bad_ipv4_header",
            Self::TruncatedIpv6 => "truncated_ipv6",
            Self::BadIpv6Header => "bad_ipv6_header",
            Self::IpLength => "ip_length",
            Self::TruncatedUdp => "truncated_udp",
            Self::BadUdpLength => "bad_udp_length",
            Self::TruncatedBth => "truncated_bth",
            Self::NoRoute => "no_route",
            Self::EmptyGroup => "empty_group",
            Self::RedirectFailed => "redirect_failed",
            Self::SpoofedSource => "spoofed_source",
            Self::BufferOverflow => "buffer_overflow",
            Self::BadMacControl => "bad_mac_control",
            Self::LinkLoss => "link_loss",
        }
    }
}

/// Why a packet went to the kernel's stack (XDP_PASS) instead of being forwarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum PassReason {
    /// Not IPv4/IPv6 (ARP, LLDP, ...).
    NotIp = 0,
    /// Addressed to the switch: a local route, or a group (multicast/broadcast) MAC.
    Local = 1,
    /// TTL or hop limit would expire here.
    TtlExpired = 2,
    /// Unicast frame for another MAC address.
    OtherHost = 3,
}

impl PassReason {
    pub const COUNT: usize = 4;
    pub const ALL: [PassReason; Self::COUNT] = [Self::NotIp, Self::Local, Self::TtlExpired, Self::OtherHost];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NotIp => "not_ip",
            Self::Local => "local",
            Self::TtlExpired => "ttl_expired",
            Self::OtherHost => "other_host",
        }
    }
}

/// Counters of one switch port (one CPU's share; userspace sums them). Every frame the program
/// sees on a port is counted in `rx_*` and ends in exactly one of: redirected (`tx_*` of the
/// egress port), a drop reason, a pass reason, or a consumed PFC frame. So on every switch,
/// summed over its ports, `rx_packets = tx_packets + drops + passes + rx_pfc_frames`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PortCounters {
    /// Frames the switch program received on this port, and their bytes.
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Frames the program redirected out of this port (the DEVMAP took them; a frame the veth
    /// then fails to deliver is dropped after XDP by the kernel, which counts it, not here).
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Received RoCEv2 packets (UDP 4791 with a complete BTH), and redirected ones.
    pub rx_roce_packets: u64,
    pub tx_roce_packets: u64,
    /// PFC frames received (and consumed) on this port; counted in `rx_packets` too.
    pub rx_pfc_frames: u64,
    pub drops: [u64; DropReason::COUNT],
    pub passes: [u64; PassReason::COUNT],
}

const _: () = assert!(core::mem::size_of::<PortCounters>() == 8 * (7 + DropReason::COUNT + PassReason::COUNT));

impl PortCounters {
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    pub fn total_passes(&self) -> u64 {
        self.passes.iter().sum()
    }

    /// Adds another CPU's share.
    pub fn accumulate(&mut self, other: &PortCounters) {
        self.rx_packets += other.rx_packets;
        self.rx_bytes += other.rx_bytes;
        self.tx_packets += other.tx_packets;
        self.tx_bytes += other.tx_bytes;
        self.rx_roce_packets += other.rx_roce_packets;
        self.tx_roce_packets += other.tx_roce_packets;
        self.rx_pfc_frames += other.rx_pfc_frames;
        for (a, b) in self.drops.iter_mut().zip(other.drops.iter()) {
            *a += *b;
        }
        for (a, b) in self.passes.iter_mut().zip(other.passes.iter()) {
            *a += *b;
        }
    }
}

/// The `MEMBER_COUNTERS` slot of member `member` of group `group`: a group's members are
/// [`crate::route::MAX_GROUP_MEMBERS`] slots apart. The switch and the controller both index so.
#[inline(always)]
pub const fn member_slot(group: u32, member: u32) -> u32 {
    group * crate::route::MAX_GROUP_MEMBERS as u32 + member
}

/// Packets and bytes sent through one ECMP group member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct MemberCounters {
    pub packets: u64,
    pub bytes: u64,
}

impl MemberCounters {
    pub fn accumulate(&mut self, other: &MemberCounters) {
        self.packets += other.packets;
        self.bytes += other.bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_counters_accumulate_every_field() {
        let mut a = PortCounters { rx_pfc_frames: 2, tx_roce_packets: 5, ..PortCounters::default() };
        a.drops[0] = 1;
        a.passes[0] = 4;
        let mut b = PortCounters { rx_pfc_frames: 3, tx_roce_packets: 7, ..PortCounters::default() };
        b.drops[0] = 10;
        b.passes[0] = 40;
        a.accumulate(&b);
        assert_eq!((a.rx_pfc_frames, a.tx_roce_packets, a.drops[0], a.passes[0]), (5, 12, 11, 44));
    }
}
