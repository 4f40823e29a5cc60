//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through).

use crate::codec;
use crate::journal::EventId;
use crate::journal::format;
use crate::journal::fuzz::{FUZZ_JOURNAL_ID, Input};
use crate::limits::{SEGMENT_HEADER_BYTES, SEQ_MAX};

/// The fast lifecycle decoders (`lifecycle::wire`) against the reference decoder (bincode), for
/// every lifecycle kind, on `payload` as codec version 1: the same payloads are accepted, to equal
/// values; `LifecycleEvent::decode` gives exactly the reference's result, error text included;
/// and a registration read straight into its stored form equals the stored form of the decoded
/// registration.
pub fn lifecycle_decoders(payload: &[u8]) {
    use crate::codec::CODEC_VERSION;
    use crate::lifecycle::event::{LifecycleEvent, kinds};
    use crate::lifecycle::wire;
    let fast_kinds = (kinds::REGISTERED..=kinds::COMPLETION_NOTIFIED)
        .chain([kinds::REGISTERED_V2])
        .chain(kinds::GATE_CHANGED..=kinds::DEADLINE_FAILED);
    for kind in fast_kinds {
        let reference = LifecycleEvent::decode_reference(kind, CODEC_VERSION, payload);
        let fast = wire::decode(kind, CODEC_VERSION, payload);
        match (&fast, &reference) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "fast and reference decode differ"),
            (Err(_), Err(_)) => {}
            _ => panic!("kind {kind:#06x}: fast {fast:?}, reference {reference:?}"),
        }
        let public = LifecycleEvent::decode(kind, CODEC_VERSION, payload);
        assert_eq!(format!("{public:?}"), format!("{reference:?}"));
        if kind == kinds::REGISTERED || kind == kinds::REGISTERED_V2 {
            let stored = wire::registration(kind, CODEC_VERSION, payload);
            match (stored, &reference) {
                (Ok(r), Ok(LifecycleEvent::Registered(e))) => {
                    assert_eq!(r, wire::Registration::from_event(e));
                    assert!(r.command == e.command, "stored command differs");
                }
                (Ok(r), Ok(LifecycleEvent::RegisteredV2(e))) => {
                    assert_eq!(r, wire::Registration::from_event_v2(e));
                    assert!(r.command == *e.command, "stored command differs");
                }
                (Err(_), Err(_)) => {}
                (stored, _) => panic!("registration: stored {stored:?}, reference {reference:?}"),
            }
        }
    }
    // The kinds from `Scoped` up: total, and the public decoder agrees with the reference.
    // `RegisteredV2` is checked above; its labels map is not canonical (keys out of order or
    // repeated decode, and encode back sorted), so it is left out of the re-encoding check.
    let rest = (kinds::SCOPED..=kinds::LAST)
        .filter(|k| LifecycleEvent::is_lifecycle_kind(*k) && *k != kinds::REGISTERED_V2);
    for kind in rest {
        let reference = LifecycleEvent::decode_reference(kind, CODEC_VERSION, payload);
        let public = LifecycleEvent::decode(kind, CODEC_VERSION, payload);
        assert_eq!(format!("{public:?}"), format!("{reference:?}"));
        if let Ok(event) = &reference {
            // What decodes encodes back to the same bytes (fixed-width fields, no slack).
            assert_eq!(event.encode().ok().as_deref(), Some(payload));
        }
    }
}

