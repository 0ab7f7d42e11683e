//! Topology-aware rank placement (`fabric place`): divide a job's ranks among zones, and inside a
//! zone among racks, so that as little traffic as possible crosses the oversubscribed tiers.
//!
//! The job's communication is a weighted graph over ranks (edge weight: bytes exchanged in either
//! direction per iteration). Placement is a capacitated min-cut partitioning of that graph:
//! recursive bisection, each bisection refined with Fiduccia–Mattheyses (single-vertex moves
//! by best gain, vertices locked once moved, the best prefix of each pass kept) from several
//! seeded starts, with each side's size held between what the other side's capacity forces and
//! its own capacity. Zones first, then racks within each zone; hosts of a rack in order.
use anyhow::{Context as _, Result, bail, ensure};
use serde::{Deserialize, Serialize};

use crate::{
    model::plan::{NodeId, Plan},
    model::workload::{Collective, SplitMix64, schedule},
};

/// A symmetric traffic graph over `n` ranks (dense: jobs placed here have at most thousands).
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    pub n: usize,
    w: Vec<f64>,
}

impl Graph {
    pub fn new(n: usize) -> Self {
        Graph { n, w: vec![0.0; n * n] }
    }

    /// Adds `bytes` between `a` and `b` (either direction). A self-loop crosses no link and is
    /// ignored (a job file's `[[traffic]]` refuses one, as a mistake).
    pub fn add(&mut self, a: usize, b: usize, bytes: f64) {
        if a != b {
            self.w[a * self.n + b] += bytes;
            self.w[b * self.n + a] += bytes;
        }
    }

    pub fn weight(&self, a: usize, b: usize) -> f64 {
        self.w[a * self.n + b]
    }

    /// The traffic of one iteration of a collective.
    pub fn of_collective(c: Collective, ranks: usize, message_bytes: u64, seed: u64) -> Self {
        let mut g = Graph::new(ranks);
        for t in schedule(c, ranks, message_bytes, seed).iter().flatten() {
            g.add(t.src, t.dst, t.bytes as f64);
        }
        g
    }

    /// Weight of the edges whose ends are in different parts.
    pub fn cut(&self, part: &[usize]) -> f64 {
        let mut c = 0.0;
        for a in 0..self.n {
            for b in a + 1..self.n {
                if part[a] != part[b] {
                    c += self.weight(a, b);
                }
            }
        }
        c
    }
}

/// Splits `verts` in two with `lo..=hi` of them on the left, starting `starts` times from a
/// random split with `size` on the left, and refining each with FM; returns for each of `verts`
/// whether it is on the left, for the start that ended with the smallest cut.
fn bisect(
    g: &Graph,
    verts: &[usize],
    lo: usize,
    hi: usize,
    size: usize,
    rng: &mut SplitMix64,
    starts: usize,
) -> Vec<bool> {
    let n = verts.len();
    let w = |i: usize, j: usize| g.weight(verts[i], verts[j]);
    let cut_of = |left: &[bool]| {
        let mut c = 0.0;
        for i in 0..n {
            for j in i + 1..n {
                if left[i] != left[j] {
                    c += w(i, j);
                }
            }
        }
        c
    };
    let mut best: Option<(f64, Vec<bool>)> = None;
    for _ in 0..starts.max(1) {
        let mut order: Vec<usize> = (0..n).collect();
        rng.shuffle(&mut order);
        let mut left = vec![false; n];
        for &i in &order[..size] {
            left[i] = true;
        }
        fm_refine(n, &w, &mut left, lo, hi);
        let c = cut_of(&left);
        if best.as_ref().is_none_or(|b| c < b.0 - 1e-9) {
            best = Some((c, left));
        }
    }
    best.expect("at least one start").1
}

