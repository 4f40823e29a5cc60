//! Snapshots and compaction under SIGKILL, and under a running supervisor.
//!
//! The crash test: a child process appends the deterministic workload of
//! `procjournal::lifecycle::workload` through a `Lifecycle` and, every few events, writes a
//! snapshot and compacts (small segments, so most snapshots remove segments); it spends most of
//! its time in the snapshot's and the compaction's writes, syncs, renames and deletes. The parent
//! kills it with SIGKILL at a random moment, reopens the root, and checks that the manifests (and
//! the replay report's counts and issues) are exactly those of a full replay of a *mirror* root
//! that received the same events and was never compacted; that recovery found nothing but crash
//! residue; and that a retry of the first event, whose record is long compacted away, writes
//! nothing. Rounds continue on the same root, each recovering the residue of the last kill.
//!
//! The test binary is its own child ([`snapshot_child`] does nothing unless
//! `PROCJOURNAL_SNAPSHOT_CHILD` is set). `PROCJOURNAL_CRASH_SEED` replays a kill schedule.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use procjournal::journal::reader::JournalReader;
use procjournal::lifecycle::{Lifecycle, ManifestStore, ReplayReport, Replayer, workload};
use procjournal::{Durability, JournalOptions};

use crate::common::rng;
use rng::XorShift;

const CHILD_ENV: &str = "PROCJOURNAL_SNAPSHOT_CHILD";
const ROOT_ENV: &str = "PROCJOURNAL_SNAPSHOT_ROOT";
const SEED_ENV: &str = "PROCJOURNAL_CRASH_SEED";
const CHILD_TEST: &str = "snapshot_child";
const ROUNDS: u64 = 20;
/// Events between two snapshots in the child.
const EVENTS_PER_SNAPSHOT: u64 = 40;
/// A child whose parent vanished stops after this many events.
const EVENTS_MAX: u64 = 1_000_000;
/// Turns a hung child into a failure; nothing is asserted about how long anything takes.
const HANG_GUARD: Duration = Duration::from_secs(120);

fn options() -> JournalOptions {
    JournalOptions {
        durability: Durability::Os,
        segment_bytes: 8192,
    }
}

/// Appends workload events `from..to`, each exactly one record.
fn append(lc: &mut Lifecycle, from: u64, to: u64) {
    for n in from..to {
        let (id, event) = workload::event(n);
        assert!(lc.append(id, &event).expect("append").written, "event {n}");
    }
}

/// The appender and snapshotter, run in a child process (module doc).
#[test]
fn snapshot_child() {
    let Some(root) = std::env::var_os(ROOT_ENV).filter(|_| std::env::var_os(CHILD_ENV).is_some())
    else {
        return;
    };
    let (mut lc, _, _) = Lifecycle::open(Path::new(&root), options()).expect("child open");
    // Every event is one record: the journal's last seq says where the workload stands.
    let mut n = lc.journal().last_seq();
    while n < EVENTS_MAX {
        append(&mut lc, n, n + EVENTS_PER_SNAPSHOT);
        n += EVENTS_PER_SNAPSHOT;
        println!("appended {n}");
        lc.snapshot_now().expect("snapshot");
        println!("snapshot {n}");
    }
}

/// A replay of every record of `root`'s journal (no snapshot).
fn full_replay(root: &Path) -> (ManifestStore, ReplayReport) {
    let mut replayer = Replayer::default();
    let report = JournalReader::open(root)
        .expect("open mirror")
        .scan(1, |r| replayer.feed(&r))
        .expect("scan mirror");
    assert!(report.is_clean(), "{report:?}");
    replayer.finish()
}

