//! The lifecycle model: the closed state machine, the lifecycle events, and manifests as
//! projections of those events (seed 000, "State Machine"; DESIGN.md, "Events, manifests and the
//! state machine").
//!
//! Invariants: `state`, `event`, `manifest` and `replay` do no I/O; [`Lifecycle`] is the only
//! place that joins them to the journal, and it checks every event against the store before it
//! appends, so an invalid event never reaches disk. Manifests are never files of their own.

pub mod command;
pub mod event;
pub mod manifest;
pub mod replay;
mod reserved;
pub mod state;
pub(crate) mod wire;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;

pub use command::StoredCommand;
pub use event::{Handle, LifecycleEvent, LifecycleIds};
pub use manifest::{Applied, Manifest, ManifestStore, Rejection};
pub use replay::{ReplayReport, Replayer};
pub use state::State;

use crate::codec::{CODEC_VERSION, CodecError};
use crate::journal::{Appended, EventId, Journal, JournalError, JournalOptions, RecoveryReport};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LifecycleError {
    #[error("event rejected: {0}")]
    Rejected(#[from] Rejection),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Codec(#[from] CodecError),
}

/// The journal of a root together with the manifests replayed from it.
#[derive(Debug)]
pub struct Lifecycle {
    journal: Arc<Journal>,
    store: ManifestStore,
}

impl Lifecycle {
    /// Opens the journal (running recovery) and replays it into manifests in the same pass.
    pub fn open(
        root: &Path,
        options: JournalOptions,
    ) -> Result<(Self, RecoveryReport, ReplayReport), LifecycleError> {
        let mut replayer = Replayer::default();
        let (journal, recovery) = Journal::open_visiting(root, options, |r| replayer.feed(&r))?;
        let (store, replay) = replayer.finish();
        Ok((
            Lifecycle {
                journal: Arc::new(journal),
                store,
            },
            recovery,
            replay,
        ))
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The journal, shared: callers of [`Lifecycle::append_deferred`] acknowledge through it
    /// after releasing whatever lock guards this `Lifecycle`.
    pub fn journal_arc(&self) -> Arc<Journal> {
        Arc::clone(&self.journal)
    }

    pub fn store(&self) -> &ManifestStore {
        &self.store
    }

    pub fn manifest(&self, handle: &Handle) -> Option<&Manifest> {
        self.store.get(handle)
    }

    /// Validates `event` against its manifest, appends it under `event_id`, then applies it, and
    /// returns once it is acknowledged. An `event_id` already in the journal is an idempotent
    /// retry: nothing is checked or written and the original position is returned.
    pub fn append(
        &mut self,
        event_id: EventId,
        event: &LifecycleEvent,
    ) -> Result<Appended, LifecycleError> {
        let appended = self.append_deferred(event_id, event)?;
        self.journal.acknowledge(appended.position.seq)?;
        Ok(appended)
    }

    /// Like [`Lifecycle::append`] without waiting for the acknowledgement: the caller must call
    /// `journal_arc().acknowledge(seq)` before it acts on the event (see
    /// [`Journal::append_deferred`]). The manifest already reflects the event.
    pub fn append_deferred(
        &mut self,
        event_id: EventId,
        event: &LifecycleEvent,
    ) -> Result<Appended, LifecycleError> {
        if let Some(kind) = self.journal.kind_of(event_id) {
            // A retry: the journal returns the original position and writes nothing, but only
            // if the record it holds under this ID is this event's kind and, for an allocated
            // ID, this handle's step; anything else would acknowledge an event never written.
            if kind != event.kind().get() {
                return Err(Rejection::IdInUse { id: event_id, kind }.into());
            }
            self.store.check_reservation(event_id, event)?;
            return Ok(self
                .journal
                .append_deferred(event_id, event.kind(), CODEC_VERSION, &[])?);
        }
        self.store.check(event_id, event)?;
        if let LifecycleEvent::Registered(r) = event {
            // IDs the store does not reserve (checkpoints, other records) are known to the
            // journal: a registration must not allocate one of them either.
            let ids = [r.ids.running, r.ids.terminal, r.ids.lost, r.ids.completion];
            if let Some(id) = ids
                .into_iter()
                .find(|id| self.journal.position_of(*id).is_some())
            {
                return Err(Rejection::IdReserved {
                    id,
                    handle: r.handle,
                }
                .into());
            }
        }
        let payload = event.encode()?;
        let appended =
            self.journal
                .append_deferred(event_id, event.kind(), CODEC_VERSION, &payload)?;
        if appended.written {
            self.store.apply(event_id, event)?;
        }
        Ok(appended)
    }
}
