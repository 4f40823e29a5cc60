//! One supervised process at run time: its output (the data plane), the drain task, teardown of
//! its tree, and the one-shot terminalization gate.
//!
//! Ownership: the actor owns the process's entry (its stdin queue, its tree while it lingers,
//! its capacity); a [`Proc`] is what the actor shares with the drain and with readers. Its only
//! mutable parts are the output (written by the drain alone, read by pollers, behind a lock that
//! no await ever crosses), first-wins atomics, and the one-shot exit signal.
//!
//! Invariants:
//! - Exactly one terminal path wins [`Proc::gate`]; every other caller returns without effect.
//! - Terminalization runs in this order: final spool checkpoint, terminal event appended and
//!   acknowledged, the spool writer closed (its descriptors released), the lease released, the
//!   actor told (capacity released, publication queued), waiters woken. Release comes before
//!   any host publication or notification.
//! - The drain task reads stdout and stderr (or, for a PTY launch, the terminal's master: one
//!   stream, whose EIO once no slave descriptor is left is its EOF) until both reach EOF;
//!   after the workload exits it
//!   reads what the pipes held at its exit, then keeps reading for at most the final-drain
//!   window, so a descendant that holds a pipe open cannot withhold the result (capture is then
//!   reported incomplete, and the terminal summary's `Drained` says which stream was cut off or
//!   failed). The pipes are dropped when the drain ends.
//! - With a tap (`tap.rs`), the drain reads a pipe only while it holds room in the tap, and
//!   waits for room in an arm of its own: a slow consumer blocks the workload, never the
//!   drain's checkpoints or its watch on the leader.
//! - Spool syncs never block the drain's reads: their `fdatasync`s run on a blocking thread,
//!   without the output lock, one at a time. A checkpoint records the bounds its sync planned
//!   (never bytes appended while it ran), checkpoints reach the journal in order, and the drain
//!   waits for the one in flight before terminalizing, so none follows the terminal event.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::sync::Lock;
use std::time::Duration;

use tokio::net::unix::pipe;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tracing::{Instrument, debug, warn};

use super::Shared;
use super::command::Lease;
use super::deadline::Clocks;
use super::tap::{Tap, Tapping};
use crate::aligned::ReadBuf;
use crate::journal::EventId;
use crate::lifecycle::event::{
    CaptureStatus, CursorBounds, Deadline, ExitProof, ExitStatus, LifecycleIds, OutputCheckpoint,
    OutputGap, TreeReleased,
};
use crate::lifecycle::{Handle, LifecycleEvent, State};
use crate::limits::{self, READ_BYTES};
use crate::spool::format::Stream;
use crate::spool::{Gap, Output};
use crate::tree::{LeaderExit, Mechanism, ProcessTree, PtyMaster};

mod teardown;
mod terminal;

pub(crate) use teardown::teardown;

/// Why the supervisor is ending a process (the first reason wins; see `Proc::set_cause`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Cause {
    Stop = 1,
    Interrupt = 2,
    Timeout = 3,
    Shutdown = 4,
}

impl Cause {
    fn from_u8(v: u8) -> Option<Cause> {
        match v {
            1 => Some(Cause::Stop),
            2 => Some(Cause::Interrupt),
            3 => Some(Cause::Timeout),
            4 => Some(Cause::Shutdown),
            _ => None,
        }
    }
}

/// Who may publish a process's `running` (see `Proc::claim_running_publication`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum RunningPublisher {
    Start = 1,
    Terminal = 2,
}

/// Answered by the actor once it has handled the event that carries it.
pub(crate) type Handled = oneshot::Sender<()>;

/// Sends the event `event` makes and returns once the actor has handled it (or is gone): for
/// what a caller is answered only after. The order of two channels cannot promise that: a
/// sender preempted between claiming its slot in the event channel and filling it hides every
/// later event from the actor, which meanwhile answers requests on its inbox.
pub(crate) async fn report_handled(
    actor: &mpsc::Sender<ProcEvent>,
    event: impl FnOnce(Handled) -> ProcEvent,
) {
    let (handled, done) = oneshot::channel();
    if actor.send(event(handled)).await.is_ok() {
        // An actor that ended drops the event unhandled, which answers too.
        let _ = done.await;
    }
}

/// What process tasks (start, drain, gate, watchers) tell the actor. A channel of their own, so
/// that these modules need nothing of the actor's: imports flow actor -> launch -> process.
#[derive(Debug)]
pub(crate) enum ProcEvent {
    /// The workload runs; the actor owns its stdin from now on (the start is acknowledged once
    /// it does, so that a write that follows finds the stdin).
    Spawned {
        handle: Handle,
        stdin: InputEnd,
        handled: Handled,
    },
    /// A start that recorded nothing: the admission is given back (before the start's refusal
    /// is answered, so that a retry finds it free).
    Abandoned { handle: Handle, handled: Handled },
    /// Enforcing a fired deadline failed (traced and recorded): the sweep tries again later.
    DeadlineFailed { handle: Handle },
    /// Input was written to a process marked as waiting for human input: the mark is cleared.
    InputWritten { handle: Handle },
    /// The terminal gate passed.
    Finished {
        handle: Handle,
        summary: TerminalSummary,
        lingering: bool,
        /// Nothing proved the tree gone and nothing watches it any more (its guardian died):
        /// the actor holds its capacity and re-assesses it.
        unverified: bool,
        /// The gate wakes waiters only once the actor handled this.
        handled: Handled,
    },
    /// The last member of a lingering tree is gone (`proven`: and something proved it).
    TreeEmpty { handle: Handle, proven: bool },
    /// Held trees whose exit the periodic assessment proved (their releases are recorded).
    Assessed { released: Vec<Handle> },
    /// A background snapshot ended (written, failed, or not due after all).
    Snapshotted,
    /// A retention pass ended; `retired`: the handles whose output it removed. `scheduled`: the
    /// periodic pass (which schedules the next), not one on demand.
    Retired {
        retired: Vec<Handle>,
        scheduled: bool,
    },
    /// Admission's inputs: the host (`None`: the sample task failed) and a sample of each tree.
    Sampled {
        host: Option<crate::admission::HostSample>,
        trees: Vec<(Handle, crate::tree::TreeSample)>,
    },
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
    /// How the drain left each output stream: in memory only (the journal keeps the
    /// process-wide `capture`), so `None` for a summary read back from the journal, and for a
    /// process whose output was never drained (its launch failed).
    pub drained: Option<Drained>,
}

