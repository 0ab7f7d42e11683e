//! The switch hash (`hash`) and the per-mode member choice (`select_member`), plus `config`'s
//! hash-mode encoding.
mod common;

use common::*;
use fabric_common::config::{HashMode, SwitchConfig};
use fabric_common::hash::{FlowKey, crc32, crc32_update, hash_key, scale_to_members, select_member};
use fabric_common::parse::{IpHeader, ParsedPacket};

const SEED_A: u32 = 0x1234_5678;
const SEED_B: u32 = 0x9E37_79B9;

fn cfg(mode: HashMode, seed: u32) -> SwitchConfig {
    SwitchConfig::new(mode, seed, 0)
}

/// `count` RoCE-like flows: random 10/8 source and destination, random source port (as rxe
/// derives it from the QP), destination port 4791, random 24-bit QP. Deterministic.
fn random_flows(seed: u64, count: usize) -> Vec<ParsedPacket> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            let src = 0x0A00_0000 | (rng.next_u32() & 0x00FF_FFFF);
            let dst = 0x0A00_0000 | (rng.next_u32() & 0x00FF_FFFF);
            roce_pkt(src, dst, rng.next_u16() | 0xC000, rng.next_u32() & 0xFF_FFFF)
        })
        .collect()
}

fn counts(cfg: &SwitchConfig, pkts: &[ParsedPacket], n: u32) -> Vec<usize> {
    let mut c = vec![0usize; n as usize];
    for p in pkts {
        c[select_member(cfg, p, n) as usize] += 1;
    }
    c
}

/// A bitwise (table-free) reflected CRC-32 register update, as an independent reference.
fn crc32_bitwise(mut crc: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    crc
}

// ---------------------------------------------------------------------------------------------
// CRC and key layout
// ---------------------------------------------------------------------------------------------

#[test]
fn crc32_check_values() {
    // The catalogue check value of CRC-32/ISO-HDLC, and two more well-known vectors.
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
    assert_eq!(crc32(b"The quick brown fox jumps over the lazy dog"), 0x414F_A339);
}

#[test]
fn crc32_update_matches_bitwise_reference() {
    let mut rng = Rng::new(1);
    for len in 0..200 {
        let mut buf = vec![0u8; len];
        rng.fill(&mut buf);
        let seed = rng.next_u32();
        assert_eq!(crc32_update(seed, &buf), crc32_bitwise(seed, &buf), "len {len}");
    }
    // Incremental updates compose.
    let data = b"RoCEv2 invariant CRC";
    assert_eq!(crc32_update(crc32_update(!0, &data[..7]), &data[7..]), crc32_update(!0, data));
}

#[test]
fn flow_key_layout() {
    let key = FlowKey {
        src: 0x0102_0304,
        dst: 0x0506_0708,
        protocol: 0x09,
        src_port: 0x0A0B,
        dst_port: 0x0C0D,
        dest_qp: 0x0E_0F10,
    };
    // Big-endian fields, the QP as its low 3 bytes.
    let expected: [u8; 16] = core::array::from_fn(|i| i as u8 + 1);
    assert_eq!(key.to_bytes(), expected);
    assert_eq!(FlowKey::LEN, 16);
}

#[test]
fn flow_key_for_packet() {
    let roce = roce_pkt(0x0A00_0001, 0x0A00_0002, 0xC123, 0x00_4242);
    let five = FlowKey::for_packet(HashMode::FiveTuple, &roce);
    assert_eq!(
        five,
        FlowKey { src: 0x0A00_0001, dst: 0x0A00_0002, protocol: 17, src_port: 0xC123, dst_port: 4791, dest_qp: 0 }
    );
    assert_eq!(FlowKey::for_packet(HashMode::Eecmp, &roce), FlowKey { dest_qp: 0x4242, ..five });

    // No ports (e.g. ICMP): zeros.
    let mut icmp = pkt_v4([1, 2, 3, 4], [5, 6, 7, 8], None, None);
    icmp.protocol = 1;
    let k = FlowKey::for_packet(HashMode::Eecmp, &icmp);
    assert_eq!((k.src_port, k.dst_port, k.dest_qp, k.protocol), (0, 0, 0, 1));

    // IPv6 addresses fold to the XOR of their four words.
    let mut v6 = roce;
    let src: [u8; 16] = core::array::from_fn(|i| (i * 17) as u8);
    let dst: [u8; 16] = core::array::from_fn(|i| (255 - i * 3) as u8);
    v6.ip = IpHeader::V6 { src, dst, hop_limit: 64, traffic_class: 0 };
    let fold = |a: &[u8; 16]| a.chunks(4).map(|w| u32::from_be_bytes(w.try_into().unwrap())).fold(0, |x, y| x ^ y);
    let k = FlowKey::for_packet(HashMode::FiveTuple, &v6);
    assert_eq!((k.src, k.dst), (fold(&src), fold(&dst)));
}

