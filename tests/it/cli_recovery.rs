//! `spool verify` and the progress line of the offline tools, against roots written by the real
//! `procjournal run`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_procjournal"))
}

fn run_in(root: &Path, args: &[&str]) -> Output {
    bin().args(args).arg("--root").arg(root).output().unwrap()
}

/// Runs `sh -c script` under `procjournal run` on `root`; returns its handle.
fn supervise(root: &Path, script: &str) -> String {
    let out = bin()
        .args(["run", "--root"])
        .arg(root)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let manifests = run_in(root, &["journal", "manifests", "--json"]);
    let text = String::from_utf8(manifests.stdout).unwrap();
    let last: Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .rfind(|v| v.get("handle").is_some())
        .unwrap();
    last["handle"].as_str().unwrap().to_owned()
}

fn segments(root: &Path, handle: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("spool").join(handle))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

fn verify_json(root: &Path) -> (i32, Vec<Value>) {
    let out = run_in(root, &["spool", "verify", "--json"]);
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (out.status.code().unwrap(), lines)
}

#[test]
fn spool_verify_passes_clean_spools_and_names_damage() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let a = supervise(root, "echo first; echo second >&2");
    let b = supervise(root, "head -c 300000 /dev/zero | tr '\\0' x");
    let (code, checks) = verify_json(root);
    assert_eq!(code, 0, "{checks:?}");
    assert_eq!(checks.len(), 2);
    for c in &checks {
        assert_eq!(c["ok"], Value::Bool(true), "{c}");
        assert_eq!(c["total_bytes"], c["journal_total_bytes"], "{c}");
    }
    let b_check = checks.iter().find(|c| c["handle"] == b.as_str()).unwrap();
    assert_eq!(b_check["total_bytes"], Value::from(300_000));

    // One flipped payload byte in the middle of b's output is named with its cursor.
    let seg = &segments(root, &b)[0];
    let mut bytes = std::fs::read(seg).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(seg, &bytes).unwrap();
    let (code, checks) = verify_json(root);
    assert_eq!(code, 1);
    let bad = checks.iter().find(|c| c["handle"] == b.as_str()).unwrap();
    assert_eq!(bad["ok"], Value::Bool(false));
    // In the active (last) segment, the damaged chunk is damage, not a torn tail: valid chunks
    // follow it, so it is reported with the cursors it held and nothing after it is lost (the
    // spool still holds every byte the journal recorded as durable).
    let issues = bad["issues"].to_string();
    assert!(issues.contains("damaged bytes"), "{issues}");
    assert!(!issues.contains("after the last whole chunk"), "{issues}");
    assert!(
        !issues.contains("acknowledged output is missing"),
        "{issues}"
    );
    assert_eq!(bad["total_bytes"], Value::from(300_000), "{bad}");
    assert_eq!(bad["issues"].as_array().unwrap().len(), 1, "{bad}");
    let good = checks.iter().find(|c| c["handle"] == a.as_str()).unwrap();
    assert_eq!(
        good["ok"],
        Value::Bool(true),
        "damage in one spool leaks into another"
    );

    // A spool cut short of what the journal recorded as durable: acknowledged output missing.
    let seg = &segments(root, &a)[0];
    let len = std::fs::metadata(seg).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(seg)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let out = run_in(root, &["spool", "verify", &a]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("NOT OK") && text.contains("acknowledged output is missing"),
        "{text}"
    );

    let out = run_in(root, &["spool", "verify", "p-nothex"]);
    assert_eq!(out.status.code(), Some(125));
}

/// Damage in a sealed segment (recovery scans only the active one) is found by reading: every
/// damaged range is listed, not only the first, and the output after each is still checked.
#[test]
fn spool_verify_lists_every_damaged_range_of_a_sealed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // More than one 8 MiB segment, so that the first is sealed.
    let h = supervise(root, "head -c 9000000 /dev/zero | tr '\\0' x");
    let files = segments(root, &h);
    assert!(files.len() >= 2, "{files:?}");
    let seg = &files[0];
    let mut bytes = std::fs::read(seg).unwrap();
    let len = bytes.len();
    for at in [len / 4, len / 2] {
        bytes[at] ^= 0x01;
    }
    std::fs::write(seg, &bytes).unwrap();
    let (code, checks) = verify_json(root);
    assert_eq!(code, 1, "{checks:?}");
    let issues: Vec<String> = checks[0]["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap().to_owned())
        .collect();
    let damaged = issues
        .iter()
        .filter(|i| i.starts_with("damaged at cursors"))
        .count();
    assert_eq!(damaged, 2, "{issues:?}");
    assert_eq!(issues.len(), 2, "nothing else is wrong: {issues:?}");
}

