//! Recovery: reading every segment of a journal, deciding what each byte range is, and reporting it.
//!
//! Scanning is pure over the bytes of each segment and the decisions follow one labelled table,
//! [`Row`]. The bytes are read with `pread`, never through a mapping, except by a writer's open,
//! which holds the root's lock: it scans a sealed or cleanly closed segment's records, and any
//! whole segment it scans in full, through a read-only mapping ([`Reading::Mapped`]), the same
//! bytes without the copy. Writable opens then
//! *act* on the report (zero a torn tail); read-only opens only print it. Nothing here writes.
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
//! Before the first segment, "the previous last seq" is `FLOOR.seq - 1` when compaction left a
//! `journal/FLOOR` (see `floor.rs`), and 0 otherwise: a first segment whose base seq is above 1
//! is a gap (row J) unless a floor says its head was compacted away. Segments below the floor are
//! compaction leftovers, reported and never scanned.
//!
//! "A valid record after X" means a record whose header and payload checksums hold and whose seq is
//! above the last accepted seq, anywhere later in this segment or in any later segment. A torn tail
//! is therefore only ever the end of the written journal: a bad range with valid records after it is
//! never cut, whatever it looks like.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::root::dir::{Access, Dir};

use serde::Serialize;

use super::floor::Floor;
use super::format::{self, CommitSlot, FrameError, RecordHeader, SegmentHeader};
use crate::aligned::ReadBuf;
use crate::limits::SEGMENT_COUNT_MAX;

mod records;
pub(crate) use records::{SegmentOutcome, scan_segment};

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
    /// The seq of the last record accepted before the damage, in this segment or an earlier
    /// one (0 when none was).
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
    /// Records that a confirmed commit point says were durable but that the scan did not find:
    /// acknowledged records lost (damage).
    pub lost_acknowledged: Vec<CommitLoss>,
    /// Records that the last, unconfirmed commit point claims but that the scan did not find:
    /// what a power loss during the previous writer's last flush leaves (they were never
    /// acknowledged if that flush did not return). Their seqs are never used again.
    pub unconfirmed_commits: Vec<CommitLoss>,
    /// Segments whose commit area has no readable slot: what they claimed is unknown.
    pub damaged_commit_areas: Vec<String>,
    /// Successors that a sealed segment names and that no file holds.
    pub missing_segments: Vec<MissingSegment>,
    /// Where compaction removed the journal's head up to (`journal/FLOOR`): records below its
    /// seq were removed on purpose, so a first segment there is no gap.
    pub floor: Option<super::floor::Floor>,
    /// A `FLOOR` that could not be used, and why: ignored, so a removed head reads as a gap.
    pub bad_floor: Option<String>,
    /// Segment files below the floor: an interrupted compaction (never scanned; writable opens
    /// delete them).
    pub compacted_leftovers: Vec<String>,
    /// The least seq the next record appended to this journal may carry: above every seq that
    /// was ever acknowledged, whatever was lost since (a writable open may start higher, never
    /// below a segment's base seq).
    pub next_seq_floor: u64,
    /// Records a brief writer's open checked but did not index, their seqs at or below the
    /// snapshot it resumed from (journal-format.md, "What a brief writer's open does not index");
    /// counted in `records`. Always 0 for a reader's scan and a lasting writer's open.
    pub unindexed_records: u64,
}

/// Seqs a commit point claims that no record holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommitLoss {
    pub segment_index: u64,
    pub first_missing_seq: u64,
    pub claimed_seq: u64,
    pub confirmed_seq: u64,
}

