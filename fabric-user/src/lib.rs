//! The fabric controller: loads the XDP switch program, programs its maps, reads its counters.
//! The `fabric` binary (src/main.rs) is the command line over this library.

pub mod bench;
pub mod bench_forwarding;
pub mod capture;
pub mod dataplane;
pub mod endpoint;
pub mod fixture;
pub mod netlink;
pub mod netns;
pub mod placement;
pub mod plan;
pub mod probe;
pub mod roce;
pub mod routing;
pub mod run;
pub mod stats;
pub mod testbed;
pub mod workload;
pub mod topology;
