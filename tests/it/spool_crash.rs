//! The spool's durability proof: a child process appends output to a spool and acknowledges each
//! append on stdout; the parent kills it with SIGKILL at a random moment, reopens the spool and
//! checks that every acknowledged byte is still there, with its exact value and stream, and that
//! recovery found nothing worse than a torn tail.
//!
//! The test binary is its own child: [`spool_crash_child_appender`] is an ordinary `#[test]` that
//! returns at once unless `PROCJOURNAL_SPOOL_CHILD=<spool dir>` is set, in which case it is the
//! appender. The parent runs
//! `current_exe() --exact spool_crash::spool_crash_child_appender --nocapture --test-threads=1` with that variable and the options, the round's seed and the round's content
//! salt in the environment.
//!
//! The child protocol, one line each, flushed before the next step:
//!
//! ```text
//! open <total> <retained_from> <torn_tail_bytes>   after open_writer returned
//! append <cursor> <len> <stdout|stderr>            before append is called (an intent)
//! ack <total>                                      after append and flush returned Ok
//! durable <retained_from> <durable_total>          after checkpoint returned Ok
//! ```
//!
//! Every byte is a deterministic function of its cursor and of the salt of the round that wrote it
//! ([`content`]), so the parent can check every retained byte, acknowledged or not. The stream of
//! every byte is known from the `append` intents (an intent the kill interrupted may have left some
//! of its chunks behind; the intent says which stream those bytes belong to).
//!
//! Every scenario runs many rounds on the same directory, so each reopen recovers the residue of
//! the previous kill on top of everything earlier rounds left, and each child continues from the
//! total it finds when it opens the spool.
//!
//! Randomness comes from a xorshift generator seeded by a base seed and the round number. The base
//! seed is printed at the start of each scenario and named in every failure message; set
//! `PROCJOURNAL_SPOOL_SEED=<seed>` to replay a run.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use procjournal::spool::format::Stream;
use procjournal::spool::{CHUNK_SPLIT_BYTES, Spool, SpoolError, SpoolOptions, SpoolRead};

/// Set (to the spool directory) only in the child process.
const CHILD_ENV: &str = "PROCJOURNAL_SPOOL_CHILD";
/// `<segment_bytes>,<retention_bytes>`.
const OPTIONS_ENV: &str = "PROCJOURNAL_SPOOL_OPTIONS";
/// Set when the child's spool defers its removals to its checkpoints, as a supervisor's does.
const DEFER_ENV: &str = "PROCJOURNAL_SPOOL_DEFER";
/// The seed of the child's choices of sizes, streams and checkpoints.
const CHILD_SEED_ENV: &str = "PROCJOURNAL_SPOOL_CHILD_SEED";
/// The content salt of the bytes this child writes.
const SALT_ENV: &str = "PROCJOURNAL_SPOOL_SALT";
/// Replays a run: the base seed of every scenario.
const SEED_ENV: &str = "PROCJOURNAL_SPOOL_SEED";
/// The name the harness knows the child entry point by (`--exact`).
const CHILD_TEST: &str = "spool_crash_child_appender";

const SPOOL_ID: [u8; 16] = *b"spool-crash-test";
/// Small segments, so that rotations (and, with small retention, deletions) happen every few
/// appends and get killed in the middle too.
const SEGMENT_BYTES: u64 = 16 * 1024;
const ROUNDS: u64 = 60;
/// Appends one child makes at most; never reached (the parent kills long before), but it bounds
/// a child whose parent vanished without closing its stdout.
const APPENDS_MAX: u64 = 100_000;
/// The largest single append: bigger than [`CHUNK_SPLIT_BYTES`], so some appends are two chunks
/// and a kill can leave the first one behind.
const APPEND_BYTES_MAX: u64 = 100 * 1024;
/// Turns a hung child into a failure with diagnostics instead of a hung test run. Nothing is
/// asserted about how long anything takes: a healthy child acknowledges its first append in
/// milliseconds, so this only fires if it makes no progress at all.
const HANG_GUARD: Duration = Duration::from_secs(120);
/// Reads of the whole retained window use this many bytes at most each.
const VERIFY_READ_BYTES: usize = 256 * 1024;

// ---------------------------------------------------------------------------------------------
// Deterministic content.

use crate::common::rng;
use rng::{XorShift, mix};

/// Length of the pseudo-random table content is cut from: a prime a little under 1 MiB, so that
/// a shift by a multiple of it is the only shift that goes unseen (and no append or read is that
/// long).
const TABLE_BYTES: u64 = 1_048_573;

fn table() -> &'static [u8] {
    static TABLE: OnceLock<Vec<u8>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut rng = XorShift::new(0x7AB1E);
        let mut t = Vec::with_capacity(TABLE_BYTES as usize + 8);
        while (t.len() as u64) < TABLE_BYTES {
            t.extend_from_slice(&rng.next().to_le_bytes());
        }
        t.truncate(TABLE_BYTES as usize);
        t
    })
}

