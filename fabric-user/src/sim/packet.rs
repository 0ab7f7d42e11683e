//! `fabric sim --model packet`: the same cases as the flow model, on the packet-level twin
//! (`fabric-twin`): switches that decide with `fabric-common`'s code over the controller's
//! groups, endpoints that are `fabric-roce`'s QPs under the chosen congestion control.
//!
//! What comes from here, so that the twin sees exactly what `fabric run` would build:
//! - the fabric: the [`Plan`](crate::model::plan::Plan)'s nodes, ports and link rates, each
//!   switch's [`SwitchConfig`](fabric_common::config::SwitchConfig) and its tier's
//!   [`Congestion::qos_config`](crate::model::topology::Congestion::qos_config), and the
//!   routes and groups of [`SimFabric`] (TE entries included);
//! - the QPs: [`plan_qps`] (QP numbers, UDP source ports, striping), the engine's
//!   [`first_psn`] and pacer burst, and the packets the switches parse
//!   ([`route::packet`]).
//!
//! Not from the topology: the propagation delay of every link (`--link-delay-ns`), since a
//! testbed of veth pairs has none to state. Rates are the topology's, unscaled (no time scale:
//! the twin runs in modelled time).
use std::sync::{
    Mutex,
    atomic::{AtomicUsize, Ordering},
};

use anyhow::{Context as _, Result, ensure};
use fabric_roce::{cts::CtsConfig, segment::PathMtu};
pub use fabric_twin::switch::QueueModel;
use fabric_twin::{
    Change, Scheduled, Twin,
    net::{Network, NodeKind, NodeSpec, PortSpec, Routing, SwitchSpec},
    report::StepReport,
    workload::{CcChoice, EndpointConfig, QpSpec},
};

use super::{MemberLoad, PacketStats, SimOptions, SimResult, StepTimes, install_te, steps_of};
use crate::{
    endpoint::engine::{first_psn, pacer_burst_bytes, plan_qps},
    endpoint::{CcMode, EndpointOptions},
    forwarding::{fabric::SimFabric, flows::step_flows, route},
    model::plan::Role,
    model::workload::HostTransfer,
};

/// The switch tiers, in the order the twin reports them.
const TIERS: [Role; 3] = [Role::Rtsw, Role::Ctsw, Role::Atsw];

/// [`SimFabric`]'s routes and groups, as the twin asks for them.
pub struct SimRoutes<'f>(pub &'f SimFabric);

impl Routing for SimRoutes<'_> {
    #[inline]
    fn group_of(&self, switch: usize, dst_host: usize) -> Option<u32> {
        self.0.group_of(switch, dst_host)
    }

    #[inline]
    fn members(&self, switch: usize, group: u32) -> &[usize] {
        self.0.members(switch, group)
    }

    fn te_entry(&self, switch: usize, key: &fabric_common::te::TeKey) -> Option<fabric_common::te::TeEntry> {
        self.0.te.get(&(switch, *key)).copied()
    }

    fn member_slots(&self) -> usize {
        self.0.slot_count()
    }

    #[inline]
    fn member_slot(&self, switch: usize, group: u32, member: u32) -> usize {
        self.0.slot(switch, group, member)
    }
}

/// The twin of `net` (built from `fabric`) for endpoints set up as `cfg` says, as `p` asks:
/// RED seeded from its seed, its switches' queue model, and the fabric's lossy ports lossy.
pub fn twin_of<'n, R: Routing>(
    net: &'n Network<R>,
    fabric: &SimFabric,
    cfg: EndpointConfig,
    p: &PacketOptions,
) -> Twin<'n, R> {
    let mut twin = Twin::new(net, cfg, p.seed);
    twin.set_queue_model(p.queues);
    apply_loss(&mut twin, fabric, p.seed);
    twin
}

