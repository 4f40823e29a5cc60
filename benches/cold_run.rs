//! A cold `procjournal run -- true` beside a plain spawn + wait of `true`, measured in the same
//! run.
//!
//! Run with `cargo bench --bench cold_run`. What is measured:
//! 1. The size on disk of a fresh root after one `procjournal run --root R -- true`: what a
//!    default root costs before any output (the sum of the blocks of every file and directory
//!    under it, as `du` counts them; target: below 33 MB), with each file's length and blocks.
//! 2. The syncs of one cold run on that (existing) root, counted with
//!    `strace -f -c -e trace=fsync,fdatasync` (every thread and child: the guardian too) when
//!    strace is installed; the bench says so when it is not. Target: at most 2 (the sync table
//!    of journal-format.md: the registration and the terminal events; `run` is a brief writer,
//!    whose close leaves its bookkeeping to the next writer's first commit); several runs are
//!    traced, and the bench says how many kept to 2. A `true` that strace slowed past the
//!    publication delay (10 ms) syncs a third time, rightly (its guardian's scope and its
//!    `running` made durable then), and counts as missing the target here.
//! 3. The time of a cold run: `procjournal run --root R -- true`, the release binary Cargo built
//!    for this bench (`CARGO_BIN_EXE_procjournal`), on that existing root with no daemon, so
//!    each run opens the root, recovers, supervises `true` and closes. Baseline: a plain
//!    `std::process::Command::new("true").status()` (spawn + wait). Each round runs both
//!    `RUNS` times, alternating one of each (the order swapped every round), so that load from
//!    other work on the machine hits both alike; a round's figure is the median of its runs.
//!    The summary gives the median over the rounds with its min-max spread and the ratio of
//!    the medians with its per-round range. Target: at most 10 x the baseline.
//! 4. The same as a batch: `BATCH` (200) cold runs back to back, timed as a whole, beside as
//!    many plain spawns + waits of `true` back to back, in alternating order every round; the
//!    root keeps growing by every run, as a root in use does. Target: at most 8 x the baseline.
//!    Beside it, the issue's own baseline for the same target: a shell loop that runs the `true`
//!    executable `BATCH` times (`common::shell_loop_ms`: a fork and exec of `sh`'s each, about
//!    twice a spawn + wait), timed in the same round. And what any such batch pays before any
//!    work of its own, its parts timed in the same round: `BATCH` starts of the executable that do nothing
//!    (`procjournal --version`), and `BATCH` plain spawns of `true` each between the two syncs
//!    the sync table asks of a run (a record-sized write and an `fdatasync` each, into a file
//!    beside the root laid out as a journal segment is); their sum is what a cold run costs
//!    before it opens the root, starts a guardian or records anything, unless it overlaps its
//!    syncs with its spawn (a reference, then, rather than a strict floor). And, a diagnostic,
//!    the same batch on a fresh root each round (holding 0 to `BATCH` processes, where the
//!    growing root holds hundreds more): the batch's time apart from its root's size.
//! 5. What a root's size costs a cold run: a second root filled with `Plan::large` finished
//!    processes (5 000: a `procjournal serve` of the same binary on it, started and waited for
//!    one by one over its socket, then shut down, as a root that has served a while is), and
//!    `runs` cold runs on it per round, interleaved with cold runs on the small root of sections
//!    2 to 4 and plain spawns. A diagnostic, without a target: each cold run opens the root, and
//!    the open reads every manifest of the newest snapshot and every record of the journal's
//!    segments, so its cost grows with the processes the root holds; the bench prints that
//!    growth per thousand processes.
//!
//! Nothing here asserts on time; the checks are of correctness (every run exits 0, and the
//! journal of the root is clean at the end). Roots live under `$PROCJOURNAL_BENCH_DIR`, else
//! Cargo's target tmp dir (the file system is printed: on tmpfs a sync is free).
//! `PROCJOURNAL_BENCH_QUICK=1` runs one short round, for checking the harness only.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

#[path = "common/mod.rs"]
mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Res, Row, Samples, Target};
use procjournal::client::Client;
use procjournal::journal::reader::JournalReader;
use procjournal::protocol::Request;

#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    /// Cold runs (and as many plain spawns) per round.
    runs: usize,
    /// Cold runs counted under strace.
    traced: usize,
    /// Cold runs (and as many plain spawns) back to back in one timed batch, per round.
    batch: usize,
    /// Finished processes in the large root of section 5.
    large: usize,
}

