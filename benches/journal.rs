//! Journal throughput and replay, each figure printed beside a baseline measured in the same run.
//!
//! Run with `cargo bench --bench journal`. Every measurement runs `ROUNDS` times, interleaved
//! (round 1 measures everything once, then round 2, ...) so that a burst of load from other work on
//! the machine hits a figure and its baseline alike; the summary gives the median and the min-max
//! spread, and each ratio is the ratio of the medians (with the spread of the per-round ratios).
//!
//! What is measured:
//! 1. Appends/s of 128-byte payloads (176-byte records) under `Sync`, `Group` and `Os`, with 1 and
//!    4 appending threads, and `Group` with 64. Durable runs last a fixed time; `Os` runs append a
//!    fixed number of events. Each run opens a fresh root with segments of the default size, 4 MiB
//!    (creating the first segment is not timed; rotations during the run are). Baselines: a
//!    `pwrite` and `fdatasync` loop of 176-byte records into a pre-zeroed file of that size, and a
//!    buffered `write` (`BufWriter`) of 176-byte records into a new file, no sync. A diagnostic `Os` x1 run into one segment big
//!    enough for every event (no rotation) shows what rotation costs.
//! 2. Replay of the 1,000,000-event journal written by the `Os` x1 run (after `sync()`, page cache
//!    warm): a `JournalReader::scan` that touches every payload, against a raw scan of the same
//!    files (`std::fs::read` of each file whole, then a walk by the length field with no checks).
//!    Also `Journal::open` (writable: recovery scan, ID index, flushes) on that journal, against a
//!    reader scan whose visitor builds an ID index like open's in a std `HashMap` (event ID to
//!    position and kind). Each of these runs twice per round (after one untimed warm-up pass) and
//!    the faster pass counts, since a single pass of ~100 ms is at the mercy of the scheduler on a
//!    shared machine.
//!
//! Each line also gives the on-CPU and runqueue-wait time of the measuring threads (from
//! `/proc/thread-self/schedstat`): wait time is time the work was ready but another process had
//! the CPU, i.e. noise from the machine rather than cost of the code. A second table repeats the
//! single-threaded figures per second of wall time minus that wait, as an estimate of what an
//! otherwise idle machine would show; the verdicts that count are those of the first table.
//!
//! `PROCJOURNAL_BENCH_ONLY` runs some parts of each round only, comma-separated: `group` (the
//! `pwrite` + `fdatasync` baseline, `Sync` x1 and `Group` x1, x4, x64: the group-commit rows and
//! their baselines), `durable` (the same and `Sync` x4), `os` (the buffered baseline, the
//! no-rotation diagnostic and `Os` x4) and `replay` (the `Os` x1 run, whose journal it replays,
//! and the replay measurements). Rows of parts that did not run are left out of the tables.
//!
//! The bench reads each segment's `header_bytes` (where its records start: 64 in a version 1
//! segment, 160 in a version 2 one), so the same file measures a version 1 build too.
//!
//! Nothing here asserts on wall-clock time; the only checks are of correctness (counts, clean
//! reports). Temp roots live under `$PROCJOURNAL_BENCH_DIR`, else Cargo's target tmp dir; the file
//! system is printed, since fdatasync on tmpfs is free and would make the durable figures
//! meaningless. `PROCJOURNAL_BENCH_QUICK=1` runs one short round, for checking the harness only.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use procjournal::journal::format::{
    self, REC_KIND_OFFSET, REC_PAYLOAD_BYTES_OFFSET, REC_SEQ_OFFSET, RecordFields,
    SEG_HEADER_BYTES_OFFSET,
};
use procjournal::journal::reader::JournalReader;
use procjournal::limits::{RECORD_HEADER_BYTES, SEGMENT_BYTES_DEFAULT, SEGMENT_HEADER_BYTES};
use procjournal::{Durability, EventId, EventKind, Journal, JournalOptions, Position};

mod common;

use common::{Res, Samples, Sched};

const PAYLOAD_BYTES: usize = 128;
const RECORD_BYTES: usize = format::record_bytes(PAYLOAD_BYTES);
const _: () = assert!(RECORD_BYTES == 176);

/// How long and how much each measurement runs.
#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    durable_run: Duration,
    os_events: u64,
    /// Timed passes per round of each replay measurement; the fastest counts.
    replay_passes: usize,
}

const FULL: Plan = Plan {
    rounds: 3,
    durable_run: Duration::from_secs(2),
    os_events: 1_000_000,
    replay_passes: 2,
};

