//! The spool: durable, bounded retention of one process's output under `<root>/spool/<handle>/`.
//!
//! stdout and stderr are appended in one combined order. A cursor is a raw byte offset in that
//! combined stream; every chunk on disk remembers its stream and the cursor of its first byte.
//! Segments are files named by their first cursor (`{cursor:020}.seg`); when the retained bytes
//! exceed the retention bound, whole oldest segments are deleted (or, for a supervised spool,
//! kept as spares to write later segments into: `spare.rs`) and `retained_from` moves forward.
//!
//! Cursor fields (invariants, checked by `debug_assert!` and by the proptest model):
//!
//! ```text
//!   deleted          retained window                          next append
//! |.........|==============================================|------------->
//! 0   retained_from                                   total_bytes
//!           ^ first cursor of the oldest segment        ^ end cursor of the active segment
//! ```
//!
//! - `retained_from <= total_bytes`; neither ever moves backwards.
//! - `retained_from` is the first cursor of the oldest segment (or `total_bytes` when none).
//! - Segments are contiguous: each one's first cursor is the previous one's end cursor.
//! - `durable_total <= total_bytes` names the bytes covered by the last `checkpoint` (fdatasync).
//!
//! Reads (`reader.rs`) never scan from the start: the segment's index (`index.rs`) finds the
//! chunks that hold the bytes wanted, so a read's cost does not depend on how much the spool
//! holds. Appends are split into chunks of [`CHUNK_SPLIT_BYTES`], which bounds the bytes loaded
//! for a small read anywhere.
//!
//! Appends (`writer.rs`) are staged in a write buffer and reach the file in large aligned writes,
//! and all of them at [`Spool::flush`] and at every checkpoint. The supervisor flushes after
//! every pass of its drain, so the issue's flush policy ("a reader in another process sees the
//! bytes within one drain interval") holds.
//!
//! Recovery (`recovery.rs`) cuts only a torn tail: damaged bytes with a valid chunk after them
//! are kept and reported as [`SpoolDamage`](recovery::SpoolDamage), and the chunks after them stay readable.

pub mod buffer;
pub mod format;
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;
mod index;
pub(crate) mod io;
pub mod loss;
mod output;
mod reader;
mod recovery;
pub mod remove;
pub mod render;
mod spare;
mod sync;
mod writer;

pub use loss::{DamageKind, Gap, LossReason, SkipKind, Skipped};
pub use output::Output;
#[cfg(any(test, feature = "test-support"))]
pub use recovery::SpoolDamage;
pub use recovery::SpoolRecovery;
pub use sync::{SyncDone, SyncPlan};

#[cfg(test)]
mod powerloss;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_loss;
#[cfg(test)]
mod tests_powerloss;
#[cfg(test)]
mod tests_spare;

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::aligned::StageBuf;
use crate::root::dir::Dir;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Serialize;

use format::{
    CHUNK_PAYLOAD_BYTES_MAX, SPOOL_HEADER_BYTES, SpoolHeader, Stream, chunk_bytes,
    chunk_padding_bytes,
};
#[cfg(any(test, feature = "test-support"))]
pub use index::INDEX_STRIDE_BYTES;
use index::SegmentIndex;
use writer::Failing;

/// Appends are split into chunks of at most this many payload bytes. A read must load and check
/// every chunk it returns a byte of, whole (the checksum covers the whole payload), so this bounds
/// what a small read costs: a 4 KiB read loads two chunks at most. One page: smaller chunks would
/// cost appends more checksum calls and headers than they save reads.
pub const CHUNK_SPLIT_BYTES: usize = 4 * 1024;

const _: () = assert!(CHUNK_SPLIT_BYTES <= CHUNK_PAYLOAD_BYTES_MAX);
// Whole split chunks need no padding, so a large append is header, payload, header, payload...
const _: () = assert!(chunk_padding_bytes(CHUNK_SPLIT_BYTES) == 0);