/// The journal, not the oldest file left, says where retained output starts: a spool whose
/// oldest file was deleted by hand (the journal recorded `retained_from` 0) holds less than the
/// journal says it kept, which is damage (a missing segment file), not retention.
#[test]
fn a_deleted_oldest_spool_file_is_damage_not_retention() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let h = supervise(root, "head -c 9000000 /dev/zero | tr '\\0' x");
    let files = segments(root, &h);
    assert!(files.len() >= 2, "{files:?}");
    let (code, checks) = verify_json(root);
    assert_eq!((code, &checks[0]["retained_from"]), (0, &Value::from(0)));
    std::fs::remove_file(&files[0]).unwrap();
    let first: u64 = files[1]
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .unwrap();

    let (code, checks) = verify_json(root);
    assert_eq!(code, 1, "{checks:?}");
    let issues = checks[0]["issues"].to_string();
    assert!(
        issues.contains(&format!(
            "damaged at cursors 0..{first}: missing segment file"
        )),
        "{issues}"
    );
    assert!(
        checks[0]["gaps"].as_array().unwrap().is_empty(),
        "{checks:?}"
    );

    // `logs` without a daemon says the same: damage, never a retention notice.
    let out = run_in(root, &["logs", &h]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("retention"), "{err}");
    assert!(err.contains("missing segment file"), "{err}");
    assert_eq!(out.stdout.len() as u64, 9_000_000 - first);
}

#[test]
fn the_progress_line_never_reaches_stdout_or_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    supervise(root, "echo hello");
    for args in [
        &["journal", "verify"][..],
        &["journal", "manifests"][..],
        &["journal", "dump", "--json"][..],
    ] {
        // stderr is a pipe here: no progress line at all.
        let plain = run_in(root, args);
        assert!(plain.status.success(), "{args:?}");
        assert!(
            plain.stderr.is_empty(),
            "{args:?}: {:?}",
            String::from_utf8_lossy(&plain.stderr)
        );
        // Forced on, stdout is byte-identical.
        let forced = bin()
            .args(args)
            .arg("--root")
            .arg(root)
            .env("PROCJOURNAL_PROGRESS", "1")
            .output()
            .unwrap();
        assert_eq!(forced.stdout, plain.stdout, "{args:?}");
    }
}

/// Every tool given a root that does not exist says so and exits non-zero
/// (it used to be `spool verify` exiting 0 on a missing root).
#[test]
fn every_tool_refuses_a_root_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-root");
    let handle = "p-00000000000000000000000000000000";
    let tools: [&[&str]; 8] = [
        &["journal", "verify"],
        &["journal", "manifests"],
        &["journal", "dump"],
        &["spool", "verify"],
        &["spool", "cat", handle],
        &["ps"],
        &["logs", handle],
        &["wait", handle],
    ];
    for tool in tools {
        let out = run_in(&missing, tool);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{tool:?}: {err}");
        assert!(
            err.contains("does not exist") || err.contains("no daemon"),
            "{tool:?}: {err}"
        );
        assert!(!missing.exists(), "{tool:?} created the root");
    }
}

