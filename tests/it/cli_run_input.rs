//! `run`'s stdin is its command's input, as for any command run in the foreground: piped bytes
//! arrive exactly, the end of stdin is the end of the command's input, and a command that stops
//! reading early ends the forwarding quietly, with or without a daemon serving the root.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::daemon::{Daemon, bin};

/// A hang guard: a command left waiting for input that never ends would hang the test.
const HANG_GUARD: Duration = Duration::from_secs(60);

fn run(root: &Path, command: &[&str], stdin: Stdio) -> Child {
    bin()
        .arg("run")
        .arg("--root")
        .arg(root)
        .arg("--")
        .args(command)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child` (killing it past the hang guard); its status, stdout and stderr.
fn finish(mut child: Child) -> (i32, Vec<u8>, String) {
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        out.read_to_end(&mut bytes).unwrap();
        bytes
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        err.read_to_string(&mut text).unwrap();
        text
    });
    let deadline = Instant::now() + HANG_GUARD;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("run still waiting after {HANG_GUARD:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let code = status.code().unwrap_or(-1);
    (code, reader.join().unwrap(), errors.join().unwrap())
}

/// Every case, on `root` (served by a daemon or not).
fn check_every_case(root: &Path) {
    // Piped bytes, binary and without a final newline, arrive exactly; the end of stdin ends
    // `cat`.
    let input: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut child = run(root, &["cat"], Stdio::piped());
    let mut stdin = child.stdin.take().unwrap();
    let sent = input.clone();
    let writer = std::thread::spawn(move || stdin.write_all(&sent).unwrap());
    let (code, out, err) = finish(child);
    writer.join().unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(out == input, "{} bytes out of {}", out.len(), input.len());
    // No stdin at all: the command sees the end of its input at once.
    let (code, out, err) = finish(run(root, &["wc", "-c"], Stdio::null()));
    assert_eq!(
        (code, String::from_utf8_lossy(&out).trim()),
        (0, "0"),
        "{err}"
    );
    // A command that reads one line of an endless input and exits: the forwarding ends
    // quietly, as a pipe's writer does.
    let mut yes = Killed(Command::new("yes").stdout(Stdio::piped()).spawn().unwrap());
    let stdout = yes.0.stdout.take().unwrap();
    let (code, out, err) = finish(run(root, &["head", "-n", "1"], Stdio::from(stdout)));
    assert_eq!((code, out.as_slice()), (0, &b"y\n"[..]), "{err}");
    assert!(!err.contains("input to"), "{err}");
}

/// `yes`, killed and reaped when the test is done with it.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn run_passes_its_stdin_to_the_command() {
    let dir = tempfile::tempdir().unwrap();
    check_every_case(&dir.path().join("rt"));
}

#[test]
fn run_through_a_daemon_passes_its_stdin_to_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    check_every_case(&daemon.root);
}

/// The end of `run`'s stdin closes the command's input without a sync of its own: a cold
/// `run -- cat </dev/null` on an existing root (`cat` ends only once its input is closed, so
/// the close is always recorded) keeps to the syncs of journal-format.md's table, counted by
/// strace: the registration's and the terminal events' (a brief writer's close flushes
/// nothing), and, only if the command outlived the publication delay (strace slows it), the
/// one that makes its guardian's scope and its `running` durable then. The journal says which:
/// that publication's record comes before the terminal event only then.
#[test]
fn closing_the_input_at_the_end_of_stdin_adds_no_sync() {
    if Command::new("strace").arg("-V").output().is_err() {
        println!("skipped: strace is not installed, so the syncs cannot be counted");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rt");
    let (code, _, err) = finish(run(&root, &["true"], Stdio::null()));
    assert_eq!(code, 0, "{err}");
    let trace = dir.path().join("trace");
    let status = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_procjournal"))
        .arg("run")
        .arg("--root")
        .arg(&root)
        .args(["--", "cat"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{status:?}");
    let text = std::fs::read_to_string(&trace).unwrap();
    let syncs: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("fsync(") || l.contains("fdatasync("))
        .collect();
    let expected = 2 + usize::from(published_before_terminal(&root));
    assert_eq!(syncs.len(), expected, "{syncs:#?}");
    let manifests = bin()
        .args(["journal", "manifests", "--json", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&manifests.stdout);
    let cat = text.lines().rfind(|l| l.contains("\"program\":\"cat\""));
    assert!(
        cat.is_some_and(|m| m.contains("\"input_closed\":true")),
        "the close is recorded: {text}"
    );
}

/// Whether the last process of `root` had a publication recorded before its terminal event:
/// its `running` published at the publication delay, while it still ran, rather than with its
/// end (`journal dump --json`, record by record).
fn published_before_terminal(root: &Path) -> bool {
    let dump = bin()
        .args(["journal", "dump", "--json", "--root"])
        .arg(root)
        .output()
        .unwrap();
    assert!(dump.status.success(), "{dump:?}");
    let events: Vec<String> = String::from_utf8_lossy(&dump.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"].to_string())
        .collect();
    let last_registration = events
        .iter()
        .rposition(|e| e.contains("registered"))
        .expect("a registration");
    let after = &events[last_registration..];
    let terminal = after
        .iter()
        .position(|e| e == "\"terminal\"")
        .expect("a terminal event");
    after[..terminal]
        .iter()
        .any(|e| e == "\"lifecycle_published\"")
}
