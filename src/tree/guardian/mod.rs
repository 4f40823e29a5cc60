//! A guardian per launch: the supervisor's side of it ([`GuardianLauncher`], [`GuardianTree`])
//! and the guardian process itself (`run.rs`).
//!
//! A process group loses every descendant that calls `setsid`, and a supervisor that dies
//! leaves its trees unowned. The guardian closes both gaps: a small process (`procjournal-guardian`,
//! or the host's executable re-executed: `program.rs`) that is a child subreaper, so every orphan of the tree becomes its child; it
//! takes the tree down when its lifeline (the control socket) reaches end of stream; and it
//! writes an exit receipt only when the kernel reports it has no child left.
//!
//! Invariants:
//! - No workload runs before `register` returned: the guardian forks the workload gated,
//!   reports its identity (`REG`), and lets it exec only on `GO`, which the launcher sends after
//!   `register` (the supervisor's: its registration durable, its scope written) returned. A
//!   failed registration closes the socket: the guardian kills and reaps the gated workload
//!   and exits.
//! - Every wait on the guardian is bounded ([`crate::limits::GUARDIAN_HANDSHAKE_MS`] for the
//!   handshake); the guardian is reaped by its parent, the supervisor, through a pidfd. Between
//!   the handshake and its end the supervisor holds none: the guardian is its unreaped child,
//!   whose pid no other process can take, so the pid names it until the supervisor reaps it,
//!   and a pidfd is opened from it only to wait for its exit once its control socket ended or
//!   said `DONE`, and used only if the process it pins has the guardian's start time.
//! - Signals reach the tree only through the guardian, which pins each member with a pidfd; the
//!   supervisor signals no pid itself. With a cgroup, a guardian that died no longer stands
//!   between the supervisor and the tree: the cgroup is killed by its path.
//! - A receipt is trusted only after it verified against the registration: the file's device
//!   and inode, the handle and the workload's witness, and the nonce; or, for the receipt of a
//!   launch aborted before `GO`, the binding below instead of the nonce.
//!
//! Receipts without a nonce. A supervisor killed after `Scoped` was written but before `GO`
//! leaves a registration whose guardian never learned its nonce: the guardian sees end of
//! stream, kills and reaps the gated child, and writes a receipt with nonce zero and
//! `status none`. Its binding is what the guardian knew before `GO`, all of it recorded in
//! `Scoped` from `REG` and the spawn: the receipt file (device and inode: the guardian created
//! it `O_EXCL` for this launch), the handle, the workload's witness (pid, start ticks, pidfs
//! inode), the guardian's own pid and start ticks, and the boot. It verifies (where
//! [`Registration::gateless_guardian`] allows it: a restore's assessment) only if all of those
//! match and it says `status none` and `reaped 1`. Soundness: a guardian writes its receipt
//! once, at ECHILD; it writes nonce zero if and only if `await_go` ended without `GO` (a
//! supervisor's nonce is a UUIDv4, never zero), and then the gate never opened, so the one
//! child it reaped ran none of the workload's code and had no descendant: the tree is gone.
//! A guardian that did get `GO` writes that nonce, never zero, so for such a registration a
//! receipt without one was not written by its guardian: in the file the guardian created,
//! with the guardian's identity, it can only come from a process of the same user writing
//! over the guardian's file, which could as well copy the nonce from the journal (the nonce
//! protects against receipts of other registrations and stale files, not against the owner of
//! the root). The supervisor that sent `GO` itself never accepts one.

mod arena;
mod evidence;
pub mod failpoint;
mod launch;
mod packed;
mod program;
mod receipt;
mod run;
mod tree;
pub(crate) mod wire;
pub(crate) mod zygote;

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustix::process::{WaitId, WaitIdOptions};
use tokio::io::AsyncReadExt;

pub use arena::GuardianAllocator;
pub use evidence::{CgroupEvidence, cgroup_evidence};
pub use program::GuardianProgram;
pub use receipt::{Receipt, ReceiptError};

/// Every descendant of `root` now, as (pid, parent), by the walk the guardian signals with.
pub(crate) fn descendants_of(root: u32) -> Vec<(u32, u32)> {
    tree::descendants(root)
}
#[cfg(any(test, feature = "test-support"))]
pub use run::GUARDIAN_ARG;
#[cfg(any(test, feature = "test-support"))]
pub use zygote::{REQUEST_MAX, ZYGOTE_ARG, ZYGOTE_COMM, ZYGOTE_ONCE_ARG};

use super::cgroup::{CgroupBase, Scope};
use super::open_pidfd;
use super::procfs::{self, Identity};
use super::spawn;
use super::{
    ExitProof, Launcher, LeaderExit, Mechanism, Membership, ProcessTree, ProcessWitness,
    ReceiptBinding, Register, SpawnError, SpawnSpec, Spawned, TreeFuture, TreeSignal,
};
use crate::lifecycle::event::ExitStatus;
use crate::limits;
use launch::{PendingGuardian, spawn_forked, spawn_guardian};
use wire::{Down, Up};
use zygote::ZygoteSlot;

/// Runs the guardian (or the guardian zygote) and exits if this process was started as one;
/// returns otherwise. Call it first thing in `main`, before any thread or runtime exists.
pub fn run_if_requested() {
    let mut args = std::env::args_os();
    let _ = args.next();
    let first = args.next();
    let once = first.as_ref().is_some_and(|a| a == zygote::ZYGOTE_ONCE_ARG);
    if once || first.as_ref().is_some_and(|a| a == zygote::ZYGOTE_ARG) {
        run::abort_on_panic();
        std::process::exit(zygote::serve(once));
    }
    if first.is_some_and(|a| a == run::GUARDIAN_ARG) {
        run::end(run::run_from_args(args));
    }
}

