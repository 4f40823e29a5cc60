//! Opening a journal for writing: first read and plan, then act.
//!
//! The open reads first: the snapshot's resume point, the recovery scan (every record handed to
//! the visitor above that point and every event ID indexed) and the listing. From what it found
//! it plans ([`OpenPlan`]): append to the last segment again or start a new one, and whether
//! anything needs a flush. Only then does it write: crash residue removed, torn tails zeroed,
//! the active segment resumed or created, its predecessors sealed.
//!
//! Invariants:
//! - Nothing found counts as durable until it is flushed: unless the last segment was closed
//!   cleanly, it is flushed (or, when appended to, committed with a claim of every record found)
//!   before the journal hands out a seq.
//! - Nothing truncates a segment file: a torn tail is zeroed in place.
//! - The next seq is above every seq a commit point, a seal, a snapshot or a lost or unreadable
//!   segment may have used; a new segment is never named below the floor nor after a lost
//!   successor's name, so a loss stays a reported gap.
//! - An open leaves the index's table under its maximum; a lasting writer's also seals the
//!   IDs of the segments it left, a brief one's leaves them in the table ([`Tenure`]).

use std::path::Path;
use std::sync::{Arc, Condvar};

use tracing::{debug, warn};

use super::format::{self, SLOT_SEALED, SegmentHeader};
use super::idindex::{IdIndex, IndexFull};
use super::recovery::{self, DuplicateId, JournalScan, TornTail};
use super::storage::{Backend, SegmentStore};
use super::{
    Commit, Durability, EventId, Journal, JournalError, JournalOptions, OpenVisitor, Position,
    RecoveryReport, Resume, SyncState, Tenure, Writer, now_unix_ms, reader, segment_bytes_for,
};
use crate::root::Root;
use crate::root::dir::Dir;
use crate::sync::Lock;

/// An I/O error of the journal in `dir`, saying what the open was doing.
fn io(dir: &Path, op: &'static str) -> impl FnOnce(std::io::Error) -> JournalError + use<> {
    JournalError::io(dir.to_owned(), op)
}

impl Journal {
    /// Opens the journal under `root` for writing, taking the root's lock, and runs recovery.
    pub(super) fn open_inner(
        root: &Path,
        options: JournalOptions,
        tenure: Tenure,
        backend: Arc<dyn Backend>,
        visitor: &mut dyn OpenVisitor,
    ) -> Result<(Journal, RecoveryReport), JournalError> {
        if !format::segment_bytes_valid(options.segment_bytes) {
            return Err(JournalError::InvalidOptions(format!(
                "segment_bytes {} must be a multiple of 4096 between {} and {}",
                options.segment_bytes,
                crate::limits::SEGMENT_BYTES_MIN,
                crate::limits::SEGMENT_BYTES_MAX
            )));
        }
        let root = Root::open_writer(root)?;
        let dir = open_dir(&root)?;
        let err = |op| io(dir.path(), op);
        let mut found = read_found(&dir, visitor, tenure)?;
        remove_residue(&dir, &found.report)?;
        cover_snapshot(&mut found);
        let Found {
            scan,
            mut report,
            ids,
            ..
        } = found;
        let (listed, _, _) = recovery::list_segments(&dir).map_err(err("list segments"))?;
        let last_listed = listed.last().map(|(i, _)| *i);
        let plan = open_plan(&scan, last_listed, listed.len(), tenure);
        settle_found(&*backend, &dir, &scan, &mut report, &plan)?;
        let through_map = options.durability == Durability::Os;
        let active = match plan.reuse {
            Some(index) => resume_segment(
                &*backend,
                &dir,
                &scan,
                &mut report,
                index,
                &plan,
                through_map,
            )?,
            None => start_segment(&*backend, &dir, &scan, &report, &plan, &options)?,
        };
        // Every usable segment before the active one is sealed, naming its successor, so that
        // the seqs between them are accounted for and a lost successor is noticed. Only a crash
        // between a rotation's steps, or a recovery that started a new segment, leaves one
        // unsealed.
        seal_predecessors(&*backend, &dir, &scan, &report, &active.header)
            .map_err(err("seal segment"))?;
        let shown = dir.path().display();
        let (next_seq, segment) = (active.next_seq, active.header.segment_index);
        debug!(dir = %shown, next_seq, segment, "journal opened");
        if !report.is_clean() {
            warn!(dir = %shown, ?report, "journal recovery found problems");
        }
        // The listing after the removals above, and the segment this open created, if any: no
        // third read of the directory.
        let segment_count = plan.listed + usize::from(plan.reuse.is_none());
        let path = dir.path().to_owned();
        let mut journal =
            Journal::assemble(root, dir, backend, ids, active, &options, segment_count);
        journal.keep_as(tenure);
        remove_leftover_spares(&journal.held).map_err(io(&path, "remove leftover spare"))?;
        Ok((journal, report))
    }