#[test]
fn sigkill_during_snapshots_and_compaction_gives_the_full_replay() {
    let seed = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("snapshot crash test: {SEED_ENV}={seed}");
    let root = tempfile::tempdir().expect("root");
    let mirror_dir = tempfile::tempdir().expect("mirror");
    let mut mirrored = 0;
    let mut compactions = 0;
    // Kills that landed inside a snapshot or a compaction.
    let mut in_snapshot = 0;
    // Kills that left a snapshot or a floor not renamed yet, or segments below the floor.
    let mut unfinished = 0;
    for round in 0..ROUNDS {
        let context = format!("round {round}, {SEED_ENV}={seed}");
        let mut rng = XorShift::new(seed ^ round.wrapping_mul(0x9e37_79b9));
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                &crate::common::harness_name(module_path!(), CHILD_TEST),
            ])
            .args(["--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .env(ROOT_ENV, root.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let pid = Pid::from_raw(child.id() as i32);
        let lines = BufReader::new(child.stdout.take().expect("child stdout"));
        // Kill after a random number of snapshots, a random moment into the next one.
        let wanted = rng.between(1, 6);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let (mut seen, mut last) = (0, String::new());
            for line in lines.lines() {
                let Ok(line) = line else { break };
                if line.starts_with("appended") {
                    seen += 1;
                    if seen == wanted {
                        let _ = tx.send(());
                    }
                }
                last = line;
            }
            last
        });
        if rx.recv_timeout(HANG_GUARD).is_err() {
            let _ = kill(pid, Signal::SIGKILL);
            panic!("{context}: the child made no progress");
        }
        std::thread::sleep(Duration::from_micros(rng.below(20_000)));
        kill(pid, Signal::SIGKILL).expect("kill child");
        let _ = child.wait();
        // The child prints "appended" before a snapshot and "snapshot" after it: a kill after
        // the one and before the other landed in the snapshot or the compaction.
        let last = reader.join().unwrap_or_default();
        in_snapshot += u64::from(last.starts_with("appended"));

        // What the kill left half done: a snapshot not yet renamed, a floor, deletions.
        let tmp = ["snapshots", "journal"].iter().any(|d| {
            std::fs::read_dir(root.path().join(d)).is_ok_and(|mut entries| {
                entries.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".tmp")))
            })
        });
        let (mut lc, recovery, replay) = Lifecycle::open(root.path(), options()).expect("reopen");
        unfinished += u64::from(tmp || !recovery.compacted_leftovers.is_empty());
        assert!(recovery.is_crash_residue_only(), "{context}: {recovery:?}");
        assert!(recovery.gaps.is_empty(), "{context}: {recovery:?}");
        assert!(replay.is_clean(), "{context}: {replay:?}");
        compactions += u64::from(recovery.floor.is_some());
        let last = lc.journal().last_seq();
        // The mirror catches up with what the child appended, and is replayed whole.
        {
            let (mut mirror, _, _) = Lifecycle::open(mirror_dir.path(), options()).expect("mirror");
            append(&mut mirror, mirrored, last);
            mirrored = last;
        }
        let (want, want_report) = full_replay(mirror_dir.path());
        assert_eq!(*lc.store(), want, "{context}");
        assert_eq!(replay.of_records(), want_report, "{context}");
        // The first event's record is compacted away after a few rounds; its retry is still
        // recognised.
        let (id, event) = workload::event(0);
        assert!(!lc.append(id, &event).expect("retry").written, "{context}");
        assert_eq!(lc.journal().last_seq(), last, "{context}");
    }
    assert!(compactions > 0, "no round ran on a compacted journal");
    eprintln!(
        "{in_snapshot} of {ROUNDS} kills landed in a snapshot or a compaction, {unfinished} left one half done"
    );
}

