//! The supervisor: Start, Drain, Terminalize, Stop, Input, Wait, Shutdown and Restore on tokio
//! (seed 000; DESIGN.md, "The supervisor").
//!
//! The supervisor is the only place that spawns, signals and sleeps. It owns the runtime root
//! (through the journal's writer lock), the lifecycle journal with its manifests, and one
//! [`process::Proc`] per process it started. Every lifecycle step is validated by the manifest
//! store before it is appended, and acknowledged under the journal's durability policy before the
//! supervisor acts on it.
//!
//! Invariants:
//! - Admission is checked before anything else in `start`; a refused start hands the prepared
//!   process back untouched. After `shutdown` begins, admission stays closed.
//! - Capacity taken by a start is given back exactly once: by the terminal gate, or by `start`
//!   itself when nothing was registered.
//! - Restore never signals a persisted pid. Signals go only to process groups of children this
//!   supervisor spawned and has not yet seen terminal.
//! - Every task the supervisor spawns is tracked and joined (bounded) by `shutdown`.

pub mod command;
mod identity;
pub(crate) mod process;
pub mod restore;
pub mod services;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tracing::{Instrument, info_span, warn};

pub use command::{Command, Lease, PrepareError, PreparedProcess};
pub use process::TerminalSummary;
pub use restore::RestoreReport;
pub use services::{
    Completion, CompletionNotifier, LifecycleNotice, LifecyclePublisher, ServiceError,
    ServiceEvent, Services,
};

use crate::journal::{Appended, Durability, EventId, JournalOptions};
use crate::lifecycle::event::{
    CaptureStatus, ExitStatus, InputClosed, LifecycleIds, Registered, Running, StopRequested,
};
use crate::lifecycle::{Handle, Lifecycle, LifecycleError, LifecycleEvent, Manifest, State};
use crate::render::{self, ArtifactDescriptor};
use crate::spool::{Output, Span, Spool, SpoolError, SpoolOptions};
use process::{Cause, Proc, lock};

/// Everything a supervisor is opened with, besides the host's services.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// The runtime root; made absolute once at open.
    pub root: PathBuf,
    pub durability: Durability,
    /// At most this many processes are live at once.
    pub max_live: usize,
    pub spool: SpoolOptions,
    /// Bytes of recent output each process keeps in memory for polls.
    pub buffer_bytes: usize,
    /// How long output is still drained after the workload exited (seed 003: 200 ms).
    pub final_drain: Duration,
    /// How often a process's durable output bounds are recorded while it writes.
    pub checkpoint_interval: Duration,
    /// Between checkpoints, a process's spool is synced (without a journal record) each time this
    /// many bytes were appended since the last sync began, so that a fast writer's output goes
    /// to disk while it runs instead of all at its next checkpoint. `None`: only checkpoints sync.
    /// The default, 8 MiB (one default spool segment), measured as fast as 16 MiB and faster
    /// than 32 MiB, whose larger final sync the workload's exit then waits for.
    pub write_behind_bytes: Option<u64>,
    /// Grace between SIGTERM and SIGKILL for timeouts (stop and shutdown take their own).
    pub default_grace: Duration,
    /// How long an exit is awaited after SIGKILL before teardown is reported as failed.
    pub kill_confirm: Duration,
    /// How signals reach process groups (replaceable to inject failures in tests).
    pub signaller: Arc<dyn Signaller>,
}

impl SupervisorConfig {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SupervisorConfig {
            root: root.into(),
            durability: Durability::Group,
            max_live: 256,
            spool: SpoolOptions::default(),
            buffer_bytes: 64 * 1024,
            final_drain: Duration::from_millis(200),
            checkpoint_interval: Duration::from_secs(1),
            write_behind_bytes: Some(8 * 1024 * 1024),
            default_grace: Duration::from_secs(2),
            kill_confirm: Duration::from_secs(5),
            signaller: Arc::new(KillPg),
        }
    }
}

