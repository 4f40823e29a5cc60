//! `procjournal journal verify|dump|manifests`: offline, read-only views of a journal.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

use super::progress::Progress;
use crate::journal::reader::{JournalReader, RecordView};
use crate::journal::recovery::RecoveryReport;
use crate::lifecycle::snapdir::SnapshotVerdict;
use crate::limits::FOLLOW_POLL_MS;

#[derive(Debug, Subcommand)]
pub(crate) enum JournalCommand {
    /// Check every segment and record. Exit 0 when clean, 1 when anything was found (the report
    /// says what), 2 when the journal could not be read.
    Verify(VerifyArgs),
    /// Print records in order, as text or JSON lines.
    Dump(DumpArgs),
    /// Replay the lifecycle events and print the manifest of every process. Exit 0 when the
    /// journal and the replay are clean, 1 when anything was reported, 2 when it could not be read.
    Manifests(ManifestsArgs),
    /// Write a snapshot of the manifests and remove the journal segments below the older of the
    /// two snapshots kept (takes the root's lock: not while a daemon runs). A running daemon does
    /// this on its own as the journal grows.
    Compact(CompactArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CompactArgs {
    #[command(flatten)]
    root: RootArg,
    /// Print what was done as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ManifestsArgs {
    #[command(flatten)]
    root: RootArg,
    /// One JSON object per manifest per line, then one line with the replay report.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RootArg {
    /// Runtime root (default: $PROCJOURNAL_ROOT, $XDG_STATE_HOME/procjournal, ~/.local/state/procjournal).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    #[command(flatten)]
    root: RootArg,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DumpArgs {
    #[command(flatten)]
    root: RootArg,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
    /// First sequence number to print.
    #[arg(long, value_name = "SEQ", default_value_t = 1)]
    from: u64,
    /// Keep printing records as a live writer appends them (until interrupted).
    #[arg(long)]
    follow: bool,
}

pub(crate) fn run(cmd: JournalCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        JournalCommand::Verify(args) => verify(args),
        JournalCommand::Dump(args) => dump(args),
        JournalCommand::Manifests(args) => manifests(args),
        JournalCommand::Compact(args) => compact(args),
    }
}

/// `journal compact --json`.
#[derive(Serialize)]
struct CompactLine<'a> {
    /// The snapshot written (`null`: nothing new since the newest one).
    snapshot: Option<&'a crate::lifecycle::SnapshotWritten>,
    /// What the open found (a host refuses to compact anything but a clean journal).
    journal_clean: bool,
    replay_clean: bool,
}

fn compact(args: CompactArgs) -> anyhow::Result<ExitCode> {
    let root = super::existing_root(args.root.root)?;
    let (mut lifecycle, recovery, replay) =
        crate::lifecycle::Lifecycle::open(&root, crate::journal::JournalOptions::default())
            .with_context(|| format!("cannot open {} for writing", root.display()))?;
    // Compaction removes records for good: only ever below what a snapshot of a clean
    // projection holds.
    if !recovery.is_crash_residue_only() || !replay.is_clean() {
        anyhow::bail!(
            "not compacting {}: the journal or its replay has problems (`procjournal journal verify` and `journal manifests` report them)",
            root.display()
        );
    }
    let written = lifecycle.snapshot_now()?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(
            &mut out,
            &CompactLine {
                snapshot: written.as_ref(),
                journal_clean: recovery.is_clean(),
                replay_clean: replay.is_clean(),
            },
        )?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    match &written {
        None => writeln!(out, "nothing new since the newest snapshot")?,
        Some(w) => {
            writeln!(
                out,
                "snapshot at seq {} ({} bytes); snapshots kept at seqs {:?}",
                w.seq, w.file_bytes, w.kept
            )?;
            match &w.compacted {
                Some(c) if c.removed_segments > 0 => writeln!(
                    out,
                    "removed {} segments ({} bytes): the journal now starts at seq {}",
                    c.removed_segments,
                    c.removed_bytes,
                    c.floor.map_or(1, |f| f.seq)
                )?,
                Some(_) => writeln!(out, "no whole segment lies below the older snapshot")?,
                None => writeln!(
                    out,
                    "this is the only snapshot: segments are removed only below an older one, so that a damaged snapshot never costs a record"
                )?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn open(root: RootArg) -> anyhow::Result<JournalReader> {
    let root = super::existing_root(root.root)?;
    JournalReader::open(&root)
        .with_context(|| format!("cannot open the journal of {}", root.display()))
}

fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let reader = open(args.root)?;
    let mut progress = Progress::journal("verifying", &reader.dir());
    let report = reader.verify_with(|r| progress.record(r.position))?;
    progress.finish();
    let snapshots =
        crate::lifecycle::snapdir::verify(reader.root()).context("cannot read the snapshots")?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let line = VerifyLine {
            leftover_tmp_file_count: report.leftover_tmp_files.len(),
            report: &report,
            snapshots: &snapshots,
        };
        serde_json::to_writer(&mut out, &line)?;
        writeln!(out)?;
    } else {
        write_report(&mut out, &reader.dir(), &report)?;
        write_snapshots(&mut out, &snapshots)?;
    }
    Ok(
        if report.is_clean() && snapshots.iter().all(|s| s.problem.is_none()) {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

/// `journal verify --json`: the report, and the counts a script checks without walking lists.
#[derive(Serialize)]
struct VerifyLine<'a> {
    #[serde(flatten)]
    report: &'a RecoveryReport,
    /// Files of interrupted segment creations (a writable open removes them).
    leftover_tmp_file_count: usize,
    /// The verdict on each file of `snapshots/`.
    snapshots: &'a [SnapshotVerdict],
}

/// One line per file of `snapshots/`, after the journal's report (nothing without any).
fn write_snapshots(out: &mut impl Write, snapshots: &[SnapshotVerdict]) -> std::io::Result<()> {
    for s in snapshots {
        let seq = s.seq.map_or_else(|| "?".to_owned(), |q| q.to_string());
        let verdict = match (&s.problem, s.kind) {
            (_, "temporary") => "temporary file of an interrupted write (never read)".to_owned(),
            (Some(problem), _) => format!("NOT USABLE: {problem}"),
            (None, _) if s.chosen => "usable; a restore starts from it".to_owned(),
            (None, _) => "usable".to_owned(),
        };
        writeln!(
            out,
            "snapshot {}: seq {seq}, {} bytes, checksums {}, decodes {}: {verdict}",
            s.file,
            s.bytes,
            if s.checksums { "ok" } else { "bad" },
            if s.decodes { "yes" } else { "no" },
        )?;
    }
    Ok(())
}

fn write_report(
    out: &mut impl Write,
    dir: &std::path::Path,
    report: &RecoveryReport,
) -> std::io::Result<()> {
    writeln!(out, "journal {}", dir.display())?;
    let last = report
        .last_seq
        .map_or_else(|| "none".to_owned(), |s| s.to_string());
    writeln!(
        out,
        "segments {}  records {}  last seq {last}  leftover tmp files {}",
        report.segments,
        report.records,
        report.leftover_tmp_files.len()
    )?;
    for t in &report.torn_tails {
        writeln!(
            out,
            "torn tail: segment {} bytes {}..{} ({:?}); a writable open zeroes it",
            t.segment_index, t.start_offset, t.end_offset, t.row
        )?;
    }
    for d in &report.damaged {
        let next = d
            .next_good_seq
            .map_or_else(|| "a later segment".to_owned(), |s| format!("seq {s}"));
        writeln!(
            out,
            "DAMAGED: segment {} bytes {}..{} ({:?}) between seq {} and {next}; left as found",
            d.segment_index, d.start_offset, d.end_offset, d.row, d.last_good_seq
        )?;
    }
    for b in &report.bad_segments {
        writeln!(out, "BAD SEGMENT: {}: {}", b.file_name, b.reason)?;
    }
    for g in &report.gaps {
        writeln!(
            out,
            "GAP: no records between seq {} and seq {}",
            g.after_seq, g.next_seq
        )?;
    }
    for d in &report.duplicate_ids {
        writeln!(
            out,
            "DUPLICATE ID: {} at seq {} and seq {}",
            d.event_id, d.first_seq, d.duplicate_seq
        )?;
    }
    for l in &report.lost_acknowledged {
        writeln!(
            out,
            "LOST ACKNOWLEDGED RECORDS: segment {} confirmed seq {} durable, claims seq {}, but \
             holds nothing from seq {} on; never used again",
            l.segment_index, l.confirmed_seq, l.claimed_seq, l.first_missing_seq
        )?;
    }
    for u in &report.unconfirmed_commits {
        writeln!(
            out,
            "unconfirmed commit: segment {} claimed up to seq {} in a flush that may not have \
             returned; seq {} on are missing and never used again",
            u.segment_index, u.claimed_seq, u.first_missing_seq
        )?;
    }
    for m in &report.missing_segments {
        writeln!(
            out,
            "MISSING SEGMENT: {} (base seq {}) is named by its sealed predecessor but gone",
            m.segment_index, m.base_seq
        )?;
    }
    for c in &report.damaged_commit_areas {
        writeln!(out, "DAMAGED COMMIT AREA: {c}: neither commit slot reads")?;
    }
    for s in &report.short_segments {
        writeln!(out, "short segment file: {s}")?;
    }
    for t in &report.leftover_tmp_files {
        writeln!(out, "leftover from an interrupted segment creation: {t}")?;
    }
    for u in &report.unrecognised_files {
        writeln!(
            out,
            "unrecognised file in the journal directory (not read, not removed): {}",
            crate::render::escape_field(u, false)
        )?;
    }
    if let Some(f) = &report.floor {
        writeln!(
            out,
            "compacted: the records below seq {} (segments below {}) were removed after a snapshot",
            f.seq, f.segment_index
        )?;
    }
    if let Some(reason) = &report.bad_floor {
        writeln!(
            out,
            "BAD FLOOR: journal/FLOOR is ignored ({reason}); a removed head reads as a gap"
        )?;
    }
    for c in &report.compacted_leftovers {
        writeln!(
            out,
            "leftover of an interrupted compaction (below the floor; a writable open deletes it): {c}"
        )?;
    }
    writeln!(
        out,
        "{}",
        if report.is_clean() {
            "clean"
        } else {
            "NOT CLEAN"
        }
    )
}

#[derive(Serialize)]
struct DumpLine<'a> {
    seq: u64,
    event_id: String,
    kind: u16,
    codec_version: u8,
    segment_index: u64,
    offset: u64,
    payload_bytes: usize,
    payload_hex: &'a str,
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn print_record(out: &mut impl Write, json: bool, r: &RecordView<'_>) -> std::io::Result<()> {
    let payload_hex = hex(r.payload);
    if json {
        let line = DumpLine {
            seq: r.position.seq,
            event_id: r.event_id.to_string(),
            kind: r.kind,
            codec_version: r.codec_version,
            segment_index: r.position.segment_index,
            offset: r.position.offset,
            payload_bytes: r.payload.len(),
            payload_hex: &payload_hex,
        };
        serde_json::to_writer(&mut *out, &line)?;
        writeln!(out)
    } else {
        writeln!(
            out,
            "{:>8} {} kind={} codec={} at={}:{} bytes={} {}",
            r.position.seq,
            r.event_id,
            r.kind,
            r.codec_version,
            r.position.segment_index,
            r.position.offset,
            r.payload.len(),
            payload_hex
        )
    }
}

/// Prints records; remembers the first write error (a closed pipe ends the dump quietly).
struct Printer<W: Write> {
    out: W,
    json: bool,
    failed: Option<std::io::Error>,
}

impl<W: Write> Printer<W> {
    fn emit(&mut self, r: RecordView<'_>) {
        if self.failed.is_none()
            && let Err(e) = print_record(&mut self.out, self.json, &r)
        {
            self.failed = Some(e);
        }
    }

    fn flush(&mut self) -> Result<(), std::io::Error> {
        match self.failed.take() {
            Some(e) => Err(e),
            None => self.out.flush(),
        }
    }
}

fn dump(args: DumpArgs) -> anyhow::Result<ExitCode> {
    let reader = open(args.root)?;
    let mut printer = Printer {
        out: std::io::BufWriter::new(std::io::stdout().lock()),
        json: args.json,
        failed: None,
    };
    if !args.follow {
        // Records go to stdout; a progress line only when they do not go to the same terminal.
        let mut progress =
            (!std::io::stdout().is_terminal()).then(|| Progress::journal("dumping", &reader.dir()));
        let report = reader.scan(args.from, |r| {
            if let Some(p) = progress.as_mut() {
                p.record(r.position);
            }
            printer.emit(r)
        })?;
        drop(progress);
        if let Err(e) = printer.flush() {
            return broken_pipe_ok(e);
        }
        if !report.is_clean() {
            eprintln!(
                "procjournal: the journal is not clean; `procjournal journal verify` prints the report"
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (mut follower, _report) = reader.follow(args.from, |r| printer.emit(r))?;
    loop {
        if let Err(e) = printer.flush() {
            return broken_pipe_ok(e);
        }
        if follower.poll(|r| printer.emit(r))? == 0 {
            std::thread::sleep(Duration::from_millis(FOLLOW_POLL_MS));
        }
    }
}

fn broken_pipe_ok(e: std::io::Error) -> anyhow::Result<ExitCode> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(e.into())
    }
}

fn manifests(args: ManifestsArgs) -> anyhow::Result<ExitCode> {
    let reader = open(args.root)?;
    let mut progress = Progress::journal("replaying", &reader.dir());
    let (store, replay, recovery) =
        crate::lifecycle::restore_read_only(reader.root(), |r| progress.record(r.position))?;
    progress.finish();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        for m in store.iter() {
            serde_json::to_writer(&mut out, m)?;
            writeln!(out)?;
        }
        serde_json::to_writer(
            &mut out,
            &ReportLine {
                replay: &replay,
                journal_clean: recovery.is_clean(),
            },
        )?;
        writeln!(out)?;
    } else {
        for m in store.iter() {
            let exit = m
                .terminal
                .as_ref()
                .map_or_else(String::new, |t| format!(" {:?}", t.exit));
            let pid = m.pid.map_or_else(|| "-".to_owned(), |p| p.to_string());
            let labels = super::daemon_cmd::label_list(m.command.labels());
            let command: Vec<&str> = std::iter::once(m.command.program())
                .chain(m.command.args())
                .collect();
            // Which mechanism owned the tree, and whether it is proven gone.
            let tree = format!(
                "{}:{}",
                m.scope.as_ref().map_or("-", |s| s.mechanism.name()),
                crate::protocol::dispatch::Ownership::of(m).word()
            );
            // What the process kept (`-`: recorded before retention was).
            let retention = m
                .command
                .limits()
                .output_retention_bytes
                .map_or_else(|| "-".to_owned(), super::size::format_size);
            writeln!(
                out,
                "{} {:<15} pid={pid} tree={tree} bytes={}..{} retention={retention}{exit} {} [{}]",
                m.handle,
                m.state.name(),
                m.bounds.retained_from,
                m.bounds.total_bytes,
                super::daemon_cmd::shell_words(&command),
                labels
            )?;
        }
        for issue in replay.rejected.iter().chain(&replay.undecodable) {
            let handle = issue.handle.as_deref().unwrap_or("?");
            writeln!(
                out,
                "REPLAY ISSUE: seq {} handle {handle}: {}",
                issue.seq, issue.error
            )?;
        }
        for p in &replay.snapshot_problems {
            writeln!(
                out,
                "SNAPSHOT NOT USED: {}: {}",
                crate::render::escape_field(&p.file, false),
                p.reason
            )?;
        }
        if let Some(seq) = replay.lost_below_seq {
            writeln!(
                out,
                "LOST: the records below seq {seq} were compacted away and no usable snapshot holds them; these manifests lack what they did"
            )?;
        }
        if !recovery.is_clean() {
            writeln!(
                out,
                "the journal is not clean; `procjournal journal verify` prints the report"
            )?;
        }
    }
    out.flush()?;
    Ok(if replay.is_clean() && recovery.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[derive(Serialize)]
struct ReportLine<'a> {
    replay: &'a crate::lifecycle::ReplayReport,
    journal_clean: bool,
}
