//! Helpers shared by the namespace tests: testbeds with unique prefixes, torn down on drop.
#![allow(dead_code, reason = "each test file uses its own subset")]

use fabric_user::{model::topology::Topology, state::State, sys::netns, testbed, testbed::DownOnDrop, testbed::probe};

/// A prefix no other test (or concurrent test process) uses: `tag`, then the pid.
pub fn unique_prefix(tag: char, n: u32) -> String {
    format!("{tag}{}{n}", std::process::id() % 10_000)
}

/// Real soft-RoCE frames (ib_write_bw between two rxe devices), captured from Linux rxe and kept
/// in the repository.
pub fn rxe_capture() -> std::path::PathBuf {
    let p = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/rxe-rc-mixed.pcap"));
    assert!(p.exists(), "the rxe capture {} is missing", p.display());
    p
}

/// A shipped topology (`testbed/FILE`, or the embedded default) under another prefix.
pub fn topology(file: Option<&str>, prefix: &str) -> Topology {
    let path = file.map(|f| std::path::PathBuf::from(format!("{}/../testbed/{f}", env!("CARGO_MANIFEST_DIR"))));
    let mut t = Topology::load(path.as_deref()).unwrap_or_else(|e| panic!("{e:#}"));
    t.prefix = prefix.into();
    t
}

/// Brings a testbed up; it is torn down when the guard drops, even on panic.
pub fn up(file: Option<&str>, prefix: &str) -> (DownOnDrop, State) {
    up_topology(&topology(file, prefix))
}

/// [`up`] for a topology built or changed by the test.
pub fn up_topology(topology: &Topology) -> (DownOnDrop, State) {
    netns::require_capabilities().expect("this test needs root: it builds network namespaces");
    use_fabric_binary();
    let guard = DownOnDrop(topology.prefix.clone());
    testbed::up(topology, true).unwrap_or_else(|e| panic!("{e:#}"));
    (guard, State::load(&topology.prefix).unwrap())
}

/// `up` starts the switch agent as `fabric agent`; tests are not that binary, so point it there.
pub fn use_fabric_binary() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: set once, before any test of this process reads the environment concurrently
    // (std's env lock serialises it with other getenv/setenv calls from Rust).
    ONCE.call_once(|| unsafe { std::env::set_var("FABRIC_BIN", env!("CARGO_BIN_EXE_fabric")) });
}

/// Every ordered host pair answers ICMP and ICMPv6 through the fabric; returns the pair count.
pub fn assert_all_reachable(state: &State) -> usize {
    let r = probe::all_pairs(state).unwrap();
    assert_eq!(r.reachable, r.pairs, "unreachable pairs: {:?}", r.unreachable);
    r.pairs
}

/// Nothing of the testbed is left: namespaces, pinned objects, state.
pub fn assert_nothing_left(prefix: &str) {
    assert!(netns::list_named(&format!("{prefix}-")).unwrap().is_empty(), "namespaces of {prefix} remain");
    assert!(!fabric_user::state::bpf_dir(prefix).exists(), "pins of {prefix} remain");
    assert!(State::load(prefix).is_err(), "state of {prefix} remains");
    let agents = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| {
            let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
            args.contains(&&b"agent"[..]) && args.windows(2).any(|w| w[0] == b"--prefix" && w[1] == prefix.as_bytes())
        })
        .count();
    assert_eq!(agents, 0, "the switch agent of {prefix} still runs");
}

/// The interfaces of the root namespace (which the project must never touch).
pub fn root_links() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/sys/class/net")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A `log` sink for aya-log: keeps the level and text of every XDP log record handed to it.
#[derive(Clone, Default)]
pub struct LogCapture(std::sync::Arc<std::sync::Mutex<Vec<(log::Level, String)>>>);

impl LogCapture {
    /// The records kept since the last call.
    pub fn take(&self) -> Vec<(log::Level, String)> {
        std::mem::take(&mut *self.0.lock().expect("not poisoned"))
    }
}

impl log::Log for LogCapture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        self.0.lock().expect("not poisoned").push((record.level(), record.args().to_string()));
    }

    fn flush(&self) {}
}

/// Every member counter of every group the controller installed, indexed like `fabric_user::sim::MemberLoad`.
pub fn read_members(
    state: &State,
    fabric: &fabric_user::forwarding::fabric::SimFabric,
) -> fabric_user::sim::MemberLoad {
    let mut load = fabric_user::sim::MemberLoad::new(fabric);
    for sw in fabric.plan.switches() {
        let mut dp = state.dataplane(sw).unwrap_or_else(|e| panic!("{e:#}"));
        for g in 0..fabric.group_count(sw) as u32 {
            for m in 0..fabric.members(sw, g).len() as u32 {
                let c = dp.member_counters(g, m).unwrap_or_else(|e| panic!("{e:#}"));
                let s = fabric.slot(sw, g, m);
                load.packets[s] = c.packets;
                load.bytes[s] = c.bytes;
            }
        }
    }
    load
}

/// The packets `run` resent, and the datagrams its hosts' own sockets dropped for want of
/// buffer (a software endpoint that fell behind on a busy machine: loss outside the fabric,
/// which the fabric cannot prevent).
pub fn resent_and_host_drops(run: &fabric_user::run::RunResult) -> (u64, u64) {
    let resent = run.flows.iter().map(|f| f.retransmitted).sum();
    (resent, run.hosts.iter().map(|h| h.udp_receive_drops).sum())
}

