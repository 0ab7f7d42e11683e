//! PFC, drops, ECN and DCQCN: the congestion behaviour the twin's switches and endpoints
//! produce with fabric-common's thresholds and fabric-roce's congestion controls.
mod common;

use common::{RATE, endpoints, leaf_spine, qp, shallow_qos, star};
use fabric_common::config::HashMode;
use fabric_roce::dcqcn::DcqcnParams;
use fabric_twin::{
    Twin,
    net::NodeKind,
    report::StepReport,
    switch::QueueModel,
    workload::{CcChoice, QpSpec},
};

/// Hosts 0, 1, 2 (leaf L0) and 5, 6, 7 (leaf L1) all write to host 4 (L1), through one spine.
fn two_tier_incast(pfc: bool) -> StepReport {
    two_tier_incast_with(pfc, QueueModel::Held)
}

fn two_tier_incast_with(pfc: bool, queues: QueueModel) -> StepReport {
    let net = leaf_spine(4, 1, HashMode::FiveTuple, shallow_qos(100_000, pfc, false));
    let qps: Vec<QpSpec> =
        [0, 1, 2, 5, 6, 7].iter().enumerate().map(|(k, &src)| qp(src, 4, 400_000, k as u32)).collect();
    let mut twin = Twin::new(&net, endpoints(CcChoice::None), 7);
    twin.set_queue_model(queues);
    twin.run_step(&qps, 10_000_000_000).unwrap()
}

#[test]
fn with_pfc_a_paused_port_holds_its_queue_and_nothing_is_lost() {
    let r = two_tier_incast(true);
    assert!(r.finished, "every QP completes");
    let (leaf, spine, host) = (&r.tiers[0], &r.tiers[1], &r.tiers[2]);
    assert_eq!(r.tiers.iter().map(|t| t.drops).sum::<u64>(), 0, "lossless");
    assert_eq!(r.retransmitted(), 0);
    // The spine has one link in and one out at the same rate: its queue only builds because
    // L1 paused it, and it could only pause L0 (its upstream) by holding bytes over Xoff.
    assert!(spine.pauses_received > 0, "L1 paused the spine");
    assert!(spine.max_depth_bytes > 20_000, "the paused spine port held {} B", spine.max_depth_bytes);
    assert!(spine.pauses_sent > 0, "and the spine paused L0 in turn");
    assert!(leaf.pauses_sent > 0 && host.pauses_received > 0, "the leaves paused the senders");
}

#[test]
fn without_pfc_the_same_incast_drops_and_retransmits() {
    let r = two_tier_incast(false);
    assert!(r.finished, "go-back-N recovers every loss");
    assert_eq!(r.tiers.iter().map(|t| t.pauses_sent).sum::<u64>(), 0);
    assert!(r.tiers[0].drops > 0, "the 100 KB port to host 4 overflows");
    assert!(r.retransmitted() > 0);
    assert!(r.tiers[1].max_depth_bytes <= 2 * 4200, "an unpaused spine port never queues");
}

#[test]
fn under_the_testbeds_phantom_queues_a_paused_switch_keeps_sending_and_counts_it() {
    let (held, phantom) = (two_tier_incast(true), two_tier_incast_with(true, QueueModel::Phantom));
    assert!(held.finished && phantom.finished, "every QP completes");
    let sent_while_paused = |r: &StepReport| r.tiers.iter().map(|t| t.sent_while_paused).collect::<Vec<_>>();
    assert_eq!(sent_while_paused(&held), [0, 0, 0], "a held queue stops while paused");
    let (leaf, spine, host) = (&phantom.tiers[0], &phantom.tiers[1], &phantom.tiers[2]);
    assert!(leaf.pauses_sent > 0 && spine.pauses_received > 0, "L1's modelled account paused the spine");
    assert!(spine.sent_while_paused > 0, "which kept sending, as a paused XDP switch does");
    assert!(host.pauses_received > 0 && host.sent_while_paused == 0, "the hosts obey their pauses");
    assert_eq!(phantom.tiers.iter().map(|t| t.drops).sum::<u64>(), 0, "lossless");
}

