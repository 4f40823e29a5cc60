//! Acting on a live process's deadline clocks (`deadline.rs`): a due deadline journaled
//! (`DeadlineFired`) and enforced through the stop path's `teardown`, a failure recorded
//! (`DeadlineFailed`) and reported to the actor for a retry; and the wait for human input marked
//! or cleared together with its `HumanInput` record.
//!
//! Apart from the clocks because these act on the process (`process.rs`), whose drain records
//! activity into the clocks: the clocks and the sweep import nothing of the process, and the
//! process nothing of this module.

use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::warn;

use super::deadline::Check;
use super::process::{Proc, ProcEvent, teardown};
use super::{Shared, SupervisorError, now_unix_ms};
use crate::journal::EventId;
use crate::lifecycle::event::{DeadlineFailed, DeadlineFired, HumanInput};
use crate::lifecycle::{Applied, LifecycleError, LifecycleEvent, Rejection};

/// Enforces a due deadline of `proc`: journals it (the first time), then stops the whole tree
/// through the stop path. A failure is traced, recorded (up to `DEADLINE_FAILURES_MAX`), and
/// reported to the actor, which retries later.
pub(crate) async fn enforce(
    shared: Arc<Shared>,
    actor: mpsc::Sender<ProcEvent>,
    proc: Arc<Proc>,
    due: Check,
) {
    let Check::Due {
        deadline,
        limit_ms,
        clock_from,
        first,
    } = due
    else {
        return;
    };
    let handle = proc.handle;
    if first {
        let event = LifecycleEvent::DeadlineFired(DeadlineFired {
            handle,
            deadline,
            limit_ms,
            clock_from_unix_ms: proc.clocks.unix_ms_of(clock_from),
            at_unix_ms: now_unix_ms(),
        });
        // Refused only when the process became terminal meanwhile; a journal failure is only
        // traced: stopping the tree matters more than the record of why.
        if let Err(e) = shared.append(EventId::new_v7(), event).await
            && !matches!(e, LifecycleError::Rejected(Rejection::AlreadyTerminal(_)))
        {
            warn!(%handle, deadline = deadline.name(), error = %e, "deadline: the record of its firing failed");
        }
    }
    if let Err(reason) = teardown(&proc, shared.config.default_grace).await {
        warn!(%handle, deadline = deadline.name(), %reason, "deadline: stopping the tree failed; retried later");
        let event = LifecycleEvent::DeadlineFailed(DeadlineFailed {
            handle,
            deadline,
            error: reason,
            at_unix_ms: now_unix_ms(),
        });
        // Refused past DEADLINE_FAILURES_MAX, or once terminal: traced above either way.
        let _ = shared.append(EventId::new_v7(), event).await;
        let _ = actor.send(ProcEvent::DeadlineFailed { handle }).await;
    }
}

/// Marks (`waiting`) or clears the wait of a live process for human input, journaled, and the
/// clocks changed under the same lock as the record, so that concurrent marks and clears leave
/// the clocks as the journal says. `Unchanged` when it already was so (nothing recorded).
pub(crate) fn set_awaiting_blocking(
    shared: &Shared,
    proc: &Proc,
    waiting: bool,
    by: &str,
) -> Result<Applied, SupervisorError> {
    let handle = proc.handle;
    let (appended, journal) = {
        let mut lifecycle = shared.lifecycle.lock();
        let current = lifecycle
            .manifest(&handle)
            .ok_or(SupervisorError::UnknownHandle(handle))?;
        if current.state.is_terminal() {
            return Err(SupervisorError::NotRunning(handle));
        }
        if current.awaiting_input.is_some() == waiting {
            return Ok(Applied::Unchanged);
        }
        let event = LifecycleEvent::HumanInput(HumanInput {
            handle,
            waiting,
            by: by.to_owned(),
            at_unix_ms: now_unix_ms(),
        });
        let appended = lifecycle.append_deferred(EventId::new_v7(), &event)?;
        proc.clocks.set_awaiting(waiting);
        (appended, lifecycle.journal_arc())
    };
    journal
        .acknowledge(appended.position.seq)
        .map_err(LifecycleError::from)?;
    Ok(Applied::Changed)
}

/// The human-input wait of a process whose input was just written is cleared (input clears it).
pub(crate) async fn clear_on_input(shared: Arc<Shared>, proc: Arc<Proc>) {
    let handle = proc.handle;
    let cleared =
        tokio::task::spawn_blocking(move || set_awaiting_blocking(&shared, &proc, false, "input"))
            .await;
    match cleared {
        Ok(Ok(_)) | Ok(Err(SupervisorError::NotRunning(_))) => {}
        Ok(Err(e)) => warn!(%handle, error = %e, "clearing the wait for human input failed"),
        Err(e) => warn!(%handle, error = %e, "clearing the wait for human input: task failed"),
    }
}
