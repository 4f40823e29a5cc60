//! One supervised process at run time: its output, its stdin, the drain task, and the one-shot
//! terminalization gate.
//!
//! Invariants:
//! - Exactly one terminal path wins [`Proc::gate`]; every other caller returns without effect.
//! - Terminalization runs in this order: final spool checkpoint, terminal event appended and
//!   acknowledged, waiters woken, capacity and lease released, lifecycle published, completion
//!   notified. Release comes before any host service is called.
//! - The drain task reads stdout and stderr until both reach EOF; after the workload exits it
//!   keeps reading for at most the final-drain window, so a descendant that holds a pipe open
//!   cannot withhold the result (capture is then reported incomplete).
//! - Spool syncs never block the drain's reads: their `fdatasync`s run on a blocking thread,
//!   without the output lock, one at a time. A checkpoint records the bounds its sync planned
//!   (never bytes appended while it ran), checkpoints reach the journal in order, and the drain
//!   waits for the one in flight before terminalizing, so none follows the terminal event.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{Notify, watch};
use tracing::{Instrument, debug, warn};

use super::Inner;
use super::command::Lease;
use crate::journal::EventId;
use crate::lifecycle::event::{
    CaptureStatus, CursorBounds, ExitStatus, LifecycleIds, OutputCheckpoint, Terminal,
};
use crate::lifecycle::{Handle, LifecycleEvent, State};
use crate::spool::Output;
use crate::spool::format::Stream;

/// Why the supervisor is ending a process (the first reason wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    Stop,
    Interrupt,
    Timeout,
    Shutdown,
}

/// What waiters learn once the terminal event is acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalSummary {
    pub state: State,
    pub exit: ExitStatus,
    pub bounds: CursorBounds,
    pub capture: CaptureStatus,
    /// Set when the terminal event could not be persisted (the journal failed); the state is
    /// then only known in memory.
    pub persist_error: Option<String>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
pub(crate) struct Proc {
    pub handle: Handle,
    pub ids: LifecycleIds,
    /// Process id and group id of the workload (equal: it leads its own group).
    pub pid: Option<u32>,
    /// `None` only when no spool could be created (the start then fails before spawning).
    pub output: Mutex<Option<Output>>,
    pub output_changed: Notify,
    pub stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    pub cause: Mutex<Option<Cause>>,
    /// SIGKILL had to be sent.
    pub escalated: AtomicBool,
    /// Set (under this lock) as soon as the workload's exit is seen; signals check it under the
    /// same lock, so none is sent to the group id of a reaped leader.
    pub reaped: Mutex<bool>,
    gate: AtomicBool,
    pub exited: watch::Sender<Option<TerminalSummary>>,
    pub release: Mutex<Option<Release>>,
}

/// What a live process holds until it is terminal.
#[derive(Debug)]
pub(crate) struct Release {
    pub lease: Option<Box<dyn Lease>>,
}

impl Proc {
    pub fn new(
        handle: Handle,
        ids: LifecycleIds,
        pid: Option<u32>,
        output: Option<Output>,
        stdin: Option<ChildStdin>,
        lease: Option<Box<dyn Lease>>,
    ) -> Self {
        Proc {
            handle,
            ids,
            pid,
            output: Mutex::new(output),
            output_changed: Notify::new(),
            stdin: tokio::sync::Mutex::new(stdin),
            cause: Mutex::new(None),
            escalated: AtomicBool::new(false),
            reaped: Mutex::new(false),
            gate: AtomicBool::new(false),
            exited: watch::channel(None).0,
            release: Mutex::new(Some(Release { lease })),
        }
    }

    pub fn is_terminal(&self) -> bool {
        self.exited.borrow().is_some()
    }

    /// Records why the supervisor ends the process; the first cause stays.
    pub fn set_cause(&self, cause: Cause) -> Cause {
        *lock(&self.cause).get_or_insert(cause)
    }

    /// Appends what one pass of the drain read and flushes it, under one lock: the bytes are in
    /// the spool's files (for readers in other processes, and a crash of the supervisor) before
    /// the drain reads again.
    fn append_output(&self, stream: Stream, bytes: &[u8]) -> Result<(), crate::spool::SpoolError> {
        let result = match lock(&self.output).as_mut() {
            Some(output) => output.append(stream, bytes).and_then(|()| output.flush()),
            None => Err(crate::spool::SpoolError::ReadOnly),
        };
        self.output_changed.notify_waiters();
        result
    }

    /// Total bytes of output so far (0 without a spool).
    pub fn total_bytes(&self) -> u64 {
        lock(&self.output)
            .as_ref()
            .map_or(0, |o| o.spool().total_bytes())
    }

