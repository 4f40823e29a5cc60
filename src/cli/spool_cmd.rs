//! `procjournal spool cat`: offline, read-only output of one process's spool.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

use super::deferred::Deferred;
use crate::journal::reader::JournalReader;
use crate::lifecycle::{Handle, ProcessRef};
use crate::spool::Spool;
use crate::spool::render;

#[derive(Debug, Subcommand)]
pub(crate) enum SpoolCommand {
    /// Print a process's retained output from a cursor: safe text by default, or base64 of the
    /// exact bytes. The cursor to resume from is printed on stderr, and so is every gap (output
    /// lost, with its reason) and every damaged range (output the files should hold and do not).
    /// Exit 0 when everything was read, 1 when damage was found (every intact byte is printed).
    Cat(Deferred<CatArgs>),
    /// Check every spool (or the named ones): each segment's header, every chunk's checksum and
    /// continuity, and that each holds at least the output bytes the journal recorded as
    /// durable. Exit 0 when all are clean, 1 when anything was found, 125 when nothing could be read.
    Verify(Deferred<VerifyArgs>),
}

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// Runtime root (default: $PROCJOURNAL_ROOT, $XDG_STATE_HOME/procjournal, ~/.local/state/procjournal).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// One JSON object per spool per line.
    #[arg(long)]
    json: bool,
    /// Only these handles (default: every spool and every process of the journal).
    handles: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct CatArgs {
    /// Runtime root (default: $PROCJOURNAL_ROOT, $XDG_STATE_HOME/procjournal, ~/.local/state/procjournal).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// The process: its handle, as `journal manifests` prints it (p-...), or its number (12 or
    /// #12) or name as the journal records them (a handle works without a journal record).
    handle: String,
    /// Combined-stream byte offset to start from.
    #[arg(long, default_value_t = 0)]
    cursor: u64,
    /// Print base64 of exactly the raw bytes instead of safe text: one base64 stream per
    /// contiguous run of output, each ending with a newline (a gap or damage, announced on
    /// stderr, ends a run).
    #[arg(long)]
    base64: bool,
}

/// Bytes read per page while catting.
const PAGE_BYTES: usize = 1024 * 1024;

pub(crate) fn run(cmd: SpoolCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SpoolCommand::Cat(args) => cat(args.into_inner()),
        SpoolCommand::Verify(args) => verify(args.into_inner()),
    }
}

