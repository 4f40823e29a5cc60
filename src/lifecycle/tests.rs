//! Lifecycle tests: the matrix, the bytes of every event kind, the validator's rejections, and
//! replay from a real journal.

use super::event::*;
use super::*;
use crate::journal::{Durability, EventKind};

fn id(n: u8) -> EventId {
    EventId::from_bytes([n; 16])
}

fn ids(base: u8) -> LifecycleIds {
    LifecycleIds {
        running: id(base + 1),
        terminal: id(base + 2),
        lost: id(base + 3),
        completion: id(base + 4),
    }
}

fn handle(n: u8) -> Handle {
    Handle(id(n))
}

fn registered(h: Handle, base: u8) -> LifecycleEvent {
    LifecycleEvent::Registered(Registered {
        handle: h,
        ids: ids(base),
        command: CommandSpec {
            program: "sh".into(),
            args: vec!["-c".into(), "echo hi".into()],
            cwd: "/tmp".into(),
            env_overrides: vec![("K".into(), "V".into())],
            labels: [("job".into(), "build".into())].into(),
            limits: Limits {
                wall_clock_ms: Some(60_000),
                idle_ms: None,
                output_retention_bytes: Some(1 << 20),
            },
            owner: "ci".into(),
        },
        at_unix_ms: 1_700_000_000_000,
    })
}

/// A version 2 registration: one withheld and one persisted override, a client base with
/// `GIT_DIR` removed and an applied overlay, restarting `restart_of`.
fn registered_v2(h: Handle, base: u8, restart_of: Option<Handle>) -> LifecycleEvent {
    LifecycleEvent::RegisteredV2(RegisteredV2 {
        handle: h,
        ids: ids(base),
        command: Box::new(CommandSpecV2 {
            program: "sh".into(),
            args: vec!["-c".into()],
            cwd: "/tmp".into(),
            env_overrides: vec![
                EnvVar {
                    name: "TOKEN".into(),
                    value: None,
                },
                EnvVar {
                    name: "K".into(),
                    value: Some("V".into()),
                },
            ],
            labels: [("job".into(), "b".into())].into(),
            limits: Limits::default(),
            owner: "ci".into(),
            env_policy: EnvPolicy {
                base: EnvBase::Client,
                removed: vec!["GIT_DIR".into()],
                overlay: EnvOverlay::Applied {
                    names: vec!["PATH".into()],
                },
            },
        }),
        restart_of,
        at_unix_ms: 1_700_000_000_000,
    })
}

fn running(h: Handle) -> LifecycleEvent {
    LifecycleEvent::Running(Running {
        handle: h,
        pid: 4242,
        witness: IdentityWitness {
            start_time_ticks: 987_654,
            boot_id: [0xb0; 16],
        },
        at_unix_ms: 1_700_000_000_100,
    })
}

fn terminal(h: Handle, state: State, total: u64) -> LifecycleEvent {
    LifecycleEvent::Terminal(Terminal {
        handle: h,
        state,
        exit: ExitStatus::Code(3),
        bounds: CursorBounds {
            retained_from: 0,
            total_bytes: total,
        },
        capture: CaptureStatus::Complete,
        reason: "exited".into(),
        at_unix_ms: 1_700_000_000_200,
    })
}

fn lost(h: Handle) -> LifecycleEvent {
    LifecycleEvent::LostOnRestore(LostOnRestore {
        handle: h,
        bounds: CursorBounds::default(),
        at_unix_ms: 1_700_000_000_300,
    })
}

/// The matrix exactly as the requirements word it, written out independently of `TRANSITIONS`.
const SEED_MATRIX: &str = "
starting -> running failed terminated killed lost_on_restore
running -> exited failed timed_out interrupted terminated killed lost_on_restore
";

fn seed_allows(from: State, to: State) -> bool {
    SEED_MATRIX.lines().any(|line| {
        let mut parts = line.split(" -> ");
        parts.next() == Some(from.name())
            && parts
                .next()
                .is_some_and(|targets| targets.split(' ').any(|t| t == to.name()))
    })
}

/// Puts a fresh handle into `state` through valid events; returns the store and handle.
fn store_in(state: State) -> (ManifestStore, Handle) {
    let mut store = ManifestStore::new();
    let h = handle(1);
    store.apply(id(100), &registered(h, 10)).unwrap();
    match state {
        State::Starting => {}
        State::Running => {
            store.apply(ids(10).running, &running(h)).unwrap();
        }
        State::LostOnRestore => {
            store.apply(ids(10).lost, &lost(h)).unwrap();
        }
        terminal_state => {
            if State::Starting.can_move_to(terminal_state) {
                store
                    .apply(ids(10).terminal, &terminal(h, terminal_state, 0))
                    .unwrap();
            } else {
                store.apply(ids(10).running, &running(h)).unwrap();
                store
                    .apply(ids(10).terminal, &terminal(h, terminal_state, 0))
                    .unwrap();
            }
        }
    }
    assert_eq!(store.get(&h).unwrap().state, state);
    (store, h)
}

