//! The twin's hosts run either transport of fabric-roce: the reorder-tolerant one recovers the
//! same losses with fewer retransmissions, and the responders' reordering counters report what
//! arrived out of order.
mod common;

use common::{endpoints, leaf_spine, qp, shallow_qos};
use fabric_common::config::HashMode;
use fabric_roce::transport::Transport;
use fabric_twin::{
    Twin,
    report::StepReport,
    workload::{CcChoice, EndpointConfig, QpSpec},
};

/// Hosts 0, 1, 2 (leaf L0) and 5, 6, 7 (leaf L1) all write to host 4 (L1) through one spine;
/// without PFC the 100 KB port to host 4 overflows.
fn incast(transport: Transport, pfc: bool) -> StepReport {
    let net = leaf_spine(4, 1, HashMode::FiveTuple, shallow_qos(100_000, pfc, false));
    let qps: Vec<QpSpec> =
        [0, 1, 2, 5, 6, 7].iter().enumerate().map(|(k, &src)| qp(src, 4, 400_000, k as u32)).collect();
    let cfg = EndpointConfig { transport, ..endpoints(CcChoice::None) };
    Twin::new(&net, cfg, 7).run_step(&qps, 10_000_000_000).unwrap()
}

#[test]
fn selective_retransmission_recovers_the_incast_losses_with_fewer_packets() {
    let (gbn, ooo) = (incast(Transport::GoBackN, false), incast(Transport::ReorderTolerant, false));
    assert!(gbn.finished && ooo.finished, "both recover every loss");
    assert!(gbn.tiers[0].drops > 0 && ooo.tiers[0].drops > 0, "both lost packets");
    assert!(
        ooo.retransmitted() < gbn.retransmitted(),
        "ooo resent {} packets, go-back-N {}",
        ooo.retransmitted(),
        gbn.retransmitted()
    );
    // A resent packet arrives below the highest PSN seen: the receivers count it reordered.
    assert!(ooo.reordered() > 0 && gbn.reordered() > 0);
    // Go-back-N's receivers drop what follows a loss, so its resends bring PSNs seen before.
    assert!(gbn.qps.iter().map(|q| q.duplicate_psns).sum::<u64>() > 0);
}

#[test]
fn lossless_and_in_order_neither_transport_sees_reordering() {
    for transport in Transport::ALL {
        let r = incast(transport, true);
        assert!(r.finished, "{transport}");
        assert_eq!((r.retransmitted(), r.reordered(), r.reorder_depth_max()), (0, 0, 0), "{transport}");
        assert!(r.qps.iter().all(|q| q.duplicate_psns == 0), "{transport}");
    }
}