/// Makes the fabric's lossy switch ports ([`SimFabric::loss`]) lossy in `twin`, each port's
/// draws seeded from `seed` and its end of the link, as `fabric link degrade --seed` seeds them.
fn apply_loss<R: Routing>(twin: &mut Twin<'_, R>, fabric: &SimFabric, seed: u64) {
    for &(node, port, ppm) in &fabric.loss {
        let link = fabric.plan.nodes[node].ports[port].link;
        let end = u64::from(fabric.plan.links[link].a != node);
        let port_seed = fabric_common::fault::end_seed(seed, link as u64, end);
        twin.set_loss(node, port, fabric_common::fault::PortLoss::new(ppm, port_seed));
    }
}

/// The twin's description of `fabric`, every link with `delay_ns` of propagation.
pub fn network(fabric: &SimFabric, delay_ns: u64) -> Result<Network<SimRoutes<'_>>> {
    let plan = &fabric.plan;
    let congestion = &plan.topology.congestion;
    let nodes = plan
        .nodes
        .iter()
        .enumerate()
        .map(|(n, node)| {
            let kind = match node.role {
                Role::Host => NodeKind::Host,
                role => {
                    let qos = match role {
                        Role::Rtsw => &congestion.rtsw,
                        Role::Ctsw => &congestion.ctsw,
                        _ => &congestion.atsw,
                    };
                    NodeKind::Switch(SwitchSpec {
                        // The twin runs in modelled time: its flowlet gap is the modelled one.
                        config: fabric.configs[n].with_flowlet_gap(plan.topology.flowlet_gap_modelled_ns()),
                        qos: congestion.qos_config(qos),
                        pause_quanta: congestion.pause_quanta,
                        tier: TIERS.iter().position(|t| *t == role).expect("a switch tier"),
                    })
                }
            };
            let ports = node
                .ports
                .iter()
                .map(|p| PortSpec {
                    peer_node: p.peer_node,
                    peer_port: p.peer_port,
                    rate_bps: (plan.links[p.link].rate_gbps * 1e9) as u64,
                    delay_ns,
                })
                .collect();
            NodeSpec { name: node.name.clone(), kind, ports }
        })
        .collect();
    let tiers = TIERS.iter().map(|r| r.as_str().to_string()).collect();
    Network::new(nodes, tiers, SimRoutes(fabric)).context("the topology, as the twin reads it")
}

/// The endpoints of `fabric run` with options `o`, at the modelled (unscaled) rates: a set
/// `rate_bps` is taken in modelled time.
pub fn endpoint_config(o: &EndpointOptions) -> Result<EndpointConfig> {
    let mtu = PathMtu::from_bytes(o.path_mtu).with_context(|| format!("--path-mtu {}", o.path_mtu))?;
    let cc = match o.cc {
        CcMode::None => CcChoice::None,
        CcMode::Dcqcn => {
            o.dcqcn.validate()?;
            CcChoice::Dcqcn(o.dcqcn)
        }
        CcMode::Cts => {
            let (channels, buffer_bytes) = (o.cts_channels, o.cts_buffer_bytes);
            let cts = CtsConfig { channels, buffer_bytes, resend_after_ns: o.retransmit_timeout_ns };
            // The endpoints' own check: the twin runs the same receiver, which refuses the rest.
            cts.validate()?;
            CcChoice::Cts(cts)
        }
    };
    Ok(EndpointConfig {
        ack_every: o.ack_every,
        window_packets: o.window,
        retransmit_timeout_ns: o.retransmit_timeout_ns,
        // A set rate is a transfer's, shared by its QPs as the engine shares it.
        qp_rate_bps: if o.rate_bps == 0 { 0 } else { crate::endpoint::engine::per_qp_rate_bps(o.rate_bps, o.qps) },
        burst_bytes: pacer_burst_bytes(o.path_mtu),
        dscp: o.dscp,
        ecn: o.ecn,
        transport: o.transport,
        ..EndpointConfig::new(mtu, cc)
    })
}

