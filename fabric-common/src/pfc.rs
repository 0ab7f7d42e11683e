//! IEEE 802.1Qbb priority flow control frames: encode, decode, and pause quanta in time.
//! The switch consumes received frames in XDP ([`PauseFrame::read`]); its agent emits them.
use crate::wire::{Field, PacketBytes, ethernet};

/// The MAC control multicast address PFC frames go to.
pub const PFC_DST: [u8; 6] = [0x01, 0x80, 0xC2, 0x00, 0x00, 0x01];
/// MAC control opcode of PFC (802.3x PAUSE is 0x0001).
pub const OPCODE_PFC: u16 = 0x0101;
/// A PFC frame is a minimum-size Ethernet frame (without FCS).
pub const FRAME_LEN: usize = 60;
/// Priority classes.
pub const CLASSES: usize = 8;

pub mod field {
    use super::Field;
    pub const OPCODE: Field = 14..16;
    /// Reserved byte, then one enable bit per class (bit n = class n).
    pub const CLASS_ENABLE: Field = 16..18;
    /// Eight 16-bit pause times, class 0 first.
    pub const TIMES: Field = 18..34;
}

/// A decoded PFC frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PauseFrame {
    pub src: [u8; 6],
    /// Bit n set: the time for class n applies.
    pub class_enable: u8,
    /// Pause time per class, in quanta of 512 bit times; 0 resumes at once.
    pub quanta: [u16; CLASSES],
}

/// Why bytes are not a PFC frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PfcError {
    Truncated,
    NotMacControl,
    NotPfc,
}

impl PauseFrame {
    /// Decodes a frame (from its Ethernet header).
    pub fn parse(frame: &[u8]) -> Result<Self, PfcError> {
        Self::read(frame)
    }

    /// Decodes a frame through the packet accessor, as the XDP program does.
    #[inline(always)]
    pub fn read<P: PacketBytes + ?Sized>(frame: &P) -> Result<Self, PfcError> {
        let Some(times) = frame.bytes::<16>(field::TIMES.start) else {
            return Err(PfcError::Truncated);
        };
        let ethertype = frame.u16_at(ethernet::ETHERTYPE.start).ok_or(PfcError::Truncated)?;
        if ethertype != ethernet::ETHERTYPE_MAC_CONTROL {
            return Err(PfcError::NotMacControl);
        }
        if frame.u16_at(field::OPCODE.start).ok_or(PfcError::Truncated)? != OPCODE_PFC {
            return Err(PfcError::NotPfc);
        }
        let src = *frame.bytes::<6>(ethernet::SRC.start).ok_or(PfcError::Truncated)?;
        let mut quanta = [0; CLASSES];
        for (c, q) in quanta.iter_mut().enumerate() {
            *q = u16::from_be_bytes([times[2 * c], times[2 * c + 1]]);
        }
        let class_enable = frame.u8_at(field::CLASS_ENABLE.start + 1).ok_or(PfcError::Truncated)?;
        Ok(PauseFrame { src, class_enable, quanta })
    }

    /// Encodes the frame, padded to the Ethernet minimum.
    pub fn emit(&self) -> [u8; FRAME_LEN] {
        let mut f = [0u8; FRAME_LEN];
        f[ethernet::DST].copy_from_slice(&PFC_DST);
        f[ethernet::SRC].copy_from_slice(&self.src);
        f[ethernet::ETHERTYPE].copy_from_slice(&ethernet::ETHERTYPE_MAC_CONTROL.to_be_bytes());
        f[field::OPCODE].copy_from_slice(&OPCODE_PFC.to_be_bytes());
        f[field::CLASS_ENABLE.start + 1] = self.class_enable;
        for (c, q) in self.quanta.iter().enumerate() {
            let at = field::TIMES.start + 2 * c;
            f[at..at + 2].copy_from_slice(&q.to_be_bytes());
        }
        f
    }

    /// The pause of `class`, if the frame enables it.
    pub fn class_quanta(&self, class: usize) -> Option<u16> {
        (class < CLASSES && self.class_enable & (1 << class) != 0).then(|| self.quanta[class])
    }
}

/// The time `quanta` pause quanta (512 bit times each) last on a link of `rate_bps`
/// (a link of rate 0 never resumes: `u64::MAX`).
/// u64 throughout (at most 65535 x 512 x 10^9, far below 2^64): the XDP program calls it.
#[inline(always)]
pub const fn quanta_to_ns(quanta: u16, rate_bps: u64) -> u64 {
    if rate_bps == 0 {
        return if quanta == 0 { 0 } else { u64::MAX };
    }
    (quanta as u64 * 512 * 1_000_000_000) / rate_bps
}

