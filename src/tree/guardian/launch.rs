//! The supervisor's side of a guardian's launch: the guardian's image, the handshake over its
//! control socket (`REG`, `GO`, `RUN`), and the undoing of a launch that fails before its tree
//! is handed over.
//!
//! Invariants: every wait on the guardian here is bounded by
//! [`crate::limits::GUARDIAN_HANDSHAKE_MS`]; an aborted launch closes the control socket first
//! (so the guardian kills and reaps its gated workload), then reaps the guardian, then removes
//! the cgroup scope, and leaves no zombie behind.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::wire::{self, Down, Up};
use super::zygote::{Refused, Request, ZygoteSlot};
use super::{GuardianLauncher, GuardianParts, GuardianTree, reap_blocking, run, scope_in};
use crate::limits;
use crate::tree::cgroup::Scope;
use crate::tree::procfs::{self, Identity};
use crate::tree::spawn::{self, Image, Streams};
use crate::tree::{
    Mechanism, ProcessWitness, ReceiptBinding, SpawnError, SpawnSpec, TreeScope, pidfs_ino,
};

impl GuardianLauncher {
    /// A fresh cgroup scope for the launch, when the launcher has cgroups.
    pub(super) fn scope_for(&self, spec: &SpawnSpec) -> Result<Option<Scope>, SpawnError> {
        let Some(base) = self.cgroups() else {
            return Ok(None);
        };
        let scope = scope_in(base, &spec.name).map_err(|cause| SpawnError::Setup {
            what: "cgroup",
            cause,
        })?;
        Ok(Some(scope))
    }

    /// The guardian's image: this launcher's program, told by its arguments what to run
    /// (`workload`'s path and argv) and where, and given the workload's environment.
    pub(super) fn guardian_image(
        &self,
        spec: &SpawnSpec,
        workload: Image,
        receipt: &Path,
        scope: Option<&Scope>,
    ) -> Result<Image, SpawnError> {
        let args = run::Args {
            handle: spec.name.clone(),
            receipt: receipt.to_owned(),
            cgroup: scope.map(|s| s.path().to_owned()),
            clone3: self.clone3,
            grace: self.grace,
            program: workload.path.clone(),
            argv: workload.argv.clone(),
            envp: None,
        };
        let mut argv = vec![self.program.clone()];
        for a in args.encode() {
            argv.push(CString::new(a.as_bytes()).map_err(|_| SpawnError::Nul {
                what: "an argument",
            })?);
        }
        Ok(Image {
            path: self.program.clone(),
            argv,
            envp: workload.envp,
        })
    }
}

/// What the guardian's `REG` reports: its gated workload and the receipt file it created.
pub(super) struct Registered {
    pub workload: ProcessWitness,
    pub receipt_dev: u64,
    pub receipt_ino: u64,
}

/// A guardian spawned and not yet handed over as a tree: a launch that fails from here on
/// goes through [`PendingGuardian::abort`].
pub(super) struct PendingGuardian {
    ctl: Handshake,
    /// Our unreaped child: its pid cannot be reused, so this pidfd names it.
    pidfd: OwnedFd,
    pid: u32,
    /// The guardian's start time (clock ticks after boot; 0 if unreadable), read once at the
    /// spawn: the scope records it and the tree checks a reaping pidfd against it.
    start_ticks: u64,
    scope: Option<Scope>,
}

impl PendingGuardian {
    pub(super) fn new(control: UnixStream, pidfd: OwnedFd, pid: u32, scope: Option<Scope>) -> Self {
        let ctl = Handshake {
            stream: control,
            buf: Vec::new(),
            deadline: Instant::now() + Duration::from_millis(limits::GUARDIAN_HANDSHAKE_MS),
        };
        PendingGuardian {
            ctl,
            pidfd,
            pid,
            start_ticks: procfs::stat(pid).map_or(0, |s| s.start_time_ticks),
            scope,
        }
    }

