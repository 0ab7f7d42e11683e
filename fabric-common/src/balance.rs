//! The routing modes beyond a hash of the packet: `flowlet`, `adaptive`, `spray` and `wcmp`.
//! Each choice reads switch state (its clock, flowlet table, modelled queues, link weights) as
//! well as the packet, through [`MemberState`]: the XDP program backs it with maps, the two
//! simulators with their own state, tests with plain structs. The rules:
//!
//! - **flow**: the E-ECMP key (five-tuple plus BTH destination QP) and its seeded hash `h`, as
//!   `eecmp` hashes it ([`flow_hash`]).
//! - **best of two** ([`best_of_two`]): two candidates hashed from a 32-bit value, the first
//!   its multiply-shift onto the members (so, with idle queues, the `eecmp` member), the second
//!   from an avalanche of it (the next member if both coincide); the candidate whose modelled
//!   egress queue of the packet's class holds fewer bytes wins, the first on a tie. A paused
//!   queue counts as full ([`PAUSED`]).
//! - **`flowlet`**: per flow a [`FlowletSlot`] {flow, group, member, generation, last seen} in a
//!   direct-mapped table indexed by the low bits of `h`, as hardware flowlet tables are; a flow
//!   finding another flow's slot there starts a new flowlet and takes the slot over.
//!   A packet within the flowlet gap of the slot's last packet keeps the slot's member; a packet
//!   after a longer idle time (or of a new flow, or whose slot is for another group or a member
//!   beyond the group) starts a new flowlet: the generation advances and the member is the best
//!   of two hashed from `h` and the generation ([`flowlet_hash`]). So a flow's first flowlet at
//!   idle queues is its `eecmp` member, and each later one draws fresh candidates.
//! - **`adaptive`**: per packet, the best of two hashed from `h`. Packets of one flow can take
//!   different members when the queues change, so it may reorder; at equal queues it is `eecmp`.
//! - **`spray`**: per packet, a member from a uniform random number (`bpf_get_prandom_u32` in
//!   the switch) scaled onto the group.
//! - **`wcmp`**: members weighted by the modelled line rate of their egress port (a degraded
//!   link gets its share of the flows); `h` scaled onto the cumulative weights
//!   ([`WcmpWeights::pick`]). Weights that do not match the group (another member count: the
//!   controller has not rewritten them yet) fall back to the `eecmp` hash.
use crate::config::{HashMode, SwitchConfig};
use crate::hash::{FlowKey, fmix32, hash_key, scale_to_members};
use crate::parse::ParsedPacket;
use crate::route::{MAX_GROUP_MEMBERS, verifier_mask};
use crate::te::{TeEntry, TeKey};

/// The load of a member whose queue is paused: more than any depth.
pub const PAUSED: u64 = u64::MAX;

/// Entries of a switch's flowlet table: a direct-mapped array in the XDP switch, indexed by
/// [`flowlet_index`] (a power of two).
pub const MAX_FLOWLETS: u32 = 16_384;

/// The flowlet-table entry of flow hash `flow`.
#[inline(always)]
pub const fn flowlet_index(flow: u32) -> u32 {
    flow & (MAX_FLOWLETS - 1)
}

/// The default flowlet gap in modelled time: a few round trips of the default fabric (a
/// flowlet gap must exceed the path delay difference for a move not to reorder).
pub const DEFAULT_FLOWLET_GAP_NS: u64 = 50_000;

/// A move a balancing mode made, counted per switch (the XDP switch: the per-CPU
/// `BALANCE_COUNTERS` array, indexed by the discriminant; see [`crate::maps::BALANCE_COUNTERS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum BalanceEvent {
    /// `flowlet`: a flow started a new flowlet (after a gap) on another member of the same group
    /// than its previous flowlet's.
    FlowletMove = 0,
    /// `adaptive`: the second candidate was less loaded and took the packet.
    AdaptiveSecond = 1,
}

impl BalanceEvent {
    /// Entries of the counter array.
    pub const COUNT: u32 = 2;
    pub const ALL: [BalanceEvent; Self::COUNT as usize] = [Self::FlowletMove, Self::AdaptiveSecond];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FlowletMove => "flowlet_moves",
            Self::AdaptiveSecond => "adaptive_second_choices",
        }
    }
}

/// The golden-ratio constant used to spread small integers over 32 bits.
const SPREAD: u32 = 0x9E37_79B9;

