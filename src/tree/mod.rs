//! The OS boundary of process trees: launch a workload into a tree the supervisor owns, signal the
//! whole tree, wait for its leader, wait until no member remains, and describe its identity.
//!
//! The supervisor sees only [`ProcessTree`] and [`Launcher`]; everything Linux-specific (pidfd,
//! /proc, `posix_spawn`) stays below them, so a guardian or a cgroup can own a tree behind the
//! same trait.
//!
//! Invariants:
//! - A launched workload starts clean: every catchable signal at its default disposition, an
//!   empty signal mask, its own process group, and no descriptor of the supervisor but the three
//!   standard streams it was given (every other descriptor is closed in the child). A PTY
//!   launch's three are one terminal's slave, its controlling terminal in a session it leads
//!   (`pty.rs`); the supervisor keeps only the master.
//! - No code path signals a bare number. While the leader is unreaped its zombie pins the group
//!   id, so the group is signalled by that id; once it is reaped, each remaining member is found
//!   in /proc, pinned with a pidfd, re-checked (same group, started no earlier than the leader)
//!   and signalled through the pidfd, so a reused pid or group number is never hit.
//! - The leader is reaped exactly once, under the same lock that signals check, so no signal
//!   follows the reaping of the process that pinned the group id.
#![expect(
    clippy::disallowed_methods,
    reason = "the process-tree boundary: it starts, signals and reaps the processes it owns"
)]

pub mod assess;
pub mod cgroup;
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;
mod group;
pub mod guardian;
pub mod login_shell;
pub(crate) mod procfs;
pub mod pty;
pub mod sample;
mod spawn;

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use crate::lifecycle::event::{
    ExitProof, ProcessWitness, ReceiptBinding, TreeMechanism as Mechanism,
};
pub use group::GroupTree;
pub use guardian::{GuardianLauncher, GuardianProgram, GuardianTree};
pub use procfs::Identity;
#[cfg(any(test, feature = "test-support"))]
pub use procfs::boot_id;
pub use pty::{PtyMaster, PtySize};
pub use sample::{Membership, TreeSample, sample_memberships, sample_trees};
pub use spawn::{SpawnError, SpawnSpec, Streams};

/// A signal the supervisor sends to a tree (a closed set: the supervisor needs no others).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TreeSignal {
    Interrupt,
    Terminate,
    Kill,
}

impl TreeSignal {
    pub(crate) fn rustix(self) -> rustix::process::Signal {
        match self {
            TreeSignal::Interrupt => rustix::process::Signal::INT,
            TreeSignal::Terminate => rustix::process::Signal::TERM,
            TreeSignal::Kill => rustix::process::Signal::KILL,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TreeSignal::Interrupt => "SIGINT",
            TreeSignal::Terminate => "SIGTERM",
            TreeSignal::Kill => "SIGKILL",
        }
    }
}

/// `pid` as rustix names it; 0 and pids above `i32::MAX` name no process.
pub(crate) fn rustix_pid(pid: u32) -> std::io::Result<rustix::process::Pid> {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| std::io::Error::other(format!("pid {pid} out of range")))
}

/// A pidfd for whatever process has `pid` now: callers pin first, then check identity (or own
/// the pid as an unreaped child, which no other process can take).
pub(crate) fn open_pidfd(pid: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    Ok(rustix::process::pidfd_open(
        rustix_pid(pid)?,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// The pidfs magic number (`PID_FS_MAGIC`): only on pidfs (Linux 6.9+) is a pidfd's inode
/// number unique to its process.
const PIDFS_MAGIC: i64 = 0x5049_4446;

/// The pidfs inode of a pidfd, 0 where the kernel has no pidfs. Here, beside `open_pidfd`,
/// because the guardian (its walk, its registration) and the group's leader both use it.
// `f_type`'s width differs between targets: the cast is not a no-op everywhere.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn pidfs_ino(fd: &std::os::fd::OwnedFd) -> u64 {
    let on_pidfs =
        nix::sys::statfs::fstatfs(fd).is_ok_and(|s| s.filesystem_type().0 as i64 == PIDFS_MAGIC);
    if !on_pidfs {
        return 0;
    }
    nix::sys::stat::fstat(fd).map_or(0, |s| s.st_ino)
}

/// How the leader ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderExit {
    Code(i32),
    Signal(i32),
}

/// A boxed future, so that [`ProcessTree`] stays object safe.
pub type TreeFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One workload and everything it started, as far as the mechanism can see.
pub trait ProcessTree: Send + Sync + Debug {
    fn mechanism(&self) -> Mechanism;

    /// Who the leader is: pid, start time and boot.
    fn identity(&self) -> Identity;

    /// Sends `signal` to every member still present. Members that vanished meanwhile are not an
    /// error; an empty tree is `Ok`. May scan /proc (once the leader is reaped): call it from
    /// the blocking pool where that matters.
    fn signal(&self, signal: TreeSignal) -> std::io::Result<()>;

    /// Resolves once the leader has exited, reaping it.
    fn wait_leader(&self) -> TreeFuture<'_, std::io::Result<LeaderExit>>;

    /// How many members are present now (the leader included until it is reaped). Scans /proc:
    /// call it from the blocking pool.
    fn members(&self) -> std::io::Result<usize>;

    /// True when the tree is certainly empty, found without scanning (for the group: its leader
    /// is reaped and no process has the group id at all). False means "look closer".
    fn surely_empty(&self) -> bool;

    /// Resolves once no member is left, or once the mechanism can no longer tell (a guardian
    /// that died): [`ProcessTree::exit_proof`] then says which. Only meaningful after the
    /// leader was reaped. Its scans run on the blocking pool.
    fn wait_empty(&self) -> TreeFuture<'_, ()>;

    /// Resolves once [`ProcessTree::exit_proof`] has its answer: by default once the tree is
    /// empty. A mechanism whose own process reports the tree gone (a guardian's `DONE`) answers
    /// without waiting for that process's exit: it is reaped after the result is out, not
    /// between the workload's end and its record.
    fn wait_proven(&self) -> TreeFuture<'_, ()> {
        self.wait_empty()
    }

    /// How the tree's members are found now, for memory samples (`sample_trees`). The
    /// default cannot list them: a sample of such a tree is incomplete.
    fn membership(&self) -> Membership {
        Membership::Unknown
    }

    /// What proves the whole tree gone, if anything does yet: a verified receipt, an empty
    /// cgroup. `None` for a tree that may still have members, and for the process group,
    /// whose emptiness a process that left the group could belie. May read a file: call it
    /// from the blocking pool.
    fn exit_proof(&self) -> Option<ExitProof> {
        None
    }
}

