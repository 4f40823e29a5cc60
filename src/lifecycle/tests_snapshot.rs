//! Snapshots and compaction against real files: a restore from a snapshot gives the store (and
//! the replay report's counts and issues) a full replay of an uncompacted journal gives, after a
//! crash at every step of snapshotting and compaction too; retried appends of retained IDs write
//! nothing after their records are gone; damage is reported, never a silently wrong projection.
//!
//! The reference is a *mirror*: a second root that receives the same deterministic workload
//! (`workload.rs`) and is never snapshotted, replayed whole.

use std::path::Path;

use super::*;
use crate::journal::Durability;

/// Small segments, so that a few hundred events fill many and compaction has work.
fn options() -> JournalOptions {
    JournalOptions {
        durability: Durability::Os,
        segment_bytes: 8192,
    }
}

fn append(lc: &mut Lifecycle, range: std::ops::Range<u64>) {
    for n in range {
        let (id, event) = workload::event(n);
        let appended = lc.append(id, &event).unwrap();
        assert!(appended.written, "event {n} was not written");
    }
}

/// The mirror: the same events in a fresh root, replayed whole.
fn mirror(events: u64) -> (ManifestStore, ReplayReport) {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
    append(&mut lc, 0..events);
    drop(lc);
    full_replay(dir.path())
}

/// A replay of every record of `root`'s journal, ignoring snapshots.
fn full_replay(root: &Path) -> (ManifestStore, ReplayReport) {
    let mut replayer = Replayer::default();
    let report = JournalReader::open(root)
        .unwrap()
        .scan(1, |r| replayer.feed(&r))
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    replayer.finish()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn segment_count(root: &Path) -> usize {
    std::fs::read_dir(root.join("journal"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".log")
        })
        .count()
}

/// A root with `events` events and two snapshots (at `first` and at the end), compacted.
fn compacted_root(first: u64, events: u64) -> (tempfile::TempDir, SnapshotWritten) {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
    append(&mut lc, 0..first);
    let one = lc.snapshot_now().unwrap().unwrap();
    assert_eq!(
        (one.kept.clone(), one.compacted.clone()),
        (vec![first], None)
    );
    append(&mut lc, first..events);
    let two = lc.snapshot_now().unwrap().unwrap();
    (dir, two)
}

#[test]
fn a_snapshot_round_trips_to_the_same_bytes_and_every_header_byte_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
    append(&mut lc, 0..300);
    let store = lc.store().clone();
    let ids = snapshot::candidate_ids(&store);
    let retained: Vec<snapshot::RetainedStep> = lc
        .journal()
        .lookup_ids(&ids, 300)
        .into_iter()
        .enumerate()
        .filter_map(|(n, hit)| {
            let (seq, kind) = hit?;
            Some(snapshot::RetainedStep {
                manifest: (n / snapshot::CANDIDATES) as u32,
                which: (n % snapshot::CANDIDATES) as u8,
                seq,
                kind,
            })
        })
        .collect();
    // Every process of the workload has its registration, running, scope, publications,
    // terminal (or lost), completion notice and release written under retained IDs.
    let processes = store.len() as u64;
    assert!(retained.len() as u64 >= 8 * (processes - workload::LANES));
    let replay = lc.records.clone();
    let bytes = snapshot::encode(*b"0123456789abcdef", 300, 7, &store, &retained, &replay).unwrap();
    let back = snapshot::decode(&bytes).unwrap();
    assert_eq!(back.store, store);
    assert_eq!(back.retained, retained);
    assert_eq!(back.replay, replay);
    let again = snapshot::encode(
        *b"0123456789abcdef",
        300,
        7,
        &back.store,
        &back.retained,
        &back.replay,
    )
    .unwrap();
    assert_eq!(again, bytes);
    for at in 0..snapshot::SNAPSHOT_HEADER_BYTES {
        let mut b = bytes.clone();
        b[at] ^= 0x01;
        assert!(
            snapshot::decode(&b).is_err(),
            "header flip at {at} accepted"
        );
    }
    let mut b = bytes.clone();
    let last = b.len() - 1;
    b[last] ^= 0x80;
    assert_eq!(
        snapshot::decode(&b).err(),
        Some(SnapshotError::PayloadChecksum)
    );
    assert_eq!(
        snapshot::decode(&bytes[..bytes.len() - 1]).err(),
        Some(SnapshotError::Length {
            declared: (bytes.len() - 64) as u64,
            held: (bytes.len() - 65) as u64
        })
    );
}

