//! The supervisor with real processes and real signals: every terminal state reached on purpose
//! (and checked in the returned summary, in `manifest()` and in a fresh replay of the journal),
//! drain before wait, input, output rendering and cursors, list filters, shutdown, teardown that
//! cannot signal, and capacity.
//!
//! Only the `Signaller` seam is replaced, and only to make signals fail. Nothing here measures
//! time: waits are on conditions (`wait`, `output_changed`, service channels); the only timeouts
//! are hang guards.

use crate::common::supervisor as supervisor_common;

use std::sync::Arc;
use std::time::Duration;

use procjournal::lifecycle::event::{CaptureStatus, ExitStatus, kinds};
use procjournal::lifecycle::{Handle, LifecycleEvent, State};
use procjournal::spool::SpoolOptions;
use procjournal::spool::format::Stream;
use procjournal::supervisor::{
    Command, ListFilter, Refusal, Rendering, ServiceEvent, Services, StartError, Supervisor,
    SupervisorError, TerminalSummary,
};
use supervisor_common::{
    Clock, CountingLease, KillGuard, Unsignallable, base64, completed_of, config, guarded,
    journal_records, kind_name, kinds_of, open, replay, sh, start, temp_root,
};

async fn wait(sup: &Supervisor, handle: &Handle) -> TerminalSummary {
    guarded("wait", sup.wait(handle, None))
        .await
        .expect("wait for the terminal state")
}

/// Reads output until `needle` appears; panics if the process ends without it.
async fn output_until(sup: &Supervisor, handle: &Handle, needle: &[u8]) -> Vec<u8> {
    guarded("output", async {
        let mut seen = Vec::new();
        let mut cursor = 0;
        loop {
            let terminal = sup.manifest(handle).is_some_and(|m| m.state.is_terminal());
            let read = sup
                .output_raw(handle, cursor, 1 << 20)
                .await
                .expect("read output");
            seen.extend_from_slice(&read.bytes);
            cursor = read.next_cursor;
            if seen.windows(needle.len()).any(|w| w == needle) {
                return seen;
            }
            assert!(
                !(terminal && read.bytes.is_empty()),
                "process ended without writing {:?}; output: {:?}",
                String::from_utf8_lossy(needle),
                String::from_utf8_lossy(&seen)
            );
            sup.output_changed(handle, cursor).await;
        }
    })
    .await
}