/// Arbitrary sequences of lifecycle events, built from the input bytes over three handles and a
/// small pool of event IDs (allocated ones, fresh ones, other handles' ones), fed to the manifest
/// store. Never a panic, and after every step: a refused event changed nothing; identity and
/// allocated IDs never change; states move only along the matrix and never leave a terminal
/// state; the terminal result is set once; cursor bounds never shrink and stay consistent. Every
/// input also runs [`lifecycle_decoders`] on its bytes after the first, and every tenth input
/// decodes them as events of every kind (the codec must be total).
pub fn lifecycle_store(data: &[u8]) {
    use crate::lifecycle::event::*;
    use crate::lifecycle::{ManifestStore, State};
    let id = |n: u8| EventId::from_bytes([n; 16]);
    let handle = |h: u8| Handle(id(200 + h % 3));
    let ids = |h: u8| LifecycleIds {
        running: id(10 * (h % 3) + 1),
        terminal: id(10 * (h % 3) + 2),
        lost: id(10 * (h % 3) + 3),
        completion: id(10 * (h % 3) + 4),
    };
    if let Some(payload) = data.get(1..) {
        lifecycle_decoders(payload);
    }
    if data.first().is_some_and(|b| b % 10 == 0) {
        let all =
            (kinds::REGISTERED..=kinds::LAST).filter(|k| LifecycleEvent::is_lifecycle_kind(*k));
        for kind in all {
            if let Ok(event) = LifecycleEvent::decode(kind, crate::codec::CODEC_VERSION, &data[1..])
            {
                let bytes = event.encode().unwrap_or_default();
                assert_eq!(bytes, &data[1..], "decode then encode changed the bytes");
            }
        }
    }
    let mut store = ManifestStore::new();
    for step in data.chunks(4) {
        let [op, h, pick, x] = [
            step[0],
            *step.get(1).unwrap_or(&0),
            *step.get(2).unwrap_or(&0),
            *step.get(3).unwrap_or(&0),
        ];
        let hd = handle(h);
        let state = State::ALL[usize::from(x % 9)];
        let bounds = CursorBounds {
            retained_from: u64::from(x >> 4),
            total_bytes: u64::from(x >> 2) + u64::from(pick & 3),
        };
        let event = match op % 10 {
            0 => LifecycleEvent::Registered(Registered {
                handle: hd,
                ids: ids(h),
                command: CommandSpec::default(),
                at_unix_ms: 0,
            }),
            1 => LifecycleEvent::Running(Running {
                handle: hd,
                pid: u32::from(x),
                witness: IdentityWitness {
                    start_time_ticks: 1,
                    boot_id: [1; 16],
                },
                at_unix_ms: 0,
            }),
            2 => LifecycleEvent::StopRequested(StopRequested {
                handle: hd,
                reason: String::new(),
                requested_by: String::new(),
                at_unix_ms: 0,
            }),
            3 => LifecycleEvent::InputClosed(InputClosed {
                handle: hd,
                at_unix_ms: 0,
            }),
            4 => LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
                handle: hd,
                bounds,
                at_unix_ms: 0,
            }),
            5 => LifecycleEvent::Terminal(Terminal {
                handle: hd,
                state,
                exit: ExitStatus::Code(i32::from(x)),
                bounds,
                capture: CaptureStatus::Complete,
                reason: String::new(),
                at_unix_ms: 0,
            }),
            6 => LifecycleEvent::LostOnRestore(LostOnRestore {
                handle: hd,
                bounds,
                at_unix_ms: 0,
            }),
            7 => LifecycleEvent::LifecyclePublished(LifecyclePublished {
                handle: hd,
                event: [ids(h).running, ids(h).terminal, ids(h).lost, id(99)][usize::from(x % 4)],
            }),
            8 => LifecycleEvent::OutputGap(OutputGap {
                handle: hd,
                gap: crate::spool::Gap {
                    from: u64::from(x >> 2),
                    to: u64::from(x >> 2) + u64::from(pick & 7),
                    reason: [
                        crate::spool::LossReason::Retention,
                        crate::spool::LossReason::DiskFull,
                        crate::spool::LossReason::IoError,
                        crate::spool::LossReason::SyncFailed,
                    ][usize::from(x & 3)],
                    errno: i32::from(pick & 1) * 28,
                },
                at_unix_ms: 0,
            }),
            _ => LifecycleEvent::CompletionNotified(CompletionNotified {
                handle: hd,
                command: if x & 1 == 0 {
                    ids(h).completion
                } else {
                    id(98)
                },
            }),
        };
        // A record about a step is accepted only under the ID derived from the step's.
        let derived = match &event {
            LifecycleEvent::LifecyclePublished(e) => Some(e.event.derived(derived::PUBLISHED)),
            LifecycleEvent::CompletionNotified(_) => {
                Some(ids(h).completion.derived(derived::NOTIFIED))
            }
            _ => None,
        };
        let event_id = match (pick % 6, derived) {
            (0, _) => id(100 + pick / 6 % 50),
            (1, _) => ids(h).running,
            (2, _) => ids(h).terminal,
            (3, _) => ids(h).lost,
            (4, _) => ids(h.wrapping_add(1)).terminal,
            (_, Some(derived)) => derived,
            (_, None) => id(10 * (h % 3) + 9),
        };
        let before = store.clone();
        let old = store.get(&hd).cloned();
        let checked = store.check(event_id, &event);
        let applied = store.apply(event_id, &event);
        assert_eq!(checked, applied, "check and apply disagree");
        if applied.is_err() {
            assert_eq!(store, before, "a refused event changed the store");
            continue;
        }
        let Some(new) = store.get(&hd) else {
            panic!("an accepted event left no manifest");
        };
        assert!(new.bounds.is_valid());
        if let Some(old) = old {
            assert_eq!(
                (old.ids, &old.command),
                (new.ids, &new.command),
                "identity changed"
            );
            assert!(new.bounds.extends(&old.bounds), "bounds shrank");
            if old.state != new.state {
                assert!(
                    old.state.can_move_to(new.state),
                    "{} -> {}",
                    old.state,
                    new.state
                );
            }
            if old.terminal.is_some() {
                assert_eq!(old.terminal, new.terminal, "terminal result changed");
                assert_eq!(old.bounds, new.bounds, "bounds moved after terminal");
            }
            assert!(old.published.is_subset(&new.published));
            assert!(!old.completion_notified || new.completion_notified);
        } else {
            assert_eq!(new.state, State::Starting);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// replay

/// One record as a scan hands it to replay, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayRecord {
    pub event_id: EventId,
    pub kind: u16,
    pub codec_version: u8,
    pub payload: Vec<u8>,
}

impl ReplayRecord {
    /// The record of `event` under `event_id`, encoded by the real codec.
    pub fn of(event_id: EventId, event: &crate::lifecycle::LifecycleEvent) -> Self {
        ReplayRecord {
            event_id,
            kind: event.kind().get(),
            codec_version: codec::CODEC_VERSION,
            // Every lifecycle event encodes (the codec has no limit on encoding).
            payload: event.encode().unwrap_or_default(),
        }
    }
}

/// The most records one [`replay`] input describes, so that one run stays short.
pub const REPLAY_RECORDS_MAX: usize = 512;

/// How many handles [`replay_records`] draws from (the events of each hit one manifest).
const REPLAY_HANDLES: u8 = 4;

/// IDs of [`replay_records`]: `tag` says what the ID is for, `h` whose it is.
fn replay_id(tag: u8, h: u8, n: u64) -> EventId {
    let mut b = [0u8; 16];
    b[0] = tag;
    b[1] = h;
    b[8..].copy_from_slice(&n.to_le_bytes());
    EventId::from_bytes(b)
}

fn replay_handle(h: u8) -> crate::lifecycle::Handle {
    crate::lifecycle::Handle(replay_id(6, h % REPLAY_HANDLES, 0))
}