/// What a launcher reports for the supervisor to persist before the workload may run (with a
/// guardian) or right after its spawn (without one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeScope {
    pub mechanism: Mechanism,
    pub boot_id: [u8; 16],
    pub workload: ProcessWitness,
    pub guardian: Option<ProcessWitness>,
    pub cgroup: Option<std::path::PathBuf>,
    pub receipt: Option<ReceiptBinding>,
}

/// Persists a scope; an error aborts the launch before the workload runs.
pub type Register<'a> = dyn FnMut(&TreeScope) -> Result<(), String> + 'a;

/// A launched workload: its tree and the supervisor's side of its standard streams.
#[derive(Debug)]
pub struct Spawned {
    pub tree: Arc<dyn ProcessTree>,
    pub streams: Streams,
}

/// Launches workloads into trees. The supervisor holds one; tests wrap it to inject faults.
pub trait Launcher: Send + Sync + Debug {
    /// Launches `spec`, calling `register` with the tree's scope once, before the workload
    /// may exec where the mechanism can gate it. Must be called on a blocking thread inside a
    /// tokio runtime (the pipes and the pidfd register with it; a handshake may wait).
    fn launch(&self, spec: &SpawnSpec, register: &mut Register<'_>) -> Result<Spawned, SpawnError>;

    /// Whether the workload waits for `register` before it may exec (a guardian gates it; a
    /// plain spawn cannot).
    fn gates(&self) -> bool {
        false
    }

    /// Starts now what the first launch would otherwise start (a guardian launcher's zygote,
    /// and the probe of its cgroup base when deferred), for a caller that launches as soon as
    /// its root is open: run beside the open, its
    /// start-up is off the path to the launch. May block (a spawn); a failure is only traced
    /// (the launch tries again). Nothing by default.
    fn prepare(&self) {}

    /// Gives back what the launcher holds beyond its trees (a guardian launcher's zygote, ended
    /// and reaped, and its base cgroup, when it is empty), once its supervisor has shut down.
    /// Best effort; nothing by default.
    fn release(&self) {}
}

/// The default launcher: a new process group, its leader held through a pidfd.
#[derive(Debug, Default, Clone, Copy)]
pub struct GroupLauncher;

impl Launcher for GroupLauncher {
    fn launch(&self, spec: &SpawnSpec, register: &mut Register<'_>) -> Result<Spawned, SpawnError> {
        let (pid, streams) = spawn::spawn(spec)?;
        let tree = GroupTree::adopt(pid).map_err(|cause| SpawnError::Adopt { cause })?;
        let identity = tree.identity();
        let scope = TreeScope {
            mechanism: Mechanism::Group,
            boot_id: identity.boot_id,
            workload: ProcessWitness {
                pid,
                start_time_ticks: identity.start_time_ticks,
                pidfs_ino: tree.pidfs_ino(),
            },
            guardian: None,
            cgroup: None,
            receipt: None,
        };
        if let Err(e) = register(&scope) {
            // The workload runs already (a group cannot gate it): it must not run unrecorded.
            tree.kill_and_reap();
            return Err(SpawnError::Registration(e));
        }
        Ok(Spawned {
            tree: Arc::new(tree),
            streams,
        })
    }
}