/// How the drain left one output stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainEnd {
    /// End of file (a terminal's EIO once no slave descriptor is left included): every byte
    /// written to it was read.
    Eof,
    /// Still open when the final-drain window after the workload's exit ended: a descendant
    /// holds it, and what it writes from then on is not read.
    Open,
    /// Reading it failed, or the spool could not be created for what was read.
    Failed(String),
}

/// How the drain left each stream of one process, with the window that cut off open ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drained {
    /// stdout, or a PTY launch's terminal.
    pub first: (Stream, DrainEnd),
    /// stderr; `None` for a PTY launch (its terminal carries both).
    pub stderr: Option<DrainEnd>,
    /// The final-drain window (`SupervisorConfig::final_drain`) that applied.
    pub final_drain: Duration,
}

/// Where a process's spool goes, created at its first output byte: a process that never
/// writes costs no directory and no file.
#[derive(Debug, Clone)]
pub(crate) struct SpoolAt {
    pub dir: std::path::PathBuf,
    pub options: crate::spool::SpoolOptions,
    pub buffer_bytes: usize,
}

#[derive(Debug)]
pub(crate) struct Proc {
    pub handle: Handle,
    pub ids: LifecycleIds,
    spool_at: SpoolAt,
    /// The deadlines' clocks (`deadline.rs`): started at the spawn, touched by activity.
    pub clocks: Clocks,
    /// Set once, when the workload was launched.
    pub tree: OnceLock<Arc<dyn ProcessTree>>,
    /// A PTY launch's terminal (its master), set once at the launch: what `resize` sizes.
    pub terminal: OnceLock<Arc<PtyMaster>>,
    /// `None` before the spool exists and after terminalization closed it.
    pub output: Lock<Option<Output>>,
    pub output_changed: Notify,
    cause: AtomicU8,
    /// The drain saw the leader's exit. A stop, shutdown or deadline that comes after it is no
    /// cause of the process's end (its descendants may still be torn down): the process is
    /// recorded with the status it exited with on its own.
    leader_exited: AtomicBool,
    /// SIGKILL had to be sent while the leader was unreaped.
    pub escalated: AtomicBool,
    /// The first loss of output was logged (once per process, not once per chunk).
    loss_logged: AtomicBool,
    /// Who publishes `running` (first claim wins): the start task after
    /// `RUNNING_PUBLICATION_DELAY_MS`, or the terminal publication of a process that ended
    /// sooner, which publishes it first. Exactly once, and always before the terminal notice.
    running_claim: AtomicU8,
    /// The start task's publication of `running` is done (the terminal one waits for it).
    running_published: watch::Sender<bool>,
    /// Clients waiting for the exit now (bounded by `WAITERS_PER_PROCESS_MAX`).
    waiters: AtomicUsize,
    gate: AtomicBool,
    pub exited: watch::Sender<Option<TerminalSummary>>,
}

impl Proc {
    pub fn new(handle: Handle, ids: LifecycleIds, spool_at: SpoolAt, clocks: Clocks) -> Self {
        Proc {
            handle,
            ids,
            spool_at,
            clocks,
            tree: OnceLock::new(),
            terminal: OnceLock::new(),
            loss_logged: AtomicBool::new(false),
            running_claim: AtomicU8::new(0),
            running_published: watch::channel(false).0,
            output: Lock::new(None),
            output_changed: Notify::new(),
            cause: AtomicU8::new(0),
            leader_exited: AtomicBool::new(false),
            escalated: AtomicBool::new(false),
            waiters: AtomicUsize::new(0),
            gate: AtomicBool::new(false),
            exited: watch::channel(None).0,
        }
    }

    /// Claims the publication of `running` for `by`; false when the other claimer has it.
    pub fn claim_running_publication(&self, by: RunningPublisher) -> bool {
        self.running_claim
            .compare_exchange(0, by as u8, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The start task is done publishing `running` (whether the host took it or not).
    pub fn running_publication_done(&self) {
        self.running_published.send_replace(true);
    }

    /// Waits until the start task's publication of `running` is done, bounded as a host call
    /// is (it never takes longer unless the task was lost, and then nothing is gained waiting).
    pub async fn running_publication_finished(&self) {
        let mut done = self.running_published.subscribe();
        let bound = Duration::from_millis(limits::SERVICE_CALL_MS);
        let _ = tokio::time::timeout(bound, done.wait_for(|done| *done)).await;
    }

    /// Counts one more waiter, or `None` at the bound; the guard uncounts it.
    pub fn waiter(&self) -> Option<Waiter<'_>> {
        let max = crate::limits::WAITERS_PER_PROCESS_MAX;
        self.waiters
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Waiter(&self.waiters))
    }

    pub fn is_terminal(&self) -> bool {
        self.exited.borrow().is_some()
    }

    /// The terminal gate has been passed: the result may not be persisted yet, but the output
    /// writer may already be gone.
    pub fn terminalizing(&self) -> bool {
        self.gate.load(Ordering::SeqCst)
    }

    pub fn summary(&self) -> Option<TerminalSummary> {
        self.exited.borrow().clone()
    }

    /// Records why the supervisor ends the process, and says whether this cause now stands. The
    /// first cause stays, except that an interrupt (which the workload may ignore) gives way to
    /// a stop, timeout or shutdown that follows it: a process that ignored SIGINT and was then
    /// killed by a stop is `killed`. Once the drain saw the leader's exit nothing becomes a cause
    /// (false): the process ended on its own, with the status it has. (A leader that exits
    /// between this check and the signal is still counted as stopped: nothing tells the two
    /// apart later.)
    pub fn set_cause(&self, cause: Cause) -> bool {
        if self.leader_exited() {
            return false;
        }
        let mut current = self.cause.load(Ordering::SeqCst);
        loop {
            let replaceable =
                current == 0 || (current == Cause::Interrupt as u8 && cause != Cause::Interrupt);
            if !replaceable {
                return Cause::from_u8(current) == Some(cause);
            }
            match self.cause.compare_exchange(
                current,
                cause as u8,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => current = now,
            }
        }
    }

