//! Pure descriptions of a fabric and its work: the topology file, the plan of nodes, ports and
//! addresses derived from it, the central ECMP computation, workloads, placements and the
//! min-cut partitioner. No I/O beyond reading a file.
pub mod balance;
pub mod fault;
pub mod partition;
pub mod placement;
pub mod plan;
pub mod routing;
pub mod topology;
pub mod units;
pub mod workload;
