//! The index of reserved event IDs: which manifest and step each allocated ID belongs to.
//!
//! Every registration reserves five IDs, so this is the store's largest structure: a `HashMap`
//! of 16-byte keys took 25 bytes a bucket (a third of replay's time went to faulting its pages
//! in and missing the cache on its inserts). This table keeps 5 bytes a bucket and no key: a
//! 7-bit hash tag and the reservation, and it recovers an entry's key from the manifest the
//! reservation names (`key_of`), so a hit is always checked against the full 16 bytes.
//!
//! Invariants: open addressing with linear probing over a power-of-two number of buckets, at
//! most half of them full; a bucket is empty exactly when its tag is 0; entries are never
//! removed (a reservation lasts as long as its manifest, which is never removed), so a probe
//! that reaches an empty bucket has seen every entry that hashes before it. Lookups are exact:
//! a tag match is only a candidate until `key_of` gives the same ID. Growing rebuilds the table
//! from every reservation, read in manifest order (sequentially) from the store.

use std::hash::BuildHasher;

use crate::idhash::IdHashBuilder;
use crate::journal::EventId;

/// Which step an allocated event ID is reserved for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Registration = 0,
    Running = 1,
    Terminal = 2,
    Lost = 3,
    Completion = 4,
}

impl Step {
    fn from_bits(bits: u32) -> Step {
        match bits {
            0 => Step::Registration,
            1 => Step::Running,
            2 => Step::Terminal,
            3 => Step::Lost,
            _ => Step::Completion,
        }
    }
}

/// Which manifest (its position in the store) and step an ID is reserved for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reservation {
    pub slot: u32,
    pub step: Step,
}

/// Positions must leave 3 bits for the step in a `u32`.
pub(super) const SLOTS_MAX: usize = 1 << 29;

impl Reservation {
    pub(super) fn pack(self) -> u32 {
        (self.slot << 3) | self.step as u32
    }
    pub(super) fn unpack(bits: u32) -> Reservation {
        Reservation {
            slot: bits >> 3,
            step: Step::from_bits(bits & 7),
        }
    }
}

const BUCKETS_MIN: usize = 64;

#[derive(Clone, Default)]
pub(super) struct ReservedIds {
    /// 0 for an empty bucket, else 1 + the top 7 bits of the key's hash.
    tags: Vec<u8>,
    /// `Reservation::pack` of the entry in the same bucket.
    entries: Vec<u32>,
    len: usize,
    hasher: IdHashBuilder,
}

impl std::fmt::Debug for ReservedIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReservedIds")
            .field("len", &self.len)
            .field("buckets", &self.tags.len())
            .finish()
    }
}

impl ReservedIds {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The home bucket and the tag of `id`; `mask` is the bucket count minus 1.
    fn locate(&self, id: &EventId, mask: usize) -> (usize, u8) {
        let hash = self.hasher.hash_one(id);
        ((hash as usize) & mask, (hash >> 57) as u8 + 1)
    }

    /// The reservation of `id`, if any. `key_of` gives the ID a reservation was made for.
    pub fn get(
        &self,
        id: &EventId,
        key_of: impl Fn(Reservation) -> Option<EventId>,
    ) -> Option<Reservation> {
        if self.tags.is_empty() {
            return None;
        }
        let mask = self.tags.len() - 1;
        let (mut at, tag) = self.locate(id, mask);
        loop {
            match self.tags[at] {
                0 => return None,
                t if t == tag => {
                    let r = Reservation::unpack(self.entries[at]);
                    if key_of(r).as_ref() == Some(id) {
                        return Some(r);
                    }
                }
                _ => {}
            }
            at = (at + 1) & mask;
        }
    }

    /// Whether `more` entries fit without growing past half full.
    pub fn has_room_for(&self, more: usize) -> bool {
        (self.len + more) * 2 <= self.tags.len()
    }

    /// Rebuilds the table with room for `more` entries beyond `all`, which must be every entry
    /// the table holds.
    pub fn rebuild(&mut self, more: usize, all: impl Iterator<Item = (EventId, Reservation)>) {
        let buckets = ((self.len + more) * 2)
            .next_power_of_two()
            .max(BUCKETS_MIN)
            .max(self.tags.len() * 2);
        self.tags = vec![0; buckets];
        self.entries = vec![0; buckets];
        self.len = 0;
        for (id, r) in all {
            self.insert_absent(id, r);
        }
    }

    /// Adds a reservation for an ID that has none. The caller has made room
    /// ([`ReservedIds::has_room_for`], [`ReservedIds::rebuild`]), so an empty bucket exists.
    pub fn insert_absent(&mut self, id: EventId, r: Reservation) {
        let mask = self.tags.len() - 1;
        let (mut at, tag) = self.locate(&id, mask);
        while self.tags[at] != 0 {
            at = (at + 1) & mask;
        }
        self.tags[at] = tag;
        self.entries[at] = r.pack();
        self.len += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_exactly_what_was_reserved_across_growth() {
        let key = |slot: u32, step: Step| {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&slot.to_le_bytes());
            b[4] = step as u8;
            EventId::from_bytes(b)
        };
        let key_of = |r: Reservation| Some(key(r.slot, r.step));
        let steps = [
            Step::Registration,
            Step::Running,
            Step::Terminal,
            Step::Lost,
            Step::Completion,
        ];
        let mut t = ReservedIds::default();
        for slot in 0..5000u32 {
            if !t.has_room_for(5) {
                let all = (0..slot)
                    .flat_map(|s| steps.map(|step| (key(s, step), Reservation { slot: s, step })));
                t.rebuild(5, all);
            }
            for step in steps {
                t.insert_absent(key(slot, step), Reservation { slot, step });
            }
        }
        assert_eq!(t.len(), 25_000);
        for slot in (0..5000u32).step_by(7) {
            for step in steps {
                assert_eq!(
                    t.get(&key(slot, step), key_of),
                    Some(Reservation { slot, step })
                );
            }
            assert_eq!(t.get(&key(slot + 5000, Step::Running), key_of), None);
        }
        assert_eq!(
            ReservedIds::default().get(&key(0, Step::Lost), key_of),
            None
        );
    }
}
