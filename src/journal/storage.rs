//! The seam between the journal and the file system: creating, mapping, writing and flushing
//! segment files.
//!
//! The journal only talks to [`Backend`] and [`SegmentStore`], so the same code runs against the
//! real files ([`FileBackend`]) and against a fault-injecting wrapper in tests, which fails the Nth
//! write or flush with EIO or ENOSPC, or lands only part of a write.
//!
//! Invariants: a segment is visible under its final name only after its zeroes and header are
//! durable and its directory entry is synced ([`FileBackend::create_segment`]); no method ever
//! shrinks a file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::mmap::MappedSegment;

/// A flush of one segment's written bytes to stable storage.
pub(crate) trait Syncer: Send + Sync + std::fmt::Debug {
    fn sync(&self) -> io::Result<()>;
}

/// One segment opened for appending.
pub(crate) trait SegmentStore: Send + std::fmt::Debug {
    fn write_at(&mut self, offset: usize, bytes: &[u8]) -> io::Result<()>;
    fn syncer(&self) -> Arc<dyn Syncer>;
}

pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    /// Creates `dir/name` holding `header` followed by zeroes up to `segment_bytes`, durably.
    fn create_segment(
        &self,
        dir: &Path,
        name: &str,
        header: &[u8],
        segment_bytes: usize,
    ) -> io::Result<()>;
    /// Opens an existing complete segment for appending.
    fn open_segment(&self, path: &Path, segment_bytes: usize) -> io::Result<Box<dyn SegmentStore>>;
    /// Appends zeroes to a segment file shorter than `segment_bytes` (never shrinks it).
    fn extend_segment(&self, path: &Path, segment_bytes: usize) -> io::Result<()>;
    /// Flushes a segment file that another process may have left dirty in the page cache.
    fn sync_segment(&self, path: &Path) -> io::Result<()>;
}

#[derive(Debug, Default)]
pub(crate) struct FileBackend;

#[derive(Debug)]
struct FileSyncer(Arc<File>);

impl Syncer for FileSyncer {
    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
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

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
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
    fn create_segment(
        &self,
        dir: &Path,
        name: &str,
        header: &[u8],
        segment_bytes: usize,
    ) -> io::Result<()> {
        let final_path = dir.join(name);
        let tmp_path = dir.join(format!("{name}.tmp"));
        // A leftover from a crash during an earlier creation never held a record.
        match fs::remove_file(&tmp_path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp_path)?;
        // Real zeroes, not set_len or fallocate: the research measured fdatasync after stores into
        // unwritten extents at 1.5-2.2x the cost, and a hole can turn a store into SIGBUS on ENOSPC.
        write_zeroes(&mut file, 0, segment_bytes as u64)?;
        file.write_all_at(header, 0)?;
        file.flush()?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp_path, &final_path)?;
        sync_dir(dir)
    }

    fn open_segment(&self, path: &Path, segment_bytes: usize) -> io::Result<Box<dyn SegmentStore>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Box::new(MappedSegment::open(file, segment_bytes)?))
    }

    fn sync_segment(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_data()
    }

    fn extend_segment(&self, path: &Path, segment_bytes: usize) -> io::Result<()> {
        let mut file = OpenOptions::new().read(true).write(true).open(path)?;
        let len = file.metadata()?.len();
        if len < segment_bytes as u64 {
            write_zeroes(&mut file, len, segment_bytes as u64)?;
            file.sync_all()?;
        }
        Ok(())
    }
}
