//! Replay: rebuilding every manifest by folding the journal's lifecycle events, in order.
//!
//! Pure over records. A record that does not decode, or an event the store rejects, is reported
//! against its sequence number (and its handle when the payload names one); every other handle
//! rebuilds normally. Records of kinds that are not lifecycle events are counted and skipped.
//!
//! Payloads are read by the fast decoder (`wire.rs`); a registration is read straight into the
//! form its manifest keeps. A payload the fast decoder does not read goes to the reference
//! decoder, so what is accepted, and every error text, is the reference's.

use serde::Serialize;

use super::event::{Handle, LifecycleEvent, kinds};
use super::manifest::{Applied, ManifestStore, Rejection};
use super::wire;
use crate::journal::reader::RecordView;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayIssue {
    pub seq: u64,
    pub handle: Option<String>,
    pub error: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    pub lifecycle_events: u64,
    pub other_events: u64,
    /// Events that decoded but broke an invariant of their manifest.
    pub rejected: Vec<ReplayIssue>,
    /// Lifecycle records whose payload did not decode.
    pub undecodable: Vec<ReplayIssue>,
}

impl ReplayReport {
    pub fn is_clean(&self) -> bool {
        self.rejected.is_empty() && self.undecodable.is_empty()
    }
}

/// Folds records into a [`ManifestStore`], one at a time.
#[derive(Debug, Default)]
pub struct Replayer {
    pub store: ManifestStore,
    pub report: ReplayReport,
}

impl Replayer {
    pub fn feed(&mut self, record: &RecordView<'_>) {
        if !LifecycleEvent::is_lifecycle_kind(record.kind) {
            self.report.other_events += 1;
            return;
        }
        self.report.lifecycle_events += 1;
        let seq = record.position.seq;
        let (kind, version, payload) = (record.kind, record.codec_version, record.payload);
        let fast = if kind == kinds::REGISTERED {
            wire::registration(version, payload)
                .ok()
                .map(|r| (r.handle, self.store.register(record.event_id, r)))
        } else {
            wire::decode(kind, version, payload)
                .ok()
                .map(|e| (e.handle(), self.store.apply_owned(record.event_id, e)))
        };
        let (handle, applied): (Handle, Result<Applied, Rejection>) = match fast {
            Some(done) => done,
            None => match LifecycleEvent::decode_reference(kind, version, payload) {
                Ok(event) => (
                    event.handle(),
                    self.store.apply_owned(record.event_id, event),
                ),
                Err(e) => {
                    self.report.undecodable.push(ReplayIssue {
                        seq,
                        handle: None,
                        error: e.to_string(),
                    });
                    return;
                }
            },
        };
        if let Err(rejection) = applied {
            self.report.rejected.push(ReplayIssue {
                seq,
                handle: Some(Handle::to_string(&handle)),
                error: rejection.to_string(),
            });
        }
    }

    pub fn finish(self) -> (ManifestStore, ReplayReport) {
        (self.store, self.report)
    }
}
