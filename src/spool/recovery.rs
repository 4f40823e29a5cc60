//! Recovery: opening a spool directory, whatever a crash, a full disk or outside hands left in
//! it, and saying what was found ([`SpoolRecovery`]).
//!
//! Recovery scans the active segment whole ([`scan_segment`]). Like the journal's, it never cuts
//! bytes that have a valid chunk after them: a chunk that fails its checks, followed by a whole
//! valid chunk that continues the cursors (at most as far as the damaged bytes could have held),
//! is mid-segment damage, reported as a [`SpoolDamage`] and kept, and the chunks after it stay
//! readable (acknowledged output, possibly). Only a torn tail, with nothing valid after it, is
//! cut; spool segment files are never memory-mapped, so it is cut with `set_len`. (A process's
//! own output could contain the bytes of a valid chunk; inside damaged bytes such a copy could be
//! taken for the continuation only if it also named a cursor in the narrow range allowed, and the
//! journal's resync takes the same risk.)
//!
//! Invariants:
//! - A read-only open changes nothing on disk. A writable one removes only files that hold no
//!   output of the window (a leftover `.seg.tmp`: an interrupted creation, or a spare whose
//!   output retention dropped; a newest segment no longer than its header, or whose header
//!   names an older segment of the spool) and cuts only the torn tail of the active segment
//!   (where a recycled file's old chunks, of lower cursors, are also a torn tail).
//! - Sealed segments are not read at open: only their names, owners and order are checked here.
//!   Their chunks are checked when a read first builds their index (`reader.rs`), which steps
//!   over damage by the same rule ([`resync`]).

use std::collections::VecDeque;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Serialize;

use super::format::{
    self, CHUNK_HEADER_BYTES, SPOOL_HEADER_BYTES, SpoolHeader, chunk_bytes, decode_chunk,
};
use super::index::SegmentIndex;
use super::{Segment, Spool, SpoolError, SpoolOptions, io, segment_name};
use crate::aligned::StageBuf;
use crate::journal::reader::read_full_at;
use crate::root::dir::{Access, Dir, file_name as file_name_of};

/// A spool directory that listed files but is not held: cannot happen (the listing comes from
/// the held descriptor), said as an error rather than assumed.
fn missing_dir(dir: &Path) -> std::io::Error {
    std::io::Error::other(format!("{} is not held open", dir.display()))
}

/// What recovery found in a spool directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SpoolRecovery {
    pub segments: u64,
    /// Bytes after the last whole chunk of the active segment (a torn append), cut when writable.
    pub torn_tail_bytes: u64,
    /// Bytes after the last whole chunk of the active segment that end in a reused file's old
    /// output (`spare.rs`): the first whole chunk after the segment's own names a cursor below
    /// the segment's first (what lies before it is counted with them: the rest of an old chunk,
    /// or an append a crash cut short, never acknowledged). Neither a torn append nor damage;
    /// cut when writable.
    pub old_tail_bytes: u64,
    /// A writable open cut a torn or old tail, or removed a segment that never held output.
    pub torn_tail_cut: bool,
    /// Segment files that could not be used (bad header, wrong spool, out of order).
    pub bad_segments: Vec<String>,
    /// Damaged bytes in the active segment with valid chunks after them: kept as they are (never
    /// cut, never rewritten), and reads of the cursors they held fail with
    /// [`SpoolError::Corrupt`]; the chunks after them stay readable.
    pub damaged: Vec<SpoolDamage>,
}

/// A damaged range of a segment with a valid chunk after it, which continues the cursors. A torn
/// write leaves nothing valid after it; this is damage to bytes that were written (media errors,
/// outside writes) and the chunks after it may be output the journal recorded as durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpoolDamage {
    /// The segment's file name (never a path).
    pub segment: String,
    /// File offsets of the damaged bytes: from the end of the last valid chunk before them to
    /// the first valid chunk after them.
    pub start_offset: u64,
    pub end_offset: u64,
    /// The cursors those bytes held (unreadable): `end_cursor` is the first valid chunk's.
    pub first_cursor: u64,
    pub end_cursor: u64,
    /// Why the first chunk at `start_offset` was rejected.
    pub reason: String,
}