#[test]
fn all_81_state_pairs_match_the_seed_matrix_in_the_table_and_in_the_store() {
    let mut allowed = 0;
    for from in State::ALL {
        for to in State::ALL {
            let expected = seed_allows(from, to);
            assert_eq!(from.can_move_to(to), expected, "{from} -> {to}");
            allowed += usize::from(expected);
            let (mut store, h) = store_in(from);
            let (event_id, event) = match to {
                State::Starting => (id(200), registered(h, 10)),
                State::Running => (ids(10).running, running(h)),
                State::LostOnRestore => (ids(10).lost, lost(h)),
                t => (ids(10).terminal, terminal(h, t, 0)),
            };
            let result = store.apply(event_id, &event);
            assert_eq!(result.is_ok(), expected, "{from} -> {to}: {result:?}");
            if expected {
                assert_eq!(store.get(&h).unwrap().state, to);
            }
        }
    }
    assert_eq!(allowed, 12);
    assert!(
        State::ALL
            .iter()
            .filter(|s| s.is_terminal())
            .all(|s| !State::ALL.iter().any(|t| s.can_move_to(*t)))
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn samples() -> Vec<(u16, LifecycleEvent)> {
    let h = handle(1);
    vec![
        (kinds::REGISTERED, registered(h, 10)),
        (kinds::RUNNING, running(h)),
        (
            kinds::STOP_REQUESTED,
            LifecycleEvent::StopRequested(StopRequested {
                handle: h,
                reason: "user".into(),
                requested_by: "cli".into(),
                at_unix_ms: 5,
            }),
        ),
        (
            kinds::INPUT_CLOSED,
            LifecycleEvent::InputClosed(InputClosed {
                handle: h,
                at_unix_ms: 6,
            }),
        ),
        (
            kinds::OUTPUT_CHECKPOINT,
            LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
                handle: h,
                bounds: CursorBounds {
                    retained_from: 7,
                    total_bytes: 9,
                },
                at_unix_ms: 8,
            }),
        ),
        (kinds::TERMINAL, terminal(h, State::Killed, 9)),
        (kinds::LOST_ON_RESTORE, lost(h)),
        (
            kinds::LIFECYCLE_PUBLISHED,
            LifecycleEvent::LifecyclePublished(LifecyclePublished {
                handle: h,
                event: id(12),
            }),
        ),
        (
            kinds::COMPLETION_NOTIFIED,
            LifecycleEvent::CompletionNotified(CompletionNotified {
                handle: h,
                command: id(14),
            }),
        ),
        (
            kinds::SCOPED,
            LifecycleEvent::Scoped(Scoped {
                handle: h,
                mechanism: TreeMechanism::Cgroup,
                boot_id: [0xb0; 16],
                workload: ProcessWitness {
                    pid: 0x1002,
                    start_time_ticks: 0x30,
                    pidfs_ino: 0x41,
                },
                guardian: Some(ProcessWitness {
                    pid: 0x1001,
                    start_time_ticks: 0x2f,
                    pidfs_ino: 0x40,
                }),
                cgroup: Some("/cg".into()),
                receipt: Some(ReceiptBinding {
                    path: "/r".into(),
                    dev: 3,
                    ino: 4,
                    nonce: [0xcd; 16],
                }),
                at_unix_ms: 15,
            }),
        ),
        (
            kinds::TREE_RELEASED,
            LifecycleEvent::TreeReleased(TreeReleased {
                handle: h,
                proof: ExitProof::Receipt {
                    status: ExitStatus::Signal(9),
                    reaped: 2,
                },
                at_unix_ms: 16,
            }),
        ),
        (
            kinds::OUTPUT_GAP,
            LifecycleEvent::OutputGap(OutputGap {
                handle: h,
                gap: crate::spool::Gap {
                    from: 5,
                    to: 9,
                    reason: crate::spool::LossReason::DiskFull,
                    errno: 28,
                },
                at_unix_ms: 17,
            }),
        ),
        (
            kinds::GATE_CHANGED,
            LifecycleEvent::GateChanged(GateChanged {
                paused: true,
                requested_by: "cli".into(),
                reason: "deploy".into(),
                at_unix_ms: 18,
            }),
        ),
        (
            kinds::HUMAN_INPUT,
            LifecycleEvent::HumanInput(HumanInput {
                handle: h,
                waiting: true,
                by: "agent".into(),
                at_unix_ms: 19,
            }),
        ),
        (
            kinds::DEADLINE_FIRED,
            LifecycleEvent::DeadlineFired(DeadlineFired {
                handle: h,
                deadline: Deadline::Idle,
                limit_ms: 300,
                clock_from_unix_ms: 20,
                at_unix_ms: 21,
            }),
        ),
        (
            kinds::DEADLINE_FAILED,
            LifecycleEvent::DeadlineFailed(DeadlineFailed {
                handle: h,
                deadline: Deadline::Wall,
                error: "EPERM".into(),
                at_unix_ms: 22,
            }),
        ),
        (kinds::REGISTERED_V2, registered_v2(h, 10, Some(handle(2)))),
        (
            kinds::ADMISSION_LIMIT_SET,
            LifecycleEvent::AdmissionLimitSet(AdmissionLimitSet {
                max_concurrent: Some(2),
                requested_by: "cli".into(),
                at_unix_ms: 19,
            }),
        ),
    ]
}

