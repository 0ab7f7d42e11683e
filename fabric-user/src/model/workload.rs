//! Collective workloads as schedules of flows: which rank sends how many bytes to which, step by
//! step. Pure; the endpoint engine runs the steps, [`crate::model::placement`] maps ranks to hosts.
use serde::{Deserialize, Serialize};

use crate::model::plan::NodeId;

/// The collectives the paper measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Collective {
    /// Ring AllReduce: 2(N-1) steps, each rank sending 1/N of the message to its successor.
    Allreduce,
    /// All-to-all: every rank sends 1/N of the message to every other rank at once.
    Alltoall,
    /// Incast: ranks 1..N each send the whole message to rank 0 at once.
    Incast,
    /// Permutation: every rank sends the whole message to one other rank (a seeded derangement).
    Permutation,
}

impl Collective {
    pub fn as_str(self) -> &'static str {
        match self {
            Collective::Allreduce => "allreduce",
            Collective::Alltoall => "alltoall",
            Collective::Incast => "incast",
            Collective::Permutation => "permutation",
        }
    }
}

/// One transfer between ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    pub src: usize,
    pub dst: usize,
    pub bytes: u64,
}

/// One transfer of a step, between hosts.
#[derive(Clone, Copy, Debug)]
pub struct HostTransfer {
    pub src: NodeId,
    pub dst: NodeId,
    pub bytes: u64,
}

impl HostTransfer {
    /// The bytes of a step's transfers, saturating (a user's message size times many ranks
    /// must not wrap).
    pub fn total_bytes(step: &[HostTransfer]) -> u64 {
        step.iter().fold(0u64, |sum, t| sum.saturating_add(t.bytes))
    }
}

/// A step between ranks as transfers between the hosts the ranks are placed on.
pub fn on_hosts(step: &[Transfer], hosts: &[crate::model::plan::NodeId]) -> Vec<HostTransfer> {
    step.iter().map(|t| HostTransfer { src: hosts[t.src], dst: hosts[t.dst], bytes: t.bytes }).collect()
}

/// The steps of one iteration; the transfers of a step run concurrently, and a step starts when
/// the previous one has completed (for a ring this is the usual synchronous model: step k's
/// chunk cannot be forwarded before it has arrived).
pub fn schedule(c: Collective, ranks: usize, message_bytes: u64, seed: u64) -> Vec<Vec<Transfer>> {
    schedule_runs(c, ranks, message_bytes, seed)
        .into_iter()
        .flat_map(|(step, times)| std::iter::repeat_n(step, times))
        .collect()
}

/// [`schedule`] with runs of identical consecutive steps given once, with their count: a ring's
/// 2(N-1) steps are one step repeated, which the simulator computes once (and a 24K-rank ring
/// would not fit in memory step by step).
pub fn schedule_runs(c: Collective, ranks: usize, message_bytes: u64, seed: u64) -> Vec<(Vec<Transfer>, usize)> {
    assert!(ranks >= 2, "a collective needs at least two ranks");
    let chunk = message_bytes.div_ceil(ranks as u64).max(1);
    match c {
        Collective::Allreduce => vec![(
            (0..ranks).map(|r| Transfer { src: r, dst: (r + 1) % ranks, bytes: chunk }).collect(),
            2 * (ranks - 1),
        )],
        Collective::Alltoall => vec![(
            (0..ranks)
                .flat_map(|s| {
                    (0..ranks).filter(move |&d| d != s).map(move |d| Transfer { src: s, dst: d, bytes: chunk })
                })
                .collect(),
            1,
        )],
        Collective::Incast => {
            vec![((1..ranks).map(|s| Transfer { src: s, dst: 0, bytes: message_bytes }).collect(), 1)]
        }
        Collective::Permutation => {
            let perm = derangement(ranks, seed);
            vec![((0..ranks).map(|s| Transfer { src: s, dst: perm[s], bytes: message_bytes }).collect(), 1)]
        }
    }
}

/// Ring all-gather: N-1 steps, each rank sending 1/N of the (gathered) message to its successor.
pub fn ring_allgather(ranks: usize, message_bytes: u64) -> Vec<Vec<Transfer>> {
    ring_steps(ranks, message_bytes, ranks.saturating_sub(1))
}

/// Ring reduce-scatter: N-1 steps, each rank sending 1/N of the (input) message to its successor.
pub fn ring_reduce_scatter(ranks: usize, message_bytes: u64) -> Vec<Vec<Transfer>> {
    ring_steps(ranks, message_bytes, ranks.saturating_sub(1))
}

fn ring_steps(ranks: usize, message_bytes: u64, steps: usize) -> Vec<Vec<Transfer>> {
    assert!(ranks >= 2, "a collective needs at least two ranks");
    let chunk = message_bytes.div_ceil(ranks as u64).max(1);
    let step: Vec<Transfer> = (0..ranks).map(|r| Transfer { src: r, dst: (r + 1) % ranks, bytes: chunk }).collect();
    vec![step; steps]
}

/// Seeded randomness for placements and permutations.
pub use fabric_common::rng::SplitMix64;

/// A permutation of 0..n without fixed points (Sattolo's algorithm gives a single cycle).
pub fn derangement(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = SplitMix64(seed);
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.below(i);
        p.swap(i, j);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_sent(s: &[Vec<Transfer>]) -> u64 {
        s.iter().flatten().map(|t| t.bytes).sum()
    }

    #[test]
    fn ring_allreduce_moves_2_n_minus_1_over_n_of_the_message_per_rank() {
        let s = schedule(Collective::Allreduce, 8, 8 << 20, 0);
        assert_eq!(s.len(), 14);
        assert!(s.iter().all(|step| step.len() == 8 && step.iter().all(|t| t.dst == (t.src + 1) % 8)));
        assert_eq!(bytes_sent(&s), 14 * 8 * (1 << 20));
    }

    #[test]
    fn ring_allgather_and_reduce_scatter_are_n_minus_1_steps_of_a_chunk() {
        for s in [ring_allgather(4, 4096), ring_reduce_scatter(4, 4096)] {
            assert_eq!(s.len(), 3);
            assert!(s.iter().all(|st| st.len() == 4 && st.iter().all(|t| t.dst == (t.src + 1) % 4 && t.bytes == 1024)));
        }
    }

    #[test]
    fn alltoall_incast_and_permutation_shapes() {
        let a = schedule(Collective::Alltoall, 4, 4000, 0);
        assert_eq!((a.len(), a[0].len()), (1, 12));
        assert!(a[0].iter().all(|t| t.src != t.dst && t.bytes == 1000));
        let i = schedule(Collective::Incast, 5, 100, 0);
        assert!(i[0].iter().all(|t| t.dst == 0 && t.bytes == 100) && i[0].len() == 4);
        for seed in 0..50 {
            let p = schedule(Collective::Permutation, 7, 10, seed);
            let mut dsts: Vec<usize> = p[0].iter().map(|t| t.dst).collect();
            assert!(p[0].iter().all(|t| t.src != t.dst), "seed {seed}");
            dsts.sort();
            assert_eq!(dsts, (0..7).collect::<Vec<_>>());
        }
    }
}
