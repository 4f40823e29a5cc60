//! Reading: from any cursor, loading only the chunks that hold the bytes asked for.
//!
//! Reads never scan from the start: a binary search finds the segment, and the segment's index
//! (`index.rs`: runs of equal chunks located by arithmetic, and one entry per
//! [`INDEX_STRIDE_BYTES`](super::INDEX_STRIDE_BYTES) of file for anything else) finds the chunk that holds the cursor and
//! bounds the end of the chunk that holds the last byte wanted. A read loads and checks only those
//! chunks (for spools this writer wrote with large appends, exactly the chunks it returns; at
//! worst a stride and a chunk more on either side), so its cost does not depend on how much the
//! spool holds. Appends are split into chunks of [`CHUNK_SPLIT_BYTES`](super::CHUNK_SPLIT_BYTES), which bounds the bytes
//! loaded for a small read anywhere.
//!
//! Invariants:
//! - Every byte returned comes from a chunk whose checksum and cursor were checked in this read;
//!   bytes inside a recorded gap are never returned, even where a file still holds them.
//! - A read reports at most one hole (a gap or damage), before any byte: bytes after a hole are
//!   never joined to bytes before it.
//! - The index of a sealed segment is built once, at its first read, and never walks through
//!   damage: the chunks after damaged bytes get an index entry of their own.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::format::{
    CHUNK_HEADER_BYTES, CHUNK_PAYLOAD_BYTES_MAX, ChunkHeader, SPOOL_HEADER_BYTES, SpoolHeader,
    chunk_bytes, decode_chunk, decode_chunk_header,
};
use super::index::SegmentIndex;
use super::recovery::{resync, walk_chunks};
use super::{
    DamageKind, Gap, LossReason, Segment, SkipKind, Skipped, Spool, SpoolError, SpoolRead, io,
};

/// A read loads at most this many bytes of file at once: a whole chunk of the largest size the
/// format allows, so that every window holds at least one whole chunk.
const READ_WINDOW_MAX: u64 = chunk_bytes(CHUNK_PAYLOAD_BYTES_MAX) as u64;

