//! The one way the CLI prints. Rust ignores SIGPIPE, so a reader that went away
//! (`procjournal ps | head -1`) turns every later write into `EPIPE`; `println!` and `eprintln!`
//! panic on it (exit 101). Here instead:
//!
//! - [`outln!`] writes a line to stdout and returns the `io::Result`, which a command passes up
//!   with `?`; `cli::main` ends quietly on a broken pipe anywhere in an error's chain, as a
//!   command reading its own writers (`logs`, `journal dump`) does with theirs.
//! - [`note!`] writes a diagnostic line to stderr, best effort: a diagnostic nobody can read is
//!   dropped, never a reason to fail.
//! - [`verdict_stands`]: where a command's exit status is a verdict decided before it is printed
//!   (`wait`, `capture`), a reader gone keeps the verdict, so that `set -o pipefail` never sees
//!   a failed command as a success.
//!
//! Invariant: nothing in `src/cli` writes with `println!`, `print!` or `eprintln!`
//! (`tests/it/cli_broken_pipe.rs` drives every subcommand into a closed pipe).

use std::fmt;
use std::io::{self, Write};

/// A line to stdout, flushed: `outln!("{x}")?`.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::out::line(format_args!($($arg)*))
    };
}

/// A diagnostic line to stderr, best effort.
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::cli::out::note(format_args!($($arg)*))
    };
}

pub(crate) fn line(args: fmt::Arguments<'_>) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_fmt(args)?;
    out.write_all(b"\n")?;
    out.flush()
}

pub(crate) fn note(args: fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// `written`, except that a reader gone is no failure: the status already decided stands.
pub(crate) fn verdict_stands(written: io::Result<()>) -> io::Result<()> {
    match written {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Whether `error` is, anywhere in its chain, a write to a reader that went away.
pub(crate) fn broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == Some(io::ErrorKind::BrokenPipe)
    })
}