/// Appends to `out` the `len` bytes from `cursor` on, as written by a child with `salt`: byte `c`
/// is `table[(offset(salt) + c) % TABLE_BYTES]`. A byte from the wrong cursor or from another
/// round differs from the expected one with probability 255/256. (A table lookup rather than a
/// hash per byte keeps the child's time mostly inside `Spool::append`, which is where kills
/// should land, and keeps verification a `memcmp`.)
fn content(salt: u64, cursor: u64, len: u64, out: &mut Vec<u8>) {
    let table = table();
    let mut at = (mix(salt) % TABLE_BYTES + cursor % TABLE_BYTES) % TABLE_BYTES;
    let mut left = len;
    while left > 0 {
        let n = left.min(TABLE_BYTES - at);
        out.extend_from_slice(&table[at as usize..(at + n) as usize]);
        left -= n;
        at = 0;
    }
}

fn stream_name(stream: Stream) -> &'static str {
    match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
        Stream::Terminal => "terminal",
    }
}

fn parse_stream(s: &str) -> Option<Stream> {
    match s {
        "stdout" => Some(Stream::Stdout),
        "stderr" => Some(Stream::Stderr),
        "terminal" => Some(Stream::Terminal),
        _ => None,
    }
}

fn env_u64(name: &str) -> u64 {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set"))
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn options_from_env() -> SpoolOptions {
    let value = std::env::var(OPTIONS_ENV).unwrap_or_else(|_| panic!("{OPTIONS_ENV} is not set"));
    let (segment, retention) = value
        .split_once(',')
        .unwrap_or_else(|| panic!("{OPTIONS_ENV}: expected <segment>,<retention>"));
    SpoolOptions {
        segment_bytes: segment.parse().expect("segment_bytes"),
        retention_bytes: retention.parse().expect("retention_bytes"),
    }
}

/// Sizes from 1 B to [`APPEND_BYTES_MAX`], spread over orders of magnitude: lines, blocks and
/// appends larger than one chunk.
fn append_size(rng: &mut XorShift) -> u64 {
    match rng.below(10) {
        0..=2 => rng.between(1, 120),
        3..=5 => rng.between(121, 4096),
        6..=7 => rng.between(4097, 40 * 1024),
        _ => rng.between(40 * 1024 + 1, APPEND_BYTES_MAX),
    }
}

// ---------------------------------------------------------------------------------------------
// The child.

/// The appender run in the child process. Without `PROCJOURNAL_SPOOL_CHILD` in the environment it
/// returns at once: in an ordinary `cargo test` run it is a no-op that always passes, and it only
/// does work when a crash scenario below re-executes this binary with
/// `--exact spool_crash::spool_crash_child_appender`.
///
/// As the child it opens the spool writer in the directory named by `PROCJOURNAL_SPOOL_CHILD`
/// with the options of `PROCJOURNAL_SPOOL_OPTIONS`, and appends from the total it recovered:
/// sizes from 1 B to 100 KiB, the stream switching three times in four, the bytes given by
/// [`content`] with the salt of `PROCJOURNAL_SPOOL_SALT`; one append in eight is followed by a
/// checkpoint. It reports every step on stdout (see the module docs) until the parent kills it.
#[test]
fn spool_crash_child_appender() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let options = options_from_env();
    let mut rng = XorShift::new(env_u64(CHILD_SEED_ENV));
    let salt = env_u64(SALT_ENV);
    let mut out = std::io::stdout().lock();
    // The harness may have printed "test spool_crash_child_appender ... " without a newline: end
    // that line so every report starts a line of its own. A failed write means the parent is
    // gone: stop quietly.
    macro_rules! report {
        ($($arg:tt)*) => {
            if writeln!(out, $($arg)*).is_err() || out.flush().is_err() {
                return;
            }
        };
    }
    report!();
    let (mut spool, recovery) =
        Spool::open_writer(&dir, SPOOL_ID, options).expect("child: open_writer");
    if std::env::var_os(DEFER_ENV).is_some() {
        spool.defer_removals();
    }
    report!(
        "open {} {} {}",
        spool.total_bytes(),
        spool.retained_from(),
        recovery.torn_tail_bytes
    );
    let mut stream = if rng.below(2) == 0 {
        Stream::Stdout
    } else {
        Stream::Stderr
    };
    let mut bytes = Vec::new();
    for _ in 0..APPENDS_MAX {
        if rng.below(4) != 0 {
            stream = match stream {
                Stream::Stdout => Stream::Stderr,
                Stream::Stderr => Stream::Terminal,
                Stream::Terminal => Stream::Stdout,
            };
        }
        let len = append_size(&mut rng);
        let cursor = spool.total_bytes();
        bytes.clear();
        content(salt, cursor, len, &mut bytes);
        report!("append {cursor} {len} {}", stream_name(stream));
        spool.append(stream, &bytes).expect("child: append");
        // An ack promises the bytes are in the files (where a crash of this process leaves them),
        // not only staged in the spool's write buffer.
        spool.flush().expect("child: flush");
        report!("ack {}", spool.total_bytes());
        if rng.below(8) == 0 {
            let (retained_from, durable) = spool.checkpoint().expect("child: checkpoint");
            report!("durable {retained_from} {durable}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The parent.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    Open {
        total: u64,
        retained_from: u64,
        torn: u64,
    },
    Append {
        cursor: u64,
        len: u64,
        stream: Stream,
    },
    Ack {
        total: u64,
    },
    Durable {
        retained_from: u64,
        durable: u64,
    },
}

fn parse_line(line: &str) -> Option<Line> {
    let mut words = line.split_ascii_whitespace();
    let word = words.next()?;
    let mut num = || words.next()?.parse::<u64>().ok();
    let parsed = match word {
        "open" => Line::Open {
            total: num()?,
            retained_from: num()?,
            torn: num()?,
        },
        "append" => Line::Append {
            cursor: num()?,
            len: num()?,
            stream: parse_stream(words.next()?)?,
        },
        "ack" => Line::Ack { total: num()? },
        "durable" => Line::Durable {
            retained_from: num()?,
            durable: num()?,
        },
        _ => return None,
    };
    words.next().is_none().then_some(parsed)
}

/// A run of bytes of one stream written by one child (one `append` intent, possibly cut short by a
/// kill).
#[derive(Debug, Clone, Copy)]
struct Run {
    start: u64,
    end: u64,
    stream: Stream,
    salt: u64,
}

/// What the spool must hold: contiguous runs from cursor 0 to the recovered total.
#[derive(Debug, Default)]
struct Model {
    runs: Vec<Run>,
}

impl Model {
    fn total(&self) -> u64 {
        self.runs.last().map_or(0, |r| r.end)
    }

    fn push(&mut self, run: Run) {
        assert_eq!(run.start, self.total(), "model runs are contiguous");
        if run.end > run.start {
            self.runs.push(run);
        }
    }

    /// Index of the run holding `cursor` (which must be below the total).
    fn run_at(&self, cursor: u64) -> usize {
        self.runs.partition_point(|r| r.end <= cursor)
    }

    /// The expected bytes of `[from, to)`.
    fn expected(&self, from: u64, to: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity((to - from) as usize);
        let mut at = from;
        let mut i = self.run_at(from);
        while at < to {
            let run = self.runs[i];
            let end = run.end.min(to);
            content(run.salt, at, end - at, &mut out);
            at = end;
            i += 1;
        }
        out
    }
}

/// Checks one read against the model.
fn check_read(read: &SpoolRead, spool: &Spool, model: &Model, cursor: u64, max: usize, ctx: &str) {
    let total = model.total();
    let retained_from = spool.retained_from();
    assert_eq!(
        (read.retained_from, read.total_bytes),
        (retained_from, total),
        "{ctx}: read({cursor}, {max}) bounds"
    );
    assert_eq!(
        read.gap,
        cursor < retained_from,
        "{ctx}: read({cursor}) gap"
    );
    let start = cursor.max(retained_from);
    let end = total.min(start + max as u64);
    assert_eq!(
        read.next_cursor, end,
        "{ctx}: read({cursor}, {max}) next_cursor"
    );
    assert_eq!(
        read.bytes.len() as u64,
        end - start,
        "{ctx}: read({cursor}, {max}) length"
    );
    let expected = model.expected(start, end);
    if read.bytes != expected {
        let at = read
            .bytes
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        let c = start + at as u64;
        let run = model.runs[model.run_at(c)];
        panic!(
            "{ctx}: read({cursor}, {max}): byte at cursor {c} is {:#04x}, expected {:#04x} \
             (written by the child with salt {} in the run {}..{})",
            read.bytes[at], expected[at], run.salt, run.start, run.end
        );
    }
    // Spans cover the bytes exactly, in order, each with the stream its bytes were written with,
    // and runs of one stream are merged.
    let mut at = start;
    for span in &read.spans {
        assert_eq!(span.cursor, at, "{ctx}: read({cursor}, {max}): span order");
        assert!(span.len > 0, "{ctx}: read({cursor}): empty span");
        let span_end = span.cursor + u64::from(span.len);
        let mut i = model.run_at(span.cursor);
        while i < model.runs.len() && model.runs[i].start < span_end {
            assert_eq!(
                model.runs[i].stream, span.stream,
                "{ctx}: read({cursor}, {max}): span {span:?} covers run {:?} of the other stream",
                model.runs[i]
            );
            i += 1;
        }
        at = span_end;
    }
    assert_eq!(
        at, end,
        "{ctx}: read({cursor}, {max}): spans cover the bytes"
    );
    assert!(
        read.spans.windows(2).all(|w| w[0].stream != w[1].stream),
        "{ctx}: read({cursor}, {max}): adjacent spans of one stream are not merged: {:?}",
        read.spans
    );
}

/// Reads the whole retained window and some random ranges, and checks each against the model.
fn check_contents(spool: &Spool, model: &Model, rng: &mut XorShift, ctx: &str) {
    let total = model.total();
    assert_eq!(spool.total_bytes(), total, "{ctx}: total_bytes");
    let mut cursor = spool.retained_from();
    while cursor < total {
        let read = spool
            .read(cursor, VERIFY_READ_BYTES)
            .unwrap_or_else(|e| panic!("{ctx}: read({cursor}): {e}"));
        check_read(&read, spool, model, cursor, VERIFY_READ_BYTES, ctx);
        cursor = read.next_cursor;
    }
    for _ in 0..16 {
        let cursor = rng.below(total + 1);
        let max = rng.between(1, 3 * CHUNK_SPLIT_BYTES as u64) as usize;
        let read = spool
            .read(cursor, max)
            .unwrap_or_else(|e| panic!("{ctx}: read({cursor}, {max}): {e}"));
        check_read(&read, spool, model, cursor, max, ctx);
    }
    let end = spool
        .read(total, 10)
        .unwrap_or_else(|e| panic!("{ctx}: read at the end: {e}"));
    assert!(
        end.bytes.is_empty() && end.spans.is_empty(),
        "{ctx}: a read at the end returns nothing"
    );
    assert!(
        matches!(
            spool.read(total + 1, 10),
            Err(SpoolError::CursorAhead { .. })
        ),
        "{ctx}: a read beyond the end is CursorAhead"
    );
}

/// Totals of one scenario, printed at its end.
#[derive(Debug, Default)]
struct Tally {
    rounds: u64,
    kills: u64,
    /// Kills before the child reported its first ack (during start-up or its first append).
    kills_before_first_ack: u64,
    /// Kills with an `append` intent reported but not acknowledged.
    kills_mid_append: u64,
    acks: u64,
    acked_bytes: u64,
    checkpoints: u64,
    /// Rounds whose recovery found (and cut) a torn tail.
    torn_tails: u64,
    torn_tail_bytes: u64,
    /// Rounds whose recovery removed a newest segment file no longer than a header (a kill
    /// between creating a segment and writing its header; no torn chunk).
    empty_segment_residues: u64,
    /// Rounds where whole chunks of an unacknowledged append survived (a multi-chunk append cut
    /// between its chunks, or an append whose ack the kill prevented).
    unacked_survivor_rounds: u64,
    unacked_survivor_bytes: u64,
    total_bytes: u64,
    retained_from: u64,
    /// Rounds whose recovery cut a reused file's old output after the newest segment's chunks.
    old_tails: u64,
    /// Rounds whose kill left spares (`*.seg.tmp`: dropped segment files kept to be written over
    /// by later segments) for the reopen to remove.
    spares_left: u64,
}

struct Scenario {
    name: &'static str,
    options: SpoolOptions,
    /// The parent kills after between 1 and this many acks or intents (or, one round in eight, at
    /// start-up).
    max_acks_before_kill: u64,
    /// The child defers retention's removals to its checkpoints (`Spool::defer_removals`).
    defer: bool,
}

fn base_seed() -> u64 {
    match std::env::var(SEED_ENV) {
        Ok(s) => s.parse().unwrap_or_else(|e| panic!("{SEED_ENV}: {e}")),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            mix(nanos ^ u64::from(std::process::id()))
        }
    }
}

fn stderr_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("(no stderr: {e})"))
}

