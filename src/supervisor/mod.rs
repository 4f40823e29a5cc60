//! The supervisor: Start, Drain, Terminalize, Stop, Input, Wait, Shutdown and Restore on tokio
//! (DESIGN.md, "The supervisor").
//!
//! A [`Supervisor`] is a cheap handle: a sender to the actor (`actor.rs`) that owns the process
//! table, and the `Shared` parts that every task may read (`shared.rs`: configuration, host
//! services, the journal's writer). This file holds the handle; its configuration
//! (`config.rs`), its errors (`error.rs`) and the rendering of output pages (`page.rs`) are
//! their own files. The supervisor is the only place that spawns, signals and sleeps; it does
//! all three through the process-tree boundary ([`crate::tree`]).
//!
//! Invariants:
//! - Admission is checked before anything else in `start`; a refused start hands the prepared
//!   process back untouched. After `shutdown` begins, admission stays closed (queued starts are
//!   refused). Admission is soft (src/admission/): a start fails fast with the decision, or, if
//!   it asked to, waits FIFO for capacity until its deadline.
//! - A process's capacity is released before any caller woken by its end can observe it: the
//!   gate reports `Finished` before it wakes waiters, and `wait` and `stop` answer after an actor
//!   round trip.
//! - Capacity taken by a start is given back exactly once: by the terminal gate, or by the
//!   start task when nothing was registered.
//! - Restore never signals a persisted pid. Signals go only to trees this supervisor launched.
//! - Every task the supervisor spawns is in the actor's task set, and shutdown joins it (bounded).
//! - No lock is held across an await (clippy's `await_holding_lock` is denied, and
//!   `tests/it/tidy.rs` allows a lock type only in the files that own one). The journal's writer
//!   is behind one lock, held for an append or a manifest read; a live process's output is
//!   behind one lock shared by its drain and its readers; nothing else is shared mutably.

mod actor;
mod capture;
pub mod command;
mod config;
#[doc(hidden)]
pub mod deadline;
mod enforce;
mod error;
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;
mod gate;
mod launch;
mod page;
pub(crate) mod process;
mod publish;
mod restart;
pub mod restore;
pub mod services;
mod shared;
mod tap;
mod tap_sink;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::sync::Lock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

pub use capture::{
    CaptureError, CaptureFailure, CaptureFault, CaptureLimits, CaptureReceipt, CaptureResult,
    Incomplete, IncompleteCapture, SpoolArtifact, StreamCapture, StreamEnd, StreamReceipt, Why,
    WorkloadStatus,
};
pub use command::{Command, Lease, PrepareError, PreparedProcess};
pub use config::SupervisorConfig;
pub use error::{Refusal, SpawnFailure, StartError, Started, SupervisorError};
pub use gate::{GateStatus, InputWaitStatus};
pub use page::{OutputPage, Rendering, read_page, render_page};
pub use process::{DrainEnd, Drained, TerminalSummary};
pub use restart::RestartError;
pub use restore::RestoreReport;
pub use services::{
    Completion, CompletionNotifier, LifecycleNotice, LifecyclePublisher, ServiceError,
    ServiceEvent, Services,
};
pub(crate) use shared::{Shared, request_stop};
pub use tap::{Tap, TapAbandon, TapBytes, TapChunk};
pub use tap_sink::TapSink;
pub(crate) use tap_sink::{is_dev_null, write_all};

use crate::admission::AdmissionSnapshot;
use crate::journal::{Durability, EventId, JournalOptions, Tenure};
use crate::lifecycle::event::{InputClosed, TerminalResized};
use crate::lifecycle::retention::{CleanReport, RetentionRequest};
use crate::lifecycle::{Handle, Lifecycle, LifecycleError, LifecycleEvent, Manifest, State};
use crate::limits;
use crate::spool::render;
use crate::spool::{Spool, SpoolError};
use crate::tree::PtySize;
use actor::{Actor, Found, InputOp, Msg};

/// What the actor owns right now; for hosts' health checks and for tests that prove ownership.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SupervisorStats {
    /// Processes holding capacity.
    pub live: usize,
    /// The effective bound on `live` (configuration and descriptor budget).
    pub max_live: usize,
    /// Live entries in the table.
    pub table: usize,
    /// Trees whose leader exited while members live on.
    pub lingering: usize,
    /// Trees nothing proved gone (a guardian died without a receipt); each holds capacity.
    pub unverified: usize,
    /// Tasks in the actor's set (drains, stdin writers, teardowns, watchers, publications).
    pub tasks: usize,
    pub readers_cached: usize,
    pub summaries_cached: usize,
    /// The pause gate is closed: new starts are refused.
    pub paused: bool,
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