    /// Makes this a writer of `tenure`: what its index keeps on the heap, and whether it closes
    /// with a commit ([`Tenure`]).
    fn keep_as(&mut self, tenure: Tenure) {
        self.tenure = tenure;
        let mut w = self.writer.lock();
        let retained = w.ids.retained_len();
        if retained > 0 && (tenure == Tenure::Lasting || retained > super::RETAINED_HEAP_MAX) {
            let spill = crate::spill::Spill::in_dir(&w.dir);
            if let Err(e) = w.ids.spill_retained(spill) {
                warn!("the journal's retained IDs stay on the heap: {e}");
            }
        }
        if tenure == Tenure::Lasting {
            w.seal_ids();
        }
        w.bound_ids();
    }

    /// The handle over what the open made ready: `active` appended to next.
    fn assemble(
        root: Root,
        dir: Arc<Dir>,
        backend: Arc<dyn Backend>,
        ids: IdIndex,
        active: Active,
        options: &JournalOptions,
        segment_count: usize,
    ) -> Journal {
        let durability = options.durability;
        let durable_seq = active.durable_seq;
        Journal {
            root,
            durability,
            held: Arc::clone(&dir),
            writer: Lock::new(Writer {
                dir,
                backend,
                store: active.store,
                header: active.header,
                write_offset: active.write_offset,
                chain_crc: active.chain_crc,
                next_seq: active.next_seq,
                ids,
                segment_bytes_new: options.segment_bytes,
                segment_count,
                scratch: Vec::new(),
                through_map: durability == Durability::Os,
                spare: None,
                spare_from: super::spare_from(
                    active.write_offset,
                    active.header.segment_bytes as usize,
                ),
            }),
            commit: Lock::new(active.commit),
            sync: Lock::new(SyncState {
                durable_seq,
                leader_active: false,
            }),
            synced: Condvar::new(),
            poison: Lock::new(None),
            poisoned: std::sync::atomic::AtomicBool::new(false),
            tenure: Tenure::Lasting,
        }
    }
}

/// The segments' directory, created if missing, its entry synced in the root: it must survive
/// a power loss like the segments inside it.
fn open_dir(root: &Root) -> Result<Arc<Dir>, JournalError> {
    root.dir()
        .ok_or_else(|| std::io::Error::other("a writer's root has no descriptor"))
        .and_then(|r| r.sub("journal", true))
        .map(Arc::new)
        .map_err(io(&root.journal_dir(), "open journal directory"))
}

/// What the read half of the open found.
struct Found {
    scan: JournalScan,
    /// Taken out of `scan`, with the duplicate IDs added.
    report: RecoveryReport,
    /// Every event ID: of the records on disk and of those compaction removed.
    ids: IdIndex,
    /// The resume point of the snapshot the visitor started from (0: none).
    after_seq: u64,
}

