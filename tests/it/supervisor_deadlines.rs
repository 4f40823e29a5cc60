//! The pause gate and the per-process deadlines, with real processes, real signals and real
//! restarts of the supervisor:
//!
//! - pause refuses new starts with a typed refusal and hands the prepared process back; running
//!   processes go on; the gate survives a clean restart that restores it from a snapshot (its
//!   record is not replayed); resume opens it again, and that survives too;
//! - an idle deadline fires on a silent process (its clock runs from the start) and not on one
//!   that writes more often than the limit; the manifest, the journal and `list` say which
//!   deadline fired;
//! - a wall deadline that already ran out when the actor learns of the spawn fires all the same;
//! - a human-input mark suspends the idle clock; input written to the process clears the mark
//!   (journaled) and restarts the clock, after which the deadline fires;
//! - a deadline whose enforcement fails (the tree cannot be signalled: the test launcher's fault
//!   seam) is reported in the manifest and retried, while another process's deadline is
//!   enforced as usual.
//!
//! Nothing asserts on elapsed time. The idle limits are short, and the "must not fire" cases
//! leave a process several times its idle limit of quiet-free time (or of suspension) before the
//! check; the hang guards only bound a hang.

use crate::common::supervisor as supervisor_common;

use std::sync::Arc;
use std::time::Duration;

use procjournal::lifecycle::event::{Deadline, ExitStatus, kinds};
use procjournal::lifecycle::{Handle, LifecycleEvent, SnapshotPolicy, State};
use procjournal::protocol::dispatch::ProcessInfo;
use procjournal::supervisor::{
    Command, Refusal, Services, StartError, Supervisor, SupervisorConfig, SupervisorError,
    TerminalSummary,
};
use supervisor_common::{
    KillGuard, Unsignallable, config, guarded, journal_records, kinds_of, open, replay, sh, start,
    temp_root,
};

