//! Faults beyond a clean link down, on a live testbed: a degraded link's modelled queue drains
//! at the new rate, a lossy link loses its share of frames (and the hosts miss exactly what the
//! switch counted), a flapping link is repaired each time, a switch down leaves the rest
//! reachable, and bad requests change nothing. Needs root.
mod common;

use std::{
    net::{SocketAddr, UdpSocket},
    time::Duration,
};

use fabric_common::{counters::DropReason, queue::WIRE_OVERHEAD_BYTES};
use fabric_user::{
    model::{fault::FaultKind, plan::NodeId},
    state::State,
    sys::netns,
    testbed::{self, fault},
};

const PORT: u16 = 9999;
/// UDP payload of each test datagram; with UDP, IPv4 and Ethernet headers a 1,042-byte frame.
const PAYLOAD: usize = 1000;
const FRAME: u64 = PAYLOAD as u64 + 8 + 20 + 14;

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
        fault::degrade(&prefix, spec, None, Some(200_000), 3).unwrap();
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
        fault::degrade(&prefix, spec, Some(100.0), None, 0).unwrap();
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

    let links = fault::set_switch(&prefix, "z0c0", false).unwrap();
    assert_eq!(links.len(), 4, "one link to each RTSW: {links:?}");
    let down = State::load(&prefix).unwrap();
    assert_eq!(down.down_links.len(), 4);
    common::assert_all_reachable(&down);
    fault::set_switch(&prefix, "z0c0", true).unwrap();
    let up = State::load(&prefix).unwrap();
    assert!(up.down_links.is_empty());
    common::assert_all_reachable(&up);
}

/// Bad requests are refused with a message naming the problem, and change nothing.
#[test]
fn bad_fault_requests_change_nothing() {
    let prefix = common::unique_prefix('l', 3);
    let (_guard, state) = common::up(None, &prefix);
    let before = std::fs::read_to_string(fabric_user::state::state_path(&prefix)).unwrap();
    let err = |r: anyhow::Result<String>| format!("{:#}", r.unwrap_err());
    assert!(err(fault::degrade(&prefix, "z0r0:nope", Some(100.0), None, 0)).contains("has no port"));
    assert!(err(fault::degrade(&prefix, "z0r0:z0c1", Some(500.0), None, 0)).contains("at most its own 400"));
    assert!(err(fault::degrade(&prefix, "z0r0:z0c1", Some(0.0), None, 0)).contains("above 0"));
    assert!(err(fault::degrade(&prefix, "z0r0:z0c1", None, None, 0)).contains("give --rate, --loss"));
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
