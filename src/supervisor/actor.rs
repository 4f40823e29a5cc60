//! The one owner of the process table: a task that holds every process's entry, the admission
//! count, the finished caches and every task the supervisor runs, and takes [`Msg`]s over one
//! bounded channel (the handle/task split of the "Actors with Tokio" pattern).
//!
//! Invariants:
//! - Only this task mutates the table, the admission count, the caches and the task set. It
//!   never awaits anything but its inbox, its task set and its shutdown deadline, so no message
//!   waits behind a slow process, client or disk; everything that waits runs in a task spawned
//!   into `tasks`.
//! - Every task the supervisor runs (drains, stdin writers, teardowns, deadline teardowns,
//!   lingering-tree watchers, publications, shutdown) is in `tasks`; shutdown answers only once
//!   that set is empty or its bound passed, and the actor exits only once it is empty.
//! - A process leaves the live table at its terminal gate with every OS resource released; it
//!   stays owned as lingering while members of its tree outlive the leader; finished processes
//!   are then answered from bounded caches, the journal and the spool.
//! - Deadlines are checked by one sweep over the table (`deadline.rs`), run when the earliest
//!   deadline any live process could reach comes (never sooner than `DEADLINE_SWEEP_MIN_MS`
//!   after the last); each due deadline is enforced in a task of its own.
//! - The pause gate is one check at the top of the start path (`Shared::paused`, set under the
//!   lifecycle lock with its journal record, `gate.rs`).
//! - Messages from one task are handled in the order sent. Nothing orders two tasks' messages
//!   (nor the two channels), so the terminal gate wakes waiters only once the actor answered its
//!   `Finished`: whatever a woken waiter asks next sees the capacity released.
//! - Admission (src/admission/) is decided here and only here, in [`Actor::may_start`]: every
//!   start, fresh or queued, passes that one function. A workload holds capacity from its
//!   admission until it leaves the table and is not held (its terminal result recorded and no
//!   member of its tree left, or its lingering tree emptied, or its unverified tree proven gone).
//! - Starts that wait for capacity are admitted strictly first in, first out: a fresh start
//!   never overtakes a queued one, and the head is retried on every release and every sample.
//!   Each waits at most until its deadline, and the queue holds at most
//!   [`limits::ADMISSION_QUEUE_MAX`].

mod events;
mod input;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tracing::{Instrument, info, info_span, warn};

use super::command::PreparedProcess;
use super::process::{
    Cause, InputEnd, Proc, ProcEvent, RunningPublisher, TerminalSummary, teardown,
};
use super::{
    Refusal, Shared, ShutdownReport, StartError, Started, SupervisorError, SupervisorStats,
};
use crate::admission::{Admission, AdmissionSnapshot, Decision, HostSample};
use crate::journal::EventId;
use crate::lifecycle::event::{LifecycleIds, Scoped};
use crate::lifecycle::retention::{CleanReport, RetentionRequest};
use crate::lifecycle::{Handle, NAME_LABEL, State};
use crate::limits;
use crate::spool::Spool;
use crate::tree::{ProcessTree, TreeSignal};

type Reply<T> = oneshot::Sender<T>;

/// One write to a child's stdin, or its end.
#[derive(Debug)]
pub(crate) enum InputOp {
    Write(Vec<u8>, Reply<Result<(), String>>),
    Close(Reply<()>),
}

/// What a lookup finds.
#[derive(Debug)]
pub(crate) enum Found {
    /// Live: its output is read from the process itself.
    Live(Arc<Proc>),
    /// Not live here: a terminal summary if one is remembered, a cached reader if one is open.
    NotLive {
        summary: Option<TerminalSummary>,
        reader: Option<Arc<Spool>>,
    },
}

#[derive(Debug)]
pub(crate) enum Msg {
    Start {
        prepared: PreparedProcess,
        reply: Reply<Result<Started, StartError>>,
    },
    Lookup {
        handle: Handle,
        reply: Reply<Found>,
    },
    Stop {
        handle: Handle,
        grace: Duration,
        /// Recorded with the stop request (`StopRequested`): "stop" for a client's stop, or
        /// the fault a capture ended the process for.
        reason: String,
        reply: Reply<Result<Option<TerminalSummary>, SupervisorError>>,
    },
    Interrupt {
        handle: Handle,
        reply: Reply<Result<(), SupervisorError>>,
    },
    Stdin {
        handle: Handle,
        reply: Reply<Result<mpsc::Sender<InputOp>, SupervisorError>>,
    },
    CacheReader {
        handle: Handle,
        reader: Arc<Spool>,
    },
    Stats {
        reply: Reply<SupervisorStats>,
    },
    /// A retention pass on demand (`clean`).
    Clean {
        request: RetentionRequest,
        reply: Reply<CleanReport>,
    },
    Admission {
        reply: Reply<AdmissionSnapshot>,
    },
    /// Applies the admission limit the projection holds now (journaled by the caller; `None`:
    /// the configured policy).
    AdmissionLimit {
        reply: Reply<AdmissionSnapshot>,
    },
    Shutdown {
        grace: Duration,
        reply: Reply<ShutdownReport>,
    },
    ShutdownDone {
        report: ShutdownReport,
    },
}

#[derive(Debug)]
struct Entry {
    proc: Arc<Proc>,
    /// The name it holds in `Actor::names`, if any.
    name: Option<String>,
    stdin: Option<Stdin>,
    /// Set once the leader is terminal but members of its tree live on.
    lingering: bool,
}

/// A live process's input: its pipe, until the first write or close asks for the task that
/// writes it (most processes are never written to, and an idle process should keep no task
/// and no queue), then that task's queue.
#[derive(Debug)]
enum Stdin {
    Idle(InputEnd),
    Writing(mpsc::Sender<InputOp>),
}

/// A small cache with first-in, first-out eviction.
#[derive(Debug)]
struct Bounded<V> {
    map: HashMap<Handle, V>,
    order: VecDeque<Handle>,
    max: usize,
}

