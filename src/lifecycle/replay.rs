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

/// A snapshot file that could not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotProblem {
    pub file: String,
    pub reason: String,
}

/// What replay found. The counts and issues cover every record the projection holds, those a
/// snapshot brought included, so a restore from a snapshot reports what a full replay would.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    pub lifecycle_events: u64,
    pub other_events: u64,
    /// Events that decoded but broke an invariant of their manifest.
    pub rejected: Vec<ReplayIssue>,
    /// Lifecycle records whose payload did not decode.
    pub undecodable: Vec<ReplayIssue>,
    /// The seq of the snapshot the projection was restored from (only later records were
    /// replayed); `None` for a replay of the whole journal.
    pub snapshot_seq: Option<u64>,
    /// Snapshot files that could not be used (damaged, of another journal, not covering what
    /// compaction removed): an older snapshot, or the records themselves, served instead.
    pub snapshot_problems: Vec<SnapshotProblem>,
    /// Compaction removed the records below this seq and no usable snapshot covers them: the
    /// projection lacks whatever they did. Never silent: a report with it is not clean.
    pub lost_below_seq: Option<u64>,
}

impl ReplayReport {
    pub fn is_clean(&self) -> bool {
        self.rejected.is_empty()
            && self.undecodable.is_empty()
            && self.snapshot_problems.is_empty()
            && self.lost_below_seq.is_none()
    }

    /// The part of the report a snapshot carries: what the records themselves gave.
    pub fn of_records(&self) -> ReplayReport {
        ReplayReport {
            lifecycle_events: self.lifecycle_events,
            other_events: self.other_events,
            rejected: self.rejected.clone(),
            undecodable: self.undecodable.clone(),
            ..ReplayReport::default()
        }
    }
}

/// Folds records into a [`ManifestStore`], one at a time.
#[derive(Debug, Default)]
pub struct Replayer {
    pub store: ManifestStore,
    pub report: ReplayReport,
}

impl Replayer {
    /// A replayer that continues from a snapshot's store and report.
    pub fn resumed(store: ManifestStore, report: ReplayReport) -> Replayer {
        Replayer { store, report }
    }

    pub fn feed(&mut self, record: &RecordView<'_>) {
        if !LifecycleEvent::is_lifecycle_kind(record.kind) {
            self.report.other_events += 1;
            return;
        }
        self.report.lifecycle_events += 1;
        let (kind, version, payload) = (record.kind, record.codec_version, record.payload);
        let (handle, applied) = if kind == kinds::REGISTERED || kind == kinds::REGISTERED_V2 {
            match wire::registration(kind, version, payload) {
                Ok(r) => (Some(r.handle), self.store.register(record.event_id, r)),
                Err(_) => return self.feed_reference(record),
            }
        } else {
            match wire::decode(kind, version, payload) {
                Ok(mut e) => (e.handle(), self.store.apply_event(record.event_id, &mut e)),
                Err(_) => return self.feed_reference(record),
            }
        };
        self.note(record, handle, applied);
    }

    /// A lifecycle record the fast decoder does not read: the reference decoder decides, and its
    /// error is the one reported.
    fn feed_reference(&mut self, record: &RecordView<'_>) {
        match LifecycleEvent::decode_reference(record.kind, record.codec_version, record.payload) {
            Ok(mut event) => {
                let applied = self.store.apply_event(record.event_id, &mut event);
                self.note(record, event.handle(), applied);
            }
            Err(e) => self.report.undecodable.push(ReplayIssue {
                seq: record.position.seq,
                handle: None,
                error: e.to_string(),
            }),
        }
    }

    fn note(
        &mut self,
        record: &RecordView<'_>,
        handle: Option<Handle>,
        applied: Result<Applied, Rejection>,
    ) {
        if let Err(rejection) = applied {
            self.report.rejected.push(ReplayIssue {
                seq: record.position.seq,
                handle: handle.as_ref().map(Handle::to_string),
                error: rejection.to_string(),
            });
        }
    }

    pub fn finish(self) -> (ManifestStore, ReplayReport) {
        (self.store, self.report)
    }
}
