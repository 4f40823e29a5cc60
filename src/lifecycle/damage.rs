//! What a writer tells its user when the root it opens is damaged: one line naming each kind
//! of damage recovery and replay found (not the residue a crash leaves, which a writable open
//! repairs, and not a damaged snapshot another one or the records stood in for).
//!
//! Invariant: `None` exactly when the journal's report is crash residue only and the replay
//! lost nothing (no compacted history without a snapshot, no rejected or undecodable record),
//! so that a host refusing damaged roots (`SupervisorConfig::strict`) refuses all of them; and a
//! strict host refuses on what a read-only scan found, before a writable open changed a byte.

use std::path::Path;

use super::ReplayReport;
use crate::journal::RecoveryReport;
use crate::journal::reader::JournalReader;

/// The damage of an open, in one line; `None` when there is none.
pub fn summary(journal: &RecoveryReport, replay: &ReplayReport) -> Option<String> {
    let mut found: Vec<String> = Vec::new();
    let mut count = |n: usize, what: &str| {
        if n > 0 {
            found.push(format!("{n} {what}"));
        }
    };
    count(
        journal.lost_acknowledged.len(),
        "range(s) of lost acknowledged records",
    );
    count(journal.missing_segments.len(), "missing segment(s)");
    count(journal.bad_segments.len(), "bad segment(s)");
    count(journal.damaged.len(), "damaged range(s)");
    count(journal.damaged_commit_areas.len(), "damaged commit area(s)");
    count(journal.gaps.len(), "sequence gap(s)");
    count(journal.duplicate_ids.len(), "duplicate event ID(s)");
    count(
        journal.unrecognised_files.len(),
        "unrecognised file(s) in journal/",
    );
    count(
        replay.rejected.len() + replay.undecodable.len(),
        "record(s) replay rejected",
    );
    if journal.bad_floor.is_some() {
        found.push("an unusable FLOOR".to_owned());
    }
    if let Some(seq) = replay.lost_below_seq {
        found.push(format!(
            "the history below seq {seq} compacted away with no usable snapshot"
        ));
    }
    (!found.is_empty()).then(|| {
        format!(
            "the journal is damaged ({}); `procjournal journal verify` reports where",
            found.join(", ")
        )
    })
}

/// The damage a read-only scan of `root`'s journal finds, for a host that refuses damaged roots
/// to check before its writable open repairs anything (a refusal leaves the root as it found
/// it). `None` for a root without a journal yet, which the open creates.
pub fn before_open(root: &Path) -> Option<String> {
    let reader = JournalReader::open(root).ok()?;
    match reader.scan(u64::MAX, |_| {}) {
        Ok(report) => summary(&report, &ReplayReport::default()),
        Err(e) => Some(format!("the journal cannot be scanned ({e})")),
    }
}
