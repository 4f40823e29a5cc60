//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through). The `replay`
//! target's input decoder is [`records`], the rules its manifests are held to [`manifests`].

use crate::journal::EventId;
use crate::journal::format;
use crate::journal::fuzz::{FUZZ_JOURNAL_ID, Input};
use crate::limits::{SEGMENT_HEADER_BYTES, SEQ_MAX};

mod manifests;
mod records;

use manifests::check_manifests;
pub use records::{REPLAY_RECORDS_MAX, ReplayRecord, replay_records};

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
    use crate::lifecycle::ManifestStore;
    use crate::lifecycle::event::*;
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
        let event = store_event(op, h, pick, x);
        let event_id = store_event_id(&event, h, pick);
        check_store_step(&mut store, store_handle(h), event_id, &event);
    }
}

fn store_id(n: u8) -> EventId {
    EventId::from_bytes([n; 16])
}

fn store_handle(h: u8) -> crate::lifecycle::Handle {
    crate::lifecycle::Handle(store_id(200 + h % 3))
}

fn store_ids(h: u8) -> crate::lifecycle::LifecycleIds {
    crate::lifecycle::LifecycleIds {
        running: store_id(10 * (h % 3) + 1),
        terminal: store_id(10 * (h % 3) + 2),
        lost: store_id(10 * (h % 3) + 3),
        completion: store_id(10 * (h % 3) + 4),
    }
}

/// The event a [`lifecycle_store`] step stands for: `op` picks its kind, `h` its handle, `pick`
/// and `x` its fields.
fn store_event(op: u8, h: u8, pick: u8, x: u8) -> crate::lifecycle::LifecycleEvent {
    use crate::lifecycle::event::*;
    let handle = store_handle(h);
    let ids = store_ids(h);
    match op % 10 {
        op @ 0..=6 => store_step_event(op, h, pick, x),
        7 => LifecycleEvent::LifecyclePublished(LifecyclePublished {
            handle,
            event: [ids.running, ids.terminal, ids.lost, store_id(99)][usize::from(x % 4)],
        }),
        8 => LifecycleEvent::OutputGap(OutputGap {
            handle,
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
            handle,
            command: if x & 1 == 0 {
                ids.completion
            } else {
                store_id(98)
            },
        }),
    }
}

/// The steps of a process (`op`: 0 to 6).
fn store_step_event(op: u8, h: u8, pick: u8, x: u8) -> crate::lifecycle::LifecycleEvent {
    use crate::lifecycle::State;
    use crate::lifecycle::event::*;
    let handle = store_handle(h);
    let ids = store_ids(h);
    let state = State::ALL[usize::from(x % 9)];
    let bounds = CursorBounds {
        retained_from: u64::from(x >> 4),
        total_bytes: u64::from(x >> 2) + u64::from(pick & 3),
    };
    match op {
        0 => LifecycleEvent::Registered(Registered {
            handle,
            ids,
            command: CommandSpec::default(),
            at_unix_ms: 0,
        }),
        1 => LifecycleEvent::Running(Running {
            handle,
            pid: u32::from(x),
            witness: IdentityWitness {
                start_time_ticks: 1,
                boot_id: [1; 16],
            },
            at_unix_ms: 0,
        }),
        2 => LifecycleEvent::StopRequested(StopRequested {
            handle,
            reason: String::new(),
            requested_by: String::new(),
            at_unix_ms: 0,
        }),
        3 => LifecycleEvent::InputClosed(InputClosed {
            handle,
            at_unix_ms: 0,
        }),
        4 => LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
            handle,
            bounds,
            at_unix_ms: 0,
        }),
        5 => LifecycleEvent::Terminal(Terminal {
            handle,
            state,
            exit: ExitStatus::Code(i32::from(x)),
            bounds,
            capture: CaptureStatus::Complete,
            reason: String::new(),
            at_unix_ms: 0,
        }),
        _ => LifecycleEvent::LostOnRestore(LostOnRestore {
            handle,
            bounds,
            at_unix_ms: 0,
        }),
    }
}

/// The ID a [`lifecycle_store`] step appends `event` under: one of the pool `pick` chooses.
fn store_event_id(event: &crate::lifecycle::LifecycleEvent, h: u8, pick: u8) -> EventId {
    use crate::lifecycle::LifecycleEvent;
    use crate::lifecycle::event::derived;
    // A record about a step is accepted only under the ID derived from the step's.
    let derived = match event {
        LifecycleEvent::LifecyclePublished(e) => Some(e.event.derived(derived::PUBLISHED)),
        LifecycleEvent::CompletionNotified(_) => {
            Some(store_ids(h).completion.derived(derived::NOTIFIED))
        }
        _ => None,
    };
    match (pick % 6, derived) {
        (0, _) => store_id(100 + pick / 6 % 50),
        (1, _) => store_ids(h).running,
        (2, _) => store_ids(h).terminal,
        (3, _) => store_ids(h).lost,
        (4, _) => store_ids(h.wrapping_add(1)).terminal,
        (_, Some(derived)) => derived,
        (_, None) => store_id(10 * (h % 3) + 9),
    }
}

