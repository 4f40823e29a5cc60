//! Removal of a whole spool, once its process's output is retired (`lifecycle::retention`).
//!
//! Invariants:
//! - Only the spool's own files are removed: segment files (`{cursor:020}.seg`) and a writer's
//!   leftover `*.seg.tmp`. A file of any other name is left where it is, and then so is the
//!   directory; the caller reports it. Removing someone else's file is never a retention
//!   decision.
//! - Every file removed is announced to the caller's [`CrashPoints`] first, so a test can stop
//!   the removal between any two file-system operations, as a crash there would.
//! - A missing directory is a finished removal (a crash after its `rmdir`, or a process whose
//!   spool was never created), not an error: removal is idempotent.

use std::path::Path;

use crate::journal::compact::CrashPoints;
use crate::root::dir::{Dir, Kind};

/// What removing one spool did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Removed {
    /// Files deleted.
    pub files: u64,
    /// Their sizes on disk (apparent length), summed.
    pub bytes: u64,
    /// Whether the directory itself was removed (false: it was already gone).
    pub dir_removed: bool,
}

/// Why a spool was not (wholly) removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoveError {
    /// The directory holds a file that is not the spool's; it and the directory stay.
    #[error("the spool directory holds {0:?}, which is not a spool file; it was left in place")]
    Foreign(String),
    #[error("spool removal, {op}: {cause}")]
    Io {
        op: &'static str,
        cause: std::io::Error,
    },
}

fn io(op: &'static str) -> impl FnOnce(std::io::Error) -> RemoveError {
    move |cause| RemoveError::Io { op, cause }
}

fn is_spool_file(name: &str) -> bool {
    let stem = name
        .strip_suffix(".seg")
        .or_else(|| name.strip_suffix(".seg.tmp"));
    stem.is_some_and(|d| d.len() == 20 && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Removes the spool in `dir`: its files (lowest cursor first, so that a partly removed spool
/// reads as retained-from-later, never as a hole in the middle), then the directory, then the
/// parent's entry is made durable with a directory sync.
pub fn remove_spool(dir: &Path, crash: &mut dyn CrashPoints) -> Result<Removed, RemoveError> {
    let mut done = Removed::default();
    // Held by descriptor from here on (a symbolic link in its place is refused, never
    // followed): what is unlinked is this directory's, wherever its path points later.
    let held = match Dir::open(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(done),
        other => other.map_err(io("open"))?,
    };
    let mut files = Vec::new();
    for name in held.names().map_err(io("list"))? {
        match name.to_str() {
            Some(n) if is_spool_file(n) => {
                let len = match held.kind(n) {
                    Ok(Some(Kind::File { len })) => len,
                    _ => 0,
                };
                files.push((n.to_owned(), len));
            }
            _ => return Err(RemoveError::Foreign(name.to_string_lossy().into_owned())),
        }
    }
    files.sort();
    for (name, len) in files {
        crash
            .reached("retire: unlink segment")
            .map_err(io("stopped"))?;
        match held.remove(&name) {
            Ok(()) => {
                done.files += 1;
                done.bytes += len;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("unlink")(e)),
        }
    }
    drop(held);
    crash.reached("retire: rmdir").map_err(io("stopped"))?;
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str()))
    else {
        return Ok(done);
    };
    let parent = Dir::open(parent).map_err(io("open parent"))?;
    match parent.remove_dir(name) {
        Ok(()) => done.dir_removed = true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("rmdir")(e)),
    }
    crash.reached("retire: fsync dir").map_err(io("stopped"))?;
    parent.sync().map_err(io("fsync dir"))?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::compact::NoCrash;

    #[test]
    fn names_of_the_spool_and_of_nothing_else() {
        assert!(is_spool_file("00000000000000000000.seg"));
        assert!(is_spool_file("00000000000000001024.seg.tmp"));
        assert!(!is_spool_file("0000000000000000102.seg"));
        assert!(!is_spool_file("notes.txt"));
        assert!(!is_spool_file("0000000000000000000a.seg"));
    }

    #[test]
    fn removes_segments_and_the_directory_and_is_idempotent() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p-x");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("00000000000000000000.seg"), b"abc").unwrap();
        std::fs::write(dir.join("00000000000000000003.seg"), b"de").unwrap();
        let done = remove_spool(&dir, &mut NoCrash).unwrap();
        assert_eq!(
            done,
            Removed {
                files: 2,
                bytes: 5,
                dir_removed: true
            }
        );
        assert!(!dir.exists());
        assert_eq!(
            remove_spool(&dir, &mut NoCrash).unwrap(),
            Removed::default()
        );
    }

    #[test]
    fn a_foreign_file_keeps_everything() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p-y");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("00000000000000000000.seg"), b"abc").unwrap();
        std::fs::write(dir.join("keep.me"), b"x").unwrap();
        let err = remove_spool(&dir, &mut NoCrash).unwrap_err();
        assert!(
            matches!(err, RemoveError::Foreign(ref n) if n == "keep.me"),
            "{err}"
        );
        assert!(dir.join("00000000000000000000.seg").exists());
        assert!(dir.join("keep.me").exists());
    }
}
