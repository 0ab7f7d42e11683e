//! The atomic operations on map values that several CPUs change: a queue's tail (the congestion
//! model) and a lossy port's draw counter. In BPF they are the kernel's atomic instructions; in
//! the host build (clippy, unit tests) `AtomicU64`, so the tests run the same contract.
#[cfg(target_arch = "bpf")]
use core::intrinsics::{AtomicOrdering, atomic_cxchg, atomic_xadd};
#[cfg(target_arch = "bpf")]
use core::ptr::read_volatile;
#[cfg(not(target_arch = "bpf"))]
use core::sync::atomic::{AtomicU64, Ordering};

/// Atomic compare-and-swap of `*ptr` from `old` to `new` (SeqCst): the value seen, and whether
/// it was `old` (so the swap happened).
///
/// # Safety
/// `ptr` must be valid and 8-byte aligned for the call, and every concurrent access to it must
/// be atomic (this, [`fetch_add`]) or a [`load_shared`]. Every caller passes a `u64` field of
/// a looked-up map value (`#[repr(C)]`, kernel-allocated, 8-aligned).
#[cfg(target_arch = "bpf")]
#[inline(always)]
pub(crate) unsafe fn cas(ptr: *mut u64, old: u64, new: u64) -> (u64, bool) {
    // SAFETY: the caller's promise (above); BPF_CMPXCHG.
    unsafe { atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(ptr, old, new) }
}

/// The host build (clippy, unit tests): the same operation through `AtomicU64`.
///
/// # Safety
/// As for the bpf `cas`.
#[cfg(not(target_arch = "bpf"))]
#[inline(always)]
pub(crate) unsafe fn cas(ptr: *mut u64, old: u64, new: u64) -> (u64, bool) {
    // SAFETY: the caller's promise: valid, 8-byte aligned (the alignment `AtomicU64` needs),
    // and accessed concurrently only atomically.
    let atomic = unsafe { AtomicU64::from_ptr(ptr) };
    match atomic.compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(seen) => (seen, true),
        Err(seen) => (seen, false),
    }
}

/// Atomic add whose result is not used: BPF CPU v1 encodes only that form (XADD).
///
/// # Safety
/// As for [`cas`].
#[cfg(target_arch = "bpf")]
#[inline(always)]
pub(crate) unsafe fn fetch_add(ptr: *mut u64, v: u64) {
    // SAFETY: the caller's promise, as for `cas`.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::SeqCst }>(ptr, v) };
}

/// The host build: the same wrapping add through `AtomicU64`.
///
/// # Safety
/// As for [`cas`].
#[cfg(not(target_arch = "bpf"))]
#[inline(always)]
pub(crate) unsafe fn fetch_add(ptr: *mut u64, v: u64) {
    // SAFETY: the caller's promise, as for `cas`.
    let atomic = unsafe { AtomicU64::from_ptr(ptr) };
    atomic.fetch_add(v, Ordering::SeqCst);
}

/// An untorn load of a u64 that other CPUs change with [`cas`] or [`fetch_add`]: one aligned
/// load in BPF (READ_ONCE), an atomic load in the host build, where a volatile read racing
/// atomic writes would be a data race.
///
/// # Safety
/// As for [`cas`].
#[cfg(target_arch = "bpf")]
#[inline(always)]
pub(crate) unsafe fn load_shared(ptr: *const u64) -> u64 {
    // SAFETY: the caller's promise: valid and aligned, so one untorn load.
    unsafe { read_volatile(ptr) }
}

/// The host build: an atomic load.
///
/// # Safety
/// As for [`cas`].
#[cfg(not(target_arch = "bpf"))]
#[inline(always)]
pub(crate) unsafe fn load_shared(ptr: *const u64) -> u64 {
    // SAFETY: the caller's promise, as for `cas`.
    unsafe { AtomicU64::from_ptr(ptr.cast_mut()) }.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use core::sync::atomic::{AtomicU64, Ordering};

    use super::{cas, fetch_add, load_shared};

    // The operations on an `AtomicU64`: valid, 8-byte aligned, and accessed only atomically.

    fn cas_on(v: &AtomicU64, old: u64, new: u64) -> (u64, bool) {
        // SAFETY: `v` is a live AtomicU64 (above).
        unsafe { cas(v.as_ptr(), old, new) }
    }

    fn add_on(v: &AtomicU64, d: u64) {
        // SAFETY: `v` is a live AtomicU64 (above).
        unsafe { fetch_add(v.as_ptr(), d) }
    }

    #[test]
    fn cas_swaps_only_from_the_expected_value() {
        let v = AtomicU64::new(7);
        assert_eq!(cas_on(&v, 7, 9), (7, true));
        assert_eq!(v.load(Ordering::SeqCst), 9);
        // A stale expectation: nothing written, and the value seen is handed back.
        assert_eq!(cas_on(&v, 7, 11), (9, false));
        assert_eq!(v.load(Ordering::SeqCst), 9);
    }

    #[test]
    fn fetch_add_wraps_like_the_bpf_xadd() {
        let v = AtomicU64::new(u64::MAX - 1);
        add_on(&v, 3);
        assert_eq!(v.load(Ordering::SeqCst), 1);
        // A pause shift is a two's-complement delta: adding it moves the tail back.
        add_on(&v, 1u64.wrapping_neg());
        assert_eq!(v.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn load_shared_reads_what_was_stored() {
        let v = AtomicU64::new(42);
        // SAFETY: `v` is a live AtomicU64.
        assert_eq!(unsafe { load_shared(v.as_ptr()) }, 42);
        v.store(7, Ordering::SeqCst);
        // SAFETY: as above.
        assert_eq!(unsafe { load_shared(v.as_ptr()) }, 7);
    }
}
