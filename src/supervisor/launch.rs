//! The start task: registration, the spool, the launch, `running`, then the drain, all in one
//! task the actor spawned into its set.
//!
//! Invariants:
//! - No workload runs before `starting` (the `Registered` event) is durable: without a gate it
//!   is acknowledged before the spawn; with a guardian its flush runs while the guardian is
//!   forked, and the gated workload waits for it before it execs, with its scope (`Scoped`)
//!   written by then and made durable by the next commit, at the latest by `running`'s
//!   acknowledgement at the publication delay; a workload whose `running` cannot be appended
//!   is killed and recorded `failed`. `running` itself is appended without waiting: the
//!   start returns once the registration is durable and the workload runs, and the host hears
//!   of `running` only after it is durable (`publish.rs`).
//! - `running` is published exactly once and before the terminal notice: by this task
//!   `RUNNING_PUBLICATION_DELAY_MS` after the spawn, beside the drain, or, for a process that
//!   ended sooner, by its terminal publication, first (`Proc::claim_running_publication`: the
//!   first claim wins; the terminal publication waits for a claimed one to finish). A short
//!   command's `running` is then durable by the terminal event's commit: one `fdatasync` less.
//! - The working directory is checked and the environment built (`crate::environment`) before
//!   `Registered`: a missing directory records nothing, and the registration carries the policy
//!   that built the environment and only the values the caller marked persistable.
//! - A start that recorded nothing hands the prepared process back and gives its admission back
//!   (through the actor) before the caller hears of it.
//! - Registration, the spawn and `running` run as one task on the blocking pool:
//!   `posix_spawn` holds its thread until the child exec'd, and an acknowledgement waits for a
//!   `fdatasync`; neither ever runs on a runtime thread.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::command::{LaunchEnvRequest, Lease, PreparedProcess};
use super::process::{
    self, InputEnd, Launched, Outcome, OutputEnd, Proc, ProcEvent, RunningPublisher,
};
use super::{Shared, StartError};
use crate::environment::{self, Overlay};
use crate::journal::EventId;
use crate::lifecycle::event::{
    CaptureStatus, CommandSpecV2, EnvPolicy, ExitStatus, IdentityWitness, RegisteredV2, Running,
    Scoped, TerminalResized,
};
use crate::lifecycle::{Handle, LifecycleEvent, State};
use crate::limits;
use crate::tree::{PtySize, SpawnSpec, Spawned, Streams, TreeScope, TreeSignal};

/// How the blocking part of a start ended.
enum Launch {
    /// The working directory does not exist: nothing was recorded.
    NoWorkingDirectory,
    /// `Registered` could not be recorded: nothing exists.
    NotRegistered(String),
    /// Registered, but nothing was spawned.
    /// The command could not be started; with the scope its guardian recorded first, when it
    /// got that far (the guardian ran, and its receipt can prove its tree gone).
    Failed(String, super::SpawnFailure, Option<Scoped>),
    /// Spawned, but `running` could not be recorded.
    RunningNotRecorded(Spawned, String),
    Running(Spawned),
}