/// Launches each workload under a guardian, in its own cgroup where one is available.
#[derive(Debug)]
pub struct GuardianLauncher {
    program: CString,
    /// The base every workload's cgroup goes under; `None` in it: guardians alone. Set when
    /// built, or by the first need of it ([`GuardianLauncher::with_cgroup_probe`]).
    cgroups: OnceLock<Option<CgroupBase>>,
    /// With [`GuardianLauncher::with_cgroup_probe`]: the base to probe when first needed.
    probe: Option<String>,
    /// Workloads enter their cgroup at clone time (`clone3`), not by a write before exec.
    clone3: bool,
    grace: Duration,
    /// With [`GuardianLauncher::with_zygote`]: the zygote that forks each guardian.
    zygote: Option<ZygoteSlot>,
    /// With [`GuardianLauncher::with_one_launch`]: each zygote becomes its one launch's guardian.
    one_launch: bool,
}

impl GuardianLauncher {
    pub fn new(program: GuardianProgram) -> Result<GuardianLauncher, SpawnError> {
        let path = match program {
            GuardianProgram::CurrentExe => PathBuf::from("/proc/self/exe"),
            GuardianProgram::Path(p) => p,
        };
        let program = CString::new(path.as_os_str().as_bytes()).map_err(|_| SpawnError::Nul {
            what: "the guardian's path",
        })?;
        Ok(GuardianLauncher {
            program,
            cgroups: OnceLock::from(None),
            probe: None,
            clone3: true,
            grace: Duration::from_millis(limits::ORPHANED_TREE_GRACE_MS),
            zygote: None,
            one_launch: false,
        })
    }

    /// Runs each workload in its own cgroup under `base` (see [`CgroupBase::probe`]).
    pub fn with_cgroups(mut self, base: Option<CgroupBase>) -> GuardianLauncher {
        self.cgroups = OnceLock::from(base);
        self.probe = None;
        self
    }

    /// Like [`GuardianLauncher::with_cgroups`] with what [`CgroupBase::probe`] of `name` gives,
    /// guardians alone if it fails, but probed at [`Launcher::prepare`] (or the first launch)
    /// rather than now: a caller that opens its root before it launches (`procjournal run`)
    /// has the probe's `mkdir`s and reads overlap the open instead of precede it. Why a probe
    /// failed is not kept: for callers that would not say it.
    pub fn with_cgroup_probe(mut self, name: &str) -> GuardianLauncher {
        self.cgroups = OnceLock::new();
        self.probe = Some(name.to_owned());
        self
    }

    /// The cgroup base, probed now if it is still to be.
    fn cgroups(&self) -> Option<&CgroupBase> {
        self.cgroups
            .get_or_init(|| {
                let name = self.probe.as_deref()?;
                CgroupBase::probe(name)
                    .inspect_err(|e| tracing::debug!(error = %e, "no per-launch cgroup"))
                    .ok()
            })
            .as_ref()
    }

    /// With `false`, a workload joins its cgroup by writing `cgroup.procs` before its gate
    /// instead of being created there by `clone3(CLONE_INTO_CGROUP)`: for where `clone3` is
    /// filtered (the guardian also falls back by itself on ENOSYS or EPERM). Slower: a first
    /// write to a fresh cgroup costs milliseconds here.
    pub fn with_clone3(mut self, clone3: bool) -> GuardianLauncher {
        self.clone3 = clone3;
        self
    }

    /// With `true`, guardians are forked by a zygote of the guardian's image, started once (at
    /// the first launch), instead of each exec'd: for a supervisor that launches many workloads,
    /// each launch is an exec shorter and its guardian shares the zygote's pages. Where the
    /// zygote cannot serve a launch, that guardian is exec'd as without it. The zygote is one
    /// more child of this process, ended and reaped when the launcher drops.
    pub fn with_zygote(mut self, zygote: bool) -> GuardianLauncher {
        self.zygote = zygote.then(|| ZygoteSlot::new(self.program.clone(), self.one_launch));
        self
    }

    /// Starts this launcher's zygote now rather than at its first launch (with
    /// [`GuardianLauncher::with_zygote`]; nothing otherwise): a caller about to open its root
    /// and launch once (`procjournal run`) has the zygote's exec overlap the open, and each
    /// launch is then a fork. Where it cannot be started, the launch tries again.
    pub fn start_zygote(&self) {
        if let Some(zygote) = &self.zygote {
            zygote.start_now();
        }
    }

    /// With `true`, the caller launches once (`procjournal run`, `capture`): its zygote serves
    /// that one launch by becoming its guardian rather than forking one, so no fork is paid and
    /// no zygote is left to end and reap. A later launch starts another.
    pub fn with_one_launch(mut self, once: bool) -> GuardianLauncher {
        self.one_launch = once;
        // Whichever of the two came first: the slot's zygotes are started to match.
        if self.zygote.is_some() {
            self.zygote = Some(ZygoteSlot::new(self.program.clone(), once));
        }
        self
    }

    /// The pid of the running zygote, if this launcher has one started.
    pub fn zygote_pid(&self) -> Option<u32> {
        self.zygote.as_ref().and_then(ZygoteSlot::pid)
    }

    pub fn mechanism(&self) -> Mechanism {
        if self.cgroups().is_some() {
            Mechanism::Cgroup
        } else {
            Mechanism::Guardian
        }
    }
}

impl GuardianLauncher {
    /// The base cgroup is ours (one per runtime root): it goes once no scope is left in it
    /// (`rmdir` of a cgroup with children fails, which leaves it for the next supervisor of the
    /// root to reuse, and a later launch makes it again: `scope_in`).
    fn remove_base(&self) {
        // Never probed for this: a base never probed was never made here.
        if let Some(Some(base)) = self.cgroups.get() {
            let _ = std::fs::remove_dir(base.dir());
        }
    }
}

