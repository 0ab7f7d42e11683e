//! `fabric sim --model packet --trace FILE [--gpu-speedup X]`: a Chakra or PARAM trace (the
//! files `fabric run trace` replays on the testbed) replayed on the twin, with its compute, so
//! that a training step's time comes out.
//!
//! The model, stated:
//! - **communication**: the trace's ops matched into job-wide ops and run in the replay's own
//!   rounds ([`Job::rounds`]: an op joins the round after its dependencies' last step, and the
//!   steps of a round run at once); each round is one twin step on an idle fabric, identical
//!   rounds simulated once;
//! - **compute**: the trace's compute nodes' durations as traced, divided by `--gpu-speedup`
//!   (the modelled GPU's speed over the traced one's), per rank; the step's compute is the
//!   busiest rank's. Compute and communication do not overlap: the step time is compute plus
//!   communication, an upper bound for a job that overlaps them. (Placing each compute node
//!   between the ops it depends on needs the parser to keep compute nodes in the graph; it
//!   keeps only their count and total today.)
use std::collections::HashMap;

use anyhow::{Context as _, Result, ensure};
use fabric_common::config::HashMode;
use fabric_twin::Twin;
use serde::Serialize;

use super::packet::{PacketOptions, endpoint_config, network, qp_specs};
use crate::{
    endpoint::EndpointOptions,
    forwarding::fabric::SimFabric,
    model::placement::Placement,
    model::workload::on_hosts,
    run::trace::{Job, files::load},
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
    /// The busiest rank's compute, as traced and as modelled, seconds.
    pub traced_compute_s: f64,
    pub compute_s: f64,
    /// The rounds' modelled time, seconds.
    pub communication_s: f64,
    /// compute + communication.
    pub step_s: f64,
    /// Every QP of every round completed.
    pub finished: bool,
    pub retransmissions: u64,
    pub ecn_marks: u64,
    pub pfc_frames: u64,
}

/// Replays the trace of `t` on `fabric`'s twin.
pub fn simulate_trace(fabric: &mut SimFabric, t: &TraceSimOptions, p: &PacketOptions) -> Result<TraceSimResult> {
    ensure!(t.gpu_speedup.is_finite() && t.gpu_speedup > 0.0, "--gpu-speedup: {} is not a speed ratio", t.gpu_speedup);
    ensure!(t.hash != HashMode::Te, "--hash te: the twin's trace replay does not place TE entries");
    let input = load(&t.file, t.spmd_ranks)?;
    let job = Job::build(&input).with_context(|| format!("trace {}", t.file.display()))?;
    fabric.set_hash(t.hash, t.hash_seed);
    let hosts = t
        .placement
        .place(&fabric.plan, job.ranks)
        .with_context(|| format!("placing the trace's {} ranks", job.ranks))?;
    let fabric = &*fabric;
    let net = network(fabric, p.link_delay_ns)?;
    let mut twin = Twin::new(&net, endpoint_config(&t.endpoint)?, p.seed);
    super::packet::apply_loss(&mut twin, fabric, p.seed);
    let steps: Vec<_> = job.ops.iter().map(|o| o.steps()).collect();
    let rounds = job.rounds();
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
        traced_compute_s: 0.0,
        compute_s: 0.0,
        communication_s: 0.0,
        step_s: 0.0,
        finished: true,
        retransmissions: 0,
        ecn_marks: 0,
        pfc_frames: 0,
    };
    let mut comm_ns = 0u64;
    for (i, round) in rounds.iter().enumerate() {
        let transfers: Vec<_> = round.iter().flat_map(|&(op, step)| on_hosts(&steps[op][step], &hosts)).collect();
        let key = format!("{transfers:?}");
        if let Some(&ns) = seen.get(&key) {
            comm_ns += ns;
            continue;
        }
        let qps = qp_specs(fabric, &transfers, &t.endpoint);
        let s = twin.run_step(&qps, p.deadline_ns).with_context(|| format!("round {i}"))?;
        r.distinct_rounds += 1;
        r.finished &= s.finished;
        r.retransmissions += s.retransmitted();
        r.ecn_marks += s.tiers.iter().map(|t| t.ecn_marked).sum::<u64>();
        r.pfc_frames += s.tiers.iter().filter(|t| t.tier != "host").map(|t| t.pauses_sent).sum::<u64>();
        seen.insert(key, s.completion_ns);
        comm_ns += s.completion_ns;
    }
    let traced_us = input.ranks.iter().map(|rank| rank.skipped_micros).max().unwrap_or(0);
    r.traced_compute_s = traced_us as f64 * 1e-6;
    r.compute_s = r.traced_compute_s / t.gpu_speedup;
    r.communication_s = comm_ns as f64 * 1e-9;
    r.step_s = r.compute_s + r.communication_s;
    Ok(r)
}

/// One line per replayed trace.
pub fn print(results: &[TraceSimResult]) {
    for r in results {
        println!(
            "trace {} ({}, {} ranks, {} ops in {} rounds, {} simulated), hash {} qps={} cc={}: step {:.6} s = \
             compute {:.6} s (traced {:.6} s / {}) + communication {:.6} s; {} retransmitted, {} ECN marks, \
             {} PFC frames{}",
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
            r.compute_s,
            r.traced_compute_s,
            r.gpu_speedup,
            r.communication_s,
            r.retransmissions,
            r.ecn_marks,
            r.pfc_frames,
            if r.finished { "" } else { "; NOT every QP finished (deadline)" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::cli::build_fabric;

    const PACKET: PacketOptions =
        PacketOptions { link_delay_ns: 1_000, deadline_ns: 10_000_000_000, seed: 1, memory_limit_bytes: 1 << 32 };

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
        };
        simulate_trace(&mut build_fabric(None, None).unwrap(), &t, &PACKET).unwrap_or_else(|e| panic!("{e:#}"))
    }

    #[test]
    fn a_training_step_is_its_compute_at_the_gpu_speed_plus_its_communication_on_the_twin() {
        for dir in ["dp-step", "tp-pp-step", "tp-pp-step-param"] {
            let base = trace(dir, 1.0, 1);
            assert!(base.finished && base.ranks == 8 && base.bytes > 0, "{base:?}");
            assert!(base.communication_s > 0.0 && base.distinct_rounds >= 1, "{base:?}");
            assert_eq!(base.step_s, base.compute_s + base.communication_s);
            // A GPU twice as fast halves the compute and leaves the network's part alone.
            let fast = trace(dir, 2.0, 1);
            assert_eq!(fast.communication_s, base.communication_s, "{dir}");
            assert!((fast.compute_s * 2.0 - base.compute_s).abs() < 1e-12, "{dir}");
            assert!(fast.step_s < base.step_s || base.compute_s == 0.0, "{dir}");
        }
        // The dp-step trace's compute is traced: some of the step is compute.
        assert!(trace("dp-step", 1.0, 1).traced_compute_s > 0.0);
    }

    #[test]
    fn a_bad_speed_is_refused_by_name() {
        let t = TraceSimOptions {
            file: "nope".into(),
            spmd_ranks: None,
            placement: Placement::Contiguous,
            hash: HashMode::Eecmp,
            hash_seed: None,
            endpoint: EndpointOptions::default(),
            gpu_speedup: 0.0,
        };
        let err = simulate_trace(&mut build_fabric(None, None).unwrap(), &t, &PACKET).unwrap_err().to_string();
        assert!(err.contains("--gpu-speedup"), "{err}");
    }
}