/// The blocking part of a start, on one blocking thread: `Registered`, the launch with its
/// scope recorded, `running` recorded. One trip to the blocking pool, and neither
/// `posix_spawn` (which holds its thread until the child has exec'd) nor a guardian's handshake
/// ever runs on a runtime thread. The pipes and the pidfd register with the runtime from here
/// (blocking threads carry its context).
///
/// With a launcher that gates the workload (a guardian), `Registered` is flushed on another
/// blocking thread while the guardian is forked and sets up, and the launcher's `register`
/// (after `REG`) writes `Scoped` and waits for that flush before the workload may exec: the
/// flush no longer follows the fork. A crash before it leaves only a guardian whose lifeline
/// ended, which kills its gated workload. `Scoped` then rides the next commit: only a lost
/// page cache loses it (a power loss, which ends the tree with the boot, or a failed
/// write-back, which poisons the journal), and `running`'s acknowledgement at the publication
/// delay bounds how long that can be (`publish.rs`). Without a gate, `Registered` is
/// acknowledged before the spawn, and `Scoped` rides `running`.
fn launch_blocking(
    shared: &Shared,
    proc: &Proc,
    spec: &CommandSpecV2,
    request: &LaunchEnvRequest,
    pty: Option<PtySize>,
    restart_of: Option<Handle>,
) -> Launch {
    let (handle, ids) = (proc.handle, proc.ids);
    let launcher = &shared.config.launcher;
    let gated = launcher.gates();
    // Checked before anything is recorded (a directory removed after this check fails the
    // spawn, which is recorded as `failed`).
    let cwd = std::path::PathBuf::from(&spec.cwd);
    if !cwd.is_dir() {
        return Launch::NoWorkingDirectory;
    }
    let env = launch_env(shared, handle, request);
    let registered = registration(proc, spec, env.policy, restart_of);
    let recorded = if gated {
        shared.append_deferred_blocking(EventId::new_v7(), &registered)
    } else {
        shared.append_blocking(EventId::new_v7(), &registered)
    };
    // With a gate, the registration's flush runs while the guardian is forked and sets up;
    // the gate opens only once it is durable.
    let mut registration_flush = match recorded {
        Ok(appended) => gated.then(|| shared.acknowledge_beside(appended.position.seq)),
        Err(e) => return Launch::NotRegistered(e.to_string()),
    };
    // The spool is created at the first output byte (`Proc::append_output`).
    let launch = SpawnSpec {
        name: handle.to_string(),
        receipts: shared.receipts_dir(),
        program: spec.program.clone(),
        args: spec.args.clone(),
        cwd,
        env: env.vars,
        pty,
    };
    let mut recorded: Option<Scoped> = None;
    let mut register = |scope: &TreeScope| {
        let scoped = scope_record(handle, scope);
        let event = LifecycleEvent::Scoped(scoped.clone());
        let id = ids.running.derived(super::derived::SCOPED);
        shared
            .append_deferred_blocking(id, &event)
            .map_err(|e| e.to_string())?;
        if let Some(flush) = registration_flush.take() {
            flush.wait().map_err(|e| e.to_string())?;
        }
        recorded = Some(scoped);
        Ok(())
    };
    let launched = launcher.launch(&launch, &mut register);
    let spawned = match launched {
        Ok(spawned) => spawned,
        Err(e) => return Launch::Failed(e.to_string(), super::SpawnFailure::of(&e), recorded),
    };
    // Set once, here; a stop that raced the launch is waiting for it.
    let _ = proc.tree.set(Arc::clone(&spawned.tree));
    match record_running(shared, proc, &spawned, pty) {
        Ok(()) => Launch::Running(spawned),
        Err(e) => Launch::RunningNotRecorded(spawned, e),
    }
}

/// The launch environment `request` asks for; an overlay asked for but unavailable leaves it
/// unchanged, and says so.
fn launch_env(
    shared: &Shared,
    handle: Handle,
    request: &LaunchEnvRequest,
) -> environment::LaunchEnv {
    let overlay = match (request.overlay, &shared.login_env) {
        (false, _) => Overlay::Off,
        (true, Some(Ok(captured))) => Overlay::Captured(captured),
        (true, Some(Err(reason))) => Overlay::Failed(reason),
        (true, None) => Overlay::Failed("the supervisor captures no login shell"),
    };
    if let Overlay::Failed(reason) = overlay {
        warn!(%handle, %reason, "login-shell overlay asked for but unavailable; environment unchanged");
    }
    environment::build(
        &request.base,
        || std::env::vars_os().collect(),
        overlay,
        &request.overrides,
    )
}

/// `Registered` for `proc`, its command recorded with the policy that built its environment.
fn registration(
    proc: &Proc,
    spec: &CommandSpecV2,
    policy: EnvPolicy,
    restart_of: Option<Handle>,
) -> LifecycleEvent {
    let mut command = Box::new(spec.clone());
    command.env_policy = policy;
    LifecycleEvent::RegisteredV2(RegisteredV2 {
        handle: proc.handle,
        ids: proc.ids,
        command,
        restart_of,
        at_unix_ms: super::now_unix_ms(),
    })
}

fn scope_record(handle: Handle, scope: &TreeScope) -> Scoped {
    Scoped {
        handle,
        mechanism: scope.mechanism,
        boot_id: scope.boot_id,
        workload: scope.workload,
        guardian: scope.guardian,
        cgroup: scope
            .cgroup
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        receipt: scope.receipt.clone(),
        at_unix_ms: super::now_unix_ms(),
    }
}

