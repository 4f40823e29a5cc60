//! The statements journal-format.md makes where an independent reader, written from the
//! document alone, found it silent or ambiguous and had to copy the binary: each test builds
//! the bytes the statement is about and checks that the code reads them as the document says.
//! A failure here means the document or the code changed; both must change together.

// Helpers outside #[test] functions panic on purpose: a panic is how a test reports failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use procjournal::journal::floor::{FLOOR_FILE, FLOOR_TMP_FILE, Floor};
use procjournal::journal::format::{self, CommitSlot, SegmentHeader};
use procjournal::journal::reader::{JournalReader, Record};
use procjournal::journal::recovery::RecoveryReport;
use procjournal::limits;
use procjournal::{Durability, EventId, EventKind, Journal, JournalOptions, Position};

const PAYLOAD: [u8; 40] = [7; 40];

fn doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("journal-format.md");
    std::fs::read_to_string(path).unwrap()
}

/// The document, with every line break and run of spaces made one space, so that a statement
/// is found whatever the line wrapping.
fn flat_doc() -> String {
    doc().split_whitespace().collect::<Vec<_>>().join(" ")
}

fn assert_documented(statement: &str) {
    assert!(
        flat_doc().contains(statement),
        "journal-format.md no longer says: {statement}"
    );
}

fn segment_path(root: &Path, index: u64) -> PathBuf {
    root.join("journal").join(format!("{index:020}.log"))
}

/// Appends `n` records of 40 bytes to a fresh journal of 4096-byte segments and closes it.
fn write_journal(root: &Path, n: u8) -> Vec<Position> {
    let options = JournalOptions {
        durability: Durability::Sync,
        segment_bytes: 4096,
    };
    let (journal, _) = Journal::open(root, options).unwrap();
    let kind = EventKind::new(3).unwrap();
    (1..=n)
        .map(|i| {
            journal
                .append(EventId::from_bytes([i; 16]), kind, 0, &PAYLOAD)
                .unwrap()
                .position
        })
        .collect()
}

fn read(root: &Path) -> (Vec<Record>, RecoveryReport) {
    JournalReader::open(root).unwrap().records(1).unwrap()
}

fn edit(path: &Path, change: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    change(&mut bytes);
    std::fs::write(path, &bytes).unwrap();
}

/// Both commit slots overwritten with non-zero bytes that do not decode.
fn damage_commit_area(bytes: &mut [u8]) {
    bytes[64..160].fill(0xab);
}

/// A commit slot of segment `header`, neither sealed nor closed.
fn claim(header: &SegmentHeader, generation: u64, committed_seq: u64, end_offset: u32) -> Vec<u8> {
    CommitSlot {
        flags: 0,
        generation,
        committed_seq,
        end_offset,
        next_segment_bytes: 0,
        next_base_seq: 0,
    }
    .encode(header.crc())
    .to_vec()
}

#[test]
fn a_damaged_commit_area_stops_resync_at_the_first_bad_record() {
    assert_documented(
        "when neither slot decodes, nothing is confirmed, so the first bad range ends its records: \
         no resync looks past it",
    );
    for damaged_area in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let positions = write_journal(root, 3);
        let second = positions[1].offset as usize;
        edit(&segment_path(root, 0), |b| {
            // Record 2's seq field: its header checksum fails (row D).
            b[second + 16] ^= 0xff;
            if damaged_area {
                damage_commit_area(b);
            }
        });
        let (records, report) = read(root);
        let seqs: Vec<u64> = records.iter().map(|r| r.position.seq).collect();
        if damaged_area {
            // Record 3 is whole, and not handed out: the bad range is a torn tail.
            assert_eq!(seqs, [1], "{report:?}");
            assert_eq!(report.torn_tails.len(), 1, "{report:?}");
            assert!(report.damaged.is_empty(), "{report:?}");
            assert_eq!(report.damaged_commit_areas, ["00000000000000000000.log"]);
        } else {
            // With the claim known (seq 3 confirmed), the range is damage and record 3 follows.
            assert_eq!(seqs, [1, 3], "{report:?}");
            assert_eq!(report.damaged.len(), 1, "{report:?}");
        }
    }
}

