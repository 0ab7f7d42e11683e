//! Every map of the switch program, and the [`ForwardingTables`] view the decision code uses.
//! Names are the contract with the controller (`fabric_user::dataplane`). One more map of the
//! object, `AYA_LOGS` (the slow-path log), is defined by `aya-log-ebpf`.
use core::cell::Cell;
use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};

use aya_ebpf::helpers::{bpf_get_prandom_u32, bpf_ktime_get_ns};
use aya_ebpf::{
    macros::map,
    maps::{
        Array, DevMap, HashMap, PerCpuArray, RingBuf,
        lpm_trie::{Key, LpmTrie},
    },
};
use fabric_common::{
    balance::{BalanceEvent, FlowletSlot, MAX_FLOWLETS, MemberState, PAUSED, WcmpWeights, flowlet_index},
    config::{MAX_IFINDEX, MAX_PORTS, PortInfo, SwitchConfig},
    counters::{MemberCounters, PortCounters},
    fault::PortLoss,
    forward::{ForwardingTables, verifier_mask},
    pfc::CLASSES,
    qos::class_slot,
    qos::{ClassCounters, QosConfig},
    queue::{EgressQueue, IngressAccount, LineRate},
    route::{EcmpGroup, MAX_GROUP_MEMBERS, MAX_GROUPS, MAX_ROUTES, RouteTarget},
    te::{MAX_TE_FLOWS, TeEntry, TeKey},
};

use crate::atomic::load_shared;

/// Switch-wide settings (one entry).
#[map]
pub static CONFIG: Array<SwitchConfig> = Array::with_max_entries(1, 0);

/// Ingress ifindex -> port.
#[map]
pub static PORTS: Array<PortInfo> = Array::with_max_entries(MAX_IFINDEX, 0);

/// Port index -> egress ifindex.
#[map]
pub static EGRESS: DevMap = DevMap::with_max_entries(MAX_PORTS, 0);

#[map]
pub static ROUTES_V4: LpmTrie<[u8; 4], RouteTarget> = LpmTrie::with_max_entries(MAX_ROUTES, 0);

#[map]
pub static ROUTES_V6: LpmTrie<[u8; 16], RouteTarget> = LpmTrie::with_max_entries(MAX_ROUTES, 0);

#[map]
pub static GROUPS: Array<EcmpGroup> = Array::with_max_entries(MAX_GROUPS, 0);

#[map]
pub static PORT_COUNTERS: PerCpuArray<PortCounters> = PerCpuArray::with_max_entries(MAX_PORTS, 0);

/// Centralised traffic engineering: the controller's member per flow (read in `te` mode).
#[map]
pub static TE_FLOWS: HashMap<TeKey, TeEntry> = HashMap::with_max_entries(MAX_TE_FLOWS, 0);

/// Indexed by `group * MAX_GROUP_MEMBERS + member`.
#[map]
pub static MEMBER_COUNTERS: PerCpuArray<MemberCounters> =
    PerCpuArray::with_max_entries(MAX_GROUPS * MAX_GROUP_MEMBERS as u32, 0);

/// `flowlet` mode: a direct-mapped table by flow hash (`flowlet_index`): a flow's current
/// member and when it was last seen. An array, whose lookup the verifier inlines: a hash map
/// lookup per packet cost the live path about 40 ns a hop.
#[map]
pub static FLOWLETS: Array<FlowletSlot> = Array::with_max_entries(MAX_FLOWLETS, 0);

/// `wcmp` mode: per group slot, the cumulative weights of its members (their ports' modelled
/// rates), written by the controller after the group and after every rate change.
#[map]
pub static WCMP: Array<WcmpWeights> = Array::with_max_entries(MAX_GROUPS, 0);

/// Moves of the balancing modes, per CPU: a count per `BalanceEvent`.
#[map]
pub static BALANCE_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(BalanceEvent::COUNT, 0);

