//! Sorted runs of 16-byte IDs, each with a fixed-size value, in spill space (`crate::spill`):
//! the form in which a long-running writer keeps an index that only grows and never changes an
//! entry (the journal's index of the segments it left, the store's handles and reservations),
//! so that the heap keeps a few words per run instead of a table entry per ID.
//!
//! A [`Runs`] is log-structured: each batch becomes a run, and the newest runs merge while the
//! newer holds at least half as many entries as the one before, so there are about log2 of the
//! entries' count of runs. A lookup reads a run only for an ID within its range that its
//! filter ([`Bloom`], in spill space beside it) lets through.
//!
//! Invariants: each run is strictly ascending by ID, each ID once, and no ID is in two runs
//! (callers add each ID once); `first` and `last` bound a run's IDs and `min_order` and
//! `max_order` its values' [`RunValue::order`]; its filter holds every ID it holds. A batch or a
//! merge the file system refuses changes nothing.

use std::cmp::Ordering;
use std::hash::BuildHasher;
use std::marker::PhantomData;

use crate::idhash::IdHashBuilder;
use crate::spill::{Records, RecordsWriter, Spill, SpillError};

/// A run's value: the bytes of a record after its ID, and an order a run keeps the bounds of
/// (the journal's seq, by which compaction forgets whole runs).
pub(crate) trait RunValue: Copy {
    /// Writes the value into `out` (the record after its 16-byte ID).
    fn put(&self, out: &mut [u8]);
    /// The value `put` wrote into `bytes`.
    fn take(bytes: &[u8]) -> Self;
    fn order(&self) -> u64;
}

impl RunValue for u32 {
    fn put(&self, out: &mut [u8]) {
        if let Some(b) = out.get_mut(..4) {
            b.copy_from_slice(&self.to_le_bytes());
        }
    }
    fn take(bytes: &[u8]) -> Self {
        let mut v = [0u8; 4];
        if let Some(b) = bytes.get(..4) {
            v.copy_from_slice(b);
        }
        u32::from_le_bytes(v)
    }
    fn order(&self) -> u64 {
        u64::from(*self)
    }
}

/// One sorted run of records of `N` bytes: the ID, then the value.
#[derive(Debug, Clone)]
struct Run<V, const N: usize> {
    records: Records<N>,
    bloom: Bloom,
    first: [u8; 16],
    last: [u8; 16],
    min_order: u64,
    max_order: u64,
    value: PhantomData<V>,
}

impl<V: RunValue, const N: usize> Run<V, N> {
    /// A run of `entries` (ascending by ID, each ID once; about `expected` of them) in a
    /// `spill`, and its filter in another. `None` for no entries.
    fn write(
        entries: impl IntoIterator<Item = ([u8; 16], V)>,
        expected: usize,
        spill: &mut dyn FnMut() -> Spill,
    ) -> Result<Option<Self>, SpillError> {
        let mut w = RecordsWriter::new(spill());
        let mut bloom = Bloom::for_keys(expected);
        let mut bounds: Option<([u8; 16], [u8; 16], u64, u64)> = None;
        for (key, value) in entries {
            let mut record = [0u8; N];
            record[..16].copy_from_slice(&key);
            value.put(&mut record[16..]);
            w.push(record)?;
            bloom.insert(&key);
            let o = value.order();
            bounds = Some(match bounds {
                None => (key, key, o, o),
                Some((first, _, lo, hi)) => (first, key, lo.min(o), hi.max(o)),
            });
        }
        let records = w.finish()?;
        bloom.spill(spill());
        Ok(bounds.map(|(first, last, min_order, max_order)| Run {
            records,
            bloom,
            first,
            last,
            min_order,
            max_order,
            value: PhantomData,
        }))
    }

    fn len(&self) -> usize {
        self.records.len()
    }

    fn entry(&self, i: usize) -> Option<([u8; 16], V)> {
        let r = self.records.get(i)?;
        let mut key = [0u8; 16];
        key.copy_from_slice(&r[..16]);
        Some((key, V::take(&r[16..])))
    }

