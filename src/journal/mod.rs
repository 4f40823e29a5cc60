//! The journal: a segmented, checksummed, append-only event log under `<root>/journal/`.
//!
//! One writer per root appends records into the memory-mapped active segment; readers in this or
//! other processes read segment files with `pread` ([`reader`]). Every record carries a sequence
//! number (gapless within a segment, increasing across segments) and a caller-chosen 128-bit event
//! ID that is unique in the journal: appending an ID that is already present writes nothing and
//! returns the original position, so a retried publication never duplicates an event.
//!
//! Invariants:
//! - `durable_seq <= last_seq`, and `durable_seq` only ever names records that were flushed under
//!   the chosen [`Durability`]; it never moves backwards.
//! - A record is written whole into the mapping before `last_seq` advances; a failed write or flush
//!   poisons the handle, and every later call returns [`JournalError::Poisoned`] until the host opens
//!   the journal again and recovery runs (Linux marks pages clean after a failed flush, so a retried
//!   flush could falsely succeed).
//! - The writer never writes below the end of the last accepted record of the active segment, so
//!   recovery's findings about earlier bytes (damage) stay untouched unless the host says otherwise.
//! - Lock order: `writer` before `sync` is never taken; the group-commit leader drops `sync` before
//!   it takes `writer`.

pub mod compact;
pub mod floor;
pub mod format;
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;
mod idindex;
mod mmap;
pub(crate) use mmap::Prefix as MappedPrefix;
mod open;
pub mod reader;
pub mod recovery;
mod retained;
mod sealed;
pub(crate) mod storage;

#[cfg(any(test, feature = "fault-injection"))]
mod fault;
#[cfg(test)]
mod powerloss;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_covered;
#[cfg(test)]
mod tests_powerloss;

use std::path::{Path, PathBuf};

use crate::root::dir::Dir;
use crate::sync::Lock;
use std::sync::{Arc, Condvar, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tracing::{debug, warn};

pub use crate::event_id::EventId;
use crate::limits::{
    PAGE_BYTES, RECORD_HEADER_BYTES, RECORD_PAYLOAD_BYTES_MAX, SEGMENT_BYTES_DEFAULT,
    SEGMENT_BYTES_INITIAL, SEGMENT_RECORDS_OFFSET,
};
use crate::root::{Root, RootError};
pub use compact::{Compacted, CrashPoints, Head, NoCrash};
pub use floor::{Floor, Resume, RetainedId};
use format::{CommitSlot, RecordFields, SLOT_CLOSED, SLOT_SEALED, SegmentHeader};
use idindex::{IdIndex, IndexFull};
use recovery::CommitPoint;
pub use recovery::{CommitLoss, MissingSegment, RecoveryReport, Row};
use storage::{Backend, FileBackend, SegmentStore, Syncer};

/// The kind of an event: a non-zero u16 (0 is reserved so that zero fill never parses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct EventKind(std::num::NonZeroU16);

impl EventKind {
    pub const fn new(kind: u16) -> Option<Self> {
        match std::num::NonZeroU16::new(kind) {
            Some(k) => Some(EventKind(k)),
            None => None,
        }
    }
    pub const fn get(self) -> u16 {
        self.0.get()
    }
}

/// When an append counts as acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Each append is flushed (fdatasync) before it returns; concurrent appenders flush one by one.
    Sync,
    /// Each append is durable before it returns, but concurrent appenders share one flush: a leader
    /// flushes everything written so far while the others wait for the flush that covers them.
    #[default]
    Group,
    /// Appends return once the record is in the page cache; durability is left to the OS or to
    /// [`Journal::sync`]. A process crash loses nothing; a power loss may.
    Os,
}

