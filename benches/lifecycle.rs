//! Lifecycle replay: 1,000,000 lifecycle events folded into manifests, beside the raw journal scan
//! of the same files measured in the same run.
//!
//! Run with `cargo bench --bench lifecycle`. Two journals of 1,000,000 events each, one per
//! workload mix, written through `Lifecycle::append` under `Durability::Os` and then `sync()`ed:
//! - short jobs: 100,000 processes of 10 events (Registered, Running, 6 OutputCheckpoints,
//!   Terminal, CompletionNotified); registrations, the costliest events to fold, are 1 in 10;
//! - long jobs: 10,000 processes of 100 events (96 checkpoints: the supervisor records one a
//!   second while output grows, so about a minute and a half of steady output).
//!
//! Processes overlap as a supervisor would see them: 100 at a time, each phase of the 100
//! interleaved. Event IDs are allocated as the supervisor allocates them (`EventId::new_v7`, in
//! time order): a registration allocates the handle and its later steps' IDs up front, every other
//! event takes a fresh ID when it is appended.
//!
//! Figures, each measured `ROUNDS` times, interleaved (round 1 measures everything once, then
//! round 2, ...) so that a burst of load from other work hits a figure and its baseline alike:
//! - baseline: `JournalReader::scan` with a visitor that only touches the payload (every checksum
//!   and the chain are still checked): the cost of reading the journal at all;
//! - scan + decode: the same scan, decoding each payload into a `LifecycleEvent` (diagnostic);
//! - replay: the same scan feeding a `Replayer` (decode and validate every event, fold it into its
//!   manifest): replay alone;
//! - `Journal::open` (diagnostic): recovery and the event-ID index, no replay;
//! - `Lifecycle::open`: what a host pays at start-up: recovery (which also builds the journal's
//!   event-ID index) and replay in one pass, plus taking the root's lock.
//!
//! The target is replay >= 0.5 x the raw scan, in events/s, for each mix. The report gives
//! the median and the min-max spread of each figure and the ratio of the medians (with the
//! per-round ratios). Nothing asserts on wall-clock time; the only checks are of correctness
//! (counts, clean reports, every manifest terminal and notified).
//!
//! Temp roots live under `$PROCJOURNAL_BENCH_DIR`, else Cargo's target tmp dir.
//! `PROCJOURNAL_BENCH_QUICK=1` runs one round on 100,000 events a mix, for checking the harness
//! only; `PROCJOURNAL_BENCH_ONLY=replay` times only the raw scan and replay, round after round
//! (`PROCJOURNAL_BENCH_ROUNDS` sets how many), for profiling it.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use procjournal::journal::reader::JournalReader;
use procjournal::lifecycle::event::{
    CaptureStatus, CommandSpec, CompletionNotified, CursorBounds, ExitStatus, IdentityWitness,
    Limits, OutputCheckpoint, Registered, Running, Terminal, derived,
};
use procjournal::lifecycle::{
    Handle, Lifecycle, LifecycleEvent, LifecycleIds, ManifestStore, Replayer, State,
};
use procjournal::limits::SEGMENT_BYTES_DEFAULT;
use procjournal::{Durability, EventId, Journal, JournalOptions};

mod common;

use common::{Res, Samples, Sched};

/// Wall time and this thread's on-CPU time (user + system, from `/proc/thread-self/schedstat`) of
/// one measurement. The machine running this may be shared: on-CPU time leaves out the time spent
/// waiting for a core, so its ratios stay meaningful when wall-clock figures are noisy.
#[derive(Debug, Clone, Copy)]
struct Timing {
    wall: Duration,
    cpu: Duration,
}

struct Clock {
    wall: Instant,
    sched: Sched,
}

impl Clock {
    /// Starts the clocks, after letting the allocator settle: a large allocation makes glibc
    /// consolidate the small chunks freed by the previous measurement (dropping a store of
    /// 100,000 manifests), which would otherwise be charged to whichever figure comes next.
    fn start() -> Clock {
        drop(std::hint::black_box(Vec::<u8>::with_capacity(1 << 16)));
        Clock {
            wall: Instant::now(),
            sched: Sched::now(),
        }
    }
    fn stop(&self) -> Timing {
        let wall = self.wall.elapsed();
        let cpu = Duration::from_nanos(Sched::since(self.sched).cpu_ns);
        Timing { wall, cpu }
    }
}

