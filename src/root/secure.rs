//! Whether a directory on the way to a runtime root, or the root itself, can be changed by a
//! user other than the one running procjournal.
//!
//! The rule is OpenSSH's `StrictModes` (`safe_path`): every directory from `/` down to the root
//! is owned by the effective user or by root, and writable by neither its group nor others.
//! One exception, taken from how `/tmp` is shared: an ancestor writable by others is accepted
//! when it carries the sticky bit and belongs to root, because then nobody but an entry's owner
//! can rename or remove the entries in it, and the next directory of the walk (which must be
//! ours or root's) cannot be swapped. The root itself gets no such exception.
//!
//! Invariant: the walk runs on the canonical path (symlinks resolved once, as OpenSSH does with
//! `realpath`), and each step is looked at with `lstat`, so a symlink that appears after the
//! resolution is refused instead of followed.

use std::fs::Metadata;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The write bits of group and others.
const SHARED_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;

/// Why a directory is not safe to hold a root (or to lead to one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsafe {
    pub(crate) path: PathBuf,
    pub(crate) why: String,
}

impl std::fmt::Display for Unsafe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

pub(crate) fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// What kind of directory a check is for: the root (no sticky exception) or an ancestor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Ancestor,
    Root,
}

/// Checks one directory's metadata (from `lstat` or `fstat`) against the rule.
pub(crate) fn check(path: &Path, meta: &Metadata, place: Place) -> Result<(), Unsafe> {
    let refuse = |why: String| {
        Err(Unsafe {
            path: path.to_owned(),
            why,
        })
    };
    if meta.file_type().is_symlink() {
        return refuse("is a symbolic link".to_owned());
    }
    if !meta.is_dir() {
        return refuse("is not a directory".to_owned());
    }
    let me = euid();
    let mode = meta.permissions().mode();
    if meta.uid() != me && meta.uid() != 0 {
        return refuse(format!(
            "is owned by uid {}, neither uid {me} (running procjournal) nor root",
            meta.uid()
        ));
    }
    let sticky_tmp = place == Place::Ancestor && mode & STICKY != 0 && meta.uid() == 0;
    if mode & SHARED_WRITE != 0 && !sticky_tmp {
        return refuse(format!(
            "is writable by its group or by others (mode {:04o})",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// Checks every directory of the canonical `path` above it (not `path` itself), from `/` down.
pub(crate) fn check_ancestors(path: &Path) -> Result<(), Unsafe> {
    let mut at = PathBuf::new();
    let Some(parent) = path.parent() else {
        return Ok(());
    };
    for part in parent.components() {
        at.push(part);
        let meta = std::fs::symlink_metadata(&at).map_err(|e| Unsafe {
            path: at.clone(),
            why: e.to_string(),
        })?;
        check(&at, &meta, Place::Ancestor)?;
    }
    Ok(())
}

/// The longest prefix of `path` that exists, so that the ancestors a creation would go
/// through can be checked before anything is created in them.
pub(crate) fn existing_prefix(path: &Path) -> Option<&Path> {
    path.ancestors()
        .find(|p| std::fs::symlink_metadata(p).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with_mode(mode: u32) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        dir
    }

    fn verdict(mode: u32, place: Place) -> Result<(), Unsafe> {
        let dir = dir_with_mode(mode);
        let meta = std::fs::symlink_metadata(dir.path()).unwrap();
        check(dir.path(), &meta, place)
    }

    #[test]
    fn shared_write_is_refused_and_sticky_only_for_ancestors() {
        assert!(verdict(0o700, Place::Root).is_ok());
        assert!(verdict(0o755, Place::Root).is_ok());
        assert!(verdict(0o770, Place::Root).is_err());
        assert!(verdict(0o757, Place::Ancestor).is_err());
        // A temp dir belongs to whoever runs the test: the sticky exception needs root's.
        let sticky = verdict(0o1777, Place::Ancestor);
        assert_eq!(sticky.is_ok(), euid() == 0, "{sticky:?}");
        assert!(verdict(0o1777, Place::Root).is_err());
    }

    #[test]
    fn a_symlink_is_refused_where_a_directory_is_expected() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        let meta = std::fs::symlink_metadata(&link).unwrap();
        let refused = check(&link, &meta, Place::Ancestor).unwrap_err();
        assert!(refused.why.contains("symbolic link"), "{refused}");
    }
}
