//! Manifests: the projection of one handle's lifecycle events, and the store that validates them.
//!
//! The store is the validator. [`ManifestStore::check`] decides, without changing anything,
//! whether an event may be appended; [`ManifestStore::apply`] checks and then folds it in. The
//! supervisor checks before it appends, so an invalid event never reaches disk; replay applies
//! what it finds on disk and reports what it rejects, so a hand-crafted or damaged event never
//! corrupts a projection. Pure: no I/O, no clock.
//!
//! Invariants kept for every manifest:
//! - `state` only moves along [`State::can_move_to`]; nothing leaves a terminal state.
//! - Identity (handle, command, allocated IDs), pid and witness are set once and never change.
//! - Cursor bounds only grow, satisfy `retained_from <= total_bytes`, and freeze at the terminal
//!   event.
//! - The terminal result and the completion marker are set once; repeating the same publication
//!   or notification is an idempotent no-op, a different one is rejected.
//! - A record that states a fact about an allocated step (publication, completion, scope,
//!   release) carries the ID derived from that step's ID (`event::derived`), and no other.
//! - The pause gate is root-level: the store keeps its last change ([`ManifestStore::gate`]), and
//!   a change to the state it is already in is refused, so changes alternate.
//! - Deadlines: a process is marked as waiting for human input at most once until the mark is
//!   cleared; at most one deadline fires per process, with the limit its registration configured;
//!   failures to enforce it come after it, at most `DEADLINE_FAILURES_MAX`. None of these is
//!   accepted once the process is terminal.
//! - Every ID a registration allocates (and the registration's own ID) is reserved for its one
//!   step of its one handle: no other event and no other registration may use it, so a step's
//!   retry can never be answered by some other record that took its ID.
//!
//! Layout (chosen for replay, which rebuilds every manifest of a journal at open): manifests have
//! one slot each in registration order ([`slots`]: a 32-byte record, in spill space once its
//! block is full; the manifests held decoded beside them), found through a map from handle to
//! position (sealed into sorted runs every [`SEAL_BATCH`] manifests); reservations
//! name a position, not a handle, in a compact index that checks hits against the manifest
//! (`reserved.rs`); the command is a [`StoredCommand`] (two allocations, not a dozen). Positions
//! are never removed or reordered, so a position, once given, stays valid.
//!
//! A manifest is **settled** once it is terminal and its completion is recorded: only rare
//! events change it after that (a release proved late, its output retired, a repeated
//! publication). The store keeps a settled manifest as its snapshot frame ([`frame`]: a third
//! of its decoded size, copied as it is into snapshots) and decodes it when read, so that a
//! root's finished processes cost their frames, not their manifests. An accepted event that
//! changes a settled manifest decodes it, folds the event in and settles it again.

mod frame;
mod slots;

use frame::SettledFrame;
pub(in crate::lifecycle) use frame::{ManifestIn, manifest_in, manifest_out, read_manifest};
use slots::{Slot, SlotRef, Slots};
use std::borrow::Cow;
use std::sync::Arc;

use std::collections::BTreeSet;

use crate::idhash::IdMap;

use serde::Serialize;

use super::command::StoredCommand;
use super::event::derived::{NOTIFIED, PUBLISHED, RELEASED, RETIRED, SCOPED};
use super::event::{
    AdmissionLimitSet, CaptureStatus, CompletionNotified, CursorBounds, Deadline, DeadlineFailed,
    DeadlineFired, ExitProof, ExitStatus, GateChanged, Handle, HumanInput, IdentityWitness,
    LifecycleEvent, LifecycleIds, LifecyclePublished, LostOnRestore, OutputGap, OutputRetired,
    Scoped, Terminal, TerminalResized, TreeReleased,
};
use super::reserved::{Reservation, ReservedIds, SLOTS_MAX, Step};
use super::state::State;
use super::wire::Registration;
use crate::journal::EventId;

use crate::root::dir::Dir;
use crate::runs::Runs;
use crate::spill::{Spill, SpillError};

/// The terminal result, fixed once recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, crate::codec::Encode, crate::codec::Decode)]
pub struct TerminalResult {
    pub state: State,
    pub exit: ExitStatus,
    pub capture: CaptureStatus,
    pub reason: String,
    pub at_unix_ms: u64,
    pub event_id: EventId,
}

/// The projection of one process's events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    pub handle: Handle,
    /// The process's number on this root: its registration's position in the store, from 1.
    /// Set by the store when the manifest is added (never by an event, never in a snapshot):
    /// positions are never removed or reordered, so a number names one process for the life of
    /// the root (`reference.rs`).
    pub number: u64,
    pub ids: LifecycleIds,
    pub command: StoredCommand,
    /// The process this one restarts (set by a version 2 registration; `None` for a first start).
    pub restart_of: Option<Handle>,
    pub registered_unix_ms: u64,
    pub state: State,
    pub pid: Option<u32>,
    pub witness: Option<IdentityWitness>,
    pub running_unix_ms: Option<u64>,
    /// How many stop requests were recorded, and the first one's reason and requester.
    pub stop_requests: u32,
    pub first_stop: Option<(String, String)>,
    pub input_closed: bool,
    pub bounds: CursorBounds,
    pub terminal: Option<TerminalResult>,
    /// Lifecycle event IDs already published to the host's services.
    pub published: BTreeSet<EventId>,
    pub completion_notified: bool,
    /// Who owns the tree and the witnesses to assess it by (set once).
    pub scope: Option<Scoped>,
    /// What proved the whole tree gone (set once).
    pub released: Option<ExitProof>,
    /// Output lost to failed writes or syncs, in cursor order (at most
    /// `GAPS_PER_PROCESS_MAX`).
    pub gaps: Vec<crate::spool::Gap>,
    /// The output was retired (its spool removed) by retention or `clean` (set once).
    pub retired: Option<Retirement>,
    /// Since when the process waits for human input (its idle clock is suspended); `None` when
    /// it does not.
    pub awaiting_input: Option<u64>,
    /// The deadline that fired, if one did (set once): which, its limit, and its clock.
    pub deadline: Option<DeadlineFired>,
    /// Failures to enforce the fired deadline, in order (at most `DEADLINE_FAILURES_MAX`).
    pub deadline_failures: Vec<DeadlineFailed>,
}

/// When and why a process's output was retired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, crate::codec::Encode, crate::codec::Decode)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Retirement {
    pub reason: String,
    pub at_unix_ms: u64,
}

impl Manifest {
    /// Whether nothing is left to do for this process: terminal, its terminal event published,
    /// its completion recorded, and its tree released (or a process group's, which nothing
    /// proves gone later). Only a late release, a retirement or a repeat changes it now.
    pub fn settled(&self) -> bool {
        let released =
            self.released.is_some() || self.scope.as_ref().is_some_and(|s| s.guardian.is_none());
        let published = self
            .terminal
            .as_ref()
            .is_some_and(|t| self.published.contains(&t.event_id));
        self.state.is_terminal() && published && self.completion_notified && released
    }

    /// Shapes a reader of this process's spool by what the journal recorded of its output: its
    /// gaps and total, and, once the bounds are final (terminal: the last checkpoint of the
    /// drain, or what restore found on disk), where kept output starts, so that a spool file
    /// removed from outside reads as damage rather than as retention.
    pub(crate) fn bound_reader(&self, spool: &mut crate::spool::Spool) {
        spool.hold_to_record(&self.gaps, self.bounds.total_bytes);
        if self.state.is_terminal() {
            spool.hold_retained_from(self.bounds.retained_from);
        }
    }

    /// Whether the process's exit is verified, the condition for retiring its output
    /// ("live, unverified, missing, corrupt or unreadable ownership preserves evidence"): it is
    /// terminal, and either its whole tree's exit is proven (a `TreeReleased` proof), or its tree
    /// is a process group whose leader this supervisor reaped itself (a group has no stronger
    /// proof to wait for; no file of the spool is written after the terminal result), or it never
    /// ran at all. A process lost on restore without a release proof is unverified.
    pub fn exit_verified(&self) -> bool {
        if !self.state.is_terminal() {
            return false;
        }
        if self.released.is_some() || self.pid.is_none() {
            return true;
        }
        let by_group = self
            .scope
            .as_ref()
            .is_none_or(|s| s.mechanism == super::event::TreeMechanism::Group);
        let reaped = self.terminal.as_ref().is_some_and(|t| {
            t.event_id == self.ids.terminal
                && matches!(t.exit, ExitStatus::Code(_) | ExitStatus::Signal(_))
        });
        self.state != State::LostOnRestore && by_group && reaped
    }
}

