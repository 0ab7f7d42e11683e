//! Max-min fair rates by progressive filling, and the completion time of a set of flows that
//! share links fairly (rates recomputed whenever flows finish).
//!
//! Progressive filling: every unfrozen flow's rate rises together; the first link to fill (the
//! smallest remaining capacity over unfrozen flows crossing it) freezes its flows at that share.
//! A link's share only grows as flows elsewhere freeze, so a lazy min-heap of shares finds each
//! bottleneck in O(log links): O((flows x hops + links) log links) per allocation.
use std::{cmp::Reverse, collections::BinaryHeap};

/// Flows as lists of directed-link ids (compressed rows).
#[derive(Clone, Debug, Default)]
pub struct Paths {
    offsets: Vec<u32>,
    links: Vec<u32>,
}

impl Paths {
    pub fn new() -> Self {
        Paths { offsets: vec![0], links: Vec::new() }
    }

    pub fn push(&mut self, path: impl IntoIterator<Item = u32>) {
        self.links.extend(path);
        self.offsets.push(self.links.len() as u32);
    }

    /// Appends to the last flow (started with `start_flow`).
    pub fn start_flow(&mut self) {
        self.offsets.push(self.links.len() as u32);
    }

    pub fn extend_last(&mut self, link: u32) {
        self.links.push(link);
        *self.offsets.last_mut().expect("a flow was started") = self.links.len() as u32;
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn path(&self, f: usize) -> &[u32] {
        &self.links[self.offsets[f] as usize..self.offsets[f + 1] as usize]
    }
}

#[derive(PartialEq)]
struct Share(f64);
impl Eq for Share {}
impl PartialOrd for Share {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Share {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// Max-min fair rates of the `active` flows over links of `capacity` (inactive flows get 0; a
/// flow crossing no link gets infinity).
pub fn max_min(capacity: &[f64], paths: &Paths, active: &[bool]) -> Vec<f64> {
    let n = paths.len();
    let mut rate = vec![0.0; n];
    let mut rem = capacity.to_vec();
    let mut count = vec![0u32; capacity.len()];
    // Flows by link (compressed rows), active ones only.
    let mut by_link_off = vec![0u32; capacity.len() + 1];
    for f in (0..n).filter(|&f| active[f]) {
        if paths.path(f).is_empty() {
            rate[f] = f64::INFINITY;
        }
        for &l in paths.path(f) {
            count[l as usize] += 1;
            by_link_off[l as usize + 1] += 1;
        }
    }
    for l in 0..capacity.len() {
        by_link_off[l + 1] += by_link_off[l];
    }
    let mut fill = by_link_off.clone();
    let mut by_link = vec![0u32; by_link_off[capacity.len()] as usize];
    for f in (0..n).filter(|&f| active[f]) {
        for &l in paths.path(f) {
            by_link[fill[l as usize] as usize] = f as u32;
            fill[l as usize] += 1;
        }
    }
    let mut frozen = vec![false; n];
    let mut heap: BinaryHeap<Reverse<(Share, u32)>> = (0..capacity.len())
        .filter(|&l| count[l] > 0)
        .map(|l| Reverse((Share(rem[l] / count[l] as f64), l as u32)))
        .collect();
    // Links whose share changed while a bottleneck's flows froze: re-queued once each.
    let mut dirty = vec![false; capacity.len()];
    let mut touched = Vec::new();
    while let Some(Reverse((Share(s), l))) = heap.pop() {
        let l = l as usize;
        if count[l] == 0 {
            continue;
        }
        let cur = (rem[l] / count[l] as f64).max(0.0);
        if cur > s + 1e-12 * cur.abs().max(1.0) {
            heap.push(Reverse((Share(cur), l as u32)));
            continue;
        }
        for i in by_link_off[l]..by_link_off[l + 1] {
            let f = by_link[i as usize] as usize;
            if frozen[f] {
                continue;
            }
            frozen[f] = true;
            rate[f] = cur;
            for &l2 in paths.path(f) {
                let l2 = l2 as usize;
                rem[l2] -= cur;
                count[l2] -= 1;
                if !dirty[l2] {
                    dirty[l2] = true;
                    touched.push(l2);
                }
            }
        }
        for l2 in touched.drain(..) {
            dirty[l2] = false;
            if count[l2] > 0 {
                heap.push(Reverse((Share((rem[l2] / count[l2] as f64).max(0.0)), l2 as u32)));
            }
        }
    }
    rate
}

/// When the last of the flows (`bits` each) completes if all start together and share links
/// max-min fairly, rates recomputed as flows finish (flows finishing within 0.1 % of each
/// other are retired together; after `max_rounds` recomputations the remaining flows keep
/// their rates). Returns (seconds, recomputations).
///
/// When all flows are the same size (within 0.1 %: every collective here stripes equal
/// shares), one allocation gives the answer: the slowest flows' bottleneck is saturated by
/// flows at that same rate, which finish together and so never speed up.
pub fn completion_time(capacity: &[f64], paths: &Paths, bits: &[f64], max_rounds: usize) -> (f64, usize) {
    let n = paths.len();
    let sizes = bits.iter().filter(|&&b| b > 0.0);
    let (lo, hi) = sizes.fold((f64::INFINITY, 0.0f64), |(lo, hi), &b| (lo.min(b), hi.max(b)));
    let max_rounds = if hi <= lo * 1.001 { 1 } else { max_rounds };
    let mut left: Vec<f64> = bits.to_vec();
    let mut active: Vec<bool> = left.iter().map(|&b| b > 0.0).collect();
    let mut t = 0.0;
    let mut rounds = 0;
    while active.iter().any(|&a| a) {
        let rate = max_min(capacity, paths, &active);
        rounds += 1;
        let finish = |f: usize| {
            if rate[f] > 0.0 { left[f] / rate[f] } else { f64::INFINITY }
        };
        if rounds >= max_rounds {
            return (t + (0..n).filter(|&f| active[f]).map(finish).fold(0.0, f64::max), rounds);
        }
        let dt = (0..n).filter(|&f| active[f]).map(finish).fold(f64::INFINITY, f64::min);
        if !dt.is_finite() {
            return (f64::INFINITY, rounds);
        }
        t += dt;
        let done: Vec<bool> = (0..n).map(|f| active[f] && finish(f) <= dt * 1.001).collect();
        for f in 0..n {
            if active[f] {
                if done[f] {
                    active[f] = false;
                    left[f] = 0.0;
                } else {
                    left[f] -= rate[f] * dt;
                }
            }
        }
    }
    (t, rounds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(p: &[&[u32]]) -> Paths {
        let mut ps = Paths::new();
        for x in p {
            ps.push(x.iter().copied());
        }
        ps
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn classic_max_min_examples() {
        // Two links of 10 and 4: A crosses both, B only the first, C only the second.
        let p = paths(&[&[0, 1], &[0], &[1]]);
        let r = max_min(&[10.0, 4.0], &p, &[true; 3]);
        assert!(close(&r, &[2.0, 8.0, 2.0]), "{r:?}");
        // Three flows on one link, one of them also on a narrow one.
        let p = paths(&[&[0], &[0], &[0, 1]]);
        let r = max_min(&[9.0, 1.0], &p, &[true; 3]);
        assert!(close(&r, &[4.0, 4.0, 1.0]), "{r:?}");
        // The textbook line: links 1..3 of capacity 1, a long flow over all, one short per link.
        let p = paths(&[&[0, 1, 2], &[0], &[1], &[2]]);
        let r = max_min(&[1.0, 1.0, 1.0], &p, &[true; 4]);
        assert!(close(&r, &[0.5, 0.5, 0.5, 0.5]), "{r:?}");
        // An inactive flow takes nothing.
        let r = max_min(&[1.0, 1.0, 1.0], &p, &[false, true, true, true]);
        assert!(close(&r, &[0.0, 1.0, 1.0, 1.0]), "{r:?}");
    }

    #[test]
    fn completion_accounts_for_flows_that_finish_early() {
        // Two flows share a link of 10: 10 bits and 30 bits. Both at 5 until t=2, then the
        // long one alone at 10 for its last 20 bits: done at 4.
        let p = paths(&[&[0], &[0]]);
        let (t, rounds) = completion_time(&[10.0], &p, &[10.0, 30.0], 100);
        assert!((t - 4.0).abs() < 1e-9 && rounds == 2, "{t} {rounds}");
        // Equal flows: one round.
        let (t, rounds) = completion_time(&[10.0], &p, &[10.0, 10.0], 100);
        assert!((t - 2.0).abs() < 1e-9 && rounds == 1);
    }
}
