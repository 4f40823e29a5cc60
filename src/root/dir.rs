//! A directory under a runtime root, held by descriptor: every file a layer opens, creates,
//! renames or removes in it is named relative to that descriptor (`openat`, `renameat`,
//! `unlinkat`, `mkdirat`), so a path is resolved once, when the directory is opened, and never
//! again. Whoever later replaces the directory's path (by a symbolic link, or by renaming
//! another directory in) redirects nothing a layer already holds.
//!
//! Invariants: a [`Dir`] opened for writing ([`Dir::open`], [`Dir::ensure`], [`Dir::sub`]) is a
//! real directory (its last component no symbolic link: `O_NOFOLLOW`), owned by this user or
//! root and writable by nobody else, checked with `fstat` on the descriptor itself, not on the
//! path. Names given to its methods are single components (no `/`, not `.` or `..`), and no
//! method follows a symbolic link at that component. Files it creates get the mode the
//! directory implies (`fsx.rs`). A [`Dir::reader`] skips the ownership check (read-only tools
//! read roots of other users) but still refuses symbolic links.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;

use super::fsx;
use super::secure::{self, Place};

/// The name a path has in its directory (every listed path is its directory joined with a
/// name from the listing), to open it relative to the directory's descriptor; a path without
/// one names nothing any method accepts.
pub(crate) fn file_name(path: &Path) -> &str {
    path.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
}

/// How a file in a [`Dir`] is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// An existing file, for reading.
    Read,
    /// An existing file, for reading and writing.
    ReadWrite,
    /// A new file, for reading and writing; an existing one is `AlreadyExists`.
    CreateNew,
}

impl Access {
    fn flags(self) -> OFlag {
        let base = OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        base | match self {
            Access::Read => OFlag::O_RDONLY,
            Access::ReadWrite => OFlag::O_RDWR,
            Access::CreateNew => OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL,
        }
    }
}

/// A directory held by descriptor; the path is kept for messages only.
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

fn refused(unsafe_: secure::Unsafe) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, unsafe_.to_string())
}

/// A single path component: what every method takes as a name.
fn component(name: &str) -> io::Result<&str> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(invalid(format!("{name:?} is not a file name")));
    }
    Ok(name)
}

fn open_dir_at(at: BorrowedFd<'_>, name: &str) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    Ok(nix::fcntl::openat(at, name, flags, Mode::empty())?)
}

impl Dir {
    /// Opens the directory `path` for writing in it, refusing a symbolic link and a directory
    /// another user could change.
    pub(crate) fn open(path: &Path) -> io::Result<Dir> {
        let dir = Dir::reader(path)?;
        dir.check()?;
        Ok(dir)
    }

    /// Opens the directory `path` for reading only: a symbolic link is refused, its owner is not
    /// checked.
    pub(crate) fn reader(path: &Path) -> io::Result<Dir> {
        let fd = OwnedFd::from(fsx::open_dir(path)?);
        Ok(Dir {
            fd,
            path: path.to_owned(),
        })
    }

