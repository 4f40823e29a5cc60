//! `procjournal journal verify|dump|manifests`: offline, read-only views of a journal.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

use super::deferred::Deferred;
use super::progress::Progress;
use crate::journal::reader::{JournalReader, RecordView};
use crate::journal::recovery::RecoveryReport;
use crate::lifecycle::snapdir::SnapshotVerdict;
use crate::limits::FOLLOW_POLL_MS;

#[derive(Debug, Subcommand)]
pub(crate) enum JournalCommand {
    /// Check every segment and record, and that the snapshots hold what compaction removed.
    /// Exit 0 when clean, 1 when anything was found (the report says what: history compacted
    /// away with no usable snapshot left is damage), 125 when the journal could not be read.
    Verify(Deferred<VerifyArgs>),
    /// Print records in order, as text or JSON lines, each lifecycle event decoded field by
    /// field (other records, and payloads that do not decode, as hex).
    Dump(Deferred<DumpArgs>),
    /// Replay the lifecycle events and print the manifest of every process. Exit 0 when the
    /// journal and the replay are clean, 1 when anything was reported, 125 when it could not be read.
    Manifests(Deferred<ManifestsArgs>),
    /// Write a snapshot of the manifests and remove the journal segments below the older of the
    /// two snapshots kept (takes the root's lock: not while a daemon runs). A running daemon does
    /// this on its own as the journal grows.
    Compact(Deferred<CompactArgs>),
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
    /// Also print every payload as hex (a payload that does not decode always is).
    #[arg(long)]
    hex: bool,
}