const QUICK: Plan = Plan {
    rounds: 1,
    durable_run: Duration::from_millis(300),
    os_events: 100_000,
    replay_passes: 1,
};

/// Where records start in a segment of any version this bench may run against: after the
/// 64-byte header and, from version 2 on, the 96-byte commit area. (Written out rather than taken
/// from `procjournal::limits`, so that this file also builds against a version 1 procjournal.)
const RECORDS_OFFSET_MAX: usize = 160;

impl Plan {
    /// A segment size that holds every event of an `Os` run, so that it never rotates.
    fn no_rotation_segment_bytes(&self) -> usize {
        let bytes = RECORDS_OFFSET_MAX + self.os_events as usize * RECORD_BYTES;
        bytes.next_multiple_of(1024 * 1024)
    }
}

/// The parts of a round that run (`PROCJOURNAL_BENCH_ONLY`, see the module doc).
#[derive(Debug, Clone, Copy)]
struct Parts {
    /// The `pwrite` + `fdatasync` baseline, `Sync` x1 and the `Group` runs.
    group: bool,
    /// `Sync` x4.
    sync4: bool,
    /// The buffered baseline, the no-rotation diagnostic and `Os` x4.
    os: bool,
    /// `Os` x1 and the replay of its journal.
    replay: bool,
}

impl Parts {
    fn from_env() -> Res<Parts> {
        let Ok(only) = std::env::var("PROCJOURNAL_BENCH_ONLY") else {
            return Ok(Parts {
                group: true,
                sync4: true,
                os: true,
                replay: true,
            });
        };
        let mut parts = Parts {
            group: false,
            sync4: false,
            os: false,
            replay: false,
        };
        for part in only.split(',').map(str::trim) {
            match part {
                "group" => parts.group = true,
                "durable" => (parts.group, parts.sync4) = (true, true),
                "os" => parts.os = true,
                "replay" => parts.replay = true,
                other => {
                    return Err(format!(
                        "PROCJOURNAL_BENCH_ONLY: unknown part {other:?} (group, durable, os, replay)"
                    )
                    .into());
                }
            }
        }
        Ok(parts)
    }
}

/// Events counted over a measured time.
#[derive(Debug, Clone)]
struct Run {
    events: u64,
    elapsed: Duration,
    /// Sorted latencies of each append (or each pwrite+fdatasync), in nanoseconds; empty for Os.
    latencies_ns: Vec<u64>,
    sched: Sched,
}

impl Run {
    fn per_sec(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64()
    }

    /// Events per second of wall time minus the time the (single) measuring thread was ready but
    /// waiting for a CPU: an estimate of the rate on an otherwise idle machine.
    fn per_sec_unqueued(&self) -> f64 {
        self.events as f64 / unqueued_secs(self.elapsed, self.sched)
    }

    /// The `q` quantile of the latencies, in microseconds.
    fn latency_us(&self, q: f64) -> Option<f64> {
        let last = self.latencies_ns.len().checked_sub(1)?;
        let at = ((last as f64) * q).round() as usize;
        Some(self.latencies_ns[at.min(last)] as f64 / 1e3)
    }

    fn report(&self, name: &str) {
        let latency = match (self.latency_us(0.5), self.latency_us(0.99)) {
            (Some(p50), Some(p99)) => format!("latency p50 {p50:.0} us, p99 {p99:.0} us; "),
            _ => String::new(),
        };
        println!(
            "  {name:<30} {:>9} events/s  ({} events in {:.3} s; {latency}{})",
            num(self.per_sec()),
            self.events,
            self.elapsed.as_secs_f64(),
            self.sched.describe()
        );
    }
}

/// Wall time minus runqueue wait, in seconds (never below the on-CPU time).
fn unqueued_secs(elapsed: Duration, sched: Sched) -> f64 {
    let wall = elapsed.as_secs_f64();
    let cpu = sched.cpu_ns as f64 / 1e9;
    (wall - sched.wait_ns as f64 / 1e9).max(cpu).max(1e-9)
}

fn elapsed_ns(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[derive(Debug, Clone, Copy)]
enum Limit {
    For(Duration),
    Events(u64),
}

/// A unique ID per (thread, counter), so that ID allocation itself is not measured.
fn event_id(thread: usize, n: u64) -> EventId {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&(thread as u64 + 1).to_le_bytes());
    bytes[8..].copy_from_slice(&n.to_le_bytes());
    EventId::from_bytes(bytes)
}

