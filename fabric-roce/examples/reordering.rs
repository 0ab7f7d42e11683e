//! What reordering costs go-back-N and the reorder-tolerant transport: one 1 MiB WRITE through
//! [`fabric_roce::channel`] (100 Gbit/s, 2 µs each way, 1024-byte MTU, 128-packet window) with
//! packets overtaking one another by up to k - 1 positions, for k = 0, 2, 8, 32, over 10 seeds;
//! then the same with 1% of the packets' first tries lost. Prints one row per transport, k and
//! loss: mean retransmitted packets, timeouts, goodput, and the reordering the responder measured.
//!
//! `cargo run --release -p fabric-roce --example reordering`
use fabric_roce::{
    channel::{ChannelConfig, SplitMix, transfer},
    transport::Transport,
};

const SEEDS: u64 = 10;
const MESSAGE: u32 = 1 << 20;

fn main() {
    println!("one {MESSAGE}-byte WRITE (1024 packets), mean of {SEEDS} seeds per row");
    println!("transport    k  loss  retransmitted  timeouts  goodput_gbps  reordered  depth_max");
    let packets = MESSAGE / 1024;
    for (k, loss_percent) in [0u32, 2, 8, 32].map(|k| (k, 0)).into_iter().chain([0u32, 8].map(|k| (k, 1))) {
        for transport in Transport::ALL {
            let (mut resent, mut timeouts, mut goodput, mut reordered, mut depth) = (0.0, 0.0, 0.0, 0.0, 0);
            for seed in 0..SEEDS {
                let mut cfg = ChannelConfig::new(transport);
                cfg.reorder_window = k;
                cfg.seed = seed;
                let mut lose = SplitMix::new(seed + 1000);
                cfg.lose_first_try = (0..packets).filter(|_| lose.below(100) < loss_percent as usize).collect();
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
                "{:<9} {k:>4}  {loss_percent:>3}%  {:>13.1}  {:>8.1}  {:>12.2}  {:>9.1}  {depth:>9}",
                transport.name(),
                resent / n,
                timeouts / n,
                goodput / n,
                reordered / n
            );
        }
    }
}
