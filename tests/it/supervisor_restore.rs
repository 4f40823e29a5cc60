//! Crash and restore of the supervisor, with real processes and real signals: a host process runs
//! a `Supervisor` with live children, the test SIGKILLs the host, opens a new supervisor on the
//! same root and checks that restore reconciled (restore is reconciliation, not
//! reattachment):
//!
//! - every process that was live is `lost_on_restore`, in the manifest and in
//!   `RestoreReport::reconciled`, under the Lost event ID allocated at its registration, and that
//!   ID (and the completion command ID) reached the host's services exactly once;
//! - the old children were not signalled: they are still alive, not zombies, and their pid still
//!   names the process the journal witnessed (same start time);
//! - output written before the crash is readable, up to the bounds the Lost event names;
//! - a second restore writes nothing and publishes nothing: the journal's last seq is unchanged,
//!   `reconciled` is empty and `reopened` counts the lost processes.
//!
//! The test binary is its own host: [`supervisor_restore_child_host`] is an ordinary `#[test]` that
//! returns at once unless `PROCJOURNAL_HOST_CHILD=<runtime root>` is set, in which case it is the
//! host. The parent runs `current_exe() --exact
//! supervisor_restore::supervisor_restore_child_host --nocapture --test-threads=1` with that variable and `PROCJOURNAL_HOST_MODE` (`idle:<n>` or `stream`) in
//! the environment.
//!
//! The host protocol, one line each, flushed before the next step:
//!
//! ```text
//! opened <reconciled> <reopened> <errors>   after Supervisor::open returned (counts)
//! started <n> <handle> <pid>                after start returned (the pid is also the pgid)
//! child <n> <handle> <pid> <total_bytes>    once the child's output is visible through the host
//! ready                                     all children reported; the host then blocks forever
//! ```
//!
//! The old children lead their own process groups and survive the host; a guard kills every group
//! the host reported (`killpg`), and the host itself, when a test ends, also by a panic. The host
//! also asks for SIGKILL when the test thread that spawned it ends (`PR_SET_PDEATHSIG`), so a
//! vanished parent never leaves it blocking. Nothing here asserts on wall-clock time; the hang
//! guard only turns a host that makes no progress at all into a failure with its stderr.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as OsCommand, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use procjournal::journal::reader::JournalReader;
use procjournal::lifecycle::event::{CursorBounds, ExitStatus};
use procjournal::lifecycle::{Handle, LifecycleEvent, Manifest, State};
use procjournal::spool::SpoolOptions;
use procjournal::spool::format::Stream;
use procjournal::supervisor::{
    Command, Completion, LifecycleNotice, RestoreReport, ServiceEvent, Services, Supervisor,
    SupervisorConfig,
};
use procjournal::{Durability, EventId};

/// Set (to the runtime root) only in the host process.
const HOST_ENV: &str = "PROCJOURNAL_HOST_CHILD";
/// `idle:<n>`: n children that print `started-<i>` and sleep; `stream`: one child that prints
/// numbered lines without pause.
const MODE_ENV: &str = "PROCJOURNAL_HOST_MODE";
/// The name the harness knows the host entry point by (`--exact`).
const HOST_TEST: &str = "supervisor_restore_child_host";

const IDLE_CHILDREN: usize = 4;
/// The idle children's wall-clock and idle limits (far beyond the test).
const IDLE_WALL_S: u64 = 3_600;
const IDLE_IDLE_S: u64 = 1_800;
/// Stream rounds on one root: each host reopens what the previous rounds left.
const STREAM_ROUNDS: usize = 3;
/// The host reports the streaming child once this much output went through its spool, so that
/// spool segments have rotated and old ones have been deleted before the kill.
const STREAM_VISIBLE_BYTES: u64 = 512 * 1024;
/// Small spool segments and retention in the stream scenario: a kill can land in a rotation or a
/// deletion.
const STREAM_SPOOL: SpoolOptions = SpoolOptions {
    segment_bytes: 128 * 1024,
    retention_bytes: 512 * 1024,
};
/// The streaming child's line: `line <i> <PAD>\n`, i from 1.
const PAD: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";
/// Turns a hung host into a failure with diagnostics instead of a hung test run.
const HANG_GUARD: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// The host.