    /// Undoes the launch and returns `error`.
    pub(super) fn abort(self, error: SpawnError) -> SpawnError {
        drop(self.ctl);
        reap_blocking(&self.pidfd);
        if let Some(scope) = &self.scope {
            let _ = scope.remove();
        }
        error
    }

    pub(super) fn read_registration(&mut self) -> Result<Registered, SpawnError> {
        match self.ctl.read() {
            Ok(Up::Reg {
                pid,
                start_time_ticks,
                pidfs_ino,
                receipt_dev,
                receipt_ino,
            }) => Ok(Registered {
                workload: ProcessWitness {
                    pid,
                    start_time_ticks,
                    pidfs_ino,
                },
                receipt_dev,
                receipt_ino,
            }),
            Ok(Up::Failed(reason)) => Err(SpawnError::Guardian(reason)),
            Ok(other) => Err(SpawnError::Guardian(format!("expected REG, got {other:?}"))),
            Err(e) => Err(SpawnError::Guardian(e)),
        }
    }

    /// The scope to record before `GO`: everything a receipt without a nonce is bound by.
    pub(super) fn tree_scope(
        &self,
        mechanism: Mechanism,
        boot_id: [u8; 16],
        registered: &Registered,
        receipt: ReceiptBinding,
    ) -> TreeScope {
        TreeScope {
            mechanism,
            boot_id,
            workload: registered.workload,
            guardian: Some(ProcessWitness {
                pid: self.pid,
                start_time_ticks: self.start_ticks,
                pidfs_ino: pidfs_ino(&self.pidfd),
            }),
            cgroup: self.scope.as_ref().map(|s| s.path().to_owned()),
            receipt: Some(receipt),
        }
    }

    pub(super) fn send_go(&mut self, nonce: [u8; 16]) -> Result<(), SpawnError> {
        self.ctl
            .send(&Down::Go { nonce })
            .map_err(SpawnError::Guardian)
    }

    /// Waits for `RUN`: the workload's exec succeeded. `program` names it in errors.
    pub(super) fn await_run(&mut self, program: &str) -> Result<(), SpawnError> {
        match self.ctl.read() {
            Ok(Up::Run) => Ok(()),
            Ok(Up::ExecFailed { errno }) => Err(exec_failure(program, errno)),
            Ok(other) => Err(SpawnError::Guardian(format!("expected RUN, got {other:?}"))),
            Err(e) => Err(SpawnError::Guardian(e)),
        }
    }

    /// The tree the guardian now owns, holding its control socket and scope. The pidfd of the
    /// handshake is closed here: from now on the guardian is named by its pid, our unreaped
    /// child's, and a pidfd is opened again only to reap it (`GuardianTree::reap_guardian`).
    pub(super) fn into_tree(
        self,
        mechanism: Mechanism,
        registered: &Registered,
        boot_id: [u8; 16],
        receipt: ReceiptBinding,
        handle: String,
    ) -> Result<GuardianTree, SpawnError> {
        GuardianTree::new(GuardianParts {
            mechanism,
            identity: Identity {
                pid: registered.workload.pid,
                start_time_ticks: registered.workload.start_time_ticks,
                boot_id,
            },
            workload_ino: registered.workload.pidfs_ino,
            guardian_pid: self.pid,
            guardian_start_ticks: self.start_ticks,
            control: self.ctl.stream,
            leftover: self.ctl.buf,
            scope: self.scope,
            receipt,
            handle,
        })
        .map_err(|cause| SpawnError::Adopt { cause })
    }
}

