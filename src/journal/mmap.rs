//! The journal's mappings, its only `unsafe`: the writable mapping of the active segment, and
//! the read-only mapping ([`Prefix`]) through which a writer's open scans a segment's records
//! and a restore reads a snapshot file.
//! (The other files that hold some are listed, with why, in tests/it/tidy.rs.)
//!
//! Contract (who keeps each part):
//! - A segment file is preallocated to its full length by writing zeroes and syncing before it is
//!   given its final name (`storage.rs`, `FileBackend::create_segment`), and nothing in procjournal ever calls `set_len` or
//!   truncates a named segment. Stores into the mapping therefore never touch a hole (no ENOSPC as
//!   SIGBUS) and never land past end of file.
//! - [`MappedSegment::open`] checks that the file is exactly `segment_bytes` long before mapping it.
//! - The root's `LOCK` (see `root.rs`) is held exclusively by the one writer process for as long as
//!   any mapping exists, so no other procjournal process writes or resizes the file. Read-only tools
//!   read segments with `pread`, never through a mapping, and never write.
//! - A [`Prefix`] of a segment is made only by the writer's open (`recovery::Reading::Mapped`),
//!   under that lock and before the journal stores anything, and only over bytes the file has
//!   ([`Prefix::open`] checks its length): no store changes the bytes a scan checks while it
//!   holds them, and no read of the mapping lands past the end of the file. It is private and
//!   read-only, and dropped when the segment's scan ends.
//! - A [`Prefix`]'s pages are read in before it is handed out, so that a page the disk cannot
//!   give is an error the caller reports (it reads the file instead, which fails as a read
//!   does), not a `SIGBUS`; a page the kernel drops and must read again while it is read could
//!   still fault that way, the same exposure the writable mapping has.
//! - A snapshot file is mapped as a [`Prefix`] by any reader, lock or not (`lifecycle::snapdir`):
//!   procjournal writes a snapshot under a temporary name and renames it whole, and never writes
//!   into or truncates a published one (compaction unlinks it, which leaves a mapping's pages), so
//!   its bytes do not change while they are mapped. The store restored from it keeps the mapping
//!   for its life, its settled manifests' frames read in place (`crate::spill::Backing`): a
//!   page dropped and read again later could fault as above, the exposure a spill file's
//!   mapped chunks have too.
//! - Programs outside procjournal that shrink or rewrite a segment while a writer runs, or a
//!   snapshot while it is read, break the contract; as ripgrep says of its own mmap use, this
//!   reasoning should be treated as suspect against an adversarial local user, which is why the
//!   root belongs to one user.
//!
//! Durability does not come from the mapping: `fdatasync` on the file descriptor writes back pages
//! dirtied through the shared mapping (Linux tracks them in the page cache), and a failed flush
//! poisons the journal (see `mod.rs`).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::sync::Arc;

use memmap2::{Advice, Mmap, MmapMut, MmapOptions};

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

#[cfg(test)]
thread_local! {
    /// How many prefixes this thread mapped: tests see that a scan took the mapped path.
    pub(crate) static PREFIXES_MAPPED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The first bytes of a file nothing stores into while they are mapped (a segment under a
/// writer's open, a published snapshot: module doc), mapped read-only: what is decoded in place
/// of a copy (no buffer to fault in, no copy of what the page cache holds already).
#[derive(Debug)]
pub(crate) struct Prefix {
    map: Mmap,
}

impl Prefix {
    /// Maps the first `len` bytes of `file`, which must have at least that many (and `len` at
    /// least one), and reads them in at once (`MADV_POPULATE_READ`): the caller reads every one
    /// of them, and a page the disk cannot give is this error (the caller then reads the file
    /// and reports what the read says), where a fault on it would be a `SIGBUS`.
    pub(crate) fn open(file: &File, len: usize) -> io::Result<Prefix> {
        let file_len = file.metadata()?.len();
        if len == 0 || len as u64 > file_len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot map {len} bytes of a file of {file_len}"),
            ));
        }
        // SAFETY: `len` bytes exist in the file (checked just above), and nothing in procjournal
        // shrinks a named segment or a published snapshot. The caller is the writer's open,
        // which holds the root's exclusive LOCK, so no procjournal process stores into or
        // resizes the segment while the mapping lives; or a restore of a snapshot, which no
        // process ever writes in place. The mapping is private and read-only. The module
        // documentation gives the full contract and its one hole (foreign programs).
        let map = unsafe { MmapOptions::new().len(len).map(file)? };
        map.advise(Advice::PopulateRead)?;
        #[cfg(test)]
        PREFIXES_MAPPED.with(|n| n.set(n.get() + 1));
        Ok(Prefix { map })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }
}

/// A snapshot's mapping backs the frames of the store restored from it (`crate::spill`), for as
/// long as that store lives.
impl crate::spill::Backing for Prefix {
    fn bytes(&self) -> &[u8] {
        &self.map
    }

    fn release_resident(&self) {
        // SAFETY: the mapping is a read-only shared mapping of a file. `MADV_DONTNEED` there
        // drops only this process's page-table entries; the next access faults the same bytes
        // in from the page cache (or the file), so every slice borrowed from it reads what it
        // read before. No private or anonymous memory is discarded.
        let _ = unsafe {
            self.map
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prefix maps the file's first bytes, all of them readable; one longer than the file, or
    /// empty, is refused before anything is mapped.
    #[test]
    fn a_prefix_maps_only_bytes_the_file_has() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment");
        let bytes: Vec<u8> = (0..3 * 4096 + 17).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        for len in [1, 4096, 4097, bytes.len()] {
            let prefix = Prefix::open(&file, len).unwrap();
            assert_eq!(prefix.bytes(), &bytes[..len]);
        }
        for len in [0, bytes.len() + 1, 4 * 4096] {
            let refused = Prefix::open(&file, len).unwrap_err();
            assert_eq!(refused.kind(), io::ErrorKind::InvalidInput, "{len}");
        }
    }
}
