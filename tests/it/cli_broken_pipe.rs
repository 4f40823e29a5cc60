//! Every subcommand, its stdout a pipe whose reader is already gone (`procjournal X | true`),
//! ends quietly: no panic, no exit 101, and the status it would have had otherwise where that
//! is a verdict (`wait`, `capture`). The commands are enumerated from the parser itself, so a
//! new one fails here until it has an invocation below.
//!
//! Each runs twice: with stderr read by the test (it must not say "panicked"), and with stderr
//! into the same closed pipe (`2>&1 | true`), where only the status can tell a panic.

use crate::common::daemon as daemon_common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use daemon_common::{Daemon, bin, client};

/// Which root an invocation runs against.
#[derive(Clone, Copy)]
enum On {
    /// The root a daemon serves.
    Served,
    /// A root no daemon serves (the commands' own supervisor, or the offline tools).
    Offline,
    /// No root at all.
    None,
}

/// One invocation: the command path (`journal dump`), its arguments after the path (`H` is
/// the finished process, `L1`..`L3` live ones, `T` a live one with a terminal), the root, and
/// the status it must exit with (`None`: any but a panic's, when it races its own output).
struct Case {
    path: &'static str,
    args: &'static [&'static str],
    on: On,
    status: Option<i32>,
}

const fn case(
    path: &'static str,
    args: &'static [&'static str],
    on: On,
    status: Option<i32>,
) -> Case {
    Case {
        path,
        args,
        on,
        status,
    }
}

/// In the order they run: what ends processes (interrupt, stop) late, `shutdown` last.
const CASES: &[Case] = &[
    case("ps", &[], On::Served, Some(0)),
    case("ps", &["--json"], On::Served, Some(0)),
    case("ps", &[], On::Offline, Some(0)),
    case("ps", &["--json"], On::Offline, Some(0)),
    case("logs", &["H"], On::Served, Some(0)),
    case("logs", &["H"], On::Offline, Some(0)),
    case("wait", &["H"], On::Served, Some(3)),
    case("wait", &["--json", "H"], On::Served, Some(3)),
    case("admission", &[], On::Served, Some(0)),
    case("admission", &["--json"], On::Served, Some(0)),
    case("pause", &[], On::Served, Some(0)),
    case("pause", &["--json"], On::Served, Some(0)),
    case("resume", &[], On::Served, Some(0)),
    case("resume", &["--json"], On::Served, Some(0)),
    case("start", &["--", "true"], On::Served, Some(0)),
    case("start", &["--json", "--", "true"], On::Served, Some(0)),
    case("restart", &["H"], On::Served, Some(0)),
    case("restart", &["--json", "H"], On::Served, Some(0)),
    case(
        "capture",
        &["--", "sh", "-c", "echo hi; exit 4"],
        On::Served,
        Some(4),
    ),
    case(
        "capture",
        &["--", "sh", "-c", "echo hi; exit 4"],
        On::Offline,
        Some(4),
    ),
    // The command is stopped when its output cannot be delivered, or has ended before.
    case("run", &["--", "sh", "-c", "echo hi"], On::Served, None),
    case("run", &["--", "sh", "-c", "echo hi"], On::Offline, None),
    case("send", &["--text", "x", "L1"], On::Served, Some(0)),
    case(
        "send",
        &["--json", "--text", "x", "L1"],
        On::Served,
        Some(0),
    ),
    case("await-input", &["L1"], On::Served, Some(0)),
    case("resize", &["T", "30x100"], On::Served, Some(0)),
    case("clean", &[], On::Served, Some(0)),
    case("clean", &["--json", "--dry-run"], On::Served, Some(0)),
    case("clean", &["--dry-run"], On::Offline, Some(0)),
    case("journal verify", &[], On::Served, Some(0)),
    case("journal verify", &["--json"], On::Served, Some(0)),
    case("journal dump", &[], On::Served, Some(0)),
    case("journal dump", &["--json"], On::Served, Some(0)),
    case("journal manifests", &[], On::Served, Some(0)),
    case("journal manifests", &["--json"], On::Served, Some(0)),
    case("journal compact", &[], On::Offline, Some(0)),
    case("spool cat", &["H"], On::Served, Some(0)),
    case("spool verify", &[], On::Served, Some(0)),
    case("completions", &["bash"], On::None, Some(0)),
    case("completions", &["zsh"], On::None, Some(0)),
    case("man", &[], On::None, Some(0)),
    case("man", &["run"], On::None, Some(0)),
    case("help", &[], On::None, Some(0)),
    // No server listens on port 1: the failure to connect, said into the closed pipe (its
    // output into a closed pipe with a server is `tests/it/fleet.rs`'s to drive).
    case(
        "fleet status",
        &["--fleet", "nats://127.0.0.1:1"],
        On::None,
        Some(125),
    ),
    case(
        "fleet ps",
        &["--fleet", "nats://127.0.0.1:1"],
        On::None,
        Some(125),
    ),
    case(
        "fleet logs",
        &[
            "--fleet",
            "nats://127.0.0.1:1",
            "n1/p-01a2431a606e71ce8a46ddd2d98fafc6",
        ],
        On::None,
        Some(125),
    ),
    case(
        "fleet events",
        &["--fleet", "nats://127.0.0.1:1"],
        On::None,
        Some(125),
    ),
    // Its stdin: one initialize request, then end of input.
    case("mcp", &[], On::Served, Some(0)),
    case("interrupt", &["L2"], On::Served, Some(0)),
    case("stop", &["L3"], On::Served, Some(0)),
    case("stop", &["--json", "T"], On::Served, Some(0)),
    // `serve` is driven on a root of its own (below); its line is here for the enumeration.
    case("serve", &[], On::None, Some(0)),
    case("shutdown", &[], On::Served, Some(0)),
];