fn replay_ids(h: u8) -> crate::lifecycle::LifecycleIds {
    let h = h % REPLAY_HANDLES;
    crate::lifecycle::LifecycleIds {
        running: replay_id(2, h, 0),
        terminal: replay_id(3, h, 0),
        lost: replay_id(4, h, 0),
        completion: replay_id(5, h, 0),
    }
}

/// The generator's state: fresh IDs, IDs handed out, and each handle's last bounds and gap end
/// as the generator last chose them (not as the store accepted them: it does not know).
#[derive(Default)]
struct ReplayGen {
    fresh: u64,
    used: Vec<EventId>,
    bounds: [crate::lifecycle::event::CursorBounds; REPLAY_HANDLES as usize],
    gap_end: [u64; REPLAY_HANDLES as usize],
}

impl ReplayGen {
    /// A fresh ID; half of them sort below every reserved ID (tag 0), so that lookups take
    /// both paths of the store's reservation check.
    fn fresh(&mut self) -> EventId {
        self.fresh += 1;
        let tag = if self.fresh.is_multiple_of(2) { 0 } else { 7 };
        replay_id(tag, 0, self.fresh)
    }

    fn bounds(&mut self, h: u8, x: u8) -> crate::lifecycle::event::CursorBounds {
        let slot = &mut self.bounds[usize::from(h % REPLAY_HANDLES)];
        let mut next = *slot;
        if x & 0x40 == 0 {
            next.total_bytes += u64::from(x & 15);
        } else {
            // Backwards, sometimes.
            next.total_bytes = next.total_bytes.saturating_sub(u64::from(x & 3) + 1);
        }
        // Sometimes past `total_bytes`: inconsistent.
        next.retained_from += u64::from((x >> 4) & 3);
        *slot = next;
        next
    }

