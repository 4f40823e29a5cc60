//! Retention: which finished processes' output may be retired, and its retirement
//! (DESIGN.md, "Capacity and policy").
//!
//! Invariants:
//! - Output is retired only from a process whose exit is verified
//!   ([`Manifest::exit_verified`]), whose terminal result is older than the age asked for, and
//!   which the caller does not hold (the supervisor passes the handles in its table: live, and
//!   lingering while members of a tree outlive its leader). Everything else is kept, and the
//!   plan says why: not terminal, unverified, held, too recent. The store checks the first rule
//!   again when the record is appended (a retirement of an unverified exit is rejected), so a
//!   plan gone stale cannot retire what it should not.
//! - The `OutputRetired` record is acknowledged durable before the first file of the spool is
//!   removed. A crash part-way leaves a record whose spool is partly there;
//!   [`leftovers`] finds those and the next pass (the supervisor runs one at every open) finishes
//!   them. No file is ever removed without that record.
//! - Only the spool's own files are removed ([`crate::spool::remove`]).
//! - A scheduled pass skips its plan only while no manifest ended as long ago as its age
//!   ([`may_be_due`], on the store's earliest end, which a retirement never raises): it never
//!   skips a pass that could retire.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::event::{LifecycleEvent, OutputRetired, derived};
use super::manifest::{Manifest, ManifestStore};
use super::{Handle, Lifecycle, LifecycleError};
use crate::journal::EventId;
use crate::journal::compact::CrashPoints;
use crate::spool::remove::{Removed, remove_spool};

/// One retention pass: what to retire, and whether to do it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionRequest {
    /// Retire output of processes that ended at least this long ago.
    pub older_than: Duration,
    /// Only say what would be retired.
    pub dry_run: bool,
    /// Who asked (recorded in each `OutputRetired` reason): `retention` or `clean`.
    pub by: &'static str,
}

/// Why a process's output is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeepReason {
    /// Not terminal: live, or starting.
    NotTerminal,
    /// Terminal, but its exit is not verified (lost on restore, or a guardian gone without a
    /// receipt): its evidence stays.
    Unverified,
    /// Terminal, but the supervisor still holds it (its tree outlives the leader).
    Held,
    /// Ended less than the asked age ago.
    TooRecent,
}

/// The decision for one manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Retire,
    Keep(KeepReason),
    /// Retired already.
    Retired,
}

/// The verdict of `m` at `now_ms`.
pub fn judge(m: &Manifest, now_ms: u64, older_than: Duration, held: &HashSet<Handle>) -> Verdict {
    if m.retired.is_some() {
        return Verdict::Retired;
    }
    let Some(terminal) = &m.terminal else {
        return Verdict::Keep(KeepReason::NotTerminal);
    };
    if held.contains(&m.handle) {
        return Verdict::Keep(KeepReason::Held);
    }
    if !m.exit_verified() {
        return Verdict::Keep(KeepReason::Unverified);
    }
    let age = u128::from(now_ms.saturating_sub(terminal.at_unix_ms));
    if age < older_than.as_millis() {
        return Verdict::Keep(KeepReason::TooRecent);
    }
    Verdict::Retire
}

/// A process kept for a reason worth naming (not merely live or recent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    pub handle: Handle,
    pub reason: KeepReason,
}

/// What a pass decided before doing anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Handles to retire, in registration order.
    pub retire: Vec<Handle>,
    /// Terminal processes kept because they are unverified or held.
    pub kept: Vec<Kept>,
    pub not_terminal: u64,
    pub too_recent: u64,
    pub already_retired: u64,
}

/// Whether a pass at `now_ms` that retires output older than `older_than` could retire any
/// of `store`'s: false when no manifest ended that long ago ([`judge`]'s age rule), which the
/// store knows without reading one. A scheduled pass that finds nothing due skips the plan.
pub fn may_be_due(store: &ManifestStore, now_ms: u64, older_than: Duration) -> bool {
    let age_ms = u64::try_from(older_than.as_millis()).unwrap_or(u64::MAX);
    if age_ms == 0 {
        // Any end is old enough, one dated after `now_ms` too (its age saturates to zero).
        return store.may_have_ended_by(u64::MAX);
    }
    now_ms
        .checked_sub(age_ms)
        .is_some_and(|cutoff| store.may_have_ended_by(cutoff))
}

/// Judges every manifest of `store`.
pub fn plan(
    store: &ManifestStore,
    now_ms: u64,
    older_than: Duration,
    held: &HashSet<Handle>,
) -> Plan {
    let (retired, rest) = store.unretired();
    let mut plan = Plan {
        already_retired: retired,
        ..Plan::default()
    };
    for m in rest {
        match judge(&m, now_ms, older_than, held) {
            Verdict::Retire => plan.retire.push(m.handle),
            Verdict::Retired => plan.already_retired += 1,
            Verdict::Keep(KeepReason::NotTerminal) => plan.not_terminal += 1,
            Verdict::Keep(KeepReason::TooRecent) => plan.too_recent += 1,
            Verdict::Keep(reason) => plan.kept.push(Kept {
                handle: m.handle,
                reason,
            }),
        }
    }
    plan
}

/// One spool removed (or, in a dry run, that would be).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredOutput {
    pub handle: Handle,
    #[serde(flatten)]
    pub removed: Removed,
}

