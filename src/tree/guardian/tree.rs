//! The guardian's view of its tree: every descendant, found by walking
//! `/proc/PID/task/TID/children` down from the guardian (a child subreaper, so every orphan of
//! the tree is re-parented to it and stays in the walk), each signalled through a pidfd.
//!
//! Invariants:
//! - A member is signalled only after it was pinned with a pidfd and re-checked: its parent is
//!   still the one the walk found it under, so a pid reused between the walk and the pin is
//!   never hit.
//! - A graceful signal first quiesces: every member is stopped (SIGSTOP through its pidfd) until
//!   a walk finds no new one, so a tree that forks cannot outrun the signal; then each gets the
//!   signal and only the members this stop suspended are continued. Members that were already
//!   stopped (job control, a tracer) are signalled but never continued by us.
//! - Each quiesce is bounded ([`QUIESCE_BUDGET`]); on expiry the members found so far are
//!   signalled and resumed, and SIGKILL (which needs no quiesce) follows from the caller.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::process::{Signal, pidfd_send_signal};

use crate::tree::{open_pidfd, pidfs_ino};

use crate::tree::{TreeSignal, procfs};

/// How long a graceful signal may spend stopping a forking tree before it signals what it has.
pub(crate) const QUIESCE_BUDGET: Duration = Duration::from_millis(500);

/// A child's identity witness: (pidfs inode or 0, start time in ticks or 0). Only for a child
/// not yet reaped, whose pid therefore cannot be reused meanwhile.
pub(crate) fn witness(pid: u32) -> (u64, u64) {
    let ino = open_pidfd(pid).map_or(0, |fd| pidfs_ino(&fd));
    (ino, procfs::stat(pid).map_or(0, |s| s.start_time_ticks))
}

/// The children `parent` has now, read from each of its threads' `children` files (children are
/// listed under the thread that forked them).
fn children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_ascii_whitespace()
                    .filter_map(|w| w.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Every descendant of `root` (excluded) with the parent it was found under.
pub(crate) fn descendants(root: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        for child in children(parent) {
            if seen.insert(child) {
                out.push((child, parent));
                queue.push(child);
            }
        }
    }
    out
}

/// Pins `pid` and checks it is still the child of `parent`; returns the pidfd and its state.
fn pin(pid: u32, parent: u32) -> Option<(OwnedFd, u8)> {
    let fd = open_pidfd(pid).ok()?;
    let stat = procfs::stat(pid)?;
    (stat.ppid == i64::from(parent)).then_some((fd, stat.state))
}

/// Signals one process by pid, through a pidfd; for members listed by a frozen cgroup, which
/// the kernel keeps from exiting or being replaced while frozen.
pub(crate) fn signal_pid(pid: u32, signal: TreeSignal) {
    if let Ok(fd) = open_pidfd(pid) {
        let _ = pidfd_send_signal(fd.as_fd(), signal.rustix());
    }
}

/// Signals every descendant of `root` not in `skip`. SIGTERM and SIGINT quiesce the tree first
/// (module doc); SIGKILL is one round (the caller repeats it until nothing is left).
pub(crate) fn signal_tree(root: u32, signal: TreeSignal, skip: &HashSet<u32>) -> usize {
    if signal == TreeSignal::Kill {
        let mut sent = 0;
        for (pid, parent) in descendants(root) {
            if skip.contains(&pid) {
                continue;
            }
            if let Some((fd, _)) = pin(pid, parent)
                && pidfd_send_signal(fd.as_fd(), Signal::KILL).is_ok()
            {
                sent += 1;
            }
        }
        return sent;
    }
    let quiesced = quiesce(root, skip, Instant::now() + QUIESCE_BUDGET);
    for fd in quiesced.ours.values().chain(quiesced.foreign.values()) {
        let _ = pidfd_send_signal(fd.as_fd(), signal.rustix());
    }
    for fd in quiesced.ours.values() {
        let _ = pidfd_send_signal(fd.as_fd(), Signal::CONT);
    }
    quiesced.ours.len() + quiesced.foreign.len()
}

/// Members stopped by this quiesce (to be continued) and members found already stopped.
#[derive(Debug, Default)]
pub(crate) struct Quiesced {
    pub ours: HashMap<u32, OwnedFd>,
    pub foreign: HashMap<u32, OwnedFd>,
    /// Whether a walk found no new member before the budget ran out.
    pub stable: bool,
}

pub(crate) fn quiesce(root: u32, skip: &HashSet<u32>, deadline: Instant) -> Quiesced {
    let mut q = Quiesced::default();
    loop {
        let mut new = Vec::new();
        for (pid, parent) in descendants(root) {
            if skip.contains(&pid) || q.ours.contains_key(&pid) || q.foreign.contains_key(&pid) {
                continue;
            }
            let Some((fd, state)) = pin(pid, parent) else {
                continue;
            };
            match state {
                // A zombie holds nothing and takes no signal; its parent (or we) reap it.
                b'Z' | b'X' => {}
                b'T' | b't' => {
                    q.foreign.insert(pid, fd);
                }
                _ => {
                    if pidfd_send_signal(fd.as_fd(), Signal::STOP).is_ok() {
                        new.push(pid);
                        q.ours.insert(pid, fd);
                    }
                }
            }
        }
        // A stop takes effect asynchronously: until a member shows `T` it may still fork.
        while Instant::now() < deadline
            && new.iter().any(|pid| {
                procfs::stat(*pid).is_some_and(|s| !matches!(s.state, b'T' | b'Z' | b'X'))
            })
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        if new.is_empty() {
            q.stable = true;
            return q;
        }
        if Instant::now() >= deadline {
            return q;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk follows orphans only under a subreaper; here it at least finds a shell's
    /// children and grandchildren in a plain tree, and a quiesce stops and resumes them.
    #[test]
    fn a_tree_is_walked_quiesced_and_resumed() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sh -c 'sleep 30 & wait' & wait"])
            .spawn()
            .unwrap();
        let root = child.id();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut found = Vec::new();
        while found.len() < 3 && Instant::now() < deadline {
            found = descendants(root);
            std::thread::sleep(Duration::from_millis(10));
        }
        // sleep, the inner shell, and its sleep.
        assert_eq!(found.len(), 3, "{found:?}");
        let q = quiesce(
            root,
            &HashSet::new(),
            Instant::now() + Duration::from_secs(5),
        );
        assert!(q.stable);
        assert_eq!(q.ours.len(), 3);
        for pid in q.ours.keys() {
            assert_eq!(procfs::stat(*pid).map(|s| s.state), Some(b'T'));
        }
        // SIGKILL needs no SIGCONT, and reaches every member still in the tree (a shell whose
        // child stopped may have moved on, so only at least one is certain).
        assert!(signal_tree(root, TreeSignal::Kill, &HashSet::new()) >= 1);
        for fd in q.ours.values() {
            let _ = pidfd_send_signal(fd.as_fd(), Signal::KILL);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
