//! Settled manifests: held as their frames, read back as they were, changed by the rare events
//! that still reach them, and copied into snapshots as they are.

use std::borrow::Cow;

use super::event::derived::{PUBLISHED, RETIRED};
use super::event::*;
use super::manifest::{Applied, Manifest, ManifestStore, Rejection};
use super::snapshot;
use super::workload;
use crate::journal::EventId;

/// A store of `processes` finished processes of the workload (a multiple of its lanes), each
/// settled at its last event.
fn finished(processes: u64) -> ManifestStore {
    assert_eq!(processes % workload::LANES, 0);
    let mut store = ManifestStore::new();
    for n in 0..processes * workload::PHASES {
        let (id, event) = workload::event(n);
        store.apply(id, &event).unwrap();
    }
    store
}

#[test]
fn a_finished_process_is_held_settled_and_read_back_whole() {
    let store = finished(40);
    assert_eq!(store.len(), 40);
    assert_eq!(store.settled(), 40, "every finished process is settled");
    assert_eq!(store.live().count(), 0);
    for (position, m) in store.iter().enumerate() {
        assert!(matches!(m, Cow::Owned(_)), "a settled manifest is decoded");
        assert!(m.settled());
        assert_eq!(m.number, position as u64 + 1);
        assert_eq!(store.get(&m.handle).as_deref(), Some(&*m));
        assert_eq!(store.by_number(m.number).as_deref(), Some(&*m));
        assert_eq!(m.handle, workload::handle(position as u64));
        assert_eq!(m.ids, workload::ids(position as u64));
    }
}

#[test]
fn a_process_is_settled_only_once_nothing_is_left_to_do() {
    let mut store = ManifestStore::new();
    // Every event of process 0 but its last: it is not settled until then.
    let events: Vec<_> = (0..4 * workload::PHASES)
        .map(workload::event)
        .filter(|(_, e)| e.handle() == Some(workload::handle(0)))
        .collect();
    let mut settled_at = None;
    for (at, (id, event)) in events.iter().enumerate() {
        store.apply(*id, event).unwrap();
        let m = store.get(&workload::handle(0)).unwrap();
        // Held settled exactly when the rule says so, from the first event that makes it true.
        assert_eq!(store.settled() == 1, m.settled(), "after {event:?}");
        assert_eq!(matches!(m, Cow::Owned(_)), m.settled());
        if m.settled() {
            settled_at.get_or_insert(at);
        } else {
            assert!(settled_at.is_none(), "unsettled again by {event:?}");
        }
    }
    // Its end: terminal, published, notified and released.
    let m = store.get(&workload::handle(0)).unwrap();
    assert!(m.settled() && m.completion_notified && m.released.is_some());
    assert!(settled_at.is_some());
}

#[test]
fn an_event_that_changes_a_settled_manifest_is_folded_in_and_it_settles_again() {
    let mut store = finished(24);
    let before = store.clone();
    let m = store
        .iter()
        .find(|m| m.exit_verified() && m.retired.is_none())
        .unwrap()
        .into_owned();
    let retire = |reason: &str| {
        LifecycleEvent::OutputRetired(OutputRetired {
            handle: m.handle,
            reason: reason.to_owned(),
            at_unix_ms: 1_800_000_000_000,
        })
    };
    let id = m.ids.terminal.derived(RETIRED);
    assert_eq!(store.check(id, &retire("retention")), Ok(Applied::Changed));
    assert_eq!(store, before, "a check changes nothing");
    assert_eq!(store.apply(id, &retire("retention")), Ok(Applied::Changed));
    assert_eq!(store.settled(), 24, "settled again");
    let after = store.get(&m.handle).unwrap().into_owned();
    assert_eq!(
        after.retired.as_ref().map(|r| r.reason.as_str()),
        Some("retention")
    );
    assert_eq!(
        Manifest {
            retired: None,
            ..after.clone()
        },
        m
    );
    // The same retirement again changes nothing; another one is refused; neither touches it.
    assert_eq!(
        store.apply(id, &retire("retention")),
        Ok(Applied::Unchanged)
    );
    assert_eq!(
        store.apply(id, &retire("clean")),
        Err(Rejection::AlreadyRetired)
    );
    assert_eq!(store.get(&m.handle).unwrap().into_owned(), after);
    // A repeated publication of its terminal event is answered from the frame.
    let terminal = m.terminal.as_ref().unwrap().event_id;
    let publish = LifecycleEvent::LifecyclePublished(LifecyclePublished {
        handle: m.handle,
        event: terminal,
    });
    let id = terminal.derived(PUBLISHED);
    assert_eq!(store.apply(id, &publish), Ok(Applied::Unchanged));
    // Every other process is as it was.
    for (a, b) in store.iter().zip(before.iter()) {
        if a.handle != m.handle {
            assert_eq!(a, b);
        }
    }
}