/// A segment that a seal names as its successor, with no file under its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MissingSegment {
    pub segment_index: u64,
    pub base_seq: u64,
    pub segment_bytes: u32,
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
            && self.lost_acknowledged.is_empty()
            && self.unconfirmed_commits.is_empty()
            && self.damaged_commit_areas.is_empty()
            && self.missing_segments.is_empty()
            && self.bad_floor.is_none()
            && self.compacted_leftovers.is_empty()
    }

    /// True when the only findings are what a crash leaves and a writable open repairs.
    pub fn is_crash_residue_only(&self) -> bool {
        self.damaged.is_empty()
            && self.bad_segments.is_empty()
            && self.gaps.is_empty()
            && self.duplicate_ids.is_empty()
            && self.unrecognised_files.is_empty()
            && self.lost_acknowledged.is_empty()
            && self.damaged_commit_areas.is_empty()
            && self.missing_segments.is_empty()
            && self.bad_floor.is_none()
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
    /// The commit point of a version 2 segment.
    pub commit: Option<CommitPoint>,
}

impl ScannedSegment {
    /// Whether the seqs between this segment's last record and `next_base` are accounted for
    /// here: claimed by this segment's commit point (their loss is reported against this
    /// segment), or skipped by the recovery that sealed it.
    fn explains_gap_to(&self, next_base: u64) -> bool {
        self.commit.is_some_and(|c| {
            c.claimed + 1 >= next_base || c.seal().is_some_and(|s| s.next_base_seq == next_base)
        })
    }
}

pub(crate) struct JournalScan {
    pub report: RecoveryReport,
    pub segments: Vec<ScannedSegment>,
    pub journal_id: Option<[u8; 16]>,
    pub last_seq: u64,
    /// The least seq the next record may carry (also `report.next_seq_floor`).
    pub seq_floor: u64,
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
pub(crate) fn list_segments(dir: &Dir) -> std::io::Result<Listing> {
    let mut segments = Vec::new();
    let mut leftovers = Vec::new();
    let mut unrecognised = Vec::new();
    for name in dir.names()? {
        let Some(name) = name.to_str() else {
            unrecognised.push(name.to_string_lossy().into_owned());
            continue;
        };
        if let Some(index) = parse_segment_file_name(name) {
            segments.push((index, dir.join(name)));
        } else if name.ends_with(".log.tmp") || name == super::floor::FLOOR_TMP_FILE {
            leftovers.push(dir.join(name));
        } else if !is_spare_name(name) && name != super::floor::FLOOR_FILE {
            unrecognised.push(name.to_owned());
        }
    }
    // Byte order, as every list of the report: directory order differs between file systems.
    leftovers.sort();
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

pub(crate) use crate::root::dir::file_name as name_of;

/// Whether every byte is zero. An OR over each page, which the compiler vectorises, rather than a
/// byte-by-byte search: the preallocated tail of a segment is most of its bytes, all zero.
pub(crate) fn all_zero(bytes: &[u8]) -> bool {
    bytes
        .chunks(crate::limits::PAGE_BYTES)
        .all(|page| page.iter().fold(0u8, |acc, &b| acc | b) == 0)
}

/// What the commit area of a version 2 segment says (see journal-format.md, "Commit point").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CommitPoint {
    /// The valid slot with the highest generation, and which slot (0 or 1) holds it.
    pub newest: Option<(usize, CommitSlot)>,
    /// The highest seq any slot claims: every seq ever acknowledged in this segment is at most
    /// this. `base_seq - 1` when no slot claims anything.
    pub claimed: u64,
    /// The highest seq whose flush is known to have returned: records up to it were durable.
    pub confirmed: u64,
    /// Neither slot decodes (both non-zero): the claim is unknown.
    pub damaged: bool,
}

impl CommitPoint {
    /// Reads both slots of `bytes` (the start of the segment, at least the records offset long,
    /// zero-extended) for `header`. `None` for a version 1 segment.
    pub(crate) fn read(bytes: &[u8], header: &SegmentHeader) -> Option<CommitPoint> {
        if !header.has_commit_area() {
            return None;
        }
        let none = header.base_seq - 1;
        let slot = |i: usize| {
            let at = SegmentHeader::commit_slot_offset(i);
            bytes
                .get(at..)
                .map_or(Err(format::FrameError::Truncated), |b| {
                    CommitSlot::decode(b, header)
                })
        };
        let slots = [slot(0), slot(1)];
        let newest = (0..2)
            .filter_map(|i| match slots[i] {
                Ok(Some(s)) => Some((i, s)),
                _ => None,
            })
            .max_by_key(|(_, s)| s.generation);
        let Some((i, newest_slot)) = newest else {
            let damaged = slots.iter().all(Result::is_err);
            return Some(CommitPoint {
                newest: None,
                claimed: none,
                confirmed: none,
                damaged,
            });
        };
        // The writer writes a slot only after the flush of the other one returned, so the older
        // slot is confirmed; the newest is confirmed only when it is a seal (written after the
        // successor existed, which needed the flush before it), or when the other slot is torn
        // (then the torn one was the slot in flight).
        let confirmed = match slots[1 - i] {
            _ if newest_slot.sealed() => newest_slot.committed_seq,
            Err(_) => newest_slot.committed_seq,
            Ok(Some(older)) => older.committed_seq.min(newest_slot.committed_seq),
            Ok(None) => none,
        };
        Some(CommitPoint {
            newest,
            claimed: newest_slot.committed_seq,
            confirmed,
            damaged: false,
        })
    }