/// Sizes chosen when a spool is opened for writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolOptions {
    /// A segment file is closed and a new one started once it holds this many bytes.
    pub segment_bytes: u64,
    /// Whole oldest segments are deleted while more than this many bytes are retained. The
    /// active segment is never deleted, so at least one segment's bytes stay readable.
    pub retention_bytes: u64,
}

impl Default for SpoolOptions {
    fn default() -> Self {
        SpoolOptions {
            segment_bytes: 8 * 1024 * 1024,
            retention_bytes: 64 * 1024 * 1024,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpoolError {
    /// I/O failed; the message names the operation, never a path (paths must not reach clients).
    #[error("spool {op}: {cause}")]
    Io {
        op: &'static str,
        // In the message, not exposed again as the error's source (chains would repeat it).
        cause: std::io::Error,
    },
    #[error("cursor {cursor} is beyond the end of the output ({total_bytes} bytes)")]
    CursorAhead { cursor: u64, total_bytes: u64 },
    #[error("spool data is damaged near cursor {cursor}: {reason}")]
    Corrupt { cursor: u64, reason: String },
    #[error("invalid spool options: {0}")]
    InvalidOptions(String),
    #[error("the spool was opened read-only")]
    ReadOnly,
}

fn io(op: &'static str) -> impl FnOnce(std::io::Error) -> SpoolError {
    move |cause| SpoolError::Io { op, cause }
}

/// A run of bytes from one stream inside a [`SpoolRead`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Span {
    pub stream: Stream,
    /// Cursor of the span's first byte.
    pub cursor: u64,
    pub len: u32,
}

/// The answer to a read: bytes in combined order with their stream boundaries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SpoolRead {
    #[serde(skip)]
    pub bytes: Vec<u8>,
    pub spans: Vec<Span>,
    /// Where the next read should start: the cursor after the last byte returned.
    pub next_cursor: u64,
    pub retained_from: u64,
    pub total_bytes: u64,
    /// The read stepped over a gap (lost output: retention, a full disk, a failed write or
    /// sync) before its bytes: `skipped` says which cursors and why.
    pub gap: bool,
    /// Cursors the read stepped over before its bytes (a gap or damage), with the reason. A
    /// read reports at most one, at its start: it stops before the next, and the next read
    /// begins with it.
    pub skipped: Option<Skipped>,
}

impl SpoolRead {
    fn push(&mut self, stream: Stream, cursor: u64, bytes: &[u8]) {
        match self.spans.last_mut() {
            Some(last) if last.stream == stream && last.cursor + u64::from(last.len) == cursor => {
                last.len += bytes.len() as u32;
            }
            _ => self.spans.push(Span {
                stream,
                cursor,
                len: bytes.len() as u32,
            }),
        }
        self.bytes.extend_from_slice(bytes);
        self.next_cursor = cursor + bytes.len() as u64;
    }
}

#[derive(Debug)]
struct Segment {
    path: PathBuf,
    header: SpoolHeader,
    /// Held for the newest segment only (the one appends go to, or a reader's last): a sealed
    /// segment is opened for each read or sync that needs it ([`Spool::segment_file`]), so a
    /// live process costs one spool file descriptor however much output it retains.
    /// Shared with a sync in flight, which then needs no descriptor of its own.
    file: Option<Arc<File>>,
    /// Bytes of the file that hold whole chunks.
    valid_len: u64,
    /// Where this segment's cursors end: exact for the last segment (scanned) and for segments
    /// this handle wrote; for other sealed segments found at open, where the next one begins,
    /// until its index is built and says where its readable chunks really end
    /// ([`SegmentIndex::data_end`]).
    end_cursor: u64,
    /// Built at the first read of a sealed segment; kept current for the active one.
    index: OnceLock<SegmentIndex>,
}

/// One process's output spool. Appends take `&mut self`; reads take `&self`.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    /// The directory, held by descriptor once it exists (opened, or created by the first
    /// segment): segment files are named relative to it, never by path again.
    held: Option<Arc<Dir>>,
    spool_id: [u8; 16],
    options: SpoolOptions,
    writable: bool,
    segments: VecDeque<Segment>,
    total_bytes: u64,
    retained_from: u64,
    durable_total: u64,
    /// The segment files named in the directory when it was last synced (see `sync.rs`).
    synced_layout: Option<sync::Layout>,
    dirty: bool,
    /// The spool directory was created by this handle and its entry in `spool/` is not synced.
    parent_unsynced: bool,
    /// Whole chunks appended but not yet written: the active segment's bytes from file offset
    /// `pending_at` to its `valid_len`, on a cache line (`aligned` says why).
    pending: StageBuf,
    pending_at: u64,
    /// File offset and cursor where the last chunk wholly in the file ends: where a failed
    /// write cuts the file back to, and where its gap starts. (Aligned writes may leave a
    /// chunk's head in the file and its tail staged.)
    written: (u64, u64),
    /// The first chunk boundary at or after `pending_at`: its header is still staged.
    boundary: (u64, u64),
    /// Creates, writes and syncs go through this seam (tests fail them on purpose).
    io: Arc<dyn io::SpoolIo>,
    /// Output not kept (see [`loss`]): in cursor order, disjoint. While `failing`, the last one
    /// is open: its `to` follows `total_bytes`.
    gaps: Vec<Gap>,
    /// The owner has recorded (journaled) the gaps below this cursor. A gap still growing is
    /// recorded in pieces, each up to the bounds of a checkpoint (the journal joins them).
    recorded: u64,
    /// Writing failed and has not resumed; appends count their bytes into the open gap.
    failing: Option<Failing>,
    /// Wait at least this long between attempts to resume writing after a failure.
    retry_interval: Duration,
    /// Bumped at every loss, so that a buffer in front of the spool knows to start again.
    losses: u64,
    /// Retention leaves the files it drops to the next sync plan (`defer_removals`).
    defer_removals: bool,
    /// Segment files dropped from the retained window, not yet removed, oldest first: the next
    /// sync plan removes them (or the drop of this handle), in this order. Never read again:
    /// in-process reads go by `segments`, and a reader in another process, or the next open,
    /// that still finds some only sees older output than the window promises, never less.
    doomed: Vec<String>,
    /// Spares ready to hold new segments (`spare.rs`), by name.
    spares: Vec<String>,
    /// The length of the active segment's file when it was a recycled spare: its old bytes lie
    /// past the chunks up to there (0 for a created file).
    stale_to: u64,
    /// No more appends will come ([`Spool::finish`]).
    finished: bool,
    /// A segment was started since the last [`Spool::retire_idle_spares`].
    turned: bool,
    /// A terminal record fixed where this reader's window starts ([`Spool::hold_retained_from`]).
    window_final: bool,
}

