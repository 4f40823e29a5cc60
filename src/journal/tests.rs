//! Journal tests against real files in temporary roots. Recovery rows are named after the decision
//! table in `recovery.rs`; fault injection goes through `storage::Backend`.

use std::path::Path;
use std::sync::Arc;

use super::reader::{JournalReader, Record};
use super::recovery::{self, Row};
use super::*;
use crate::limits::{SEGMENT_BYTES_MIN, SEGMENT_HEADER_BYTES};

pub(super) const KIND: EventKind = match EventKind::new(1) {
    Some(k) => k,
    None => panic!(),
};

fn options(durability: Durability, segment_bytes: usize) -> JournalOptions {
    JournalOptions {
        durability,
        segment_bytes,
    }
}

fn payload_of(i: u64) -> Vec<u8> {
    let len = (i * 37 % 300) as usize;
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

fn id_of(i: u64) -> EventId {
    EventId::from_bytes((u128::from(i) + 1).to_le_bytes())
}

fn append_n(journal: &Journal, from: u64, to: u64) {
    for i in from..to {
        let a = journal.append(id_of(i), KIND, 1, &payload_of(i)).unwrap();
        assert!(a.written);
    }
}

fn read_all(root: &Path) -> (Vec<Record>, RecoveryReport) {
    JournalReader::open(root).unwrap().records(1).unwrap()
}

/// Asserts that the journal under `root` holds exactly events `0..n` in order, and is clean.
fn check(root: &Path, n: u64) {
    let (records, report) = read_all(root);
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(records.len() as u64, n);
    for (i, r) in records.iter().enumerate() {
        let i = i as u64;
        assert_eq!(r.position.seq, i + 1);
        assert_eq!(r.event_id, id_of(i));
        assert_eq!(r.payload, payload_of(i));
        assert_eq!(r.kind, KIND.get());
    }
}

fn segment_path(root: &Path, index: u64) -> std::path::PathBuf {
    root.join("journal")
        .join(recovery::segment_file_name(index))
}

#[test]
fn round_trip_across_segment_boundaries_for_every_policy() {
    for durability in [Durability::Sync, Durability::Group, Durability::Os] {
        let dir = tempfile::tempdir().unwrap();
        let (journal, report) =
            Journal::open(dir.path(), options(durability, SEGMENT_BYTES_MIN)).unwrap();
        assert!(report.is_clean());
        append_n(&journal, 0, 200);
        journal.sync().unwrap();
        assert_eq!(journal.durable_seq(), 200);
        drop(journal);
        check(dir.path(), 200);
        let (listed, _) = recovery::list_segments(&dir.path().join("journal")).unwrap();
        assert!(
            listed.len() > 5,
            "expected many segments, got {}",
            listed.len()
        );
    }
}

#[test]
fn reopen_continues_the_sequence_and_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..5u64 {
        let (journal, report) =
            Journal::open(dir.path(), options(Durability::Sync, SEGMENT_BYTES_MIN)).unwrap();
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(journal.last_seq(), round * 30);
        append_n(&journal, round * 30, round * 30 + 30);
    }
    check(dir.path(), 150);
}

#[test]
fn appending_an_existing_id_writes_nothing_and_returns_the_original_position() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) =
        Journal::open(dir.path(), options(Durability::Group, SEGMENT_BYTES_MIN)).unwrap();
    append_n(&journal, 0, 10);
    let first = journal.position_of(id_of(3)).unwrap();
    let again = journal
        .append(id_of(3), KIND, 1, b"different payload")
        .unwrap();
    assert!(!again.written);
    assert_eq!(again.position, first);
    assert_eq!(journal.last_seq(), 10);
    drop(journal);
    // And after a reopen the index is rebuilt from disk.
    let (journal, _) =
        Journal::open(dir.path(), options(Durability::Group, SEGMENT_BYTES_MIN)).unwrap();
    let again = journal.append(id_of(3), KIND, 1, b"x").unwrap();
    assert!(!again.written);
    assert_eq!(again.position, first);
    drop(journal);
    check(dir.path(), 10);
}

#[test]
fn a_second_writer_on_the_same_root_gets_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_journal, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let err = Journal::open(dir.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::Root(crate::root::RootError::Locked { .. })
        ),
        "{err}"
    );
    // Readers need no lock.
    assert!(JournalReader::open(dir.path()).is_ok());
}

#[test]
fn payload_over_the_limit_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) =
        Journal::open(dir.path(), options(Durability::Os, SEGMENT_BYTES_MIN)).unwrap();
    let limit = journal.payload_limit();
    assert!(journal.append(id_of(0), KIND, 1, &vec![1u8; limit]).is_ok());
    let err = journal
        .append(id_of(1), KIND, 1, &vec![1u8; limit + 1])
        .unwrap_err();
    assert!(matches!(err, JournalError::PayloadTooLarge { .. }));
    assert_eq!(journal.last_seq(), 1);
}

#[test]
fn concurrent_group_appenders_all_become_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(dir.path(), options(Durability::Group, 64 * 1024)).unwrap();
    let journal = Arc::new(journal);
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let journal = Arc::clone(&journal);
            std::thread::spawn(move || {
                for i in 0..100u64 {
                    let seq = journal
                        .append(EventId::new_v7(), KIND, 1, &(t * 1000 + i).to_le_bytes())
                        .unwrap()
                        .position
                        .seq;
                    assert!(journal.durable_seq() >= seq);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(journal.durable_seq(), 800);
    let (records, report) = read_all(dir.path());
    assert!(report.is_clean());
    assert_eq!(records.len(), 800);
}

#[test]
fn follower_sees_records_appended_after_it_started_across_rotations() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) =
        Journal::open(dir.path(), options(Durability::Os, SEGMENT_BYTES_MIN)).unwrap();
    append_n(&journal, 0, 5);
    let reader = JournalReader::open(dir.path()).unwrap();
    let mut seen = Vec::new();
    let (mut follower, _) = reader.follow(2, |r| seen.push(r.position.seq)).unwrap();
    assert_eq!(seen, vec![2, 3, 4, 5]);
    append_n(&journal, 5, 120);
    while follower.poll(|r| seen.push(r.position.seq)).unwrap() > 0 {}
    assert_eq!(seen, (2..=120).collect::<Vec<_>>());
    assert_eq!(follower.poll(|_| panic!("nothing new")).unwrap(), 0);
}

#[test]
fn follower_of_an_empty_root_picks_up_the_first_segment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("journal")).unwrap();
    let reader = JournalReader::open(dir.path()).unwrap();
    let (mut follower, _) = reader.follow(1, |_| panic!("empty")).unwrap();
    let (journal, _) =
        Journal::open(dir.path(), options(Durability::Os, SEGMENT_BYTES_MIN)).unwrap();
    append_n(&journal, 0, 3);
    let mut seen = Vec::new();
    follower.poll(|r| seen.push(r.position.seq)).unwrap();
    assert_eq!(seen, vec![1, 2, 3]);
}

#[test]
fn segment_header_is_first_and_records_follow_it() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) =
        Journal::open(dir.path(), options(Durability::Sync, SEGMENT_BYTES_MIN)).unwrap();
    let a = journal.append(id_of(0), KIND, 1, b"x").unwrap();
    assert_eq!(a.position.offset, SEGMENT_HEADER_BYTES as u64);
    let bytes = std::fs::read(segment_path(dir.path(), 0)).unwrap();
    assert_eq!(bytes.len(), SEGMENT_BYTES_MIN);
    let header = format::SegmentHeader::decode(&bytes).unwrap();
    assert_eq!(header.base_seq, 1);
    let _ = Row::Garbage;
}
