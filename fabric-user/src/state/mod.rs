//! A testbed's saved state and where it lives: the plan `up` derived (so that every later
//! command sees the same nodes, ports and addresses), the links taken down since, and the
//! bpffs and run-time folders its switches and agent use.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};
use serde::{Deserialize, Serialize};

use crate::{
    dataplane::SwitchDataplane,
    model::fault::{Degradation, FaultEvent},
    model::plan::{LinkId, NodeId, Plan},
    sys::process,
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
    /// Links a `fabric link flap` is flapping, with the process that does it: no other command
    /// may take such a link down or up meanwhile (the flap would undo it at its next step).
    #[serde(default)]
    pub flaps: BTreeMap<LinkId, Owner>,
}

/// A process, told apart from any later one with the same pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub pid: u32,
    /// Its start time, in clock ticks after boot (`sys::process::start_time`); 0 in a record
    /// written before start times were kept (a running job's progress file of an older
    /// binary), where only the pid can be checked.
    #[serde(default)]
    pub started: u64,
}

impl Owner {
    /// This process.
    pub fn this_process() -> Result<Self> {
        let pid = std::process::id();
        let started = process::start_time(pid).context("reading this process's start time in /proc/self/stat")?;
        Ok(Owner { pid, started })
    }

    /// Whether the process still runs (not one that took its pid after it ended).
    pub fn is_running(&self) -> bool {
        match self.started {
            0 => process::start_time(self.pid).is_some(),
            started => process::start_time(self.pid) == Some(started),
        }
    }
}

/// Held while a command changes a testbed, from reading its state to saving it: changes of one
/// testbed happen one at a time. Without it, a flap in the background and a `fabric link down`
/// could each read the state, reroute and save, and the later save would lose the other's
/// change while its switches routed by it. Released when dropped (the lock of an open file,
/// which the kernel also releases when the process dies).
#[must_use = "the lock is released when this is dropped"]
pub struct ChangeLock {
    _file: std::fs::File,
}

/// How long a change waits for another one of the same testbed to finish. A change takes
/// seconds at most (rerouting a few hundred switches); a wait this long means a stuck process.
const CHANGE_LOCK_WAIT: Duration = Duration::from_secs(120);

impl ChangeLock {
    /// Waits (up to [`CHANGE_LOCK_WAIT`]) until no other command changes testbed `prefix`.
    pub fn take(prefix: &str) -> Result<Self> {
        Self::take_within(&state_dir(prefix), prefix, CHANGE_LOCK_WAIT)
    }

    /// For `fabric down`, which removes the folder the lock lives in: waits for a change in
    /// progress to end, but only briefly (a stuck command must not keep a testbed up). None when
    /// there is no lock to take (nothing left of the testbed's folder) or the wait was in vain.
    pub fn take_for_down(prefix: &str) -> Option<Self> {
        let dir = state_dir(prefix);
        if !dir.is_dir() {
            return None;
        }
        Self::take_within(&dir, prefix, Duration::from_secs(10))
            .inspect_err(|e| eprintln!("warning: removing testbed {prefix:?} without its change lock: {e:#}"))
            .ok()
    }

    /// The lock of testbed `prefix` whose state folder is `dir`, polled every 20 ms until it is
    /// free or `wait` is over.
    fn take_within(dir: &Path, prefix: &str, wait: Duration) -> Result<Self> {
        let path = dir.join("change.lock");
        let start = Instant::now();
        loop {
            // Opened anew each time: `fabric down` may have removed the folder (and the file)
            // while this waited, and a new `up` made a new one. A lock on a removed file
            // excludes no one.
            let file = open_lock_file(&path, prefix)?;
            match file.try_lock() {
                Ok(()) if same_file(&file, &path) => return Ok(ChangeLock { _file: file }),
                Ok(()) => continue,
                Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < wait => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(std::fs::TryLockError::WouldBlock) => bail!(
                    "another fabric command has been changing testbed {prefix:?} for over {}s and still holds {}: \
                     if none should be running, a stuck one can be found with `fuser {}`",
                    wait.as_secs(),
                    path.display(),
                    path.display()
                ),
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("locking {}", path.display()));
                }
            }
        }
    }
}

/// Opens (creating it if need be) the lock file of testbed `prefix`, whose folder exists while
/// the testbed does: without it there is nothing to change.
fn open_lock_file(path: &Path, prefix: &str) -> Result<std::fs::File> {
    match std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path) {
        Ok(file) => Ok(file),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!(
                "no testbed with prefix {prefix:?} is up ({} does not exist)",
                path.parent().unwrap_or(path).display()
            )
        }
        Err(e) => Err(e).with_context(|| format!("opening {}", path.display())),
    }
}