    /// Syncs the spool and returns its durable bounds (zero without a spool). The `fdatasync`s
    /// run on a blocking thread without the output lock, so appends (the drain task) and reads
    /// (`output` callers) go on meanwhile; the bounds are those planned before the syncs began.
    pub async fn sync_output(&self) -> Result<CursorBounds, crate::spool::SpoolError> {
        let plan = match lock(&self.output).as_mut() {
            Some(output) => output.plan_sync()?,
            None => return Ok(CursorBounds::default()),
        };
        let done = if plan.is_empty() {
            plan.run()
        } else {
            match tokio::task::spawn_blocking(move || plan.run()).await {
                Ok(done) => done,
                Err(e) => {
                    if let Some(output) = lock(&self.output).as_mut() {
                        output.abandon_sync();
                    }
                    return Err(crate::spool::SpoolError::Io {
                        op: "sync task",
                        cause: std::io::Error::other(e.to_string()),
                    });
                }
            }
        };
        match lock(&self.output).as_mut() {
            Some(output) => output
                .finish_sync(done)
                .map(|(retained_from, total_bytes)| CursorBounds {
                    retained_from,
                    total_bytes,
                }),
            None => Ok(CursorBounds::default()),
        }
    }

    pub fn read_output(
        &self,
        cursor: u64,
        max_bytes: usize,
    ) -> Result<crate::spool::SpoolRead, crate::spool::SpoolError> {
        match lock(&self.output).as_ref() {
            Some(output) => output.read(cursor, max_bytes),
            None if cursor > 0 => Err(crate::spool::SpoolError::CursorAhead {
                cursor,
                total_bytes: 0,
            }),
            None => Ok(crate::spool::SpoolRead::default()),
        }
    }
}

/// Bytes read from a pipe per read call: a quarter of the enlarged pipe, so one wakeup moves a
/// lot and the spool writes several chunks in one call.
const READ_BYTES: usize = 256 * 1024;

/// The pipe size asked for with F_SETPIPE_SZ: larger pipes mean fewer wakeups (research: 1 MiB
/// pipes tripled throughput on this kind of machine).
const PIPE_BYTES: i32 = 1024 * 1024;

pub(crate) fn enlarge_pipe(fd: std::os::fd::BorrowedFd<'_>) {
    // Best effort: the default pipe works, only slower.
    let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_BYTES));
}

/// A spool sync (and maybe its journal record) running beside the drain; it yields the output
/// total the journal records once it is done.
type SyncTask = Pin<Box<dyn Future<Output = u64> + Send>>;