/// The QPs of one step, as the engine would open them.
pub fn qp_specs(fabric: &SimFabric, transfers: &[HostTransfer], o: &EndpointOptions) -> Vec<QpSpec> {
    let flows = step_flows(&fabric.plan, transfers, o);
    let qps = plan_qps(&fabric.plan, transfers, o);
    // `step_flows` makes a data flow and an ACK flow per QP that carries bytes, in QP order.
    qps.iter()
        .filter(|q| q.bytes > 0)
        .zip(flows.chunks_exact(2))
        .map(|(q, f)| QpSpec {
            src: transfers[q.flow].src,
            dst: transfers[q.flow].dst,
            bytes: q.bytes,
            req_qpn: q.req_qpn,
            resp_qpn: q.resp_qpn,
            sport: q.sport,
            first_psn: first_psn(q).value(),
            data_packet: route::packet(fabric, &f[0]),
            ack_packet: route::packet(fabric, &f[1]),
        })
        .collect()
}

/// Refuses a step with a flow that has no route on the fabric as it stands (a host cut off by
/// `--down`), as the flow model does; the twin would drop its packets until the deadline.
fn check_routes(fabric: &SimFabric, transfers: &[HostTransfer], o: &EndpointOptions) -> Result<()> {
    for f in step_flows(&fabric.plan, transfers, o) {
        route::trace(fabric, &f, |_| {}, |_| {})?;
    }
    Ok(())
}

/// Refuses a step whose QPs would take the twin over `limit` bytes of memory (`--memory-limit-gib`).
pub fn check_memory<R: Routing>(net: &Network<R>, cfg: &EndpointConfig, qps: &[QpSpec], limit: u64) -> Result<()> {
    let estimate = Twin::memory_estimate(net, cfg, qps);
    ensure!(
        estimate <= limit,
        "the twin would need up to {:.2} GiB for {} QPs, more than the limit of {:.2} GiB (--memory-limit-gib)",
        estimate as f64 / f64::from(1 << 30),
        qps.len(),
        limit as f64 / f64::from(1 << 30)
    );
    Ok(())
}

/// Adds a step's member counters, `repeat` times, to `load`.
pub fn add_member_load(r: &StepReport, repeat: u64, load: &mut MemberLoad) {
    for (slot, (p, b)) in r.member_packets.iter().zip(&r.member_bytes).enumerate() {
        load.packets[slot] += repeat * p;
        load.bytes[slot] += repeat * b;
    }
}

/// Runs independent cases at once, one per core (up to the number of cases), each thread on
/// its own copy of the fabric; the results come back in the order of `cases`. The memory
/// limit holds per case.
pub fn simulate_packet_cases(fabric: &SimFabric, cases: &[SimOptions], p: &PacketOptions) -> Result<Vec<SimResult>> {
    Ok(simulate_packet_cases_with_load(fabric, cases, p)?.into_iter().map(|(r, _)| r).collect())
}

/// [`simulate_packet_cases`], each result with the bytes every ECMP member carried over one
/// iteration (an experiment reads one uplink's share from them).
pub fn simulate_packet_cases_with_load(
    fabric: &SimFabric,
    cases: &[SimOptions],
    p: &PacketOptions,
) -> Result<Vec<(SimResult, MemberLoad)>> {
    let jobs: Vec<PacketJob<'_>> =
        cases.iter().map(|o| PacketJob { fabric, options: o.clone(), stall: None }).collect();
    simulate_packet_jobs_with_load(&jobs, p)
}

/// One case of [`simulate_packet_jobs`]: its own fabric (say, its own ECN thresholds), its
/// options, and a stalled receiver if any.
#[derive(Clone)]
pub struct PacketJob<'f> {
    pub fabric: &'f SimFabric,
    pub options: SimOptions,
    pub stall: Option<Stall>,
}

/// [`simulate_packet_cases`] for cases on fabrics of their own: one per core, each case on a
/// copy of its fabric; the results in the order of `jobs`.
pub fn simulate_packet_jobs(jobs: &[PacketJob<'_>], p: &PacketOptions) -> Result<Vec<SimResult>> {
    Ok(simulate_packet_jobs_with_load(jobs, p)?.into_iter().map(|(r, _)| r).collect())
}

/// [`simulate_packet_jobs`], each result with its member loads over one iteration.
pub fn simulate_packet_jobs_with_load(
    jobs: &[PacketJob<'_>],
    p: &PacketOptions,
) -> Result<Vec<(SimResult, MemberLoad)>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len()).max(1);
    let next = AtomicUsize::new(0);
    type Done = Option<Result<(SimResult, MemberLoad)>>;
    let done: Mutex<Vec<Done>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let mut fabric = job.fabric.clone();
                    let r = simulate_packet_run_with(&mut fabric, &job.options, p, false, job.stall)
                        .map(|r| (r.result, r.load));
                    done.lock().expect("no thread panics holding it")[i] = Some(r);
                }
            });
        }
    });
    let done = done.into_inner().expect("no thread panics holding it");
    done.into_iter().map(|r| r.expect("every case ran")).collect()
}