#[test]
fn a_phantom_queue_marks_by_its_modelled_depth_and_only_the_hosts_downlink_delays() {
    // The last hop: a receiver's downlink delivers at its rate in either model, so an incast
    // into one host takes exactly as long.
    let (held, phantom) = (marked_incast(CcChoice::None), marked_incast_with(CcChoice::None, QueueModel::Phantom));
    assert!(held.finished && phantom.finished);
    assert_eq!(phantom.completion_ns, held.completion_ns, "the downlink is the bottleneck either way");
    // A switch-to-switch bottleneck: hosts 0-2 of leaf L0 write to hosts 5-7 of L1 over L0's
    // one uplink. Held, the uplink sends the three flows at its rate; phantom, it passes them
    // on at once (its modelled depth still grows and is marked), and each receiver's downlink
    // takes one flow at line rate.
    let cross = |queues| {
        let net = leaf_spine(4, 1, HashMode::FiveTuple, shallow_qos(64 << 20, false, true));
        let qps: Vec<QpSpec> = [(0, 5), (1, 6), (2, 7)].iter().map(|&(s, d)| qp(s, d, 2_000_000, s as u32)).collect();
        let mut twin = Twin::new(&net, endpoints(CcChoice::None), 3);
        twin.set_queue_model(queues);
        twin.run_step(&qps, 10_000_000_000).unwrap()
    };
    let (held, phantom) = (cross(QueueModel::Held), cross(QueueModel::Phantom));
    assert!(held.finished && phantom.finished);
    assert!(
        phantom.completion_ns * 2 < held.completion_ns,
        "phantom {} ns against held {} ns",
        phantom.completion_ns,
        held.completion_ns
    );
    let leaf = &phantom.tiers[0];
    assert!(leaf.max_depth_bytes > 1_000_000, "the uplink's modelled depth grows: {} B", leaf.max_depth_bytes);
    assert!(leaf.ecn_marked * 2 > held.tiers[0].ecn_marked, "and is marked as the held queue is");
}

/// Four hosts write 2 MB each to a fifth through one switch marking ECN from 20 KB.
fn marked_incast(cc: CcChoice) -> StepReport {
    marked_incast_with(cc, QueueModel::Held)
}

fn marked_incast_with(cc: CcChoice, queues: QueueModel) -> StepReport {
    let net = star(5, shallow_qos(64 << 20, false, true));
    let qps: Vec<QpSpec> = (0..4).map(|k| qp(k, 4, 2_000_000, k as u32)).collect();
    let mut twin = Twin::new(&net, endpoints(cc), 3);
    twin.set_queue_model(queues);
    twin.run_step(&qps, 10_000_000_000).unwrap()
}

#[test]
fn dcqcn_cuts_the_rate_on_marks_and_no_control_does_not() {
    let none = marked_incast(CcChoice::None);
    let dcqcn = marked_incast(CcChoice::Dcqcn(DcqcnParams::default()));
    assert!(none.finished && dcqcn.finished);
    assert!(none.tiers[0].ecn_marked > 0, "the queue is marked either way");
    assert!(none.qps.iter().all(|q| q.cnps_received == 0 && q.min_rate_bps == Some(RATE)));
    assert!(dcqcn.qps.iter().all(|q| q.cnps_received > 0), "every sender hears CNPs");
    assert!(dcqcn.qps.iter().all(|q| q.min_rate_bps.unwrap() < RATE / 2), "and cuts its rate");
    let (deep_none, deep_dcqcn) = (none.tiers[0].depth_p99_bytes, dcqcn.tiers[0].depth_p99_bytes);
    assert!(deep_dcqcn * 2 < deep_none, "DCQCN keeps the queue shorter: p99 {deep_dcqcn} B vs {deep_none} B");
}

