//! The endpoint's RoCEv2 UDP-payload parser, `fabric_roce::wire::RocePacketRepr::parse`,
//! on arbitrary bytes.
//!
//! Properties:
//! - parsing never panics;
//! - when it succeeds, `emit` writes exactly as many bytes as were parsed, parsing them again
//!   gives the same packet, and they equal the input except where the input held bytes the
//!   endpoint does not keep: reserved BTH bits, pad bytes, the CNP's reserved bytes, the ICRC
//!   (emitted as zero for `roce::icrc` to fill);
//! - the BTH views agree with the shared switch parser's field offsets.
#![no_main]

use fabric_common::wire::bth;
use fabric_roce::wire::{AETH_LEN, BTH_LEN, Body, BthPacket, CNP_RESERVED_LEN, ICRC_LEN, RETH_LEN, RocePacketRepr, SACK_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(repr) = RocePacketRepr::parse(data) else {
        return;
    };
    assert_eq!(repr.buffer_len(), data.len(), "{repr:?}: buffer_len is the parsed length");
    let bytes = repr.to_bytes();
    assert_eq!(bytes.len(), data.len());
    assert_eq!(RocePacketRepr::parse(&bytes), Ok(repr), "parse(emit(parse(x))) == parse(x)");

    // Byte for byte, except what the endpoint does not keep.
    let mut expected = data.to_vec();
    expected[bth::FECN_BECN] &= 0xC0; // FECN, BECN; reserved bits emitted as zero
    expected[bth::ACK_REQ] &= 0x80; // AckReq; reserved bits emitted as zero
    let icrc_at = data.len() - ICRC_LEN;
    expected[icrc_at..].fill(0);
    let payload_len = repr.body.payload().len();
    let pad_at = icrc_at - (BthPacket::new_unchecked(data).pad_count() as usize);
    assert_eq!(pad_at, BTH_LEN + ext_len(&repr.body) + payload_len, "pad count and payload agree");
    expected[pad_at..icrc_at].fill(0);
    if let Body::Cnp = repr.body {
        expected[BTH_LEN..BTH_LEN + CNP_RESERVED_LEN].fill(0);
    }
    assert_eq!(bytes, expected, "{repr:?}: emit reproduces the input");

    // The endpoint's BTH view and the switch's BTH offsets read the same fields.
    let view = BthPacket::new_checked(data).expect("parsed");
    assert_eq!(view.opcode(), data[bth::OPCODE]);
    assert_eq!(view.dest_qp(), u32::from_be_bytes([0, data[5], data[6], data[7]]));
    assert_eq!(view.psn().value(), u32::from_be_bytes([0, data[9], data[10], data[11]]));
    assert_eq!(view.ack_req(), data[bth::ACK_REQ] & bth::FLAG_ACK_REQ != 0);
    assert_eq!(view.solicited(), data[bth::FLAGS] & bth::FLAG_SOLICITED != 0);
});

fn ext_len(body: &Body) -> usize {
    match body {
        Body::WriteFirst { .. } | Body::WriteOnly { .. } => RETH_LEN,
        Body::WriteMiddleAt { .. } | Body::WriteLastAt { .. } => RETH_LEN,
        Body::Ack(_) => AETH_LEN,
        Body::Sack { .. } => AETH_LEN + SACK_LEN,
        Body::Cnp => CNP_RESERVED_LEN,
        Body::WriteMiddle { .. } | Body::WriteLast { .. } => 0,
    }
}
