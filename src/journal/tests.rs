//! Journal tests against real files in temporary roots. Recovery rows are named after the decision
//! table in `recovery.rs`; fault injection goes through `storage::Backend`.

use std::path::Path;
use std::sync::Arc;

use super::reader::{JournalReader, Record};
use super::recovery::{self, Row, TornTail};
use super::*;
use crate::limits::{RECORD_HEADER_BYTES, SEGMENT_BYTES_MIN, SEGMENT_RECORDS_OFFSET};

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
        let (listed, _, _) = recovery::list_segments(
            &crate::root::dir::Dir::reader(&dir.path().join("journal")).unwrap(),
        )
        .unwrap();
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

/// A writer this process is releasing (its last handle dropping on another thread, as after a
/// supervisor's shutdown) is waited for: the next open takes the root over instead of failing.
#[test]
fn an_open_waits_for_a_writer_of_this_process_that_is_going() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    append_n(&journal, 0, 3);
    let dropper = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        drop(journal);
    });
    let (again, report) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(again.last_seq(), 3);
    dropper.join().unwrap();
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
    assert_eq!(a.position.offset, SEGMENT_RECORDS_OFFSET as u64);
    let bytes = std::fs::read(segment_path(dir.path(), 0)).unwrap();
    assert_eq!(bytes.len(), SEGMENT_BYTES_MIN);
    let header = format::SegmentHeader::decode(&bytes).unwrap();
    assert_eq!(header.base_seq, 1);
    let _ = Row::Garbage;
}

// ---------------------------------------------------------------------------------------------
// Recovery: one test per row of the decision table in recovery.rs.

const SEG: usize = SEGMENT_BYTES_MIN;

/// Writes events `0..n` with small segments and returns their positions, the way a writer
/// that was killed leaves them: every event but the last acknowledged (each under its own
/// commit), the last one written but never acknowledged, nothing closed.
fn build(root: &Path, n: u64) -> Vec<Position> {
    let (journal, _) = Journal::open(root, options(Durability::Group, SEG)).unwrap();
    let positions = (0..n)
        .map(|i| {
            let payload = payload_of(i);
            let appended = if i + 1 < n {
                journal.append(id_of(i), KIND, 1, &payload)
            } else {
                journal.append_deferred(id_of(i), KIND, 1, &payload)
            };
            appended.unwrap().position
        })
        .collect();
    journal.crash();
    positions
}

fn record_len(i: u64) -> usize {
    format::record_bytes(payload_of(i).len())
}

fn edit(root: &Path, segment: u64, f: impl FnOnce(&mut Vec<u8>)) {
    let path = segment_path(root, segment);
    let mut bytes = std::fs::read(&path).unwrap();
    f(&mut bytes);
    std::fs::write(&path, bytes).unwrap();
}

fn seqs(records: &[Record]) -> Vec<u64> {
    records.iter().map(|r| r.position.seq).collect()
}

/// Reopens writable, asserts the single torn tail has `row` and was zeroed, and that events
/// `0..survivors` are there and appending then reopening works.
fn assert_torn_tail_cut(root: &Path, row: Row, survivors: u64) {
    let (journal, report) = Journal::open(root, options(Durability::Sync, SEG)).unwrap();
    assert!(report.is_crash_residue_only(), "{report:?}");
    assert_eq!(report.torn_tails.len(), 1, "{report:?}");
    assert_eq!(report.torn_tails[0].row, row, "{report:?}");
    assert!(report.torn_tails[0].zeroed);
    append_n(&journal, survivors, survivors + 3);
    drop(journal);
    check(root, survivors + 3);
}

#[test]
fn row_b_zero_tail_is_a_clean_end() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 3);
    let (records, report) = read_all(dir.path());
    assert!(report.is_clean());
    assert_eq!(seqs(&records), vec![1, 2, 3]);
}

#[test]
fn row_c_zero_header_before_bytes_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 3);
    let last = p[2];
    edit(dir.path(), last.segment_index, |b| {
        let at = last.offset as usize;
        b[at..at + crate::limits::RECORD_HEADER_BYTES].fill(0);
        assert!(
            b[at + crate::limits::RECORD_HEADER_BYTES..at + record_len(2)]
                .iter()
                .any(|&x| x != 0)
        );
    });
    assert_torn_tail_cut(dir.path(), Row::ZeroGap, 2);
}

#[test]
fn row_d_garbage_after_the_last_record_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 3);
    let end = p[2].offset as usize + record_len(2);
    edit(dir.path(), p[2].segment_index, |b| {
        b[end..end + 100].fill(0x5a)
    });
    assert_torn_tail_cut(dir.path(), Row::Garbage, 3);
}

#[test]
fn row_e_torn_payload_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 4);
    assert!(!payload_of(3).is_empty());
    edit(dir.path(), p[3].segment_index, |b| {
        let at = p[3].offset as usize + crate::limits::RECORD_HEADER_BYTES;
        b[at] ^= 0xff;
    });
    assert_torn_tail_cut(dir.path(), Row::TornPayload, 3);
}

#[test]
fn row_f_length_past_the_end_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 2);
    let end = p[1].offset as usize + record_len(1);
    // A header whose checksum holds but whose payload cannot fit in what is left of the segment.
    let payload = vec![7u8; SEG - end];
    let mut record = vec![0u8; format::record_bytes(payload.len())];
    let (journal_chain, seq) = {
        let bytes = std::fs::read(segment_path(dir.path(), p[1].segment_index)).unwrap();
        let (h, _) = format::decode_record(&bytes[p[1].offset as usize..]).unwrap();
        (h.header_crc, h.seq + 1)
    };
    format::encode_record(
        &format::RecordFields {
            kind: 1,
            codec_version: 1,
            seq,
            event_id: [9; 16],
            prev_crc: journal_chain,
            payload: &payload,
        },
        &mut record,
    );
    edit(dir.path(), p[1].segment_index, |b| {
        b[end..end + crate::limits::RECORD_HEADER_BYTES]
            .copy_from_slice(&record[..crate::limits::RECORD_HEADER_BYTES]);
    });
    assert_torn_tail_cut(dir.path(), Row::LengthPastEnd, 2);
}

#[test]
fn row_g_a_stale_record_at_the_tail_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 3);
    assert_eq!(p[0].segment_index, p[2].segment_index);
    // A checksum-valid copy of record 1 after record 3: right bytes, wrong place in the sequence.
    edit(dir.path(), p[0].segment_index, |b| {
        let src = p[0].offset as usize..p[0].offset as usize + record_len(0);
        let dst = p[2].offset as usize + record_len(2);
        let copy = b[src].to_vec();
        b[dst..dst + copy.len()].copy_from_slice(&copy);
    });
    assert_torn_tail_cut(dir.path(), Row::Stale, 3);
}

#[test]
fn row_h_corruption_followed_by_valid_records_is_reported_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 6);
    let victim = p[2];
    assert_eq!(victim.segment_index, p[3].segment_index);
    edit(dir.path(), victim.segment_index, |b| {
        b[victim.offset as usize + 20] ^= 0x10
    });
    let before = std::fs::read(segment_path(dir.path(), victim.segment_index)).unwrap();

    let (journal, report) = Journal::open(dir.path(), options(Durability::Sync, SEG)).unwrap();
    assert!(report.torn_tails.is_empty(), "{report:?}");
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    let damage = &report.damaged[0];
    assert_eq!(damage.row, Row::Garbage);
    assert_eq!(damage.start_offset, victim.offset);
    assert_eq!(damage.end_offset, p[3].offset);
    assert_eq!((damage.last_good_seq, damage.next_good_seq), (2, Some(4)));
    // Appends continue at the end; the damaged bytes are untouched.
    append_n(&journal, 6, 8);
    drop(journal);
    let after = std::fs::read(segment_path(dir.path(), victim.segment_index)).unwrap();
    let range = victim.offset as usize..p[3].offset as usize;
    assert_eq!(before[range.clone()], after[range]);
    let (records, report) = read_all(dir.path());
    assert_eq!(report.damaged.len(), 1);
    assert_eq!(seqs(&records), vec![1, 2, 4, 5, 6, 7, 8]);
}

