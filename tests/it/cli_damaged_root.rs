//! A writer that opens a damaged root says so once, and `--strict` refuses it: roots written by
//! the real `procjournal run`, then damaged as a failing disk or a careless hand would (a bad
//! record with good ones after it, both commit slots of a segment, a file in `journal/` that is
//! no segment; in a journal of many segments, one missing or two swapped), each checked against
//! what `journal verify` reports before and after the writers.

use crate::common::daemon as daemon_common;

use std::path::Path;
use std::process::{Output, Stdio};

use daemon_common::{Daemon, bin};
use serde_json::Value;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn cli(root: &Path, before: &[&str], args: &[&str]) -> Output {
    bin()
        .args(before)
        .arg(args[0])
        .arg("--root")
        .arg(root)
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A root holding three finished processes.
fn root_with_history(root: &Path) {
    for n in 0..3 {
        let out = cli(root, &[], &["run", "--", "sh", "-c", &format!("echo {n}")]);
        assert!(out.status.success(), "{out:?}");
    }
}

fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0xff;
    std::fs::write(path, bytes).unwrap();
}

/// A way of damaging a root: what it is, the report field `journal verify --json` must fill,
/// and the damage.
type Damage = (&'static str, &'static str, fn(&Path));

/// Each way of damaging a root.
fn damages() -> Vec<Damage> {
    fn first_segment(root: &Path) -> std::path::PathBuf {
        root.join("journal/00000000000000000000.log")
    }
    vec![
        ("a bad record before good ones", "damaged", |root| {
            // Inside the first record's payload (records start at 160, headers are 48 bytes).
            flip(&first_segment(root), 160 + 48 + 5);
        }),
        ("both commit slots", "damaged_commit_areas", |root| {
            // The slots are the 48 bytes at 64 and at 112; their generation at +8.
            flip(&first_segment(root), 64 + 8);
            flip(&first_segment(root), 112 + 8);
        }),
        ("a stranger in journal/", "unrecognised_files", |root| {
            std::fs::write(root.join("journal/00000000000000000001.log.bak"), b"x").unwrap();
        }),
    ]
}

#[test]
fn writers_warn_once_on_a_damaged_root_and_strict_refuses_it() {
    for (what, field, damage) in damages() {
        let dir = tempfile::tempdir().unwrap();
        root_with_history(dir.path());
        damage(dir.path());
        writers_warn_and_strict_refuses(dir.path(), what, field);
    }
}