/// What the modes beyond a hash read and write besides the packet. Every method has a neutral
/// default (no TE entry, time 0, idle queues, no weights, no flowlet table), so tables that
/// support only the hash modes need implement none.
pub trait MemberState {
    /// The TE table (read only in `te` mode).
    fn te_entry(&self, _key: &TeKey) -> Option<TeEntry> {
        None
    }
    /// The switch's clock, ns, in the time base of [`SwitchConfig::flowlet_gap_ns`].
    fn now_ns(&self) -> u64 {
        0
    }
    /// A fresh uniform random number per call (`spray`).
    fn random(&self) -> u32 {
        0
    }
    /// Bytes in the modelled egress queue of class `class` behind member `member` of group
    /// `group`, or [`PAUSED`] if that queue is paused.
    fn member_load(&self, _group: u32, _member: u32, _class: usize) -> u64 {
        0
    }
    /// The member [`WcmpWeights::pick`] gives for hash `h` on group `group`'s weights, if
    /// weights for an `n`-member group are installed (a method rather than the weights
    /// themselves, so that the XDP switch never copies them onto its small stack).
    fn wcmp_pick(&self, _group: u32, _h: u32, _n: u32) -> Option<u32> {
        None
    }
    /// The flowlet slot of flow hash `flow`.
    fn flowlet(&self, _flow: u32) -> Option<FlowletSlot> {
        None
    }
    /// Records the flowlet slot of flow hash `flow`.
    fn store_flowlet(&self, _flow: u32, _slot: FlowletSlot) {}
    /// The flowlet slot of flow hash `flow` as it was, recording `now` as its last-seen time
    /// (every packet of the flow ends with its slot's `last_ns` at `now`, whether it continues
    /// the flowlet or starts one). The XDP switch does this in one lookup, writing the field in
    /// place: a map update per packet would cost more than the rest of the switch.
    fn flowlet_seen(&self, flow: u32, now: u64) -> Option<FlowletSlot> {
        let slot = self.flowlet(flow);
        if let Some(s) = slot {
            self.store_flowlet(flow, FlowletSlot { last_ns: now, ..s });
        }
        slot
    }
    /// Counts a move ([`BalanceEvent`]); tables without counters ignore it.
    fn note(&self, _event: BalanceEvent) {}
}

/// One flow's flowlet state at one switch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FlowletSlot {
    /// When the flow's last packet was forwarded (the switch's clock).
    pub last_ns: u64,
    /// The flow hash the slot is for (a direct-mapped table entry may hold another flow's).
    pub flow: u32,
    /// The group the member belongs to (a slot for another group is stale).
    pub group: u16,
    pub member: u8,
    /// Flowlets of this flow so far, minus one (wrapping).
    pub generation: u8,
}

const _: () = assert!(core::mem::size_of::<FlowletSlot>() == 16);

/// Cumulative member weights of one group: member `i` takes the hashes in
/// `[cumulative[i-1], cumulative[i])` of `0..cumulative[len-1]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct WcmpWeights {
    /// The member count the weights were computed for.
    pub len: u32,
    pub _pad: u32,
    pub cumulative: [u32; MAX_GROUP_MEMBERS],
}

const _: () = assert!(core::mem::size_of::<WcmpWeights>() == 8 + 4 * MAX_GROUP_MEMBERS);

impl Default for WcmpWeights {
    fn default() -> Self {
        WcmpWeights { len: 0, _pad: 0, cumulative: [0; MAX_GROUP_MEMBERS] }
    }
}

/// Why weights cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcmpError {
    /// No members, or more than a group holds.
    MemberCount(usize),
    /// Every weight is zero.
    AllZero,
}

impl core::fmt::Display for WcmpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WcmpError::MemberCount(n) => {
                write!(f, "WCMP weights for {n} members (a group has 1..={MAX_GROUP_MEMBERS})")
            }
            WcmpError::AllZero => write!(f, "every WCMP weight is zero"),
        }
    }
}

impl core::error::Error for WcmpError {}

impl WcmpWeights {
    /// Weights proportional to `weights` (link rates in bit/s, say), scaled down together until
    /// their sum fits 31 bits; a non-zero weight keeps at least 1.
    pub fn from_weights(weights: &[u64]) -> Result<Self, WcmpError> {
        if weights.is_empty() || weights.len() > MAX_GROUP_MEMBERS {
            return Err(WcmpError::MemberCount(weights.len()));
        }
        let max = weights.iter().copied().max().unwrap_or(0);
        if max == 0 {
            return Err(WcmpError::AllZero);
        }
        // 64 weights of at most 2^25 sum below 2^31.
        let shift = (64 - max.leading_zeros()).saturating_sub(25);
        let mut w = WcmpWeights { len: weights.len() as u32, ..Self::default() };
        let mut sum = 0u32;
        for (i, &x) in weights.iter().enumerate() {
            let scaled = if x == 0 { 0 } else { (x >> shift).max(1) as u32 };
            sum += scaled;
            w.cumulative[i] = sum;
        }
        Ok(w)
    }

    /// The total weight.
    #[inline(always)]
    pub fn total(&self) -> u32 {
        match self.len {
            1..=64 => self.cumulative[verifier_mask(self.len - 1, 63) as usize],
            _ => 0,
        }
    }

