//! Runs one step of transfers between hosts: per host a thread in its namespace, sockets, and the
//! requesters and responders of every QP that starts or ends there.
//!
//! Each host thread is the host's NIC: it sends data and ACKs in the data class (DSCP `dscp`,
//! ECT(0)) and CNPs and CTS messages in class 6, reads the TOS of what arrives (CE marks), obeys
//! the PFC frames that reach its veth (an `AF_PACKET` socket), and runs the congestion control of
//! `cc`. Every packet leaves through a queue per (UDP source port, TOS): a paused class holds its
//! queues, in order, until it may send again.
use std::{
    collections::HashMap,
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    os::fd::{AsRawFd, OwnedFd},
    sync::atomic::{AtomicUsize, Ordering},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};
use fabric_common::pfc::{CLASSES, PauseFrame, quanta_to_ns};
use serde::Serialize;

use super::{CcMode, EndpointOptions, SportPolicy, fixed_udp_sport, rxe_udp_sport, socket};
use crate::model::workload::HostTransfer;
use crate::{
    model::plan::{NodeId, Plan},
    sys::netns,
};
use fabric_roce::{
    cc::{RateTrajectory, ReceiverQp, SenderQp},
    cts::{self, CtsConfig, CtsReceiver, CtsSender},
    icrc::IpPair,
    pacer::PacerConfig,
    pause::PauseState,
    psn::Psn,
    qp::{Connection, DEFAULT_PKEY, Requester, RequesterConfig, Responder, ResponderConfig},
    segment::PathMtu,
    traffic_class::{CONTROL_TOS, data_tos, is_ce, priority_class},
    wire::opcode,
};

/// How often the DCQCN rate of every QP is sampled (wall time), and the most samples kept.
const RATE_SAMPLE_NS: u64 = 1_000_000;
const RATE_SAMPLES_MAX: usize = 256;
/// The retransmission timeout, once scaled, waits at most this long (wall): the testbed's hosts
/// can drop datagrams when the CPU falls behind, which a lossless fabric does not, and a NIC's
/// 64 ms timeout slowed 4000 times would outlast the step.
const RETRANSMIT_TIMEOUT_WALL_MAX_NS: u64 = 1_000_000_000;

/// What happened to one transfer.
#[derive(Clone, Debug, Serialize)]
pub struct FlowResult {
    pub src: String,
    pub dst: String,
    pub bytes: u64,
    pub qps: u32,
    /// UDP source port of each QP (what ECMP hashes besides addresses).
    pub udp_sports: Vec<u16>,
    /// Completion time from the start of the step, ns.
    pub completion_ns: u64,
    pub goodput_bps: f64,
    /// Rate the transfer was paced at.
    pub intended_bps: u64,
    pub packets_sent: u64,
    pub retransmitted: u64,
    pub timeouts: u64,
    pub naks: u64,
    pub icrc_errors: u64,
    /// Packets for a sender QP that its parser refused (counted, never dropped silently).
    pub wire_errors: u64,
    /// Bytes the responders accepted (in order, once): equals `bytes` when nothing was lost.
    pub bytes_received: u64,
    /// Packets that reached the responders marked CE.
    pub ce_packets: u64,
    /// CNPs the responders sent, and the requesters received.
    pub cnps_sent: u64,
    pub cnps_received: u64,
    /// DCQCN: the flow's rate (its QPs summed), `(ns from the step's start, bit/s)`, sampled
    /// every millisecond or coarser; empty without DCQCN.
    pub rate_trajectory: Vec<(u64, u64)>,
}

impl FlowResult {
    /// How many distinct UDP source ports the flow's QPs used.
    pub fn sport_count(&self) -> usize {
        let mut p = self.udp_sports.clone();
        p.sort();
        p.dedup();
        p.len()
    }
}

