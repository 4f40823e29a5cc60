//! The command-line conventions, each through the real binary with real processes:
//! exit statuses in the manner of timeout(1) and `docker run` (a command's own status passes
//! through; 125, 126, 127 and 128+N say who failed and how), untrusted strings escaped in every
//! human rendering, `ps` columns and `--json` fields, `logs --tail/--since/-t/--stream-marker`,
//! `run --cwd/--env` and its handle on stderr, repeated Ctrl-C recorded as the stop it caused,
//! `send --text` escapes, `journal dump` decoded, completions and man pages, and the daemon's
//! log line for a refusal.

use crate::common::daemon as daemon_common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use daemon_common::{Daemon, bin, client};
use serde_json::Value;

/// `procjournal run --root ROOT ARGS...`.
fn run(root: &Path, args: &[&str]) -> Output {
    bin()
        .arg("run")
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Offline tool output (no daemon): `journal ...`, `ps`, `logs`.
fn tool(root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = bin()
        .args(args)
        .arg("--root")
        .arg(root)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (code(&out), text(&out.stdout), text(&out.stderr))
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// The handle `run` announced on stderr.
fn announced(stderr: &str) -> String {
    let at = stderr
        .find("procjournal: started p-")
        .unwrap_or_else(|| panic!("no handle announced: {stderr}"));
    stderr[at + "procjournal: started ".len()..][..34].to_owned()
}

fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A file that exists but cannot be executed.
fn not_executable(dir: &Path) -> String {
    let path = dir.join("not-executable.sh");
    std::fs::write(&path, "#!/bin/sh\necho never\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn run_passes_the_status_through_and_keeps_125_to_127_for_itself() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let out = run(&root, &["--", "sh", "-c", "exit 3"]);
    assert_eq!(code(&out), 3, "{}", text(&out.stderr));
    // The handle is said once, on stderr, and names the process the journal has.
    let handle = announced(&text(&out.stderr));
    assert_eq!(text(&out.stderr).matches("started p-").count(), 1);
    let (_, listed, _) = tool(&root, &["ps", "--json"]);
    assert!(listed.contains(&handle), "{listed}");

    let out = run(&root, &["--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(code(&out), 128 + 15);
    let out = run(&root, &["--", "procjournal-test-no-such-program"]);
    assert_eq!(code(&out), 127, "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not found"));
    let out = run(&root, &["--", &not_executable(dir.path())]);
    assert_eq!(code(&out), 126, "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not executable"));
    // `capture` answers as `run` does.
    let capture = |cmd: &[&str]| {
        let out = bin()
            .args(["capture", "--root"])
            .arg(&root)
            .arg("--")
            .args(cmd)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        code(&out)
    };
    assert_eq!(capture(&["sh", "-c", "exit 3"]), 3);
    assert_eq!(capture(&["procjournal-test-no-such-program"]), 127);
    assert_eq!(capture(&[&not_executable(dir.path())]), 126);
    // Usage errors are procjournal's own: 125, not clap's 2 (which a child could exit with).
    let out = run(&root, &["--no-such-flag", "--", "true"]);
    assert_eq!(code(&out), 125, "{}", text(&out.stderr));
    let out = bin().arg("no-such-command").output().unwrap();
    assert_eq!(code(&out), 125);
    // Help is no failure, and it documents the statuses.
    let out = bin().args(["run", "--help"]).output().unwrap();
    assert_eq!(code(&out), 0);
    assert!(text(&out.stdout).contains("126") && text(&out.stdout).contains("127"));
}

#[test]
fn wait_and_start_answer_with_the_same_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let _daemon = Daemon::start(root);
    let start = |cmd: &[&str]| {
        let mut args = vec!["start", "--"];
        args.extend_from_slice(cmd);
        client(root, &args)
    };
    let (_, three, _) = start(&["sh", "-c", "exit 3"]);
    let (_, killed, _) = start(&["sh", "-c", "kill -KILL $$"]);
    let (_, sleeper, _) = start(&["sleep", "600"]);
    let (three, killed, sleeper) = (three.trim(), killed.trim(), sleeper.trim());
    assert_eq!(client(root, &["wait", three]).0, 3);
    assert_eq!(client(root, &["wait", killed]).0, 128 + 9);
    let (status, _, err) = client(root, &["wait", "--timeout", "100ms", sleeper]);
    assert_eq!(status, 124, "wait gave up: {err}");
    assert_eq!(client(root, &["stop", sleeper]).0, 0);
    assert_eq!(client(root, &["wait", sleeper]).0, 128 + 15);

    let (status, _, err) = start(&["procjournal-test-no-such-program"]);
    assert_eq!(status, 127, "{err}");
    let (status, _, err) = start(&[&not_executable(dir.path())]);
    assert_eq!(status, 126, "{err}");
    // procjournal's own failures: an unknown handle, no daemon.
    let (status, _, _) = client(root, &["wait", "p-00000000000000000000000000000001"]);
    assert_eq!(status, 125);
    let elsewhere = tempfile::tempdir().unwrap();
    let (status, _, err) = client(elsewhere.path(), &["wait", three]);
    assert_eq!(status, 125, "{err}");
}

/// A label and a command word holding `ESC ] 0 ; title BEL` (which would retitle the user's
/// terminal) print escaped in `ps`, `journal manifests`, `journal dump` and errors; no Rust
/// debug text (`Code(0)`) shows.
#[test]
fn untrusted_strings_print_escaped_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let hostile = "\x1b]0;owned\x07";
    let label = format!("t={hostile}");
    let out = run(
        root,
        &["--label", &label, "--", "sh", "-c", "exit 0", hostile],
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let escaped = r"\u{1b}]0;owned\u{7}";
    for args in [
        &["ps"][..],
        &["ps", "--format", "labels,command"],
        &["journal", "manifests"],
        &["journal", "dump"],
    ] {
        let (status, out, _) = tool(root, args);
        assert_eq!(status, 0, "{args:?}");
        assert!(
            !out.contains('\x1b') && !out.contains('\x07'),
            "{args:?}: {out:?}"
        );
        assert!(out.contains(escaped), "{args:?}: {out}");
        assert!(
            !out.contains("Code(") && !out.contains("Signal("),
            "{args:?}: {out}"
        );
    }
    // An error quoting the program's name.
    let out = run(root, &["--", hostile]);
    assert_eq!(code(&out), 127);
    let err = text(&out.stderr);
    assert!(!err.contains('\x1b') && err.contains(escaped), "{err:?}");
    // JSON keeps the string as it is (JSON escapes it).
    let (_, json, _) = tool(root, &["ps", "--json"]);
    assert_eq!(json_lines(&json)[0]["labels"]["t"], hostile);
}

#[test]
fn ps_shows_age_duration_exit_capture_and_tree_with_format_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let _daemon = Daemon::start(root);
    let (_, five, _) = client(root, &["start", "--", "sh", "-c", "echo five; exit 5"]);
    let (_, termed, _) = client(root, &["start", "--", "sh", "-c", "kill -TERM $$"]);
    let (_, running, _) = client(root, &["start", "--", "sleep", "600"]);
    let (five, termed, running) = (five.trim(), termed.trim(), running.trim());
    client(root, &["wait", five]);
    client(root, &["wait", termed]);

    let (status, table, _) = client(root, &["ps"]);
    assert_eq!(status, 0);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "#",
            "HANDLE",
            "STATE",
            "PID",
            "EXIT",
            "AGE",
            "DURATION",
            "BYTES",
            "CAPTURE",
            "TREE",
            "OWNERSHIP",
            "DEADLINE",
            "COMMAND"
        ]
    );
    // Without the number, which comes first.
    let row = |h: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.contains(h))
            .unwrap_or_else(|| panic!("{h} not in {table}"))
            .split_whitespace()
            .skip(1)
            .map(str::to_owned)
            .collect()
    };
    let r = row(five);
    assert_eq!(
        (r[1].as_str(), r[3].as_str(), r[7].as_str()),
        ("exited", "5", "complete")
    );
    let r = row(termed);
    assert_eq!((r[1].as_str(), r[3].as_str()), ("exited", "SIGTERM"));
    let r = row(running);
    assert_eq!(
        (r[1].as_str(), r[3].as_str(), r[7].as_str()),
        ("running", "-", "-")
    );
    // Age and duration are spans like 850ms, 3s, 2m05s.
    for h in [five, termed, running] {
        let r = row(h);
        for span in [&r[4], &r[5]] {
            assert!(
                span.ends_with('s') || span.ends_with('m') || span.ends_with('h'),
                "{span}"
            );
        }
    }

    let (status, picked, _) = client(root, &["ps", "--format", "handle,exit,reason,capture"]);
    assert_eq!(status, 0);
    let mut lines = picked.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["HANDLE", "EXIT", "REASON", "CAPTURE"]
    );
    assert!(
        picked.lines().any(|l| l.starts_with(five)
            && l.split_whitespace().collect::<Vec<_>>() == [five, "5", "exited", "complete"]),
        "{picked}"
    );
    let (status, _, err) = client(root, &["ps", "--format", "handle,nope"]);
    assert_eq!(status, 125);
    assert!(err.contains("unknown column"), "{err}");

    // --json: the protocol's process objects, with the times the columns come from.
    let (_, json, _) = client(root, &["ps", "--json"]);
    let listed = json_lines(&json);
    let p = |h: &str| listed.iter().find(|p| p["handle"] == h).unwrap().clone();
    let done = p(five);
    for field in ["registered_unix_ms", "running_unix_ms", "ended_unix_ms"] {
        assert!(done[field].is_u64(), "{field}: {done}");
    }
    assert_eq!(done["reason"], "exited");
    assert_eq!(done["exit_code"], 5);
    assert_eq!(done["capture"], "complete");
    assert_eq!(done["stop_requests"], 0);
    assert!(done["mechanism"].is_string() && done["ownership"]["assessment"].is_string());
    let live = p(running);
    assert!(
        live["ended_unix_ms"].is_null() && live["reason"].is_null(),
        "{live}"
    );
    assert_eq!(p(termed)["signal"], 15);
    client(root, &["stop", running]);
}

