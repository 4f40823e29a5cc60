//! Memory a host keeps per finished process, beside the floor of one compact index entry per
//! handle measured in the same run.
//!
//! Run with `cargo bench --bench finished_memory`. For each N (10,000, 20,000, 50,000, 100,000
//! and 200,000 processes) a fresh child process of this bench measures its anonymous resident
//! memory (`RssAnon` of /proc/self/status: heap, not the page cache or the journal's mapping):
//! - append: `Lifecycle::open` on a fresh root under `Durability::Os`, then every event of N
//!   finished processes of the lifecycle workload (12 events each: registration, scope, running,
//!   publications, checkpoints, a terminal event, completion; `lifecycle::workload`) through
//!   `Lifecycle::append`: what an embedded supervisor or the daemon holds after running them
//!   (the projection: every manifest's slot and a settled one's frame in spill files, a live
//!   one decoded; and the journal's event-ID index, its sealed runs, their Bloom filters and
//!   the retained IDs in spill files too, its table bounded;
//!   `RssAnon` counts none of those files' pages, which are page cache; not the actor's bounded
//!   caches, nor real processes: the daemon's own figure is `tests/it/daemon_scale.rs`'s);
//! - daemon: the same appends on a root of its own, taking snapshots (and so compacting) as the
//!   daemon's policy says (`SnapshotPolicy::default()`, asked after every round of processes):
//!   what a daemon that runs on holds, its index forgetting what compaction removed;
//! - restore: a second child opens the append's root (`Lifecycle::open`, the whole replay): what
//!   a restarted daemon holds;
//! - baseline: a `HashMap<Handle, u64>` of N entries (a handle and a seq): what would remain per
//!   process if finished manifests were read from the journal on demand and only a compact index
//!   entry per handle stayed in memory.
//!
//! Each child reports its `RssAnon` before and after the work; the figure is the growth. The
//! report gives the growth at each N, the least-squares slope in bytes per finished process, the
//! ratio of each slope to the baseline's, and the growth extrapolated to 1,000,000 processes.
//! Memory is not noisy the way time is, so each child runs once. Nothing asserts on memory; the
//! only checks are of correctness (every event appended, the restore's manifest count).
//!
//! Temp roots live under `$PROCJOURNAL_BENCH_DIR`, else Cargo's target tmp dir.
//! `PROCJOURNAL_BENCH_QUICK=1` runs N = 2,000, 4,000 and 8,000, for checking the harness only.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use procjournal::lifecycle::{Handle, Lifecycle, workload};
use procjournal::{Durability, JournalOptions, SnapshotPolicy};

mod common;

use common::{Res, bench_dir, plan, print_cells, print_file_system, print_total_time};

/// Set in a child: `<what> <processes> <root>`.
const CHILD_ENV: &str = "PROCJOURNAL_BENCH_FINISHED_MEMORY_CHILD";

const FULL: &[u64] = &[10_000, 20_000, 50_000, 100_000, 200_000];
const QUICK: &[u64] = &[2_000, 4_000, 8_000];

/// Anonymous resident memory of this process, in bytes.
fn rss_anon() -> Res<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .ok_or("no RssAnon in /proc/self/status")?
        .trim()
        .parse::<u64>()?;
    Ok(kib * 1024)
}

fn options() -> JournalOptions {
    JournalOptions {
        durability: Durability::Os,
        ..JournalOptions::default()
    }
}

/// The work of one child; returns the growth of `RssAnon` it caused, in bytes.
fn child(what: &str, processes: u64, root: &Path) -> Res<u64> {
    let events = processes * workload::PHASES;
    let before = rss_anon()?;
    match what {
        "append" | "daemon" => {
            let (mut lc, _, _) = Lifecycle::open(root, options())?;
            let policy = SnapshotPolicy::default();
            for n in 0..events {
                let (id, event) = workload::event(n);
                lc.append(id, &event)?;
                let round_done = (n + 1) % (workload::LANES * workload::PHASES) == 0;
                if what == "daemon" && round_done && lc.snapshot_due(&policy, false) {
                    lc.snapshot_now()?;
                }
            }
            lc.journal().sync()?;
            let grown = rss_anon()?.saturating_sub(before);
            // Held until measured: the growth is what the open lifecycle keeps.
            drop(lc);
            Ok(grown)
        }
        "restore" => {
            let (lc, _, replay) = Lifecycle::open(root, options())?;
            let registered = lc.store().iter().count() as u64;
            if registered < processes || replay.lifecycle_events != events {
                return Err(format!(
                    "restore found {registered} manifests and {} events, expected {processes} \
                     and {events}",
                    replay.lifecycle_events
                )
                .into());
            }
            let grown = rss_anon()?.saturating_sub(before);
            drop(lc);
            Ok(grown)
        }
        "baseline" => {
            let mut index: HashMap<Handle, u64> = HashMap::new();
            for p in 0..processes {
                index.insert(workload::handle(p), p * workload::PHASES + 1);
            }
            let grown = rss_anon()?.saturating_sub(before);
            std::hint::black_box(&index);
            Ok(grown)
        }
        other => Err(format!("unknown child {other}").into()),
    }
}

