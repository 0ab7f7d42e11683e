//! The routing modes that read switch state (`balance`): each rule checked through the one
//! entry point, `forward::choose_member`, against an independent statement of the rule.
mod common;

use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
};

use common::*;
use fabric_common::balance::{
    BalanceEvent, FlowletSlot, MemberState, PAUSED, WcmpError, WcmpWeights, candidates, flow_hash, flowlet_hash,
};
use fabric_common::config::{HashMode, SwitchConfig};
use fabric_common::forward::choose_member;
use fabric_common::hash::{scale_to_members, select_member};
use fabric_common::parse::ParsedPacket;

const SEED: u32 = 0xC0FF_EE00;
const GROUP: u32 = 3;
const GAP_NS: u32 = 50_000;

fn cfg(mode: HashMode) -> SwitchConfig {
    SwitchConfig::new(mode, SEED, 0).with_flowlet_gap(GAP_NS)
}

fn flows(seed: u64, count: usize) -> Vec<ParsedPacket> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            roce_pkt(
                0x0A00_0000 | rng.next_u32() & 0xFFFF,
                0x0A01_0000 | rng.next_u32() & 0xFFFF,
                0xC000 | rng.next_u16(),
                rng.next_u32() & 0xFF_FFFF,
            )
        })
        .collect()
}

/// A switch's state as plain data: per-member loads, a clock, a random stream, WCMP weights
/// and a flowlet table.
#[derive(Default)]
struct State {
    loads: Vec<u64>,
    now: Cell<u64>,
    rng: RefCell<Option<Rng>>,
    weights: Option<WcmpWeights>,
    flowlets: RefCell<HashMap<u32, FlowletSlot>>,
    notes: RefCell<Vec<BalanceEvent>>,
}

impl MemberState for State {
    fn now_ns(&self) -> u64 {
        self.now.get()
    }
    fn random(&self) -> u32 {
        self.rng.borrow_mut().as_mut().expect("a random stream").next_u32()
    }
    fn member_load(&self, group: u32, member: u32, _class: usize) -> u64 {
        assert_eq!(group, GROUP);
        self.loads.get(member as usize).copied().unwrap_or(0)
    }
    fn wcmp_pick(&self, group: u32, h: u32, n: u32) -> Option<u32> {
        assert_eq!(group, GROUP);
        self.weights?.pick(h, n)
    }
    fn flowlet(&self, flow: u32) -> Option<FlowletSlot> {
        self.flowlets.borrow().get(&flow).copied()
    }
    fn store_flowlet(&self, flow: u32, slot: FlowletSlot) {
        self.flowlets.borrow_mut().insert(flow, slot);
    }
    fn note(&self, event: BalanceEvent) {
        self.notes.borrow_mut().push(event);
    }
}

fn choose(mode: HashMode, p: &ParsedPacket, n: u32, s: &State) -> u32 {
    choose_member(&cfg(mode), p, GROUP, n, s)
}

#[test]
fn every_mode_has_a_name_and_a_map_value() {
    for m in HashMode::ROUTING {
        assert_eq!(HashMode::parse(m.as_str()), Some(m));
        assert_eq!(HashMode::from_u32(m as u32), m);
    }
    for (name, m) in [("flowlet", 4), ("adaptive", 5), ("spray", 6), ("wcmp", 7)] {
        assert_eq!(HashMode::parse(name).map(|m| m as u32), Some(m));
    }
    assert_eq!(HashMode::parse("reps"), None);
}

#[test]
fn candidates_are_distinct_in_range_and_the_first_is_the_eecmp_member() {
    for p in flows(1, 500) {
        for n in 1..=64 {
            let h = flow_hash(&cfg(HashMode::Adaptive), &p);
            let (a, b) = candidates(h, n);
            assert!(a < n && b < n);
            assert_eq!(a == b, n == 1, "n {n}");
            assert_eq!(a, select_member(&cfg(HashMode::Eecmp), &p, n));
        }
    }
}

#[test]
fn adaptive_takes_the_less_loaded_candidate_and_counts_a_paused_queue_as_full() {
    let n = 8;
    for p in flows(2, 300) {
        let (a, b) = candidates(flow_hash(&cfg(HashMode::Adaptive), &p), n);
        // Idle queues (and equal ones): the first candidate, which is E-ECMP's member.
        assert_eq!(choose(HashMode::Adaptive, &p, n, &State { loads: vec![0; 8], ..Default::default() }), a);
        assert_eq!(choose(HashMode::Adaptive, &p, n, &State { loads: vec![500; 8], ..Default::default() }), a);
        // The first candidate deeper: the second.
        let mut loads = vec![0; 8];
        loads[a as usize] = 10_000;
        assert_eq!(choose(HashMode::Adaptive, &p, n, &State { loads: loads.clone(), ..Default::default() }), b);
        // Both loaded, the second less: the second; a paused first: the second even if deep.
        loads[b as usize] = 9_999;
        assert_eq!(choose(HashMode::Adaptive, &p, n, &State { loads: loads.clone(), ..Default::default() }), b);
        loads[a as usize] = PAUSED;
        loads[b as usize] = 1 << 40;
        assert_eq!(choose(HashMode::Adaptive, &p, n, &State { loads: loads.clone(), ..Default::default() }), b);
        // Only the two candidates count, however idle the others: both paused is a tie, and a
        // tie goes to the first.
        loads[b as usize] = PAUSED;
        assert_eq!(choose(HashMode::Adaptive, &p, n, &State { loads, ..Default::default() }), a);
    }
}

