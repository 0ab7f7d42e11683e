//! Ethernet II and the 802.1Q tag.
use core::mem::offset_of;

use network_types::{eth::EthHdr, vlan::VlanHdr};

use super::Field;

// The layouts are network-types' (the aya ecosystem's header structs, shared with the XDP
// program); the named byte ranges below are read from them, so neither side writes an offset.
pub const HEADER_LEN: usize = EthHdr::LEN;
pub const DST: Field = offset_of!(EthHdr, dst_addr)..offset_of!(EthHdr, src_addr);
pub const SRC: Field = offset_of!(EthHdr, src_addr)..offset_of!(EthHdr, ether_type);
pub const ETHERTYPE: Field = offset_of!(EthHdr, ether_type)..HEADER_LEN;

/// An 802.1Q tag: TPID 0x8100 in the EtherType position, then the TCI and the inner EtherType.
pub const VLAN_TAG_LEN: usize = VlanHdr::LEN;
/// Offset of the TCI (PCP:3, DEI:1, VID:12) from the start of the frame in a tagged frame.
pub const VLAN_TCI: Field = HEADER_LEN + offset_of!(VlanHdr, tci)..HEADER_LEN + offset_of!(VlanHdr, ether_type);

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

const _: () = assert!(HEADER_LEN == 14 && VLAN_TAG_LEN == 4 && ETHERTYPE.start == 12 && VLAN_TCI.start == 14);

#[cfg(test)]
mod tests {
    use super::*;

    /// IEEE 802.1Q: the TCI is PCP (3 bits), DEI (1 bit), VID (12 bits), most significant first.
    /// 0xB064 = 101 1 0000_0110_0100: PCP 5, DEI set, VID 100.
    #[test]
    fn tci_splits_into_pcp_and_vid_as_in_802_1q() {
        assert_eq!(tci_pcp(0xB064), 5);
        assert_eq!(tci_vid(0xB064), 100);
        // The extremes: every PCP bit and no VID bit, and the reverse.
        assert_eq!((tci_pcp(0xE000), tci_vid(0xE000)), (7, 0));
        assert_eq!((tci_pcp(0x0FFF), tci_vid(0x0FFF)), (0, 4095));
    }

    #[test]
    fn vlan_tci_follows_the_tpid_of_a_tagged_frame() {
        // dst(6) src(6) TPID 0x8100 (2), then the TCI: bytes 14..16.
        assert_eq!(VLAN_TCI, 14..16);
    }

    #[test]
    fn group_address_is_the_low_bit_of_the_first_octet() {
        assert!(is_group_address(&[0xFF; 6]));
        assert!(is_group_address(&[0x01, 0x80, 0xC2, 0, 0, 0x01])); // the PFC/pause address
        assert!(!is_group_address(&[0x02, 0, 0, 0, 0, 0x01]));
    }
}
