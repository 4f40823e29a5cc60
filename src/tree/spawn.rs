//! `posix_spawn` of a workload with a clean start.
//!
//! Why not `std::process::Command`: it resets only SIGPIPE, so a workload started from a shell
//! that ignores SIGINT and SIGQUIT (`nohup`, `&` in a non-interactive shell) would inherit them
//! ignored, and Ctrl-C or a stop's first signal would do nothing to it. And why not `pre_exec`:
//! it forces a real `fork` of the host (30-130 ms in a large host process, research note), where
//! `posix_spawn` uses `clone(CLONE_VM | CLONE_VFORK)`.
//!
//! Invariants: the child gets every catchable signal at its default disposition
//! (`POSIX_SPAWN_SETSIGDEF` with the full set), an empty mask, its own process group (for a PTY
//! launch without a guardian, its own session, whose group it leads, with the terminal as its
//! controlling terminal), the three pipe ends (or the terminal's slave) as 0, 1 and 2, and
//! nothing else: every descriptor above 2 is closed in the child
//! (`closefrom(3)` as a spawn action), so not even one the host inherited without close-on-exec
//! passes on; the pipe ends are moved above 2 before the `dup2` actions so that no action
//! overwrites another's source. glibc keeps its two internal real-time signals (32 and 33)
//! ignored in any `posix_spawn` child, as `std::process::Command` does; they are below
//! `SIGRTMIN` and no program can use them.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawn};
use nix::sys::signal::SigSet;
use tokio::net::unix::pipe;

use super::pty::{self, PtyMaster, PtySize};

/// What to launch. The working directory is explicit; nothing is resolved against ours.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    /// Names the launch's scope (the process handle): its receipt file and cgroup.
    pub name: String,
    /// Where a guardian creates its receipt file.
    pub receipts: PathBuf,
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// The workload's whole environment (`crate::environment` builds it): nothing of the
    /// supervisor's own passes unless it is in here.
    pub env: Vec<(OsString, OsString)>,
    /// A terminal of this size as the workload's standard streams (and controlling terminal),
    /// instead of pipes.
    pub pty: Option<PtySize>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    #[error("program {0} not found")]
    NotFound(String),
    #[error("program {0} is not executable")]
    NotExecutable(String),
    #[error("{what} contains a NUL byte")]
    Nul { what: &'static str },
    #[error("cannot create the {what}: {cause}")]
    Setup {
        what: &'static str,
        cause: std::io::Error,
    },
    #[error("cannot spawn {program}: {cause}")]
    Spawn {
        program: String,
        cause: std::io::Error,
    },
    #[error("cannot hold the spawned process through a pidfd: {cause}")]
    Adopt { cause: std::io::Error },
    #[error("the guardian failed: {0}")]
    Guardian(String),
    /// The scope could not be recorded; the gated workload never ran.
    #[error("the tree's scope was not recorded: {0}")]
    Registration(String),
}

fn setup(what: &'static str) -> impl Fn(nix::errno::Errno) -> SpawnError {
    move |e| SpawnError::Setup {
        what,
        cause: std::io::Error::from(e),
    }
}

/// A close-on-exec pipe whose ends are both above the standard streams.
fn pipe_above_stdio() -> Result<(OwnedFd, OwnedFd), SpawnError> {
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(setup("pipe"))?;
    Ok((above_stdio(r)?, above_stdio(w)?))
}

fn above_stdio(fd: OwnedFd) -> Result<OwnedFd, SpawnError> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    dup_from(&fd, 3, "pipe")
}

/// A close-on-exec duplicate of `fd` numbered `min` or more.
fn dup_from(fd: impl AsFd, min: i32, what: &'static str) -> Result<OwnedFd, SpawnError> {
    rustix::io::fcntl_dupfd_cloexec(fd, min).map_err(|e| SpawnError::Setup {
        what,
        cause: e.into(),
    })
}

/// `posix_spawn_file_actions_addclosefrom_np(from)` (glibc 2.34), which nix does not wrap:
/// closes in the child every descriptor from `from` up, including any the host inherited
/// without close-on-exec and would otherwise pass on.
#[allow(unsafe_code)]
fn add_close_from(actions: &mut PosixSpawnFileActions, from: i32) -> Result<(), SpawnError> {
    let actions: *mut PosixSpawnFileActions = actions;
    // SAFETY: as in `add_chdir`: the cast pointer is a valid, initialised file-actions object
    // borrowed mutably for this call only.
    let rc = unsafe { libc::posix_spawn_file_actions_addclosefrom_np(actions.cast(), from) };
    if rc == 0 {
        Ok(())
    } else {
        Err(SpawnError::Setup {
            what: "close-descriptors action",
            cause: std::io::Error::from_raw_os_error(rc),
        })
    }
}

