//! A spool whose small window output turns over many times, through the real `procjournal run`:
//! its segments are written over the files of dropped ones (spares), and nothing a reader, a
//! kill or `spool verify` sees tells the difference.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_procjournal"))
}

fn run_in(root: &Path, args: &[&str]) -> Output {
    bin().args(args).arg("--root").arg(root).output().unwrap()
}

/// The spool directory of the one process `root` holds.
fn spool_dir(root: &Path) -> Option<PathBuf> {
    let mut dirs = std::fs::read_dir(root.join("spool")).ok()?;
    dirs.next().and_then(Result::ok).map(|e| e.path())
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The first cursor of the newest segment file in `dir` (how far output has come).
fn newest_cursor(dir: &Path) -> u64 {
    names(dir)
        .iter()
        .filter_map(|n| n.strip_suffix(".seg"))
        .filter_map(|n| n.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

/// `procjournal run` of `sh -c script` on `root` with the least retention (8 MiB), its output
/// and messages thrown away.
fn spawn_run(root: &Path, script: &str) -> Child {
    bin()
        .args(["run", "--retention", "8MiB", "--root"])
        .arg(root)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn verify_clean(root: &Path) {
    let out = run_in(root, &["spool", "verify"]);
    assert!(out.status.success(), "spool verify: {out:?}");
}

/// The least retention (8 MiB) and about 69 MB of numbered lines: the window turns over many
/// times. The retained window reads back exactly as the workload wrote
/// it, `spool verify` is clean, and no spare is left once `run` has returned.
#[test]
fn a_window_turned_over_many_times_reads_back_and_verifies_clean() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let script = "seq 1 9000000";
    let out = bin()
        .args(["run", "--retention", "8MiB", "--root"])
        .arg(&root)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let spool = spool_dir(&root).unwrap();
    let files = names(&spool);
    assert!(
        files.iter().all(|n| n.ends_with(".seg")),
        "only segments are left: {files:?}"
    );
    assert!(newest_cursor(&spool) > 48 << 20, "{files:?}");
    verify_clean(&root);

    let handle = spool.file_name().unwrap().to_string_lossy().into_owned();
    let logs = run_in(&root, &["logs", "--raw", &handle]);
    assert!(logs.status.success(), "{logs:?}");
    let kept = String::from_utf8(logs.stdout).unwrap();
    // The window starts inside a line; every whole line after it is the next number.
    let lines: Vec<u64> = kept.lines().skip(1).map(|l| l.parse().unwrap()).collect();
    assert!(lines.len() > 500_000, "{} lines kept", lines.len());
    assert!(
        lines.windows(2).all(|w| w[1] == w[0] + 1),
        "a line out of order"
    );
    assert_eq!(lines.last(), Some(&9_000_000));
}

/// `run` killed (SIGKILL) while its output turns the window over, so that the newest segment is
/// usually a reused file with old chunks after its own and spares wait beside the window: the
/// next writable open recovers the process, and `spool verify` finds no issue.
#[test]
fn a_run_killed_while_its_window_turns_over_recovers_clean() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut run = spawn_run(&root, "exec yes 0123456789abcdef");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut reused = false;
    while !reused && Instant::now() < deadline {
        // Far enough, and with spares beside the window: the writer is reusing files.
        reused = spool_dir(&root).is_some_and(|s| {
            newest_cursor(&s) > 40 << 20 && names(&s).iter().any(|n| n.ends_with(".seg.tmp"))
        });
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(Pid::from_raw(run.id() as i32), Signal::SIGKILL).unwrap();
    let spool = spool_dir(&root).expect("no spool after a minute");
    // Seen before the kill (a spare may be taken between that look and the kill).
    assert!(newest_cursor(&spool) > 40 << 20, "{:?}", names(&spool));
    run.wait().unwrap();
    assert!(reused, "no spare in a minute: the writer reuses no file");

    // A writable open (this `run`) restores the process the kill left.
    let out = bin()
        .args(["run", "--root"])
        .arg(&root)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let files = names(&spool);
    assert!(
        files.iter().all(|n| n.ends_with(".seg")),
        "the restore left only segments: {files:?}"
    );
    verify_clean(&root);
}

/// A burst of output that turns the window over, then quiet: the spares it left go within a
/// few checkpoint intervals while the process still runs, not only at its end, so a quiet
/// process holds no more than its window on disk.
#[test]
fn the_spares_of_a_burst_go_while_the_process_is_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut run = spawn_run(&root, "head -c 100000000 /dev/zero; exec sleep 600");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut burst_done, mut spare_seen, mut spares_gone) = (false, false, false);
    while !spares_gone && Instant::now() < deadline {
        if let Some(spool) = spool_dir(&root) {
            let files = names(&spool);
            let spares = files.iter().filter(|n| n.ends_with(".seg.tmp")).count();
            burst_done |= newest_cursor(&spool) > 90_000_000;
            spare_seen |= spares > 0;
            spares_gone = burst_done && spare_seen && spares == 0;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let running = run.try_wait().unwrap().is_none();
    kill(Pid::from_raw(run.id() as i32), Signal::SIGTERM).unwrap();
    run.wait().unwrap();
    assert!(
        burst_done && spare_seen,
        "the burst left no spare to give up"
    );
    assert!(spares_gone, "the spares stayed while the process was quiet");
    assert!(running, "the process ended before its spares went");
    verify_clean(&root);
}

/// `logs` without a daemon reads the spool files of a `run` whose output turns the window over
/// while it reads: files go (deleted or reused) under it. Each read succeeds, and what went is
/// said as a retention gap, never an error and never damage.
#[test]
fn logs_of_a_window_turning_under_it_say_retention_and_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut run = spawn_run(&root, "exec yes 0123456789abcdef");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut spool = None;
    while spool.is_none() && Instant::now() < deadline {
        spool = spool_dir(&root).filter(|s| newest_cursor(s) > 16 << 20);
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut failures = Vec::new();
    let mut retention_noted = 0;
    if let Some(spool) = &spool {
        let handle = spool.file_name().unwrap().to_string_lossy().into_owned();
        for _ in 0..20 {
            let out = run_in(&root, &["logs", "--raw", &handle]);
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            retention_noted += usize::from(stderr.contains("retention"));
            if !out.status.success() || stderr.contains("damage") {
                failures.push(stderr);
            }
        }
    }
    kill(Pid::from_raw(run.id() as i32), Signal::SIGTERM).unwrap();
    run.wait().unwrap();
    assert!(spool.is_some(), "the window never turned over");
    assert!(
        failures.is_empty(),
        "{} of 20 reads failed: {failures:?}",
        failures.len()
    );
    assert!(retention_noted > 0, "no read said what retention took");
}
