//! The guardian process: one per managed launch, the same executable re-executed with
//! [`GUARDIAN_ARG`] (or the `procjournal` binary). Single-threaded, no runtime: it may fork.
//!
//! Lifetime, in order:
//! 1. Take the control socket from descriptor 3 (close-on-exec from then on), become a child
//!    subreaper, refuse core dumps and ptrace by the workload (`PR_SET_DUMPABLE 0`: the nonce
//!    lives in this memory), block the signals it handles and read them through a signalfd.
//! 2. Create the receipt file (`O_EXCL`, mode 0600; its largest size in zeros, to reserve its
//!    space: `reserve_receipt`) and fork the workload: in its own cgroup when one was given
//!    (created there by `clone3(CLONE_INTO_CGROUP)`), in a new session, with an empty mask and
//!    SIGPIPE at its default. It waits on a gate pipe before it execs.
//! 3. Report `REG` (the workload's identity and the receipt file's) and wait for `GO` with the
//!    nonce: the supervisor persists the scope first, so no workload runs unregistered. End of
//!    stream instead of `GO` aborts: the gated workload is killed and reaped, and the receipt
//!    is written all the same.
//! 4. Open the gate; report `RUN`, or `EXECFAIL` with the errno. Point its own standard
//!    streams at /dev/null, so that only the tree holds the capture pipes.
//! 5. Reap every child (the workload and every orphan that reparents here); report the
//!    workload's `EXIT`. On `SIG` from the supervisor, signal the tree. On end of stream (the
//!    supervisor died: the lifeline) or SIGTERM/SIGINT/SIGHUP to the guardian itself, take the
//!    tree down: SIGTERM after a quiesce, the grace, then SIGKILL until nothing is left.
//! 6. Only when `waitpid` reports ECHILD (no child at all, which under a subreaper means no
//!    descendant at all) and any cgroup is empty, remove the cgroup, write the receipt (over
//!    the zeros that reserved its space at step 2; not fsynced, see `write_receipt`), report
//!    `DONE`, drop to the weakest nice value (nothing waits for the rest), and exit with
//!    `_exit`. A launch aborted before `GO` writes no nonce (it never had one) and `status
//!    none` (the workload never exec'd).
//!
//! Invariants: the workload inherits no descriptor but 0, 1 and 2 (everything the guardian
//! opens is close-on-exec); every signal goes through a pidfd to a process re-checked after it
//! was pinned (its parent is a member of the tree, or the guardian); the receipt is written
//! only at ECHILD.

use std::ffi::{CString, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{MsgFlags, send};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};

use super::failpoint::Launch;
use super::packed::Packed;
use super::receipt::Receipt;
use super::tree as walk;
use super::wire::{self, Down, Up};
use crate::tree::cgroup::{self, Forked, Scope};
use crate::tree::{LeaderExit, TreeSignal, procfs};

/// The hidden first argument that turns the executable into a guardian.
pub const GUARDIAN_ARG: &str = "__procjournal_guardian";

/// The descriptor the supervisor places the control socket on.
pub(crate) const CONTROL_FD: i32 = 3;

/// Exit status of a workload whose gate closed without `GO` (it never exec'd).
const GATE_CLOSED: i32 = 125;

/// Runs the guardian of the arguments after [`GUARDIAN_ARG`]; returns its exit code.
pub(super) fn run_from_args(args: impl Iterator<Item = OsString>) -> i32 {
    abort_on_panic();
    let failpoints = Launch::own();
    failpoints.panic_if(super::failpoint::PANIC_AT_START);
    match Args::parse(args) {
        Ok(parsed) => run(parsed, failpoints),
        Err(e) => {
            report_setup_failure(&e);
            2
        }
    }
}

/// Makes a panic anywhere in the guardian abort the process (once the default hook reported
/// it) instead of unwinding, whatever the profile says: `panic` is one setting for all of a
/// crate's binaries (and an embedder's profile is its own), and the guardian must never unwind.
/// An unwind could reach code that is not the guardian's: a host that catches it around
/// `run_if_requested` would go on with its own `main` in the guardian's process, and in the
/// forked workload before its exec it would run the runtime's exit path in a copy of the
/// guardian, where only exec or exit may happen. Aborted, the guardian ends where it stands: no
/// receipt is written (the tree stays `unverified`, which is the truth), the supervisor sees the
/// control socket end and the pidfd report a death by SIGABRT, and, not dumpable, it leaves no
/// core with the nonce in it.
pub(super) fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

