//! Bodies of the cargo-fuzz targets, kept in the library so that `tests/fuzz_regressions.rs` replays
//! every committed seed and regression input through exactly the same code on stable Rust in CI.
//! Each function must never panic on any input except when an invariant it checks is broken.
//!
//! - [`record_decoder`]: the record and segment-header decoders of `journal::format`, their
//!   agreement with each other and with the encoders, and the pure segment scanner of recovery run
//!   over the input as the body of a segment.
//! - [`journal_open`]: structure-aware; the input describes one to three segment files (valid or
//!   broken headers, valid chained records, stale records, garbage, zero runs, torn ends, short and
//!   long files), which are written to a fresh temporary root and then scanned read-only, opened
//!   writable (recovery) and appended to.
//! - [`journal_commit_slot`]: the commit-slot decoder of version 2 segments under arbitrary
//!   headers (totality, re-encoding, the rules of journal-format.md restated), and the commit
//!   point recovery derives from two slots.
//! - [`codec_decode`]: the payload codec on a representative event shape.
//! - [`lifecycle_decoders`] (run by the `lifecycle_store` target): the fast lifecycle decoders
//!   against the reference (bincode) decoder, on the same bytes.
//! - [`replay`]: structure-aware; the input describes a sequence of records, mostly real
//!   lifecycle events of every kind over four handles, plus mutated payloads, garbage, other
//!   kinds and codec versions, fed to `Replayer`: the report, the manifests and determinism
//!   ([`check_replay`], which `tests/lifecycle_props.rs` also runs on its own sequences).
//! - [`guardian_control`]: the guardian's control lines (`tree::guardian::wire`): the line splitter
//!   under every chunking, both message decoders, and their round trip.
//! - [`guardian_receipt`]: the guardian's exit-receipt decoder, as given and with its checksum
//!   fixed up, and its round trip.
//! - [`snapshot_decode`]: the snapshot decoder, as given and behind a header fixed up to vouch
//!   for the payload, and its round trip.
//! - [`mcp_tool_call`] (with `mcp`): the MCP server's tool lookup and argument decoding
//!   ([`check_tool_call`], which `tests/mcp_props.rs` also runs on its own names and arguments).
//! - [`env_file`] (with `cli`): the `--env-file` decoder and its round trip.
//!
//! Temporary roots live under [`std::env::temp_dir`] (set `TMPDIR=/dev/shm` when fuzzing for speed)
//! and are removed when each run ends.
//!
//! Every minimised crash the campaigns found is kept in `fuzz/regressions/<target>/` and replayed by
//! `tests/fuzz_regressions.rs`; those of bugs not fixed yet are listed in [`KNOWN_BUGS`] (and in
//! that test's `OPEN_BUGS`, which checks that they still fail).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::codec::{self, Decode, Encode};
use crate::journal::format::{self, CommitSlot, FrameError, RecordFields, SegmentHeader};
use crate::journal::reader::{Follower, JournalReader, Record};
use crate::journal::recovery::{self, CommitPoint, RecoveryReport};
use crate::journal::{Durability, EventId, EventKind, Journal, JournalError, JournalOptions};
use crate::limits::{
    COMMIT_SLOT_BYTES, PAGE_BYTES, RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES,
    RECORD_PAYLOAD_BYTES_MAX, SEGMENT_BYTES_MAX, SEGMENT_HEADER_BYTES, SEGMENT_INDEX_MAX,
    SEGMENT_RECORDS_OFFSET, SEQ_MAX,
};

