//! Checkpoints in three steps, so that the slow part (the `fdatasync`s) can run without the lock
//! that serializes appends: a supervisor keeps reading its pipes while a checkpoint syncs.
//!
//! 1. [`Spool::plan_sync`], under the writer's lock: which segment files and directories must be
//!    synced (the active segment by its descriptor, sealed ones by name and checked header, each
//!    opened in turn as the plan runs: a plan holds at most one descriptor of them), and the
//!    bounds the sync will make durable.
//! 2. [`SyncPlan::run`], anywhere (a blocking thread): the syncs themselves, several at once.
//! 3. [`Spool::finish_sync`], under the lock again: the planned bounds become `durable_total`.
//!
//! Invariants:
//! - A plan's bounds are taken when it is made: every byte below its `total_bytes` was written to
//!   its segment file before the plan, so the `fdatasync`s that follow cover it. Bytes appended
//!   while the plan runs are never counted by it, so `durable_total` never gets ahead of the disk.
//! - `durable_total` only grows (a plan finishing after a newer one cannot lower it).
//! - A failed or abandoned plan leaves the spool dirty: the next plan syncs everything again.
//! - A sealed segment the plan names but finds gone fails the plan only if it is still in the
//!   window when the plan finishes; retention removing it meanwhile is not a loss.
//! - The directory is synced whenever its entries may have changed since the last successful
//!   directory sync. The set of segment files is identified by the first cursors of the oldest
//!   and the newest segment (segments are only created at the end and deleted at the front), so a
//!   plan that sees the layout of the last synced directory can skip that `fsync`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::SpoolHeader;
use super::{LossReason, Spool, SpoolError, io, open_sealed_in, spare};
use crate::aligned::StageBuf;
use crate::root::dir::{Dir, file_name};

/// The first cursors of the oldest and the newest segment: which segment files are named in the
/// spool directory.
pub(super) type Layout = Option<(u64, u64)>;

/// At most this many syncs of one plan run at once (a spool that was not checkpointed for a long
/// time may have many segments to sync).
pub const SYNC_THREADS_MAX: usize = 4;

/// One `fdatasync` or directory `fsync` of a plan.
#[derive(Debug)]
enum SyncJob<'a> {
    Segment(&'a dyn io::SpoolIo, &'a File),
    /// Sealed segments, by name and the header their open checked: each opened, synced and
    /// closed in turn, so that a plan holds at most one descriptor of them whatever it covers
    /// (a fast writer on a slow disk leaves every retained segment to one plan). One whose file
    /// is gone goes to the list (last field) for [`Spool::finish_sync`] to judge: retention
    /// may have dropped it since the plan was made.
    Sealed(
        &'a dyn io::SpoolIo,
        Option<&'a Dir>,
        &'a [(String, SpoolHeader)],
    ),
    Directory(&'a Path),
    /// The spool's own directory, by its held descriptor.
    Held(&'a dyn io::SpoolIo, &'a Dir),
}

impl SyncJob<'_> {
    /// Runs the job; returns the names of the sealed segments it found gone.
    fn run(&self) -> Result<Vec<String>, SpoolError> {
        let synced = match self {
            SyncJob::Segment(seam, file) => seam.sync_data(file).map_err(io("sync segment")),
            SyncJob::Sealed(seam, dir, sealed) => return sync_sealed(*seam, *dir, sealed),
            SyncJob::Directory(dir) => crate::root::sync_dir(dir).map_err(io("sync directory")),
            SyncJob::Held(seam, dir) => seam.sync_dir(dir).map_err(io("sync directory")),
        };
        synced.map(|()| Vec::new())
    }
}

/// Opens, syncs and closes each sealed segment in turn; returns those whose file was gone.
fn sync_sealed(
    seam: &dyn io::SpoolIo,
    dir: Option<&Dir>,
    sealed: &[(String, SpoolHeader)],
) -> Result<Vec<String>, SpoolError> {
    let mut vanished = Vec::new();
    for (name, header) in sealed {
        let dir = dir.ok_or_else(|| SpoolError::Io {
            op: "open segment for sync",
            cause: std::io::Error::new(std::io::ErrorKind::NotFound, "the spool directory is gone"),
        })?;
        match open_sealed_in(dir, name, header) {
            Ok(file) => seam.sync_data(&file).map_err(io("sync segment"))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vanished.push(name.clone()),
            Err(e) => return Err(io("open segment for sync")(e)),
        }
    }
    Ok(vanished)
}

