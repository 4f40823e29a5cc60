//! Restore with and without a snapshot: 100,000 finished processes, beside a raw sequential read
//! of the same bytes, measured in one run.
//!
//! Run with `cargo bench --bench snapshot`. The workload is `procjournal::lifecycle::workload`:
//! processes overlap four at a time and each leaves 12 lifecycle events (registration, scope,
//! running and its publication, four checkpoints or a stop request, closed input or a gap, the
//! terminal event or lost-on-restore and its publication, the completion notice, the release), so
//! 1,200,000 events, written through `Lifecycle::append` under `Durability::Os` and synced, twice:
//! - root A, never snapshotted: what a start without snapshots replays;
//! - root B, the same events with a snapshot after 90% of them and one at the end, so the journal
//!   is compacted below the first, as a supervisor's policy leaves it (compaction lags one
//!   snapshot: the records between the two are still on disk, checked at open, not replayed).
//!
//! Figures, each measured `ROUNDS` times, interleaved (round 1 measures each once, then round 2,
//! ...), median [min-max] in milliseconds of wall-clock time, on a warm page cache:
//! - raw read A: every segment file of A read sequentially into one reused buffer (`read`), the
//!   same bytes a full replay reads, and nothing else: the floor under any restore of A;
//! - full replay: `Lifecycle::open` of A (lock, recovery scan with the event-ID index, replay);
//! - raw read B: every file a restore of B reads (the newest snapshot, the segments kept);
//! - snapshot restore: `Lifecycle::open` of B (the snapshot decoded and its store rebuilt, the
//!   retained IDs indexed, the segments scanned and indexed, nothing after the snapshot to replay).
//!
//! Diagnostics: the sizes, decoding B's snapshot alone (by hand, and with bincode's derived
//! decoders, the reference), and what taking B's final snapshot cost: the capture (the manifests
//! encoded while the lifecycle lock is held: appends wait this long) and the persist (the journal
//! synced, the retained IDs looked up, the file written and synced, two kept, the compaction).
//! Nothing asserts on time; the checks are of correctness (counts, clean reports, equal stores).
//!
//! Temp roots live under `$PROCJOURNAL_BENCH_DIR`, else Cargo's target tmp dir.
//! `PROCJOURNAL_BENCH_QUICK=1` runs one round on 10,000 processes, for checking the harness;
//! `PROCJOURNAL_BENCH_ONLY=restore` times only the snapshot restore, round after round
//! (`PROCJOURNAL_BENCH_ROUNDS` sets how many), for profiling it.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use procjournal::lifecycle::{Lifecycle, ManifestStore, workload};
use procjournal::limits::SEGMENT_BYTES_DEFAULT;
use procjournal::{Durability, JournalOptions};

mod common;

use common::{Res, Row, Samples, Target};

#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    processes: u64,
}

const FULL: Plan = Plan {
    rounds: 3,
    processes: 100_000,
};

const QUICK: Plan = Plan {
    rounds: 1,
    processes: 10_000,
};

fn options() -> JournalOptions {
    JournalOptions {
        durability: Durability::Os,
        segment_bytes: SEGMENT_BYTES_DEFAULT,
    }
}

fn append(lc: &mut Lifecycle, from: u64, to: u64) -> Res<()> {
    for n in from..to {
        let (id, event) = workload::event(n);
        if !lc.append(id, &event)?.written {
            return Err(format!("event {n} was not written").into());
        }
    }
    Ok(())
}

/// What taking B's last snapshot cost.
struct SnapshotCost {
    capture: Duration,
    persist: Duration,
    file_bytes: u64,
    removed_segments: u64,
}

fn write_a(root: &Path, events: u64) -> Res<Duration> {
    let start = Instant::now();
    let (mut lc, _, _) = Lifecycle::open(root, options())?;
    append(&mut lc, 0, events)?;
    lc.journal().sync()?;
    Ok(start.elapsed())
}

fn write_b(root: &Path, events: u64) -> Res<SnapshotCost> {
    let (mut lc, _, _) = Lifecycle::open(root, options())?;
    let first = events / 10 * 9;
    append(&mut lc, 0, first)?;
    lc.snapshot_now()?.ok_or("no first snapshot")?;
    append(&mut lc, first, events)?;
    let start = Instant::now();
    let capture = lc.capture_snapshot()?.ok_or("nothing to capture")?;
    let captured = start.elapsed();
    let start = Instant::now();
    let written = capture.persist();
    let persisted = start.elapsed();
    lc.snapshot_done(written.as_ref());
    let written = written?;
    Ok(SnapshotCost {
        capture: captured,
        persist: persisted,
        file_bytes: written.file_bytes,
        removed_segments: written.compacted.map_or(0, |c| c.removed_segments),
    })
}

