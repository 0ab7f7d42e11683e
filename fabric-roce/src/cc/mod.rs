//! Congestion control behind one trait, [`CongestionControl`], sans-IO.
//!
//! A scheme is told what happens at one host's QPs (a packet sent, a CNP or a control message
//! received by a sender; a packet arriving, CE-marked or not, or a message completing at a
//! receiver) and decides what senders may post, how fast they are paced, and what receivers
//! send back ([`Feedback`]). [`SenderQp`] and [`ReceiverQp`] drive the QP state machines of
//! [`crate::qp`] through it, so the endpoint and a simulator alike only move packets.
//!
//! The schemes, each one file:
//! - [`none::PfcOnly`]: nothing on top of PFC (senders keep their configured rate);
//! - [`dcqcn::Dcqcn`]: DCQCN's reaction and notification points ([`crate::dcqcn`]);
//! - [`cts::Cts`]: receiver-driven admission, clear to send ([`crate::cts`]).
//!
//! A new scheme is a new file here implementing [`CongestionControl`] (and a `pub mod` line
//! below); the endpoint picks it by its `CcMode`.
//!
//! [`RateTrajectory`] records a rate over time, bounded in size.
pub mod control;
pub mod cts;
pub mod dcqcn;
pub mod none;
pub mod qps;
pub mod trajectory;

pub use control::{CONTROL_OPCODE, CongestionControl, Feedback, post_everything};
pub use qps::{ReceiverQp, SenderError, SenderInput, SenderQp};
pub use trajectory::RateTrajectory;
