//! The `journal_open` target's input decoder: a fuzz input turned into the files of a journal
//! directory ([`journal_plan`]). A pure function of the input bytes: reading them front to back,
//! in the order the layout below names, is what gives each byte its meaning, so that a committed
//! input keeps describing the same journal.

use std::borrow::Cow;

use super::{FOREIGN_JOURNAL_ID, FUZZ_JOURNAL_ID, FUZZ_SEGMENT_BYTES, Input, near_limit};
use crate::journal::format::{self, CommitSlot, RecordFields, SegmentHeader};
use crate::journal::recovery;
use crate::journal::{Durability, Tenure};
use crate::limits::{
    COMMIT_SLOT_BYTES, RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES,
    SEGMENT_INDEX_MAX, SEGMENT_RECORDS_OFFSET, SEQ_MAX,
};

/// The files of a journal directory built from one fuzz input.
#[derive(Debug, Clone, Default)]
pub struct JournalPlan {
    /// `(file name, contents)`: segment files, possibly a leftover `*.log.tmp` and `*.spare`.
    pub files: Vec<(String, Vec<u8>)>,
    /// The policy of the writable open (`Os` unless the input's last byte asks otherwise).
    pub durability: Durability,
    /// Of the first writable open: a brief writer leaves the flush of what it found to its first
    /// commit, and closes without a closing commit.
    pub tenure: Tenure,
    /// Where the last open, a brief writer's resuming as if from a snapshot, starts: at this many
    /// 255ths of the last seq (the input's first byte, which also starts the segments' bytes).
    pub covered_share: u8,
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
    /// The state before the first segment: its seq 1 follows no record.
    fn new() -> Chain {
        Chain {
            expected_seq: 1,
            chain_crc: 0,
            records_built: 0,
            records_offset: SEGMENT_RECORDS_OFFSET,
            base_seq: 1,
            written: Vec::new(),
            writer_crc: 0,
        }
    }

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
            0..=3 => build_record(input, out, chain, op % 10 == 3),
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

/// Appends one record to `out`: continuing the chain, or (`broken`) with a seq or chain value
/// the input picks.
fn build_record(input: &mut Input<'_>, out: &mut Vec<u8>, chain: &mut Chain, broken: bool) {
    let kind = input.u16().max(1);
    let codec_version = input.u8();
    let id_mode = input.u8();
    let event_id = record_event_id(input, id_mode, chain.records_built);
    let payload = record_payload(input, id_mode);
    let (seq, prev_crc) = if broken {
        broken_link(input, chain)
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
            payload: &payload,
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

fn record_event_id(input: &mut Input<'_>, id_mode: u8, records_built: u64) -> [u8; 16] {
    match id_mode % 4 {
        0 => {
            let mut id = [0u8; 16];
            let b = input.bytes(16);
            id[..b.len()].copy_from_slice(b);
            id
        }
        1 => [0x11; 16], // repeated: duplicate IDs across records
        _ => {
            let mut id = *b"fuzz-record-id..";
            id[8..].copy_from_slice(&records_built.to_le_bytes());
            id
        }
    }
}

fn record_payload<'a>(input: &mut Input<'a>, id_mode: u8) -> Cow<'a, [u8]> {
    // Bit 5 of the ID mode fills the payload with one byte, so that a few input bytes can fill a
    // segment (and make the append rotate).
    let payload_len = usize::from(input.u8()) + usize::from(id_mode >> 6) * 256;
    if id_mode & 0x20 != 0 {
        Cow::Owned(vec![input.u8(); payload_len])
    } else {
        Cow::Borrowed(input.bytes(payload_len))
    }
}

/// The seq and chain value of a record that breaks the chain (or, now and then, does not).
fn broken_link(input: &mut Input<'_>, chain: &Chain) -> (u64, u32) {
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

impl PlannedSegment {
    /// Cuts or extends the file to the length its flags chose.
    fn apply_length(&mut self) {
        let bytes = &mut self.bytes;
        match self.length {
            FileLength::Short(cut) => {
                let len = bytes.len().min(FUZZ_SEGMENT_BYTES - RECORD_ALIGN_BYTES);
                bytes.truncate(len.saturating_sub(cut));
            }
            FileLength::Long => bytes.resize(FUZZ_SEGMENT_BYTES + RECORD_ALIGN_BYTES, 0),
            FileLength::Whole => bytes.resize(FUZZ_SEGMENT_BYTES, 0),
        }
    }
}

/// Turns a fuzz input into the files of a journal directory.
///
/// Layout of the input: one byte of journal flags (segment count 1-3, how segment indices are
/// chosen, how base sequence numbers are chosen, whether a leftover `*.log.tmp` exists), then per
/// segment one byte of segment flags (header validity, file length, and in bit 7 a version 1
/// segment instead of a version 2 one), the base seq when the flags ask for one from the input,
/// and a body (see `build_body`); then one byte: the durability policy of the writable open, its
/// tenure (bit 6) and whether a leftover `*.spare` file exists (bit 7); then, per segment, three bytes that choose its commit
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

    let mut chain = Chain::new();
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
        segments.push(plan_segment(&mut input, &mut chain, index, i, seq_mode));
    }
    // One more byte, after the segments so that shorter inputs keep their meaning: the policy of
    // the writable open, and a leftover spare segment of an earlier writer.
    let tail = input.u8();
    let durability = match tail % 3 {
        0 => Durability::Os,
        1 => Durability::Sync,
        _ => Durability::Group,
    };
    let tenure = if tail & 0x40 != 0 {
        Tenure::Brief
    } else {
        Tenure::Lasting
    };
    finish_segments(&mut input, &mut segments);
    let mut files: Vec<(String, Vec<u8>)> = segments
        .into_iter()
        .map(|s| (recovery::segment_file_name(s.index), s.bytes))
        .collect();
    if leftover_tmp {
        let name = format!("{}.tmp", recovery::segment_file_name(index.wrapping_add(1)));
        files.push((name, vec![0u8; 64]));
    }
    if tail & 0x80 != 0 {
        let name = format!("{:020}.spare", index.wrapping_add(1));
        files.push((name, vec![0u8; FUZZ_SEGMENT_BYTES]));
    }
    JournalPlan {
        files,
        durability,
        tenure,
        covered_share: data.first().copied().unwrap_or(0),
    }
}

