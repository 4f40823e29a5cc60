//! Admission on default settings through the daemon, with real processes and the real /proc
//! telemetry: idle trees hold no core, so many sleeps fit on a small host; CPU-bound trees are
//! charged what they demand, so on 2 cores the third and fourth loops wait in line (the CLI's
//! default) and start in order as capacity frees. Assertions are about order and state only.

use crate::common::daemon as daemon_common;

use std::path::Path;
use std::time::{Duration, Instant};

use daemon_common::{Daemon, client};

fn admission(root: &Path) -> serde_json::Value {
    let (code, out, err) = client(root, &["admission", "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("admission json")
}

/// Polls `admission` until `done` holds; a generous hang guard only.
fn until(root: &Path, what: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let guard = Instant::now() + Duration::from_secs(180);
    loop {
        let v = admission(root);
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < guard, "hung waiting for {what}: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start_in_thread(root: &Path, script: &[&str]) -> std::thread::JoinHandle<(i32, String, String)> {
    let root = root.to_owned();
    let mut args: Vec<String> = vec!["start".into(), "--".into()];
    args.extend(script.iter().map(|s| (*s).to_owned()));
    std::thread::spawn(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        client(&root, &args)
    })
}

/// 20 concurrent `start -- sleep 600` and a `start -- echo hi`: all admitted (the default waits
/// for a burst's samples to settle), all running or exited; then stopped.
#[test]
fn twenty_sleeps_and_an_echo_fit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let _daemon = Daemon::start_with(root, &["--share", "70"]);
    let sleeps: Vec<_> = (0..20)
        .map(|_| start_in_thread(root, &["sleep", "600"]))
        .collect();
    let echo = start_in_thread(root, &["echo", "hi"]);
    let mut handles = Vec::new();
    for t in sleeps {
        let (code, out, err) = t.join().expect("thread");
        assert_eq!(code, 0, "{err}");
        handles.push(out.trim().to_owned());
    }
    let (code, out, err) = echo.join().expect("thread");
    assert_eq!(code, 0, "{err}");
    let echo = out.trim().to_owned();
    let (code, _, err) = client(root, &["wait", &echo]);
    assert_eq!(code, 0, "{err}");
    let v = admission(root);
    assert_eq!(v["decision"]["basis"], "automatic", "{v}");
    for h in &handles {
        let (code, out, err) = client(root, &["wait", "--timeout", "1ms", h]);
        assert_eq!(code, 124, "{h} is still running: {out} {err}");
    }
    for h in &handles {
        let (code, _, err) = client(root, &["stop", h]);
        assert_eq!(code, 0, "{err}");
    }
    until(root, "all released", |v| v["decision"]["in_use"] == 0);
    let (code, _, err) = client(root, &["shutdown"]);
    assert_eq!(code, 0, "{err}");
}

/// Four CPU-bound loops on this 2-core host: the first two run, the third and fourth wait
/// (queued, in order), the third starts when the first is stopped, the fourth when the second is.
#[test]
fn busy_loops_wait_in_order_for_cores() {
    if std::thread::available_parallelism().map_or(0, |n| n.get()) != 2 {
        eprintln!("skipped: the counts below are for a 2-core host");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let _daemon = Daemon::start_with(root, &["--share", "70"]);
    let looping = ["sh", "-c", "while :; do :; done"];
    let first = start_in_thread(root, &looping).join().expect("thread");
    assert_eq!(first.0, 0, "{}", first.2);
    let second = start_in_thread(root, &looping).join().expect("thread");
    assert_eq!(second.0, 0, "{}", second.2);
    let third = start_in_thread(root, &looping);
    until(root, "the third queued", |v| v["queued"] == 1);
    let fourth = start_in_thread(root, &looping);
    let v = until(root, "the fourth queued", |v| v["queued"] == 2);
    assert_eq!(v["decision"]["in_use"], 2, "{v}");
    assert!(!third.is_finished() && !fourth.is_finished());
    let (code, _, err) = client(root, &["stop", first.1.trim()]);
    assert_eq!(code, 0, "{err}");
    let third = third.join().expect("thread");
    assert_eq!(third.0, 0, "{}", third.2);
    assert_eq!(
        third.2.matches("waiting for capacity").count(),
        1,
        "{}",
        third.2
    );
    let v = admission(root);
    assert_eq!(v["queued"], 1, "the fourth still waits: {v}");
    assert!(!fourth.is_finished());
    let (code, _, err) = client(root, &["stop", second.1.trim()]);
    assert_eq!(code, 0, "{err}");
    let fourth = fourth.join().expect("thread");
    assert_eq!(fourth.0, 0, "{}", fourth.2);
    for h in [&third.1, &fourth.1] {
        let (code, _, err) = client(root, &["stop", h.trim()]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = client(root, &["shutdown"]);
    assert_eq!(code, 0, "{err}");
}