#[test]
fn a_restore_from_a_compacted_root_gives_the_full_replay() {
    let (dir, written) = compacted_root(300, 700);
    let compacted = written.compacted.clone().unwrap();
    assert!(compacted.removed_segments > 0, "{written:?}");
    assert_eq!(written.kept, vec![300, 700]);
    let floor = compacted.floor.unwrap();
    assert!(
        floor.seq <= 301,
        "compacted past the older snapshot: {floor:?}"
    );

    let (want, want_report) = mirror(750);
    let kept = segment_count(dir.path());
    let (mut lc, recovery, replay) = Lifecycle::open(dir.path(), options()).unwrap();
    assert_eq!(recovery.segments as usize, kept);
    assert_eq!(recovery.records, 700 - (floor.seq - 1));
    assert!(recovery.is_clean(), "{recovery:?}");
    assert_eq!(recovery.floor, Some(floor));
    assert_eq!(replay.snapshot_seq, Some(700));
    assert!(replay.is_clean(), "{replay:?}");
    append(&mut lc, 700..750);
    assert_eq!(lc.journal().last_seq(), 750);
    drop(lc);
    let (lc, recovery, replay) = Lifecycle::open(dir.path(), options()).unwrap();
    assert!(recovery.is_clean(), "{recovery:?}");
    assert_eq!(*lc.store(), want);
    assert_eq!(replay.of_records(), want_report);
    // The read-only restore of the CLI agrees.
    let (store, replay, recovery) = restore_read_only(dir.path(), |_| {}).unwrap();
    assert_eq!(store, want);
    assert_eq!(replay.of_records(), want_report);
    assert!(
        recovery.is_clean() && replay.is_clean(),
        "{recovery:?} {replay:?}"
    );
}

/// Appends again the events numbered `events` whose IDs a retry could name (a fresh ID is never
/// retried across a restart: snapshot.rs), asserting that each writes nothing and answers its
/// record's seq; returns how many.
fn retry_retained(lc: &mut Lifecycle, events: std::ops::Range<u64>) -> usize {
    let mut retried = 0;
    for n in events {
        let (id, event) = workload::event(n);
        if workload::under_a_fresh_id(&event) {
            continue;
        }
        let appended = lc.append(id, &event).unwrap();
        assert!(!appended.written, "event {n} written again");
        assert_eq!(appended.position.seq, n + 1);
        retried += 1;
    }
    retried
}

#[test]
fn a_retry_of_a_retained_id_after_compaction_writes_nothing() {
    let (dir, written) = compacted_root(300, 700);
    let floor = written.compacted.unwrap().floor.unwrap();
    let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
    let last = lc.journal().last_seq();
    // Every event whose record compaction removed and whose ID is a retained one.
    let retried = retry_retained(&mut lc, 0..floor.seq - 1);
    assert!(retried > 100, "only {retried} retries");
    assert_eq!(lc.journal().last_seq(), last);
    // A retained ID still names its kind: another event under it is refused.
    let (running_id, _) = workload::event(8); // process 0's running
    let (_, stop) = workload::event(5 * workload::LANES);
    assert!(matches!(
        lc.append(running_id, &stop),
        Err(LifecycleError::Rejected(Rejection::IdInUse { .. }))
    ));
    assert_eq!(lc.journal().last_seq(), last);
}

/// A brief writer's open of a compacted root indexes none of the records its snapshot covers
/// and still restores the full replay, knows every ID a retry could name (the snapshot's
/// retained IDs), appends after the last record, and leaves a root a lasting open reads whole;
/// with the newest snapshot damaged it falls back to the older one and indexes more.
#[test]
fn a_brief_open_of_a_compacted_root_gives_the_full_replay_and_knows_every_retry() {
    let brief = crate::journal::Tenure::Brief;
    let (dir, _) = compacted_root(300, 700);
    let (mut lc, recovery, replay) = Lifecycle::open_for(dir.path(), options(), brief).unwrap();
    assert!(recovery.is_clean(), "{recovery:?}");
    assert_eq!(recovery.unindexed_records, recovery.records, "{recovery:?}");
    assert_eq!(replay.snapshot_seq, Some(700));
    assert_eq!(*lc.store(), mirror(700).0);
    let retried = retry_retained(&mut lc, 0..700);
    assert!(retried > 300, "only {retried} retries");
    append(&mut lc, 700..750);
    drop(lc);
    let (want, want_report) = mirror(750);
    let (lc, recovery, replay) = Lifecycle::open(dir.path(), options()).unwrap();
    assert!(recovery.is_clean(), "{recovery:?}");
    assert_eq!(recovery.unindexed_records, 0);
    assert_eq!(*lc.store(), want);
    assert_eq!(replay.of_records(), want_report);
    drop(lc);

    let newest = dir.path().join("snapshots").join(snapdir::file_name(700));
    let mut bytes = std::fs::read(&newest).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(&newest, bytes).unwrap();
    let (lc, recovery, replay) = Lifecycle::open_for(dir.path(), options(), brief).unwrap();
    assert_eq!(replay.snapshot_seq, Some(300));
    assert!(recovery.is_clean(), "{recovery:?}");
    assert!(
        recovery.unindexed_records < recovery.records - 50,
        "{recovery:?}"
    );
    assert_eq!(*lc.store(), want);
    assert_eq!(replay.of_records(), want_report);
}

