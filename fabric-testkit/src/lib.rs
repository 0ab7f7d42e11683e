//! Test support, kept out of the product: the small fixture switch the `test_run` tests and the
//! data-plane benchmark share (so both measure the same thing), and reading captures.
pub mod capture;
pub mod fixture;
