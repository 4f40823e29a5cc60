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
//! Invariants: open addressing with linear probing over a power-of-two number of buckets, at most
//! half of them full; a bucket is empty exactly when it is 0; entries are never removed, so a probe
//! that reaches an empty bucket has seen every entry that hashes before it. Every entry is named by
//! exactly one bucket and every key appears in at most one entry. A fingerprint match is only a
//! candidate until the entry's full 16-byte key is compared. At most [`IdIndex::CAPACITY`] entries
//! (entry numbers are 32-bit); inserting past that is refused, never wrapped.

use std::hash::BuildHasher;

use super::Position;
use crate::idhash::IdHashBuilder;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    key: [u8; 16],
    position: Position,
    kind: u16,
}

const BUCKETS_MIN: usize = 64;

/// The index is full: the journal holds as many records as entry numbers can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexFull;

#[derive(Clone, Default)]
pub(crate) struct IdIndex {
    entries: Vec<Entry>,
    /// 0 for an empty bucket, else `fingerprint << 32 | (entry number + 1)`.
    buckets: Vec<u64>,
    hasher: IdHashBuilder,
}

impl std::fmt::Debug for IdIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdIndex")
            .field("len", &self.entries.len())
            .field("buckets", &self.buckets.len())
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
        if self.buckets.is_empty() {
            return None;
        }
        match self.probe(key, self.hash(key)) {
            Probe::Found(number) => self.entries.get(number).map(|e| (e.position, e.kind)),
            Probe::Vacant(_) => None,
        }
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

    fn bucket(hash: u64, number: usize) -> u64 {
        (hash >> 32) << 32 | (number as u64 + 1)
    }

    /// Makes room for `additional` more entries without growing again (an open that knows how
    /// many IDs it will add, as one resuming from a snapshot does, files each entry once).
    pub fn reserve(&mut self, additional: usize) {
        let wanted = (self.entries.len().saturating_add(additional))
            .min(Self::CAPACITY)
            .saturating_mul(2)
            .next_power_of_two()
            .max(BUCKETS_MIN);
        self.entries.reserve(additional.min(Self::CAPACITY));
        if wanted > self.buckets.len() {
            self.refile(wanted);
        }
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
        fn agrees_with_a_map(keys in proptest::collection::vec((0u8..4, any::<u8>(), any::<u16>()), 0..3000)) {
            let mut index = IdIndex::default();
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

    #[test]
    fn reserving_room_keeps_every_entry_findable() {
        let mut index = IdIndex::default();
        for n in 0..100u64 {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&n.to_le_bytes());
            index.insert(key, position(n), 1).unwrap();
        }
        index.reserve(10_000);
        assert!(index.buckets.len() >= 2 * 10_100);
        for n in 0..100u64 {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&n.to_le_bytes());
            assert_eq!(index.get(&key), Some((position(n), 1)));
        }
    }

    #[test]
    fn empty_index_finds_nothing() {
        assert_eq!(IdIndex::default().get(&[7; 16]), None);
    }
}
