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

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::limits::LOCK_HANDOVER_MS;

/// The roots whose writer lock this process holds, and a signal for each release.
static HELD: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static RELEASED: Condvar = Condvar::new();

/// Waits, at most `LOCK_HANDOVER_MS`, until this process no longer holds `path`; false when it
/// does not hold it at all (another process does) or still holds it at the deadline.
fn wait_for_handover(path: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_millis(LOCK_HANDOVER_MS);
    let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
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
    File::open(dir)?.sync_all()
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
}

/// An absolute runtime root; `open_writer` also holds its lock.
#[derive(Debug)]
pub struct Root {
    path: PathBuf,
    lock: Option<File>,
}

impl Root {
    fn absolute(path: &Path) -> Result<PathBuf, RootError> {
        std::path::absolute(path).map_err(|cause| RootError::Io {
            root: path.to_owned(),
            cause,
        })
    }

    /// Creates the root if needed and takes the single-writer lock without waiting.
    pub fn open_writer(path: &Path) -> Result<Self, RootError> {
        let path = Self::absolute(path)?;
        let io_err = |cause| RootError::Io {
            root: path.clone(),
            cause,
        };
        if !path.is_dir() {
            std::fs::create_dir_all(&path).map_err(io_err)?;
            if let Some(parent) = path.parent() {
                sync_dir(parent).map_err(io_err)?;
            }
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path.join("LOCK"))
            .map_err(io_err)?;
        let mut locked = lock.try_lock();
        if matches!(locked, Err(TryLockError::WouldBlock)) && wait_for_handover(&path) {
            locked = lock.try_lock();
        }
        match locked {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(RootError::Locked { root: path }),
            Err(TryLockError::Error(cause)) => return Err(RootError::Io { root: path, cause }),
        }
        HELD.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(path.clone());
        Ok(Root {
            path,
            lock: Some(lock),
        })
    }

    /// A root for reading only: no lock, nothing created.
    pub fn open_reader(path: &Path) -> Result<Self, RootError> {
        Ok(Root {
            path: Self::absolute(path)?,
            lock: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_writer(&self) -> bool {
        self.lock.is_some()
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
            let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(at) = held.iter().position(|p| *p == self.path) {
                held.swap_remove(at);
            }
            drop(held);
            RELEASED.notify_all();
        }
    }
}
