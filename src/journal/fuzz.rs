//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::codec;
use crate::journal::format::{self, CommitSlot, FrameError, RecordFields, SegmentHeader};
use crate::journal::reader::{Follower, JournalReader, Record};
use crate::journal::recovery::{self, CommitPoint, RecoveryReport};
use crate::journal::{Durability, EventId, EventKind, Journal, JournalError, JournalOptions};
use crate::limits::{
    COMMIT_SLOT_BYTES, PAGE_BYTES, RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES,
    RECORD_PAYLOAD_BYTES_MAX, SEGMENT_BYTES_MAX, SEGMENT_HEADER_BYTES, SEGMENT_INDEX_MAX,
    SEGMENT_RECORDS_OFFSET, SEQ_MAX,
};

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
    let choice = data.last().copied().unwrap_or(0);
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

    let mut next_free = records_offset as u64;
    let mut last_seq: Option<u64> = None;
    for (offset, h, payload) in &seen {
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
    assert_eq!(outcome.records, seen.len() as u64);
    assert_eq!(outcome.last_seq, last_seq);
    if let Some((_, h, _)) = seen.last() {
        assert_eq!(outcome.chain_crc, h.header_crc);
    } else {
        assert_eq!(outcome.chain_crc, header.crc());
    }
    assert!(outcome.end_offset <= bytes.len());
    assert!(outcome.end_offset as u64 >= next_free);

    let mut previous_end = records_offset as u64;
    for d in &outcome.damaged {
        assert!(d.start_offset < d.end_offset, "empty damaged range {d:?}");
        // Damage is resynced over only where the records were confirmed; past the confirmed
        // seq, the first bad bytes end the segment's records (an unacknowledged tail).
        if let Some(c) = &commit {
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
    match outcome.trailing {
        Some((start, end, _row)) => {
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
// journal_open

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

/// The files of a journal directory built from one fuzz input.
#[derive(Debug, Clone, Default)]
pub struct JournalPlan {
    /// `(file name, contents)`: segment files, possibly a leftover `*.log.tmp` and `*.spare`.
    pub files: Vec<(String, Vec<u8>)>,
    /// The policy of the writable open (`Os` unless the input's last byte asks otherwise).
    pub durability: Durability,
}

/// Segment-building state carried from one record to the next (what a writer would hold).
struct Chain {
    expected_seq: u64,
    chain_crc: u32,
    records_built: u64,
    /// Where records start in the segment being built (its `header_bytes`): the ops that cut or
    /// corrupt what was built leave the bytes before it alone.
    records_offset: usize,
    /// The segment's `base_seq`.
    base_seq: u64,
    /// The records a writer appended to this segment in order from its first: each one valid,
    /// chained to the one before, right after it and inside the segment, as `(seq, end offset)`.
    /// The commit slots of a plan claim some of these (or more).
    written: Vec<(u64, usize)>,
    /// The chain value after the last record of `written` (the header's CRC before any).
    writer_crc: u32,
}

impl Chain {
    /// Starts a segment with `header` whose records start at `records_offset`.
    fn start(&mut self, header: &SegmentHeader, records_offset: usize) {
        self.expected_seq = header.base_seq;
        self.chain_crc = header.crc();
        self.records_offset = records_offset;
        self.base_seq = header.base_seq;
        self.written.clear();
        self.writer_crc = header.crc();
    }

    /// The seq and end offset of the last record a writer appended in order (`base_seq - 1` and
    /// the records offset when none).
    fn last_written(&self) -> (u64, usize) {
        self.written
            .last()
            .copied()
            .unwrap_or((self.base_seq.saturating_sub(1), self.records_offset))
    }
}

fn push_record(out: &mut Vec<u8>, fields: &RecordFields<'_>) -> u32 {
    let start = out.len();
    out.resize(start + format::record_bytes(fields.payload.len()), 0);
    format::encode_record(fields, &mut out[start..])
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

/// Builds the body of one segment (records, garbage, zero runs, torn ends) after its header.
fn build_body(input: &mut Input<'_>, out: &mut Vec<u8>, chain: &mut Chain) {
    let ops = input.u8() % 24;
    for _ in 0..ops {
        if out.len() >= FUZZ_SEGMENT_BYTES || input.is_empty() {
            break;
        }
        let op = input.u8();
        match op % 10 {
            // A valid record continuing the chain, or (op 3) one with a wrong seq or chain.
            0..=3 => {
                let kind = input.u16().max(1);
                let codec_version = input.u8();
                let id_mode = input.u8();
                let event_id = match id_mode % 4 {
                    0 => {
                        let mut id = [0u8; 16];
                        let b = input.bytes(16);
                        id[..b.len()].copy_from_slice(b);
                        id
                    }
                    1 => [0x11; 16], // repeated: duplicate IDs across records
                    _ => {
                        let mut id = *b"fuzz-record-id..";
                        id[8..].copy_from_slice(&chain.records_built.to_le_bytes());
                        id
                    }
                };
                // Bit 5 of the ID mode fills the payload with one byte, so that a few input bytes
                // can fill a segment (and make the append rotate).
                let payload_len = usize::from(input.u8()) + usize::from(id_mode >> 6) * 256;
                let filled;
                let payload: &[u8] = if id_mode & 0x20 != 0 {
                    filled = vec![input.u8(); payload_len];
                    &filled
                } else {
                    input.bytes(payload_len)
                };
                let (seq, prev_crc) = if op % 10 == 3 {
                    let delta = input.u8();
                    match delta % 4 {
                        0 => (chain.expected_seq, input.u8().into()),
                        1 => (
                            chain.expected_seq.wrapping_sub(u64::from(delta >> 2)),
                            chain.chain_crc,
                        ),
                        2 => (
                            chain.expected_seq.wrapping_add(u64::from(delta >> 2)),
                            chain.chain_crc,
                        ),
                        _ => (near_limit(input, SEQ_MAX), chain.chain_crc),
                    }
                } else {
                    (chain.expected_seq, chain.chain_crc)
                };
                let (last_seq, last_end) = chain.last_written();
                let in_order = out.len() == last_end
                    && Some(seq) == last_seq.checked_add(1)
                    && prev_crc == chain.writer_crc;
                let crc = push_record(
                    out,
                    &RecordFields {
                        kind,
                        codec_version,
                        seq,
                        event_id,
                        prev_crc,
                        payload,
                    },
                );
                chain.expected_seq = seq.wrapping_add(1);
                chain.chain_crc = crc;
                chain.records_built += 1;
                if in_order && out.len() <= FUZZ_SEGMENT_BYTES {
                    chain.written.push((seq, out.len()));
                    chain.writer_crc = crc;
                }
            }
            // Arbitrary bytes (often not a multiple of 8, which misaligns what follows).
            4 | 5 => {
                let n = usize::from(input.u8());
                out.extend_from_slice(input.bytes(n));
            }
            // A run of zeroes.
            6 => {
                let n = usize::from(input.u8() % 64) * RECORD_ALIGN_BYTES;
                out.resize(out.len() + n, 0);
            }
            // Back to record alignment.
            7 => {
                let aligned = out.len().next_multiple_of(RECORD_ALIGN_BYTES);
                out.resize(aligned, 0);
            }
            // A torn end: cut some bytes off what was built.
            8 => {
                let cut = usize::from(input.u8() % 64) + 1;
                let keep = out.len().saturating_sub(cut).max(chain.records_offset);
                out.truncate(keep);
            }
            // Corrupt one byte of what was built (outside the segment header and commit area).
            _ => {
                let at = usize::from(input.u16());
                let mask = input.u8().max(1);
                let from = chain.records_offset;
                if out.len() > from {
                    let at = from + at % (out.len() - from);
                    out[at] ^= mask;
                }
            }
        }
    }
}

/// How long a planned segment file is: chosen with its flags, applied once its commit area is
/// written.
#[derive(Debug, Clone, Copy)]
enum FileLength {
    /// Preallocated to the segment size (the normal case).
    Whole,
    /// Cut this many bytes short of what was built: torn during creation or cut by outside damage.
    Short(usize),
    /// Longer than its header says.
    Long,
}

/// One segment file of a plan, before its commit area is written.
struct PlannedSegment {
    /// The index in the file name (the header may name another).
    index: u64,
    header: SegmentHeader,
    /// The file starts with `header` (not with bytes of the input), so its commit area can be
    /// written.
    has_header: bool,
    bytes: Vec<u8>,
    /// What a writer appended in order (see [`Chain::written`]).
    written: Vec<(u64, usize)>,
    length: FileLength,
}

/// Turns a fuzz input into the files of a journal directory.
///
/// Layout of the input: one byte of journal flags (segment count 1-3, how segment indices are
/// chosen, how base sequence numbers are chosen, whether a leftover `*.log.tmp` exists), then per
/// segment one byte of segment flags (header validity, file length, and in bit 7 a version 1
/// segment instead of a version 2 one), the base seq when the flags ask for one from the input,
/// and a body (see `build_body`); then one byte: the durability policy of the writable open and
/// whether a leftover `*.spare` file exists; then, per segment, three bytes that choose its commit
/// area (see `commit_area`; ignored for a version 1 segment). The commit areas come last so that
/// an input that ends early still describes whole segments (with commit areas never written).
pub fn journal_plan(data: &[u8]) -> JournalPlan {
    let mut input = Input { data };
    let flags = input.u8();
    let count = 1 + u64::from(flags % 3);
    let first_index = match (flags >> 2) & 7 {
        0..=4 => 0,
        5 => u64::from(input.u8()),
        6 => input.u64(),
        // The last segment at, just below or just above the largest index a journal may have.
        _ => SEGMENT_INDEX_MAX + u64::from(input.u8() % 4) - count,
    };
    let gaps = (flags >> 2) & 7 == 5;
    let leftover_tmp = (flags >> 5) & 1 == 1;
    let seq_mode = flags >> 6;

    let mut plan = JournalPlan::default();
    let mut chain = Chain {
        expected_seq: 1,
        chain_crc: 0,
        records_built: 0,
        records_offset: SEGMENT_RECORDS_OFFSET,
        base_seq: 1,
        written: Vec::new(),
        writer_crc: 0,
    };
    let mut segments: Vec<PlannedSegment> = Vec::new();
    let mut index = first_index;
    for i in 0..count {
        if i > 0 {
            let step = if gaps {
                1 + u64::from(input.u8() % 3)
            } else {
                1
            };
            match index.checked_add(step) {
                Some(next) => index = next,
                None => break,
            }
        }
        let seg_flags = input.u8();
        let base_seq = match seq_mode {
            0 | 1 => chain.expected_seq,
            2 => 1 + u64::from(input.u8()),
            _ => near_limit(&mut input, SEQ_MAX),
        };
        let format_version = if seg_flags & 0x80 != 0 {
            format::FORMAT_VERSION_V1
        } else {
            format::FORMAT_VERSION
        };
        let mut header = SegmentHeader {
            format_version,
            segment_bytes: FUZZ_SEGMENT_BYTES as u32,
            journal_id: FUZZ_JOURNAL_ID,
            segment_index: index,
            base_seq,
            created_unix_ms: 1_700_000_000_000 + i,
        };
        let mut bytes = Vec::with_capacity(FUZZ_SEGMENT_BYTES + 64);
        match seg_flags % 16 {
            // A header made of input bytes: garbage, truncated or zero.
            0 => {
                let n = usize::from(input.u8() % 96);
                bytes.extend_from_slice(input.bytes(n));
            }
            // A segment copied in from another journal.
            1 => header.journal_id = FOREIGN_JOURNAL_ID,
            // A header naming another segment than its file name.
            2 => header.segment_index = index.wrapping_add(1),
            _ => {}
        }
        let has_header = !seg_flags.is_multiple_of(16);
        if has_header {
            bytes.extend_from_slice(&header.encode());
            // The commit area stays zero until every segment is built (below).
            bytes.resize(header.records_offset(), 0);
        }
        chain.start(&header, header.records_offset());
        build_body(&mut input, &mut bytes, &mut chain);
        let length = match (seg_flags >> 4) % 8 {
            5 | 6 => FileLength::Short(usize::from(input.u8()) * RECORD_ALIGN_BYTES),
            7 => FileLength::Long,
            _ => FileLength::Whole,
        };
        segments.push(PlannedSegment {
            index,
            header,
            has_header,
            bytes,
            written: std::mem::take(&mut chain.written),
            length,
        });
    }
    // One more byte, after the segments so that shorter inputs keep their meaning: the policy of
    // the writable open, and a leftover spare segment of an earlier writer.
    let tail = input.u8();
    plan.durability = match tail % 3 {
        0 => Durability::Os,
        1 => Durability::Sync,
        _ => Durability::Group,
    };
    for at in 0..segments.len() {
        let successor = segments
            .get(at + 1)
            .map(|s| (s.header.segment_bytes, s.header.base_seq));
        let spec = [input.u8(), input.u8(), input.u8()];
        let segment = &mut segments[at];
        if segment.has_header && segment.header.has_commit_area() {
            let area = commit_area(&mut input, segment, successor, spec);
            segment.bytes[SEGMENT_HEADER_BYTES..SEGMENT_RECORDS_OFFSET].copy_from_slice(&area);
        }
        let bytes = &mut segment.bytes;
        match segment.length {
            FileLength::Short(cut) => {
                let len = bytes.len().min(FUZZ_SEGMENT_BYTES - RECORD_ALIGN_BYTES);
                bytes.truncate(len.saturating_sub(cut));
            }
            FileLength::Long => bytes.resize(FUZZ_SEGMENT_BYTES + RECORD_ALIGN_BYTES, 0),
            FileLength::Whole => bytes.resize(FUZZ_SEGMENT_BYTES, 0),
        }
    }
    for segment in segments {
        let name = recovery::segment_file_name(segment.index);
        plan.files.push((name, segment.bytes));
    }
    if leftover_tmp {
        let name = format!("{}.tmp", recovery::segment_file_name(index.wrapping_add(1)));
        plan.files.push((name, vec![0u8; 64]));
    }
    if tail & 0x80 != 0 {
        let name = format!("{:020}.spare", index.wrapping_add(1));
        plan.files.push((name, vec![0u8; FUZZ_SEGMENT_BYTES]));
    }
    plan
}

/// The 96 bytes of a version 2 segment's commit area, as `spec` (three input bytes) chooses: one
/// byte per slot, then one byte of generations (slot 0's in the low nibble, slot 1's in the high
/// one, each plus 1, so that equal generations and either order occur). The low nibble of a slot
/// byte is the slot's kind, its high nibble `p`:
/// - 0: never written (zero bytes);
/// - 1-3: a claim of the `p`-th last record a writer appended (0: the last one; counting back
///   past the first, a claim of none); 4: the same, sealed (naming the next segment of the plan,
///   or a successor that no file holds); 5: sealed and closed; 6-7: closed;
/// - 8, 9, 10: a claim (plain, sealed, closed) of `p + 1` records past the last one written;
/// - 11: the claim of the last record, torn: its first `1 + 3p` bytes, zeroes after;
/// - 12: the same claim with one bit flipped (the bit from the next two input bytes);
/// - 13: 48 bytes of the input;
/// - 14: the claim of the last record, checksummed for another journal's segment;
/// - 15: a copy of the other slot's bytes (zeroes if that one is a copy too).
fn commit_area(
    input: &mut Input<'_>,
    segment: &PlannedSegment,
    successor: Option<(u32, u64)>,
    spec: [u8; 3],
) -> [u8; 2 * COMMIT_SLOT_BYTES] {
    let header = segment.header;
    let crc = header.crc();
    let written = |back: u8| {
        let back = usize::from(back);
        match segment.written.len().checked_sub(1 + back) {
            Some(at) => segment.written[at],
            None => (header.base_seq.saturating_sub(1), header.records_offset()),
        }
    };
    let slot = |flags: u32, generation: u64, (committed, end): (u64, usize)| {
        let (next_segment_bytes, next_base_seq) = if flags & format::SLOT_SEALED != 0 {
            successor.unwrap_or((FUZZ_SEGMENT_BYTES as u32, committed.saturating_add(1)))
        } else {
            (0, 0)
        };
        CommitSlot {
            flags,
            generation,
            committed_seq: committed,
            end_offset: u32::try_from(end).unwrap_or(u32::MAX),
            next_segment_bytes,
            next_base_seq,
        }
    };
    let (sealed, closed) = (format::SLOT_SEALED, format::SLOT_CLOSED);
    let generations = [1 + u64::from(spec[2] & 15), 1 + u64::from(spec[2] >> 4)];
    let last = written(0);
    let mut slots = [[0u8; COMMIT_SLOT_BYTES]; 2];
    let mut copies = [false; 2];
    for i in 0..2 {
        let (kind, p, generation) = (spec[i] & 15, spec[i] >> 4, generations[i]);
        let ahead = (
            last.0.saturating_add(1 + u64::from(p)),
            (last.1 + RECORD_HEADER_BYTES * (usize::from(p) + 1)).min(FUZZ_SEGMENT_BYTES),
        );
        slots[i] = match kind {
            0 => [0u8; COMMIT_SLOT_BYTES],
            1..=3 => slot(0, generation, written(p)).encode(crc),
            4 => slot(sealed, generation, written(p)).encode(crc),
            5 => slot(sealed | closed, generation, written(p)).encode(crc),
            6 | 7 => slot(closed, generation, written(p)).encode(crc),
            8 => slot(0, generation, ahead).encode(crc),
            9 => slot(sealed, generation, ahead).encode(crc),
            10 => slot(closed, generation, ahead).encode(crc),
            11 => {
                let mut bytes = slot(0, generation, last).encode(crc);
                bytes[1 + 3 * usize::from(p)..].fill(0);
                bytes
            }
            12 => {
                let mut bytes = slot(0, generation, last).encode(crc);
                let bit = usize::from(input.u16()) % (COMMIT_SLOT_BYTES * 8);
                bytes[bit / 8] ^= 1 << (bit % 8);
                bytes
            }
            13 => {
                let mut bytes = [0u8; COMMIT_SLOT_BYTES];
                let taken = input.bytes(COMMIT_SLOT_BYTES);
                bytes[..taken.len()].copy_from_slice(taken);
                bytes
            }
            14 => {
                let other = SegmentHeader {
                    journal_id: FOREIGN_JOURNAL_ID,
                    ..header
                };
                slot(0, generation, last).encode(other.crc())
            }
            _ => {
                copies[i] = true;
                [0u8; COMMIT_SLOT_BYTES]
            }
        };
    }
    for i in 0..2 {
        if copies[i] && !copies[1 - i] {
            slots[i] = slots[1 - i];
        }
    }
    let mut area = [0u8; 2 * COMMIT_SLOT_BYTES];
    area[..COMMIT_SLOT_BYTES].copy_from_slice(&slots[0]);
    area[COMMIT_SLOT_BYTES..].copy_from_slice(&slots[1]);
    area
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

/// Invariants of any report and the records it came with.
fn check_scan(records: &[Record], report: &RecoveryReport) {
    assert_eq!(report.records, records.len() as u64);
    for pair in records.windows(2) {
        assert!(
            pair[0].position.seq < pair[1].position.seq,
            "seqs do not increase"
        );
        let a = (pair[0].position.segment_index, pair[0].position.offset);
        let b = (pair[1].position.segment_index, pair[1].position.offset);
        assert!(a < b, "positions do not increase");
    }
    if let Some(last) = records.last() {
        assert_eq!(report.last_seq, Some(last.position.seq));
    }
    for r in records {
        assert_ne!(r.kind, 0);
        assert!(r.position.offset >= SEGMENT_HEADER_BYTES as u64);
    }
    for t in &report.torn_tails {
        assert!(t.start_offset < t.end_offset, "empty torn tail {t:?}");
        // Nothing valid after a torn tail.
        assert!(
            records
                .iter()
                .all(|r| (r.position.segment_index, r.position.offset)
                    < (t.segment_index, t.start_offset)),
            "a record lies after a torn tail"
        );
    }
    for d in &report.damaged {
        assert!(d.start_offset < d.end_offset, "empty damaged range {d:?}");
    }
}

/// Writes the journal described by `data` to a temporary root, scans it read-only, opens it
/// writable (recovery) and appends one event, checking that recovery loses no valid record, leaves
/// no torn tail, and that the appended event is read back last.
pub fn journal_open(data: &[u8]) {
    let plan = journal_plan(data);
    let Some(root) = TempRoot::new() else { return };
    let dir = root.path().join("journal");
    for (name, bytes) in &plan.files {
        if std::fs::write(dir.join(name), bytes).is_err() {
            return;
        }
    }
    check_journal(root.path(), plan.durability, &plan.files);
}

fn read_all(root: &Path) -> Option<(Vec<Record>, RecoveryReport)> {
    JournalReader::open(root).ok()?.records(0).ok()
}

fn check_journal(root: &Path, durability: Durability, files: &[(String, Vec<u8>)]) {
    // (a) Read-only scan: must not panic; remember what it found.
    let Some((before, report_before)) = read_all(root) else {
        return;
    };
    check_scan(&before, &report_before);
    assert!(report_before.torn_tails.iter().all(|t| !t.zeroed));
    assert!(report_before.duplicate_ids.is_empty());
    // What the commit areas claimed, read before any open writes.
    let commits = read_commit_areas(&root.join("journal"), &report_before);
    check_commit_findings(&before, &report_before, &commits);

    // A follower hands out the same records as the scan, then nothing while nobody writes.
    let Ok(reader) = JournalReader::open(root) else {
        return;
    };
    let mut followed = Vec::new();
    let (mut follower, follow_report) = match reader.follow(0, |r| followed.push(r.to_owned())) {
        Ok(ok) => ok,
        Err(e) => panic!("follow failed where a scan succeeded: {e}"),
    };
    assert_eq!(followed, before, "follow and scan disagree");
    assert_eq!(follow_report, report_before, "follow and scan disagree");
    let polled = poll_all(&mut follower);
    assert!(
        polled.is_empty(),
        "a follower of an idle journal handed out records the scan did not accept: {polled:?}"
    );

    // (b) Writable open: recovery. May fail, must not panic.
    let options = JournalOptions {
        durability,
        segment_bytes: FUZZ_SEGMENT_BYTES,
    };
    let mut opened = Vec::new();
    let Ok((journal, open_report)) =
        Journal::open_visiting(root, options.clone(), |r| opened.push(r.to_owned()))
    else {
        return;
    };
    // The writable open hands out exactly the records the read-only scan did.
    assert_eq!(opened, before, "writable open and read-only scan disagree");
    // Recovery reports what the read-only scan found, plus duplicate IDs, and zeroes the tails.
    assert!(open_report.torn_tails.iter().all(|t| t.zeroed));
    let mut comparable = open_report.clone();
    comparable.duplicate_ids.clear();
    for t in &mut comparable.torn_tails {
        t.zeroed = false;
    }
    assert_eq!(
        comparable, report_before,
        "writable open saw another journal"
    );
    let ids: HashSet<[u8; 16]> = before.iter().map(|r| r.event_id.as_bytes()).collect();
    assert_eq!(
        open_report.duplicate_ids.len(),
        before.len() - ids.len(),
        "duplicate IDs miscounted"
    );

    // After recovery: the same records, no torn tail, nothing else changed but repairs.
    let Some((after_open, report_open)) = read_all(root) else {
        panic!("read-only scan failed after a successful writable open");
    };
    check_scan(&after_open, &report_open);
    assert_eq!(after_open, before, "recovery changed the valid records");
    check_foreign_tails(root, files, &report_open.torn_tails, "recovery");
    assert!(report_open.leftover_tmp_files.is_empty());
    assert_eq!(
        report_open.damaged, report_before.damaged,
        "recovery touched damage"
    );
    assert_eq!(report_open.bad_segments, report_before.bad_segments);
    assert_eq!(report_open.gaps, report_before.gaps);
    // Every segment before the active one is sealed by now, and the active one claims what it
    // holds: no claim is left that a later open could not settle (but a damaged one).
    // (A segment whose commit area is damaged is never sealed: what its readable slot says is
    // reported again, beside the damaged area.)
    let damaged_areas: Vec<u64> = commits
        .iter()
        .filter(|c| c.point.damaged)
        .map(|c| c.header.segment_index)
        .collect();
    // A segment whose end is damage is not sealed either (a seal would hide the damage from the
    // fast path): its claim is reported again beside the damage.
    let damaged_ends: Vec<u64> = report_open
        .damaged
        .iter()
        .filter(|d| d.next_good_seq.is_none())
        .map(|d| d.segment_index)
        .collect();
    assert!(
        report_open
            .unconfirmed_commits
            .iter()
            .all(|u| damaged_areas.contains(&u.segment_index)
                || damaged_ends.contains(&u.segment_index)),
        "unconfirmed commits left after recovery: {:?}",
        report_open.unconfirmed_commits
    );

    // (c) Append one event with an ID the journal does not hold, then read it back last.
    let mut id = [0xa5u8; 16];
    while ids.contains(&id) {
        id[0] = id[0].wrapping_add(1);
    }
    let Some(kind) = EventKind::new(0x7777) else {
        return;
    };
    let payload = b"appended by the fuzz target";
    let appended = journal.append(EventId::from_bytes(id), kind, codec::CODEC_VERSION, payload);
    let appended = match appended {
        Ok(a) => a,
        Err(JournalError::Full { .. }) => {
            // Only a journal at one of its limits may refuse, and it must then be unchanged.
            let last_seq = before.last().map_or(0, |r| r.position.seq);
            let at_last_index = root
                .join("journal")
                .join(recovery::segment_file_name(SEGMENT_INDEX_MAX))
                .exists();
            assert!(
                last_seq >= SEQ_MAX || at_last_index,
                "append refused as full by a journal below its limits"
            );
            drop(journal);
            let Some((after_refusal, _)) = read_all(root) else {
                panic!("read-only scan failed after a refused append");
            };
            assert_eq!(
                after_refusal, before,
                "a refused append changed the records"
            );
            assert!(poll_all(&mut follower).is_empty());
            return;
        }
        Err(e) => panic!("append after recovery failed: {e}"),
    };
    assert!(
        appended.written,
        "a fresh event ID was taken for a duplicate"
    );
    if let Some(last) = before.last() {
        assert!(
            appended.position.seq > last.position.seq,
            "appended seq does not increase"
        );
    }
    check_next_seq(appended.position.seq, &open_report, &commits);
    drop(journal);

    let Some((after_append, report_append)) = read_all(root) else {
        panic!("read-only scan failed after an append");
    };
    check_scan(&after_append, &report_append);
    check_foreign_tails(root, files, &report_append.torn_tails, "the append");
    assert_eq!(
        after_append.len(),
        before.len() + 1,
        "append lost or found records"
    );
    assert_eq!(&after_append[..before.len()], before.as_slice());
    let Some(new) = after_append.last() else {
        return;
    };
    assert_eq!(new.position, appended.position);
    assert_eq!(new.event_id, EventId::from_bytes(id));
    assert_eq!(new.kind, kind.get());
    assert_eq!(new.codec_version, codec::CODEC_VERSION);
    assert_eq!(new.payload, payload);

    // The follower picks up exactly the appended event.
    let polled = poll_all(&mut follower);
    assert_eq!(
        polled.as_slice(),
        std::slice::from_ref(new),
        "the follower did not pick up the append"
    );

    // (d) Open again after the clean close: the residue is gone, every damage the first open
    // found is still reported, and the next seq is above the one appended.
    let (journal, reopen_report) = match Journal::open(root, options) {
        Ok(ok) => ok,
        Err(JournalError::Full { .. }) => return,
        Err(e) => panic!("second writable open failed: {e}"),
    };
    check_foreign_tails(root, files, &reopen_report.torn_tails, "a clean close");
    assert!(
        reopen_report
            .unconfirmed_commits
            .iter()
            .all(|u| damaged_areas.contains(&u.segment_index)
                || damaged_ends.contains(&u.segment_index)),
        "unconfirmed commits after a clean close: {reopen_report:?}"
    );
    assert!(
        report_before.is_crash_residue_only() || !reopen_report.is_crash_residue_only(),
        "damage found by the first open is no longer reported: first {report_before:?}, then {reopen_report:?}"
    );
    id[1] = id[1].wrapping_add(1);
    while ids.contains(&id) {
        id[0] = id[0].wrapping_add(1);
    }
    match journal.append(EventId::from_bytes(id), kind, codec::CODEC_VERSION, payload) {
        Ok(again) => assert!(
            again.position.seq > appended.position.seq,
            "a seq used again after a reopen: {} then {}",
            appended.position.seq,
            again.position.seq
        ),
        Err(JournalError::Full { .. }) => {}
        Err(e) => panic!("append after the second open failed: {e}"),
    }
}

/// A torn tail found after the writer had the journal (`after`: after recovery, an append, a
/// clean close) holds only bytes that were in the file before any open: the writer never leaves
/// bad bytes of its own. (Recovery zeroes every torn tail its scan finds, but the scan of a
/// cleanly closed or sealed segment reads only up to 48 bytes past the end its commit point
/// names, so bytes put further on from outside survive until the writer appends next to them.)
fn check_foreign_tails(
    root: &Path,
    files: &[(String, Vec<u8>)],
    tails: &[recovery::TornTail],
    after: &str,
) {
    for tail in tails {
        let name = recovery::segment_file_name(tail.segment_index);
        let now = std::fs::read(root.join("journal").join(&name)).unwrap_or_default();
        let before = files
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(&[][..], |(_, b)| b.as_slice());
        for at in tail.start_offset as usize..tail.end_offset as usize {
            let byte = now.get(at).copied().unwrap_or(0);
            assert!(
                byte == 0 || before.get(at) == Some(&byte),
                "{name}: a torn tail after {after} holds a byte the writer wrote at {at}: {tail:?}"
            );
        }
    }
}

/// The commit area of one usable version 2 segment, read from its file the way recovery reads it.
struct SegmentCommit {
    header: SegmentHeader,
    point: CommitPoint,
}

/// The commit areas of the version 2 segments that `report` did not reject (row I), read
/// before anything writes.
fn read_commit_areas(dir: &Path, report: &RecoveryReport) -> Vec<SegmentCommit> {
    let Ok((listed, _, _)) =
        crate::root::dir::Dir::reader(dir).and_then(|dir| recovery::list_segments(&dir))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (index, path) in listed {
        let name = recovery::segment_file_name(index);
        if report.bad_segments.iter().any(|b| b.file_name == name) {
            continue;
        }
        let Ok(mut bytes) = std::fs::read(&path) else {
            continue;
        };
        let Ok(header) = SegmentHeader::decode(&bytes) else {
            panic!("{name}: a segment the scan used has no valid header");
        };
        // A file cut inside its commit area may have lost the newer slot: the claim is unknown.
        let cut = bytes.len() < header.records_offset();
        bytes.resize(bytes.len().max(header.records_offset()), 0);
        let Some(mut point) = CommitPoint::read(&bytes, &header) else {
            continue;
        };
        point.damaged |= cut;
        out.push(SegmentCommit { header, point });
    }
    out
}

/// The first seq of `header`'s segment that `records` does not hold.
fn first_missing(records: &[Record], header: &SegmentHeader) -> u64 {
    records
        .iter()
        .filter(|r| r.position.segment_index == header.segment_index)
        .map(|r| r.position.seq + 1)
        .max()
        .unwrap_or(header.base_seq)
}

/// What a report says about commit points agrees with the commit areas on disk: a torn tail
/// never starts at or below its segment's confirmed seq (those records were durable: losing them
/// is damage); records missing up to a claim are reported, as lost when they were confirmed and
/// as an unconfirmed commit otherwise; an unreadable commit area is reported.
fn check_commit_findings(records: &[Record], report: &RecoveryReport, commits: &[SegmentCommit]) {
    let commit_of = |index: u64| commits.iter().find(|c| c.header.segment_index == index);
    for t in &report.torn_tails {
        if let Some(c) = commit_of(t.segment_index) {
            let first = first_missing(records, &c.header);
            assert!(
                first > c.point.confirmed,
                "a torn tail holds seq {first}, at or below the confirmed seq {}: {t:?}",
                c.point.confirmed
            );
        }
    }
    for c in commits {
        let name = recovery::segment_file_name(c.header.segment_index);
        let index = c.header.segment_index;
        let lost = report
            .lost_acknowledged
            .iter()
            .find(|l| l.segment_index == index);
        let unconfirmed = report
            .unconfirmed_commits
            .iter()
            .find(|l| l.segment_index == index);
        if c.point.damaged {
            assert!(
                report.damaged_commit_areas.contains(&name),
                "{name}: unreadable commit area not reported"
            );
            continue;
        }
        let first = first_missing(records, &c.header);
        let (claimed, confirmed) = (c.point.claimed, c.point.confirmed);
        assert!(claimed >= confirmed && confirmed >= c.header.base_seq - 1);
        let expected = (first <= claimed).then_some(recovery::CommitLoss {
            segment_index: index,
            first_missing_seq: first,
            claimed_seq: claimed,
            confirmed_seq: confirmed,
        });
        if first <= confirmed {
            assert_eq!(lost, expected.as_ref(), "{name}: lost acknowledged records");
            assert_eq!(unconfirmed, None, "{name}: lost records called unconfirmed");
        } else {
            assert_eq!(lost, None, "{name}: unconfirmed records called lost");
            assert_eq!(unconfirmed, expected.as_ref(), "{name}: unconfirmed commit");
        }
    }
}

/// The next seq after a writable open (`seq`, the first one appended) is above every seq that
/// may have been acknowledged: at least the report's floor, above the claim of every usable
/// segment's commit area (its newest slot's), at least the successor's base seq of its seal
/// (when the newest slot is one), and above what a segment whose claim is unknown could hold.
///
/// (Not above every claim of every slot that decodes: an older slot that claims more than the
/// newer one, or a seal older than a plain claim, is a state neither the writer nor recovery
/// ever writes, and recovery reads the commit point from the newest slot, as journal-format.md
/// says.)
fn check_next_seq(seq: u64, report: &RecoveryReport, commits: &[SegmentCommit]) {
    assert!(
        seq >= report.next_seq_floor,
        "appended seq {seq} below the floor {}",
        report.next_seq_floor
    );
    for c in commits {
        assert!(
            seq > c.point.claimed,
            "segment {}: appended seq {seq} is claimed by its commit area: {:?}",
            c.header.segment_index,
            c.point
        );
        if let Some(seal) = c.point.seal() {
            assert!(
                seq >= seal.next_base_seq,
                "segment {}: appended seq {seq} below its sealed successor's base: {seal:?}",
                c.header.segment_index
            );
        }
        if c.point.damaged {
            let capacity = SegmentHeader::record_capacity(u64::from(c.header.segment_bytes));
            assert!(
                seq >= c.header.base_seq + capacity,
                "segment {}: appended seq {seq} within what a segment with an unknown claim holds",
                c.header.segment_index
            );
        }
    }
}

fn poll_all(follower: &mut Follower) -> Vec<Record> {
    let mut out = Vec::new();
    if let Err(e) = follower.poll(|r| out.push(r.to_owned())) {
        panic!("follower poll failed: {e}");
    }
    out
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
