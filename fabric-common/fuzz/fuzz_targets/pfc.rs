//! `fabric_common::pfc::PauseFrame::parse`, the 802.1Qbb priority flow control decoder (the
//! switch program decodes the PAUSE frames it receives with it), on arbitrary frames.
//!
//! Properties:
//! - parsing never panics, and neither do `class_quanta` (any class) and `quanta_to_ns` (any
//!   quanta, any non-zero rate);
//! - it accepts exactly the frames with EtherType 0x8808 and opcode 0x0101 that hold the eight
//!   pause times, and the fields it returns are the bytes at their offsets;
//! - parse → emit → parse round-trips, and `emit` reproduces the input's source MAC, EtherType,
//!   opcode, class-enable vector and times (it writes the PFC multicast destination, a zero
//!   reserved byte and zero padding: those are not kept).
#![no_main]

use fabric_common::{
    pfc::{CLASSES, FRAME_LEN, OPCODE_PFC, PFC_DST, PauseFrame, PfcError, field, quanta_to_ns},
    wire::ethernet,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = PauseFrame::parse(data);
    let be16 = |at: usize| u16::from_be_bytes([data[at], data[at + 1]]);
    let expected_err = if data.len() < field::TIMES.end {
        Some(PfcError::Truncated)
    } else if be16(12) != ethernet::ETHERTYPE_MAC_CONTROL {
        Some(PfcError::NotMacControl)
    } else if be16(14) != OPCODE_PFC {
        Some(PfcError::NotPfc)
    } else {
        None
    };
    let f = match (parsed, expected_err) {
        (Err(e), Some(x)) => {
            assert_eq!(e, x);
            return;
        }
        (Ok(f), None) => f,
        (got, expected) => panic!("parse gave {got:?}, expected error {expected:?}"),
    };
    assert_eq!(f.src[..], data[ethernet::SRC]);
    assert_eq!(f.class_enable, data[field::CLASS_ENABLE.end - 1]);
    for c in 0..CLASSES {
        assert_eq!(f.quanta[c], be16(field::TIMES.start + 2 * c));
    }

    let bytes = f.emit();
    assert_eq!(bytes.len(), FRAME_LEN);
    assert_eq!(PauseFrame::parse(&bytes), Ok(f), "parse(emit(parse(x))) == parse(x)");
    assert_eq!(bytes[ethernet::DST], PFC_DST);
    assert_eq!(
        bytes[ethernet::SRC.start..field::CLASS_ENABLE.start],
        data[ethernet::SRC.start..field::CLASS_ENABLE.start]
    );
    assert_eq!(bytes[field::CLASS_ENABLE.start], 0, "reserved byte");
    assert_eq!(
        bytes[field::CLASS_ENABLE.end - 1..field::TIMES.end],
        data[field::CLASS_ENABLE.end - 1..field::TIMES.end]
    );
    assert!(bytes[field::TIMES.end..].iter().all(|&b| b == 0), "zero padding");

    // Any class index, any rate (a zero rate is no link: excluded).
    let rate = u64::from_le_bytes(std::array::from_fn(|i| *data.get(field::TIMES.end + i).unwrap_or(&1))).max(1);
    for class in 0..CLASSES + 2 {
        let q = f.class_quanta(class);
        assert_eq!(q.is_some(), class < CLASSES && f.class_enable & (1 << class) != 0);
        if let Some(q) = q {
            let ns = quanta_to_ns(q, rate);
            assert!(ns <= quanta_to_ns(q, 1), "a faster link pauses no longer");
            assert_eq!(quanta_to_ns(q, 1), q as u64 * 512 * 1_000_000_000);
        }
    }
});