/// What one checkpoint must make durable; see the module docs.
#[derive(Debug)]
pub struct SyncPlan {
    /// Segment files to `fdatasync` by the descriptor they hold (the active one's), newest first.
    pub(super) files: Vec<Arc<File>>,
    /// Sealed segments to `fdatasync`, each opened when its turn comes (`SyncJob::Sealed`).
    pub(super) sealed: Vec<(String, SpoolHeader)>,
    /// Those of `sealed` whose file was gone when the plan ran. Only the writer knows whether
    /// that was retention (the segment left the window since the plan was made: its bytes are
    /// accounted as retained away, nothing to sync) or a loss; [`Spool::finish_sync`] decides.
    vanished: Vec<String>,
    /// The spool directory, when its entries may have changed since it was last synced.
    pub(super) dir: Option<Arc<Dir>>,
    /// The parent of a spool directory this writer created and has not yet synced.
    pub(super) parent: Option<PathBuf>,
    layout: Layout,
    total_bytes: u64,
    io: Arc<dyn io::SpoolIo>,
    /// The files of segments retention dropped and not yet removed, oldest first, removed first
    /// (see `Spool::defer_removals`) in the directory held by `held`; once the plan ran, the
    /// names it removed, which [`Spool::finish_sync`] takes off the spool's list. (The spool
    /// keeps its list until then: a plan lost before it ran leaves them to the next plan.)
    doomed: Vec<String>,
    held: Option<Arc<Dir>>,
    /// How many doomed files may become spares (`spare.rs`); once the plan ran, the spares it
    /// made and a directory sync made durable, and those it made that none did (to be removed).
    spare_room: usize,
    spares: Vec<String>,
    unsure: Vec<String>,
    /// The active segment's file and its chunks' end, when the spool has finished and the file
    /// holds a recycled file's old bytes past them: cut before it is synced.
    trim: Option<(Arc<File>, u64)>,
}

/// A plan that has run, with its result, to hand back to [`Spool::finish_sync`].
#[derive(Debug)]
pub struct SyncDone {
    plan: SyncPlan,
    result: Result<(), SpoolError>,
}

