//! Trace-driven workloads (`fabric run trace FILE`): the communication of a real training step,
//! read from MLCommons Chakra execution traces ([`chakra`], protobuf) or PARAM comms-replay traces
//! ([`param`], JSON), turned into one job-wide graph of operations ([`Job`]) and replayed on the
//! testbed's endpoints ([`replay`]).
//!
//! Both formats are per rank (one file per rank, as PyTorch/NCCL record them). A rank's file gives
//! the operations that rank took part in, in order, with their dependencies. Ops are matched across
//! ranks the way NCCL matches them: the k-th collective a rank issues on a process group is the
//! same collective as the k-th one every other member issues on it; the k-th send from rank a to b
//! with tag t is the k-th receive on b from a with tag t. A job-wide op depends on every job-wide op
//! that holds a dependency of one of its per-rank parts. Compute and memory nodes are not run
//! (their dependencies pass through them); their count and traced duration are reported.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{Result, bail};
use serde::Serialize;

use crate::model::workload::{self, Collective, Transfer};

pub mod chakra;
pub mod files;
pub mod param;
pub mod replay;
pub mod shipped;

/// What a job-wide op does on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    /// Ring AllReduce of `bytes` (2(N-1) steps of bytes/N).
    AllReduce,
    /// Ring all-gather; `bytes` is the gathered (output) size (N-1 steps of bytes/N).
    AllGather,
    /// Ring reduce-scatter; `bytes` is the input size (N-1 steps of bytes/N).
    ReduceScatter,
    /// All-to-all; `bytes` is what each rank sends in all (bytes/N to every other rank).
    AllToAll,
    /// No data: completes when its dependencies have.
    Barrier,
    /// One transfer of `bytes` from the first rank to the second.
    SendRecv,
}

impl OpKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::AllReduce => "all-reduce",
            OpKind::AllGather => "all-gather",
            OpKind::ReduceScatter => "reduce-scatter",
            OpKind::AllToAll => "all-to-all",
            OpKind::Barrier => "barrier",
            OpKind::SendRecv => "send-recv",
        }
    }
}

/// One rank's part in an op, as its trace file states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RankOpKind {
    /// A collective on a process group (`None`: every rank of the job).
    Coll {
        kind: OpKind,
        group: Option<String>,
    },
    Send {
        peer: usize,
        tag: i64,
    },
    Recv {
        peer: usize,
        tag: i64,
    },
}

/// A communication op of one rank's trace.
#[derive(Clone, Debug)]
pub struct RankOp {
    /// Chakra node id, or the index of the entry in a PARAM trace.
    pub node: u64,
    pub name: String,
    pub kind: RankOpKind,
    pub bytes: u64,
    /// Indices (into the same rank's op list) of the ops this one waits for.
    pub deps: Vec<usize>,
}

/// One rank's trace, its communication ops in issue order (a topological order of its graph).
#[derive(Clone, Debug, Default)]
pub struct RankTrace {
    pub file: String,
    pub ops: Vec<RankOp>,
    /// Nodes not replayed (compute, memory, metadata) and their traced duration.
    pub skipped_nodes: usize,
    pub skipped_micros: u64,
    /// Those nodes with their place in the graph (Chakra traces; PARAM traces keep none).
    pub compute: Vec<ComputeNode>,
    /// Per op (index as in `ops`): the compute nodes (indices into `compute`) it directly waits for.
    pub op_compute_deps: Vec<Vec<usize>>,
}

/// A node not replayed (compute, memory, metadata): its traced duration and what it directly
/// waits for, so that a model can place it between the ops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComputeNode {
    pub node: u64,
    pub micros: u64,
    /// Ops (indices into the rank's `ops`) and compute nodes it directly waits for.
    pub op_deps: Vec<usize>,
    pub compute_deps: Vec<usize>,
}

/// A trace as read: one [`RankTrace`] per rank (index = rank), and the members of named process
/// groups (a group not named here is every rank).
#[derive(Clone, Debug, Default)]
pub struct TraceInput {
    pub format: &'static str,
    pub ranks: Vec<RankTrace>,
    pub groups: BTreeMap<String, Vec<usize>>,
}