#[test]
fn a_gap_after_a_damaged_commit_area_is_explained_only_by_a_slot_that_decodes() {
    assert_documented(
        "A segment whose commit area is damaged explains a gap after it only as far as a slot \
         that still decodes claims (or its seal names)",
    );
    // 50 records of 88 bytes: segment 0 holds seqs 1..=44, segment 1 the rest.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let positions = write_journal(root, 50);
    assert_eq!(positions[44].segment_index, 1);
    let last0 = positions[43].offset as usize;
    // Neither slot decodes, and seq 44 is gone: the gap is reported beside the damaged area.
    edit(&segment_path(root, 0), |b| {
        b[last0..last0 + format::record_bytes(PAYLOAD.len())].fill(0);
        damage_commit_area(b);
    });
    let (_, report) = read(root);
    assert_eq!(report.damaged_commit_areas, ["00000000000000000000.log"]);
    assert_eq!(report.gaps.len(), 1, "{report:?}");
    assert_eq!(
        (report.gaps[0].after_seq, report.gaps[0].next_seq),
        (43, 45)
    );
    assert!(report.lost_acknowledged.is_empty(), "{report:?}");

    // Cut inside its commit area: slot 0 survives, and its claim explains the gap to seq 45.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_journal(root, 50);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(segment_path(root, 0))
        .unwrap();
    file.set_len(112).unwrap();
    let (records, report) = read(root);
    assert_eq!(records.first().map(|r| r.position.seq), Some(45));
    assert_eq!(report.damaged_commit_areas, ["00000000000000000000.log"]);
    assert!(report.gaps.is_empty(), "{report:?}");
    assert!(report.lost_acknowledged.is_empty(), "{report:?}");
}

