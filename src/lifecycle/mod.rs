//! The lifecycle model: the closed state machine, the lifecycle events, and manifests as
//! projections of those events (DESIGN.md, "Events, manifests and the state
//! machine").
//!
//! Invariants: `state`, `event`, `manifest`, `replay` and `snapshot` do no I/O; [`Lifecycle`] is
//! the only place that joins them to the journal (and `snapdir` to the snapshot files), and it
//! checks every event against the store before it appends, so an invalid event never reaches disk.
//! Manifests are never files of their own: a snapshot is a checkpoint of the projection at a seq,
//! and opening from one gives the store a replay of the whole journal gives (the store, and the
//! replay report's counts and issues, are equal).
//!
//! Snapshots and compaction (journal-format.md, "Snapshots and compaction"): a snapshot is taken
//! in two steps, [`Lifecycle::capture_snapshot`] under whatever lock guards the `Lifecycle` (it
//! encodes the manifests, which must not change meanwhile) and [`SnapshotCapture::persist`]
//! without it (it waits for the journal to be durable up to the snapshot's seq, looks up the
//! retained IDs, writes the file durably, keeps two snapshots, and compacts the journal below the
//! older one). Appends go on during the second step.

pub mod command;
pub mod damage;
pub mod event;
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;
pub mod manifest;
pub mod reference;
pub mod replay;
mod reserved;
pub mod retention;
pub mod snapdir;
pub mod snapshot;
pub mod state;
pub(crate) mod wire;
// Test support: the deterministic workload tests, benches and fuzz targets drive.
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod workload;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_settled;
#[cfg(test)]
mod tests_snapshot;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

pub use command::StoredCommand;
pub use event::{Handle, LifecycleEvent, LifecycleIds};
pub use manifest::{Applied, Manifest, ManifestStore, Rejection};
pub use reference::{NAME_LABEL, ProcessRef, ReferenceError};
pub use replay::{ReplayReport, Replayer, SnapshotProblem};
pub use snapshot::SnapshotError;
pub use state::State;

use crate::codec::{CODEC_VERSION, CodecError};
use crate::journal::reader::{JournalReader, RecordView};
use crate::journal::{
    Appended, Compacted, CrashPoints, EventId, Head, Journal, JournalError, JournalOptions,
    NoCrash, OpenVisitor, RecoveryReport, Resume, RetainedId, Tenure,
};
use crate::limits::{
    RECORD_HEADER_BYTES, SNAPSHOT_AFTER_BYTES_MIN, SNAPSHOT_AT_SHUTDOWN_BYTES_MIN,
};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LifecycleError {
    #[error("event rejected: {0}")]
    Rejected(#[from] Rejection),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error("snapshot {dir}: {op}: {cause}")]
    SnapshotIo {
        dir: PathBuf,
        op: &'static str,
        // In the message, not exposed again as the error's source (chains would repeat it).
        cause: std::io::Error,
    },
}

/// The bytes a record of `payload_bytes` takes in the journal (header, payload, padding): what
/// the snapshot policy counts.
fn record_bytes(payload_bytes: usize) -> u64 {
    (RECORD_HEADER_BYTES + payload_bytes.next_multiple_of(crate::limits::RECORD_ALIGN_BYTES)) as u64
}

/// Where the snapshots of `root` live.
fn snapshot_dir(root: &Path) -> PathBuf {
    root.join(snapdir::SNAPSHOT_DIR)
}

/// When a running supervisor writes snapshots (the reasons for the defaults are in
/// `src/limits.rs`, `SNAPSHOT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// A snapshot once the journal grew by this many bytes since the newest one (and by that
    /// one's size).
    pub after_bytes_min: u64,
    /// At a clean shutdown, once it grew by this many (and by a quarter of the newest's size).
    pub at_shutdown_bytes_min: u64,
    /// How often the supervisor asks.
    pub check_every: std::time::Duration,
}

impl Default for SnapshotPolicy {
    fn default() -> Self {
        SnapshotPolicy {
            after_bytes_min: SNAPSHOT_AFTER_BYTES_MIN,
            at_shutdown_bytes_min: SNAPSHOT_AT_SHUTDOWN_BYTES_MIN,
            check_every: std::time::Duration::from_millis(crate::limits::SNAPSHOT_CHECK_MS),
        }
    }
}