/// The twin's settings beyond the case's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketOptions {
    /// Propagation delay of every link.
    pub link_delay_ns: u64,
    /// A step not finished by this modelled time is reported unfinished.
    pub deadline_ns: u64,
    /// Seeds the switches' RED draws.
    pub seed: u64,
    /// A case whose estimated memory exceeds this is refused before it starts.
    pub memory_limit_bytes: u64,
    /// The switches' egress queues: held (the twin's own), or the XDP testbed's phantom
    /// queues, to measure what that model changes ([`QueueModel`]).
    pub queues: QueueModel,
}

/// `fabric sim --model packet`'s defaults: links of 1 µs, a 10 s deadline per step, RED seed 1,
/// an 8 GiB memory limit, held queues.
pub const PACKET_DEFAULTS: PacketOptions = PacketOptions {
    link_delay_ns: 1_000,
    deadline_ns: 10_000_000_000,
    seed: 1,
    memory_limit_bytes: 8 << 30,
    queues: QueueModel::Held,
};

/// `--queues`: `held` or `phantom` ([`QueueModel`]).
pub fn parse_queue_model(s: &str) -> Result<QueueModel, String> {
    [QueueModel::Held, QueueModel::Phantom]
        .into_iter()
        .find(|m| m.name() == s)
        .ok_or_else(|| format!("{s:?} is not a queue model: held (the twin's) or phantom (the XDP testbed's)"))
}

/// Simulates one case on the twin: each distinct step once (a step starts on an idle fabric,
/// after the previous step's barrier), its results counted as often as the step repeats.
pub fn simulate_packet(fabric: &mut SimFabric, o: &SimOptions, p: &PacketOptions) -> Result<SimResult> {
    simulate_packet_with_load(fabric, o, p).map(|(r, _)| r)
}

/// [`simulate_packet`], with the packets and bytes every ECMP member carried over one iteration
/// (what the XDP member counters count on the testbed).
pub fn simulate_packet_with_load(
    fabric: &mut SimFabric,
    o: &SimOptions,
    p: &PacketOptions,
) -> Result<(SimResult, MemberLoad)> {
    simulate_packet_run(fabric, o, p, false).map(|r| (r.result, r.load))
}

/// One case on the twin with what it is made of: the job record and the run result of
/// `--job-record` are built from it.
pub struct PacketRun {
    pub result: SimResult,
    pub load: MemberLoad,
    /// The ranks' hosts.
    pub hosts: Vec<crate::model::plan::NodeId>,
    /// Each distinct step (kept only when asked for).
    pub steps: Vec<RunStep>,
}

/// A distinct step: its transfers, its QPs, what the twin reported, how often it repeats.
pub struct RunStep {
    pub transfers: Vec<HostTransfer>,
    pub qps: Vec<QpSpec>,
    pub report: StepReport,
    pub repeat: usize,
}

/// A receiver that stops reading: from the start of each step its NIC pauses its rack switch's
/// port toward it in the data class (refreshing the pause at half its time, as a switch agent
/// does), and resumes it `duration_ns` later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// The rank whose host stalls.
    pub rank: usize,
    pub duration_ns: u64,
}

