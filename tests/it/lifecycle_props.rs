//! State-machine property test of the lifecycle validator against a reference model written here,
//! independently of `src/lifecycle`, from the lifecycle's rules as the requirements give them:
//!
//! - transitions: starting -> running | failed | terminated | killed | lost_on_restore;
//!   running -> exited | failed | timed_out | interrupted | terminated | killed | lost_on_restore;
//!   nothing leaves a terminal state;
//! - a registration allocates five distinct IDs (its own event ID, running, terminal, lost,
//!   completion) and happens once per handle; every lifecycle step (running, terminal, lost) must
//!   be appended under the ID allocated for it;
//! - cursor bounds only grow, keep `retained_from <= total_bytes`, and freeze at the terminal event;
//! - stop requests only before terminal; input is closed once;
//! - publishing a recorded lifecycle event ID (running once running happened, terminal or lost once
//!   that one happened) is accepted and repeating it is an idempotent no-op; anything else is
//!   refused;
//! - completion only after terminal, with the allocated command ID; repeating it is a no-op;
//! - a publication, a completion, a scope and a release carry the ID derived from their step's ID
//!   (journal-format.md's byte recipe, written out here as [`derive`]) and no other;
//! - the pause gate (root-level) only alternates: a change to the state it is in is refused;
//!   the admission limit (root-level) refuses 0 and the value in force;
//! - a process is marked as waiting for human input, or cleared, only as a change and only
//!   before terminal; one deadline fires per process, before terminal, with the limit its
//!   registration configured; failures of it follow it, before terminal, at most 8.
//!
//! Random sequences over 1-3 handles (plus one never registered) mix valid and invalid events:
//! wrong IDs, wrong states, backwards or inconsistent cursors, unknown handles, repeats. Each step
//! goes to `ManifestStore::apply` (checked against the model: accept/refuse, `Applied::Unchanged`
//! exactly for the idempotent repeats, and every manifest field the model tracks), and the same
//! concrete event goes to `Lifecycle::append` on a real journal in a temp dir. That path has one
//! more documented rule, modelled separately: an event ID already in the journal is a retry, which
//! writes nothing, when the new event has the stored record's kind, and is refused otherwise. The lifecycle is dropped and reopened at random steps: the
//! replayed store must equal the one from before, with clean recovery and replay reports, and a
//! refused event must never have reached the journal.
//!
//! Generated events never use an ID allocated to a lifecycle step for anything but that step; the
//! regression tests at the end pin what happens when something does (it is refused).
//!
//! The same sequences, some records mangled (payload bytes flipped or cut, garbage, other kinds
//! and codec versions), also go through the `replay` fuzz target's body
//! (`procjournal::fuzzing::check_replay`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use procjournal::fuzzing::ReplayRecord;
use procjournal::journal::reader::JournalReader;
use procjournal::lifecycle::event::{
    AdmissionLimitSet, CaptureStatus, CommandSpec, CompletionNotified, CursorBounds, Deadline,
    DeadlineFailed, DeadlineFired, ExitProof, ExitStatus, GateChanged, HumanInput, IdentityWitness,
    InputClosed, LifecyclePublished, Limits, LostOnRestore, OutputCheckpoint, OutputGap,
    OutputRetired, ProcessWitness, ReceiptBinding, Registered, Running, Scoped, StopRequested,
    Terminal, TerminalResized, TreeMechanism, TreeReleased,
};
use procjournal::lifecycle::{
    Applied, Handle, Lifecycle, LifecycleError, LifecycleEvent, LifecycleIds, ManifestStore,
    Replayer, State,
};
use procjournal::spool::{Gap, LossReason};
use procjournal::{Durability, EventId, JournalOptions};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

// ---------------------------------------------------------------------------------------------
// Identities

/// IDs by (tag, handle index, counter), so that a failing case prints readable UUIDs.
fn id(tag: u8, handle: usize, n: u64) -> EventId {
    let mut bytes = [0u8; 16];
    bytes[0] = tag;
    bytes[1] = handle as u8;
    bytes[8..].copy_from_slice(&n.to_le_bytes());
    EventId::from_bytes(bytes)
}

fn handle_of(h: usize) -> Handle {
    Handle(id(1, h, 0))
}

/// The five IDs each handle's registration allocates, in `Slot` order.
fn canonical(h: usize) -> [EventId; 5] {
    [
        id(2, h, 0),
        id(3, h, 0),
        id(4, h, 0),
        id(5, h, 0),
        id(6, h, 0),
    ]
}

fn fresh_id(n: u64) -> EventId {
    id(9, 0, n)
}

/// Purposes of derived IDs, as journal-format.md numbers them.
const PUBLISHED: u8 = 1;
const NOTIFIED: u8 = 2;
const SCOPED: u8 = 3;
const RELEASED: u8 = 4;
const RETIRED: u8 = 9;

/// The ID derived from `id` for `purpose`, by journal-format.md's recipe: byte 15 XOR purpose,
/// byte 14 XOR 0xa5, version nibble 8, RFC variant.
fn derive(id: EventId, purpose: u8) -> EventId {
    let mut b = *id.0.as_bytes();
    b[15] ^= purpose;
    b[14] ^= 0xa5;
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    EventId::from_bytes(b)
}

