//! Recovery: reading every segment of a journal, deciding what each byte range is, and reporting it.
//!
//! Scanning is pure over the bytes of each segment (read with `pread`, never through a mapping) and
//! the decisions follow one labelled table, [`Row`]. Writable opens then *act* on the report (zero a
//! torn tail); read-only opens only print it. Nothing here writes.
//!
//! Decision table. At offset X of a segment, after the last accepted record (or the header):
//!
//! | row | what the scanner finds at X                                   | a valid record after X? | decision                                  |
//! |-----|---------------------------------------------------------------|-------------------------|-------------------------------------------|
//! | A   | a valid record with the expected seq and chain                | -                       | accept it, continue after it              |
//! | B   | zero bytes from X to the end of the segment                   | -                       | clean end of the segment                  |
//! | C   | a zero header, but non-zero bytes further on (`ZeroGap`)       | no                      | torn tail                                 |
//! | D   | a header whose checksum fails, or too few bytes (`Garbage`)   | no                      | torn tail                                 |
//! | E   | a valid header, payload checksum or padding wrong (`TornPayload`) | no                  | torn tail                                 |
//! | F   | a valid header whose length runs past the end (`LengthPastEnd`) | no                    | torn tail                                 |
//! | G   | valid checksums but a wrong seq or a broken chain (`Stale`)    | no                      | torn tail                                 |
//! | H   | any of C-G                                                    | yes                     | mid-log corruption: [X, Y) reported, resume at the next valid record Y; nothing is rewritten |
//! | I   | a segment header that does not decode, or belongs elsewhere    | -                       | bad segment: reported, skipped whole      |
//! | J   | a segment whose base seq is past the previous last seq + 1     | -                       | gap reported (records missing)            |
//!
//! "A valid record after X" means a record whose header and payload checksums hold and whose seq is
//! above the last accepted seq, anywhere later in this segment or in any later segment. A torn tail
//! is therefore only ever the end of the written journal: a bad range with valid records after it is
//! never cut, whatever it looks like.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::format::{self, FrameError, RecordHeader, SegmentHeader};
use crate::limits::{RECORD_ALIGN_BYTES, SEGMENT_COUNT_MAX, SEGMENT_HEADER_BYTES};

/// The rows C-G of the decision table: why a byte range is not a valid continuation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Row {
    /// C: an all-zero header with non-zero bytes further on.
    ZeroGap,
    /// D: a header that fails its checksum or other structural checks.
    Garbage,
    /// E: a trustworthy header whose payload checksum or padding fails.
    TornPayload,
    /// F: a trustworthy header whose length runs past the end of the segment.
    LengthPastEnd,
    /// G: a checksum-valid record with the wrong sequence number or a broken chain.
    Stale,
}

impl Row {
    fn from_frame(error: FrameError) -> Row {
        match error {
            FrameError::Zero => Row::ZeroGap,
            FrameError::PayloadChecksum | FrameError::PaddingNonZero => Row::TornPayload,
            FrameError::LengthPastEnd | FrameError::PayloadTooLarge(_) => Row::LengthPastEnd,
            FrameError::Truncated
            | FrameError::BadMagic
            | FrameError::UnsupportedVersion(_)
            | FrameError::BadHeaderBytes(_)
            | FrameError::BadSegmentBytes(_)
            | FrameError::HeaderChecksum
            | FrameError::KindZero
            | FrameError::ReservedNonZero
            | FrameError::OutOfRange => Row::Garbage,
        }
    }
}

/// A torn write at the end of the journal: bytes after the last valid record with nothing valid
/// after them. A writable open zeroes them; a read-only open leaves them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TornTail {
    pub segment_index: u64,
    pub start_offset: u64,
    /// One past the last non-zero byte of the range.
    pub end_offset: u64,
    pub row: Row,
    pub zeroed: bool,
}

/// A damaged range with valid records after it: reported, never rewritten.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DamagedRange {
    pub segment_index: u64,
    pub start_offset: u64,
    pub end_offset: u64,
    pub row: Row,
    /// The last record accepted before the damage (0 if none).
    pub last_good_seq: u64,
    /// The first record accepted after it, when it is in the same segment.
    pub next_good_seq: Option<u64>,
}

/// A segment that could not be used at all (row I).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadSegment {
    pub file_name: String,
    pub reason: String,
}