/// Feeds one event to the store: check and apply agree, a refused event changes nothing, and an
/// accepted one moves `handle`'s manifest only as the rules allow.
fn check_store_step(
    store: &mut crate::lifecycle::ManifestStore,
    handle: crate::lifecycle::Handle,
    event_id: EventId,
    event: &crate::lifecycle::LifecycleEvent,
) {
    use crate::lifecycle::State;
    let before = store.clone();
    let old = store.get(&handle).map(std::borrow::Cow::into_owned);
    let checked = store.check(event_id, event);
    let applied = store.apply(event_id, event);
    assert_eq!(checked, applied, "check and apply disagree");
    if applied.is_err() {
        assert_eq!(*store, before, "a refused event changed the store");
        return;
    }
    let Some(new) = store.get(&handle) else {
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

// ---------------------------------------------------------------------------------------------
// replay

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
    use crate::lifecycle::{LifecycleEvent, Replayer};
    let views = record_views(records);
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

    let reference = ReferenceFold::of(records);
    let issues = |list: &[crate::lifecycle::replay::ReplayIssue]| -> Vec<_> {
        list.iter()
            .map(|i| (i.seq, i.handle.clone(), i.error.clone()))
            .collect()
    };
    assert_eq!(
        issues(&report.undecodable),
        reference.undecodable,
        "undecodable records differ"
    );
    assert_eq!(
        issues(&report.rejected),
        reference.rejected,
        "rejected records differ"
    );
    assert!(
        store == reference.store,
        "replay and the validating store fold differently"
    );
    check_manifests(&store, &reference.accepted);
}

/// `records` as a scan hands them out, from seq 1 in one segment.
fn record_views(records: &[ReplayRecord]) -> Vec<crate::journal::reader::RecordView<'_>> {
    use crate::journal::Position;
    use crate::journal::reader::RecordView;
    (0u64..)
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
        .collect()
}

/// A replay issue as `(seq, handle, error text)`.
type Issue = (u64, Option<String>, String);

/// What the validating store does with `records` (seq 1, 2, ...) under the reference decoder:
/// bincode's decoder, and the store's check and apply.
struct ReferenceFold {
    store: crate::lifecycle::ManifestStore,
    rejected: Vec<Issue>,
    undecodable: Vec<Issue>,
    /// `(ID, event, changed)`, in journal order.
    accepted: Vec<(EventId, crate::lifecycle::LifecycleEvent, bool)>,
}

impl ReferenceFold {
    fn of(records: &[ReplayRecord]) -> ReferenceFold {
        use crate::lifecycle::{Applied, LifecycleEvent, ManifestStore};
        let mut fold = ReferenceFold {
            store: ManifestStore::new(),
            rejected: Vec::new(),
            undecodable: Vec::new(),
            accepted: Vec::new(),
        };
        for (seq, r) in (1u64..).zip(records) {
            if !LifecycleEvent::is_lifecycle_kind(r.kind) {
                continue;
            }
            match LifecycleEvent::decode_reference(r.kind, r.codec_version, &r.payload) {
                Err(e) => fold.undecodable.push((seq, None, e.to_string())),
                Ok(event) => {
                    let checked = fold.store.check(r.event_id, &event);
                    let applied = fold.store.apply(r.event_id, &event);
                    assert_eq!(checked, applied, "check and apply disagree at seq {seq}");
                    match applied {
                        Ok(applied) => {
                            fold.accepted
                                .push((r.event_id, event, applied == Applied::Changed))
                        }
                        Err(e) => fold.rejected.push((
                            seq,
                            event.handle().map(|h| h.to_string()),
                            e.to_string(),
                        )),
                    }
                }
            }
        }
        fold
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

/// Two decodes of the same bytes: the same snapshot, or the same error.
fn same_decode(
    a: Result<crate::lifecycle::snapshot::Snapshot, crate::lifecycle::snapshot::SnapshotError>,
    b: Result<crate::lifecycle::snapshot::Snapshot, crate::lifecycle::snapshot::SnapshotError>,
    differ: &str,
) {
    match (a, b) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.header, b.header, "{differ}");
            assert!(a.store == b.store, "{differ}");
            assert_eq!(a.retained, b.retained, "{differ}");
            assert_eq!(a.replay, b.replay, "{differ}");
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "{differ}"),
        (a, b) => panic!("{differ}: {:?} against {:?}", a.err(), b.err()),
    }
}

fn check_snapshot(bytes: &[u8]) {
    use crate::lifecycle::snapshot;
    // The frames read by hand against bincode's derived decoders: the same value, or the same
    // error.
    let (fast, reference) = (snapshot::decode(bytes), snapshot::decode_reference(bytes));
    same_decode(fast, reference, "the decoders differ");
    // Read in place over the same bytes (each settled frame adopted where it is, not copied).
    let held: std::sync::Arc<dyn crate::spill::Backing> = std::sync::Arc::new(bytes.to_vec());
    let in_place = snapshot::decode_backed(&held);
    same_decode(snapshot::decode(bytes), in_place, "read in place differs");
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