    fn iter(&self) -> impl Iterator<Item = ([u8; 16], V)> + '_ {
        (0..self.len()).filter_map(|i| self.entry(i))
    }

    fn find(&self, key: &[u8; 16]) -> Option<V> {
        if *key < self.first || *key > self.last || !self.bloom.may_hold(key) {
            return None;
        }
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, value) = self.entry(mid)?;
            match k.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Some(value),
            }
        }
        None
    }

    /// `a` and `b` (no ID in both) as one run, in `spill`.
    fn merge(
        a: &Self,
        b: &Self,
        spill: &mut dyn FnMut() -> Spill,
    ) -> Result<Option<Self>, SpillError> {
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

/// Sorted runs of (ID, value) (module doc).
#[derive(Debug, Clone)]
pub(crate) struct Runs<V, const N: usize> {
    runs: Vec<Run<V, N>>,
}

impl<V, const N: usize> Default for Runs<V, N> {
    fn default() -> Self {
        Runs { runs: Vec::new() }
    }
}

impl<V: RunValue, const N: usize> Runs<V, N> {
    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.runs.iter().map(Run::len).sum()
    }

    /// The value of `key`, if held.
    pub(crate) fn get(&self, key: &[u8; 16]) -> Option<V> {
        self.runs.iter().rev().find_map(|run| run.find(key))
    }

    /// Adds `entries` (IDs none of the runs holds, each once, in any order) as a new run in a
    /// `spill`, then merges the newest runs (module doc). On a refused spill nothing was added,
    /// and the error says why.
    pub(crate) fn add(
        &mut self,
        mut entries: Vec<([u8; 16], V)>,
        spill: &mut dyn FnMut() -> Spill,
    ) -> Result<(), SpillError> {
        // Each key once, so any sort gives the one order. A seal's IDs come nearly in order
        // (`crate::idsort`); otherwise an unstable sort, in place: the stable one copied every
        // entry through a scratch buffer, most of a large seal's time.
        let key = |e: &([u8; 16], V)| crate::idhash::order_key(e.0);
        if !crate::idsort::sort_nearly_ordered(&mut entries, key) {
            entries.sort_unstable_by_key(key);
        }
        debug_assert!(
            entries.windows(2).all(|w| w[0].0 < w[1].0),
            "a run's entries name each ID once"
        );
        let Some(run) = Run::write(entries.iter().copied(), entries.len(), spill)? else {
            return Ok(());
        };
        self.runs.push(run);
        while let [.., older, newer] = &self.runs[..]
            && newer.len() * 2 >= older.len()
        {
            let Ok(Some(merged)) = Run::merge(older, newer, spill) else {
                break;
            };
            self.runs.truncate(self.runs.len() - 2);
            self.runs.push(merged);
        }
        Ok(())
    }

    /// Drops every entry whose order is below `floor`; returns how many, and the entries at or
    /// above it of a run the spill refused to write again (which the caller keeps elsewhere).
    /// A run wholly on one side is dropped or kept without reading it; only one across `floor`
    /// is written again.
    pub(crate) fn forget_below(
        &mut self,
        floor: u64,
        spill: &mut dyn FnMut() -> Spill,
    ) -> (usize, Vec<([u8; 16], V)>) {
        let (mut removed, mut refused) = (0, Vec::new());
        for run in std::mem::take(&mut self.runs) {
            if run.min_order >= floor {
                self.runs.push(run);
                continue;
            }
            let above: Vec<_> = if run.max_order < floor {
                Vec::new()
            } else {
                run.iter().filter(|e| e.1.order() >= floor).collect()
            };
            removed += run.len() - above.len();
            match Run::write(above.iter().copied(), above.len(), spill) {
                Ok(kept) => self.runs.extend(kept),
                Err(e) => {
                    tracing::warn!("entries of a sorted run go back to the heap: {e}");
                    refused.extend(above);
                }
            }
        }
        (removed, refused)
    }
}

/// A Bloom filter of the 16-byte keys of a sorted run: 10 bits and 6 probes a key (about 1%
/// false positives, 1.25 bytes a key). Most lookups within a run's range are of IDs it does not
/// hold (a process's step, reserved at its start, appended at its end); the filter answers those
/// without bisecting the run. Before it, those bisections took a tenth of a large root's appends
/// (`perf` of `cargo bench --bench snapshot`). Built on the heap, then moved into spill space
/// with its run (a probe reads a few words of page cache), so that it costs the heap nothing per
/// key; where the spill refuses, it stays on the heap.
#[derive(Debug, Clone)]
struct Bloom {
    words: Words,
    /// The number of words: a power of two.
    len: usize,
    hasher: IdHashBuilder,
}

#[derive(Debug, Clone)]
enum Words {
    Heap(Vec<u64>),
    Spilled(Records<8>),
}

const BLOOM_BITS_PER_KEY: usize = 10;
const BLOOM_PROBES: u64 = 6;