/// A real 176-byte record (header, 128-byte payload), as the baselines write it.
fn sample_record() -> Vec<u8> {
    let payload = [0x5au8; PAYLOAD_BYTES];
    let mut out = vec![0u8; RECORD_BYTES];
    format::encode_record(
        &RecordFields {
            kind: 1,
            codec_version: 1,
            seq: 1,
            event_id: event_id(0, 0).as_bytes(),
            prev_crc: 0,
            payload: &payload,
        },
        &mut out,
    );
    out
}

/// Appends 128-byte events from `threads` threads into a journal freshly opened at `root`.
/// The journal's open (creating its first segment) is not timed; the final `sync()` is not
/// timed either (it only matters for `Os`, whose appends do not wait for it).
fn journal_run(
    root: &Path,
    durability: Durability,
    segment_bytes: usize,
    threads: usize,
    limit: Limit,
) -> Res<Run> {
    let options = JournalOptions {
        durability,
        segment_bytes,
    };
    let (journal, report) = Journal::open(root, options)?;
    if !report.is_clean() || report.records != 0 {
        return Err(format!("fresh root is not empty and clean: {report:?}").into());
    }
    let kind = EventKind::new(1).ok_or("kind 1 is non-zero")?;
    let timed = durability != Durability::Os;
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    let run = std::thread::scope(|s| -> Res<Run> {
        let mut handles = Vec::with_capacity(threads);
        for t in 0..threads {
            let (journal, stop, barrier) = (&journal, &stop, &barrier);
            let quota = match limit {
                Limit::For(_) => u64::MAX,
                Limit::Events(total) => {
                    let (t, threads) = (t as u64, threads as u64);
                    total / threads + u64::from(t < total % threads)
                }
            };
            handles.push(s.spawn(move || -> Res<(u64, Vec<u64>, Sched)> {
                let mut payload = [0xa5u8; PAYLOAD_BYTES];
                let mut latencies = Vec::new();
                barrier.wait();
                let sched = Sched::now();
                let mut n = 0u64;
                while n < quota && !stop.load(Ordering::Relaxed) {
                    payload[..8].copy_from_slice(&n.to_le_bytes());
                    let started = timed.then(Instant::now);
                    let appended = journal.append(event_id(t, n), kind, 1, &payload)?;
                    if let Some(started) = started {
                        latencies.push(elapsed_ns(started));
                    }
                    if !appended.written {
                        return Err("a fresh event ID was reported as a duplicate".into());
                    }
                    n += 1;
                }
                Ok((n, latencies, Sched::since(sched)))
            }));
        }
        barrier.wait();
        let start = Instant::now();
        if let Limit::For(duration) = limit {
            std::thread::sleep(duration);
            stop.store(true, Ordering::Relaxed);
        }
        let mut events = 0;
        let mut latencies_ns = Vec::new();
        let mut sched = Sched::default();
        for handle in handles {
            let (n, latencies, thread_sched) =
                handle.join().map_err(|_| "appender thread panicked")??;
            events += n;
            latencies_ns.extend(latencies);
            sched.add(thread_sched);
        }
        let elapsed = start.elapsed();
        latencies_ns.sort_unstable();
        Ok(Run {
            events,
            elapsed,
            latencies_ns,
            sched,
        })
    })?;
    if journal.last_seq() != run.events {
        return Err(format!(
            "journal holds {} records, appenders counted {}",
            journal.last_seq(),
            run.events
        )
        .into());
    }
    journal.sync()?;
    Ok(run)
}

/// Baseline (a): `pwrite` of one 176-byte record + `fdatasync`, in a loop, into a pre-zeroed file
/// of segment size (zeroes written and synced first, as the journal's segments are).
fn fdatasync_loop(dir: &Path, duration: Duration) -> Res<Run> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(dir.join("fdatasync-baseline"))?;
    let zeroes = vec![0u8; 1024 * 1024];
    for chunk in 0..SEGMENT_BYTES_DEFAULT / zeroes.len() {
        file.write_all_at(&zeroes, (chunk * zeroes.len()) as u64)?;
    }
    file.sync_all()?;
    File::open(dir)?.sync_all()?;
    let record = sample_record();
    let mut offset = SEGMENT_HEADER_BYTES;
    let mut events = 0u64;
    let mut latencies_ns = Vec::new();
    let sched = Sched::now();
    let start = Instant::now();
    while start.elapsed() < duration {
        if offset + RECORD_BYTES > SEGMENT_BYTES_DEFAULT {
            offset = SEGMENT_HEADER_BYTES;
        }
        let started = Instant::now();
        file.write_all_at(&record, offset as u64)?;
        file.sync_data()?;
        latencies_ns.push(elapsed_ns(started));
        offset += RECORD_BYTES;
        events += 1;
    }
    let elapsed = start.elapsed();
    let sched = Sched::since(sched);
    latencies_ns.sort_unstable();
    Ok(Run {
        events,
        elapsed,
        latencies_ns,
        sched,
    })
}

