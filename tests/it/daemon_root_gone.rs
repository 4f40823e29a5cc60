//! A daemon whose root goes away (deleted, its LOCK removed) notices, stops its processes and
//! exits with a log line saying why, instead of serving for ever on a socket nobody can reach;
//! and `ps` without a daemon, after one was SIGKILLed, says that no daemon serves the root and
//! that the states it shows (`running`) are only the last the journal recorded.

use crate::common::daemon as daemon_common;

use std::io::Read;
use std::path::Path;

use daemon_common::{Daemon, client};
use serde_json::Value;

/// Starts `sleep 1000` and returns its handle and pid.
fn live_sleep(root: &Path) -> (String, i32) {
    let (code, out, err) = client(root, &["start", "--json", "--", "sleep", "1000"]);
    assert_eq!(code, 0, "{err}");
    let info: Value = serde_json::from_str(out.trim()).unwrap();
    let handle = info["handle"].as_str().unwrap().to_owned();
    let (code, out, err) = client(root, &["wait", "--timeout", "0", &handle]);
    // Still running; `ps --json` has its pid once it runs.
    assert_eq!(code, 124, "{out}{err}");
    let (_, list, _) = client(root, &["ps", "--json"]);
    let pid = list
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|p| p["handle"] == handle.as_str())
        .and_then(|p| p["pid"].as_i64())
        .unwrap();
    (handle, pid as i32)
}

fn alive(pid: i32) -> bool {
    // A zombie counts as gone: its tree was taken down, nobody reaped it yet.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Runs the daemon until `remove` has taken something away; returns its status and stderr.
fn daemon_after(remove: impl FnOnce(&Path)) -> (Option<i32>, String, i32) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut daemon = Daemon::start(&root);
    let (_, pid) = live_sleep(&root);
    assert!(alive(pid));
    remove(&root);
    let status = daemon.wait_exit();
    let mut err = String::new();
    daemon
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), err, pid)
}

#[test]
fn a_daemon_whose_root_is_deleted_stops_its_processes_and_exits_saying_why() {
    let (code, err, pid) = daemon_after(|root| {
        // The daemon may write while the tree goes: removed until it is gone.
        while root.exists() {
            let _ = std::fs::remove_dir_all(root);
        }
    });
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("the runtime root is gone"), "{err}");
    assert!(err.contains("was removed"), "{err}");
    assert!(!alive(pid), "the daemon's process {pid} outlived it");
}

#[test]
fn a_daemon_whose_lock_is_removed_exits_too() {
    let (code, err, pid) = daemon_after(|root| std::fs::remove_file(root.join("LOCK")).unwrap());
    assert_eq!(code, Some(125), "{err}");
    assert!(
        err.contains("its LOCK") && err.contains("was removed"),
        "{err}"
    );
    assert!(!alive(pid));
}

#[test]
fn offline_ps_after_a_sigkilled_daemon_says_its_states_are_only_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut daemon = Daemon::start(&root);
    let (handle, _) = live_sleep(&root);
    let (code, ended, err) = client(&root, &["start", "--", "true"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(client(&root, &["wait", ended.trim()]).0, 0);
    daemon.child.kill().unwrap();
    daemon.wait_exit();

    let (code, table, err) = client(&root, &["ps"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("no daemon serves"), "{err}");
    assert!(err.contains("last the journal recorded"), "{err}");
    assert!(err.contains("1 recorded as live"), "{err}");
    let row = table.lines().find(|l| l.contains(&handle)).unwrap();
    assert!(row.contains("running*"), "{table}");

    let (code, list, err) = client(&root, &["ps", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("no daemon serves"), "{err}");
    let processes: Vec<Value> = list
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(processes.len(), 2);
    for p in &processes {
        assert_eq!(p["served"], Value::Bool(false), "{p}");
    }
}
