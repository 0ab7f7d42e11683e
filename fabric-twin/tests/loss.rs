//! Injected link loss: a leaf uplink losing a share of its frames by the XDP switch's own seeded
//! draw. The lost count follows the binomial law, go-back-N recovers every byte, and the same seed
//! loses the same frames.
mod common;

use common::{endpoints, leaf_spine, plain_qos, qp};
use fabric_common::{
    config::HashMode,
    fault::{PortLoss, is_lost, threshold_of_ppm},
};
use fabric_twin::{
    Twin,
    net::{Network, TableRouting},
    report::StepReport,
    workload::{CcChoice, QpSpec},
};

/// Two hosts per leaf, one spine: leaf 0's port 2 is its only uplink.
const PER_LEAF: usize = 2;
const L0: usize = 2 * PER_LEAF;
const UPLINK: usize = PER_LEAF;

fn fabric() -> Network<TableRouting> {
    leaf_spine(PER_LEAF, 1, HashMode::FiveTuple, plain_qos())
}

/// Four QPs of 1 MB from leaf 0's hosts to leaf 1's: every data packet crosses the uplink.
fn qps() -> Vec<QpSpec> {
    (0..4).map(|k| qp(k as usize % PER_LEAF, PER_LEAF + k as usize % PER_LEAF, 1_000_000, k)).collect()
}

fn run(net: &Network<TableRouting>, loss: Option<PortLoss>) -> StepReport {
    let mut twin = Twin::new(net, endpoints(CcChoice::None), 1);
    if let Some(l) = loss {
        twin.set_loss(L0, UPLINK, l);
    }
    twin.run_step(&qps(), 60_000_000_000).unwrap()
}

#[test]
fn a_lossy_uplink_loses_its_share_and_go_back_n_recovers_every_byte() {
    let net = fabric();
    let healthy = run(&net, None);
    assert!(healthy.finished && healthy.lost_to_loss == 0 && healthy.retransmitted() == 0);
    let ppm = 10_000; // 1%
    let lossy = run(&net, Some(PortLoss::new(ppm, 7)));
    assert!(lossy.finished && lossy.qps.iter().all(|q| q.completed_ns.is_some()), "every QP completes");
    let port = &lossy.ports[net.port_index(L0, UPLINK) as usize];
    assert_eq!(port.link_loss, lossy.lost_to_loss, "the port counts what the step lost");
    // The draws are the XDP switch's: the n-th frame the port sends is lost iff is_lost says so.
    let expected = (0..port.packets).filter(|&n| is_lost(7, n, threshold_of_ppm(ppm))).count() as u64;
    assert_eq!(port.link_loss, expected);
    // Binomial: within 5 standard deviations of 1% of what the port sent.
    let (n, p) = (port.packets as f64, ppm as f64 / 1e6);
    let sd = (n * p * (1.0 - p)).sqrt();
    assert!((port.link_loss as f64 - n * p).abs() < 5.0 * sd, "{} lost of {n}", port.link_loss);
    assert!(lossy.retransmitted() >= lossy.lost_to_loss, "every lost frame is sent again at least once");
    assert!(lossy.completion_ns > healthy.completion_ns);
    // The same seed loses the same frames; another seed others.
    assert_eq!(run(&net, Some(PortLoss::new(ppm, 7))).lost_to_loss, lossy.lost_to_loss);
    assert_eq!(run(&net, Some(PortLoss::new(0, 7))).lost_to_loss, 0, "0 ppm loses nothing");
}