/// Processes live at the same time while the journal is written.
const CONCURRENT: u64 = 100;

/// A workload: how many lifecycle events each process leaves in the journal. Every process
/// registers, runs, checkpoints its output `events - 4` times, ends and is notified; the
/// supervisor checkpoints once a second while output grows, so `events` is roughly how many
/// seconds a process that writes steadily runs.
#[derive(Debug, Clone, Copy)]
struct Mix {
    name: &'static str,
    events_per_process: u64,
}

const MIXES: [Mix; 2] = [
    Mix {
        name: "short jobs: 10 events a process (6 checkpoints)",
        events_per_process: 10,
    },
    Mix {
        name: "long jobs: 100 events a process (96 checkpoints)",
        events_per_process: 100,
    },
];

#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    events: u64,
}

const FULL: Plan = Plan {
    rounds: 3,
    events: 1_000_000,
};

const QUICK: Plan = Plan {
    rounds: 1,
    events: 100_000,
};

fn options() -> JournalOptions {
    JournalOptions {
        durability: Durability::Os,
        segment_bytes: SEGMENT_BYTES_DEFAULT,
    }
}

/// The `n`-th ID allocated while the journal is written, laid out as a UUIDv7 is (the high bits
/// count up with allocation time, then the version, the variant and bits that look random), so
/// that, as with the supervisor's `EventId::new_v7`, an ID allocated later sorts after every ID
/// allocated before it.
fn v7(n: u64) -> EventId {
    let high = (0x0190_0000_0000u128 + u128::from(n)) << 80 | 0x7000u128 << 64;
    let low = u128::from(0x8000_0000_0000_0000 | (n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 2));
    EventId(uuid::Uuid::from_u128(high | low))
}

/// Allocates IDs in order, as the supervisor does: a registration allocates the handle and the
/// IDs of its later steps up front, every other event takes a fresh ID when it is appended.
#[derive(Debug, Default)]
struct Ids {
    next: u64,
}

impl Ids {
    fn fresh(&mut self) -> EventId {
        self.next += 1;
        v7(self.next)
    }
}

/// What a registration allocated for one process.
#[derive(Debug, Clone, Copy)]
struct Allocated {
    handle: Handle,
    ids: LifecycleIds,
}

fn command(p: u64) -> CommandSpec {
    CommandSpec {
        program: "/usr/bin/cargo".into(),
        args: vec![
            "test".into(),
            "--workspace".into(),
            "--".into(),
            format!("shard-{}", p % 16),
        ],
        cwd: format!("/home/ci/builds/repo-{}", p % 1000),
        env_overrides: vec![
            ("RUST_LOG".into(), "info".into()),
            ("CARGO_TARGET_DIR".into(), "/home/ci/target".into()),
        ],
        labels: BTreeMap::from([
            ("job".into(), format!("build-{p}")),
            ("pipeline".into(), "nightly".into()),
        ]),
        limits: Limits {
            wall_clock_ms: Some(3_600_000),
            idle_ms: Some(600_000),
            output_retention_bytes: Some(64 << 20),
        },
        owner: "ci@runner-7".into(),
    }
}

