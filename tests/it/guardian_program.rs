//! Which program the CLI and the daemon run as each launch's guardian: `procjournal-guardian`
//! from their own directory when it is there and safe, else the `procjournal` binary itself
//! re-executed; and a guardian's panic aborts it in either image.
//!
//! Each case launches a real workload that reports the executable of its parent (its guardian:
//! `/proc/$PPID/exe`), or finds the daemon's guardians among its children and reads theirs. The
//! fallbacks run the binary through a hard link (a copy where the link fails) in a directory of
//! the test's own: alone there, or beside the small guardian in a directory its group may write.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::daemon::{Daemon, client};
use procjournal::tree::guardian::failpoint::PANIC_AT_START;
use procjournal::tree::guardian::{GUARDIAN_ARG, ZYGOTE_ARG};

const CLI: &str = env!("CARGO_BIN_EXE_procjournal");
const SMALL: &str = env!("CARGO_BIN_EXE_procjournal-guardian");
/// A hang guard for the daemon's guardian to appear; it bounds a hang, it measures nothing.
const HANG_GUARD: Duration = Duration::from_secs(30);

fn canonical(path: impl AsRef<Path>) -> PathBuf {
    std::fs::canonicalize(path).unwrap()
}

/// `procjournal run` through `cli` on a fresh root, of a workload that prints its guardian's
/// executable; returns that path.
fn guardian_of_run(cli: &Path) -> PathBuf {
    let root = tempfile::tempdir().unwrap();
    let out = Command::new(cli)
        .args(["run", "--root"])
        .arg(root.path().join("rt"))
        .args(["--", "sh", "-c", "readlink /proc/$PPID/exe"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "run failed: {out:?}");
    let printed = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(printed.trim_end())
}

/// `dir/name`, the same file as `from`: a hard link, or a copy where linking fails.
fn place(from: &str, dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    if std::fs::hard_link(from, &to).is_err() {
        std::fs::copy(from, &to).unwrap();
    }
    to
}

#[test]
fn the_cli_runs_the_small_guardian_installed_beside_it() {
    assert_eq!(guardian_of_run(Path::new(CLI)), canonical(SMALL));
}

#[test]
fn the_daemon_runs_the_small_guardian_installed_beside_it() {
    let root = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(root.path());
    let (code, _, err) = client(root.path(), &["start", "--", "sleep", "300"]);
    assert_eq!(code, 0, "start: {err}");
    let pid = daemon.child.id();
    let deadline = Instant::now() + HANG_GUARD;
    // The daemon forks its guardians from a zygote of the same image: two children, both of
    // the small guardian's executable, the zygote first.
    let found = loop {
        let found = children_of(pid);
        if found.len() >= 2 || Instant::now() >= deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(found.len(), 2, "the daemon's children: {found:?}");
    for child in &found {
        let exe = std::fs::read_link(format!("/proc/{child}/exe")).unwrap();
        assert_eq!(exe, canonical(SMALL), "child {child}");
        let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap();
        assert!(
            String::from_utf8_lossy(&cmdline).contains(ZYGOTE_ARG),
            "child {child} was not started as the zygote or forked from it"
        );
    }
    let (code, _, err) = client(root.path(), &["shutdown"]);
    assert_eq!(code, 0, "shutdown: {err}");
}

#[test]
fn without_a_small_guardian_beside_it_the_cli_re_executes_itself() {
    let dir = tempfile::tempdir().unwrap();
    let cli = place(CLI, dir.path(), "procjournal");
    assert_eq!(guardian_of_run(&cli), canonical(&cli));
}

#[test]
fn a_small_guardian_in_a_directory_others_may_write_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let cli = place(CLI, dir.path(), "procjournal");
    place(SMALL, dir.path(), "procjournal-guardian");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o775)).unwrap();
    assert_eq!(guardian_of_run(&cli), canonical(&cli));
}

#[test]
fn a_small_guardian_others_may_write_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let cli = place(CLI, dir.path(), "procjournal");
    // A copy: a hard link shares its mode with the build's own file.
    let small = dir.path().join("procjournal-guardian");
    std::fs::copy(SMALL, &small).unwrap();
    std::fs::set_permissions(&small, std::fs::Permissions::from_mode(0o775)).unwrap();
    assert_eq!(guardian_of_run(&cli), canonical(&cli));
}

#[test]
fn a_panicking_guardian_aborts_in_either_image() {
    for image in [SMALL, CLI] {
        let out = Command::new(image)
            .arg(GUARDIAN_ARG)
            .env(PANIC_AT_START, "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{image}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("guardian failpoint"), "{image}: {err}");
    }
}

#[test]
fn the_small_guardian_started_by_hand_says_what_it_is() {
    let out = Command::new(SMALL).stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not started as a guardian"), "{err}");
}

/// The pids whose parent is `parent`, from `/proc/*/stat`.
fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}
