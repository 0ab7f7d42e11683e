//! Injected link loss (`fabric link degrade --loss`): the decision is
//! `fabric_common::fault::is_lost`; this reads the port's entry and takes its next draw.
use core::ptr::{addr_of, addr_of_mut, read_volatile};

use fabric_common::fault::is_lost;

use crate::{
    atomic::{cas, load_shared},
    maps::PORT_LOSS,
};

/// Compare-and-swap attempts on a lossy port's draw counter. Past them (CPUs colliding on one
/// port), the draw reuses the index last seen: still a draw at the set rate, only no longer the
/// one sequence a single sender would see.
const DRAW_TRIES: usize = 4;

/// Whether the link out of `egress` loses this frame. A port without loss costs one lookup.
#[inline(always)]
pub fn link_loses(egress: u32) -> bool {
    let Some(entry) = PORT_LOSS.get_ptr_mut(egress) else { return false };
    // SAFETY: `entry` came from `get_ptr_mut` for an in-bounds index: an array map value, valid
    // and 8-byte aligned while the program runs. Its fields are accessed only through raw
    // pointers (volatile or atomic), as the controller and other CPUs may write them; these
    // volatile reads are untorn loads of aligned values.
    let (threshold, seed) =
        unsafe { (read_volatile(addr_of!((*entry).threshold)), read_volatile(addr_of!((*entry).seed))) };
    if threshold == 0 {
        return false;
    }
    // SAFETY: as above; only the field's address is computed.
    let drawn = unsafe { addr_of_mut!((*entry).drawn) };
    // SAFETY: as above: a valid, aligned u64 field, which CPUs change only with `cas` (the
    // controller rewrites the whole entry through the bpf syscall).
    let mut index = unsafe { load_shared(drawn) };
    for _ in 0..DRAW_TRIES {
        // SAFETY: as for the load above.
        let (seen, swapped) = unsafe { cas(drawn, index, index.wrapping_add(1)) };
        if swapped {
            break;
        }
        index = seen;
    }
    is_lost(seed, index, threshold)
}