/// Every file a restore of `root` reads: the segments, and the newest snapshot if any.
fn files_read(root: &Path) -> Res<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root.join("journal"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "log") {
            files.push(path);
        }
    }
    let mut snapshots: Vec<PathBuf> = match std::fs::read_dir(root.join("snapshots")) {
        Ok(d) => d.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?,
        Err(_) => Vec::new(),
    };
    snapshots.sort();
    files.extend(snapshots.pop());
    files.sort();
    Ok(files)
}

fn bytes_of(files: &[PathBuf]) -> Res<u64> {
    files.iter().map(|f| Ok(std::fs::metadata(f)?.len())).sum()
}

/// The baseline: every file read sequentially into one reused buffer.
fn raw_read(files: &[PathBuf], buf: &mut Vec<u8>) -> Res<Duration> {
    let start = Instant::now();
    let mut total = 0u64;
    for f in files {
        buf.clear();
        std::io::Read::read_to_end(&mut std::fs::File::open(f)?, buf)?;
        total += buf.len() as u64 ^ u64::from(buf.last().copied().unwrap_or(0));
    }
    let elapsed = start.elapsed();
    std::hint::black_box(total);
    Ok(elapsed)
}

fn check(store: &ManifestStore, processes: u64) -> Res<()> {
    if store.len() as u64 != processes {
        return Err(format!("{} manifests, expected {processes}", store.len()).into());
    }
    if let Some(m) = store.iter().find(|m| !m.state.is_terminal()) {
        return Err(format!("a process did not finish: {m:?}").into());
    }
    Ok(())
}

/// `Lifecycle::open`, checked after the clock; the store is compared with `want` when given.
fn open(
    root: &Path,
    processes: u64,
    from_snapshot: bool,
    want: Option<&ManifestStore>,
) -> Res<Duration> {
    // A large allocation makes glibc consolidate the chunks the previous measurement freed
    // (a store of 100,000 manifests); done here, it is not charged to this one.
    drop(std::hint::black_box(Vec::<u8>::with_capacity(1 << 16)));
    let start = Instant::now();
    let (lc, recovery, replay) = Lifecycle::open(root, options())?;
    let elapsed = start.elapsed();
    if !recovery.is_clean() || !replay.is_clean() {
        return Err(format!("open: {recovery:?} {replay:?}").into());
    }
    if replay.snapshot_seq.is_some() != from_snapshot {
        return Err(format!("open: snapshot {:?}", replay.snapshot_seq).into());
    }
    check(lc.store(), processes)?;
    if let Some(want) = want
        && lc.store() != want
    {
        return Err("the snapshot restore differs from the full replay".into());
    }
    Ok(elapsed)
}