    /// Whether the drain saw the leader exit (its descendants may still hold its pipes).
    pub fn leader_exited(&self) -> bool {
        self.leader_exited.load(Ordering::SeqCst)
    }

    pub fn cause(&self) -> Option<Cause> {
        Cause::from_u8(self.cause.load(Ordering::SeqCst))
    }

    /// Appends what one pass of the drain read and flushes it, under one lock: the bytes are in
    /// the spool's files (for readers in other processes, and a crash of the supervisor) before
    /// the drain reads again. An error means no spool could be opened at all (its bytes are
    /// not counted: the capture has failed).
    fn append_output(&self, stream: Stream, bytes: &[u8]) -> Result<(), crate::spool::SpoolError> {
        let result = {
            let mut output = self.output.lock();
            if output.is_none() {
                // The first byte: the spool is created now (a mkdir and a file, no sync: its
                // first checkpoint syncs the directory entry).
                let at = &self.spool_at;
                let (mut spool, _) = crate::spool::Spool::open_writer(
                    &at.dir,
                    self.handle.0.as_bytes(),
                    at.options,
                )?;
                // Retention's removals go to the syncs' blocking thread, not this one.
                spool.defer_removals();
                *output = Some(Output::new(spool, at.buffer_bytes));
            }
            match output.as_mut() {
                Some(output) => {
                    // A failed write is not an error of the capture: the spool counted the bytes
                    // into a gap with its reason, which every read, the journal and the
                    // capture status report.
                    let _ = output.append(stream, bytes).and_then(|()| output.flush());
                    self.log_first_loss(output);
                    Ok(())
                }
                None => Err(crate::spool::SpoolError::ReadOnly),
            }
        };
        self.output_changed.notify_waiters();
        result
    }

    /// Logs the process's first lost output, once: a disk that stays full fails every pass of
    /// the drain, and one line says it (the gap itself is in every read, the journal and `ps`).
    fn log_first_loss(&self, output: &Output) {
        if let Some(gap) = output.spool().gaps().first()
            && !self.loss_logged.swap(true, Ordering::SeqCst)
        {
            warn!(
                handle = %self.handle,
                cursor = gap.from,
                reason = %gap.describe(),
                "output lost: recorded as a gap (readers see it; capture will be incomplete)"
            );
        }
    }

    /// Total bytes of output so far (0 without a spool).
    pub fn total_bytes(&self) -> u64 {
        self.output
            .lock()
            .as_ref()
            .map_or(0, |o| o.spool().total_bytes())
    }

    /// Syncs the spool and returns its durable bounds (zero without a spool). The `fdatasync`s
    /// run on a blocking thread without the output lock, so appends (the drain task) and reads
    /// (`output` callers) go on meanwhile; the bounds are those planned before the syncs began.
    ///
    /// Also returns the gaps (lost output) below those bounds not yet recorded: the caller
    /// records them in the journal before the bounds, then says so with [`Proc::gaps_recorded`].
    pub async fn sync_output(&self) -> Result<(CursorBounds, Vec<Gap>), crate::spool::SpoolError> {
        let plan = match self.output.lock().as_mut() {
            Some(output) => output.plan_sync()?,
            None => return Ok((CursorBounds::default(), Vec::new())),
        };
        let done = if plan.is_empty() {
            plan.run()
        } else {
            match tokio::task::spawn_blocking(move || plan.run()).await {
                Ok(done) => done,
                Err(e) => {
                    if let Some(output) = self.output.lock().as_mut() {
                        output.abandon_sync();
                    }
                    return Err(crate::spool::SpoolError::Io {
                        op: "sync task",
                        cause: std::io::Error::other(e.to_string()),
                    });
                }
            }
        };
        match self.output.lock().as_mut() {
            Some(output) => {
                let finished = output.finish_sync(done);
                self.log_first_loss(output);
                let (retained_from, total_bytes) = finished?;
                let gaps = output.spool().unrecorded_gaps(total_bytes);
                Ok((
                    CursorBounds {
                        retained_from,
                        total_bytes,
                    },
                    gaps,
                ))
            }
            None => Ok((CursorBounds::default(), Vec::new())),
        }
    }

    /// The spool's spares go to its removals if its window has stopped turning over
    /// ([`crate::spool::Spool::retire_idle_spares`]); true when some did.
    pub fn retire_idle_spares(&self) -> bool {
        self.output
            .lock()
            .as_mut()
            .is_some_and(|output| output.retire_idle_spares())
    }

    /// Removes, on a blocking thread, the files of segments retention dropped from the window
    /// (none without a spool). Syncs nothing and makes nothing durable; a file that cannot be
    /// removed is left, with those after it, to the next sync.
    pub async fn remove_dropped_output(&self) {
        let plan = match self.output.lock().as_ref() {
            Some(output) => output.plan_removals(),
            None => return,
        };
        if plan.is_empty() {
            return;
        }
        let Ok(done) = tokio::task::spawn_blocking(move || plan.run()).await else {
            // Lost with its task: the files stay on the spool's list for the next plan.
            return;
        };
        if let Some(output) = self.output.lock().as_mut() {
            // It synced nothing, so it cannot fail: only its removed names are taken.
            let _ = output.finish_sync(done);
        }
    }

    /// Bytes of output the window of this process's spool keeps (0 without a spool).
    pub fn retention_bytes(&self) -> u64 {
        self.output
            .lock()
            .as_ref()
            .map_or(0, |o| o.spool().retention_bytes())
    }

    /// The gaps [`Proc::sync_output`] returned below `upto` are in the journal now.
    pub fn gaps_recorded(&self, upto: u64) {
        if let Some(output) = self.output.lock().as_mut() {
            output.gaps_recorded(upto);
        }
    }

