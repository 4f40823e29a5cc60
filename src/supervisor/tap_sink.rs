//! A tap's sink: descriptors the drain writes a tap's chunks to itself, in the order it read
//! them, instead of handing each chunk to a consumer's thread.
//!
//! Handing a chunk over wakes the consumer's thread, and on a chatty workload (text lines come
//! 8 KiB a write) that is one wake-up per chunk: 8 % of `run`'s time for 1 GiB of text lines
//! into `/dev/null`, and 0.16 s of its CPU, measured against writing from the drain (release
//! builds, 12 interleaved rounds). Writing from the drain is safe only where no reader can make
//! it wait, so each stream gets an outlet of the kind its descriptor allows:
//! - whole: a regular file on a local file system, or `/dev/null`. A write there waits at most
//!   for the disk (dirty-page throttling), as the spool's own append beside it does; never for
//!   a reader, nor for a server (a network or user-space file system's write can hang with its
//!   server). The drain writes every chunk whole.
//! - fitting: a pipe or a socket, whose reader may not read for ever. The drain writes only
//!   what fits now, without waiting (`RWF_NOWAIT`), of a chunk no larger than [`FITTING_MAX`],
//!   and leaves the rest to the consumer's thread; a kernel that cannot write so
//!   (`EOPNOTSUPP`) turns the outlet off for good.
//! - none: anything else (a terminal, whose output XOFF can stop): the consumer writes it all.
//!
//! Invariants:
//! - The descriptors are duplicates (close-on-exec) of the ones examined: what they refer to
//!   cannot change under the drain, whatever the caller does with its own.
//! - A write to a whole outlet is retried until every byte is written, or fails; no outlet ever
//!   waits on a reader. A failed write ends the tap (see `tap.rs`), it never drops bytes
//!   silently.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::io::ReadWriteFlags;

use crate::spool::format::Stream;

/// `pwritev2`'s offset for the descriptor's own position (a pipe has no other).
const CURRENT_POSITION: u64 = u64::MAX;

/// The largest chunk the drain writes to a fitting outlet itself. A small chunk costs the
/// consumer's thread more to be woken for than to copy; a large one is better copied by that
/// thread, beside the drain's own work, than split between the two (what fits, then the rest,
/// into a pipe of 64 KiB). Measured with `run` into a pipe read in 256 KiB reads (release
/// builds, interleaved), against handing every chunk over: with every chunk tried, text lines
/// (chunks of about 8 KiB) took 1.03 instead of 1.12 times the shell's file (16 rounds) but
/// zeros (chunks of 256 KiB) 1.04 instead of 0.98 (10 rounds); with this bound, text lines
/// 1.06 instead of 1.11 (12 rounds) and zeros 0.89 instead of 0.93 (10 rounds).
const FITTING_MAX: usize = 64 * 1024;

/// `statfs` types of local file systems: their writes never wait on a server.
const LOCAL_FILE_SYSTEMS: &[i64] = &[
    0xEF53,      // ext2, ext3, ext4
    0x5846_5342, // xfs
    0x9123_683E, // btrfs
    0x0102_1994, // tmpfs
    0xF2F5_2010, // f2fs
    0x2FC1_2FC1, // zfs
    0xCA45_1A4E, // bcachefs
    0x794C_7630, // overlayfs (a container's root, over a local one)
];

/// `/dev/null`'s device number (major 1, minor 3, fixed by the kernel's device list).
const DEV_NULL: (u32, u32) = (1, 3);

/// Whether `stat` is `/dev/null`'s: a write there is taken whole, a read gives nothing.
pub(crate) fn is_dev_null(stat: &rustix::fs::Stat) -> bool {
    rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::CharacterDevice
        && (
            rustix::fs::major(stat.st_rdev),
            rustix::fs::minor(stat.st_rdev),
        ) == DEV_NULL
}

/// Where the drain may write a tap's chunks itself: an outlet for stdout's (and a terminal's)
/// and one for stderr's.
#[derive(Debug)]
pub struct TapSink {
    out: Outlet,
    err: Outlet,
}