/// Sequence numbers that no segment holds (row J).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeqGap {
    pub after_seq: u64,
    pub next_seq: u64,
}

/// Two records on disk with the same event ID; the first one stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DuplicateId {
    pub event_id: String,
    pub first_seq: u64,
    pub duplicate_seq: u64,
}

/// What recovery found. Empty lists mean a clean journal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RecoveryReport {
    pub segments: u64,
    pub records: u64,
    pub last_seq: Option<u64>,
    pub torn_tails: Vec<TornTail>,
    pub damaged: Vec<DamagedRange>,
    pub bad_segments: Vec<BadSegment>,
    pub gaps: Vec<SeqGap>,
    pub duplicate_ids: Vec<DuplicateId>,
    /// Segment files found shorter than their header says (writable opens extend them with zeroes).
    pub short_segments: Vec<String>,
    /// Leftover `*.tmp` files of an interrupted segment creation (writable opens delete them).
    pub leftover_tmp_files: Vec<String>,
    /// Files in the journal directory that are none of a segment, a spare or a leftover of a
    /// segment creation (a copy, a stray file, a name that is not UTF-8): reported, never read
    /// and never removed.
    pub unrecognised_files: Vec<String>,
}

impl RecoveryReport {
    /// True when nothing at all was found: no torn tail, no damage, nothing skipped or missing.
    pub fn is_clean(&self) -> bool {
        self.torn_tails.is_empty()
            && self.damaged.is_empty()
            && self.bad_segments.is_empty()
            && self.gaps.is_empty()
            && self.duplicate_ids.is_empty()
            && self.short_segments.is_empty()
            && self.leftover_tmp_files.is_empty()
            && self.unrecognised_files.is_empty()
    }

    /// True when the only findings are what a crash leaves and a writable open repairs.
    pub fn is_crash_residue_only(&self) -> bool {
        self.damaged.is_empty()
            && self.bad_segments.is_empty()
            && self.gaps.is_empty()
            && self.duplicate_ids.is_empty()
            && self.unrecognised_files.is_empty()
    }
}

/// A record found by the scanner, handed to the caller's visitor.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    pub header: &'a RecordHeader,
    pub payload: &'a [u8],
    pub segment_index: u64,
    pub offset: u64,
}

/// What the scan learnt about one usable segment.
#[derive(Debug, Clone)]
pub(crate) struct ScannedSegment {
    pub path: PathBuf,
    pub header: SegmentHeader,
    /// Offset just past the last accepted record: where the next record goes.
    pub end_offset: usize,
    /// The chain value the next record must carry as `prev_crc`.
    pub chain_crc: u32,
    pub last_seq: Option<u64>,
    pub records: u64,
    pub file_len: u64,
    /// Bad bytes after `end_offset` with no valid record after them in this segment.
    pub trailing: Option<(usize, usize, Row)>,
}

pub(crate) struct JournalScan {
    pub report: RecoveryReport,
    pub segments: Vec<ScannedSegment>,
    pub journal_id: Option<[u8; 16]>,
    pub last_seq: u64,
}

/// `00000000000000000007.log` for segment 7.
pub(crate) fn segment_file_name(index: u64) -> String {
    format!("{index:020}.log")
}

fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Names past the index range are not segments procjournal could have written.
    digits
        .parse()
        .ok()
        .filter(|&index| index <= crate::limits::SEGMENT_INDEX_MAX)
}

/// The segment files of a directory in index order, leftover temporary files, and the names
/// of files that are neither (nor a spare).
pub(crate) type Listing = (Vec<(u64, PathBuf)>, Vec<PathBuf>, Vec<String>);

/// Whether `name` is a spare segment being (or done being) zero-filled: `{index:020}.spare`.
fn is_spare_name(name: &str) -> bool {
    name.strip_suffix(".spare")
        .is_some_and(|digits| digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// Segment files of `dir` in index order, leftover temporary files, and unrecognised files.
pub(crate) fn list_segments(dir: &Path) -> std::io::Result<Listing> {
    let mut segments = Vec::new();
    let mut leftovers = Vec::new();
    let mut unrecognised = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            unrecognised.push(name.to_string_lossy().into_owned());
            continue;
        };
        if let Some(index) = parse_segment_file_name(name) {
            segments.push((index, entry.path()));
        } else if name.ends_with(".log.tmp") {
            leftovers.push(entry.path());
        } else if !is_spare_name(name) {
            unrecognised.push(name.to_owned());
        }
    }
    unrecognised.sort();
    segments.sort();
    if segments.len() > SEGMENT_COUNT_MAX {
        return Err(std::io::Error::other(format!(
            "{} segments exceed the limit of {SEGMENT_COUNT_MAX}",
            segments.len()
        )));
    }
    Ok((segments, leftovers, unrecognised))
}