#[test]
fn an_id_a_settled_manifest_reserved_stays_reserved() {
    let mut store = finished(8);
    let m = store.by_number(3).unwrap().into_owned();
    // A registration that reuses an ID process 3 allocated names it as the holder.
    let mut registration = match workload::event(100 * workload::PHASES * workload::LANES).1 {
        LifecycleEvent::Registered(r) => r,
        other => panic!("not a version 1 registration: {other:?}"),
    };
    registration.handle = Handle(EventId::new_v7());
    registration.ids.terminal = m.ids.terminal;
    let refused = store.apply(EventId::new_v7(), &LifecycleEvent::Registered(registration));
    assert_eq!(
        refused,
        Err(Rejection::IdReserved {
            id: m.ids.terminal,
            handle: m.handle
        })
    );
    // Its own step under its own ID is a repeat of a terminal process: refused as such.
    let (id, running) = workload::event(2 * workload::LANES + 2);
    assert_eq!(running.handle(), Some(m.handle));
    assert_eq!(id, m.ids.running);
    assert!(matches!(
        store.apply(id, &running),
        Err(Rejection::AlreadyTerminal(_))
    ));
}

/// `store` (the first `processes` of the workload, finished) written into a snapshot and read
/// back: the snapshot's manifest frames and the store restored from them.
fn through_a_snapshot(
    store: &ManifestStore,
    processes: u64,
) -> (snapshot::ManifestFrames, ManifestStore) {
    let frames = snapshot::encode_manifests(store, crate::spill::Spill::default()).unwrap();
    let seq = processes * workload::PHASES;
    let file = snapshot::assemble([7; 16], seq, 1, &frames, &[], &Default::default()).unwrap();
    let store = snapshot::decode(&file.to_vec()).unwrap().store;
    drop(file);
    (frames, store)
}

/// The earliest terminal time of `store`'s manifests.
fn earliest_end(store: &ManifestStore) -> u64 {
    store
        .iter()
        .filter_map(|m| m.terminal.as_ref().map(|t| t.at_unix_ms))
        .min()
        .unwrap()
}

#[test]
fn a_snapshot_copies_settled_frames_and_reads_back_the_same_store() {
    let store = finished(32);
    let (frames, back) = through_a_snapshot(&store, 32);
    assert_eq!(back, store);
    assert_eq!(back.settled(), 32);
    // Reading it back and writing it again gives the same bytes.
    let spill = crate::spill::Spill::in_file(tempfile::tempfile().unwrap());
    let again = snapshot::encode_manifests(&back, spill).unwrap();
    let bytes = |f: &snapshot::ManifestFrames| f.frames.chunks().collect::<Vec<_>>().concat();
    assert_eq!(bytes(&again), bytes(&frames));
}