    /// Creates the directory `path` if missing (its parent must exist), then [`Dir::open`]s
    /// it. The new entry is not synced: a caller that relies on it syncs the parent.
    pub(crate) fn ensure(path: &Path) -> io::Result<Dir> {
        match fsx::create_dir(path) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            other => other?,
        }
        Dir::open(path)
    }

    /// [`Dir::ensure`] of `path` and of every missing directory above it.
    pub(crate) fn ensure_all(path: &Path) -> io::Result<Dir> {
        if std::fs::symlink_metadata(path).is_err()
            && let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
            && std::fs::symlink_metadata(parent).is_err()
        {
            Dir::ensure_all(parent)?;
        }
        Dir::ensure(path)
    }

    fn check(&self) -> io::Result<()> {
        let meta = File::from(self.fd.try_clone()?).metadata()?;
        secure::check(&self.path, &meta, Place::Root).map_err(refused)
    }

    fn mode(&self) -> io::Result<u32> {
        let stat = nix::sys::stat::fstat(&self.fd)?;
        Ok(stat.st_mode as u32)
    }

    /// The subdirectory `name`, created first when `create` (the new entry durable here);
    /// checked as [`Dir::open`] checks.
    pub(crate) fn sub(&self, name: &str, create: bool) -> io::Result<Dir> {
        let name = component(name)?;
        let created = create
            && match nix::sys::stat::mkdirat(&self.fd, name, Mode::from_bits_truncate(0o700)) {
                Ok(()) => true,
                Err(nix::errno::Errno::EEXIST) => false,
                Err(e) => return Err(e.into()),
            };
        let sub = Dir::from_fd(open_dir_at(self.fd.as_fd(), name)?, self.join(name));
        if created {
            if fsx::is_shared(self.mode()?) {
                fsx::fchmod(&sub.fd, fsx::SHARED_DIR)?;
            }
            self.sync()?;
        }
        sub.check()?;
        Ok(sub)
    }

    fn from_fd(fd: OwnedFd, path: PathBuf) -> Dir {
        Dir { fd, path }
    }

    /// A directory whose descriptor was opened, and checked, by its caller (the root's).
    pub(crate) fn adopt(fd: OwnedFd, path: PathBuf) -> Dir {
        Dir::from_fd(fd, path)
    }

    /// Another descriptor of the same directory (for a background thread).
    pub(crate) fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir::from_fd(self.fd.try_clone()?, self.path.clone()))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in this directory, for messages and for tools that take paths.
    pub(crate) fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// Opens the file `name`; a file this opening created gets the directory's file mode.
    pub(crate) fn file(&self, name: &str, access: Access) -> io::Result<File> {
        let name = component(name)?;
        let mode = Mode::from_bits_truncate(fsx::PRIVATE_FILE as libc::mode_t);
        let file = File::from(nix::fcntl::openat(&self.fd, name, access.flags(), mode)?);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(invalid(format!(
                "{} is not a regular file",
                self.join(name).display()
            )));
        }
        if access == Access::CreateNew && fsx::is_shared(self.mode()?) {
            fsx::fchmod(&file, fsx::SHARED_FILE)?;
        }
        Ok(file)
    }

    /// A new file with no name in this directory (`O_TMPFILE`), readable and writable by this
    /// process alone: scratch space that no other process can open, that recovery never sees and
    /// that the kernel frees when the last descriptor closes, crash included.
    pub(crate) fn unnamed_file(&self) -> io::Result<File> {
        let flags = OFlag::O_TMPFILE | OFlag::O_RDWR | OFlag::O_CLOEXEC;
        let mode = Mode::from_bits_truncate(fsx::PRIVATE_FILE as libc::mode_t);
        Ok(File::from(nix::fcntl::openat(&self.fd, ".", flags, mode)?))
    }

    /// Renames `from` to `to`, both in this directory (a symbolic link is renamed, never
    /// followed). Durable only after [`Dir::sync`].
    pub(crate) fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (component(from)?, component(to)?);
        Ok(nix::fcntl::renameat(&self.fd, from, &self.fd, to)?)
    }

    /// Renames `from` to `to`, both in this directory, failing with `AlreadyExists` rather than
    /// replacing a file named `to` (`RENAME_NOREPLACE`). Durable only after [`Dir::sync`].
    pub(crate) fn rename_new(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (component(from)?, component(to)?);
        let flags = nix::fcntl::RenameFlags::RENAME_NOREPLACE;
        Ok(nix::fcntl::renameat2(&self.fd, from, &self.fd, to, flags)?)
    }

    /// Removes the file (or symbolic link) `name`. Durable only after [`Dir::sync`].
    pub(crate) fn remove(&self, name: &str) -> io::Result<()> {
        let name = component(name)?;
        let flag = nix::unistd::UnlinkatFlags::NoRemoveDir;
        Ok(nix::unistd::unlinkat(&self.fd, name, flag)?)
    }

    /// Removes the empty subdirectory `name`.
    pub(crate) fn remove_dir(&self, name: &str) -> io::Result<()> {
        let name = component(name)?;
        let flag = nix::unistd::UnlinkatFlags::RemoveDir;
        Ok(nix::unistd::unlinkat(&self.fd, name, flag)?)
    }

    /// Makes the entries of this directory durable.
    pub(crate) fn sync(&self) -> io::Result<()> {
        Ok(nix::unistd::fsync(&self.fd)?)
    }

    /// The names in this directory (not `.` and `..`), in no particular order.
    pub(crate) fn names(&self) -> io::Result<Vec<OsString>> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut listing = nix::dir::Dir::openat(&self.fd, ".", flags, Mode::empty())?;
        let mut names = Vec::new();
        for entry in listing.iter() {
            let bytes = entry?.file_name().to_bytes().to_vec();
            if bytes != b"." && bytes != b".." {
                names.push(OsString::from_vec(bytes));
            }
        }
        Ok(names)
    }

    /// What `name` is, without following a symbolic link; `None` when there is nothing.
    pub(crate) fn kind(&self, name: &str) -> io::Result<Option<Kind>> {
        let name = component(name)?;
        match nix::sys::stat::fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(Kind::of(stat.st_mode, stat.st_size))),
            Err(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// What a name in a [`Dir`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File { len: u64 },
    Dir,
    Other,
}