/// Why an event was refused. Typed so that the supervisor and replay can tell cases apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    #[error("handle {0} is not registered")]
    UnknownHandle(Handle),
    #[error("handle {0} is already registered; identity and allocated IDs cannot change")]
    AlreadyRegistered(Handle),
    #[error("registration allocates the same ID twice")]
    DuplicateAllocatedId,
    #[error("transition {from} -> {to} is not allowed")]
    Transition { from: State, to: State },
    #[error("{event} carries event ID {found}, but registration allocated {allocated} for it")]
    UnexpectedEventId {
        event: &'static str,
        found: EventId,
        allocated: EventId,
    },
    #[error("{event} carries event ID {found}, but its ID is derived: {expected}")]
    UnexpectedDerivedId {
        event: &'static str,
        found: EventId,
        expected: EventId,
    },
    #[error("{0} is not a terminal state")]
    NotTerminal(State),
    #[error("the process is already terminal ({0}); its result cannot change")]
    AlreadyTerminal(State),
    #[error("cursor bounds {new:?} would move backwards from {old:?} or are inconsistent")]
    CursorBackwards {
        old: CursorBounds,
        new: CursorBounds,
    },
    #[error("input is already closed")]
    InputAlreadyClosed,
    #[error("event {0} is not a recorded lifecycle event of this handle")]
    NotPublishable(EventId),
    #[error("completion can only be notified once the process is terminal")]
    CompletionBeforeTerminal,
    #[error("completion command {found} differs from the allocated {allocated}")]
    CompletionIdMismatch { found: EventId, allocated: EventId },
    #[error("event ID {id} is reserved for a lifecycle step of {handle}")]
    IdReserved { id: EventId, handle: Handle },
    #[error("event ID {id} is already used by a record of kind {kind:#06x}")]
    IdInUse { id: EventId, kind: u16 },
    #[error("the tree's scope is already recorded differently")]
    ScopeAlreadyRecorded,
    #[error("gap {gap:?} is empty, out of order, for retention, or one too many")]
    BadGap { gap: crate::spool::Gap },
    #[error("a tree release needs a recorded scope (or a receipt of a launch aborted before it)")]
    NotScoped,
    #[error("the tree was already released with a different proof")]
    AlreadyReleased,
    #[error("the store already holds {0} manifests, as many as it can")]
    StoreFull(usize),
    #[error("output of a process whose exit is not verified ({0}) cannot be retired")]
    NotRetirable(State),
    #[error("the output was already retired")]
    AlreadyRetired,
    #[error("the pause gate is already {}", if *.0 { "paused" } else { "open" })]
    GateUnchanged(bool),
    #[error("the admission limit is already {}", match .0 { Some(n) => format!("{n}"), None => "the configured policy".to_owned() })]
    AdmissionLimitUnchanged(Option<u64>),
    #[error("an admission limit of 0 admits nothing; the least is 1")]
    AdmissionLimitZero,
    #[error("the process is already {} for human input", if *.0 { "marked as waiting" } else { "not waiting" })]
    InputWaitUnchanged(bool),
    #[error("a deadline already fired ({0})")]
    DeadlineAlreadyFired(&'static str),
    #[error(
        "the {deadline} deadline fired with limit {found} ms, but the registration configured {configured:?}"
    )]
    DeadlineLimit {
        deadline: &'static str,
        found: u64,
        configured: Option<u64>,
    },
    #[error("a deadline failure needs a fired deadline of that kind")]
    DeadlineNotFired,
    #[error("{0} deadline failures are recorded, as many as a process keeps")]
    TooManyDeadlineFailures(usize),
    #[error("a terminal is sized only while its process runs (it is {0})")]
    NotRunning(State),
    #[error("terminal size {rows}x{cols}: a terminal has at least one row and one column")]
    TerminalSize { rows: u16, cols: u16 },
    #[error("restart_of names {0}, which is not registered before it")]
    UnknownRestart(Handle),
    /// A settled manifest's frame no longer decodes: memory changed under the store.
    #[error("the settled manifest of {handle} cannot be read: {reason}")]
    SettledUnreadable { handle: Handle, reason: String },
}

/// A manifest of a snapshot that no sequence of accepted events produces, or that its store
/// would refuse to register.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("manifest {position} of the snapshot: {reason}")]
pub struct InvalidManifest {
    pub position: usize,
    pub reason: String,
}

/// Whether `m` is a manifest that registration and the accepted events of its handle produce:
/// every relation between its fields that `validate` and `fold` keep. (Each field's own values are
/// whatever the events carried.)
pub(crate) fn consistent(m: &Manifest) -> Result<(), &'static str> {
    consistent_terminal(m)?;
    consistent_running(m)?;
    consistent_output(m)?;
    consistent_deadlines(m)
}

/// [`consistent`] for the cursor bounds and the terminal result.
fn consistent_terminal(m: &Manifest) -> Result<(), &'static str> {
    if !m.bounds.is_valid() {
        return Err("cursor bounds with retained_from past total_bytes");
    }
    match &m.terminal {
        None if m.state.is_terminal() => return Err("a terminal state without a result"),
        Some(_) if !m.state.is_terminal() => return Err("a result without a terminal state"),
        Some(t) => {
            if t.state != m.state {
                return Err("a result whose state is not the manifest's");
            }
            let lost = t.event_id == m.ids.lost;
            if !lost && t.event_id != m.ids.terminal {
                return Err("a result under an ID its registration did not allocate for it");
            }
            // A `LostOnRestore` event always leaves lost_on_restore; a `Terminal` event may
            // carry that state too, under the terminal ID.
            if lost && m.state != State::LostOnRestore {
                return Err("a result under the lost ID with another state");
            }
        }
        None => {}
    }
    Ok(())
}

/// [`consistent`] for running, the stop requests, the publications and the completion notice.
fn consistent_running(m: &Manifest) -> Result<(), &'static str> {
    let ran = m.pid.is_some();
    if ran != m.witness.is_some() || ran != m.running_unix_ms.is_some() {
        return Err("running recorded in part");
    }
    if m.state == State::Running && !ran {
        return Err("running without its running event");
    }
    if (m.stop_requests == 0) != m.first_stop.is_none() {
        return Err("stop requests and the first stop disagree");
    }
    let recorded = |id: &EventId| {
        (*id == m.ids.running && ran) || m.terminal.as_ref().is_some_and(|t| t.event_id == *id)
    };
    if !m.published.iter().all(recorded) {
        return Err("a publication of an event that is not recorded");
    }
    if m.completion_notified && m.terminal.is_none() {
        return Err("completion notified before terminal");
    }
    Ok(())
}

/// [`consistent`] for the process tree's scope and release, the output's gaps and retirement.
fn consistent_output(m: &Manifest) -> Result<(), &'static str> {
    if m.released.is_some() && m.scope.is_none() {
        return Err("a tree released without a scope");
    }
    if m.scope.as_ref().is_some_and(|s| s.handle != m.handle) {
        return Err("a scope of another handle");
    }
    if m.gaps.len() > crate::limits::GAPS_PER_PROCESS_MAX {
        return Err("more gaps than a process may have");
    }
    if m.retired.is_some() && !m.exit_verified() {
        return Err("output retired of a process whose exit is not verified");
    }
    let gap_ok =
        |g: &crate::spool::Gap| g.from < g.to && g.reason != crate::spool::LossReason::Retention;
    if !m.gaps.iter().all(gap_ok) {
        return Err("an empty gap, or one for retention");
    }
    if m.gaps
        .windows(2)
        .any(|w| w[0].to > w[1].from || joins(&w[0], &w[1]))
    {
        return Err("gaps out of order, or two that replay would have joined");
    }
    Ok(())
}