    /// A real lifecycle event for handle `h`, of the kind that `k` picks (each lifecycle kind
    /// has its own arm), its fields from `x` and `input`.
    fn event(
        &mut self,
        k: u8,
        h: u8,
        x: u8,
        input: &mut Input<'_>,
    ) -> crate::lifecycle::LifecycleEvent {
        use crate::lifecycle::State;
        use crate::lifecycle::event::*;
        let handle = replay_handle(h);
        let ids = replay_ids(h);
        let at_unix_ms = u64::from(x);
        let exit = |v: u8| match v % 3 {
            0 => ExitStatus::Code(i32::from(v) - 100),
            1 => ExitStatus::Signal(i32::from(v % 32)),
            _ => ExitStatus::Unknown,
        };
        let text = |n: u8| {
            "é-x\u{1b}"
                .chars()
                .cycle()
                .take(usize::from(n % 6))
                .collect()
        };
        match k % 20 {
            18 => {
                let arg_count = input.u8() % 3;
                let env = |i: u8| EnvVar {
                    name: text(i.wrapping_add(x)),
                    value: (i & 1 == 0).then(|| text(x ^ i)),
                };
                LifecycleEvent::RegisteredV2(RegisteredV2 {
                    handle,
                    ids,
                    command: Box::new(CommandSpecV2 {
                        program: text(x),
                        args: (0..arg_count).map(|i| text(x ^ i)).collect(),
                        cwd: "/".into(),
                        env_overrides: (0..x % 4).map(env).collect(),
                        labels: (0..x % 2).map(|i| (format!("k{i}"), text(x))).collect(),
                        limits: Limits::default(),
                        owner: text(x >> 3),
                        env_policy: EnvPolicy {
                            base: [EnvBase::Inherited, EnvBase::Explicit, EnvBase::Client]
                                [usize::from(x % 3)],
                            removed: (0..x % 3).map(text).collect(),
                            overlay: match (x >> 2) % 3 {
                                0 => EnvOverlay::Off,
                                1 => EnvOverlay::Applied {
                                    names: vec!["PATH".into()],
                                },
                                _ => EnvOverlay::Failed { reason: text(x) },
                            },
                        },
                    }),
                    // Another handle, registered or not (yet), or itself.
                    restart_of: (x & 0x10 != 0).then(|| replay_handle(h.wrapping_add(x >> 5))),
                    at_unix_ms,
                })
            }
            0 => {
                let mut ids = ids;
                match x % 8 {
                    // One of another handle's IDs: refused while that one holds it.
                    7 => ids.terminal = replay_ids(h.wrapping_add(1)).terminal,
                    // The same ID twice in one registration.
                    6 => ids.lost = ids.running,
                    _ => {}
                }
                let arg_count = input.u8() % 4;
                LifecycleEvent::Registered(Registered {
                    handle,
                    ids,
                    command: CommandSpec {
                        program: text(x),
                        args: (0..arg_count).map(|i| text(x ^ i)).collect(),
                        cwd: "/".into(),
                        env_overrides: (0..x % 3).map(|i| (text(i), text(x))).collect(),
                        labels: (0..x % 3).map(|i| (format!("k{i}"), text(x))).collect(),
                        limits: Limits {
                            wall_clock_ms: (x & 1 == 1).then_some(u64::from(x)),
                            idle_ms: (x & 2 == 2).then_some(7),
                            output_retention_bytes: (x & 4 == 4).then_some(1 << 20),
                        },
                        owner: text(x >> 3),
                    },
                    at_unix_ms,
                })
            }
            1 => LifecycleEvent::Running(Running {
                handle,
                pid: u32::from(x),
                witness: IdentityWitness {
                    start_time_ticks: u64::from(x),
                    boot_id: [x; 16],
                },
                at_unix_ms,
            }),
            2 => LifecycleEvent::StopRequested(StopRequested {
                handle,
                reason: text(x),
                requested_by: text(x >> 2),
                at_unix_ms,
            }),
            3 => LifecycleEvent::InputClosed(InputClosed { handle, at_unix_ms }),
            4 => LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
                handle,
                bounds: self.bounds(h, x),
                at_unix_ms,
            }),
            5 => LifecycleEvent::Terminal(Terminal {
                handle,
                state: State::ALL[usize::from(x % 9)],
                exit: exit(x >> 2),
                bounds: self.bounds(h, input.u8()),
                capture: match (x >> 4) % 3 {
                    0 => CaptureStatus::Complete,
                    1 => CaptureStatus::Incomplete(text(x)),
                    _ => CaptureStatus::Failed(text(x)),
                },
                reason: text(x),
                at_unix_ms,
            }),
            6 => LifecycleEvent::LostOnRestore(LostOnRestore {
                handle,
                bounds: self.bounds(h, x),
                at_unix_ms,
            }),
            7 => LifecycleEvent::LifecyclePublished(LifecyclePublished {
                handle,
                event: [
                    ids.running,
                    ids.terminal,
                    ids.lost,
                    ids.completion,
                    replay_id(1, h % REPLAY_HANDLES, 0),
                    replay_ids(h.wrapping_add(1)).running,
                ][usize::from(x % 6)],
            }),
            8 => LifecycleEvent::CompletionNotified(CompletionNotified {
                handle,
                command: if x % 4 == 3 {
                    ids.running
                } else {
                    ids.completion
                },
            }),
            9 => {
                let mechanism = [
                    TreeMechanism::Group,
                    TreeMechanism::Guardian,
                    TreeMechanism::Cgroup,
                ][usize::from(x % 3)];
                let guarded = mechanism != TreeMechanism::Group;
                LifecycleEvent::Scoped(Scoped {
                    handle,
                    mechanism,
                    boot_id: [1; 16],
                    workload: ProcessWitness {
                        // Half the scopes of a handle are the same record.
                        pid: u32::from(x >> 7),
                        start_time_ticks: 1,
                        pidfs_ino: 0,
                    },
                    guardian: guarded.then_some(ProcessWitness {
                        pid: 2,
                        start_time_ticks: 1,
                        pidfs_ino: 3,
                    }),
                    cgroup: (mechanism == TreeMechanism::Cgroup).then(|| "/cg".to_owned()),
                    receipt: guarded.then(|| ReceiptBinding {
                        path: "trees/r".into(),
                        dev: 1,
                        ino: 2,
                        nonce: [h; 16],
                    }),
                    at_unix_ms: 0,
                })
            }
            10 => LifecycleEvent::TreeReleased(TreeReleased {
                handle,
                proof: match x % 3 {
                    0 => ExitProof::Receipt {
                        status: exit(x >> 2),
                        reaped: u64::from(x >> 6),
                    },
                    1 => ExitProof::CgroupEmpty,
                    _ => ExitProof::BootChanged,
                },
                at_unix_ms: 0,
            }),
            12 => LifecycleEvent::OutputRetired(OutputRetired {
                handle,
                // Two reasons and two times: a repeat of the same retirement, or another one.
                reason: text(x & 1),
                at_unix_ms: u64::from(x >> 7),
            }),
            13 => LifecycleEvent::GateChanged(GateChanged {
                paused: x & 1 == 1,
                requested_by: text(x >> 1),
                reason: text(x >> 3),
                at_unix_ms,
            }),
            14 => LifecycleEvent::HumanInput(HumanInput {
                handle,
                waiting: x & 1 == 1,
                by: text(x >> 1),
                at_unix_ms,
            }),
            15 => LifecycleEvent::DeadlineFired(DeadlineFired {
                handle,
                deadline: if x & 1 == 0 {
                    Deadline::Wall
                } else {
                    Deadline::Idle
                },
                // The registration's limits (above): wall `x`, idle 7; sometimes another.
                limit_ms: match (x >> 1) % 3 {
                    0 => u64::from(x),
                    1 => 7,
                    _ => u64::from(x >> 2),
                },
                clock_from_unix_ms: u64::from(x >> 1),
                at_unix_ms,
            }),
            16 => LifecycleEvent::DeadlineFailed(DeadlineFailed {
                handle,
                deadline: if x & 1 == 0 {
                    Deadline::Wall
                } else {
                    Deadline::Idle
                },
                error: text(x >> 1),
                at_unix_ms,
            }),
            19 => LifecycleEvent::AdmissionLimitSet(AdmissionLimitSet {
                // Few values, so that a setting equal to the one in force comes up; 0 now and
                // then, which is refused.
                max_concurrent: match x % 4 {
                    0 => None,
                    1 => Some(0),
                    _ => Some(u64::from((x >> 2) % 3 + 1)),
                },
                requested_by: text(x >> 4),
                at_unix_ms,
            }),
            17 => LifecycleEvent::TerminalResized(crate::lifecycle::event::TerminalResized {
                handle,
                // A size of 0 now and then, which is refused.
                rows: u16::from(x & 7),
                cols: u16::from(x >> 3),
                at_unix_ms,
            }),
            _ => {
                let end = &mut self.gap_end[usize::from(h % REPLAY_HANDLES)];
                let from = if x & 0x80 == 0 {
                    *end + u64::from(x & 3)
                } else {
                    end.saturating_sub(1)
                };
                let to = from + u64::from((x >> 2) & 7);
                *end = to;
                LifecycleEvent::OutputGap(OutputGap {
                    handle,
                    gap: crate::spool::Gap {
                        from,
                        to,
                        reason: [
                            crate::spool::LossReason::Retention,
                            crate::spool::LossReason::DiskFull,
                            crate::spool::LossReason::IoError,
                            crate::spool::LossReason::SyncFailed,
                        ][usize::from((x >> 5) % 4)],
                        errno: i32::from(x >> 6) * 28,
                    },
                    at_unix_ms,
                })
            }
        }
    }

    /// The ID the rules want for `event` of handle `h`: the allocated one for a step, the
    /// derived one for a record about a step, a fresh one otherwise.
    fn right_id(&mut self, event: &crate::lifecycle::LifecycleEvent, h: u8) -> EventId {
        use crate::lifecycle::LifecycleEvent as E;
        use crate::lifecycle::event::derived;
        let ids = replay_ids(h);
        match event {
            E::Registered(_) | E::RegisteredV2(_) => replay_id(1, h % REPLAY_HANDLES, 0),
            E::Running(_) => ids.running,
            E::Terminal(_) => ids.terminal,
            E::LostOnRestore(_) => ids.lost,
            E::LifecyclePublished(e) => e.event.derived(derived::PUBLISHED),
            E::CompletionNotified(_) => ids.completion.derived(derived::NOTIFIED),
            E::Scoped(_) => ids.running.derived(derived::SCOPED),
            E::TreeReleased(_) => ids.terminal.derived(derived::RELEASED),
            E::OutputRetired(_) => ids.terminal.derived(derived::RETIRED),
            E::StopRequested(_)
            | E::InputClosed(_)
            | E::OutputCheckpoint(_)
            | E::OutputGap(_)
            | E::GateChanged(_)
            | E::AdmissionLimitSet(_)
            | E::HumanInput(_)
            | E::DeadlineFired(_)
            | E::DeadlineFailed(_)
            | E::TerminalResized(_) => self.fresh(),
        }
    }
}

