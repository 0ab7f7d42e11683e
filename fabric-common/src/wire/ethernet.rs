//! Ethernet II and the 802.1Q tag.
use super::Field;

pub const HEADER_LEN: usize = 14;
pub const DST: Field = 0..6;
pub const SRC: Field = 6..12;
pub const ETHERTYPE: Field = 12..14;

/// An 802.1Q tag: TPID 0x8100 in the EtherType position, then the TCI and the inner EtherType.
pub const VLAN_TAG_LEN: usize = 4;
/// Offset of the TCI (PCP:3, DEI:1, VID:12) from the start of the frame in a tagged frame.
pub const VLAN_TCI: Field = 14..16;

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_ARP: u16 = 0x0806;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// MAC control (PFC pause frames).
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;

/// The priority code point of a TCI.
#[inline(always)]
pub const fn tci_pcp(tci: u16) -> u8 {
    (tci >> 13) as u8
}

/// The VLAN id of a TCI.
#[inline(always)]
pub const fn tci_vid(tci: u16) -> u16 {
    tci & 0x0FFF
}

/// True for group (multicast and broadcast) addresses: the I/G bit of the first octet.
#[inline(always)]
pub const fn is_group_address(mac: &[u8; 6]) -> bool {
    mac[0] & 0x01 != 0
}
