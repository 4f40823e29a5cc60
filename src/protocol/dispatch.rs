//! Runs validated requests against a [`Supervisor`]: the one implementation of every operation
//! that the daemon and the MCP server expose.
//!
//! Invariants:
//! - results and errors name processes by handle and output by cursor, never by path: nothing a
//!   client sees reveals where the root, the journal or a spool lives;
//! - a request that fails validation never reaches here, and one that fails here changes nothing
//!   except what its error says (a failed spawn is recorded as `failed` under the handle it names);
//! - `output` waits (when asked) on the process's output signal, never by polling, and a page it
//!   returns is exactly the supervisor's page, except for `cursor_ahead` pages, which carry no
//!   bytes and point `next_cursor` at the end of the output.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::{ApiError, ErrorCode, Request, RestartArgs, StartArgs};
use crate::lifecycle::event::{CaptureStatus, Deadline, ExitProof, ExitStatus, TreeMechanism};
use crate::lifecycle::{Handle, Manifest, ProcessRef, ReferenceError, State};

mod direct;
mod wait;

use crate::supervisor::{
    CaptureError, CaptureLimits, CaptureReceipt, Command, ListFilter, OutputPage, RestartError,
    StartError, Supervisor, SupervisorError, Tap, TerminalSummary,
};
use wait::OutputWait;

/// One process as `start` and `list` describe it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ProcessInfo {
    pub handle: Handle,
    pub state: State,
    pub pid: Option<u32>,
    /// The program and its arguments.
    pub command: Vec<String>,
    pub cwd: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub registered_unix_ms: u64,
    /// When the workload was spawned (`None`: it never ran, or not yet).
    pub running_unix_ms: Option<u64>,
    /// When its terminal result was recorded (`None` while it runs).
    pub ended_unix_ms: Option<u64>,
    /// Why it ended, as recorded with its terminal state ("exited", "stopped", "supervisor
    /// shut down", a spawn error, ...); `None` while it runs.
    pub reason: Option<String>,
    /// How many stops were requested (by `stop`, `shutdown`, a deadline or `run`'s Ctrl-C).
    pub stop_requests: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Output bytes retained: `retained_from..total_bytes` of the combined stream, as last
    /// recorded in the journal (a running process may have written more since).
    pub retained_from: u64,
    pub total_bytes: u64,
    /// Output bytes this process keeps (its own retention, or the supervisor's default when it
    /// started); older output is deleted in whole segments. `None` for a process recorded
    /// before retention was.
    pub retention_bytes: Option<u64>,
    /// Whether every output byte was captured, once terminal: "complete", or "incomplete: …" /
    /// "failed: …" with the reason (`None` while the process runs).
    pub capture: Option<String>,
    /// Which mechanism owns the tree (`None`: recorded before scopes were).
    pub mechanism: Option<TreeMechanism>,
    /// Whether the whole tree is known to be gone (`tree::assess`).
    pub ownership: Ownership,
    /// Set once the output was retired (removed by retention or `clean`): when and why.
    pub retired: Option<crate::lifecycle::manifest::Retirement>,
    /// The configured wall-clock limit (ms after the start), if any.
    pub timeout_ms: Option<u64>,
    /// The configured idle limit (ms without activity), if any.
    pub idle_timeout_ms: Option<u64>,
    /// Marked as waiting for human input (its idle limit is suspended).
    pub awaiting_input: bool,
    /// The deadline that fired ("wall" or "idle"), if one did; the process then ends
    /// `timed_out`.
    pub deadline: Option<Deadline>,
    /// The process this one restarts (`restart`), if any.
    pub restart_of: Option<Handle>,
    /// Its number on this root (1, 2, ...: the order of registration, never reused), which
    /// `resolve` and the CLI accept where a handle goes.
    pub number: u64,
    /// In a start's result only: how long the start waited for capacity, in milliseconds (left
    /// out when it did not wait).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_ms: Option<u64>,
}

/// What `start` returns: the process and, when the start asked for it (`yield_ms`), its output
/// so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct StartResult {
    #[serde(flatten)]
    pub process: ProcessInfo,
    /// With `yield_ms`: the page from cursor 0 after the wait (resume at its `next_cursor`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputPage>,
}

