//! What compaction leaves for recovery and open: `journal/FLOOR`, where the head was removed up
//! to (its bytes, read and checked in the order journal-format.md lists; the floor in force,
//! which must belong to the same journal as its segments), and the event IDs of removed records
//! that a retry could still name ([`RetainedId`], handed to the journal in [`Resume`]).
//!
//! Invariants: `FLOOR` names the first segment kept (`segment_index`) and its `base_seq`: every
//! record with a lower seq was removed on purpose. Recovery starts the expected seq at
//! `FLOOR.seq`, so a first segment at the floor is no gap; a damaged `FLOOR` is reported and
//! ignored, and the removed head then reads as a gap (loss), never as a silently shorter journal.
//!
//! Apart from `compact.rs` (the removal) because recovery, the reader and the ID index read what
//! is here, and compaction reads them: this module imports only the segment format.

use std::path::PathBuf;

use crate::root::dir::{Access, Dir};

use serde::Serialize;

use super::format::{self, SegmentHeader, u16_at, u32_at, u64_at};
use super::{EventId, Position};
use crate::limits::{SEGMENT_HEADER_BYTES, SEGMENT_INDEX_MAX, SEQ_MAX};

/// The name of the floor file in the journal directory.
pub const FLOOR_FILE: &str = "FLOOR";
/// A floor being written (crash residue if found: a writable open deletes it).
pub const FLOOR_TMP_FILE: &str = "FLOOR.tmp";

/// First eight bytes of the floor file.
pub const FLOOR_MAGIC: [u8; 8] = *b"PJFLOOR\0";
/// Version of the floor file's layout.
pub const FLOOR_VERSION: u16 = 1;
/// Length of the floor file.
pub const FLOOR_BYTES: usize = 64;

// Layout, each offset the previous one plus the previous field's width.
const FL_MAGIC_OFFSET: usize = 0;
const FL_VERSION_OFFSET: usize = FL_MAGIC_OFFSET + 8;
const FL_BYTES_OFFSET: usize = FL_VERSION_OFFSET + 2;
const FL_RESERVED_OFFSET: usize = FL_BYTES_OFFSET + 2;
const FL_JOURNAL_ID_OFFSET: usize = FL_RESERVED_OFFSET + 4;
const FL_INDEX_OFFSET: usize = FL_JOURNAL_ID_OFFSET + 16;
const FL_SEQ_OFFSET: usize = FL_INDEX_OFFSET + 8;
const FL_CREATED_MS_OFFSET: usize = FL_SEQ_OFFSET + 8;
const FL_RESERVED2_OFFSET: usize = FL_CREATED_MS_OFFSET + 8;
const FL_CRC_OFFSET: usize = FL_RESERVED2_OFFSET + 4;
const _: () = assert!(FL_CRC_OFFSET + 4 == FLOOR_BYTES);

/// Where compaction removed the journal's head up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Floor {
    #[serde(serialize_with = "hex_id")]
    pub journal_id: [u8; 16],
    /// The first segment kept: every segment with a lower index was removed.
    pub segment_index: u64,
    /// The `base_seq` of that segment: every record with a lower seq was removed.
    pub seq: u64,
    /// When the floor was written (informational).
    pub created_unix_ms: u64,
}

fn hex_id<S: serde::Serializer>(id: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&uuid::Uuid::from_bytes(*id).simple())
}

/// Why bytes are not a floor file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FloorError {
    #[error("floor file is {0} bytes, not 64")]
    Length(usize),
    #[error("bad magic")]
    BadMagic,
    #[error("checksum mismatch")]
    Checksum,
    #[error("unsupported floor version {0}")]
    UnsupportedVersion(u16),
    #[error("header length {0} is not 64")]
    BadHeaderBytes(u16),
    #[error("reserved bytes are not zero")]
    ReservedNonZero,
    #[error("segment index or seq out of range")]
    OutOfRange,
}

