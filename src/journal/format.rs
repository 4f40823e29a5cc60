//! The bytes of a journal segment: its header and the framing of each record.
//!
//! This module is pure: it turns byte slices into typed headers and back, and never touches a file.
//! journal-format.md is the specification; the offsets below are built from one another in the
//! order that document lists the fields, so the two cannot drift apart silently (golden tests in
//! this module pin the exact bytes).
//!
//! Invariants this module keeps:
//! - Every integer on disk is fixed-width little-endian; every reserved byte and every padding byte
//!   is written as zero and must read as zero.
//! - Every decoder is total: any input yields a value or a typed [`FrameError`], never a panic, and
//!   no allocation is sized by a field that has not been bounds-checked against the slice.
//! - A record of kind 0 is never valid, so zero-filled space never parses as a record, and both
//!   checksums are masked so that all-zero bytes never carry a matching checksum.

use crate::limits::{
    COMMIT_SLOT_BYTES, RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES, RECORD_PAYLOAD_BYTES_MAX,
    SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN, SEGMENT_HEADER_BYTES, SEGMENT_INDEX_MAX,
    SEGMENT_RECORDS_OFFSET, SEQ_MAX,
};

/// First eight bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"PJOURNL\0";

/// Version of the segment and record framing that the writer produces (journal-format.md):
/// version 2 adds the commit area after the fixed header.
pub const FORMAT_VERSION: u16 = 2;

/// The first version: no commit area, records from offset 64. Still read, never written.
pub const FORMAT_VERSION_V1: u16 = 1;

// Segment header layout. Each offset is the previous one plus the previous field's width.
pub const SEG_MAGIC_OFFSET: usize = 0;
pub const SEG_VERSION_OFFSET: usize = SEG_MAGIC_OFFSET + 8;
pub const SEG_HEADER_BYTES_OFFSET: usize = SEG_VERSION_OFFSET + 2;
pub const SEG_SEGMENT_BYTES_OFFSET: usize = SEG_HEADER_BYTES_OFFSET + 2;
pub const SEG_JOURNAL_ID_OFFSET: usize = SEG_SEGMENT_BYTES_OFFSET + 4;
pub const SEG_INDEX_OFFSET: usize = SEG_JOURNAL_ID_OFFSET + 16;
pub const SEG_BASE_SEQ_OFFSET: usize = SEG_INDEX_OFFSET + 8;
pub const SEG_CREATED_MS_OFFSET: usize = SEG_BASE_SEQ_OFFSET + 8;
pub const SEG_RESERVED_OFFSET: usize = SEG_CREATED_MS_OFFSET + 8;
pub const SEG_CRC_OFFSET: usize = SEG_RESERVED_OFFSET + 4;
const _: () = assert!(SEG_CRC_OFFSET + 4 == SEGMENT_HEADER_BYTES);

// Record header layout.
pub const REC_HEADER_CRC_OFFSET: usize = 0;
pub const REC_PAYLOAD_CRC_OFFSET: usize = REC_HEADER_CRC_OFFSET + 4;
pub const REC_PAYLOAD_BYTES_OFFSET: usize = REC_PAYLOAD_CRC_OFFSET + 4;
pub const REC_KIND_OFFSET: usize = REC_PAYLOAD_BYTES_OFFSET + 4;
pub const REC_CODEC_OFFSET: usize = REC_KIND_OFFSET + 2;
pub const REC_FLAGS_OFFSET: usize = REC_CODEC_OFFSET + 1;
pub const REC_SEQ_OFFSET: usize = REC_FLAGS_OFFSET + 1;
pub const REC_EVENT_ID_OFFSET: usize = REC_SEQ_OFFSET + 8;
pub const REC_PREV_CRC_OFFSET: usize = REC_EVENT_ID_OFFSET + 16;
pub const REC_RESERVED_OFFSET: usize = REC_PREV_CRC_OFFSET + 4;
const _: () = assert!(REC_RESERVED_OFFSET + 4 == RECORD_HEADER_BYTES);