/// Bugs the campaigns found that are not fixed yet: `(target, regression input, what is wrong)`.
/// Each input is in `fuzz/regressions/<target>/` and still fails its target.
pub const KNOWN_BUGS: &[(&str, &str, &str)] = &[];

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
struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for byte in &mut b {
            *byte = self.u8();
        }
        u64::from_le_bytes(b)
    }
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        taken
    }
    fn is_empty(&self) -> bool {
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
struct TempRoot(PathBuf);

impl TempRoot {
    fn new() -> Option<TempRoot> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("procjournal-fuzz-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        let root = TempRoot(path);
        std::fs::create_dir_all(root.0.join("journal")).ok()?;
        Some(root)
    }
    fn path(&self) -> &Path {
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
// codec_decode

/// A representative event payload: every shape the codec must carry.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct FuzzPayload {
    pub command: String,
    pub output: Vec<u8>,
    pub exit_code: Option<u64>,
    pub env: BTreeMap<String, String>,
    pub state: FuzzState,
    pub id: [u8; 16],
    pub history: Vec<FuzzState>,
}

/// A representative enum with unit, tuple and struct variants.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum FuzzState {
    Starting,
    Running { pid: u32, started_ms: u64 },
    Exited(i32),
    Signalled { signo: u8, core_dumped: bool },
    Failed(String),
}

/// The same wire shape as [`FuzzPayload`], with the map as the list of pairs it is on the wire. A
/// map decoder keeps the last of duplicate keys and sorts them, so only a payload whose keys are
/// strictly increasing is the canonical encoding of the value it decodes to.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
struct FuzzPayloadWire {
    command: String,
    output: Vec<u8>,
    exit_code: Option<u64>,
    env: Vec<(String, String)>,
    state: FuzzState,
    id: [u8; 16],
    history: Vec<FuzzState>,
}

/// Decodes `data` as a [`FuzzPayload`]; when it decodes, re-encoding must give back `data` exactly
/// (or, when the map part of `data` is not canonical, the canonical encoding of the same value).
pub fn codec_decode(data: &[u8]) {
    assert!(codec::decode::<FuzzPayload>(codec::CODEC_VERSION.wrapping_add(1), data).is_err());
    let value = codec::decode::<FuzzPayload>(codec::CODEC_VERSION, data);
    let wire = codec::decode::<FuzzPayloadWire>(codec::CODEC_VERSION, data);
    let (value, wire) = match (value, wire) {
        (Ok(value), Ok(wire)) => (value, wire),
        (Err(_), Err(_)) => return,
        (value, wire) => panic!(
            "the map and its wire shape disagree: {:?} vs {:?}",
            value.map(|_| ()),
            wire.map(|_| ())
        ),
    };
    let from_wire: BTreeMap<String, String> = wire.env.iter().cloned().collect();
    assert_eq!(value.env, from_wire);
    let encoded = match codec::encode(&value) {
        Ok(bytes) => bytes,
        Err(e) => panic!("a decoded value does not encode: {e}"),
    };
    let canonical = wire.env.windows(2).all(|w| w[0].0 < w[1].0);
    if canonical {
        assert_eq!(
            encoded, data,
            "a decoded payload does not re-encode to its bytes"
        );
    } else {
        let canonical_wire = FuzzPayloadWire {
            env: value.env.clone().into_iter().collect(),
            ..wire
        };
        let expected = match codec::encode(&canonical_wire) {
            Ok(bytes) => bytes,
            Err(e) => panic!("the canonical wire shape does not encode: {e}"),
        };
        assert_eq!(encoded, expected);
    }
    match codec::decode::<FuzzPayload>(codec::CODEC_VERSION, &encoded) {
        Ok(again) => assert_eq!(again, value, "decode(encode(v)) != v"),
        Err(e) => panic!("a re-encoded payload does not decode: {e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Spool, rendering and lifecycle targets.

/// Safe-text rendering over arbitrary bytes: the text is UTF-8 with no control character but
/// newline and tab; `normalized == false` means the text is exactly the consumed bytes; at the end
/// of the output everything is consumed; otherwise only an unfinished unit (a character, `\r`, an
/// escape sequence shorter than `ESCAPE_BYTES_MAX`) is held back. Paged with the first byte's
/// limit, the pages concatenate to the whole rendering.
pub fn safe_text(data: &[u8]) {
    let Some((&flags, bytes)) = data.split_first() else {
        return;
    };
    let at_end = flags & 1 == 1;
    let r = crate::render::safe_text(bytes, at_end);
    assert!(r.consumed <= bytes.len());
    if at_end {
        assert_eq!(r.consumed, bytes.len());
    } else {
        assert!(bytes.len() - r.consumed < crate::render::ESCAPE_BYTES_MAX);
    }
    for c in r.text.chars() {
        assert!(
            c == '\n' || c == '\t' || !(c.is_control()),
            "control character {c:?} in safe text"
        );
    }
    if !r.normalized {
        assert_eq!(r.text.as_bytes(), &bytes[..r.consumed]);
    }
    assert_eq!(
        crate::render::base64(bytes).len(),
        bytes.len().div_ceil(3) * 4
    );
    let max_bytes = usize::from(flags >> 1) + 1;
    let pages = safe_text_pages(bytes, max_bytes, at_end);
    assert_eq!(pages.concat(), r.text, "pages of {max_bytes} bytes");
}

/// The pages of safe text a client reads cursor by cursor, `max_bytes` at a time, from output
/// that is `bytes` (complete when `complete`), through [`crate::supervisor::read_page`], the loop
/// every surface's offline reader runs. Stops at the first page that makes no progress (the
/// live end). Also checks that no page ends inside the unit it started.
pub fn safe_text_pages(bytes: &[u8], max_bytes: usize, complete: bool) -> Vec<String> {
    use crate::lifecycle::State;
    use crate::supervisor::{Rendering, read_page};
    let handle = crate::lifecycle::Handle(crate::journal::EventId::from_bytes([7; 16]));
    let state = if complete {
        State::Exited
    } else {
        State::Running
    };
    let mut pages = Vec::new();
    let mut cursor = 0u64;
    loop {
        let read = |n: usize| -> Result<crate::spool::SpoolRead, std::convert::Infallible> {
            let from = usize::try_from(cursor)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            let to = from.saturating_add(n).min(bytes.len());
            Ok(crate::spool::SpoolRead {
                bytes: bytes[from..to].to_vec(),
                next_cursor: to as u64,
                total_bytes: bytes.len() as u64,
                ..crate::spool::SpoolRead::default()
            })
        };
        let Ok(page) = read_page(&handle, state, cursor, max_bytes, Rendering::SafeText, read);
        if page.next_cursor == cursor {
            break;
        }
        assert!(page.next_cursor > cursor, "a page went backwards");
        pages.push(page.data);
        cursor = page.next_cursor;
    }
    pages
}

/// A spool directory whose segment bytes are arbitrary (some framed validly, some with damage in
/// the middle and valid chunks after it): opening it read-only and writable never panics; reads
/// at any cursor return typed errors or bytes consistent with the bounds; damaged ranges are
/// ordered and disjoint and their cursors never read; a writable open finds the same damage and
/// total as a reader (it cuts nothing with a valid chunk after it); what a reader could read
/// before a writable open is still readable after it and after one more append.
pub fn spool_recovery(data: &[u8]) {
    use crate::spool::format::{SpoolHeader, Stream, encode_chunk};
    use crate::spool::{Spool, SpoolDamage, SpoolOptions};
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let Some(root) = TempRoot::new() else {
        return;
    };
    let dir = root.path().join("spool");
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let files = usize::from(shape % 3) + 1;
    let piece = rest.len() / files;
    let mut cursor = 0u64;
    for i in 0..files {
        let chunk = &rest[i * piece..(i + 1) * piece];
        let mut bytes = Vec::new();
        let first_cursor = cursor;
        if shape & (8 << i) == 0 {
            bytes.extend_from_slice(
                &SpoolHeader {
                    spool_id: [7; 16],
                    first_cursor,
                    segment_index: i as u64,
                    created_unix_ms: 0,
                }
                .encode(),
            );
            // Valid chunks built from the input, then the raw remainder as garbage.
            let (framed, garbage) = chunk.split_at(chunk.len() / 2);
            for part in framed.chunks(37).filter(|p| !p.is_empty()) {
                let stream = match part[0] % 3 {
                    0 => Stream::Stdout,
                    1 => Stream::Stderr,
                    _ => Stream::Terminal,
                };
                encode_chunk(stream, cursor, part, &mut bytes);
                cursor += part.len() as u64;
            }
            if shape & 0x80 != 0 {
                bytes.extend_from_slice(garbage);
                if shape & 0x40 != 0 && !framed.is_empty() {
                    // Valid chunks after the garbage that continue the cursors as damaged
                    // chunks there could have: mid-segment damage, which recovery must keep.
                    bytes.resize(bytes.len().next_multiple_of(8), 0xEE);
                    let room = (bytes.len() as u64).saturating_sub(64 + 24);
                    cursor += room.min(1 + u64::from(framed[0]));
                    for part in framed.chunks(53).filter(|p| !p.is_empty()) {
                        encode_chunk(Stream::Stdout, cursor, part, &mut bytes);
                        cursor += part.len() as u64;
                    }
                }
            }
            if shape & 0x04 != 0 && bytes.len() > 64 {
                // One flipped bit among the chunks: damage in the middle, or a torn tail.
                let at = 64 + (bytes.len() - 64) / 3;
                bytes[at] ^= 1 << (shape % 8);
            }
        } else {
            bytes.extend_from_slice(chunk);
        }
        let name = format!("{first_cursor:020}.seg");
        if std::fs::write(dir.join(name), &bytes).is_err() {
            return;
        }
    }
    // Everything readable, stepping over the damaged ranges recovery reported.
    let readable = |spool: &Spool, damaged: &[SpoolDamage]| -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = spool.retained_from();
        while at < spool.total_bytes() {
            if let Some(d) = damaged.iter().find(|d| d.first_cursor == at) {
                if let Ok(r) = spool.read(at, 1) {
                    assert!(
                        r.skipped
                            .is_some_and(|s| s.kind == crate::spool::SkipKind::Damage),
                        "a damaged cursor was read"
                    );
                }
                at = d.end_cursor;
                continue;
            }
            match spool.read(at, 4096) {
                Ok(r) => {
                    assert!(r.retained_from <= r.total_bytes);
                    let start = r.skipped.as_ref().map_or(at, |s| s.to);
                    assert_eq!(r.next_cursor, start + r.bytes.len() as u64);
                    if r.bytes.is_empty() {
                        break;
                    }
                    out.push((at, r.bytes));
                    at = r.next_cursor;
                }
                Err(_) => break,
            }
        }
        out
    };
    let (before, before_total, before_damage) = match Spool::open_reader(&dir) {
        Ok((spool, recovery)) => {
            assert!(
                spool.read(spool.total_bytes() + 1, 1).is_err(),
                "cursor ahead accepted"
            );
            // Damaged ranges are ordered, disjoint, non-empty, and inside the output.
            let mut last = (spool.retained_from(), 0u64);
            for d in &recovery.damaged {
                assert!(
                    d.first_cursor >= last.0 && d.start_offset >= last.1,
                    "{recovery:?}"
                );
                assert!(d.first_cursor < d.end_cursor && d.end_cursor < spool.total_bytes());
                assert!(d.start_offset < d.end_offset);
                last = (d.end_cursor, d.end_offset);
            }
            (
                readable(&spool, &recovery.damaged),
                spool.total_bytes(),
                recovery.damaged,
            )
        }
        Err(_) => return,
    };
    let Ok((mut writer, recovery)) = Spool::open_writer(&dir, [7; 16], SpoolOptions::default())
    else {
        return;
    };
    // A writable open cuts nothing that has a valid chunk after it: it finds what a reader found.
    assert_eq!(recovery.damaged, before_damage);
    assert_eq!(writer.total_bytes(), before_total);
    let total = writer.total_bytes();
    if writer.append(Stream::Stdout, b"appended").is_err() || writer.flush().is_err() {
        return;
    }
    drop(writer);
    let Ok((reader, recovery)) = Spool::open_reader(&dir) else {
        panic!("a spool that opened for writing no longer opens for reading");
    };
    assert_eq!(recovery.damaged, before_damage);
    let after = readable(&reader, &recovery.damaged);
    let flat = |v: &[(u64, Vec<u8>)]| v.iter().flat_map(|(_, b)| b.clone()).collect::<Vec<u8>>();
    let (before, after) = (flat(&before), flat(&after));
    assert!(after.starts_with(&before) || after.len() < before.len() && before.is_empty());
    assert_eq!(reader.total_bytes(), total + 8);
}

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
    use crate::lifecycle::event::*;
    use crate::lifecycle::{ManifestStore, State};
    let id = |n: u8| EventId::from_bytes([n; 16]);
    let handle = |h: u8| Handle(id(200 + h % 3));
    let ids = |h: u8| LifecycleIds {
        running: id(10 * (h % 3) + 1),
        terminal: id(10 * (h % 3) + 2),
        lost: id(10 * (h % 3) + 3),
        completion: id(10 * (h % 3) + 4),
    };
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
        let hd = handle(h);
        let state = State::ALL[usize::from(x % 9)];
        let bounds = CursorBounds {
            retained_from: u64::from(x >> 4),
            total_bytes: u64::from(x >> 2) + u64::from(pick & 3),
        };
        let event = match op % 10 {
            0 => LifecycleEvent::Registered(Registered {
                handle: hd,
                ids: ids(h),
                command: CommandSpec::default(),
                at_unix_ms: 0,
            }),
            1 => LifecycleEvent::Running(Running {
                handle: hd,
                pid: u32::from(x),
                witness: IdentityWitness {
                    start_time_ticks: 1,
                    boot_id: [1; 16],
                },
                at_unix_ms: 0,
            }),
            2 => LifecycleEvent::StopRequested(StopRequested {
                handle: hd,
                reason: String::new(),
                requested_by: String::new(),
                at_unix_ms: 0,
            }),
            3 => LifecycleEvent::InputClosed(InputClosed {
                handle: hd,
                at_unix_ms: 0,
            }),
            4 => LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
                handle: hd,
                bounds,
                at_unix_ms: 0,
            }),
            5 => LifecycleEvent::Terminal(Terminal {
                handle: hd,
                state,
                exit: ExitStatus::Code(i32::from(x)),
                bounds,
                capture: CaptureStatus::Complete,
                reason: String::new(),
                at_unix_ms: 0,
            }),
            6 => LifecycleEvent::LostOnRestore(LostOnRestore {
                handle: hd,
                bounds,
                at_unix_ms: 0,
            }),
            7 => LifecycleEvent::LifecyclePublished(LifecyclePublished {
                handle: hd,
                event: [ids(h).running, ids(h).terminal, ids(h).lost, id(99)][usize::from(x % 4)],
            }),
            8 => LifecycleEvent::OutputGap(OutputGap {
                handle: hd,
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
                handle: hd,
                command: if x & 1 == 0 {
                    ids(h).completion
                } else {
                    id(98)
                },
            }),
        };
        // A record about a step is accepted only under the ID derived from the step's.
        let derived = match &event {
            LifecycleEvent::LifecyclePublished(e) => Some(e.event.derived(derived::PUBLISHED)),
            LifecycleEvent::CompletionNotified(_) => {
                Some(ids(h).completion.derived(derived::NOTIFIED))
            }
            _ => None,
        };
        let event_id = match (pick % 6, derived) {
            (0, _) => id(100 + pick / 6 % 50),
            (1, _) => ids(h).running,
            (2, _) => ids(h).terminal,
            (3, _) => ids(h).lost,
            (4, _) => ids(h.wrapping_add(1)).terminal,
            (_, Some(derived)) => derived,
            (_, None) => id(10 * (h % 3) + 9),
        };
        let before = store.clone();
        let old = store.get(&hd).cloned();
        let checked = store.check(event_id, &event);
        let applied = store.apply(event_id, &event);
        assert_eq!(checked, applied, "check and apply disagree");
        if applied.is_err() {
            assert_eq!(store, before, "a refused event changed the store");
            continue;
        }
        let Some(new) = store.get(&hd) else {
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
}

// ---------------------------------------------------------------------------------------------
// replay

/// One record as a scan hands it to replay, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayRecord {
    pub event_id: EventId,
    pub kind: u16,
    pub codec_version: u8,
    pub payload: Vec<u8>,
}

