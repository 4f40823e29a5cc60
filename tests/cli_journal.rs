//! The recovery tooling as a user runs it: the real `procjournal` binary against real journals.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use procjournal::{Durability, EventId, EventKind, Journal, JournalOptions};

const KIND: EventKind = match EventKind::new(3) {
    Some(k) => k,
    None => panic!(),
};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_procjournal"))
}

fn write_events(root: &Path, n: u8) {
    let options = JournalOptions {
        durability: Durability::Sync,
        segment_bytes: 4096,
    };
    let (journal, _) = Journal::open(root, options).unwrap();
    for i in 0..n {
        journal
            .append(EventId::from_bytes([i + 1; 16]), KIND, 1, &[i; 40])
            .unwrap();
    }
}

fn run(args: &[&str], root: &Path) -> (i32, String, String) {
    let out = bin().args(args).arg("--root").arg(root).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn verify_exits_zero_on_a_clean_journal_and_one_on_damage() {
    let dir = tempfile::tempdir().unwrap();
    write_events(dir.path(), 200);
    let (code, out, _) = run(&["journal", "verify"], dir.path());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("records 200"), "{out}");
    assert!(out.trim_end().ends_with("clean"), "{out}");

    // Damage a record in the middle of the first segment.
    let seg = dir.path().join("journal/00000000000000000000.log");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[160 + 48 + 5] ^= 0xff;
    std::fs::write(&seg, bytes).unwrap();
    let (code, out, _) = run(&["journal", "verify"], dir.path());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("DAMAGED: segment 0 bytes 160.."), "{out}");
    let (code, out, _) = run(&["journal", "verify", "--json"], dir.path());
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["damaged"][0]["row"], "torn_payload");
    assert_eq!(report["records"], 199);
}

/// A leftover `.tmp` of an interrupted segment creation is counted by `verify` (human and JSON),
/// makes it exit 1, and is gone after the next writable open.
#[test]
fn verify_counts_leftover_tmp_files_until_a_writable_open_removes_them() {
    let dir = tempfile::tempdir().unwrap();
    write_events(dir.path(), 3);
    let (code, out, _) = run(&["journal", "verify"], dir.path());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("leftover tmp files 0"), "{out}");
    let tmp = dir.path().join("journal/00000000000000000007.log.tmp");
    std::fs::write(&tmp, [0u8; 100]).unwrap();

    let (code, out, _) = run(&["journal", "verify"], dir.path());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("leftover tmp files 1"), "{out}");
    assert!(out.contains("00000000000000000007.log.tmp"), "{out}");
    let (code, out, _) = run(&["journal", "verify", "--json"], dir.path());
    assert_eq!(code, 1, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["leftover_tmp_file_count"], 1, "{report}");
    assert_eq!(
        report["leftover_tmp_files"][0],
        "00000000000000000007.log.tmp"
    );
    assert!(tmp.exists(), "verify is read-only");

    write_events(dir.path(), 0);
    assert!(!tmp.exists(), "a writable open removes it");
    let (code, out, _) = run(&["journal", "verify", "--json"], dir.path());
    assert_eq!(code, 0, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["leftover_tmp_file_count"], 0, "{report}");
}

#[test]
fn verify_fails_with_exit_two_when_there_is_no_journal() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run(&["journal", "verify"], dir.path());
    assert_eq!(code, 2);
    assert!(err.contains("no journal directory"), "{err}");
}

#[test]
fn dump_prints_every_record_as_text_or_json_from_a_sequence_number() {
    let dir = tempfile::tempdir().unwrap();
    write_events(dir.path(), 30);
    let (code, out, _) = run(&["journal", "dump"], dir.path());
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 30);
    assert!(out.lines().next().unwrap().contains("kind=3"));

    let (code, out, _) = run(&["journal", "dump", "--json", "--from", "25"], dir.path());
    assert_eq!(code, 0);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[0]["seq"], 25);
    assert_eq!(
        lines[0]["event_id"],
        EventId::from_bytes([25; 16]).to_string()
    );
    assert_eq!(lines[0]["payload_hex"], "18".repeat(40));
    assert_eq!(lines[5]["seq"], 30);
}

