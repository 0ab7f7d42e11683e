//! Operational what-ifs: a link failing during a step (lost packets, go-back-N after the routes
//! are repaired), a drain (the routes change, nothing is lost), and a change after the step's
//! end (nothing changes).
mod common;

use common::{endpoints, leaf_spine, plain_qos, qp};
use fabric_common::config::HashMode;
use fabric_twin::{
    Change, Scheduled, Twin,
    net::{Network, TableRouting},
    report::StepReport,
    workload::{CcChoice, QpSpec},
};

/// Two hosts per leaf, two spines; leaf ports 2 and 3 are the uplinks to S0 and S1.
const PER_LEAF: usize = 2;
const L0: usize = 2 * PER_LEAF;
const UPLINK_S0: usize = PER_LEAF;

fn fabric() -> Network<TableRouting> {
    leaf_spine(PER_LEAF, 2, HashMode::FiveTuple, plain_qos())
}

/// The controller's routes without spine S0: both leaves' uplink groups keep S1 only.
fn without_s0(net: &Network<TableRouting>) -> Network<TableRouting> {
    let mut fixed = net.clone();
    for leaf in [L0, L0 + 1] {
        fixed.routing.groups[leaf][PER_LEAF] = vec![PER_LEAF + 1];
    }
    fixed
}

/// Eight QPs of 1 MB from L0's hosts to L1's, over both spines.
fn qps() -> Vec<QpSpec> {
    (0..8).map(|k| qp(k as usize % PER_LEAF, PER_LEAF + k as usize % PER_LEAF, 1_000_000, k)).collect()
}

fn run(changes: &[Scheduled<'_, TableRouting>], net: &Network<TableRouting>) -> StepReport {
    let mut twin = Twin::new(net, endpoints(CcChoice::None), 1);
    twin.run_step_with(&qps(), 10_000_000_000, changes).unwrap()
}

#[test]
fn a_failed_link_loses_packets_until_repaired_then_every_byte_arrives_later() {
    let (net, fixed) = (fabric(), fabric());
    let fixed = without_s0(&fixed);
    let healthy = run(&[], &net);
    assert!(healthy.finished && healthy.retransmitted() == 0);
    let via_s0 = healthy.ports[net.port_index(L0, UPLINK_S0) as usize].packets;
    assert!(via_s0 > 0, "some QPs hash onto spine S0");
    let t = healthy.completion_ns / 3;
    let changes = [
        Scheduled { at_ns: t, change: Change::LinkDown { node: L0, port: UPLINK_S0 } },
        Scheduled { at_ns: t + 50_000, change: Change::Routes(&fixed) },
    ];
    let failed = run(&changes, &net);
    assert!(failed.finished, "go-back-N recovers every lost packet once the routes avoid the link");
    assert!(failed.qps.iter().all(|q| q.completed_ns.is_some()));
    assert!(failed.lost_to_failures > 0 && failed.retransmitted() > 0, "{failed:?}");
    assert!(failed.completion_ns > healthy.completion_ns, "{} vs {}", failed.completion_ns, healthy.completion_ns);
    // Only what used S0 before the repair crossed that link.
    assert!(failed.ports[net.port_index(L0, UPLINK_S0) as usize].packets < via_s0);
}

#[test]
fn a_drain_moves_traffic_without_losing_any() {
    let (net, fixed) = (fabric(), fabric());
    let fixed = without_s0(&fixed);
    let healthy = run(&[], &net);
    let drained = run(&[Scheduled { at_ns: healthy.completion_ns / 3, change: Change::Routes(&fixed) }], &net);
    assert!(drained.finished);
    assert_eq!(drained.lost_to_failures, 0);
    let via_s0 = |r: &StepReport| r.ports[net.port_index(L0, UPLINK_S0) as usize].packets;
    assert!(via_s0(&drained) < via_s0(&healthy), "S0 carried less once drained");
    // Half the uplinks for two thirds of the step: it takes longer.
    assert!(drained.completion_ns > healthy.completion_ns);
}

#[test]
fn a_failure_after_the_step_ends_changes_nothing() {
    let (net, fixed) = (fabric(), fabric());
    let fixed = without_s0(&fixed);
    let healthy = run(&[], &net);
    let at = healthy.completion_ns + 1;
    let late = run(
        &[
            Scheduled { at_ns: at, change: Change::LinkDown { node: L0, port: UPLINK_S0 } },
            Scheduled { at_ns: at, change: Change::Routes(&fixed) },
        ],
        &net,
    );
    assert_eq!((late.completion_ns, late.lost_to_failures), (healthy.completion_ns, 0));
    assert_eq!(late.qps, healthy.qps);
    assert_eq!((late.member_packets, late.packet_hops), (healthy.member_packets, healthy.packet_hops));
}

#[test]
fn a_change_for_another_network_is_refused() {
    let net = fabric();
    let other = leaf_spine(PER_LEAF, 3, HashMode::FiveTuple, plain_qos());
    let mut twin = Twin::new(&net, endpoints(CcChoice::None), 1);
    let err = twin.run_step_with(&qps(), 1_000_000, &[Scheduled { at_ns: 5, change: Change::Routes(&other) }]);
    assert!(err.unwrap_err().to_string().contains("changes[0]: the new routes are for another network"));
    let err =
        twin.run_step_with(&qps(), 1_000_000, &[Scheduled { at_ns: 5, change: Change::LinkDown { node: 0, port: 3 } }]);
    assert!(err.unwrap_err().to_string().contains("changes[0]: node 0 has no port 3"));
}

#[test]
fn a_link_that_comes_back_up_carries_traffic_again_and_loses_nothing_more() {
    let (net, fixed) = (fabric(), fabric());
    let fixed = without_s0(&fixed);
    let healthy = run(&[], &net);
    let t = healthy.completion_ns / 4;
    let down = Scheduled { at_ns: t, change: Change::LinkDown { node: L0, port: UPLINK_S0 } };
    let around = Scheduled { at_ns: t + 50_000, change: Change::Routes(&fixed) };
    let failed = run(&[down, around], &net);
    let up = Scheduled { at_ns: 2 * t, change: Change::LinkUp { node: L0, port: UPLINK_S0 } };
    let back = Scheduled { at_ns: 2 * t, change: Change::Routes(&net) };
    let flapped = run(&[down, around, up, back], &net);
    assert!(flapped.finished && flapped.qps.iter().all(|q| q.completed_ns.is_some()));
    let via_s0 = |r: &StepReport| r.ports[net.port_index(L0, UPLINK_S0) as usize].packets;
    assert!(via_s0(&flapped) > via_s0(&failed), "S0 carries traffic again once it is up");
    // Both lose the same packets to the failure; the link that is up again loses none.
    assert_eq!(flapped.lost_to_failures, failed.lost_to_failures);
    assert!(
        healthy.completion_ns < flapped.completion_ns && flapped.completion_ns < failed.completion_ns,
        "healthy {} ns, flapped {} ns, failed {} ns",
        healthy.completion_ns,
        flapped.completion_ns,
        failed.completion_ns
    );
    // Routes back over it while it is still down: a black hole until the step's end.
    let holed = run(&[down, around, back], &net);
    assert!(holed.lost_to_failures > flapped.lost_to_failures);
    let err = Twin::new(&net, endpoints(CcChoice::None), 1).run_step_with(
        &qps(),
        1_000_000,
        &[Scheduled { at_ns: 5, change: Change::LinkUp { node: 0, port: 3 } }],
    );
    assert!(err.unwrap_err().to_string().contains("changes[0]: node 0 has no port 3"));
}