#[test]
fn a_flowlet_keeps_its_member_within_the_gap_and_is_re_chosen_after_it() {
    let n = 4;
    for p in flows(3, 100) {
        let s = State { loads: vec![0; 4], ..Default::default() };
        let flow = flow_hash(&cfg(HashMode::Flowlet), &p);
        let (first, _) = candidates(flow, n);
        s.now.set(1_000);
        assert_eq!(choose(HashMode::Flowlet, &p, n, &s), first, "a new flow starts at its E-ECMP member");
        assert_eq!(
            s.flowlet(flow),
            Some(FlowletSlot { last_ns: 1_000, flow, group: GROUP as u16, member: first as u8, generation: 0 })
        );
        // Within the gap the member holds, however the queues change.
        let mut s = s;
        s.loads[first as usize] = PAUSED;
        for t in [1_000 + GAP_NS as u64, 1_000 + 2 * GAP_NS as u64] {
            s.now.set(t);
            assert_eq!(choose(HashMode::Flowlet, &p, n, &s), first, "t {t}: the gap counts from the last packet");
        }
        // Idle longer than the gap: a new flowlet, the best of two drawn from generation 1.
        s.now.set(1_000 + 3 * GAP_NS as u64 + 1);
        let (c1, c2) = candidates(flowlet_hash(flow, 1), n);
        let expect = if c1 != c2 && s.loads[c2 as usize] < s.loads[c1 as usize] { c2 } else { c1 };
        assert_eq!(choose(HashMode::Flowlet, &p, n, &s), expect);
        let slot = s.flowlet(flow).expect("slot");
        assert_eq!((slot.generation, slot.member as u32, slot.last_ns), (1, expect, s.now.get()));
    }
}

#[test]
fn a_new_flowlet_avoids_a_paused_member_and_a_stale_slot_is_not_trusted() {
    let n = 4;
    for p in flows(4, 200) {
        let flow = flow_hash(&cfg(HashMode::Flowlet), &p);
        let (c1, c2) = candidates(flowlet_hash(flow, 8), n);
        let mut loads = vec![0; 4];
        loads[c1 as usize] = PAUSED;
        let s = State { loads, ..Default::default() };
        // A slot of generation 7 for another group: stale whatever its age.
        s.store_flowlet(
            flow,
            FlowletSlot { last_ns: 0, flow, group: GROUP as u16 + 1, member: c1 as u8, generation: 7 },
        );
        assert_eq!(choose(HashMode::Flowlet, &p, n, &s), c2);
        // A slot naming a member beyond the group (it shrank): a new flowlet too.
        s.store_flowlet(flow, FlowletSlot { last_ns: 0, flow, group: GROUP as u16, member: 9, generation: 7 });
        assert_eq!(choose(HashMode::Flowlet, &p, n, &s), c2);
        assert_eq!(s.flowlet(flow).unwrap().generation, 8);
    }
}

#[test]
fn flowlets_of_many_flows_spread_like_eecmp_at_idle_queues() {
    let n = 8;
    let s = State { loads: vec![0; 8], ..Default::default() };
    let pkts = flows(5, 4000);
    for p in &pkts {
        assert_eq!(choose(HashMode::Flowlet, p, n, &s), select_member(&cfg(HashMode::Eecmp), p, n));
    }
}

#[test]
fn spray_draws_a_member_per_packet_uniformly() {
    let n = 4;
    let s = State { rng: RefCell::new(Some(Rng::new(6))), ..Default::default() };
    let p = roce_pkt(0x0A00_0001, 0x0A01_0001, 0xC000, 0x11);
    let mut counts = [0u32; 4];
    let picks: Vec<u32> = (0..8000).map(|_| choose(HashMode::Spray, &p, n, &s)).collect();
    for &m in &picks {
        counts[m as usize] += 1;
    }
    // One flow, every member: 2000 each expected, sd ~39; 6 sd either side.
    assert!(counts.iter().all(|&c| (1760..=2240).contains(&c)), "{counts:?}");
    // Per packet, as the random stream says.
    let mut replay = Rng::new(6);
    assert!(picks.iter().all(|&m| m == scale_to_members(replay.next_u32(), n)));
}

