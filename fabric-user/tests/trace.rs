//! Trace replay on a namespace testbed (root): both shipped traces run to completion with every
//! op accounted for (bytes delivered = bytes needed, per op).
mod common;

use fabric_user::run::trace::{
    replay::{self, TraceArgs},
    shipped,
};

fn replay_to_completion(state: &fabric_user::state::State, path: std::path::PathBuf, ops: usize) {
    let mut args = TraceArgs::for_file(path);
    args.quiet = true;
    let r = replay::run(state, &args).unwrap_or_else(|e| panic!("{e:#}"));
    replay::print(&r);
    assert_eq!(r.schema, "fabric.trace/1");
    assert_eq!(r.ops.len(), ops);
    for op in &r.ops {
        assert!(op.bytes_needed > 0 || op.kind == "barrier", "op {} {:?} moved nothing", op.id, op.name);
        assert_eq!(op.bytes_delivered, op.bytes_needed, "op {} {:?}", op.id, op.name);
        assert!(op.end_ns >= op.start_ns);
        for &d in &op.deps {
            assert!(r.ops[d].end_ns <= op.start_ns, "op {} started before its dependency {d} ended", op.id);
        }
    }
    assert_eq!(r.bytes_delivered, r.bytes_needed);
    assert_eq!(r.iterations.len(), 1);
    assert_eq!(r.iterations[0].completion_ns, r.ops.iter().map(|o| o.end_ns).max().unwrap());
}

#[test]
fn both_shipped_traces_replay_to_completion() {
    let prefix = common::unique_prefix('t', 0);
    let (_guard, state) = common::up(None, &prefix);
    replay_to_completion(&state, shipped::dir().join("dp-step"), 4);
    replay_to_completion(&state, shipped::dir().join("tp-pp-step/tp-pp-step.0.et"), 33);
}

#[test]
fn a_malformed_trace_fails_before_the_testbed_is_touched() {
    let dir = std::env::temp_dir().join(format!("fabric-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("rank0.json"),
        r#"[{"comms": "all_reduce", "in_msg_size": 4, "out_msg_size": 4, "dtype": "float"}]"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("rank1.json"),
        r#"[{"comms": "scatter", "in_msg_size": 4, "out_msg_size": 4, "dtype": "float"}]"#,
    )
    .unwrap();
    let mut args = TraceArgs::for_file(dir.join("rank0.json"));
    args.prefix = Some("nonexistent-testbed".into());
    let e = format!("{:#}", replay::main(&args).unwrap_err());
    assert!(e.contains("rank1.json") && e.contains("entry 0") && e.contains("scatter"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