/// The payload bytes of every kind, pinned. A failure here means the on-disk format changed:
/// add a new codec version instead of editing these.
const GOLDEN: &[(u16, &str)] = &[
    (
        kinds::REGISTERED,
        "010101010101010101010101010101010b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e02000000000000007368020000000000000002000000000000002d6307000000000000006563686f20686904000000000000002f746d70010000000000000001000000000000004b010000000000000056010000000000000003000000000000006a6f6205000000000000006275696c640160ea00000000000000010000100000000000020000000000000063690068e5cf8b010000",
    ),
    (
        kinds::RUNNING,
        "010101010101010101010101010101019210000006120f0000000000b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b06468e5cf8b010000",
    ),
    (
        kinds::STOP_REQUESTED,
        "010101010101010101010101010101010400000000000000757365720300000000000000636c690500000000000000",
    ),
    (
        kinds::INPUT_CLOSED,
        "010101010101010101010101010101010600000000000000",
    ),
    (
        kinds::OUTPUT_CHECKPOINT,
        "01010101010101010101010101010101070000000000000009000000000000000800000000000000",
    ),
    (
        kinds::TERMINAL,
        "0101010101010101010101010101010107000000000000000300000000000000000000000900000000000000000000000600000000000000657869746564c868e5cf8b010000",
    ),
    (
        kinds::LOST_ON_RESTORE,
        "01010101010101010101010101010101000000000000000000000000000000002c69e5cf8b010000",
    ),
    (
        kinds::LIFECYCLE_PUBLISHED,
        "010101010101010101010101010101010c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c",
    ),
    (
        kinds::COMPLETION_NOTIFIED,
        "010101010101010101010101010101010e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e",
    ),
    (
        kinds::SCOPED,
        "0101010101010101010101010101010102000000b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0021000003000000000000000410000000000000001011000002f0000000000000040000000000000000103000000000000002f63670102000000000000002f7203000000000000000400000000000000cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd0f00000000000000",
    ),
    (
        kinds::TREE_RELEASED,
        "0101010101010101010101010101010100000000010000000900000002000000000000001000000000000000",
    ),
    (
        kinds::OUTPUT_GAP,
        "010101010101010101010101010101010500000000000000090000000000000001000000\
         1c0000001100000000000000",
    ),
    (
        kinds::GATE_CHANGED,
        "010300000000000000636c6906000000000000006465706c6f791200000000000000",
    ),
    (
        kinds::HUMAN_INPUT,
        "010101010101010101010101010101010105000000000000006167656e741300000000000000",
    ),
    (
        kinds::DEADLINE_FIRED,
        "01010101010101010101010101010101010000002c0100000000000014000000000000001500000000000000",
    ),
    (
        kinds::DEADLINE_FAILED,
        "01010101010101010101010101010101000000000500000000000000455045524d1600000000000000",
    ),
    (
        kinds::REGISTERED_V2,
        "010101010101010101010101010101010b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0c0c0c0c0c0c0c0c0c0c0c0c\
         0c0c0c0c0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0200000000000000\
         7368010000000000000002000000000000002d6304000000000000002f746d70020000000000000005000000\
         00000000544f4b454e0001000000000000004b01010000000000000056010000000000000003000000000000\
         006a6f620100000000000000620000000200000000000000636902000000010000000000000007000000000000\
         004749545f444952010000000100000000000000040000000000000050415448010202020202020202020202\
         02020202020068e5cf8b010000",
    ),
    (
        kinds::ADMISSION_LIMIT_SET,
        "0102000000000000000300000000000000636c691300000000000000",
    ),
];

#[test]
fn every_event_kind_has_pinned_golden_bytes_and_round_trips() {
    let samples = samples();
    assert_eq!(samples.len(), GOLDEN.len());
    for ((kind, event), (golden_kind, golden_hex)) in samples.iter().zip(GOLDEN) {
        assert_eq!(kind, golden_kind);
        assert_eq!(event.kind().get(), *kind);
        let bytes = event.encode().unwrap();
        assert_eq!(hex(&bytes), *golden_hex, "kind {kind:#06x}");
        let back = LifecycleEvent::decode(*kind, crate::codec::CODEC_VERSION, &bytes).unwrap();
        assert_eq!(&back, event);
        // Every strict prefix is a typed error, never a panic.
        for cut in 0..bytes.len() {
            assert!(
                LifecycleEvent::decode(*kind, crate::codec::CODEC_VERSION, &bytes[..cut]).is_err()
            );
        }
    }
}

/// `LifecycleEvent::name` is the JSON form's tag (what `journal dump` prints), and names differ.
#[test]
fn every_event_name_is_its_json_tag() {
    let mut names = std::collections::BTreeSet::new();
    for (_, event) in samples() {
        let json = serde_json::to_value(&event).unwrap();
        // `lifecycle_published` has a field called `event`, which the tag's key then holds.
        if !matches!(event, LifecycleEvent::LifecyclePublished(_)) {
            assert_eq!(json["event"], event.name(), "{json}");
        }
        assert!(names.insert(event.name()), "{} twice", event.name());
    }
}