/// The maps as the shared decision code sees them, and the run's clock.
#[derive(Default)]
pub struct Tables {
    /// `bpf_ktime_get_ns` once read (0: not yet): every use of the clock for one packet is this
    /// one reading, which costs 15-20 ns a hop on the live path (the TSC read is ordered: it
    /// waits for the loads before it).
    now: Cell<u64>,
}

impl Tables {
    /// The run's clock, read on first use.
    #[inline(always)]
    pub fn clock(&self) -> u64 {
        let mut now = self.now.get();
        if now == 0 {
            // SAFETY: bpf_ktime_get_ns takes no arguments and has no preconditions.
            now = unsafe { bpf_ktime_get_ns() };
            self.now.set(now);
        }
        now
    }
}

impl ForwardingTables for Tables {
    #[inline(always)]
    fn route_v4(&self, dst: &[u8; 4]) -> Option<RouteTarget> {
        ROUTES_V4.get(Key::new(32, *dst)).copied()
    }

    #[inline(always)]
    fn route_v6(&self, dst: &[u8; 16]) -> Option<RouteTarget> {
        ROUTES_V6.get(Key::new(128, *dst)).copied()
    }

    #[inline(always)]
    fn group(&self, id: u32) -> Option<&EcmpGroup> {
        GROUPS.get(id)
    }
}

impl MemberState for Tables {
    #[inline(always)]
    fn te_entry(&self, key: &TeKey) -> Option<TeEntry> {
        // SAFETY: `HashMap::get`'s contract: in a preallocated hash map (flags 0, as here) an
        // element the controller removes may be reused for another key while we read it, so the
        // value may be garbage. The memory itself stays valid (preallocated, and the program runs
        // under RCU); the value is copied out at once, no reference is kept, every bit pattern is
        // a valid `TeEntry` (two u32), and `decide` uses it only if its group matches the route's
        // and its member index is in range.
        unsafe { TE_FLOWS.get(key) }.copied()
    }

    #[inline(always)]
    fn now_ns(&self) -> u64 {
        self.clock()
    }

    #[inline(always)]
    fn note(&self, event: BalanceEvent) {
        if let Some(n) = BALANCE_COUNTERS.get_ptr_mut(event as u32) {
            // SAFETY: `get_ptr_mut` returned a pointer only for an in-bounds slot: this CPU's copy
            // of a per-CPU array value, valid while the program runs; XDP runs in NAPI (softirq)
            // context, so no other run on this CPU interleaves with this increment.
            unsafe { *n += 1 };
        }
    }

    #[inline(always)]
    fn random(&self) -> u32 {
        // SAFETY: bpf_get_prandom_u32 takes no arguments and has no preconditions.
        unsafe { bpf_get_prandom_u32() }
    }

    /// The modelled depth of the member's egress queue for `class` (as `congestion::offer`
    /// computes it), [`PAUSED`] while the queue is paused.
    #[inline(always)]
    fn member_load(&self, group: u32, member: u32, class: usize) -> u64 {
        let Some(g) = GROUPS.get(group) else { return PAUSED };
        // `verifier_mask`: LLVM knows `member < n <= 64` and would drop a plain mask.
        let Some(m) = g.members.get(verifier_mask(member, MAX_GROUP_MEMBERS as u32 - 1) as usize) else {
            return PAUSED;
        };
        let Some(q) = QUEUES.get_ptr(class_slot(m.port, class)) else { return PAUSED };
        let now = self.now_ns();
        // SAFETY: `q` came from `get_ptr` for an in-bounds slot: an array map value, valid and
        // 8-byte aligned while the program runs, whose fields are accessed only through raw
        // pointers: the tail, which other CPUs change with `cas`/`fetch_add`, by `load_shared`;
        // the pause, written by its port's receive path alone, by an untorn volatile load. A
        // load estimate: the two may be from different instants.
        let (tail, paused_until) =
            unsafe { (load_shared(addr_of!((*q).tail_ns)), read_volatile(addr_of!((*q).paused_until_ns))) };
        if paused_until > now {
            return PAUSED;
        }
        PORT_RATE.get(m.port).unwrap_or(&LineRate::STOPPED).depth_bytes(tail, paused_until, now)
    }

