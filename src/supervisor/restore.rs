//! Restore is reconciliation, not reattachment. It runs inside `Supervisor::open`,
//! before the actor starts, so nothing else touches the table meanwhile.
//!
//! Invariants:
//! - Restore never reads a persisted pid to signal it; a process that was `starting` or `running`
//!   becomes `lost_on_restore` under the Lost event ID allocated at its registration.
//! - Every record restore writes has an ID fixed before the crash (or derived from one), so a
//!   second restore, or a restore that crashed half-way, writes nothing twice.
//! - Spool recovery (which cuts torn tails and syncs) runs on a blocking thread, never on the
//!   runtime.
//! - Every recorded tree not yet released is assessed from its evidence (`tree::assess`): a
//!   verified receipt, an empty cgroup or a changed boot id is recorded as its release; a cgroup
//!   that still holds processes while its guardian is gone is killed by its path (ours, never a
//!   pid); anything else stays `unverified` and holds capacity in the actor, which re-assesses
//!   it, and which a `stop` re-assesses at once (`stop_held`): a guardian re-attached by its
//!   recorded identity is asked to end its tree, a cgroup is killed by its path.
//! - A registration whose scope was never recorded (its launch was cut short before it, or a
//!   lost page cache took it) holds nothing: its guardian, if it got that far, took its tree
//!   down when the supervisor that launched it ended. It is released only by the receipt its
//!   handle names saying the gate never opened (`release_aborted`), and that receipt is removed
//!   only once the release is durable.
//! - Restore's work is bounded by the processes a crash left work for (`needs_restore`), never by
//!   the finished ones a root keeps: those are counted, not copied or walked again.
//! - A receipt whose tree's release is recorded is removed (`retire_stale_receipts`): its
//!   supervisor died between the release's acknowledgement and the receipt's removal.

use std::sync::Arc;

use serde::Serialize;

use std::time::Duration;

use super::Shared;
use super::process::record_release_blocking;
use super::publish::publish_and_notify;
use crate::journal::RecoveryReport;
use crate::lifecycle::event::{
    CursorBounds, ExitProof, ExitStatus, LifecycleIds, LostOnRestore, Scoped,
};
use crate::lifecycle::{Handle, LifecycleEvent, Manifest, ReplayReport, State};
use crate::limits;
use crate::spool::Spool;
use crate::tree::assess::{Assessment, assess, assess_unscoped, read_boot_id, receipt_pending};

/// What `Supervisor::open` found and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RestoreReport {
    /// Processes that were live when the previous supervisor stopped: now `lost_on_restore`.
    pub reconciled: Vec<Handle>,
    /// How many processes were already terminal: reopened read-only, as the journal left them
    /// (a count: restore examines only the few a crash left work for, never every finished one).
    pub reopened: usize,
    pub journal: RecoveryReport,
    pub replay: ReplayReport,
    /// One entry per record, spool or service problem; the rest reconciled regardless.
    pub errors: Vec<String>,
    /// Trees of earlier lifetimes proven gone now, and what proved it.
    pub released: Vec<(Handle, ExitProof)>,
    /// Trees nothing proves gone yet, and why; each holds capacity until something does.
    pub unverified: Vec<(Handle, String)>,
}

/// Re-assesses held trees; returns those proven gone (their releases recorded). A cgroup whose
/// guardian is gone is killed by its path and waited for, bounded.
pub(crate) fn reassess(shared: &Shared, held: &[(Handle, Scoped, LifecycleIds)]) -> Vec<Handle> {
    assess_all(shared, held)
        .into_iter()
        .filter_map(|(handle, outcome)| outcome.ok().map(|_| handle))
        .collect()
}

/// Assesses each held tree against the boot id now, recording each release it proves; the
/// proof, or why there is none, per tree in order.
fn assess_all(
    shared: &Shared,
    held: &[(Handle, Scoped, LifecycleIds)],
) -> Vec<(Handle, Result<ExitProof, String>)> {
    let boot = read_boot_id(&shared.config.boot_id_source);
    held.iter()
        .map(|(handle, scope, ids)| {
            let outcome = settle(scope, boot);
            if let Ok(proof) = &outcome {
                let _ = record_release_blocking(shared, *handle, *ids, proof.clone());
            }
            (*handle, outcome)
        })
        .collect()
}