impl Drop for GuardianLauncher {
    fn drop(&mut self) {
        self.remove_base();
    }
}

/// A fresh scope for `name` under `base`, making the base again if it is gone: a launcher of
/// the same root that ended (another supervisor that stopped, or failed to take the root's
/// lock) removes the base when it is empty, and so does the last guardian of a supervisor that
/// went before its trees did, which may remove it again between our `mkdir` and the scope's
/// (a few tries: each such guardian removes it once).
fn scope_in(base: &CgroupBase, name: &str) -> std::io::Result<Scope> {
    let mut tries = 0;
    loop {
        match base.create_scope(name) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 3 => {
                tries += 1;
                match std::fs::create_dir(base.dir()) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
            other => return other,
        }
    }
}

impl Launcher for GuardianLauncher {
    fn gates(&self) -> bool {
        true
    }

    fn prepare(&self) {
        self.start_zygote();
        let _ = self.cgroups();
    }

    /// A process that exits without dropping its supervisor (the CLI's `run` ends its runtime
    /// in the background) never runs the drop: its shutdown removes the base, and ends and
    /// reaps the zygote, instead (a zygote left running would exit at its end of stream, a
    /// zombie for whatever process inherits it).
    fn release(&self) {
        if let Some(zygote) = &self.zygote {
            zygote.end();
        }
        self.remove_base();
    }

    fn launch(&self, spec: &SpawnSpec, register: &mut Register<'_>) -> Result<Spawned, SpawnError> {
        let workload = spawn::image(spec)?;
        let scope = self.scope_for(spec)?;
        let receipt_path = spec.receipts.join(format!("{}.receipt", spec.name));
        let guardian = self.guardian_image(spec, workload, &receipt_path, scope.as_ref())?;
        let (ours, theirs) = UnixStream::pair().map_err(|cause| SpawnError::Setup {
            what: "control socket",
            cause,
        })?;
        let (gpid, streams) = match &self.zygote {
            Some(zygote) => {
                let forked = spawn_forked(zygote, &guardian, spec, theirs, scope.as_ref());
                if self.one_launch {
                    zygote.retire();
                }
                forked?
            }
            None => spawn_guardian(&guardian, spec, theirs, scope.as_ref())?,
        };
        let pidfd = open_pidfd(gpid).map_err(|cause| SpawnError::Adopt { cause })?;
        let mut pending = PendingGuardian::new(ours, pidfd, gpid, scope);
        let registered = match pending.read_registration() {
            Ok(registered) => registered,
            Err(e) => return Err(pending.abort(e)),
        };
        let boot_id = procfs::boot_id().unwrap_or([0; 16]);
        let nonce = *uuid::Uuid::new_v4().as_bytes();
        let binding = ReceiptBinding {
            path: receipt_path.to_string_lossy().into_owned(),
            dev: registered.receipt_dev,
            ino: registered.receipt_ino,
            nonce,
        };
        let tree_scope =
            pending.tree_scope(self.mechanism(), boot_id, &registered, binding.clone());
        if let Err(e) = register(&tree_scope) {
            return Err(pending.abort(SpawnError::Registration(e)));
        }
        if let Err(e) = pending
            .send_go(nonce)
            .and_then(|()| pending.await_run(&spec.program))
        {
            return Err(pending.abort(e));
        }
        let tree = pending.into_tree(
            self.mechanism(),
            &registered,
            boot_id,
            binding,
            spec.name.clone(),
        )?;
        Ok(Spawned {
            tree: std::sync::Arc::new(tree),
            streams,
        })
    }
}

/// Waits (bounded) for a child of ours (a guardian, the zygote) to exit and reaps it; kills it if
/// it does not. For launches undone before the tree was handed over, and the zygote's end: no
/// zombie is left behind.
fn reap_blocking(pidfd: &OwnedFd) {
    let bound = Duration::from_millis(limits::GUARDIAN_HANDSHAKE_MS);
    let mut fds = [nix::poll::PollFd::new(
        pidfd.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let ms = u16::try_from(bound.as_millis()).unwrap_or(u16::MAX);
    if !matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)), Ok(n) if n > 0) {
        let _ = rustix::process::pidfd_send_signal(pidfd.as_fd(), rustix::process::Signal::KILL);
    }
    let _ = rustix::process::waitid(WaitId::PidFd(pidfd.as_fd()), WaitIdOptions::EXITED);
}

/// What the guardian has reported since `RUN`.
#[derive(Debug, Clone, Default)]
struct Progress {
    exit: Option<LeaderExit>,
    /// `DONE`: the receipt is written and the tree is gone.
    done: Option<u64>,
    /// The control socket ended (after `DONE`, or because the guardian died).
    eof: bool,
}

struct GuardianParts {
    mechanism: Mechanism,
    identity: Identity,
    workload_ino: u64,
    guardian_pid: u32,
    guardian_start_ticks: u64,
    control: UnixStream,
    leftover: Vec<u8>,
    scope: Option<Scope>,
    receipt: ReceiptBinding,
    handle: String,
}

#[derive(Debug)]
struct ControlReader {
    stream: tokio::net::UnixStream,
    buf: Vec<u8>,
}

