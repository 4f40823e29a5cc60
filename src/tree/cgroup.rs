//! Per-launch cgroup v2 scopes: a directory per launch that holds the whole tree of a workload,
//! whatever it does with sessions and process groups, and that can be frozen, killed as one, and
//! proven empty.
//!
//! Plain blocking code (std, rustix, nix): it runs in the single-threaded guardian, and in the
//! supervisor only on the blocking pool.
//!
//! Invariants:
//! - The hierarchy is found, never assumed: the `cgroup2` mount from /proc/self/mountinfo and our
//!   own cgroup from the `0::` line of /proc/self/cgroup. Scopes live in a base directory that is
//!   a child of our own cgroup, and this process never enters the base or a scope, so a scope's
//!   `cgroup.kill` can never reach the process that wrote it.
//! - A process enters a scope only by being born in it (`clone3(CLONE_INTO_CGROUP)`): nothing
//!   here writes `cgroup.procs`, so there is no window in which a child could fork outside its
//!   scope, and nothing enables a controller, so the no-internal-processes rule never applies.
//! - Names are one path component of ASCII letters, digits, `-` and `_`: they cannot climb out of
//!   the base, need no escaping in /proc, and cannot collide with an interface file (those all
//!   contain a dot).
//! - An existing scope is reused only when no process is in it or below it, and only after it
//!   is thawed, so a new workload never joins a live tree or is born frozen.
//! - Every wait is bounded by its caller's timeout and sleeps in `poll` on `cgroup.events`,
//!   which the kernel notifies on every change (rate-limited: see `POLL_SLICE_MIN`); it never
//!   spins.
//! - Removal never touches a cgroup that holds a process, nor a directory that is not a cgroup.
//! - The /proc parsers are total: any text yields a value or `None`, never a panic.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A wait sleeps in `poll` for at most this long before it reads `cgroup.events` again, doubling
/// up to [`POLL_SLICE_MAX`]. The kernel wakes a waiter on every change, but no more than once per
/// `DIV_ROUND_UP(HZ, 100)` jiffies per file (`CGROUP_FILE_NOTIFY_MIN_INTV`): a change soon after
/// the previous one (a freeze right after a spawn, a kill right after a thaw) is announced only
/// when that interval ends, measured 13-20 ms here (HZ=250) for a change that took 0.2 ms. The
/// short first slices see such a change at once; the cap bounds what a lost notification costs.
const POLL_SLICE_MIN: Duration = Duration::from_millis(1);
const POLL_SLICE_MAX: Duration = Duration::from_millis(100);

/// Longest accepted base or scope name; far below NAME_MAX, and enough for a prefix and a hash.
const NAME_BYTES_MAX: usize = 128;

/// Why per-launch cgroups cannot be used here (printed by callers that fall back).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Unavailable {
    #[error("cannot read {file}: {cause}")]
    Proc {
        file: &'static str,
        cause: io::Error,
    },
    #[error("no cgroup v2 hierarchy is mounted")]
    NoMount,
    #[error("this process has no cgroup v2 membership (no 0:: line in /proc/self/cgroup)")]
    NotInV2,
    #[error("our cgroup {cgroup} is not visible under any cgroup2 mount")]
    NotVisible { cgroup: String },
    #[error(
        "bad cgroup name {name:?}: want 1 to {NAME_BYTES_MAX} ASCII letters, digits, '-' or '_'"
    )]
    BadName { name: String },
    #[error("cannot create cgroups in {}: {cause}", dir.display())]
    NotWritable { dir: PathBuf, cause: io::Error },
    #[error("cgroup.kill is missing (Linux 5.14 or later is needed)")]
    NoKillFile,
    #[error("cgroup.freeze is missing (Linux 5.2 or later is needed)")]
    NoFreezeFile,
    #[error("the probe cgroup failed at {step}: {cause}")]
    Probe {
        step: &'static str,
        cause: io::Error,
    },
}

/// The directory under which this process creates its scopes, proven usable.
#[derive(Debug, Clone)]
pub struct CgroupBase {
    dir: PathBuf,
}