fn report(line: &str) {
    let mut out = std::io::stdout().lock();
    // A failed write means the parent is gone; the pdeathsig ends this process.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn host_config(root: &Path, stream: bool) -> SupervisorConfig {
    let mut config = SupervisorConfig::new(root);
    // Supervision, not admission, is under test: an explicit host limit (the live bound's
    // default), so that the machine's cores and memory do not decide how many run at once.
    config.admission = procjournal::admission::AdmissionConfig::max_concurrent(
        procjournal::limits::LIVE_PROCESSES_DEFAULT,
    );
    if stream {
        config.durability = Durability::Sync;
        config.spool = STREAM_SPOOL;
        // Frequent OutputCheckpoint records, so the kill also lands near one.
        config.checkpoint_interval = Duration::from_millis(20);
    } else {
        config.durability = Durability::Group;
    }
    config
}

fn stream_script() -> String {
    format!("i=0; while :; do i=$((i+1)); echo \"line $i {PAD}\" || exit 1; done")
}

/// The host run in the child process. Without `PROCJOURNAL_HOST_CHILD` in the environment it
/// returns at once: in an ordinary `cargo test` run it is a no-op that always passes, and it only
/// does work when a scenario below re-executes this binary with
/// `--exact supervisor_restore::supervisor_restore_child_host`.
///
/// As the host it opens a supervisor on the root named by `PROCJOURNAL_HOST_CHILD`, starts the
/// children `PROCJOURNAL_HOST_MODE` asks for, waits until each child's output is visible through
/// the supervisor, reports them (see the module docs) and blocks until it is killed.
#[test]
fn supervisor_restore_child_host() {
    let Some(root) = std::env::var_os(HOST_ENV) else {
        return;
    };
    // Die with the test thread that spawned this host.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).expect("host: set_pdeathsig");
    let mode = std::env::var(MODE_ENV).expect("host: PROCJOURNAL_HOST_MODE is not set");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("host: runtime");
    runtime.block_on(host(PathBuf::from(root), mode));
}

async fn host(root: PathBuf, mode: String) {
    // The harness may have printed "test supervisor_restore_child_host ... " without a newline:
    // end that line so every report starts a line of its own.
    report("");
    let (stream, count, pty) = match mode.split_once(':') {
        Some(("idle", n)) => (false, n.parse::<usize>().expect("host: idle:<n>"), false),
        Some(("idle-pty", n)) => (false, n.parse::<usize>().expect("host: idle-pty:<n>"), true),
        None if mode == "stream" => (true, 1, false),
        _ => panic!("host: unknown mode {mode:?}"),
    };
    let (sup, restored) = Supervisor::open(host_config(&root, stream), Services::noop())
        .await
        .expect("host: Supervisor::open");
    report(&format!(
        "opened {} {} {}",
        restored.reconciled.len(),
        restored.reopened,
        restored.errors.len()
    ));
    let mut children = Vec::new();
    for n in 0..count {
        let script = if stream {
            stream_script()
        } else if pty {
            // The host's death closes the terminal's master, and the kernel hangs the terminal
            // up (SIGHUP to its session): that signal is the kernel's, not the restorer's, and
            // the child ignores it so that the test can tell the restorer sent none.
            format!("trap '' HUP; echo started-{n}; exec sleep 600")
        } else {
            format!("echo started-{n}; exec sleep 600")
        };
        let mut command = Command::new("sh").arg("-c").arg(script).cwd(&root);
        if !stream {
            // Deadlines far away: a restart must keep them (and their start) as recorded, and
            // must not give the processes a new period.
            command = command
                .timeout(Duration::from_secs(IDLE_WALL_S))
                .idle_timeout(Duration::from_secs(IDLE_IDLE_S));
        }
        if pty {
            command = command.pty(24, 80);
        }
        let prepared = sup.prepare(command).expect("host: prepare");
        let handle = sup.start(prepared).await.expect("host: start");
        let pid = sup
            .manifest(&handle)
            .and_then(|m| m.pid)
            .expect("host: a started process has a pid");
        report(&format!("started {n} {handle} {pid}"));
        children.push((n, handle, pid));
    }
    for (n, handle, pid) in &children {
        let expected = format!("started-{n}{}", if pty { "\r\n" } else { "\n" });
        let total = loop {
            let read = sup
                .output_raw(handle, 0, 64 * 1024)
                .await
                .expect("host: output_raw");
            let visible = if stream {
                read.total_bytes >= STREAM_VISIBLE_BYTES
            } else {
                read.bytes.ends_with(expected.as_bytes())
            };
            if visible {
                break read.total_bytes;
            }
            let state = sup.manifest(handle).map(|m| m.state);
            assert!(
                !state.is_some_and(State::is_terminal),
                "host: child {n} ended ({state:?}) before its output was visible"
            );
            sup.output_changed(handle, read.total_bytes).await;
        };
        // `running` is published a moment after the spawn (RUNNING_PUBLICATION_DELAY_MS),
        // beside the drain: output can be visible before it. Ready once it is recorded.
        while !sup
            .manifest(handle)
            .is_some_and(|m| m.published.contains(&m.ids.running))
        {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        report(&format!("child {n} {handle} {pid} {total}"));
    }
    report("ready");
    std::future::pending::<()>().await;
}

// ---------------------------------------------------------------------------------------------
// The parent.

/// Kills, when dropped, the host (if still running) and every process group the host reported.
#[derive(Default)]
struct Cleanup {
    host: Option<Child>,
    groups: Vec<i32>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(host) = &mut self.host {
            let _ = host.kill();
            let _ = host.wait();
        }
        for &pgid in &self.groups {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
}

/// One child as the host reported it.
#[derive(Debug, Clone, Copy)]
struct Reported {
    n: usize,
    handle: Handle,
    pid: i32,
    /// Output bytes the host had seen go through the supervisor.
    visible: u64,
}

fn parse_handle(text: &str) -> Handle {
    let hex = text
        .strip_prefix("p-")
        .unwrap_or_else(|| panic!("handle {text:?} does not start with p-"));
    let uuid = uuid::Uuid::parse_str(hex).unwrap_or_else(|e| panic!("handle {text:?}: {e}"));
    let handle = Handle(EventId(uuid));
    assert_eq!(
        handle.to_string(),
        text,
        "handles round-trip through Display"
    );
    handle
}

fn stderr_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("(no stderr: {e})"))
}

