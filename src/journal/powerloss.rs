//! A power-loss simulator [`Backend`] for tests, in the manner of SQLite's crash-test VFS and
//! redb's crash-consistency tests.
//!
//! The workload runs against real files through [`FileBackend`]; this wrapper additionally writes
//! down, in one log and in the order they happened, every event that decides what a power cut
//! could leave on disk: a segment becoming durable as a whole (created, committed or extended: the
//! backend syncs those before returning), each `write_at` and each commit slot (offset and bytes),
//! the start and the successful end of each flush, and, noted by the test itself, each append the
//! journal returned and each one acknowledged. [`Sim::state_at`] replays a prefix of that log into
//! the state of every segment file at that moment (its durable image, and the writes since its
//! last completed flush), and [`CrashState::image`] builds a post-crash image from it under a
//! [`Loss`] plan, which the test writes into a fresh root ([`write_image`]) and opens with the
//! real journal.
//!
//! Invariants of the model:
//! - A write is logged after the store it describes returned, and a flush's start is logged before
//!   the flush begins: a flush covers exactly the writes of its file logged before its start (a
//!   write that raced the flush stays pending, which is the conservative reading: it may or may
//!   not have reached the disk). `fdatasync` on any descriptor of a file flushes every dirty page
//!   of it, so the model keys files by name, not by handle.
//! - An acknowledgement is logged by the test after `append` (or, under `Os`, `Journal::sync`)
//!   returned, so at any prefix of the log every acknowledged record's flush has completed and its
//!   bytes are in the durable image.
//! - An acknowledged record is *confirmed* once a commit slot written to its segment after its
//!   acknowledgement has been flushed: only then does the disk itself say that the flush which
//!   acknowledged it returned (format v2, "Commit area").
//! - A power cut inside a workload ([`Sim::power_cut`]) replaces every file's state by the image
//!   put in place; acknowledgements before it stay acknowledged.
//! - Segment creation is durable once the backend call returns; a crash during it leaves the
//!   file out of the image (it never held a record). Spares are never in an image.
//! - Pending writes are cut at 4096-byte page boundaries for the page-level plans: a page is the
//!   unit the kernel writes back, in any order, and one `write_at` may span several.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::sync::Lock;

use super::storage::{Backend, FileBackend, SegmentStore, Syncer};
use super::{Position, recovery};
use crate::root::dir::Dir;

/// The unit of write-back.
pub(crate) const PAGE_BYTES: usize = 4096;

/// One event of the log.
#[derive(Debug, Clone)]
enum Entry {
    /// The file's whole contents are durable (a segment created, committed or extended).
    Durable {
        file: String,
        contents: Arc<Vec<u8>>,
    },
    Write {
        file: String,
        offset: usize,
        bytes: Vec<u8>,
        /// A commit slot (`Syncer::write_slot`), not a record.
        slot: bool,
    },
    /// A flush of `file` began: it covers every write of `file` logged before this entry.
    SyncBegin { file: String, id: u64 },
    /// The flush `id` returned `Ok`.
    SyncEnd { id: u64 },
    /// `append` returned this record (acknowledged or not).
    Appended {
        seq: u64,
        index: u64,
        position: Position,
    },
    /// The record with this seq, event `index`, is acknowledged.
    Acked { seq: u64, index: u64 },
    /// The workload cut the power itself and put this image in place before it reopened: every
    /// file is exactly this, nothing is pending, and no other file exists.
    PowerCut {
        files: BTreeMap<String, Arc<Vec<u8>>>,
    },
}

/// The shared log of one simulated workload.
pub(crate) struct Sim {
    log: Lock<Vec<Entry>>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("entries", &self.len())
            .finish_non_exhaustive()
    }
}