impl SyncPlan {
    /// Whether running it does any I/O.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
            && self.sealed.is_empty()
            && self.dir.is_none()
            && self.parent.is_none()
            && self.doomed.is_empty()
    }

    /// The bytes this plan makes durable: `total_bytes` as it was when the plan was made.
    #[cfg(any(test, feature = "test-support"))]
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Removes the segment files retention dropped (making spares of some, `spare.rs`), cuts a
    /// finished spool's recycled file back to its chunks, then performs the syncs: segments
    /// first, then the directory that names them (so that a removal is in the directory's synced
    /// state when the layout changed), then its parent. Blocking I/O; the spool itself is not
    /// touched.
    pub fn run(mut self) -> SyncDone {
        let made = match &self.held {
            Some(held) => {
                let retired = spare::retire(self.io.as_ref(), held, &self.doomed, self.spare_room);
                self.doomed = retired.taken;
                retired.spares
            }
            None => Vec::new(),
        };
        if let Some((file, len)) = &self.trim
            && let Err(e) = self.io.set_len(file, *len)
        {
            // Old bytes past the last chunk read as a torn tail, never as output.
            tracing::warn!(error = %e, "could not cut a recycled segment's old bytes");
        }
        let result = self.sync().map(|vanished| self.vanished = vanished);
        self.ready_spares(made, result.is_ok());
        SyncDone { plan: self, result }
    }

    /// Spares are ready once a directory sync after their renames succeeded: this plan's own,
    /// or (a plan that syncs no directory) one run for them here.
    fn ready_spares(&mut self, made: Vec<String>, synced: bool) {
        if made.is_empty() {
            return;
        }
        let durable = match (&self.dir, &self.held) {
            (Some(_), _) => synced,
            (None, Some(held)) => self.io.sync_dir(held).is_ok(),
            (None, None) => false,
        };
        if durable {
            self.spares = made;
        } else {
            self.unsure = made;
        }
    }

    /// Runs every sync of the plan, up to [`SYNC_THREADS_MAX`] at once (the sealed segments one
    /// after another on one of them, for the descriptor bound): concurrent `fdatasync`s
    /// share the file system's journal commits and keep the device busy, where one after another
    /// each waits for a commit of its own (measured: about 1.6x the throughput of a supervised
    /// fast writer). Nothing may be counted durable before all of them succeeded, so their order
    /// does not matter.
    fn sync(&self) -> Result<Vec<String>, SpoolError> {
        let seam: &dyn io::SpoolIo = self.io.as_ref();
        let mut jobs: Vec<SyncJob<'_>> = self
            .files
            .iter()
            .map(|f| SyncJob::Segment(seam, f))
            .collect();
        if !self.sealed.is_empty() {
            jobs.push(SyncJob::Sealed(seam, self.held.as_deref(), &self.sealed));
        }
        jobs.extend(self.dir.iter().map(|d| SyncJob::Held(seam, d)));
        jobs.extend(self.parent.iter().map(|d| SyncJob::Directory(d)));
        let workers = jobs.len().min(SYNC_THREADS_MAX);
        if workers <= 1 {
            return jobs.iter().try_fold(Vec::new(), run_into);
        }
        // Worker `w` runs jobs w, w + workers, ...; the calling thread is worker 0.
        let jobs = &jobs;
        let share = move |w: usize| -> Result<Vec<String>, SpoolError> {
            jobs.iter()
                .skip(w)
                .step_by(workers)
                .try_fold(Vec::new(), run_into)
        };
        std::thread::scope(|scope| {
            // A thread that cannot be created (the process is at its thread limit) leaves its
            // share to this thread: slower, never skipped, never a panic.
            let mut inline = Vec::new();
            let mut others = Vec::new();
            for w in 1..workers {
                match std::thread::Builder::new().spawn_scoped(scope, move || share(w)) {
                    Ok(handle) => others.push(handle),
                    Err(_) => inline.push(w),
                }
            }
            let mut result = share(0);
            for w in inline {
                result = merge(result, share(w));
            }
            for other in others {
                let joined = other.join().unwrap_or_else(|_| {
                    Err(SpoolError::Io {
                        op: "sync segment",
                        cause: std::io::Error::other("a sync thread panicked"),
                    })
                });
                result = merge(result, joined);
            }
            result
        })
    }
}

fn run_into(mut vanished: Vec<String>, job: &SyncJob<'_>) -> Result<Vec<String>, SpoolError> {
    vanished.extend(job.run()?);
    Ok(vanished)
}

/// Both shares' vanished segments, or the first error.
fn merge(
    a: Result<Vec<String>, SpoolError>,
    b: Result<Vec<String>, SpoolError>,
) -> Result<Vec<String>, SpoolError> {
    let (mut a, b) = (a?, b?);
    a.extend(b);
    Ok(a)
}

/// Removes the files of segments retention dropped from a spool's window, oldest first, and
/// stops at the first that cannot be removed (a file already gone counts as removed); returns
/// the names removed, taken off the front of `doomed`. In order, so that what stays on disk is
/// always a run of the oldest files next to the window: older output kept, never a hole. What
/// stays is left to the next plan (or, after a crash, to the next open, which counts it as
/// retained).
pub(super) fn remove_doomed(
    seam: &dyn io::SpoolIo,
    held: &Dir,
    doomed: &mut Vec<String>,
) -> Vec<String> {
    let removed = spare::retire(seam, held, doomed, 0).taken.len();
    doomed.drain(..removed).collect()
}

impl Spool {
    fn layout(&self) -> Layout {
        match (self.segments.front(), self.segments.back()) {
            (Some(oldest), Some(newest)) => {
                Some((oldest.header.first_cursor, newest.header.first_cursor))
            }
            _ => None,
        }
    }

