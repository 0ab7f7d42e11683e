//! Centralised traffic engineering: per-flow member choices installed by the controller.
//!
//! In [`crate::config::HashMode::Te`] a switch first looks the flow up in its TE table; an entry
//! names the ECMP group and member the controller chose for it, and takes precedence over the
//! hash. A flow without an entry, or whose entry no longer fits the group (the group changed
//! after a link failure and the controller has not recomputed yet), is hashed as in `eecmp`.
//! The key is the flow's `eecmp` hash input, so a flow is what E-ECMP distinguishes: the
//! five-tuple plus the BTH destination QP.
use crate::config::HashMode;
use crate::hash::FlowKey;
use crate::parse::ParsedPacket;

/// The TE table's key: [`FlowKey::to_bytes`] of the packet's `eecmp` key.
pub type TeKey = [u8; FlowKey::LEN];

/// Where the controller sends one flow at one switch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct TeEntry {
    /// The group the flow's route uses at this switch (an entry for another group is stale).
    pub group: u32,
    pub member_index: u32,
}

/// Entries per switch.
pub const MAX_TE_FLOWS: u32 = 65_536;

#[inline(always)]
pub fn te_key(pkt: &ParsedPacket) -> TeKey {
    FlowKey::for_packet(HashMode::Te, pkt).to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{Bth, IpHeader};

    #[test]
    fn te_key_is_the_five_tuple_and_the_dest_qp_in_network_order() {
        let pkt = ParsedPacket {
            dst_mac: [2; 6],
            vlan_tci: None,
            l3_offset: 14,
            ip: IpHeader::V4 { src: [198, 18, 0, 1], dst: [198, 18, 0, 2], ttl: 64, tos: 0, header_len: 20 },
            protocol: 17,
            ports: Some((0xC000, 4791)),
            bth: Some(Bth { opcode: 4, solicited: false, ack_request: false, pkey: 0xFFFF, dest_qp: 0x12, psn: 0 }),
        };
        // src, dst, protocol, source port 0xC000, destination port 4791 = 0x12B7, QP 0x000012.
        let key = [198, 18, 0, 1, 198, 18, 0, 2, 17, 0xC0, 0x00, 0x12, 0xB7, 0x00, 0x00, 0x12];
        assert_eq!(te_key(&pkt), key);
    }
}
