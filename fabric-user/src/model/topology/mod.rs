//! The topology file: the one source of truth for a testbed. `testbed/reference.toml` documents
//! every field; [`Topology::parse`] validates and names the field at fault.
//!
//! Everything else (nodes, ports, addresses, MACs, interface names, routes) is derived from it
//! by [`crate::model::plan`] and [`crate::model::routing`].
use std::net::{Ipv4Addr, Ipv6Addr};

use fabric_common::config::HashMode;
use serde::{Deserialize, Serialize};

mod congestion;
pub mod load;
pub mod validate;

pub use congestion::{BufferKind, Congestion, SwitchQos};

/// The embedded default: one zone, 4 racks x 2 hosts, 4 CTSWs, one uplink from every RTSW to
/// every CTSW.
pub const DEFAULT_TOPOLOGY: &str = include_str!("../../../../testbed/default.toml");

/// A whole testbed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Human name, shown in reports.
    pub name: String,
    /// Prefix of every namespace (and pinned object) of this testbed, so that two testbeds can
    /// coexist and `down` finds everything. 1..=6 chars, [a-z0-9].
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// MTU of every link. Native XDP on veth (without multi-buffer programs) limits it to
    /// about 3500 bytes: enough for RoCE path MTUs of 1024 and 2048.
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    #[serde(default)]
    pub addressing: Addressing,
    /// Per-tier link rates and hashing. The `host` tier is the host-RTSW links.
    #[serde(default)]
    pub tiers: Tiers,
    /// At least one zone.
    pub zones: Vec<Zone>,
    /// Optional aggregation layer joining the zones' CTSWs.
    #[serde(default)]
    pub atsw: Option<AtswLayer>,
    /// Slowed time: every modelled rate is divided by this and every timer (queue drain, pause
    /// quanta, CNP interval, DCQCN timers, ACK timeout) multiplied by it; packet and buffer
    /// sizes stay real. The default keeps the default testbed's endpoints at line rate here.
    #[serde(default = "default_time_scale")]
    pub time_scale: u64,
    /// `flowlet` mode: the idle time, in modelled microseconds, after which a flow may move to
    /// another member (> 0; the switches wait this times `time_scale` of wall-clock time).
    #[serde(default = "default_flowlet_gap_us")]
    pub flowlet_gap_us: f64,
    /// Queues, ECN marking and PFC of the switches.
    #[serde(default)]
    pub congestion: Congestion,
}

/// Address plan: every link gets a /31 (IPv4) and a /127 (IPv6) carved out of these.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Addressing {
    /// Must lie inside 198.18.0.0/15 (the benchmarking range).
    pub ipv4: Ipv4Addr,
    pub ipv4_prefix_len: u8,
    /// Must lie inside fd00::/8.
    pub ipv6: Ipv6Addr,
    pub ipv6_prefix_len: u8,
}

/// Settings of one tier of links/switches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tier {
    /// Modelled link rate in Gbit/s of the links going *up* from this tier
    /// (host: host-RTSW links; rtsw: RTSW-CTSW; ctsw: CTSW-ATSW). Must be > 0.
    #[serde(default = "default_rate")]
    pub rate_gbps: f64,
    /// ECMP hash mode of the switches of this tier ("five-tuple", "eecmp", "pin"); unused for
    /// the host tier.
    #[serde(default = "default_hash", with = "hash_mode_serde")]
    pub hash: HashMode,
    /// Hash seed of this tier; each switch's seed is derived from it and its index so that
    /// neither tiers nor switches polarise.
    #[serde(default)]
    pub seed: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tiers {
    #[serde(default = "Tier::host")]
    pub host: Tier,
    #[serde(default = "Tier::rtsw")]
    pub rtsw: Tier,
    #[serde(default = "Tier::ctsw")]
    pub ctsw: Tier,
    #[serde(default = "Tier::atsw")]
    pub atsw: Tier,
}

/// One AI zone: a two-stage Clos of RTSWs (one per rack) and CTSWs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Zone {
    /// Unique, 1..=3 chars, [a-z0-9] (it is part of interface names).
    pub name: String,
    /// Number of racks (one RTSW each), >= 1.
    pub racks: u32,
    /// Hosts per rack, >= 1.
    pub hosts_per_rack: u32,
    /// Number of CTSWs (spines) in the zone, >= 1.
    pub spines: u32,
    /// Parallel links from each RTSW to each CTSW, >= 1. An RTSW's uplink group has
    /// spines * uplinks_per_spine members (at most 64).
    #[serde(default = "one")]
    pub uplinks_per_spine: u32,
}

/// The ATSW layer: every CTSW of every zone connects to every ATSW.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtswLayer {
    /// Number of ATSWs, >= 1.
    pub count: u32,
    /// Parallel links from each CTSW to each ATSW, >= 1. Fewer links up than down makes the
    /// cross-zone tier oversubscribed, as in the paper.
    #[serde(default = "one")]
    pub uplinks_per_ctsw: u32,
}

fn one() -> u32 {
    1
}
fn default_flowlet_gap_us() -> f64 {
    fabric_common::balance::DEFAULT_FLOWLET_GAP_NS as f64 / 1e3
}
fn default_prefix() -> String {
    "fab".into()
}
/// 1500 carries RoCE with a 1024-byte path MTU (what rxe picks on a 1500-byte link).
fn default_mtu() -> u32 {
    1500
}
/// 400 Gbit/s / 4000 = 100 Mbit/s per link: what one of our endpoints sends comfortably on
/// one core of a small machine, so incasts congest the fabric, not the CPU.
pub const DEFAULT_TIME_SCALE: u64 = 4000;
/// The time scales a topology may have.
pub const TIME_SCALES: std::ops::RangeInclusive<u64> = 1..=1_000_000;
fn default_time_scale() -> u64 {
    DEFAULT_TIME_SCALE
}
fn default_rate() -> f64 {
    400.0
}
fn default_hash() -> HashMode {
    HashMode::Eecmp
}