/// The guardian's arguments, after [`GUARDIAN_ARG`]: `<handle> <receipt path> <cgroup dir or
/// -> <clone3|join> <grace ms> <program path> -- <argv0> <args>...`.
#[derive(Debug)]
pub(crate) struct Args {
    pub handle: String,
    pub receipt: std::path::PathBuf,
    pub cgroup: Option<std::path::PathBuf>,
    /// Enter the cgroup by `clone3(CLONE_INTO_CGROUP)` (`true`), or by the child writing
    /// `cgroup.procs` before its gate (for where clone3 is filtered; also tested this way).
    pub clone3: bool,
    pub grace: Duration,
    pub program: CString,
    pub argv: Vec<CString>,
    /// The workload's environment when the guardian's own is not it (a guardian forked by the
    /// zygote runs in the zygote's), in the mapping the zygote packed it into, unmapped when
    /// these arguments are dropped; `None`: the workload inherits the guardian's, which its
    /// exec was given.
    pub envp: Option<Packed>,
}

impl Args {
    pub(crate) fn encode(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec![
            GUARDIAN_ARG.into(),
            self.handle.clone().into(),
            self.receipt.clone().into(),
            self.cgroup
                .clone()
                .map_or_else(|| OsString::from("-"), OsString::from),
            if self.clone3 { "clone3" } else { "join" }.into(),
            self.grace.as_millis().to_string().into(),
            std::ffi::OsStr::from_bytes(self.program.as_bytes()).into(),
            "--".into(),
        ];
        out.extend(
            self.argv
                .iter()
                .map(|a| std::ffi::OsStr::from_bytes(a.as_bytes()).to_owned()),
        );
        out
    }

    pub(super) fn parse(mut args: impl Iterator<Item = OsString>) -> Result<Args, String> {
        let mut next = |what: &str| args.next().ok_or_else(|| format!("missing {what}"));
        let handle = next("handle")?
            .into_string()
            .map_err(|_| "handle is not text".to_owned())?;
        let receipt = next("receipt path")?.into();
        let cgroup = next("cgroup")?;
        let cgroup = (cgroup != "-").then(|| cgroup.into());
        let clone3 = match next("cgroup entry")?.to_str() {
            Some("clone3") => true,
            Some("join") => false,
            _ => return Err("the cgroup entry is neither clone3 nor join".to_owned()),
        };
        let grace = next("grace")?
            .into_string()
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map(Duration::from_millis)
            .ok_or_else(|| "grace is not a number of milliseconds".to_owned())?;
        // Each word's own bytes become the C string (no copy when it has room for the NUL).
        let cstring = |o: OsString| CString::new(o.into_vec()).map_err(|_| "NUL in an argument");
        let program = cstring(next("program")?)?;
        if next("--")? != "--" {
            return Err("expected -- before the workload's argv".to_owned());
        }
        let argv = args.map(cstring).collect::<Result<Vec<_>, _>>()?;
        if argv.is_empty() {
            return Err("missing the workload's argv".to_owned());
        }
        Ok(Args {
            handle,
            receipt,
            cgroup,
            clone3,
            grace,
            program,
            argv,
            envp: None,
        })
    }
}

/// Reports a failure before the workload exists, on the control socket if there is one.
fn report_setup_failure(reason: &str) {
    if let Some(ctl) = control_socket() {
        let _ = send_line(ctl.as_fd(), &Up::Failed(reason.to_owned()));
    }
}

