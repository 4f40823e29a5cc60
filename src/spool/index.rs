//! The cursor index of one spool segment: from a cursor to the file offset of the chunk that
//! holds it, so that a read loads only the chunks it returns (plus, at worst, a few KiB).
//!
//! Pure: no I/O. Entries describe *runs*: `count` chunks of `payload` bytes each, back to back from
//! `offset`. A run's chunks are located by arithmetic, exactly. Writers split appends into chunks
//! of [`super::CHUNK_SPLIT_BYTES`], so the chunks of large appends, and of appends of one size,
//! form long runs and the index of a segment stays a handful of entries. A chunk that extends no
//! run is *loose*: it gets an entry of its own only once it starts at least
//! [`INDEX_STRIDE_BYTES`] of file after the end of the last run; otherwise it is found by walking
//! from that run's end. So:
//!
//! - a cursor inside a run is located exactly, and a cursor elsewhere at most
//!   `INDEX_STRIDE_BYTES` plus one chunk of file before its own chunk;
//! - the chunk holding any cursor ends no later than the next entry's offset, which bounds what a
//!   read must load on the far side too;
//! - entries start at least `INDEX_STRIDE_BYTES` of file apart, so there is at most one per
//!   `INDEX_STRIDE_BYTES` of file (24 bytes of memory per 4 KiB at worst), and never more entries
//!   than chunks; the one exception is the first chunk after damaged bytes (recovery found
//!   them, see `scan_segment`), which always gets an entry of its own, so that no read walks
//!   through the damage to reach it.
//!
//! Invariants (checked by the unit tests and, end to end, by the spool's model proptest): entries
//! are in increasing cursor and offset order; every entry starts at a chunk; `count >= 1`.

use super::format::chunk_bytes;

/// A loose chunk gets its own entry once it starts this many bytes of file after the end of the
/// last run. Together with the writers' split this bounds what a read loads beyond the chunks it
/// returns.
pub const INDEX_STRIDE_BYTES: u64 = 4 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    cursor: u64,
    offset: u64,
    payload: u32,
    count: u32,
}

impl Run {
    fn frame(&self) -> u64 {
        chunk_bytes(self.payload as usize) as u64
    }
    /// File offset and cursor just after the run's last chunk.
    fn end(&self) -> (u64, u64) {
        (
            self.offset + u64::from(self.count) * self.frame(),
            self.cursor + u64::from(self.count) * u64::from(self.payload),
        )
    }
    /// Offset and cursor of the run's chunk that holds `cursor`, if one does.
    fn chunk_of(&self, cursor: u64) -> Option<(u64, u64)> {
        let k = cursor.checked_sub(self.cursor)? / u64::from(self.payload);
        (k < u64::from(self.count)).then(|| {
            (
                self.offset + k * self.frame(),
                self.cursor + k * u64::from(self.payload),
            )
        })
    }
}

/// The index of one segment; see the module documentation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentIndex {
    runs: Vec<Run>,
    /// Set when building the index of a sealed segment stopped before the cursors the segment
    /// should hold ended: the cursor after its last readable chunk, and why it stopped there
    /// (`None`: the file ended).
    pub stopped: Option<(u64, Option<String>)>,
}

impl SegmentIndex {
    /// Records the chunk at file `offset` holding `payload` bytes from `cursor`. Chunks are pushed
    /// in file order, each right after the previous one.
    pub fn push(&mut self, offset: u64, cursor: u64, payload: u32) {
        debug_assert!(payload > 0);
        if let Some(last) = self.runs.last_mut() {
            let (end_offset, end_cursor) = last.end();
            debug_assert!(offset >= end_offset && cursor >= end_cursor);
            if offset == end_offset && payload == last.payload && last.count < u32::MAX {
                last.count += 1;
                return;
            }
            if offset - end_offset < INDEX_STRIDE_BYTES {
                // Loose: found by walking from the run's end.
                return;
            }
        }
        self.runs.push(Run {
            cursor,
            offset,
            payload,
            count: 1,
        });
    }

    /// Records a chunk as [`SegmentIndex::push`] does, but always as an entry of its own: for the
    /// first chunk after damaged bytes, which a walk from an earlier entry could not get past.
    pub fn push_entry(&mut self, offset: u64, cursor: u64, payload: u32) {
        debug_assert!(payload > 0);
        debug_assert!(self.runs.last().is_none_or(|r| {
            let (end_offset, end_cursor) = r.end();
            offset >= end_offset && cursor >= end_cursor
        }));
        self.runs.push(Run {
            cursor,
            offset,
            payload,
            count: 1,
        });
    }