thread_local! {
    /// The chunk bytes a read loads, kept between the reads of a thread, so that a read allocates
    /// and zero-fills nothing but its answer.
    static READ_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A read scratch buffer grown past this (by a chunk larger than the split size, or a damaged
/// range) is freed after the read instead of kept.
const READ_SCRATCH_KEEP_BYTES: usize = 64 * 1024;

/// A buffer of `len` zero bytes for a read to fill. A fresh zeroed allocation rather than
/// `resize` of the old one: the allocator hands out zeroed pages without writing them (a read of
/// a 1 MiB chunk then writes each byte once, not twice), and the old contents, about to be
/// overwritten, are not copied into a larger allocation first.
fn zeroed(len: usize) -> Vec<u8> {
    vec![0; len]
}

/// Building the index of a sealed segment reads it in blocks of this many bytes (fewer system
/// calls than one per chunk header when chunks are small).
const INDEX_BLOCK_BYTES: usize = 64 * 1024;

/// What holds a cursor (see `Spool::position`).
enum Position {
    End,
    Hole(Skipped),
    /// Bytes of `segments[segment]`, readable up to cursor `limit`.
    Data {
        segment: usize,
        limit: u64,
    },
}

impl Spool {
    /// Where a reader's view must end and which gaps it must show, from a record of the
    /// output this spool should hold (the journal's): its recorded gaps and its total. Bytes
    /// the files hold inside a recorded gap are never returned; cursors the record names and
    /// no file holds are damage. Gaps that overlap or run backwards are ignored (a record a
    /// validating journal would not produce).
    pub fn hold_to_record(&mut self, gaps: &[Gap], total_bytes: u64) {
        let mut kept: Vec<Gap> = Vec::with_capacity(gaps.len());
        for g in gaps {
            if g.from < g.to && kept.last().is_none_or(|p| p.to <= g.from) {
                kept.push(*g);
            }
        }
        let end = kept.last().map_or(0, |g| g.to);
        self.gaps = kept;
        self.recorded = end;
        self.total_bytes = self.total_bytes.max(total_bytes).max(end);
    }

    /// Where the journal's final record says kept output starts. Cursors from there to the
    /// oldest file are then output the files should hold and do not (a missing segment file),
    /// not retention: only the journal knows where retention stopped, since deleting the oldest
    /// files by hand leaves a spool that looks retained. Only a record that no later retention
    /// can have passed may be given (a terminal one: nothing is appended after it); a lower
    /// `retained_from` never hides bytes the files hold.
    pub fn hold_retained_from(&mut self, retained_from: u64) {
        self.retained_from = self.retained_from.min(retained_from);
        self.window_final = true;
    }

    /// Whether a segment file gone under this reader (deleted, or reused for a later segment)
    /// is retention: the reader of a spool whose writer may still move its window, in another
    /// process (a writer never loses its own files, and after a terminal record nothing moves
    /// the window: a file gone then is damage).
    fn gone_is_retention(&self, e: &SpoolError) -> bool {
        let gone = matches!(e, SpoolError::Io { cause, .. } if cause.kind() == std::io::ErrorKind::NotFound);
        gone && !self.writable && !self.window_final
    }

    /// What a read failed at `at` steps over, up to `limit` at most: damaged chunks (or bytes),
    /// to where chunks resume; or a segment gone under this reader, as retention.
    fn hole_at(&self, at: u64, limit: u64, e: SpoolError) -> Result<Skipped, SpoolError> {
        match e {
            SpoolError::Corrupt { reason, .. } => {
                let to = self
                    .resume_after(at)?
                    .map_or(limit, |c| c.min(limit))
                    .max(at + 1);
                Ok(Skipped::damage(at, to, DamageKind::BadChunk, Some(&reason)))
            }
            e if self.gone_is_retention(&e) => Ok(self.gone_segment(at)),
            e => Err(e),
        }
    }

    /// The cursors of the segment holding `at`, from `at`, as retention: its file went while
    /// this reader read (see [`Spool::gone_is_retention`]).
    fn gone_segment(&self, at: u64) -> Skipped {
        let i = self
            .segments
            .partition_point(|s| s.header.first_cursor <= at);
        let to = self
            .segments
            .get(i)
            .map_or(self.total_bytes, |s| s.header.first_cursor);
        Skipped::gap(at, to.max(at + 1), LossReason::Retention, 0)
    }

    /// After damage at file `offset` of a sealed segment, where the chunk of `cursor` was
    /// expected: the first valid chunk that continues the cursors, by the rule recovery applies
    /// to the active segment ([`resync`]), as its file offset, cursor and payload size.
    fn resync_sealed(
        &self,
        segment: &Segment,
        file: &File,
        offset: u64,
        cursor: u64,
    ) -> Result<Option<(u64, u64, u32)>, SpoolError> {
        let len = segment.valid_len.saturating_sub(offset);
        let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
        file.read_exact_at(&mut bytes, offset)
            .map_err(io("read damaged segment"))?;
        Ok(resync(&bytes, 0, cursor).and_then(|(at, next_cursor)| {
            let (h, _) = decode_chunk(&bytes[at..]).ok()?;
            (next_cursor < segment.end_cursor).then_some((
                offset + at as u64,
                next_cursor,
                h.payload_bytes,
            ))
        }))
    }

    fn index_of<'a>(&self, segment: &'a Segment) -> Result<&'a SegmentIndex, SpoolError> {
        if let Some(index) = segment.index.get() {
            return Ok(index);
        }
        let index = self.build_index(segment)?;
        let _ = segment.index.set(index);
        segment.index.get().ok_or_else(|| SpoolError::Corrupt {
            cursor: segment.header.first_cursor,
            reason: "segment index missing".to_owned(),
        })
    }

    /// The index of a sealed segment read for the first time: hop from chunk header to chunk
    /// header, checking each one and the continuity of cursors, reading the file a block at a
    /// time.
    fn build_index(&self, segment: &Segment) -> Result<SegmentIndex, SpoolError> {
        let mut index = SegmentIndex::default();
        let mut offset = SPOOL_HEADER_BYTES as u64;
        let mut cursor = segment.header.first_cursor;
        let mut block = HeaderBlock::default();
        let file = self.segment_file(segment).map_err(io("open segment"))?;
        while cursor < segment.end_cursor {
            if offset + CHUNK_HEADER_BYTES as u64 > segment.valid_len {
                // The file ends before the cursors it should hold: a short file.
                index.stopped = Some((cursor, None));
                break;
            }
            let h = match decode_chunk_header(block.header_at(segment, &file, offset)?) {
                Ok(h) if h.cursor == cursor => h,
                // Damaged bytes in a sealed segment (it was whole when sealed): the chunks after
                // them stay readable, as recovery keeps them in the active segment. Reads of the
                // cursors the damage held, and reads that reach it, walk into it and fail.
                other => match self.resync_sealed(segment, &file, offset, cursor)? {
                    Some((next, next_cursor, payload)) => {
                        index.push_entry(next, next_cursor, payload);
                        block.last_frame = chunk_bytes(payload as usize) as u64;
                        offset = next + block.last_frame;
                        cursor = next_cursor + u64::from(payload);
                        block.bytes.clear();
                        continue;
                    }
                    None => {
                        let reason = match other {
                            Ok(h) => format!("chunk names cursor {}, expected {cursor}", h.cursor),
                            Err(e) => e.to_string(),
                        };
                        index.stopped = Some((cursor, Some(reason)));
                        break;
                    }
                },
            };
            if offset + chunk_bytes(h.payload_bytes as usize) as u64 > segment.valid_len {
                // The last chunk's header is there and its payload is cut off.
                index.stopped = Some((cursor, None));
                break;
            }
            index.push(offset, cursor, h.payload_bytes);
            block.last_frame = chunk_bytes(h.payload_bytes as usize) as u64;
            offset += block.last_frame;
            cursor += u64::from(h.payload_bytes);
        }
        if index.stopped.is_some()
            && let Some(gone) = recycled_under(&file, segment)
        {
            return Err(gone);
        }
        Ok(index)
    }

    /// Reads up to `max_bytes` from `cursor`. A cursor before `retained_from` reads from
    /// `retained_from` with `gap: true`; a cursor beyond `total_bytes` is
    /// [`SpoolError::CursorAhead`]; a cursor equal to `total_bytes` returns nothing. A read that
    /// reaches damaged bytes returns the bytes before them (fewer than asked); a read that starts
    /// at damaged bytes is [`SpoolError::Corrupt`].
    pub fn read(&self, cursor: u64, max_bytes: usize) -> Result<SpoolRead, SpoolError> {
        self.read_counted(cursor, max_bytes).map(|(read, _)| read)
    }

    /// Where reads can resume after `cursor`, a cursor whose read failed with
    /// [`SpoolError::Corrupt`]: after the damaged chunk or bytes, in the same segment or the next
    /// one (see `SegmentIndex::resume_after` for how exact that is). `None` when nothing follows.
    /// For recovery tooling, which lists every damaged range instead of stopping at the first.
    pub fn resume_after(&self, cursor: u64) -> Result<Option<u64>, SpoolError> {
        let i = self.segments.partition_point(|s| s.end_cursor <= cursor);
        let Some(segment) = self.segments.get(i) else {
            return Ok(None);
        };
        let next = match self.index_of(segment)?.resume_after(cursor) {
            Some(c) if c < segment.end_cursor => c,
            _ => segment.end_cursor,
        };
        Ok((next < self.total_bytes).then_some(next))
    }

    /// [`Spool::read`], and the bytes of chunk file it loaded (not counting the one-time index
    /// build of a sealed segment): what tests check to prove a read's cost is bounded.
    pub(super) fn read_counted(
        &self,
        cursor: u64,
        max_bytes: usize,
    ) -> Result<(SpoolRead, u64), SpoolError> {
        if cursor > self.total_bytes {
            return Err(SpoolError::CursorAhead {
                cursor,
                total_bytes: self.total_bytes,
            });
        }
        let available = usize::try_from(self.total_bytes - cursor).unwrap_or(usize::MAX);
        let mut out = SpoolRead {
            // Filled once, without growing.
            bytes: Vec::with_capacity(max_bytes.min(available)),
            next_cursor: cursor,
            retained_from: self.retained_from,
            total_bytes: self.total_bytes,
            ..SpoolRead::default()
        };
        let mut loaded = 0;
        while out.bytes.len() < max_bytes {
            let at = out.next_cursor;
            // One hole at most, and only before any byte: bytes after a hole are never joined
            // to bytes before it, and the next read starts with the next hole.
            let first = out.bytes.is_empty() && out.skipped.is_none();
            let position = match self.position(at) {
                Err(e) if self.gone_is_retention(&e) => Position::Hole(self.gone_segment(at)),
                other => other?,
            };
            let (segment, limit) = match position {
                Position::End => break,
                Position::Hole(skip) => {
                    if !first {
                        break;
                    }
                    out.gap = skip.kind == SkipKind::Gap;
                    out.next_cursor = skip.to;
                    out.skipped = Some(skip);
                    continue;
                }
                Position::Data { segment, limit } => (segment, limit),
            };
            let cap = max_bytes.min(
                out.bytes
                    .len()
                    .saturating_add(usize::try_from(limit - at).unwrap_or(usize::MAX)),
            );
            match self.read_segment(&self.segments[segment], at, cap, &mut out) {
                Ok(n) => loaded += n,
                Err(e) if matches!(e, SpoolError::Corrupt { .. }) || self.gone_is_retention(&e) => {
                    // Bytes this segment gave before the hole are the answer.
                    if !(out.bytes.is_empty() && out.skipped.is_none()) {
                        break;
                    }
                    let hole = self.hole_at(at, limit, e)?;
                    out.gap = hole.kind == SkipKind::Gap;
                    out.next_cursor = hole.to;
                    out.skipped = Some(hole);
                    continue;
                }
                Err(e) => return Err(e),
            }
            if out.next_cursor == at {
                break;
            }
        }
        Ok((out, loaded))
    }

    /// The cursor after the readable chunks of a segment, and why reading stops there if the
    /// segment should hold more (`None`: its file ends there).
    fn data_end(&self, i: usize) -> Result<(u64, Option<String>), SpoolError> {
        let segment = &self.segments[i];
        if i + 1 == self.segments.len() {
            // The last segment was scanned whole at open, and its end kept by every append.
            return Ok((segment.end_cursor, None));
        }
        Ok(match &self.index_of(segment)?.stopped {
            Some((cursor, reason)) => (*cursor, reason.clone()),
            None => (segment.end_cursor, None),
        })
    }

    /// What holds cursor `at`: bytes in a segment (readable up to `limit`, where they or the
    /// next hole end), a hole (retention, a recorded gap, damage), or nothing (the end).
    fn position(&self, at: u64) -> Result<Position, SpoolError> {
        if at >= self.total_bytes {
            return Ok(Position::End);
        }
        // Recorded gaps come first: bytes a file still holds inside one are never returned, and
        // a gap keeps its own reason after retention deleted the segments around it.
        let g = self.gaps.partition_point(|g| g.to <= at);
        let next_gap = self.gaps.get(g);
        if let Some(gap) = next_gap.filter(|gap| gap.from <= at) {
            let to = gap.to.min(self.total_bytes);
            return Ok(Position::Hole(Skipped::gap(at, to, gap.reason, gap.errno)));
        }
        let next_gap_from = next_gap.map_or(self.total_bytes, |gap| gap.from);
        if at < self.retained_from {
            return Ok(Position::Hole(Skipped::gap(
                at,
                self.retained_from.min(next_gap_from),
                LossReason::Retention,
                0,
            )));
        }
        let i = self
            .segments
            .partition_point(|s| s.header.first_cursor <= at);
        let next_first = self
            .segments
            .get(i)
            .map_or(self.total_bytes, |s| s.header.first_cursor);
        let hole_end = next_first.min(next_gap_from).min(self.total_bytes);
        let Some(before) = i.checked_sub(1) else {
            // Before every segment file (or there are none) and not before `retained_from`.
            return Ok(Position::Hole(Skipped::damage(
                at,
                hole_end,
                DamageKind::MissingFile,
                None,
            )));
        };
        let (data_end, broken) = self.data_end(before)?;
        if at < data_end {
            return Ok(Position::Data {
                segment: before,
                limit: data_end.min(next_gap_from),
            });
        }
        let segment = &self.segments[before];
        let hole = match (broken, self.segments.get(i)) {
            (Some(reason), _) => Skipped::damage(at, hole_end, DamageKind::BadChunk, Some(&reason)),
            (None, None) => Skipped::damage(at, hole_end, DamageKind::Truncated, None),
            (None, Some(next)) if next.header.segment_index != segment.header.segment_index + 1 => {
                Skipped::damage(at, hole_end, DamageKind::MissingFile, None)
            }
            (None, Some(_)) => Skipped::damage(at, hole_end, DamageKind::ShortFile, None),
        };
        Ok(Position::Hole(hole))
    }

    /// Fills `buf` with the bytes of `segment` from file offset `offset`: from the file, and
    /// for the active segment's bytes not yet written, from the write buffer.
    fn load(
        &self,
        segment: &Segment,
        file: &File,
        buf: &mut [u8],
        offset: u64,
    ) -> std::io::Result<()> {
        let active = self
            .segments
            .back()
            .is_some_and(|s| std::ptr::eq(s, segment));
        let in_file = if active {
            usize::try_from(self.pending_at.saturating_sub(offset))
                .map_or(buf.len(), |n| n.min(buf.len()))
        } else {
            buf.len()
        };
        let (file_part, staged_part) = buf.split_at_mut(in_file);
        if !file_part.is_empty() {
            file.read_exact_at(file_part, offset)?;
        }
        if !staged_part.is_empty() {
            let from = usize::try_from(offset + in_file as u64 - self.pending_at)
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
            let staged = self
                .pending
                .get(from..from + staged_part.len())
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
            staged_part.copy_from_slice(staged);
        }
        Ok(())
    }

    fn read_segment(
        &self,
        segment: &Segment,
        from: u64,
        max_bytes: usize,
        out: &mut SpoolRead,
    ) -> Result<u64, SpoolError> {
        let index = self.index_of(segment)?;
        let at = index.locate(
            from,
            (SPOOL_HEADER_BYTES as u64, segment.header.first_cursor),
        );
        let file = self.segment_file(segment).map_err(io("open segment"))?;
        let result = READ_SCRATCH.with_borrow_mut(|scratch| {
            let result = self.read_chunks(segment, &file, index, at, from, max_bytes, out, scratch);
            if scratch.capacity() > READ_SCRATCH_KEEP_BYTES {
                // A large chunk or a damaged range was read: give the memory back.
                *scratch = Vec::new();
            }
            result
        });
        match result {
            // A reader's newest segment is held by descriptor too: the writer may have
            // recycled it since, as it may any sealed one between its open and this read.
            Err(corrupt @ SpoolError::Corrupt { .. }) => {
                Err(recycled_under(&file, segment).unwrap_or(corrupt))
            }
            other => other,
        }
    }

    /// The loop of [`Spool::read_segment`], from the chunk at `at` (offset, cursor) on, loading
    /// chunks into `scratch`.
    // The state of one read, passed down as it is rather than bundled for this one call.
    #[allow(clippy::too_many_arguments)]
    fn read_chunks(
        &self,
        segment: &Segment,
        file: &File,
        index: &SegmentIndex,
        at: (u64, u64),
        from: u64,
        max_bytes: usize,
        out: &mut SpoolRead,
        scratch: &mut Vec<u8>,
    ) -> Result<u64, SpoolError> {
        let (mut offset, mut cursor) = at;
        let mut loaded = 0;
        while out.bytes.len() < max_bytes && cursor < segment.end_cursor {
            let wanted = max_bytes - out.bytes.len();
            let [sized, room] = windows(segment, index, (offset, cursor), from, wanted);
            let mut walk = None;
            // A window the index sized holds whole chunks; if it does not (damage, or an index
            // that disagrees with the file), the largest window decides.
            for len in [sized, room] {
                if len == 0 || walk.is_some() {
                    continue;
                }
                let len_usize = len as usize;
                if scratch.len() < len_usize {
                    *scratch = zeroed(len_usize);
                }
                let buf = &mut scratch[..len_usize];
                self.load(segment, file, buf, offset)
                    .map_err(io("read chunks"))?;
                loaded += len;
                let w = walk_chunks(buf, offset, cursor, |_, h, payload| {
                    if h.cursor >= segment.end_cursor {
                        // Bytes past the segment's end belong to no cursor of this spool.
                        return false;
                    }
                    out.take(h, payload, from, max_bytes)
                });
                if w.end_offset > offset || len == room {
                    walk = Some(w);
                }
            }
            let walk = match walk {
                Some(w) if w.end_offset > offset => w,
                // Not even one chunk in the largest window, which always holds a whole one: damage.
                other => {
                    return Err(SpoolError::Corrupt {
                        cursor,
                        reason: other
                            .and_then(|w| w.error)
                            .unwrap_or_else(|| "no chunk".to_owned()),
                    });
                }
            };
            offset = walk.end_offset;
            cursor = walk.end_cursor;
        }
        Ok(loaded)
    }
}