/// The ownership assessment of a process's tree, from its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(tag = "assessment", rename_all = "snake_case")]
pub enum Ownership {
    /// The process runs under this supervisor.
    Live,
    /// Something proved the whole tree gone.
    Exited { proof: ExitProof },
    /// Nothing proves the tree gone yet; the reason says what is missing.
    Unverified { reason: String },
}

impl Ownership {
    pub fn of(m: &Manifest) -> Ownership {
        if let Some(proof) = &m.released {
            return Ownership::Exited {
                proof: proof.clone(),
            };
        }
        if !m.state.is_terminal() {
            return Ownership::Live;
        }
        let reason = match &m.scope {
            None => format!(
                "{}, and no receipt of a guardian says the command never ran",
                crate::tree::assess::UNSCOPED
            ),
            Some(s) if s.guardian.is_none() => {
                "a process group cannot prove that no member left it".to_owned()
            }
            // What the receipt, the guardian and the cgroup say now, not a guess from the record.
            Some(s) => crate::tree::assess::evidence_note(s),
        };
        Ownership::Unverified { reason }
    }

    /// One word for a table: live, exited, unverified.
    pub fn word(&self) -> &'static str {
        match self {
            Ownership::Live => "live",
            Ownership::Exited { .. } => "exited",
            Ownership::Unverified { .. } => "unverified",
        }
    }
}

impl From<&Manifest> for ProcessInfo {
    fn from(m: &Manifest) -> Self {
        let (exit_code, signal) = split_exit(m.terminal.as_ref().map(|t| t.exit));
        let mut command = Vec::with_capacity(1 + m.command.args().len());
        command.push(m.command.program().to_owned());
        command.extend(m.command.args().map(str::to_owned));
        ProcessInfo {
            handle: m.handle,
            state: m.state,
            pid: m.pid,
            command,
            cwd: m.command.cwd().to_owned(),
            labels: m
                .command
                .labels()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            registered_unix_ms: m.registered_unix_ms,
            running_unix_ms: m.running_unix_ms,
            ended_unix_ms: m.terminal.as_ref().map(|t| t.at_unix_ms),
            reason: m.terminal.as_ref().map(|t| t.reason.clone()),
            stop_requests: m.stop_requests,
            exit_code,
            signal,
            retained_from: m.bounds.retained_from,
            total_bytes: m.bounds.total_bytes,
            retention_bytes: m.command.limits().output_retention_bytes,
            capture: m
                .terminal
                .as_ref()
                .map(|t| capture_text(&t.capture))
                .or_else(|| live_loss(&m.gaps)),
            mechanism: m.scope.as_ref().map(|s| s.mechanism),
            ownership: Ownership::of(m),
            retired: m.retired.clone(),
            timeout_ms: m.command.limits().wall_clock_ms,
            idle_timeout_ms: m.command.limits().idle_ms,
            awaiting_input: m.awaiting_input.is_some(),
            deadline: m.deadline.as_ref().map(|d| d.deadline),
            restart_of: m.restart_of,
            number: m.number,
            queued_ms: None,
        }
    }
}

fn split_exit(exit: Option<ExitStatus>) -> (Option<i32>, Option<i32>) {
    match exit {
        Some(ExitStatus::Code(c)) => (Some(c), None),
        Some(ExitStatus::Signal(s)) => (None, Some(s)),
        Some(ExitStatus::Unknown) | None => (None, None),
    }
}

/// A live process whose output was lost (the gaps recorded so far): already incomplete.
fn live_loss(gaps: &[crate::spool::Gap]) -> Option<String> {
    crate::spool::loss::summary(gaps).map(|lost| format!("incomplete: {lost}"))
}

/// A capture status as the surfaces say it: "complete", or "incomplete: …" / "failed: …".
fn capture_text(capture: &CaptureStatus) -> String {
    match capture {
        CaptureStatus::Complete => "complete".to_owned(),
        CaptureStatus::Incomplete(why) => format!("incomplete: {why}"),
        CaptureStatus::Failed(why) => format!("failed: {why}"),
    }
}

/// How a process ended, as `wait` and `stop` report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct WaitResult {
    pub handle: Handle,
    pub state: State,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub retained_from: u64,
    pub total_bytes: u64,
    /// Whether every output byte was captured: "complete", or a reason it is not.
    pub capture: String,
    /// False when the journal failed to record the end (`persist_error` says why).
    pub persisted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persist_error: Option<String>,
}

