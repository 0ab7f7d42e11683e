//! Quality of service: priority classes, buffer limits, ECN and PFC thresholds of one switch,
//! and the decision the XDP program takes for each forwarded packet from its modelled queue.
//!
//! Classes follow the common DSCP-to-traffic-class default (the IP precedence, `DSCP >> 3`):
//! RoCE data on DSCP 26 is class 3, the lossless class; CNPs on DSCP 48 are class 6.
use crate::parse::{IpHeader, ParsedPacket};
use crate::pfc::CLASSES;
use crate::queue::{RedParams, is_ect};

/// How a switch's buffer limits its queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum BufferMode {
    /// Each port/class may use `port_buffer_bytes` (a deep-buffer switch split evenly).
    Static = 0,
    /// A shared pool with a dynamic threshold: a queue may grow to `alpha x (pool - used)`,
    /// as shallow-buffer switch chips do.
    Shared = 1,
}

/// The congestion model of one switch (one entry of the `QOS` map).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct QosConfig {
    /// 0: forward without the model (no queues, marks, drops or pauses).
    pub enabled: u32,
    /// Bit n set: class n is lossless (PFC instead of drops).
    pub lossless_classes: u32,
    pub red: RedParams,
    /// PFC: an ingress holding more than this (in a lossless class) pauses its upstream.
    pub xoff_bytes: u32,
    /// ... and resumes it once it holds less than this.
    pub xon_bytes: u32,
    /// Buffer reserved per lossless port/class beyond its limit for the bytes in flight while a
    /// pause takes effect.
    pub headroom_bytes: u32,
    /// A [`BufferMode`].
    pub buffer_mode: u32,
    /// Static mode: the limit of each port/class queue.
    pub port_buffer_bytes: u32,
    /// Shared mode: alpha x 256.
    pub alpha_x256: u32,
    /// Shared mode: the pool.
    pub pool_bytes: u64,
}

const _: () = assert!(core::mem::size_of::<QosConfig>() == 56);

/// Counters of one port and class (one CPU's share; userspace sums them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ClassCounters {
    /// Packets and bytes queued on this egress port/class.
    pub packets: u64,
    pub bytes: u64,
    /// ECT packets marked CE here.
    pub ecn_marked: u64,
    /// Lossy packets dropped because the queue was full.
    pub overflow_drops: u64,
    /// Lossless packets queued above limit + headroom: a real switch would have dropped them
    /// (its headroom too small); counted, never dropped.
    pub over_headroom: u64,
    /// Packets forwarded while this egress class was paused: design A keeps forwarding them; a
    /// real switch would have held them. The honest measure of the model's error.
    pub sent_while_paused: u64,
    /// Ingress side: times this port/class crossed Xoff and asked the agent for a pause.
    pub xoff_events: u64,
    /// Ingress side: XOFF events the ring buffer had no room for.
    pub xoff_events_lost: u64,
}

const _: () = assert!(core::mem::size_of::<ClassCounters>() == 64);

impl ClassCounters {
    pub fn accumulate(&mut self, o: &ClassCounters) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.ecn_marked += o.ecn_marked;
        self.overflow_drops += o.overflow_drops;
        self.over_headroom += o.over_headroom;
        self.sent_while_paused += o.sent_while_paused;
        self.xoff_events += o.xoff_events;
        self.xoff_events_lost += o.xoff_events_lost;
    }
}

/// What the XDP program tells its agent through the ring buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PfcEvent {
    /// When the ingress crossed Xoff (monotonic ns).
    pub time_ns: u64,
    pub held_bytes: u64,
    /// The ingress port's index.
    pub port: u32,
    pub class: u32,
}

const _: () = assert!(core::mem::size_of::<PfcEvent>() == 24);

/// Index of a port/class in the per-class maps.
#[inline(always)]
pub const fn class_slot(port: u32, class: usize) -> u32 {
    port * CLASSES as u32 + (class as u32 & (CLASSES as u32 - 1))
}

