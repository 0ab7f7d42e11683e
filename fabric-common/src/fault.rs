//! Injected link loss (a gray failure): a switch port drops a set fraction of the frames it
//! sends, by a seeded draw, so that a lossy link behaves the same way run after run.
//!
//! The draw for a port's n-th frame is a pure function of the port's seed and n
//! ([`is_lost`]); the XDP program keeps n in the port's [`PortLoss`] entry. Which frames are
//! lost then depends only on the order in which frames reach the port, not on the CPU or the
//! time, and the host can replay the same sequence.

/// One port's injected loss (one entry of the `PORT_LOSS` map).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PortLoss {
    /// Frames to drop, as a fraction of 2^32 (0: the port loses nothing, and costs nothing).
    pub threshold: u32,
    pub _pad: u32,
    /// Seed of the port's draws.
    pub seed: u64,
    /// Frames drawn for so far: the index of the next draw (atomic add in XDP).
    pub drawn: u64,
}

const _: () = assert!(core::mem::size_of::<PortLoss>() == 24);

/// The largest loss a link can be given: 100%.
pub const MAX_LOSS_PPM: u32 = 1_000_000;

impl PortLoss {
    /// A port losing `ppm` frames per million (at most [`MAX_LOSS_PPM`]), with draws from `seed`.
    pub const fn new(ppm: u32, seed: u64) -> Self {
        PortLoss { threshold: threshold_of_ppm(ppm), _pad: 0, seed, drawn: 0 }
    }
}

/// The seed of the draws at end `end` (0: the link's lower end, 1: its upper) of link number
/// `link` (its index in the controller's plan) whose loss is seeded with `seed`: every end of
/// every link draws its own sequence, so two lossy links given one seed do not lose in step.
/// The testbed (`fabric link degrade`) and the packet-level simulator (`fabric sim --loss`) both
/// seed a port so, so that the same seed loses the same frames in both.
pub const fn end_seed(seed: u64, link: u64, end: u64) -> u64 {
    seed ^ (2 * link + end + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// `ppm` parts per million as a fraction of 2^32, rounded to nearest; 100% is `u32::MAX`
/// (one frame in 2^32 escapes, which no run can see).
pub const fn threshold_of_ppm(ppm: u32) -> u32 {
    if ppm >= MAX_LOSS_PPM {
        return u32::MAX;
    }
    ((ppm as u64 * (1 << 32) + MAX_LOSS_PPM as u64 / 2) / MAX_LOSS_PPM as u64) as u32
}

/// Whether draw number `index` of a port seeded with `seed` loses its frame.
pub const fn is_lost(seed: u64, index: u64, threshold: u32) -> bool {
    threshold != 0 && ((fmix64(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 32) as u32) < threshold
}

/// murmur3's 64-bit finaliser: consecutive indices become independent-looking draws.
const fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    k ^= k >> 33;
    k = k.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    k ^ (k >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_fractions_of_two_to_the_32() {
        assert_eq!(threshold_of_ppm(0), 0);
        assert_eq!(threshold_of_ppm(500_000), 1 << 31);
        // 0.1% of 2^32 = 4,294,967.296.
        assert_eq!(threshold_of_ppm(1_000), 4_294_967);
        assert_eq!(threshold_of_ppm(MAX_LOSS_PPM), u32::MAX);
        assert_eq!(threshold_of_ppm(2 * MAX_LOSS_PPM), u32::MAX);
    }

    /// Over a million draws the lost share sits within 5 standard deviations of the target
    /// (binomial), for rates from 0.1% to 50%; none and all are exact.
    #[test]
    fn lost_share_matches_the_rate() {
        const N: u64 = 1_000_000;
        for ppm in [1_000u32, 10_000, 100_000, 500_000] {
            let t = threshold_of_ppm(ppm);
            let lost = (0..N).filter(|&i| is_lost(42, i, t)).count() as f64;
            let p = ppm as f64 / 1e6;
            let sd = (N as f64 * p * (1.0 - p)).sqrt();
            assert!((lost - N as f64 * p).abs() < 5.0 * sd, "{ppm} ppm: {lost} of {N} lost");
        }
        assert!((0..N).all(|i| !is_lost(42, i, 0)));
        assert!((0..N).all(|i| is_lost(42, i, u32::MAX)));
    }

    /// The seed decides which frames are lost: two seeds lose different frames, one seed the
    /// same ones.
    #[test]
    fn the_seed_decides_which_frames() {
        let t = threshold_of_ppm(100_000);
        let lost = |seed| (0..10_000u64).filter(|&i| is_lost(seed, i, t)).collect::<Vec<_>>();
        assert_eq!(lost(7), lost(7));
        assert_ne!(lost(7), lost(8));
        // Losses are not bunched: no run of 10 consecutive losses at 10%.
        let l = lost(7);
        assert!(l.windows(10).all(|w| w[9] - w[0] > 9));
    }
}
