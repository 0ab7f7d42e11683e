//! Seeing the fabric: `fabric ui`, a live web view of a running testbed (its topology by tier,
//! each link coloured by its load in each direction, marks, balance, health, the running job,
//! every job of the last `fabric run --jobs` with its progress or completion),
//! and `fabric graph`, the topology as SVG or DOT.
//!
//! The pure parts are apart from the serving: [`layout`] places nodes, [`load`] turns bytes into
//! shares of a link and colours, [`view`] builds the page's model from a stats reading, and
//! [`graph`] draws. [`server`] reads the counters and serves the page, embedded in the binary.
pub mod graph;
pub mod layout;
pub mod load;
pub mod server;
pub mod view;