    /// How much output was lost so far, for the capture status: `None` when nothing was.
    pub fn loss(&self) -> Option<String> {
        crate::spool::loss::summary(self.output.lock().as_ref()?.spool().gaps())
    }

    /// Reads live output; `None` once terminalization closed the spool writer (the caller then
    /// reads the finished spool).
    pub fn read_output(
        &self,
        cursor: u64,
        max_bytes: usize,
    ) -> Option<Result<crate::spool::SpoolRead, crate::spool::SpoolError>> {
        self.output
            .lock()
            .as_ref()
            .map(|output| output.read(cursor, max_bytes))
    }
}

/// One counted waiter of a process.
#[derive(Debug)]
pub(crate) struct Waiter<'a>(&'a AtomicUsize);

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A spool sync (and maybe its journal record) running beside the drain; it yields the output
/// total the journal records once it is done.
type SyncTask = Pin<Box<dyn Future<Output = u64> + Send>>;

/// A sync task that only removes the files retention dropped (and spares given up), syncing
/// nothing: the bytes recorded stay at `recorded`.
fn removals_only(proc: Arc<Proc>, recorded: u64) -> SyncTask {
    Box::pin(async move {
        proc.remove_dropped_output().await;
        recorded
    })
}

/// The supervisor's end of a workload's input: its stdin pipe, or its terminal's master.
#[derive(Debug)]
pub(crate) enum InputEnd {
    Pipe(pipe::Sender),
    Terminal(Arc<PtyMaster>),
}

impl InputEnd {
    /// One write of some of `bytes`, waiting for room; how many were written.
    pub async fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        use tokio::io::AsyncWriteExt;
        match self {
            InputEnd::Pipe(p) => p.write(bytes).await,
            InputEnd::Terminal(m) => m.write(bytes).await,
        }
    }
}

/// The supervisor's end of one output stream: a pipe, or a terminal's master.
#[derive(Debug)]
pub(crate) enum OutputEnd {
    Pipe(pipe::Receiver),
    Terminal(Arc<PtyMaster>),
}

impl OutputEnd {
    async fn readable(&self) -> std::io::Result<()> {
        match self {
            OutputEnd::Pipe(p) => p.readable().await,
            OutputEnd::Terminal(m) => m.readable().await,
        }
    }

    /// Reads what the stream holds now into `room`: how many bytes, none at the end of output
    /// (a terminal's EIO included). The drain's buffers are zeroed by the allocator, which in a
    /// daemon (large blocks always mapped: `heap`) maps fresh pages without writing them: a
    /// runtime thread that drains only idle processes (a readiness with nothing to read) keeps
    /// none of them resident.
    fn try_read_into(&self, room: &mut [u8]) -> std::io::Result<usize> {
        match self {
            // Through `try_io`, so that a read that would block clears the readiness.
            OutputEnd::Pipe(p) => p.try_io(|| Ok(rustix::io::read(p, &mut *room)?)),
            OutputEnd::Terminal(m) => m.try_read(room),
        }
    }

    /// Bytes waiting to be read (`FIONREAD`).
    fn pending(&self) -> std::io::Result<u64> {
        match self {
            OutputEnd::Pipe(p) => Ok(rustix::io::ioctl_fionread(p)?),
            OutputEnd::Terminal(m) => m.pending(),
        }
    }
}

/// What the drain of one launched workload owns.
pub(crate) struct Launched {
    pub proc: Arc<Proc>,
    pub tree: Arc<dyn ProcessTree>,
    /// stdout, or a PTY launch's terminal.
    pub stdout: OutputEnd,
    /// `None` for a PTY launch (its terminal carries both).
    pub stderr: Option<OutputEnd>,
    pub lease: Option<Box<dyn Lease>>,
    /// A live copy of the output for one consumer, with backpressure.
    pub tap: Option<Tap>,
}

/// Reads both streams into the spool (each read is activity for the idle deadline; the actor's
/// sweep enforces the deadlines), checkpoints cursor bounds, and terminalizes when the leader has exited and its output is drained.
///
/// Spool syncs run beside the reads, one at a time (so checkpoint records reach the journal in
/// order, each with bounds no smaller than the last): every `checkpoint_interval` a checkpoint
/// syncs and records the durable bounds, and in between, once `write_behind_bytes` more were
/// appended, a sync without a record starts writing them back, so that the disk works while the
/// pipes are read and the final checkpoint finds little left to sync.
///
/// The final-drain window and a tap: the window exists for descendants that keep a pipe open,
/// not for bytes the workload itself wrote. So at the leader's exit the drain asks the kernel
/// how many bytes each pipe holds (`FIONREAD`): every byte the leader wrote is by then either
/// read or among them (pipes are FIFO), and the window starts only once that many have been
/// read. A consumer of the tap may take as long as it likes over those bytes (a workload that
/// wrote 256 MiB and exited while `run`'s reader dawdled still has every byte delivered), yet
/// the wait is bounded in bytes, at most a pipe's worth per stream, so a descendant that writes
/// without end after the exit cannot stretch it: the window then runs in wall-clock time as
/// it does without a tap. (Rejected: pausing the window while the drain waits for the tap, or
/// restarting it while bytes flow. Behind a slow consumer, either lets a descendant that writes
/// on after the exit keep the result back far beyond the window, and the restart for as long as
/// it writes.)
pub(crate) async fn drain(shared: Arc<Shared>, actor: mpsc::Sender<ProcEvent>, launched: Launched) {
    let Launched {
        proc,
        tree,
        stdout,
        stderr,
        lease,
        tap,
    } = launched;
    let window = proc.retention_bytes();
    let mut pump = Pump::new(stdout, stderr, Tapping::new(tap), window);
    let final_drain = shared.config.final_drain;
    pump.run(&shared, &proc, &tree).await;
    // Boxed, as the start task's steps that run once are (`launch::start`): the task keeps
    // only the loop's state while the process runs.
    let (status, capture, drained) = Box::pin(pump.finish(final_drain)).await;
    let (state, exit, reason) = classify(&proc, status);
    let (lingering, released) = tree_verdict(&tree).await;
    let unverified = released.is_none() && !lingering && tree.mechanism() != Mechanism::Group;
    let outcome = Outcome {
        state,
        exit,
        capture,
        reason,
        lingering,
        released,
        unverified,
        drained: Some(drained),
    };
    Box::pin(terminalize(&shared, &actor, &proc, lease, outcome)).await;
    // A guardian exits right after it reports its tree gone, and is our child until reaped:
    // reap it here, after the result is out (bounded), rather than leave it to the tree's drop,
    // whose one non-blocking try a busy machine can beat (a zombie per process).
    if tree.surely_empty() && tree.mechanism() != Mechanism::Group {
        let _ = tokio::time::timeout(
            Duration::from_millis(limits::GUARDIAN_REAP_MS),
            tree.wait_empty(),
        )
        .await;
    }
}

