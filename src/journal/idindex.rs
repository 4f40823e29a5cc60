//! The journal's event-ID index: for every event ID in the journal, where its record is and the
//! record's kind. Opening a journal builds it from every record, and every append consults it, so
//! it is the journal's largest structure and most of what opening costs.
//!
//! A `HashMap<[u8; 16], (Position, u16)>` kept 48-byte entries in buckets sized for 7/8 load, and
//! moved every entry on each growth: for 1 M records, 96 MB of buckets and as much again copied
//! by rehashing, which took most of `Journal::open`. Here the entries live in one dense `Vec`, in
//! insertion order, and the hash table holds only 8 bytes a bucket: a 32-bit fingerprint of the
//! key's hash and the entry's number. Growth rebuilds the table from the entries, reading them in
//! order; the entries themselves never move between table sizes (the `Vec` grows by `realloc`).
//!
//! Beside the table, the **retained IDs** of an open that resumes from a snapshot (the IDs of
//! records compaction may have removed, hundreds of thousands of them) are kept in one array
//! sorted by ID, handed over whole: filing each into the table was a fifth of such an open
//! (random probes into a table sized for all of them). A lookup that misses the table consults
//! the array only when the ID lies between its least and greatest ID, which a fresh time-ordered
//! ID (every new record's, and every ID derived from one) never does.
//!
//! Compaction hands over the IDs of the records it removed that a retry could still name
//! ([`IdIndex::forget_below`]): they join the retained array, and every other entry of a removed
//! record is forgotten, so that a long-running writer keeps what a restarted one would, not an
//! entry for every record it ever appended.
//!
//! The retained array (a lasting writer's; a brief one keeps a bounded array on the heap), and
//! the **sealed runs** of the entries of segments the writer left ([`IdIndex::seal_below`],
//! `sealed.rs`), live in spill space (`crate::spill`), not on the heap:
//! the table holds the active segment's records (and those of left segments until there are
//! enough of them to seal), so the heap the index costs is bounded by a segment, not by the
//! records since the last compaction. Runs are merged while the newer holds at least half as
//! many entries as the one before, so a lookup that misses the table probes about log2 of them,
//! each only when the ID lies within its range.
//!
//! Invariants: open addressing with linear probing over a power-of-two number of buckets, at most
//! half of them full; a bucket is empty exactly when it is 0; entries are removed only by
//! [`IdIndex::forget_below`] and [`IdIndex::seal_below`], which re-file every entry left, so a
//! probe that reaches an empty bucket has seen every entry that hashes before it. Every entry is
//! named by exactly one bucket and every key appears in at most one entry. A fingerprint match is
//! only a candidate until the entry's full 16-byte key is compared. At most [`IdIndex::CAPACITY`]
//! entries (entry numbers are 32-bit); inserting past that is refused, never wrapped. The
//! retained array and each run are strictly ascending by key (each key once), and a key is in at
//! most one of the table, the runs and the array, so a lookup's answer does not depend on which
//! it asks first.

use std::hash::BuildHasher;

use super::Position;
use super::floor::RetainedId;
use super::retained::Retained;
use super::sealed::{SealedAt, SealedRuns};
use crate::idhash::IdHashBuilder;
use crate::spill::{Spill, SpillError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    key: [u8; 16],
    position: Position,
    kind: u16,
}

const BUCKETS_MIN: usize = 64;

/// The most entries an index is sized for before it fills ([`IdIndex::sized_for`]): the count
/// comes from a file, so it is trusted only this far (64 MB of address space, 16 MB of table);
/// past it the table grows as it fills, as an unsized one does.
const PRESIZE_MAX: usize = 1 << 20;

/// The index is full: the journal holds as many records as entry numbers can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexFull;

#[derive(Clone, Default)]
pub(crate) struct IdIndex {
    entries: Vec<Entry>,
    /// 0 for an empty bucket, else `fingerprint << 32 | (entry number + 1)`.
    buckets: Vec<u64>,
    hasher: IdHashBuilder,
    /// Sealed runs (`sealed.rs`), oldest first: the entries of records in segments the writer
    /// left, none in the table.
    runs: SealedRuns,
    /// Retained IDs (module doc), strictly ascending by ID, none in the table or a run.
    retained: Retained,
}