#[test]
fn row_h_a_bad_tail_with_records_in_a_later_segment_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 40);
    let last_of_first = p.iter().rev().find(|q| q.segment_index == 0).unwrap();
    let i = p.iter().position(|q| q == last_of_first).unwrap() as u64;
    edit(dir.path(), 0, |b| b[last_of_first.offset as usize + 1] ^= 1);
    let (journal, report) = Journal::open(dir.path(), options(Durability::Sync, SEG)).unwrap();
    drop(journal);
    assert!(report.torn_tails.is_empty(), "{report:?}");
    assert_eq!(report.damaged.len(), 1);
    assert_eq!(report.damaged[0].segment_index, 0);
    assert_eq!(report.damaged[0].next_good_seq, None);
    let (records, _) = read_all(dir.path());
    assert!(!seqs(&records).contains(&(i + 1)));
    assert_eq!(records.len(), 39);
}

#[test]
fn row_i_a_bad_segment_header_is_reported_and_the_rest_reconciles() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 60);
    let (listed, _, _) = recovery::list_segments(
        &crate::root::dir::Dir::reader(&dir.path().join("journal")).unwrap(),
    )
    .unwrap();
    assert!(listed.len() >= 3);
    edit(dir.path(), 1, |b| b[format::SEG_BASE_SEQ_OFFSET] ^= 1);
    let (records, report) = read_all(dir.path());
    assert_eq!(report.bad_segments.len(), 1, "{report:?}");
    assert_eq!(
        report.bad_segments[0].file_name,
        recovery::segment_file_name(1)
    );
    assert_eq!(report.gaps.len(), 1);
    let segment_0_last = records
        .iter()
        .filter(|r| r.position.segment_index == 0)
        .count() as u64;
    assert_eq!(report.gaps[0].after_seq, segment_0_last);
    assert!(records.iter().all(|r| r.position.segment_index != 1));
    assert_eq!(records.last().unwrap().position.seq, 60);
    // A writer still opens, keeps the bad segment as it is, and appends after the last good one.
    let (journal, _) = Journal::open(dir.path(), options(Durability::Sync, SEG)).unwrap();
    assert_eq!(
        journal
            .append(id_of(60), KIND, 1, b"after")
            .unwrap()
            .position
            .seq,
        61
    );
}

#[test]
fn row_j_a_missing_segment_is_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 60);
    std::fs::remove_file(segment_path(dir.path(), 1)).unwrap();
    let (records, report) = read_all(dir.path());
    assert_eq!(report.gaps.len(), 1, "{report:?}");
    assert!(report.bad_segments.is_empty());
    assert_eq!(records.last().unwrap().position.seq, 60);
}

#[test]
fn a_segment_from_another_journal_is_a_bad_segment() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    build(a.path(), 60);
    build(b.path(), 60);
    std::fs::copy(segment_path(b.path(), 1), segment_path(a.path(), 1)).unwrap();
    let (_, report) = read_all(a.path());
    assert_eq!(report.bad_segments.len(), 1, "{report:?}");
    assert!(report.bad_segments[0].reason.contains("another journal"));
}

#[test]
fn leftover_tmp_segment_is_removed_by_a_writable_open() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 2);
    let tmp = dir
        .path()
        .join("journal")
        .join(format!("{}.tmp", recovery::segment_file_name(1)));
    std::fs::write(&tmp, b"partial").unwrap();
    let (_, report) = read_all(dir.path());
    assert_eq!(report.leftover_tmp_files.len(), 1);
    // `journal verify` reports it too (and so is not clean), and removes nothing.
    let verified = JournalReader::open(dir.path()).unwrap().verify().unwrap();
    assert_eq!(verified.leftover_tmp_files.len(), 1, "{verified:?}");
    assert!(!verified.is_clean() && verified.is_crash_residue_only());
    assert!(tmp.exists());
    let (journal, report) = Journal::open(dir.path(), options(Durability::Sync, SEG)).unwrap();
    assert_eq!(report.leftover_tmp_files.len(), 1);
    assert!(!tmp.exists());
    append_n(&journal, 2, 40);
    drop(journal);
    check(dir.path(), 40);
    let verified = JournalReader::open(dir.path()).unwrap().verify().unwrap();
    assert!(verified.leftover_tmp_files.is_empty(), "{verified:?}");
}

/// Files in the journal directory that are no segment, spare or leftover
/// (a stray copy, garbage, a name that is not UTF-8) are reported by `verify` and by a writable
/// open, never read as records and never removed; the journal opens and appends as before.
#[test]
fn unrecognised_files_are_reported_and_left_alone() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 2);
    let journal_dir = dir.path().join("journal");
    let stray = journal_dir.join("notes.txt");
    std::fs::write(&stray, b"garbage \x00\xff").unwrap();
    let copy = journal_dir.join(format!("{}.bak", recovery::segment_file_name(0)));
    std::fs::copy(journal_dir.join(recovery::segment_file_name(0)), &copy).unwrap();
    let odd = journal_dir.join(std::ffi::OsStr::from_bytes(b"x\xff.log"));
    std::fs::write(&odd, b"?").unwrap();
    let spare = journal_dir.join(format!("{:020}.spare", 9));
    std::fs::write(&spare, [0u8; 64]).unwrap();
    let verified = JournalReader::open(dir.path()).unwrap().verify().unwrap();
    let names = |r: &RecoveryReport| r.unrecognised_files.clone();
    let expected = vec![
        format!("{}.bak", recovery::segment_file_name(0)),
        "notes.txt".to_owned(),
        "x\u{fffd}.log".to_owned(),
    ];
    assert_eq!(names(&verified), expected, "a spare is not unrecognised");
    assert!(!verified.is_clean() && !verified.is_crash_residue_only());
    let (journal, report) = Journal::open(dir.path(), options(Durability::Sync, SEG)).unwrap();
    assert_eq!(names(&report), expected);
    append_n(&journal, 2, 40);
    drop(journal);
    let (records, report) = read_all(dir.path());
    assert_eq!(records.len(), 40);
    assert_eq!(names(&report), expected);
    // Nothing else was found: the strays were neither read nor taken for damage.
    let only_strays = RecoveryReport {
        unrecognised_files: Vec::new(),
        ..report
    };
    assert!(only_strays.is_clean(), "{only_strays:?}");
    for f in [&stray, &copy, &odd] {
        assert!(f.exists(), "{f:?} was removed");
    }
}

// ---------------------------------------------------------------------------------------------
// Torn tails at every byte, bit flips everywhere.

#[test]
fn torn_last_record_at_every_byte_offset_zeroed_or_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 5);
    let last = p[4];
    let start = last.offset as usize;
    let end = start + record_len(4);
    let pristine = std::fs::read(segment_path(dir.path(), last.segment_index)).unwrap();
    let mut cut_records = 0;
    for cut in start..end {
        for truncate in [false, true] {
            let path = segment_path(dir.path(), last.segment_index);
            let mut bytes = pristine.clone();
            if truncate {
                bytes.truncate(cut);
            } else {
                bytes[cut..end].fill(0);
            }
            std::fs::write(&path, &bytes).unwrap();
            // Cutting inside trailing zero bytes (padding, or a zero payload byte) changes nothing.
            bytes.resize(pristine.len(), 0);
            let survivors = if bytes == pristine { 5 } else { 4 };
            cut_records += usize::from(survivors == 4);
            let (journal, report) =
                Journal::open(dir.path(), options(Durability::Sync, SEG)).unwrap();
            assert!(report.is_crash_residue_only(), "cut {cut}: {report:?}");
            assert_eq!(
                journal.last_seq(),
                survivors,
                "cut {cut} truncate {truncate}"
            );
            append_n(&journal, survivors, survivors + 2);
            drop(journal);
            check(dir.path(), survivors + 2);
            std::fs::write(&path, &pristine).unwrap();
        }
    }
    // Every cut before the last non-zero byte of the record tore it.
    assert!(cut_records >= 2 * (crate::limits::RECORD_HEADER_BYTES + payload_of(4).len() - 8));
}