/// How long the writer an open makes is meant to live, which decides what the open files off
/// the heap.
///
/// The open's scan files every retained record's ID in a heap table. A lasting writer (the
/// daemon, an embedder's supervisor) then moves the entries of the segments it left into
/// sealed runs in spill files, the retained IDs a snapshot handed over into another, and the
/// lifecycle its settled manifests, so that its heap stays small for as long as it runs
/// (`idindex.rs`, `retained.rs`, `runs.rs`, the manifest store). A brief writer (one command:
/// the CLI's `run` and `capture`) leaves them where the open put them, within bounds: the
/// table's maximum (`TABLE_MAX_ENTRIES`, enforced at open and after each append for both), the
/// retained IDs' (`RETAINED_HEAP_MAX`) and the lifecycle's `BRIEF_SETTLED_MAX` settled
/// manifests. Its peak is the same, since the open built them either way; what it saves is time
/// that grows with the root (spill files written, runs merged, filters built, the heap
/// trimmed): a `run -- true` on a root of 1 100 processes took 14.2 ms instead of 17.5 (paired
/// medians of 100), holding 0.9 MiB more heap while its command runs.
///
/// A brief writer also indexes less at its open: none of the records the snapshot it resumes
/// from covers, whose retry-able IDs the snapshot retains (`open.rs`, `index_for`).
///
/// A brief writer also pays no flush of its own for what needs none. Its close writes no
/// `CLOSED` claim: what it appended after its last acknowledged record (the publication
/// bookkeeping a command's end leaves) rides the next writer's first commit, and a power cut
/// before that only makes the next restore publish again. And its open, finding records past
/// the last commit (the previous brief writer's), flushes them with its own first commit
/// instead of at once: until that commit its durable seq is the one the commit area confirms,
/// so acknowledging a record found past it flushes first. A cold `run -- true` makes two
/// syncs, not three; a lasting writer keeps its clean close, so that the next open flushes
/// nothing and reads past the records only to check their zeroes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tenure {
    #[default]
    Lasting,
    Brief,
}

/// Settings fixed at open.
#[derive(Debug, Clone)]
pub struct JournalOptions {
    pub durability: Durability,
    /// Size of each new segment file; a multiple of 4096 within the limits of [`crate::limits`].
    /// Existing segments keep the size their header records.
    pub segment_bytes: usize,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            durability: Durability::default(),
            segment_bytes: SEGMENT_BYTES_DEFAULT,
        }
    }
}

/// Where a record lives: its sequence number and its physical place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Position {
    pub seq: u64,
    pub segment_index: u64,
    pub offset: u64,
}

/// The result of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub position: Position,
    /// False when the event ID was already in the journal and nothing was written.
    pub written: bool,
}

/// Errors of the journal. `Poisoned` is sticky: reopen to recover.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    #[error(transparent)]
    Root(#[from] RootError),
    #[error("journal {dir}: {op}: {cause}")]
    Io {
        dir: PathBuf,
        op: &'static str,
        // In the message, not exposed again as the error's source (chains would repeat it).
        cause: std::io::Error,
    },
    #[error("invalid journal options: {0}")]
    InvalidOptions(String),
    #[error("payload of {bytes} bytes exceeds this journal's record limit of {limit}")]
    PayloadTooLarge { bytes: usize, limit: usize },
    #[error("journal is full: it already has the maximum of {max} segments")]
    Full { max: usize },
    #[error("journal is full: it already indexes the maximum of {max} records")]
    TooManyRecords { max: usize },
    #[error(
        "journal handle is poisoned by an earlier failure ({cause}); reopen it to run recovery"
    )]
    Poisoned { cause: String },
    #[error(
        "records from seq {from_seq} were removed by compaction (the journal now starts at seq {floor_seq})"
    )]
    Compacted { from_seq: u64, floor_seq: u64 },
}

impl JournalError {
    /// The error an I/O failure of `op` in the journal directory `dir` becomes, as a `map_err`
    /// argument: every layer of the journal names the directory and the operation alike.
    pub(crate) fn io(
        dir: PathBuf,
        op: &'static str,
    ) -> impl FnOnce(std::io::Error) -> JournalError {
        move |cause| JournalError::Io { dir, op, cause }
    }
}

/// What rebuilds a projection while the journal opens: first it says where to start (with the
/// root's lock held, before the scan), then it sees every record after that, in order.
pub trait OpenVisitor {
    /// Where to start handing out records, and the IDs of records compaction may have removed.
    fn resume(&mut self, head: &Head) -> Resume;
    /// One record with a seq above the resume point.
    fn record(&mut self, record: reader::RecordView<'_>);
    /// Whether [`OpenVisitor::resume`] is to be called at all (it costs a look at the directory).
    fn resumes(&self) -> bool {
        true
    }
}

/// A visitor of every record, from the first.
struct Everything<'a>(&'a mut dyn FnMut(reader::RecordView<'_>));

impl OpenVisitor for Everything<'_> {
    fn resume(&mut self, _head: &Head) -> Resume {
        Resume::default()
    }
    fn record(&mut self, record: reader::RecordView<'_>) {
        (self.0)(record)
    }
    fn resumes(&self) -> bool {
        false
    }
}

/// A visitor resuming after `after_seq` with `ids` retained, as a snapshot at that seq would
/// have it, that keeps the seq of every record it is handed: how the tests and the fuzz target
/// open a journal as a projection resuming from a snapshot does, without one.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) struct ResumedAt {
    pub after_seq: u64,
    pub ids: Vec<RetainedId>,
    pub seen: Vec<u64>,
}