impl Kind {
    fn of(mode: u32, size: i64) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File {
                len: u64::try_from(size).unwrap_or(0),
            },
            libc::S_IFDIR => Kind::Dir,
            _ => Kind::Other,
        }
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn what_is_opened_stays_the_directory_it_was() {
        let top = tempfile::tempdir().unwrap();
        let held = Dir::ensure(&top.path().join("journal")).unwrap();
        held.file("a", Access::CreateNew).unwrap();
        // Another directory takes the path; the held descriptor still names the first.
        std::fs::rename(top.path().join("journal"), top.path().join("moved")).unwrap();
        let elsewhere = top.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, top.path().join("journal")).unwrap();
        held.file("b", Access::CreateNew).unwrap();
        held.rename("b", "c").unwrap();
        held.sync().unwrap();
        let mut names = held.names().unwrap();
        names.sort();
        assert_eq!(names, ["a", "c"]);
        assert!(top.path().join("moved/c").is_file());
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        // And a path that is now a symbolic link is refused.
        // O_DIRECTORY with O_NOFOLLOW says ENOTDIR of a symbolic link.
        let err = Dir::open(&top.path().join("journal")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR), "{err}");
    }

    #[test]
    fn symlinks_and_paths_are_never_followed_inside() {
        let top = tempfile::tempdir().unwrap();
        let dir = Dir::ensure(&top.path().join("d")).unwrap();
        let target = top.path().join("secret");
        std::fs::write(&target, b"secret").unwrap();
        std::os::unix::fs::symlink(&target, top.path().join("d/link")).unwrap();
        for access in [Access::Read, Access::ReadWrite] {
            let err = dir.file("link", access).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{access:?}: {err}");
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"secret");
        assert!(dir.file("../secret", Access::Read).is_err());
        assert!(dir.file("..", Access::Read).is_err());
        assert!(dir.sub("link", false).is_err());
        assert_eq!(dir.kind("link").unwrap(), Some(Kind::Other));
        assert_eq!(dir.kind("none").unwrap(), None);
        dir.remove("link").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"secret");
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let top = tempfile::tempdir().unwrap();
        let open = top.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = Dir::open(&open).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        assert!(Dir::reader(&open).is_ok(), "a reader does not judge");
        let parent = Dir::ensure(&top.path().join("p")).unwrap();
        std::fs::create_dir(top.path().join("p/wide")).unwrap();
        std::fs::set_permissions(top.path().join("p/wide"), PermissionsExt::from_mode(0o757))
            .unwrap();
        assert!(parent.sub("wide", false).is_err());
    }

    #[test]
    fn modes_follow_the_directory() {
        let top = tempfile::tempdir().unwrap();
        let private = Dir::ensure(&top.path().join("private")).unwrap();
        let f = private.file("f", Access::CreateNew).unwrap();
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o7777, 0o600);
        let sub = private.sub("sub", true).unwrap();
        assert_eq!(sub.mode().unwrap() & 0o7777, 0o700);
        fsx::fchmod(&private, fsx::SHARED_DIR).unwrap();
        let shared = private.sub("shared", true).unwrap();
        assert_eq!(shared.mode().unwrap() & 0o7777, fsx::SHARED_DIR);
        let g = shared.file("g", Access::CreateNew).unwrap();
        assert_eq!(g.metadata().unwrap().permissions().mode() & 0o7777, 0o640);
        assert!(shared.file("g", Access::CreateNew).is_err());
        shared.remove("g").unwrap();
        private.remove_dir("shared").unwrap();
        assert_eq!(private.kind("shared").unwrap(), None);
    }
}