/// What one host's NIC saw in a step.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HostResult {
    pub host: String,
    /// PFC frames that reached the host.
    pub pause_frames_received: u64,
    /// Time the data class was paused by them, ns (wall).
    pub paused_ns: u64,
    /// PFC frames the host sent (a slow receiver).
    pub pause_frames_sent: u64,
    /// CTS: the most bytes granted to senders and not yet received at once (bounded by
    /// `cts_channels x cts_buffer_bytes`).
    pub cts_max_in_flight_bytes: u64,
    /// Datagrams the host's kernel dropped during the step because a receive socket's buffer was
    /// full (`Udp: RcvbufErrors`): the software endpoint fell behind, which a NIC does not. Loss
    /// the fabric did not cause; it explains retransmissions in a lossless class.
    pub udp_receive_drops: u64,
}

/// `Udp: RcvbufErrors` of the calling thread's network namespace.
fn udp_rcvbuf_errors() -> Result<u64> {
    // thread-self: this thread entered the host's namespace; /proc/self would show the process's.
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp").context("reading /proc/thread-self/net/snmp")?;
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (udp.next().context("no Udp: header")?, udp.next().context("no Udp: values")?);
    let at = names.split_whitespace().position(|n| n == "RcvbufErrors").context("no RcvbufErrors")?;
    values.split_whitespace().nth(at).and_then(|v| v.parse().ok()).context("bad RcvbufErrors value")
}

/// What happened in one step.
#[derive(Clone, Debug, Serialize)]
pub struct StepResult {
    pub duration_ns: u64,
    pub flows: Vec<FlowResult>,
    /// Every host of the step.
    pub hosts: Vec<HostResult>,
}

/// The clock of a run, for what spans its steps (a slow receiver's period).
#[derive(Clone, Copy, Debug)]
pub struct RunClock {
    pub start: Instant,
}

/// One QP as planned before the host threads start (public so that `crate::sim` builds its
/// flows with exactly these numbers and ports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpPlan {
    /// Index of the transfer in the step.
    pub flow: usize,
    pub req_qpn: u32,
    pub resp_qpn: u32,
    /// UDP source port of both directions (data and ACKs).
    pub sport: u16,
    pub bytes: u64,
}

fn ipv4(plan: &Plan, host: NodeId) -> Ipv4Addr {
    plan.host_ipv4(host)
}

/// The QPs of every transfer, with their numbers and ports. Shared with the simulator.
pub fn plan_qps(plan: &Plan, transfers: &[HostTransfer], opts: &EndpointOptions) -> Vec<QpPlan> {
    let mut next_qpn: HashMap<NodeId, u32> = HashMap::new();
    let mut alloc = |host: NodeId| {
        let q = next_qpn.entry(host).or_insert(0x11);
        let v = *q;
        *q += 1;
        v
    };
    let mut qps = Vec::new();
    for (f, t) in transfers.iter().enumerate() {
        let q = opts.qps.max(1) as u64;
        for k in 0..q {
            let (req_qpn, resp_qpn) = (alloc(t.src), alloc(t.dst));
            let sport = match opts.sport {
                SportPolicy::PerQp => rxe_udp_sport(req_qpn, resp_qpn),
                SportPolicy::Fixed => fixed_udp_sport(ipv4(plan, t.src), ipv4(plan, t.dst)),
            };
            // Stripe: equal shares, the remainder on the first QPs.
            let bytes = t.bytes / q + u64::from(k < t.bytes % q);
            qps.push(QpPlan { flow: f, req_qpn, resp_qpn, sport, bytes });
        }
    }
    qps
}

/// Per-QP outcome: the requester's host thread fills the sending side, the responder's host
/// thread the receiving side.
#[derive(Clone, Debug, Default)]
struct QpOutcome {
    bytes_received: u64,
    completed_ns: u64,
    packets_sent: u64,
    retransmitted: u64,
    timeouts: u64,
    naks: u64,
    icrc_errors: u64,
    wire_errors: u64,
    ce_packets: u64,
    cnps_sent: u64,
    cnps_received: u64,
    trajectory: Option<RateTrajectory>,
}

/// The host link's modelled rate in slowed time, bit/s.
pub fn host_link_rate_bps(plan: &Plan, time_scale: u64) -> u64 {
    ((plan.topology.tiers.host.rate_gbps * 1e9) as u64 / time_scale.max(1)).max(1)
}