/// A retirement that did not complete, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetireFailure {
    pub handle: Handle,
    pub error: String,
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanReport {
    pub dry_run: bool,
    /// Retired by this pass (in a dry run: would be; nothing removed).
    pub retired: Vec<RetiredOutput>,
    /// Retired earlier, whose removal a crash interrupted, finished by this pass.
    pub finished: Vec<RetiredOutput>,
    /// Retirements that did not complete (the record, or the removal, failed); the next pass
    /// tries again.
    pub failed: Vec<RetireFailure>,
    /// Terminal processes whose output is kept although old enough: unverified or held.
    pub kept: Vec<Kept>,
    pub not_terminal: u64,
    pub too_recent: u64,
    pub already_retired: u64,
}

/// The record of `handle`'s retirement, under its derived ID (a retry finds it).
pub fn retired_event(m: &Manifest, reason: String, at_unix_ms: u64) -> (EventId, LifecycleEvent) {
    (
        m.ids.terminal.derived(derived::RETIRED),
        LifecycleEvent::OutputRetired(OutputRetired {
            handle: m.handle,
            reason,
            at_unix_ms,
        }),
    )
}

/// Handles whose retirement is recorded but whose spool directory is still under
/// `spool_root` (a crash part-way through a removal). One listing of the directory, so its cost
/// follows the spools present, not the processes ever run. A name that is not a handle, or a
/// handle the store does not know, is never a leftover: nothing proves it may go.
pub fn leftovers(store: &ManifestStore, spool_root: &Path) -> std::io::Result<Vec<Handle>> {
    let entries = match std::fs::read_dir(spool_root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other?,
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Some(handle) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<Handle>().ok())
        else {
            continue;
        };
        if store.retired(&handle) == Some(true) {
            found.push(handle);
        }
    }
    found.sort_by_key(|h| h.0.0);
    Ok(found)
}

/// Where a pass records its retirements: a [`Lifecycle`] of its own, or a supervisor's behind its
/// lock.
pub trait RetireJournal {
    /// The manifest of `handle` now (a plan may be stale; the store's checks at `append` are the
    /// last word).
    fn manifest(&mut self, handle: &Handle) -> Option<Manifest>;
    /// Appends `event`, returning only once it is durable.
    fn append(&mut self, id: EventId, event: &LifecycleEvent) -> Result<(), LifecycleError>;
}

impl RetireJournal for Lifecycle {
    fn manifest(&mut self, handle: &Handle) -> Option<Manifest> {
        Lifecycle::manifest(self, handle).map(std::borrow::Cow::into_owned)
    }
    fn append(&mut self, id: EventId, event: &LifecycleEvent) -> Result<(), LifecycleError> {
        Lifecycle::append(self, id, event).map(drop)
    }
}

/// Runs a pass: records each retirement of `plan` through `journal` and removes its spool, then
/// finishes `leftovers`. Failures of one process are reported and do not stop the others.
pub fn execute(
    request: &RetentionRequest,
    plan: Plan,
    leftovers: Vec<Handle>,
    now_ms: u64,
    spool_root: &Path,
    journal: &mut dyn RetireJournal,
    crash: &mut dyn CrashPoints,
) -> CleanReport {
    let mut report = CleanReport {
        dry_run: request.dry_run,
        kept: plan.kept,
        not_terminal: plan.not_terminal,
        too_recent: plan.too_recent,
        already_retired: plan.already_retired,
        ..CleanReport::default()
    };
    let reason = format!(
        "{}: ended more than {} ago",
        request.by,
        human_duration(request.older_than)
    );
    for handle in plan.retire {
        let dir = spool_root.join(handle.to_string());
        if request.dry_run {
            report.retired.push(RetiredOutput {
                handle,
                removed: would_remove(&dir),
            });
            continue;
        }
        let Some(m) = journal.manifest(&handle) else {
            continue;
        };
        let (id, event) = retired_event(&m, reason.clone(), now_ms);
        if let Err(e) = crash
            .reached("retire: append record")
            .map_err(|e| e.to_string())
            .and_then(|()| journal.append(id, &event).map_err(|e| e.to_string()))
        {
            report.failed.push(RetireFailure { handle, error: e });
            continue;
        }
        match remove_spool(&dir, crash) {
            Ok(removed) => report.retired.push(RetiredOutput { handle, removed }),
            Err(e) => report.failed.push(RetireFailure {
                handle,
                error: e.to_string(),
            }),
        }
    }
    if !request.dry_run {
        for handle in leftovers {
            let dir = spool_root.join(handle.to_string());
            match remove_spool(&dir, crash) {
                Ok(removed) => report.finished.push(RetiredOutput { handle, removed }),
                Err(e) => report.failed.push(RetireFailure {
                    handle,
                    error: e.to_string(),
                }),
            }
        }
    }
    report
}

/// What removing `dir` would free, counted without removing anything.
fn would_remove(dir: &Path) -> Removed {
    let mut removed = Removed::default();
    if let Ok(entries) = std::fs::read_dir(dir) {
        removed.dir_removed = true;
        for entry in entries.flatten() {
            removed.files += 1;
            removed.bytes += entry.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    removed
}

/// `7d`, `36h`, `90m`, `45s`, `250ms`: the largest unit that divides the duration.
pub fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human_duration(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(human_duration(Duration::from_secs(36 * 3600)), "36h");
        assert_eq!(human_duration(Duration::from_secs(90 * 60)), "90m");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(human_duration(Duration::ZERO), "0ms");
    }
}
