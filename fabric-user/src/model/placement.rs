//! Rank placement: which host runs which rank of a job.
use anyhow::{Context as _, Result, bail, ensure};
use serde::{Deserialize, Serialize};

use crate::{
    model::plan::{NodeId, Plan},
    model::workload::SplitMix64,
};

/// How ranks are laid onto hosts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Rank i on the i-th host in rack order: whole racks, neighbours in the ring share a rack.
    Contiguous,
    /// One host per rack before any rack gets a second: racks partially used, as in the paper's
    /// fragmented allocation; consecutive ranks sit in different racks.
    Fragmented,
    /// A seeded random choice and order of hosts.
    Random { seed: u64 },
    /// Explicit host names, rank by rank.
    Explicit { hosts: Vec<String> },
}

impl Placement {
    /// The rank count of a job placed so: `ranks` if given, else one per host of a `hosts:`
    /// placement (`fabric place` prints one without the count), else every one of `every_host`.
    pub fn rank_count(&self, ranks: Option<usize>, every_host: usize) -> usize {
        ranks.or(self.named_hosts()).unwrap_or(every_host)
    }

    /// How many hosts a `hosts:` placement names (one rank each); `None` for the placements
    /// that choose hosts themselves.
    pub fn named_hosts(&self) -> Option<usize> {
        match self {
            Placement::Explicit { hosts } => Some(hosts.len()),
            _ => None,
        }
    }

    /// Parses `contiguous`, `fragmented`, `random:SEED` or `hosts:NAME,NAME,...`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "contiguous" => Placement::Contiguous,
            "fragmented" => Placement::Fragmented,
            _ if s.starts_with("random:") => {
                let seed = &s["random:".len()..];
                let seed = seed.parse().with_context(|| format!("{s:?}: the seed {seed:?} is not an integer"))?;
                Placement::Random { seed }
            }
            _ if s.starts_with("hosts:") => {
                let hosts: Vec<String> = s["hosts:".len()..].split(',').map(|h| h.trim().to_string()).collect();
                if let Some(i) = hosts.iter().position(String::is_empty) {
                    bail!("{s:?}: host name {} of {} is empty", i + 1, hosts.len());
                }
                Placement::Explicit { hosts }
            }
            _ => bail!("unknown placement {s:?}: use contiguous, fragmented, random:SEED or hosts:H1,H2,..."),
        })
    }

    /// The form [`Placement::parse`] reads.
    pub fn spelling(&self) -> String {
        match self {
            Placement::Contiguous => "contiguous".into(),
            Placement::Fragmented => "fragmented".into(),
            Placement::Random { seed } => format!("random:{seed}"),
            Placement::Explicit { hosts } => format!("hosts:{}", hosts.join(",")),
        }
    }

    /// Reads the spelling of [`Placement::parse`] (workload files write it so).
    pub fn deserialize_spelling<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }

    /// The host of each of `ranks` ranks.
    pub fn place(&self, plan: &Plan, ranks: usize) -> Result<Vec<NodeId>> {
        let hosts: Vec<NodeId> = plan.hosts().collect();
        ensure!(ranks >= 2, "ranks: {ranks}; a job needs at least 2");
        ensure!(ranks <= hosts.len(), "{ranks} ranks but the topology has only {} hosts", hosts.len());
        let placed = match self {
            Placement::Contiguous => hosts[..ranks].to_vec(),
            Placement::Fragmented => {
                // Group hosts by (zone, rack); take slot 0 of every rack, then slot 1, ...
                let mut racks: Vec<Vec<NodeId>> = Vec::new();
                for &h in &hosts {
                    let key = (plan.nodes[h].zone, plan.nodes[h].rack);
                    match racks.iter_mut().find(|r| (plan.nodes[r[0]].zone, plan.nodes[r[0]].rack) == key) {
                        Some(r) => r.push(h),
                        None => racks.push(vec![h]),
                    }
                }
                let depth = racks.iter().map(Vec::len).max().unwrap_or(0);
                (0..depth).flat_map(|slot| racks.iter().filter_map(move |r| r.get(slot).copied())).take(ranks).collect()
            }
            Placement::Random { seed } => {
                let mut h = hosts.clone();
                SplitMix64(*seed).shuffle(&mut h);
                h.truncate(ranks);
                h
            }
            Placement::Explicit { hosts: names } => {
                ensure!(
                    names.len() == ranks,
                    "hosts:...: {} hosts named for {ranks} ranks (one per rank)",
                    names.len()
                );
                let mut v = Vec::new();
                for n in names {
                    let id = plan.node_by_name(n).filter(|&id| hosts.contains(&id));
                    let Some(id) = id else { bail!("hosts:...: {n:?} is not a host of this topology") };
                    ensure!(!v.contains(&id), "hosts:...: host {n} named twice");
                    v.push(id);
                }
                v
            }
        };
        Ok(placed)
    }
}