    /// The seal of this segment, if its newest slot is one.
    pub(crate) fn seal(&self) -> Option<CommitSlot> {
        self.newest.map(|(_, s)| s).filter(CommitSlot::sealed)
    }

    /// A slot that a clean close wrote after its last flush.
    pub(crate) fn closed(&self) -> Option<CommitSlot> {
        self.newest.map(|(_, s)| s).filter(CommitSlot::closed)
    }
}

/// Why a segment whose header decoded is not usable (row I), or `None` when it is. The one
/// statement of the rule: recovery's scan and the follower both apply it, so they never disagree
/// about which segments exist. The checks run in this order; `journal_id` is the journal's
/// identity, taken from the first segment (in index order) whose header decodes and whose
/// index matches its name.
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
    if journal_id.is_some_and(|id| id != header.journal_id) {
        return Some("segment belongs to another journal".to_owned());
    }
    if header.base_seq <= last_seq {
        return Some(format!(
            "base seq {} does not follow the last seq {last_seq}",
            header.base_seq
        ));
    }
    if file_len > u64::from(header.segment_bytes) {
        return Some(format!(
            "file is {file_len} bytes, longer than its header's {}",
            header.segment_bytes
        ));
    }
    None
}

/// Reads up to `len` bytes of `file` from its start into `bytes` (replacing its contents).
fn read_prefix(file: &mut std::fs::File, len: u64, bytes: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::Read;
    bytes.clear();
    // Room for all of it first: `read_to_end` on a buffer without room starts with small
    // reads and grows by doubling (a dozen reads and reallocations for one segment).
    bytes.reserve(usize::try_from(len).unwrap_or(usize::MAX));
    std::io::Seek::rewind(file)?;
    file.take(len).read_to_end(bytes)?;
    Ok(())
}

impl SegmentBytes {
    /// The first `wanted` bytes of `file` (`wanted` at most its length): mapped, when this scan
    /// maps and they are more than the buffer holds already, else in the buffer (read into it
    /// when they are not there yet). A mapping that fails is not an error: the bytes are read.
    fn prefix(
        &mut self,
        file: &mut File,
        wanted: u64,
    ) -> std::io::Result<Option<super::mmap::Prefix>> {
        let len = usize::try_from(wanted).unwrap_or(usize::MAX);
        if len <= self.buf.len() {
            self.buf.truncate(len);
            return Ok(None);
        }
        if let Some(map) = self.mapped(file, len) {
            return Ok(Some(map));
        }
        read_prefix(file, wanted, &mut self.buf)?;
        Ok(None)
    }

