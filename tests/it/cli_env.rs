//! `--env NAME` and `--env-file FILE` with the real binary: the values reach the command, and no
//! process's `/proc/PID/cmdline` (procjournal's first of all) holds them while it runs, where
//! `--env NAME=value` would show them to every local user. Through `run`'s own supervisor and
//! through the daemon (`start`, `restart`); and the errors: an unset NAME, a malformed line.
//!
//! The command writes what it got to a file (never to its own argv), then blocks on a FIFO
//! until the test has read every command line.

use crate::common::daemon as daemon_common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use daemon_common::{Daemon, bin, client};

const SECRET: &str = "s3cret-7f1d9c";
const FILE_SECRET: &str = "f1le-secret-42aa";

/// Every process's command line that holds `needle`, as (pid, command line).
fn cmdlines_holding(needle: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // A process may end between the listing and the read.
        if let Ok(bytes) = std::fs::read(entry.path().join("cmdline")) {
            let line = String::from_utf8_lossy(&bytes).replace('\0', " ");
            if line.contains(needle) {
                found.push((name, line));
            }
        }
    }
    found
}

/// Waits until `path` exists (the command has written what it got); bounded only so that a
/// broken build fails instead of hanging.
fn await_file(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::read_to_string(path).unwrap()
}

/// The script: what it got into `got` (written whole, then renamed), then a wait on `fifo`.
fn script(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "printf '%s|%s' \"$TOKEN\" \"$FROM_FILE\" > {d}/got.tmp && mv {d}/got.tmp {d}/got; \
         exec cat {d}/fifo"
    )
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

fn env_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("secrets.env");
    std::fs::write(
        &path,
        format!("# the file's secret\nexport FROM_FILE='{FILE_SECRET}'\n"),
    )
    .unwrap();
    path
}

#[test]
fn run_takes_values_by_name_and_from_a_file_and_argv_shows_neither() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    mkfifo(&dir.path().join("fifo"));
    let file = env_file(dir.path());
    let run = bin()
        .args(["run", "--root"])
        .arg(&root)
        .args(["--env", "TOKEN", "--env-file"])
        .arg(&file)
        .args(["--", "sh", "-c", &script(dir.path())])
        .env("TOKEN", SECRET)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let got = await_file(&dir.path().join("got"));
    assert_eq!(got, format!("{SECRET}|{FILE_SECRET}"));
    // While it runs: procjournal's own command line names the variable, holds no value, and
    // no process anywhere shows one.
    let own = std::fs::read(format!("/proc/{}/cmdline", run.id())).unwrap();
    let own = String::from_utf8_lossy(&own).replace('\0', " ");
    assert!(own.contains("--env TOKEN"), "{own}");
    assert!(!own.contains(SECRET) && !own.contains(FILE_SECRET), "{own}");
    assert_eq!(cmdlines_holding(SECRET), Vec::new());
    assert_eq!(cmdlines_holding(FILE_SECRET), Vec::new());
    // Releases the command.
    drop(
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("fifo"))
            .unwrap(),
    );
    let out = run.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn start_and_restart_through_the_daemon_take_them_too() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let file = env_file(dir.path());
    let _daemon = Daemon::start(&root);
    let got = dir.path().join("got");
    // No FIFO here: the command ends at once, and a restart runs it again.
    let script = format!(
        "printf '%s|%s' \"$TOKEN\" \"$FROM_FILE\" > {0}.tmp && mv {0}.tmp {0}",
        got.display()
    );
    let start = bin()
        .args(["start", "--root"])
        .arg(&root)
        .args(["--env", "TOKEN", "--env-file"])
        .arg(&file)
        .args(["--", "sh", "-c", &script])
        .env("TOKEN", SECRET)
        .output()
        .unwrap();
    assert_eq!(
        start.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&start.stderr)
    );
    let handle = String::from_utf8(start.stdout).unwrap().trim().to_owned();
    assert_eq!(client(&root, &["wait", &handle]).0, 0);
    assert_eq!(
        std::fs::read_to_string(&got).unwrap(),
        format!("{SECRET}|{FILE_SECRET}")
    );
    std::fs::remove_file(&got).unwrap();
    // The withheld values given again the same ways: the new run sees them.
    let restart = bin()
        .args(["restart", "--root"])
        .arg(&root)
        .args(["--env", "TOKEN", "--env-file"])
        .arg(&file)
        .arg(&handle)
        .env("TOKEN", SECRET)
        .output()
        .unwrap();
    assert_eq!(
        restart.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&restart.stderr)
    );
    let again = String::from_utf8(restart.stdout).unwrap().trim().to_owned();
    assert_eq!(client(&root, &["wait", &again]).0, 0);
    assert_eq!(
        std::fs::read_to_string(&got).unwrap(),
        format!("{SECRET}|{FILE_SECRET}")
    );
}

#[test]
fn an_unset_name_and_a_malformed_file_are_refused_by_name_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let marker = dir.path().join("ran");
    let command = format!("touch {}", marker.display());
    let refused = |args: &[&str]| {
        let out = bin()
            .args(["run", "--root"])
            .arg(&root)
            .args(args)
            .args(["--", "sh", "-c", &command])
            .env_remove("PJ_UNSET_FOR_TEST")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(!marker.exists(), "{args:?} ran the command");
        err
    };
    let err = refused(&["--env", "PJ_UNSET_FOR_TEST"]);
    assert!(err.contains("PJ_UNSET_FOR_TEST is not set"), "{err}");

    let bad = dir.path().join("bad.env");
    std::fs::write(&bad, format!("OK=1\n\n# c\nTOKEN = {SECRET}\n")).unwrap();
    let err = refused(&["--env-file", bad.to_str().unwrap()]);
    assert!(err.contains("bad.env") && err.contains("line 4"), "{err}");
    assert!(!err.contains(SECRET), "the error shows the value: {err}");

    std::fs::write(&bad, format!("A=\"{SECRET}\nB=2\n")).unwrap();
    let err = refused(&["--env-file", bad.to_str().unwrap()]);
    assert!(
        err.contains("line 1") && err.contains("not closed"),
        "{err}"
    );
    assert!(!err.contains(SECRET), "the error shows the value: {err}");

    let err = refused(&["--env-file", dir.path().join("none.env").to_str().unwrap()]);
    assert!(err.contains("cannot read --env-file"), "{err}");
}
