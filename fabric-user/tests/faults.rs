//! Faults beyond a clean link down, on a live testbed: a degraded link's modelled queue drains
//! at the new rate, a lossy link loses its share of frames (and the hosts miss exactly what the
//! switch counted), a flapping link is repaired each time, a switch down leaves the rest
//! reachable, and bad requests change nothing. Needs root.
mod common;

use std::{
    collections::BTreeSet,
    net::{SocketAddr, UdpSocket},
    time::Duration,
};

use fabric_common::{counters::DropReason, fault::PortLoss, queue::WIRE_OVERHEAD_BYTES};
use fabric_user::{
    model::{
        fault::FaultKind,
        plan::{LinkId, NodeId},
        routing,
    },
    state::State,
    sys::netns,
    testbed::{self, fault},
};

const PORT: u16 = 9999;
/// UDP payload of each test datagram; with UDP, IPv4 and Ethernet headers a 1,042-byte frame.
const PAYLOAD: usize = 1000;
const FRAME: u64 = PAYLOAD as u64 + 8 + 20 + 14;
/// Flows of [`send_flows`].
const FLOWS: usize = 256;

fn host(state: &State, name: &str) -> NodeId {
    state.plan.node_by_name(name).unwrap()
}

/// The rack switch `r0` and `spec`s (`z0r0:PORT`) of its uplinks.
fn uplinks(state: &State, rtsw: &str) -> (NodeId, Vec<(usize, String)>) {
    let r = host(state, rtsw);
    let ports = state.plan.uplinks(r);
    (r, ports.into_iter().map(|p| (p, format!("{rtsw}:{}", state.plan.nodes[r].ports[p].ifname))).collect())
}

/// A UDP socket bound in namespace `ns` (it stays in that namespace on any thread).
fn socket_in(ns: &str, bind: SocketAddr) -> UdpSocket {
    netns::in_named(ns, || Ok(UdpSocket::bind(bind)?)).unwrap()
}

/// UDP datagrams the kernel of `ns` dropped for want of receive buffer (RcvbufErrors).
fn rcvbuf_errors(ns: &str) -> u64 {
    netns::in_named(ns, || {
        // /proc/net follows the process's namespace; thread-self follows this thread's.
        let text = std::fs::read_to_string("/proc/thread-self/net/snmp")?;
        let mut rows = text.lines().filter(|l| l.starts_with("Udp:"));
        let (names, values) = (rows.next().unwrap(), rows.next().unwrap());
        let i = names.split_whitespace().position(|n| n == "RcvbufErrors").unwrap();
        Ok(values.split_whitespace().nth(i).unwrap().parse()?)
    })
    .unwrap()
}

/// What [`send_and_count`] saw.
struct Sent {
    /// Datagrams the destination received.
    received: u64,
    /// Datagrams its kernel dropped for want of receive buffer.
    buf_dropped: u64,
    /// CLOCK_MONOTONIC just before the first datagram was sent.
    first_sent_ns: u64,
}

/// Sends `n` datagrams from host `src` to host `dst` as fast as the socket takes them, and
/// counts what `dst` received and what its kernel dropped for want of buffer.
fn send_and_count(state: &State, src: &str, dst: &str, n: usize) -> Sent {
    let plan = &state.plan;
    let (s, d) = (host(state, src), host(state, dst));
    let dst_ip = plan.host_ipv4(d);
    let rx = socket_in(&plan.netns(d), SocketAddr::from((dst_ip, PORT)));
    rx.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let tx = socket_in(&plan.netns(s), SocketAddr::from((plan.host_ipv4(s), 0)));
    let buf_errors_before = rcvbuf_errors(&plan.netns(d));
    let payload = [0u8; PAYLOAD];
    // The receiver reads while the sender sends, so that few datagrams wait for buffer.
    let mut first_sent_ns = 0;
    let received = std::thread::scope(|scope| {
        let counter = scope.spawn(|| {
            let mut received = 0;
            let mut buf = [0u8; 2048];
            while rx.recv_from(&mut buf).is_ok() {
                received += 1;
            }
            received
        });
        first_sent_ns = monotonic_ns();
        for _ in 0..n {
            tx.send_to(&payload, (dst_ip, PORT)).unwrap();
        }
        counter.join().unwrap()
    });
    Sent { received, buf_dropped: rcvbuf_errors(&plan.netns(d)) - buf_errors_before, first_sent_ns }
}