/// A writer that runs on past a compaction forgets the IDs of the records it removed but the
/// retained ones: its index holds what an open of the same root would, not an entry for every
/// record it ever appended.
#[test]
fn a_running_writer_keeps_the_index_a_restarted_one_would() {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
    append(&mut lc, 0..300);
    lc.snapshot_now().unwrap().unwrap();
    append(&mut lc, 300..700);
    assert_eq!(lc.journal().indexed_ids(), (700, 0));
    let written = lc.snapshot_now().unwrap().unwrap();
    let floor = written.compacted.unwrap().floor.unwrap();
    assert!(floor.seq > 100, "{floor:?}");
    let (table, retained) = lc.journal().indexed_ids();
    assert_eq!(
        table as u64,
        700 - floor.seq + 1,
        "the table holds the records kept"
    );
    let (mut fresh, mut steps) = (0, 0);
    for n in 0..floor.seq - 1 {
        let (id, event) = workload::event(n);
        let found = lc.journal().position_of(id).map(|p| p.seq);
        if workload::under_a_fresh_id(&event) {
            assert_eq!(found, None, "event {n}'s fresh ID is still indexed");
            fresh += 1;
        } else {
            assert_eq!(found, Some(n + 1), "event {n}'s ID is no longer indexed");
            steps += 1;
        }
    }
    assert!(fresh > 50 && steps > 100, "{fresh} fresh, {steps} steps");
    assert_eq!(retained, steps);
    assert!(
        lc.journal().retained_ids_spilled(),
        "the retained IDs left the heap"
    );
    // A retry of a step below the floor still writes nothing.
    let (id, running) = workload::event(8);
    assert!(!lc.append(id, &running).unwrap().written);
    let running_index = lc.journal().indexed_ids();
    drop(lc);
    let (lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
    assert_eq!(lc.journal().indexed_ids(), running_index);
    assert!(
        lc.journal().retained_ids_spilled(),
        "an open spills what it retains"
    );
}

/// Stops the sequence at step `at` (counting from 0), as a crash there would; records the steps.
#[derive(Debug, Default)]
struct CrashAt {
    at: Option<usize>,
    steps: Vec<&'static str>,
}

impl crate::journal::CrashPoints for CrashAt {
    fn reached(&mut self, step: &'static str) -> std::io::Result<()> {
        if self.at == Some(self.steps.len()) {
            return Err(std::io::Error::other(format!(
                "simulated crash before {step}"
            )));
        }
        self.steps.push(step);
        Ok(())
    }
}

/// Truncates every `*.tmp` under `root` to half: what a power loss leaves of writes that were
/// never synced.
fn tear_tmp_files(root: &Path) {
    for sub in ["journal", "snapshots"] {
        let Ok(entries) = std::fs::read_dir(root.join(sub)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.to_string_lossy().ends_with(".tmp") {
                let len = std::fs::metadata(&path).unwrap().len();
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(len / 2)
                    .unwrap();
            }
        }
    }
}

#[test]
fn a_crash_at_every_step_of_snapshot_and_compaction_opens_to_the_full_replay() {
    // A root with one snapshot: the next one compacts below it.
    let template = tempfile::tempdir().unwrap();
    {
        let (mut lc, _, _) = Lifecycle::open(template.path(), options()).unwrap();
        append(&mut lc, 0..300);
        lc.snapshot_now().unwrap().unwrap();
        append(&mut lc, 300..600);
    }
    let (want, want_report) = mirror(650);
    // The steps of one uninterrupted run.
    let steps = {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(template.path(), dir.path());
        let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
        let mut count = CrashAt::default();
        let written = lc.snapshot_now_with(&mut count).unwrap().unwrap();
        assert!(written.compacted.unwrap().removed_segments > 1);
        count.steps
    };
    assert!(steps.contains(&"compaction: delete segment"), "{steps:?}");
    assert!(!steps.contains(&"snapshot: delete old"), "{steps:?}");
    for at in 0..=steps.len() {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(template.path(), dir.path());
        let context = format!("crash before step {at} of {steps:?}");
        {
            let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
            let mut crash = CrashAt {
                at: Some(at),
                ..CrashAt::default()
            };
            let outcome = lc.snapshot_now_with(&mut crash);
            assert_eq!(outcome.is_ok(), at == steps.len(), "{context}: {outcome:?}");
        }
        if steps.get(at).is_some_and(|s| s.ends_with("fsync tmp")) {
            tear_tmp_files(dir.path());
        }
        let (mut lc, recovery, replay) = Lifecycle::open(dir.path(), options()).unwrap();
        assert!(recovery.is_crash_residue_only(), "{context}: {recovery:?}");
        assert!(recovery.gaps.is_empty(), "{context}: {recovery:?}");
        assert!(replay.is_clean(), "{context}: {replay:?}");
        // A retried append of an early registration is still recognised.
        let (id, event) = workload::event(0);
        assert!(!lc.append(id, &event).unwrap().written, "{context}");
        append(&mut lc, 600..650);
        // The interrupted snapshot, again, to the end.
        lc.snapshot_now().unwrap();
        drop(lc);
        let (lc, recovery, replay) = Lifecycle::open(dir.path(), options()).unwrap();
        assert!(recovery.is_clean(), "{context}: {recovery:?}");
        assert_eq!(*lc.store(), want, "{context}");
        assert_eq!(replay.of_records(), want_report, "{context}");
        assert_eq!(replay.snapshot_seq, Some(650), "{context}");
    }
}

#[test]
fn a_damaged_newest_snapshot_falls_back_to_the_older_one_without_loss() {
    let (dir, written) = compacted_root(300, 700);
    assert!(written.compacted.unwrap().removed_segments > 0);
    let newest = dir.path().join("snapshots").join(snapdir::file_name(700));
    let mut bytes = std::fs::read(&newest).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(&newest, bytes).unwrap();
    let (want, want_report) = mirror(700);
    let (lc, recovery, replay) = Lifecycle::open(dir.path(), options()).unwrap();
    assert!(recovery.is_clean(), "{recovery:?}");
    assert_eq!(replay.snapshot_seq, Some(300));
    assert_eq!(replay.snapshot_problems.len(), 1, "{replay:?}");
    assert!(
        replay.snapshot_problems[0].reason.contains("checksum"),
        "{replay:?}"
    );
    assert_eq!(replay.lost_below_seq, None);
    assert!(!replay.is_clean());
    assert_eq!(*lc.store(), want);
    assert_eq!(replay.of_records(), want_report);
}

#[test]
fn with_every_snapshot_damaged_the_compacted_head_is_reported_lost() {
    let (dir, written) = compacted_root(300, 700);
    let floor = written.compacted.unwrap().floor.unwrap();
    for seq in [300, 700] {
        let path = dir.path().join("snapshots").join(snapdir::file_name(seq));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[70] ^= 0x01;
        std::fs::write(&path, bytes).unwrap();
    }
    let (want, _) = mirror(700);
    let (lc, recovery, replay) = Lifecycle::open(dir.path(), options()).unwrap();
    assert!(recovery.is_clean(), "{recovery:?}");
    assert_eq!(replay.lost_below_seq, Some(floor.seq));
    assert_eq!(replay.snapshot_seq, None);
    assert_eq!(replay.snapshot_problems.len(), 2);
    assert!(!replay.is_clean());
    assert!(lc.store().len() < want.len());
    let (_, replay, _) = restore_read_only(dir.path(), |_| {}).unwrap();
    assert_eq!(replay.lost_below_seq, Some(floor.seq));
}

#[test]
fn a_damaged_floor_is_reported_and_the_removed_head_reads_as_a_gap() {
    let (dir, _) = compacted_root(300, 700);
    let floor_path = dir.path().join("journal").join("FLOOR");
    let mut bytes = std::fs::read(&floor_path).unwrap();
    bytes[40] ^= 0x01;
    std::fs::write(&floor_path, bytes).unwrap();
    let report = JournalReader::open(dir.path()).unwrap().verify().unwrap();
    assert!(report.bad_floor.is_some(), "{report:?}");
    assert_eq!(report.floor, None);
    assert_eq!(report.gaps.len(), 1, "{report:?}");
    assert_eq!(report.gaps[0].after_seq, 0);
    assert!(!report.is_clean() && !report.is_crash_residue_only());
}

#[test]
fn a_snapshot_of_another_journal_is_reported_and_not_used() {
    let (dir, _) = compacted_root(300, 700);
    let other = tempfile::tempdir().unwrap();
    {
        let (mut lc, _, _) = Lifecycle::open(other.path(), options()).unwrap();
        append(&mut lc, 0..800);
        lc.snapshot_now().unwrap().unwrap();
    }
    std::fs::copy(
        other.path().join("snapshots").join(snapdir::file_name(800)),
        dir.path().join("snapshots").join(snapdir::file_name(800)),
    )
    .unwrap();
    let (want, _) = mirror(700);
    let (lc, _, replay) = Lifecycle::open(dir.path(), options()).unwrap();
    assert_eq!(replay.snapshot_seq, Some(700));
    assert_eq!(replay.snapshot_problems.len(), 1, "{replay:?}");
    assert!(
        replay.snapshot_problems[0]
            .reason
            .contains("another journal"),
        "{replay:?}"
    );
    assert_eq!(*lc.store(), want);
}

#[test]
fn the_policy_waits_for_a_segment_of_growth_and_the_snapshot_size() {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
    let policy = SnapshotPolicy::default();
    append(&mut lc, 0..100);
    assert!(!lc.snapshot_due(&policy, false));
    assert!(!lc.snapshot_due(&policy, true));
    lc.snapshots.folded_bytes = crate::limits::SNAPSHOT_AT_SHUTDOWN_BYTES_MIN;
    assert!(lc.snapshot_due(&policy, true) && !lc.snapshot_due(&policy, false));
    lc.snapshots.folded_bytes = crate::limits::SNAPSHOT_AFTER_BYTES_MIN;
    assert!(lc.snapshot_due(&policy, false));
    let written = lc.snapshot_now().unwrap().unwrap();
    assert!(!lc.snapshot_due(&policy, false) && !lc.snapshot_due(&policy, true));
    // A large newest snapshot raises the bar to its own size.
    lc.snapshots.newest_bytes = 4 * crate::limits::SNAPSHOT_AFTER_BYTES_MIN;
    lc.snapshots.folded_bytes = written.folded_bytes + 2 * crate::limits::SNAPSHOT_AFTER_BYTES_MIN;
    assert!(!lc.snapshot_due(&policy, false) && lc.snapshot_due(&policy, true));
    // Nothing new: no snapshot.
    assert_eq!(lc.snapshot_now().unwrap(), None);
}

#[test]
fn a_terminal_event_that_says_lost_on_restore_round_trips() {
    // Found by the round-trip proptest: `Terminal` may carry the lost_on_restore state, under
    // the terminal ID; the snapshot's consistency check must accept what replay accepts.
    let mut store = ManifestStore::new();
    let (id, registration) = workload::event(0);
    store.apply(id, &registration).unwrap();
    let h = workload::handle(0);
    let terminal = LifecycleEvent::Terminal(event::Terminal {
        handle: h,
        state: State::LostOnRestore,
        exit: event::ExitStatus::Unknown,
        bounds: event::CursorBounds::default(),
        capture: event::CaptureStatus::Complete,
        reason: "restarted".into(),
        at_unix_ms: 1,
    });
    store.apply(workload::ids(0).terminal, &terminal).unwrap();
    let bytes = snapshot::encode([1; 16], 2, 0, &store, &[], &ReplayReport::default()).unwrap();
    assert_eq!(snapshot::decode(&bytes).unwrap().store, store);
}

#[test]
fn a_manifest_no_events_could_produce_is_refused() {
    let mut store = ManifestStore::new();
    let (id, registration) = workload::event(0);
    store.apply(id, &registration).unwrap();
    let m = store.iter().next().unwrap().into_owned();
    let broken = [
        Manifest {
            state: State::Exited,
            ..m.clone()
        },
        Manifest {
            pid: Some(7),
            ..m.clone()
        },
        Manifest {
            completion_notified: true,
            ..m.clone()
        },
        Manifest {
            stop_requests: 1,
            ..m.clone()
        },
        Manifest {
            published: [workload::ids(0).running].into(),
            ..m.clone()
        },
    ];
    for manifest in broken {
        let restored = ManifestStore::restore([(id, manifest.clone())].into_iter());
        assert!(restored.is_err(), "{manifest:?}");
    }
    // Two manifests of one handle, as a damaged snapshot could hold.
    assert!(
        ManifestStore::restore(
            [(id, m.clone()), (workload::registration_id(9), m.clone())].into_iter()
        )
        .is_err()
    );
    assert_eq!(
        ManifestStore::restore([(id, m.clone())].into_iter()).unwrap(),
        store
    );
}

#[test]
fn a_snapshot_ahead_of_its_journal_never_lets_a_seq_be_reused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
        append(&mut lc, 0..300);
        lc.snapshot_now().unwrap().unwrap();
    }
    // Outside damage: the last segment, holding seq 300, is gone.
    let journal = dir.path().join("journal");
    let mut segments: Vec<_> = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    std::fs::remove_file(segments.last().unwrap()).unwrap();
    let (want, _) = mirror(300);
    let (mut lc, recovery, replay) = Lifecycle::open(dir.path(), options()).unwrap();
    assert_eq!(replay.snapshot_seq, Some(300));
    assert_eq!(*lc.store(), want);
    // The loss is reported (the sealed segment before names the missing one).
    assert!(!recovery.is_crash_residue_only(), "{recovery:?}");
    // The next record never takes a seq the snapshot already holds.
    let (id, event) = workload::event(300);
    assert!(lc.append(id, &event).unwrap().position.seq > 300);
    // A retry of a step whose record is gone but retained answers with its own seq.
    let (id, event) = workload::event(290);
    let retried = lc.append(id, &event).unwrap();
    assert!(!retried.written);
    assert_eq!(retried.position.seq, 291);
}