/// Two records under one ID at different seqs, found while the retained IDs were added: the lower
/// seq stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Duplicate {
    pub key: [u8; 16],
    pub first_seq: u64,
    pub duplicate_seq: u64,
}

impl std::fmt::Debug for IdIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdIndex")
            .field("len", &self.entries.len())
            .field("buckets", &self.buckets.len())
            .field("sealed", &self.runs.len())
            .field("retained", &self.retained.len())
            .finish()
    }
}

/// Where a probe for a key ended.
enum Probe {
    Found(usize),
    /// The key is absent; this empty bucket is where it would go.
    Vacant(usize),
}

impl IdIndex {
    /// Entry numbers are stored as `number + 1` in 32 bits.
    pub const CAPACITY: usize = u32::MAX as usize - 1;

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// An empty index with room for `expected` entries (at most `PRESIZE_MAX`): filling it that
    /// far neither re-files the table nor moves an entry, where growing to it re-filed the table
    /// at every doubling. An allocation refused leaves it unsized, to grow as it fills.
    pub fn sized_for(expected: usize) -> Self {
        let mut index = IdIndex::default();
        let expected = expected.min(PRESIZE_MAX);
        if expected == 0 {
            return index;
        }
        let buckets = (expected * 2).next_power_of_two().max(BUCKETS_MIN);
        if index.entries.try_reserve_exact(expected).is_ok()
            && index.buckets.try_reserve_exact(buckets).is_ok()
        {
            index.buckets.resize(buckets, 0);
        }
        index
    }

