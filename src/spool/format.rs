//! The bytes of a spool segment: a fixed header and checksummed chunks of output.
//!
//! Pure: no I/O. journal-format.md ("Spool segments") is the specification; offsets are built from
//! one another in field order. Every decoder is total: any bytes give a value or a typed
//! [`crate::journal::format::FrameError`], never a panic.
//!
//! Invariants: integers are fixed-width little-endian; reserved bytes and padding are zero; a
//! stream tag of 0 is never valid, so zero fill never parses as a chunk; both checksums are masked
//! CRC-32 (the journal's `masked_crc`); every chunk names the combined-stream cursor of its first
//! byte, so a chunk read out of context still says where it belongs.

use crate::journal::format::{FrameError, masked_crc};
use crate::journal::format::{u32_at, u64_at};

pub const SPOOL_MAGIC: [u8; 8] = *b"PJSPOOL\0";
pub const SPOOL_FORMAT_VERSION: u16 = 1;

pub const SPOOL_HEADER_BYTES: usize = 64;
pub const CHUNK_HEADER_BYTES: usize = 24;
pub const CHUNK_ALIGN_BYTES: usize = 8;

// Segment header.
pub const SP_MAGIC_OFFSET: usize = 0;
pub const SP_VERSION_OFFSET: usize = SP_MAGIC_OFFSET + 8;
pub const SP_HEADER_BYTES_OFFSET: usize = SP_VERSION_OFFSET + 2;
pub const SP_RESERVED0_OFFSET: usize = SP_HEADER_BYTES_OFFSET + 2;
pub const SP_SPOOL_ID_OFFSET: usize = SP_RESERVED0_OFFSET + 4;
pub const SP_FIRST_CURSOR_OFFSET: usize = SP_SPOOL_ID_OFFSET + 16;
pub const SP_SEGMENT_INDEX_OFFSET: usize = SP_FIRST_CURSOR_OFFSET + 8;
pub const SP_CREATED_MS_OFFSET: usize = SP_SEGMENT_INDEX_OFFSET + 8;
pub const SP_RESERVED1_OFFSET: usize = SP_CREATED_MS_OFFSET + 8;
pub const SP_CRC_OFFSET: usize = SP_RESERVED1_OFFSET + 4;
const _: () = assert!(SP_CRC_OFFSET + 4 == SPOOL_HEADER_BYTES);

// Chunk header.
pub const CH_HEADER_CRC_OFFSET: usize = 0;
pub const CH_PAYLOAD_CRC_OFFSET: usize = CH_HEADER_CRC_OFFSET + 4;
pub const CH_PAYLOAD_BYTES_OFFSET: usize = CH_PAYLOAD_CRC_OFFSET + 4;
pub const CH_STREAM_OFFSET: usize = CH_PAYLOAD_BYTES_OFFSET + 4;
pub const CH_RESERVED_OFFSET: usize = CH_STREAM_OFFSET + 1;
pub const CH_CURSOR_OFFSET: usize = CH_RESERVED_OFFSET + 3;
const _: () = assert!(CH_CURSOR_OFFSET + 8 == CHUNK_HEADER_BYTES);

/// The largest payload of one chunk; writers split larger appends.
pub const CHUNK_PAYLOAD_BYTES_MAX: usize = 1024 * 1024;

/// Which stream a byte came from. 0 is never valid.
///
/// `Terminal` is the one stream of a PTY launch: the master side of its terminal, where the
/// workload's stdout and stderr (and the terminal's echo) arrive interleaved and cannot be told
/// apart. A reader that predates the tag refuses such a chunk as an unknown stream (damage),
/// so it never attributes terminal bytes to stdout or stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout = 1,
    Stderr = 2,
    Terminal = 3,
}

impl Stream {
    pub fn from_tag(tag: u8) -> Option<Stream> {
        match tag {
            1 => Some(Stream::Stdout),
            2 => Some(Stream::Stderr),
            3 => Some(Stream::Terminal),
            _ => None,
        }
    }
    pub fn tag(self) -> u8 {
        self as u8
    }
}

/// The header at offset 0 of every spool segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolHeader {
    /// Identifies the spool (the process handle): a segment moved between spools is told apart.
    pub spool_id: [u8; 16],
    /// Cursor of the first byte this segment holds; also its file name.
    pub first_cursor: u64,
    pub segment_index: u64,
    pub created_unix_ms: u64,
}

