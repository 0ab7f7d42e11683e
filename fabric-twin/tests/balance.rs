//! The routing modes that read switch state, in the twin: the same `choose_member` as the XDP
//! switch, over the twin's real queues, its own flowlet table and random stream, and WCMP
//! weights from its link rates.
mod common;

use common::{endpoints, leaf_spine, plain_qos, qp};
use fabric_common::{
    balance::{WcmpWeights, candidates, flow_hash},
    config::{HashMode, SwitchConfig},
    hash::select_member,
};
use fabric_twin::{
    Twin,
    net::{NodeKind, SwitchSpec},
    workload::{CcChoice, QpSpec},
};

const PER_LEAF: usize = 4;
const SPINES: usize = 4;
/// Global index of leaf L0's first uplink: 8 host ports, then L0's 4 host ports.
const L0_UPLINK: usize = 2 * PER_LEAF + PER_LEAF;
const L0: usize = 2 * PER_LEAF;

fn cross_leaf_qps(count: usize, bytes: u64) -> Vec<QpSpec> {
    (0..count).map(|k| qp(k % PER_LEAF, PER_LEAF + k / 4 % PER_LEAF, bytes, k as u32)).collect()
}

fn l0_uplink_packets(r: &fabric_twin::report::StepReport) -> Vec<u64> {
    (0..SPINES).map(|s| r.ports[L0_UPLINK + s].packets).collect()
}

#[test]
fn spray_sends_one_qps_packets_over_every_uplink_and_completes() {
    let net = leaf_spine(PER_LEAF, SPINES, HashMode::Spray, plain_qos());
    let qps = cross_leaf_qps(1, 4_000_000);
    let r = Twin::new(&net, endpoints(CcChoice::None), 1).run_step(&qps, u64::MAX).unwrap();
    assert!(r.finished && r.qps[0].completed_ns.is_some());
    let sent = l0_uplink_packets(&r);
    println!("spray, one QP: L0 uplink packets {sent:?}, {} retransmitted", r.qps[0].retransmitted);
    let total: u64 = sent.iter().sum();
    assert_eq!(total, r.qps[0].packets_sent);
    // A quarter each expected; binomial sd sqrt(total x 3/16): 6 sd either side.
    let sd = (total as f64 * 3.0 / 16.0).sqrt();
    assert!(total > 500 && sent.iter().all(|&n| (n.abs_diff(total / 4) as f64) < 6.0 * sd), "{sent:?}");
}

#[test]
fn adaptive_keeps_each_flow_on_its_two_candidates_and_wcmp_follows_the_link_rates() {
    let qps = cross_leaf_qps(16, 200_000);
    let net = leaf_spine(PER_LEAF, SPINES, HashMode::Adaptive, plain_qos());
    let r = Twin::new(&net, endpoints(CcChoice::None), 1).run_step(&qps, u64::MAX).unwrap();
    assert!(r.finished);
    // Per uplink, at most the packets of the flows it is a candidate for.
    let l0 = SwitchConfig::testbed(HashMode::Adaptive, 10);
    let mut bound = [0u64; SPINES];
    for (q, o) in qps.iter().zip(&r.qps) {
        let (a, b) = candidates(flow_hash(&l0, &q.data_packet), SPINES as u32);
        bound[a as usize] += o.packets_sent;
        if b != a {
            bound[b as usize] += o.packets_sent;
        }
    }
    let sent = l0_uplink_packets(&r);
    assert!(sent.iter().zip(&bound).all(|(s, b)| s <= b), "{sent:?} within {bound:?}");
    // And the queues decide: had every packet taken its flow's first candidate (as it would if
    // the switch saw no load, an idle class's queue, say), the uplinks would carry these; the
    // second choices must have moved packets, towards the less loaded uplinks.
    let mut first_only = [0u64; SPINES];
    for (q, o) in qps.iter().zip(&r.qps) {
        first_only[candidates(flow_hash(&l0, &q.data_packet), SPINES as u32).0 as usize] += o.packets_sent;
    }
    let (max_sent, max_first) = (sent.iter().max().unwrap(), first_only.iter().max().unwrap());
    println!("adaptive: L0 uplink packets {sent:?}; first candidates only {first_only:?}");
    assert!(max_sent < max_first, "adaptive {sent:?} must spread better than first candidates {first_only:?}");

    // WCMP: spine 0's link from L0 at a quarter of the others' rate.
    let mut net = leaf_spine(PER_LEAF, SPINES, HashMode::Wcmp, plain_qos());
    let uplink_port = PER_LEAF;
    let (peer, peer_port) = (net.nodes[L0].ports[uplink_port].peer_node, net.nodes[L0].ports[uplink_port].peer_port);
    net.nodes[L0].ports[uplink_port].rate_bps /= 4;
    net.nodes[peer].ports[peer_port].rate_bps /= 4;
    let net = fabric_twin::net::Network::new(net.nodes, net.tiers, net.routing).unwrap();
    let r = Twin::new(&net, endpoints(CcChoice::None), 1).run_step(&qps, u64::MAX).unwrap();
    assert!(r.finished);
    let rates: Vec<u64> = (0..SPINES).map(|s| net.nodes[L0].ports[PER_LEAF + s].rate_bps).collect();
    let weights = WcmpWeights::from_weights(&rates).unwrap();
    let l0 = SwitchConfig::testbed(HashMode::Wcmp, 10);
    let mut expected = [0u64; SPINES];
    for (q, o) in qps.iter().zip(&r.qps) {
        expected[weights.pick(flow_hash(&l0, &q.data_packet), SPINES as u32).unwrap() as usize] += o.packets_sent;
    }
    assert_eq!(l0_uplink_packets(&r), expected);
    let eecmp: Vec<u32> =
        qps.iter().map(|q| select_member(&SwitchConfig::testbed(HashMode::Eecmp, 10), &q.data_packet, 4)).collect();
    println!("wcmp with a slow spine-0 link: L0 uplink packets {expected:?} (eecmp members {eecmp:?})");
}

#[test]
fn a_flowlet_of_a_continuous_flow_stays_on_one_uplink() {
    let mut net = leaf_spine(PER_LEAF, SPINES, HashMode::Flowlet, plain_qos());
    // A 50 us gap (modelled): a QP sending back to back never idles that long.
    for node in &mut net.nodes {
        if let NodeKind::Switch(SwitchSpec { config, .. }) = &mut node.kind {
            *config = config.with_flowlet_gap(50_000);
        }
    }
    let qps = cross_leaf_qps(1, 400_000);
    let r = Twin::new(&net, endpoints(CcChoice::None), 1).run_step(&qps, u64::MAX).unwrap();
    assert!(r.finished);
    let sent = l0_uplink_packets(&r);
    let member = select_member(&SwitchConfig::testbed(HashMode::Eecmp, 10), &qps[0].data_packet, SPINES as u32);
    let mut expected = [0u64; SPINES];
    expected[member as usize] = r.qps[0].packets_sent;
    assert_eq!(sent, expected, "one flowlet, on the flow's E-ECMP member");
}
