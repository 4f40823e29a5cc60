//! Appending: chunks staged in a write buffer, written in large aligned blocks, and the bytes
//! lost when a write fails.
//!
//! Appends are staged, framed and checksummed, in a write buffer of [`WRITE_BUFFER_BYTES`]: the
//! chunks go to the file in large writes that end on a [`WRITE_ALIGN_BYTES`] boundary when the
//! buffer fills, and all of them at [`Spool::flush`], at every checkpoint (before its
//! `fdatasync`s are planned), before a new segment is started, and when the handle is dropped.
//! Reads through the same handle see staged bytes (they are read from the buffer); readers in
//! other processes, and a crash of this one, see what was flushed.
//!
//! Invariants:
//! - The staged bytes are the active segment's bytes from file offset `pending_at` to its
//!   `valid_len`, whole chunks only; `written` names the end of the last chunk wholly in the file,
//!   and `boundary` the first chunk boundary at or after `pending_at`.
//! - Every appended byte is counted in `total_bytes`, kept or not: a failed write turns the bytes
//!   not yet written into a [`Gap`] and seals the active segment, and nothing more is written to
//!   it; writing resumes only in a new segment.
//! - Retention deletes only whole oldest segments, never the active one.

use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::format::{
    self, CHUNK_HEADER_BYTES, CHUNK_PADDING, SPOOL_HEADER_BYTES, SpoolHeader, Stream, chunk_bytes,
    chunk_padding_bytes, encode_chunk_header,
};
use super::index::SegmentIndex;
use super::{CHUNK_SPLIT_BYTES, Gap, LossReason, Segment, Spool, SpoolError, io, segment_name};
use crate::aligned::StageBuf;
use crate::limits::SPOOL_REMOVALS_DEFERRED_MAX;
use crate::root::dir::{Dir, file_name as file_name_of};

/// Appends are staged in a write buffer of about this many bytes and written to the file when
/// it is full, so that small appends cost the file system a fraction of a write each. A buffer
/// this size stays in the CPU's cache between the copy into it and the kernel's copy out of it.
pub(super) const WRITE_BUFFER_BYTES: usize = 256 * 1024;

/// A write of a full buffer ends at a multiple of this file offset; the bytes after it stay
/// staged, so that the next write starts there. Whole, aligned blocks let the page cache use large
/// folios and never write a page in two parts (measured with 64 KiB appends: 0.80x of a plain
/// write against 0.75x with page alignment and 0.73x writing each append as it came).
const WRITE_ALIGN_BYTES: u64 = 64 * 1024;

const _: () = assert!(WRITE_ALIGN_BYTES as usize * 2 <= WRITE_BUFFER_BYTES);