/// A job-wide op.
#[derive(Clone, Debug, Serialize)]
pub struct JobOp {
    pub id: usize,
    pub name: String,
    pub kind: OpKind,
    /// Participating ranks, in ring order (send/recv: sender, receiver).
    pub ranks: Vec<usize>,
    pub bytes: u64,
    pub group: Option<String>,
    /// `(rank, node id)` of every per-rank part.
    pub nodes: Vec<(usize, u64)>,
    /// Job-wide ops this one waits for (ids smaller than its own).
    pub deps: Vec<usize>,
}

impl JobOp {
    /// The op's steps in job ranks: the transfers of a step run concurrently.
    pub fn steps(&self) -> Vec<Vec<Transfer>> {
        let n = self.ranks.len();
        if n < 2 || self.kind == OpKind::Barrier {
            return Vec::new();
        }
        let local = match self.kind {
            OpKind::AllReduce => workload::schedule(Collective::Allreduce, n, self.bytes, 0),
            OpKind::AllToAll => workload::schedule(Collective::Alltoall, n, self.bytes, 0),
            OpKind::AllGather => workload::ring_allgather(n, self.bytes),
            OpKind::ReduceScatter => workload::ring_reduce_scatter(n, self.bytes),
            OpKind::SendRecv => vec![vec![Transfer { src: 0, dst: 1, bytes: self.bytes }]],
            OpKind::Barrier => unreachable!(),
        };
        local
            .into_iter()
            .map(|s| s.into_iter().map(|t| Transfer { src: self.ranks[t.src], dst: self.ranks[t.dst], ..t }).collect())
            .collect()
    }

    /// Bytes the op has to deliver.
    pub fn bytes_needed(&self) -> u64 {
        self.steps().iter().flatten().map(|t| t.bytes).sum()
    }
}

/// The job-wide graph of a trace: ops in a topological order.
#[derive(Clone, Debug, Serialize)]
pub struct Job {
    pub format: &'static str,
    pub ranks: usize,
    pub ops: Vec<JobOp>,
    pub skipped_nodes: usize,
    pub skipped_micros: u64,
}

fn where_(input: &TraceInput, rank: usize, i: usize) -> String {
    let op = &input.ranks[rank].ops[i];
    format!("rank {rank} ({}), node {} {:?}", input.ranks[rank].file, op.node, op.name)
}

impl Job {
    /// Matches the ranks' ops into job-wide ops and orders them by their dependencies.
    pub fn build(input: &TraceInput) -> Result<Job> {
        let n = input.ranks.len();
        if n == 0 {
            bail!("the trace has no ranks");
        }
        check_groups(input)?;
        let issued = Issued::from_ranks(input)?;
        let mut matched = Matched::default();
        matched.match_collectives(input, &issued.colls)?;
        matched.match_point_to_point(input, &issued.sends, &issued.recvs)?;
        let deps = matched.job_deps(input)?;
        let order = topological_order(&matched.ops, &deps)?;
        Ok(Job {
            format: input.format,
            ranks: n,
            ops: renumber(&matched.ops, &deps, &order),
            skipped_nodes: input.ranks.iter().map(|r| r.skipped_nodes).sum(),
            skipped_micros: input.ranks.iter().map(|r| r.skipped_micros).sum(),
        })
    }

    /// How the replay runs: rounds of `(op, step)`; an op joins the round after its last
    /// dependency's last step, and the steps of every op in a round run at once.
    pub fn rounds(&self) -> Vec<Vec<(usize, usize)>> {
        let steps: Vec<usize> = self.ops.iter().map(|o| o.steps().len()).collect();
        let mut done = vec![false; self.ops.len()];
        let mut started = vec![false; self.ops.len()];
        let mut next = vec![0usize; self.ops.len()];
        let mut rounds = Vec::new();
        loop {
            // Start what is ready; ops without steps complete at once (and may release others).
            loop {
                let mut changed = false;
                for o in 0..self.ops.len() {
                    if !started[o] && self.ops[o].deps.iter().all(|&d| done[d]) {
                        started[o] = true;
                        changed = true;
                        if steps[o] == 0 {
                            done[o] = true;
                        }
                    }
                }
                if !changed {
                    break;
                }
            }
            let round: Vec<(usize, usize)> =
                (0..self.ops.len()).filter(|&o| started[o] && !done[o]).map(|o| (o, next[o])).collect();
            if round.is_empty() {
                break;
            }
            for &(o, _) in &round {
                next[o] += 1;
                if next[o] == steps[o] {
                    done[o] = true;
                }
            }
            rounds.push(round);
        }
        debug_assert!(done.iter().all(|d| *d), "the graph is acyclic");
        rounds
    }
}

