//! The modes and checks of what is created under a runtime root, and the path-based opens
//! left: of a file outside any layer's held directory (a guardian's control files, the
//! receipts read back), never through a symbolic link at the last step (`O_NOFOLLOW`). What a
//! layer writes in its own directory goes through `dir.rs`, relative to a held descriptor.
//!
//! Invariants: a file created under a root is `0600`, or `0640` when its directory is shared
//! with a group (set-group-ID and group-readable: what `--group` makes the root); a directory
//! is `0700`, or `02750` in a shared one. The process umask can only narrow the private modes,
//! and the shared ones are set with `fchmod` after creation, so a narrow umask does not take
//! back a group's access that was asked for.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::secure;

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
    }

    #[test]
    fn directory_modes_follow_the_parent() {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        create_dir(&private).unwrap();
        assert_eq!(dir_mode(&private).unwrap() & 0o7777, PRIVATE_DIR);
        fchmod(open_dir(&private).unwrap(), SHARED_DIR).unwrap();
        let sub = private.join("sub");
        create_dir(&sub).unwrap();
        assert_eq!(dir_mode(&sub).unwrap() & 0o7777, SHARED_DIR);
        // Files take their mode from the directory that holds them: `dir.rs`'s tests.
    }
}
