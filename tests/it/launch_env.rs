//! The launch environment and its secrets end to end, with the real
//! binary, real children and real files: Git redirection removed from the host's environment;
//! a missing working directory refused before anything is journaled; a variable's value seen by
//! the child and found in no file under the root (journal, spool, snapshot) and in no output of
//! `journal dump`, `journal manifests` or `ps`; a command started through the daemon runs in the
//! client's working directory and environment, not the daemon's; the login-shell overlay from a
//! fake `$SHELL`, and from a failing one.
//!
//! Children report what they saw through their exit status and output, never by echoing a
//! secret: a value is printed as hex (`od`), which holds none of the marker's bytes in order.

use crate::common::daemon as daemon_common;
use crate::common::supervisor as supervisor_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use daemon_common::{Daemon, bin, client};
use procjournal::lifecycle::event::EnvBase;
use procjournal::lifecycle::{Lifecycle, State};
use procjournal::supervisor::StartError;
use procjournal::{Durability, JournalOptions};
use serde_json::Value;
use supervisor_common::{config, files_containing, guarded, open, sh, temp_root};

/// The Git variables the test plants in a host environment: the brief's list and git's
/// configuration injection.
const GIT_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CONFIG",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_KEY_0",
    "GIT_CONFIG_VALUE_0",
];

/// Secret markers: letters outside the hex digits, so that no hex rendering contains them.
const SECRET: &str = "sEcReT-token-qwz-7731";
const CLIENT_SECRET: &str = "cLiEnT-only-qwz-4410";
const DAEMON_SECRET: &str = "dAeMoN-only-qwz-9902";
/// A value marked persistable: the journal keeps it, so the scans below must find it (they
/// would find a leaked secret the same way).
const PERSISTED: &str = "pErSiStEd-qwz-5150";

fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The output of the offline tools over `root`: `journal dump` (text and JSON), `journal
/// manifests --json` and `ps --json` (its offline fallback, with no daemon).
fn tool_outputs(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for args in [
        &["journal", "dump"][..],
        &["journal", "dump", "--json"],
        &["journal", "manifests", "--json"],
        &["ps", "--json"],
    ] {
        let o = bin()
            .args(args)
            .arg("--root")
            .arg(root)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!o.stdout.is_empty(), "{args:?} printed nothing: {text}");
        out.push((args.join(" "), text));
    }
    out
}

/// Takes a snapshot of `root`'s journal (what a long-running supervisor writes in the
/// background), so that the scan covers a snapshot file too.
fn force_snapshot(root: &Path) {
    let options = JournalOptions {
        durability: Durability::Os,
        ..JournalOptions::default()
    };
    let (mut lc, _, _) = Lifecycle::open(root, options).unwrap();
    assert!(lc.snapshot_now().unwrap().is_some(), "no snapshot written");
    let snapshots = std::fs::read_dir(root.join("snapshots")).unwrap().count();
    assert!(snapshots > 0);
}

/// Asserts that `secrets` are in no file under `root` and in no tool output, and that
/// `persisted` is (so that the scan is one that finds what is there).
fn assert_secrets_nowhere(root: &Path, secrets: &[&str], persisted: &str) {
    for secret in secrets {
        assert_eq!(
            files_containing(root, secret),
            Vec::<PathBuf>::new(),
            "{secret} on disk"
        );
    }
    assert!(
        !files_containing(root, persisted).is_empty(),
        "the persisted value is on disk"
    );
    let outputs = tool_outputs(root);
    for (tool, text) in &outputs {
        for secret in secrets {
            assert!(!text.contains(secret), "{tool} printed {secret}: {text}");
        }
    }
    let manifests = &outputs[2].1;
    assert!(manifests.contains(persisted), "{manifests}");
    assert!(
        manifests.contains("\"TOKEN\""),
        "the name is kept: {manifests}"
    );
}