impl WaitResult {
    fn new(handle: Handle, summary: TerminalSummary) -> Self {
        let (exit_code, signal) = split_exit(Some(summary.exit));
        let capture = capture_text(&summary.capture);
        WaitResult {
            handle,
            state: summary.state,
            exit_code,
            signal,
            retained_from: summary.bounds.retained_from,
            total_bytes: summary.bounds.total_bytes,
            capture,
            persisted: summary.persist_error.is_none(),
            persist_error: summary.persist_error,
        }
    }
}

/// What `input` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct InputResult {
    pub handle: Handle,
    pub bytes_written: u64,
    pub closed: bool,
}

/// What `list` returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ListResult {
    /// Oldest first.
    pub processes: Vec<ProcessInfo>,
}

/// What `resize` returns: the terminal's size now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ResizeResult {
    pub handle: Handle,
    pub rows: u16,
    pub cols: u16,
}

/// What `interrupt` returns: the signal sent to the process's group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct InterruptResult {
    pub handle: Handle,
    /// Always "SIGINT".
    pub signalled: String,
}

/// Who is answering.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HelloResult {
    pub protocol: u32,
    pub version: &'static str,
    pub pid: u32,
    pub live: usize,
    /// The pause gate is closed: `start` is refused until `resume`.
    pub paused: bool,
    /// What the server's open found damaged in the root's journal (one line); absent when
    /// nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damage: Option<String>,
}

/// The shared implementation of every operation.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    supervisor: Supervisor,
    default_cwd: PathBuf,
    owner: String,
    /// Whether a start that gives neither `client_env` nor `inherit_env` starts from the
    /// server's environment (a server that is the client's own process: `run`, `mcp`) or is
    /// refused (the daemon, whose environment is not the client's).
    inherit_by_default: bool,
}

impl Dispatcher {
    /// `default_cwd` is where `start` runs a command that names no working directory; `owner`
    /// is recorded as each started process's owner (e.g. "uid:1000 via socket").
    pub fn new(supervisor: Supervisor, default_cwd: PathBuf, owner: impl Into<String>) -> Self {
        Dispatcher {
            supervisor,
            default_cwd,
            owner: owner.into(),
            inherit_by_default: false,
        }
    }

    /// A dispatcher whose starts begin from the server's own environment unless they give
    /// `client_env`: for a server that runs as the client's own process (`run`, `mcp`), whose
    /// environment is the client's.
    pub fn inheriting_env(mut self) -> Self {
        self.inherit_by_default = true;
        self
    }

    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    /// Runs one request; the result is the JSON the protocol documents for its operation.
    pub async fn dispatch(&self, request: Request) -> Result<Value, ApiError> {
        let sup = &self.supervisor;
        match request {
            Request::Hello => json(&self.hello()),
            Request::Start(args) => json(&self.start_yielding(args).await?),
            Request::Restart(args) => json(&self.restart(args).await?),
            Request::Resolve(reference) => json(&self.process_info(&reference)?),
            Request::List { state, label } => json(&self.list(&ListFilter { state, label })),
            Request::Manifest(reference) => json(&self.manifest(&reference)?),
            Request::Output {
                handle,
                cursor,
                max_bytes,
                rendering,
                wait_ms,
                min_bytes,
                settle_ms,
                tail_lines,
            } => {
                let handle = self.resolve(&handle)?;
                let max = usize::try_from(max_bytes).unwrap_or(usize::MAX);
                let wait = OutputWait::for_output(wait_ms, min_bytes, settle_ms);
                let page = self.output(handle, cursor, max, rendering, wait, tail_lines);
                json(&page.await?)
            }
            Request::Input {
                handle,
                data,
                close,
            } => json(&self.input(&handle, &data, close).await?),
            Request::Resize { handle, rows, cols } => {
                json(&self.resize(&handle, rows, cols).await?)
            }
            Request::Stop { handle, grace_ms } => {
                json(&self.stop(self.resolve(&handle)?, grace_ms).await?)
            }
            Request::Interrupt(handle) => json(&self.signal_interrupt(&handle).await?),
            Request::Wait { handle, timeout_ms } => {
                json(&self.wait(self.resolve(&handle)?, timeout_ms).await?)
            }
            Request::Shutdown { grace_ms } => {
                json(&sup.shutdown(Duration::from_millis(grace_ms)).await)
            }
            Request::Clean {
                older_than_ms,
                dry_run,
            } => json(&self.clean(older_than_ms, dry_run).await?),
            Request::Admission => json(&sup.admission().await.map_err(api)?),
            Request::AdmissionLimit { max_concurrent } => {
                let n = max_concurrent.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
                json(&sup.set_admission_limit(n, &self.owner).await.map_err(api)?)
            }
            Request::Pause { reason } => json(&sup.pause(&self.owner, &reason).await.map_err(api)?),
            Request::Resume { reason } => {
                json(&sup.resume(&self.owner, &reason).await.map_err(api)?)
            }
            Request::Capture {
                start,
                max_bytes,
                rendering,
            } => json(&self.capture(start, max_bytes, rendering).await?),
            Request::AwaitInput { handle, waiting } => json(
                &sup.await_input(&self.resolve(&handle)?, waiting, &self.owner)
                    .await
                    .map_err(api)?,
            ),
        }
    }