/// The snapshot is ahead of everything on disk, and nothing on disk tells of the seqs it holds
/// (no segment is left to claim them: only the floor says which journal this is): the seqs up
/// to the snapshot's are a reported gap, the writer starts above them, and the journal stays
/// the floor's, so that every later open restores from the same snapshot.
#[test]
fn a_snapshot_ahead_of_every_record_on_disk_is_restored_and_its_seqs_never_reused() {
    let (dir, written) = compacted_root(200, 400);
    let floor = crate::journal::floor::read_floor(
        &crate::root::dir::Dir::reader(&dir.path().join("journal")).unwrap(),
    )
    .unwrap()
    .good()
    .expect("a floor");
    assert!(floor.seq > 1);
    // Outside damage: every segment file is gone.
    for entry in std::fs::read_dir(dir.path().join("journal")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "log") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let (want, _) = mirror(400);
    for open in 0..2 {
        let (mut lc, recovery, replay) = Lifecycle::open(dir.path(), options()).unwrap();
        assert_eq!(
            replay.snapshot_seq,
            Some(written.seq),
            "open {open}: {replay:?}"
        );
        assert!(
            replay.snapshot_problems.is_empty(),
            "open {open}: {replay:?}"
        );
        assert!(recovery.bad_floor.is_none(), "open {open}: {recovery:?}");
        if open == 0 {
            assert_eq!(*lc.store(), want);
            // Reported: the seqs from the floor to the snapshot's are held by no segment.
            assert_eq!(
                recovery.gaps,
                vec![crate::journal::recovery::SeqGap {
                    after_seq: floor.seq - 1,
                    next_seq: written.seq + 1,
                }],
                "{recovery:?}"
            );
            assert!(!recovery.is_crash_residue_only());
            // The next record is above every seq the snapshot holds; a retried step of a
            // process the snapshot holds answers with its own seq.
            let (id, event) = workload::event(400);
            assert_eq!(lc.append(id, &event).unwrap().position.seq, written.seq + 1);
            let (id, event) = workload::event(390);
            let retried = lc.append(id, &event).unwrap();
            assert!(!retried.written);
            assert_eq!(retried.position.seq, 391);
        } else {
            // The record written after the gap was replayed on top of the snapshot.
            assert_eq!(*lc.store(), mirror(401).0, "open {open}");
            let (id, event) = workload::event(401);
            assert_eq!(lc.append(id, &event).unwrap().position.seq, written.seq + 2);
        }
    }
}