/// Scans the journal, handing the visitor every record above its resume point, and indexes
/// every event ID but, for a brief writer, those of the records the snapshot covers (their
/// retained IDs come with the snapshot: [`index_for`]).
fn read_found(
    dir: &Dir,
    visitor: &mut dyn OpenVisitor,
    tenure: Tenure,
) -> Result<Found, JournalError> {
    let err = |op| io(dir.path(), op);
    let (resume, floor_seq) = if visitor.resumes() {
        let head = super::compact::head_of(dir).map_err(err("read journal head"))?;
        let floor_seq = head.floor.as_ref().map_or(0, |f| f.seq);
        (visitor.resume(&head), floor_seq)
    } else {
        (Resume::default(), 0)
    };
    let (covered, mut ids) = index_for(&resume, floor_seq, tenure);
    let (mut index_full, mut unindexed) = (false, 0);
    let mut duplicates = Vec::new();
    // The open holds the root's lock (`Root::open_writer`) and has stored nothing yet: its scan
    // may read the segments in place.
    let mut scan = recovery::scan_journal(dir, recovery::Reading::Mapped, |r| {
        let position = Position {
            seq: r.header.seq,
            segment_index: r.segment_index,
            offset: r.offset,
        };
        if r.header.seq > resume.after_seq {
            visitor.record(reader::view(&r));
        }
        if r.header.seq <= covered {
            unindexed += 1;
            return;
        }
        match ids.insert(r.header.event_id, position, r.header.kind) {
            Ok(None) => {}
            Ok(Some((first, _))) => {
                duplicates.push(duplicate(r.header.event_id, first.seq, position.seq));
            }
            Err(IndexFull) => index_full = true,
        }
    })
    .map_err(err("scan segments"))?;
    // IDs of records compaction removed (and of records still on disk, which the scan
    // indexed already, with their exact place): known as if their records were there, kept
    // in one sorted array beside the table (`idindex.rs`). One under the same ID at another
    // seq is a duplicate, the lower seq standing, as a scan of the whole journal would have
    // found it.
    let after_seq = resume.after_seq;
    duplicates.extend(
        ids.add_retained(resume.ids)
            .into_iter()
            .map(|d| duplicate(d.key, d.first_seq, d.duplicate_seq)),
    );
    if index_full {
        return Err(JournalError::TooManyRecords {
            max: IdIndex::CAPACITY,
        });
    }
    let mut report = std::mem::take(&mut scan.report);
    report.duplicate_ids = duplicates;
    report.unindexed_records = unindexed;
    Ok(Found {
        scan,
        report,
        ids,
        after_seq,
    })
}

fn duplicate(key: [u8; 16], first_seq: u64, duplicate_seq: u64) -> DuplicateId {
    DuplicateId {
        event_id: EventId::from_bytes(key).to_string(),
        first_seq,
        duplicate_seq,
    }
}

/// The seq up to which the scan's records go unindexed, and the index it fills. A brief writer
/// (one command's) indexes no record the snapshot it resumes from covers, as if compaction had
/// removed them: the snapshot holds the IDs a retry could name among them (its retained IDs),
/// and every other one is a fresh UUIDv7 that nothing retries across a restart
/// (journal-format.md, "What a brief writer's open does not index"). Their records are still
/// read and checked in full. A lasting writer indexes every record from the floor up to the
/// snapshot's seq (compaction keeps them on disk): its index is sized for them at once instead
/// of re-filed at every doubling.
fn index_for(resume: &Resume, floor_seq: u64, tenure: Tenure) -> (u64, IdIndex) {
    let covered = match tenure {
        Tenure::Brief => resume.after_seq,
        Tenure::Lasting => 0,
    };
    let below_snapshot = (resume.after_seq - covered).saturating_sub(floor_seq);
    let ids = IdIndex::sized_for(usize::try_from(below_snapshot).unwrap_or(usize::MAX));
    (covered, ids)
}

/// Removes crash residue: interrupted segment creations (which never held a record), and the
/// segments an interrupted compaction had yet to remove (lowest index first; the directory sync
/// of a later step makes the removals durable).
fn remove_residue(dir: &Dir, report: &RecoveryReport) -> Result<(), JournalError> {
    for name in &report.leftover_tmp_files {
        dir.remove(name)
            .map_err(io(dir.path(), "remove leftover segment"))?;
    }
    for name in &report.compacted_leftovers {
        match dir.remove(name) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(dir.path(), "remove compacted segment")(e)),
        }
    }
    Ok(())
}

/// A snapshot covers records the segments no longer hold (outside damage: a snapshot is
/// written only once its seq is durable). Those seqs are never reused: the next record comes
/// after the snapshot's, and the missing range is a reported gap.
fn cover_snapshot(found: &mut Found) {
    let (scan, report) = (&mut found.scan, &mut found.report);
    if found.after_seq >= scan.seq_floor {
        report.gaps.push(recovery::SeqGap {
            after_seq: scan.last_seq,
            next_seq: found.after_seq + 1,
        });
        scan.seq_floor = found.after_seq + 1;
        report.next_seq_floor = scan.seq_floor;
    }
}