#[test]
fn every_bit_flip_in_the_tail_record_drops_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 4);
    let last = p[3];
    let path = segment_path(dir.path(), last.segment_index);
    let pristine = std::fs::read(&path).unwrap();
    for bit in 0..record_len(3) * 8 {
        let mut bytes = pristine.clone();
        bytes[last.offset as usize + bit / 8] ^= 1 << (bit % 8);
        std::fs::write(&path, &bytes).unwrap();
        let (records, report) = read_all(dir.path());
        assert_eq!(seqs(&records), vec![1, 2, 3], "bit {bit}");
        assert_eq!(report.torn_tails.len(), 1, "bit {bit}: {report:?}");
        assert!(report.damaged.is_empty(), "bit {bit}: {report:?}");
    }
    std::fs::write(&path, &pristine).unwrap();
    check(dir.path(), 4);
}

#[test]
fn every_bit_flip_in_a_middle_record_is_reported_and_never_returned() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 5);
    let victim = p[2];
    assert_eq!(victim.segment_index, p[4].segment_index);
    let path = segment_path(dir.path(), victim.segment_index);
    let pristine = std::fs::read(&path).unwrap();
    for bit in 0..record_len(2) * 8 {
        let mut bytes = pristine.clone();
        bytes[victim.offset as usize + bit / 8] ^= 1 << (bit % 8);
        std::fs::write(&path, &bytes).unwrap();
        let (records, report) = read_all(dir.path());
        assert_eq!(seqs(&records), vec![1, 2, 4, 5], "bit {bit}");
        assert_eq!(report.damaged.len(), 1, "bit {bit}: {report:?}");
        assert!(report.torn_tails.is_empty(), "bit {bit}: {report:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Fault injection: the Nth write or flush fails.

use super::fault::{Fault, Faults, FaultyBackend};

#[test]
fn a_failed_write_or_flush_poisons_and_reopening_gives_a_consistent_prefix() {
    for fault in [Fault::Eio, Fault::Enospc, Fault::ShortWrite] {
        for (fail_write, fail_flush) in (0..24)
            .map(|n| (Some(n), None))
            .chain((0..24).map(|n| (None, Some(n))))
        {
            let dir = tempfile::tempdir().unwrap();
            let case = format!("{fault:?} write {fail_write:?} flush {fail_flush:?}");
            let backend = Arc::new(FaultyBackend {
                faults: Faults::new(fail_write, fail_flush, fault),
            });
            let mut acked = 0u64;
            let mut attempted = 0u64;
            if let Ok((journal, _)) = Journal::open_with_backend(
                dir.path(),
                options(Durability::Sync, SEG),
                Tenure::Lasting,
                backend,
                &mut |_| {},
            ) {
                let mut failed = false;
                for i in 0..40u64 {
                    attempted = i + 1;
                    match journal.append(id_of(i), KIND, 1, &payload_of(i)) {
                        Ok(a) => {
                            assert!(!failed, "{case}: append succeeded after a failure");
                            assert_eq!(a.position.seq, i + 1);
                            acked = i + 1;
                        }
                        Err(JournalError::Poisoned { .. }) => failed = true,
                        Err(e) => panic!("{case}: unexpected {e}"),
                    }
                    if failed {
                        // Sticky: every later call says so.
                        assert!(
                            matches!(journal.sync(), Err(JournalError::Poisoned { .. })),
                            "{case}"
                        );
                        assert!(matches!(
                            journal.append(id_of(99), KIND, 1, b"x"),
                            Err(JournalError::Poisoned { .. })
                        ));
                        break;
                    }
                }
            }
            let (journal, report) =
                Journal::open(dir.path(), options(Durability::Sync, SEG)).unwrap();
            assert!(report.is_crash_residue_only(), "{case}: {report:?}");
            let present = journal.last_seq();
            assert!(
                present >= acked && present <= attempted,
                "{case}: {present} vs {acked}..={attempted}"
            );
            append_n(&journal, present, present + 2);
            drop(journal);
            check(dir.path(), present + 2);
        }
    }
}

#[test]
fn a_follower_and_a_scan_agree_past_mid_segment_damage() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 8);
    assert_eq!(p[2].segment_index, p[4].segment_index);
    // The damage is there before the follower starts; the writer then goes on into new segments.
    edit(dir.path(), p[2].segment_index, |b| {
        b[p[2].offset as usize + 9] ^= 0x40
    });
    let reader = JournalReader::open(dir.path()).unwrap();
    let mut followed = Vec::new();
    let (mut follower, _) = reader.follow(1, |r| followed.push(r.position.seq)).unwrap();
    let (journal, _) = Journal::open(dir.path(), options(Durability::Os, SEG)).unwrap();
    append_n(&journal, 8, 80);
    while follower.poll(|r| followed.push(r.position.seq)).unwrap() > 0 {}
    let (records, report) = read_all(dir.path());
    assert_eq!(report.damaged.len(), 1);
    assert_eq!(followed, seqs(&records));
    assert!(!followed.contains(&3));
}

#[test]
fn a_follower_started_before_damage_appears_still_matches_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(dir.path(), options(Durability::Os, SEG)).unwrap();
    append_n(&journal, 0, 2);
    let reader = JournalReader::open(dir.path()).unwrap();
    let mut followed = Vec::new();
    let (mut follower, _) = reader.follow(1, |r| followed.push(r.position.seq)).unwrap();
    append_n(&journal, 2, 6);
    let segment = journal.position_of(id_of(3)).unwrap();
    // Damage record 4 (index 3) before the follower has read it; the writer moves on.
    edit(dir.path(), segment.segment_index, |b| {
        b[segment.offset as usize + 9] ^= 0x40
    });
    append_n(&journal, 6, 80);
    while follower.poll(|r| followed.push(r.position.seq)).unwrap() > 0 {}
    let (records, _) = read_all(dir.path());
    assert_eq!(followed, seqs(&records));
    assert!(!followed.contains(&4) && followed.contains(&5));
}

#[test]
fn verify_reports_duplicate_event_ids_that_a_scan_does_not_look_for() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 3);
    // Forge record 3 into a copy of record 1's event ID, re-sealing its checksums.
    edit(dir.path(), p[2].segment_index, |b| {
        let at = p[2].offset as usize;
        let (h, payload) = format::decode_record(&b[at..]).unwrap();
        let payload = payload.to_vec();
        let mut record = vec![0u8; format::record_bytes(payload.len())];
        format::encode_record(
            &format::RecordFields {
                kind: h.kind,
                codec_version: h.codec_version,
                seq: h.seq,
                event_id: id_of(0).as_bytes(),
                prev_crc: h.prev_crc,
                payload: &payload,
            },
            &mut record,
        );
        b[at..at + record.len()].copy_from_slice(&record);
    });
    let reader = JournalReader::open(dir.path()).unwrap();
    assert!(reader.scan(1, |_| {}).unwrap().is_clean());
    let report = reader.verify().unwrap();
    assert_eq!(report.duplicate_ids.len(), 1);
    assert_eq!(
        (
            report.duplicate_ids[0].first_seq,
            report.duplicate_ids[0].duplicate_seq
        ),
        (1, 3)
    );
}

// ---------------------------------------------------------------------------------------------
// The commit point (format version 2): acknowledged loss is damage, unacknowledged residue is
// not, and no seq that was ever acknowledged is used twice.

/// Events `0..n` appended under `Group` (each acknowledged by its own commit) and closed cleanly:
/// every one of them is claimed and confirmed.
fn build_closed(root: &Path, n: u64, segment_bytes: usize) -> Vec<Position> {
    let (journal, _) = Journal::open(root, options(Durability::Group, segment_bytes)).unwrap();
    let positions = (0..n)
        .map(|i| {
            journal
                .append(id_of(i), KIND, 1, &payload_of(i))
                .unwrap()
                .position
        })
        .collect();
    drop(journal);
    positions
}