/// The TOS / traffic class byte of a parsed packet.
#[inline(always)]
pub const fn tos_of(pkt: &ParsedPacket) -> u8 {
    match pkt.ip {
        IpHeader::V4 { tos, .. } => tos,
        IpHeader::V6 { traffic_class, .. } => traffic_class,
    }
}

/// The packet's priority class: its DSCP's precedence bits.
#[inline(always)]
pub const fn class_of(tos: u8) -> usize {
    (tos >> 5) as usize
}

/// The fate of a packet offered to a modelled queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Queue and forward it; `mark` says whether to set CE.
    Forward { mark: bool, over_headroom: bool },
    /// A lossy class with a full queue: drop it.
    Overflow,
}

impl QosConfig {
    #[inline(always)]
    pub const fn is_lossless(&self, class: usize) -> bool {
        self.lossless_classes & (1 << (class & (CLASSES - 1))) != 0
    }

    /// The most a port/class queue may hold, given the shared pool's use.
    #[inline(always)]
    pub const fn queue_limit(&self, pool_used_bytes: u64) -> u64 {
        if self.buffer_mode == BufferMode::Shared as u32 {
            let free = self.pool_bytes.saturating_sub(pool_used_bytes);
            (free / 256) * self.alpha_x256 as u64
        } else {
            self.port_buffer_bytes as u64
        }
    }

    /// Decides a packet's fate from the depth its queue would have with it, `random` a uniform
    /// u32 for RED.
    #[inline(always)]
    pub fn verdict(&self, tos: u8, depth_with_packet: u64, limit: u64, random: u32) -> Verdict {
        self.verdict_with(tos, depth_with_packet, limit, || random)
    }

