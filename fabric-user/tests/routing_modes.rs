//! The routing modes beyond a hash (`flowlet`, `adaptive`, `spray`, `wcmp`) on a live testbed,
//! carrying our endpoints' traffic: every job completes with every byte delivered, whatever
//! reordering the mode causes (spray reorders, and the go-back-N endpoint then retransmits: the
//! retransmissions are printed, not bounded), and WCMP's weights follow a degraded uplink.
//! Needs root.
mod common;

use fabric_common::{balance::WcmpWeights, config::HashMode};
use fabric_user::{
    endpoint::{EndpointOptions, SportPolicy},
    model::placement::Placement,
    model::plan::Role,
    model::workload::Collective,
    run::{RunOptions, RunResult, run},
    state::State,
    testbed,
};

fn allreduce(hash: HashMode) -> RunOptions {
    RunOptions {
        collective: Collective::Allreduce,
        ranks: None,
        message_bytes: 1 << 20,
        iterations: 1,
        placement: Placement::Fragmented,
        hash: Some(hash),
        hash_seed: Some(11),
        seed: 1,
        endpoint: EndpointOptions { qps: 8, sport: SportPolicy::Fixed, ..Default::default() },
    }
}

fn go(state: &State, o: &RunOptions) -> RunResult {
    run(state, o, true).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Every switch's CONFIG holds `mode` with the topology's flowlet gap.
fn assert_mode(state: &State, mode: HashMode) {
    for sw in state.plan.switches() {
        let cfg = state.dataplane(sw).unwrap().config().unwrap();
        assert_eq!(cfg.mode(), mode, "{}", state.plan.nodes[sw].name);
        assert_eq!(cfg.flowlet_gap_ns, state.plan.topology.flowlet_gap_wall_ns());
    }
}

/// Per RTSW uplink of z0r0, the WCMP weights the switch holds for its uplink group must be the
/// ones the uplinks' modelled rates give.
fn assert_uplink_weights(state: &State, rates_gbps: &[f64]) {
    let plan = &state.plan;
    let r = plan.node_by_name("z0r0").unwrap();
    let mut dp = state.dataplane(r).unwrap();
    let rates: Vec<u64> = rates_gbps.iter().map(|&g| plan.topology.modelled_rate_bps(g)).collect();
    let expected = WcmpWeights::from_weights(&rates).unwrap();
    let uplinks = plan.uplinks(r);
    let found = (0..fabric_common::route::MAX_GROUPS).any(|slot| {
        let w = dp.wcmp(slot).unwrap();
        w.len == uplinks.len() as u32 && w == expected
    });
    assert!(found, "z0r0 holds no uplink group weighted as {rates_gbps:?} Gbit/s");
}

#[test]
fn every_routing_mode_carries_an_allreduce_to_completion() {
    let (_guard, state) = common::up(None, &common::unique_prefix('w', 0));
    let prefix = state.plan.topology.prefix.clone();
    let r = state.plan.node_by_name("z0r0").unwrap();
    assert_eq!(state.plan.nodes[r].role, Role::Rtsw);
    let uplink = state.plan.nodes[r].ports[state.plan.uplinks(r)[0]].ifname.clone();
    let nominal = state.plan.topology.tiers.rtsw.rate_gbps;
    for mode in [HashMode::Eecmp, HashMode::Flowlet, HashMode::Adaptive, HashMode::Spray, HashMode::Wcmp] {
        // WCMP runs with one uplink of z0r0 degraded to a quarter of its rate.
        if mode == HashMode::Wcmp {
            testbed::fault::degrade(&prefix, &format!("z0r0:{uplink}"), Some(nominal / 4.0), None, Some(1)).unwrap();
        }
        let state = State::load(&prefix).unwrap();
        let res = go(&state, &allreduce(mode));
        assert_mode(&state, mode);
        assert_eq!(res.bytes_delivered, res.bytes_needed, "{mode:?}: every byte delivered");
        let retransmitted: u64 = res.flows.iter().map(|f| f.retransmitted).sum();
        let sent: u64 = res.flows.iter().map(|f| f.packets_sent).sum();
        println!(
            "{:>9}: completion {:.3} s (modelled {:.1} us), uplink max/mean {:.2}, {retransmitted} of {sent} packets retransmitted",
            mode.as_str(),
            res.iterations[0].completion_ns as f64 / 1e9,
            res.iterations[0].modelled_completion_ns / 1e3,
            res.balance.worst_max_over_mean,
        );
        if mode == HashMode::Spray {
            // One QP's packets go everywhere: every uplink of every RTSW carried the job.
            for u in &res.uplinks {
                assert!(u.tx_bytes.iter().all(|(_, b)| *b > 0), "spray left an uplink idle: {u:?}");
            }
        }
        if mode == HashMode::Wcmp {
            let mut rates = vec![nominal; state.plan.uplinks(r).len()];
            rates[0] = nominal / 4.0;
            assert_uplink_weights(&state, &rates);
        }
    }
    // Spray over the degraded uplink. The XDP switches model their queues without holding
    // packets, so the slow uplink marks and pauses but delays nothing: reordering here comes
    // only from the hosts' and veths' own scheduling. The job must complete; the go-back-N cost
    // is printed (the twin, whose queues hold packets, shows the delay-driven reordering:
    // fabric-twin/tests/balance.rs).
    let res = go(&State::load(&prefix).unwrap(), &allreduce(HashMode::Spray));
    assert_eq!(res.bytes_delivered, res.bytes_needed, "spray over a degraded uplink: every byte delivered");
    let retransmitted: u64 = res.flows.iter().map(|f| f.retransmitted).sum();
    let sent: u64 = res.flows.iter().map(|f| f.packets_sent).sum();
    println!(
        "spray, z0r0:{uplink} at a quarter rate: completion {:.3} s, {retransmitted} of {sent} packets retransmitted",
        res.iterations[0].completion_ns as f64 / 1e9
    );
    testbed::fault::restore(&prefix, &format!("z0r0:{uplink}")).unwrap();
    assert_uplink_weights(&State::load(&prefix).unwrap(), &vec![nominal; state.plan.uplinks(r).len()]);
}
