//! What to run: the builder, the single-use prepared process, and the workspace lease.
//!
//! Invariant: a [`PreparedProcess`] is consumed by `start`; it is neither `Clone` nor `Copy`, so a
//! prepared launch (and the lease and tap it carries) can be started at most once. A refused
//! start hands it back whole.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::tap::Tap;
use crate::environment::{Base, EnvOverride};
use crate::lifecycle::Handle;
use crate::lifecycle::event::{CommandSpecV2, EnvOverlay, EnvPolicy, Limits};
use crate::limits;
use crate::spool::SpoolOptions;
use crate::tree::PtySize;

/// A host-held resource (a workspace, a worktree) that a process uses; released exactly once,
/// when the process is terminal, before its completion is notified.
pub trait Lease: Send + Sync + std::fmt::Debug {
    fn release(self: Box<Self>);
}

/// A command to supervise. The working directory is required: nothing is resolved against the
/// supervisor's own working directory, and it must exist when the process starts (else the start
/// fails with [`super::StartError::WorkingDirectory`] before anything is journaled). The
/// environment is built by `crate::environment`: a base (the supervisor's own by default),
/// Git redirection removed, the login-shell overlay when asked for, then the overrides. An
/// override's value is journaled only when set with [`Command::env_persisted`].
#[derive(Debug, Clone)]
pub struct Command {
    program: String,
    args: Vec<String>,
    cwd: Option<PathBuf>,
    env: Vec<EnvOverride>,
    base: Base,
    overlay: bool,
    labels: BTreeMap<String, String>,
    timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    retention: Option<u64>,
    owner: String,
    capacity_wait: Option<Duration>,
    pty: Option<PtySize>,
    /// The earlier process this one restarts; set only by `Supervisor::restart_command`,
    /// which checked that the journal knows it (replay rejects a link to an unknown handle).
    restart_of: Option<Handle>,
}

impl Command {
    pub fn new(program: impl Into<String>) -> Self {
        Command {
            program: program.into(),
            args: Vec::new(),
            cwd: None,
            env: Vec::new(),
            base: Base::Inherited,
            overlay: false,
            labels: BTreeMap::new(),
            timeout: None,
            idle_timeout: None,
            retention: None,
            owner: String::new(),
            capacity_wait: None,
            pty: None,
            restart_of: None,
        }
    }
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }
    /// Sets a variable on top of the launch environment. Its value is not persisted: the journal
    /// keeps its name only, and a restart must be given the value again.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push(EnvOverride {
            name: key.into(),
            value: value.into(),
            persist: false,
        });
        self
    }
    /// [`Command::env`] for a value the journal may keep (no secret in it).
    pub fn env_persisted(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push(EnvOverride {
            name: key.into(),
            value: value.into(),
            persist: true,
        });
        self
    }
    /// Starts the environment from exactly these variables instead of the supervisor's own.
    pub fn env_base<K: Into<std::ffi::OsString>, V: Into<std::ffi::OsString>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.base = Base::Explicit(
            vars.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        );
        self
    }
    /// Starts the environment from a client's (recorded as base `client`): what a daemon does
    /// with the environment `procjournal start` sent.
    pub fn client_env<K: Into<std::ffi::OsString>, V: Into<std::ffi::OsString>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.base = Base::Client(
            vars.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        );
        self
    }
    /// Overlays the PATH-like variables (`environment::OVERLAY_NAMES`) a login shell sets, as
    /// the supervisor captured them at open (`SupervisorConfig::login_shell`); without a capture
    /// the environment is unchanged and the policy records why.
    pub fn login_shell_overlay(mut self, on: bool) -> Self {
        self.overlay = on;
        self
    }
    /// Names the process (the label [`crate::lifecycle::NAME_LABEL`]), so that people can type
    /// the name where a handle goes. A name is unique among live processes: a start whose name
    /// a live process holds is refused ([`super::Refusal::NameTaken`]). `prepare` refuses a
    /// name that the handle grammar does not accept (`lifecycle::reference::valid_name`).
    pub fn name(self, name: impl Into<String>) -> Self {
        self.label(crate::lifecycle::NAME_LABEL, name)
    }
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }
    /// Wall-clock limit: the process is terminated (then killed) and ends `timed_out`.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }
    /// Idle limit: once the process shows no activity (output, input written to it, a signal
    /// sent to it) for this long, and is not marked as waiting for human input
    /// (`Supervisor::await_input`), its tree is terminated (then killed) and it ends
    /// `timed_out`. Before any activity the idle clock runs from the start.
    pub fn idle_timeout(mut self, limit: Duration) -> Self {
        self.idle_timeout = Some(limit);
        self
    }
    /// Output bytes this process keeps (its spool's retention) instead of the supervisor's
    /// default (`SupervisorConfig::spool`): older output is deleted in whole segments, and a
    /// read of it reports a gap. At least one spool segment, at most
    /// [`limits::RETENTION_BYTES_MAX`]; `prepare` refuses anything else.
    pub fn output_retention(mut self, bytes: u64) -> Self {
        self.retention = Some(bytes);
        self
    }
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }
    /// When admission finds no capacity, wait up to `limit` for it in a FIFO queue instead of
    /// failing at once (the default: the caller learns why at once, from the error's decision,
    /// and nothing blocks unless asked to). At most [`limits::ADMISSION_QUEUE_WAIT_MS_MAX`].
    /// Not recorded in the journal: it concerns this start, not the process.
    pub fn wait_for_capacity(mut self, limit: Duration) -> Self {
        self.capacity_wait = Some(limit);
        self
    }
    /// Runs the command under a terminal of `rows` x `cols` instead of pipes: the terminal's
    /// slave is its standard input, output and error and its controlling terminal (it leads a
    /// session of its own), and the master side is drained into its spool as one stream,
    /// `terminal`. Input goes to the terminal; the size can be changed while it runs
    /// (`Supervisor::resize`). `prepare` refuses a size of 0.
    pub fn pty(mut self, rows: u16, cols: u16) -> Self {
        self.pty = Some(PtySize { rows, cols });
        self
    }

    /// The process this command restarts, if it came from `Supervisor::restart_command`.
    pub fn restart_of(&self) -> Option<Handle> {
        self.restart_of
    }

    /// A restart's command: the recorded overrides (persistence as recorded) and the link to
    /// the process it restarts.
    pub(crate) fn restarting(mut self, old: Handle, overrides: Vec<EnvOverride>) -> Self {
        self.env = overrides;
        self.restart_of = Some(old);
        self
    }
}