fn manifests(root: &Path) -> Vec<Value> {
    let o = bin()
        .args(["journal", "manifests", "--json", "--root"])
        .arg(root)
        .output()
        .unwrap();
    let (code, out, err) = (
        o.status.code().unwrap_or(-1),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(code == 0 || code == 1, "{err}");
    let mut lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines.pop(); // the replay report
    lines
}

/// The child's check of its environment: exit 11 when a Git variable is visible, 0 otherwise
/// after printing `TOKEN` in hex.
fn git_check_script() -> String {
    let mut script = String::new();
    for v in GIT_VARS {
        script.push_str(&format!("[ -z \"${{{v}+x}}\" ] || exit 11; "));
    }
    script.push_str("printf %s \"$TOKEN\" | od -An -tx1 | tr -d ' \\n'");
    script
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_git_redirection_cwd_and_secrets() {
    let dir = temp_root();
    let cfg = config(dir.path());
    let root = cfg.root.clone();
    let work = tempfile::tempdir().unwrap();
    let (sup, _events) = open(cfg).await;

    // A missing working directory: a typed error, and nothing journaled.
    let missing = work.path().join("gone");
    let prepared = sup.prepare(sh(&missing, "true")).unwrap();
    match guarded("start", sup.start(prepared)).await {
        Err(StartError::WorkingDirectory { path, .. }) => {
            assert_eq!(path, missing.to_str().unwrap());
        }
        other => panic!("a start in a missing directory: {other:?}"),
    }
    assert!(sup.list(&Default::default()).is_empty());
    assert!(
        supervisor_common::journal_records(&root).is_empty(),
        "a record of a process that never ran"
    );

    // Git redirection in the base is removed; a deliberate override of one stands; the
    // secret reaches the child.
    let mut base: BTreeMap<String, String> = GIT_VARS
        .iter()
        .map(|v| ((*v).to_owned(), format!("/elsewhere/{v}")))
        .collect();
    base.insert("PATH".into(), "/usr/bin:/bin".into());
    let command = sh(
        work.path(),
        &format!(
            "{} ; [ \"$ISOLATED\" = \"$GIT_INDEX_FILE\" ] || exit 12",
            git_check_script().replace("[ -z \"${GIT_INDEX_FILE+x}\" ] || exit 11; ", "")
        ),
    )
    .env_base(base)
    .env("TOKEN", SECRET)
    .env("GIT_INDEX_FILE", "/tmp/isolated-index")
    .env_persisted("ISOLATED", "/tmp/isolated-index")
    .env_persisted("MODE", PERSISTED);
    let handle = supervisor_common::start(&sup, command).await;
    let summary = guarded("wait", sup.wait(&handle, None)).await.unwrap();
    assert_eq!(summary.state, State::Exited);
    assert_eq!(
        summary.exit,
        procjournal::lifecycle::event::ExitStatus::Code(0)
    );
    let page = sup
        .output(
            &handle,
            0,
            4096,
            procjournal::supervisor::Rendering::SafeText,
        )
        .await
        .unwrap();
    assert_eq!(page.data, hex(SECRET), "{page:?}");

    let m = sup.manifest(&handle).unwrap();
    let policy = m.command.env_policy().unwrap();
    assert_eq!(policy.base, EnvBase::Explicit);
    let mut removed = policy.removed.clone();
    removed.sort();
    let mut planted: Vec<String> = GIT_VARS.iter().map(|v| (*v).to_owned()).collect();
    planted.sort();
    assert_eq!(removed, planted);
    assert_eq!(
        m.command.withheld_env_names().collect::<Vec<_>>(),
        ["TOKEN", "GIT_INDEX_FILE"]
    );
    sup.shutdown(std::time::Duration::from_secs(5)).await;
    drop(sup);

    force_snapshot(&root);
    assert_secrets_nowhere(&root, &[SECRET], PERSISTED);
}

/// `sh -c SCRIPT sh ARGS...` through `procjournal start`, run from `cwd` with `env` added to
/// this test's environment; returns the handle.
fn start_from(root: &Path, cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    let mut cmd = bin();
    cmd.arg("start")
        .arg("--root")
        .arg(root)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "start: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Waits for `handle` and returns (exit code, output).
fn finished(root: &Path, handle: &str) -> (i64, String) {
    let (code, _, err) = client(root, &["wait", handle]);
    assert!(code == 0 || code == 1, "wait: {err}");
    let (code, out, err) = client(root, &["ps", "--json"]);
    assert_eq!(code, 0, "{err}");
    let info: Value = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["handle"] == handle)
        .unwrap();
    let (code, logs, err) = client(root, &["logs", "--raw", handle]);
    assert_eq!(code, 0, "{err}");
    (info["exit_code"].as_i64().unwrap_or(-1), logs)
}

#[test]
fn through_the_daemon_the_client_context_runs_and_no_secret_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // The daemon's own environment: a variable only it has, and Git redirection.
    let mut daemon_env: Vec<(&str, String)> = vec![("DAEMON_ONLY", DAEMON_SECRET.into())];
    daemon_env.extend(GIT_VARS.iter().map(|v| (*v, format!("/daemon/{v}"))));
    let daemon = Daemon::start_env(root, &[], &daemon_env);
    let work = tempfile::tempdir().unwrap();
    let work_path = std::fs::canonicalize(work.path()).unwrap();

    // Started from `work`, with a variable exported only in the client's environment and a Git
    // variable of the client's own.
    let script = format!(
        "[ \"$(pwd -P)\" = \"$1\" ] || exit 12; [ -z \"${{DAEMON_ONLY+x}}\" ] || exit 14; \
         [ -n \"$CLIENT_ONLY\" ] || exit 13; {}; printf %s \"$CLIENT_ONLY\" | od -An -tx1 | tr -d ' \\n'",
        git_check_script()
    );
    let handle = start_from(
        root,
        &work_path,
        &[
            ("CLIENT_ONLY", CLIENT_SECRET),
            ("GIT_WORK_TREE", "/client/tree"),
        ],
        &[
            "--env",
            &format!("TOKEN={SECRET}"),
            "--env-persist",
            &format!("MODE={PERSISTED}"),
            "--",
            "sh",
            "-c",
            &script,
            "sh",
            work_path.to_str().unwrap(),
        ],
    );
    let (code, out) = finished(root, &handle);
    assert_eq!(code, 0, "exit {code}: {out}");
    assert_eq!(out, format!("{}{}", hex(SECRET), hex(CLIENT_SECRET)));

    // `--daemon-env` asks for the daemon's environment: its variable passes, its Git
    // redirection does not.
    let handle = start_from(
        root,
        &work_path,
        &[],
        &[
            "--daemon-env",
            "--",
            "sh",
            "-c",
            &format!("{}; [ -n \"$DAEMON_ONLY\" ] || exit 15", git_check_script()),
        ],
    );
    let (code, out) = finished(root, &handle);
    assert_eq!(code, 0, "exit {code}: {out}");

    // A missing working directory: refused, nothing recorded.
    let before = manifests(root).len();
    let (code, _, err) = client(
        root,
        &["start", "--cwd", "/nonexistent-pj-dir", "--", "true"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("does not exist"), "{err}");
    assert_eq!(manifests(root).len(), before);

    let all = manifests(root);
    assert_eq!(all[0]["command"]["env_policy"]["base"], "client");
    assert_eq!(all[1]["command"]["env_policy"]["base"], "inherited");
    let removed = all[1]["command"]["env_policy"]["removed"]
        .as_array()
        .unwrap();
    assert_eq!(removed.len(), GIT_VARS.len(), "{removed:?}");
    let (code, _, err) = client(root, &["shutdown"]);
    assert_eq!(code, 0, "{err}");
    drop(daemon);

    force_snapshot(root);
    assert_secrets_nowhere(root, &[SECRET, CLIENT_SECRET, DAEMON_SECRET], PERSISTED);
}

fn fake_shell(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fake-shell");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn the_login_shell_overlay_sets_path_like_variables_only_and_a_failure_changes_nothing() {
    let client_path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    for failing in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let shell = if failing {
            fake_shell(dir.path(), "echo 'profile broke' >&2; exit 3")
        } else {
            fake_shell(
                dir.path(),
                "export PATH=/opt/fake-toolchain/bin:/usr/bin:/bin\n\
                 export DOTNET_ROOT=/opt/dotnet\n\
                 export PROFILE_SECRET=from-profile\n\
                 exec /bin/sh -c \"$3\"",
            )
        };
        let _daemon = Daemon::start_with(&root, &["--login-shell", shell.to_str().unwrap()]);
        let handle = start_from(
            &root,
            dir.path(),
            &[],
            &[
                "--login-shell-overlay",
                "--",
                "/bin/sh",
                "-c",
                "printf '%s|%s|%s' \"$PATH\" \"${DOTNET_ROOT-}\" \"${PROFILE_SECRET-unset}\"",
            ],
        );
        let (code, out) = finished(&root, &handle);
        assert_eq!(code, 0, "{out}");
        let overlay = &manifests(&root)[0]["command"]["env_policy"]["overlay"];
        if failing {
            assert_eq!(out, format!("{client_path}||unset"));
            assert_eq!(overlay["status"], "failed", "{overlay}");
            assert!(
                overlay["reason"].as_str().unwrap().contains("exit"),
                "{overlay}"
            );
        } else {
            assert_eq!(
                out,
                "/opt/fake-toolchain/bin:/usr/bin:/bin|/opt/dotnet|unset"
            );
            assert_eq!(overlay["status"], "applied", "{overlay}");
            assert_eq!(overlay["names"], serde_json::json!(["PATH", "DOTNET_ROOT"]));
        }
        // Without the flag, the overlay is off.
        let handle = start_from(&root, dir.path(), &[], &["--", "true"]);
        finished(&root, &handle);
        let second = &manifests(&root)[1]["command"]["env_policy"]["overlay"];
        assert_eq!(second["status"], "off");
    }
}

/// `procjournal run` in a host environment holding Git redirection: the child sees none of it.
#[test]
fn run_removes_git_redirection_from_the_host_environment() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = bin();
    cmd.arg("run")
        .arg("--root")
        .arg(dir.path())
        .args(["--", "sh", "-c", &git_check_script()])
        .env("TOKEN", "t")
        .current_dir(dir.path())
        .stdin(Stdio::null());
    for v in GIT_VARS {
        cmd.env(v, format!("/host/{v}"));
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), hex("t"));
}