/// Runs a step and waits for every transfer to be acknowledged in full.
pub fn run_step(plan: &Plan, transfers: &[HostTransfer], opts: &EndpointOptions) -> Result<StepResult> {
    run_step_in(plan, transfers, opts, &RunClock { start: Instant::now() })
}

/// [`run_step`] as a step of the run started at `run.start`.
pub fn run_step_in(
    plan: &Plan,
    transfers: &[HostTransfer],
    opts: &EndpointOptions,
    run: &RunClock,
) -> Result<StepResult> {
    let mtu =
        PathMtu::from_bytes(opts.path_mtu).with_context(|| format!("path MTU {} is not an IB MTU", opts.path_mtu))?;
    anyhow::ensure!(opts.time_scale >= 1, "time_scale must be at least 1");
    anyhow::ensure!(opts.dscp < 64, "DSCP {} is not 6 bits", opts.dscp);
    if opts.cc == CcMode::Dcqcn {
        opts.dcqcn.validate()?;
    }
    if opts.cc == CcMode::Cts {
        anyhow::ensure!(
            opts.cts_channels > 0 && opts.cts_buffer_bytes > 0,
            "CTS needs channels and a buffer size above 0"
        );
    }
    let slow = match &opts.slow_receiver {
        Some(s) => Some((
            plan.node_by_name(&s.host).with_context(|| format!("slow receiver: no host {:?}", s.host))?,
            s.duration_ns,
        )),
        None => None,
    };
    let qps = plan_qps(plan, transfers, opts);
    let mut hosts: Vec<NodeId> = transfers.iter().flat_map(|t| [t.src, t.dst]).collect();
    hosts.sort();
    hosts.dedup();
    let remaining = AtomicUsize::new(qps.iter().filter(|q| q.bytes > 0).count());
    let failed = AtomicUsize::new(0);
    let start = Instant::now();
    let outcomes: std::sync::Mutex<HashMap<usize, QpOutcome>> = Default::default();
    let host_results: std::sync::Mutex<Vec<HostResult>> = Default::default();
    let rate_bps = if opts.rate_bps == 0 { host_link_rate_bps(plan, opts.time_scale) } else { opts.rate_bps };
    let per_qp_rate = (rate_bps / u64::from(opts.qps.max(1))).max(1);
    // The slow receiver's end, in this step's clock (0 if it is over or never was).
    let slow = slow.map(|(host, d)| {
        let end = run.start + std::time::Duration::from_nanos(d);
        (host, end.saturating_duration_since(start).as_nanos() as u64)
    });
    // Nobody sends before every host has its sockets: a datagram to a port not yet open is lost
    // and costs a go-back-N round.
    let ready = std::sync::Barrier::new(hosts.len());

    std::thread::scope(|s| -> Result<()> {
        let mut handles = Vec::new();
        for &host in &hosts {
            let ctx = HostContext {
                plan,
                host,
                transfers,
                qps: &qps,
                opts,
                mtu,
                per_qp_rate,
                start,
                slow_until_ns: slow.and_then(|(h, end)| (h == host).then_some(end)),
                remaining: &remaining,
                failed: &failed,
                outcomes: &outcomes,
                host_results: &host_results,
                ready: &ready,
            };
            let failed = &failed;
            handles.push(s.spawn(move || -> Result<()> {
                let r = netns::in_named(&plan.netns(host), || host_loop(&ctx));
                if r.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                r.with_context(|| format!("endpoint on {}", plan.nodes[host].name))
            }));
        }
        for h in handles {
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        }
        Ok(())
    })?;
    let duration_ns = start.elapsed().as_nanos() as u64;
    let outcomes = outcomes.into_inner().expect("not poisoned");
    let flows = transfers
        .iter()
        .enumerate()
        .map(|(f, t)| {
            let mine: Vec<(usize, &QpPlan)> = qps.iter().enumerate().filter(|(_, q)| q.flow == f).collect();
            let none = QpOutcome::default();
            let get = |i: usize| outcomes.get(&i).unwrap_or(&none);
            let completion_ns = mine.iter().map(|(i, _)| get(*i).completed_ns).max().unwrap_or(0);
            let sum = |g: fn(&QpOutcome) -> u64| mine.iter().map(|(i, _)| g(get(*i))).sum::<u64>();
            let trajectories: Vec<&RateTrajectory> =
                mine.iter().filter_map(|(i, _)| get(*i).trajectory.as_ref()).collect();
            FlowResult {
                src: plan.nodes[t.src].name.clone(),
                dst: plan.nodes[t.dst].name.clone(),
                bytes: t.bytes,
                qps: mine.len() as u32,
                udp_sports: mine.iter().map(|(_, q)| q.sport).collect(),
                completion_ns,
                goodput_bps: if completion_ns > 0 { t.bytes as f64 * 8e9 / completion_ns as f64 } else { 0.0 },
                intended_bps: rate_bps,
                packets_sent: sum(|o| o.packets_sent),
                retransmitted: sum(|o| o.retransmitted),
                timeouts: sum(|o| o.timeouts),
                naks: sum(|o| o.naks),
                icrc_errors: sum(|o| o.icrc_errors),
                wire_errors: sum(|o| o.wire_errors),
                bytes_received: sum(|o| o.bytes_received),
                ce_packets: sum(|o| o.ce_packets),
                cnps_sent: sum(|o| o.cnps_sent),
                cnps_received: sum(|o| o.cnps_received),
                rate_trajectory: if trajectories.is_empty() { Vec::new() } else { RateTrajectory::sum(&trajectories) },
            }
        })
        .collect();
    let mut hosts = host_results.into_inner().expect("not poisoned");
    hosts.sort_by(|a, b| a.host.cmp(&b.host));
    Ok(StepResult { duration_ns, flows, hosts })
}

