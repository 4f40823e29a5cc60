//! The seam between the journal and the file system: creating, mapping, writing and flushing
//! segment files.
//!
//! The journal only talks to [`Backend`] and [`SegmentStore`], so the same code runs against the
//! real files ([`FileBackend`]) and against a fault-injecting wrapper in tests, which fails the Nth
//! write or flush with EIO or ENOSPC, or lands only part of a write.
//!
//! Invariants: a segment is visible under its final name only after its zeroes and header are
//! durable and its directory entry is synced ([`FileBackend::create_segment`]); no method ever
//! shrinks a file; a spare whose preparation or commit fails before its rename is removed at once
//! (best effort), so a full disk gets its space back without waiting for the next writable open.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::mmap::MappedSegment;
use crate::root::dir::{Access, Dir};

/// A flush of one segment's written bytes to stable storage.
pub(crate) trait Syncer: Send + Sync + std::fmt::Debug {
    fn sync(&self) -> io::Result<()>;
    /// Writes a commit slot at `offset` of the segment (with `pwrite`, whatever way records are
    /// stored: both land in the same page cache). The journal writes one only under its commit
    /// lock, right before a [`Syncer::sync`].
    fn write_slot(&self, offset: usize, bytes: &[u8]) -> io::Result<()>;
}

/// One segment opened for appending.
pub(crate) trait SegmentStore: Send + std::fmt::Debug {
    fn write_at(&mut self, offset: usize, bytes: &[u8]) -> io::Result<()>;
    fn syncer(&self) -> Arc<dyn Syncer>;
}

pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    /// Creates `dir/spare_name` holding `segment_bytes` of zeroes, durably, under a name recovery
    /// never takes for a segment. Slow (it writes the whole file): the writer runs it ahead of
    /// time on a background thread.
    fn prepare_spare(&self, dir: &Dir, spare_name: &str, segment_bytes: usize) -> io::Result<()>;
    /// Turns a prepared spare into the segment `dir/name`: writes `header`, flushes it, renames,
    /// and syncs the directory, so a segment is never visible without its header.
    fn commit_spare(
        &self,
        dir: &Dir,
        spare_name: &str,
        name: &str,
        header: &[u8],
    ) -> io::Result<()>;
    /// Creates `dir/name` holding `header` followed by zeroes up to `segment_bytes`, durably.
    fn create_segment(
        &self,
        dir: &Dir,
        name: &str,
        header: &[u8],
        segment_bytes: usize,
    ) -> io::Result<()> {
        let spare = format!("{name}.tmp");
        self.prepare_spare(dir, &spare, segment_bytes)?;
        self.commit_spare(dir, &spare, name, header)
    }
    /// Opens an existing complete segment for appending. `through_map` picks how records are
    /// stored: into the shared mapping (no syscall per append; for the `Os` policy), or with
    /// `pwrite` (measured here to make the following fdatasync cheaper than stores into a
    /// mapping do; for the policies that flush every append).
    fn open_segment(
        &self,
        dir: &Dir,
        name: &str,
        segment_bytes: usize,
        through_map: bool,
    ) -> io::Result<Box<dyn SegmentStore>>;
    /// Appends zeroes to a segment file shorter than `segment_bytes` (never shrinks it).
    fn extend_segment(&self, dir: &Dir, name: &str, segment_bytes: usize) -> io::Result<()>;
    /// Flushes a segment file that another process may have left dirty in the page cache.
    fn sync_segment(&self, dir: &Dir, name: &str) -> io::Result<()>;
}

#[derive(Debug, Default)]
pub(crate) struct FileBackend;

#[derive(Debug)]
struct FileSyncer(Arc<File>);

impl Syncer for FileSyncer {
    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn write_slot(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all_at(bytes, offset as u64)
    }
}

impl SegmentStore for MappedSegment {
    fn write_at(&mut self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        MappedSegment::write_at(self, offset, bytes)
    }
    fn syncer(&self) -> Arc<dyn Syncer> {
        Arc::new(FileSyncer(self.file()))
    }
}

/// Zeroes are written in pieces of this size while preallocating.
const ZERO_CHUNK_BYTES: usize = 1024 * 1024;

/// Removes a spare that failed part-way (ENOSPC while writing its zeroes, say) at once, so
/// that the space it took is given back while the writer still runs, not at the next writable
/// open. Best effort: the file never held a record, and a writable open removes what is left.
fn remove_partial(dir: &Dir, name: &str) {
    let _ = dir.remove(name);
}

fn write_zeroes(file: &mut File, from: u64, to: u64) -> io::Result<()> {
    let zeroes = vec![0u8; ZERO_CHUNK_BYTES];
    let mut at = from;
    while at < to {
        let n = usize::try_from(to - at).map_or(ZERO_CHUNK_BYTES, |n| n.min(ZERO_CHUNK_BYTES));
        file.write_all_at(&zeroes[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

impl Backend for FileBackend {
    fn prepare_spare(&self, dir: &Dir, spare_name: &str, segment_bytes: usize) -> io::Result<()> {
        // A leftover from an earlier writer never held a record.
        match dir.remove(spare_name) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut file = dir.file(spare_name, Access::CreateNew)?;
        // Real zeroes, not set_len or fallocate: the research measured fdatasync after stores into
        // unwritten extents at 1.5-2.2x the cost, and a hole can turn a store into SIGBUS on ENOSPC.
        write_zeroes(&mut file, 0, segment_bytes as u64)
            .and_then(|()| file.flush())
            .and_then(|()| file.sync_all())
            .inspect_err(|_| {
                drop(file);
                remove_partial(dir, spare_name);
            })
    }

    fn commit_spare(
        &self,
        dir: &Dir,
        spare_name: &str,
        name: &str,
        header: &[u8],
    ) -> io::Result<()> {
        let headed = dir
            .file(spare_name, Access::ReadWrite)
            .and_then(|file| {
                file.write_all_at(header, 0)?;
                file.sync_data()
            })
            .and_then(|()| dir.rename(spare_name, name));
        // Until the rename the file is still a spare, which never held a record.
        headed.inspect_err(|_| remove_partial(dir, spare_name))?;
        dir.sync()
    }

    fn open_segment(
        &self,
        dir: &Dir,
        name: &str,
        segment_bytes: usize,
        through_map: bool,
    ) -> io::Result<Box<dyn SegmentStore>> {
        let file = dir.file(name, Access::ReadWrite)?;
        Ok(Box::new(MappedSegment::open(
            file,
            segment_bytes,
            through_map,
        )?))
    }

    fn sync_segment(&self, dir: &Dir, name: &str) -> io::Result<()> {
        dir.file(name, Access::Read)?.sync_data()
    }

    fn extend_segment(&self, dir: &Dir, name: &str, segment_bytes: usize) -> io::Result<()> {
        let mut file = dir.file(name, Access::ReadWrite)?;
        let len = file.metadata()?.len();
        if len < segment_bytes as u64 {
            write_zeroes(&mut file, len, segment_bytes as u64)?;
            file.sync_all()?;
        }
        Ok(())
    }
}
