//! Pseudo-terminals for PTY launches: the pair (`openpty`), the master side as the supervisor
//! holds it (non-blocking, registered with tokio's reactor), and the standard streams a launch
//! gets (pipes, or the terminal).
//!
//! Why `openpty` and not a PTY crate: the crates that spawn a child on a terminal fork through
//! `pre_exec` (a real fork of the host, which `spawn.rs` avoids) or read the master on a
//! blocking thread; here the workload is started by `posix_spawn` or the guardian like any
//! other, with the slave as its descriptors 0-2, and the master is read by the drain through
//! `AsyncFd` like a pipe.
//!
//! Invariants:
//! - The supervisor keeps no descriptor of the slave once the launch returns: the tree holds
//!   the only ones, so the master reports the end of output (EIO) when the last member closes
//!   its terminal.
//! - A master read that fails with EIO is end of output (the last slave descriptor closed),
//!   never a capture failure; any other error is one.
//! - Both descriptors are close-on-exec; only the spawn's `dup2` actions put the slave on 0-2.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;

use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A terminal's size in character cells. Both at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PtySize {
    pub rows: u16,
    pub cols: u16,
}

impl PtySize {
    /// The classic terminal (what `run --pty` gives a command without a terminal of its own).
    pub const DEFAULT: PtySize = PtySize { rows: 24, cols: 80 };

    fn winsize(self) -> nix::pty::Winsize {
        nix::pty::Winsize {
            ws_row: self.rows,
            ws_col: self.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        }
    }
}

/// A fresh terminal pair before the launch: the master (ours) and the slave (the workload's),
/// with the slave's device path, which a session leader opens to make it its controlling
/// terminal.
#[derive(Debug)]
pub(crate) struct PtyPair {
    pub master: OwnedFd,
    pub slave: OwnedFd,
    pub slave_path: PathBuf,
}

/// Opens a terminal pair of `size`; both ends close-on-exec, the master non-blocking.
pub(crate) fn open(size: PtySize) -> std::io::Result<PtyPair> {
    let pair = nix::pty::openpty(Some(&size.winsize()), None)?;
    // openpty sets neither flag: without close-on-exec a concurrent spawn would leak the pair
    // into another workload (which would then hold this terminal open).
    for fd in [&pair.master, &pair.slave] {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    }
    let flags = OFlag::from_bits_retain(fcntl(&pair.master, FcntlArg::F_GETFL)?);
    fcntl(&pair.master, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    let slave_path = std::fs::read_link(format!("/proc/self/fd/{}", pair.slave.as_raw_fd()))?;
    Ok(PtyPair {
        master: pair.master,
        slave: pair.slave,
        slave_path,
    })
}

/// The supervisor's side of a launch's terminal: what the workload writes is read here, what
/// is written here is the workload's input, and the terminal's size is set here.
#[derive(Debug)]
pub struct PtyMaster {
    fd: AsyncFd<OwnedFd>,
}

impl PtyMaster {
    /// Registers `master` (non-blocking already) with the current runtime's reactor.
    pub(crate) fn new(master: OwnedFd) -> std::io::Result<PtyMaster> {
        Ok(PtyMaster {
            fd: super::group::register_with(master, Interest::READABLE | Interest::WRITABLE)?,
        })
    }

    /// Resolves once a read may find bytes or the end.
    pub async fn readable(&self) -> std::io::Result<()> {
        let mut guard = self.fd.readable().await?;
        // The readiness stays set until a read finds nothing (`try_read` clears it then).
        guard.retain_ready();
        Ok(())
    }

    /// Reads what the terminal holds now. `Ok(0)` is the end of output: EIO, which the master
    /// reports once no descriptor of the slave is left open (and everything written before was
    /// read). `WouldBlock` when nothing is there yet (the readiness is then cleared, so the
    /// next `readable` waits for the reactor).
    pub fn try_read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.fd.try_io(Interest::READABLE, |fd| {
            nix::unistd::read(fd, buf).map_err(std::io::Error::from)
        }) {
            Err(e) if e.raw_os_error() == Some(libc::EIO) => Ok(0),
            other => other,
        }
    }

    /// Writes some of `bytes` as the workload's input (at least one byte unless `bytes` is
    /// empty), waiting for room as a pipe's writer would; returns how many.
    pub async fn write(&self, bytes: &[u8]) -> std::io::Result<usize> {
        if bytes.is_empty() {
            return Ok(0);
        }
        self.fd
            .async_io(Interest::WRITABLE, |fd| {
                nix::unistd::write(fd, bytes).map_err(std::io::Error::from)
            })
            .await
    }

    /// Sets the terminal's size; the kernel sends SIGWINCH to its foreground process group.
    pub fn resize(&self, size: PtySize) -> std::io::Result<()> {
        rustix::termios::tcsetwinsize(
            self.fd.get_ref(),
            rustix::termios::Winsize {
                ws_row: size.rows,
                ws_col: size.cols,
                ws_xpixel: 0,
                ws_ypixel: 0,
            },
        )?;
        Ok(())
    }

    /// The terminal's size now.
    pub fn size(&self) -> std::io::Result<PtySize> {
        let w = rustix::termios::tcgetwinsize(self.fd.get_ref())?;
        Ok(PtySize {
            rows: w.ws_row,
            cols: w.ws_col,
        })
    }

    /// How the terminal's line discipline takes input now, as the program reading it last set
    /// it (the master shares the slave's termios).
    pub fn line_mode(&self) -> std::io::Result<LineMode> {
        let t = rustix::termios::tcgetattr(self.fd.get_ref())?;
        Ok(LineMode {
            eof: t.special_codes[rustix::termios::SpecialCodeIndex::VEOF],
            canonical: t.local_modes.contains(rustix::termios::LocalModes::ICANON),
            echo: t.local_modes.contains(rustix::termios::LocalModes::ECHO),
        })
    }

    /// Bytes the workload wrote that are waiting to be read (`FIONREAD` on the master).
    pub fn pending(&self) -> std::io::Result<u64> {
        Ok(rustix::io::ioctl_fionread(self.fd.get_ref())?)
    }
}

/// A terminal's input mode: what ends input (`VEOF`, Ctrl-D unless a program changed it) and
/// whether input is read by lines (canonical) and echoed. A readline prompt turns both off while
/// it reads a line and back on after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineMode {
    pub eof: u8,
    pub canonical: bool,
    pub echo: bool,
}

impl AsFd for PtyMaster {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.get_ref().as_fd()
    }
}
