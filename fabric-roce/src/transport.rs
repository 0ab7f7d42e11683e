//! Which reliability scheme a QP runs: the RC go-back-N every RoCE NIC implements, or the
//! reorder-tolerant one (out-of-order placement, selective acknowledgement and retransmission).
//!
//! Reorder-tolerant ("ooo") on the wire, as [`super::qp`] implements it:
//! - every WRITE packet carries a RETH with its own address (the message's address plus the
//!   packet's offset), the message's key and the message's length: MIDDLE and LAST packets too
//!   ([`super::wire::Body::WriteMiddleAt`]), so a packet can be placed whatever arrived before it.
//!   A RoCE decoder that does not know the QP shows those 16 bytes as the start of the data.
//! - the responder keeps a bitmap of the [`super::wire::SACK_BITS`] PSNs after the cumulative
//!   acknowledgement and, while any is missing, acknowledges with a SACK: an ordinary ACK (BTH
//!   PSN = cumulative, AETH syndrome ACK, MSN) followed by that bitmap
//!   ([`super::wire::Body::Sack`]). With nothing missing its ACKs are the IBTA's.
//! - the requester retransmits only PSNs it takes for lost: missing with at least
//!   [`super::qp::RequesterConfig::loss_threshold_packets`] later PSNs selectively acknowledged
//!   (each once), or every missing PSN when its timer expires.
//! - a message completes on both sides only when all its PSNs, and all before, have arrived.
use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use super::{
    psn::Psn,
    wire::{RethOn, SACK_BITS},
};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Transport {
    /// RC as the IBTA defines it: in-order acceptance, NAK on a gap, go back N.
    #[default]
    #[serde(rename = "gbn")]
    GoBackN,
    /// Out-of-order placement, SACK and selective retransmission (see the module docs).
    #[serde(rename = "ooo")]
    ReorderTolerant,
}

impl Transport {
    pub const ALL: [Transport; 2] = [Transport::GoBackN, Transport::ReorderTolerant];

    /// The name on the command line and in results.
    pub const fn name(self) -> &'static str {
        match self {
            Transport::GoBackN => "gbn",
            Transport::ReorderTolerant => "ooo",
        }
    }

    /// The most packets a requester may keep in flight: go-back-N's PSN order allows half the
    /// PSN space; the reorder-tolerant transport, what one SACK describes ([`SACK_BITS`]).
    pub const fn max_window_packets(self) -> u32 {
        match self {
            Transport::GoBackN => Psn::WINDOW - 1,
            Transport::ReorderTolerant => SACK_BITS,
        }
    }

    /// The window a requester of this transport runs when `requested` is asked for: at most
    /// [`Self::max_window_packets`]. Drivers apply it, so one large default serves both.
    pub const fn window_packets(self, requested: u32) -> u32 {
        let max = self.max_window_packets();
        if requested < max { requested } else { max }
    }

    /// Which WRITE packets carry a RETH under this transport.
    pub const fn reth_on(self) -> RethOn {
        match self {
            Transport::GoBackN => RethOn::FirstAndOnly,
            Transport::ReorderTolerant => RethOn::EveryWrite,
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown transport `{0}`: choose gbn (go-back-N, as RC NICs do) or ooo (reorder-tolerant)")]
pub struct UnknownTransport(pub String);

impl FromStr for Transport {
    type Err = UnknownTransport;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Transport::ALL.into_iter().find(|t| t.name() == s).ok_or_else(|| UnknownTransport(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_ones_list_the_choices() {
        for t in Transport::ALL {
            assert_eq!(t.name().parse::<Transport>(), Ok(t));
        }
        let err = "spray".parse::<Transport>().unwrap_err();
        assert_eq!(err, UnknownTransport("spray".into()));
        let text = err.to_string();
        assert!(text.contains("`spray`") && text.contains("gbn") && text.contains("ooo"), "{text}");
    }

    #[test]
    fn windows_are_capped_by_what_each_transport_can_order_or_describe() {
        assert_eq!(Transport::GoBackN.window_packets(4096), 4096);
        assert_eq!(Transport::ReorderTolerant.window_packets(4096), 128);
        assert_eq!(Transport::ReorderTolerant.window_packets(32), 32);
        assert_eq!(Transport::GoBackN.window_packets(u32::MAX), Psn::WINDOW - 1);
        assert_eq!(serde_json::to_string(&Transport::ReorderTolerant).unwrap(), "\"ooo\"");
        assert_eq!(serde_json::from_str::<Transport>("\"gbn\"").unwrap(), Transport::GoBackN);
    }
}
