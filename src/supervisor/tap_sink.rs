//! A tap's sink: descriptors the drain writes a tap's chunks to itself, in the order it read
//! them, instead of handing each chunk to a consumer's thread.
//!
//! Handing a chunk over wakes the consumer's thread, and on a chatty workload (text lines come
//! 8 KiB a write) that is one wake-up per chunk: 8 % of `run`'s time for 1 GiB of text lines
//! into `/dev/null`, and 0.16 s of its CPU, measured against writing from the drain (release
//! builds, 12 interleaved rounds). Writing from the drain is safe only where no reader can make
//! a write wait: so a sink is made only of descriptors that cannot.
//!
//! Invariants:
//! - Each descriptor is a regular file on a local file system, or `/dev/null`. A write to
//!   either waits at most for the disk (dirty-page throttling), as the spool's own append
//!   beside it does; never for a reader (a pipe's or a terminal's consumer may not read for
//!   ever, which is why a tap has a channel at all) nor for a server (a network or user-space
//!   file system's write can hang with its server). Anything else gets no sink.
//! - The descriptors are duplicates (close-on-exec) of the ones checked: what they refer to
//!   cannot change under the drain, whatever the caller does with its own.
//! - A write is retried until every byte is written, or fails; a failed write ends the tap
//!   (see `tap.rs`), it never drops bytes silently.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::spool::format::Stream;

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

/// Descriptors the drain writes a tap's chunks to: stdout's (and a terminal's) and stderr's.
#[derive(Debug)]
pub struct TapSink {
    out: OwnedFd,
    err: OwnedFd,
}

impl TapSink {
    /// A sink writing to duplicates of `out` and `err`, or `None` when either could make a
    /// write wait on a reader or a server (a pipe, a terminal, a socket, a remote file).
    ///
    /// # Errors
    /// When a descriptor cannot be examined or duplicated.
    pub fn of(out: BorrowedFd<'_>, err: BorrowedFd<'_>) -> std::io::Result<Option<TapSink>> {
        if !never_waits_on_a_reader(out)? || !never_waits_on_a_reader(err)? {
            return Ok(None);
        }
        Ok(Some(TapSink {
            out: out.try_clone_to_owned()?,
            err: err.try_clone_to_owned()?,
        }))
    }

    /// Writes all of `bytes` to the descriptor of `stream`.
    pub(crate) fn write_all(&self, stream: Stream, mut bytes: &[u8]) -> std::io::Result<()> {
        let to = match stream {
            Stream::Stdout | Stream::Terminal => self.out.as_fd(),
            Stream::Stderr => self.err.as_fd(),
        };
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
}

/// Whether `fd` is a regular file on a local file system, or `/dev/null`.
fn never_waits_on_a_reader(fd: BorrowedFd<'_>) -> std::io::Result<bool> {
    let stat = rustix::fs::fstat(fd)?;
    let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
    Ok(match kind {
        rustix::fs::FileType::RegularFile => {
            let fs = rustix::fs::fstatfs(fd)?;
            #[allow(clippy::useless_conversion)] // its width differs between targets
            let magic = i64::from(fs.f_type);
            LOCAL_FILE_SYSTEMS.contains(&magic)
        }
        rustix::fs::FileType::CharacterDevice => {
            let dev = stat.st_rdev;
            (rustix::fs::major(dev), rustix::fs::minor(dev)) == DEV_NULL
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink_of(out: &impl AsFd, err: &impl AsFd) -> bool {
        TapSink::of(out.as_fd(), err.as_fd())
            .expect("examine")
            .is_some()
    }

    #[test]
    fn only_files_and_dev_null_make_a_sink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = std::fs::File::create(dir.path().join("out")).expect("file");
        let null = std::fs::File::create("/dev/null").expect("/dev/null");
        let (reader, writer) = std::io::pipe().expect("pipe");
        let zero = std::fs::File::open("/dev/zero").expect("/dev/zero");
        assert!(sink_of(&file, &file));
        assert!(sink_of(&file, &null));
        assert!(sink_of(&null, &null));
        assert!(!sink_of(&writer, &file), "a pipe can wait on its reader");
        assert!(!sink_of(&file, &reader));
        assert!(!sink_of(&null, &zero), "only /dev/null among devices");
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        assert!(!sink_of(&a, &null), "a socket can wait on its peer");
    }

    #[test]
    fn a_sink_writes_each_stream_to_its_own_descriptor() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = std::fs::File::create(dir.path().join("out")).expect("out");
        let err = std::fs::File::create(dir.path().join("err")).expect("err");
        let sink = TapSink::of(out.as_fd(), err.as_fd())
            .expect("examine")
            .expect("files make a sink");
        // The sink's own duplicates: closing the caller's changes nothing.
        drop((out, err));
        sink.write_all(Stream::Stdout, b"one ").expect("write");
        sink.write_all(Stream::Stderr, b"two").expect("write");
        sink.write_all(Stream::Terminal, b"three").expect("write");
        let read = |name| std::fs::read(dir.path().join(name)).expect("read");
        assert_eq!(read("out"), b"one three");
        assert_eq!(read("err"), b"two");
    }
}
