//! `procjournal spool cat`: offline, read-only output of one process's spool.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::render;
use crate::spool::Spool;

#[derive(Debug, Subcommand)]
pub(crate) enum SpoolCommand {
    /// Print a process's retained output from a cursor: safe text by default, or base64 of the
    /// exact bytes. The cursor to resume from is printed on stderr.
    Cat(CatArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CatArgs {
    /// Runtime root (default: $PROCJOURNAL_ROOT, $XDG_STATE_HOME/procjournal, ~/.local/state/procjournal).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// The process handle, as `journal manifests` prints it (p-...).
    handle: String,
    /// Combined-stream byte offset to start from.
    #[arg(long, default_value_t = 0)]
    cursor: u64,
    /// Print base64 of exactly the raw bytes instead of safe text.
    #[arg(long)]
    base64: bool,
}

/// Bytes read per page while catting.
const PAGE_BYTES: usize = 1024 * 1024;

pub(crate) fn run(cmd: SpoolCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SpoolCommand::Cat(args) => cat(args),
    }
}

fn cat(args: CatArgs) -> anyhow::Result<ExitCode> {
    let root = super::root_or_default(args.root)?;
    let valid = args
        .handle
        .strip_prefix("p-")
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    anyhow::ensure!(
        valid,
        "{:?} is not a process handle (p- and 32 hex digits)",
        args.handle
    );
    let root = crate::root::Root::open_reader(&root)?;
    let dir = root.spool_dir().join(&args.handle);
    let (spool, recovery) = Spool::open_reader(&dir)
        .with_context(|| format!("no readable spool for {}", args.handle))?;
    if !recovery.is_clean() {
        eprintln!("procjournal: spool recovery: {recovery:?}");
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut cursor = args.cursor;
    let mut first = true;
    loop {
        let read = spool.read(cursor, PAGE_BYTES)?;
        if first && read.gap {
            eprintln!(
                "procjournal: bytes before {} are no longer retained; starting there",
                read.retained_from
            );
        }
        first = false;
        if read.bytes.is_empty() {
            break;
        }
        if args.base64 {
            writeln!(out, "{}", render::base64(&read.bytes))?;
        } else {
            let at_end = read.next_cursor == read.total_bytes;
            out.write_all(render::safe_text(&read.bytes, at_end).text.as_bytes())?;
        }
        cursor = read.next_cursor;
    }
    out.flush()?;
    eprintln!("next cursor {cursor}");
    Ok(ExitCode::SUCCESS)
}