/// A tree owned by a guardian (and, with [`Mechanism::Cgroup`], by a cgroup).
#[derive(Debug)]
pub struct GuardianTree {
    mechanism: Mechanism,
    identity: Identity,
    workload_ino: u64,
    guardian_pid: u32,
    /// The guardian's start time (clock ticks after boot; 0 if it could not be read), checked
    /// against what a pidfd opened to reap it pins.
    guardian_start_ticks: u64,
    /// The guardian was reaped (by `wait_empty`).
    reaped: AtomicBool,
    /// The control socket's descriptor, for sends without blocking (the socket itself is owned
    /// by `reader`, which lives as long as this tree, so the number stays valid).
    sender: std::os::fd::RawFd,
    /// One reader of the control socket at a time; what it reads goes to `progress`.
    reader: tokio::sync::Mutex<ControlReader>,
    progress: tokio::sync::watch::Sender<Progress>,
    scope: Option<Scope>,
    receipt: ReceiptBinding,
    handle: String,
}

impl GuardianTree {
    fn new(parts: GuardianParts) -> std::io::Result<GuardianTree> {
        parts.control.set_nonblocking(true)?;
        let sender = parts.control.as_raw_fd();
        let stream = tokio::net::UnixStream::from_std(parts.control)?;
        Ok(GuardianTree {
            mechanism: parts.mechanism,
            identity: parts.identity,
            workload_ino: parts.workload_ino,
            guardian_pid: parts.guardian_pid,
            guardian_start_ticks: parts.guardian_start_ticks,
            reaped: AtomicBool::new(false),
            sender,
            reader: tokio::sync::Mutex::new(ControlReader {
                stream,
                buf: parts.leftover,
            }),
            progress: tokio::sync::watch::Sender::new(Progress::default()),
            scope: parts.scope,
            receipt: parts.receipt,
            handle: parts.handle,
        })
    }

    /// The guardian's pid (our child until `wait_empty` reaped it).
    pub fn guardian_pid(&self) -> u32 {
        self.guardian_pid
    }

    fn apply(&self, msg: Result<Up, wire::WireError>) {
        self.progress.send_modify(|p| match msg {
            Ok(Up::Exit(exit)) => p.exit = Some(exit),
            Ok(Up::Done { reaped }) => p.done = Some(reaped),
            Ok(other) => tracing::debug!(?other, "unexpected guardian message"),
            // A guardian that speaks garbage is treated as gone.
            Err(e) => {
                tracing::warn!(error = %e, "guardian control message");
                p.eof = true;
            }
        });
    }