    /// Number of entries.
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.runs.len()
    }

    /// Where to start walking to reach `cursor`: the offset and cursor of a chunk at or before the
    /// one holding it (that very chunk when `cursor` is inside a run). `start` is the segment's
    /// first chunk, used before any entry.
    pub fn locate(&self, cursor: u64, start: (u64, u64)) -> (u64, u64) {
        match self.runs.partition_point(|r| r.cursor <= cursor) {
            0 => start,
            n => {
                let run = &self.runs[n - 1];
                run.chunk_of(cursor).unwrap_or_else(|| run.end())
            }
        }
    }

    /// Where reads can resume when the chunk holding `cursor` is damaged: the next chunk, when
    /// `cursor` is inside a run (its header was valid, so only its payload can be bad); else the
    /// next entry, which is the first chunk after damaged bytes when those are what the index
    /// stopped at (that chunk always has an entry of its own), and otherwise at most
    /// `INDEX_STRIDE_BYTES` and a chunk of file later. `None` past the last entry.
    pub fn resume_after(&self, cursor: u64) -> Option<u64> {
        let n = self.runs.partition_point(|r| r.cursor <= cursor);
        if let Some(run) = n.checked_sub(1).map(|i| &self.runs[i])
            && let Some((_, chunk)) = run.chunk_of(cursor)
        {
            return Some(chunk + u64::from(run.payload));
        }
        self.runs.get(n).map(|r| r.cursor)
    }

    /// A file offset at or after the end of the chunk holding `cursor`: that chunk's exact end
    /// when it is in a run, else the next entry's offset, else `segment_end`.
    pub fn chunk_end_bound(&self, cursor: u64, segment_end: u64) -> u64 {
        let n = self.runs.partition_point(|r| r.cursor <= cursor);
        if let Some(run) = n.checked_sub(1).map(|i| &self.runs[i])
            && let Some((offset, _)) = run.chunk_of(cursor)
        {
            return (offset + run.frame()).min(segment_end);
        }
        self.runs
            .get(n)
            .map_or(segment_end, |r| r.offset.min(segment_end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::format::SPOOL_HEADER_BYTES;

    const H: u64 = SPOOL_HEADER_BYTES as u64;

    /// Pushes chunks of the given payload sizes from the segment start; returns (offset, cursor,
    /// payload) of each.
    fn build(sizes: &[u32]) -> (SegmentIndex, Vec<(u64, u64, u32)>) {
        let mut index = SegmentIndex::default();
        let mut chunks = Vec::new();
        let (mut offset, mut cursor) = (H, 1000);
        for &p in sizes {
            index.push(offset, cursor, p);
            chunks.push((offset, cursor, p));
            offset += chunk_bytes(p as usize) as u64;
            cursor += u64::from(p);
        }
        (index, chunks)
    }

    /// For every cursor of every chunk: `locate` returns a chunk start at or before the chunk
    /// holding it, no more than a stride and a chunk before it; `chunk_end_bound` is at or after
    /// that chunk's end and no further than a stride and a chunk beyond it.
    fn check(sizes: &[u32]) {
        let (index, chunks) = build(sizes);
        let end = chunks
            .last()
            .map_or(H, |&(o, _, p)| o + chunk_bytes(p as usize) as u64);
        let largest = sizes
            .iter()
            .map(|&p| chunk_bytes(p as usize) as u64)
            .max()
            .unwrap_or(0);
        for &(offset, cursor, p) in &chunks {
            let chunk_end = offset + chunk_bytes(p as usize) as u64;
            for c in [cursor, cursor + u64::from(p) / 2, cursor + u64::from(p) - 1] {
                let (at, at_cursor) = index.locate(c, (H, 1000));
                assert!(
                    chunks.iter().any(|x| (x.0, x.1) == (at, at_cursor)),
                    "locate({c}) = {at} is no chunk start"
                );
                assert!(
                    at <= offset && at_cursor <= c,
                    "locate({c}) = {at} is past its chunk"
                );
                assert!(
                    offset - at < INDEX_STRIDE_BYTES + largest,
                    "locate({c}) = {at}, {} bytes before its chunk",
                    offset - at
                );
                let bound = index.chunk_end_bound(c, end);
                assert!(bound >= chunk_end && bound <= end, "bound({c}) = {bound}");
                assert!(bound - chunk_end < INDEX_STRIDE_BYTES + largest);
            }
        }
        assert!(index.entries() <= chunks.len());
        assert!(index.entries() as u64 <= (end - H) / INDEX_STRIDE_BYTES + 1);
    }

    #[test]
    fn runs_of_equal_chunks_are_one_entry_and_located_exactly() {
        let sizes = vec![4096; 2000];
        let (index, chunks) = build(&sizes);
        assert_eq!(index.entries(), 1);
        for &(offset, cursor, _) in chunks.iter().step_by(97) {
            assert_eq!(index.locate(cursor + 5, (H, 1000)), (offset, cursor));
        }
        check(&sizes);
    }

    #[test]
    fn mixed_and_small_chunks_stay_within_a_stride() {
        check(&[]);
        check(&[1]);
        check(&[7; 3000]);
        check(&[100, 4096, 4096, 4096, 100, 4096, 1, 2, 3, 4096]);
        let mut sizes = Vec::new();
        for i in 0..3000u32 {
            sizes.push(1 + (i * 7919) % 4096);
        }
        check(&sizes);
        // A larger split, as older writers used: 64 KiB chunks with remainders.
        check(&[65536, 65536, 34464, 65536, 34464, 65536, 65536, 12, 65536]);
    }

    proptest::proptest! {
        #[test]
        fn any_chunk_sequence(sizes in proptest::collection::vec(
            proptest::prop_oneof![1u32..64, 1u32..5000, proptest::strategy::Just(4096u32)],
            0..400,
        )) {
            check(&sizes);
        }
    }
}