/// The `phase`-th event (0..events) of process `p`, with its event ID; phase 0 allocates.
fn event(
    p: u64,
    phase: u64,
    events: u64,
    ids: &mut Ids,
    allocated: &mut Option<Allocated>,
) -> (EventId, LifecycleEvent) {
    let at_unix_ms = 1_700_000_000_000 + p * 10 + phase;
    let bounds = |k: u64| CursorBounds {
        retained_from: k * 1024,
        total_bytes: k * 65_536 + p % 512,
    };
    let a = match *allocated {
        Some(a) => a,
        None => {
            let a = Allocated {
                handle: Handle(ids.fresh()),
                ids: LifecycleIds {
                    running: ids.fresh(),
                    terminal: ids.fresh(),
                    lost: ids.fresh(),
                    completion: ids.fresh(),
                },
            };
            *allocated = Some(a);
            let registration = LifecycleEvent::Registered(Registered {
                handle: a.handle,
                ids: a.ids,
                command: command(p),
                at_unix_ms,
            });
            return (ids.fresh(), registration);
        }
    };
    let handle = a.handle;
    match phase {
        1 => (
            a.ids.running,
            LifecycleEvent::Running(Running {
                handle,
                pid: 10_000 + (p % 50_000) as u32,
                witness: IdentityWitness {
                    start_time_ticks: 1_000_000 + p,
                    boot_id: [0x42; 16],
                },
                at_unix_ms,
            }),
        ),
        k if k < events - 2 => (
            ids.fresh(),
            LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
                handle,
                bounds: bounds(k),
                at_unix_ms,
            }),
        ),
        k if k == events - 2 => (
            a.ids.terminal,
            LifecycleEvent::Terminal(Terminal {
                handle,
                state: State::Exited,
                exit: ExitStatus::Code(0),
                bounds: bounds(k),
                capture: CaptureStatus::Complete,
                reason: "exited with status 0".into(),
                at_unix_ms,
            }),
        ),
        _ => (
            a.ids.completion.derived(derived::NOTIFIED),
            LifecycleEvent::CompletionNotified(CompletionNotified {
                handle,
                command: a.ids.completion,
            }),
        ),
    }
}

/// Writes the journal; returns the time taken (informational) and the bytes of segment files.
fn write_journal(root: &Path, mix: Mix, processes: u64) -> Res<(Duration, u64)> {
    let start = Instant::now();
    let (mut lc, recovery, replay) = Lifecycle::open(root, options())?;
    if !recovery.is_clean() || !replay.is_clean() || lc.journal().last_seq() != 0 {
        return Err("the bench root must start empty".into());
    }
    let mut ids = Ids::default();
    for first in (0..processes).step_by(CONCURRENT as usize) {
        let last = (first + CONCURRENT).min(processes);
        let mut allocated = vec![None; (last - first) as usize];
        for phase in 0..mix.events_per_process {
            for p in first..last {
                let slot = &mut allocated[(p - first) as usize];
                let (id, e) = event(p, phase, mix.events_per_process, &mut ids, slot);
                let appended = lc.append(id, &e)?;
                if !appended.written {
                    return Err(format!("event {phase} of process {p} was not written").into());
                }
            }
        }
    }
    lc.journal().sync()?;
    let elapsed = start.elapsed();
    let bytes = std::fs::read_dir(lc.journal().dir())?
        .map(|e| e.and_then(|e| e.metadata()).map(|m| m.len()))
        .sum::<Result<u64, _>>()?;
    Ok((elapsed, bytes))
}

/// Every process must have replayed to its terminal, notified manifest.
fn check_store(store: &ManifestStore, processes: u64) -> Res<()> {
    if store.len() as u64 != processes {
        return Err(format!("{} manifests, expected {processes}", store.len()).into());
    }
    if let Some(m) = store
        .iter()
        .find(|m| m.state != State::Exited || !m.completion_notified)
    {
        return Err(format!("manifest not replayed to the end: {m:?}").into());
    }
    Ok(())
}

/// Baseline: the library's read-only scan, with a visitor that only touches each payload.
fn raw_scan(root: &Path, events: u64) -> Res<Timing> {
    let clock = Clock::start();
    let reader = JournalReader::open(root)?;
    let mut touched = (0u64, 0u64);
    let report = reader.scan(1, |r| {
        touched.0 += 1;
        touched.1 += r.payload.len() as u64 ^ u64::from(r.payload.last().copied().unwrap_or(0));
    })?;
    let elapsed = clock.stop();
    std::hint::black_box(touched);
    if !report.is_clean() || touched.0 != events {
        return Err(format!("raw scan: {} records, {report:?}", touched.0).into());
    }
    Ok(elapsed)
}