async fn wait(sup: &Supervisor, handle: &Handle) -> TerminalSummary {
    guarded("wait", sup.wait(handle, None))
        .await
        .expect("wait for the terminal state")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Reopens the supervisor on `config`'s root (after a clean shutdown of the previous one).
async fn reopen(config: SupervisorConfig) -> (Supervisor, procjournal::supervisor::RestoreReport) {
    let (services, _rx) = Services::channel();
    Supervisor::open(config, services)
        .await
        .expect("reopen supervisor")
}

fn refused_for_pause(
    result: Result<Handle, StartError>,
) -> procjournal::supervisor::PreparedProcess {
    match result {
        Err(StartError::Refused {
            reason: Refusal::Paused,
            prepared,
        }) => prepared,
        other => panic!("expected a start refused for the pause, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_refuses_starts_lets_running_ones_go_on_and_survives_restarts() {
    let root = temp_root();
    let mut cfg = config(root.path());
    // A snapshot at every clean shutdown: the restarts restore from it.
    cfg.snapshots = SnapshotPolicy {
        after_bytes_min: u64::MAX,
        at_shutdown_bytes_min: 1,
        ..SnapshotPolicy::default()
    };
    let (sup, _rx) = open(cfg.clone()).await;
    let mut guard = KillGuard::new(&sup);
    let running = guard.watch(start(&sup, sh(root.path(), "read line; echo got:$line")).await);

    let status = sup.pause("test", "maintenance").await.expect("pause");
    assert!(status.paused && status.changed, "{status:?}");
    assert_eq!(status.reason.as_deref(), Some("maintenance"));
    let again = sup.pause("test", "again").await.expect("pause again");
    assert!(again.paused && !again.changed, "{again:?}");
    assert!(sup.stats().await.expect("stats").paused);

    // A start is refused, typed, and the prepared process comes back whole.
    let prepared = sup
        .prepare(sh(root.path(), "echo never").label("n", "1"))
        .expect("prepare");
    let prepared = refused_for_pause(sup.start(prepared).await);
    assert_eq!(
        prepared.spec().labels.get("n").map(String::as_str),
        Some("1")
    );

    // The running process goes on: it reads input and writes output while paused.
    sup.input(&running, b"hello\n")
        .await
        .expect("input while paused");
    let summary = wait(&sup, &running).await;
    assert_eq!(
        (summary.state, summary.exit),
        (State::Exited, ExitStatus::Code(0))
    );
    let out = sup.output_raw(&running, 0, 1024).await.expect("output");
    assert_eq!(out.bytes, b"got:hello\n");

    // Exactly one gate record: the repeated pause wrote nothing.
    let gates = journal_records(sup.root())
        .into_iter()
        .filter(|r| r.kind == kinds::GATE_CHANGED)
        .count();
    assert_eq!(gates, 1);
    let shut = sup.shutdown(ms(500)).await;
    assert!(shut.teardown_failed.is_empty(), "{shut:?}");
    drop((guard, sup));

    // Restart from the journal (and the snapshot of the shutdown): still paused.
    let (sup, report) = reopen(cfg.clone()).await;
    assert!(report.errors.is_empty(), "{report:?}");
    let snapshot_seq = report
        .replay
        .snapshot_seq
        .expect("restored from a snapshot");
    // Only the records after the snapshot are replayed: the gate's record is not among them, so
    // the gate came from the snapshot. (Publications may follow the shutdown's snapshot.)
    let gate_seq = journal_records(sup.root())
        .iter()
        .find(|r| r.kind == kinds::GATE_CHANGED)
        .map(|r| r.seq)
        .expect("the gate's record");
    assert!(gate_seq <= snapshot_seq, "{gate_seq} > {snapshot_seq}");
    let gate = sup.gate();
    assert!(gate.paused, "{gate:?}");
    assert_eq!(gate.requested_by.as_deref(), Some("test"));
    let prepared = sup.prepare(sh(root.path(), "echo never")).expect("prepare");
    refused_for_pause(sup.start(prepared).await);

    // Resume: starts are admitted again, and that survives a restart too.
    let status = sup.resume("test", "done").await.expect("resume");
    assert!(!status.paused && status.changed, "{status:?}");
    let h = start(&sup, sh(root.path(), "echo ok")).await;
    assert_eq!(wait(&sup, &h).await.state, State::Exited);
    sup.shutdown(ms(500)).await;
    drop(sup);
    let (sup, _) = reopen(cfg).await;
    assert!(!sup.gate().paused);
    let h = start(&sup, sh(root.path(), "echo ok")).await;
    assert_eq!(wait(&sup, &h).await.state, State::Exited);
    // A replay of the whole journal (no snapshot) agrees.
    let (store, replayed) = replay(sup.root());
    assert!(replayed.is_clean(), "{replayed:?}");
    assert!(!store.paused());
    sup.shutdown(ms(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_deadline_fires_on_a_silent_process_and_not_on_a_chatty_one() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let silent =
        guard.watch(start(&sup, sh(root.path(), "exec sleep 60").idle_timeout(ms(300))).await);
    // A line every 50 ms for 2 s, against an idle limit of 1.5 s.
    let chatty = guard.watch(
        start(
            &sup,
            sh(
                root.path(),
                "i=0; while [ $i -lt 40 ]; do echo $i; i=$((i+1)); sleep 0.05; done",
            )
            .idle_timeout(ms(1_500)),
        )
        .await,
    );
    let s = wait(&sup, &silent).await;
    assert_eq!(s.state, State::TimedOut, "{s:?}");
    assert_eq!(s.exit, ExitStatus::Signal(15), "stopped by SIGTERM");
    let m = sup.manifest(&silent).expect("manifest");
    let fired = m.deadline.as_ref().expect("the deadline is recorded");
    assert_eq!((fired.deadline, fired.limit_ms), (Deadline::Idle, 300));
    // Before any activity the idle clock runs from the start.
    assert_eq!(Some(fired.clock_from_unix_ms), m.running_unix_ms);
    let reason = &m.terminal.as_ref().expect("terminal").reason;
    assert!(reason.contains("idle"), "{reason}");
    let info = ProcessInfo::from(&m);
    assert_eq!(info.deadline, Some(Deadline::Idle));
    assert_eq!(info.idle_timeout_ms, Some(300));
    let kinds = kinds_of(&journal_records(sup.root()), &silent);
    let fired_at = kinds
        .iter()
        .position(|k| *k == kinds::DEADLINE_FIRED)
        .expect("a DeadlineFired record");
    let terminal_at = kinds
        .iter()
        .position(|k| *k == kinds::TERMINAL)
        .expect("terminal");
    assert!(fired_at < terminal_at, "{kinds:?}");

    let c = wait(&sup, &chatty).await;
    assert_eq!(
        (c.state, c.exit),
        (State::Exited, ExitStatus::Code(0)),
        "{c:?}"
    );
    assert!(sup.manifest(&chatty).expect("manifest").deadline.is_none());
    sup.shutdown(ms(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_deadline_fires_even_on_a_chatty_process() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let h = guard.watch(
        start(
            &sup,
            sh(root.path(), "while true; do echo x; sleep 0.02; done")
                .timeout(ms(400))
                .idle_timeout(ms(60_000)),
        )
        .await,
    );
    let s = wait(&sup, &h).await;
    assert_eq!(s.state, State::TimedOut);
    let m = sup.manifest(&h).expect("manifest");
    let fired = m.deadline.expect("deadline");
    assert_eq!((fired.deadline, fired.limit_ms), (Deadline::Wall, 400));
    assert_eq!(Some(fired.clock_from_unix_ms), m.running_unix_ms);
    sup.shutdown(ms(500)).await;
}

/// A limit that has run out by the time the actor learns of the spawn (a zero one always has; a
/// short one has on a loaded host) is enforced: nothing else need ask for a sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_deadline_already_due_at_the_spawn_fires() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let command = Command::new("sleep")
        .arg("600")
        .cwd(root.path())
        .timeout(Duration::ZERO);
    let h = guard.watch(start(&sup, command).await);
    let s = wait(&sup, &h).await;
    assert_eq!(s.state, State::TimedOut);
    let fired = sup
        .manifest(&h)
        .expect("manifest")
        .deadline
        .expect("deadline");
    assert_eq!((fired.deadline, fired.limit_ms), (Deadline::Wall, 0));
    sup.shutdown(ms(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_input_mark_suspends_the_idle_clock_until_input_clears_it() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    // `cat` is silent until it gets input.
    let h = guard.watch(
        start(
            &sup,
            Command::new("cat").cwd(root.path()).idle_timeout(ms(400)),
        )
        .await,
    );
    let marked = sup.await_input(&h, true, "test").await.expect("mark");
    assert!(marked.waiting && marked.changed, "{marked:?}");
    assert!(
        !sup.await_input(&h, true, "test")
            .await
            .expect("again")
            .changed
    );
    assert!(sup.manifest(&h).expect("manifest").awaiting_input.is_some());
    // Five idle limits of silence while marked: not stopped.
    tokio::time::sleep(ms(2_000)).await;
    let m = sup.manifest(&h).expect("manifest");
    assert_eq!(m.state, State::Running, "stopped while waiting for a human");
    assert!(m.deadline.is_none());

    // An explicit clear and a new mark are journaled changes.
    assert!(
        sup.await_input(&h, false, "test")
            .await
            .expect("clear")
            .changed
    );
    assert!(
        sup.await_input(&h, true, "test")
            .await
            .expect("mark")
            .changed
    );
    // Input clears the mark (by "input") and restarts the clock; then silence fires it.
    sup.input(&h, b"answer\n").await.expect("input");
    let s = wait(&sup, &h).await;
    assert_eq!(s.state, State::TimedOut, "{s:?}");
    let m = sup.manifest(&h).expect("manifest");
    assert!(m.awaiting_input.is_none());
    let fired = m.deadline.expect("deadline");
    assert_eq!(fired.deadline, Deadline::Idle);
    let records = journal_records(sup.root());
    let marks: Vec<(bool, String, u64)> = records
        .iter()
        .filter_map(|r| match &r.event {
            LifecycleEvent::HumanInput(e) if e.handle == h => {
                Some((e.waiting, e.by.clone(), e.at_unix_ms))
            }
            _ => None,
        })
        .collect();
    let shape: Vec<(bool, &str)> = marks.iter().map(|(w, by, _)| (*w, by.as_str())).collect();
    assert_eq!(
        shape,
        vec![
            (true, "test"),
            (false, "test"),
            (true, "test"),
            (false, "input")
        ]
    );
    // The clock that ran out started no earlier than the clear by input.
    let cleared_at = marks.last().map(|m| m.2).expect("cleared");
    assert!(
        fired.clock_from_unix_ms + 50 >= cleared_at,
        "the idle clock ran from {} but input cleared the mark at {cleared_at}",
        fired.clock_from_unix_ms
    );
    let out = sup.output_raw(&h, 0, 1024).await.expect("output");
    assert_eq!(out.bytes, b"answer\n");
    // A process that is not running cannot be marked.
    assert!(matches!(
        sup.await_input(&h, true, "test").await,
        Err(SupervisorError::NotRunning(x)) if x == h
    ));
    sup.shutdown(ms(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_that_cannot_be_enforced_is_reported_and_does_not_block_the_others() {
    let root = temp_root();
    let signaller = Arc::new(Unsignallable {
        first: true,
        ..Unsignallable::default()
    });
    let mut cfg = config(root.path());
    cfg.launcher = signaller.clone();
    cfg.default_grace = ms(100);
    let (sup, _rx) = open(cfg).await;
    let mut guard = KillGuard::new(&sup);
    // The stuck one's deadline comes first; its enforcement fails while the other's runs.
    let stuck =
        guard.watch(start(&sup, sh(root.path(), "exec sleep 60").idle_timeout(ms(200))).await);
    let normal =
        guard.watch(start(&sup, sh(root.path(), "exec sleep 60").idle_timeout(ms(600))).await);
    let stuck_pid = sup.manifest(&stuck).and_then(|m| m.pid).expect("pid");
    assert_eq!(*signaller.pgid.lock().expect("lock"), Some(stuck_pid));

    let s = wait(&sup, &normal).await;
    assert_eq!((s.state, s.exit), (State::TimedOut, ExitStatus::Signal(15)));
    let m = sup.manifest(&normal).expect("manifest");
    assert_eq!(
        m.deadline.as_ref().map(|d| d.deadline),
        Some(Deadline::Idle)
    );
    assert!(m.deadline_failures.is_empty());

    // The stuck one: fired, its failure recorded (and retried), still running.
    let failures = guarded("a recorded deadline failure", async {
        loop {
            let m = sup.manifest(&stuck).expect("manifest");
            if !m.deadline_failures.is_empty() {
                return m;
            }
            tokio::time::sleep(ms(20)).await;
        }
    })
    .await;
    assert_eq!(failures.state, State::Running);
    assert_eq!(
        failures.deadline.as_ref().map(|d| d.deadline),
        Some(Deadline::Idle)
    );
    let error = &failures.deadline_failures[0].error;
    assert!(error.contains("injected"), "{error}");
    let info = ProcessInfo::from(&failures);
    assert_eq!(info.deadline, Some(Deadline::Idle));

    // Once the tree goes (killed from outside), the process ends as timed out.
    let pgid = nix::unistd::Pid::from_raw(i32::try_from(stuck_pid).expect("pid fits"));
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL).expect("killpg");
    let s = wait(&sup, &stuck).await;
    assert_eq!(s.state, State::TimedOut, "{s:?}");
    let (store, replayed) = replay(sup.root());
    assert!(replayed.is_clean(), "{replayed:?}");
    // The replay has the deadline and its failure (publications may still be on their way).
    let fields = |m: &procjournal::lifecycle::Manifest| {
        (m.state, m.deadline.clone(), m.deadline_failures.clone())
    };
    assert_eq!(
        store.get(&stuck).as_deref().map(fields),
        sup.manifest(&stuck).as_ref().map(fields)
    );
    sup.shutdown(ms(500)).await;
}