/// One drop reason summed over every port of switch `sw` (a drop is counted on the port the
/// frame came in on).
fn drops(state: &State, sw: NodeId, reason: DropReason) -> u64 {
    let mut dp = state.dataplane(sw).unwrap();
    (0..state.plan.nodes[sw].ports.len()).map(|p| dp.port_counters(p as u32).unwrap().drops[reason as usize]).sum()
}

/// A lossy link loses its share of frames, within the binomial bound, and the receiving host
/// misses exactly the frames the switch counted as `link_loss`; restored, it loses none.
#[test]
fn a_lossy_link_loses_its_share_and_the_switch_counts_every_one() {
    let prefix = common::unique_prefix('l', 0);
    let (_guard, state) = common::up(None, &prefix);
    let (r0, ups) = uplinks(&state, "z0r0");
    // Every uplink of rack 0, so the flow's one draw per frame is at z0r0 whichever it hashes to.
    for (_, spec) in &ups {
        fault::degrade(&prefix, spec, None, Some(200_000), Some(3)).unwrap();
    }
    let state = State::load(&prefix).unwrap();
    const N: usize = 3000;
    let Sent { received, buf_dropped, .. } = send_and_count(&state, "z0r0h0", "z0r1h0", N);
    let lost = N as u64 - received - buf_dropped;
    let counted = drops(&state, r0, DropReason::LinkLoss);
    eprintln!(
        "20% loss: {lost} of {N} frames lost ({buf_dropped} more dropped by the receiver's socket), {counted} counted"
    );
    assert_eq!(
        lost, counted,
        "hosts missed {lost} frames (besides {buf_dropped} socket drops), the switch counted {counted}"
    );
    let (mean, sd) = (N as f64 * 0.2, (N as f64 * 0.2 * 0.8).sqrt());
    assert!((lost as f64 - mean).abs() < 5.0 * sd, "{lost} of {N} lost at 20%: outside {mean} +- {:.0}", 5.0 * sd);

    for (_, spec) in &ups {
        fault::restore(&prefix, spec).unwrap();
    }
    let Sent { received, buf_dropped, .. } = send_and_count(&state, "z0r0h0", "z0r1h0", 500);
    assert_eq!(received + buf_dropped, 500, "a restored link loses nothing");
    assert_eq!(drops(&state, r0, DropReason::LinkLoss), counted, "no loss counted after the restore");
    let log: Vec<FaultKind> = State::load(&prefix).unwrap().faults.iter().map(|f| f.kind).collect();
    assert_eq!(log, [[FaultKind::LinkDegraded; 4], [FaultKind::LinkRestored; 4]].concat());
}

/// A degraded link's modelled queue drains at the new rate: a burst sent far faster than the
/// link ends in the queue at the time its bytes take at 100 Gbit/s (modelled), within 10%.
#[test]
fn a_degraded_link_drains_its_queue_at_the_degraded_rate() {
    let prefix = common::unique_prefix('l', 1);
    let (_guard, state) = common::up(None, &prefix);
    let (r0, ups) = uplinks(&state, "z0r0");
    for (_, spec) in &ups {
        fault::degrade(&prefix, spec, Some(100.0), None, Some(0)).unwrap();
    }
    let state = State::load(&prefix).unwrap();
    let scale = state.plan.topology.time_scale as f64;
    // 400 frames: 0.17 s to drain at 100 Gbit/s / 4000; sent in a few ms, so the queue never
    // empties meanwhile and its tail ends where the bytes' total wire time puts it.
    const N: usize = 400;
    // Timed from the first send, on CLOCK_MONOTONIC: the clock of bpf_ktime_get_ns, which the
    // queue model keeps time on. (Timed from before the sockets were set up, the setup's time
    // counted as drain time, and a slow machine's setup alone could break the 10%.)
    let Sent { received, buf_dropped, first_sent_ns: start } = send_and_count(&state, "z0r0h0", "z0r1h0", N);
    assert_eq!(received + buf_dropped, N as u64, "no loss was asked for");
    let mut dp = state.dataplane(r0).unwrap();
    let tail = ups.iter().map(|(p, _)| dp.queue(*p as u32, 0).unwrap().tail_ns).max().unwrap();
    let wire_bits = (N as u64 * (FRAME + WIRE_OVERHEAD_BYTES) * 8) as f64;
    let modelled_gbps = wire_bits / (tail - start) as f64 * scale;
    eprintln!("degraded to 100 Gbit/s: the queue drained at {modelled_gbps:.1} Gbit/s (modelled)");
    assert!((modelled_gbps - 100.0).abs() < 10.0, "the queue drained at {modelled_gbps:.1} Gbit/s (modelled), not 100");
    let status = testbed::status(&prefix).unwrap();
    assert_eq!(status.degraded_links.len(), 4, "{:?}", status.degraded_links);
}

