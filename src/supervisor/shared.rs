//! What every supervisor task may read ([`Shared`]): the configuration, the host's services,
//! the lifecycle behind its one lock, and the few counters the actor publishes.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use crate::sync::Lock;

use super::process::Proc;
use super::services::Services;
use super::{SupervisorConfig, now_unix_ms};
use crate::journal::{Appended, EventId, Journal, JournalError};
use crate::lifecycle::event::StopRequested;
use crate::lifecycle::retention::{self, CleanReport, RetentionRequest};
use crate::lifecycle::{
    Handle, Lifecycle, LifecycleError, LifecycleEvent, Manifest, SnapshotWritten,
};

/// A record whose flush was started beside the caller ([`Shared::acknowledge_beside`]).
#[derive(Debug)]
pub(crate) struct Acknowledging {
    journal: Arc<Journal>,
    seq: u64,
}

impl Acknowledging {
    /// Returns once the record is acknowledged (on the calling thread, which must not be a
    /// runtime thread). It acknowledges the record itself rather than wait for the thread that
    /// started the flush: it joins that flush if it runs, and leads one if that thread has not
    /// run yet (a blocking pool full of launches waiting here must not wait for a thread of
    /// that same pool).
    pub fn wait(self) -> Result<(), JournalError> {
        self.journal.acknowledge(self.seq)
    }
}

/// What every supervisor task may read; only the journal's writer is mutable, behind its lock.
#[derive(Debug)]
pub(crate) struct Shared {
    pub config: SupervisorConfig,
    pub services: Services,
    pub lifecycle: Lock<Lifecycle>,
    pub(super) root: PathBuf,
    /// The actor's admission count, published for `live_count` (written by the actor only).
    pub(super) live: AtomicUsize,
    /// The pause gate: set only under the lifecycle lock, together with its journal record
    /// (`gate.rs`), and read by the actor's start path.
    pub(super) paused: AtomicBool,
    /// The login shell's environment, captured at open (`SupervisorConfig::login_shell`), or
    /// why not; `None` when no capture was configured.
    pub login_env: Option<Result<Vec<(String, String)>, String>>,
    /// What the open found damaged (`lifecycle::damage`), said once at open.
    pub(super) damage: Option<String>,
    /// `trees/`, where guardians leave receipts, held by descriptor: a receipt is removed by
    /// its handle's name in it, never by a path read back from the journal.
    pub trees: crate::root::dir::Dir,
}

impl Shared {
    /// Validates, appends and acknowledges one lifecycle event off the async threads; the
    /// lifecycle lock is held only for the write, not for the flush, so concurrent processes
    /// share group commits.
    pub async fn append(
        self: &Arc<Self>,
        id: EventId,
        event: LifecycleEvent,
    ) -> Result<Appended, LifecycleError> {
        self.append_off_runtime(id, event, true).await
    }

    /// [`Shared::append`] without waiting for a flush: the record is written now and is made
    /// durable by the next flush, at the latest by the next acknowledged record's (durability is
    /// a prefix). For records no claim needs durable on their own.
    pub async fn append_unacknowledged(
        self: &Arc<Self>,
        id: EventId,
        event: LifecycleEvent,
    ) -> Result<Appended, LifecycleError> {
        self.append_off_runtime(id, event, false).await
    }

    /// Appends on the blocking pool (a rotation flushes and creates files), acknowledged or not.
    async fn append_off_runtime(
        self: &Arc<Self>,
        id: EventId,
        event: LifecycleEvent,
        acknowledged: bool,
    ) -> Result<Appended, LifecycleError> {
        let shared = Arc::clone(self);
        let joined = tokio::task::spawn_blocking(move || {
            if acknowledged {
                shared.append_blocking(id, &event)
            } else {
                shared.append_deferred_blocking(id, &event)
            }
        })
        .await;
        match joined {
            Ok(result) => result,
            Err(e) => Err(LifecycleError::Journal(
                crate::journal::JournalError::Poisoned {
                    cause: format!("append task failed: {e}"),
                },
            )),
        }
    }

    /// Runs `act` and, if it succeeded, appends and acknowledges `event`, with the lifecycle
    /// lock held across both: records of actions on one resource (a terminal's size) are then in
    /// the order the actions took effect, whoever asked for them. `act` must be quick (one
    /// syscall): every append waits for it. On the calling thread, which must not be a runtime
    /// thread.
    pub fn append_after_blocking(
        &self,
        id: EventId,
        event: &LifecycleEvent,
        act: impl FnOnce() -> Result<(), String>,
    ) -> Result<Result<Appended, LifecycleError>, String> {
        let (appended, journal) = {
            let mut lifecycle = self.lifecycle.lock();
            act()?;
            match lifecycle.append_deferred(id, event) {
                Ok(a) => (a, lifecycle.journal_arc()),
                Err(e) => return Ok(Err(e)),
            }
        };
        Ok(journal
            .acknowledge(appended.position.seq)
            .map(|()| appended)
            .map_err(LifecycleError::from))
    }

    /// [`Shared::append`] on the calling thread, which must not be a runtime thread (it
    /// waits for a `fdatasync`).
    pub fn append_blocking(
        &self,
        id: EventId,
        event: &LifecycleEvent,
    ) -> Result<Appended, LifecycleError> {
        let (appended, journal) = {
            let mut lifecycle = self.lifecycle.lock();
            (
                lifecycle.append_deferred(id, event)?,
                lifecycle.journal_arc(),
            )
        };
        journal.acknowledge(appended.position.seq)?;
        Ok(appended)
    }

