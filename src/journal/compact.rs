//! Compaction: removing whole segments below a sequence number, and the `journal/FLOOR` file that
//! tells recovery the missing head of the journal is compaction, not loss.
//!
//! The journal does not decide *whether* records may go: the lifecycle layer compacts only below
//! what a durable snapshot of its projection covers (src/lifecycle/snapdir.rs). What this module
//! keeps is the crash-safety of the removal and what recovery makes of it (journal-format.md,
//! "Snapshots and compaction"):
//!
//! - `FLOOR` names the first segment kept (`segment_index`) and its `base_seq`: every record with
//!   a lower seq was removed on purpose. It is written durably (`FLOOR.tmp`, fsync, rename,
//!   directory fsync) *before* any segment is deleted, and it never moves backwards.
//! - Segments are deleted lowest index first, then the directory is synced. A crash anywhere
//!   leaves the old floor and every segment, or the new floor and a contiguous suffix of segments
//!   plus some below the floor: recovery reads those as compaction leftovers (reported, never
//!   scanned) and a writable open finishes deleting them.
//! - The active segment is never removed, and compaction stops below the first segment whose
//!   header does not decode (it would hide a bad segment's report), so the floor segment is always
//!   one recovery can use.
//! - Recovery starts the expected seq at `FLOOR.seq`, so a first segment at the floor is no gap;
//!   a damaged `FLOOR` is reported and ignored, and the removed head then reads as a gap (loss),
//!   never as a silently shorter journal.
//!
//! Also here: what the lifecycle layer hands the journal at open ([`Resume`]: where to start
//! handing out records, and the event IDs of removed records that could still be retried), and
//! [`Head`], what the journal knows before its scan, for choosing a snapshot.

use super::format::{u16_at, u32_at, u64_at};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::format::{self, SegmentHeader};
use super::recovery;
use super::{EventId, Journal, JournalError, Position, lock, now_unix_ms};
use crate::limits::{SEGMENT_HEADER_BYTES, SEGMENT_INDEX_MAX, SEQ_MAX};

/// The name of the floor file in the journal directory.
pub const FLOOR_FILE: &str = "FLOOR";
/// A floor being written (crash residue if found: a writable open deletes it).
pub const FLOOR_TMP_FILE: &str = "FLOOR.tmp";

/// First eight bytes of the floor file.
pub const FLOOR_MAGIC: [u8; 8] = *b"PJFLOOR\0";
/// Version of the floor file's layout.
pub const FLOOR_VERSION: u16 = 1;
/// Length of the floor file.
pub const FLOOR_BYTES: usize = 64;

// Layout, each offset the previous one plus the previous field's width.
const FL_MAGIC_OFFSET: usize = 0;
const FL_VERSION_OFFSET: usize = FL_MAGIC_OFFSET + 8;
const FL_BYTES_OFFSET: usize = FL_VERSION_OFFSET + 2;
const FL_RESERVED_OFFSET: usize = FL_BYTES_OFFSET + 2;
const FL_JOURNAL_ID_OFFSET: usize = FL_RESERVED_OFFSET + 4;
const FL_INDEX_OFFSET: usize = FL_JOURNAL_ID_OFFSET + 16;
const FL_SEQ_OFFSET: usize = FL_INDEX_OFFSET + 8;
const FL_CREATED_MS_OFFSET: usize = FL_SEQ_OFFSET + 8;
const FL_RESERVED2_OFFSET: usize = FL_CREATED_MS_OFFSET + 8;
const FL_CRC_OFFSET: usize = FL_RESERVED2_OFFSET + 4;
const _: () = assert!(FL_CRC_OFFSET + 4 == FLOOR_BYTES);

/// Where compaction removed the journal's head up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Floor {
    #[serde(serialize_with = "hex_id")]
    pub journal_id: [u8; 16],
    /// The first segment kept: every segment with a lower index was removed.
    pub segment_index: u64,
    /// The `base_seq` of that segment: every record with a lower seq was removed.
    pub seq: u64,
    /// When the floor was written (informational).
    pub created_unix_ms: u64,
}

fn hex_id<S: serde::Serializer>(id: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&uuid::Uuid::from_bytes(*id).simple())
}

/// Why bytes are not a floor file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FloorError {
    #[error("floor file is {0} bytes, not 64")]
    Length(usize),
    #[error("bad magic")]
    BadMagic,
    #[error("checksum mismatch")]
    Checksum,
    #[error("unsupported floor version {0}")]
    UnsupportedVersion(u16),
    #[error("header length {0} is not 64")]
    BadHeaderBytes(u16),
    #[error("reserved bytes are not zero")]
    ReservedNonZero,
    #[error("segment index or seq out of range")]
    OutOfRange,
}