/// The store of a full replay of `root`, to compare every restore with.
fn full_store(root: &Path) -> Res<ManifestStore> {
    let (lc, _, _) = Lifecycle::open(root, options())?;
    Ok(lc.store().clone())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> Res<()> {
    let mut plan = common::plan(FULL, QUICK);
    if let Some(rounds) = std::env::var("PROCJOURNAL_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
    {
        plan.rounds = rounds;
    }
    let all = Instant::now();
    let base = common::bench_dir()?;
    let dir = tempfile::Builder::new()
        .prefix("snapshot-bench-")
        .tempdir_in(&base)?;
    common::print_file_system(dir.path(), "roots", "");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let events = plan.processes * workload::PHASES;
    println!(
        "== {} finished processes, {} events; {} rounds",
        common::human_number(plan.processes as f64, 0),
        common::human_number(events as f64, 0),
        plan.rounds
    );
    let written = write_a(&a, events)?;
    let cost = write_b(&b, events)?;
    let (files_a, files_b) = (files_read(&a)?, files_read(&b)?);
    let (bytes_a, bytes_b) = (bytes_of(&files_a)?, bytes_of(&files_b)?);
    println!(
        "A: {} files, {:.1} MB (written in {:.1} s); B: {} files, {:.1} MB: a snapshot of {:.1} MB and the segments kept ({} removed)",
        files_a.len(),
        bytes_a as f64 / 1e6,
        written.as_secs_f64(),
        files_b.len(),
        bytes_b as f64 / 1e6,
        cost.file_bytes as f64 / 1e6,
        cost.removed_segments
    );
    println!(
        "B's last snapshot: capture {:.0} ms (the lifecycle lock held: appends wait), persist {:.0} ms (sync, retained IDs, write, fsyncs, compaction)",
        ms(cost.capture),
        ms(cost.persist)
    );

    // Diagnostics: the parts of a snapshot restore, each alone.
    if let Some(snap) = files_b
        .iter()
        .find(|f| f.extension().is_some_and(|e| e == "snap"))
    {
        let bytes = std::fs::read(snap)?;
        let start = Instant::now();
        let decoded = procjournal::lifecycle::snapshot::decode(&bytes)?;
        let decode = start.elapsed();
        let start = Instant::now();
        drop(std::hint::black_box(
            procjournal::lifecycle::snapshot::decode_reference(&bytes)?,
        ));
        let reference = start.elapsed();
        let start = Instant::now();
        let mut records = 0u64;
        procjournal::journal::reader::JournalReader::open(&b)?.scan(1, |_| records += 1)?;
        let scan = start.elapsed();
        println!(
            "diagnostic: decoding B's snapshot alone {:.0} ms (with bincode's derived decoders, the reference: {:.0} ms; {} manifests, {} retained IDs); a read-only scan of B's segments {:.0} ms ({records} records)",
            ms(decode),
            ms(reference),
            decoded.store.len(),
            decoded.retained.len(),
            ms(scan)
        );
    }

    if std::env::var("PROCJOURNAL_BENCH_ONLY").as_deref() == Ok("restore") {
        // Profiling mode: the snapshot restore alone, round after round.
        for i in 0..plan.rounds {
            let t = open(&b, plan.processes, true, None)?;
            println!("restore {}/{}: {:.0} ms", i + 1, plan.rounds, ms(t));
        }
        return Ok(());
    }

    let mut buf = Vec::new();
    // One untimed pass of each, so that no figure pays for being first after the writes.
    raw_read(&files_a, &mut buf)?;
    let want = full_store(&a)?;
    raw_read(&files_b, &mut buf)?;
    open(&b, plan.processes, true, Some(&want))?;

    let mut samples = [
        Samples::default(),
        Samples::default(),
        Samples::default(),
        Samples::default(),
    ];
    for i in 0..plan.rounds {
        let timings = [
            raw_read(&files_a, &mut buf)?,
            open(&a, plan.processes, false, None)?,
            raw_read(&files_b, &mut buf)?,
            open(&b, plan.processes, true, None)?,
        ];
        println!(
            "round {}/{} (load {}): raw read A {:.0} ms, full replay {:.0} ms, raw read B {:.0} ms, snapshot restore {:.0} ms",
            i + 1,
            plan.rounds,
            common::load_average(),
            ms(timings[0]),
            ms(timings[1]),
            ms(timings[2]),
            ms(timings[3])
        );
        for (s, t) in samples.iter_mut().zip(timings) {
            s.push(ms(t));
        }
    }
    let [raw_a, full, raw_b, restore] = &samples;
    println!();
    println!(
        "milliseconds, median [min-max] over {} rounds; ratio = figure / baseline (lower is faster)",
        plan.rounds
    );
    common::print_rows(&[
        Row {
            figure: "full replay (Lifecycle::open of A)",
            samples: full,
            baseline: "raw read of A's bytes",
            base: raw_a,
            target: Target::None,
        },
        Row {
            figure: "snapshot restore (Lifecycle::open of B)",
            samples: restore,
            baseline: "raw read of B's bytes",
            base: raw_b,
            target: Target::None,
        },
        Row {
            figure: "snapshot restore (Lifecycle::open of B)",
            samples: restore,
            baseline: "full replay (Lifecycle::open of A)",
            base: full,
            target: Target::MaxRatio(1.0),
        },
        Row {
            figure: "snapshot restore (Lifecycle::open of B)",
            samples: restore,
            baseline: "raw read of A's bytes",
            base: raw_a,
            target: Target::None,
        },
    ]);
    common::print_total_time(all);
    Ok(())
}