impl Floor {
    pub fn encode(&self) -> [u8; FLOOR_BYTES] {
        let mut b = [0u8; FLOOR_BYTES];
        b[FL_MAGIC_OFFSET..FL_MAGIC_OFFSET + 8].copy_from_slice(&FLOOR_MAGIC);
        b[FL_VERSION_OFFSET..FL_VERSION_OFFSET + 2].copy_from_slice(&FLOOR_VERSION.to_le_bytes());
        b[FL_BYTES_OFFSET..FL_BYTES_OFFSET + 2]
            .copy_from_slice(&(FLOOR_BYTES as u16).to_le_bytes());
        b[FL_JOURNAL_ID_OFFSET..FL_JOURNAL_ID_OFFSET + 16].copy_from_slice(&self.journal_id);
        b[FL_INDEX_OFFSET..FL_INDEX_OFFSET + 8].copy_from_slice(&self.segment_index.to_le_bytes());
        b[FL_SEQ_OFFSET..FL_SEQ_OFFSET + 8].copy_from_slice(&self.seq.to_le_bytes());
        b[FL_CREATED_MS_OFFSET..FL_CREATED_MS_OFFSET + 8]
            .copy_from_slice(&self.created_unix_ms.to_le_bytes());
        let crc = format::masked_crc(&b[..FL_CRC_OFFSET]);
        b[FL_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a whole floor file, checking in the order journal-format.md lists. Total.
    pub fn decode(bytes: &[u8]) -> Result<Floor, FloorError> {
        if bytes.len() != FLOOR_BYTES {
            return Err(FloorError::Length(bytes.len()));
        }
        if bytes[FL_MAGIC_OFFSET..FL_MAGIC_OFFSET + 8] != FLOOR_MAGIC {
            return Err(FloorError::BadMagic);
        }
        if u32_at(bytes, FL_CRC_OFFSET) != format::masked_crc(&bytes[..FL_CRC_OFFSET]) {
            return Err(FloorError::Checksum);
        }
        let version = u16_at(bytes, FL_VERSION_OFFSET);
        if version != FLOOR_VERSION {
            return Err(FloorError::UnsupportedVersion(version));
        }
        let header_bytes = u16_at(bytes, FL_BYTES_OFFSET);
        if usize::from(header_bytes) != FLOOR_BYTES {
            return Err(FloorError::BadHeaderBytes(header_bytes));
        }
        if u32_at(bytes, FL_RESERVED_OFFSET) != 0 || u32_at(bytes, FL_RESERVED2_OFFSET) != 0 {
            return Err(FloorError::ReservedNonZero);
        }
        let mut journal_id = [0u8; 16];
        journal_id.copy_from_slice(&bytes[FL_JOURNAL_ID_OFFSET..FL_JOURNAL_ID_OFFSET + 16]);
        let segment_index = u64_at(bytes, FL_INDEX_OFFSET);
        let seq = u64_at(bytes, FL_SEQ_OFFSET);
        if segment_index > SEGMENT_INDEX_MAX || seq == 0 || seq > SEQ_MAX {
            return Err(FloorError::OutOfRange);
        }
        Ok(Floor {
            journal_id,
            segment_index,
            seq,
            created_unix_ms: u64_at(bytes, FL_CREATED_MS_OFFSET),
        })
    }
}

/// What the journal directory says about compaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FloorRead {
    /// No `FLOOR`: nothing was ever compacted.
    Absent,
    Good(Floor),
    /// A `FLOOR` that does not decode, with why: ignored (reported), so the head reads as a gap.
    Bad(String),
}

impl FloorRead {
    pub fn good(&self) -> Option<Floor> {
        match self {
            FloorRead::Good(f) => Some(*f),
            _ => None,
        }
    }
}

/// Reads `dir/FLOOR`. Only I/O errors other than a missing file are errors.
pub(crate) fn read_floor(dir: &Dir) -> std::io::Result<FloorRead> {
    let mut bytes = Vec::new();
    match dir.file(FLOOR_FILE, Access::Read) {
        Ok(file) => {
            // A floor is 64 bytes; read one more to tell a longer file apart, never more.
            std::io::Read::read_to_end(
                &mut std::io::Read::take(file, FLOOR_BYTES as u64 + 1),
                &mut bytes,
            )?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FloorRead::Absent),
        Err(e) => return Err(e),
    }
    Ok(match Floor::decode(&bytes) {
        Ok(floor) => FloorRead::Good(floor),
        Err(e) => FloorRead::Bad(e.to_string()),
    })
}

/// The floor recovery uses: a good `FLOOR` whose journal matches the first segment at or above
/// it that recovery could use (so a floor copied in from another journal is not obeyed).
pub(crate) fn floor_in_force(
    dir: &Dir,
    listed: &[(u64, PathBuf)],
) -> std::io::Result<(Option<Floor>, Option<String>)> {
    match read_floor(dir)? {
        FloorRead::Absent => Ok((None, None)),
        FloorRead::Bad(reason) => Ok((None, Some(reason))),
        FloorRead::Good(floor) => match first_header_from(dir, listed, floor.segment_index)? {
            Some(h) if h.journal_id != floor.journal_id => Ok((
                None,
                Some("FLOOR belongs to another journal than its segments".to_owned()),
            )),
            _ => Ok((Some(floor), None)),
        },
    }
}

/// The header of the first listed segment with index `>= from` whose header decodes and names
/// its own file: the segment recovery would take the journal's identity from.
pub(super) fn first_header_from(
    dir: &Dir,
    listed: &[(u64, PathBuf)],
    from: u64,
) -> std::io::Result<Option<SegmentHeader>> {
    for (index, path) in listed.iter().filter(|(i, _)| *i >= from) {
        if let Some(h) = read_header(dir, crate::root::dir::file_name(path))?
            && h.segment_index == *index
        {
            return Ok(Some(h));
        }
    }
    Ok(None)
}

/// The decoded header of a segment file; `None` when it does not decode or the file vanished.
pub(super) fn read_header(dir: &Dir, name: &str) -> std::io::Result<Option<SegmentHeader>> {
    use std::os::unix::fs::FileExt;
    let file = match dir.file(name, Access::Read) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = [0u8; SEGMENT_HEADER_BYTES];
    match file.read_exact_at(&mut bytes, 0) {
        Ok(()) => Ok(SegmentHeader::decode(&bytes).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// An event ID of a record that compaction may remove, kept so that a retry of it still finds
/// it: its record's seq and kind. (A snapshot keeps no more of where the record was: the
/// position of a removed record is its seq, with segment and offset 0.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetainedId {
    pub id: EventId,
    pub seq: u64,
    pub kind: u16,
}

impl RetainedId {
    /// Where the journal says the record is: its seq, segment and offset 0.
    pub fn position(&self) -> Position {
        Position {
            seq: self.seq,
            segment_index: 0,
            offset: 0,
        }
    }
}

/// What the layer above hands the journal at open.
#[derive(Debug, Clone, Default)]
pub struct Resume {
    /// Records with a seq at or below this are still checked but not handed to the visitor: a
    /// snapshot already holds what they did. A lasting writer indexes them; a brief one does not
    /// (their retry-able IDs are among `ids`). 0: hand out everything.
    pub after_seq: u64,
    /// IDs of records that may have been removed by compaction; the journal knows them as if it
    /// had scanned their records (a record still on disk under the same ID and seq is the same
    /// record, not a duplicate). In any order; the journal sorts them where they are (in
    /// ascending order by ID already, or in few ascending runs, that costs one pass).
    pub ids: Vec<RetainedId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floor() -> Floor {
        Floor {
            journal_id: *b"procjournal-test",
            segment_index: 7,
            seq: 1234,
            created_unix_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn a_floor_round_trips_and_every_byte_is_checked() {
        let f = floor();
        let bytes = f.encode();
        assert_eq!(Floor::decode(&bytes), Ok(f));
        assert_eq!(&bytes[..8], b"PJFLOOR\0");
        // Any single flipped bit is refused (the checksum covers every byte before it).
        for at in 0..FLOOR_BYTES {
            let mut b = bytes;
            b[at] ^= 0x10;
            assert!(Floor::decode(&b).is_err(), "flip at {at} accepted");
        }
        assert_eq!(Floor::decode(&bytes[..63]), Err(FloorError::Length(63)));
        assert_eq!(Floor::decode(&[0u8; 64]), Err(FloorError::BadMagic));
    }

    #[test]
    fn a_floor_out_of_range_does_not_decode() {
        for (index, seq) in [(0, 0), (SEGMENT_INDEX_MAX + 1, 1), (1, SEQ_MAX + 1)] {
            let f = Floor {
                segment_index: index,
                seq,
                ..floor()
            };
            assert_eq!(Floor::decode(&f.encode()), Err(FloorError::OutOfRange));
        }
    }
}