/// With no segment and no floor left, nothing names the journal the snapshot was of: it is not
/// used, and it is reported at every open (never silently dropped); the new journal has a new
/// identity, and its seqs are unique within it.
#[test]
fn a_snapshot_without_any_journal_left_is_reported_not_used() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
        append(&mut lc, 0..100);
        lc.snapshot_now().unwrap().unwrap();
    }
    std::fs::remove_dir_all(dir.path().join("journal")).unwrap();
    for _ in 0..2 {
        let (lc, _, replay) = Lifecycle::open(dir.path(), options()).unwrap();
        assert_eq!(replay.snapshot_seq, None);
        assert_eq!(replay.snapshot_problems.len(), 1, "{replay:?}");
        assert!(!replay.is_clean());
        assert!(lc.store().is_empty());
    }
}

#[test]
fn records_lost_after_a_snapshot_are_reported_and_their_seqs_not_reused() {
    // One segment: its commit point, and the snapshot, know of the seqs past the damage.
    let dir = tempfile::tempdir().unwrap();
    let big = JournalOptions {
        durability: Durability::Os,
        segment_bytes: 1 << 20,
    };
    {
        let (mut lc, _, _) = Lifecycle::open(dir.path(), big.clone()).unwrap();
        append(&mut lc, 0..300);
        lc.snapshot_now().unwrap().unwrap();
    }
    // Outside damage: the records after seq 200 are zeroed (the snapshot holds them).
    let journal = dir.path().join("journal");
    let segment = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .unwrap();
    let mut at = None;
    JournalReader::open(dir.path())
        .unwrap()
        .scan(201, |r| {
            at.get_or_insert(r.position.offset);
        })
        .unwrap();
    let at = at.unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    for b in &mut bytes[at as usize..] {
        *b = 0;
    }
    std::fs::write(&segment, bytes).unwrap();
    let (want, _) = mirror(300);
    let (mut lc, recovery, replay) = Lifecycle::open(dir.path(), big).unwrap();
    assert_eq!(replay.snapshot_seq, Some(300));
    assert_eq!(*lc.store(), want);
    assert!(!recovery.is_crash_residue_only(), "{recovery:?}");
    let (id, event) = workload::event(300);
    assert!(lc.append(id, &event).unwrap().position.seq > 300);
    // A retry of a step whose record is gone answers with its own seq.
    let (id, event) = workload::event(250);
    let retried = lc.append(id, &event).unwrap();
    assert!(!retried.written);
    assert_eq!(retried.position.seq, 251);
}