impl CgroupBase {
    /// Finds the v2 hierarchy and our place in it, creates `<mount>/<our cgroup>/<name>` if it
    /// is missing, and proves it usable: a probe child is created, must have `cgroup.kill` and
    /// `cgroup.freeze` and a readable `cgroup.events`, and is removed. A base this call created
    /// is removed again if the probe fails.
    pub fn probe(name: &str) -> Result<CgroupBase, Unavailable> {
        if !valid_name(name) {
            return Err(Unavailable::BadName {
                name: name.to_owned(),
            });
        }
        let mountinfo = read_proc("/proc/self/mountinfo")?;
        let mounts = cgroup2_mounts(&mountinfo);
        if mounts.is_empty() {
            return Err(Unavailable::NoMount);
        }
        let proc_cgroup = read_proc("/proc/self/cgroup")?;
        let own = own_cgroup(&proc_cgroup).ok_or(Unavailable::NotInV2)?;
        let parent = locate(&mounts, own).ok_or_else(|| Unavailable::NotVisible {
            cgroup: own.to_owned(),
        })?;
        let dir = parent.join(name);
        let created = match fs::create_dir(&dir) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(cause) => return Err(Unavailable::NotWritable { dir: parent, cause }),
        };
        let base = CgroupBase { dir };
        let proven = base.prove();
        if proven.is_err() && created {
            // Best effort: the probe's own failure is the error worth reporting.
            let _ = fs::remove_dir(&base.dir);
        }
        proven.map(|()| base)
    }

    fn prove(&self) -> Result<(), Unavailable> {
        // Unique within this process too, so that two probes of one base never remove each
        // other's probe.
        static PROBES: AtomicU32 = AtomicU32::new(0);
        let n = PROBES.fetch_add(1, Ordering::Relaxed);
        let name = format!("probe-{}-{n}", std::process::id());
        let probe = self.create_scope(&name).map_err(|cause| {
            if cause.kind() == io::ErrorKind::PermissionDenied
                || cause.kind() == io::ErrorKind::ReadOnlyFilesystem
            {
                Unavailable::NotWritable {
                    dir: self.dir.clone(),
                    cause,
                }
            } else {
                Unavailable::Probe {
                    step: "mkdir",
                    cause,
                }
            }
        })?;
        let checked = if !probe.path.join("cgroup.kill").exists() {
            Err(Unavailable::NoKillFile)
        } else if !probe.path.join("cgroup.freeze").exists() {
            Err(Unavailable::NoFreezeFile)
        } else {
            match probe.populated() {
                Ok(false) => Ok(()),
                Ok(true) => Err(Unavailable::Probe {
                    step: "cgroup.events",
                    cause: io::Error::other("a fresh cgroup reads populated 1"),
                }),
                Err(cause) => Err(Unavailable::Probe {
                    step: "cgroup.events",
                    cause,
                }),
            }
        };
        let removed = probe.remove_emptied().map_err(|cause| Unavailable::Probe {
            step: "rmdir",
            cause,
        });
        checked.and(removed)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A fresh child cgroup for one launch.
    ///
    /// If the directory exists already it is reused when nothing is in it or below it (a launch
    /// retried after a crash between the `mkdir` and the record of its scope finds its own empty
    /// directory), after it is thawed so that the workload is not born frozen; a populated one
    /// is `AlreadyExists`, since it holds someone's live tree.
    pub fn create_scope(&self, name: &str) -> io::Result<Scope> {
        if !valid_name(name) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                Unavailable::BadName {
                    name: name.to_owned(),
                },
            ));
        }
        let scope = Scope {
            path: self.dir.join(name),
        };
        match fs::create_dir(&scope.path) {
            Ok(()) => Ok(scope),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if scope.populated()? {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("cgroup {} exists and is populated", scope.path.display()),
                    ));
                }
                scope.thaw()?;
                Ok(scope)
            }
            Err(e) => Err(context(e, "mkdir", &scope.path)),
        }
    }
}

/// One launch's cgroup. Every operation but [`Scope::remove`] fails with `NotFound` once the
/// directory is gone.
#[derive(Debug, Clone)]
pub struct Scope {
    path: PathBuf,
}