/// Whether `path` still names the open `file` (same device and inode).
fn same_file(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

impl State {
    /// The plan with each degraded link at its degraded rate: the fabric as the traffic
    /// engineering should see it.
    pub fn plan_at_degraded_rates(&self) -> Plan {
        let mut plan = self.plan.clone();
        for (&l, d) in &self.degraded {
            if let (Some(link), Some(rate)) = (plan.links.get_mut(l), d.rate_gbps) {
                link.rate_gbps = rate;
            }
        }
        plan
    }

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
    /// The state of testbed `prefix`, to change: read once no other command changes it, which
    /// none will until the lock is dropped (after the change is saved).
    /// Records of flaps whose process is gone (killed outright) are dropped.
    pub fn load_for_change(prefix: &str) -> Result<(Self, ChangeLock)> {
        let lock = ChangeLock::take(prefix)?;
        let mut state = Self::load(prefix)?;
        state.flaps.retain(|_, owner| owner.is_running());
        Ok((state, lock))
    }

    /// The process flapping link `l`, if it is another one and still runs.
    pub fn flapped_by_another(&self, l: LinkId) -> Option<Owner> {
        self.flaps.get(&l).copied().filter(|o| o.pid != std::process::id() && o.is_running())
    }

    pub fn load(prefix: &str) -> Result<Self> {
        Self::load_from(&state_path(prefix), prefix)
    }

    /// The state saved at `path`, which must be testbed `prefix`'s.
    fn load_from(path: &Path, prefix: &str) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("no testbed with prefix {prefix:?} is up (cannot read {})", path.display()))?;
        let state = Self::from_json(&text).with_context(|| format!("corrupt state file {}", path.display()))?;
        // Every later step names namespaces, pins and files by the plan's prefix: a state file
        // copied from another testbed would change that one under this one's lock.
        let own = &state.plan.topology.prefix;
        ensure!(own == prefix, "{}: the state of testbed {own:?}, not of {prefix:?}", path.display());
        Ok(state)
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
        // Not created here: `up` makes the folder, and `down` removes it; a change that ends
        // after a `down` must not bring back the state of a testbed that is gone.
        let dir = path.parent().expect("has a parent");
        if !dir.is_dir() {
            bail!(
                "testbed {:?} was taken down (fabric down) before this change could be saved",
                self.plan.topology.prefix
            );
        }
        crate::sys::file::write_whole(&path, &serde_json::to_vec(self)?)
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
            flaps: BTreeMap::new(),
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

    /// A state file is its own testbed's: one copied into another testbed's folder is refused,
    /// naming both.
    #[test]
    fn a_state_file_of_another_testbed_is_refused() {
        let plan = Plan::new(&Topology::default_topology());
        let own = plan.topology.prefix.clone();
        let state = State {
            plan,
            down_links: BTreeSet::new(),
            links_taken_down: BTreeSet::new(),
            down_switches: BTreeSet::new(),
            group_slots: BTreeMap::new(),
            degraded: BTreeMap::new(),
            faults: Vec::new(),
            flaps: BTreeMap::new(),
        };
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state.json");
        std::fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
        assert_eq!(State::load_from(&path, &own).unwrap().plan.topology.prefix, own);
        let err = format!("{:#}", State::load_from(&path, "elsewhere").unwrap_err());
        assert!(err.contains(&format!("the state of testbed {own:?}, not of \"elsewhere\"")), "{err}");
    }

    /// A second change of the same testbed waits for the first, and names the lock when it has
    /// waited too long; another testbed's change does not wait.
    #[test]
    fn one_change_of_a_testbed_at_a_time() {
        let base = std::env::temp_dir().join(format!("fabric-lock-test-{}", std::process::id()));
        let (dir, other) = (base.join("t1"), base.join("t2"));
        for d in [&dir, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        let first = ChangeLock::take_within(&dir, "t1", Duration::ZERO).unwrap();
        let err = ChangeLock::take_within(&dir, "t1", Duration::from_millis(100)).err().expect("held by the first");
        assert!(format!("{err:#}").contains("change.lock"), "{err:#}");
        let _other = ChangeLock::take_within(&other, "t2", Duration::ZERO).expect("another testbed's lock is free");
        let waiter = std::thread::spawn({
            let dir = dir.clone();
            move || ChangeLock::take_within(&dir, "t1", Duration::from_secs(60)).map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(100));
        drop(first);
        waiter.join().unwrap().expect("taken once the first is dropped");
        std::fs::remove_dir_all(&base).unwrap();
        let gone = ChangeLock::take_within(&dir, "t1", Duration::ZERO).err().expect("no testbed, no lock");
        assert!(format!("{gone:#}").contains("no testbed with prefix \"t1\""), "{gone:#}");
    }

    /// A change waiting for the lock while `down` moves the testbed's folder aside does not get
    /// the moved file's lock once it is free (that would exclude no one): it finds no testbed.
    #[test]
    fn a_change_waiting_through_a_down_finds_no_testbed() {
        let base = std::env::temp_dir().join(format!("fabric-lock-down-test-{}", std::process::id()));
        let dir = base.join("t3");
        std::fs::create_dir_all(&dir).unwrap();
        let first = ChangeLock::take_within(&dir, "t3", Duration::ZERO).unwrap();
        let waiter = std::thread::spawn({
            let dir = dir.clone();
            move || ChangeLock::take_within(&dir, "t3", Duration::from_secs(60)).map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(100));
        std::fs::rename(&dir, base.join(".t3.removing")).unwrap();
        drop(first);
        let err = waiter.join().unwrap().expect_err("the folder is gone");
        assert!(format!("{err:#}").contains("no testbed with prefix \"t3\""), "{err:#}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// This process runs; a process with a pid that runs but another start time (one that took
    /// a dead flap's pid) does not count as the same.
    #[test]
    fn an_owner_is_its_pid_and_start_time() {
        let me = Owner::this_process().unwrap();
        assert!(me.is_running());
        assert!(!Owner { started: me.started + 1, ..me }.is_running());
        assert!(!Owner { pid: 1 << 23, ..me }.is_running());
    }
}