#[test]
fn dump_follow_prints_what_a_live_writer_appends() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        durability: Durability::Os,
        segment_bytes: 4096,
    };
    let (journal, _) = Journal::open(dir.path(), options).unwrap();
    journal
        .append(EventId::from_bytes([1; 16]), KIND, 1, b"first")
        .unwrap();
    let mut child = bin()
        .args(["journal", "dump", "--json", "--follow", "--root"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["seq"], 1);
    // Enough records to cross several segments while the follower runs.
    for i in 2..=100u8 {
        journal
            .append(EventId::from_bytes([i; 16]), KIND, 1, &[i; 60])
            .unwrap();
    }
    for expected in 2..=100u64 {
        let line: serde_json::Value =
            serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(line["seq"], expected);
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn manifests_prints_the_replayed_projection_of_every_process() {
    use procjournal::lifecycle::event::*;
    use procjournal::lifecycle::{Lifecycle, LifecycleEvent, State};
    let dir = tempfile::tempdir().unwrap();
    let id = |n: u8| EventId::from_bytes([n; 16]);
    let ids = |b: u8| LifecycleIds {
        running: id(b + 1),
        terminal: id(b + 2),
        lost: id(b + 3),
        completion: id(b + 4),
    };
    let options = JournalOptions {
        durability: Durability::Sync,
        segment_bytes: 8192,
    };
    let (mut lc, _, _) = Lifecycle::open(dir.path(), options).unwrap();
    for (n, base) in [(1u8, 10u8), (2, 20)] {
        let handle = Handle(id(n));
        let command = CommandSpec {
            program: "make".into(),
            args: vec!["test".into()],
            cwd: "/src".into(),
            labels: [("job".to_owned(), format!("j{n}"))].into(),
            ..CommandSpec::default()
        };
        lc.append(
            id(100 + n),
            &LifecycleEvent::Registered(Registered {
                handle,
                ids: ids(base),
                command,
                at_unix_ms: 1,
            }),
        )
        .unwrap();
        let witness = IdentityWitness {
            start_time_ticks: 5,
            boot_id: [1; 16],
        };
        lc.append(
            ids(base).running,
            &LifecycleEvent::Running(Running {
                handle,
                pid: 77,
                witness,
                at_unix_ms: 2,
            }),
        )
        .unwrap();
    }
    let terminal = Terminal {
        handle: Handle(id(1)),
        state: State::Exited,
        exit: ExitStatus::Code(0),
        bounds: CursorBounds {
            retained_from: 0,
            total_bytes: 12,
        },
        capture: CaptureStatus::Complete,
        reason: "exited".into(),
        at_unix_ms: 3,
    };
    lc.append(ids(10).terminal, &LifecycleEvent::Terminal(terminal))
        .unwrap();
    drop(lc);

    let (code, out, _) = run(&["journal", "manifests", "--json"], dir.path());
    assert_eq!(code, 0, "{out}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["handle"], Handle(id(1)).to_string());
    assert_eq!(lines[0]["state"], "exited");
    assert_eq!(lines[0]["bounds"]["total_bytes"], 12);
    assert_eq!(lines[1]["state"], "running");
    assert_eq!(lines[1]["pid"], 77);
    assert_eq!(lines[2]["replay"]["lifecycle_events"], 5);
    let (code, out, _) = run(&["journal", "manifests"], dir.path());
    assert_eq!(code, 0);
    assert!(out.lines().next().unwrap().contains("exited"), "{out}");
    assert!(out.contains("[job=j2]"), "{out}");
}

#[test]
fn spool_cat_prints_safe_text_or_exact_base64_from_a_cursor() {
    use procjournal::spool::format::Stream;
    use procjournal::spool::{Spool, SpoolOptions};
    let dir = tempfile::tempdir().unwrap();
    let handle = procjournal::lifecycle::Handle(EventId::from_bytes([7; 16]));
    let spool_dir = dir.path().join("spool").join(handle.to_string());
    let (mut spool, _) = Spool::open_writer(&spool_dir, [7; 16], SpoolOptions::default()).unwrap();
    spool
        .append(Stream::Stdout, b"\x1b[32mok\x1b[0m line\n")
        .unwrap();
    spool.append(Stream::Stderr, b"err\xff\n").unwrap();
    drop(spool);
    let h = handle.to_string();
    let (code, out, err) = run(&["spool", "cat", &h], dir.path());
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "ok line\nerr\u{fffd}\n");
    assert!(err.contains("next cursor 22"), "{err}");
    let (code, out, _) = run(
        &["spool", "cat", &h, "--cursor", "12", "--base64"],
        dir.path(),
    );
    assert_eq!(code, 0);
    assert_eq!(out.trim(), "bGluZQplcnL/Cg==");
    let (code, _, err) = run(&["spool", "cat", "not-a-handle"], dir.path());
    assert_eq!(code, 2);
    assert!(err.contains("not a process handle"), "{err}");
}

/// `journal verify --json` prints exactly the fields journal-format.md's report table lists (plus
/// `leftover_tmp_file_count`), with the documented JSON types, so the document and the tool
/// cannot drift apart.
#[test]
fn verify_json_has_exactly_the_documented_report_fields() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("journal-format.md"))
            .unwrap();
    let table = doc
        .split_once("**The report.**")
        .expect("the report section")
        .1;
    let mut documented: Vec<(String, String)> = table
        .lines()
        .skip_while(|l| !l.starts_with("| field | type |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_owned(), cells[2].to_owned())
        })
        .collect();
    documented.push(("leftover_tmp_file_count".to_owned(), "number".to_owned()));
    documented.sort();

    let dir = tempfile::tempdir().unwrap();
    write_events(dir.path(), 30);
    let (_, out, _) = run(&["journal", "verify", "--json"], dir.path());
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let object = report.as_object().unwrap();
    let mut printed: Vec<String> = object.keys().cloned().collect();
    printed.sort();
    let names: Vec<String> = documented.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(
        printed, names,
        "journal verify --json fields vs journal-format.md"
    );
    for (name, ty) in &documented {
        let value = &object[name];
        let ok = match ty.as_str() {
            "number" => value.is_u64(),
            "list" => value.is_array(),
            "number or null" => value.is_u64() || value.is_null(),
            other => panic!("undocumented type {other:?} of {name}"),
        };
        assert!(ok, "{name} is documented as {ty}, printed as {value}");
    }
}