/// A writer whose writes failed: the active segment is sealed (nothing more is written to it)
/// and the next write starts a new segment, tried no earlier than `retry_at`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Failing {
    retry_at: Instant,
    /// `finish` closed the gap for good: writing never resumes.
    finished: bool,
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Spool {
    fn new_segment(&mut self) -> Result<(), SpoolError> {
        let header = SpoolHeader {
            spool_id: self.spool_id,
            first_cursor: self.total_bytes,
            segment_index: self
                .segments
                .back()
                .map_or(0, |s| s.header.segment_index + 1),
            created_unix_ms: now_unix_ms(),
        };
        // Created (or a spare renamed) under its final name: a crash before the header is whole
        // leaves a newest file no longer than a header, or one whose header names a lower
        // cursor, which recovery removes (it never held synced output). No temporary name and
        // rename: two directory operations fewer per segment.
        let name = segment_name(header.first_cursor);
        let path = self.dir.join(&name);
        let held = match &self.held {
            Some(held) => Arc::clone(held),
            None => {
                let held = Arc::new(Dir::ensure_all(&self.dir).map_err(io("create directory"))?);
                // The new directory's own entry is synced by the first checkpoint, before any
                // bounds naming its bytes can be recorded; nothing is gained by paying for it
                // here.
                self.parent_unsynced = true;
                self.held = Some(Arc::clone(&held));
                held
            }
        };
        // Before the next segment's file appears: a reader that finds a newer segment never
        // takes this one's length while old bytes are still past its chunks.
        self.cut_active_tail();
        let (file, stale_to) = match self.recycled(&held, &name) {
            Some(recycled) => recycled,
            None => (
                self.io.create(&held, &name).map_err(io("create segment"))?,
                0,
            ),
        };
        if let Err(e) = self.io.write_at(&file, &header.encode(), 0) {
            // Never named by a checkpoint; a file left here would be a segment without a header.
            let _ = self.io.remove(&held, &name);
            return Err(SpoolError::Io {
                op: "write segment header",
                cause: e,
            });
        }
        let segment = Segment {
            path,
            header,
            file: Some(Arc::new(file)),
            valid_len: SPOOL_HEADER_BYTES as u64,
            end_cursor: header.first_cursor,
            index: OnceLock::new(),
        };
        let _ = segment.index.set(SegmentIndex::default());
        debug_assert!(self.pending.is_empty());
        self.pending_at = segment.valid_len;
        self.written = (segment.valid_len, self.total_bytes);
        self.boundary = self.written;
        // The sealed one's bytes are written; a sync that must still cover them opens it.
        if let Some(sealed) = self.segments.back_mut() {
            sealed.file = None;
        }
        self.stale_to = stale_to;
        self.turned = true;
        self.segments.push_back(segment);
        self.dirty = true;
        Ok(())
    }

    /// The newest segment, about to be sealed with all its bytes written, ends at its chunks: a
    /// recycled file's old bytes past them are cut.
    fn cut_active_tail(&mut self) {
        let Some(active) = self.segments.back() else {
            return;
        };
        if let Some(file) = &active.file
            && self.stale_to > active.valid_len
            && let Err(e) = self.io.set_len(file, active.valid_len)
        {
            // Past its chunks, below the next segment's first cursor: never read.
            tracing::warn!(error = %e, "could not cut a recycled segment's old bytes");
        }
        self.stale_to = 0;
    }

    /// A spare (`spare.rs`) made into the file of segment `name`, with the length of its old
    /// bytes; `None` when there is none, or it could not be used (the next sync plan then
    /// removes it).
    fn recycled(&mut self, held: &Dir, name: &str) -> Option<(std::fs::File, u64)> {
        let spare = self.spares.pop()?;
        match super::spare::recycle(self.io.as_ref(), held, &spare, name) {
            Ok(recycled) => Some(recycled),
            Err(e) => {
                tracing::warn!(error = %e, "a spare segment file could not be reused");
                self.doomed.push(spare);
                None
            }
        }
    }

    /// Appends `bytes` of `stream` at the end of the combined output. Reads through this handle
    /// see the bytes at once; they reach the file (and so readers in other processes) at the next
    /// [`Spool::flush`] or [`Spool::checkpoint`], or earlier; durability waits for
    /// [`Spool::checkpoint`].
    ///
    /// Every byte is counted (`total_bytes` grows by `bytes.len()`) whether or not it could be
    /// kept. When a write fails (a full disk, an I/O error) the bytes not yet written, staged
    /// ones included, become a [`Gap`] with the failure's reason, the active segment is sealed,
    /// and the error is returned; until writing resumes in a new segment (tried at most every
    /// `SPOOL_RETRY_MS`), appends count their bytes into that gap and return `Ok`.
    /// [`Spool::losses`] changes whenever bytes were lost.
    pub fn append(&mut self, stream: Stream, bytes: &[u8]) -> Result<(), SpoolError> {
        if !self.writable {
            return Err(SpoolError::ReadOnly);
        }
        if bytes.is_empty() {
            return Ok(());
        }
        if self.failing.is_some() && !self.try_resume() {
            self.count_lost(bytes.len());
            return Ok(());
        }
        let mut rest = bytes;
        let result = self.append_kept(stream, &mut rest);
        if let Err(e) = result {
            let (reason, errno) = match &e {
                SpoolError::Io { cause, .. } => (
                    LossReason::of_write(cause),
                    cause.raw_os_error().unwrap_or(0),
                ),
                _ => (LossReason::IoError, 0),
            };
            self.fail(self.written.1, reason, errno, true);
            self.count_lost(rest.len());
            return Err(e);
        }
        self.enforce_retention();
        Ok(())
    }

    /// The writing part of [`Spool::append`]: stages `rest` chunk by chunk, leaving in it what
    /// was not staged when a write failed.
    fn append_kept(&mut self, stream: Stream, rest: &mut &[u8]) -> Result<(), SpoolError> {
        let frames = rest.len().div_ceil(CHUNK_SPLIT_BYTES) * chunk_bytes(CHUNK_SPLIT_BYTES);
        if self.pending.len() + frames > WRITE_BUFFER_BYTES {
            self.write_pending(true)?;
        }
        while !rest.is_empty() {
            let piece = &rest[..rest.len().min(CHUNK_SPLIT_BYTES)];
            let frame = chunk_bytes(piece.len()) as u64;
            let rotate = self.segments.back().is_none_or(|s| {
                s.valid_len > SPOOL_HEADER_BYTES as u64
                    && s.valid_len + frame > self.options.segment_bytes
            });
            if rotate {
                self.write_pending(false)?;
                self.new_segment()?;
                // Per segment, not only per append: a large append spanning several segments
                // keeps the retained window within a segment of the bound at every moment.
                self.enforce_retention();
            } else if self.pending.len() + frame as usize > WRITE_BUFFER_BYTES {
                // Only an append larger than the buffer gets here.
                self.write_pending(true)?;
            }
            self.stage_chunk(stream, piece);
            *rest = &rest[piece.len()..];
        }
        Ok(())
    }

    /// Counts `n` bytes that could not be kept into the open gap.
    fn count_lost(&mut self, n: usize) {
        self.total_bytes += n as u64;
        if let Some(gap) = self.gaps.last_mut()
            && self.failing.is_some()
        {
            gap.to = self.total_bytes;
        }
        self.losses += 1;
    }

    /// Writing failed: every byte from cursor `from` on is lost (those staged, and for a failed
    /// sync those written since the last successful one: whatever the page cache shows, they
    /// may never reach the disk, and a retried sync would prove nothing). Opens a gap from
    /// `from`, taking in the gaps not yet recorded after it, and seals the active segment:
    /// nothing more is written to it. `cut`: the failure was a write, whose bytes may have
    /// partly landed past the last good chunk; the file is cut back there (best effort: a read
    /// never trusts bytes inside a gap anyway).
    pub(super) fn fail(&mut self, from: u64, reason: LossReason, errno: i32, cut: bool) {
        debug_assert!(from <= self.total_bytes);
        // The cursors from `from` on not yet in a gap become gaps with this reason; those
        // already in one keep theirs (the earlier failure lost them first).
        let mut at = from;
        let mut fill = Vec::new();
        for g in self.gaps.iter().filter(|g| g.to > from) {
            if g.from > at {
                fill.push(Gap {
                    from: at,
                    to: g.from,
                    reason,
                    errno,
                });
            }
            at = at.max(g.to);
        }
        // Always a last gap ending at the end of the output (empty if nothing is lost yet): the
        // one appends count into while writes fail.
        if at < self.total_bytes || self.gaps.last().is_none_or(|g| g.to < self.total_bytes) {
            fill.push(Gap {
                from: at,
                to: self.total_bytes,
                reason,
                errno,
            });
        }
        for gap in fill {
            let i = self.gaps.partition_point(|g| g.from < gap.from);
            self.gaps.insert(i, gap);
        }
        // Writing resumed and failed again at once, for the same reason: one gap.
        let mut joined: Vec<Gap> = Vec::with_capacity(self.gaps.len());
        for g in self.gaps.drain(..) {
            match joined.last_mut() {
                Some(last)
                    if last.to == g.from && (last.reason, last.errno) == (g.reason, g.errno) =>
                {
                    last.to = g.to;
                }
                _ => joined.push(g),
            }
        }
        self.gaps = joined;
        let (written_at, written_cursor) = self.written;
        if let Some(active) = self.segments.back_mut() {
            if cut && let Some(file) = &active.file {
                let _ = self.io.set_len(file, written_at);
            }
            if active.valid_len > written_at {
                // Its index names chunks that never wholly reached the file: built again, from
                // the file, by the first read that needs it.
                active.valid_len = written_at;
                active.end_cursor = written_cursor.min(active.end_cursor);
                active.index = OnceLock::new();
            }
        }
        self.pending = StageBuf::new();
        self.pending_at = written_at;
        self.boundary = self.written;
        let finished = self.failing.is_some_and(|f| f.finished);
        self.failing = Some(Failing {
            retry_at: Instant::now() + self.retry_interval,
            finished,
        });
        self.dirty = true;
        self.losses += 1;
    }

    /// While failing: starts a new segment at the end of the output, if it is time to try and
    /// the gap bound allows. On success the open gap is closed where the new segment starts.
    fn try_resume(&mut self) -> bool {
        let Some(failing) = self.failing else {
            return true;
        };
        if failing.finished
            || Instant::now() < failing.retry_at
            || self.gaps.len() >= crate::limits::GAPS_PER_PROCESS_MAX
        {
            return false;
        }
        match self.new_segment() {
            Ok(()) => {
                self.failing = None;
                true
            }
            Err(_) => {
                self.failing = Some(Failing {
                    retry_at: Instant::now() + self.retry_interval,
                    finished: false,
                });
                false
            }
        }
    }

    /// Gives up the spares once the window has stopped turning over: when no segment was started
    /// since the last call, they go to the next sync plan's removals, so that a process that
    /// wrote a burst does not keep whole segments beyond its retention (and their pages, which
    /// the kernel would write back) while it is quiet. True when some went. A supervisor calls
    /// it once per checkpoint interval.
    pub fn retire_idle_spares(&mut self) -> bool {
        let idle = !std::mem::take(&mut self.turned);
        if !idle || self.spares.is_empty() {
            return false;
        }
        self.doomed.append(&mut self.spares);
        true
    }

    /// No more appends will come: an open gap is closed at the end of the output, so that a
    /// checkpoint can now cover it. Call before the last checkpoint.
    pub fn finish(&mut self) {
        if let Some(failing) = &mut self.failing {
            failing.finished = true;
        }
        // Spares go with the last sync plan, which also cuts the active file's old bytes.
        self.finished = true;
        self.doomed.append(&mut self.spares);
    }

    /// How far output is settled: durable (synced) or inside a closed gap, from the start.
    /// After a failed sync and [`Spool::finish`], the gap it opened makes this the end.
    pub fn settled_total(&self) -> u64 {
        let mut total = self.durable_total;
        for gap in &self.gaps {
            if gap.from <= total {
                total = total.max(gap.to);
            }
        }
        total
    }

    /// Output lost so far (see [`loss`](super::loss)), in cursor order; the last may still be
    /// growing.
    pub fn gaps(&self) -> &[Gap] {
        &self.gaps
    }

    /// Changes whenever bytes were lost (a buffer in front of the spool starts again then).
    pub fn losses(&self) -> u64 {
        self.losses
    }

    /// Whether writes are failing now (bytes appended are being lost).
    #[cfg(any(test, feature = "test-support"))]
    pub fn is_failing(&self) -> bool {
        self.failing.is_some_and(|f| !f.finished)
    }

    /// The parts of gaps below `upto` the owner has not recorded yet: what it must record (in
    /// the journal) before it records bounds reaching `upto`. A gap still growing gives the
    /// piece up to `upto`; the next call gives the rest (the journal joins pieces that touch).
    pub fn unrecorded_gaps(&self, upto: u64) -> Vec<Gap> {
        self.gaps
            .iter()
            .filter(|g| g.to > self.recorded && g.from < upto)
            .map(|g| Gap {
                from: g.from.max(self.recorded),
                to: g.to.min(upto),
                ..*g
            })
            .filter(|g| !g.is_empty())
            .collect()
    }

    /// The owner recorded every gap below `upto`.
    pub fn gaps_recorded(&mut self, upto: u64) {
        self.recorded = self.recorded.max(upto);
    }

    /// Copies one chunk (`piece` of at most [`CHUNK_SPLIT_BYTES`]) into the write buffer, at the
    /// end of the active segment.
    fn stage_chunk(&mut self, stream: Stream, piece: &[u8]) {
        let Some(active) = self.segments.back_mut() else {
            unreachable!("appends ensure an active segment first");
        };
        debug_assert_eq!(
            self.pending_at + self.pending.len() as u64,
            active.valid_len
        );
        let at = self.pending.len();
        let payload = at + CHUNK_HEADER_BYTES..at + CHUNK_HEADER_BYTES + piece.len();
        self.pending.extend_from_slice(&[0; CHUNK_HEADER_BYTES]);
        self.pending.extend_from_slice(piece);
        self.pending
            .extend_from_slice(&CHUNK_PADDING[..chunk_padding_bytes(piece.len())]);
        // The checksum reads the payload where it was just copied (still in the CPU's cache), not
        // from the caller's bytes a second time.
        let header = encode_chunk_header(stream, self.total_bytes, &self.pending[payload]);
        self.pending[at..at + CHUNK_HEADER_BYTES].copy_from_slice(&header);
        if let Some(index) = active.index.get_mut() {
            index.push(active.valid_len, self.total_bytes, piece.len() as u32);
        }
        active.valid_len += chunk_bytes(piece.len()) as u64;
        self.total_bytes += piece.len() as u64;
        active.end_cursor = self.total_bytes;
        self.dirty = true;
    }

    /// Writes staged chunks to the active segment's file: all of them, or (`aligned`) those up to
    /// the last page boundary they cross, keeping the rest staged so that every page is written
    /// once, whole, by one write (a page written in two parts costs the kernel nearly twice).
    /// On error nothing is dropped from the buffer: the next write starts at the same offset.
    fn write_pending(&mut self, aligned: bool) -> Result<(), SpoolError> {
        let Some(active) = self.segments.back() else {
            return Ok(());
        };
        let Some(file) = &active.file else {
            return Err(SpoolError::Io {
                op: "write chunks",
                cause: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the active segment holds no descriptor",
                ),
            });
        };
        let end = self.pending_at + self.pending.len() as u64;
        let upto = if aligned {
            end / WRITE_ALIGN_BYTES * WRITE_ALIGN_BYTES
        } else {
            end
        };
        if upto <= self.pending_at {
            return Ok(());
        }
        let n = (upto - self.pending_at) as usize;
        self.io
            .write_at(file, &self.pending[..n], self.pending_at)
            .map_err(io("write chunks"))?;
        // Step over the chunks now wholly in the file (their headers are still staged).
        let (mut offset, mut cursor) = self.boundary;
        while offset < upto {
            let at = (offset - self.pending_at) as usize;
            let mut len = [0u8; 4];
            len.copy_from_slice(
                &self.pending[at + format::CH_PAYLOAD_BYTES_OFFSET
                    ..at + format::CH_PAYLOAD_BYTES_OFFSET + 4],
            );
            let payload = u32::from_le_bytes(len);
            let next = (
                offset + chunk_bytes(payload as usize) as u64,
                cursor + u64::from(payload),
            );
            if next.0 > upto {
                self.boundary = next;
                break;
            }
            (offset, cursor) = next;
            self.boundary = next;
        }
        self.written = (offset, cursor);
        self.pending.drain_front(n);
        self.pending_at = upto;
        Ok(())
    }

    /// Writes every appended byte to its segment file, where readers in other processes (and a
    /// crash of this one) find it. Cheap when nothing is staged.
    ///
    /// A failed write loses the staged bytes as [`Spool::append`] describes, and is returned.
    pub fn flush(&mut self) -> Result<(), SpoolError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let result = self.write_pending(false);
        if let Err(SpoolError::Io { cause, .. }) = &result {
            let (reason, errno) = (
                LossReason::of_write(cause),
                cause.raw_os_error().unwrap_or(0),
            );
            self.fail(self.written.1, reason, errno, true);
        }
        result
    }

    /// Deletes whole oldest segments while more than the retention bound is retained. A file
    /// that cannot be deleted stays (retention lags; nothing is lost) and is tried again at the
    /// next append. With [`Spool::defer_removals`], a dropped segment leaves the window at once
    /// and its file is removed by the next sync plan instead, oldest first (one that fails
    /// there stays on the list, with every newer one, for the plan after).
    fn enforce_retention(&mut self) {
        while self.segments.len() > 1
            && self.total_bytes - self.retained_from > self.options.retention_bytes
        {
            let Some(oldest) = self.segments.pop_front() else {
                break;
            };
            if !self.drop_segment(file_name_of(&oldest.path)) {
                self.segments.push_front(oldest);
                break;
            }
            // The next segment's first cursor, not this one's end: a gap may lie between them.
            self.retained_from = self
                .segments
                .front()
                .map_or(self.total_bytes, |s| s.header.first_cursor);
        }
    }

    /// Removes the file of segment `name`, just taken out of the window, or with
    /// [`Spool::defer_removals`] leaves it to the next sync plan. Past
    /// [`SPOOL_REMOVALS_DEFERRED_MAX`] waiting, those are removed here first, oldest first, so
    /// that the files on disk never skip a segment. False when a file could not be removed: the
    /// segment then stays in the window (retention lags; nothing is lost).
    fn drop_segment(&mut self, name: &str) -> bool {
        let Some(held) = self.held.clone() else {
            return true;
        };
        if self.defer_removals {
            if self.doomed.len() >= SPOOL_REMOVALS_DEFERRED_MAX {
                super::sync::remove_doomed(self.io.as_ref(), &held, &mut self.doomed);
            }
            if self.doomed.len() < SPOOL_REMOVALS_DEFERRED_MAX {
                self.doomed.push(name.to_owned());
                return true;
            }
            return false;
        }
        match self.io.remove(&held, name) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "spool retention could not delete a segment");
                false
            }
        }
    }

    /// Leaves the removal of the segment files retention drops to the next sync plan, which a
    /// supervisor runs off the thread that drains the pipes (see
    /// [`SPOOL_REMOVALS_DEFERRED_MAX`]).
    pub fn defer_removals(&mut self) {
        self.defer_removals = true;
    }

    /// Makes everything appended so far durable (fdatasync of the segments written since the
    /// last checkpoint, then the directory) and returns the bounds a journal checkpoint may now
    /// record. The same three steps a caller can run without its lock; see `sync.rs`.
    pub fn checkpoint(&mut self) -> Result<(u64, u64), SpoolError> {
        let plan = self.plan_sync()?;
        let done = plan.run();
        self.finish_sync(done)
    }
}