fn file_key(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Sim {
    pub(crate) fn new() -> Arc<Sim> {
        Arc::new(Sim {
            log: Lock::new(Vec::new()),
        })
    }

    fn push(&self, entry: Entry) -> usize {
        let mut log = self.log.lock();
        log.push(entry);
        log.len() - 1
    }

    /// Number of log entries: crash points are `0..=len()`.
    pub(crate) fn len(&self) -> usize {
        self.log.lock().len()
    }

    /// The crash point just after the last append was noted (before, say, a clean close).
    pub(crate) fn after_last_append(&self) -> usize {
        let log = self.log.lock();
        log.iter()
            .rposition(|e| matches!(e, Entry::Appended { .. }))
            .map_or(0, |n| n + 1)
    }

    /// Notes that `append` returned `position` for the event with test index `index`.
    pub(crate) fn appended(&self, position: Position, index: u64) {
        self.push(Entry::Appended {
            seq: position.seq,
            index,
            position,
        });
    }

    /// Notes that the record with `seq`, event `index`, is acknowledged (call only after the
    /// call that acknowledged it returned).
    pub(crate) fn acked(&self, seq: u64, index: u64) {
        self.push(Entry::Acked { seq, index });
    }

    /// Notes that the workload replaced the files with this post-crash image (and will reopen).
    pub(crate) fn power_cut(&self, image: &BTreeMap<String, Vec<u8>>) {
        self.push(Entry::PowerCut {
            files: image
                .iter()
                .map(|(name, bytes)| (name.clone(), Arc::new(bytes.clone())))
                .collect(),
        });
    }

    fn durable_from_disk(&self, path: &Path) -> io::Result<()> {
        let contents = std::fs::read(path)?;
        self.push(Entry::Durable {
            file: file_key(path),
            contents: Arc::new(contents),
        });
        Ok(())
    }

    fn sync_begin(&self, file: &str) -> u64 {
        let mut log = self.log.lock();
        let id = log.len() as u64;
        log.push(Entry::SyncBegin {
            file: file.to_owned(),
            id,
        });
        id
    }

    /// The state of every segment file and of the ground truth after the first `at` entries.
    pub(crate) fn state_at(&self, at: usize) -> CrashState {
        let log = self.log.lock();
        let mut replay = LogReplay::default();
        for (n, entry) in log.iter().take(at).enumerate() {
            replay.entry(n, entry);
        }
        replay.state
    }
}

/// A prefix of the log replayed in order into a [`CrashState`], with what the entries still to
/// come may resolve.
#[derive(Default)]
struct LogReplay {
    state: CrashState,
    /// Flush id -> (file, number of the entry that began it).
    begun: HashMap<u64, (String, usize)>,
    /// Acknowledged seqs not yet confirmed: (their segment file, the entry of the first commit
    /// slot written to that file after the acknowledgement, if any).
    confirming: BTreeMap<u64, (String, Option<usize>)>,
}

impl LogReplay {
    /// Replays entry number `n`.
    fn entry(&mut self, n: usize, entry: &Entry) {
        match entry {
            Entry::Durable { file, contents } => {
                self.state.files.insert(
                    file.clone(),
                    FileState {
                        durable: contents.as_ref().clone(),
                        pending: Vec::new(),
                    },
                );
            }
            Entry::Write {
                file,
                offset,
                bytes,
                slot,
            } => self.write(n, file, *offset, bytes, *slot),
            Entry::SyncBegin { file, id } => {
                self.begun.insert(*id, (file.clone(), n));
            }
            Entry::SyncEnd { id } => self.sync_end(*id),
            Entry::Appended {
                seq,
                index,
                position,
            } => {
                self.state.appended.insert(*seq, (*index, *position));
            }
            Entry::Acked { seq, index } => self.acked(*seq, *index),
            Entry::PowerCut { files } => self.power_cut(files),
        }
    }

    fn write(&mut self, n: usize, file: &str, offset: usize, bytes: &[u8], slot: bool) {
        if slot {
            for (f, slot_at) in self.confirming.values_mut() {
                if f == file && slot_at.is_none() {
                    *slot_at = Some(n);
                }
            }
        }
        // A file that was never seen durable was never named as a segment: a write to it cannot
        // happen through the journal; keep the model total anyway.
        let f = self.state.files.entry(file.to_owned()).or_default();
        f.pending.push(PendingWrite {
            entry: n,
            offset,
            bytes: bytes.to_vec(),
        });
    }

    fn sync_end(&mut self, id: u64) {
        let Some((file, began)) = self.begun.remove(&id) else {
            return;
        };
        let confirmed = &mut self.state.confirmed;
        self.confirming.retain(|seq, (f, slot_at)| {
            let is_confirmed = *f == file && slot_at.is_some_and(|s| s < began);
            if is_confirmed {
                confirmed.insert(*seq);
            }
            !is_confirmed
        });
        if let Some(f) = self.state.files.get_mut(&file) {
            let (covered, later): (Vec<_>, Vec<_>) =
                f.pending.drain(..).partition(|w| w.entry < began);
            for w in covered {
                apply(&mut f.durable, w.offset, &w.bytes);
            }
            f.pending = later;
        }
    }

    fn acked(&mut self, seq: u64, index: u64) {
        if let Some(earlier) = self.state.acked.insert(seq, index)
            && earlier != index
        {
            self.state.reused.push((seq, earlier, index));
        }
        if let Some((_, position)) = self.state.appended.get(&seq) {
            self.confirming
                .insert(seq, (segment_name(position.segment_index), None));
        }
    }

    fn power_cut(&mut self, files: &BTreeMap<String, Arc<Vec<u8>>>) {
        self.state.files = files
            .iter()
            .map(|(name, bytes)| {
                let f = FileState {
                    durable: bytes.as_ref().clone(),
                    pending: Vec::new(),
                };
                (name.clone(), f)
            })
            .collect();
        self.begun.clear();
        // A slot not yet flushed may not have survived the cut.
        for (_, slot_at) in self.confirming.values_mut() {
            *slot_at = None;
        }
    }
}

fn apply(image: &mut Vec<u8>, offset: usize, bytes: &[u8]) {
    let end = offset + bytes.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[offset..end].copy_from_slice(bytes);
}

/// A write not yet covered by a completed flush.
#[derive(Debug, Clone)]
pub(crate) struct PendingWrite {
    entry: usize,
    pub(crate) offset: usize,
    pub(crate) bytes: Vec<u8>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct FileState {
    /// The contents as of the last completed flush.
    pub(crate) durable: Vec<u8>,
    /// Writes since, in the order they were made.
    pub(crate) pending: Vec<PendingWrite>,
}

/// Everything a crash at one point of the log decides from.
#[derive(Debug, Clone, Default)]
pub(crate) struct CrashState {
    /// Segment files by name.
    pub(crate) files: BTreeMap<String, FileState>,
    /// Every record `append` returned: seq -> (test index, position).
    pub(crate) appended: BTreeMap<u64, (u64, Position)>,
    /// The acknowledged records: seq -> test index (the first acknowledged with that seq).
    pub(crate) acked: BTreeMap<u64, u64>,
    /// Seqs acknowledged twice, for different events: (seq, first index, later index).
    pub(crate) reused: Vec<(u64, u64, u64)>,
    /// Acknowledged seqs whose acknowledgement is itself on disk: after the flush that
    /// acknowledged the record, a commit slot was written to its segment and a flush that began
    /// after that slot returned. The others are in the last flush that returned, and the disk
    /// cannot tell whether that flush returned (format v2, "Commit area").
    pub(crate) confirmed: BTreeSet<u64>,
}

/// How a torn write tears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tear {
    /// Only the first `n % len` bytes of the piece reached the disk.
    Prefix(usize),
    /// Each byte of the piece reached the disk or not, as the bits of a generator seeded here
    /// say (sectors and cache lines of one page in any order).
    Bytes(u64),
}

/// What a power cut does to the writes since the last completed flush of each file. Masks are
/// read cyclically (`mask[i % mask.len()]`; an empty mask keeps nothing) and indices are taken
/// modulo the number of candidates, so any values make a valid plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Loss {
    /// No pending write reached the disk.
    DropAll,
    /// Every pending write reached the disk (what a process crash leaves).
    KeepAll,
    /// Whole writes reached the disk where the mask says.
    Writes(Vec<bool>),
    /// Page pieces of the writes reached the disk where the mask says.
    Pages(Vec<bool>),
    /// Page pieces reached the disk where `keep` says, then the piece `victim` tore.
    Torn {
        keep: Vec<bool>,
        victim: usize,
        tear: Tear,
    },
}