    /// Starts acknowledging `seq` (appended already) on a blocking thread of its own, and
    /// returns what waits for it: the flush runs while the caller goes on (a launch forks its
    /// guardian meanwhile). Outside a runtime, the wait flushes.
    pub fn acknowledge_beside(&self, seq: u64) -> Acknowledging {
        let journal = self.lifecycle.lock().journal_arc();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let flushing = Arc::clone(&journal);
            // Its error, if any, is the journal's poison, which the waiter meets itself.
            runtime.spawn_blocking(move || flushing.acknowledge(seq));
        }
        Acknowledging { journal, seq }
    }

    /// [`Shared::append_blocking`] without waiting for durability: the record rides the next
    /// acknowledgement (of a later record, or the next group commit).
    pub fn append_deferred_blocking(
        &self,
        id: EventId,
        event: &LifecycleEvent,
    ) -> Result<Appended, LifecycleError> {
        self.lifecycle.lock().append_deferred(id, event)
    }

    /// Writes a snapshot of the manifests if the policy wants one (`at_shutdown`: the shutdown
    /// rule), and compacts the journal below the older snapshot kept. The lifecycle lock is held
    /// only while the manifests are encoded; appends go on while the file is written. Runs on
    /// the calling thread, which must not be a runtime thread (it syncs). `None`: not due.
    pub fn snapshot_blocking(
        &self,
        at_shutdown: bool,
    ) -> Option<Result<SnapshotWritten, LifecycleError>> {
        let capture = {
            let mut lifecycle = self.lifecycle.lock();
            if !lifecycle.snapshot_due(&self.config.snapshots, at_shutdown) {
                return None;
            }
            match lifecycle.capture_snapshot() {
                Ok(Some(capture)) => capture,
                Ok(None) => return None,
                Err(e) => return Some(Err(e)),
            }
        };
        let outcome = capture.persist();
        self.lifecycle.lock().snapshot_done(outcome.as_ref());
        match &outcome {
            Ok(w) => {
                tracing::debug!(seq = w.seq, bytes = w.file_bytes, compacted = ?w.compacted, "snapshot written")
            }
            Err(e) => tracing::warn!(error = %e, "snapshot failed; the journal keeps every record"),
        }
        Some(outcome)
    }

    /// One retention pass (module `lifecycle::retention`): the plan under the lifecycle lock,
    /// then each retirement acknowledged durable before its spool is removed. Runs on the calling
    /// thread, which must not be a runtime thread. A `scheduled` pass, whose report only its
    /// retirements are read from, makes no plan while nothing can be due: the plan reads every
    /// settled manifest, under the lock a launch's registration waits for.
    pub fn retention_blocking(
        &self,
        request: &RetentionRequest,
        held: &HashSet<Handle>,
        scheduled: bool,
    ) -> CleanReport {
        let now = now_unix_ms();
        let spool_root = self.root.join("spool");
        let plan = {
            let lifecycle = self.lifecycle.lock();
            let store = lifecycle.store();
            if scheduled && !retention::may_be_due(store, now, request.older_than) {
                retention::Plan::default()
            } else {
                retention::plan(store, now, request.older_than, held)
            }
        };
        let leftovers = {
            let lifecycle = self.lifecycle.lock();
            retention::leftovers(lifecycle.store(), &spool_root)
        };
        let leftovers = leftovers.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "retention: the spool directory could not be listed");
            Vec::new()
        });
        let report = retention::execute(
            request,
            plan,
            leftovers,
            now,
            &spool_root,
            &mut SharedJournal(self),
            &mut crate::journal::compact::NoCrash,
        );
        for f in &report.failed {
            tracing::warn!(handle = %f.handle, error = %f.error, "retention: output not retired");
        }
        if !report.retired.is_empty() || !report.finished.is_empty() {
            tracing::info!(
                retired = report.retired.len(),
                finished = report.finished.len(),
                dry_run = report.dry_run,
                "retention pass"
            );
        }
        report
    }

    /// Where guardians create their receipts.
    pub fn receipts_dir(&self) -> PathBuf {
        self.root.join("trees")
    }

    pub fn spool_dir(&self, handle: &Handle) -> PathBuf {
        self.root.join("spool").join(handle.to_string())
    }
}

/// A retention pass's journal: the supervisor's, behind its lock.
struct SharedJournal<'a>(&'a Shared);

impl retention::RetireJournal for SharedJournal<'_> {
    fn manifest(&mut self, handle: &Handle) -> Option<Manifest> {
        self.0
            .lifecycle
            .lock()
            .manifest(handle)
            .map(std::borrow::Cow::into_owned)
    }
    fn append(&mut self, id: EventId, event: &LifecycleEvent) -> Result<(), LifecycleError> {
        self.0.append_blocking(id, event).map(drop)
    }
}

/// Records a stop request; refused only if the process became terminal meanwhile, which is fine.
pub(crate) async fn request_stop(shared: &Arc<Shared>, proc: &Proc, reason: &str) {
    let event = LifecycleEvent::StopRequested(StopRequested {
        handle: proc.handle,
        reason: reason.to_owned(),
        requested_by: "supervisor".to_owned(),
        at_unix_ms: now_unix_ms(),
    });
    let _ = shared.append(EventId::new_v7(), event).await;
}