impl Stall {
    /// The PFC frames the stalled host sends: XOFF of the topology's quanta every half pause
    /// time, then a resume at the end.
    fn frames<'n, R>(&self, fabric: &SimFabric, host: usize, o: &SimOptions) -> Result<Vec<Scheduled<'n, R>>> {
        let plan = &fabric.plan;
        let node = &plan.nodes[host];
        ensure!(node.ports.len() == 1, "stall: {} is not a host with one port", node.name);
        let rate = (plan.links[node.ports[0].link].rate_gbps * 1e9) as u64;
        let quanta = plan.topology.congestion.pause_quanta;
        let every = (fabric_common::pfc::quanta_to_ns(quanta, rate) / 2).max(1);
        let class = usize::from(o.endpoint.dscp >> 3);
        let frame = |at_ns, quanta| Scheduled { at_ns, change: Change::Pfc { node: host, port: 0, class, quanta } };
        let mut out: Vec<_> = (0..self.duration_ns).step_by(every as usize).map(|t| frame(t, quanta)).collect();
        out.push(frame(self.duration_ns, 0));
        Ok(out)
    }
}

/// [`simulate_packet`], keeping every distinct step's report if `keep_steps`.
pub fn simulate_packet_run(
    fabric: &mut SimFabric,
    o: &SimOptions,
    p: &PacketOptions,
    keep_steps: bool,
) -> Result<PacketRun> {
    simulate_packet_run_with(fabric, o, p, keep_steps, None)
}