fn segment_name(first_cursor: u64) -> String {
    format!("{first_cursor:020}.seg")
}

/// A segment's file for one read or sync: the descriptor the segment holds, or one opened for
/// the occasion and closed with this.
enum SegmentFile<'a> {
    Held(&'a File),
    Opened(File),
}

impl std::ops::Deref for SegmentFile<'_> {
    type Target = File;

    fn deref(&self) -> &File {
        match self {
            SegmentFile::Held(file) => file,
            SegmentFile::Opened(file) => file,
        }
    }
}

impl Spool {
    /// Opens (creating if needed) the spool in `dir` for appending, recovering the active
    /// segment's tail. `spool_id` is the owning process's handle.
    ///
    /// A directory that does not exist yet is created with the first segment, by the first
    /// append: a failure to create it is then a failed write like any other (its bytes become a
    /// gap, and writing is tried again), not an error that loses the spool.
    pub fn open_writer(
        dir: &Path,
        spool_id: [u8; 16],
        options: SpoolOptions,
    ) -> Result<(Spool, SpoolRecovery), SpoolError> {
        Self::open_writer_with(dir, spool_id, options, Arc::new(io::FileIo))
    }

    /// [`Spool::open_writer`] over another file-system seam (tests inject faults with it).
    pub(crate) fn open_writer_with(
        dir: &Path,
        spool_id: [u8; 16],
        options: SpoolOptions,
        io: Arc<dyn io::SpoolIo>,
    ) -> Result<(Spool, SpoolRecovery), SpoolError> {
        if options.segment_bytes < (SPOOL_HEADER_BYTES + chunk_bytes(1)) as u64
            || options.retention_bytes == 0
        {
            return Err(SpoolError::InvalidOptions(format!("{options:?}")));
        }
        let (mut spool, recovery) = Self::open(dir, Some(spool_id), options, true)?;
        spool.io = io;
        Ok((spool, recovery))
    }