/// Reads both streams into the spool, watches the wall-clock limit, checkpoints cursor bounds,
/// and terminalizes when the workload has exited and its output is drained.
///
/// Spool syncs run beside the reads, one at a time (so checkpoint records reach the journal in
/// order, each with bounds no smaller than the last): every `checkpoint_interval` a checkpoint
/// syncs and records the durable bounds, and in between, once `write_behind_bytes` more were
/// appended, a sync without a record starts writing them back, so that the disk works while the
/// pipes are read and the final checkpoint finds little left to sync.
pub(crate) async fn drain(
    inner: Arc<Inner>,
    proc: Arc<Proc>,
    mut child: Child,
    mut stdout: Option<ChildStdout>,
    mut stderr: Option<ChildStderr>,
    timeout: Option<Duration>,
) {
    let mut out_buf = vec![0u8; READ_BYTES];
    let mut err_buf = vec![0u8; READ_BYTES];
    let mut status: Option<std::io::Result<std::process::ExitStatus>> = None;
    let mut capture_failure: Option<String> = None;
    let start = tokio::time::Instant::now();
    let deadline = timeout.map(|t| start + t);
    let mut timeout_fired = false;
    let final_drain = inner.config.final_drain;
    let write_behind = inner.config.write_behind_bytes;
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    let tick = tokio::time::sleep_until(start + inner.config.checkpoint_interval);
    tokio::pin!(tick);
    let mut sync_task: Option<SyncTask> = None;
    // Output total the journal's last checkpoint names.
    let mut recorded = 0u64;
    // A checkpoint is due but waits for the sync in flight.
    let mut record_due = false;
    // Bytes appended since the last sync was planned.
    let mut unsynced = 0u64;
    loop {
        if sync_task.is_none() {
            let record = std::mem::take(&mut record_due) && proc.total_bytes() > recorded;
            // At least one byte: a write-behind of 0 means "after every append", and must not
            // start sync after sync while nothing arrives.
            if record || write_behind.is_some_and(|w| unsynced >= w.max(1)) {
                unsynced = 0;
                sync_task = Some(Box::pin(sync_and_record(
                    Arc::clone(&inner),
                    Arc::clone(&proc),
                    record,
                    recorded,
                )));
            }
        }
        if stdout.is_none() && stderr.is_none() && status.is_some() {
            break;
        }
        tokio::select! {
            r = read_some(&mut stdout, &mut out_buf), if stdout.is_some() => {
                match r {
                    Ok(0) => stdout = None,
                    Ok(n) => {
                        unsynced += n as u64;
                        if let Err(e) = proc.append_output(Stream::Stdout, &out_buf[..n]) {
                            capture_failure.get_or_insert(e.to_string());
                        }
                    }
                    Err(e) => {
                        capture_failure.get_or_insert(format!("reading stdout: {e}"));
                        stdout = None;
                    }
                }
            }
            r = read_some(&mut stderr, &mut err_buf), if stderr.is_some() => {
                match r {
                    Ok(0) => stderr = None,
                    Ok(n) => {
                        unsynced += n as u64;
                        if let Err(e) = proc.append_output(Stream::Stderr, &err_buf[..n]) {
                            capture_failure.get_or_insert(e.to_string());
                        }
                    }
                    Err(e) => {
                        capture_failure.get_or_insert(format!("reading stderr: {e}"));
                        stderr = None;
                    }
                }
            }
            s = child.wait(), if status.is_none() => {
                *lock(&proc.reaped) = true;
                status = Some(s);
                drain_deadline = Some(tokio::time::Instant::now() + final_drain);
            }
            () = sleep_until_opt(drain_deadline), if drain_deadline.is_some() => {
                break;
            }
            () = sleep_until_opt(deadline), if deadline.is_some() && !timeout_fired && status.is_none() => {
                timeout_fired = true;
                proc.set_cause(Cause::Timeout);
                let (inner, proc) = (Arc::clone(&inner), Arc::clone(&proc));
                tokio::spawn(async move {
                    let grace = inner.config.default_grace;
                    let _ = super::terminate(&inner, &proc, grace).await;
                });
            }
            done = run_opt(&mut sync_task), if sync_task.is_some() => {
                sync_task = None;
                recorded = done;
            }
            () = &mut tick => {
                tick.as_mut().reset(tokio::time::Instant::now() + inner.config.checkpoint_interval);
                record_due = true;
            }
        }
    }
    // A checkpoint record must not follow the terminal event: let the one in flight finish.
    if let Some(task) = sync_task.take() {
        task.await;
    }
    let open_streams = usize::from(stdout.is_some()) + usize::from(stderr.is_some());
    drop((stdout, stderr));
    // The workload may have been reaped above; if the loop ended only because the drain window
    // closed, `status` is set. It is always set here.
    let status = match status {
        Some(s) => s,
        None => {
            let s = child.wait().await;
            *lock(&proc.reaped) = true;
            s
        }
    };
    let capture = match (capture_failure, open_streams) {
        (Some(reason), _) => CaptureStatus::Failed(reason),
        (None, 0) => CaptureStatus::Complete,
        (None, n) => CaptureStatus::Incomplete(format!(
            "{n} stream(s) still open {} ms after the workload exited (a descendant holds them)",
            final_drain.as_millis()
        )),
    };
    let (state, exit, reason) = classify(&proc, status);
    terminalize(&inner, &proc, state, exit, capture, reason).await;
}