#[cfg(any(test, feature = "fuzzing"))]
impl OpenVisitor for ResumedAt {
    fn resume(&mut self, _head: &Head) -> Resume {
        Resume {
            after_seq: self.after_seq,
            ids: std::mem::take(&mut self.ids),
        }
    }
    fn record(&mut self, record: reader::RecordView<'_>) {
        self.seen.push(record.position.seq);
    }
}

struct Writer {
    dir: Arc<Dir>,
    backend: Arc<dyn Backend>,
    store: Box<dyn SegmentStore>,
    header: SegmentHeader,
    write_offset: usize,
    chain_crc: u32,
    next_seq: u64,
    /// Every event ID in the journal: where its record is, and the record's kind.
    ids: IdIndex,
    segment_bytes_new: usize,
    segment_count: usize,
    scratch: Vec<u8>,
    /// Records go into the mapping under `Os`, through `pwrite` otherwise (see `storage.rs`).
    through_map: bool,
    /// The next segment's file, being zero-filled on a background thread so that rotation only
    /// writes a header and renames.
    spare: Option<Spare>,
    /// The write offset past which the spare is started: halfway through the room the active
    /// segment had when this writer began on it ([`spare_from`]).
    spare_from: usize,
}

/// The fewest index entries worth a sealed run: below it they stay in the table, so that a
/// journal of small segments does not write a run per rotation.
const SEAL_MIN_ENTRIES: usize = 4096;

/// The most entries the index's table holds before every one of them is sealed, the active
/// segment's too: the bound on the table (about 4 MiB with its buckets), which would otherwise
/// hold a whole segment's records, 17 MiB for a segment of 16 MiB (the default once) of the
/// lifecycle workload's (heaptrack of `cargo bench --bench finished_memory`'s append child), and
/// more for a larger configured size. Each seal writes a run
/// and merges runs: at 16 384 entries `Os` appends ran a quarter to a third slower than sealing
/// only at rotations, at 65 536 about a sixth (`cargo bench --bench journal`, interleaved
/// rounds).
const TABLE_MAX_ENTRIES: usize = 65536;

/// The most retained IDs a brief writer keeps on the heap (2 MiB of them) instead of moving
/// them to a spill file at open, as a lasting writer does. A root holds about seven per process
/// it keeps (21 700 for 3 000 `run`s), so this covers the lifecycle's `BRIEF_SETTLED_MAX`
/// settled manifests and more. Writing them out was 0.45 ms of the 6.4 ms a brief open of
/// 3 000 processes took (medians of 60 opens), for a writer that lives for one command.
const RETAINED_HEAP_MAX: usize = 65536;

impl Writer {
    /// Moves the index entries of the segments before the active one into a sealed run, off the
    /// heap (`idindex.rs`), once there are enough of them: at each rotation, and after an open
    /// (whose scan filed every record it read). A spill file refused leaves them in the
    /// table: that costs memory, never an answer.
    pub(super) fn seal_ids(&mut self) {
        self.seal_ids_below(self.header.segment_index);
    }

    /// Seals every entry, the active segment's too, once the table holds
    /// [`TABLE_MAX_ENTRIES`]: a record never moves once written, so its entry never changes.
    /// After each append, and after an open.
    pub(super) fn bound_ids(&mut self) {
        if self.ids.len() >= TABLE_MAX_ENTRIES {
            self.seal_ids_below(self.header.segment_index.saturating_add(1));
        }
    }

    fn seal_ids_below(&mut self, segment_index: u64) {
        if self.ids.len() < SEAL_MIN_ENTRIES {
            return;
        }
        let dir = Arc::clone(&self.dir);
        match self
            .ids
            .seal_below(segment_index, &mut || crate::spill::Spill::in_dir(&dir))
        {
            // The table's old buckets and entries were freed, megabytes for a large root,
            // and glibc keeps freed heap pages until trimmed (`crate::heap`).
            Ok(moved) if moved > 0 => crate::heap::release_freed_memory(),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!("the journal's index keeps left segments' IDs on the heap: {e}")
            }
        }
    }
}