/// How the drain may write one stream's chunks (module doc).
#[derive(Debug)]
enum Outlet {
    Whole(OwnedFd),
    /// With whether the kernel refused a write that does not wait.
    Fitting(OwnedFd, AtomicBool),
    None,
}

impl TapSink {
    /// The outlets of duplicates of `out` and `err`, each of the kind its descriptor allows.
    /// A write into a pipe whose reader is gone raises `SIGPIPE`, as any write does: the
    /// caller ignores that signal (a Rust program does by default) and gets `EPIPE`, which
    /// ends the tap.
    ///
    /// # Errors
    /// When a descriptor cannot be examined or duplicated.
    pub fn of(out: BorrowedFd<'_>, err: BorrowedFd<'_>) -> std::io::Result<TapSink> {
        Ok(TapSink {
            out: Outlet::of(out)?,
            err: Outlet::of(err)?,
        })
    }

    /// Whether the drain writes every chunk itself: both outlets take whole writes, so the
    /// consumer gets no chunk at all.
    pub fn whole(&self) -> bool {
        matches!((&self.out, &self.err), (Outlet::Whole(_), Outlet::Whole(_)))
    }

    /// Whether the drain may write any chunk itself.
    pub fn any(&self) -> bool {
        !matches!((&self.out, &self.err), (Outlet::None, Outlet::None))
    }

    /// Writes what may be written of `bytes` to the outlet of `stream` now: all of it to a
    /// whole outlet, what fits without waiting to a fitting one, nothing to none. Returns how
    /// many bytes were written (from the start); the rest is the consumer's.
    ///
    /// # Errors
    /// The write failed (a full disk, a reader gone): the tap ends.
    pub(crate) fn write_now(&self, stream: Stream, bytes: &[u8]) -> std::io::Result<usize> {
        let outlet = match stream {
            Stream::Stdout | Stream::Terminal => &self.out,
            Stream::Stderr => &self.err,
        };
        match outlet {
            Outlet::Whole(fd) => write_all(fd.as_fd(), bytes).map(|()| bytes.len()),
            Outlet::Fitting(fd, refused)
                if bytes.len() <= FITTING_MAX && !refused.load(Ordering::Relaxed) =>
            {
                write_fitting(fd.as_fd(), refused, bytes)
            }
            Outlet::Fitting(..) | Outlet::None => Ok(0),
        }
    }
}

impl Outlet {
    fn of(fd: BorrowedFd<'_>) -> std::io::Result<Outlet> {
        let stat = rustix::fs::fstat(fd)?;
        Ok(match rustix::fs::FileType::from_raw_mode(stat.st_mode) {
            rustix::fs::FileType::RegularFile if on_a_local_file_system(fd)? => {
                Outlet::Whole(fd.try_clone_to_owned()?)
            }
            rustix::fs::FileType::CharacterDevice if is_dev_null(&stat) => {
                Outlet::Whole(fd.try_clone_to_owned()?)
            }
            rustix::fs::FileType::Fifo | rustix::fs::FileType::Socket => {
                Outlet::Fitting(fd.try_clone_to_owned()?, AtomicBool::new(false))
            }
            _ => Outlet::None,
        })
    }
}