/// `posix_spawn_file_actions_addchdir_np`, which nix does not wrap (glibc 2.29, musl 1.1.24).
#[allow(unsafe_code)]
fn add_chdir(actions: &mut PosixSpawnFileActions, dir: &Path) -> Result<(), SpawnError> {
    let dir = CString::new(dir.as_os_str().as_bytes()).map_err(|_| SpawnError::Nul {
        what: "the working directory",
    })?;
    let actions: *mut PosixSpawnFileActions = actions;
    // SAFETY: `PosixSpawnFileActions` is `#[repr(transparent)]` over
    // `libc::posix_spawn_file_actions_t` and was initialised by `init`, so the cast pointer is a
    // valid, initialised file-actions object that we borrow mutably for this call; `dir` is a
    // NUL-terminated string that glibc copies before returning.
    let rc = unsafe { libc::posix_spawn_file_actions_addchdir_np(actions.cast(), dir.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(SpawnError::Setup {
            what: "working-directory action",
            cause: std::io::Error::from_raw_os_error(rc),
        })
    }
}

fn cstring(bytes: &[u8], what: &'static str) -> Result<CString, SpawnError> {
    CString::new(bytes).map_err(|_| SpawnError::Nul { what })
}

/// Finds a bare program name on the workload's PATH (as the shell would), so that an override
/// of PATH is honoured and "not found" is told apart from "not executable".
fn resolve(program: &str, cwd: &Path, path: Option<&OsStr>) -> Result<PathBuf, SpawnError> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        let p = Path::new(program);
        return Ok(if p.is_absolute() {
            p.into()
        } else {
            cwd.join(p)
        });
    }
    let path = path.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    let mut found_unexecutable = false;
    for dir in std::env::split_paths(path) {
        let dir = if dir.as_os_str().is_empty() {
            cwd.to_owned()
        } else if dir.is_absolute() {
            dir
        } else {
            cwd.join(dir)
        };
        let candidate = dir.join(program);
        match std::fs::metadata(&candidate) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => return Ok(candidate),
            Ok(m) if m.is_file() => found_unexecutable = true,
            _ => {}
        }
    }
    Err(if found_unexecutable {
        SpawnError::NotExecutable(program.to_owned())
    } else {
        SpawnError::NotFound(program.to_owned())
    })
}

/// The supervisor's ends of the workload's standard streams.
pub(super) type Ends = (pipe::Sender, pipe::Receiver, pipe::Receiver);

/// The supervisor's side of the workload's standard streams: three pipes, or a terminal's
/// master.
#[derive(Debug)]
pub enum Streams {
    Pipes(Ends),
    Terminal(PtyMaster),
}

/// How the spawned process gets a terminal as its standard streams.
#[derive(Debug, Clone, Copy)]
pub(super) struct TerminalSetup {
    pub size: PtySize,
    /// The spawned process itself is the workload: it starts a new session (instead of a new
    /// process group) and opens the slave as descriptor 0, which makes the terminal its
    /// controlling terminal. Without it (a guardian), the slave is only duplicated onto 0-2:
    /// the guardian's workload starts the session and claims the terminal itself.
    pub session: bool,
}

/// A workload resolved for exec: its program's path, argv and environment.
#[derive(Debug)]
pub(super) struct Image {
    pub path: CString,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
}

/// Resolves `spec`'s program (on the workload's PATH) and builds its argv and environment.
pub(super) fn image(spec: &SpawnSpec) -> Result<Image, SpawnError> {
    let env = &spec.env;
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    let program = resolve(&spec.program, &spec.cwd, path_var)?;
    let path = cstring(program.as_os_str().as_bytes(), "the program")?;
    let mut argv = Vec::with_capacity(1 + spec.args.len());
    argv.push(cstring(spec.program.as_bytes(), "the program")?);
    for arg in &spec.args {
        argv.push(cstring(arg.as_bytes(), "an argument")?);
    }
    let mut envp = Vec::with_capacity(env.len());
    for (k, v) in env {
        let mut entry = k.clone().into_vec();
        entry.push(b'=');
        entry.extend_from_slice(v.as_bytes());
        envp.push(cstring(&entry, "an environment variable")?);
    }
    Ok(Image { path, argv, envp })
}

/// Spawns the workload directly; returns its pid and our side of its standard streams.
pub(super) fn spawn(spec: &SpawnSpec) -> Result<(u32, Streams), SpawnError> {
    let image = image(spec)?;
    let terminal = spec.pty.map(|size| TerminalSetup {
        size,
        session: true,
    });
    spawn_image(&image, &spec.cwd, None, &spec.program, terminal)
}

