//! The tasks behind `cargo xtask`.
pub mod bench;
pub mod demo;
pub mod fuzz;
pub mod lint;
pub mod modgraph;
pub mod mutants;
pub mod setup;
pub mod test;
pub mod testbed;
mod util;
pub mod vm;
