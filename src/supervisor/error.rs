//! The supervisor's errors at its boundary: why an open failed ([`SupervisorError`]), why a
//! start was refused or failed ([`Refusal`], [`StartError`], [`SpawnFailure`]).

use std::time::Duration;

use serde::Serialize;

use super::command::PreparedProcess;
#[cfg(doc)]
use super::{Command, SupervisorConfig};
use crate::admission::{self, Decision};
use crate::lifecycle::{Handle, LifecycleError};
#[cfg(doc)]
use crate::limits;

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
    /// The [`SupervisorConfig`] cannot be used; the message names the field.
    #[error("invalid supervisor configuration: {0}")]
    Config(String),
    /// A bound of [`crate::limits`] was reached; nothing already acknowledged was dropped.
    #[error("the bound {bound} ({limit}) is reached; try again later")]
    Bound { bound: &'static str, limit: usize },
    /// The process does not run under a terminal (it was not launched with `Command::pty`).
    #[error("process {0} has no terminal")]
    NoTerminal(Handle),
    /// The root's journal is damaged and [`SupervisorConfig::strict`] refuses to open it; the
    /// message says what recovery found. Nothing was reconciled or started.
    #[error("{0}; refusing to open it (strict)")]
    Damaged(String),
    /// The terminal could not be resized (or the resize recorded); its size is as it was, or,
    /// if only the record failed, the new one unrecorded.
    #[error("resizing the terminal of {handle}: {message}")]
    Resize { handle: Handle, message: String },
    /// The output was retired (removed by retention or `clean`); the manifest stays.
    #[error("the output of {handle} was retired ({reason})")]
    Retired {
        handle: Handle,
        reason: String,
        at_unix_ms: u64,
    },
}

/// Why a start was refused; the prepared process comes back with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    ShuttingDown,
    /// The pause gate is closed (`Supervisor::pause`); running processes go on.
    Paused,
    /// The live-process bound ([`SupervisorConfig::max_live`], capped by the descriptor budget).
    AtCapacity {
        live: usize,
        max: usize,
    },
    /// The start asked to wait for capacity, but [`limits::ADMISSION_QUEUE_MAX`] starts already
    /// wait.
    QueueFull {
        queued: usize,
        max: usize,
    },
    /// A live process already has this name ([`Command::name`]); names are unique among live
    /// processes so that one names one.
    NameTaken {
        name: String,
        holder: Handle,
    },
}

/// A start that began: its handle, and how long it waited for capacity (`None`: it did not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    pub handle: Handle,
    pub queued: Option<Duration>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error("start refused: {reason:?}")]
    Refused {
        prepared: PreparedProcess,
        reason: Refusal,
    },
    /// Admission found no capacity now and the start did not ask to wait for it; the decision
    /// says why (its inputs: cores, available memory, share, floor, reservations).
    #[error("no capacity: {}", admission::describe(decision))]
    Capacity {
        prepared: PreparedProcess,
        decision: Box<Decision>,
    },
    /// The start waited `waited` for capacity (FIFO) and none came before its deadline; the
    /// decision is the last one made for it.
    #[error("no capacity within {waited:?}: {}", admission::describe(decision))]
    CapacityTimeout {
        prepared: PreparedProcess,
        decision: Box<Decision>,
        waited: Duration,
    },
    /// The process could not be spawned; it is recorded as `failed` under `handle`.
    #[error("{handle} failed to start: {message}")]
    Spawn {
        handle: Handle,
        message: String,
        /// Which kind of failure, for a caller that answers with an exit status (126, 127).
        failure: SpawnFailure,
    },
    /// The start task ended without an answer (it panicked); what it recorded, the journal has.
    #[error("start failed: {0}")]
    Task(String),
    /// Nothing could be recorded (the journal failed); nothing was spawned.
    #[error("start not recorded: {error}")]
    Journal {
        prepared: PreparedProcess,
        error: String,
    },
    /// The working directory does not exist (or is not a directory): checked before anything is
    /// journaled, so no record claims the process ran.
    #[error("working directory {path} does not exist or is not a directory")]
    WorkingDirectory {
        prepared: PreparedProcess,
        path: String,
    },
}

/// Why a spawn failed, as far as a caller tells the cases apart: the shell's exit statuses 127
/// (not found) and 126 (found, but it cannot be executed) mean these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SpawnFailure {
    /// No such program (not on the search path, or no such file).
    NotFound,
    /// The program exists but cannot be executed (no execute permission, not an executable
    /// format, a directory).
    NotExecutable,
    /// Anything else (a resource, the guardian, the registration).
    Other,
}

impl SpawnFailure {
    pub(crate) fn of(error: &crate::tree::SpawnError) -> SpawnFailure {
        match error {
            crate::tree::SpawnError::NotFound(_) => SpawnFailure::NotFound,
            crate::tree::SpawnError::NotExecutable(_) => SpawnFailure::NotExecutable,
            _ => SpawnFailure::Other,
        }
    }
}
