//! The start task: registration, the spool, the launch, `running`, then the drain, all in one
//! task the actor spawned into its set.
//!
//! Invariants:
//! - Nothing is spawned before `starting` (the `Registered` event) is acknowledged; a workload
//!   whose `running` cannot be recorded is killed and recorded `failed`.
//! - A start that recorded nothing hands the prepared process back and gives its admission back
//!   (through the actor) before the caller hears of it.
//! - Creating the spool is a mkdir and a file create, without a sync (its first checkpoint
//!   syncs the directory entry), so it runs in place; every sync runs on the blocking pool.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::command::{Lease, PreparedProcess};
use super::process::{self, Launched, Outcome, Proc, ProcEvent};
use super::{Shared, StartError, lock};
use crate::journal::EventId;
use crate::lifecycle::event::{CaptureStatus, ExitStatus, IdentityWitness, Registered, Running};
use crate::lifecycle::{Handle, LifecycleEvent, State};
use crate::spool::{Output, Spool};
use crate::tree::{SpawnSpec, TreeSignal};

pub(crate) async fn start(
    shared: Arc<Shared>,
    actor: mpsc::Sender<ProcEvent>,
    proc: Arc<Proc>,
    prepared: PreparedProcess,
    reply: oneshot::Sender<Result<Handle, StartError>>,
) {
    let (handle, ids) = (proc.handle, proc.ids);
    let PreparedProcess { spec, lease } = prepared;
    let registered = LifecycleEvent::Registered(Registered {
        handle,
        ids,
        command: spec.clone(),
        at_unix_ms: super::now_unix_ms(),
    });
    if let Err(e) = shared.append(EventId::new_v7(), registered).await {
        let _ = actor.send(ProcEvent::Abandoned { handle }).await;
        let _ = reply.send(Err(StartError::Journal {
            prepared: PreparedProcess { spec, lease },
            error: e.to_string(),
        }));
        return;
    }
    // A new spool is a mkdir and a file create, no fsync (its first checkpoint syncs the
    // directory entry) and no scan: cheaper here than a hop to the blocking pool.
    let spool = Spool::open_writer(
        &shared.spool_dir(&handle),
        handle.0.as_bytes(),
        shared.config.spool,
    );
    match spool {
        Ok((spool, _)) => {
            *lock(&proc.output) = Some(Output::new(spool, shared.config.buffer_bytes));
        }
        Err(e) => {
            let message = format!("cannot create the output spool: {e}");
            return fail(&shared, &actor, &proc, lease, message, reply).await;
        }
    }
    let cwd = std::path::PathBuf::from(&spec.cwd);
    if !cwd.is_dir() {
        let message = format!("working directory {} does not exist", spec.cwd);
        return fail(&shared, &actor, &proc, lease, message, reply).await;
    }
    let launch = SpawnSpec {
        program: spec.program.clone(),
        args: spec.args.clone(),
        cwd,
        env_overrides: spec.env_overrides.clone(),
    };
    let spawned = match shared.config.launcher.launch(&launch) {
        Ok(spawned) => spawned,
        Err(e) => return fail(&shared, &actor, &proc, lease, e.to_string(), reply).await,
    };
    let tree = Arc::clone(&spawned.tree);
    // Set once, here; a stop that raced the launch is waiting for it.
    let _ = proc.tree.set(Arc::clone(&tree));
    let _ = actor
        .send(ProcEvent::Spawned {
            handle,
            stdin: spawned.stdin,
        })
        .await;
    let identity = tree.identity();
    let running = LifecycleEvent::Running(Running {
        handle,
        pid: identity.pid,
        witness: IdentityWitness {
            start_time_ticks: identity.start_time_ticks,
            boot_id: identity.boot_id,
        },
        at_unix_ms: super::now_unix_ms(),
    });
    if let Err(e) = shared.append(ids.running, running).await {
        // The journal failed: the process must not run unrecorded.
        warn!(error = %e, "running not recorded; killing the process");
        let _ = tree.signal(TreeSignal::Kill);
        let _ = tree.wait_leader().await;
        let reason = format!("running not recorded: {e}");
        let outcome = Outcome {
            state: State::Failed,
            exit: ExitStatus::Unknown,
            capture: CaptureStatus::Failed(reason.clone()),
            reason,
            lingering: false,
        };
        process::terminalize(&shared, &actor, &proc, lease, outcome).await;
        let _ = reply.send(Ok(handle));
        return;
    }
    let _ = reply.send(Ok(handle));
    // The actor publishes `running` beside the drain; the terminal publication waits for it, so
    // the host still sees `running` first.
    let _ = actor.send(ProcEvent::Running { handle }).await;
    let timeout = spec.limits.wall_clock_ms.map(Duration::from_millis);
    let launched = Launched {
        proc,
        tree,
        stdout: spawned.stdout,
        stderr: spawned.stderr,
        timeout,
        lease,
    };
    process::drain(shared, actor, launched).await;
}

/// Records a start that failed before the workload ran, through the terminal gate.
async fn fail(
    shared: &Arc<Shared>,
    actor: &mpsc::Sender<ProcEvent>,
    proc: &Arc<Proc>,
    lease: Option<Box<dyn Lease>>,
    message: String,
    reply: oneshot::Sender<Result<Handle, StartError>>,
) {
    let outcome = Outcome {
        state: State::Failed,
        exit: ExitStatus::Unknown,
        capture: CaptureStatus::Complete,
        reason: message.clone(),
        lingering: false,
    };
    process::terminalize(shared, actor, proc, lease, outcome).await;
    let _ = reply.send(Err(StartError::Spawn {
        handle: proc.handle,
        message,
    }));
}