/// Baseline (b): buffered `write` (std `BufWriter`, 8 KiB) of 176-byte records into a new file,
/// no sync; the final flush of the buffer into the page cache is timed.
fn buffered_write(dir: &Path, events: u64) -> Res<Run> {
    let file = File::create_new(dir.join("buffered-baseline"))?;
    let mut out = BufWriter::new(file);
    let mut record = sample_record();
    let sched = Sched::now();
    let start = Instant::now();
    for n in 0..events {
        record[REC_SEQ_OFFSET..REC_SEQ_OFFSET + 8].copy_from_slice(&n.to_le_bytes());
        out.write_all(&record)?;
    }
    out.flush()?;
    let elapsed = start.elapsed();
    let sched = Sched::since(sched);
    drop(out);
    Ok(Run {
        events,
        elapsed,
        latencies_ns: Vec::new(),
        sched,
    })
}

/// What a scan visited, so that the work cannot be optimised away and both scans can be compared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Visited {
    records: u64,
    payload_bytes: u64,
    xor: u8,
}

impl Visited {
    fn visit(&mut self, payload: &[u8]) {
        self.records += 1;
        self.payload_bytes += payload.len() as u64;
        self.xor ^= payload.last().copied().unwrap_or(0);
    }
}

/// One timed single-threaded measurement.
#[derive(Debug, Clone, Copy)]
struct Timed<T> {
    value: T,
    elapsed: Duration,
    sched: Sched,
}

fn timed<T>(f: impl FnOnce() -> Res<T>) -> Res<Timed<T>> {
    let sched = Sched::now();
    let start = Instant::now();
    let value = f()?;
    let elapsed = start.elapsed();
    Ok(Timed {
        value: std::hint::black_box(value),
        elapsed,
        sched: Sched::since(sched),
    })
}

/// The fastest of `passes` runs of `f`.
fn best_of<T>(passes: usize, mut f: impl FnMut() -> Res<Timed<T>>) -> Res<Timed<T>> {
    let mut best = f()?;
    for _ in 1..passes {
        let next = f()?;
        if next.elapsed < best.elapsed {
            best = next;
        }
    }
    Ok(best)
}

fn segment_files(dir: &Path) -> Res<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "log"));
    files.sort();
    Ok(files)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

/// Baseline for replay: read each segment file whole with `std::fs::read` and walk the records by
/// their length field, with no checksum, sequence or chain checks; stop at the first zero kind.
fn raw_scan(journal_dir: &Path) -> Res<Visited> {
    let mut visited = Visited::default();
    for path in segment_files(journal_dir)? {
        let bytes = std::fs::read(&path)?;
        if bytes.len() < SEGMENT_HEADER_BYTES {
            return Err(format!("{}: shorter than a segment header", path.display()).into());
        }
        // Records start at the segment's `header_bytes`: 64 in version 1, 160 in version 2.
        let mut at = usize::from(u16_at(&bytes, SEG_HEADER_BYTES_OFFSET));
        while at + RECORD_HEADER_BYTES <= bytes.len() && u16_at(&bytes, at + REC_KIND_OFFSET) != 0 {
            let payload_bytes = u32_at(&bytes, at + REC_PAYLOAD_BYTES_OFFSET) as usize;
            let end = at + RECORD_HEADER_BYTES + payload_bytes;
            if end > bytes.len() {
                break;
            }
            visited.visit(&bytes[at + RECORD_HEADER_BYTES..end]);
            at += format::record_bytes(payload_bytes);
        }
    }
    Ok(visited)
}

/// The figure: a full read-only scan through the library (every checksum and the chain checked).
fn reader_scan(root: &Path) -> Res<Visited> {
    let reader = JournalReader::open(root)?;
    let mut visited = Visited::default();
    let report = reader.scan(1, |r| visited.visit(r.payload))?;
    if !report.is_clean() {
        return Err(format!("replayed journal is not clean: {report:?}").into());
    }
    Ok(visited)
}