fn spawn_child(scenario: &Scenario, dir: &Path, seed: u64, salt: u64, stderr: &Path) -> Child {
    let options = scenario.options;
    let exe = std::env::current_exe().expect("current_exe");
    let stderr = File::create(stderr).expect("create child stderr file");
    let mut cmd = Command::new(exe);
    if scenario.defer {
        cmd.env(DEFER_ENV, "1");
    }
    cmd.args([
        "--exact",
        &crate::common::harness_name(module_path!(), CHILD_TEST),
    ])
    .args(["--nocapture", "--test-threads=1"])
    .env(CHILD_ENV, dir)
    .env(
        OPTIONS_ENV,
        format!("{},{}", options.segment_bytes, options.retention_bytes),
    )
    .env(CHILD_SEED_ENV, seed.to_string())
    .env(SALT_ENV, salt.to_string())
    .env_remove("RUST_BACKTRACE")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::from(stderr))
    .spawn()
    .expect("spawn child")
}

/// When a round's kill comes: after the `count`th report of one kind, then `delay` later.
#[derive(Debug, Clone, Copy)]
struct KillAt {
    count: u64,
    /// Count `append` intents (the kill then lands in or near `Spool::append`, where it can tear
    /// a chunk) rather than acks (the kill lands between appends, often in a rotation or a
    /// checkpoint).
    on_intent: bool,
    delay: Duration,
}