impl Scope {
    /// A recorded scope, reopened on restore. Nothing is checked until it is used.
    pub fn at(path: PathBuf) -> Scope {
        Scope { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory as an `O_PATH` descriptor, which is all `CLONE_INTO_CGROUP` needs.
    pub fn open_dir(&self) -> io::Result<OwnedFd> {
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(&self.path)
            .map(OwnedFd::from)
            .map_err(|e| context(e, "open", &self.path))
    }

    /// True while the directory is a cgroup (its `cgroup.events` is there).
    pub fn exists(&self) -> bool {
        self.path.join("cgroup.events").exists()
    }

    /// Whether any process is in this cgroup or one below it. Zombies do not count: a process
    /// leaves its cgroup when it exits, not when it is reaped.
    pub fn populated(&self) -> io::Result<bool> {
        let path = self.path.join("cgroup.events");
        let text = fs::read_to_string(&path).map_err(|e| context(e, "read", &path))?;
        flag(&text, "populated", &path)
    }

    /// The processes in this cgroup itself, as pids of our namespace. Processes in cgroups the
    /// workload created below it are not listed ([`Scope::populated`] covers them).
    pub fn procs(&self) -> io::Result<Vec<u32>> {
        let path = self.path.join("cgroup.procs");
        let text = fs::read_to_string(&path).map_err(|e| context(e, "read", &path))?;
        text.lines()
            .map(|line| {
                line.parse::<u32>().map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{}: not a pid: {line:?}", path.display()),
                    )
                })
            })
            .collect()
    }

    /// Freezes every process in and below the scope and waits until the kernel reports them all
    /// frozen (`frozen 1`). `Ok(false)` if that took longer than `timeout`: the scope stays
    /// freezing, and the caller thaws or kills it. (Frozen tasks show `S` in /proc, not `T`:
    /// only `cgroup.events` says whether the freeze is complete.)
    pub fn freeze(&self, timeout: Duration) -> io::Result<bool> {
        let events = self.open_events()?;
        self.write("cgroup.freeze", b"1")?;
        self.wait_for(&events, "frozen", true, timeout)
    }

    pub fn thaw(&self) -> io::Result<()> {
        self.write("cgroup.freeze", b"0")
    }

    /// SIGKILLs every process in and below the scope, frozen ones included, at once: none can
    /// fork a survivor in between.
    pub fn kill(&self) -> io::Result<()> {
        self.write("cgroup.kill", b"1")
    }

    /// Waits until no process is in or below the scope. `Ok(false)` on timeout.
    pub fn wait_empty(&self, timeout: Duration) -> io::Result<bool> {
        let events = self.open_events()?;
        self.wait_for(&events, "populated", false, timeout)
    }

    /// Removes the base cgroup this scope was made in (its parent) if nothing is left in it:
    /// for the last scope of a supervisor that went before its trees did (`rmdir` of a cgroup
    /// that holds a scope or a process fails, and leaves it to whoever holds those). A later
    /// launcher of the same root makes its base again.
    pub fn remove_base_if_empty(&self) {
        if let Some(base) = self.path.parent() {
            let _ = fs::remove_dir(base);
        }
    }

    /// Removes the scope, and first any cgroups the workload created below it (a root workload
    /// may; they would keep the directory busy after its last process is gone). A scope that is
    /// already gone is `Ok`; one that still holds a process is `ResourceBusy`, at once, with
    /// nothing below it touched; a directory that is not a cgroup is an error, and stays.
    pub fn remove(&self) -> io::Result<()> {
        match self.populated() {
            Ok(false) => {}
            Ok(true) => return Err(still_populated(&self.path)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return match fs::symlink_metadata(&self.path) {
                    Err(gone) if gone.kind() == io::ErrorKind::NotFound => Ok(()),
                    _ => Err(e),
                };
            }
            Err(e) => return Err(e),
        }
        // Depth first without recursion: (directory, its children already queued).
        let mut stack = vec![(self.path.clone(), false)];
        while let Some((dir, expanded)) = stack.pop() {
            if expanded {
                remove_one(&dir)?;
                continue;
            }
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(context(e, "list", &dir)),
            };
            stack.push((dir.clone(), true));
            for entry in entries {
                let entry = entry.map_err(|e| context(e, "list", &dir))?;
                // Interface files are files; every directory in a cgroup is a child cgroup.
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((entry.path(), false));
                }
            }
        }
        Ok(())
    }

    /// [`Scope::remove`] for a caller that has just read `populated 0` from this scope (so it
    /// is a cgroup): one `rmdir`, which the kernel refuses while a process or a child cgroup is
    /// in it; only then the full removal, child cgroups first.
    pub fn remove_emptied(&self) -> io::Result<()> {
        match fs::remove_dir(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(_) => self.remove(),
        }
    }

    fn write(&self, file: &str, value: &[u8]) -> io::Result<()> {
        let path = self.path.join(file);
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| f.write_all(value))
            .map_err(|e| context(e, "write", &path))
    }

    fn open_events(&self) -> io::Result<File> {
        let path = self.path.join("cgroup.events");
        File::open(&path).map_err(|e| context(e, "open", &path))
    }

    /// Waits until `key` in the open `cgroup.events` reads `want`. kernfs marks an open file
    /// when the kernel notifies it, and each read clears the mark; so reading before every
    /// `poll` loses no change that happens between the two.
    fn wait_for(
        &self,
        events: &File,
        key: &str,
        want: bool,
        timeout: Duration,
    ) -> io::Result<bool> {
        let path = self.path.join("cgroup.events");
        // No deadline for a timeout too large to add: a caller who means "forever".
        let deadline = Instant::now().checked_add(timeout);
        let mut buf = [0u8; 256];
        let mut slice = POLL_SLICE_MIN;
        loop {
            let n = events
                .read_at(&mut buf, 0)
                .map_err(|e| context(e, "read", &path))?;
            let text = std::str::from_utf8(buf.get(..n).unwrap_or_default())
                .map_err(|_| bad_events(&path))?;
            if flag(text, key, &path)? == want {
                return Ok(true);
            }
            let now = Instant::now();
            let sleep = match deadline {
                Some(d) if d <= now => return Ok(false),
                Some(d) => (d - now).min(slice),
                None => slice,
            };
            slice = (slice * 2).min(POLL_SLICE_MAX);
            let sleep = rustix::event::Timespec::try_from(sleep).map_err(io::Error::other)?;
            let mut fds = [rustix::event::PollFd::new(
                events,
                rustix::event::PollFlags::PRI | rustix::event::PollFlags::ERR,
            )];
            match rustix::event::poll(&mut fds, Some(&sleep)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(context(e.into(), "poll", &path)),
            }
        }
    }
}

/// rmdir of one cgroup: gone already is fine; busy means a process is still in it.
fn remove_one(dir: &Path) -> io::Result<()> {
    match fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::ResourceBusy => Err(still_populated(dir)),
        Err(e) => Err(context(e, "rmdir", dir)),
    }
}

fn still_populated(dir: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::ResourceBusy,
        format!("cgroup {} is still populated", dir.display()),
    )
}

fn read_proc(file: &'static str) -> Result<String, Unavailable> {
    // Lossy: a mount point that is not UTF-8 elsewhere in the table must not make cgroups
    // unavailable; if ours were mangled, the probe's mkdir fails and says where.
    fs::read(file)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .map_err(|cause| Unavailable::Proc { file, cause })
}