/// Decodes a [`replay`] input into records: four bytes a record (`sel`, handle, ID choice, a
/// field byte), a few more for some. Three records in four are real lifecycle events of every
/// kind, encoded by the real codec, for one of four handles; the rest are the same events with
/// a mutated payload, garbage under a lifecycle kind, records of other kinds, and records of
/// another codec version. Three IDs in five are the one the rules want; the others are fresh,
/// allocated to another step or handle, or reused.
pub fn replay_records(data: &[u8]) -> Vec<ReplayRecord> {
    let mut input = Input { data };
    let mut generator = ReplayGen::default();
    let mut records = Vec::new();
    while !input.is_empty() && records.len() < REPLAY_RECORDS_MAX {
        let [sel, h, pick, x] = [input.u8(), input.u8(), input.u8(), input.u8()];
        let event = generator.event(sel % 20, h, x, &mut input);
        let event_id = match pick % 10 {
            0..=5 => generator.right_id(&event, h),
            6 => generator.fresh(),
            7 => {
                let ids = replay_ids(h.wrapping_add(pick >> 6));
                [ids.running, ids.terminal, ids.lost, ids.completion][usize::from(x % 4)]
            }
            8 if !generator.used.is_empty() => {
                generator.used[usize::from(pick) % generator.used.len()]
            }
            _ => replay_id(1, (h.wrapping_add(1)) % REPLAY_HANDLES, 0),
        };
        generator.used.push(event_id);
        let mut record = ReplayRecord::of(event_id, &event);
        match sel >> 4 {
            0..=11 => {}
            // A mutated payload: a byte flipped, cut short, or one byte more.
            12 => {
                let len = record.payload.len();
                match pick % 3 {
                    0 if len > 0 => record.payload[usize::from(input.u8()) % len] ^= x | 1,
                    1 => record
                        .payload
                        .truncate(usize::from(input.u8()) % len.max(1)),
                    _ => record.payload.push(x),
                }
            }
            // Garbage under a lifecycle kind.
            13 => {
                record.kind = 0x0101 + u16::from(x % 20);
                record.payload = input.bytes(usize::from(pick % 48)).to_vec();
            }
            // Another kind, with a real lifecycle payload or not.
            14 => {
                record.kind = [1, 0x00ff, 0x0100, 0x010d, 0x0201, 0xffff][usize::from(x % 6)];
                if pick & 1 == 1 {
                    record.payload = input.bytes(usize::from(pick % 32)).to_vec();
                }
            }
            // Another codec version.
            _ => record.codec_version = [0, 2, 255][usize::from(x % 3)],
        }
        records.push(record);
    }
    records
}

/// The `replay` target: [`check_replay`] over the records [`replay_records`] decodes.
pub fn replay(data: &[u8]) {
    check_replay(&replay_records(data));
}