/// One assessment, ending a populated cgroup whose guardian is gone: the proof, or why none.
fn settle(scope: &Scoped, boot: Option<[u8; 16]>) -> Result<ExitProof, String> {
    match assess(scope, boot) {
        Assessment::Exited(proof) => Ok(proof),
        Assessment::CgroupPopulated(cgroup) => {
            let bound = Duration::from_millis(limits::GUARDIAN_HANDSHAKE_MS);
            match cgroup.kill().and_then(|()| cgroup.wait_empty(bound)) {
                Ok(true) => {
                    let _ = cgroup.remove();
                    Ok(ExitProof::CgroupEmpty)
                }
                Ok(false) => Err("its cgroup did not empty after cgroup.kill".to_owned()),
                Err(e) => Err(format!("killing its cgroup: {e}")),
            }
        }
        Assessment::GuardianAlive(_) => {
            Err("its guardian (of an earlier supervisor) is still ending it".to_owned())
        }
        Assessment::Unverified(why) => Err(why),
    }
}

/// `stop` of a held (unverified) tree: re-assesses it now and ends what the evidence lets it
/// reach. A guardian re-attached by its recorded identity (a fresh pidfd whose pidfs inode or
/// start time matches, never the bare pid) is asked to end its tree with SIGTERM, which it
/// answers as it answers a lost supervisor (the quiesce, the grace, SIGKILL, its receipt), and
/// is waited for, bounded; a cgroup whose guardian is gone is killed by its path. Records the
/// release it proves; returns the proof, or why there is none.
pub(crate) fn stop_held(
    shared: &Shared,
    held: &(Handle, Scoped, LifecycleIds),
) -> Result<ExitProof, String> {
    let (handle, scope, ids) = held;
    let boot = read_boot_id(&shared.config.boot_id_source);
    if let Assessment::GuardianAlive(pidfd) = assess(scope, boot) {
        crate::tree::assess::end_guardian(&pidfd)?;
    }
    let outcome = settle(scope, boot);
    if let Ok(proof) = &outcome {
        let _ = record_release_blocking(shared, *handle, *ids, proof.clone());
    }
    outcome
}