fn context(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

fn bad_events(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: unexpected contents", path.display()),
    )
}

fn flag(text: &str, key: &str, path: &Path) -> io::Result<bool> {
    event_flag(text, key).ok_or_else(|| bad_events(path))
}

fn valid_name(name: &str) -> bool {
    (1..=NAME_BYTES_MAX).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The value of `key` in a `cgroup.events` text (`populated 1\nfrozen 0\n`).
pub(crate) fn event_flag(text: &str, key: &str) -> Option<bool> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        if k != key {
            return None;
        }
        match v {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        }
    })
}

/// A `cgroup2` line of /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cgroup2Mount {
    /// The cgroup at the root of the mount: `/` unless a subtree was mounted (containers).
    pub root: PathBuf,
    pub mount_point: PathBuf,
}

/// Every `cgroup2` mount in a /proc/PID/mountinfo text, in order.
///
/// A line is `id parent major:minor root mount-point options [optional...] - fstype source
/// super-options`; the optional fields end at a lone `-`, and paths escape space, tab, newline
/// and backslash as three octal digits (`\040`).
pub(crate) fn cgroup2_mounts(mountinfo: &str) -> Vec<Cgroup2Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let root = fields.nth(3)?;
            let mount_point = fields.next()?;
            let _options = fields.next()?;
            fields.find(|f| *f == "-")?;
            (fields.next()? == "cgroup2").then(|| Cgroup2Mount {
                root: unescape(root),
                mount_point: unescape(mount_point),
            })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes; a backslash not followed by three octal digits of one byte
/// stays as it is.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let escaped = (b == b'\\')
            .then(|| bytes.get(i + 1..i + 4))
            .flatten()
            .and_then(octal_byte);
        match escaped {
            Some(v) => {
                out.push(v);
                i += 4;
            }
            None => {
                out.push(b);
                i += 1;
            }
        }
    }
    PathBuf::from(OsString::from_vec(out))
}

fn octal_byte(digits: &[u8]) -> Option<u8> {
    let value = digits.iter().try_fold(0u16, |acc, &d| {
        matches!(d, b'0'..=b'7').then(|| acc * 8 + u16::from(d - b'0'))
    })?;
    u8::try_from(value).ok()
}

/// Our cgroup v2 path from a /proc/PID/cgroup text: the `0::` line (hierarchy 0, no
/// controllers). The path itself may contain ':'.
pub(crate) fn own_cgroup(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
}

/// Where our cgroup `own` is in the file system: under the first mount whose root contains it.
/// `None` when no mount shows it, or when a path is not plainly absolute (a cgroup outside our
/// cgroup namespace reads as `/../..`; a relative mount point would resolve against the working
/// directory).
pub(crate) fn locate(mounts: &[Cgroup2Mount], own: &str) -> Option<PathBuf> {
    fn plain(path: &Path) -> bool {
        path.is_absolute()
            && path
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
    }
    let own = Path::new(own);
    if !plain(own) {
        return None;
    }
    mounts
        .iter()
        .filter(|m| plain(&m.root) && plain(&m.mount_point))
        .find_map(|m| {
            let below = own.strip_prefix(&m.root).ok()?;
            Some(if below.as_os_str().is_empty() {
                m.mount_point.clone()
            } else {
                m.mount_point.join(below)
            })
        })
}

/// The result of [`fork_into`], as seen by each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forked {
    Parent { child: u32 },
    Child,
}

/// The kernel's `struct clone_args` up to `cgroup` (`CLONE_ARGS_SIZE_VER2`, Linux 5.7). Declared
/// here because libc 0.2 declares it only for some 64-bit targets.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const _: () = assert!(size_of::<CloneArgs>() == 88);

/// Not `libc::CLONE_INTO_CGROUP`: libc 0.2.191 declares it as a `c_int`, where 0x2_0000_0000
/// truncates to 0, and a `clone3` with it would quietly fork outside the cgroup.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Forks the calling process. With `Some(dir)` (a cgroup v2 directory, e.g. from
/// [`Scope::open_dir`]) the child is created inside that cgroup by `clone3(CLONE_INTO_CGROUP)`:
/// it never runs anywhere else, so it cannot fork a process outside it (and, research note, it
/// costs 0.1-0.17 ms here, where a first write to a fresh cgroup's `cgroup.procs` costs 8.5 ms).
/// With `None` it is a plain `fork`. The parent stays where it is. A kernel older than 5.7, or a
/// seccomp filter that refuses `clone3` (older container runtimes answer `ENOSYS`), fails the
/// call: it never falls back to forking outside the cgroup.
///
/// Meant for the single-threaded guardian. The `Some` path calls the `clone3` system call
/// directly, bypassing libc's `fork`: no `pthread_atfork` handlers run, and libc's per-thread
/// state in the child (its cached thread id, robust-futex list, malloc's locks) is not reset.
///
/// # Safety
///
/// The calling process should be single-threaded. In the child, until it calls `execve` or
/// `_exit`, only async-signal-safe functions may run: no allocation, no locks, no stdio, no
/// panics. (In a multi-threaded process, such as a test harness, that rule is also what keeps the
/// child sound, exactly as for `fork(2)`: a lock another thread held at the fork stays held in
/// the child forever.)
#[allow(unsafe_code)]
pub(crate) unsafe fn fork_into(cgroup: Option<BorrowedFd<'_>>) -> io::Result<Forked> {
    let Some(dir) = cgroup else {
        // SAFETY: what happens in the child is the caller's contract, restated in this
        // function's `# Safety`, which is nix's `fork` contract.
        return match unsafe { nix::unistd::fork() }? {
            nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent {
                child: u32::try_from(child.as_raw()).map_err(io::Error::other)?,
            }),
            nix::unistd::ForkResult::Child => Ok(Forked::Child),
        };
    };
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: u64::try_from(dir.as_raw_fd()).map_err(io::Error::other)?,
        ..CloneArgs::default()
    };
    // SAFETY: `dir` is borrowed, so the descriptor `args` names stays open for the call; the
    // rest is `clone3`'s contract, which this function's `# Safety` passes on.
    unsafe { clone3(&args) }
}