/// Where a writer that begins on a segment of `segment_bytes` at `write_offset` starts its spare:
/// halfway through the room left. For a new segment that is about half full; for one an earlier
/// writer already filled past half, a writer that uses only a little of the rest (a single `run`
/// appends a few records) makes no spare, which its exit would wait for and the next open would
/// delete unused: a zero-filled segment written, synced and removed per command.
fn spare_from(write_offset: usize, segment_bytes: usize) -> usize {
    write_offset + segment_bytes.saturating_sub(write_offset) / 2
}

#[derive(Debug)]
struct Spare {
    index: u64,
    segment_bytes: usize,
    name: String,
    task: std::thread::JoinHandle<std::io::Result<()>>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        // A spare being written is finished (or failed) before the root's lock goes.
        if let Some(spare) = self.spare.take() {
            let _ = spare.task.join();
        }
    }
}

impl Writer {
    /// Starts zero-filling the file the next rotation will use, once this writer has used half
    /// of the room the active segment had when it began on it (a short-lived writer, such as a
    /// single `run`, never pays for one). Best effort: without a spare, rotation creates the
    /// segment itself.
    fn maybe_start_spare(&mut self) {
        if self.spare.is_some() || self.write_offset <= self.spare_from {
            return;
        }
        let index = self.header.segment_index + 1;
        let name = format!("{index:020}.spare");
        let (backend, dir, bytes) = (
            Arc::clone(&self.backend),
            Arc::clone(&self.dir),
            segment_bytes_for(index, self.segment_bytes_new),
        );
        let task_name = name.clone();
        let spawned = std::thread::Builder::new()
            .name("procjournal-spare".to_owned())
            .spawn(move || backend.prepare_spare(&dir, &task_name, bytes));
        self.spare = spawned.ok().map(|task| Spare {
            index,
            segment_bytes: bytes,
            name,
            task,
        });
    }

    /// The name of the spare file ready for segment `index` of `bytes` bytes, if there is one.
    /// A spare that failed (a full disk when it was prepared, say) is not fatal: the segment is
    /// created in place, which fails only if the disk is still full. One made for another size
    /// or index is removed.
    fn take_spare(&mut self, index: u64, bytes: usize) -> Option<String> {
        let spare = self.spare.take()?;
        let ready = spare.task.join();
        let usable = spare.index == index && spare.segment_bytes == bytes;
        match ready {
            Ok(Ok(())) if usable => Some(spare.name),
            Ok(Ok(())) => {
                let _ = self.dir.remove(&spare.name);
                None
            }
            Ok(Err(e)) => {
                debug!(error = %e, "journal spare failed; creating the segment in place");
                None
            }
            Err(_) => None,
        }
    }
}

/// The commit area of the active segment: where the next claim goes. Claims are written and
/// flushed one at a time under this lock, so at most one slot is ever in flight (the other one
/// stays valid whatever a crash does to it). Lock order: `writer` may be held when `commit` is
/// taken, never the reverse; the group-commit leader takes them one after the other.
#[derive(Debug)]
struct Commit {
    syncer: Arc<dyn Syncer>,
    segment_index: u64,
    header_crc: u32,
    generation: u64,
    next_slot: usize,
    /// The highest seq claimed by a slot written to this segment.
    claimed: u64,
    /// The seq the newest slot claims when it is a flushed `CLOSED` one: nothing to close again.
    closed_at: Option<u64>,
}

impl Commit {
    /// The commit state of a segment whose commit area holds `point` (`None`: never written).
    fn resume(syncer: Arc<dyn Syncer>, header: &SegmentHeader, point: Option<CommitPoint>) -> Self {
        let newest = point.and_then(|p| p.newest);
        Commit {
            syncer,
            segment_index: header.segment_index,
            header_crc: header.crc(),
            generation: newest.map_or(0, |(_, s)| s.generation),
            next_slot: newest.map_or(0, |(i, _)| 1 - i),
            claimed: point.map_or(header.base_seq - 1, |p| p.claimed),
            closed_at: None,
        }
    }