/// Spawns `image` in `cwd` with fresh pipes (or, with `terminal`, a fresh terminal) as 0, 1
/// and 2 and, when given, `control` as descriptor 3 (the guardian's control socket); nothing
/// else passes. `name` names the program in errors.
pub(super) fn spawn_image(
    image: &Image,
    cwd: &Path,
    control: Option<BorrowedFd<'_>>,
    name: &str,
    terminal: Option<TerminalSetup>,
) -> Result<(u32, Streams), SpawnError> {
    let mut start = |stdio: StdioActions<'_>| spawn_with(image, cwd, control, name, stdio);
    start_with_streams(terminal, &mut start)
}

/// Starts a process with the descriptors its `StdioActions` name as 0-2; returns its pid.
pub(super) type Start<'s> = dyn FnMut(StdioActions<'_>) -> Result<u32, SpawnError> + 's;

/// Makes fresh pipes (or, with `terminal`, a fresh terminal) for a process's standard streams,
/// has `start` start it with their child ends, and returns its pid and our ends. The child ends
/// are ours only until `start` returns: afterwards the process holds their only descriptors.
pub(super) fn start_with_streams(
    terminal: Option<TerminalSetup>,
    start: &mut Start<'_>,
) -> Result<(u32, Streams), SpawnError> {
    match terminal {
        None => spawn_piped(start),
        Some(t) => spawn_on_terminal(t, start),
    }
}

/// Spawns `image` in the root directory with /dev/null as 0-2 and `control` as descriptor 3: a
/// helper process of the supervisor's (the guardian zygote), with no streams of its own.
pub(super) fn spawn_detached(
    image: &Image,
    control: BorrowedFd<'_>,
    name: &str,
) -> Result<u32, SpawnError> {
    spawn_with(
        image,
        Path::new("/"),
        Some(control),
        name,
        StdioActions::Null,
    )
}

fn spawn_piped(start: &mut Start<'_>) -> Result<(u32, Streams), SpawnError> {
    let (stdin_r, stdin_w) = pipe_above_stdio()?;
    let (stdout_r, stdout_w) = pipe_above_stdio()?;
    let (stderr_r, stderr_w) = pipe_above_stdio()?;
    for fd in [&stdout_r, &stderr_r] {
        // Best effort: the default pipe works, only slower.
        let _ = fcntl(fd, FcntlArg::F_SETPIPE_SZ(crate::limits::PIPE_BYTES));
    }
    let pid = start(StdioActions::Dup([
        stdin_r.as_fd(),
        stdout_w.as_fd(),
        stderr_w.as_fd(),
    ]))?;
    drop((stdin_r, stdout_w, stderr_w));
    let ends: std::io::Result<Ends> = (|| {
        Ok((
            pipe::Sender::from_owned_fd(stdin_w)?,
            pipe::Receiver::from_owned_fd(stdout_r)?,
            pipe::Receiver::from_owned_fd(stderr_r)?,
        ))
    })();
    let ends = ends.map_err(|cause| SpawnError::Setup {
        what: "pipe registration",
        cause,
    })?;
    Ok((pid, Streams::Pipes(ends)))
}

/// Starts with a fresh terminal of `t.size` as the standard streams.
fn spawn_on_terminal(
    t: TerminalSetup,
    start: &mut Start<'_>,
) -> Result<(u32, Streams), SpawnError> {
    let pair = pty::open(t.size).map_err(|cause| SpawnError::Setup {
        what: "terminal",
        cause,
    })?;
    let slave = above_stdio(pair.slave)?;
    let stdio = if t.session {
        StdioActions::Session(&pair.slave_path)
    } else {
        StdioActions::Dup([slave.as_fd(), slave.as_fd(), slave.as_fd()])
    };
    let pid = start(stdio)?;
    drop(slave);
    let master = PtyMaster::new(pair.master).map_err(|cause| SpawnError::Setup {
        what: "terminal registration",
        cause,
    })?;
    Ok((pid, Streams::Terminal(master)))
}