impl ReplayRecord {
    /// The record of `event` under `event_id`, encoded by the real codec.
    pub fn of(event_id: EventId, event: &crate::lifecycle::LifecycleEvent) -> Self {
        ReplayRecord {
            event_id,
            kind: event.kind().get(),
            codec_version: codec::CODEC_VERSION,
            // Every lifecycle event encodes (the codec has no limit on encoding).
            payload: event.encode().unwrap_or_default(),
        }
    }
}

/// The most records one [`replay`] input describes, so that one run stays short.
pub const REPLAY_RECORDS_MAX: usize = 512;

/// How many handles [`replay_records`] draws from (the events of each hit one manifest).
const REPLAY_HANDLES: u8 = 4;

/// IDs of [`replay_records`]: `tag` says what the ID is for, `h` whose it is.
fn replay_id(tag: u8, h: u8, n: u64) -> EventId {
    let mut b = [0u8; 16];
    b[0] = tag;
    b[1] = h;
    b[8..].copy_from_slice(&n.to_le_bytes());
    EventId::from_bytes(b)
}

fn replay_handle(h: u8) -> crate::lifecycle::Handle {
    crate::lifecycle::Handle(replay_id(6, h % REPLAY_HANDLES, 0))
}

fn replay_ids(h: u8) -> crate::lifecycle::LifecycleIds {
    let h = h % REPLAY_HANDLES;
    crate::lifecycle::LifecycleIds {
        running: replay_id(2, h, 0),
        terminal: replay_id(3, h, 0),
        lost: replay_id(4, h, 0),
        completion: replay_id(5, h, 0),
    }
}

/// The generator's state: fresh IDs, IDs handed out, and each handle's last bounds and gap end
/// as the generator last chose them (not as the store accepted them: it does not know).
#[derive(Default)]
struct ReplayGen {
    fresh: u64,
    used: Vec<EventId>,
    bounds: [crate::lifecycle::event::CursorBounds; REPLAY_HANDLES as usize],
    gap_end: [u64; REPLAY_HANDLES as usize],
}

impl ReplayGen {
    /// A fresh ID; half of them sort below every reserved ID (tag 0), so that lookups take
    /// both paths of the store's reservation check.
    fn fresh(&mut self) -> EventId {
        self.fresh += 1;
        let tag = if self.fresh.is_multiple_of(2) { 0 } else { 7 };
        replay_id(tag, 0, self.fresh)
    }

    fn bounds(&mut self, h: u8, x: u8) -> crate::lifecycle::event::CursorBounds {
        let slot = &mut self.bounds[usize::from(h % REPLAY_HANDLES)];
        let mut next = *slot;
        if x & 0x40 == 0 {
            next.total_bytes += u64::from(x & 15);
        } else {
            // Backwards, sometimes.
            next.total_bytes = next.total_bytes.saturating_sub(u64::from(x & 3) + 1);
        }
        // Sometimes past `total_bytes`: inconsistent.
        next.retained_from += u64::from((x >> 4) & 3);
        *slot = next;
        next
    }

