//! What a writer's open files off its heap, seen from outside: `run` (one command, a brief
//! writer) opens no spill file, where the daemon (a lasting one) moves the journal's index and
//! the settled manifests of the same root into spill files at open. The spill files are
//! unnamed (`O_TMPFILE` in the root's `journal/`), so they show only in `/proc/<pid>/fd` and
//! `/proc/<pid>/maps`, as `<root>/journal/#<inode> (deleted)`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;

use crate::common::daemon::{Daemon, bin, client};

/// A root of 400 finished processes of the deterministic workload (4 800 records, past the
/// index's 4 096 worth sealing) in segments of 64 KiB, so that most of them are in segments a
/// writer leaves.
fn root_with_history(root: &Path) {
    use procjournal::lifecycle::{Lifecycle, workload};
    use procjournal::{Durability, JournalOptions};
    let options = JournalOptions {
        durability: Durability::Os,
        segment_bytes: 64 * 1024,
    };
    let (mut lc, _, _) = Lifecycle::open(root, options).unwrap();
    for n in 0..400 * workload::PHASES {
        let (id, event) = workload::event(n);
        lc.append(id, &event).unwrap();
    }
}

/// The spill files `pid` holds open or mapped: unnamed files in `root`'s journal directory.
fn spill_files(pid: u32, root: &Path) -> Vec<String> {
    let prefix = format!("{}/journal/#", root.display());
    let mut found: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
        .map(|target| target.display().to_string())
        .chain(
            std::fs::read_to_string(format!("/proc/{pid}/maps"))
                .unwrap()
                .lines()
                .filter_map(|line| line.split_whitespace().nth(5).map(str::to_owned)),
        )
        .filter(|path| path.starts_with(&prefix))
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn run_opens_brief_and_keeps_no_spill_file_where_the_daemon_opens_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    root_with_history(&root);

    // The command says it runs once `run`'s open is done, and ends when its stdin does.
    let mut run = bin()
        .args(["run", "--root"])
        .arg(&root)
        .args(["--", "sh", "-c", "echo running; read line"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(run.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "running\n");
    let held = spill_files(run.id(), &root);
    writeln!(run.stdin.take().unwrap(), "done").unwrap();
    let status = run.wait().unwrap();
    assert!(status.success(), "run: {status}");
    assert!(held.is_empty(), "`run` opened spill files: {held:?}");

    let daemon = Daemon::start(&root);
    let held = spill_files(daemon.child.id(), &root);
    let (code, _, err) = client(&root, &["shutdown"]);
    assert_eq!(code, 0, "{err}");
    // The journal's sealed index (a run and its filter) and the settled manifests, at least.
    assert!(held.len() >= 2, "the daemon's spill files: {held:?}");
}