/// Fiduccia–Mattheyses passes until one brings no improvement.
fn fm_refine(n: usize, w: &impl Fn(usize, usize) -> f64, left: &mut [bool], lo: usize, hi: usize) {
    loop {
        // gain[v]: how much the cut shrinks if v changes side.
        let mut gain: Vec<f64> = (0..n)
            .map(|v| (0..n).filter(|&u| u != v).map(|u| if left[u] != left[v] { w(v, u) } else { -w(v, u) }).sum())
            .collect();
        let mut locked = vec![false; n];
        let mut size = left.iter().filter(|&&l| l).count();
        let mut moves = Vec::new();
        let (mut total, mut best_total, mut best_len) = (0.0, 0.0, 0);
        loop {
            let candidate = (0..n)
                .filter(|&v| !locked[v])
                // One vertex of slack beyond the size range inside a pass (an exactly balanced
                // bisection could not move at all); only legal prefixes are kept.
                .filter(|&v| if left[v] { size + 1 > lo } else { size < hi + 1 })
                .max_by(|&a, &b| gain[a].total_cmp(&gain[b]).then(b.cmp(&a)));
            let Some(v) = candidate else { break };
            total += gain[v];
            locked[v] = true;
            left[v] = !left[v];
            if left[v] {
                size += 1;
            } else {
                size -= 1;
            }
            moves.push(v);
            for u in 0..n {
                if u != v {
                    // v's move turns u's edge to v from internal to external or back.
                    let d = 2.0 * w(u, v);
                    gain[u] += if left[u] != left[v] { d } else { -d };
                }
            }
            gain[v] = -gain[v];
            if total > best_total + 1e-9 && (lo..=hi).contains(&size) {
                best_total = total;
                best_len = moves.len();
            }
        }
        for &v in moves[best_len..].iter().rev() {
            left[v] = !left[v];
        }
        if best_len == 0 {
            return;
        }
    }
}

/// Assigns each vertex of `verts` to one of the parts, part `i` holding at most `caps[i]`
/// vertices, minimising the weight between parts (recursive bisection + FM). Returns the part of
/// each of `verts`.
pub fn partition_vertices(g: &Graph, verts: &[usize], caps: &[usize], seed: u64) -> Result<Vec<usize>> {
    ensure!(!caps.is_empty(), "no parts to place onto");
    let total: usize = caps.iter().sum();
    ensure!(verts.len() <= total, "{} ranks but only {total} places", verts.len());
    let mut out = vec![0; verts.len()];
    let mut rng = SplitMix64(seed ^ 0x5EED_0FB1_5EC7);
    recurse(g, verts, &(0..verts.len()).collect::<Vec<_>>(), caps, 0, &mut out, &mut rng);
    Ok(out)
}

/// Parts of the vertices `idx` (indices into `verts`), written into `out`. Each bisection is
/// tried from the two extreme sizes (one side packed full: often no cut at all) and the middle
/// one, and the split whose whole recursive result cuts least is kept: greedy bisection alone
/// can take a cheap split at the top that forces expensive ones below.
fn recurse(
    g: &Graph,
    verts: &[usize],
    idx: &[usize],
    caps: &[usize],
    base: usize,
    out: &mut [usize],
    rng: &mut SplitMix64,
) {
    if caps.len() == 1 || idx.is_empty() {
        for &i in idx {
            out[i] = base;
        }
        return;
    }
    let mid = caps.len() / 2;
    let (cl, cr): (usize, usize) = (caps[..mid].iter().sum(), caps[mid..].iter().sum());
    let n = idx.len();
    let (lo, hi) = (n.saturating_sub(cr), n.min(cl));
    let sub: Vec<usize> = idx.iter().map(|&i| verts[i]).collect();
    let mut sizes = vec![hi, lo, (lo + hi).div_ceil(2)];
    sizes.dedup();
    let mut best: Option<(f64, Vec<usize>)> = None;
    for size in sizes {
        let left = bisect(g, &sub, lo, hi, size, rng, 6);
        let (mut l, mut r) = (Vec::new(), Vec::new());
        for (&i, &is_left) in idx.iter().zip(&left) {
            if is_left { l.push(i) } else { r.push(i) }
        }
        let mut trial = out.to_vec();
        recurse(g, verts, &l, &caps[..mid], base, &mut trial, rng);
        recurse(g, verts, &r, &caps[mid..], base + mid, &mut trial, rng);
        let mut cut = 0.0;
        for (a, &i) in idx.iter().enumerate() {
            for &j in &idx[a + 1..] {
                if trial[i] != trial[j] {
                    cut += g.weight(verts[i], verts[j]);
                }
            }
        }
        if best.as_ref().is_none_or(|b| cut < b.0 - 1e-9) {
            best = Some((cut, idx.iter().map(|&i| trial[i]).collect()));
        }
    }
    for (&i, p) in idx.iter().zip(best.expect("a size").1) {
        out[i] = p;
    }
}