/// Sends a signal to a process group.
pub trait Signaller: Send + Sync + std::fmt::Debug {
    fn signal_group(&self, pgid: u32, signal: nix::sys::signal::Signal) -> std::io::Result<()>;
}

/// The real thing: `killpg(2)`.
#[derive(Debug, Default, Clone, Copy)]
pub struct KillPg;

impl Signaller for KillPg {
    fn signal_group(&self, pgid: u32, signal: nix::sys::signal::Signal) -> std::io::Result<()> {
        let pgid = i32::try_from(pgid).map_err(|_| std::io::Error::other("pgid out of range"))?;
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal)
            .map_err(|e| std::io::Error::from_raw_os_error(e as i32))
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SupervisorError {
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    #[error("no process with handle {0}")]
    UnknownHandle(Handle),
    #[error("process {0} is not running")]
    NotRunning(Handle),
    #[error("the input of process {0} is closed")]
    InputClosed(Handle),
    #[error("writing input to {handle}: {message}")]
    Input { handle: Handle, message: String },
    #[error("cursor {cursor} is beyond the end of the output ({total_bytes} bytes)")]
    CursorAhead { cursor: u64, total_bytes: u64 },
    #[error("output of {handle}: {message}")]
    Output { handle: Handle, message: String },
    #[error("process {0} did not finish within the wait timeout")]
    WaitTimeout(Handle),
    #[error("teardown of {handle} failed: {reason}")]
    TeardownFailed { handle: Handle, reason: String },
    #[error("the supervisor task failed: {0}")]
    Task(String),
}

/// Why a start was refused; the prepared process comes back with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    ShuttingDown,
    AtCapacity { live: usize, max: usize },
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error("start refused: {reason:?}")]
    Refused {
        prepared: PreparedProcess,
        reason: Refusal,
    },
    /// The process could not be spawned; it is recorded as `failed` under `handle`.
    #[error("{handle} failed to start: {message}")]
    Spawn { handle: Handle, message: String },
    /// Nothing could be recorded (the journal failed); nothing was spawned.
    #[error("start not recorded: {error}")]
    Journal {
        prepared: PreparedProcess,
        error: String,
    },
}

/// How output is returned.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Rendering {
    SafeText,
    Base64,
}

/// One page of output with every cursor field a client needs to resume exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutputPage {
    pub handle: Handle,
    pub cursor: u64,
    pub next_cursor: u64,
    pub retained_from: u64,
    pub total_bytes: u64,
    pub gap: bool,
    pub cursor_ahead: bool,
    pub rendering: Rendering,
    /// Safe text, or base64 of exactly the raw bytes.
    pub data: String,
    pub normalized: bool,
    pub binary: bool,
    pub spans: Vec<Span>,
    pub artifact: ArtifactDescriptor,
    pub state: State,
}

/// Filter for [`Supervisor::list`].
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub state: Option<State>,
    pub label: Option<(String, String)>,
}

/// The shared result of a shutdown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ShutdownReport {
    pub terminated: Vec<Handle>,
    pub killed: Vec<Handle>,
    /// Processes whose teardown failed (a signal could not be sent, or no exit was confirmed).
    pub teardown_failed: Vec<(Handle, String)>,
}