const FULL: Plan = Plan {
    rounds: 5,
    runs: 20,
    traced: 5,
    batch: 200,
    large: 5_000,
};

const QUICK: Plan = Plan {
    rounds: 1,
    runs: 3,
    traced: 1,
    batch: 10,
    large: 50,
};

/// The procjournal binary Cargo built (in the bench profile) for this bench.
fn procjournal_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_procjournal"))
}

fn run_command(bin: &Path, root: &Path) -> Command {
    let mut command = Command::new(bin);
    command
        .arg("run")
        .arg("--root")
        .arg(root)
        .arg("--")
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// `command`, its standard streams at /dev/null, timed from the spawn to the wait's return;
/// an error, naming it `what`, unless it exited 0.
fn timed_quietly(command: &mut Command, what: &str) -> Res<Duration> {
    let start = Instant::now();
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    let elapsed = start.elapsed();
    if !status.success() {
        return Err(format!("{what}: {status}").into());
    }
    Ok(elapsed)
}

/// One cold `procjournal run --root R -- true`, timed from the spawn to the wait's return.
fn cold_run(bin: &Path, root: &Path) -> Res<Duration> {
    timed_quietly(&mut run_command(bin, root), "procjournal run -- true")
}

/// The baseline: spawn `true` and wait for it.
fn plain_spawn() -> Res<Duration> {
    timed_quietly(&mut Command::new("true"), "true")
}

/// Every file and directory under `path` (itself included), depth first, with its metadata.
fn walk(path: &Path, out: &mut Vec<(PathBuf, std::fs::Metadata)>) -> Res<()> {
    let meta = std::fs::symlink_metadata(path)?;
    let is_dir = meta.is_dir();
    out.push((path.to_owned(), meta));
    if is_dir {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        entries.sort();
        for entry in entries {
            walk(&entry, out)?;
        }
    }
    Ok(())
}

/// Prints every file of `root` with its length and the bytes its blocks take; returns the
/// total on disk (`du`'s count: 512-byte blocks of every file and directory).
fn disk_usage(root: &Path) -> Res<u64> {
    let mut all = Vec::new();
    walk(root, &mut all)?;
    let mut total = 0;
    for (path, meta) in &all {
        let on_disk = meta.blocks() * 512;
        total += on_disk;
        if meta.is_file() {
            let name = path.strip_prefix(root).unwrap_or(path);
            println!(
                "  {:<60} {:>10} bytes long, {:>10} bytes on disk",
                name.display(),
                meta.len(),
                on_disk
            );
        }
    }
    Ok(total)
}

/// Whether `strace` runs here.
fn strace_available() -> bool {
    Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The `fsync` and `fdatasync` calls of one cold run, every thread and child followed, from
/// the summary table of `strace -c`.
fn traced_syncs(bin: &Path, root: &Path, scratch: &Path) -> Res<(u64, u64)> {
    let summary = scratch.join("strace-summary");
    let run = run_command(bin, root);
    let status = Command::new("strace")
        .args(["-f", "-c", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&summary)
        .arg(run.get_program())
        .args(run.get_args())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !status.success() {
        return Err(format!("strace procjournal run -- true: {status}").into());
    }
    let text = std::fs::read_to_string(&summary)?;
    // Rows: % time, seconds, usecs/call, calls, [errors,] syscall.
    let calls = |name: &str| -> u64 {
        text.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.last() == Some(&name) && f.len() >= 5)
            .filter_map(|f| f[3].parse::<u64>().ok())
            .sum()
    };
    Ok((calls("fsync"), calls("fdatasync")))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Milliseconds for `n` cold runs back to back.
fn cold_batch(bin: &Path, root: &Path, n: usize) -> Res<f64> {
    let start = Instant::now();
    for _ in 0..n {
        cold_run(bin, root)?;
    }
    Ok(ms(start.elapsed()))
}

/// Milliseconds for `n` plain spawns + waits of `true` back to back.
fn plain_batch(n: usize) -> Res<f64> {
    let start = Instant::now();
    for _ in 0..n {
        plain_spawn()?;
    }
    Ok(ms(start.elapsed()))
}

/// Milliseconds for `n` starts of the executable that do nothing (`procjournal --version`):
/// what every cold run pays before it does anything.
fn version_batch(bin: &Path, n: usize) -> Res<f64> {
    let start = Instant::now();
    for _ in 0..n {
        timed_quietly(Command::new(bin).arg("--version"), "procjournal --version")?;
    }
    Ok(ms(start.elapsed()))
}

/// Milliseconds for `n` plain spawns + waits of `true`, each between the two syncs a cold run
/// must make (the registration's and the terminal event's, journal-format.md's sync table):
/// each a record written into a file on the roots' file system as the journal writes one
/// ([`common::SyncedRecords`], which the daemon bench times too). Interleaved with the spawns,
/// not back to back: on this kind of machine a sync right after another costs a tenth of one
/// after a pause, and a run's syncs come after pauses.
fn synced_plain_batch(dir: &Path, n: usize) -> Res<f64> {
    let file = common::SyncedRecords::create(dir, "syncs")?;
    let start = Instant::now();
    for _ in 0..n {
        file.record()?;
        plain_spawn()?;
        file.record()?;
    }
    let elapsed = ms(start.elapsed());
    std::fs::remove_file(dir.join("syncs"))?;
    Ok(elapsed)
}

/// Section 4's figures, in ms per round.
#[derive(Default)]
struct Batches {
    cold: Samples,
    plain: Samples,
    shell: Samples,
    /// The same batch on a fresh root each round.
    fresh: Samples,
    /// What a cold run pays before any work of its own: the executable's start, and a plain
    /// spawn between two syncs.
    reference: Samples,
}

/// Section 4: `plan.batch` cold runs, as many plain spawns, a shell loop of as many, as many
/// starts of the executable alone and as many plain spawns between two syncs, each timed as a
/// whole, in alternating order every round.
fn batches(bin: &Path, root: &Path, dir: &Path, plan: Plan) -> Res<Batches> {
    let mut out = Batches::default();
    let n = plan.batch;
    for i in 0..plan.rounds {
        common::print_round(i, plan.rounds);
        let fresh_root = dir.join(format!("fresh-{i}"));
        let (cold, plain, shell, version, synced, fresh);
        if i % 2 == 0 {
            cold = cold_batch(bin, root, n)?;
            plain = plain_batch(n)?;
            shell = common::shell_loop_ms(n)?;
            version = version_batch(bin, n)?;
            synced = synced_plain_batch(dir, n)?;
            fresh = cold_batch(bin, &fresh_root, n)?;
        } else {
            fresh = cold_batch(bin, &fresh_root, n)?;
            synced = synced_plain_batch(dir, n)?;
            version = version_batch(bin, n)?;
            shell = common::shell_loop_ms(n)?;
            plain = plain_batch(n)?;
            cold = cold_batch(bin, root, n)?;
        }
        std::fs::remove_dir_all(&fresh_root)?;
        println!(
            "  {n} x run -- true: {cold:.0} ms; {n} x spawn+wait true: {plain:.0} ms; shell loop: \
             {shell:.0} ms; {n} x procjournal --version: {version:.0} ms; {n} x spawn+wait \
             between two syncs: {synced:.0} ms; {n} x run -- true on a fresh root: {fresh:.0} ms"
        );
        out.fresh.push(fresh);
        out.cold.push(cold);
        out.plain.push(plain);
        out.shell.push(shell);
        out.reference.push(version + synced);
    }
    Ok(out)
}

/// Section 5's root: `n` finished processes, through a daemon that then shuts down cleanly.
fn fill_root(bin: &Path, root: &Path, n: usize) -> Res<()> {
    let mut daemon = common::spawn_serve(bin, root)?;
    let mut client = match Client::connect(&root.join("procjournal.sock")) {
        Ok(client) => client,
        Err(e) => {
            let _ = daemon.kill();
            let _ = daemon.wait();
            return Err(e.into());
        }
    };
    let filled = (0..n).try_for_each(|_| common::start_and_wait_true(&mut client, "/").map(drop));
    let shut = client.call(&Request::Shutdown { grace_ms: 2000 });
    if shut.is_err() {
        // A daemon that did not get the request would never end on its own.
        let _ = daemon.kill();
    }
    let status = daemon.wait()?;
    filled?;
    shut?;
    if !status.success() {
        return Err(format!("serve on {}: {status}", root.display()).into());
    }
    Ok(())
}

/// The processes `root` holds, as a restore of it finds them.
fn processes_in(root: &Path) -> Res<usize> {
    let (store, _, _) = procjournal::lifecycle::restore_read_only(root, |_| {})?;
    Ok(store.len())
}

/// Section 5: per round, the median of `plan.runs` cold runs on the large root, on the small
/// one, and of as many plain spawns, interleaved (the order turned every round).
fn large_rounds(
    bin: &Path,
    small: &Path,
    large: &Path,
    plan: Plan,
) -> Res<(Samples, Samples, Samples)> {
    let (mut on_large, mut on_small, mut plain) =
        (Samples::default(), Samples::default(), Samples::default());
    for i in 0..plan.rounds {
        common::print_round(i, plan.rounds);
        let (mut l, mut s, mut p) = (Samples::default(), Samples::default(), Samples::default());
        for _ in 0..plan.runs {
            if i % 2 == 0 {
                l.push(ms(cold_run(bin, large)?));
                s.push(ms(cold_run(bin, small)?));
                p.push(ms(plain_spawn()?));
            } else {
                p.push(ms(plain_spawn()?));
                s.push(ms(cold_run(bin, small)?));
                l.push(ms(cold_run(bin, large)?));
            }
        }
        println!(
            "  cold run on the large root: median {:.2} ms; on the small root {:.2} ms; spawn+wait {:.3} ms",
            l.median(),
            s.median(),
            p.median()
        );
        on_large.push(l.median());
        on_small.push(s.median());
        plain.push(p.median());
    }
    Ok((on_large, on_small, plain))
}

fn main() -> Res<()> {
    let plan = common::plan(FULL, QUICK);
    let base = common::bench_dir()?;
    common::print_file_system(
        &base,
        "roots",
        "makes fdatasync free; the cold run's figures mean little",
    );
    let bin = procjournal_bin();
    println!(
        "binary {}; {} rounds of {} cold runs and {} plain spawns each; {} available CPUs",
        bin.display(),
        plan.rounds,
        plan.runs,
        plan.runs,
        common::available_cpus()
    );
    let all = Instant::now();
    let dir = tempfile::tempdir_in(&base)?;
    let root = dir.path().join("root");

    // 1. A fresh root after one run: its size before any output.
    let first = cold_run(&bin, &root)?;
    println!(
        "first run (creates the root): {:.1} ms; the root after it:",
        ms(first)
    );
    let size = disk_usage(&root)?;
    let size_met = if size < 33_000_000 { "yes" } else { "NO" };
    println!(
        "root size on disk before any output: {:.2} MB ({size} bytes); target < 33 MB: {size_met}",
        size as f64 / 1e6
    );

    // 2. Syncs per cold run on the existing root.
    if strace_available() {
        let mut counts = Vec::new();
        for _ in 0..plan.traced {
            counts.push(traced_syncs(&bin, &root, dir.path())?);
        }
        let described: Vec<String> = counts
            .iter()
            .map(|(fsync, fdatasync)| {
                format!(
                    "{} ({fsync} fsync + {fdatasync} fdatasync)",
                    fsync + fdatasync
                )
            })
            .collect();
        let within = counts.iter().filter(|(a, b)| a + b <= 2).count();
        println!(
            "syncs per cold run (strace -f -c -e trace=fsync,fdatasync), {} runs: {}; target <= 2: met by {within} of {}",
            counts.len(),
            described.join(", "),
            counts.len()
        );
    } else {
        println!(
            "syncs per cold run: not counted, strace is not installed (count them with `strace -f -c -e trace=fsync,fdatasync procjournal run --root R -- true`)"
        );
    }

    // 3. Cold runs beside plain spawns, interleaved.
    let mut cold = Samples::default();
    let mut plain = Samples::default();
    let mut every_cold = Vec::new();
    let mut every_plain = Vec::new();
    for i in 0..plan.rounds {
        common::print_round(i, plan.rounds);
        let mut round_cold = Vec::with_capacity(plan.runs);
        let mut round_plain = Vec::with_capacity(plan.runs);
        for _ in 0..plan.runs {
            if i % 2 == 0 {
                round_cold.push(ms(cold_run(&bin, &root)?));
                round_plain.push(ms(plain_spawn()?));
            } else {
                round_plain.push(ms(plain_spawn()?));
                round_cold.push(ms(cold_run(&bin, &root)?));
            }
        }
        let round_cold = Samples(round_cold);
        let round_plain = Samples(round_plain);
        println!(
            "  cold run -- true: median {:.2} ms [{:.2}-{:.2}]; spawn+wait true: median {:.3} ms [{:.3}-{:.3}]",
            round_cold.median(),
            round_cold.min(),
            round_cold.max(),
            round_plain.median(),
            round_plain.min(),
            round_plain.max()
        );
        cold.push(round_cold.median());
        plain.push(round_plain.median());
        every_cold.extend(round_cold.0);
        every_plain.extend(round_plain.0);
    }

    // 4. The same as batches of back-to-back runs.
    println!("batches of {} back to back:", plan.batch);
    let Batches {
        cold: batch_cold,
        plain: batch_plain,
        shell: batch_shell,
        fresh: batch_fresh,
        reference: batch_reference,
    } = batches(&bin, &root, dir.path(), plan)?;

    // 5. A large root beside the small one.
    let large = dir.path().join("large");
    let filling = Instant::now();
    fill_root(&bin, &large, plan.large)?;
    println!(
        "a root of {} finished processes, filled through serve in {:.1} s; cold runs on it:",
        plan.large,
        filling.elapsed().as_secs_f64()
    );
    let (large_cold, small_cold, large_plain) = large_rounds(&bin, &root, &large, plan)?;

    // The journals the runs wrote are whole: every run closed them cleanly.
    for root in [&root, &large] {
        let report = JournalReader::open(root)?.verify()?;
        if !report.is_clean() {
            return Err(format!(
                "the journal of {} is not clean after the runs: {report:?}",
                root.display()
            )
            .into());
        }
    }

    println!();
    println!(
        "summary: median over {} rounds of each round's median [min-max]; ratio = median / baseline median [per-round ratios]",
        plan.rounds
    );
    let batch_figure = format!("{} x run -- true back to back, ms", plan.batch);
    let batch_base = format!("{} x spawn+wait true, ms", plan.batch);
    let batch_shell_name = format!("shell loop of {} x true, ms", plan.batch);
    let large_figure = format!(
        "diagnostic: cold run on a root of {} processes, ms",
        plan.large
    );
    common::print_rows(&[
        Row {
            figure: "cold run -- true, ms",
            samples: &cold,
            baseline: "spawn+wait true, ms",
            base: &plain,
            target: Target::MaxRatio(10.0),
        },
        Row {
            figure: &batch_figure,
            samples: &batch_cold,
            baseline: &batch_base,
            base: &batch_plain,
            target: Target::MaxRatio(8.0),
        },
        Row {
            figure: "  the same, beside the issue's baseline, ms",
            samples: &batch_cold,
            baseline: &batch_shell_name,
            base: &batch_shell,
            target: Target::MaxRatio(8.0),
        },
        Row {
            figure: "  diagnostic: the same on a fresh root each round, ms",
            samples: &batch_fresh,
            baseline: &batch_base,
            base: &batch_plain,
            target: Target::None,
        },
        Row {
            figure: "  reference: as many --version, and spawn+wait between two syncs, ms",
            samples: &batch_reference,
            baseline: &batch_base,
            base: &batch_plain,
            target: Target::None,
        },
        Row {
            figure: &large_figure,
            samples: &large_cold,
            baseline: "spawn+wait true, ms",
            base: &large_plain,
            target: Target::None,
        },
        Row {
            figure: "  the same on the small root, ms",
            samples: &small_cold,
            baseline: "spawn+wait true, ms",
            base: &large_plain,
            target: Target::None,
        },
    ]);
    let (held_large, held_small) = (processes_in(&large)?, processes_in(&root)?);
    println!(
        "a cold run's cost per thousand processes in its root: {:.2} ms (the two roots' medians \
         apart, over the {} processes between them: {held_large} and {held_small} at the end)",
        (large_cold.median() - small_cold.median()) * 1000.0
            / held_large.saturating_sub(held_small).max(1) as f64,
        held_large.saturating_sub(held_small)
    );
    let n = every_cold.len();
    println!(
        "every run: cold p50 {:.2} ms, p90 {:.2} ms, max {:.2} ms; plain p50 {:.3} ms, p90 {:.3} ms ({n} each)",
        common::quantile(&mut every_cold, 0.5),
        common::quantile(&mut every_cold, 0.9),
        common::quantile(&mut every_cold, 1.0),
        common::quantile(&mut every_plain, 0.5),
        common::quantile(&mut every_plain, 0.9),
    );
    println!(
        "noise, (max-min)/median: cold {:.0}%, plain {:.0}%",
        cold.spread_pct(),
        plain.spread_pct()
    );
    common::print_total_time(all);
    Ok(())
}