/// Takes descriptor 3 if it is a socket: what the supervisor's spawn actions put there.
#[allow(unsafe_code)]
pub(super) fn control_socket() -> Option<OwnedFd> {
    // SAFETY: descriptor 3 was placed by the supervisor's posix_spawn `dup2` action and nothing
    // in this process has opened, owned or closed anything since exec (this runs first in
    // `main`); checking that it is a socket before taking it guards against a mistaken exec
    // without one. From here this `OwnedFd` is its only owner.
    let borrowed = unsafe { BorrowedFd::borrow_raw(CONTROL_FD) };
    let stat = nix::sys::stat::fstat(borrowed).ok()?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return None;
    }
    // SAFETY: as above; the borrow ends here and ownership passes to the `OwnedFd`.
    let owned = unsafe { OwnedFd::from_raw_fd(CONTROL_FD) };
    fcntl(&owned, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).ok()?;
    Some(owned)
}

fn send_line(ctl: BorrowedFd<'_>, msg: &Up) -> nix::Result<()> {
    let line = msg.encode();
    let mut sent = 0;
    while sent < line.len() {
        match send(ctl.as_raw_fd(), &line[sent..], MsgFlags::MSG_NOSIGNAL) {
            Ok(n) => sent += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What the guardian learned from its control socket.
enum Control {
    Message(Down),
    /// End of stream or a broken peer: the supervisor is gone.
    Lost,
}

struct ControlReader {
    fd: Option<OwnedFd>,
    buf: Vec<u8>,
}

impl ControlReader {
    /// The next complete message already buffered, without reading the socket.
    fn buffered(&mut self) -> Option<Control> {
        match wire::take_line(&mut self.buf) {
            Ok(Some(line)) => Some(match Down::decode(&line) {
                Ok(m) => Control::Message(m),
                // A peer that speaks garbage is not a supervisor: treat it as gone.
                Err(_) => Control::Lost,
            }),
            Ok(None) => None,
            Err(_) => Some(Control::Lost),
        }
    }

    /// With `readable`, reads what the socket holds once into the buffer; false at end of
    /// stream (or a broken socket).
    fn fill(&mut self, readable: bool) -> bool {
        let Some(fd) = &self.fd else {
            return false;
        };
        if !readable {
            return true;
        }
        let mut chunk = [0u8; wire::LINE_MAX];
        match nix::unistd::read(fd, &mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// With `readable`, reads what the socket holds once; then returns every complete message
    /// buffered, in order. All of them: two lines that arrived in one read must not leave the
    /// second waiting for more bytes (a `SIG KILL` right behind a `SIG TERM`).
    fn read(&mut self, readable: bool) -> Vec<Control> {
        let open = self.fill(readable);
        let mut out = Vec::new();
        while let Some(c) = self.buffered() {
            let lost = matches!(c, Control::Lost);
            out.push(c);
            if lost {
                return out;
            }
        }
        if !open {
            out.push(Control::Lost);
        }
        out
    }

    /// Like [`ControlReader::read`], but takes only the first message and leaves the rest
    /// buffered for the next reader.
    fn read_one(&mut self, readable: bool) -> Option<Control> {
        let open = self.fill(readable);
        self.buffered().or((!open).then_some(Control::Lost))
    }

    fn send(&self, msg: &Up) {
        if let Some(fd) = &self.fd {
            // The supervisor may be gone: the lifeline read reports that.
            let _ = send_line(fd.as_fd(), msg);
        }
    }
}

/// The workload as created, gated.
struct Workload {
    pid: u32,
    gate: Option<OwnedFd>,
    exec_error: OwnedFd,
    pidfs_ino: u64,
    start_time_ticks: u64,
}

fn run(args: Args, failpoints: Launch) -> i32 {
    let Some(ctl) = control_socket() else {
        return 2;
    };
    run_with(args, ctl, failpoints)
}

/// Runs the guardian of `args` over the control socket `ctl`; returns its exit code. Once the
/// workload is forked (it holds its own copy of its argv and environment), the guardian frees
/// them: it lives as long as the workload, and what it keeps is what every supervised process
/// costs.
pub(super) fn run_with(args: Args, ctl: OwnedFd, failpoints: Launch) -> i32 {
    let mut ctl = ControlReader {
        fd: Some(ctl),
        buf: Vec::new(),
    };
    match Guardian::setup(&args, failpoints) {
        Ok(mut g) => {
            let grace = args.grace;
            drop(args);
            g.run(grace, &mut ctl)
        }
        Err(e) => {
            ctl.send(&Up::Failed(e));
            2
        }
    }
}

/// How far the guardian's own termination of the tree is.
struct Teardown {
    /// When SIGKILL is due (after the grace of a termination the guardian started itself).
    kill_at: Option<Instant>,
    /// SIGKILL was sent: repeat it while members remain (a fork may race a round).
    killing: bool,
}

impl Teardown {
    fn poll_timeout(&self) -> PollTimeout {
        let timeout = if self.killing {
            Duration::from_millis(20)
        } else if let Some(t) = self.kill_at {
            t.saturating_duration_since(Instant::now())
        } else {
            // SIGCHLD wakes the loop; the timeout only bounds a missed wakeup.
            Duration::from_secs(1)
        };
        let ms = u16::try_from(timeout.as_millis().max(1)).unwrap_or(u16::MAX);
        PollTimeout::from(ms)
    }
}

struct Guardian {
    handle: String,
    signals: SignalFd,
    receipt: std::fs::File,
    receipt_dev: u64,
    receipt_ino: u64,
    scope: Option<Scope>,
    workload: Workload,
    /// The guardian's own identity, for its receipt: read while the supervisor syncs the
    /// registration, not between the tree's end and `DONE`.
    me: Option<procfs::Identity>,
    status: Option<LeaderExit>,
    reaped: u64,
    failpoints: Launch,
}

impl Guardian {
    fn setup(args: &Args, failpoints: Launch) -> Result<Guardian, String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("guardian: {what}: {e}");
        nix::sys::prctl::set_child_subreaper(true).map_err(|e| fail("subreaper", &e))?;
        nix::sys::prctl::set_dumpable(false).map_err(|e| fail("dumpable", &e))?;
        let mut handled = SigSet::empty();
        for s in [
            Signal::SIGCHLD,
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
            Signal::SIGQUIT,
        ] {
            handled.add(s);
        }
        handled
            .thread_block()
            .map_err(|e| fail("signal mask", &e))?;
        let signals =
            SignalFd::with_flags(&handled, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
                .map_err(|e| fail("signalfd", &e))?;
        let receipt = open_receipt(&args.receipt)
            .map_err(|e| fail(&format!("receipt {}", args.receipt.display()), &e))?;
        let meta = receipt.metadata().map_err(|e| fail("receipt", &e))?;
        reserve_receipt(&receipt);
        let scope = args.cgroup.clone().map(Scope::at);
        let workload = fork_workload(args, scope.as_ref())?;
        Ok(Guardian {
            handle: args.handle.clone(),
            signals,
            receipt,
            receipt_dev: meta.dev(),
            receipt_ino: meta.ino(),
            scope,
            workload,
            me: None,
            status: None,
            reaped: 0,
            failpoints,
        })
    }

    fn run(&mut self, grace: Duration, ctl: &mut ControlReader) -> i32 {
        ctl.send(&Up::Reg {
            pid: self.workload.pid,
            start_time_ticks: self.workload.start_time_ticks,
            pidfs_ino: self.workload.pidfs_ino,
            receipt_dev: self.receipt_dev,
            receipt_ino: self.receipt_ino,
        });
        self.me = Some(procfs::identity(std::process::id()));
        let nonce = match self.await_go(ctl) {
            Some(nonce) => nonce,
            None => {
                // Aborted launch: the gate closes, the workload exits 125 without exec'ing.
                self.workload.gate = None;
                return self.finish(None, ctl, grace, true);
            }
        };
        self.open_gate(ctl);
        quiet_standard_streams();
        self.finish(Some(nonce), ctl, grace, false)
    }

    /// Waits for `GO`; `None` if the supervisor went away or asked for a signal first (a stop
    /// that raced the launch: the workload must not start).
    fn await_go(&mut self, ctl: &mut ControlReader) -> Option<[u8; 16]> {
        loop {
            let (ctl_ready, sig_ready) = self.poll(ctl, PollTimeout::NONE);
            if sig_ready && self.take_signals().1 {
                return None;
            }
            // The first message decides: `GO`, or anything else (which aborts); what follows it
            // stays buffered for the serving loop.
            if let Some(control) = ctl.read_one(ctl_ready) {
                return match control {
                    Control::Message(Down::Go { nonce }) => Some(nonce),
                    Control::Message(Down::Signal(_)) | Control::Lost => None,
                };
            }
        }
    }

    fn open_gate(&mut self, ctl: &mut ControlReader) {
        if let Some(gate) = self.workload.gate.take() {
            let _ = nix::unistd::write(&gate, &[1]);
        }
        // EOF: exec closed the error pipe. Four bytes: the errno of a failed exec.
        let mut errno = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match nix::unistd::read(&self.workload.exec_error, &mut errno[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(Errno::EINTR) => {}
                Err(_) => break,
            }
        }
        ctl.send(&if got == 4 {
            Up::ExecFailed {
                errno: i32::from_le_bytes(errno),
            }
        } else {
            Up::Run
        });
    }

    /// Polls the control socket (while it is open) and the signalfd.
    fn poll(&self, ctl: &ControlReader, timeout: PollTimeout) -> (bool, bool) {
        let mut fds = vec![PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
        if let Some(fd) = &ctl.fd {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
        }
        if poll(&mut fds, timeout).is_err() {
            return (false, false);
        }
        let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
        let sig = ready(&fds[0]);
        let ctl_ready = fds.get(1).is_some_and(ready);
        (ctl_ready, sig)
    }

    /// Drains the signalfd: (a child changed state, the guardian was asked to end).
    fn take_signals(&mut self) -> (bool, bool) {
        let (mut child, mut end) = (false, false);
        while let Ok(Some(info)) = self.signals.read_signal() {
            if info.ssi_signo == Signal::SIGCHLD as u32 {
                child = true;
            } else {
                end = true;
            }
        }
        (child, end)
    }

    /// Reaps every child that has exited; true once there is no child left at all.
    fn reap(&mut self, ctl: &ControlReader) -> bool {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL)) {
                Ok(WaitStatus::StillAlive) => return false,
                Ok(status) => {
                    let Some(pid) = status.pid() else { continue };
                    self.reaped += 1;
                    if u32::try_from(pid.as_raw()) == Ok(self.workload.pid) {
                        let exit = match status {
                            WaitStatus::Exited(_, code) => Some(LeaderExit::Code(code)),
                            WaitStatus::Signaled(_, sig, _) => Some(LeaderExit::Signal(sig as i32)),
                            _ => None,
                        };
                        if let Some(exit) = exit {
                            self.status = Some(exit);
                            ctl.send(&Up::Exit(exit));
                        }
                    }
                }
                Err(Errno::ECHILD) => return true,
                Err(Errno::EINTR) => {}
                Err(_) => return false,
            }
        }
    }

    /// Step 5 and 6: serve the supervisor and reap until nothing is left, then the receipt.
    fn finish(
        &mut self,
        nonce: Option<[u8; 16]>,
        ctl: &mut ControlReader,
        grace: Duration,
        abort: bool,
    ) -> i32 {
        if let Err(e) = self.serve_until_empty(ctl, grace, abort) {
            // No child is left, but the cgroup cannot say whether it is empty: no receipt (the
            // tree stays `unverified`), and nothing left to reap.
            ctl.send(&Up::Failed(format!(
                "guardian: the cgroup is unreadable: {e}"
            )));
            return 3;
        }
        self.failpoints.hold(super::failpoint::BEFORE_RECEIPT);
        if let Some(scope) = &self.scope {
            let _ = scope.remove_emptied();
            if ctl.fd.is_none() {
                // The supervisor is gone: its launcher tried to remove the root's base when it
                // was released, and failed while this scope was still in it.
                scope.remove_base_if_empty();
            }
        }
        if nonce.is_none() {
            // The gate never opened: the forked child ran none of the workload's code, and
            // what it exited with (125, or SIGKILL) is ours, not the workload's. `status none`
            // with no nonce is what a verifier binds to the registration instead of a nonce.
            self.status = None;
        }
        self.write_receipt(nonce.unwrap_or([0; 16]));
        ctl.send(&Up::Done {
            reaped: self.reaped,
        });
        yield_to_supervisor();
        self.failpoints.hold(super::failpoint::AFTER_DONE);
        0
    }

    /// Step 5: serves the supervisor and reaps until no child is left and the cgroup (if any)
    /// is empty; an error when the cgroup cannot say. A lost control socket or an ending
    /// signal starts the termination, SIGKILL following after `grace`; `abort` kills at once.
    fn serve_until_empty(
        &mut self,
        ctl: &mut ControlReader,
        grace: Duration,
        abort: bool,
    ) -> std::io::Result<()> {
        let mut teardown = Teardown {
            kill_at: None,
            killing: abort,
        };
        loop {
            if self.reap(ctl) && self.scope_empty()? {
                return Ok(());
            }
            if teardown.killing {
                self.signal_tree(TreeSignal::Kill);
            } else if teardown.kill_at.is_some_and(|t| Instant::now() >= t) {
                teardown.killing = true;
                continue;
            }
            let (ctl_ready, sig_ready) = self.poll(ctl, teardown.poll_timeout());
            let mut end = sig_ready && self.take_signals().1;
            end |= self.serve_controls(ctl, ctl_ready, &mut teardown);
            if end && teardown.kill_at.is_none() && !teardown.killing {
                self.signal_tree(TreeSignal::Terminate);
                teardown.kill_at = Some(Instant::now() + grace);
            }
        }
    }

    /// Acts on what the supervisor sent; true once the control socket is lost (the lifeline:
    /// the tree is to end).
    fn serve_controls(
        &self,
        ctl: &mut ControlReader,
        ready: bool,
        teardown: &mut Teardown,
    ) -> bool {
        let mut lost = false;
        for control in ctl.read(ready) {
            match control {
                Control::Message(Down::Signal(TreeSignal::Kill)) => teardown.killing = true,
                Control::Message(Down::Signal(s)) => {
                    if !teardown.killing {
                        self.signal_tree(s);
                    }
                }
                Control::Message(Down::Go { .. }) => {}
                Control::Lost => {
                    ctl.fd = None;
                    lost = true;
                }
            }
        }
        lost
    }

    /// Whether the cgroup (if any) is empty. A member that escaped the subreaper (moved by a
    /// privileged workload) is still ours to wait for; an unreadable cgroup proves nothing.
    fn scope_empty(&self) -> Result<bool, std::io::Error> {
        match &self.scope {
            Some(scope) => scope.populated().map(|populated| !populated),
            None => Ok(true),
        }
    }

    fn signal_tree(&self, signal: TreeSignal) {
        let mut in_scope = std::collections::HashSet::new();
        if let Some(scope) = &self.scope {
            if signal == TreeSignal::Kill {
                let _ = scope.kill();
            } else {
                // Frozen, the membership cannot change while each member is signalled.
                let frozen = scope.freeze(walk::QUIESCE_BUDGET).unwrap_or(false);
                for pid in scope.procs().unwrap_or_default() {
                    walk::signal_pid(pid, signal);
                    in_scope.insert(pid);
                }
                let _ = scope.thaw();
                if !frozen {
                    tracing::debug!("the cgroup did not freeze in time; signalled what it held");
                }
            }
        }
        // Members outside the cgroup (all of them, without one), found under the subreaper.
        walk::signal_tree(std::process::id(), signal, &in_scope);
    }

    fn write_receipt(&mut self, nonce: [u8; 16]) {
        let me = self
            .me
            .unwrap_or_else(|| procfs::identity(std::process::id()));
        let receipt = Receipt {
            handle: self.handle.clone(),
            nonce,
            boot_id: me.boot_id,
            guardian_pid: me.pid,
            guardian_start_ticks: me.start_time_ticks,
            workload_pid: self.workload.pid,
            workload_start_ticks: self.workload.start_time_ticks,
            workload_pidfs_ino: self.workload.pidfs_ino,
            status: self.status,
            reaped: self.reaped,
        };
        // A receipt that cannot be written leaves the tree `unverified`, which is the truth.
        // Not fsynced: a receipt is evidence only within the boot that wrote it (after a reboot
        // the changed boot id is the proof, and no assessment reads it), and a crash of any
        // process leaves the page cache whole; its space was reserved at its creation, so
        // write-back cannot run out of space. An fsync here cost every launch a metadata write
        // and a cache flush between the workload's exit and `DONE`, which its end waits for.
        // The zeros past the receipt's end are cut first, and the receipt then written over
        // the rest: a reader sees zeros or the whole receipt, never a receipt followed by
        // zeros, and the page stays reserved (it still holds bytes of the file).
        let bytes = receipt.encode();
        if self.receipt.set_len(bytes.len() as u64).is_ok() {
            let _ = std::os::unix::fs::FileExt::write_all_at(&self.receipt, &bytes, 0);
        }
    }
}

/// Lowers the guardian to the weakest nice value once it said `DONE`: all it has left is its
/// exit, which is nothing anyone waits for, while the supervisor, woken by `DONE`, now records
/// the terminal event that its waiter does wait for. On a small machine the scheduler often
/// queues that wake-up on the CPU this guardian runs on; at the same priority the supervisor
/// then waits there until the exit's teardown is done. Lowered, it is run at once.
fn yield_to_supervisor() {
    let _ = rustix::process::setpriority_process(None, 19);
}

/// Makes room for the receipt now, so that writing it at the end needs no new space: a disk
/// that fills while the tree runs must not leave it empty. It writes the receipt's largest size
/// in zero bytes, which the file system charges for at the write (a delayed allocation reserves
/// its blocks then), and which read as a receipt not yet written until the receipt goes over
/// them. Not `fallocate`: blocks allocated at once must be freed again at the receipt's
/// removal, which on ext4 made the supervisor's unlink of a released receipt about ten times
/// dearer than that of a file whose data never reached the disk (a short tree's zeros never
/// do; on btrfs, copy-on-write, a receipt written after its zeros reached the disk needs new
/// blocks, journal-format.md). Best effort: where the write fails (a disk full already), the
/// receipt may be lost, and the tree's other evidence (its cgroup) has to prove its exit.
fn reserve_receipt(file: &std::fs::File) {
    use std::os::unix::fs::FileExt;
    let zeros = [0u8; super::receipt::RECEIPT_BYTES_MAX];
    if file.write_all_at(&zeros, 0).is_err() {
        // Part of them may be written: an empty file says as plainly that nothing is reserved.
        let _ = file.set_len(0);
    }
}

/// Points the guardian's own standard streams at /dev/null: the capture pipes must reach EOF
/// when the tree's last holder closes them, not when the guardian exits.
fn quiet_standard_streams() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
        let _ = rustix::stdio::dup2_stderr(&null);
    }
}

/// Forks the gated workload. The child runs only async-signal-safe code until exec: the
/// guardian is single-threaded, and everything the child needs was prepared before the fork.
fn fork_workload(args: &Args, scope: Option<&Scope>) -> Result<Workload, String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("guardian: {what}: {e}");
    let (gate_r, gate_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| fail("gate", &e))?;
    let (err_r, err_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| fail("pipe", &e))?;
    let cgroup_dir = match scope {
        Some(s) => Some(s.open_dir().map_err(|e| fail("cgroup", &e))?),
        None => None,
    };
    let clone_dir = if args.clone3 {
        cgroup_dir.as_ref()
    } else {
        None
    };
    // SAFETY: the guardian is single-threaded (it runs before any thread or runtime exists,
    // `run_if_requested`), so the child inherits no lock another thread held; `child` execs or
    // exits and never returns into the guardian's code.
    #[allow(unsafe_code)]
    let mut forked = unsafe { cgroup::fork_into(clone_dir.map(|d| d.as_fd())) };
    // Where clone3 is refused (an older container seccomp profile says ENOSYS or EPERM), or
    // not wanted, the child joins the cgroup itself, before the gate: slower (a first write to
    // cgroup.procs costs milliseconds), but still before any workload code runs.
    let mut join = (!args.clone3)
        .then(|| scope.map(|s| s.path().join("cgroup.procs")))
        .flatten();
    if let (Err(e), Some(scope)) = (&forked, scope)
        && args.clone3
        && matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM))
    {
        join = Some(scope.path().join("cgroup.procs"));
        // SAFETY: as above.
        #[allow(unsafe_code)]
        {
            forked = unsafe { cgroup::fork_into(None) };
        }
    }
    match forked.map_err(|e| fail("fork", &e))? {
        Forked::Child => {
            if let Some(procs) = join
                && std::fs::write(&procs, b"0").is_err()
            {
                end(GATE_CLOSED);
            }
            child(&gate_r, &err_w, args)
        }
        Forked::Parent { child } => {
            drop((gate_r, err_w));
            let (pidfs_ino, start_time_ticks) = walk::witness(child);
            Ok(Workload {
                pid: child,
                gate: Some(gate_w),
                exec_error: err_r,
                pidfs_ino,
                start_time_ticks,
            })
        }
    }
}