/// The journal's checkpoints of `handle`: (total, at) in order, as `journal dump --json` decodes
/// them.
fn checkpoints(root: &Path, handle: &str) -> Vec<(u64, u64)> {
    let (_, dump, _) = tool(root, &["journal", "dump", "--json"]);
    json_lines(&dump)
        .into_iter()
        .filter(|r| r["decoded"]["handle"] == handle)
        .filter(|r| r["event"] == "output_checkpoint" || r["event"] == "terminal")
        .map(|r| {
            let d = &r["decoded"];
            (
                d["bounds"]["total_bytes"].as_u64().unwrap(),
                d["at_unix_ms"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn logs_tail_since_timestamps_and_stream_markers() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // Output across more than one checkpoint (one a second), each stream with lines of its own.
    let script =
        "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 1.1; done; printf 'no newline'";
    let out = run(root, &["--", "sh", "-c", script]);
    assert_eq!(code(&out), 0);
    let handle = announced(&text(&out.stderr));
    let logs = |args: &[&str]| {
        let mut all = vec!["logs", &handle];
        all.extend_from_slice(args);
        let (status, out, err) = tool(root, &all);
        assert_eq!(status, 0, "{args:?}: {err}");
        out
    };
    let whole = logs(&[]);

    // --tail counts lines of the combined output; an unterminated last line is one.
    let tail = logs(&["--tail", "2"]);
    let last: Vec<&str> = whole.lines().skip(whole.lines().count() - 2).collect();
    assert_eq!(tail.lines().collect::<Vec<_>>(), last);
    assert!(tail.ends_with("no newline"), "{tail:?}");
    assert_eq!(logs(&["--tail", "0"]), "");
    assert_eq!(logs(&["--tail", "100"]), whole);

    // --stream-marker: each stream's lines, in its own order, with its marker.
    let marked = logs(&["--stream-marker"]);
    let of = |marker: &str| -> Vec<String> {
        marked
            .lines()
            .filter_map(|l| l.strip_prefix(marker).map(str::to_owned))
            .collect()
    };
    assert_eq!(of("out|"), ["out1", "out2", "out3", "no newline"]);
    assert_eq!(of("err|"), ["err1", "err2", "err3"]);
    assert_eq!(marked.lines().count(), 7, "{marked}");

    // -t: each line's time is the journal record that first covered its end (none invented).
    let marks = checkpoints(root, &handle);
    assert!(marks.len() >= 2, "{marks:?}");
    let (_, json, _) = tool(root, &["logs", &handle, "-t", "--stream-marker", "--json"]);
    for line in json_lines(&json) {
        let end = line["next_cursor"].as_u64().unwrap();
        let expected = marks.iter().find(|(total, _)| *total >= end).map(|m| m.1);
        assert_eq!(line["time_unix_ms"].as_u64(), expected, "{line}");
        assert!(["stdout", "stderr"].contains(&line["stream"].as_str().unwrap()));
    }
    let timed = logs(&["-t"]);
    for line in timed.lines() {
        let (stamp, _) = line.split_once(' ').unwrap();
        assert!(
            stamp.len() == 24 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
            "{line}"
        );
    }

    // --since a time: from the total of the last record at or before it. The time as -t
    // printed it for the first line the first record covered.
    let (first_total, first_at) = marks[0];
    let (_, json, _) = tool(root, &["logs", &handle, "-t", "--json"]);
    let index = json_lines(&json)
        .iter()
        .position(|l| l["time_unix_ms"] == first_at)
        .unwrap();
    let stamp = timed
        .lines()
        .nth(index)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_owned();
    let since = logs(&["--since", &stamp]);
    let (_, from_cursor, _) = tool(
        root,
        &["logs", &handle, "--since", &format!("cursor:{first_total}")],
    );
    assert_eq!(since, from_cursor);
    assert!(
        whole.ends_with(&since) && since.len() < whole.len(),
        "{since:?}"
    );
    assert_eq!(logs(&["--since", "1970-01-01T00:00:00Z"]), whole);
    assert_eq!(logs(&["--since", "10d"]), whole);
}

/// `logs -f -t` through a daemon: a line waits for the record that gives its time, so none is
/// printed without one.
#[test]
fn logs_follow_with_timestamps_waits_for_each_lines_time() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let _daemon = Daemon::start(root);
    let (_, handle, _) = client(
        root,
        &[
            "start",
            "--",
            "sh",
            "-c",
            "echo first; sleep 1.5; echo second",
        ],
    );
    let handle = handle.trim();
    let (status, out, err) = client(root, &["logs", "-f", "-t", handle]);
    assert_eq!(status, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    for (line, word) in lines.iter().zip(["first", "second"]) {
        assert!(line.ends_with(&format!("Z {word}")), "{line}");
    }
}

#[test]
fn run_takes_cwd_and_env_and_keeps_secrets_out_of_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let work = dir.path().join("work dir");
    std::fs::create_dir(&work).unwrap();
    let out = run(
        &root,
        &[
            "--cwd",
            work.to_str().unwrap(),
            "--env",
            "SECRET=s3cr3t-value-18",
            "--env-persist",
            "PLAIN=kept-value-18",
            "--",
            "sh",
            "-c",
            "pwd; echo \"$SECRET $PLAIN\"",
        ],
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{}\ns3cr3t-value-18 kept-value-18\n", work.display())
    );
    let (_, ps, _) = tool(&root, &["ps", "--json"]);
    assert_eq!(json_lines(&ps)[0]["cwd"], work.to_str().unwrap());
    let (_, dump, _) = tool(&root, &["journal", "dump", "--hex"]);
    assert!(
        !dump.contains("s3cr3t-value-18"),
        "the secret is not in the journal"
    );
    assert!(
        dump.contains("SECRET") && dump.contains("kept-value-18"),
        "{dump}"
    );
    // A missing working directory is refused before anything is recorded.
    let out = run(&root, &["--cwd", "no-such-dir", "--", "true"]);
    assert_eq!(code(&out), 125, "{}", text(&out.stderr));
}

/// Repeated Ctrl-C escalates as `stop` does, and the record says the stop ended it: a workload
/// that ignores SIGINT and exits 0 on SIGTERM is `terminated` (it used to read as a normal
/// exit), and a third Ctrl-C kills one that ignores SIGTERM too, without waiting for the grace.
/// The same on a root a daemon serves, where `run` goes through it.
#[test]
fn repeated_ctrl_c_escalates_and_is_recorded_as_the_stop() {
    on_both_roots(ctrl_c_escalates);
}

/// Runs `check` on a fresh root, then on a fresh root a daemon serves; neither leaves the
/// root's cgroup behind once `run` (and the daemon) are gone.
fn on_both_roots(check: impl Fn(&Path, bool)) {
    for through_daemon in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let daemon = through_daemon.then(|| Daemon::start(root));
        check(root, through_daemon);
        drop(daemon);
        assert!(!base_cgroup_left(root), "the root's cgroup outlived run");
    }
}

fn ctrl_c_escalates(root: &Path, through_daemon: bool) {
    let cases = [
        // (script, what each Ctrl-C does, run's status, state)
        (
            "trap '' INT; trap 'exit 0' TERM; echo ready; while :; do sleep 0.1; done",
            &["interrupting", "stopping"][..],
            0,
            "terminated",
        ),
        (
            "trap '' INT TERM; echo ready; while :; do sleep 0.1; done",
            &["interrupting", "stopping", "killing"][..],
            128 + 9,
            "killed",
        ),
    ];
    for (script, says, status, state) in cases {
        let signal = nix::sys::signal::Signal::SIGINT;
        signalled_run(root, through_daemon, script, signal, says, status, state);
    }
}

/// SIGTERM or SIGHUP to `run` (a job controller cancelling it, its terminal gone) stops its
/// command as a Ctrl-C past the first does, and `run` exits with the command's status once
/// its end is recorded: a workload that exits 0 on SIGTERM is `terminated`, and a second
/// signal kills one that ignores SIGTERM. Left to their default, the signal ended `run` at
/// once: its command's end went unrecorded until the root's next open, and the root's cgroup
/// stayed behind. The same on a root a daemon serves.
#[test]
fn sigterm_or_sighup_to_run_stops_its_command_and_records_the_stop() {
    use nix::sys::signal::Signal::{SIGHUP, SIGTERM};
    on_both_roots(|root, through_daemon| {
        let stops = "trap 'exit 0' TERM; echo ready; while :; do sleep 0.1; done";
        let ignores = "trap '' TERM; echo ready; while :; do sleep 0.1; done";
        signalled_run(
            root,
            through_daemon,
            stops,
            SIGTERM,
            &["stopping"],
            0,
            "terminated",
        );
        let kill = &["stopping", "killing"][..];
        signalled_run(
            root,
            through_daemon,
            ignores,
            SIGHUP,
            kill,
            128 + 9,
            "killed",
        );
    });
}

/// Ctrl-C, SIGTERM or SIGHUP to `capture` stop its command as they do `run`'s, and `capture`
/// still prints the receipt and exits with the command's status: a workload that exits 0 on
/// SIGTERM is `terminated` by the first, and a second signal kills one that ignores SIGTERM.
/// Left to their default, they ended `capture` with no receipt, its command's end unrecorded
/// until the root's next open, and the root's cgroup left behind.
#[test]
fn a_signal_to_capture_stops_its_command_and_the_receipt_says_so() {
    use nix::sys::signal::Signal::{SIGHUP, SIGINT, SIGTERM};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let cases = [
        (
            "trap 'exit 0' TERM; while :; do sleep 0.1; done",
            &[SIGTERM][..],
            0,
            "terminated",
        ),
        (
            "trap '' INT TERM; while :; do sleep 0.1; done",
            &[SIGHUP, SIGINT][..],
            137,
            "killed",
        ),
    ];
    for (started, (script, signals, status, state)) in cases.into_iter().enumerate() {
        let mut child = spawn_script(root, "capture", script);
        let deadline = Instant::now() + Duration::from_secs(30);
        let running = |json: &str| {
            let ps = json_lines(json);
            ps.len() > started && ps.iter().any(|p| p["state"] == "running")
        };
        while !running(&tool(root, &["ps", "--json"]).1) {
            assert!(Instant::now() < deadline, "the captured command never ran");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut said = String::new();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        for signal in signals {
            nix::sys::signal::kill(pid, *signal).unwrap();
            // Said before the next is sent: signals that arrive together are one.
            let mut l = String::new();
            assert!(stderr.read_line(&mut l).unwrap() > 0, "{signal}: {said}");
            assert!(l.contains("stopping"), "{signal}: {l}");
            said.push_str(&l);
        }
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let exit = child.wait().unwrap();
        assert_eq!(exit.code(), Some(status), "{said}{out}");
        let receipt: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(receipt["state"], state, "{receipt}");
        assert_eq!(receipt["fault"]["fault"], "stopped", "{receipt}");
        assert!(receipt["persisted"].as_bool().unwrap(), "{receipt}");
    }
    assert!(
        !base_cgroup_left(root),
        "the root's cgroup outlived capture"
    );
}

/// `procjournal VERB --root ROOT -- sh -c SCRIPT`, its output piped, its input closed.
fn spawn_script(root: &Path, verb: &str, script: &str) -> std::process::Child {
    bin()
        .args([verb, "--root"])
        .arg(root)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Whether the base cgroup of `root` is there (false where cgroups cannot be used).
fn base_cgroup_left(root: &Path) -> bool {
    use procjournal::tree::cgroup::{CgroupBase, base_name};
    // A probe of a base of our own says where bases live; it goes at once.
    let name = format!("procjournal-probe-{}", std::process::id());
    let Ok(probe) = CgroupBase::probe(&name) else {
        return false;
    };
    std::fs::remove_dir(probe.dir()).unwrap();
    let parent = probe.dir().parent().unwrap();
    parent.join(base_name(root)).exists()
}

/// Runs `script` under `run`, sends `run` `signal` once for each of `says` (each after `run`
/// said the one before on stderr: signals that arrive together are one), and checks `run`'s
/// status and the process's recorded state and stop.
fn signalled_run(
    root: &Path,
    through_daemon: bool,
    script: &str,
    signal: nix::sys::signal::Signal,
    says: &[&str],
    status: i32,
    state: &str,
) {
    let mut child = spawn_script(root, "run", script);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    for (press, says) in says.iter().enumerate() {
        nix::sys::signal::kill(pid, signal).unwrap();
        loop {
            let mut l = String::new();
            let read = stderr.read_line(&mut l).unwrap();
            assert!(read > 0, "{signal} {press}: {said}");
            said.push_str(&l);
            if l.contains(says) {
                break;
            }
        }
    }
    let exit = child.wait().unwrap();
    stderr.read_to_string(&mut said).unwrap();
    assert_eq!(exit.code(), Some(status), "{signal}: {said}");
    assert_eq!(
        said.contains("through the daemon"),
        through_daemon,
        "{said}"
    );
    let handle = announced(&said);
    let (_, json, _) = tool(root, &["ps", "--json"]);
    let p = json_lines(&json)
        .into_iter()
        .find(|p| p["handle"] == handle)
        .unwrap();
    assert_eq!(p["state"], state, "{signal}: {p}");
    assert!(p["stop_requests"].as_u64().unwrap() >= 1, "{p}");
}

#[test]
fn send_text_interprets_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let _daemon = Daemon::start(root);
    let (_, handle, _) = client(root, &["start", "--", "cat"]);
    let handle = handle.trim();
    let (status, _, err) = client(
        root,
        &["send", handle, "--close", "--text", r"y\n\x41\tz\\n\e"],
    );
    assert_eq!(status, 0, "{err}");
    assert_eq!(client(root, &["wait", handle]).0, 0);
    let out = bin()
        .args(["logs", "--raw", handle, "--root"])
        .arg(root)
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"y\nA\tz\\n\x1b");
    let (status, _, err) = client(root, &["send", handle, "--text", r"\q"]);
    assert_eq!(status, 125);
    assert!(err.contains("unknown escape"), "{err}");
}

#[test]
fn journal_dump_decodes_each_payload_and_keeps_hex_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let out = run(root, &["--label", "job=dump", "--", "sh", "-c", "exit 6"]);
    assert_eq!(code(&out), 6);
    let (status, json, _) = tool(root, &["journal", "dump", "--json"]);
    assert_eq!(status, 0);
    let records = json_lines(&json);
    let terminal = records.iter().find(|r| r["event"] == "terminal").unwrap();
    assert_eq!(terminal["decoded"]["exit"]["code"], 6);
    assert_eq!(terminal["decoded"]["state"], "exited");
    assert!(terminal.get("payload_hex").is_none(), "{terminal}");
    let registered = records
        .iter()
        .find(|r| r["event"] == "registered_v2")
        .unwrap();
    assert_eq!(registered["decoded"]["command"]["labels"]["job"], "dump");
    // Every lifecycle record decodes.
    assert!(records.iter().all(|r| r["event"].is_string()), "{json}");

    let (_, text, _) = tool(root, &["journal", "dump"]);
    let line = text.lines().find(|l| l.contains(" terminal ")).unwrap();
    assert!(
        line.contains("exit.code=6") && line.contains("state=exited"),
        "{line}"
    );
    assert!(!line.contains("hex="), "{line}");
    let (_, hex, _) = tool(root, &["journal", "dump", "--json", "--hex"]);
    assert!(
        json_lines(&hex)
            .iter()
            .all(|r| r["payload_hex"].is_string())
    );
}

#[test]
fn completions_and_man_pages_come_from_the_parser() {
    for shell in ["bash", "zsh", "fish"] {
        let out = bin().args(["completions", shell]).output().unwrap();
        assert_eq!(code(&out), 0);
        let script = text(&out.stdout);
        assert!(
            script.contains("procjournal") && script.contains("logs"),
            "{shell}"
        );
    }
    let out = bin().arg("man").output().unwrap();
    assert_eq!(code(&out), 0);
    assert!(text(&out.stdout).starts_with(".ie") || text(&out.stdout).contains(".TH procjournal"));
    let out = bin().args(["man", "logs"]).output().unwrap();
    assert!(
        text(&out.stdout).contains("stream\\-marker"),
        "{}",
        text(&out.stdout)
    );
    let out = bin().args(["man", "no-such-command"]).output().unwrap();
    assert_eq!(code(&out), 125);
}

/// The daemon says why it refused something: one log line per refusal.
#[test]
fn the_daemon_logs_a_line_for_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let log = root.join("daemon.log");
    let daemon = Daemon::start_with(root, &["--log-file"]);
    assert_eq!(client(root, &["pause", "--reason", "maintenance"]).0, 0);
    let (status, _, err) = client(root, &["start", "--", "true"]);
    assert_eq!(status, 125, "{err}");
    poll_until("the refusal's log line", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("request refused"))
    });
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("request refused"))
        .unwrap();
    assert!(
        line.contains("op=\"start\"") && line.contains("code=\"refused\""),
        "{line}"
    );
    assert!(line.contains("paused"), "{line}");
    drop(daemon);
}

