//! Counter layouts and reason tables: the XDP program indexes `drops`/`passes` by
//! discriminant and userspace prints `as_str`, so the tables must agree with the enums.
use fabric_common::counters::{DropReason, MemberCounters, PassReason, PortCounters};
use std::collections::HashSet;

#[test]
fn drop_reasons_are_indexed_by_discriminant() {
    assert_eq!(DropReason::ALL.len(), DropReason::COUNT);
    for (i, r) in DropReason::ALL.iter().enumerate() {
        assert_eq!(*r as usize, i, "{r:?}");
    }
    let names: HashSet<_> = DropReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(names.len(), DropReason::COUNT, "drop reason names must be distinct");
    assert_eq!(DropReason::TruncatedBth.as_str(), "truncated_bth");
}

#[test]
fn pass_reasons_are_indexed_by_discriminant() {
    assert_eq!(PassReason::ALL.len(), PassReason::COUNT);
    for (i, r) in PassReason::ALL.iter().enumerate() {
        assert_eq!(*r as usize, i, "{r:?}");
    }
    let names: HashSet<_> = PassReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(names.len(), PassReason::COUNT);
    assert_eq!(PassReason::TtlExpired.as_str(), "ttl_expired");
}

#[test]
fn port_counters_accumulate_every_field() {
    // Per-CPU shares with every field distinct, so a field left out of `accumulate` (or added
    // to the wrong one) shows.
    let share = |k: u64| {
        let mut c = PortCounters {
            rx_packets: k,
            rx_bytes: 2 * k,
            tx_packets: 3 * k,
            tx_bytes: 4 * k,
            rx_roce_packets: 5 * k,
            tx_roce_packets: 6 * k,
            ..Default::default()
        };
        for (i, d) in c.drops.iter_mut().enumerate() {
            *d = k * (10 + i as u64);
        }
        for (i, p) in c.passes.iter_mut().enumerate() {
            *p = k * (100 + i as u64);
        }
        c
    };
    let mut total = PortCounters::default();
    for k in [1, 2, 3] {
        total.accumulate(&share(k));
    }
    // 1 + 2 + 3 = 6 times the unit share.
    assert_eq!(total, share(6));
    let drops: u64 = (0..DropReason::COUNT as u64).map(|i| 6 * (10 + i)).sum();
    let passes: u64 = (0..PassReason::COUNT as u64).map(|i| 6 * (100 + i)).sum();
    assert_eq!(total.total_drops(), drops);
    assert_eq!(total.total_passes(), passes);

    let mut m = MemberCounters { packets: 1, bytes: 100 };
    m.accumulate(&MemberCounters { packets: 2, bytes: 50 });
    assert_eq!(m, MemberCounters { packets: 3, bytes: 150 });
}
