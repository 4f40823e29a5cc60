//! The pause gate, the admission limit and the human-input mark: the supervisor's journaled
//! switches.
//!
//! Invariants:
//! - The gate's in-memory flag (`Shared::paused`, read by the actor's start path) changes only
//!   under the lifecycle lock, in the same critical section that appends its `GateChanged`
//!   record, so the flag and the journal agree in the order changes were made; the caller is
//!   answered once the record is durable. A change to the state the gate is in records nothing.
//! - Pausing refuses new starts only: running processes, output, input, stop and wait go on.
//! - A restart keeps the gate: `Supervisor::open` reads it from the restored projection
//!   (journal or snapshot).
//! - The admission limit set at runtime is journaled (`AdmissionLimitSet`) before the actor
//!   applies it, and the actor applies the value the projection holds, never the one a message
//!   carried: two settings that race end with the actor and the journal agreeing on the last.
//!   A restart keeps it: the actor starts from the restored projection's.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::actor::{Found, Msg};
use super::{Supervisor, SupervisorError, now_unix_ms};
use crate::admission::AdmissionSnapshot;
use crate::journal::EventId;
use crate::lifecycle::event::{AdmissionLimitSet, GateChanged};
use crate::lifecycle::{Applied, Handle, LifecycleError, LifecycleEvent};

/// The pause gate as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateStatus {
    pub paused: bool,
    /// Whether this call changed it (false: it already was so, and nothing was recorded).
    pub changed: bool,
    /// The last change: when, by whom, why (`None`: never changed, so open).
    pub since_unix_ms: Option<u64>,
    pub requested_by: Option<String>,
    pub reason: Option<String>,
}

impl GateStatus {
    fn of(gate: Option<&GateChanged>, changed: bool) -> GateStatus {
        GateStatus {
            paused: gate.is_some_and(|g| g.paused),
            changed,
            since_unix_ms: gate.map(|g| g.at_unix_ms),
            requested_by: gate.map(|g| g.requested_by.clone()),
            reason: gate.map(|g| g.reason.clone()),
        }
    }
}

/// Whether a process waits for human input now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct InputWaitStatus {
    pub handle: Handle,
    pub waiting: bool,
    /// Whether this call changed it.
    pub changed: bool,
}

impl Supervisor {
    /// The pause gate now.
    pub fn gate(&self) -> GateStatus {
        GateStatus::of(self.shared.lifecycle.lock().store().gate(), false)
    }

    /// Closes the pause gate: new starts are refused with `Refusal::Paused`; running processes
    /// go on. Journaled; a restart keeps it. Idempotent.
    pub async fn pause(
        &self,
        requested_by: &str,
        reason: &str,
    ) -> Result<GateStatus, SupervisorError> {
        self.set_gate(true, requested_by, reason).await
    }

    /// Opens the pause gate again. Journaled. Idempotent.
    pub async fn resume(
        &self,
        requested_by: &str,
        reason: &str,
    ) -> Result<GateStatus, SupervisorError> {
        self.set_gate(false, requested_by, reason).await
    }

    async fn set_gate(
        &self,
        paused: bool,
        requested_by: &str,
        reason: &str,
    ) -> Result<GateStatus, SupervisorError> {
        let shared = std::sync::Arc::clone(&self.shared);
        let event = GateChanged {
            paused,
            requested_by: requested_by.to_owned(),
            reason: reason.to_owned(),
            at_unix_ms: now_unix_ms(),
        };
        tokio::task::spawn_blocking(move || {
            let (appended, journal) = {
                let mut lifecycle = shared.lifecycle.lock();
                if lifecycle.store().paused() == paused {
                    return Ok(GateStatus::of(lifecycle.store().gate(), false));
                }
                let appended = lifecycle
                    .append_deferred(EventId::new_v7(), &LifecycleEvent::GateChanged(event))?;
                shared.paused.store(paused, Ordering::SeqCst);
                (appended, lifecycle.journal_arc())
            };
            journal
                .acknowledge(appended.position.seq)
                .map_err(LifecycleError::from)?;
            Ok(GateStatus::of(shared.lifecycle.lock().store().gate(), true))
        })
        .await
        .map_err(|e| SupervisorError::Task(e.to_string()))?
    }

    /// Sets the limit on workloads at once now (`Some(n)`, at least 1: an explicit limit of `n`,
    /// which replaces the automatic policy), or returns to the configured policy (`None`).
    /// Workloads holding capacity keep it; waiting starts are admitted at once if the limit
    /// allows. Journaled before it applies; a restart keeps it. Setting the limit in force
    /// records nothing.
    pub async fn set_admission_limit(
        &self,
        max_concurrent: Option<usize>,
        requested_by: &str,
    ) -> Result<AdmissionSnapshot, SupervisorError> {
        let shared = std::sync::Arc::clone(&self.shared);
        let event = AdmissionLimitSet {
            max_concurrent: max_concurrent.map(|n| u64::try_from(n.max(1)).unwrap_or(u64::MAX)),
            requested_by: requested_by.to_owned(),
            at_unix_ms: now_unix_ms(),
        };
        tokio::task::spawn_blocking(move || {
            let (appended, journal) = {
                let mut lifecycle = shared.lifecycle.lock();
                if lifecycle.store().admission_max_concurrent() == event.max_concurrent {
                    return Ok(());
                }
                let event = LifecycleEvent::AdmissionLimitSet(event);
                let appended = lifecycle.append_deferred(EventId::new_v7(), &event)?;
                (appended, lifecycle.journal_arc())
            };
            journal
                .acknowledge(appended.position.seq)
                .map_err(LifecycleError::from)
        })
        .await
        .map_err(|e| SupervisorError::Task(e.to_string()))??;
        self.ask(|reply| Msg::AdmissionLimit { reply }).await
    }

    /// Marks a running process as waiting for human input (`waiting`), which suspends its idle
    /// deadline, or clears the mark (writing input to it clears it too). Journaled.
    pub async fn await_input(
        &self,
        handle: &Handle,
        waiting: bool,
        requested_by: &str,
    ) -> Result<InputWaitStatus, SupervisorError> {
        let proc = match self
            .ask(|reply| Msg::Lookup {
                handle: *handle,
                reply,
            })
            .await?
        {
            Found::Live(proc) if !proc.is_terminal() => proc,
            _ => {
                return Err(match self.manifest(handle) {
                    Some(_) => SupervisorError::NotRunning(*handle),
                    None => SupervisorError::UnknownHandle(*handle),
                });
            }
        };
        let shared = std::sync::Arc::clone(&self.shared);
        let by = requested_by.to_owned();
        let applied = tokio::task::spawn_blocking(move || {
            super::enforce::set_awaiting_blocking(&shared, &proc, waiting, &by)
        })
        .await
        .map_err(|e| SupervisorError::Task(e.to_string()))??;
        Ok(InputWaitStatus {
            handle: *handle,
            waiting,
            changed: applied == Applied::Changed,
        })
    }
}