    /// Step 1: what a checkpoint of everything appended so far must sync. Cheap (one `dup` per
    /// segment written since the last checkpoint); call under the writer's lock.
    pub fn plan_sync(&mut self) -> Result<SyncPlan, SpoolError> {
        let mut plan = self.plan_removals();
        if !self.writable {
            return Ok(plan);
        }
        if let Some(trim) = self.take_trim() {
            plan.trim = Some(trim);
            // The cut must reach the disk: the active segment is synced after it.
            self.dirty = true;
        }
        if !self.dirty {
            return Ok(plan);
        }
        // Staged chunks must be in the files the plan syncs.
        self.flush()?;
        // The write buffer is given back here, at most once per checkpoint, rather than kept for
        // the life of the handle: a process that stopped writing does not hold it.
        self.pending = StageBuf::new();
        // Newest first, down to and including the segment that held the last durable byte: it may
        // have been the active segment then, with appends after that checkpoint.
        for segment in self.segments.iter().rev() {
            if segment.file.is_none() && segment.end_cursor <= self.durable_total {
                // Sealed, and every byte of it was covered by an earlier checkpoint's sync.
                break;
            }
            // A sealed segment is opened anew when the plan runs: `fdatasync` of any descriptor
            // of the file writes back all of its data, whichever descriptor wrote it.
            match &segment.file {
                Some(held) => plan.files.push(Arc::clone(held)),
                None => plan
                    .sealed
                    .push((file_name(&segment.path).to_owned(), segment.header)),
            }
            if segment.end_cursor <= self.durable_total {
                break;
            }
        }
        if self.synced_layout != Some(plan.layout) {
            plan.dir = self.held.clone();
        }
        if self.parent_unsynced {
            plan.parent = self.dir.parent().map(PathBuf::from);
            self.parent_unsynced = false;
        }
        // Appends from now on set it again; a failed plan sets it again in `finish_sync`.
        self.dirty = false;
        // Bytes lost while writes fail are settled too: the bounds may pass them once their gap
        // (up to the plan's total) is recorded, so that checkpoints go on through a full disk.
        plan.total_bytes = self.total_bytes;
        Ok(plan)
    }

    /// The active segment's file and where its chunks end, once the spool has finished and that
    /// file still holds a recycled file's old bytes past them.
    fn take_trim(&mut self) -> Option<(Arc<File>, u64)> {
        if !self.finished {
            return None;
        }
        let active = self.segments.back()?;
        let file = active.file.as_ref()?;
        if self.stale_to <= active.valid_len {
            return None;
        }
        self.stale_to = 0;
        Some((Arc::clone(file), active.valid_len))
    }

    /// A plan that only removes the files of segments retention dropped (see
    /// [`Spool::defer_removals`]): it syncs nothing, so it makes nothing durable and leaves what
    /// the next [`Spool::plan_sync`] must sync as it was. For a writer that turns its window over
    /// faster than it checkpoints, whose dropped segments should leave the drain's thread without
    /// a sync of segments that are about to be dropped too.
    pub fn plan_removals(&self) -> SyncPlan {
        SyncPlan {
            files: Vec::new(),
            sealed: Vec::new(),
            vanished: Vec::new(),
            dir: None,
            parent: None,
            layout: self.layout(),
            total_bytes: self.durable_total,
            io: Arc::clone(&self.io),
            doomed: self.doomed.clone(),
            held: self.held.clone(),
            spare_room: if self.defer_removals && !self.finished {
                spare::SPARES_MAX.saturating_sub(self.spares.len())
            } else {
                0
            },
            spares: Vec::new(),
            unsure: Vec::new(),
            trim: None,
        }
    }