static EMPTY: Vec<usize> = Vec::new();

fn group_members(input: &TraceInput, group: Option<&str>) -> Vec<usize> {
    match group.and_then(|g| input.groups.get(g)) {
        Some(m) => m.clone(),
        None => (0..input.ranks.len()).collect(),
    }
}

/// How error messages name a process group (`None`: every rank).
fn group_label(group: &Option<String>) -> &str {
    group.as_deref().unwrap_or("(all ranks)")
}

/// Every named process group names ranks of the job, each once.
fn check_groups(input: &TraceInput) -> Result<()> {
    let n = input.ranks.len();
    for (g, members) in &input.groups {
        let mut seen = BTreeSet::new();
        for &m in members {
            if m >= n {
                bail!("process group {g:?} names rank {m}, but the job has {n} ranks (0..{})", n - 1);
            }
            if !seen.insert(m) {
                bail!("process group {g:?} names rank {m} twice");
            }
        }
    }
    Ok(())
}

/// Send/receive key: `(sender, receiver, tag)`.
type P2pKey = (usize, usize, i64);

/// The ranks' ops (indices into each rank's op list, in issue order), keyed by what matches them
/// across ranks.
#[derive(Default)]
struct Issued {
    /// `(group, rank)`: that rank's collectives on the group.
    colls: HashMap<(Option<String>, usize), Vec<usize>>,
    /// The sender's sends.
    sends: HashMap<P2pKey, Vec<usize>>,
    /// The receiver's receives.
    recvs: HashMap<P2pKey, Vec<usize>>,
}

impl Issued {
    /// Every op of every rank under its matching key; checks what one op shows on its own.
    fn from_ranks(input: &TraceInput) -> Result<Issued> {
        let mut issued = Issued::default();
        for (r, rt) in input.ranks.iter().enumerate() {
            for i in 0..rt.ops.len() {
                issued.add(input, r, i)?;
            }
        }
        Ok(issued)
    }

    /// Op `i` of rank `r`.
    fn add(&mut self, input: &TraceInput, r: usize, i: usize) -> Result<()> {
        let n = input.ranks.len();
        let op = &input.ranks[r].ops[i];
        // Dependencies pointing backwards make each rank's list a topological order.
        for &d in &op.deps {
            if d >= i {
                bail!("{}: depends on an op that does not come before it", where_(input, r, i));
            }
        }
        match &op.kind {
            RankOpKind::Coll { group, .. } => {
                let members = group_members(input, group.as_deref());
                if !members.contains(&r) {
                    bail!(
                        "{}: a collective on process group {:?}, whose members {:?} do not include rank {r}",
                        where_(input, r, i),
                        group_label(group),
                        members
                    );
                }
                self.colls.entry((group.clone(), r)).or_default().push(i);
            }
            RankOpKind::Send { peer, tag } | RankOpKind::Recv { peer, tag } => {
                if *peer >= n {
                    bail!("{}: peer rank {peer} is outside the job (ranks 0..{})", where_(input, r, i), n - 1);
                }
                if *peer == r {
                    bail!("{}: sends to or receives from itself", where_(input, r, i));
                }
                if matches!(op.kind, RankOpKind::Send { .. }) {
                    self.sends.entry((r, *peer, *tag)).or_default().push(i);
                } else {
                    self.recvs.entry((*peer, r, *tag)).or_default().push(i);
                }
            }
        }
        Ok(())
    }
}

/// Job-wide ops in creation order (ids = indices, dependencies not yet set), and the job op
/// that owns each `(rank, index)`.
#[derive(Default)]
struct Matched {
    ops: Vec<JobOp>,
    owner: HashMap<(usize, usize), usize>,
}