/// Sockets of one host: the receive socket on 4791, one send socket per source port, and the
/// PFC socket on its veth.
struct HostSockets {
    rx: UdpSocket,
    tx: HashMap<u16, UdpSocket>,
    pfc: OwnedFd,
}

impl HostSockets {
    fn new(addr: Ipv4Addr, tos: u8, ifname: &str, sports: impl IntoIterator<Item = u16>) -> Result<Self> {
        let rx = socket::roce_socket_with_tos(SocketAddrV4::new(addr, fabric_common::wire::udp::ROCEV2_PORT), tos)?;
        let mut tx = HashMap::new();
        for p in sports {
            if let std::collections::hash_map::Entry::Vacant(e) = tx.entry(p) {
                e.insert(socket::roce_socket_with_tos(SocketAddrV4::new(addr, p), tos)?);
            }
        }
        let pfc = socket::pfc_socket(ifname)?;
        Ok(HostSockets { rx, tx, pfc })
    }
}

/// Everything a host thread needs.
struct HostContext<'a> {
    plan: &'a Plan,
    host: NodeId,
    transfers: &'a [HostTransfer],
    qps: &'a [QpPlan],
    opts: &'a EndpointOptions,
    mtu: PathMtu,
    per_qp_rate: u64,
    start: Instant,
    /// This host is a slow receiver until then (step clock).
    slow_until_ns: Option<u64>,
    remaining: &'a AtomicUsize,
    failed: &'a AtomicUsize,
    outcomes: &'a std::sync::Mutex<HashMap<usize, QpOutcome>>,
    host_results: &'a std::sync::Mutex<Vec<HostResult>>,
    ready: &'a std::sync::Barrier,
}

/// A QP that starts here.
struct SenderEntry {
    idx: usize,
    qp: SenderQp,
    dst: SocketAddrV4,
    bytes: u64,
    outcome: QpOutcome,
    done: bool,
    /// Under CTS: what the receiver granted; WRITEs are posted on grants only.
    cts: Option<CtsSender>,
    next_msg_id: u64,
    trajectory: Option<RateTrajectory>,
}

impl SenderEntry {
    fn sport(&self) -> u16 {
        self.qp.requester.config().connection.udp_src_port
    }

    fn all_posted(&self) -> bool {
        self.cts.is_none_or(|c| c.posted_bytes() >= self.bytes)
    }