#[test]
fn hash_key_is_fmix_of_seeded_crc() {
    // Reference: murmur3 fmix32 over the seeded (non-inverted) CRC register of the key bytes.
    fn fmix(mut h: u32) -> u32 {
        h ^= h >> 16;
        h = h.wrapping_mul(0x85EB_CA6B);
        h ^= h >> 13;
        h = h.wrapping_mul(0xC2B2_AE35);
        h ^ (h >> 16)
    }
    for p in random_flows(2, 200) {
        let key = FlowKey::for_packet(HashMode::Eecmp, &p);
        for seed in [0, 1, SEED_A, SEED_B, u32::MAX] {
            assert_eq!(hash_key(seed, &key), fmix(crc32_bitwise(seed, &key.to_bytes())));
        }
    }
}

#[test]
fn hash_mode_encoding() {
    for m in HashMode::ROUTING {
        assert_eq!(HashMode::from_u32(m as u32), m);
        assert_eq!(HashMode::parse(m.as_str()), Some(m));
    }
    assert_eq!(HashMode::parse("five-tuple"), Some(HashMode::FiveTuple));
    assert_eq!(HashMode::parse("eecmp"), Some(HashMode::Eecmp));
    assert_eq!(HashMode::parse("pin"), Some(HashMode::Pin));
    assert_eq!(HashMode::parse("te"), Some(HashMode::Te));
    assert_eq!(HashMode::from_u32(3), HashMode::Te);
    assert_eq!(HashMode::parse("ecmp"), None);
    // Unknown map values fall back to the five-tuple, in select_member too.
    assert_eq!(HashMode::from_u32(4), HashMode::Flowlet);
    assert_eq!(HashMode::from_u32(7), HashMode::Wcmp);
    assert_eq!(HashMode::from_u32(8), HashMode::FiveTuple);
    assert_eq!(HashMode::from_u32(u32::MAX), HashMode::FiveTuple);
    let unknown = SwitchConfig { hash_mode: 8, ..cfg(HashMode::FiveTuple, SEED_A) };
    for p in random_flows(3, 500) {
        assert_eq!(select_member(&unknown, &p, 8), select_member(&cfg(HashMode::FiveTuple, SEED_A), &p, 8));
    }
}

// ---------------------------------------------------------------------------------------------
// Distribution
// ---------------------------------------------------------------------------------------------

/// Allowed deviation of one member's count from the mean when `flows` flows are hashed onto `n`
/// members.
///
/// A member's count is Binomial(flows, 1/n): sigma = sqrt(flows * (1/n) * (1 - 1/n)). A flat
/// ±15% is the target, but it means very different things per n: with 10,000 flows it is 8.7
/// sigma for n = 4 (far too lax) and only 1.9 sigma for n = 64 (156 flows per member), where a
/// perfectly random hash would put about 4 of the 64 members outside it. So the bound is 4.5
/// sigma: a uniform hash fails it with probability ~7e-6 per member, ~2e-3 over all the
/// 92 members checked below, while a biased hash is still caught. In percent of the mean that
/// is 7.8% (n = 4), 11.9% (n = 8), 17.4% (n = 16) and 35.7% (n = 64): tighter than 15% where the
/// sample allows it.
fn tolerance(flows: usize, n: u32) -> f64 {
    let p = 1.0 / n as f64;
    4.5 * (flows as f64 * p * (1.0 - p)).sqrt()
}

#[test]
fn distribution_is_even_over_members() {
    const FLOWS: usize = 10_000;
    let flows = random_flows(42, FLOWS);
    for mode in [HashMode::FiveTuple, HashMode::Eecmp] {
        for n in [4u32, 8, 16, 64] {
            let c = counts(&cfg(mode, SEED_A), &flows, n);
            let mean = FLOWS as f64 / n as f64;
            let tol = tolerance(FLOWS, n);
            for (i, &k) in c.iter().enumerate() {
                assert!(
                    (k as f64 - mean).abs() <= tol,
                    "{mode:?} n={n}: member {i} got {k} flows, mean {mean:.1} ± {tol:.1}; counts {c:?}"
                );
            }
            // Aggregate check: Pearson's chi-square with n-1 degrees of freedom has mean n-1 and
            // variance 2(n-1); more than 5 standard deviations above the mean is a skewed hash.
            let chi2: f64 = c.iter().map(|&k| (k as f64 - mean).powi(2) / mean).sum();
            let dof = (n - 1) as f64;
            assert!(chi2 < dof + 5.0 * (2.0 * dof).sqrt(), "{mode:?} n={n}: chi-square {chi2:.1}, counts {c:?}");
        }
    }
}