const MCP_INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// Every leaf command of the parser, as its path (`journal dump`), `help` included.
fn leaf_commands() -> BTreeSet<String> {
    use clap::CommandFactory;
    fn walk(prefix: &str, command: &clap::Command, into: &mut BTreeSet<String>) {
        for sub in command.get_subcommands() {
            let path = format!("{prefix}{}", sub.get_name());
            // clap's `help` takes command paths as its words: one leaf.
            if sub.has_subcommands() && sub.get_name() != "help" {
                walk(&format!("{path} "), sub, into);
            } else {
                into.insert(path);
            }
        }
    }
    let mut command = procjournal::cli::Cli::command();
    command.build();
    let mut paths = BTreeSet::new();
    walk("", &command, &mut paths);
    // The `help` each command group gets is clap's own; the top level's is covered.
    paths.retain(|p| !p.ends_with(" help"));
    paths
}

/// A pipe whose reader is closed: every write to it fails with EPIPE.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    writer
}

/// Replaces the placeholders of `args` with the handles of the setup.
fn resolved(args: &[&str], handles: &[(&str, String)]) -> Vec<String> {
    args.iter()
        .map(|a| {
            handles
                .iter()
                .find(|(k, _)| k == a)
                .map_or_else(|| (*a).to_owned(), |(_, h)| h.clone())
        })
        .collect()
}