    fn hash(&self, key: &[u8; 16]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn probe(&self, key: &[u8; 16], hash: u64) -> Probe {
        let mask = self.buckets.len() - 1;
        let fingerprint = hash >> 32;
        let mut at = hash as usize & mask;
        loop {
            let bucket = self.buckets[at];
            if bucket == 0 {
                return Probe::Vacant(at);
            }
            if bucket >> 32 == fingerprint {
                let number = (bucket as u32 - 1) as usize;
                if self.entries.get(number).is_some_and(|e| e.key == *key) {
                    return Probe::Found(number);
                }
            }
            at = (at + 1) & mask;
        }
    }

    /// The position and kind of the record with event ID `key`.
    pub fn get(&self, key: &[u8; 16]) -> Option<(Position, u16)> {
        if !self.buckets.is_empty()
            && let Probe::Found(number) = self.probe(key, self.hash(key))
        {
            return self.entries.get(number).map(|e| (e.position, e.kind));
        }
        self.off_table(key)
    }

    /// The entry of `key` among the sealed runs and the retained IDs.
    fn off_table(&self, key: &[u8; 16]) -> Option<(Position, u16)> {
        self.runs
            .get(key)
            .map(|at| (at.position, at.kind))
            .or_else(|| self.retained.find(key).map(|r| (r.position(), r.kind)))
    }

    /// Adds the retained IDs of an open that resumes from a snapshot (module doc), once, after
    /// the scan filed every record on disk. An ID the table holds at the same seq is the same
    /// record and keeps its exact place; at another seq, or twice among `ids` at different seqs,
    /// it is a duplicate, returned, and the lower seq stands. Sorts `ids` in place: one pass when
    /// they come in ascending runs, as a snapshot's do.
    /// Marks the retained IDs whose key the table holds too: the table's entry answers, with
    /// the lower seq's place. A key at another seq there is a duplicate, added to `duplicates`.
    fn answer_from_table(
        &mut self,
        ids: &[RetainedId],
        duplicates: &mut Vec<Duplicate>,
    ) -> Vec<bool> {
        // Looked up from the table's side when it is the smaller (an open that resumes keeps
        // about two snapshot intervals of records; a snapshot retains IDs of every process).
        let dropped: std::collections::HashSet<([u8; 16], u64)> = duplicates
            .iter()
            .map(|d| (d.key, d.duplicate_seq))
            .collect();
        let mut in_table = vec![false; ids.len()];
        if let (Some(first), Some(last)) = (ids.first(), ids.last()) {
            let (low, high) = (first.id.as_bytes(), last.id.as_bytes());
            // A finger: the table's entries come mostly in ascending ID order (time-ordered IDs
            // in seq order), so each search starts where the previous one ended.
            let mut finger = 0usize;
            for e in &mut self.entries {
                if e.key < low || e.key > high {
                    continue;
                }
                let Some(at) = gallop(ids, finger, &e.key) else {
                    continue;
                };
                finger = at;
                let (Some(r), Some(seen)) = (ids.get(at), in_table.get_mut(at)) else {
                    continue;
                };
                *seen = true;
                // The same record under both (its seq among the key's retained ones) is
                // reported once, already, when at another seq than the lowest.
                let reported = || dropped.contains(&(e.key, e.position.seq));
                if r.seq != e.position.seq {
                    if !reported() {
                        duplicates.push(Duplicate {
                            key: e.key,
                            first_seq: r.seq.min(e.position.seq),
                            duplicate_seq: r.seq.max(e.position.seq),
                        });
                    }
                    if r.seq < e.position.seq {
                        e.position = r.position();
                        e.kind = r.kind;
                    }
                }
            }
        }
        in_table
    }

    pub fn add_retained(&mut self, mut ids: Vec<RetainedId>) -> Vec<Duplicate> {
        let mut duplicates = dedup_retained(&mut ids);
        let in_table = self.answer_from_table(&ids, &mut duplicates);
        if in_table.iter().any(|&t| t) {
            let mut flags = in_table.into_iter();
            ids.retain(|_| !flags.next().unwrap_or(false));
        }
        if self.retained.is_empty() {
            self.retained = Retained::Heap(ids);
            // Each duplicate names the seq that stands (the lowest of its key).
            for d in &mut duplicates {
                if let Some((standing, _)) = self.get(&d.key) {
                    d.first_seq = standing.seq;
                }
            }
        } else {
            // A second call (not made by the journal): file them one by one.
            for r in ids {
                let _ = self.insert(r.id.as_bytes(), r.position(), r.kind);
            }
        }
        duplicates
    }

    /// Adds `key` unless it is already present. Returns the position and kind already recorded
    /// for it, if any (and then changes nothing).
    pub fn insert(
        &mut self,
        key: [u8; 16],
        position: Position,
        kind: u16,
    ) -> Result<Option<(Position, u16)>, IndexFull> {
        if (self.entries.len() + 1) * 2 > self.buckets.len() {
            if self.entries.len() >= Self::CAPACITY {
                if let Some(found) = self.get(&key) {
                    return Ok(Some(found));
                }
                return Err(IndexFull);
            }
            self.grow();
        }
        let hash = self.hash(&key);
        match self.probe(&key, hash) {
            Probe::Found(number) => Ok(self.entries.get(number).map(|e| (e.position, e.kind))),
            // In at most one place (module doc).
            Probe::Vacant(_) if let Some(found) = self.off_table(&key) => Ok(Some(found)),
            Probe::Vacant(at) => {
                self.buckets[at] = Self::bucket(hash, self.entries.len());
                self.entries.push(Entry {
                    key,
                    position,
                    kind,
                });
                Ok(None)
            }
        }
    }

    /// Forgets the records compaction removed, every entry with a seq below `floor_seq` (in the
    /// table or a sealed run), but for the IDs among them in `keep` (those a retry could still
    /// name: the caller's retained IDs, which may name records at or above the floor too; those
    /// stay where they are). The kept ones join the retained array, the lower seq standing for a
    /// key found twice, written anew into a `spill` (on the heap if it refuses them). Returns
    /// how many entries left the table and the runs (the kept ones among them now in the array).
    pub fn forget_below(
        &mut self,
        floor_seq: u64,
        mut keep: Vec<RetainedId>,
        spill: &mut dyn FnMut() -> Spill,
    ) -> usize {
        keep.retain(|r| r.seq < floor_seq);
        let before = self.entries.len();
        // A kept ID answered by the table moves from its entry to the array, with its place.
        self.entries.retain(|e| e.position.seq >= floor_seq);
        let mut removed = before - self.entries.len();
        removed += self.forget_runs_below(floor_seq, spill);
        if removed > 0 {
            self.entries.shrink_to_fit();
            self.refile(
                (self.entries.len() * 2)
                    .next_power_of_two()
                    .max(BUCKETS_MIN),
            );
        }
        if !keep.is_empty() {
            // Each key once, lowest seq standing: a key named twice is the same record (the
            // journal answered both from this index), so nothing is lost.
            let _ = dedup_retained(&mut keep);
            self.retained = match self.retained.merged(&keep, spill()) {
                Ok(merged) => merged,
                Err(e) => {
                    tracing::warn!("the journal's retained IDs stay on the heap: {e}");
                    keep.append(&mut self.retained.to_vec());
                    let _ = dedup_retained(&mut keep);
                    keep.shrink_to_fit();
                    Retained::Heap(keep)
                }
            };
        }
        removed
    }

    /// Drops the sealed entries below `floor_seq`; returns how many. If the spill refuses to
    /// write again a run that holds records on both sides (compaction removes whole segments, so
    /// only a run sealed from an odd table does), its entries at or above the floor go back into
    /// the table.
    fn forget_runs_below(&mut self, floor_seq: u64, spill: &mut dyn FnMut() -> Spill) -> usize {
        let (removed, refused) = self.runs.forget_below(floor_seq, spill);
        for (key, at) in refused {
            self.entries.push(Entry {
                key,
                position: at.position,
                kind: at.kind,
            });
        }
        removed
    }

    /// Moves the entries of records in segments below `segment_index` from the table into a new
    /// sealed run, in a `spill` (`crate::runs`, which merges the newest runs). Returns how many
    /// entries moved; on a refused spill nothing moved.
    pub fn seal_below(
        &mut self,
        segment_index: u64,
        spill: &mut dyn FnMut() -> Spill,
    ) -> Result<usize, SpillError> {
        let sealed: Vec<([u8; 16], SealedAt)> = self
            .entries
            .iter()
            .filter(|e| e.position.segment_index < segment_index)
            .map(|e| {
                let at = SealedAt {
                    position: e.position,
                    kind: e.kind,
                };
                (e.key, at)
            })
            .collect();
        let moved = sealed.len();
        if moved == 0 {
            return Ok(0);
        }
        self.runs.add(sealed, spill)?;
        self.entries
            .retain(|e| e.position.segment_index >= segment_index);
        self.entries.shrink_to_fit();
        self.refile(
            (self.entries.len() * 2)
                .next_power_of_two()
                .max(BUCKETS_MIN),
        );
        Ok(moved)
    }

    /// Entries held in sealed runs.
    pub fn sealed_len(&self) -> usize {
        self.runs.len()
    }

    /// Moves the retained IDs an open handed over into `spill` (empty), off the heap.
    pub fn spill_retained(&mut self, spill: Spill) -> Result<(), SpillError> {
        self.retained.spill(spill)
    }

    /// Whether the retained IDs are kept in a spill file.
    #[cfg(any(test, feature = "test-support"))]
    pub fn retained_spilled(&self) -> bool {
        self.retained.is_spilled_to_file()
    }

    /// Retained IDs kept beside the table.
    pub fn retained_len(&self) -> usize {
        self.retained.len()
    }

    fn bucket(hash: u64, number: usize) -> u64 {
        (hash >> 32) << 32 | (number as u64 + 1)
    }

    /// Doubles the table and re-files every entry, reading the entries in order.
    fn grow(&mut self) {
        self.refile((self.buckets.len() * 2).max(BUCKETS_MIN));
    }

    /// Re-files every entry into a table of `buckets` buckets (a power of two).
    fn refile(&mut self, buckets: usize) {
        let mask = buckets - 1;
        let mut table = vec![0u64; buckets];
        for (number, e) in self.entries.iter().enumerate() {
            let hash = self.hash(&e.key);
            let mut at = hash as usize & mask;
            while table[at] != 0 {
                at = (at + 1) & mask;
            }
            table[at] = Self::bucket(hash, number);
        }
        self.buckets = table;
    }
}

/// Sorts retained IDs by key, then seq, and keeps each key once, its lowest seq standing; every
/// other seq under the same key is a duplicate.
fn dedup_retained(ids: &mut Vec<RetainedId>) -> Vec<Duplicate> {
    let mut duplicates = Vec::new();
    // A snapshot's retained IDs come nearly in order (`crate::idsort`).
    let key = |r: &RetainedId| (crate::idhash::order_key(r.id.as_bytes()), r.seq);
    if !crate::idsort::sort_nearly_ordered(ids, key) {
        ids.sort_by_key(key);
    }
    // The seq of the element before `later` in sorted order: a seq given twice is one record.
    let mut previous_seq = 0;
    ids.dedup_by(|later, kept| {
        if later.id != kept.id {
            previous_seq = later.seq;
            return false;
        }
        let repeat = later.seq == previous_seq;
        previous_seq = later.seq;
        if !repeat && later.seq != kept.seq {
            duplicates.push(Duplicate {
                key: kept.id.as_bytes(),
                first_seq: kept.seq,
                duplicate_seq: later.seq,
            });
        }
        true
    });
    duplicates
}

/// The position of `key` in `ids` (ascending by ID), searched from `from` outwards in doubling
/// steps, then by bisection: cheap when keys are looked up in nearly ascending order.
fn gallop(ids: &[RetainedId], from: usize, key: &[u8; 16]) -> Option<usize> {
    let from = from.min(ids.len().checked_sub(1)?);
    let at = |i: usize| ids.get(i).map(|r| r.id.as_bytes());
    let here = at(from)?;
    let (lo, hi) = if here == *key {
        return Some(from);
    } else if here < *key {
        let mut step = 1usize;
        let mut lo = from;
        loop {
            let next = from.saturating_add(step);
            match at(next) {
                Some(k) if k < *key => {
                    lo = next;
                    step = step.saturating_mul(2);
                }
                Some(_) => break (lo, next + 1),
                None => break (lo, ids.len()),
            }
        }
    } else {
        let mut step = 1usize;
        let mut hi = from + 1;
        loop {
            match from.checked_sub(step) {
                Some(next) if at(next).is_some_and(|k| k > *key) => {
                    hi = next + 1;
                    step = step.saturating_mul(2);
                }
                Some(next) => break (next, hi),
                None => break (0, hi),
            }
        }
    };
    let window = ids.get(lo..hi)?;
    window
        .binary_search_by(|r| r.id.as_bytes().cmp(key))
        .ok()
        .map(|i| lo + i)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn position(n: u64) -> Position {
        Position {
            seq: n + 1,
            segment_index: n / 7,
            offset: n * 64,
        }
    }

    proptest! {
        /// The index answers exactly as a map that keeps the first insert of each key, across
        /// every growth, including keys that differ in one byte (same fingerprint bits likely).
        #[test]
        fn agrees_with_a_map(
            keys in proptest::collection::vec((0u8..4, any::<u8>(), any::<u16>()), 0..3000),
            presize in prop_oneof![Just(0usize), 0usize..4000],
        ) {
            let mut index = IdIndex::sized_for(presize);
            let mut model: HashMap<[u8; 16], (Position, u16)> = HashMap::new();
            for (n, (hi, lo, kind)) in keys.iter().enumerate() {
                let mut key = [0u8; 16];
                key[0] = *hi;
                key[15] = *lo;
                let got = index.insert(key, position(n as u64), *kind).map_err(|_| TestCaseError::fail("full"))?;
                let want = model.get(&key).copied();
                model.entry(key).or_insert((position(n as u64), *kind));
                prop_assert_eq!(got, want);
                prop_assert_eq!(index.len(), model.len());
            }
            for hi in 0u8..5 {
                for lo in [0u8, 1, 77, 255] {
                    let mut key = [0u8; 16];
                    key[0] = hi;
                    key[15] = lo;
                    prop_assert_eq!(index.get(&key), model.get(&key).copied());
                }
            }
        }
    }

    proptest! {
        /// Sealing the entries of left segments into runs at any points, then forgetting what
        /// compaction removed, once or twice: before it every key answers as the map, and a
        /// repeated insert is answered from wherever its entry went; after it every key at or
        /// above a floor answers as before, a key below one answers only when it was ever kept
        /// (as it was), inserts refuse every key still known and take every forgotten one anew.
        #[test]
        fn sealing_and_forgetting_below_a_floor_keep_only_what_was_kept(
            keys in proptest::collection::vec(any::<[u8; 2]>(), 0..1500),
            seals in proptest::collection::vec(0usize..1500, 0..5),
            floors in proptest::collection::vec(0u64..1600, 1..3),
            keep_every in 1usize..5,
        ) {
            let key_of = |k: [u8; 2]| {
                let mut key = [0u8; 16];
                key[0] = k[0];
                key[15] = k[1];
                key
            };
            let mut index = IdIndex::default();
            let mut model: HashMap<[u8; 16], (Position, u16)> = HashMap::new();
            for (n, k) in keys.iter().enumerate() {
                let key = key_of(*k);
                let got = index.insert(key, position(n as u64), 3).map_err(|_| TestCaseError::fail("full"))?;
                prop_assert_eq!(got, model.get(&key).copied());
                model.entry(key).or_insert((position(n as u64), 3));
                if seals.contains(&n) {
                    let moved = index.seal_below(position(n as u64).segment_index, &mut Spill::default);
                    prop_assert!(moved.is_ok());
                }
            }
            for (key, found) in &model {
                prop_assert_eq!(index.get(key), Some(*found));
            }
            prop_assert_eq!(index.len() + index.sealed_len(), model.len());
            // Whether the caller keeps a key is the key's own (a snapshot retains the IDs of every
            // manifest's steps, and a step's ID stays one), above the floor too.
            let keeps = |key: &[u8; 16]| usize::from(key[0] ^ key[15]) % keep_every == 0;
            for floor in floors {
                let mut known: Vec<_> = model.iter().map(|(k, (p, kind))| (*k, p.seq, *kind)).collect();
                known.sort();
                let keep: Vec<RetainedId> = known
                    .iter()
                    .filter(|(key, _, _)| keeps(key))
                    .map(|&(key, seq, kind)| RetainedId { id: crate::journal::EventId::from_bytes(key), seq, kind })
                    .collect();
                index.forget_below(floor, keep, &mut Spill::default);
                model.retain(|k, (p, _)| p.seq >= floor || keeps(k));
                for &(key, _, _) in &known {
                    let want = model.get(&key).map(|(p, kind)| (p.seq, *kind));
                    prop_assert_eq!(index.get(&key).map(|(p, kind)| (p.seq, kind)), want);
                }
                prop_assert_eq!(index.len() + index.sealed_len() + index.retained_len(), model.len());
            }
            // Afterwards, an insert of a key still known is answered; a forgotten one is new.
            for k in keys.iter().take(200) {
                let key = key_of(*k);
                let got = index.insert(key, position(5000), 4).map_err(|_| TestCaseError::fail("full"))?;
                let want = model.get(&key).map(|(p, kind)| (p.seq, *kind));
                prop_assert_eq!(got.map(|(p, kind)| (p.seq, kind)), want);
                model.entry(key).or_insert((position(5000), 4));
            }
        }
    }

    /// An index sized for the records it gets files them without growing; past that it grows
    /// as before, and a count no journal could hold sizes it only up to `PRESIZE_MAX`.
    #[test]
    fn an_index_sized_for_its_records_fills_without_growing() {
        let records = 5000u64;
        let mut index = IdIndex::sized_for(records as usize);
        let sized = (index.buckets.len(), index.entries.capacity());
        let key_of = |n: u64| {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&n.to_le_bytes());
            key
        };
        for n in 0..records {
            assert_eq!(index.insert(key_of(n), position(n), 1), Ok(None));
        }
        assert_eq!((index.buckets.len(), index.entries.capacity()), sized);
        for n in (records..2 * records).chain(0..records) {
            let _ = index.insert(key_of(n), position(n), 1);
        }
        assert_eq!(index.len(), 2 * records as usize);
        assert!(index.buckets.len() > sized.0);
        assert!((0..2 * records).all(|n| index.get(&key_of(n)) == Some((position(n), 1))));
        let huge = IdIndex::sized_for(usize::MAX);
        assert_eq!(huge.buckets.len(), 2 * PRESIZE_MAX);
        assert!(IdIndex::sized_for(0).buckets.is_empty());
    }