/// An older snapshot of `current`, a current (version 5) file whose manifests have none of the
/// fields `version` lacks and whose gate and admission limit never changed: each manifest frame
/// loses its last bytes (version 4: none; version 3: `env` `None`, 1 byte; version 2:
/// `awaiting_input` and `deadline` `None`, `deadline_failures` empty too, 11 bytes; version 1:
/// `retired` `None` too, 12 bytes), before version 5 the admission-limit frame goes, before
/// version 3 the gate frame too, and the lengths, the version and both checksums are written
/// again.
fn as_version(current: &[u8], version: u16) -> Vec<u8> {
    use crate::journal::format::{masked_crc, u32_at, u64_at};
    let cut = match version {
        1 => 12,
        2 => 11,
        3 => 1,
        _ => 0,
    };
    let payload = &current[snapshot::SNAPSHOT_HEADER_BYTES..];
    let frame_at = |at: usize| {
        let len = u32_at(payload, at) as usize;
        (len, &payload[at + 4..at + 4 + len])
    };
    let (meta_len, meta) = frame_at(0);
    let manifests = u64_at(meta, 0);
    let mut out = payload[..4 + meta_len].to_vec();
    let mut at = 4 + meta_len;
    for _ in 0..manifests {
        let (len, body) = frame_at(at);
        assert!(
            body[len - cut..].iter().all(|b| *b == 0),
            "a manifest with a field version {version} lacks"
        );
        out.extend_from_slice(&((len - cut) as u32).to_le_bytes());
        out.extend_from_slice(&body[..len - cut]);
        at += 4 + len;
    }
    // The gate frame and the admission-limit frame, last: `None` each (length 1, one zero
    // byte); versions before 5 have no limit frame, versions before 3 no gate frame either.
    let rest = &payload[at..];
    assert_eq!(
        &rest[rest.len() - 10..],
        &[1, 0, 0, 0, 0, 1, 0, 0, 0, 0],
        "a gate that changed or a limit that was set"
    );
    let cut_frames = match version {
        1 | 2 => 10,
        3 | 4 => 5,
        _ => 0,
    };
    out.extend_from_slice(&rest[..rest.len() - cut_frames]);
    let mut header = current[..snapshot::SNAPSHOT_HEADER_BYTES].to_vec();
    header[8..10].copy_from_slice(&version.to_le_bytes());
    header[40..48].copy_from_slice(&(out.len() as u64).to_le_bytes());
    header[56..60].copy_from_slice(&masked_crc(&out).to_le_bytes());
    let crc = masked_crc(&header[..60]);
    header[60..64].copy_from_slice(&crc.to_le_bytes());
    header.extend_from_slice(&out);
    header
}

