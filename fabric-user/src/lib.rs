//! The fabric controller: loads the XDP switch program, programs its maps, reads its counters.
//! The `fabric` binary (src/main.rs) is the command line over this library.

pub mod agent;
pub mod analyze;
pub mod bench;
pub mod bench_forwarding;
pub mod capture;
pub mod dataplane;
pub mod endpoint;
pub mod experiment;
pub mod fixture;
pub mod job;
pub mod netlink;
pub mod netns;
pub mod partition;
pub mod placement;
pub mod plan;
pub mod probe;
pub mod prometheus;
pub mod roce;
pub mod routing;
pub mod run;
pub mod rxe;
pub mod rxe_run;
pub mod sim;
pub mod stats;
pub mod te;
pub mod testbed;
pub mod topology;
pub mod trace;
pub mod workload;