/// A supervisor writes snapshots in the background as its journal grows and one at a clean
/// shutdown; a later open starts from the newest and gives the full replay's manifests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_snapshots_in_the_background_and_at_shutdown() {
    use procjournal::supervisor::{Command as Cmd, Services, Supervisor, SupervisorConfig};
    let dir = tempfile::tempdir().expect("root");
    let rt = dir.path().join("rt");
    let mut config = SupervisorConfig::new(&rt);
    // Supervision, not admission, is under test: an explicit host limit (the live bound's
    // default), so that the machine's cores and memory do not decide how many run at once.
    config.admission = procjournal::admission::AdmissionConfig::max_concurrent(
        procjournal::limits::LIVE_PROCESSES_DEFAULT,
    );
    config.durability = Durability::Os;
    config.snapshots.after_bytes_min = 1;
    config.snapshots.at_shutdown_bytes_min = 1;
    config.snapshots.check_every = Duration::from_millis(20);
    let (sup, _) = Supervisor::open(config, Services::noop())
        .await
        .expect("open supervisor");
    let snapshots = rt.join("snapshots");
    let count = || {
        std::fs::read_dir(&snapshots).map_or(0, |d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".snap"))
            })
            .count()
        })
    };
    for _ in 0..3 {
        let prepared = sup
            .prepare(Cmd::new("true").cwd(dir.path()))
            .expect("prepare");
        let handle = sup.start(prepared).await.expect("start");
        tokio::time::timeout(HANG_GUARD, sup.wait(&handle, None))
            .await
            .expect("wait hung")
            .expect("wait");
    }
    tokio::time::timeout(HANG_GUARD, async {
        while count() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("no background snapshot");
    sup.shutdown(Duration::from_secs(1)).await;
    drop(sup);
    let journal_last = {
        let (records, _) = JournalReader::open(&rt)
            .expect("reader")
            .records(1)
            .expect("records");
        records.last().map_or(0, |r| r.position.seq)
    };
    let (want, want_report) = full_replay(&rt);
    let (lc, recovery, replay) = Lifecycle::open(&rt, options()).expect("reopen");
    assert!(recovery.is_clean(), "{recovery:?}");
    assert!(replay.is_clean(), "{replay:?}");
    let from = replay.snapshot_seq.expect("restored from a snapshot");
    assert!(from <= journal_last, "{from} > {journal_last}");
    assert_eq!(*lc.store(), want);
    assert_eq!(replay.of_records(), want_report);
    assert!((1..=2).contains(&count()), "{} snapshots kept", count());
}

/// `procjournal journal compact` offline: a first run writes a snapshot and removes nothing, a
/// second (after more events) removes the segments below the first; `journal manifests` and
/// `journal verify` read the compacted root as they read the whole one.
#[test]
fn journal_compact_from_the_command_line() {
    let bin = env!("CARGO_BIN_EXE_procjournal");
    let root = tempfile::tempdir().expect("root");
    let mirror = tempfile::tempdir().expect("mirror");
    let run = |args: &[&str]| {
        let out = Command::new(bin)
            .args(args)
            .arg("--root")
            .arg(root.path())
            .output()
            .expect("run procjournal");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let grow = |dir: &Path, from: u64, to: u64| {
        let (mut lc, _, _) = Lifecycle::open(dir, options()).expect("open");
        append(&mut lc, from, to);
    };
    grow(root.path(), 0, 400);
    let (code, out) = run(&["journal", "compact"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("snapshot at seq 400") && out.contains("only snapshot"),
        "{out}"
    );
    grow(root.path(), 400, 800);
    let (code, out) = run(&["journal", "compact", "--json"]);
    assert_eq!(code, Some(0), "{out}");
    let line: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(line["snapshot"]["seq"], 800, "{out}");
    assert!(
        line["snapshot"]["compacted"]["removed_segments"].as_u64() > Some(0),
        "{out}"
    );
    let (code, out) = run(&["journal", "verify"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("compacted: the records below seq"), "{out}");
    // The manifests of the compacted root are the mirror's, line for line.
    grow(mirror.path(), 0, 800);
    let (code, compacted) = run(&["journal", "manifests", "--json"]);
    assert_eq!(code, Some(0), "{compacted}");
    let whole = Command::new(bin)
        .args(["journal", "manifests", "--json", "--root"])
        .arg(mirror.path())
        .output()
        .expect("manifests of the mirror");
    let whole = String::from_utf8_lossy(&whole.stdout).into_owned();
    let manifests = |text: &str| -> Vec<String> {
        let lines: Vec<&str> = text.lines().collect();
        lines[..lines.len() - 1]
            .iter()
            .map(|l| (*l).to_owned())
            .collect()
    };
    assert_eq!(manifests(&compacted), manifests(&whole));
    let report: serde_json::Value =
        serde_json::from_str(compacted.lines().last().expect("report")).expect("json");
    assert_eq!(report["replay"]["snapshot_seq"], 800, "{compacted}");
}
