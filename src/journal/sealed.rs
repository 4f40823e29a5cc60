//! Sealed runs of the event-ID index (`idindex.rs`): the entries of records in segments the
//! writer has left, sorted by ID into spill space (`crate::runs`), so that the index's table on
//! the heap holds the active segment's records and not every record since the last compaction.
//! A root that runs on for long appends a dozen records per process; in the table each cost
//! about 70 bytes of heap, and between two snapshots of a large root (a snapshot waits for the
//! journal to grow by its own size) they were most of what a finished process cost.
//!
//! Invariant: a value's order is its record's seq, so a compaction forgets whole runs below its
//! floor without reading them.

use super::Position;
use crate::runs::{RunValue, Runs};

/// Where a sealed ID's record is, and its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SealedAt {
    pub position: Position,
    pub kind: u16,
}

/// Bytes of one record: the ID, then seq, segment index and offset (little-endian), the kind,
/// zero padding to a power of two (records tile the spill's blocks).
pub(super) type SealedRuns = Runs<SealedAt, 64>;

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        v.copy_from_slice(s);
    }
    u64::from_le_bytes(v)
}

impl RunValue for SealedAt {
    fn put(&self, out: &mut [u8]) {
        let p = &self.position;
        let fields = [p.seq, p.segment_index, p.offset];
        for (at, v) in fields.iter().enumerate() {
            if let Some(b) = out.get_mut(at * 8..at * 8 + 8) {
                b.copy_from_slice(&v.to_le_bytes());
            }
        }
        if let Some(b) = out.get_mut(24..26) {
            b.copy_from_slice(&self.kind.to_le_bytes());
        }
    }

    fn take(b: &[u8]) -> Self {
        let kind = b
            .get(24..26)
            .map_or(0, |k| u16::from_le_bytes([k[0], k[1]]));
        SealedAt {
            position: Position {
                seq: u64_at(b, 0),
                segment_index: u64_at(b, 8),
                offset: u64_at(b, 16),
            },
            kind,
        }
    }

    fn order(&self) -> u64 {
        self.position.seq
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::spill::Spill;

    fn entry(k: u8, seq: u64) -> ([u8; 16], SealedAt) {
        let position = Position {
            seq,
            segment_index: seq / 3,
            offset: seq * 64,
        };
        let kind = u16::from(k);
        ([k; 16], SealedAt { position, kind })
    }

    proptest! {
        /// Runs find exactly their entries, however they were split into batches, and forget
        /// exactly those below a floor seq.
        #[test]
        fn runs_find_their_entries_and_forget_below_a_seq(
            a in proptest::collection::btree_map(any::<u8>(), 1u64..1000, 0..80),
            split in any::<u8>(),
            probe in any::<u8>(),
            floor in 0u64..1001,
        ) {
            let all: Vec<_> = a.iter().map(|(&k, &s)| entry(k, s)).collect();
            let (left, right): (Vec<_>, Vec<_>) = all.iter().partition(|e| e.0[0] < split);
            let mut runs = SealedRuns::default();
            runs.add(left.clone(), &mut Spill::default).unwrap();
            runs.add(right.clone(), &mut Spill::default).unwrap();
            prop_assert_eq!(runs.len(), all.len());
            let key = [probe; 16];
            let want = all.iter().find(|e| e.0 == key).map(|e| e.1);
            prop_assert_eq!(runs.get(&key), want);
            for (k, at) in &all {
                prop_assert_eq!(runs.get(k), Some(*at));
            }
            let (removed, refused) = runs.forget_below(floor, &mut Spill::default);
            prop_assert!(refused.is_empty());
            prop_assert_eq!(removed, all.iter().filter(|e| e.1.position.seq < floor).count());
            for (k, at) in &all {
                prop_assert_eq!(runs.get(k), (at.position.seq >= floor).then_some(*at));
            }
        }
    }
}