/// `run`'s resends and host drops ([`resent_and_host_drops`]) when it resent because a host fell
/// behind, so that running it again is fair; `None` when it resent nothing. Panics when it
/// resent with no host drop: then the fabric lost them.
pub fn resent_for_host_drops(run: &fabric_user::run::RunResult, label: &str) -> Option<(u64, u64)> {
    let (resent, host_drops) = resent_and_host_drops(run);
    assert!(resent == 0 || host_drops > 0, "{label}: {resent} packets resent, yet no host's socket dropped any");
    (resent > 0).then_some((resent, host_drops))
}

/// How many times a test runs a job whose exact counts it compares, while the runs resend for
/// host drops ([`resent_for_host_drops`]).
pub const TRIES_FOR_HOST_DROPS: usize = 3;

/// Runs `attempt` (a job, with what the test reads around it) again while its run resent for
/// host drops, up to [`TRIES_FOR_HOST_DROPS`] times in all; returns the last attempt.
pub fn until_no_host_drop_resends<T>(
    label: &str,
    mut attempt: impl FnMut() -> (fabric_user::run::RunResult, T),
) -> (fabric_user::run::RunResult, T) {
    let mut tries = 1;
    loop {
        let (run, also) = attempt();
        match resent_for_host_drops(&run, label) {
            Some((resent, host_drops)) if tries < TRIES_FOR_HOST_DROPS => {
                eprintln!("{label}: {resent} packets resent after {host_drops} host socket drops; once more");
                tries += 1;
            }
            _ => return (run, also),
        }
    }
}

/// [`until_no_host_drop_resends`] for a job the test reads nothing around.
pub fn run_until_no_host_drop_resends(
    label: &str,
    mut run: impl FnMut() -> fabric_user::run::RunResult,
) -> fabric_user::run::RunResult {
    until_no_host_drop_resends(label, || (run(), ())).0
}

/// `tcpdump` on an interface in a host's namespace, writing the frames its filter matches to a
/// pcap file; stopped (and never left running) when dropped.
pub struct Tcpdump {
    child: std::process::Child,
    stderr: std::io::BufReader<std::process::ChildStderr>,
    path: std::path::PathBuf,
}

impl Tcpdump {
    /// Starts capturing the first `snaplen` bytes of each frame (0: all of it) and returns once
    /// tcpdump says it listens.
    pub fn start(netns_name: &str, ifname: &str, filter: &str, snaplen: u32, path: std::path::PathBuf) -> Tcpdump {
        use std::io::BufRead as _;
        let snaplen = snaplen.to_string();
        let mut child = std::process::Command::new("ip")
            .args(["netns", "exec", netns_name, "tcpdump", "-i", ifname, "-s", &snaplen])
            .args(["-B", "16384", "-U", "-Z", "root"])
            .arg("--immediate-mode")
            .arg("-w")
            .arg(&path)
            .arg(filter)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running tcpdump (cargo xtask setup installs it)");
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        while !line.contains("listening on") {
            line.clear();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "tcpdump on {netns_name}:{ifname} did not start");
        }
        Tcpdump { child, stderr, path }
    }

    /// Stops the capture once its file has stopped growing; fails unless every frame the
    /// kernel matched was written (tcpdump reports both counts when it exits).
    pub fn stop(mut self) -> std::path::PathBuf {
        use std::io::Read as _;
        let size = || std::fs::metadata(&self.path).map_or(0, |m| m.len());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut last = size();
        loop {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let now = size();
            if now == last || std::time::Instant::now() > deadline {
                break;
            }
            last = now;
        }
        self.terminate();
        let mut summary = String::new();
        self.stderr.read_to_string(&mut summary).unwrap();
        let count = |what: &str| -> u64 {
            let line = summary.lines().find(|l| l.ends_with(what)).unwrap_or_else(|| panic!("tcpdump: {summary}"));
            line.split_whitespace().next().unwrap().parse().unwrap()
        };
        let (captured, matched) = (count("packets captured"), count("packets received by filter"));
        assert!(captured == matched && count("packets dropped by kernel") == 0, "tcpdump lost frames: {summary}");
        self.path.clone()
    }

    fn terminate(&mut self) {
        if self.child.try_wait().unwrap().is_none() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            self.child.wait().unwrap();
        }
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Runs `fabric ARGS`, waits (up to `limit`) until `ready()`, sends it `signal`, and waits (up
/// to `limit` again) for it to end. Returns how it ended and its stderr, read as it came (a
/// chatty child never blocks on a full pipe). A child that ends before it is ready, or
/// outlives a limit, is killed and fails the test with `what`.
pub fn signal_when_ready(
    args: &[&str],
    what: &str,
    ready: impl Fn() -> bool,
    signal: i32,
    limit: std::time::Duration,
) -> (std::process::ExitStatus, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fabric"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).map(|_| text)
    });
    let fail = |child: &mut std::process::Child, why: &str| -> ! {
        let _ = child.kill();
        panic!("{what}: {why}");
    };
    let waited = std::time::Instant::now();
    while !ready() {
        if child.try_wait().unwrap().is_some() {
            fail(&mut child, "ended before it was ready");
        }
        if waited.elapsed() > limit {
            fail(&mut child, "never got ready");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: signalling our own child, which has not been waited for (its pid is still ours).
    unsafe { libc::kill(child.id() as i32, signal) };
    let signalled = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if signalled.elapsed() > limit {
            fail(&mut child, "outlived its signal");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    (status, reader.join().unwrap().unwrap())
}
