//! What [`super::terminalize`] records before it reports a process's end: the spool's final
//! bounds, the capture status they leave, and the journal records of the end. What it reports
//! is what was recorded, or says that it was not.
//!
//! Invariants:
//! - The spool is finished and synced (or what it could not sync made a gap) before the
//!   journal names its bounds, so that the bounds cover every gap.
//! - The records go in one order on one blocking thread: each gap below the final bounds,
//!   then the tree's release, then the terminal event, whose acknowledgement makes them all
//!   durable. The receipt goes only once both the release and the terminal event are in,
//!   and not before the waiters are told: nothing they are told depends on it.

use std::sync::Arc;

use tracing::warn;

use super::{Outcome, Proc, TerminalSummary};
use crate::journal::EventId;
use crate::lifecycle::event::{
    CaptureStatus, CursorBounds, ExitProof, LifecycleIds, OutputGap, Terminal,
};
use crate::lifecycle::{Handle, LifecycleError, LifecycleEvent};
use crate::spool::Gap;
use crate::supervisor::Shared;

/// Records `proc`'s end (terminalization's first two steps) and returns the summary to report
/// (with `persist_error` set when the terminal event is not persisted), and whether the tree's
/// receipt is to be retired now that its proof is durable ([`super::retire_receipt`]).
pub(super) async fn record(
    shared: &Arc<Shared>,
    proc: &Proc,
    outcome: Outcome,
) -> (TerminalSummary, bool) {
    let Outcome {
        state,
        exit,
        capture,
        reason,
        released,
        drained,
        ..
    } = outcome;
    // 1. Final cursor bounds: the spool is synced before the journal names its bounds.
    let (bounds, gaps) = final_checkpoint(proc).await;
    let capture = with_loss(capture, proc.loss());
    // 2. The terminal result, under its pre-allocated ID.
    let event = LifecycleEvent::Terminal(Terminal {
        handle: proc.handle,
        state,
        exit,
        bounds,
        capture: capture.clone(),
        reason,
        at_unix_ms: crate::supervisor::now_unix_ms(),
    });
    let (persist_error, retire) = persist_end(shared, proc, gaps, released, event).await;
    if let Some(e) = &persist_error {
        warn!(error = %e, "terminal event not persisted");
    }
    let summary = TerminalSummary {
        state,
        exit,
        bounds,
        capture,
        persist_error,
        drained,
    };
    (summary, retire)
}

/// Syncs the spool one last time: its durable bounds, and the gaps below them not recorded
/// yet. No more output comes: a gap still open (writes failing to the end) is closed first, so
/// that the bounds cover it and it is recorded with them.
async fn final_checkpoint(proc: &Proc) -> (CursorBounds, Vec<Gap>) {
    if let Some(output) = proc.output.lock().as_mut() {
        output.finish();
    }
    match proc.sync_output().await {
        Ok(synced) => synced,
        Err(e) => {
            // The spool made everything since its last good sync a gap; closed now.
            warn!(error = %e, "final spool checkpoint failed");
            settled_bounds(proc)
        }
    }
}

/// The bounds of what the spool settled, and its gaps not recorded yet, without a sync.
fn settled_bounds(proc: &Proc) -> (CursorBounds, Vec<Gap>) {
    let mut output = proc.output.lock();
    match output.as_mut() {
        Some(o) => {
            o.finish();
            let total = o.spool().settled_total();
            (
                CursorBounds {
                    retained_from: o.spool().retained_from(),
                    total_bytes: total,
                },
                o.spool().unrecorded_gaps(total),
            )
        }
        None => (CursorBounds::default(), Vec::new()),
    }
}

/// Lost output makes the capture incomplete, whatever else it was.
fn with_loss(capture: CaptureStatus, loss: Option<String>) -> CaptureStatus {
    match (capture, loss) {
        (capture, None) => capture,
        (CaptureStatus::Complete, Some(loss)) => CaptureStatus::Incomplete(loss),
        (CaptureStatus::Incomplete(why), Some(loss)) => {
            CaptureStatus::Incomplete(format!("{why}; {loss}"))
        }
        (failed @ CaptureStatus::Failed(_), Some(_)) => failed,
    }
}

/// Records the end of `proc` (see the module invariants) on the blocking pool; why the
/// terminal event is not persisted, if it is not, and whether the release is durable with it.
async fn persist_end(
    shared: &Arc<Shared>,
    proc: &Proc,
    gaps: Vec<Gap>,
    released: Option<ExitProof>,
    terminal: LifecycleEvent,
) -> (Option<String>, bool) {
    let (shared, handle, ids) = (Arc::clone(shared), proc.handle, proc.ids);
    let appended = tokio::task::spawn_blocking(move || {
        append_end_blocking(&shared, handle, ids, gaps, released, &terminal)
    })
    .await;
    match appended {
        Ok(Ok(released)) => (None, released),
        Ok(Err(e)) => (Some(e.to_string()), false),
        Err(e) => (Some(e.to_string()), false),
    }
}

/// Appends the end's records (see the module invariants); whether the tree's release is
/// durable with the terminal event.
fn append_end_blocking(
    shared: &Shared,
    handle: Handle,
    ids: LifecycleIds,
    gaps: Vec<Gap>,
    released: Option<ExitProof>,
    terminal: &LifecycleEvent,
) -> Result<bool, LifecycleError> {
    // Gaps come before the terminal bounds that cover them, and ride its acknowledgement.
    for gap in gaps {
        let event = LifecycleEvent::OutputGap(OutputGap {
            handle,
            gap,
            at_unix_ms: crate::supervisor::now_unix_ms(),
        });
        shared.append_deferred_blocking(EventId::new_v7(), &event)?;
    }
    // The release rides the terminal event's acknowledgement; once that is durable the
    // receipt has served its purpose.
    let released =
        released.is_some_and(|proof| super::append_release(shared, handle, ids, proof, false));
    shared.append_blocking(ids.terminal, terminal)?;
    Ok(released)
}
