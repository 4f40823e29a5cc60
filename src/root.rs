//! The runtime root: the one directory under which procjournal keeps every file it owns.
//!
//! Invariants: the root path is made absolute once, when it is opened, and never resolved against
//! the caller's working directory again; at most one writer holds a root at a time, enforced by an
//! exclusive advisory lock on `<root>/LOCK` held for the writer's whole life. Read-only tools take
//! no lock and never write. Within one process, an open of a root that this same process is
//! releasing (a supervisor shut down, its last handles about to drop) waits for that release, at
//! most `LOCK_HANDOVER_MS`, instead of failing; a root held by another process fails at once.
//!
//! ```text
//! <root>/LOCK                 advisory lock of the single writer
//! <root>/journal/*.log        journal segments
//! <root>/spool/<handle>/      output of one process
//! ```
//!
//! Safe with other local users: a writer opens a root only when neither it nor any directory on
//! the way to it can be changed by another user than the one running procjournal, root excepted
//! (`root/secure.rs`, OpenSSH's `StrictModes` rule), holds the root's directory descriptor
//! ([`RootDir`]) and opens `LOCK` and `daemon.log` relative to it, never through a symbolic link.
//! A root is private (`0700`, its files `0600`) unless it was deliberately shared with a group
//! (`02750`, files `0640`); a writer tightens an older root created `0755` to `0700` as it opens
//! it (the root's mode alone keeps others out of everything beneath). Every layer below holds
//! its directory by descriptor (`root/dir.rs`, opened from the root's for `journal/` and
//! `snapshots/`) and names its files relative to it, never through a symbolic link, with modes
//! derived from the directory (`root/fsx.rs`).

use std::fs::{File, TryLockError};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, PoisonError};

use crate::sync::Lock;
use std::time::{Duration, Instant};

use crate::limits::LOCK_HANDOVER_MS;

pub(crate) mod dir;
pub(crate) mod fsx;
// Only the CLI's offline `ps` asks who holds a root.
#[cfg(feature = "cli")]
pub(crate) mod holder;
pub(crate) mod secure;

/// The directories directly under a root that writers create; each is checked at open (a
/// real directory, ours or root's, writable by nobody else) before any layer writes in it.
const SUBDIRS: [&str; 4] = ["journal", "spool", "snapshots", "trees"];

/// The log of a detached daemon, in the root.
pub const DAEMON_LOG: &str = "daemon.log";

/// The roots whose writer lock this process holds, and a signal for each release.
static HELD: Lock<Vec<PathBuf>> = Lock::new(Vec::new());
static RELEASED: Condvar = Condvar::new();

/// Waits, at most `LOCK_HANDOVER_MS`, until this process no longer holds `path`; false when it
/// does not hold it at all (another process does) or still holds it at the deadline.
fn wait_for_handover(path: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_millis(LOCK_HANDOVER_MS);
    let mut held = HELD.lock();
    if !held.iter().any(|p| p == path) {
        return false;
    }
    while held.iter().any(|p| p == path) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        held = RELEASED
            .wait_timeout(held, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    true
}

/// Makes the entries of `dir` durable (a file created, renamed or removed in it): every layer
/// that writes under the root (the journal, the spool, snapshots) syncs its directories with it.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    fsx::open_dir(dir)?.sync_all()
}

/// Why a root could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RootError {
    #[error("runtime root {root}: {cause}")]
    Io {
        root: PathBuf,
        // In the message, not exposed again as the error's source (chains would repeat it).
        cause: io::Error,
    },
    #[error("runtime root {root} is held by another writer (its LOCK is taken)")]
    Locked { root: PathBuf },
    #[error(
        "runtime root {root} refused: {why} (another user could plant files or links in it; \
         make it and every directory above it owned by you or root, and not group- or \
         world-writable)"
    )]
    Unsafe { root: PathBuf, why: String },
}

/// A root's directory, opened for writing in it: checked safe, with its permissions set, and
/// held by descriptor so that what is opened relative to it is never re-resolved by path.
#[derive(Debug)]
pub struct RootDir {
    path: PathBuf,
    dir: File,
}

