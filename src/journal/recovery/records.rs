//! The scan of one segment's records: rows A, B, H and the torn-tail candidates C-G of the
//! decision table in the parent module.
//!
//! Invariants: pure over the bytes it is given; records reach the visitor in file order, each
//! once; a resync never looks past the confirmed commit point, so bytes that were never
//! acknowledged end the records instead of being reported as damage.

use super::{CommitPoint, DamagedRange, RecordRef, Row, all_zero};
use crate::journal::format::{self, RecordHeader, SegmentHeader};
use crate::limits::RECORD_ALIGN_BYTES;

pub(crate) struct SegmentOutcome {
    pub end_offset: usize,
    pub chain_crc: u32,
    pub last_seq: Option<u64>,
    pub records: u64,
    pub damaged: Vec<DamagedRange>,
    pub trailing: Option<(usize, usize, Row)>,
}

/// Scans the records of one segment whose header has been checked. `bytes` is the whole file
/// (possibly shorter than the header's size after outside damage) or, on the fast path of a
/// sealed or closed segment, its bytes up to the commit point's end offset. `commit` is the
/// segment's commit point (`None` for version 1). Pure.
///
/// Past the confirmed commit point, the first bytes that are not a valid continuation end the
/// segment's records: what follows was never acknowledged, so no resync looks past it (an
/// unacknowledged record that reached the disk before an earlier one is dropped with the tail,
/// not reported as damage). At or before it, damage is resynced over and reported (row H).
pub(crate) fn scan_segment(
    bytes: &[u8],
    header: &SegmentHeader,
    commit: Option<&CommitPoint>,
    prior_seq: u64,
    mut visit: impl FnMut(RecordRef<'_>),
) -> SegmentOutcome {
    let bytes = &bytes[..bytes.len().min(header.segment_bytes as usize)];
    let mut scan = SegmentScan::new(header);
    while scan.at < bytes.len() {
        match scan.continuation(&bytes[scan.at..]) {
            Ok((h, payload)) => scan.accept(&h, payload, &mut visit),
            Err(row) => {
                if all_zero(&bytes[scan.at..]) {
                    break; // row B
                }
                match scan.resync_point(bytes, commit) {
                    Some((next, next_header)) => {
                        scan.skip_damage(row, next, next_header.seq, prior_seq);
                    }
                    None => {
                        scan.trailing = Some((scan.at, last_nonzero_end(bytes, scan.at), row));
                        break;
                    }
                }
            }
        }
    }
    scan.outcome(bytes.len())
}

/// Where the scan of one segment stands: after the last accepted record (or the header).
struct SegmentScan<'a> {
    header: &'a SegmentHeader,
    at: usize,
    chain_crc: u32,
    expected_seq: u64,
    last_seq: Option<u64>,
    records: u64,
    damaged: Vec<DamagedRange>,
    trailing: Option<(usize, usize, Row)>,
    /// The last step skipped damage: the next valid record is accepted whatever its chain.
    resynced: bool,
}

impl<'a> SegmentScan<'a> {
    fn new(header: &'a SegmentHeader) -> Self {
        SegmentScan {
            header,
            at: header.records_offset(),
            chain_crc: header.crc(),
            expected_seq: header.base_seq,
            last_seq: None,
            records: 0,
            damaged: Vec::new(),
            trailing: None,
            resynced: false,
        }
    }

    /// The record at the start of `bytes` if it continues the chain, else the row saying why
    /// not.
    fn continuation<'b>(&self, bytes: &'b [u8]) -> Result<(RecordHeader, &'b [u8]), Row> {
        match format::decode_record(bytes) {
            Ok((h, payload))
                if self.resynced
                    || (h.seq == self.expected_seq && h.prev_crc == self.chain_crc) =>
            {
                Ok((h, payload))
            }
            Ok(_) => Err(Row::Stale),
            Err(e) => Err(Row::from_frame(e)),
        }
    }

    fn accept(&mut self, h: &RecordHeader, payload: &[u8], visit: &mut impl FnMut(RecordRef<'_>)) {
        self.resynced = false;
        visit(RecordRef {
            header: h,
            payload,
            segment_index: self.header.segment_index,
            offset: self.at as u64,
        });
        self.records += 1;
        self.last_seq = Some(h.seq);
        self.expected_seq = h.seq.wrapping_add(1);
        self.chain_crc = h.header_crc;
        self.at += format::record_bytes(h.payload_bytes as usize);
    }

    /// The next valid record past the bad bytes at `at`, unless those bytes are past the
    /// confirmed commit point.
    fn resync_point(
        &self,
        bytes: &[u8],
        commit: Option<&CommitPoint>,
    ) -> Option<(usize, RecordHeader)> {
        let unacknowledged = commit.is_some_and(|c| self.expected_seq > c.confirmed);
        let above = self
            .last_seq
            .unwrap_or(self.header.base_seq.saturating_sub(1));
        resync(bytes, self.at + RECORD_ALIGN_BYTES, above).filter(|_| !unacknowledged)
    }

    /// Reports the bad bytes from `at` to `next` (row H) and resumes at `next`.
    fn skip_damage(&mut self, row: Row, next: usize, next_seq: u64, prior_seq: u64) {
        self.damaged.push(DamagedRange {
            segment_index: self.header.segment_index,
            start_offset: self.at as u64,
            end_offset: next as u64,
            row,
            last_good_seq: self.last_seq.unwrap_or(prior_seq),
            next_good_seq: Some(next_seq),
        });
        self.at = next;
        self.resynced = true;
    }

    fn outcome(self, len: usize) -> SegmentOutcome {
        SegmentOutcome {
            end_offset: self.at.min(len),
            chain_crc: self.chain_crc,
            last_seq: self.last_seq,
            records: self.records,
            damaged: self.damaged,
            trailing: self.trailing,
        }
    }
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
