//! The packet-level twin: a discrete-event simulator of a RoCEv2 fabric whose switches decide
//! with `fabric-common`'s own code and whose endpoints are `fabric-roce`'s own state machines.
//!
//! - [`event`]: the clock and the event queue.
//! - [`net`]: the description of a fabric: nodes, ports and links, switch configurations,
//!   routes and ECMP groups ([`net::Routing`]).
//! - [`link`]: a port's sending side: queues per class, serialization, PFC obedience.
//! - [`switch`]: routing, ECMP member choice, admission (buffer, RED/ECN, headroom), Xoff/Xon.
//! - [`host`]: the endpoints: queue pairs and congestion control driven in simulated time.
//! - [`packet`]: packets without payload bytes, in a slab.
//! - [`workload`]: queue pairs and endpoint settings.
//! - [`report`]: what a run reports.
//! - [`engine`]: the event loop ([`engine::Twin`]).
//!
//! Pure: no I/O, no threads, no clock. See `README.md` for the model, what is exact and what
//! is approximated.
pub mod engine;
pub mod event;
pub mod host;
pub mod link;
pub mod net;
pub mod packet;
pub mod report;
pub mod switch;
pub mod workload;

pub use engine::{Change, Scheduled, Twin, TwinError};