#[test]
fn the_validator_rejects_what_must_not_change() {
    let h = handle(1);
    let (mut store, _) = store_in(State::Running);
    // Identity and allocated IDs are fixed at registration.
    assert_eq!(
        store.apply(id(201), &registered(h, 50)),
        Err(Rejection::AlreadyRegistered(h))
    );
    // A lifecycle step under an ID other than the one allocated for it.
    assert!(matches!(
        store.apply(id(99), &terminal(h, State::Exited, 0)),
        Err(Rejection::UnexpectedEventId { .. })
    ));
    // Cursor bounds only grow.
    let checkpoint = |retained_from, total_bytes| {
        LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
            handle: h,
            bounds: CursorBounds {
                retained_from,
                total_bytes,
            },
            at_unix_ms: 0,
        })
    };
    store.apply(id(150), &checkpoint(10, 100)).unwrap();
    assert!(matches!(
        store.apply(id(151), &checkpoint(10, 99)),
        Err(Rejection::CursorBackwards { .. })
    ));
    assert!(matches!(
        store.apply(id(152), &checkpoint(9, 100)),
        Err(Rejection::CursorBackwards { .. })
    ));
    assert!(matches!(
        store.apply(id(153), &checkpoint(101, 100)),
        Err(Rejection::CursorBackwards { .. })
    ));
    assert!(matches!(
        store.apply(ids(10).terminal, &terminal(h, State::Exited, 50)),
        Err(Rejection::CursorBackwards { .. })
    ));
    // Completion cannot precede the terminal result.
    let notify =
        |command| LifecycleEvent::CompletionNotified(CompletionNotified { handle: h, command });
    let notified = ids(10).completion.derived(derived::NOTIFIED);
    assert_eq!(
        store.apply(notified, &notify(ids(10).completion)),
        Err(Rejection::CompletionBeforeTerminal)
    );
    let exited = |retained_from| {
        let LifecycleEvent::Terminal(mut t) = terminal(h, State::Exited, 100) else {
            unreachable!()
        };
        t.bounds.retained_from = retained_from;
        LifecycleEvent::Terminal(t)
    };
    assert!(matches!(
        store.apply(ids(10).terminal, &exited(9)),
        Err(Rejection::CursorBackwards { .. })
    ));
    assert_eq!(
        store.apply(ids(10).terminal, &exited(10)),
        Ok(Applied::Changed)
    );
    let result = store.get(&h).unwrap().terminal.clone();
    // The terminal result, and the bounds with it, are frozen.
    assert_eq!(
        store.apply(ids(10).terminal, &terminal(h, State::Killed, 100)),
        Err(Rejection::AlreadyTerminal(State::Exited))
    );
    assert_eq!(
        store.apply(id(154), &checkpoint(10, 200)),
        Err(Rejection::AlreadyTerminal(State::Exited))
    );
    assert_eq!(store.get(&h).unwrap().terminal, result);
    // Publication and completion: the same one twice is a no-op, a different one is refused.
    let publish =
        |event| LifecycleEvent::LifecyclePublished(LifecyclePublished { handle: h, event });
    let published = |event: EventId| event.derived(derived::PUBLISHED);
    assert_eq!(
        store.apply(published(ids(10).terminal), &publish(ids(10).terminal)),
        Ok(Applied::Changed)
    );
    assert_eq!(
        store.apply(published(ids(10).terminal), &publish(ids(10).terminal)),
        Ok(Applied::Unchanged)
    );
    assert_eq!(
        store.apply(published(ids(10).lost), &publish(ids(10).lost)),
        Err(Rejection::NotPublishable(ids(10).lost))
    );
    assert_eq!(
        store.apply(notified, &notify(ids(10).completion)),
        Ok(Applied::Changed)
    );
    assert_eq!(
        store.apply(notified, &notify(ids(10).completion)),
        Ok(Applied::Unchanged)
    );
    assert!(matches!(
        store.apply(id(77).derived(derived::NOTIFIED), &notify(id(77))),
        Err(Rejection::CompletionIdMismatch { .. })
    ));
    assert_eq!(
        store.apply(id(180), &running(handle(9))),
        Err(Rejection::UnknownHandle(handle(9)))
    );
}

fn options() -> JournalOptions {
    JournalOptions {
        durability: Durability::Sync,
        segment_bytes: 8192,
    }
}

