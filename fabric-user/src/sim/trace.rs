//! `fabric sim --model packet --trace FILE [--gpu-speedup X]`: a Chakra or PARAM trace (the
//! files `fabric run trace` replays on the testbed) replayed on the twin, with its compute, so
//! that a training step's time comes out.
//!
//! The model, stated:
//! - **communication**: the trace's ops matched into job-wide ops and run in the replay's own
//!   rounds ([`Job::rounds`]: an op joins the round after its dependencies' last step, and the
//!   steps of a round run at once); each round is one twin step on an idle fabric, identical
//!   rounds simulated once;
//! - **compute** (the GPU speed model): each compute node of a Chakra trace takes its traced
//!   duration divided by `--gpu-speedup` (the modelled GPU's speed over the traced one's);
//!   `compute_s` is the slowest rank's total (with `--straggler`, its rank's traced compute
//!   times its factor counts).
//! - **overlap**: a compute node starts once every op and compute node it depends on (data and
//!   control deps) finished, and a round starts once the previous round ended and every op that
//!   starts in it has the compute it waits for done, on every rank taking part. The trace's
//!   dependencies are the only order: compute nodes of a rank with no dependency between them
//!   run at once (as on separate streams), and compute overlaps whatever communication it does
//!   not depend on. `step_s` is when the last round or compute node ends. `serial_step_s`,
//!   the slowest rank's compute plus the communication (the model before overlap), is no
//!   bound either way: a data-parallel step overlaps and comes in under it, while a pipeline's
//!   critical path runs through the compute of several ranks in turn and comes out over it.
//!   PARAM traces carry no compute durations: their step is their communication.
use std::collections::HashMap;

use anyhow::{Context as _, Result, ensure};
use fabric_common::config::HashMode;
use serde::Serialize;

use super::packet::{PacketOptions, endpoint_config, network, qp_specs};
use crate::{
    endpoint::EndpointOptions,
    forwarding::fabric::SimFabric,
    model::{placement::Placement, plan::NodeId, workload::on_hosts},
    run::{
        job::Straggler,
        trace::{Job, files::load},
    },
};

/// What the trace and the twin need besides the fabric.
#[derive(Clone, Debug)]
pub struct TraceSimOptions {
    pub file: std::path::PathBuf,
    /// Ranks of a single-file (SPMD) trace.
    pub spmd_ranks: Option<usize>,
    pub placement: Placement,
    pub hash: HashMode,
    pub hash_seed: Option<u32>,
    pub endpoint: EndpointOptions,
    /// The modelled GPU's speed over the traced one's: compute takes traced / this.
    pub gpu_speedup: f64,
    /// A host whose GPU computes `factor` times slower than the others (`--straggler`).
    pub straggler: Option<Straggler>,
}

/// One training step of the trace on the twin.
#[derive(Clone, Debug, Serialize)]
pub struct TraceSimResult {
    pub file: String,
    pub format: &'static str,
    pub ranks: usize,
    pub hash: &'static str,
    pub qps: u32,
    pub cc: &'static str,
    pub ops: usize,
    pub rounds: usize,
    /// Rounds simulated (the others repeat one of them).
    pub distinct_rounds: usize,
    pub bytes: u64,
    pub gpu_speedup: f64,
    /// A host computing slower than the others (its factor applies to its rank's compute).
    pub straggler: Option<Straggler>,
    /// The busiest rank's compute as traced, and the slowest rank's as modelled (the GPU
    /// speedup applied, and a straggler's factor to its rank), seconds.
    pub traced_compute_s: f64,
    pub compute_s: f64,
    /// The rounds' modelled time, seconds.
    pub communication_s: f64,
    /// When the last round or compute node ends, compute placed between the ops by the trace's
    /// dependencies (overlapping the communication it does not wait for).
    pub step_s: f64,
    /// compute + communication: the busiest rank's compute with nothing overlapped (a
    /// pipeline's critical path, through several ranks' compute, can be longer).
    pub serial_step_s: f64,
    /// Every QP of every round completed.
    pub finished: bool,
    pub retransmissions: u64,
    pub ecn_marks: u64,
    pub pfc_frames: u64,
}

