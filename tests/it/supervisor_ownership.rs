//! The supervisor owns everything it starts: workloads start clean, a tree is reached
//! after its leader exited, finished processes leave the table, every bound answers with a typed
//! error, and any interleaving of operations ends with every process terminal exactly once and
//! every task joined. Real processes, real signals; nothing here measures time.

use crate::common::supervisor as supervisor_common;

use std::path::Path;
use std::process::Command as OsCommand;
use std::time::Duration;

use procjournal::lifecycle::event::kinds;
use procjournal::lifecycle::{Handle, State};
use procjournal::supervisor::{Rendering, Supervisor, SupervisorError, SupervisorStats};
use proptest::prelude::*;
use supervisor_common::{config, guarded, journal_records, open, sh, start, temp_root};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_procjournal")
}

/// `procjournal run -- ARGS` started by a shell that ignores SIGINT and SIGQUIT and holds
/// descriptor 7 open without close-on-exec: what a workload would inherit from a careless host.
fn run_from_a_careless_shell(root: &Path, args: &str) -> std::process::Output {
    let wrapper = format!(
        "trap '' INT QUIT; exec 7</dev/null; exec '{}' run --root '{}' -- {args}",
        bin(),
        root.display(),
    );
    OsCommand::new("sh")
        .arg("-c")
        .arg(wrapper)
        .output()
        .expect("run procjournal")
}

/// Pins: a workload inherited ignored SIGINT/SIGQUIT (std's Command resets only SIGPIPE) and any
/// descriptor its host had not marked close-on-exec. The workloads are the probes themselves
/// (no shell between: a shell blocks every signal while it forks, which a probe could catch).
#[test]
fn a_workload_starts_with_default_signals_an_empty_mask_and_only_its_three_streams() {
    let root = temp_root();
    let out = run_from_a_careless_shell(root.path(), "grep -E '^Sig(Ign|Blk)' /proc/self/status");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        let hex = text
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {text}"))
            .trim();
        u64::from_str_radix(hex, 16).expect("hex mask")
    };
    // Signals 1-31: none ignored (glibc keeps its internal 32 and 33 ignored in any
    // posix_spawn child; they are below SIGRTMIN and unusable by programs).
    assert_eq!(field("SigIgn:") & 0x7fff_ffff, 0, "{text}");
    assert_eq!(field("SigBlk:"), 0, "{text}");

    let out = run_from_a_careless_shell(root.path(), "ls -l /proc/self/fd");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once(" -> "))
        .filter(|(_, target)| !(target.starts_with("/proc/") && target.ends_with("/fd")))
        .filter_map(|(left, _)| left.split_whitespace().last())
        .collect();
    fds.sort_unstable();
    // Beside the directory `ls` itself is reading: the three pipes, and nothing else.
    assert_eq!(fds, ["0", "1", "2"], "{text}");
}

/// Pins: Ctrl-C (and a stop's first signal) did nothing to a workload whose host ignored SIGINT.
#[test]
fn sigint_reaches_a_workload_whose_host_ignored_it() {
    let root = temp_root();
    let out =
        run_from_a_careless_shell(root.path(), "sh -c 'kill -INT $$; sleep 5; echo survived'");
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("survived"),
        "{out:?}"
    );
}