/// Feeds `records` (seq 1, 2, ...) through [`crate::lifecycle::Replayer::feed`] and `finish`;
/// never a panic, and:
/// - the report counts every record once: lifecycle kinds (0x0101..=0x0114) and the others;
/// - replay folds exactly what the validating store does with the reference decoder: a record
///   is undecodable exactly when `LifecycleEvent::decode_reference` refuses it (with its error
///   text), rejected exactly when `ManifestStore::apply` refuses it (with its rejection, against
///   its handle), and the stores are equal;
/// - every manifest is what the accepted events say, checked here rule by rule without the
///   store: one registration, states along the matrix, steps under their allocated IDs, records
///   about steps under their derived IDs, bounds that only grow and freeze at the terminal
///   event, the terminal result, publications of recorded events only, completion after the
///   terminal event, scope and release once, gaps ordered and merged;
/// - feeding the same records again gives the same manifests and report.
pub fn check_replay(records: &[ReplayRecord]) {
    use crate::journal::Position;
    use crate::journal::reader::RecordView;
    use crate::lifecycle::{Applied, LifecycleEvent, ManifestStore, Replayer};
    let views: Vec<RecordView<'_>> = (0u64..)
        .zip(records)
        .map(|(i, r)| RecordView {
            position: Position {
                seq: i + 1,
                segment_index: 0,
                offset: SEGMENT_HEADER_BYTES as u64 + 64 * i,
            },
            event_id: r.event_id,
            kind: r.kind,
            codec_version: r.codec_version,
            payload: &r.payload,
        })
        .collect();
    let run = || {
        let mut replayer = Replayer::default();
        for view in &views {
            replayer.feed(view);
        }
        replayer.finish()
    };
    let (store, report) = run();
    assert_eq!(
        run(),
        (store.clone(), report.clone()),
        "replay is not deterministic"
    );

    let lifecycle = records
        .iter()
        .filter(|r| LifecycleEvent::is_lifecycle_kind(r.kind))
        .count() as u64;
    assert_eq!(
        report.lifecycle_events, lifecycle,
        "lifecycle records miscounted"
    );
    assert_eq!(
        report.lifecycle_events + report.other_events,
        records.len() as u64,
        "records fed and counted differ"
    );

    // The reference fold: bincode's decoder, and the store's check and apply.
    let mut reference = ManifestStore::new();
    let mut rejected = Vec::new();
    let mut undecodable = Vec::new();
    let mut accepted = Vec::new();
    for (view, r) in views.iter().zip(records) {
        if !LifecycleEvent::is_lifecycle_kind(r.kind) {
            continue;
        }
        let seq = view.position.seq;
        match LifecycleEvent::decode_reference(r.kind, r.codec_version, &r.payload) {
            Err(e) => undecodable.push((seq, None, e.to_string())),
            Ok(event) => {
                let checked = reference.check(r.event_id, &event);
                let applied = reference.apply(r.event_id, &event);
                assert_eq!(checked, applied, "check and apply disagree at seq {seq}");
                match applied {
                    Ok(applied) => accepted.push((r.event_id, event, applied == Applied::Changed)),
                    Err(e) => {
                        rejected.push((seq, event.handle().map(|h| h.to_string()), e.to_string()))
                    }
                }
            }
        }
    }
    let issues = |list: &[crate::lifecycle::replay::ReplayIssue]| -> Vec<_> {
        list.iter()
            .map(|i| (i.seq, i.handle.clone(), i.error.clone()))
            .collect()
    };
    assert_eq!(
        issues(&report.undecodable),
        undecodable,
        "undecodable records differ"
    );
    assert_eq!(
        issues(&report.rejected),
        rejected,
        "rejected records differ"
    );
    assert!(
        store == reference,
        "replay and the validating store fold differently"
    );
    check_manifests(&store, &accepted);
}