    fn key(hi: u8, lo: u8) -> [u8; 16] {
        let mut key = [0u8; 16];
        key[0] = hi;
        key[15] = lo;
        key
    }

    proptest! {
        /// With retained IDs beside the table: every lookup answers as a map that holds the
        /// table's records, then the retained IDs with the lower seq standing per key; every key
        /// found at two seqs is reported once per extra seq; and later inserts refuse a retained
        /// key. Keys in any order (the array is sorted where it is).
        #[test]
        fn retained_ids_agree_with_a_map(
            table in proptest::collection::vec((0u8..3, any::<u8>(), 1u64..50, 1u16..4), 0..300),
            retained in proptest::collection::vec((0u8..3, any::<u8>(), 1u64..50, 1u16..4), 0..300),
        ) {
            let mut index = IdIndex::default();
            let mut model: HashMap<[u8; 16], (u64, u16)> = HashMap::new();
            let mut seqs: HashMap<[u8; 16], std::collections::BTreeSet<u64>> = HashMap::new();
            for (hi, lo, seq, kind) in &table {
                let k = key(*hi, *lo);
                let position = Position { seq: *seq, segment_index: 1, offset: 8 };
                let had = index.insert(k, position, *kind).map_err(|_| TestCaseError::fail("full"))?;
                if had.is_none() {
                    model.insert(k, (*seq, *kind));
                    seqs.entry(k).or_default().insert(*seq);
                }
            }
            let ids: Vec<RetainedId> = retained
                .iter()
                .map(|(hi, lo, seq, kind)| RetainedId {
                    id: crate::journal::EventId::from_bytes(key(*hi, *lo)),
                    seq: *seq,
                    kind: *kind,
                })
                .collect();
            // The model: the lowest seq of every key stands, with its kind (the first given at
            // that seq for the retained ones: the table's record when it has that seq).
            let mut sorted = ids.clone();
            sorted.sort_by_key(|r| (r.id.as_bytes(), r.seq));
            let mut expected_duplicates = 0usize;
            for r in &sorted {
                let k = r.id.as_bytes();
                let all = seqs.entry(k).or_default();
                if all.insert(r.seq) && all.len() > 1 {
                    expected_duplicates += 1;
                }
                match model.get(&k) {
                    Some((seq, _)) if *seq <= r.seq => {}
                    _ => {
                        model.insert(k, (r.seq, r.kind));
                    }
                }
            }
            let duplicates = index.add_retained(ids);
            prop_assert_eq!(duplicates.len(), expected_duplicates);
            for d in &duplicates {
                prop_assert!(d.first_seq < d.duplicate_seq);
                prop_assert_eq!(Some(&d.first_seq), seqs.get(&d.key).and_then(|s| s.first()));
            }
            for hi in 0u8..4 {
                for lo in 0..=255u8 {
                    let k = key(hi, lo);
                    let got = index.get(&k).map(|(p, kind)| (p.seq, kind));
                    prop_assert_eq!(got, model.get(&k).copied(), "key {:?}", k);
                    if let Some((seq, kind)) = model.get(&k) {
                        let again = index
                            .insert(k, Position { seq: 999, segment_index: 0, offset: 0 }, 9)
                            .map_err(|_| TestCaseError::fail("full"))?;
                        prop_assert_eq!(again.map(|(p, kind)| (p.seq, kind)), Some((*seq, *kind)));
                    }
                }
            }
            prop_assert!(index.retained_len() + index.len() >= model.len());
        }
    }

    #[test]
    fn gallop_finds_every_key_from_any_finger() {
        let ids: Vec<RetainedId> = (0..100u8)
            .map(|n| RetainedId {
                id: crate::journal::EventId::from_bytes(key(0, n * 2)),
                seq: u64::from(n) + 1,
                kind: 1,
            })
            .collect();
        for from in [0usize, 1, 37, 99, 100, 5000] {
            for n in 0..100u8 {
                assert_eq!(gallop(&ids, from, &key(0, n * 2)), Some(usize::from(n)));
                assert_eq!(gallop(&ids, from, &key(0, n * 2 + 1)), None);
            }
            assert_eq!(gallop(&ids, from, &key(1, 0)), None);
        }
        assert_eq!(gallop(&[], 0, &key(0, 0)), None);
    }

    #[test]
    fn empty_index_finds_nothing() {
        assert_eq!(IdIndex::default().get(&[7; 16]), None);
    }
}