impl Bloom {
    fn for_keys(n: usize) -> Bloom {
        let words = (n.max(1) * BLOOM_BITS_PER_KEY)
            .div_ceil(64)
            .next_power_of_two();
        Bloom {
            words: Words::Heap(vec![0; words]),
            len: words,
            hasher: IdHashBuilder::default(),
        }
    }

    /// Moves the words into `spill` (empty); where it refuses, they stay on the heap.
    fn spill(&mut self, spill: Spill) {
        let Words::Heap(words) = &self.words else {
            return;
        };
        let mut w = RecordsWriter::<8>::new(spill);
        let written = words
            .iter()
            .try_for_each(|word| w.push(word.to_le_bytes()))
            .and_then(|()| w.finish());
        match written {
            Ok(records) => self.words = Words::Spilled(records),
            Err(e) => tracing::warn!("a sorted run's filter stays on the heap: {e}"),
        }
    }

    fn word(&self, i: usize) -> u64 {
        match &self.words {
            Words::Heap(v) => v.get(i).copied().unwrap_or(0),
            Words::Spilled(r) => r.get(i).map_or(0, u64::from_le_bytes),
        }
    }

    /// The bits of `key`: double hashing over one 64-bit hash.
    fn bits(&self, key: &[u8; 16]) -> impl Iterator<Item = usize> + use<> {
        bit_positions(&self.hasher, self.len, key)
    }

    /// Adds `key`; only while the words are on the heap, which `Run::write` keeps them in until
    /// every key is in.
    fn insert(&mut self, key: &[u8; 16]) {
        if let Words::Heap(words) = &mut self.words {
            for bit in bit_positions(&self.hasher, self.len, key) {
                if let Some(w) = words.get_mut(bit / 64) {
                    *w |= 1 << (bit % 64);
                }
            }
        }
    }

    fn may_hold(&self, key: &[u8; 16]) -> bool {
        self.bits(key)
            .all(|bit| self.word(bit / 64) & (1 << (bit % 64)) != 0)
    }
}

/// The bits of `key` in a filter of `words` words.
fn bit_positions(
    hasher: &IdHashBuilder,
    words: usize,
    key: &[u8; 16],
) -> impl Iterator<Item = usize> + use<> {
    let h = hasher.hash_one(key);
    let (h1, h2) = (h & 0xffff_ffff, (h >> 32) | 1);
    let mask = (words * 64 - 1) as u64;
    (0..BLOOM_PROBES).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) & mask) as usize)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Whatever batches the entries come in, every one is found with its value and no other
        /// ID is; forgetting below a floor keeps exactly the entries at or above it.
        #[test]
        fn batches_are_found_as_a_map_finds_them_and_forgotten_below_a_floor(
            ids in proptest::collection::btree_map(any::<[u8; 2]>(), any::<u32>(), 0..400),
            cuts in proptest::collection::vec(0usize..400, 0..6),
            probes in proptest::collection::vec(any::<[u8; 2]>(), 0..50),
            floor in any::<u32>(),
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
            let mut runs = Runs::<u32, 32>::default();
            for w in cuts.windows(2) {
                let batch = all.get(w[0].min(all.len())..w[1].min(all.len())).unwrap_or_default();
                runs.add(batch.iter().rev().copied().collect(), &mut Spill::default).unwrap();
            }
            prop_assert_eq!(runs.len(), all.len());
            for (k, v) in &all {
                prop_assert_eq!(runs.get(k), Some(*v));
            }
            for p in &probes {
                let want = ids.get(p).copied();
                prop_assert_eq!(runs.get(&key(*p)), want);
            }
            let (removed, refused) = runs.forget_below(u64::from(floor), &mut Spill::default);
            prop_assert!(refused.is_empty());
            let kept = all.iter().filter(|(_, v)| *v >= floor).count();
            prop_assert_eq!(removed, all.len() - kept);
            for (k, v) in &all {
                prop_assert_eq!(runs.get(k), (*v >= floor).then_some(*v));
            }
        }
    }

    /// The unstable sort a run is made with relies on each ID coming once: a caller that gave
    /// one twice is stopped where the tests run (debug builds), not left to a run that holds
    /// two entries under one ID.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a run's entries name each ID once")]
    fn an_id_given_twice_is_refused_in_debug_builds() {
        let mut runs = Runs::<u32, 32>::default();
        let _ = runs.add(
            vec![([7; 16], 1), ([3; 16], 2), ([7; 16], 3)],
            &mut Spill::default,
        );
    }
}
