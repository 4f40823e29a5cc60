//! The process heap, as the allocator keeps it: a leaf that only hands freed memory back.
//!
//! glibc raises its mmap threshold each time it frees a block it had mapped (up to 32 MiB), and
//! from then on serves blocks below the threshold from the heap, whose freed pages it keeps
//! until they are trimmed. A supervisor that builds and frees tens of MB at once (a snapshot of
//! a large root) would then keep them resident for good. [`release_freed_memory`] trims them.
//!
//! A daemon also fixes the threshold ([`keep_large_blocks_mapped`]): an embedder's allocator
//! settings stay its own.
//!
//! Invariant: nothing here reads or writes memory in use, so no invariant of the crate depends on
//! it; with another allocator than glibc's, or off Linux, it does nothing.

/// The size from which the allocator maps each block on its own, returned to the kernel when
/// freed: glibc's default, which it otherwise raises (up to 32 MiB) each time a mapped block is
/// freed.
const MMAP_THRESHOLD_BYTES: i32 = 128 * 1024;

/// Keeps glibc from raising its mmap threshold, for a process that runs for long (the daemon):
/// blocks of 128 KiB and more are then always their own mappings, given back when freed.
/// Without it, a snapshot's buffers (tens of MB, in a worker thread's arena) left their freed
/// pages resident in the arenas, which `malloc_trim` did not give back: a `serve` daemon held
/// 50 MiB more after 40 000 finished `start -- true` than with it (15 against 65 MiB
/// `RssAnon`, of which malloc counted 15 in use either way).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn keep_large_blocks_mapped() {
    // SAFETY: `mallopt` (glibc, which libc exposes only as an unsafe foreign function) sets
    // one of the allocator's parameters under its own lock; setting the mmap threshold changes
    // only where later blocks come from, never a block in use.
    #[allow(unsafe_code)]
    let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) };
    if set != 1 {
        tracing::debug!("glibc refused a fixed mmap threshold");
    }
}

/// Off glibc there is no such threshold to fix.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn keep_large_blocks_mapped() {}

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
