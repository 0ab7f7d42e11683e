//! Per-switch configuration, written by the controller into a one-entry array map.

/// How a switch chooses among the members of an ECMP group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum HashMode {
    /// Classic ECMP on src/dst address, protocol, src/dst port.
    FiveTuple = 0,
    /// Enhanced ECMP: the five-tuple plus the BTH destination QP.
    Eecmp = 1,
    /// Path pinning: the member is chosen by the destination alone.
    Pin = 2,
    /// Centralised traffic engineering: the controller installs a member per flow (see
    /// [`crate::te`]); a flow without an entry is hashed as in `eecmp`.
    Te = 3,
    /// Flowlet switching: a flow keeps its member until idle for longer than the flowlet gap,
    /// then takes the less loaded of two hashed candidates ([`crate::balance`]).
    Flowlet = 4,
    /// Adaptive routing, per packet: the less loaded (modelled egress queue depth, a paused
    /// queue counting as full) of two members hashed from the flow ([`crate::balance`]).
    Adaptive = 5,
    /// Packet spraying: a uniformly random member per packet.
    Spray = 6,
    /// Weighted ECMP: the flow's hash scaled onto members weighted by their link's modelled rate.
    Wcmp = 7,
}

impl HashMode {
    /// The modes that choose by a hash of the packet alone.
    pub const ALL: [HashMode; 3] = [Self::FiveTuple, Self::Eecmp, Self::Pin];
    /// Every routing mode a switch can be set to.
    pub const ROUTING: [HashMode; 8] =
        [Self::FiveTuple, Self::Eecmp, Self::Pin, Self::Te, Self::Flowlet, Self::Adaptive, Self::Spray, Self::Wcmp];
    /// The modes beyond a hash, whose choice also reads switch state ([`crate::balance`]).
    pub const BALANCING: [HashMode; 4] = [Self::Flowlet, Self::Adaptive, Self::Spray, Self::Wcmp];

    /// Decodes a map value; unknown values fall back to the five-tuple.
    #[inline(always)]
    pub const fn from_u32(v: u32) -> Self {
        match v {
            1 => Self::Eecmp,
            2 => Self::Pin,
            3 => Self::Te,
            4 => Self::Flowlet,
            5 => Self::Adaptive,
            6 => Self::Spray,
            7 => Self::Wcmp,
            _ => Self::FiveTuple,
        }
    }

    /// Whether the mode may send packets of one flow over different members from one packet to
    /// the next (not only between flowlets): an in-order (go-back-N) receiver then sees
    /// reordering and retransmits.
    pub const fn reorders_within_a_flow(self) -> bool {
        matches!(self, Self::Adaptive | Self::Spray)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FiveTuple => "five-tuple",
            Self::Eecmp => "eecmp",
            Self::Pin => "pin",
            Self::Te => "te",
            Self::Flowlet => "flowlet",
            Self::Adaptive => "adaptive",
            Self::Spray => "spray",
            Self::Wcmp => "wcmp",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ROUTING.into_iter().find(|m| m.as_str() == s)
    }
}

/// The switch-wide settings the XDP program reads for every packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct SwitchConfig {
    /// A [`HashMode`] as u32.
    pub hash_mode: u32,
    /// Per-switch hash seed, so that tiers do not polarise.
    pub seed: u32,
    /// For `pin`: how many low destination-address bits to drop before taking the index.
    pub pin_shift: u32,
    /// For `flowlet`: the idle time (wall-clock ns, the testbed's modelled gap times its
    /// time scale) after which a flow may move. Zero is never written by the controller; the
    /// decision treats it as "every packet starts a flowlet".
    pub flowlet_gap_ns: u32,
}

const _: () = assert!(core::mem::size_of::<SwitchConfig>() == 16);

impl SwitchConfig {
    /// The `pin` shift for the controller's addressing: every host sits on a /31 (its switch's
    /// port the even address, the host the odd one), so dropping one bit leaves the host's
    /// index, and `pin` spreads destinations over the uplinks host by host.
    pub const TESTBED_PIN_SHIFT: u32 = 1;

    pub const fn new(mode: HashMode, seed: u32, pin_shift: u32) -> Self {
        Self { hash_mode: mode as u32, seed, pin_shift, flowlet_gap_ns: 0 }
    }

    /// The same switch with a flowlet gap of `gap_ns` wall-clock nanoseconds.
    pub const fn with_flowlet_gap(self, gap_ns: u32) -> Self {
        Self { flowlet_gap_ns: gap_ns, ..self }
    }

    /// A switch as the controller configures one: its mode and seed, the testbed's pin shift.
    pub const fn testbed(mode: HashMode, seed: u32) -> Self {
        Self::new(mode, seed, Self::TESTBED_PIN_SHIFT)
    }

    pub const fn mode(&self) -> HashMode {
        HashMode::from_u32(self.hash_mode)
    }
}