/// One round: spawn, wait for the reports `at` names, wait its delay, SIGKILL, reap. Returns
/// every line the child printed before it died (also those after the kill was decided).
fn crash_once(mut child: Child, at: KillAt, stderr_path: &Path, ctx: &str) -> Vec<Line> {
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = mpsc::channel::<Line>();
    let reader = std::thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match stdout.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            // Only whole lines count; reports are single short writes, so they are never split.
            // Anything else (the harness's own lines) is ignored.
            if !line.ends_with('\n') {
                continue;
            }
            if let Some(parsed) = parse_line(&line)
                && tx.send(parsed).is_err()
            {
                return;
            }
        }
    });

    let mut lines = Vec::new();
    let mut seen = 0;
    while seen < at.count {
        match rx.recv_timeout(HANG_GUARD) {
            Ok(line) => {
                seen += u64::from(match line {
                    Line::Ack { .. } => !at.on_intent,
                    Line::Append { .. } => at.on_intent,
                    _ => false,
                });
                lines.push(line);
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = child.wait().expect("wait child");
                panic!(
                    "{ctx}: the child ended by itself ({status}) after {} reports, before the \
                     kill; its stderr:\n{}",
                    lines.len(),
                    stderr_of(stderr_path)
                );
            }
            Err(RecvTimeoutError::Timeout) => {
                let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
                let _ = child.wait();
                panic!(
                    "{ctx}: the child made no progress for {HANG_GUARD:?} after {} reports; its \
                     stderr:\n{}",
                    lines.len(),
                    stderr_of(stderr_path)
                );
            }
        }
    }
    if !at.delay.is_zero() {
        // Not waiting for a condition: the delay is the random kill moment itself.
        std::thread::sleep(at.delay);
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).expect("SIGKILL the child");
    let status = child.wait().expect("wait child");
    assert_eq!(
        status.signal(),
        Some(Signal::SIGKILL as i32),
        "{ctx}: the child was expected to die of SIGKILL but ended with {status}; its stderr:\n{}",
        stderr_of(stderr_path)
    );
    reader.join().expect("stdout reader thread");
    lines.extend(rx.try_iter());
    lines
}