impl<V> Bounded<V> {
    fn new(max: usize) -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
            max,
        }
    }
    fn insert(&mut self, handle: Handle, value: V) {
        if self.max == 0 {
            return;
        }
        if self.map.insert(handle, value).is_none() {
            self.order.push_back(handle);
        }
        while self.order.len() > self.max {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }
    fn get(&self, handle: &Handle) -> Option<&V> {
        self.map.get(handle)
    }
    fn remove(&mut self, handle: &Handle) {
        if self.map.remove(handle).is_some() {
            self.order.retain(|h| h != handle);
        }
    }
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// A start waiting for capacity.
#[derive(Debug)]
struct Queued {
    prepared: PreparedProcess,
    reply: Reply<Result<Started, StartError>>,
    since: tokio::time::Instant,
    deadline: tokio::time::Instant,
}

/// What [`Actor::may_start`] says about one start now.
#[derive(Debug)]
enum StartGate {
    Open,
    /// Refused whatever the caller asked (the supervisor is shutting down).
    Closed(Refusal),
    /// The live-process bound is reached.
    AtBound {
        live: usize,
        max: usize,
    },
    /// Admission found no capacity (or starts are queued ahead of this one).
    Full(Decision),
}

#[derive(Debug)]
enum ShutdownState {
    Open,
    Stopping(Vec<Reply<ShutdownReport>>),
    Joining {
        report: ShutdownReport,
        waiters: Vec<Reply<ShutdownReport>>,
        deadline: tokio::time::Instant,
    },
    Done(ShutdownReport),
}

pub(crate) struct Actor {
    shared: Arc<Shared>,
    inbox: mpsc::Receiver<Msg>,
    /// Handed (upgraded) to the shutdown task; weak, so that the actor ends once every
    /// `Supervisor` handle is gone.
    outbox: mpsc::WeakSender<Msg>,
    /// What process tasks report. The actor keeps one sender to hand out, so this channel
    /// never closes; the actor ends when `inbox` closes and its tasks are joined.
    events: mpsc::Receiver<ProcEvent>,
    events_tx: mpsc::Sender<ProcEvent>,
    table: HashMap<Handle, Entry>,
    /// The names of live processes (`Command::name`) and who holds each: a name is taken from
    /// the launch until the process is terminal (or its start recorded nothing), so that one
    /// name names one live process.
    names: HashMap<String, Handle>,
    /// Entries of `table` that are lingering (kept as a count: every terminal gate asks).
    lingering: usize,
    live: usize,
    max_live: usize,
    closed: bool,
    tasks: JoinSet<()>,
    readers: Bounded<Arc<Spool>>,
    summaries: Bounded<TerminalSummary>,
    shutdown: ShutdownState,
    /// Trees nothing proved gone and nothing watches (their guardian died, here or under an
    /// earlier supervisor): each holds one unit of `live` until an assessment proves it gone.
    held: HashMap<Handle, (Scoped, LifecycleIds)>,
    /// When the held trees are next assessed; an assessment in flight clears it.
    next_assessment: Option<tokio::time::Instant>,
    /// When the snapshot policy is next asked; a snapshot in flight clears it.
    next_snapshot_check: Option<tokio::time::Instant>,
    /// When the retention policy next runs (never, when it is off); a pass in flight clears it.
    next_retention: Option<tokio::time::Instant>,
    /// Retention passes run one at a time (two would race to remove the same spool): true while
    /// one runs; those asked for meanwhile wait here, in order.
    retention_running: bool,
    retention_waiting: VecDeque<(RetentionRequest, Option<Reply<CleanReport>>)>,
    /// Who holds capacity and what it reserves.
    admission: Admission,
    /// Starts waiting for capacity, oldest first.
    queue: VecDeque<Queued>,
    /// When the trees and the host are next sampled; a sample in flight clears it.
    next_sample: Option<tokio::time::Instant>,
    sampling: bool,
    last_sampled: tokio::time::Instant,
    /// Whether admission holds a reading of the host's telemetry yet (`ensure_host`).
    host_read: bool,
    /// When the deadlines are next swept (`None`: no live process has one that can fire).
    next_sweep: Option<tokio::time::Instant>,
    /// When they were last swept.
    last_sweep: tokio::time::Instant,
}

impl Actor {
    pub fn new(
        shared: Arc<Shared>,
        inbox: mpsc::Receiver<Msg>,
        outbox: mpsc::WeakSender<Msg>,
        max_live: usize,
        held: Vec<(Handle, Scoped, LifecycleIds)>,
        presampled: Vec<(Handle, crate::tree::TreeSample)>,
    ) -> Actor {
        let readers = Bounded::new(shared.config.finished_readers_cached);
        let (events_tx, events) = mpsc::channel(limits::ACTOR_INBOX_DEPTH);
        let mut admission = Admission::new(
            shared.config.admission.clone(),
            max_live,
            HostSample::default(),
        );
        // A limit set at runtime before a restart is the operator's, over the configuration.
        if let Some(max_concurrent) = recorded_limit(&shared) {
            admission.set_limit(Some(max_concurrent));
        }
        for (handle, _, _) in &held {
            admission.admit(*handle);
        }
        for (handle, sample) in presampled {
            admission.observe(&handle, sample);
        }
        let now = tokio::time::Instant::now();
        Actor {
            admission,
            queue: VecDeque::new(),
            next_sample: (!held.is_empty()).then_some(now),
            sampling: false,
            last_sampled: now,
            host_read: false,
            shared,
            inbox,
            outbox,
            events,
            events_tx,
            table: HashMap::new(),
            names: HashMap::new(),
            lingering: 0,
            live: held.len(),
            max_live,
            closed: false,
            tasks: JoinSet::new(),
            readers,
            summaries: Bounded::new(limits::FINISHED_SUMMARIES_CACHED),
            shutdown: ShutdownState::Open,
            next_assessment: (!held.is_empty()).then(tokio::time::Instant::now),
            held: held.into_iter().map(|(h, s, i)| (h, (s, i))).collect(),
            next_snapshot_check: Some(tokio::time::Instant::now()),
            next_retention: Some(tokio::time::Instant::now()),
            retention_running: false,
            retention_waiting: VecDeque::new(),
            next_sweep: None,
            last_sweep: tokio::time::Instant::now(),
        }
    }

    pub async fn run(mut self) {
        loop {
            let deadline = match &self.shutdown {
                ShutdownState::Joining { deadline, .. } => Some(*deadline),
                _ => None,
            };
            let queue_deadline = self.queue_deadline();
            tokio::select! {
                // Events first: what processes reported is handled before new requests.
                biased;
                Some(event) = self.events.recv() => self.event(event),
                msg = self.inbox.recv() => match msg {
                    Some(msg) => self.handle(msg),
                    None => break,
                },
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    if let Err(e) = joined
                        && e.is_panic()
                    {
                        warn!(error = %e, "a supervisor task panicked");
                    }
                }
                () = sleep_until_opt(deadline), if deadline.is_some() => {
                    self.finish_shutdown(true);
                }
                () = sleep_until_opt(self.next_assessment),
                    if self.next_assessment.is_some() && matches!(self.shutdown, ShutdownState::Open) => {
                    self.assess_held();
                }
                () = sleep_until_opt(self.next_snapshot_check),
                    if self.next_snapshot_check.is_some() && matches!(self.shutdown, ShutdownState::Open) => {
                    self.snapshot_if_due();
                }
                () = sleep_until_opt(self.next_retention),
                    if self.next_retention.is_some() && matches!(self.shutdown, ShutdownState::Open) => {
                    self.next_retention = None;
                    // Off: a pass still finishes removals that a crash interrupted.
                    let older_than = self.shared.config.retention.unwrap_or(Duration::MAX);
                    let request = RetentionRequest { older_than, dry_run: false, by: "retention" };
                    self.retention_pass(request, None);
                }
                () = sleep_until_opt(self.next_sample),
                    if self.next_sample.is_some() && matches!(self.shutdown, ShutdownState::Open) => {
                    self.sample();
                }
                () = sleep_until_opt(queue_deadline), if queue_deadline.is_some() => {
                    self.expire_queued();
                }
                () = sleep_until_opt(self.next_sweep),
                    if self.next_sweep.is_some() && matches!(self.shutdown, ShutdownState::Open) => {
                    self.sweep();
                }
            }
            self.finish_shutdown(false);
            self.debug_check_capacity();
        }
        // No request can come any more; let the tasks end. What they report now is dropped
        // unhandled: a terminal gate waiting for its `Finished` to be handled is answered by
        // the drop, and wakes its waiters.
        loop {
            tokio::select! {
                joined = self.tasks.join_next() => if joined.is_none() { break },
                Some(event) = self.events.recv() => drop(event),
            }
        }
    }

    /// The one place that decides whether a start may proceed now: the shutdown gate, the
    /// pause gate, the live-process bound, then admission. `fresh`: a start that is not the
    /// queue's head, which must not overtake starts already waiting. A start queued for capacity
    /// when the gate closes is refused (paused) when capacity would have admitted it.
    fn may_start(&mut self, fresh: bool) -> StartGate {
        if self.closed {
            return StartGate::Closed(Refusal::ShuttingDown);
        }
        if self.shared.paused.load(Ordering::SeqCst) {
            return StartGate::Closed(Refusal::Paused);
        }
        // The bound is the descriptor budget's: a held tree keeps capacity but no descriptor
        // (nothing of it is open here), so it does not count against it; else enough trees left
        // unverified by crashes would refuse every start for good.
        let open = self.live.saturating_sub(self.held.len());
        if open >= self.max_live {
            return StartGate::AtBound {
                live: open,
                max: self.max_live,
            };
        }
        self.ensure_host(false);
        let decision = self.admission.decide();
        if !decision.admit || (fresh && !self.queue.is_empty()) {
            return StartGate::Full(decision);
        }
        StartGate::Open
    }

    /// Why `prepared` may not take its name now: a live process holds it.
    fn name_taken(&self, prepared: &PreparedProcess) -> Option<Refusal> {
        let name = prepared.spec.labels.get(NAME_LABEL)?;
        let holder = *self.names.get(name)?;
        Some(Refusal::NameTaken {
            name: name.clone(),
            holder,
        })
    }

    /// Gives back the name `handle` holds, once it is terminal or recorded nothing. A lingering
    /// tree keeps nothing: the name belongs to the process, whose result is recorded.
    fn free_name(&mut self, handle: &Handle) {
        if let Some(name) = self.table.get_mut(handle).and_then(|e| e.name.take()) {
            self.names.remove(&name);
        }
    }

    /// The earliest deadline in the queue.
    fn queue_deadline(&self) -> Option<tokio::time::Instant> {
        self.queue.iter().map(|q| q.deadline).min()
    }

    /// Admits queued starts from the head while capacity allows, strictly in order.
    fn admit_queued(&mut self) {
        while let Some(head) = self.queue.front() {
            if head.reply.is_closed() {
                // Its caller is gone: nobody would learn of the process.
                self.queue.pop_front();
                continue;
            }
            match self.may_start(false) {
                StartGate::Open => {
                    let Some(q) = self.queue.pop_front() else {
                        break;
                    };
                    let waited = q.since.elapsed();
                    info!(target: "procjournal::admission", waited_ms = waited.as_millis() as u64, queued = self.queue.len(), "a queued start is admitted");
                    self.launch(q.prepared, q.reply, Some(waited));
                }
                StartGate::Closed(reason) => {
                    for q in self.queue.drain(..) {
                        let _ = q.reply.send(Err(StartError::Refused {
                            prepared: q.prepared,
                            reason: reason.clone(),
                        }));
                    }
                }
                StartGate::AtBound { .. } | StartGate::Full(_) => break,
            }
        }
    }

    /// Fails every queued start whose deadline passed, with the decision that kept it waiting.
    fn expire_queued(&mut self) {
        let now = tokio::time::Instant::now();
        self.ensure_host(false);
        let decision = self.admission.decide();
        let (expired, kept): (VecDeque<Queued>, VecDeque<Queued>) =
            self.queue.drain(..).partition(|q| q.deadline <= now);
        self.queue = kept;
        for q in expired {
            let waited = now.duration_since(q.since);
            info!(
                target: "procjournal::admission",
                waited_ms = waited.as_millis() as u64,
                slots = decision.slots,
                in_use = decision.in_use,
                reserved_bytes = decision.reserved_bytes,
                available_bytes = ?decision.available_bytes,
                "a queued start reached its deadline without capacity"
            );
            let _ = q.reply.send(Err(StartError::CapacityTimeout {
                prepared: q.prepared,
                decision: Box::new(decision.clone()),
                waited,
            }));
        }
    }

    /// Samples the host and every tree in the table, in one task on the blocking pool.
    fn sample(&mut self) {
        self.next_sample = None;
        if self.sampling {
            return;
        }
        self.sampling = true;
        let trees: Vec<_> = self
            .table
            .iter()
            .filter_map(|(h, e)| e.proc.tree.get().map(|t| (*h, Arc::clone(t))))
            .collect();
        // A held tree has no live tree object: it is sampled by what is observable of it.
        let held: Vec<_> = self
            .held
            .iter()
            .map(|(h, (scope, _))| (*h, scope.clone()))
            .collect();
        let telemetry = Arc::clone(&self.shared.config.telemetry);
        let actor = self.events_tx.clone();
        self.tasks.spawn(
            async move {
                let sampled = tokio::task::spawn_blocking(move || {
                    let mut trees = telemetry.trees(&trees);
                    trees.extend(telemetry.held(&super::restore::observable(&held)));
                    (telemetry.host(), trees)
                })
                .await;
                let (host, trees) = match sampled {
                    Ok(s) => (Some(s.0), s.1),
                    Err(e) => {
                        warn!(error = %e, "admission sample failed");
                        (None, Vec::new())
                    }
                };
                let _ = actor.send(ProcEvent::Sampled { host, trees }).await;
            }
            .instrument(info_span!("admission_sample")),
        );
    }

    /// Samples again after the configured interval while anything holds capacity or waits.
    fn schedule_sample(&mut self) {
        let busy = self.admission.in_use() > 0 || !self.queue.is_empty();
        if busy && !self.sampling && self.next_sample.is_none() {
            self.next_sample =
                Some(tokio::time::Instant::now() + self.shared.config.admission.sample_every);
        }
    }

    /// Reads the host's telemetry (cores, available memory) the first time a decision can
    /// depend on it, or with `always` (the admission snapshot reports it); later readings come
    /// with the trees' samples. While no workload holds capacity and none waits, a start is
    /// admitted whatever the host offers (one slot is always there), so a supervisor that runs
    /// one command at a time, as `run` does, never reads it: read at every open (a dozen procfs
    /// and cgroup files, on a blocking thread started for it) it cost a cold `run -- true`
    /// about 0.7 ms of CPU. A few small reads, once per supervisor: done here rather than on
    /// the blocking pool, so that no decision is made before it.
    fn ensure_host(&mut self, always: bool) {
        let idle = self.admission.in_use() == 0 && self.queue.is_empty();
        if self.host_read || (idle && !always) {
            return;
        }
        self.admission
            .observe_host(self.shared.config.telemetry.host());
        self.host_read = true;
    }

    /// Gives `handle`'s capacity back once nothing of it is owned any more: not in the table
    /// (live or lingering) and not held unverified.
    fn settle(&mut self, handle: &Handle) {
        if !self.table.contains_key(handle) && !self.held.contains_key(handle) {
            self.admission.release(handle);
        }
    }

    fn admission_snapshot(&mut self) -> AdmissionSnapshot {
        self.ensure_host(true);
        AdmissionSnapshot {
            decision: self.admission.decide(),
            reservations: self.admission.reservations(),
            telemetry_complete: self.admission.telemetry_complete(),
            queued: self.queue.len(),
            queue_max: limits::ADMISSION_QUEUE_MAX,
            sampled_ms_ago: u64::try_from(self.last_sampled.elapsed().as_millis())
                .unwrap_or(u64::MAX),
        }
    }

    fn sender(&self) -> Option<mpsc::Sender<Msg>> {
        self.outbox.upgrade()
    }

    /// Asks for a sweep at `at` (not sooner than the spacing after the last one), unless one is
    /// due sooner already.
    fn arm_sweep(&mut self, at: tokio::time::Instant) {
        let at = at.max(self.last_sweep + super::deadline::sweep_spacing());
        self.next_sweep = Some(self.next_sweep.map_or(at, |n| n.min(at)));
    }

    /// Checks every live process's deadlines; each due one is claimed and enforced in a task
    /// of its own, so a tree that cannot be signalled delays no other check or stop.
    fn sweep(&mut self) {
        let now = tokio::time::Instant::now();
        self.last_sweep = now;
        self.next_sweep = None;
        let mut due = Vec::new();
        let live = self
            .table
            .values()
            // A leader that exited ends on its own within the final drain: no deadline is its.
            .filter(|e| !e.lingering && !e.proc.leader_exited())
            .map(|e| (&e.proc.clocks, &e.proc));
        let next =
            super::deadline::sweep(now, live, |proc, check| due.push((Arc::clone(proc), check)));
        for (proc, check) in due {
            if let super::deadline::Check::Due { deadline, .. } = check {
                proc.clocks.claim(deadline);
                proc.set_cause(Cause::Timeout);
            }
            let handle = proc.handle;
            self.tasks.spawn(
                super::enforce::enforce(
                    Arc::clone(&self.shared),
                    self.events_tx.clone(),
                    proc,
                    check,
                )
                .instrument(info_span!("deadline", %handle)),
            );
        }
        if let Some(at) = next {
            self.arm_sweep(at);
        }
    }

    /// Re-assesses every held tree from its evidence now, in one task on the blocking pool.
    fn assess_held(&mut self) {
        self.next_assessment = None;
        let held: Vec<_> = self
            .held
            .iter()
            .map(|(h, (s, i))| (*h, s.clone(), *i))
            .collect();
        let (shared, actor) = (Arc::clone(&self.shared), self.events_tx.clone());
        self.tasks.spawn(
            async move {
                let released =
                    tokio::task::spawn_blocking(move || super::restore::reassess(&shared, &held))
                        .await
                        .unwrap_or_default();
                let _ = actor.send(ProcEvent::Assessed { released }).await;
            }
            .instrument(info_span!("assess")),
        );
    }

    /// Writes a snapshot in the background if the policy wants one (the supervisor's
    /// `Shared::snapshot_blocking`, on the blocking pool); asks again after the policy's
    /// interval once it is done.
    fn snapshot_if_due(&mut self) {
        self.next_snapshot_check = None;
        let (shared, actor) = (Arc::clone(&self.shared), self.events_tx.clone());
        self.tasks.spawn(
            async move {
                let _ = tokio::task::spawn_blocking(move || shared.snapshot_blocking(false)).await;
                let _ = actor.send(ProcEvent::Snapshotted).await;
            }
            .instrument(info_span!("snapshot")),
        );
    }

    /// Runs one retention pass in a task on the blocking pool. Everything in the table (live,
    /// or lingering) and every held tree is out of its reach; the store's own check refuses a
    /// retirement of an unverified exit whatever the plan said.
    fn retention_pass(&mut self, request: RetentionRequest, reply: Option<Reply<CleanReport>>) {
        if self.retention_running {
            self.retention_waiting.push_back((request, reply));
            return;
        }
        self.retention_running = true;
        let held: HashSet<Handle> = self.table.keys().chain(self.held.keys()).copied().collect();
        let (shared, actor) = (Arc::clone(&self.shared), self.events_tx.clone());
        let scheduled = reply.is_none();
        self.tasks.spawn(
            async move {
                let report = tokio::task::spawn_blocking(move || {
                    shared.retention_blocking(&request, &held, scheduled)
                })
                .await
                .unwrap_or_default();
                let retired = report
                    .retired
                    .iter()
                    .chain(&report.finished)
                    .map(|r| r.handle)
                    .collect();
                if let Some(reply) = reply {
                    let _ = reply.send(report);
                }
                let _ = actor.send(ProcEvent::Retired { retired, scheduled }).await;
            }
            .instrument(info_span!("retention")),
        );
    }

    /// `stop` of a held tree: re-assessed and ended where its evidence reaches it, in a task;
    /// the release (if proven) reaches the actor before the reply reaches the caller, so that
    /// a stop that returns has given the capacity back.
    fn stop_held(
        &mut self,
        held: (Handle, Scoped, LifecycleIds),
        reply: Reply<Result<Option<TerminalSummary>, SupervisorError>>,
    ) {
        let handle = held.0;
        let summary = self.summaries.get(&handle).cloned();
        let (shared, actor) = (Arc::clone(&self.shared), self.events_tx.clone());
        self.tasks.spawn(
            async move {
                let outcome =
                    tokio::task::spawn_blocking(move || super::restore::stop_held(&shared, &held))
                        .await
                        .unwrap_or_else(|e| Err(e.to_string()));
                let (released, answer) = match outcome {
                    Ok(_) => (vec![handle], Ok(summary)),
                    Err(why) => {
                        warn!(%handle, reason = %why, "stop: the tree stays unverified");
                        let reason = format!("its tree stays unverified: {why}");
                        (
                            Vec::new(),
                            Err(SupervisorError::TeardownFailed { handle, reason }),
                        )
                    }
                };
                let _ = actor.send(ProcEvent::Assessed { released }).await;
                let _ = reply.send(answer);
            }
            .instrument(info_span!("stop", %handle)),
        );
    }

    fn hold(&mut self, handle: Handle) {
        let Some(m) = self
            .shared
            .lifecycle
            .lock()
            .manifest(&handle)
            .map(std::borrow::Cow::into_owned)
        else {
            return;
        };
        if let Some(scope) = m.scope {
            warn!(%handle, "the tree is unverified (its guardian is gone without a receipt); its capacity stays held");
            self.held.insert(handle, (scope, m.ids));
            self.live += 1;
            self.publish_live();
            self.next_assessment.get_or_insert_with(|| {
                tokio::time::Instant::now() + Duration::from_millis(limits::ASSESS_INTERVAL_MS)
            });
        }
    }

    fn publish_live(&self) {
        self.shared.live.store(self.live, Ordering::SeqCst);
    }

    /// The live count is kept, not derived (every start reads it): a change that let it drift
    /// from the entries that hold capacity would refuse or admit starts wrongly, unseen.
    fn debug_check_capacity(&self) {
        debug_assert_eq!(
            self.live,
            self.table.len() - self.lingering + self.held.len(),
            "the live count drifted from the entries that hold capacity"
        );
        debug_assert_eq!(
            self.lingering,
            self.table.values().filter(|e| e.lingering).count(),
            "the lingering count drifted from the lingering entries"
        );
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Start { prepared, reply } => self.start(prepared, reply),
            Msg::Lookup { handle, reply } => {
                let _ = reply.send(self.lookup(&handle));
            }
            Msg::Stop {
                handle,
                grace,
                reason,
                reply,
            } => self.stop(handle, grace, reason, reply),
            Msg::Interrupt { handle, reply } => self.interrupt(handle, reply),
            Msg::Stdin { handle, reply } => {
                let _ = reply.send(self.input_queue(handle));
            }
            Msg::CacheReader { handle, reader } => {
                if !self.table.contains_key(&handle) {
                    self.readers.insert(handle, reader);
                }
            }
            Msg::Stats { reply } => {
                let _ = reply.send(self.stats());
            }
            Msg::Clean { request, reply } => self.retention_pass(request, Some(reply)),
            Msg::Admission { reply } => {
                let _ = reply.send(self.admission_snapshot());
            }
            Msg::AdmissionLimit { reply } => {
                let max_concurrent = recorded_limit(&self.shared);
                info!(target: "procjournal::admission", ?max_concurrent, "the admission limit is set at runtime");
                self.admission.set_limit(max_concurrent);
                // A raised limit admits waiting starts now, not at the next sample.
                self.admit_queued();
                self.schedule_sample();
                let _ = reply.send(self.admission_snapshot());
            }
            Msg::Shutdown { grace, reply } => self.begin_shutdown(grace, reply),
            Msg::ShutdownDone { report } => {
                let waiters = match std::mem::replace(&mut self.shutdown, ShutdownState::Open) {
                    ShutdownState::Stopping(w) => w,
                    _ => Vec::new(),
                };
                self.shutdown = ShutdownState::Joining {
                    report,
                    waiters,
                    deadline: tokio::time::Instant::now() + self.shared.config.kill_confirm,
                };
            }
        }
    }

    fn event(&mut self, event: ProcEvent) {
        self.process_event(event);
        // Whatever was released or sampled may admit the queue's head.
        self.admit_queued();
        self.schedule_sample();
    }

    fn process_event(&mut self, event: ProcEvent) {
        match event {
            ProcEvent::Spawned {
                handle,
                stdin,
                handled,
            } => {
                self.spawned(handle, stdin);
                let _ = handled.send(());
            }
            ProcEvent::Abandoned { handle, handled } => {
                self.abandoned(handle);
                let _ = handled.send(());
            }
            ProcEvent::DeadlineFailed { handle } => self.deadline_failed(handle),
            // Here rather than with the other handlers: it spawns into the task set.
            ProcEvent::InputWritten { handle } => {
                if let Some(e) = self.table.get(&handle).filter(|e| !e.lingering)
                    && e.proc.clocks.awaiting()
                {
                    let (shared, proc) = (Arc::clone(&self.shared), Arc::clone(&e.proc));
                    self.tasks.spawn(
                        super::enforce::clear_on_input(shared, proc)
                            .instrument(info_span!("input", %handle)),
                    );
                }
            }
            ProcEvent::Finished {
                handle,
                summary,
                lingering,
                unverified,
                handled,
            } => {
                self.terminal_gate_passed(handle, summary, lingering, unverified);
                let _ = handled.send(());
            }
            ProcEvent::TreeEmpty { handle, proven } => self.tree_emptied(handle, proven),
            ProcEvent::Sampled { host, trees } => self.sampled(host, trees),
            ProcEvent::Snapshotted => self.snapshotted(),
            ProcEvent::Retired { retired, scheduled } => self.retired(&retired, scheduled),
            ProcEvent::Assessed { released } => self.assessed(released),
        }
    }

    fn stats(&self) -> SupervisorStats {
        SupervisorStats {
            live: self.live,
            max_live: self.max_live,
            table: self.table.len() - self.lingering,
            lingering: self.lingering,
            unverified: self.held.len(),
            tasks: self.tasks.len(),
            readers_cached: self.readers.len(),
            summaries_cached: self.summaries.len(),
            paused: self.shared.paused.load(Ordering::SeqCst),
        }
    }

    fn not_running(&self, handle: &Handle) -> SupervisorError {
        if self.table.contains_key(handle)
            || self.summaries.get(handle).is_some()
            || self.shared.lifecycle.lock().manifest(handle).is_some()
        {
            SupervisorError::NotRunning(*handle)
        } else {
            SupervisorError::UnknownHandle(*handle)
        }
    }

    fn lookup(&self, handle: &Handle) -> Found {
        match self.table.get(handle) {
            Some(e) if !e.lingering => Found::Live(Arc::clone(&e.proc)),
            Some(e) => Found::NotLive {
                summary: e.proc.summary(),
                reader: self.readers.get(handle).cloned(),
            },
            None => Found::NotLive {
                summary: self.summaries.get(handle).cloned(),
                reader: self.readers.get(handle).cloned(),
            },
        }
    }

    fn start(&mut self, prepared: PreparedProcess, reply: Reply<Result<Started, StartError>>) {
        // Queued starts whose callers left must not keep a fresh one waiting behind them.
        while self.queue.front().is_some_and(|q| q.reply.is_closed()) {
            self.queue.pop_front();
        }
        // A name clash is told at once, not after a wait for capacity.
        if let Some(reason) = self.name_taken(&prepared) {
            let _ = reply.send(Err(StartError::Refused { prepared, reason }));
            return;
        }
        let full = match self.may_start(true) {
            StartGate::Open => return self.launch(prepared, reply, None),
            StartGate::Closed(reason) => {
                let _ = reply.send(Err(StartError::Refused { prepared, reason }));
                return;
            }
            StartGate::AtBound { live, max } => {
                if prepared.capacity_wait.is_none() {
                    let reason = Refusal::AtCapacity { live, max };
                    let _ = reply.send(Err(StartError::Refused { prepared, reason }));
                    return;
                }
                None
            }
            StartGate::Full(decision) => Some(decision),
        };
        let Some(wait) = prepared.capacity_wait else {
            self.ensure_host(false);
            let decision = full.unwrap_or_else(|| self.admission.decide());
            info!(
                target: "procjournal::admission",
                slots = decision.slots,
                in_use = decision.in_use,
                reserved_bytes = decision.reserved_bytes,
                available_bytes = ?decision.available_bytes,
                cores = ?decision.cores,
                basis = ?decision.basis,
                "a start is refused: no capacity"
            );
            let _ = reply.send(Err(StartError::Capacity {
                prepared,
                decision: Box::new(decision),
            }));
            return;
        };
        if self.queue.len() >= limits::ADMISSION_QUEUE_MAX {
            let reason = Refusal::QueueFull {
                queued: self.queue.len(),
                max: limits::ADMISSION_QUEUE_MAX,
            };
            let _ = reply.send(Err(StartError::Refused { prepared, reason }));
            return;
        }
        let now = tokio::time::Instant::now();
        info!(
            target: "procjournal::admission",
            wait_ms = wait.as_millis() as u64,
            queued = self.queue.len() + 1,
            slots = full.as_ref().map(|d| d.slots),
            in_use = self.admission.in_use(),
            "a start waits for capacity"
        );
        self.queue.push_back(Queued {
            prepared,
            reply,
            since: now,
            deadline: now + wait,
        });
        self.schedule_sample();
    }

    /// Takes capacity for a start that passed [`Actor::may_start`] and spawns its start task;
    /// `queued`: how long it waited for capacity, told with its handle.
    fn launch(
        &mut self,
        prepared: PreparedProcess,
        reply: Reply<Result<Started, StartError>>,
        queued: Option<Duration>,
    ) {
        // Checked here, where the name is taken, so that a start that waited in the queue is
        // held to it as a fresh one is.
        if let Some(reason) = self.name_taken(&prepared) {
            let _ = reply.send(Err(StartError::Refused { prepared, reason }));
            return;
        }
        let actor = self.events_tx.clone();
        self.live += 1;
        self.publish_live();
        let handle = Handle(EventId::new_v7());
        let name = prepared.spec.labels.get(NAME_LABEL).cloned();
        if let Some(name) = &name {
            self.names.insert(name.clone(), handle);
        }
        let ids = LifecycleIds {
            running: EventId::new_v7(),
            terminal: EventId::new_v7(),
            lost: EventId::new_v7(),
            completion: EventId::new_v7(),
        };
        let spool_at = super::process::SpoolAt {
            dir: self.shared.spool_dir(&handle),
            options: self
                .shared
                .config
                .spool_for(prepared.spec.limits.output_retention_bytes),
            buffer_bytes: self.shared.config.buffer_bytes,
        };
        let clocks = super::deadline::Clocks::new(&prepared.spec.limits);
        let proc = Arc::new(Proc::new(handle, ids, spool_at, clocks));
        self.admission.admit(handle);
        self.schedule_sample();
        self.table.insert(
            handle,
            Entry {
                proc: Arc::clone(&proc),
                name,
                stdin: None,
                lingering: false,
            },
        );
        let shared = Arc::clone(&self.shared);
        let (launched, answer) = oneshot::channel::<Result<Handle, StartError>>();
        let unanswered = prepared.stop_if_unanswered.then(|| {
            let grace = self.shared.config.default_grace;
            (self.outbox.clone(), grace)
        });
        // Boxed before the task takes it: it is done once the start is answered, and the task,
        // which lives as long as its process, then keeps a pointer rather than its 480 bytes.
        let tell = Box::pin(tell_started(answer, reply, queued, unanswered));
        self.tasks.spawn(
            async move {
                tokio::join!(
                    super::launch::start(shared, actor, proc, prepared, launched),
                    tell
                );
            }
            .instrument(info_span!("process", %handle)),
        );
    }

    fn spawned(&mut self, handle: Handle, stdin: InputEnd) {
        let Some(entry) = self.table.get_mut(&handle) else {
            return; // dropping the pipe closes the child's stdin
        };
        entry.stdin = Some(Stdin::Idle(stdin));
        let now = tokio::time::Instant::now();
        let first_deadline = entry.proc.clocks.check(now);
        match first_deadline {
            super::deadline::Check::NotBefore(at) => self.arm_sweep(at),
            // A short limit can run out while the launch records `running` (a loaded host): only
            // a sweep enforces it, and no other process may ever ask for one.
            super::deadline::Check::Due { .. } => self.arm_sweep(now),
            super::deadline::Check::Nothing => {}
        }
    }

    /// The queue of a live process's stdin writer, started by the first caller that asks.
    fn input_queue(&mut self, handle: Handle) -> Result<mpsc::Sender<InputOp>, SupervisorError> {
        let entry = match self.table.get_mut(&handle) {
            Some(e) if !e.lingering && !e.proc.is_terminal() => e,
            _ => return Err(self.not_running(&handle)),
        };
        match entry.stdin.take() {
            None => Err(SupervisorError::InputClosed(handle)),
            Some(Stdin::Writing(tx)) => {
                entry.stdin = Some(Stdin::Writing(tx.clone()));
                Ok(tx)
            }
            Some(Stdin::Idle(pipe)) => {
                let (tx, rx) = mpsc::channel(limits::INPUT_QUEUE_DEPTH);
                entry.stdin = Some(Stdin::Writing(tx.clone()));
                let proc = Arc::clone(&entry.proc);
                let writer = input::stdin_writer(pipe, rx, proc, self.events_tx.clone());
                self.tasks
                    .spawn(writer.instrument(info_span!("stdin", %handle)));
                Ok(tx)
            }
        }
    }

    /// SIGINT to the tree, from a task: a signal after the leader's reaping scans /proc, which
    /// the actor never waits for.
    fn interrupt(&mut self, handle: Handle, reply: Reply<Result<(), SupervisorError>>) {
        let entry = match self.table.get(&handle) {
            Some(e) if !e.lingering && !e.proc.is_terminal() => e,
            _ => {
                let _ = reply.send(Err(self.not_running(&handle)));
                return;
            }
        };
        let Some(tree) = entry.proc.tree.get().map(Arc::clone) else {
            let _ = reply.send(Err(SupervisorError::NotRunning(handle)));
            return;
        };
        entry.proc.set_cause(Cause::Interrupt);
        // A signal sent to the process is activity (its idle clock restarts).
        entry.proc.clocks.touch();
        self.tasks.spawn(
            async move {
                let sent = tokio::task::spawn_blocking(move || tree.signal(TreeSignal::Interrupt))
                    .await
                    .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
                let _ = reply.send(sent.map_err(|e| SupervisorError::TeardownFailed {
                    handle,
                    reason: format!("SIGINT: {e}"),
                }));
            }
            .instrument(info_span!("interrupt", %handle)),
        );
    }

    fn stop(
        &mut self,
        handle: Handle,
        grace: Duration,
        reason: String,
        reply: Reply<Result<Option<TerminalSummary>, SupervisorError>>,
    ) {
        if let Some((scope, ids)) = self.held.get(&handle) {
            self.stop_held((handle, scope.clone(), *ids), reply);
            return;
        }
        let Some(entry) = self.table.get(&handle) else {
            // Not ours any more (or never): the caller answers from the journal.
            let _ = reply.send(Ok(self.summaries.get(&handle).cloned()));
            return;
        };
        let proc = Arc::clone(&entry.proc);
        // A leader that already exited is not stopped (its tree still is torn down below).
        let live = !entry.lingering && !proc.is_terminal() && proc.set_cause(Cause::Stop);
        let shared = Arc::clone(&self.shared);
        self.tasks.spawn(
            async move {
                if live {
                    super::request_stop(&shared, &proc, &reason).await;
                }
                let result = teardown(&proc, grace)
                    .await
                    .map(|()| proc.summary())
                    .map_err(|reason| SupervisorError::TeardownFailed { handle, reason });
                let _ = reply.send(result);
            }
            .instrument(info_span!("stop", %handle)),
        );
    }

    fn finished(&mut self, handle: Handle, summary: TerminalSummary, lingering: bool) {
        if self.table.get(&handle).is_some_and(|e| e.lingering) {
            // Its end was handled once: its summary, watch, count and notification stand.
            warn!(%handle, "a second end for a lingering process; nothing released");
            return;
        }
        self.free_name(&handle);
        self.summaries.insert(handle, summary.clone());
        let Some(mut entry) = self.table.remove(&handle) else {
            // Capacity is counted per table entry: an end that finds none (said twice, or
            // after the start was abandoned) gives back nothing, or another process's
            // capacity would be released while it runs.
            warn!(%handle, "an end for a process that holds no capacity; nothing released");
            return;
        };
        self.live = self.live.saturating_sub(1);
        self.publish_live();
        let ids = entry.proc.ids;
        let proc = Arc::clone(&entry.proc);
        // Dropping the queue ends the stdin writer, which closes the pipe (or closes the pipe
        // no writer took).
        entry.stdin = None;
        if lingering && self.lingering < limits::LINGERING_TREES_MAX {
            if let Some(tree) = entry.proc.tree.get().map(Arc::clone) {
                let actor = self.events_tx.clone();
                entry.lingering = true;
                self.lingering += 1;
                self.tasks.spawn(
                    watch_lingering(Arc::clone(&self.shared), tree, actor, handle, ids)
                        .instrument(info_span!("lingering", %handle)),
                );
                self.table.insert(handle, entry);
            }
        } else if lingering {
            warn!(%handle, max = limits::LINGERING_TREES_MAX, "too many lingering trees; this one is no longer watched");
        }
        if summary.persist_error.is_none() {
            let shared = Arc::clone(&self.shared);
            let (state, exit) = (summary.state, summary.exit);
            self.tasks.spawn(
                async move {
                    // `running` first, exactly once: by the start task (wait for it to finish)
                    // or, for a process that ended before it was due, here, if it ran at all.
                    if proc.claim_running_publication(RunningPublisher::Terminal) {
                        let ran = shared
                            .lifecycle
                            .lock()
                            .manifest(&handle)
                            .is_some_and(|m| m.pid.is_some());
                        if ran {
                            super::publish::publish_running(&shared, handle, ids).await;
                        }
                    } else {
                        proc.running_publication_finished().await;
                    }
                    super::publish::publish_and_notify(
                        &shared,
                        handle,
                        ids,
                        ids.terminal,
                        state,
                        exit,
                    )
                    .await;
                }
                .instrument(info_span!("publish", %handle)),
            );
        }
    }

    fn begin_shutdown(&mut self, grace: Duration, reply: Reply<ShutdownReport>) {
        match &mut self.shutdown {
            ShutdownState::Done(report) => {
                let _ = reply.send(report.clone());
                return;
            }
            ShutdownState::Stopping(waiters) | ShutdownState::Joining { waiters, .. } => {
                waiters.push(reply);
                return;
            }
            ShutdownState::Open => {}
        }
        // Admission closes first: every start handled before this message has its entry, and
        // every queued one is refused.
        self.closed = true;
        self.admit_queued();
        self.shutdown = ShutdownState::Stopping(vec![reply]);
        let Some(actor) = self.sender() else { return };
        let procs: Vec<(Arc<Proc>, bool)> = self
            .table
            .values()
            .map(|e| (Arc::clone(&e.proc), e.lingering))
            .collect();
        let shared = Arc::clone(&self.shared);
        self.tasks.spawn(
            async move {
                let mut set = JoinSet::new();
                for (proc, lingering) in procs {
                    let shared = Arc::clone(&shared);
                    set.spawn(async move {
                        // A process whose leader had exited on its own is not terminated by
                        // the shutdown: it keeps its own status (its descendants are still
                        // torn down).
                        let live =
                            !lingering && !proc.is_terminal() && proc.set_cause(Cause::Shutdown);
                        if live {
                            super::request_stop(&shared, &proc, "shutdown").await;
                        }
                        let result = teardown(&proc, grace).await;
                        let state = proc.summary().map(|s| s.state);
                        (proc.handle, live, result, state)
                    });
                }
                let mut report = ShutdownReport::default();
                while let Some(joined) = set.join_next().await {
                    match joined {
                        Ok((handle, _, Err(reason), _)) => {
                            report.teardown_failed.push((handle, reason))
                        }
                        Ok((_, false, Ok(()), _)) => {}
                        Ok((handle, true, Ok(()), Some(State::Killed))) => {
                            report.killed.push(handle)
                        }
                        Ok((handle, true, Ok(()), _)) => report.terminated.push(handle),
                        Err(e) => warn!(error = %e, "shutdown task failed"),
                    }
                }
                report.terminated.sort();
                report.killed.sort();
                report.teardown_failed.sort();
                // A clean shutdown leaves the next start little to replay (the shutdown rule of
                // the snapshot policy); a snapshot in flight makes this one a no-op.
                let _ = tokio::task::spawn_blocking(move || shared.snapshot_blocking(true)).await;
                let _ = actor.send(Msg::ShutdownDone { report }).await;
            }
            .instrument(info_span!("shutdown")),
        );
    }

    /// Answers shutdown once every task but the ones that outlive it (lingering watchers whose
    /// trees could not be ended) has been joined, or the join bound passed.
    fn finish_shutdown(&mut self, deadline_passed: bool) {
        // The tasks of processes whose teardown failed stay owned and keep running (a drain and
        // a stdin writer, or a lingering tree's watcher); shutdown reports those processes and
        // waits for every other task.
        let ShutdownState::Joining { report, .. } = &self.shutdown else {
            return;
        };
        let kept: usize = report
            .teardown_failed
            .iter()
            .filter_map(|(h, _)| self.table.get(h))
            .map(|e| {
                if e.lingering {
                    1
                } else {
                    1 + usize::from(matches!(e.stdin, Some(Stdin::Writing(_))))
                }
            })
            .sum();
        let outstanding = self.tasks.len().saturating_sub(kept);
        if outstanding > 0 && !deadline_passed {
            return;
        }
        if let ShutdownState::Joining {
            report, waiters, ..
        } = std::mem::replace(&mut self.shutdown, ShutdownState::Open)
        {
            // Nothing launches after shutdown: what the launcher holds for the root goes now
            // (an rmdir on cgroupfs; kept where a tree whose teardown failed is still in it).
            self.shared.config.launcher.release();
            // Every task that could append has been joined: the closing commit (one flush, on
            // this thread, once) is paid for before shutdown answers, so that the journal's
            // last handle, dropped after, writes nothing and releases the root at once, and
            // the next open neither flushes nor reads past the records. (A brief writer's has
            // none: its bookkeeping rides the next writer's first commit, `journal::Tenure`.)
            let journal = self.shared.lifecycle.lock().journal_arc();
            if let Err(e) = journal.close_commit() {
                warn!(error = %e, "shutdown: the closing commit failed");
            }
            for w in waiters {
                let _ = w.send(report.clone());
            }
            self.shutdown = ShutdownState::Done(report);
        }
    }
}

