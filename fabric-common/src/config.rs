//! Per-switch configuration, written by the controller into a one-entry array map.

/// How a switch chooses among the members of an ECMP group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum HashMode {
    /// Classic ECMP on src/dst address, protocol, src/dst port.
    FiveTuple = 0,
    /// Enhanced ECMP: the five-tuple plus the BTH destination QP.
    Eecmp = 1,
    /// Path pinning: the member is chosen by the destination alone.
    Pin = 2,
}

impl HashMode {
    pub const ALL: [HashMode; 3] = [Self::FiveTuple, Self::Eecmp, Self::Pin];

    /// Decodes a map value; unknown values fall back to the five-tuple.
    #[inline(always)]
    pub const fn from_u32(v: u32) -> Self {
        match v {
            1 => Self::Eecmp,
            2 => Self::Pin,
            _ => Self::FiveTuple,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FiveTuple => "five-tuple",
            Self::Eecmp => "eecmp",
            Self::Pin => "pin",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// The switch-wide settings the XDP program reads for every packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct SwitchConfig {
    /// A [`HashMode`] as u32.
    pub hash_mode: u32,
    /// Per-switch hash seed, so that tiers do not polarise.
    pub seed: u32,
    /// For `pin`: how many low destination-address bits to drop before taking the index.
    pub pin_shift: u32,
    pub _reserved: u32,
}

const _: () = assert!(core::mem::size_of::<SwitchConfig>() == 16);

/// One switch port as the XDP program sees it (looked up by ingress ifindex).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PortInfo {
    /// The port's index in the switch's counter and DEVMAP arrays.
    pub index: u32,
    /// The port's own MAC: unicast frames for another address are not routed.
    pub mac: [u8; 6],
    pub _pad: [u8; 2],
}

const _: () = assert!(core::mem::size_of::<PortInfo>() == 12);

/// Limits shared by the maps and the controller.
pub const MAX_PORTS: u32 = 256;