impl Matched {
    /// Collectives, group by group: the k-th of every member is one job op. Created in the order
    /// of the lowest member's issue order (any order works: the topological sort fixes the
    /// final one).
    fn match_collectives(
        &mut self,
        input: &TraceInput,
        colls: &HashMap<(Option<String>, usize), Vec<usize>>,
    ) -> Result<()> {
        let mut groups: Vec<Option<String>> = colls.keys().map(|(g, _)| g.clone()).collect();
        groups.sort();
        groups.dedup();
        for g in groups {
            let members = group_members(input, g.as_deref());
            let lists: Vec<&Vec<usize>> =
                members.iter().map(|m| colls.get(&(g.clone(), *m)).map_or(&EMPTY, |v| v)).collect();
            let count = lists.iter().map(|l| l.len()).max().unwrap_or(0);
            for k in 0..count {
                self.match_collective(input, &g, &members, &lists, k)?;
            }
        }
        Ok(())
    }

    /// The k-th collective on group `g`: every member (`lists`: each member's collectives on
    /// it) must issue one, of the same kind and size as the first member that does.
    fn match_collective(
        &mut self,
        input: &TraceInput,
        g: &Option<String>,
        members: &[usize],
        lists: &[&Vec<usize>],
        k: usize,
    ) -> Result<()> {
        let Some((r0, &i0)) = members.iter().zip(lists).find_map(|(m, l)| l.get(k).map(|i| (*m, i))) else {
            return Ok(());
        };
        let first = &input.ranks[r0].ops[i0];
        let RankOpKind::Coll { kind, .. } = first.kind else { unreachable!() };
        let mut nodes = Vec::new();
        for (m, l) in members.iter().zip(lists) {
            let Some(&i) = l.get(k) else {
                bail!(
                    "{}: collective #{} on process group {:?}, but rank {m} issues only {} collective(s) on it",
                    where_(input, r0, i0),
                    k + 1,
                    group_label(g),
                    l.len()
                );
            };
            let op = &input.ranks[*m].ops[i];
            let RankOpKind::Coll { kind: km, .. } = op.kind else { unreachable!() };
            if km != kind || op.bytes != first.bytes {
                bail!(
                    "{}: {} of {} bytes does not match {}: {} of {} bytes (collective #{} on group {:?})",
                    where_(input, *m, i),
                    km.as_str(),
                    op.bytes,
                    where_(input, r0, i0),
                    kind.as_str(),
                    first.bytes,
                    k + 1,
                    group_label(g)
                );
            }
            nodes.push((*m, op.node));
            self.owner.insert((*m, i), self.ops.len());
        }
        self.ops.push(JobOp {
            id: self.ops.len(),
            name: first.name.clone(),
            kind,
            ranks: members.to_vec(),
            bytes: first.bytes,
            group: g.clone(),
            nodes,
            deps: Vec::new(),
        });
        Ok(())
    }

    /// Sends and receives: the k-th send from a to b with tag t is the k-th receive on b from a
    /// with tag t.
    fn match_point_to_point(
        &mut self,
        input: &TraceInput,
        sends: &HashMap<P2pKey, Vec<usize>>,
        recvs: &HashMap<P2pKey, Vec<usize>>,
    ) -> Result<()> {
        let mut keys: Vec<&P2pKey> = sends.keys().chain(recvs.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let (a, b, tag) = *key;
            let s = sends.get(key).map_or(&EMPTY, |v| v);
            let r = recvs.get(key).map_or(&EMPTY, |v| v);
            for k in 0..s.len().max(r.len()) {
                match (s.get(k), r.get(k)) {
                    (Some(&si), Some(&ri)) => self.pair(input, (a, si), (b, ri))?,
                    (Some(&si), None) => bail!(
                        "{}: send #{} to rank {b} (tag {tag}) has no matching receive on rank {b}",
                        where_(input, a, si),
                        k + 1
                    ),
                    (None, Some(&ri)) => bail!(
                        "{}: receive #{} from rank {a} (tag {tag}) has no matching send on rank {a}",
                        where_(input, b, ri),
                        k + 1
                    ),
                    (None, None) => unreachable!(),
                }
            }
        }
        Ok(())
    }