/// Runs this bench again as a child doing `what`; returns the growth it reported.
fn spawn(what: &str, processes: u64, root: &Path) -> Res<u64> {
    let out = Command::new(std::env::current_exe()?)
        .env(CHILD_ENV, format!("{what} {processes} {}", root.display()))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "child {what} {processes} failed: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    text.lines()
        .find_map(|l| l.strip_prefix("grown="))
        .ok_or_else(|| format!("child {what} {processes} printed no figure: {text}"))?
        .trim()
        .parse::<u64>()
        .map_err(Into::into)
}

/// Least-squares slope of `ys` over `xs`.
fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let cov: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    cov / var
}

fn mib(bytes: f64) -> String {
    format!("{:.1}", bytes / (1024.0 * 1024.0))
}

fn main() -> Res<()> {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.splitn(3, ' ');
        let (Some(what), Some(n), Some(root)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("bad child spec {spec}").into());
        };
        let grown = child(what, n.parse()?, Path::new(root))?;
        println!("grown={grown}");
        return Ok(());
    }
    let all = Instant::now();
    let sizes = plan(FULL, QUICK);
    let dir = bench_dir()?;
    print_file_system(&dir, "journal roots", "");
    let figures = ["append", "daemon", "restore", "baseline"];
    let mut grown: Vec<[f64; 4]> = Vec::new();
    for &n in sizes {
        let tmp = tempfile::tempdir_in(&dir)?;
        let mut row = [0.0; 4];
        for (i, what) in figures.iter().enumerate() {
            let root = tmp
                .path()
                .join(if *what == "daemon" { "daemon" } else { "root" });
            row[i] = spawn(what, n, &root)? as f64;
        }
        println!(
            "{n} processes: append {} MiB, daemon {} MiB, restore {} MiB, baseline {} MiB",
            mib(row[0]),
            mib(row[1]),
            mib(row[2]),
            mib(row[3])
        );
        grown.push(row);
    }
    let xs: Vec<f64> = sizes.iter().map(|&n| n as f64).collect();
    let slopes: Vec<f64> = (0..4)
        .map(|i| slope(&xs, &grown.iter().map(|r| r[i]).collect::<Vec<_>>()))
        .collect();
    println!();
    println!("Anonymous resident memory grown, MiB, by finished processes:");
    let header = [
        "processes",
        "append",
        "daemon",
        "restore",
        "baseline (index entry)",
    ];
    let cells: Vec<[String; 5]> = sizes
        .iter()
        .zip(&grown)
        .map(|(n, r)| [n.to_string(), mib(r[0]), mib(r[1]), mib(r[2]), mib(r[3])])
        .collect();
    print_cells(header, &cells);
    println!();
    let header = [
        "figure",
        "slope, bytes/process",
        "baseline slope",
        "ratio",
        "at 1,000,000, MiB",
    ];
    let cells: Vec<[String; 5]> = (0..3)
        .map(|i| {
            let at_million = grown.last().map_or(0.0, |r| r[i])
                + slopes[i] * (1_000_000.0 - xs.last().copied().unwrap_or(0.0));
            [
                figures[i].to_owned(),
                format!("{:.0}", slopes[i]),
                format!("{:.0}", slopes[3]),
                format!("{:.1}", slopes[i] / slopes[3]),
                mib(at_million),
            ]
        })
        .collect();
    print_cells(header, &cells);
    println!();
    let met = slopes[..3].iter().all(|s| *s < slopes[3]);
    println!(
        "target: O(1) beyond a bounded cache, i.e. a slope near 0 (a ratio to the index entry \
         below 1): {}",
        if met { "met" } else { "NOT met" }
    );
    print_total_time(all);
    Ok(())
}