/// The forked workload before exec: a new session, a clean mask, SIGPIPE at its default, the
/// gate, exec. Never returns. Allocating here is sound only because the guardian is
/// single-threaded: no other thread can hold the allocator's lock across the fork.
fn child(gate: &OwnedFd, exec_error: &OwnedFd, args: &Args) -> ! {
    let _ = nix::unistd::setsid();
    // A PTY launch: descriptor 0 is the terminal's slave (only then is it a terminal: the
    // supervisor gives the guardian pipes otherwise), which becomes the new session's
    // controlling terminal, so that the workload gets SIGWINCH, job control and SIGHUP as
    // under a terminal emulator.
    let stdin = std::io::stdin();
    if rustix::termios::isatty(&stdin) && rustix::process::ioctl_tiocsctty(&stdin).is_err() {
        end(GATE_CLOSED);
    }
    let _ = SigSet::empty().thread_set_mask();
    reset_sigpipe();
    let mut byte = [0u8; 1];
    loop {
        match nix::unistd::read(gate, &mut byte) {
            Ok(1) => break,
            Err(Errno::EINTR) => {}
            _ => end(GATE_CLOSED),
        }
    }
    let exec = match &args.envp {
        Some(envp) => {
            let envp: Vec<&std::ffi::CStr> = envp.iter().collect();
            nix::unistd::execve(&args.program, &args.argv, &envp)
        }
        None => nix::unistd::execv(&args.program, &args.argv),
    };
    let errno = match exec {
        Err(e) => e as i32,
        Ok(never) => match never {},
    };
    let _ = nix::unistd::write(exec_error, &errno.to_le_bytes());
    end(if errno == libc::ENOENT { 127 } else { 126 })
}

