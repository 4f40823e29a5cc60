//! Retention and `clean`: output of finished processes whose exit is verified is retired, and
//! nothing live, unfinished or unverified ever is; a crash between any two file operations of a
//! pass leaves the manifests of a full replay and never a spool removed without its record.
//!
//! The crash test's host is this test binary run as a child ([`retention_child`] does nothing
//! unless `PROCJOURNAL_RETENTION_CHILD` is set): it runs a pass over a copy of a prepared root and
//! aborts (no destructor runs, no file is closed cleanly: a crash) right before the k-th step
//! that changes the file system, for every k until a pass completes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use procjournal::journal::compact::CrashPoints;
use procjournal::journal::{EventId, JournalOptions};
use procjournal::lifecycle::event::{
    CommandSpec, CursorBounds, IdentityWitness, LostOnRestore, ProcessWitness, Registered, Running,
    Scoped, TreeMechanism,
};
use procjournal::lifecycle::retention::{self, RetentionRequest};
use procjournal::lifecycle::{Handle, Lifecycle, LifecycleEvent, LifecycleIds, ManifestStore};
use procjournal::supervisor::{Rendering, SupervisorError};

use crate::common::supervisor as supervisor_common;
use supervisor_common::{config, guarded, open, replay, sh, start, temp_root};

const CHILD_ENV: &str = "PROCJOURNAL_RETENTION_CHILD";
const ROOT_ENV: &str = "PROCJOURNAL_RETENTION_ROOT";
const CRASH_ENV: &str = "PROCJOURNAL_RETENTION_CRASH_AT";
/// What the child prints once its pass completed without a crash.
const DONE: &str = "retention child: pass complete";

/// The files under `dir`, by name, with their contents.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    match std::fs::read_dir(dir) {
        Err(_) => BTreeMap::new(),
        Ok(entries) => entries
            .map(|e| {
                let e = e.expect("entry");
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).expect("read"),
                )
            })
            .collect(),
    }
}