    /// The process `reference` names (a handle, a number, a name), as `resolve` finds it.
    pub fn resolve(&self, reference: &ProcessRef) -> Result<Handle, ApiError> {
        match self.supervisor.resolve(reference) {
            Ok(m) => Ok(m.handle),
            Err(ReferenceError::UnknownHandle(handle)) => Err(unknown(&handle)),
            Err(e) => Err(ApiError::new(ErrorCode::UnknownHandle, e.to_string())),
        }
    }

    /// `stop`, typed (for surfaces that do not speak JSON, such as `run`).
    pub async fn stop(&self, handle: Handle, grace_ms: u64) -> Result<WaitResult, ApiError> {
        let summary = self
            .supervisor
            .stop(&handle, Duration::from_millis(grace_ms))
            .await
            .map_err(api)?;
        Ok(WaitResult::new(handle, summary))
    }

    /// `interrupt`, typed.
    pub async fn interrupt(&self, handle: Handle) -> Result<(), ApiError> {
        self.supervisor.interrupt(&handle).await.map_err(api)
    }

    /// `wait`, typed.
    pub async fn wait(
        &self,
        handle: Handle,
        timeout_ms: Option<u64>,
    ) -> Result<WaitResult, ApiError> {
        let summary = self
            .supervisor
            .wait(&handle, timeout_ms.map(Duration::from_millis))
            .await
            .map_err(api)?;
        Ok(WaitResult::new(handle, summary))
    }

    /// `output` as raw bytes with their spans, waiting up to `wait_ms` for bytes past `cursor`
    /// as `output` does: for surfaces that stream the bytes as they are (`run`).
    pub async fn output_raw(
        &self,
        handle: Handle,
        cursor: u64,
        max_bytes: usize,
        wait_ms: u64,
    ) -> Result<crate::spool::SpoolRead, ApiError> {
        let sup = &self.supervisor;
        let deadline = Instant::now() + Duration::from_millis(wait_ms);
        loop {
            let read = sup
                .output_raw(&handle, cursor, max_bytes)
                .await
                .map_err(api)?;
            let left = deadline.saturating_duration_since(Instant::now());
            if !read.bytes.is_empty() || read.skipped.is_some() || left.is_zero() {
                return Ok(read);
            }
            if sup.manifest(&handle).is_some_and(|m| m.state.is_terminal()) {
                return Ok(read);
            }
            if tokio::time::timeout(left, sup.output_changed(&handle, read.total_bytes))
                .await
                .is_err()
            {
                return Ok(read);
            }
        }
    }

    /// `start` as the protocol answers it: the process, and with `yield_ms` its output so far
    /// (read after waiting as [`OutputWait::for_yield`] says) and its state after the wait.
    async fn start_yielding(&self, args: StartArgs) -> Result<StartResult, ApiError> {
        let page_wait = args.yield_ms.map(|ms| {
            let bytes = args.max_bytes.unwrap_or(super::OUTPUT_BYTES_DEFAULT);
            (OutputWait::for_yield(ms, args.settle_ms), bytes)
        });
        let process = self.start(args).await?;
        let Some((wait, max_bytes)) = page_wait else {
            return Ok(StartResult {
                process,
                output: None,
            });
        };
        let handle = process.handle;
        let max = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        // The process started whatever the read does: a failed read leaves out the page, not
        // the handle.
        let page = self
            .output(
                handle,
                0,
                max,
                crate::supervisor::Rendering::SafeText,
                wait,
                None,
            )
            .await
            .ok();
        if page.as_ref().is_some_and(|p| p.state.is_terminal()) {
            // The terminal result is recorded with the state: wait returns it at once.
            let _ = self.supervisor.wait(&handle, None).await;
        }
        let process = self
            .supervisor
            .manifest(&handle)
            .map_or(process, |m| ProcessInfo::from(&m));
        Ok(StartResult {
            process,
            output: page,
        })
    }