#[test]
fn replay_after_reopen_rebuilds_the_same_manifests_and_reports_invalid_events_per_handle() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (handle(1), handle(2));
    let expected = {
        let (mut lc, recovery, replay) = Lifecycle::open(dir.path(), options()).unwrap();
        assert!(recovery.is_clean() && replay.is_clean());
        lc.append(id(100), &registered(a, 10)).unwrap();
        lc.append(id(101), &registered(b, 20)).unwrap();
        lc.append(ids(10).running, &running(a)).unwrap();
        lc.append(ids(20).running, &running(b)).unwrap();
        lc.append(ids(10).terminal, &terminal(a, State::Exited, 10))
            .unwrap();
        // A retry of the same lifecycle step is a no-op, even though the validator would refuse it.
        let retry = lc
            .append(ids(10).terminal, &terminal(a, State::Exited, 10))
            .unwrap();
        assert!(!retry.written);
        // An invalid event is refused before it reaches the journal.
        let last = lc.journal().last_seq();
        assert!(matches!(
            lc.append(id(102), &terminal(a, State::Killed, 10)),
            Err(LifecycleError::Rejected(_))
        ));
        assert_eq!(lc.journal().last_seq(), last);
        // A hand-crafted invalid event written straight to the journal (bypassing the validator).
        let bad = terminal(b, State::Exited, 5);
        lc.journal()
            .append(
                id(103),
                bad.kind(),
                crate::codec::CODEC_VERSION,
                &bad.encode().unwrap(),
            )
            .unwrap();
        // And an undecodable one.
        lc.journal()
            .append(
                id(104),
                EventKind::new(kinds::RUNNING).unwrap(),
                1,
                b"\x01\x02",
            )
            .unwrap();
        lc.store().clone()
    };
    let (lc, recovery, replay) = Lifecycle::open(dir.path(), options()).unwrap();
    assert!(recovery.is_clean());
    assert_eq!(replay.rejected.len(), 1, "{replay:?}");
    assert_eq!(
        replay.rejected[0].handle.as_deref(),
        Some(b.to_string().as_str())
    );
    assert_eq!(replay.undecodable.len(), 1);
    assert_eq!(lc.store(), &expected);
    assert_eq!(lc.manifest(&a).unwrap().state, State::Exited);
    assert_eq!(lc.manifest(&b).unwrap().state, State::Running);
}

/// A registration refused part-way through its IDs reserves none of them: the store is unchanged,
/// the rejection is the one `check` gives, and the IDs it checked before the clash stay free for
/// a later registration.
#[test]
fn a_refused_registration_leaves_no_reservation_behind() {
    let mut store = ManifestStore::new();
    store
        .apply(id(100), &registered(handle(1), 10))
        .expect("first registration");
    let before = store.clone();
    // Handle 2 allocates its running and terminal IDs afresh, but its lost ID is handle 1's.
    let mut clash = registered(handle(2), 20);
    if let LifecycleEvent::Registered(r) = &mut clash {
        r.ids.lost = ids(10).lost;
    }
    let checked = store.check(id(101), &clash);
    assert_eq!(
        checked,
        Err(Rejection::IdReserved {
            id: ids(10).lost,
            handle: handle(1)
        })
    );
    assert_eq!(store.apply(id(101), &clash), checked);
    assert_eq!(store, before);
    // Registration ID and IDs reserved before the clash are free again.
    store
        .apply(id(101), &registered(handle(3), 20))
        .expect("the IDs the refused registration had taken are free");
    // A repeated ID within one registration is refused the same way on both paths.
    let mut twice = registered(handle(4), 40);
    if let LifecycleEvent::Registered(r) = &mut twice {
        r.ids.completion = r.ids.running;
    }
    let before = store.clone();
    let checked = store.check(id(102), &twice);
    assert_eq!(checked, Err(Rejection::DuplicateAllocatedId));
    assert_eq!(store.apply(id(102), &twice), checked);
    assert_eq!(store, before);
}

/// Reservations survive the reservation index growing: after many registrations every allocated
/// ID (and each registration's own ID) is still refused to any other event, naming its handle,
/// and fresh IDs are not reserved.
#[test]
fn every_reservation_is_found_after_the_index_grows() {
    let wide = |h: u16, k: u8| {
        let mut b = [k; 16];
        b[..2].copy_from_slice(&h.to_le_bytes());
        EventId::from_bytes(b)
    };
    let mut store = ManifestStore::new();
    for h in 0..300u16 {
        let mut e = registered(Handle(wide(h, 0)), 0);
        if let LifecycleEvent::Registered(r) = &mut e {
            r.ids = LifecycleIds {
                running: wide(h, 1),
                terminal: wide(h, 2),
                lost: wide(h, 3),
                completion: wide(h, 4),
            };
        }
        store.apply(wide(h, 5), &e).expect("registration");
    }
    let checkpoint = |h: u16| {
        LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
            handle: Handle(wide(h, 0)),
            bounds: CursorBounds::default(),
            at_unix_ms: 0,
        })
    };
    for h in 0..300u16 {
        for k in 1..=5 {
            assert_eq!(
                store.check(wide(h, k), &checkpoint((h + 1) % 300)),
                Err(Rejection::IdReserved {
                    id: wide(h, k),
                    handle: Handle(wide(h, 0))
                })
            );
        }
        assert_eq!(
            store.check(wide(h, 9), &checkpoint(h)),
            Ok(Applied::Changed)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The lifecycle rules of journal-format.md ("Validity"), one test each.

fn publish(h: Handle, event: EventId) -> LifecycleEvent {
    LifecycleEvent::LifecyclePublished(LifecyclePublished { handle: h, event })
}

fn notify(h: Handle, command: EventId) -> LifecycleEvent {
    LifecycleEvent::CompletionNotified(CompletionNotified { handle: h, command })
}

fn scoped(h: Handle) -> LifecycleEvent {
    LifecycleEvent::Scoped(Scoped {
        handle: h,
        mechanism: TreeMechanism::Group,
        boot_id: [0xb0; 16],
        workload: ProcessWitness {
            pid: 4242,
            start_time_ticks: 987_654,
            pidfs_ino: 0,
        },
        guardian: None,
        cgroup: None,
        receipt: None,
        at_unix_ms: 1_700_000_000_050,
    })
}

fn released(h: Handle) -> LifecycleEvent {
    LifecycleEvent::TreeReleased(TreeReleased {
        handle: h,
        proof: ExitProof::CgroupEmpty,
        at_unix_ms: 1_700_000_000_400,
    })
}

fn stop(h: Handle) -> LifecycleEvent {
    LifecycleEvent::StopRequested(StopRequested {
        handle: h,
        reason: "user".into(),
        requested_by: "cli".into(),
        at_unix_ms: 5,
    })
}

fn checkpoint(h: Handle, retained_from: u64, total_bytes: u64) -> LifecycleEvent {
    LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
        handle: h,
        bounds: CursorBounds {
            retained_from,
            total_bytes,
        },
        at_unix_ms: 7,
    })
}