#[test]
fn a_retention_pass_counts_retired_settled_manifests_without_reading_them() {
    use super::retention::{self, KeepReason, Verdict};
    let mut store = finished(24);
    let retirable: Vec<Manifest> = store
        .iter()
        .filter(|m| m.exit_verified())
        .map(Cow::into_owned)
        .collect();
    for m in retirable.iter().step_by(2) {
        let retire = LifecycleEvent::OutputRetired(OutputRetired {
            handle: m.handle,
            reason: "retention".to_owned(),
            at_unix_ms: 1_800_000_000_000,
        });
        store
            .apply(m.ids.terminal.derived(RETIRED), &retire)
            .unwrap();
    }
    let retired = retirable.iter().step_by(2).count() as u64;
    assert!(retired >= 5, "{retired}");
    // Each slot answers whether its output was retired as its manifest does, undecoded.
    for m in store.iter() {
        assert_eq!(store.retired(&m.handle), Some(m.retired.is_some()));
    }
    assert_eq!(store.retired(&workload::handle(1 << 40)), None);
    let (count, rest) = store.unretired();
    assert_eq!(count, retired);
    assert_eq!(rest.count() as u64, store.len() as u64 - retired);
    // The plan is what judging every manifest gives.
    let (now, older) = (1_900_000_000_000, std::time::Duration::from_secs(60));
    let held = [retirable[1].handle].into_iter().collect();
    let plan = retention::plan(&store, now, older, &held);
    let mut judged = retention::Plan::default();
    for m in store.iter() {
        match retention::judge(&m, now, older, &held) {
            Verdict::Retire => judged.retire.push(m.handle),
            Verdict::Retired => judged.already_retired += 1,
            Verdict::Keep(KeepReason::NotTerminal) => judged.not_terminal += 1,
            Verdict::Keep(KeepReason::TooRecent) => judged.too_recent += 1,
            Verdict::Keep(reason) => judged.kept.push(retention::Kept {
                handle: m.handle,
                reason,
            }),
        }
    }
    assert_eq!(plan, judged);
    assert_eq!(plan.already_retired, retired);
    assert!(!plan.retire.is_empty());
}

/// A pass can be due only once the earliest end is as old as its age: `may_be_due` is false
/// exactly while every manifest's verdict keeps it (nothing to retire), for the store built by
/// replay and for the same store restored from a snapshot.
#[test]
fn a_retention_pass_is_due_exactly_when_the_earliest_end_is_old_enough() {
    use super::retention;
    let store = finished(24);
    let (_, restored) = through_a_snapshot(&store, 24);
    let earliest = earliest_end(&store);
    let older = std::time::Duration::from_secs(60);
    let age = 60_000;
    let none = std::collections::HashSet::new();
    for now in [
        earliest,
        earliest + age - 1,
        earliest + age,
        earliest + 10 * age,
    ] {
        let due = retention::may_be_due(&store, now, older);
        assert_eq!(due, now >= earliest + age, "at {now}");
        assert_eq!(
            retention::may_be_due(&restored, now, older),
            due,
            "restored, at {now}"
        );
        if !due {
            assert!(retention::plan(&store, now, older, &none).retire.is_empty());
        }
    }
    assert!(
        !retention::plan(&store, earliest + 10 * age, older, &none)
            .retire
            .is_empty()
    );
    assert!(retention::may_be_due(
        &store,
        earliest,
        std::time::Duration::ZERO
    ));
    assert!(!retention::may_be_due(
        &ManifestStore::new(),
        u64::MAX,
        older
    ));
}

/// The store's bound on ends holds from the moment an end is folded in, before anything
/// settles, and a retirement never raises it: a pass is still judged, never skipped.
#[test]
fn the_earliest_end_is_known_at_once_and_a_retirement_keeps_it() {
    use super::retention;
    let mut growing = ManifestStore::new();
    for n in 0..4 * workload::PHASES {
        let (id, event) = workload::event(n);
        growing.apply(id, &event).unwrap();
        if let LifecycleEvent::Terminal(t) = &event {
            assert!(growing.may_have_ended_by(t.at_unix_ms), "event {n}");
        }
    }
    let mut store = finished(24);
    let earliest = earliest_end(&store);
    let (older, age) = (std::time::Duration::from_secs(60), 60_000);
    let first = store
        .iter()
        .find(|m| {
            m.terminal
                .as_ref()
                .is_some_and(|t| t.at_unix_ms == earliest)
        })
        .map(Cow::into_owned)
        .unwrap();
    let retire = LifecycleEvent::OutputRetired(OutputRetired {
        handle: first.handle,
        reason: "retention".to_owned(),
        at_unix_ms: earliest + age,
    });
    store
        .apply(first.ids.terminal.derived(RETIRED), &retire)
        .unwrap();
    assert!(retention::may_be_due(&store, earliest + age, older));
}

