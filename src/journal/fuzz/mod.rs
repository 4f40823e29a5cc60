//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through). The `journal_open`
//! target's input decoder is [`plan`], its checks [`open`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::journal::format::{self, CommitSlot, FrameError, RecordFields, SegmentHeader};
use crate::journal::recovery::{self, CommitPoint};
use crate::limits::{
    COMMIT_SLOT_BYTES, PAGE_BYTES, RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES,
    RECORD_PAYLOAD_BYTES_MAX, SEGMENT_BYTES_MAX, SEGMENT_HEADER_BYTES, SEGMENT_INDEX_MAX,
    SEGMENT_RECORDS_OFFSET, SEQ_MAX,
};

mod open;
mod plan;

pub use open::journal_open;
pub use plan::{JournalPlan, journal_plan};

/// Segment size of every segment the fuzz targets build.
pub const FUZZ_SEGMENT_BYTES: usize = 4096;

/// `journal_id` of every segment the fuzz targets build (except deliberately foreign ones).
pub const FUZZ_JOURNAL_ID: [u8; 16] = *b"procjournal-fuzz";

/// `journal_id` of a segment transplanted from another journal.
const FOREIGN_JOURNAL_ID: [u8; 16] = *b"another-journal!";

fn u32_le(bytes: &[u8], offset: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(b)
}

// ------------------------------------------------------------------------------------------------
// record_decoder

/// Decodes `data` as a record (all three header decoders and the whole-record decoder) and as a
/// segment header, checks that the decoders agree with each other and that whatever decodes
/// re-encodes to exactly the input bytes; then scans `data` as the body of a segment.
pub fn record_decoder(data: &[u8]) {
    check_record_decoders(data);
    check_segment_header_decoder(data);
    check_segment_scan(data);
}

fn check_record_decoders(data: &[u8]) {
    let unbounded = format::decode_record_header_unbounded(data);
    let bounded = format::decode_record_header(data);
    let whole = format::decode_record(data);

    if data.len() < RECORD_HEADER_BYTES {
        assert_eq!(unbounded, Err(FrameError::Truncated));
    }
    match unbounded {
        Err(e) => {
            assert_eq!(bounded, Err(e), "bounded header decoder disagrees");
            assert_eq!(whole.err(), Some(e), "record decoder disagrees");
            return;
        }
        Ok(h) => {
            assert_ne!(h.kind, 0, "kind 0 accepted");
            assert!(h.payload_bytes as usize <= RECORD_PAYLOAD_BYTES_MAX);
            if format::record_bytes(h.payload_bytes as usize) > data.len() {
                assert_eq!(bounded, Err(FrameError::LengthPastEnd));
                assert_eq!(whole.err(), Some(FrameError::LengthPastEnd));
                return;
            }
            assert_eq!(bounded, Ok(h), "bounded header decoder disagrees");
        }
    }
    let (header, payload) = match whole {
        Ok(ok) => ok,
        Err(e) => {
            assert!(
                matches!(e, FrameError::PayloadChecksum | FrameError::PaddingNonZero),
                "a checked header then failed with {e:?}"
            );
            return;
        }
    };
    assert_eq!(Ok(header), bounded);
    assert_eq!(payload.len(), header.payload_bytes as usize);
    assert_eq!(
        payload,
        &data[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + payload.len()]
    );
    assert_eq!(format::masked_crc(payload), header.payload_crc);

    let mut encoded = vec![0u8; format::record_bytes(payload.len())];
    let crc = format::encode_record(
        &RecordFields {
            kind: header.kind,
            codec_version: header.codec_version,
            seq: header.seq,
            event_id: header.event_id,
            prev_crc: header.prev_crc,
            payload,
        },
        &mut encoded,
    );
    assert_eq!(crc, header.header_crc, "re-encoded header CRC differs");
    assert_eq!(
        encoded.as_slice(),
        &data[..encoded.len()],
        "a decoded record does not re-encode to its bytes"
    );
}

fn check_segment_header_decoder(data: &[u8]) {
    match SegmentHeader::decode(data) {
        Ok(h) => {
            assert!(format::segment_bytes_valid(h.segment_bytes as usize));
            let encoded = h.encode();
            assert_eq!(
                encoded.as_slice(),
                &data[..SEGMENT_HEADER_BYTES],
                "a decoded segment header does not re-encode to its bytes"
            );
            assert_eq!(h.crc(), u32_le(data, format::SEG_CRC_OFFSET));
        }
        Err(FrameError::Truncated) => assert!(data.len() < SEGMENT_HEADER_BYTES),
        Err(_) => assert!(data.len() >= SEGMENT_HEADER_BYTES),
    }
}