/// What the snapshot policy knows.
#[derive(Debug, Default)]
struct SnapshotState {
    /// Record bytes the projection folded since open (replayed after the snapshot it started
    /// from, or appended).
    folded_bytes: u64,
    /// `folded_bytes` when the newest snapshot was captured.
    covered_bytes: u64,
    /// Seq and file size of the newest snapshot (0: none).
    newest_seq: u64,
    newest_bytes: u64,
    /// A capture is being persisted: no second one until it is done.
    in_flight: bool,
}

/// Rebuilds the projection while the journal opens: from the newest usable snapshot, then the
/// records after it.
struct Restorer {
    dir: PathBuf,
    replayer: Replayer,
    problems: Vec<SnapshotProblem>,
    used: Option<(u64, u64)>,
    lost_below: Option<u64>,
    folded_bytes: u64,
}

impl Restorer {
    fn new(dir: PathBuf) -> Self {
        Restorer {
            dir,
            replayer: Replayer::default(),
            problems: Vec::new(),
            used: None,
            lost_below: None,
            folded_bytes: 0,
        }
    }

    fn start(&mut self, head: &Head) -> Resume {
        let (found, problems) = snapdir::load_best(&self.dir, head);
        self.problems = problems;
        match found {
            Some((snap, file_bytes)) => {
                let seq = snap.header.seq;
                let ids = snap.retained_ids();
                self.used = Some((seq, file_bytes));
                self.replayer = Replayer::resumed(snap.store, snap.replay);
                Resume {
                    after_seq: seq,
                    ids,
                }
            }
            None => {
                // Records below the floor are gone and nothing holds what they did.
                self.lost_below = head.floor.map(|f| f.seq).filter(|&seq| seq > 1);
                Resume::default()
            }
        }
    }

    fn finish(self) -> (ManifestStore, ReplayReport, SnapshotState) {
        let (store, mut report) = self.replayer.finish();
        report.snapshot_seq = self.used.map(|(seq, _)| seq);
        report.snapshot_problems = self.problems;
        report.lost_below_seq = self.lost_below;
        let state = SnapshotState {
            folded_bytes: self.folded_bytes,
            newest_seq: self.used.map_or(0, |(seq, _)| seq),
            newest_bytes: self.used.map_or(0, |(_, bytes)| bytes),
            ..SnapshotState::default()
        };
        (store, report, state)
    }
}

impl OpenVisitor for Restorer {
    fn resume(&mut self, head: &Head) -> Resume {
        self.start(head)
    }

    fn record(&mut self, record: RecordView<'_>) {
        self.folded_bytes += record_bytes(record.payload.len());
        self.replayer.feed(&record);
    }
}

/// The manifests of a root read without taking its lock (what `journal manifests`, `ps` and
/// `logs` show when no daemon runs): from the newest usable snapshot and the records after it,
/// exactly as [`Lifecycle::open`] restores them. `progress` sees every record replayed.
///
/// A live writer may compact the journal during the read, past the snapshot this read chose; the
/// read then starts again from the newer snapshot (a few times at most; after that it reports
/// what it could not cover as lost).
pub fn restore_read_only(
    root: &Path,
    mut progress: impl FnMut(&RecordView<'_>),
) -> Result<(ManifestStore, ReplayReport, RecoveryReport), LifecycleError> {
    let reader = JournalReader::open(root)?;
    let dir = snapshot_dir(reader.root());
    let mut attempts = 0;
    loop {
        attempts += 1;
        let head = reader.head()?;
        let mut restorer = Restorer::new(dir.clone());
        let resume = restorer.start(&head);
        let recovery = reader.scan(resume.after_seq + 1, |r| {
            progress(&r);
            restorer.record(r);
        })?;
        let covered = recovery
            .floor
            .is_none_or(|f| f.seq <= resume.after_seq + 1 || restorer.used.is_none());
        if covered || attempts >= 3 {
            let (store, mut replay, _) = restorer.finish();
            if !covered && let Some(f) = recovery.floor {
                replay.lost_below_seq = Some(f.seq);
            }
            return Ok((store, replay, recovery));
        }
    }
}

/// A snapshot captured from a [`Lifecycle`], to be persisted without holding it.
#[derive(Debug)]
pub struct SnapshotCapture {
    seq: u64,
    journal_id: [u8; 16],
    manifests: snapshot::ManifestFrames,
    candidates: Vec<EventId>,
    replay: ReplayReport,
    journal: Arc<Journal>,
    dir: PathBuf,
    folded_bytes: u64,
}

/// What persisting a snapshot did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotWritten {
    pub seq: u64,
    pub file_bytes: u64,
    /// Snapshots kept afterwards (seqs, ascending).
    pub kept: Vec<u64>,
    /// The compaction below the older kept snapshot (`None` with a single snapshot).
    pub compacted: Option<Compacted>,
    #[serde(skip)]
    folded_bytes: u64,
}