/// Opens writable, appends one event and returns its seq and the open's report.
fn append_after_open(root: &Path, id: u64) -> (u64, RecoveryReport) {
    let (journal, report) = Journal::open(root, options(Durability::Sync, SEG)).unwrap();
    let seq = journal
        .append(id_of(id), KIND, 1, b"after")
        .unwrap()
        .position
        .seq;
    (seq, report)
}

#[test]
fn acknowledged_damage_at_the_tail_is_reported_at_every_open_and_never_zeroed() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_closed(dir.path(), 4, SEG);
    let last = p[3];
    edit(dir.path(), last.segment_index, |b| {
        b[last.offset as usize + 20] ^= 0x40;
    });
    let damaged = std::fs::read(segment_path(dir.path(), last.segment_index)).unwrap();
    let (records, report) = read_all(dir.path());
    assert_eq!(seqs(&records), vec![1, 2, 3]);
    assert!(report.torn_tails.is_empty(), "{report:?}");
    assert!(!report.is_crash_residue_only(), "{report:?}");
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    assert_eq!(report.damaged[0].last_good_seq, 3);
    assert_eq!(report.lost_acknowledged.len(), 1, "{report:?}");
    assert_eq!(report.lost_acknowledged[0].first_missing_seq, 4);
    assert_eq!(report.lost_acknowledged[0].confirmed_seq, 4);
    assert_eq!(report.next_seq_floor, 5);

    let (seq, opened) = append_after_open(dir.path(), 100);
    assert_eq!(seq, 5, "seq 4 was acknowledged and must not be used again");
    assert_eq!(opened.lost_acknowledged, report.lost_acknowledged);
    let after = std::fs::read(segment_path(dir.path(), last.segment_index)).unwrap();
    let records_end = last.offset as usize + record_len(3);
    assert_eq!(
        after[SEGMENT_RECORDS_OFFSET..records_end],
        damaged[SEGMENT_RECORDS_OFFSET..records_end],
        "the damaged record was rewritten"
    );
    // The loss stays on record: every later open reports it again.
    for _ in 0..2 {
        let (_, report) = read_all(dir.path());
        assert_eq!(report.lost_acknowledged.len(), 1, "{report:?}");
        assert!(report.gaps.is_empty(), "{report:?}");
        assert_eq!(report.last_seq, Some(5));
        drop(Journal::open(dir.path(), options(Durability::Sync, SEG)).unwrap());
    }
}

#[test]
fn truncating_the_tail_segment_at_every_offset_never_reuses_an_acknowledged_seq() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_closed(dir.path(), 12, 8192);
    let last = *p.last().unwrap();
    assert_eq!(last.segment_index, 0, "all in one segment");
    let records_end = last.offset as usize + record_len(11);
    let pristine = std::fs::read(segment_path(dir.path(), 0)).unwrap();
    // Cutting only the zero padding of the last record loses nothing.
    let written_end = 1 + pristine[..records_end]
        .iter()
        .rposition(|&b| b != 0)
        .unwrap();
    let mut cuts: Vec<usize> = (0..=records_end + 16).step_by(8).collect();
    cuts.extend([1, 63, 65, 100, 159, 161, records_end - 1, 8192]);
    for cut in cuts {
        let case = tempfile::tempdir().unwrap();
        std::fs::create_dir(case.path().join("journal")).unwrap();
        std::fs::write(segment_path(case.path(), 0), &pristine[..cut]).unwrap();
        let (seq, report) = append_after_open(case.path(), 100);
        assert!(
            seq > 12,
            "cut {cut}: appended at seq {seq}, reusing an acknowledged seq"
        );
        if cut < written_end {
            assert!(
                !report.is_crash_residue_only(),
                "cut {cut}: acknowledged records lost without a damage report: {report:?}"
            );
        } else {
            assert!(report.is_crash_residue_only(), "cut {cut}: {report:?}");
            assert_eq!(seq, 13, "cut {cut}");
        }
    }
}

#[test]
fn a_file_cut_inside_its_commit_area_is_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    build_closed(dir.path(), 12, 8192);
    let pristine = std::fs::read(segment_path(dir.path(), 0)).unwrap();
    let name = recovery::segment_file_name(0);
    // Inside the first slot, between the slots, inside the second, one byte short of the records.
    for cut in [65, 100, 111, 112, 113, 130, SEGMENT_RECORDS_OFFSET - 1] {
        let case = tempfile::tempdir().unwrap();
        std::fs::create_dir(case.path().join("journal")).unwrap();
        std::fs::write(segment_path(case.path(), 0), &pristine[..cut]).unwrap();
        let (_, report) = read_all(case.path());
        assert_eq!(report.damaged_commit_areas, vec![name.clone()], "cut {cut}");
        // Not a second time as lost or unconfirmed records, nor as damaged bytes.
        assert!(report.lost_acknowledged.is_empty(), "cut {cut}: {report:?}");
        assert!(
            report.unconfirmed_commits.is_empty(),
            "cut {cut}: {report:?}"
        );
        assert!(report.damaged.is_empty(), "cut {cut}: {report:?}");
        assert!(report.torn_tails.is_empty(), "cut {cut}: {report:?}");
        assert!(!report.is_crash_residue_only(), "cut {cut}");
        // A writable open reports it once too, and never reuses a seq.
        let (seq, report) = append_after_open(case.path(), 100);
        assert!(seq > 12, "cut {cut}: seq {seq}");
        assert_eq!(report.damaged_commit_areas, vec![name.clone()], "cut {cut}");
        assert!(report.lost_acknowledged.is_empty(), "cut {cut}: {report:?}");
        assert!(
            report.unconfirmed_commits.is_empty(),
            "cut {cut}: {report:?}"
        );
    }
}

#[test]
fn a_deleted_tail_segment_is_reported_and_never_reuses_a_seq() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_closed(dir.path(), 60, SEG);
    let tail = p.last().unwrap().segment_index;
    assert!(tail >= 2);
    std::fs::remove_file(segment_path(dir.path(), tail)).unwrap();
    let (records, report) = read_all(dir.path());
    assert!(records.len() < 60);
    assert_eq!(report.missing_segments.len(), 1, "{report:?}");
    assert_eq!(report.missing_segments[0].segment_index, tail);
    assert!(!report.is_crash_residue_only());
    let (seq, _) = append_after_open(dir.path(), 100);
    assert!(seq > 60, "appended at seq {seq}");
}

/// A writable open that appends nothing (a host that opens, sees the damage and stops) must not
/// make a segment that stands in for the lost one: before, it took the lost one's name with a
/// base past its seqs and, holding no record, hid the loss from every later scan.
#[test]
fn a_deleted_tail_segment_stays_reported_after_opens_that_append_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_closed(dir.path(), 60, SEG);
    let tail = p.last().unwrap().segment_index;
    std::fs::remove_file(segment_path(dir.path(), tail)).unwrap();
    for open in 0..3 {
        let (journal, report) = Journal::open(dir.path(), options(Durability::Sync, SEG)).unwrap();
        assert_eq!(report.missing_segments.len(), 1, "open {open}: {report:?}");
        assert_eq!(
            report.missing_segments[0].segment_index, tail,
            "open {open}"
        );
        drop(journal);
        assert!(!segment_path(dir.path(), tail).exists(), "open {open}");
    }
    let (_, report) = read_all(dir.path());
    assert_eq!(report.missing_segments.len(), 1, "{report:?}");
    assert!(!report.is_crash_residue_only());
    // Records after it do not hide it either: the gap they leave is named by the seal.
    let (seq, report) = append_after_open(dir.path(), 100);
    assert!(seq > 60, "appended at seq {seq}");
    assert_eq!(report.missing_segments.len(), 1, "{report:?}");
    let (_, report) = read_all(dir.path());
    assert_eq!(report.missing_segments[0].segment_index, tail, "{report:?}");
}

