//! Centralised traffic engineering on a live testbed: the controller's per-flow entries take
//! precedence over the hash in the XDP switches, balance the uplinks better than E-ECMP, and
//! are recomputed around a failed link. Needs root.
mod common;

use std::collections::{BTreeMap, BTreeSet};

use fabric_common::config::HashMode;
use fabric_user::{
    endpoint::{EndpointOptions, SportPolicy},
    forwarding::{fabric::SimFabric, route::directed},
    model::placement::Placement,
    model::plan::Role,
    model::workload::{Collective, on_hosts, schedule},
    run::{RunOptions, RunResult, run},
    state::State,
    te::{self, TeFlow, TePlacement},
    testbed,
};

fn ring(hash: Option<HashMode>) -> RunOptions {
    RunOptions {
        collective: Collective::Allreduce,
        ranks: None,
        message_bytes: 1 << 20,
        iterations: 1,
        placement: Placement::Fragmented,
        hash,
        hash_seed: Some(7),
        seed: 1,
        // ACK every packet: then the ACK bytes, like the data bytes, are fixed by the job alone,
        // and the uplink counters can be compared with the controller's byte count exactly.
        endpoint: EndpointOptions { qps: 4, sport: SportPolicy::Fixed, ack_every: 1, ..Default::default() },
    }
}

