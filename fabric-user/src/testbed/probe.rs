//! `fabric ping`: ICMP and ICMPv6 echo between host pairs, through the XDP fabric. Small
//! testbeds check every ordered pair; large ones a seeded sample that still has every host send
//! and receive and every rack reach every rack (all pairs grow with the square of the hosts:
//! 4,192,256 of them at 2,048 hosts).
use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::{AsFd as _, AsRawFd, FromRawFd, OwnedFd},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, ensure};
use fabric_common::rng::SplitMix64;
use serde::Serialize;

use crate::{model::plan::NodeId, state::State, sys::netns};

/// Up to this many hosts, `fabric ping` checks every ordered pair by default.
pub const ALL_PAIRS_UP_TO: usize = 64;

/// Which ordered host pairs to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Selection {
    /// Every ordered pair.
    All,
    /// Every host as source and as destination, and every ordered rack pair (a rack to
    /// itself where it has two hosts): each path shape RTSW -> spine(s) -> RTSW.
    Cover,
    /// At least this many pairs: every host as source and as destination, the rest drawn at
    /// random.
    Sample(usize),
}

impl Selection {
    /// All pairs up to [`ALL_PAIRS_UP_TO`] hosts, the covering sample above.
    pub fn default_for(hosts: usize) -> Self {
        if hosts <= ALL_PAIRS_UP_TO { Selection::All } else { Selection::Cover }
    }
}

/// What a set of ordered host pairs covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Coverage {
    pub hosts: usize,
    /// Ordered host pairs checked, and how many there are.
    pub pairs: usize,
    pub pairs_total: usize,
    pub every_host_source: bool,
    pub every_host_destination: bool,
    /// Ordered rack pairs with at least one host pair checked, and how many can have one.
    pub rack_pairs: usize,
    pub rack_pairs_total: usize,
}

impl Coverage {
    /// "checked 4,096 of 4,192,256 pairs: every host as source and destination, every rack pair"
    pub fn describe(&self) -> String {
        let mut what = Vec::new();
        match (self.every_host_source, self.every_host_destination) {
            (true, true) => what.push("every host as source and destination".to_string()),
            (true, false) => what.push("every host as source".to_string()),
            (false, true) => what.push("every host as destination".to_string()),
            (false, false) => {}
        }
        if self.rack_pairs == self.rack_pairs_total {
            what.push(format!("every rack pair ({})", thousands(self.rack_pairs_total)));
        } else {
            what.push(format!("{} of {} rack pairs", thousands(self.rack_pairs), thousands(self.rack_pairs_total)));
        }
        format!("checked {} of {} pairs: {}", thousands(self.pairs), thousands(self.pairs_total), what.join(", "))
    }
}

/// 4192256 -> "4,192,256".
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The ordered pairs `(source, destination)` of host indices `0..racks.len()` to check;
/// `racks[h]` is host h's rack (any ids). Sorted, without duplicates or self pairs, and the same
/// for the same arguments on every machine.
pub fn select_pairs(racks: &[usize], selection: Selection, seed: u64) -> Vec<(usize, usize)> {
    let n = racks.len();
    let total = n * n.saturating_sub(1);
    let all = || (0..n).flat_map(|s| (0..n).filter(move |&d| d != s).map(move |d| (s, d))).collect::<Vec<_>>();
    if n < 2 || selection == Selection::All {
        return all();
    }
    let mut rng = SplitMix64::new(seed ^ 0x7069_6e67); // "ping"
    let mut pairs = BTreeSet::new();
    match selection {
        Selection::All => unreachable!("handled above"),
        Selection::Cover => {
            // Each rack hands out its hosts in a shuffled rotation, one as source per rack
            // pair it sends in and one as destination per pair it receives in, so that a rack
            // appearing in as many pairs as it has hosts has them all take part.
            let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
            for (h, &r) in racks.iter().enumerate() {
                members.entry(r).or_default().push(h);
            }
            let mut members: Vec<Vec<usize>> = members.into_values().collect();
            for m in &mut members {
                rng.shuffle(m);
            }
            let mut next_src: Vec<usize> = members.iter().map(|m| rng.below(m.len())).collect();
            let mut next_dst: Vec<usize> = members.iter().map(|m| rng.below(m.len())).collect();
            for ra in 0..members.len() {
                for rb in 0..members.len() {
                    if ra == rb && members[ra].len() < 2 {
                        continue;
                    }
                    let src = members[ra][next_src[ra] % members[ra].len()];
                    next_src[ra] += 1;
                    let mut dst = members[rb][next_dst[rb] % members[rb].len()];
                    next_dst[rb] += 1;
                    if dst == src {
                        dst = members[rb][next_dst[rb] % members[rb].len()];
                        next_dst[rb] += 1;
                    }
                    pairs.insert((src, dst));
                }
            }
            cover_hosts(n, &mut pairs, &mut rng);
        }
        Selection::Sample(want) => {
            if want >= total {
                return all();
            }
            // A random cycle through every host: each is source once and destination once.
            let mut order: Vec<usize> = (0..n).collect();
            rng.shuffle(&mut order);
            for i in 0..n {
                pairs.insert((order[i], order[(i + 1) % n]));
            }
            if want > total / 2 {
                // Dense: shuffle the others and take what is needed.
                let mut rest: Vec<(usize, usize)> = all().into_iter().filter(|p| !pairs.contains(p)).collect();
                rng.shuffle(&mut rest);
                let need = want.saturating_sub(pairs.len());
                pairs.extend(rest.into_iter().take(need));
            } else {
                while pairs.len() < want {
                    let s = rng.below(n);
                    let d = rng.below(n - 1);
                    pairs.insert((s, if d >= s { d + 1 } else { d }));
                }
            }
        }
    }
    pairs.into_iter().collect()
}

