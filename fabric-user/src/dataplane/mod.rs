//! One switch's data plane: the embedded XDP object, loaded once per switch, its maps written
//! from `fabric_common` types, its program attached to every port of the switch.
use std::net::{Ipv4Addr, Ipv6Addr};

use anyhow::{Context as _, Result, bail, ensure};
use aya::{
    Ebpf,
    maps::{
        Array, DevMap, MapData, PerCpuArray,
        lpm_trie::{Key, LpmTrie},
    },
    programs::{Xdp, XdpMode, xdp::XdpLinkId},
};
use fabric_common::{
    balance::{BalanceEvent, FlowletSlot, WcmpError, WcmpWeights, flowlet_index},
    config::{MAX_IFINDEX, PortInfo, SwitchConfig},
    counters::{MemberCounters, PortCounters},
    fault::PortLoss,
    maps,
    pfc::CLASSES,
    qos::{ClassCounters, QosConfig, class_slot},
    queue::{EgressQueue, IngressAccount, LineRate},
    route::{EcmpGroup, MAX_GROUPS, RouteTarget},
    te::{TeEntry, TeKey},
};

/// The compiled `fabric-ebpf` object, built by build.rs.
static SWITCH_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fabric-switch"));

/// The switch program, and two references built beside it: a bare XDP_PASS (also what host
/// veths run) and parse + fixed redirect (the benchmark baseline).
pub const PROGRAM_SWITCH: &str = "fabric_switch";
pub const PROGRAM_PASS: &str = "xdp_pass";
pub const PROGRAM_BENCH_PARSE_REDIRECT: &str = "bench_parse_redirect";
/// The traffic generator of `fabric-bench forwarding` (BPF_PROG_TEST_RUN with live frames).
pub const PROGRAM_GENERATOR: &str = "traffic_generator";
/// The same benchmark's looping generator: attached where a chain of veths ends, it sends every
/// frame that arrives back into the chain's start (where live frames are refused).
pub const PROGRAM_LOOP: &str = "traffic_loop";

/// A switch's maps with typed access, and (when freshly loaded) its programs. A dataplane
/// reopened from pins has maps only: enough to reroute and to read counters.
pub struct SwitchDataplane {
    ebpf: Option<Ebpf>,
    maps: std::collections::HashMap<&'static str, aya::maps::Map>,
}

impl SwitchDataplane {
    /// Loads the object and passes every program through the verifier (tests and benchmarks,
    /// which use the reference programs too).
    pub fn load() -> Result<Self> {
        Self::load_programs(&[
            PROGRAM_SWITCH,
            PROGRAM_PASS,
            PROGRAM_BENCH_PARSE_REDIRECT,
            PROGRAM_GENERATOR,
            PROGRAM_LOOP,
        ])
    }

    /// Loads the object and verifies only `programs`. A testbed's switch needs only the switch
    /// program: verifying the others too cost each of a 4,096-host testbed's 272 switches
    /// time for programs it never attaches.
    pub fn load_programs(programs: &[&str]) -> Result<Self> {
        if SWITCH_OBJECT.is_empty() {
            bail!(
                "this binary was built with AYA_BUILD_SKIP=1 and carries no XDP program; \
                 rebuild without it (after `cargo xtask setup`)"
            );
        }
        crate::sys::netns::require_capabilities()?;
        let mut ebpf = Ebpf::load(SWITCH_OBJECT).context("loading the fabric XDP object")?;
        for &name in programs {
            let prog: &mut Xdp = ebpf
                .program_mut(name)
                .with_context(|| format!("program {name} missing from the object"))?
                .try_into()?;
            prog.load().with_context(|| format!("the kernel verifier rejected {name}"))?;
        }
        let mut maps = std::collections::HashMap::new();
        for name in maps::SWITCH {
            maps.insert(name, ebpf.take_map(name).with_context(|| format!("map {name} missing from the object"))?);
        }
        // The other way round too: a map the kernel side added but the contract does not name
        // would never be pinned, so commands reopening a testbed would not see it.
        let unknown: Vec<&str> =
            ebpf.maps().map(|(n, _)| n).filter(|n| !maps::GENERATOR_MAPS.contains(n) && !n.starts_with('.')).collect();
        ensure!(unknown.is_empty(), "the XDP object has maps fabric_common::maps does not name: {unknown:?}");
        Ok(Self { ebpf: Some(ebpf), maps })
    }

