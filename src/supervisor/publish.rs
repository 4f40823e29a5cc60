//! Calls into the host: lifecycle publication, completion notification and lease release, shared
//! by live terminalization and restore.
//!
//! Invariants:
//! - Publication is at-least-once towards the host and exactly-once in the journal: the
//!   `LifecyclePublished` / `CompletionNotified` records are written only after the host accepted
//!   the call, under IDs derived from the event they report. They are appended without waiting
//!   for durability (they ride the next group commit): one lost with the page cache only makes
//!   the next restore publish again, which the derived IDs make idempotent.
//! - Every host call runs on a blocking thread and is awaited for at most
//!   [`limits::SERVICE_CALL_MS`]; one that takes longer is reported (and left unrecorded, so the
//!   next restore retries it) while its thread finishes on its own. A stuck host never holds a
//!   runtime thread or the supervisor.

use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

use super::Shared;
use super::command::Lease;
use super::services::{Completion, LifecycleNotice, ServiceError};
use crate::journal::{EventId, Journal};
use crate::lifecycle::event::{CompletionNotified, ExitStatus, LifecycleIds, LifecyclePublished};
use crate::lifecycle::{Handle, LifecycleEvent, State};
use crate::limits;

use super::derived::{NOTIFIED, PUBLISHED};

/// Runs one host call on a blocking thread, bounded.
async fn host_call<T: Send + 'static>(
    what: &str,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let bound = Duration::from_millis(limits::SERVICE_CALL_MS);
    match tokio::time::timeout(bound, tokio::task::spawn_blocking(call)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what} panicked: {e}")),
        Err(_) => Err(format!(
            "{what} did not return within {} ms (SERVICE_CALL_MS)",
            limits::SERVICE_CALL_MS
        )),
    }
}

/// Releases a host lease exactly once (it was moved here), bounded.
pub(crate) async fn release_lease(lease: Box<dyn Lease>) {
    if let Err(e) = host_call("the lease release", move || lease.release()).await {
        warn!(error = %e, "lease release");
    }
}

/// Publishes `event_id` (a lifecycle step of `handle`) and, for a terminal state, notifies
/// completion; each is recorded after the host accepted it and skipped if already recorded.
///
/// The whole batch (the host's calls and their records) runs in one blocking task, bounded as
/// one host call: a command's publication costs one thread hop, not one per call and record.
/// If the bound passes, the batch finishes on its own thread; what it did not record, the next
/// restore publishes again.
pub(crate) async fn publish_and_notify(
    shared: &Arc<Shared>,
    handle: Handle,
    ids: LifecycleIds,
    event_id: EventId,
    state: State,
    exit: ExitStatus,
) -> Vec<String> {
    let batch_shared = Arc::clone(shared);
    let batch = move || publish_batch(&batch_shared, handle, ids, event_id, state, exit);
    let errors = match host_call("the publisher or notifier", batch).await {
        Ok(errors) => errors,
        Err(e) => vec![format!("{handle}: {e}")],
    };
    for e in &errors {
        warn!(%handle, error = %e, "publication");
    }
    errors
}

/// [`publish_and_notify`] of a process's `running` (by its start task, or by its terminal
/// publication for a process that ended before it was due).
pub(crate) async fn publish_running(shared: &Arc<Shared>, handle: Handle, ids: LifecycleIds) {
    publish_and_notify(
        shared,
        handle,
        ids,
        ids.running,
        State::Running,
        ExitStatus::Unknown,
    )
    .await;
}

/// Whether `event_id` was already published and the completion already notified, as the
/// journal records them, and the journal to wait on.
fn recorded_deliveries(
    shared: &Shared,
    handle: Handle,
    event_id: EventId,
) -> (bool, bool, Arc<Journal>) {
    let lifecycle = shared.lifecycle.lock();
    let journal = lifecycle.journal_arc();
    match lifecycle.manifest(&handle) {
        Some(m) => (
            m.published.contains(&event_id),
            m.completion_notified,
            journal,
        ),
        None => (false, false, journal),
    }
}

/// The body of [`publish_and_notify`], on a blocking thread.
fn publish_batch(
    shared: &Shared,
    handle: Handle,
    ids: LifecycleIds,
    event_id: EventId,
    state: State,
    exit: ExitStatus,
) -> Vec<String> {
    let mut errors = Vec::new();
    let (published, notified, journal) = recorded_deliveries(shared, handle, event_id);
    // No host hears of an event before it is durable: `running` is appended without waiting and
    // acknowledged here, off the start's path (usually already by a group commit).
    if let Some(position) = journal.position_of(event_id)
        && let Err(e) = journal.acknowledge(position.seq)
    {
        errors.push(format!("{handle}: {state} is not durable: {e}"));
        return errors;
    }
    // A call the host accepted is recorded, without waiting for durability (module doc).
    let mut deliver = |delivered: Result<(), ServiceError>, what: String, id: EventId, event| {
        let recorded = delivered
            .map_err(|e| format!("{handle}: {what}: {e}"))
            .and_then(|()| {
                shared
                    .lifecycle
                    .lock()
                    .append_deferred(id, &event)
                    .map_err(|e| format!("{handle}: recording {what}: {e}"))
            });
        if let Err(e) = recorded {
            errors.push(e);
        }
    };
    if !published {
        let notice = LifecycleNotice {
            event_id,
            handle,
            state,
        };
        let event = LifecycleEvent::LifecyclePublished(LifecyclePublished {
            handle,
            event: event_id,
        });
        deliver(
            shared.services.publisher.publish(&notice),
            format!("publishing {state}"),
            event_id.derived(PUBLISHED),
            event,
        );
    }
    if state.is_terminal() && !notified {
        let completion = Completion {
            command_id: ids.completion,
            handle,
            state,
            exit,
        };
        let event = LifecycleEvent::CompletionNotified(CompletionNotified {
            handle,
            command: ids.completion,
        });
        deliver(
            shared.services.notifier.notify(&completion),
            "notifying completion".to_owned(),
            ids.completion.derived(NOTIFIED),
            event,
        );
    }
    errors
}