    /// A real lifecycle event for handle `h`, of the kind that `k` picks (each lifecycle kind
    /// has its own arm), its fields from `x` and `input`.
    fn event(
        &mut self,
        k: u8,
        h: u8,
        x: u8,
        input: &mut Input<'_>,
    ) -> crate::lifecycle::LifecycleEvent {
        use crate::lifecycle::State;
        use crate::lifecycle::event::*;
        let handle = replay_handle(h);
        let ids = replay_ids(h);
        let at_unix_ms = u64::from(x);
        let exit = |v: u8| match v % 3 {
            0 => ExitStatus::Code(i32::from(v) - 100),
            1 => ExitStatus::Signal(i32::from(v % 32)),
            _ => ExitStatus::Unknown,
        };
        let text = |n: u8| {
            "é-x\u{1b}"
                .chars()
                .cycle()
                .take(usize::from(n % 6))
                .collect()
        };
        match k % 20 {
            18 => {
                let arg_count = input.u8() % 3;
                let env = |i: u8| EnvVar {
                    name: text(i.wrapping_add(x)),
                    value: (i & 1 == 0).then(|| text(x ^ i)),
                };
                LifecycleEvent::RegisteredV2(RegisteredV2 {
                    handle,
                    ids,
                    command: Box::new(CommandSpecV2 {
                        program: text(x),
                        args: (0..arg_count).map(|i| text(x ^ i)).collect(),
                        cwd: "/".into(),
                        env_overrides: (0..x % 4).map(env).collect(),
                        labels: (0..x % 2).map(|i| (format!("k{i}"), text(x))).collect(),
                        limits: Limits::default(),
                        owner: text(x >> 3),
                        env_policy: EnvPolicy {
                            base: [EnvBase::Inherited, EnvBase::Explicit, EnvBase::Client]
                                [usize::from(x % 3)],
                            removed: (0..x % 3).map(text).collect(),
                            overlay: match (x >> 2) % 3 {
                                0 => EnvOverlay::Off,
                                1 => EnvOverlay::Applied {
                                    names: vec!["PATH".into()],
                                },
                                _ => EnvOverlay::Failed { reason: text(x) },
                            },
                        },
                    }),
                    // Another handle, registered or not (yet), or itself.
                    restart_of: (x & 0x10 != 0).then(|| replay_handle(h.wrapping_add(x >> 5))),
                    at_unix_ms,
                })
            }
            0 => {
                let mut ids = ids;
                match x % 8 {
                    // One of another handle's IDs: refused while that one holds it.
                    7 => ids.terminal = replay_ids(h.wrapping_add(1)).terminal,
                    // The same ID twice in one registration.
                    6 => ids.lost = ids.running,
                    _ => {}
                }
                let arg_count = input.u8() % 4;
                LifecycleEvent::Registered(Registered {
                    handle,
                    ids,
                    command: CommandSpec {
                        program: text(x),
                        args: (0..arg_count).map(|i| text(x ^ i)).collect(),
                        cwd: "/".into(),
                        env_overrides: (0..x % 3).map(|i| (text(i), text(x))).collect(),
                        labels: (0..x % 3).map(|i| (format!("k{i}"), text(x))).collect(),
                        limits: Limits {
                            wall_clock_ms: (x & 1 == 1).then_some(u64::from(x)),
                            idle_ms: (x & 2 == 2).then_some(7),
                            output_retention_bytes: (x & 4 == 4).then_some(1 << 20),
                        },
                        owner: text(x >> 3),
                    },
                    at_unix_ms,
                })
            }
            1 => LifecycleEvent::Running(Running {
                handle,
                pid: u32::from(x),
                witness: IdentityWitness {
                    start_time_ticks: u64::from(x),
                    boot_id: [x; 16],
                },
                at_unix_ms,
            }),
            2 => LifecycleEvent::StopRequested(StopRequested {
                handle,
                reason: text(x),
                requested_by: text(x >> 2),
                at_unix_ms,
            }),
            3 => LifecycleEvent::InputClosed(InputClosed { handle, at_unix_ms }),
            4 => LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
                handle,
                bounds: self.bounds(h, x),
                at_unix_ms,
            }),
            5 => LifecycleEvent::Terminal(Terminal {
                handle,
                state: State::ALL[usize::from(x % 9)],
                exit: exit(x >> 2),
                bounds: self.bounds(h, input.u8()),
                capture: match (x >> 4) % 3 {
                    0 => CaptureStatus::Complete,
                    1 => CaptureStatus::Incomplete(text(x)),
                    _ => CaptureStatus::Failed(text(x)),
                },
                reason: text(x),
                at_unix_ms,
            }),
            6 => LifecycleEvent::LostOnRestore(LostOnRestore {
                handle,
                bounds: self.bounds(h, x),
                at_unix_ms,
            }),
            7 => LifecycleEvent::LifecyclePublished(LifecyclePublished {
                handle,
                event: [
                    ids.running,
                    ids.terminal,
                    ids.lost,
                    ids.completion,
                    replay_id(1, h % REPLAY_HANDLES, 0),
                    replay_ids(h.wrapping_add(1)).running,
                ][usize::from(x % 6)],
            }),
            8 => LifecycleEvent::CompletionNotified(CompletionNotified {
                handle,
                command: if x % 4 == 3 {
                    ids.running
                } else {
                    ids.completion
                },
            }),
            9 => {
                let mechanism = [
                    TreeMechanism::Group,
                    TreeMechanism::Guardian,
                    TreeMechanism::Cgroup,
                ][usize::from(x % 3)];
                let guarded = mechanism != TreeMechanism::Group;
                LifecycleEvent::Scoped(Scoped {
                    handle,
                    mechanism,
                    boot_id: [1; 16],
                    workload: ProcessWitness {
                        // Half the scopes of a handle are the same record.
                        pid: u32::from(x >> 7),
                        start_time_ticks: 1,
                        pidfs_ino: 0,
                    },
                    guardian: guarded.then_some(ProcessWitness {
                        pid: 2,
                        start_time_ticks: 1,
                        pidfs_ino: 3,
                    }),
                    cgroup: (mechanism == TreeMechanism::Cgroup).then(|| "/cg".to_owned()),
                    receipt: guarded.then(|| ReceiptBinding {
                        path: "trees/r".into(),
                        dev: 1,
                        ino: 2,
                        nonce: [h; 16],
                    }),
                    at_unix_ms: 0,
                })
            }
            10 => LifecycleEvent::TreeReleased(TreeReleased {
                handle,
                proof: match x % 3 {
                    0 => ExitProof::Receipt {
                        status: exit(x >> 2),
                        reaped: u64::from(x >> 6),
                    },
                    1 => ExitProof::CgroupEmpty,
                    _ => ExitProof::BootChanged,
                },
                at_unix_ms: 0,
            }),
            12 => LifecycleEvent::OutputRetired(OutputRetired {
                handle,
                // Two reasons and two times: a repeat of the same retirement, or another one.
                reason: text(x & 1),
                at_unix_ms: u64::from(x >> 7),
            }),
            13 => LifecycleEvent::GateChanged(GateChanged {
                paused: x & 1 == 1,
                requested_by: text(x >> 1),
                reason: text(x >> 3),
                at_unix_ms,
            }),
            14 => LifecycleEvent::HumanInput(HumanInput {
                handle,
                waiting: x & 1 == 1,
                by: text(x >> 1),
                at_unix_ms,
            }),
            15 => LifecycleEvent::DeadlineFired(DeadlineFired {
                handle,
                deadline: if x & 1 == 0 {
                    Deadline::Wall
                } else {
                    Deadline::Idle
                },
                // The registration's limits (above): wall `x`, idle 7; sometimes another.
                limit_ms: match (x >> 1) % 3 {
                    0 => u64::from(x),
                    1 => 7,
                    _ => u64::from(x >> 2),
                },
                clock_from_unix_ms: u64::from(x >> 1),
                at_unix_ms,
            }),
            16 => LifecycleEvent::DeadlineFailed(DeadlineFailed {
                handle,
                deadline: if x & 1 == 0 {
                    Deadline::Wall
                } else {
                    Deadline::Idle
                },
                error: text(x >> 1),
                at_unix_ms,
            }),
            19 => LifecycleEvent::AdmissionLimitSet(AdmissionLimitSet {
                // Few values, so that a setting equal to the one in force comes up; 0 now and
                // then, which is refused.
                max_concurrent: match x % 4 {
                    0 => None,
                    1 => Some(0),
                    _ => Some(u64::from((x >> 2) % 3 + 1)),
                },
                requested_by: text(x >> 4),
                at_unix_ms,
            }),
            17 => LifecycleEvent::TerminalResized(crate::lifecycle::event::TerminalResized {
                handle,
                // A size of 0 now and then, which is refused.
                rows: u16::from(x & 7),
                cols: u16::from(x >> 3),
                at_unix_ms,
            }),
            _ => {
                let end = &mut self.gap_end[usize::from(h % REPLAY_HANDLES)];
                let from = if x & 0x80 == 0 {
                    *end + u64::from(x & 3)
                } else {
                    end.saturating_sub(1)
                };
                let to = from + u64::from((x >> 2) & 7);
                *end = to;
                LifecycleEvent::OutputGap(OutputGap {
                    handle,
                    gap: crate::spool::Gap {
                        from,
                        to,
                        reason: [
                            crate::spool::LossReason::Retention,
                            crate::spool::LossReason::DiskFull,
                            crate::spool::LossReason::IoError,
                            crate::spool::LossReason::SyncFailed,
                        ][usize::from((x >> 5) % 4)],
                        errno: i32::from(x >> 6) * 28,
                    },
                    at_unix_ms,
                })
            }
        }
    }

    /// The ID the rules want for `event` of handle `h`: the allocated one for a step, the
    /// derived one for a record about a step, a fresh one otherwise.
    fn right_id(&mut self, event: &crate::lifecycle::LifecycleEvent, h: u8) -> EventId {
        use crate::lifecycle::LifecycleEvent as E;
        use crate::lifecycle::event::derived;
        let ids = replay_ids(h);
        match event {
            E::Registered(_) | E::RegisteredV2(_) => replay_id(1, h % REPLAY_HANDLES, 0),
            E::Running(_) => ids.running,
            E::Terminal(_) => ids.terminal,
            E::LostOnRestore(_) => ids.lost,
            E::LifecyclePublished(e) => e.event.derived(derived::PUBLISHED),
            E::CompletionNotified(_) => ids.completion.derived(derived::NOTIFIED),
            E::Scoped(_) => ids.running.derived(derived::SCOPED),
            E::TreeReleased(_) => ids.terminal.derived(derived::RELEASED),
            E::OutputRetired(_) => ids.terminal.derived(derived::RETIRED),
            E::StopRequested(_)
            | E::InputClosed(_)
            | E::OutputCheckpoint(_)
            | E::OutputGap(_)
            | E::GateChanged(_)
            | E::AdmissionLimitSet(_)
            | E::HumanInput(_)
            | E::DeadlineFired(_)
            | E::DeadlineFailed(_)
            | E::TerminalResized(_) => self.fresh(),
        }
    }
}

/// Decodes a [`replay`] input into records: four bytes a record (`sel`, handle, ID choice, a
/// field byte), a few more for some. Three records in four are real lifecycle events of every
/// kind, encoded by the real codec, for one of four handles; the rest are the same events with
/// a mutated payload, garbage under a lifecycle kind, records of other kinds, and records of
/// another codec version. Three IDs in five are the one the rules want; the others are fresh,
/// allocated to another step or handle, or reused.
pub fn replay_records(data: &[u8]) -> Vec<ReplayRecord> {
    let mut input = Input { data };
    let mut generator = ReplayGen::default();
    let mut records = Vec::new();
    while !input.is_empty() && records.len() < REPLAY_RECORDS_MAX {
        let [sel, h, pick, x] = [input.u8(), input.u8(), input.u8(), input.u8()];
        let event = generator.event(sel % 20, h, x, &mut input);
        let event_id = match pick % 10 {
            0..=5 => generator.right_id(&event, h),
            6 => generator.fresh(),
            7 => {
                let ids = replay_ids(h.wrapping_add(pick >> 6));
                [ids.running, ids.terminal, ids.lost, ids.completion][usize::from(x % 4)]
            }
            8 if !generator.used.is_empty() => {
                generator.used[usize::from(pick) % generator.used.len()]
            }
            _ => replay_id(1, (h.wrapping_add(1)) % REPLAY_HANDLES, 0),
        };
        generator.used.push(event_id);
        let mut record = ReplayRecord::of(event_id, &event);
        match sel >> 4 {
            0..=11 => {}
            // A mutated payload: a byte flipped, cut short, or one byte more.
            12 => {
                let len = record.payload.len();
                match pick % 3 {
                    0 if len > 0 => record.payload[usize::from(input.u8()) % len] ^= x | 1,
                    1 => record
                        .payload
                        .truncate(usize::from(input.u8()) % len.max(1)),
                    _ => record.payload.push(x),
                }
            }
            // Garbage under a lifecycle kind.
            13 => {
                record.kind = 0x0101 + u16::from(x % 20);
                record.payload = input.bytes(usize::from(pick % 48)).to_vec();
            }
            // Another kind, with a real lifecycle payload or not.
            14 => {
                record.kind = [1, 0x00ff, 0x0100, 0x010d, 0x0201, 0xffff][usize::from(x % 6)];
                if pick & 1 == 1 {
                    record.payload = input.bytes(usize::from(pick % 32)).to_vec();
                }
            }
            // Another codec version.
            _ => record.codec_version = [0, 2, 255][usize::from(x % 3)],
        }
        records.push(record);
    }
    records
}

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
    use crate::journal::Position;
    use crate::journal::reader::RecordView;
    use crate::lifecycle::{Applied, LifecycleEvent, ManifestStore, Replayer};
    let views: Vec<RecordView<'_>> = (0u64..)
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
        .collect();
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

    // The reference fold: bincode's decoder, and the store's check and apply.
    let mut reference = ManifestStore::new();
    let mut rejected = Vec::new();
    let mut undecodable = Vec::new();
    let mut accepted = Vec::new();
    for (view, r) in views.iter().zip(records) {
        if !LifecycleEvent::is_lifecycle_kind(r.kind) {
            continue;
        }
        let seq = view.position.seq;
        match LifecycleEvent::decode_reference(r.kind, r.codec_version, &r.payload) {
            Err(e) => undecodable.push((seq, None, e.to_string())),
            Ok(event) => {
                let checked = reference.check(r.event_id, &event);
                let applied = reference.apply(r.event_id, &event);
                assert_eq!(checked, applied, "check and apply disagree at seq {seq}");
                match applied {
                    Ok(applied) => accepted.push((r.event_id, event, applied == Applied::Changed)),
                    Err(e) => {
                        rejected.push((seq, event.handle().map(|h| h.to_string()), e.to_string()))
                    }
                }
            }
        }
    }
    let issues = |list: &[crate::lifecycle::replay::ReplayIssue]| -> Vec<_> {
        list.iter()
            .map(|i| (i.seq, i.handle.clone(), i.error.clone()))
            .collect()
    };
    assert_eq!(
        issues(&report.undecodable),
        undecodable,
        "undecodable records differ"
    );
    assert_eq!(
        issues(&report.rejected),
        rejected,
        "rejected records differ"
    );
    assert!(
        store == reference,
        "replay and the validating store fold differently"
    );
    check_manifests(&store, &accepted);
}

