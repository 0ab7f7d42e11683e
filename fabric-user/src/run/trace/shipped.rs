//! The project's own traces under `testbed/traces/`, made here so that they can be regenerated
//! (`cargo run -p fabric-user --example make-traces`) and checked to be current (a unit test).
//!
//! - `dp-step/`: a data-parallel step on 8 ranks. Forward, then backward layer by layer; each
//!   gradient bucket is all-reduced over all ranks as soon as its layer's backward is done (data
//!   dependency), the buckets one after the other on one stream (control dependencies), and the
//!   optimizer waits for every bucket.
//! - `tp-pp-step/`: tensor parallel 4 x pipeline parallel 2 on 8 ranks (stage 0: ranks 0-3, group
//!   `tp0`; stage 1: ranks 4-7, `tp1`), two micro-batches. Per micro-batch and stage, forward and
//!   backward each do an all-gather and a reduce-scatter in the TP group around a compute node;
//!   activations go from stage 0 to stage 1 (send/recv, rank r to r+4), gradients back; a small
//!   all-reduce over every rank (gradient norm) ends the step. Each rank's ops are chained (one
//!   stream), so stage 0's second micro-batch overlaps stage 1's first.
//! - `tp-pp-step-param/`: the same step as PARAM comms-replay JSON (bf16 element counts, `pg_id`
//!   with `global_ranks`).
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde_json::json;

use super::chakra::{CollectiveCommType as C, Node, build, encode_stream};

pub const RANKS: usize = 8;
const KI: u64 = 1024;

/// The data-parallel step of one rank.
pub fn dp_step(_rank: usize) -> Vec<Node> {
    let buckets = [32 * KI, 32 * KI, 16 * KI, 16 * KI];
    let mut nodes = vec![build::comp(1, "forward", 3000, &[])];
    let mut prev_bwd = 1;
    let mut prev_ar: Option<u64> = None;
    let mut ars = Vec::new();
    for (i, &b) in buckets.iter().enumerate() {
        let bwd = 2 + 2 * i as u64;
        let ar = bwd + 1;
        nodes.push(build::comp(bwd, &format!("backward_layer{}", buckets.len() - 1 - i), 1500, &[prev_bwd]));
        let mut n = build::coll(ar, &format!("allreduce_grad_bucket{i}"), C::AllReduce, b, None, &[bwd]);
        n.ctrl_deps.extend(prev_ar);
        nodes.push(n);
        prev_bwd = bwd;
        prev_ar = Some(ar);
        ars.push(ar);
    }
    nodes.push(build::comp(2 + 2 * buckets.len() as u64, "optimizer_step", 500, &ars));
    nodes
}

/// One rank's op in the tensor + pipeline step, format-neutral.
enum Tp {
    Ag(String, u64),
    Rs(String, u64),
    Comp(String, u64),
    Send(String, usize, u64),
    Recv(String, usize, u64),
    WorldAr(String, u64),
}

const TP_BYTES: u64 = 32 * KI;
const ACT_BYTES: u64 = 16 * KI;
const NORM_BYTES: u64 = 8 * KI;
const MICRO_BATCHES: usize = 2;

fn tp_pp_ops(rank: usize) -> Vec<Tp> {
    let stage = rank / 4;
    let layer = |v: &mut Vec<Tp>, what: &str, m: usize| {
        v.push(Tp::Ag(format!("{what}_mb{m}_allgather"), TP_BYTES));
        v.push(Tp::Comp(format!("{what}_mb{m}_gemm"), 400));
        v.push(Tp::Rs(format!("{what}_mb{m}_reducescatter"), TP_BYTES));
    };
    let mut v = Vec::new();
    for m in 0..MICRO_BATCHES {
        if stage == 1 {
            v.push(Tp::Recv(format!("fwd_mb{m}_recv_activation"), rank - 4, ACT_BYTES));
        }
        layer(&mut v, "fwd", m);
        if stage == 0 {
            v.push(Tp::Send(format!("fwd_mb{m}_send_activation"), rank + 4, ACT_BYTES));
        }
    }
    for m in 0..MICRO_BATCHES {
        if stage == 0 {
            v.push(Tp::Recv(format!("bwd_mb{m}_recv_gradient"), rank + 4, ACT_BYTES));
        }
        layer(&mut v, "bwd", m);
        if stage == 1 {
            v.push(Tp::Send(format!("bwd_mb{m}_send_gradient"), rank - 4, ACT_BYTES));
        }
    }
    v.push(Tp::WorldAr("grad_norm_allreduce".into(), NORM_BYTES));
    v
}