/// The header checksum covers everything in the header after itself, which includes the payload
/// checksum: one valid header CRC therefore vouches for header and payload together.
pub const REC_HEADER_CRC_COVERS: std::ops::Range<usize> =
    REC_PAYLOAD_CRC_OFFSET..RECORD_HEADER_BYTES;

/// LevelDB's mask: a CRC stored next to the data it covers, or over all-zero bytes, must not be
/// mistaken for a valid checksum of embedded data.
const CRC_MASK_DELTA: u32 = 0xa282_ead8;

pub fn masked_crc(bytes: &[u8]) -> u32 {
    mask(crc32fast::hash(bytes))
}

/// [`masked_crc`] of `parts` laid end to end.
pub fn masked_crc_of(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for part in parts {
        h.update(part);
    }
    mask(h.finalize())
}

/// The masked form of a CRC: a checksum of data that holds checksums is not a fixed point.
pub(crate) fn mask(crc: u32) -> u32 {
    (crc.rotate_right(15)).wrapping_add(CRC_MASK_DELTA)
}

/// A typed reason why bytes are not a valid header or record. Recovery maps these to the rows of
/// its decision table; the reader never needs more detail than this to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    #[error("fewer bytes than a header needs")]
    Truncated,
    #[error("all-zero header (end of written records)")]
    Zero,
    #[error("bad magic")]
    BadMagic,
    #[error("unsupported format version {0}")]
    UnsupportedVersion(u16),
    #[error("header length {0} is not the length of this version")]
    BadHeaderBytes(u16),
    #[error("segment size {0} is outside the allowed range or not page-aligned")]
    BadSegmentBytes(u32),
    #[error("header checksum mismatch")]
    HeaderChecksum,
    #[error("record kind 0 is never valid")]
    KindZero,
    #[error("reserved bytes are not zero")]
    ReservedNonZero,
    #[error("payload length {0} exceeds the record payload limit")]
    PayloadTooLarge(u32),
    #[error("record runs past the end of the segment")]
    LengthPastEnd,
    #[error("payload checksum mismatch")]
    PayloadChecksum,
    #[error("padding after the payload is not zero")]
    PaddingNonZero,
    #[error("sequence number or segment index out of range")]
    OutOfRange,
}

/// Fixed-width little-endian readers of every on-disk format of the crate (journal, floor,
/// snapshot, spool): the caller has checked that `bytes` holds the field.
pub(crate) fn u16_at(bytes: &[u8], offset: usize) -> u16 {
    let mut b = [0u8; 2];
    b.copy_from_slice(&bytes[offset..offset + 2]);
    u16::from_le_bytes(b)
}

pub(crate) fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(b)
}

pub(crate) fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(b)
}

fn id_at(bytes: &[u8], offset: usize) -> [u8; 16] {
    let mut b = [0u8; 16];
    b.copy_from_slice(&bytes[offset..offset + 16]);
    b
}

/// The fixed header at offset 0 of every segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// [`FORMAT_VERSION`] for every segment this writer creates; [`FORMAT_VERSION_V1`] for a
    /// segment of a version 1 journal, which has no commit area.
    pub format_version: u16,
    /// Total bytes of the segment file, header included; the file is preallocated to this size.
    pub segment_bytes: u32,
    /// Random at journal creation, shared by every segment of the journal: a segment copied in
    /// from another journal is told apart.
    pub journal_id: [u8; 16],
    /// 0 for the first segment, then +1 per segment; the file name.
    pub segment_index: u64,
    /// The sequence number the first record of this segment carries (or will carry).
    pub base_seq: u64,
    /// Wall-clock creation time, informational only.
    pub created_unix_ms: u64,
}

impl SegmentHeader {
    /// Where the first record of this segment starts: after the fixed header, and in version 2
    /// after the commit area too. The `header_bytes` field on disk.
    pub fn records_offset(&self) -> usize {
        if self.format_version == FORMAT_VERSION_V1 {
            SEGMENT_HEADER_BYTES
        } else {
            SEGMENT_RECORDS_OFFSET
        }
    }

