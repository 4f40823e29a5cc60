//! The guardian zygote: one helper process, started once by a supervisor (at its first launch,
//! or at once for one that launches as soon as its root is open), which forks each guardian
//! instead of the supervisor exec'ing a new one. An exec costs about 0.75 ms on this kind of
//! machine whatever the image (the C library's start-up CPU detection traps to the hypervisor),
//! and each exec'd guardian pays its own relocated data; a forked guardian skips the exec and
//! shares the zygote's pages copy-on-write until it writes to them, so it writes as few as it
//! can: it takes the request's strings without copying them, frees them once its workload is
//! forked, and its allocator keeps no cache of freed blocks ([`ZYGOTE_ENV`]). The workload's
//! environment, most of a request, is decoded into a mapping of its own (`packed.rs`) rather
//! than onto the allocator's pages, where each guardian would keep it once the zygote reused
//! those blocks for the next request.
//!
//! The wire, one `SOCK_SEQPACKET` message each way over the socketpair the zygote was started
//! with (its descriptor 3), all integers little-endian:
//!
//! ```text
//! request:  "PJZ1"  u32 A  u32 E  A + E + 1 strings      + SCM_RIGHTS: control, stdin, stdout, stderr
//!           string = u32 length, then that many bytes, none of them NUL
//!           the A strings are the guardian's arguments after its hidden first one, the E its
//!           workload's environment entries (KEY=value), the last its working directory
//! reply:    'P' u32 pid    a guardian was forked: pid is the supervisor's new child (or,
//!                          from a zygote of one launch, the zygote's own pid: it is now
//!                          that guardian)
//!           'E' i32 errno  nothing was forked (EBADMSG: a request that does not decode)
//! ```
//!
//! Invariants:
//! - The zygote is single-threaded, runs no workload code and has no child: it forks with
//!   `clone3(CLONE_PARENT)`, so each guardian is the supervisor's own child, reaped by it
//!   through a pidfd exactly as an exec'd one (its pid names it until then).
//! - A zygote of one launch ([`ZYGOTE_ONCE_ARG`], for `run` and `capture`) forks nothing: it
//!   answers its first request with its own pid, then becomes that guardian, already the
//!   supervisor's child in a process group of its own. The supervisor's slot then forgets it
//!   without ending or reaping it: the pid is the guardian's, reaped with its tree.
//! - A request is decoded in full (a total decoder) and must bring exactly four descriptors
//!   before anything is forked; anything else is answered `E EBADMSG` and nothing runs.
//! - A forked guardian holds its three streams as 0-2 and its control socket, and nothing else:
//!   not the zygote's socket, not another launch's descriptors (the zygote drops each request's
//!   as soon as it has answered it), and not the mapping the zygote receives requests into (it
//!   unmaps it first: the zygote writes the next request there, which would leave each guardian
//!   a private copy of the page, holding another launch's environment).
//! - The zygote exits at end of stream on its socket: its supervisor dropped it or died.
//! - The supervisor's side never refuses a launch because of the zygote: a zygote that cannot
//!   be started, stops answering or dies, or a request over [`REQUEST_MAX`], falls back to
//!   exec'ing the guardian (`GuardianLauncher`), slower but the same guardian; one that died
//!   after its fork leaves a guardian the supervisor finds (its child holding the control
//!   socket) and adopts, so no guardian is ever left unknown and unreaped.

use std::ffi::{CString, OsString};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, setsockopt, socketpair, sockopt,
};

use super::failpoint::Launch;
use super::packed::Packed;
use super::run::{self, Args};
use crate::sync::Lock;
use crate::tree::SpawnError;
use crate::tree::cgroup::{self, Forked};
use crate::tree::spawn::{self, Image};

/// The hidden first argument that turns the executable into a guardian zygote.
pub const ZYGOTE_ARG: &str = "__procjournal_zygote";

/// The hidden first argument that turns the executable into the zygote of one launch: it
/// answers its first request with its own pid and becomes that guardian instead of forking one.
pub const ZYGOTE_ONCE_ARG: &str = "__procjournal_zygote_once";

/// The zygote's process name (`comm`).
pub const ZYGOTE_COMM: &std::ffi::CStr = c"pj-zygote";

const MAGIC: &[u8; 4] = b"PJZ1";