/// The tensor + pipeline step of one rank, as Chakra nodes (each depends on the one before).
pub fn tp_pp_step(rank: usize) -> Vec<Node> {
    let pg = format!("tp{}", rank / 4);
    tp_pp_ops(rank)
        .into_iter()
        .enumerate()
        .map(|(i, op)| {
            let id = i as u64 + 1;
            let deps: Vec<u64> = if i == 0 { vec![] } else { vec![id - 1] };
            match op {
                Tp::Ag(n, b) => build::coll(id, &n, C::AllGather, b, Some(&pg), &deps),
                Tp::Rs(n, b) => build::coll(id, &n, C::ReduceScatter, b, Some(&pg), &deps),
                Tp::Comp(n, us) => build::comp(id, &n, us, &deps),
                Tp::Send(n, peer, b) => build::p2p(id, &n, true, peer, b, &deps),
                Tp::Recv(n, peer, b) => build::p2p(id, &n, false, peer, b, &deps),
                Tp::WorldAr(n, b) => build::coll(id, &n, C::AllReduce, b, None, &deps),
            }
        })
        .collect()
}

/// The tensor + pipeline step of one rank as a PARAM trace (bf16: 2 bytes per element).
pub fn tp_pp_step_param(rank: usize) -> serde_json::Value {
    let stage = rank / 4;
    let tp: Vec<usize> = (stage * 4..stage * 4 + 4).collect();
    let world: Vec<usize> = (0..RANKS).collect();
    let el = |b: u64| b / 2;
    let coll = |comms: &str, name: &str, i: u64, o: u64, pg: usize, ranks: &[usize]| {
        json!({"comms": comms, "markers": [name], "in_msg_size": i, "out_msg_size": o, "dtype": "BFloat16",
               "pg_id": pg, "global_ranks": ranks, "world_size": ranks.len()})
    };
    let entries: Vec<serde_json::Value> = tp_pp_ops(rank)
        .into_iter()
        .map(|op| match op {
            Tp::Ag(n, b) => coll("all_gather_base", &n, el(b) / 4, el(b), 1 + stage, &tp),
            Tp::Rs(n, b) => coll("reduce_scatter_base", &n, el(b), el(b) / 4, 1 + stage, &tp),
            Tp::Comp(n, us) => json!({"compute": "gemm", "markers": [n], "duration_us": us}),
            Tp::Send(n, peer, b) => {
                json!({"comms": "send", "markers": [n], "in_msg_size": el(b), "out_msg_size": el(b),
                                          "dtype": "BFloat16", "src_rank": rank, "dst_rank": peer})
            }
            Tp::Recv(n, peer, b) => {
                json!({"comms": "recv", "markers": [n], "in_msg_size": el(b), "out_msg_size": el(b),
                                          "dtype": "BFloat16", "src_rank": peer, "dst_rank": rank})
            }
            Tp::WorldAr(n, b) => coll("all_reduce", &n, el(b), el(b), 0, &world),
        })
        .collect();
    serde_json::Value::Array(entries)
}

/// Every shipped file: path under `testbed/traces/`, contents.
pub fn files() -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for r in 0..RANKS {
        out.push((PathBuf::from(format!("dp-step/dp-step.{r}.et")), encode_stream(&build::meta(), &dp_step(r))));
        out.push((
            PathBuf::from(format!("tp-pp-step/tp-pp-step.{r}.et")),
            encode_stream(&build::meta(), &tp_pp_step(r)),
        ));
        let mut j = serde_json::to_vec_pretty(&tp_pp_step_param(r)).expect("JSON");
        j.push(b'\n');
        out.push((PathBuf::from(format!("tp-pp-step-param/rank{r}.json")), j));
    }
    let groups = json!({"tp0": [0, 1, 2, 3], "tp1": [4, 5, 6, 7]});
    let mut g = serde_json::to_vec_pretty(&groups).expect("JSON");
    g.push(b'\n');
    out.push((PathBuf::from("tp-pp-step/comm_groups.json"), g));
    out
}