/// Whether members of `tree` outlived its leader, and the proof of its exit if it has one.
async fn tree_verdict(tree: &Arc<dyn ProcessTree>) -> (bool, Option<ExitProof>) {
    // A guardian reports the tree gone right after the workload's exit when nothing outlived
    // it (its receipt is written at ECHILD): give it a moment, so that the common case ends
    // with its proof instead of as a lingering tree. Its own exit is not waited for here.
    if !tree.surely_empty() {
        let _ = tokio::time::timeout(
            Duration::from_millis(limits::TREE_PROOF_WAIT_MS),
            tree.wait_proven(),
        )
        .await;
    }
    // Usually one probe answers; only a tree that may have members left is scanned, and a
    // receipt is read, on the blocking pool.
    if tree.surely_empty() && tree.mechanism() == Mechanism::Group {
        // Nothing to scan and nothing to read: a group cannot prove its exit.
        return (false, None);
    }
    let tree = Arc::clone(tree);
    tokio::task::spawn_blocking(move || {
        let lingering = !tree.surely_empty() && matches!(tree.members(), Ok(n) if n > 0);
        (lingering, tree.exit_proof())
    })
    .await
    .unwrap_or((false, None))
}

/// What the drain of one process keeps while it pumps: its pipes until their end, the
/// leader's exit once reaped, each stream's first failure, and where its checkpoints stand.
struct Pump {
    stdout: Option<OutputEnd>,
    stderr: Option<OutputEnd>,
    /// stdout's stream: a terminal's bytes are one stream of their own.
    out_stream: Stream,
    has_stderr: bool,
    tapping: Tapping,
    /// Bytes the pipes held at the leader's exit not read yet (see above).
    owed: Owed,
    status: Option<std::io::Result<LeaderExit>>,
    capture_failure: Option<String>,
    /// Each stream's own first failure, for `Drained` (capture reports per stream).
    out_failure: Option<String>,
    err_failure: Option<String>,
    sync_task: Option<SyncTask>,
    /// Output total the journal's last checkpoint names.
    recorded: u64,
    /// A checkpoint is due but waits for the sync in flight.
    record_due: bool,
    /// The spool gave up its spares (its window stopped turning over): a plan is to remove them.
    spares_idle: bool,
    /// Bytes appended since the last sync was planned, and when that was (the pump's start
    /// before the first): the rate the window turns over at (see [`window_turns_over`]).
    unsynced: u64,
    unsynced_since: tokio::time::Instant,
    /// Bytes the spool's window keeps.
    window: u64,
    drain_deadline: Option<tokio::time::Instant>,
}

impl Pump {
    fn new(stdout: OutputEnd, stderr: Option<OutputEnd>, tapping: Tapping, window: u64) -> Pump {
        let out_stream = match stdout {
            OutputEnd::Pipe(_) => Stream::Stdout,
            OutputEnd::Terminal(_) => Stream::Terminal,
        };
        Pump {
            has_stderr: stderr.is_some(),
            stdout: Some(stdout),
            stderr,
            out_stream,
            tapping,
            owed: Owed::default(),
            status: None,
            capture_failure: None,
            out_failure: None,
            err_failure: None,
            sync_task: None,
            recorded: 0,
            record_due: false,
            spares_idle: false,
            unsynced: 0,
            unsynced_since: tokio::time::Instant::now(),
            window,
            drain_deadline: None,
        }
    }

    /// Reads both streams into the spool until both ended after the leader's exit, or the
    /// final drain ran out; syncs and checkpoints on the way.
    async fn run(&mut self, shared: &Arc<Shared>, proc: &Arc<Proc>, tree: &Arc<dyn ProcessTree>) {
        let final_drain = shared.config.final_drain;
        let tick = tokio::time::sleep_until(
            tokio::time::Instant::now() + shared.config.checkpoint_interval,
        );
        tokio::pin!(tick);
        let mut leader = tree.wait_leader();
        loop {
            self.plan_sync(shared, proc);
            if self.stdout.is_none() && self.stderr.is_none() && self.status.is_some() {
                break;
            }
            if self.status.is_some()
                && self.drain_deadline.is_none()
                && self.owed.settled(&self.stdout, &self.stderr)
            {
                self.drain_deadline = Some(tokio::time::Instant::now() + final_drain);
            }
            tokio::select! {
                r = readable(&self.stdout), if self.stdout.is_some() && self.tapping.may_read() => {
                    let which = self.out_stream;
                    let r = r.and_then(|()| drain_ready(proc, &self.stdout, which, &mut self.tapping));
                    self.read(which, r);
                }
                r = readable(&self.stderr), if self.stderr.is_some() && self.tapping.may_read() => {
                    let r = r.and_then(|()| {
                        drain_ready(proc, &self.stderr, Stream::Stderr, &mut self.tapping)
                    });
                    self.read(Stream::Stderr, r);
                }
                room = self.tapping.room(), if self.tapping.waiting() => self.tapping.reserved(room),
                s = &mut leader, if self.status.is_none() => {
                    proc.leader_exited.store(true, Ordering::SeqCst);
                    self.status = Some(s);
                    self.owed = Owed::at_exit(&self.stdout, &self.stderr);
                }
                () = sleep_until_opt(self.drain_deadline), if self.drain_deadline.is_some() => {
                    break;
                }
                done = run_opt(&mut self.sync_task), if self.sync_task.is_some() => {
                    self.sync_task = None;
                    self.recorded = done;
                }
                () = &mut tick => {
                    tick.as_mut().reset(tokio::time::Instant::now() + shared.config.checkpoint_interval);
                    self.record_due = true;
                    self.spares_idle |= proc.retire_idle_spares();
                }
            }
        }
    }