#[test]
fn an_unreadable_last_segment_floors_the_next_seq_by_the_largest_segment() {
    let capacity = (limits::SEGMENT_BYTES_MAX as u64 - 64) / 48;
    assert_eq!(capacity, 22_369_620);
    assert_documented(
        "above what a segment of the largest size, 1 GiB, could hold: `(1073741824 - 64) / 48` \
         = 22369620 records",
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_journal(root, 3);
    std::fs::write(segment_path(root, 1), vec![0xff; 4096]).unwrap();
    let (_, report) = read(root);
    assert_eq!(report.bad_segments.len(), 1, "{report:?}");
    assert_eq!(report.next_seq_floor, 3 + 1 + capacity);
}

#[test]
fn last_seq_under_a_floor_without_records_is_the_seq_below_the_floor() {
    assert_documented(
        "the highest seq handed out; with none handed out, `FLOOR.seq - 1` when a floor is in force",
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_journal(root, 50);
    let journal_id = SegmentHeader::decode(&std::fs::read(segment_path(root, 0)).unwrap())
        .unwrap()
        .journal_id;
    // What compaction leaves when the kept segment holds no record yet: segment 1, empty, and
    // a floor at its base seq.
    let header = SegmentHeader {
        format_version: format::FORMAT_VERSION,
        segment_bytes: 4096,
        journal_id,
        segment_index: 1,
        base_seq: 45,
        created_unix_ms: 0,
    };
    let mut segment = header.encode().to_vec();
    segment.resize(4096, 0);
    std::fs::write(segment_path(root, 1), segment).unwrap();
    std::fs::remove_file(segment_path(root, 0)).unwrap();
    let floor = Floor {
        journal_id,
        segment_index: 1,
        seq: 45,
        created_unix_ms: 0,
    };
    std::fs::write(root.join("journal").join(FLOOR_FILE), floor.encode()).unwrap();
    let (records, report) = read(root);
    assert!(records.is_empty());
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.last_seq, Some(44));
}

#[test]
fn leftover_temporary_files_are_reported_in_byte_order() {
    assert_documented(
        "`leftover_tmp_files` | array of string | `*.log.tmp` names and `FLOOR.tmp`, in byte order",
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_journal(root, 1);
    let names = [
        "00000000000000000009.log.tmp",
        FLOOR_TMP_FILE,
        "00000000000000000002.log.tmp",
        "00000000000000000005.log.tmp",
    ];
    for name in names {
        std::fs::write(root.join("journal").join(name), b"").unwrap();
    }
    let mut sorted = names.to_vec();
    sorted.sort_unstable();
    assert_eq!(sorted.last(), Some(&FLOOR_TMP_FILE), "digits sort before F");
    let (_, report) = read(root);
    assert_eq!(report.leftover_tmp_files, sorted);
}

#[test]
fn a_segment_name_above_the_index_range_is_an_unrecognised_file() {
    assert_documented(
        "A file name whose index exceeds 2^40 is not a segment name: it is an unrecognised file",
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_journal(root, 1);
    let above = format!("{:020}.log", limits::SEGMENT_INDEX_MAX + 1);
    std::fs::copy(segment_path(root, 0), root.join("journal").join(&above)).unwrap();
    let (records, report) = read(root);
    assert_eq!(records.len(), 1);
    assert_eq!(report.segments, 1);
    assert_eq!(report.unrecognised_files, [above]);
}

#[test]
fn a_record_that_does_not_fit_starts_a_new_segment_at_its_header_bytes() {
    assert_documented(
        "the rest of the segment stays zero and the record goes to offset `header_bytes` of a new \
         segment (160 in version 2; 64 in version 1",
    );
    let dir = tempfile::tempdir().unwrap();
    let positions = write_journal(dir.path(), 50);
    assert_eq!(
        positions[44],
        Position {
            seq: 45,
            segment_index: 1,
            offset: 160,
        }
    );
}

#[test]
fn of_two_slots_with_one_generation_slot_1_is_the_newest() {
    assert_documented(
        "When both valid slots carry the same `generation` (the writer never writes that), slot 1 \
         is the newest",
    );
    for slot_1_claims in [2u64, 1] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let positions = write_journal(root, 2);
        let (second, end) = (
            positions[1].offset as usize,
            positions[1].offset as usize + format::record_bytes(PAYLOAD.len()),
        );
        edit(&segment_path(root, 0), |b| {
            let header = SegmentHeader::decode(b).unwrap();
            let ends = |seq: u64| if seq == 2 { end as u32 } else { second as u32 };
            let slot_0_claims = 3 - slot_1_claims;
            b[64..112].copy_from_slice(&claim(&header, 5, slot_0_claims, ends(slot_0_claims)));
            b[112..160].copy_from_slice(&claim(&header, 5, slot_1_claims, ends(slot_1_claims)));
            // Record 2 is gone.
            b[second..end].fill(0);
        });
        let (records, report) = read(root);
        assert_eq!(records.len(), 1);
        if slot_1_claims == 2 {
            // Slot 1 claims seq 2, slot 0 confirms seq 1: record 2 was in the last flush.
            assert_eq!(report.unconfirmed_commits.len(), 1, "{report:?}");
            let loss = &report.unconfirmed_commits[0];
            assert_eq!(
                (loss.first_missing_seq, loss.claimed_seq, loss.confirmed_seq),
                (2, 2, 1)
            );
        } else {
            // Slot 1 claims only seq 1: nothing claimed is missing.
            assert!(report.is_clean(), "{report:?}");
        }
    }
}

#[test]
fn a_snapshot_names_the_journal_of_the_first_well_named_segment_usable_or_not() {
    use procjournal::lifecycle::{Lifecycle, snapdir, workload};
    assert_documented(
        "the floor's `journal_id`, else that of the first segment, in index order, whose header \
         decodes and whose index matches its name, usable or not",
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let options = JournalOptions {
        durability: Durability::Sync,
        segment_bytes: 1 << 20,
    };
    let (mut lc, _, _) = Lifecycle::open(root, options).unwrap();
    for n in 0..5 {
        let (id, event) = workload::event(n);
        lc.append(id, &event).unwrap();
    }
    lc.snapshot_now().unwrap().unwrap();
    drop(lc);
    // The only segment made unusable (longer than its header says, row I): it still names the
    // journal, so the snapshot is still this journal's.
    let path = segment_path(root, 0);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.push(0);
    std::fs::write(&path, bytes).unwrap();
    let (_, report) = read(root);
    assert_eq!(report.segments, 0, "{report:?}");
    let verdicts = snapdir::verify(root).unwrap();
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert!(verdicts[0].usable && verdicts[0].chosen, "{verdicts:?}");
}

#[test]
fn snapshot_decoding_accepts_the_versions_it_reads() {
    use procjournal::lifecycle::snapshot::{SNAPSHOT_VERSION, SNAPSHOT_VERSION_MIN};
    assert_documented(&format!(
        "(4) `version` is not between {SNAPSHOT_VERSION_MIN} and {SNAPSHOT_VERSION};"
    ));
    assert_documented(&format!(
        "| 8 | 2 | `version` | `u16` = {SNAPSHOT_VERSION} (1 to {} are read too: below) |",
        SNAPSHOT_VERSION - 1
    ));
}