/// Purposes of record IDs derived from a registration's allocated IDs: the lifecycle format's
/// (the store refuses a record under any other ID).
pub(crate) use crate::lifecycle::event::derived;

pub(crate) fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A durable supervisor of processes under one runtime root. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Supervisor {
    shared: Arc<Shared>,
    actor: mpsc::Sender<Msg>,
}

impl Supervisor {
    /// Takes the root (and its writer lock), installs the host's services, restores (every
    /// process that was live under a previous supervisor becomes `lost_on_restore`), then starts
    /// the actor.
    pub async fn open(
        config: SupervisorConfig,
        services: Services,
    ) -> Result<(Supervisor, RestoreReport), SupervisorError> {
        config.check()?;
        let root = std::path::absolute(&config.root).map_err(|e| SupervisorError::Output {
            handle: Handle(EventId::from_bytes([0; 16])),
            message: format!("runtime root: {e}"),
        })?;
        let (open_root, group, strict) = (root.clone(), config.group, config.strict);
        let (durability, tenure) = (config.durability, config.tenure);
        // Spawned first: the open is the longest of the steps that run beside each other here,
        // and each may need a blocking thread of its own (a new one takes a while to start).
        let opened = tokio::task::spawn_blocking(move || {
            open_root_blocking(&open_root, durability, tenure, group, strict)
        });
        // Beside the open, on a blocking thread of its own: a profile may take seconds.
        let login_env = config.login_shell.clone().map(|shell| {
            tokio::task::spawn_blocking(move || {
                crate::tree::login_shell::capture(&shell).map_err(|e| e.to_string())
            })
        });
        let opened = opened
            .await
            .map_err(|e| SupervisorError::Task(e.to_string()))??;
        let ((lifecycle, recovery, replay), trees) = opened;
        let damage = damage_of(&root, config.strict, &recovery, &replay)?;
        // The gate as the journal (or the snapshot) left it: a restart keeps it.
        let paused = AtomicBool::new(lifecycle.store().paused());
        let login_env = match login_env {
            Some(task) => Some(login_env_of(task).await),
            None => None,
        };
        let max_live = live_bound(&config);
        let shared = Arc::new(Shared {
            config,
            services,
            lifecycle: Lock::new(lifecycle),
            root,
            live: AtomicUsize::new(0),
            paused,
            login_env,
            damage,
            trees,
        });
        let (report, held) = restore::restore(&shared, recovery, replay).await;
        let presampled = restore::presample(&shared, &held).await;
        let (tx, rx) = mpsc::channel(limits::ACTOR_INBOX_DEPTH);
        let actor = Actor::new(
            Arc::clone(&shared),
            rx,
            tx.downgrade(),
            max_live,
            held,
            presampled,
        );
        tokio::spawn(actor.run());
        Ok((Supervisor { shared, actor: tx }, report))
    }

    pub fn root(&self) -> &Path {
        &self.shared.root
    }

    /// Validates a command into a single-use launch; a command without its own output retention
    /// is recorded with the configuration's (`SupervisorConfig::spool`).
    pub fn prepare(&self, command: Command) -> Result<PreparedProcess, PrepareError> {
        command::prepare(command, &self.shared.config.spool)
    }

    /// What the open found damaged in this root (one line), if anything: a writer that was not
    /// strict opened it anyway.
    pub fn damage(&self) -> Option<&str> {
        self.shared.damage.as_deref()
    }

    /// How many processes hold capacity right now.
    pub fn live_count(&self) -> usize {
        self.shared.live.load(Ordering::SeqCst)
    }

    /// Sends one request to the actor and awaits its answer.
    async fn ask<T>(
        &self,
        msg: impl FnOnce(oneshot::Sender<T>) -> Msg,
    ) -> Result<T, SupervisorError> {
        let (tx, rx) = oneshot::channel();
        self.actor
            .send(msg(tx))
            .await
            .map_err(|_| SupervisorError::Task("the supervisor has stopped".to_owned()))?;
        rx.await
            .map_err(|_| SupervisorError::Task("the supervisor dropped a request".to_owned()))
    }