/// The IDs handle `h` allocated: the model's once registered, else the canonical ones.
fn ids_of(h: usize, model: &Model) -> LifecycleIds {
    model.procs.get(&handle_of(h)).map_or_else(
        || {
            let c = canonical(h);
            LifecycleIds {
                running: c[Slot::Running as usize],
                terminal: c[Slot::Terminal as usize],
                lost: c[Slot::Lost as usize],
                completion: c[Slot::Completion as usize],
            }
        },
        |p| p.ids,
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Registration = 0,
    Running = 1,
    Terminal = 2,
    Lost = 3,
    Completion = 4,
}

const SLOTS: [Slot; 5] = [
    Slot::Registration,
    Slot::Running,
    Slot::Terminal,
    Slot::Lost,
    Slot::Completion,
];

fn command_spec(h: usize) -> CommandSpec {
    CommandSpec {
        program: "sh".into(),
        // A long script, so that a few registrations fill the smallest segment.
        args: vec!["-c".into(), format!("echo {h}; {}", "true; ".repeat(180))],
        cwd: "/tmp".into(),
        env_overrides: vec![("K".into(), "V".into())],
        labels: [("job".into(), format!("j{h}"))].into(),
        limits: Limits {
            wall_clock_ms: Some(60_000),
            idle_ms: Some(30_000),
            output_retention_bytes: Some(1 << 20),
        },
        owner: "props".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Operations, as generated (abstract) and as run (concrete events)

/// Under which ID a lifecycle step is appended.
#[derive(Debug, Clone)]
enum StepId {
    /// The ID registration allocated for this step.
    Allocated,
    /// Another of this handle's allocated IDs.
    OtherSlot(Slot),
    /// The same step's ID of another handle.
    OtherHandle(Index),
    /// An ID nobody allocated.
    Fresh,
}

/// Under which ID an event that is not a lifecycle step is appended.
#[derive(Debug, Clone)]
enum PlainId {
    Fresh,
    /// An ID handed out earlier for an event that was not a lifecycle step (a retry, or a clash).
    Reuse(Index),
}

/// Under which ID a record with a derived ID (publication, completion, scope, release) is
/// appended.
#[derive(Debug, Clone)]
enum FactId {
    /// The ID derived from the step the record is about.
    Derived,
    /// Anything else.
    Plain(PlainId),
}

/// A change of the cursor bounds relative to the handle's current ones; negative moves back.
#[derive(Debug, Clone, Copy)]
struct Delta {
    retained: i64,
    total: i64,
}

#[derive(Debug, Clone)]
enum PublishTarget {
    Own(Slot),
    OtherHandle(Index, Slot),
    Nobody,
}

#[derive(Debug, Clone)]
enum Op {
    Register {
        h: usize,
        fresh: bool,
        /// Make the ID in the second slot equal to the one in the first.
        clash: Option<(Slot, Slot)>,
    },
    Running {
        h: usize,
        id: StepId,
    },
    Terminal {
        h: usize,
        state: State,
        delta: Delta,
        id: StepId,
    },
    Lost {
        h: usize,
        delta: Delta,
        id: StepId,
    },
    Stop {
        h: usize,
        id: PlainId,
    },
    InputClosed {
        h: usize,
        id: PlainId,
    },
    /// A terminal's size; `rows` 0 now and then (refused).
    Resize {
        h: usize,
        rows: u16,
        id: PlainId,
    },
    Checkpoint {
        h: usize,
        delta: Delta,
        id: PlainId,
    },
    Publish {
        h: usize,
        target: PublishTarget,
        id: FactId,
    },
    /// The tree's scope; `variant` picks the mechanism, so a repeat is the same record or a
    /// different one.
    Scope {
        h: usize,
        variant: u8,
        id: FactId,
    },
    /// The tree's release; `variant` picks the proof.
    Release {
        h: usize,
        variant: u8,
        id: FactId,
    },
    Complete {
        h: usize,
        right_command: bool,
        id: FactId,
    },
    /// The output's retirement; `variant` picks the reason, so a repeat is the same record or a
    /// different one.
    Retire {
        h: usize,
        variant: u8,
        id: FactId,
    },
    /// Lost output `from..from + len`; `reason` 0 is retention (never valid).
    Gap {
        h: usize,
        from: u64,
        len: u64,
        reason: u8,
        id: PlainId,
    },
    /// The pause gate.
    Gate {
        paused: bool,
        id: PlainId,
    },
    /// The admission limit (`None`: back to the configured policy; 0 is refused).
    Limit {
        max: Option<u64>,
        id: PlainId,
    },
    HumanInput {
        h: usize,
        waiting: bool,
        id: PlainId,
    },
    /// A deadline fires: `wall` or idle, with the configured limit or not.
    Deadline {
        h: usize,
        wall: bool,
        right_limit: bool,
        id: PlainId,
    },
    DeadlineFailed {
        h: usize,
        wall: bool,
        id: PlainId,
    },
    /// The natural next step for the handle in its current state (as the model sees it), under
    /// the right IDs: keeps sequences deep enough to reach terminal, publication and completion.
    Advance {
        h: usize,
        pick: Index,
    },
}

fn slot() -> impl Strategy<Value = Slot> {
    proptest::sample::select(SLOTS.to_vec())
}

fn step_id() -> impl Strategy<Value = StepId> {
    prop_oneof![
        6 => Just(StepId::Allocated),
        1 => slot().prop_map(StepId::OtherSlot),
        1 => any::<Index>().prop_map(StepId::OtherHandle),
        1 => Just(StepId::Fresh),
    ]
}

fn plain_id() -> impl Strategy<Value = PlainId> {
    prop_oneof![
        5 => Just(PlainId::Fresh),
        1 => any::<Index>().prop_map(PlainId::Reuse),
    ]
}

fn fact_id() -> impl Strategy<Value = FactId> {
    prop_oneof![
        5 => Just(FactId::Derived),
        1 => plain_id().prop_map(FactId::Plain),
    ]
}

fn delta() -> impl Strategy<Value = Delta> {
    // Mostly growing, sometimes backwards, sometimes retained_from past total_bytes.
    (
        prop_oneof![4 => 0i64..=20, 1 => -20i64..0],
        prop_oneof![4 => 0i64..=40, 1 => -40i64..0],
    )
        .prop_map(|(retained, total)| Delta { retained, total })
}

fn publish_target() -> impl Strategy<Value = PublishTarget> {
    prop_oneof![
        6 => slot().prop_map(PublishTarget::Own),
        1 => (any::<Index>(), slot()).prop_map(|(i, s)| PublishTarget::OtherHandle(i, s)),
        1 => Just(PublishTarget::Nobody),
    ]
}

/// Operations over handles `0..n` (registrable) and `n` (never registered).
fn op(n: usize) -> impl Strategy<Value = Op> {
    // Mostly the registrable handles, sometimes the one that is never registered.
    let any_h = prop_oneof![8 => 0..n, 1 => Just(n)];
    let clash = prop_oneof![
        4 => Just(None),
        1 => (slot(), slot())
            .prop_filter("two different slots", |(a, b)| a != b)
            .prop_map(Some),
    ];
    prop_oneof![
        3 => (0..n, prop_oneof![4 => Just(false), 1 => Just(true)], clash)
            .prop_map(|(h, fresh, clash)| Op::Register { h, fresh, clash }),
        3 => (any_h.clone(), step_id()).prop_map(|(h, id)| Op::Running { h, id }),
        3 => (any_h.clone(), proptest::sample::select(State::ALL.to_vec()), delta(), step_id())
            .prop_map(|(h, state, delta, id)| Op::Terminal { h, state, delta, id }),
        3 => (any_h.clone(), delta(), step_id()).prop_map(|(h, delta, id)| Op::Lost { h, delta, id }),
        2 => (any_h.clone(), plain_id()).prop_map(|(h, id)| Op::Stop { h, id }),
        1 => (any_h.clone(), plain_id()).prop_map(|(h, id)| Op::InputClosed { h, id }),
        1 => (any_h.clone(), 0u16..4, plain_id()).prop_map(|(h, rows, id)| Op::Resize { h, rows, id }),
        3 => (any_h.clone(), delta(), plain_id())
            .prop_map(|(h, delta, id)| Op::Checkpoint { h, delta, id }),
        3 => (any_h.clone(), publish_target(), fact_id())
            .prop_map(|(h, target, id)| Op::Publish { h, target, id }),
        2 => (any_h.clone(), prop_oneof![3 => Just(true), 1 => Just(false)], fact_id())
            .prop_map(|(h, right_command, id)| Op::Complete { h, right_command, id }),
        2 => (any_h.clone(), 0u8..3, fact_id()).prop_map(|(h, variant, id)| Op::Scope { h, variant, id }),
        2 => (any_h.clone(), 0u8..3, fact_id()).prop_map(|(h, variant, id)| Op::Release { h, variant, id }),
        2 => (any_h.clone(), 0u8..2, fact_id()).prop_map(|(h, variant, id)| Op::Retire { h, variant, id }),
        2 => (any_h.clone(), 0u64..400, prop_oneof![4 => 1u64..100, 1 => Just(0u64)], 0u8..4, plain_id())
            .prop_map(|(h, from, len, reason, id)| Op::Gap { h, from, len, reason, id }),
        2 => (any::<bool>(), plain_id()).prop_map(|(paused, id)| Op::Gate { paused, id }),
        2 => (proptest::option::of(0u64..3), plain_id()).prop_map(|(max, id)| Op::Limit { max, id }),
        2 => (any_h.clone(), any::<bool>(), plain_id())
            .prop_map(|(h, waiting, id)| Op::HumanInput { h, waiting, id }),
        2 => (any_h.clone(), any::<bool>(), prop_oneof![4 => Just(true), 1 => Just(false)], plain_id())
            .prop_map(|(h, wall, right_limit, id)| Op::Deadline { h, wall, right_limit, id }),
        2 => (any_h.clone(), any::<bool>(), plain_id())
            .prop_map(|(h, wall, id)| Op::DeadlineFailed { h, wall, id }),
        12 => (any_h, any::<Index>()).prop_map(|(h, pick)| Op::Advance { h, pick }),
    ]
}

/// Turns abstract operations into concrete `(event ID, event)` pairs, step by step, reading the
/// current cursor bounds from the model so that deltas mean what they say.
#[derive(Debug, Default)]
struct Concretizer {
    handles: usize,
    fresh: u64,
    /// IDs handed out for events that are not lifecycle steps.
    plain_ids: Vec<EventId>,
}

impl Concretizer {
    fn fresh(&mut self) -> EventId {
        self.fresh += 1;
        fresh_id(self.fresh)
    }

    fn plain(&mut self, choice: &PlainId) -> EventId {
        let chosen = match choice {
            PlainId::Reuse(i) if !self.plain_ids.is_empty() => *i.get(&self.plain_ids),
            _ => self.fresh(),
        };
        self.plain_ids.push(chosen);
        chosen
    }

    /// The ID of a record about `step` (derived for `purpose`), or a plain one.
    fn fact(&mut self, choice: &FactId, step: EventId, purpose: u8) -> EventId {
        match choice {
            FactId::Derived => {
                let id = derive(step, purpose);
                self.plain_ids.push(id);
                id
            }
            FactId::Plain(plain) => self.plain(plain),
        }
    }

    fn other_handle(&self, h: usize, i: &Index) -> usize {
        // Any handle of the pool (0..=handles) but `h`.
        let k = i.index(self.handles);
        if k >= h { k + 1 } else { k }
    }

    fn step(&mut self, h: usize, slot: Slot, choice: &StepId) -> EventId {
        match choice {
            StepId::Allocated => canonical(h)[slot as usize],
            StepId::OtherSlot(s) => canonical(h)[*s as usize],
            StepId::OtherHandle(i) => canonical(self.other_handle(h, i))[slot as usize],
            StepId::Fresh => self.fresh(),
        }
    }

    /// The operation `Op::Advance` stands for.
    fn advance(h: usize, pick: &Index, model: &Model) -> Op {
        let grow = Delta {
            retained: pick.index(3) as i64,
            total: pick.index(50) as i64 + 3,
        };
        let fresh = PlainId::Fresh;
        let Some(p) = model.procs.get(&handle_of(h)) else {
            return Op::Register {
                h,
                fresh: false,
                clash: None,
            };
        };
        let terminal = |state| Op::Terminal {
            h,
            state,
            delta: grow,
            id: StepId::Allocated,
        };
        let mut choices = match p.state {
            State::Starting => vec![
                Op::Running {
                    h,
                    id: StepId::Allocated,
                },
                Op::Running {
                    h,
                    id: StepId::Allocated,
                },
                Op::Checkpoint {
                    h,
                    delta: grow,
                    id: fresh,
                },
                terminal(State::Failed),
                Op::Scope {
                    h,
                    variant: pick.index(3) as u8,
                    id: FactId::Derived,
                },
                Op::Lost {
                    h,
                    delta: grow,
                    id: StepId::Allocated,
                },
            ],
            State::Running => vec![
                Op::Checkpoint {
                    h,
                    delta: grow,
                    id: fresh.clone(),
                },
                Op::Checkpoint {
                    h,
                    delta: grow,
                    id: fresh.clone(),
                },
                Op::Stop { h, id: fresh },
                Op::Publish {
                    h,
                    target: PublishTarget::Own(Slot::Running),
                    id: FactId::Derived,
                },
                terminal(State::Exited),
                terminal(State::TimedOut),
                terminal(State::Interrupted),
                terminal(State::Terminated),
                terminal(State::Killed),
                Op::Lost {
                    h,
                    delta: grow,
                    id: StepId::Allocated,
                },
            ],
            _ => {
                let slot = if p.state == State::LostOnRestore
                    && p.terminal.map(|t| t.1) == Some(p.ids.lost)
                {
                    Slot::Lost
                } else {
                    Slot::Terminal
                };
                vec![
                    Op::Publish {
                        h,
                        target: PublishTarget::Own(slot),
                        id: FactId::Derived,
                    },
                    Op::Publish {
                        h,
                        target: PublishTarget::Own(Slot::Running),
                        id: FactId::Derived,
                    },
                    Op::Complete {
                        h,
                        right_command: true,
                        id: FactId::Derived,
                    },
                    Op::Release {
                        h,
                        variant: pick.index(3) as u8,
                        id: FactId::Derived,
                    },
                    Op::Retire {
                        h,
                        variant: pick.index(2) as u8,
                        id: FactId::Derived,
                    },
                ]
            }
        };
        if !p.input_closed {
            choices.push(Op::InputClosed {
                h,
                id: PlainId::Fresh,
            });
        }
        let i = pick.index(choices.len());
        choices.swap_remove(i)
    }

    fn concrete(&mut self, step: u64, op: &Op, model: &Model) -> (EventId, LifecycleEvent) {
        let bounds = |h: usize, d: &Delta| {
            let old = model
                .procs
                .get(&handle_of(h))
                .map(|p| p.bounds)
                .unwrap_or_default();
            CursorBounds {
                retained_from: old.retained_from.saturating_add_signed(d.retained),
                total_bytes: old.total_bytes.saturating_add_signed(d.total),
            }
        };
        let at_unix_ms = 1_700_000_000_000 + step;
        match op {
            Op::Advance { h, pick } => {
                let op = Self::advance(*h, pick, model);
                self.concrete(step, &op, model)
            }
            Op::Register { h, fresh, clash } => {
                let mut ids = canonical(*h);
                if *fresh {
                    ids[Slot::Registration as usize] = self.fresh();
                    self.plain_ids.push(ids[Slot::Registration as usize]);
                }
                if let Some((a, b)) = clash {
                    ids[*b as usize] = ids[*a as usize];
                }
                let event = LifecycleEvent::Registered(Registered {
                    handle: handle_of(*h),
                    ids: LifecycleIds {
                        running: ids[Slot::Running as usize],
                        terminal: ids[Slot::Terminal as usize],
                        lost: ids[Slot::Lost as usize],
                        completion: ids[Slot::Completion as usize],
                    },
                    command: command_spec(*h),
                    at_unix_ms,
                });
                (ids[Slot::Registration as usize], event)
            }
            Op::Running { h, id } => (
                self.step(*h, Slot::Running, id),
                LifecycleEvent::Running(Running {
                    handle: handle_of(*h),
                    pid: 1000 + *h as u32,
                    witness: IdentityWitness {
                        start_time_ticks: step,
                        boot_id: [0xb0; 16],
                    },
                    at_unix_ms,
                }),
            ),
            Op::Terminal {
                h,
                state,
                delta,
                id,
            } => (
                self.step(*h, Slot::Terminal, id),
                LifecycleEvent::Terminal(Terminal {
                    handle: handle_of(*h),
                    state: *state,
                    exit: ExitStatus::Code(step as i32),
                    bounds: bounds(*h, delta),
                    capture: if step.is_multiple_of(2) {
                        CaptureStatus::Complete
                    } else {
                        CaptureStatus::Incomplete(format!("drain {step}"))
                    },
                    reason: format!("reason {step}"),
                    at_unix_ms,
                }),
            ),
            Op::Lost { h, delta, id } => (
                self.step(*h, Slot::Lost, id),
                LifecycleEvent::LostOnRestore(LostOnRestore {
                    handle: handle_of(*h),
                    bounds: bounds(*h, delta),
                    at_unix_ms,
                }),
            ),
            Op::Stop { h, id } => (
                self.plain(id),
                LifecycleEvent::StopRequested(StopRequested {
                    handle: handle_of(*h),
                    reason: format!("stop {step}"),
                    requested_by: "props".into(),
                    at_unix_ms,
                }),
            ),
            Op::InputClosed { h, id } => (
                self.plain(id),
                LifecycleEvent::InputClosed(InputClosed {
                    handle: handle_of(*h),
                    at_unix_ms,
                }),
            ),
            Op::Resize { h, rows, id } => (
                self.plain(id),
                LifecycleEvent::TerminalResized(TerminalResized {
                    handle: handle_of(*h),
                    rows: *rows,
                    cols: 80,
                    at_unix_ms,
                }),
            ),
            Op::Checkpoint { h, delta, id } => (
                self.plain(id),
                LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
                    handle: handle_of(*h),
                    bounds: bounds(*h, delta),
                    at_unix_ms,
                }),
            ),
            Op::Publish { h, target, id } => {
                let event = match target {
                    PublishTarget::Own(s) => model
                        .procs
                        .get(&handle_of(*h))
                        .map_or(canonical(*h)[*s as usize], |p| p.slot(*s)),
                    PublishTarget::OtherHandle(i, s) => {
                        canonical(self.other_handle(*h, i))[*s as usize]
                    }
                    PublishTarget::Nobody => self.fresh(),
                };
                (
                    self.fact(id, event, PUBLISHED),
                    LifecycleEvent::LifecyclePublished(LifecyclePublished {
                        handle: handle_of(*h),
                        event,
                    }),
                )
            }
            Op::Scope { h, variant, id } => (
                self.fact(id, ids_of(*h, model).running, SCOPED),
                LifecycleEvent::Scoped(scoped(*h, *variant)),
            ),
            Op::Gap {
                h,
                from,
                len,
                reason,
                id,
            } => (
                self.plain(id),
                LifecycleEvent::OutputGap(OutputGap {
                    handle: handle_of(*h),
                    gap: Gap {
                        from: *from,
                        to: from + len,
                        reason: [
                            LossReason::Retention,
                            LossReason::DiskFull,
                            LossReason::IoError,
                            LossReason::SyncFailed,
                        ][*reason as usize],
                        errno: 28,
                    },
                    at_unix_ms,
                }),
            ),
            Op::Release { h, variant, id } => (
                self.fact(id, ids_of(*h, model).terminal, RELEASED),
                LifecycleEvent::TreeReleased(TreeReleased {
                    handle: handle_of(*h),
                    proof: proof(*variant),
                    at_unix_ms,
                }),
            ),
            Op::Retire { h, variant, id } => (
                self.fact(id, ids_of(*h, model).terminal, RETIRED),
                LifecycleEvent::OutputRetired(OutputRetired {
                    handle: handle_of(*h),
                    reason: format!("retention {variant}"),
                    at_unix_ms: u64::from(*variant),
                }),
            ),
            Op::Gate { paused, id } => (
                self.plain(id),
                LifecycleEvent::GateChanged(GateChanged {
                    paused: *paused,
                    requested_by: "props".into(),
                    reason: format!("gate {step}"),
                    at_unix_ms,
                }),
            ),
            Op::Limit { max, id } => (
                self.plain(id),
                LifecycleEvent::AdmissionLimitSet(AdmissionLimitSet {
                    max_concurrent: *max,
                    requested_by: "props".into(),
                    at_unix_ms,
                }),
            ),
            Op::HumanInput { h, waiting, id } => (
                self.plain(id),
                LifecycleEvent::HumanInput(HumanInput {
                    handle: handle_of(*h),
                    waiting: *waiting,
                    by: "props".into(),
                    at_unix_ms,
                }),
            ),
            Op::Deadline {
                h,
                wall,
                right_limit,
                id,
            } => {
                let limits = command_spec(*h).limits;
                let configured = if *wall {
                    limits.wall_clock_ms
                } else {
                    limits.idle_ms
                };
                (
                    self.plain(id),
                    LifecycleEvent::DeadlineFired(DeadlineFired {
                        handle: handle_of(*h),
                        deadline: if *wall {
                            Deadline::Wall
                        } else {
                            Deadline::Idle
                        },
                        limit_ms: configured.unwrap_or(0) + u64::from(!*right_limit),
                        clock_from_unix_ms: at_unix_ms - 1,
                        at_unix_ms,
                    }),
                )
            }
            Op::DeadlineFailed { h, wall, id } => (
                self.plain(id),
                LifecycleEvent::DeadlineFailed(DeadlineFailed {
                    handle: handle_of(*h),
                    deadline: if *wall {
                        Deadline::Wall
                    } else {
                        Deadline::Idle
                    },
                    error: format!("cannot signal {step}"),
                    at_unix_ms,
                }),
            ),
            Op::Complete {
                h,
                right_command,
                id,
            } => {
                let command = if *right_command {
                    canonical(*h)[Slot::Completion as usize]
                } else {
                    canonical(*h)[Slot::Running as usize]
                };
                (
                    self.fact(id, ids_of(*h, model).completion, NOTIFIED),
                    LifecycleEvent::CompletionNotified(CompletionNotified {
                        handle: handle_of(*h),
                        command,
                    }),
                )
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The reference model

/// The model's manifest of one handle.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelProc {
    registration: EventId,
    ids: LifecycleIds,
    command: CommandSpec,
    registered_unix_ms: u64,
    state: State,
    /// Set by the running event.
    pid: Option<u32>,
    stop_requests: u32,
    first_stop: Option<(String, String)>,
    input_closed: bool,
    bounds: CursorBounds,
    /// The terminal state and the ID of the event that recorded it (terminal or lost).
    terminal: Option<(State, EventId, u64)>,
    published: BTreeSet<EventId>,
    completion_notified: bool,
    scope: Option<Scoped>,
    released: Option<ExitProof>,
    gaps: Vec<Gap>,
    /// The retirement's reason and time.
    retired: Option<(String, u64)>,
    awaiting: Option<u64>,
    /// The fired deadline: (wall, limit).
    fired: Option<(bool, u64)>,
    failures: usize,
}

/// A scope record of handle `h`; each variant a different mechanism.
fn scoped(h: usize, variant: u8) -> Scoped {
    let mechanism = [
        TreeMechanism::Group,
        TreeMechanism::Guardian,
        TreeMechanism::Cgroup,
    ][usize::from(variant) % 3];
    Scoped {
        handle: handle_of(h),
        mechanism,
        boot_id: [7; 16],
        workload: ProcessWitness {
            pid: 100 + u32::from(variant),
            start_time_ticks: 5,
            pidfs_ino: 9,
        },
        guardian: (mechanism != TreeMechanism::Group).then_some(ProcessWitness {
            pid: 99,
            start_time_ticks: 5,
            pidfs_ino: 8,
        }),
        cgroup: (mechanism == TreeMechanism::Cgroup).then(|| format!("/cg/{h}")),
        receipt: (mechanism != TreeMechanism::Group).then(|| ReceiptBinding {
            path: format!("/r/{h}"),
            dev: 1,
            ino: 2,
            nonce: [variant; 16],
        }),
        at_unix_ms: 1,
    }
}

fn proof(variant: u8) -> ExitProof {
    match variant % 3 {
        0 => ExitProof::Receipt {
            status: ExitStatus::Code(0),
            reaped: 1,
        },
        1 => ExitProof::CgroupEmpty,
        _ => ExitProof::BootChanged,
    }
}

impl ModelProc {
    fn slot(&self, s: Slot) -> EventId {
        match s {
            Slot::Registration => self.registration,
            Slot::Running => self.ids.running,
            Slot::Terminal => self.ids.terminal,
            Slot::Lost => self.ids.lost,
            Slot::Completion => self.ids.completion,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Changed,
    Unchanged,
    Refused,
}

fn is_terminal(s: State) -> bool {
    !matches!(s, State::Starting | State::Running)
}

/// The seed's matrix, written out here rather than read from `TRANSITIONS`.
fn allowed(from: State, to: State) -> bool {
    use State::*;
    matches!(
        (from, to),
        (
            Starting,
            Running | Failed | Terminated | Killed | LostOnRestore
        ) | (
            Running,
            Exited | Failed | TimedOut | Interrupted | Terminated | Killed | LostOnRestore
        )
    )
}

fn grows(old: CursorBounds, new: CursorBounds) -> bool {
    new.retained_from <= new.total_bytes
        && new.retained_from >= old.retained_from
        && new.total_bytes >= old.total_bytes
}

#[derive(Debug, Clone, Default)]
struct Model {
    procs: BTreeMap<Handle, ModelProc>,
    /// The last gate change (paused or not), if any.
    gate: Option<bool>,
    /// The last admission limit set (its value), if any.
    limit: Option<Option<u64>>,
}

impl Model {
    /// The handle and step an ID was allocated for by an accepted registration, if any.
    fn reserved_by(&self, id: EventId) -> Option<(Handle, Slot)> {
        let slots = [
            Slot::Registration,
            Slot::Running,
            Slot::Terminal,
            Slot::Lost,
            Slot::Completion,
        ];
        self.procs
            .iter()
            .find_map(|(h, p)| slots.iter().find(|s| p.slot(**s) == id).map(|s| (*h, *s)))
    }

    /// Applies one event under `event_id`; returns what the validator must answer.
    fn step(&mut self, event_id: EventId, event: &LifecycleEvent) -> Verdict {
        use Verdict::*;
        if let LifecycleEvent::Registered(e) = event {
            if self.procs.contains_key(&e.handle) {
                return Refused;
            }
            let all = [
                event_id,
                e.ids.running,
                e.ids.terminal,
                e.ids.lost,
                e.ids.completion,
            ];
            if (0..5).any(|i| (i + 1..5).any(|j| all[i] == all[j])) {
                return Refused;
            }
            // Every allocated ID is reserved for its one step of its one handle.
            if all.iter().any(|id| self.reserved_by(*id).is_some()) {
                return Refused;
            }
            self.procs.insert(
                e.handle,
                ModelProc {
                    registration: event_id,
                    ids: e.ids,
                    command: e.command.clone(),
                    registered_unix_ms: e.at_unix_ms,
                    state: State::Starting,
                    pid: None,
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
                    awaiting: None,
                    fired: None,
                    failures: 0,
                },
            );
            return Changed;
        }
        if let LifecycleEvent::GateChanged(g) = event {
            if self.reserved_by(event_id).is_some() || self.gate.unwrap_or(false) == g.paused {
                return Refused;
            }
            self.gate = Some(g.paused);
            return Changed;
        }
        if let LifecycleEvent::AdmissionLimitSet(l) = event {
            let in_force = self.limit.flatten();
            if self.reserved_by(event_id).is_some()
                || l.max_concurrent == Some(0)
                || l.max_concurrent == in_force
            {
                return Refused;
            }
            self.limit = Some(l.max_concurrent);
            return Changed;
        }
        if let Some((owner, slot)) = self.reserved_by(event_id) {
            let step = match event {
                LifecycleEvent::Running(_) => Some(Slot::Running),
                LifecycleEvent::Terminal(_) => Some(Slot::Terminal),
                LifecycleEvent::LostOnRestore(_) => Some(Slot::Lost),
                _ => None,
            };
            if step != Some(slot) || Some(owner) != event.handle() {
                return Refused;
            }
        }
        let Some(p) = event.handle().and_then(|h| self.procs.get_mut(&h)) else {
            return Refused;
        };
        match event {
            LifecycleEvent::Registered(_)
            | LifecycleEvent::RegisteredV2(_)
            | LifecycleEvent::GateChanged(_)
            | LifecycleEvent::AdmissionLimitSet(_) => {
                unreachable!("handled above")
            }
            LifecycleEvent::HumanInput(e) => {
                if is_terminal(p.state) || e.waiting == p.awaiting.is_some() {
                    return Refused;
                }
                p.awaiting = e.waiting.then_some(e.at_unix_ms);
            }
            LifecycleEvent::DeadlineFired(e) => {
                let wall = e.deadline == Deadline::Wall;
                let configured = if wall {
                    p.command.limits.wall_clock_ms
                } else {
                    p.command.limits.idle_ms
                };
                if is_terminal(p.state) || p.fired.is_some() || configured != Some(e.limit_ms) {
                    return Refused;
                }
                p.fired = Some((wall, e.limit_ms));
            }
            LifecycleEvent::DeadlineFailed(e) => {
                let wall = e.deadline == Deadline::Wall;
                if is_terminal(p.state) || p.fired.map(|f| f.0) != Some(wall) || p.failures >= 8 {
                    return Refused;
                }
                p.failures += 1;
            }
            LifecycleEvent::Running(e) => {
                if !allowed(p.state, State::Running) || event_id != p.ids.running {
                    return Refused;
                }
                p.state = State::Running;
                p.pid = Some(e.pid);
            }
            LifecycleEvent::Terminal(e) => {
                if !is_terminal(e.state)
                    || !allowed(p.state, e.state)
                    || event_id != p.ids.terminal
                    || !grows(p.bounds, e.bounds)
                {
                    return Refused;
                }
                p.state = e.state;
                p.bounds = e.bounds;
                p.terminal = Some((e.state, event_id, e.at_unix_ms));
            }
            LifecycleEvent::LostOnRestore(e) => {
                if !allowed(p.state, State::LostOnRestore)
                    || event_id != p.ids.lost
                    || !grows(p.bounds, e.bounds)
                {
                    return Refused;
                }
                p.state = State::LostOnRestore;
                p.bounds = e.bounds;
                p.terminal = Some((State::LostOnRestore, event_id, e.at_unix_ms));
            }
            LifecycleEvent::StopRequested(e) => {
                if is_terminal(p.state) {
                    return Refused;
                }
                p.stop_requests += 1;
                if p.first_stop.is_none() {
                    p.first_stop = Some((e.reason.clone(), e.requested_by.clone()));
                }
            }
            LifecycleEvent::InputClosed(_) => {
                if p.input_closed {
                    return Refused;
                }
                p.input_closed = true;
            }
            // Rule W: only while running, at least one row and column; nothing is kept.
            LifecycleEvent::TerminalResized(e) => {
                if p.state != State::Running || e.rows == 0 || e.cols == 0 {
                    return Refused;
                }
            }
            LifecycleEvent::OutputCheckpoint(e) => {
                if is_terminal(p.state) || !grows(p.bounds, e.bounds) {
                    return Refused;
                }
                p.bounds = e.bounds;
            }
            LifecycleEvent::LifecyclePublished(e) => {
                let recorded = (e.event == p.ids.running && p.pid.is_some())
                    || p.terminal.is_some_and(|(_, id, _)| id == e.event);
                if !recorded || event_id != derive(e.event, PUBLISHED) {
                    return Refused;
                }
                if !p.published.insert(e.event) {
                    return Unchanged;
                }
            }
            LifecycleEvent::Scoped(e) => match &p.scope {
                _ if event_id != derive(p.ids.running, SCOPED) => return Refused,
                Some(s) if s == e => return Unchanged,
                Some(_) => return Refused,
                None if is_terminal(p.state) => return Refused,
                None => p.scope = Some(e.clone()),
            },
            LifecycleEvent::TreeReleased(e) => match (&p.scope, &p.released) {
                _ if event_id != derive(p.ids.terminal, RELEASED) => return Refused,
                // Without a scope only a receipt without a workload status (an aborted
                // launch's) releases a tree.
                (None, _)
                    if !matches!(
                        e.proof,
                        ExitProof::Receipt {
                            status: ExitStatus::Unknown,
                            ..
                        }
                    ) =>
                {
                    return Refused;
                }
                (_, Some(r)) if *r == e.proof => return Unchanged,
                (_, Some(_)) => return Refused,
                (_, None) => p.released = Some(e.proof.clone()),
            },
            LifecycleEvent::OutputRetired(e) => {
                // Verified exit: terminal, and the tree released, or it never ran, or a group
                // leader reaped here (a `Terminal` event: every one of this model's carries a
                // code; a lost process's exit is unknown).
                let by_group = p
                    .scope
                    .as_ref()
                    .is_none_or(|s| s.mechanism == TreeMechanism::Group);
                let reaped = p.terminal.is_some_and(|(_, id, _)| id == p.ids.terminal);
                let verified = is_terminal(p.state)
                    && (p.released.is_some()
                        || p.pid.is_none()
                        || (p.state != State::LostOnRestore && by_group && reaped));
                let this = (e.reason.clone(), e.at_unix_ms);
                match &p.retired {
                    _ if event_id != derive(p.ids.terminal, RETIRED) => return Refused,
                    Some(r) if *r == this => return Unchanged,
                    Some(_) => return Refused,
                    None if !verified => return Refused,
                    None => p.retired = Some(this),
                }
            }
            LifecycleEvent::OutputGap(e) => {
                let g = e.gap;
                let joins = p.gaps.last().is_some_and(|last| {
                    last.to == g.from && (last.reason, last.errno) == (g.reason, g.errno)
                });
                if is_terminal(p.state)
                    || g.from >= g.to
                    || g.reason == LossReason::Retention
                    || p.gaps.last().is_some_and(|last| last.to > g.from)
                    || (!joins && p.gaps.len() >= 256)
                {
                    return Refused;
                }
                match p.gaps.last_mut() {
                    Some(last) if joins => last.to = g.to,
                    _ => p.gaps.push(g),
                }
            }
            LifecycleEvent::CompletionNotified(e) => {
                if p.terminal.is_none()
                    || e.command != p.ids.completion
                    || event_id != derive(p.ids.completion, NOTIFIED)
                {
                    return Refused;
                }
                if p.completion_notified {
                    return Unchanged;
                }
                p.completion_notified = true;
            }
        }
        Changed
    }

    /// Every field the model tracks equals the store's manifest, and there are no others.
    fn matches(&self, store: &ManifestStore, context: &str) -> Result<(), TestCaseError> {
        prop_assert_eq!(store.len(), self.procs.len(), "{}", context);
        for (handle, p) in &self.procs {
            let m = store.get(handle);
            prop_assert!(m.is_some(), "{}: {} missing", context, handle);
            let Some(m) = m else { unreachable!() };
            prop_assert_eq!(m.handle, *handle, "{}", context);
            prop_assert_eq!(m.ids, p.ids, "{}", context);
            prop_assert_eq!(&m.command, &p.command, "{}", context);
            prop_assert_eq!(m.registered_unix_ms, p.registered_unix_ms, "{}", context);
            prop_assert_eq!(m.state, p.state, "{}: {}", context, handle);
            prop_assert_eq!(m.pid, p.pid, "{}: {}", context, handle);
            prop_assert_eq!(m.witness.is_some(), p.pid.is_some(), "{}", context);
            prop_assert_eq!(m.stop_requests, p.stop_requests, "{}", context);
            prop_assert_eq!(&m.first_stop, &p.first_stop, "{}", context);
            prop_assert_eq!(m.input_closed, p.input_closed, "{}", context);
            prop_assert_eq!(m.bounds, p.bounds, "{}: {}", context, handle);
            prop_assert!(m.bounds.retained_from <= m.bounds.total_bytes);
            prop_assert_eq!(
                m.terminal
                    .as_ref()
                    .map(|t| (t.state, t.event_id, t.at_unix_ms)),
                p.terminal,
                "{}: {}",
                context,
                handle
            );
            prop_assert_eq!(&m.published, &p.published, "{}", context);
            prop_assert_eq!(m.completion_notified, p.completion_notified, "{}", context);
            prop_assert_eq!(&m.scope, &p.scope, "{}", context);
            prop_assert_eq!(&m.released, &p.released, "{}", context);
            prop_assert_eq!(&m.gaps, &p.gaps, "{}", context);
            prop_assert_eq!(
                m.retired.as_ref().map(|r| (r.reason.clone(), r.at_unix_ms)),
                p.retired.clone(),
                "{}",
                context
            );
            prop_assert_eq!(m.awaiting_input, p.awaiting, "{}", context);
            prop_assert_eq!(
                m.deadline
                    .as_ref()
                    .map(|d| (d.deadline == Deadline::Wall, d.limit_ms)),
                p.fired,
                "{}",
                context
            );
            prop_assert_eq!(m.deadline_failures.len(), p.failures, "{}", context);
        }
        prop_assert_eq!(store.paused(), self.gate.unwrap_or(false), "{}", context);
        prop_assert_eq!(store.gate().map(|g| g.paused), self.gate, "{}", context);
        prop_assert_eq!(
            store.admission_limit().map(|l| l.max_concurrent),
            self.limit,
            "{}",
            context
        );
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The real journal side

fn options() -> JournalOptions {
    JournalOptions {
        durability: Durability::Os,
        // The smallest segment, so that sequences cross segment boundaries.
        segment_bytes: procjournal::limits::SEGMENT_BYTES_MIN,
    }
}

fn open(root: &Path) -> Result<(Lifecycle, procjournal::lifecycle::ReplayReport), TestCaseError> {
    let (lc, recovery, replay) =
        Lifecycle::open(root, options()).map_err(|e| TestCaseError::fail(format!("open: {e}")))?;
    prop_assert!(recovery.is_clean(), "recovery: {:?}", recovery);
    prop_assert!(replay.is_clean(), "replay: {:?}", replay);
    Ok((lc, replay))
}

/// The model of the journal-backed path: the validator's rules plus the retry rule. An ID already
/// in the journal is a retry when the new event has the kind of the record stored under it and,
/// for a lifecycle step (registration, running, terminal, lost), the same handle: acknowledged,
/// nothing written. Anything else under a used ID is refused.
#[derive(Debug, Default)]
struct JournalModel {
    model: Model,
    ids: HashMap<EventId, (u16, Option<procjournal::lifecycle::Handle>)>,
}

fn is_step(event: &LifecycleEvent) -> bool {
    matches!(
        event,
        LifecycleEvent::Registered(_)
            | LifecycleEvent::Running(_)
            | LifecycleEvent::Terminal(_)
            | LifecycleEvent::LostOnRestore(_)
    )
}

fn run(n: usize, ops: &[Op], reopen_at: &[usize]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let root = dir.path();
    let mut concretizer = Concretizer {
        handles: n,
        ..Concretizer::default()
    };
    let mut model = Model::default();
    let mut store = ManifestStore::new();
    let mut jm = JournalModel::default();
    let (mut lc, _) = open(root)?;

    for (i, op) in ops.iter().enumerate() {
        let (event_id, event) = concretizer.concrete(i as u64, op, &model);
        let context = format!("step {i}: {event_id} {event:?}");

        // 1. The validator against the model.
        let expected = model.step(event_id, &event);
        let before = store.clone();
        let checked = store.check(event_id, &event);
        let applied = store.apply(event_id, &event);
        prop_assert_eq!(
            &checked,
            &applied,
            "check and apply disagree at {}",
            context
        );
        match expected {
            Verdict::Changed => prop_assert_eq!(applied, Ok(Applied::Changed), "{}", context),
            Verdict::Unchanged => {
                prop_assert_eq!(applied, Ok(Applied::Unchanged), "{}", context);
                prop_assert_eq!(&store, &before, "{}", context);
            }
            Verdict::Refused => {
                prop_assert!(applied.is_err(), "accepted: {:?} at {}", applied, context);
                prop_assert_eq!(&store, &before, "{}", context);
            }
        }
        model.matches(&store, &context)?;

        // 2. The same event through the journal-backed lifecycle.
        let last = lc.journal().last_seq();
        let result = lc.append(event_id, &event);
        if let Some(&(kind, handle)) = jm.ids.get(&event_id) {
            if kind == event.kind().get() && (!is_step(&event) || handle == event.handle()) {
                // A retry: acknowledged with the original position, nothing written or applied.
                let appended =
                    result.map_err(|e| TestCaseError::fail(format!("{context}: {e}")))?;
                prop_assert!(!appended.written, "{}", context);
            } else {
                prop_assert!(
                    matches!(result, Err(LifecycleError::Rejected(_))),
                    "an ID in use by another kind was accepted: {}: {:?}",
                    context,
                    result
                );
            }
            prop_assert_eq!(lc.journal().last_seq(), last, "{}", context);
        } else {
            match jm.model.step(event_id, &event) {
                Verdict::Refused => {
                    prop_assert!(
                        matches!(result, Err(LifecycleError::Rejected(_))),
                        "{}: {:?}",
                        context,
                        result
                    );
                    prop_assert_eq!(
                        lc.journal().last_seq(),
                        last,
                        "refused but written: {}",
                        context
                    );
                    prop_assert!(lc.journal().position_of(event_id).is_none(), "{}", context);
                }
                Verdict::Changed | Verdict::Unchanged => {
                    let appended =
                        result.map_err(|e| TestCaseError::fail(format!("{context}: {e}")))?;
                    prop_assert!(appended.written, "{}", context);
                    prop_assert_eq!(appended.position.seq, last + 1, "{}", context);
                    jm.ids
                        .insert(event_id, (event.kind().get(), event.handle()));
                }
            }
        }
        jm.model
            .matches(lc.store(), &format!("journal path, {context}"))?;

        // 3. Reopen: replay rebuilds exactly the store from before.
        if reopen_at.contains(&i) {
            let before = lc.store().clone();
            let last = lc.journal().last_seq();
            drop(lc);
            let (reopened, replay) = open(root)?;
            lc = reopened;
            prop_assert_eq!(lc.store(), &before, "replay after step {}", i);
            prop_assert_eq!(lc.journal().last_seq(), last);
            prop_assert_eq!(replay.lifecycle_events, last);
            prop_assert_eq!(replay.other_events, 0);
        }
    }

    // A read-only scan fed to a replayer agrees too, while the writer is still open.
    lc.journal()
        .sync()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut replayer = Replayer::default();
    let reader = JournalReader::open(root).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let recovery = reader
        .scan(1, |r| replayer.feed(&r))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(recovery.is_clean(), "{:?}", recovery);
    let (scanned, report) = replayer.finish();
    prop_assert!(report.is_clean(), "{:?}", report);
    prop_assert_eq!(&scanned, lc.store());
    Ok(())
}

fn case() -> impl Strategy<Value = (usize, Vec<Op>, Vec<Index>)> {
    (1usize..=3).prop_flat_map(|n| (Just(n), vec(op(n), 1..=40), vec(any::<Index>(), 1..=2)))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        // Shrunk failures are printed; nothing is written next to the sources.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The validator answers and projects exactly as the model does, and the journal-backed
    /// lifecycle writes only what it accepts and replays to the same store after any reopen.
    #[test]
    fn validator_and_replay_follow_the_reference_model((n, ops, reopen) in case()) {
        let reopen_at: Vec<usize> = reopen.iter().map(|i| i.index(ops.len())).collect();
        run(n, &ops, &reopen_at)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Replay of any sequence: the body of the `replay` fuzz target over this file's event sequences

/// What happens to a generated event's record on its way to replay.
#[derive(Debug, Clone)]
enum Noise {
    None,
    /// One payload byte XORed.
    Flip(Index, u8),
    /// The payload cut short.
    Cut(Index),
    /// Garbage under a lifecycle kind.
    Garbage(u16, Vec<u8>),
    /// The record under a kind that is not a lifecycle event.
    OtherKind(u16),
    /// The record under another codec version.
    Version(u8),
}

fn noise() -> impl Strategy<Value = Noise> {
    prop_oneof![
        14 => Just(Noise::None),
        1 => (any::<Index>(), 1u8..).prop_map(|(i, b)| Noise::Flip(i, b)),
        1 => any::<Index>().prop_map(Noise::Cut),
        1 => (0x0101u16..=0x010c, vec(any::<u8>(), 0..48))
            .prop_map(|(kind, bytes)| Noise::Garbage(kind, bytes)),
        1 => proptest::sample::select(vec![1u16, 0x0100, 0x010d, 0xffff]).prop_map(Noise::OtherKind),
        1 => proptest::sample::select(vec![0u8, 2]).prop_map(Noise::Version),
    ]
}

fn replay_case() -> impl Strategy<Value = (usize, Vec<(Op, Noise)>)> {
    (1usize..=3).prop_flat_map(|n| (Just(n), vec((op(n), noise()), 1..=80)))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// `procjournal::fuzzing::check_replay`, the `replay` fuzz target's body, over this file's
    /// event sequences (valid and invalid events of every kind, model-driven), some of whose
    /// records are mangled on the way: counts, agreement with the validating store, manifests
    /// consistent with the accepted events, determinism.
    #[test]
    fn replay_of_any_record_sequence_keeps_its_invariants((n, ops) in replay_case()) {
        let mut concretizer = Concretizer {
            handles: n,
            ..Concretizer::default()
        };
        // Drives concretization only (cursor deltas, published targets); replay is checked
        // against the store and the rules inside `check_replay`.
        let mut model = Model::default();
        let mut records = Vec::new();
        for (i, (op, noise)) in ops.iter().enumerate() {
            let (event_id, event) = concretizer.concrete(i as u64, op, &model);
            let mut record = ReplayRecord::of(event_id, &event);
            match noise {
                Noise::None => {
                    model.step(event_id, &event);
                }
                Noise::Flip(at, bits) => {
                    let i = at.index(record.payload.len());
                    record.payload[i] ^= bits;
                }
                Noise::Cut(at) => {
                    let len = at.index(record.payload.len());
                    record.payload.truncate(len);
                }
                Noise::Garbage(kind, bytes) => {
                    record.kind = *kind;
                    record.payload.clone_from(bytes);
                }
                Noise::OtherKind(kind) => record.kind = *kind,
                Noise::Version(v) => record.codec_version = *v,
            }
            records.push(record);
        }
        procjournal::fuzzing::check_replay(&records);
    }
}

// ---------------------------------------------------------------------------------------------
// Regressions: allocated IDs are reserved for their step (both once accepted another event).

fn registered(h: usize) -> (EventId, LifecycleEvent) {
    let ids = canonical(h);
    (
        ids[0],
        LifecycleEvent::Registered(Registered {
            handle: handle_of(h),
            ids: LifecycleIds {
                running: ids[1],
                terminal: ids[2],
                lost: ids[3],
                completion: ids[4],
            },
            command: command_spec(h),
            at_unix_ms: 1,
        }),
    )
}

fn failed(h: usize) -> LifecycleEvent {
    LifecycleEvent::Terminal(Terminal {
        handle: handle_of(h),
        state: State::Failed,
        exit: ExitStatus::Unknown,
        bounds: CursorBounds::default(),
        capture: CaptureStatus::Failed("spawn".into()),
        reason: "spawn failed".into(),
        at_unix_ms: 3,
    })
}

/// Regression: an event that is not the terminal step, appended under the ID allocated for the
/// terminal step, used to be accepted and written; the real terminal event was then taken for a
/// retry, answered `Ok` without effect, and the process stayed `starting` forever.
#[test]
fn an_allocated_id_cannot_be_taken_by_another_event() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).expect("open");
    let (reg_id, reg) = registered(0);
    lc.append(reg_id, &reg).expect("register");
    let terminal_id = canonical(0)[Slot::Terminal as usize];
    let stop = LifecycleEvent::StopRequested(StopRequested {
        handle: handle_of(0),
        reason: "user".into(),
        requested_by: "cli".into(),
        at_unix_ms: 2,
    });
    let squat = lc.append(terminal_id, &stop);
    let terminal = lc.append(terminal_id, &failed(0));
    let state = lc.manifest(&handle_of(0)).map(|m| m.state);
    assert!(
        squat.is_err(),
        "stop under the terminal ID was accepted: {squat:?}"
    );
    assert!(
        terminal.is_ok_and(|a| a.written),
        "the terminal step was not written"
    );
    assert_eq!(state, Some(State::Failed));
}

/// Regression: a registration could allocate an ID that another handle had already allocated;
/// whichever handle used it second had its step acknowledged without effect.
#[test]
fn a_registration_cannot_allocate_an_id_already_allocated() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).expect("open");
    let (a_id, a) = registered(0);
    lc.append(a_id, &a).expect("register a");
    // b allocates a's terminal ID as its own.
    let (b_id, mut b) = registered(1);
    if let LifecycleEvent::Registered(r) = &mut b {
        r.ids.terminal = canonical(0)[Slot::Terminal as usize];
    }
    let clash = lc.append(b_id, &b);
    let shared = canonical(0)[Slot::Terminal as usize];
    lc.append(shared, &failed(0)).expect("a fails");
    let b_failed = lc.append(shared, &failed(1));
    let state = lc.manifest(&handle_of(1)).map(|m| m.state);
    assert!(
        clash.is_err(),
        "a registration reusing another handle's ID was accepted"
    );
    assert!(
        b_failed.is_err(),
        "b is not registered, so its terminal event must be refused"
    );
    assert_eq!(state, None);
}