fn cat(args: CatArgs) -> anyhow::Result<ExitCode> {
    let root_path = super::existing_root(args.root)?;
    let reference = args.handle.parse::<ProcessRef>()?;
    let root = crate::root::Root::open_reader(&root_path)?;
    let (store, _) = recorded(&root_path)?;
    // A handle needs no record: a spool can be read even when the journal lost its process.
    let handle = match reference {
        ProcessRef::Handle(h) => h,
        other => store.resolve(&other)?.handle,
    };
    let dir = root.spool_dir().join(handle.to_string());
    let (mut spool, recovery) =
        Spool::open_reader(&dir).with_context(|| format!("no readable spool for {handle}"))?;
    note_recovery(&recovery);
    if let Some(m) = store.get(&handle) {
        m.bound_reader(&mut spool);
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut cursor = args.cursor;
    let mut damaged = 0usize;
    // --base64: one base64 stream per contiguous run of output (a page's last one or two bytes
    // wait for the next page, so no padding falls inside a run), each ending with a newline.
    let mut carry: Vec<u8> = Vec::new();
    let mut in_run = false;
    loop {
        let read = spool.read(cursor, PAGE_BYTES)?;
        if let Some(skipped) = &read.skipped {
            if args.base64 {
                end_base64_run(&mut out, &mut carry, in_run)?;
                in_run = false;
            }
            // In order with the bytes: what was printed so far reaches stdout first.
            out.flush()?;
            damaged += usize::from(skipped.kind == crate::spool::SkipKind::Damage);
            note!("{}", render::escape_field(&skipped.notice(), false));
        }
        if read.bytes.is_empty() && read.next_cursor == cursor {
            break;
        }
        if args.base64 {
            if !read.bytes.is_empty() {
                in_run = true;
                carry.extend_from_slice(&read.bytes);
                let whole = carry.len() / 3 * 3;
                write!(out, "{}", render::base64(&carry[..whole]))?;
                carry.drain(..whole);
            }
        } else {
            cursor = write_safe_text(&mut out, &spool, &handle, &read, cursor)?;
            continue;
        }
        cursor = read.next_cursor;
    }
    if args.base64 {
        end_base64_run(&mut out, &mut carry, in_run)?;
    }
    out.flush()?;
    note!("next cursor {cursor}");
    Ok(if damaged > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Says on stderr what the spool's recovery found, when it found anything.
fn note_recovery(recovery: &crate::spool::SpoolRecovery) {
    if !recovery.is_clean() {
        note!(
            "procjournal: spool recovery: {} torn tail bytes, {} unusable segment files, {} damaged ranges (`procjournal spool verify` reports them)",
            recovery.torn_tail_bytes,
            recovery.bad_segments.len(),
            recovery.damaged.len()
        );
    }
}

/// Writes the safe text of a page `read` at `cursor`, and gives the cursor the next page starts at.
fn write_safe_text(
    out: &mut impl Write,
    spool: &Spool,
    handle: &Handle,
    read: &crate::spool::SpoolRead,
    cursor: u64,
) -> anyhow::Result<u64> {
    // Cut on a unit boundary (a character, an escape sequence), never inside one: the
    // next page starts with the unit this one left out (see `render`).
    let mut rendered = render::safe_text_of_read(handle, read, PAGE_BYTES, PAGE_BYTES, true);
    if rendered.stalled {
        let size = render::ESCAPE_BYTES_MAX.max(PAGE_BYTES);
        let whole = spool.read(cursor, size)?;
        rendered = render::safe_text_of_read(handle, &whole, size, PAGE_BYTES, true);
    }
    out.write_all(rendered.safe.text.as_bytes())?;
    Ok(rendered.next_cursor)
}

/// Ends a `spool cat --base64` run: the bytes `carry` still holds (fewer than three), padded,
/// and the newline, when the run printed anything.
fn end_base64_run(out: &mut impl Write, carry: &mut Vec<u8>, any: bool) -> std::io::Result<()> {
    if any {
        writeln!(out, "{}", render::base64(carry))?;
    }
    carry.clear();
    Ok(())
}

/// The journal's record of every process (manifests, with their output's gaps and bounds), and
/// whether the journal read clean. No journal at all is an empty record.
fn recorded(root: &std::path::Path) -> anyhow::Result<(crate::lifecycle::ManifestStore, bool)> {
    match JournalReader::open(root) {
        Ok(reader) => {
            let mut progress = super::progress::Progress::journal("replaying", &reader.dir());
            let (store, replay, report) =
                crate::lifecycle::restore_read_only(reader.root(), |r| {
                    progress.record(r.position)
                })?;
            progress.finish();
            Ok((store, report.is_clean() && replay.lost_below_seq.is_none()))
        }
        Err(e) => {
            note!("procjournal: no journal to compare with: {e}");
            Ok((crate::lifecycle::ManifestStore::default(), true))
        }
    }
}

/// What `spool verify` found for one process.
#[derive(Debug, Serialize)]
struct SpoolCheck {
    handle: String,
    ok: bool,
    segments: u64,
    retained_from: u64,
    total_bytes: u64,
    /// The durable total the journal recorded for this process (`None`: not in the journal).
    journal_total_bytes: Option<u64>,
    /// Output the journal recorded as lost (a full disk, a failed write or sync): reported,
    /// and not a fault of the spool.
    gaps: Vec<String>,
    issues: Vec<String>,
}

fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let root_path = super::existing_root(args.root)?;
    let root = crate::root::Root::open_reader(&root_path)?;
    let wanted: Vec<Handle> = args
        .handles
        .iter()
        .map(|h| h.parse::<Handle>())
        .collect::<Result<_, _>>()?;
    // The journal's view: which processes exist, what output they recorded as durable, and
    // what they recorded as lost.
    let (store, journal_clean) = recorded(&root_path)?;
    let handles = spool_names(&root, &store, &wanted)?;
    // Checked before anything is printed, so that the bar never shares a terminal with stdout.
    let progress = super::progress::Progress::items("checking spools", handles.len() as u64);
    let checks: Vec<SpoolCheck> = handles
        .iter()
        .map(|name| {
            let check = check_spool(&root, &store, name);
            progress.item();
            check
        })
        .collect();
    progress.finish();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut all_ok = journal_clean;
    for check in checks {
        all_ok &= check.ok;
        write_check(&mut out, &check, args.json)?;
    }
    if !journal_clean {
        let note = "the journal is not clean; `procjournal journal verify` prints the report";
        if args.json {
            // stdout stays one JSON object per line.
            out.flush()?;
            note!("procjournal: {note}");
        } else {
            writeln!(out, "{note}")?;
        }
    }
    out.flush()?;
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The spools `spool verify` checks, sorted: the named ones, else every process of the journal
/// and every entry of the spool directory.
fn spool_names(
    root: &crate::root::Root,
    store: &crate::lifecycle::ManifestStore,
    wanted: &[Handle],
) -> anyhow::Result<Vec<String>> {
    let mut handles: Vec<String> = if wanted.is_empty() {
        let mut names: Vec<String> = store.iter().map(|m| m.handle.to_string()).collect();
        if let Ok(entries) = std::fs::read_dir(root.spool_dir()) {
            for entry in entries {
                let entry = entry.context("listing spools")?;
                if let Some(name) = entry.file_name().to_str() {
                    names.push(name.to_owned());
                }
            }
        }
        names
    } else {
        wanted.iter().map(Handle::to_string).collect()
    };
    handles.sort();
    handles.dedup();
    Ok(handles)
}

/// Writes one spool's check: a JSON line, or a summary line and its gaps and issues.
fn write_check(out: &mut impl Write, check: &SpoolCheck, json: bool) -> anyhow::Result<()> {
    if json {
        super::json::to_writer(&mut *out, check)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "{} {} segments={} bytes={}..{} journal={}",
        // A spool directory's name, which need not be a handle.
        render::escape_field(&check.handle, false),
        if check.ok { "ok" } else { "NOT OK" },
        check.segments,
        check.retained_from,
        check.total_bytes,
        check
            .journal_total_bytes
            .map_or_else(|| "-".to_owned(), |t| t.to_string()),
    )?;
    for gap in &check.gaps {
        writeln!(out, "  {}", render::escape_field(gap, false))?;
    }
    for issue in &check.issues {
        writeln!(out, "  {}", render::escape_field(issue, false))?;
    }
    Ok(())
}

fn check_spool(
    root: &crate::root::Root,
    store: &crate::lifecycle::ManifestStore,
    name: &str,
) -> SpoolCheck {
    let manifest = name.parse::<Handle>().ok().and_then(|h| store.get(&h));
    let mut check = SpoolCheck {
        handle: name.to_owned(),
        ok: false,
        segments: 0,
        retained_from: 0,
        total_bytes: 0,
        journal_total_bytes: manifest.as_ref().map(|m| m.bounds.total_bytes),
        gaps: Vec::new(),
        issues: Vec::new(),
    };
    if name.parse::<Handle>().is_err() {
        check
            .issues
            .push("not a process handle: a stray entry in the spool directory".into());
        return check;
    }
    if manifest.is_none() {
        check
            .issues
            .push("no process with this handle in the journal".into());
    }
    check.gaps = recorded_gaps(manifest.as_deref());
    let dir = root.spool_dir().join(name);
    if !dir.is_dir() {
        // A process that never wrote may legitimately have no spool, and a retired one's was
        // removed on purpose.
        if manifest.is_some_and(|m| m.bounds.total_bytes > 0 && m.retired.is_none()) {
            check
                .issues
                .push("the journal records output but the spool is missing".into());
        }
        check.ok = check.issues.is_empty();
        return check;
    }
    let (mut spool, recovery) = match Spool::open_reader(&dir) {
        Ok(opened) => opened,
        Err(e) => {
            check.issues.push(format!("cannot open: {e}"));
            return check;
        }
    };
    check.segments = recovery.segments;
    check.retained_from = spool.retained_from();
    // What the files hold, before the journal's record extends the view to its total.
    let files_total = spool.total_bytes();
    check.total_bytes = files_total;
    if let Some(m) = &manifest {
        m.bound_reader(&mut spool);
    }
    check.issues.extend(recovery_issues(&recovery));
    check
        .issues
        .extend(read_issues(&spool, &recovery, manifest.as_deref()));
    check
        .issues
        .extend(bound_issue(manifest.as_deref(), files_total));
    check.ok = check.issues.is_empty();
    check
}

/// The gaps the journal recorded for a process, as `spool verify` lists them.
fn recorded_gaps(manifest: Option<&crate::lifecycle::Manifest>) -> Vec<String> {
    // Every gap the journal recorded, whole: the record is the journal's, so it is listed
    // whether or not files still hold cursors around it (retention passed it, or the spool
    // directory is gone).
    manifest.map_or_else(Vec::new, |m| {
        m.gaps
            .iter()
            .map(|g| {
                let s = crate::spool::Skipped::gap(g.from, g.to, g.reason, g.errno);
                format!("lost at cursors {}..{}: {}", s.from, s.to, s.reason)
            })
            .collect()
    })
}

/// The issues a spool's recovery found: a torn tail, unusable segments, damaged ranges.
fn recovery_issues(recovery: &crate::spool::SpoolRecovery) -> Vec<String> {
    let mut issues = Vec::new();
    if recovery.torn_tail_bytes > 0 {
        issues.push(format!(
            "{} bytes after the last whole chunk (a torn append; the next writer cuts them)",
            recovery.torn_tail_bytes
        ));
    }
    for bad in &recovery.bad_segments {
        issues.push(format!("unusable segment {bad}"));
    }
    for d in &recovery.damaged {
        issues.push(format!(
            "damaged bytes {}..{} of segment {} hold cursors {}..{} ({}); the valid chunks after \
             them are kept, and no writer cuts them",
            d.start_offset, d.end_offset, d.segment, d.first_cursor, d.end_cursor, d.reason
        ));
    }
    issues
}

/// The issues found reading every retained chunk of a spool.
fn read_issues(
    spool: &Spool,
    recovery: &crate::spool::SpoolRecovery,
    manifest: Option<&crate::lifecycle::Manifest>,
) -> Vec<String> {
    let mut issues = Vec::new();
    // Every retained chunk, read through the checksummed reader: each gap the journal recorded
    // is listed as such, and each damaged range (wherever it is: recovery scans only the
    // active segment) is an issue, and the reading goes on after it.
    let mut cursor = spool.retained_from();
    while cursor < spool.total_bytes() {
        match spool.read(cursor, PAGE_BYTES) {
            Ok(read) if read.next_cursor > cursor => {
                if let Some(s) = &read.skipped {
                    issues.extend(skip_issue(s, recovery, manifest));
                }
                cursor = read.next_cursor;
            }
            Ok(_) => {
                issues.push(format!("no progress reading at cursor {cursor}"));
                break;
            }
            Err(e) => {
                issues.push(format!("unreadable at cursor {cursor}: {e}"));
                break;
            }
        }
    }
    issues
}

/// The issue a range the reader skipped makes, if recovery or the journal did not name it.
fn skip_issue(
    s: &crate::spool::Skipped,
    recovery: &crate::spool::SpoolRecovery,
    manifest: Option<&crate::lifecycle::Manifest>,
) -> Option<String> {
    let range = format!("{}..{}", s.from, s.to);
    match (s.kind, s.damage) {
        // Listed from the journal's record (`recorded_gaps`).
        (crate::spool::SkipKind::Gap, _) => None,
        (_, Some(crate::spool::DamageKind::Truncated)) => Some(format!(
            "damaged at cursors {range}: {}; the journal recorded {} durable \
             bytes: acknowledged output is missing",
            s.reason,
            manifest.map_or(0, |m| m.bounds.total_bytes)
        )),
        // Recovery named it already, with its file offsets.
        _ if recovery
            .damaged
            .iter()
            .any(|d| d.first_cursor <= s.from && s.from < d.end_cursor) =>
        {
            None
        }
        _ => Some(format!("damaged at cursors {range}: {}", s.reason)),
    }
}

/// The issue of a finished process whose files hold more than the journal's final bound.
fn bound_issue(manifest: Option<&crate::lifecycle::Manifest>, files_total: u64) -> Option<String> {
    let m = manifest?;
    let lost = m.state == crate::lifecycle::State::LostOnRestore;
    if m.state.is_terminal() && !lost && m.bounds.total_bytes < files_total {
        // A finished process's final bound comes from a final checkpoint of everything it
        // wrote; bytes beyond it are not covered by the journal (a lost process's bound is
        // its last checkpoint before the crash, so more bytes are expected there).
        return Some(format!(
            "{} bytes beyond the final bound the journal recorded",
            files_total - m.bounds.total_bytes
        ));
    }
    None
}