    /// The member (in `0..n`) that hash `h` falls on, or `None` if these weights are not for an
    /// `n`-member group. A binary search of fixed depth (64 members: 7 steps), with every index
    /// masked into the array so that the verifier can bound it ([`verifier_mask`]: LLVM knows
    /// the indices are below 64 and would drop a plain mask).
    #[inline(always)]
    pub fn pick(&self, h: u32, n: u32) -> Option<u32> {
        if self.len != n || n == 0 || n as usize > MAX_GROUP_MEMBERS {
            return None;
        }
        let total = self.total();
        if total == 0 {
            return None;
        }
        let target = scale_to_members(h, total);
        let (mut lo, mut hi) = (0u32, n - 1);
        for _ in 0..7 {
            if lo < hi {
                let mid = (lo + hi) / 2;
                if self.cumulative[verifier_mask(mid, 63) as usize] > target {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
        }
        Some(lo)
    }
}

/// The flow's hash as `eecmp` computes it.
#[inline(always)]
pub fn flow_hash(cfg: &SwitchConfig, pkt: &ParsedPacket) -> u32 {
    hash_key(cfg.seed, &FlowKey::for_packet(HashMode::Eecmp, pkt))
}

/// The value a flow's flowlet number `generation` draws its candidates from: the flow hash
/// itself for the first flowlet.
#[inline(always)]
pub const fn flowlet_hash(flow: u32, generation: u8) -> u32 {
    if generation == 0 { flow } else { fmix32(flow ^ (generation as u32).wrapping_mul(SPREAD)) }
}

/// The two candidates drawn from `h` for an `n`-member group (`n` non-zero; equal if `n == 1`).
#[inline(always)]
pub const fn candidates(h: u32, n: u32) -> (u32, u32) {
    let first = scale_to_members(h, n);
    let mut second = scale_to_members(fmix32(h ^ SPREAD), n);
    if second == first && n > 1 {
        second = if first + 1 == n { 0 } else { first + 1 };
    }
    (first, second)
}

/// The less loaded of the two candidates drawn from `h`, the first on a tie.
#[inline(always)]
pub fn best_of_two(h: u32, n: u32, load: impl Fn(u32) -> u64) -> u32 {
    best_of_two_choice(h, n, load).0
}

/// [`best_of_two`], and whether the second candidate won.
#[inline(always)]
pub fn best_of_two_choice(h: u32, n: u32, load: impl Fn(u32) -> u64) -> (u32, bool) {
    let (first, second) = candidates(h, n);
    if first != second && load(second) < load(first) { (second, true) } else { (first, false) }
}

/// The member (in `0..n`) of group `group` that a balancing mode picks; `None` for the other
/// modes. `n` must be non-zero.
#[inline(always)]
pub fn balance<S: MemberState + ?Sized>(
    cfg: &SwitchConfig,
    pkt: &ParsedPacket,
    group: u32,
    n: u32,
    state: &S,
) -> Option<u32> {
    let class = || crate::qos::class_of(crate::qos::tos_of(pkt));
    match HashMode::from_u32(cfg.hash_mode) {
        HashMode::Adaptive => {
            let class = class();
            let (member, second) = best_of_two_choice(flow_hash(cfg, pkt), n, |m| state.member_load(group, m, class));
            if second {
                state.note(BalanceEvent::AdaptiveSecond);
            }
            Some(member)
        }
        HashMode::Flowlet => Some(flowlet(cfg, pkt, group, n, state)),
        HashMode::Spray => Some(scale_to_members(state.random(), n)),
        HashMode::Wcmp => {
            let h = flow_hash(cfg, pkt);
            Some(state.wcmp_pick(group, h, n).unwrap_or_else(|| scale_to_members(h, n)))
        }
        _ => None,
    }
}

/// `flowlet`: keep the slot's member within the gap, else start a new flowlet (module docs).
#[inline(always)]
fn flowlet<S: MemberState + ?Sized>(cfg: &SwitchConfig, pkt: &ParsedPacket, group: u32, n: u32, state: &S) -> u32 {
    let flow = flow_hash(cfg, pkt);
    let now = state.now_ns();
    let slot = state.flowlet_seen(flow, now);
    if let Some(s) = slot
        && continues(&s, flow, group, n, now, cfg.flowlet_gap_ns)
    {
        return s.member as u32;
    }
    let (generation, previous) = match slot {
        Some(s) if s.flow == flow => (s.generation.wrapping_add(1), (s.group as u32 == group).then_some(s.member)),
        _ => (0, None),
    };
    let class = crate::qos::class_of(crate::qos::tos_of(pkt));
    let member = best_of_two(flowlet_hash(flow, generation), n, |m| state.member_load(group, m, class));
    if previous.is_some_and(|p| p as u32 != member) {
        state.note(BalanceEvent::FlowletMove);
    }
    let slot = FlowletSlot { last_ns: now, flow, group: group as u16, member: member as u8, generation };
    state.store_flowlet(flow, slot);
    member
}

/// Whether a packet of flow hash `flow` at `now` continues the flowlet of `slot`.
#[inline(always)]
pub const fn continues(slot: &FlowletSlot, flow: u32, group: u32, n: u32, now: u64, gap_ns: u32) -> bool {
    slot.flow == flow
        && slot.group as u32 == group
        && (slot.member as u32) < n
        && now.saturating_sub(slot.last_ns) <= gap_ns as u64
}