#[test]
fn a_pause_is_refreshed_while_the_ingress_stays_over_xon() {
    // Pauses of 50 quanta last 3.2 µs at 8 Gbit/s: without the refresh at half that time the
    // senders would resume while the switch still holds more than Xon, and with the pause
    // state still set it would never pause them again: the queue would take both 2 MB flows.
    let mut net = star(3, shallow_qos(64 << 20, true, false));
    if let NodeKind::Switch(s) = &mut net.nodes[3].kind {
        s.pause_quanta = 50;
    }
    let qps = [qp(0, 2, 2_000_000, 0), qp(1, 2, 2_000_000, 1)];
    let r = Twin::new(&net, endpoints(CcChoice::None), 1).run_step(&qps, 10_000_000_000).unwrap();
    assert!(r.finished);
    let sw = &r.tiers[0];
    assert_eq!(sw.drops, 0);
    // Each ingress pauses above 20 KB and lets go below 10 KB: the port to host 2 holds both
    // ingresses' share plus what was in flight when the pauses took effect.
    assert!(sw.max_depth_bytes < 64_000, "queue held {} B", sw.max_depth_bytes);
    // The port drains 4 MB at a byte per ns: 4 ms, through which the two ingresses are
    // mostly paused, refreshed every 1.6 µs (some 2,500 times each if paused throughout).
    assert_eq!(RATE, 8_000_000_000);
    let frames = sw.pauses_sent;
    assert!(frames > 2_000, "{frames} pause frames: the pauses were refreshed");
}

/// Two hosts write 2 MB each to a third through one switch at one byte per ns: the port to
/// host 2 is the bottleneck, so the step lasts at least the 4 MB (plus wire overhead) it
/// drains, and each sender, busy only for its own 2 MB, spends the rest paused by the switch.
#[test]
fn an_incast_pauses_the_senders_for_the_time_the_bottleneck_takes_beyond_their_own() {
    let net = star(3, shallow_qos(64 << 20, true, false));
    let qps = [qp(0, 2, 2_000_000, 0), qp(1, 2, 2_000_000, 1)];
    let r = Twin::new(&net, endpoints(CcChoice::None), 1).run_step(&qps, 10_000_000_000).unwrap();
    assert!(r.finished);
    assert_eq!(r.paused.len(), 1, "only the switch paused, only the hosts, only class 3: {:?}", r.paused);
    let p = r.paused_between("sw", "host");
    assert_eq!((p.class, p.ports, p.ports_paused), (3, 3, 2), "h0's and h1's ports of the three were paused");
    let t = r.completion_ns;
    assert!(t >= 4_000_000, "the bottleneck drains 4 MB at 1 B/ns: {t} ns");
    // Each sender's link is busy at least 2 ms with its own bytes and otherwise paused or
    // idle (idle only before the first Xoff and at the tail): the senders' paused time
    // together is close to the time their own bytes leave. A pause taking hold mid-frame
    // lets that frame finish, so a pause can overlap up to one frame's time (4,200 ns) of
    // sending: per PFC frame received at most that much beyond the time not sending.
    let own = 2_000_000;
    let frames = r.tiers[1].pauses_received;
    assert!(p.paused_ns >= (2 * t - 2 * own) * 8 / 10, "paused {} ns in a step of {t} ns", p.paused_ns);
    assert!(p.paused_ns <= 2 * (t - own) + frames * 4_200, "paused {} ns in a step of {t} ns", p.paused_ns);
    assert!(p.longest_pause_ns > 0 && p.longest_pause_ns <= t - own);
    assert!((p.paused_share - p.paused_ns as f64 / (3 * t) as f64).abs() < 1e-9);
    assert_eq!(
        r.paused_between("host", "sw"),
        fabric_twin::report::PausedTime { pausing: "host".into(), paused: "sw".into(), ..Default::default() }
    );
}

