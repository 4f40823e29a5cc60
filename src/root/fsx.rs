//! How every layer opens and creates files and directories under a runtime root: never
//! through a symbolic link at the last step (`O_NOFOLLOW`), and with the permissions the
//! directory they are created in implies, so that no layer needs to be told the root's access.
//!
//! Invariants: a file created under a root is `0600`, or `0640` when its directory is shared
//! with a group (set-group-ID and group-readable: what `--group` makes the root); a directory
//! is `0700`, or `02750` in a shared one. The process umask can only narrow the private modes,
//! and the shared ones are set with `fchmod` after creation, so a narrow umask does not take
//! back a group's access that was asked for. A directory that a layer makes sure of
//! ([`ensure_dir`]) is a real directory (no symbolic link), owned by this user or root and
//! writable by nobody else, or it is refused.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::secure::{self, Place};

/// Set-group-ID on a directory: new entries take its group.
const SETGID: u32 = 0o2000;
const GROUP_READ: u32 = 0o040;

pub(crate) const PRIVATE_FILE: u32 = 0o600;
pub(crate) const PRIVATE_DIR: u32 = 0o700;
pub(crate) const SHARED_FILE: u32 = 0o640;
pub(crate) const SHARED_DIR: u32 = 0o2750;

/// Whether a directory with this mode shares its entries with its group.
pub(crate) fn is_shared(mode: u32) -> bool {
    mode & (SETGID | GROUP_READ) == SETGID | GROUP_READ
}

/// Open options that refuse a symbolic link as the last component and create private files.
pub(crate) fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(PRIVATE_FILE);
    options
}

/// Opens an existing file for reading, refusing a symbolic link.
pub(crate) fn open_read(path: &Path) -> io::Result<File> {
    options().read(true).open(path)
}

fn dir_mode(path: &Path) -> io::Result<u32> {
    Ok(std::fs::symlink_metadata(path)?.permissions().mode())
}

/// Gives a file just created in `dir` the mode `dir` implies (only a shared directory changes
/// anything: the private mode was given at creation).
pub(crate) fn fit_file(file: &File, dir: &Path) -> io::Result<()> {
    if is_shared(dir_mode(dir)?) {
        fchmod(file, SHARED_FILE)?;
    }
    Ok(())
}

pub(crate) fn fchmod(fd: impl AsFd, mode: u32) -> io::Result<()> {
    let mode = nix::sys::stat::Mode::from_bits_truncate(mode as libc::mode_t);
    nix::sys::stat::fchmod(fd, mode).map_err(io::Error::from)
}

/// Opens a directory without following a symbolic link (a descriptor for `fstat`/`fchmod`).
pub(crate) fn open_dir(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates the directory `path` (its parent must exist) with the mode its parent implies;
/// an existing one is an `AlreadyExists` error, as `std::fs::create_dir` gives.
pub(crate) fn create_dir(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().mode(PRIVATE_DIR).create(path)?;
    let shared = path
        .parent()
        .map(dir_mode)
        .transpose()?
        .is_some_and(is_shared);
    if shared {
        fchmod(open_dir(path)?, SHARED_DIR)?;
    }
    Ok(())
}

/// Makes sure `path` is a directory fit to write in: created if missing (its parent must
/// exist), else checked (no symbolic link, ours or root's, writable by nobody else).
pub(crate) fn ensure_dir(path: &Path) -> io::Result<()> {
    match create_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        other => other?,
    }
    let meta = std::fs::symlink_metadata(path)?;
    secure::check(path, &meta, Place::Root)
        .map_err(|refused| io::Error::new(io::ErrorKind::PermissionDenied, refused.to_string()))
}

/// [`ensure_dir`] of `path` and of every missing directory above it (a spool's own directory
/// and `spool/` with it).
pub(crate) fn ensure_dir_all(path: &Path) -> io::Result<()> {
    if std::fs::symlink_metadata(path).is_err()
        && let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
        && std::fs::symlink_metadata(parent).is_err()
    {
        ensure_dir_all(parent)?;
    }
    ensure_dir(path)
}

/// Whether `meta` belongs to this user (what a tightening may change).
pub(crate) fn is_mine(meta: &std::fs::Metadata) -> bool {
    meta.uid() == secure::euid()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_is_not_opened_or_taken_for_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"secret").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = options().append(true).create(true).open(&link).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
        assert!(open_read(&link).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"secret");

        let dir_link = dir.path().join("dirlink");
        std::os::unix::fs::symlink(dir.path(), &dir_link).unwrap();
        let err = ensure_dir(&dir_link).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
    }

    #[test]
    fn modes_follow_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        create_dir(&private).unwrap();
        assert_eq!(dir_mode(&private).unwrap() & 0o7777, PRIVATE_DIR);
        let file = options()
            .write(true)
            .create_new(true)
            .open(private.join("f"))
            .unwrap();
        fit_file(&file, &private).unwrap();
        assert_eq!(
            file.metadata().unwrap().permissions().mode() & 0o7777,
            0o600
        );

        fchmod(open_dir(&private).unwrap(), SHARED_DIR).unwrap();
        let sub = private.join("sub");
        create_dir(&sub).unwrap();
        assert_eq!(dir_mode(&sub).unwrap() & 0o7777, SHARED_DIR);
        let file = options()
            .write(true)
            .create_new(true)
            .open(sub.join("f"))
            .unwrap();
        fit_file(&file, &sub).unwrap();
        assert_eq!(
            file.metadata().unwrap().permissions().mode() & 0o7777,
            0o640
        );
    }
}
