//! PARAM comms-replay traces ("basic" format, one JSON file per rank): a list of entries, each
//! either `{"comms": NAME, ...}` or `{"compute": NAME, ...}`.
//!
//! Read from a comms entry: `comms`; `in_msg_size` / `out_msg_size` (element counts) and `dtype`
//! (their element size); `pg_id` and `global_ranks` (the process group and its members; absent:
//! every rank); `src_rank` / `dst_rank` of send and recv; `markers` (the first one names the op).
//! Ignored: `req`, `seqnum`, `startTime_ns`, `world_size`, `root`, `in_split` / `out_split`
//! (all-to-allv is replayed as an even all-to-all of `in_msg_size`), `use_batch`, and every other
//! field. `wait`, `init`, `new_group` and `batch_isend_irecv` entries carry no data and are
//! skipped with compute entries. A rank's entries run in file order, each after the previous one.
use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use serde_json::Value;

use super::{OpKind, RankOp, RankOpKind, RankTrace};

/// Bytes per element of a PARAM / PyTorch dtype name.
pub fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype.to_ascii_lowercase().trim_start_matches("torch.") {
        "float" | "float32" | "int" | "int32" | "uint32" => 4,
        "double" | "float64" | "long" | "int64" | "uint64" => 8,
        "half" | "float16" | "bfloat16" | "bf16" | "short" | "int16" | "uint16" => 2,
        "byte" | "uint8" | "char" | "int8" | "bool" | "float8_e4m3fn" | "float8_e5m2" => 1,
        _ => return None,
    })
}

/// Reads one rank's JSON file.
pub fn read_rank(path: &std::path::Path) -> Result<(RankTrace, BTreeMap<String, Vec<usize>>)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    decode(&text, &path.display().to_string())
}

/// Decodes one rank's trace; also returns the process groups its entries name (`pg_id` ->
/// `global_ranks`).
pub fn decode(text: &str, file: &str) -> Result<(RankTrace, BTreeMap<String, Vec<usize>>)> {
    let v: Value = serde_json::from_str(text).with_context(|| format!("{file}: not JSON"))?;
    let entries = v.as_array().with_context(|| format!("{file}: a PARAM trace is a JSON list of entries"))?;
    let mut rt = RankTrace { file: file.to_string(), ..Default::default() };
    let mut groups = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        let at = |what: String| {
            anyhow::anyhow!("{file}: entry {i}{}: {what}", name_of(e).map_or(String::new(), |n| format!(" {n:?}")))
        };
        let Some(obj) = e.as_object() else { return Err(at("not a JSON object".into())) };
        if obj.contains_key("compute") {
            rt.skipped_nodes += 1;
            continue;
        }
        let Some(comms) = obj.get("comms").and_then(Value::as_str) else {
            return Err(at("neither \"comms\" nor \"compute\"".into()));
        };
        let comms = comms.to_ascii_lowercase();
        let int = |key: &str| -> Result<Option<u64>> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => x.as_u64().map(Some).ok_or_else(|| at(format!("{key} = {x} is not a non-negative integer"))),
            }
        };
        let size = |key: &str| -> Result<u64> {
            let n = int(key)?.ok_or_else(|| at(format!("{key} is missing")))?;
            let dtype = obj.get("dtype").and_then(Value::as_str).ok_or_else(|| at("dtype is missing".into()))?;
            let b = dtype_bytes(dtype).ok_or_else(|| at(format!("unknown dtype {dtype:?}")))?;
            n.checked_mul(b).ok_or_else(|| at(format!("{key} = {n} elements of {b} bytes ({dtype}) overflows 64 bits")))
        };
        let name = comms.trim_start_matches('_');
        let coll = |kind| RankOpKind::Coll { kind, group: None };
        let (kind, bytes) = match name {
            "wait" | "init" | "new_group" | "batch_isend_irecv" => {
                rt.skipped_nodes += 1;
                continue;
            }
            "all_reduce" | "allreduce" | "all_reduce_coalesced" => (coll(OpKind::AllReduce), size("in_msg_size")?),
            "all_gather" | "allgather" | "all_gather_base" | "allgather_base" | "all_gather_into_tensor" => {
                (coll(OpKind::AllGather), size("out_msg_size")?)
            }
            "reduce_scatter" | "reduce_scatter_base" | "reduce_scatter_tensor" => {
                (coll(OpKind::ReduceScatter), size("in_msg_size")?)
            }
            "all_to_all" | "alltoall" | "all_to_allv" | "all_to_all_single" | "alltoall_base" => {
                (coll(OpKind::AllToAll), size("in_msg_size")?)
            }
            "barrier" => (coll(OpKind::Barrier), 0),
            "send" | "isend" => {
                let peer = int("dst_rank")?.ok_or_else(|| at("dst_rank is missing".into()))?;
                (RankOpKind::Send { peer: peer as usize, tag: 0 }, size("in_msg_size")?)
            }
            "recv" | "irecv" => {
                let peer = int("src_rank")?.ok_or_else(|| at("src_rank is missing".into()))?;
                (
                    RankOpKind::Recv { peer: peer as usize, tag: 0 },
                    // The received size, else the sent one; only a missing field falls back.
                    if int("out_msg_size")?.is_some() { size("out_msg_size")? } else { size("in_msg_size")? },
                )
            }
            other => {
                return Err(at(format!(
                    "unknown or unsupported collective {other:?} (all_reduce, all_gather, reduce_scatter, all_to_all, \
                     barrier, send, recv are replayed)"
                )));
            }
        };
        let kind = match kind {
            RankOpKind::Coll { kind, .. } => {
                let group = match obj.get("pg_id") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(x) => Some(x.to_string()),
                };
                if let (Some(g), Some(ranks)) = (&group, obj.get("global_ranks").and_then(Value::as_array)) {
                    let ranks: Vec<usize> = ranks
                        .iter()
                        .map(|r| r.as_u64().map(|r| r as usize))
                        .collect::<Option<_>>()
                        .ok_or_else(|| at("global_ranks is not a list of ranks".into()))?;
                    if let Some(prev) = groups.insert(g.clone(), ranks.clone())
                        && prev != ranks
                    {
                        return Err(at(format!("process group {g} has members {ranks:?} here but {prev:?} before")));
                    }
                }
                RankOpKind::Coll { kind, group }
            }
            k => k,
        };
        let deps = if rt.ops.is_empty() { vec![] } else { vec![rt.ops.len() - 1] };
        rt.ops.push(RankOp { node: i as u64, name: name_of(e).unwrap_or(name).to_string(), kind, bytes, deps });
    }
    Ok((rt, groups))
}