/// Spawns the guardian with `control` as its descriptor 3 (ours is then its only other end);
/// a failed spawn removes the scope.
pub(super) fn spawn_guardian(
    guardian: &Image,
    spec: &SpawnSpec,
    control: UnixStream,
    scope: Option<&Scope>,
) -> Result<(u32, Streams), SpawnError> {
    // With a terminal, the guardian holds the slave as 0-2 only until its workload runs
    // (then it points them at /dev/null); its workload starts the session and claims the
    // terminal as its controlling terminal (`run.rs`).
    let terminal = spec.pty.map(|size| spawn::TerminalSetup {
        size,
        session: false,
    });
    let spawned = spawn::spawn_image(
        guardian,
        &spec.cwd,
        Some(control.as_fd()),
        "guardian",
        terminal,
    );
    drop(control);
    if spawned.is_err()
        && let Some(scope) = scope
    {
        let _ = scope.remove();
    }
    spawned
}

/// Like [`spawn_guardian`], but the guardian is forked by the launcher's zygote; where the
/// zygote cannot serve, the guardian is exec'd after all.
pub(super) fn spawn_forked(
    zygote: &ZygoteSlot,
    guardian: &Image,
    spec: &SpawnSpec,
    control: UnixStream,
    scope: Option<&Scope>,
) -> Result<(u32, Streams), SpawnError> {
    let request = Request {
        args: guardian
            .argv
            .iter()
            .skip(2)
            .map(|a| a.as_bytes().to_vec())
            .collect(),
        envp: guardian
            .envp
            .iter()
            .map(|e| e.as_bytes().to_vec())
            .collect(),
        cwd: spec.cwd.as_os_str().as_bytes().to_vec(),
    };
    let terminal = spec.pty.map(|size| spawn::TerminalSetup {
        size,
        session: false,
    });
    let mut start = |stdio: spawn::StdioActions<'_>| {
        let spawn::StdioActions::Dup(fds) = stdio else {
            return spawn::spawn_with(
                guardian,
                &spec.cwd,
                Some(control.as_fd()),
                "guardian",
                stdio,
            );
        };
        match zygote.fork(&request, control.as_fd(), fds) {
            Ok(pid) => Ok(pid),
            Err(Refused::Unavailable | Refused::Gone) => spawn::spawn_with(
                guardian,
                &spec.cwd,
                Some(control.as_fd()),
                "guardian",
                stdio,
            ),
            // The slot adopts or execs instead; kept for completeness.
            Err(Refused::Lost(why)) => Err(SpawnError::Guardian(why)),
            Err(Refused::Fork(cause)) => Err(SpawnError::Spawn {
                program: "guardian".to_owned(),
                cause,
            }),
        }
    };
    let spawned = spawn::start_with_streams(terminal, &mut start);
    drop(control);
    if spawned.is_err()
        && let Some(scope) = scope
    {
        let _ = scope.remove();
    }
    spawned
}

fn exec_failure(program: &str, errno: i32) -> SpawnError {
    let program = program.to_owned();
    match errno {
        libc::ENOENT => SpawnError::NotFound(program),
        libc::EACCES | libc::ENOEXEC => SpawnError::NotExecutable(program),
        _ => SpawnError::Spawn {
            program,
            cause: std::io::Error::from_raw_os_error(errno),
        },
    }
}

/// The handshake side of the control socket, blocking with a bound.
struct Handshake {
    stream: UnixStream,
    buf: Vec<u8>,
    deadline: Instant,
}

impl Handshake {
    fn read(&mut self) -> Result<Up, String> {
        loop {
            match wire::take_line(&mut self.buf) {
                Ok(Some(line)) => return Up::decode(&line).map_err(|e| e.to_string()),
                Ok(None) => {}
                Err(e) => return Err(e.to_string()),
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "no answer within {} ms (GUARDIAN_HANDSHAKE_MS)",
                    limits::GUARDIAN_HANDSHAKE_MS
                ));
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| e.to_string())?;
            let mut chunk = [0u8; wire::LINE_MAX];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("the guardian closed its control socket".to_owned()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    fn send(&mut self, msg: &Down) -> Result<(), String> {
        self.stream
            .write_all(&msg.encode())
            .map_err(|e| e.to_string())
    }
}
