//! A brief writer's open that resumes from a snapshot: what it indexes of the records the
//! snapshot covers, against a lasting writer's open and a reader of the same bytes.

use std::os::unix::fs::FileExt;
use std::path::Path;

use super::reader::JournalReader;
use super::*;
use crate::limits::{RECORD_HEADER_BYTES, SEGMENT_BYTES_MIN};

use super::tests::KIND;

fn id_of(i: u64) -> EventId {
    EventId::from_bytes((u128::from(i) + 1).to_le_bytes())
}

fn payload_of(i: u64) -> Vec<u8> {
    (0..40 + i % 50).map(|j| (i + j) as u8).collect()
}

/// Segments of the least size, so that a few hundred records span several.
fn options() -> JournalOptions {
    JournalOptions {
        durability: Durability::Group,
        segment_bytes: SEGMENT_BYTES_MIN,
    }
}

fn open(root: &Path, tenure: Tenure, after_seq: u64) -> (Journal, RecoveryReport, Vec<u64>) {
    let mut visitor = ResumedAt {
        after_seq,
        ids: vec![RetainedId {
            id: id_of(0),
            seq: 1,
            kind: KIND.get(),
        }],
        seen: Vec::new(),
    };
    let (journal, report) =
        Journal::open_resuming(root, options(), tenure, &mut visitor).expect("open");
    (journal, report, visitor.seen)
}

/// Events `0..n` (seq `i + 1`) in segments of the least size, closed by a lasting writer;
/// returns each record's position.
fn build(root: &Path, n: u64) -> Vec<Position> {
    let (journal, _) = Journal::open(root, options()).expect("open");
    let positions = (0..n)
        .map(|i| {
            let appended = journal.append(id_of(i), KIND, 1, &payload_of(i));
            appended.expect("append").position
        })
        .collect();
    drop(journal);
    positions
}

/// Flips a byte of the payload of the record at `at`: its header still verifies.
fn damage_payload(root: &Path, at: Position) {
    let path = root
        .join("journal")
        .join(recovery::segment_file_name(at.segment_index));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("segment");
    let offset = at.offset + RECORD_HEADER_BYTES as u64 + 3;
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, offset).expect("read");
    file.write_all_at(&[byte[0] ^ 0x55], offset).expect("write");
}

/// A brief writer resuming at seq 300 of 400 checks every record as any open does (damage in a
/// covered payload is reported as by a reader and a lasting open) and hands out exactly the
/// records after 300, but indexes only those and the retained IDs it was handed: a retry of
/// either writes nothing, an ID of a covered record that no retry names is unknown to it (and
/// known to a lasting open), and what it appends lands after the last record.
#[test]
fn a_brief_open_indexes_nothing_the_snapshot_covers_and_checks_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let positions = build(root, 400);
    assert!(
        positions[399].segment_index >= 3,
        "the journal must span segments: {:?}",
        positions[399]
    );
    let covered = 300;
    damage_payload(root, positions[10]);
    let (_, read) = JournalReader::open(root)
        .expect("reader")
        .records(1)
        .expect("records");
    assert_eq!(read.damaged.len(), 1, "{read:?}");

    let (journal, report, seen) = open(root, Tenure::Brief, covered);
    assert_eq!(seen, (covered + 1..=400).collect::<Vec<_>>());
    assert_eq!(report.damaged, read.damaged);
    assert_eq!(report.unindexed_records, covered - 1, "{report:?}");
    assert_eq!(journal.last_seq(), 400);
    assert_eq!(
        journal.position_of(id_of(150)),
        None,
        "a covered ID was indexed"
    );
    let again = journal.append(id_of(399), KIND, 1, &payload_of(399));
    assert!(!again.expect("retry").written, "an indexed ID is known");
    let retained = journal.append(id_of(0), KIND, 1, &payload_of(0));
    assert!(!retained.expect("retry").written, "a retained ID is known");
    let next = journal.append(id_of(400), KIND, 1, &payload_of(400));
    assert_eq!(next.expect("append").position.seq, 401);
    drop(journal);

    let (journal, lasting, seen) = open(root, Tenure::Lasting, covered);
    assert_eq!(lasting.damaged, read.damaged);
    assert_eq!(lasting.unindexed_records, 0);
    assert_eq!(seen, (covered + 1..=401).collect::<Vec<_>>());
    assert_eq!(
        journal.position_of(id_of(150)).map(|p| p.seq),
        Some(151),
        "a lasting open indexes every record"
    );
}

/// Without a snapshot (resuming at 0) a brief open indexes every record, as a lasting one does.
#[test]
fn a_brief_open_without_a_snapshot_indexes_every_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path(), 200);
    let (journal, report, seen) = open(dir.path(), Tenure::Brief, 0);
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.unindexed_records, 0);
    assert_eq!(seen.len(), 200);
    assert_eq!(journal.position_of(id_of(150)).map(|p| p.seq), Some(151));
}

/// `n` retained IDs that no record of [`build`]'s carries, ascending by ID, each naming a
/// covered seq, as a snapshot's would.
fn retained(n: usize) -> Vec<RetainedId> {
    let mut ids: Vec<RetainedId> = (0..n as u64)
        .map(|i| RetainedId {
            id: EventId::from_bytes((0xfe << 120 | u128::from(i)).to_le_bytes()),
            seq: 1 + i % 300,
            kind: KIND.get(),
        })
        .collect();
    ids.sort_by_key(|r| r.id.as_bytes());
    ids
}

/// A brief writer keeps the retained IDs it is handed on the heap, up to `RETAINED_HEAP_MAX` of
/// them, and spills more; a lasting one spills any. Wherever they are, a retry of one writes
/// nothing.
#[test]
fn a_brief_open_keeps_a_bounded_number_of_retained_ids_on_the_heap() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path(), 400);
    let cases = [
        (Tenure::Brief, 10, false),
        (Tenure::Brief, RETAINED_HEAP_MAX, false),
        (Tenure::Brief, RETAINED_HEAP_MAX + 1, true),
        (Tenure::Lasting, 10, true),
    ];
    for (tenure, n, spilled) in cases {
        let ids = retained(n);
        let probe = ids[n / 2].id;
        let mut visitor = ResumedAt {
            after_seq: 300,
            ids,
            seen: Vec::new(),
        };
        let (journal, _) =
            Journal::open_resuming(dir.path(), options(), tenure, &mut visitor).expect("open");
        assert_eq!(journal.indexed_ids().1, n, "{tenure:?} with {n}");
        assert_eq!(
            journal.retained_ids_spilled(),
            spilled,
            "{tenure:?} with {n}"
        );
        let retry = journal.append(probe, KIND, 1, b"retry").expect("retry");
        assert!(
            !retry.written,
            "{tenure:?} with {n}: a retained ID is known"
        );
    }
}