    /// Claims every record up to `committed` (ending at `end_offset`) in the next slot, then
    /// flushes the segment: one `fdatasync` makes the records and the claim durable together.
    fn write(
        &mut self,
        flags: u32,
        committed: u64,
        end_offset: usize,
        successor: Option<(u32, u64)>,
    ) -> std::io::Result<()> {
        let (next_segment_bytes, next_base_seq) = successor.unwrap_or((0, 0));
        let slot = CommitSlot {
            flags,
            generation: self.generation + 1,
            committed_seq: committed,
            end_offset: u32::try_from(end_offset).map_err(std::io::Error::other)?,
            next_segment_bytes,
            next_base_seq,
        };
        self.syncer.write_slot(
            SegmentHeader::commit_slot_offset(self.next_slot),
            &slot.encode(self.header_crc),
        )?;
        self.syncer.sync()?;
        self.generation += 1;
        self.next_slot = 1 - self.next_slot;
        self.claimed = self.claimed.max(committed);
        self.closed_at = (flags & SLOT_CLOSED != 0).then_some(committed);
        Ok(())
    }
}

#[derive(Default)]
struct SyncState {
    durable_seq: u64,
    leader_active: bool,
}

/// The single writer of a journal. `Send + Sync`: share it between threads by reference or `Arc`.
pub struct Journal {
    durability: Durability,
    /// The segments' directory, opened once: nothing in it is named by path again.
    held: Arc<Dir>,
    writer: Lock<Writer>,
    commit: Lock<Commit>,
    sync: Lock<SyncState>,
    synced: Condvar,
    poison: Lock<Option<String>>,
    /// Mirrors `poison.is_some()` so that the check on every append takes no lock; set (with
    /// Release) only after the cause is stored, read with Acquire.
    poisoned: std::sync::atomic::AtomicBool,
    /// A brief writer has no closing commit (see [`Tenure`]).
    tenure: Tenure,
    /// Declared last so that it drops last: the mapping in `writer` must be gone before the lock
    /// is released (see `mmap.rs`).
    root: Root,
}

impl Drop for Journal {
    /// A clean close claims every record once more with the `CLOSED` flag and flushes, so that
    /// the next open knows nothing is left in the page cache and nothing lies past the records:
    /// it neither flushes nor reads the segment's zeroes. Nothing to do when
    /// [`Journal::close_commit`] already did it and nothing was appended since, nor for a brief
    /// writer, which leaves that flush to the next open's first commit ([`Tenure`]).
    fn drop(&mut self) {
        // A poisoned handle writes nothing more: the next open runs recovery.
        if self.poisoned.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        if let Err(e) = self.close_commit() {
            warn!(error = %e, "journal close: the closing commit failed; the next open recovers");
        }
    }
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("root", &self.root.path())
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The real files; in a build with the tests' `fault-injection` feature, the fault backend a
/// trigger file arms when the environment names one (`fault.rs`).
fn default_backend() -> Arc<dyn Backend> {
    #[cfg(feature = "fault-injection")]
    if let Some(backend) = fault::from_env() {
        return backend;
    }
    Arc::new(FileBackend)
}

impl Journal {
    /// Opens (creating if needed) the journal under `root`, taking the root's writer lock, and runs
    /// recovery. The report says what recovery found and did.
    pub fn open(
        root: &Path,
        options: JournalOptions,
    ) -> Result<(Journal, RecoveryReport), JournalError> {
        Self::open_with_backend(
            root,
            options,
            Tenure::Lasting,
            default_backend(),
            &mut |_| {},
        )
    }