/// A writer keeps settled frames in an unnamed file of its root, not on its heap: the ones it
/// restored and the ones that settle while it runs, read back as a store built in memory
/// reads them, and gone from the root's listing (the file has no name).
#[test]
fn a_writer_spills_settled_frames_into_an_unnamed_file() {
    let options = os_options();
    let half = 40 * workload::PHASES;
    let (dir, lc) = written(half);
    assert!(lc.spills_to_file(), "a fresh writer spills");
    drop(lc);
    let (mut lc, _, _) = super::Lifecycle::open(dir.path(), options.clone()).unwrap();
    assert!(lc.spills_to_file(), "a restored writer spills");
    append_events(&mut lc, half..2 * half);
    let mirror = finished(80);
    assert_eq!(lc.store().settled(), 80);
    assert!(
        *lc.store() == mirror,
        "the spilled store reads as the one in memory"
    );
    lc.snapshot_now().unwrap().unwrap();
    assert!(*lc.store() == mirror, "a snapshot's reads change nothing");
    let names: Vec<_> = std::fs::read_dir(dir.path().join("journal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| n.ends_with(".log")),
        "a name beside the segments: {names:?}"
    );
    drop(lc);
    let (lc, _, _) = super::Lifecycle::open(dir.path(), options).unwrap();
    assert!(lc.spills_to_file());
    assert!(
        *lc.store() == mirror,
        "restored from a snapshot of spilled frames"
    );
}

/// A brief writer (one command's) keeps its settled frames on the heap instead of spilling
/// them, reads and appends as a lasting writer does, and a lasting writer after it spills them.
#[test]
fn a_brief_writer_spills_nothing_and_reads_as_a_lasting_one() {
    let options = os_options();
    let half = 40 * workload::PHASES;
    let (dir, lc) = written(half);
    drop(lc);
    let brief = crate::journal::Tenure::Brief;
    let (mut lc, _, _) = super::Lifecycle::open_for(dir.path(), options.clone(), brief).unwrap();
    assert!(!lc.spills_to_file(), "a brief writer spilled");
    assert!(*lc.store() == finished(40), "a brief writer's restore");
    append_events(&mut lc, half..2 * half);
    let mirror = finished(80);
    assert!(*lc.store() == mirror, "a brief writer's appends");
    drop(lc);
    let (lc, _, _) = super::Lifecycle::open(dir.path(), options).unwrap();
    assert!(lc.spills_to_file(), "a lasting writer after a brief one");
    assert!(*lc.store() == mirror, "restored after a brief writer");
}

/// A writer restored from a snapshot reads its settled manifests' frames where they are in the
/// snapshot file's bytes: none is copied to its heap, brief or lasting, and the store reads,
/// takes appends and writes snapshots as one built in memory does.
#[test]
fn a_restored_writer_reads_settled_frames_in_the_snapshot_file() {
    let options = os_options();
    let half = 40 * workload::PHASES;
    let (dir, mut lc) = written(half);
    lc.snapshot_now().unwrap().unwrap();
    drop(lc);
    let brief = crate::journal::Tenure::Brief;
    let (mut lc, _, _) = super::Lifecycle::open_for(dir.path(), options.clone(), brief).unwrap();
    assert_eq!(lc.store().settled(), 40);
    assert_eq!(
        lc.store().frames_on_heap(),
        0,
        "a brief writer copied frames"
    );
    assert!(*lc.store() == finished(40), "read in place");
    append_events(&mut lc, half..2 * half);
    assert!(lc.store().frames_on_heap() > 0, "new frames are appended");
    let mirror = finished(80);
    assert!(
        *lc.store() == mirror,
        "appends beside the snapshot's frames"
    );
    lc.snapshot_now().unwrap().unwrap();
    drop(lc);
    let (lc, _, _) = super::Lifecycle::open(dir.path(), options).unwrap();
    assert!(lc.spills_to_file());
    assert_eq!(
        lc.store().frames_on_heap(),
        0,
        "a lasting writer kept frames"
    );
    assert!(*lc.store() == mirror, "restored from the second snapshot");
}

/// Past [`super::BRIEF_SETTLED_MAX`] settled manifests a brief writer spills them as a lasting
/// one does: one command on a large root keeps a bounded heap for its life.
#[test]
fn a_brief_writer_of_a_large_root_spills_as_a_lasting_one() {
    let options = os_options();
    let lanes = workload::LANES as usize;
    let processes = (super::BRIEF_SETTLED_MAX / lanes + 1) * lanes;
    let (dir, lc) = written(processes as u64 * workload::PHASES);
    drop(lc);
    let brief = crate::journal::Tenure::Brief;
    let (lc, _, _) = super::Lifecycle::open_for(dir.path(), options, brief).unwrap();
    assert!(lc.store().settled() > super::BRIEF_SETTLED_MAX);
    assert!(
        lc.spills_to_file(),
        "a brief writer kept {processes} on the heap"
    );
}

/// The journal options of these tests: no flush per append (nothing here is about durability).
fn os_options() -> crate::JournalOptions {
    crate::JournalOptions {
        durability: crate::Durability::Os,
        ..crate::JournalOptions::default()
    }
}

/// A root and a lasting writer of it (without a flush per append) that appended the workload's
/// first `events` events.
fn written(events: u64) -> (tempfile::TempDir, super::Lifecycle) {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, _, _) = super::Lifecycle::open(dir.path(), os_options()).unwrap();
    append_events(&mut lc, 0..events);
    (dir, lc)
}