    /// Starts a sync (and a checkpoint, when one is due) unless one is in flight. Between
    /// checkpoints, once `write_behind_bytes` more were appended: a sync without a record, or,
    /// when the window turns over within a checkpoint interval at the rate they came, only the
    /// removal of the segments retention dropped (most of what that sync would write back to
    /// disk is dropped before the next checkpoint, which then syncs at most the window).
    fn plan_sync(&mut self, shared: &Arc<Shared>, proc: &Arc<Proc>) {
        if self.sync_task.is_some() {
            return;
        }
        let record = std::mem::take(&mut self.record_due) && proc.total_bytes() > self.recorded;
        // At least one byte: a write-behind of 0 means "after every append", and must not
        // start sync after sync while nothing arrives.
        let write_behind = shared.config.write_behind_bytes;
        let behind = write_behind.is_some_and(|w| self.unsynced >= w.max(1));
        // Any plan removes the spares a quiet window gave up; without output, one of its own.
        let idle = std::mem::take(&mut self.spares_idle);
        if !record && !behind {
            if idle {
                self.sync_task = Some(removals_only(Arc::clone(proc), self.recorded));
            }
            return;
        }
        let now = tokio::time::Instant::now();
        let turns_over = window_turns_over(
            self.unsynced,
            now.saturating_duration_since(self.unsynced_since),
            shared.config.checkpoint_interval,
            self.window,
        );
        self.unsynced = 0;
        self.unsynced_since = now;
        let proc = Arc::clone(proc);
        self.sync_task = Some(if record || !turns_over {
            Box::pin(sync_and_record(
                Arc::clone(shared),
                proc,
                record,
                self.recorded,
            ))
        } else {
            removals_only(proc, self.recorded)
        });
    }

    /// Takes what one read of stream `which` did: bytes counted, a failure kept, an end.
    fn read(&mut self, which: Stream, r: Result<Read, String>) {
        let (end, failure) = if which == Stream::Stderr {
            (&mut self.stderr, &mut self.err_failure)
        } else {
            (&mut self.stdout, &mut self.out_failure)
        };
        let failed = match r {
            Ok(Read::Eof) => {
                *end = None;
                None
            }
            Ok(Read::Bytes(n, failed)) => {
                self.owed.read(which, n);
                self.unsynced += n as u64;
                failed
            }
            Ok(Read::Nothing) => None,
            Err(e) => {
                *end = None;
                Some(e)
            }
        };
        if let Some(e) = failed {
            self.capture_failure.get_or_insert_with(|| e.clone());
            failure.get_or_insert(e);
        }
    }

    /// Ends the pumping: the tap closed, the sync in flight finished (a checkpoint record must
    /// not follow the terminal event), and the leader's status, the capture's and the streams'.
    async fn finish(
        mut self,
        final_drain: Duration,
    ) -> (std::io::Result<LeaderExit>, CaptureStatus, Drained) {
        // The consumer sees the end of the tap now, not after the syncs and proofs that follow.
        drop(self.tapping);
        if let Some(task) = self.sync_task.take() {
            task.await;
        }
        let open_streams = usize::from(self.stdout.is_some()) + usize::from(self.stderr.is_some());
        let end_of = |open: bool, failure: Option<String>| match failure {
            Some(reason) => DrainEnd::Failed(reason),
            None if open => DrainEnd::Open,
            None => DrainEnd::Eof,
        };
        let drained = Drained {
            first: (
                self.out_stream,
                end_of(self.stdout.is_some(), self.out_failure),
            ),
            stderr: self
                .has_stderr
                .then(|| end_of(self.stderr.is_some(), self.err_failure)),
            final_drain,
        };
        // The loop ends only once the leader was reaped.
        let status = self
            .status
            .unwrap_or_else(|| Err(std::io::Error::other("the leader was not reaped")));
        let capture = match (self.capture_failure, open_streams) {
            (Some(reason), _) => CaptureStatus::Failed(reason),
            (None, 0) => CaptureStatus::Complete,
            (None, n) => CaptureStatus::Incomplete(format!(
                "{n} stream(s) still open {} ms after the workload exited (a descendant holds them)",
                final_drain.as_millis()
            )),
        };
        (status, capture, drained)
    }
}

thread_local! {
    /// The read buffer of every drain on this thread: a read and its append to the spool happen
    /// without an await between them, so one buffer per runtime thread serves all processes,
    /// and an idle process holds no read buffer at all.
    static SCRATCH: std::cell::RefCell<ReadBuf> = const { std::cell::RefCell::new(ReadBuf::new()) };
}

/// Resolves once `stream` may have bytes (or EOF) to read.
async fn readable(stream: &Option<OutputEnd>) -> Result<(), String> {
    match stream {
        Some(s) => s
            .readable()
            .await
            .map_err(|e| format!("waiting on an output stream: {e}")),
        None => std::future::pending().await,
    }
}

/// What one read of a ready pipe did.
enum Read {
    Eof,
    /// Bytes read, and the spool's failure to keep them, if it failed.
    Bytes(usize, Option<String>),
    /// The readiness had nothing after all.
    Nothing,
}

/// Reads what `stream` holds now into this thread's scratch buffer, appends it to the spool and
/// hands it to the tap (whose room the caller holds, if it has a tap). An error is the pipe's:
/// the stream is done.
fn drain_ready(
    proc: &Proc,
    stream: &Option<OutputEnd>,
    which: Stream,
    tap: &mut Tapping,
) -> Result<Read, String> {
    let Some(pipe) = stream else {
        return Ok(Read::Nothing);
    };
    // With room in a tap, into a buffer that becomes the tap's chunk as it is.
    if let Some(mut own) = tap.buffer() {
        return match pipe.try_read_into(own.room(READ_BYTES)) {
            Ok(n) if n > 0 => {
                let kept = keep(proc, which, own.bytes(n));
                tap.send(which, own, n);
                Ok(Read::Bytes(n, kept.err()))
            }
            other => {
                tap.put_back(own);
                nothing_read(other.map(|_| ()), which)
            }
        };
    }
    SCRATCH.with_borrow_mut(|buf| match pipe.try_read_into(buf.room(READ_BYTES)) {
        Ok(0) => Ok(Read::Eof),
        Ok(n) => {
            let kept = keep(proc, which, buf.bytes(n));
            Ok(Read::Bytes(n, kept.err()))
        }
        Err(e) => nothing_read(Err(e), which),
    })
}