/// Every manifest of `store` against the events it accepted (`(ID, event, changed)`, in journal
/// order), rule by rule, without the store's code (see [`check_replay`]).
fn check_manifests(
    store: &crate::lifecycle::ManifestStore,
    accepted: &[(EventId, crate::lifecycle::LifecycleEvent, bool)],
) {
    use crate::lifecycle::LifecycleEvent as E;
    use crate::lifecycle::State;
    use crate::lifecycle::event::{CursorBounds, ExitStatus, Scoped, TreeMechanism, derived};
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
    // The gate: changes alternate, and the store keeps the last.
    let mut gate: Option<&crate::lifecycle::event::GateChanged> = None;
    // The admission limit likewise: never 0, never the one in force, the store keeps the last.
    let mut limit: Option<&crate::lifecycle::event::AdmissionLimitSet> = None;
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
    for m in store.iter() {
        let mut events = accepted
            .iter()
            .filter(|(_, e, _)| e.handle() == Some(m.handle));
        let (ids, at_unix_ms, limits) = match events.next() {
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
        };
        assert_eq!(m.ids, ids);
        assert_eq!(m.registered_unix_ms, at_unix_ms);
        let mut state = State::Starting;
        let mut bounds = CursorBounds::default();
        let (mut pid, mut running_ms, mut stops, mut first_stop) = (None, None, 0u32, None);
        let mut input_closed = false;
        let mut terminal = None;
        let mut published = std::collections::BTreeSet::new();
        let mut completion = false;
        let (mut scope, mut released) = (None, None);
        let mut retired = None;
        let mut lost = 0u64;
        let mut last_gap_end = 0u64;
        let (mut awaiting, mut fired, mut failures) = (None, None, 0usize);
        for (id, e, changed) in events {
            let grows = |new: &CursorBounds, old: &CursorBounds| {
                new.retained_from <= new.total_bytes
                    && new.retained_from >= old.retained_from
                    && new.total_bytes >= old.total_bytes
            };
            match e {
                E::Registered(_) | E::RegisteredV2(_) => {
                    panic!("{}: registered twice", m.handle)
                }
                E::Running(r) => {
                    assert!(state == State::Starting && *id == ids.running);
                    (state, pid, running_ms) = (State::Running, Some(r.pid), Some(r.at_unix_ms));
                }
                E::Terminal(t) => {
                    assert!(state.can_move_to(t.state) && t.state.is_terminal());
                    assert!(*id == ids.terminal && grows(&t.bounds, &bounds));
                    (state, bounds, terminal) = (t.state, t.bounds, Some(*id));
                }
                E::LostOnRestore(l) => {
                    assert!(state.can_move_to(State::LostOnRestore) && *id == ids.lost);
                    assert!(grows(&l.bounds, &bounds));
                    (state, bounds, terminal) = (State::LostOnRestore, l.bounds, Some(*id));
                }
                E::StopRequested(s) => {
                    assert!(!state.is_terminal(), "a stop after the terminal event");
                    stops += 1;
                    first_stop.get_or_insert((s.reason.clone(), s.requested_by.clone()));
                }
                E::InputClosed(_) => {
                    assert!(!input_closed, "input closed twice");
                    input_closed = true;
                }
                E::TerminalResized(r) => {
                    assert_eq!(state, State::Running, "a terminal sized while not running");
                    assert!(
                        r.rows > 0 && r.cols > 0,
                        "a terminal without rows or columns"
                    );
                }
                E::OutputCheckpoint(c) => {
                    assert!(
                        !state.is_terminal(),
                        "a checkpoint after the terminal event"
                    );
                    assert!(grows(&c.bounds, &bounds));
                    bounds = c.bounds;
                }
                E::LifecyclePublished(p) => {
                    assert_eq!(*id, p.event.derived(derived::PUBLISHED));
                    let ran = p.event == ids.running && pid.is_some();
                    assert!(
                        ran || terminal == Some(p.event),
                        "an unrecorded event published"
                    );
                    assert_eq!(*changed, published.insert(p.event));
                }
                E::CompletionNotified(c) => {
                    assert!(terminal.is_some() && c.command == ids.completion);
                    assert_eq!(*id, ids.completion.derived(derived::NOTIFIED));
                    assert_eq!(*changed, !completion);
                    completion = true;
                }
                E::Scoped(s) => {
                    assert_eq!(*id, ids.running.derived(derived::SCOPED));
                    match &scope {
                        Some(first) => assert!(first == s && !changed, "a second scope"),
                        None => assert!(!state.is_terminal(), "a scope after the terminal event"),
                    }
                    scope.get_or_insert_with(|| s.clone());
                }
                E::TreeReleased(r) => {
                    assert_eq!(*id, ids.terminal.derived(derived::RELEASED));
                    assert!(scope.is_some(), "a release without a scope");
                    if let Some(first) = &released {
                        assert!(*first == r.proof && !changed, "a second release");
                    }
                    released.get_or_insert_with(|| r.proof.clone());
                }
                E::OutputRetired(r) => {
                    assert_eq!(*id, ids.terminal.derived(derived::RETIRED));
                    // Verified: terminal, and released, never ran, or a group leader reaped.
                    let by_group = scope
                        .as_ref()
                        .is_none_or(|s: &Scoped| s.mechanism == TreeMechanism::Group);
                    let reaped = terminal == Some(ids.terminal)
                        && m.terminal.as_ref().is_some_and(|t| {
                            matches!(t.exit, ExitStatus::Code(_) | ExitStatus::Signal(_))
                        });
                    let verified = state.is_terminal()
                        && (released.is_some()
                            || pid.is_none()
                            || (state != State::LostOnRestore && by_group && reaped));
                    assert!(verified, "output retired of an unverified exit");
                    let this = (r.reason.clone(), r.at_unix_ms);
                    if let Some(first) = &retired {
                        assert!(*first == this && !changed, "a second retirement");
                    }
                    retired.get_or_insert(this);
                }
                E::OutputGap(g) => {
                    let g = g.gap;
                    assert!(!state.is_terminal(), "a gap after the terminal event");
                    assert!(g.from < g.to && g.reason != crate::spool::LossReason::Retention);
                    assert!(g.from >= last_gap_end, "gaps out of order");
                    last_gap_end = g.to;
                    lost += g.to - g.from;
                }
                E::GateChanged(_) | E::AdmissionLimitSet(_) => {
                    panic!("a root-level event counted against a process")
                }
                E::HumanInput(i) => {
                    assert!(
                        !state.is_terminal(),
                        "a human-input mark after the terminal event"
                    );
                    assert_ne!(i.waiting, awaiting.is_some(), "a mark that changes nothing");
                    awaiting = i.waiting.then_some(i.at_unix_ms);
                }
                E::DeadlineFired(d) => {
                    assert!(!state.is_terminal(), "a deadline after the terminal event");
                    assert!(fired.is_none(), "a second deadline");
                    let configured = match d.deadline {
                        crate::lifecycle::event::Deadline::Wall => limits.wall_clock_ms,
                        crate::lifecycle::event::Deadline::Idle => limits.idle_ms,
                    };
                    assert_eq!(configured, Some(d.limit_ms), "a limit not configured");
                    fired = Some(d.clone());
                }
                E::DeadlineFailed(f) => {
                    assert!(
                        !state.is_terminal(),
                        "a deadline failure after the terminal event"
                    );
                    assert_eq!(fired.as_ref().map(|d| d.deadline), Some(f.deadline));
                    failures += 1;
                    assert!(failures <= crate::limits::DEADLINE_FAILURES_MAX);
                }
            }
        }
        assert_eq!(m.awaiting_input, awaiting);
        assert_eq!(m.deadline, fired);
        assert_eq!(m.deadline_failures.len(), failures);
        assert_eq!(m.state, state, "{}", m.handle);
        assert_eq!(m.bounds, bounds);
        assert_eq!((m.pid, m.running_unix_ms), (pid, running_ms));
        assert_eq!(m.witness.is_some(), pid.is_some());
        assert_eq!((m.stop_requests, &m.first_stop), (stops, &first_stop));
        assert_eq!(m.input_closed, input_closed);
        assert_eq!(m.terminal.as_ref().map(|t| t.event_id), terminal);
        assert_eq!(
            m.terminal.as_ref().map(|t| t.state),
            terminal.map(|_| state)
        );
        assert_eq!(m.published, published);
        assert_eq!(m.completion_notified, completion);
        assert_eq!(m.scope, scope);
        assert_eq!(m.released, released);
        assert_eq!(
            m.retired.as_ref().map(|r| (r.reason.clone(), r.at_unix_ms)),
            retired
        );
        // Gaps: ordered, apart or joined, every lost cursor kept, at most the bound.
        assert!(m.gaps.len() <= crate::limits::GAPS_PER_PROCESS_MAX);
        assert!(m.gaps.windows(2).all(|w| w[0].to <= w[1].from));
        assert_eq!(m.gaps.iter().map(|g| g.to - g.from).sum::<u64>(), lost);
    }
}