/// [`simulate_packet_run`], with a receiver stalled in every step.
pub fn simulate_packet_run_with(
    fabric: &mut SimFabric,
    o: &SimOptions,
    p: &PacketOptions,
    keep_steps: bool,
    stall: Option<Stall>,
) -> Result<PacketRun> {
    let start = std::time::Instant::now();
    fabric.set_hash(o.hash, o.hash_seed);
    let (hosts, steps) = steps_of(fabric, o)?;
    install_te(fabric, o, &hosts, &steps)?;
    let fabric = &*fabric;
    let cfg = endpoint_config(&o.endpoint)?;
    let net = network(fabric, p.link_delay_ns)?;
    // Every step's QPs, before any runs: a case too large is refused whole.
    let mut step_qps = Vec::with_capacity(steps.len());
    let mut step_transfers = Vec::with_capacity(steps.len());
    for (i, (step, _)) in steps.iter().enumerate() {
        let transfers = crate::model::workload::on_hosts(step, &hosts);
        check_routes(fabric, &transfers, &o.endpoint).with_context(|| format!("step {i}"))?;
        let qps = qp_specs(fabric, &transfers, &o.endpoint);
        check_memory(&net, &cfg, &qps, p.memory_limit_bytes).with_context(|| format!("step {i}"))?;
        step_qps.push(qps);
        step_transfers.push(transfers);
    }
    let changes = match stall {
        Some(st) => {
            let host = *hosts.get(st.rank).with_context(|| format!("stall: no rank {} of {}", st.rank, hosts.len()))?;
            st.frames(fabric, host, o)?
        }
        None => Vec::new(),
    };
    let mut twin = twin_of(&net, fabric, cfg, p);
    let mut load = MemberLoad::new(fabric);
    let mut stats = PacketStats {
        cc: o.endpoint.cc.as_str(),
        transport: o.endpoint.transport.name(),
        link_delay_ns: p.link_delay_ns,
        finished: true,
        ..Default::default()
    };
    let (mut step_s, mut completion_s, mut step_count, mut qps_per_step) = (Vec::new(), 0.0, 0, 0);
    let mut kept = Vec::new();
    for (i, (((_, repeat), qps), transfers)) in steps.iter().zip(&step_qps).zip(step_transfers).enumerate() {
        qps_per_step = qps_per_step.max(qps.len());
        let r = twin.run_step_with(qps, p.deadline_ns, &changes).with_context(|| format!("step {i}"))?;
        add_member_load(&r, *repeat as u64, &mut load);
        stats.add_step(&r, *repeat as u64);
        let s = r.completion_ns as f64 * 1e-9;
        step_s.push(s);
        completion_s += s * *repeat as f64;
        step_count += repeat;
        if keep_steps {
            kept.push(RunStep { transfers, qps: qps.clone(), report: r, repeat: *repeat });
        }
    }
    let times = StepTimes { step_s, completion_s, steps: step_count, qps_per_step };
    let mut r = SimResult::of_case(fabric, o, hosts.len(), &load, times, "packet");
    r.case = format!("{} cc={}", r.case, o.endpoint.cc.as_str());
    r.wall_s = start.elapsed().as_secs_f64();
    r.packet = Some(stats);
    Ok(PacketRun { result: r, load, hosts, steps: kept })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        endpoint::SportPolicy,
        model::{placement::Placement, plan::Plan, topology::Topology, workload::Collective},
        sim::{cli::build_fabric, predict_member_load},
    };
    use fabric_common::config::HashMode;

    fn case(collective: Collective, hash: HashMode, qps: u32, cc: CcMode) -> SimOptions {
        SimOptions {
            collective,
            ranks: None,
            message_bytes: 1 << 20,
            placement: Placement::Contiguous,
            seed: 1,
            hash,
            hash_seed: None,
            endpoint: EndpointOptions { qps, sport: SportPolicy::PerQp, cc, ..Default::default() },
        }
    }

    const PACKET: PacketOptions = PacketOptions {
        link_delay_ns: 1_000,
        deadline_ns: 1_000_000_000,
        seed: 1,
        memory_limit_bytes: 1 << 33,
        queues: QueueModel::Held,
    };

    #[test]
    fn member_counters_equal_the_flow_models_prediction_when_nothing_is_lost() {
        let fabric = SimFabric::from_controller(&Plan::new(&Topology::default_topology()), &Default::default());
        for (collective, hash, qps) in [
            (Collective::Permutation, HashMode::FiveTuple, 1),
            (Collective::Allreduce, HashMode::Eecmp, 4),
            (Collective::Alltoall, HashMode::Pin, 2),
        ] {
            let o = case(collective, hash, qps, CcMode::None);
            let mut f = fabric.clone();
            let r = simulate_packet(&mut f, &o, &PACKET).unwrap();
            let p = r.packet.as_ref().unwrap();
            assert!(p.finished, "{}", r.case);
            assert_eq!((p.drops, p.retransmissions), (0, 0), "{}: lossless", r.case);
            // The twin's counters, one iteration: rebuild them the way the run does.
            let predicted = predict_member_load(&fabric, &o, 1).unwrap();
            let twin_load = {
                let mut f = fabric.clone();
                f.set_hash(o.hash, o.hash_seed);
                let (hosts, steps) = steps_of(&f, &o).unwrap();
                let net = network(&f, PACKET.link_delay_ns).unwrap();
                let mut twin = Twin::new(&net, endpoint_config(&o.endpoint).unwrap(), 1);
                let mut load = MemberLoad::new(&f);
                for (step, repeat) in &steps {
                    let t = crate::model::workload::on_hosts(step, &hosts);
                    let rep = twin.run_step(&qp_specs(&f, &t, &o.endpoint), u64::MAX).unwrap();
                    add_member_load(&rep, *repeat as u64, &mut load);
                }
                load
            };
            assert_eq!(twin_load, predicted, "{}: packets and bytes per ECMP member", r.case);
        }
    }

    /// A set rate paces each QP at its share, as the engine does, DCQCN's QPs too (their rate
    /// starts and recovers there); none paces at the line.
    #[test]
    fn a_set_rate_paces_the_qps_at_their_share() {
        let fabric = build_fabric(None, None).unwrap();
        for cc in [CcMode::None, CcMode::Dcqcn] {
            // One transfer: nothing but its own pacing and link holds it back.
            let line = SimOptions {
                ranks: Some(2),
                message_bytes: 8 << 20,
                ..case(Collective::Incast, HashMode::Eecmp, 2, cc)
            };
            assert_eq!(endpoint_config(&line.endpoint).unwrap().qp_rate_bps, 0);
            let mut slow = line.clone();
            slow.endpoint.rate_bps = 100_000_000_000;
            assert_eq!(endpoint_config(&slow.endpoint).unwrap().qp_rate_bps, 50_000_000_000);
            let [at_line, at_quarter] = [&line, &slow].map(|o| {
                let mut f = fabric.clone();
                let run = simulate_packet_run(&mut f, o, &PACKET, true).unwrap();
                let (_, result) = crate::sim::record::records(&f, o, &run, "rate");
                (run.result.completion_s, result.flows[0].intended_bps)
            });
            let ratio = at_quarter.0 / at_line.0;
            assert!((3.7..4.1).contains(&ratio), "{cc:?}: a quarter of the line took {ratio:.2}x as long");
            // The records say what the endpoints were asked for.
            assert_eq!((at_line.1, at_quarter.1), (400_000_000_000, 100_000_000_000), "{cc:?}");
        }
    }

    #[test]
    fn cases_run_in_parallel_come_back_in_order_as_run_alone() {
        let fabric = build_fabric(None, None).unwrap();
        let cases: Vec<SimOptions> =
            HashMode::ALL.iter().map(|&h| case(Collective::Permutation, h, 2, CcMode::Dcqcn)).collect();
        let together = simulate_packet_cases(&fabric, &cases, &PACKET).unwrap();
        for (o, r) in cases.iter().zip(&together) {
            let alone = simulate_packet(&mut fabric.clone(), o, &PACKET).unwrap();
            assert_eq!(r.hash, o.hash.as_str());
            assert_eq!((r.completion_s, &r.step_s), (alone.completion_s, &alone.step_s), "{}", r.case);
            let (a, b) = (r.packet.as_ref().unwrap(), alone.packet.as_ref().unwrap());
            assert_eq!((a.events, a.ecn_marks, a.cnps), (b.events, b.ecn_marks, b.cnps), "deterministic: {}", r.case);
        }
    }

    #[test]
    fn a_case_over_the_memory_limit_is_refused_with_its_estimate() {
        let mut fabric = build_fabric(None, None).unwrap();
        let o = case(Collective::Alltoall, HashMode::Eecmp, 8, CcMode::None);
        let tight = PacketOptions { memory_limit_bytes: 1 << 20, ..PACKET };
        let err = format!("{:#}", simulate_packet(&mut fabric, &o, &tight).unwrap_err());
        assert!(err.contains("GiB for 448 QPs") && err.contains("--memory-limit-gib"), "{err}");
        assert!(simulate_packet(&mut fabric, &o, &PACKET).unwrap().packet.unwrap().finished);
    }

    #[test]
    fn incast_with_pfc_pauses_and_loses_nothing_on_every_congestion_control() {
        let fabric = build_fabric(None, None).unwrap();
        for cc in [CcMode::None, CcMode::Dcqcn, CcMode::Cts] {
            let mut f = fabric.clone();
            let r = simulate_packet(&mut f, &case(Collective::Incast, HashMode::Eecmp, 1, cc), &PACKET).unwrap();
            let p = r.packet.unwrap();
            assert!(p.finished, "{cc:?}");
            assert_eq!(p.drops, 0, "{cc:?}: the lossless class never drops");
            let pfc: u64 = p.tiers.iter().map(|t| t.pauses_sent).sum();
            match cc {
                // Seven senders at line rate into one port: the RTSW pauses them.
                CcMode::None => {
                    assert!(pfc > 0 && p.ecn_marks > 0);
                    let hosts = fabric_twin::report::sum_pairs(&p.paused, "rtsw", "host");
                    assert!(hosts.paused_ns > 0 && hosts.longest_pause_ns > 0, "{:?}", p.paused);
                    assert!(hosts.paused_share > 0.0 && hosts.paused_share < 1.0, "{:?}", p.paused);
                }
                CcMode::Dcqcn => assert!(p.cnps > 0, "marks come back as CNPs"),
                // Receiver-driven: at most 4 chunks of 256 KiB in flight toward the receiver.
                CcMode::Cts => assert!(p.tiers[0].max_depth_bytes <= 4 * 256 * 1024 + 64 * 1024),
            }
        }
    }

    #[test]
    fn the_queue_model_is_named_on_the_command_line_and_a_wrong_name_says_the_choices() {
        assert_eq!(parse_queue_model("held"), Ok(QueueModel::Held));
        assert_eq!(parse_queue_model("phantom"), Ok(QueueModel::Phantom));
        let err = parse_queue_model("fifo").unwrap_err();
        assert!(err.contains("\"fifo\"") && err.contains("held") && err.contains("phantom"), "{err}");
    }
}