/// A flap takes the link down and up `count` times, routing repaired each time; a switch down
/// leaves every host reachable through the other spines, and comes back.
#[test]
fn flaps_and_switch_downs_are_repaired_and_logged() {
    let prefix = common::unique_prefix('l', 2);
    let (_guard, _state) = common::up(None, &prefix);
    fault::flap(&prefix, "z0r0:z0c1", Duration::from_millis(100), 2).unwrap();
    let after = State::load(&prefix).unwrap();
    assert!(after.down_links.is_empty());
    let log: Vec<(FaultKind, u64)> = after.faults.iter().map(|f| (f.kind, f.at_unix_ms)).collect();
    let kinds: Vec<FaultKind> = log.iter().map(|f| f.0).collect();
    assert_eq!(kinds, [FaultKind::LinkDown, FaultKind::LinkUp, FaultKind::LinkDown, FaultKind::LinkUp]);
    assert!(log.windows(2).all(|w| w[1].1 >= w[0].1 + 50), "half a period between changes: {log:?}");
    common::assert_all_reachable(&after);

    let links = fault::set_switch(&prefix, "z0c0", false).unwrap().changed;
    assert_eq!(links.len(), 4, "one link to each RTSW: {links:?}");
    let down = State::load(&prefix).unwrap();
    assert_eq!(down.down_links.len(), 4);
    common::assert_all_reachable(&down);
    let up = fault::set_switch(&prefix, "z0c0", true).unwrap();
    assert_eq!((up.changed.len(), up.held_down.len()), (4, 0), "{up:?}");
    let up = State::load(&prefix).unwrap();
    assert!(up.down_links.is_empty());
    common::assert_all_reachable(&up);
}