/// Client-supplied labels and commands reach a human's terminal escaped.
/// A label holding a newline and an OSC "set title" sequence, and a command whose words hold
/// the same, show up in `ps` and `journal manifests` as visible escapes (`\n`, `\u{1b}`,
/// `\u{7}`), never as raw control bytes; the output itself (`logs`) was already safe text.
#[test]
fn labels_and_commands_are_escaped_in_human_output() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let evil = "a\nb\u{1b}]0;pwned\u{7}";
    let out = bin()
        .args(["run", "--root"])
        .arg(root)
        .arg("--label")
        .arg(format!("k={evil}"))
        .args([
            "--",
            "sh",
            "-c",
            "printf '\\033]0;pwned\\007'; exit 0",
            evil,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for tool in [&["ps"][..], &["journal", "manifests"][..]] {
        let out = run_in(root, tool);
        assert!(out.status.success(), "{tool:?}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            !text.bytes().any(|b| b == 0x1b || b == 0x07),
            "{tool:?} printed a raw control byte: {text:?}"
        );
        let line = text.lines().find(|l| l.contains("pwned")).unwrap_or("");
        assert!(
            line.contains("k=a\\nb\\u{1b}]0;pwned\\u{7}"),
            "{tool:?}: {text:?}"
        );
        assert_eq!(
            text.lines().filter(|l| l.contains("pwned")).count(),
            1,
            "{tool:?}: the label broke the line: {text:?}"
        );
    }
    // The same on a terminal (a pseudo-terminal, through util-linux `script`), where a raw
    // sequence would retitle it: the human output of ps, manifests and the command's own
    // output (logs) shows them escaped.
    let Ok(probe) = std::process::Command::new("script")
        .arg("--version")
        .output()
    else {
        eprintln!("SKIPPED the pseudo-terminal half: util-linux `script` is not installed");
        return;
    };
    assert!(probe.status.success());
    let manifests = run_in(root, &["journal", "manifests", "--json"]);
    let text = String::from_utf8(manifests.stdout).unwrap();
    let handle = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|m| m["handle"].as_str().map(str::to_owned))
        .unwrap();
    let bin = env!("CARGO_BIN_EXE_procjournal");
    let root = root.display();
    // ps and manifests show the label and command escaped; logs strips the title sequence the
    // command printed (safe text drops terminal control sequences).
    for (tool, shows) in [
        (format!("{bin} ps --root {root}"), true),
        (format!("{bin} journal manifests --root {root}"), true),
        (format!("{bin} logs --root {root} {handle}"), false),
    ] {
        let out = std::process::Command::new("script")
            .args(["-q", "-e", "-c", &tool, "/dev/null"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{tool}: {out:?}");
        assert!(
            !out.stdout.windows(2).any(|w| w == b"\x1b]") && !out.stdout.contains(&0x07),
            "{tool} put a raw sequence on the terminal: {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).contains("pwned"),
            shows,
            "{tool}: {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// `logs` and gaps: bytes lost to retention are announced on stderr as
/// `-- N bytes lost at cursor C: reason --` (in text mode; a `--json` page carries `gap`), the
/// intact bytes after them are printed, and `--fail-on-gap` turns the gap into exit status 3.
#[test]
fn logs_announce_every_gap_and_can_fail_on_one() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // 80 MB through a 64 MiB retention: the oldest 8 MiB segments are gone.
    let out = bin()
        .args(["run", "--root"])
        .arg(root)
        .args(["--", "sh", "-c", "head -c 80000000 /dev/zero | tr '\\0' y"])
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let manifests = run_in(root, &["journal", "manifests", "--json"]);
    let text = String::from_utf8(manifests.stdout).unwrap();
    let handle = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.get("handle").and_then(|h| h.as_str()).map(str::to_owned))
        .unwrap();
    let plain = run_in(root, &["logs", &handle]);
    assert_eq!(plain.status.code(), Some(0));
    let err = String::from_utf8_lossy(&plain.stderr);
    let notice = err
        .lines()
        .find(|l| l.starts_with("-- ") && l.ends_with(" --"))
        .unwrap_or_else(|| panic!("no gap notice: {err}"));
    assert!(
        notice.contains("bytes lost at cursor 0: retention"),
        "{notice}"
    );
    let lost: u64 = notice[3..].split(' ').next().unwrap().parse().unwrap();
    assert!(lost > 0);
    assert_eq!(plain.stdout.len() as u64 + lost, 80_000_000);
    assert!(plain.stdout.iter().all(|&b| b == b'y'));
    let strict = run_in(root, &["logs", &handle, "--fail-on-gap"]);
    assert_eq!(strict.status.code(), Some(3));
}

/// `ps` shows whether every output byte was captured. A descendant that holds the
/// output open past the final drain leaves the capture `incomplete`, with the reason in
/// `ps --json`; a plain command is `complete`.
#[test]
fn ps_shows_the_capture_status() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for script in ["echo held; (setsid sleep 2 &)", "echo plain"] {
        let out = bin()
            .args(["run", "--root"])
            .arg(root)
            .args(["--", "sh", "-c", script])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let out = run_in(root, &["ps", "--json"]);
    let listed: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let capture = |i: usize| listed[i]["capture"].as_str().unwrap_or("").to_owned();
    assert!(capture(0).starts_with("incomplete: "), "{listed:?}");
    assert_eq!(capture(1), "complete", "{listed:?}");
    let text = String::from_utf8(run_in(root, &["ps"]).stdout).unwrap();
    assert!(text.contains(" incomplete "), "{text}");
}

/// `spool cat --base64` prints one base64 stream per contiguous run, so the
/// joined output of a spool larger than a page decodes to every byte (it used to pad each 1 MiB
/// page on its own, and a decoder of the joined text got the first MiB only); and
/// `spool verify --json` keeps stdout JSON when the journal is not clean.
#[test]
fn spool_cat_base64_is_one_stream_and_verify_json_stays_json() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // 2.5 MB of bytes that differ by position (page boundaries do not fall on 3-byte ones).
    let h = supervise(root, "seq 1 400000 | head -c 2500001");
    let out = bin()
        .args(["spool", "cat", "--base64", "--root"])
        .arg(root)
        .arg(&h)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "one run, one line");
    let bytes = procjournal::protocol::base64::decode(text.trim_end()).unwrap();
    let expected = std::process::Command::new("sh")
        .args(["-c", "seq 1 400000 | head -c 2500001"])
        .output()
        .unwrap()
        .stdout;
    assert_eq!(bytes.len(), expected.len());
    assert!(
        bytes == expected,
        "the decoded stream differs from the output"
    );

    // A journal that is not clean (a stray file): the note goes to stderr, stdout stays JSON.
    std::fs::write(root.join("journal").join("stray.txt"), b"x").unwrap();
    let out = run_in(root, &["spool", "verify", "--json"]);
    for line in String::from_utf8(out.stdout.clone()).unwrap().lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    }
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the journal is not clean"),
        "{out:?}"
    );
}