/// What the open does to the segments it found before it appends: every torn tail zeroed in
/// place (the tail of the segment appended to is zeroed through its own store, under the same
/// flush as the commit that follows), and the last segment flushed unless it was closed
/// cleanly. A previous writer under `Os`, or one that crashed before its flush returned, may
/// have left records only in the page cache; rotation flushes a segment before it starts the
/// next one, so only the last segment can hold unflushed records.
fn settle_found(
    backend: &dyn Backend,
    dir: &Dir,
    scan: &JournalScan,
    report: &mut RecoveryReport,
    plan: &OpenPlan,
) -> Result<(), JournalError> {
    for tail in &mut report.torn_tails {
        if plan.reuse.is_some_and(|i| i == tail.segment_index) {
            continue;
        }
        zero_torn_tail(backend, dir, &scan.segments, tail)
            .map_err(io(dir.path(), "zero torn tail"))?;
    }
    if plan.reuse.is_none()
        && !plan.closed_cleanly
        && let Some(last) = scan.segments.last()
    {
        backend
            .sync_segment(dir, recovery::name_of(&last.path))
            .map_err(io(dir.path(), "sync segment"))?;
    }
    Ok(())
}

/// The segment appended to, and where the next record goes.
struct Active {
    store: Box<dyn SegmentStore>,
    header: SegmentHeader,
    write_offset: usize,
    chain_crc: u32,
    next_seq: u64,
    /// The highest seq known flushed: the last one found, unless a brief writer left the
    /// flush of what it found to its first commit.
    durable_seq: u64,
    commit: Commit,
}

/// Appends to segment `index` again: a short file extended, its torn tail (if any) zeroed
/// through its own store, and, unless it was closed cleanly, one flush that makes the zeroed
/// tail and every record found durable under a claim of all of them. A brief writer leaves
/// that flush to its first commit (see [`Tenure`]): until then its durable seq is the one the
/// segment's commit area confirms, so that acknowledging a record found past it flushes.
fn resume_segment(
    backend: &dyn Backend,
    dir: &Dir,
    scan: &JournalScan,
    report: &mut RecoveryReport,
    index: u64,
    plan: &OpenPlan,
    through_map: bool,
) -> Result<Active, JournalError> {
    let err = |op| io(dir.path(), op);
    let segment = scan
        .segments
        .iter()
        .find(|s| s.header.segment_index == index)
        .ok_or_else(|| JournalError::InvalidOptions("reused segment vanished".into()))?;
    let bytes = segment.header.segment_bytes as usize;
    let name = recovery::name_of(&segment.path);
    if segment.file_len < bytes as u64 {
        backend
            .extend_segment(dir, name, bytes)
            .map_err(err("extend short segment"))?;
    }
    let mut store = backend
        .open_segment(dir, name, bytes, through_map)
        .map_err(err("map active segment"))?;
    let mut write_offset = segment.end_offset;
    let torn = report.torn_tails.iter_mut();
    if let Some(tail) = torn.into_iter().find(|t| t.segment_index == index) {
        let end = (tail.end_offset as usize).min(bytes);
        let start = tail.start_offset as usize;
        if end > start {
            store
                .write_at(start, &vec![0u8; end - start])
                .map_err(err("zero torn tail"))?;
        }
        tail.zeroed = true;
        write_offset = start;
    }
    let next_seq = segment.last_seq.map_or(segment.header.base_seq, |q| q + 1);
    let mut commit = Commit::resume(store.syncer(), &segment.header, segment.commit);
    let found = next_seq - 1;
    let durable_seq = match (plan.closed_cleanly, plan.tenure) {
        (true, _) => found,
        (false, Tenure::Brief) => {
            let confirmed = segment.commit.map(|c| c.confirmed);
            confirmed.unwrap_or(segment.header.base_seq - 1).min(found)
        }
        (false, Tenure::Lasting) => {
            commit
                .write(0, found, write_offset, None)
                .map_err(err("commit recovered records"))?;
            found
        }
    };
    Ok(Active {
        store,
        header: segment.header,
        write_offset,
        chain_crc: segment.chain_crc,
        next_seq,
        durable_seq,
        commit,
    })
}