    /// What the actor owns right now.
    pub async fn stats(&self) -> Result<SupervisorStats, SupervisorError> {
        self.ask(|reply| Msg::Stats { reply }).await
    }

    /// The configured retention age ([`SupervisorConfig::retention`]), or the default one when
    /// automatic retention is off (what `clean` uses when not told an age).
    pub fn retention_age(&self) -> Duration {
        self.shared
            .config
            .retention
            .unwrap_or(Duration::from_millis(limits::RETENTION_AGE_DEFAULT_MS))
    }

    /// Retires the output of every finished process whose exit is verified and which ended at
    /// least `older_than` ago (or says what it would retire, with `dry_run`), and finishes
    /// removals a crash interrupted. The same pass the retention policy runs every
    /// [`limits::RETENTION_PASS_INTERVAL_MS`].
    pub async fn clean(
        &self,
        older_than: Duration,
        dry_run: bool,
    ) -> Result<CleanReport, SupervisorError> {
        let request = RetentionRequest {
            older_than,
            dry_run,
            by: "clean",
        };
        self.ask(|reply| Msg::Clean { request, reply }).await
    }
    /// Admission now: the decision a start would get (slots, in use, and its inputs: cores,
    /// available memory, share, floor, whether telemetry was complete), every workload's
    /// reservation, and the starts waiting for capacity.
    pub async fn admission(&self) -> Result<AdmissionSnapshot, SupervisorError> {
        self.ask(|reply| Msg::Admission { reply }).await
    }

    /// Starts a prepared process: admission, registration (`starting`), launch into its own
    /// tree, `running`, then the drain task. Returns the opaque handle. Without capacity the
    /// start fails at once with [`StartError::Capacity`], or, with
    /// [`Command::wait_for_capacity`], waits in line and fails with
    /// [`StartError::CapacityTimeout`] at its deadline.
    pub async fn start(&self, prepared: PreparedProcess) -> Result<Handle, StartError> {
        self.start_reporting(prepared).await.map(|s| s.handle)
    }

    /// As [`Supervisor::start`], and says how long the start waited for capacity.
    pub async fn start_reporting(&self, prepared: PreparedProcess) -> Result<Started, StartError> {
        let answer = self.send_start(prepared).await?;
        start_answer(answer.await)
    }