fn absolute(path: &Path) -> Result<PathBuf, RootError> {
    std::path::absolute(path).map_err(|cause| RootError::Io {
        root: path.to_owned(),
        cause,
    })
}

impl RootDir {
    /// Creates the root if needed (missing directories `0700`, as XDG asks of the state
    /// directory), checks it and every directory above it, and sets its access: shared with
    /// `group` when one is given, else kept shared if it already was, else made private.
    pub fn prepare(path: &Path, group: Option<u32>) -> Result<Self, RootError> {
        let path = absolute(path)?;
        let io_err = |cause| RootError::Io {
            root: path.clone(),
            cause,
        };
        let refuse = |unsafe_: secure::Unsafe| RootError::Unsafe {
            root: path.clone(),
            why: unsafe_.to_string(),
        };
        if !path.is_dir() {
            create_missing(&path).map_err(|e| match e {
                Missing::Unsafe(u) => refuse(u),
                Missing::Io(cause) => io_err(cause),
            })?;
        }
        let real = std::fs::canonicalize(&path).map_err(io_err)?;
        secure::check_ancestors(&real).map_err(refuse)?;
        let dir = fsx::open_dir(&real).map_err(io_err)?;
        let meta = dir.metadata().map_err(io_err)?;
        secure::check(&real, &meta, secure::Place::Root).map_err(refuse)?;
        set_access(&dir, &meta, group).map_err(io_err)?;
        for name in SUBDIRS {
            check_subdir(&dir, &real, name).map_err(refuse)?;
        }
        Ok(RootDir { path, dir })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether what is created in the root is shared with its group.
    pub fn is_shared(&self) -> bool {
        self.dir
            .metadata()
            .is_ok_and(|m| fsx::is_shared(m.permissions().mode()))
    }

    fn file_mode(&self) -> u32 {
        if self.is_shared() {
            fsx::SHARED_FILE
        } else {
            fsx::PRIVATE_FILE
        }
    }

    /// Opens (creating it if `create`) the file `name` directly in the root, never through a
    /// symbolic link, with the root's file mode (an existing file of ours is brought to it).
    pub fn open_file(&self, name: &str, create: bool, append: bool) -> io::Result<File> {
        use nix::fcntl::OFlag;
        let mut flags = OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        if create {
            flags |= OFlag::O_CREAT;
        }
        if append {
            flags |= OFlag::O_APPEND;
        }
        let mode = self.file_mode();
        let fd: OwnedFd = nix::fcntl::openat(
            &self.dir,
            name,
            flags,
            nix::sys::stat::Mode::from_bits_truncate(mode as libc::mode_t),
        )?;
        let file = File::from(fd);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", self.path.join(name).display()),
            ));
        }
        if fsx::is_mine(&meta) && meta.permissions().mode() & 0o7777 != mode {
            fsx::fchmod(file.as_fd(), mode)?;
        }
        Ok(file)
    }

    /// Renames `from` to `to`, both directly in the root (a symbolic link is renamed, never
    /// followed).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        nix::fcntl::renameat(&self.dir, from, &self.dir, to).map_err(io::Error::from)
    }

    /// The directory `name` in the root (created first when `create`), held by descriptor and
    /// checked as the root is: what a layer writes in it is never named by path again.
    pub(crate) fn sub(&self, name: &str, create: bool) -> io::Result<dir::Dir> {
        dir::Dir::adopt(OwnedFd::from(self.dir.try_clone()?), self.path.clone()).sub(name, create)
    }

    /// The size of the regular file `name` in the root, `None` when there is none.
    pub fn file_len(&self, name: &str) -> Option<u64> {
        let stat =
            nix::sys::stat::fstatat(&self.dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                .ok()?;
        (stat.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(stat.st_size as u64)
    }
}

enum Missing {
    Unsafe(secure::Unsafe),
    Io(io::Error),
}

/// Creates a missing root and the directories above it (`0700`), after checking the part of
/// the path that exists, so that nothing is created under a directory another user controls.
fn create_missing(path: &Path) -> Result<(), Missing> {
    if let Some(existing) = secure::existing_prefix(path) {
        let real = std::fs::canonicalize(existing).map_err(Missing::Io)?;
        secure::check_ancestors(&real.join("x")).map_err(Missing::Unsafe)?;
    }
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(fsx::PRIVATE_DIR)
        .create(path)
        .map_err(Missing::Io)?;
    if let Some(parent) = path.parent() {
        sync_dir(parent).map_err(Missing::Io)?;
    }
    Ok(())
}

/// Checks `<root>/name`, when it exists, with `lstat` relative to the root's descriptor.
fn check_subdir(dir: &File, real: &Path, name: &str) -> Result<(), secure::Unsafe> {
    let at = real.join(name);
    match nix::sys::stat::fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(e) => Err(secure::Unsafe {
            path: at,
            why: e.desc().to_owned(),
        }),
        Ok(_) => {
            let meta = std::fs::symlink_metadata(&at).map_err(|e| secure::Unsafe {
                path: at.clone(),
                why: e.to_string(),
            })?;
            secure::check(&at, &meta, secure::Place::Root)
        }
    }
}