impl Tier {
    fn with_seed(seed: u32) -> Self {
        Tier { rate_gbps: default_rate(), hash: default_hash(), seed }
    }
    fn host() -> Self {
        Self::with_seed(0)
    }
    fn rtsw() -> Self {
        Self::with_seed(0x5254_5357)
    }
    fn ctsw() -> Self {
        Self::with_seed(0x4354_5357)
    }
    fn atsw() -> Self {
        Self::with_seed(0x4154_5357)
    }
}

impl Default for Tiers {
    fn default() -> Self {
        Tiers { host: Tier::host(), rtsw: Tier::rtsw(), ctsw: Tier::ctsw(), atsw: Tier::atsw() }
    }
}

impl Default for Addressing {
    fn default() -> Self {
        Addressing {
            ipv4: Ipv4Addr::new(198, 18, 0, 0),
            ipv4_prefix_len: 15,
            ipv6: Ipv6Addr::new(0xfd00, 0xfab, 0, 0, 0, 0, 0, 0),
            ipv6_prefix_len: 64,
        }
    }
}

/// Hash modes by name in TOML and JSON (`"eecmp"`), shared with the plan's state file.
pub(crate) mod hash_mode_serde {
    use fabric_common::config::HashMode;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(m: &HashMode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HashMode, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_hash_mode(&s).map_err(D::Error::custom)
    }

    /// The same for an optional mode (a field that may be left out).
    pub mod option {
        use fabric_common::config::HashMode;
        use serde::{Deserialize, Deserializer, de::Error};

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<HashMode>, D::Error> {
            let s = Option::<String>::deserialize(d)?;
            s.map(|s| super::super::parse_hash_mode(&s).map_err(D::Error::custom)).transpose()
        }
    }
}

/// A routing mode by name; the error lists every name (`HashMode::ROUTING`, the one list).
pub fn parse_hash_mode(s: &str) -> Result<HashMode, String> {
    HashMode::parse(s).ok_or_else(|| {
        let names: Vec<&str> = HashMode::ROUTING.iter().map(|m| m.as_str()).collect();
        format!("unknown hash mode {s:?}; one of {}", names.join(", "))
    })
}

impl Topology {
    /// The embedded default topology.
    pub fn default_topology() -> Self {
        Self::parse(DEFAULT_TOPOLOGY, "<default topology>").expect("the embedded default is valid")
    }

    /// A link's modelled line rate in bit/s after the time scale.
    pub fn modelled_rate_bps(&self, rate_gbps: f64) -> u64 {
        ((rate_gbps * 1e9) / self.time_scale.max(1) as f64).round() as u64
    }

    /// Whether a link of `rate_gbps` sends at all on the testbed: its rate after the time scale
    /// must reach [`MIN_RATE_BPS`](fabric_common::queue::MIN_RATE_BPS).
    pub fn testbed_sends_at(&self, rate_gbps: f64) -> bool {
        self.modelled_rate_bps(rate_gbps) >= fabric_common::queue::MIN_RATE_BPS
    }

    /// The slowest rate, Gbit/s, at which a testbed link of this time scale sends.
    pub fn least_testbed_rate_gbps(&self) -> f64 {
        fabric_common::queue::MIN_RATE_BPS as f64 * self.time_scale.max(1) as f64 / 1e9
    }

    /// A modelled duration (ns of the real network) in wall-clock ns on the testbed.
    pub fn wall_ns(&self, modelled_ns: f64) -> u64 {
        (modelled_ns * self.time_scale.max(1) as f64).round() as u64
    }

    /// The flowlet gap in the switches' wall-clock ns (validation keeps it in 1..=u32::MAX).
    pub fn flowlet_gap_wall_ns(&self) -> u32 {
        self.wall_ns(self.flowlet_gap_us * 1e3).clamp(1, u32::MAX as u64) as u32
    }

    /// The flowlet gap in modelled ns, for simulators that run in modelled time (the twin).
    pub fn flowlet_gap_modelled_ns(&self) -> u32 {
        (self.flowlet_gap_us * 1e3).round().clamp(1.0, u32::MAX as f64) as u32
    }

    /// The configuration of a switch in `mode` with `seed`, as the controller writes it.
    pub fn switch_config(&self, mode: HashMode, seed: u32) -> fabric_common::config::SwitchConfig {
        fabric_common::config::SwitchConfig::testbed(mode, seed).with_flowlet_gap(self.flowlet_gap_wall_ns())
    }

    /// The switch tiers whose mode reorders packets within a flow, as `(tier, mode)`.
    pub fn reordering_tiers(&self) -> Vec<(&'static str, HashMode)> {
        let t = &self.tiers;
        [("rtsw", t.rtsw.hash), ("ctsw", t.ctsw.hash), ("atsw", t.atsw.hash)]
            .into_iter()
            .filter(|(_, m)| m.reorders_within_a_flow())
            .collect()
    }

    pub fn hosts(&self) -> u32 {
        self.zones.iter().map(|z| z.racks * z.hosts_per_rack).sum()
    }
}