/// A switch that comes back brings back only the links it took down: a link taken down by
/// itself, or one whose other end is a switch still down, stays down and is named; a link of a
/// down switch does not come up alone.
#[test]
fn a_switch_brings_back_only_the_links_it_took_down() {
    let prefix = common::unique_prefix('l', 4);
    let (_guard, state) = common::up(None, &prefix);
    let label = |spec: &str| state.plan.link_label(state.plan.find_link(spec).unwrap());
    let down_labels = || -> Vec<String> {
        let s = State::load(&prefix).unwrap();
        s.down_links.iter().map(|&l| s.plan.link_label(l)).collect()
    };
    testbed::set_link(&prefix, "z0r0:z0c0", false).unwrap();
    assert_eq!(fault::set_switch(&prefix, "z0c0", false).unwrap().changed.len(), 3, "one of its 4 was down already");
    let r1_links = state.plan.nodes[host(&state, "z0r1")].ports.len();
    assert_eq!(fault::set_switch(&prefix, "z0r1", false).unwrap().changed.len(), r1_links - 1, "z0r1:z0c0 was down");
    let err = format!("{:#}", testbed::set_link(&prefix, "z0r1:z0c1", true).unwrap_err());
    assert!(err.contains("is down with switch z0r1") && err.contains("fabric switch up z0r1"), "{err}");
    let err = format!("{:#}", fault::flap(&prefix, "z0r1:z0c1", Duration::from_millis(100), 1).unwrap_err());
    assert!(err.contains("is down with switch z0r1") && err.contains("nothing to flap"), "{err}");
    let said = fault::end_flap(&prefix, "z0r1:z0c1").unwrap();
    assert!(said.ends_with("was not being flapped by this command: left as it is"), "{said}");
    assert!(down_labels().contains(&label("z0r1:z0c1")), "ending a refused flap leaves the switch's link down");
    assert!(format!("{:#}", fault::set_switch(&prefix, "z0c0", false).unwrap_err()).contains("already down"));

    let up = fault::set_switch(&prefix, "z0c0", true).unwrap();
    let (by_hand, with_r1) = (label("z0r0:z0c0"), label("z0r1:z0c0"));
    assert_eq!(up.changed.len(), 2, "{up:?}");
    assert_eq!(
        up.held_down,
        [format!("{by_hand} (taken down by itself)"), format!("{with_r1} (switch z0r1 is down)")],
        "{up:?}"
    );
    assert!(down_labels().contains(&by_hand) && down_labels().contains(&with_r1));
    let status = testbed::status(&prefix).unwrap();
    assert_eq!(status.down_switches, ["z0r1"]);

    fault::set_switch(&prefix, "z0r1", true).unwrap();
    assert_eq!(down_labels(), std::slice::from_ref(&by_hand), "only the link taken down by itself is left");
    let err = format!("{:#}", fault::set_switch(&prefix, "z0c0", true).unwrap_err());
    assert!(err.contains(&format!("already up; its links down on their own come back with fabric link up: {by_hand}")));
    // A link down by hand is not flapped: the flap would end with it up.
    let err = format!("{:#}", fault::flap(&prefix, "z0r0:z0c0", Duration::from_millis(100), 1).unwrap_err());
    assert!(err.contains("is down (fabric link down): bring it up first"), "{err}");
    testbed::set_link(&prefix, "z0r0:z0c0", true).unwrap();
    let after = State::load(&prefix).unwrap();
    assert!(after.down_links.is_empty() && after.down_switches.is_empty() && after.links_taken_down.is_empty());
    common::assert_all_reachable(&after);
    // Brought up again while up: configured again, but no fault in the log (job records read it).
    testbed::set_link(&prefix, "z0r0:z0c0", true).unwrap();
    assert_eq!(State::load(&prefix).unwrap().faults.len(), after.faults.len(), "a link that was up came up");
}

/// A flap stopped in its down half (here by SIGTERM, as a supervisor's timeout sends) brings
/// its link back up before it dies of the signal: nothing stays down, every host is reachable.
#[test]
fn a_flap_stopped_half_way_leaves_its_link_up() {
    use std::os::unix::process::ExitStatusExt as _;
    let prefix = common::unique_prefix('l', 5);
    let (_guard, state) = common::up(None, &prefix);
    let link = "z0r0:z0c1";
    let label = state.plan.link_label(state.plan.find_link(link).unwrap());
    // One cycle of 20 minutes: the link is down for 10, far longer than the test waits.
    let args = ["link", "--prefix", &prefix, "flap", link, "--period", "1200s", "--count", "1"];
    let link_down = || !State::load(&prefix).unwrap().down_links.is_empty();
    let (status, err) = common::signal_when_ready(&args, "the flap", link_down, libc::SIGTERM, Duration::from_secs(60));
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}: {err}");
    assert!(err.contains(&format!("terminated: link {label} is up again")), "{err}");
    let after = State::load(&prefix).unwrap();
    assert!(after.down_links.is_empty() && after.links_taken_down.is_empty(), "{:?}", after.down_links);
    common::assert_all_reachable(&after);
}

