//! Times and depths the twin must reproduce from first principles.
mod common;

use common::{DELAY, RATE, endpoints, plain_qos, qp, star};
use fabric_twin::{Twin, workload::CcChoice};

/// Wire bytes of a WRITE packet carrying `payload` bytes: Ethernet 14, IPv4 20, UDP 8, BTH 12,
/// ICRC 4, the RETH (16) on a message's first packet, and preamble 8, FCS 4, IFG 12.
fn data_wire(payload: u64, first: bool) -> u64 {
    14 + 20 + 8 + 12 + 4 + if first { 16 } else { 0 } + payload + 8 + 4 + 12
}

/// An ACK: the same headers with an AETH (4) and no payload.
const ACK_WIRE: u64 = 14 + 20 + 8 + 12 + 4 + 4 + 8 + 4 + 12;

#[test]
fn one_flow_through_one_switch_finishes_at_the_store_and_forward_time() {
    let net = star(2, plain_qos());
    let mut twin = Twin::new(&net, endpoints(CcChoice::None), 1);
    // 24 full packets of 4096 bytes and one of 1696.
    let bytes = 24 * 4096 + 1696;
    let r = twin.run_step(&[qp(0, 1, bytes, 0)], u64::MAX).unwrap();
    assert!(r.finished);
    let wires: Vec<u64> = (0..25).map(|i| data_wire(if i < 24 { 4096 } else { 1696 }, i == 0)).collect();
    // At 8 Gbit/s a byte takes 1 ns. Two equal hops store and forward: the last bit leaves the
    // switch after every packet's time plus the largest packet's once; then the ACK comes back
    // over both hops.
    let data: u64 = wires.iter().sum::<u64>() + wires.iter().max().unwrap() + 2 * DELAY;
    let expected = data + 2 * (ACK_WIRE + DELAY);
    assert_eq!(r.qps[0].completed_ns, Some(expected));
    assert_eq!(r.qps[0].packets_sent, 25);
    assert_eq!(r.qps[0].retransmitted, 0);
    // 25 data frames through the switch, and ACKs every 4th packet and at the end.
    assert_eq!(r.ports[2 + 1].packets, 25, "switch port to host 1");
    assert_eq!(r.ports[2].packets, 7, "switch port to host 0: ACKs");
}

#[test]
fn two_flows_into_one_port_share_it_and_queue_half_of_what_they_send() {
    let net = star(3, plain_qos());
    let mut twin = Twin::new(&net, endpoints(CcChoice::None), 1);
    let packets = 200;
    let bytes = packets * 4096;
    let r = twin.run_step(&[qp(0, 2, bytes, 0), qp(1, 2, bytes, 1)], u64::MAX).unwrap();
    assert!(r.finished);
    let per_flow: u64 = data_wire(4096, true) + (packets - 1) * data_wire(4096, false);
    // Both senders send at line rate until done (at per_flow ns); the port to host 2 sends at
    // line rate too, so by then it has sent half of what came in: the other half is queued.
    let max_depth = r.ports[3 + 2].max_depth_bytes;
    let frame = data_wire(4096, false);
    assert!(
        max_depth.abs_diff(per_flow) <= 2 * frame,
        "deepest queue {max_depth} B, expected {per_flow} B within two frames"
    );
    // The port carries 2 x per_flow back to back: the last ACK comes after that, the last
    // packet's second hop and the ACK's trip.
    let last = r.qps.iter().map(|q| q.completed_ns.unwrap()).max().unwrap();
    let floor = 2 * per_flow + 2 * DELAY + 2 * (ACK_WIRE + DELAY);
    assert!(last >= floor && last <= floor + 2 * frame, "{last} ns, expected {floor} ns within two frames");
    assert_eq!(r.tiers[0].drops, 0);
    assert_eq!(RATE, 8_000_000_000, "the arithmetic above assumes 1 ns per byte");
}

#[test]
fn a_workload_the_twin_cannot_run_names_the_qp_at_fault() {
    use fabric_twin::TwinError;
    let net = star(2, plain_qos());
    let mut twin = Twin::new(&net, endpoints(CcChoice::None), 1);
    let err = twin.run_step(&[qp(0, 1, 10, 0), qp(1, 1, 10, 1)], u64::MAX).unwrap_err();
    assert_eq!(err, TwinError::Loopback { index: 1, host: 1 });
    let err = twin.run_step(&[qp(0, 2, 10, 0)], u64::MAX).unwrap_err();
    assert_eq!(err, TwinError::NotAHost { index: 0, field: "dst", node: 2 });
    let twice = [qp(0, 1, 10, 0), qp(0, 1, 10, 0)];
    assert_eq!(
        twin.run_step(&twice, u64::MAX).unwrap_err(),
        TwinError::DuplicateQpn { index: 1, qpn: twice[1].resp_qpn, host: 1 }
    );
}