/// Every spool under `rt`, by handle.
fn spools(rt: &Path) -> BTreeMap<String, BTreeMap<String, Vec<u8>>> {
    match std::fs::read_dir(rt.join("spool")) {
        Err(_) => BTreeMap::new(),
        Ok(entries) => entries
            .map(|e| {
                let e = e.expect("entry");
                (
                    e.file_name().to_string_lossy().into_owned(),
                    files(&e.path()),
                )
            })
            .collect(),
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("list") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

fn ids(n: u8) -> LifecycleIds {
    let id = |k: u8| EventId::from_bytes([n, k, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 1]);
    LifecycleIds {
        running: id(1),
        terminal: id(2),
        lost: id(3),
        completion: id(4),
    }
}

/// Appends a process that is still running (as a crashed supervisor leaves it) and one lost on
/// restore whose guardian tree has no release (unverified), each with a spool directory of one
/// segment file, and returns their handles.
fn add_unfinished_and_unverified(rt: &Path) -> (Handle, Handle) {
    let (mut lc, _, _) = Lifecycle::open(rt, JournalOptions::default()).expect("open");
    let mut add = |n: u8, lost: bool| {
        let handle = Handle(EventId::from_bytes([n; 16]));
        let ids = ids(n);
        let registered = LifecycleEvent::Registered(Registered {
            handle,
            ids,
            command: CommandSpec {
                program: "sleep".into(),
                args: vec!["600".into()],
                cwd: "/".into(),
                ..CommandSpec::default()
            },
            at_unix_ms: 1,
        });
        lc.append(
            EventId::from_bytes([n, 9, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 1]),
            &registered,
        )
        .expect("registered");
        let scoped = LifecycleEvent::Scoped(Scoped {
            handle,
            mechanism: TreeMechanism::Guardian,
            boot_id: [7; 16],
            workload: ProcessWitness {
                pid: 4_000_000,
                start_time_ticks: 1,
                pidfs_ino: 0,
            },
            guardian: Some(ProcessWitness {
                pid: 4_000_001,
                start_time_ticks: 1,
                pidfs_ino: 0,
            }),
            cgroup: None,
            receipt: None,
            at_unix_ms: 1,
        });
        lc.append(ids.running.derived(3), &scoped).expect("scoped");
        let running = LifecycleEvent::Running(Running {
            handle,
            pid: 4_000_000,
            witness: IdentityWitness {
                start_time_ticks: 1,
                boot_id: [7; 16],
            },
            at_unix_ms: 1,
        });
        lc.append(ids.running, &running).expect("running");
        if lost {
            let lost = LifecycleEvent::LostOnRestore(LostOnRestore {
                handle,
                bounds: CursorBounds::default(),
                at_unix_ms: 1,
            });
            lc.append(ids.lost, &lost).expect("lost");
        }
        let dir = rt.join("spool").join(handle.to_string());
        std::fs::create_dir_all(&dir).expect("spool dir");
        std::fs::write(dir.join("00000000000000000000.seg"), b"evidence").expect("segment");
        handle
    };
    (add(0xa1, false), add(0xa2, true))
}

/// Aborts the process right before step `at` (counted from 0): a crash between two file
/// operations, with nothing flushed or closed on the way out.
struct AbortAt {
    at: u64,
    seen: u64,
}

impl CrashPoints for AbortAt {
    fn reached(&mut self, step: &'static str) -> std::io::Result<()> {
        if self.seen == self.at {
            println!("crash before {step}");
            std::process::abort();
        }
        self.seen += 1;
        Ok(())
    }
}

/// The host of the crash test: one pass over the root, as `procjournal clean` runs it.
#[test]
fn retention_child() {
    let (Some(root), Some(at)) = (std::env::var_os(ROOT_ENV), std::env::var_os(CRASH_ENV)) else {
        return;
    };
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let at: u64 = at
        .to_str()
        .and_then(|s| s.parse().ok())
        .expect("crash step");
    let rt = PathBuf::from(root);
    let (mut lc, _, _) = Lifecycle::open(&rt, JournalOptions::default()).expect("child open");
    let request = RetentionRequest {
        older_than: Duration::ZERO,
        dry_run: false,
        by: "clean",
    };
    let now = u64::MAX / 2;
    let held = Default::default();
    let plan = retention::plan(lc.store(), now, request.older_than, &held);
    let leftovers = retention::leftovers(lc.store(), &rt.join("spool")).expect("leftovers");
    let report = retention::execute(
        &request,
        plan,
        leftovers,
        now,
        &rt.join("spool"),
        &mut lc,
        &mut AbortAt { at, seen: 0 },
    );
    assert!(report.failed.is_empty(), "{report:?}");
    println!("{DONE}");
}

fn manifests_json(store: &ManifestStore) -> Vec<String> {
    store
        .iter()
        .map(|m| serde_json::to_string(&*m).expect("json"))
        .collect()
}

#[test]
fn a_crash_between_any_two_steps_of_a_pass_retires_exactly_what_the_journal_says() {
    let base = temp_root();
    let rt = base.path().join("rt");
    // Four finished processes (group trees, reaped here: verified), three with output.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let finished = runtime.block_on(async {
        let (sup, _rx) = open(config(base.path())).await;
        let mut handles = Vec::new();
        for script in [
            "printf one",
            "printf two; printf 2 >&2",
            "exit 3",
            "printf four",
        ] {
            let h = start(&sup, sh(base.path(), script)).await;
            guarded("wait", sup.wait(&h, None)).await.expect("wait");
            handles.push(h);
        }
        guarded("shutdown", sup.shutdown(Duration::from_secs(1))).await;
        handles
    });
    drop(runtime);
    let (unfinished, unverified) = add_unfinished_and_unverified(&rt);
    let before = spools(&rt);
    assert_eq!(
        before.len(),
        5,
        "three spools of output and two of evidence"
    );

    let mut crashes = 0;
    for at in 0.. {
        let work = temp_root();
        let copy = work.path().join("rt");
        copy_dir(&rt, &copy);
        let out = std::process::Command::new(std::env::current_exe().expect("exe"))
            .arg(crate::common::harness_name(
                module_path!(),
                "retention_child",
            ))
            .args(["--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .env(ROOT_ENV, &copy)
            .env(CRASH_ENV, at.to_string())
            .stdin(Stdio::null())
            .output()
            .expect("run child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let completed = stdout.contains(DONE);
        assert!(
            completed || stdout.contains("crash before"),
            "child neither crashed nor completed: {out:?}"
        );

        // The manifests an open restores are those of a full replay of the journal.
        let (store, replay_report) = replay(&copy);
        assert!(replay_report.is_clean(), "step {at}: {replay_report:?}");
        let (lc, recovery, _) = Lifecycle::open(&copy, JournalOptions::default()).expect("open");
        assert!(recovery.is_crash_residue_only(), "step {at}: {recovery:?}");
        assert_eq!(
            manifests_json(lc.store()),
            manifests_json(&store),
            "step {at}"
        );
        drop(lc);

        // No spool is touched without its retirement record; nothing unfinished or
        // unverified is retired.
        let now = spools(&copy);
        for (name, files) in &before {
            let handle: Handle = name.parse().expect("handle");
            let m = store.get(&handle).expect("manifest");
            if m.retired.is_none() {
                assert_eq!(
                    now.get(name),
                    Some(files),
                    "step {at}: {name} touched unretired"
                );
            }
        }
        for h in [unfinished, unverified] {
            assert!(
                store.get(&h).expect("manifest").retired.is_none(),
                "step {at}"
            );
        }

        // The next pass (a supervisor's open, then one on demand) finishes what the crash left.
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async {
            let mut cfg = config(work.path());
            cfg.retention = None;
            let (services, _rx) = procjournal::supervisor::Services::channel();
            let (sup, _) = procjournal::supervisor::Supervisor::open(cfg, services)
                .await
                .expect("reopen");
            let report = guarded("clean", sup.clean(Duration::MAX, false))
                .await
                .expect("clean");
            assert!(report.failed.is_empty(), "{report:?}");
            for h in &finished {
                let m = sup.manifest(h).expect("manifest");
                let read = sup.output(h, 0, 1024, Rendering::SafeText).await;
                match (&m.retired, read) {
                    (Some(_), Err(SupervisorError::Retired { handle, .. })) => {
                        assert_eq!(handle, *h);
                        assert!(!copy.join("spool").join(h.to_string()).exists());
                    }
                    (None, Ok(_)) => {}
                    (retired, read) => panic!("step {at}: {h}: {retired:?} {read:?}"),
                }
            }
            guarded("shutdown", sup.shutdown(Duration::from_secs(1))).await;
        });
        // (Restore turned the unfinished one lost, and recovered both spools: their one file
        // is not a real segment. Their directories stay.)
        let after = spools(&copy);
        for h in [unfinished, unverified] {
            assert!(after.contains_key(&h.to_string()), "step {at}: {h} removed");
        }
        if completed {
            for h in &finished {
                assert!(!after.contains_key(&h.to_string()), "step {at}: {h} kept");
            }
            break;
        }
        crashes += 1;
    }
    // One record and, for each spool, its segment files, the directory and the parent's sync.
    assert!(crashes >= 4 + 3 * 3, "only {crashes} crash points");
}

#[test]
fn the_supervisor_retires_old_verified_output_and_keeps_the_rest() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let base = temp_root();
        let (sup, _rx) = open(config(base.path())).await;
        let done = start(&sup, sh(base.path(), "printf finished")).await;
        guarded("wait", sup.wait(&done, None)).await.expect("wait");
        let live = start(&sup, sh(base.path(), "printf live; exec sleep 60")).await;
        // The live one has written its output.
        let mut cursor_seen = 0;
        while cursor_seen == 0 {
            let page = sup
                .output(&live, 0, 64, Rendering::SafeText)
                .await
                .expect("read");
            cursor_seen = page.next_cursor;
            if cursor_seen == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }

        // Not old enough: nothing retired.
        let report = sup
            .clean(Duration::from_secs(3600), false)
            .await
            .expect("clean");
        assert!(report.retired.is_empty(), "{report:?}");
        assert_eq!(report.too_recent, 1);

        // A dry run says what it would do and does nothing.
        let report = sup.clean(Duration::ZERO, true).await.expect("dry run");
        assert_eq!(
            report.retired.iter().map(|r| r.handle).collect::<Vec<_>>(),
            [done]
        );
        assert!(report.retired[0].removed.bytes > 0);
        assert!(sup.manifest(&done).expect("manifest").retired.is_none());
        let spool = sup.root().join("spool");
        assert!(spool.join(done.to_string()).exists());

        let report = sup.clean(Duration::ZERO, false).await.expect("clean");
        assert_eq!(
            report.retired.iter().map(|r| r.handle).collect::<Vec<_>>(),
            [done]
        );
        assert_eq!(report.not_terminal, 1, "the live one is kept");
        assert!(!spool.join(done.to_string()).exists());
        assert!(spool.join(live.to_string()).exists());
        let retired = sup
            .manifest(&done)
            .expect("manifest")
            .retired
            .expect("retired");
        assert!(retired.reason.starts_with("clean: "), "{retired:?}");
        match sup.output(&done, 0, 64, Rendering::SafeText).await {
            Err(SupervisorError::Retired { handle, .. }) => assert_eq!(handle, done),
            other => panic!("{other:?}"),
        }
        // Again: nothing more to do.
        let report = sup.clean(Duration::ZERO, false).await.expect("clean again");
        assert!(
            report.retired.is_empty() && report.already_retired == 1,
            "{report:?}"
        );
        let live_page = sup
            .output(&live, 0, 64, Rendering::SafeText)
            .await
            .expect("live");
        assert_eq!(live_page.data, "live");
        guarded("shutdown", sup.shutdown(Duration::from_millis(200))).await;
        drop(sup);

        // A restart keeps the retirement, and the policy's pass at open retires the rest once
        // they are old enough (here: at once).
        let mut cfg = config(base.path());
        cfg.retention = Some(Duration::ZERO);
        let (services, _rx) = procjournal::supervisor::Services::channel();
        let (sup, _) = procjournal::supervisor::Supervisor::open(cfg, services)
            .await
            .expect("reopen");
        assert!(sup.manifest(&done).expect("manifest").retired.is_some());
        let mut waited = 0;
        while sup.manifest(&live).expect("manifest").retired.is_none() {
            assert!(
                waited < 6000,
                "the pass at open did not retire the stopped process"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
            waited += 1;
        }
        assert!(!spool.join(live.to_string()).exists());
        let (replayed, _) = replay(sup.root());
        assert_eq!(
            manifests_json(&replayed),
            sup.list(&Default::default())
                .iter()
                .map(|m| serde_json::to_string(m).expect("json"))
                .collect::<Vec<_>>()
        );
        guarded("shutdown", sup.shutdown(Duration::from_millis(200))).await;
    });
}

