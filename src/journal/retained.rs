//! The index's retained IDs (`idindex.rs`): one array sorted by ID, held on the heap as an open
//! hands it over, then, for a lasting writer (or a brief one holding more than
//! `RETAINED_HEAP_MAX`), moved into spill space (`crate::spill`), where its 32-byte records cost
//! the heap nothing. A writer of a large root retains about a dozen IDs per process it ever ran
//! (every step a retry could still name), so on the heap this array was a third of what a
//! finished process cost.
//!
//! Invariants: strictly ascending by ID, each ID once, in either form; a merge
//! ([`Retained::merged`]) keeps the lower seq of a key found in both sides. Lookups are rare:
//! the index asks only for an ID between the least and the greatest retained one, which a fresh
//! time-ordered ID never is.

use std::cmp::Ordering;

use super::floor::RetainedId;
use crate::journal::EventId;
use crate::spill::{Records, RecordsWriter, Spill, SpillError};

/// Bytes of one spilled record: the ID, its seq and kind (little-endian), zero padding.
const RECORD: usize = 32;

#[derive(Debug, Clone)]
pub(super) enum Retained {
    Heap(Vec<RetainedId>),
    Spilled(Records<RECORD>),
}

impl Default for Retained {
    fn default() -> Self {
        Retained::Heap(Vec::new())
    }
}

fn encode(r: &RetainedId) -> [u8; RECORD] {
    let mut out = [0u8; RECORD];
    out[..16].copy_from_slice(&r.id.as_bytes());
    out[16..24].copy_from_slice(&r.seq.to_le_bytes());
    out[24..26].copy_from_slice(&r.kind.to_le_bytes());
    out
}

fn decode(b: [u8; RECORD]) -> RetainedId {
    let (mut id, mut seq, mut kind) = ([0u8; 16], [0u8; 8], [0u8; 2]);
    id.copy_from_slice(&b[..16]);
    seq.copy_from_slice(&b[16..24]);
    kind.copy_from_slice(&b[24..26]);
    RetainedId {
        id: EventId::from_bytes(id),
        seq: u64::from_le_bytes(seq),
        kind: u16::from_le_bytes(kind),
    }
}

impl Retained {
    pub(super) fn len(&self) -> usize {
        match self {
            Retained::Heap(v) => v.len(),
            Retained::Spilled(r) => r.len(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th retained ID in ID order.
    pub(super) fn get(&self, i: usize) -> Option<RetainedId> {
        match self {
            Retained::Heap(v) => v.get(i).copied(),
            Retained::Spilled(r) => r.get(i).map(decode),
        }
    }

    /// The retained ID `key`, if held: a bisection, after a check of the array's bounds that
    /// settles every fresh ID.
    pub(super) fn find(&self, key: &[u8; 16]) -> Option<RetainedId> {
        let key_at = |i: usize| self.get(i).map(|r| r.id.as_bytes());
        let (first, last) = (key_at(0)?, key_at(self.len() - 1)?);
        if *key < first || *key > last {
            return None;
        }
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let r = self.get(mid)?;
            match r.id.as_bytes().cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Some(r),
            }
        }
        None
    }

    /// Moves a heap array into `spill` (empty); the heap array stays if the spill refuses it.
    pub(super) fn spill(&mut self, spill: Spill) -> Result<(), SpillError> {
        if let Retained::Heap(v) = self {
            let mut w = RecordsWriter::new(spill);
            for r in v.iter() {
                w.push(encode(r))?;
            }
            *self = Retained::Spilled(w.finish()?);
        }
        Ok(())
    }

    /// This array and `more` (ascending by ID, each ID once) as one, written into `spill`
    /// (empty); the lower seq stands for a key in both.
    pub(super) fn merged(&self, more: &[RetainedId], spill: Spill) -> Result<Self, SpillError> {
        let mut w = RecordsWriter::new(spill);
        let (mut i, mut j) = (0, 0);
        loop {
            let next = match (self.get(i), more.get(j)) {
                (Some(a), Some(b)) => match a.id.as_bytes().cmp(&b.id.as_bytes()) {
                    Ordering::Less => {
                        i += 1;
                        a
                    }
                    Ordering::Greater => {
                        j += 1;
                        *b
                    }
                    Ordering::Equal => {
                        (i, j) = (i + 1, j + 1);
                        if b.seq < a.seq { *b } else { a }
                    }
                },
                (Some(a), None) => {
                    i += 1;
                    a
                }
                (None, Some(b)) => {
                    j += 1;
                    *b
                }
                (None, None) => break,
            };
            w.push(encode(&next))?;
        }
        Ok(Retained::Spilled(w.finish()?))
    }

    /// Whether the array left the heap.
    #[cfg(any(test, feature = "test-support"))]
    pub(super) fn is_spilled_to_file(&self) -> bool {
        matches!(self, Retained::Spilled(r) if r.is_file())
    }

    /// Every retained ID, in ID order.
    pub(super) fn to_vec(&self) -> Vec<RetainedId> {
        (0..self.len()).filter_map(|i| self.get(i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// A spilled array answers as the heap one, and a merge as sorting both together and
        /// keeping each key's lowest seq.
        #[test]
        fn spilled_and_merged_agree_with_a_sorted_vec(
            a in proptest::collection::btree_map(any::<u8>(), 1u64..9, 0..60),
            b in proptest::collection::btree_map(any::<u8>(), 1u64..9, 0..60),
            probe in any::<u8>(),
        ) {
            let id = |k: u8, seq: u64| RetainedId {
                id: EventId::from_bytes([k; 16]),
                seq,
                kind: k as u16 + 1,
            };
            let left: Vec<_> = a.iter().map(|(&k, &s)| id(k, s)).collect();
            let right: Vec<_> = b.iter().map(|(&k, &s)| id(k, s)).collect();
            let heap = Retained::Heap(left.clone());
            let mut spilled = heap.clone();
            spilled.spill(Spill::default()).unwrap();
            prop_assert_eq!(spilled.to_vec(), left.clone());
            let key = [probe; 16];
            prop_assert_eq!(spilled.find(&key), heap.find(&key));
            prop_assert_eq!(heap.find(&key), left.iter().find(|r| r.id.as_bytes() == key).copied());
            let mut model = a.clone();
            for (k, s) in &b {
                model.entry(*k).and_modify(|m| *m = (*m).min(*s)).or_insert(*s);
            }
            let merged = spilled.merged(&right, Spill::default()).unwrap();
            let want: Vec<_> = model.iter().map(|(&k, &s)| id(k, s)).collect();
            prop_assert_eq!(merged.to_vec(), want);
        }
    }
}
