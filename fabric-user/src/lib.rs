//! The fabric controller: builds testbeds, loads the XDP switch program and programs its maps,
//! drives the RoCEv2 endpoints, reads the counters, and simulates fabrics too large to build.
//! The `fabric` binary (src/main.rs) is the command line over this library.
//!
//! The folders are layers; a module imports only from the layers listed before it (checked by
//! `cargo xtask lint`):
//!
//! | layer | what it holds |
//! |---|---|
//! | [`sys`] | the FFI: network namespaces, rtnetlink; result files written whole |
//! | [`model`] | pure descriptions: topology files, the plan derived from them, routing, workloads, placements |
//! | [`dataplane`] | the XDP object: loading, attaching, typed map accessors |
//! | [`state`] | a testbed's saved state and where it lives |
//! | [`endpoint`] | our RoCEv2 endpoints (`fabric-roce`'s state machines over UDP sockets) |
//! | [`forwarding`] | the controller's picture of forwarding: groups, a step's flows, the path each takes |
//! | [`te`] | traffic engineering: placing flows on paths, installing them |
//! | [`agent`] | the per-testbed switch agent: PFC frames, watchdog, telemetry |
//! | [`telemetry`] | counters of a live testbed: stats, Prometheus |
//! | [`testbed`] | up, down, links, gray failures, probes, soft-RoCE hosts |
//! | [`run`] | runs on a testbed: collectives, several jobs at once, job records, traces, rxe runs |
//! | [`sim`] | the flow-level simulator, the twin's glue, the scheduler scenario |
//! | [`experiment`], [`analyze`] | the paper's claims measured; captures analysed |
//! | [`ui`] | the live web view (`fabric ui`) and topology pictures (`fabric graph`) |

pub mod agent;
pub mod analyze;
pub mod dataplane;
pub mod endpoint;
pub mod experiment;
pub mod forwarding;
pub mod model;
pub mod run;
pub mod sim;
pub mod state;
pub mod sys;
pub mod te;
pub mod telemetry;
pub mod testbed;
pub mod ui;

/// How the binaries end: success, or the error and its causes on stderr, one per line.
pub fn exit_code(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}