#[test]
fn an_unacknowledged_record_on_disk_after_a_hole_is_dropped_as_a_torn_tail_not_damage() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(dir.path(), options(Durability::Group, SEG)).unwrap();
    append_n(&journal, 0, 3);
    // Two records written after the last commit; power loss kept the second, not the first.
    let first = journal.append_deferred(id_of(3), KIND, 1, b"lost").unwrap();
    let second = journal.append_deferred(id_of(4), KIND, 1, b"kept").unwrap();
    assert_eq!(first.position.segment_index, second.position.segment_index);
    journal.crash();
    edit(dir.path(), first.position.segment_index, |b| {
        let at = first.position.offset as usize;
        b[at..at + record_len_of(b"lost")].fill(0);
    });
    let (records, report) = read_all(dir.path());
    assert_eq!(seqs(&records), vec![1, 2, 3]);
    assert!(report.is_crash_residue_only(), "{report:?}");
    assert!(report.damaged.is_empty(), "{report:?}");
    assert_eq!(report.torn_tails.len(), 1, "{report:?}");
    assert_eq!(report.torn_tails[0].row, Row::ZeroGap);
    let (journal, _) = Journal::open(dir.path(), options(Durability::Sync, SEG)).unwrap();
    assert_eq!(journal.last_seq(), 3);
    append_n(&journal, 3, 6);
    drop(journal);
    check(dir.path(), 6);
}

fn record_len_of(payload: &[u8]) -> usize {
    format::record_bytes(payload.len())
}

#[test]
fn a_claim_whose_flush_never_returned_is_an_unconfirmed_commit_not_damage() {
    let dir = tempfile::tempdir().unwrap();
    // Events 1..=4 acknowledged, each under its own commit: the last claim (seq 4) is in the
    // slot written before the flush that was still running when the power went.
    let p = build(dir.path(), 5);
    for victim in [p[3], p[4]] {
        edit(dir.path(), victim.segment_index, |b| {
            let at = victim.offset as usize;
            b[at..at + RECORD_HEADER_BYTES].fill(0);
        });
    }
    let (records, report) = read_all(dir.path());
    assert_eq!(seqs(&records), vec![1, 2, 3]);
    assert!(report.is_crash_residue_only(), "{report:?}");
    assert!(report.lost_acknowledged.is_empty(), "{report:?}");
    assert_eq!(report.unconfirmed_commits.len(), 1, "{report:?}");
    assert_eq!(report.unconfirmed_commits[0].first_missing_seq, 4);
    assert_eq!(report.unconfirmed_commits[0].claimed_seq, 4);
    assert_eq!(report.unconfirmed_commits[0].confirmed_seq, 3);
    let (seq, _) = append_after_open(dir.path(), 100);
    assert_eq!(seq, 5, "a claimed seq is never used again");
    // The recovery sealed the old segment over what it holds: nothing to report any more.
    let (records, report) = read_all(dir.path());
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(seqs(&records), vec![1, 2, 3, 5]);
}

/// Opens `root` as a writer of `tenure` under `Group`, on a backend whose flushes fail from
/// the `first_failing`th on (counted from 0; negative: none fails).
fn open_flushes_failing(
    root: &Path,
    tenure: Tenure,
    first_failing: i64,
) -> Result<(Journal, RecoveryReport), JournalError> {
    let backend = Arc::new(FaultyBackend {
        faults: Faults::new(None, Some(first_failing), Fault::Eio),
    });
    let options = options(Durability::Group, SEG);
    Journal::open_with_backend(root, options, tenure, backend, &mut |_| {})
}

#[test]
fn a_clean_close_lets_the_next_open_flush_nothing_and_a_crash_does_not() {
    let open_failing_flushes = |root: &Path| open_flushes_failing(root, Tenure::Lasting, 0);
    let dir = tempfile::tempdir().unwrap();
    build_closed(dir.path(), 3, SEG);
    let (journal, report) = open_failing_flushes(dir.path()).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(journal.last_seq(), 3);
    // A record written after the clean close, then a crash before any commit covers it.
    journal
        .append_deferred(id_of(3), KIND, 1, b"unflushed")
        .unwrap();
    journal.crash();
    // After a crash the open must flush what the page cache may hold: the first flush fails.
    assert!(open_failing_flushes(dir.path()).is_err());
}

/// A root whose journal is one segment of the bytes `pristine`, the byte at `at` changed.
fn root_with_stray(pristine: &[u8], at: usize) -> tempfile::TempDir {
    let case = tempfile::tempdir().unwrap();
    std::fs::create_dir(case.path().join("journal")).unwrap();
    let mut bytes = pristine.to_vec();
    bytes[at] = 0x5a;
    std::fs::write(segment_path(case.path(), 0), &bytes).unwrap();
    case
}

/// Bytes that a writer which resumed after a clean close left past the claimed end (it lost
/// power before its first commit) are found wherever they are. The scan reads the records only
/// as far as the claim and checks the rest of the file block by block, so a stray byte in the
/// first bytes it checks, at either side of a block boundary, or in the file's last byte is a
/// torn tail (which a writable open zeroes before it appends), exactly as a scan of the whole
/// segment finds it. A file shorter than its segment is only reported short.
#[test]
fn a_stray_byte_anywhere_past_a_clean_close_is_a_torn_tail() {
    let block = crate::limits::SCAN_BLOCK_BYTES;
    let segment = 4 * block;
    let pristine_root = tempfile::tempdir().unwrap();
    let p = build_closed(pristine_root.path(), 5, segment);
    assert!(p.iter().all(|q| q.segment_index == 0));
    let pristine = std::fs::read(segment_path(pristine_root.path(), 0)).unwrap();
    assert_eq!(pristine.len(), segment);
    let end = p[4].offset as usize + record_len(4);
    let checked_from = end + RECORD_HEADER_BYTES;
    let strays = [
        checked_from,
        checked_from + 7,
        2 * block - 1,
        2 * block,
        segment - 1,
    ];
    for at in strays {
        let case = root_with_stray(&pristine, at);
        let (records, report) = read_all(case.path());
        assert_eq!(seqs(&records), vec![1, 2, 3, 4, 5], "stray at {at}");
        let torn = TornTail {
            segment_index: 0,
            start_offset: end as u64,
            end_offset: at as u64 + 1,
            row: Row::ZeroGap,
            zeroed: false,
        };
        assert_eq!(report.torn_tails, vec![torn.clone()], "stray at {at}");
        assert!(report.is_crash_residue_only(), "stray at {at}: {report:?}");
        let (journal, opened) =
            Journal::open(case.path(), options(Durability::Sync, segment)).unwrap();
        assert_eq!(
            opened.torn_tails,
            vec![TornTail {
                zeroed: true,
                ..torn
            }],
            "stray at {at}"
        );
        append_n(&journal, 5, 6);
        drop(journal);
        // Clean again: the stray byte is gone, so no later scan finds it among new records.
        check(case.path(), 6);
    }
    let cut = 2 * block + 100;
    let case = tempfile::tempdir().unwrap();
    std::fs::create_dir(case.path().join("journal")).unwrap();
    std::fs::write(segment_path(case.path(), 0), &pristine[..cut]).unwrap();
    let (records, report) = read_all(case.path());
    assert_eq!(seqs(&records), vec![1, 2, 3, 4, 5]);
    assert_eq!(report.short_segments, vec![recovery::segment_file_name(0)]);
    assert!(report.torn_tails.is_empty(), "{report:?}");
    assert!(report.is_crash_residue_only(), "{report:?}");
}

proptest::proptest! {
    /// The block check of a clean close's tail agrees with a byte-by-byte search: zeroes of any
    /// length, with at most one non-zero byte anywhere (across page boundaries too).
    #[test]
    fn all_zero_agrees_with_a_byte_search(
        len in 0usize..3 * crate::limits::PAGE_BYTES,
        stray in proptest::option::of((0usize..3 * crate::limits::PAGE_BYTES, 1u8..=255)),
    ) {
        let mut bytes = vec![0u8; len];
        if let Some((at, value)) = stray.filter(|(at, _)| *at < len) {
            bytes[at] = value;
        }
        proptest::prop_assert_eq!(recovery::all_zero(&bytes), bytes.iter().all(|&b| b == 0));
    }
}

