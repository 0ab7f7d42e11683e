//! What reordering costs go-back-N and the reorder-tolerant transport: one 1 MiB WRITE through
//! [`fabric_roce::channel`] (100 Gbit/s, 2 µs each way, 1024-byte MTU, 128-packet window) with
//! packets overtaking one another by up to k - 1 positions, for k = 0, 2, 8, 32, over 10 seeds;
//! optionally with losses too. Prints one row per transport and k: mean retransmitted packets,
//! timeouts, goodput, and the reordering the responder measured.
//!
//! `cargo run --release -p fabric-roce --example reordering`
use fabric_roce::{
    channel::{ChannelConfig, transfer},
    transport::Transport,
};

const SEEDS: u64 = 10;
const MESSAGE: u32 = 1 << 20;

fn main() {
    println!("one {MESSAGE}-byte WRITE (1024 packets), mean of {SEEDS} seeds per row");
    println!("transport    k  retransmitted  timeouts  goodput_gbps  reordered  depth_max");
    for k in [0u32, 2, 8, 32] {
        for transport in Transport::ALL {
            let (mut resent, mut timeouts, mut goodput, mut reordered, mut depth) = (0.0, 0.0, 0.0, 0.0, 0);
            for seed in 0..SEEDS {
                let mut cfg = ChannelConfig::new(transport);
                cfg.reorder_window = k;
                cfg.seed = seed;
                let r = transfer(&[MESSAGE], &cfg);
                assert_eq!(r.completions.len(), 1, "{transport} k {k} seed {seed} completes");
                resent += r.requester.packets_retransmitted as f64;
                timeouts += r.requester.timeouts as f64;
                goodput += r.goodput_bps() / 1e9;
                reordered += r.responder.reordered_packets as f64;
                depth = depth.max(r.responder.reorder_depth_max);
            }
            let n = SEEDS as f64;
            println!(
                "{:<9} {k:>4}  {:>13.1}  {:>8.1}  {:>12.2}  {:>9.1}  {depth:>9}",
                transport.name(),
                resent / n,
                timeouts / n,
                goodput / n,
                reordered / n
            );
        }
    }
}