    /// Reads control messages until `enough` holds of the progress (or the stream ends).
    async fn pump(&self, enough: impl Fn(&Progress) -> bool) {
        let mut reader = self.reader.lock().await;
        loop {
            {
                // One borrow at a time (a watch borrow is a read lock).
                let progress = self.progress.borrow();
                if enough(&progress) || progress.eof {
                    return;
                }
            }
            match wire::take_line(&mut reader.buf) {
                Ok(Some(line)) => {
                    self.apply(Up::decode(&line));
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    self.apply(Err(e));
                    continue;
                }
            }
            let mut chunk = [0u8; wire::LINE_MAX];
            match reader.stream.read(&mut chunk).await {
                Ok(0) | Err(_) => self.progress.send_modify(|p| p.eof = true),
                Ok(n) => reader.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Whether the guardian has exited, without reaping it: asked of the pid, which is our
    /// unreaped child's (only before `DONE` or the end of the control socket, so never while
    /// `reap_guardian` runs); a pid that is no child of ours any more was reaped.
    fn guardian_exited(&self) -> bool {
        let Ok(pid) = super::rustix_pid(self.guardian_pid) else {
            return true;
        };
        !matches!(
            rustix::process::waitid(
                WaitId::Pid(pid),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
            ),
            Ok(None)
        )
    }

    /// A pidfd of the guardian, opened from its pid now: `None` once it was reaped (by a
    /// concurrent `reap_guardian` between our look at `reaped` and the open: the pid may then
    /// name another process, which a different start time tells apart; one that is no child
    /// of ours the wait's ECHILD does), `Err` when no descriptor is left (the drop reaps the
    /// guardian if it exited by then).
    fn pin_guardian(&self) -> std::io::Result<Option<OwnedFd>> {
        let pidfd = match open_pidfd(self.guardian_pid) {
            Ok(pidfd) => pidfd,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
            Err(e) => return Err(e),
        };
        // Unreadable (gone since the open): the wait on the pidfd says what became of it.
        let start = procfs::stat(self.guardian_pid).map(|s| s.start_time_ticks);
        let other =
            self.guardian_start_ticks != 0 && start.is_some_and(|t| t != self.guardian_start_ticks);
        Ok((!other).then_some(pidfd))
    }

    /// Reaps the guardian once it exited (it exits right after `DONE`, or died): through a
    /// pidfd opened now from its pid (ours until reaped), held only for this wait.
    async fn reap_guardian(&self) {
        if self.reaped.load(Ordering::SeqCst) {
            return;
        }
        let pidfd = match self.pin_guardian() {
            Ok(Some(pidfd)) => pidfd,
            Ok(None) => {
                self.reaped.store(true, Ordering::SeqCst);
                return;
            }
            Err(_) => return,
        };
        let Ok(pidfd) = super::group::register(pidfd) else {
            return;
        };
        loop {
            match rustix::process::waitid(
                WaitId::PidFd(pidfd.get_ref().as_fd()),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            ) {
                Ok(Some(_)) | Err(_) => {
                    self.reaped.store(true, Ordering::SeqCst);
                    return;
                }
                Ok(None) => {}
            }
            match pidfd.readable().await {
                Ok(mut ready) => ready.clear_ready(),
                Err(_) => return,
            }
        }
    }

    /// The receipt, if the file the registration names holds one that verifies against it.
    /// This supervisor sent `GO`: only a receipt with its nonce verifies.
    fn verified_receipt(&self) -> Option<Receipt> {
        verify_receipt(&Registration {
            binding: &self.receipt,
            handle: &self.handle,
            workload: &ProcessWitness {
                pid: self.identity.pid,
                start_time_ticks: self.identity.start_time_ticks,
                pidfs_ino: self.workload_ino,
            },
            gateless_guardian: None,
            boot_id: self.identity.boot_id,
        })
        .ok()
    }
}

/// What a receipt is verified against: the registration's record, and whether its guardian
/// may have written it without a nonce.
#[derive(Debug, Clone, Copy)]
pub struct Registration<'a> {
    pub binding: &'a ReceiptBinding,
    pub handle: &'a str,
    pub workload: &'a ProcessWitness,
    /// The guardian as recorded (its pid and start time), when a receipt without a nonce may
    /// verify: only where nothing shows that the guardian got `GO` (a restore's assessment).
    /// `None` requires the nonce (the supervisor that sent `GO` verifies its own receipts).
    pub gateless_guardian: Option<&'a ProcessWitness>,
    /// The boot id the registration recorded.
    pub boot_id: [u8; 16],
}

/// Why a receipt did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    #[error("receipt {path}: {cause}")]
    Unreadable { path: String, cause: String },
    #[error("the receipt file was replaced (another device or inode than recorded)")]
    Replaced,
    #[error("{0}")]
    Undecodable(ReceiptError),
    #[error("the receipt names another handle")]
    OtherHandle,
    #[error("the receipt names another workload")]
    OtherWorkload,
    #[error("the receipt carries another registration's nonce")]
    OtherNonce,
    /// No nonce, but not what a guardian that never got `GO` writes for this registration.
    #[error("the receipt has no nonce and does not prove the gate never opened: {0}")]
    UnboundGateless(&'static str),
}

/// Reads and verifies the receipt a registration names: same file (device and inode), and a
/// receipt for this handle and workload, carrying the registration's nonce; or, where
/// `gateless_guardian` allows it, the receipt of an aborted launch (module docs: "Receipts
/// without a nonce").
pub fn verify_receipt(reg: &Registration<'_>) -> Result<Receipt, Rejection> {
    let path = &reg.binding.path;
    let unreadable = |e: std::io::Error| Rejection::Unreadable {
        path: path.clone(),
        cause: e.to_string(),
    };
    let mut file = open_receipt(Path::new(path)).map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if (meta.dev(), meta.ino()) != (reg.binding.dev, reg.binding.ino) {
        return Err(Rejection::Replaced);
    }
    // Room for the largest receipt at once: an empty Vec grows from a 32-byte read.
    let mut bytes = Vec::with_capacity(receipt::RECEIPT_BYTES_MAX + 1);
    Read::by_ref(&mut file)
        .take(receipt::RECEIPT_BYTES_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    let r = Receipt::decode(&bytes).map_err(Rejection::Undecodable)?;
    bind(&r, reg)?;
    Ok(r)
}

/// Opens a receipt for reading without following a symbolic link and without blocking:
/// whatever took the file's place (a FIFO would hold the open, and the thread reading it, for
/// ever) is then told apart by its device and inode.
fn open_receipt(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
}

/// Reads the receipt at `path` for a registration whose scope was never recorded and verifies it
/// as the receipt of its launch aborted before `GO`: this handle, no nonce, `status none`, the
/// one gated child reaped (journal-format.md, "Guardian receipts"). Nothing else was recorded
/// to bind it to, and nothing else is needed: a guardian writes no nonce only if it never
/// received `GO`, so its gate never opened (`GO` follows the writing of `Scoped`, so a launch cut
/// short before that never sent one; one whose written `Scoped` a power loss took may have, and
/// its receipt then carries the nonce and does not verify here).
pub fn verify_unscoped_receipt(path: &Path, handle: &str) -> Result<Receipt, Rejection> {
    let unreadable = |e: std::io::Error| Rejection::Unreadable {
        path: path.display().to_string(),
        cause: e.to_string(),
    };
    let mut file = open_receipt(path).map_err(unreadable)?;
    if !file.metadata().map_err(unreadable)?.is_file() {
        return Err(Rejection::Unreadable {
            path: path.display().to_string(),
            cause: "not a regular file".to_owned(),
        });
    }
    // Room for the largest receipt at once: an empty Vec grows from a 32-byte read.
    let mut bytes = Vec::with_capacity(receipt::RECEIPT_BYTES_MAX + 1);
    Read::by_ref(&mut file)
        .take(receipt::RECEIPT_BYTES_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    let r = Receipt::decode(&bytes).map_err(Rejection::Undecodable)?;
    bind_unscoped(&r, handle)?;
    Ok(r)
}

/// The checks of [`verify_unscoped_receipt`] once the bytes decoded. Pure.
pub fn bind_unscoped(r: &Receipt, handle: &str) -> Result<(), Rejection> {
    if r.handle != handle {
        return Err(Rejection::OtherHandle);
    }
    if r.nonce != [0; 16] {
        return Err(Rejection::OtherNonce);
    }
    if r.status.is_some() {
        return Err(Rejection::UnboundGateless(
            "it reports a workload status (the workload ran)",
        ));
    }
    if r.reaped != 1 {
        return Err(Rejection::UnboundGateless(
            "it reaped other than the one gated child",
        ));
    }
    Ok(())
}

/// Whether a decoded receipt belongs to the registration: its handle and workload, and its
/// nonce or the binding of a receipt without one. Pure: what [`verify_receipt`] checks once
/// the file's identity and bytes passed.
pub fn bind(r: &Receipt, reg: &Registration<'_>) -> Result<(), Rejection> {
    if r.handle != reg.handle {
        return Err(Rejection::OtherHandle);
    }
    let w = reg.workload;
    if r.workload_pid != w.pid
        || r.workload_start_ticks != w.start_time_ticks
        || r.workload_pidfs_ino != w.pidfs_ino
    {
        return Err(Rejection::OtherWorkload);
    }
    if r.nonce == reg.binding.nonce {
        return Ok(());
    }
    if r.nonce != [0; 16] {
        return Err(Rejection::OtherNonce);
    }
    let Some(g) = reg.gateless_guardian else {
        return Err(Rejection::UnboundGateless(
            "this registration's guardian was sent GO",
        ));
    };
    gateless_binding(r, g, reg.boot_id).map_err(Rejection::UnboundGateless)
}

/// The binding of a receipt without a nonce: what the aborted guardian knew before `GO` and
/// wrote, checked against what the registration recorded of it.
fn gateless_binding(
    r: &Receipt,
    g: &ProcessWitness,
    boot_id: [u8; 16],
) -> Result<(), &'static str> {
    if r.status.is_some() {
        return Err("it reports a workload status (the workload ran)");
    }
    if r.reaped != 1 {
        return Err("it reaped other than the one gated child");
    }
    if g.start_time_ticks == 0
        || r.guardian_pid != g.pid
        || r.guardian_start_ticks != g.start_time_ticks
    {
        return Err("it names another guardian than the one recorded");
    }
    if boot_id == [0; 16] || r.boot_id != boot_id {
        return Err("it names another boot than the registration");
    }
    Ok(())
}

fn exit_status(exit: Option<LeaderExit>) -> ExitStatus {
    match exit {
        Some(LeaderExit::Code(c)) => ExitStatus::Code(c),
        Some(LeaderExit::Signal(s)) => ExitStatus::Signal(s),
        None => ExitStatus::Unknown,
    }
}

/// Signals what a cgroup holds, without a guardian: freeze, signal each member through a
/// pidfd, thaw; or kill it whole. A cgroup that is gone holds nothing to signal: the guardian
/// removes its cgroup only once it is empty (the kernel refuses to remove a populated one), and
/// a removed cgroup cannot be entered again. (A guardian that has just done so, and exited,
/// before its `DONE` was read is what sends a signal here.)
fn signal_scope(scope: &Scope, signal: TreeSignal) -> std::io::Result<()> {
    let signalled = if signal == TreeSignal::Kill {
        scope.kill()
    } else {
        scope.freeze(tree::QUIESCE_BUDGET).and_then(|_| {
            for pid in scope.procs().unwrap_or_default() {
                tree::signal_pid(pid, signal);
            }
            scope.thaw()
        })
    };
    match signalled {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !scope.exists() => Ok(()),
        other => other,
    }
}

impl ProcessTree for GuardianTree {
    fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    fn identity(&self) -> Identity {
        self.identity
    }

    fn signal(&self, signal: TreeSignal) -> std::io::Result<()> {
        if self.progress.borrow().done.is_some() {
            return Ok(());
        }
        let line = Down::Signal(signal).encode();
        let sent = nix::sys::socket::send(
            self.sender,
            &line,
            nix::sys::socket::MsgFlags::MSG_NOSIGNAL | nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        );
        match sent {
            Ok(n) if n == line.len() => Ok(()),
            Ok(_) => Err(std::io::Error::other(
                "the guardian's control socket is full",
            )),
            // The guardian is gone: only a cgroup still reaches the tree.
            Err(e) => match &self.scope {
                Some(scope) => signal_scope(scope, signal),
                None => Err(std::io::Error::other(format!(
                    "the guardian is gone ({e}); its tree cannot be reached"
                ))),
            },
        }
    }

    fn wait_leader(&self) -> TreeFuture<'_, std::io::Result<LeaderExit>> {
        Box::pin(async move {
            self.pump(|p| p.exit.is_some()).await;
            self.progress.borrow().exit.ok_or_else(|| {
                std::io::Error::other("the guardian ended without reporting the workload's exit")
            })
        })
    }

    /// The guardian counts as a member while it runs without having reported `DONE`: it is
    /// the part of the tree still to report the tree gone (its receipt comes last, after the
    /// workload's `EXIT`), so a tree whose guardian is merely slow to write it (a loaded
    /// machine) is watched as lingering, never judged `unverified`.
    fn members(&self) -> std::io::Result<usize> {
        if self.progress.borrow().done.is_some() {
            return Ok(0);
        }
        let reaped = self.reaped.load(Ordering::SeqCst);
        let mut n = if reaped {
            0
        } else {
            tree::descendants(self.guardian_pid).len()
        };
        if n == 0
            && let Some(scope) = &self.scope
        {
            n = match scope.procs() {
                Ok(procs) => procs.len(),
                // The guardian removes its cgroup once it is empty.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
                Err(e) => return Err(e),
            };
        }
        let guardian_working = !reaped && !self.progress.borrow().eof && !self.guardian_exited();
        Ok(n + usize::from(guardian_working))
    }

    fn surely_empty(&self) -> bool {
        self.progress.borrow().done.is_some()
    }

    fn membership(&self) -> Membership {
        if self.progress.borrow().done.is_some() {
            return Membership::Empty;
        }
        if let Some(scope) = &self.scope {
            return Membership::Cgroup {
                scope: scope.path().to_owned(),
            };
        }
        if self.reaped.load(Ordering::SeqCst) {
            // Its pid is no longer ours: nothing names the tree any more.
            return Membership::Unknown;
        }
        Membership::Descendants {
            root: self.guardian_pid,
        }
    }

    fn wait_empty(&self) -> TreeFuture<'_, ()> {
        Box::pin(async move {
            self.pump(|p| p.done.is_some()).await;
            self.reap_guardian().await;
            if self.progress.borrow().done.is_some() {
                return;
            }
            // The guardian died without a receipt: only a cgroup can still say "empty".
            let Some(scope) = self.scope.clone() else {
                return;
            };
            let mut pause = super::group::EMPTY_POLL_MIN;
            loop {
                let s = scope.clone();
                let evidence = tokio::task::spawn_blocking(move || cgroup_evidence(s.path()));
                if let Ok(CgroupEvidence::Empty) = evidence.await {
                    return;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(super::group::EMPTY_POLL_MAX);
            }
        })
    }

    fn wait_proven(&self) -> TreeFuture<'_, ()> {
        Box::pin(async move {
            self.pump(|p| p.done.is_some()).await;
            if self.progress.borrow().done.is_none() {
                // The guardian died without `DONE`: only its cgroup can still say.
                self.wait_empty().await;
            }
        })
    }

    fn exit_proof(&self) -> Option<ExitProof> {
        let progress = self.progress.borrow().clone();
        if progress.done.is_some()
            && let Some(r) = self.verified_receipt()
        {
            return Some(ExitProof::Receipt {
                status: exit_status(r.status),
                reaped: r.reaped,
            });
        }
        // `DONE` (the guardian reached ECHILD; its receipt may still be lost, to a full disk)
        // or a guardian gone: an empty cgroup, or one removed (only an empty one can be),
        // proves the exit on its own.
        match &self.scope {
            Some(scope)
                if (progress.done.is_some() || progress.eof)
                    && matches!(cgroup_evidence(scope.path()), CgroupEvidence::Empty) =>
            {
                Some(ExitProof::CgroupEmpty)
            }
            _ => None,
        }
    }
}

impl Drop for GuardianTree {
    fn drop(&mut self) {
        // A guardian that already exited is reaped here rather than left a zombie; one that
        // still runs keeps its tree (its lifeline ends with this socket and it takes the tree
        // down), and is reaped by init if this supervisor exits first.
        if !self.reaped.load(Ordering::SeqCst)
            && let Ok(pid) = super::rustix_pid(self.guardian_pid)
        {
            // Our unreaped child's pid: it names the guardian and nothing else.
            let _ = rustix::process::waitid(
                WaitId::Pid(pid),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cgroup that is gone (its guardian removed it once it was empty) is signalled
    /// vacuously, whatever the signal: a stop racing the guardian's exit is no teardown
    /// failure.
    #[test]
    fn a_cgroup_that_is_gone_holds_nothing_to_signal() {
        let dir = tempfile::tempdir().unwrap();
        let scope = Scope::at(dir.path().join("removed"));
        for signal in [
            TreeSignal::Terminate,
            TreeSignal::Kill,
            TreeSignal::Interrupt,
        ] {
            assert!(signal_scope(&scope, signal).is_ok(), "{signal:?}");
        }
    }

    /// A receipt verifies only against its own registration: same file (device and inode),
    /// handle, nonce and workload witness.
    #[test]
    fn a_receipt_verifies_only_against_its_registration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.receipt");
        let workload = ProcessWitness {
            pid: 7,
            start_time_ticks: 8,
            pidfs_ino: 9,
        };
        let receipt = Receipt {
            handle: "h".into(),
            nonce: [5; 16],
            boot_id: [1; 16],
            guardian_pid: 6,
            guardian_start_ticks: 7,
            workload_pid: 7,
            workload_start_ticks: 8,
            workload_pidfs_ino: 9,
            status: Some(LeaderExit::Code(0)),
            reaped: 1,
        };
        std::fs::write(&path, receipt.encode()).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let binding = ReceiptBinding {
            path: path.display().to_string(),
            dev: meta.dev(),
            ino: meta.ino(),
            nonce: [5; 16],
        };
        let reg = |binding: &ReceiptBinding, handle: &str, workload: &ProcessWitness| {
            verify_receipt(&Registration {
                binding,
                handle,
                workload,
                gateless_guardian: None,
                boot_id: [1; 16],
            })
        };
        assert_eq!(reg(&binding, "h", &workload), Ok(receipt.clone()));
        assert!(reg(&binding, "other", &workload).is_err());
        let other_nonce = ReceiptBinding {
            nonce: [6; 16],
            ..binding.clone()
        };
        assert!(reg(&other_nonce, "h", &workload).is_err());
        let other_workload = ProcessWitness {
            pidfs_ino: 10,
            ..workload
        };
        assert!(reg(&binding, "h", &other_workload).is_err());
        // The same bytes in a replaced file (another inode) do not verify.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(dir.path().join("pad"), b"x").unwrap();
        std::fs::write(&path, receipt.encode()).unwrap();
        if std::fs::metadata(&path).unwrap().ino() != binding.ino {
            assert!(reg(&binding, "h", &workload).is_err());
        }
        // A torn receipt does not verify.
        let bytes = receipt.encode();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let torn = ReceiptBinding {
            ino: std::fs::metadata(&path).unwrap().ino(),
            ..binding
        };
        assert!(reg(&torn, "h", &workload).is_err());
    }

    /// A FIFO in a receipt's place is refused at once, not waited on for a writer, which would
    /// hold the thread reading it for ever. (Opened blocking, this test hangs.)
    #[test]
    fn a_fifo_in_a_receipts_place_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.receipt");
        nix::unistd::mkfifo(
            &path,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let workload = ProcessWitness {
            pid: 7,
            start_time_ticks: 8,
            pidfs_ino: 9,
        };
        let verify = |ino: u64| {
            verify_receipt(&Registration {
                binding: &ReceiptBinding {
                    path: path.display().to_string(),
                    dev: meta.dev(),
                    ino,
                    nonce: [5; 16],
                },
                handle: "h",
                workload: &workload,
                gateless_guardian: None,
                boot_id: [1; 16],
            })
        };
        assert_eq!(verify(meta.ino() + 1), Err(Rejection::Replaced));
        // Even the FIFO's own device and inode: nothing to read, so nothing verifies.
        let verified = verify(meta.ino());
        assert!(verified.is_err(), "{verified:?}");
        assert!(matches!(
            verify_unscoped_receipt(&path, "h"),
            Err(Rejection::Unreadable { .. })
        ));
    }

    /// The receipt of a launch aborted before `GO` (no nonce, `status none`, one child reaped)
    /// verifies where a restore allows it, and only with the recorded guardian, boot, handle,
    /// workload and file; never for the supervisor that sent `GO`, never with a status, and
    /// never with another guardian's identity.
    #[test]
    fn a_receipt_without_a_nonce_binds_by_what_the_guardian_knew_before_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.receipt");
        let workload = ProcessWitness {
            pid: 7,
            start_time_ticks: 8,
            pidfs_ino: 9,
        };
        let guardian = ProcessWitness {
            pid: 6,
            start_time_ticks: 5,
            pidfs_ino: 4,
        };
        let aborted = Receipt {
            handle: "h".into(),
            nonce: [0; 16],
            boot_id: [1; 16],
            guardian_pid: 6,
            guardian_start_ticks: 5,
            workload_pid: 7,
            workload_start_ticks: 8,
            workload_pidfs_ino: 9,
            status: None,
            reaped: 1,
        };
        let check = |r: &Receipt, gateless: Option<&ProcessWitness>, boot: [u8; 16]| {
            let _ = std::fs::remove_file(&path);
            std::fs::write(&path, r.encode()).unwrap();
            let meta = std::fs::metadata(&path).unwrap();
            let binding = ReceiptBinding {
                path: path.display().to_string(),
                dev: meta.dev(),
                ino: meta.ino(),
                nonce: [5; 16],
            };
            verify_receipt(&Registration {
                binding: &binding,
                handle: "h",
                workload: &workload,
                gateless_guardian: gateless,
                boot_id: boot,
            })
        };
        assert_eq!(
            check(&aborted, Some(&guardian), [1; 16]),
            Ok(aborted.clone())
        );
        // The supervisor that sent GO requires its nonce.
        assert!(matches!(
            check(&aborted, None, [1; 16]),
            Err(Rejection::UnboundGateless(_))
        ));
        // A status means the workload ran: a guardian that got GO wrote it, with a nonce.
        let ran = Receipt {
            status: Some(LeaderExit::Code(0)),
            ..aborted.clone()
        };
        assert!(check(&ran, Some(&guardian), [1; 16]).is_err());
        let many = Receipt {
            reaped: 2,
            ..aborted.clone()
        };
        assert!(check(&many, Some(&guardian), [1; 16]).is_err());
        let other_guardian = ProcessWitness {
            start_time_ticks: 6,
            ..guardian
        };
        assert!(check(&aborted, Some(&other_guardian), [1; 16]).is_err());
        let unknown_start = ProcessWitness {
            start_time_ticks: 0,
            ..guardian
        };
        let zero_start = Receipt {
            guardian_start_ticks: 0,
            ..aborted.clone()
        };
        assert!(check(&zero_start, Some(&unknown_start), [1; 16]).is_err());
        assert!(check(&aborted, Some(&guardian), [2; 16]).is_err());
        assert!(check(&aborted, Some(&guardian), [0; 16]).is_err());
        let other_handle = Receipt {
            handle: "g".into(),
            ..aborted.clone()
        };
        assert!(check(&other_handle, Some(&guardian), [1; 16]).is_err());
        // A foreign nonce is never taken for a missing one.
        let foreign = Receipt {
            nonce: [3; 16],
            ..aborted
        };
        assert_eq!(
            check(&foreign, Some(&guardian), [1; 16]),
            Err(Rejection::OtherNonce)
        );
    }

    #[test]
    fn a_receipt_of_an_unscoped_registration_proves_only_a_gate_that_never_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.receipt");
        let aborted = Receipt {
            handle: "h".into(),
            nonce: [0; 16],
            boot_id: [1; 16],
            guardian_pid: 6,
            guardian_start_ticks: 5,
            workload_pid: 7,
            workload_start_ticks: 8,
            workload_pidfs_ino: 9,
            status: None,
            reaped: 1,
        };
        let check = |r: &Receipt| {
            std::fs::write(&path, r.encode()).unwrap();
            verify_unscoped_receipt(&path, "h")
        };
        assert_eq!(check(&aborted), Ok(aborted.clone()));
        let cases = [
            Receipt {
                handle: "g".into(),
                ..aborted.clone()
            },
            Receipt {
                nonce: [3; 16],
                ..aborted.clone()
            },
            Receipt {
                status: Some(LeaderExit::Code(0)),
                ..aborted.clone()
            },
            Receipt {
                reaped: 2,
                ..aborted.clone()
            },
        ];
        for r in &cases {
            assert!(check(r).is_err(), "{r:?}");
        }
        // Torn (what a guardian still writing, or killed while writing, leaves) and absent.
        std::fs::write(&path, &aborted.encode()[..40]).unwrap();
        assert!(matches!(
            verify_unscoped_receipt(&path, "h"),
            Err(Rejection::Undecodable(_))
        ));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            verify_unscoped_receipt(&path, "h"),
            Err(Rejection::Unreadable { .. })
        ));
        // Never through a symlink, even to a receipt that would verify.
        let real = dir.path().join("real");
        std::fs::write(&real, aborted.encode()).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        assert!(verify_unscoped_receipt(&path, "h").is_err());
    }
}
