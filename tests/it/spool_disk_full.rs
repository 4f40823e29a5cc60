//! A full disk, for real: the spool directory of a runtime root is a small tmpfs, a command
//! writes past it, space comes back (the tmpfs grows), the command writes more. Every byte it
//! wrote is either read back at its cursor or inside the gap the daemon reports with its reason;
//! the capture says incomplete; `spool verify` is OK with the recorded gap; nothing spliced.
//!
//! Needs root (mount). Where mounting is impossible the test says why and passes.

use crate::common::daemon as daemon_common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use daemon_common::{Daemon, client};
use serde_json::Value;

const FIRST: u64 = 12_000_000;
const SECOND: u64 = 1_000_000;

/// Mounts a tmpfs of `size` at `dir`, private (`0700`, as a writer requires of every directory
/// in its root; a tmpfs is `1777` by default); `Err` says why not.
fn mount_tmpfs(dir: &Path, size: &str) -> Result<(), String> {
    let out = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0700"),
            "tmpfs",
        ])
        .arg(dir)
        .output()
        .map_err(|e| format!("cannot run mount: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

fn remount(dir: &Path, size: &str) {
    let out = Command::new("mount")
        .args(["-o", &format!("remount,size={size}")])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The spool directory `spool` of a runtime root on a 4 MiB tmpfs, unmounted on drop; `None`
/// (after saying why) where mounting is impossible.
fn spool_on_tmpfs(spool: &Path) -> Option<Mounted<'_>> {
    std::fs::create_dir_all(spool).unwrap();
    match mount_tmpfs(spool, "4m") {
        Ok(()) => Some(Mounted(spool)),
        Err(why) => {
            eprintln!("SKIPPED: cannot mount a tmpfs for the spool ({why}); this test needs root");
            None
        }
    }
}

/// Unmounts on drop, lazily (a daemon killed on a panic may still hold files there).
struct Mounted<'a>(&'a Path);

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0).status();
    }
}