#[test]
fn the_first_segment_is_small_and_the_spare_comes_only_when_it_fills() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(
        dir.path(),
        options(Durability::Os, crate::limits::SEGMENT_BYTES_DEFAULT),
    )
    .unwrap();
    let journal_dir = dir.path().join("journal");
    let names = || {
        let mut n: Vec<String> = std::fs::read_dir(&journal_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        n.sort();
        n
    };
    append_n(&journal, 0, 10);
    assert_eq!(names(), vec![recovery::segment_file_name(0)]);
    assert_eq!(
        std::fs::metadata(segment_path(dir.path(), 0))
            .unwrap()
            .len(),
        crate::limits::SEGMENT_BYTES_INITIAL as u64
    );
    // Fill the first segment: it rotates into one twice its size.
    let payload = vec![7u8; 4000];
    let mut i = 10;
    while journal.position_of(id_of(i - 1)).unwrap().segment_index == 0 {
        journal.append(id_of(i), KIND, 1, &payload).unwrap();
        i += 1;
    }
    assert_eq!(
        std::fs::metadata(segment_path(dir.path(), 1))
            .unwrap()
            .len(),
        2 * crate::limits::SEGMENT_BYTES_INITIAL as u64
    );
    drop(journal);
    assert!(names().iter().all(|n| !n.ends_with(".spare")));
}

/// A writer that opens a segment an earlier one filled past half and appends a few records (a
/// single `run`) makes no spare: before, every such open zero-filled, synced and left a spare
/// that its exit waited for and the next open deleted. One that goes on appending makes its
/// spare in time, and rotates into it.
#[test]
fn a_short_writer_on_a_segment_past_half_makes_no_spare() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || options(Durability::Group, crate::limits::SEGMENT_BYTES_DEFAULT);
    let spares = || {
        std::fs::read_dir(dir.path().join("journal"))
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_str().unwrap().ends_with(".spare")
            })
            .count()
    };
    let payload = vec![7u8; 4000];
    let half = crate::limits::SEGMENT_BYTES_INITIAL / 2;
    let mut i = 0;
    {
        let (journal, _) = Journal::open(dir.path(), opts()).unwrap();
        while journal
            .position_of(id_of(i))
            .map_or(0, |p| p.offset as usize)
            <= half
        {
            i += 1;
            journal.append(id_of(i), KIND, 1, &payload).unwrap();
        }
    }
    // The first writer crossed half its room: its spare is left for the next open to remove.
    assert_eq!(spares(), 1);
    {
        let (journal, _) = Journal::open(dir.path(), opts()).unwrap();
        for _ in 0..5 {
            i += 1;
            journal.append(id_of(i), KIND, 1, &payload).unwrap();
        }
    }
    assert_eq!(spares(), 0, "a few appends past half made a spare");
    let (journal, _) = Journal::open(dir.path(), opts()).unwrap();
    while journal.position_of(id_of(i)).unwrap().segment_index == 0 {
        i += 1;
        journal.append(id_of(i), KIND, 1, &payload).unwrap();
    }
    drop(journal);
    let report = crate::journal::reader::JournalReader::open(dir.path())
        .unwrap()
        .verify()
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
}

// ---------------------------------------------------------------------------------------------
// Rules journal-format.md states that an independent reader got wrong.

/// The journal's identity comes from the first segment, in index order, whose header decodes and
/// whose index matches its name, even when that segment is then rejected (here: too long), so a
/// later segment of another journal is not used.
#[test]
fn the_journal_id_comes_from_the_first_decodable_segment_even_a_rejected_one() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    build_closed(a.path(), 60, SEG);
    build_closed(b.path(), 60, SEG);
    let (listed, _, _) =
        recovery::list_segments(&crate::root::dir::Dir::reader(&a.path().join("journal")).unwrap())
            .unwrap();
    assert!(listed.len() >= 3);
    edit(a.path(), 0, |bytes| bytes.extend_from_slice(&[0u8; 8]));
    std::fs::copy(segment_path(b.path(), 1), segment_path(a.path(), 1)).unwrap();
    let (records, report) = read_all(a.path());
    let reasons: Vec<(&str, &str)> = report
        .bad_segments
        .iter()
        .map(|s| (s.file_name.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 2, "{report:?}");
    assert_eq!(reasons[0].0, recovery::segment_file_name(0));
    assert!(reasons[0].1.contains("longer than"), "{reasons:?}");
    assert_eq!(reasons[1].0, recovery::segment_file_name(1));
    assert!(reasons[1].1.contains("another journal"), "{reasons:?}");
    assert!(records.iter().all(|r| r.position.segment_index >= 2));
    assert!(!records.is_empty());
}

/// Row I's checks run in the documented order: the name, then the journal, then the base seq,
/// then the length; the reason reported is the first that fails.
#[test]
fn row_i_reasons_follow_the_documented_order() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    build_closed(a.path(), 60, SEG);
    build_closed(b.path(), 60, SEG);
    // Segment 1 of another journal, renamed to 2: wrong name and wrong journal; the name wins.
    std::fs::copy(segment_path(b.path(), 1), segment_path(a.path(), 2)).unwrap();
    // Segment 1 of another journal, which also goes back in seq and is too long: the journal wins.
    let mut foreign = std::fs::read(segment_path(b.path(), 1)).unwrap();
    foreign.extend_from_slice(&[0u8; 8]);
    std::fs::write(segment_path(a.path(), 1), &foreign).unwrap();
    let (_, report) = read_all(a.path());
    let reason = |index: u64| {
        report
            .bad_segments
            .iter()
            .find(|s| s.file_name == recovery::segment_file_name(index))
            .map(|s| s.reason.clone())
            .unwrap_or_default()
    };
    assert!(reason(2).contains("file name says 2"), "{report:?}");
    assert!(reason(1).contains("another journal"), "{report:?}");
    // Our own segment 1 put back, made too long and made to go back in seq: base seq first.
    let c = tempfile::tempdir().unwrap();
    build_closed(c.path(), 60, SEG);
    edit(c.path(), 2, |bytes| {
        bytes.extend_from_slice(&[0u8; 8]);
        let header = format::SegmentHeader::decode(bytes).unwrap();
        let moved = format::SegmentHeader {
            base_seq: 1,
            ..header
        };
        bytes[..crate::limits::SEGMENT_HEADER_BYTES].copy_from_slice(&moved.encode());
    });
    let (_, report) = read_all(c.path());
    let bad = report
        .bad_segments
        .iter()
        .find(|s| s.file_name == recovery::segment_file_name(2))
        .unwrap();
    assert!(bad.reason.contains("does not follow"), "{report:?}");
}

/// `last_good_seq` of a damaged range is the last record accepted before it anywhere in the
/// journal: for damage at the start of a segment, the previous segment's last record.
#[test]
fn last_good_seq_of_damage_at_a_segment_start_is_the_previous_segments_last() {
    let dir = tempfile::tempdir().unwrap();
    let p = build_closed(dir.path(), 60, SEG);
    let first_of_1 = *p.iter().find(|q| q.segment_index == 1).unwrap();
    let last_of_0 = p.iter().filter(|q| q.segment_index == 0).count() as u64;
    edit(dir.path(), 1, |b| b[first_of_1.offset as usize + 2] ^= 1);
    let (_, report) = read_all(dir.path());
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    assert_eq!(report.damaged[0].segment_index, 1);
    assert_eq!(report.damaged[0].last_good_seq, last_of_0);
    assert_eq!(report.damaged[0].next_good_seq, Some(first_of_1.seq + 1));
}

