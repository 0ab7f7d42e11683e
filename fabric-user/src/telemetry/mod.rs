//! What a live testbed's counters say: per-port statistics, uplink balance, the congestion
//! model's totals, and the same in the Prometheus text format, served over HTTP.
pub mod grafana;
pub mod http;
pub mod jobs;
pub mod prometheus;
pub mod stats;