/// Ends a guardian (or its child that never exec'd) at once, with `_exit`: without the C
/// library's exit handlers, which are the dynamic loader's destructors of every library
/// (some tens of microseconds of each guardian's CPU on this kind of machine, measured with
/// `perf`, spent while the next launch waits for the CPU), and without the Rust runtime's
/// flush of its stdout. The guardian registers no handler, writes nothing through stdout
/// (its reports go over the control socket, its receipt straight to its file), and a child
/// that never exec'd must run none of the guardian's.
#[allow(unsafe_code)]
pub(super) fn end(code: i32) -> ! {
    // SAFETY: `_exit` takes a plain integer and never returns; the C library's API makes it
    // unsafe only as a foreign function. Nothing of ours relies on what it skips (above).
    unsafe { libc::_exit(code) }
}

/// The Rust runtime ignores SIGPIPE, and an ignored disposition survives exec: the workload
/// must get the default (a writer to a closed pipe dies, as from a shell).
#[allow(unsafe_code)]
fn reset_sigpipe() {
    // SAFETY: installing SIG_DFL registers no handler, so no code of ours can ever run in a
    // signal context; the call changes only this (single-threaded) process's disposition.
    let _ =
        unsafe { nix::sys::signal::signal(Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl) };
}

/// Creates the receipt at `path`: its directory opened once (a symbolic link, or a directory
/// another user could change, refused), the file created new in it, never through a link.
fn open_receipt(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use crate::root::dir::{Access, Dir};
    let invalid = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path");
    let dir = Dir::open(path.parent().ok_or_else(invalid)?)?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(invalid)?;
    dir.file(name, Access::CreateNew)
}
