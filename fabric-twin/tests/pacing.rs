//! A sender's pace against the link it is paced for: the pacer must charge each packet what the
//! link charges it, framing included, or a rate that matches the link overruns it.
mod common;

use common::{RATE, qp, shallow_qos, star};
use fabric_roce::segment::PathMtu;
use fabric_twin::{
    Twin,
    workload::{CcChoice, EndpointConfig},
};

/// Wire bytes of a full WRITE MIDDLE at MTU 1024: Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4,
/// payload, and preamble 8, FCS 4, IFG 12.
const FRAME_WIRE: u64 = 14 + 20 + 8 + 12 + 4 + 1024 + 8 + 4 + 12;

#[test]
fn a_flow_paced_at_its_links_rate_leaves_no_standing_queue() {
    // Host 0's own port runs 4 times faster than the switch's port to host 1, as the testbed's
    // veth outruns the modelled link: only the pacer holds the flow to the rate of that port.
    let mut net = star(2, shallow_qos(64 << 20, false, true));
    net.nodes[0].ports[0].rate_bps = 4 * RATE;
    net.nodes[2].ports[0].rate_bps = 4 * RATE;
    let cfg = EndpointConfig {
        qp_rate_bps: RATE,
        window_packets: 4096,
        ..EndpointConfig::new(PathMtu::Mtu1024, CcChoice::None)
    };
    // 4 MB: paced without the 24 bytes of framing, the flow comes in 2.2% faster than the port
    // drains, and some 90 frames (100 KB, well over RED's 20 KB) would pile up by its end.
    let r = Twin::new(&net, cfg, 1).run_step(&[qp(0, 1, 4_000_000, 0)], u64::MAX).unwrap();
    assert!(r.finished);
    let sw = &r.tiers[0];
    // The pacer's burst (two frames) arrives at once behind the frame on the wire; nothing
    // more may queue.
    assert!(sw.max_depth_bytes <= 3 * FRAME_WIRE, "the port to host 1 queued {} B", sw.max_depth_bytes);
    assert_eq!(sw.ecn_marked, 0, "no congestion, no marks");
    assert_eq!(r.ports[2 + 1].packets, 4_000_000_u64.div_ceil(1024), "every data packet through the port");
}