impl std::str::FromStr for Placement {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.spelling())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a rank count, a `hosts:` placement (as `fabric place` prints it) has one rank per
    /// host it names; a count given stays as given (placing refuses a mismatch).
    #[test]
    fn the_rank_count_defaults_to_the_hosts_named() {
        let named = Placement::parse("hosts:z0r0h0,z0r1h0").unwrap();
        assert_eq!(named.rank_count(None, 8), 2);
        assert_eq!(named.rank_count(Some(4), 8), 4);
        assert_eq!(Placement::Contiguous.rank_count(None, 8), 8);
        assert_eq!(Placement::Contiguous.rank_count(Some(3), 8), 3);
    }
    use crate::model::topology::Topology;

    #[test]
    fn placements_on_the_default_testbed() {
        let plan = Plan::new(&Topology::default_topology());
        let names = |v: Vec<NodeId>| v.into_iter().map(|n| plan.nodes[n].name.clone()).collect::<Vec<_>>();
        assert_eq!(names(Placement::Contiguous.place(&plan, 4).unwrap()), ["z0r0h0", "z0r0h1", "z0r1h0", "z0r1h1"]);
        assert_eq!(names(Placement::Fragmented.place(&plan, 4).unwrap()), ["z0r0h0", "z0r1h0", "z0r2h0", "z0r3h0"]);
        assert_eq!(Placement::Fragmented.place(&plan, 8).unwrap().len(), 8);
        let r1 = Placement::Random { seed: 1 }.place(&plan, 8).unwrap();
        assert_eq!(r1, Placement::Random { seed: 1 }.place(&plan, 8).unwrap());
        assert_ne!(r1, Placement::Random { seed: 2 }.place(&plan, 8).unwrap());
        let e = Placement::parse("hosts:z0r3h1,z0r0h0").unwrap().place(&plan, 2).unwrap();
        assert_eq!(names(e), ["z0r3h1", "z0r0h0"]);
        assert!(Placement::parse("hosts:z0r3h1,z0r3").unwrap().place(&plan, 2).is_err());
        assert!(Placement::Contiguous.place(&plan, 9).is_err());
        assert!(Placement::parse("diagonal").is_err());
        let msg = |s: &str| format!("{:#}", Placement::parse(s).unwrap_err());
        assert!(msg("random:x").contains("the seed \"x\" is not an integer"));
        assert!(msg("hosts:z0r0h0,z0r1h0,").contains("host name 3 of 3 is empty"));
        assert!(msg("hosts:").contains("host name 1 of 1 is empty"));
        assert_eq!(Placement::parse("hosts:z0r0h0, z0r1h0").unwrap().spelling(), "hosts:z0r0h0,z0r1h0");
        let too_few = format!("{:#}", Placement::Contiguous.place(&plan, 0).unwrap_err());
        assert!(too_few.contains("ranks: 0; a job needs at least 2"), "{too_few}");
    }
}