/// Appends the workload's events numbered `events` to `lc`.
fn append_events(lc: &mut super::Lifecycle, events: std::ops::Range<u64>) {
    for n in events {
        let (id, event) = workload::event(n);
        lc.append(id, &event).unwrap();
    }
}

/// Gives `store` spill files in `dir`, as a writer's store has.
fn spill_into(store: &mut ManifestStore, dir: &std::path::Path) {
    let spill_dir = crate::root::dir::Dir::open(dir).unwrap();
    store.spill_into(std::sync::Arc::new(spill_dir)).unwrap();
}

/// A store with a spill directory seals the handles and reservations of each batch of
/// manifests into runs, off the heap, and answers every lookup and every refusal as a store
/// that keeps them all in its tables.
#[test]
fn sealed_handles_and_reservations_answer_as_the_tables_did() {
    let dir = tempfile::tempdir().unwrap();
    let processes = 400;
    let mirror = finished(processes);
    let mut store = ManifestStore::new();
    store.seal_every(64);
    spill_into(&mut store, dir.path());
    for n in 0..processes * workload::PHASES {
        let (id, event) = workload::event(n);
        store.apply(id, &event).unwrap();
    }
    let (handles, reservations) = store.sealed_ids();
    assert!((384..400).contains(&handles), "{handles} handles sealed");
    assert_eq!(reservations, 5 * handles);
    assert!(store == mirror);
    let (mut sealed, mut mirrored) = (store.clone(), mirror.clone());
    for p in (0..processes).step_by(7) {
        let m = mirror.by_number(p + 1).unwrap().into_owned();
        assert_eq!(store.get(&m.handle).as_deref(), Some(&m));
        // Its handle registered again, and each of its IDs reused by a new process: refused
        // alike, naming it.
        let mut again = match workload::event(0).1 {
            LifecycleEvent::Registered(r) => r,
            other => panic!("not a version 1 registration: {other:?}"),
        };
        again.handle = m.handle;
        again.ids = workload::ids(processes + p);
        let probes = [m.ids.running, m.ids.terminal, m.ids.lost, m.ids.completion];
        let mut events = vec![(EventId::new_v7(), again.clone())];
        for id in probes {
            let mut reuse = again.clone();
            reuse.handle = Handle(EventId::new_v7());
            reuse.ids.terminal = id;
            events.push((EventId::new_v7(), reuse));
        }
        for (id, e) in events {
            let e = LifecycleEvent::Registered(e);
            let refused = sealed.apply(id, &e);
            assert!(refused.is_err(), "{refused:?}");
            assert_eq!(refused, mirrored.apply(id, &e));
        }
    }
}