/// Baseline for `Journal::open`: a reader scan whose visitor builds an ID index like the one the
/// writable open builds (event ID to position and kind, one entry lookup per record), in a plain
/// std `HashMap` (SipHash), so that changes to the journal's own index show against it.
fn indexed_scan(root: &Path) -> Res<usize> {
    let reader = JournalReader::open(root)?;
    let mut ids: HashMap<[u8; 16], (Position, u16)> = HashMap::new();
    let mut duplicates: Vec<(u64, u64)> = Vec::new();
    reader.scan(1, |r| match ids.entry(r.event_id.as_bytes()) {
        Entry::Occupied(first) => duplicates.push((first.get().0.seq, r.position.seq)),
        Entry::Vacant(slot) => {
            slot.insert((r.position, r.kind));
        }
    })?;
    if !duplicates.is_empty() {
        return Err(format!("duplicate IDs in the replayed journal: {duplicates:?}").into());
    }
    Ok(ids.len())
}

/// `Journal::open` for writing: lock, recovery scan, ID index, flushes, mapping of the active
/// segment. Dropping the journal is not timed.
fn writable_open(root: &Path, expect_records: u64) -> Res<Timed<()>> {
    let mut journal = None;
    let t = timed(|| {
        let options = JournalOptions {
            durability: Durability::Os,
            segment_bytes: SEGMENT_BYTES_DEFAULT,
        };
        let (opened, report) = Journal::open(root, options)?;
        journal = Some(opened);
        if !report.is_clean() || report.records != expect_records {
            return Err(format!("reopened journal: {report:?}").into());
        }
        Ok(())
    })?;
    drop(journal);
    Ok(t)
}

/// Human number: 12.3k, 4.56M; one decimal below 100.
fn num(v: f64) -> String {
    common::human_number(v, 1)
}

fn with_range(s: &Samples, unit: &str) -> String {
    format!(
        "{}{unit} [{}-{}]",
        num(s.median()),
        num(s.min()),
        num(s.max())
    )
}

#[derive(Debug, Clone, Copy)]
enum Target {
    /// The figure's median over the baseline's median must be at least this.
    Ratio(f64),
    /// The figure's median must be at least this, in its own unit.
    Absolute(f64),
    None,
}

#[derive(Debug)]
struct Row {
    figure: String,
    value: Samples,
    unit: &'static str,
    baseline: &'static str,
    base: Samples,
    target: Target,
}

impl Row {
    fn new(figure: &str, value: &Samples, unit: &'static str) -> Row {
        Row {
            figure: figure.to_owned(),
            value: value.clone(),
            unit,
            baseline: "",
            base: Samples::default(),
            target: Target::None,
        }
    }
    fn against(mut self, baseline: &'static str, base: &Samples) -> Row {
        self.baseline = baseline;
        self.base = base.clone();
        self
    }
    fn target(mut self, target: Target) -> Row {
        self.target = target;
        self
    }
    fn ratio(&self) -> f64 {
        self.value.median() / self.base.median()
    }
    fn target_text(&self) -> String {
        match self.target {
            Target::Ratio(r) => format!(">= {r} x baseline"),
            Target::Absolute(a) => format!(">= {}{}", num(a), self.unit),
            Target::None => "-".to_owned(),
        }
    }
    fn verdict(&self) -> &'static str {
        let met = match self.target {
            Target::Ratio(r) => self.ratio() >= r,
            Target::Absolute(a) => self.value.median() >= a,
            Target::None => return "-",
        };
        if met { "met" } else { "NOT MET" }
    }
}

fn print_table(rows: &[Row]) {
    let header = [
        "figure",
        "median [min-max]",
        "baseline",
        "baseline median [min-max]",
        "ratio [per round]",
        "target",
        "verdict",
    ];
    // A row whose part did not run (PROCJOURNAL_BENCH_ONLY) has no samples: left out.
    let cells: Vec<[String; 7]> = rows
        .iter()
        .filter(|r| !r.value.median().is_nan() && !r.base.median().is_nan())
        .map(|r| {
            [
                r.figure.clone(),
                with_range(&r.value, r.unit),
                r.baseline.to_owned(),
                with_range(&r.base, r.unit),
                common::ratio_cell(&r.value, &r.base),
                r.target_text(),
                r.verdict().to_owned(),
            ]
        })
        .collect();
    common::print_cells(header, &cells);
}