/// The quanta that pause a link of `rate_bps` for `ns` (saturating at the field's maximum).
pub const fn ns_to_quanta(ns: u64, rate_bps: u64) -> u16 {
    let q = (ns as u128 * rate_bps as u128) / (512 * 1_000_000_000);
    if q > u16::MAX as u128 { u16::MAX } else { q as u16 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_and_known_bytes() {
        let mut quanta = [0; CLASSES];
        quanta[3] = 0xFFFF;
        let f = PauseFrame { src: [2, 0, 0, 0, 0, 1], class_enable: 1 << 3, quanta };
        let bytes = f.emit();
        assert_eq!(&bytes[..6], &PFC_DST);
        assert_eq!(&bytes[12..18], &[0x88, 0x08, 0x01, 0x01, 0x00, 0x08]);
        assert_eq!(&bytes[24..26], &[0xFF, 0xFF], "class 3's time");
        assert_eq!(PauseFrame::parse(&bytes), Ok(f));
        assert_eq!(f.class_quanta(3), Some(0xFFFF));
        assert_eq!(f.class_quanta(2), None);
    }

    #[test]
    fn rejects_what_is_not_pfc() {
        let f = PauseFrame { src: [2; 6], class_enable: 1, quanta: [1; CLASSES] }.emit();
        assert_eq!(PauseFrame::parse(&f[..33]), Err(PfcError::Truncated));
        let mut pause = f;
        pause[15] = 0x01; // 802.3x PAUSE
        pause[14] = 0x00;
        assert_eq!(PauseFrame::parse(&pause), Err(PfcError::NotPfc));
        let mut ip = f;
        ip[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(PauseFrame::parse(&ip), Err(PfcError::NotMacControl));
    }

    #[test]
    fn quanta_in_time() {
        // One quantum is 512 bit times: 5.12 ns at 100G, 1.28 ns at 400G, 512 ns at 1G.
        assert_eq!(quanta_to_ns(1000, 100_000_000_000), 5_120);
        assert_eq!(quanta_to_ns(1000, 400_000_000_000), 1_280);
        assert_eq!(quanta_to_ns(1, 1_000_000_000), 512);
        assert_eq!(quanta_to_ns(0xFFFF, 400_000_000_000), 83_884);
        assert_eq!(quanta_to_ns(0, 1), 0);
        assert_eq!(quanta_to_ns(5, 0), u64::MAX);
    }

    /// An 802.1Qbb frame written out by hand: classes 1 and 3 enabled (vector 0x000A), class 1
    /// paused for 0x0102 quanta and class 3 for 0x1234; the other times are zero.
    #[test]
    fn decodes_a_hand_written_frame() {
        let mut frame = [0u8; FRAME_LEN];
        frame[..34].copy_from_slice(&[
            0x01, 0x80, 0xC2, 0x00, 0x00, 0x01, // destination
            0x02, 0x00, 0x00, 0x00, 0x00, 0x07, // source
            0x88, 0x08, // MAC control
            0x01, 0x01, // PFC opcode
            0x00, 0x0A, // class-enable vector
            0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x12, 0x34, // times of classes 0..3
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // times of classes 4..7
        ]);
        let f = PauseFrame::parse(&frame).unwrap();
        assert_eq!(f.src, [2, 0, 0, 0, 0, 7]);
        assert_eq!(f.class_enable, 0x0A);
        assert_eq!(f.quanta, [0, 0x0102, 0, 0x1234, 0, 0, 0, 0]);
        assert_eq!((f.class_quanta(1), f.class_quanta(3), f.class_quanta(0)), (Some(0x0102), Some(0x1234), None));
        assert_eq!(f.emit(), frame, "and encodes back to the same bytes");
    }

    #[test]
    fn class_quanta_of_a_class_past_the_eighth_is_none() {
        let f = PauseFrame { src: [2; 6], class_enable: 0xFF, quanta: [7; CLASSES] };
        assert_eq!(f.class_quanta(7), Some(7));
        assert_eq!(f.class_quanta(8), None);
        assert_eq!(f.class_quanta(usize::MAX), None);
    }

    #[test]
    fn time_in_quanta() {
        // 512 bit times: 5.12 ns at 100G, 51.2 ns at 10G.
        assert_eq!(ns_to_quanta(5_120, 100_000_000_000), 1000);
        assert_eq!(ns_to_quanta(51_200, 10_000_000_000), 1000);
        // 5 ns at 100G is 0.98 quanta: rounded down.
        assert_eq!(ns_to_quanta(5, 100_000_000_000), 0);
        // The field's maximum, 65535 quanta, is 335.5392 µs at 100G; anything longer saturates.
        assert_eq!(ns_to_quanta(335_539, 100_000_000_000), 65_534);
        assert_eq!(ns_to_quanta(335_540, 100_000_000_000), 65_535);
        assert_eq!(ns_to_quanta(1_000_000, 100_000_000_000), 65_535, "195312 quanta, saturated");
        assert_eq!(ns_to_quanta(u64::MAX, u64::MAX), 65_535);
    }
}
