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

/// History compaction removed is damage once no snapshot holds it: snapshotted twice and
/// compacted below the first, a root verifies clean; with `snapshots/*` deleted, the records
/// below the floor are gone for good, and verify says so (count and reason) and exits 1, as
/// `journal manifests` does.
#[test]
fn verify_reports_compacted_history_no_snapshot_holds_as_damage() {
    use procjournal::lifecycle::{Lifecycle, workload};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    {
        let options = JournalOptions {
            durability: Durability::Os,
            segment_bytes: 8192,
        };
        let (mut lc, _, _) = Lifecycle::open(root, options).unwrap();
        for n in 0..400 {
            if n == 200 {
                lc.snapshot_now().unwrap();
            }
            let (id, event) = workload::event(n);
            lc.append(id, &event).unwrap();
        }
        let written = lc.snapshot_now().unwrap().unwrap();
        assert!(written.compacted.unwrap().removed_segments > 0);
    }
    let (code, out, _) = run(&["journal", "verify"], root);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("LOST HISTORY"), "{out}");
    let (_, out, _) = run(&["journal", "verify", "--json"], root);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(report["lost_history"].is_null(), "{report}");
    let floor = report["floor"]["seq"].as_u64().unwrap();
    assert!(floor > 1, "{report}");

    for entry in std::fs::read_dir(root.join("snapshots")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let (code, out, _) = run(&["journal", "verify"], root);
    assert_eq!(code, 1, "{out}");
    let line = format!(
        "LOST HISTORY: the {} record(s) below seq {floor} were compacted away and no snapshot is left to hold them",
        floor - 1
    );
    assert!(out.contains(&line), "{out}");
    let (code, out, _) = run(&["journal", "verify", "--json"], root);
    assert_eq!(code, 1, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let lost = &report["lost_history"];
    assert_eq!(lost["below_seq"], floor, "{report}");
    assert_eq!(lost["records"], floor - 1, "{report}");
    assert_eq!(
        lost["reason"], "no snapshot is left to hold them",
        "{report}"
    );
    let (code, _, _) = run(&["journal", "manifests"], root);
    assert_eq!(code, 1, "verify and manifests agree");
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
fn verify_fails_with_exit_125_when_there_is_no_journal() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run(&["journal", "verify"], dir.path());
    assert_eq!(code, 125);
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
    // A reference that names nothing, and text that is no reference at all.
    let (code, _, err) = run(&["spool", "cat", "not-a-handle"], dir.path());
    assert_eq!(code, 125);
    assert!(err.contains("no process named \"not-a-handle\""), "{err}");
    let (code, _, err) = run(&["spool", "cat", "not a handle"], dir.path());
    assert_eq!(code, 125);
    assert!(err.contains("not a process reference"), "{err}");
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
    documented.push(("leftover_tmp_file_count".to_owned(), "integer".to_owned()));
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
            "integer" => value.is_u64(),
            "array of object" => value.as_array().unwrap().iter().all(|v| v.is_object()),
            "array of string" => value.as_array().unwrap().iter().all(|v| v.is_string()),
            "integer or null" => value.is_u64() || value.is_null(),
            "object or null" => value.is_object() || value.is_null(),
            "string or null" => value.is_string() || value.is_null(),
            other => panic!("undocumented type {other:?} of {name}"),
        };
        assert!(ok, "{name} is documented as {ty}, printed as {value}");
    }
}

// ---------------------------------------------------------------------------------------------
// `journal manifests --json` against the field tables of journal-format.md ("### Manifests").

mod manifest_json {
    use std::collections::{BTreeMap, BTreeSet};

    use procjournal::lifecycle::event::*;
    use procjournal::lifecycle::{Handle, Lifecycle, LifecycleEvent, LifecycleIds, State};
    use procjournal::spool::{Gap, LossReason};
    use procjournal::{Durability, EventId, EventKind, JournalOptions};
    use serde_json::Value;

