//! A deterministic lifecycle workload for tests, fuzz targets and benches: the `n`-th event (with
//! its event ID) of a stream of processes that overlap [`LANES`] at a time, each going through
//! [`PHASES`] events that touch every manifest field and every kind of event ID the supervisor
//! uses (reserved step IDs, IDs derived from them for follow-ups, fresh IDs).
//!
//! Pure: the same `n` always gives the same event, so a test can rebuild what a killed child
//! appended from how many records the journal holds. Every event is valid after the ones before
//! it: appending events `0..n` in order through a `Lifecycle` writes exactly `n` records.

use super::event::*;
use super::state::State;
use crate::journal::EventId;
use crate::spool::{Gap, LossReason};

/// Processes in flight at a time.
pub const LANES: u64 = 4;
/// Events of one process.
pub const PHASES: u64 = 12;

/// An ID of process `p`: `k` 0 is its handle, 1-4 its allocated step IDs, 5 its registration.
/// Laid out as a UUIDv7 is (so that `EventId::derived`, which rewrites the version nibble and the
/// variant bits, stays one-to-one, as it is on real v7 IDs): `p` in the 48 bits of the timestamp
/// (IDs sort by process, as v7 IDs sort by time), version 7 with `k` in the next nibble, the RFC
/// variant.
fn id(p: u64, k: u8) -> EventId {
    EventId(uuid::Uuid::from_u128(
        (u128::from(p) << 80) | (u128::from(0x70 | k) << 72) | (0x80 << 56),
    ))
}

/// A fresh ID, as the supervisor takes for a checkpoint: the same layout with 15 in `k`'s place,
/// which no process ID uses.
fn fresh(n: u64) -> EventId {
    EventId(uuid::Uuid::from_u128(
        (u128::from(n) << 80) | (0x7f << 72) | (0x80 << 56),
    ))
}

/// The handle of process `p`.
pub fn handle(p: u64) -> Handle {
    Handle(id(p, 0))
}

/// The IDs process `p`'s registration allocates.
pub fn ids(p: u64) -> LifecycleIds {
    LifecycleIds {
        running: id(p, 1),
        terminal: id(p, 2),
        lost: id(p, 3),
        completion: id(p, 4),
    }
}

/// The event ID of process `p`'s registration.
pub fn registration_id(p: u64) -> EventId {
    id(p, 5)
}

/// Which process the `n`-th event belongs to, and its phase.
pub fn place(n: u64) -> (u64, u64) {
    let block = n / (LANES * PHASES);
    let r = n % (LANES * PHASES);
    (block * LANES + r % LANES, r / LANES)
}

/// Whether process `p` ends lost on restore rather than with a terminal event.
fn is_lost(p: u64) -> bool {
    p % 11 == 3
}

fn bounds(p: u64, k: u64) -> CursorBounds {
    CursorBounds {
        retained_from: k * 100,
        total_bytes: k * 1000 + p % 97,
    }
}

/// Process `p`'s registration: of kind 0x0101 for even `p`; of kind 0x010D (a withheld and a
/// persisted override, a policy) for odd `p`, every second one a restart of the process before it.
fn registration(p: u64, at: u64) -> LifecycleEvent {
    let (h, a) = (handle(p), ids(p));
    let program = "/usr/bin/make".to_owned();
    let args = vec!["-j8".into(), format!("target-{}", p % 13)];
    let cwd = format!("/srv/build/{}", p % 7);
    let labels: std::collections::BTreeMap<String, String> = [
        ("job".to_owned(), format!("j{p}")),
        ("team".to_owned(), "infra".to_owned()),
    ]
    .into();
    let limits = Limits {
        wall_clock_ms: p.is_multiple_of(3).then_some(60_000),
        idle_ms: (p % 4 == 1).then_some(30_000),
        output_retention_bytes: Some(64 << 20),
    };
    if p.is_multiple_of(2) {
        return LifecycleEvent::Registered(Registered {
            handle: h,
            ids: a,
            command: CommandSpec {
                program,
                args,
                cwd,
                env_overrides: vec![("CC".into(), "clang".into())],
                labels,
                limits,
                owner: "ci".into(),
            },
            at_unix_ms: at,
        });
    }
    LifecycleEvent::RegisteredV2(RegisteredV2 {
        handle: h,
        ids: a,
        command: Box::new(CommandSpecV2 {
            program,
            args,
            cwd,
            env_overrides: vec![
                EnvVar {
                    name: "CC".into(),
                    value: Some("clang".into()),
                },
                EnvVar {
                    name: "TOKEN".into(),
                    value: None,
                },
            ],
            labels,
            limits,
            owner: "ci".into(),
            env_policy: EnvPolicy {
                base: EnvBase::Client,
                removed: vec!["GIT_DIR".into()],
                overlay: EnvOverlay::Off,
            },
        }),
        restart_of: (p % 4 == 3).then(|| handle(p - 1)),
        at_unix_ms: at,
    })
}

