//! The in-memory rolling buffer: the most recent output, served with exactly the spool's cursor
//! semantics so that polls of fresh output need no file I/O.
//!
//! Invariants: chunks are contiguous in cursor order; `start <= end`; the held bytes never exceed
//! `capacity_bytes` (the oldest chunks are dropped first; one chunk larger than the capacity is
//! kept only as its newest `capacity_bytes`).

use std::collections::VecDeque;

use super::format::Stream;
use super::{SpoolError, SpoolRead};

#[derive(Debug)]
pub struct RecentBuffer {
    capacity_bytes: usize,
    chunks: VecDeque<(Stream, u64, Vec<u8>)>,
    held_bytes: usize,
    /// Cursor of the first byte held.
    start: u64,
    /// Cursor after the last byte held.
    end: u64,
}

impl RecentBuffer {
    /// An empty buffer whose next byte will have cursor `at`.
    pub fn new(capacity_bytes: usize, at: u64) -> Self {
        RecentBuffer {
            capacity_bytes,
            chunks: VecDeque::new(),
            held_bytes: 0,
            start: at,
            end: at,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity_bytes
    }

    #[cfg(any(test, feature = "test-support"))]
    pub fn start(&self) -> u64 {
        self.start
    }

    pub fn end(&self) -> u64 {
        self.end
    }

    pub fn push(&mut self, stream: Stream, bytes: &[u8]) {
        let keep = &bytes[bytes.len().saturating_sub(self.capacity_bytes)..];
        let cursor = self.end + (bytes.len() - keep.len()) as u64;
        self.end += bytes.len() as u64;
        if keep.is_empty() {
            self.start = self.end;
            return;
        }
        if cursor > self.start + self.held_bytes as u64 {
            // A prefix of this chunk was cut off: nothing older is contiguous with it.
            self.chunks.clear();
            self.held_bytes = 0;
            self.start = cursor;
        }
        self.chunks.push_back((stream, cursor, keep.to_vec()));
        self.held_bytes += keep.len();
        while self.held_bytes > self.capacity_bytes {
            let Some((_, c, b)) = self.chunks.pop_front() else {
                break;
            };
            self.held_bytes -= b.len();
            self.start = c + b.len() as u64;
        }
    }

    /// Serves a read entirely from memory when `cursor` is inside the buffer; `None` when the
    /// caller must fall through to the spool. `retained_from` and `total_bytes` are the spool's.
    pub fn read(
        &self,
        cursor: u64,
        max_bytes: usize,
        retained_from: u64,
        total_bytes: u64,
    ) -> Option<Result<SpoolRead, SpoolError>> {
        if cursor > total_bytes {
            return Some(Err(SpoolError::CursorAhead {
                cursor,
                total_bytes,
            }));
        }
        let gap = cursor < retained_from;
        let from = cursor.max(retained_from);
        if from < self.start || total_bytes != self.end {
            return None;
        }
        let mut out = SpoolRead {
            next_cursor: from,
            retained_from,
            total_bytes,
            gap,
            // The spool reports the same hole for the same read (the buffer holds no lost
            // byte, so only retention can lie before bytes it holds).
            skipped: gap.then(|| {
                super::Skipped::gap(cursor, retained_from, super::LossReason::Retention, 0)
            }),
            ..SpoolRead::default()
        };
        for (stream, c, bytes) in &self.chunks {
            let chunk_end = c + bytes.len() as u64;
            if chunk_end <= from {
                continue;
            }
            if out.bytes.len() >= max_bytes {
                break;
            }
            let skip = from.saturating_sub(*c) as usize;
            let take = (bytes.len() - skip).min(max_bytes - out.bytes.len());
            out.push(*stream, c + skip as u64, &bytes[skip..skip + take]);
        }
        Some(Ok(out))
    }
}