fn gap(h: Handle, from: u64, to: u64) -> LifecycleEvent {
    LifecycleEvent::OutputGap(OutputGap {
        handle: h,
        gap: crate::spool::Gap {
            from,
            to,
            reason: crate::spool::LossReason::DiskFull,
            errno: 28,
        },
        at_unix_ms: 8,
    })
}

/// Every terminal state, each reached by valid events (some from starting, some through running).
fn terminal_states() -> impl Iterator<Item = State> {
    State::ALL.into_iter().filter(|s| s.is_terminal())
}

/// Rule P: a publication names `ids.running` once `Running` was accepted, or the ID of the
/// terminal record that was accepted, and nothing else: not the registration, not the other
/// terminal ID, not `ids.completion`, not another handle's event, not a fresh ID.
#[test]
fn a_publication_names_only_the_running_event_or_the_recorded_terminal_one() {
    let published = |event: EventId| event.derived(derived::PUBLISHED);
    let h = handle(1);
    let refused = |store: &ManifestStore, event: EventId| {
        assert_eq!(
            store.check(published(event), &publish(h, event)),
            Err(Rejection::NotPublishable(event)),
            "{event} was publishable in {:?}",
            store.get(&h).map(|m| m.state)
        );
    };
    // Starting: nothing is publishable, the registration's own ID included.
    let (store, _) = store_in(State::Starting);
    for event in [id(100), ids(10).running, ids(10).terminal, ids(10).lost] {
        refused(&store, event);
    }
    // Running: only the running event.
    let (mut store, _) = store_in(State::Running);
    for event in [ids(10).terminal, ids(10).lost, ids(10).completion, id(100)] {
        refused(&store, event);
    }
    let ran = ids(10).running;
    assert_eq!(
        store.apply(published(ran), &publish(h, ran)),
        Ok(Applied::Changed)
    );
    // Terminal through `Terminal`: the terminal ID, not the lost one; running still is.
    store
        .apply(ids(10).terminal, &terminal(h, State::Exited, 0))
        .unwrap();
    refused(&store, ids(10).lost);
    refused(&store, ids(10).completion);
    assert_eq!(
        store.apply(published(ran), &publish(h, ran)),
        Ok(Applied::Unchanged)
    );
    let t = ids(10).terminal;
    assert_eq!(
        store.apply(published(t), &publish(h, t)),
        Ok(Applied::Changed)
    );
    // Another handle's events are not this handle's, whatever its state.
    store.apply(id(101), &registered(handle(2), 20)).unwrap();
    store.apply(ids(20).running, &running(handle(2))).unwrap();
    refused(&store, ids(20).running);
    // Terminal through `LostOnRestore`: the lost ID, not the terminal one.
    let (store, _) = store_in(State::LostOnRestore);
    refused(&store, ids(10).terminal);
    assert_eq!(
        store.check(published(ids(10).lost), &publish(h, ids(10).lost)),
        Ok(Applied::Changed)
    );
    // Failed from starting never ran: its running ID is not publishable.
    let (store, _) = store_in(State::Failed);
    refused(&store, ids(10).running);
    let t = ids(10).terminal;
    assert_eq!(
        store.check(published(t), &publish(h, t)),
        Ok(Applied::Changed)
    );
}