impl SpoolRecovery {
    pub fn is_clean(&self) -> bool {
        self.torn_tail_bytes == 0 && self.bad_segments.is_empty() && self.damaged.is_empty()
    }
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Where a walk over chunks stopped.
pub(super) struct Walk {
    /// File offset after the last chunk consumed.
    pub(super) end_offset: u64,
    /// Cursor after the last chunk consumed.
    pub(super) end_cursor: u64,
    /// Why the walk stopped before the end of the bytes, if it did not stop by choice.
    pub(super) error: Option<String>,
}

/// Walks the chunks of `bytes` (a window of a segment starting at file offset `base`), checking
/// each one and the continuity of its cursor. `visit(offset, header, payload)` returns false to
/// stop after that chunk.
pub(super) fn walk_chunks(
    bytes: &[u8],
    base: u64,
    first_cursor: u64,
    mut visit: impl FnMut(u64, &format::ChunkHeader, &[u8]) -> bool,
) -> Walk {
    let mut at = 0usize;
    let mut cursor = first_cursor;
    let mut error = None;
    while at < bytes.len() {
        match decode_chunk(&bytes[at..]) {
            Ok((h, _)) if h.cursor != cursor => {
                error = Some(format!(
                    "chunk names cursor {}, expected {cursor}",
                    h.cursor
                ));
                break;
            }
            Ok((h, payload)) => {
                let more = visit(base + at as u64, &h, payload);
                cursor += u64::from(h.payload_bytes);
                at += chunk_bytes(h.payload_bytes as usize);
                if !more {
                    break;
                }
            }
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    Walk {
        end_offset: base + at as u64,
        end_cursor: cursor,
        error,
    }
}

/// Finds the first chunk after damage at `from` (an offset in `bytes` where a chunk was expected
/// with cursor `expected`) that continues the cursors: whole and checksum-valid, at a chunk
/// alignment, naming a cursor above `expected` by no more payload than the damaged bytes between
/// could have held (at least one chunk header's worth of them is not payload). Returns its offset
/// in `bytes` and its cursor.
pub(super) fn resync(bytes: &[u8], from: usize, expected: u64) -> Option<(usize, u64)> {
    let mut at = from + format::CHUNK_ALIGN_BYTES;
    while at + CHUNK_HEADER_BYTES <= bytes.len() {
        if let Ok((h, _)) = decode_chunk(&bytes[at..]) {
            let room = (at - from).saturating_sub(CHUNK_HEADER_BYTES) as u64;
            if h.cursor > expected && h.cursor - expected <= room {
                return Some((at, h.cursor));
            }
        }
        at += format::CHUNK_ALIGN_BYTES;
    }
    None
}

/// What [`scan_segment`] found.
#[derive(Debug)]
pub(crate) struct Scan {
    /// File offset and cursor after the last valid chunk.
    pub end_offset: u64,
    pub end_cursor: u64,
    /// Damaged ranges with valid chunks after them (`segment` left empty for the caller).
    pub damaged: Vec<SpoolDamage>,
}

/// Scans the chunks of `bytes`, a segment's bytes from file offset `base` whose first chunk has
/// cursor `first_cursor`, the way recovery does: a chunk that fails its checks is damage when a
/// chunk that continues the cursors follows it ([`resync`]), and the scan goes on from there;
/// otherwise it starts the torn tail, which is everything from `end_offset` on. `visit(offset,
/// header, after_damage)` sees every valid chunk in order. Pure and total.
pub(crate) fn scan_segment(
    bytes: &[u8],
    base: u64,
    first_cursor: u64,
    mut visit: impl FnMut(u64, &format::ChunkHeader, bool),
) -> Scan {
    let (mut at, mut cursor) = (0usize, first_cursor);
    let mut damaged = Vec::new();
    let mut after_damage = false;
    loop {
        let walk = walk_chunks(&bytes[at..], base + at as u64, cursor, |offset, h, _| {
            visit(offset, h, std::mem::take(&mut after_damage));
            true
        });
        at = (walk.end_offset - base) as usize;
        cursor = walk.end_cursor;
        let Some(reason) = walk.error else {
            break;
        };
        let Some((next, next_cursor)) = resync(bytes, at, cursor) else {
            break;
        };
        damaged.push(SpoolDamage {
            segment: String::new(),
            start_offset: base + at as u64,
            end_offset: base + next as u64,
            first_cursor: cursor,
            end_cursor: next_cursor,
            reason,
        });
        (at, cursor) = (next, next_cursor);
        after_damage = true;
    }
    Scan {
        end_offset: base + at as u64,
        end_cursor: cursor,
        damaged,
    }
}

/// What a listed segment file turned out to be (see [`Opening::examine`]).
#[derive(Debug)]
enum Listed {
    /// A segment of this spool, after the ones before it.
    Segment(Segment),
    /// The newest file, no longer than a header or with the header of an older segment of this
    /// spool (`len` bytes): a segment whose creation, or rewrite of a spare, was interrupted.
    Unborn { path: PathBuf, len: u64 },
    /// A file that cannot be used, and why.
    Bad(&'static str),
    /// A file listed and gone when opened (a live writer's retention).
    Gone,
}

/// What a directory's names are (see [`Opening::list`]).
#[derive(Debug)]
struct Listing {
    /// The segment files, with their first cursors, in cursor order.
    listed: Vec<(u64, PathBuf)>,
    /// Leftovers of interrupted segment creations, which never held output.
    leftovers: Vec<String>,
}

/// The directory of one open: where it is, its descriptor (`None`: it does not exist yet), and
/// whether this open may change what it holds.
#[derive(Debug)]
struct Opening<'a> {
    dir: &'a Path,
    held: Option<&'a Dir>,
    writable: bool,
}

/// Opens the spool directory `dir`; `None` when it does not exist.
fn open_dir(dir: &Path, writable: bool) -> Result<Option<Arc<Dir>>, SpoolError> {
    let opened = if writable {
        Dir::open(dir)
    } else {
        Dir::reader(dir)
    };
    match opened {
        Ok(held) => Ok(Some(Arc::new(held))),
        // A writer creates it with its first segment.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("open directory")(e)),
    }
}

impl Opening<'_> {
    fn held(&self) -> std::io::Result<&Dir> {
        self.held.ok_or_else(|| missing_dir(self.dir))
    }

    /// The segment files the directory names, and what a writable open is to remove.
    fn list(&self) -> Result<Listing, SpoolError> {
        let names = match self.held {
            Some(held) => held.names().map_err(io("list segments"))?,
            None => Vec::new(),
        };
        let mut listed: Vec<(u64, PathBuf)> = Vec::new();
        let mut leftovers = Vec::new();
        for file_name in names {
            let Some(name) = file_name.to_str() else {
                continue;
            };
            if let Some(first) = parse_segment_name(name) {
                listed.push((first, self.dir.join(name)));
            } else if self.writable && super::spare::is_spare(name) {
                // An interrupted segment creation (never named, never held output), or a spare
                // (`spare.rs`), whose output retention dropped.
                leftovers.push(name.to_owned());
            }
        }
        listed.sort();
        Ok(Listing { listed, leftovers })
    }

    /// What the file at `path`, named for cursor `first`, is: a segment of this spool that
    /// follows the one starting at cursor `previous`, or not. The owner `spool_id`, when not
    /// given, is taken from the first segment whose header decodes.
    fn examine(
        &self,
        (first, path): (u64, PathBuf),
        is_last: bool,
        previous: Option<u64>,
        spool_id: &mut Option<[u8; 16]>,
    ) -> Result<Listed, SpoolError> {
        let access = if self.writable {
            Access::ReadWrite
        } else {
            Access::Read
        };
        let file = match self
            .held()
            .and_then(|h| h.file(file_name_of(&path), access))
        {
            Ok(file) => file,
            // Gone since the listing: retention of a live writer took it (only the oldest
            // files go), as if it had not been listed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Listed::Gone),
            Err(e) => return Err(io("open segment")(e)),
        };
        let mut head = [0u8; SPOOL_HEADER_BYTES];
        let header = file
            .read_exact_at(&mut head, 0)
            .ok()
            .and_then(|()| SpoolHeader::decode(&head).ok());
        let Some(header) = header else {
            // The newest file, no longer than a header: a segment whose creation a crash (or
            // an unsynced header under power loss) interrupted. It never held output.
            let len = file.metadata().map_err(io("stat segment"))?.len();
            if is_last && len <= SPOOL_HEADER_BYTES as u64 {
                return Ok(Listed::Unborn { path, len });
            }
            return Ok(Listed::Bad("bad header"));
        };
        // Continuity inside a sealed segment is checked chunk by chunk when its index is
        // built; here only the name, the owner and the order can be checked.
        let after_previous = previous.is_none_or(|p| first > p);
        if is_last
            && header.first_cursor < first
            && *spool_id.get_or_insert(header.spool_id) == header.spool_id
        {
            // A spare of this spool renamed for a new segment whose header never reached the
            // disk: the header is written before any chunk and every sync covers both, so
            // nothing in it was ever synced (`spare.rs`).
            let len = file.metadata().map_err(io("stat segment"))?.len();
            return Ok(Listed::Unborn { path, len });
        }
        if header.first_cursor != first
            || *spool_id.get_or_insert(header.spool_id) != header.spool_id
            || !after_previous
        {
            return Ok(Listed::Bad("does not continue this spool"));
        }
        let len = file.metadata().map_err(io("stat segment"))?.len();
        Ok(Listed::Segment(Segment {
            path,
            header,
            // Dropped again once a later segment follows ([`Opening::examine`]'s caller).
            file: Some(Arc::new(file)),
            valid_len: len,
            end_cursor: first,
            index: OnceLock::new(),
        }))
    }

    /// Recovers the last segment, which is scanned whole: its end is the end of the output. Its
    /// damage is reported, its torn tail cut (when writable), and its index kept.
    fn recover_active(
        &self,
        last: &mut Segment,
        recovery: &mut SpoolRecovery,
    ) -> Result<(), SpoolError> {
        let (scan, index, old_tail) = scan_active(last)?;
        let len = last.valid_len;
        let name = segment_name(last.header.first_cursor);
        recovery
            .damaged
            .extend(scan.damaged.into_iter().map(|d| SpoolDamage {
                segment: name.clone(),
                ..d
            }));
        // Only bytes with nothing valid after them are cut: damage followed by valid chunks
        // is kept whole, and so are those chunks.
        let (end, cursor_end) = (scan.end_offset, scan.end_cursor);
        if old_tail {
            recovery.old_tail_bytes += len - end;
        } else {
            recovery.torn_tail_bytes += len - end;
        }
        if len > end && self.writable {
            let file = last.file.as_ref().ok_or_else(no_descriptor)?;
            file.set_len(end).map_err(io("cut torn tail"))?;
            file.sync_all().map_err(io("sync segment"))?;
            recovery.torn_tail_cut = true;
        }
        last.valid_len = end;
        last.end_cursor = cursor_end;
        let _ = last.index.set(index);
        Ok(())
    }
}

/// The newest segment always holds its descriptor; this is the error if that were ever untrue.
fn no_descriptor() -> SpoolError {
    SpoolError::Io {
        op: "use the newest segment's descriptor",
        cause: std::io::Error::new(std::io::ErrorKind::NotFound, "not held"),
    }
}

/// Reads the chunks of `segment` and scans them ([`scan_segment`]), building its index; and
/// says whether what follows its last whole chunk is a reused file's old output (a whole chunk
/// of a cursor below the segment's first).
fn scan_active(segment: &mut Segment) -> Result<(Scan, SegmentIndex, bool), SpoolError> {
    let len = segment.valid_len;
    let mut bytes = vec![0u8; len.saturating_sub(SPOOL_HEADER_BYTES as u64) as usize];
    let file = segment.file.as_ref().ok_or_else(no_descriptor)?;
    let read =
        read_full_at(file, &mut bytes, SPOOL_HEADER_BYTES as u64).map_err(io("read segment"))?;
    // A live writer may cut a reused file's old bytes after this reader took its length: what
    // is there now is the file.
    bytes.truncate(read);
    segment.valid_len = (SPOOL_HEADER_BYTES + read) as u64;
    let mut index = SegmentIndex::default();
    let scan = scan_segment(
        &bytes,
        SPOOL_HEADER_BYTES as u64,
        segment.header.first_cursor,
        |offset, h, after_damage| {
            if after_damage {
                // Reads of later cursors must not walk through the damage.
                index.push_entry(offset, h.cursor, h.payload_bytes);
            } else {
                index.push(offset, h.cursor, h.payload_bytes);
            }
        },
    );
    let tail = usize::try_from(scan.end_offset - SPOOL_HEADER_BYTES as u64).unwrap_or(usize::MAX);
    let old_tail =
        first_whole_chunk(&bytes, tail).is_some_and(|cursor| cursor < segment.header.first_cursor);
    Ok((scan, index, old_tail))
}

/// The cursor of the first whole, checksum-valid chunk at a chunk alignment from `from` on. In
/// a reused file the old chunks are aligned as the new ones are, though not at the same
/// offsets: the new segment's end may cut one short, and the next is whole.
fn first_whole_chunk(bytes: &[u8], from: usize) -> Option<u64> {
    let starts = (from..bytes.len()).step_by(format::CHUNK_ALIGN_BYTES);
    starts
        .filter_map(|at| decode_chunk(&bytes[at..]).ok())
        .map(|(h, _)| h.cursor)
        .next()
}

impl Spool {
    /// Opens the spool in `dir`: lists its segment files, removes what never held output (when
    /// writable), checks each file's header and order, then recovers the last one.
    pub(super) fn open(
        dir: &Path,
        expected_id: Option<[u8; 16]>,
        options: SpoolOptions,
        writable: bool,
    ) -> Result<(Spool, SpoolRecovery), SpoolError> {
        let held = open_dir(dir, writable)?;
        let opening = Opening {
            dir,
            held: held.as_deref(),
            writable,
        };
        let Listing { listed, leftovers } = opening.list()?;
        for name in &leftovers {
            opening
                .held()
                .and_then(|h| h.remove(name))
                .map_err(io("remove leftover segment"))?;
        }
        let last_first = listed.last().map(|(first, _)| *first);
        let mut recovery = SpoolRecovery::default();
        let mut segments: VecDeque<Segment> = VecDeque::new();
        let mut spool_id = expected_id;
        for (first, path) in listed {
            let previous = segments.back().map(|s| s.header.first_cursor);
            let is_last = Some(first) == last_first;
            match opening.examine((first, path), is_last, previous, &mut spool_id)? {
                Listed::Segment(segment) => {
                    // Sealed segments end where the next begins; fixed up below for the last one.
                    // Only the newest keeps its descriptor (`Segment::file`).
                    if let Some(prev) = segments.back_mut() {
                        prev.end_cursor = first;
                        prev.file = None;
                    }
                    segments.push_back(segment);
                }
                Listed::Unborn { path, len } => {
                    recovery.torn_tail_bytes += len;
                    if writable {
                        opening
                            .held()
                            .and_then(|h| h.remove(file_name_of(&path)))
                            .map_err(io("remove empty segment"))?;
                        recovery.torn_tail_cut = true;
                    }
                }
                Listed::Bad(why) => {
                    let name = segment_name(first);
                    recovery.bad_segments.push(format!("{name}: {why}"));
                }
                Listed::Gone => {}
            }
        }
        if let Some(last) = segments.back_mut() {
            opening.recover_active(last, &mut recovery)?;
        }
        recovery.segments = segments.len() as u64;
        let spool_id = spool_id.unwrap_or([0; 16]);
        let spool = Spool::recovered(dir, held, spool_id, options, writable, segments);
        Ok((spool, recovery))
    }

    /// The handle over the segments an open recovered.
    fn recovered(
        dir: &Path,
        held: Option<Arc<Dir>>,
        spool_id: [u8; 16],
        options: SpoolOptions,
        writable: bool,
        segments: VecDeque<Segment>,
    ) -> Spool {
        let total_bytes = segments.back().map_or(0, |s| s.end_cursor);
        let pending_at = segments.back().map_or(0, |s| s.valid_len);
        let retained_from = segments.front().map_or(0, |s| s.header.first_cursor);
        Spool {
            dir: dir.to_owned(),
            held,
            spool_id,
            options,
            writable,
            segments,
            total_bytes,
            retained_from,
            // Bytes found on disk may be only in the page cache (a crashed writer never synced
            // them): nothing counts as durable until the first checkpoint of this handle.
            durable_total: 0,
            synced_layout: None,
            dirty: writable && total_bytes > 0,
            parent_unsynced: false,
            pending: StageBuf::new(),
            pending_at,
            written: (pending_at, total_bytes),
            boundary: (pending_at, total_bytes),
            io: Arc::new(io::FileIo),
            gaps: Vec::new(),
            recorded: 0,
            failing: None,
            retry_interval: Duration::from_millis(crate::limits::SPOOL_RETRY_MS),
            losses: 0,
            defer_removals: false,
            doomed: Vec::new(),
            spares: Vec::new(),
            stale_to: 0,
            finished: false,
            turned: false,
            window_final: false,
        }
    }
}