/// Appends bytes just read to the spool. A spool failure is recorded, and reading goes on: the
/// workload must never block on a full pipe because its output could not be kept (and a tap's
/// live copy goes on whatever became of the durable one).
fn keep(proc: &Proc, which: Stream, bytes: &[u8]) -> Result<(), String> {
    proc.clocks.touch();
    proc.append_output(which, bytes).map_err(|e| e.to_string())
}

/// A read that brought no bytes: `Ok` is the end of the stream.
fn nothing_read(read: std::io::Result<()>, which: Stream) -> Result<Read, String> {
    match read {
        Ok(()) => Ok(Read::Eof),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(Read::Nothing),
        Err(e) => Err(format!("reading {}: {e}", stream_name(which))),
    }
}

/// Bytes the pipes held when the leader's exit was seen and the drain has not read yet: the
/// leader's last output is among them, and the final-drain window starts only after them.
#[derive(Debug, Default, Clone, Copy)]
struct Owed {
    stdout: u64,
    stderr: u64,
}

impl Owed {
    fn at_exit(stdout: &Option<OutputEnd>, stderr: &Option<OutputEnd>) -> Owed {
        Owed {
            stdout: pipe_holds(stdout),
            stderr: pipe_holds(stderr),
        }
    }

    fn read(&mut self, which: Stream, n: usize) {
        let owed = match which {
            Stream::Stdout | Stream::Terminal => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        *owed = owed.saturating_sub(n as u64);
    }

    /// Nothing is owed on a stream that is still open (a closed one owes nothing more).
    fn settled(&self, stdout: &Option<OutputEnd>, stderr: &Option<OutputEnd>) -> bool {
        (stdout.is_none() || self.stdout == 0) && (stderr.is_none() || self.stderr == 0)
    }
}

/// Bytes a pipe holds now. When the kernel cannot say, none: the window then starts at the
/// exit, as it did before taps, which may cut a slow consumer short (the capture then says
/// so); owing a guessed amount instead could wait for bytes that never come while a
/// descendant holds the pipe open.
fn pipe_holds(stream: &Option<OutputEnd>) -> u64 {
    let Some(end) = stream else {
        return 0;
    };
    end.pending().unwrap_or_else(|e| {
        warn!(error = %e, "FIONREAD on an output pipe failed; the final drain starts now");
        0
    })
}

fn stream_name(which: Stream) -> &'static str {
    match which {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
        Stream::Terminal => "the terminal",
    }
}

/// Whether output arriving at the rate of `bytes` in `over` turns a window of `window` bytes
/// over within one checkpoint `interval`: then every segment a sync wrote back now would be
/// dropped before the next checkpoint. Measured on this kind of machine, a write-behind every
/// 8 MiB made a 1 GiB capture through the default 64 MiB window 15-20 % slower than syncing only
/// at checkpoints, and saved 20-25 ms at the exit of a 48 MiB burst (its final sync).
fn window_turns_over(bytes: u64, over: Duration, interval: Duration, window: u64) -> bool {
    // Saturating: nanoseconds of a `Duration` times bytes can pass even u128 (not at any rate
    // a pipe delivers, where both products are far below it).
    let came = u128::from(bytes).saturating_mul(interval.as_nanos());
    bytes > 0 && came >= u128::from(window).saturating_mul(over.as_nanos())
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

/// Maps the leader's exit and the supervisor's cause to the terminal state.
fn classify(proc: &Proc, status: std::io::Result<LeaderExit>) -> (State, ExitStatus, String) {
    let exit = match status {
        Ok(LeaderExit::Code(code)) => ExitStatus::Code(code),
        Ok(LeaderExit::Signal(sig)) => ExitStatus::Signal(sig),
        Err(e) => {
            return (
                State::Failed,
                ExitStatus::Unknown,
                format!("waiting for the process failed: {e}"),
            );
        }
    };
    // `killed` only when SIGKILL is what ended it: an escalation that lost the race to a SIGTERM
    // exit must not be recorded as a kill.
    let killed = proc.escalated.load(Ordering::SeqCst)
        && exit == ExitStatus::Signal(nix::sys::signal::Signal::SIGKILL as i32);
    match proc.cause() {
        Some(Cause::Stop | Cause::Shutdown) if killed => (
            State::Killed,
            exit,
            "did not exit after SIGTERM and the grace period; killed".to_owned(),
        ),
        Some(Cause::Stop) => (State::Terminated, exit, "stopped".to_owned()),
        Some(Cause::Shutdown) => (State::Terminated, exit, "supervisor shut down".to_owned()),
        Some(Cause::Timeout) => {
            let reason = match proc.clocks.fired() {
                Some(Deadline::Idle) => "idle deadline reached: no activity within the idle limit",
                _ => "wall-clock limit reached",
            };
            (State::TimedOut, exit, reason.to_owned())
        }
        Some(Cause::Interrupt)
            if exit == ExitStatus::Signal(nix::sys::signal::Signal::SIGINT as i32)
                || exit == ExitStatus::Code(130) =>
        {
            (State::Interrupted, exit, "interrupted".to_owned())
        }
        Some(Cause::Interrupt) | None => (State::Exited, exit, "exited".to_owned()),
    }
}

/// Syncs the spool; with `record`, then appends its durable bounds to the journal as a
/// checkpoint when they go past `recorded` (the total the last checkpoint names). Returns the
/// total the journal's last checkpoint now names.
async fn sync_and_record(shared: Arc<Shared>, proc: Arc<Proc>, record: bool, recorded: u64) -> u64 {
    let (bounds, gaps) = match proc.sync_output().await {
        Ok(synced) => synced,
        Err(e) => {
            // A failed sync lost output (recorded as a gap by the spool, logged once); the next
            // checkpoint goes on from the next segment.
            debug!(handle = %proc.handle, error = %e, "spool checkpoint failed");
            return recorded;
        }
    };
    // Lost output is recorded before any bounds that reach past it, so that the journal tells
    // the loss from damage. Without its record, no bounds beyond it are recorded either.
    for gap in &gaps {
        let event = LifecycleEvent::OutputGap(OutputGap {
            handle: proc.handle,
            gap: *gap,
            at_unix_ms: super::now_unix_ms(),
        });
        if let Err(e) = shared.append(EventId::new_v7(), event).await {
            warn!(handle = %proc.handle, error = %e, "output gap not recorded");
            return recorded;
        }
    }
    proc.gaps_recorded(bounds.total_bytes);
    if !record || bounds.total_bytes <= recorded {
        return recorded;
    }
    let event = LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
        handle: proc.handle,
        bounds,
        at_unix_ms: super::now_unix_ms(),
    });
    match shared.append(EventId::new_v7(), event).await {
        Ok(_) => bounds.total_bytes,
        Err(e) => {
            warn!(handle = %proc.handle, error = %e, "output checkpoint not recorded");
            recorded
        }
    }
}