/// Replays the trace of `t` on `fabric`'s twin.
pub fn simulate_trace(fabric: &mut SimFabric, t: &TraceSimOptions, p: &PacketOptions) -> Result<TraceSimResult> {
    let input = load(&t.file, t.spmd_ranks)?;
    simulate_input(fabric, &input, t, p)
}

/// [`simulate_trace`] on a trace already read.
pub fn simulate_input(
    fabric: &mut SimFabric,
    input: &crate::run::trace::TraceInput,
    t: &TraceSimOptions,
    p: &PacketOptions,
) -> Result<TraceSimResult> {
    ensure!(t.gpu_speedup.is_finite() && t.gpu_speedup > 0.0, "--gpu-speedup: {} is not a speed ratio", t.gpu_speedup);
    let job = Job::build(input).with_context(|| format!("trace {}", t.file.display()))?;
    fabric.set_hash(t.hash, t.hash_seed);
    let hosts = t
        .placement
        .place(&fabric.plan, job.ranks)
        .with_context(|| format!("placing the trace's {} ranks", job.ranks))?;
    let steps: Vec<_> = job.ops.iter().map(|o| o.steps()).collect();
    let rounds = job.rounds();
    let round_transfers = |round: &[(usize, usize)]| -> Vec<_> {
        round.iter().flat_map(|&(op, step)| on_hosts(&steps[op][step], &hosts)).collect()
    };
    // Under TE the controller places every round's flows, weighed by their bytes, before the
    // step, as it places a collective's (`super::install_te`).
    if t.hash == HashMode::Te {
        let weighed: Vec<_> = rounds.iter().map(|round| (round_transfers(round), 1)).collect();
        super::install_te_on(fabric, t.hash, &t.endpoint, &weighed).context("placing the trace's TE entries")?;
    }
    let fabric = &*fabric;
    let net = network(fabric, p.link_delay_ns)?;
    let cfg = endpoint_config(&t.endpoint)?;
    let mut twin = super::packet::twin_of(&net, fabric, cfg, p);
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut r = TraceSimResult {
        file: t.file.display().to_string(),
        format: job.format,
        ranks: job.ranks,
        hash: t.hash.as_str(),
        qps: t.endpoint.qps,
        cc: t.endpoint.cc.as_str(),
        ops: job.ops.len(),
        rounds: rounds.len(),
        distinct_rounds: 0,
        bytes: job.ops.iter().map(|o| o.bytes_needed()).sum(),
        gpu_speedup: t.gpu_speedup,
        straggler: t.straggler.clone(),
        traced_compute_s: 0.0,
        compute_s: 0.0,
        communication_s: 0.0,
        step_s: 0.0,
        serial_step_s: 0.0,
        finished: true,
        retransmissions: 0,
        ecn_marks: 0,
        pfc_frames: 0,
    };
    let mut comm_ns = 0u64;
    let mut round_ns = Vec::with_capacity(rounds.len());
    for (i, round) in rounds.iter().enumerate() {
        let transfers = &round_transfers(round);
        let key = format!("{transfers:?}");
        if let Some(&ns) = seen.get(&key) {
            comm_ns += ns;
            round_ns.push(ns);
            continue;
        }
        let qps = qp_specs(fabric, transfers, &t.endpoint);
        super::packet::check_memory(&net, &cfg, &qps, p.memory_limit_bytes).with_context(|| format!("round {i}"))?;
        let s = twin.run_step(&qps, p.deadline_ns).with_context(|| format!("round {i}"))?;
        r.distinct_rounds += 1;
        r.finished &= s.finished;
        r.retransmissions += s.retransmitted();
        r.ecn_marks += s.tiers.iter().map(|t| t.ecn_marked).sum::<u64>();
        r.pfc_frames += s.tiers.iter().filter(|t| t.tier != "host").map(|t| t.pauses_sent).sum::<u64>();
        seen.insert(key, s.completion_ns);
        comm_ns += s.completion_ns;
        round_ns.push(s.completion_ns);
    }
    let traced_us = input.ranks.iter().map(|rank| rank.skipped_micros).max().unwrap_or(0);
    r.traced_compute_s = traced_us as f64 * 1e-6;
    let slowdown = rank_slowdown(fabric, &hosts, t.straggler.as_ref())?;
    // The slowest rank's compute: a straggler's is its traced time times its factor.
    let slowest_us =
        input.ranks.iter().zip(&slowdown).map(|(rank, f)| rank.skipped_micros as f64 * f).fold(0.0, f64::max);
    r.compute_s = slowest_us * 1e-6 / t.gpu_speedup;
    r.communication_s = comm_ns as f64 * 1e-9;
    r.serial_step_s = r.compute_s + r.communication_s;
    let overlapped = Overlap::new(&job, input, &rounds, &round_ns, t.gpu_speedup, slowdown).step_ns();
    r.step_s = overlapped as f64 * 1e-9;
    Ok(r)
}