/// Shares the root with `group`, keeps an already shared root shared, or makes it private.
fn set_access(dir: &File, meta: &std::fs::Metadata, group: Option<u32>) -> io::Result<()> {
    let mode = meta.permissions().mode() & 0o7777;
    let want = match group {
        Some(gid) => {
            if meta.gid() != gid {
                nix::unistd::fchown(dir, None, Some(nix::unistd::Gid::from_raw(gid)))?;
            }
            fsx::SHARED_DIR
        }
        None if fsx::is_shared(mode) => fsx::SHARED_DIR,
        None => fsx::PRIVATE_DIR,
    };
    if mode != want {
        tracing::info!(
            from = format!("{mode:04o}"),
            to = format!("{want:04o}"),
            "root mode set"
        );
        fsx::fchmod(dir, want)?;
    }
    Ok(())
}

/// An absolute runtime root; `open_writer` also holds its lock.
#[derive(Debug)]
pub struct Root {
    path: PathBuf,
    lock: Option<File>,
    dir: Option<RootDir>,
}

impl Root {
    /// Creates the root if needed and takes the single-writer lock without waiting.
    pub fn open_writer(path: &Path) -> Result<Self, RootError> {
        let dir = RootDir::prepare(path, None)?;
        let path = dir.path().to_owned();
        let lock = dir
            .open_file("LOCK", true, false)
            .map_err(|cause| RootError::Io {
                root: path.clone(),
                cause,
            })?;
        let mut locked = lock.try_lock();
        if matches!(locked, Err(TryLockError::WouldBlock)) && wait_for_handover(&path) {
            locked = lock.try_lock();
        }
        match locked {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(RootError::Locked { root: path }),
            Err(TryLockError::Error(cause)) => return Err(RootError::Io { root: path, cause }),
        }
        HELD.lock().push(path.clone());
        Ok(Root {
            path,
            lock: Some(lock),
            dir: Some(dir),
        })
    }

    /// The root's directory, held by descriptor (writers only).
    pub fn dir(&self) -> Option<&RootDir> {
        self.dir.as_ref()
    }

    /// A root for reading only: no lock, nothing created.
    pub fn open_reader(path: &Path) -> Result<Self, RootError> {
        Ok(Root {
            path: absolute(path)?,
            lock: None,
            dir: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn journal_dir(&self) -> PathBuf {
        self.path.join("journal")
    }

    pub fn spool_dir(&self) -> PathBuf {
        self.path.join("spool")
    }
}

impl Drop for Root {
    /// Unlocks explicitly instead of relying on the close: a `flock` belongs to the open file
    /// description, and a child that another thread forked keeps a copy of the descriptor until
    /// its `exec`, which would hold the root locked after this writer is gone.
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            // Nothing to do on failure: the close that follows releases it as a last resort.
            let _ = lock.unlock();
            let mut held = HELD.lock();
            if let Some(at) = held.iter().position(|p| *p == self.path) {
                held.swap_remove(at);
            }
            drop(held);
            RELEASED.notify_all();
        }
    }
}
