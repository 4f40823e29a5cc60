//! Compaction: removing whole segments below a sequence number, after `journal/FLOOR` (its
//! bytes and what recovery makes of it: `floor.rs`) says the missing head is compaction, not loss.
//!
//! The journal does not decide *whether* records may go: the lifecycle layer compacts only below
//! what a durable snapshot of its projection covers (src/lifecycle/snapdir.rs). What this module
//! keeps is the crash-safety of the removal (journal-format.md, "Snapshots and compaction"):
//!
//! - `FLOOR` is written durably (`FLOOR.tmp`, fsync, rename, directory fsync) *before* any
//!   segment is deleted, and it never moves backwards.
//! - Segments are deleted lowest index first, then the directory is synced. A crash anywhere
//!   leaves the old floor and every segment, or the new floor and a contiguous suffix of segments
//!   plus some below the floor: recovery reads those as compaction leftovers (reported, never
//!   scanned) and a writable open finishes deleting them.
//! - The active segment is never removed, and compaction stops below the first segment whose
//!   header does not decode (it would hide a bad segment's report), so the floor segment is always
//!   one recovery can use.
//!
//! Also here: [`Head`], what the journal knows before its scan, for choosing a snapshot, and the
//! durable write of a small file (`write_durably`, with its [`CrashPoints`]) that snapshots
//! use too.

use std::io::Write;
use std::path::Path;

use crate::root::dir::{Access, Dir};

use serde::Serialize;

use super::floor::{
    FLOOR_FILE, Floor, RetainedId, first_header_from, floor_in_force, read_floor, read_header,
};
use super::recovery;
use super::{EventId, Journal, JournalError, now_unix_ms};

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
    head_of(&Dir::reader(dir)?)
}