impl SpoolHeader {
    pub fn encode(&self) -> [u8; SPOOL_HEADER_BYTES] {
        let mut out = [0u8; SPOOL_HEADER_BYTES];
        out[SP_MAGIC_OFFSET..SP_MAGIC_OFFSET + 8].copy_from_slice(&SPOOL_MAGIC);
        out[SP_VERSION_OFFSET..SP_VERSION_OFFSET + 2]
            .copy_from_slice(&SPOOL_FORMAT_VERSION.to_le_bytes());
        out[SP_HEADER_BYTES_OFFSET..SP_HEADER_BYTES_OFFSET + 2]
            .copy_from_slice(&(SPOOL_HEADER_BYTES as u16).to_le_bytes());
        out[SP_SPOOL_ID_OFFSET..SP_SPOOL_ID_OFFSET + 16].copy_from_slice(&self.spool_id);
        out[SP_FIRST_CURSOR_OFFSET..SP_FIRST_CURSOR_OFFSET + 8]
            .copy_from_slice(&self.first_cursor.to_le_bytes());
        out[SP_SEGMENT_INDEX_OFFSET..SP_SEGMENT_INDEX_OFFSET + 8]
            .copy_from_slice(&self.segment_index.to_le_bytes());
        out[SP_CREATED_MS_OFFSET..SP_CREATED_MS_OFFSET + 8]
            .copy_from_slice(&self.created_unix_ms.to_le_bytes());
        let crc = masked_crc(&out[..SP_CRC_OFFSET]);
        out[SP_CRC_OFFSET..SP_CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, FrameError> {
        if bytes.len() < SPOOL_HEADER_BYTES {
            return Err(FrameError::Truncated);
        }
        let b = &bytes[..SPOOL_HEADER_BYTES];
        if b.iter().all(|&x| x == 0) {
            return Err(FrameError::Zero);
        }
        if b[..8] != SPOOL_MAGIC {
            return Err(FrameError::BadMagic);
        }
        if masked_crc(&b[..SP_CRC_OFFSET]) != u32_at(b, SP_CRC_OFFSET) {
            return Err(FrameError::HeaderChecksum);
        }
        let version = u16::from_le_bytes([b[SP_VERSION_OFFSET], b[SP_VERSION_OFFSET + 1]]);
        if version != SPOOL_FORMAT_VERSION {
            return Err(FrameError::UnsupportedVersion(version));
        }
        let header_bytes =
            u16::from_le_bytes([b[SP_HEADER_BYTES_OFFSET], b[SP_HEADER_BYTES_OFFSET + 1]]);
        if usize::from(header_bytes) != SPOOL_HEADER_BYTES {
            return Err(FrameError::BadHeaderBytes(header_bytes));
        }
        if u32_at(b, SP_RESERVED0_OFFSET) != 0 || u32_at(b, SP_RESERVED1_OFFSET) != 0 {
            return Err(FrameError::ReservedNonZero);
        }
        let mut spool_id = [0u8; 16];
        spool_id.copy_from_slice(&b[SP_SPOOL_ID_OFFSET..SP_SPOOL_ID_OFFSET + 16]);
        Ok(SpoolHeader {
            spool_id,
            first_cursor: u64_at(b, SP_FIRST_CURSOR_OFFSET),
            segment_index: u64_at(b, SP_SEGMENT_INDEX_OFFSET),
            created_unix_ms: u64_at(b, SP_CREATED_MS_OFFSET),
        })
    }
}

/// A chunk's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    pub payload_bytes: u32,
    pub stream: Stream,
    pub cursor: u64,
}

pub const fn chunk_bytes(payload_bytes: usize) -> usize {
    (CHUNK_HEADER_BYTES + payload_bytes).div_ceil(CHUNK_ALIGN_BYTES) * CHUNK_ALIGN_BYTES
}

/// Zero bytes to pad any chunk up to [`CHUNK_ALIGN_BYTES`].
pub const CHUNK_PADDING: [u8; CHUNK_ALIGN_BYTES] = [0; CHUNK_ALIGN_BYTES];

/// The zero padding after a payload of `payload_bytes` (shorter than [`CHUNK_ALIGN_BYTES`]).
pub const fn chunk_padding_bytes(payload_bytes: usize) -> usize {
    chunk_bytes(payload_bytes) - CHUNK_HEADER_BYTES - payload_bytes
}

/// The header of the chunk that holds `payload` (its checksums included). The whole chunk is this
/// header, the payload, then [`chunk_padding_bytes`] zeroes: a writer may send the three pieces
/// to the file as they are, without assembling them in one buffer.
pub fn encode_chunk_header(
    stream: Stream,
    cursor: u64,
    payload: &[u8],
) -> [u8; CHUNK_HEADER_BYTES] {
    assert!(!payload.is_empty() && payload.len() <= CHUNK_PAYLOAD_BYTES_MAX);
    let mut header = [0u8; CHUNK_HEADER_BYTES];
    header[CH_PAYLOAD_CRC_OFFSET..CH_PAYLOAD_CRC_OFFSET + 4]
        .copy_from_slice(&masked_crc(payload).to_le_bytes());
    header[CH_PAYLOAD_BYTES_OFFSET..CH_PAYLOAD_BYTES_OFFSET + 4]
        .copy_from_slice(&(payload.len() as u32).to_le_bytes());
    header[CH_STREAM_OFFSET] = stream.tag();
    header[CH_CURSOR_OFFSET..CH_CURSOR_OFFSET + 8].copy_from_slice(&cursor.to_le_bytes());
    let crc = masked_crc(&header[CH_PAYLOAD_CRC_OFFSET..]);
    header[CH_HEADER_CRC_OFFSET..CH_HEADER_CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Appends a whole chunk (header, payload, zero padding) to `out`.
#[cfg(any(test, feature = "test-support"))]
pub fn encode_chunk(stream: Stream, cursor: u64, payload: &[u8], out: &mut Vec<u8>) {
    let header = encode_chunk_header(stream, cursor, payload);
    // Appended piece by piece: the payload is copied once and nothing is zero-filled twice.
    out.extend_from_slice(&header);
    out.extend_from_slice(payload);
    out.extend_from_slice(&CHUNK_PADDING[..chunk_padding_bytes(payload.len())]);
}

/// Checks a chunk header (at least [`CHUNK_HEADER_BYTES`]) without its payload.
pub fn decode_chunk_header(bytes: &[u8]) -> Result<ChunkHeader, FrameError> {
    if bytes.len() < CHUNK_HEADER_BYTES {
        return Err(FrameError::Truncated);
    }
    let h = &bytes[..CHUNK_HEADER_BYTES];
    if h.iter().all(|&x| x == 0) {
        return Err(FrameError::Zero);
    }
    if masked_crc(&h[CH_PAYLOAD_CRC_OFFSET..]) != u32_at(h, CH_HEADER_CRC_OFFSET) {
        return Err(FrameError::HeaderChecksum);
    }
    let Some(stream) = Stream::from_tag(h[CH_STREAM_OFFSET]) else {
        return Err(FrameError::KindZero);
    };
    if h[CH_RESERVED_OFFSET..CH_CURSOR_OFFSET]
        .iter()
        .any(|&x| x != 0)
    {
        return Err(FrameError::ReservedNonZero);
    }
    let payload_bytes = u32_at(h, CH_PAYLOAD_BYTES_OFFSET);
    if payload_bytes == 0 || payload_bytes as usize > CHUNK_PAYLOAD_BYTES_MAX {
        return Err(FrameError::PayloadTooLarge(payload_bytes));
    }
    Ok(ChunkHeader {
        payload_bytes,
        stream,
        cursor: u64_at(h, CH_CURSOR_OFFSET),
    })
}

/// Checks a whole chunk at the start of `bytes`; returns its header and payload.
pub fn decode_chunk(bytes: &[u8]) -> Result<(ChunkHeader, &[u8]), FrameError> {
    let header = decode_chunk_header(bytes)?;
    let len = chunk_bytes(header.payload_bytes as usize);
    if len > bytes.len() {
        return Err(FrameError::LengthPastEnd);
    }
    let payload = &bytes[CHUNK_HEADER_BYTES..CHUNK_HEADER_BYTES + header.payload_bytes as usize];
    if masked_crc(payload) != u32_at(bytes, CH_PAYLOAD_CRC_OFFSET) {
        return Err(FrameError::PayloadChecksum);
    }
    if bytes[CHUNK_HEADER_BYTES + payload.len()..len]
        .iter()
        .any(|&x| x != 0)
    {
        return Err(FrameError::PaddingNonZero);
    }
    Ok((header, payload))
}