#[derive(Debug, Default)]
struct Results {
    fdatasync_loop: Samples,
    sync1: Samples,
    sync4: Samples,
    group1: Samples,
    group4: Samples,
    group64: Samples,
    buffered: Samples,
    os1: Samples,
    os4: Samples,
    os1_no_rotation: Samples,
    raw_scan_eps: Samples,
    raw_scan_mbps: Samples,
    replay_eps: Samples,
    replay_mbps: Samples,
    replay_ms: Samples,
    indexed_scan_ms: Samples,
    open_ms: Samples,
    /// Runqueue wait over wall time of each single-threaded replay measurement, in percent.
    wait_pct: Samples,
    /// The single-threaded figures again, per second of wall time minus runqueue wait.
    unqueued: Unqueued,
}

#[derive(Debug, Default)]
struct Unqueued {
    fdatasync_loop: Samples,
    sync1: Samples,
    group1: Samples,
    buffered: Samples,
    os1: Samples,
    os1_no_rotation: Samples,
    raw_scan_eps: Samples,
    replay_eps: Samples,
}

/// Prints one replay measurement; returns (wall seconds, wall minus runqueue wait seconds).
fn report_timed<T>(name: &str, t: &Timed<T>, events: u64, r: &mut Results) -> (f64, f64) {
    let secs = t.elapsed.as_secs_f64();
    println!(
        "  {name:<30} {:>9} events/s  ({:.1} ms; {})",
        num(events as f64 / secs),
        secs * 1e3,
        t.sched.describe()
    );
    r.wait_pct.push(t.sched.wait_ns as f64 / 1e9 / secs * 100.0);
    (secs, unqueued_secs(t.elapsed, t.sched))
}

/// One durable run of a round: its name, policy and threads, where its figure goes (and its
/// runqueue-corrected figure, for single-threaded runs), and whether its part runs.
type DurableCase<'a> = (
    &'a str,
    Durability,
    usize,
    &'a mut Samples,
    Option<&'a mut Samples>,
    bool,
);

fn round(base: &Path, plan: Plan, parts: Parts, r: &mut Results) -> Res<()> {
    let durable = Limit::For(plan.durable_run);
    let segment = SEGMENT_BYTES_DEFAULT;
    if parts.group {
        let dir = tempfile::tempdir_in(base)?;
        let run = fdatasync_loop(dir.path(), plan.durable_run)?;
        run.report("baseline pwrite+fdatasync");
        r.fdatasync_loop.push(run.per_sec());
        r.unqueued.fdatasync_loop.push(run.per_sec_unqueued());
    }
    let durable_cases: [DurableCase<'_>; 5] = [
        (
            "Sync  x1",
            Durability::Sync,
            1,
            &mut r.sync1,
            Some(&mut r.unqueued.sync1),
            parts.group,
        ),
        (
            "Sync  x4",
            Durability::Sync,
            4,
            &mut r.sync4,
            None,
            parts.sync4,
        ),
        (
            "Group x1",
            Durability::Group,
            1,
            &mut r.group1,
            Some(&mut r.unqueued.group1),
            parts.group,
        ),
        (
            "Group x4",
            Durability::Group,
            4,
            &mut r.group4,
            None,
            parts.group,
        ),
        (
            "Group x64",
            Durability::Group,
            64,
            &mut r.group64,
            None,
            parts.group,
        ),
    ];
    for (name, durability, threads, samples, unqueued, runs) in durable_cases {
        if !runs {
            continue;
        }
        let dir = tempfile::tempdir_in(base)?;
        let run = journal_run(dir.path(), durability, segment, threads, durable)?;
        run.report(name);
        samples.push(run.per_sec());
        if let Some(unqueued) = unqueued {
            unqueued.push(run.per_sec_unqueued());
        }
    }
    let os = Limit::Events(plan.os_events);
    if parts.os {
        {
            let dir = tempfile::tempdir_in(base)?;
            let run = buffered_write(dir.path(), plan.os_events)?;
            run.report("baseline buffered write");
            r.buffered.push(run.per_sec());
            r.unqueued.buffered.push(run.per_sec_unqueued());
        }
        {
            let dir = tempfile::tempdir_in(base)?;
            let big = plan.no_rotation_segment_bytes();
            let run = journal_run(dir.path(), Durability::Os, big, 1, os)?;
            run.report(&format!("diag: Os x1, {} MiB segment", big >> 20));
            r.os1_no_rotation.push(run.per_sec());
            r.unqueued.os1_no_rotation.push(run.per_sec_unqueued());
        }
        {
            let dir = tempfile::tempdir_in(base)?;
            let run = journal_run(dir.path(), Durability::Os, segment, 4, os)?;
            run.report("Os    x4");
            r.os4.push(run.per_sec());
        }
    }
    if !parts.replay {
        return Ok(());
    }
    // The Os x1 journal is kept for the replay measurements (`journal_run` synced it).
    let replay_root = tempfile::tempdir_in(base)?;
    let root = replay_root.path();
    let run = journal_run(root, Durability::Os, segment, 1, os)?;
    run.report("Os    x1");
    r.os1.push(run.per_sec());
    r.unqueued.os1.push(run.per_sec_unqueued());

    let journal_dir = root.join("journal");
    let files = segment_files(&journal_dir)?;
    let file_bytes: u64 = files
        .iter()
        .map(|f| f.metadata().map(|m| m.len()))
        .sum::<Result<u64, _>>()?;
    println!(
        "  replay of {} events: {} segment files, {:.1} MB",
        plan.os_events,
        files.len(),
        file_bytes as f64 / 1e6
    );
    // One untimed pass of each, so that no timed pass pays for coming first after the writes.
    raw_scan(&journal_dir)?;
    reader_scan(root)?;
    let passes = plan.replay_passes;
    let raw = best_of(passes, || timed(|| raw_scan(&journal_dir)))?;
    let replayed = best_of(passes, || timed(|| reader_scan(root)))?;
    let indexed = best_of(passes, || timed(|| indexed_scan(root)))?;
    let open = best_of(passes, || writable_open(root, plan.os_events))?;
    if raw.value != replayed.value || replayed.value.records != plan.os_events {
        return Err(format!(
            "scans disagree: raw {:?}, reader {:?}",
            raw.value, replayed.value
        )
        .into());
    }
    if indexed.value as u64 != plan.os_events {
        return Err(format!("ID index holds {} events", indexed.value).into());
    }
    let events = plan.os_events;
    let record_mb = events as f64 * RECORD_BYTES as f64 / 1e6;
    let (raw_secs, raw_unqueued) = report_timed("baseline raw scan", &raw, events, r);
    let (replay_secs, replay_unqueued) = report_timed("JournalReader::scan", &replayed, events, r);
    let (indexed_secs, _) = report_timed("baseline scan + std ID index", &indexed, events, r);
    let (open_secs, _) = report_timed("Journal::open (writable)", &open, events, r);
    r.unqueued.raw_scan_eps.push(events as f64 / raw_unqueued);
    r.unqueued.replay_eps.push(events as f64 / replay_unqueued);
    r.raw_scan_eps.push(events as f64 / raw_secs);
    r.raw_scan_mbps.push(record_mb / raw_secs);
    r.replay_eps.push(events as f64 / replay_secs);
    r.replay_mbps.push(record_mb / replay_secs);
    r.replay_ms.push(replay_secs * 1e3);
    r.indexed_scan_ms.push(indexed_secs * 1e3);
    r.open_ms.push(open_secs * 1e3);
    Ok(())
}