pub(crate) fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub config: SupervisorConfig,
    pub services: Services,
    pub lifecycle: Mutex<Lifecycle>,
    root: PathBuf,
    procs: Mutex<HashMap<Handle, Arc<Proc>>>,
    readers: Mutex<HashMap<Handle, Arc<Spool>>>,
    live: Mutex<usize>,
    closed: AtomicBool,
    /// Held shared by every `start` from its admission check until its process is in `procs`
    /// (or the start failed); `shutdown` closes admission, then takes it exclusively, so its
    /// snapshot of `procs` includes every start that was admitted.
    admission: tokio::sync::RwLock<()>,
    shutdown: tokio::sync::OnceCell<ShutdownReport>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Inner {
    /// Validates, appends and acknowledges one lifecycle event off the async threads; the
    /// lifecycle lock is held only for the write, not for the flush, so concurrent processes
    /// share group commits.
    pub async fn append(
        self: &Arc<Self>,
        id: EventId,
        event: LifecycleEvent,
    ) -> Result<Appended, LifecycleError> {
        let inner = Arc::clone(self);
        let joined = tokio::task::spawn_blocking(move || {
            let (appended, journal) = {
                let mut lifecycle = lock(&inner.lifecycle);
                (
                    lifecycle.append_deferred(id, &event)?,
                    lifecycle.journal_arc(),
                )
            };
            journal.acknowledge(appended.position.seq)?;
            Ok(appended)
        })
        .await;
        match joined {
            Ok(result) => result,
            Err(e) => Err(LifecycleError::Journal(
                crate::journal::JournalError::Poisoned {
                    cause: format!("append task failed: {e}"),
                },
            )),
        }
    }

    pub fn release_capacity(&self) {
        let mut live = lock(&self.live);
        *live = live.saturating_sub(1);
    }

    pub fn track(&self, task: tokio::task::JoinHandle<()>) {
        let mut tasks = lock(&self.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    pub fn spool_dir(&self, handle: &Handle) -> PathBuf {
        self.root.join("spool").join(handle.to_string())
    }

    fn proc(&self, handle: &Handle) -> Option<Arc<Proc>> {
        lock(&self.procs).get(handle).cloned()
    }

    /// Signals the process group, unless the workload was already reaped: its group id could
    /// then name someone else's group. The `reaped` lock is held across the check and the signal,
    /// and the drain task takes it when the exit is seen, so a signal is never sent after that.
    /// ESRCH means the group is already gone, which is what a signal wanted.
    async fn signal(&self, proc: &Proc, signal: nix::sys::signal::Signal) -> std::io::Result<()> {
        let Some(pgid) = proc.pid else {
            return Err(std::io::Error::other("the process never started"));
        };
        let reaped = lock(&proc.reaped);
        if *reaped || proc.is_terminal() {
            return Ok(());
        }
        match self.config.signaller.signal_group(pgid, signal) {
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ESRCH as i32) => Ok(()),
            other => other,
        }
    }
}

/// SIGTERM to the group, the grace period, SIGKILL, and a bounded wait for the terminal gate.
/// Returns why teardown failed, if it did; terminalization continues regardless.
pub(crate) async fn terminate(
    inner: &Arc<Inner>,
    proc: &Arc<Proc>,
    grace: Duration,
) -> Result<(), String> {
    use nix::sys::signal::Signal;
    let mut failures = Vec::new();
    let mut exited = proc.exited.subscribe();
    if exited.borrow().is_some() {
        return Ok(());
    }
    if let Err(e) = inner.signal(proc, Signal::SIGTERM).await {
        failures.push(format!("SIGTERM: {e}"));
    }
    let done = tokio::time::timeout(grace, exited.wait_for(Option::is_some))
        .await
        .is_ok_and(|r| r.is_ok());
    if !done {
        proc.escalated.store(true, Ordering::SeqCst);
        if let Err(e) = inner.signal(proc, Signal::SIGKILL).await {
            failures.push(format!("SIGKILL: {e}"));
        }
        let confirmed =
            tokio::time::timeout(inner.config.kill_confirm, exited.wait_for(Option::is_some))
                .await
                .is_ok_and(|r| r.is_ok());
        if !confirmed {
            failures.push(format!(
                "no exit confirmed {} ms after SIGKILL",
                inner.config.kill_confirm.as_millis()
            ));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// A durable supervisor of processes under one runtime root. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

impl Supervisor {
    /// Takes the root (and its writer lock), installs the host's services, then restores: every
    /// process that was live under a previous supervisor becomes `lost_on_restore`.
    pub async fn open(
        config: SupervisorConfig,
        services: Services,
    ) -> Result<(Supervisor, RestoreReport), SupervisorError> {
        let root = std::path::absolute(&config.root).map_err(|e| SupervisorError::Output {
            handle: Handle(EventId::from_bytes([0; 16])),
            message: format!("runtime root: {e}"),
        })?;
        let options = JournalOptions {
            durability: config.durability,
            ..JournalOptions::default()
        };
        let open_root = root.clone();
        let opened = tokio::task::spawn_blocking(move || Lifecycle::open(&open_root, options))
            .await
            .map_err(|e| SupervisorError::Task(e.to_string()))??;
        let (lifecycle, recovery, replay) = opened;
        let inner = Arc::new(Inner {
            config,
            services,
            lifecycle: Mutex::new(lifecycle),
            root,
            procs: Mutex::new(HashMap::new()),
            readers: Mutex::new(HashMap::new()),
            live: Mutex::new(0),
            closed: AtomicBool::new(false),
            admission: tokio::sync::RwLock::new(()),
            shutdown: tokio::sync::OnceCell::new(),
            tasks: Mutex::new(Vec::new()),
        });
        let report = restore::restore(&inner, recovery, replay).await;
        Ok((Supervisor { inner }, report))
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Validates a command into a single-use launch.
    pub fn prepare(&self, command: Command) -> Result<PreparedProcess, PrepareError> {
        command::prepare(command)
    }

    /// How many processes hold capacity right now.
    pub fn live_count(&self) -> usize {
        *lock(&self.inner.live)
    }

    /// Starts a prepared process: admission, registration (`starting`), spawn in a new process
    /// group, `running`, then the drain task. Returns the opaque handle.
    pub async fn start(&self, prepared: PreparedProcess) -> Result<Handle, StartError> {
        let inner = &self.inner;
        let _admission = inner.admission.read().await;
        {
            let mut live = lock(&inner.live);
            if inner.closed.load(Ordering::SeqCst) {
                return Err(StartError::Refused {
                    prepared,
                    reason: Refusal::ShuttingDown,
                });
            }
            if *live >= inner.config.max_live {
                let reason = Refusal::AtCapacity {
                    live: *live,
                    max: inner.config.max_live,
                };
                return Err(StartError::Refused { prepared, reason });
            }
            *live += 1;
        }
        let handle = Handle(EventId::new_v7());
        let span = info_span!("process", %handle);
        self.start_admitted(handle, prepared).instrument(span).await
    }

    async fn start_admitted(
        &self,
        handle: Handle,
        prepared: PreparedProcess,
    ) -> Result<Handle, StartError> {
        let inner = &self.inner;
        let ids = LifecycleIds {
            running: EventId::new_v7(),
            terminal: EventId::new_v7(),
            lost: EventId::new_v7(),
            completion: EventId::new_v7(),
        };
        let PreparedProcess { spec, lease } = prepared;
        let registered = LifecycleEvent::Registered(Registered {
            handle,
            ids,
            command: spec.clone(),
            at_unix_ms: now_unix_ms(),
        });
        if let Err(e) = inner.append(EventId::new_v7(), registered).await {
            inner.release_capacity();
            return Err(StartError::Journal {
                prepared: PreparedProcess { spec, lease },
                error: e.to_string(),
            });
        }
        let spool = Spool::open_writer(
            &inner.spool_dir(&handle),
            handle.0.as_bytes(),
            inner.config.spool,
        );
        let output = match spool {
            Ok((spool, _)) => Output::new(spool, inner.config.buffer_bytes),
            Err(e) => {
                let message = format!("cannot create the output spool: {e}");
                return Err(self.fail_start(handle, ids, None, lease, message).await);
            }
        };
        let cwd = Path::new(&spec.cwd);
        if !cwd.is_dir() {
            let message = format!("working directory {} does not exist", spec.cwd);
            return Err(self
                .fail_start(handle, ids, Some(output), lease, message)
                .await);
        }
        let mut cmd = tokio::process::Command::new(&spec.program);
        cmd.args(&spec.args)
            .current_dir(cwd)
            .envs(spec.env_overrides.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                let message = match e.kind() {
                    std::io::ErrorKind::NotFound => format!("program {} not found", spec.program),
                    std::io::ErrorKind::PermissionDenied => {
                        format!("program {} is not executable", spec.program)
                    }
                    _ => format!("cannot spawn {}: {e}", spec.program),
                };
                return Err(self
                    .fail_start(handle, ids, Some(output), lease, message)
                    .await);
            }
        };
        let pid = child.id();
        let (stdout, stderr, stdin) =
            (child.stdout.take(), child.stderr.take(), child.stdin.take());
        if let Some(fd) = stdout.as_ref() {
            process::enlarge_pipe(std::os::fd::AsFd::as_fd(fd));
        }
        if let Some(fd) = stderr.as_ref() {
            process::enlarge_pipe(std::os::fd::AsFd::as_fd(fd));
        }
        let proc = Arc::new(Proc::new(handle, ids, pid, Some(output), stdin, lease));
        lock(&inner.procs).insert(handle, Arc::clone(&proc));
        let witness = identity::witness(pid.unwrap_or(0));
        let running = LifecycleEvent::Running(Running {
            handle,
            pid: pid.unwrap_or(0),
            witness,
            at_unix_ms: now_unix_ms(),
        });
        match inner.append(ids.running, running).await {
            Ok(_) => {
                // Published before the drain starts, so that the host sees `running` before
                // any terminal notice of the same process.
                let task_inner = Arc::clone(inner);
                let published = tokio::spawn(async move {
                    restore::publish_and_notify(
                        &task_inner,
                        handle,
                        ids,
                        ids.running,
                        State::Running,
                        ExitStatus::Unknown,
                    )
                    .await;
                });
                let timeout = spec.limits.wall_clock_ms.map(Duration::from_millis);
                let drain_inner = Arc::clone(inner);
                let drain_proc = Arc::clone(&proc);
                let span = info_span!("drain", %handle);
                let task = tokio::spawn(
                    async move {
                        let _ = published.await;
                        process::drain(drain_inner, drain_proc, child, stdout, stderr, timeout)
                            .await;
                    }
                    .instrument(span),
                );
                inner.track(task);
            }
            Err(e) => {
                // The journal failed: the process must not run unrecorded.
                warn!(error = %e, "running not recorded; killing the process");
                let _ = inner
                    .config
                    .signaller
                    .signal_group(pid.unwrap_or(0), nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait().await;
                let reason = format!("running not recorded: {e}");
                process::terminalize(
                    inner,
                    &proc,
                    State::Failed,
                    ExitStatus::Unknown,
                    CaptureStatus::Failed(reason.clone()),
                    reason,
                )
                .await;
            }
        }
        Ok(handle)
    }

    /// Records a start that failed before the workload ran, through the terminal gate.
    async fn fail_start(
        &self,
        handle: Handle,
        ids: LifecycleIds,
        output: Option<Output>,
        lease: Option<Box<dyn Lease>>,
        message: String,
    ) -> StartError {
        let inner = &self.inner;
        let proc = Arc::new(Proc::new(handle, ids, None, output, None, lease));
        lock(&inner.procs).insert(handle, Arc::clone(&proc));
        process::terminalize(
            inner,
            &proc,
            State::Failed,
            ExitStatus::Unknown,
            CaptureStatus::Complete,
            message.clone(),
        )
        .await;
        StartError::Spawn { handle, message }
    }

    /// The manifest of one process, as the journal knows it.
    pub fn manifest(&self, handle: &Handle) -> Option<Manifest> {
        lock(&self.inner.lifecycle).manifest(handle).cloned()
    }

    /// Manifests of every process the journal knows, filtered.
    pub fn list(&self, filter: &ListFilter) -> Vec<Manifest> {
        let lifecycle = lock(&self.inner.lifecycle);
        lifecycle
            .store()
            .iter()
            .filter(|m| filter.state.is_none_or(|s| m.state == s))
            .filter(|m| {
                filter
                    .label
                    .as_ref()
                    .is_none_or(|(k, v)| m.command.label(k) == Some(v.as_str()))
            })
            .cloned()
            .collect()
    }

    /// The state alone, without cloning the manifest: every output poll asks.
    fn state_of(&self, handle: &Handle) -> Result<State, SupervisorError> {
        lock(&self.inner.lifecycle)
            .manifest(handle)
            .map(|m| m.state)
            .ok_or(SupervisorError::UnknownHandle(*handle))
    }

    /// Reads up to `max_bytes` of output from `cursor`, rendered.
    pub fn output(
        &self,
        handle: &Handle,
        cursor: u64,
        max_bytes: usize,
        rendering: Rendering,
    ) -> Result<OutputPage, SupervisorError> {
        let state = self.state_of(handle)?;
        let read = self.read_output(handle, cursor, max_bytes)?;
        Ok(render_page(
            handle, state, cursor, &read, max_bytes, rendering,
        ))
    }

    /// Raw output bytes with their spans (for hosts that stream output as is).
    pub fn output_raw(
        &self,
        handle: &Handle,
        cursor: u64,
        max_bytes: usize,
    ) -> Result<crate::spool::SpoolRead, SupervisorError> {
        self.state_of(handle)?;
        self.read_output(handle, cursor, max_bytes)
    }

    /// One read of a live process's output (buffer, then spool) or of a finished one's spool.
    fn read_output(
        &self,
        handle: &Handle,
        cursor: u64,
        max_bytes: usize,
    ) -> Result<crate::spool::SpoolRead, SupervisorError> {
        let result = match self.inner.proc(handle) {
            Some(proc) => proc.read_output(cursor, max_bytes),
            None => self.reader(handle)?.read(cursor, max_bytes),
        };
        result.map_err(|e| match e {
            SpoolError::CursorAhead {
                cursor,
                total_bytes,
            } => SupervisorError::CursorAhead {
                cursor,
                total_bytes,
            },
            other => SupervisorError::Output {
                handle: *handle,
                message: other.to_string(),
            },
        })
    }

    /// Returns once the output of `handle` extends past `cursor` or the process is terminal.
    pub async fn output_changed(&self, handle: &Handle, cursor: u64) {
        let Some(proc) = self.inner.proc(handle) else {
            return;
        };
        loop {
            let notified = proc.output_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if proc.total_bytes() > cursor || proc.is_terminal() {
                return;
            }
            notified.await;
        }
    }

    fn reader(&self, handle: &Handle) -> Result<Arc<Spool>, SupervisorError> {
        if let Some(spool) = lock(&self.inner.readers).get(handle) {
            return Ok(Arc::clone(spool));
        }
        let (spool, _) = Spool::open_reader(&self.inner.spool_dir(handle)).map_err(|e| {
            SupervisorError::Output {
                handle: *handle,
                message: e.to_string(),
            }
        })?;
        let spool = Arc::new(spool);
        lock(&self.inner.readers).insert(*handle, Arc::clone(&spool));
        Ok(spool)
    }

    fn live_proc(&self, handle: &Handle) -> Result<Arc<Proc>, SupervisorError> {
        match self.inner.proc(handle) {
            Some(p) if !p.is_terminal() => Ok(p),
            Some(_) => Err(SupervisorError::NotRunning(*handle)),
            None => {
                self.state_of(handle)?;
                Err(SupervisorError::NotRunning(*handle))
            }
        }
    }

    /// Writes bytes to the process's stdin.
    pub async fn input(&self, handle: &Handle, bytes: &[u8]) -> Result<(), SupervisorError> {
        use tokio::io::AsyncWriteExt;
        let proc = self.live_proc(handle)?;
        let mut stdin = proc.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else {
            return Err(SupervisorError::InputClosed(*handle));
        };
        let written = async {
            pipe.write_all(bytes).await?;
            pipe.flush().await
        }
        .await;
        written.map_err(|e| SupervisorError::Input {
            handle: *handle,
            message: e.to_string(),
        })
    }

    /// Closes the process's stdin (it reads EOF) and records it.
    pub async fn close_input(&self, handle: &Handle) -> Result<(), SupervisorError> {
        let proc = self.live_proc(handle)?;
        let pipe = proc.stdin.lock().await.take();
        if pipe.is_none() {
            return Err(SupervisorError::InputClosed(*handle));
        }
        drop(pipe);
        let event = LifecycleEvent::InputClosed(InputClosed {
            handle: *handle,
            at_unix_ms: now_unix_ms(),
        });
        self.inner.append(EventId::new_v7(), event).await?;
        Ok(())
    }

    async fn request_stop(&self, proc: &Arc<Proc>, reason: &str) {
        let event = LifecycleEvent::StopRequested(StopRequested {
            handle: proc.handle,
            reason: reason.to_owned(),
            requested_by: "supervisor".to_owned(),
            at_unix_ms: now_unix_ms(),
        });
        // Refused only if the process became terminal meanwhile, which is fine.
        let _ = self.inner.append(EventId::new_v7(), event).await;
    }

    /// SIGTERM to the process group, `grace`, SIGKILL, and the exit confirmed. The process ends
    /// `terminated`, or `killed` when SIGKILL was needed.
    pub async fn stop(
        &self,
        handle: &Handle,
        grace: Duration,
    ) -> Result<TerminalSummary, SupervisorError> {
        let proc = match self.live_proc(handle) {
            Ok(p) => p,
            Err(SupervisorError::NotRunning(_)) => return self.wait(handle, None).await,
            Err(e) => return Err(e),
        };
        proc.set_cause(Cause::Stop);
        self.request_stop(&proc, "stop").await;
        terminate(&self.inner, &proc, grace)
            .await
            .map_err(|reason| SupervisorError::TeardownFailed {
                handle: *handle,
                reason,
            })?;
        self.wait(handle, None).await
    }

    /// SIGINT to the process group; the process ends `interrupted` if it exits by it.
    pub async fn interrupt(&self, handle: &Handle) -> Result<(), SupervisorError> {
        let proc = self.live_proc(handle)?;
        proc.set_cause(Cause::Interrupt);
        self.inner
            .signal(&proc, nix::sys::signal::Signal::SIGINT)
            .await
            .map_err(|e| SupervisorError::TeardownFailed {
                handle: *handle,
                reason: format!("SIGINT: {e}"),
            })
    }

    /// Waits until the process is terminal and its terminal event is persisted.
    pub async fn wait(
        &self,
        handle: &Handle,
        timeout: Option<Duration>,
    ) -> Result<TerminalSummary, SupervisorError> {
        let Some(proc) = self.inner.proc(handle) else {
            // Not started by this supervisor: the journal has the answer, or it is unknown.
            let m = self
                .manifest(handle)
                .ok_or(SupervisorError::UnknownHandle(*handle))?;
            return match m.terminal {
                Some(t) => Ok(TerminalSummary {
                    state: t.state,
                    exit: t.exit,
                    bounds: m.bounds,
                    capture: t.capture,
                    persist_error: None,
                }),
                None => Err(SupervisorError::NotRunning(*handle)),
            };
        };
        let mut exited = proc.exited.subscribe();
        let waited = async {
            exited
                .wait_for(Option::is_some)
                .await
                .map(|v| v.clone())
                .ok()
                .flatten()
        };
        let summary = match timeout {
            Some(t) => tokio::time::timeout(t, waited)
                .await
                .map_err(|_| SupervisorError::WaitTimeout(*handle))?,
            None => waited.await,
        };
        summary.ok_or_else(|| SupervisorError::Task("the exit signal was dropped".to_owned()))
    }

    /// Idempotent and shared: every caller gets the same report. Closes admission, terminates
    /// every live process concurrently, kills what survives the grace period, and confirms each
    /// exit (bounded). Output of finished processes stays readable afterwards.
    pub async fn shutdown(&self, grace: Duration) -> ShutdownReport {
        let inner = Arc::clone(&self.inner);
        let this = self.clone();
        self.inner
            .shutdown
            .get_or_init(|| async move {
                inner.closed.store(true, Ordering::SeqCst);
                // Every start admitted before `closed` was set has registered its process once
                // this is acquired; every later one sees `closed`.
                drop(inner.admission.write().await);
                let live: Vec<Arc<Proc>> = lock(&inner.procs)
                    .values()
                    .filter(|p| !p.is_terminal())
                    .cloned()
                    .collect();
                let mut set = tokio::task::JoinSet::new();
                for proc in live {
                    let (inner, this) = (Arc::clone(&inner), this.clone());
                    set.spawn(async move {
                        proc.set_cause(Cause::Shutdown);
                        this.request_stop(&proc, "shutdown").await;
                        let result = terminate(&inner, &proc, grace).await;
                        let state = proc.exited.borrow().as_ref().map(|s| s.state);
                        (proc.handle, result, state)
                    });
                }
                let mut report = ShutdownReport::default();
                while let Some(joined) = set.join_next().await {
                    match joined {
                        Ok((handle, Err(reason), _)) => {
                            report.teardown_failed.push((handle, reason))
                        }
                        Ok((handle, Ok(()), Some(State::Killed))) => report.killed.push(handle),
                        Ok((handle, Ok(()), _)) => report.terminated.push(handle),
                        Err(e) => warn!(error = %e, "shutdown task failed"),
                    }
                }
                // Join publications and drains, bounded: a stuck host service must not hang us.
                let tasks: Vec<_> = std::mem::take(&mut *lock(&inner.tasks));
                let bound = inner.config.kill_confirm;
                let _ = tokio::time::timeout(bound, async {
                    for task in tasks {
                        let _ = task.await;
                    }
                })
                .await;
                report.terminated.sort();
                report.killed.sort();
                report.teardown_failed.sort();
                report
            })
            .await
            .clone()
    }
}

/// Renders one spool read as a page: the one rendering shared by live processes, restored ones
/// and offline readers, so every surface shows the same bytes with the same cursor fields.
pub fn render_page(
    handle: &Handle,
    state: State,
    cursor: u64,
    read: &crate::spool::SpoolRead,
    max_bytes: usize,
    rendering: Rendering,
) -> OutputPage {
    let start = read.next_cursor - read.bytes.len() as u64;
    let (data, normalized, binary, next_cursor) = match rendering {
        Rendering::SafeText => {
            let r = render::safe_text_of_read(handle, read, max_bytes, state.is_terminal());
            (r.safe.text, r.safe.normalized, r.safe.binary, r.next_cursor)
        }
        Rendering::Base64 => {
            let binary = render::safe_text(&read.bytes, true).binary;
            (render::base64(&read.bytes), false, binary, read.next_cursor)
        }
    };
    let spans = read
        .spans
        .iter()
        .filter(|s| s.cursor < next_cursor)
        .map(|s| Span {
            len: s.len.min((next_cursor - s.cursor) as u32),
            ..*s
        })
        .collect();
    OutputPage {
        handle: *handle,
        cursor,
        next_cursor,
        retained_from: read.retained_from,
        total_bytes: read.total_bytes,
        gap: read.gap,
        cursor_ahead: false,
        rendering,
        data,
        normalized,
        binary,
        spans,
        artifact: ArtifactDescriptor::new(handle, start, next_cursor),
        state,
    }
}