pub(crate) fn run(cmd: JournalCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        JournalCommand::Verify(args) => verify(args.into_inner()),
        JournalCommand::Dump(args) => dump(args.into_inner()),
        JournalCommand::Manifests(args) => manifests(args.into_inner()),
        JournalCommand::Compact(args) => compact(args.into_inner()),
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
        super::json::to_writer(
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
                "snapshot at seq {} ({} bytes); snapshots kept at seqs {}",
                w.seq,
                w.file_bytes,
                w.kept
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
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
    let lost = crate::lifecycle::snapdir::lost_history(report.floor.as_ref(), &snapshots);
    let mut out = std::io::stdout().lock();
    if args.json {
        let line = VerifyLine {
            leftover_tmp_file_count: report.leftover_tmp_files.len(),
            report: &report,
            snapshots: &snapshots,
            lost_history: lost.as_ref(),
        };
        super::json::to_writer(&mut out, &line)?;
        writeln!(out)?;
    } else {
        write_report(&mut out, &reader.dir(), &report)?;
        write_snapshots(&mut out, &snapshots)?;
        if let Some(lost) = &lost {
            writeln!(
                out,
                "LOST HISTORY: the {} record(s) below seq {} were compacted away and {}; no restore can rebuild the processes they recorded (`journal manifests` shows what replay lacks)",
                lost.records, lost.below_seq, lost.reason
            )?;
        }
    }
    Ok(
        if report.is_clean() && lost.is_none() && snapshots.iter().all(|s| s.problem.is_none()) {
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
    /// Compacted records no usable snapshot holds (damage); `null` when none.
    lost_history: Option<&'a crate::lifecycle::snapdir::LostHistory>,
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

/// A recovery row for a person: what was found, and the row of journal-format.md's table.
fn row_text(row: crate::journal::recovery::Row) -> &'static str {
    use crate::journal::recovery::Row;
    match row {
        Row::ZeroGap => "zeroed header with bytes after it, row C",
        Row::Garbage => "bad record header, row D",
        Row::TornPayload => "bad payload checksum or padding, row E",
        Row::LengthPastEnd => "length past the segment's end, row F",
        Row::Stale => "stale record or broken chain, row G",
    }
}

/// The `journal verify` report for a person: one line per finding, then the verdict.
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
    write_record_damage(out, report)?;
    write_commit_damage(out, report)?;
    write_files(out, report)?;
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

/// The report's damage to records and segments: torn tails, damaged ranges, bad segments,
/// gaps and duplicate ids.
fn write_record_damage(out: &mut impl Write, report: &RecoveryReport) -> std::io::Result<()> {
    for t in &report.torn_tails {
        writeln!(
            out,
            "torn tail: segment {} bytes {}..{} ({}); a writable open zeroes it",
            t.segment_index,
            t.start_offset,
            t.end_offset,
            row_text(t.row)
        )?;
    }
    for d in &report.damaged {
        let next = d
            .next_good_seq
            .map_or_else(|| "a later segment".to_owned(), |s| format!("seq {s}"));
        writeln!(
            out,
            "DAMAGED: segment {} bytes {}..{} ({}) between seq {} and {next}; left as found",
            d.segment_index,
            d.start_offset,
            d.end_offset,
            row_text(d.row),
            d.last_good_seq
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
    Ok(())
}

/// The report's damage to what segments committed: lost or unconfirmed commits, missing
/// segments, unreadable commit areas.
fn write_commit_damage(out: &mut impl Write, report: &RecoveryReport) -> std::io::Result<()> {
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
    Ok(())
}

/// The report's notes on the journal directory's files and its compaction floor.
fn write_files(out: &mut impl Write, report: &RecoveryReport) -> std::io::Result<()> {
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
            crate::spool::render::escape_field(u, false)
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
    Ok(())
}

/// `journal dump --json`: one record (docs/cli-json.md).
#[derive(Serialize)]
struct DumpLine<'a> {
    seq: u64,
    event_id: String,
    kind: u16,
    codec_version: u8,
    segment_index: u64,
    offset: u64,
    payload_bytes: usize,
    /// The lifecycle event's name (`registered_v2`, `terminal`, ...), when it decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    event: Option<&'a str>,
    /// Its fields, when it decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    decoded: Option<&'a serde_json::Map<String, serde_json::Value>>,
    /// Why a payload of a lifecycle kind did not decode.
    #[serde(skip_serializing_if = "Option::is_none")]
    decode_error: Option<&'a str>,
    /// With `--hex`, or when nothing decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_hex: Option<&'a str>,
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A record's payload read as a lifecycle event: its name and fields, or why it did not decode
/// (`Err`), or nothing for a kind that is no lifecycle event.
type Decoded = Option<Result<(&'static str, serde_json::Map<String, serde_json::Value>), String>>;

fn decode_payload(r: &RecordView<'_>) -> Decoded {
    use crate::lifecycle::LifecycleEvent;
    if !LifecycleEvent::is_lifecycle_kind(r.kind) {
        return None;
    }
    Some(
        LifecycleEvent::decode(r.kind, r.codec_version, r.payload)
            .map_err(|e| e.to_string())
            .and_then(|event| match serde_json::to_value(&event) {
                Ok(serde_json::Value::Object(mut fields)) => {
                    // The JSON form's tag is `event`: the record's own `event` field says it.
                    fields.remove("event");
                    Ok((event.name(), fields))
                }
                Ok(_) => Err("the event is not an object".to_owned()),
                Err(e) => Err(e.to_string()),
            }),
    )
}

/// `key=value` pairs of a decoded event for a person: nested objects as dotted keys, arrays of
/// plain values joined by commas, every string escaped (labels and commands come from clients)
/// and quoted when it would not read as one word.
fn fields_text(fields: &serde_json::Map<String, serde_json::Value>) -> String {
    fn scalar(v: &serde_json::Value) -> String {
        match v {
            serde_json::Value::String(s) => {
                let s = crate::spool::render::escape_field(s, false);
                if s.is_empty() || s.contains([' ', '"', '=', ',']) {
                    format!("\"{}\"", s.replace('"', "\\\""))
                } else {
                    s.into_owned()
                }
            }
            other => other.to_string(),
        }
    }
    fn walk(out: &mut Vec<String>, key: &str, v: &serde_json::Value) {
        match v {
            serde_json::Value::Object(map) if map.is_empty() => out.push(format!("{key}={{}}")),
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let k = crate::spool::render::escape_field(k, false);
                    walk(
                        out,
                        &format!("{key}{}{k}", if key.is_empty() { "" } else { "." }),
                        v,
                    );
                }
            }
            serde_json::Value::Array(items)
                if items.iter().all(|i| !i.is_object() && !i.is_array()) =>
            {
                let items: Vec<String> = items.iter().map(scalar).collect();
                out.push(format!("{key}=[{}]", items.join(",")));
            }
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(out, &format!("{key}.{i}"), item);
                }
            }
            other => out.push(format!("{key}={}", scalar(other))),
        }
    }
    let mut out = Vec::new();
    for (k, v) in fields {
        walk(&mut out, &crate::spool::render::escape_field(k, false), v);
    }
    out.join(" ")
}

fn print_record(
    out: &mut impl Write,
    json: bool,
    with_hex: bool,
    r: &RecordView<'_>,
) -> std::io::Result<()> {
    let decoded = decode_payload(r);
    let (event, fields, error) = match &decoded {
        Some(Ok((name, fields))) => (Some(*name), Some(fields), None),
        Some(Err(e)) => (None, None, Some(e.as_str())),
        None => (None, None, None),
    };
    let payload_hex = (with_hex || fields.is_none()).then(|| hex(r.payload));
    if json {
        let line = DumpLine {
            seq: r.position.seq,
            event_id: r.event_id.to_string(),
            kind: r.kind,
            codec_version: r.codec_version,
            segment_index: r.position.segment_index,
            offset: r.position.offset,
            payload_bytes: r.payload.len(),
            event,
            decoded: fields,
            decode_error: error,
            payload_hex: payload_hex.as_deref(),
        };
        super::json::to_writer(&mut *out, &line)?;
        return writeln!(out);
    }
    write!(
        out,
        "{:>8} {} kind={} codec={} at={}:{} bytes={}",
        r.position.seq,
        r.event_id,
        r.kind,
        r.codec_version,
        r.position.segment_index,
        r.position.offset,
        r.payload.len(),
    )?;
    if let (Some(name), Some(fields)) = (event, fields) {
        write!(out, " {name} {}", fields_text(fields))?;
    }
    if let Some(e) = error {
        write!(
            out,
            " UNDECODABLE: {}",
            crate::spool::render::escape_field(e, false)
        )?;
    }
    match payload_hex {
        Some(h) => writeln!(out, " hex={h}"),
        None => writeln!(out),
    }
}

/// Prints records; remembers the first write error (a closed pipe ends the dump quietly).
struct Printer<W: Write> {
    out: W,
    json: bool,
    hex: bool,
    failed: Option<std::io::Error>,
}

impl<W: Write> Printer<W> {
    fn emit(&mut self, r: RecordView<'_>) {
        if self.failed.is_none()
            && let Err(e) = print_record(&mut self.out, self.json, self.hex, &r)
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
        hex: args.hex,
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
        if let Some(p) = progress {
            p.finish();
        }
        printer.flush()?;
        if !report.is_clean() {
            note!(
                "procjournal: the journal is not clean; `procjournal journal verify` prints the report"
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (mut follower, _report) = reader.follow(args.from, |r| printer.emit(r))?;
    loop {
        printer.flush()?;
        if follower.poll(|r| printer.emit(r))? == 0 {
            std::thread::sleep(Duration::from_millis(FOLLOW_POLL_MS));
        }
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
            super::json::to_writer(&mut out, &*m)?;
            writeln!(out)?;
        }
        super::json::to_writer(
            &mut out,
            &ReportLine {
                replay: &replay,
                journal_clean: recovery.is_clean(),
            },
        )?;
        writeln!(out)?;
    } else {
        for m in store.iter() {
            write_manifest(&mut out, &m)?;
        }
        write_replay_issues(&mut out, &replay, recovery.is_clean())?;
    }
    out.flush()?;
    Ok(if replay.is_clean() && recovery.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One process's manifest for a person, on one line.
fn write_manifest(out: &mut impl Write, m: &crate::lifecycle::Manifest) -> std::io::Result<()> {
    let exit = m
        .terminal
        .as_ref()
        .map_or_else(String::new, |t| format!(" exit={}", exit_text(t.exit)));
    let pid = m.pid.map_or_else(|| "-".to_owned(), |p| p.to_string());
    let labels = super::views::label_list(m.command.labels());
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
        super::views::shell_words(&command),
        labels
    )
}

/// What the replay (and the journal's recovery) reported, for a person, after the manifests.
fn write_replay_issues(
    out: &mut impl Write,
    replay: &crate::lifecycle::ReplayReport,
    journal_clean: bool,
) -> std::io::Result<()> {
    for issue in replay.rejected.iter().chain(&replay.undecodable) {
        let handle = issue.handle.as_deref().unwrap_or("?");
        writeln!(
            out,
            "REPLAY ISSUE: seq {} handle {}: {}",
            issue.seq,
            crate::spool::render::escape_field(handle, false),
            crate::spool::render::escape_field(&issue.error, false)
        )?;
    }
    for p in &replay.snapshot_problems {
        writeln!(
            out,
            "SNAPSHOT NOT USED: {}: {}",
            crate::spool::render::escape_field(&p.file, false),
            p.reason
        )?;
    }
    if let Some(seq) = replay.lost_below_seq {
        writeln!(
            out,
            "LOST: the records below seq {seq} were compacted away and no usable snapshot holds them; these manifests lack what they did"
        )?;
    }
    if !journal_clean {
        writeln!(
            out,
            "the journal is not clean; `procjournal journal verify` prints the report"
        )?;
    }
    Ok(())
}

/// An exit status for a person: `0`, `SIGTERM`, `unknown`.
pub(crate) fn exit_text(exit: crate::lifecycle::event::ExitStatus) -> String {
    use crate::lifecycle::event::ExitStatus;
    match exit {
        ExitStatus::Code(code) => code.to_string(),
        ExitStatus::Signal(signal) => format!("SIG{}", super::exit::signal_name(signal)),
        ExitStatus::Unknown => "unknown".to_owned(),
    }
}

#[derive(Serialize)]
struct ReportLine<'a> {
    replay: &'a crate::lifecycle::ReplayReport,
    journal_clean: bool,
}