fn summary_rows(r: &Results, plan: Plan) -> Vec<Row> {
    let fdatasync = "pwrite+fdatasync loop";
    let sync1 = "Sync x1 (this run)";
    let buffered = "buffered write";
    let raw = "raw scan (read + length walk)";
    let no_rotation = format!(
        "diag: Os x1, {} MiB segment",
        plan.no_rotation_segment_bytes() >> 20
    );
    let open = format!("Journal::open ms ({} events)", num(plan.os_events as f64));
    let segmented = format!(
        "Os x1 appends/s ({} MiB segments)",
        SEGMENT_BYTES_DEFAULT >> 20
    );
    vec![
        Row::new("Sync x1 appends/s", &r.sync1, "/s")
            .against(fdatasync, &r.fdatasync_loop)
            .target(Target::Ratio(0.8)),
        Row::new("Sync x4 appends/s", &r.sync4, "/s").against(fdatasync, &r.fdatasync_loop),
        Row::new("Group x1 appends/s", &r.group1, "/s").against(fdatasync, &r.fdatasync_loop),
        Row::new("Group x4 appends/s", &r.group4, "/s").against(fdatasync, &r.fdatasync_loop),
        Row::new("Group x4 appends/s", &r.group4, "/s")
            .against(sync1, &r.sync1)
            .target(Target::Ratio(3.0)),
        Row::new("Group x64 appends/s", &r.group64, "/s").against(fdatasync, &r.fdatasync_loop),
        Row::new("Group x64 appends/s", &r.group64, "/s")
            .against(sync1, &r.sync1)
            .target(Target::Ratio(20.0)),
        Row::new("Os x1 appends/s", &r.os1, "/s")
            .against(buffered, &r.buffered)
            .target(Target::Absolute(1e6)),
        Row::new("Os x4 appends/s", &r.os4, "/s")
            .against(buffered, &r.buffered)
            .target(Target::Absolute(1e6)),
        Row::new(&no_rotation, &r.os1_no_rotation, "/s").against(buffered, &r.buffered),
        Row::new(&segmented, &r.os1, "/s").against("diag: same, no rotation", &r.os1_no_rotation),
        Row::new("replay events/s", &r.replay_eps, "/s")
            .against(raw, &r.raw_scan_eps)
            .target(Target::Absolute(5e6)),
        Row::new("replay MB/s (176 B records)", &r.replay_mbps, "").against(raw, &r.raw_scan_mbps),
        Row::new(&open, &r.open_ms, "").against("JournalReader::scan ms", &r.replay_ms),
        Row::new(&open, &r.open_ms, "")
            .against("scan + std HashMap ID index ms", &r.indexed_scan_ms),
    ]
}