#[test]
fn select_member_is_always_in_range() {
    let flows = random_flows(7, 300);
    for mode in HashMode::ALL {
        for shift in [0u32, 3, 8, 31] {
            let cfg = SwitchConfig { pin_shift: shift, ..cfg(mode, SEED_B) };
            for n in 1u32..=64 {
                for p in &flows {
                    let m = select_member(&cfg, p, n);
                    assert!(m < n, "{mode:?} n={n}: member {m}");
                }
            }
        }
    }
    // The multiply-shift at the extremes.
    for n in 1u32..=64 {
        assert_eq!(scale_to_members(0, n), 0);
        assert_eq!(scale_to_members(u32::MAX, n), n - 1);
    }
}

// ---------------------------------------------------------------------------------------------
// Modes
// ---------------------------------------------------------------------------------------------

#[test]
fn eecmp_spreads_queue_pairs_of_one_five_tuple() {
    let n = 8;
    let eecmp = cfg(HashMode::Eecmp, SEED_A);
    let five = cfg(HashMode::FiveTuple, SEED_A);
    let mut rng = Rng::new(11);
    // Many fixed five-tuples, 64 QPs each.
    for _ in 0..50 {
        let (src, dst, sport) = (rng.next_u32(), rng.next_u32(), rng.next_u16());
        let qps: Vec<_> = (0..64).map(|i| roce_pkt(src, dst, sport, 0x11 + i)).collect();
        let mut used = [false; 8];
        for p in &qps {
            used[select_member(&eecmp, p, n) as usize] = true;
        }
        let distinct = used.iter().filter(|&&u| u).count();
        assert!(distinct > n as usize / 2, "eecmp used only {distinct} of {n} members for 64 QPs");
        // The five-tuple ignores the QP: one member for all of them.
        let first = select_member(&five, &qps[0], n);
        assert!(qps.iter().all(|p| select_member(&five, p, n) == first), "five-tuple must ignore the QP");
    }

    // Changing only the QP moves most flows: a fresh uniform choice keeps the member with
    // probability 1/8, so about 7/8 should move; require 3/4.
    let flows = random_flows(12, 2000);
    let moved = flows
        .iter()
        .filter(|p| {
            let mut q = **p;
            q.bth.as_mut().unwrap().dest_qp ^= 0x1;
            select_member(&eecmp, p, n) != select_member(&eecmp, &q, n)
        })
        .count();
    assert!(moved * 4 > flows.len() * 3, "only {moved} of {} flows changed member with the QP", flows.len());
}

#[test]
fn eecmp_on_non_roce_is_five_tuple() {
    let mut rng = Rng::new(13);
    for _ in 0..2000 {
        let p = pkt_v4(rng.next_u32().to_be_bytes(), rng.next_u32().to_be_bytes(), Some((rng.next_u16(), 53)), None);
        for seed in [SEED_A, SEED_B] {
            for n in [2u32, 3, 8, 64] {
                assert_eq!(
                    select_member(&cfg(HashMode::Eecmp, seed), &p, n),
                    select_member(&cfg(HashMode::FiveTuple, seed), &p, n)
                );
            }
        }
        assert_eq!(FlowKey::for_packet(HashMode::Eecmp, &p), FlowKey::for_packet(HashMode::FiveTuple, &p));
    }
}

#[test]
fn pin_depends_only_on_destination() {
    let n = 8;
    let pin = cfg(HashMode::Pin, SEED_A);
    let mut rng = Rng::new(14);
    for _ in 0..200 {
        let dst = rng.next_u32();
        let base = select_member(&pin, &roce_pkt(1, dst, 1, 1), n);
        // Vary everything but the destination: same member.
        for _ in 0..20 {
            let p = roce_pkt(rng.next_u32(), dst, rng.next_u16(), rng.next_u32() & 0xFF_FFFF);
            assert_eq!(select_member(&pin, &p, n), base);
        }
        // A non-RoCE packet and a portless one to the same destination too.
        let mut icmp = pkt_v4([9, 9, 9, 9], dst.to_be_bytes(), None, None);
        icmp.protocol = 1;
        assert_eq!(select_member(&pin, &icmp, n), base);
        // The seed is irrelevant to pinning.
        assert_eq!(select_member(&cfg(HashMode::Pin, SEED_B), &roce_pkt(1, dst, 1, 1), n), base);
    }
    // Varying the destination does change the member.
    let members: std::collections::HashSet<u32> =
        (0..64u32).map(|i| select_member(&pin, &roce_pkt(1, 0x0A00_0000 + i, 1, 1), n)).collect();
    assert_eq!(members.len(), n as usize, "consecutive destinations cover all members");
}

