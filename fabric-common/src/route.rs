//! Routing tables: LPM tries (IPv4, IPv6) map a prefix to a [`RouteTarget`]; a target names an
//! [`EcmpGroup`] of up to [`MAX_GROUP_MEMBERS`] members, or the switch itself.

/// Most members one ECMP group can hold.
pub const MAX_GROUP_MEMBERS: usize = 64;
/// Number of groups one switch can hold.
pub const MAX_GROUPS: u32 = 256;
/// Number of LPM entries per address family.
pub const MAX_ROUTES: u32 = 16384;

/// The value of an LPM entry: a group id, or [`ROUTE_LOCAL`].
pub type RouteTarget = u32;
/// The route target meaning "addressed to this switch: give it to the kernel".
pub const ROUTE_LOCAL: RouteTarget = u32::MAX;

/// One next hop: the egress port and the MACs to write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct GroupMember {
    /// Egress port index (DEVMAP slot).
    pub port: u32,
    /// The neighbour's MAC (new destination).
    pub dst_mac: [u8; 6],
    /// The egress port's MAC (new source).
    pub src_mac: [u8; 6],
}

const _: () = assert!(core::mem::size_of::<GroupMember>() == 16);

/// An ECMP group: the first `len` members are live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct EcmpGroup {
    pub len: u32,
    pub _pad: u32,
    pub members: [GroupMember; MAX_GROUP_MEMBERS],
}

const _: () = assert!(core::mem::size_of::<EcmpGroup>() == 8 + 16 * MAX_GROUP_MEMBERS);

impl Default for EcmpGroup {
    fn default() -> Self {
        Self { len: 0, _pad: 0, members: [GroupMember::default(); MAX_GROUP_MEMBERS] }
    }
}

/// Error building a group with more members than a group can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyMembers(pub usize);

impl EcmpGroup {
    pub fn from_members(members: &[GroupMember]) -> Result<Self, TooManyMembers> {
        if members.len() > MAX_GROUP_MEMBERS {
            return Err(TooManyMembers(members.len()));
        }
        let mut g = Self::default();
        g.members[..members.len()].copy_from_slice(members);
        g.len = members.len() as u32;
        Ok(g)
    }

    pub fn live(&self) -> &[GroupMember] {
        &self.members[..(self.len as usize).min(MAX_GROUP_MEMBERS)]
    }
}

/// `v & mask`, with a mask the compiler cannot drop. LLVM proves `select_member(..) < n <= 64`
/// and removes a plain mask, but the verifier cannot follow a multiply-shift and then rejects the
/// indexed access; a volatile read hides the range from LLVM so the mask reaches the verifier.
#[inline(always)]
pub fn verifier_mask(v: u32, mask: u32) -> u32 {
    // SAFETY: reading a local through a valid reference.
    unsafe { core::ptr::read_volatile(&v) & mask }
}