/// All ranks of `g` onto parts of the given capacities.
pub fn partition(g: &Graph, caps: &[usize], seed: u64) -> Result<Vec<usize>> {
    partition_vertices(g, &(0..g.n).collect::<Vec<_>>(), caps, seed)
}

/// The host of each rank: ranks divided among zones (capacity: the zone's hosts), then within
/// each zone among its racks, each by min-cut.
pub fn place(plan: &Plan, g: &Graph, seed: u64) -> Result<Vec<NodeId>> {
    place_on(plan, &plan.hosts().collect::<Vec<_>>(), g, seed)
}

/// [`place`] on a subset of the hosts (the free ones, when other jobs or a scheduler hold the
/// rest): each zone's and rack's capacity is its free hosts.
pub fn place_on(plan: &Plan, free: &[NodeId], g: &Graph, seed: u64) -> Result<Vec<NodeId>> {
    ensure!(g.n >= 2, "a job needs at least 2 ranks");
    check_ranks_fit(g.n, free.len(), plan.hosts().count())?;
    // Zones -> racks -> hosts, in plan order.
    let mut hosts = free.to_vec();
    hosts.sort_unstable();
    let mut zones: Vec<Vec<Vec<NodeId>>> = Vec::new();
    for &h in &hosts {
        let (z, r) = (plan.nodes[h].zone.unwrap_or(0), plan.nodes[h].rack.unwrap_or(0));
        if zones.len() <= z {
            zones.resize(z + 1, Vec::new());
        }
        if zones[z].len() <= r {
            zones[z].resize(r + 1, Vec::new());
        }
        zones[z][r].push(h);
    }
    zones.retain(|z| z.iter().any(|r| !r.is_empty()));
    let zone_caps: Vec<usize> = zones.iter().map(|z| z.iter().map(Vec::len).sum()).collect();
    let ranks: Vec<usize> = (0..g.n).collect();
    let zone_of = partition_vertices(g, &ranks, &zone_caps, seed)?;
    let mut placed = vec![usize::MAX; g.n];
    for (zi, zone) in zones.iter().enumerate() {
        let members: Vec<usize> = ranks.iter().copied().filter(|&r| zone_of[r] == zi).collect();
        if members.is_empty() {
            continue;
        }
        let racks: Vec<&Vec<NodeId>> = zone.iter().filter(|r| !r.is_empty()).collect();
        let caps: Vec<usize> = racks.iter().map(|r| r.len()).collect();
        let rack_of = partition_vertices(g, &members, &caps, seed.wrapping_add(zi as u64 + 1))?;
        let mut used = vec![0; racks.len()];
        for (k, &rank) in members.iter().enumerate() {
            let r = rack_of[k];
            placed[rank] = racks[r][used[r]];
            used[r] += 1;
        }
    }
    ensure!(placed.iter().all(|&h| h != usize::MAX), "internal: a rank was not placed");
    Ok(placed)
}

/// Refuses `ranks` ranks on `free` of `total` hosts. Called before a job's traffic graph or
/// schedule is built: both grow as ranks squared, so a mistyped rank count would exhaust memory
/// before the placement could say it does not fit.
pub fn check_ranks_fit(ranks: usize, free: usize, total: usize) -> Result<()> {
    let busy = total.saturating_sub(free);
    if busy == 0 {
        ensure!(ranks <= free, "{ranks} ranks but the topology has only {free} hosts");
    } else {
        ensure!(ranks <= free, "{ranks} ranks but only {free} hosts are free ({busy} busy)");
    }
    Ok(())
}

/// Bytes per iteration between ranks placed in different zones (both directions).
pub fn cross_zone_bytes(plan: &Plan, g: &Graph, hosts: &[NodeId]) -> f64 {
    let zone: Vec<usize> = hosts.iter().map(|&h| plan.nodes[h].zone.unwrap_or(0)).collect();
    g.cut(&zone)
}

