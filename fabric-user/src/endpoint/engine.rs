//! Runs one step of transfers between hosts: per host a thread in its namespace, sockets, and the
//! requesters and responders of every QP that starts or ends there.
//!
//! Each host thread is the host's NIC: it sends data and ACKs in the data class (DSCP `dscp`,
//! ECT(0)) and CNPs and CTS messages in class 6, reads the TOS of what arrives (CE marks), obeys
//! the PFC frames that reach its veth (an `AF_PACKET` socket), and runs the congestion control of
//! `cc`. Every packet leaves through a queue per (UDP source port, TOS): a paused class holds its
//! queues, in order, until it may send again.
use std::{
    collections::{BTreeMap, HashMap},
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    os::fd::{AsRawFd, OwnedFd},
    sync::atomic::{AtomicU64, AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use fabric_common::pfc::{CLASSES, PauseFrame, quanta_to_ns};
use serde::Serialize;

use super::{EndpointOptions, SportPolicy, downlink::Downlink, fixed_udp_sport, rxe_udp_sport, socket};
use crate::model::workload::HostTransfer;
use crate::{
    model::plan::{NodeId, Plan},
    sys::{
        cpu::{self, ThreadSched},
        netns,
    },
};
use fabric_roce::{
    buf::PacketBuf,
    cc::{CongestionControl, Feedback, RateTrajectory, ReceiverQp, SenderError, SenderInput, SenderQp},
    icrc::IpPair,
    pacer::PacerConfig,
    pause::PauseState,
    psn::Psn,
    qp::{Connection, DEFAULT_PKEY, Requester, RequesterConfig, Responder, ResponderConfig},
    segment::PathMtu,
    traffic_class::{CONTROL_TOS, data_tos, is_ce, is_control, priority_class},
    wire::{BTH_LEN, BthPacket},
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
    /// QPs whose responder accepted bytes: the distinct destination QPNs the receiving host saw
    /// carry this transfer's data (measured there, not planned).
    pub qps_receiving: u32,
    /// UDP source port of each QP (what ECMP hashes besides addresses).
    pub udp_sports: Vec<u16>,
    /// Completion time on the step's clock (from when every host could send), ns.
    pub completion_ns: u64,
    pub goodput_bps: f64,
    /// Rate the transfer was paced at.
    pub intended_bps: u64,
    pub packets_sent: u64,
    pub retransmitted: u64,
    pub timeouts: u64,
    pub naks: u64,
    /// Packets dropped because their ICRC failed: at the requesters (ACKs, NAKs, CNPs, grants)
    /// and at the responders (data).
    pub icrc_errors: u64,
    /// Packets for a sender QP that its parser refused (counted, never dropped silently).
    pub wire_errors: u64,
    /// Bytes the responders accepted (in order, once): equals `bytes` when nothing was lost.
    pub bytes_received: u64,
    /// What the responders saw of the network's reordering ([`fabric_roce::reorder`]), whatever
    /// the transport: packets that arrived after a higher PSN (summed over the QPs), the
    /// deepest of them in PSNs (the QPs' largest), and packets whose PSN had arrived before.
    pub reordered_packets: u64,
    pub reorder_depth_max: u64,
    pub duplicate_psns: u64,
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
    /// Sleeps that ended on their timeout, and those that ended more than one packet's transmit
    /// time (path MTU at the host link's wall rate) after it: a late wake costs a paced sender
    /// its slot, so a high share of them says the CPU, not the fabric, set the pace.
    pub timed_wakes: u64,
    pub late_wakes: u64,
    /// The host thread's time from the barrier to its last QP's end, and how much of it the
    /// thread was runnable but waited for a CPU (scheduler accounting), ns.
    pub active_ns: u64,
    pub cpu_wait_ns: u64,
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
    /// The network's time for the step, wall ns: from the moment every host had its sockets
    /// (when the first packet may leave, the twin's time 0) to the last QP's completion. The
    /// threads' setup before and teardown after are the testbed's own cost, not the network's.
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
    /// The QP's pacing rate (its transfer's rate over the transfer's QPs), bit/s in slowed time.
    pub rate_bps: u64,
}

/// What a step sets per transfer and per host beyond the run's [`EndpointOptions`] (the default
/// sets nothing: every transfer runs `opts.qps` QPs at the run's rate).
#[derive(Clone, Debug, Default)]
pub struct StepShape {
    /// QPs of each transfer, in the step's order (empty: `opts.qps` for every one); several
    /// jobs in one step each run their own count.
    pub qps: Vec<u32>,
    /// Hosts whose NIC is slower than their link: the NIC's rate, bit/s in slowed time. What
    /// such a host sends in the step, all its transfers together, is paced under it.
    pub nic_rate_bps: BTreeMap<NodeId, u64>,
}

impl StepShape {
    /// QPs of transfer `f`.
    pub fn qps_of(&self, f: usize, opts: &EndpointOptions) -> u32 {
        self.qps.get(f).copied().unwrap_or(opts.qps).max(1)
    }

    /// Transfer `f`'s sending rate, all its QPs together, bit/s in slowed time: the run's, or
    /// for a host with a slow NIC at most the NIC's rate shared by the host's transfers.
    pub fn rate_of(&self, plan: &Plan, transfers: &[HostTransfer], f: usize, opts: &EndpointOptions) -> u64 {
        let rate = transfer_rate_bps(plan, opts);
        let src = transfers[f].src;
        match self.nic_rate_bps.get(&src) {
            Some(&nic) => {
                let sending = transfers.iter().filter(|t| t.src == src && t.bytes > 0).count().max(1) as u64;
                rate.min(nic / sending).max(1)
            }
            None => rate,
        }
    }
}

fn ipv4(plan: &Plan, host: NodeId) -> Ipv4Addr {
    plan.host_ipv4(host)
}

/// The QPs of every transfer, with their numbers and ports. Shared with the simulator.
pub fn plan_qps(plan: &Plan, transfers: &[HostTransfer], opts: &EndpointOptions) -> Vec<QpPlan> {
    plan_qps_shaped(plan, transfers, &StepShape::default(), opts)
}

/// A transfer's sending rate (all its QPs together), bit/s in slowed time: `opts.rate_bps`, or
/// the host link's modelled rate when that is 0.
pub fn transfer_rate_bps(plan: &Plan, opts: &EndpointOptions) -> u64 {
    if opts.rate_bps == 0 { host_link_rate_bps(plan, opts.time_scale) } else { opts.rate_bps }
}

/// One QP's share of a transfer's rate over its `qps` QPs (at least 1 bit/s). Shared with the
/// twin, which paces its QPs the same way when a rate is set.
pub fn per_qp_rate_bps(transfer_rate_bps: u64, qps: u32) -> u64 {
    (transfer_rate_bps / u64::from(qps.max(1))).max(1)
}

/// [`plan_qps`] with the step's per-transfer QP counts and slow NICs (`shape`).
pub fn plan_qps_shaped(
    plan: &Plan,
    transfers: &[HostTransfer],
    shape: &StepShape,
    opts: &EndpointOptions,
) -> Vec<QpPlan> {
    let mut next_qpn: HashMap<NodeId, u32> = HashMap::new();
    let mut alloc = |host: NodeId| {
        let q = next_qpn.entry(host).or_insert(0x11);
        let v = *q;
        *q += 1;
        v
    };
    let mut qps = Vec::new();
    for (f, t) in transfers.iter().enumerate() {
        let qp_count = shape.qps_of(f, opts);
        let q = u64::from(qp_count);
        let rate_bps = per_qp_rate_bps(shape.rate_of(plan, transfers, f, opts), qp_count);
        for k in 0..q {
            let (req_qpn, resp_qpn) = (alloc(t.src), alloc(t.dst));
            let sport = match opts.sport {
                SportPolicy::PerQp => rxe_udp_sport(req_qpn, resp_qpn),
                SportPolicy::Fixed => fixed_udp_sport(ipv4(plan, t.src), ipv4(plan, t.dst)),
            };
            // Stripe: equal shares, the remainder on the first QPs.
            let bytes = t.bytes / q + u64::from(k < t.bytes % q);
            qps.push(QpPlan { flow: f, req_qpn, resp_qpn, sport, bytes, rate_bps });
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
    /// Data packets the responder's host dropped for a failed ICRC.
    icrc_errors_received: u64,
    wire_errors: u64,
    ce_packets: u64,
    cnps_sent: u64,
    cnps_received: u64,
    reordered_packets: u64,
    reorder_depth_max: u64,
    duplicate_psns: u64,
    trajectory: Option<RateTrajectory>,
}

impl QpOutcome {
    /// The sending side's outcome `self` with the receiving side's counts from `received`:
    /// the two host threads report in either order, and neither may wipe the other's counts.
    fn with_receiving_side(self, received: &QpOutcome) -> QpOutcome {
        QpOutcome {
            bytes_received: received.bytes_received,
            icrc_errors_received: received.icrc_errors_received,
            reordered_packets: received.reordered_packets,
            reorder_depth_max: received.reorder_depth_max,
            duplicate_psns: received.duplicate_psns,
            ce_packets: received.ce_packets,
            cnps_sent: received.cnps_sent,
            ..self
        }
    }
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
    run_step_shaped(plan, transfers, &StepShape::default(), opts, run)
}

/// [`run_step_in`] with the step's per-transfer QP counts and slow NICs (`shape`).
pub fn run_step_shaped(
    plan: &Plan,
    transfers: &[HostTransfer],
    shape: &StepShape,
    opts: &EndpointOptions,
    run: &RunClock,
) -> Result<StepResult> {
    anyhow::ensure!(
        shape.qps.is_empty() || shape.qps.len() == transfers.len(),
        "step shape: {} QP counts for {} transfers",
        shape.qps.len(),
        transfers.len()
    );
    let mtu = check_options(opts)?;
    let slow = match &opts.slow_receiver {
        Some(s) => Some((
            plan.node_by_name(&s.host).with_context(|| format!("slow receiver: no host {:?}", s.host))?,
            s.duration_ns,
        )),
        None => None,
    };
    let qps = plan_qps_shaped(plan, transfers, shape, opts);
    let mut hosts: Vec<NodeId> = transfers.iter().flat_map(|t| [t.src, t.dst]).collect();
    hosts.sort();
    hosts.dedup();
    let remaining = AtomicUsize::new(qps.iter().filter(|q| q.bytes > 0).count());
    let failed = AtomicUsize::new(0);
    let clock = StepClock::new();
    let outcomes: std::sync::Mutex<HashMap<usize, QpOutcome>> = Default::default();
    let host_results: std::sync::Mutex<Vec<HostResult>> = Default::default();
    let rate_bps = transfer_rate_bps(plan, opts);
    // DCQCN's line only for a requester without a pacer, which none is here: each QP starts
    // and recovers at its own pacer's rate, which counts its transfer's QPs and a slow NIC's
    // cap (a run-wide line would override both).
    let per_qp_rate = per_qp_rate_bps(rate_bps, opts.qps);
    // The slow receiver's end.
    let slow = slow.map(|(host, d)| (host, run.start + Duration::from_nanos(d)));
    // Nobody sends before every host has its sockets: a datagram to a port not yet open is lost
    // and costs a go-back-N round.
    let ready = std::sync::Barrier::new(hosts.len());
    run_hosts(plan, &hosts, &failed, |host| HostContext {
        plan,
        host,
        transfers,
        qps: &qps,
        opts,
        mtu,
        per_qp_rate,
        clock: &clock,
        slow_until: slow.and_then(|(h, end)| (h == host).then_some(end)),
        remaining: &remaining,
        failed: &failed,
        outcomes: &outcomes,
        host_results: &host_results,
        ready: &ready,
    })?;
    let outcomes = outcomes.into_inner().expect("not poisoned");
    let duration_ns = outcomes.values().map(|o| o.completed_ns).max().unwrap_or(0);
    let flows = transfers
        .iter()
        .enumerate()
        .map(|(f, t)| flow_result(plan, f, t, &qps, &outcomes, shape.rate_of(plan, transfers, f, opts)))
        .collect();
    let mut hosts = host_results.into_inner().expect("not poisoned");
    hosts.sort_by(|a, b| a.host.cmp(&b.host));
    Ok(StepResult { duration_ns, flows, hosts })
}

/// The endpoint options a step cannot run without, and the path MTU they name.
fn check_options(opts: &EndpointOptions) -> Result<PathMtu> {
    let mtu =
        PathMtu::from_bytes(opts.path_mtu).with_context(|| format!("path MTU {} is not an IB MTU", opts.path_mtu))?;
    anyhow::ensure!(opts.time_scale >= 1, "time_scale must be at least 1");
    anyhow::ensure!(opts.dscp < 64, "DSCP {} is not 6 bits", opts.dscp);
    // The congestion control's own settings: built once here, so that no host thread fails on them.
    opts.cc.congestion_control(opts, 1, 1)?;
    Ok(mtu)
}

/// Runs `host_loop` on a thread per host, each in its namespace, and waits for all of them.
fn run_hosts<'a>(
    plan: &'a Plan,
    hosts: &[NodeId],
    failed: &'a AtomicUsize,
    context: impl Fn(NodeId) -> HostContext<'a>,
) -> Result<()> {
    std::thread::scope(|s| -> Result<()> {
        let mut handles = Vec::new();
        for &host in hosts {
            let ctx = context(host);
            handles.push(s.spawn(move || -> Result<()> {
                let r = netns::in_named(&plan.netns(host), || host_loop(&ctx));
                if r.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                r.with_context(|| format!("endpoint on {}", plan.nodes[host].name))
            }));
        }
        // Every thread is joined before the error is chosen.
        let results: Vec<Result<()>> =
            handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect();
        root_error(results)
    })
}

/// The error to report of the hosts' results: the first host's own failure, not a host that
/// stopped because another one failed.
fn root_error(results: Vec<Result<()>>) -> Result<()> {
    let mut errors: Vec<anyhow::Error> = results.into_iter().filter_map(Result::err).collect();
    let root = errors.iter().position(|e| e.downcast_ref::<AnotherEndpointFailed>().is_none()).unwrap_or(0);
    if errors.is_empty() { Ok(()) } else { Err(errors.swap_remove(root)) }
}

/// A host stopped because another host's endpoint failed (that one's error says why).
#[derive(Debug, thiserror::Error)]
#[error("another endpoint failed")]
struct AnotherEndpointFailed;

/// Transfer `f` (`t`) as its QPs' outcomes tell it.
fn flow_result(
    plan: &Plan,
    f: usize,
    t: &HostTransfer,
    qps: &[QpPlan],
    outcomes: &HashMap<usize, QpOutcome>,
    rate_bps: u64,
) -> FlowResult {
    let mine: Vec<(usize, &QpPlan)> = qps.iter().enumerate().filter(|(_, q)| q.flow == f).collect();
    let none = QpOutcome::default();
    let get = |i: usize| outcomes.get(&i).unwrap_or(&none);
    let completion_ns = mine.iter().map(|(i, _)| get(*i).completed_ns).max().unwrap_or(0);
    let sum = |g: fn(&QpOutcome) -> u64| mine.iter().map(|(i, _)| g(get(*i))).sum::<u64>();
    let trajectories: Vec<&RateTrajectory> = mine.iter().filter_map(|(i, _)| get(*i).trajectory.as_ref()).collect();
    FlowResult {
        src: plan.nodes[t.src].name.clone(),
        dst: plan.nodes[t.dst].name.clone(),
        bytes: t.bytes,
        qps: mine.len() as u32,
        qps_receiving: mine.iter().filter(|(i, _)| get(*i).bytes_received > 0).count() as u32,
        udp_sports: mine.iter().map(|(_, q)| q.sport).collect(),
        completion_ns,
        goodput_bps: if completion_ns > 0 { t.bytes as f64 * 8e9 / completion_ns as f64 } else { 0.0 },
        intended_bps: rate_bps,
        packets_sent: sum(|o| o.packets_sent),
        retransmitted: sum(|o| o.retransmitted),
        timeouts: sum(|o| o.timeouts),
        naks: sum(|o| o.naks),
        icrc_errors: sum(|o| o.icrc_errors + o.icrc_errors_received),
        wire_errors: sum(|o| o.wire_errors),
        bytes_received: sum(|o| o.bytes_received),
        reordered_packets: sum(|o| o.reordered_packets),
        reorder_depth_max: mine.iter().map(|(i, _)| get(*i).reorder_depth_max).max().unwrap_or(0),
        duplicate_psns: sum(|o| o.duplicate_psns),
        ce_packets: sum(|o| o.ce_packets),
        cnps_sent: sum(|o| o.cnps_sent),
        cnps_received: sum(|o| o.cnps_received),
        rate_trajectory: if trajectories.is_empty() { Vec::new() } else { RateTrajectory::sum(&trajectories) },
    }
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
    clock: &'a StepClock,
    /// This host is a slow receiver until then.
    slow_until: Option<Instant>,
    remaining: &'a AtomicUsize,
    failed: &'a AtomicUsize,
    outcomes: &'a std::sync::Mutex<HashMap<usize, QpOutcome>>,
    host_results: &'a std::sync::Mutex<Vec<HostResult>>,
    ready: &'a std::sync::Barrier,
}

/// The step's clock. Its origin is the release of the hosts' ready barrier: every host has
/// its sockets and QPs and may send, the twin's time 0. Entering namespaces and opening
/// sockets took 18 ms of a 1 MiB flow's 210 ms step when the threads' start was the origin,
/// 4.5 µs of modelled time the twin does not have.
struct StepClock {
    start: Instant,
    /// The last host's arrival at the barrier, ns after `start`.
    last_arrival_ns: AtomicU64,
}

impl StepClock {
    fn new() -> Self {
        StepClock { start: Instant::now(), last_arrival_ns: AtomicU64::new(0) }
    }

    /// A host has its sockets and is about to wait at the barrier.
    fn arrive(&self) {
        self.last_arrival_ns.fetch_max(self.start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// The origin, read after the barrier (whose lock orders every arrival before it).
    fn origin(&self) -> Instant {
        self.start + Duration::from_nanos(self.last_arrival_ns.load(Ordering::Relaxed))
    }
}

impl HostContext<'_> {
    fn me(&self) -> Ipv4Addr {
        ipv4(self.plan, self.host)
    }

    /// TOS of data, ACKs and NAKs.
    fn data_tos(&self) -> u8 {
        data_tos(self.opts.dscp, self.opts.ecn)
    }

    fn link_rate(&self) -> u64 {
        host_link_rate_bps(self.plan, self.opts.time_scale.max(1))
    }

    /// The requester's timeout, scaled: also the CTS resend time.
    fn retransmit_timeout_ns(&self) -> u64 {
        let scale = self.opts.time_scale.max(1);
        self.opts.retransmit_timeout_ns.saturating_mul(scale).min(RETRANSMIT_TIMEOUT_WALL_MAX_NS)
    }

    /// One end of QP `q`: both share its UDP source port (as rxe does).
    fn end(&self, q: &QpPlan, local_qp: u32, remote_qp: u32, peer: Ipv4Addr) -> Connection {
        Connection {
            local_qp,
            remote_qp,
            pkey: DEFAULT_PKEY,
            ip: IpPair::V4 { src: self.me(), dst: peer },
            udp_src_port: q.sport,
        }
    }
}

/// The pacer's burst at path MTU `path_mtu`: two packets, enough to absorb scheduling jitter,
/// small enough that the rate holds over short messages.
pub fn pacer_burst_bytes(path_mtu: u32) -> u64 {
    2 * u64::from(path_mtu + 100)
}

/// Both ends of a QP start at the same PSN.
pub fn first_psn(q: &QpPlan) -> Psn {
    Psn::new(q.req_qpn.wrapping_mul(0x9E37) & 0xFF_FFFF)
}

/// A QP that starts here.
struct SenderEntry {
    idx: usize,
    qp: SenderQp,
    dst: SocketAddrV4,
    outcome: QpOutcome,
    done: bool,
    trajectory: Option<RateTrajectory>,
}

impl SenderEntry {
    /// QP `q` (index `idx`) from this host, posting what `cc` admits at `t0`.
    fn new(cx: &HostContext<'_>, idx: usize, q: &QpPlan, cc: &mut dyn CongestionControl, t0: u64) -> Result<Self> {
        let peer = ipv4(cx.plan, cx.transfers[q.flow].dst);
        let mut cfg = RequesterConfig::new(cx.end(q, q.req_qpn, q.resp_qpn, peer));
        cfg.mtu = cx.mtu;
        cfg.window_packets = cx.opts.transport.window_packets(cx.opts.window);
        cfg.transport = cx.opts.transport;
        cfg.retransmit_timeout_ns = cx.retransmit_timeout_ns();
        cfg.first_psn = first_psn(q);
        let burst_bytes = pacer_burst_bytes(cx.opts.path_mtu);
        cfg.pacer = Some(PacerConfig { rate_bps: q.rate_bps, burst_bytes });
        let qp = SenderQp::new(Requester::new(cfg), q.bytes, cc, t0)
            .map_err(|e| anyhow::anyhow!("posting a write: {e:?}"))?;
        Ok(SenderEntry {
            idx,
            qp,
            dst: SocketAddrV4::new(peer, fabric_common::wire::udp::ROCEV2_PORT),
            outcome: QpOutcome::default(),
            done: false,
            trajectory: cc.sets_rate().then(|| RateTrajectory::new(RATE_SAMPLE_NS, RATE_SAMPLES_MAX)),
        })
    }

    fn sport(&self) -> u16 {
        self.qp.requester.config().connection.udp_src_port
    }

    /// Everything acknowledged at `t`: the requester's counters become the outcome.
    fn complete(&mut self, t: u64) {
        self.done = true;
        let c = self.qp.requester.counters();
        self.outcome = QpOutcome {
            completed_ns: t,
            packets_sent: c.packets_sent,
            retransmitted: c.packets_retransmitted,
            timeouts: c.timeouts,
            naks: c.naks_received,
            icrc_errors: self.outcome.icrc_errors,
            wire_errors: self.outcome.wire_errors,
            ..Default::default()
        };
    }
}

/// A QP that ends here.
struct ReceiverEntry {
    idx: usize,
    qp: ReceiverQp,
    dst: SocketAddrV4,
    sport: u16,
    /// Packets dropped for a failed ICRC: corruption on the way, counted, never silent.
    icrc_errors: u64,
}

impl ReceiverEntry {
    /// QP `q` (index `idx`) into this host, registered with `cc`.
    fn new(cx: &HostContext<'_>, idx: usize, q: &QpPlan, cc: &mut dyn CongestionControl) -> Self {
        let peer = ipv4(cx.plan, cx.transfers[q.flow].src);
        let mut cfg = ResponderConfig::new(cx.end(q, q.resp_qpn, q.req_qpn, peer));
        cfg.first_psn = first_psn(q);
        cfg.ack_every = cx.opts.ack_every;
        cfg.transport = cx.opts.transport;
        let dst = SocketAddrV4::new(peer, fabric_common::wire::udp::ROCEV2_PORT);
        ReceiverEntry {
            idx,
            qp: ReceiverQp::new(Responder::new(cfg), q.bytes, cc),
            dst,
            sport: q.sport,
            icrc_errors: 0,
        }
    }

    /// Whether a packet from UDP source port `from_port` has a good ICRC; a bad one is counted.
    fn accepts(&mut self, from_port: u16, payload: &[u8]) -> bool {
        let good = self.qp.responder.config().connection.verify_incoming(from_port, payload);
        self.icrc_errors += u64::from(!good);
        good
    }
}

/// The QPs that start or end at one host, and the congestion control they run.
struct HostQps {
    cc: Box<dyn CongestionControl>,
    senders: HashMap<u32, SenderEntry>,
    receivers: HashMap<u32, ReceiverEntry>,
}

/// The source ports `cx.host`'s senders and receivers send from (one socket each).
fn host_sports(cx: &HostContext<'_>) -> impl Iterator<Item = u16> {
    let here = |q: &&QpPlan| {
        let t = &cx.transfers[q.flow];
        q.bytes > 0 && (t.src == cx.host || t.dst == cx.host)
    };
    cx.qps.iter().filter(here).map(|q| q.sport)
}

impl HostQps {
    /// Every QP of the step that starts or ends at `cx.host`, senders posting from `t0`.
    fn new(cx: &HostContext<'_>, t0: u64) -> Result<Self> {
        let mut cc = cx.opts.cc.congestion_control(cx.opts, cx.per_qp_rate, cx.retransmit_timeout_ns())?;
        let (mut senders, mut receivers) = (HashMap::new(), HashMap::new());
        for (i, q) in cx.qps.iter().enumerate() {
            let t = &cx.transfers[q.flow];
            if t.src == cx.host && q.bytes > 0 {
                senders.insert(q.req_qpn, SenderEntry::new(cx, i, q, &mut *cc, t0)?);
            }
            if t.dst == cx.host && q.bytes > 0 {
                receivers.insert(q.resp_qpn, ReceiverEntry::new(cx, i, q, &mut *cc));
            }
        }
        Ok(HostQps { cc, senders, receivers })
    }
}

/// Packets waiting to leave, per (UDP source port, TOS), in order.
type OutQueues = HashMap<(u16, u8), Vec<(Bytes, SocketAddrV4)>>;

/// A received datagram held until the modelled downlink delivers it: its UDP payload, its
/// source, and the TOS it arrived with.
type Arrival = (Bytes, SocketAddrV4, Option<u8>);

/// PFC at one host: the pauses it obeys, and the XOFF it sends while a slow receiver.
struct Pfc {
    pause: PauseState,
    mac: [u8; 6],
    data_class: usize,
    frames_sent: u64,
    /// A slow receiver refreshes its XOFF every half pause time, as a NIC with a full buffer does.
    xoff_refresh_ns: u64,
    next_xoff_ns: u64,
    sent_xoff: bool,
}

impl Pfc {
    fn new(link_rate: u64, mac: [u8; 6], data_class: usize) -> Self {
        let xoff_refresh_ns = (quanta_to_ns(0xFFFF, link_rate) / 2).max(1);
        Pfc {
            pause: PauseState::new(link_rate),
            mac,
            data_class,
            frames_sent: 0,
            xoff_refresh_ns,
            next_xoff_ns: 0,
            sent_xoff: false,
        }
    }

    /// Sends a PFC frame pausing the data class for `quanta` (0: resume).
    fn send_pause(&mut self, fd: &OwnedFd, quanta: u16) -> Result<()> {
        let mut q = [0u16; CLASSES];
        q[self.data_class] = quanta;
        socket::send_frame(fd, &PauseFrame { src: self.mac, class_enable: 1 << self.data_class, quanta: q }.emit())?;
        self.frames_sent += 1;
        Ok(())
    }
}

/// The buffers `recvmmsg` fills.
struct RxBatch {
    bufs: Box<[[u8; 4096]; socket::BATCH]>,
    got: Vec<socket::Received>,
}

/// One host thread while its step runs.
struct HostRun<'a> {
    cx: &'a HostContext<'a>,
    /// The step clock's origin ([`StepClock`]).
    origin: Instant,
    /// This host is a slow receiver until then, step clock.
    slow_until_ns: Option<u64>,
    socks: HostSockets,
    tos: u8,
    qps: HostQps,
    pfc: Pfc,
    out: OutQueues,
    /// What arrived, held until the modelled link towards this host has delivered it.
    downlink: Downlink<Arrival>,
    rx: RxBatch,
    frame_buf: [u8; 256],
    /// Packets this host sends, and copies of those it receives.
    tx_buf: PacketBuf,
    rx_buf: PacketBuf,
    feedback: Vec<Feedback>,
    wakes: Wakes,
}

/// One path-MTU packet's transmit time at `link_rate_bps` (wall), ns: how late a wake may be
/// before it cost a paced sender a packet slot.
fn late_after_ns(cx: &HostContext<'_>, link_rate_bps: u64) -> u64 {
    (u64::from(cx.opts.path_mtu) * 8 * 1_000_000_000).checked_div(link_rate_bps).unwrap_or(0)
}

/// How punctually this host's sleeps ended (see [`HostResult::late_wakes`]).
struct Wakes {
    late_after_ns: u64,
    timed: u64,
    late: u64,
}

fn host_loop(cx: &HostContext<'_>) -> Result<()> {
    // Without it the host still runs, and its late wakes say how much that cost.
    let _ = cpu::precise_timers();
    let port = &cx.plan.nodes[cx.host].ports[0];
    // Sockets and QPs (posted at step time 0) are made before the barrier, so that every
    // sender can send as the barrier releases, as the twin's all do at time 0. Made after it,
    // they spread four incast senders' first packets over up to 8.5 ms of wall time (2.1 µs
    // modelled) in a debug build; made before, over up to 3.8 ms (measured with the receive
    // buffers made before it too; they are now made after it, a 256 KiB zero fill). Errors
    // wait until every host has passed the barrier: one that left before it would leave the
    // others waiting forever.
    let ready = HostSockets::new(cx.me(), cx.data_tos(), &port.ifname, host_sports(cx))
        .and_then(|socks| Ok((socks, HostQps::new(cx, 0)?)));
    let rcvbuf_errors_before = udp_rcvbuf_errors();
    cx.clock.arrive();
    cx.ready.wait();
    let origin = cx.clock.origin();
    let sched_before = ThreadSched::read();
    let (socks, qps) = ready?;
    let rcvbuf_errors_before = rcvbuf_errors_before?;
    let mut run = HostRun::new(cx, socks, qps, port.mac, origin);
    let result = run.run_rounds();
    if run.pfc.sent_xoff {
        // Leave the switch unpaused: the next step's thread pauses it again if still slow.
        let _ = run.pfc.send_pause(&run.socks.pfc, 0);
    }
    result?;
    if cx.failed.load(Ordering::Relaxed) > 0 {
        return Err(AnotherEndpointFailed.into());
    }
    run.collect_outcome(rcvbuf_errors_before, sched_before?)
}

impl<'a> HostRun<'a> {
    /// The step's clock, ns.
    fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn new(cx: &'a HostContext<'a>, socks: HostSockets, qps: HostQps, mac: [u8; 6], origin: Instant) -> Self {
        let tos = cx.data_tos();
        let link_rate = cx.link_rate();
        HostRun {
            cx,
            origin,
            // 0 if the slow period is over.
            slow_until_ns: cx.slow_until.map(|end| end.saturating_duration_since(origin).as_nanos() as u64),
            socks,
            tos,
            qps,
            pfc: Pfc::new(link_rate, mac, priority_class(tos)),
            out: HashMap::new(),
            downlink: Downlink::new(link_rate),
            rx: RxBatch { bufs: Box::new([[0u8; 4096]; socket::BATCH]), got: Vec::with_capacity(socket::BATCH) },
            frame_buf: [0u8; 256],
            tx_buf: PacketBuf::new(),
            rx_buf: PacketBuf::new(),
            feedback: Vec::new(),
            wakes: Wakes { late_after_ns: late_after_ns(cx, link_rate), timed: 0, late: 0 },
        }
    }

    /// Rounds until every QP of the step has completed, or an endpoint failed.
    fn run_rounds(&mut self) -> Result<()> {
        while self.cx.remaining.load(Ordering::Relaxed) > 0 && self.cx.failed.load(Ordering::Relaxed) == 0 {
            self.round()?;
        }
        Ok(())
    }

    /// One round: PFC in, the slow receiver's XOFF, feedback, transmit, receive and dispatch,
    /// then sleep if nothing arrived.
    fn round(&mut self) -> Result<()> {
        let t = self.now();
        if t > self.cx.opts.step_timeout_ns {
            bail!("step did not finish within {} s", self.cx.opts.step_timeout_ns / 1_000_000_000);
        }
        self.read_pfc(t)?;
        // A slow receiver keeps its switch paused and reads nothing.
        let slow = self.slow_receiver(t)?;
        self.queue_feedback(t, slow);
        self.transmit(t)?;
        self.sample_rates(t);
        let received = if slow { 0 } else { self.receive()? };
        if !slow {
            self.dispatch()?;
        }
        if received == 0 {
            self.idle_wait(slow);
        }
        Ok(())
    }

    /// PFC frames from the rack switch.
    fn read_pfc(&mut self, t: u64) -> Result<()> {
        while let Some(frame) = socket::recv_frame(&self.socks.pfc, &mut self.frame_buf)? {
            if let Ok(f) = PauseFrame::parse(frame) {
                self.pfc.pause.on_frame(&f, t);
            }
        }
        Ok(())
    }

    /// Whether this host is a slow receiver at `t`; it keeps the switch paused while it is, and
    /// releases it after.
    fn slow_receiver(&mut self, t: u64) -> Result<bool> {
        let slow = self.slow_until_ns.is_some_and(|end| t < end);
        let pfc = &mut self.pfc;
        if slow && t >= pfc.next_xoff_ns {
            pfc.send_pause(&self.socks.pfc, 0xFFFF)?;
            pfc.sent_xoff = true;
            pfc.next_xoff_ns = t + pfc.xoff_refresh_ns;
        } else if !slow && pfc.sent_xoff {
            pfc.send_pause(&self.socks.pfc, 0)?;
            pfc.sent_xoff = false;
        }
        Ok(slow)
    }

    /// What the receivers' congestion control sends back now (CNPs, CTS grants), queued in the
    /// control class. A slow receiver admits nothing.
    fn queue_feedback(&mut self, t: u64, slow: bool) {
        self.qps.cc.poll_feedback(t, !slow, &mut self.tx_buf, &mut self.feedback);
        for f in self.feedback.drain(..) {
            let r = self.qps.receivers.get_mut(&f.qp()).expect("feedback goes out on this host's receivers");
            let packet = r.qp.feedback_packet(f, &mut self.tx_buf);
            self.out.entry((r.sport, CONTROL_TOS)).or_default().push((packet, r.dst));
        }
    }

    /// Queues what the pacers, windows and PFC allow, then sends what the queues hold.
    fn transmit(&mut self, t: u64) -> Result<()> {
        if self.pfc.pause.may_send(self.pfc.data_class, t) {
            let cc = &mut *self.qps.cc;
            for e in self.qps.senders.values_mut() {
                let queue = self.out.entry((e.sport(), self.tos)).or_default();
                if e.done || queue.len() > 4 * socket::BATCH {
                    continue;
                }
                let dst = e.dst;
                e.qp.poll_transmit(cc, t, 32, &mut self.tx_buf, |p| queue.push((p, dst)));
            }
        }
        self.flush(t)
    }

    /// Sends every queue whose class is not paused; a full socket buffer sends a prefix and the
    /// rest waits for the next round, in order.
    fn flush(&mut self, t: u64) -> Result<()> {
        for (&(sport, pkt_tos), pkts) in self.out.iter_mut() {
            if pkts.is_empty() || !self.pfc.pause.may_send(priority_class(pkt_tos), t) {
                continue;
            }
            let tos = (pkt_tos != self.tos).then_some(pkt_tos);
            let n = socket::send_batch_with_tos(&self.socks.tx[&sport], pkts, tos)?;
            pkts.drain(..n);
        }
        Ok(())
    }

    /// The pacing rate of every sender whose scheme sets it.
    fn sample_rates(&mut self, t: u64) {
        for e in self.qps.senders.values_mut() {
            if let (Some(tr), Some(rate)) = (&mut e.trajectory, e.qp.rate_bps()) {
                tr.sample(t, rate);
            }
        }
    }

    /// Everything the socket holds, into the modelled downlink; returns how many datagrams.
    fn receive(&mut self) -> Result<usize> {
        let mut received = 0;
        loop {
            let n = socket::recv_batch(&self.socks.rx, &mut self.rx.bufs, &mut self.rx.got)?;
            if n == 0 {
                return Ok(received);
            }
            received += n;
            let t = self.now();
            for (buf, rcv) in self.rx.bufs.iter().zip(&self.rx.got) {
                if rcv.len >= BTH_LEN {
                    let payload = self.rx_buf.copy(&buf[..rcv.len]);
                    let control = rcv.tos.is_some_and(is_control);
                    self.downlink.arrive(t, rcv.len, control, (payload, rcv.from, rcv.tos));
                }
            }
        }
    }

    /// Hands what the downlink has delivered to its QP, by destination QP number.
    fn dispatch(&mut self) -> Result<()> {
        loop {
            let t = self.now();
            let Some((payload, from, tos)) = self.downlink.deliver(t) else { return Ok(()) };
            let qpn = BthPacket::new_unchecked(&payload[..]).dest_qp();
            if self.qps.receivers.contains_key(&qpn) {
                self.deliver_to_receiver(qpn, &payload, from, tos, t);
            } else if self.qps.senders.contains_key(&qpn) {
                self.deliver_to_sender(qpn, &payload, from, t)?;
            }
        }
    }

    /// A packet for a QP that ends here: its ACK or NAK is queued in the data class.
    fn deliver_to_receiver(&mut self, qpn: u32, payload: &[u8], from: SocketAddrV4, tos: Option<u8>, t: u64) {
        let r = self.qps.receivers.get_mut(&qpn).expect("checked by dispatch");
        if !r.accepts(from.port(), payload) {
            return;
        }
        let ce = tos.is_some_and(is_ce);
        if let Some(response) = r.qp.on_packet(&mut *self.qps.cc, payload, ce, t, &mut self.tx_buf) {
            self.out.entry((r.sport, self.tos)).or_default().push((response, r.dst));
        }
    }

    /// A packet for a QP that starts here: an ACK, NAK or CNP, or a control message.
    fn deliver_to_sender(&mut self, qpn: u32, payload: &[u8], from: SocketAddrV4, t: u64) -> Result<()> {
        let e = self.qps.senders.get_mut(&qpn).expect("checked by dispatch");
        if !e.qp.requester.config().connection.verify_incoming(from.port(), payload) {
            e.outcome.icrc_errors += 1;
            return Ok(());
        }
        match e.qp.on_packet(&mut *self.qps.cc, payload, t) {
            Ok(SenderInput::Control) => return Ok(()),
            Ok(SenderInput::Transport(_)) => {}
            Err(SenderError::Wire(_)) => e.outcome.wire_errors += 1,
            Err(post @ SenderError::Post(_)) => bail!("{post}"),
        }
        if let Some(f) = e.qp.requester.failure() {
            bail!("QP {qpn:#x} failed: {f:?}");
        }
        if !e.done && e.qp.is_complete() {
            e.complete(t);
            self.cx.remaining.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Idle: sleeps until a packet or PFC frame arrives or the next deadline (pacing, timers, a
    /// pause's end, feedback owed, the slow period's XOFF, the downlink's next delivery).
    fn idle_wait(&mut self, slow: bool) {
        let t = self.now();
        let mut wake = self.next_deadline(t, slow).map_or(1_000_000, |w| w.saturating_sub(t).min(1_000_000));
        if self.pfc.sent_xoff && !slow {
            wake = 0;
        }
        let mut pfds = [
            libc::pollfd { fd: self.socks.pfc.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: self.socks.rx.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // A slow receiver does not wake for data.
        let nfds = if slow { 1 } else { 2 };
        let ts = libc::timespec { tv_sec: 0, tv_nsec: wake.max(1_000) as i64 };
        // SAFETY: valid pollfds, a valid timespec, no signal mask.
        let ready = unsafe { libc::ppoll(pfds.as_mut_ptr(), nfds, &ts, std::ptr::null()) };
        if ready == 0 {
            self.wakes.timed += 1;
            let due = t + (ts.tv_nsec as u64);
            if self.now() > due + self.wakes.late_after_ns {
                self.wakes.late += 1;
            }
        }
    }

    /// The earliest time something is due after `t` without new input.
    fn next_deadline(&self, t: u64, slow: bool) -> Option<u64> {
        let (cc, pause) = (&*self.qps.cc, &self.pfc.pause);
        let data_resume = pause.resume_at(self.pfc.data_class);
        self.qps
            .senders
            .values()
            .filter(|e| !e.done)
            .filter_map(|e| if data_resume > t { Some(data_resume) } else { e.qp.poll_timeout(cc, t) })
            .chain(cc.receiver_timeout())
            .chain(
                self.out
                    .iter()
                    .filter(|(_, p)| !p.is_empty())
                    .map(|((_, q), _)| pause.resume_at(priority_class(*q)).max(t)),
            )
            .chain(self.slow_until_ns.filter(|_| slow).map(|end| end.min(self.pfc.next_xoff_ns)))
            .chain(self.downlink.next_due())
            .min()
    }

    /// Hands this host's share of the step's outcome to the step.
    fn collect_outcome(&mut self, rcvbuf_errors_before: u64, sched_before: ThreadSched) -> Result<()> {
        let end = self.now();
        let sched = ThreadSched::read()?.since(&sched_before);
        {
            let mut all = self.cx.outcomes.lock().expect("not poisoned");
            for e in self.qps.senders.values_mut() {
                let o = all.entry(e.idx).or_default();
                let mine = std::mem::take(&mut e.outcome);
                let sent = QpOutcome { cnps_received: e.qp.cnps_received(), trajectory: e.trajectory.take(), ..mine };
                *o = sent.with_receiving_side(o);
            }
            for r in self.qps.receivers.values() {
                let o = all.entry(r.idx).or_default();
                let c = r.qp.responder.counters();
                o.bytes_received = c.bytes_received;
                o.icrc_errors_received = r.icrc_errors;
                o.reordered_packets = c.reordered_packets;
                o.reorder_depth_max = c.reorder_depth_max;
                o.duplicate_psns = c.duplicate_psns;
                o.ce_packets = r.qp.ce_packets();
                o.cnps_sent = r.qp.cnps_sent();
            }
        }
        self.cx.host_results.lock().expect("not poisoned").push(HostResult {
            host: self.cx.plan.nodes[self.cx.host].name.clone(),
            pause_frames_received: self.pfc.pause.frames(),
            paused_ns: self.pfc.pause.paused_ns(self.pfc.data_class, end),
            pause_frames_sent: self.pfc.frames_sent,
            cts_max_in_flight_bytes: self.qps.cc.max_in_flight_bytes(),
            udp_receive_drops: udp_rcvbuf_errors()?.saturating_sub(rcvbuf_errors_before),
            timed_wakes: self.wakes.timed,
            late_wakes: self.wakes.late,
            active_ns: end,
            cpu_wait_ns: sched.wait_ns,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host's own failure is reported, not the hosts that stopped because of it.
    #[test]
    fn the_root_failure_is_reported() {
        let stopped = || Err(anyhow::Error::from(AnotherEndpointFailed).context("endpoint on z0r0h0"));
        let own = || Err(anyhow::anyhow!("QP 0x11 failed: RetryLimitExceeded").context("endpoint on z0r1h0"));
        let e = root_error(vec![Ok(()), stopped(), own(), stopped()]).unwrap_err();
        assert_eq!(format!("{e:#}"), "endpoint on z0r1h0: QP 0x11 failed: RetryLimitExceeded");
        let e = root_error(vec![stopped()]).unwrap_err();
        assert!(format!("{e:#}").contains("another endpoint failed"));
        assert!(root_error(vec![Ok(()), Ok(())]).is_ok());
    }

    /// Per-transfer QP counts stripe each transfer over its own QPs, sharing its rate; a slow
    /// NIC caps what its host sends, shared by the host's transfers, and nobody else's rate.
    #[test]
    fn a_step_shape_sets_qps_per_transfer_and_caps_a_slow_nics_sending() {
        let plan = Plan::new(&crate::model::topology::Topology::default_topology());
        let h = |n: &str| plan.node_by_name(n).unwrap();
        let t = |a: &str, b: &str| HostTransfer { src: h(a), dst: h(b), bytes: 1 << 20 };
        let transfers = [t("z0r0h0", "z0r1h0"), t("z0r0h0", "z0r2h0"), t("z0r1h0", "z0r0h0")];
        let opts = EndpointOptions { qps: 4, time_scale: plan.topology.time_scale, ..Default::default() };
        let line = host_link_rate_bps(&plan, opts.time_scale);
        let plain = plan_qps(&plan, &transfers, &opts);
        assert_eq!(plain.len(), 12);
        assert!(plain.iter().all(|q| q.rate_bps == line / 4));
        let shape = StepShape { qps: vec![2, 8, 1], nic_rate_bps: [(h("z0r0h0"), line / 4)].into() };
        let qps = plan_qps_shaped(&plan, &transfers, &shape, &opts);
        let of = |f: usize| qps.iter().filter(|q| q.flow == f).collect::<Vec<_>>();
        assert_eq!((of(0).len(), of(1).len(), of(2).len()), (2, 8, 1));
        assert_eq!(of(0).iter().map(|q| q.bytes).sum::<u64>(), 1 << 20);
        // z0r0h0 sends two transfers under a NIC of a quarter of the line: an eighth each.
        assert_eq!(shape.rate_of(&plan, &transfers, 0, &opts), line / 8);
        assert!(of(0).iter().all(|q| q.rate_bps == line / 8 / 2));
        assert!(of(1).iter().all(|q| q.rate_bps == line / 8 / 8));
        assert_eq!(shape.rate_of(&plan, &transfers, 2, &opts), line, "the healthy host sends at the line rate");
        // A NIC faster than the run's rate changes nothing.
        let fast = StepShape { nic_rate_bps: [(h("z0r0h0"), 10 * line)].into(), ..Default::default() };
        assert_eq!(fast.rate_of(&plan, &transfers, 0, &opts), line);
    }

    /// The default rate is the host link's modelled rate at the topology's time scale: slowed
    /// twice as much, a sender sends half as fast (a fixed default would outrun the link).
    #[test]
    fn the_default_rate_follows_the_topology_and_its_time_scale() {
        let mut topology = crate::model::topology::Topology::default_topology();
        let rate_at = |topology: &crate::model::topology::Topology| {
            let plan = Plan::new(topology);
            let opts = EndpointOptions { time_scale: topology.time_scale, ..Default::default() };
            transfer_rate_bps(&plan, &opts)
        };
        let default = rate_at(&topology);
        assert_eq!(default, topology.modelled_rate_bps(topology.tiers.host.rate_gbps));
        topology.time_scale *= 2;
        assert_eq!(rate_at(&topology), default / 2);
        topology.tiers.host.rate_gbps /= 4.0;
        assert_eq!(rate_at(&topology), default / 8);
        let set = EndpointOptions { rate_bps: 12_345, ..Default::default() };
        assert_eq!(transfer_rate_bps(&Plan::new(&topology), &set), 12_345);
    }

    /// One end of a QP between two test addresses, both ends on UDP port 0xC011.
    fn test_end(local_qp: u32, remote_qp: u32, src: [u8; 4], dst: [u8; 4]) -> Connection {
        let ip = IpPair::V4 { src: src.into(), dst: dst.into() };
        Connection { local_qp, remote_qp, pkey: DEFAULT_PKEY, ip, udp_src_port: 0xC011 }
    }

    /// A data packet whose ICRC fails is dropped and counted at the receiver, a good one taken.
    #[test]
    fn a_receiver_counts_the_corrupt_packets_it_drops() {
        let (a, b) = ([198, 18, 0, 2], [198, 18, 0, 6]);
        let mut req = Requester::new(RequesterConfig::new(test_end(0x11, 0x12, a, b)));
        req.post_write(0, 100).unwrap();
        let good = req.poll_transmit(0).expect("a WRITE ONLY");
        let mut bad = good.clone();
        bad[BTH_LEN + 20] ^= 1;
        let mut cc = fabric_roce::cc::none::PfcOnly;
        let responder = Responder::new(ResponderConfig::new(test_end(0x12, 0x11, b, a)));
        let dst = SocketAddrV4::new(a.into(), 4791);
        let qp = ReceiverQp::new(responder, 100, &mut cc);
        let mut r = ReceiverEntry { idx: 0, qp, dst, sport: 0xC011, icrc_errors: 0 };
        assert!(!r.accepts(0xC011, &bad));
        assert!(r.accepts(0xC011, &good));
        assert_eq!(r.icrc_errors, 1);
    }

    /// The receiver's ICRC errors reach the flow's count, whichever host thread reports first.
    #[test]
    fn receiver_icrc_errors_reach_the_flow_in_either_order() {
        let plan = Plan::new(&crate::model::topology::Topology::default_topology());
        let h = |n: &str| plan.node_by_name(n).unwrap();
        let transfer = HostTransfer { src: h("z0r0h0"), dst: h("z0r1h0"), bytes: 1 << 20 };
        let qps = plan_qps(&plan, &[transfer], &EndpointOptions::default());
        let received = QpOutcome { icrc_errors_received: 2, bytes_received: 1 << 20, ..Default::default() };
        let sent = QpOutcome { icrc_errors: 1, completed_ns: 5, ..Default::default() };
        // The responder's thread first: the requester's outcome keeps its counts.
        let merged = sent.clone().with_receiving_side(&received);
        assert_eq!((merged.icrc_errors, merged.icrc_errors_received, merged.bytes_received), (1, 2, 1 << 20));
        // The requester's thread first: an empty receiving side changes nothing of the sender's.
        let early = sent.with_receiving_side(&QpOutcome::default());
        assert_eq!((early.icrc_errors, early.completed_ns), (1, 5));
        let flow = flow_result(&plan, 0, &transfer, &qps, &HashMap::from([(0, merged)]), 1);
        assert_eq!(flow.icrc_errors, 3, "the sender's 1 and the receiver's 2");
    }
}
