//! A writer that opens a damaged root says so once, and `--strict` refuses it: roots written by
//! the real `procjournal run`, then damaged as a failing disk or a careless hand would (a bad
//! record with good ones after it, both commit slots of a segment, a file in `journal/` that is
//! no segment), each checked against what `journal verify` reports.

#[path = "common/daemon.rs"]
mod daemon_common;

use std::path::Path;
use std::process::{Output, Stdio};

use daemon_common::{Daemon, bin};
use serde_json::Value;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn cli(root: &Path, before: &[&str], args: &[&str]) -> Output {
    bin()
        .args(before)
        .arg(args[0])
        .arg("--root")
        .arg(root)
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A root holding three finished processes.
fn root_with_history(root: &Path) {
    for n in 0..3 {
        let out = cli(root, &[], &["run", "--", "sh", "-c", &format!("echo {n}")]);
        assert!(out.status.success(), "{out:?}");
    }
}

fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0xff;
    std::fs::write(path, bytes).unwrap();
}

/// A way of damaging a root: what it is, the report field `journal verify --json` must fill,
/// and the damage.
type Damage = (&'static str, &'static str, fn(&Path));

/// Each way of damaging a root.
fn damages() -> Vec<Damage> {
    fn first_segment(root: &Path) -> std::path::PathBuf {
        root.join("journal/00000000000000000000.log")
    }
    vec![
        ("a bad record before good ones", "damaged", |root| {
            // Inside the first record's payload (records start at 160, headers are 48 bytes).
            flip(&first_segment(root), 160 + 48 + 5);
        }),
        ("both commit slots", "damaged_commit_areas", |root| {
            // The slots are the 48 bytes at 64 and at 112; their generation at +8.
            flip(&first_segment(root), 64 + 8);
            flip(&first_segment(root), 112 + 8);
        }),
        ("a stranger in journal/", "unrecognised_files", |root| {
            std::fs::write(root.join("journal/00000000000000000001.log.bak"), b"x").unwrap();
        }),
    ]
}

#[test]
fn writers_warn_once_on_a_damaged_root_and_strict_refuses_it() {
    for (what, field, damage) in damages() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        root_with_history(root);
        damage(root);
        let out = bin()
            .args(["journal", "verify", "--json", "--root"])
            .arg(root)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{what}: {out:?}");
        let report: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
        assert!(
            !report[field].as_array().unwrap().is_empty(),
            "{what}: {field} empty in {report}"
        );

        // Strict: refused with the reason, 125, and the command never ran.
        let marker = dir.path().join("ran");
        let touch = format!("touch '{}'", marker.display());
        for before in [&["--strict"][..], &[][..]] {
            let mut args = vec!["run"];
            if before.is_empty() {
                args.push("--strict");
            }
            args.extend(["--", "sh", "-c", &touch]);
            let out = cli(root, before, &args);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(125), "{what}: {out:?}");
            assert!(
                stderr.contains("the journal is damaged ("),
                "{what}: {stderr}"
            );
            assert!(
                stderr.contains("refusing to open it (strict)"),
                "{what}: {stderr}"
            );
            assert!(!marker.exists(), "{what}: the command ran under --strict");
        }
        let out = cli(root, &["--strict"], &["capture", "--", "true"]);
        assert_eq!(out.status.code(), Some(125), "{what}: capture {out:?}");

        // Not strict: the run goes on, and says so exactly once.
        let out = cli(root, &[], &["run", "--", "sh", "-c", &touch]);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{what}: {out:?}");
        assert!(marker.exists(), "{what}");
        assert_eq!(
            stderr.matches("warning:").count(),
            1,
            "{what}: one warning: {stderr}"
        );
        assert!(
            stderr.contains("the journal is damaged ("),
            "{what}: {stderr}"
        );
        assert!(stderr.contains("--strict refuses"), "{what}: {stderr}");
        let out = cli(root, &[], &["capture", "--", "true"]);
        assert_eq!(
            text(&out.stderr).matches("warning:").count(),
            1,
            "{what}: {out:?}"
        );

        // `ps` without a daemon says it too.
        let out = cli(root, &[], &["ps"]);
        assert!(
            text(&out.stderr).contains("warning: the journal is damaged ("),
            "{what}: {out:?}"
        );
    }
}

#[test]
fn the_daemon_logs_the_damage_ps_shows_it_and_strict_refuses_to_serve() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    root_with_history(root);
    let (_, _, damage) = damages().remove(0);
    damage(root);

    let out = bin()
        .args(["serve", "--strict", "--root"])
        .arg(root)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        text(&out.stderr).contains("refusing to open it (strict)"),
        "{out:?}"
    );

    let mut daemon = Daemon::start(root);
    let out = cli(root, &[], &["ps"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stderr.contains("warning: the daemon opened a damaged root: the journal is damaged ("),
        "{stderr}"
    );
    let out = cli(root, &[], &["shutdown"]);
    assert!(out.status.success(), "{out:?}");
    daemon.wait_exit();
    let mut log = String::new();
    std::io::Read::read_to_string(daemon.child.stderr.as_mut().unwrap(), &mut log).unwrap();
    assert_eq!(log.matches("opening a damaged root").count(), 1, "{log}");
}