    /// Hands `prepared` to the actor: the receiver of its answer, or the refusal of an actor
    /// already gone.
    async fn send_start(&self, prepared: PreparedProcess) -> Result<StartAnswer, StartError> {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(msg)) = self
            .actor
            .send(Msg::Start {
                prepared,
                reply: tx,
            })
            .await
        {
            // The actor is gone: the message comes back whole, and with it the prepared process.
            if let Msg::Start { prepared, .. } = msg {
                return Err(StartError::Refused {
                    prepared,
                    reason: Refusal::ShuttingDown,
                });
            }
            return Err(StartError::Task("the supervisor has stopped".to_owned()));
        }
        Ok(rx)
    }

    /// The journal, for readers beside the supervisor (the fleet's shipper asks it how far it
    /// is durable).
    pub fn journal(&self) -> Arc<crate::journal::Journal> {
        self.shared.lifecycle.lock().journal_arc()
    }

    /// The manifest of one process, as the journal knows it.
    pub fn manifest(&self, handle: &Handle) -> Option<Manifest> {
        self.shared
            .lifecycle
            .lock()
            .manifest(handle)
            .map(std::borrow::Cow::into_owned)
    }

    /// The manifest a handle, a number or a name names (`lifecycle::reference`).
    pub fn resolve(
        &self,
        reference: &crate::lifecycle::ProcessRef,
    ) -> Result<Manifest, crate::lifecycle::ReferenceError> {
        self.shared
            .lifecycle
            .lock()
            .store()
            .resolve(reference)
            .map(std::borrow::Cow::into_owned)
    }

    /// Manifests of every process the journal knows, filtered.
    pub fn list(&self, filter: &ListFilter) -> Vec<Manifest> {
        let lifecycle = self.shared.lifecycle.lock();
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
            .map(std::borrow::Cow::into_owned)
            .collect()
    }

    /// The state alone, without cloning the manifest: every output poll asks. Output that was
    /// retired is an error of its own, not an I/O failure of a missing file.
    fn state_of(&self, handle: &Handle) -> Result<State, SupervisorError> {
        let lifecycle = self.shared.lifecycle.lock();
        let m = lifecycle
            .manifest(handle)
            .ok_or(SupervisorError::UnknownHandle(*handle))?;
        match &m.retired {
            Some(r) => Err(SupervisorError::Retired {
                handle: *handle,
                reason: r.reason.clone(),
                at_unix_ms: r.at_unix_ms,
            }),
            None => Ok(m.state),
        }
    }

    /// Reads up to `max_bytes` of output from `cursor`, rendered.
    pub async fn output(
        &self,
        handle: &Handle,
        cursor: u64,
        max_bytes: usize,
        rendering: Rendering,
    ) -> Result<OutputPage, SupervisorError> {
        self.state_of(handle)?;
        let sizes = match rendering {
            Rendering::SafeText => render::page_read_sizes(max_bytes),
            Rendering::Base64 => [max_bytes; 3],
        };
        let mut last = None;
        for size in sizes {
            let read = self.read_output(handle, cursor, size).await?;
            // Read after the bytes, so that a page never pairs a terminal state with a read that
            // missed the last output.
            let state = self.state_of(handle)?;
            let (page, stalled) =
                render_page(handle, state, cursor, &read, size, max_bytes, rendering);
            if !stalled {
                return Ok(page);
            }
            last = Some(page);
        }
        // The last size always holds a whole first unit; were it not to, the page is still true
        // (it only makes no progress).
        last.ok_or_else(|| SupervisorError::Task("a page without a read".to_owned()))
    }

    /// Raw output bytes with their spans (for hosts that stream output as is).
    pub async fn output_raw(
        &self,
        handle: &Handle,
        cursor: u64,
        max_bytes: usize,
    ) -> Result<crate::spool::SpoolRead, SupervisorError> {
        self.state_of(handle)?;
        self.read_output(handle, cursor, max_bytes).await
    }

    /// One read of a live process's output (buffer, then spool) or of a finished one's spool.
    async fn read_output(
        &self,
        handle: &Handle,
        cursor: u64,
        max_bytes: usize,
    ) -> Result<crate::spool::SpoolRead, SupervisorError> {
        let map = |e: SpoolError| match e {
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
        };
        // Three times at most: a process found live may close its spool writer before the read,
        // and the actor may not yet have handled its end when the result is persisted.
        for _ in 0..3 {
            let reader = match self
                .ask(|reply| Msg::Lookup {
                    handle: *handle,
                    reply,
                })
                .await?
            {
                Found::Live(proc) => match proc.read_output(cursor, max_bytes) {
                    Some(result) => return result.map_err(map),
                    // Between the gate closing the writer and the result being persisted: wait
                    // for the result, then read the finished spool.
                    None if proc.terminalizing() => {
                        let mut exited = proc.exited.subscribe();
                        let _ = exited.wait_for(Option::is_some).await;
                        continue;
                    }
                    None if !proc.is_terminal() => {
                        // Registered, no spool yet: nothing was written.
                        return if cursor > 0 {
                            Err(SupervisorError::CursorAhead {
                                cursor,
                                total_bytes: 0,
                            })
                        } else {
                            Ok(crate::spool::SpoolRead::default())
                        };
                    }
                    None => continue,
                },
                Found::NotLive {
                    reader: Some(reader),
                    ..
                } => reader,
                Found::NotLive { reader: None, .. } => self.open_reader(handle).await?,
            };
            return reader.read(cursor, max_bytes).map_err(map);
        }
        Err(SupervisorError::Output {
            handle: *handle,
            message: "the process ended during the read; read again".to_owned(),
        })
    }

    /// Opens a finished process's spool on a blocking thread (it lists and indexes segment
    /// files) and offers it to the actor's bounded cache.
    ///
    /// The journal's record of the output (its gaps and final bounds) shapes the reader's view:
    /// lost output reads as a gap with its reason, and output the files no longer hold as damage.
    async fn open_reader(&self, handle: &Handle) -> Result<Arc<Spool>, SupervisorError> {
        let dir = self.shared.spool_dir(handle);
        let record = self.manifest(handle);
        let opened = tokio::task::spawn_blocking(move || Spool::open_reader(&dir))
            .await
            .map_err(|e| SupervisorError::Task(e.to_string()))?;
        let (mut spool, _) = opened.map_err(|e| SupervisorError::Output {
            handle: *handle,
            message: e.to_string(),
        })?;
        if let Some(manifest) = record {
            manifest.bound_reader(&mut spool);
        }
        let spool = Arc::new(spool);
        let _ = self
            .actor
            .send(Msg::CacheReader {
                handle: *handle,
                reader: Arc::clone(&spool),
            })
            .await;
        Ok(spool)
    }

    /// Returns once the output of `handle` extends past `cursor` or the process is terminal.
    pub async fn output_changed(&self, handle: &Handle, cursor: u64) {
        let Ok(Found::Live(proc)) = self
            .ask(|reply| Msg::Lookup {
                handle: *handle,
                reply,
            })
            .await
        else {
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

    async fn stdin(&self, handle: &Handle) -> Result<mpsc::Sender<InputOp>, SupervisorError> {
        self.ask(|reply| Msg::Stdin {
            handle: *handle,
            reply,
        })
        .await?
    }

    /// Resizes a PTY launch's terminal to `rows` x `cols` (the kernel sends SIGWINCH to its
    /// foreground process group) and records the new size (`TerminalResized`, acknowledged
    /// before this returns). Refused for a process that is not running or has no terminal.
    pub async fn resize(
        &self,
        handle: &Handle,
        rows: u16,
        cols: u16,
    ) -> Result<(), SupervisorError> {
        let proc = match self
            .ask(|reply| Msg::Lookup {
                handle: *handle,
                reply,
            })
            .await?
        {
            Found::Live(proc) if !proc.is_terminal() => proc,
            _ => return Err(SupervisorError::NotRunning(*handle)),
        };
        let master = proc
            .terminal
            .get()
            .cloned()
            .ok_or(SupervisorError::NoTerminal(*handle))?;
        if rows == 0 || cols == 0 {
            return Err(SupervisorError::Resize {
                handle: *handle,
                message: format!("{rows}x{cols}: at least one row and one column"),
            });
        }
        let event = LifecycleEvent::TerminalResized(TerminalResized {
            handle: *handle,
            rows,
            cols,
            at_unix_ms: now_unix_ms(),
        });
        let shared = Arc::clone(&self.shared);
        let size = PtySize { rows, cols };
        let done = tokio::task::spawn_blocking(move || {
            shared.append_after_blocking(EventId::new_v7(), &event, || {
                master.resize(size).map_err(|e| e.to_string())
            })
        })
        .await
        .map_err(|e| SupervisorError::Task(e.to_string()))?;
        match done {
            Ok(Ok(_)) => {
                // A resize is activity (the idle deadline's clock restarts), as input is.
                proc.clocks.touch();
                Ok(())
            }
            Ok(Err(e)) => Err(SupervisorError::Resize {
                handle: *handle,
                message: format!("the terminal has the new size, but it was not recorded: {e}"),
            }),
            Err(message) => Err(SupervisorError::Resize {
                handle: *handle,
                message,
            }),
        }
    }

    /// Writes bytes to the process's stdin (bounded: [`limits::INPUT_WRITE_MS`]).
    pub async fn input(&self, handle: &Handle, bytes: &[u8]) -> Result<(), SupervisorError> {
        let queue = self.stdin(handle).await?;
        let (tx, rx) = oneshot::channel();
        queue
            .send(InputOp::Write(bytes.to_vec(), tx))
            .await
            .map_err(|_| SupervisorError::InputClosed(*handle))?;
        // Not held while waiting: a sender keeps a request in the queue alive (the writer's
        // end takes every one, `actor/input.rs`; this is the second guard).
        drop(queue);
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(SupervisorError::Input {
                handle: *handle,
                message,
            }),
            Err(_) => Err(SupervisorError::InputClosed(*handle)),
        }
    }

    /// Closes the process's stdin (it reads EOF) and records it. The record is not flushed on
    /// its own: no claim needs it durable before the next record is (a foreground `run` closes
    /// its command's input at the end of its stdin, and keeps to the sync table's two syncs),
    /// and after a crash the pipe is closed anyway, since this supervisor held its only writer.
    pub async fn close_input(&self, handle: &Handle) -> Result<(), SupervisorError> {
        let queue = self.stdin(handle).await?;
        let (tx, rx) = oneshot::channel();
        queue
            .send(InputOp::Close(tx))
            .await
            .map_err(|_| SupervisorError::InputClosed(*handle))?;
        drop(queue);
        rx.await
            .map_err(|_| SupervisorError::InputClosed(*handle))?;
        let event = LifecycleEvent::InputClosed(InputClosed {
            handle: *handle,
            at_unix_ms: now_unix_ms(),
        });
        self.shared
            .append_unacknowledged(EventId::new_v7(), event)
            .await?;
        Ok(())
    }

    /// SIGTERM to the whole tree, `grace`, SIGKILL, and the exit of every member confirmed. The
    /// process ends `terminated`, or `killed` when SIGKILL was needed. A process whose leader
    /// already exited while members of its tree live on has those members stopped the same way.
    pub async fn stop(
        &self,
        handle: &Handle,
        grace: Duration,
    ) -> Result<TerminalSummary, SupervisorError> {
        self.stop_for(handle, grace, "stop".to_owned()).await
    }

    /// [`Supervisor::stop`], recording `reason` with the stop request.
    async fn stop_for(
        &self,
        handle: &Handle,
        grace: Duration,
        reason: String,
    ) -> Result<TerminalSummary, SupervisorError> {
        match self
            .ask(|reply| Msg::Stop {
                handle: *handle,
                grace,
                reason,
                reply,
            })
            .await??
        {
            Some(summary) => Ok(summary),
            None => self.wait(handle, None).await,
        }
    }

    /// SIGINT to the tree; the process ends `interrupted` if it exits by it.
    pub async fn interrupt(&self, handle: &Handle) -> Result<(), SupervisorError> {
        self.ask(|reply| Msg::Interrupt {
            handle: *handle,
            reply,
        })
        .await?
    }

    /// Waits until the process is terminal and its terminal event is persisted.
    pub async fn wait(
        &self,
        handle: &Handle,
        timeout: Option<Duration>,
    ) -> Result<TerminalSummary, SupervisorError> {
        let proc = match self
            .ask(|reply| Msg::Lookup {
                handle: *handle,
                reply,
            })
            .await?
        {
            Found::Live(proc) => proc,
            Found::NotLive {
                summary: Some(summary),
                ..
            } => return Ok(summary),
            Found::NotLive { summary: None, .. } => {
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
                        drained: None,
                    }),
                    None => Err(SupervisorError::NotRunning(*handle)),
                };
            }
        };
        let Some(_waiter) = proc.waiter() else {
            return Err(SupervisorError::Bound {
                bound: "WAITERS_PER_PROCESS_MAX",
                limit: limits::WAITERS_PER_PROCESS_MAX,
            });
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
        // The gate publishes the summary only once the actor released the capacity: a caller
        // woken here sees it released in `live_count`, `stats` and `admission`.
        summary.ok_or_else(|| SupervisorError::Task("the exit signal was dropped".to_owned()))
    }

    /// Idempotent and shared: every caller gets the same report. Closes admission, terminates
    /// every live tree concurrently (and every lingering one), kills what survives the grace
    /// period, confirms each exit (bounded), and joins the supervisor's tasks (bounded). Output
    /// of finished processes stays readable afterwards.
    ///
    /// The journal is flushed (its closing commit) before this returns; the root's lock is
    /// released when the last handle to this supervisor (every clone of it) is dropped, since
    /// the journal's mapping must be gone first (`journal::mmap`). Another open of the root in
    /// this process waits for that handover (`limits::LOCK_HANDOVER_MS`); one in another
    /// process fails with `Locked` until it happened.
    pub async fn shutdown(&self, grace: Duration) -> ShutdownReport {
        self.ask(|reply| Msg::Shutdown { grace, reply })
            .await
            .unwrap_or_default()
    }
}