/// Starts a new segment after every segment found, its first seq above everything the scan
/// accounts for.
fn start_segment(
    backend: &dyn Backend,
    dir: &Dir,
    scan: &JournalScan,
    report: &RecoveryReport,
    plan: &OpenPlan,
    options: &JournalOptions,
) -> Result<Active, JournalError> {
    let next_seq = scan.seq_floor.max(plan.base_floor);
    // Never below the floor: a segment there would read as a compaction leftover. Never under
    // the name of a successor a seal names and no file holds: a new segment there would stand
    // in for the lost one, and every later scan would find the journal whole; past it, the loss
    // stays a reported gap.
    let lost_successor = report
        .missing_segments
        .iter()
        .map(|m| m.segment_index + 1)
        .max();
    let index = plan
        .last_listed
        .map_or(0, |i| i + 1)
        .max(report.floor.map_or(0, |f| f.segment_index))
        .max(lost_successor.unwrap_or(0));
    // The same limits rotation keeps: a journal must stay openable.
    if index > crate::limits::SEGMENT_INDEX_MAX
        || next_seq > crate::limits::SEQ_MAX
        || plan.listed >= crate::limits::SEGMENT_COUNT_MAX
    {
        return Err(JournalError::Full {
            max: crate::limits::SEGMENT_COUNT_MAX,
        });
    }
    // With every segment gone, a floor in force still names the journal (a new identity would
    // put the floor, and every snapshot, out of force at the next open).
    let journal_id = scan
        .journal_id
        .or(report.floor.map(|f| f.journal_id))
        .unwrap_or_else(|| *uuid::Uuid::new_v4().as_bytes());
    let header = SegmentHeader {
        format_version: format::FORMAT_VERSION,
        segment_bytes: segment_bytes_for(index, options.segment_bytes) as u32,
        journal_id,
        segment_index: index,
        base_seq: next_seq,
        created_unix_ms: now_unix_ms(),
    };
    let through_map = options.durability == Durability::Os;
    let store = create_segment(backend, dir, &header, through_map)
        .map_err(io(dir.path(), "create segment"))?;
    let commit = Commit::resume(store.syncer(), &header, None);
    Ok(Active {
        store,
        header,
        write_offset: header.records_offset(),
        chain_crc: header.crc(),
        next_seq,
        // Nothing in the new segment yet, and every older one was flushed (`settle_found`).
        durable_seq: next_seq - 1,
        commit,
    })
}

/// What a writable open does with the segments it found.
#[derive(Debug, Clone, Copy)]
struct OpenPlan {
    /// The segment appended to, when the last one may be: a version 2 segment, not sealed,
    /// whose commit area is readable and whose records reach every seq it claims.
    reuse: Option<u64>,
    /// The last segment was closed cleanly after its last flush: nothing needs flushing.
    closed_cleanly: bool,
    /// Of the writer: a brief one leaves the flush of what it found to its first commit.
    tenure: Tenure,
    /// A new segment never starts below the base seq of any segment found (an empty one
    /// included).
    base_floor: u64,
    /// The highest segment index listed after the residue went, and how many were listed.
    last_listed: Option<u64>,
    listed: usize,
}

fn open_plan(
    scan: &JournalScan,
    last_listed: Option<u64>,
    listed: usize,
    tenure: Tenure,
) -> OpenPlan {
    let base_floor = scan
        .segments
        .iter()
        .map(|s| s.header.base_seq)
        .max()
        .unwrap_or(1);
    let last = scan.segments.last();
    let next_in = |s: &recovery::ScannedSegment| s.last_seq.map_or(s.header.base_seq, |q| q + 1);
    let reuse = last
        .filter(|s| Some(s.header.segment_index) == last_listed)
        .filter(|s| {
            // A version 1 segment is never appended to: the journal continues in a version 2
            // segment (the upgrade).
            s.commit.is_some_and(|c| {
                !c.damaged
                    && c.seal().is_none()
                    && next_in(s) > c.claimed
                    && next_in(s) >= scan.seq_floor
            })
        })
        .map(|s| s.header.segment_index);
    let closed_cleanly = last.is_some_and(|s| {
        s.commit.and_then(|c| c.closed()).is_some_and(|slot| {
            slot.committed_seq + 1 == next_in(s)
                && slot.end_offset as usize == s.end_offset
                && s.trailing.is_none()
                && s.file_len == u64::from(s.header.segment_bytes)
        })
    });
    OpenPlan {
        reuse,
        closed_cleanly,
        tenure,
        base_floor,
        last_listed,
        listed,
    }
}