/// Adds pairs until every host is a source and a destination (uncovered sources sent to
/// uncovered destinations where possible).
fn cover_hosts(n: usize, pairs: &mut BTreeSet<(usize, usize)>, rng: &mut SplitMix64) {
    let mut is_src = vec![false; n];
    let mut is_dst = vec![false; n];
    for &(s, d) in pairs.iter() {
        is_src[s] = true;
        is_dst[d] = true;
    }
    let mut dsts: Vec<usize> = (0..n).filter(|&h| !is_dst[h]).collect();
    let mut srcs: Vec<usize> = (0..n).filter(|&h| !is_src[h]).collect();
    rng.shuffle(&mut dsts);
    rng.shuffle(&mut srcs);
    for s in srcs {
        let d = match dsts.iter().position(|&d| d != s) {
            Some(i) => dsts.remove(i),
            None => {
                let d = rng.below(n - 1);
                if d >= s { d + 1 } else { d }
            }
        };
        pairs.insert((s, d));
    }
    for d in dsts {
        let s = rng.below(n - 1);
        pairs.insert((if s >= d { s + 1 } else { s }, d));
    }
}

/// What `pairs` (of host indices, `racks[h]` their racks) covers.
pub fn coverage(racks: &[usize], pairs: &[(usize, usize)]) -> Coverage {
    let n = racks.len();
    let mut sizes: BTreeMap<usize, usize> = BTreeMap::new();
    for &r in racks {
        *sizes.entry(r).or_default() += 1;
    }
    let rack_count = sizes.len();
    let lone = sizes.values().filter(|&&s| s < 2).count();
    let (mut src, mut dst) = (vec![false; n], vec![false; n]);
    let mut rack_pairs = BTreeSet::new();
    for &(s, d) in pairs {
        src[s] = true;
        dst[d] = true;
        rack_pairs.insert((racks[s], racks[d]));
    }
    Coverage {
        hosts: n,
        pairs: pairs.len(),
        pairs_total: n * n.saturating_sub(1),
        every_host_source: n < 2 || src.iter().all(|&b| b),
        every_host_destination: n < 2 || dst.iter().all(|&b| b),
        rack_pairs: rack_pairs.len(),
        rack_pairs_total: rack_count * rack_count - lone,
    }
}

#[derive(Debug, Serialize)]
pub struct PingReport {
    pub selection: Selection,
    pub seed: u64,
    /// Which host pairs were checked.
    pub coverage: Coverage,
    /// Probes sent: ordered host pairs checked times address families (IPv4 and IPv6).
    pub pairs: usize,
    pub reachable: usize,
    /// (source host, destination address) pairs without a reply.
    pub unreachable: Vec<(String, String)>,
}

