//! Restore is reconciliation, not reattachment (seed 000), and the publication path shared with
//! live terminalization.
//!
//! Invariants:
//! - Restore never reads a persisted pid to signal it; a process that was `starting` or `running`
//!   becomes `lost_on_restore` under the Lost event ID allocated at its registration.
//! - Every record restore writes has an ID fixed before the crash (or derived from one), so a
//!   second restore, or a restore that crashed half-way, writes nothing twice.
//! - Publication is at-least-once towards the host and exactly-once in the journal: the
//!   `LifecyclePublished` / `CompletionNotified` records are written only after the host accepted
//!   the call, under IDs derived from the event they report.

use std::sync::Arc;

use serde::Serialize;
use tracing::warn;

use super::Inner;
use super::services::{Completion, LifecycleNotice};
use crate::journal::{EventId, RecoveryReport};
use crate::lifecycle::event::{
    CompletionNotified, CursorBounds, ExitStatus, LifecycleIds, LifecyclePublished, LostOnRestore,
};
use crate::lifecycle::{Handle, LifecycleEvent, ReplayReport, State};
use crate::spool::Spool;

/// Purposes of derived record IDs.
const PUBLISHED: u8 = 1;
const NOTIFIED: u8 = 2;

/// What `Supervisor::open` found and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RestoreReport {
    /// Processes that were live when the previous supervisor stopped: now `lost_on_restore`.
    pub reconciled: Vec<Handle>,
    /// Processes that were already terminal, reopened read-only.
    pub reopened: Vec<Handle>,
    pub journal: RecoveryReport,
    pub replay: ReplayReport,
    /// One entry per record, spool or service problem; the rest reconciled regardless.
    pub errors: Vec<String>,
}

/// Publishes `event_id` (a lifecycle step of `handle`) and, for a terminal state, notifies
/// completion; each is recorded after the host accepted it and skipped if already recorded.
pub(crate) async fn publish_and_notify(
    inner: &Arc<Inner>,
    handle: Handle,
    ids: LifecycleIds,
    event_id: EventId,
    state: State,
    exit: ExitStatus,
) -> Vec<String> {
    let mut errors = Vec::new();
    let (published, notified) = {
        let lifecycle = super::process::lock(&inner.lifecycle);
        match lifecycle.manifest(&handle) {
            Some(m) => (m.published.contains(&event_id), m.completion_notified),
            None => (false, false),
        }
    };
    if !published {
        let notice = LifecycleNotice {
            event_id,
            handle,
            state,
        };
        let publisher = Arc::clone(&inner.services.publisher);
        let result = tokio::task::spawn_blocking(move || publisher.publish(&notice)).await;
        match result {
            Ok(Ok(())) => {
                let record = LifecycleEvent::LifecyclePublished(LifecyclePublished {
                    handle,
                    event: event_id,
                });
                if let Err(e) = inner.append(event_id.derived(PUBLISHED), record).await {
                    errors.push(format!("{handle}: recording publication: {e}"));
                }
            }
            Ok(Err(e)) => errors.push(format!("{handle}: publishing {state}: {e}")),
            Err(e) => errors.push(format!("{handle}: publisher panicked: {e}")),
        }
    }
    if state.is_terminal() && !notified {
        let completion = Completion {
            command_id: ids.completion,
            handle,
            state,
            exit,
        };
        let notifier = Arc::clone(&inner.services.notifier);
        let result = tokio::task::spawn_blocking(move || notifier.notify(&completion)).await;
        match result {
            Ok(Ok(())) => {
                let record = LifecycleEvent::CompletionNotified(CompletionNotified {
                    handle,
                    command: ids.completion,
                });
                if let Err(e) = inner.append(ids.completion.derived(NOTIFIED), record).await {
                    errors.push(format!("{handle}: recording completion: {e}"));
                }
            }
            Ok(Err(e)) => errors.push(format!("{handle}: notifying completion: {e}")),
            Err(e) => errors.push(format!("{handle}: notifier panicked: {e}")),
        }
    }
    for e in &errors {
        warn!(%handle, error = %e, "publication");
    }
    errors
}

/// Reconciles every manifest replayed at open.
pub(crate) async fn restore(
    inner: &Arc<Inner>,
    journal: RecoveryReport,
    replay: ReplayReport,
) -> RestoreReport {
    let mut report = RestoreReport {
        errors: replay
            .rejected
            .iter()
            .chain(&replay.undecodable)
            .map(|i| format!("journal seq {}: {}", i.seq, i.error))
            .collect(),
        journal,
        replay,
        ..RestoreReport::default()
    };
    let manifests: Vec<_> = super::process::lock(&inner.lifecycle)
        .store()
        .iter()
        .cloned()
        .collect();
    for m in manifests {
        let handle = m.handle;
        if !m.state.is_terminal() {
            // Recover the spool (cut a torn tail, sync) so the Lost event names durable bounds.
            let dir = inner.spool_dir(&handle);
            let mut bounds = m.bounds;
            match Spool::open_writer(&dir, handle.0.as_bytes(), inner.config.spool)
                .and_then(|(mut spool, _)| spool.checkpoint())
            {
                Ok((retained_from, total_bytes)) => {
                    bounds = CursorBounds {
                        retained_from: retained_from.max(bounds.retained_from),
                        total_bytes: total_bytes.max(bounds.total_bytes),
                    };
                }
                Err(e) => report.errors.push(format!("{handle}: spool: {e}")),
            }
            let event = LifecycleEvent::LostOnRestore(LostOnRestore {
                handle,
                bounds,
                at_unix_ms: super::now_unix_ms(),
            });
            if let Err(e) = inner.append(m.ids.lost, event).await {
                report
                    .errors
                    .push(format!("{handle}: recording lost_on_restore: {e}"));
                continue;
            }
            report.reconciled.push(handle);
            let errors = publish_and_notify(
                inner,
                handle,
                m.ids,
                m.ids.lost,
                State::LostOnRestore,
                ExitStatus::Unknown,
            )
            .await;
            report.errors.extend(errors);
        } else {
            report.reopened.push(handle);
            // A crash between the terminal event and its publication leaves work to finish.
            if let Some(t) = &m.terminal
                && (!m.published.contains(&t.event_id) || !m.completion_notified)
            {
                let errors =
                    publish_and_notify(inner, handle, m.ids, t.event_id, t.state, t.exit).await;
                report.errors.extend(errors);
            }
        }
    }
    report
}
