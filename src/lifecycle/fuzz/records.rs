//! The `replay` target's input decoder ([`replay_records`]): records, mostly real lifecycle
//! events, as a pure function of the input bytes. Each byte keeps its meaning: the bytes are read
//! front to back, each event's fields in the order its arm reads them, so that a committed input
//! keeps describing the same records.

use super::Input;
use crate::codec;
use crate::journal::EventId;
use crate::lifecycle::LifecycleEvent;
use crate::lifecycle::State;
use crate::lifecycle::event::*;

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

/// The most records one [`super::replay`] input describes, so that one run stays short.
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
    /// has its own arm in one of the functions below), its fields from `x` and `input`.
    fn event(&mut self, k: u8, h: u8, x: u8, input: &mut Input<'_>) -> LifecycleEvent {
        match k % 20 {
            0 => registered(h, x, input),
            18 => registered_v2(h, x, input),
            k @ 1..=6 => self.step(k, h, x, input),
            k @ (7 | 8 | 12) => follow_up(k, h, x),
            k @ (9 | 10) => tree_event(k, h, x),
            k @ (13 | 19) => root_event(k, x),
            k @ 14..=17 => attention(k, h, x),
            _ => self.gap(h, x),
        }
    }

    /// The steps of a process and what it is told (`k`: 1 to 6).
    fn step(&mut self, k: u8, h: u8, x: u8, input: &mut Input<'_>) -> LifecycleEvent {
        let handle = replay_handle(h);
        let at_unix_ms = u64::from(x);
        match k {
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
                exit: exit_status(x >> 2),
                bounds: self.bounds(h, input.u8()),
                capture: match (x >> 4) % 3 {
                    0 => CaptureStatus::Complete,
                    1 => CaptureStatus::Incomplete(text(x)),
                    _ => CaptureStatus::Failed(text(x)),
                },
                reason: text(x),
                at_unix_ms,
            }),
            _ => LifecycleEvent::LostOnRestore(LostOnRestore {
                handle,
                bounds: self.bounds(h, x),
                at_unix_ms,
            }),
        }
    }

    /// An output gap of handle `h`, most often after the last one the generator chose.
    fn gap(&mut self, h: u8, x: u8) -> LifecycleEvent {
        let handle = replay_handle(h);
        let at_unix_ms = u64::from(x);
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

fn text(n: u8) -> String {
    "é-x\u{1b}"
        .chars()
        .cycle()
        .take(usize::from(n % 6))
        .collect()
}

fn exit_status(v: u8) -> ExitStatus {
    match v % 3 {
        0 => ExitStatus::Code(i32::from(v) - 100),
        1 => ExitStatus::Signal(i32::from(v % 32)),
        _ => ExitStatus::Unknown,
    }
}

fn registered(h: u8, x: u8, input: &mut Input<'_>) -> LifecycleEvent {
    let handle = replay_handle(h);
    let mut ids = replay_ids(h);
    let at_unix_ms = u64::from(x);
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

fn registered_v2(h: u8, x: u8, input: &mut Input<'_>) -> LifecycleEvent {
    let handle = replay_handle(h);
    let ids = replay_ids(h);
    let at_unix_ms = u64::from(x);
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
                base: [EnvBase::Inherited, EnvBase::Explicit, EnvBase::Client][usize::from(x % 3)],
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

/// Records about a step (`k`: 7, 8 or 12).
fn follow_up(k: u8, h: u8, x: u8) -> LifecycleEvent {
    let handle = replay_handle(h);
    let ids = replay_ids(h);
    match k {
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
        _ => LifecycleEvent::OutputRetired(OutputRetired {
            handle,
            // Two reasons and two times: a repeat of the same retirement, or another one.
            reason: text(x & 1),
            at_unix_ms: u64::from(x >> 7),
        }),
    }
}

/// The scope of a process's tree and its release (`k`: 9 or 10).
fn tree_event(k: u8, h: u8, x: u8) -> LifecycleEvent {
    let handle = replay_handle(h);
    match k {
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
        _ => LifecycleEvent::TreeReleased(TreeReleased {
            handle,
            proof: match x % 3 {
                0 => ExitProof::Receipt {
                    status: exit_status(x >> 2),
                    reaped: u64::from(x >> 6),
                },
                1 => ExitProof::CgroupEmpty,
                _ => ExitProof::BootChanged,
            },
            at_unix_ms: 0,
        }),
    }
}

/// The root-level settings (`k`: 13 or 19).
fn root_event(k: u8, x: u8) -> LifecycleEvent {
    let at_unix_ms = u64::from(x);
    match k {
        13 => LifecycleEvent::GateChanged(GateChanged {
            paused: x & 1 == 1,
            requested_by: text(x >> 1),
            reason: text(x >> 3),
            at_unix_ms,
        }),
        _ => LifecycleEvent::AdmissionLimitSet(AdmissionLimitSet {
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
    }
}

/// What calls for attention while a process runs (`k`: 14 to 17).
fn attention(k: u8, h: u8, x: u8) -> LifecycleEvent {
    let handle = replay_handle(h);
    let at_unix_ms = u64::from(x);
    match k {
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
        _ => LifecycleEvent::TerminalResized(crate::lifecycle::event::TerminalResized {
            handle,
            // A size of 0 now and then, which is refused.
            rows: u16::from(x & 7),
            cols: u16::from(x >> 3),
            at_unix_ms,
        }),
    }
}

/// Decodes a [`super::replay`] input into records: four bytes a record (`sel`, handle, ID
/// choice, a field byte), a few more for some. Three records in four are real lifecycle events of
/// every kind, encoded by the real codec, for one of four handles; the rest are the same events
/// with a mutated payload, garbage under a lifecycle kind, records of other kinds, and records of
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
