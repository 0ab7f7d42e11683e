//! Which priority class and ECN codepoint each packet of the endpoint carries in its IP header.
//!
//! The switches queue a RoCE packet in priority class `DSCP >> 3` and RED-mark CE on packets that
//! are ECN-capable. Data, ACKs and NAKs go in the lossless class (DSCP 26, class 3, as RoCE
//! deployments configure it) as ECT(0); CNPs and clear-to-send messages go in a high-priority
//! class (DSCP 48, class 6), not ECN-capable, so congestion signals are neither delayed behind
//! the data they are about nor marked themselves.

/// DSCP of RoCE data, ACKs and NAKs by default: class 3, the lossless class.
pub const DSCP_ROCE: u8 = 26;
/// DSCP of CNPs and CTS messages: class 6.
pub const DSCP_CONTROL: u8 = 48;

/// The ECN codepoints: the switches' own (the mask, not-ECT and CE), and the two ECT ones.
pub use fabric_common::queue::{ECN_CE, ECN_MASK, ECN_NOT_ECT};
pub const ECN_ECT1: u8 = 0b01;
pub const ECN_ECT0: u8 = 0b10;

/// The TOS byte (IPv4) or traffic class (IPv6) of a DSCP and ECN codepoint.
pub const fn tos(dscp: u8, ecn: u8) -> u8 {
    (dscp << 2) | (ecn & ECN_MASK)
}

/// The TOS of data/ACK packets: `dscp`, ECT(0) when `ecn_capable`.
pub const fn data_tos(dscp: u8, ecn_capable: bool) -> u8 {
    tos(dscp, if ecn_capable { ECN_ECT0 } else { ECN_NOT_ECT })
}

/// The TOS of CNPs and CTS messages: DSCP 48, not ECT.
pub const CONTROL_TOS: u8 = tos(DSCP_CONTROL, ECN_NOT_ECT);

/// The priority class a switch puts a packet of this TOS in (what PFC pauses): the switches'
/// own rule, so that hosts obey pauses for the class the switches queue in.
pub const fn priority_class(tos: u8) -> usize {
    fabric_common::qos::class_of(tos)
}

/// Whether a packet of this TOS travels in the control class (CNPs and CTS messages), which the
/// switches and the hosts' downlinks keep apart from data.
pub const fn is_control(tos: u8) -> bool {
    priority_class(tos) == priority_class(CONTROL_TOS)
}

/// Whether a switch marked the packet CE.
pub const fn is_ce(tos: u8) -> bool {
    tos & ECN_MASK == ECN_CE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codepoints() {
        assert_eq!(data_tos(DSCP_ROCE, true), 0x6A);
        assert_eq!(data_tos(DSCP_ROCE, false), 0x68);
        assert_eq!(CONTROL_TOS, 0xC0);
        assert_eq!(priority_class(0x6A), 3);
        assert_eq!(priority_class(CONTROL_TOS), 6);
        assert!(is_ce(0x6B) && !is_ce(0x6A) && !is_ce(0x69));
        assert!(is_control(CONTROL_TOS) && is_control(tos(DSCP_CONTROL + 1, ECN_ECT0)));
        assert!(!is_control(data_tos(DSCP_ROCE, true)) && !is_control(tos(DSCP_CONTROL - 1, ECN_NOT_ECT)));
    }
}