    /// `start`, typed: the one place a `StartArgs` becomes a supervised process.
    pub async fn start(&self, args: StartArgs) -> Result<ProcessInfo, ApiError> {
        self.start_with(args, None).await
    }

    /// `start` with a live copy of the output for the caller (`run`): the same validation and
    /// start as every surface's, with `tap` attached to the prepared process. The process
    /// waits while the tap's consumer is behind; see [`Tap`].
    pub async fn start_tapped(&self, args: StartArgs, tap: Tap) -> Result<ProcessInfo, ApiError> {
        self.start_with(args, Some(tap)).await
    }

    async fn start_with(&self, args: StartArgs, tap: Option<Tap>) -> Result<ProcessInfo, ApiError> {
        let command = self.command_of(args)?;
        self.launch(command, tap).await
    }

    /// `capture`, typed: the command built as `start` builds it, run to completion, and its
    /// receipt with each stream's first `max_bytes` bytes (all of them when complete).
    pub async fn capture(
        &self,
        args: StartArgs,
        max_bytes: u64,
        rendering: crate::supervisor::Rendering,
    ) -> Result<CaptureReceipt, ApiError> {
        let sup = &self.supervisor;
        let stream_bytes = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let prepared = sup
            .prepare(self.command_of(args)?)
            .map_err(|e| ApiError::new(ErrorCode::BadArgs, e.to_string()))?;
        let result = sup
            .capture(prepared, CaptureLimits { stream_bytes })
            .await
            .map_err(|e| match e {
                CaptureError::Start(e) => start_error(e),
                CaptureError::Wait { error, .. } => api(error),
                e => ApiError::new(ErrorCode::BadArgs, e.to_string()),
            })?;
        Ok(result.receipt(stream_bytes, rendering))
    }

    /// A `StartArgs` as a command: the one place its fields become a [`Command`].
    fn command_of(&self, args: StartArgs) -> Result<Command, ApiError> {
        let mut parts = args.command.into_iter();
        let program = parts.next().unwrap_or_default();
        let cwd = args
            .cwd
            .map_or_else(|| self.default_cwd.clone(), PathBuf::from);
        let mut command = Command::new(program)
            .args(parts)
            .cwd(cwd)
            .owner(self.owner.clone())
            .login_shell_overlay(args.login_shell_overlay);
        command = self.base_env(command, args.client_env, args.inherit_env)?;
        for (k, v) in args.env {
            command = command.env(k, v);
        }
        for (k, v) in args.env_persist {
            command = command.env_persisted(k, v);
        }
        for (k, v) in args.labels {
            command = command.label(k, v);
        }
        if let Some(name) = args.name {
            command = command.name(name);
        }
        if let Some(ms) = args.timeout_ms {
            command = command.timeout(Duration::from_millis(ms));
        }
        if let Some(ms) = args.idle_timeout_ms {
            command = command.idle_timeout(Duration::from_millis(ms));
        }
        if let Some(bytes) = args.retention_bytes {
            command = command.output_retention(bytes);
        }
        // 0 fails at once, as leaving it out does.
        if let Some(ms) = args.queue_ms.filter(|ms| *ms > 0) {
            command = command.wait_for_capacity(Duration::from_millis(ms));
        }
        if let Some(pty) = args.pty {
            command = command.pty(pty.rows, pty.cols);
        }
        Ok(command)
    }

    /// The environment a command starts from: the client's, or the server's own when asked
    /// for (or when this dispatcher's host runs commands as itself: `run`, MCP).
    fn base_env(
        &self,
        command: Command,
        client_env: Option<BTreeMap<String, String>>,
        inherit_env: bool,
    ) -> Result<Command, ApiError> {
        match client_env {
            Some(vars) => Ok(command.client_env(vars)),
            None if inherit_env || self.inherit_by_default => Ok(command),
            None => Err(ApiError::new(
                ErrorCode::BadArgs,
                "give client_env (the environment to run the command in) or \
                 inherit_env: true (the server's own): the server's environment is not \
                 passed on unless asked for"
                    .to_owned(),
            )),
        }
    }