async fn read_some(
    stream: &mut Option<impl tokio::io::AsyncRead + Unpin>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match stream {
        Some(s) => s.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn run_opt(task: &mut Option<SyncTask>) -> u64 {
    match task {
        Some(t) => t.as_mut().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Maps the wait status and the supervisor's cause to the terminal state.
fn classify(
    proc: &Proc,
    status: std::io::Result<std::process::ExitStatus>,
) -> (State, ExitStatus, String) {
    use std::os::unix::process::ExitStatusExt;
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            return (
                State::Failed,
                ExitStatus::Unknown,
                format!("waiting for the process failed: {e}"),
            );
        }
    };
    let exit = match (status.code(), status.signal()) {
        (Some(code), _) => ExitStatus::Code(code),
        (None, Some(sig)) => ExitStatus::Signal(sig),
        (None, None) => ExitStatus::Unknown,
    };
    let cause = *lock(&proc.cause);
    // `killed` only when SIGKILL is what ended it: an escalation that lost the race to a SIGTERM
    // exit must not be recorded as a kill.
    let killed = proc.escalated.load(Ordering::SeqCst)
        && exit == ExitStatus::Signal(nix::sys::signal::Signal::SIGKILL as i32);
    match cause {
        Some(Cause::Stop | Cause::Shutdown) if killed => (
            State::Killed,
            exit,
            "did not exit after SIGTERM and the grace period; killed".to_owned(),
        ),
        Some(Cause::Stop) => (State::Terminated, exit, "stopped".to_owned()),
        Some(Cause::Shutdown) => (State::Terminated, exit, "supervisor shut down".to_owned()),
        Some(Cause::Timeout) => (State::TimedOut, exit, "wall-clock limit reached".to_owned()),
        Some(Cause::Interrupt)
            if exit == ExitStatus::Signal(libc_sigint()) || exit == ExitStatus::Code(130) =>
        {
            (State::Interrupted, exit, "interrupted".to_owned())
        }
        Some(Cause::Interrupt) | None => (State::Exited, exit, "exited".to_owned()),
    }
}

fn libc_sigint() -> i32 {
    nix::sys::signal::Signal::SIGINT as i32
}

/// Syncs the spool; with `record`, then appends its durable bounds to the journal as a
/// checkpoint when they go past `recorded` (the total the last checkpoint names). Returns the
/// total the journal's last checkpoint now names.
async fn sync_and_record(inner: Arc<Inner>, proc: Arc<Proc>, record: bool, recorded: u64) -> u64 {
    let bounds = match proc.sync_output().await {
        Ok(bounds) => bounds,
        Err(e) => {
            warn!(handle = %proc.handle, error = %e, "spool checkpoint failed");
            return recorded;
        }
    };
    if !record || bounds.total_bytes <= recorded {
        return recorded;
    }
    let event = LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
        handle: proc.handle,
        bounds,
        at_unix_ms: super::now_unix_ms(),
    });
    match inner.append(EventId::new_v7(), event).await {
        Ok(_) => bounds.total_bytes,
        Err(e) => {
            warn!(handle = %proc.handle, error = %e, "output checkpoint not recorded");
            recorded
        }
    }
}

/// The one-shot gate every terminal path goes through.
pub(crate) async fn terminalize(
    inner: &Arc<Inner>,
    proc: &Arc<Proc>,
    state: State,
    exit: ExitStatus,
    capture: CaptureStatus,
    reason: String,
) {
    if proc.gate.swap(true, Ordering::SeqCst) {
        return;
    }
    let span = tracing::info_span!("terminalize", handle = %proc.handle, state = %state);
    // Instrumented rather than entered: the span must not stay entered on this thread while the
    // task is suspended at an await.
    let (bounds, persist_error) = async {
        // 1. Final cursor bounds: the spool is synced before the journal names its bounds.
        let bounds = match proc.sync_output().await {
            Ok(bounds) => bounds,
            Err(e) => {
                warn!(error = %e, "final spool checkpoint failed");
                lock(&proc.output)
                    .as_ref()
                    .map_or(CursorBounds::default(), |o| CursorBounds {
                        retained_from: o.spool().retained_from(),
                        total_bytes: o.spool().durable_total(),
                    })
            }
        };
        // 2. The terminal result, under its pre-allocated ID.
        let event = LifecycleEvent::Terminal(Terminal {
            handle: proc.handle,
            state,
            exit,
            bounds,
            capture: capture.clone(),
            reason,
            at_unix_ms: super::now_unix_ms(),
        });
        let persist_error = inner
            .append(proc.ids.terminal, event)
            .await
            .err()
            .map(|e| e.to_string());
        if let Some(e) = &persist_error {
            warn!(error = %e, "terminal event not persisted");
        }
        (bounds, persist_error)
    }
    .instrument(span)
    .await;
    // 3. Waiters see a persisted result.
    proc.exited.send_replace(Some(TerminalSummary {
        state,
        exit,
        bounds,
        capture,
        persist_error: persist_error.clone(),
    }));
    proc.output_changed.notify_waiters();
    // 4. Release capacity and the lease before any host service runs.
    let release = lock(&proc.release).take();
    if let Some(release) = release {
        inner.release_capacity();
        if let Some(lease) = release.lease {
            lease.release();
        }
    }
    debug!(handle = %proc.handle, %state, "terminal");
    // 5 and 6. Publish and notify, off this task: a slow host holds nothing of ours.
    if persist_error.is_none() {
        let (task_inner, handle, ids) = (Arc::clone(inner), proc.handle, proc.ids);
        let task = tokio::spawn(async move {
            super::restore::publish_and_notify(&task_inner, handle, ids, ids.terminal, state, exit)
                .await;
        });
        inner.track(task);
    }
}
