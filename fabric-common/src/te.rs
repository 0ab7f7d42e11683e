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
