//! A testbed's saved state and where it lives: the plan `up` derived (so that every later
//! command sees the same nodes, ports and addresses), the links taken down since, and the
//! bpffs and run-time folders its switches and agent use.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::{
    dataplane::SwitchDataplane,
    model::fault::{Degradation, FaultEvent},
    model::plan::{LinkId, NodeId, Plan},
};

/// Where bpffs lives; a testbed pins under `fabric/<prefix>/<node>/`.
pub const BPFFS: &str = "/sys/fs/bpf";
/// Where a testbed's state (its plan and failed links) is kept.
const STATE_DIR: &str = "/run/fabric";

pub fn bpf_dir(prefix: &str) -> PathBuf {
    PathBuf::from(BPFFS).join("fabric").join(prefix)
}

/// The bpffs name of a port's pinned XDP link (bpffs refuses names with dots, which parallel
/// links' interface names have).
pub fn link_pin_name(ifname: &str) -> String {
    format!("link-{}", ifname.replace('.', "_"))
}

/// Where a testbed's state (and its agent's files) live.
pub fn state_dir(prefix: &str) -> PathBuf {
    PathBuf::from(STATE_DIR).join(prefix)
}

pub fn state_path(prefix: &str) -> PathBuf {
    state_dir(prefix).join("state.json")
}

/// What `up` saves for the other commands.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub plan: Plan,
    /// Links out of service: those of `links_taken_down` and every link of the
    /// `down_switches`. Routing, traffic engineering and the simulators read this set.
    pub down_links: BTreeSet<LinkId>,
    /// Links taken down one by one (`fabric link down`, a flap), whatever their switches do.
    #[serde(default)]
    pub links_taken_down: BTreeSet<LinkId>,
    /// Switches taken down whole (`fabric switch down`): their links stay down until the
    /// switch comes back, and come back with it unless taken down one by one too.
    #[serde(default)]
    pub down_switches: BTreeSet<NodeId>,
    /// Per switch, the `GROUPS` slot of each group of its tables in force (see
    /// `routing::assign_slots`); a switch not listed has group `i` in slot `i`.
    #[serde(default)]
    pub group_slots: BTreeMap<NodeId, Vec<u32>>,
    /// Links given a gray failure with `fabric link degrade`.
    #[serde(default)]
    pub degraded: BTreeMap<LinkId, Degradation>,
    /// Every fault injected since `up`, oldest first (job records pick theirs from it).
    #[serde(default)]
    pub faults: Vec<FaultEvent>,
}

impl State {
    /// The links out of service when `links_taken_down` are down one by one and
    /// `down_switches` whole.
    pub fn out_of_service(
        &self,
        links_taken_down: &BTreeSet<LinkId>,
        down_switches: &BTreeSet<NodeId>,
    ) -> BTreeSet<LinkId> {
        let of_switches = down_switches.iter().flat_map(|&sw| self.plan.nodes[sw].ports.iter().map(|p| p.link));
        links_taken_down.iter().copied().chain(of_switches).collect()
    }

    /// The down switches at an end of link `l`.
    pub fn down_switches_of(&self, l: LinkId) -> Vec<NodeId> {
        let link = &self.plan.links[l];
        [link.a, link.b].into_iter().filter(|n| self.down_switches.contains(n)).collect()
    }

    /// The slot where switch `sw`'s group `group` (a position in its tables) is installed.
    pub fn group_slot(&self, sw: NodeId, group: u32) -> u32 {
        self.group_slots.get(&sw).and_then(|s| s.get(group as usize)).copied().unwrap_or(group)
    }
}

impl State {
    pub fn load(prefix: &str) -> Result<Self> {
        let path = state_path(prefix);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("no testbed with prefix {prefix:?} is up (cannot read {})", path.display()))?;
        Self::from_json(&text).with_context(|| format!("corrupt state file {}", path.display()))
    }

    /// A saved state. One saved before switches were told apart from links (no
    /// `links_taken_down`) held every down link as taken down on its own.
    fn from_json(text: &str) -> Result<Self> {
        let mut state: Self = serde_json::from_str(text)?;
        if state.links_taken_down.is_empty() && state.down_switches.is_empty() {
            state.links_taken_down = state.down_links.clone();
        }
        Ok(state)
    }

    /// Written by `up` and by link changes (the testbed layer).
    ///
    /// Atomically: written beside and renamed over, so that a command reading the state while a
    /// `fabric link` writes it (`fabric stats` during a fault) sees the old state or the new,
    /// never half of one.
    pub fn save(&self) -> Result<()> {
        let path = state_path(&self.plan.topology.prefix);
        let dir = path.parent().expect("has a parent");
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".state.json.{}.tmp", std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec(self)?).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("replacing {}", path.display()))
    }

    /// The pinned maps of a switch.
    pub fn dataplane(&self, node: NodeId) -> Result<SwitchDataplane> {
        SwitchDataplane::from_pins(&bpf_dir(&self.plan.topology.prefix).join(&self.plan.nodes[node].name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::topology::Topology;

    /// A state file written before `links_taken_down` and `down_switches` existed loads with
    /// its down links as taken down on their own (so `fabric link up` brings each back), and a
    /// new one loads as saved.
    #[test]
    fn a_state_saved_before_switches_were_tracked_loads_its_down_links_as_taken_down() {
        let plan = Plan::new(&Topology::default_topology());
        let down: BTreeSet<LinkId> = [0, 3].into();
        let state = State {
            plan,
            down_links: down.clone(),
            links_taken_down: BTreeSet::new(),
            down_switches: [1].into(),
            group_slots: BTreeMap::new(),
            degraded: BTreeMap::new(),
            faults: Vec::new(),
        };
        let mut json: serde_json::Value = serde_json::to_value(&state).unwrap();
        let new = State::from_json(&json.to_string()).unwrap();
        assert_eq!((new.links_taken_down.len(), new.down_switches.len()), (0, 1), "loaded as saved");
        let fields = json.as_object_mut().unwrap();
        fields.remove("links_taken_down");
        fields.remove("down_switches");
        let old = State::from_json(&json.to_string()).unwrap();
        assert_eq!((old.links_taken_down, old.down_switches, old.down_links), (down.clone(), BTreeSet::new(), down));
    }
}