/// The zygote's whole environment (its guardians' workloads get theirs in each request). With
/// glibc's per-thread cache of freed blocks on, a forked guardian kept up to seven freed blocks
/// of each size (its copies of the launch's strings) on pages it had written, and so no longer
/// shared with the zygote: 64 KiB private dirty each, 40 without it (a release build, 40 idle
/// guardians under `serve`, from their `smaps_rollup`). A guardian allocates a few hundred
/// bytes after its start, so the cache buys it nothing. Another C library ignores the variable.
/// The small image now allocates from its own arena (`arena.rs`), so this matters only for
/// what the C library's allocator still serves there, and for `procjournal` as a zygote.
const ZYGOTE_ENV: &std::ffi::CStr = c"GLIBC_TUNABLES=glibc.malloc.tcache_count=0";

/// The largest request the zygote takes, in bytes. A launch whose arguments and environment
/// need more is exec'd instead (a `SOCK_SEQPACKET` message must fit the socket's buffer).
pub const REQUEST_MAX: usize = 128 * 1024;

/// Descriptors a request carries: the control socket, then the guardian's stdin, stdout, stderr.
const FDS: usize = 4;

/// A guardian to fork.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The guardian's arguments after its hidden first one (`run::Args::encode`).
    pub args: Vec<Vec<u8>>,
    /// The workload's environment, `KEY=value` each.
    pub envp: Vec<Vec<u8>>,
    pub cwd: Vec<u8>,
}

/// The zygote's answer to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Forked { pid: u32 },
    Failed { errno: i32 },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ZygoteWireError {
    #[error("the message does not start with PJZ1")]
    Magic,
    #[error("the message ends inside {0}")]
    Short(&'static str),
    #[error("a string holds a NUL byte")]
    Nul,
    #[error("{0} bytes follow the message")]
    Trailing(usize),
    #[error("the request is over {REQUEST_MAX} bytes")]
    TooLong,
    #[error("a reply is 5 bytes, not {0}")]
    ReplyLength(usize),
    #[error("unknown reply tag {0:#04x}")]
    Tag(u8),
}

impl Request {
    pub fn encode(&self) -> Result<Vec<u8>, ZygoteWireError> {
        let mut out = MAGIC.to_vec();
        for count in [self.args.len(), self.envp.len()] {
            let count = u32::try_from(count).map_err(|_| ZygoteWireError::TooLong)?;
            out.extend_from_slice(&count.to_le_bytes());
        }
        let strings = self.args.iter().chain(&self.envp).chain([&self.cwd]);
        for s in strings {
            if s.contains(&0) {
                return Err(ZygoteWireError::Nul);
            }
            let len = u32::try_from(s.len()).map_err(|_| ZygoteWireError::TooLong)?;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(s);
            if out.len() > REQUEST_MAX {
                return Err(ZygoteWireError::TooLong);
            }
        }
        Ok(out)
    }
}

/// A request as the zygote takes it for a fork: the guardian's arguments and working directory
/// on the heap, the workload's environment (most of a request) packed in a mapping of its own,
/// which the guardian drops with its arguments once its workload is forked (`packed.rs`).
#[derive(Debug)]
pub(crate) struct Received {
    pub args: Vec<Vec<u8>>,
    pub envp: Packed,
    pub cwd: Vec<u8>,
}

impl Received {
    /// Total: any bytes give a request or a typed error. Counts are never trusted for an
    /// allocation: each string must be present in the bytes before the next is read.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Received, ZygoteWireError> {
        let mut strings = Vec::new();
        let (args, envs) = walk(bytes, |s| strings.push(s))?;
        // Room for the NUL the guardian's C string adds, so that it takes these bytes as they
        // are (`enter`).
        let owned = |s: &[u8]| {
            let mut owned = Vec::with_capacity(s.len() + 1);
            owned.extend_from_slice(s);
            owned
        };
        let (args, rest) = strings.split_at(args);
        let (envp, cwd) = rest.split_at(envs);
        Ok(Received {
            args: args.iter().map(|s| owned(s)).collect(),
            envp: Packed::new(envp.iter().copied()).map_err(|_| ZygoteWireError::Nul)?,
            cwd: cwd.first().map(|s| owned(s)).unwrap_or_default(),
        })
    }

    /// The request the bytes encoded, to compare with the one encoded.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn into_request(self) -> Request {
        Request {
            envp: self.envp.iter().map(|e| e.to_bytes().to_vec()).collect(),
            args: self.args,
            cwd: self.cwd,
        }
    }
}