/// Runs `case` with stdout into a closed pipe (stderr too, when `stderr_too`); returns the
/// status and what stderr said (nothing when it went into the pipe).
fn drive(
    case: &Case,
    root: Option<&Path>,
    args: &[String],
    stderr_too: bool,
) -> (Option<i32>, String) {
    let mut command: Command = bin();
    let mut words = case.path.split(' ');
    let first = words.next().unwrap();
    command.arg(first);
    command.args(words);
    if let Some(root) = root {
        command.arg("--root").arg(root);
    }
    command.args(args);
    let pipe = closed_pipe();
    command.stdout(pipe.try_clone().unwrap());
    command.stderr(if stderr_too {
        Stdio::from(pipe)
    } else {
        Stdio::piped()
    });
    command.stdin(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    if case.path == "mcp" {
        std::io::Write::write_all(&mut stdin, format!("{MCP_INIT}\n").as_bytes()).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    // Killed by a signal is no quiet end either: the code is then none.
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn started(root: &Path, args: &[&str]) -> String {
    let mut full = vec!["start"];
    full.extend_from_slice(args);
    let (code, out, err) = client(root, &full);
    assert_eq!(code, 0, "{err}");
    out.trim().to_owned()
}

#[test]
fn every_subcommand_ends_quietly_into_a_closed_pipe() {
    let leaves = leaf_commands();
    let covered: BTreeSet<String> = CASES.iter().map(|c| c.path.to_owned()).collect();
    let missing: Vec<&String> = leaves.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "no closed-pipe invocation for {missing:?}: add one to CASES"
    );
    let stale: Vec<&String> = covered.difference(&leaves).collect();
    assert!(
        stale.is_empty(),
        "CASES names commands the parser has not: {stale:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served");
    let offline = dir.path().join("offline");
    let daemon = Daemon::start(&served);
    let (handles, offline_handle) = populate(&served, &offline);

    let mut failures = Vec::new();
    for case in CASES {
        let (root, handles) = match case.on {
            On::Served => (Some(served.as_path()), handles.clone()),
            On::Offline => (Some(offline.as_path()), vec![("H", offline_handle.clone())]),
            On::None => (None, Vec::new()),
        };
        if case.path == "serve" {
            failures.extend(serve_case(&dir.path().join("own")));
            continue;
        }
        let args = resolved(case.args, &handles);
        // `shutdown` ends the daemon: only once, its stderr read.
        let modes: &[bool] = if case.path == "shutdown" {
            &[false]
        } else {
            &[false, true]
        };
        for &stderr_too in modes {
            let (code, err) = drive(case, root, &args, stderr_too);
            let quiet = code.is_some() && code != Some(101) && !err.contains("panicked");
            let expected = case.status.is_none_or(|s| code == Some(s));
            if !quiet || !expected {
                failures.push(format!(
                    "{} {args:?} (stderr {}): status {code:?}, want {:?}; stderr: {err}",
                    case.path,
                    if stderr_too { "closed too" } else { "read" },
                    case.status,
                ));
            }
        }
    }
    drop(daemon);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A finished process `H` and live ones on the served root, a finished one on the offline root:
/// the placeholders' handles, and the offline one's.
fn populate(served: &Path, offline: &Path) -> (Vec<(&'static str, String)>, String) {
    let finished = started(served, &["--", "sh", "-c", "echo hi; exit 3"]);
    assert_eq!(client(served, &["wait", &finished]).0, 3);
    let handles = vec![
        ("H", finished),
        ("L1", started(served, &["--", "sleep", "1000"])),
        // Interrupted in both modes: SIGINT ignored, so that it is live the second time too.
        (
            "L2",
            started(served, &["--", "sh", "-c", "trap '' INT; sleep 1000"]),
        ),
        ("L3", started(served, &["--", "sleep", "1000"])),
        (
            "T",
            started(served, &["--pty", "24x80", "--", "sleep", "1000"]),
        ),
    ];
    // The offline root: a finished process of `run`'s own supervisor.
    let (code, _, err) = client(offline, &["run", "--", "sh", "-c", "echo hi; exit 3"]);
    assert_eq!(code, 3, "{err}");
    let (_, list, _) = client(offline, &["ps", "--json"]);
    let offline_handle = serde_json::from_str::<serde_json::Value>(list.lines().next().unwrap())
        .unwrap()["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    (handles, offline_handle)
}

/// `serve` with stdout (and stderr) into closed pipes: it serves, logs a start and an end
/// nobody reads, and exits 0 at `shutdown`.
fn serve_case(root: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for stderr_too in [false, true] {
        let pipe = closed_pipe();
        let mut child = bin()
            .args(["serve", "--max-concurrent", "4", "--root"])
            .arg(root)
            .stdin(Stdio::null())
            .stdout(pipe.try_clone().unwrap())
            .stderr(if stderr_too {
                Stdio::from(pipe)
            } else {
                Stdio::piped()
            })
            .spawn()
            .unwrap();
        let mut ready = false;
        while !ready {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            ready = client(root, &["ps"]).2.is_empty();
            std::thread::yield_now();
        }
        let handle = started(root, &["--", "sh", "-c", "echo hi"]);
        client(root, &["wait", &handle]);
        client(root, &["shutdown"]);
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(0) || err.contains("panicked") {
            failures.push(format!(
                "serve (stderr {}): {:?}; stderr: {err}",
                if stderr_too { "closed too" } else { "read" },
                out.status
            ));
        }
    }
    failures
}