/// Duplicates the process as fork does, by `clone3(args)`.
///
/// # Safety
///
/// `args` has neither CLONE_VM nor CLONE_THREAD, and any descriptor it names is open; what the
/// child runs is the caller's contract, as for [`fork_into`].
#[allow(unsafe_code)]
unsafe fn clone3(args: &CloneArgs) -> io::Result<Forked> {
    // SAFETY: without CLONE_VM or CLONE_THREAD (the caller's contract), clone3 duplicates the
    // process as fork does: the child runs on its own copy of our memory, stack included (no
    // stack is given, which clone3 allows without CLONE_VM), and returns 0 from this call.
    // `args` is an initialised `struct clone_args` of exactly the size passed, alive across the
    // call, which the kernel only reads.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::from_ref(args),
            size_of::<CloneArgs>(),
        )
    };
    match rc {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent {
            child: u32::try_from(pid).map_err(io::Error::other)?,
        }),
    }
}

/// `CLONE_PARENT`: the child's parent is the caller's parent, not the caller.
const CLONE_PARENT: u64 = 0x8000;

/// Forks the calling process as a sibling (`clone3(CLONE_PARENT)`): the child is a child of the
/// caller's parent, which reaps it and receives its `SIGCHLD`, and the caller never has it as a
/// child. For the guardian zygote, whose guardians must be the supervisor's own children.
///
/// # Safety
///
/// As for [`fork_into`]: the caller is single-threaded, and glibc's own fork bookkeeping does
/// not run in the child (no `pthread_atfork` handlers; its thread descriptor keeps the caller's
/// thread id, which only pthread functions on other threads and non-default mutexes read).
/// The child must not rely on either.
#[allow(unsafe_code)]
pub(crate) unsafe fn fork_sibling() -> io::Result<Forked> {
    // No exit signal of its own: clone3 refuses one with CLONE_PARENT (EINVAL), and the child
    // takes the caller's, SIGCHLD for a process spawned by the supervisor.
    let args = CloneArgs {
        flags: CLONE_PARENT,
        ..CloneArgs::default()
    };
    // SAFETY: neither CLONE_VM nor CLONE_THREAD, no descriptor named; what the child runs is
    // the caller's contract (`# Safety`).
    unsafe { clone3(&args) }
}

