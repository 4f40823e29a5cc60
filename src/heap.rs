//! The process heap, as the allocator keeps it: a leaf that only hands freed memory back.
//!
//! glibc raises its mmap threshold each time it frees a block it had mapped (up to 32 MiB), and
//! from then on serves blocks below the threshold from the heap, whose freed pages it keeps
//! until they are trimmed. A supervisor that builds and frees tens of MB at once (a snapshot of
//! a large root) would then keep them resident for good. [`release_freed_memory`] trims them.
//!
//! Invariant: nothing here reads or writes memory in use, so no invariant of the crate depends on
//! it; with another allocator than glibc's, or off Linux, it does nothing.

/// Hands the allocator's free pages back to the kernel.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn release_freed_memory() {
    // SAFETY: `malloc_trim` (glibc, which libc exposes only as an unsafe foreign function) takes
    // the allocator's own locks and returns free chunks' pages to the kernel; it touches no
    // allocated block, so no reference or invariant of this program is affected. With another
    // global allocator, glibc's heap holds nothing of ours to trim.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Off glibc there is no such threshold to undo.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn release_freed_memory() {}