/// Releases each registration whose launch was cut short before its scope was recorded and
/// whose guardian left the receipt of a launch aborted before `GO` (rule E of journal-format.md),
/// then removes that receipt. A receipt that a guardian of the crashed supervisor may still be
/// writing (created lately, incomplete) is waited for, all of them within one bound; any other
/// stays as it is (`ps` says why), holding nothing.
fn release_aborted(
    shared: &Shared,
    unscoped: &[(Handle, LifecycleIds)],
) -> Vec<(Handle, ExitProof)> {
    let receipts = shared.receipts_dir();
    let young = Duration::from_millis(limits::GUARDIAN_HANDSHAKE_MS);
    let deadline = std::time::Instant::now() + Duration::from_millis(limits::GUARDIAN_REAP_MS);
    let mut pending: Vec<_> = unscoped
        .iter()
        .map(|&(handle, ids)| (handle, ids, receipts.join(format!("{handle}.receipt"))))
        .filter(|(_, _, path)| path.symlink_metadata().is_ok())
        .collect();
    let mut released = Vec::new();
    while !pending.is_empty() {
        pending.retain(|(handle, ids, path)| {
            match assess_unscoped(path, &handle.to_string()) {
                // Kept, evidence and all, for the next restore if the release is not durable.
                Ok(proof) if !record_release_blocking(shared, *handle, *ids, proof.clone()) => {
                    false
                }
                Ok(proof) => {
                    if let Err(e) = shared.trees.remove(&format!("{handle}.receipt")) {
                        tracing::debug!(%handle, error = %e, "receipt not removed");
                    }
                    tracing::info!(%handle, "restore: a launch cut short before its scope never ran its command");
                    released.push((*handle, proof));
                    false
                }
                Err(_) => receipt_pending(path, young),
            }
        });
        if std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    released
}

/// The memberships admission samples held trees by (`tree::assess::observable`).
pub(super) fn observable(held: &[(Handle, Scoped)]) -> Vec<(Handle, crate::tree::Membership)> {
    held.iter()
        .map(|(h, scope)| (*h, crate::tree::assess::observable(scope)))
        .collect()
}

/// Two walks of each held tree, `HELD_PRESAMPLE_GAP_MS` apart, in order, for the actor to
/// observe before its first decision: without them that decision would charge each held tree a
/// core and the floor whatever is left of it.
pub(crate) async fn presample(
    shared: &Arc<Shared>,
    held: &[(Handle, Scoped, LifecycleIds)],
) -> Vec<(Handle, crate::tree::TreeSample)> {
    if held.is_empty() {
        return Vec::new();
    }
    let scopes: Vec<_> = held.iter().map(|(h, s, _)| (*h, s.clone())).collect();
    let shared = Arc::clone(shared);
    tokio::task::spawn_blocking(move || {
        let memberships = observable(&scopes);
        let telemetry = &shared.config.telemetry;
        let mut samples = telemetry.held(&memberships);
        std::thread::sleep(Duration::from_millis(limits::HELD_PRESAMPLE_GAP_MS));
        samples.extend(telemetry.held(&memberships));
        samples
    })
    .await
    .unwrap_or_default()
}

/// Reconciles every manifest replayed at open.
pub(crate) async fn restore(
    shared: &Arc<Shared>,
    journal: RecoveryReport,
    replay: ReplayReport,
) -> (RestoreReport, Vec<(Handle, Scoped, LifecycleIds)>) {
    let mut report = RestoreReport::of_replay(journal, replay);
    let (manifests, reopened) = {
        let lifecycle = shared.lifecycle.lock();
        let store = lifecycle.store();
        let (work, live_terminal) = unsettled(store.live());
        (work, live_terminal + store.settled())
    };
    report.reopened = reopened;
    let held = held_trees(&manifests);
    // Before the lifecycle records: a tree's assessment does not depend on them, and a
    // guardian of the crashed supervisor is given its moment to finish while spools recover.
    let assessed = {
        let shared = Arc::clone(shared);
        let held = held.clone();
        tokio::task::spawn_blocking(move || assess_all(&shared, &held))
            .await
            .unwrap_or_default()
    };
    let unscoped: Vec<_> = manifests
        .iter()
        .filter(|m| m.scope.is_none() && m.released.is_none())
        .map(|m| (m.handle, m.ids))
        .collect();
    let shared_for = Arc::clone(shared);
    let aborted = tokio::task::spawn_blocking(move || {
        let released = release_aborted(&shared_for, &unscoped);
        retire_stale_receipts(&shared_for);
        released
    })
    .await
    .unwrap_or_default();
    report.released.extend(aborted);
    let still_held = report.take_assessments(assessed, held);
    for m in manifests {
        if !m.state.is_terminal() {
            report.reconcile_lost(shared, m).await;
        } else {
            report.finish_publication(shared, &m).await;
        }
    }
    (report, still_held)
}

/// Removes every receipt left in `trees/` by a tree whose release is recorded: a supervisor
/// removes each right after its release is durable, so one is left only by a supervisor that
/// died in between, and stays until an open finds it here. Any other file stays: a receipt of
/// a tree not yet released is evidence, and one whose handle is not in the journal is not
/// ours to judge. One listing of a directory that holds only the receipts of live trees.
fn retire_stale_receipts(shared: &Shared) {
    let Ok(names) = shared.trees.names() else {
        return;
    };
    for name in names {
        let Some(handle) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".receipt"))
            .and_then(|h| h.parse::<Handle>().ok())
        else {
            continue;
        };
        let released = shared
            .lifecycle
            .lock()
            .manifest(&handle)
            .is_some_and(|m| m.released.is_some());
        if released {
            match shared.trees.remove(&format!("{handle}.receipt")) {
                Ok(()) => tracing::debug!(%handle, "a released tree's receipt removed"),
                Err(e) => tracing::debug!(%handle, error = %e, "receipt not removed"),
            }
        }
    }
}