fn go(state: &State, o: &RunOptions) -> RunResult {
    run(state, o, true).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The job's traffic matrix, built here from the run's options as `run` builds it for the
/// controller.
fn job_flows(state: &State, o: &RunOptions) -> Vec<TeFlow> {
    let plan = &state.plan;
    let ranks = o.ranks.unwrap_or_else(|| plan.hosts().count());
    let hosts = o.placement.place(plan, ranks).unwrap();
    let steps: Vec<_> =
        schedule(o.collective, ranks, o.message_bytes, o.seed).iter().map(|s| on_hosts(s, &hosts)).collect();
    te::job_flows(plan, &steps, &o.endpoint)
}

/// Every switch's TE table must hold exactly the entries of `placement`, named by the group
/// slots of the tables now in force.
fn assert_installed(state: &State, placement: &TePlacement) {
    for sw in state.plan.switches() {
        let expected: BTreeSet<_> = placement
            .entries
            .get(&sw)
            .into_iter()
            .flatten()
            .map(|(k, e)| (*k, state.group_slot(sw, e.group), e.member_index))
            .collect();
        let installed: BTreeSet<_> = state
            .dataplane(sw)
            .unwrap()
            .te_flows()
            .unwrap()
            .into_iter()
            .map(|(k, e)| (k, e.group, e.member_index))
            .collect();
        let name = &state.plan.nodes[sw].name;
        assert_eq!(installed.len(), expected.len(), "{name}: TE entries installed vs the controller's placement");
        assert!(installed == expected, "{name}: the installed TE entries are not the controller's placement");
    }
}

/// Per RTSW uplink (by port name): the bytes the placement put on it.
fn placed_uplink_bytes(state: &State, placement: &TePlacement) -> BTreeMap<String, Vec<(String, u64)>> {
    let plan = &state.plan;
    let fabric = SimFabric::from_controller(plan, &state.down_links);
    plan.switches()
        .filter(|&s| plan.nodes[s].role == Role::Rtsw)
        .map(|r| {
            let ports = plan.uplinks(r).into_iter().map(|p| {
                let bytes = placement.link_bytes.get(&directed(&fabric, r, p)).copied().unwrap_or(0);
                (plan.nodes[r].ports[p].ifname.clone(), bytes)
            });
            (plan.nodes[r].name.clone(), ports.collect())
        })
        .collect()
}

#[test]
fn te_beats_eecmp_on_uplink_balance_and_recomputes_its_placement_after_a_link_failure() {
    let (_guard, state) = common::up(None, &common::unique_prefix('j', 0));
    let eecmp = go(&state, &ring(Some(HashMode::Eecmp)));
    let te = go(&state, &ring(Some(HashMode::Te)));
    assert_eq!(te.bytes_delivered, te.bytes_needed);
    assert!(te.te_flows.is_some_and(|n| n > 0), "the controller placed the job's flows");
    assert!(
        te.balance.worst_max_over_mean < eecmp.balance.worst_max_over_mean,
        "TE {:.2} must beat E-ECMP {:.2} on the worst RTSW's uplink max/mean",
        te.balance.worst_max_over_mean,
        eecmp.balance.worst_max_over_mean
    );
    let flows = job_flows(&state, &ring(Some(HashMode::Te)));
    assert_installed(&state, &te::assign(&state.plan, &state.down_links, &flows).unwrap());

    // A spine link fails. `fabric link down` itself must recompute the placement over the links
    // left and reinstall it: the next run keeps the switches in TE mode but installs nothing
    // (`hash: None`), so what it measures is the recomputed placement, or E-ECMP's rehash of
    // stale entries if there was none.
    let rtsw = state.plan.node_by_name("z0r0").unwrap();
    let ifname = state.plan.nodes[rtsw].ports[state.plan.uplinks(rtsw)[0]].ifname.clone();
    testbed::set_link(&state.plan.topology.prefix, &format!("z0r0:{ifname}"), false).unwrap();
    let state = State::load(&state.plan.topology.prefix).unwrap();
    let placement = te::assign(&state.plan, &state.down_links, &flows).unwrap();
    assert_installed(&state, &placement);

    let after = common::run_until_no_host_drop_resends("TE after the link failure", || go(&state, &ring(None)));
    assert_eq!(after.bytes_delivered, after.bytes_needed);
    let retransmitted: u64 = after.flows.iter().map(|f| f.retransmitted).sum();
    assert_eq!(retransmitted, 0, "the run retransmitted, so its bytes are not the job's alone");
    // Every uplink carried exactly what the recomputed placement put on it: the failed one
    // nothing, the others the controller's (balanced) share.
    let measured: BTreeMap<String, Vec<(String, u64)>> =
        after.uplinks.iter().map(|u| (u.rtsw.clone(), u.tx_bytes.clone())).collect();
    let placed = placed_uplink_bytes(&state, &placement);
    assert_eq!(placed["z0r0"].iter().find(|(p, _)| *p == ifname).map(|p| p.1), Some(0), "{placed:?}");
    assert_eq!(measured, placed, "uplink bytes measured (left) vs the recomputed placement (right)");
}

/// A degraded uplink: `fabric link degrade --rate` itself recomputes the placement at the new
/// rates, which moves flows off the slow link both ways (up from its rack, and down into it from
/// its spine), and the job still delivers every byte; restoring the rate places the flows as on
/// the healthy fabric again.
#[test]
fn a_degraded_uplink_is_spared_by_the_placement_both_ways() {
    let (_guard, state) = common::up(None, &common::unique_prefix('j', 1));
    let prefix = state.plan.topology.prefix.clone();
    let te = go(&state, &ring(Some(HashMode::Te)));
    assert_eq!(te.bytes_delivered, te.bytes_needed);
    let flows = job_flows(&state, &ring(Some(HashMode::Te)));
    let healthy = te::assign(&state.plan, &state.down_links, &flows).unwrap();
    assert_installed(&state, &healthy);

    let rtsw = state.plan.node_by_name("z0r0").unwrap();
    let ifname = state.plan.nodes[rtsw].ports[state.plan.uplinks(rtsw)[0]].ifname.clone();
    let link = format!("z0r0:{ifname}");
    let l = state.plan.find_link(&link).unwrap();
    let quarter = state.plan.links[l].rate_gbps / 4.0;
    testbed::fault::degrade(&prefix, &link, Some(quarter), None, None).unwrap_or_else(|e| panic!("{e:#}"));
    let state = State::load(&prefix).unwrap();
    let slowed = te::assign(&state.plan_at_degraded_rates(), &state.down_links, &flows).unwrap();
    assert_installed(&state, &slowed);
    // Each way of the slow link (directed links 2l and 2l + 1) carries less than it did.
    let way = |p: &TePlacement, d: usize| p.link_bytes.get(&((2 * l + d) as u32)).copied().unwrap_or(0);
    for d in 0..2 {
        assert!(way(&slowed, d) < way(&healthy, d), "way {d}: {} bytes, {} healthy", way(&slowed, d), way(&healthy, d));
    }
    let run = go(&state, &ring(None));
    assert_eq!(run.bytes_delivered, run.bytes_needed, "the job still delivers every byte");

    testbed::fault::restore(&prefix, &link).unwrap_or_else(|e| panic!("{e:#}"));
    let state = State::load(&prefix).unwrap();
    assert_installed(&state, &healthy);
}
