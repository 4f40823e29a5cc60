//! `procjournal logs`: a process's output from a cursor, from the daemon or (when none runs, for
//! what the journal has) straight from the spool.
//!
//! Two ways of printing. Pages (the default): the daemon's safe text, `--raw` bytes, `--base64`
//! or `--json` pages, exactly as the protocol's `output` gives them. Lines (`-t` or
//! `--stream-marker`): the raw bytes with their stream spans are cut into lines on the client,
//! each rendered as safe text on its own and prefixed with its time and its stream.
//!
//! What `-t` can honestly show: the spool keeps no time per chunk (a chunk names its stream and
//! its cursor only, journal-format.md). What does carry times is the journal: every
//! `output_checkpoint` (about once a second while a process writes) and the `terminal` and
//! `lost_on_restore` records name the output total that was durable at their time. So a line's
//! time is the time of the first such record whose total covers the line's end: the line was
//! written at or before it, and after the record before it was planned. That is accurate to
//! about a checkpoint interval; a line no record covers yet shows `-` (with `-f`, it waits for
//! the next checkpoint instead, about a second). Where compaction removed the process's first
//! records, the times of the output they covered are unknown (`-`) rather than the later time a
//! surviving record would claim.
//!
//! `--since TIME` uses the same records the other way: it starts at the total of the last record
//! at or before TIME, so it may show up to a checkpoint interval of output written before TIME,
//! never omit output written after it. `--tail N` counts lines of the combined output (newlines,
//! whichever stream wrote them), reading back from the end in growing windows.
//!
//! Invariants: every string printed from a process's output is safe text (`render`); nothing
//! read from the journal for times is trusted beyond what decodes for this handle; the cursors
//! of every line are exact (they come from spans, not from the rendered text).

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::Value;

use super::args::{parse_duration, reference_arg};
use super::target::{Target, offline_manifests, resolve};
use super::views::{PageView, SpanView};
use crate::client::Client;
use crate::journal::reader::{Follower, JournalReader, RecordView};
use crate::lifecycle::{Handle, LifecycleEvent, Manifest, ProcessRef};
use crate::protocol::Request;
use crate::spool::Spool;
use crate::spool::render;
use crate::supervisor::{Rendering, read_page};

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    #[command(flatten)]
    target: Target,
    /// The process: its handle (p-...), its number (12 or #12, as `ps` shows it) or its name.
    #[arg(value_parser = reference_arg)]
    handle: ProcessRef,
    /// Keep printing output as it arrives; end when the process is terminal and read to the end.
    #[arg(short = 'f', long)]
    follow: bool,
    /// Combined-stream byte offset to start from.
    #[arg(long, default_value_t = 0, conflicts_with = "since")]
    cursor: u64,
    /// Start at output written since WHEN: a time ago (10m, 2h, 7d), an RFC 3339 time
    /// (2026-12-01T14:00:00Z), or `cursor:N`. Times come from the journal's checkpoints (about
    /// a second apart), so up to a second of earlier output may show.
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    since: Option<Since>,
    /// Only the last N lines (of the combined output, from --since or --cursor on).
    #[arg(long, value_name = "N")]
    tail: Option<u64>,
    /// Prefix each line with the time it was durable by (RFC 3339, UTC): the journal checkpoint
    /// that first covered it, about a second after it was written; `-` where none is known.
    #[arg(short = 't', long, conflicts_with_all = ["raw", "base64"])]
    timestamps: bool,
    /// Prefix each line with its stream: `out|`, `err|`, or `pty|` (a terminal's one stream).
    /// Lines of each stream are kept apart, as each stream wrote them.
    #[arg(long, conflicts_with_all = ["raw", "base64"])]
    stream_marker: bool,
    /// Print base64 of exactly the raw bytes (one line per page) instead of safe text.
    #[arg(long, conflicts_with = "json")]
    base64: bool,
    /// Write exactly the raw bytes (stdout and stderr in the order they arrived), escape
    /// sequences and invalid UTF-8 included, e.g. `logs --raw HANDLE > file`. Gap notices still
    /// go to stderr.
    #[arg(long, conflicts_with_all = ["json", "base64"])]
    raw: bool,
    /// Print each page as one JSON object per line, with every cursor field (with -t or
    /// --stream-marker: one object per line of output).
    #[arg(long)]
    json: bool,
    /// Exit with status 3 when any byte in the range read was lost (a gap), for scripts.
    #[arg(long)]
    fail_on_gap: bool,
}

