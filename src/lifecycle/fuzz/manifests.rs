//! The rules every manifest of a replayed store is held to, restated from the events it accepted
//! without the store's code: [`check_manifests`] folds each manifest's accepted events in journal
//! order into a [`Model`] of what the manifest must hold, checking each event against what came
//! before it, then compares the model with the manifest field by field.

use std::collections::BTreeSet;

use crate::journal::EventId;
use crate::lifecycle::LifecycleEvent as E;
use crate::lifecycle::event::*;
use crate::lifecycle::{LifecycleEvent, Manifest, ManifestStore, State};

/// Every manifest of `store` against the events it accepted (`(ID, event, changed)`, in journal
/// order), rule by rule, without the store's code (see [`super::check_replay`]).
pub(super) fn check_manifests(store: &ManifestStore, accepted: &[(EventId, LifecycleEvent, bool)]) {
    let registered: Vec<_> = accepted
        .iter()
        .filter(|(_, e, _)| e.is_registration())
        .filter_map(|(_, e, _)| e.handle())
        .collect();
    let handles: Vec<_> = store.iter().map(|m| m.handle).collect();
    assert_eq!(
        handles, registered,
        "manifests are not the accepted registrations, in order"
    );
    check_root_events(store, accepted);
    for m in store.iter() {
        let mut events = accepted
            .iter()
            .filter(|(_, e, _)| e.handle() == Some(m.handle));
        let (ids, at_unix_ms, limits) = check_registration(&m, events.next(), &registered);
        assert_eq!(m.ids, ids);
        assert_eq!(m.registered_unix_ms, at_unix_ms);
        let mut model = Model::new(&m, ids, limits);
        for (id, e, changed) in events {
            model.apply(*id, e, *changed);
        }
        model.check();
    }
}

/// Every event of a handle is of a registered one; the others are root-level: the gate, whose
/// changes alternate and whose last the store keeps, and the admission limit likewise (never 0,
/// never the one in force, the store keeps the last).
fn check_root_events(store: &ManifestStore, accepted: &[(EventId, LifecycleEvent, bool)]) {
    let mut gate: Option<&GateChanged> = None;
    let mut limit: Option<&AdmissionLimitSet> = None;
    for (_, e, _) in accepted {
        match (e.handle(), e) {
            (Some(h), _) => assert!(
                store.get(&h).is_some(),
                "an event of an unregistered handle was accepted"
            ),
            (None, E::GateChanged(g)) => {
                assert_ne!(
                    g.paused,
                    gate.is_some_and(|l| l.paused),
                    "a gate change to its state"
                );
                gate = Some(g);
            }
            (None, E::AdmissionLimitSet(l)) => {
                assert_ne!(l.max_concurrent, Some(0), "a limit of 0");
                assert_ne!(
                    l.max_concurrent,
                    limit.and_then(|p| p.max_concurrent),
                    "a limit equal to the one in force"
                );
                limit = Some(l);
            }
            (None, _) => panic!("an event without a handle that is not root-level"),
        }
    }
    assert_eq!(
        store.gate(),
        gate,
        "the store's gate is not the last change"
    );
    assert_eq!(
        store.admission_limit(),
        limit,
        "the store's admission limit is not the last one set"
    );
}

/// The first accepted event of manifest `m`, its registration, against the manifest; returns its
/// allocated IDs, its time and its limits. `registered`: the handles registered, in order.
fn check_registration(
    m: &Manifest,
    first: Option<&(EventId, LifecycleEvent, bool)>,
    registered: &[Handle],
) -> (LifecycleIds, u64, Limits) {
    match first {
        Some((_, E::Registered(reg), _)) => {
            assert!(m.command == reg.command, "the command changed");
            assert_eq!(m.restart_of, None);
            (reg.ids, reg.at_unix_ms, reg.command.limits.clone())
        }
        Some((_, E::RegisteredV2(reg), _)) => {
            assert!(m.command == *reg.command, "the command changed");
            assert_eq!(m.restart_of, reg.restart_of);
            // A restart links to a handle registered before this one.
            if let Some(old) = reg.restart_of {
                let before = registered.iter().position(|h| *h == old);
                let this = registered.iter().position(|h| *h == m.handle);
                assert!(
                    before < this && before.is_some(),
                    "restart_of a later handle"
                );
            }
            (reg.ids, reg.at_unix_ms, reg.command.limits.clone())
        }
        _ => panic!(
            "{}: the first accepted event is not its registration",
            m.handle
        ),
    }
}