    /// The whole segment for the full scan: mapped, when this scan maps and the file is whole;
    /// else read into the buffer, a short file as if extended with zeroes (what a writable open
    /// does to it: a record whose only missing bytes were zero padding is whole). The mapping
    /// spares the writer's open a copy of the whole segment into a buffer of that size (the
    /// active one, 4 MiB by default, which a brief writer's close leaves without a `CLOSED` claim
    /// and so without the fast path).
    fn whole(
        &mut self,
        file: &mut File,
        file_len: u64,
        header: &SegmentHeader,
    ) -> std::io::Result<Option<super::mmap::Prefix>> {
        let len = header.segment_bytes as usize;
        if file_len == len as u64
            && let Some(map) = self.mapped(file, len)
        {
            return Ok(Some(map));
        }
        read_prefix(file, len as u64, &mut self.buf)?;
        self.buf.resize(len, 0);
        Ok(None)
    }

    /// The first `len` bytes of `file` mapped, when this scan maps; `None` otherwise, or when
    /// the mapping fails, which is not an error: the caller reads the bytes instead.
    fn mapped(&self, file: &File, len: usize) -> Option<super::mmap::Prefix> {
        if self.reading != Reading::Mapped {
            return None;
        }
        super::mmap::Prefix::open(file, len)
            .inspect_err(|e| tracing::debug!(error = %e, "segment not mapped, read instead"))
            .ok()
    }
}

/// Whether every byte of `file` from `from` to `len` is zero, read with `pread` in blocks of at
/// most [`crate::limits::SCAN_BLOCK_BYTES`] into `buf`. Bytes a file shorter than `len` does not
/// have read as zero, as in the full scan, which zero-extends it.
fn zero_from(
    file: &std::fs::File,
    from: u64,
    len: u64,
    buf: &mut ReadBuf,
) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let block_bytes = crate::limits::SCAN_BLOCK_BYTES;
    let block = block_bytes.min(usize::try_from(len.saturating_sub(from)).unwrap_or(usize::MAX));
    let buf = buf.room(block);
    let mut at = from;
    while at < len {
        // To the next multiple of the block: every read but the first starts on a page, as
        // the buffer does, the fastest copy (`aligned`).
        let to_boundary = block_bytes - usize::try_from(at % block_bytes as u64).unwrap_or(0);
        let want = block
            .min(to_boundary)
            .min(usize::try_from(len - at).unwrap_or(usize::MAX));
        let read = match file.read_at(&mut buf[..want], at) {
            Ok(0) => break,
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if !all_zero(&buf[..read]) {
            return Ok(false);
        }
        at += read as u64;
    }
    Ok(true)
}

/// How a scan gets at a segment's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    /// Read with `pread` into a buffer of the scan's: any reader, with the root's lock or without.
    Copied,
    /// The records of a sealed or cleanly closed segment (the fast path, `read_to_commit`),
    /// and a whole segment the full scan reads, scanned through a read-only mapping of the file
    /// (`mmap::Prefix`); the rest (a short file, the blocks past a fast path's records) read as
    /// [`Reading::Copied`]. Only for the writer's open, which holds the root's lock, so that no
    /// procjournal process stores into a segment while its bytes are scanned in place. At a
    /// thousand finished processes a `run`'s open reads about 3 MB of segments: the copy and the
    /// faults of a buffer that size were about 5 % of its CPU.
    Mapped,
}