/// Why a command cannot even be prepared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    #[error("the program name is empty")]
    EmptyProgram,
    #[error("a working directory is required")]
    NoWorkingDirectory,
    #[error("the working directory {0:?} must be an absolute path")]
    RelativeWorkingDirectory(PathBuf),
    #[error("{0:?} is not valid UTF-8")]
    NotUtf8(PathBuf),
    /// An environment variable name that is empty or holds `=` or NUL.
    #[error("{0:?} is not an environment variable name")]
    BadEnvName(String),
    /// The same variable overridden twice (which value, and whether it is persisted, would be
    /// ambiguous).
    #[error("environment variable {0} is set twice")]
    DuplicateEnv(String),
    /// The output retention asked for is out of range: below one spool segment (retention
    /// deletes whole segments and never the active one) or above
    /// [`limits::RETENTION_BYTES_MAX`].
    #[error("output retention {bytes} bytes is out of range ({min} to {max})")]
    Retention { bytes: u64, min: u64, max: u64 },
    /// The wait for capacity asked for is longer than
    /// [`limits::ADMISSION_QUEUE_WAIT_MS_MAX`].
    #[error("a wait for capacity of {ms} ms is out of range (at most {max})")]
    CapacityWait { ms: u64, max: u64 },
    /// A terminal needs at least one row and one column.
    #[error("terminal size {rows}x{cols} is out of range (at least 1x1)")]
    TerminalSize { rows: u16, cols: u16 },
    /// The name (label `name`) is not one people can type where a handle goes.
    #[error(
        "{0:?} is not a process name: 1 to 64 ASCII letters, digits, '.', '_' or '-', starting with a letter or '_' (not 'p-')"
    )]
    BadName(String),
}

/// A validated, single-use launch.
#[derive(Debug)]
pub struct PreparedProcess {
    /// The command as the journal will record it: withheld values already `None`; its
    /// `env_policy` is filled in at launch, when the environment is built.
    pub(crate) spec: Box<CommandSpecV2>,
    pub(crate) env: Box<LaunchEnvRequest>,
    pub(crate) lease: Option<Box<dyn Lease>>,
    /// Boxed: a refused start hands its prepared process back inside its error.
    pub(crate) tap: Option<Box<Tap>>,
    /// How long this start may wait for capacity (`None`: fail at once).
    pub(crate) capacity_wait: Option<Duration>,
    /// The launch's terminal, if it runs under one.
    pub(crate) pty: Option<PtySize>,
    /// The process this one restarts (recorded in its `RegisteredV2`).
    pub(crate) restart_of: Option<Handle>,
    /// Stop the process if its caller is gone before the start is answered (a capture's: it
    /// owns its process from the call on, not only once it has the handle).
    pub(crate) stop_if_unanswered: bool,
}

/// What the launch builds the environment from (values included; never journaled whole).
#[derive(Debug, Clone)]
pub(crate) struct LaunchEnvRequest {
    pub overrides: Vec<EnvOverride>,
    pub base: Base,
    pub overlay: bool,
}

impl PreparedProcess {
    /// What a launched process keeps of its start for the rest of its life: the capacity it
    /// holds and its tap. The rest (its command and environment, the environment's values
    /// included) is dropped here: the journal has the command, the process its environment,
    /// and a process task lives as long as its process.
    pub(crate) fn into_lease_and_tap(self) -> (Option<Box<dyn Lease>>, Option<Tap>) {
        (self.lease, self.tap.map(|tap| *tap))
    }

    /// The command as the journal will record it (its policy once launched).
    pub fn spec(&self) -> &CommandSpecV2 {
        &self.spec
    }

