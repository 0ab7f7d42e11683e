//! A switch's decisions, made by `fabric-common`'s own code: the member of the destination's
//! ECMP group ([`fabric_common::forward::choose_member`]: the hash of every mode, TE entries),
//! and a packet's fate at its egress queue ([`QosConfig::queue_limit`] of the shared or static
//! buffer, [`QosConfig::verdict`]: RED/ECN marks, lossy drops, headroom), and the Xoff/Xon
//! thresholds that pause the upstream port ([`QosConfig::xoff_bytes`], `xon_bytes`).
//!
//! Unlike the XDP switch's phantom queue, the depth here is the bytes actually held: the twin's
//! queues hold packets, so a paused port stops draining and the exact bytes each ingress holds
//! are known (the XDP model's [`fabric_common::queue::IngressAccount`] approximates them).
use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
};

use fabric_common::{
    balance::{FlowletSlot, MemberState, PAUSED, WcmpWeights},
    forward::choose_member,
    parse::ParsedPacket,
    qos::{QosConfig, Verdict, class_of},
    queue::ECN_CE,
    rng::SplitMix64,
    te::{TeEntry, TeKey},
};

use crate::net::{PortSpec, Routing, SwitchSpec};

/// What a switch's egress queue is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueModel {
    /// The queue holds its packets and sends them at the port's rate; a paused class stops.
    #[default]
    Held,
    /// The XDP testbed's model: a packet leaves at once, and its ECN mark, drop and the
    /// ingress's PFC read the *modelled* depth (a phantom queue, drained at the port's rate by
    /// elapsed time) and a modelled ingress account. A paused switch port keeps sending and
    /// counts `sent_while_paused`; hosts obey pauses as in `Held`, and hold what they receive
    /// until their modelled downlink has delivered it, as the testbed's endpoints do. The
    /// shared pool's use is not kept (the XDP agent sums it every few microseconds; here it
    /// stays empty). For measuring the testbed's model error against `Held`.
    Phantom,
}

impl QueueModel {
    /// Its name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            QueueModel::Held => "held",
            QueueModel::Phantom => "phantom",
        }
    }
}

/// The run-time state of one switch beyond its ports.
#[derive(Debug)]
pub struct Switch {
    pub spec: SwitchSpec,
    /// Wire bytes held in the whole buffer (what the shared pool's threshold reads).
    pub pool_used: u64,
    /// RED's uniform random numbers.
    rng: SplitMix64,
    /// `spray`'s random numbers (a stream of their own, so RED's draws do not depend on the mode).
    spray: Cell<u64>,
    /// `flowlet`: the slot of each flow hash (unbounded: the twin keeps every flow).
    flowlets: RefCell<HashMap<u32, FlowletSlot>>,
}

/// The state an egress decision reads: the switch's own tables, the modelled time, and the
/// depth of each of its egress queues (`load(port, class)`: bytes queued, [`PAUSED`] if paused).
pub struct EgressView<'a, R, L> {
    pub routing: &'a R,
    pub me: usize,
    pub now_ns: u64,
    /// The switch's ports (their line rates are the WCMP weights).
    pub ports: &'a [PortSpec],
    pub load: L,
}

/// [`MemberState`] over one switch of the twin: the same state the XDP switch keeps in maps.
struct TwinState<'a, R, L> {
    switch: &'a Switch,
    view: &'a EgressView<'a, R, L>,
    members: &'a [usize],
}

impl<R: Routing, L: Fn(usize, usize) -> u64> MemberState for TwinState<'_, R, L> {
    fn te_entry(&self, key: &TeKey) -> Option<TeEntry> {
        self.view.routing.te_entry(self.view.me, key)
    }
    fn now_ns(&self) -> u64 {
        self.view.now_ns
    }
    fn random(&self) -> u32 {
        let mut rng = SplitMix64::new(self.switch.spray.get());
        let r = rng.next_u64() as u32;
        self.switch.spray.set(rng.0);
        r
    }
    fn member_load(&self, _group: u32, member: u32, class: usize) -> u64 {
        self.members.get(member as usize).map_or(PAUSED, |&port| (self.view.load)(port, class))
    }
    fn wcmp_pick(&self, _group: u32, h: u32, n: u32) -> Option<u32> {
        let rates: Vec<u64> = self.members.iter().map(|&p| self.view.ports.get(p).map_or(0, |s| s.rate_bps)).collect();
        WcmpWeights::from_weights(&rates).ok()?.pick(h, n)
    }
    fn flowlet(&self, flow: u32) -> Option<FlowletSlot> {
        self.switch.flowlets.borrow().get(&flow).copied()
    }
    fn store_flowlet(&self, flow: u32, slot: FlowletSlot) {
        self.switch.flowlets.borrow_mut().insert(flow, slot);
    }
}

/// What the egress queue decided for a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Queue it, with this TOS (CE set if marked).
    Queue {
        tos: u8,
        marked: bool,
        over_headroom: bool,
    },
    Drop,
}

impl Switch {
    pub fn new(spec: SwitchSpec, seed: u64) -> Self {
        let spray = Cell::new(seed ^ 0x5350_5241_5900_0000);
        Switch { spec, pool_used: 0, rng: SplitMix64::new(seed), spray, flowlets: RefCell::default() }
    }

    /// Where a packet to `dst_host` goes: (group, member index, egress port), or `None` if
    /// the switch has no route.
    #[inline]
    pub fn egress<R: Routing, L: Fn(usize, usize) -> u64>(
        &self,
        view: &EgressView<'_, R, L>,
        dst_host: usize,
        pkt: &ParsedPacket,
    ) -> Option<(u32, u32, usize)> {
        let group = view.routing.group_of(view.me, dst_host)?;
        let members = view.routing.members(view.me, group);
        if members.is_empty() {
            return None;
        }
        let n = members.len() as u32;
        let state = TwinState { switch: self, view, members };
        let member = choose_member(&self.spec.config, pkt, group, n, &state);
        Some((group, member, *members.get(member as usize)?))
    }

    /// The fate of a packet of `wire` bytes and TOS `tos` at an egress queue holding
    /// `queued` wire bytes of its class.
    pub fn admit(&mut self, tos: u8, queued: u64, wire: u64) -> Admission {
        let qos: &QosConfig = &self.spec.qos;
        if qos.enabled == 0 {
            return Admission::Queue { tos, marked: false, over_headroom: false };
        }
        let limit = qos.queue_limit(self.pool_used);
        let random = self.rng.next_u64() as u32;
        match qos.verdict(tos, queued + wire, limit, random) {
            Verdict::Overflow => Admission::Drop,
            Verdict::Forward { mark, over_headroom } => {
                let tos = if mark { tos | ECN_CE } else { tos };
                Admission::Queue { tos, marked: mark, over_headroom }
            }
        }
    }

    /// Whether an ingress holding `held` wire bytes of class `class` must pause its upstream.
    pub fn over_xoff(&self, class: usize, held: u64) -> bool {
        let qos = &self.spec.qos;
        qos.enabled != 0 && qos.is_lossless(class) && held > u64::from(qos.xoff_bytes)
    }

    /// Whether a pausing ingress holding `held` wire bytes may let its upstream resume.
    pub fn under_xon(&self, held: u64) -> bool {
        held < u64::from(self.spec.qos.xon_bytes)
    }

    /// The class of a TOS, as the switch queues it.
    pub fn class(tos: u8) -> usize {
        class_of(tos)
    }
}