/// The manifests restore has work for, copied out of the store, and how many were terminal.
/// A root keeps every process it ever ran, so copying them all made each open cost more than
/// the one before; only these few need anything done.
fn unsettled<'a>(manifests: impl Iterator<Item = &'a Manifest>) -> (Vec<Manifest>, usize) {
    let mut terminal = 0;
    let mut work = Vec::new();
    for m in manifests {
        terminal += usize::from(m.state.is_terminal());
        if needs_restore(m) {
            work.push(m.clone());
        }
    }
    (work, terminal)
}

/// Whether restore has anything to do for `m`: reconcile it (live under an earlier supervisor),
/// assess its tree (a guardian's, not yet released), release a launch cut short before its scope
/// (`release_aborted`), or finish its publication. Each of `restore`'s steps selects among these
/// alone, so the others are skipped without changing what it does.
/// That is exactly a manifest that is not settled (`Manifest::settled`), which is why restore
/// walks only the manifests the store holds decoded.
fn needs_restore(m: &Manifest) -> bool {
    !m.settled()
}

/// A crash between a terminal event and its publication leaves work to finish.
fn publication_unfinished(m: &Manifest) -> bool {
    m.terminal
        .as_ref()
        .is_some_and(|t| !m.published.contains(&t.event_id) || !m.completion_notified)
}

/// The trees restore must prove gone before they stop holding capacity.
fn held_trees(manifests: &[Manifest]) -> Vec<(Handle, Scoped, LifecycleIds)> {
    let mut held = Vec::new();
    for m in manifests {
        // Only a guardian's tree can be proven gone; a group's is never held.
        if let Some(scope) = m.scope.clone().filter(|s| s.guardian.is_some())
            && m.released.is_none()
        {
            held.push((m.handle, scope, m.ids));
        }
    }
    held
}

