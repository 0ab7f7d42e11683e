//! The simulator against the kernel: on the default testbed, collectives run with the real
//! endpoints through the XDP switches, and every ECMP group member's packet and byte counters
//! (MEMBER_COUNTERS) must move by exactly what `fabric sim` predicts from the same options —
//! WRITEs and ACKs, every hop, every hash mode. Needs root; fails (never skips) without it.
mod common;

use fabric_common::config::HashMode;
use fabric_user::{
    endpoint::{EndpointOptions, SportPolicy},
    forwarding::fabric::SimFabric,
    model::placement::Placement,
    model::workload::Collective,
    run::{RunOptions, run},
    sim::{SimOptions, predict_member_load},
};

#[test]
fn predicted_member_loads_equal_the_xdp_member_counters() {
    let (_guard, state) = common::up(None, &common::unique_prefix('s', 0));
    let fabric = SimFabric::from_controller(&state.plan, &state.down_links);
    let cases = [
        (Collective::Allreduce, 4, SportPolicy::PerQp, HashMode::FiveTuple, 3),
        (Collective::Allreduce, 4, SportPolicy::Fixed, HashMode::FiveTuple, 3),
        (Collective::Allreduce, 4, SportPolicy::Fixed, HashMode::Eecmp, 5),
        (Collective::Permutation, 8, SportPolicy::PerQp, HashMode::Pin, 7),
        (Collective::Alltoall, 2, SportPolicy::Fixed, HashMode::Eecmp, 9),
    ];
    let mut multi_member_groups_used = 0;
    for (collective, qps, sport, hash, seed) in cases {
        let label = format!("{} {} qps={qps} sport={}", collective.as_str(), hash.as_str(), sport.as_str());
        // ACK every packet: then the ACK count is the data packet count whatever the timing.
        let endpoint = EndpointOptions { qps, sport, ack_every: 1, ..Default::default() };
        let sim = SimOptions {
            collective,
            ranks: None,
            message_bytes: 96 << 10,
            placement: Placement::Contiguous,
            seed: 1,
            hash,
            hash_seed: Some(seed),
            endpoint: endpoint.clone(),
        };
        let predicted = predict_member_load(&fabric, &sim, 1).unwrap_or_else(|e| panic!("{e:#}"));
        let opts = RunOptions {
            collective,
            ranks: None,
            message_bytes: sim.message_bytes,
            iterations: 1,
            placement: Placement::Contiguous,
            hash: Some(hash),
            hash_seed: Some(seed),
            seed: 1,
            endpoint,
        };
        // A run that resent because a host fell behind is run again: its counters hold the
        // resent packets too.
        let (result, (before, after)) = common::until_no_host_drop_resends(&label, || {
            let before = common::read_members(&state, &fabric);
            let result = run(&state, &opts, true).unwrap_or_else(|e| panic!("{label}: {e:#}"));
            (result, (before, common::read_members(&state, &fabric)))
        });
        let retransmitted: u64 = result.flows.iter().map(|f| f.retransmitted).sum();
        assert_eq!(retransmitted, 0, "{label}: the run retransmitted, so no exact prediction is possible");
        assert_eq!(result.bytes_delivered, result.bytes_needed, "{label}");
        let mut mismatches = Vec::new();
        for sw in fabric.plan.switches() {
            for g in 0..fabric.group_count(sw) as u32 {
                let n = fabric.members(sw, g).len() as u32;
                for m in 0..n {
                    let s = fabric.slot(sw, g, m);
                    let got = (after.packets[s] - before.packets[s], after.bytes[s] - before.bytes[s]);
                    let want = (predicted.packets[s], predicted.bytes[s]);
                    if got != want {
                        let port = &fabric.plan.nodes[sw].ports[fabric.members(sw, g)[m as usize]].ifname;
                        mismatches.push(format!(
                            "{} group {g} member {m} ({port}): counters {got:?}, predicted {want:?}",
                            fabric.plan.nodes[sw].name
                        ));
                    }
                    if n > 1 && want.0 > 0 {
                        multi_member_groups_used += 1;
                    }
                }
            }
        }
        assert!(mismatches.is_empty(), "{label}: {} mismatches:\n{}", mismatches.len(), mismatches.join("\n"));
        let total: u64 = predicted.packets.iter().sum();
        assert!(total > 0, "{label}: nothing predicted");
        eprintln!(
            "{label}: {total} packet-hops on {} members, all equal to the XDP counters",
            predicted.packets.iter().filter(|&&p| p > 0).count()
        );
    }
    assert!(multi_member_groups_used > 0, "the cases must exercise ECMP choices");
}