/// Runs recovery's pure segment scanner over a valid header followed by `data`. The last byte of
/// `data` chooses the segment's version and, for version 2, its confirmed seq: none, a few
/// records, or every seq (past the confirmed seq, the scan must not resync over damage).
fn check_segment_scan(data: &[u8]) {
    let (header, commit) = scanned_header(data.last().copied().unwrap_or(0));
    let records_offset = header.records_offset();
    let body = &data[..data.len().min(FUZZ_SEGMENT_BYTES - records_offset)];
    let mut bytes = header.encode().to_vec();
    bytes.resize(records_offset, 0);
    bytes.extend_from_slice(body);

    let mut seen: Vec<(u64, format::RecordHeader, Vec<u8>)> = Vec::new();
    let outcome = recovery::scan_segment(&bytes, &header, commit.as_ref(), 0, |r| {
        assert_eq!(r.segment_index, 0);
        seen.push((r.offset, *r.header, r.payload.to_vec()));
    });

    let (next_free, last_seq) = check_scanned_records(&bytes, &header, &seen);
    assert_eq!(outcome.records, seen.len() as u64);
    assert_eq!(outcome.last_seq, last_seq);
    if let Some((_, h, _)) = seen.last() {
        assert_eq!(outcome.chain_crc, h.header_crc);
    } else {
        assert_eq!(outcome.chain_crc, header.crc());
    }
    assert!(outcome.end_offset <= bytes.len());
    assert!(outcome.end_offset as u64 >= next_free);
    check_scanned_damage(&outcome, commit.as_ref(), &seen, records_offset);
    check_scanned_end(&outcome, &bytes);
}

/// The header [`check_segment_scan`] puts before its input, and the commit point it scans under
/// (`None` for version 1), as `choice` picks them.
fn scanned_header(choice: u8) -> (SegmentHeader, Option<CommitPoint>) {
    let format_version = if choice % 4 == 3 {
        format::FORMAT_VERSION_V1
    } else {
        format::FORMAT_VERSION
    };
    let header = SegmentHeader {
        format_version,
        segment_bytes: FUZZ_SEGMENT_BYTES as u32,
        journal_id: FUZZ_JOURNAL_ID,
        segment_index: 0,
        base_seq: 1,
        created_unix_ms: 0,
    };
    let confirmed = match choice % 4 {
        0 => 0,
        1 => u64::from(choice >> 2),
        _ => SEQ_MAX,
    };
    let commit = header.has_commit_area().then_some(CommitPoint {
        newest: None,
        claimed: confirmed,
        confirmed,
        damaged: false,
    });
    (header, commit)
}

/// The records the scanner accepted, as `(offset, header, payload)`: each one decodes where it
/// was found, in order and apart; returns where the last one ends and its seq.
fn check_scanned_records(
    bytes: &[u8],
    header: &SegmentHeader,
    seen: &[(u64, format::RecordHeader, Vec<u8>)],
) -> (u64, Option<u64>) {
    let mut next_free = header.records_offset() as u64;
    let mut last_seq: Option<u64> = None;
    for (offset, h, payload) in seen {
        let at = *offset as usize;
        assert!(*offset >= next_free, "records overlap or go backwards");
        assert!(at.is_multiple_of(RECORD_ALIGN_BYTES));
        let decoded = format::decode_record(&bytes[at..]);
        assert_eq!(
            decoded,
            Ok((*h, payload.as_slice())),
            "scanner accepted a bad record"
        );
        assert!(h.seq >= header.base_seq);
        if let Some(prev) = last_seq {
            assert!(h.seq > prev, "accepted seqs do not increase");
        }
        last_seq = Some(h.seq);
        next_free = *offset + format::record_bytes(h.payload_bytes as usize) as u64;
    }
    (next_free, last_seq)
}