#[test]
fn older_snapshots_are_still_read_with_nothing_they_lack() {
    // The workload without the records older versions' writers never wrote (all under fresh IDs,
    // and nothing after them depends on them), and only the processes registered by `Registered`
    // (0x0101) records: what versions 1 to 3 held.
    let mut store = ManifestStore::new();
    let mut replay = ReplayReport::default();
    for n in 0..400 {
        let (id, event) = workload::event(n);
        if !workload::place(n).0.is_multiple_of(2)
            || matches!(
                event,
                LifecycleEvent::GateChanged(_)
                    | LifecycleEvent::HumanInput(_)
                    | LifecycleEvent::DeadlineFired(_)
                    | LifecycleEvent::DeadlineFailed(_)
            )
        {
            continue;
        }
        store.apply(id, &event).unwrap();
        replay.lifecycle_events += 1;
    }
    assert!(
        store.iter().all(|m| m.retired.is_none()
            && m.deadline.is_none()
            && m.command.env_policy().is_none())
    );
    let current = snapshot::encode(*b"0123456789abcdef", 200, 7, &store, &[], &replay).unwrap();
    for version in [1u16, 2, 3, 4] {
        let older = as_version(&current, version);
        assert_eq!(u16::from_le_bytes([older[8], older[9]]), version);
        assert!(older.len() < current.len());
        let back = snapshot::decode(&older).unwrap();
        assert_eq!(back.store, store, "version {version}");
        assert_eq!(back.replay, replay);
        // A decoder does not take current frames for an older version's.
        let mut wrong = current.clone();
        wrong[8..10].copy_from_slice(&version.to_le_bytes());
        let crc = crate::journal::format::masked_crc(&wrong[..60]);
        wrong[60..64].copy_from_slice(&crc.to_le_bytes());
        assert!(snapshot::decode(&wrong).is_err(), "version {version}");
    }
    let mut future = current;
    future[8..10].copy_from_slice(&6u16.to_le_bytes());
    let crc = crate::journal::format::masked_crc(&future[..60]);
    future[60..64].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        snapshot::decode(&future),
        Err(SnapshotError::UnsupportedVersion(6))
    ));
}