/// `spool verify` lists every gap the journal recorded, whole, also when no spool file is left
/// around it: here the spool directory is gone (and the journal recorded output, so that is
/// an issue too).
#[test]
fn spool_verify_lists_recorded_gaps_without_a_spool() {
    use procjournal::lifecycle::event::*;
    use procjournal::lifecycle::{Lifecycle, LifecycleEvent, State};
    use procjournal::spool::{Gap, LossReason};
    use procjournal::{Durability, EventId, JournalOptions};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let id = |n: u8| EventId::from_bytes([n; 16]);
    let ids = LifecycleIds {
        running: id(11),
        terminal: id(12),
        lost: id(13),
        completion: id(14),
    };
    let handle = Handle(id(1));
    let options = JournalOptions {
        durability: Durability::Sync,
        segment_bytes: 8192,
    };
    let (mut lc, _, _) = Lifecycle::open(root, options).unwrap();
    let events = [
        (
            id(2),
            LifecycleEvent::Registered(Registered {
                handle,
                ids,
                command: CommandSpec {
                    program: "true".into(),
                    cwd: "/".into(),
                    ..CommandSpec::default()
                },
                at_unix_ms: 1,
            }),
        ),
        (
            ids.running,
            LifecycleEvent::Running(Running {
                handle,
                pid: 77,
                witness: IdentityWitness {
                    start_time_ticks: 5,
                    boot_id: [1; 16],
                },
                at_unix_ms: 2,
            }),
        ),
        (
            id(3),
            LifecycleEvent::OutputGap(OutputGap {
                handle,
                gap: Gap {
                    from: 5,
                    to: 10,
                    reason: LossReason::DiskFull,
                    errno: 28,
                },
                at_unix_ms: 3,
            }),
        ),
        (
            ids.terminal,
            LifecycleEvent::Terminal(Terminal {
                handle,
                state: State::Exited,
                exit: ExitStatus::Code(0),
                bounds: CursorBounds {
                    retained_from: 0,
                    total_bytes: 20,
                },
                capture: CaptureStatus::Complete,
                reason: "exited".into(),
                at_unix_ms: 4,
            }),
        ),
    ];
    for (event_id, event) in events {
        lc.append(event_id, &event).unwrap();
    }
    drop(lc);
    let (code, checks) = verify_json(root);
    assert_eq!(code, 1, "{checks:?}");
    let gaps: Vec<&str> = checks[0]["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap())
        .collect();
    assert_eq!(gaps.len(), 1, "{checks:?}");
    assert!(
        gaps[0].starts_with("lost at cursors 5..10: disk full"),
        "{gaps:?}"
    );
    assert!(
        checks[0]["issues"]
            .to_string()
            .contains("the journal records output but the spool is missing"),
        "{checks:?}"
    );
}

/// A finished process's terminal `total_bytes` is its final bound: bytes its spool holds beyond
/// it (here appended after the run by another writer) are flagged, and `spool verify` exits 1.
#[test]
fn spool_verify_flags_bytes_beyond_the_terminal_bound() {
    use procjournal::spool::format::Stream;
    use procjournal::spool::{Spool, SpoolOptions};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let h = supervise(root, "echo twelve bytes");
    let (code, checks) = verify_json(root);
    assert_eq!(code, 0, "{checks:?}");
    let hex = h.strip_prefix("p-").unwrap();
    let id: [u8; 16] =
        std::array::from_fn(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap());
    let (mut spool, _) =
        Spool::open_writer(&root.join("spool").join(&h), id, SpoolOptions::default()).unwrap();
    spool.append(Stream::Stdout, b"more\n").unwrap();
    spool.checkpoint().unwrap();
    drop(spool);
    let (code, checks) = verify_json(root);
    assert_eq!(code, 1, "{checks:?}");
    assert!(
        checks[0]["issues"]
            .to_string()
            .contains("5 bytes beyond the final bound the journal recorded"),
        "{checks:?}"
    );
}
