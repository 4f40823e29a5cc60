//! The golden journal of format version 1, `tests/data/journal-v1/`, written once by
//! `examples/make_golden_journal.rs` (segments of 4096 bytes, `Durability::Sync`, twelve events).
//!
//! This fixture must keep opening, read-only and writable, in every later version of procjournal:
//! that is the whole point of it. Never regenerate it and never edit it; when the format changes,
//! add `tests/data/journal-vN/` and a test like this one beside it. The tests only ever work on a
//! copy in a temporary directory, so the committed bytes are never touched (a writable open takes a
//! `LOCK` and may zero a torn tail).

// Helpers outside #[test] functions panic on purpose: a panic is how a test reports failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use procjournal::codec::{self, CODEC_VERSION};
use procjournal::journal::format::{FORMAT_VERSION, FORMAT_VERSION_V1, SegmentHeader};
use procjournal::journal::reader::{JournalReader, Record};
use procjournal::{Durability, EventId, EventKind, Journal, JournalOptions, Position};

const SEGMENT_BYTES: usize = 4096;
const SEGMENT_FILES: [&str; 3] = [
    "00000000000000000000.log",
    "00000000000000000001.log",
    "00000000000000000002.log",
];

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/journal-v1")
}

/// A copy of the fixture's root in a fresh temporary directory.
fn copy_of_fixture() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let to = tmp.path().join("journal");
    std::fs::create_dir(&to).unwrap();
    for name in SEGMENT_FILES {
        std::fs::copy(fixture_dir().join("journal").join(name), to.join(name)).unwrap();
    }
    tmp
}

fn pattern(seq: u8, len: usize) -> Vec<u8> {
    (0..len).map(|j| (j * 7 + usize::from(seq)) as u8).collect()
}

/// One expected record: seq, kind, codec version, payload, segment and offset.
struct Expected {
    seq: u64,
    kind: u16,
    codec_version: u8,
    payload: Vec<u8>,
    segment_index: u64,
    offset: u64,
}

/// What the fixture holds, written out independently of the program that made it.
fn expected() -> Vec<Expected> {
    let rows: [(u8, u16, u8, Vec<u8>, u64, u64); 12] = [
        (1, 1, 1, b"\x01\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00true\x01\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00/bin/true".to_vec(), 0, 64),
        (2, 2, 0, Vec::new(), 0, 160),
        (3, 3, 0, vec![0x2a], 0, 208),
        (4, 4, 0, pattern(4, 7), 0, 264),
        (5, 1, 0, pattern(5, 8), 0, 320),
        (6, 2, 1, vec![0x01, 0xff, 0xff, 0xff, 0xff], 0, 376),
        (7, 3, 0, pattern(7, 1000), 0, 432),
        (8, 4, 0, pattern(8, 2000), 0, 1480),
        (9, 1, 0, pattern(9, 3000), 1, 64),
        (10, 2, 1, b"\x02\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00exit\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00pid\x92\x10\x00\x00\x00\x00\x00\x00".to_vec(), 1, 3112),
        (11, 3, 0, pattern(11, 1500), 2, 64),
        (12, 4, 0, pattern(12, 1200), 2, 1616),
    ];
    rows.into_iter()
        .map(
            |(seq, kind, codec_version, payload, segment_index, offset)| Expected {
                seq: u64::from(seq),
                kind,
                codec_version,
                payload,
                segment_index,
                offset,
            },
        )
        .collect()
}

fn id(seq: u8) -> EventId {
    EventId::from_bytes([seq; 16])
}

#[track_caller]
fn assert_fixture_records(records: &[Record]) {
    let expected = expected();
    assert_eq!(records.len(), expected.len());
    for (r, e) in records.iter().zip(&expected) {
        assert_eq!(
            r.position,
            Position {
                seq: e.seq,
                segment_index: e.segment_index,
                offset: e.offset,
            }
        );
        assert_eq!(r.event_id, id(e.seq as u8));
        assert_eq!(r.kind, e.kind);
        assert_eq!(r.codec_version, e.codec_version);
        assert_eq!(r.payload, e.payload, "payload of seq {}", e.seq);
    }
}