fn alive(pid: u32) -> bool {
    // A zombie has exited; only its parent's wait is missing.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

async fn stats(sup: &Supervisor) -> SupervisorStats {
    sup.stats().await.expect("stats")
}

/// Starts a leader that leaves a SIGTERM-ignoring member in its group and exits; returns the
/// handle and the member's pid once the leader is terminal.
async fn leader_leaves_a_member(sup: &Supervisor, cwd: &Path) -> (Handle, u32) {
    let h = start(
        sup,
        sh(
            cwd,
            "sh -c 'trap \"\" TERM; exec sleep 300' >/dev/null 2>&1 & echo $!",
        ),
    )
    .await;
    let summary = guarded("leader exit", sup.wait(&h, None))
        .await
        .expect("wait");
    assert_eq!(summary.state, State::Exited);
    let page = guarded("output", sup.output(&h, 0, 1024, Rendering::SafeText))
        .await
        .expect("output");
    let pid: u32 = page.data.trim().parse().expect("the member's pid");
    assert!(alive(pid), "the member runs on after its leader");
    (h, pid)
}

/// Pins: after a group leader exited, a child still in its group could no longer be reached by
/// stop (the process was terminal, stop returned at once, the child lived on unowned).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_reaches_a_group_member_after_its_leader_exited() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let (h, member) = leader_leaves_a_member(&sup, root.path()).await;
    assert_eq!(stats(&sup).await.lingering, 1, "the tree stays owned");

    let summary = guarded("stop", sup.stop(&h, Duration::from_millis(200)))
        .await
        .expect("stop of a lingering tree");
    assert_eq!(summary.state, State::Exited, "the leader's result stands");
    assert!(!alive(member), "the member ignoring SIGTERM was killed");
    // The watcher reports the empty tree; the entry goes.
    guarded("lingering entry gone", async {
        while stats(&sup).await.lingering != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    sup.shutdown(Duration::from_millis(100)).await;
}

/// Pins: shutdown stopped only live leaders, leaving the descendants of finished ones running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_reaches_trees_whose_leader_already_exited() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let (_, member) = leader_leaves_a_member(&sup, root.path()).await;
    let report = guarded("shutdown", sup.shutdown(Duration::from_millis(200))).await;
    assert!(report.teardown_failed.is_empty(), "{report:?}");
    assert!(!alive(member), "shutdown killed the lingering member");
    let s = stats(&sup).await;
    assert_eq!(
        (s.live, s.table, s.lingering, s.tasks),
        (0, 0, 0, 0),
        "{s:?}"
    );
}

/// Pins: every finished process kept two descriptors and an entry in two maps forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_processes_leave_the_table_and_readers_stay_bounded() {
    let root = temp_root();
    let mut cfg = config(root.path());
    cfg.finished_readers_cached = 3;
    let (sup, _rx) = open(cfg).await;
    // Descriptors of this test's root only: sibling tests in this binary open their own.
    let rt = root.path().join("rt");
    let fds = || {
        std::fs::read_dir("/proc/self/fd")
            .expect("fds")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.starts_with(&rt))
            .count()
    };
    let mut handles = Vec::new();
    for i in 0..20 {
        let h = start(&sup, sh(root.path(), &format!("echo {i}"))).await;
        guarded("wait", sup.wait(&h, None)).await.expect("wait");
        handles.push(h);
    }
    let before = fds();
    for (i, h) in handles.iter().enumerate() {
        let page = guarded("read", sup.output(h, 0, 64, Rendering::SafeText))
            .await
            .expect("read a finished process");
        assert_eq!(page.data, format!("{i}\n"));
    }
    let s = stats(&sup).await;
    assert_eq!((s.live, s.table, s.lingering), (0, 0, 0), "{s:?}");
    assert!(s.readers_cached <= 3, "{s:?}");
    // Three cached readers at most hold descriptors; twenty would have held twenty or more.
    assert!(fds() <= before + 3 * 2, "{} -> {}", before, fds());
    sup.shutdown(Duration::from_millis(100)).await;
    assert_eq!(stats(&sup).await.tasks, 0);
}

/// Pins: a client could open waits on one process without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_per_process_are_bounded_with_a_typed_error() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let h = start(&sup, sh(root.path(), "exec sleep 300")).await;
    let max = procjournal::limits::WAITERS_PER_PROCESS_MAX;
    // One more than the bound, all at once: exactly one is refused, whichever came last.
    let mut waits = tokio::task::JoinSet::new();
    for _ in 0..=max {
        let (sup, h) = (sup.clone(), h);
        waits.spawn(async move { sup.wait(&h, None).await });
    }
    let refused = guarded("the refusal", waits.join_next())
        .await
        .expect("a waiter")
        .expect("join");
    match refused {
        Err(SupervisorError::Bound { bound, limit }) => {
            assert_eq!((bound, limit), ("WAITERS_PER_PROCESS_MAX", max));
        }
        other => panic!("expected the bound, got {other:?}"),
    }
    sup.stop(&h, Duration::from_millis(100))
        .await
        .expect("stop");
    let mut answered = 0;
    while let Some(r) = guarded("waiters", waits.join_next()).await {
        assert_eq!(r.expect("join").expect("wait").state, State::Terminated);
        answered += 1;
    }
    assert_eq!(answered, max);
    sup.shutdown(Duration::from_millis(100)).await;
}