    /// Whether this segment has a commit area (version 2 on).
    pub fn has_commit_area(&self) -> bool {
        self.format_version != FORMAT_VERSION_V1
    }

    /// The offset of commit slot `slot` (0 or 1) in a version 2 segment.
    pub fn commit_slot_offset(slot: usize) -> usize {
        SEGMENT_HEADER_BYTES + (slot & 1) * COMMIT_SLOT_BYTES
    }

    /// The most records a segment of `segment_bytes` can hold (every record takes at least a
    /// record header), whatever its version: the bound on the seqs a lost segment could have held.
    pub fn record_capacity(segment_bytes: u64) -> u64 {
        segment_bytes.saturating_sub(SEGMENT_HEADER_BYTES as u64) / RECORD_HEADER_BYTES as u64
    }

    pub fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES] {
        let mut out = [0u8; SEGMENT_HEADER_BYTES];
        out[SEG_MAGIC_OFFSET..SEG_MAGIC_OFFSET + 8].copy_from_slice(&SEGMENT_MAGIC);
        out[SEG_VERSION_OFFSET..SEG_VERSION_OFFSET + 2]
            .copy_from_slice(&self.format_version.to_le_bytes());
        out[SEG_HEADER_BYTES_OFFSET..SEG_HEADER_BYTES_OFFSET + 2]
            .copy_from_slice(&(self.records_offset() as u16).to_le_bytes());
        out[SEG_SEGMENT_BYTES_OFFSET..SEG_SEGMENT_BYTES_OFFSET + 4]
            .copy_from_slice(&self.segment_bytes.to_le_bytes());
        out[SEG_JOURNAL_ID_OFFSET..SEG_JOURNAL_ID_OFFSET + 16].copy_from_slice(&self.journal_id);
        out[SEG_INDEX_OFFSET..SEG_INDEX_OFFSET + 8]
            .copy_from_slice(&self.segment_index.to_le_bytes());
        out[SEG_BASE_SEQ_OFFSET..SEG_BASE_SEQ_OFFSET + 8]
            .copy_from_slice(&self.base_seq.to_le_bytes());
        out[SEG_CREATED_MS_OFFSET..SEG_CREATED_MS_OFFSET + 8]
            .copy_from_slice(&self.created_unix_ms.to_le_bytes());
        let crc = masked_crc(&out[..SEG_CRC_OFFSET]);
        out[SEG_CRC_OFFSET..SEG_CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// The masked CRC stored in the header; the first record of the segment chains to it.
    pub fn crc(&self) -> u32 {
        let bytes = self.encode();
        u32_at(&bytes, SEG_CRC_OFFSET)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, FrameError> {
        if bytes.len() < SEGMENT_HEADER_BYTES {
            return Err(FrameError::Truncated);
        }
        let bytes = &bytes[..SEGMENT_HEADER_BYTES];
        if bytes.iter().all(|&b| b == 0) {
            return Err(FrameError::Zero);
        }
        if bytes[SEG_MAGIC_OFFSET..SEG_MAGIC_OFFSET + 8] != SEGMENT_MAGIC {
            return Err(FrameError::BadMagic);
        }
        if masked_crc(&bytes[..SEG_CRC_OFFSET]) != u32_at(bytes, SEG_CRC_OFFSET) {
            return Err(FrameError::HeaderChecksum);
        }
        let format_version = u16_at(bytes, SEG_VERSION_OFFSET);
        let records_offset = match format_version {
            FORMAT_VERSION_V1 => SEGMENT_HEADER_BYTES,
            FORMAT_VERSION => SEGMENT_RECORDS_OFFSET,
            other => return Err(FrameError::UnsupportedVersion(other)),
        };
        let header_bytes = u16_at(bytes, SEG_HEADER_BYTES_OFFSET);
        if usize::from(header_bytes) != records_offset {
            return Err(FrameError::BadHeaderBytes(header_bytes));
        }
        if u32_at(bytes, SEG_RESERVED_OFFSET) != 0 {
            return Err(FrameError::ReservedNonZero);
        }
        let segment_bytes = u32_at(bytes, SEG_SEGMENT_BYTES_OFFSET);
        if !segment_bytes_valid(segment_bytes as usize) {
            return Err(FrameError::BadSegmentBytes(segment_bytes));
        }
        let segment_index = u64_at(bytes, SEG_INDEX_OFFSET);
        let base_seq = u64_at(bytes, SEG_BASE_SEQ_OFFSET);
        if segment_index > SEGMENT_INDEX_MAX || base_seq == 0 || base_seq > SEQ_MAX {
            return Err(FrameError::OutOfRange);
        }
        Ok(SegmentHeader {
            format_version,
            segment_bytes,
            journal_id: id_at(bytes, SEG_JOURNAL_ID_OFFSET),
            segment_index,
            base_seq,
            created_unix_ms: u64_at(bytes, SEG_CREATED_MS_OFFSET),
        })
    }
}

// Commit slot layout (version 2): two slots follow the fixed header.
pub const SLOT_CRC_OFFSET: usize = 0;
pub const SLOT_FLAGS_OFFSET: usize = SLOT_CRC_OFFSET + 4;
pub const SLOT_GENERATION_OFFSET: usize = SLOT_FLAGS_OFFSET + 4;
pub const SLOT_COMMITTED_OFFSET: usize = SLOT_GENERATION_OFFSET + 8;
pub const SLOT_END_OFFSET_OFFSET: usize = SLOT_COMMITTED_OFFSET + 8;
pub const SLOT_NEXT_BYTES_OFFSET: usize = SLOT_END_OFFSET_OFFSET + 4;
pub const SLOT_NEXT_BASE_OFFSET: usize = SLOT_NEXT_BYTES_OFFSET + 4;
pub const SLOT_RESERVED_OFFSET: usize = SLOT_NEXT_BASE_OFFSET + 8;
const _: () = assert!(SLOT_RESERVED_OFFSET + 8 == COMMIT_SLOT_BYTES);
const _: () = assert!(SEGMENT_HEADER_BYTES + 2 * COMMIT_SLOT_BYTES == SEGMENT_RECORDS_OFFSET);

/// A successor segment exists: it was created (durably) before this slot was written.
pub const SLOT_SEALED: u32 = 1;
/// The writer closed the journal after its last flush: nothing was written past `end_offset`.
pub const SLOT_CLOSED: u32 = 2;
const SLOT_FLAGS_KNOWN: u32 = SLOT_SEALED | SLOT_CLOSED;

/// One commit slot of a version 2 segment: the claim, written before a flush, that every record
/// of the segment up to `committed_seq` is covered by that flush. The writer alternates between
/// the two slots and writes one only after the flush of the other returned, so at most one slot
/// is ever in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitSlot {
    pub flags: u32,
    /// Increases by one per slot written in this segment; the higher one is the newer slot.
    pub generation: u64,
    /// Every record of this segment with a seq up to this one was written before the slot; the
    /// segment's `base_seq - 1` when it claims none.
    pub committed_seq: u64,
    /// The offset just past the record `committed_seq` (the records offset when none).
    pub end_offset: u32,
    /// For a sealed segment, the successor's size; 0 otherwise.
    pub next_segment_bytes: u32,
    /// For a sealed segment, the successor's base seq; 0 otherwise.
    pub next_base_seq: u64,
}

impl CommitSlot {
    pub fn sealed(&self) -> bool {
        self.flags & SLOT_SEALED != 0
    }
    pub fn closed(&self) -> bool {
        self.flags & SLOT_CLOSED != 0
    }

    /// The slot's bytes; its checksum also covers the segment header's checksum, so that a slot
    /// copied from another segment does not verify.
    pub fn encode(&self, header_crc: u32) -> [u8; COMMIT_SLOT_BYTES] {
        let mut out = [0u8; COMMIT_SLOT_BYTES];
        out[SLOT_FLAGS_OFFSET..SLOT_FLAGS_OFFSET + 4].copy_from_slice(&self.flags.to_le_bytes());
        out[SLOT_GENERATION_OFFSET..SLOT_GENERATION_OFFSET + 8]
            .copy_from_slice(&self.generation.to_le_bytes());
        out[SLOT_COMMITTED_OFFSET..SLOT_COMMITTED_OFFSET + 8]
            .copy_from_slice(&self.committed_seq.to_le_bytes());
        out[SLOT_END_OFFSET_OFFSET..SLOT_END_OFFSET_OFFSET + 4]
            .copy_from_slice(&self.end_offset.to_le_bytes());
        out[SLOT_NEXT_BYTES_OFFSET..SLOT_NEXT_BYTES_OFFSET + 4]
            .copy_from_slice(&self.next_segment_bytes.to_le_bytes());
        out[SLOT_NEXT_BASE_OFFSET..SLOT_NEXT_BASE_OFFSET + 8]
            .copy_from_slice(&self.next_base_seq.to_le_bytes());
        let crc = slot_crc(header_crc, &out);
        out[SLOT_CRC_OFFSET..SLOT_CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes the slot at the start of `bytes` for the segment `header`. `Ok(None)` is a slot
    /// never written (all zero). Total: any input gives a slot, `None` or a [`FrameError`].
    pub fn decode(bytes: &[u8], header: &SegmentHeader) -> Result<Option<CommitSlot>, FrameError> {
        if bytes.len() < COMMIT_SLOT_BYTES {
            return Err(FrameError::Truncated);
        }
        let bytes = &bytes[..COMMIT_SLOT_BYTES];
        if bytes.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        if slot_crc(header.crc(), bytes) != u32_at(bytes, SLOT_CRC_OFFSET) {
            return Err(FrameError::HeaderChecksum);
        }
        let slot = CommitSlot {
            flags: u32_at(bytes, SLOT_FLAGS_OFFSET),
            generation: u64_at(bytes, SLOT_GENERATION_OFFSET),
            committed_seq: u64_at(bytes, SLOT_COMMITTED_OFFSET),
            end_offset: u32_at(bytes, SLOT_END_OFFSET_OFFSET),
            next_segment_bytes: u32_at(bytes, SLOT_NEXT_BYTES_OFFSET),
            next_base_seq: u64_at(bytes, SLOT_NEXT_BASE_OFFSET),
        };
        if slot.flags & !SLOT_FLAGS_KNOWN != 0 || u64_at(bytes, SLOT_RESERVED_OFFSET) != 0 {
            return Err(FrameError::ReservedNonZero);
        }
        let end = slot.end_offset as usize;
        let in_range = slot.generation != 0
            && slot.committed_seq >= header.base_seq - 1
            && slot.committed_seq <= SEQ_MAX
            && end >= header.records_offset()
            && end <= header.segment_bytes as usize
            && end.is_multiple_of(RECORD_ALIGN_BYTES)
            && if slot.sealed() {
                segment_bytes_valid(slot.next_segment_bytes as usize)
                    && slot.next_base_seq > slot.committed_seq
                    && slot.next_base_seq <= SEQ_MAX
            } else {
                slot.next_segment_bytes == 0 && slot.next_base_seq == 0
            };
        if !in_range {
            return Err(FrameError::OutOfRange);
        }
        Ok(Some(slot))
    }
}

fn slot_crc(header_crc: u32, slot: &[u8]) -> u32 {
    let mut covered = [0u8; 4 + COMMIT_SLOT_BYTES - 4];
    covered[..4].copy_from_slice(&header_crc.to_le_bytes());
    covered[4..].copy_from_slice(&slot[SLOT_FLAGS_OFFSET..COMMIT_SLOT_BYTES]);
    masked_crc(&covered)
}

pub fn segment_bytes_valid(segment_bytes: usize) -> bool {
    (SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&segment_bytes)
        && segment_bytes.is_multiple_of(crate::limits::PAGE_BYTES)
}

/// The fixed header of one record. `payload_crc` and `header_crc` are computed by [`encode_record`]
/// and checked by [`decode_record`]; they are kept here so that tools can print them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub header_crc: u32,
    pub payload_crc: u32,
    pub payload_bytes: u32,
    pub kind: u16,
    pub codec_version: u8,
    pub seq: u64,
    pub event_id: [u8; 16],
    /// `header_crc` of the record before this one in the same segment; for the first record of a
    /// segment, the segment header's CRC. Stale or transplanted records break this chain.
    pub prev_crc: u32,
}

/// Bytes a record with `payload_bytes` of payload occupies, header and zero padding included.
pub const fn record_bytes(payload_bytes: usize) -> usize {
    let unpadded = RECORD_HEADER_BYTES + payload_bytes;
    unpadded.div_ceil(RECORD_ALIGN_BYTES) * RECORD_ALIGN_BYTES
}

/// The fields of a record that the writer chooses; checksums are derived.
#[derive(Debug, Clone, Copy)]
pub struct RecordFields<'a> {
    pub kind: u16,
    pub codec_version: u8,
    pub seq: u64,
    pub event_id: [u8; 16],
    pub prev_crc: u32,
    pub payload: &'a [u8],
}

/// Writes the whole record, header, payload and zero padding, into `out`, which must be exactly
/// `record_bytes(payload.len())` long. Returns the header CRC (the next record's `prev_crc`).
pub fn encode_record(fields: &RecordFields<'_>, out: &mut [u8]) -> u32 {
    assert!(fields.kind != 0, "kind 0 is reserved for zero fill");
    assert!(fields.payload.len() <= RECORD_PAYLOAD_BYTES_MAX);
    assert_eq!(out.len(), record_bytes(fields.payload.len()));
    let payload_crc = masked_crc(fields.payload);
    let (header, rest) = out.split_at_mut(RECORD_HEADER_BYTES);
    header[REC_PAYLOAD_CRC_OFFSET..REC_PAYLOAD_CRC_OFFSET + 4]
        .copy_from_slice(&payload_crc.to_le_bytes());
    header[REC_PAYLOAD_BYTES_OFFSET..REC_PAYLOAD_BYTES_OFFSET + 4]
        .copy_from_slice(&(fields.payload.len() as u32).to_le_bytes());
    header[REC_KIND_OFFSET..REC_KIND_OFFSET + 2].copy_from_slice(&fields.kind.to_le_bytes());
    header[REC_CODEC_OFFSET] = fields.codec_version;
    header[REC_FLAGS_OFFSET] = 0;
    header[REC_SEQ_OFFSET..REC_SEQ_OFFSET + 8].copy_from_slice(&fields.seq.to_le_bytes());
    header[REC_EVENT_ID_OFFSET..REC_EVENT_ID_OFFSET + 16].copy_from_slice(&fields.event_id);
    header[REC_PREV_CRC_OFFSET..REC_PREV_CRC_OFFSET + 4]
        .copy_from_slice(&fields.prev_crc.to_le_bytes());
    header[REC_RESERVED_OFFSET..REC_RESERVED_OFFSET + 4].fill(0);
    let header_crc = masked_crc(&header[REC_HEADER_CRC_COVERS]);
    header[REC_HEADER_CRC_OFFSET..REC_HEADER_CRC_OFFSET + 4]
        .copy_from_slice(&header_crc.to_le_bytes());
    let (payload, padding) = rest.split_at_mut(fields.payload.len());
    payload.copy_from_slice(fields.payload);
    padding.fill(0);
    header_crc
}

/// Checks the header at the start of `bytes` (at least [`RECORD_HEADER_BYTES`] long) and returns
/// it without checking that the record fits: readers that read in pieces use it to learn how many
/// bytes the record needs.
pub fn decode_record_header_unbounded(bytes: &[u8]) -> Result<RecordHeader, FrameError> {
    if bytes.len() < RECORD_HEADER_BYTES {
        return Err(FrameError::Truncated);
    }
    let header = &bytes[..RECORD_HEADER_BYTES];
    if header.iter().all(|&b| b == 0) {
        return Err(FrameError::Zero);
    }
    let header_crc = u32_at(header, REC_HEADER_CRC_OFFSET);
    if masked_crc(&header[REC_HEADER_CRC_COVERS]) != header_crc {
        return Err(FrameError::HeaderChecksum);
    }
    let kind = u16_at(header, REC_KIND_OFFSET);
    if kind == 0 {
        return Err(FrameError::KindZero);
    }
    if header[REC_FLAGS_OFFSET] != 0 || u32_at(header, REC_RESERVED_OFFSET) != 0 {
        return Err(FrameError::ReservedNonZero);
    }
    let payload_bytes = u32_at(header, REC_PAYLOAD_BYTES_OFFSET);
    if payload_bytes as usize > RECORD_PAYLOAD_BYTES_MAX {
        return Err(FrameError::PayloadTooLarge(payload_bytes));
    }
    let seq = u64_at(header, REC_SEQ_OFFSET);
    if seq == 0 || seq > SEQ_MAX {
        return Err(FrameError::OutOfRange);
    }
    Ok(RecordHeader {
        header_crc,
        payload_crc: u32_at(header, REC_PAYLOAD_CRC_OFFSET),
        payload_bytes,
        kind,
        codec_version: header[REC_CODEC_OFFSET],
        seq,
        event_id: id_at(header, REC_EVENT_ID_OFFSET),
        prev_crc: u32_at(header, REC_PREV_CRC_OFFSET),
    })
}

/// Checks and decodes the record header at the start of `bytes` without looking at the payload.
/// `bytes` runs to the end of the segment, so a length that overruns it is caught here.
pub fn decode_record_header(bytes: &[u8]) -> Result<RecordHeader, FrameError> {
    let header = decode_record_header_unbounded(bytes)?;
    if record_bytes(header.payload_bytes as usize) > bytes.len() {
        return Err(FrameError::LengthPastEnd);
    }
    Ok(header)
}

/// Checks and decodes a whole record at the start of `bytes` (which runs to the segment's end).
/// Returns the header and the payload slice.
pub fn decode_record(bytes: &[u8]) -> Result<(RecordHeader, &[u8]), FrameError> {
    let header = decode_record_header(bytes)?;
    let payload_end = RECORD_HEADER_BYTES + header.payload_bytes as usize;
    let payload = &bytes[RECORD_HEADER_BYTES..payload_end];
    if masked_crc(payload) != header.payload_crc {
        return Err(FrameError::PayloadChecksum);
    }
    let padding = &bytes[payload_end..record_bytes(header.payload_bytes as usize)];
    if padding.iter().any(|&b| b != 0) {
        return Err(FrameError::PaddingNonZero);
    }
    Ok((header, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    const GOLDEN_SEGMENT_HEADER: &str = concat!(
        "504a4f55524e4c00",                 // magic
        "0100",                             // format version 1
        "4000",                             // header bytes 64
        "00100000",                         // segment bytes 4096
        "000102030405060708090a0b0c0d0e0f", // journal id
        "0200000000000000",                 // segment index 2
        "2a00000000000000",                 // base seq 42
        "e803000000000000",                 // created 1000 ms
        "00000000",                         // reserved
    );

    fn sample_segment_header() -> SegmentHeader {
        SegmentHeader {
            format_version: FORMAT_VERSION_V1,
            segment_bytes: 4096,
            journal_id: std::array::from_fn(|i| i as u8),
            segment_index: 2,
            base_seq: 42,
            created_unix_ms: 1000,
        }
    }

    #[test]
    fn segment_header_golden_bytes() {
        let bytes = sample_segment_header().encode();
        let crc = masked_crc(&bytes[..SEG_CRC_OFFSET]);
        assert_eq!(hex(&bytes[..SEG_CRC_OFFSET]), GOLDEN_SEGMENT_HEADER);
        assert_eq!(u32_at(&bytes, SEG_CRC_OFFSET), crc);
        assert_eq!(hex(&bytes[SEG_CRC_OFFSET..]), "0ef5f900");
        assert_eq!(SegmentHeader::decode(&bytes), Ok(sample_segment_header()));
    }

    #[test]
    fn version_2_header_and_commit_slot_golden_bytes() {
        let header = SegmentHeader {
            format_version: FORMAT_VERSION,
            ..sample_segment_header()
        };
        let bytes = header.encode();
        assert_eq!(
            hex(&bytes[8..12]),
            "0200a000",
            "version 2, header_bytes 160"
        );
        assert_eq!(SegmentHeader::decode(&bytes), Ok(header));
        assert_eq!(header.records_offset(), 160);
        let slot = CommitSlot {
            flags: SLOT_SEALED,
            generation: 3,
            committed_seq: 50,
            end_offset: 1024,
            next_segment_bytes: 8192,
            next_base_seq: 51,
        };
        let encoded = slot.encode(header.crc());
        assert_eq!(
            hex(&encoded[4..]),
            concat!(
                "01000000",         // flags: sealed
                "0300000000000000", // generation 3
                "3200000000000000", // committed seq 50
                "00040000",         // end offset 1024
                "00200000",         // next segment bytes 8192
                "3300000000000000", // next base seq 51
                "0000000000000000", // reserved
            )
        );
        assert_eq!(CommitSlot::decode(&encoded, &header), Ok(Some(slot)));
        assert_eq!(CommitSlot::decode(&[0u8; 48], &header), Ok(None));
        // A slot is bound to its segment: the same bytes under another header do not verify.
        let other = SegmentHeader {
            segment_index: 3,
            ..header
        };
        assert_eq!(
            CommitSlot::decode(&encoded, &other),
            Err(FrameError::HeaderChecksum)
        );
        for bit in 0..encoded.len() * 8 {
            let mut bad = encoded;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                !matches!(CommitSlot::decode(&bad, &header), Ok(Some(s)) if s == slot),
                "bit {bit} flip accepted"
            );
        }
    }

    #[test]
    fn record_golden_bytes() {
        let payload = b"hello";
        let mut out = vec![0xffu8; record_bytes(payload.len())];
        let crc = encode_record(
            &RecordFields {
                kind: 7,
                codec_version: 1,
                seq: 42,
                event_id: [0xab; 16],
                prev_crc: 0x1122_3344,
                payload,
            },
            &mut out,
        );
        assert_eq!(out.len(), 56);
        assert_eq!(
            hex(&out),
            concat!(
                "b95b1a18",                         // header crc
                "f9568fef",                         // payload crc
                "05000000",                         // payload bytes
                "0700",                             // kind
                "01",                               // codec version
                "00",                               // flags
                "2a00000000000000",                 // seq
                "abababababababababababababababab", // event id
                "44332211",                         // prev crc
                "00000000",                         // reserved
                "68656c6c6f",                       // payload
                "000000",                           // padding
            )
        );
        let (header, decoded) = decode_record(&out).unwrap();
        assert_eq!(header.header_crc, crc);
        assert_eq!(decoded, payload);
        assert_eq!(header.seq, 42);
        assert_eq!(header.kind, 7);
    }

    #[test]
    fn zero_fill_never_parses() {
        let zeros = [0u8; 256];
        assert_eq!(decode_record(&zeros), Err(FrameError::Zero));
        assert_eq!(SegmentHeader::decode(&zeros), Err(FrameError::Zero));
        assert_ne!(masked_crc(&[0u8; 44]), 0);
    }

    #[test]
    fn every_single_bit_flip_of_a_record_is_rejected() {
        let payload = b"some payload bytes";
        let mut good = vec![0u8; record_bytes(payload.len())];
        encode_record(
            &RecordFields {
                kind: 3,
                codec_version: 1,
                seq: 9,
                event_id: [7; 16],
                prev_crc: 5,
                payload,
            },
            &mut good,
        );
        for bit in 0..good.len() * 8 {
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_record(&bad).is_err(), "bit {bit} flip accepted");
        }
    }
}