/// What [`Lifecycle::open`] gives: the projection, what the journal's recovery found, and what
/// the replay found.
type Opened = (
    Lifecycle,
    crate::journal::RecoveryReport,
    crate::lifecycle::ReplayReport,
);

/// What a login shell's captured environment task gave; a failure is logged (the overlay then
/// does not apply) and kept with its reason.
async fn login_env_of(
    task: tokio::task::JoinHandle<Result<Vec<(String, String)>, String>>,
) -> Result<Vec<(String, String)>, String> {
    let env = task
        .await
        .unwrap_or_else(|e| Err(format!("the capture task failed: {e}")));
    if let Err(reason) = &env {
        tracing::warn!(%reason, "login shell capture failed; the overlay will not apply");
    }
    env
}

/// Opens the root's lifecycle on a blocking thread: its access set first (before the journal
/// opens and checks the root), a damaged root refused before anything is written when
/// `strict`, then the journal's restore, and the directory guardians create their receipts in
/// (journal-format.md, "Guardian receipts").
fn open_root_blocking(
    root: &Path,
    durability: Durability,
    tenure: Tenure,
    group: Option<u32>,
    strict: bool,
) -> Result<(Opened, crate::root::dir::Dir), SupervisorError> {
    crate::root::RootDir::prepare(root, group)
        .map_err(|e| LifecycleError::from(crate::journal::JournalError::from(e)))?;
    if strict && let Some(damage) = crate::lifecycle::damage::before_open(root) {
        return Err(SupervisorError::Damaged(damage));
    }
    let options = JournalOptions {
        durability,
        ..JournalOptions::default()
    };
    let opened = Lifecycle::open_for(root, options, tenure)?;
    let trees = opened
        .0
        .journal()
        .root_sub("trees")
        .map_err(|e| SupervisorError::Output {
            handle: Handle(EventId::from_bytes([0; 16])),
            message: format!("{}: {e}", root.join("trees").display()),
        })?;
    Ok((opened, trees))
}

