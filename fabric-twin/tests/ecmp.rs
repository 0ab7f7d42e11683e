//! The twin's switches pick the ECMP member the data path's own hash picks.
mod common;

use common::{endpoints, leaf_spine, plain_qos, qp};
use fabric_common::{
    config::{HashMode, SwitchConfig},
    hash::select_member,
    te::{TeEntry, te_key},
};
use fabric_twin::{Twin, workload::CcChoice, workload::QpSpec};

const PER_LEAF: usize = 4;
const SPINES: usize = 4;
/// Global index of leaf L0's first uplink: 8 host ports, then L0's 4 host ports.
const L0_UPLINK: usize = 2 * PER_LEAF + PER_LEAF;
/// ... and of L1's: after L0's uplinks and L1's 4 host ports.
const L1_UPLINK: usize = L0_UPLINK + SPINES + PER_LEAF;

/// Four QPs from each host of L0 to one host of L1.
fn cross_leaf_qps() -> Vec<QpSpec> {
    (0..PER_LEAF * 4).map(|k| qp(k % PER_LEAF, PER_LEAF + k / 4 % PER_LEAF, 50_000, k as u32)).collect()
}

#[test]
fn uplink_packets_follow_select_member_in_every_mode() {
    for mode in HashMode::ALL {
        let net = leaf_spine(PER_LEAF, SPINES, mode, plain_qos());
        let qps = cross_leaf_qps();
        let r = Twin::new(&net, endpoints(CcChoice::None), 1).run_step(&qps, u64::MAX).unwrap();
        assert!(r.finished);
        // Leaf seeds as the helper sets them: 10 for L0 (data), 11 for L1 (ACKs).
        let (l0, l1) = (SwitchConfig::testbed(mode, 10), SwitchConfig::testbed(mode, 11));
        let (mut data, mut acks) = ([0; SPINES], [0; SPINES]);
        for (q, o) in qps.iter().zip(&r.qps) {
            data[select_member(&l0, &q.data_packet, SPINES as u32) as usize] += o.packets_sent;
            acks[select_member(&l1, &q.ack_packet, SPINES as u32) as usize] += o.packets_sent.div_ceil(4);
        }
        let sent = |base: usize| -> Vec<u64> { (0..SPINES).map(|s| r.ports[base + s].packets).collect() };
        assert_eq!(sent(L0_UPLINK), data, "{mode:?}: data packets per L0 uplink");
        assert_eq!(sent(L1_UPLINK), acks, "{mode:?}: ACKs per L1 uplink");
    }
}

#[test]
fn te_entries_override_the_hash_and_stale_ones_do_not() {
    let mut net = leaf_spine(PER_LEAF, SPINES, HashMode::Te, plain_qos());
    let qps = cross_leaf_qps();
    let l0 = 2 * PER_LEAF;
    // Every data flow pinned to spine 2 at L0, except QP 0 whose entry names another group.
    let group = PER_LEAF as u32;
    net.routing.te[l0] = qps
        .iter()
        .enumerate()
        .map(|(k, q)| {
            let e = TeEntry { group: if k == 0 { group + 1 } else { group }, member_index: 2 };
            (te_key(&q.data_packet), e)
        })
        .collect();
    let r = Twin::new(&net, endpoints(CcChoice::None), 1).run_step(&qps, u64::MAX).unwrap();
    let hashed = select_member(&SwitchConfig::testbed(HashMode::Te, 10), &qps[0].data_packet, SPINES as u32);
    let mut expected = [0; SPINES];
    for (k, o) in r.qps.iter().enumerate() {
        expected[if k == 0 { hashed as usize } else { 2 }] += o.packets_sent;
    }
    let sent: Vec<u64> = (0..SPINES).map(|s| r.ports[L0_UPLINK + s].packets).collect();
    assert_eq!(sent, expected);
}