/// Starts the deadlines' clocks and records `running` (with a terminal's launch size) at the
/// same instant, without waiting for an acknowledgement.
fn record_running(
    shared: &Shared,
    proc: &Proc,
    spawned: &Spawned,
    pty: Option<PtySize>,
) -> Result<(), String> {
    let handle = proc.handle;
    let identity = spawned.tree.identity();
    let at_unix_ms = super::now_unix_ms();
    proc.clocks.start(tokio::time::Instant::now(), at_unix_ms);
    let running = LifecycleEvent::Running(Running {
        handle,
        pid: identity.pid,
        witness: IdentityWitness {
            start_time_ticks: identity.start_time_ticks,
            boot_id: identity.boot_id,
        },
        at_unix_ms,
    });
    // `running` rides the next acknowledgement instead of waiting for one of its own: the
    // registration is durable already, and with a gate the scope is written (durable at the
    // latest with `running`, at the publication delay); a crash before it leaves a `starting`
    // process, which restore reconciles exactly as a `running` one, and no host hears of
    // `running` before it is durable (the publication acknowledges it first, off this path).
    // A terminal's launch size rides `running` the same way (rule W of journal-format.md).
    shared
        .append_deferred_blocking(proc.ids.running, &running)
        .and_then(|_| match pty {
            Some(size) => shared
                .append_deferred_blocking(
                    EventId::new_v7(),
                    &LifecycleEvent::TerminalResized(TerminalResized {
                        handle,
                        rows: size.rows,
                        cols: size.cols,
                        at_unix_ms: super::now_unix_ms(),
                    }),
                )
                .map(|_| ()),
            None => Ok(()),
        })
        .map_err(|e| e.to_string())
}

pub(crate) async fn start(
    shared: Arc<Shared>,
    actor: mpsc::Sender<ProcEvent>,
    proc: Arc<Proc>,
    prepared: PreparedProcess,
    reply: oneshot::Sender<Result<Handle, StartError>>,
) {
    let handle = proc.handle;
    // This task lives as long as its process, and its future's size is what every live process
    // costs the supervisor: the steps that run once (the failure paths, the answer, the
    // publication of `running`) are boxed, so that while the process runs the task holds little
    // more than the drain's loop. (4.1 KB a task before, 2.2 KB after.)
    let spawned = match launch(&shared, &proc, &prepared).await {
        Launch::NoWorkingDirectory => {
            let path = prepared.spec.cwd.clone();
            let error = StartError::WorkingDirectory { prepared, path };
            return Box::pin(abandon(&actor, handle, reply, error)).await;
        }
        Launch::NotRegistered(error) => {
            let error = StartError::Journal { prepared, error };
            return Box::pin(abandon(&actor, handle, reply, error)).await;
        }
        Launch::Failed(message, failure, scoped) => {
            let failed = Failed {
                message,
                failure,
                scoped,
            };
            return Box::pin(fail(&shared, &actor, &proc, prepared.lease, failed, reply)).await;
        }
        Launch::RunningNotRecorded(spawned, e) => {
            Box::pin(kill_unrecorded(
                &shared,
                &actor,
                &proc,
                prepared.lease,
                spawned,
                &e,
            ))
            .await;
            let _ = reply.send(Ok(handle));
            return;
        }
        Launch::Running(spawned) => spawned,
    };
    let (stdin, stdout, stderr) = ends(&proc, spawned.streams);
    let spawned_event = |handled| ProcEvent::Spawned {
        handle,
        stdin,
        handled,
    };
    Box::pin(process::report_handled(&actor, spawned_event)).await;
    let _ = reply.send(Ok(handle));
    let publication = publish_running_soon(Arc::clone(&shared), Arc::clone(&proc));
    let (lease, tap) = prepared.into_lease_and_tap();
    let launched = Launched {
        proc,
        tree: spawned.tree,
        stdout,
        stderr,
        lease,
        tap,
    };
    tokio::join!(
        Box::pin(publication),
        process::drain(shared, actor, launched)
    );
}

/// [`launch_blocking`] on the blocking pool; a start task that failed recorded nothing.
async fn launch(shared: &Arc<Shared>, proc: &Arc<Proc>, prepared: &PreparedProcess) -> Launch {
    let (shared, proc) = (Arc::clone(shared), Arc::clone(proc));
    let (spec, env) = (prepared.spec.clone(), prepared.env.clone());
    let (pty, restart_of) = (prepared.pty, prepared.restart_of);
    tokio::task::spawn_blocking(move || {
        launch_blocking(&shared, &proc, &spec, &env, pty, restart_of)
    })
    .await
    .unwrap_or_else(|e| Launch::NotRegistered(format!("start task: {e}")))
}

/// Ends a start that recorded nothing: its admission is given back (through the actor) before
/// the caller hears of it.
async fn abandon(
    actor: &mpsc::Sender<ProcEvent>,
    handle: Handle,
    reply: oneshot::Sender<Result<Handle, StartError>>,
    error: StartError,
) {
    process::report_handled(actor, |handled| ProcEvent::Abandoned { handle, handled }).await;
    let _ = reply.send(Err(error));
}

