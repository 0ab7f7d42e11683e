//! The event loop: packets arrive at switches (routed, admitted, queued), ports serialize them
//! onto links, PFC frames pause and resume ports, hosts send what their QPs, pacers and
//! congestion controls allow and answer what arrives.
//!
//! Store and forward: a packet is handled at a node once its last bit arrived. A port sends
//! one frame at a time, its classes in strict priority, skipping paused classes; the frame in
//! transmission is never interrupted. A switch holds every queued packet's wire bytes against
//! its ingress port and class; crossing Xoff sends a pause frame upstream (refreshed at half
//! its time, as the agent does), falling below Xon a resume (quanta 0). PFC frames go out
//! after the frame in transmission and take their own wire time and the propagation delay;
//! they do not delay the data behind them (84 bytes of wire time, under 2 ns at 400G).
use fabric_common::{
    balance::PAUSED,
    fault::{PortLoss, is_lost},
    parse::ParsedPacket,
    pfc::{self, CLASSES, PauseFrame, quanta_to_ns},
    queue,
};
use fabric_roce::{
    buf::PacketBuf,
    cc::Feedback,
    traffic_class::{is_ce, is_control, priority_class},
};

use crate::{
    event::{EventQueue, Kind, Nanos},
    host::{Host, QpState},
    link::{DOWNLINK_CONTROL, DOWNLINK_DATA, PhantomPort, Port, PortCounters, Queued, wire_bytes},
    net::{Network, NodeKind, Routing},
    packet::{Packet, PacketPool, Payload},
    report::{DepthHistogram, QpOutcome, StepReport, TierReport, paused_time},
    switch::{Admission, EgressView, QueueModel, Switch},
    workload::{EndpointConfig, QpSpec},
};

/// One direction of a QP, as the switches see it: the destination host and the parsed
/// packet the hash reads.
#[derive(Clone, Copy, Debug)]
struct Way {
    dst: u32,
    packet: ParsedPacket,
}

/// Why a step could not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TwinError {
    #[error("qps[{index}].{field}: node {node} is not a host")]
    NotAHost { index: usize, field: &'static str, node: usize },
    #[error("qps[{index}]: posting its first write failed: {reason}")]
    Post { index: usize, reason: String },
    #[error("qps[{index}]: QP {qpn} is used twice at host {host}")]
    DuplicateQpn { index: usize, qpn: u32, host: usize },
    #[error("qps[{index}]: src and dst are the same host {host}")]
    Loopback { index: usize, host: usize },
    #[error("{0} QPs: more than the twin's 2^32 indices")]
    TooManyQps(usize),
    #[error("changes[{index}]: {reason}")]
    Change { index: usize, reason: String },
}

/// A change to the network during a step (an operational what-if).
pub enum Change<'n, R> {
    /// The link at `node`'s `port` stops carrying frames, both ways: what is queued at either
    /// end and in flight on it is lost, and so is whatever the switches still route into it.
    LinkDown { node: usize, port: usize },
    /// The link at `node`'s `port` carries frames again, both ways (a flap's second half): it
    /// starts empty, and only what the routes send into it from then on crosses it.
    LinkUp { node: usize, port: usize },
    /// The switches route by `net`'s routes and groups from then on (the controller's repair
    /// or drain; the same nodes and ports). Member counters stop: their numbering is the
    /// first routing's.
    Routes(&'n Network<R>),
    /// The port at `node`'s `port` sends its peer a PFC frame for `class` with `quanta` (0:
    /// resume): a source of pauses outside the switches' thresholds, such as a NIC whose
    /// receive buffer is full (a stuck receiver) pausing its rack switch.
    Pfc { node: usize, port: usize, class: usize, quanta: u16 },
}

// Not derived: a derive would ask `R` to be `Copy`, and only a reference to it is held.
impl<R> Clone for Change<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R> Copy for Change<'_, R> {}

/// A [`Change`] at a modelled time, from the start of the step.
pub struct Scheduled<'n, R> {
    pub at_ns: Nanos,
    pub change: Change<'n, R>,
}

impl<R> Clone for Scheduled<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R> Copy for Scheduled<'_, R> {}

/// The simulator of one network.
pub struct Twin<'n, R> {
    net: &'n Network<R>,
    cfg: EndpointConfig,
    seed: u64,
    events: EventQueue,
    ports: Vec<Port>,
    /// Per node: a switch's state (hosts: `None`).
    switches: Vec<Option<Switch>>,
    hosts: Vec<Option<Host>>,
    /// Per node: a host (dense, for the check every arrival makes).
    is_host: Vec<bool>,
    qps: Vec<QpState>,
    /// Per QP, its data direction then its ACK direction: what the switches route it by, apart
    /// from the endpoints' state so that a hop reads only this.
    ways: Vec<Way>,
    packets: PacketPool,
    buf: PacketBuf,
    feedback: Vec<Feedback>,
    /// Per tier (switch tiers, then hosts): queue depth samples at every enqueue.
    depth: Vec<DepthHistogram>,
    /// The XDP member counters ([`Routing::member_slot`]), if the routing numbers them.
    member_packets: Vec<u64>,
    member_bytes: Vec<u64>,
    incomplete: usize,
    delivered: u64,
    hops: u64,
    unroutable: u64,
    /// Per global port: its link has failed.
    down: Vec<bool>,
    lost: u64,
    /// Per global port: injected loss on what it sends (empty: none anywhere), drawn with the
    /// XDP switch's own [`fabric_common::fault::is_lost`].
    loss: Vec<PortLoss>,
    lost_to_loss: u64,
    /// The routing is the network's own, whose members the counters number.
    count_members: bool,
    queue_model: QueueModel,
    /// Per global port, under [`QueueModel::Phantom`] (empty otherwise).
    phantom: Vec<PhantomPort>,
}

