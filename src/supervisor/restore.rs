//! Restore is reconciliation, not reattachment (seed 000). It runs inside `Supervisor::open`,
//! before the actor starts, so nothing else touches the table meanwhile.
//!
//! Invariants:
//! - Restore never reads a persisted pid to signal it; a process that was `starting` or `running`
//!   becomes `lost_on_restore` under the Lost event ID allocated at its registration.
//! - Every record restore writes has an ID fixed before the crash (or derived from one), so a
//!   second restore, or a restore that crashed half-way, writes nothing twice.
//! - Spool recovery (which cuts torn tails and syncs) runs on a blocking thread, never on the
//!   runtime.

use std::sync::Arc;

use serde::Serialize;

use super::Shared;
use super::publish::publish_and_notify;
use crate::journal::RecoveryReport;
use crate::lifecycle::event::{CursorBounds, ExitStatus, LostOnRestore};
use crate::lifecycle::{Handle, LifecycleEvent, ReplayReport, State};
use crate::spool::Spool;

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

/// Reconciles every manifest replayed at open.
pub(crate) async fn restore(
    shared: &Arc<Shared>,
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
    let manifests: Vec<_> = super::lock(&shared.lifecycle)
        .store()
        .iter()
        .cloned()
        .collect();
    for m in manifests {
        let handle = m.handle;
        if !m.state.is_terminal() {
            // Recover the spool (cut a torn tail, sync) so the Lost event names durable bounds.
            let dir = shared.spool_dir(&handle);
            let mut bounds = m.bounds;
            let options = shared.config.spool;
            let recovered = tokio::task::spawn_blocking(move || {
                // A process that never wrote has no spool (it is created at the first byte).
                if !dir.is_dir() {
                    return Ok((0, 0));
                }
                Spool::open_writer(&dir, handle.0.as_bytes(), options)
                    .and_then(|(mut spool, _)| spool.checkpoint())
                    .map_err(|e| e.to_string())
            })
            .await
            .unwrap_or_else(|e| Err(format!("spool recovery task: {e}")));
            match recovered {
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
            if let Err(e) = shared.append(m.ids.lost, event).await {
                report
                    .errors
                    .push(format!("{handle}: recording lost_on_restore: {e}"));
                continue;
            }
            report.reconciled.push(handle);
            let errors = publish_and_notify(
                shared,
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
                    publish_and_notify(shared, handle, m.ids, t.event_id, t.state, t.exit).await;
                report.errors.extend(errors);
            }
        }
    }
    report
}
