//! The writable mapping of the active segment: the journal's only `unsafe`. (The other four
//! files that hold some are in src/tree: process, descriptor and signal calls that nix and
//! rustix do not wrap; tests/it/tidy.rs lists all five.)
//!
//! Contract (who keeps each part):
//! - A segment file is preallocated to its full length by writing zeroes and syncing before it is
//!   given its final name (`storage.rs`, `FileBackend::create_segment`), and nothing in procjournal ever calls `set_len` or
//!   truncates a named segment. Stores into the mapping therefore never touch a hole (no ENOSPC as
//!   SIGBUS) and never land past end of file.
//! - [`MappedSegment::open`] checks that the file is exactly `segment_bytes` long before mapping it.
//! - The root's `LOCK` (see `root.rs`) is held exclusively by the one writer process for as long as
//!   any mapping exists, so no other procjournal process writes or resizes the file. Read-only tools
//!   read with `pread`, never through a mapping, and never write.
//! - Programs outside procjournal that shrink or rewrite a segment while a writer runs break the
//!   contract; as ripgrep says of its own mmap use, this reasoning should be treated as suspect
//!   against an adversarial local user, which is why the root belongs to one user.
//!
//! Durability does not come from the mapping: `fdatasync` on the file descriptor writes back pages
//! dirtied through the shared mapping (Linux tracks them in the page cache), and a failed flush
//! poisons the journal (see `mod.rs`).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::sync::Arc;

use memmap2::MmapMut;

#[derive(Debug)]
pub(crate) struct MappedSegment {
    file: Arc<File>,
    map: MmapMut,
    /// Store records into the mapping (true) or `pwrite` them through the descriptor (false);
    /// both land in the same page cache, so readers see the same bytes either way.
    through_map: bool,
}

impl MappedSegment {
    /// Maps `file`, which must be a complete segment of exactly `segment_bytes` bytes.
    pub(crate) fn open(file: File, segment_bytes: usize, through_map: bool) -> io::Result<Self> {
        let len = file.metadata()?.len();
        if len != segment_bytes as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("segment file is {len} bytes, its header says {segment_bytes}"),
            ));
        }
        // SAFETY: the file is a named segment, preallocated to exactly `segment_bytes` (checked just
        // above) and never truncated by procjournal; this process holds the root's exclusive LOCK
        // for the life of the mapping, so no other procjournal process writes or resizes it. See the
        // module documentation for the full contract and its one hole (foreign programs).
        let map = unsafe { MmapMut::map_mut(&file)? };
        Ok(MappedSegment {
            file: Arc::new(file),
            map,
            through_map,
        })
    }

    /// Copies `bytes` into the mapping at `offset`. Bounds are checked by the caller's framing
    /// logic already; checking again here keeps a framing bug from becoming a panic in a store.
    pub(crate) fn write_at(&mut self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        let end = offset
            .checked_add(bytes.len())
            .filter(|&end| end <= self.map.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "write past segment end"))?;
        if self.through_map {
            self.map[offset..end].copy_from_slice(bytes);
            Ok(())
        } else {
            use std::os::unix::fs::FileExt;
            self.file.write_all_at(bytes, offset as u64)
        }
    }

    pub(crate) fn file(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }
}
