//! Cutting one RDMA WRITE message into packets at the path MTU (IBTA vol. 1, 9.4.3): ONLY if
//! it fits in one, else FIRST, MIDDLE..., LAST. Every packet but the last carries exactly one
//! MTU; the RETH (address, key, total length) rides on the first; PSNs are consecutive.
use super::{psn::Psn, wire::opcode};

/// The InfiniBand path MTUs: payload bytes per packet, headers not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathMtu {
    Mtu256,
    Mtu512,
    Mtu1024,
    Mtu2048,
    Mtu4096,
}

/// IP-layer bytes around each payload in the worst case: UDP + BTH + RETH + ICRC.
const TRANSPORT_OVERHEAD: u32 = 8 + 12 + 16 + 4;

impl PathMtu {
    pub const ALL: [PathMtu; 5] =
        [PathMtu::Mtu256, PathMtu::Mtu512, PathMtu::Mtu1024, PathMtu::Mtu2048, PathMtu::Mtu4096];

    pub const fn bytes(self) -> u32 {
        match self {
            PathMtu::Mtu256 => 256,
            PathMtu::Mtu512 => 512,
            PathMtu::Mtu1024 => 1024,
            PathMtu::Mtu2048 => 2048,
            PathMtu::Mtu4096 => 4096,
        }
    }

    pub fn from_bytes(bytes: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.bytes() == bytes)
    }

    /// The largest path MTU whose packets fit a link (interface) MTU, given the IP header length
    /// (20 for IPv4 without options, 40 for IPv6). Links of 1500 give 1024, 9000 give 4096.
    pub fn largest_within(link_mtu: u32, ip_header_len: u32) -> Option<Self> {
        let room = link_mtu.checked_sub(ip_header_len + TRANSPORT_OVERHEAD)?;
        Self::ALL.into_iter().rev().find(|m| m.bytes() <= room)
    }
}

/// A packet's place in its message, which selects the WRITE opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

impl Position {
    pub const fn opcode(self) -> u8 {
        match self {
            Position::First => opcode::RC_WRITE_FIRST,
            Position::Middle => opcode::RC_WRITE_MIDDLE,
            Position::Last => opcode::RC_WRITE_LAST,
            Position::Only => opcode::RC_WRITE_ONLY,
        }
    }

    pub const fn carries_reth(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    pub const fn starts_message(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    pub const fn ends_message(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// One packet of a message: where its payload lies in the message and its PSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub position: Position,
    pub psn: Psn,
    /// Byte offset of the payload in the message.
    pub offset: u32,
    pub len: u32,
    /// Set on the last packet, so the responder acknowledges the message at once.
    pub ack_req: bool,
}

/// Packets needed for a message of `message_len` bytes (a zero-byte WRITE is one ONLY packet).
pub const fn packet_count(message_len: u32, mtu: PathMtu) -> u32 {
    if message_len == 0 { 1 } else { message_len.div_ceil(mtu.bytes()) }
}

/// Packet `index` of a message whose first packet has `first_psn`. Panics if `index` is not
/// below [`packet_count`].
pub fn segment(message_len: u32, mtu: PathMtu, first_psn: Psn, index: u32) -> Segment {
    let count = packet_count(message_len, mtu);
    assert!(index < count, "packet {index} of a {count}-packet message");
    let position = match (index, count) {
        (_, 1) => Position::Only,
        (0, _) => Position::First,
        (i, n) if i + 1 == n => Position::Last,
        _ => Position::Middle,
    };
    let offset = index * mtu.bytes();
    Segment {
        position,
        psn: first_psn + index,
        offset,
        len: (message_len - offset).min(mtu.bytes()),
        ack_req: position.ends_message(),
    }
}

/// Every packet of a message, in order.
pub fn segments(message_len: u32, mtu: PathMtu, first_psn: Psn) -> impl Iterator<Item = Segment> {
    (0..packet_count(message_len, mtu)).map(move |i| segment(message_len, mtu, first_psn, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positions(len: u32, mtu: PathMtu) -> Vec<Position> {
        segments(len, mtu, Psn::new(0)).map(|s| s.position).collect()
    }

    #[test]
    fn sizes_around_mtu_boundaries() {
        use Position::*;
        for mtu in PathMtu::ALL {
            let m = mtu.bytes();
            assert_eq!(positions(0, mtu), [Only]);
            assert_eq!(positions(1, mtu), [Only]);
            assert_eq!(positions(m - 1, mtu), [Only]);
            assert_eq!(positions(m, mtu), [Only]);
            assert_eq!(positions(m + 1, mtu), [First, Last]);
            assert_eq!(positions(2 * m, mtu), [First, Last]);
            assert_eq!(positions(2 * m + 1, mtu), [First, Middle, Last]);
            assert_eq!(positions(4 * m, mtu), [First, Middle, Middle, Last]);
        }
    }

    #[test]
    fn segments_tile_the_message_with_consecutive_psns() {
        for mtu in PathMtu::ALL {
            let m = mtu.bytes();
            for len in [0, 1, 3, m - 1, m, m + 1, 2 * m - 1, 2 * m, 2 * m + 1, 3000, 10 * m + 7] {
                let first = Psn::new(Psn::MASK - 1); // wraps inside longer messages
                let segs: Vec<_> = segments(len, mtu, first).collect();
                assert_eq!(segs.len() as u32, packet_count(len, mtu));
                let mut offset = 0;
                for (i, s) in segs.iter().enumerate() {
                    assert_eq!(s.psn, first + i as u32);
                    assert_eq!(s.offset, offset);
                    assert!(s.len <= m);
                    if i + 1 < segs.len() {
                        assert_eq!(s.len, m, "only the last packet may be short");
                    }
                    assert_eq!(s.ack_req, i + 1 == segs.len());
                    assert_eq!(s.position.carries_reth(), i == 0);
                    offset += s.len;
                }
                assert_eq!(offset, len, "{len} bytes at {m}");
            }
        }
    }

    #[test]
    fn opcodes_follow_the_position() {
        let ops: Vec<u8> = segments(3000, PathMtu::Mtu1024, Psn::new(0)).map(|s| s.position.opcode()).collect();
        assert_eq!(ops, [opcode::RC_WRITE_FIRST, opcode::RC_WRITE_MIDDLE, opcode::RC_WRITE_LAST]);
        assert_eq!(segment(5, PathMtu::Mtu256, Psn::new(0), 0).position.opcode(), opcode::RC_WRITE_ONLY);
    }

    #[test]
    #[should_panic(expected = "packet 3 of a 3-packet message")]
    fn segment_past_the_end_panics() {
        segment(3000, PathMtu::Mtu1024, Psn::new(0), 3);
    }

    #[test]
    fn path_mtu_for_a_link() {
        assert_eq!(PathMtu::from_bytes(2048), Some(PathMtu::Mtu2048));
        assert_eq!(PathMtu::from_bytes(1500), None);
        assert_eq!(PathMtu::largest_within(1500, 20), Some(PathMtu::Mtu1024));
        assert_eq!(PathMtu::largest_within(9000, 20), Some(PathMtu::Mtu4096));
        assert_eq!(PathMtu::largest_within(3506, 20), Some(PathMtu::Mtu2048));
        assert_eq!(PathMtu::largest_within(4156, 20), Some(PathMtu::Mtu4096));
        assert_eq!(PathMtu::largest_within(4155, 20), Some(PathMtu::Mtu2048));
        assert_eq!(PathMtu::largest_within(300, 40), None);
    }
}