/// A pending write, or the part of one that falls in one page.
#[derive(Debug, Clone)]
struct Piece<'a> {
    file: &'a str,
    offset: usize,
    bytes: &'a [u8],
}

fn kept(mask: &[bool], i: usize) -> bool {
    !mask.is_empty() && mask[i % mask.len()]
}

/// xorshift64*, for the byte masks of torn pieces.
fn next_bits(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

impl CrashState {
    fn pieces(&self, pages: bool) -> Vec<Piece<'_>> {
        let mut out = Vec::new();
        for (file, f) in &self.files {
            for w in &f.pending {
                if !pages {
                    out.push(Piece {
                        file,
                        offset: w.offset,
                        bytes: &w.bytes,
                    });
                    continue;
                }
                let mut at = 0;
                while at < w.bytes.len() {
                    let offset = w.offset + at;
                    let room = PAGE_BYTES - offset % PAGE_BYTES;
                    let n = room.min(w.bytes.len() - at);
                    out.push(Piece {
                        file,
                        offset,
                        bytes: &w.bytes[at..at + n],
                    });
                    at += n;
                }
            }
        }
        out
    }

    /// Number of pending writes and of their page pieces, for reports.
    pub(crate) fn pending_counts(&self) -> (usize, usize) {
        (self.pieces(false).len(), self.pieces(true).len())
    }

    /// The post-crash contents of every segment file under `loss`.
    pub(crate) fn image(&self, loss: &Loss) -> BTreeMap<String, Vec<u8>> {
        let mut out: BTreeMap<String, Vec<u8>> = self
            .files
            .iter()
            .map(|(name, f)| (name.clone(), f.durable.clone()))
            .collect();
        let put = |out: &mut BTreeMap<String, Vec<u8>>, p: &Piece<'_>| {
            if let Some(image) = out.get_mut(p.file) {
                apply(image, p.offset, p.bytes);
            }
        };
        match loss {
            Loss::DropAll => {}
            Loss::KeepAll => {
                for p in self.pieces(false) {
                    put(&mut out, &p);
                }
            }
            Loss::Writes(mask) => {
                for (i, p) in self.pieces(false).iter().enumerate() {
                    if kept(mask, i) {
                        put(&mut out, p);
                    }
                }
            }
            Loss::Pages(mask) => {
                for (i, p) in self.pieces(true).iter().enumerate() {
                    if kept(mask, i) {
                        put(&mut out, p);
                    }
                }
            }
            Loss::Torn { keep, victim, tear } => {
                let pieces = self.pieces(true);
                let victim = (!pieces.is_empty()).then(|| victim % pieces.len());
                for (i, p) in pieces.iter().enumerate() {
                    if Some(i) != victim && kept(keep, i) {
                        put(&mut out, p);
                    }
                }
                if let Some(v) = victim {
                    let p = &pieces[v];
                    if let Some(image) = out.get_mut(p.file) {
                        match *tear {
                            Tear::Prefix(n) => {
                                let n = n % p.bytes.len().max(1);
                                apply(image, p.offset, &p.bytes[..n]);
                            }
                            Tear::Bytes(seed) => {
                                let mut bits = seed | 1;
                                let mut word = 0;
                                for (j, &b) in p.bytes.iter().enumerate() {
                                    if j % 64 == 0 {
                                        word = next_bits(&mut bits);
                                    }
                                    if word >> (j % 64) & 1 == 1 {
                                        apply(image, p.offset + j, &[b]);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

/// Writes an image as the journal of a fresh runtime root `root` (`<root>/journal/<name>`).
pub(crate) fn write_image(root: &Path, files: &BTreeMap<String, Vec<u8>>) -> io::Result<()> {
    let dir = root.join("journal");
    std::fs::create_dir_all(&dir)?;
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(())
}

/// The backend: [`FileBackend`] with every write and flush of a segment written down in a [`Sim`].
#[derive(Debug)]
pub(crate) struct PowerLossBackend {
    sim: Arc<Sim>,
}

impl PowerLossBackend {
    pub(crate) fn new(sim: Arc<Sim>) -> Arc<Self> {
        Arc::new(PowerLossBackend { sim })
    }
}

#[derive(Debug)]
struct SimStore {
    inner: Box<dyn SegmentStore>,
    file: String,
    sim: Arc<Sim>,
}

#[derive(Debug)]
struct SimSyncer {
    inner: Arc<dyn Syncer>,
    file: String,
    sim: Arc<Sim>,
}

impl Syncer for SimSyncer {
    fn sync(&self) -> io::Result<()> {
        let id = self.sim.sync_begin(&self.file);
        self.inner.sync()?;
        self.sim.push(Entry::SyncEnd { id });
        Ok(())
    }

    fn write_slot(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        // A commit slot is a write like any other: pending until a flush that began after it.
        self.inner.write_slot(offset, bytes)?;
        self.sim.push(Entry::Write {
            file: self.file.clone(),
            offset,
            bytes: bytes.to_vec(),
            slot: true,
        });
        Ok(())
    }
}

impl SegmentStore for SimStore {
    fn write_at(&mut self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_at(offset, bytes)?;
        self.sim.push(Entry::Write {
            file: self.file.clone(),
            offset,
            bytes: bytes.to_vec(),
            slot: false,
        });
        Ok(())
    }

    fn syncer(&self) -> Arc<dyn Syncer> {
        Arc::new(SimSyncer {
            inner: self.inner.syncer(),
            file: self.file.clone(),
            sim: Arc::clone(&self.sim),
        })
    }
}

impl Backend for PowerLossBackend {
    fn prepare_spare(&self, dir: &Dir, spare_name: &str, segment_bytes: usize) -> io::Result<()> {
        // Spares hold no record and are left out of every image.
        FileBackend.prepare_spare(dir, spare_name, segment_bytes)
    }

    fn commit_spare(
        &self,
        dir: &Dir,
        spare_name: &str,
        name: &str,
        header: &[u8],
    ) -> io::Result<()> {
        FileBackend.commit_spare(dir, spare_name, name, header)?;
        // Nothing writes the new segment before this returns to the writer.
        self.sim.durable_from_disk(&dir.join(name))
    }

    fn open_segment(
        &self,
        dir: &Dir,
        name: &str,
        segment_bytes: usize,
        through_map: bool,
    ) -> io::Result<Box<dyn SegmentStore>> {
        Ok(Box::new(SimStore {
            inner: FileBackend.open_segment(dir, name, segment_bytes, through_map)?,
            file: name.to_owned(),
            sim: Arc::clone(&self.sim),
        }))
    }

    fn extend_segment(&self, dir: &Dir, name: &str, segment_bytes: usize) -> io::Result<()> {
        FileBackend.extend_segment(dir, name, segment_bytes)?;
        // Only a writable open extends, before it writes anything: the whole file is durable.
        self.sim.durable_from_disk(&dir.join(name))
    }

    fn sync_segment(&self, dir: &Dir, name: &str) -> io::Result<()> {
        let file = name.to_owned();
        let id = self.sim.sync_begin(&file);
        FileBackend.sync_segment(dir, name)?;
        self.sim.push(Entry::SyncEnd { id });
        Ok(())
    }
}

/// The file name of segment `index`, as images key it.
pub(crate) fn segment_name(index: u64) -> String {
    recovery::segment_file_name(index)
}

/// Where tests put simulated roots: tmpfs when there is one (the simulator, not the device,
/// decides what survives, so real flushes there would only cost time).
pub(crate) fn scratch_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}