/// [`peek_head`] of a directory already held.
pub(crate) fn head_of(dir: &Dir) -> std::io::Result<Head> {
    let (listed, _, _) = recovery::list_segments(dir)?;
    let (floor, _) = floor_in_force(dir, &listed)?;
    let journal_id = match floor {
        Some(f) => Some(f.journal_id),
        None => first_header_from(dir, &listed, 0)?.map(|h| h.journal_id),
    };
    Ok(Head { journal_id, floor })
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

/// The names of the four steps of `write_durably`, for [`CrashPoints`].
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

/// Writes `parts`, laid end to end, as `dir/name` durably: `name.tmp`, write, fsync, rename,
/// directory fsync, each step announced to `crash` first. A leftover `name.tmp` of an earlier
/// attempt is replaced.
pub(crate) fn write_durably(
    dir: &Dir,
    name: &str,
    parts: &[&[u8]],
    steps: DurableSteps,
    crash: &mut dyn CrashPoints,
) -> std::io::Result<()> {
    let tmp = format!("{name}.tmp");
    crash.reached(steps.write)?;
    match dir.remove(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = dir.file(&tmp, Access::CreateNew)?;
    for part in parts {
        file.write_all(part)?;
    }
    crash.reached(steps.fsync)?;
    file.sync_all()?;
    drop(file);
    crash.reached(steps.rename)?;
    dir.rename(&tmp, name)?;
    crash.reached(steps.fsync_dir)?;
    dir.sync()
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
    dir: &Dir,
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
        let name = recovery::name_of(&path);
        let len = match dir.kind(name) {
            Ok(Some(crate::root::dir::Kind::File { len })) => len,
            _ => 0,
        };
        match dir.remove(name) {
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
        dir.sync()?;
    }
    Ok((files, bytes))
}

impl super::reader::JournalReader {
    /// The floor and identity of the journal (see [`Head`]), read without a lock.
    pub fn head(&self) -> Result<Head, JournalError> {
        let dir = self.dir();
        peek_head(&dir).map_err(JournalError::io(dir.clone(), "read journal head"))
    }
}

impl Journal {
    /// This journal's identity (the `journal_id` of its segments).
    pub fn journal_id(&self) -> [u8; 16] {
        self.writer.lock().header.journal_id
    }

    /// The floor in force: where compaction removed the journal's head up to (`None`: never).
    pub fn floor(&self) -> Result<Option<Floor>, JournalError> {
        read_floor(&self.held)
            .map(|f| f.good())
            .map_err(JournalError::io(self.dir(), "read floor"))
    }

    /// Looks up event IDs in the journal's index: for each one, the seq and kind of its record
    /// when the journal holds it at a seq up to `max_seq`. One lock hold per call: callers pass a
    /// few thousand at a time, so that appenders are not held up for long.
    pub fn lookup_ids(&self, ids: &[EventId], max_seq: u64) -> Vec<Option<(u64, u16)>> {
        let w = self.writer.lock();
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
        let io = |op: &'static str| JournalError::io(self.dir(), op);
        let dir = &*self.held;
        let (active, journal_id) = {
            let w = self.writer.lock();
            (w.header.segment_index, w.header.journal_id)
        };
        let current = read_floor(dir).map_err(io("read floor"))?.good();
        let (listed, _, _) = recovery::list_segments(dir).map_err(io("list segments"))?;
        let target = floor_target(dir, &listed, current, (active, journal_id), keep_from_seq)
            .map_err(io("read segment header"))?;
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
                    remove_below(dir, &current, crash).map_err(io("remove segment"))?;
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
        write_durably(dir, FLOOR_FILE, &[&floor.encode()], FLOOR_STEPS, crash)
            .map_err(io("write floor"))?;
        let (files, bytes) = remove_below(dir, &floor, crash).map_err(io("remove segment"))?;
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

    /// Forgets the event IDs of the records compaction removed, every one with a seq below
    /// `floor_seq`, but for `keep`: the IDs a retry could still name, which the index keeps (as
    /// an open resuming from the snapshot that names them would). A later append under a
    /// forgotten ID is a new record, as it would be after a restart. Returns how many entries
    /// left the index's table.
    pub fn forget_ids_below(&self, floor_seq: u64, keep: Vec<RetainedId>) -> usize {
        let mut w = self.writer.lock();
        let dir = std::sync::Arc::clone(&w.dir);
        w.ids
            .forget_below(floor_seq, keep, &mut || crate::spill::Spill::in_dir(&dir))
    }

    /// Whether the index's retained IDs live in a spill file, off the heap.
    #[cfg(any(test, feature = "test-support"))]
    pub fn retained_ids_spilled(&self) -> bool {
        self.writer.lock().ids.retained_spilled()
    }

    /// How many event IDs the index holds: in its table and sealed runs, and retained beside
    /// them.
    pub fn indexed_ids(&self) -> (usize, usize) {
        let w = self.writer.lock();
        (w.ids.len() + w.ids.sealed_len(), w.ids.retained_len())
    }

    /// How many of the index's event IDs are in sealed runs, off the heap.
    #[cfg(any(test, feature = "test-support"))]
    pub fn sealed_ids(&self) -> usize {
        self.writer.lock().ids.sealed_len()
    }

    fn forget_segments(&self, files: u64) {
        let mut w = self.writer.lock();
        w.segment_count = w
            .segment_count
            .saturating_sub(usize::try_from(files).unwrap_or(usize::MAX));
    }
}

/// The segment the new floor is to be, with its base seq: the highest usable segment, at most
/// the active one (`writer`: its index and the journal's id), whose base seq is at most
/// `keep_from_seq`; every segment below it holds only records below its base seq. `None` when
/// no segment from the current floor on qualifies.
fn floor_target(
    dir: &Dir,
    listed: &[(u64, std::path::PathBuf)],
    current: Option<Floor>,
    writer: (u64, [u8; 16]),
    keep_from_seq: u64,
) -> std::io::Result<Option<(u64, u64)>> {
    let (active, journal_id) = writer;
    let mut target = None;
    for (index, path) in listed {
        if current.is_some_and(|c| *index < c.segment_index) {
            continue; // a leftover of an interrupted removal, finished below
        }
        if *index > active {
            break;
        }
        match read_header(dir, recovery::name_of(path))? {
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
    Ok(target)
}
