//! The reorder-tolerant transport end to end through a reordering, lossy, duplicating channel
//! ([`fabric_roce::channel`]): every pattern ends with the exact messages in memory, one
//! completion per message on each side, and retransmissions of exactly what was lost; and
//! go-back-N, through the same channel, pays for reordering with retransmissions.
use std::collections::BTreeSet;

use fabric_roce::{
    channel::{ChannelConfig, SplitMix, TransferReport, transfer},
    transport::Transport,
};

fn assert_exact(report: &TransferReport, sizes: &[u32], what: &str) {
    let ids: Vec<u64> = report.completions.iter().map(|c| c.msg_id).collect();
    assert_eq!(ids, (0..sizes.len() as u64).collect::<Vec<_>>(), "{what}: one completion per message, in order");
    let lens: Vec<u64> = report.received.iter().map(|w| w.len).collect();
    assert_eq!(lens, sizes.iter().map(|&s| u64::from(s)).collect::<Vec<_>>(), "{what}: the responder's");
    assert!(report.memory == report.expected_memory, "{what}: every byte where it belongs");
    let r = &report.responder;
    assert_eq!(r.bytes_received, report.bytes, "{what}: no byte taken twice");
    assert_eq!((r.length_mismatches, r.invalid_requests), (0, 0), "{what}");
}

/// A few random PSNs of the first `packets` to lose on their first try.
fn some_losses(rng: &mut SplitMix, packets: u32, n: usize) -> BTreeSet<u32> {
    (0..n).map(|_| rng.below(packets as usize) as u32).collect()
}

#[test]
fn every_reorder_duplicate_and_loss_pattern_ends_with_the_exact_messages() {
    let sizes = [3000u32, 1, 0, 20_000, 1024, 4097, 9000];
    let packets = 3 + 1 + 1 + 20 + 1 + 5 + 9;
    let mut rng = SplitMix::new(2026);
    for seed in 0..300 {
        let mut cfg = ChannelConfig::new(Transport::ReorderTolerant);
        cfg.seed = seed;
        cfg.reorder_window = [0, 2, 4, 8, 16][seed as usize % 5];
        cfg.window_packets = [8, 32, 128][seed as usize % 3];
        cfg.lose_first_try = some_losses(&mut rng, packets, seed as usize % 4);
        cfg.duplicate = (0..seed as usize % 5).map(|_| rng.below(packets as usize)).collect();
        let report = transfer(&sizes, &cfg);
        let what = format!("seed {seed}, k {}, lost {:?}", cfg.reorder_window, cfg.lose_first_try);
        assert_exact(&report, &sizes, &what);
        let mut gbn = cfg.clone();
        gbn.transport = Transport::GoBackN;
        assert_exact(&transfer(&sizes, &gbn), &sizes, &format!("go-back-N, {what}"));
        let resent: BTreeSet<u32> = report.retransmitted_psns.iter().copied().collect();
        assert!(cfg.lose_first_try.is_subset(&resent), "{what}: every loss resent, {resent:?}");
        if cfg.reorder_window <= 8 && report.requester.timeouts == 0 {
            // Reordering shallower than the loss threshold: nothing resent but the losses, once.
            assert_eq!(report.retransmitted_psns.len(), cfg.lose_first_try.len(), "{what}: {resent:?}");
            assert_eq!(resent, cfg.lose_first_try, "{what}");
        }
    }
}

#[test]
fn tail_losses_are_recovered_by_the_timer_resending_only_the_holes() {
    let sizes = [8 * 1024u32];
    let mut cfg = ChannelConfig::new(Transport::ReorderTolerant);
    cfg.lose_first_try = [2, 7].into();
    let report = transfer(&sizes, &cfg);
    assert_exact(&report, &sizes, "tail loss");
    assert_eq!(report.requester.timeouts, 1, "too few packets after the holes for the SACK threshold");
    assert_eq!(report.retransmitted_psns, [2, 7], "the holes, not the window");
    assert!(report.responder.sacks_sent > 0);
}

#[test]
fn a_hole_behind_the_acknowledged_last_packet_goes_early_not_at_the_timeout() {
    let sizes = [8 * 1024u32];
    let mut cfg = ChannelConfig::new(Transport::ReorderTolerant);
    cfg.reorder_window = 2;
    cfg.lose_first_try = [5].into();
    let report = transfer(&sizes, &cfg);
    assert_exact(&report, &sizes, "tail hole");
    assert_eq!((report.requester.timeouts, &report.retransmitted_psns[..]), (0, &[5][..]));
    // The requester's timeout is 1 ms: the hole went after an eighth of it, plus a round trip.
    assert!(report.finished_ns > 125_000 && report.finished_ns < 200_000, "{} ns", report.finished_ns);
}

#[test]
fn a_lost_resend_is_found_by_the_packets_sent_after_it_not_the_timer() {
    let sizes = [256 * 1024u32];
    let mut cfg = ChannelConfig::new(Transport::ReorderTolerant);
    cfg.reorder_window = 4;
    cfg.lose_first_try = [10, 11, 100].into();
    cfg.lose_first_resend = [11].into();
    let report = transfer(&sizes, &cfg);
    assert_exact(&report, &sizes, "lost resend");
    assert_eq!(report.requester.timeouts, 0, "SACKs of later packets found both losses of 11");
    let mut resent = report.retransmitted_psns.clone();
    resent.sort();
    assert_eq!(resent, [10, 11, 11, 100], "each loss resent once, 11 twice");
}

#[test]
fn permutations_without_loss_cost_ooo_nothing_and_gbn_retransmissions() {
    let sizes = [1 << 20];
    for k in [2, 8] {
        let mut ooo = ChannelConfig::new(Transport::ReorderTolerant);
        ooo.reorder_window = k;
        let ooo = transfer(&sizes, &ooo);
        assert_exact(&ooo, &sizes, "ooo");
        assert_eq!(ooo.requester.packets_retransmitted, 0, "k = {k}");
        assert!(ooo.responder.reordered_packets > 0 && ooo.responder.reorder_depth_max < u64::from(k));
        let mut gbn = ChannelConfig::new(Transport::GoBackN);
        gbn.reorder_window = k;
        let gbn = transfer(&sizes, &gbn);
        assert_exact(&gbn, &sizes, "gbn");
        assert!(gbn.requester.packets_retransmitted > 0, "k = {k}: go-back-N resends what was only late");
        assert!(gbn.responder.duplicate_psns > 0, "the early packets it dropped came back");
        assert!(gbn.finished_ns > ooo.finished_ns, "k = {k}");
    }
    // In order, both transports send each packet once; the RETH on every packet costs ooo
    // 16 bytes in each ~1.1 kB on the wire.
    let (a, b) = (
        transfer(&sizes, &ChannelConfig::new(Transport::GoBackN)),
        transfer(&sizes, &ChannelConfig::new(Transport::ReorderTolerant)),
    );
    assert_eq!((a.requester.packets_retransmitted, b.requester.packets_retransmitted), (0, 0));
    let slower = b.finished_ns as f64 / a.finished_ns as f64;
    assert!(slower > 1.005 && slower < 1.02, "ooo takes {slower} times as long in order");
    assert_eq!((a.responder.reordered_packets, b.responder.reordered_packets), (0, 0));
}
