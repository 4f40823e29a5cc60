//! A root used only through `run` is snapshotted by its runs. Each `run` is a brief writer: its
//! open replays every record after the newest snapshot, and its close writes a snapshot once
//! that replay (with what it appended) reached the shutdown minimum and a quarter of the newest
//! snapshot (journal-format.md, "When snapshots are taken"). So a few dozen runs bring a small
//! root its first snapshot, and no open after it replays much more than the minimum; the runs
//! in between write none.

use std::path::Path;

use procjournal::limits::SNAPSHOT_AT_SHUTDOWN_BYTES_MIN;

use crate::common::daemon::{bin, client};

/// How many `run -- true` the test makes: each appends about 1.2 KB of records, so this many
/// reach the minimum at least once even at half that.
const RUNS: usize = 110;

/// The seqs of `root`'s snapshots, ascending.
fn snapshot_seqs(root: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(root.join("snapshots")) else {
        return Vec::new();
    };
    let mut seqs: Vec<u64> = entries
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|name| name.strip_suffix(".snap")?.parse().ok())
        .collect();
    seqs.sort_unstable();
    seqs
}

/// The standard output of `procjournal journal <command> --root root <args>`, which must succeed.
fn journal(root: &Path, command: &str, args: &[&str]) -> String {
    let out = bin()
        .args(["journal", command, "--root"])
        .arg(root)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "journal {command}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Every record of `root`'s journal as `(seq, segment index, offset)`, by `journal dump`.
fn records(root: &Path) -> Vec<(u64, u64, u64)> {
    journal(root, "dump", &["--json"])
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let field = |name: &str| v[name].as_u64().unwrap();
            (field("seq"), field("segment_index"), field("offset"))
        })
        .collect()
}

#[test]
fn runs_alone_snapshot_a_small_root_and_replay_little_after() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rt");
    let mut written_by = Vec::new();
    for n in 0..RUNS {
        let before = snapshot_seqs(&root);
        let (code, _, err) = client(&root, &["run", "--", "true"]);
        assert_eq!(code, 0, "{err}");
        if snapshot_seqs(&root).last() != before.last() {
            written_by.push(n);
        }
    }
    assert!(
        !written_by.is_empty(),
        "{RUNS} runs wrote no snapshot: each open replayed everything since the first"
    );
    // Most runs pay no snapshot: each one that wrote one had replayed the minimum first.
    assert!(
        written_by.len() <= RUNS / 20,
        "runs that wrote a snapshot: {written_by:?}"
    );

    // What the next open replays: the records after the newest snapshot, in bytes of journal.
    let newest = *snapshot_seqs(&root).last().unwrap();
    let records = records(&root);
    let after: Vec<_> = records.iter().filter(|(seq, ..)| *seq > newest).collect();
    if let (Some(first), Some(last)) = (after.first(), after.last()) {
        assert_eq!(first.1, last.1, "the test expects one segment: {after:?}");
        let replayed = last.2 - first.2;
        assert!(
            replayed < SNAPSHOT_AT_SHUTDOWN_BYTES_MIN,
            "an open replays {replayed} bytes after the newest snapshot (seq {newest})"
        );
    }
    journal(&root, "verify", &[]);
}
