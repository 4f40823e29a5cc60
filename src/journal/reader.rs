//! Read-only access to a journal, also while a writer in another process appends to it.
//!
//! Readers take no lock, never write, and read segment files with `pread` rather than through a
//! mapping: a writer may be storing into the bytes just past the last complete record, and a
//! reader must see those either as a whole valid record or as not yet there. Every record is
//! checked (both checksums, the expected seq and the chain) before it is handed out, so a reader
//! never returns a torn or stale record.
//!
//! Invariant of [`Follower`]: `(segment_index, offset, chain_crc, expected_seq)` always describe the
//! position just after the last record it handed out; it only moves forward.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::root::dir::{Access, Dir};

use serde::Serialize;

use super::format::{self, SegmentHeader};
use super::recovery::{self, RecoveryReport};
use super::{EventId, JournalError, Position};
use crate::limits::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::root::Root;

/// One record, borrowed from the reader's buffer.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    pub position: Position,
    pub event_id: EventId,
    pub kind: u16,
    pub codec_version: u8,
    pub payload: &'a [u8],
}

/// One record, owned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Record {
    pub position: Position,
    pub event_id: EventId,
    pub kind: u16,
    pub codec_version: u8,
    pub payload: Vec<u8>,
}

impl RecordView<'_> {
    pub fn to_owned(&self) -> Record {
        Record {
            position: self.position,
            event_id: self.event_id,
            kind: self.kind,
            codec_version: self.codec_version,
            payload: self.payload.to_vec(),
        }
    }
}

pub(crate) fn view<'a>(r: &recovery::RecordRef<'a>) -> RecordView<'a> {
    RecordView {
        position: Position {
            seq: r.header.seq,
            segment_index: r.segment_index,
            offset: r.offset,
        },
        event_id: EventId::from_bytes(r.header.event_id),
        kind: r.header.kind,
        codec_version: r.header.codec_version,
        payload: r.payload,
    }
}

/// A read-only handle on the journal of a runtime root.
#[derive(Debug)]
pub struct JournalReader {
    root: Root,
    /// The segments' directory, opened once (a symbolic link refused); read relative to it.
    held: Dir,
}