// ------------------------------------------------------------------------------------------------
// snapshot_decode

/// The snapshot decoder (`lifecycle::snapshot`) over arbitrary bytes, twice: the input as it is,
/// and the input behind a header rebuilt to vouch for it (its length and payload checksum fixed
/// up, its seq kept when in range), so that the fuzzer reaches the frame decoders and the store's
/// checks behind the checksums; the rebuilt header keeps an input's older version (1 to 3),
/// so that every version's frames are reached. The decoder by hand agrees with the reference decoder
/// (bincode's derived one), value for value and error for error. Never a panic; an accepted
/// snapshot of the current version re-encodes to exactly its bytes (the format is canonical), an
/// older one to a current one that decodes to the same values, and its store finds every
/// manifest by its handle.
pub fn snapshot_decode(data: &[u8]) {
    use crate::lifecycle::snapshot::{SNAPSHOT_HEADER_BYTES, SnapshotHeader};
    check_snapshot(data);
    if let Some(payload) = data.get(SNAPSHOT_HEADER_BYTES..) {
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&data[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let mut journal_id = [0u8; 16];
        journal_id.copy_from_slice(&data[16..32]);
        let header = SnapshotHeader {
            journal_id,
            seq: word(32).clamp(1, SEQ_MAX),
            payload_bytes: payload.len() as u64,
            created_unix_ms: word(48),
            payload_crc: format::masked_crc(payload),
        };
        let mut fixed = header.encode().to_vec();
        if matches!(data[8..10], [1..=3, 0]) {
            fixed[8..10].copy_from_slice(&data[8..10]);
            let crc = format::masked_crc(&fixed[..60]);
            fixed[60..64].copy_from_slice(&crc.to_le_bytes());
        }
        fixed.extend_from_slice(payload);
        check_snapshot(&fixed);
    }
}

fn check_snapshot(bytes: &[u8]) {
    use crate::lifecycle::snapshot;
    // The frames read by hand against bincode's derived decoders: the same value, or the same
    // error.
    match (snapshot::decode(bytes), snapshot::decode_reference(bytes)) {
        (Ok(fast), Ok(reference)) => {
            assert_eq!(fast.header, reference.header, "the decoders differ");
            assert!(fast.store == reference.store, "the decoders differ");
            assert_eq!(fast.retained, reference.retained, "the decoders differ");
            assert_eq!(fast.replay, reference.replay, "the decoders differ");
        }
        (Err(fast), Err(reference)) => assert_eq!(fast, reference, "the decoders differ"),
        (fast, reference) => panic!(
            "the decoders differ: by hand {:?}, reference {:?}",
            fast.err(),
            reference.err()
        ),
    }
    match snapshot::decode(bytes) {
        Ok(s) => {
            let again = snapshot::encode(
                s.header.journal_id,
                s.header.seq,
                s.header.created_unix_ms,
                &s.store,
                &s.retained,
                &s.replay,
            );
            if bytes[8..10] == snapshot::SNAPSHOT_VERSION.to_le_bytes() {
                assert_eq!(
                    again.as_deref().ok(),
                    Some(bytes),
                    "a decoded snapshot does not re-encode to its bytes"
                );
            } else {
                let back = again.map(|again| snapshot::decode(&again));
                let same = matches!(&back, Ok(Ok(b))
                    if b.store == s.store && b.retained == s.retained && b.replay == s.replay);
                assert!(same, "an older snapshot re-encoded reads differently");
            }
            for m in s.store.iter() {
                assert_eq!(
                    s.store.get(&m.handle),
                    Some(m),
                    "a manifest not found by handle"
                );
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// A real snapshot of the first `events` events of the lifecycle workload (`lifecycle::workload`),
/// with every ID the journal would retain: the fuzz target's seeds, and the proptest's start.
pub fn workload_snapshot(events: u64) -> Vec<u8> {
    use crate::lifecycle::snapshot::{CANDIDATES, RetainedStep, candidate_ids};
    use crate::lifecycle::{ManifestStore, ReplayReport, snapshot, workload};
    let mut store = ManifestStore::new();
    let mut written = std::collections::HashMap::new();
    for n in 0..events {
        let (id, event) = workload::event(n);
        let _ = store.apply(id, &event);
        written.insert(id, (n + 1, event.kind().get()));
    }
    // As a snapshot's persist finds them: every candidate the journal holds.
    let retained: Vec<RetainedStep> = candidate_ids(&store)
        .iter()
        .enumerate()
        .filter_map(|(i, id)| {
            let (seq, kind) = written.get(id)?;
            Some(RetainedStep {
                manifest: (i / CANDIDATES) as u32,
                which: (i % CANDIDATES) as u8,
                seq: *seq,
                kind: *kind,
            })
        })
        .collect();
    let replay = ReplayReport {
        lifecycle_events: events,
        ..ReplayReport::default()
    };
    snapshot::encode(
        FUZZ_JOURNAL_ID,
        events.max(1),
        1_700_000_000_000,
        &store,
        &retained,
        &replay,
    )
    .unwrap_or_default()
}