fn name_of(e: &Value) -> Option<&str> {
    e.get("markers").and_then(|m| m.get(0)).and_then(Value::as_str).or_else(|| e.get("comms").and_then(Value::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_param_trace_decodes() {
        let text = r#"[
          {"comms": "init"},
          {"comms": "all_gather_base", "in_msg_size": 256, "out_msg_size": 1024, "dtype": "BFloat16",
           "pg_id": 1, "global_ranks": [0, 1], "markers": ["tp_ag"]},
          {"compute": "gemm"},
          {"comms": "send", "in_msg_size": 100, "out_msg_size": 100, "dtype": "Float", "src_rank": 0, "dst_rank": 2},
          {"comms": "all_reduce", "in_msg_size": 10, "out_msg_size": 10, "dtype": "float", "req": 3}
        ]"#;
        let (rt, groups) = decode(text, "rank0.json").unwrap();
        assert_eq!(rt.ops.len(), 3);
        assert_eq!(rt.skipped_nodes, 2);
        assert_eq!(rt.ops[0].kind, RankOpKind::Coll { kind: OpKind::AllGather, group: Some("1".into()) });
        assert_eq!((rt.ops[0].bytes, rt.ops[0].node, rt.ops[0].name.as_str()), (2048, 1, "tp_ag"));
        assert_eq!(
            (rt.ops[1].kind.clone(), rt.ops[1].bytes, rt.ops[1].deps.clone()),
            (RankOpKind::Send { peer: 2, tag: 0 }, 400, vec![0])
        );
        assert_eq!((rt.ops[2].bytes, rt.ops[2].deps.clone()), (40, vec![1]));
        assert_eq!(groups["1"], vec![0, 1]);
    }

    #[test]
    fn malformed_param_entries_name_the_entry() {
        for (text, expect) in [
            (
                r#"[{"comms": "all_reduce", "in_msg_size": 1, "out_msg_size": 1, "dtype": "float"}, {"comms": "broadcast", "in_msg_size": 1, "out_msg_size": 1, "dtype": "float"}]"#,
                "entry 1 \"broadcast\": unknown or unsupported collective",
            ),
            (r#"[{"comms": "all_reduce", "dtype": "float"}]"#, "entry 0 \"all_reduce\": in_msg_size is missing"),
            (r#"[{"comms": "all_reduce", "in_msg_size": 1, "dtype": "complex32"}]"#, "unknown dtype"),
            (r#"[{"comms": "send", "in_msg_size": 1, "dtype": "float"}]"#, "dst_rank is missing"),
            (r#"[{"bogus": 1}]"#, "entry 0: neither"),
            (r#"{"comms": "all_reduce"}"#, "a JSON list"),
            (r#"[{"comms": "all_reduce", "in_msg_size": -4, "dtype": "float"}]"#, "not a non-negative integer"),
            (
                r#"[{"comms": "all_reduce", "in_msg_size": 4611686018427387904, "dtype": "Float"}]"#,
                "entry 0 \"all_reduce\": in_msg_size = 4611686018427387904 elements of 4 bytes (Float) overflows",
            ),
            (
                r#"[{"comms": "recv", "in_msg_size": 1, "out_msg_size": 4611686018427387904, "dtype": "Float", "src_rank": 1}]"#,
                "out_msg_size = 4611686018427387904 elements",
            ),
        ] {
            let e = format!("{:#}", decode(text, "rank0.json").unwrap_err());
            assert!(e.contains(expect), "{text}: {e}");
        }
    }
}