/// What the child's reports claim, checked for consistency before the disk is looked at.
#[derive(Debug, Default)]
struct Claims {
    /// Appends that returned Ok, in order.
    acked: Vec<Run>,
    /// The append the kill interrupted, if the child had announced one.
    in_flight: Option<Run>,
    checkpoints: u64,
}

fn check_claims(
    lines: &[Line],
    previous_total: u64,
    retained_before: u64,
    salt: u64,
    ctx: &str,
) -> Claims {
    let mut claims = Claims::default();
    let mut it = lines.iter();
    match it.next() {
        None => return claims,
        Some(&Line::Open {
            total,
            retained_from,
            torn,
        }) => {
            assert_eq!(
                total, previous_total,
                "{ctx}: the child opened the spool at another total than the parent recovered"
            );
            assert_eq!(
                retained_from, retained_before,
                "{ctx}: the child's retained_from at open"
            );
            assert_eq!(
                torn, 0,
                "{ctx}: the parent's clean reopen left a torn tail for the child"
            );
        }
        Some(other) => panic!("{ctx}: the child's first report is {other:?}, not open"),
    }
    let mut total = previous_total;
    let mut last_retained = retained_before;
    for &line in it {
        match line {
            Line::Open { .. } => panic!("{ctx}: a second open report"),
            Line::Append {
                cursor,
                len,
                stream,
            } => {
                assert!(
                    claims.in_flight.is_none(),
                    "{ctx}: an append was announced before the previous one was acknowledged"
                );
                assert_eq!(cursor, total, "{ctx}: append cursor");
                assert!(
                    (1..=APPEND_BYTES_MAX).contains(&len),
                    "{ctx}: append length"
                );
                claims.in_flight = Some(Run {
                    start: cursor,
                    end: cursor + len,
                    stream,
                    salt,
                });
            }
            Line::Ack { total: acked } => {
                let run = claims
                    .in_flight
                    .take()
                    .unwrap_or_else(|| panic!("{ctx}: an ack without an append"));
                assert_eq!(acked, run.end, "{ctx}: the ack's total is the append's end");
                total = acked;
                claims.acked.push(run);
            }
            Line::Durable {
                retained_from,
                durable,
            } => {
                assert!(
                    claims.in_flight.is_none(),
                    "{ctx}: a checkpoint during an append"
                );
                assert_eq!(
                    durable, total,
                    "{ctx}: a checkpoint covers every acked byte"
                );
                assert!(
                    last_retained <= retained_from && retained_from <= durable,
                    "{ctx}: checkpoint retained_from {retained_from} (was {last_retained}, \
                     durable {durable})"
                );
                last_retained = retained_from;
                claims.checkpoints += 1;
            }
        }
    }
    claims
}