/// What the host said before `ready`.
#[derive(Debug, Default)]
struct HostReport {
    opened: (usize, usize, usize),
    children: Vec<Reported>,
}

/// Spawns the host on `root`, reads its reports until `ready` (registering every process group
/// with `cleanup` as soon as it is reported), then SIGKILLs it and reaps it.
/// Waits (bounded) until no writer holds `root`'s lock. The test's own restore supervisor of the
/// round before has shut down, but its last blocking tasks drop the root (and with it the lock)
/// a moment after `shutdown` returns; a reopen in this process would wait for that handover
/// (`LOCK_HANDOVER_MS`), a host in another process fails at once with `Locked`.
fn wait_until_unlocked(root: &Path) {
    let Ok(lock) = File::open(root.join("LOCK")) else {
        return; // no root yet
    };
    let started = std::time::Instant::now();
    loop {
        match lock.try_lock() {
            Ok(()) => {
                lock.unlock().expect("unlock LOCK");
                return;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                assert!(
                    started.elapsed() < HANG_GUARD,
                    "{} stays locked",
                    root.display()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::Error(e)) => panic!("lock {}: {e}", root.display()),
        }
    }
}

fn run_host_and_kill(
    root: &Path,
    mode: &str,
    scratch: &Path,
    delay_before_kill: Duration,
    cleanup: &mut Cleanup,
) -> HostReport {
    wait_until_unlocked(root);
    let stderr_path = scratch.join(format!("host-{}.stderr", cleanup.groups.len()));
    let exe = std::env::current_exe().expect("current_exe");
    let child = OsCommand::new(exe)
        .args([
            "--exact",
            &crate::common::harness_name(module_path!(), HOST_TEST),
        ])
        .args(["--nocapture", "--test-threads=1"])
        .env(HOST_ENV, root)
        .env(MODE_ENV, mode)
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(
            File::create(&stderr_path).expect("create host stderr file"),
        ))
        .spawn()
        .expect("spawn host");
    let host = cleanup.host.insert(child);
    let host_pid = Pid::from_raw(host.id() as i32);
    let stdout = host.stdout.take().expect("host stdout");
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut out = HostReport::default();
    loop {
        let line = match rx.recv_timeout(HANG_GUARD) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => panic!(
                "host ({mode}) made no progress for {HANG_GUARD:?}; stderr:\n{}",
                stderr_of(&stderr_path)
            ),
            Err(RecvTimeoutError::Disconnected) => panic!(
                "host ({mode}) exited before `ready`; stderr:\n{}",
                stderr_of(&stderr_path)
            ),
        };
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        let num = |i: usize| -> u64 {
            words[i]
                .parse()
                .unwrap_or_else(|e| panic!("host line {line:?}: {e}"))
        };
        match words.first() {
            Some(&"opened") => out.opened = (num(1) as usize, num(2) as usize, num(3) as usize),
            Some(&"started") => cleanup.groups.push(num(3) as i32),
            Some(&"child") => out.children.push(Reported {
                n: num(1) as usize,
                handle: parse_handle(words[2]),
                pid: num(3) as i32,
                visible: num(4),
            }),
            Some(&"ready") => break,
            // The harness's own lines.
            _ => {}
        }
    }
    std::thread::sleep(delay_before_kill);
    kill(host_pid, Signal::SIGKILL).expect("SIGKILL the host");
    let status = host.wait().expect("reap the host");
    assert_eq!(
        status.signal(),
        Some(Signal::SIGKILL as i32),
        "the host died by our SIGKILL, not by itself; stderr:\n{}",
        stderr_of(&stderr_path)
    );
    cleanup.host = None;
    let _ = reader.join();
    out
}