fn check_scanned_damage(
    outcome: &recovery::SegmentOutcome,
    commit: Option<&CommitPoint>,
    seen: &[(u64, format::RecordHeader, Vec<u8>)],
    records_offset: usize,
) {
    let mut previous_end = records_offset as u64;
    for d in &outcome.damaged {
        assert!(d.start_offset < d.end_offset, "empty damaged range {d:?}");
        // Damage is resynced over only where the records were confirmed; past the confirmed
        // seq, the first bad bytes end the segment's records (an unacknowledged tail).
        if let Some(c) = commit {
            assert!(
                d.last_good_seq < c.confirmed,
                "resynced past the confirmed seq {}: {d:?}",
                c.confirmed
            );
        }
        assert!(d.start_offset >= previous_end, "damaged ranges overlap");
        previous_end = d.end_offset;
        // A damaged range in one segment always ends at the next accepted record.
        let next = seen.iter().find(|(offset, _, _)| *offset == d.end_offset);
        assert!(next.is_some(), "damaged range does not end at a record");
        assert_eq!(next.map(|(_, h, _)| h.seq), d.next_good_seq);
    }
}

fn check_scanned_end(outcome: &recovery::SegmentOutcome, bytes: &[u8]) {
    match outcome.trailing {
        Some((start, end, _)) => {
            assert_eq!(start, outcome.end_offset);
            assert!(start < end && end <= bytes.len());
            assert!(bytes[end..].iter().all(|&b| b == 0));
            assert_ne!(bytes[end - 1], 0);
        }
        None => assert!(
            bytes[outcome.end_offset..].iter().all(|&b| b == 0),
            "non-zero bytes after the last record were neither damage nor a torn tail"
        ),
    }
}

// ------------------------------------------------------------------------------------------------
// the structure-aware targets' inputs and roots

/// Reads the fuzz input front to back; past its end every read yields zeroes.
pub(crate) struct Input<'a> {
    pub(crate) data: &'a [u8],
}

impl<'a> Input<'a> {
    pub(crate) fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }
    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub(crate) fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for byte in &mut b {
            *byte = self.u8();
        }
        u64::from_le_bytes(b)
    }
    pub(crate) fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        taken
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// A number from the input: anything, or (more often) within a few of `limit`.
fn near_limit(input: &mut Input<'_>, limit: u64) -> u64 {
    let b = input.u8();
    let delta = u64::from(b >> 2);
    match b % 4 {
        0 => input.u64(),
        1 => limit.saturating_sub(delta),
        2 => limit.saturating_add(delta),
        _ => limit,
    }
}

/// A fresh directory under the system temporary directory, removed on drop.
pub(crate) struct TempRoot(PathBuf);