/// `logs --fail-on-gap` exits with this status when the range it read had a gap.
const EXIT_GAP: u8 = 3;

/// Bytes asked for per page.
const LOGS_PAGE_BYTES: u64 = 1 << 20;
/// How long one follow request waits for output before asking again.
const FOLLOW_WAIT_MS: u64 = 30_000;
/// How long one follow request waits while lines wait for a checkpoint to give their time.
const TIMED_FOLLOW_WAIT_MS: u64 = 500;
/// How many times `logs -f -t` looks again for the end's record once the daemon reported the
/// end (`FOLLOW_POLL_MS` apart: 2 s).
const END_RECORD_POLLS: u32 = 40;
/// The first window `--tail` reads back from the end; it doubles until it holds enough lines.
const TAIL_WINDOW_BYTES: u64 = 64 * 1024;

/// `--since`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Since {
    /// Milliseconds since the epoch.
    Time(u64),
    Cursor(u64),
}

fn parse_since(text: &str) -> Result<Since, String> {
    if let Some(n) = text.strip_prefix("cursor:") {
        return n
            .parse()
            .map(Since::Cursor)
            .map_err(|_| format!("{text:?}: cursor:N takes a byte offset"));
    }
    if text.contains('-') && text.len() >= 10 {
        return parse_rfc3339_ms(text).map(Since::Time);
    }
    let ago = parse_duration(text).map_err(|e| format!("{e}; or an RFC 3339 time, or cursor:N"))?;
    let ago_ms = u64::try_from(ago.as_millis()).unwrap_or(u64::MAX);
    Ok(Since::Time(
        super::views::now_unix_ms().saturating_sub(ago_ms),
    ))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-12-01T14:43:59Z`, `2026-12-01 14:43:59.5+02:00`: RFC 3339 (a space for the `T` too),
/// to milliseconds since the epoch.
pub(crate) fn parse_rfc3339_ms(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not an RFC 3339 time like 2026-12-01T14:00:00Z");
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Result<i64, String> {
        let digits = b.get(from..from + len).ok_or_else(bad)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or_else(bad)
    };
    let sep = |at: usize, ok: &[u8]| b.get(at).is_some_and(|c| ok.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return Err(bad());
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return Err(bad());
    }
    // A leap second reads as the second before the next minute.
    let second = second.min(59);
    let mut i = 19;
    let mut millis = 0i64;
    if sep(i, b".") {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 3 {
                millis = millis * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return Err(bad());
        }
        for _ in (i - start)..3 {
            millis *= 10;
        }
    }
    let offset_s = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if i + 6 == b.len() && sep(i + 3, b":") => {
            let (h, m) = (num(i + 1, 2)?, num(i + 4, 2)?);
            let s = (h * 60 + m) * 60;
            if sign == b'+' { s } else { -s }
        }
        _ => return Err(bad()),
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    u64::try_from(secs * 1000 + millis).map_err(|_| bad())
}

/// `2026-12-01T14:43:59.123Z` for milliseconds since the epoch.
pub(crate) fn rfc3339_ms(ms: u64) -> String {
    // `unix_ms_text` gives `2026-12-01 14:43:59 UTC`.
    let text = super::unix_ms_text(ms);
    let date = text.get(..10).unwrap_or("");
    let time = text.get(11..19).unwrap_or("");
    format!("{date}T{time}.{:03}Z", ms % 1000)
}

/// The journal's times of a process's output: `(total, at)` of every record that names the
/// output total durable at its time, in journal order (totals never go backwards).
#[derive(Debug, Default)]
struct Times {
    marks: Vec<(u64, u64)>,
    /// Output below this cursor has no known time (compaction removed its records).
    known_from: u64,
    registered_seen: bool,
    /// The terminal record was read: every byte is covered.
    ended: bool,
    follower: Option<Follower>,
}

impl Times {
    /// Reads the journal (lock-free, as `journal dump` does; a daemon may be writing it).
    fn read(root: &Path, handle: Handle, follow: bool) -> anyhow::Result<Times> {
        let reader =
            JournalReader::open(root).context("cannot read the journal for the output's times")?;
        let mut times = Times::default();
        let mut progress = super::progress::Progress::journal("reading times", &reader.dir());
        let mut visit = |r: RecordView<'_>| {
            progress.record(r.position);
            times.visit(handle, &r);
        };
        let follower = if follow {
            Some(reader.follow(1, &mut visit)?.0)
        } else {
            reader.scan(1, &mut visit)?;
            None
        };
        progress.finish();
        times.follower = follower;
        if !times.registered_seen {
            times.known_from = times.marks.first().map_or(0, |m| m.0);
        }
        Ok(times)
    }

    /// Reads what the journal gained since (with `-f`).
    fn poll(&mut self, handle: Handle) -> anyhow::Result<()> {
        if let Some(mut follower) = self.follower.take() {
            let result = follower.poll(|r| self.visit(handle, &r));
            self.follower = Some(follower);
            result?;
        }
        Ok(())
    }

    /// Reads what the journal gained since; with `wait_for_end`, until it holds the end's record.
    fn catch_up(&mut self, handle: Handle, wait_for_end: bool) -> anyhow::Result<()> {
        self.poll(handle)?;
        // The end is journaled before the daemon reports it; a reader may see
        // the file a moment later. Bounded: after that, what is left shows `-`.
        let mut polls = 0;
        while wait_for_end && !self.ended && polls < END_RECORD_POLLS {
            std::thread::sleep(std::time::Duration::from_millis(
                crate::limits::FOLLOW_POLL_MS,
            ));
            self.poll(handle)?;
            polls += 1;
        }
        Ok(())
    }

    fn visit(&mut self, handle: Handle, r: &RecordView<'_>) {
        if !LifecycleEvent::is_lifecycle_kind(r.kind) {
            return;
        }
        let Ok(event) = LifecycleEvent::decode(r.kind, r.codec_version, r.payload) else {
            return;
        };
        if event.handle() != Some(handle) {
            return;
        }
        let mark = match &event {
            LifecycleEvent::Registered(_) | LifecycleEvent::RegisteredV2(_) => {
                self.registered_seen = true;
                None
            }
            LifecycleEvent::OutputCheckpoint(e) => Some((e.bounds.total_bytes, e.at_unix_ms)),
            LifecycleEvent::Terminal(e) => {
                self.ended = true;
                Some((e.bounds.total_bytes, e.at_unix_ms))
            }
            LifecycleEvent::LostOnRestore(e) => {
                self.ended = true;
                Some((e.bounds.total_bytes, e.at_unix_ms))
            }
            _ => None,
        };
        if let Some((total, at)) = mark
            && self.marks.last().is_none_or(|&(last, _)| total > last)
        {
            self.marks.push((total, at));
        }
    }

    /// When the byte before `end` was durable by: `Ok(Some)`, `Ok(None)` when that is unknown
    /// (compacted away), `Err(())` when no record covers it yet.
    fn of(&self, end: u64) -> Result<Option<u64>, ()> {
        if end <= self.known_from && !self.registered_seen {
            return Ok(None);
        }
        let i = self.marks.partition_point(|&(total, _)| total < end);
        match self.marks.get(i) {
            Some(&(_, at)) => Ok(Some(at)),
            None => Err(()),
        }
    }

    /// Where `--since at` starts: the total of the last record at or before `at`.
    fn cursor_at(&self, at: u64) -> u64 {
        self.marks
            .iter()
            .take_while(|&&(_, when)| when <= at)
            .last()
            .map_or(0, |&(total, _)| total)
    }
}

enum PageSource {
    Daemon(Client),
    Offline {
        spool: Box<Spool>,
        manifest: Box<Manifest>,
    },
}

impl PageSource {
    fn is_live(&self) -> bool {
        matches!(self, PageSource::Daemon(_))
    }

    fn page(
        &mut self,
        handle: Handle,
        cursor: u64,
        rendering: Rendering,
        wait_ms: u64,
        max_bytes: u64,
    ) -> anyhow::Result<(Value, PageView)> {
        let raw = match self {
            PageSource::Daemon(client) => client.call(&Request::Output {
                min_bytes: None,
                settle_ms: None,
                tail_lines: None,
                handle: handle.into(),
                cursor,
                max_bytes,
                rendering,
                wait_ms,
            })?,
            PageSource::Offline { spool, manifest } => {
                let max = usize::try_from(max_bytes).unwrap_or(usize::MAX);
                let page = match read_page(&handle, manifest.state, cursor, max, rendering, |n| {
                    spool.read(cursor, n)
                }) {
                    Ok(page) => page,
                    Err(crate::spool::SpoolError::CursorAhead { total_bytes, .. }) => {
                        bail!(
                            "cursor {cursor} is beyond the end of the output ({total_bytes} bytes)"
                        )
                    }
                    Err(e) => return Err(e.into()),
                };
                serde_json::to_value(page)?
            }
        };
        let view = serde_json::from_value(raw.clone()).context("an output page")?;
        Ok((raw, view))
    }

    /// The raw bytes of a page read with `Rendering::Base64`.
    fn bytes(page: &PageView, cursor: u64) -> anyhow::Result<Vec<u8>> {
        // The project's strict decoder: the daemon's base64 is canonical, and anything else is
        // an error, not bytes guessed at.
        crate::protocol::base64::decode(&page.data)
            .with_context(|| format!("the output page at cursor {cursor} is not base64"))
    }
}

/// The process's handle, and where its output is read from: the daemon, or the spool when none
/// runs.
fn source(args: &LogsArgs) -> anyhow::Result<(Handle, PageSource)> {
    if let Some(mut client) = args.target.try_connect()? {
        let handle = resolve(&mut client, &args.handle)?;
        return Ok((handle, PageSource::Daemon(client)));
    }
    let root = args.target.root()?;
    let (store, _) = offline_manifests(&root)?;
    let manifest = store.resolve(&args.handle)?.clone();
    let handle = manifest.handle;
    if let Some(r) = &manifest.retired {
        bail!(
            "the output of {} was retired at {} ({}); its manifest stays (`procjournal ps`)",
            handle,
            super::unix_ms_text(r.at_unix_ms),
            render::escape_field(&r.reason, false)
        );
    }
    let note = if manifest.state.is_terminal() {
        "no daemon is running; reading the spool"
    } else {
        "no daemon is running; showing the output recorded so far (following needs a daemon)"
    };
    note!("procjournal: {note}");
    let root = crate::root::Root::open_reader(&root)?;
    let dir = root.spool_dir().join(handle.to_string());
    let (mut spool, _) =
        Spool::open_reader(&dir).with_context(|| format!("no readable output for {handle}"))?;
    manifest.bound_reader(&mut spool);
    let source = PageSource::Offline {
        spool: Box::new(spool),
        manifest: Box::new(manifest.into_owned()),
    };
    Ok((handle, source))
}

pub(crate) fn logs(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let lines_mode = args.timestamps || args.stream_marker;
    // Raw bytes travel as base64 (JSON carries no arbitrary bytes) and are decoded here.
    let rendering = if args.base64 || args.raw || lines_mode {
        Rendering::Base64
    } else {
        Rendering::SafeText
    };
    let (handle, mut source) = source(&args)?;
    let follow = args.follow && source.is_live();
    let mut times = read_times(&args, handle, follow)?;
    let mut cursor = start_cursor(&args, &mut source, handle, times.as_ref())?;
    let mut out = std::io::stdout().lock();
    let mut lines = lines_mode.then(|| Lines::new(args.stream_marker));
    let mut gaps = 0usize;
    // Without -f: the end of the output when the first page answered; a fast writer's later
    // bytes are not chased.
    let mut end: Option<u64> = None;
    loop {
        let waiting_for_times = lines.as_ref().is_some_and(|l| !l.held.is_empty());
        let (wait_ms, max_bytes) = page_request(follow, waiting_for_times, end, cursor);
        let (raw, page) = source.page(handle, cursor, rendering, wait_ms, max_bytes)?;
        if !follow {
            end.get_or_insert(page.total_bytes);
        }
        if page.cursor_ahead {
            bail!(
                "cursor {cursor} is beyond the end of the output ({} bytes)",
                page.total_bytes
            );
        }
        // In --json page mode the page record itself carries `skipped`.
        if note_gap(&page, cursor, !args.json || lines_mode) {
            gaps += 1;
        }
        let at_end = page.state.is_terminal() && page.next_cursor >= page.total_bytes;
        match lines.as_mut() {
            Some(lines) => {
                let bytes = PageSource::bytes(&page, cursor)?;
                lines.feed(&page.spans, &bytes);
                if let Some(times) = times.as_mut() {
                    times.catch_up(handle, follow && at_end)?;
                }
                print_lines(lines, &mut out, times.as_ref(), &args, follow, at_end)?;
            }
            None => write_page(&mut out, &args, &raw, &page, cursor)?,
        }
        // A reader gone ends `logs` quietly (`out.rs`), `-f` too.
        out.flush()?;
        let progressed = page.next_cursor != cursor || page.gap || page.skipped.is_some();
        cursor = page.next_cursor;
        let read_to_end = cursor >= end.unwrap_or(page.total_bytes);
        if follow {
            if at_end && lines.as_ref().is_none_or(|l| l.held.is_empty()) {
                break;
            }
        } else if read_to_end || !progressed {
            if let Some(lines) = lines.as_mut() {
                finish_lines(lines, &mut out, times.as_ref(), &args)?;
            }
            break;
        }
    }
    if args.fail_on_gap && gaps > 0 {
        return Ok(ExitCode::from(EXIT_GAP));
    }
    Ok(ExitCode::SUCCESS)
}

/// The output's times from the journal, when `-t` or `--since TIME` needs them.
fn read_times(args: &LogsArgs, handle: Handle, follow: bool) -> anyhow::Result<Option<Times>> {
    let needs_times = args.timestamps || matches!(args.since, Some(Since::Time(_)));
    if !needs_times {
        return Ok(None);
    }
    Ok(Some(Times::read(&args.target.root()?, handle, follow)?))
}

/// The cursor `logs` starts at: `--since` or `--cursor`, then back to the last `--tail` lines.
fn start_cursor(
    args: &LogsArgs,
    source: &mut PageSource,
    handle: Handle,
    times: Option<&Times>,
) -> anyhow::Result<u64> {
    let cursor = match (args.since, times) {
        (Some(Since::Cursor(c)), _) => c,
        (Some(Since::Time(at)), Some(times)) => times.cursor_at(at),
        _ => args.cursor,
    };
    match args.tail {
        Some(n) => tail_start(source, handle, cursor, n),
        None => Ok(cursor),
    }
}

/// How long the next page request waits (ms), and how many bytes it asks for.
fn page_request(
    follow: bool,
    waiting_for_times: bool,
    end: Option<u64>,
    cursor: u64,
) -> (u64, u64) {
    let wait_ms = match (follow, waiting_for_times) {
        (false, _) => 0,
        (true, false) => FOLLOW_WAIT_MS,
        (true, true) => TIMED_FOLLOW_WAIT_MS,
    };
    let max_bytes = match end {
        Some(end) if !follow => end.saturating_sub(cursor).clamp(1, LOGS_PAGE_BYTES),
        _ => LOGS_PAGE_BYTES,
    };
    (wait_ms, max_bytes)
}

/// Whether `page` (read at `cursor`) lost bytes; with `notify`, says so on stderr.
fn note_gap(page: &PageView, cursor: u64, notify: bool) -> bool {
    if let Some(skipped) = &page.skipped {
        // Every gap and every damaged range, not only a first one: a follower outrun by
        // retention loses bytes mid-stream too.
        if notify {
            // The reason may come from a file name or an error: escaped like any field.
            note!("{}", render::escape_field(&skipped.notice(), false));
        }
        true
    } else if page.gap {
        // A daemon from before `skipped`: only retention made gaps.
        let lost = page.retained_from.saturating_sub(cursor);
        if notify {
            note!("-- {lost} bytes lost at cursor {cursor}: retention --");
        }
        true
    } else {
        false
    }
}

/// Prints the lines of a page fed to `lines` that are ready (lines mode: `-t`, `--stream-marker`).
fn print_lines(
    lines: &mut Lines,
    out: &mut impl Write,
    times: Option<&Times>,
    args: &LogsArgs,
    follow: bool,
    at_end: bool,
) -> std::io::Result<()> {
    // A line still open at a page's end may go on in the next page; with -f it is
    // complete once the process has ended (without -f, once the read is done,
    // `finish_lines`). Without -f every complete line is printed now (what no record covers
    // yet shows `-`); with -f -t, a line waits for the record that gives its time,
    // until the process has ended.
    if follow && at_end {
        lines.finish();
    }
    lines.print(
        out,
        times,
        args.timestamps,
        args.json,
        !follow || at_end || !args.timestamps,
    )
}

/// Prints every line left once the read is done (without `-f`), the last one complete as it is.
fn finish_lines(
    lines: &mut Lines,
    out: &mut impl Write,
    times: Option<&Times>,
    args: &LogsArgs,
) -> std::io::Result<()> {
    lines.finish();
    lines
        .print(out, times, args.timestamps, args.json, true)
        .and_then(|()| out.flush())
}

/// Writes a page as `--json`, `--raw`, `--base64` or safe text asks (pages mode).
fn write_page(
    out: &mut impl Write,
    args: &LogsArgs,
    raw: &Value,
    page: &PageView,
    cursor: u64,
) -> anyhow::Result<()> {
    if args.json {
        writeln!(out, "{}", super::json::line(raw)?)?;
    } else if args.raw {
        let bytes = PageSource::bytes(page, cursor)?;
        out.write_all(&bytes)?;
    } else if args.base64 {
        if !page.data.is_empty() {
            writeln!(out, "{}", page.data)?;
        }
    } else {
        out.write_all(page.data.as_bytes())?;
    }
    Ok(())
}

/// Where the last `n` lines of the output from `from` on start: reads back from the end in
/// windows that double until one holds `n` line ends before the last byte (or reaches `from`).
fn tail_start(source: &mut PageSource, handle: Handle, from: u64, n: u64) -> anyhow::Result<u64> {
    let (_, probe) = source.page(handle, from, Rendering::Base64, 0, 1)?;
    if probe.cursor_ahead {
        bail!(
            "cursor {from} is beyond the end of the output ({} bytes)",
            probe.total_bytes
        );
    }
    let end = probe.total_bytes;
    let lo = from.max(probe.retained_from);
    let mut window = TAIL_WINDOW_BYTES;
    loop {
        let start = end.saturating_sub(window).max(lo);
        // Cursors of the newlines in [start, end), the one at end - 1 not counted (it ends the
        // last line, it does not start one).
        let mut newlines: Vec<u64> = Vec::new();
        let mut cursor = start;
        while cursor < end {
            let (_, page) = source.page(
                handle,
                cursor,
                Rendering::Base64,
                0,
                (end - cursor).min(LOGS_PAGE_BYTES),
            )?;
            let bytes = PageSource::bytes(&page, cursor)?;
            let first = page.next_cursor.saturating_sub(bytes.len() as u64);
            newlines.extend(
                bytes
                    .iter()
                    .enumerate()
                    .filter(|&(_, &b)| b == b'\n')
                    .map(|(i, _)| first + i as u64)
                    .filter(|&c| c + 1 < end),
            );
            if page.next_cursor <= cursor {
                break;
            }
            cursor = page.next_cursor;
        }
        let count = newlines.len() as u64;
        if n == 0 {
            return Ok(end);
        }
        if count >= n {
            let i = usize::try_from(count - n).unwrap_or(0);
            return Ok(newlines[i] + 1);
        }
        if start == lo {
            return Ok(lo);
        }
        window = window.saturating_mul(2);
    }
}

/// A line of output being assembled, or complete.
#[derive(Debug)]
struct Line {
    /// The stream of its first byte (with `--stream-marker`, every byte's).
    stream: String,
    cursor: u64,
    /// The cursor after its last byte (its newline, when it has one).
    end: u64,
    bytes: Vec<u8>,
}

/// Cuts output into lines: one line in assembly per stream with `--stream-marker` (each stream's
/// lines as it wrote them), else one for the combined output. Complete lines wait in `held`, in
/// the order they were completed, until they are printed.
#[derive(Debug)]
struct Lines {
    per_stream: bool,
    open: Vec<Line>,
    held: VecDeque<Line>,
}

impl Lines {
    fn new(per_stream: bool) -> Lines {
        Lines {
            per_stream,
            open: Vec::new(),
            held: VecDeque::new(),
        }
    }

    fn feed(&mut self, spans: &[SpanView], bytes: &[u8]) {
        let Some(first) = spans.first() else {
            return;
        };
        let base = first.cursor;
        for span in spans {
            // Spans come from the daemon in cursor order; one out of order names no bytes.
            let from = span
                .cursor
                .checked_sub(base)
                .and_then(|d| usize::try_from(d).ok())
                .unwrap_or(usize::MAX);
            let Some(piece) = bytes.get(from..from.saturating_add(span.len as usize)) else {
                continue;
            };
            let mut cursor = span.cursor;
            for part in piece.split_inclusive(|&b| b == b'\n') {
                let key = if self.per_stream {
                    span.stream.as_str()
                } else {
                    ""
                };
                let i = match self
                    .open
                    .iter()
                    .position(|l| !self.per_stream || l.stream == key)
                {
                    Some(i) => i,
                    None => {
                        self.open.push(Line {
                            stream: span.stream.clone(),
                            cursor,
                            end: cursor,
                            bytes: Vec::new(),
                        });
                        self.open.len() - 1
                    }
                };
                let line = &mut self.open[i];
                line.bytes.extend_from_slice(part);
                cursor += part.len() as u64;
                line.end = cursor;
                if part.ends_with(b"\n") {
                    let line = self.open.remove(i);
                    self.held.push_back(line);
                }
            }
        }
    }

    /// The output ended: the lines still open are complete as they are.
    fn finish(&mut self) {
        let mut open = std::mem::take(&mut self.open);
        open.sort_by_key(|l| l.end);
        self.held.extend(open);
    }

    /// Prints the held lines in order; without `all`, stops at the first whose time no record
    /// gives yet (with `-f`, it waits for the next checkpoint).
    fn print(
        &mut self,
        out: &mut impl Write,
        times: Option<&Times>,
        timestamps: bool,
        json: bool,
        all: bool,
    ) -> std::io::Result<()> {
        while let Some(line) = self.held.front() {
            let time = match times.map(|t| t.of(line.end)) {
                Some(Ok(at)) => at,
                Some(Err(())) if !all => return Ok(()),
                _ => None,
            };
            let Some(line) = self.held.pop_front() else {
                break;
            };
            let body = line.bytes.strip_suffix(b"\n").unwrap_or(&line.bytes);
            let body = body.strip_suffix(b"\r").unwrap_or(body);
            let text = render::safe_text(body, true).text;
            if json {
                let record = serde_json::json!({
                    "cursor": line.cursor,
                    "next_cursor": line.end,
                    "stream": line.stream,
                    "time_unix_ms": if timestamps { time } else { None },
                    "text": text,
                });
                writeln!(out, "{}", super::json::line(&record)?)?;
                continue;
            }
            let mut prefix = String::new();
            if timestamps {
                match time {
                    Some(at) => prefix.push_str(&rfc3339_ms(at)),
                    None => prefix.push_str(&format!("{:<24}", "-")),
                }
                prefix.push(' ');
            }
            if self.per_stream {
                prefix.push_str(match line.stream.as_str() {
                    "stdout" => "out|",
                    "stderr" => "err|",
                    "terminal" => "pty|",
                    _ => "?|",
                });
            }
            // A lone `\r` inside the line became a line break in the safe text: each part gets
            // the prefix.
            for part in text.split('\n') {
                writeln!(out, "{prefix}{part}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_parse_and_print() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_rfc3339_ms("2026-12-01T14:43:59.999Z"),
            Ok(1_796_136_239_999)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-12-01 16:43:59.9+02:00"),
            Ok(1_796_136_239_900)
        );
        assert!(parse_rfc3339_ms("2026-13-01T00:00:00Z").is_err());
        assert!(parse_rfc3339_ms("2026-12-01T00:00:00").is_err());
        assert!(parse_rfc3339_ms("2026-12-01T00:00:00Zjunk").is_err());
        assert_eq!(rfc3339_ms(1_796_136_239_999), "2026-12-01T14:43:59.999Z");
    }

    #[test]
    fn since_takes_a_cursor_a_time_or_an_age() {
        assert!(matches!(parse_since("cursor:42"), Ok(Since::Cursor(42))));
        assert!(matches!(
            parse_since("1970-01-01T00:00:01Z"),
            Ok(Since::Time(1000))
        ));
        // The parse reads the clock itself, between these two readings.
        let before = super::super::views::now_unix_ms();
        let Ok(Since::Time(t)) = parse_since("10m") else {
            panic!("10m is an age");
        };
        let after = super::super::views::now_unix_ms();
        assert!(
            before - 600_000 <= t && t <= after - 600_000,
            "{t} is not 10 minutes before {before}..={after}"
        );
        assert!(parse_since("cursor:x").is_err());
        assert!(parse_since("soon").is_err());
    }

    proptest::proptest! {
        /// Any text is a time or an error, never a panic; every time prints and parses back.
        #[test]
        fn rfc3339_parsing_is_total_and_round_trips(text in ".{0,40}", ms in 0u64..253_402_300_800_000) {
            let _ = parse_rfc3339_ms(&text);
            let _ = parse_since(&text);
            proptest::prop_assert_eq!(parse_rfc3339_ms(&rfc3339_ms(ms)), Ok(ms));
        }

        /// Cutting any spans of any bytes into lines loses no byte and keeps each stream's order.
        #[test]
        fn lines_keep_every_byte_of_each_stream(
            pieces in proptest::collection::vec((0u8..2, proptest::collection::vec(proptest::sample::select(b"ab\n\r".to_vec()), 0..8)), 0..12),
            per_stream in proptest::bool::ANY,
        ) {
            let mut spans = Vec::new();
            let mut bytes = Vec::new();
            let mut cursor = 7u64;
            for (stream, piece) in &pieces {
                let name = if *stream == 0 { "stdout" } else { "stderr" };
                spans.push(span(name, cursor, piece.len() as u32));
                bytes.extend_from_slice(piece);
                cursor += piece.len() as u64;
            }
            let mut lines = Lines::new(per_stream);
            lines.feed(&spans, &bytes);
            lines.finish();
            for name in ["stdout", "stderr"] {
                let wrote: Vec<u8> = pieces
                    .iter()
                    .filter(|(s, _)| (*s == 0) == (name == "stdout"))
                    .flat_map(|(_, p)| p.clone())
                    .collect();
                if per_stream {
                    let kept: Vec<u8> = lines
                        .held
                        .iter()
                        .filter(|l| l.stream == name)
                        .flat_map(|l| l.bytes.clone())
                        .collect();
                    proptest::prop_assert_eq!(kept, wrote);
                }
            }
            let total: usize = lines.held.iter().map(|l| l.bytes.len()).sum();
            proptest::prop_assert_eq!(total, bytes.len());
            // Cursors are exact: each line's end minus its start is its length, or more when
            // another stream's bytes came between (per stream).
            for l in &lines.held {
                proptest::prop_assert!(l.end - l.cursor >= l.bytes.len() as u64);
            }
        }
    }

    fn span(stream: &str, cursor: u64, len: u32) -> SpanView {
        SpanView {
            stream: stream.to_owned(),
            cursor,
            len,
        }
    }

    fn printed(lines: &mut Lines, json: bool) -> String {
        let mut out = Vec::new();
        lines.print(&mut out, None, false, json, true).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn streams_are_cut_into_lines_each_with_its_marker() {
        // stdout writes "ab", stderr a whole line, stdout ends its line: "ab" and "cd" are one
        // stdout line, after the stderr line that was complete first.
        let bytes = b"aberr\ncd\n\x1b[31mred\r\n";
        let spans = [
            span("stdout", 10, 2),
            span("stderr", 12, 4),
            span("stdout", 16, 3),
            span("stderr", 19, 10),
        ];
        let mut lines = Lines::new(true);
        lines.feed(&spans, bytes);
        lines.finish();
        assert_eq!(printed(&mut lines, false), "err|err\nout|abcd\nerr|red\n");

        let mut combined = Lines::new(false);
        combined.feed(&spans, bytes);
        combined.finish();
        let json = printed(&mut combined, true);
        let records: Vec<Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(records[0]["text"], "aberr");
        assert_eq!(
            (
                records[0]["cursor"].clone(),
                records[0]["next_cursor"].clone()
            ),
            (10.into(), 16.into())
        );
        assert_eq!(records[1]["text"], "cd");
        assert_eq!(records[2]["text"], "red");
        assert_eq!(records.len(), 3);
    }

    #[test]
    fn a_line_is_timed_by_the_first_record_that_covers_it() {
        let times = Times {
            marks: vec![(10, 1000), (25, 2000)],
            registered_seen: true,
            ..Times::default()
        };
        assert_eq!(times.of(1), Ok(Some(1000)));
        assert_eq!(times.of(10), Ok(Some(1000)));
        assert_eq!(times.of(11), Ok(Some(2000)));
        assert_eq!(times.of(26), Err(()));
        assert_eq!(times.cursor_at(999), 0);
        assert_eq!(times.cursor_at(1500), 10);
        assert_eq!(times.cursor_at(2000), 25);
        // Compacted: what the first surviving record covers has no known time.
        let compacted = Times {
            marks: vec![(10, 1000), (25, 2000)],
            known_from: 10,
            ..Times::default()
        };
        assert_eq!(compacted.of(10), Ok(None));
        assert_eq!(compacted.of(11), Ok(Some(2000)));
    }
}