use crate::common::daemon as daemon_common;

/// `procjournal clean` on a root without a daemon, then through one: dry run, retirement, and
/// what `logs`, `ps --json` and `journal manifests --json` then say.
#[test]
fn clean_on_the_command_line_offline_and_through_the_daemon() {
    use daemon_common::{Daemon, client};
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path();
    let (code, out, err) = client(root, &["run", "--", "sh", "-c", "printf kept-until-clean"]);
    assert_eq!((code, out.as_str()), (0, "kept-until-clean"), "{err}");
    let (code, out, err) = client(root, &["ps", "--json"]);
    assert_eq!(code, 0, "{err}");
    let first: serde_json::Value =
        serde_json::from_str(out.lines().next().expect("a line")).expect("json");
    let handle = first["handle"].as_str().expect("handle").to_owned();
    assert!(first["retired"].is_null(), "{first}");

    let (code, out, err) = client(root, &["clean", "--older-than", "1h"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("retired 0 (0 bytes)") && out.contains("1 too recent"),
        "{out}"
    );
    let (code, out, err) = client(root, &["clean", "--older-than", "0s", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("would retire {handle}: 1 files")),
        "{out}"
    );
    assert!(root.join("spool").join(&handle).exists());
    let (code, out, err) = client(root, &["clean", "--older-than", "0s", "--json"]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).expect("json report");
    assert_eq!(report["retired"][0]["handle"], handle.as_str(), "{report}");
    assert_eq!(
        report["retired"][0]["bytes"].as_u64().map(|b| b > 0),
        Some(true)
    );
    assert!(!root.join("spool").join(&handle).exists());

    let (code, _, err) = client(root, &["logs", &handle]);
    assert_eq!(code, 125);
    assert!(
        err.contains("was retired") && err.contains("clean: ended more than 0ms ago"),
        "{err}"
    );
    let out = daemon_common::bin()
        .args(["journal", "manifests", "--json", "--root"])
        .arg(root)
        .output()
        .expect("journal manifests");
    assert!(out.status.success(), "{out:?}");
    let out = String::from_utf8(out.stdout).expect("utf-8");
    let manifest: serde_json::Value =
        serde_json::from_str(out.lines().next().expect("line")).expect("json");
    assert_eq!(
        manifest["retired"]["reason"],
        "clean: ended more than 0ms ago"
    );

    // Through a daemon (which keeps output 7 days by default): a second process, cleaned on
    // demand; reading it is the `retired` error, not an I/O failure.
    let mut daemon = Daemon::start(root);
    let (code, out, err) = client(root, &["start", "--", "sh", "-c", "printf second"]);
    assert_eq!(code, 0, "{err}");
    let second = out.trim().to_owned();
    let (code, _, err) = client(root, &["wait", &second]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = client(root, &["clean", "--older-than", "0s"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("retired {second}")), "{out}");
    assert!(out.contains("1 retired earlier"), "{out}");
    let (code, _, err) = client(root, &["logs", &second]);
    assert_eq!(code, 125);
    assert!(err.contains("was retired"), "{err}");
    let (code, out, err) = client(root, &["ps", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().filter(|l| l.contains("\"retired\":{")).count(),
        2,
        "{out}"
    );
    let (code, _, err) = client(root, &["shutdown"]);
    assert_eq!(code, 0, "{err}");
    daemon.wait_exit();
}