/// Writes all of `bytes` to `to` itself (no buffer of std's in between), retrying a write
/// that an interrupt cut short.
pub(crate) fn write_all(to: BorrowedFd<'_>, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        match rustix::io::write(to, bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Writes what fits of `bytes` without waiting, at the descriptor's own position.
fn write_fitting(to: BorrowedFd<'_>, refused: &AtomicBool, bytes: &[u8]) -> std::io::Result<usize> {
    let mut written = 0;
    while let Some(rest) = bytes.get(written..).filter(|r| !r.is_empty()) {
        let slices = [std::io::IoSlice::new(rest)];
        match rustix::io::pwritev2(to, &slices, CURRENT_POSITION, ReadWriteFlags::NOWAIT) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => break,
            Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::INVAL) => {
                refused.store(true, Ordering::Relaxed);
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(written)
}

/// Whether the regular file `fd` lies on a local file system.
fn on_a_local_file_system(fd: BorrowedFd<'_>) -> std::io::Result<bool> {
    let fs = rustix::fs::fstatfs(fd)?;
    #[allow(clippy::useless_conversion)] // its width differs between targets
    let magic = i64::from(fs.f_type);
    Ok(LOCAL_FILE_SYSTEMS.contains(&magic))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(out: &impl AsFd, err: &impl AsFd) -> TapSink {
        TapSink::of(out.as_fd(), err.as_fd()).expect("examine")
    }

    #[test]
    fn each_descriptor_gets_the_outlet_its_kind_allows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = std::fs::File::create(dir.path().join("out")).expect("file");
        let null = std::fs::File::create("/dev/null").expect("/dev/null");
        let (_reader, writer) = std::io::pipe().expect("pipe");
        let zero = std::fs::File::open("/dev/zero").expect("/dev/zero");
        let (socket, _peer) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let kinds = |s: &TapSink| (s.whole(), s.any());
        assert_eq!(kinds(&sink(&file, &file)), (true, true));
        assert_eq!(kinds(&sink(&file, &null)), (true, true));
        assert_eq!(kinds(&sink(&writer, &file)), (false, true), "a pipe fits");
        assert_eq!(kinds(&sink(&null, &socket)), (false, true), "a socket fits");
        assert_eq!(
            kinds(&sink(&zero, &zero)),
            (false, false),
            "only /dev/null of devices"
        );
        let pty = nix::pty::openpty(None, None).expect("openpty");
        assert_eq!(
            kinds(&sink(&pty.slave, &pty.slave)),
            (false, false),
            "a terminal"
        );
        assert_eq!(
            sink(&pty.slave, &file).write_now(Stream::Stdout, b"x").ok(),
            Some(0)
        );
    }

    #[test]
    fn a_whole_outlet_takes_every_byte_into_its_own_descriptor() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = std::fs::File::create(dir.path().join("out")).expect("out");
        let err = std::fs::File::create(dir.path().join("err")).expect("err");
        let sink = sink(&out, &err);
        // The sink's own duplicates: closing the caller's changes nothing.
        drop((out, err));
        for (stream, bytes) in [
            (Stream::Stdout, &b"one "[..]),
            (Stream::Stderr, b"two"),
            (Stream::Terminal, b"three"),
        ] {
            assert_eq!(sink.write_now(stream, bytes).expect("write"), bytes.len());
        }
        let read = |name| std::fs::read(dir.path().join(name)).expect("read");
        assert_eq!(read("out"), b"one three");
        assert_eq!(read("err"), b"two");
    }

    /// A pipe takes what fits of a small chunk, never waiting for its reader, and none of a
    /// large one; a gone reader is a failure.
    #[test]
    fn a_fitting_outlet_takes_what_fits_and_leaves_the_rest() {
        use std::io::Read;
        let (mut reader, writer) = std::io::pipe().expect("pipe");
        let capacity = nix::fcntl::fcntl(&writer, nix::fcntl::FcntlArg::F_SETPIPE_SZ(16 << 10))
            .expect("F_SETPIPE_SZ");
        let capacity = usize::try_from(capacity).expect("a size");
        assert!(capacity < FITTING_MAX);
        let sink = sink(&writer, &writer);
        let large = vec![7; FITTING_MAX + 1];
        assert_eq!(sink.write_now(Stream::Stdout, &large).expect("write"), 0);
        let bytes: Vec<u8> = (0..capacity * 2).map(|i| (i % 251) as u8).collect();
        let written = sink.write_now(Stream::Stdout, &bytes).expect("write");
        assert_eq!(written, capacity, "a full pipe takes no more");
        assert_eq!(sink.write_now(Stream::Stderr, &bytes).expect("write"), 0);
        let mut got = vec![0; capacity];
        reader.read_exact(&mut got).expect("read");
        assert_eq!(got, bytes[..capacity]);
        drop((reader, writer));
        let gone = sink
            .write_now(Stream::Stdout, b"x")
            .expect_err("a reader gone");
        assert_eq!(gone.kind(), std::io::ErrorKind::BrokenPipe);
    }
}