#[test]
fn pin_shift_is_documented_formula() {
    let mut rng = Rng::new(15);
    for shift in 0u32..32 {
        let c = SwitchConfig { pin_shift: shift, ..cfg(HashMode::Pin, 0) };
        for n in [1u32, 2, 3, 4, 7, 8, 16, 64] {
            for _ in 0..50 {
                let dst = rng.next_u32();
                assert_eq!(select_member(&c, &roce_pkt(1, dst, 1, 1), n), (dst >> shift) % n, "shift {shift} n {n}");
            }
        }
    }
    // With pin_shift 2 (hosts on /30 links), the four addresses of one link share a member and
    // consecutive links get consecutive members.
    let c = SwitchConfig { pin_shift: 2, ..cfg(HashMode::Pin, 0) };
    let at = |d: u32| select_member(&c, &roce_pkt(1, d, 1, 1), 4);
    assert_eq!([at(0x0A00_0000), at(0x0A00_0001), at(0x0A00_0002), at(0x0A00_0003)], [0; 4]);
    assert_eq!([at(0x0A00_0004), at(0x0A00_0008), at(0x0A00_000C), at(0x0A00_0010)], [1, 2, 3, 0]);

    // IPv6: the low 32 bits of the destination.
    let mut p = roce_pkt(1, 1, 1, 1);
    let mut dst = [0xAAu8; 16];
    dst[12..].copy_from_slice(&0x0000_0135u32.to_be_bytes());
    p.ip = IpHeader::V6 { src: [0; 16], dst, hop_limit: 64, traffic_class: 0 };
    let c = SwitchConfig { pin_shift: 4, ..cfg(HashMode::Pin, 0) };
    assert_eq!(select_member(&c, &p, 8), (0x135 >> 4) % 8);
}

#[test]
fn different_seeds_choose_differently() {
    let flows = random_flows(16, 4000);
    for mode in [HashMode::FiveTuple, HashMode::Eecmp] {
        let (a, b) = (cfg(mode, SEED_A), cfg(mode, SEED_B));
        let n = 8;
        let differ = flows.iter().filter(|p| select_member(&a, p, n) != select_member(&b, p, n)).count();
        // Independent choices differ 7/8 of the time; require 3/4.
        assert!(differ * 4 > flows.len() * 3, "{mode:?}: seeds differ on only {differ} flows");
        // And the raw hashes differ for every key.
        for p in &flows {
            let k = FlowKey::for_packet(mode, p);
            assert_ne!(hash_key(SEED_A, &k), hash_key(SEED_B, &k));
        }
    }
}

/// For each tier-2 member, the share of the flows that tier 1 (`t1`, member 0 of `n`) sent to
/// the tier-2 switch, when tier 2 picks with hash `t2`.
fn tier2_shares(
    flows: &[ParsedPacket],
    n: u32,
    t1: impl Fn(&ParsedPacket) -> u32,
    t2: impl Fn(&ParsedPacket) -> u32,
) -> Vec<f64> {
    let arrived: Vec<_> = flows.iter().filter(|p| t1(p) == 0).collect();
    assert!(arrived.len() > flows.len() / (2 * n as usize), "tier 1 sent too few flows to member 0");
    let mut c = vec![0usize; n as usize];
    for p in &arrived {
        c[t2(p) as usize] += 1;
    }
    c.iter().map(|&k| k as f64 / arrived.len() as f64).collect()
}

#[test]
fn no_polarisation_between_tiers() {
    // A leaf (seed A) sends the flows it hashes to uplink 0 to one spine; that spine (seed B)
    // hashes them again over its own 4 members. They must spread over all 4 (25% each, ±10
    // points), not stick to one: that is what the fmix32 finaliser is for.
    let flows = random_flows(17, 10_000);
    let n = 4;
    for mode in [HashMode::FiveTuple, HashMode::Eecmp] {
        let (a, b) = (cfg(mode, SEED_A), cfg(mode, SEED_B));
        let shares = tier2_shares(&flows, n, |p| select_member(&a, p, n), |p| select_member(&b, p, n));
        for (i, s) in shares.iter().enumerate() {
            assert!((0.15..=0.35).contains(s), "{mode:?}: tier-2 member {i} got {:.1}% ({shares:?})", s * 100.0);
        }
    }

    // Control, showing the check has teeth: the same two tiers hashing with the bare seeded CRC
    // (no finaliser) polarise completely, because CRC is linear and the seeds only XOR a
    // constant into the hash, so the two top bits at tier 2 are fixed once tier 1 fixed its own.
    let bare = |seed: u32| {
        move |p: &ParsedPacket| {
            let key = FlowKey::for_packet(HashMode::FiveTuple, p);
            scale_to_members(crc32_update(seed, &key.to_bytes()), n)
        }
    };
    let shares = tier2_shares(&flows, n, bare(SEED_A), bare(SEED_B));
    assert!(shares.contains(&1.0), "bare CRC should polarise: {shares:?}");
}