/// A writer that leaves segments moves their index entries into sealed runs, off the heap, and
/// still answers every ID where its record is: a lookup, a retried append (written once), and
/// the same answers as a fresh open's table. (`idindex.rs`'s proptest seals at any point and
/// compacts across runs.)
#[test]
fn a_writer_seals_the_index_of_segments_it_left_and_answers_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || options(Durability::Os, 64 * 1024);
    let (journal, _) = Journal::open(dir.path(), opts()).unwrap();
    let n = 20_000;
    append_n(&journal, 0, n);
    let sealed = journal.sealed_ids();
    assert!(sealed >= 4096, "{sealed} entries sealed");
    assert_eq!(journal.indexed_ids(), (n as usize, 0));
    let positions = positions_in_order(&journal, n);
    let retry = journal.append(id_of(7), KIND, 1, &payload_of(7)).unwrap();
    assert!(!retry.written, "a retry of a sealed ID wrote again");
    assert_eq!(retry.position, positions[7]);
    drop(journal);
    let (journal, _) = Journal::open(dir.path(), opts()).unwrap();
    for (i, p) in positions.iter().enumerate() {
        assert_eq!(journal.position_of(id_of(i as u64)), Some(*p), "ID {i}");
    }
    check(dir.path(), n);
}

/// A brief writer's open (one command's) leaves the index it built on the heap: nothing sealed
/// where a lasting writer's open seals, and every answer the same, a retried append included;
/// a lasting writer after it seals again.
#[test]
fn a_brief_writers_open_seals_nothing_and_answers_as_a_lasting_ones() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || options(Durability::Os, 64 * 1024);
    let (journal, _) = Journal::open(dir.path(), opts()).unwrap();
    let n = 20_000;
    append_n(&journal, 0, n);
    let positions = positions_in_order(&journal, n);
    drop(journal);
    let brief = |path: &std::path::Path| {
        let backend = super::default_backend();
        Journal::open_with_backend(path, opts(), Tenure::Brief, backend, &mut |_| {}).unwrap()
    };
    let (journal, _) = brief(dir.path());
    assert_eq!(journal.sealed_ids(), 0, "a brief writer's open sealed");
    assert_eq!(journal.indexed_ids(), (n as usize, 0));
    for (i, p) in positions.iter().enumerate() {
        assert_eq!(journal.position_of(id_of(i as u64)), Some(*p), "ID {i}");
    }
    let retry = journal.append(id_of(7), KIND, 1, &payload_of(7)).unwrap();
    assert!(
        !retry.written,
        "a retry of an ID the open indexed wrote again"
    );
    assert_eq!(retry.position, positions[7]);
    append_n(&journal, n, n + 10);
    drop(journal);
    let (journal, _) = Journal::open(dir.path(), opts()).unwrap();
    let sealed = journal.sealed_ids();
    assert!(
        sealed >= 4096,
        "a lasting writer's open sealed {sealed} entries"
    );
    drop(journal);
    check(dir.path(), n + 10);
}

/// Where each of the IDs `0..n` is, checked to be the seqs `1..=n` in order.
fn positions_in_order(journal: &Journal, n: u64) -> Vec<Position> {
    let positions: Vec<Position> = (0..n)
        .map(|i| journal.position_of(id_of(i)).unwrap())
        .collect();
    for (i, p) in positions.iter().enumerate() {
        assert_eq!(p.seq, i as u64 + 1);
    }
    positions
}

/// Within one segment the table is bounded too: a writer whose active segment holds more records
/// than the table's bound seals them, the active segment's own, and answers every ID as before,
/// retries included; so does a reopen, and so does a writer appending after it.
#[test]
fn the_index_table_stays_bounded_within_one_segment() {
    let dir = tempfile::tempdir().unwrap();
    // Segments grow to 64 MiB: the last one holds more records than the table's bound.
    let opts = || options(Durability::Os, 64 << 20);
    let (journal, _) = Journal::open(dir.path(), opts()).unwrap();
    let n = 240_000;
    append_n(&journal, 0, n);
    let table = journal.indexed_ids().0 - journal.sealed_ids();
    assert!(
        table < super::TABLE_MAX_ENTRIES,
        "{table} entries in the table"
    );
    assert_eq!(journal.indexed_ids(), (n as usize, 0));
    let positions = positions_in_order(&journal, n);
    let last = positions[n as usize - 1].segment_index;
    let in_last = positions.iter().filter(|p| p.segment_index == last).count();
    assert!(
        in_last > super::TABLE_MAX_ENTRIES,
        "{in_last} records in the active segment"
    );
    for i in [0, 7, 65_535, 65_536, n - 1] {
        let retry = journal.append(id_of(i), KIND, 1, &payload_of(i)).unwrap();
        assert!(!retry.written, "a retry of ID {i} wrote again");
        assert_eq!(retry.position, positions[i as usize]);
    }
    drop(journal);
    let (journal, _) = Journal::open(dir.path(), opts()).unwrap();
    for (i, p) in positions.iter().enumerate() {
        assert_eq!(journal.position_of(id_of(i as u64)), Some(*p), "ID {i}");
    }
    append_n(&journal, n, n + 10);
    drop(journal);
    check(dir.path(), n + 10);
}

/// What a scan of `root`'s journal read as `reading` found: every record handed out (its seq,
/// ID, place and payload), the report, and the seqs it bounds.
type ScanFindings = (
    Vec<(u64, [u8; 16], u64, u64, Vec<u8>)>,
    RecoveryReport,
    u64,
    u64,
);

fn scan_by(root: &Path, reading: recovery::Reading) -> ScanFindings {
    let dir = crate::root::dir::Dir::reader(&root.join("journal")).unwrap();
    let mut records = Vec::new();
    let scan = recovery::scan_journal(&dir, reading, |r| {
        records.push((
            r.header.seq,
            r.header.event_id,
            r.segment_index,
            r.offset,
            r.payload.to_vec(),
        ));
    })
    .unwrap();
    (records, scan.report, scan.last_seq, scan.seq_floor)
}

/// Flips the bits `flip` of one byte of segment `segment` (modulo the files listed), at the
/// fraction `at` of its length; a segment that is not there is left alone.
fn flip_one_byte(root: &Path, (segment, at, flip): (u64, f64, u8)) {
    let listed = std::fs::read_dir(root.join("journal")).unwrap().count() as u64;
    let index = segment % listed.max(1);
    if segment_path(root, index).exists() {
        edit(root, index, |bytes| {
            let i = ((bytes.len() as f64 * at) as usize).min(bytes.len() - 1);
            bytes[i] ^= flip;
        });
    }
}