/// `Some` when sealed `segment`'s file, whose bytes just failed their checks, is no longer the
/// segment: retention dropped it and the writer rewrote the file for a newer segment
/// (`spare.rs`) while this reader held it. Its header, read again through the same descriptor,
/// tells; the segment is then gone, as a file deleted under a reader is, and not damaged.
fn recycled_under(file: &File, segment: &Segment) -> Option<SpoolError> {
    let mut head = [0u8; SPOOL_HEADER_BYTES];
    let same = file.read_exact_at(&mut head, 0).is_ok()
        && SpoolHeader::decode(&head).ok() == Some(segment.header);
    (!same).then(|| SpoolError::Io {
        op: "read segment",
        cause: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the segment left the window while it was read: retention reused its file",
        ),
    })
}

/// The lengths of file a read from cursor `from`, wanting `wanted` more bytes, loads from the
/// chunk at `(offset, cursor)` of `segment`: the window the index sizes, and the largest.
fn windows(
    segment: &Segment,
    index: &SegmentIndex,
    (offset, cursor): (u64, u64),
    from: u64,
    wanted: usize,
) -> [u64; 2] {
    // Load from the chunk reached so far to the end of the chunk that holds the last byte
    // wanted, as far as the index can tell (exactly, inside a run).
    let last_wanted = from
        .max(cursor)
        .saturating_add(wanted as u64)
        .min(segment.end_cursor)
        - 1;
    let room = segment
        .valid_len
        .saturating_sub(offset)
        .min(READ_WINDOW_MAX);
    let bound = index
        .chunk_end_bound(last_wanted, segment.valid_len)
        .saturating_sub(offset);
    [bound.min(room), room]
}