/// A root whose journal spans many small segments: 400 records of the deterministic workload
/// (about 130 processes) in segments of 8 KiB, no snapshot, so every manifest depends on every
/// segment.
fn root_with_segments(root: &Path) -> usize {
    use procjournal::lifecycle::{Lifecycle, workload};
    use procjournal::{Durability, JournalOptions};
    let options = JournalOptions {
        durability: Durability::Os,
        segment_bytes: 8192,
    };
    let (mut lc, _, _) = Lifecycle::open(root, options).unwrap();
    for n in 0..400 {
        let (id, event) = workload::event(n);
        lc.append(id, &event).unwrap();
    }
    let segments = std::fs::read_dir(root.join("journal"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension() == Some("log".as_ref()))
        .count();
    assert!(segments >= 4, "{segments} segments");
    segments
}

fn segment(root: &Path, index: u64) -> std::path::PathBuf {
    root.join(format!("journal/{index:020}.log"))
}

#[test]
fn a_missing_or_swapped_segment_is_damage_writers_say_and_strict_refuses() {
    // A segment of the middle deleted, and two segments' names swapped (as a careless restore
    // from backup would): each loses processes the journal acknowledged.
    let damages: [Damage; 3] = [
        ("a missing middle segment", "gaps", |root| {
            std::fs::remove_file(segment(root, 2)).unwrap();
        }),
        ("a missing last segment", "missing_segments", |root| {
            let last = std::fs::read_dir(root.join("journal")).unwrap().count() as u64;
            let mut index = last;
            while !segment(root, index).exists() {
                index -= 1;
            }
            std::fs::remove_file(segment(root, index)).unwrap();
        }),
        ("two segments' names swapped", "bad_segments", |root| {
            let tmp = root.join("journal/swap");
            std::fs::rename(segment(root, 1), &tmp).unwrap();
            std::fs::rename(segment(root, 2), segment(root, 1)).unwrap();
            std::fs::rename(&tmp, segment(root, 2)).unwrap();
        }),
    ];
    for (what, field, damage) in damages {
        let dir = tempfile::tempdir().unwrap();
        root_with_segments(dir.path());
        damage(dir.path());
        writers_warn_and_strict_refuses(dir.path(), what, field);
    }
}

/// `journal verify` reports the damage in `field`; `run` and `capture` under `--strict` refuse
/// with the reason before the command runs; without it they run and warn exactly once; offline
/// `ps` warns too.
fn writers_warn_and_strict_refuses(root: &Path, what: &str, field: &str) {
    let out = bin()
        .args(["journal", "verify", "--json", "--root"])
        .arg(root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{what}: {out:?}");
    let report: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert!(
        !report[field].as_array().unwrap().is_empty(),
        "{what}: {field} empty in {report}"
    );

    // Strict: refused with the reason, 125, the command never ran, and the journal is as it
    // was (a refusal repairs nothing that would hide the damage from a later look).
    let journal_before = journal_bytes(root);
    let marker = root.join("ran");
    let touch = format!("touch '{}'", marker.display());
    for before in [&["--strict"][..], &[][..]] {
        let mut args = vec!["run"];
        if before.is_empty() {
            args.push("--strict");
        }
        args.extend(["--", "sh", "-c", &touch]);
        let out = cli(root, before, &args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{what}: {out:?}");
        assert!(
            stderr.contains("the journal is damaged ("),
            "{what}: {stderr}"
        );
        assert!(
            stderr.contains("refusing to open it (strict)"),
            "{what}: {stderr}"
        );
        assert!(!marker.exists(), "{what}: the command ran under --strict");
        assert!(
            journal_bytes(root) == journal_before,
            "{what}: a strict refusal changed the journal"
        );
    }
    let out = cli(root, &["--strict"], &["capture", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{what}: capture {out:?}");

    // Not strict: the run goes on, and says so exactly once.
    let out = cli(root, &[], &["run", "--", "sh", "-c", &touch]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{what}: {out:?}");
    assert!(marker.exists(), "{what}");
    assert_eq!(
        stderr.matches("warning:").count(),
        1,
        "{what}: one warning: {stderr}"
    );
    assert!(
        stderr.contains("the journal is damaged ("),
        "{what}: {stderr}"
    );
    assert!(stderr.contains("--strict refuses"), "{what}: {stderr}");
    let out = cli(root, &[], &["capture", "--", "true"]);
    assert_eq!(
        text(&out.stderr).matches("warning:").count(),
        1,
        "{what}: {out:?}"
    );

    // `ps` without a daemon says it too.
    let out = cli(root, &[], &["ps"]);
    assert!(
        text(&out.stderr).contains("warning: the journal is damaged ("),
        "{what}: {out:?}"
    );
    // And the writers that went on left the damage where `journal verify` finds it.
    let out = bin()
        .args(["journal", "verify", "--root"])
        .arg(root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{what}: {out:?}");
}

/// Every file of `journal/`, by name, with its bytes.
fn journal_bytes(root: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(root.join("journal"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_daemon_logs_the_damage_ps_shows_it_and_strict_refuses_to_serve() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    root_with_history(root);
    let (_, _, damage) = damages().remove(0);
    damage(root);

    let out = bin()
        .args(["serve", "--strict", "--root"])
        .arg(root)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        text(&out.stderr).contains("refusing to open it (strict)"),
        "{out:?}"
    );

    let mut daemon = Daemon::start(root);
    let out = cli(root, &[], &["ps"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stderr.contains("warning: the daemon opened a damaged root: the journal is damaged ("),
        "{stderr}"
    );
    let out = cli(root, &[], &["shutdown"]);
    assert!(out.status.success(), "{out:?}");
    daemon.wait_exit();
    let mut log = String::new();
    std::io::Read::read_to_string(daemon.child.stderr.as_mut().unwrap(), &mut log).unwrap();
    assert_eq!(log.matches("opening a damaged root").count(), 1, "{log}");
}