    #[inline(always)]
    fn wcmp_pick(&self, group: u32, h: u32, n: u32) -> Option<u32> {
        WCMP.get(group)?.pick(h, n)
    }

    #[inline(always)]
    fn flowlet(&self, flow: u32) -> Option<FlowletSlot> {
        FLOWLETS.get(flowlet_index(flow)).copied().filter(|s| s.flow == flow)
    }

    /// A new flowlet: written over the flow's table entry (another flow's slot there is lost,
    /// as in a hardware flowlet table).
    #[inline(always)]
    fn store_flowlet(&self, flow: u32, slot: FlowletSlot) {
        if let Some(p) = FLOWLETS.get_ptr_mut(flowlet_index(flow)) {
            // SAFETY: `get_ptr_mut` returned a pointer into the array map for an in-bounds
            // index, valid while the program runs; a volatile store, as other CPUs may read the
            // entry (they copy it and check its flow, group and member before use).
            unsafe { write_volatile(p, slot) }
        }
    }

    /// One lookup: the entry copied out, then its last-seen time moved to `now` in place (if it
    /// is another flow's, `balance` starts a new flowlet and overwrites it whole).
    #[inline(always)]
    fn flowlet_seen(&self, flow: u32, now: u64) -> Option<FlowletSlot> {
        let p = FLOWLETS.get_ptr_mut(flowlet_index(flow))?;
        // SAFETY: as in `store_flowlet`: an in-bounds array value; copied out with a volatile
        // read (another CPU may be writing it: every bit pattern is a valid slot, and `balance`
        // checks it), then one aligned u64 field stored volatilely.
        unsafe {
            let slot = read_volatile(p);
            write_volatile(addr_of_mut!((*p).last_ns), now);
            Some(slot)
        }
    }
}

// ---- The congestion model (see `fabric_common::qos` and `fabric_common::queue`) ----

/// The switch's congestion settings (one entry; `enabled == 0` turns the model off).
#[map]
pub static QOS: Array<QosConfig> = Array::with_max_entries(1, 0);

/// Port index -> modelled (time-scaled) line rate, with the factors that spare the model a
/// division per packet.
#[map]
pub static PORT_RATE: Array<LineRate> = Array::with_max_entries(MAX_PORTS, 0);

/// Port index -> injected loss on the link it sends into (`fabric_common::fault`).
#[map]
pub static PORT_LOSS: Array<PortLoss> = Array::with_max_entries(MAX_PORTS, 0);

/// Egress port/class -> modelled queue, shared by all CPUs (updated atomically).
#[map]
pub static QUEUES: Array<EgressQueue> = Array::with_max_entries(MAX_PORTS * CLASSES as u32, 0);

/// Ingress port/class -> bytes held on its behalf (written by that port's receive path only).
#[map]
pub static ACCOUNTS: Array<IngressAccount> = Array::with_max_entries(MAX_PORTS * CLASSES as u32, 0);

/// Ingress port/class -> when the agent was asked for a pause (0: none outstanding). Set here
/// with compare-and-swap, cleared by the agent once it has sent the resume.
#[map]
pub static PFC_XOFF: Array<u64> = Array::with_max_entries(MAX_PORTS * CLASSES as u32, 0);

/// Bytes in use in the shared pool, sampled by the agent (shared buffer mode).
#[map]
pub static POOL_USED: Array<u64> = Array::with_max_entries(1, 0);

#[map]
pub static CLASS_COUNTERS: PerCpuArray<ClassCounters> = PerCpuArray::with_max_entries(MAX_PORTS * CLASSES as u32, 0);

/// XOFF requests for the agent, which sends the PFC frames.
#[map]
pub static PFC_EVENTS: RingBuf = RingBuf::with_byte_size(64 * 1024, 0);