    /// How long this start may wait for capacity (`None`: it fails at once without it).
    pub fn capacity_wait(&self) -> Option<Duration> {
        self.capacity_wait
    }

    /// The terminal the process will run under, if any.
    pub fn pty(&self) -> Option<PtySize> {
        self.pty
    }

    /// The process this one restarts, if any.
    pub fn restart_of(&self) -> Option<Handle> {
        self.restart_of
    }

    /// Attaches a lease released exactly once when the process is terminal.
    pub fn with_lease(mut self, lease: Box<dyn Lease>) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Attaches a live copy of the output, with backpressure: the workload waits while the
    /// tap's consumer is behind (see [`Tap`]). It rides the prepared process rather than the
    /// [`Command`], which is `Clone`: a tap belongs to exactly one launch, and is never part of
    /// what the journal records.
    pub fn with_tap(mut self, tap: Tap) -> Self {
        self.tap = Some(Box::new(tap));
        self
    }
}

/// Validates `command`; `spool` is the supervisor's default spool, whose retention a command
/// without its own is recorded with, and whose segment size is the least retention it accepts.
pub(crate) fn prepare(
    command: Command,
    spool: &SpoolOptions,
) -> Result<PreparedProcess, PrepareError> {
    if command.program.is_empty() {
        return Err(PrepareError::EmptyProgram);
    }
    if let Some(PtySize { rows, cols }) = command.pty
        && (rows == 0 || cols == 0)
    {
        return Err(PrepareError::TerminalSize { rows, cols });
    }
    if let Some(name) = command.labels.get(crate::lifecycle::NAME_LABEL)
        && !crate::lifecycle::reference::valid_name(name)
    {
        return Err(PrepareError::BadName(name.chars().take(80).collect()));
    }
    let cwd = working_directory(command.cwd)?;
    check_overrides(&command.env)?;
    let retention = output_retention(command.retention, spool)?;
    check_capacity_wait(command.capacity_wait)?;
    let limits = Limits {
        wall_clock_ms: command.timeout.map(millis),
        idle_ms: command.idle_timeout.map(millis),
        // The effective value, default or not: the journal says what each process kept, whatever
        // a later daemon's default is.
        output_retention_bytes: Some(retention),
    };
    Ok(PreparedProcess {
        spec: Box::new(CommandSpecV2 {
            program: command.program,
            args: command.args,
            cwd,
            env_overrides: command.env.iter().map(EnvOverride::recorded).collect(),
            labels: command.labels,
            limits,
            owner: command.owner,
            env_policy: EnvPolicy {
                base: command.base.kind(),
                removed: Vec::new(),
                overlay: EnvOverlay::Off,
            },
        }),
        env: Box::new(LaunchEnvRequest {
            overrides: command.env,
            base: command.base,
            overlay: command.overlay,
        }),
        lease: None,
        tap: None,
        capacity_wait: command.capacity_wait,
        pty: command.pty,
        restart_of: command.restart_of,
        stop_if_unanswered: false,
    })
}

/// The working directory as the journal records it: absolute, and UTF-8.
fn working_directory(cwd: Option<PathBuf>) -> Result<String, PrepareError> {
    let cwd = cwd.ok_or(PrepareError::NoWorkingDirectory)?;
    if !cwd.is_absolute() {
        return Err(PrepareError::RelativeWorkingDirectory(cwd));
    }
    Ok(cwd
        .to_str()
        .ok_or_else(|| PrepareError::NotUtf8(cwd.clone()))?
        .to_owned())
}

/// Refuses the first override whose name is no variable name, or that repeats an earlier one.
fn check_overrides(overrides: &[EnvOverride]) -> Result<(), PrepareError> {
    let mut seen = std::collections::BTreeSet::new();
    for o in overrides {
        if o.name.is_empty() || o.name.contains(['=', '\0']) {
            return Err(PrepareError::BadEnvName(o.name.clone()));
        }
        if !seen.insert(o.name.as_str()) {
            return Err(PrepareError::DuplicateEnv(o.name.clone()));
        }
    }
    Ok(())
}

/// The output retention a process keeps: its own, within range, or the supervisor's default.
fn output_retention(asked: Option<u64>, spool: &SpoolOptions) -> Result<u64, PrepareError> {
    let Some(bytes) = asked else {
        return Ok(spool.retention_bytes);
    };
    let (min, max) = (spool.segment_bytes, limits::RETENTION_BYTES_MAX);
    if !(min..=max).contains(&bytes) {
        return Err(PrepareError::Retention { bytes, min, max });
    }
    Ok(bytes)
}

fn check_capacity_wait(wait: Option<Duration>) -> Result<(), PrepareError> {
    if let Some(wait) = wait {
        let ms = millis(wait);
        if ms > limits::ADMISSION_QUEUE_WAIT_MS_MAX {
            return Err(PrepareError::CapacityWait {
                ms,
                max: limits::ADMISSION_QUEUE_WAIT_MS_MAX,
            });
        }
    }
    Ok(())
}

/// Whole milliseconds, saturating: a duration past `u64::MAX` ms is refused or never reached.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
