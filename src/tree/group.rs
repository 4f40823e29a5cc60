//! A process group led by the workload, its leader held through a pidfd.
//!
//! The group reaches every descendant that stays in it; one that calls `setsid` or `setpgid`
//! escapes it (the guardian and cgroup mechanisms close that gap behind the same trait).
//!
//! Invariants:
//! - The leader is reaped (through `waitid(P_PIDFD)`) under `exit`'s lock, and signals check the
//!   same lock: while the leader is unreaped its zombie pins the group id, so `killpg` of that id
//!   can only reach our group.
//! - After the leader is reaped, members are signalled one by one through pidfds, each re-checked
//!   after it was pinned: same group, started no earlier than the leader. The one residual
//!   ambiguity (the whole group exited and its number was reused by a new group between two
//!   scans) needs the pid counter to wrap around in between.

use crate::sync::Lock;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::process::{
    WaitId, WaitIdOptions, kill_process_group, pidfd_send_signal, test_kill_process_group,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::procfs::{self, Identity};
use super::{LeaderExit, Mechanism, ProcessTree, TreeFuture, TreeSignal, open_pidfd, rustix_pid};

/// Emptiness is polled from this interval, doubling up to [`EMPTY_POLL_MAX`]: a lingering tree
/// is rare, and a /proc scan (or a read of a cgroup's `cgroup.events`) costs up to a
/// millisecond. Shared by every mechanism that has to poll for it.
pub(super) const EMPTY_POLL_MIN: Duration = Duration::from_millis(5);
pub(super) const EMPTY_POLL_MAX: Duration = Duration::from_millis(200);

#[derive(Debug)]
pub struct GroupTree {
    identity: Identity,
    pidfd: AsyncFd<OwnedFd>,
    /// The leader's exit, once reaped.
    exit: Lock<Option<LeaderExit>>,
}

fn esrch_is_ok(r: rustix::io::Result<()>) -> std::io::Result<()> {
    match r {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Registers the pidfd with the runtime's reactor (tokio 1.54 made this call `unsafe`).
pub(super) fn register(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    register_with(fd, Interest::READABLE)
}

/// Registers an owned descriptor (a pidfd, a terminal's master) with the runtime's reactor
/// for `interest`.
#[allow(unsafe_code)]
pub(super) fn register_with(fd: OwnedFd, interest: Interest) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: tokio requires the descriptor to stay open and name the same file description
    // until the `AsyncFd` is dropped. It is an `OwnedFd` moved into the `AsyncFd`, so nothing
    // else can close or replace it, and `as_raw_fd` always returns the same number.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(|e| e.into())
}

impl GroupTree {
    /// Holds `pid`, a child of this process that nobody has waited for yet: until it is reaped
    /// its pid cannot be reused, so the pidfd opened here names exactly that child.
    pub fn adopt(pid: u32) -> std::io::Result<GroupTree> {
        let fd = open_pidfd(pid)?;
        Ok(GroupTree {
            identity: procfs::identity(pid),
            pidfd: register(fd)?,
            exit: Lock::new(None),
        })
    }

    /// The leader's pidfs inode, 0 without pidfs.
    pub(crate) fn pidfs_ino(&self) -> u64 {
        super::pidfs_ino(self.pidfd.get_ref())
    }

    /// Kills the group and reaps the leader, blocking: for a launch that must be undone on a
    /// blocking thread (its registration failed), so no zombie is left behind.
    pub(crate) fn kill_and_reap(&self) {
        let _ = self.signal(TreeSignal::Kill);
        let mut exit = self.exit.lock();
        if exit.is_none()
            && let Ok(Some(status)) = rustix::process::waitid(
                WaitId::PidFd(self.pidfd.get_ref().as_fd()),
                WaitIdOptions::EXITED,
            )
        {
            *exit = Some(match status.terminating_signal() {
                Some(sig) => LeaderExit::Signal(sig),
                None => LeaderExit::Code(status.exit_status().unwrap_or(0)),
            });
        }
    }

    fn pgid(&self) -> u32 {
        self.identity.pid
    }

    fn signal_members(&self, signal: TreeSignal) -> std::io::Result<()> {
        let mut first_error = None;
        for pid in members_of(self.pgid(), self.identity.start_time_ticks)? {
            let Ok(fd) = open_pidfd(pid) else {
                continue; // gone since the scan
            };
            match procfs::stat(pid) {
                Some(s)
                    if s.pgrp == i64::from(self.pgid())
                        && s.start_time_ticks >= self.identity.start_time_ticks => {}
                _ => continue,
            }
            if let Err(e) = esrch_is_ok(pidfd_send_signal(fd.as_fd(), signal.rustix())) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Reaps the leader if it has exited; `None` while it runs.
    fn try_reap(&self) -> std::io::Result<Option<LeaderExit>> {
        let mut exit = self.exit.lock();
        if let Some(e) = *exit {
            return Ok(Some(e));
        }
        let status = rustix::process::waitid(
            WaitId::PidFd(self.pidfd.get_ref().as_fd()),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
        )?;
        let Some(status) = status else {
            return Ok(None);
        };
        let reaped = match (status.exit_status(), status.terminating_signal()) {
            (Some(code), _) if status.exited() => LeaderExit::Code(code),
            (_, Some(sig)) => LeaderExit::Signal(sig),
            (Some(code), None) => LeaderExit::Code(code),
            (None, None) => return Ok(None),
        };
        *exit = Some(reaped);
        Ok(Some(reaped))
    }
}

/// Members of group `pgid` found in /proc that are ours by the rule in the module doc: started
/// no earlier than `since`, the leader's start time.
fn members_of(pgid: u32, since: u64) -> std::io::Result<Vec<u32>> {
    Ok(procfs::group_members(pgid)?
        .into_iter()
        .filter(|(_, s)| s.start_time_ticks >= since)
        .map(|(pid, _)| pid)
        .collect())
}

/// How many members are left. Once the leader is reaped, a cheap probe comes first.
fn count_members(pgid: u32, since: u64, reaped: bool) -> std::io::Result<usize> {
    if reaped && group_gone(pgid) {
        return Ok(0);
    }
    Ok(members_of(pgid, since)?.len())
}

/// No process has the group id: `killpg(pgid, 0)` says ESRCH. Only a probe (signal 0 delivers
/// nothing), so it may name the number after the leader was reaped.
fn group_gone(pgid: u32) -> bool {
    rustix_pid(pgid)
        .is_ok_and(|group| test_kill_process_group(group) == Err(rustix::io::Errno::SRCH))
}

impl ProcessTree for GroupTree {
    fn mechanism(&self) -> Mechanism {
        Mechanism::Group
    }

    fn identity(&self) -> Identity {
        self.identity
    }

    fn signal(&self, signal: TreeSignal) -> std::io::Result<()> {
        let exit = self.exit.lock();
        if exit.is_none() {
            return esrch_is_ok(kill_process_group(
                rustix_pid(self.pgid())?,
                signal.rustix(),
            ));
        }
        drop(exit);
        self.signal_members(signal)
    }

    fn wait_leader(&self) -> TreeFuture<'_, std::io::Result<LeaderExit>> {
        Box::pin(async move {
            loop {
                if let Some(exit) = self.try_reap()? {
                    return Ok(exit);
                }
                let mut ready = self.pidfd.readable().await?;
                if let Some(exit) = self.try_reap()? {
                    return Ok(exit);
                }
                ready.clear_ready();
            }
        })
    }

    fn surely_empty(&self) -> bool {
        self.exit.lock().is_some() && group_gone(self.pgid())
    }

    fn membership(&self) -> super::Membership {
        super::Membership::Group {
            pgid: self.pgid(),
            since: self.identity.start_time_ticks,
        }
    }

    fn members(&self) -> std::io::Result<usize> {
        let reaped = self.exit.lock().is_some();
        count_members(self.pgid(), self.identity.start_time_ticks, reaped)
    }

    fn wait_empty(&self) -> TreeFuture<'_, ()> {
        Box::pin(async move {
            let mut pause = EMPTY_POLL_MIN;
            let (pgid, since) = (self.pgid(), self.identity.start_time_ticks);
            loop {
                let reaped = self.exit.lock().is_some();
                // A /proc scan is a directory scan: on the blocking pool, never a runtime thread.
                let counted =
                    tokio::task::spawn_blocking(move || count_members(pgid, since, reaped)).await;
                match counted {
                    Ok(Ok(0)) => return,
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "scanning the group failed; retrying")
                    }
                    Err(e) => tracing::debug!(error = %e, "the scan task failed; retrying"),
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(EMPTY_POLL_MAX);
            }
        })
    }
}