    /// Reopens the maps of a switch pinned with [`Self::pin_maps`].
    pub fn from_pins(dir: &std::path::Path) -> Result<Self> {
        let mut maps = std::collections::HashMap::new();
        for name in maps::SWITCH {
            let path = dir.join(name);
            let data = MapData::from_pin(&path).with_context(|| format!("opening pinned map {}", path.display()))?;
            maps.insert(name, aya::maps::Map::from_map_data(data)?);
        }
        Ok(Self { ebpf: None, maps })
    }

    /// Pins every map under `dir` (bpffs), so other `fabric` commands can reach them.
    pub fn pin_maps(&self, dir: &std::path::Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, map) in &self.maps {
            map.pin(dir.join(name)).with_context(|| format!("pinning map {name} in {}", dir.display()))?;
        }
        Ok(())
    }

    /// Attaches the switch program to `ifindex` and pins the link at `pin`, so that the
    /// attachment outlives this process.
    pub fn attach_pinned(&mut self, program: &str, ifindex: u32, pin: &std::path::Path) -> Result<()> {
        let id = self.attach_program(program, ifindex)?;
        let link = self.program(program)?.take_link(id)?;
        let fd_link: aya::programs::links::FdLink = link.try_into().context("XDP link is not an fd link")?;
        fd_link.pin(pin).with_context(|| format!("pinning the XDP link at {}", pin.display()))?;
        Ok(())
    }

    pub fn program(&mut self, name: &str) -> Result<&mut Xdp> {
        let ebpf = self.ebpf.as_mut().context("this dataplane was reopened from pins and has no programs")?;
        Ok(ebpf.program_mut(name).with_context(|| format!("no program {name}"))?.try_into()?)
    }

    /// Attaches the switch program to `ifindex` (resolved in the caller thread's namespace),
    /// natively: veth supports driver-mode XDP, and generic mode would hide real costs.
    pub fn attach(&mut self, ifindex: u32) -> Result<XdpLinkId> {
        self.attach_program(PROGRAM_SWITCH, ifindex)
    }

    /// Attaches one of the object's programs to `ifindex` in driver mode.
    pub fn attach_program(&mut self, program: &str, ifindex: u32) -> Result<XdpLinkId> {
        self.program(program)?
            .attach_to_if_index(ifindex, XdpMode::Driver)
            .with_context(|| format!("attaching XDP program {program} to ifindex {ifindex}"))
    }

    fn map<'a, T>(&'a mut self, name: &str) -> Result<T>
    where
        T: TryFrom<&'a mut aya::maps::Map, Error = aya::maps::MapError>,
    {
        let map = self.maps.get_mut(name).with_context(|| format!("map {name} missing"))?;
        T::try_from(map).with_context(|| format!("map {name} has an unexpected type"))
    }

    /// Writes the switch-wide settings: one map value, so a mode change (mode, seed and
    /// flowlet gap together) takes effect whole for every later packet.
    pub fn set_config(&mut self, cfg: SwitchConfig) -> Result<()> {
        let mut m: Array<&mut MapData, SwitchConfig> = self.map(maps::CONFIG)?;
        m.set(0, cfg, 0)?;
        Ok(())
    }

    pub fn config(&mut self) -> Result<SwitchConfig> {
        let m: Array<&mut MapData, SwitchConfig> = self.map(maps::CONFIG)?;
        Ok(m.get(&0, 0)?)
    }

    /// Registers a port: frames arriving on `ifindex` belong to port `info.index`, and the
    /// port's egress slot sends out of `ifindex`.
    pub fn add_port(&mut self, ifindex: u32, info: PortInfo) -> Result<()> {
        anyhow::ensure!(
            ifindex < MAX_IFINDEX,
            "ifindex {ifindex} is beyond the switch's port table ({MAX_IFINDEX}); \
             build switch ports inside fresh namespaces, where ifindexes are small"
        );
        let mut ports: Array<&mut MapData, PortInfo> = self.map(maps::PORTS)?;
        ports.set(ifindex, info, 0)?;
        let mut egress: DevMap<&mut MapData> = self.map(maps::EGRESS)?;
        egress
            .set(info.index, ifindex, None, 0)
            .with_context(|| format!("DEVMAP slot {} -> ifindex {ifindex}", info.index))?;
        Ok(())
    }

    pub fn remove_route_v4(&mut self, prefix: Ipv4Addr, len: u8) -> Result<()> {
        let mut m: LpmTrie<&mut MapData, [u8; 4], RouteTarget> = self.map(maps::ROUTES_V4)?;
        m.remove(&Key::new(len.into(), prefix.octets()))?;
        Ok(())
    }

    pub fn remove_route_v6(&mut self, prefix: Ipv6Addr, len: u8) -> Result<()> {
        let mut m: LpmTrie<&mut MapData, [u8; 16], RouteTarget> = self.map(maps::ROUTES_V6)?;
        m.remove(&Key::new(len.into(), prefix.octets()))?;
        Ok(())
    }

    pub fn set_route_v4(&mut self, prefix: Ipv4Addr, len: u8, target: RouteTarget) -> Result<()> {
        let mut m: LpmTrie<&mut MapData, [u8; 4], RouteTarget> = self.map(maps::ROUTES_V4)?;
        m.insert(&Key::new(len.into(), prefix.octets()), target, 0)?;
        Ok(())
    }

    pub fn set_route_v6(&mut self, prefix: Ipv6Addr, len: u8, target: RouteTarget) -> Result<()> {
        let mut m: LpmTrie<&mut MapData, [u8; 16], RouteTarget> = self.map(maps::ROUTES_V6)?;
        m.insert(&Key::new(len.into(), prefix.octets()), target, 0)?;
        Ok(())
    }

    /// Writes group `id`, its WCMP weights first (so that the group never meets weights for
    /// other members once routes name it). The ports' rates must be written already.
    pub fn set_group(&mut self, id: u32, group: &EcmpGroup) -> Result<()> {
        self.set_wcmp(id, group)?;
        let mut m: Array<&mut MapData, EcmpGroup> = self.map(maps::GROUPS)?;
        m.set(id, group, 0).with_context(|| format!("writing ECMP group {id}"))?;
        Ok(())
    }

    /// The WCMP weights of group slot `id` holding `group`: its members' modelled port rates.
    /// Members without modelled rates (none set yet) get no weights: `wcmp` then hashes.
    fn set_wcmp(&mut self, id: u32, group: &EcmpGroup) -> Result<()> {
        if group.len == 0 {
            return Ok(());
        }
        let rates = group.live().iter().map(|m| self.port_rate(m.port)).collect::<Result<Vec<_>>>()?;
        let weights = match WcmpWeights::from_weights(&rates) {
            Err(WcmpError::AllZero) => WcmpWeights::default(),
            other => other.map_err(|e| anyhow::anyhow!("group {id}: {e} (member port rates {rates:?})"))?,
        };
        let mut m: Array<&mut MapData, WcmpWeights> = self.map(maps::WCMP)?;
        m.set(id, weights, 0).with_context(|| format!("writing the WCMP weights of group {id}"))?;
        Ok(())
    }

    /// Recomputes the WCMP weights of every installed group from its ports' current rates
    /// (after a link's rate changed). Each slot's weights are one map value, written whole.
    pub fn refresh_wcmp(&mut self) -> Result<()> {
        for id in 0..MAX_GROUPS {
            let group = {
                let m: Array<&mut MapData, EcmpGroup> = self.map(maps::GROUPS)?;
                m.get(&id, 0)?
            };
            self.set_wcmp(id, &group)?;
        }
        Ok(())
    }

    /// The WCMP weights of group slot `id`.
    pub fn wcmp(&mut self, id: u32) -> Result<WcmpWeights> {
        let m: Array<&mut MapData, WcmpWeights> = self.map(maps::WCMP)?;
        Ok(m.get(&id, 0)?)
    }

    /// The flowlet slot of flow hash `flow`, if the switch's table holds one for that flow.
    pub fn flowlet(&mut self, flow: u32) -> Result<Option<FlowletSlot>> {
        let m: Array<&mut MapData, FlowletSlot> = self.map(maps::FLOWLETS)?;
        let slot = m.get(&flowlet_index(flow), 0)?;
        Ok((slot.flow == flow && slot != FlowletSlot::default()).then_some(slot))
    }

    /// Writes the flowlet slot of flow hash `flow` into its table entry, with `flow` as its
    /// owner (tests craft flowlet states with it).
    pub fn set_flowlet(&mut self, flow: u32, slot: FlowletSlot) -> Result<()> {
        let mut m: Array<&mut MapData, FlowletSlot> = self.map(maps::FLOWLETS)?;
        m.set(flowlet_index(flow), FlowletSlot { flow, ..slot }, 0)?;
        Ok(())
    }

    /// The benchmark generators' maps, owned: the config both generators read (`GENERATOR`)
    /// and the looping generator's per-CPU laps (`GENERATOR_LAPS`). Once per loaded object.
    pub fn take_generator_maps(
        &mut self,
    ) -> Result<(Array<MapData, fabric_common::config::GeneratorConfig>, PerCpuArray<MapData, u64>)> {
        let ebpf = self.ebpf.as_mut().context("this dataplane was reopened from pins and has no programs")?;
        let mut take = |name: &str| {
            ebpf.take_map(name).with_context(|| format!("map {name} missing from the object, or taken already"))
        };
        let config = take(maps::GENERATOR)?.try_into()?;
        let laps = take(maps::GENERATOR_LAPS)?.try_into()?;
        Ok((config, laps))
    }

    /// A port's counters summed over CPUs.
    pub fn port_counters(&mut self, port: u32) -> Result<PortCounters> {
        let m: PerCpuArray<&mut MapData, PortCounters> = self.map(maps::PORT_COUNTERS)?;
        let mut total = PortCounters::default();
        for c in m.get(&port, 0)?.iter() {
            total.accumulate(c);
        }
        Ok(total)
    }

    /// Packets and bytes sent through one member of a group, summed over CPUs.
    pub fn member_counters(&mut self, group: u32, member: u32) -> Result<MemberCounters> {
        let m: PerCpuArray<&mut MapData, MemberCounters> = self.map(maps::MEMBER_COUNTERS)?;
        let mut total = MemberCounters::default();
        for c in m.get(&fabric_common::counters::member_slot(group, member), 0)?.iter() {
            total.accumulate(c);
        }
        Ok(total)
    }

    /// The moves of the balancing modes, summed over CPUs, indexed by [`BalanceEvent`].
    pub fn balance_counters(&mut self) -> Result<BalanceMoves> {
        let m: PerCpuArray<&mut MapData, u64> = self.map(maps::BALANCE_COUNTERS)?;
        let mut n = [0u64; BalanceEvent::COUNT as usize];
        for (i, total) in n.iter_mut().enumerate() {
            *total = m.get(&(i as u32), 0)?.iter().sum();
        }
        Ok(BalanceMoves {
            flowlet_moves: n[BalanceEvent::FlowletMove as usize],
            adaptive_second_choices: n[BalanceEvent::AdaptiveSecond as usize],
        })
    }

    /// The congestion model's settings (`enabled == 0` turns it off).
    pub fn set_qos(&mut self, cfg: QosConfig) -> Result<()> {
        let mut m: Array<&mut MapData, QosConfig> = self.map(maps::QOS)?;
        m.set(0, cfg, 0)?;
        Ok(())
    }

    /// The modelled (time-scaled) line rate of a port, bit/s.
    ///
    /// Written with the factors derived from it ([`LineRate::new`]). An array map's value is
    /// copied in without a lock, so a packet forwarded during a rate change may read some
    /// factors of the old rate and some of the new: its transmit time and depth then lie
    /// between the two rates' (a fast-path limit of one rate with a factor of the other could
    /// wrap only for a queue of more than 4 GiB, or a frame far beyond any MTU).
    pub fn set_port_rate(&mut self, port: u32, rate_bps: u64) -> Result<()> {
        let mut m: Array<&mut MapData, LineRate> = self.map(maps::PORT_RATE)?;
        m.set(port, LineRate::new(rate_bps), 0).with_context(|| format!("rate of port {port}"))?;
        Ok(())
    }

    pub fn port_rate(&mut self, port: u32) -> Result<u64> {
        Ok(self.port_line_rate(port)?.bps)
    }

    /// Port `port`'s rate as the program reads it, with its fixed-point factors.
    pub fn port_line_rate(&mut self, port: u32) -> Result<LineRate> {
        let m: Array<&mut MapData, LineRate> = self.map(maps::PORT_RATE)?;
        Ok(m.get(&port, 0)?)
    }

    /// Sets the injected loss of the link port `port` sends into (zero threshold: none). The
    /// entry is written whole, so the draw counter restarts with the new seed.
    pub fn set_port_loss(&mut self, port: u32, loss: PortLoss) -> Result<()> {
        let mut m: Array<&mut MapData, PortLoss> = self.map(maps::PORT_LOSS)?;
        m.set(port, loss, 0).with_context(|| format!("loss of port {port}"))?;
        Ok(())
    }

    pub fn port_loss(&mut self, port: u32) -> Result<PortLoss> {
        let m: Array<&mut MapData, PortLoss> = self.map(maps::PORT_LOSS)?;
        Ok(m.get(&port, 0)?)
    }

    pub fn qos(&mut self) -> Result<QosConfig> {
        let m: Array<&mut MapData, QosConfig> = self.map(maps::QOS)?;
        Ok(m.get(&0, 0)?)
    }

    /// The modelled egress queue of a port and class.
    pub fn queue(&mut self, port: u32, class: usize) -> Result<EgressQueue> {
        let m: Array<&mut MapData, EgressQueue> = self.map(maps::QUEUES)?;
        Ok(m.get(&class_slot(port, class), 0)?)
    }

    /// Overwrites the modelled egress queue of a port and class (tests craft queue states).
    pub fn set_queue(&mut self, port: u32, class: usize, q: EgressQueue) -> Result<()> {
        let mut m: Array<&mut MapData, EgressQueue> = self.map(maps::QUEUES)?;
        m.set(class_slot(port, class), q, 0)?;
        Ok(())
    }

    /// The bytes held for an ingress port and class.
    pub fn account(&mut self, port: u32, class: usize) -> Result<IngressAccount> {
        let m: Array<&mut MapData, IngressAccount> = self.map(maps::ACCOUNTS)?;
        Ok(m.get(&class_slot(port, class), 0)?)
    }

    /// When the XDP program asked for a pause on an ingress port/class (0: none outstanding).
    pub fn xoff_flag(&mut self, port: u32, class: usize) -> Result<u64> {
        let m: Array<&mut MapData, u64> = self.map(maps::PFC_XOFF)?;
        Ok(m.get(&class_slot(port, class), 0)?)
    }

    /// Clears the pause request of an ingress port/class once the agent has resumed it.
    pub fn clear_xoff(&mut self, port: u32, class: usize) -> Result<()> {
        let mut m: Array<&mut MapData, u64> = self.map(maps::PFC_XOFF)?;
        m.set(class_slot(port, class), 0, 0)?;
        Ok(())
    }

    pub fn set_pool_used(&mut self, bytes: u64) -> Result<()> {
        let mut m: Array<&mut MapData, u64> = self.map(maps::POOL_USED)?;
        m.set(0, bytes, 0)?;
        Ok(())
    }

    /// A port/class's counters summed over CPUs.
    pub fn class_counters(&mut self, port: u32, class: usize) -> Result<ClassCounters> {
        let m: PerCpuArray<&mut MapData, ClassCounters> = self.map(maps::CLASS_COUNTERS)?;
        let mut total = ClassCounters::default();
        for c in m.get(&class_slot(port, class), 0)?.iter() {
            total.accumulate(c);
        }
        Ok(total)
    }

    /// All classes of a port.
    pub fn port_class_counters(&mut self, port: u32) -> Result<[ClassCounters; CLASSES]> {
        let mut out = [ClassCounters::default(); CLASSES];
        for (class, c) in out.iter_mut().enumerate() {
            *c = self.class_counters(port, class)?;
        }
        Ok(out)
    }

    /// Installs (or replaces) the TE table: exactly `entries`, nothing else.
    pub fn set_te_flows(&mut self, entries: &[(TeKey, TeEntry)]) -> Result<()> {
        let mut m: aya::maps::HashMap<&mut MapData, TeKey, TeEntry> = self.map(maps::TE_FLOWS)?;
        let keep: std::collections::HashSet<TeKey> = entries.iter().map(|e| e.0).collect();
        let keys = m.keys().collect::<Result<Vec<TeKey>, _>>().context("TE_FLOWS: reading its keys")?;
        for k in keys.into_iter().filter(|k| !keep.contains(k)) {
            m.remove(&k).context("TE_FLOWS: removing a stale entry")?;
        }
        for (k, e) in entries {
            // The placement is checked against the table's size before it gets here
            // (`te::assign_on`), so a failure is the kernel's, named as it is.
            m.insert(k, e, 0).context("TE_FLOWS: inserting an entry")?;
        }
        Ok(())
    }

    pub fn te_flows(&mut self) -> Result<Vec<(TeKey, TeEntry)>> {
        let m: aya::maps::HashMap<&mut MapData, TeKey, TeEntry> = self.map(maps::TE_FLOWS)?;
        m.iter().collect::<Result<_, _>>().context("TE_FLOWS: reading its entries")
    }

    /// The ring buffer of XOFF requests (the agent's input). Takes the map out of this dataplane.
    pub fn take_pfc_events(&mut self) -> Result<aya::maps::RingBuf<aya::maps::MapData>> {
        let map = self.maps.remove(maps::PFC_EVENTS).context("map PFC_EVENTS missing (taken already?)")?;
        Ok(aya::maps::RingBuf::try_from(map)?)
    }

    /// A reader of the program's slow-path log (aya-log's `AYA_LOGS` ring buffer) that hands
    /// each record to `logger` on [`aya_log::EbpfLogger::flush`]; poll its fd for readability.
    /// Takes the map out of this dataplane.
    ///
    /// aya-log opens the ring buffer of a loaded program by the program's id (or out of an
    /// [`Ebpf`], which has given its maps to this dataplane), and this dataplane may have been
    /// reopened from pins, with no program: the program is the one loaded in the kernel that
    /// uses this very map (the pinned map's id), which makes it this switch's `fabric_switch`
    /// (the only program of the object that logs).
    pub fn take_logger<T: log::Log>(&mut self, logger: T) -> Result<aya_log::EbpfLogger<T>> {
        let map = self.maps.remove(maps::AYA_LOGS).context("map AYA_LOGS missing (taken already?)")?;
        let aya::maps::Map::RingBuf(data) = &map else { bail!("map AYA_LOGS is not a ring buffer") };
        let map_id = data.info().context("AYA_LOGS: map info")?.id();
        let program_id = aya::programs::loaded_programs()
            .filter_map(Result::ok)
            .find(|p| p.map_ids().ok().flatten().is_some_and(|ids| ids.contains(&map_id)))
            .with_context(|| format!("no loaded program uses this switch's AYA_LOGS map (id {map_id})"))?
            .id();
        aya_log::EbpfLogger::init_from_id_with_logger(program_id, logger)
            .with_context(|| format!("opening the log of program {program_id}"))
    }
}

/// What a switch's balancing modes did since it came up (see
/// [`fabric_common::balance::BalanceEvent`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BalanceMoves {
    /// `flowlet`: new flowlets of a flow that took another member than its previous flowlet.
    pub flowlet_moves: u64,
    /// `adaptive`: packets sent to the second candidate (its queue was shorter).
    pub adaptive_second_choices: u64,
}