/// Whether `new` bounds are consistent and extend `old` ones.
fn grows(new: &CursorBounds, old: &CursorBounds) -> bool {
    new.retained_from <= new.total_bytes
        && new.retained_from >= old.retained_from
        && new.total_bytes >= old.total_bytes
}

/// What one manifest must hold after the events folded so far.
struct Model<'a> {
    manifest: &'a Manifest,
    ids: LifecycleIds,
    limits: Limits,
    state: State,
    bounds: CursorBounds,
    pid: Option<u32>,
    running_ms: Option<u64>,
    stops: u32,
    first_stop: Option<(String, String)>,
    input_closed: bool,
    /// The ID of the terminal event (or of the loss on restore).
    terminal: Option<EventId>,
    published: BTreeSet<EventId>,
    completion: bool,
    scope: Option<Scoped>,
    released: Option<ExitProof>,
    retired: Option<(String, u64)>,
    /// The bytes every gap lost, in sum.
    lost: u64,
    last_gap_end: u64,
    awaiting: Option<u64>,
    fired: Option<DeadlineFired>,
    failures: usize,
}

impl<'a> Model<'a> {
    /// A manifest just registered with `ids` and `limits`.
    fn new(manifest: &'a Manifest, ids: LifecycleIds, limits: Limits) -> Model<'a> {
        Model {
            manifest,
            ids,
            limits,
            state: State::Starting,
            bounds: CursorBounds::default(),
            pid: None,
            running_ms: None,
            stops: 0,
            first_stop: None,
            input_closed: false,
            terminal: None,
            published: BTreeSet::new(),
            completion: false,
            scope: None,
            released: None,
            retired: None,
            lost: 0,
            last_gap_end: 0,
            awaiting: None,
            fired: None,
            failures: 0,
        }
    }

    /// Folds the accepted event `e` under `id` (`changed`: whether the store said it changed the
    /// manifest), checking it against the events before it.
    fn apply(&mut self, id: EventId, e: &LifecycleEvent, changed: bool) {
        match e {
            E::Registered(_) | E::RegisteredV2(_) => {
                panic!("{}: registered twice", self.manifest.handle)
            }
            E::Running(r) => self.running(id, r),
            E::Terminal(t) => self.terminal(id, t),
            E::LostOnRestore(l) => self.lost_on_restore(id, l),
            E::StopRequested(s) => self.stop_requested(s),
            E::InputClosed(_) => {
                assert!(!self.input_closed, "input closed twice");
                self.input_closed = true;
            }
            E::TerminalResized(r) => self.terminal_resized(r),
            E::OutputCheckpoint(c) => self.checkpoint(c),
            E::LifecyclePublished(p) => self.lifecycle_published(id, p, changed),
            E::CompletionNotified(c) => self.completion_notified(id, c, changed),
            E::Scoped(s) => self.scoped(id, s, changed),
            E::TreeReleased(r) => self.tree_released(id, r, changed),
            E::OutputRetired(r) => self.output_retired(id, r, changed),
            E::OutputGap(g) => self.output_gap(g),
            E::GateChanged(_) | E::AdmissionLimitSet(_) => {
                panic!("a root-level event counted against a process")
            }
            E::HumanInput(i) => self.human_input(i),
            E::DeadlineFired(d) => self.deadline_fired(d),
            E::DeadlineFailed(f) => self.deadline_failed(f),
        }
    }

    fn running(&mut self, id: EventId, r: &Running) {
        assert!(self.state == State::Starting && id == self.ids.running);
        (self.state, self.pid, self.running_ms) = (State::Running, Some(r.pid), Some(r.at_unix_ms));
    }

    fn terminal(&mut self, id: EventId, t: &Terminal) {
        assert!(self.state.can_move_to(t.state) && t.state.is_terminal());
        assert!(id == self.ids.terminal && grows(&t.bounds, &self.bounds));
        (self.state, self.bounds, self.terminal) = (t.state, t.bounds, Some(id));
    }

    fn lost_on_restore(&mut self, id: EventId, l: &LostOnRestore) {
        assert!(self.state.can_move_to(State::LostOnRestore) && id == self.ids.lost);
        assert!(grows(&l.bounds, &self.bounds));
        (self.state, self.bounds, self.terminal) = (State::LostOnRestore, l.bounds, Some(id));
    }

    fn stop_requested(&mut self, s: &StopRequested) {
        assert!(!self.state.is_terminal(), "a stop after the terminal event");
        self.stops += 1;
        self.first_stop
            .get_or_insert((s.reason.clone(), s.requested_by.clone()));
    }

    fn terminal_resized(&mut self, r: &TerminalResized) {
        assert_eq!(
            self.state,
            State::Running,
            "a terminal sized while not running"
        );
        assert!(
            r.rows > 0 && r.cols > 0,
            "a terminal without rows or columns"
        );
    }

    fn checkpoint(&mut self, c: &OutputCheckpoint) {
        assert!(
            !self.state.is_terminal(),
            "a checkpoint after the terminal event"
        );
        assert!(grows(&c.bounds, &self.bounds));
        self.bounds = c.bounds;
    }

    fn lifecycle_published(&mut self, id: EventId, p: &LifecyclePublished, changed: bool) {
        assert_eq!(id, p.event.derived(derived::PUBLISHED));
        let ran = p.event == self.ids.running && self.pid.is_some();
        assert!(
            ran || self.terminal == Some(p.event),
            "an unrecorded event published"
        );
        assert_eq!(changed, self.published.insert(p.event));
    }

    fn completion_notified(&mut self, id: EventId, c: &CompletionNotified, changed: bool) {
        assert!(self.terminal.is_some() && c.command == self.ids.completion);
        assert_eq!(id, self.ids.completion.derived(derived::NOTIFIED));
        assert_eq!(changed, !self.completion);
        self.completion = true;
    }

    fn scoped(&mut self, id: EventId, s: &Scoped, changed: bool) {
        assert_eq!(id, self.ids.running.derived(derived::SCOPED));
        match &self.scope {
            Some(first) => assert!(first == s && !changed, "a second scope"),
            None => assert!(
                !self.state.is_terminal(),
                "a scope after the terminal event"
            ),
        }
        self.scope.get_or_insert_with(|| s.clone());
    }

    fn tree_released(&mut self, id: EventId, r: &TreeReleased, changed: bool) {
        assert_eq!(id, self.ids.terminal.derived(derived::RELEASED));
        assert!(self.scope.is_some(), "a release without a scope");
        if let Some(first) = &self.released {
            assert!(*first == r.proof && !changed, "a second release");
        }
        self.released.get_or_insert_with(|| r.proof.clone());
    }

    fn output_retired(&mut self, id: EventId, r: &OutputRetired, changed: bool) {
        assert_eq!(id, self.ids.terminal.derived(derived::RETIRED));
        // Verified: terminal, and released, never ran, or a group leader reaped.
        let by_group = self
            .scope
            .as_ref()
            .is_none_or(|s: &Scoped| s.mechanism == TreeMechanism::Group);
        let reaped = self.terminal == Some(self.ids.terminal)
            && self
                .manifest
                .terminal
                .as_ref()
                .is_some_and(|t| matches!(t.exit, ExitStatus::Code(_) | ExitStatus::Signal(_)));
        let verified = self.state.is_terminal()
            && (self.released.is_some()
                || self.pid.is_none()
                || (self.state != State::LostOnRestore && by_group && reaped));
        assert!(verified, "output retired of an unverified exit");
        let this = (r.reason.clone(), r.at_unix_ms);
        if let Some(first) = &self.retired {
            assert!(*first == this && !changed, "a second retirement");
        }
        self.retired.get_or_insert(this);
    }

    fn output_gap(&mut self, g: &OutputGap) {
        let g = g.gap;
        assert!(!self.state.is_terminal(), "a gap after the terminal event");
        assert!(g.from < g.to && g.reason != crate::spool::LossReason::Retention);
        assert!(g.from >= self.last_gap_end, "gaps out of order");
        self.last_gap_end = g.to;
        self.lost += g.to - g.from;
    }

    fn human_input(&mut self, i: &HumanInput) {
        assert!(
            !self.state.is_terminal(),
            "a human-input mark after the terminal event"
        );
        assert_ne!(
            i.waiting,
            self.awaiting.is_some(),
            "a mark that changes nothing"
        );
        self.awaiting = i.waiting.then_some(i.at_unix_ms);
    }

    fn deadline_fired(&mut self, d: &DeadlineFired) {
        assert!(
            !self.state.is_terminal(),
            "a deadline after the terminal event"
        );
        assert!(self.fired.is_none(), "a second deadline");
        let configured = match d.deadline {
            Deadline::Wall => self.limits.wall_clock_ms,
            Deadline::Idle => self.limits.idle_ms,
        };
        assert_eq!(configured, Some(d.limit_ms), "a limit not configured");
        self.fired = Some(d.clone());
    }

    fn deadline_failed(&mut self, f: &DeadlineFailed) {
        assert!(
            !self.state.is_terminal(),
            "a deadline failure after the terminal event"
        );
        assert_eq!(self.fired.as_ref().map(|d| d.deadline), Some(f.deadline));
        self.failures += 1;
        assert!(self.failures <= crate::limits::DEADLINE_FAILURES_MAX);
    }

    /// The manifest holds what its events say.
    fn check(&self) {
        let m = self.manifest;
        assert_eq!(m.awaiting_input, self.awaiting);
        assert_eq!(m.deadline, self.fired);
        assert_eq!(m.deadline_failures.len(), self.failures);
        assert_eq!(m.state, self.state, "{}", m.handle);
        assert_eq!(m.bounds, self.bounds);
        assert_eq!((m.pid, m.running_unix_ms), (self.pid, self.running_ms));
        assert_eq!(m.witness.is_some(), self.pid.is_some());
        assert_eq!(
            (m.stop_requests, &m.first_stop),
            (self.stops, &self.first_stop)
        );
        assert_eq!(m.input_closed, self.input_closed);
        assert_eq!(m.terminal.as_ref().map(|t| t.event_id), self.terminal);
        assert_eq!(
            m.terminal.as_ref().map(|t| t.state),
            self.terminal.map(|_| self.state)
        );
        assert_eq!(m.published, self.published);
        assert_eq!(m.completion_notified, self.completion);
        assert_eq!(m.scope, self.scope);
        assert_eq!(m.released, self.released);
        assert_eq!(
            m.retired.as_ref().map(|r| (r.reason.clone(), r.at_unix_ms)),
            self.retired
        );
        // Gaps: ordered, apart or joined, every lost cursor kept, at most the bound.
        assert!(m.gaps.len() <= crate::limits::GAPS_PER_PROCESS_MAX);
        assert!(m.gaps.windows(2).all(|w| w[0].to <= w[1].from));
        assert_eq!(m.gaps.iter().map(|g| g.to - g.from).sum::<u64>(), self.lost);
    }
}