/// [`consistent`] for the fired deadline and the failures to enforce it.
fn consistent_deadlines(m: &Manifest) -> Result<(), &'static str> {
    if let Some(d) = &m.deadline {
        if d.handle != m.handle {
            return Err("a deadline of another handle");
        }
        if configured_limit(m, d.deadline) != Some(d.limit_ms) {
            return Err("a deadline with a limit its registration did not configure");
        }
    }
    if m.deadline_failures.len() > crate::limits::DEADLINE_FAILURES_MAX {
        return Err("more deadline failures than a process keeps");
    }
    let fired = m.deadline.as_ref().map(|d| d.deadline);
    if m.deadline_failures
        .iter()
        .any(|f| Some(f.deadline) != fired || f.handle != m.handle)
    {
        return Err("a deadline failure without its fired deadline");
    }
    Ok(())
}

/// The limit the registration configured for `deadline`.
fn configured_limit(m: &Manifest, deadline: Deadline) -> Option<u64> {
    let limits = m.command.limits();
    match deadline {
        Deadline::Wall => limits.wall_clock_ms,
        Deadline::Idle => limits.idle_ms,
    }
}

/// What applying an accepted event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Changed,
    /// A repeat of an already-recorded publication or notification: nothing changed.
    Unchanged,
}

/// A manifest as the store holds it, for the snapshot's encoder: settled ones are copied as
/// their frames.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Held<'a> {
    Live(&'a Manifest),
    Settled(&'a [u8]),
}

/// All manifests, by handle, in registration order.
#[derive(Debug, Clone)]
pub struct ManifestStore {
    /// Every manifest and its registration's event ID, in registration order.
    manifests: Slots,
    /// The position in `manifests` of each handle's manifest.
    slots: IdMap<Handle, u32>,
    /// Every reserved ID: the five of each manifest.
    reserved: ReservedIds,
    /// The greatest reserved ID (as a number: UUIDs order by their bytes, v7 ones by creation
    /// time), 0 when none is. Event IDs above it are reserved for nothing, which for time-ordered
    /// IDs (the supervisor's) settles most lookups without probing the reservation index.
    reserved_max: u128,
    /// Recently used handles and their positions, by the handle's low bits: consecutive events
    /// of a journal mostly belong to a few live processes. A hit is checked against the full
    /// handle; a miss falls back to `slots`.
    recent: Box<[(Handle, u32)]>,
    /// The last change of the pause gate (root-level); `None`: never changed, so open.
    gate: Option<GateChanged>,
    /// The last admission limit set at runtime (root-level); `None`: never set, so the
    /// configured policy.
    admission_limit: Option<AdmissionLimitSet>,
    /// The frames of settled manifests (`crate::spill`): on the heap until
    /// [`ManifestStore::spill_into`] gives the store a file.
    frames: Spill,
    /// The positions of handles of older manifests, moved out of `slots` (`crate::runs`).
    sealed_slots: Runs<u32, 32>,
    /// The reservations of older manifests, moved out of `reserved`.
    sealed_reserved: Runs<u32, 32>,
    /// The first position whose handle is in `slots`, and whose reservations are in
    /// `reserved`: those before it are in the sealed runs.
    handles_from: u32,
    reserved_from: u32,
    /// The position whose registration seals the unsealed ones next.
    seal_at: u32,
    /// Manifests per seal: [`SEAL_BATCH`], fewer in tests.
    seal_batch: u32,
    /// Where the store makes its spill files: none until `spill_into`, and then every map
    /// stays on the heap.
    spill_dir: Option<Arc<Dir>>,
    /// No manifest held ended before this (Unix ms): the earliest terminal time folded into
    /// or pushed with any manifest, `None` while none ended. Never raised (a retirement leaves
    /// it where it was), so it errs early: what a retention pass may skip on it cannot be due.
    earliest_end_ms: Option<u64>,
}

/// How many manifests' handles and reservations the store's hash tables hold before it seals
/// them into runs (`crate::runs`): the bounded part of what finished processes cost the heap.
pub(crate) const SEAL_BATCH: usize = 4096;

/// Entries of `ManifestStore::recent`; a power of two.
const RECENT_SLOTS: usize = 1024;
/// The position an empty `recent` entry names (never a real one: positions stay below
/// `SLOTS_MAX`).
const NO_SLOT: u32 = u32::MAX;

/// Two stores are equal when they hold the same manifests from the same registrations, in the
/// same order: `slots` and `reserved` are functions of those (their layout depends on each
/// store's hash seed, their content does not).
impl PartialEq for ManifestStore {
    fn eq(&self, other: &Self) -> bool {
        self.manifests.len() == other.manifests.len()
            && self.iter().eq(other.iter())
            && (0..self.manifests.len())
                .all(|p| self.manifests.registration(p) == other.manifests.registration(p))
            && self.gate == other.gate
            && self.admission_limit == other.admission_limit
    }
}

impl Eq for ManifestStore {}

impl Default for ManifestStore {
    fn default() -> Self {
        ManifestStore {
            manifests: Slots::default(),
            slots: IdMap::default(),
            reserved: ReservedIds::default(),
            reserved_max: 0,
            recent: vec![(Handle(EventId::from_bytes([0; 16])), NO_SLOT); RECENT_SLOTS]
                .into_boxed_slice(),
            gate: None,
            admission_limit: None,
            frames: Spill::default(),
            sealed_slots: Runs::default(),
            sealed_reserved: Runs::default(),
            handles_from: 0,
            reserved_from: 0,
            seal_at: 0,
            seal_batch: SEAL_BATCH as u32,
            spill_dir: None,
            earliest_end_ms: None,
        }
    }
}

/// Where `handle` goes in `ManifestStore::recent`: the low bits of its last byte pair, which are
/// random in v4 and v7 UUIDs (a handle chosen to collide only ever costs a fallback lookup).
fn recent_index(handle: &Handle) -> usize {
    let b = handle.0.as_bytes();
    usize::from(u16::from_le_bytes([b[14], b[15]])) & (RECENT_SLOTS - 1)
}

/// The five IDs manifest `slot` reserves, with their steps.
fn reservations_of(
    slot: u32,
    registration: EventId,
    ids: &LifecycleIds,
) -> [(EventId, Reservation); 5] {
    let r = |step| Reservation { slot, step };
    [
        (registration, r(Step::Registration)),
        (ids.running, r(Step::Running)),
        (ids.terminal, r(Step::Terminal)),
        (ids.lost, r(Step::Lost)),
        (ids.completion, r(Step::Completion)),
    ]
}

/// A record that states a fact about an allocated step carries the ID derived from that step's
/// (`event::derived`): the one ID a retry of the same fact uses, so that the journal holds each
/// such fact once and a reader finds it by ID.
/// A release without a recorded scope is the one a guardian's receipt without a workload status
/// gives: a launch aborted before its scope was recorded never sent `GO`, so its gated workload
/// never exec'd (journal-format.md, rule E). Any other proof needs the scope it speaks of.
fn proves_an_aborted_launch(proof: &ExitProof) -> bool {
    matches!(
        proof,
        ExitProof::Receipt {
            status: ExitStatus::Unknown,
            ..
        }
    )
}

fn derived(
    event: &'static str,
    found: EventId,
    from: EventId,
    purpose: u8,
) -> Result<(), Rejection> {
    let expected = from.derived(purpose);
    if found == expected {
        Ok(())
    } else {
        Err(Rejection::UnexpectedDerivedId {
            event,
            found,
            expected,
        })
    }
}

fn allocated(event: &'static str, found: EventId, allocated: EventId) -> Result<(), Rejection> {
    if found == allocated {
        Ok(())
    } else {
        Err(Rejection::UnexpectedEventId {
            event,
            found,
            allocated,
        })
    }
}

/// A gap recorded in pieces (a disk full across checkpoints): the piece that starts where the
/// last gap ends, for the same reason, extends it.
fn joins(last: &crate::spool::Gap, next: &crate::spool::Gap) -> bool {
    last.to == next.from && (last.reason, last.errno) == (next.reason, next.errno)
}

fn bounds_grow(old: CursorBounds, new: CursorBounds) -> Result<(), Rejection> {
    if new.is_valid() && new.extends(&old) {
        Ok(())
    } else {
        Err(Rejection::CursorBackwards { old, new })
    }
}

fn move_to(m: &Manifest, to: State) -> Result<(), Rejection> {
    if m.state.is_terminal() {
        return Err(Rejection::AlreadyTerminal(m.state));
    }
    if !m.state.can_move_to(to) {
        return Err(Rejection::Transition { from: m.state, to });
    }
    Ok(())
}

fn not_terminal(m: &Manifest) -> Result<(), Rejection> {
    if m.state.is_terminal() {
        return Err(Rejection::AlreadyTerminal(m.state));
    }
    Ok(())
}

/// The checks of every event but a registration and the gate, against its handle's manifest.
fn validate(m: &Manifest, event_id: EventId, event: &LifecycleEvent) -> Result<Applied, Rejection> {
    match event {
        LifecycleEvent::Registered(e) => Err(Rejection::AlreadyRegistered(e.handle)),
        // Root-level: `ManifestStore` checks them against the gate and the limit, never
        // against a manifest.
        LifecycleEvent::GateChanged(e) => Err(Rejection::GateUnchanged(e.paused)),
        LifecycleEvent::AdmissionLimitSet(e) => {
            Err(Rejection::AdmissionLimitUnchanged(e.max_concurrent))
        }
        LifecycleEvent::HumanInput(e) => input_wait(m, e),
        LifecycleEvent::DeadlineFired(e) => fired(m, e),
        LifecycleEvent::DeadlineFailed(e) => deadline_failed(m, e),
        LifecycleEvent::RegisteredV2(e) => Err(Rejection::AlreadyRegistered(e.handle)),
        LifecycleEvent::Running(_) => {
            move_to(m, State::Running)?;
            allocated("running", event_id, m.ids.running)?;
            Ok(Applied::Changed)
        }
        LifecycleEvent::StopRequested(_) => {
            if m.state.is_terminal() {
                return Err(Rejection::AlreadyTerminal(m.state));
            }
            Ok(Applied::Changed)
        }
        LifecycleEvent::TerminalResized(e) => resized(m, e),
        LifecycleEvent::InputClosed(_) => {
            if m.input_closed {
                return Err(Rejection::InputAlreadyClosed);
            }
            Ok(Applied::Changed)
        }
        LifecycleEvent::OutputCheckpoint(e) => {
            if m.state.is_terminal() {
                return Err(Rejection::AlreadyTerminal(m.state));
            }
            bounds_grow(m.bounds, e.bounds)?;
            Ok(Applied::Changed)
        }
        LifecycleEvent::Terminal(e) if !e.state.is_terminal() => {
            Err(Rejection::NotTerminal(e.state))
        }
        LifecycleEvent::Terminal(e) => {
            let step = (event_id, m.ids.terminal);
            ends(m, e.state, "terminal", step, e.bounds)
        }
        LifecycleEvent::LostOnRestore(e) => {
            let step = (event_id, m.ids.lost);
            ends(m, State::LostOnRestore, "lost_on_restore", step, e.bounds)
        }
        LifecycleEvent::LifecyclePublished(e) => published(m, event_id, e),
        LifecycleEvent::Scoped(e) => scoped(m, event_id, e),
        LifecycleEvent::TreeReleased(e) => released(m, event_id, e),
        LifecycleEvent::OutputGap(e) => gap(m, e),
        LifecycleEvent::OutputRetired(e) => retired(m, event_id, e),
        LifecycleEvent::CompletionNotified(e) => notified(m, event_id, e),
    }
}

/// A change of whether the process waits for a human's input; never a repeat of the last.
fn input_wait(m: &Manifest, e: &HumanInput) -> Result<Applied, Rejection> {
    not_terminal(m)?;
    if e.waiting == m.awaiting_input.is_some() {
        return Err(Rejection::InputWaitUnchanged(e.waiting));
    }
    Ok(Applied::Changed)
}

/// A new size of a running process's terminal.
fn resized(m: &Manifest, e: &TerminalResized) -> Result<Applied, Rejection> {
    if m.state != State::Running {
        return Err(Rejection::NotRunning(m.state));
    }
    if e.rows == 0 || e.cols == 0 {
        return Err(Rejection::TerminalSize {
            rows: e.rows,
            cols: e.cols,
        });
    }
    Ok(Applied::Changed)
}

/// The end of a process (`to`, terminal), under the ID allocated for that step (`step`: found,
/// allocated), with bounds that extend the last ones.
fn ends(
    m: &Manifest,
    to: State,
    what: &'static str,
    (found, allocated_id): (EventId, EventId),
    bounds: CursorBounds,
) -> Result<Applied, Rejection> {
    move_to(m, to)?;
    allocated(what, found, allocated_id)?;
    bounds_grow(m.bounds, bounds)?;
    Ok(Applied::Changed)
}

/// A deadline fires once, with the limit its registration configured.
fn fired(m: &Manifest, e: &DeadlineFired) -> Result<Applied, Rejection> {
    not_terminal(m)?;
    if let Some(d) = &m.deadline {
        return Err(Rejection::DeadlineAlreadyFired(d.deadline.name()));
    }
    let configured = configured_limit(m, e.deadline);
    if configured != Some(e.limit_ms) {
        return Err(Rejection::DeadlineLimit {
            deadline: e.deadline.name(),
            found: e.limit_ms,
            configured,
        });
    }
    Ok(Applied::Changed)
}

/// A failure to enforce the deadline that fired, a bounded number of times.
fn deadline_failed(m: &Manifest, e: &DeadlineFailed) -> Result<Applied, Rejection> {
    not_terminal(m)?;
    if m.deadline.as_ref().map(|d| d.deadline) != Some(e.deadline) {
        return Err(Rejection::DeadlineNotFired);
    }
    if m.deadline_failures.len() >= crate::limits::DEADLINE_FAILURES_MAX {
        return Err(Rejection::TooManyDeadlineFailures(
            m.deadline_failures.len(),
        ));
    }
    Ok(Applied::Changed)
}

/// A publication of a recorded lifecycle event, under the ID derived from it.
fn published(
    m: &Manifest,
    event_id: EventId,
    e: &LifecyclePublished,
) -> Result<Applied, Rejection> {
    let recorded = match e.event {
        id if id == m.ids.running => m.pid.is_some(),
        id if id == m.ids.terminal || id == m.ids.lost => {
            m.terminal.as_ref().is_some_and(|t| t.event_id == id)
        }
        _ => false,
    };
    if !recorded {
        return Err(Rejection::NotPublishable(e.event));
    }
    derived("lifecycle_published", event_id, e.event, PUBLISHED)?;
    Ok(if m.published.contains(&e.event) {
        Applied::Unchanged
    } else {
        Applied::Changed
    })
}

/// The scope of a live launch, recorded once (a retry repeats it exactly).
fn scoped(m: &Manifest, event_id: EventId, e: &Scoped) -> Result<Applied, Rejection> {
    let applied = match &m.scope {
        Some(scope) if scope == e => Applied::Unchanged,
        Some(_) => return Err(Rejection::ScopeAlreadyRecorded),
        None if m.state.is_terminal() => return Err(Rejection::AlreadyTerminal(m.state)),
        None => Applied::Changed,
    };
    derived("scoped", event_id, m.ids.running, SCOPED)?;
    Ok(applied)
}

/// The proof that a scoped tree (or an aborted launch's) has ended, recorded once.
fn released(m: &Manifest, event_id: EventId, e: &TreeReleased) -> Result<Applied, Rejection> {
    let applied = match &m.released {
        _ if m.scope.is_none() && !proves_an_aborted_launch(&e.proof) => {
            return Err(Rejection::NotScoped);
        }
        Some(proof) if *proof == e.proof => Applied::Unchanged,
        Some(_) => return Err(Rejection::AlreadyReleased),
        None => Applied::Changed,
    };
    derived("tree_released", event_id, m.ids.terminal, RELEASED)?;
    Ok(applied)
}

/// A loss of output, in cursor order; a piece continuing the last gap joins it.
fn gap(m: &Manifest, e: &OutputGap) -> Result<Applied, Rejection> {
    if m.state.is_terminal() {
        return Err(Rejection::AlreadyTerminal(m.state));
    }
    let g = e.gap;
    // Retention is a policy, never recorded as a loss; gaps come in cursor order, as
    // the spool makes them; a piece that continues the last gap joins it.
    let ordered = m.gaps.last().is_none_or(|last| last.to <= g.from);
    let joins = m.gaps.last().is_some_and(|last| joins(last, &g));
    if g.from >= g.to
        || g.reason == crate::spool::LossReason::Retention
        || !ordered
        || (!joins && m.gaps.len() >= crate::limits::GAPS_PER_PROCESS_MAX)
    {
        return Err(Rejection::BadGap { gap: g });
    }
    Ok(Applied::Changed)
}

/// The retirement of a verified-exit process's output, recorded once.
fn retired(m: &Manifest, event_id: EventId, e: &OutputRetired) -> Result<Applied, Rejection> {
    let applied = match &m.retired {
        Some(r) if r.reason == e.reason && r.at_unix_ms == e.at_unix_ms => Applied::Unchanged,
        Some(_) => return Err(Rejection::AlreadyRetired),
        None if !m.exit_verified() => return Err(Rejection::NotRetirable(m.state)),
        None => Applied::Changed,
    };
    derived("output_retired", event_id, m.ids.terminal, RETIRED)?;
    Ok(applied)
}

/// The host's notification of the completion, after the terminal event.
fn notified(m: &Manifest, event_id: EventId, e: &CompletionNotified) -> Result<Applied, Rejection> {
    if m.terminal.is_none() {
        return Err(Rejection::CompletionBeforeTerminal);
    }
    if e.command != m.ids.completion {
        return Err(Rejection::CompletionIdMismatch {
            found: e.command,
            allocated: m.ids.completion,
        });
    }
    derived("completion_notified", event_id, m.ids.completion, NOTIFIED)?;
    Ok(if m.completion_notified {
        Applied::Unchanged
    } else {
        Applied::Changed
    })
}

/// Folds an accepted event into its manifest, moving the event's strings out of it (replay's
/// events are decoded for this fold alone; nothing is copied twice).
fn fold(m: &mut Manifest, event_id: EventId, event: &mut LifecycleEvent) {
    match event {
        // The terminal's size is the journal's to tell (its newest `TerminalResized`); the
        // manifest keeps no copy, so snapshots need none.
        LifecycleEvent::Registered(_)
        | LifecycleEvent::RegisteredV2(_)
        | LifecycleEvent::TerminalResized(_) => {}
        LifecycleEvent::Running(e) => {
            m.state = State::Running;
            m.pid = Some(e.pid);
            m.witness = Some(e.witness);
            m.running_unix_ms = Some(e.at_unix_ms);
        }
        LifecycleEvent::StopRequested(e) => {
            m.stop_requests = m.stop_requests.saturating_add(1);
            if m.first_stop.is_none() {
                m.first_stop = Some((
                    std::mem::take(&mut e.reason),
                    std::mem::take(&mut e.requested_by),
                ));
            }
        }
        LifecycleEvent::InputClosed(_) => m.input_closed = true,
        LifecycleEvent::OutputCheckpoint(e) => m.bounds = e.bounds,
        LifecycleEvent::Terminal(e) => {
            m.state = e.state;
            m.bounds = e.bounds;
            m.terminal = Some(terminal_result(e, event_id));
        }
        LifecycleEvent::LostOnRestore(e) => {
            m.state = State::LostOnRestore;
            m.bounds = e.bounds;
            m.terminal = Some(lost_result(e, event_id));
        }
        LifecycleEvent::LifecyclePublished(e) => {
            m.published.insert(e.event);
        }
        LifecycleEvent::CompletionNotified(_) => m.completion_notified = true,
        LifecycleEvent::Scoped(e) => m.scope = Some(e.clone()),
        LifecycleEvent::TreeReleased(e) => m.released = Some(e.proof.clone()),
        LifecycleEvent::OutputRetired(e) => {
            m.retired = Some(Retirement {
                reason: std::mem::take(&mut e.reason),
                at_unix_ms: e.at_unix_ms,
            })
        }
        LifecycleEvent::OutputGap(e) => match m.gaps.last_mut() {
            Some(last) if joins(last, &e.gap) => last.to = e.gap.to,
            _ => m.gaps.push(e.gap),
        },
        LifecycleEvent::HumanInput(e) => {
            m.awaiting_input = e.waiting.then_some(e.at_unix_ms);
        }
        LifecycleEvent::DeadlineFired(e) => m.deadline = Some(e.clone()),
        LifecycleEvent::DeadlineFailed(e) => m.deadline_failures.push(e.clone()),
        // Root-level: folded into the store's gate and limit, never into a manifest.
        LifecycleEvent::GateChanged(_) | LifecycleEvent::AdmissionLimitSet(_) => {}
    }
}

/// The result a `Terminal` event records, its strings moved out of the event.
fn terminal_result(e: &mut Terminal, event_id: EventId) -> TerminalResult {
    TerminalResult {
        state: e.state,
        exit: e.exit,
        capture: std::mem::replace(&mut e.capture, CaptureStatus::Complete),
        reason: std::mem::take(&mut e.reason),
        at_unix_ms: e.at_unix_ms,
        event_id,
    }
}

/// The result a `LostOnRestore` event records: nothing is known of how the process ended.
fn lost_result(e: &LostOnRestore, event_id: EventId) -> TerminalResult {
    TerminalResult {
        state: State::LostOnRestore,
        exit: ExitStatus::Unknown,
        capture: CaptureStatus::Incomplete("lost on restore".to_owned()),
        reason: "the supervisor restarted while the process was live".to_owned(),
        at_unix_ms: e.at_unix_ms,
        event_id,
    }
}

impl ManifestStore {
    #[cfg(any(test, feature = "test-support"))]
    pub fn new() -> Self {
        Self::default()
    }

    fn slot(&self, handle: &Handle) -> Option<usize> {
        let (h, slot) = self.recent[recent_index(handle)];
        if slot != NO_SLOT && h == *handle {
            return Some(slot as usize);
        }
        self.slots
            .get(handle)
            .copied()
            .or_else(|| self.sealed_slots.get(&handle.0.as_bytes()))
            .map(|slot| slot as usize)
    }

    /// [`ManifestStore::slot`], remembering the answer in `recent`.
    fn slot_mut(&mut self, handle: &Handle) -> Option<usize> {
        let at = recent_index(handle);
        let (h, slot) = self.recent[at];
        if slot != NO_SLOT && h == *handle {
            return Some(slot as usize);
        }
        let slot = u32::try_from(self.slot(handle)?).ok()?;
        self.recent[at] = (*handle, slot);
        Some(slot as usize)
    }

    /// The manifest of `handle`: borrowed, or decoded from its settled frame.
    pub fn get(&self, handle: &Handle) -> Option<Cow<'_, Manifest>> {
        self.at(self.slot(handle)?)
    }

    /// The manifest at `position`, borrowed or decoded.
    fn at(&self, position: usize) -> Option<Cow<'_, Manifest>> {
        self.read(position)?
            .map_err(|e| tracing::error!(position, "{e}"))
            .ok()
    }

    /// The manifest at `position`, if there is one: borrowed, or decoded from its frame. A
    /// frame is its manifest's encoding or the bytes it was decoded from (the codec's round
    /// trip, tested), so one that no longer decodes was changed in memory under us: said, with
    /// why, never taken for a missing manifest.
    fn read(&self, position: usize) -> Option<Result<Cow<'_, Manifest>, String>> {
        Some(match self.manifests.get(position)? {
            SlotRef::Live(m) => Ok(Cow::Borrowed(m)),
            SlotRef::Settled(frame) => frame
                .decode(&self.frames, position as u64 + 1)
                .map(|(_, m)| Cow::Owned(m))
                .map_err(|e| format!("a settled manifest no longer decodes: {e}")),
        })
    }

    /// The last change of the pause gate, if it ever changed.
    pub fn gate(&self) -> Option<&GateChanged> {
        self.gate.as_ref()
    }

    /// Whether the pause gate is closed to new starts.
    pub fn paused(&self) -> bool {
        self.gate.as_ref().is_some_and(|g| g.paused)
    }

    /// Sets the gate read back from a snapshot (a store's gate is otherwise only ever changed
    /// by an accepted `GateChanged`).
    pub(crate) fn restore_gate(&mut self, gate: Option<GateChanged>) {
        self.gate = gate;
    }

    /// The last admission limit set at runtime, if one ever was.
    pub fn admission_limit(&self) -> Option<&AdmissionLimitSet> {
        self.admission_limit.as_ref()
    }

    /// The admission limit in force: `Some(n)` set at runtime, `None` the configured policy.
    pub fn admission_max_concurrent(&self) -> Option<u64> {
        self.admission_limit.as_ref().and_then(|l| l.max_concurrent)
    }

    /// Sets the limit read back from a snapshot (a store's limit is otherwise only ever changed
    /// by an accepted `AdmissionLimitSet`).
    pub(crate) fn restore_admission_limit(&mut self, limit: Option<AdmissionLimitSet>) {
        self.admission_limit = limit;
    }

    fn check_admission_limit(&self, e: &AdmissionLimitSet) -> Result<Applied, Rejection> {
        if e.max_concurrent == Some(0) {
            return Err(Rejection::AdmissionLimitZero);
        }
        if e.max_concurrent == self.admission_max_concurrent() {
            return Err(Rejection::AdmissionLimitUnchanged(e.max_concurrent));
        }
        Ok(Applied::Changed)
    }

    fn check_gate(&self, e: &GateChanged) -> Result<Applied, Rejection> {
        if e.paused == self.paused() {
            return Err(Rejection::GateUnchanged(e.paused));
        }
        Ok(Applied::Changed)
    }

    /// The manifest with this number (`Manifest::number`: its position, from 1).
    pub fn by_number(&self, number: u64) -> Option<Cow<'_, Manifest>> {
        let position = usize::try_from(number.checked_sub(1)?).ok()?;
        self.at(position)
    }

    /// Manifests in registration order, settled ones decoded as they come.
    pub fn iter(&self) -> impl Iterator<Item = Cow<'_, Manifest>> {
        (0..self.manifests.len()).filter_map(|position| self.at(position))
    }

    /// Manifests newest first, settled ones decoded as they come.
    pub fn iter_rev(&self) -> impl Iterator<Item = Cow<'_, Manifest>> {
        (0..self.manifests.len())
            .rev()
            .filter_map(|position| self.at(position))
    }

    /// The manifests held decoded, in registration order: every one that is not settled
    /// ([`Manifest::settled`]), and any settled one whose frame could not be kept.
    pub fn live(&self) -> impl Iterator<Item = &Manifest> {
        self.manifests.live()
    }

    /// How many settled manifests had their output retired, and every other manifest, in
    /// registration order: what a retention pass judges, without decoding the settled manifests
    /// it has nothing to do for.
    pub fn unretired(&self) -> (u64, impl Iterator<Item = Cow<'_, Manifest>>) {
        let retired = |s: SlotRef<'_>| matches!(s, SlotRef::Settled(frame) if frame.retired());
        let slots = || (0..self.manifests.len()).filter_map(|p| self.manifests.get(p));
        let count = slots().filter(|s| retired(*s)).count() as u64;
        let rest = (0..self.manifests.len())
            .filter(move |&p| self.manifests.get(p).is_some_and(|s| !retired(s)))
            .filter_map(|p| self.at(p));
        (count, rest)
    }

    /// Whether `handle`'s output was retired, read from its slot (a settled manifest's frame
    /// keeps the answer, so it is not decoded); `None` for a handle the store does not hold.
    pub fn retired(&self, handle: &Handle) -> Option<bool> {
        match self.manifests.get(self.slot(handle)?)? {
            SlotRef::Live(m) => Some(m.retired.is_some()),
            SlotRef::Settled(frame) => Some(frame.retired()),
        }
    }

    /// Whether a manifest held may have ended at or before `at_ms` (Unix ms): false only when
    /// none did (see `earliest_end_ms`), so a retention pass that finds nothing could be due
    /// for its age need not read a manifest.
    pub fn may_have_ended_by(&self, at_ms: u64) -> bool {
        self.earliest_end_ms.is_some_and(|end| end <= at_ms)
    }

    /// How many manifests are held settled (module doc).
    pub fn settled(&self) -> usize {
        // Every slot is either.
        self.manifests.len() - self.manifests.live_count()
    }

    pub fn len(&self) -> usize {
        self.manifests.len()
    }

    #[cfg(any(test, feature = "test-support"))]
    pub fn is_empty(&self) -> bool {
        self.manifests.len() == 0
    }

    /// The handle an ID is reserved for, as rejections name it.
    fn holder(&self, r: Reservation) -> Handle {
        // Every reservation names a manifest pushed with it; the fallback is never taken.
        match self.manifests.get(r.slot as usize) {
            Some(SlotRef::Live(m)) => m.handle,
            Some(SlotRef::Settled(frame)) => frame.handle(&self.frames),
            None => Handle(EventId::from_bytes([0; 16])),
        }
    }

    /// The IDs the manifest at `slot` allocated.
    fn ids_at(&self, slot: usize) -> Option<LifecycleIds> {
        self.manifests.get(slot).map(|s| s.ids(&self.frames))
    }

    /// The ID a reservation was made for (what the reservation index checks a hit against).
    fn key_of(&self, r: Reservation) -> Option<EventId> {
        let slot = r.slot as usize;
        let ids = self.ids_at(slot)?;
        Some(match r.step {
            Step::Registration => self.manifests.registration(slot)?,
            Step::Running => ids.running,
            Step::Terminal => ids.terminal,
            Step::Lost => ids.lost,
            Step::Completion => ids.completion,
        })
    }

    fn reservation(&self, id: &EventId) -> Option<Reservation> {
        if id.0.as_u128() > self.reserved_max {
            return None;
        }
        self.reserved.get(id, |r| self.key_of(r)).or_else(|| {
            self.sealed_reserved
                .get(&id.as_bytes())
                .map(Reservation::unpack)
        })
    }

    /// An event under a reserved ID must be exactly the step it is reserved for.
    pub(crate) fn check_reservation(
        &self,
        event_id: EventId,
        event: &LifecycleEvent,
    ) -> Result<(), Rejection> {
        let Some(r) = self.reservation(&event_id) else {
            return Ok(());
        };
        let step = match event {
            LifecycleEvent::Registered(_) | LifecycleEvent::RegisteredV2(_) => {
                Some(Step::Registration)
            }
            LifecycleEvent::Running(_) => Some(Step::Running),
            LifecycleEvent::Terminal(_) => Some(Step::Terminal),
            LifecycleEvent::LostOnRestore(_) => Some(Step::Lost),
            _ => None,
        };
        let handle = self.holder(r);
        if step == Some(r.step) && Some(handle) == event.handle() {
            Ok(())
        } else {
            Err(Rejection::IdReserved {
                id: event_id,
                handle,
            })
        }
    }

    fn check_registration(
        &self,
        event_id: EventId,
        handle: Handle,
        ids: &LifecycleIds,
        restart_of: Option<Handle>,
    ) -> Result<Applied, Rejection> {
        if self.slot(&handle).is_some() {
            return Err(Rejection::AlreadyRegistered(handle));
        }
        // A restart links to a process registered before it (never itself, never a later one).
        if let Some(old) = restart_of
            && self.slot(&old).is_none()
        {
            return Err(Rejection::UnknownRestart(old));
        }
        let all = [
            event_id,
            ids.running,
            ids.terminal,
            ids.lost,
            ids.completion,
        ];
        for (i, id) in all.iter().enumerate() {
            if all[..i].contains(id) {
                return Err(Rejection::DuplicateAllocatedId);
            }
            if let Some(r) = self.reservation(id) {
                return Err(Rejection::IdReserved {
                    id: *id,
                    handle: self.holder(r),
                });
            }
        }
        if self.manifests.len() >= SLOTS_MAX {
            return Err(Rejection::StoreFull(self.manifests.len()));
        }
        Ok(Applied::Changed)
    }

    /// Decides whether `event`, appended under `event_id`, is valid now. Changes nothing.
    pub fn check(&self, event_id: EventId, event: &LifecycleEvent) -> Result<Applied, Rejection> {
        match event {
            LifecycleEvent::Registered(e) => {
                return self.check_registration(event_id, e.handle, &e.ids, None);
            }
            LifecycleEvent::RegisteredV2(e) => {
                return self.check_registration(event_id, e.handle, &e.ids, e.restart_of);
            }
            _ => {}
        }
        self.check_reservation(event_id, event)?;
        match event {
            LifecycleEvent::GateChanged(gate) => self.check_gate(gate),
            LifecycleEvent::AdmissionLimitSet(limit) => self.check_admission_limit(limit),
            _ => {
                let handle = event.handle().ok_or(Rejection::GateUnchanged(false))?;
                let slot = self.slot(&handle).ok_or(Rejection::UnknownHandle(handle))?;
                let read = self.read(slot).ok_or(Rejection::UnknownHandle(handle))?;
                let m = read.map_err(|reason| Rejection::SettledUnreadable { handle, reason })?;
                validate(&m, event_id, event)
            }
        }
    }

    /// Checks `event` and folds it into its manifest.
    pub fn apply(
        &mut self,
        event_id: EventId,
        event: &LifecycleEvent,
    ) -> Result<Applied, Rejection> {
        match Registration::of(event) {
            Some(r) => self.register(event_id, r),
            None => self.apply_owned(event_id, event.clone()),
        }
    }

    /// Checks a registration and adds its manifest, reserving every ID it allocates. Replay calls
    /// it with a registration decoded straight into its stored form.
    pub(crate) fn register(
        &mut self,
        event_id: EventId,
        e: Registration,
    ) -> Result<Applied, Rejection> {
        self.push(
            event_id,
            Manifest {
                handle: e.handle,
                number: 0,
                ids: e.ids,
                command: e.command,
                restart_of: e.restart_of,
                registered_unix_ms: e.at_unix_ms,
                state: State::Starting,
                pid: None,
                witness: None,
                running_unix_ms: None,
                stop_requests: 0,
                first_stop: None,
                input_closed: false,
                bounds: CursorBounds::default(),
                terminal: None,
                published: BTreeSet::new(),
                completion_notified: false,
                scope: None,
                released: None,
                gaps: Vec::new(),
                retired: None,
                awaiting_input: None,
                deadline: None,
                deadline_failures: Vec::new(),
            },
            None,
        )
    }

    /// Rebuilds a store from manifests read back from a snapshot (each with its registration's
    /// event ID), in registration order. Each goes through the checks of a registration (a handle
    /// once, every allocated ID reserved once, the store's bound) and must be a manifest some
    /// sequence of accepted events produces ([`consistent`]): a snapshot that decodes is never a
    /// projection replay could not have given.
    #[cfg(test)]
    pub(crate) fn restore(
        entries: impl ExactSizeIterator<Item = (EventId, Manifest)>,
    ) -> Result<ManifestStore, InvalidManifest> {
        let mut store = ManifestStore::restoring(entries.len(), Spill::default());
        for (position, (registration, m)) in entries.enumerate() {
            store.restore_one(position, registration, m, None)?;
        }
        Ok(store)
    }

    /// An empty store sized for `n` manifests read back from a snapshot, which
    /// [`ManifestStore::restore_one`] then adds one by one, in registration order; `frames`
    /// is where their settled frames go (made over the snapshot's bytes, it keeps them there).
    pub(crate) fn restoring(n: usize, frames: Spill) -> ManifestStore {
        // Sized once for all of them: growing the reservations as they come re-files them
        // over and over.
        let mut store = ManifestStore {
            frames,
            ..ManifestStore::default()
        };
        let n = n.min(SLOTS_MAX);
        store.slots.reserve(n);
        store.reserved.rebuild(5 * n, std::iter::empty());
        store
    }

    /// Adds a manifest read back from a snapshot (with its registration's event ID), the
    /// `position`-th in registration order. It goes through the checks of a registration (a
    /// handle once, every allocated ID reserved once, the store's bound) and must be a manifest
    /// some sequence of accepted events produces ([`consistent`]): a snapshot that decodes is
    /// never a projection replay could not have given.
    /// `frame`, when given, is the current snapshot frame `m` was just decoded from: kept as it
    /// is if `m` is settled, instead of encoding it again.
    pub(crate) fn restore_one(
        &mut self,
        position: usize,
        registration: EventId,
        m: Manifest,
        frame: Option<&[u8]>,
    ) -> Result<(), InvalidManifest> {
        let invalid = |reason: String| InvalidManifest { position, reason };
        consistent(&m).map_err(|r| invalid(r.to_owned()))?;
        self.push(registration, m, frame)
            .map_err(|r| invalid(r.to_string()))?;
        Ok(())
    }

    /// Every manifest with the event ID of its registration, in registration order.
    /// A slot that cannot be read (which only a bug in this process could cause) is its
    /// position, as an error.
    pub(crate) fn entries(&self) -> impl Iterator<Item = Result<(EventId, Held<'_>), usize>> {
        (0..self.manifests.len()).map(|p| {
            let (registration, slot) = self.manifests.entry(p).ok_or(p)?;
            let held = match slot {
                SlotRef::Live(m) => Held::Live(m),
                SlotRef::Settled(frame) => Held::Settled(frame.bytes(&self.frames)),
            };
            Ok((registration, held))
        })
    }

    /// Gives the store a directory for spill files (unnamed, `crate::spill`): the frames of
    /// settled manifests move into one, and every later one is spilled there; so do the slots'
    /// whole blocks; the handles and reservations of all manifests so far are sealed into sorted
    /// runs, and those of each later batch of [`SEAL_BATCH`] manifests are too. From then on a
    /// finished process costs the heap nothing beyond bounded tables. If the file system refuses
    /// (a full one), what it refused stays on the heap, and the error says why.
    pub(crate) fn spill_into(&mut self, dir: Arc<Dir>) -> Result<(), SpillError> {
        self.spill_dir = Some(Arc::clone(&dir));
        // Chunk by chunk, each frame at the same place: no frame's location changes. A refusal
        // gives the frames back where they were.
        let frames = std::mem::take(&mut self.frames);
        let (frames, outcome) = match dir.unnamed_file() {
            Err(e) => (frames, Err(SpillError::from(e))),
            Ok(file) => match frames.into_file(file) {
                Ok(moved) => (moved, Ok(())),
                Err((kept, e)) => (kept, Err(e)),
            },
        };
        self.frames = frames;
        // The slots too, block by block: only the last part-block stays on the heap.
        let slots = dir
            .unnamed_file()
            .map_err(SpillError::from)
            .and_then(|file| self.manifests.spill_into(file));
        self.seal();
        outcome.and(slots)
    }

    /// Moves the handles and reservations of the manifests not yet sealed into sorted runs in
    /// spill files, emptying the hash tables that held them. A run the file system refuses
    /// leaves its entries in their table: that costs memory, never an answer.
    fn seal(&mut self) {
        let Some(dir) = self.spill_dir.clone() else {
            return;
        };
        let mut spill = || Spill::in_dir(&dir);
        let to = self.manifests.len() as u32;
        // Once a batch more, whatever this seal manages: a refusal is not retried per start.
        self.seal_at = to.saturating_add(self.seal_batch);
        let reserved: Vec<([u8; 16], u32)> = (self.reserved_from..to)
            .flat_map(|slot| {
                let (registration, ids) = (
                    self.manifests.registration(slot as usize),
                    self.ids_at(slot as usize),
                );
                registration
                    .zip(ids)
                    .map(|(r, ids)| reservations_of(slot, r, &ids))
            })
            .flatten()
            .map(|(id, r)| (id.as_bytes(), r.pack()))
            .collect();
        match self.sealed_reserved.add(reserved, &mut spill) {
            Ok(()) => {
                self.reserved = ReservedIds::default();
                self.reserved_from = to;
            }
            Err(e) => tracing::warn!("reserved IDs stay on the heap: {e}"),
        }
        let handles: Vec<([u8; 16], u32)> = self
            .slots
            .iter()
            .map(|(h, &slot)| (h.0.as_bytes(), slot))
            .collect();
        match self.sealed_slots.add(handles, &mut spill) {
            Ok(()) => {
                self.slots = IdMap::default();
                self.handles_from = to;
            }
            Err(e) => tracing::warn!("handles stay on the heap: {e}"),
        }
        crate::heap::release_freed_memory();
    }

    /// Seals every `n` manifests instead of every [`SEAL_BATCH`].
    #[cfg(test)]
    pub(crate) fn seal_every(&mut self, n: u32) {
        self.seal_batch = n;
    }

    /// How many handles and reservations are sealed into runs, off the heap.
    #[cfg(any(test, feature = "test-support"))]
    pub fn sealed_ids(&self) -> (usize, usize) {
        (self.sealed_slots.len(), self.sealed_reserved.len())
    }

    /// Bytes of settled frames held on the heap (not in a spill file, not read in place).
    #[cfg(any(test, feature = "test-support"))]
    pub fn frames_on_heap(&self) -> usize {
        self.frames.heap_bytes()
    }

    /// Whether settled frames leave the heap (a file was given and took them).
    #[cfg(any(test, feature = "test-support"))]
    pub fn spills_to_file(&self) -> bool {
        self.frames.is_file()
    }

    /// Whether the slots' whole blocks left the heap, and how many slots stay on it.
    #[cfg(any(test, feature = "test-support"))]
    pub fn slots_spilled(&self) -> (bool, usize) {
        (self.manifests.is_file(), self.manifests.on_heap())
    }

    /// Unmaps the pages of settled frames that reads mapped into this process (a snapshot reads
    /// them all); they stay in the page cache.
    pub(crate) fn release_resident(&self) {
        self.frames.release_resident();
        self.manifests.release_resident();
    }

    /// Every manifest's allocated IDs with its registration's event ID, in registration order.
    pub(crate) fn allocations(&self) -> impl Iterator<Item = (EventId, LifecycleIds)> {
        (0..self.manifests.len())
            .filter_map(|slot| Some((self.manifests.registration(slot)?, self.ids_at(slot)?)))
    }

    /// Checks a manifest's registration and adds it, reserving every ID it allocates.
    fn push(
        &mut self,
        event_id: EventId,
        mut m: Manifest,
        frame: Option<&[u8]>,
    ) -> Result<Applied, Rejection> {
        self.check_registration(event_id, m.handle, &m.ids, m.restart_of)?;
        // `check_registration` refuses a position past `SLOTS_MAX`, which fits a `u32`.
        let slot = u32::try_from(self.manifests.len())
            .map_err(|_| Rejection::StoreFull(self.manifests.len()))?;
        let reserve = reservations_of(slot, event_id, &m.ids);
        if !self.reserved.has_room_for(reserve.len()) {
            // The table holds the reservations of the manifests from `reserved_from` on.
            let (manifests, frames) = (&self.manifests, &self.frames);
            let all = (self.reserved_from..slot).flat_map(|p| {
                let held = manifests.get(p as usize);
                let registration = manifests.registration(p as usize);
                held.zip(registration)
                    .map(|(held, r)| reservations_of(p, r, &held.ids(frames)))
                    .into_iter()
                    .flatten()
            });
            self.reserved.rebuild(reserve.len(), all);
        }
        for (id, r) in reserve {
            self.reserved_max = self.reserved_max.max(id.0.as_u128());
            self.reserved.insert_absent(id, r);
        }
        self.slots.insert(m.handle, slot);
        m.number = u64::from(slot) + 1;
        note_end(&mut self.earliest_end_ms, &m);
        let kept = match frame {
            Some(frame) if m.settled() => SettledFrame::decoded_from(frame, &m, &mut self.frames),
            _ => None,
        };
        let held = match kept {
            Some(frame) => Slot::Settled(frame),
            None => held_slot(event_id, m, &mut self.frames),
        };
        self.manifests.push(event_id, held);
        // After the push: a seal covers every manifest held, this one's tables entries too.
        if self.spill_dir.is_some() && slot >= self.seal_at {
            self.seal();
        }
        Ok(Applied::Changed)
    }

    /// Like [`ManifestStore::apply`], consuming the event (its strings move into the manifest).
    pub fn apply_owned(
        &mut self,
        event_id: EventId,
        mut event: LifecycleEvent,
    ) -> Result<Applied, Rejection> {
        self.apply_event(event_id, &mut event)
    }

    /// Checks `event` and folds it in, taking its strings (replay's path: the event was decoded
    /// for this alone). Makes the same decisions as [`ManifestStore::check`], in the same order,
    /// with fewer lookups: one for the handle, and one for the reservation unless the event is a
    /// step under the ID its own registration allocated for that step (each ID is reserved once,
    /// for one step of one handle, so that reservation is known to pass).
    pub(crate) fn apply_event(
        &mut self,
        event_id: EventId,
        event: &mut LifecycleEvent,
    ) -> Result<Applied, Rejection> {
        if let Some(r) = Registration::of(event) {
            return self.register(event_id, r);
        }
        if let LifecycleEvent::GateChanged(gate) = &*event {
            self.check_reservation(event_id, event)?;
            let applied = self.check_gate(gate)?;
            self.gate = Some(gate.clone());
            return Ok(applied);
        }
        if let LifecycleEvent::AdmissionLimitSet(limit) = &*event {
            self.check_reservation(event_id, event)?;
            let applied = self.check_admission_limit(limit)?;
            self.admission_limit = Some(limit.clone());
            return Ok(applied);
        }
        // Every other event names its process.
        let handle = event.handle().ok_or(Rejection::GateUnchanged(false))?;
        let Some(slot) = self.slot_mut(&handle) else {
            self.check_reservation(event_id, event)?;
            return Err(Rejection::UnknownHandle(handle));
        };
        let own_step = self.ids_at(slot).is_some_and(|ids| match event {
            LifecycleEvent::Running(_) => event_id == ids.running,
            LifecycleEvent::Terminal(_) => event_id == ids.terminal,
            LifecycleEvent::LostOnRestore(_) => event_id == ids.lost,
            _ => false,
        });
        if !own_step {
            self.check_reservation(event_id, event)?;
        }
        self.fold_at(slot, handle, event_id, event)
    }

    /// Validates `event` against the manifest at `slot` (of `handle`) and folds it in: in place
    /// for one held decoded, by decoding and holding it again for a settled one.
    fn fold_at(
        &mut self,
        slot: usize,
        handle: Handle,
        event_id: EventId,
        event: &mut LifecycleEvent,
    ) -> Result<Applied, Rejection> {
        let Some((registration, held)) = self.manifests.entry(slot) else {
            return Err(Rejection::UnknownHandle(handle));
        };
        let frames = &mut self.frames;
        match held {
            SlotRef::Live(_) => {
                let m = self
                    .manifests
                    .live_mut(slot)
                    .ok_or(Rejection::UnknownHandle(handle))?;
                let applied = validate(m, event_id, event)?;
                if applied == Applied::Changed {
                    fold(m, event_id, event);
                    note_end(&mut self.earliest_end_ms, m);
                    if m.settled()
                        && let Some(frame) = SettledFrame::settle(registration, m, frames)
                    {
                        self.manifests.set(slot, Slot::Settled(frame));
                    }
                }
                Ok(applied)
            }
            SlotRef::Settled(frame) => {
                let number = slot as u64 + 1;
                let (_, mut m) = frame
                    .decode(frames, number)
                    .map_err(|reason| Rejection::SettledUnreadable { handle, reason })?;
                let applied = validate(&m, event_id, event)?;
                if applied == Applied::Changed {
                    fold(&mut m, event_id, event);
                    note_end(&mut self.earliest_end_ms, &m);
                    let held = held_slot(registration, m, frames);
                    self.manifests.set(slot, held);
                }
                Ok(applied)
            }
        }
    }
}

/// Lowers `earliest` to `m`'s end, if it ended earlier (or first).
fn note_end(earliest: &mut Option<u64>, m: &Manifest) {
    if let Some(end) = m.terminal.as_ref().map(|t| t.at_unix_ms) {
        *earliest = Some(earliest.map_or(end, |e| e.min(end)));
    }
}

/// How the store holds `m`: settled if it is, else decoded.
fn held_slot(registration: EventId, m: Manifest, frames: &mut Spill) -> Slot {
    if m.settled()
        && let Some(frame) = SettledFrame::settle(registration, &m, frames)
    {
        return Slot::Settled(frame);
    }
    Slot::Live(Box::new(m))
}