    /// A JSON type as the document writes it.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    enum Ty {
        String,
        Integer,
        Boolean,
        Null,
        Object,
        Pair,
        MapOfString,
        ArrayOf(Box<Ty>),
    }

    fn parse_ty(text: &str) -> Ty {
        match text {
            "string" => Ty::String,
            "integer" => Ty::Integer,
            "boolean" => Ty::Boolean,
            "null" => Ty::Null,
            "object" => Ty::Object,
            "pair" => Ty::Pair,
            "map of string" => Ty::MapOfString,
            _ => match text.strip_prefix("array of ") {
                Some(element) => Ty::ArrayOf(Box::new(parse_ty(element))),
                None => panic!("journal-format.md names an unknown JSON type {text:?}"),
            },
        }
    }

    /// `field -> alternatives` of the first `| field | type | meaning |` table after `after`.
    fn table(doc: &str, after: &str) -> BTreeMap<String, Vec<Ty>> {
        let rest = doc
            .split_once(after)
            .unwrap_or_else(|| panic!("{after:?} is not in journal-format.md"))
            .1;
        let mut lines = rest
            .lines()
            .skip_while(|l| !l.starts_with("| field | type | meaning |"));
        assert!(lines.next().is_some(), "no field table after {after:?}");
        let mut rows = BTreeMap::new();
        for line in lines.skip(1).take_while(|l| l.starts_with('|')) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let field = cells[1].trim_matches('`').to_owned();
            let types = cells[2].split(" or ").map(parse_ty).collect();
            assert!(rows.insert(field.clone(), types).is_none(), "{field} twice");
        }
        rows
    }

    /// The keys of an object that may be missing (journal-format.md: the one-key objects `exit`,
    /// `capture` and `status` name their variant; `released` has its other fields for a receipt
    /// only). Every other object has every documented key.
    const PARTIAL: &[&str] = &[
        "terminal.exit",
        "terminal.capture",
        "released",
        "released.status",
    ];

    #[derive(Default)]
    struct Walk {
        /// Path -> the documented types it was seen as.
        seen: BTreeMap<String, BTreeSet<Ty>>,
        errors: Vec<String>,
    }

    fn matches_atom(ty: &Ty, v: &Value) -> bool {
        match ty {
            Ty::String => v.is_string(),
            Ty::Integer => v.as_u64().is_some() || v.as_i64().is_some(),
            Ty::Boolean => v.is_boolean(),
            Ty::Null => v.is_null(),
            Ty::Object => v.is_object(),
            Ty::Pair => v
                .as_array()
                .is_some_and(|a| a.len() == 2 && a.iter().all(Value::is_string)),
            Ty::MapOfString => v
                .as_object()
                .is_some_and(|o| o.values().all(Value::is_string)),
            Ty::ArrayOf(_) => v.is_array(),
        }
    }

    impl Walk {
        fn value(&mut self, rows: &BTreeMap<String, Vec<Ty>>, path: &str, v: &Value) {
            let Some(types) = rows.get(path) else {
                self.errors
                    .push(format!("{path}: printed but not documented"));
                return;
            };
            let Some(ty) = types.iter().find(|t| matches_atom(t, v)) else {
                self.errors
                    .push(format!("{path}: {v} is none of the documented {types:?}"));
                return;
            };
            self.seen
                .entry(path.to_owned())
                .or_default()
                .insert(ty.clone());
            match ty {
                Ty::Object => self.object(rows, path, v, ""),
                Ty::ArrayOf(element) => {
                    for e in v.as_array().into_iter().flatten() {
                        if **element == Ty::Object && e.is_object() {
                            self.object(rows, path, e, "[]");
                        } else if !matches_atom(element, e) {
                            self.errors
                                .push(format!("{path}: element {e} is not {element:?}"));
                        }
                    }
                }
                _ => {}
            }
        }

        fn object(&mut self, rows: &BTreeMap<String, Vec<Ty>>, path: &str, v: &Value, sep: &str) {
            let Some(fields) = v.as_object() else { return };
            let prefix = if path.is_empty() {
                String::new()
            } else {
                format!("{path}{sep}.")
            };
            for (key, value) in fields {
                self.value(rows, &format!("{prefix}{key}"), value);
            }
            if PARTIAL.contains(&path) {
                return;
            }
            // Every documented direct child is printed.
            for field in rows.keys() {
                if let Some(child) = field.strip_prefix(&prefix)
                    && !child.is_empty()
                    && !child.contains('.')
                    && !child.contains("[]")
                    && !fields.contains_key(child)
                {
                    self.errors.push(format!("{field}: documented but missing"));
                }
            }
        }
    }

    fn id(n: u8) -> EventId {
        EventId::from_bytes([n; 16])
    }

    fn ids(h: u8) -> LifecycleIds {
        LifecycleIds {
            running: id(10 * h + 1),
            terminal: id(10 * h + 2),
            lost: id(10 * h + 3),
            completion: id(10 * h + 4),
        }
    }

    fn handle(h: u8) -> Handle {
        Handle(id(200 + h))
    }

    fn scope(h: u8, mechanism: TreeMechanism) -> LifecycleEvent {
        let guarded = mechanism != TreeMechanism::Group;
        LifecycleEvent::Scoped(Scoped {
            handle: handle(h),
            mechanism,
            boot_id: [0xb0; 16],
            workload: ProcessWitness {
                pid: 100 + u32::from(h),
                start_time_ticks: 5,
                pidfs_ino: 9,
            },
            guardian: guarded.then_some(ProcessWitness {
                pid: 99,
                start_time_ticks: 4,
                pidfs_ino: 8,
            }),
            cgroup: (mechanism == TreeMechanism::Cgroup).then(|| format!("/cg/{h}")),
            receipt: guarded.then(|| ReceiptBinding {
                path: format!("trees/{h}.receipt"),
                dev: 1,
                ino: 2,
                nonce: [h; 16],
            }),
            at_unix_ms: 3,
        })
    }

    fn terminal(h: u8, state: State, exit: ExitStatus, capture: CaptureStatus) -> LifecycleEvent {
        LifecycleEvent::Terminal(Terminal {
            handle: handle(h),
            state,
            exit,
            bounds: CursorBounds {
                retained_from: 0,
                total_bytes: 40,
            },
            capture,
            reason: format!("{state}"),
            at_unix_ms: 9,
        })
    }

    /// Six processes whose manifests show every documented field in each of its types, one
    /// rejected record, one undecodable one and one of another kind.
    /// A root of the lifecycle workload, snapshotted twice and compacted below the first; with
    /// both snapshots damaged when `damaged`.
    fn compacted_root(root: &std::path::Path, damaged: bool) {
        use procjournal::lifecycle::workload;
        let options = JournalOptions {
            durability: Durability::Os,
            segment_bytes: 8192,
        };
        let (mut lc, _, _) = Lifecycle::open(root, options).unwrap();
        for n in 0..400 {
            if n == 200 {
                lc.snapshot_now().unwrap();
            }
            let (id, event) = workload::event(n);
            lc.append(id, &event).unwrap();
        }
        let written = lc.snapshot_now().unwrap().unwrap();
        assert!(written.compacted.unwrap().removed_segments > 0);
        if damaged {
            for entry in std::fs::read_dir(root.join("snapshots")).unwrap() {
                let path = entry.unwrap().path();
                let mut bytes = std::fs::read(&path).unwrap();
                let last = bytes.len() - 1;
                bytes[last] ^= 1;
                std::fs::write(&path, bytes).unwrap();
            }
        }
    }

    fn write_fixture(root: &std::path::Path) {
        let options = JournalOptions {
            durability: Durability::Os,
            segment_bytes: 1 << 16,
        };
        let (mut lc, _, _) = Lifecycle::open(root, options).unwrap();
        let mut append = |event_id: EventId, event: LifecycleEvent| {
            lc.append(event_id, &event)
                .unwrap_or_else(|e| panic!("{event:?}: {e}"));
        };
        for h in 1..=6u8 {
            let command = CommandSpec {
                program: "sh".into(),
                args: vec!["-c".into(), "true".into()],
                cwd: "/tmp".into(),
                env_overrides: vec![("K".into(), "V".into())],
                labels: [("job".to_owned(), format!("j{h}"))].into(),
                limits: if h == 1 {
                    Limits::default()
                } else {
                    Limits {
                        wall_clock_ms: Some(60_000),
                        idle_ms: Some(1_000),
                        output_retention_bytes: Some(1 << 20),
                    }
                },
                owner: "test".into(),
            };
            // Odd handles: a registration of kind 0x0101 (no policy); even ones of 0x010D,
            // with a withheld and a persisted value, every overlay outcome, one a restart.
            let event = if h % 2 == 1 {
                LifecycleEvent::Registered(Registered {
                    handle: handle(h),
                    ids: ids(h),
                    command,
                    at_unix_ms: 1,
                })
            } else {
                let overlay = match h {
                    2 => EnvOverlay::Failed {
                        reason: "the login shell timed out".into(),
                    },
                    4 => EnvOverlay::Applied {
                        names: vec!["PATH".into()],
                    },
                    _ => EnvOverlay::Off,
                };
                LifecycleEvent::RegisteredV2(RegisteredV2 {
                    handle: handle(h),
                    ids: ids(h),
                    command: Box::new(CommandSpecV2 {
                        program: command.program,
                        args: command.args,
                        cwd: command.cwd,
                        env_overrides: vec![
                            EnvVar {
                                name: "K".into(),
                                value: Some("V".into()),
                            },
                            EnvVar {
                                name: "TOKEN".into(),
                                value: None,
                            },
                        ],
                        labels: command.labels,
                        limits: command.limits,
                        owner: command.owner,
                        env_policy: EnvPolicy {
                            base: EnvBase::Client,
                            removed: vec!["GIT_DIR".into()],
                            overlay,
                        },
                    }),
                    restart_of: (h == 4).then(|| handle(3)),
                    at_unix_ms: 1,
                })
            };
            append(id(100 + h), event);
        }
        let running = |h: u8| {
            (
                ids(h).running,
                LifecycleEvent::Running(Running {
                    handle: handle(h),
                    pid: 100 + u32::from(h),
                    witness: IdentityWitness {
                        start_time_ticks: 5,
                        boot_id: [0xb0; 16],
                    },
                    at_unix_ms: 4,
                }),
            )
        };
        let scoped_id = |h: u8| ids(h).running.derived(derived::SCOPED);
        let released = |h: u8, proof: ExitProof| {
            (
                ids(h).terminal.derived(derived::RELEASED),
                LifecycleEvent::TreeReleased(TreeReleased {
                    handle: handle(h),
                    proof,
                    at_unix_ms: 10,
                }),
            )
        };
        // 1: registered only. 2: everything, in a cgroup.
        append(scoped_id(2), scope(2, TreeMechanism::Cgroup));
        let (i, e) = running(2);
        append(i, e);
        append(
            id(150),
            LifecycleEvent::StopRequested(StopRequested {
                handle: handle(2),
                reason: "user".into(),
                requested_by: "cli".into(),
                at_unix_ms: 5,
            }),
        );
        append(
            id(151),
            LifecycleEvent::InputClosed(InputClosed {
                handle: handle(2),
                at_unix_ms: 6,
            }),
        );
        append(
            id(152),
            LifecycleEvent::OutputGap(OutputGap {
                handle: handle(2),
                gap: Gap {
                    from: 10,
                    to: 20,
                    reason: LossReason::DiskFull,
                    errno: 28,
                },
                at_unix_ms: 7,
            }),
        );
        append(
            id(153),
            LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
                handle: handle(2),
                bounds: CursorBounds {
                    retained_from: 0,
                    total_bytes: 30,
                },
                at_unix_ms: 8,
            }),
        );
        // Marked as waiting for human input, then an idle deadline fired and stopping failed once.
        append(
            id(154),
            LifecycleEvent::HumanInput(HumanInput {
                handle: handle(2),
                waiting: true,
                by: "agent".into(),
                at_unix_ms: 8,
            }),
        );
        append(
            id(155),
            LifecycleEvent::DeadlineFired(DeadlineFired {
                handle: handle(2),
                deadline: Deadline::Idle,
                limit_ms: 1_000,
                clock_from_unix_ms: 4,
                at_unix_ms: 8,
            }),
        );
        append(
            id(156),
            LifecycleEvent::DeadlineFailed(DeadlineFailed {
                handle: handle(2),
                deadline: Deadline::Idle,
                error: "EPERM".into(),
                at_unix_ms: 8,
            }),
        );
        append(
            ids(2).terminal,
            terminal(
                2,
                State::Exited,
                ExitStatus::Code(0),
                CaptureStatus::Complete,
            ),
        );
        let (i, e) = released(
            2,
            ExitProof::Receipt {
                status: ExitStatus::Signal(9),
                reaped: 2,
            },
        );
        append(i, e);
        append(
            ids(2).terminal.derived(derived::RETIRED),
            LifecycleEvent::OutputRetired(OutputRetired {
                handle: handle(2),
                reason: "clean: ended more than 0ms ago".into(),
                at_unix_ms: 11,
            }),
        );
        for event in [ids(2).running, ids(2).terminal] {
            append(
                event.derived(derived::PUBLISHED),
                LifecycleEvent::LifecyclePublished(LifecyclePublished {
                    handle: handle(2),
                    event,
                }),
            );
        }
        append(
            ids(2).completion.derived(derived::NOTIFIED),
            LifecycleEvent::CompletionNotified(CompletionNotified {
                handle: handle(2),
                command: ids(2).completion,
            }),
        );
        // 3: a process group, lost on restore, its cgroup found empty.
        append(scoped_id(3), scope(3, TreeMechanism::Group));
        let (i, e) = running(3);
        append(i, e);
        append(
            ids(3).lost,
            LifecycleEvent::LostOnRestore(LostOnRestore {
                handle: handle(3),
                bounds: CursorBounds::default(),
                at_unix_ms: 9,
            }),
        );
        let (i, e) = released(3, ExitProof::CgroupEmpty);
        append(i, e);
        // 4: a guardian, killed, capture failed, released by a new boot.
        append(scoped_id(4), scope(4, TreeMechanism::Guardian));
        let (i, e) = running(4);
        append(i, e);
        append(
            ids(4).terminal,
            terminal(
                4,
                State::Killed,
                ExitStatus::Signal(9),
                CaptureStatus::Failed("pipe".into()),
            ),
        );
        let (i, e) = released(4, ExitProof::BootChanged);
        append(i, e);
        // 5 and 6: receipts with an exit code and with no status.
        for (h, status) in [(5u8, ExitStatus::Code(1)), (6, ExitStatus::Unknown)] {
            append(scoped_id(h), scope(h, TreeMechanism::Guardian));
            append(
                ids(h).terminal,
                terminal(
                    h,
                    State::Failed,
                    ExitStatus::Unknown,
                    CaptureStatus::Incomplete("spawn".into()),
                ),
            );
            let (i, e) = released(h, ExitProof::Receipt { status, reaped: 0 });
            append(i, e);
        }
        // Past the validator: a rejected record, an undecodable one, and another kind.
        let (_, e) = running(1);
        let kind = e.kind();
        lc.journal()
            .append(id(160), kind, 1, &e.encode().unwrap())
            .unwrap();
        lc.journal().append(id(161), kind, 1, b"\x01").unwrap();
        let other = EventKind::new(3).unwrap();
        lc.journal().append(id(162), other, 1, b"x").unwrap();
        // A gate change to the state it is in: rejected, and it names no handle.
        let resume = LifecycleEvent::GateChanged(GateChanged {
            paused: false,
            requested_by: "cli".into(),
            reason: String::new(),
            at_unix_ms: 11,
        });
        lc.journal()
            .append(id(163), resume.kind(), 1, &resume.encode().unwrap())
            .unwrap();
    }

    #[test]
    fn manifests_json_has_exactly_the_documented_keys_and_types() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("journal-format.md"),
        )
        .unwrap();
        let section = "\n### Manifests\n";
        let manifest_rows = table(&doc, section);
        let report_rows = table(&doc, "\nThe last line is the report");
        assert!(manifest_rows.contains_key("handle") && report_rows.contains_key("replay"));

        let dir = tempfile::tempdir().unwrap();
        write_fixture(dir.path());
        let (code, out, err) = super::run(&["journal", "manifests", "--json"], dir.path());
        assert_eq!(code, 1, "a rejected and an undecodable record: {err}");
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 7, "{out}");

        let mut manifests = Walk::default();
        for line in &lines[..6] {
            manifests.value(&rootless(&manifest_rows), "", line);
        }
        let mut report = Walk::default();
        report.value(&rootless(&report_rows), "", &lines[6]);
        // The snapshot fields: a root restored from a snapshot, and one whose compacted head no
        // usable snapshot holds.
        for damaged in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            compacted_root(dir.path(), damaged);
            let (_, out, _) = super::run(&["journal", "manifests", "--json"], dir.path());
            let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
            assert_eq!(last["replay"]["snapshot_seq"].is_u64(), !damaged, "{last}");
            assert_eq!(last["replay"]["lost_below_seq"].is_u64(), damaged, "{last}");
            report.value(&rootless(&report_rows), "", &last);
        }
        for (walk, rows, what) in [
            (&manifests, &manifest_rows, "manifest"),
            (&report, &report_rows, "report"),
        ] {
            assert!(walk.errors.is_empty(), "{what}: {:#?}", walk.errors);
            // Every documented field is printed, as every documented type, by some line.
            for (field, types) in rows {
                let seen = walk.seen.get(field).cloned().unwrap_or_default();
                for ty in types {
                    assert!(
                        seen.contains(ty),
                        "{what}: the fixture never prints {field} as {ty:?}"
                    );
                }
            }
        }
        // A few values, so that a matching shape with wrong contents fails too.
        assert_eq!(lines[0]["handle"], handle(1).to_string());
        assert_eq!(lines[1]["terminal"]["exit"]["code"], 0);
        assert_eq!(lines[1]["first_stop"][0], "user");
        assert_eq!(lines[1]["released"]["by"], "receipt");
        assert_eq!(lines[1]["retired"]["at_unix_ms"], 11);
        assert!(lines[0]["retired"].is_null());
        assert_eq!(lines[2]["terminal"]["exit"], "unknown");
        assert_eq!(lines[1]["published"].as_array().map(Vec::len), Some(2));
        assert_eq!(lines[6]["replay"]["other_events"], 1);
        assert_eq!(lines[3]["restart_of"], handle(3).to_string());
        assert_eq!(lines[1]["command"]["env_overrides"][1]["name"], "TOKEN");
        assert_eq!(
            lines[1]["command"]["env_overrides"][1]["value"],
            Value::Null
        );
        assert_eq!(lines[0]["command"]["env_policy"], Value::Null);
        assert_eq!(lines[1]["deadline"]["deadline"], "idle");
        assert_eq!(lines[1]["deadline_failures"][0]["error"], "EPERM");
        // 35 valid records, then the rejected one and the undecodable one, another kind, and a
        // rejected gate change (no handle).
        assert_eq!(lines[6]["replay"]["rejected"][0]["seq"], 36);
        assert_eq!(lines[6]["replay"]["undecodable"][0]["seq"], 37);
        assert_eq!(lines[6]["replay"]["rejected"][1]["seq"], 39);
        assert_eq!(lines[6]["replay"]["rejected"][1]["handle"], Value::Null);
    }

    /// The rows, plus the root object itself (the walk starts at path "").
    /// `journal verify` gives each file of `snapshots/` its verdict, in text and JSON: usable
    /// ones (the newest chosen), a damaged one (checksum, not decodable, not usable, the exit
    /// code 1), a temporary file and an unrecognised name.
    #[test]
    fn verify_reports_every_snapshot_file() {
        let dir = tempfile::tempdir().unwrap();
        compacted_root(dir.path(), false);
        let snaps = dir.path().join("snapshots");
        let mut names: Vec<String> = std::fs::read_dir(&snaps)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "{names:?}");
        let verdicts = |root: &std::path::Path| {
            let (code, out, _) = super::run(&["journal", "verify", "--json"], root);
            let v: Value = serde_json::from_str(&out).unwrap();
            (code, v["snapshots"].as_array().unwrap().clone())
        };
        let (code, list) = verdicts(dir.path());
        assert_eq!(code, 0, "{list:?}");
        assert_eq!(list.len(), 2);
        for (v, name) in list.iter().zip(&names) {
            assert_eq!(v["file"], name.as_str());
            assert_eq!(v["kind"], "snapshot");
            assert_eq!(v["seq"].as_u64(), name[..20].parse::<u64>().ok());
            assert!(v["bytes"].as_u64().unwrap() > 64);
            assert_eq!(v["checksums"], true);
            assert_eq!(v["decodes"], true);
            assert_eq!(v["usable"], true);
            assert!(v["problem"].is_null());
        }
        assert_eq!(list[0]["chosen"], false);
        assert_eq!(list[1]["chosen"], true);
        let (_, text, _) = super::run(&["journal", "verify"], dir.path());
        assert!(
            text.contains(&format!(
                "snapshot {}: seq {}",
                names[1],
                list[1]["seq"].as_u64().unwrap()
            )),
            "{text}"
        );
        assert!(text.contains("a restore starts from it"), "{text}");

        // The newest damaged, a leftover temporary file, a foreign name.
        let newest = snaps.join(&names[1]);
        let mut bytes = std::fs::read(&newest).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&newest, bytes).unwrap();
        std::fs::write(snaps.join("00000000000000000009.snap.tmp"), b"partial").unwrap();
        std::fs::write(snaps.join("notes.txt"), b"x").unwrap();
        let (code, list) = verdicts(dir.path());
        assert_eq!(code, 1, "{list:?}");
        let by_name = |name: &str| list.iter().find(|v| v["file"] == name).unwrap().clone();
        let damaged = by_name(&names[1]);
        assert_eq!(damaged["checksums"], false);
        assert_eq!(damaged["decodes"], false);
        assert_eq!(damaged["usable"], false);
        assert_eq!(damaged["chosen"], false);
        assert!(
            damaged["seq"].is_u64(),
            "the header still decodes: {damaged}"
        );
        let problem = damaged["problem"].as_str().unwrap();
        assert!(problem.contains("payload checksum"), "{problem}");
        let older = by_name(&names[0]);
        assert_eq!(
            (older["usable"].clone(), older["chosen"].clone()),
            (true.into(), true.into())
        );
        let tmp = by_name("00000000000000000009.snap.tmp");
        assert_eq!(tmp["kind"], "temporary");
        assert!(tmp["problem"].is_null() && tmp["seq"].is_null());
        let foreign = by_name("notes.txt");
        assert_eq!(foreign["kind"], "unrecognised");
        assert!(foreign["problem"].is_string());
        let (code, text, _) = super::run(&["journal", "verify"], dir.path());
        assert_eq!(code, 1);
        assert!(
            text.contains("NOT USABLE: damaged: payload checksum"),
            "{text}"
        );

        // Every field as journal-format.md's verify table types it.
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("journal-format.md"),
        )
        .unwrap();
        let rows = table(&doc, "**The verify report's snapshots.**");
        let mut walk = Walk::default();
        for v in &list {
            walk.value(&rootless(&rows), "", v);
        }
        assert!(walk.errors.is_empty(), "{:#?}", walk.errors);
        for (field, types) in &rows {
            let seen = walk.seen.get(field).cloned().unwrap_or_default();
            for ty in types {
                assert!(seen.contains(ty), "never printed {field} as {ty:?}");
            }
        }
    }

    fn rootless(rows: &BTreeMap<String, Vec<Ty>>) -> BTreeMap<String, Vec<Ty>> {
        let mut all = rows.clone();
        all.insert(String::new(), vec![Ty::Object]);
        all
    }

    /// journal-format.md, "Readers": `journal dump --json` names the event only when its payload
    /// decoded; the undecodable record of the fixture gets `decode_error` and `payload_hex`.
    #[test]
    fn dump_names_no_event_for_a_payload_that_does_not_decode() {
        let dir = tempfile::tempdir().unwrap();
        write_fixture(dir.path());
        let (code, out, err) = super::run(&["journal", "dump", "--json"], dir.path());
        assert_eq!(code, 0, "{err}");
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let undecodable = lines.iter().find(|l| l["seq"] == 37).unwrap();
        assert!(undecodable.get("event").is_none(), "{undecodable}");
        assert!(undecodable.get("decoded").is_none(), "{undecodable}");
        assert!(undecodable["decode_error"].is_string(), "{undecodable}");
        assert!(undecodable["payload_hex"].is_string(), "{undecodable}");
        let decoded = &lines[0];
        assert!(decoded["event"].is_string(), "{decoded}");
        assert!(decoded.get("payload_hex").is_none(), "{decoded}");
    }

    /// journal-format.md, "What `procjournal spool verify` checks": a replay that lacks the
    /// compacted head (`lost_below_seq`) makes `spool verify` exit 1, though no spool is wrong
    /// (the processes registered and never wrote).
    #[test]
    fn spool_verify_exits_one_when_the_replay_lost_the_compacted_head() {
        for damaged in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            let options = JournalOptions {
                durability: Durability::Os,
                segment_bytes: 8192,
            };
            let (mut lc, _, _) = Lifecycle::open(root, options).unwrap();
            for n in 0..300u16 {
                if n == 150 {
                    lc.snapshot_now().unwrap();
                }
                let [lo, hi] = n.to_le_bytes();
                let id =
                    |k: u8| EventId::from_bytes([k, hi, lo, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
                let event = LifecycleEvent::Registered(Registered {
                    handle: Handle(id(1)),
                    ids: LifecycleIds {
                        running: id(2),
                        terminal: id(3),
                        lost: id(4),
                        completion: id(5),
                    },
                    command: CommandSpec {
                        program: "true".into(),
                        cwd: "/".into(),
                        ..CommandSpec::default()
                    },
                    at_unix_ms: 1,
                });
                lc.append(id(6), &event).unwrap();
            }
            let written = lc.snapshot_now().unwrap().unwrap();
            assert!(written.compacted.unwrap().removed_segments > 0);
            drop(lc);
            if damaged {
                for entry in std::fs::read_dir(root.join("snapshots")).unwrap() {
                    let path = entry.unwrap().path();
                    std::fs::write(&path, b"not a snapshot").unwrap();
                }
            }
            let (code, out, _) = super::run(&["spool", "verify"], root);
            assert!(!out.contains("NOT OK"), "{out}");
            assert_eq!(out.contains("the journal is not clean"), damaged, "{out}");
            assert_eq!(code, i32::from(damaged), "{out}");
        }
    }

    /// journal-format.md, "Restoring": `snapshot_problems` lists the names that are not a
    /// snapshot's in byte order, then the snapshots from the newest down to the one chosen;
    /// a temporary file is never listed, and nothing older than the chosen one is read.
    #[test]
    fn snapshot_problems_come_in_the_documented_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        compacted_root(root, false);
        let snaps = root.join("snapshots");
        let mut names: Vec<String> = std::fs::read_dir(&snaps)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let newest = names.last().unwrap().clone();
        let mut bytes = std::fs::read(snaps.join(&newest)).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(snaps.join(&newest), bytes).unwrap();
        for stray in ["zz-notes", "00000000000000000001.snap.tmp", "AA"] {
            std::fs::write(snaps.join(stray), b"x").unwrap();
        }
        let (_, out, _) = super::run(&["journal", "manifests", "--json"], root);
        let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        let problems = last["replay"]["snapshot_problems"].as_array().unwrap();
        let files: Vec<&str> = problems
            .iter()
            .map(|p| p["file"].as_str().unwrap())
            .collect();
        assert_eq!(files, ["AA", "zz-notes", newest.as_str()], "{last}");
        assert!(
            problems[2]["reason"]
                .as_str()
                .unwrap()
                .starts_with("damaged"),
            "{last}"
        );
        assert_eq!(
            last["replay"]["snapshot_seq"]
                .as_u64()
                .map(|s| format!("{s:020}.snap")),
            Some(names[0].clone()),
            "the older snapshot is chosen: {last}"
        );
    }
}
