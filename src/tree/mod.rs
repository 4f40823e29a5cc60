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
//!   standard streams it was given (every other descriptor is closed in the child).
//! - No code path signals a bare number. While the leader is unreaped its zombie pins the group
//!   id, so the group is signalled by that id; once it is reaped, each remaining member is found
//!   in /proc, pinned with a pidfd, re-checked (same group, started no earlier than the leader)
//!   and signalled through the pidfd, so a reused pid or group number is never hit.
//! - The leader is reaped exactly once, under the same lock that signals check, so no signal
//!   follows the reaping of the process that pinned the group id.

mod group;
pub(crate) mod procfs;
mod spawn;

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use group::GroupTree;
pub use procfs::{Identity, boot_id};
pub use spawn::{SpawnError, SpawnSpec};

/// A signal the supervisor sends to a tree (a closed set: the supervisor needs no others).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TreeSignal {
    Interrupt,
    Terminate,
    Kill,
}

impl TreeSignal {
    pub fn name(self) -> &'static str {
        match self {
            TreeSignal::Interrupt => "SIGINT",
            TreeSignal::Terminate => "SIGTERM",
            TreeSignal::Kill => "SIGKILL",
        }
    }
}

/// Which mechanism owns a tree (recorded so that `ps` and the manifest can say it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// A process group led by the workload, signalled through a pidfd.
    Group,
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

    /// Resolves once no member is left. Only meaningful after the leader was reaped. Its scans
    /// run on the blocking pool.
    fn wait_empty(&self) -> TreeFuture<'_, ()>;
}

/// A launched workload: its tree and the supervisor's ends of its standard streams.
#[derive(Debug)]
pub struct Spawned {
    pub tree: Arc<dyn ProcessTree>,
    pub stdin: tokio::net::unix::pipe::Sender,
    pub stdout: tokio::net::unix::pipe::Receiver,
    pub stderr: tokio::net::unix::pipe::Receiver,
}

/// Launches workloads into trees. The supervisor holds one; tests wrap it to inject faults.
pub trait Launcher: Send + Sync + Debug {
    /// Must be called inside a tokio runtime (the pipes and the pidfd register with it).
    fn launch(&self, spec: &SpawnSpec) -> Result<Spawned, SpawnError>;
}

/// The default launcher: a new process group, its leader held through a pidfd.
#[derive(Debug, Default, Clone, Copy)]
pub struct GroupLauncher;

impl Launcher for GroupLauncher {
    fn launch(&self, spec: &SpawnSpec) -> Result<Spawned, SpawnError> {
        let (pid, stdin, stdout, stderr) = spawn::spawn(spec)?;
        let tree = GroupTree::adopt(pid).map_err(|cause| SpawnError::Adopt { cause })?;
        Ok(Spawned {
            tree: Arc::new(tree),
            stdin,
            stdout,
            stderr,
        })
    }
}