    /// Step 3: records what a plan made durable and returns the bounds a journal checkpoint may
    /// now record: `(retained_from, durable_total)`. On failure the spool stays dirty and the
    /// error is returned; nothing counts as durable that was not synced.
    pub fn finish_sync(&mut self, done: SyncDone) -> Result<(u64, u64), SpoolError> {
        let SyncDone { plan, result } = done;
        self.doomed.retain(|name| !plan.doomed.contains(name));
        self.spares.extend(plan.spares.iter().cloned());
        // Made while the spool finished, or by plans that ran side by side, past the bound: the
        // next plan removes them with the ones no sync made durable.
        let keep = if self.finished { 0 } else { spare::SPARES_MAX };
        let extra = self.spares.len().saturating_sub(keep);
        self.doomed.extend(self.spares.drain(..extra));
        self.doomed.extend(plan.unsure.iter().cloned());
        let result = result.and_then(|()| self.judge_vanished(&plan));
        if let Err(e) = result {
            self.dirty = true;
            if plan.parent.is_some() {
                self.parent_unsynced = true;
            }
            // Never retried on the same data: after a failed sync the kernel may have dropped
            // the dirty pages it could not write, so a later sync that succeeds proves nothing
            // about them. Everything since the last good sync is lost, and writing goes on in a
            // new segment.
            let errno = match &e {
                SpoolError::Io { cause, .. } => cause.raw_os_error().unwrap_or(0),
                _ => 0,
            };
            self.fail(self.durable_total, LossReason::SyncFailed, errno, false);
            return Err(e);
        }
        if plan.dir.is_some() {
            self.synced_layout = Some(plan.layout);
        }
        debug_assert!(plan.total_bytes <= self.total_bytes);
        self.durable_total = self.durable_total.max(plan.total_bytes);
        // Retention may have deleted segments while the plan ran: the current `retained_from`
        // is where readable output starts now, and everything from there to `durable_total` is
        // on disk (deletion only removes bytes below it).
        Ok((self.retained_from, self.durable_total))
    }

    /// A sealed segment the plan found gone is fine when it has left the window since (retention
    /// dropped it, its bytes now below `retained_from`); one still in the window was removed by
    /// someone else, and its unsynced bytes are lost like a failed sync's.
    fn judge_vanished(&self, plan: &SyncPlan) -> Result<(), SpoolError> {
        let in_window = plan.vanished.iter().find(|name| {
            self.segments
                .iter()
                .any(|s| file_name(&s.path) == name.as_str())
        });
        let Some(name) = in_window else {
            return Ok(());
        };
        tracing::warn!(segment = %name, "a retained segment's file is gone");
        Err(SpoolError::Io {
            op: "open segment for sync",
            cause: std::io::Error::from_raw_os_error(libc::ENOENT),
        })
    }

    /// For a plan that will never be finished (the task running it was lost, and the plan with
    /// it): the spool is marked dirty and its directory's entry unsynced, so the next plan syncs
    /// at least everything the lost one would have.
    pub fn abandon_sync(&mut self) {
        self.dirty = true;
        self.parent_unsynced = true;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Spool, SpoolOptions, format::Stream};

    fn small() -> SpoolOptions {
        SpoolOptions {
            segment_bytes: 1024,
            retention_bytes: 1 << 20,
        }
    }