/// How the spawn actions give the child its descriptors 0-2.
pub(super) enum StdioActions<'a> {
    /// Duplicate these (all above 2) onto 0, 1 and 2; a new process group.
    Dup([BorrowedFd<'a>; 3]),
    /// A new session, the terminal opened as 0 (which makes it the session's controlling
    /// terminal: glibc runs `setsid` before the file actions) and duplicated onto 1 and 2.
    Session(&'a Path),
    /// /dev/null as 0, 1 and 2; a new process group.
    Null,
}

/// The one `posix_spawn` of this module: `image` with `stdio` as 0-2, `control` as 3 when given,
/// nothing else, every signal at its default and an empty mask; returns its pid.
pub(super) fn spawn_with(
    image: &Image,
    cwd: &Path,
    control: Option<BorrowedFd<'_>>,
    name: &str,
    stdio: StdioActions<'_>,
) -> Result<u32, SpawnError> {
    // The control socket must not sit on 0-3, where a dup2 action would overwrite it first;
    // only then is it moved (a host that closed its standard streams), else used as it is.
    let moved = match control {
        Some(fd) if fd.as_raw_fd() <= 3 => Some(dup_from(fd, 4, "control socket")?),
        _ => None,
    };
    let control = moved.as_ref().map(AsFd::as_fd).or(control);
    let session = matches!(stdio, StdioActions::Session(_));
    let actions = file_actions(stdio, control, cwd)?;
    let attr = spawn_attributes(session)?;
    let pid = posix_spawn(
        image.path.as_c_str(),
        &actions,
        &attr,
        &image.argv,
        &image.envp,
    )
    .map_err(|e| spawn_failure(name, e))?;
    drop(moved);
    u32::try_from(pid.as_raw()).map_err(|_| SpawnError::Spawn {
        program: name.to_owned(),
        cause: std::io::Error::other("negative pid"),
    })
}

/// The file actions that leave the child `stdio` as 0-2, `control` (above 3) as 3, nothing
/// else open, in `cwd`.
fn file_actions(
    stdio: StdioActions<'_>,
    control: Option<BorrowedFd<'_>>,
    cwd: &Path,
) -> Result<PosixSpawnFileActions, SpawnError> {
    let mut actions = PosixSpawnFileActions::init().map_err(setup("spawn file actions"))?;
    match stdio {
        // dup2 clears close-on-exec on the target; the sources (all above 2) close at exec.
        StdioActions::Dup([i, o, e]) => actions
            .add_dup2(i.as_raw_fd(), 0)
            .and_then(|()| actions.add_dup2(o.as_raw_fd(), 1))
            .and_then(|()| actions.add_dup2(e.as_raw_fd(), 2))
            .map_err(setup("spawn file actions"))?,
        StdioActions::Session(path) => actions
            .add_open(0, path, OFlag::O_RDWR, nix::sys::stat::Mode::empty())
            .and_then(|()| actions.add_dup2(0, 1))
            .and_then(|()| actions.add_dup2(0, 2))
            .map_err(setup("spawn file actions"))?,
        StdioActions::Null => actions
            .add_open(0, "/dev/null", OFlag::O_RDWR, nix::sys::stat::Mode::empty())
            .and_then(|()| actions.add_dup2(0, 1))
            .and_then(|()| actions.add_dup2(0, 2))
            .map_err(setup("spawn file actions"))?,
    }
    if let Some(control) = &control {
        actions
            .add_dup2(control.as_raw_fd(), 3)
            .map_err(setup("spawn file actions"))?;
    }
    add_close_from(&mut actions, if control.is_some() { 4 } else { 3 })?;
    add_chdir(&mut actions, cwd)?;
    Ok(actions)
}

fn spawn_attributes(session: bool) -> Result<PosixSpawnAttr, SpawnError> {
    let mut attr = PosixSpawnAttr::init().map_err(setup("spawn attributes"))?;
    // A session leader leads its own process group too (group id = pid), so the group
    // mechanism signals it the same way; setpgid after setsid would fail, hence one or the
    // other.
    let grouping = if session {
        PosixSpawnFlags::from_bits_retain(i32::from(libc::POSIX_SPAWN_SETSID))
    } else {
        PosixSpawnFlags::POSIX_SPAWN_SETPGROUP
    };
    attr.set_flags(
        grouping | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF | PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK,
    )
    .and_then(|()| attr.set_pgroup(nix::unistd::Pid::from_raw(0)))
    .and_then(|()| attr.set_sigdefault(&SigSet::all()))
    .and_then(|()| attr.set_sigmask(&SigSet::empty()))
    .map_err(setup("spawn attributes"))?;
    Ok(attr)
}

fn spawn_failure(name: &str, e: nix::errno::Errno) -> SpawnError {
    match e {
        nix::errno::Errno::ENOENT => SpawnError::NotFound(name.to_owned()),
        nix::errno::Errno::EACCES | nix::errno::Errno::ENOEXEC => {
            SpawnError::NotExecutable(name.to_owned())
        }
        other => SpawnError::Spawn {
            program: name.to_owned(),
            cause: std::io::Error::from(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_names_are_found_on_the_given_path_and_told_apart() {
        let cwd = Path::new("/");
        let found = resolve("sh", cwd, Some(OsStr::new("/nonexistent:/bin:/usr/bin"))).unwrap();
        assert!(found.ends_with("sh"), "{found:?}");
        assert!(matches!(
            resolve("no-such-program-xyz", cwd, Some(OsStr::new("/bin"))),
            Err(SpawnError::NotFound(_))
        ));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plain"), b"#!/bin/sh\n").unwrap();
        assert!(matches!(
            resolve("plain", cwd, Some(dir.path().as_os_str())),
            Err(SpawnError::NotExecutable(_))
        ));
        assert_eq!(
            resolve("./x", Path::new("/tmp"), None).unwrap(),
            PathBuf::from("/tmp/./x")
        );
    }
}