/// Recovers a live process's spool (cuts a torn tail, syncs) on a blocking thread: its
/// `(retained_from, total_bytes)`.
async fn recover_spool(shared: &Shared, m: &Manifest) -> Result<(u64, u64), String> {
    let handle = m.handle;
    let dir = shared.spool_dir(&handle);
    let options = shared
        .config
        .spool_for(m.command.limits().output_retention_bytes);
    tokio::task::spawn_blocking(move || {
        // A process that never wrote has no spool (it is created at the first byte).
        if !dir.is_dir() {
            return Ok((0, 0));
        }
        Spool::open_writer(&dir, handle.0.as_bytes(), options)
            .and_then(|(mut spool, _)| spool.checkpoint())
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(format!("spool recovery task: {e}")))
}

impl RestoreReport {
    /// A report that starts with the records replay could not apply, each said once in the log.
    fn of_replay(journal: RecoveryReport, replay: ReplayReport) -> Self {
        let report = RestoreReport {
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
        for error in &report.errors {
            tracing::warn!(%error, "restore: a journal record was not applied");
        }
        report
    }

    /// Takes in each held tree's assessment, in `held`'s order; returns the trees still held.
    fn take_assessments(
        &mut self,
        assessed: Vec<(Handle, Result<ExitProof, String>)>,
        held: Vec<(Handle, Scoped, LifecycleIds)>,
    ) -> Vec<(Handle, Scoped, LifecycleIds)> {
        let mut still_held = Vec::new();
        for ((handle, outcome), entry) in assessed.into_iter().zip(held) {
            match outcome {
                Ok(proof) => {
                    tracing::info!(%handle, proof = ?proof, "restore: the tree of an earlier lifetime is proven gone");
                    self.released.push((handle, proof));
                }
                Err(why) => {
                    tracing::warn!(%handle, reason = %why, "restore: the tree stays unverified and holds capacity");
                    self.unverified.push((handle, why));
                    still_held.push(entry);
                }
            }
        }
        still_held
    }

    /// Records a process live under an earlier supervisor as `lost_on_restore`, its spool
    /// recovered first so that the record names durable bounds, then publishes it.
    async fn reconcile_lost(&mut self, shared: &Arc<Shared>, m: Manifest) {
        let handle = m.handle;
        let mut bounds = m.bounds;
        match recover_spool(shared, &m).await {
            Ok((retained_from, total_bytes)) => {
                bounds = CursorBounds {
                    retained_from: retained_from.max(bounds.retained_from),
                    total_bytes: total_bytes.max(bounds.total_bytes),
                };
            }
            Err(e) => self.errors.push(format!("{handle}: spool: {e}")),
        }
        let event = LifecycleEvent::LostOnRestore(LostOnRestore {
            handle,
            bounds,
            at_unix_ms: super::now_unix_ms(),
        });
        if let Err(e) = shared.append(m.ids.lost, event).await {
            tracing::warn!(%handle, error = %e, "restore: lost_on_restore not recorded");
            self.errors
                .push(format!("{handle}: recording lost_on_restore: {e}"));
            return;
        }
        tracing::info!(%handle, was = m.state.name(), "restore: live under an earlier supervisor; now lost_on_restore (not reattached)");
        self.reconciled.push(handle);
        let errors = publish_and_notify(
            shared,
            handle,
            m.ids,
            m.ids.lost,
            State::LostOnRestore,
            ExitStatus::Unknown,
        )
        .await;
        self.errors.extend(errors);
    }

    /// A crash between a terminal event and its publication leaves work to finish.
    async fn finish_publication(&mut self, shared: &Arc<Shared>, m: &Manifest) {
        if let Some(t) = &m.terminal
            && publication_unfinished(m)
        {
            let errors =
                publish_and_notify(shared, m.handle, m.ids, t.event_id, t.state, t.exit).await;
            self.errors.extend(errors);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::event::ProcessWitness;
    use crate::lifecycle::{ManifestStore, workload};

    /// A process of the workload that ran to its end, made settled: its guardian's tree
    /// released, its terminal event published and its completion notified.
    fn settled() -> Manifest {
        let mut store = ManifestStore::new();
        for n in 0..workload::LANES * workload::PHASES {
            let (id, event) = workload::event(n);
            store.apply(id, &event).unwrap();
        }
        let mut m = store
            .iter()
            .find(|m| m.terminal.is_some() && m.scope.is_some())
            .unwrap()
            .into_owned();
        let witness = ProcessWitness {
            pid: 4242,
            start_time_ticks: 7,
            pidfs_ino: 9,
        };
        if let Some(scope) = m.scope.as_mut() {
            scope.guardian = Some(witness);
        }
        m.released = Some(ExitProof::CgroupEmpty);
        m.published = m.terminal.iter().map(|t| t.event_id).collect();
        m.completion_notified = true;
        m
    }

    /// Restore copies out only what a crash left work for: however many settled processes a
    /// root holds, it counts them and touches none.
    #[test]
    fn restore_touches_only_unsettled_processes() {
        let done = settled();
        assert!(
            done.state.is_terminal() && !needs_restore(&done),
            "{done:?}"
        );
        let unsettled_ones = [
            Manifest {
                state: State::Running,
                terminal: None,
                ..done.clone()
            },
            Manifest {
                released: None,
                ..done.clone()
            },
            Manifest {
                scope: None,
                released: None,
                ..done.clone()
            },
            Manifest {
                published: Default::default(),
                ..done.clone()
            },
            Manifest {
                completion_notified: false,
                ..done.clone()
            },
        ];
        // A group's tree is never held: released or not, it leaves nothing to assess.
        let group = Manifest {
            scope: done.scope.clone().map(|s| Scoped {
                guardian: None,
                ..s
            }),
            released: None,
            ..done.clone()
        };
        let mut all = vec![done.clone(); 1000];
        all.push(group);
        all.extend(unsettled_ones.iter().cloned());
        all.extend(vec![done; 1000]);
        let (work, terminal) = unsettled(all.iter());
        assert_eq!(work, unsettled_ones[..], "in store order, nothing else");
        assert_eq!(terminal, all.len() - 1, "every one but the running one");
    }
}