fn checksum(data: &[u8]) -> u16 {
    fabric_common::checksum::internet_checksum(data)
}

fn echo_request(id: u16, seq: u16, v6: bool) -> Vec<u8> {
    // ICMPv6 checksums cover a pseudo-header: the kernel fills them in for raw ICMPv6 sockets.
    let mut pkt = vec![if v6 { 128 } else { 8 }, 0, 0, 0];
    pkt.extend_from_slice(&id.to_be_bytes());
    pkt.extend_from_slice(&seq.to_be_bytes());
    pkt.extend_from_slice(b"fabric ping");
    if !v6 {
        let c = checksum(&pkt);
        pkt[2..4].copy_from_slice(&c.to_be_bytes());
    }
    pkt
}

/// Pings every destination from the calling thread's namespace; returns those that replied.
fn ping_from(destinations: &[(usize, IpAddr)], id: u16, timeout: Duration) -> Result<BTreeSet<usize>> {
    let v6 = destinations.first().is_some_and(|d| d.1.is_ipv6());
    let (family, proto) = if v6 { (libc::AF_INET6, libc::IPPROTO_ICMPV6) } else { (libc::AF_INET, libc::IPPROTO_ICMP) };
    // SAFETY: plain socket syscall; ownership taken below.
    let fd = unsafe { libc::socket(family, libc::SOCK_RAW, proto) };
    ensure!(fd >= 0, "raw ICMP socket: {}", std::io::Error::last_os_error());
    // SAFETY: fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    for &(seq, dst) in destinations {
        let pkt = echo_request(id, seq as u16, v6);
        let n = match dst {
            IpAddr::V4(d) => {
                let addr = libc::sockaddr_in {
                    sin_family: libc::AF_INET as u16,
                    sin_port: 0,
                    sin_addr: libc::in_addr { s_addr: u32::from(d).to_be() },
                    sin_zero: [0; 8],
                };
                // SAFETY: valid fd, buffer and sockaddr_in.
                unsafe {
                    libc::sendto(
                        fd.as_raw_fd(),
                        pkt.as_ptr().cast(),
                        pkt.len(),
                        0,
                        (&addr as *const libc::sockaddr_in).cast(),
                        size_of::<libc::sockaddr_in>() as u32,
                    )
                }
            }
            IpAddr::V6(d) => {
                // SAFETY: plain data.
                let mut addr: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
                addr.sin6_family = libc::AF_INET6 as u16;
                addr.sin6_addr.s6_addr = d.octets();
                // SAFETY: valid fd, buffer and sockaddr_in6.
                unsafe {
                    libc::sendto(
                        fd.as_raw_fd(),
                        pkt.as_ptr().cast(),
                        pkt.len(),
                        0,
                        (&addr as *const libc::sockaddr_in6).cast(),
                        size_of::<libc::sockaddr_in6>() as u32,
                    )
                }
            }
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            // A host whose own link is down has no route at all: its pairs are unreachable (and
            // reported so), not the probe broken.
            if matches!(e.raw_os_error(), Some(libc::ENETUNREACH | libc::EHOSTUNREACH | libc::ENETDOWN)) {
                continue;
            }
            anyhow::bail!("sending ICMP echo to {dst}: {e}");
        }
    }
    let mut replied = BTreeSet::new();
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 1500];
    while replied.len() < destinations.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        crate::sys::netns::set_receive_timeout(fd.as_fd(), left)?;
        // SAFETY: plain data, filled by the kernel.
        let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut from_len = size_of::<libc::sockaddr_storage>() as u32;
        // SAFETY: valid fd, buffer and address storage.
        let n = unsafe {
            libc::recvfrom(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                (&mut from as *mut libc::sockaddr_storage).cast(),
                &mut from_len,
            )
        };
        if n <= 0 {
            break;
        }
        let pkt = &buf[..n as usize];
        // Raw ICMP sockets deliver the IPv4 header too; ICMPv6 ones do not.
        let (icmp, src) = if v6 {
            // SAFETY: an AF_INET6 socket fills a sockaddr_in6.
            let a = unsafe { &*(&from as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            (pkt, IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)))
        } else {
            let ihl = ((pkt[0] & 0x0f) as usize) * 4;
            let Some(icmp) = pkt.get(ihl..) else { continue };
            (icmp, IpAddr::V4(Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15])))
        };
        let reply_type = if v6 { 129 } else { 0 };
        if icmp.len() >= 8 && icmp[0] == reply_type && u16::from_be_bytes([icmp[4], icmp[5]]) == id {
            let seq = u16::from_be_bytes([icmp[6], icmp[7]]) as usize;
            if destinations.iter().any(|&(s, d)| s == seq && d == src) {
                replied.insert(seq);
            }
        }
    }
    Ok(replied)
}