/// Every manifest of `store` against the events it accepted (`(ID, event, changed)`, in journal
/// order), rule by rule, without the store's code (see [`check_replay`]).
fn check_manifests(
    store: &crate::lifecycle::ManifestStore,
    accepted: &[(EventId, crate::lifecycle::LifecycleEvent, bool)],
) {
    use crate::lifecycle::LifecycleEvent as E;
    use crate::lifecycle::State;
    use crate::lifecycle::event::{CursorBounds, ExitStatus, Scoped, TreeMechanism, derived};
    let registered: Vec<_> = accepted
        .iter()
        .filter(|(_, e, _)| e.is_registration())
        .filter_map(|(_, e, _)| e.handle())
        .collect();
    let handles: Vec<_> = store.iter().map(|m| m.handle).collect();
    assert_eq!(
        handles, registered,
        "manifests are not the accepted registrations, in order"
    );
    // The gate: changes alternate, and the store keeps the last.
    let mut gate: Option<&crate::lifecycle::event::GateChanged> = None;
    // The admission limit likewise: never 0, never the one in force, the store keeps the last.
    let mut limit: Option<&crate::lifecycle::event::AdmissionLimitSet> = None;
    for (_, e, _) in accepted {
        match (e.handle(), e) {
            (Some(h), _) => assert!(
                store.get(&h).is_some(),
                "an event of an unregistered handle was accepted"
            ),
            (None, E::GateChanged(g)) => {
                assert_ne!(
                    g.paused,
                    gate.is_some_and(|l| l.paused),
                    "a gate change to its state"
                );
                gate = Some(g);
            }
            (None, E::AdmissionLimitSet(l)) => {
                assert_ne!(l.max_concurrent, Some(0), "a limit of 0");
                assert_ne!(
                    l.max_concurrent,
                    limit.and_then(|p| p.max_concurrent),
                    "a limit equal to the one in force"
                );
                limit = Some(l);
            }
            (None, _) => panic!("an event without a handle that is not root-level"),
        }
    }
    assert_eq!(
        store.gate(),
        gate,
        "the store's gate is not the last change"
    );
    assert_eq!(
        store.admission_limit(),
        limit,
        "the store's admission limit is not the last one set"
    );
    for m in store.iter() {
        let mut events = accepted
            .iter()
            .filter(|(_, e, _)| e.handle() == Some(m.handle));
        let (ids, at_unix_ms, limits) = match events.next() {
            Some((_, E::Registered(reg), _)) => {
                assert!(m.command == reg.command, "the command changed");
                assert_eq!(m.restart_of, None);
                (reg.ids, reg.at_unix_ms, reg.command.limits.clone())
            }
            Some((_, E::RegisteredV2(reg), _)) => {
                assert!(m.command == *reg.command, "the command changed");
                assert_eq!(m.restart_of, reg.restart_of);
                // A restart links to a handle registered before this one.
                if let Some(old) = reg.restart_of {
                    let before = registered.iter().position(|h| *h == old);
                    let this = registered.iter().position(|h| *h == m.handle);
                    assert!(
                        before < this && before.is_some(),
                        "restart_of a later handle"
                    );
                }
                (reg.ids, reg.at_unix_ms, reg.command.limits.clone())
            }
            _ => panic!(
                "{}: the first accepted event is not its registration",
                m.handle
            ),
        };
        assert_eq!(m.ids, ids);
        assert_eq!(m.registered_unix_ms, at_unix_ms);
        let mut state = State::Starting;
        let mut bounds = CursorBounds::default();
        let (mut pid, mut running_ms, mut stops, mut first_stop) = (None, None, 0u32, None);
        let mut input_closed = false;
        let mut terminal = None;
        let mut published = std::collections::BTreeSet::new();
        let mut completion = false;
        let (mut scope, mut released) = (None, None);
        let mut retired = None;
        let mut lost = 0u64;
        let mut last_gap_end = 0u64;
        let (mut awaiting, mut fired, mut failures) = (None, None, 0usize);
        for (id, e, changed) in events {
            let grows = |new: &CursorBounds, old: &CursorBounds| {
                new.retained_from <= new.total_bytes
                    && new.retained_from >= old.retained_from
                    && new.total_bytes >= old.total_bytes
            };
            match e {
                E::Registered(_) | E::RegisteredV2(_) => {
                    panic!("{}: registered twice", m.handle)
                }
                E::Running(r) => {
                    assert!(state == State::Starting && *id == ids.running);
                    (state, pid, running_ms) = (State::Running, Some(r.pid), Some(r.at_unix_ms));
                }
                E::Terminal(t) => {
                    assert!(state.can_move_to(t.state) && t.state.is_terminal());
                    assert!(*id == ids.terminal && grows(&t.bounds, &bounds));
                    (state, bounds, terminal) = (t.state, t.bounds, Some(*id));
                }
                E::LostOnRestore(l) => {
                    assert!(state.can_move_to(State::LostOnRestore) && *id == ids.lost);
                    assert!(grows(&l.bounds, &bounds));
                    (state, bounds, terminal) = (State::LostOnRestore, l.bounds, Some(*id));
                }
                E::StopRequested(s) => {
                    assert!(!state.is_terminal(), "a stop after the terminal event");
                    stops += 1;
                    first_stop.get_or_insert((s.reason.clone(), s.requested_by.clone()));
                }
                E::InputClosed(_) => {
                    assert!(!input_closed, "input closed twice");
                    input_closed = true;
                }
                E::TerminalResized(r) => {
                    assert_eq!(state, State::Running, "a terminal sized while not running");
                    assert!(
                        r.rows > 0 && r.cols > 0,
                        "a terminal without rows or columns"
                    );
                }
                E::OutputCheckpoint(c) => {
                    assert!(
                        !state.is_terminal(),
                        "a checkpoint after the terminal event"
                    );
                    assert!(grows(&c.bounds, &bounds));
                    bounds = c.bounds;
                }
                E::LifecyclePublished(p) => {
                    assert_eq!(*id, p.event.derived(derived::PUBLISHED));
                    let ran = p.event == ids.running && pid.is_some();
                    assert!(
                        ran || terminal == Some(p.event),
                        "an unrecorded event published"
                    );
                    assert_eq!(*changed, published.insert(p.event));
                }
                E::CompletionNotified(c) => {
                    assert!(terminal.is_some() && c.command == ids.completion);
                    assert_eq!(*id, ids.completion.derived(derived::NOTIFIED));
                    assert_eq!(*changed, !completion);
                    completion = true;
                }
                E::Scoped(s) => {
                    assert_eq!(*id, ids.running.derived(derived::SCOPED));
                    match &scope {
                        Some(first) => assert!(first == s && !changed, "a second scope"),
                        None => assert!(!state.is_terminal(), "a scope after the terminal event"),
                    }
                    scope.get_or_insert_with(|| s.clone());
                }
                E::TreeReleased(r) => {
                    assert_eq!(*id, ids.terminal.derived(derived::RELEASED));
                    assert!(scope.is_some(), "a release without a scope");
                    if let Some(first) = &released {
                        assert!(*first == r.proof && !changed, "a second release");
                    }
                    released.get_or_insert_with(|| r.proof.clone());
                }
                E::OutputRetired(r) => {
                    assert_eq!(*id, ids.terminal.derived(derived::RETIRED));
                    // Verified: terminal, and released, never ran, or a group leader reaped.
                    let by_group = scope
                        .as_ref()
                        .is_none_or(|s: &Scoped| s.mechanism == TreeMechanism::Group);
                    let reaped = terminal == Some(ids.terminal)
                        && m.terminal.as_ref().is_some_and(|t| {
                            matches!(t.exit, ExitStatus::Code(_) | ExitStatus::Signal(_))
                        });
                    let verified = state.is_terminal()
                        && (released.is_some()
                            || pid.is_none()
                            || (state != State::LostOnRestore && by_group && reaped));
                    assert!(verified, "output retired of an unverified exit");
                    let this = (r.reason.clone(), r.at_unix_ms);
                    if let Some(first) = &retired {
                        assert!(*first == this && !changed, "a second retirement");
                    }
                    retired.get_or_insert(this);
                }
                E::OutputGap(g) => {
                    let g = g.gap;
                    assert!(!state.is_terminal(), "a gap after the terminal event");
                    assert!(g.from < g.to && g.reason != crate::spool::LossReason::Retention);
                    assert!(g.from >= last_gap_end, "gaps out of order");
                    last_gap_end = g.to;
                    lost += g.to - g.from;
                }
                E::GateChanged(_) | E::AdmissionLimitSet(_) => {
                    panic!("a root-level event counted against a process")
                }
                E::HumanInput(i) => {
                    assert!(
                        !state.is_terminal(),
                        "a human-input mark after the terminal event"
                    );
                    assert_ne!(i.waiting, awaiting.is_some(), "a mark that changes nothing");
                    awaiting = i.waiting.then_some(i.at_unix_ms);
                }
                E::DeadlineFired(d) => {
                    assert!(!state.is_terminal(), "a deadline after the terminal event");
                    assert!(fired.is_none(), "a second deadline");
                    let configured = match d.deadline {
                        crate::lifecycle::event::Deadline::Wall => limits.wall_clock_ms,
                        crate::lifecycle::event::Deadline::Idle => limits.idle_ms,
                    };
                    assert_eq!(configured, Some(d.limit_ms), "a limit not configured");
                    fired = Some(d.clone());
                }
                E::DeadlineFailed(f) => {
                    assert!(
                        !state.is_terminal(),
                        "a deadline failure after the terminal event"
                    );
                    assert_eq!(fired.as_ref().map(|d| d.deadline), Some(f.deadline));
                    failures += 1;
                    assert!(failures <= crate::limits::DEADLINE_FAILURES_MAX);
                }
            }
        }
        assert_eq!(m.awaiting_input, awaiting);
        assert_eq!(m.deadline, fired);
        assert_eq!(m.deadline_failures.len(), failures);
        assert_eq!(m.state, state, "{}", m.handle);
        assert_eq!(m.bounds, bounds);
        assert_eq!((m.pid, m.running_unix_ms), (pid, running_ms));
        assert_eq!(m.witness.is_some(), pid.is_some());
        assert_eq!((m.stop_requests, &m.first_stop), (stops, &first_stop));
        assert_eq!(m.input_closed, input_closed);
        assert_eq!(m.terminal.as_ref().map(|t| t.event_id), terminal);
        assert_eq!(
            m.terminal.as_ref().map(|t| t.state),
            terminal.map(|_| state)
        );
        assert_eq!(m.published, published);
        assert_eq!(m.completion_notified, completion);
        assert_eq!(m.scope, scope);
        assert_eq!(m.released, released);
        assert_eq!(
            m.retired.as_ref().map(|r| (r.reason.clone(), r.at_unix_ms)),
            retired
        );
        // Gaps: ordered, apart or joined, every lost cursor kept, at most the bound.
        assert!(m.gaps.len() <= crate::limits::GAPS_PER_PROCESS_MAX);
        assert!(m.gaps.windows(2).all(|w| w[0].to <= w[1].from));
        assert_eq!(m.gaps.iter().map(|g| g.to - g.from).sum::<u64>(), lost);
    }
}

