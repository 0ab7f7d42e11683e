//! 24-bit packet sequence numbers (IBTA vol. 1, 9.7.1).
//!
//! PSNs wrap at 2^24. Ordering only makes sense inside half the space: `a` is before `b` when `b`
//! lies 1..2^23 steps ahead of `a`, which is how requester and responder tell new packets from
//! duplicates after a wrap.
use std::{
    fmt,
    ops::{Add, AddAssign, Sub},
};

/// A packet sequence number, always reduced to 24 bits. Deliberately not `Ord`: order exists
/// only within the window, through [`Psn::is_before`] and [`Psn::offset_to`].
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Psn(u32);

impl Psn {
    pub const BITS: u32 = 24;
    /// Number of distinct PSNs.
    pub const MODULUS: u32 = 1 << Self::BITS;
    pub const MASK: u32 = Self::MODULUS - 1;
    /// Half the space: the furthest apart two PSNs can be and still be ordered.
    pub const WINDOW: u32 = 1 << (Self::BITS - 1);

    /// The PSN `value` mod 2^24.
    pub const fn new(value: u32) -> Self {
        Psn(value & Self::MASK)
    }

    pub const fn value(self) -> u32 {
        self.0
    }

    /// Steps from `self` forward to `later`, in 0..2^24 (how far `later` is ahead).
    pub const fn distance_to(self, later: Psn) -> u32 {
        later.0.wrapping_sub(self.0) & Self::MASK
    }

    /// `other - self` as a signed number of steps in -2^23..2^23.
    pub const fn offset_to(self, other: Psn) -> i32 {
        let d = self.distance_to(other);
        if d >= Self::WINDOW { d as i32 - Self::MODULUS as i32 } else { d as i32 }
    }

    /// Whether `self` comes strictly before `other` in the 2^23 window.
    pub const fn is_before(self, other: Psn) -> bool {
        self.offset_to(other) > 0
    }
}

/// The PSN `n` steps later, wrapping at 2^24.
impl Add<u32> for Psn {
    type Output = Psn;
    fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }
}

/// The PSN `n` steps earlier, wrapping at 2^24.
impl Sub<u32> for Psn {
    type Output = Psn;
    fn sub(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(n))
    }
}

impl AddAssign<u32> for Psn {
    fn add_assign(&mut self, n: u32) {
        *self = *self + n;
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOP: Psn = Psn::new(Psn::MASK);

    #[test]
    fn new_reduces_to_24_bits() {
        assert_eq!(Psn::new(0x0123_4567).value(), 0x23_4567);
        assert_eq!(Psn::new(Psn::MODULUS), Psn::new(0));
    }

    #[test]
    fn add_and_sub_wrap_at_2_pow_24() {
        assert_eq!(TOP + 1, Psn::new(0));
        assert_eq!(TOP + 5, Psn::new(4));
        assert_eq!(Psn::new(0) - 1, TOP);
        assert_eq!(Psn::new(3) - 10, Psn::new(Psn::MODULUS - 7));
        assert_eq!(Psn::new(7) + u32::MAX + 1, Psn::new(7), "2^32 is a multiple of 2^24");
    }

    #[test]
    fn distance_counts_forward_across_the_wrap() {
        assert_eq!(TOP.distance_to(Psn::new(2)), 3);
        assert_eq!(Psn::new(2).distance_to(TOP), Psn::MODULUS - 3);
        assert_eq!(Psn::new(9).distance_to(Psn::new(9)), 0);
    }

    #[test]
    fn ordering_uses_the_2_pow_23_window() {
        assert!(TOP.is_before(Psn::new(0)));
        assert!(!Psn::new(0).is_before(TOP));
        assert!(!Psn::new(5).is_before(Psn::new(5)));
        assert_eq!(TOP.offset_to(Psn::new(1)), 2);
        assert_eq!(Psn::new(1).offset_to(TOP), -2);
        // The edge: 2^23 - 1 ahead is after, exactly 2^23 ahead counts as behind.
        let a = Psn::new(100);
        assert!(a.is_before(a + (Psn::WINDOW - 1)));
        assert!(!a.is_before(a + Psn::WINDOW));
        assert_eq!(a.offset_to(a + Psn::WINDOW), -(Psn::WINDOW as i32));
    }
}
