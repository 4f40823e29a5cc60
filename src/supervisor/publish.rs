//! Calls into the host: lifecycle publication, completion notification and lease release, shared
//! by live terminalization and restore.
//!
//! Invariants:
//! - Publication is at-least-once towards the host and exactly-once in the journal: the
//!   `LifecyclePublished` / `CompletionNotified` records are written only after the host accepted
//!   the call, under IDs derived from the event they report. They are appended without waiting
//!   for durability (they ride the next group commit): one lost with the page cache only makes
//!   the next restore publish again, which the derived IDs make idempotent.
//! - No host hears of an event before it is durable; services that hear nothing
//!   (`NoopServices`, what every surface of the CLI opens with) are called without that wait.
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

/// No host hears of an event before it is durable: `running` is appended without waiting and
/// acknowledged here, off the start's path (usually already by a group commit). Services that
/// hear nothing need no wait: the `LifecyclePublished` record comes after the event in the
/// journal, and durability is a prefix, so no restore finds the one without the other (a
/// terminal event is acknowledged before its publication anyway). Except behind a gate: the
/// scope of a guardian's launch was written, not flushed, before its workload was let exec
/// (`launch.rs`), and this acknowledgement is what makes it durable within the publication
/// delay of the launch, whoever listens.
fn durable_for_hearers(
    shared: &Shared,
    journal: &Journal,
    event_id: EventId,
    state: State,
) -> Result<(), crate::journal::JournalError> {
    let heard = shared.services.publisher.hears()
        || (state.is_terminal() && shared.services.notifier.hears())
        || (state == State::Running && shared.config.launcher.gates());
    match journal.position_of(event_id) {
        Some(position) if heard => journal.acknowledge(position.seq),
        _ => Ok(()),
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
    if let Err(e) = durable_for_hearers(shared, &journal, event_id, state) {
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

#[cfg(test)]
mod tests {
    //! The wait for durability before a publication is a listener's: a host that hears notices
    //! hears of `running` only once it is durable, and services that hear nothing are called
    //! without a flush of their own (so a command that outlives the publication delay costs
    //! no extra `fdatasync`). Real processes, a real journal under `Durability::Group`.

    use std::sync::{Arc, OnceLock};
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::super::services::{Completion, CompletionNotifier, LifecyclePublisher};
    use super::super::{Command, Services, Supervisor, SupervisorConfig};
    use super::{LifecycleNotice, ServiceError};
    use crate::journal::Journal;
    use crate::lifecycle::State;

    /// A publisher that says, for the `running` it is given, whether the journal held it
    /// durable at the call.
    #[derive(Debug)]
    struct Probe {
        hears: bool,
        journal: Arc<OnceLock<Arc<Journal>>>,
        running: mpsc::UnboundedSender<bool>,
    }

    impl LifecyclePublisher for Probe {
        fn publish(&self, notice: &LifecycleNotice) -> Result<(), ServiceError> {
            if notice.state == State::Running
                && let Some(journal) = self.journal.get()
            {
                let durable = journal
                    .position_of(notice.event_id)
                    .is_some_and(|p| journal.durable_seq() >= p.seq);
                let _ = self.running.send(durable);
            }
            Ok(())
        }

        fn hears(&self) -> bool {
            self.hears
        }
    }

    impl CompletionNotifier for Probe {
        fn notify(&self, _: &Completion) -> Result<(), ServiceError> {
            Ok(())
        }

        fn hears(&self) -> bool {
            self.hears
        }
    }

    /// Whether `running` of a long-lived process was durable when services that `hears` (or
    /// not) were told of it by its start task.
    async fn running_durable_at_publication(hears: bool) -> bool {
        let dir = tempfile::tempdir().unwrap();
        let journal = Arc::new(OnceLock::new());
        let (tx, mut running) = mpsc::unbounded_channel();
        let probe = Arc::new(Probe {
            hears,
            journal: Arc::clone(&journal),
            running: tx,
        });
        let services = Services {
            publisher: probe.clone(),
            notifier: probe,
        };
        let config = SupervisorConfig::new(dir.path().join("root"));
        let (sup, _) = Supervisor::open(config, services).await.unwrap();
        journal
            .set(sup.shared.lifecycle.lock().journal_arc())
            .unwrap();
        // Lives until stopped: its `running` is published by its start task, not with its end.
        let prepared = sup
            .prepare(Command::new("sleep").arg("600").cwd(dir.path()))
            .unwrap();
        let handle = sup.start(prepared).await.unwrap();
        let durable = tokio::time::timeout(Duration::from_secs(60), running.recv())
            .await
            .expect("running was not published")
            .unwrap();
        sup.stop(&handle, Duration::from_secs(5)).await.unwrap();
        sup.shutdown(Duration::from_secs(5)).await;
        durable
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_listening_host_hears_of_running_only_once_it_is_durable() {
        assert!(running_durable_at_publication(true).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn services_that_hear_nothing_cost_running_no_flush() {
        // Nothing else flushes while the process sleeps: its `running` rides the next commit.
        assert!(!running_durable_at_publication(false).await);
    }
}