/// Reads and scans every segment of `dir` in order, calling `visit` for each accepted record, and
/// classifies trailing bad ranges as torn tails or damage. Read-only.
///
/// Two passes: each segment gets its own verdict in index order ([`Scan::segment`]), then what
/// only the whole sequence tells (which trailing ranges are torn tails, which claims were lost,
/// which sealed segments lost their successor) is settled over all of them.
pub(crate) fn scan_journal(
    dir: &Dir,
    reading: Reading,
    mut visit: impl FnMut(RecordRef<'_>),
) -> std::io::Result<JournalScan> {
    let (listed, leftovers, unrecognised_files) = list_segments(dir)?;
    let listed_indices: std::collections::BTreeSet<u64> = listed.iter().map(|(i, _)| *i).collect();
    let report = RecoveryReport {
        leftover_tmp_files: leftovers
            .iter()
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
            .collect(),
        unrecognised_files,
        ..RecoveryReport::default()
    };
    // Compaction removed every record below the floor on purpose: the expected seq starts there.
    let (floor, bad_floor) = super::floor::floor_in_force(dir, &listed)?;
    let mut scan = Scan::new(report, floor, reading);
    scan.report.bad_floor = bad_floor;
    for (index, path) in listed {
        scan.segment(dir, index, path, &mut visit)?;
    }
    let Scan {
        mut report,
        segments,
        journal_id,
        floor,
        last_seq,
        mut seq_floor,
        unreadable_tail_floor,
        ..
    } = scan;
    classify_tails(&mut report, &segments);
    seq_floor = seq_floor.max(lost_successors(&mut report, &segments, &listed_indices));
    if let Some(floor) = unreadable_tail_floor {
        seq_floor = seq_floor.max(floor);
    }
    report
        .damaged
        .sort_by_key(|d| (d.segment_index, d.start_offset));
    report.segments = segments.len() as u64;
    report.last_seq = (last_seq > 0).then_some(last_seq);
    report.next_seq_floor = seq_floor;
    report.floor = floor;
    Ok(JournalScan {
        report,
        segments,
        journal_id,
        last_seq,
        seq_floor,
    })
}

/// What the scan knows after the segments it has read, in index order.
struct Scan {
    report: RecoveryReport,
    segments: Vec<ScannedSegment>,
    journal_id: Option<[u8; 16]>,
    floor: Option<Floor>,
    last_seq: u64,
    /// The least seq the next record may carry: above every seq that any commit point claims,
    /// and above every seq that a segment now lost or unreadable could have held.
    seq_floor: u64,
    /// What an unreadable segment after the last usable one could have held; a usable segment
    /// after it bounds its seqs instead.
    unreadable_tail_floor: Option<u64>,
    bytes: SegmentBytes,
}

/// Where a segment's bytes are read to.
struct SegmentBytes {
    /// One buffer for every segment: reusing its pages avoids a fresh allocation (and page
    /// faults) of a whole segment per file.
    buf: Vec<u8>,
    /// What `zero_from` reads into: on a cache line, where the kernel's copy out of the page
    /// cache was several times as fast (`aligned`).
    zeros: ReadBuf,
    reading: Reading,
}

impl Scan {
    fn new(report: RecoveryReport, floor: Option<Floor>, reading: Reading) -> Scan {
        let last_seq = floor.map_or(0, |f| f.seq - 1);
        Scan {
            report,
            segments: Vec::new(),
            journal_id: None,
            floor,
            last_seq,
            seq_floor: last_seq + 1,
            unreadable_tail_floor: None,
            bytes: SegmentBytes {
                buf: Vec::new(),
                zeros: ReadBuf::new(),
                reading,
            },
        }
    }

    /// Reads segment `index` at `path`: its verdict (compacted, vanished, bad, or usable with
    /// its records), and what it bounds of the next seq.
    fn segment(
        &mut self,
        dir: &Dir,
        index: u64,
        path: PathBuf,
        visit: &mut impl FnMut(RecordRef<'_>),
    ) -> std::io::Result<()> {
        let file_name = segment_file_name(index);
        if self.floor.is_some_and(|f| index < f.segment_index) {
            self.report.compacted_leftovers.push(file_name);
            return Ok(());
        }
        let Some(mut file) = self.open(dir, index, &path)? else {
            return Ok(());
        };
        let file_len = file.metadata()?.len();
        read_prefix(
            &mut file,
            crate::limits::PAGE_BYTES as u64,
            &mut self.bytes.buf,
        )?;
        // Whatever this segment held, the next record must not reuse its seqs: a segment that
        // cannot be read could have held as many records as the largest segment holds.
        let unreadable_floor = self.last_seq
            + 1
            + SegmentHeader::record_capacity(crate::limits::SEGMENT_BYTES_MAX as u64);
        let header = match SegmentHeader::decode(&self.bytes.buf) {
            Ok(h) => h,
            Err(e) => {
                self.bad(file_name, format!("segment header: {e}"), unreadable_floor);
                return Ok(());
            }
        };
        if header.segment_index == index {
            self.journal_id.get_or_insert(header.journal_id);
        }
        let rejection = segment_rejection(&header, index, file_len, self.journal_id, self.last_seq);
        if let Some(reason) = rejection {
            self.bad(file_name, reason, unreadable_floor);
            return Ok(());
        }
        self.unreadable_tail_floor = None;
        if file_len < u64::from(header.segment_bytes) {
            self.report.short_segments.push(file_name.clone());
        }
        let (outcome, commit) = read_records(
            &mut file,
            file_len,
            &header,
            &mut self.bytes,
            self.last_seq,
            visit,
        )?;
        self.account(file_name, path, header, file_len, outcome, commit);
        Ok(())
    }

    /// The segment's file, or `None` when it vanished below a newer floor: a read-only scan
    /// races a writer's compaction, which removes segments on purpose (anything else that
    /// vanished is an error).
    fn open(&mut self, dir: &Dir, index: u64, path: &Path) -> std::io::Result<Option<File>> {
        match dir.file(name_of(path), Access::Read) {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match super::floor::read_floor(dir)?.good() {
                    Some(f) if index < f.segment_index => {
                        self.last_seq = self.last_seq.max(f.seq - 1);
                        self.seq_floor = self.seq_floor.max(f.seq);
                        self.floor = Some(f);
                        Ok(None)
                    }
                    _ => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn bad(&mut self, file_name: String, reason: String, unreadable_floor: u64) {
        self.report
            .bad_segments
            .push(BadSegment { file_name, reason });
        self.unreadable_tail_floor.get_or_insert(unreadable_floor);
    }

    /// Counts a usable segment's records, gaps, damage and commit claims into the report and
    /// the next seq's floor.
    fn account(
        &mut self,
        file_name: String,
        path: PathBuf,
        header: SegmentHeader,
        file_len: u64,
        outcome: SegmentOutcome,
        commit: Option<CommitPoint>,
    ) {
        let previous = self.segments.last();
        if let Some(first) = outcome.last_seq.map(|_| header.base_seq)
            && first > self.last_seq + 1
            && !previous.is_some_and(|p| p.explains_gap_to(first))
        {
            self.report.gaps.push(SeqGap {
                after_seq: self.last_seq,
                next_seq: first,
            });
        }
        self.report.damaged.extend(outcome.damaged);
        self.report.records += outcome.records;
        if let Some(seq) = outcome.last_seq {
            self.last_seq = seq;
        }
        if let Some(c) = &commit {
            self.seq_floor = self.seq_floor.max(c.claimed + 1);
            if c.damaged {
                self.report.damaged_commit_areas.push(file_name);
                let capacity = SegmentHeader::record_capacity(u64::from(header.segment_bytes));
                self.seq_floor = self.seq_floor.max(header.base_seq + capacity);
            }
            if let Some(seal) = c.seal() {
                self.seq_floor = self.seq_floor.max(seal.next_base_seq);
            }
        }
        self.seq_floor = self.seq_floor.max(self.last_seq + 1);
        self.segments.push(ScannedSegment {
            path,
            header,
            end_offset: outcome.end_offset,
            chain_crc: outcome.chain_crc,
            last_seq: outcome.last_seq,
            records: outcome.records,
            file_len,
            trailing: outcome.trailing,
            commit,
        });
    }
}

/// Reads the records of a segment whose header was accepted, with its commit point: only as
/// far as a sealed or closed commit point names (the fast path), or to a window past an
/// ordinary one (the near path), when that is provably all there is; else the whole file.
fn read_records(
    file: &mut File,
    file_len: u64,
    header: &SegmentHeader,
    source: &mut SegmentBytes,
    last_seq: u64,
    visit: &mut impl FnMut(RecordRef<'_>),
) -> std::io::Result<(SegmentOutcome, Option<CommitPoint>)> {
    let bytes = &mut source.buf;
    if bytes.len() < header.records_offset() {
        bytes.resize(header.records_offset(), 0);
    }
    let mut commit = CommitPoint::read(bytes, header);
    // A file cut inside its commit area lost what the slots claimed (a newer slot may be the
    // one cut): the claim is unknown.
    let commit_area_cut = file_len < header.records_offset() as u64;
    // Records the fast or near path handed out: the same bytes give the same first records, so
    // a fall back to the full scan skips exactly these.
    let mut visited = 0u64;
    if !commit_area_cut
        && let Some(c) = &commit
        && let Some(outcome) =
            read_to_commit(file, file_len, header, c, source, last_seq, &mut |r| {
                visited += 1;
                visit(r);
            })?
    {
        return Ok((outcome, commit));
    }
    let mapped = source.whole(file, file_len, header)?;
    let bytes: &[u8] = match &mapped {
        Some(map) => map.bytes(),
        None => &source.buf,
    };
    commit = CommitPoint::read(bytes, header);
    if commit_area_cut && let Some(c) = commit.as_mut() {
        c.damaged = true;
    }
    let mut seen = 0u64;
    let outcome = scan_segment(bytes, header, commit.as_ref(), last_seq, |r| {
        seen += 1;
        if seen > visited {
            visit(r);
        }
    });
    Ok((outcome, commit))
}

/// The fast path: a sealed segment whose records run exactly to the end its commit point
/// names is read only that far (restore reads the records, not the preallocated zeroes).
/// A cleanly closed segment's claim does not bound what is past it: a later writer may have
/// resumed appending to it and lost power before its first commit replaced the `CLOSED` claim,
/// leaving unflushed bytes anywhere past the claimed end (a lost first page does not hide a kept
/// later one). So the rest of its file is read too, but only checked to be zero, in blocks: if
/// it is, the full scan would find exactly what the fast path found (the same records, then
/// zeroes to the end); if not, the full scan runs and finds those bytes, so that they are cut
/// before new records are written among them.
///
/// The near path, for a segment whose newest slot is an ordinary commit (the active segment a
/// brief writer's close or a crash left): it is read to a window of
/// [`crate::limits::SCAN_BLOCK_BYTES`] past that commit's end, which holds what was appended
/// after the commit (a brief writer's bookkeeping), and the rest is checked to be zero the same
/// way, rather than mapped and read in place (mapping a mostly empty segment of a few MiB cost
/// more than reading its zeroes). Taken when the records end inside the window (the scan stops
/// on zeroes alone, so zeroes follow them to its end) and every byte after it is zero: the full
/// scan then reads the same records and then zeroes to the end.
///
/// Either way, `None` when anything is unexpected (damage, a torn tail, records that do not end
/// where they must, a byte that is not zero), for the whole file to be read instead.
fn read_to_commit(
    file: &mut File,
    file_len: u64,
    header: &SegmentHeader,
    commit: &CommitPoint,
    source: &mut SegmentBytes,
    last_seq: u64,
    visit: &mut impl FnMut(RecordRef<'_>),
) -> std::io::Result<Option<SegmentOutcome>> {
    let Some((_, slot)) = commit.newest else {
        return Ok(None);
    };
    let fast = slot.sealed() || slot.closed();
    #[cfg(test)]
    if !fast && !NEAR_PATH.with(std::cell::Cell::get) {
        return Ok(None);
    }
    if u64::from(slot.end_offset) > file_len {
        return Ok(None);
    }
    // The fast path looks one record header past the end (the next record's place must be
    // empty), the near path a window past it.
    let past = if fast {
        crate::limits::RECORD_HEADER_BYTES
    } else {
        crate::limits::SCAN_BLOCK_BYTES
    };
    // Small segments' records are often all in the page read already.
    let wanted = (u64::from(slot.end_offset) + past as u64)
        .min(u64::from(header.segment_bytes))
        .min(file_len);
    let outcome = match source.prefix(file, wanted)? {
        Some(map) => scan_segment(map.bytes(), header, Some(commit), last_seq, visit),
        None => scan_segment(&source.buf, header, Some(commit), last_seq, visit),
    };
    let ended = if fast {
        outcome.end_offset == slot.end_offset as usize
            && outcome.last_seq.unwrap_or(header.base_seq - 1) == slot.committed_seq
    } else {
        (outcome.end_offset as u64) < wanted
    };
    let whole = ended
        && outcome.damaged.is_empty()
        && outcome.trailing.is_none()
        && (slot.sealed() || zero_from(file, wanted, file_len, &mut source.zeros)?);
    #[cfg(test)]
    NEAR_TAKEN.with(|n| n.set(n.get() + usize::from(whole && !fast)));
    Ok(whole.then_some(outcome))
}

#[cfg(test)]
thread_local! {
    /// Whether this thread's scans may take the near path: tests turn it off to get the full
    /// scan's findings to compare with.
    pub(crate) static NEAR_PATH: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
    /// How many segments this thread's scans read by the near path.
    pub(crate) static NEAR_TAKEN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A trailing bad range is a torn tail only if no later segment holds a record (row H
/// otherwise), and only if it lies past the confirmed commit point; a claim past the records
/// found is a loss, acknowledged or not.
fn classify_tails(report: &mut RecoveryReport, segments: &[ScannedSegment]) {
    let mut records_after = false;
    for segment in segments.iter().rev() {
        let first_missing = segment.last_seq.map_or(segment.header.base_seq, |q| q + 1);
        if let Some((start, end, row)) = segment.trailing {
            let acknowledged = segment.commit.is_some_and(|c| first_missing <= c.confirmed);
            let segment_index = segment.header.segment_index;
            let (start_offset, end_offset) = (start as u64, end as u64);
            if records_after || acknowledged {
                report.damaged.push(DamagedRange {
                    segment_index,
                    start_offset,
                    end_offset,
                    row,
                    last_good_seq: first_missing - 1,
                    next_good_seq: None,
                });
            } else {
                report.torn_tails.push(TornTail {
                    segment_index,
                    start_offset,
                    end_offset,
                    row,
                    zeroed: false,
                });
            }
        }
        // A damaged commit area (a file cut inside it, say) is reported as such, once: what its
        // surviving slot claims is not the claim (the slot cut may have been newer), so the
        // records it names are not reported again as lost or unconfirmed.
        if let Some(c) = segment.commit
            && !c.damaged
            && first_missing <= c.claimed
        {
            let loss = CommitLoss {
                segment_index: segment.header.segment_index,
                first_missing_seq: first_missing,
                claimed_seq: c.claimed,
                confirmed_seq: c.confirmed,
            };
            if first_missing <= c.confirmed {
                report.lost_acknowledged.push(loss);
            } else {
                report.unconfirmed_commits.push(loss);
            }
        }
        records_after |= segment.records > 0;
    }
    report.torn_tails.reverse();
    report.lost_acknowledged.reverse();
    report.unconfirmed_commits.reverse();
}

/// A seal names a successor that existed: if no file bears the next index after a sealed
/// segment, the successor was lost with every record it held, wherever it stood (a later
/// segment, even an empty one made by a recovery, does not stand in for it). Returns the
/// least seq past everything the lost successors could have held.
fn lost_successors(
    report: &mut RecoveryReport,
    segments: &[ScannedSegment],
    listed: &std::collections::BTreeSet<u64>,
) -> u64 {
    let mut seq_floor = 0;
    for segment in segments {
        let Some(seal) = segment.commit.as_ref().and_then(CommitPoint::seal) else {
            continue;
        };
        let successor = segment.header.segment_index + 1;
        if listed.contains(&successor) {
            continue;
        }
        report.missing_segments.push(MissingSegment {
            segment_index: successor,
            base_seq: seal.next_base_seq,
            segment_bytes: seal.next_segment_bytes,
        });
        let capacity = SegmentHeader::record_capacity(u64::from(seal.next_segment_bytes));
        seq_floor = seq_floor.max(seal.next_base_seq + capacity);
    }
    seq_floor
}