/// Whether `event` is appended under a fresh ID, which no persisted record names (so that
/// nothing retries it across a restart, and compaction forgets it), rather than under one its
/// registration allocated or one derived from those. Every kind is named, so that a new one is
/// decided here.
pub fn under_a_fresh_id(event: &LifecycleEvent) -> bool {
    match event {
        LifecycleEvent::Registered(_)
        | LifecycleEvent::RegisteredV2(_)
        | LifecycleEvent::Running(_)
        | LifecycleEvent::Terminal(_)
        | LifecycleEvent::LostOnRestore(_)
        | LifecycleEvent::LifecyclePublished(_)
        | LifecycleEvent::CompletionNotified(_)
        | LifecycleEvent::Scoped(_)
        | LifecycleEvent::TreeReleased(_)
        | LifecycleEvent::OutputRetired(_) => false,
        LifecycleEvent::OutputCheckpoint(_)
        | LifecycleEvent::StopRequested(_)
        | LifecycleEvent::InputClosed(_)
        | LifecycleEvent::OutputGap(_)
        | LifecycleEvent::GateChanged(_)
        | LifecycleEvent::AdmissionLimitSet(_)
        | LifecycleEvent::HumanInput(_)
        | LifecycleEvent::DeadlineFired(_)
        | LifecycleEvent::DeadlineFailed(_)
        | LifecycleEvent::TerminalResized(_) => true,
    }
}

/// The `n`-th event of the workload and the ID it is appended under.
pub fn event(n: u64) -> (EventId, LifecycleEvent) {
    let (p, phase) = place(n);
    let at = 1_700_000_000_000 + n;
    match phase {
        0 => (registration_id(p), registration(p, at)),
        1..=3 => start_event(p, phase, at),
        // What is not a step nor a record about one is appended under a fresh ID.
        4..=7 => (fresh(n), middle_event(p, phase, at)),
        _ => end_event(p, phase, at),
    }
}

/// Process `p`'s tree scoped, the process running, and that published (`phase`: 1 to 3).
fn start_event(p: u64, phase: u64, at: u64) -> (EventId, LifecycleEvent) {
    let h = handle(p);
    let a = ids(p);
    match phase {
        1 => (
            a.running.derived(derived::SCOPED),
            LifecycleEvent::Scoped(Scoped {
                handle: h,
                mechanism: TreeMechanism::Group,
                boot_id: [0x5a; 16],
                workload: ProcessWitness {
                    pid: 1000 + (p % 30_000) as u32,
                    start_time_ticks: 50 + p,
                    pidfs_ino: 0,
                },
                guardian: None,
                cgroup: None,
                receipt: None,
                at_unix_ms: at,
            }),
        ),
        2 => (
            a.running,
            LifecycleEvent::Running(Running {
                handle: h,
                pid: 1000 + (p % 30_000) as u32,
                witness: IdentityWitness {
                    start_time_ticks: 50 + p,
                    boot_id: [0x5a; 16],
                },
                at_unix_ms: at,
            }),
        ),
        _ => (
            a.running.derived(derived::PUBLISHED),
            LifecycleEvent::LifecyclePublished(LifecyclePublished {
                handle: h,
                event: a.running,
            }),
        ),
    }
}