/// Finds the next offset after `from` holding a checksum-valid record with a seq above `above`.
fn resync(bytes: &[u8], from: usize, above: u64) -> Option<(usize, RecordHeader)> {
    let mut at = from.next_multiple_of(RECORD_ALIGN_BYTES);
    while at < bytes.len() {
        if let Ok((header, _)) = format::decode_record(&bytes[at..])
            && header.seq > above
        {
            return Some((at, header));
        }
        at += RECORD_ALIGN_BYTES;
    }
    None
}

fn last_nonzero_end(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(from, |p| from + p + 1)
}

pub(crate) struct SegmentOutcome {
    pub end_offset: usize,
    pub chain_crc: u32,
    pub last_seq: Option<u64>,
    pub records: u64,
    pub damaged: Vec<DamagedRange>,
    pub trailing: Option<(usize, usize, Row)>,
}

/// Scans the records of one segment whose header has been checked. `bytes` is the whole file
/// (possibly shorter than the header's size after outside damage). Pure.
pub(crate) fn scan_segment(
    bytes: &[u8],
    header: &SegmentHeader,
    mut visit: impl FnMut(RecordRef<'_>),
) -> SegmentOutcome {
    let bytes = &bytes[..bytes.len().min(header.segment_bytes as usize)];
    let mut at = SEGMENT_HEADER_BYTES;
    let mut chain_crc = header.crc();
    let mut expected_seq = header.base_seq;
    let mut last_seq: Option<u64> = None;
    let mut records = 0u64;
    let mut damaged = Vec::new();
    let mut trailing = None;
    let mut resynced = false;
    while at < bytes.len() {
        let verdict = match format::decode_record(&bytes[at..]) {
            Ok((h, payload)) if resynced || (h.seq == expected_seq && h.prev_crc == chain_crc) => {
                Ok((h, payload))
            }
            Ok(_) => Err(Row::Stale),
            Err(e) => Err(Row::from_frame(e)),
        };
        match verdict {
            Ok((h, payload)) => {
                resynced = false;
                visit(RecordRef {
                    header: &h,
                    payload,
                    segment_index: header.segment_index,
                    offset: at as u64,
                });
                records += 1;
                last_seq = Some(h.seq);
                expected_seq = h.seq.wrapping_add(1);
                chain_crc = h.header_crc;
                at += format::record_bytes(h.payload_bytes as usize);
            }
            Err(row) => {
                if bytes[at..].iter().all(|&b| b == 0) {
                    break; // row B
                }
                let above = last_seq.unwrap_or(header.base_seq.saturating_sub(1));
                match resync(bytes, at + RECORD_ALIGN_BYTES, above) {
                    Some((next, next_header)) => {
                        damaged.push(DamagedRange {
                            segment_index: header.segment_index,
                            start_offset: at as u64,
                            end_offset: next as u64,
                            row,
                            last_good_seq: last_seq.unwrap_or(0),
                            next_good_seq: Some(next_header.seq),
                        });
                        at = next;
                        resynced = true; // row H: accept the next valid record whatever its chain
                    }
                    None => {
                        trailing = Some((at, last_nonzero_end(bytes, at), row));
                        break;
                    }
                }
            }
        }
    }
    SegmentOutcome {
        end_offset: at.min(bytes.len()),
        chain_crc,
        last_seq,
        records,
        damaged,
        trailing,
    }
}

/// Why a segment whose header decoded is not usable (row I), or `None` when it is. The one
/// statement of the rule: recovery's scan and the follower both apply it, so they never disagree
/// about which segments exist.
pub(crate) fn segment_rejection(
    header: &SegmentHeader,
    index: u64,
    file_len: u64,
    journal_id: Option<[u8; 16]>,
    last_seq: u64,
) -> Option<String> {
    if header.segment_index != index {
        return Some(format!(
            "header names segment {}, file name says {index}",
            header.segment_index
        ));
    }
    if header.base_seq <= last_seq || header.base_seq == 0 {
        return Some(format!(
            "base seq {} does not follow the last seq {last_seq}",
            header.base_seq
        ));
    }
    // Only a segment that passed every other check may name the journal's identity.
    if journal_id.is_some_and(|id| id != header.journal_id) {
        return Some("segment belongs to another journal".to_owned());
    }
    if file_len > u64::from(header.segment_bytes) {
        return Some(format!(
            "file is {file_len} bytes, longer than its header's {}",
            header.segment_bytes
        ));
    }
    None
}

/// Reads and scans every segment of `dir` in order, calling `visit` for each accepted record, and
/// classifies trailing bad ranges as torn tails or damage. Read-only.
pub(crate) fn scan_journal(
    dir: &Path,
    mut visit: impl FnMut(RecordRef<'_>),
) -> std::io::Result<JournalScan> {
    let (listed, leftovers, unrecognised_files) = list_segments(dir)?;
    let mut report = RecoveryReport {
        leftover_tmp_files: leftovers
            .iter()
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
            .collect(),
        unrecognised_files,
        ..RecoveryReport::default()
    };
    let mut segments: Vec<ScannedSegment> = Vec::new();
    let mut journal_id: Option<[u8; 16]> = None;
    let mut last_seq = 0u64;
    let mut bytes = Vec::new();
    for (index, path) in listed {
        let file_name = segment_file_name(index);
        let bad = |reason: String| BadSegment {
            file_name: file_name.clone(),
            reason,
        };
        // One buffer for every segment: reusing its pages avoids a fresh allocation (and page
        // faults) of a whole segment per file.
        bytes.clear();
        std::io::Read::read_to_end(&mut std::fs::File::open(&path)?, &mut bytes)?;
        let file_len = bytes.len() as u64;
        let header = match SegmentHeader::decode(&bytes) {
            Ok(h) => h,
            Err(e) => {
                report
                    .bad_segments
                    .push(bad(format!("segment header: {e}")));
                continue;
            }
        };
        if let Some(reason) = segment_rejection(&header, index, file_len, journal_id, last_seq) {
            report.bad_segments.push(bad(reason));
            continue;
        }
        journal_id.get_or_insert(header.journal_id);
        if file_len < u64::from(header.segment_bytes) {
            // A short file reads as if extended with zeroes, which is what a writable open does
            // to it: a record whose only missing bytes were zero padding is still whole.
            report.short_segments.push(file_name.clone());
            bytes.resize(header.segment_bytes as usize, 0);
        }
        let outcome = scan_segment(&bytes, &header, &mut visit);
        if let Some(first) = outcome.last_seq.map(|_| header.base_seq)
            && first > last_seq + 1
        {
            report.gaps.push(SeqGap {
                after_seq: last_seq,
                next_seq: first,
            });
        }
        report.damaged.extend(outcome.damaged);
        report.records += outcome.records;
        if let Some(seq) = outcome.last_seq {
            last_seq = seq;
        }
        segments.push(ScannedSegment {
            path,
            header,
            end_offset: outcome.end_offset,
            chain_crc: outcome.chain_crc,
            last_seq: outcome.last_seq,
            records: outcome.records,
            file_len,
            trailing: outcome.trailing,
        });
    }
    // A trailing bad range is a torn tail only if no later segment holds a record (row H otherwise).
    let mut records_after = false;
    for segment in segments.iter().rev() {
        if let Some((start, end, row)) = segment.trailing {
            if records_after {
                report.damaged.push(DamagedRange {
                    segment_index: segment.header.segment_index,
                    start_offset: start as u64,
                    end_offset: end as u64,
                    row,
                    last_good_seq: segment.last_seq.unwrap_or(0),
                    next_good_seq: None,
                });
            } else {
                report.torn_tails.push(TornTail {
                    segment_index: segment.header.segment_index,
                    start_offset: start as u64,
                    end_offset: end as u64,
                    row,
                    zeroed: false,
                });
            }
        }
        records_after |= segment.records > 0;
    }
    report.torn_tails.reverse();
    report
        .damaged
        .sort_by_key(|d| (d.segment_index, d.start_offset));
    report.segments = segments.len() as u64;
    report.last_seq = (last_seq > 0).then_some(last_seq);
    Ok(JournalScan {
        report,
        segments,
        journal_id,
        last_seq,
    })
}