    /// Opens an existing spool for reading only; nothing is changed on disk. A directory that
    /// does not exist is an empty spool: a process that never wrote has none (spools are
    /// created at the first output byte). Whether that is damage is for the caller to judge
    /// against the journal's durable bounds (`spool verify` does).
    pub fn open_reader(dir: &Path) -> Result<(Spool, SpoolRecovery), SpoolError> {
        Self::open(dir, None, SpoolOptions::default(), false)
    }

    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    pub fn retained_from(&self) -> u64 {
        self.retained_from
    }

    /// Bytes the window keeps: older whole segments are dropped past them.
    pub fn retention_bytes(&self) -> u64 {
        self.options.retention_bytes
    }

    /// Bytes covered by the last [`Spool::checkpoint`].
    #[cfg(any(test, feature = "test-support"))]
    pub fn durable_total(&self) -> u64 {
        self.durable_total
    }
}

impl Spool {
    /// The file of `segment`: its own descriptor, or the file its name now holds in the
    /// directory this handle holds (never a path resolved again), opened without following a
    /// symbolic link and accepted only if its header is still the one the open checked: a file
    /// put in its place is damage, not output.
    fn segment_file<'a>(&self, segment: &'a Segment) -> std::io::Result<SegmentFile<'a>> {
        match &segment.file {
            Some(file) => Ok(SegmentFile::Held(file)),
            None => self.open_sealed(segment).map(SegmentFile::Opened),
        }
    }

    /// [`Spool::segment_file`] of a segment that holds no descriptor.
    fn open_sealed(&self, segment: &Segment) -> std::io::Result<File> {
        let dir = self.held.as_deref().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "the spool directory is gone")
        })?;
        open_sealed_in(
            dir,
            crate::root::dir::file_name(&segment.path),
            &segment.header,
        )
    }
}

/// Opens sealed segment `name` in `dir`, for one read or sync, accepted only while its header is
/// still `header`, the one the spool's open checked: a file put in its place is refused, never
/// read or synced as this spool's.
fn open_sealed_in(dir: &Dir, name: &str, header: &SpoolHeader) -> std::io::Result<File> {
    let file = dir.file(name, crate::root::dir::Access::Read)?;
    let mut head = [0u8; SPOOL_HEADER_BYTES];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut head, 0)?;
    if SpoolHeader::decode(&head).ok() != Some(*header) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the segment file was replaced",
        ));
    }
    Ok(file)
}

impl Drop for Spool {
    /// Staged chunks go to the file, as [`Spool::flush`] would; an error here has no one to go
    /// to, so a writer that must know calls `flush` or `checkpoint` first.
    fn drop(&mut self) {
        if self.writable {
            let _ = self.flush();
        }
        if let Some(held) = &self.held {
            self.doomed.append(&mut self.spares);
            sync::remove_doomed(self.io.as_ref(), held, &mut self.doomed);
        }
    }
}