/// Diagnostic: the scan plus decoding every payload, without validating or folding.
fn decode_scan(root: &Path, events: u64) -> Res<Timing> {
    let clock = Clock::start();
    let reader = JournalReader::open(root)?;
    let (mut decoded, mut failed) = (0u64, 0u64);
    let report = reader.scan(1, |r| {
        match LifecycleEvent::decode(r.kind, r.codec_version, r.payload) {
            Ok(e) => {
                std::hint::black_box(&e);
                decoded += 1;
            }
            Err(_) => failed += 1,
        }
    })?;
    let elapsed = clock.stop();
    if !report.is_clean() || decoded != events || failed != 0 {
        return Err(format!("decode scan: {decoded} decoded, {failed} failed").into());
    }
    Ok(elapsed)
}

/// Replay only: the scan feeding a `Replayer`. The store is checked, and dropped, after the clock.
fn replay_scan(root: &Path, events: u64, processes: u64) -> Res<Timing> {
    let clock = Clock::start();
    let reader = JournalReader::open(root)?;
    let mut replayer = Replayer::default();
    let recovery = reader.scan(1, |r| replayer.feed(&r))?;
    let (store, report) = replayer.finish();
    let elapsed = clock.stop();
    if !recovery.is_clean() || !report.is_clean() {
        return Err(format!("replay: {recovery:?} {report:?}").into());
    }
    if report.lifecycle_events != events {
        return Err(format!("replay saw {} events", report.lifecycle_events).into());
    }
    check_store(&store, processes)?;
    Ok(elapsed)
}

/// Start-up: `Lifecycle::open` (lock, recovery with the ID index, replay) on the same journal.
fn lifecycle_open(root: &Path, events: u64, processes: u64) -> Res<Timing> {
    let clock = Clock::start();
    let (lc, recovery, replay) = Lifecycle::open(root, options())?;
    let elapsed = clock.stop();
    if !recovery.is_clean() || !replay.is_clean() {
        return Err(format!("open: {recovery:?} {replay:?}").into());
    }
    if lc.journal().last_seq() != events {
        return Err(format!("open: last seq {}", lc.journal().last_seq()).into());
    }
    check_store(lc.store(), processes)?;
    Ok(elapsed)
}

/// Diagnostic: `Journal::open` alone (lock, recovery scan, event-ID index, no replay).
fn journal_open(root: &Path, events: u64) -> Res<Timing> {
    let clock = Clock::start();
    let (journal, recovery) = Journal::open(root, options())?;
    let elapsed = clock.stop();
    if !recovery.is_clean() || recovery.records != events {
        return Err(format!("journal open: {recovery:?}").into());
    }
    drop(journal);
    Ok(elapsed)
}

/// Human number: 12.3k, 4.56M; two decimals below 100.
fn num(v: f64) -> String {
    common::human_number(v, 2)
}

/// The figures, in table order: name, and the ratio to the raw scan they must reach.
const FIGURES: [(&str, Option<f64>); 5] = [
    ("raw scan (JournalReader::scan)", None),
    ("scan + decode (diagnostic)", None),
    ("replay (scan -> Replayer)", Some(0.5)),
    ("Journal::open (diagnostic)", None),
    ("Lifecycle::open (recovery+replay)", None),
];

fn print_table(title: &str, samples: &[Samples]) {
    println!();
    println!("{title}");
    println!(
        "{:<34} {:>26} {:>7} {:>22} {:>8} {:>7}",
        "figure", "events/s median [min-max]", "spread", "x raw scan [rounds]", "target", "verdict"
    );
    let raw = &samples[0];
    for ((name, target), s) in FIGURES.iter().zip(samples) {
        let rounds: Vec<String> = s.ratios(raw).0.iter().map(|v| format!("{v:.2}")).collect();
        let ratio = s.median() / raw.median();
        let (target_text, verdict) = match target {
            Some(t) => (
                format!(">= {t:.1}x"),
                if ratio >= *t { "met" } else { "MISSED" },
            ),
            None => ("-".to_owned(), "-"),
        };
        println!(
            "{:<34} {:>26} {:>6.0}% {:>22} {:>8} {:>7}",
            name,
            format!("{} [{}-{}]", num(s.median()), num(s.min()), num(s.max())),
            s.spread_pct(),
            format!("{ratio:.2} [{}]", rounds.join(" ")),
            target_text,
            verdict
        );
    }
}