/// Writes every shipped file under `dir` (normally `testbed/traces`).
pub fn write_all(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (rel, bytes) in files() {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("a file in a directory"))
            .with_context(|| format!("creating {}", p.display()))?;
        std::fs::write(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
        written.push(p);
    }
    Ok(written)
}

/// `testbed/traces` of this checkout.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed/traces")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::trace::{Job, OpKind, files::load};

    #[test]
    fn the_shipped_traces_are_current() {
        for (rel, bytes) in files() {
            let p = dir().join(&rel);
            let on_disk = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(on_disk == bytes, "{} is stale: cargo run -p fabric-user --example make-traces", rel.display());
        }
    }

    #[test]
    fn the_shipped_traces_decode_into_the_expected_jobs() {
        let dp = Job::build(&load(&dir().join("dp-step/dp-step.0.et"), None).unwrap()).unwrap();
        assert_eq!((dp.format, dp.ranks, dp.ops.len()), ("chakra", 8, 4));
        assert!(dp.ops.iter().all(|o| o.kind == OpKind::AllReduce && o.ranks == (0..8).collect::<Vec<_>>()));
        assert_eq!(dp.ops.iter().map(|o| o.deps.clone()).collect::<Vec<_>>(), [vec![], vec![0], vec![1], vec![2]]);
        assert_eq!(dp.skipped_nodes, 8 * 6);
        assert_eq!(dp.rounds().len(), 4 * 14);

        let tp = Job::build(&load(&dir().join("tp-pp-step"), None).unwrap()).unwrap();
        let count = |k: OpKind| tp.ops.iter().filter(|o| o.kind == k).count();
        assert_eq!(
            (count(OpKind::AllGather), count(OpKind::ReduceScatter), count(OpKind::SendRecv), count(OpKind::AllReduce)),
            (8, 8, 16, 1)
        );
        assert!(tp.ops.iter().filter(|o| o.kind == OpKind::AllGather).all(|o| o.ranks.len() == 4));
        let first_send = tp.ops.iter().find(|o| o.kind == OpKind::SendRecv).unwrap();
        assert_eq!(first_send.ranks[1], first_send.ranks[0] + 4);
        // Stage 0's second micro-batch overlaps stage 1's first: some round has both TP groups.
        let rounds = tp.rounds();
        assert!(rounds.iter().any(|r| {
            let g: std::collections::BTreeSet<_> = r.iter().filter_map(|(o, _)| tp.ops[*o].group.clone()).collect();
            g.len() == 2
        }));

        // The PARAM version is the same job.
        let param = Job::build(&load(&dir().join("tp-pp-step-param/rank0.json"), None).unwrap()).unwrap();
        assert_eq!(param.format, "param");
        let shape = |j: &Job| {
            j.ops.iter().map(|o| (o.kind, o.ranks.clone(), o.bytes, o.deps.clone(), o.name.clone())).collect::<Vec<_>>()
        };
        assert_eq!(shape(&param), shape(&tp));
    }

    /// `--ranks` goes with one file without a rank number (replayed on every rank), within
    /// [`crate::run::trace::files::SPMD_RANKS`]; a trace of a file per rank has its own.
    #[test]
    fn ranks_go_with_a_lone_file_only() {
        let e = format!("{:#}", load(&dir().join("dp-step"), Some(4)).unwrap_err());
        assert!(e.contains("ranks 4 given") && e.contains("(8 files)"), "{e}");
        assert_eq!(load(&dir().join("dp-step"), Some(8)).unwrap().ranks.len(), 8, "the same count says nothing new");
        let tmp = tempfile::tempdir().unwrap();
        let lone = tmp.path().join("step.et");
        std::fs::copy(dir().join("dp-step/dp-step.0.et"), &lone).unwrap();
        assert_eq!(load(&lone, Some(4)).unwrap().ranks.len(), 4);
        for bad in [0, 1, 65_537] {
            let e = format!("{:#}", load(&lone, Some(bad)).unwrap_err());
            assert!(e.contains(&format!("ranks {bad}: one file is replayed on 2..=65536")), "{e}");
        }
    }
}