impl JournalReader {
    /// Opens the journal of `root` for reading. Fails if the root has no journal directory.
    pub fn open(root: &Path) -> Result<Self, JournalError> {
        let root = Root::open_reader(root)?;
        let dir = root.journal_dir();
        if !dir.is_dir() {
            return Err(JournalError::Io {
                dir,
                op: "open journal",
                cause: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no journal directory under this root",
                ),
            });
        }
        let held = Dir::reader(&dir).map_err(JournalError::io(dir, "open journal"))?;
        Ok(JournalReader { root, held })
    }

    pub fn dir(&self) -> PathBuf {
        self.root.journal_dir()
    }

    fn io(&self, op: &'static str) -> impl FnOnce(std::io::Error) -> JournalError + use<> {
        JournalError::io(self.dir(), op)
    }

    /// The absolute runtime root.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Scans the whole journal, calling `visit` for each valid record with `seq >= from_seq` in
    /// order, and returns what a recovery would find (a read-only scan repairs nothing, so torn
    /// tails are reported with `zeroed: false`). Duplicate event IDs are not looked for here; see
    /// [`JournalReader::verify`].
    pub fn scan(
        &self,
        from_seq: u64,
        mut visit: impl FnMut(RecordView<'_>),
    ) -> Result<RecoveryReport, JournalError> {
        Ok(self.scan_inner(from_seq, &mut visit)?.report)
    }

    fn scan_inner(
        &self,
        from_seq: u64,
        visit: &mut impl FnMut(RecordView<'_>),
    ) -> Result<recovery::JournalScan, JournalError> {
        let dir = self.dir();
        recovery::scan_journal(&self.held, recovery::Reading::Copied, |r| {
            if r.header.seq >= from_seq {
                visit(view(&r));
            }
        })
        .map_err(|cause| JournalError::Io {
            dir,
            op: "scan segments",
            cause,
        })
    }

    /// The full check `procjournal journal verify` runs: a scan plus the search for duplicate
    /// event IDs, which [`JournalReader::scan`] leaves out because it needs memory per record.
    pub fn verify(&self) -> Result<RecoveryReport, JournalError> {
        self.verify_with(|_| {})
    }

    /// [`JournalReader::verify`], showing each valid record to `visit` (for progress).
    pub fn verify_with(
        &self,
        mut visit: impl FnMut(&RecordView<'_>),
    ) -> Result<RecoveryReport, JournalError> {
        // The same index the journal keeps, so that verify and open find the same duplicates.
        let mut ids = super::idindex::IdIndex::default();
        let mut index_full = false;
        let mut duplicates = Vec::new();
        let mut report = self.scan(1, |r| {
            visit(&r);
            match ids.insert(r.event_id.as_bytes(), r.position, r.kind) {
                Ok(None) => {}
                Ok(Some((first, _))) => duplicates.push(recovery::DuplicateId {
                    event_id: r.event_id.to_string(),
                    first_seq: first.seq,
                    duplicate_seq: r.position.seq,
                }),
                Err(super::idindex::IndexFull) => index_full = true,
            }
        })?;
        if index_full {
            return Err(JournalError::TooManyRecords {
                max: super::idindex::IdIndex::CAPACITY,
            });
        }
        report.duplicate_ids = duplicates;
        Ok(report)
    }

    /// All valid records with `seq >= from_seq`, owned, and the report.
    pub fn records(&self, from_seq: u64) -> Result<(Vec<Record>, RecoveryReport), JournalError> {
        let mut out = Vec::new();
        let report = self.scan(from_seq, |r| out.push(r.to_owned()))?;
        Ok((out, report))
    }

    /// Hands every record from `from_seq` to `visit`, then returns a [`Follower`] positioned after
    /// the last of them, to pick up records that a live writer appends later.
    pub fn follow(
        &self,
        from_seq: u64,
        mut visit: impl FnMut(RecordView<'_>),
    ) -> Result<(Follower, RecoveryReport), JournalError> {
        let scan = self.scan_inner(from_seq, &mut visit)?;
        let follower = match scan.segments.last() {
            Some(s) => Follower {
                dir: self.held.try_clone().map_err(self.io("open journal"))?,
                segment: Some(s.header),
                offset: s.end_offset,
                chain_crc: s.chain_crc,
                expected_seq: s.last_seq.map_or(s.header.base_seq, |q| q + 1),
                last_seq: scan.last_seq,
                from_seq,
                journal_id: scan.journal_id,
                buf: Vec::new(),
            },
            None => Follower {
                dir: self.held.try_clone().map_err(self.io("open journal"))?,
                segment: None,
                offset: 0,
                chain_crc: 0,
                expected_seq: 1,
                last_seq: 0,
                from_seq,
                journal_id: scan.journal_id,
                buf: Vec::new(),
            },
        };
        Ok((follower, scan.report))
    }
}

/// Bytes a follower reads per `pread` when looking for new records.
const FOLLOW_READ_BYTES: usize = 256 * 1024;

/// Picks up records appended after a scan. Call [`Follower::poll`] repeatedly.
#[derive(Debug)]
pub struct Follower {
    dir: Dir,
    segment: Option<SegmentHeader>,
    offset: usize,
    chain_crc: u32,
    expected_seq: u64,
    /// The highest seq of any record accepted so far (0 before the first): a later segment is
    /// usable only if its base seq is above it, the scan's own rule.
    last_seq: u64,
    from_seq: u64,
    journal_id: Option<[u8; 16]>,
    buf: Vec<u8>,
}

impl Follower {
    fn io(&self, op: &'static str) -> impl FnOnce(std::io::Error) -> JournalError + use<> {
        JournalError::io(self.dir.path().to_owned(), op)
    }

    fn open_segment(&self, index: u64) -> Option<(File, SegmentHeader)> {
        let name = recovery::segment_file_name(index);
        let file = self.dir.file(&name, Access::Read).ok()?;
        let mut bytes = [0u8; SEGMENT_HEADER_BYTES];
        file.read_exact_at(&mut bytes, 0).ok()?;
        let header = SegmentHeader::decode(&bytes).ok()?;
        // A file longer than its header says is a bad segment to the scan; skip it here too.
        let len = file.metadata().ok()?.len();
        (header.segment_index == index && len <= u64::from(header.segment_bytes))
            .then_some((file, header))
    }

    /// The first usable segment after `after` (any index when `None`): the smallest index whose
    /// header decodes, belongs to this journal and does not go back in sequence. Segments that
    /// a scan would report as bad are skipped here too, so a follower is never stuck behind one.
    fn next_segment(&self, after: Option<u64>) -> Result<Option<SegmentHeader>, JournalError> {
        let (listed, _, _) =
            recovery::list_segments(&self.dir).map_err(self.io("list segments"))?;
        for (index, _) in listed {
            if after.is_some_and(|a| index <= a) {
                continue;
            }
            let Some((file, header)) = self.open_segment(index) else {
                continue;
            };
            let len = file.metadata().map_err(self.io("stat segment"))?.len();
            let rejection =
                recovery::segment_rejection(&header, index, len, self.journal_id, self.last_seq);
            if rejection.is_none() {
                return Ok(Some(header));
            }
        }
        Ok(None)
    }

    /// Hands out every complete, valid record appended since the last call; returns how many.
    /// Stops at the first bytes that are not (yet) a valid continuation.
    pub fn poll(&mut self, mut visit: impl FnMut(RecordView<'_>)) -> Result<usize, JournalError> {
        let mut handed = 0;
        loop {
            let Some(header) = self.segment else {
                match self.next_segment(None)? {
                    Some(h) => {
                        self.enter(h);
                        continue;
                    }
                    None => return Ok(handed),
                }
            };
            let Some((file, _)) = self.open_segment(header.segment_index) else {
                // Removed under the follower by compaction: the records it has not handed out
                // yet are gone, which it must say rather than wait for them forever.
                let floor = super::floor::read_floor(&self.dir)
                    .map_err(self.io("read floor"))?
                    .good();
                if let Some(floor) = floor.filter(|f| f.segment_index > header.segment_index) {
                    return Err(JournalError::Compacted {
                        from_seq: self.expected_seq,
                        floor_seq: floor.seq,
                    });
                }
                return Ok(handed);
            };
            handed += self.read_from(&file, &header, &mut visit)?;
            // The writer starts a later segment only after this one is complete: once one
            // exists, one more read of this segment (after the check) sees everything it will
            // ever hold.
            match self.next_segment(Some(header.segment_index))? {
                Some(next) => {
                    handed += self.read_from(&file, &header, &mut visit)?;
                    handed += self.past_damage(&file, &header, &mut visit)?;
                    self.enter(next);
                }
                None => return Ok(handed),
            }
        }
    }

    /// Before leaving a sealed segment: if the read stopped at bytes that are not the zero tail,
    /// they are damage, not a record in flight (the writer has moved on). Hand out what a full
    /// scan finds after them, exactly as [`JournalReader::scan`] would, so that a follower and a
    /// scan never disagree.
    fn past_damage(
        &mut self,
        file: &File,
        header: &SegmentHeader,
        visit: &mut impl FnMut(RecordView<'_>),
    ) -> Result<usize, JournalError> {
        let mut bytes = vec![0u8; header.segment_bytes as usize];
        let got = read_full_at(file, &mut bytes, 0).map_err(self.io("read segment"))?;
        bytes.truncate(got);
        bytes.resize(header.segment_bytes as usize, 0);
        if bytes[self.offset.min(bytes.len())..]
            .iter()
            .all(|&b| b == 0)
        {
            return Ok(0);
        }
        let (mut handed, mut expected, from_seq) = (0, self.expected_seq, self.from_seq);
        let mut last = self.last_seq;
        let commit = recovery::CommitPoint::read(&bytes, header);
        recovery::scan_segment(&bytes, header, commit.as_ref(), 0, |r| {
            if r.header.seq >= expected {
                expected = r.header.seq + 1;
                last = last.max(r.header.seq);
                if r.header.seq >= from_seq {
                    visit(view(&r));
                    handed += 1;
                }
            }
        });
        self.expected_seq = expected;
        self.last_seq = last;
        Ok(handed)
    }

    fn enter(&mut self, header: SegmentHeader) {
        self.journal_id.get_or_insert(header.journal_id);
        self.segment = Some(header);
        self.offset = header.records_offset();
        self.chain_crc = header.crc();
        self.expected_seq = header.base_seq;
    }

    /// Reads records of `header`'s segment from `self.offset` on, handing out each valid one.
    fn read_from(
        &mut self,
        file: &File,
        header: &SegmentHeader,
        visit: &mut impl FnMut(RecordView<'_>),
    ) -> Result<usize, JournalError> {
        let segment_bytes = header.segment_bytes as usize;
        let mut handed = 0;
        loop {
            if self.offset + RECORD_HEADER_BYTES > segment_bytes {
                return Ok(handed);
            }
            let want = FOLLOW_READ_BYTES.min(segment_bytes - self.offset);
            self.fill(file, want)?;
            let mut at = 0;
            let mut stop = false;
            while self.buf.len() - at >= RECORD_HEADER_BYTES {
                let Ok(h) = format::decode_record_header_unbounded(&self.buf[at..]) else {
                    stop = true;
                    break;
                };
                let len = format::record_bytes(h.payload_bytes as usize);
                if self.offset + at + len > segment_bytes {
                    stop = true;
                    break;
                }
                if len > self.buf.len() - at {
                    if at > 0 {
                        break; // re-read from this record's start
                    }
                    self.fill(file, len)?;
                    if self.buf.len() < len {
                        stop = true;
                        break;
                    }
                }
                let Ok((h, payload)) = format::decode_record(&self.buf[at..at + len]) else {
                    stop = true;
                    break;
                };
                if h.seq != self.expected_seq || h.prev_crc != self.chain_crc {
                    stop = true;
                    break;
                }
                if h.seq >= self.from_seq {
                    visit(RecordView {
                        position: Position {
                            seq: h.seq,
                            segment_index: header.segment_index,
                            offset: (self.offset + at) as u64,
                        },
                        event_id: EventId::from_bytes(h.event_id),
                        kind: h.kind,
                        codec_version: h.codec_version,
                        payload,
                    });
                    handed += 1;
                }
                self.expected_seq = h.seq + 1;
                self.last_seq = self.last_seq.max(h.seq);
                self.chain_crc = h.header_crc;
                at += len;
            }
            self.offset += at;
            if stop || at == 0 {
                return Ok(handed);
            }
        }
    }

    fn fill(&mut self, file: &File, len: usize) -> Result<(), JournalError> {
        self.buf.resize(len, 0);
        let got = read_full_at(file, &mut self.buf, self.offset as u64)
            .map_err(self.io("read segment"))?;
        self.buf.truncate(got);
        Ok(())
    }
}

/// Fills `buf` from file offset `offset` until it is full or the file ends; how many bytes it
/// got (a file being cut or written under the reader may hold fewer than it did).
pub(crate) fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