    #[test]
    fn a_plan_counts_only_what_was_appended_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spool, _) = Spool::open_writer(dir.path(), [1; 16], small()).unwrap();
        spool.append(Stream::Stdout, &[b'a'; 300]).unwrap();
        let plan = spool.plan_sync().unwrap();
        assert_eq!(plan.total_bytes(), 300);
        // Appends go on while the plan runs elsewhere, into a new segment too.
        spool.append(Stream::Stderr, &[b'b'; 2000]).unwrap();
        let done = plan.run();
        assert_eq!(spool.finish_sync(done).unwrap(), (0, 300));
        assert_eq!(spool.durable_total(), 300);
        // The next checkpoint covers the rest, in the segment written since; the sealed one's
        // bytes were all synced, so it is not opened again.
        let plan = spool.plan_sync().unwrap();
        assert_eq!(plan.files.len(), 1, "{plan:?}");
        assert!(plan.dir.is_some(), "new segments were named");
        assert_eq!(spool.finish_sync(plan.run()).unwrap(), (0, 2300));
    }

    #[test]
    fn nothing_new_plans_nothing_and_the_directory_is_synced_only_when_it_changed() {
        let dir = tempfile::tempdir().unwrap();
        // A directory this writer creates: its entry in the parent is synced once, too.
        let (mut spool, _) = Spool::open_writer(&dir.path().join("s"), [2; 16], small()).unwrap();
        spool.append(Stream::Stdout, &[b'a'; 100]).unwrap();
        let plan = spool.plan_sync().unwrap();
        assert!(plan.dir.is_some() && plan.parent.is_some(), "{plan:?}");
        spool.finish_sync(plan.run()).unwrap();
        let plan = spool.plan_sync().unwrap();
        assert!(plan.is_empty(), "{plan:?}");
        assert_eq!(spool.finish_sync(plan.run()).unwrap(), (0, 100));
        // More bytes in the same segment: only that segment.
        spool.append(Stream::Stdout, &[b'a'; 100]).unwrap();
        let plan = spool.plan_sync().unwrap();
        assert_eq!(plan.files.len(), 1);
        assert!(plan.dir.is_none() && plan.parent.is_none(), "{plan:?}");
        spool.finish_sync(plan.run()).unwrap();
        // A rotation names a new file: the directory is synced again.
        spool.append(Stream::Stdout, &[b'a'; 1000]).unwrap();
        let plan = spool.plan_sync().unwrap();
        assert!(plan.dir.is_some(), "{plan:?}");
        assert_eq!(spool.finish_sync(plan.run()).unwrap(), (0, 1200));
    }

    #[test]
    fn a_plan_with_more_syncs_than_threads_runs_them_all() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spool, _) = Spool::open_writer(&dir.path().join("s"), [6; 16], small()).unwrap();
        for _ in 0..12 {
            spool.append(Stream::Stdout, &[b'a'; 900]).unwrap();
        }
        let plan = spool.plan_sync().unwrap();
        // The active segment by its descriptor, the eleven sealed ones by name: the plan opens
        // them one at a time when it runs, so it never holds more than one of them.
        assert_eq!((plan.files.len(), plan.sealed.len()), (1, 11));
        assert!(plan.files.len() + plan.sealed.len() + 2 > super::SYNC_THREADS_MAX);
        assert_eq!(spool.finish_sync(plan.run()).unwrap(), (0, 12 * 900));
        drop(spool);
        // Everything is still there for a reader.
        let (reader, recovery) = Spool::open_reader(&dir.path().join("s")).unwrap();
        assert!(recovery.is_clean());
        assert_eq!(
            reader.read(0, usize::MAX / 2).unwrap().bytes,
            vec![b'a'; 12 * 900]
        );
    }

    /// A sealed segment replaced between the plan and its run is refused, not synced as this
    /// spool's: the run fails, and everything since the last good sync is lost, as for any
    /// failed sync, and said.
    #[test]
    fn a_sealed_segment_replaced_before_the_run_fails_the_sync() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spool, _) = Spool::open_writer(dir.path(), [7; 16], small()).unwrap();
        spool.append(Stream::Stdout, &[b'a'; 900]).unwrap();
        spool.append(Stream::Stdout, &[b'a'; 900]).unwrap();
        let plan = spool.plan_sync().unwrap();
        assert_eq!(plan.sealed.len(), 1, "{plan:?}");
        let name = dir.path().join(&plan.sealed[0].0);
        let mut bytes = std::fs::read(&name).unwrap();
        bytes[40] ^= 1;
        std::fs::remove_file(&name).unwrap();
        std::fs::write(&name, &bytes).unwrap();
        let failed = spool.finish_sync(plan.run()).unwrap_err();
        assert!(
            failed.to_string().contains("open segment for sync"),
            "{failed}"
        );
        assert_eq!(spool.durable_total(), 0);
        assert!(!spool.gaps().is_empty(), "the unsynced bytes are a gap");
    }

    #[test]
    fn a_plan_finishing_late_never_lowers_the_durable_total() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spool, _) = Spool::open_writer(dir.path(), [3; 16], small()).unwrap();
        spool.append(Stream::Stdout, &[b'a'; 100]).unwrap();
        let older = spool.plan_sync().unwrap();
        spool.append(Stream::Stdout, &[b'a'; 100]).unwrap();
        let newer = spool.plan_sync().unwrap();
        assert_eq!(spool.finish_sync(newer.run()).unwrap(), (0, 200));
        assert_eq!(spool.finish_sync(older.run()).unwrap(), (0, 200));
    }

    #[test]
    fn an_abandoned_plan_leaves_everything_for_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spool, _) = Spool::open_writer(&dir.path().join("s"), [4; 16], small()).unwrap();
        spool.append(Stream::Stdout, &[b'a'; 800]).unwrap();
        spool.append(Stream::Stdout, &[b'a'; 1200]).unwrap();
        let lost = spool.plan_sync().unwrap();
        drop(lost);
        spool.abandon_sync();
        assert_eq!(spool.durable_total(), 0);
        let plan = spool.plan_sync().unwrap();
        assert_eq!(plan.total_bytes(), 2000);
        assert!(plan.files.len() + plan.sealed.len() >= 2);
        assert!(plan.dir.is_some() && plan.parent.is_some());
        assert_eq!(spool.finish_sync(plan.run()).unwrap(), (0, 2000));
    }

    #[test]
    fn retention_during_a_plan_reports_where_output_now_starts() {
        let dir = tempfile::tempdir().unwrap();
        let options = SpoolOptions {
            segment_bytes: 1024,
            retention_bytes: 1500,
        };
        let (mut spool, _) = Spool::open_writer(dir.path(), [5; 16], options).unwrap();
        spool.append(Stream::Stdout, &[b'a'; 900]).unwrap();
        let plan = spool.plan_sync().unwrap();
        spool.append(Stream::Stdout, &[b'a'; 3000]).unwrap();
        let retained_from = spool.retained_from();
        assert!(retained_from > 0);
        assert_eq!(spool.finish_sync(plan.run()).unwrap(), (retained_from, 900));
    }

    /// A plan names its sealed segments and opens them only as it runs; retention may remove
    /// one in between (here at once, as an unsupervised spool does). Its bytes left the window
    /// by retention, so the plan succeeds and nothing is called lost.
    #[test]
    fn a_sealed_segment_retention_removes_before_the_run_is_no_loss() {
        let dir = tempfile::tempdir().unwrap();
        let options = SpoolOptions {
            segment_bytes: 1024,
            retention_bytes: 2000,
        };
        let (mut spool, _) = Spool::open_writer(dir.path(), [6; 16], options).unwrap();
        spool.append(Stream::Stdout, &[b'a'; 900]).unwrap();
        spool.append(Stream::Stdout, &[b'a'; 900]).unwrap();
        let plan = spool.plan_sync().unwrap();
        assert_eq!(plan.sealed.len(), 1, "{plan:?}");
        let planned = dir.path().join(&plan.sealed[0].0);
        spool.append(Stream::Stdout, &[b'a'; 3000]).unwrap();
        assert!(!planned.exists(), "retention removed the planned segment");
        let retained_from = spool.retained_from();
        assert_eq!(
            spool.finish_sync(plan.run()).unwrap(),
            (retained_from, 1800)
        );
        assert!(spool.gaps().is_empty(), "{:?}", spool.gaps());
    }

    /// A retained segment whose file someone else removed before the plan ran is a failed
    /// sync: its unsynced bytes are lost, said as a gap, never counted durable.
    #[test]
    fn a_retained_segment_removed_before_the_run_fails_the_sync() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spool, _) = Spool::open_writer(dir.path(), [8; 16], small()).unwrap();
        spool.append(Stream::Stdout, &[b'a'; 900]).unwrap();
        spool.append(Stream::Stdout, &[b'a'; 900]).unwrap();
        let plan = spool.plan_sync().unwrap();
        assert_eq!(plan.sealed.len(), 1, "{plan:?}");
        std::fs::remove_file(dir.path().join(&plan.sealed[0].0)).unwrap();
        let failed = spool.finish_sync(plan.run()).unwrap_err();
        assert!(failed.to_string().contains("open segment"), "{failed}");
        assert_eq!(spool.durable_total(), 0);
        assert!(!spool.gaps().is_empty(), "the unsynced bytes are a gap");
    }
}