/// A job for `fabric place`: its ranks and how they communicate.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    pub ranks: usize,
    /// A collective (allreduce, alltoall, incast, permutation) ...
    #[serde(default)]
    pub collective: Option<Collective>,
    /// ... with this message per rank (K, M, G, Ki, Mi, Gi; default [`DEFAULT_MESSAGE`]) and
    /// this seed of its permutation (default 0) ...
    #[serde(default)]
    pub message: Option<crate::model::units::Size>,
    #[serde(default)]
    pub seed: Option<u64>,
    /// ... or an explicit traffic matrix: `[[traffic]] src = 0, dst = 1, bytes = 1000000`.
    #[serde(default)]
    pub traffic: Vec<TrafficEntry>,
}

/// A collective job's message per rank when its file gives none: 4 MiB.
pub const DEFAULT_MESSAGE: crate::model::units::Size = crate::model::units::Size(4 << 20);

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficEntry {
    pub src: usize,
    pub dst: usize,
    pub bytes: u64,
}

impl Job {
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading job {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("job file {}", path.display()))
    }

    pub fn graph(&self) -> Result<Graph> {
        ensure!(self.ranks >= 2, "ranks: {}; a job needs at least 2", self.ranks);
        match (&self.collective, self.traffic.is_empty()) {
            (Some(c), true) => {
                let message = self.message.unwrap_or(DEFAULT_MESSAGE).get();
                ensure!(message > 0, "message: must be at least 1 byte");
                Ok(Graph::of_collective(*c, self.ranks, message, self.seed.unwrap_or(0)))
            }
            (None, false) => {
                ensure!(
                    self.message.is_none() && self.seed.is_none(),
                    "`message` and `seed` belong to a `collective`; a `[[traffic]]` job gives each entry's bytes"
                );
                let mut g = Graph::new(self.ranks);
                for (i, t) in self.traffic.iter().enumerate() {
                    let last = self.ranks - 1;
                    ensure!(t.src <= last, "traffic[{i}].src: rank {} does not exist (ranks 0..={last})", t.src);
                    ensure!(t.dst <= last, "traffic[{i}].dst: rank {} does not exist (ranks 0..={last})", t.dst);
                    ensure!(t.src != t.dst, "traffic[{i}]: rank {} sends to itself", t.src);
                    g.add(t.src, t.dst, t.bytes as f64);
                }
                Ok(g)
            }
            (Some(_), false) => bail!("give either `collective` or `[[traffic]]`, not both"),
            (None, true) => bail!("the job has no communication: give `collective` or `[[traffic]]`"),
        }
    }
}

/// What `fabric place` prints.
#[derive(Debug, Serialize)]
pub struct Placed {
    pub hosts: Vec<String>,
    /// `hosts:H1,H2,...`, for `fabric run --placement`.
    pub placement: String,
    pub cross_zone_bytes: f64,
    /// For comparison: the same job placed contiguously and at random (seed 1).
    pub contiguous_cross_zone_bytes: f64,
    pub random_cross_zone_bytes: f64,
}

pub fn place_job(plan: &Plan, job: &Job, seed: u64) -> Result<Placed> {
    let hosts = plan.hosts().count();
    check_ranks_fit(job.ranks, hosts, hosts).context("ranks")?;
    let g = job.graph()?;
    let hosts = place(plan, &g, seed)?;
    let names: Vec<String> = hosts.iter().map(|&h| plan.nodes[h].name.clone()).collect();
    let other =
        |p: crate::model::placement::Placement| -> Result<f64> { Ok(cross_zone_bytes(plan, &g, &p.place(plan, g.n)?)) };
    Ok(Placed {
        placement: format!("hosts:{}", names.join(",")),
        cross_zone_bytes: cross_zone_bytes(plan, &g, &hosts),
        contiguous_cross_zone_bytes: other(crate::model::placement::Placement::Contiguous)?,
        random_cross_zone_bytes: other(crate::model::placement::Placement::Random { seed: 1 })?,
        hosts: names,
    })
}