/// One switch port as the XDP program sees it, in an array indexed by ingress ifindex (an array
/// lookup costs a fraction of a hash lookup; ifindexes inside a namespace are small).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PortInfo {
    /// The port's index in the switch's counter and DEVMAP arrays.
    pub index: u32,
    /// The port's own MAC: unicast frames for another address are not routed.
    pub mac: [u8; 6],
    /// [`PortInfo::PRESENT`] for a registered port (an all-zero slot is no port), plus
    /// [`PortInfo::HOST`] for a port facing a host.
    pub flags: u16,
    /// On a host port: the only source addresses accepted from it (anti-spoofing, as a rack
    /// switch's source guard does).
    pub host_ipv4: [u8; 4],
    pub host_ipv6: [u8; 16],
}

const _: () = assert!(core::mem::size_of::<PortInfo>() == 32);

impl PortInfo {
    pub const PRESENT: u16 = 1;
    pub const HOST: u16 = 2;

    /// A port facing another switch.
    pub const fn new(index: u32, mac: [u8; 6]) -> Self {
        PortInfo { index, mac, flags: Self::PRESENT, host_ipv4: [0; 4], host_ipv6: [0; 16] }
    }

    /// A port facing a host whose addresses are `ipv4` and `ipv6`.
    pub const fn host(index: u32, mac: [u8; 6], ipv4: [u8; 4], ipv6: [u8; 16]) -> Self {
        PortInfo { index, mac, flags: Self::PRESENT | Self::HOST, host_ipv4: ipv4, host_ipv6: ipv6 }
    }

    #[inline(always)]
    pub const fn is_host(&self) -> bool {
        self.flags & Self::HOST != 0
    }

    #[inline(always)]
    pub const fn is_present(&self) -> bool {
        self.flags & Self::PRESENT != 0
    }
}

/// Limits shared by the maps and the controller.
pub const MAX_PORTS: u32 = 256;
/// Ports are found by ingress ifindex in an array of this size; the controller refuses an
/// interface with a larger ifindex.
pub const MAX_IFINDEX: u32 = 4096;

/// The traffic generator's one-entry config (map `GENERATOR`, set by `fabric-bench forwarding`):
/// what it writes into every frame before sending it towards the first switch, and, for the
/// looping generator (`traffic_loop`), where it sends the frame and for how many more laps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct GeneratorConfig {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    /// The IPv4 TTL of every frame.
    pub ttl: u8,
    pub _reserved: [u8; 3],
    /// `traffic_loop` only: the interface (in the receiving interface's namespace) it redirects
    /// every frame to.
    pub out_ifindex: u32,
    pub _pad: u32,
    /// `traffic_loop` only: it forwards a frame while its CPU's lap count (map
    /// `GENERATOR_LAPS`) is below this, and drops it after. The benchmark keeps moving it ahead
    /// while it measures, so that frames circulating in a loop of veths stop by themselves
    /// shortly after the benchmark stops, or dies.
    pub lease: u64,
}

const _: () = assert!(core::mem::size_of::<GeneratorConfig>() == 32);

impl GeneratorConfig {
    pub const fn new(dst_mac: [u8; 6], src_mac: [u8; 6], ttl: u8) -> Self {
        Self { dst_mac, src_mac, ttl, _reserved: [0; 3], out_ifindex: 0, _pad: 0, lease: 0 }
    }

    /// The same, for `traffic_loop`: redirect to `out_ifindex` while the lap count is below
    /// `lease`.
    pub const fn looping(self, out_ifindex: u32, lease: u64) -> Self {
        Self { out_ifindex, lease, ..self }
    }

    /// Whether `traffic_loop` forwards another frame on a CPU that has made `laps` laps.
    pub const fn lease_allows(&self, laps: u64) -> bool {
        laps < self.lease
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The looping generator forwards while its lap count is below the lease, and a config
    /// made with `new` (lease 0) forwards nothing.
    #[test]
    fn the_loop_runs_only_inside_its_lease() {
        let cfg = GeneratorConfig::new([2; 6], [4; 6], 64);
        assert!(!cfg.lease_allows(0));
        let looping = cfg.looping(7, 100);
        assert_eq!((looping.out_ifindex, looping.dst_mac, looping.ttl), (7, [2; 6], 64));
        assert!(looping.lease_allows(0) && looping.lease_allows(99));
        assert!(!looping.lease_allows(100) && !looping.lease_allows(u64::MAX));
    }

    #[test]
    fn port_flags_say_present_and_host() {
        let switch_port = PortInfo::new(3, [2; 6]);
        assert!(switch_port.is_present() && !switch_port.is_host());
        let host_port = PortInfo::host(4, [2; 6], [198, 18, 0, 1], [0xFD; 16]);
        assert!(host_port.is_present() && host_port.is_host());
        assert_eq!(host_port.flags, 0b11);
        // An empty slot of the ports map (all zero) is not a port.
        let empty = PortInfo { flags: 0, ..switch_port };
        assert!(!empty.is_present() && !empty.is_host());
        let host_only = PortInfo { flags: PortInfo::HOST, ..switch_port };
        assert!(!host_only.is_present());
    }
}