/// A link being flapped belongs to its flap: another flap of it, `link up|down` of it and
/// `switch down` of a switch at its end are refused (the flap would undo them at its next step),
/// while a change of another link goes through and stays after the flap. A flap killed outright
/// (no cleanup) leaves its record, which holds nothing.
#[test]
fn a_flapped_link_belongs_to_its_flap() {
    use std::os::unix::process::ExitStatusExt as _;
    let prefix = common::unique_prefix('l', 6);
    let (_guard, state) = common::up(None, &prefix);
    let (link, other) = ("z0r0:z0c1", "z0r1:z0c0");
    let (l, o) = (state.plan.find_link(link).unwrap(), state.plan.find_link(other).unwrap());
    let args = ["link", "--prefix", &prefix, "flap", link, "--period", "1200s", "--count", "1"];
    let flapping = || State::load(&prefix).unwrap().links_taken_down.contains(&l);
    // What the test process (another process than the flap) may do while the link is down.
    let tried = std::cell::RefCell::new(None);
    let ready = || {
        if !flapping() {
            return false;
        }
        tried.borrow_mut().get_or_insert_with(|| {
            let refused = [
                testbed::set_link(&prefix, link, true).err(),
                testbed::set_link(&prefix, link, false).err(),
                fault::flap(&prefix, link, Duration::from_secs(1), 1).err(),
                fault::set_switch(&prefix, "z0c1", false).err(),
            ];
            (
                refused.map(|e| e.map(|e| format!("{e:#}"))),
                testbed::set_link(&prefix, other, false).map_err(|e| format!("{e:#}")),
            )
        });
        true
    };
    let (status, err) = common::signal_when_ready(&args, "the flap", ready, libc::SIGTERM, Duration::from_secs(60));
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}: {err}");
    let (refused, other_down) = tried.into_inner().expect("tried while the link was down");
    for (i, e) in refused.iter().enumerate() {
        let e = e.as_deref().unwrap_or_else(|| panic!("change {i} of the flapped link went through"));
        assert!(e.contains("being flapped by process"), "change {i}: {e}");
    }
    other_down.expect("another link can be taken down during the flap");
    let after = State::load(&prefix).unwrap();
    assert_eq!(after.links_taken_down, BTreeSet::from([o]), "the flap's end kept the other link down");
    assert!(after.flaps.is_empty(), "{:?}", after.flaps);

    let (status, err) = common::signal_when_ready(&args, "the flap", flapping, libc::SIGKILL, Duration::from_secs(60));
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}: {err}");
    assert!(State::load(&prefix).unwrap().flaps.contains_key(&l), "a killed flap cleans nothing up");
    testbed::set_link(&prefix, link, true).expect("a dead flap's record holds nothing");
    assert!(State::load(&prefix).unwrap().flaps.is_empty(), "the next change drops a dead flap's record");
    testbed::set_link(&prefix, other, true).unwrap();
    let end = State::load(&prefix).unwrap();
    assert!(end.down_links.is_empty(), "{:?}", end.down_links);
    common::assert_all_reachable(&end);
}

/// A child process (a flap), killed if the test ends before it.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `fabric link flap` of `link` (link `l`) as a child, with its stderr piped, and
/// waits until its first step has taken the link down.
fn flap_until_down(prefix: &str, link: &str, l: LinkId, period: &str, count: u32) -> KillOnDrop {
    let count = count.to_string();
    let flap = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_fabric"))
            .args(["link", "--prefix", prefix, "flap", link, "--period", period, "--count", &count])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let waited = std::time::Instant::now();
    while !State::load(prefix).unwrap().links_taken_down.contains(&l) {
        assert!(waited.elapsed() < Duration::from_secs(60), "the flap never took {link} down");
        std::thread::sleep(Duration::from_millis(20));
    }
    flap
}

/// A flap's step waits for another command's change of the testbed to end, and then starts
/// from the state that change saved: neither save loses the other's change. The test process
/// holds the change lock across the flap's up step, with a change of its own loaded before it.
#[test]
fn a_flap_step_waits_for_a_change_in_progress() {
    let prefix = common::unique_prefix('l', 8);
    let (_guard, state) = common::up(None, &prefix);
    let link = "z0r0:z0c1";
    let l = state.plan.find_link(link).unwrap();
    // Down at once, up 5 s later, then done 5 s after that.
    let mut flap = flap_until_down(&prefix, link, l, "10s", 1);
    let down_seen = std::time::Instant::now();
    let (mut mine, lock) = State::load_for_change(&prefix).unwrap();
    assert!(mine.links_taken_down.contains(&l), "the test took the lock after the flap's up step: too late to test");
    // Past the flap's up step, which must wait.
    std::thread::sleep(Duration::from_secs(7).saturating_sub(down_seen.elapsed()));
    assert!(State::load(&prefix).unwrap().links_taken_down.contains(&l), "the flap changed the link meanwhile");
    mine.faults.push(fabric_user::model::fault::FaultEvent::now(FaultKind::LinkDegraded, "marker", "the test's"));
    mine.save().unwrap();
    drop(lock);
    let status = flap.0.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut flap.0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{status:?}: {err}");
    let after = State::load(&prefix).unwrap();
    assert!(after.links_taken_down.is_empty(), "the flap's up was lost: {:?}", after.links_taken_down);
    let kinds: Vec<(FaultKind, &str)> = after.faults.iter().map(|f| (f.kind, f.target.as_str())).collect();
    let marker = kinds.iter().position(|&(_, name)| name == "marker").expect("the test's change was kept");
    assert_eq!(kinds[marker + 1].0, FaultKind::LinkUp, "{kinds:?}");
    common::assert_all_reachable(&after);
}