/// The terminal state as the summary, the live manifest, a fresh replay of the journal and the
/// journal's records each tell it.
fn check_terminal(
    sup: &Supervisor,
    handle: &Handle,
    summary: &TerminalSummary,
    state: State,
    exit: ExitStatus,
) {
    assert_eq!(
        (summary.state, summary.exit),
        (state, exit),
        "summary of {handle}: {summary:?}"
    );
    assert_eq!(summary.persist_error, None);
    let m = sup.manifest(handle).expect("manifest");
    assert_eq!(m.state, state, "manifest of {handle}");
    let t = m
        .terminal
        .as_ref()
        .expect("terminal result in the manifest");
    assert_eq!((t.state, t.exit), (state, exit));
    assert_eq!(t.event_id, m.ids.terminal);
    assert_eq!(t.capture, summary.capture);
    assert_eq!(m.bounds, summary.bounds);

    let (store, report) = replay(sup.root());
    assert!(report.is_clean(), "replay: {report:?}");
    let r = store.get(handle).expect("replayed manifest");
    assert_eq!(r.state, state, "replayed manifest of {handle}");
    let rt = r.terminal.as_ref().expect("replayed terminal result");
    assert_eq!(
        (rt.state, rt.exit, rt.event_id),
        (state, exit, m.ids.terminal)
    );
    assert_eq!(rt.capture, summary.capture);
    assert_eq!(r.bounds, summary.bounds);

    let records = journal_records(sup.root());
    let kinds = kinds_of(&records, handle);
    let terminals = kinds.iter().filter(|k| **k == kinds::TERMINAL).count();
    assert_eq!(terminals, 1, "terminal records of {handle}: {kinds:?}");
    assert!(!kinds.contains(&kinds::LOST_ON_RESTORE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exited_with_zero_and_with_non_zero() {
    let root = temp_root();
    let (sup, mut rx) = open(config(root.path())).await;
    let zero = start(&sup, sh(root.path(), "echo out; echo err >&2; exit 0")).await;
    let seven = start(&sup, sh(root.path(), "exit 7")).await;

    let s = wait(&sup, &zero).await;
    check_terminal(&sup, &zero, &s, State::Exited, ExitStatus::Code(0));
    assert_eq!(s.capture, CaptureStatus::Complete);
    assert_eq!(s.bounds.total_bytes, 8);
    let s = wait(&sup, &seven).await;
    check_terminal(&sup, &seven, &s, State::Exited, ExitStatus::Code(7));

    let mut seen = Vec::new();
    for h in [zero, seven] {
        let c = completed_of(&mut rx, &mut seen, &h).await;
        assert_eq!(c.state, State::Exited);
        assert_eq!(
            c.command_id,
            sup.manifest(&h).expect("manifest").ids.completion
        );
    }
    // Every lifecycle step of an exited process, in order.
    let records = journal_records(sup.root());
    let steps: Vec<_> = kinds_of(&records, &zero)
        .into_iter()
        .filter(|k| {
            ![
                kinds::LIFECYCLE_PUBLISHED,
                kinds::COMPLETION_NOTIFIED,
                kinds::OUTPUT_CHECKPOINT,
            ]
            .contains(k)
        })
        .map(kind_name)
        .collect();
    assert_eq!(steps, ["registered", "scoped", "running", "terminal"]);
    assert_eq!(sup.live_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_for_a_missing_program_and_a_missing_working_directory() {
    let root = temp_root();
    let (sup, mut rx) = open(config(root.path())).await;
    let clock = Clock::default();

    let program = "procjournal-test-no-such-program";
    let (lease, probe) = CountingLease::boxed(&clock);
    let prepared = sup
        .prepare(Command::new(program).cwd(root.path()))
        .expect("prepare")
        .with_lease(lease);
    let no_program = match sup.start(prepared).await {
        Err(StartError::Spawn {
            handle,
            message,
            failure,
        }) => {
            assert_eq!(failure, procjournal::supervisor::SpawnFailure::NotFound);
            assert!(
                message.contains(program),
                "message names the program: {message}"
            );
            handle
        }
        Err(e) => panic!("expected a spawn failure, got {e}"),
        Ok(h) => panic!("a missing program started as {h}"),
    };

    let missing_dir = root.path().join("no-such-dir");
    let (lease2, probe2) = CountingLease::boxed(&clock);
    let prepared = sup
        .prepare(Command::new("true").cwd(&missing_dir))
        .expect("prepare")
        .with_lease(lease2);
    // A missing working directory is refused before anything is journaled: the prepared
    // process (and its lease, unreleased) comes back, and no record names a process.
    match sup.start(prepared).await {
        Err(StartError::WorkingDirectory { prepared, path }) => {
            assert_eq!(path, missing_dir.to_str().expect("utf-8 path"));
            assert_eq!(
                probe2.releases(),
                0,
                "the lease comes back with the process"
            );
            drop(prepared);
        }
        Err(e) => panic!("expected a working-directory error, got {e}"),
        Ok(h) => panic!("a missing working directory started as {h}"),
    };
    // (No record names any handle but the missing program's: checked after shutdown, below.)

    let mut seen = Vec::new();
    {
        let h = no_program;
        let s = wait(&sup, &h).await;
        check_terminal(&sup, &h, &s, State::Failed, ExitStatus::Unknown);
        let m = sup.manifest(&h).expect("manifest");
        assert_eq!(m.pid, None, "a process that never ran has no pid");
        let c = completed_of(&mut rx, &mut seen, &h).await;
        assert_eq!(c.state, State::Failed);
        assert_eq!(probe.releases(), 1, "the lease is released once");
        // Lifecycle: registered and terminal failed, nothing else (only the publication
        // bookkeeping of the terminal event may follow).
        let records = journal_records(sup.root());
        let kinds = kinds_of(&records, &h);
        let steps: Vec<_> = kinds
            .iter()
            .copied()
            .filter(|k| ![kinds::LIFECYCLE_PUBLISHED, kinds::COMPLETION_NOTIFIED].contains(k))
            .map(kind_name)
            .collect();
        assert_eq!(
            steps,
            ["registered", "terminal"],
            "journal of {h}: {kinds:?}"
        );
        assert_eq!(kinds[..2], [kinds::REGISTERED_V2, kinds::TERMINAL]);
    }
    // No Running notice was ever published for them.
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, ServiceEvent::Published(n) if n.state == State::Running))
    );
    assert_eq!(sup.live_count(), 0);
    // After shutdown every publication task is joined: the bookkeeping is exactly one each.
    let report = sup.shutdown(Duration::from_millis(100)).await;
    assert_eq!(report, Default::default());
    let records = journal_records(sup.root());
    assert_eq!(
        records
            .iter()
            .filter_map(|r| r.event.handle())
            .collect::<std::collections::BTreeSet<_>>(),
        [no_program].into(),
        "records of the refused start"
    );
    {
        let h = no_program;
        let kinds: Vec<_> = kinds_of(&records, &h).into_iter().map(kind_name).collect();
        assert_eq!(
            kinds,
            [
                "registered",
                "terminal",
                "lifecycle_published",
                "completion_notified"
            ],
            "journal of {h}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_by_the_wall_clock_limit() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let h = guard.watch(
        start(
            &sup,
            sh(root.path(), "exec sleep 60").timeout(Duration::from_millis(100)),
        )
        .await,
    );
    let s = wait(&sup, &h).await;
    check_terminal(&sup, &h, &s, State::TimedOut, ExitStatus::Signal(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_by_a_trap_exit_and_by_the_signal() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let trapped = guard.watch(
        start(
            &sup,
            // A loop of short sleeps, not one long one: dash loses a SIGINT that reaches its
            // forked child between fork and exec, and would then wait for the whole sleep.
            sh(
                root.path(),
                "trap 'exit 130' INT; echo ready; while :; do sleep 0.1; done",
            ),
        )
        .await,
    );
    let by_signal = guard.watch(start(&sup, sh(root.path(), "exec sleep 60")).await);
    output_until(&sup, &trapped, b"ready").await;
    sup.interrupt(&trapped).await.expect("interrupt");
    sup.interrupt(&by_signal).await.expect("interrupt");
    let s = wait(&sup, &trapped).await;
    check_terminal(
        &sup,
        &trapped,
        &s,
        State::Interrupted,
        ExitStatus::Code(130),
    );
    let s = wait(&sup, &by_signal).await;
    check_terminal(
        &sup,
        &by_signal,
        &s,
        State::Interrupted,
        ExitStatus::Signal(2),
    );
    // Interrupting a terminal process is a typed error.
    assert!(matches!(
        sup.interrupt(&by_signal).await,
        Err(SupervisorError::NotRunning(h)) if h == by_signal
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_by_stop_when_the_child_exits_on_sigterm() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let h = guard.watch(start(&sup, sh(root.path(), "exec sleep 60")).await);
    let s = guarded("stop", sup.stop(&h, Duration::from_secs(30)))
        .await
        .expect("stop");
    check_terminal(&sup, &h, &s, State::Terminated, ExitStatus::Signal(15));
    let m = sup.manifest(&h).expect("manifest");
    assert_eq!(m.stop_requests, 1);
    // Stopping again answers with the same result.
    let again = sup
        .stop(&h, Duration::from_secs(1))
        .await
        .expect("stop again");
    assert_eq!(again, s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_when_the_child_ignores_sigterm() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let h = guard.watch(start(&sup, sh(root.path(), "trap '' TERM; echo ready; sleep 60")).await);
    output_until(&sup, &h, b"ready").await;
    let s = guarded("stop", sup.stop(&h, Duration::from_millis(200)))
        .await
        .expect("stop");
    check_terminal(&sup, &h, &s, State::Killed, ExitStatus::Signal(9));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_states_survive_a_reopen_of_the_root() {
    let root = temp_root();
    let (sup, mut rx) = open(config(root.path())).await;
    let exited = start(&sup, sh(root.path(), "echo kept; exit 3")).await;
    let failed = match sup
        .start(
            sup.prepare(Command::new("/no/such/program").cwd(root.path()))
                .expect("prepare"),
        )
        .await
    {
        Err(StartError::Spawn { handle, .. }) => handle,
        other => panic!("expected a spawn failure: {other:?}"),
    };
    let stopped = start(&sup, sh(root.path(), "exec sleep 60")).await;
    let mut summaries = Vec::new();
    summaries.push((exited, wait(&sup, &exited).await));
    summaries.push((failed, wait(&sup, &failed).await));
    summaries.push((
        stopped,
        sup.stop(&stopped, Duration::from_secs(30))
            .await
            .expect("stop"),
    ));
    let report = sup.shutdown(Duration::from_secs(1)).await;
    assert_eq!(report, Default::default(), "nothing was live at shutdown");
    let rt = sup.root().to_owned();
    drop(sup);
    // The services' channel closes once the supervisor (and every task it spawned) is gone,
    // which also releases the root's lock.
    guarded("supervisor dropped", async {
        while rx.recv().await.is_some() {}
    })
    .await;
    // The rest of the supervisor may still be dropping: wait (blocking flock) until the writer
    // lock of the root is free.
    let lock = std::fs::File::open(rt.join("LOCK")).expect("open the root's LOCK");
    guarded(
        "root lock released",
        tokio::task::spawn_blocking(move || {
            lock.lock().expect("flock");
            lock.unlock().expect("unlock");
        }),
    )
    .await
    .expect("lock task");

    let (services, _rx2) = Services::channel();
    let mut cfg = config(root.path());
    cfg.root = rt;
    let (sup, restore) = Supervisor::open(cfg, services).await.expect("reopen");
    assert!(restore.reconciled.is_empty(), "{restore:?}");
    assert!(restore.errors.is_empty(), "{restore:?}");
    assert_eq!(restore.reopened, summaries.len(), "{restore:?}");
    for (h, s) in &summaries {
        let m = sup.manifest(h).expect("manifest after reopen");
        assert_eq!(m.state, s.state);
        let again = sup.wait(h, None).await.expect("wait after reopen");
        assert_eq!(
            (again.state, again.exit, again.bounds),
            (s.state, s.exit, s.bounds)
        );
        assert_eq!(again.capture, s.capture);
    }
    let states: Vec<_> = summaries.iter().map(|(_, s)| s.state).collect();
    assert_eq!(states, [State::Exited, State::Failed, State::Terminated]);
    // Output of a finished process is read from its spool by the new supervisor.
    let page = sup
        .output(&exited, 0, 1024, Rendering::SafeText)
        .await
        .expect("output after reopen");
    assert_eq!(page.data, "kept\n");
    assert_eq!(page.state, State::Exited);
}

/// Bytes `seq 1 N` prints, cut to `len`.
fn seq_bytes(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 16);
    let mut digits = [0u8; 20];
    let mut n: u64 = 1;
    while out.len() < len {
        let mut i = digits.len();
        let mut v = n;
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        out.extend_from_slice(&digits[i..]);
        out.push(b'\n');
        n += 1;
    }
    out.truncate(len);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_before_wait_loses_no_byte_of_64_mib() {
    const STDOUT_BYTES: usize = 64 * 1024 * 1024;
    const STDERR_LINES: u32 = 200_000;
    let root = temp_root();
    let mut cfg = config(root.path());
    cfg.spool.retention_bytes = 256 * 1024 * 1024;
    let (sup, _rx) = open(cfg).await;
    // Two writers at once on two pipes, and the shell exits as soon as both are done.
    let script = format!(
        "seq 1 9000000 | head -c {STDOUT_BYTES} & seq -f 'err %.0f' 1 {STDERR_LINES} >&2; wait"
    );
    let h = start(&sup, sh(root.path(), &script)).await;
    let s = wait(&sup, &h).await;
    check_terminal(&sup, &h, &s, State::Exited, ExitStatus::Code(0));
    assert_eq!(s.capture, CaptureStatus::Complete);

    let expected_out = seq_bytes(STDOUT_BYTES);
    let expected_err: Vec<u8> = (1..=STDERR_LINES)
        .flat_map(|n| format!("err {n}\n").into_bytes())
        .collect();
    let total = (expected_out.len() + expected_err.len()) as u64;
    assert_eq!(s.bounds.total_bytes, total, "total bytes");
    assert_eq!(s.bounds.retained_from, 0);

    let (mut out, mut err) = (Vec::with_capacity(STDOUT_BYTES), Vec::new());
    let mut cursor = 0u64;
    let mut switches = 0usize;
    let mut last_stream = None;
    while cursor < total {
        let read = sup
            .output_raw(&h, cursor, 4 * 1024 * 1024)
            .await
            .expect("read output");
        assert!(!read.gap, "nothing was dropped");
        assert_eq!(read.total_bytes, total);
        assert_eq!(read.next_cursor, cursor + read.bytes.len() as u64);
        assert!(!read.bytes.is_empty(), "progress at cursor {cursor}");
        let mut at = cursor;
        for span in &read.spans {
            assert_eq!(span.cursor, at, "spans are contiguous");
            let from = (span.cursor - cursor) as usize;
            let bytes = &read.bytes[from..from + span.len as usize];
            match span.stream {
                Stream::Stdout => out.extend_from_slice(bytes),
                Stream::Stderr => err.extend_from_slice(bytes),
                Stream::Terminal => panic!("a pipe launch has no terminal stream"),
            }
            if last_stream != Some(span.stream) {
                switches += 1;
                last_stream = Some(span.stream);
            }
            at += u64::from(span.len);
        }
        assert_eq!(at, read.next_cursor, "spans cover the read");
        cursor = read.next_cursor;
    }
    assert_eq!(out.len(), expected_out.len(), "stdout bytes");
    assert!(out == expected_out, "stdout is seq's output, in order");
    assert_eq!(err.len(), expected_err.len(), "stderr bytes");
    assert!(err == expected_err, "stderr is the markers, in order");
    assert!(switches >= 2, "both streams are present");
    // Cursor at the end: an empty page, not an error.
    let end = sup
        .output_raw(&h, total, 1024)
        .await
        .expect("read at the end");
    assert!(end.bytes.is_empty() && end.next_cursor == total);
}

/// Spool syncs run beside the drain: checkpoints are recorded while the process is still
/// running, their bounds only grow, none follows the terminal event, and none names more than
/// the terminal event (which names every byte).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_recorded_while_output_flows_grow_and_precede_the_terminal_event() {
    const FIRST: u64 = 3_000_000;
    const LAST: u64 = 1000;
    let root = temp_root();
    let mut cfg = config(root.path());
    cfg.checkpoint_interval = Duration::from_millis(5);
    cfg.write_behind_bytes = Some(64 * 1024);
    let (sup, _rx) = open(cfg).await;
    // The first part, then nothing until stdin closes, then the last part.
    let script = format!("head -c {FIRST} /dev/zero; cat >/dev/null; head -c {LAST} /dev/zero");
    let h = start(&sup, sh(root.path(), &script)).await;
    // A checkpoint naming all of the first part is recorded while the process runs.
    guarded("a checkpoint of the first part", async {
        while sup.manifest(&h).expect("manifest").bounds.total_bytes < FIRST {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(!sup.manifest(&h).expect("manifest").state.is_terminal());
    sup.close_input(&h).await.expect("close input");
    let s = wait(&sup, &h).await;
    check_terminal(&sup, &h, &s, State::Exited, ExitStatus::Code(0));
    assert_eq!(s.bounds.total_bytes, FIRST + LAST);

    let records = journal_records(sup.root());
    let mine: Vec<_> = records
        .iter()
        .filter(|r| r.event.handle() == Some(h))
        .collect();
    let terminal_at = mine
        .iter()
        .position(|r| r.kind == kinds::TERMINAL)
        .expect("a terminal event");
    let mut last = (0u64, 0u64);
    let mut checkpoints = 0;
    for (i, r) in mine.iter().enumerate() {
        let LifecycleEvent::OutputCheckpoint(c) = &r.event else {
            continue;
        };
        checkpoints += 1;
        assert!(i < terminal_at, "a checkpoint after the terminal event");
        let bounds = (c.bounds.retained_from, c.bounds.total_bytes);
        assert!(
            bounds.0 >= last.0 && bounds.1 > last.1,
            "bounds {bounds:?} after {last:?}"
        );
        assert!(bounds.1 <= s.bounds.total_bytes);
        last = bounds;
    }
    assert!(checkpoints >= 1, "{:?}", kinds_of(&records, &h));
}

/// An idle process keeps one task (its drain), not a stdin writer beside it: the writer is
/// started by the first write, and that write's bytes arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdin_writer_is_started_by_the_first_write() {
    const IDLE: usize = 20;
    // Besides one drain per process: the admission sampler and a background pass or two.
    const OTHERS_MAX: usize = 4;
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let mut cats = Vec::new();
    for _ in 0..IDLE {
        cats.push(guard.watch(start(&sup, Command::new("cat").cwd(root.path())).await));
    }
    let idle = sup.stats().await.expect("stats").tasks;
    assert!(
        (IDLE..=IDLE + OTHERS_MAX).contains(&idle),
        "{idle} tasks for {IDLE} idle processes"
    );
    for cat in &cats[..IDLE / 2] {
        sup.input(cat, b"hello\n").await.expect("input");
        output_until(&sup, cat, b"hello\n").await;
    }
    let written = sup.stats().await.expect("stats").tasks;
    assert!(
        written >= IDLE + IDLE / 2,
        "{written} tasks once {} of {IDLE} were written to",
        IDLE / 2
    );
    for cat in &cats {
        sup.close_input(cat).await.expect("close input");
        let s = wait(&sup, cat).await;
        check_terminal(&sup, cat, &s, State::Exited, ExitStatus::Code(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_is_echoed_close_input_ends_it_and_later_input_fails() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let cat = guard.watch(start(&sup, Command::new("cat").cwd(root.path())).await);
    sup.input(&cat, b"hello\n").await.expect("input");
    output_until(&sup, &cat, b"hello\n").await;
    sup.input(&cat, b"world\n").await.expect("input");
    output_until(&sup, &cat, b"hello\nworld\n").await;
    sup.close_input(&cat).await.expect("close input");
    let s = wait(&sup, &cat).await;
    check_terminal(&sup, &cat, &s, State::Exited, ExitStatus::Code(0));
    assert!(sup.manifest(&cat).expect("manifest").input_closed);
    let read = sup.output_raw(&cat, 0, 1024).await.expect("read");
    assert_eq!(read.bytes, b"hello\nworld\n");
    assert!(read.spans.iter().all(|s| s.stream == Stream::Stdout));
    assert!(matches!(
        sup.input(&cat, b"late\n").await,
        Err(SupervisorError::NotRunning(h)) if h == cat
    ));
    assert!(matches!(
        sup.close_input(&cat).await,
        Err(SupervisorError::NotRunning(h)) if h == cat
    ));

    // Input after close_input, while the process still runs.
    let sleeper = guard.watch(start(&sup, sh(root.path(), "exec sleep 60")).await);
    sup.close_input(&sleeper).await.expect("close input");
    assert!(matches!(
        sup.input(&sleeper, b"x").await,
        Err(SupervisorError::InputClosed(h)) if h == sleeper
    ));
    assert!(matches!(
        sup.close_input(&sleeper).await,
        Err(SupervisorError::InputClosed(h)) if h == sleeper
    ));
    sup.stop(&sleeper, Duration::from_secs(30))
        .await
        .expect("stop");

    // Unknown handles are typed too.
    let unknown = Handle(procjournal::EventId::new_v7());
    assert!(matches!(
        sup.input(&unknown, b"x").await,
        Err(SupervisorError::UnknownHandle(h)) if h == unknown
    ));
}

/// A host that writes the moment its start is acknowledged finds the stdin there, every time:
/// the start is answered only once the actor owns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_right_after_the_start_always_finds_the_stdin() {
    const ROUNDS: usize = 150;
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut failed = Vec::new();
    for round in 0..ROUNDS {
        let cat = start(&sup, Command::new("cat").cwd(root.path())).await;
        if let Err(e) = sup.input(&cat, b"x").await {
            failed.push(format!("round {round}: {e}"));
        }
        sup.close_input(&cat).await.expect("close input");
        let s = wait(&sup, &cat).await;
        assert_eq!(s.exit, ExitStatus::Code(0), "round {round}");
    }
    assert!(
        failed.is_empty(),
        "{} of {ROUNDS}: {failed:?}",
        failed.len()
    );
    sup.shutdown(Duration::from_millis(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_renders_as_safe_text_or_as_base64_of_the_same_bytes() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let h = start(
        &sup,
        sh(
            root.path(),
            r"printf 'plain line\n'; printf 'a\033[31mred\033[0m\377b\r\n'",
        ),
    )
    .await;
    wait(&sup, &h).await;
    let raw: &[u8] = b"plain line\na\x1b[31mred\x1b[0m\xffb\r\n";
    let read = sup.output_raw(&h, 0, 1024).await.expect("raw");
    assert_eq!(read.bytes, raw);

    let text = sup
        .output(&h, 0, 1024, Rendering::SafeText)
        .await
        .expect("safe text");
    assert_eq!(text.data, "plain line\nared\u{FFFD}b\n");
    assert!(text.normalized);
    assert_eq!((text.cursor, text.next_cursor), (0, raw.len() as u64));
    assert_eq!(text.total_bytes, raw.len() as u64);
    assert_eq!(text.rendering, Rendering::SafeText);
    assert_eq!(text.state, State::Exited);

    let b64 = sup
        .output(&h, 0, 1024, Rendering::Base64)
        .await
        .expect("base64");
    assert_eq!(b64.data, base64(raw));
    assert!(!b64.normalized);
    assert_eq!(b64.next_cursor, raw.len() as u64);
    assert_eq!(b64.spans, text.spans);

    // A clean prefix is not normalized and renders as itself.
    let prefix = sup
        .output(&h, 0, 11, Rendering::SafeText)
        .await
        .expect("prefix");
    assert_eq!(prefix.data, "plain line\n");
    assert!(!prefix.normalized);
    assert_eq!(prefix.next_cursor, 11);
    // Resuming from next_cursor continues exactly.
    let rest = sup
        .output(&h, prefix.next_cursor, 1024, Rendering::Base64)
        .await
        .expect("rest");
    assert_eq!(rest.data, base64(&raw[11..]));

    // Binary data is flagged either way; safe text never carries a NUL.
    let bin = start(&sup, sh(root.path(), r"printf 'x\000y\000z'")).await;
    wait(&sup, &bin).await;
    let t = sup
        .output(&bin, 0, 1024, Rendering::SafeText)
        .await
        .expect("binary text");
    assert!(t.binary && t.normalized && !t.data.contains('\0'));
    let b = sup
        .output(&bin, 0, 1024, Rendering::Base64)
        .await
        .expect("binary base64");
    assert!(b.binary);
    assert_eq!(b.data, base64(b"x\0y\0z"));

    // No rendering names a path of the runtime root.
    let rt = sup.root().to_str().expect("utf-8 root").to_owned();
    for page in [&text, &b64, &prefix, &rest, &t, &b] {
        assert!(!page.data.contains(&rt) && !page.artifact.0.contains(&rt));
        assert!(!page.artifact.0.contains("spool"), "{:?}", page.artifact);
    }
}

/// A process's own output retention (`Command::output_retention`) is checked against
/// one spool segment and the maximum, recorded in its registration (a process without one is
/// recorded with the supervisor's default), survives a replay, and bounds that process's spool
/// while its neighbour keeps the default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_keeps_the_output_retention_it_was_started_with() {
    let root = temp_root();
    let mut cfg = config(root.path());
    cfg.spool = SpoolOptions {
        segment_bytes: 4096,
        retention_bytes: 1 << 20,
    };
    cfg.buffer_bytes = 1024;
    let (sup, _rx) = open(cfg).await;
    let seq = || Command::new("seq").args(["1", "20000"]).cwd(root.path());
    for bad in [0, 4095, procjournal::limits::RETENTION_BYTES_MAX + 1] {
        match sup.prepare(seq().output_retention(bad)) {
            Err(procjournal::supervisor::PrepareError::Retention { bytes, min, max }) => {
                assert_eq!((bytes, min), (bad, 4096));
                assert_eq!(max, procjournal::limits::RETENTION_BYTES_MAX);
            }
            other => panic!("retention {bad} accepted: {other:?}"),
        }
    }
    let own = start(&sup, seq().output_retention(16 * 1024)).await;
    let default = start(&sup, seq()).await;
    let own_end = wait(&sup, &own).await;
    let default_end = wait(&sup, &default).await;
    let total: u64 = (1..=20000u32).map(|n| format!("{n}\n").len() as u64).sum();
    assert_eq!(own_end.bounds.total_bytes, total);
    assert_eq!(default_end.bounds.total_bytes, total);
    // Whole segments are deleted while more than the retention is kept: what is left is more
    // than the retention less one segment (and a chunk it may run over by), and at most it.
    let kept = own_end.bounds.total_bytes - own_end.bounds.retained_from;
    let chunk = procjournal::spool::CHUNK_SPLIT_BYTES as u64;
    assert!(kept <= 16 * 1024, "kept {kept}");
    assert!(kept > 16 * 1024 - 4096 - chunk, "kept {kept}");
    assert_eq!(
        default_end.bounds.retained_from, 0,
        "the default keeps all of it"
    );
    let (store, report) = replay(&root.path().join("rt"));
    assert!(report.is_clean(), "{report:?}");
    let retention = |h: &Handle| {
        store
            .get(h)
            .and_then(|m| m.command.limits().output_retention_bytes)
    };
    assert_eq!(retention(&own), Some(16 * 1024));
    assert_eq!(retention(&default), Some(1 << 20));
    assert_eq!(
        sup.manifest(&own)
            .and_then(|m| m.command.limits().output_retention_bytes),
        Some(16 * 1024)
    );
    sup.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_segments_give_a_gap_and_a_cursor_past_the_end_is_cursor_ahead() {
    let root = temp_root();
    let mut cfg = config(root.path());
    cfg.spool = SpoolOptions {
        segment_bytes: 4096,
        retention_bytes: 8192,
    };
    cfg.buffer_bytes = 1024;
    let (sup, _rx) = open(cfg).await;
    let h = start(
        &sup,
        Command::new("seq").args(["1", "20000"]).cwd(root.path()),
    )
    .await;
    let s = wait(&sup, &h).await;
    check_terminal(&sup, &h, &s, State::Exited, ExitStatus::Code(0));
    let expected: Vec<u8> = (1..=20000)
        .flat_map(|n: u32| format!("{n}\n").into_bytes())
        .collect();
    let total = expected.len() as u64;
    assert_eq!(s.bounds.total_bytes, total);
    assert!(s.bounds.retained_from > 0, "old segments were dropped");
    // Retention keeps whole segments; a segment may exceed `segment_bytes` by one chunk.
    let chunk = procjournal::spool::CHUNK_SPLIT_BYTES as u64;
    assert!(total - s.bounds.retained_from <= (8192 + 4096).max(chunk + 4096));

    // From 0: the retained beginning, marked as a gap.
    let read = sup.output_raw(&h, 0, 1 << 20).await.expect("read from 0");
    assert!(read.gap);
    assert_eq!(read.retained_from, s.bounds.retained_from);
    assert_eq!(read.next_cursor, total);
    assert!(read.bytes == expected[read.retained_from as usize..]);
    let page = sup
        .output(&h, 0, 1 << 20, Rendering::Base64)
        .await
        .expect("page from 0");
    assert!(page.gap);
    assert_eq!(page.retained_from, s.bounds.retained_from);
    assert_eq!(page.data, base64(&expected[read.retained_from as usize..]));

    // From a retained cursor: no gap.
    let from = s.bounds.retained_from + 10;
    let read = sup.output_raw(&h, from, 100).await.expect("read retained");
    assert!(!read.gap);
    assert_eq!(read.bytes, expected[from as usize..from as usize + 100]);

    // At the end: empty; past the end: CursorAhead, raw and rendered.
    let end = sup
        .output(&h, total, 100, Rendering::SafeText)
        .await
        .expect("at the end");
    assert!(end.data.is_empty() && end.next_cursor == total && !end.gap);
    match sup.output(&h, total + 1, 100, Rendering::SafeText).await {
        Err(SupervisorError::CursorAhead {
            cursor,
            total_bytes,
        }) => {
            assert_eq!((cursor, total_bytes), (total + 1, total));
        }
        other => panic!("expected CursorAhead, got {other:?}"),
    }
    assert!(matches!(
        sup.output_raw(&h, total + 100, 100).await,
        Err(SupervisorError::CursorAhead { cursor, total_bytes }) if cursor == total + 100 && total_bytes == total
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_by_state_and_by_label() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let a0 = start(&sup, sh(root.path(), "exit 0").label("team", "a")).await;
    let b1 = start(&sup, sh(root.path(), "exit 1").label("team", "b")).await;
    let a_run = guard.watch(
        start(
            &sup,
            sh(root.path(), "exec sleep 60")
                .label("team", "a")
                .label("kind", "server"),
        )
        .await,
    );
    wait(&sup, &a0).await;
    wait(&sup, &b1).await;
    let handles = |filter: ListFilter| {
        let mut v: Vec<_> = sup.list(&filter).into_iter().map(|m| m.handle).collect();
        v.sort();
        v
    };
    let sorted = |mut v: Vec<Handle>| {
        v.sort();
        v
    };
    assert_eq!(handles(ListFilter::default()), sorted(vec![a0, b1, a_run]));
    let running = ListFilter {
        state: Some(State::Running),
        ..ListFilter::default()
    };
    assert_eq!(handles(running.clone()), vec![a_run]);
    let exited = ListFilter {
        state: Some(State::Exited),
        ..ListFilter::default()
    };
    assert_eq!(handles(exited), sorted(vec![a0, b1]));
    let team_a = ListFilter {
        label: Some(("team".into(), "a".into())),
        ..ListFilter::default()
    };
    assert_eq!(handles(team_a), sorted(vec![a0, a_run]));
    let exited_a = ListFilter {
        state: Some(State::Exited),
        label: Some(("team".into(), "a".into())),
    };
    assert_eq!(handles(exited_a), vec![a0]);
    let server = ListFilter {
        label: Some(("kind".into(), "server".into())),
        ..ListFilter::default()
    };
    assert_eq!(handles(server), vec![a_run]);
    let nobody = ListFilter {
        label: Some(("team".into(), "c".into())),
        ..ListFilter::default()
    };
    assert!(handles(nobody).is_empty());
    let failed = ListFilter {
        state: Some(State::Failed),
        ..ListFilter::default()
    };
    assert!(handles(failed).is_empty());

    sup.stop(&a_run, Duration::from_secs(30))
        .await
        .expect("stop");
    assert!(handles(running).is_empty());
    let terminated = ListFilter {
        state: Some(State::Terminated),
        label: Some(("team".into(), "a".into())),
    };
    assert_eq!(handles(terminated), vec![a_run]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_shared_closes_admission_and_keeps_output_readable() {
    let root = temp_root();
    let (sup, mut rx) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let finished = start(&sup, sh(root.path(), "echo finished output")).await;
    let sleeper = guard.watch(start(&sup, sh(root.path(), "exec sleep 60")).await);
    let stubborn =
        guard.watch(start(&sup, sh(root.path(), "trap '' TERM; echo ready; sleep 60")).await);
    wait(&sup, &finished).await;
    output_until(&sup, &stubborn, b"ready").await;

    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let sup = sup.clone();
        callers.spawn(async move { sup.shutdown(Duration::from_millis(300)).await });
    }
    let reports: Vec<_> = guarded("shutdown", callers.join_all()).await;
    let report = reports[0].clone();
    assert!(reports.iter().all(|r| *r == report), "{reports:?}");
    assert_eq!(report.terminated, vec![sleeper]);
    assert_eq!(report.killed, vec![stubborn]);
    assert!(report.teardown_failed.is_empty(), "{report:?}");
    assert_eq!(sup.shutdown(Duration::ZERO).await, report, "idempotent");

    let s = wait(&sup, &sleeper).await;
    check_terminal(
        &sup,
        &sleeper,
        &s,
        State::Terminated,
        ExitStatus::Signal(15),
    );
    let s = wait(&sup, &stubborn).await;
    check_terminal(&sup, &stubborn, &s, State::Killed, ExitStatus::Signal(9));
    let m = sup.manifest(&sleeper).expect("manifest");
    assert_eq!(
        m.first_stop.as_ref().map(|(r, _)| r.as_str()),
        Some("shutdown")
    );

    // Admission is closed: the prepared process (and its lease) come back untouched.
    let clock = Clock::default();
    let (lease, probe) = CountingLease::boxed(&clock);
    let prepared = sup
        .prepare(sh(root.path(), "echo never").label("late", "yes"))
        .expect("prepare")
        .with_lease(lease);
    match sup.start(prepared).await {
        Err(StartError::Refused {
            reason: Refusal::ShuttingDown,
            prepared,
        }) => {
            assert_eq!(prepared.spec().program, "sh");
            assert_eq!(
                prepared.spec().labels.get("late").map(String::as_str),
                Some("yes")
            );
            drop(prepared);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(probe.releases(), 0, "a refused start releases nothing");
    assert_eq!(
        sup.list(&ListFilter::default()).len(),
        3,
        "nothing was registered"
    );
    assert_eq!(sup.live_count(), 0);

    // Finished output stays readable.
    let page = sup
        .output(&finished, 0, 1024, Rendering::SafeText)
        .await
        .expect("output after shutdown");
    assert_eq!(page.data, "finished output\n");
    let ready = sup
        .output_raw(&stubborn, 0, 1024)
        .await
        .expect("raw after shutdown");
    assert_eq!(ready.bytes, b"ready\n");

    let mut seen = Vec::new();
    for h in [finished, sleeper, stubborn] {
        completed_of(&mut rx, &mut seen, &h).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_that_cannot_signal_is_reported_not_hung_on() {
    let root = temp_root();
    let signaller = Arc::new(Unsignallable::default());
    let mut cfg = config(root.path());
    cfg.launcher = signaller.clone();
    cfg.kill_confirm = Duration::from_millis(500);
    let (sup, mut rx) = open(cfg).await;
    let mut guard = KillGuard::new(&sup);
    let stuck = guard.watch(start(&sup, sh(root.path(), "exec sleep 60")).await);
    let normal = guard.watch(start(&sup, sh(root.path(), "exec sleep 60")).await);
    let pid = sup.manifest(&stuck).and_then(|m| m.pid).expect("pid");
    *signaller.pgid.lock().expect("lock") = Some(pid);

    // stop and interrupt report the failure as a typed error.
    match guarded("stop", sup.stop(&stuck, Duration::from_millis(100))).await {
        Err(SupervisorError::TeardownFailed { handle, reason }) => {
            assert_eq!(handle, stuck);
            assert!(reason.contains("injected"), "{reason}");
        }
        other => panic!("expected TeardownFailed, got {other:?}"),
    }
    assert!(matches!(
        sup.interrupt(&stuck).await,
        Err(SupervisorError::TeardownFailed { handle, .. }) if handle == stuck
    ));

    let report = guarded("shutdown", sup.shutdown(Duration::from_millis(100))).await;
    assert_eq!(report.terminated, vec![normal]);
    assert!(report.killed.is_empty());
    assert_eq!(report.teardown_failed.len(), 1, "{report:?}");
    let (h, reason) = &report.teardown_failed[0];
    assert_eq!(*h, stuck);
    assert!(
        reason.contains("SIGTERM") && reason.contains("SIGKILL"),
        "{reason}"
    );
    assert!(reason.contains("no exit confirmed"), "{reason}");
    // The supervisor keeps authority: the process is still live and still watched.
    assert_eq!(
        sup.manifest(&stuck).expect("manifest").state,
        State::Running
    );
    assert_eq!(sup.live_count(), 1);

    let pgid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid fits"));
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL).expect("killpg");
    let s = wait(&sup, &stuck).await;
    check_terminal(&sup, &stuck, &s, State::Killed, ExitStatus::Signal(9));
    let s = wait(&sup, &normal).await;
    check_terminal(&sup, &normal, &s, State::Terminated, ExitStatus::Signal(15));
    let mut seen = Vec::new();
    completed_of(&mut rx, &mut seen, &stuck).await;
    completed_of(&mut rx, &mut seen, &normal).await;
    assert_eq!(sup.live_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_capacity_a_start_is_refused_and_the_prepared_process_comes_back() {
    let root = temp_root();
    let mut cfg = config(root.path());
    cfg.max_live = 1;
    let (sup, mut rx) = open(cfg).await;
    let mut guard = KillGuard::new(&sup);
    let clock = Clock::default();
    let first = guard.watch(start(&sup, Command::new("cat").cwd(root.path())).await);
    assert_eq!(sup.live_count(), 1);

    let (lease, probe) = CountingLease::boxed(&clock);
    let prepared = sup
        .prepare(sh(root.path(), "echo second").label("n", "2"))
        .expect("prepare")
        .with_lease(lease);
    let prepared = match sup.start(prepared).await {
        Err(StartError::Refused {
            reason: Refusal::AtCapacity { live, max },
            prepared,
        }) => {
            assert_eq!((live, max), (1, 1));
            prepared
        }
        other => panic!("expected AtCapacity, got {other:?}"),
    };
    assert_eq!(
        prepared.spec().labels.get("n").map(String::as_str),
        Some("2")
    );
    assert_eq!(probe.releases(), 0);
    assert_eq!(
        sup.list(&ListFilter::default()).len(),
        1,
        "nothing was registered"
    );

    sup.close_input(&first).await.expect("close input");
    wait(&sup, &first).await;
    // Capacity is given back before the completion is notified.
    let mut seen = Vec::new();
    completed_of(&mut rx, &mut seen, &first).await;
    assert_eq!(sup.live_count(), 0);

    let second = sup
        .start(prepared)
        .await
        .expect("the returned prepared process starts");
    let s = wait(&sup, &second).await;
    check_terminal(&sup, &second, &s, State::Exited, ExitStatus::Code(0));
    completed_of(&mut rx, &mut seen, &second).await;
    assert_eq!(probe.releases(), 1, "its lease is released once");
    assert_eq!(sup.live_count(), 0);
    let read = sup.output_raw(&second, 0, 100).await.expect("output");
    assert_eq!(read.bytes, b"second\n");
}

/// A process whose leader had already exited when `shutdown` ran (a descendant still
/// held its stdout, so it was in the final drain) was recorded as `terminated` with exit code 0.
/// It keeps the status it exited with; shutdown still tears its tree down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_exited_before_shutdown_keeps_its_own_status() {
    let root = temp_root();
    let mut config = config(root.path());
    // Long enough that shutdown comes while the drain still waits for the descendant.
    config.final_drain = Duration::from_secs(60);
    let (sup, _rx) = open(config).await;
    let handle = start(&sup, sh(root.path(), "sleep 600 & echo started; exit 4")).await;
    output_until(&sup, &handle, b"started").await;
    let pid = sup.manifest(&handle).and_then(|m| m.pid).expect("a pid");
    // The group launcher's drain reaps the leader itself: once its pid is gone, the drain has
    // seen the exit (and notes it in the same step, a moment later).
    guarded("the leader's reaping", async {
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!sup.manifest(&handle).expect("manifest").state.is_terminal());

    let report = guarded("shutdown", sup.shutdown(Duration::from_secs(1))).await;
    assert!(report.terminated.is_empty(), "{report:?}");
    assert!(
        report.killed.is_empty() && report.teardown_failed.is_empty(),
        "{report:?}"
    );
    let s = wait(&sup, &handle).await;
    assert_eq!((s.state, s.exit), (State::Exited, ExitStatus::Code(4)));
    let m = sup.manifest(&handle).expect("manifest");
    assert_eq!(m.stop_requests, 0, "no stop of it was recorded");
    let t = m.terminal.expect("terminal");
    assert_eq!(
        (t.state, t.exit, t.reason.as_str()),
        (State::Exited, ExitStatus::Code(4), "exited")
    );
}