#[test]
fn the_fixture_is_three_whole_segments_of_one_journal() {
    let dir = fixture_dir().join("journal");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names, SEGMENT_FILES,
        "the fixture holds exactly its segments"
    );
    assert!(
        !fixture_dir().join("LOCK").exists(),
        "a fixture has no LOCK"
    );
    let mut journal_id = None;
    for (index, (name, base_seq)) in SEGMENT_FILES.iter().zip([1u64, 9, 11]).enumerate() {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(bytes.len(), SEGMENT_BYTES);
        assert_eq!(&bytes[..8], b"PJOURNL\0");
        assert_eq!(bytes[8..10], FORMAT_VERSION_V1.to_le_bytes());
        let header = SegmentHeader::decode(&bytes).unwrap();
        assert_eq!(header.segment_bytes as usize, SEGMENT_BYTES);
        assert_eq!(header.segment_index, index as u64);
        assert_eq!(header.base_seq, base_seq);
        assert_eq!(
            *journal_id.get_or_insert(header.journal_id),
            header.journal_id
        );
        // Re-encoding the decoded header gives back the bytes on disk.
        assert_eq!(header.encode()[..], bytes[..64]);
    }
}

#[test]
fn the_fixture_reads_back_exactly() {
    let root = copy_of_fixture();
    let reader = JournalReader::open(root.path()).unwrap();
    let (records, report) = reader.records(1).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.segments, 3);
    assert_eq!(report.records, 12);
    assert_eq!(report.last_seq, Some(12));
    assert_fixture_records(&records);

    // The codec-1 payloads still decode to the values they were written from.
    let (status, name, argv): (u32, String, Vec<String>) =
        codec::decode(CODEC_VERSION, &records[0].payload).unwrap();
    assert_eq!(
        (status, name.as_str(), argv),
        (1, "true", vec!["/bin/true".to_owned()])
    );
    let exit: Option<i32> = codec::decode(CODEC_VERSION, &records[5].payload).unwrap();
    assert_eq!(exit, Some(-1));
    let map: BTreeMap<String, i64> = codec::decode(CODEC_VERSION, &records[9].payload).unwrap();
    assert_eq!(
        map,
        BTreeMap::from([("exit".to_owned(), 0), ("pid".to_owned(), 4242)])
    );

    // A scan from the middle and a follower see the same records.
    let (tail, _) = reader.records(10).unwrap();
    assert_eq!(tail.len(), 3);
    assert_eq!(tail[0].position.seq, 10);
    let mut followed = Vec::new();
    let (mut follower, report) = reader.follow(1, |r| followed.push(r.to_owned())).unwrap();
    assert!(report.is_clean());
    assert_eq!(follower.poll(|_| panic!("nothing new")).unwrap(), 0);
    assert_fixture_records(&followed);
}

#[test]
fn the_fixture_opens_writable_and_extends() {
    let root = copy_of_fixture();
    let options = JournalOptions {
        durability: Durability::Sync,
        segment_bytes: SEGMENT_BYTES,
    };
    let (journal, report) = Journal::open(root.path(), options.clone()).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(journal.last_seq(), 12);
    assert_eq!(journal.position_of(id(7)).map(|p| p.offset), Some(432));

    let kind = EventKind::new(1).unwrap();
    // Appending an ID the fixture already holds writes nothing.
    let again = journal.append(id(3), kind, 0, b"ignored").unwrap();
    assert!(!again.written);
    assert_eq!(
        again.position,
        Position {
            seq: 3,
            segment_index: 0,
            offset: 208,
        }
    );
    // New events continue the sequence in a new version 2 segment (the upgrade: a version 1
    // segment has no commit area, so it is never appended to, and never written again).
    let next = journal
        .append(id(13), kind, CODEC_VERSION, &codec::encode(&13u64).unwrap())
        .unwrap();
    assert!(next.written);
    assert_eq!(
        next.position,
        Position {
            seq: 13,
            segment_index: 3,
            offset: 160,
        }
    );
    let big = journal.append(id(14), kind, 0, &pattern(14, 3000)).unwrap();
    assert_eq!(big.position.seq, 14);
    assert_eq!(big.position.segment_index, 3);
    drop(journal);
    let dir = root.path().join("journal");
    let upgraded = std::fs::read(dir.join("00000000000000000003.log")).unwrap();
    assert_eq!(upgraded[8..10], FORMAT_VERSION.to_le_bytes());
    for name in SEGMENT_FILES {
        assert_eq!(
            std::fs::read(dir.join(name)).unwrap(),
            std::fs::read(fixture_dir().join("journal").join(name)).unwrap(),
            "{name}: a version 1 segment was written by the upgrade"
        );
    }

    // Read-only and writable opens agree, and the old records are untouched.
    let (records, report) = JournalReader::open(root.path())
        .unwrap()
        .records(1)
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(records.len(), 14);
    assert_fixture_records(&records[..12]);
    assert_eq!(records[12].event_id, id(13));
    assert_eq!(records[13].payload, pattern(14, 3000));
    let (journal, report) = Journal::open(root.path(), options).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(journal.last_seq(), 14);
}