impl<'n, R: Routing> Twin<'n, R> {
    /// A twin of `net` whose endpoints are set up as `cfg` says; `seed` seeds RED's random
    /// numbers (per switch).
    pub fn new(net: &'n Network<R>, cfg: EndpointConfig, seed: u64) -> Self {
        Twin {
            net,
            cfg,
            seed,
            events: EventQueue::new(),
            ports: Vec::new(),
            switches: Vec::new(),
            hosts: Vec::new(),
            is_host: Vec::new(),
            qps: Vec::new(),
            ways: Vec::new(),
            packets: PacketPool::default(),
            buf: PacketBuf::new(),
            feedback: Vec::new(),
            depth: Vec::new(),
            member_packets: Vec::new(),
            member_bytes: Vec::new(),
            incomplete: 0,
            delivered: 0,
            hops: 0,
            unroutable: 0,
            down: Vec::new(),
            lost: 0,
            loss: Vec::new(),
            lost_to_loss: 0,
            count_members: true,
            queue_model: QueueModel::Held,
            phantom: Vec::new(),
        }
    }

    /// Runs the switches' egress queues as `model` says (from the next step on).
    pub fn set_queue_model(&mut self, model: QueueModel) {
        self.queue_model = model;
    }

    /// Port `port` of node `node` loses a share of the frames it sends, as a testbed switch port
    /// does after `fabric link degrade --loss` (the same seeded draw, frame by frame; the draws
    /// go on from step to step).
    pub fn set_loss(&mut self, node: usize, port: usize, loss: PortLoss) {
        if self.loss.is_empty() {
            self.loss = vec![PortLoss::default(); self.net.port_count()];
        }
        self.loss[self.net.port_index(node, port) as usize] = loss;
    }

    /// Whether the link of port `e` loses the frame it is sending now (the draw advances).
    fn link_loses(&mut self, e: u32) -> bool {
        let Some(l) = self.loss.get_mut(e as usize).filter(|l| l.threshold != 0) else { return false };
        let index = l.drawn;
        l.drawn += 1;
        is_lost(l.seed, index, l.threshold)
    }

    /// An upper bound on the memory a step of `qps` takes, bytes: the ports, switches, hosts
    /// and QPs, and every packet that can be alive at once (each QP's window of data packets
    /// and as many responses), with its queue entry and events. For refusing a run up front.
    pub fn memory_estimate(net: &Network<R>, cfg: &EndpointConfig, qps: &[QpSpec]) -> u64 {
        let per_packet = size_of::<Option<Packet>>() + size_of::<Queued>() + 2 * size_of::<crate::event::Event>();
        let packets: u64 = qps
            .iter()
            .map(|q| {
                u64::from(cfg.transport.window_packets(cfg.window_packets))
                    .min(q.bytes.div_ceil(u64::from(cfg.mtu.bytes())) + 1)
            })
            .sum();
        let fixed = net.port_count() * size_of::<Port>()
            + net.nodes.len() * (size_of::<Option<Switch>>() + size_of::<Option<Host>>())
            + qps.len() * (size_of::<QpState>() + 64);
        fixed as u64 + 2 * packets * per_packet as u64
    }

    /// Runs one step: every QP of `qps` starts at time 0 and the step ends when all are
    /// acknowledged in full, when nothing is left to happen, or at `deadline_ns`.
    pub fn run_step(&mut self, qps: &[QpSpec], deadline_ns: Nanos) -> Result<StepReport, TwinError> {
        self.run_step_with(qps, deadline_ns, &[])
    }