/// Reopens the spool writable after a kill, checks the recovery against the child's claims and
/// every retained byte against the model, then checks that a read-only open and a second writable
/// open are clean and agree.
fn verify_after_crash(
    scenario: &Scenario,
    dir: &Path,
    model: &mut Model,
    claims: &Claims,
    rng: &mut XorShift,
    tally: &mut Tally,
    ctx: &str,
) {
    let previous_total = model.total();
    let last_acked = claims.acked.last().map_or(previous_total, |r| r.end);
    let (spool, recovery) = Spool::open_writer(dir, SPOOL_ID, scenario.options)
        .unwrap_or_else(|e| panic!("{ctx}: reopening after the kill failed: {e}"));
    assert!(
        recovery.bad_segments.is_empty(),
        "{ctx}: recovery found more than a torn tail: {recovery:?}; files: {}",
        listing(dir)
    );
    assert!(
        recovery.torn_tail_bytes + recovery.old_tail_bytes == 0 || recovery.torn_tail_cut,
        "{ctx}: a writable open cuts the torn or old tail it finds: {recovery:?}"
    );
    if recovery.torn_tail_bytes > 0 {
        tally.torn_tails += 1;
        tally.torn_tail_bytes += recovery.torn_tail_bytes;
    } else if recovery.old_tail_bytes > 0 {
        tally.old_tails += 1;
    } else if recovery.torn_tail_cut {
        // Nothing torn in the last segment, yet something cut: an empty segment file (a kill
        // between creating a segment and writing its whole header) was removed.
        tally.empty_segment_residues += 1;
    }
    // A writable open leaves nothing but segments behind (no half-created segment files).
    let strays: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| {
                    !(name.len() == 24
                        && name.ends_with(".seg")
                        && name[..20].bytes().all(|b| b.is_ascii_digit()))
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(
        strays.is_empty(),
        "{ctx}: files other than segments after a writable open: {strays:?}"
    );
    let total = spool.total_bytes();
    // A process crash keeps what reached the page cache: every acknowledged byte survives.
    assert!(
        total >= last_acked,
        "{ctx}: acknowledged bytes were lost: the spool ends at {total}, the last ack was \
         {last_acked} ({recovery:?})"
    );
    // Beyond the last ack only whole chunks of the interrupted append may have survived.
    if total > last_acked {
        let run = claims.in_flight.unwrap_or_else(|| {
            panic!(
                "{ctx}: the spool ends at {total}, after the last ack {last_acked}, but no append \
                 was in flight"
            )
        });
        assert!(
            total <= run.end
                && ((total - run.start).is_multiple_of(CHUNK_SPLIT_BYTES as u64)
                    || total == run.end),
            "{ctx}: the spool ends at {total}, which is no chunk boundary of the interrupted \
             append {run:?}"
        );
        tally.unacked_survivor_rounds += 1;
        tally.unacked_survivor_bytes += total - last_acked;
    }
    for &run in &claims.acked {
        model.push(run);
    }
    if let Some(run) = claims.in_flight
        && total > run.start
    {
        model.push(Run {
            end: total.min(run.end),
            ..run
        });
    }
    assert_eq!(model.total(), total, "{ctx}: model and spool totals");

    let retained_from = spool.retained_from();
    assert!(
        retained_from >= tally.retained_from && retained_from <= total,
        "{ctx}: retained_from {retained_from} (was {}; total {total})",
        tally.retained_from
    );
    if scenario.options.retention_bytes >= total {
        assert_eq!(retained_from, 0, "{ctx}: nothing was due for deletion");
    } else {
        // Retention is enforced after every chunk; a kill can skip one enforcement, and one
        // segment may hold a chunk larger than `segment_bytes`. A deferring writer may leave the
        // files of as many dropped segments as it defers (older output, never a hole).
        let deferred = if scenario.defer {
            procjournal::limits::SPOOL_REMOVALS_DEFERRED_MAX as u64
                * (scenario.options.segment_bytes + 2 * CHUNK_SPLIT_BYTES as u64)
        } else {
            0
        };
        let bound = scenario.options.retention_bytes
            + scenario.options.segment_bytes
            + 2 * CHUNK_SPLIT_BYTES as u64
            + deferred;
        assert!(
            total - retained_from <= bound,
            "{ctx}: {} bytes retained, more than the {bound} the options allow",
            total - retained_from
        );
    }
    check_contents(&spool, model, rng, ctx);
    drop(spool);

    // Read-only and then writable again: both clean, same bounds, same bytes.
    let (reader, again) = Spool::open_reader(dir)
        .unwrap_or_else(|e| panic!("{ctx}: read-only open after recovery: {e}"));
    assert!(
        again.is_clean(),
        "{ctx}: a read-only open after recovery is not clean: {again:?}"
    );
    assert_eq!(
        (reader.total_bytes(), reader.retained_from()),
        (total, retained_from),
        "{ctx}: the read-only open sees other bounds"
    );
    let probe = rng.below(total + 1);
    let read = reader
        .read(probe, 5000)
        .unwrap_or_else(|e| panic!("{ctx}: reader read({probe}): {e}"));
    check_read(&read, &reader, model, probe, 5000, ctx);
    drop(reader);
    let (mut writer, again) = Spool::open_writer(dir, SPOOL_ID, scenario.options)
        .unwrap_or_else(|e| panic!("{ctx}: second writable open: {e}"));
    assert!(
        again.is_clean() && !again.torn_tail_cut,
        "{ctx}: a second writable open after recovery is not clean: {again:?}"
    );
    assert_eq!(
        (writer.total_bytes(), writer.retained_from()),
        (total, retained_from),
        "{ctx}: the second writable open sees other bounds"
    );
    // What a crashed writer left may be only in the page cache: nothing found counts as durable
    // until this handle's first checkpoint, which then covers all of it.
    assert_eq!(
        writer.durable_total(),
        0,
        "{ctx}: bytes found at open count as durable before a checkpoint"
    );
    let bounds = writer
        .checkpoint()
        .unwrap_or_else(|e| panic!("{ctx}: checkpoint after recovery: {e}"));
    assert_eq!(
        bounds,
        (retained_from, total),
        "{ctx}: the first checkpoint after recovery covers everything recovered"
    );
    tally.total_bytes = total;
    tally.retained_from = retained_from;
}

/// The segment files of `dir` with their sizes, for failure messages.
fn listing(dir: &Path) -> String {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| {
                    let len = e.metadata().map_or(u64::MAX, |m| m.len());
                    (e.file_name().to_string_lossy().into_owned(), len)
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let n = files.len();
    let shown: Vec<String> = files
        .iter()
        .skip(n.saturating_sub(4))
        .map(|(name, len)| format!("{name} ({len} bytes)"))
        .collect();
    format!("{n} files, the newest: {}", shown.join(", "))
}

fn spares_in(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".seg.tmp"))
            .count()
    })
}