    /// `restart`: the recorded command of a finished process, with what the journal does not
    /// keep given again, started like any other.
    pub async fn restart(&self, args: RestartArgs) -> Result<ProcessInfo, ApiError> {
        let reference: ProcessRef = args
            .handle
            .parse()
            .map_err(|e: ReferenceError| ApiError::new(ErrorCode::BadArgs, e.to_string()))?;
        let handle = self.resolve(&reference)?;
        let mut command = self
            .supervisor
            .restart_command(&handle, &args.env)
            .map_err(|e| restart_error(&handle, e))?;
        command = self.base_env(command, args.client_env, args.inherit_env)?;
        if let Some(ms) = args.queue_ms.filter(|ms| *ms > 0) {
            command = command.wait_for_capacity(Duration::from_millis(ms));
        }
        if let Some(pty) = args.pty {
            command = command.pty(pty.rows, pty.cols);
        }
        self.launch(command, None).await
    }

    /// Prepares and starts `command` (with `tap`), as every surface's start does.
    async fn launch(&self, command: Command, tap: Option<Tap>) -> Result<ProcessInfo, ApiError> {
        let sup = &self.supervisor;
        let mut prepared = sup
            .prepare(command)
            .map_err(|e| ApiError::new(ErrorCode::BadArgs, e.to_string()))?;
        if let Some(tap) = tap {
            prepared = prepared.with_tap(tap);
        }
        match sup.start_reporting(prepared).await {
            Ok(started) => {
                let handle = started.handle;
                let mut info = sup
                    .manifest(&handle)
                    .map(|m| ProcessInfo::from(&m))
                    .ok_or_else(|| unknown(&handle))?;
                info.queued_ms = started
                    .queued
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                Ok(info)
            }
            Err(e) => Err(start_error(e)),
        }
    }

    pub(super) async fn cursor_ahead_page(
        &self,
        handle: Handle,
        cursor: u64,
        total_bytes: u64,
        rendering: crate::supervisor::Rendering,
    ) -> Result<OutputPage, ApiError> {
        // The end of the output as of the error: read nothing there to learn the window.
        let mut page = self
            .supervisor
            .output(&handle, total_bytes, 1, rendering)
            .await
            .map_err(api)?;
        page.cursor = cursor;
        page.next_cursor = total_bytes;
        page.total_bytes = total_bytes.max(page.total_bytes);
        page.cursor_ahead = true;
        page.gap = false;
        page.skipped = None;
        page.data.clear();
        page.normalized = false;
        page.binary = false;
        page.spans.clear();
        page.artifact =
            crate::spool::render::ArtifactDescriptor::new(&handle, total_bytes, total_bytes);
        Ok(page)
    }
}

/// The client-facing form of a start that did not start (`start`, `restart`, `capture`).
fn start_error(error: StartError) -> ApiError {
    match error {
        StartError::Refused {
            reason: reason @ crate::supervisor::Refusal::NameTaken { holder, .. },
            ..
        } => ApiError {
            code: ErrorCode::NameTaken,
            message: format!("start refused: {}", refusal(&reason)),
            handle: Some(holder.to_string()),
            spawn: None,
        },
        // The live-process bound is capacity like admission's: a start that may wait (the
        // command line's and the MCP tools' default) asks again with `queue_ms` and waits in
        // the same queue, instead of failing while a slot frees in milliseconds.
        StartError::Refused {
            reason: reason @ crate::supervisor::Refusal::AtCapacity { .. },
            ..
        } => ApiError::new(
            ErrorCode::Capacity,
            format!(
                "start refused: no capacity: {}; see `admission`, or wait with queue_ms (start --queue)",
                refusal(&reason)
            ),
        ),
        StartError::Refused { reason, .. } => ApiError::new(
            ErrorCode::Refused,
            format!("start refused: {}", refusal(&reason)),
        ),
        e @ (StartError::Capacity { .. } | StartError::CapacityTimeout { .. }) => ApiError::new(
            ErrorCode::Capacity,
            format!("start refused: {e}; see `admission`, or wait with queue_ms (start --queue)"),
        ),
        StartError::WorkingDirectory { path, .. } => ApiError::new(
            ErrorCode::BadArgs,
            format!(
                "working directory {} does not exist or is not a directory; nothing was started",
                truncate_path(&path)
            ),
        ),
        StartError::Spawn {
            handle,
            message,
            failure,
        } => ApiError {
            code: ErrorCode::SpawnFailed,
            message: format!("{message} (recorded as {handle}, failed)"),
            handle: Some(handle.to_string()),
            spawn: Some(failure),
        },
        e => ApiError::new(ErrorCode::Internal, e.to_string()),
    }
}