/// What recovery and replay found wrong with the root, said once in the log; refused when
/// `strict`.
fn damage_of(
    root: &Path,
    strict: bool,
    recovery: &crate::journal::RecoveryReport,
    replay: &crate::lifecycle::ReplayReport,
) -> Result<Option<String>, SupervisorError> {
    let damage = crate::lifecycle::damage::summary(recovery, replay);
    if let Some(damage) = &damage {
        if strict {
            return Err(SupervisorError::Damaged(damage.clone()));
        }
        tracing::warn!(root = %root.display(), %damage, "opening a damaged root");
    }
    Ok(damage)
}

/// The live bound the descriptor limit allows (a start refused with a typed error beats one
/// that fails half-way with EMFILE); an embedding host's connections are its own, so only the
/// split's minimum is kept for them.
fn live_bound(config: &SupervisorConfig) -> usize {
    config
        .max_live
        .min(limits::descriptor_split(limits::open_files_soft(), 0).1)
}

/// The receiver of the actor's answer to a start.
type StartAnswer = oneshot::Receiver<Result<Started, StartError>>;

/// What the answer to a start came to: a start task that ended without one is a task error.
fn start_answer(
    received: Result<Result<Started, StartError>, oneshot::error::RecvError>,
) -> Result<Started, StartError> {
    received.unwrap_or_else(|_| {
        Err(StartError::Task(
            "the start task ended without an answer".to_owned(),
        ))
    })
}