/// `fabric place --topology F --job JOB.toml`.
#[derive(Clone, Debug, clap::Args)]
pub struct PlaceArgs {
    /// Topology file (default: the embedded one).
    #[arg(long)]
    pub topology: Option<std::path::PathBuf>,
    /// The job: `ranks`, and `collective` (with `message`, default 4Mi, and `seed`) or
    /// `[[traffic]]` entries (src, dst, bytes).
    #[arg(long)]
    pub job: std::path::PathBuf,
    /// Seed of the partitioner's random starts.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the placement as JSON (rank order of hosts, cross-zone bytes) instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn main(args: &PlaceArgs) -> Result<()> {
    let topo = crate::model::topology::Topology::load(args.topology.as_deref())?;
    let plan = Plan::new(&topo);
    let job = Job::from_file(&args.job)?;
    let p = place_job(&plan, &job, args.seed).with_context(|| format!("job file {}", args.job.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(());
    }
    println!("{:>5}  {:<10} zone", "rank", "host");
    for (r, h) in p.hosts.iter().enumerate() {
        let zone =
            plan.node_by_name(h).and_then(|n| plan.nodes[n].zone).map_or("-".into(), |z| topo.zones[z].name.clone());
        println!("{r:>5}  {h:<10} {zone}");
    }
    let mib = |b: f64| b / (1u64 << 20) as f64;
    println!(
        "cross-zone traffic per iteration: {:.2} MiB (contiguous placement {:.2} MiB, random:1 {:.2} MiB)",
        mib(p.cross_zone_bytes),
        mib(p.contiguous_cross_zone_bytes),
        mib(p.random_cross_zone_bytes)
    );
    println!("fabric run --placement {}", p.placement);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::topology::Topology;

    /// The minimum cut over every assignment respecting the capacities (small graphs only).
    fn brute_force(g: &Graph, caps: &[usize]) -> f64 {
        let k = caps.len();
        let mut best = f64::INFINITY;
        let mut part = vec![0; g.n];
        let total = k.pow(g.n as u32);
        for code in 0..total {
            let mut c = code;
            let mut count = vec![0; k];
            for p in part.iter_mut() {
                *p = c % k;
                c /= k;
                count[*p] += 1;
            }
            if count.iter().zip(caps).all(|(n, cap)| n <= cap) {
                best = best.min(g.cut(&part));
            }
        }
        best
    }

    fn check(g: &Graph, caps: &[usize]) -> Vec<usize> {
        let p = partition(g, caps, 7).unwrap();
        for (i, &cap) in caps.iter().enumerate() {
            assert!(p.iter().filter(|&&x| x == i).count() <= cap, "part {i} over capacity: {p:?}");
        }
        p
    }

    #[test]
    fn two_cliques_joined_by_one_edge_split_at_that_edge() {
        let mut g = Graph::new(8);
        for a in 0..4 {
            for b in a + 1..4 {
                g.add(a, b, 10.0);
                g.add(a + 4, b + 4, 10.0);
            }
        }
        g.add(3, 4, 1.0);
        // Interleave the labels so that the answer is not the identity.
        let perm = [0, 4, 1, 5, 2, 6, 3, 7];
        let mut h = Graph::new(8);
        for a in 0..8 {
            for b in 0..8 {
                if a < b {
                    h.add(perm[a], perm[b], g.weight(a, b));
                }
            }
        }
        let p = check(&h, &[4, 4]);
        assert_eq!(h.cut(&p), 1.0);
    }

    #[test]
    fn a_ring_over_two_zones_is_cut_twice() {
        for n in [8, 12, 16] {
            let g = Graph::of_collective(Collective::Allreduce, n, 1 << 20, 0);
            let p = check(&g, &[n / 2, n / 2]);
            let edge = g.weight(0, 1);
            assert_eq!(g.cut(&p), 2.0 * edge, "n = {n}: {p:?}");
        }
    }

    #[test]
    fn a_job_that_fits_one_zone_is_not_split() {
        let g = Graph::of_collective(Collective::Allreduce, 4, 1 << 20, 0);
        let p = check(&g, &[4, 4]);
        assert_eq!(g.cut(&p), 0.0);
        let p = check(&g, &[3, 8]);
        assert_eq!(g.cut(&p), 0.0, "the bigger zone takes the whole job: {p:?}");
    }

    #[test]
    fn a_grid_is_cut_along_its_middle() {
        // 4 x 4 grid: the optimal balanced cut is 4 edges.
        let mut g = Graph::new(16);
        for r in 0..4 {
            for c in 0..4 {
                if c < 3 {
                    g.add(r * 4 + c, r * 4 + c + 1, 1.0);
                }
                if r < 3 {
                    g.add(r * 4 + c, (r + 1) * 4 + c, 1.0);
                }
            }
        }
        let p = check(&g, &[8, 8]);
        assert_eq!(g.cut(&p), 4.0);
    }

    #[test]
    fn random_graphs_match_brute_force() {
        let mut rng = SplitMix64(42);
        for case in 0..30 {
            let n = 6 + case % 4;
            let mut g = Graph::new(n);
            for a in 0..n {
                for b in a + 1..n {
                    if rng.below(3) == 0 {
                        g.add(a, b, (1 + rng.below(9)) as f64);
                    }
                }
            }
            let caps: Vec<usize> = match case % 3 {
                0 => vec![n / 2, n - n / 2],
                1 => vec![n / 3 + 1, n / 3 + 1, n],
                _ => vec![2, 2, 2, n],
            };
            let p = check(&g, &caps);
            assert_eq!(g.cut(&p), brute_force(&g, &caps), "case {case}: {p:?}");
        }
    }

    #[test]
    fn placement_on_two_zones_beats_random() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed/two-zones.toml");
        let plan = Plan::new(&Topology::load(Some(&path)).unwrap());
        let job = Job {
            ranks: 8,
            collective: Some(Collective::Allreduce),
            message: Some(crate::model::units::Size(8 << 20)),
            seed: None,
            traffic: vec![],
        };
        let g = job.graph().unwrap();
        let placed = place_job(&plan, &job, 1).unwrap();
        // A ring over two zones of 4 must cross twice: 2 x (2 x 7 steps x 1 MiB) both ways.
        assert_eq!(placed.cross_zone_bytes, g.weight(0, 1) * 2.0);
        for seed in 1..10 {
            let random = crate::model::placement::Placement::Random { seed }.place(&plan, 8).unwrap();
            assert!(cross_zone_bytes(&plan, &g, &random) >= placed.cross_zone_bytes);
        }
        let mut hosts = placed.hosts.clone();
        hosts.sort();
        hosts.dedup();
        assert_eq!(hosts.len(), 8, "every rank on its own host");
    }