fn refusal(reason: &crate::supervisor::Refusal) -> String {
    match reason {
        crate::supervisor::Refusal::ShuttingDown => "the supervisor is shutting down".to_owned(),
        crate::supervisor::Refusal::Paused => {
            "the supervisor is paused: new starts are refused until `resume`".to_owned()
        }
        crate::supervisor::Refusal::AtCapacity { live, max } => {
            format!(
                "{live} processes are live, the maximum is {max} (the live-process bound: \
                 LIVE_PROCESSES_DEFAULT or --max-live, capped by the descriptor budget)"
            )
        }
        crate::supervisor::Refusal::QueueFull { queued, max } => {
            format!(
                "{queued} starts already wait for capacity, the most that may (ADMISSION_QUEUE_MAX {max})"
            )
        }
        crate::supervisor::Refusal::NameTaken { name, holder } => {
            format!(
                "the live process {holder} is named {name:?}; names are unique among live processes"
            )
        }
    }
}

fn json<T: Serialize>(value: &T) -> Result<Value, ApiError> {
    serde_json::to_value(value).map_err(|e| {
        ApiError::new(
            ErrorCode::Internal,
            format!("cannot encode the result: {e}"),
        )
    })
}

/// The client-facing form of a refused restart.
fn restart_error(handle: &Handle, error: RestartError) -> ApiError {
    let code = match &error {
        RestartError::UnknownHandle(_) => return unknown(handle),
        RestartError::NotFinished { .. } => ErrorCode::NotFinished,
        RestartError::Environment { .. } => ErrorCode::MissingEnv,
        RestartError::Prepare { .. } => ErrorCode::BadArgs,
        _ => ErrorCode::Internal,
    };
    ApiError {
        code,
        message: error.to_string(),
        handle: Some(handle.to_string()),
        spawn: None,
    }
}

fn unknown(handle: &Handle) -> ApiError {
    ApiError {
        code: ErrorCode::UnknownHandle,
        message: format!("no process with handle {handle}"),
        handle: Some(handle.to_string()),
        spawn: None,
    }
}

/// The client-facing form of a supervisor error.
pub fn api(error: SupervisorError) -> ApiError {
    let (code, handle) = match &error {
        SupervisorError::UnknownHandle(h) => (ErrorCode::UnknownHandle, Some(*h)),
        SupervisorError::NotRunning(h) => (ErrorCode::NotRunning, Some(*h)),
        SupervisorError::InputClosed(h) | SupervisorError::Input { handle: h, .. } => {
            (ErrorCode::InputClosed, Some(*h))
        }
        SupervisorError::WaitTimeout(h) => (ErrorCode::WaitTimeout, Some(*h)),
        SupervisorError::TeardownFailed { handle, .. } => {
            (ErrorCode::TeardownFailed, Some(*handle))
        }
        SupervisorError::CursorAhead { .. } => (ErrorCode::BadArgs, None),
        SupervisorError::Output { handle, .. } => (ErrorCode::Internal, Some(*handle)),
        SupervisorError::Retired { handle, .. } => (ErrorCode::Retired, Some(*handle)),
        SupervisorError::NoTerminal(h) => (ErrorCode::BadArgs, Some(*h)),
        SupervisorError::Resize { handle, .. } => (ErrorCode::Internal, Some(*handle)),
        _ => (ErrorCode::Internal, None),
    };
    ApiError {
        code,
        message: error.to_string(),
        handle: handle.map(|h| h.to_string()),
        spawn: None,
    }
}

/// A client's own path in an error, kept short.
fn truncate_path(path: &str) -> String {
    const MAX: usize = 256;
    if path.chars().count() <= MAX {
        path.to_owned()
    } else {
        let mut short: String = path.chars().take(MAX).collect();
        short.push('…');
        short
    }
}