    /// One send (`(rank, index)` on the sender) and its receive: a send-recv job op.
    fn pair(&mut self, input: &TraceInput, (a, si): (usize, usize), (b, ri): (usize, usize)) -> Result<()> {
        let (so, ro) = (&input.ranks[a].ops[si], &input.ranks[b].ops[ri]);
        if so.bytes != ro.bytes {
            bail!(
                "{}: receives {} bytes but {} sends {}",
                where_(input, b, ri),
                ro.bytes,
                where_(input, a, si),
                so.bytes
            );
        }
        self.owner.insert((a, si), self.ops.len());
        self.owner.insert((b, ri), self.ops.len());
        self.ops.push(JobOp {
            id: self.ops.len(),
            name: so.name.clone(),
            kind: OpKind::SendRecv,
            ranks: vec![a, b],
            bytes: so.bytes,
            group: None,
            nodes: vec![(a, so.node), (b, ro.node)],
            deps: Vec::new(),
        });
        Ok(())
    }

    /// Job-wide dependencies: op X waits for op Y when a part of X depends on a part of Y.
    fn job_deps(&self, input: &TraceInput) -> Result<Vec<BTreeSet<usize>>> {
        let mut deps: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); self.ops.len()];
        for (r, rt) in input.ranks.iter().enumerate() {
            for (i, op) in rt.ops.iter().enumerate() {
                let me = self.owner[&(r, i)];
                for &d in &op.deps {
                    let other = self.owner[&(r, d)];
                    if other == me {
                        bail!(
                            "{}: depends on {}, which is part of the same job-wide op",
                            where_(input, r, i),
                            where_(input, r, d)
                        );
                    }
                    deps[me].insert(other);
                }
            }
        }
        Ok(deps)
    }
}

/// Topological order of the ops (Kahn), stable by creation order; a cycle is a deadlock.
fn topological_order(ops: &[JobOp], deps: &[BTreeSet<usize>]) -> Result<Vec<usize>> {
    let mut indegree: Vec<usize> = deps.iter().map(BTreeSet::len).collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); ops.len()];
    for (o, ds) in deps.iter().enumerate() {
        for &d in ds {
            users[d].push(o);
        }
    }
    let mut ready: BTreeSet<usize> = (0..ops.len()).filter(|&o| indegree[o] == 0).collect();
    let mut order = Vec::new();
    while let Some(o) = ready.pop_first() {
        order.push(o);
        for &u in &users[o] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() != ops.len() {
        let stuck = (0..ops.len()).find(|o| !order.contains(o)).expect("some op is stuck");
        let (r, node) = ops[stuck].nodes[0];
        bail!(
            "the trace deadlocks: op {:?} (rank {r}, node {node}) waits, through the ranks' orders and \
             dependencies, on itself (e.g. a receive issued before the matching send's dependencies allow)",
            ops[stuck].name
        );
    }
    Ok(order)
}