/// The journal failed after the spawn: the process must not run unrecorded, so it is killed,
/// reaped and recorded `failed`.
async fn kill_unrecorded(
    shared: &Arc<Shared>,
    actor: &mpsc::Sender<ProcEvent>,
    proc: &Arc<Proc>,
    lease: Option<Box<dyn Lease>>,
    spawned: Spawned,
    error: &str,
) {
    warn!(error = %error, "running not recorded; killing the process");
    let _ = spawned.tree.signal(TreeSignal::Kill);
    let _ = spawned.tree.wait_leader().await;
    let reason = format!("running not recorded: {error}");
    let outcome = Outcome {
        state: State::Failed,
        exit: ExitStatus::Unknown,
        capture: CaptureStatus::Failed(reason.clone()),
        reason,
        lingering: false,
        released: None,
        unverified: false,
        drained: None,
    };
    process::terminalize(shared, actor, proc, lease, outcome).await;
}

/// The process's input and output ends; a terminal's master is shared with `proc`, for resizes.
fn ends(proc: &Proc, streams: Streams) -> (InputEnd, OutputEnd, Option<OutputEnd>) {
    match streams {
        Streams::Pipes((stdin, stdout, stderr)) => (
            InputEnd::Pipe(stdin),
            OutputEnd::Pipe(stdout),
            Some(OutputEnd::Pipe(stderr)),
        ),
        Streams::Terminal(master) => {
            let master = Arc::new(master);
            let _ = proc.terminal.set(Arc::clone(&master));
            (
                InputEnd::Terminal(Arc::clone(&master)),
                OutputEnd::Terminal(master),
                None,
            )
        }
    }
}

/// Publishes `running` a moment after the spawn, beside the drain: a command that ends sooner
/// has it published by its terminal publication instead (first, then the terminal notice), by
/// then durable with the terminal event's commit, which spares a short command the `fdatasync`
/// this publication would force. Either way exactly once, and before the terminal notice.
async fn publish_running_soon(shared: Arc<Shared>, proc: Arc<Proc>) {
    let mut exited = proc.exited.subscribe();
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(limits::RUNNING_PUBLICATION_DELAY_MS)) => {}
        // Ended sooner (`exited` is sent once the terminal event is durable, and with it
        // the `running` record before it): nothing is gained by waiting the delay out,
        // which a `run` or a shutdown would otherwise spend idle joining this task.
        _ = exited.wait_for(Option::is_some) => {}
    }
    if proc.claim_running_publication(RunningPublisher::Start) {
        super::publish::publish_running(&shared, proc.handle, proc.ids).await;
        proc.running_publication_done();
    }
}

/// A start that failed before the workload ran.
struct Failed {
    message: String,
    failure: super::SpawnFailure,
    /// The scope its guardian recorded before the workload's exec failed.
    scoped: Option<Scoped>,
}

/// Records a start that failed before the workload ran, through the terminal gate; then, when
/// a guardian had recorded its scope (the exec it gated failed), the release of its tree, which
/// the guardian's receipt proves: it has exited by now (the launch reaped it), and without this
/// the manifest said `unverified: no receipt yet` until the next restore looked.
async fn fail(
    shared: &Arc<Shared>,
    actor: &mpsc::Sender<ProcEvent>,
    proc: &Arc<Proc>,
    lease: Option<Box<dyn Lease>>,
    failed: Failed,
    reply: oneshot::Sender<Result<Handle, StartError>>,
) {
    let Failed {
        message,
        failure,
        scoped,
    } = failed;
    tracing::info!(handle = %proc.handle, %message, "start failed: the command could not be spawned");
    let outcome = Outcome {
        state: State::Failed,
        exit: ExitStatus::Unknown,
        capture: CaptureStatus::Complete,
        reason: message.clone(),
        lingering: false,
        released: None,
        unverified: false,
        drained: None,
    };
    process::terminalize(shared, actor, proc, lease, outcome).await;
    if let Some(scoped) = scoped {
        let held = [(proc.handle, scoped, proc.ids)];
        let shared = Arc::clone(shared);
        // A tree nothing proves gone stays `unverified` with why, as after a restore.
        let _ = tokio::task::spawn_blocking(move || super::restore::reassess(&shared, &held)).await;
    }
    let _ = reply.send(Err(StartError::Spawn {
        handle: proc.handle,
        message,
        failure,
    }));
}
