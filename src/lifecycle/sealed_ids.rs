//! Sealed ID maps of the manifest store: 16-byte IDs (handles, reserved event IDs) mapped to a
//! 32-bit value (a position, a packed reservation), in sorted runs in spill space
//! (`crate::spill`), each with a Bloom filter on the heap. Both maps only ever grow and never
//! change an entry (a handle keeps its position, a reservation its step), so the store moves the
//! entries of older manifests here in batches and keeps only recent ones in its hash tables:
//! per manifest the heap then keeps its filter bits (1.25 bytes an ID), not a table entry.
//!
//! Invariants: each run is strictly ascending by ID; no ID is in two runs (the store seals each
//! entry once, and refuses a second handle or reservation of an ID before it is added); a run's
//! `first` and `last` bound its IDs and its filter holds every one of them, so a lookup outside
//! them, or refused by the filter, reads nothing of the spill. Runs merge while the newer holds
//! at least half as many as the one before it: about log2 of the entries' count of runs.

use std::cmp::Ordering;

use crate::spill::{Bloom, Records, RecordsWriter, Spill, SpillError};

/// Bytes of one record: the ID, the value (little-endian), zero padding to a power of two.
const RECORD: usize = 32;

#[derive(Debug, Clone)]
struct Run {
    records: Records<RECORD>,
    bloom: Bloom,
    first: [u8; 16],
    last: [u8; 16],
}

/// Sorted runs of (ID, value) (module doc).
#[derive(Debug, Clone, Default)]
pub(super) struct IdRuns {
    runs: Vec<Run>,
}

fn decode(b: [u8; RECORD]) -> ([u8; 16], u32) {
    let mut key = [0u8; 16];
    key.copy_from_slice(&b[..16]);
    (key, u32::from_le_bytes([b[16], b[17], b[18], b[19]]))
}

impl Run {
    fn write(
        entries: impl IntoIterator<Item = ([u8; 16], u32)>,
        expected: usize,
        spill: Spill,
    ) -> Result<Option<Run>, SpillError> {
        let mut w = RecordsWriter::new(spill);
        let mut bloom = Bloom::for_keys(expected);
        let mut bounds = None;
        for (key, value) in entries {
            let mut record = [0u8; RECORD];
            record[..16].copy_from_slice(&key);
            record[16..20].copy_from_slice(&value.to_le_bytes());
            w.push(record)?;
            bloom.insert(&key);
            bounds = Some(bounds.map_or((key, key), |(first, _)| (first, key)));
        }
        let records = w.finish()?;
        Ok(bounds.map(|(first, last)| Run {
            records,
            bloom,
            first,
            last,
        }))
    }

    fn len(&self) -> usize {
        self.records.len()
    }

    fn iter(&self) -> impl Iterator<Item = ([u8; 16], u32)> + '_ {
        (0..self.len()).filter_map(|i| self.records.get(i).map(decode))
    }

    fn get(&self, key: &[u8; 16]) -> Option<u32> {
        if *key < self.first || *key > self.last || !self.bloom.may_hold(key) {
            return None;
        }
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, value) = self.records.get(mid).map(decode)?;
            match k.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Some(value),
            }
        }
        None
    }

    fn merge(a: &Run, b: &Run, spill: Spill) -> Result<Option<Run>, SpillError> {
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

impl IdRuns {
    /// Entries held.
    #[cfg(any(test, feature = "test-support"))]
    pub(super) fn len(&self) -> usize {
        self.runs.iter().map(Run::len).sum()
    }

    /// The value of `key`, if held.
    pub(super) fn get(&self, key: &[u8; 16]) -> Option<u32> {
        self.runs.iter().rev().find_map(|run| run.get(key))
    }

    /// Adds `entries` (IDs none of the runs holds, each once) as a new run in a `spill`, then
    /// merges the newest runs (module doc). On a refused spill nothing was added, and the error
    /// says why.
    pub(super) fn add(
        &mut self,
        mut entries: Vec<([u8; 16], u32)>,
        spill: &mut dyn FnMut() -> Spill,
    ) -> Result<(), SpillError> {
        entries.sort_unstable_by_key(|e| e.0);
        let Some(run) = Run::write(entries.iter().copied(), entries.len(), spill())? else {
            return Ok(());
        };
        self.runs.push(run);
        while let [.., older, newer] = &self.runs[..]
            && newer.len() * 2 >= older.len()
        {
            let Ok(Some(merged)) = Run::merge(older, newer, spill()) else {
                break;
            };
            self.runs.truncate(self.runs.len() - 2);
            self.runs.push(merged);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Whatever batches the entries come in, every one is found with its value and no other
        /// ID is.
        #[test]
        fn batches_of_ids_are_found_as_a_map_finds_them(
            ids in proptest::collection::btree_map(any::<[u8; 2]>(), any::<u32>(), 0..400),
            cuts in proptest::collection::vec(0usize..400, 0..6),
            probes in proptest::collection::vec(any::<[u8; 2]>(), 0..50),
        ) {
            let key = |k: [u8; 2]| {
                let mut key = [k[0]; 16];
                key[15] = k[1];
                key
            };
            let all: Vec<_> = ids.iter().map(|(k, v)| (key(*k), *v)).collect();
            let mut cuts = cuts;
            cuts.push(0);
            cuts.push(all.len());
            cuts.sort_unstable();
            let mut runs = IdRuns::default();
            for w in cuts.windows(2) {
                let batch = all.get(w[0].min(all.len())..w[1].min(all.len())).unwrap_or_default();
                runs.add(batch.iter().rev().copied().collect(), &mut Spill::default).unwrap();
            }
            prop_assert_eq!(runs.len(), all.len());
            for (k, v) in &all {
                prop_assert_eq!(runs.get(k), Some(*v));
            }
            for p in probes {
                let want = ids.get(&p).copied();
                prop_assert_eq!(runs.get(&key(p)), want);
            }
        }
    }
}