#[test]
fn wcmp_weights_scale_together_keep_small_members_and_refuse_nonsense() {
    let w = WcmpWeights::from_weights(&[100, 100, 50]).unwrap();
    assert_eq!((w.len, w.total(), &w.cumulative[..3]), (3, 250, &[100, 200, 250][..]));
    // 400 Gbit/s scaled: the sum fits 31 bits, proportions kept, a tiny member keeps 1.
    let big = WcmpWeights::from_weights(&[400_000_000_000, 100_000_000_000, 1]).unwrap();
    let c = big.cumulative;
    assert!(big.total() < 1 << 31);
    let ratio = c[0] as f64 / (c[1] - c[0]) as f64;
    assert!((ratio - 4.0).abs() < 1e-6, "{ratio}");
    assert_eq!(c[2] - c[1], 1);
    assert_eq!(WcmpWeights::from_weights(&[]), Err(WcmpError::MemberCount(0)));
    assert_eq!(WcmpWeights::from_weights(&[1; 65]), Err(WcmpError::MemberCount(65)));
    assert_eq!(WcmpWeights::from_weights(&[0, 0]), Err(WcmpError::AllZero));
    assert!(WcmpError::AllZero.to_string().contains("zero"));
}

#[test]
fn wcmp_shares_follow_the_weights_and_a_zero_weight_member_gets_nothing() {
    let pkts = flows(7, 20_000);
    for rates in [vec![100u64, 100, 100, 25], vec![400, 0, 200, 200], vec![1, 1, 1, 1, 1, 1, 1, 1]] {
        let n = rates.len() as u32;
        let s = State { weights: Some(WcmpWeights::from_weights(&rates).unwrap()), ..Default::default() };
        let mut counts = vec![0f64; rates.len()];
        for p in &pkts {
            counts[choose(HashMode::Wcmp, p, n, &s) as usize] += 1.0;
        }
        let total: u64 = rates.iter().sum();
        for (i, &r) in rates.iter().enumerate() {
            let expect = pkts.len() as f64 * r as f64 / total as f64;
            if r == 0 {
                assert_eq!(counts[i], 0.0, "{rates:?}");
            } else {
                // Binomial sd is at most 71 here: 5 sd.
                assert!((counts[i] - expect).abs() < 360.0, "{rates:?}: member {i} {} vs {expect}", counts[i]);
            }
        }
    }
}

#[test]
fn wcmp_without_matching_weights_hashes_as_eecmp() {
    let n = 4;
    // Weights for 3 members on a 4-member group, and none at all.
    for weights in [Some(WcmpWeights::from_weights(&[1, 1, 1]).unwrap()), None] {
        let s = State { weights, ..Default::default() };
        for p in flows(8, 300) {
            assert_eq!(choose(HashMode::Wcmp, &p, n, &s), select_member(&cfg(HashMode::Eecmp), &p, n));
        }
    }
    let w = WcmpWeights::from_weights(&[1, 1, 1]).unwrap();
    assert_eq!(w.pick(0, 4), None);
    assert_eq!(w.pick(0, 0), None);
    assert_eq!(w.pick(u32::MAX, 3), Some(2));
    assert_eq!(w.pick(0, 3), Some(0));
}

#[test]
fn the_hash_modes_ignore_the_state() {
    // Loads, flowlets and weights change nothing for five-tuple, eecmp and pin.
    let mut loads = vec![PAUSED; 4];
    loads[1] = 0;
    let s = State { loads, weights: Some(WcmpWeights::from_weights(&[1, 0, 0, 0]).unwrap()), ..Default::default() };
    for p in flows(9, 200) {
        for m in HashMode::ALL {
            assert_eq!(choose(m, &p, 4, &s), select_member(&cfg(m), &p, 4));
        }
    }
    assert!(s.flowlets.borrow().is_empty());
}

/// The moves the modes report: adaptive's second candidate exactly when it wins; flowlet's move
/// exactly when a flow's new flowlet is on another member than its last one.
#[test]
fn the_modes_note_their_moves_and_nothing_else() {
    let n = 8;
    for p in flows(7, 200) {
        let (a, b) = candidates(flow_hash(&cfg(HashMode::Adaptive), &p), n);
        let mut loads = vec![0; 8];
        let idle = State { loads: loads.clone(), ..Default::default() };
        assert_eq!(choose(HashMode::Adaptive, &p, n, &idle), a);
        assert!(idle.notes.borrow().is_empty());
        loads[a as usize] = 10;
        let busy = State { loads, ..Default::default() };
        assert_eq!(choose(HashMode::Adaptive, &p, n, &busy), b);
        assert_eq!(*busy.notes.borrow(), [BalanceEvent::AdaptiveSecond]);

        let s = State { loads: vec![0; 8], ..Default::default() };
        let first = choose(HashMode::Flowlet, &p, n, &s);
        s.now.set(u64::from(GAP_NS));
        choose(HashMode::Flowlet, &p, n, &s);
        assert!(s.notes.borrow().is_empty(), "a new flow and a packet within the gap are no move");
        // After the gap, generation 1's candidates: a move exactly if the member changes.
        s.now.set(10 * u64::from(GAP_NS) + 1);
        let next = choose(HashMode::Flowlet, &p, n, &s);
        let moved = usize::from(next != first);
        assert_eq!(s.notes.borrow().len(), moved);
        assert!(s.notes.borrow().iter().all(|e| *e == BalanceEvent::FlowletMove));
    }
}