/// A recovery tool (`spool verify`, `journal manifests`): `--root` after the subcommand pair.
fn tool(root: &Path, command: &[&str], args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_procjournal"))
        .args(command)
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn poll_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every page of `logs --json` from cursor 0: (bytes by cursor, skipped ranges).
fn read_all(root: &Path, handle: &str) -> (Vec<(u64, Vec<u8>)>, Vec<Value>) {
    // Safe text is the bytes themselves here: the command writes only `a` and `b`.
    let (code, out, err) = client(root, &["logs", "--json", handle]);
    assert_eq!(code, 0, "{err}");
    let mut bytes = Vec::new();
    let mut skipped = Vec::new();
    for line in out.lines() {
        let page: Value = serde_json::from_str(line).unwrap();
        if !page["skipped"].is_null() {
            skipped.push(page["skipped"].clone());
        }
        let data = page["data"].as_str().unwrap();
        let decoded = data.as_bytes().to_vec();
        let next = page["next_cursor"].as_u64().unwrap();
        bytes.push((next - decoded.len() as u64, decoded));
    }
    (bytes, skipped)
}

#[test]
fn a_full_disk_is_a_reported_gap_and_output_resumes_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let spool = root.join("spool");
    let Some(_mounted) = spool_on_tmpfs(&spool) else {
        return;
    };
    let mut daemon = Daemon::start(root);
    let flag = root.join("go-on");
    let script = format!(
        "head -c {FIRST} /dev/zero | tr '\\0' a; \
         while [ ! -e {flag} ]; do sleep 0.05; done; \
         head -c {SECOND} /dev/zero | tr '\\0' b",
        flag = flag.display()
    );
    let (code, out, err) = client(root, &["start", "--", "sh", "-c", &script]);
    assert_eq!(code, 0, "{err}");
    let handle = out.trim().to_owned();
    // Every byte of the first part was drained (cursors count lost bytes too).
    poll_until("the first part to be drained", || {
        // A cursor past the end is refused; at the end, the page is empty and says the total.
        let at = FIRST.to_string();
        let (_, out, _) = client(root, &["logs", "--json", "--cursor", &at, &handle]);
        out.lines()
            .next()
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
            .is_some_and(|p| p["total_bytes"].as_u64() == Some(FIRST))
    });
    // While the disk is full, ps already says output was lost once the gap is recorded, and a
    // reader sees the gap now (it is in memory, if not yet in the journal).
    let (_, skipped_now) = read_all(root, &handle);
    assert!(
        skipped_now
            .iter()
            .any(|s| s["kind"] == "gap" && s["reason"].as_str().unwrap().starts_with("disk full")),
        "{skipped_now:?}"
    );
    // The journal has the gap (recorded up to each checkpoint while the disk stays full), so
    // `ps` already says the capture is incomplete.
    poll_until("ps to show the loss", || {
        let (_, out, _) = client(root, &["ps", "--json"]);
        out.lines()
            .next()
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
            .and_then(|i| i["capture"].as_str().map(str::to_owned))
            .is_some_and(|c| c.starts_with("incomplete") && c.contains("disk full"))
    });
    // Space returns; after the writer's retry interval, the command writes more.
    remount(&spool, "64m");
    std::thread::sleep(Duration::from_millis(400));
    std::fs::write(&flag, b"").unwrap();
    let (code, _, err) = client(root, &["wait", &handle]);
    assert_eq!(code, 0, "the command's own status: {err}");

    let (pages, skipped) = read_all(root, &handle);
    // Every byte read is the one written at its cursor: never a splice.
    let mut read_total = 0u64;
    for (cursor, bytes) in &pages {
        for (i, b) in bytes.iter().enumerate() {
            let c = cursor + i as u64;
            let want = if c < FIRST { b'a' } else { b'b' };
            assert_eq!(*b, want, "byte at cursor {c}");
        }
        read_total += bytes.len() as u64;
    }
    // Every cursor is read or inside a reported gap, never both, never neither.
    assert_eq!(skipped.len(), 1, "one gap: {skipped:?}");
    let gap = &skipped[0];
    assert_eq!(gap["kind"], "gap");
    assert!(
        gap["reason"].as_str().unwrap().starts_with("disk full"),
        "{gap}"
    );
    let (from, to) = (gap["from"].as_u64().unwrap(), gap["to"].as_u64().unwrap());
    assert!(0 < from && from < to && to <= FIRST, "{gap}");
    assert_eq!(read_total + (to - from), FIRST + SECOND);
    // The second part, written after space returned, is whole.
    let b_bytes: u64 = pages
        .iter()
        .map(|(c, b)| {
            b.iter()
                .enumerate()
                .filter(|(i, _)| c + *i as u64 >= FIRST)
                .count() as u64
        })
        .sum();
    assert_eq!(b_bytes, SECOND);

    // The text rendering says it on stderr, and `--fail-on-gap` makes it an exit status.
    let (code, _, err) = client(root, &["logs", "--fail-on-gap", &handle]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(&format!(
            "-- {} bytes lost at cursor {from}: disk full",
            to - from
        )),
        "{err}"
    );
    // The capture is incomplete, with the reason, in ps and the manifest.
    let (_, out, _) = client(root, &["ps", "--json"]);
    let info: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let capture = info["capture"].as_str().unwrap_or_default().to_owned();
    assert!(
        capture.starts_with("incomplete") && capture.contains("disk full"),
        "{info}"
    );
    // The spool verifies OK with the recorded gap, and no temporary file is left behind.
    let (code, out, err) = tool(root, &["spool", "verify"], &[&handle]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("lost at cursors"), "{out}");
    let leftovers: Vec<_> = std::fs::read_dir(spool.join(&handle))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".seg"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // The journal recorded the gap: after the daemon is gone, offline readers see the same.
    let (code, _, _) = client(root, &["shutdown"]);
    assert_eq!(code, 0);
    daemon.wait_exit();
    let out = Command::new(env!("CARGO_BIN_EXE_procjournal"))
        .args(["spool", "cat", "--root"])
        .arg(root)
        .arg(&handle)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "a gap is not damage");
    assert_eq!(out.stdout.len() as u64, read_total);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bytes lost at cursor"), "{err}");
    let (code, out, _) = tool(root, &["journal", "manifests"], &["--json"]);
    assert_eq!(code, 0);
    assert!(out.contains("\"gaps\":[{\"from\""), "{out}");
}

/// `run` on a full disk: the terminal gets every byte (it prints from the pipe, not the spool),
/// one line on stderr says the durable copy is incomplete and why, and the exit status is the
/// child's.
#[test]
fn run_prints_everything_and_says_the_durable_copy_has_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let spool = root.join("spool");
    let Some(_mounted) = spool_on_tmpfs(&spool) else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_procjournal"))
        .args(["run", "--root"])
        .arg(root)
        .args([
            "--",
            "sh",
            "-c",
            &format!("head -c {FIRST} /dev/zero | tr '\\0' a; exit 7"),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "the child's status");
    assert_eq!(out.stdout.len() as u64, FIRST);
    assert!(out.stdout.iter().all(|&b| b == b'a'));
    let err = String::from_utf8_lossy(&out.stderr);
    let notices: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("durable copy of this output is incomplete"))
        .collect();
    assert_eq!(notices.len(), 1, "{err}");
    assert!(notices[0].contains("disk full"), "{err}");
}