/// How a process ended, for the gate.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub state: State,
    pub exit: ExitStatus,
    pub capture: CaptureStatus,
    pub reason: String,
    /// Members of its tree outlived the leader.
    pub lingering: bool,
    /// What proved the whole tree gone, when something did by the terminal event.
    pub released: Option<ExitProof>,
    /// No proof, no lingering watch, and a mechanism that can prove an exit (a guardian that
    /// died): the tree stays `unverified`, holding its capacity.
    pub unverified: bool,
    /// How the drain left each stream (`None`: nothing was drained).
    pub drained: Option<Drained>,
}

/// The one-shot gate every terminal path goes through.
pub(crate) async fn terminalize(
    shared: &Arc<Shared>,
    actor: &mpsc::Sender<ProcEvent>,
    proc: &Arc<Proc>,
    lease: Option<Box<dyn Lease>>,
    outcome: Outcome,
) {
    if proc.gate.swap(true, Ordering::SeqCst) {
        return;
    }
    let (lingering, unverified) = (outcome.lingering, outcome.unverified);
    let span = tracing::info_span!("terminalize", handle = %proc.handle, state = %outcome.state);
    // Instrumented rather than entered: the span must not stay entered on this thread while the
    // task is suspended at an await.
    let (summary, retire) = terminal::record(shared, proc, outcome)
        .instrument(span)
        .await;
    // The receipt, whose proof is durable now: its unlink (a metadata write of the file system,
    // often waiting behind the journal's sync) is nothing a waiter needs, so it runs beside
    // the steps that follow rather than after them, and is joined last.
    let retiring = retire.then(|| {
        let (shared, handle) = (Arc::clone(shared), proc.handle);
        tokio::task::spawn_blocking(move || retire_receipt(&shared, handle))
    });
    // 3. The spool writer's descriptors and buffers go now; readers use the finished spool.
    let output = proc.output.lock().take();
    drop(output);
    // 4. The lease, before any host publication.
    if let Some(lease) = lease {
        super::publish::release_lease(lease).await;
    }
    tracing::info!(handle = %proc.handle, state = %summary.state, "ended");
    // 5. The actor releases capacity and queues the publication (a slow host holds nothing of
    // ours), before the waiters wake: what a woken waiter asks next sees the capacity released.
    report_handled(actor, |handled| ProcEvent::Finished {
        handle: proc.handle,
        summary: summary.clone(),
        lingering,
        unverified,
        handled,
    })
    .await;
    // 6. Waiters see a persisted result.
    proc.exited.send_replace(Some(summary));
    proc.output_changed.notify_waiters();
    // 7. The receipt's unlink, begun above.
    if let Some(retiring) = retiring {
        let _ = retiring.await;
    }
}

/// Records that `handle`'s tree is proven gone, durably, then retires its receipt (the record
/// now carries the proof). Refusals (a release already recorded) and failures are only logged,
/// and leave the receipt where a later assessment finds it again.
pub(crate) fn record_release_blocking(
    shared: &Shared,
    handle: Handle,
    ids: LifecycleIds,
    proof: ExitProof,
) -> bool {
    let recorded = append_release(shared, handle, ids, proof, true);
    if recorded {
        retire_receipt(shared, handle);
    }
    recorded
}

/// Appends `handle`'s release, acknowledged or not; true if it is (now) recorded.
fn append_release(
    shared: &Shared,
    handle: Handle,
    ids: LifecycleIds,
    proof: ExitProof,
    acknowledged: bool,
) -> bool {
    let event = LifecycleEvent::TreeReleased(TreeReleased {
        handle,
        proof,
        at_unix_ms: super::now_unix_ms(),
    });
    let id = ids.terminal.derived(super::derived::RELEASED);
    let appended = if acknowledged {
        shared.append_blocking(id, &event)
    } else {
        shared.append_deferred_blocking(id, &event)
    };
    match appended {
        Ok(_) => true,
        Err(e) => {
            debug!(%handle, error = %e, "tree release not recorded");
            false
        }
    }
}

/// Removes the receipt of a tree whose release is durable: every file the supervisor's
/// launches create has an end (a receipt is needed only until its proof is in the journal).
fn retire_receipt(shared: &Shared, handle: Handle) {
    let has_receipt = shared
        .lifecycle
        .lock()
        .manifest(&handle)
        .is_some_and(|m| m.scope.as_ref().is_some_and(|s| s.receipt.is_some()));
    if has_receipt
        && let Err(e) = shared.trees.remove(&format!("{handle}.receipt"))
        && e.kind() != std::io::ErrorKind::NotFound
    {
        debug!(%handle, error = %e, "receipt not removed");
    }
}

#[cfg(test)]
mod tests_read;
#[cfg(test)]
mod tests_window;