#[cfg(test)]
mod retention_tests {
    use super::*;
    use crate::spool::SpoolOptions;

    /// The default keeps the default spool; a larger retention gets larger segments, never more
    /// than `RETENTION_SEGMENTS_MAX` of them; a smaller one keeps the configured segment size.
    #[test]
    fn segments_grow_with_retention_not_their_count() {
        let config = SupervisorConfig::new("/nonexistent");
        assert_eq!(config.spool_for(None), SpoolOptions::default());
        assert_eq!(
            config.spool_for(Some(limits::RETENTION_BYTES_DEFAULT)),
            SpoolOptions::default()
        );
        let small = config.spool_for(Some(limits::RETENTION_BYTES_MIN));
        assert_eq!(small.segment_bytes, limits::SPOOL_SEGMENT_BYTES_DEFAULT);
        for retention in [
            limits::RETENTION_BYTES_MIN,
            100 << 20,
            (1 << 30) + 1,
            limits::RETENTION_BYTES_MAX,
        ] {
            let options = config.spool_for(Some(retention));
            assert_eq!(options.retention_bytes, retention);
            assert!(options.segment_bytes >= limits::SPOOL_SEGMENT_BYTES_DEFAULT);
            assert!(
                retention.div_ceil(options.segment_bytes) <= limits::RETENTION_SEGMENTS_MAX,
                "{options:?}"
            );
        }
        assert_eq!(
            config
                .spool_for(Some(limits::RETENTION_BYTES_MAX))
                .segment_bytes,
            512 << 20
        );
    }

    #[test]
    fn a_default_retention_below_a_segment_is_refused_at_open() {
        let mut config = SupervisorConfig::new("/nonexistent");
        assert!(config.check().is_ok());
        for bad in [
            0,
            limits::SPOOL_SEGMENT_BYTES_DEFAULT - 1,
            limits::RETENTION_BYTES_MAX + 1,
        ] {
            config.spool.retention_bytes = bad;
            assert!(
                matches!(config.check(), Err(SupervisorError::Config(_))),
                "{bad}"
            );
        }
    }
}
