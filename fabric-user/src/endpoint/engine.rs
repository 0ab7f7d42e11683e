//! Runs one step of transfers between hosts: per host a thread in its namespace, sockets, and the
//! requesters and responders of every QP that starts or ends there.
use std::{
    collections::HashMap,
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    os::fd::AsRawFd,
    sync::atomic::{AtomicUsize, Ordering},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use super::{EndpointOptions, SportPolicy, fixed_udp_sport, rxe_udp_sport, socket};
use crate::{
    netns,
    plan::{NodeId, Plan},
    roce::{
        icrc::IpPair,
        pacer::PacerConfig,
        psn::Psn,
        qp::{Connection, DEFAULT_PKEY, Requester, RequesterConfig, Responder, ResponderConfig},
        segment::PathMtu,
        wire::RocePacketRepr,
    },
};

/// One transfer of a step, between hosts.
#[derive(Clone, Copy, Debug)]
pub struct HostTransfer {
    pub src: NodeId,
    pub dst: NodeId,
    pub bytes: u64,
}

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
    /// Bytes the responders accepted (in order, once): equals `bytes` when nothing was lost.
    pub bytes_received: u64,
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

/// What happened in one step.
#[derive(Clone, Debug, Serialize)]
pub struct StepResult {
    pub duration_ns: u64,
    pub flows: Vec<FlowResult>,
}

/// One QP as planned before the host threads start.
#[derive(Clone, Copy, Debug)]
struct QpPlan {
    flow: usize,
    req_qpn: u32,
    resp_qpn: u32,
    sport: u16,
    bytes: u64,
}

fn ipv4(plan: &Plan, host: NodeId) -> Ipv4Addr {
    plan.host_ipv4(host)
}

/// The QPs of every transfer, with their numbers and ports.
fn plan_qps(plan: &Plan, transfers: &[HostTransfer], opts: &EndpointOptions) -> Vec<QpPlan> {
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
/// thread `bytes_received`.
#[derive(Clone, Copy, Debug, Default)]
struct QpOutcome {
    bytes_received: u64,
    completed_ns: u64,
    packets_sent: u64,
    retransmitted: u64,
    timeouts: u64,
    naks: u64,
    icrc_errors: u64,
}

/// Runs a step and waits for every transfer to be acknowledged in full.
pub fn run_step(plan: &Plan, transfers: &[HostTransfer], opts: &EndpointOptions) -> Result<StepResult> {
    let mtu = PathMtu::from_bytes(opts.path_mtu).with_context(|| format!("path MTU {} is not an IB MTU", opts.path_mtu))?;
    let qps = plan_qps(plan, transfers, opts);
    let mut hosts: Vec<NodeId> = transfers.iter().flat_map(|t| [t.src, t.dst]).collect();
    hosts.sort();
    hosts.dedup();
    let remaining = AtomicUsize::new(qps.iter().filter(|q| q.bytes > 0).count());
    let failed = AtomicUsize::new(0);
    let start = Instant::now();
    let outcomes: std::sync::Mutex<HashMap<usize, QpOutcome>> = Default::default();
    let per_qp_rate = opts.rate_bps / u64::from(opts.qps.max(1));
    // Nobody sends before every host has its sockets: a datagram to a port not yet open is lost
    // and costs a go-back-N round.
    let ready = std::sync::Barrier::new(hosts.len());

    std::thread::scope(|s| -> Result<()> {
        let mut handles = Vec::new();
        for &host in &hosts {
            let (qps, remaining, failed, outcomes, ready) = (&qps, &remaining, &failed, &outcomes, &ready);
            handles.push(s.spawn(move || -> Result<()> {
                let r = netns::in_named(&plan.netns(host), || {
                    host_loop(plan, host, transfers, qps, opts, mtu, per_qp_rate, start, remaining, failed, outcomes, ready)
                });
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
            let get = |i: usize| outcomes.get(&i).copied().unwrap_or_default();
            let completion_ns = mine.iter().map(|(i, _)| get(*i).completed_ns).max().unwrap_or(0);
            let sum = |g: fn(&QpOutcome) -> u64| mine.iter().map(|(i, _)| g(&get(*i))).sum::<u64>();
            FlowResult {
                src: plan.nodes[t.src].name.clone(),
                dst: plan.nodes[t.dst].name.clone(),
                bytes: t.bytes,
                qps: mine.len() as u32,
                udp_sports: mine.iter().map(|(_, q)| q.sport).collect(),
                completion_ns,
                goodput_bps: if completion_ns > 0 { t.bytes as f64 * 8e9 / completion_ns as f64 } else { 0.0 },
                intended_bps: opts.rate_bps,
                packets_sent: sum(|o| o.packets_sent),
                retransmitted: sum(|o| o.retransmitted),
                timeouts: sum(|o| o.timeouts),
                naks: sum(|o| o.naks),
                icrc_errors: sum(|o| o.icrc_errors),
                bytes_received: sum(|o| o.bytes_received),
            }
        })
        .collect();
    Ok(StepResult { duration_ns, flows })
}

/// Sockets of one host: the receive socket on 4791, and one send socket per source port.
struct HostSockets {
    rx: UdpSocket,
    tx: HashMap<u16, UdpSocket>,
}

impl HostSockets {
    fn new(addr: Ipv4Addr, sports: impl IntoIterator<Item = u16>) -> Result<Self> {
        let rx = socket::roce_socket(SocketAddrV4::new(addr, fabric_common::wire::udp::ROCEV2_PORT))?;
        let mut tx = HashMap::new();
        for p in sports {
            if let std::collections::hash_map::Entry::Vacant(e) = tx.entry(p) {
                e.insert(socket::roce_socket(SocketAddrV4::new(addr, p))?);
            }
        }
        Ok(HostSockets { rx, tx })
    }
}

#[expect(clippy::too_many_arguments, reason = "one call site; the loop's whole context")]
fn host_loop(
    plan: &Plan,
    host: NodeId,
    transfers: &[HostTransfer],
    qps: &[QpPlan],
    opts: &EndpointOptions,
    mtu: PathMtu,
    per_qp_rate: u64,
    start: Instant,
    remaining: &AtomicUsize,
    failed: &AtomicUsize,
    outcomes: &std::sync::Mutex<HashMap<usize, QpOutcome>>,
    ready: &std::sync::Barrier,
) -> Result<()> {
    let me = ipv4(plan, host);
    let now = || start.elapsed().as_nanos() as u64;
    // Requesters for QPs that start here, responders for QPs that end here, keyed by local QPN.
    let mut requesters: HashMap<u32, (usize, Requester, SocketAddrV4, QpOutcome, bool)> = HashMap::new();
    let mut responders: HashMap<u32, (Responder, SocketAddrV4, u16, usize)> = HashMap::new();
    let mut sports = Vec::new();
    for (i, q) in qps.iter().enumerate() {
        let t = &transfers[q.flow];
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
            cfg.mtu = mtu;
            cfg.window_packets = opts.window;
            cfg.retransmit_timeout_ns = opts.retransmit_timeout_ns;
            cfg.first_psn = first_psn;
            // A burst of two packets: enough to absorb scheduling jitter, small enough that the
            // rate holds over short messages.
            let burst_bytes = 2 * u64::from(opts.path_mtu + 100);
            cfg.pacer = (per_qp_rate > 0).then_some(PacerConfig { rate_bps: per_qp_rate, burst_bytes });
            let mut r = Requester::new(cfg);
            // Messages are at most 2 GiB in RoCE; split larger shares.
            let mut left = q.bytes;
            let mut id = 0;
            while left > 0 {
                let len = left.min(1 << 30) as u32;
                r.post_write(id, len).map_err(|e| anyhow::anyhow!("posting a write: {e:?}"))?;
                left -= u64::from(len);
                id += 1;
            }
            let dst = SocketAddrV4::new(peer, fabric_common::wire::udp::ROCEV2_PORT);
            requesters.insert(q.req_qpn, (i, r, dst, QpOutcome::default(), false));
            sports.push(q.sport);
        }
        if t.dst == host && q.bytes > 0 {
            let peer = ipv4(plan, t.src);
            let mut cfg = ResponderConfig::new(end(q.resp_qpn, q.req_qpn, peer));
            cfg.first_psn = first_psn;
            cfg.ack_every = opts.ack_every;
            let dst = SocketAddrV4::new(peer, fabric_common::wire::udp::ROCEV2_PORT);
            responders.insert(q.resp_qpn, (Responder::new(cfg), dst, q.sport, i));
            sports.push(q.sport);
        }
    }
    let socks = HostSockets::new(me, sports);
    ready.wait();
    let socks = socks?;
    let mut bufs = Box::new([[0u8; 4096]; socket::BATCH]);
    let mut got = Vec::with_capacity(socket::BATCH);
    let mut out: HashMap<u16, Vec<(Vec<u8>, SocketAddrV4)>> = HashMap::new();

    while remaining.load(Ordering::Relaxed) > 0 && failed.load(Ordering::Relaxed) == 0 {
        let t = now();
        if t > opts.step_timeout_ns {
            bail!("step did not finish within {} s", opts.step_timeout_ns / 1_000_000_000);
        }
        // Transmit what the pacers and windows allow.
        for (_, r, dst, _, done) in requesters.values_mut() {
            let backlog = out.get(&r.config().connection.udp_src_port).map_or(0, Vec::len);
            if *done || backlog > 4 * socket::BATCH {
                continue;
            }
            for pkt in r.poll_transmit_many(t, 32) {
                out.entry(r.config().connection.udp_src_port).or_default().push((pkt, *dst));
            }
        }
        for (sport, pkts) in out.iter_mut() {
            // A full socket buffer sends a prefix; the rest waits for the next round, in order.
            let n = socket::send_batch(&socks.tx[sport], pkts)?;
            pkts.drain(..n);
        }
        // Receive and dispatch by destination QP.
        let mut received = 0;
        loop {
            let n = socket::recv_batch(&socks.rx, &mut bufs, &mut got)?;
            if n == 0 {
                break;
            }
            received += n;
            for (i, &(len, from)) in got.iter().enumerate() {
                let payload = &bufs[i][..len];
                let Ok(pkt) = RocePacketRepr::parse(payload) else { continue };
                let qpn = pkt.bth.dest_qp;
                if let Some((r, dst, sport, _)) = responders.get_mut(&qpn) {
                    if !r.config().connection.verify_incoming(from.port(), payload) {
                        continue;
                    }
                    let replies = r.on_packet(payload, now());
                    if !replies.is_empty() {
                        let batch: Vec<(Vec<u8>, SocketAddrV4)> = replies.into_iter().map(|p| (p, *dst)).collect();
                        socket::send_batch(&socks.tx[sport], &batch)?;
                    }
                } else if let Some((idx, r, _, outcome, done)) = requesters.get_mut(&qpn) {
                    if !r.config().connection.verify_incoming(from.port(), payload) {
                        outcome.icrc_errors += 1;
                        continue;
                    }
                    let _ = r.on_packet(payload, now());
                    if let Some(f) = r.failure() {
                        bail!("QP {qpn:#x} failed: {f:?}");
                    }
                    if !*done && r.outstanding_messages() == 0 {
                        *done = true;
                        let c = r.counters();
                        *outcome = QpOutcome {
                            bytes_received: 0,
                            completed_ns: now(),
                            packets_sent: c.packets_sent,
                            retransmitted: c.packets_retransmitted,
                            timeouts: c.timeouts,
                            naks: c.naks_received,
                            icrc_errors: outcome.icrc_errors,
                        };
                        let mut all = outcomes.lock().expect("not poisoned");
                        let o = all.entry(*idx).or_default();
                        *o = QpOutcome { bytes_received: o.bytes_received, ..*outcome };
                        remaining.fetch_sub(1, Ordering::Relaxed);
                    }
                }
            }
        }
        if received == 0 {
            // Idle: sleep until a packet arrives or the next requester deadline (pacing, timer).
            let t = now();
            let wake = requesters
                .values()
                .filter(|(_, _, _, _, done)| !*done)
                .filter_map(|(_, r, ..)| r.poll_timeout(t))
                .min()
                .map_or(1_000_000, |w| w.saturating_sub(t).min(1_000_000));
            let mut pfd = libc::pollfd { fd: socks.rx.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let ts = libc::timespec { tv_sec: 0, tv_nsec: wake.max(1_000) as i64 };
            // SAFETY: one valid pollfd, a valid timespec, no signal mask.
            unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        }
    }
    if failed.load(Ordering::Relaxed) > 0 {
        bail!("another endpoint failed");
    }
    let mut all = outcomes.lock().expect("not poisoned");
    for (r, _, _, idx) in responders.values() {
        all.entry(*idx).or_default().bytes_received = r.counters().bytes_received;
    }
    Ok(())
}