impl TempRoot {
    pub(crate) fn new() -> Option<TempRoot> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("procjournal-fuzz-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        let root = TempRoot(path);
        std::fs::create_dir_all(root.0.join("journal")).ok()?;
        Some(root)
    }
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ------------------------------------------------------------------------------------------------
// journal_commit_slot

/// The commit-slot decoder (`CommitSlot::decode`) over arbitrary bytes under arbitrary version 2
/// headers, and the commit point recovery derives from two slots (`CommitPoint::read`).
///
/// Layout of the input: a header (one byte choosing the segment size, then the base seq and the
/// index, each near a limit or anywhere in range), then slot 0, slot 1 and one more slot (each a
/// mode byte and its bytes, see `fuzz_slot`), then one byte: how much of the commit area the file
/// holds. Checked: every decode is total (a slot, `None` or a typed error, never a panic); fewer
/// than 48 bytes are `Truncated` and 48 zero bytes are `None`; a decoded slot re-encodes to exactly
/// its bytes; a slot encoded from fields decodes back to the same slot exactly when the fields
/// keep the rules of journal-format.md (restated here), and a slot checksummed for another header
/// never decodes; the commit point never panics, keeps `claimed >= confirmed >= base_seq - 1`,
/// takes its claim from the newest valid slot, confirms the claim of a seal, and confirms only
/// what a slot claimed.
pub fn journal_commit_slot(data: &[u8]) {
    let mut input = Input { data };
    let header = fuzz_v2_header(&mut input);
    let slots = [
        fuzz_slot(&mut input, &header),
        fuzz_slot(&mut input, &header),
        fuzz_slot(&mut input, &header),
    ];
    for slot in &slots {
        check_slot_bytes(slot, &header);
    }
    let mut area = header.encode().to_vec();
    for slot in &slots[..2] {
        let mut bytes = [0u8; COMMIT_SLOT_BYTES];
        let n = slot.len().min(COMMIT_SLOT_BYTES);
        bytes[..n].copy_from_slice(&slot[..n]);
        area.extend_from_slice(&bytes);
    }
    // A file cut inside its commit area reads fewer bytes (recovery zero-extends them; the
    // commit point must not rely on it).
    let keep = match input.u8() {
        cut @ 0..=159 => usize::from(cut),
        _ => area.len(),
    };
    area.truncate(keep);
    check_commit_point(&area, &header);
    let v1 = SegmentHeader {
        format_version: format::FORMAT_VERSION_V1,
        ..header
    };
    assert_eq!(
        CommitPoint::read(&area, &v1),
        None,
        "a version 1 commit point"
    );
}

/// A version 2 header that decodes (the only kind a slot is ever read under).
fn fuzz_v2_header(input: &mut Input<'_>) -> SegmentHeader {
    let max_pages = (SEGMENT_BYTES_MAX / PAGE_BYTES) as u64;
    let choice = input.u8();
    let pages = match choice % 4 {
        0 => 1,
        1 => max_pages,
        _ => 1 + u64::from(input.u16()) % max_pages,
    };
    let base_seq = match (choice >> 2) % 4 {
        0 => 1 + u64::from(input.u8()),
        1 => SEQ_MAX - u64::from(input.u8()),
        _ => 1 + input.u64() % SEQ_MAX,
    };
    let segment_index = match (choice >> 4) % 2 {
        0 => u64::from(input.u8()),
        _ => input.u64() % (SEGMENT_INDEX_MAX + 1),
    };
    let header = SegmentHeader {
        format_version: format::FORMAT_VERSION,
        segment_bytes: u32::try_from(pages * PAGE_BYTES as u64).unwrap_or(u32::MAX),
        journal_id: FUZZ_JOURNAL_ID,
        segment_index,
        base_seq,
        created_unix_ms: u64::from(choice >> 5),
    };
    assert_eq!(SegmentHeader::decode(&header.encode()), Ok(header));
    header
}

/// The masked CRC a slot's bytes must carry under a header whose CRC is `header_crc`
/// (journal-format.md, "Commit area"), computed here from the specification.
fn spec_slot_crc(header_crc: u32, slot: &[u8; COMMIT_SLOT_BYTES]) -> u32 {
    let mut covered = header_crc.to_le_bytes().to_vec();
    covered.extend_from_slice(&slot[4..]);
    format::masked_crc(&covered)
}

/// Whether `slot` keeps the rules of a decodable slot of `header` (journal-format.md, "Commit
/// area", decoding steps 4 and 5), restated from the specification.
fn slot_valid_by_spec(slot: &CommitSlot, header: &SegmentHeader) -> bool {
    let valid_size =
        |bytes: u32| (4096..=1 << 30).contains(&bytes) && bytes.is_multiple_of(PAGE_BYTES as u32);
    let end = slot.end_offset as usize;
    let flags_known = slot.flags & !(format::SLOT_SEALED | format::SLOT_CLOSED) == 0;
    let successor = if slot.sealed() {
        valid_size(slot.next_segment_bytes)
            && slot.next_base_seq > slot.committed_seq
            && slot.next_base_seq <= SEQ_MAX
    } else {
        slot.next_segment_bytes == 0 && slot.next_base_seq == 0
    };
    flags_known
        && slot.generation >= 1
        && slot.committed_seq >= header.base_seq - 1
        && slot.committed_seq <= SEQ_MAX
        && end >= SEGMENT_RECORDS_OFFSET
        && end <= header.segment_bytes as usize
        && end.is_multiple_of(RECORD_ALIGN_BYTES)
        && successor
}

/// One slot's bytes from the input, by its mode byte: raw bytes (48, or fewer: a cut file);
/// 48 bytes with the checksum fixed up for `header` (so that the field checks are reached); a
/// slot encoded from fields (near the bounds of each); or one encoded for another header.
fn fuzz_slot(input: &mut Input<'_>, header: &SegmentHeader) -> Vec<u8> {
    let mode = input.u8();
    let mut fixed = [0u8; COMMIT_SLOT_BYTES];
    match mode % 4 {
        0 => {
            let n = if mode & 4 != 0 {
                usize::from(input.u8()) % (COMMIT_SLOT_BYTES + 1)
            } else {
                COMMIT_SLOT_BYTES
            };
            input.bytes(n).to_vec()
        }
        1 => {
            let taken = input.bytes(COMMIT_SLOT_BYTES);
            fixed[..taken.len()].copy_from_slice(taken);
            let crc = spec_slot_crc(header.crc(), &fixed);
            fixed[..4].copy_from_slice(&crc.to_le_bytes());
            fixed.to_vec()
        }
        _ => {
            let slot = fuzz_slot_fields(input, header, mode >> 2);
            if mode % 4 == 2 {
                let bytes = slot.encode(header.crc());
                let decoded = CommitSlot::decode(&bytes, header);
                let expected = if bytes.iter().all(|&b| b == 0) {
                    Ok(None)
                } else if slot.flags & !(format::SLOT_SEALED | format::SLOT_CLOSED) != 0 {
                    Err(FrameError::ReservedNonZero)
                } else if slot_valid_by_spec(&slot, header) {
                    Ok(Some(slot))
                } else {
                    Err(FrameError::OutOfRange)
                };
                assert_eq!(decoded, expected, "{slot:?} under {header:?}");
                bytes.to_vec()
            } else {
                // Checksummed for the next segment: a slot copied from another segment.
                let other = SegmentHeader {
                    segment_index: header.segment_index ^ 1,
                    ..*header
                };
                let bytes = slot.encode(other.crc());
                assert_eq!(
                    CommitSlot::decode(&bytes, header),
                    Err(FrameError::HeaderChecksum),
                    "a slot of another segment decoded"
                );
                bytes.to_vec()
            }
        }
    }
}

/// Slot fields from the input, each near one of its bounds more often than not.
fn fuzz_slot_fields(input: &mut Input<'_>, header: &SegmentHeader, bits: u8) -> CommitSlot {
    let flags = match bits % 8 {
        0..=2 => 0,
        3 => format::SLOT_SEALED,
        4 => format::SLOT_CLOSED,
        5 => format::SLOT_SEALED | format::SLOT_CLOSED,
        _ => input.u32(),
    };
    let generation = match (bits >> 3) % 4 {
        0 => 1 + u64::from(input.u8()),
        1 => 0,
        2 => u64::MAX - u64::from(input.u8() % 2),
        _ => input.u64(),
    };
    let none = header.base_seq - 1;
    let committed = match input.u8() % 4 {
        0 => none + u64::from(input.u8()),
        1 => none.wrapping_sub(1),
        2 => near_limit(input, SEQ_MAX),
        _ => input.u64(),
    };
    let end = match input.u8() % 4 {
        0 => SEGMENT_RECORDS_OFFSET as u32 + u32::from(input.u16()) * RECORD_ALIGN_BYTES as u32,
        1 => header.segment_bytes - u32::from(input.u8() % 24),
        2 => u32::from(input.u8()),
        _ => input.u32(),
    };
    let (next_segment_bytes, next_base_seq) = match input.u8() % 4 {
        0 => (0, 0),
        1 => (header.segment_bytes, committed.wrapping_add(1)),
        2 => (
            PAGE_BYTES as u32 * u32::from(input.u8()),
            near_limit(input, SEQ_MAX),
        ),
        _ => (input.u32(), input.u64()),
    };
    CommitSlot {
        flags,
        generation,
        committed_seq: committed,
        end_offset: end,
        next_segment_bytes,
        next_base_seq,
    }
}

/// `CommitSlot::decode` on `bytes` as they are: total, with the outcomes the format names.
fn check_slot_bytes(bytes: &[u8], header: &SegmentHeader) {
    let decoded = CommitSlot::decode(bytes, header);
    if bytes.len() < COMMIT_SLOT_BYTES {
        assert_eq!(decoded, Err(FrameError::Truncated));
        return;
    }
    let slot_bytes = &bytes[..COMMIT_SLOT_BYTES];
    match decoded {
        Ok(None) => assert!(
            slot_bytes.iter().all(|&b| b == 0),
            "a written slot read as none"
        ),
        Ok(Some(slot)) => {
            assert_eq!(
                slot.encode(header.crc()).as_slice(),
                slot_bytes,
                "a decoded slot does not re-encode to its bytes"
            );
            assert!(slot_valid_by_spec(&slot, header), "{slot:?} accepted");
        }
        Err(e) => {
            assert!(slot_bytes.iter().any(|&b| b != 0));
            assert!(
                matches!(
                    e,
                    FrameError::HeaderChecksum
                        | FrameError::ReservedNonZero
                        | FrameError::OutOfRange
                ),
                "unexpected slot error {e:?}"
            );
        }
    }
}

/// `CommitPoint::read` over a commit area (possibly cut short): see [`journal_commit_slot`].
fn check_commit_point(area: &[u8], header: &SegmentHeader) {
    let Some(point) = CommitPoint::read(area, header) else {
        panic!("no commit point for a version 2 header");
    };
    let none = header.base_seq - 1;
    assert!(
        point.claimed >= point.confirmed && point.confirmed >= none,
        "claimed {} confirmed {} base {}",
        point.claimed,
        point.confirmed,
        header.base_seq
    );
    let slots = [0, 1].map(|i| {
        let at = SegmentHeader::commit_slot_offset(i);
        area.get(at..).map_or(Err(FrameError::Truncated), |b| {
            CommitSlot::decode(b, header)
        })
    });
    let valid: Vec<CommitSlot> = slots.iter().flatten().flatten().copied().collect();
    match point.newest {
        None => {
            assert!(valid.is_empty(), "a valid slot ignored");
            assert_eq!((point.claimed, point.confirmed), (none, none));
            assert_eq!(point.damaged, slots.iter().all(Result::is_err));
        }
        Some((i, newest)) => {
            assert_eq!(slots[i], Ok(Some(newest)));
            assert!(valid.iter().all(|s| s.generation <= newest.generation));
            assert_eq!(point.claimed, newest.committed_seq);
            assert!(!point.damaged);
            if newest.sealed() {
                assert_eq!(
                    point.confirmed, point.claimed,
                    "a seal's claim is confirmed"
                );
            }
            assert!(
                point.confirmed == none || valid.iter().any(|s| s.committed_seq == point.confirmed),
                "confirmed {} is no slot's claim",
                point.confirmed
            );
        }
    }
}

// ------------------------------------------------------------------------------------------------
// journal_floor

/// The `FLOOR` file's decoder (`journal::floor::Floor::decode`, what recovery and compaction
/// read from disk) over arbitrary bytes, as they are and with the checksum rebuilt to vouch for
/// them (so that the checks behind it are reached), and `read_floor` over the same bytes as the
/// file: never a panic; what decodes re-encodes to exactly its bytes (the format is canonical),
/// is in range (a seq from 1, a segment index and seq within the journal's limits), and is what
/// `read_floor` reads; a refusal is `read_floor`'s `Bad` with the same reason (for a file longer
/// than a floor, the length it read: one byte more).
pub fn journal_floor(data: &[u8]) {
    use crate::journal::floor::{FLOOR_BYTES, Floor};
    check_floor(data);
    if data.len() == FLOOR_BYTES {
        let mut vouched = data.to_vec();
        let crc = crate::journal::format::masked_crc(&vouched[..FLOOR_BYTES - 4]);
        vouched[FLOOR_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
        check_floor(&vouched);
        // A floor that decodes refuses every one-byte change to it.
        if let Ok(floor) = Floor::decode(&vouched) {
            for at in 0..FLOOR_BYTES {
                let mut changed = vouched.clone();
                changed[at] ^= 0x01 | data.first().copied().unwrap_or(0);
                assert!(
                    Floor::decode(&changed).is_err(),
                    "{floor:?} decoded after byte {at} changed"
                );
            }
        }
    }
}

fn check_floor(bytes: &[u8]) {
    use crate::journal::floor::{Floor, FloorRead, read_floor};
    use crate::limits::{SEGMENT_INDEX_MAX, SEQ_MAX};
    let decoded = Floor::decode(bytes);
    if let Ok(floor) = &decoded {
        assert_eq!(floor.encode().as_slice(), bytes, "not canonical");
        assert!(floor.seq >= 1 && floor.seq <= SEQ_MAX);
        assert!(floor.segment_index <= SEGMENT_INDEX_MAX);
    }
    let Some(root) = TempRoot::new() else { return };
    let dir = root.path().join("journal");
    if std::fs::write(dir.join(crate::journal::floor::FLOOR_FILE), bytes).is_err() {
        return;
    }
    // read_floor reads one byte past a floor's length, never more: a longer file is refused
    // for the length it read.
    let read_len = bytes.len().min(crate::journal::floor::FLOOR_BYTES + 1);
    let decoded_read = Floor::decode(&bytes[..read_len]);
    assert_eq!(decoded_read.is_ok(), decoded.is_ok());
    let read = crate::root::dir::Dir::reader(&dir).and_then(|dir| read_floor(&dir));
    match (read, decoded_read) {
        (Ok(FloorRead::Good(read)), Ok(floor)) => assert_eq!(read, floor),
        (Ok(FloorRead::Bad(why)), Err(e)) => assert_eq!(why, e.to_string()),
        (Err(e), _) => panic!("read_floor of a readable file failed: {e}"),
        (read, decoded) => panic!("read_floor says {read:?}, the decoder {decoded:?}"),
    }
}