    /// Like [`Journal::open`], handing every valid record to `visit` in order during the recovery
    /// scan, so that a projection can be rebuilt without reading the journal a second time.
    pub fn open_visiting(
        root: &Path,
        options: JournalOptions,
        mut visit: impl FnMut(reader::RecordView<'_>),
    ) -> Result<(Journal, RecoveryReport), JournalError> {
        Self::open_with_backend(
            root,
            options,
            Tenure::Lasting,
            default_backend(),
            &mut visit,
        )
    }

    /// Like [`Journal::open_visiting`], for a projection that resumes from a snapshot: `visitor`
    /// first says where to start ([`Resume`]), then sees the records after that point. Records at
    /// or below it are still checked, and indexed by a lasting writer (a brief one leaves them out
    /// of its index, as if compaction had removed them: the report's `unindexed_records`). The
    /// retained IDs it hands over are known to the journal as if their records were still there.
    /// `tenure` also says what the open then files off the heap ([`Tenure`]).
    pub fn open_resuming(
        root: &Path,
        options: JournalOptions,
        tenure: Tenure,
        visitor: &mut dyn OpenVisitor,
    ) -> Result<(Journal, RecoveryReport), JournalError> {
        Self::open_inner(root, options, tenure, default_backend(), visitor)
    }

    /// [`Journal::open_visiting`] for a writer of `tenure`, on `backend`.
    pub(crate) fn open_with_backend(
        root: &Path,
        options: JournalOptions,
        tenure: Tenure,
        backend: Arc<dyn Backend>,
        visit: &mut dyn FnMut(reader::RecordView<'_>),
    ) -> Result<(Journal, RecoveryReport), JournalError> {
        Self::open_inner(root, options, tenure, backend, &mut Everything(visit))
    }

    /// Drops the handle the way a killed process does: no closing commit, and whatever was
    /// written stays in the page cache, unflushed.
    #[cfg(test)]
    pub(crate) fn crash(self) {
        self.poisoned
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Flushes everything with a closing commit (`CLOSED`), as dropping the handle does, so that
    /// a host that stops can pay for the flush before it reports that it stopped; the drop then
    /// writes nothing unless records were appended since. Appending after it is allowed. A
    /// brief writer has no closing commit: this writes and flushes nothing ([`Tenure`]).
    pub fn close_commit(&self) -> Result<(), JournalError> {
        self.check_poison()?;
        if self.tenure == Tenure::Brief {
            return Ok(());
        }
        let w = self.writer.lock();
        let last = w.next_seq - 1;
        let mut commit = self.commit.lock();
        if commit.segment_index != w.header.segment_index || commit.closed_at == Some(last) {
            return Ok(());
        }
        commit
            .write(SLOT_CLOSED, last, w.write_offset, None)
            .map_err(|e| self.poison("closing commit", &e))?;
        drop(commit);
        drop(w);
        let mut s = self.sync.lock();
        s.durable_seq = s.durable_seq.max(last);
        Ok(())
    }

    /// The absolute runtime root this journal lives in.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The directory `name` of this journal's root (created if missing), opened relative to the
    /// root's descriptor that the writer holds: for the layers that write beside the journal.
    pub(crate) fn root_sub(&self, name: &str) -> std::io::Result<Dir> {
        let root = self
            .root
            .dir()
            .ok_or_else(|| std::io::Error::other("a writer's root has no descriptor"))?;
        root.sub(name, true)
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    fn check_poison(&self) -> Result<(), JournalError> {
        if !self.poisoned.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        match &*self.poison.lock() {
            Some(cause) => Err(JournalError::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    fn poison(&self, op: &str, error: &std::io::Error) -> JournalError {
        let cause = format!("{op}: {error}");
        warn!(%cause, "journal poisoned");
        let mut slot = self.poison.lock();
        let cause = slot.get_or_insert(cause).clone();
        self.poisoned
            .store(true, std::sync::atomic::Ordering::Release);
        drop(slot);
        self.synced.notify_all();
        JournalError::Poisoned { cause }
    }

    /// The largest payload one record of this journal can carry.
    pub fn payload_limit(&self) -> usize {
        let w = self.writer.lock();
        payload_limit(w.segment_bytes_new)
    }

    /// Appends one event and returns once it is acknowledged under the journal's [`Durability`].
    /// If `id` is already in the journal nothing is written and the original position is returned
    /// (after it, too, is acknowledged).
    pub fn append(
        &self,
        id: EventId,
        kind: EventKind,
        codec_version: u8,
        payload: &[u8],
    ) -> Result<Appended, JournalError> {
        let appended = self.append_deferred(id, kind, codec_version, payload)?;
        self.acknowledge(appended.position.seq)?;
        Ok(appended)
    }

    /// Writes the event like [`Journal::append`] but returns before waiting for the durability the
    /// policy promises (under `Sync` the flush has already happened). The caller must call
    /// [`Journal::acknowledge`] with the returned seq before treating the event as acknowledged.
    /// This lets a caller release its own locks before the wait, so that concurrent callers
    /// still share one group flush.
    pub fn append_deferred(
        &self,
        id: EventId,
        kind: EventKind,
        codec_version: u8,
        payload: &[u8],
    ) -> Result<Appended, JournalError> {
        self.check_poison()?;
        let appended = {
            let mut w = self.writer.lock();
            self.check_poison()?;
            match w.ids.get(&id.as_bytes()) {
                Some((position, _)) => Appended {
                    position,
                    written: false,
                },
                None => {
                    let position = self.write_record(&mut w, id, kind, codec_version, payload)?;
                    if self.durability == Durability::Sync {
                        // One flush per append, in append order, under the writer lock.
                        self.commit
                            .lock()
                            .write(0, position.seq, w.write_offset, None)
                            .map_err(|e| self.poison("fdatasync", &e))?;
                        self.sync.lock().durable_seq = position.seq;
                    }
                    Appended {
                        position,
                        written: true,
                    }
                }
            }
        };
        Ok(appended)
    }

    /// Returns once `seq` is acknowledged under the journal's policy: durable for `Sync` and
    /// `Group` (flushing as the group leader if needed), immediately for `Os`.
    pub fn acknowledge(&self, seq: u64) -> Result<(), JournalError> {
        match self.durability {
            Durability::Os => self.check_poison(),
            Durability::Sync | Durability::Group => self.wait_durable(seq),
        }
    }

    fn write_record(
        &self,
        w: &mut Writer,
        id: EventId,
        kind: EventKind,
        codec_version: u8,
        payload: &[u8],
    ) -> Result<Position, JournalError> {
        // A record that does not fit the rest of the active segment goes into a fresh one.
        let limit = payload_limit(w.segment_bytes_new);
        if payload.len() > limit {
            return Err(JournalError::PayloadTooLarge {
                bytes: payload.len(),
                limit,
            });
        }
        let bytes = format::record_bytes(payload.len());
        if w.write_offset + bytes > w.header.segment_bytes as usize {
            self.rotate(w, SEGMENT_RECORDS_OFFSET + bytes)?;
            w.seal_ids();
        }
        let seq = w.next_seq;
        if seq > crate::limits::SEQ_MAX {
            return Err(JournalError::Full {
                max: crate::limits::SEGMENT_COUNT_MAX,
            });
        }
        // Checked before anything is written: a record the index could not name would be on
        // disk but unknown to every later lookup.
        if w.ids.len() >= IdIndex::CAPACITY {
            return Err(JournalError::TooManyRecords {
                max: IdIndex::CAPACITY,
            });
        }
        let mut scratch = std::mem::take(&mut w.scratch);
        scratch.clear();
        scratch.resize(bytes, 0);
        let header_crc = format::encode_record(
            &RecordFields {
                kind: kind.get(),
                codec_version,
                seq,
                event_id: id.as_bytes(),
                prev_crc: w.chain_crc,
                payload,
            },
            &mut scratch,
        );
        let offset = w.write_offset;
        let written = w.store.write_at(offset, &scratch);
        w.scratch = scratch;
        written.map_err(|e| self.poison("write record", &e))?;
        let position = Position {
            seq,
            segment_index: w.header.segment_index,
            offset: offset as u64,
        };
        w.write_offset += bytes;
        w.chain_crc = header_crc;
        w.next_seq += 1;
        w.maybe_start_spare();
        // Cannot be refused: capacity was checked above, and the caller looked the ID up first.
        if let Err(IndexFull) = w.ids.insert(id.as_bytes(), position, kind.get()) {
            return Err(JournalError::TooManyRecords {
                max: IdIndex::CAPACITY,
            });
        }
        w.bound_ids();
        Ok(position)
    }

    /// Seals the active segment (flushing it, so that only the active segment ever holds
    /// unflushed records) and starts the next one, of at least `needed` bytes.
    fn rotate(&self, w: &mut Writer, needed: usize) -> Result<(), JournalError> {
        // Refused, not poisoned: nothing was written, and a reader must still be able to open
        // every segment (recovery refuses more than the maximum).
        if w.segment_count >= crate::limits::SEGMENT_COUNT_MAX
            || w.header.segment_index >= crate::limits::SEGMENT_INDEX_MAX
        {
            return Err(JournalError::Full {
                max: crate::limits::SEGMENT_COUNT_MAX,
            });
        }
        let mut commit = self.commit.lock();
        let last = w.next_seq - 1;
        commit
            .write(0, last, w.write_offset, None)
            .map_err(|e| self.poison("fdatasync before rotation", &e))?;
        {
            let mut s = self.sync.lock();
            s.durable_seq = s.durable_seq.max(last);
        }
        let index = w.header.segment_index + 1;
        let bytes =
            segment_bytes_for(index, w.segment_bytes_new).max(needed.next_multiple_of(PAGE_BYTES));
        let header = SegmentHeader {
            format_version: format::FORMAT_VERSION,
            segment_bytes: bytes as u32,
            journal_id: w.header.journal_id,
            segment_index: index,
            base_seq: w.next_seq,
            created_unix_ms: now_unix_ms(),
        };
        let name = recovery::segment_file_name(index);
        let prepared = w.take_spare(index, bytes);
        let created = match prepared {
            Some(spare_name) => {
                w.backend
                    .commit_spare(&w.dir, &spare_name, &name, &header.encode())
            }
            None => w
                .backend
                .create_segment(&w.dir, &name, &header.encode(), bytes),
        };
        created.map_err(|e| self.poison("create segment", &e))?;
        // Sealed only once the successor exists: a seal promises that it did, so that a
        // successor missing later is a loss, not an interrupted rotation.
        commit
            .write(
                SLOT_SEALED,
                last,
                w.write_offset,
                Some((bytes as u32, w.next_seq)),
            )
            .map_err(|e| self.poison("seal segment", &e))?;
        let store = w
            .backend
            .open_segment(&w.dir, &name, bytes, w.through_map)
            .map_err(|e| self.poison("map segment", &e))?;
        debug!(
            segment = header.segment_index,
            base_seq = header.base_seq,
            "journal rotated"
        );
        *commit = Commit::resume(store.syncer(), &header, None);
        w.store = store;
        w.segment_count += 1;
        w.header = header;
        w.write_offset = header.records_offset();
        w.spare_from = spare_from(w.write_offset, bytes);
        w.chain_crc = header.crc();
        Ok(())
    }

    /// Waits until `seq` is durable, flushing as the group leader when no flush is in progress.
    fn wait_durable(&self, seq: u64) -> Result<(), JournalError> {
        let mut s = self.sync.lock();
        loop {
            self.check_poison()?;
            if s.durable_seq >= seq {
                return Ok(());
            }
            if s.leader_active {
                s = self.synced.wait(s).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            s.leader_active = true;
            drop(s);
            let (target, end_offset, segment_index) = {
                let w = self.writer.lock();
                (w.next_seq - 1, w.write_offset, w.header.segment_index)
            };
            let flushed = {
                let mut commit = self.commit.lock();
                // A rotation since the target was read flushed (and sealed) its segment.
                if commit.segment_index == segment_index {
                    commit.write(0, target, end_offset, None)
                } else {
                    Ok(())
                }
            };
            s = self.sync.lock();
            s.leader_active = false;
            match flushed {
                Ok(()) => {
                    s.durable_seq = s.durable_seq.max(target);
                    self.synced.notify_all();
                }
                Err(e) => {
                    drop(s);
                    return Err(self.poison("fdatasync", &e));
                }
            }
        }
    }

    /// Flushes everything appended so far, whatever the policy.
    pub fn sync(&self) -> Result<(), JournalError> {
        let last = self.last_seq();
        if last == 0 {
            return self.check_poison();
        }
        self.wait_durable(last)
    }

    /// The sequence number of the last record written (0 when empty).
    pub fn last_seq(&self) -> u64 {
        self.writer.lock().next_seq - 1
    }

    /// The last sequence number acknowledged as durable under the chosen policy.
    pub fn durable_seq(&self) -> u64 {
        self.sync.lock().durable_seq
    }

    /// Where the event with this ID was written, if it is in the journal.
    pub fn position_of(&self, id: EventId) -> Option<Position> {
        self.writer.lock().ids.get(&id.as_bytes()).map(|(p, _)| p)
    }

    /// The kind of the record that holds this event ID, if it is in the journal.
    pub fn kind_of(&self, id: EventId) -> Option<u16> {
        self.writer.lock().ids.get(&id.as_bytes()).map(|(_, k)| k)
    }

    /// The journal's directory, where spill files are made (`crate::spill`): on the root's
    /// file system, unnamed, private to this process, gone when it exits.
    pub(crate) fn spill_dir(&self) -> Arc<Dir> {
        Arc::clone(&self.writer.lock().dir)
    }

    /// The directory holding the segments.
    pub fn dir(&self) -> PathBuf {
        self.root.journal_dir()
    }
}

fn payload_limit(segment_bytes: usize) -> usize {
    (segment_bytes - SEGMENT_RECORDS_OFFSET - RECORD_HEADER_BYTES).min(RECORD_PAYLOAD_BYTES_MAX)
        / crate::limits::RECORD_ALIGN_BYTES
        * crate::limits::RECORD_ALIGN_BYTES
}

/// The size of segment `index`: the first segments are small, so that a root that holds a few
/// records takes little space and is read quickly, and each next one doubles up to the
/// configured size (rotation makes a segment larger still when one record needs it).
fn segment_bytes_for(index: u64, configured: usize) -> usize {
    let shift = u32::try_from(index).unwrap_or(u32::MAX).min(20);
    SEGMENT_BYTES_INITIAL
        .checked_shl(shift)
        .unwrap_or(usize::MAX)
        .min(configured)
}