/// Writes each segment's commit area (the three input bytes of each are read even where there is
/// none to write), then cuts or extends its file to its length.
fn finish_segments(input: &mut Input<'_>, segments: &mut [PlannedSegment]) {
    for at in 0..segments.len() {
        let successor = segments
            .get(at + 1)
            .map(|s| (s.header.segment_bytes, s.header.base_seq));
        let spec = [input.u8(), input.u8(), input.u8()];
        let segment = &mut segments[at];
        if segment.has_header && segment.header.has_commit_area() {
            let area = commit_area(input, segment, successor, spec);
            segment.bytes[SEGMENT_HEADER_BYTES..SEGMENT_RECORDS_OFFSET].copy_from_slice(&area);
        }
        segment.apply_length();
    }
}

/// The `i`-th segment of a plan, named `index`: its flags, base seq, header and body from the
/// input, its commit area still zero.
fn plan_segment(
    input: &mut Input<'_>,
    chain: &mut Chain,
    index: u64,
    i: u64,
    seq_mode: u8,
) -> PlannedSegment {
    let seg_flags = input.u8();
    let base_seq = match seq_mode {
        0 | 1 => chain.expected_seq,
        2 => 1 + u64::from(input.u8()),
        _ => near_limit(input, SEQ_MAX),
    };
    let mut header = segment_header(seg_flags, index, base_seq, i);
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
        // The commit area stays zero until every segment is built (see `journal_plan`).
        bytes.resize(header.records_offset(), 0);
    }
    chain.start(&header, header.records_offset());
    build_body(input, &mut bytes, chain);
    let length = match (seg_flags >> 4) % 8 {
        5 | 6 => FileLength::Short(usize::from(input.u8()) * RECORD_ALIGN_BYTES),
        7 => FileLength::Long,
        _ => FileLength::Whole,
    };
    PlannedSegment {
        index,
        header,
        has_header,
        bytes,
        written: std::mem::take(&mut chain.written),
        length,
    }
}