/// The name of the base cgroup of the runtime root `root`: one per root, so that a supervisor
/// restarted on the same root finds (and reuses) what a killed one left.
pub fn base_name(root: &Path) -> String {
    let root = std::path::absolute(root).unwrap_or_else(|_| root.to_owned());
    format!(
        "procjournal-{:08x}",
        crc32fast::hash(root.as_os_str().as_encoded_bytes())
    )
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::os::fd::AsFd;

    use nix::sys::signal::Signal;
    use nix::sys::wait::{WaitStatus, waitpid};
    use nix::unistd::Pid;

    /// Kills, empties and removes a cgroup when dropped, so a failing test leaves none behind.
    struct Cleanup(Scope);

    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait_empty(Duration::from_secs(5));
            if let Err(e) = self.0.remove() {
                eprintln!("cleanup of {}: {e}", self.0.path().display());
            }
        }
    }

    /// A base of this test's own (tests run in parallel), with its cleanup; `None`, said on
    /// stderr, where cgroups are unavailable.
    fn base_or_skip(tag: &str) -> Option<(CgroupBase, Cleanup)> {
        let name = format!("procjournal-test-{}-{tag}", std::process::id());
        match CgroupBase::probe(&name) {
            Ok(base) => {
                let cleanup = Cleanup(Scope::at(base.dir().to_path_buf()));
                Some((base, cleanup))
            }
            Err(why) => {
                eprintln!("skipped: per-launch cgroups are unavailable: {why}");
                None
            }
        }
    }

    /// Forks a child into `scope` that execs `argv` (a null-terminated array of C strings
    /// prepared before the fork, so the child only calls execv and _exit).
    fn spawn_in(scope: &Scope, argv: &[*const libc::c_char]) -> u32 {
        assert!(argv.last().is_some_and(|p| p.is_null()));
        let dir = scope.open_dir().expect("open the scope");
        // SAFETY: the child calls only execv and _exit, both async-signal-safe, on data that
        // was prepared before the fork; it never returns into the test harness.
        match unsafe { fork_into(Some(dir.as_fd())) }.expect("clone3 into the scope") {
            Forked::Child => {
                // SAFETY: argv is a null-terminated array of pointers to NUL-terminated
                // 'static strings; _exit ends the child if exec fails.
                unsafe {
                    libc::execv(argv[0], argv.as_ptr());
                    libc::_exit(127)
                }
            }
            Forked::Parent { child } => child,
        }
    }

    fn argv(args: &[&'static CStr]) -> Vec<*const libc::c_char> {
        args.iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    }

    fn comm(pid: u32) -> String {
        fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap_or_default()
            .trim_end()
            .to_owned()
    }

    /// Polls `f` until it yields a value, for at most `bound`.
    fn within<T>(bound: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(v) = f() {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn reap(child: u32) -> WaitStatus {
        waitpid(Pid::from_raw(child as i32), None).expect("waitpid")
    }

    #[test]
    fn a_scope_holds_a_whole_tree_and_freezes_kills_and_removes_it() {
        let Some((base, _base_cleanup)) = base_or_skip("tree") else {
            return;
        };
        let t = Instant::now();
        let scope = base.create_scope("run-1").expect("create a scope");
        let mkdir = t.elapsed();
        let _cleanup = Cleanup(scope.clone());
        assert!(scope.exists());
        assert!(!scope.populated().expect("populated"));

        let argv = argv(&[c"/bin/sh", c"-c", c"(setsid sleep 100 &); sleep 100"]);
        let t = Instant::now();
        let child = spawn_in(&scope, &argv);
        let fork = t.elapsed();

        // The foreground sleep and the one that left the session both show up in the scope.
        let sleeps = within(Duration::from_secs(10), || {
            let procs = scope.procs().ok()?;
            let sleeps: Vec<u32> = procs.into_iter().filter(|&p| comm(p) == "sleep").collect();
            (sleeps.len() == 2).then_some(sleeps)
        })
        .expect("both sleeps appear in cgroup.procs");
        let groups: Vec<i64> = sleeps
            .iter()
            .filter_map(|&p| super::super::procfs::stat(p).map(|s| s.pgrp))
            .collect();
        assert_eq!(groups.len(), 2);
        assert_ne!(
            groups[0], groups[1],
            "one sleep escaped the process group, and the scope still holds it"
        );
        assert!(scope.populated().expect("populated"));

        let t = Instant::now();
        assert!(
            scope.freeze(Duration::from_secs(10)).expect("freeze"),
            "frozen within the bound"
        );
        let freeze = t.elapsed();
        let t = Instant::now();
        scope.thaw().expect("thaw");
        let thaw = t.elapsed();
        let text = fs::read_to_string(scope.path().join("cgroup.freeze")).expect("read");
        assert_eq!(text.trim(), "0");

        let t = Instant::now();
        scope.kill().expect("kill");
        assert!(
            scope.wait_empty(Duration::from_secs(10)).expect("wait"),
            "empty within the bound"
        );
        let kill = t.elapsed();
        assert!(matches!(
            reap(child),
            WaitStatus::Signaled(_, Signal::SIGKILL, _)
        ));

        let t = Instant::now();
        scope.remove().expect("remove");
        let rmdir = t.elapsed();
        assert!(!scope.exists());
        assert!(!scope.path().exists());
        eprintln!(
            "mkdir {mkdir:?}, clone3 into the scope {fork:?}, freeze until frozen {freeze:?}, \
             thaw {thaw:?}, kill until empty {kill:?}, rmdir {rmdir:?}"
        );
    }

    #[test]
    fn a_populated_scope_is_neither_removed_nor_reused_nor_waited_for_beyond_the_bound() {
        let Some((base, _base_cleanup)) = base_or_skip("busy") else {
            return;
        };
        let scope = base.create_scope("run-1").expect("create a scope");
        let _cleanup = Cleanup(scope.clone());
        let child = spawn_in(&scope, &argv(&[c"/bin/sleep", c"100"]));
        within(Duration::from_secs(10), || {
            scope.populated().ok().filter(|&p| p).map(|_| ())
        })
        .expect("the sleep is in the scope");

        fs::create_dir(scope.path().join("sub")).expect("a child cgroup");
        let err = scope.remove().expect_err("a populated scope stays");
        assert_eq!(err.kind(), io::ErrorKind::ResourceBusy, "{err}");
        assert!(err.to_string().contains("populated"), "{err}");
        assert!(scope.exists());
        assert!(
            scope.path().join("sub").exists(),
            "nothing below a live scope is touched"
        );
        let err = scope
            .remove_emptied()
            .expect_err("nor by the one-rmdir removal");
        assert_eq!(err.kind(), io::ErrorKind::ResourceBusy, "{err}");
        assert!(scope.exists() && scope.path().join("sub").exists());

        let err = base.create_scope("run-1").expect_err("no second workload");
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");

        let t = Instant::now();
        assert!(
            !scope
                .wait_empty(Duration::from_millis(200))
                .expect("wait_empty")
        );
        eprintln!(
            "wait_empty(200 ms) on a populated scope returned after {:?}",
            t.elapsed()
        );

        scope.kill().expect("kill");
        assert!(scope.wait_empty(Duration::from_secs(10)).expect("wait"));
        assert!(matches!(
            reap(child),
            WaitStatus::Signaled(_, Signal::SIGKILL, _)
        ));
        scope.remove().expect("remove");
        assert!(!scope.exists());
    }

    #[test]
    fn an_empty_leftover_scope_is_reused_thawed_and_child_cgroups_do_not_block_removal() {
        let Some((base, _base_cleanup)) = base_or_skip("reuse") else {
            return;
        };
        let scope = base.create_scope("run-1").expect("create a scope");
        let _cleanup = Cleanup(scope.clone());
        assert!(scope.freeze(Duration::from_secs(10)).expect("freeze"));
        fs::create_dir_all(scope.path().join("a/b")).expect("child cgroups");
        fs::create_dir(scope.path().join("c")).expect("child cgroup");

        let again = base.create_scope("run-1").expect("reused");
        assert_eq!(again.path(), scope.path());
        let text = fs::read_to_string(scope.path().join("cgroup.freeze")).expect("read");
        assert_eq!(text.trim(), "0", "a reused scope is thawed");

        again.remove().expect("remove with child cgroups");
        assert!(!scope.path().exists());
        again.remove().expect("removing a removed scope is fine");
        assert_eq!(
            scope.kill().expect_err("gone").kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn an_emptied_scope_goes_with_its_child_cgroups() {
        let Some((base, _base_cleanup)) = base_or_skip("emptied") else {
            return;
        };
        let plain = base.create_scope("run-1").expect("create a scope");
        let _cleanup = Cleanup(plain.clone());
        plain.remove_emptied().expect("one rmdir");
        assert!(!plain.path().exists());
        plain.remove_emptied().expect("a removed scope is fine");

        let nested = base.create_scope("run-2").expect("create a scope");
        let _cleanup = Cleanup(nested.clone());
        fs::create_dir_all(nested.path().join("a/b")).expect("child cgroups");
        nested.remove_emptied().expect("removed below first");
        assert!(!nested.path().exists());
    }

    #[test]
    fn removal_leaves_a_directory_that_is_not_a_cgroup_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir(dir.path().join("empty")).expect("mkdir");
        let not_a_cgroup = Scope::at(dir.path().to_path_buf());
        assert!(!not_a_cgroup.exists());
        let err = not_a_cgroup.remove().expect_err("not a cgroup");
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert!(dir.path().join("empty").exists());
        Scope::at(dir.path().join("missing"))
            .remove()
            .expect("a missing scope is removed already");
    }

    #[test]
    fn names_are_one_plain_component() {
        for bad in ["", ".", "..", "a/b", "cgroup.procs", "a b", "a\nb", "é"] {
            assert!(!valid_name(bad), "{bad:?}");
            assert!(matches!(
                CgroupBase::probe(bad),
                Err(Unavailable::BadName { .. })
            ));
        }
        assert!(valid_name("procjournal-0123abcd_x"));
        assert!(!valid_name(&"a".repeat(NAME_BYTES_MAX + 1)));
    }

    #[test]
    fn a_plain_fork_also_works() {
        // SAFETY: the child calls only _exit, which is async-signal-safe.
        match unsafe { fork_into(None) }.expect("fork") {
            Forked::Child => {
                // SAFETY: _exit ends the child without running anything of the harness.
                unsafe { libc::_exit(7) }
            }
            Forked::Parent { child } => {
                assert!(matches!(reap(child), WaitStatus::Exited(_, 7)));
            }
        }
    }

    /// On this machine (root, a writable cgroup2 mount) the probe must succeed: a skip here would
    /// hide every other test of this module.
    #[test]
    fn probe_succeeds_as_root_with_a_writable_v2_mount() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: not root");
            return;
        }
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let proc_cgroup = fs::read_to_string("/proc/self/cgroup").expect("cgroup");
        let Some(parent) =
            own_cgroup(&proc_cgroup).and_then(|own| locate(&cgroup2_mounts(&mountinfo), own))
        else {
            eprintln!("skipped: no cgroup2 mount shows our cgroup");
            return;
        };
        if nix::unistd::access(&parent, nix::unistd::AccessFlags::W_OK).is_err() {
            eprintln!("skipped: {} is not writable", parent.display());
            return;
        }
        let name = format!("procjournal-test-{}-probe", std::process::id());
        let base = CgroupBase::probe(&name).expect("probe");
        let _cleanup = Cleanup(Scope::at(base.dir().to_path_buf()));
        assert_eq!(base.dir(), parent.join(&name));
        // The probe child is gone; the base is left for scopes.
        let children = fs::read_dir(base.dir())
            .expect("list")
            .filter(|e| e.as_ref().is_ok_and(|e| e.path().is_dir()))
            .count();
        assert_eq!(children, 0);
        // A second probe of the same base finds it and succeeds.
        CgroupBase::probe(&name).expect("probe again");
    }

    #[test]
    fn mountinfo_lines_are_read_as_the_kernel_writes_them() {
        let text = "\
24 1 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 master:3 - cgroup2 cgroup2 rw,nsdelegate
52 41 0:38 /docker/abc /mnt/my\\040cg\\134x rw,relatime - cgroup2 none rw
53 41 0:38 / /mnt/odd\\09 rw - cgroup2 cgroup2 rw
60 1 0:50 / /mnt/- rw - ext4 /dev/sda1 rw
61 1 0:51 / /mnt/cgroup2 rw - ext4 cgroup2 rw
62 1 0:52 / /short rw cgroup2
";
        assert_eq!(
            cgroup2_mounts(text),
            vec![
                Cgroup2Mount {
                    root: "/".into(),
                    mount_point: "/sys/fs/cgroup/unified".into()
                },
                Cgroup2Mount {
                    root: "/docker/abc".into(),
                    mount_point: "/mnt/my cg\\x".into()
                },
                Cgroup2Mount {
                    root: "/".into(),
                    mount_point: "/mnt/odd\\09".into()
                },
            ]
        );
        assert_eq!(cgroup2_mounts(""), vec![]);
    }

    #[test]
    fn proc_cgroup_gives_the_v2_path_and_locate_joins_it_under_the_right_mount() {
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/671d\n1:cpu:/\n0::/\n";
        assert_eq!(own_cgroup(hybrid), Some("/"));
        assert_eq!(
            own_cgroup("0::/user.slice/a:b.scope\n"),
            Some("/user.slice/a:b.scope")
        );
        assert_eq!(own_cgroup("1:cpu:/\n"), None);
        assert_eq!(own_cgroup("10::/x\n"), None);

        let mounts = vec![
            Cgroup2Mount {
                root: "/docker/abc".into(),
                mount_point: "/sys/fs/cgroup".into(),
            },
            Cgroup2Mount {
                root: "/".into(),
                mount_point: "/sys/fs/cgroup/unified".into(),
            },
        ];
        assert_eq!(
            locate(&mounts, "/"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            locate(&mounts, "/docker/abc"),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(
            locate(&mounts, "/docker/abc/x"),
            Some(PathBuf::from("/sys/fs/cgroup/x"))
        );
        // A component boundary, not a string prefix.
        assert_eq!(
            locate(&mounts, "/docker/abcd"),
            Some(PathBuf::from("/sys/fs/cgroup/unified/docker/abcd"))
        );
        assert_eq!(locate(&mounts, "/../../outside"), None);
        assert_eq!(locate(&mounts, "relative"), None);
        assert_eq!(locate(&mounts[..1], "/elsewhere"), None);
        let relative = [Cgroup2Mount {
            root: "/".into(),
            mount_point: "mnt".into(),
        }];
        assert_eq!(locate(&relative, "/"), None);
    }

    #[test]
    fn cgroup_events_flags() {
        let text = "populated 1\nfrozen 0\n";
        assert_eq!(event_flag(text, "populated"), Some(true));
        assert_eq!(event_flag(text, "frozen"), Some(false));
        assert_eq!(event_flag(text, "missing"), None);
        assert_eq!(event_flag("populated 2\n", "populated"), None);
    }

    proptest::proptest! {
        /// The parsers are total: any text yields a value or `None`, never a panic.
        #[test]
        fn the_proc_parsers_are_total(text in "(?s).{0,300}", own in ".{0,60}") {
            let mounts = cgroup2_mounts(&text);
            let _ = own_cgroup(&text);
            let _ = locate(&mounts, &own);
            let _ = event_flag(&text, "populated");
        }

        /// Mountinfo-shaped lines with arbitrary fields, escapes and optional fields: the parser
        /// never panics, and a cgroup2 line with plain paths is found with those paths.
        #[test]
        fn mountinfo_shaped_lines(
            fields in proptest::collection::vec("[^ \n]{0,12}|\\\\[0-9]{0,4}|-", 0..14),
            root in "(/[a-z0-9]{1,6}){0,3}",
            mount in "(/[a-z0-9]{1,6}){1,3}",
            optional in proptest::collection::vec("[a-z]{1,6}:[0-9]{1,3}", 0..3),
        ) {
            let _ = cgroup2_mounts(&fields.join(" "));
            let root = if root.is_empty() { "/".to_owned() } else { root };
            let line = format!(
                "1 2 0:3 {root} {mount} rw {} - cgroup2 cgroup2 rw",
                optional.iter().map(|o| format!("{o} ")).collect::<String>(),
            );
            let line = line.replace("  ", " ");
            let found = cgroup2_mounts(&format!("{}\n{line}\n", fields.join(" ")));
            proptest::prop_assert_eq!(
                found.last(),
                Some(&Cgroup2Mount { root: root.into(), mount_point: mount.into() })
            );
        }

        /// /proc/self/cgroup-shaped text: the 0:: line wins wherever it is, whatever it holds.
        #[test]
        fn proc_cgroup_shaped_lines(
            lines in proptest::collection::vec("[0-9]{1,2}:[a-z=,]{0,10}:[^\n\r]{0,20}", 0..6),
            path in "/[^\n\r]{0,30}",
        ) {
            let mut text = lines.join("\n");
            let _ = own_cgroup(&text);
            let first_v2 = lines.iter().find_map(|l| l.strip_prefix("0::"));
            text.push_str(&format!("\n0::{path}\n"));
            proptest::prop_assert_eq!(own_cgroup(&text), Some(first_v2.unwrap_or(&path)));
        }
    }
}