    fn post(&mut self, mut bytes: u64) -> Result<()> {
        // Messages are at most 2 GiB in RoCE; split larger shares.
        while bytes > 0 {
            let len = bytes.min(1 << 30) as u32;
            self.qp
                .requester
                .post_write(self.next_msg_id, len)
                .map_err(|e| anyhow::anyhow!("posting a write: {e:?}"))?;
            bytes -= u64::from(len);
            self.next_msg_id += 1;
        }
        Ok(())
    }
}

/// A QP that ends here.
struct ReceiverEntry {
    idx: usize,
    qp: ReceiverQp,
    dst: SocketAddrV4,
    sport: u16,
    /// PSN of the next CTS sent on this QP.
    cts_seq: u32,
}

/// Packets waiting to leave, per (UDP source port, TOS), in order.
type OutQueues = HashMap<(u16, u8), Vec<(Vec<u8>, SocketAddrV4)>>;

/// `slow` as a loop condition: it holds for the whole round (clippy cannot see that the loops
/// end by `break`).
#[inline]
fn slow_now(slow: bool) -> bool {
    slow
}

fn host_loop(cx: &HostContext<'_>) -> Result<()> {
    let (plan, host, opts) = (cx.plan, cx.host, cx.opts);
    let me = ipv4(plan, host);
    let start = cx.start;
    let now = || start.elapsed().as_nanos() as u64;
    let scale = opts.time_scale.max(1);
    let tos = data_tos(opts.dscp, opts.ecn);
    let data_class = priority_class(tos);
    let link_rate = host_link_rate_bps(plan, scale);
    let retransmit_timeout_ns = opts.retransmit_timeout_ns.saturating_mul(scale).min(RETRANSMIT_TIMEOUT_WALL_MAX_NS);
    let dcqcn = (opts.cc == CcMode::Dcqcn).then(|| opts.dcqcn.scaled(scale));
    let use_cts = opts.cc == CcMode::Cts;
    let t0 = now();
    let mut senders: HashMap<u32, SenderEntry> = HashMap::new();
    let mut receivers: HashMap<u32, ReceiverEntry> = HashMap::new();
    let mut cts_rx = use_cts.then(|| {
        CtsReceiver::new(CtsConfig {
            channels: opts.cts_channels,
            buffer_bytes: opts.cts_buffer_bytes,
            resend_after_ns: retransmit_timeout_ns,
        })
    });
    let mut sports = Vec::new();
    for (i, q) in cx.qps.iter().enumerate() {
        let t = &cx.transfers[q.flow];
        // Both ends of a QP share its UDP source port (as rxe does) and its first PSN.
        let end = |local_qp, remote_qp, peer| Connection {
            local_qp,
            remote_qp,
            pkey: DEFAULT_PKEY,
            ip: IpPair::V4 { src: me, dst: peer },
            udp_src_port: q.sport,
        };
        let first_psn = Psn::new(q.req_qpn.wrapping_mul(0x9E37) & 0xFF_FFFF);
        if t.src == host && q.bytes > 0 {
            let peer = ipv4(plan, t.dst);
            let mut cfg = RequesterConfig::new(end(q.req_qpn, q.resp_qpn, peer));
            cfg.mtu = cx.mtu;
            cfg.window_packets = opts.window;
            cfg.retransmit_timeout_ns = retransmit_timeout_ns;
            cfg.first_psn = first_psn;
            // A burst of two packets: enough to absorb scheduling jitter, small enough that the
            // rate holds over short messages.
            let burst_bytes = 2 * u64::from(opts.path_mtu + 100);
            cfg.pacer = Some(PacerConfig { rate_bps: cx.per_qp_rate, burst_bytes });
            let mut entry = SenderEntry {
                idx: i,
                qp: SenderQp::new(Requester::new(cfg), dcqcn, cx.per_qp_rate, t0),
                dst: SocketAddrV4::new(peer, fabric_common::wire::udp::ROCEV2_PORT),
                bytes: q.bytes,
                outcome: QpOutcome::default(),
                done: false,
                cts: use_cts.then(CtsSender::default),
                next_msg_id: 0,
                trajectory: dcqcn.map(|_| RateTrajectory::new(RATE_SAMPLE_NS, RATE_SAMPLES_MAX)),
            };
            if !use_cts {
                entry.post(q.bytes)?;
            }
            senders.insert(q.req_qpn, entry);
            sports.push(q.sport);
        }
        if t.dst == host && q.bytes > 0 {
            let peer = ipv4(plan, t.src);
            let mut cfg = ResponderConfig::new(end(q.resp_qpn, q.req_qpn, peer));
            cfg.first_psn = first_psn;
            cfg.ack_every = opts.ack_every;
            let dst = SocketAddrV4::new(peer, fabric_common::wire::udp::ROCEV2_PORT);
            let qp = ReceiverQp::new(Responder::new(cfg), dcqcn.as_ref());
            receivers.insert(q.resp_qpn, ReceiverEntry { idx: i, qp, dst, sport: q.sport, cts_seq: 0 });
            if let Some(c) = &mut cts_rx {
                c.add_flow(q.resp_qpn, q.bytes);
            }
            sports.push(q.sport);
        }
    }
    let ifname = &plan.nodes[host].ports[0].ifname;
    let mac = plan.nodes[host].ports[0].mac;
    let socks = HostSockets::new(me, tos, ifname, sports);
    let rcvbuf_errors_before = udp_rcvbuf_errors()?;
    cx.ready.wait();
    let socks = socks?;
    let mut bufs = Box::new([[0u8; 4096]; socket::BATCH]);
    let mut got = Vec::with_capacity(socket::BATCH);
    // What arrived, held until the modelled link towards this host has delivered it.
    let mut downlink = super::downlink::Downlink::new(link_rate);
    let mut frame_buf = [0u8; 256];
    let mut out: OutQueues = HashMap::new();
    let mut pause = PauseState::new(link_rate);
    let mut pause_frames_sent = 0u64;
    // A slow receiver refreshes its XOFF every half pause time, as a NIC with a full buffer does.
    let xoff_refresh_ns = (quanta_to_ns(0xFFFF, link_rate) / 2).max(1);
    let mut next_xoff_ns = 0u64;
    let mut sent_xoff = false;
    let send_pause = |quanta: u16, count: &mut u64| -> Result<()> {
        let mut q = [0u16; CLASSES];
        q[data_class] = quanta;
        socket::send_frame(&socks.pfc, &PauseFrame { src: mac, class_enable: 1 << data_class, quanta: q }.emit())?;
        *count += 1;
        Ok(())
    };

    let result = (|| -> Result<()> {
        while cx.remaining.load(Ordering::Relaxed) > 0 && cx.failed.load(Ordering::Relaxed) == 0 {
            let t = now();
            if t > opts.step_timeout_ns {
                bail!("step did not finish within {} s", opts.step_timeout_ns / 1_000_000_000);
            }
            // PFC from the rack switch.
            while let Some(frame) = socket::recv_frame(&socks.pfc, &mut frame_buf)? {
                if let Ok(f) = PauseFrame::parse(frame) {
                    pause.on_frame(&f, t);
                }
            }
            // A slow receiver keeps its switch paused and reads nothing.
            let slow = cx.slow_until_ns.is_some_and(|end| t < end);
            if slow && t >= next_xoff_ns {
                send_pause(0xFFFF, &mut pause_frames_sent)?;
                sent_xoff = true;
                next_xoff_ns = t + xoff_refresh_ns;
            } else if !slow && sent_xoff {
                send_pause(0, &mut pause_frames_sent)?;
                sent_xoff = false;
            }
            // Owed CNPs, and CTS grants.
            for r in receivers.values_mut() {
                if let Some(cnp) = r.qp.poll(t) {
                    out.entry((r.sport, CONTROL_TOS)).or_default().push((cnp, r.dst));
                }
            }
            if let Some(c) = &mut cts_rx
                && !slow
            {
                let mut grants = Vec::new();
                while let Some(g) = c.poll_grant(t) {
                    grants.push(g);
                }
                grants.extend(c.poll_resend(t));
                for g in grants {
                    let r = receivers.get_mut(&g.flow).expect("CTS flows are this host's responders");
                    let pkt = cts::emit(&r.qp.responder.config().connection, r.cts_seq, g.granted_total);
                    r.cts_seq = r.cts_seq.wrapping_add(1);
                    out.entry((r.sport, CONTROL_TOS)).or_default().push((pkt, r.dst));
                }
            }
            // Transmit what the pacers, windows and PFC allow.
            if pause.may_send(data_class, t) {
                for e in senders.values_mut() {
                    let key = (e.sport(), tos);
                    let backlog = out.get(&key).map_or(0, Vec::len);
                    if e.done || backlog > 4 * socket::BATCH {
                        continue;
                    }
                    let pkts = e.qp.poll_transmit_many(t, 32);
                    if !pkts.is_empty() {
                        out.entry(key).or_default().extend(pkts.into_iter().map(|p| (p, e.dst)));
                    }
                }
            }
            for (&(sport, pkt_tos), pkts) in out.iter_mut() {
                if pkts.is_empty() || !pause.may_send(priority_class(pkt_tos), t) {
                    continue;
                }
                // A full socket buffer sends a prefix; the rest waits for the next round, in order.
                let n = socket::send_batch_with_tos(&socks.tx[&sport], pkts, (pkt_tos != tos).then_some(pkt_tos))?;
                pkts.drain(..n);
            }
            for e in senders.values_mut() {
                if let (Some(tr), Some(rate)) = (&mut e.trajectory, e.qp.rate_bps()) {
                    tr.sample(t, rate);
                }
            }
            // Receive into the modelled downlink; dispatch, by destination QP, what it delivered.
            let mut received = 0;
            // A slow receiver reads nothing.
            while !slow_now(slow) {
                let n = socket::recv_batch(&socks.rx, &mut bufs, &mut got)?;
                if n == 0 {
                    break;
                }
                received += n;
                let t = now();
                for (i, rcv) in got.iter().enumerate() {
                    if rcv.len >= 12 {
                        downlink.arrive(t, rcv.len, (bufs[i][..rcv.len].to_vec(), rcv.from, rcv.tos));
                    }
                }
            }
            // A slow receiver reads nothing.
            while !slow_now(slow) {
                let t = now();
                let Some((payload, from, rcv_tos)) = downlink.deliver(t) else { break };
                {
                    let payload = &payload[..];
                    let rcv = socket::Received { len: payload.len(), from, tos: rcv_tos };
                    let qpn = u32::from_be_bytes([0, payload[5], payload[6], payload[7]]);
                    if let Some(r) = receivers.get_mut(&qpn) {
                        if !r.qp.responder.config().connection.verify_incoming(rcv.from.port(), payload) {
                            continue;
                        }
                        let reply = r.qp.on_packet(payload, rcv.tos.is_some_and(is_ce), t);
                        if !reply.responses.is_empty() {
                            out.entry((r.sport, tos))
                                .or_default()
                                .extend(reply.responses.into_iter().map(|p| (p, r.dst)));
                        }
                        if let Some(cnp) = reply.cnp {
                            out.entry((r.sport, CONTROL_TOS)).or_default().push((cnp, r.dst));
                        }
                        // Each completed WRITE is a chunk under CTS: its buffer is free again.
                        while r.qp.responder.poll_completion().is_some() {
                            if let Some(c) = &mut cts_rx {
                                c.on_chunk_received(qpn, t);
                            }
                        }
                    } else if let Some(e) = senders.get_mut(&qpn) {
                        if !e.qp.requester.config().connection.verify_incoming(rcv.from.port(), payload) {
                            e.outcome.icrc_errors += 1;
                            continue;
                        }
                        if payload[0] == opcode::RC_SEND_ONLY {
                            if let (Some(c), Some((_, total))) = (&mut e.cts, cts::parse(payload)) {
                                let lens = c.on_grant(total, opts.cts_buffer_bytes);
                                for len in lens {
                                    e.post(u64::from(len))?;
                                }
                            }
                            continue;
                        }
                        if e.qp.on_packet(payload, t).is_err() {
                            e.outcome.wire_errors += 1;
                        }
                        if let Some(f) = e.qp.requester.failure() {
                            bail!("QP {qpn:#x} failed: {f:?}");
                        }
                        if !e.done && e.all_posted() && e.qp.requester.outstanding_messages() == 0 {
                            e.done = true;
                            let c = e.qp.requester.counters();
                            e.outcome = QpOutcome {
                                completed_ns: t,
                                packets_sent: c.packets_sent,
                                retransmitted: c.packets_retransmitted,
                                timeouts: c.timeouts,
                                naks: c.naks_received,
                                icrc_errors: e.outcome.icrc_errors,
                                wire_errors: e.outcome.wire_errors,
                                ..Default::default()
                            };
                            cx.remaining.fetch_sub(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            if received == 0 {
                // Idle: sleep until a packet or PFC frame arrives or the next deadline (pacing,
                // timers, a pause's end, a CNP owed, a CTS resend, the slow period's XOFF).
                let t = now();
                let data_resume = pause.resume_at(data_class);
                let mut wake = senders
                    .values()
                    .filter(|e| !e.done)
                    .filter_map(|e| if data_resume > t { Some(data_resume) } else { e.qp.poll_timeout(t) })
                    .chain(receivers.values().filter_map(|r| r.qp.poll_timeout()))
                    .chain(cts_rx.as_ref().and_then(CtsReceiver::poll_timeout))
                    .chain(
                        out.iter()
                            .filter(|(_, p)| !p.is_empty())
                            .map(|((_, q), _)| pause.resume_at(priority_class(*q)).max(t)),
                    )
                    .chain(cx.slow_until_ns.filter(|_| slow).map(|end| end.min(next_xoff_ns)))
                    .chain(downlink.next_due())
                    .min()
                    .map_or(1_000_000, |w| w.saturating_sub(t).min(1_000_000));
                if sent_xoff && !slow {
                    wake = 0;
                }
                let mut pfds = [
                    libc::pollfd { fd: socks.pfc.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                    libc::pollfd { fd: socks.rx.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                ];
                // A slow receiver does not wake for data.
                let nfds = if slow { 1 } else { 2 };
                let ts = libc::timespec { tv_sec: 0, tv_nsec: wake.max(1_000) as i64 };
                // SAFETY: valid pollfds, a valid timespec, no signal mask.
                unsafe { libc::ppoll(pfds.as_mut_ptr(), nfds, &ts, std::ptr::null()) };
            }
        }
        Ok(())
    })();
    if sent_xoff {
        // Leave the switch unpaused: the next step's thread pauses it again if still slow.
        let _ = send_pause(0, &mut pause_frames_sent);
    }
    result?;
    if cx.failed.load(Ordering::Relaxed) > 0 {
        bail!("another endpoint failed");
    }
    let end = now();
    {
        let mut all = cx.outcomes.lock().expect("not poisoned");
        for e in senders.values_mut() {
            let o = all.entry(e.idx).or_default();
            let mine = std::mem::take(&mut e.outcome);
            *o = QpOutcome {
                bytes_received: o.bytes_received,
                ce_packets: o.ce_packets,
                cnps_sent: o.cnps_sent,
                cnps_received: e.qp.cnps_received(),
                trajectory: e.trajectory.take(),
                ..mine
            };
        }
        for r in receivers.values() {
            let o = all.entry(r.idx).or_default();
            o.bytes_received = r.qp.responder.counters().bytes_received;
            o.ce_packets = r.qp.ce_packets();
            o.cnps_sent = r.qp.cnps_sent();
        }
    }
    cx.host_results.lock().expect("not poisoned").push(HostResult {
        host: plan.nodes[host].name.clone(),
        pause_frames_received: pause.frames(),
        paused_ns: pause.paused_ns(data_class, end),
        pause_frames_sent,
        cts_max_in_flight_bytes: cts_rx.as_ref().map_or(0, CtsReceiver::max_in_flight_bytes),
        udp_receive_drops: udp_rcvbuf_errors()?.saturating_sub(rcvbuf_errors_before),
    });
    Ok(())
}