fn run_scenario(scenario: &Scenario) -> Tally {
    let seed = base_seed();
    println!(
        "{}: base seed {seed} (replay with {SEED_ENV}={seed})",
        scenario.name
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("spool");
    let mut model = Model::default();
    let mut tally = Tally::default();
    for round in 0..ROUNDS {
        let ctx = format!(
            "scenario {} base seed {seed} ({SEED_ENV}={seed}) round {round}",
            scenario.name
        );
        let mut rng = XorShift::new(seed ^ mix(round.wrapping_add(1)));
        // One round in eight kills around start-up (opening, recovery, first appends); the others
        // after 1..=max acks or append intents, half of them a little later still.
        let at = if rng.below(8) == 0 {
            KillAt {
                count: 0,
                on_intent: false,
                delay: Duration::from_micros(rng.below(20_000)),
            }
        } else {
            let on_intent = rng.below(2) == 0;
            let late = rng.below(2) == 0;
            KillAt {
                count: rng.between(1, scenario.max_acks_before_kill),
                on_intent,
                delay: Duration::from_micros(match (late, on_intent) {
                    (false, _) => 0,
                    (true, true) => rng.below(500),
                    (true, false) => rng.below(2_000),
                }),
            }
        };
        let ctx = format!("{ctx} ({at:?})");
        let salt = round + 1;
        let stderr_path = tmp.path().join(format!("child-{round}.stderr"));
        let child = spawn_child(scenario, &dir, rng.next(), salt, &stderr_path);
        let lines = crash_once(child, at, &stderr_path, &ctx);
        tally.kills += 1;
        tally.spares_left += u64::from(spares_in(&dir) > 0);

        let claims = check_claims(&lines, model.total(), tally.retained_from, salt, &ctx);
        tally.acks += claims.acked.len() as u64;
        tally.acked_bytes += claims.acked.iter().map(|r| r.end - r.start).sum::<u64>();
        tally.checkpoints += claims.checkpoints;
        tally.kills_before_first_ack += u64::from(claims.acked.is_empty());
        tally.kills_mid_append += u64::from(claims.in_flight.is_some());

        verify_after_crash(
            scenario, &dir, &mut model, &claims, &mut rng, &mut tally, &ctx,
        );
        tally.rounds += 1;
    }
    println!("{}: {tally:#?}", scenario.name);
    assert_eq!(tally.kills, ROUNDS);
    assert!(
        tally.acks > 0 && tally.kills_before_first_ack < ROUNDS,
        "no round acknowledged anything: the test proved nothing"
    );
    assert!(
        tally.kills_mid_append > 0,
        "no kill interrupted an append: the test proved nothing about torn writes"
    );
    tally
}

/// Retention large enough that nothing is deleted: every byte ever acknowledged is checked after
/// every kill.
#[test]
fn sigkill_during_appends_loses_no_acknowledged_output() {
    let tally = run_scenario(&Scenario {
        name: "keep-all",
        options: SpoolOptions {
            segment_bytes: SEGMENT_BYTES,
            retention_bytes: 1 << 30,
        },
        max_acks_before_kill: 60,
        defer: false,
    });
    assert_eq!(tally.retained_from, 0);
}

/// Retention of a few segments: oldest segments are deleted all the time, kills land in the
/// middle of deletions too, and the retained window is still exact.
#[test]
fn sigkill_during_appends_and_deletions_keeps_the_retained_window_exact() {
    let tally = run_scenario(&Scenario {
        name: "retention",
        options: SpoolOptions {
            segment_bytes: SEGMENT_BYTES,
            retention_bytes: 96 * 1024,
        },
        max_acks_before_kill: 120,
        defer: false,
    });
    assert!(
        tally.retained_from > 0,
        "retention never deleted a segment: {tally:?}"
    );
}

/// The same with removals deferred to the checkpoints, as a supervisor's spool does: kills land
/// while dropped segments still wait for their removal, and while new segments are written over
/// the files of dropped ones (spares), and the files they leave are a run of older output next
/// to the window, every byte of it intact, never a hole; a reused file's old chunks are never
/// read as output.
#[test]
fn sigkill_with_deferred_removals_leaves_older_output_never_a_hole() {
    let tally = run_scenario(&Scenario {
        name: "deferred",
        options: SpoolOptions {
            segment_bytes: SEGMENT_BYTES,
            retention_bytes: 96 * 1024,
        },
        max_acks_before_kill: 120,
        defer: true,
    });
    assert!(
        tally.retained_from > 0,
        "retention never deleted a segment: {tally:?}"
    );
    assert!(
        tally.spares_left > 0,
        "no kill left a spare: no segment was written over a dropped one's file: {tally:?}"
    );
}

/// The residue of a kill between `new_segment` creating the next segment file and writing its
/// header is an empty file named after the next cursor. That is crash residue, like a torn tail:
/// a writable open must recover from it, later rotations must be able to create that segment, and
/// a reopen afterwards must be clean. (Random kills land in that window too rarely to rely on.)
#[test]
fn a_kill_between_segment_creation_and_its_header_is_crash_residue() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let options = SpoolOptions {
        segment_bytes: SEGMENT_BYTES,
        retention_bytes: 1 << 30,
    };
    let mut model = Model::default();
    let (mut spool, _) = Spool::open_writer(dir, SPOOL_ID, options).expect("open");
    let mut bytes = Vec::new();
    // Fill the first segment nearly up, so that the next append must rotate.
    for (i, len) in [6000u64, 6000, 4000].into_iter().enumerate() {
        let run = Run {
            start: spool.total_bytes(),
            end: spool.total_bytes() + len,
            stream: if i % 2 == 0 {
                Stream::Stdout
            } else {
                Stream::Stderr
            },
            salt: 1,
        };
        bytes.clear();
        content(run.salt, run.start, len, &mut bytes);
        spool.append(run.stream, &bytes).expect("append");
        model.push(run);
    }
    let total = spool.total_bytes();
    drop(spool);
    let segments = || {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(segments().len(), 1, "one segment so far");
    File::create(dir.join(format!("{total:020}.seg"))).expect("create the residue");

    let (mut spool, recovery) = Spool::open_writer(dir, SPOOL_ID, options)
        .unwrap_or_else(|e| panic!("open with a header-less newest segment: {e}"));
    assert_eq!(spool.total_bytes(), total, "{recovery:?}");
    assert!(
        recovery.bad_segments.is_empty() && recovery.torn_tail_cut,
        "the header-less newest segment is crash residue, removed by a writable open: \
         {recovery:?}, files {:?}",
        segments()
    );
    assert_eq!(segments().len(), 1, "the residue is gone");
    let mut rng = XorShift::new(7);
    check_contents(&spool, &model, &mut rng, "after the residue");
    // An append that does not fit the first segment: it must go to the segment at `total`.
    let run = Run {
        start: total,
        end: total + 2000,
        stream: Stream::Stderr,
        salt: 2,
    };
    bytes.clear();
    content(run.salt, run.start, 2000, &mut bytes);
    spool.append(run.stream, &bytes).unwrap_or_else(|e| {
        panic!(
            "the append that rotates to the segment at cursor {total} fails with a header-less \
             file of that name left by a crash: {e} (recovery was {recovery:?}, files {:?})",
            segments()
        )
    });
    model.push(run);
    check_contents(&spool, &model, &mut rng, "after the rotation");
    drop(spool);
    let (reader, again) = Spool::open_reader(dir).expect("open_reader");
    assert!(
        again.is_clean(),
        "the residue outlives the rotation: {again:?}"
    );
    check_contents(&reader, &model, &mut rng, "after reopening");
}