impl SnapshotCapture {
    /// Persists the snapshot (module doc): the journal durable up to its seq, the retained IDs,
    /// the file, the two kept, and the compaction below the older. Then hand the result to
    /// [`Lifecycle::snapshot_done`].
    pub fn persist(self) -> Result<SnapshotWritten, LifecycleError> {
        self.persist_with(&mut NoCrash)
    }

    /// [`SnapshotCapture::persist`], announcing each file-system step to `crash`.
    pub fn persist_with(
        self,
        crash: &mut dyn CrashPoints,
    ) -> Result<SnapshotWritten, LifecycleError> {
        let written = self.write_and_compact(crash);
        // The capture's buffers are freed by now: tens of MB for a large root (the frames, the
        // candidate and retained IDs, the file). A daemon of 50 000 finished processes kept
        // 45 MB more after its snapshots than without them until this gave them back
        // (`cargo bench --bench finished_memory`, the daemon row).
        crate::heap::release_freed_memory();
        written
    }

    fn write_and_compact(
        self,
        crash: &mut dyn CrashPoints,
    ) -> Result<SnapshotWritten, LifecycleError> {
        // A snapshot must never hold an event the journal could lose: after a power loss the
        // journal would reuse its seq.
        self.journal.sync()?;
        // The candidates are `CANDIDATES` per manifest, in store order: the place of a found
        // one says which manifest and which candidate it is.
        let mut retained = Vec::new();
        let per_lookup = crate::limits::SNAPSHOT_IDS_PER_FRAME;
        for (c, chunk) in self.candidates.chunks(per_lookup).enumerate() {
            let found = self.journal.lookup_ids(chunk, self.seq);
            for (i, hit) in found.into_iter().enumerate() {
                let Some((seq, kind)) = hit else { continue };
                let n = c * per_lookup + i;
                retained.push(snapshot::RetainedStep {
                    manifest: u32::try_from(n / snapshot::CANDIDATES).unwrap_or(u32::MAX),
                    which: (n % snapshot::CANDIDATES) as u8,
                    seq,
                    kind,
                });
            }
        }
        let file = snapshot::assemble(
            self.journal_id,
            self.seq,
            now_unix_ms(),
            &self.manifests,
            &retained,
            &self.replay,
        )?;
        let io = |op: &'static str| {
            let dir = self.dir.clone();
            move |cause| LifecycleError::SnapshotIo { dir, op, cause }
        };
        let dir = self
            .journal
            .root_sub(snapdir::SNAPSHOT_DIR)
            .map_err(io("open snapshot directory"))?;
        let kept = snapdir::write(&dir, self.seq, self.journal_id, &file.parts(), crash)
            .map_err(io("write snapshot"))?;
        let compacted = match kept.as_slice() {
            [older, _, ..] => Some(self.journal.compact_below_with(older + 1, crash)?),
            _ => None,
        };
        // The index forgets what compaction removed but the IDs this snapshot retains: what an
        // open resuming from it would know.
        if let Some(floor) = compacted.as_ref().and_then(|c| c.floor) {
            let below = retained.iter().filter(|r| r.seq < floor.seq);
            let keep = below.filter_map(|r| {
                let n = r.manifest as usize * snapshot::CANDIDATES + usize::from(r.which);
                let id = *self.candidates.get(n)?;
                Some(RetainedId {
                    id,
                    seq: r.seq,
                    kind: r.kind,
                })
            });
            self.journal.forget_ids_below(floor.seq, keep.collect());
        }
        Ok(SnapshotWritten {
            seq: self.seq,
            file_bytes: file.len(),
            kept,
            compacted,
            folded_bytes: self.folded_bytes,
        })
    }
}

/// The most settled manifests a brief writer keeps on the heap rather than spill (about
/// 0.8 KiB each, with their IDs in the journal's table, measured on a root of 1 100 `run`s:
/// `smaps_rollup` of a `run -- sleep`). Past it, a brief writer spills as a lasting one does,
/// so that one command on a large root holds no more heap for its life than a few MiB.
pub(crate) const BRIEF_SETTLED_MAX: usize = 4096;