/// Per rank, how many times slower its GPU computes: 1 everywhere but on the straggler's host
/// (a factor of 1 to 1000, as a jobs run takes it).
fn rank_slowdown(fabric: &SimFabric, hosts: &[NodeId], straggler: Option<&Straggler>) -> Result<Vec<f64>> {
    let mut slowdown = vec![1.0; hosts.len()];
    if let Some(s) = straggler {
        crate::run::jobs::check_factor(s.factor).with_context(|| format!("--straggler {}", s.host))?;
        let node =
            fabric.plan.node_by_name(&s.host).with_context(|| format!("--straggler {}: no such host", s.host))?;
        let rank = hosts
            .iter()
            .position(|&h| h == node)
            .with_context(|| format!("--straggler {}: the trace's ranks are not placed on it", s.host))?;
        slowdown[rank] = s.factor;
    }
    Ok(slowdown)
}

/// The step's timeline with compute placed between the ops (see the module's model): the end
/// of every round, op and compute node, each worked out once from what it waits for.
struct Overlap<'a> {
    job: &'a Job,
    input: &'a crate::run::trace::TraceInput,
    round_ns: &'a [u64],
    speedup: f64,
    /// Per rank: its compute's slowdown (a straggler's factor, else 1).
    slowdown: Vec<f64>,
    /// Per job op: its first and last round (`None`: no steps, done once ready).
    span: Vec<Option<(usize, usize)>>,
    /// Per rank, per rank op: the job op it is part of.
    job_op: Vec<Vec<usize>>,
    /// Per job op: the (rank, compute node) it waits for.
    op_compute: Vec<Vec<(usize, usize)>>,
    /// Per round: the job ops that start in it.
    starting: Vec<Vec<usize>>,
    round_end: Vec<Option<u64>>,
    op_end: Vec<Option<u64>>,
    compute_end: Vec<Vec<Option<u64>>>,
}

impl<'a> Overlap<'a> {
    fn new(
        job: &'a Job,
        input: &'a crate::run::trace::TraceInput,
        rounds: &[Vec<(usize, usize)>],
        round_ns: &'a [u64],
        speedup: f64,
        slowdown: Vec<f64>,
    ) -> Self {
        let mut span: Vec<Option<(usize, usize)>> = vec![None; job.ops.len()];
        let mut starting = vec![Vec::new(); rounds.len()];
        for (k, round) in rounds.iter().enumerate() {
            for &(o, step) in round {
                if step == 0 {
                    starting[k].push(o);
                }
                span[o] = Some(span[o].map_or((k, k), |(first, _)| (first, k)));
            }
        }
        let mut job_op: Vec<Vec<usize>> = input.ranks.iter().map(|r| vec![usize::MAX; r.ops.len()]).collect();
        let mut op_compute = vec![Vec::new(); job.ops.len()];
        for (o, op) in job.ops.iter().enumerate() {
            for &(rank, node) in &op.nodes {
                let rt = &input.ranks[rank];
                if let Some(k) = rt.ops.iter().position(|x| x.node == node) {
                    job_op[rank][k] = o;
                    let deps = rt.op_compute_deps.get(k).map_or(&[][..], |d| &d[..]);
                    op_compute[o].extend(deps.iter().map(|&c| (rank, c)));
                }
            }
        }
        Overlap {
            job,
            input,
            round_ns,
            speedup,
            slowdown,
            span,
            job_op,
            op_compute,
            starting,
            round_end: vec![None; rounds.len()],
            op_end: vec![None; job.ops.len()],
            compute_end: input.ranks.iter().map(|r| vec![None; r.compute.len()]).collect(),
        }
    }