/// Field 3 (state) and field 22 (start time in ticks) of /proc/PID/stat.
fn proc_stat(pid: i32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    Some((
        fields.first()?.chars().next()?,
        fields.get(19)?.parse().ok()?,
    ))
}

/// Asserts that `pid` is alive, not a zombie, and still the process the journal witnessed.
fn assert_untouched(pid: i32, manifest: &Manifest, ctx: &str) {
    assert!(
        kill(Pid::from_raw(pid), None).is_ok(),
        "{ctx}: old child {pid} is gone: restore must not signal it"
    );
    let (state, start_ticks) =
        proc_stat(pid).unwrap_or_else(|| panic!("{ctx}: /proc/{pid}/stat unreadable"));
    assert!(
        !matches!(state, 'Z' | 'X' | 'x'),
        "{ctx}: old child {pid} is dead (state {state}): restore must not signal it"
    );
    let witness = manifest.witness.expect("a running manifest has a witness");
    assert_eq!(
        witness.start_time_ticks, start_ticks,
        "{ctx}: pid {pid} no longer names the witnessed process"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn restore_config(root: &Path) -> SupervisorConfig {
    let mut config = SupervisorConfig::new(root);
    // Supervision, not admission, is under test: an explicit host limit (the live bound's
    // default), so that the machine's cores and memory do not decide how many run at once.
    config.admission = procjournal::admission::AdmissionConfig::max_concurrent(
        procjournal::limits::LIVE_PROCESSES_DEFAULT,
    );
    config.durability = Durability::Group;
    config
}

/// The journal's records of `root`, decoded, with their event IDs and seqs.
fn journal_events(root: &Path) -> (Vec<(u64, EventId, LifecycleEvent)>, u64) {
    let reader = JournalReader::open(root).expect("JournalReader::open");
    let (records, report) = reader.records(1).expect("read the journal");
    assert!(report.is_clean(), "the journal scans clean: {report:?}");
    let events = records
        .iter()
        .map(|r| {
            let event = LifecycleEvent::decode(r.kind, r.codec_version, &r.payload)
                .unwrap_or_else(|e| panic!("record seq {}: {e}", r.position.seq));
            (r.position.seq, r.event_id, event)
        })
        .collect();
    (events, report.last_seq.unwrap_or(0))
}

fn last_seq(root: &Path) -> u64 {
    JournalReader::open(root)
        .expect("JournalReader::open")
        .scan(1, |_| {})
        .expect("scan the journal")
        .last_seq
        .unwrap_or(0)
}

/// Checks the journal's records about `handle` written by restore: exactly one LostOnRestore,
/// under the pre-allocated Lost ID, naming `bounds`; exactly one publication of it and one
/// completion record. Returns the largest OutputCheckpoint total recorded before the crash.
fn check_lost_records(
    events: &[(u64, EventId, LifecycleEvent)],
    m: &Manifest,
    ctx: &str,
) -> CursorBounds {
    let handle = m.handle;
    let lost: Vec<_> = events
        .iter()
        .filter_map(|(_, id, e)| match e {
            LifecycleEvent::LostOnRestore(l) if l.handle == handle => Some((*id, l.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(lost.len(), 1, "{ctx}: exactly one LostOnRestore record");
    let (lost_id, lost) = &lost[0];
    assert_eq!(
        *lost_id, m.ids.lost,
        "{ctx}: the LostOnRestore record carries the Lost ID allocated at registration"
    );
    assert_eq!(
        lost.bounds, m.bounds,
        "{ctx}: the manifest's bounds are those of the Lost event"
    );
    let published = events
        .iter()
        .filter(|(_, _, e)| {
            matches!(e, LifecycleEvent::LifecyclePublished(p)
                if p.handle == handle && p.event == m.ids.lost)
        })
        .count();
    assert_eq!(
        published, 1,
        "{ctx}: the Lost event is recorded published once"
    );
    let notified = events
        .iter()
        .filter(|(_, _, e)| {
            matches!(e, LifecycleEvent::CompletionNotified(c)
                if c.handle == handle && c.command == m.ids.completion)
        })
        .count();
    assert_eq!(notified, 1, "{ctx}: completion is recorded notified once");
    let terminal = events
        .iter()
        .filter(|(_, _, e)| matches!(e, LifecycleEvent::Terminal(t) if t.handle == handle))
        .count();
    assert_eq!(terminal, 0, "{ctx}: no Terminal record for a lost process");
    let mut checkpointed = CursorBounds::default();
    for (_, _, e) in events {
        if let LifecycleEvent::OutputCheckpoint(c) = e
            && c.handle == handle
        {
            checkpointed = c.bounds;
        }
    }
    assert!(
        lost.bounds.extends(&checkpointed),
        "{ctx}: Lost bounds {:?} behind the last checkpoint {checkpointed:?}",
        lost.bounds
    );
    checkpointed
}

/// Checks the manifest of a reconciled process.
fn check_lost_manifest(sup: &Supervisor, r: &Reported, ctx: &str) -> Manifest {
    let m = sup
        .manifest(&r.handle)
        .unwrap_or_else(|| panic!("{ctx}: no manifest"));
    assert_eq!(m.state, State::LostOnRestore, "{ctx}: state");
    assert_eq!(m.pid, Some(r.pid as u32), "{ctx}: the journal's pid");
    let t = m
        .terminal
        .as_ref()
        .expect("a lost manifest has a terminal result");
    assert_eq!(
        (t.state, t.exit, t.event_id),
        (State::LostOnRestore, ExitStatus::Unknown, m.ids.lost),
        "{ctx}: terminal result under the pre-allocated Lost ID"
    );
    assert!(
        m.published.contains(&m.ids.lost),
        "{ctx}: Lost recorded as published"
    );
    assert!(
        m.published.contains(&m.ids.running),
        "{ctx}: running was published by the host"
    );
    assert!(
        m.completion_notified,
        "{ctx}: completion recorded as notified"
    );
    m
}

/// Everything the channel services delivered so far, by handle, in order.
fn drain_services(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<ServiceEvent>,
) -> BTreeMap<Handle, Vec<ServiceEvent>> {
    let mut by_handle: BTreeMap<Handle, Vec<ServiceEvent>> = BTreeMap::new();
    while let Ok(event) = rx.try_recv() {
        let handle = match &event {
            ServiceEvent::Published(n) => n.handle,
            ServiceEvent::Completed(c) => c.handle,
        };
        by_handle.entry(handle).or_default().push(event);
    }
    by_handle
}

fn expected_services(m: &Manifest) -> Vec<ServiceEvent> {
    vec![
        ServiceEvent::Published(LifecycleNotice {
            event_id: m.ids.lost,
            handle: m.handle,
            state: State::LostOnRestore,
        }),
        ServiceEvent::Completed(Completion {
            command_id: m.ids.completion,
            handle: m.handle,
            state: State::LostOnRestore,
            exit: ExitStatus::Unknown,
        }),
    ]
}

fn handles(list: &[Handle]) -> BTreeSet<Handle> {
    let set: BTreeSet<Handle> = list.iter().copied().collect();
    assert_eq!(set.len(), list.len(), "no handle is listed twice: {list:?}");
    set
}

/// No restore errors, no rejected or undecodable records, and a journal that recovered clean or
/// (`after_crash`) with nothing worse than what a kill leaves: a kill can land in the middle of
/// an `OutputCheckpoint` append of a host's drain task.
fn check_clean_report(report: &RestoreReport, after_crash: bool, ctx: &str) {
    assert!(
        report.errors.is_empty(),
        "{ctx}: restore errors {:?}",
        report.errors
    );
    let journal_ok = if after_crash {
        report.journal.is_crash_residue_only()
    } else {
        report.journal.is_clean()
    };
    assert!(journal_ok, "{ctx}: journal recovery {:?}", report.journal);
    assert!(
        report.replay.is_clean(),
        "{ctx}: replay {:?}",
        report.replay
    );
}

fn temp_root() -> tempfile::TempDir {
    let parent = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&parent).expect("create the target tmp dir");
    tempfile::tempdir_in(parent).expect("temp dir")
}

/// Four idle children (`echo started-N; exec sleep 600`) under a host that is SIGKILLed; restore
/// reconciles them without touching them, and a second restore changes nothing.
#[test]
fn restore_reconciles_live_children_without_signalling_them() {
    restore_reconciles_live_children(false);
}

/// The same for PTY launches: restore treats a terminal's output like a pipe's.
#[test]
fn restore_reconciles_live_terminal_children_without_signalling_them() {
    restore_reconciles_live_children(true);
}

fn restore_reconciles_live_children(pty: bool) {
    let (mode, newline, stream) = if pty {
        ("idle-pty", "\r\n", Stream::Terminal)
    } else {
        ("idle", "\n", Stream::Stdout)
    };
    let tmp = temp_root();
    let root = tmp.path().join("root");
    let mut cleanup = Cleanup::default();
    let host = run_host_and_kill(
        &root,
        &format!("{mode}:{IDLE_CHILDREN}"),
        tmp.path(),
        Duration::ZERO,
        &mut cleanup,
    );
    assert_eq!(host.opened, (0, 0, 0), "the host opened a fresh root");
    assert_eq!(host.children.len(), IDLE_CHILDREN);
    let expected: BTreeSet<Handle> = host.children.iter().map(|c| c.handle).collect();
    assert_eq!(expected.len(), IDLE_CHILDREN, "handles are distinct");
    let seq_before_restore = last_seq(&root);
    let rt = runtime();

    // Second supervisor: restore.
    let manifests: BTreeMap<Handle, Manifest> = rt.block_on(async {
        let (services, mut rx) = Services::channel();
        let (sup, report) = Supervisor::open(restore_config(&root), services)
            .await
            .expect("restore: Supervisor::open");
        check_clean_report(&report, true, "restore");
        assert_eq!(
            handles(&report.reconciled),
            expected,
            "restore: reconciled lists exactly the live children"
        );
        assert_eq!(report.reopened, 0, "restore: nothing was terminal");
        let delivered = drain_services(&mut rx);
        let (events, _) = journal_events(&root);
        let mut manifests = BTreeMap::new();
        for r in &host.children {
            let ctx = format!("restore: child {} ({})", r.n, r.handle);
            let m = check_lost_manifest(&sup, r, &ctx);
            // The deadlines as registered, the original start, and no deadline fired: the
            // process is reconciled, never given a new wall or idle period.
            let limits = m.command.limits();
            assert_eq!(
                (limits.wall_clock_ms, limits.idle_ms),
                (Some(IDLE_WALL_S * 1000), Some(IDLE_IDLE_S * 1000)),
                "{ctx}: the limits as registered"
            );
            assert!(
                m.running_unix_ms.is_some_and(|t| t >= m.registered_unix_ms),
                "{ctx}: the original start is kept"
            );
            assert!(m.deadline.is_none(), "{ctx}: no deadline fired");
            assert_eq!(
                delivered.get(&r.handle),
                Some(&expected_services(&m)),
                "{ctx}: the channel delivered Published(ids.lost) then Completed(ids.completion), \
                 once each"
            );
            check_lost_records(&events, &m, &ctx);
            assert_untouched(r.pid, &m, &ctx);
            let line = format!("started-{}{newline}", r.n);
            let read = sup
                .output_raw(&r.handle, 0, 4096)
                .await
                .expect("output_raw");
            assert_eq!(
                String::from_utf8_lossy(&read.bytes),
                line,
                "{ctx}: the output written before the crash"
            );
            assert!(
                read.spans.iter().all(|s| s.stream == stream),
                "{ctx}: spans {:?}",
                read.spans
            );
            assert_eq!(
                (read.retained_from, read.total_bytes, r.visible),
                (0, line.len() as u64, line.len() as u64),
                "{ctx}: spool bounds"
            );
            assert_eq!(
                m.bounds,
                CursorBounds {
                    retained_from: 0,
                    total_bytes: line.len() as u64
                },
                "{ctx}: the Lost event names every byte the spool holds"
            );
            manifests.insert(r.handle, m);
        }
        assert_eq!(
            delivered.len(),
            IDLE_CHILDREN,
            "restore: services got nothing about other handles: {delivered:?}"
        );
        let shut = sup.shutdown(Duration::from_secs(1)).await;
        assert_eq!(
            shut,
            Default::default(),
            "restore: nothing was live to shut down"
        );
        manifests
    });
    let seq_after_restore = last_seq(&root);
    assert_eq!(
        seq_after_restore - seq_before_restore,
        3 * IDLE_CHILDREN as u64,
        "restore wrote LostOnRestore, LifecyclePublished and CompletionNotified per child, \
         nothing else"
    );
    for r in &host.children {
        assert_untouched(
            r.pid,
            &manifests[&r.handle],
            "after shutdown of the restorer",
        );
    }

    // Third supervisor: a second restore adds nothing.
    rt.block_on(async {
        let (services, mut rx) = Services::channel();
        let (sup, report) = Supervisor::open(restore_config(&root), services)
            .await
            .expect("second restore: Supervisor::open");
        check_clean_report(&report, false, "second restore");
        assert!(
            report.reconciled.is_empty(),
            "second restore: reconciled {:?}",
            report.reconciled
        );
        assert_eq!(
            report.reopened,
            expected.len(),
            "second restore: reopened counts the lost children"
        );
        assert!(
            rx.try_recv().is_err(),
            "second restore: nothing is published again"
        );
        assert_eq!(
            last_seq(&root),
            seq_after_restore,
            "second restore: the journal did not grow"
        );
        for r in &host.children {
            let ctx = format!("second restore: child {}", r.n);
            let m = sup.manifest(&r.handle).expect("manifest");
            assert_eq!(m, manifests[&r.handle], "{ctx}: manifest unchanged");
            let read = sup
                .output_raw(&r.handle, 0, 4096)
                .await
                .expect("output_raw");
            assert_eq!(
                read.bytes,
                format!("started-{}{newline}", r.n).as_bytes(),
                "{ctx}"
            );
            assert_untouched(r.pid, &m, &ctx);
        }
        sup.shutdown(Duration::from_secs(1)).await;
    });
    assert_eq!(
        last_seq(&root),
        seq_after_restore,
        "nothing written at close"
    );

    // The old children were never ours to end; end them now so nothing leaks.
    for &pgid in &cleanup.groups {
        killpg(Pid::from_raw(pgid), Signal::SIGKILL).expect("the old child's group still exists");
    }
}

/// Checks that `bytes` (output from cursor `from`) are consecutive `line <i> PAD` lines, the first
/// one possibly cut at the front (when `from > 0`) and the last one possibly cut at the end.
/// Returns the numbers of the first and last whole lines.
fn check_lines(bytes: &[u8], from: u64, ctx: &str) -> (u64, u64) {
    let text = std::str::from_utf8(bytes).unwrap_or_else(|e| panic!("{ctx}: not UTF-8: {e}"));
    let mut rest = text;
    if from > 0 {
        // Retention may have cut the first line: skip to the first whole one.
        let at = rest
            .find('\n')
            .unwrap_or_else(|| panic!("{ctx}: no line end"));
        rest = &rest[at + 1..];
    }
    let mut first = None;
    let mut last = 0u64;
    while let Some(at) = rest.find('\n') {
        let line = &rest[..at];
        let number: u64 = line
            .strip_prefix("line ")
            .and_then(|l| l.strip_suffix(PAD))
            .and_then(|l| l.strip_suffix(' '))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{ctx}: malformed line {line:?} after line {last}"));
        match first {
            None => {
                if from == 0 {
                    assert_eq!(number, 1, "{ctx}: the output starts with line 1");
                }
                first = Some(number);
            }
            Some(_) => assert_eq!(number, last + 1, "{ctx}: line {number} follows {last}"),
        }
        last = number;
        rest = &rest[at + 1..];
    }
    let next = format!("line {} {PAD}\n", last + 1);
    assert!(
        next.starts_with(rest),
        "{ctx}: the cut last line {rest:?} is not a prefix of {next:?}"
    );
    (first.unwrap_or(0), last)
}

/// A host killed while its child writes without pause, over several rounds on one root: after
/// each kill, restore reconciles the child with bounds at least as far as the host had seen, and
/// every byte up to those bounds is readable and intact.
#[test]
fn restore_after_a_kill_mid_output_keeps_the_spooled_bytes() {
    let tmp = temp_root();
    let root = tmp.path().join("root");
    let mut cleanup = Cleanup::default();
    let rt = runtime();
    let mut earlier: Vec<(Handle, CursorBounds)> = Vec::new();
    for round in 0..STREAM_ROUNDS {
        let ctx = format!("round {round}");
        // Kill at once, or after the host kept draining (and checkpointing) for a while.
        let delay = Duration::from_millis([0, 150, 400][round % 3]);
        let host = run_host_and_kill(&root, "stream", tmp.path(), delay, &mut cleanup);
        assert_eq!(
            host.opened,
            (0, earlier.len(), 0),
            "{ctx}: the host reopened the earlier rounds' processes, reconciled nothing"
        );
        let [r] = host.children[..] else {
            panic!("{ctx}: one child expected, got {:?}", host.children);
        };
        let (bounds, checkpointed) = rt.block_on(async {
            let (services, mut rx) = Services::channel();
            let (sup, report) = Supervisor::open(restore_config(&root), services)
                .await
                .expect("restore: Supervisor::open");
            assert!(
                report.errors.is_empty(),
                "{ctx}: errors {:?}",
                report.errors
            );
            assert!(
                report.journal.is_crash_residue_only(),
                "{ctx}: journal recovery {:?}",
                report.journal
            );
            assert!(
                report.replay.is_clean(),
                "{ctx}: replay {:?}",
                report.replay
            );
            assert_eq!(report.reconciled, vec![r.handle], "{ctx}: reconciled");
            assert_eq!(report.reopened, earlier.len(), "{ctx}: reopened");
            for (h, _) in &earlier {
                let m = sup.manifest(h).expect("an earlier round's manifest");
                assert!(m.state.is_terminal(), "{ctx}: {h} reopened as {m:?}");
            }
            let m = check_lost_manifest(&sup, &r, &ctx);
            let delivered = drain_services(&mut rx);
            assert_eq!(
                delivered.into_iter().collect::<Vec<_>>(),
                vec![(r.handle, expected_services(&m))],
                "{ctx}: services"
            );
            let (events, _) = journal_events(&root);
            let checkpointed = check_lost_records(&events, &m, &ctx);
            let bounds = m.bounds;
            assert!(
                bounds.total_bytes >= r.visible,
                "{ctx}: Lost bounds {bounds:?} behind the {} bytes the host had seen",
                r.visible
            );
            // Every byte from the recorded retained_from to the recorded total is readable.
            let mut cursor = bounds.retained_from;
            let mut bytes = Vec::new();
            while cursor < bounds.total_bytes {
                let read = sup
                    .output_raw(&r.handle, cursor, 256 * 1024)
                    .await
                    .unwrap_or_else(|e| panic!("{ctx}: output_raw({cursor}): {e}"));
                assert!(
                    read.total_bytes >= bounds.total_bytes,
                    "{ctx}: spool total {} behind the Lost bounds {bounds:?}",
                    read.total_bytes
                );
                assert!(
                    read.retained_from <= bounds.retained_from && !read.gap,
                    "{ctx}: bytes at {cursor} within the Lost bounds {bounds:?} were dropped \
                     (spool retains from {})",
                    read.retained_from
                );
                assert!(!read.bytes.is_empty(), "{ctx}: empty read at {cursor}");
                assert!(
                    read.spans.iter().all(|s| s.stream == Stream::Stdout),
                    "{ctx}: spans {:?}",
                    read.spans
                );
                bytes.extend_from_slice(&read.bytes);
                cursor = read.next_cursor;
            }
            bytes.truncate((bounds.total_bytes - bounds.retained_from) as usize);
            let (first, last) = check_lines(&bytes, bounds.retained_from, &ctx);
            println!(
                "{ctx}: killed {delay:?} after `ready`; host saw {} B; last checkpoint \
                 {checkpointed:?}; Lost bounds {bounds:?}; lines {first}..={last} intact",
                r.visible
            );
            // Earlier rounds' output is still there, unchanged: the same total, and at least
            // the recorded window (a kill before a deferred retention removal leaves older
            // segment files, which read as more output, never less).
            for (h, b) in &earlier {
                let read = sup.output_raw(h, 0, 1).await.expect("earlier output");
                assert!(
                    read.total_bytes == b.total_bytes && read.retained_from <= b.retained_from,
                    "{ctx}: earlier round's spool holds {}..{}, recorded {b:?}",
                    read.retained_from,
                    read.total_bytes
                );
            }
            sup.shutdown(Duration::from_secs(1)).await;
            (bounds, checkpointed)
        });
        assert!(bounds.extends(&checkpointed));
        earlier.push((r.handle, bounds));
    }
}