/// Moves the restored store's settled frames into an unnamed file beside the journal, and its
/// handle and reservation indexes into sorted runs in others, so that what a finished process
/// costs the heap stays a few words however many finished (`crate::spill`). Without one (a file system without `O_TMPFILE`, a full disk) they stay on the
/// heap: that costs memory, never an answer, so it is said and the open goes on.
fn spill_settled(store: &mut ManifestStore, journal: &Journal) {
    let spilled = store.spill_into(journal.spill_dir());
    if let Err(e) = spilled {
        tracing::warn!(
            dir = %journal.dir().display(),
            "settled manifests stay in memory, without a spill file: {e}"
        );
    }
}

/// The journal of a root together with the manifests replayed from it.
#[derive(Debug)]
pub struct Lifecycle {
    journal: Arc<Journal>,
    store: ManifestStore,
    /// The replay report's counts and issues, kept up to date by appends: what a snapshot
    /// carries.
    records: ReplayReport,
    snapshot_dir: PathBuf,
    snapshots: SnapshotState,
}

impl Lifecycle {
    /// Opens the journal (running recovery) and restores the manifests in the same pass: from the
    /// newest usable snapshot, then the records after it (the whole journal without one).
    pub fn open(
        root: &Path,
        options: JournalOptions,
    ) -> Result<(Self, RecoveryReport, ReplayReport), LifecycleError> {
        Self::open_for(root, options, Tenure::Lasting)
    }

    /// [`Lifecycle::open`] for a writer of the given [`Tenure`]: a brief one keeps its settled
    /// manifests on the heap, as it keeps the journal's index, instead of spilling them, up to
    /// [`BRIEF_SETTLED_MAX`] of them.
    pub fn open_for(
        root: &Path,
        options: JournalOptions,
        tenure: Tenure,
    ) -> Result<(Self, RecoveryReport, ReplayReport), LifecycleError> {
        let dir = snapshot_dir(&std::path::absolute(root).map_err(|cause| {
            LifecycleError::SnapshotIo {
                dir: root.to_owned(),
                op: "resolve root",
                cause,
            }
        })?);
        let mut restorer = Restorer::new(dir.clone());
        let (journal, recovery) = Journal::open_resuming(root, options, tenure, &mut restorer)?;
        let (mut store, replay, snapshots) = restorer.finish();
        if tenure == Tenure::Lasting || store.settled() > BRIEF_SETTLED_MAX {
            spill_settled(&mut store, &journal);
            // The replay's buffers and the frames' heap chunks are freed by now (tens of MB for
            // a large root), and glibc keeps freed heap pages until trimmed (`crate::heap`).
            crate::heap::release_freed_memory();
        }
        Ok((
            Lifecycle {
                journal: Arc::new(journal),
                store,
                records: replay.of_records(),
                snapshot_dir: dir,
                snapshots,
            },
            recovery,
            replay,
        ))
    }

    /// Whether settled manifests are kept out of the heap, in the root's spill file.
    #[cfg(any(test, feature = "test-support"))]
    pub fn spills_to_file(&self) -> bool {
        self.store.spills_to_file()
    }

    /// Whether `policy` wants a snapshot now: the journal grew since the newest snapshot by the
    /// policy's minimum and by that snapshot's size (at a clean shutdown: by the shutdown
    /// minimum and a quarter of that size). False while one is being persisted.
    pub fn snapshot_due(&self, policy: &SnapshotPolicy, at_shutdown: bool) -> bool {
        let s = &self.snapshots;
        let grown = s.folded_bytes - s.covered_bytes;
        let (minimum, share) = if at_shutdown {
            (policy.at_shutdown_bytes_min, s.newest_bytes / 4)
        } else {
            (policy.after_bytes_min, s.newest_bytes)
        };
        !s.in_flight && grown >= minimum.max(share)
    }

    /// Captures a snapshot of the manifests at the journal's last seq, to be persisted without
    /// holding this `Lifecycle` ([`SnapshotCapture::persist`], then [`Lifecycle::snapshot_done`]).
    /// `None` when another capture is being persisted, or nothing was appended since the newest
    /// snapshot.
    pub fn capture_snapshot(&mut self) -> Result<Option<SnapshotCapture>, LifecycleError> {
        let seq = self.journal.last_seq();
        if self.snapshots.in_flight || seq == 0 || seq == self.snapshots.newest_seq {
            return Ok(None);
        }
        let spill = crate::spill::Spill::in_dir(&self.journal.spill_dir());
        let manifests = snapshot::encode_manifests(&self.store, spill)?;
        // The encoder read every settled frame through the spill file's mapping.
        self.store.release_resident();
        let capture = SnapshotCapture {
            seq,
            journal_id: self.journal.journal_id(),
            manifests,
            candidates: snapshot::candidate_ids(&self.store),
            replay: self.records.clone(),
            journal: Arc::clone(&self.journal),
            dir: self.snapshot_dir.clone(),
            folded_bytes: self.snapshots.folded_bytes,
        };
        self.snapshots.in_flight = true;
        Ok(Some(capture))
    }