/// The admission limit set at runtime is in the snapshot (its last frame) and comes back from
/// it; a frame holding a limit of 0, which no replay accepts, is refused.
#[test]
fn the_admission_limit_survives_a_snapshot() {
    use crate::lifecycle::event::AdmissionLimitSet;
    let mut store = ManifestStore::new();
    let set = |max| {
        LifecycleEvent::AdmissionLimitSet(AdmissionLimitSet {
            max_concurrent: max,
            requested_by: "ops".into(),
            at_unix_ms: 9,
        })
    };
    store.apply(EventId::new_v7(), &set(Some(3))).unwrap();
    assert!(store.apply(EventId::new_v7(), &set(Some(3))).is_err());
    assert!(store.apply(EventId::new_v7(), &set(Some(0))).is_err());
    let replay = ReplayReport {
        lifecycle_events: 1,
        ..ReplayReport::default()
    };
    let bytes = snapshot::encode(*b"0123456789abcdef", 1, 7, &store, &[], &replay).unwrap();
    let back = snapshot::decode(&bytes).unwrap();
    assert_eq!(back.store.admission_max_concurrent(), Some(3));
    assert_eq!(back.store, store);
    // The frame `Some { max_concurrent: Some(3), .. }` with 3 made 0, the checksums made again.
    let mut zero = bytes.clone();
    let payload = snapshot::SNAPSHOT_HEADER_BYTES;
    let tail = zero.len() - (1 + 1 + 8 + 8 + 3 + 8);
    assert_eq!(zero[tail..tail + 10], [1, 1, 3, 0, 0, 0, 0, 0, 0, 0]);
    zero[tail + 2] = 0;
    let crc = crate::journal::format::masked_crc(&zero[payload..]);
    zero[56..60].copy_from_slice(&crc.to_le_bytes());
    let crc = crate::journal::format::masked_crc(&zero[..60]);
    zero[60..64].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        snapshot::decode(&zero),
        Err(SnapshotError::Invalid(_))
    ));
}
