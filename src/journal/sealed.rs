//! Sealed runs of the event-ID index (`idindex.rs`): the entries of records in segments the
//! writer has left, sorted by ID into spill space (`crate::spill`), so that the index's table on
//! the heap holds the active segment's records and not every record since the last compaction.
//! A root that runs on for long appends a dozen records per process; in the table each cost
//! about 70 bytes of heap, and between two snapshots of a large root (a snapshot waits for the
//! journal to grow by its own size) they were most of what a finished process cost.
//!
//! Invariants: a run is strictly ascending by ID, each ID once; no ID is in two runs, or in a
//! run and the table (the index moves entries, never copies them); `first`, `last`, `min_seq`
//! and `max_seq` are those of its records, so that a lookup outside `first..=last` (every fresh
//! time-ordered ID) never reads the run; its Bloom filter holds every key it holds (it may hold
//! others), so that most lookups inside the range of an ID it does not hold never read it
//! either. Heap per run: the filter (1.25 bytes a key) and a few words.

use std::cmp::Ordering;

use super::Position;
use crate::spill::{Bloom, Records, RecordsWriter, Spill, SpillError};

/// Bytes of one record: the ID, then seq, segment index and offset (little-endian), the kind,
/// zero padding to a power of two (records tile the spill's blocks).
const RECORD: usize = 64;

/// One index entry: the ID, its record's position and kind.
pub(super) type Sealed = ([u8; 16], Position, u16);

#[derive(Debug, Clone)]
pub(super) struct Run {
    records: Records<RECORD>,
    bloom: Bloom,
    first: [u8; 16],
    last: [u8; 16],
    min_seq: u64,
    max_seq: u64,
}

fn encode((key, p, kind): &Sealed) -> [u8; RECORD] {
    let mut out = [0u8; RECORD];
    out[..16].copy_from_slice(key);
    out[16..24].copy_from_slice(&p.seq.to_le_bytes());
    out[24..32].copy_from_slice(&p.segment_index.to_le_bytes());
    out[32..40].copy_from_slice(&p.offset.to_le_bytes());
    out[40..42].copy_from_slice(&kind.to_le_bytes());
    out
}

fn decode(b: [u8; RECORD]) -> Sealed {
    let u64_at = |at: usize| {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(v)
    };
    let mut key = [0u8; 16];
    key.copy_from_slice(&b[..16]);
    let position = Position {
        seq: u64_at(16),
        segment_index: u64_at(24),
        offset: u64_at(32),
    };
    (key, position, u16::from_le_bytes([b[40], b[41]]))
}

impl Run {
    /// A run of `entries` (ascending by ID, each ID once; about `expected` of them) in `spill`
    /// (empty). `None` for no entries.
    pub(super) fn write(
        entries: impl IntoIterator<Item = Sealed>,
        expected: usize,
        spill: Spill,
    ) -> Result<Option<Run>, SpillError> {
        let mut w = RecordsWriter::new(spill);
        let mut bloom = Bloom::for_keys(expected);
        let mut bounds: Option<([u8; 16], [u8; 16], u64, u64)> = None;
        for e in entries {
            w.push(encode(&e))?;
            bloom.insert(&e.0);
            let (key, p, _) = e;
            bounds = Some(match bounds {
                None => (key, key, p.seq, p.seq),
                Some((first, _, lo, hi)) => (first, key, lo.min(p.seq), hi.max(p.seq)),
            });
        }
        let records = w.finish()?;
        Ok(bounds.map(|(first, last, min_seq, max_seq)| Run {
            records,
            bloom,
            first,
            last,
            min_seq,
            max_seq,
        }))
    }

    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    fn get(&self, i: usize) -> Option<Sealed> {
        self.records.get(i).map(decode)
    }

    /// Every entry, in ID order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Sealed> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The entry of `key`, if this run holds it.
    pub(super) fn find(&self, key: &[u8; 16]) -> Option<(Position, u16)> {
        if *key < self.first || *key > self.last || !self.bloom.may_hold(key) {
            return None;
        }
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, p, kind) = self.get(mid)?;
            match k.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Some((p, kind)),
            }
        }
        None
    }

    /// Whether every record of the run lies below `floor_seq`, or none does.
    pub(super) fn all_below(&self, floor_seq: u64) -> bool {
        self.max_seq < floor_seq
    }

    pub(super) fn none_below(&self, floor_seq: u64) -> bool {
        self.min_seq >= floor_seq
    }

    /// `a` and `b` (no ID in both) as one run, in `spill`.
    pub(super) fn merge(a: &Run, b: &Run, spill: Spill) -> Result<Option<Run>, SpillError> {
        let (mut x, mut y) = (a.iter().peekable(), b.iter().peekable());
        let merged = std::iter::from_fn(|| match (x.peek(), y.peek()) {
            (Some(l), Some(r)) if l.0 <= r.0 => x.next(),
            (Some(_), Some(_)) | (None, Some(_)) => y.next(),
            (Some(_), None) => x.next(),
            (None, None) => None,
        });
        Run::write(merged, a.len() + b.len(), spill)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn entry(k: u8, seq: u64) -> Sealed {
        let p = Position {
            seq,
            segment_index: seq / 3,
            offset: seq * 64,
        };
        ([k; 16], p, u16::from(k))
    }

    proptest! {
        /// A run finds exactly its entries, bounds and all; a merge holds both sides in order.
        #[test]
        fn runs_find_their_entries_and_merge_in_order(
            a in proptest::collection::btree_map(any::<u8>(), 1u64..1000, 0..80),
            split in any::<u8>(),
            probe in any::<u8>(),
        ) {
            let all: Vec<Sealed> = a.iter().map(|(&k, &s)| entry(k, s)).collect();
            let (left, right): (Vec<_>, Vec<_>) = all.iter().partition(|e| e.0[0] < split);
            let run = |v: &[Sealed]| Run::write(v.iter().copied(), v.len(), Spill::default()).unwrap();
            let (l, r) = (run(&left), run(&right));
            prop_assert_eq!(l.is_none(), left.is_empty());
            if let (Some(l), Some(r)) = (&l, &r) {
                let m = Run::merge(l, r, Spill::default()).unwrap().unwrap();
                prop_assert_eq!(m.iter().collect::<Vec<_>>(), all.clone());
                let key = [probe; 16];
                let want = all.iter().find(|e| e.0 == key).map(|e| (e.1, e.2));
                prop_assert_eq!(m.find(&key), want);
                prop_assert_eq!(l.find(&key).or(r.find(&key)), want);
                let seqs = all.iter().map(|e| e.1.seq);
                let (lo, hi) = (seqs.clone().min().unwrap(), seqs.max().unwrap());
                prop_assert!(m.all_below(hi + 1) && !m.all_below(hi));
                prop_assert!(m.none_below(lo) && !m.none_below(lo + 1));
            }
        }
    }
}