/// A flap outlives its testbed: `fabric down` and a new `up` under the same prefix come between
/// two of its steps. The new testbed's link is not the flap's: its next step finds no record of
/// the flap in the new state and ends it with an error saying why, and the new testbed stays as
/// built (no link down, no fault logged).
#[test]
fn a_flap_ends_when_its_testbed_is_built_again() {
    let prefix = common::unique_prefix('f', 0);
    let (guard, state) = common::up(None, &prefix);
    let link = "z0r0:z0c1";
    let l = state.plan.find_link(link).unwrap();
    // Down at once, then up after 5 s, for two cycles: 15 s for the test to stop it in.
    let mut flap = flap_until_down(&prefix, link, l, "10s", 2);
    let waited = std::time::Instant::now();
    // Stopped between two steps (it takes none while the test holds the lock), so that its next
    // step comes after the rebuild however slow the machine is.
    let flap_pid = flap.0.id() as i32;
    let lock = fabric_user::state::ChangeLock::take(&prefix).unwrap();
    // SAFETY: signalling our own child, which has not been waited for (its pid is still ours).
    unsafe { libc::kill(flap_pid, libc::SIGSTOP) };
    drop(lock);
    drop(guard);
    let (_guard, _) = common::up(None, &prefix);
    // SAFETY: as above.
    unsafe { libc::kill(flap_pid, libc::SIGCONT) };
    let status = loop {
        if let Some(status) = flap.0.try_wait().unwrap() {
            break status;
        }
        assert!(waited.elapsed() < Duration::from_secs(180), "the flap never ended");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut flap.0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success() && err.contains("no longer records this flap"), "{status:?}: {err}");
    let after = State::load(&prefix).unwrap();
    assert!(after.down_links.is_empty() && after.flaps.is_empty(), "{:?} {:?}", after.down_links, after.flaps);
    assert!(after.faults.is_empty(), "the flap changed the new testbed: {:?}", after.faults);
    common::assert_all_reachable(&after);
}

/// Moves switch `sw`'s pinned maps aside (a half-broken testbed: its maps cannot be opened)
/// while `f` runs; they are put back even if `f` panics, so that `down` finds them.
fn with_maps_aside<T>(state: &State, sw: NodeId, f: impl FnOnce() -> T) -> T {
    struct PutBack(std::path::PathBuf, std::path::PathBuf);
    impl Drop for PutBack {
        fn drop(&mut self) {
            let _ = std::fs::rename(&self.1, &self.0);
        }
    }
    let dir = fabric_user::state::bpf_dir(&state.plan.topology.prefix).join(&state.plan.nodes[sw].name);
    let aside = dir.with_file_name(format!("{}-aside", state.plan.nodes[sw].name));
    std::fs::rename(&dir, &aside).unwrap();
    let _put_back = PutBack(dir, aside);
    f()
}

/// Frames switch `sw` has redirected out of its port `port`.
fn tx_packets(state: &State, sw: NodeId, port: usize) -> u64 {
    state.dataplane(sw).unwrap().port_counters(port as u32).unwrap().tx_packets
}