/// A spill directory on a file system without room refuses the frames: they stay on the heap,
/// the store answers as before, and the refusal is said.
#[test]
fn a_refused_spill_keeps_every_frame_where_it_was() {
    let Some(tmpfs) = crate::spill::testing::Tmpfs::mount("64k") else {
        return;
    };
    let mirror = finished(400);
    let mut store = finished(400);
    let spill_dir = crate::root::dir::Dir::open(tmpfs.path()).unwrap();
    let refused = store.spill_into(std::sync::Arc::new(spill_dir));
    let (spills, same) = (store.spills_to_file(), store == mirror);
    drop(store);
    assert!(refused.is_err(), "a 64 KiB tmpfs took every frame");
    assert!(!spills, "the frames are on the heap");
    assert!(same, "the store reads as before");
}

/// A writer keeps each process's slot in spill space once its block is full: a store of more
/// than a block's worth, with one early process still running while the rest finish, answers
/// as the one built in memory; a retirement of an early, spilled process and that process's own
/// end change its slot in place; only the slots after the last whole block stay on the heap.
#[test]
fn slots_leave_the_heap_by_the_block_and_change_in_place() {
    use super::workload::PHASES;
    let dir = tempfile::tempdir().unwrap();
    let processes = 2400;
    let mirror = finished(processes);
    let mut store = ManifestStore::new();
    spill_into(&mut store, dir.path());
    // Process 0 registers and then waits: its other events come after everyone else's.
    let mut late = Vec::new();
    for n in 0..processes * PHASES {
        let (id, event) = workload::event(n);
        let (_, phase) = workload::place(n);
        if event.handle() == Some(workload::handle(0)) && phase > 0 {
            late.push((id, event));
            continue;
        }
        store.apply(id, &event).unwrap();
    }
    let (spilled, on_heap) = store.slots_spilled();
    assert!(spilled, "the slots' blocks are in a file");
    // 32-byte slots, 2048 to a 64 KiB block.
    assert_eq!(on_heap, processes as usize % 2048);
    assert_eq!(store.live().count(), 1, "process 0 is held decoded");
    assert_eq!(store.settled(), processes as usize - 1);
    for (id, event) in late {
        store.apply(id, &event).unwrap();
    }
    assert_eq!(store.live().count(), 0, "process 0 settled in place");
    assert!(
        store == mirror,
        "the spilled store reads as the one in memory"
    );
    // Retire an early process: its spilled slot says so, and the pass counts it.
    let m = store.by_number(3).unwrap().into_owned();
    assert!(m.exit_verified() && m.retired.is_none());
    let retire = LifecycleEvent::OutputRetired(OutputRetired {
        handle: m.handle,
        reason: "retention".to_owned(),
        at_unix_ms: 1_800_000_000_000,
    });
    let (before, _) = store.unretired();
    store
        .apply(m.ids.terminal.derived(RETIRED), &retire)
        .unwrap();
    let (after, _) = store.unretired();
    assert_eq!(after, before + 1);
    let back = store.by_number(3).unwrap();
    assert_eq!(
        back.retired.as_ref().map(|r| r.reason.as_str()),
        Some("retention")
    );
    assert_eq!(store.slots_spilled(), (true, on_heap));
}