    /// [`Self::verdict`] with the random number drawn by `draw` only when RED needs one: an
    /// ECN-capable packet at a depth whose marking probability is strictly between 0 and 1 (the
    /// same verdicts, and the XDP switch skips the helper call on an idle or a full queue).
    #[inline(always)]
    pub fn verdict_with(&self, tos: u8, depth_with_packet: u64, limit: u64, draw: impl FnOnce() -> u32) -> Verdict {
        let class = class_of(tos);
        let over = depth_with_packet > limit;
        if over && !self.is_lossless(class) {
            return Verdict::Overflow;
        }
        let over_headroom = over && depth_with_packet > limit + self.headroom_bytes as u64;
        let mark = is_ect(tos) && self.red.should_mark_with(depth_with_packet, draw);
        Verdict::Forward { mark, over_headroom }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> QosConfig {
        QosConfig {
            enabled: 1,
            lossless_classes: 1 << 3,
            red: RedParams::new(10_000, 50_000, 0.1),
            xoff_bytes: 40_000,
            xon_bytes: 20_000,
            headroom_bytes: 30_000,
            buffer_mode: BufferMode::Static as u32,
            port_buffer_bytes: 100_000,
            alpha_x256: 256,
            pool_bytes: 1 << 20,
        }
    }

    #[test]
    fn classes_come_from_the_dscp() {
        assert_eq!(class_of(26 << 2 | 0b10), 3, "RoCE data, DSCP 26 ECT(0)");
        assert_eq!(class_of(48 << 2), 6, "CNP, DSCP 48");
        assert_eq!(class_of(0), 0);
        assert_eq!(class_slot(2, 3), 19);
        assert!(cfg().is_lossless(3) && !cfg().is_lossless(0));
    }

    #[test]
    fn lossy_classes_drop_at_the_limit_and_lossless_ones_never_do() {
        let c = cfg();
        let ect_lossy = 0b10;
        let ect_lossless = 26 << 2 | 0b10;
        assert_eq!(c.verdict(ect_lossy, 100_001, 100_000, 0), Verdict::Overflow);
        assert!(matches!(c.verdict(ect_lossy, 100_000, 100_000, u32::MAX), Verdict::Forward { .. }));
        assert_eq!(
            c.verdict(ect_lossless, 120_000, 100_000, u32::MAX),
            Verdict::Forward { mark: true, over_headroom: false }
        );
        assert_eq!(
            c.verdict(ect_lossless, 130_001, 100_000, u32::MAX),
            Verdict::Forward { mark: true, over_headroom: true }
        );
    }

    #[test]
    fn only_ect_packets_are_marked() {
        let c = cfg();
        // Above Kmax every ECT packet is marked, and no other.
        assert_eq!(
            c.verdict(26 << 2 | 0b10, 60_000, 100_000, 0),
            Verdict::Forward { mark: true, over_headroom: false }
        );
        assert_eq!(
            c.verdict(26 << 2 | 0b01, 60_000, 100_000, 0),
            Verdict::Forward { mark: true, over_headroom: false }
        );
        assert_eq!(c.verdict(26 << 2, 60_000, 100_000, 0), Verdict::Forward { mark: false, over_headroom: false });
        assert_eq!(
            c.verdict(26 << 2 | 0b11, 60_000, 100_000, 0),
            Verdict::Forward { mark: false, over_headroom: false }
        );
        // Below Kmin none is.
        assert_eq!(
            c.verdict(26 << 2 | 0b10, 9_000, 100_000, 0),
            Verdict::Forward { mark: false, over_headroom: false }
        );
    }

    #[test]
    fn the_dynamic_threshold_shrinks_as_the_pool_fills() {
        let mut c = cfg();
        c.buffer_mode = BufferMode::Shared as u32;
        c.alpha_x256 = 512; // alpha = 2
        assert_eq!(c.queue_limit(0), 2 << 20);
        assert_eq!(c.queue_limit(1 << 19), 1 << 20);
        assert_eq!(c.queue_limit(2 << 20), 0);
    }

    #[test]
    fn accumulate_adds_every_counter() {
        let mut a = ClassCounters {
            packets: 1,
            bytes: 2,
            ecn_marked: 3,
            overflow_drops: 4,
            over_headroom: 5,
            sent_while_paused: 6,
            xoff_events: 7,
            xoff_events_lost: 8,
        };
        let b = ClassCounters {
            packets: 10,
            bytes: 20,
            ecn_marked: 30,
            overflow_drops: 40,
            over_headroom: 50,
            sent_while_paused: 60,
            xoff_events: 70,
            xoff_events_lost: 80,
        };
        a.accumulate(&b);
        let expected = ClassCounters {
            packets: 11,
            bytes: 22,
            ecn_marked: 33,
            overflow_drops: 44,
            over_headroom: 55,
            sent_while_paused: 66,
            xoff_events: 77,
            xoff_events_lost: 88,
        };
        assert_eq!(a, expected);
    }

    #[test]
    fn tos_of_reads_the_ipv4_tos_or_the_ipv6_traffic_class() {
        let pkt = |ip| ParsedPacket {
            dst_mac: [2; 6],
            vlan_tci: None,
            l3_offset: 14,
            ip,
            protocol: 17,
            ports: None,
            bth: None,
        };
        let v4 = IpHeader::V4 { src: [198, 18, 0, 1], dst: [198, 18, 0, 2], ttl: 64, tos: 0x6A, header_len: 20 };
        let v6 = IpHeader::V6 { src: [0xFD; 16], dst: [0xFD; 16], hop_limit: 64, traffic_class: 0xC2 };
        assert_eq!(tos_of(&pkt(v4)), 0x6A);
        assert_eq!(tos_of(&pkt(v6)), 0xC2);
    }

    #[test]
    fn over_headroom_only_past_limit_plus_headroom() {
        // Limit 100 000 and headroom 30 000: a lossless queue may reach exactly 130 000 bytes.
        let c = cfg();
        let lossless = 26 << 2;
        assert_eq!(c.verdict(lossless, 130_000, 100_000, 0), Verdict::Forward { mark: false, over_headroom: false });
        assert_eq!(c.verdict(lossless, 130_001, 100_000, 0), Verdict::Forward { mark: false, over_headroom: true });
    }
}