#[derive(Debug, Clone)]
enum Op {
    Start(u8),
    Send(usize),
    Stop(usize),
    Wait(usize),
    Shutdown,
    Pause(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4).prop_map(Op::Start),
        2 => (0usize..8).prop_map(Op::Send),
        2 => (0usize..8).prop_map(Op::Stop),
        2 => (0usize..8).prop_map(Op::Wait),
        1 => Just(Op::Shutdown),
        2 => (0u8..20).prop_map(Op::Pause),
    ]
}

/// The workloads an interleaving picks from: one that reads its input, one that exits at once,
/// one that ignores SIGTERM, one that leaves a member of its group behind.
const WORKLOADS: [&str; 4] = [
    "head -c 3",
    "exit 3",
    "trap '' TERM; sleep 30",
    "sleep 30 >/dev/null 2>&1 & exit 0",
];

async fn interleaving(ops: Vec<Op>) {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut handles: Vec<Handle> = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    for op in ops {
        match op {
            Op::Start(w) => {
                if let Ok(p) = sup.prepare(sh(root.path(), WORKLOADS[usize::from(w)]))
                    && let Ok(h) = sup.start(p).await
                {
                    handles.push(h);
                }
            }
            Op::Pause(ms) => tokio::time::sleep(Duration::from_millis(u64::from(ms))).await,
            Op::Shutdown => {
                let sup = sup.clone();
                tasks.spawn(async move {
                    sup.shutdown(Duration::from_millis(50)).await;
                });
            }
            Op::Send(i) | Op::Stop(i) | Op::Wait(i) if handles.is_empty() => {
                let _ = i;
            }
            Op::Send(i) => {
                let (sup, h) = (sup.clone(), handles[i % handles.len()]);
                tasks.spawn(async move {
                    let _ = sup.input(&h, b"abc").await;
                });
            }
            Op::Stop(i) => {
                let (sup, h) = (sup.clone(), handles[i % handles.len()]);
                tasks.spawn(async move {
                    let _ = sup.stop(&h, Duration::from_millis(50)).await;
                });
            }
            Op::Wait(i) => {
                let (sup, h) = (sup.clone(), handles[i % handles.len()]);
                tasks.spawn(async move {
                    let _ = sup.wait(&h, Some(Duration::from_millis(100))).await;
                });
            }
        }
    }
    let report = guarded("final shutdown", sup.shutdown(Duration::from_millis(50))).await;
    assert!(report.teardown_failed.is_empty(), "{report:?}");
    guarded("client tasks", async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    // Every process is terminal exactly once, in memory and in the journal.
    for h in &handles {
        let m = sup.manifest(h).expect("manifest");
        assert!(m.state.is_terminal(), "{h}: {:?}", m.state);
    }
    let terminals = journal_records(&root.path().join("rt"))
        .into_iter()
        .filter(|r| r.kind == kinds::TERMINAL)
        .count();
    assert_eq!(terminals, handles.len());
    let s = stats(&sup).await;
    assert_eq!(
        (s.live, s.table, s.lingering, s.tasks),
        (0, 0, 0, 0),
        "after shutdown: {s:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Any interleaving of start, send, stop, wait and shutdown ends with every process terminal
    /// exactly once, every task joined and the table empty of live entries.
    #[test]
    fn any_interleaving_ends_terminal_once_with_every_task_joined(
        ops in proptest::collection::vec(op(), 1..12)
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(interleaving(ops));
    }
}