/// The single-threaded figures per second of wall time minus runqueue wait: what they would
/// roughly be if no other process had wanted the CPU. For reading the noise, not for verdicts.
fn unqueued_rows(u: &Unqueued, plan: Plan) -> Vec<Row> {
    let no_rotation = format!(
        "diag: Os x1, {} MiB segment",
        plan.no_rotation_segment_bytes() >> 20
    );
    vec![
        Row::new("Sync x1 appends/s", &u.sync1, "/s")
            .against("pwrite+fdatasync loop", &u.fdatasync_loop)
            .target(Target::Ratio(0.8)),
        Row::new("Group x1 appends/s", &u.group1, "/s")
            .against("pwrite+fdatasync loop", &u.fdatasync_loop),
        Row::new("Os x1 appends/s", &u.os1, "/s")
            .against("buffered write", &u.buffered)
            .target(Target::Absolute(1e6)),
        Row::new(&no_rotation, &u.os1_no_rotation, "/s").against("buffered write", &u.buffered),
        Row::new("replay events/s", &u.replay_eps, "/s")
            .against("raw scan (read + length walk)", &u.raw_scan_eps)
            .target(Target::Absolute(5e6)),
    ]
}

fn main() -> Res<()> {
    let plan = common::plan(FULL, QUICK);
    let parts = Parts::from_env()?;
    let base = common::bench_dir()?;
    common::print_file_system(
        &base,
        "roots",
        "makes fdatasync free; the Sync/Group figures mean nothing",
    );
    println!(
        "payload {PAYLOAD_BYTES} B, record {RECORD_BYTES} B, segment {} MiB; {} rounds; durable runs {:.1} s; Os runs {} events; {} available CPUs",
        SEGMENT_BYTES_DEFAULT >> 20,
        plan.rounds,
        plan.durable_run.as_secs_f64(),
        plan.os_events,
        common::available_cpus()
    );
    let mut r = Results::default();
    let all = Instant::now();
    for i in 0..plan.rounds {
        common::print_round(i, plan.rounds);
        round(&base, plan, parts, &mut r)?;
    }

    println!();
    println!(
        "summary: median over {} rounds [min-max]; ratio = median / baseline median [per-round ratios]",
        plan.rounds
    );
    print_table(&summary_rows(&r, plan));
    println!();
    println!(
        "noise-corrected estimate, single-threaded figures only: events per second of wall time minus the measuring thread's runqueue wait (informative; the verdicts above are the ones that count)"
    );
    print_table(&unqueued_rows(&r.unqueued, plan));
    println!();
    let noise: Vec<String> = [
        ("pwrite+fdatasync loop", &r.fdatasync_loop),
        ("Sync x1", &r.sync1),
        ("Sync x4", &r.sync4),
        ("Group x1", &r.group1),
        ("Group x4", &r.group4),
        ("Group x64", &r.group64),
        ("buffered write", &r.buffered),
        ("Os x1", &r.os1),
        ("Os x4", &r.os4),
        ("raw scan", &r.raw_scan_eps),
        ("replay", &r.replay_eps),
        ("Journal::open", &r.open_ms),
    ]
    .iter()
    .filter(|(_, s)| !s.0.is_empty())
    .map(|(name, s)| format!("{name} {:.0}%", s.spread_pct()))
    .collect();
    println!("noise, (max-min)/median: {}", noise.join(", "));
    if parts.replay {
        println!(
            "runqueue wait during the single-threaded replay passes: median {:.0}% of wall time [{:.0}-{:.0}%]",
            r.wait_pct.median(),
            r.wait_pct.min(),
            r.wait_pct.max()
        );
    }
    common::print_total_time(all);
    Ok(())
}
