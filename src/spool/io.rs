//! The file-system seam of a spool writer: the calls whose failure loses output (create a
//! segment, write chunks, sync), so that tests can fail the Nth of them with a real error
//! ([`FaultIo`]) while everything else runs on real files.
//!
//! Reads, listing and deletion are not behind the seam: their failures lose nothing a writer
//! holds, and readers in other processes use plain files.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::root::dir::{Access, Dir};

/// What a spool writer asks of the file system.
pub(crate) trait SpoolIo: Send + Sync + std::fmt::Debug {
    /// Creates the new file `name` in `dir` (it must not exist), readable and writable.
    fn create(&self, dir: &Dir, name: &str) -> io::Result<File>;
    fn write_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()>;
    /// `fdatasync` of a segment file.
    fn sync_data(&self, file: &File) -> io::Result<()>;
    /// `fsync` of the spool directory.
    fn sync_dir(&self, dir: &Dir) -> io::Result<()>;
    /// [`Dir::rename_new`] in the spool directory.
    fn rename_new(&self, dir: &Dir, from: &str, to: &str) -> io::Result<()>;
    /// [`Dir::remove`] in the spool directory.
    fn remove(&self, dir: &Dir, name: &str) -> io::Result<()>;
    /// Cuts (or extends) a segment file to `len` bytes.
    fn set_len(&self, file: &File, len: u64) -> io::Result<()>;
}

/// The real thing.
#[derive(Debug, Default)]
pub(crate) struct FileIo;

impl SpoolIo for FileIo {
    fn create(&self, dir: &Dir, name: &str) -> io::Result<File> {
        dir.file(name, Access::CreateNew)
    }
    fn write_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(bytes, offset)
    }
    fn sync_data(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }
    fn sync_dir(&self, dir: &Dir) -> io::Result<()> {
        dir.sync()
    }
    fn rename_new(&self, dir: &Dir, from: &str, to: &str) -> io::Result<()> {
        dir.rename_new(from, to)
    }
    fn remove(&self, dir: &Dir, name: &str) -> io::Result<()> {
        dir.remove(name)
    }
    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        file.set_len(len)
    }
}

#[cfg(test)]
pub(crate) use fault::{FaultIo, Op};

#[cfg(test)]
mod fault {
    use std::sync::Mutex;

    use super::*;

    /// Which call a fault hits.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Op {
        Create,
        Write,
        Sync,
        SyncDir,
    }

    /// Fails chosen calls (by their number, counted over every call of the seam from 0) with a
    /// chosen errno; a failing write first lands half of its bytes, as a real ENOSPC can.
    #[derive(Debug, Default)]
    pub(crate) struct FaultIo {
        state: Mutex<State>,
    }

    #[derive(Debug, Default)]
    struct State {
        calls: u64,
        /// (call number, errno) pairs still to fire.
        faults: Vec<(u64, i32)>,
        /// Every call from this number on fails with this errno (a disk that stays full),
        /// until `heal`.
        from: Option<(u64, i32)>,
        /// Every call of this op fails with this errno, until `heal`.
        every: Option<(Op, i32)>,
        log: Vec<(Op, bool)>,
    }

    impl FaultIo {
        pub(crate) fn new() -> Self {
            FaultIo::default()
        }
        /// The `nth` call (0-based, any op) fails with `errno`.
        pub(crate) fn fail_at(&self, nth: u64, errno: i32) {
            if let Ok(mut s) = self.state.lock() {
                s.faults.push((nth, errno));
            }
        }
        /// Every call from the `nth` on fails with `errno` until [`FaultIo::heal`].
        pub(crate) fn fail_from(&self, nth: u64, errno: i32) {
            if let Ok(mut s) = self.state.lock() {
                s.from = Some((nth, errno));
            }
        }
        /// Every call of `op` fails with `errno` until [`FaultIo::heal`].
        pub(crate) fn fail_every(&self, op: Op, errno: i32) {
            if let Ok(mut s) = self.state.lock() {
                s.every = Some((op, errno));
            }
        }
        pub(crate) fn heal(&self) {
            if let Ok(mut s) = self.state.lock() {
                s.from = None;
                s.every = None;
                s.faults.clear();
            }
        }
        pub(crate) fn calls(&self) -> u64 {
            self.state.lock().map_or(0, |s| s.calls)
        }
        /// The ops so far, with whether each failed.
        pub(crate) fn log(&self) -> Vec<(Op, bool)> {
            self.state.lock().map_or(Vec::new(), |s| s.log.clone())
        }

        fn check(&self, op: Op) -> Option<i32> {
            let mut s = self.state.lock().ok()?;
            let n = s.calls;
            s.calls += 1;
            let errno = s
                .faults
                .iter()
                .find(|(at, _)| *at == n)
                .map(|(_, e)| *e)
                .or(s.from.filter(|(at, _)| n >= *at).map(|(_, e)| e))
                .or(s.every.filter(|(o, _)| *o == op).map(|(_, e)| e));
            s.log.push((op, errno.is_some()));
            errno
        }
    }

    impl SpoolIo for FaultIo {
        fn create(&self, dir: &Dir, name: &str) -> io::Result<File> {
            match self.check(Op::Create) {
                Some(errno) => Err(io::Error::from_raw_os_error(errno)),
                None => FileIo.create(dir, name),
            }
        }
        fn write_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
            match self.check(Op::Write) {
                Some(errno) => {
                    // Half lands, as a write cut short by a full disk leaves it.
                    let _ = file.write_all_at(&bytes[..bytes.len() / 2], offset);
                    Err(io::Error::from_raw_os_error(errno))
                }
                None => FileIo.write_at(file, bytes, offset),
            }
        }
        fn sync_data(&self, file: &File) -> io::Result<()> {
            match self.check(Op::Sync) {
                Some(errno) => Err(io::Error::from_raw_os_error(errno)),
                None => FileIo.sync_data(file),
            }
        }
        fn sync_dir(&self, dir: &Dir) -> io::Result<()> {
            match self.check(Op::SyncDir) {
                Some(errno) => Err(io::Error::from_raw_os_error(errno)),
                None => FileIo.sync_dir(dir),
            }
        }
        // Not counted: the faults tests number are of writes and syncs.
        fn rename_new(&self, dir: &Dir, from: &str, to: &str) -> io::Result<()> {
            FileIo.rename_new(dir, from, to)
        }
        fn remove(&self, dir: &Dir, name: &str) -> io::Result<()> {
            FileIo.remove(dir, name)
        }
        fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
            FileIo.set_len(file, len)
        }
    }
}