    /// [`Twin::run_step`] with `changes` to the network at their times. A change due after
    /// every QP completed does not happen; one at time 0 happens before the first packet.
    pub fn run_step_with(
        &mut self,
        qps: &[QpSpec],
        deadline_ns: Nanos,
        changes: &[Scheduled<'n, R>],
    ) -> Result<StepReport, TwinError> {
        let home = self.net;
        self.reset();
        self.check_changes(changes)?;
        self.start_qps(qps)?;
        for (i, c) in changes.iter().enumerate() {
            self.events.schedule(c.at_ns, Kind::Change, 0, i as u32);
        }
        let report = self.event_loop(deadline_ns, changes);
        self.net = home;
        Ok(report)
    }

    fn check_changes(&self, changes: &[Scheduled<'n, R>]) -> Result<(), TwinError> {
        for (index, c) in changes.iter().enumerate() {
            let reason = match c.change {
                Change::LinkDown { node, port } | Change::LinkUp { node, port } => {
                    (self.net.nodes.get(node).is_none_or(|n| port >= n.ports.len()))
                        .then(|| format!("node {node} has no port {port}"))
                }
                Change::Routes(net) => (net.nodes.len() != self.net.nodes.len()
                    || net.nodes.iter().zip(&self.net.nodes).any(|(a, b)| a.ports != b.ports))
                .then(|| "the new routes are for another network (nodes or ports differ)".to_string()),
                Change::Pfc { node, port, class, .. } => {
                    if self.net.nodes.get(node).is_none_or(|n| port >= n.ports.len()) {
                        Some(format!("node {node} has no port {port}"))
                    } else {
                        (class >= CLASSES).then(|| format!("class {class} does not exist (0..{CLASSES})"))
                    }
                }
            };
            if let Some(reason) = reason {
                return Err(TwinError::Change { index, reason });
            }
        }
        Ok(())
    }

    fn event_loop(&mut self, deadline_ns: Nanos, changes: &[Scheduled<'n, R>]) -> StepReport {
        while let Some(e) = self.events.pop() {
            if e.time > deadline_ns {
                break;
            }
            match e.kind {
                Kind::Arrive => self.on_arrive(e.port, e.arg),
                Kind::TxDone => {
                    self.ports[e.port as usize].busy = false;
                    self.kick(e.port);
                }
                Kind::Pause => self.on_pause(e.port, e.arg),
                Kind::Resume => {
                    self.ports[e.port as usize].resume_at = None;
                    self.kick(e.port);
                }
                Kind::HostWake => self.on_wake(e.arg as usize),
                Kind::PfcTend => self.on_tend(e.port, e.arg as usize),
                Kind::Change => self.on_change(changes[e.arg as usize].change),
            }
            if self.incomplete == 0 {
                break;
            }
        }
        self.report()
    }

    fn on_change(&mut self, change: Change<'n, R>) {
        match change {
            Change::LinkDown { node, port } => {
                let e = self.net.port_index(node, port);
                let peer = self.ports[e as usize].peer;
                for p in [e, peer] {
                    self.down[p as usize] = true;
                    let node = self.ports[p as usize].node as usize;
                    for (class, q) in self.ports[p as usize].take_all() {
                        if !self.is_host[node] {
                            self.dequeued(node, class, q);
                        }
                        self.packets.remove(q.id);
                        self.lost += 1;
                    }
                }
            }
            Change::LinkUp { node, port } => {
                let e = self.net.port_index(node, port);
                let peer = self.ports[e as usize].peer;
                for p in [e, peer] {
                    self.down[p as usize] = false;
                    self.kick(p);
                }
            }
            Change::Routes(net) => {
                self.net = net;
                self.count_members = false;
            }
            Change::Pfc { node, port, class, quanta } => {
                let p = self.net.port_index(node, port);
                if !self.down[p as usize] {
                    self.send_pfc(p, class, quanta);
                }
            }
        }
    }

    /// Fresh ports, switches and hosts: a step starts on an idle fabric.
    fn reset(&mut self) {
        let net = self.net;
        self.events.reset();
        self.packets.clear();
        self.ports.clear();
        self.switches.clear();
        self.hosts.clear();
        self.qps.clear();
        self.ways.clear();
        (self.delivered, self.hops, self.unroutable, self.lost, self.lost_to_loss) = (0, 0, 0, 0, 0);
        self.count_members = true;
        for (n, node) in net.nodes.iter().enumerate() {
            for p in &node.ports {
                let peer = net.port_index(p.peer_node, p.peer_port);
                self.ports.push(Port::new(n as u32, peer, p.rate_bps, p.delay_ns));
            }
            match node.kind {
                NodeKind::Switch(spec) => {
                    self.switches.push(Some(Switch::new(spec, self.seed ^ (n as u64).wrapping_mul(0x9E37_79B9))));
                    self.hosts.push(None);
                }
                NodeKind::Host => {
                    // The congestion control's line rate is a QP's pace, as the testbed's
                    // engine gives it (DCQCN starts and recovers towards it).
                    let line = self.cfg.qp_pace_bps(node.ports[0].rate_bps);
                    self.switches.push(None);
                    self.hosts.push(Some(Host::new(net.port_index(n, 0), self.cfg.cc.build(line))));
                }
            }
        }
        self.is_host = self.hosts.iter().map(Option::is_some).collect();
        self.down = vec![false; self.ports.len()];
        self.phantom = match self.queue_model {
            QueueModel::Held => Vec::new(),
            QueueModel::Phantom => vec![PhantomPort::default(); self.ports.len()],
        };
        self.depth = vec![DepthHistogram::new(); net.tiers.len() + 1];
        self.member_packets = vec![0; net.routing.member_slots()];
        self.member_bytes = vec![0; net.routing.member_slots()];
    }

    fn start_qps(&mut self, qps: &[QpSpec]) -> Result<(), TwinError> {
        u32::try_from(qps.len()).map_err(|_| TwinError::TooManyQps(qps.len()))?;
        for (index, spec) in qps.iter().enumerate() {
            for (field, node) in [("src", spec.src), ("dst", spec.dst)] {
                if self.hosts.get(node).is_none_or(Option::is_none) {
                    return Err(TwinError::NotAHost { index, field, node });
                }
            }
            let rate = self.cfg.qp_pace_bps(self.net.nodes[spec.src].ports[0].rate_bps);
            let (s, d) = (spec.src, spec.dst);
            let Ok([sender, receiver]) = self.hosts.get_disjoint_mut([s, d]) else {
                return Err(TwinError::Loopback { index, host: s });
            };
            let (sender, receiver) = (sender.as_mut().expect("a host"), receiver.as_mut().expect("a host"));
            let qp = QpState::new(*spec, &self.cfg, rate, &mut *sender.cc, &mut *receiver.cc, 0)
                .map_err(|e| TwinError::Post { index, reason: e.to_string() })?;
            if receiver.receivers.insert(spec.resp_qpn, index as u32).is_some() {
                return Err(TwinError::DuplicateQpn { index, qpn: spec.resp_qpn, host: d });
            }
            sender.senders.push(index as u32);
            self.qps.push(qp);
            self.ways.push(Way { dst: spec.dst as u32, packet: spec.data_packet });
            self.ways.push(Way { dst: spec.src as u32, packet: spec.ack_packet });
        }
        self.incomplete = self.qps.iter().filter(|q| !q.sender.is_complete()).count();
        for h in 0..self.hosts.len() {
            if self.hosts[h].as_ref().is_some_and(|h| !h.senders.is_empty() || !h.receivers.is_empty()) {
                self.events.schedule(0, Kind::HostWake, 0, h as u32);
            }
        }
        Ok(())
    }

    // ---- links -----------------------------------------------------------------------------

    /// Port `e` puts packet `id` of `frame_len` bytes on its link now.
    fn transmit(&mut self, e: u32, id: u32, frame_len: u32) {
        let now = self.events.now();
        let port = &mut self.ports[e as usize];
        let tx = port.transmit_ns(frame_len);
        port.busy = true;
        port.busy_until = now + tx;
        port.counters.packets += 1;
        port.counters.bytes += u64::from(frame_len);
        let (peer, delay) = (port.peer, port.delay_ns);
        self.hops += 1;
        self.events.schedule(now + tx, Kind::TxDone, e, 0);
        if self.link_loses(e) {
            // Sent and lost on the wire: the link was busy for it, nobody receives it.
            self.ports[e as usize].counters.link_loss += 1;
            self.lost_to_loss += 1;
            self.packets.remove(id);
            return;
        }
        self.events.schedule(now + tx + delay, Kind::Arrive, peer, id);
    }

    /// An idle port sends what it may: a switch port from its queues, a host's from its NIC
    /// queues and then its QPs.
    fn kick(&mut self, e: u32) {
        let port = &self.ports[e as usize];
        if port.busy {
            return;
        }
        let node = port.node as usize;
        if self.is_host[node] {
            return self.host_transmit(node);
        }
        let now = self.events.now();
        match self.ports[e as usize].dequeue(now) {
            Some((class, q)) => {
                self.dequeued(node, class, q);
                self.transmit(e, q.id, q.frame_len);
            }
            None => self.wait_for_resume(e),
        }
    }

    /// Every queued class of `e` is paused: look again when the first pause ends.
    fn wait_for_resume(&mut self, e: u32) {
        let port = &mut self.ports[e as usize];
        let Some(t) = port.earliest_resume() else { return };
        if port.resume_at.is_none_or(|pending| t < pending) {
            port.resume_at = Some(t);
            self.events.schedule(t.max(self.events.now()), Kind::Resume, e, 0);
        }
    }

    /// A PFC frame reached egress port `e`.
    fn on_pause(&mut self, e: u32, arg: u32) {
        if self.down[e as usize] {
            return;
        }
        let (class, quanta) = ((arg >> 16) as usize, arg as u16);
        let mut times = [0; CLASSES];
        times[class] = quanta;
        let frame = PauseFrame { src: [0; 6], class_enable: 1 << class, quanta: times };
        let now = self.events.now();
        let old_until = self.ports[e as usize].paused_until(class);
        self.ports[e as usize].on_pause_frame(&frame, now);
        if let Some(phantom) = self.phantom.get_mut(e as usize) {
            // The XDP switch shifts its phantom queue's tail by the pause (hosts keep none).
            let tail = &mut phantom.tail_ns[class];
            let new_until = self.ports[e as usize].paused_until(class);
            *tail = tail.wrapping_add(queue::pause_shift(*tail, old_until, new_until, now));
        }
        if quanta == 0 {
            self.kick(e);
        }
    }

    /// Ingress port `p` sends a PFC frame for `class` to its peer.
    fn send_pfc(&mut self, p: u32, class: usize, quanta: u16) {
        let now = self.events.now();
        let port = &mut self.ports[p as usize];
        let at = port.busy_until.max(now) + port.transmit_ns(pfc::FRAME_LEN as u32) + port.delay_ns;
        port.counters.pauses_sent += 1;
        port.counters.resumes_sent += u64::from(quanta == 0);
        port.last_pause_ns[class] = now;
        let peer = port.peer;
        self.events.schedule(at, Kind::Pause, peer, (class as u32) << 16 | u32::from(quanta));
    }

    // ---- switches --------------------------------------------------------------------------

    fn on_arrive(&mut self, p: u32, id: u32) {
        if self.down[p as usize] {
            self.packets.remove(id);
            self.lost += 1;
            return;
        }
        let node = self.ports[p as usize].node as usize;
        if self.is_host[node] {
            return self.host_receive(node, id);
        }
        let pkt = self.packets.get(id);
        let way = &self.ways[2 * pkt.qp as usize + usize::from(!pkt.to_responder)];
        let (tos, frame_len) = (pkt.tos, pkt.frame_len);
        // The flow's header with this packet's class: the balancing modes read its queue by it.
        let (dst, parsed) = (way.dst as usize, &way.packet.with_tos(tos));
        let switch = self.switches[node].as_mut().expect("a switch");
        let routing = &self.net.routing;
        let (net, ports, phantom, now) = (&self.net, &self.ports, &self.phantom, self.events.now());
        let load = |out: usize, class: usize| {
            let e = net.port_index(node, out) as usize;
            let port = &ports[e];
            if !port.may_send(class, now) {
                return PAUSED;
            }
            // Phantom: as the XDP switch's `member_load` reads its modelled queue (not paused).
            phantom.get(e).map_or(port.queued_bytes[class], |ph| port.line.depth_bytes(ph.tail_ns[class], 0, now))
        };
        let view = EgressView { routing, me: node, now_ns: now, ports: &net.nodes[node].ports, load };
        let Some((group, member, out)) = switch.egress(&view, dst, parsed) else {
            self.unroutable += 1;
            self.packets.remove(id);
            return;
        };
        if self.count_members && !self.member_packets.is_empty() {
            let slot = routing.member_slot(node, group, member);
            self.member_packets[slot] += 1;
            self.member_bytes[slot] += u64::from(frame_len);
        }
        let e = self.net.port_index(node, out);
        if self.down[e as usize] {
            // Routed into a failed link the routes do not know about yet: a black hole.
            self.packets.remove(id);
            self.lost += 1;
            return;
        }
        if self.queue_model == QueueModel::Phantom {
            return self.forward_at_once(p, e, id);
        }
        let class = Switch::class(tos);
        let wire = wire_bytes(frame_len);
        let queued = self.ports[e as usize].queued_bytes[class];
        let (tos, marked, over_headroom) = match switch.admit(tos, queued, wire) {
            Admission::Drop => {
                self.ports[e as usize].counters.drops += 1;
                self.packets.remove(id);
                return;
            }
            Admission::Queue { tos, marked, over_headroom } => (tos, marked, over_headroom),
        };
        switch.pool_used += wire;
        let tier = switch.spec.tier;
        self.packets.get_mut(id).tos = tos;
        let egress = &mut self.ports[e as usize];
        let depth = egress.enqueue(class, Queued { id, frame_len, ingress: p });
        egress.counters.max_depth_bytes = egress.counters.max_depth_bytes.max(depth);
        egress.counters.ecn_marked += u64::from(marked);
        egress.counters.over_headroom += u64::from(over_headroom);
        self.depth[tier].record(depth);
        self.ports[p as usize].held[class] += wire;
        self.check_xoff(node, p, class);
        self.kick(e);
    }

    /// [`QueueModel::Phantom`]: packet `id`, which entered by `p`, leaves by egress `e` at once,
    /// as from the XDP switch (a host takes it when its downlink has delivered it).
    fn forward_at_once(&mut self, p: u32, e: u32, id: u32) {
        let Some((class, transmit)) = self.phantom_admit(p, e, id) else { return };
        self.check_xoff(self.ports[p as usize].node as usize, p, class);
        self.deliver_at_once(e, id, transmit);
    }

    /// The XDP switch's `congestion::offer` on the phantom queue of `e`: the packet's mark or
    /// drop by the modelled depth, the queue's new tail, and (lossless classes) its frame bytes
    /// in `p`'s account until the tail. Returns its class and wire time, or `None` if dropped.
    fn phantom_admit(&mut self, p: u32, e: u32, id: u32) -> Option<(usize, Nanos)> {
        let now = self.events.now();
        let (tos, frame_len) = (self.packets.get(id).tos, self.packets.get(id).frame_len);
        let (class, wire) = (Switch::class(tos), wire_bytes(frame_len));
        let egress = &self.ports[e as usize];
        let paused_until = egress.paused_until(class);
        let tail = self.phantom[e as usize].tail_ns[class];
        let depth = egress.line.depth_bytes(tail, paused_until, now);
        let transmit = egress.transmit_ns(frame_len);
        let switch = self.switches[egress.node as usize].as_mut().expect("a switch");
        let Admission::Queue { tos, marked, over_headroom } = switch.admit(tos, depth, wire) else {
            self.ports[e as usize].counters.drops += 1;
            self.packets.remove(id);
            return None;
        };
        let (tier, lossless) = (switch.spec.tier, switch.spec.qos.is_lossless(class));
        let tail = queue::enqueue_tail(tail, paused_until, now, transmit);
        self.phantom[e as usize].tail_ns[class] = tail;
        if lossless {
            // The XDP program counts the frame as it sees it, without the wire's overhead.
            self.phantom[p as usize].account[class].admit(now, u64::from(frame_len), tail);
        }
        self.packets.get_mut(id).tos = tos;
        let c = &mut self.ports[e as usize].counters;
        (c.packets, c.bytes) = (c.packets + 1, c.bytes + u64::from(frame_len));
        c.max_depth_bytes = c.max_depth_bytes.max(depth + wire);
        c.ecn_marked += u64::from(marked);
        c.over_headroom += u64::from(over_headroom);
        c.sent_while_paused += u64::from(paused_until > now);
        self.depth[tier].record(depth + wire);
        self.hops += 1;
        Some((class, transmit))
    }

    /// Packet `id` leaves by `e` at once; a testbed host holds what it receives until its
    /// modelled link would have delivered it (`fabric-user`'s endpoint `Downlink`): the last
    /// hop's serialisation, which the XDP switches do not model.
    fn deliver_at_once(&mut self, e: u32, id: u32, transmit: Nanos) {
        if self.link_loses(e) {
            self.ports[e as usize].counters.link_loss += 1;
            self.lost_to_loss += 1;
            self.packets.remove(id);
            return;
        }
        let now = self.events.now();
        let (peer, delay) = (self.ports[e as usize].peer, self.ports[e as usize].delay_ns);
        let arrives = if self.is_host[self.ports[peer as usize].node as usize] {
            let control = is_control(self.packets.get(id).tos);
            let lane = if control { DOWNLINK_CONTROL } else { DOWNLINK_DATA };
            let downlink = &mut self.phantom[e as usize].downlink_ns[lane];
            *downlink = queue::enqueue_tail(*downlink, 0, now, transmit);
            *downlink
        } else {
            now
        };
        self.events.schedule(arrives + delay, Kind::Arrive, peer, id);
    }

    /// Ingress `p` of switch `node` crossed Xoff in `class`: pause the upstream port.
    fn check_xoff(&mut self, node: usize, p: u32, class: usize) {
        let switch = self.switches[node].as_ref().expect("a switch");
        let ingress = &self.ports[p as usize];
        if ingress.is_pausing(class) || !switch.over_xoff(class, self.ingress_held_bytes(p, class)) {
            return;
        }
        let quanta = switch.spec.pause_quanta;
        let refresh = quanta_to_ns(quanta, ingress.line.bps) / 2;
        let port = &mut self.ports[p as usize];
        port.pausing |= 1 << class;
        // One tending per port and class: a pending one from an earlier pause serves this one.
        let tend = port.tending & (1 << class) == 0;
        port.tending |= 1 << class;
        self.send_pfc(p, class, quanta);
        if tend {
            let next = self.next_tend(p, class, self.events.now() + refresh.max(1));
            self.events.schedule(next, Kind::PfcTend, p, class as u32);
        }
    }

    /// When to tend a pause of ingress `p` next, given its refresh is due at `refresh_at`: then,
    /// or under [`QueueModel::Phantom`] when its account will have drained to Xon if sooner (the
    /// XDP testbed's agent looks every few modelled nanoseconds).
    fn next_tend(&self, p: u32, class: usize, refresh_at: Nanos) -> Nanos {
        let Some(phantom) = self.phantom.get(p as usize) else { return refresh_at };
        let switch = self.switches[self.ports[p as usize].node as usize].as_ref().expect("a switch");
        let xon = u64::from(switch.spec.qos.xon_bytes);
        refresh_at.min(phantom.account[class].drains_to(xon).max(self.events.now() + 1))
    }

    /// Packet `q` of `class` left switch `node`'s queue: its bytes are no longer held.
    fn dequeued(&mut self, node: usize, class: usize, q: Queued) {
        let (wire, ingress) = (wire_bytes(q.frame_len), q.ingress);
        let switch = self.switches[node].as_mut().expect("a switch");
        switch.pool_used -= wire;
        let port = &mut self.ports[ingress as usize];
        port.held[class] -= wire;
        if port.is_pausing(class) && switch.under_xon(port.held[class]) {
            port.pausing &= !(1 << class);
            self.send_pfc(ingress, class, 0);
        }
    }

    /// Wire bytes ingress `p` holds in its switch in `class` now: the packets it queued, or
    /// under [`QueueModel::Phantom`] its modelled account.
    fn ingress_held_bytes(&self, p: u32, class: usize) -> u64 {
        match self.queue_model {
            QueueModel::Held => self.ports[p as usize].held[class],
            QueueModel::Phantom => self.phantom[p as usize].account[class].held_at(self.events.now()),
        }
    }

    /// The agent's tending of a pause: refresh it at half its time while above Xon. A held
    /// queue resumes its upstream as it dequeues; a phantom one has no dequeue, so the tending
    /// resumes it, as the XDP testbed's agent does, looking again when the account will have
    /// drained to Xon.
    fn on_tend(&mut self, p: u32, class: usize) {
        let now = self.events.now();
        let port = &self.ports[p as usize];
        let switch = self.switches[port.node as usize].as_ref().expect("a switch");
        let quanta = switch.spec.pause_quanta;
        let phantom = self.queue_model == QueueModel::Phantom;
        if port.is_pausing(class) && phantom && switch.under_xon(self.ingress_held_bytes(p, class)) {
            self.ports[p as usize].pausing &= !(1 << class);
            self.send_pfc(p, class, 0);
        }
        let port = &mut self.ports[p as usize];
        if !port.is_pausing(class) {
            port.tending &= !(1 << class);
            return;
        }
        let refresh = (quanta_to_ns(quanta, port.line.bps) / 2).max(1);
        let due = port.last_pause_ns[class] + refresh;
        let refresh_at = if now >= due {
            port.counters.refreshes_sent += 1;
            self.send_pfc(p, class, quanta);
            now + refresh
        } else {
            due
        };
        let next = self.next_tend(p, class, refresh_at);
        self.events.schedule(next, Kind::PfcTend, p, class as u32);
    }

    // ---- hosts -----------------------------------------------------------------------------

    fn on_wake(&mut self, h: usize) {
        let host = self.hosts[h].as_mut().expect("a host");
        if host.wake_at.is_some_and(|t| t <= self.events.now()) {
            host.wake_at = None;
        }
        self.host_feedback(h);
        let port = host_port(&self.hosts, h);
        self.kick(port);
    }

    /// Host `h`'s idle port sends: feedback and responses first (by class), then data from
    /// its QPs in turn. If nothing can go, it sleeps until its first timer.
    fn host_transmit(&mut self, h: usize) {
        let now = self.events.now();
        let e = host_port(&self.hosts, h);
        if let Some((_, q)) = self.ports[e as usize].dequeue(now) {
            return self.transmit(e, q.id, q.frame_len);
        }
        let data_class = priority_class(self.cfg_data_tos());
        if self.ports[e as usize].may_send(data_class, now)
            && let Some((id, frame_len)) = self.poll_senders(h)
        {
            return self.transmit(e, id, frame_len);
        }
        self.host_sleep(h);
    }

    fn cfg_data_tos(&self) -> u8 {
        fabric_roce::traffic_class::data_tos(self.cfg.dscp, self.cfg.ecn)
    }

    /// The next data packet of host `h`'s senders, round-robin: its index and frame length.
    fn poll_senders(&mut self, h: usize) -> Option<(u32, u32)> {
        let now = self.events.now();
        let host = self.hosts[h].as_mut().expect("a host");
        let n = host.senders.len();
        for i in 0..n {
            let k = (host.next_sender + i) % n;
            let q = host.senders[k] as usize;
            let qp = &mut self.qps[q];
            let mut out = None;
            qp.sender.poll_transmit_repr(&mut *host.cc, now, 1, |r| out = Some(r));
            qp.note_rate();
            if let Some(repr) = out {
                host.next_sender = (k + 1) % n;
                let payload = Payload::Roce(repr);
                let frame_len = qp.frame_len(&payload);
                let tos = qp.data_tos;
                let pkt = Packet { payload, qp: q as u32, frame_len, tos, to_responder: true };
                return Some((self.packets.insert(pkt), frame_len));
            }
        }
        None
    }

    /// Nothing can go now: wake at the first of the pacers', timers' and pauses' times. While
    /// the data class is paused the senders wait for the pause to end (their timers are looked
    /// at then), as a paused NIC does not send retransmissions either.
    fn host_sleep(&mut self, h: usize) {
        let now = self.events.now();
        let host = self.hosts[h].as_ref().expect("a host");
        let port = &self.ports[host.port as usize];
        let data_class = priority_class(self.cfg_data_tos());
        let paused = !port.may_send(data_class, now);
        let senders = host
            .senders
            .iter()
            .filter(|_| !paused)
            .filter_map(|&q| self.qps[q as usize].sender.poll_timeout(&*host.cc, now));
        let resume = paused.then(|| port.resume_at(data_class));
        let wake = senders.chain(host.cc.receiver_timeout()).chain(resume).chain(port.earliest_resume()).min();
        let Some(t) = wake else { return };
        let t = t.max(now + 1);
        let host = self.hosts[h].as_mut().expect("a host");
        if host.wake_at.is_none_or(|pending| t < pending) {
            host.wake_at = Some(t);
            self.events.schedule(t, Kind::HostWake, 0, h as u32);
        }
    }

    /// A packet reached host `h`: to a responder (data) or to a requester (ACK, NAK, CNP,
    /// grant).
    fn host_receive(&mut self, h: usize, id: u32) {
        let now = self.events.now();
        let pkt = self.packets.remove(id);
        self.delivered += 1;
        let q = pkt.qp as usize;
        let host = self.hosts[h].as_mut().expect("a host");
        let qp = &mut self.qps[q];
        match (pkt.to_responder, pkt.payload) {
            (true, Payload::Roce(repr)) => {
                if let Some(response) = qp.receiver.on_repr(&mut *host.cc, &repr, is_ce(pkt.tos), now) {
                    self.queue_at_host(h, q, Payload::Roce(response), false);
                }
                self.host_feedback(h);
            }
            (true, Payload::Control(_)) => {}
            (false, Payload::Roce(repr)) => {
                // A failure to post what the scheme admits leaves the QP incomplete: reported.
                let _ = qp.sender.on_repr(&mut *host.cc, &repr, now);
                qp.note_rate();
                self.check_complete(q);
            }
            (false, Payload::Control(bytes)) => {
                let _ = qp.sender.on_packet(&mut *host.cc, &bytes, now);
            }
        }
        let port = host_port(&self.hosts, h);
        self.kick(port);
    }

    fn check_complete(&mut self, q: usize) {
        let qp = &mut self.qps[q];
        if qp.completed_ns.is_none() && qp.sender.is_complete() {
            qp.completed_ns = Some(self.events.now());
            self.incomplete -= 1;
        }
    }

    /// What host `h`'s receivers' congestion control sends back now (CNPs, grants).
    fn host_feedback(&mut self, h: usize) {
        let now = self.events.now();
        let host = self.hosts[h].as_mut().expect("a host");
        host.cc.poll_feedback(now, true, &mut self.buf, &mut self.feedback);
        let mut feedback = std::mem::take(&mut self.feedback);
        for f in feedback.drain(..) {
            let host = self.hosts[h].as_mut().expect("a host");
            let Some(&q) = host.receivers.get(&f.qp()) else { continue };
            let payload = match f {
                Feedback::Cnp { .. } => {
                    Payload::Roce(self.qps[q as usize].receiver.responder.congestion_notification_repr())
                }
                Feedback::Packet { packet, .. } => Payload::Control(packet),
            };
            self.queue_at_host(h, q as usize, payload, true);
        }
        self.feedback = feedback;
    }

    /// Queues a response or feedback packet of QP `q` at host `h`'s NIC, in its class.
    fn queue_at_host(&mut self, h: usize, q: usize, payload: Payload, feedback: bool) {
        let qp = &self.qps[q];
        let (frame_len, tos) = (qp.frame_len(&payload), qp.tos_of(feedback));
        let pkt = Packet { payload, qp: q as u32, frame_len, tos, to_responder: false };
        let id = self.packets.insert(pkt);
        let e = host_port(&self.hosts, h);
        self.ports[e as usize].enqueue(priority_class(tos), Queued { id, frame_len, ingress: e });
    }

    // ---- report ----------------------------------------------------------------------------

    fn report(&mut self) -> StepReport {
        let now = self.events.now();
        for q in 0..self.qps.len() {
            self.check_complete(q);
        }
        let qps: Vec<QpOutcome> = self.qps.iter().map(outcome).collect();
        let finished = self.incomplete == 0;
        let completion_ns = if finished { qps.iter().filter_map(|q| q.completed_ns).max().unwrap_or(0) } else { now };
        let mut tiers: Vec<TierReport> = self
            .net
            .tiers
            .iter()
            .chain(std::iter::once(&"host".to_string()))
            .map(|t| TierReport { tier: t.clone(), ..Default::default() })
            .collect();
        let host_tier = tiers.len() - 1;
        for port in &self.ports {
            let tier = match self.net.nodes[port.node as usize].kind {
                NodeKind::Switch(s) => s.tier,
                NodeKind::Host => host_tier,
            };
            let (t, c) = (&mut tiers[tier], &port.counters);
            t.packets += c.packets;
            t.bytes += c.bytes;
            t.ecn_marked += c.ecn_marked;
            t.drops += c.drops;
            t.over_headroom += c.over_headroom;
            t.sent_while_paused += c.sent_while_paused;
            t.pauses_sent += c.pauses_sent;
            t.pauses_received += c.pauses_received;
        }
        for (t, d) in tiers.iter_mut().zip(std::mem::take(&mut self.depth)) {
            (t.max_depth_bytes, t.depth_p50_bytes, t.depth_p99_bytes) = (d.max(), d.quantile(0.5), d.quantile(0.99));
            t.depth = d;
        }
        let ports: Vec<PortCounters> = self.ports.iter().map(|p| p.counters_at(now)).collect();
        let tier_of_port = |p: usize| match self.net.nodes[self.ports[p].node as usize].kind {
            NodeKind::Switch(s) => s.tier,
            NodeKind::Host => host_tier,
        };
        let tier_names: Vec<String> = tiers.iter().map(|t| t.tier.clone()).collect();
        let paused = paused_time(&tier_names, &ports, tier_of_port, |p| self.ports[p].peer as usize, now);
        StepReport {
            finished,
            completion_ns,
            qps,
            ports,
            paused,
            member_packets: std::mem::take(&mut self.member_packets),
            member_bytes: std::mem::take(&mut self.member_bytes),
            tiers,
            events: self.events.processed(),
            events_by_kind: Kind::ALL.iter().map(|k| k.as_str()).zip(self.events.processed_by_kind()).collect(),
            packet_hops: self.hops,
            packets_delivered: self.delivered,
            unroutable: self.unroutable,
            lost_to_failures: self.lost,
            lost_to_loss: self.lost_to_loss,
            peak_packets: self.packets.peak(),
        }
    }
}

fn host_port(hosts: &[Option<Host>], h: usize) -> u32 {
    hosts[h].as_ref().expect("a host").port
}

fn outcome(qp: &QpState) -> QpOutcome {
    let c = qp.sender.requester.counters();
    let r = qp.receiver.responder.counters();
    QpOutcome {
        src: qp.spec.src,
        dst: qp.spec.dst,
        bytes: qp.spec.bytes,
        completed_ns: qp.completed_ns,
        packets_sent: c.packets_sent,
        retransmitted: c.packets_retransmitted,
        timeouts: c.timeouts,
        naks: c.naks_received,
        ce_packets: qp.receiver.ce_packets(),
        cnps_received: c.cnps_received,
        min_rate_bps: qp.min_rate_bps,
        failed: qp.sender.requester.failure().is_some(),
        reordered_packets: r.reordered_packets,
        reorder_depth_max: r.reorder_depth_max,
        duplicate_psns: r.duplicate_psns,
    }
}