fn main() -> Res<()> {
    let mut plan = common::plan(FULL, QUICK);
    if let Some(rounds) = std::env::var("PROCJOURNAL_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
    {
        plan.rounds = rounds;
    }
    let replay_only = match std::env::var("PROCJOURNAL_BENCH_ONLY").as_deref() {
        Err(_) => false,
        Ok("replay") => true,
        Ok(other) => return Err(format!("PROCJOURNAL_BENCH_ONLY={other}: replay").into()),
    };
    let base = common::bench_dir()?;
    let all = Instant::now();
    for mix in MIXES {
        measure_mix(&base, plan, mix, replay_only)?;
    }
    println!();
    println!("measured in {:.1} s", all.elapsed().as_secs_f64());
    Ok(())
}

fn measure_mix(base: &Path, plan: Plan, mix: Mix, replay_only: bool) -> Res<()> {
    let dir = tempfile::Builder::new()
        .prefix("lifecycle-bench-")
        .tempdir_in(base)?;
    let root = dir.path();
    let processes = plan.events / mix.events_per_process;
    let events = processes * mix.events_per_process;

    println!();
    println!(
        "== {}: {} processes, {} events; {} rounds; root {}",
        mix.name,
        num(processes as f64),
        num(events as f64),
        plan.rounds,
        root.display()
    );
    let (write_time, bytes) = write_journal(root, mix, processes)?;
    println!(
        "wrote the journal with Lifecycle::append (Os) + sync in {:.2} s ({} events/s), {:.1} MB of segments",
        write_time.as_secs_f64(),
        num(events as f64 / write_time.as_secs_f64()),
        bytes as f64 / 1e6
    );
    // One untimed pass first, so that no timed figure pays for being first after the writes.
    raw_scan(root, events)?;

    let mut wall = vec![Samples::default(); FIGURES.len()];
    let mut cpu = vec![Samples::default(); FIGURES.len()];
    for i in 0..plan.rounds {
        if replay_only {
            // Profiling mode: the raw scan and replay, timed but not tabled.
            let raw = raw_scan(root, events)?;
            let replay = replay_scan(root, events, processes)?;
            println!(
                "round {}/{}: raw scan {:.0} ms, replay {:.0} ms on-CPU ({:.2}x)",
                i + 1,
                plan.rounds,
                raw.cpu.as_secs_f64() * 1e3,
                replay.cpu.as_secs_f64() * 1e3,
                raw.cpu.as_secs_f64() / replay.cpu.as_secs_f64()
            );
            continue;
        }
        let timings = [
            raw_scan(root, events)?,
            decode_scan(root, events)?,
            replay_scan(root, events, processes)?,
            journal_open(root, events)?,
            lifecycle_open(root, events, processes)?,
        ];
        let ms: Vec<String> = timings
            .iter()
            .map(|t| {
                format!(
                    "{:.0}/{:.0}",
                    t.wall.as_secs_f64() * 1e3,
                    t.cpu.as_secs_f64() * 1e3
                )
            })
            .collect();
        println!(
            "round {}/{} (load {}), wall/cpu ms: raw scan {}, scan+decode {}, replay {}, Journal::open {}, Lifecycle::open {}",
            i + 1,
            plan.rounds,
            common::load_average(),
            ms[0],
            ms[1],
            ms[2],
            ms[3],
            ms[4]
        );
        for (k, t) in timings.iter().enumerate() {
            wall[k].0.push(events as f64 / t.wall.as_secs_f64());
            cpu[k].0.push(events as f64 / t.cpu.as_secs_f64());
        }
    }
    if replay_only {
        return Ok(());
    }
    print_table(
        &format!(
            "{}: wall clock: events/s, median over {} rounds [min-max], spread = (max-min)/median; ratio = median / raw-scan median [per-round ratios]",
            mix.name, plan.rounds
        ),
        &wall,
    );
    print_table(
        &format!(
            "{}: on-CPU time of the measuring thread (excludes waiting for a core): same layout",
            mix.name
        ),
        &cpu,
    );
    Ok(())
}
