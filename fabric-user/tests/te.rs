//! Centralised traffic engineering on a live testbed: the controller's per-flow entries take
//! precedence over the hash in the XDP switches, balance the uplinks better than E-ECMP, and
//! are recomputed around a failed link. Needs root.
mod common;

use fabric_common::config::HashMode;
use fabric_user::{
    endpoint::{EndpointOptions, SportPolicy},
    model::placement::Placement,
    model::workload::Collective,
    run::{RunOptions, RunResult, run},
    testbed,
};

fn ring(hash: HashMode) -> RunOptions {
    RunOptions {
        collective: Collective::Allreduce,
        ranks: None,
        message_bytes: 1 << 20,
        iterations: 1,
        placement: Placement::Fragmented,
        hash: Some(hash),
        hash_seed: Some(7),
        seed: 1,
        endpoint: EndpointOptions { qps: 4, sport: SportPolicy::Fixed, ..Default::default() },
    }
}

fn go(state: &fabric_user::state::State, o: &RunOptions) -> RunResult {
    run(state, o, true).unwrap_or_else(|e| panic!("{e:#}"))
}

#[test]
fn te_beats_eecmp_on_uplink_balance_and_routes_around_a_failed_link() {
    let (_guard, state) = common::up(None, &common::unique_prefix('j', 0));
    let eecmp = go(&state, &ring(HashMode::Eecmp));
    let te = go(&state, &ring(HashMode::Te));
    assert_eq!(te.bytes_delivered, te.bytes_needed);
    assert!(te.te_flows.is_some_and(|n| n > 0), "the controller placed the job's flows");
    assert!(
        te.balance.worst_max_over_mean < eecmp.balance.worst_max_over_mean,
        "TE {:.2} must beat E-ECMP {:.2} on the worst RTSW's uplink max/mean",
        te.balance.worst_max_over_mean,
        eecmp.balance.worst_max_over_mean
    );
    // Every switch with a choice got entries.
    let rtsw = state.plan.node_by_name("z0r0").unwrap();
    assert!(!state.dataplane(rtsw).unwrap().te_flows().unwrap().is_empty());

    // A spine link fails: the placement is recomputed around it at once, and the job's traffic
    // avoids it.
    let port = state.plan.uplinks(rtsw)[0];
    let ifname = state.plan.nodes[rtsw].ports[port].ifname.clone();
    testbed::set_link(&state.plan.topology.prefix, &format!("z0r0:{ifname}"), false).unwrap();
    let state = fabric_user::state::State::load(&state.plan.topology.prefix).unwrap();
    let after = go(&state, &ring(HashMode::Te));
    assert_eq!(after.bytes_delivered, after.bytes_needed);
    let z0r0 = after.uplinks.iter().find(|u| u.rtsw == "z0r0").unwrap();
    let on_failed = z0r0.tx_bytes.iter().find(|(p, _)| *p == ifname).map_or(0, |p| p.1);
    assert_eq!(on_failed, 0, "nothing crosses the failed link: {z0r0:?}");
    assert!(z0r0.tx_bytes.iter().map(|p| p.1).sum::<u64>() > 0);
}