/// Segments of a few pages, so that records lie past the first page, which a scan reads anyway.
const MAPPED_SEG: usize = 4 * crate::limits::PAGE_BYTES;

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// A writer's open scans sealed and closed segments through a mapping: it finds exactly what
    /// the copying scan of every other reader finds, whether the journal was closed or crashed,
    /// reopened and appended to, and with a byte of any segment changed anywhere (records, commit
    /// area, the zeroes past a clean close).
    #[test]
    fn a_mapped_scan_finds_what_a_copied_one_does(
        n in 1u64..160,
        closed in proptest::bool::ANY,
        more in 0u64..40,
        damage in proptest::option::of((0u64..8, 0.0f64..1.0, 1u8..=255)),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (journal, _) = Journal::open(dir.path(), options(Durability::Os, MAPPED_SEG)).unwrap();
        append_n(&journal, 0, n);
        if closed { drop(journal) } else { journal.crash() }
        if more > 0 {
            let (journal, _) = Journal::open(dir.path(), options(Durability::Os, MAPPED_SEG)).unwrap();
            append_n(&journal, n, n + more);
            drop(journal);
        }
        if let Some(damage) = damage {
            flip_one_byte(dir.path(), damage);
        }
        let mapped_before = super::mmap::PREFIXES_MAPPED.with(std::cell::Cell::get);
        let copied = scan_by(dir.path(), recovery::Reading::Copied);
        let copies_mapped = super::mmap::PREFIXES_MAPPED.with(std::cell::Cell::get) - mapped_before;
        let mapped = scan_by(dir.path(), recovery::Reading::Mapped);
        let maps = super::mmap::PREFIXES_MAPPED.with(std::cell::Cell::get) - mapped_before;
        proptest::prop_assert_eq!(&mapped, &copied);
        proptest::prop_assert_eq!(copies_mapped, 0);
        // Records past the first page are scanned in place, whether the fast path reads a
        // closed segment or the full scan one a crash left.
        let past_first_page = copied.0.iter().any(|r| r.3 > crate::limits::PAGE_BYTES as u64);
        if damage.is_none() {
            proptest::prop_assert_eq!(mapped.0.len() as u64, n + more);
            if past_first_page {
                proptest::prop_assert!(maps > 0, "nothing mapped");
            }
        }
    }

    /// The near path finds what the full scan finds, on journals closed cleanly or left by a
    /// crash, written on after or not, with one byte anywhere changed or none.
    #[test]
    fn a_near_scan_finds_what_a_full_one_does(
        n in 1u64..160,
        closed in proptest::bool::ANY,
        deferred in 0u64..6,
        damage in proptest::option::of((0u64..8, 0.0f64..1.0, 1u8..=255)),
    ) {
        let dir = tempfile::tempdir().unwrap();
        // Segments four windows long, so that most of each file lies past the window; one
        // commit of the first `n` records, as a brief writer's last acknowledgement leaves it.
        let segment = 4 * crate::limits::SCAN_BLOCK_BYTES;
        let (journal, _) = Journal::open(dir.path(), options(Durability::Group, segment)).unwrap();
        for i in 0..n + deferred {
            journal.append_deferred(id_of(i), KIND, 1, &payload_of(i)).unwrap();
            if i + 1 == n {
                journal.acknowledge(n).unwrap();
            }
        }
        if closed { drop(journal) } else { journal.crash() }
        if let Some(damage) = damage {
            flip_one_byte(dir.path(), damage);
        }
        let (near, taken) = scan_near(dir.path(), true);
        let (full, _) = scan_near(dir.path(), false);
        proptest::prop_assert_eq!(near, full);
        // Undamaged, a crash leaves the commit unclosed: the near path reads it.
        if !closed && damage.is_none() {
            proptest::prop_assert_eq!(taken, 1);
        }
    }
}

/// The scan of a segment the fast path cannot take (no `CLOSED` or sealing claim: a brief
/// writer's close, a crash) reads its records through one mapping in a writer's open (of the
/// near path's window here, of the whole file when that path falls back), and finds what the
/// copying scan finds.
#[test]
fn a_segment_without_a_closing_claim_is_scanned_through_a_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let open = || Journal::open(dir.path(), options(Durability::Group, SEG * 16)).unwrap();
    let (journal, _) = open();
    append_n(&journal, 0, 40);
    journal.crash();
    let copied = scan_by(dir.path(), recovery::Reading::Copied);
    let before = super::mmap::PREFIXES_MAPPED.with(std::cell::Cell::get);
    let mapped = scan_by(dir.path(), recovery::Reading::Mapped);
    let maps = super::mmap::PREFIXES_MAPPED.with(std::cell::Cell::get) - before;
    assert_eq!(mapped, copied);
    assert_eq!(mapped.0.len(), 40);
    assert!(
        mapped
            .0
            .iter()
            .any(|r| r.3 > crate::limits::PAGE_BYTES as u64)
    );
    assert_eq!(maps, 1, "one mapping of the one segment");
}

/// The findings of a scan of `root` with the near path allowed or not, and how many segments
/// it read by it.
fn scan_near(root: &Path, near: bool) -> (ScanFindings, usize) {
    recovery::NEAR_PATH.with(|n| n.set(near));
    let before = recovery::NEAR_TAKEN.with(std::cell::Cell::get);
    let found = scan_by(root, recovery::Reading::Mapped);
    recovery::NEAR_PATH.with(|n| n.set(true));
    (
        found,
        recovery::NEAR_TAKEN.with(std::cell::Cell::get) - before,
    )
}

/// A segment whose newest commit neither seals nor closes it (a brief writer's close, a crash)
/// is read to a window past that commit and only checked to be zero after it, block by block:
/// the records appended after the commit are found, and a stray byte past them (inside the
/// window, at its edge, past it at a block boundary, or in the file's last byte) is the same
/// torn tail that the full scan finds, which then runs instead.
#[test]
fn a_stray_byte_anywhere_past_an_unclosed_commit_is_what_the_full_scan_finds() {
    let block = crate::limits::SCAN_BLOCK_BYTES;
    let segment = 4 * block;
    let pristine_root = tempfile::tempdir().unwrap();
    let (journal, _) =
        Journal::open(pristine_root.path(), options(Durability::Sync, segment)).unwrap();
    append_n(&journal, 0, 3);
    let last = (3..5)
        .map(|i| {
            let appended = journal.append_deferred(id_of(i), KIND, 1, &payload_of(i));
            appended.unwrap().position
        })
        .last()
        .unwrap();
    journal.crash();
    let (clean, taken) = scan_near(pristine_root.path(), true);
    assert_eq!(taken, 1, "the near path reads the one segment");
    assert_eq!(clean, scan_near(pristine_root.path(), false).0);
    assert_eq!(clean.0.len(), 5);
    let pristine = std::fs::read(segment_path(pristine_root.path(), 0)).unwrap();
    let end = last.offset as usize + record_len(4);
    let strays = [
        end + RECORD_HEADER_BYTES,
        end + block - 1,
        end + block,
        2 * block,
        segment - 1,
    ];
    for at in strays {
        let case = root_with_stray(&pristine, at);
        let (near, taken) = scan_near(case.path(), true);
        let (full, _) = scan_near(case.path(), false);
        assert_eq!(near, full, "stray at {at}");
        assert_eq!(taken, 0, "stray at {at}: the near path fell back");
        assert_eq!(seqs_of(&near), vec![1, 2, 3, 4, 5], "stray at {at}");
        let torn = &near.1.torn_tails;
        assert_eq!(torn.len(), 1, "stray at {at}: {torn:?}");
        assert_eq!(
            (torn[0].start_offset, torn[0].end_offset),
            (end as u64, at as u64 + 1),
            "stray at {at}"
        );
    }
}

/// The seqs a scan found, in order.
fn seqs_of(found: &ScanFindings) -> Vec<u64> {
    found.0.iter().map(|r| r.0).collect()
}

/// A brief writer flushes nothing that needs no flush. Its close writes no closing claim, so a
/// record it appended after its last acknowledgement is left unflushed; the next brief open
/// leaves the flush of what it found to its own first commit (it opens even when every flush
/// fails), counts such records as not yet durable, and flushes before acknowledging one. A
/// lasting open flushes them at once, and after it everything is durable.
#[test]
fn a_brief_writer_leaves_the_flush_of_its_bookkeeping_to_the_next_commit() {
    let open = open_flushes_failing;
    let dir = tempfile::tempdir().unwrap();
    build_closed(dir.path(), 3, SEG);
    // Every flush after the acknowledgement's fails: the close must not try one.
    let (journal, report) = open(dir.path(), Tenure::Brief, 1).unwrap();
    assert!(report.is_clean(), "{report:?}");
    journal.append(id_of(3), KIND, 1, &payload_of(3)).unwrap();
    journal
        .append_deferred(id_of(4), KIND, 1, &payload_of(4))
        .unwrap();
    drop(journal);
    // No flush at this open: it succeeds with every flush failing. It counts as durable only
    // what the commit area confirms: seq 3, the older slot's (the newer claim of seq 4 might
    // be one whose flush never returned, for all the slots say).
    let (journal, report) = open(dir.path(), Tenure::Brief, 0).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!((journal.last_seq(), journal.durable_seq()), (5, 3));
    assert!(journal.acknowledge(5).is_err(), "acknowledging it flushes");
    drop(journal);
    // A lasting open flushes what it found before it returns.
    assert!(open(dir.path(), Tenure::Lasting, 0).is_err());
    let (journal, report) = open(dir.path(), Tenure::Lasting, -1).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!((journal.last_seq(), journal.durable_seq()), (5, 5));
    drop(journal);
    let (records, report) = read_all(dir.path());
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(seqs(&records), vec![1, 2, 3, 4, 5]);
}