/// Rule D: publication, completion, scope and release carry the ID derived from their step's ID
/// and no other, in the store's check, in its apply and in replay from a real journal; under the
/// derived ID the same records are accepted.
#[test]
fn derived_record_ids_are_checked() {
    let h = handle(1);
    let cases = [
        (
            "lifecycle_published",
            publish(h, ids(10).terminal),
            ids(10).terminal.derived(derived::PUBLISHED),
        ),
        (
            "completion_notified",
            notify(h, ids(10).completion),
            ids(10).completion.derived(derived::NOTIFIED),
        ),
        (
            "tree_released",
            released(h),
            ids(10).terminal.derived(derived::RELEASED),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut store = ManifestStore::new();
    {
        let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
        fn both(store: &mut ManifestStore, lc: &mut Lifecycle, id: EventId, e: &LifecycleEvent) {
            store.apply(id, e).unwrap();
            lc.append(id, e).unwrap();
        }
        both(&mut store, &mut lc, id(100), &registered(h, 10));
        both(&mut store, &mut lc, ids(10).running, &running(h));
        let scope_id = ids(10).running.derived(derived::SCOPED);
        for wrong in [id(60), ids(10).running.derived(derived::PUBLISHED)] {
            assert_eq!(
                store.check(wrong, &scoped(h)),
                Err(Rejection::UnexpectedDerivedId {
                    event: "scoped",
                    found: wrong,
                    expected: scope_id
                })
            );
        }
        both(&mut store, &mut lc, scope_id, &scoped(h));
        both(
            &mut store,
            &mut lc,
            ids(10).terminal,
            &terminal(h, State::Exited, 0),
        );
        for (name, event, right) in &cases {
            // Fresh, reserved-for-nothing IDs, and the ID derived for another purpose.
            for wrong in [id(61), ids(10).terminal.derived(derived::SCOPED)] {
                let expected = Err(Rejection::UnexpectedDerivedId {
                    event: name,
                    found: wrong,
                    expected: *right,
                });
                assert_eq!(store.check(wrong, event), expected, "{name}");
                let before = store.clone();
                assert_eq!(store.apply(wrong, event), expected, "{name}");
                assert_eq!(store, before);
                assert!(matches!(
                    lc.append(wrong, event),
                    Err(LifecycleError::Rejected(
                        Rejection::UnexpectedDerivedId { .. }
                    ))
                ));
            }
            assert_eq!(store.check(*right, event), Ok(Applied::Changed), "{name}");
        }
        // The same records written past the validator are rejected by replay, each for its ID.
        for (n, (_, event, _)) in (62..).zip(&cases) {
            let payload = event.encode().unwrap();
            let kind = event.kind();
            let written = lc
                .journal()
                .append(id(n), kind, crate::codec::CODEC_VERSION, &payload);
            assert!(written.unwrap().written);
        }
    }
    let (lc, recovery, replay) = Lifecycle::open(dir.path(), options()).unwrap();
    assert!(recovery.is_clean(), "{recovery:?}");
    assert_eq!(replay.rejected.len(), cases.len(), "{replay:?}");
    for issue in &replay.rejected {
        assert!(issue.error.contains("its ID is derived"), "{replay:?}");
    }
    let m = lc.manifest(&h).unwrap();
    assert!(m.published.is_empty() && !m.completion_notified && m.released.is_none());
    assert!(m.scope.is_some());
}

/// Rule Q: a stop request is accepted (and counted) before the terminal event, in starting and
/// running, and refused after it in every terminal state.
#[test]
fn a_stop_request_after_the_terminal_event_is_refused() {
    for state in [State::Starting, State::Running] {
        let (mut store, h) = store_in(state);
        assert_eq!(store.apply(id(150), &stop(h)), Ok(Applied::Changed));
        assert_eq!(store.apply(id(151), &stop(h)), Ok(Applied::Changed));
        let m = store.get(&h).unwrap();
        assert_eq!(m.stop_requests, 2);
        assert_eq!(m.first_stop, Some(("user".into(), "cli".into())));
    }
    for state in terminal_states() {
        let (mut store, h) = store_in(state);
        let before = store.clone();
        assert_eq!(
            store.apply(id(150), &stop(h)),
            Err(Rejection::AlreadyTerminal(state))
        );
        assert_eq!(store, before);
    }
}

/// Rule I: input is closed once per handle, in any state, terminal included (closing stdin and
/// recording it are two steps; the process may end between them); a second one is refused.
#[test]
fn input_is_closed_once_in_any_state_terminal_included() {
    let closed = |h| {
        LifecycleEvent::InputClosed(InputClosed {
            handle: h,
            at_unix_ms: 6,
        })
    };
    for state in State::ALL {
        let (mut store, h) = store_in(state);
        assert_eq!(
            store.apply(id(150), &closed(h)),
            Ok(Applied::Changed),
            "{state}"
        );
        assert!(store.get(&h).unwrap().input_closed);
        assert_eq!(
            store.apply(id(151), &closed(h)),
            Err(Rejection::InputAlreadyClosed),
            "{state}"
        );
    }
}

/// Rules C and G: nothing is recorded about output after the terminal event, in every terminal
/// state: no checkpoint, not even one with the terminal bounds, and no gap.
#[test]
fn no_checkpoint_or_gap_is_accepted_after_the_terminal_event() {
    for state in [State::Starting, State::Running] {
        let (mut store, h) = store_in(state);
        assert_eq!(store.apply(id(150), &gap(h, 0, 4)), Ok(Applied::Changed));
        assert_eq!(
            store.apply(id(151), &checkpoint(h, 0, 9)),
            Ok(Applied::Changed)
        );
        // The same bounds again are accepted before the terminal event.
        assert_eq!(
            store.apply(id(152), &checkpoint(h, 0, 9)),
            Ok(Applied::Changed)
        );
    }
    for state in terminal_states() {
        let (mut store, h) = store_in(state);
        let before = store.clone();
        let bounds = store.get(&h).unwrap().bounds;
        assert_eq!(
            store.apply(
                id(150),
                &checkpoint(h, bounds.retained_from, bounds.total_bytes)
            ),
            Err(Rejection::AlreadyTerminal(state)),
            "{state}"
        );
        assert_eq!(
            store.apply(id(151), &checkpoint(h, 0, bounds.total_bytes + 1)),
            Err(Rejection::AlreadyTerminal(state))
        );
        assert_eq!(
            store.apply(id(152), &gap(h, 0, 4)),
            Err(Rejection::AlreadyTerminal(state))
        );
        assert_eq!(store, before);
    }
}

/// The worst ratio of bincode's claims to encoded bytes of any event (`EnvVar`s with empty names
/// and no values): a payload at the journal's cap still decodes, by both decoders, and a
/// registration at the cap is read into its stored form.
#[test]
fn an_envvar_payload_at_the_cap_decodes() {
    let LifecycleEvent::RegisteredV2(mut e) = registered_v2(handle(1), 10, None) else {
        unreachable!()
    };
    let base = LifecycleEvent::RegisteredV2(e.clone())
        .encode()
        .unwrap()
        .len();
    let n = (crate::limits::RECORD_PAYLOAD_BYTES_MAX - base) / 9;
    e.command.env_overrides = vec![
        EnvVar {
            name: String::new(),
            value: None
        };
        n
    ];
    let event = LifecycleEvent::RegisteredV2(e);
    let bytes = event.encode().unwrap();
    assert!(bytes.len() <= crate::limits::RECORD_PAYLOAD_BYTES_MAX);
    assert!(bytes.len() + 64 > crate::limits::RECORD_PAYLOAD_BYTES_MAX);
    let v = crate::codec::CODEC_VERSION;
    let reference = LifecycleEvent::decode_reference(kinds::REGISTERED_V2, v, &bytes);
    assert_eq!(reference.ok().as_ref(), Some(&event));
    assert_eq!(
        super::wire::decode(kinds::REGISTERED_V2, v, &bytes).ok(),
        Some(event.clone())
    );
    let stored = super::wire::registration(kinds::REGISTERED_V2, v, &bytes).unwrap();
    assert_eq!(stored.command.withheld_env_names().count(), n);
}

#[test]
fn a_version_2_registration_keeps_names_policy_and_its_restart_link() {
    let mut store = ManifestStore::new();
    let (old, new) = (handle(1), handle(2));
    // A restart of a handle not registered (yet) is refused, and reserves nothing.
    let early = registered_v2(new, 20, Some(old));
    assert_eq!(
        store.apply(id(99), &early),
        Err(Rejection::UnknownRestart(old))
    );
    assert!(store.is_empty());
    store.apply(id(98), &registered(old, 10)).unwrap();
    store.apply(id(99), &early).unwrap();
    let legacy = store.get(&old).unwrap();
    assert_eq!(legacy.command.env_policy(), None);
    assert_eq!(legacy.restart_of, None);
    assert_eq!(
        legacy.command.env_overrides().collect::<Vec<_>>(),
        [("K", Some("V"))]
    );
    let m = store.get(&new).unwrap();
    assert_eq!(m.restart_of, Some(old));
    assert_eq!(
        m.command.withheld_env_names().collect::<Vec<_>>(),
        ["TOKEN"]
    );
    assert_eq!(
        m.command.env_overrides().collect::<Vec<_>>(),
        [("TOKEN", None), ("K", Some("V"))]
    );
    let policy = m.command.env_policy().unwrap();
    assert_eq!(policy.base, EnvBase::Client);
    assert_eq!(policy.removed, ["GIT_DIR"]);
    // As JSON: the withheld value is null, the policy's every key present.
    let json = serde_json::to_value(m).unwrap();
    assert_eq!(json["restart_of"], old.to_string());
    assert_eq!(
        json["command"]["env_overrides"][0]["value"],
        serde_json::Value::Null
    );
    assert_eq!(json["command"]["env_overrides"][1]["value"], "V");
    assert_eq!(json["command"]["env_policy"]["base"], "client");
    assert_eq!(
        json["command"]["env_policy"]["overlay"]["status"],
        "applied"
    );
    assert_eq!(
        json["command"]["env_policy"]["overlay"]["reason"],
        serde_json::Value::Null
    );
    // A registration of either kind under the other's handle is refused.
    assert_eq!(
        store.apply(id(97), &registered_v2(old, 30, None)),
        Err(Rejection::AlreadyRegistered(old))
    );
}

#[test]
fn a_version_2_registration_does_not_grow_the_event() {
    // Replay moves decoded events around; the boxed command keeps them at their former size.
    assert!(std::mem::size_of::<LifecycleEvent>() <= 280);
}

/// The JSON form of every event is tagged `event`; `LifecyclePublished`'s own event field is
/// `published_event` there, so the tag is not overwritten (a JSON object has one `event` key).
#[test]
fn the_json_tag_of_a_published_record_survives_its_field() {
    let id = EventId::new_v7();
    let event = LifecycleEvent::LifecyclePublished(crate::lifecycle::event::LifecyclePublished {
        handle: Handle(EventId::new_v7()),
        event: id,
    });
    let json = serde_json::to_value(&event).unwrap();
    assert_eq!(json["event"], "lifecycle_published", "{json}");
    assert_eq!(json["published_event"], serde_json::to_value(id).unwrap());
}