/// The option blocks of a command's `--help`, by their first line's option names: each block
/// is the option's line and the help lines under it.
fn option_blocks(help: &str) -> std::collections::BTreeMap<String, String> {
    let mut blocks = std::collections::BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in help.lines() {
        let trimmed = line.trim_start();
        let starts_option = trimmed.starts_with('-') && line.len() - trimmed.len() <= 6;
        let ends_block = starts_option || line.trim().is_empty() || !line.starts_with(' ');
        if ends_block && let Some((name, block)) = current.take() {
            blocks.insert(name, block);
        }
        if starts_option {
            let name = trimmed
                .split([' ', ',', '=', '<'])
                .next()
                .unwrap_or("")
                .to_owned();
            current = Some((name, line.to_owned()));
        } else if let Some((_, block)) = &mut current {
            block.push('\n');
            block.push_str(line);
        }
    }
    blocks.extend(current);
    blocks
}

/// `run` and `capture` take the same launch options with the same help (one declaration), and
/// `capture` honours them: working directory, a persisted value, retention.
#[test]
fn capture_takes_every_launch_option_run_takes() {
    let help = |cmd: &str| {
        let out = bin().args([cmd, "--help"]).output().unwrap();
        assert_eq!(code(&out), 0);
        option_blocks(&text(&out.stdout))
    };
    let (run_help, capture_help) = (help("run"), help("capture"));
    assert!(run_help.len() > 10, "{run_help:?}");
    for (name, block) in &run_help {
        if name == "--pty" {
            continue; // a terminal of this one's size for `run`, one of a given size for `capture`
        }
        assert_eq!(capture_help.get(name), Some(block), "{name}");
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let work = dir.path().join("work dir");
    std::fs::create_dir(&work).unwrap();
    let out = bin()
        .args(["capture", "--root"])
        .arg(&root)
        .args([
            "--cwd",
            work.to_str().unwrap(),
            "--env-persist",
            "PLAIN=kept",
        ])
        .args(["--retention", "16MiB", "--", "sh", "-c", "pwd; echo $PLAIN"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let receipt: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    let expected = format!("{}\nkept\n", work.display());
    assert_eq!(
        receipt["streams"][0]["prefix"],
        Value::from(expected),
        "{receipt}"
    );
    let (_, ps, _) = tool(&root, &["ps", "--json"]);
    assert_eq!(json_lines(&ps)[0]["cwd"], work.to_str().unwrap());
}