/// The valid header of the `i`-th segment (bit 7 of its flags: version 1), named `index`.
fn segment_header(seg_flags: u8, index: u64, base_seq: u64, i: u64) -> SegmentHeader {
    let format_version = if seg_flags & 0x80 != 0 {
        format::FORMAT_VERSION_V1
    } else {
        format::FORMAT_VERSION
    };
    SegmentHeader {
        format_version,
        segment_bytes: FUZZ_SEGMENT_BYTES as u32,
        journal_id: FUZZ_JOURNAL_ID,
        segment_index: index,
        base_seq,
        created_unix_ms: 1_700_000_000_000 + i,
    }
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
    let claims = Claims { segment, successor };
    let generations = [1 + u64::from(spec[2] & 15), 1 + u64::from(spec[2] >> 4)];
    let mut slots = [[0u8; COMMIT_SLOT_BYTES]; 2];
    let mut copies = [false; 2];
    for i in 0..2 {
        match claims.slot_bytes(input, spec[i] & 15, spec[i] >> 4, generations[i]) {
            Some(bytes) => slots[i] = bytes,
            None => copies[i] = true,
        }
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

/// The commit slots [`commit_area`] may write for one segment.
struct Claims<'a> {
    segment: &'a PlannedSegment,
    /// The next segment of the plan, as `(segment_bytes, base_seq)`, if there is one.
    successor: Option<(u32, u64)>,
}

impl Claims<'_> {
    /// The seq and end offset of the `back`-th last record a writer appended (0: the last one),
    /// or of none before the first.
    fn written(&self, back: u8) -> (u64, usize) {
        let header = &self.segment.header;
        let back = usize::from(back);
        match self.segment.written.len().checked_sub(1 + back) {
            Some(at) => self.segment.written[at],
            None => (header.base_seq.saturating_sub(1), header.records_offset()),
        }
    }

    fn slot(&self, flags: u32, generation: u64, (committed, end): (u64, usize)) -> CommitSlot {
        let (next_segment_bytes, next_base_seq) = if flags & format::SLOT_SEALED != 0 {
            self.successor
                .unwrap_or((FUZZ_SEGMENT_BYTES as u32, committed.saturating_add(1)))
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
    }

    /// The bytes of a slot of `kind` with parameter `p` (see [`commit_area`]); `None` for a copy
    /// of the other slot.
    fn slot_bytes(
        &self,
        input: &mut Input<'_>,
        kind: u8,
        p: u8,
        generation: u64,
    ) -> Option<[u8; COMMIT_SLOT_BYTES]> {
        let header = self.segment.header;
        let crc = header.crc();
        let (sealed, closed) = (format::SLOT_SEALED, format::SLOT_CLOSED);
        let last = self.written(0);
        let ahead = (
            last.0.saturating_add(1 + u64::from(p)),
            (last.1 + RECORD_HEADER_BYTES * (usize::from(p) + 1)).min(FUZZ_SEGMENT_BYTES),
        );
        let bytes = match kind {
            0 => [0u8; COMMIT_SLOT_BYTES],
            1..=3 => self.slot(0, generation, self.written(p)).encode(crc),
            4 => self.slot(sealed, generation, self.written(p)).encode(crc),
            5 => self
                .slot(sealed | closed, generation, self.written(p))
                .encode(crc),
            6 | 7 => self.slot(closed, generation, self.written(p)).encode(crc),
            8 => self.slot(0, generation, ahead).encode(crc),
            9 => self.slot(sealed, generation, ahead).encode(crc),
            10 => self.slot(closed, generation, ahead).encode(crc),
            11 => {
                let mut bytes = self.slot(0, generation, last).encode(crc);
                bytes[1 + 3 * usize::from(p)..].fill(0);
                bytes
            }
            12 => {
                let mut bytes = self.slot(0, generation, last).encode(crc);
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
                self.slot(0, generation, last).encode(other.crc())
            }
            _ => return None,
        };
        Some(bytes)
    }
}
