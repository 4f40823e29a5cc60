//! Teardown of one process's tree: SIGTERM, SIGKILL once the grace is up, and the exit proven,
//! all within one monotonic budget anchored at the teardown's start.
//!
//! Invariants:
//! - Every wait (for the launch, for the tree to empty) is bounded by the budget's end, not by
//!   the time each step took: the whole termination ends by `grace` + [`limits::KILL_PROOF_MS`].
//! - Failures are returned, never acted on here: terminalization goes on regardless, and a tree
//!   not proven gone stays owned by its process (lingering, or held as unverified). A signal
//!   that failed is a failure only if the tree was not proven gone after it: one that met a
//!   tree already ending (its guardian exited, its cgroup removed) did what a teardown asks.
//! - `escalated` is set before SIGKILL is sent, and only on a process not yet terminal.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::Proc;
use crate::limits;
use crate::tree::{ProcessTree, TreeSignal};

/// Ends a tree within one monotonic budget anchored at its start: SIGTERM now, SIGKILL at
/// `grace` after the start, and the exit proven (the leader's terminal event persisted and no
/// member of the tree left) by [`limits::KILL_PROOF_MS`] after that; with the default grace
/// (1.5 s) the whole termination has 2 s, whatever each step took. Returns
/// why teardown failed, if it did; terminalization continues regardless, and a tree not proven
/// gone stays owned (lingering, or held as unverified).
pub(crate) async fn teardown(proc: &Arc<Proc>, grace: Duration) -> Result<(), String> {
    let started = Instant::now();
    let kill_at = started + grace;
    let give_up = kill_at + Duration::from_millis(limits::KILL_PROOF_MS);
    let mut failures = Vec::new();
    let tree = match launched_tree(proc, give_up).await {
        Ok(Some(tree)) => tree,
        Ok(None) => return Ok(()),
        Err(_) => return Err("the process was never launched".to_owned()),
    };
    let term = signal(&tree, TreeSignal::Terminate).await;
    let ended = gone(proc, &tree, kill_at).await;
    match term {
        // A tree proven gone was torn down, whatever reaching it said: a signal that found
        // its guardian just exited (its `DONE` not read yet) or its cgroup just removed raced
        // the tree's own end.
        Err(e) if ended => tracing::debug!("SIGTERM found the tree ending: {e}"),
        Err(e) => failures.push(format!("SIGTERM: {e}")),
        Ok(()) => {}
    }
    if !ended {
        if !proc.is_terminal() {
            proc.escalated.store(true, Ordering::SeqCst);
        }
        if let Err(e) = signal(&tree, TreeSignal::Kill).await {
            failures.push(format!("SIGKILL: {e}"));
        }
        if !gone(proc, &tree, give_up).await {
            failures.push(format!(
                "no exit confirmed {} ms after SIGKILL (the termination's budget ended)",
                limits::KILL_PROOF_MS
            ));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// The process's tree, once launched; `None` when the process went terminal without one.
///
/// A stop that raced the launch: the tree appears once the start task has spawned it, or the
/// start fails and the process goes terminal without one.
async fn launched_tree(
    proc: &Proc,
    until: Instant,
) -> Result<Option<Arc<dyn ProcessTree>>, tokio::time::error::Elapsed> {
    let mut exited = proc.exited.subscribe();
    tokio::time::timeout_at(until, async {
        loop {
            if let Some(tree) = proc.tree.get() {
                return Some(Arc::clone(tree));
            }
            if exited.borrow().is_some() {
                return None;
            }
            tokio::select! {
                _ = exited.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        }
    })
    .await
}

/// Whether, by `until`, the process went terminal and its tree emptied.
async fn gone(proc: &Proc, tree: &Arc<dyn ProcessTree>, until: Instant) -> bool {
    let mut exited = proc.exited.subscribe();
    tokio::time::timeout_at(until, async {
        let _ = exited.wait_for(Option::is_some).await;
        tree.wait_empty().await;
    })
    .await
    .is_ok()
}

/// Sends `which` to the tree on the blocking pool: once the leader is reaped a signal scans
/// /proc.
async fn signal(tree: &Arc<dyn ProcessTree>, which: TreeSignal) -> std::io::Result<()> {
    let tree = Arc::clone(tree);
    tokio::task::spawn_blocking(move || tree.signal(which))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
}