    /// On free hosts only, a 2-rank ring takes the one rack with two free hosts (no cut), and a
    /// job larger than the free hosts is refused with the count.
    #[test]
    fn placement_on_free_hosts_fills_the_rack_that_holds_the_job() {
        let plan = Plan::new(&Topology::default_topology());
        let h = |n: &str| plan.node_by_name(n).unwrap();
        let free = [h("z0r0h0"), h("z0r1h0"), h("z0r2h1"), h("z0r1h1")];
        let g = Graph::of_collective(Collective::Allreduce, 2, 1 << 20, 0);
        let mut placed = place_on(&plan, &free, &g, 1).unwrap();
        placed.sort_unstable();
        assert_eq!(placed, [h("z0r1h0"), h("z0r1h1")]);
        let g = Graph::of_collective(Collective::Allreduce, 5, 1 << 20, 0);
        let err = place_on(&plan, &free, &g, 1).unwrap_err().to_string();
        assert!(err.contains("5 ranks but only 4 hosts are free (4 busy)"), "{err}");
        let all: Vec<NodeId> = plan.hosts().collect();
        let g = Graph::of_collective(Collective::Allreduce, 9, 1 << 20, 0);
        let err = place_on(&plan, &all, &g, 1).unwrap_err().to_string();
        assert!(err.contains("9 ranks but the topology has only 8 hosts"), "{err}");
    }

