//! Our own RoCEv2 endpoint: Reliable Connection queue pairs doing RDMA WRITE, sans-IO.
//!
//! Nothing here opens a socket, starts a thread or reads a clock: packets go in and out as UDP
//! payloads (BTH, extension header, payload, pad, ICRC) and the time is a `u64` of nanoseconds
//! passed in, so every behaviour is deterministic and tested with plain `cargo test`. The
//! driver that binds UDP port 4791 lives elsewhere; the kernel writes Ethernet, IP and UDP.
//!
//! - [`wire`]: BTH, RETH, AETH and whole packets (WRITE FIRST/MIDDLE/LAST/ONLY, ACK, CNP).
//! - [`icrc`]: the invariant CRC over headers we do not write, and why IPv4 identification is
//!   predictable for us (unconnected socket, DF: ID 0).
//! - [`psn`]: 24-bit sequence numbers.
//! - [`segment`]: one message into packets at the path MTU.
//! - [`pacer`]: the token bucket that sets the sending rate (the hook for DCQCN).
//! - [`qp`]: the [`qp::Requester`] and [`qp::Responder`] state machines.
//! - [`transport`]: go-back-N or reorder-tolerant (out-of-order placement, SACK, selective
//!   retransmission), chosen per QP; [`reorder`]: the reordering a receiver observes.
//! - [`buf`]: packet buffers reused across packets (no allocation per packet).
//! - [`cc`]: congestion control behind one trait, [`cc::CongestionControl`], with three schemes
//!   (none, DCQCN, CTS), and the QPs driven through it ([`cc::SenderQp`], [`cc::ReceiverQp`]).
//! - [`dcqcn`]: DCQCN's reaction and notification points; [`cts`]: receiver-driven admission
//!   (clear to send): the algorithms the schemes in [`cc`] run.
//! - [`traffic_class`]: DSCP and ECN of each kind of packet; [`pause`]: PFC obedience.
pub mod buf;
pub mod cc;
pub mod channel;
pub mod cts;
pub mod dcqcn;
pub mod icrc;
pub mod pacer;
pub mod pause;
pub mod psn;
pub mod qp;
pub mod reorder;
pub mod segment;
pub mod traffic_class;
pub mod transport;
pub mod wire;