/// Sends [`FLOWS`] flows from z0r0h0 to z0r1h0 and returns the frames z0r0 sent on its port
/// `port` meanwhile. Waits until z0r0's uplinks have carried nine in ten of the flows: the
/// switch forwards in softirq, which a loaded machine may run well after the send returned (and
/// a full veth ring may drop a frame).
fn flows_on(state: &State, r0: NodeId, port: usize) -> u64 {
    let uplinks = state.plan.uplinks(r0);
    let total = || uplinks.iter().map(|&p| tx_packets(state, r0, p)).sum::<u64>();
    let (port_before, total_before) = (tx_packets(state, r0, port), total());
    send_flows(state, "z0r0h0", "z0r1h0");
    let waited = std::time::Instant::now();
    while total() < total_before + FLOWS as u64 * 9 / 10 {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "z0r0 forwarded only {} of {FLOWS} flows",
            total() - total_before
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    tx_packets(state, r0, port) - port_before
}

/// One datagram from each of [`FLOWS`] source ports, `src` to `dst`: flows for the switches to
/// hash.
fn send_flows(state: &State, src: &str, dst: &str) {
    let plan = &state.plan;
    let (s, d) = (host(state, src), host(state, dst));
    for _ in 0..FLOWS {
        let tx = socket_in(&plan.netns(s), SocketAddr::from((plan.host_ipv4(s), 0)));
        tx.send_to(&[0u8; 64], (plan.host_ipv4(d), PORT)).unwrap();
    }
}

/// A change that fails half-way, at a switch whose maps are gone, is refused naming the switch
/// and leaves the fabric as it was. A degradation: the end written first gets its rate back.
/// A link down: the switches rerouted before the failure get their tables back, so the rack
/// switch still sends on the link (and stops once the same change succeeds).
#[test]
fn a_change_that_fails_half_way_is_rolled_back() {
    let prefix = common::unique_prefix('l', 9);
    let (_guard, state) = common::up(None, &prefix);
    let spec = "z0r0:z0c1";
    let l = state.plan.find_link(spec).unwrap();
    let link = &state.plan.links[l];
    let (first, second) = ((link.a, link.a_port), link.b);
    let nominal = state.plan.topology.modelled_rate_bps(link.rate_gbps);
    let err =
        with_maps_aside(&state, second, || fault::degrade(&prefix, spec, Some(100.0), None, Some(1)).unwrap_err());
    assert!(format!("{err:#}").contains(&format!("switch {}", state.plan.nodes[second].name)), "{err:#}");
    assert_eq!(state.dataplane(first.0).unwrap().port_rate(first.1 as u32).unwrap(), nominal, "not rolled back");
    assert!(State::load(&prefix).unwrap().degraded.is_empty());

    let old = routing::compute(&state.plan, &BTreeSet::new());
    let new = routing::compute(&state.plan, &BTreeSet::from([l]));
    let changed: Vec<NodeId> = state.plan.switches().filter(|&sw| old[sw] != new[sw]).collect();
    let (r0, broken) = (host(&state, "z0r0"), *changed.last().unwrap());
    assert!(changed.iter().position(|&sw| sw == r0) < Some(changed.len() - 1), "z0r0 is reprogrammed first");
    let err = with_maps_aside(&state, broken, || testbed::set_link(&prefix, spec, false).unwrap_err());
    assert!(format!("{err:#}").contains(&format!("switch {}", state.plan.nodes[broken].name)), "{err:#}");
    let after = State::load(&prefix).unwrap();
    assert!(after.down_links.is_empty() && after.links_taken_down.is_empty() && after.faults.is_empty());
    let port = if link.a == r0 { link.a_port } else { link.b_port };
    // A quarter of the flows hash onto each of z0r0's four uplinks: 64 +- 7 here, none if z0r0
    // kept the tables that route around the link.
    let carried = flows_on(&after, r0, port);
    assert!(carried >= FLOWS as u64 / 10, "z0r0 routes around {spec} though the change failed: {carried} frames on it");
    common::assert_all_reachable(&after);

    testbed::set_link(&prefix, spec, false).unwrap();
    let down = State::load(&prefix).unwrap();
    assert_eq!(flows_on(&down, r0, port), 0, "z0r0 still sends on {spec}, which is down");
}

/// A second `link degrade` changes what it gives and keeps the rest: a loss after a rate
/// leaves the rate in force at both switch ends.
#[test]
fn a_later_degradation_keeps_the_earlier_rate() {
    let prefix = common::unique_prefix('l', 7);
    let (_guard, state) = common::up(None, &prefix);
    let spec = "z0r0:z0c1";
    let l = state.plan.find_link(spec).unwrap();
    fault::degrade(&prefix, spec, Some(100.0), None, Some(1)).unwrap();
    let what = fault::degrade(&prefix, spec, None, Some(1000), Some(1)).unwrap();
    assert!(what.ends_with("100 Gbit/s (of 400), 0.1% loss"), "{what}");
    let link = &state.plan.links[l];
    let degraded = state.plan.topology.modelled_rate_bps(100.0);
    for (node, port) in [(link.a, link.a_port), (link.b, link.b_port)] {
        let mut dp = state.dataplane(node).unwrap();
        assert_eq!(dp.port_rate(port as u32).unwrap(), degraded, "{}", state.plan.nodes[node].name);
        assert_eq!(dp.port_loss(port as u32).unwrap().threshold, PortLoss::new(1000, 0).threshold);
    }
    // What a job's slow NIC does over it: slower for a while, the loss kept, then the
    // degradation in force before is put back.
    let (set, users) = fault::slow_for_a_while(&prefix, spec, 50.0).unwrap();
    assert_eq!(State::load(&prefix).unwrap().degraded[&l], set);
    assert_eq!(set.loss_ppm, 1000, "the slow NIC keeps the loss");
    assert_eq!(fault::put_back(&prefix, spec, set, users).unwrap(), what);
    assert_eq!(State::load(&prefix).unwrap().degraded[&l], users);
    // A change of the user's during the slow NIC is kept at its end.
    let (set, before) = fault::slow_for_a_while(&prefix, spec, 50.0).unwrap();
    let users_now = fault::degrade(&prefix, spec, Some(200.0), None, None).unwrap();
    assert!(fault::put_back(&prefix, spec, set, before).unwrap().ends_with("changed since, left as it is"));
    assert_eq!(
        state.dataplane(link.a).unwrap().port_rate(link.a_port as u32).unwrap(),
        state.plan.topology.modelled_rate_bps(200.0),
        "the user's 200 Gbit/s stays"
    );
    assert_eq!(fault::degrade(&prefix, spec, Some(100.0), None, None).unwrap(), what, "after {users_now}");
    // The link's own rate gives the rate back and keeps the loss; no loss then restores it.
    let what = fault::degrade(&prefix, spec, Some(400.0), None, None).unwrap();
    assert!(what.ends_with(": 0.1% loss"), "{what}");
    assert_eq!(
        state.dataplane(link.a).unwrap().port_rate(link.a_port as u32).unwrap(),
        state.plan.topology.modelled_rate_bps(400.0)
    );
    fault::degrade(&prefix, spec, None, Some(0), None).unwrap();
    let after = State::load(&prefix).unwrap();
    assert!(after.degraded.is_empty(), "{:?}", after.degraded);
    assert_eq!(after.faults.last().unwrap().kind, FaultKind::LinkRestored);
}

/// Bad requests are refused with a message naming the problem, and change nothing.
#[test]
fn bad_fault_requests_change_nothing() {
    let prefix = common::unique_prefix('l', 3);
    let (_guard, state) = common::up(None, &prefix);
    let before = std::fs::read_to_string(fabric_user::state::state_path(&prefix)).unwrap();
    let err = |r: anyhow::Result<String>| format!("{:#}", r.unwrap_err());
    assert!(err(fault::degrade(&prefix, "z0r0:nope", Some(100.0), None, Some(0))).contains("has no port"));
    assert!(err(fault::degrade(&prefix, "z0r0:z0c1", Some(500.0), None, Some(0))).contains("at most its own 400"));
    assert!(err(fault::degrade(&prefix, "z0r0:z0c1", Some(0.0), None, Some(0))).contains("above 0"));
    assert!(err(fault::degrade(&prefix, "z0r0:z0c1", None, None, Some(0))).contains("give --rate, --loss"));
    assert!(err(fault::restore(&prefix, "z0r0:z0c1")).contains("is not degraded"));
    let switch_err = |name| format!("{:#}", fault::set_switch(&prefix, name, false).unwrap_err());
    assert!(switch_err("z0r0h0").contains("is a host, not a switch"));
    assert!(switch_err("z9c9").contains("no switch"));
    assert!(format!("{:#}", fault::set_switch(&prefix, "z0c0", true).unwrap_err()).contains("already up"));
    assert_eq!(std::fs::read_to_string(fabric_user::state::state_path(&prefix)).unwrap(), before, "state changed");
    let (r0, ups) = uplinks(&state, "z0r0");
    let mut dp = state.dataplane(r0).unwrap();
    for (p, _) in &ups {
        assert_eq!(dp.port_loss(*p as u32).unwrap().threshold, 0);
        let nominal = state.plan.topology.modelled_rate_bps(400.0);
        assert_eq!(dp.port_rate(*p as u32).unwrap(), nominal);
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill, alive for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