    /// Takes the outcome of persisting the capture this `Lifecycle` handed out last.
    pub fn snapshot_done(&mut self, outcome: Result<&SnapshotWritten, &LifecycleError>) {
        self.snapshots.in_flight = false;
        if let Ok(written) = outcome {
            self.snapshots.newest_seq = written.seq;
            self.snapshots.newest_bytes = written.file_bytes;
            self.snapshots.covered_bytes = written.folded_bytes;
        }
    }

    /// Captures and persists a snapshot on this thread, holding this `Lifecycle` throughout (the
    /// offline `journal compact`, tests). `None`: nothing new since the newest snapshot.
    pub fn snapshot_now(&mut self) -> Result<Option<SnapshotWritten>, LifecycleError> {
        self.snapshot_now_with(&mut NoCrash)
    }

    /// [`Lifecycle::snapshot_now`], announcing each file-system step to `crash`.
    pub fn snapshot_now_with(
        &mut self,
        crash: &mut dyn CrashPoints,
    ) -> Result<Option<SnapshotWritten>, LifecycleError> {
        let Some(capture) = self.capture_snapshot()? else {
            return Ok(None);
        };
        let outcome = capture.persist_with(crash);
        self.snapshot_done(outcome.as_ref());
        outcome.map(Some)
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The journal, shared: callers of [`Lifecycle::append_deferred`] acknowledge through it
    /// after releasing whatever lock guards this `Lifecycle`.
    pub fn journal_arc(&self) -> Arc<Journal> {
        Arc::clone(&self.journal)
    }

    pub fn store(&self) -> &ManifestStore {
        &self.store
    }

    pub fn manifest(&self, handle: &Handle) -> Option<std::borrow::Cow<'_, Manifest>> {
        self.store.get(handle)
    }

    /// Validates `event` against its manifest, appends it under `event_id`, then applies it, and
    /// returns once it is acknowledged. An `event_id` already in the journal is an idempotent
    /// retry: nothing is checked or written and the original position is returned.
    pub fn append(
        &mut self,
        event_id: EventId,
        event: &LifecycleEvent,
    ) -> Result<Appended, LifecycleError> {
        let appended = self.append_deferred(event_id, event)?;
        self.journal.acknowledge(appended.position.seq)?;
        Ok(appended)
    }

    /// Like [`Lifecycle::append`] without waiting for the acknowledgement: the caller must call
    /// `journal_arc().acknowledge(seq)` before it acts on the event (see
    /// [`Journal::append_deferred`]). The manifest already reflects the event.
    pub fn append_deferred(
        &mut self,
        event_id: EventId,
        event: &LifecycleEvent,
    ) -> Result<Appended, LifecycleError> {
        if let Some(kind) = self.journal.kind_of(event_id) {
            // A retry: the journal returns the original position and writes nothing, but only
            // if the record it holds under this ID is this event's kind and, for an allocated
            // ID, this handle's step; anything else would acknowledge an event never written.
            if kind != event.kind().get() {
                return Err(Rejection::IdInUse { id: event_id, kind }.into());
            }
            self.store.check_reservation(event_id, event)?;
            return Ok(self
                .journal
                .append_deferred(event_id, event.kind(), CODEC_VERSION, &[])?);
        }
        self.store.check(event_id, event)?;
        let allocated = match event {
            LifecycleEvent::Registered(r) => Some((r.handle, r.ids)),
            LifecycleEvent::RegisteredV2(r) => Some((r.handle, r.ids)),
            _ => None,
        };
        if let Some((handle, ids)) = allocated {
            // IDs the store does not reserve (checkpoints, other records) are known to the
            // journal: a registration must not allocate one of them either.
            let ids = [ids.running, ids.terminal, ids.lost, ids.completion];
            if let Some(id) = ids
                .into_iter()
                .find(|id| self.journal.position_of(*id).is_some())
            {
                return Err(Rejection::IdReserved { id, handle }.into());
            }
        }
        let payload = event.encode()?;
        let appended =
            self.journal
                .append_deferred(event_id, event.kind(), CODEC_VERSION, &payload)?;
        if appended.written {
            self.store.apply(event_id, event)?;
            self.records.lifecycle_events += 1;
            self.snapshots.folded_bytes += record_bytes(payload.len());
        }
        Ok(appended)
    }
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