impl SpoolRead {
    /// Takes the bytes of the chunk `h` (its `payload`) from cursor `from` on, up to `max_bytes`
    /// in all; whether more are wanted.
    fn take(&mut self, h: &ChunkHeader, payload: &[u8], from: u64, max_bytes: usize) -> bool {
        let chunk_end = h.cursor + u64::from(h.payload_bytes);
        if chunk_end > from {
            let skip = from.saturating_sub(h.cursor) as usize;
            let room = max_bytes - self.bytes.len();
            let take = (payload.len() - skip).min(room);
            self.push(
                h.stream,
                h.cursor + skip as u64,
                &payload[skip..skip + take],
            );
        }
        self.bytes.len() < max_bytes
    }
}

/// The block of a sealed segment's file that an index build reads chunk headers from.
#[derive(Debug, Default)]
struct HeaderBlock {
    bytes: Vec<u8>,
    /// File offset of `bytes[0]`.
    at: u64,
    /// The file bytes of the chunk last stepped over.
    last_frame: u64,
}

impl HeaderBlock {
    /// The bytes of `segment` from file offset `offset` on, at least a chunk header's worth: from
    /// the block in hand, or read into it.
    fn header_at(
        &mut self,
        segment: &Segment,
        file: &File,
        offset: u64,
    ) -> Result<&[u8], SpoolError> {
        let in_block = offset
            .checked_sub(self.at)
            .filter(|&at| at + CHUNK_HEADER_BYTES as u64 <= self.bytes.len() as u64);
        let at = match in_block {
            Some(at) => at as usize,
            None => {
                // After a chunk larger than half a block the next header is all that the
                // block would be used for: read just that.
                let want = if self.last_frame > INDEX_BLOCK_BYTES as u64 / 2 {
                    CHUNK_HEADER_BYTES as u64
                } else {
                    INDEX_BLOCK_BYTES as u64
                };
                let len = want
                    .min(segment.valid_len.saturating_sub(offset))
                    .max(CHUNK_HEADER_BYTES as u64);
                self.bytes.resize(len as usize, 0);
                file.read_exact_at(&mut self.bytes, offset)
                    .map_err(io("read chunk header"))?;
                self.at = offset;
                0
            }
        };
        Ok(&self.bytes[at..])
    }
}