// ---------------------------------------------------------------------------------------------
// protocol_request

/// The socket protocol's request decoder over arbitrary bytes, and the same bytes as the `args`
/// of every operation (what the MCP tools pass): never a panic; a refusal carries an error code
/// and a message; whatever decodes re-encodes ([`crate::protocol::Request::to_line`]) to a line
/// that decodes to the same request and ID.
#[cfg(feature = "server")]
pub fn protocol_request(data: &[u8]) {
    use crate::protocol::{ApiError, OPS, decode_request, request_from_args};
    let line = data.strip_suffix(b"\n").unwrap_or(data);
    match decode_request(line) {
        Ok(envelope) => {
            let encoded = envelope.request.to_line(envelope.id.clone());
            let Some(body) = encoded.strip_suffix(b"\n") else {
                panic!("an encoded request has no newline");
            };
            assert!(!body.contains(&b'\n'), "an encoded request spans lines");
            match decode_request(body) {
                Ok(again) => {
                    assert_eq!(again.request, envelope.request, "request changed");
                    assert_eq!(again.id, envelope.id, "id changed");
                }
                Err(e) => panic!("a re-encoded request is refused: {e}"),
            }
        }
        Err(e) => {
            let api = ApiError::from(&e);
            assert!(!api.message.is_empty(), "an error without a message");
        }
    }
    if let Ok(args) = serde_json::from_slice::<serde_json::Value>(line) {
        for op in OPS {
            if let Ok(request) = request_from_args(op, args.clone()) {
                assert_eq!(
                    request.to_wire().0,
                    op,
                    "args decoded into another operation"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// mcp_line

/// The MCP server's line decoder ([`crate::mcp::transport::classify`]: framing, the JSON-RPC
/// envelope, the SDK's typed messages) over arbitrary bytes, and the same bytes as a tool call's
/// name and arguments: never a panic; an answer is exactly one JSON-RPC error line (an object
/// with `jsonrpc` "2.0", code -32700, -32600 or -32602, a message, and an id that is the string
/// or integer the line carried under `id`, else null); bytes that are not JSON are answered -32700
/// with id null; a message that passes re-encodes to a line that passes again. A `tools/call`
/// whose params hold the input's text as `name` and an object as `arguments` passes (the tool
/// name is the server's to refuse); with `arguments` neither an object nor null it is answered
/// -32602 with its id.
#[cfg(feature = "mcp")]
pub fn mcp_line(data: &[u8]) {
    use crate::mcp::transport::{INVALID_PARAMS, PARSE_ERROR, Verdict, classify};
    let check_answer = |line: &[u8], answer: &[u8]| -> serde_json::Value {
        let Some(body) = answer.strip_suffix(b"\n") else {
            panic!("an answer without its newline");
        };
        assert!(!body.contains(&b'\n'), "an answer spans lines");
        let value: serde_json::Value = match serde_json::from_slice(body) {
            Ok(value) => value,
            Err(e) => panic!("an answer that is not JSON: {e}"),
        };
        assert_eq!(value["jsonrpc"], "2.0");
        let code = value["error"]["code"].as_i64().unwrap_or_default();
        assert!([-32700, -32600, -32602].contains(&code), "code {code}");
        assert!(
            value["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        let sent: Option<serde_json::Value> = serde_json::from_slice(line).ok();
        let sent_id = sent
            .as_ref()
            .and_then(|v| v.get("id"))
            .filter(|id| id.is_string() || id.is_i64() || id.is_u64());
        match sent_id {
            Some(id) => assert_eq!(value["id"], *id, "the id is not echoed"),
            None => assert!(value["id"].is_null(), "an id the line did not carry"),
        }
        value
    };
    let line = data.strip_suffix(b"\n").unwrap_or(data);
    let trimmed = line.strip_suffix(b"\r").unwrap_or(line);
    let trimmed = trimmed.strip_prefix(b"\xef\xbb\xbf").unwrap_or(trimmed);
    match classify(line) {
        Verdict::Answer(answer) => {
            let value = check_answer(trimmed, &answer);
            if serde_json::from_slice::<serde_json::Value>(trimmed).is_err() {
                assert_eq!(value["error"]["code"], PARSE_ERROR);
                assert!(value["id"].is_null());
            }
        }
        Verdict::Pass(message) => {
            let again = match serde_json::to_vec(&message) {
                Ok(bytes) => bytes,
                Err(e) => panic!("a message that passed does not encode: {e}"),
            };
            assert!(
                matches!(classify(&again), Verdict::Pass(_)),
                "a re-encoded message does not pass"
            );
        }
        Verdict::Ignore(_) => {}
    }
    let name = String::from_utf8_lossy(data);
    let arguments = serde_json::from_slice::<serde_json::Value>(line)
        .unwrap_or_else(|_| serde_json::Value::Object(serde_json::Map::new()));
    let call = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    });
    let call = call.to_string().into_bytes();
    // `arguments` may be left out, so null is the same as none.
    match (
        classify(&call),
        arguments.is_object() || arguments.is_null(),
    ) {
        (Verdict::Pass(_), true) => {}
        (Verdict::Answer(answer), false) => {
            let value = check_answer(&call, &answer);
            assert_eq!(value["error"]["code"], INVALID_PARAMS);
            assert_eq!(value["id"], 1);
        }
        (verdict, object) => panic!("a tools/call with object arguments {object}: {verdict:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// mcp_tool_call

/// The MCP server's decoding of a `tools/call` ([`crate::mcp::decode_call`]: the tool looked up
/// by name, its `arguments` validated into the protocol request it runs) over arbitrary bytes.
/// The first byte picks the name: below 0xF0 the listed tool at that index (modulo the count)
/// with the rest as `arguments`; else the text of the rest's first line, with what follows it as
/// `arguments`. Arguments that are not a JSON object are left out (a client cannot send them: the
/// transport answers -32602, see [`mcp_line`]). The invariants are [`check_tool_call`]'s.
#[cfg(feature = "mcp")]
pub fn mcp_tool_call(data: &[u8]) {
    let [pick, rest @ ..] = data else {
        return;
    };
    let listed = listed_tools();
    let (name, arguments) = if *pick < 0xF0 {
        let name = &listed[usize::from(*pick) % listed.len()];
        (std::borrow::Cow::Borrowed(name.as_str()), rest)
    } else {
        let (head, tail) = match rest.iter().position(|&b| b == b'\n') {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &[][..]),
        };
        (String::from_utf8_lossy(head), tail)
    };
    let arguments = match serde_json::from_slice::<serde_json::Value>(arguments) {
        Ok(serde_json::Value::Object(object)) => Some(object),
        _ => None,
    };
    check_tool_call(&name, arguments);
}

/// The names of the tools the server lists (`tools/list`), in order; built once, since each
/// builds its JSON Schemas.
#[cfg(feature = "mcp")]
pub fn listed_tools() -> &'static [String] {
    static LISTED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    LISTED.get_or_init(|| match crate::mcp::tools() {
        Ok(tools) => tools.into_iter().map(|t| t.name.into_owned()).collect(),
        Err(e) => panic!("the tool list cannot be built: {e}"),
    })
}

/// One `tools/call` with this `name` and `arguments` (`None`: left out), as the server decodes
/// it: never a panic, and
/// - a name the server lists decodes to a call of that tool, or to refused arguments; any other
///   name is an unknown tool, whose answer is the JSON-RPC error -32602 ("unknown tool …", the
///   name cut short);
/// - refused arguments are `bad_args` or `too_large` only, answered as the README says: a tool
///   result with `isError`, no structured content, and the one text `code: message`;
/// - arguments left out decode as an empty object does;
/// - a decoded request is valid as the socket defines it: its wire form validates
///   ([`crate::protocol::request_from_args`]) to the very same request, and so does what an
///   attached server sends the daemon (the request with the server's working directory and
///   environment added, as `mcp::DaemonLink::localize` adds them) as one line the daemon decodes
///   back to it, unless that line is over the socket's bound (then refused whole, as too large).
#[cfg(feature = "mcp")]
pub fn check_tool_call(name: &str, arguments: Option<serde_json::Map<String, serde_json::Value>>) {
    use crate::mcp::{CallError, DaemonLink, decode_call};
    use crate::protocol::{ErrorCode, ProtocolErrorKind, decode_request, request_from_args};
    let listed = listed_tools().iter().any(|t| t == name);
    let decoded = decode_call(name, arguments.clone());
    if arguments.is_none() {
        assert_eq!(
            decoded,
            decode_call(name, Some(serde_json::Map::new())),
            "arguments left out decode otherwise than an empty object"
        );
    }
    match decoded {
        Ok(call) => {
            assert!(listed, "a call of a tool the server does not list");
            assert_eq!(call.tool(), name);
            let (op, args) = call.request().to_wire();
            assert_eq!(op, call.op(), "arguments decoded into another operation");
            match request_from_args(op, args) {
                Ok(again) => assert_eq!(&again, call.request(), "the request changed"),
                Err(e) => panic!("a decoded request the socket refuses: {e}"),
            }
            let link = DaemonLink {
                socket: PathBuf::from("/nonexistent/daemon.sock"),
                cwd: Some("/fuzz/cwd".to_owned()),
                env: BTreeMap::from([
                    ("HOME".to_owned(), "/fuzz".to_owned()),
                    ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
                ]),
            };
            let sent = link.localize(call.request().clone());
            let line = sent.to_line(Some(serde_json::Value::from(1)));
            let Some(body) = line.strip_suffix(b"\n") else {
                panic!("a request line without its newline");
            };
            match decode_request(body) {
                Ok(envelope) => {
                    assert_eq!(envelope.request, sent, "the daemon reads another request")
                }
                Err(e) if matches!(e.kind, ProtocolErrorKind::TooLarge { .. }) => {}
                Err(e) => panic!("the daemon refuses what an attached server sends: {e}"),
            }
        }
        Err(refused) => match (&refused, refused.answer()) {
            (CallError::UnknownTool { name: shown, .. }, Err(error)) => {
                assert!(!listed, "a listed tool is unknown");
                assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
                assert!(
                    error.message.starts_with("unknown tool "),
                    "{}",
                    error.message
                );
                assert!(shown.chars().count() <= 65, "the name is not cut short");
            }
            (CallError::Arguments(api), Ok(result)) => {
                assert!(
                    listed,
                    "arguments refused for a tool the server does not list"
                );
                let code = match api.code {
                    ErrorCode::BadArgs => "bad_args",
                    ErrorCode::TooLarge => "too_large",
                    other => panic!("arguments refused with {other:?}"),
                };
                assert!(!api.message.is_empty(), "a refusal without a message");
                assert_eq!(result.is_error, Some(true));
                assert!(
                    result.structured_content.is_none(),
                    "a tool error with structured content"
                );
                let texts: Vec<&str> = result
                    .content
                    .iter()
                    .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
                    .collect();
                assert_eq!(texts, [format!("{code}: {}", api.message)]);
            }
            (refused, answer) => panic!("{refused:?} answered {answer:?}"),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// guardian_control

/// The guardian's control protocol (`tree::guardian::wire`) over arbitrary bytes, read as both of
/// its readers read the socket: the bytes arrive in chunks (of 1, 7, `LINE_MAX` bytes, and all
/// at once), and every complete line is taken off the buffer with `take_line` before the next
/// chunk. Every chunking delivers the same lines, each exactly the bytes before a newline of the
/// input, up to the first line of `LINE_MAX` bytes or more, which is an error in every chunking;
/// a buffer left without a line is always shorter than `LINE_MAX`. Every line (and the input
/// itself) goes through `Up::decode` and `Down::decode`: never a panic, at most one of them
/// accepts, an accepted message encodes to one line of at most `LINE_MAX` bytes that decodes
/// to the same message, and (but for `FAIL`, whose reason is made printable) to the very line.
///
pub fn guardian_control(data: &[u8]) {
    use crate::tree::guardian::wire::LINE_MAX;
    let whole = control_lines(data, data.len().max(1));
    for chunk in [1, 7, LINE_MAX] {
        assert_eq!(
            control_lines(data, chunk),
            whole,
            "chunks of {chunk} bytes split the stream differently"
        );
    }
    for line in whole.0.iter().map(Vec::as_slice).chain([data]) {
        check_control_line(line);
    }
}

/// Feeds `data` to `take_line` `chunk` bytes at a time, taking every complete line before the
/// next chunk (what both control readers do). Returns the lines shorter than `LINE_MAX` in order,
/// and whether a line of `LINE_MAX` bytes or more (complete, or refused by `take_line`) ended the
/// stream.
fn control_lines(data: &[u8], chunk: usize) -> (Vec<Vec<u8>>, bool) {
    use crate::tree::guardian::wire::{LINE_MAX, WireError, take_line};
    let mut buf = Vec::new();
    let mut lines = Vec::new();
    // Input bytes delivered as lines, newlines included.
    let mut taken = 0;
    for piece in data.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match take_line(&mut buf) {
                Ok(Some(line)) => {
                    assert!(!line.contains(&b'\n'), "a line holds a newline");
                    assert_eq!(
                        data.get(taken..=taken + line.len()),
                        Some([line.as_slice(), b"\n"].concat().as_slice()),
                        "a line is not the input up to its newline"
                    );
                    taken += line.len() + 1;
                    if line.len() >= LINE_MAX {
                        return (lines, true);
                    }
                    lines.push(line);
                }
                Ok(None) => {
                    assert!(buf.len() < LINE_MAX, "a runaway line was left buffered");
                    break;
                }
                Err(e) => {
                    assert_eq!(e, WireError::TooLong);
                    assert!(buf.len() >= LINE_MAX && !buf.contains(&b'\n'));
                    return (lines, true);
                }
            }
        }
    }
    assert_eq!(
        buf.as_slice(),
        &data[taken..],
        "bytes after the last line were lost"
    );
    (lines, false)
}

/// One control line through both decoders (module doc of [`guardian_control`]).
fn check_control_line(line: &[u8]) {
    use crate::tree::guardian::wire::{Down, LINE_MAX, Up};
    let one_line = |encoded: &[u8]| -> Vec<u8> {
        assert!(encoded.len() <= LINE_MAX, "an encoded message is too long");
        let Some(body) = encoded.strip_suffix(b"\n") else {
            panic!("an encoded message does not end its line");
        };
        assert!(!body.contains(&b'\n'), "an encoded message spans lines");
        body.to_vec()
    };
    let up = Up::decode(line);
    let down = Down::decode(line);
    assert!(
        up.is_err() || down.is_err(),
        "one line decodes both ways: {up:?}, {down:?}"
    );
    match up {
        Ok(m) => {
            let body = one_line(&m.encode());
            assert_eq!(
                Up::decode(&body),
                Ok(m.clone()),
                "Up changed on re-encoding"
            );
            if !matches!(m, Up::Failed(_)) {
                assert_eq!(body, line, "a decoded Up does not re-encode to its line");
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    match down {
        Ok(m) => {
            let body = one_line(&m.encode());
            assert_eq!(Down::decode(&body), Ok(m), "Down changed on re-encoding");
            assert_eq!(body, line, "a decoded Down does not re-encode to its line");
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

// ---------------------------------------------------------------------------------------------
// guardian_receipt

/// The guardian's exit-receipt decoder over arbitrary bytes, twice: the input as it is, and the
/// input with its checksum line (a last line starting `crc32 `, if any) replaced by the right one,
/// so that the fuzzer reaches the field parser behind the CRC. Never a panic; an accepted receipt
/// re-encodes to exactly its bytes (the format is canonical) and `decode(encode(r)) == r`.
pub fn guardian_receipt(data: &[u8]) {
    check_receipt(data);
    check_receipt(&with_receipt_checksum(data));
}

fn check_receipt(bytes: &[u8]) {
    use crate::tree::guardian::Receipt;
    match Receipt::decode(bytes) {
        Ok(r) => {
            let encoded = r.encode();
            assert_eq!(
                Receipt::decode(&encoded),
                Ok(r.clone()),
                "a receipt changed on re-encoding"
            );
            assert_eq!(
                encoded.as_slice(),
                bytes,
                "a decoded receipt does not re-encode to its bytes"
            );
            check_receipt_binding(&r);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// A decoded receipt against the registration its own fields describe (journal-format.md,
/// "Guardian receipts"): its nonce always binds; another nonce never does; no nonce binds only
/// where an assessment allows it and only for an aborted launch's receipt (`status none`,
/// `reaped 1`, a known guardian start time and boot).
fn check_receipt_binding(r: &crate::tree::guardian::Receipt) {
    use crate::tree::guardian::{Registration, bind};
    let workload = crate::tree::ProcessWitness {
        pid: r.workload_pid,
        start_time_ticks: r.workload_start_ticks,
        pidfs_ino: r.workload_pidfs_ino,
    };
    let guardian = crate::tree::ProcessWitness {
        pid: r.guardian_pid,
        start_time_ticks: r.guardian_start_ticks,
        pidfs_ino: 0,
    };
    let binding = |nonce| crate::tree::ReceiptBinding {
        path: String::new(),
        dev: 0,
        ino: 0,
        nonce,
    };
    let reg = |b: &crate::tree::ReceiptBinding, gateless| {
        bind(
            r,
            &Registration {
                binding: b,
                handle: &r.handle,
                workload: &workload,
                gateless_guardian: gateless,
                boot_id: r.boot_id,
            },
        )
    };
    let own = binding(r.nonce);
    assert!(reg(&own, Some(&guardian)).is_ok() && reg(&own, None).is_ok());
    let mut other = r.nonce;
    other[0] ^= 1;
    let other = binding(other);
    assert!(
        reg(&other, None).is_err(),
        "a receipt bound without its nonce"
    );
    let aborted = r.nonce == [0; 16]
        && r.status.is_none()
        && r.reaped == 1
        && r.guardian_start_ticks != 0
        && r.boot_id != [0; 16];
    assert_eq!(
        reg(&other, Some(&guardian)).is_ok(),
        aborted,
        "a receipt without the registration's nonce bound, or an aborted launch's did not"
    );
    // A registration without a scope binds by its handle alone, and only the receipt of a gate
    // that never opened: no nonce, no status, the one gated child.
    let unscoped = r.nonce == [0; 16] && r.status.is_none() && r.reaped == 1;
    assert_eq!(
        crate::tree::guardian::bind_unscoped(r, &r.handle).is_ok(),
        unscoped,
        "an unscoped registration's receipt bound other than an aborted launch's"
    );
    let mut stranger = r.handle.clone();
    stranger.push('x');
    assert!(crate::tree::guardian::bind_unscoped(r, &stranger).is_err());
}

/// `data` without a last line that starts `crc32 `, ended by a newline, plus the checksum line of
/// everything before it.
fn with_receipt_checksum(data: &[u8]) -> Vec<u8> {
    let last_start = data
        .strip_suffix(b"\n")
        .unwrap_or(data)
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let mut body = if data[last_start..].starts_with(b"crc32 ") {
        data[..last_start].to_vec()
    } else {
        data.to_vec()
    };
    if !body.is_empty() && !body.ends_with(b"\n") {
        body.push(b'\n');
    }
    let crc = crc32fast::hash(&body);
    body.extend_from_slice(format!("crc32 {crc:08x}\n").as_bytes());
    body
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

fn check_snapshot(bytes: &[u8]) {
    use crate::lifecycle::snapshot;
    // The frames read by hand against bincode's derived decoders: the same value, or the same
    // error.
    match (snapshot::decode(bytes), snapshot::decode_reference(bytes)) {
        (Ok(fast), Ok(reference)) => {
            assert_eq!(fast.header, reference.header, "the decoders differ");
            assert!(fast.store == reference.store, "the decoders differ");
            assert_eq!(fast.retained, reference.retained, "the decoders differ");
            assert_eq!(fast.replay, reference.replay, "the decoders differ");
        }
        (Err(fast), Err(reference)) => assert_eq!(fast, reference, "the decoders differ"),
        (fast, reference) => panic!(
            "the decoders differ: by hand {:?}, reference {:?}",
            fast.err(),
            reference.err()
        ),
    }
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

// ---------------------------------------------------------------------------------------------
// server_framing

/// The daemon socket's line framing (`server::read_line`) over arbitrary bytes: the first byte
/// picks the line bound (1 to 64), the second the read buffer's size (1 to 16, so lines arrive
/// cut at every place), the rest is what a client sends. The lines read are exactly the input
/// split at its newlines (a last line without one counts, an empty input is no line), each
/// within the bound returned whole and each over it reported with its length and dropped whole,
/// then end of input; never a panic, and never more than the bound kept.
#[cfg(feature = "server")]
pub fn server_framing(data: &[u8]) {
    use crate::server::{Line, read_line};
    let (max, capacity, input) = match data {
        [a, b, rest @ ..] => (usize::from(a % 64) + 1, usize::from(b % 16) + 1, rest),
        _ => return,
    };
    let mut expected: Vec<Result<&[u8], usize>> = input
        .split(|&b| b == b'\n')
        .map(|line| {
            if line.len() <= max {
                Ok(line)
            } else {
                Err(line.len())
            }
        })
        .collect();
    // `split` yields an empty piece after a final newline (and for an empty input): no line.
    if input.is_empty() || input.ends_with(b"\n") {
        expected.pop();
    }
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    runtime.block_on(async {
        let mut reader = tokio::io::BufReader::with_capacity(capacity, input);
        let mut line = Vec::new();
        for want in &expected {
            let got = read_line(&mut reader, &mut line, max).await;
            match (got, want) {
                (Ok(Line::Complete), Ok(bytes)) => assert_eq!(&line[..], *bytes),
                (Ok(Line::TooLong(n)), Err(len)) => {
                    assert_eq!(n, *len);
                    assert!(
                        line.len() <= max,
                        "a refused line kept {} bytes",
                        line.len()
                    );
                }
                (got, want) => panic!("read {got:?}, expected {want:?}"),
            }
        }
        assert_eq!(
            read_line(&mut reader, &mut line, max).await.ok(),
            Some(Line::Eof)
        );
    });
}

// ---------------------------------------------------------------------------------------------
// client_response

/// The client's decoding of one daemon response line (`client::decode_answer`) over arbitrary
/// bytes, for request ID 7: never a panic; a result is only ever taken from a line that ends in
/// a newline, is JSON with `ok: true`, and carries ID 7 or none; a request is only ever called
/// unread for an ID-less `idle` or `busy` error. And a response the server encodes decodes to
/// what it carried.
#[cfg(feature = "server")]
pub fn client_response(data: &[u8]) {
    use crate::client::{Answer, ClientError, decode_answer};
    use crate::protocol::{ApiError, ErrorCode, Response};
    use serde_json::Value;
    match decode_answer(data, 7) {
        Ok(Answer::Result(result)) => {
            assert!(data.ends_with(b"\n"));
            let Ok(json) = serde_json::from_slice::<Value>(data) else {
                panic!("a result from a line that is not JSON");
            };
            assert_eq!(json["ok"], Value::Bool(true));
            assert!(json.get("id").is_none_or(|id| id.as_u64() == Some(7)));
            assert_eq!(json["result"], result);
        }
        Ok(Answer::Unread(error)) => {
            assert!(matches!(error.code, ErrorCode::Idle | ErrorCode::Busy));
        }
        Err(ClientError::Api(_) | ClientError::BadResponse(_)) => {}
        Err(e) => panic!("a decode failed with neither an API nor a response error: {e}"),
    }
    // The same bytes as a result the server sends, and as an error's message.
    let text = String::from_utf8_lossy(data).into_owned();
    for (id, outcome) in [
        (Some(Value::from(7)), Ok(Value::String(text.clone()))),
        (None, Err(ApiError::new(ErrorCode::Internal, text.clone()))),
    ] {
        let line = Response::new(id, outcome.clone()).to_line();
        match (decode_answer(&line, 7), outcome) {
            (Ok(Answer::Result(got)), Ok(sent)) => assert_eq!(got, sent),
            (Err(ClientError::Api(got)), Err(sent)) => assert_eq!(got, sent),
            (got, sent) => panic!("sent {sent:?}, decoded {got:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// env_file

/// The `--env-file` decoder (`cli::env_file::parse`) over arbitrary bytes: never a panic; an
/// error names a line the input has; every entry has a valid name and a value without NUL or
/// newline; and the entries, written back one a line in single quotes (where the value has
/// none; else as they are, when that is accepted), read back as the same entries.
#[cfg(feature = "cli")]
pub fn env_file(data: &[u8]) {
    use crate::cli::env_file::parse;
    let entries = match parse(data) {
        Ok(entries) => entries,
        Err(e) => {
            let lines = data.split(|&b| b == b'\n').count();
            assert!(e.line >= 1 && e.line <= lines, "{e} of {lines} lines");
            return;
        }
    };
    let mut again = String::new();
    for (name, value) in &entries {
        let mut chars = name.chars();
        assert!(
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        );
        assert!(
            chars.all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{name:?}"
        );
        assert!(!value.contains(['\n', '\0']), "{value:?}");
        if value.contains('\'') {
            again.push_str(&format!("{name}={value}\n"));
        } else {
            again.push_str(&format!("{name}='{value}'\n"));
        }
    }
    // A value holding a quote was read unquoted or in double quotes: as it is, it may read
    // differently (an opening quote); only a file of single-quotable values must come back.
    if entries
        .iter()
        .all(|(_, v)| !v.contains('\'') && !v.ends_with('\r'))
    {
        assert_eq!(parse(again.as_bytes()).as_ref(), Ok(&entries), "{again:?}");
    }
}