/// What happens to process `p` while it runs (`phase`: 4 to 7): now and then the gate, a wait
/// for input, a deadline, a stop or a gap, else its input closed or an output checkpoint.
fn middle_event(p: u64, phase: u64, at: u64) -> LifecycleEvent {
    let h = handle(p);
    match phase {
        // The pause gate, closed and opened in turn (root-level: it names no process).
        4 if p.is_multiple_of(8) => LifecycleEvent::GateChanged(GateChanged {
            paused: (p / 8).is_multiple_of(2),
            requested_by: "ops".into(),
            reason: format!("window {}", p / 8),
            at_unix_ms: at,
        }),
        5 if p % 4 == 1 => LifecycleEvent::HumanInput(HumanInput {
            handle: h,
            waiting: true,
            by: "agent".into(),
            at_unix_ms: at,
        }),
        7 if p.is_multiple_of(3) => LifecycleEvent::DeadlineFired(DeadlineFired {
            handle: h,
            deadline: Deadline::Wall,
            limit_ms: 60_000,
            clock_from_unix_ms: at - 5 * LANES,
            at_unix_ms: at,
        }),
        5 if p.is_multiple_of(5) => LifecycleEvent::StopRequested(StopRequested {
            handle: h,
            reason: "deadline".into(),
            requested_by: "host".into(),
            at_unix_ms: at,
        }),
        6 if p.is_multiple_of(7) => LifecycleEvent::OutputGap(OutputGap {
            handle: h,
            gap: Gap {
                from: bounds(p, 5).total_bytes,
                to: bounds(p, 5).total_bytes + 10,
                reason: LossReason::DiskFull,
                errno: 28,
            },
            at_unix_ms: at,
        }),
        6 => LifecycleEvent::InputClosed(InputClosed {
            handle: h,
            at_unix_ms: at,
        }),
        _ => LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
            handle: h,
            bounds: bounds(p, phase),
            at_unix_ms: at,
        }),
    }
}

/// Process `p`'s end and what follows it (`phase`: 8 to 11).
fn end_event(p: u64, phase: u64, at: u64) -> (EventId, LifecycleEvent) {
    let h = handle(p);
    let a = ids(p);
    let end = if is_lost(p) { a.lost } else { a.terminal };
    match phase {
        8 if is_lost(p) => (
            a.lost,
            LifecycleEvent::LostOnRestore(LostOnRestore {
                handle: h,
                bounds: bounds(p, 8),
                at_unix_ms: at,
            }),
        ),
        8 => (
            a.terminal,
            LifecycleEvent::Terminal(Terminal {
                handle: h,
                state: if p.is_multiple_of(2) {
                    State::Exited
                } else {
                    State::Killed
                },
                exit: ExitStatus::Code((p % 3) as i32),
                bounds: bounds(p, 8),
                capture: CaptureStatus::Complete,
                reason: format!("exited with status {}", p % 3),
                at_unix_ms: at,
            }),
        ),
        9 => (
            end.derived(derived::PUBLISHED),
            LifecycleEvent::LifecyclePublished(LifecyclePublished {
                handle: h,
                event: end,
            }),
        ),
        10 => (
            a.completion.derived(derived::NOTIFIED),
            LifecycleEvent::CompletionNotified(CompletionNotified {
                handle: h,
                command: a.completion,
            }),
        ),
        _ => (
            a.terminal.derived(derived::RELEASED),
            LifecycleEvent::TreeReleased(TreeReleased {
                handle: h,
                proof: ExitProof::BootChanged,
                at_unix_ms: at,
            }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event of the workload writes a record, so every event ID is distinct: across the
    /// processes whose numbers differ only in high bits too (found by the snapshot bench: an
    /// earlier layout let `EventId::derived` map processes 0 and 4096 to one ID).
    #[test]
    fn every_event_id_is_distinct() {
        let mut seen = std::collections::HashSet::new();
        let per_block = LANES * PHASES;
        let blocks: std::collections::BTreeSet<u64> = [
            0u64,
            4,
            4095,
            4096,
            4100,
            1 << 16,
            (1 << 16) + 4,
            1 << 20,
            1 << 40,
        ]
        .iter()
        .map(|p| p / LANES)
        .collect();
        for block in blocks {
            for n in block * per_block..(block + 1) * per_block {
                let (id, _) = event(n);
                assert!(seen.insert(id), "event {n} reuses {id}");
            }
        }
    }
}