/// Pings every ordered host pair over IPv4 and IPv6.
pub fn all_pairs(state: &State) -> Result<PingReport> {
    ping(state, Selection::All, 0)
}

/// At most this many echo requests are in flight from one socket, so that the replies fit its
/// receive buffer.
const BURST: usize = 128;

/// Pings the host pairs `selection` picks (seeded with `seed`), over IPv4 and IPv6.
pub fn ping(state: &State, selection: Selection, seed: u64) -> Result<PingReport> {
    netns::require_capabilities()?;
    let plan = &state.plan;
    let hosts: Vec<NodeId> = plan.hosts().collect();
    let mut rack_ids: BTreeMap<(Option<usize>, Option<usize>), usize> = BTreeMap::new();
    let racks: Vec<usize> = hosts
        .iter()
        .map(|&h| {
            let next = rack_ids.len();
            *rack_ids.entry((plan.nodes[h].zone, plan.nodes[h].rack)).or_insert(next)
        })
        .collect();
    let pairs = select_pairs(&racks, selection, seed);
    let coverage = coverage(&racks, &pairs);
    // Destinations by source (pairs are sorted by source).
    let mut by_src: Vec<(NodeId, Vec<NodeId>)> = Vec::new();
    for &(s, d) in &pairs {
        match by_src.last_mut() {
            Some((src, dsts)) if *src == hosts[s] => dsts.push(hosts[d]),
            _ => by_src.push((hosts[s], vec![hosts[d]])),
        }
    }
    let mut report = PingReport { selection, seed, coverage, pairs: 0, reachable: 0, unreachable: Vec::new() };
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| -> Result<()> {
        let chunks: Vec<&[(NodeId, Vec<NodeId>)]> = by_src.chunks(by_src.len().div_ceil(4).max(1)).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let results = &results;
                s.spawn(move || -> Result<()> {
                    for (src, targets) in chunk {
                        let src = *src;
                        for v6 in [false, true] {
                            let addr = |d: NodeId| -> IpAddr {
                                if v6 { plan.host_ipv6(d).into() } else { plan.host_ipv4(d).into() }
                            };
                            let dsts: Vec<(usize, IpAddr)> = targets.iter().map(|&d| (d, addr(d))).collect();
                            let replied = netns::in_named(&plan.netns(src), || {
                                let mut replied = BTreeSet::new();
                                for burst in dsts.chunks(BURST) {
                                    replied.extend(ping_from(burst, 0xfab0 ^ src as u16, Duration::from_secs(2))?);
                                }
                                Ok(replied)
                            })
                            .with_context(|| format!("pinging from {}", plan.nodes[src].name))?;
                            results.lock().expect("not poisoned").push((src, dsts, replied));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        }
        Ok(())
    })?;
    for (src, dsts, replied) in results.into_inner().expect("not poisoned") {
        for (d, a) in dsts {
            report.pairs += 1;
            if replied.contains(&d) {
                report.reachable += 1;
            } else {
                report.unreachable.push((plan.nodes[src].name.clone(), format!("{} ({a})", plan.nodes[d].name)));
            }
        }
    }
    report.unreachable.sort();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Host i's rack for `racks` racks of `per_rack` hosts.
    fn shape(racks: usize, per_rack: usize) -> Vec<usize> {
        (0..racks * per_rack).map(|h| h / per_rack).collect()
    }

    /// No self pairs, no duplicates, sorted, in range.
    fn well_formed(racks: &[usize], pairs: &[(usize, usize)]) {
        let n = racks.len();
        assert!(pairs.iter().all(|&(s, d)| s != d && s < n && d < n), "{pairs:?}");
        assert!(pairs.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates");
    }

    const SHAPES: &[(usize, usize)] = &[(1, 2), (4, 2), (3, 1), (1, 65), (16, 4), (17, 5), (5, 16), (128, 16)];
    const SEEDS: &[u64] = &[0, 1, 42, 0xdead_beef, u64::MAX];

    #[test]
    fn cover_has_every_host_both_ways_and_every_rack_pair() {
        for &(r, h) in SHAPES {
            for &seed in SEEDS {
                let racks = shape(r, h);
                let pairs = select_pairs(&racks, Selection::Cover, seed);
                well_formed(&racks, &pairs);
                let c = coverage(&racks, &pairs);
                assert!(c.every_host_source && c.every_host_destination, "{r}x{h} seed {seed}: {c:?}");
                assert_eq!(c.rack_pairs, c.rack_pairs_total, "{r}x{h} seed {seed}");
                let lone = if h < 2 { r } else { 0 };
                assert_eq!(c.rack_pairs_total, r * r - lone);
                // Small: no more than the rack pairs plus what the hosts need beyond them.
                assert!(pairs.len() <= c.rack_pairs_total + 2 * r * h, "{r}x{h}: {} pairs", pairs.len());
            }
        }
        // The testbed: 128 x 16 hosts is covered by exactly one pair per rack pair.
        let racks = shape(128, 16);
        assert_eq!(select_pairs(&racks, Selection::Cover, 7).len(), 128 * 128);
    }

    #[test]
    fn a_sample_has_every_host_both_ways_and_at_least_the_pairs_asked_for() {
        for &(r, h) in SHAPES {
            let racks = shape(r, h);
            let n = racks.len();
            let total = n * (n - 1);
            let mut wants = vec![0, 1, n, 3 * n];
            if total <= 10_000 {
                // The dense path (more than half of all pairs) and all of them.
                wants.extend([total / 2 + 1, total - 1, total, total + 5]);
            }
            for &seed in SEEDS {
                for &want in &wants {
                    let pairs = select_pairs(&racks, Selection::Sample(want), seed);
                    well_formed(&racks, &pairs);
                    let c = coverage(&racks, &pairs);
                    assert!(c.every_host_source && c.every_host_destination, "{r}x{h} {want} {seed}: {c:?}");
                    assert_eq!(pairs.len(), want.max(n).min(total), "{r}x{h} want {want} seed {seed}");
                }
            }
        }
    }

    #[test]
    fn all_is_every_ordered_pair() {
        let racks = shape(4, 2);
        let pairs = select_pairs(&racks, Selection::All, 3);
        well_formed(&racks, &pairs);
        assert_eq!(pairs.len(), 8 * 7);
        let c = coverage(&racks, &pairs);
        assert_eq!((c.rack_pairs, c.rack_pairs_total), (16, 16));
        assert!(select_pairs(&[0], Selection::Cover, 0).is_empty(), "one host has no pair");
        assert!(select_pairs(&[], Selection::Sample(10), 0).is_empty());
    }

    #[test]
    fn the_same_seed_picks_the_same_pairs_and_another_seed_others() {
        for &(r, h) in &[(16, 4), (128, 16), (1, 65)] {
            let racks = shape(r, h);
            for sel in [Selection::Cover, Selection::Sample(500)] {
                let a = select_pairs(&racks, sel, 11);
                assert_eq!(a, select_pairs(&racks, sel, 11), "{sel:?} on {r}x{h}");
                assert_ne!(a, select_pairs(&racks, sel, 12), "{sel:?} on {r}x{h}: the seed matters");
            }
        }
    }

    #[test]
    fn defaults_and_description() {
        assert_eq!(Selection::default_for(64), Selection::All);
        assert_eq!(Selection::default_for(65), Selection::Cover);
        assert_eq!(thousands(4_192_256), "4,192,256");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        let c = Coverage {
            hosts: 2048,
            pairs: 4096,
            pairs_total: 4_192_256,
            every_host_source: true,
            every_host_destination: true,
            rack_pairs: 16_384,
            rack_pairs_total: 16_384,
        };
        assert_eq!(
            c.describe(),
            "checked 4,096 of 4,192,256 pairs: every host as source and destination, every rack pair (16,384)"
        );
        let c = Coverage { rack_pairs: 10, every_host_destination: false, ..c };
        assert_eq!(c.describe(), "checked 4,096 of 4,192,256 pairs: every host as source, 10 of 16,384 rack pairs");
    }
}