    /// When the last round or compute node ends.
    fn step_ns(&mut self) -> u64 {
        let rounds = self.round_end.len();
        let mut end = if rounds == 0 { 0 } else { self.end_of(Node::Round(rounds - 1)) };
        for rank in 0..self.compute_end.len() {
            for c in 0..self.compute_end[rank].len() {
                end = end.max(self.end_of(Node::Compute(rank, c)));
            }
        }
        end
    }

    /// When `root` ends, with every node it waits for worked out first, depth first on a stack
    /// of our own: a trace's chain of rounds or compute nodes can be tens of thousands long,
    /// deeper than a thread's stack would take by recursion. A node met again while its own
    /// dependencies are being worked out (a cycle, which a valid trace has not) counts as
    /// ending at 0 there.
    fn end_of(&mut self, root: Node) -> u64 {
        let mut in_progress = std::collections::HashSet::new();
        // A node comes off the stack twice: first to push what it waits for, then (with that
        // list, kept so it is built once) to be worked out from their ends.
        let mut stack: Vec<(Node, Option<Vec<Node>>)> = vec![(root, None)];
        while let Some((node, deps)) = stack.pop() {
            if self.known(node).is_some() {
                continue;
            }
            if let Some(deps) = deps {
                let t = self.end_from_deps(node, &deps);
                self.set(node, t);
                in_progress.remove(&node);
            } else if in_progress.insert(node) {
                let deps = self.deps(node);
                let pending: Vec<_> = deps.iter().filter(|&&d| self.known(d).is_none()).map(|&d| (d, None)).collect();
                stack.push((node, Some(deps)));
                stack.extend(pending);
            }
        }
        self.known(root).unwrap_or(0)
    }

    fn known(&self, node: Node) -> Option<u64> {
        match node {
            Node::Round(k) => self.round_end[k],
            Node::Op(o) => self.op_end[o],
            Node::Compute(rank, c) => self.compute_end[rank][c],
        }
    }

    fn set(&mut self, node: Node, t: u64) {
        let slot = match node {
            Node::Round(k) => &mut self.round_end[k],
            Node::Op(o) => &mut self.op_end[o],
            Node::Compute(rank, c) => &mut self.compute_end[rank][c],
        };
        *slot = Some(t);
    }

    /// What `node` waits for: a round for the round before it and for the ops that start in it
    /// to be ready; an op for its last round (or, with no steps, to be ready); a compute node
    /// for the ops and compute nodes it follows on its rank.
    fn deps(&self, node: Node) -> Vec<Node> {
        match node {
            Node::Round(k) => {
                let before = k.checked_sub(1).map(Node::Round);
                before.into_iter().chain(self.starting[k].iter().flat_map(|&o| self.ready_deps(o))).collect()
            }
            Node::Op(o) => match self.span[o] {
                Some((_, last)) => vec![Node::Round(last)],
                None => self.ready_deps(o),
            },
            Node::Compute(rank, c) => {
                let node = &self.input.ranks[rank].compute[c];
                let ops = node.op_deps.iter().map(|&k| self.job_op[rank][k]).filter(|&o| o != usize::MAX).map(Node::Op);
                ops.chain(node.compute_deps.iter().map(|&d| Node::Compute(rank, d))).collect()
            }
        }
    }

    /// What op `o` waits for before it may start: its job deps, and the compute it waits for on
    /// every rank.
    fn ready_deps(&self, o: usize) -> Vec<Node> {
        let ops = self.job.ops[o].deps.iter().map(|&d| Node::Op(d));
        ops.chain(self.op_compute[o].iter().map(|&(rank, c)| Node::Compute(rank, c))).collect()
    }

    /// When `node` ends, from the ends of `deps`, what it waits for (worked out already).
    fn end_from_deps(&self, node: Node, deps: &[Node]) -> u64 {
        let latest = deps.iter().map(|&d| self.known(d).unwrap_or(0)).max().unwrap_or(0);
        match node {
            Node::Round(k) => latest + self.round_ns[k],
            Node::Op(_) => latest,
            Node::Compute(rank, c) => {
                let micros = self.input.ranks[rank].compute[c].micros;
                latest + (micros as f64 * 1e3 * self.slowdown[rank] / self.speedup).round() as u64
            }
        }
    }
}