    /// The rank count is checked against the hosts before the graph (n^2 weights) is built: a
    /// huge count is refused at once, and comes first even in a job with another mistake.
    #[test]
    fn too_many_ranks_are_refused_before_the_graph_is_built() {
        let plan = Plan::new(&Topology::default_topology());
        let job: Job = toml::from_str("ranks = 100000\ncollective = \"alltoall\"\n").unwrap();
        let e = format!("{:#}", place_job(&plan, &job, 1).unwrap_err());
        assert_eq!(e, "ranks: 100000 ranks but the topology has only 8 hosts");
        // Without `collective` or `[[traffic]]` the graph itself would be refused first.
        let job: Job = toml::from_str("ranks = 9\n").unwrap();
        let e = format!("{:#}", place_job(&plan, &job, 1).unwrap_err());
        assert!(e.contains("9 ranks but the topology has only 8 hosts"), "{e}");
    }

    #[test]
    fn job_files() {
        let j: Job = toml::from_str("ranks = 4\ncollective = \"allreduce\"\nmessage = \"1Mi\"\n").unwrap();
        assert!(j.graph().unwrap().weight(0, 1) > 0.0);
        let j: Job = toml::from_str("ranks = 3\n[[traffic]]\nsrc = 0\ndst = 2\nbytes = 5\n").unwrap();
        assert_eq!(j.graph().unwrap().weight(2, 0), 5.0);
        let j: Job = toml::from_str("ranks = 3\n").unwrap();
        assert!(j.graph().is_err());
        let j: Job = toml::from_str("ranks = 2\n[[traffic]]\nsrc = 0\ndst = 2\nbytes = 5\n").unwrap();
        assert!(j.graph().is_err());
        // A collective's own fields beside a traffic matrix would be ignored: refused.
        for field in ["message = \"1Mi\"", "seed = 3"] {
            let j: Job =
                toml::from_str(&format!("ranks = 3\n{field}\n[[traffic]]\nsrc = 0\ndst = 2\nbytes = 5\n")).unwrap();
            let e = j.graph().unwrap_err().to_string();
            assert!(e.contains("`message` and `seed` belong to a `collective`"), "{field}: {e}");
        }
        // A collective without a message sends the default one.
        let j: Job = toml::from_str("ranks = 2\ncollective = \"allreduce\"\n").unwrap();
        let with_default: Job = toml::from_str("ranks = 2\ncollective = \"allreduce\"\nmessage = \"4Mi\"\n").unwrap();
        assert_eq!(j.graph().unwrap().weight(0, 1), with_default.graph().unwrap().weight(0, 1));
    }

    /// Every field of a job file out of range is refused with the field named: when the file is
    /// read (types, unknown fields, malformed sizes) or when the job is built (ranges).
    #[test]
    fn bad_job_files_name_the_field() {
        for (text, needle) in [
            ("ranks = 1\ncollective = \"allreduce\"\n", "ranks: 1; a job needs at least 2"),
            ("ranks = 4\ncollective = \"allreduce\"\nmessage = \"0\"\n", "message"),
            (
                "ranks = 3\n[[traffic]]\nsrc = 0\ndst = 3\nbytes = 5\n",
                "traffic[0].dst: rank 3 does not exist (ranks 0..=2)",
            ),
            (
                "ranks = 3\n[[traffic]]\nsrc = 0\ndst = 1\nbytes = 5\n[[traffic]]\nsrc = 4\ndst = 1\nbytes = 5\n",
                "traffic[1].src: rank 4",
            ),
            ("ranks = 3\n[[traffic]]\nsrc = 1\ndst = 1\nbytes = 5\n", "traffic[0]: rank 1 sends to itself"),
            ("ranks = 3\n", "collective"),
        ] {
            let j: Job = toml::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let e = format!("{:#}", j.graph().expect_err(text));
            assert!(e.contains(needle), "{text}: {e}");
        }
        for (text, needle) in [
            ("ranks = 4\ncollective = \"ring\"\n", "ring"),
            ("ranks = 4\ncollective = \"allreduce\"\nmessage = \"4X\"\n", "4X"),
            ("ranks = -4\n", "ranks"),
            ("ranks = 4\nrankz = 2\n", "rankz"),
        ] {
            let e = toml::from_str::<Job>(text).expect_err(text).to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