#[test]
fn a_fabric_without_congestion_is_never_paused() {
    // A permutation through one switch: every port carries one flow at line rate.
    let net = star(4, shallow_qos(64 << 20, true, false));
    let qps = [qp(0, 1, 2_000_000, 0), qp(1, 2, 2_000_000, 1), qp(2, 3, 2_000_000, 2), qp(3, 0, 2_000_000, 3)];
    let r = Twin::new(&net, endpoints(CcChoice::None), 1).run_step(&qps, 10_000_000_000).unwrap();
    assert!(r.finished);
    assert!(r.paused.is_empty(), "{:?}", r.paused);
    assert!(r.ports.iter().all(|c| c.paused_ns == [0; 8] && c.longest_pause_ns == [0; 8]));
}

#[test]
fn a_two_tier_incast_reports_which_tier_paused_which() {
    let r = two_tier_incast(true);
    let spine_by_leaf = r.paused_between("leaf", "spine");
    let leaf_by_spine = r.paused_between("spine", "leaf");
    assert!(spine_by_leaf.paused_ns > 0, "L1 paused the spine: {:?}", r.paused);
    assert!(leaf_by_spine.paused_ns > 0, "the spine paused L0: {:?}", r.paused);
    assert_eq!((spine_by_leaf.ports, leaf_by_spine.ports), (2, 2), "one spine, two leaves");
    assert!(spine_by_leaf.longest_pause_ns <= r.completion_ns);
    assert!(r.paused_between("leaf", "host").paused_ns > 0);
}

/// Host 2 stops reading for 500 µs (a NIC with a full buffer): it pauses its switch port every
/// 32 µs with pauses of 64 µs, then resumes. The switch's port toward it is paused once, for
/// the stall (from the first frame's arrival to the resume's), and the switch in turn pauses
/// the sender.
#[test]
fn a_stuck_receiver_pauses_its_switch_port_for_the_stall_and_the_pause_spreads_upstream() {
    use fabric_twin::engine::{Change, Scheduled};
    let net = star(3, shallow_qos(64 << 20, true, false));
    let stall = 500_000;
    // 1,000 quanta at 8 Gbit/s: 64 µs.
    let frame = |at_ns, quanta| Scheduled { at_ns, change: Change::Pfc { node: 2, port: 0, class: 3, quanta } };
    let mut changes: Vec<_> = (0..stall).step_by(32_000).map(|t| frame(t, 1000)).collect();
    changes.push(frame(stall, 0));
    let qps = [qp(0, 2, 1_000_000, 0)];
    let mut twin = Twin::new(&net, endpoints(CcChoice::None), 1);
    let r = twin.run_step_with(&qps, 10_000_000_000, &changes).unwrap();
    assert!(r.finished);
    let sw_by_host = r.paused_between("host", "sw");
    assert_eq!((sw_by_host.ports, sw_by_host.ports_paused), (3, 1), "only the port toward host 2");
    // Both the first frame and the resume take the same time to arrive: the pause lasts the stall.
    assert_eq!(sw_by_host.longest_pause_ns, stall, "{sw_by_host:?}");
    assert_eq!(sw_by_host.paused_ns, stall);
    assert!(r.completion_ns > stall);
    let host_by_sw = r.paused_between("sw", "host");
    assert!(host_by_sw.paused_ns > 0 && host_by_sw.longest_pause_ns < stall, "{host_by_sw:?}");
    assert_eq!(r.tiers[1].pauses_sent, changes.len() as u64, "the host sent every frame it was told to");

    let bad = [Scheduled { at_ns: 0, change: Change::Pfc { node: 2, port: 0, class: 8, quanta: 1 } }];
    let err = twin.run_step_with(&qps, 1_000_000, &bad).unwrap_err().to_string();
    assert!(err.contains("changes[0]: class 8 does not exist"), "{err}");
}