impl Floor {
    pub fn encode(&self) -> [u8; FLOOR_BYTES] {
        let mut b = [0u8; FLOOR_BYTES];
        b[FL_MAGIC_OFFSET..FL_MAGIC_OFFSET + 8].copy_from_slice(&FLOOR_MAGIC);
        b[FL_VERSION_OFFSET..FL_VERSION_OFFSET + 2].copy_from_slice(&FLOOR_VERSION.to_le_bytes());
        b[FL_BYTES_OFFSET..FL_BYTES_OFFSET + 2]
            .copy_from_slice(&(FLOOR_BYTES as u16).to_le_bytes());
        b[FL_JOURNAL_ID_OFFSET..FL_JOURNAL_ID_OFFSET + 16].copy_from_slice(&self.journal_id);
        b[FL_INDEX_OFFSET..FL_INDEX_OFFSET + 8].copy_from_slice(&self.segment_index.to_le_bytes());
        b[FL_SEQ_OFFSET..FL_SEQ_OFFSET + 8].copy_from_slice(&self.seq.to_le_bytes());
        b[FL_CREATED_MS_OFFSET..FL_CREATED_MS_OFFSET + 8]
            .copy_from_slice(&self.created_unix_ms.to_le_bytes());
        let crc = format::masked_crc(&b[..FL_CRC_OFFSET]);
        b[FL_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a whole floor file, checking in the order journal-format.md lists. Total.
    pub fn decode(bytes: &[u8]) -> Result<Floor, FloorError> {
        if bytes.len() != FLOOR_BYTES {
            return Err(FloorError::Length(bytes.len()));
        }
        if bytes[FL_MAGIC_OFFSET..FL_MAGIC_OFFSET + 8] != FLOOR_MAGIC {
            return Err(FloorError::BadMagic);
        }
        if u32_at(bytes, FL_CRC_OFFSET) != format::masked_crc(&bytes[..FL_CRC_OFFSET]) {
            return Err(FloorError::Checksum);
        }
        let version = u16_at(bytes, FL_VERSION_OFFSET);
        if version != FLOOR_VERSION {
            return Err(FloorError::UnsupportedVersion(version));
        }
        let header_bytes = u16_at(bytes, FL_BYTES_OFFSET);
        if usize::from(header_bytes) != FLOOR_BYTES {
            return Err(FloorError::BadHeaderBytes(header_bytes));
        }
        if u32_at(bytes, FL_RESERVED_OFFSET) != 0 || u32_at(bytes, FL_RESERVED2_OFFSET) != 0 {
            return Err(FloorError::ReservedNonZero);
        }
        let mut journal_id = [0u8; 16];
        journal_id.copy_from_slice(&bytes[FL_JOURNAL_ID_OFFSET..FL_JOURNAL_ID_OFFSET + 16]);
        let segment_index = u64_at(bytes, FL_INDEX_OFFSET);
        let seq = u64_at(bytes, FL_SEQ_OFFSET);
        if segment_index > SEGMENT_INDEX_MAX || seq == 0 || seq > SEQ_MAX {
            return Err(FloorError::OutOfRange);
        }
        Ok(Floor {
            journal_id,
            segment_index,
            seq,
            created_unix_ms: u64_at(bytes, FL_CREATED_MS_OFFSET),
        })
    }
}

/// What the journal directory says about compaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FloorRead {
    /// No `FLOOR`: nothing was ever compacted.
    Absent,
    Good(Floor),
    /// A `FLOOR` that does not decode, with why: ignored (reported), so the head reads as a gap.
    Bad(String),
}

impl FloorRead {
    pub fn good(&self) -> Option<Floor> {
        match self {
            FloorRead::Good(f) => Some(*f),
            _ => None,
        }
    }
}

/// Reads `dir/FLOOR`. Only I/O errors other than a missing file are errors.
pub(crate) fn read_floor(dir: &Path) -> std::io::Result<FloorRead> {
    let path = dir.join(FLOOR_FILE);
    let mut bytes = Vec::new();
    match std::fs::File::open(&path) {
        Ok(file) => {
            // A floor is 64 bytes; read one more to tell a longer file apart, never more.
            std::io::Read::read_to_end(
                &mut std::io::Read::take(file, FLOOR_BYTES as u64 + 1),
                &mut bytes,
            )?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FloorRead::Absent),
        Err(e) => return Err(e),
    }
    Ok(match Floor::decode(&bytes) {
        Ok(floor) => FloorRead::Good(floor),
        Err(e) => FloorRead::Bad(e.to_string()),
    })
}

/// The floor recovery uses: a good `FLOOR` whose journal matches the first segment at or above
/// it that recovery could use (so a floor copied in from another journal is not obeyed).
pub(crate) fn floor_in_force(
    dir: &Path,
    listed: &[(u64, PathBuf)],
) -> std::io::Result<(Option<Floor>, Option<String>)> {
    match read_floor(dir)? {
        FloorRead::Absent => Ok((None, None)),
        FloorRead::Bad(reason) => Ok((None, Some(reason))),
        FloorRead::Good(floor) => match first_header_from(listed, floor.segment_index)? {
            Some(h) if h.journal_id != floor.journal_id => Ok((
                None,
                Some("FLOOR belongs to another journal than its segments".to_owned()),
            )),
            _ => Ok((Some(floor), None)),
        },
    }
}

/// The header of the first listed segment with index `>= from` whose header decodes and names
/// its own file: the segment recovery would take the journal's identity from.
fn first_header_from(
    listed: &[(u64, PathBuf)],
    from: u64,
) -> std::io::Result<Option<SegmentHeader>> {
    for (index, path) in listed.iter().filter(|(i, _)| *i >= from) {
        if let Some(h) = read_header(path)?
            && h.segment_index == *index
        {
            return Ok(Some(h));
        }
    }
    Ok(None)
}

/// The decoded header of a segment file; `None` when it does not decode or the file vanished.
fn read_header(path: &Path) -> std::io::Result<Option<SegmentHeader>> {
    use std::os::unix::fs::FileExt;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = [0u8; SEGMENT_HEADER_BYTES];
    match file.read_exact_at(&mut bytes, 0) {
        Ok(()) => Ok(SegmentHeader::decode(&bytes).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// What the journal knows about itself before its scan: enough to choose a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The journal's identity: the floor's, else the first usable segment's (`None`: no journal).
    pub journal_id: Option<[u8; 16]>,
    pub floor: Option<Floor>,
}

/// Reads the floor and the first usable segment's header of `dir` (read-only, cheap: two small
/// reads). A missing directory is an empty head.
pub(crate) fn peek_head(dir: &Path) -> std::io::Result<Head> {
    if !dir.is_dir() {
        return Ok(Head {
            journal_id: None,
            floor: None,
        });
    }
    let (listed, _, _) = recovery::list_segments(dir)?;
    let (floor, _) = floor_in_force(dir, &listed)?;
    let journal_id = match floor {
        Some(f) => Some(f.journal_id),
        None => first_header_from(&listed, 0)?.map(|h| h.journal_id),
    };
    Ok(Head { journal_id, floor })
}

/// An event ID of a record that compaction may remove, kept so that a retry of it still finds
/// it: its record's seq and kind. (A snapshot keeps no more of where the record was: the
/// position of a removed record is its seq, with segment and offset 0.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetainedId {
    pub id: EventId,
    pub seq: u64,
    pub kind: u16,
}

impl RetainedId {
    /// Where the journal says the record is: its seq, segment and offset 0.
    pub fn position(&self) -> Position {
        Position {
            seq: self.seq,
            segment_index: 0,
            offset: 0,
        }
    }
}

/// What the layer above hands the journal at open.
#[derive(Debug, Clone, Default)]
pub struct Resume {
    /// Records with a seq at or below this are still checked (and indexed) but not handed to the
    /// visitor: a snapshot already holds what they did. 0: hand out everything.
    pub after_seq: u64,
    /// IDs of records that may have been removed by compaction; the journal knows them as if it
    /// had scanned their records (a record still on disk under the same ID and seq is the same
    /// record, not a duplicate). In any order; the journal sorts them where they are (in
    /// ascending order by ID already, or in few ascending runs, that costs one pass).
    pub ids: Vec<RetainedId>,
}

/// The steps of a snapshot write and of a compaction, named so that a test can stop the sequence
/// at any one of them, as a crash there would. Production passes [`NoCrash`].
pub trait CrashPoints {
    /// Called before each step that changes the file system; an error stops the sequence there
    /// (the steps before it happened, this one and the later ones did not).
    fn reached(&mut self, step: &'static str) -> std::io::Result<()>;
}

/// Runs every step.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCrash;

impl CrashPoints for NoCrash {
    fn reached(&mut self, _step: &'static str) -> std::io::Result<()> {
        Ok(())
    }
}

/// The names of the four steps of [`write_durably`], for [`CrashPoints`].
#[derive(Debug, Clone, Copy)]
pub struct DurableSteps {
    pub write: &'static str,
    pub fsync: &'static str,
    pub rename: &'static str,
    pub fsync_dir: &'static str,
}

/// The steps of writing `FLOOR`.
pub const FLOOR_STEPS: DurableSteps = DurableSteps {
    write: "floor: write tmp",
    fsync: "floor: fsync tmp",
    rename: "floor: rename",
    fsync_dir: "floor: fsync dir",
};

/// Writes `dir/name` durably: `name.tmp`, write, fsync, rename, directory fsync, each step
/// announced to `crash` first. A leftover `name.tmp` of an earlier attempt is replaced.
pub fn write_durably(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    steps: DurableSteps,
    crash: &mut dyn CrashPoints,
) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    crash.reached(steps.write)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    file.write_all(bytes)?;
    crash.reached(steps.fsync)?;
    file.sync_all()?;
    drop(file);
    crash.reached(steps.rename)?;
    std::fs::rename(&tmp, dir.join(name))?;
    crash.reached(steps.fsync_dir)?;
    crate::root::sync_dir(dir)
}

/// What one compaction did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Compacted {
    /// The floor in force afterwards (`None`: the journal was never compacted).
    pub floor: Option<Floor>,
    /// Segment files deleted by this call.
    pub removed_segments: u64,
    /// Their bytes.
    pub removed_bytes: u64,
}

/// Deletes the segment files below `floor`, lowest index first, then syncs the directory.
/// Returns how many files and bytes went.
pub(crate) fn remove_below(
    dir: &Path,
    floor: &Floor,
    crash: &mut dyn CrashPoints,
) -> std::io::Result<(u64, u64)> {
    let (listed, _, _) = recovery::list_segments(dir)?;
    let (mut files, mut bytes) = (0, 0);
    for (index, path) in listed {
        if index >= floor.segment_index {
            break;
        }
        crash.reached("compaction: delete segment")?;
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        match std::fs::remove_file(&path) {
            Ok(()) => {
                files += 1;
                bytes += len;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    if files > 0 {
        crash.reached("compaction: fsync dir")?;
        crate::root::sync_dir(dir)?;
    }
    Ok((files, bytes))
}

impl super::reader::JournalReader {
    /// The floor and identity of the journal (see [`Head`]), read without a lock.
    pub fn head(&self) -> Result<Head, JournalError> {
        let dir = self.dir();
        peek_head(&dir).map_err(|cause| JournalError::Io {
            dir,
            op: "read journal head",
            cause,
        })
    }
}

impl Journal {
    /// This journal's identity (the `journal_id` of its segments).
    pub fn journal_id(&self) -> [u8; 16] {
        lock(&self.writer).header.journal_id
    }

    /// The floor in force: where compaction removed the journal's head up to (`None`: never).
    pub fn floor(&self) -> Result<Option<Floor>, JournalError> {
        let dir = self.dir();
        read_floor(&dir)
            .map(|f| f.good())
            .map_err(|cause| JournalError::Io {
                dir,
                op: "read floor",
                cause,
            })
    }

    /// Looks up event IDs in the journal's index: for each one, the seq and kind of its record
    /// when the journal holds it at a seq up to `max_seq`. One lock hold per call: callers pass a
    /// few thousand at a time, so that appenders are not held up for long.
    pub fn lookup_ids(&self, ids: &[EventId], max_seq: u64) -> Vec<Option<(u64, u16)>> {
        let w = lock(&self.writer);
        ids.iter()
            .map(|id| {
                let (position, kind) = w.ids.get(&id.as_bytes())?;
                (position.seq <= max_seq).then_some((position.seq, kind))
            })
            .collect()
    }

    /// Removes every segment all of whose records have a seq below `keep_from_seq`, crash-safely
    /// (module doc). Never removes the active segment, never moves the floor backwards, and stops
    /// below the first segment whose header does not decode. The caller must hold a durable
    /// snapshot that covers every record below `keep_from_seq`.
    pub fn compact_below(&self, keep_from_seq: u64) -> Result<Compacted, JournalError> {
        self.compact_below_with(keep_from_seq, &mut NoCrash)
    }

    /// [`Journal::compact_below`], announcing each step to `crash` (tests stop it there).
    pub fn compact_below_with(
        &self,
        keep_from_seq: u64,
        crash: &mut dyn CrashPoints,
    ) -> Result<Compacted, JournalError> {
        let dir = self.dir();
        let io = |op: &'static str| {
            let dir = dir.clone();
            move |cause| JournalError::Io { dir, op, cause }
        };
        let (active, journal_id) = {
            let w = lock(&self.writer);
            (w.header.segment_index, w.header.journal_id)
        };
        let current = read_floor(&dir).map_err(io("read floor"))?.good();
        let (listed, _, _) = recovery::list_segments(&dir).map_err(io("list segments"))?;
        // The floor is the highest usable segment, at most the active one, whose base seq is at
        // most `keep_from_seq`: every segment below it holds only records below its base seq.
        let mut target: Option<(u64, u64)> = None;
        for (index, path) in &listed {
            if current.is_some_and(|c| *index < c.segment_index) {
                continue; // a leftover of an interrupted removal, finished below
            }
            if *index > active {
                break;
            }
            let header = read_header(path).map_err(io("read segment header"))?;
            match header {
                Some(h) if h.segment_index == *index && h.journal_id == journal_id => {
                    if h.base_seq > keep_from_seq {
                        break;
                    }
                    target = Some((*index, h.base_seq));
                }
                // Compaction never removes what recovery would report as bad.
                _ => break,
            }
        }
        let floor = match (target, current) {
            (Some((index, seq)), current) if current.is_none_or(|c| index > c.segment_index) => {
                Floor {
                    journal_id,
                    segment_index: index,
                    seq,
                    created_unix_ms: now_unix_ms(),
                }
            }
            // Nothing new to remove; finish an interrupted removal below the current floor.
            (_, Some(current)) => {
                let (files, bytes) =
                    remove_below(&dir, &current, crash).map_err(io("remove segment"))?;
                self.forget_segments(files);
                return Ok(Compacted {
                    floor: Some(current),
                    removed_segments: files,
                    removed_bytes: bytes,
                });
            }
            (_, None) => {
                return Ok(Compacted {
                    floor: None,
                    removed_segments: 0,
                    removed_bytes: 0,
                });
            }
        };
        if floor.segment_index == 0 {
            // The first segment stays: nothing to remove, and no floor to write.
            return Ok(Compacted {
                floor: current,
                removed_segments: 0,
                removed_bytes: 0,
            });
        }
        write_durably(&dir, FLOOR_FILE, &floor.encode(), FLOOR_STEPS, crash)
            .map_err(io("write floor"))?;
        let (files, bytes) = remove_below(&dir, &floor, crash).map_err(io("remove segment"))?;
        self.forget_segments(files);
        tracing::debug!(
            floor_segment = floor.segment_index,
            floor_seq = floor.seq,
            files,
            "journal compacted"
        );
        Ok(Compacted {
            floor: Some(floor),
            removed_segments: files,
            removed_bytes: bytes,
        })
    }

    fn forget_segments(&self, files: u64) {
        let mut w = lock(&self.writer);
        w.segment_count = w
            .segment_count
            .saturating_sub(usize::try_from(files).unwrap_or(usize::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floor() -> Floor {
        Floor {
            journal_id: *b"procjournal-test",
            segment_index: 7,
            seq: 1234,
            created_unix_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn a_floor_round_trips_and_every_byte_is_checked() {
        let f = floor();
        let bytes = f.encode();
        assert_eq!(Floor::decode(&bytes), Ok(f));
        assert_eq!(&bytes[..8], b"PJFLOOR\0");
        // Any single flipped bit is refused (the checksum covers every byte before it).
        for at in 0..FLOOR_BYTES {
            let mut b = bytes;
            b[at] ^= 0x10;
            assert!(Floor::decode(&b).is_err(), "flip at {at} accepted");
        }
        assert_eq!(Floor::decode(&bytes[..63]), Err(FloorError::Length(63)));
        assert_eq!(Floor::decode(&[0u8; 64]), Err(FloorError::BadMagic));
    }

    #[test]
    fn a_floor_out_of_range_does_not_decode() {
        for (index, seq) in [(0, 0), (SEGMENT_INDEX_MAX + 1, 1), (1, SEQ_MAX + 1)] {
            let f = Floor {
                segment_index: index,
                seq,
                ..floor()
            };
            assert_eq!(Floor::decode(&f.encode()), Err(FloorError::OutOfRange));
        }
    }
}