/// A node of a step's timeline: a round, a job op, or a rank's compute node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Node {
    Round(usize),
    Op(usize),
    Compute(usize, usize),
}

/// One line per replayed trace.
pub fn print(results: &[TraceSimResult]) {
    for r in results {
        println!(
            "trace {} ({}, {} ranks, {} ops in {} rounds, {} simulated), hash {} qps={} cc={}: step {:.6} s \
             overlapped ({:.6} s serial = compute {:.6} s (busiest rank's traced {:.6} s / {}{}) + communication {:.6} \
             s); {} \
             retransmitted, {} ECN marks, {} PFC frames{}{}",
            r.file,
            r.format,
            r.ranks,
            r.ops,
            r.rounds,
            r.distinct_rounds,
            r.hash,
            r.qps,
            r.cc,
            r.step_s,
            r.serial_step_s,
            r.compute_s,
            r.traced_compute_s,
            r.gpu_speedup,
            if r.straggler.is_some() { ", the straggler's rank slowed by its factor" } else { "" },
            r.communication_s,
            r.retransmissions,
            r.ecn_marks,
            r.pfc_frames,
            r.straggler
                .as_ref()
                .map_or(String::new(), |s| format!("; straggler {} computes {}x slower", s.host, s.factor)),
            if r.finished { "" } else { "; NOT every QP finished (deadline)" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::trace::{
        TraceInput,
        chakra::{CollectiveCommType, Node, build, from_nodes},
    };
    use crate::sim::cli::build_fabric;

    const PACKET: PacketOptions = PacketOptions { memory_limit_bytes: 1 << 32, ..crate::sim::packet::PACKET_DEFAULTS };

    fn trace(dir: &str, speedup: f64, qps: u32) -> TraceSimResult {
        let file = std::path::PathBuf::from(format!("{}/../testbed/traces/{dir}", env!("CARGO_MANIFEST_DIR")));
        let t = TraceSimOptions {
            file,
            spmd_ranks: None,
            placement: Placement::Contiguous,
            hash: HashMode::Eecmp,
            hash_seed: None,
            endpoint: EndpointOptions { qps, ..Default::default() },
            gpu_speedup: speedup,
            straggler: None,
        };
        simulate_trace(&mut build_fabric(None, None).unwrap(), &t, &PACKET).unwrap_or_else(|e| panic!("{e:#}"))
    }

    #[test]
    fn a_training_step_is_its_compute_at_the_gpu_speed_plus_its_communication_on_the_twin() {
        for dir in ["dp-step", "tp-pp-step", "tp-pp-step-param"] {
            let base = trace(dir, 1.0, 1);
            assert!(base.finished && base.ranks == 8 && base.bytes > 0, "{base:?}");
            assert!(base.communication_s > 0.0 && base.distinct_rounds >= 1, "{base:?}");
            assert_eq!(base.serial_step_s, base.compute_s + base.communication_s);
            // Never shorter than its communication, which runs round after round.
            assert!(base.step_s >= base.communication_s - 1e-9, "{dir}: {base:?}");
            // A GPU twice as fast halves the compute and leaves the network's part alone.
            let fast = trace(dir, 2.0, 1);
            assert_eq!(fast.communication_s, base.communication_s, "{dir}");
            assert!((fast.compute_s * 2.0 - base.compute_s).abs() < 1e-12, "{dir}");
            assert!(fast.serial_step_s < base.serial_step_s || base.compute_s == 0.0, "{dir}");
            assert!(fast.step_s <= base.step_s, "{dir}");
        }
        // The dp-step trace's compute is traced: some of the step is compute. Data-parallel:
        // no rank waits for another's compute, so overlap brings the step under the serial sum;
        // the pipeline's critical path runs through both stages' compute and comes out over it.
        let dp = trace("dp-step", 1.0, 1);
        assert!(dp.traced_compute_s > 0.0 && dp.step_s < dp.serial_step_s, "{dp:?}");
        let pp = trace("tp-pp-step", 1.0, 1);
        assert!(pp.step_s > pp.serial_step_s, "{pp:?}");
    }

    /// Every rank of the default fabric computes A (1 ms), all-reduces 1 MiB and computes B
    /// (0.5 ms) after it. If the all-reduce does not wait for A, A runs under it; if it does,
    /// nothing overlaps and the step is the serial bound.
    fn compute_around_an_allreduce(allreduce_waits_for_a: bool) -> TraceSimResult {
        straggling(allreduce_waits_for_a, None).unwrap()
    }

    /// Eight ranks running `nodes` each, placed contiguously on the default fabric.
    fn crafted(nodes: &[Node], hash: HashMode, endpoint: EndpointOptions) -> (TraceInput, TraceSimOptions) {
        let ranks = (0..8).map(|r| from_nodes(nodes, &format!("r{r}")).unwrap()).collect();
        let input = TraceInput { format: "chakra", ranks, groups: Default::default() };
        let t = TraceSimOptions {
            file: "crafted".into(),
            spmd_ranks: None,
            placement: Placement::Contiguous,
            hash,
            hash_seed: None,
            endpoint,
            gpu_speedup: 1.0,
            straggler: None,
        };
        (input, t)
    }

    fn straggling(allreduce_waits_for_a: bool, straggler: Option<&str>) -> Result<TraceSimResult> {
        let deps: &[u64] = if allreduce_waits_for_a { &[1] } else { &[] };
        let nodes = [
            build::comp(1, "A", 1_000, &[]),
            build::coll(2, "X", CollectiveCommType::AllReduce, 1 << 20, None, deps),
            build::comp(3, "B", 500, &[2]),
        ];
        let (input, mut t) = crafted(&nodes, HashMode::Eecmp, EndpointOptions::default());
        t.straggler = straggler.map(Straggler::parse).transpose()?;
        simulate_input(&mut build_fabric(None, None).unwrap(), &input, &t, &PACKET)
    }

    #[test]
    fn a_straggler_delays_the_step_by_its_extra_compute_on_the_critical_path() {
        let healthy = straggling(true, None).unwrap();
        // Contiguous placement puts rank 0 on the first host; its A and B take 3x as long, and
        // the all-reduce waits for every rank's A, so the step grows by 2 x (1 + 0.5) ms.
        let host = build_fabric(None, None).unwrap().plan.hosts().next().unwrap();
        let name = build_fabric(None, None).unwrap().plan.nodes[host].name.clone();
        let slow = straggling(true, Some(&format!("{name}:3"))).unwrap();
        assert_eq!(slow.communication_s, healthy.communication_s);
        assert!((slow.step_s - healthy.step_s - 3e-3).abs() < 1e-8, "{healthy:?} {slow:?}");
        // The serial figures count the straggler's compute too: 1.5 ms of it, three times.
        assert!((healthy.compute_s - 1.5e-3).abs() < 1e-12 && (slow.compute_s - 4.5e-3).abs() < 1e-12, "{slow:?}");
        assert_eq!(slow.traced_compute_s, healthy.traced_compute_s);
        assert!((slow.serial_step_s - slow.compute_s - slow.communication_s).abs() < 1e-12);
        // When the all-reduce does not wait for A, the straggler's A (3 ms) runs under it and
        // only what outlasts the communication shows.
        let free = straggling(false, Some(&format!("{name}:3"))).unwrap();
        let comm = free.communication_s;
        assert!((free.step_s - (comm + 1.5e-3).max(3e-3)).abs() < 1e-8, "{free:?}");
        // A round over the memory limit is refused, as a collective's step is.
        let (input, t) = crafted(
            &[build::coll(2, "X", CollectiveCommType::AllReduce, 1 << 20, None, &[])],
            HashMode::Eecmp,
            EndpointOptions::default(),
        );
        let tight = PacketOptions { memory_limit_bytes: 1 << 10, ..PACKET };
        let e =
            format!("{:#}", simulate_input(&mut build_fabric(None, None).unwrap(), &input, &t, &tight).unwrap_err());
        assert!(e.contains("round 0") && e.contains("--memory-limit-gib"), "{e}");
        for bad in ["nohost:2", &format!("{name}:0.5"), &format!("{name}:x")] {
            let e = format!("{:#}", straggling(true, Some(bad)).unwrap_err());
            assert!(e.contains("--straggler"), "{bad}: {e}");
        }
    }

    /// A chain of 100,000 compute nodes, each after the one before, ends after all of them:
    /// the timeline is worked out on a stack of its own, where recursion overflowed the thread's
    /// (a replay of 300 all-reduces crashed so).
    #[test]
    fn a_long_chain_of_nodes_is_worked_out_without_recursion() {
        const N: u64 = 100_000;
        let mut nodes: Vec<Node> = (1..=N).map(|id| build::comp(id, "c", 1, &[id - 1][..(id > 1) as usize])).collect();
        nodes.push(build::coll(N + 1, "X", CollectiveCommType::AllReduce, 1 << 16, None, &[N]));
        let (input, t) = crafted(&nodes, HashMode::Eecmp, EndpointOptions::default());
        let r = simulate_input(&mut build_fabric(None, None).unwrap(), &input, &t, &PACKET).unwrap();
        assert!(r.finished, "{r:?}");
        // Nothing overlaps: the all-reduce waits for the whole chain.
        assert!((r.step_s - (N as f64 * 1e-6 + r.communication_s)).abs() < 1e-8, "{r:?}");
    }

    #[test]
    fn compute_overlaps_the_communication_it_does_not_wait_for_and_no_more() {
        let free = compute_around_an_allreduce(false);
        let comm = free.communication_s;
        assert!(comm > 0.0 && (free.compute_s - 1.5e-3).abs() < 1e-12, "{free:?}");
        // A under the all-reduce, B after it.
        assert!((free.step_s - (comm + 0.5e-3).max(1e-3)).abs() < 1e-8, "{free:?}");
        assert!(free.step_s < free.serial_step_s, "{free:?}");
        let chained = compute_around_an_allreduce(true);
        assert!((chained.step_s - chained.serial_step_s).abs() < 1e-8, "nothing to overlap: {chained:?}");
        assert_eq!(chained.communication_s, comm);
    }

    /// Under TE the controller places a trace's flows as it places a collective's: one traced
    /// AllReduce takes as long as the same AllReduce run as a collective under TE, and the
    /// entries it placed are in the fabric.
    #[test]
    fn a_traced_allreduce_under_te_is_placed_as_the_collective_is() {
        let endpoint = EndpointOptions { qps: 2, ..Default::default() };
        let nodes = [build::coll(1, "X", CollectiveCommType::AllReduce, 1 << 20, None, &[])];
        let (input, t) = crafted(&nodes, HashMode::Te, endpoint.clone());
        let mut fabric = build_fabric(None, None).unwrap();
        let traced = simulate_input(&mut fabric, &input, &t, &PACKET).unwrap();
        assert!(traced.finished && !fabric.te.is_empty(), "{traced:?}");
        let o = crate::sim::SimOptions {
            collective: crate::model::workload::Collective::Allreduce,
            ranks: Some(8),
            message_bytes: 1 << 20,
            placement: Placement::Contiguous,
            seed: 1,
            hash: HashMode::Te,
            hash_seed: None,
            endpoint,
        };
        let collective = super::super::packet::simulate_packet(&mut build_fabric(None, None).unwrap(), &o, &PACKET);
        assert_eq!(traced.communication_s, collective.unwrap().completion_s);
    }

    #[test]
    fn a_bad_speed_is_refused_by_name() {
        let t = TraceSimOptions {
            file: format!("{}/../testbed/traces/dp-step", env!("CARGO_MANIFEST_DIR")).into(),
            spmd_ranks: None,
            placement: Placement::Contiguous,
            hash: HashMode::Eecmp,
            hash_seed: None,
            endpoint: EndpointOptions::default(),
            gpu_speedup: 0.0,
            straggler: None,
        };
        let err = simulate_trace(&mut build_fabric(None, None).unwrap(), &t, &PACKET).unwrap_err().to_string();
        assert!(err.contains("--gpu-speedup"), "{err}");
    }
}