/// Seals every usable version 2 segment before `active` that is not sealed yet, naming the
/// segment that follows it. The seal claims the records the segment holds, or, when records it
/// had confirmed are lost, keeps that claim so that the loss is reported at every open.
///
/// A seal never hides what the scan found: a segment whose trailing bad range was damage (not a
/// torn tail this open zeroed) is left unsealed, so the full scan keeps finding it; and a seal
/// names the successor's base seq only when this segment's claim accounts for the seqs before it,
/// otherwise the seq right after its records, so that a gap stays a gap.
fn seal_predecessors(
    backend: &dyn Backend,
    dir: &Dir,
    scan: &JournalScan,
    report: &RecoveryReport,
    active: &SegmentHeader,
) -> std::io::Result<()> {
    let usable: Vec<&recovery::ScannedSegment> = scan
        .segments
        .iter()
        .filter(|s| s.header.segment_index < active.segment_index)
        .collect();
    for (at, segment) in usable.iter().enumerate() {
        let Some(point) = segment.commit else {
            continue;
        };
        if point.damaged || point.seal().is_some() {
            continue;
        }
        let index = segment.header.segment_index;
        let tail_zeroed = report
            .torn_tails
            .iter()
            .any(|t| t.segment_index == index && t.zeroed);
        if segment.trailing.is_some() && !tail_zeroed {
            continue;
        }
        let successor = usable.get(at + 1).map_or(active, |s| &s.header);
        let first_missing = segment.last_seq.map_or(segment.header.base_seq, |q| q + 1);
        let committed = if first_missing <= point.confirmed {
            point.claimed
        } else {
            first_missing - 1
        };
        let next_base = if point.claimed + 1 >= successor.base_seq {
            successor.base_seq
        } else {
            committed + 1
        };
        let bytes = segment.header.segment_bytes as usize;
        let name = recovery::name_of(&segment.path);
        if segment.file_len < bytes as u64 {
            backend.extend_segment(dir, name, bytes)?;
        }
        let store = backend.open_segment(dir, name, bytes, false)?;
        Commit::resume(store.syncer(), &segment.header, Some(point)).write(
            SLOT_SEALED,
            committed,
            segment.end_offset,
            Some((successor.segment_bytes, next_base)),
        )?;
    }
    Ok(())
}

fn create_segment(
    backend: &dyn Backend,
    dir: &Dir,
    header: &SegmentHeader,
    through_map: bool,
) -> std::io::Result<Box<dyn SegmentStore>> {
    let name = recovery::segment_file_name(header.segment_index);
    backend.create_segment(dir, &name, &header.encode(), header.segment_bytes as usize)?;
    backend.open_segment(dir, &name, header.segment_bytes as usize, through_map)
}

/// Spare files of an earlier writer never held a record; they are not segments.
fn remove_leftover_spares(dir: &Dir) -> std::io::Result<()> {
    for name in dir.names()? {
        if let Some(name) = name.to_str().filter(|n| n.ends_with(".spare")) {
            dir.remove(name)?;
        }
    }
    Ok(())
}

fn zero_torn_tail(
    backend: &dyn Backend,
    dir: &Dir,
    segments: &[recovery::ScannedSegment],
    tail: &mut TornTail,
) -> std::io::Result<()> {
    let Some(segment) = segments
        .iter()
        .find(|s| s.header.segment_index == tail.segment_index)
    else {
        return Ok(());
    };
    let segment_bytes = segment.header.segment_bytes as usize;
    let name = recovery::name_of(&segment.path);
    if segment.file_len < segment_bytes as u64 {
        backend.extend_segment(dir, name, segment_bytes)?;
    }
    let mut store = backend.open_segment(dir, name, segment_bytes, false)?;
    let start = tail.start_offset as usize;
    let end = (tail.end_offset as usize).min(segment_bytes);
    if end > start {
        store.write_at(start, &vec![0u8; end - start])?;
        store.syncer().sync()?;
    }
    tail.zeroed = true;
    Ok(())
}