/// The ops in `order`, renumbered by their position in it, with their dependencies in the new ids.
fn renumber(ops: &[JobOp], deps: &[BTreeSet<usize>], order: &[usize]) -> Vec<JobOp> {
    let mut new_id = vec![0; ops.len()];
    for (i, &o) in order.iter().enumerate() {
        new_id[o] = i;
    }
    let mut sorted: Vec<JobOp> = order
        .iter()
        .map(|&o| {
            let mut op = ops[o].clone();
            op.id = new_id[o];
            op.deps = deps[o].iter().map(|&d| new_id[d]).collect();
            op.deps.sort();
            op
        })
        .collect();
    sorted.sort_by_key(|o| o.id);
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coll(node: u64, kind: OpKind, group: Option<&str>, bytes: u64, deps: Vec<usize>) -> RankOp {
        RankOp {
            node,
            name: format!("n{node}"),
            kind: RankOpKind::Coll { kind, group: group.map(str::to_string) },
            bytes,
            deps,
        }
    }

    fn p2p(node: u64, send: bool, peer: usize, bytes: u64, deps: Vec<usize>) -> RankOp {
        RankOp {
            node,
            name: format!("n{node}"),
            kind: if send { RankOpKind::Send { peer, tag: 0 } } else { RankOpKind::Recv { peer, tag: 0 } },
            bytes,
            deps,
        }
    }

    fn input(ranks: Vec<Vec<RankOp>>) -> TraceInput {
        TraceInput {
            format: "test",
            ranks: ranks
                .into_iter()
                .enumerate()
                .map(|(r, ops)| RankTrace { file: format!("r{r}"), ops, ..Default::default() })
                .collect(),
            groups: BTreeMap::new(),
        }
    }

    #[test]
    fn pipeline_dependencies_order_the_ops_and_the_rounds() {
        // Rank 0: all-reduce, then send to 1. Rank 1: receive from 0, then all-reduce.
        let t = input(vec![
            vec![coll(1, OpKind::AllReduce, None, 800, vec![]), p2p(2, true, 1, 100, vec![0])],
            vec![p2p(5, false, 0, 100, vec![]), coll(6, OpKind::AllReduce, None, 800, vec![0])],
        ]);
        let e = Job::build(&t).unwrap_err();
        assert!(format!("{e:#}").contains("deadlocks"), "{e:#}");
        // Both all-reduce first: ok, and the send waits for it.
        let t = input(vec![
            vec![coll(1, OpKind::AllReduce, None, 800, vec![]), p2p(2, true, 1, 100, vec![0])],
            vec![coll(6, OpKind::AllReduce, None, 800, vec![]), p2p(5, false, 0, 100, vec![0])],
        ]);
        let j = Job::build(&t).unwrap();
        assert_eq!(j.ops.len(), 2);
        assert_eq!((j.ops[0].kind, j.ops[1].kind), (OpKind::AllReduce, OpKind::SendRecv));
        assert_eq!(j.ops[1].deps, vec![0]);
        assert_eq!(j.ops[1].nodes, vec![(0, 2), (1, 5)]);
        let rounds = j.rounds();
        // AllReduce on 2 ranks: 2 steps; then the send.
        assert_eq!(rounds, vec![vec![(0, 0)], vec![(0, 1)], vec![(1, 0)]]);
        assert_eq!(j.ops[0].bytes_needed(), 2 * 2 * 400);
    }

    #[test]
    fn independent_ops_share_rounds() {
        let mut t = input(vec![
            vec![
                coll(1, OpKind::AllGather, Some("a"), 400, vec![]),
                coll(2, OpKind::ReduceScatter, Some("b"), 400, vec![]),
            ],
            vec![
                coll(1, OpKind::AllGather, Some("a"), 400, vec![]),
                coll(2, OpKind::ReduceScatter, Some("b"), 400, vec![]),
            ],
            vec![coll(1, OpKind::Barrier, Some("c"), 0, vec![])],
            vec![coll(1, OpKind::Barrier, Some("c"), 0, vec![])],
        ]);
        t.groups.insert("a".into(), vec![0, 1]);
        t.groups.insert("b".into(), vec![0, 1]);
        t.groups.insert("c".into(), vec![2, 3]);
        let j = Job::build(&t).unwrap();
        let rounds = j.rounds();
        assert_eq!(rounds.len(), 1, "{rounds:?}");
        assert_eq!(rounds[0].len(), 2);
        assert!(j.ops.iter().any(|o| o.kind == OpKind::Barrier && o.steps().is_empty()));
    }

    #[test]
    fn mismatches_name_the_op() {
        let t = input(vec![
            vec![coll(3, OpKind::AllReduce, None, 800, vec![])],
            vec![coll(4, OpKind::AllReduce, None, 900, vec![])],
        ]);
        let e = format!("{:#}", Job::build(&t).unwrap_err());
        assert!(e.contains("node 4") && e.contains("900"), "{e}");
        let t = input(vec![vec![p2p(7, true, 5, 10, vec![])], vec![]]);
        let e = format!("{:#}", Job::build(&t).unwrap_err());
        assert!(e.contains("node 7") && e.contains("outside the job"), "{e}");
        let t = input(vec![vec![p2p(7, true, 1, 10, vec![])], vec![]]);
        let e = format!("{:#}", Job::build(&t).unwrap_err());
        assert!(e.contains("node 7") && e.contains("no matching receive"), "{e}");
        let mut t = input(vec![vec![coll(3, OpKind::AllReduce, Some("g"), 8, vec![])], vec![]]);
        t.groups.insert("g".into(), vec![0, 4]);
        let e = format!("{:#}", Job::build(&t).unwrap_err());
        assert!(e.contains("rank 4") && e.contains("2 ranks"), "{e}");
    }
}