/// The admission limit the projection holds (`None`: the configured policy).
fn recorded_limit(shared: &Shared) -> Option<usize> {
    let max = shared.lifecycle.lock().store().admission_max_concurrent();
    max.map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Watches a tree whose leader exited until its last member is gone, and records what proved
/// it.
async fn watch_lingering(
    shared: Arc<Shared>,
    tree: Arc<dyn ProcessTree>,
    actor: mpsc::Sender<ProcEvent>,
    handle: Handle,
    ids: LifecycleIds,
) {
    tree.wait_empty().await;
    let proven = tokio::task::spawn_blocking(move || match tree.exit_proof() {
        Some(proof) => {
            let _ = super::process::record_release_blocking(&shared, handle, ids, proof);
            true
        }
        None => false,
    })
    .await
    .unwrap_or(false);
    let _ = actor.send(ProcEvent::TreeEmpty { handle, proven }).await;
}

/// The start task's answer, told to the caller (the wait is the actor's to tell). A caller gone
/// before the answer never learns the handle; when its start asked for it (`unanswered`: a
/// capture's), its process is stopped as an abandoned capture's is, rather than left running
/// with no one following it.
async fn tell_started(
    answer: oneshot::Receiver<Result<Handle, StartError>>,
    reply: Reply<Result<Started, StartError>>,
    queued: Option<Duration>,
    unanswered: Option<(mpsc::WeakSender<Msg>, Duration)>,
) {
    let Ok(result) = answer.await else {
        return;
    };
    let Err(Ok(started)) = reply.send(result.map(|handle| Started { handle, queued })) else {
        return;
    };
    let Some((outbox, grace)) = unanswered else {
        return;
    };
    let Some(outbox) = outbox.upgrade() else {
        return;
    };
    let (stopped, _) = oneshot::channel();
    let stop = Msg::Stop {
        handle: started.handle,
        grace,
        reason: "capture abandoned".to_owned(),
        reply: stopped,
    };
    if outbox.send(stop).await.is_err() {
        warn!(handle = %started.handle, "capture abandoned during its start, but its stop could not be sent; the process runs on");
    }
}