/// Walks a request's bytes: checks them in full and gives each string to `each` in order (the
/// arguments, the environment entries, the working directory); returns how many arguments and
/// entries there are.
fn walk<'a>(
    bytes: &'a [u8],
    mut each: impl FnMut(&'a [u8]),
) -> Result<(usize, usize), ZygoteWireError> {
    if bytes.len() > REQUEST_MAX {
        return Err(ZygoteWireError::TooLong);
    }
    let rest = bytes.strip_prefix(MAGIC).ok_or(ZygoteWireError::Magic)?;
    let mut reader = Reader(rest);
    let args = reader.u32("the argument count")?;
    let envs = reader.u32("the environment count")?;
    for _ in 0..args {
        each(reader.string("an argument")?);
    }
    for _ in 0..envs {
        each(reader.string("an environment entry")?);
    }
    each(reader.string("the working directory")?);
    if !reader.0.is_empty() {
        return Err(ZygoteWireError::Trailing(reader.0.len()));
    }
    // Each string took at least its 4-byte length, so both counts are below REQUEST_MAX.
    let count = |n: u32| usize::try_from(n).map_err(|_| ZygoteWireError::TooLong);
    Ok((count(args)?, count(envs)?))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn u32(&mut self, what: &'static str) -> Result<u32, ZygoteWireError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<4>()
            .ok_or(ZygoteWireError::Short(what))?;
        self.0 = rest;
        Ok(u32::from_le_bytes(*head))
    }

    fn string(&mut self, what: &'static str) -> Result<&'a [u8], ZygoteWireError> {
        let len = usize::try_from(self.u32(what)?).map_err(|_| ZygoteWireError::Short(what))?;
        if self.0.len() < len {
            return Err(ZygoteWireError::Short(what));
        }
        let (s, rest) = self.0.split_at(len);
        self.0 = rest;
        if s.contains(&0) {
            return Err(ZygoteWireError::Nul);
        }
        Ok(s)
    }
}

impl Reply {
    pub fn encode(self) -> [u8; 5] {
        let (tag, value) = match self {
            Reply::Forked { pid } => (b'P', pid.to_le_bytes()),
            Reply::Failed { errno } => (b'E', errno.to_le_bytes()),
        };
        let mut out = [tag, 0, 0, 0, 0];
        out[1..].copy_from_slice(&value);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Reply, ZygoteWireError> {
        let [tag, value @ ..] = bytes else {
            return Err(ZygoteWireError::ReplyLength(bytes.len()));
        };
        let value: [u8; 4] = value
            .try_into()
            .map_err(|_| ZygoteWireError::ReplyLength(bytes.len()))?;
        match tag {
            b'P' => Ok(Reply::Forked {
                pid: u32::from_le_bytes(value),
            }),
            b'E' => Ok(Reply::Failed {
                errno: i32::from_le_bytes(value),
            }),
            other => Err(ZygoteWireError::Tag(*other)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The zygote process

/// The zygote's life: answers requests on descriptor 3 until end of stream; returns its exit
/// code. Runs first in `main` (`run::run_if_requested`), before any thread exists.
pub(super) fn serve(once: bool) -> i32 {
    let Some(mut sock) = run::control_socket() else {
        return 2;
    };
    // Told apart from its guardians in `ps -o comm` and /proc/PID/comm (they share its command
    // line); each guardian takes back the image's own name.
    let image_name = nix::sys::prctl::get_name().ok();
    let _ = nix::sys::prctl::set_name(ZYGOTE_COMM);
    // An anonymous mapping, not a zeroed heap block: only the pages a request is received into
    // ever become resident, so the zygote carries no 128 KiB of zeroes that each guardian would
    // share; and a guardian unmaps it at once, so it keeps no private copy of a page the zygote
    // receives the next request into. Together: 6 KiB less PSS per guardian, 40 of them.
    let mut mapped = memmap2::MmapMut::map_anon(REQUEST_MAX + 1).ok();
    warm_statics();
    let mut heap = if mapped.is_none() {
        vec![0u8; REQUEST_MAX + 1]
    } else {
        Vec::new()
    };
    loop {
        let buf: &mut [u8] = match &mut mapped {
            Some(mapped) => mapped,
            None => &mut heap,
        };
        match receive(&sock, buf) {
            Ok(None) => return 0,
            Ok(Some((request, fds))) if once => {
                become_guardian(sock, request, fds, image_name.as_deref(), &mut mapped)
            }
            Ok(Some((request, fds))) => {
                sock = fork_guardian(sock, request, fds, image_name.as_deref(), &mut mapped);
            }
            Err(Errno::EINTR) => {}
            Err(Errno::EBADMSG) => send_reply(
                &sock,
                Reply::Failed {
                    errno: libc::EBADMSG,
                },
            ),
            Err(_) => return 1,
        }
    }
}

/// Fills, before any fork, what the standard library caches in the image's statics at its
/// first use: filled in a guardian, such a cache makes the page of the image's statics that
/// guardian's own (4 KiB of private memory each), where every guardian shares it with the
/// zygote while nothing writes it. Those a guardian reaches: whether `statx` is available
/// (its first `metadata`), the boot id its receipt names (read once per process), and which
/// instructions the receipt's checksum may use.
fn warm_statics() {
    let _ = std::fs::metadata("/");
    let _ = crate::tree::procfs::boot_id();
    // The standard library's CPU feature cache, which the receipt's checksum asks: filled by
    // `cpuid`, which traps to the hypervisor on a virtual machine, it cost each guardian
    // microseconds between its workload's exit and `DONE`.
    let _ = crc32fast::hash(b"");
}

/// The next request and its descriptors; `None` at end of stream. A message that is truncated,
/// does not decode or does not bring exactly [`FDS`] descriptors is `EBADMSG` (its descriptors
/// are closed).
fn receive(sock: &OwnedFd, buf: &mut [u8]) -> Result<Option<(Received, [OwnedFd; FDS])>, Errno> {
    let mut space = nix::cmsg_space!([RawFd; FDS]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // SAFETY: the kernel installed these descriptors in our table for this message
            // just now (close-on-exec); nothing else in this process knows or owns them.
            #[allow(unsafe_code)]
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    let (len, flags) = (msg.bytes, msg.flags);
    if len == 0 && fds.is_empty() {
        return Ok(None);
    }
    if flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC) {
        return Err(Errno::EBADMSG);
    }
    let request = buf
        .get(..len)
        .and_then(|b| Received::decode(b).ok())
        .ok_or(Errno::EBADMSG)?;
    let fds: [OwnedFd; FDS] = fds.try_into().map_err(|_| Errno::EBADMSG)?;
    Ok(Some((request, fds)))
}

fn send_reply(sock: &OwnedFd, reply: Reply) {
    // A supervisor that is gone learns nothing; the zygote sees its end of stream next.
    let _ = nix::sys::socket::send(sock.as_raw_fd(), &reply.encode(), MsgFlags::MSG_NOSIGNAL);
}

/// Forks the guardian of `request` and answers with its pid; returns the socket to the loop.
/// The child never returns.
fn fork_guardian(
    sock: OwnedFd,
    request: Received,
    fds: [OwnedFd; FDS],
    name: Option<&std::ffi::CStr>,
    buffer: &mut Option<memmap2::MmapMut>,
) -> OwnedFd {
    // SAFETY: the zygote is single-threaded (it runs before any thread exists and starts none),
    // so the child inherits no lock another thread held. The child runs the guardian, which
    // uses no pthread function on another thread and no non-default mutex, and ends in `exit`:
    // it never returns into this loop.
    #[allow(unsafe_code)]
    let forked = unsafe { cgroup::fork_sibling() };
    match forked {
        Ok(Forked::Child) => {
            leave_zygote(name, buffer);
            guardian_child(sock, request, fds)
        }
        Ok(Forked::Parent { child }) => {
            Launch::forked(request.envp.iter()).exit_if(super::failpoint::ZYGOTE_SILENT);
            send_reply(&sock, Reply::Forked { pid: child });
        }
        Err(e) => send_reply(
            &sock,
            Reply::Failed {
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            },
        ),
    }
    sock
}

/// The zygote of one launch: answers with its own pid, then runs the guardian of `request`
/// itself. It is already what a forked guardian is made to be, the supervisor's child in a
/// process group of its own; and without the fork no page is copied, and no zygote is left to
/// end and reap. Never returns.
fn become_guardian(
    sock: OwnedFd,
    request: Received,
    fds: [OwnedFd; FDS],
    name: Option<&std::ffi::CStr>,
    buffer: &mut Option<memmap2::MmapMut>,
) -> ! {
    send_reply(
        &sock,
        Reply::Forked {
            pid: std::process::id(),
        },
    );
    leave_zygote(name, buffer);
    guardian_child(sock, request, fds)
}

/// What a guardian, forked or become, leaves of the zygote it was: the receive buffer (the
/// request is decoded out of it, its environment into a mapping of its own, dropped with the
/// guardian's arguments: the buffer is the zygote's), and the zygote's process name.
fn leave_zygote(name: Option<&std::ffi::CStr>, buffer: &mut Option<memmap2::MmapMut>) {
    drop(buffer.take());
    if let Some(name) = name {
        let _ = nix::sys::prctl::set_name(name);
    }
}

/// The forked guardian: its streams on 0-2, the zygote's socket closed, its own process group
/// and directory (as an exec'd guardian's spawn gives it), then the guardian itself.
fn guardian_child(sock: OwnedFd, request: Received, fds: [OwnedFd; FDS]) -> ! {
    drop(sock);
    let [control, stdin, stdout, stderr] = fds;
    let code = match enter(request, [stdin, stdout, stderr]) {
        Ok(args) => {
            let failpoints = Launch::forked(args.envp.iter().flat_map(Packed::iter));
            failpoints.panic_if(super::failpoint::PANIC_AT_START);
            run::run_with(args, control, failpoints)
        }
        Err(e) => {
            let _ = nix::sys::socket::send(
                control.as_raw_fd(),
                &super::wire::Up::Failed(e).encode(),
                MsgFlags::MSG_NOSIGNAL,
            );
            2
        }
    };
    run::end(code)
}

/// Takes `request`'s strings as the guardian's own, without copying them: every page a forked
/// guardian writes is a page it no longer shares with the zygote.
fn enter(request: Received, stdio: [OwnedFd; 3]) -> Result<Args, String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("guardian: {what}: {e}");
    let [stdin, stdout, stderr] = stdio;
    rustix::stdio::dup2_stdin(&stdin).map_err(|e| fail("stdin", &e))?;
    rustix::stdio::dup2_stdout(&stdout).map_err(|e| fail("stdout", &e))?;
    rustix::stdio::dup2_stderr(&stderr).map_err(|e| fail("stderr", &e))?;
    drop((stdin, stdout, stderr));
    let own = nix::unistd::Pid::from_raw(0);
    nix::unistd::setpgid(own, own).map_err(|e| fail("process group", &e))?;
    let cwd = Path::new(std::ffi::OsStr::from_bytes(&request.cwd));
    nix::unistd::chdir(cwd).map_err(|e| fail("working directory", &e))?;
    let mut args = Args::parse(request.args.into_iter().map(OsString::from_vec))?;
    args.envp = Some(request.envp);
    Ok(args)
}

// ---------------------------------------------------------------------------------------------
// The supervisor's side

/// A running zygote: our end of its socket and its pid (our unreaped child, so the pid names
/// it until [`Zygote`]'s drop reaps it).
#[derive(Debug)]
pub(super) struct Zygote {
    sock: OwnedFd,
    pid: u32,
    /// False once it became the guardian of its one launch: its pid is then the guardian's,
    /// which the guardian's tree reaps, and the drop must neither wait for it nor reap it.
    ours: bool,
}

/// Why the zygote did not fork a guardian.
#[derive(Debug)]
pub(super) enum Refused {
    /// The zygote is gone (it never took the request: its socket's peer is closed): the slot
    /// reaps it and starts another.
    Gone,
    /// Nothing was forked and the zygote cannot serve this request (none could be started, it
    /// was gone before it took the request, or the request is too large): exec the guardian.
    Unavailable,
    /// The zygote took the request and gave no answer (it died or stayed silent for the
    /// handshake bound): it may have forked a guardian on the same control socket. The slot
    /// kills and reaps it, then adopts that guardian if there is one (the child of ours holding
    /// the socket), or execs one if there is none; never two guardians on one socket.
    Lost(String),
    /// The fork itself failed (the process limit, memory): the launch fails as a spawn would.
    Fork(std::io::Error),
}

/// The zygote of a launcher that forks its guardians: started at its first launch, and again
/// at the next launch after one that died. Launches take their turn on it (a request and its
/// answer take a fork's time).
#[derive(Debug)]
pub(super) struct ZygoteSlot {
    program: CString,
    /// Each zygote serves one launch and becomes its guardian ([`ZYGOTE_ONCE_ARG`]).
    once: bool,
    zygote: Lock<Option<Zygote>>,
}

impl ZygoteSlot {
    pub(super) fn new(program: CString, once: bool) -> ZygoteSlot {
        ZygoteSlot {
            program,
            once,
            zygote: Lock::new(None),
        }
    }

    /// Forks the guardian of `request` (see [`Zygote::fork`]), starting the zygote first if
    /// there is none, and once more if the one there was gone; a zygote that failed is reaped
    /// here. Never [`Refused::Gone`].
    pub(super) fn fork(
        &self,
        request: &Request,
        control: BorrowedFd<'_>,
        stdio: [BorrowedFd<'_>; 3],
    ) -> Result<u32, Refused> {
        let mut held = self.zygote.lock();
        for _ in 0..2 {
            let Some(zygote) = held.take().or_else(|| self.start()) else {
                return Err(Refused::Unavailable);
            };
            match zygote.fork(request, control, stdio) {
                Err(Refused::Gone) => {
                    tracing::warn!("the guardian zygote was gone; starting another");
                    drop(zygote);
                }
                Err(Refused::Lost(why)) => {
                    tracing::warn!(reason = %why, "the guardian zygote was lost; killed");
                    // Once it is reaped it can fork nothing more: a guardian it forked for this
                    // request, if any, is the one child of ours holding the control socket.
                    zygote.kill();
                    return match child_holding(control) {
                        Some(pid) => Ok(pid),
                        None => Err(Refused::Unavailable),
                    };
                }
                // The zygote of one launch became its guardian: the slot is empty again, and
                // the pid is the guardian's alone.
                Ok(pid) if pid == zygote.pid => {
                    zygote.became_guardian();
                    return Ok(pid);
                }
                other => {
                    *held = Some(zygote);
                    return other;
                }
            }
        }
        Err(Refused::Unavailable)
    }

    /// Starts the zygote now if none runs, rather than at the next launch: its exec then
    /// overlaps whatever the caller does before it launches. A failure is only traced (the
    /// launch tries again, and execs its guardian if that fails too).
    pub(super) fn start_now(&self) {
        let mut held = self.zygote.lock();
        if held.is_none() {
            *held = self.start();
        }
    }

    /// A new zygote, or `None` (traced) where none can be started: launches exec their
    /// guardians meanwhile.
    fn start(&self) -> Option<Zygote> {
        Zygote::start(&self.program, self.once)
            .inspect_err(|e| tracing::warn!(error = %e, "no guardian zygote; guardians are exec'd"))
            .ok()
    }

    /// Tells the zygote still held, if any, to end (its end of stream) without waiting for
    /// it: after the one launch of a launcher that launches once. A zygote of one launch that
    /// became its guardian has left the slot already; one whose launch failed (a refusal, a
    /// lost handshake) exits now, so that [`ZygoteSlot::end`] then reaps a process that has
    /// exited already. A launch after this starts another zygote.
    pub(super) fn retire(&self) {
        if let Some(zygote) = self.zygote.lock().as_ref() {
            let _ = nix::sys::socket::shutdown(
                zygote.sock.as_raw_fd(),
                nix::sys::socket::Shutdown::Both,
            );
        }
    }

    /// Ends and reaps the zygote now (its drop), if there is one: for a launcher released by a
    /// process that exits without dropping it, whose zygote would otherwise outlive it as a
    /// zombie for whatever process inherits it.
    pub(super) fn end(&self) {
        let zygote = self.zygote.lock().take();
        drop(zygote);
    }

    /// The running zygote's pid, if any.
    pub(super) fn pid(&self) -> Option<u32> {
        self.zygote.lock().as_ref().map(|z| z.pid)
    }
}

impl Zygote {
    /// Starts a zygote of `program` (the guardian's image), with /dev/null as its streams.
    pub(super) fn start(program: &CString, once: bool) -> Result<Zygote, SpawnError> {
        let setup = |cause: Errno| SpawnError::Setup {
            what: "guardian zygote",
            cause: cause.into(),
        };
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(setup)?;
        let bound = Duration::from_millis(crate::limits::GUARDIAN_HANDSHAKE_MS);
        let tv =
            nix::sys::time::TimeVal::new(i64::try_from(bound.as_secs()).unwrap_or(i64::MAX), 0);
        setsockopt(&ours, sockopt::ReceiveTimeout, &tv).map_err(setup)?;
        let zygote_arg =
            CString::new(if once { ZYGOTE_ONCE_ARG } else { ZYGOTE_ARG }).map_err(|_| {
                SpawnError::Nul {
                    what: "the zygote's argument",
                }
            })?;
        let image = Image {
            path: program.clone(),
            argv: vec![program.clone(), zygote_arg],
            envp: vec![ZYGOTE_ENV.to_owned()],
        };
        let pid = spawn::spawn_detached(&image, theirs.as_fd(), "guardian zygote")?;
        Ok(Zygote {
            sock: ours,
            pid,
            ours: true,
        })
    }

    /// Asks the zygote to fork the guardian of `request` with `control` and `stdio` as its
    /// control socket and streams; returns its pid, the supervisor's new child.
    pub(super) fn fork(
        &self,
        request: &Request,
        control: BorrowedFd<'_>,
        stdio: [BorrowedFd<'_>; 3],
    ) -> Result<u32, Refused> {
        let bytes = request.encode().map_err(|_| Refused::Unavailable)?;
        let fds = [
            control.as_raw_fd(),
            stdio[0].as_raw_fd(),
            stdio[1].as_raw_fd(),
            stdio[2].as_raw_fd(),
        ];
        let rights = [ControlMessage::ScmRights(&fds)];
        loop {
            match sendmsg::<()>(
                self.sock.as_raw_fd(),
                &[IoSlice::new(&bytes)],
                &rights,
                MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Ok(_) => break,
                Err(Errno::EINTR) => {}
                // Not taken: a zygote that is gone answers EPIPE here, before any fork.
                Err(_) => return Err(Refused::Gone),
            }
        }
        let mut answer = [0u8; 8];
        let n = loop {
            match nix::sys::socket::recv(self.sock.as_raw_fd(), &mut answer, MsgFlags::empty()) {
                Err(Errno::EINTR) => {}
                Ok(0) => return Err(Refused::Lost("the guardian zygote ended".to_owned())),
                Ok(n) => break n,
                Err(e) => return Err(Refused::Lost(format!("the guardian zygote: {e}"))),
            }
        };
        match Reply::decode(&answer[..n]) {
            Ok(Reply::Forked { pid }) => Ok(pid),
            // Answered and refused before any fork: the request is ours to blame; or the
            // kernel or a seccomp filter refuses the fork itself (`clone3`): exec instead.
            Ok(Reply::Failed {
                errno: libc::EBADMSG | libc::ENOSYS | libc::EPERM | libc::EINVAL,
            }) => Err(Refused::Unavailable),
            Ok(Reply::Failed { errno }) => {
                Err(Refused::Fork(std::io::Error::from_raw_os_error(errno)))
            }
            Err(e) => Err(Refused::Lost(format!("the guardian zygote: {e}"))),
        }
    }

    /// Leaves the pid to the guardian this zygote became: only its socket is closed.
    fn became_guardian(mut self) {
        self.ours = false;
    }

    /// Kills the zygote (one that stopped answering) and reaps it (its drop).
    fn kill(self) {
        if let Ok(pidfd) = crate::tree::open_pidfd(self.pid) {
            let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
        }
    }
}

/// The child of this process that holds a descriptor of the socket `control` (a guardian the
/// zygote forked with it and did not report): `/proc/PID/fd` of each child, by the socket's
/// inode. Only the zygote (reaped by now) and that guardian ever held it besides us.
fn child_holding(control: BorrowedFd<'_>) -> Option<u32> {
    let ino = nix::sys::stat::fstat(control).ok()?.st_ino;
    let target = format!("socket:[{ino}]");
    let me = i64::from(std::process::id());
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| crate::tree::procfs::stat(*pid).is_some_and(|s| s.ppid == me))
        .find(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    std::fs::read_link(fd.path())
                        .is_ok_and(|t| t.as_os_str().as_bytes() == target.as_bytes())
                })
            })
        })
}

impl Drop for Zygote {
    /// Ends the zygote (its end of stream) and reaps it; one that does not exit within the
    /// handshake bound is killed first. No zombie is left.
    fn drop(&mut self) {
        let _ = nix::sys::socket::shutdown(self.sock.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        if !self.ours {
            return;
        }
        if let Ok(pidfd) = crate::tree::open_pidfd(self.pid) {
            super::reap_blocking(&pidfd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode(bytes: &[u8]) -> Result<Request, ZygoteWireError> {
        Received::decode(bytes).map(Received::into_request)
    }

    fn request() -> Request {
        Request {
            args: vec![
                b"p-1".to_vec(),
                b"/r/trees/p-1.receipt".to_vec(),
                b"-".to_vec(),
            ],
            envp: vec![b"PATH=/bin".to_vec(), b"EMPTY=".to_vec()],
            cwd: b"/tmp".to_vec(),
        }
    }

    #[test]
    fn a_request_is_laid_out_as_documented() {
        let r = Request {
            args: vec![b"ab".to_vec()],
            envp: vec![],
            cwd: b"/".to_vec(),
        };
        let bytes = r.encode().unwrap();
        assert_eq!(
            bytes,
            b"PJZ1\x01\0\0\0\0\0\0\0\x02\0\0\0ab\x01\0\0\0/".to_vec()
        );
        assert_eq!(decode(&bytes), Ok(r));
        assert_eq!(Reply::Forked { pid: 258 }.encode(), *b"P\x02\x01\0\0");
        assert_eq!(Reply::Failed { errno: -1 }.encode(), *b"E\xff\xff\xff\xff");
    }

    #[test]
    fn every_kind_of_bad_request_has_its_error() {
        let good = request().encode().unwrap();
        assert_eq!(decode(b"PJZ2"), Err(ZygoteWireError::Magic));
        assert!(matches!(
            decode(&good[..good.len() - 1]),
            Err(ZygoteWireError::Short(_))
        ));
        let mut longer = good.clone();
        longer.push(0);
        assert_eq!(decode(&longer), Err(ZygoteWireError::Trailing(1)));
        let mut nul = good.clone();
        let at = nul.iter().position(|&b| b == b'/').unwrap();
        nul[at] = 0;
        assert_eq!(decode(&nul), Err(ZygoteWireError::Nul));
        // A count far beyond the bytes is an error, never an allocation of that size.
        let mut huge = b"PJZ1".to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&huge), Err(ZygoteWireError::Short(_))));
        let big = Request {
            envp: vec![vec![b'x'; REQUEST_MAX]],
            ..request()
        };
        assert_eq!(big.encode(), Err(ZygoteWireError::TooLong));
        let with_nul = Request {
            cwd: b"/a\0b".to_vec(),
            ..request()
        };
        assert_eq!(with_nul.encode(), Err(ZygoteWireError::Nul));
        assert_eq!(
            Reply::decode(b"P\0\0\0"),
            Err(ZygoteWireError::ReplyLength(4))
        );
        assert_eq!(Reply::decode(b"X\0\0\0\0"), Err(ZygoteWireError::Tag(b'X')));
    }

    fn text() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(1u8..=255, 0..40)
    }

    proptest! {
        #[test]
        fn requests_round_trip(
            args in proptest::collection::vec(text(), 0..8),
            envp in proptest::collection::vec(text(), 0..8),
            cwd in text(),
        ) {
            let r = Request { args, envp, cwd };
            let bytes = r.encode().unwrap();
            prop_assert_eq!(decode(&bytes), Ok(r));
            crate::fuzzing::guardian_zygote(&bytes);
        }

        #[test]
        fn any_bytes_decode_or_fail_without_a_panic(
            tail in proptest::collection::vec(any::<u8>(), 0..200),
            magic in any::<bool>(),
        ) {
            let mut data = if magic { MAGIC.to_vec() } else { Vec::new() };
            data.extend_from_slice(&tail);
            crate::fuzzing::guardian_zygote(&data);
        }
    }
}
