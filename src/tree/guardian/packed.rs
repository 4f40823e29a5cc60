//! Strings packed end to end, each ended by its NUL, in an anonymous mapping of their own: how
//! the zygote hands a forked guardian its workload's environment.
//!
//! A forked guardian keeps as its own every page of the allocator that held its request once
//! the zygote reuses those blocks for the next one: about a page per 4 KiB of environment, for
//! the guardian's whole life, though it needs the environment only until its workload is
//! forked. A mapping of the request's own is unmapped by the zygote after the fork and by the
//! guardian when it drops its arguments, and its pages go with it.
//!
//! Invariants:
//! - No string holds a NUL (checked when packing), so the NULs split the bytes back into
//!   exactly the strings packed, in order.
//! - The mapping is never written after the strings are packed: it is shared with the forked
//!   guardian until one of them unmaps it.
//! - Where no mapping can be made, the strings live on the heap: the same strings, only the
//!   pages are not given back.

use std::ffi::CStr;

/// The packed strings; see the module's documentation.
#[derive(Debug)]
pub(crate) struct Packed {
    store: Store,
    /// Bytes of `store` the strings and their NULs fill.
    used: usize,
}

#[derive(Debug)]
enum Store {
    Mapped(memmap2::MmapMut),
    Heap(Vec<u8>),
}

/// A string to pack held a NUL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HasNul;

impl Packed {
    /// Packs `strings`; the iterator is walked twice (to size the mapping, then to fill it).
    pub(crate) fn new<'a, I>(strings: I) -> Result<Packed, HasNul>
    where
        I: Iterator<Item = &'a [u8]> + Clone,
    {
        let mut used = 0usize;
        let mut count = 0usize;
        for s in strings.clone() {
            if s.contains(&0) {
                return Err(HasNul);
            }
            used = used.saturating_add(s.len() + 1);
            count += 1;
        }
        // A mapping of no bytes cannot be made; nothing to pack needs none.
        let mut store = match memmap2::MmapMut::map_anon(used.max(1)) {
            Ok(map) => Store::Mapped(map),
            Err(_) => Store::Heap(vec![0; used]),
        };
        let bytes: &mut [u8] = match &mut store {
            Store::Mapped(map) => map,
            Store::Heap(heap) => heap,
        };
        let mut at = 0;
        for s in strings.take(count) {
            let Some(room) = bytes.get_mut(at..at + s.len() + 1) else {
                // The iterator gave more bytes the second time: it is not the one sized.
                return Err(HasNul);
            };
            let (text, nul) = room.split_at_mut(s.len());
            text.copy_from_slice(s);
            nul[0] = 0;
            at += s.len() + 1;
        }
        Ok(Packed { store, used })
    }

    /// The strings, in the order packed.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &CStr> {
        let bytes: &[u8] = match &self.store {
            Store::Mapped(map) => map,
            Store::Heap(heap) => heap,
        };
        bytes
            .get(..self.used)
            .unwrap_or_default()
            .split_inclusive(|&b| b == 0)
            .filter_map(|s| CStr::from_bytes_with_nul(s).ok())
    }

    /// Whether the strings are in a mapping of their own (not on the heap).
    #[cfg(test)]
    fn is_mapped(&self) -> bool {
        matches!(self.store, Store::Mapped(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn strings_come_back_in_order_from_a_mapping_of_their_own() {
        let strings: [&[u8]; 4] = [b"PATH=/bin", b"", b"EMPTY=", b"X=1"];
        let packed = Packed::new(strings.iter().copied()).unwrap();
        assert!(packed.is_mapped());
        let back: Vec<&[u8]> = packed.iter().map(CStr::to_bytes).collect();
        assert_eq!(back, strings);
    }

    #[test]
    fn a_nul_is_refused_and_nothing_packs_to_nothing() {
        let strings: [&[u8]; 2] = [b"A=1", b"B=\0"];
        assert_eq!(Packed::new(strings.iter().copied()).unwrap_err(), HasNul);
        let none = Packed::new(std::iter::empty()).unwrap();
        assert_eq!(none.iter().count(), 0);
    }

    proptest! {
        #[test]
        fn any_strings_without_nul_round_trip(
            strings in proptest::collection::vec(
                proptest::collection::vec(1u8..=255, 0..64),
                0..32,
            ),
        ) {
            let packed = Packed::new(strings.iter().map(Vec::as_slice)).unwrap();
            let back: Vec<Vec<u8>> = packed.iter().map(|s| s.to_bytes().to_vec()).collect();
            prop_assert_eq!(back, strings);
        }
    }
}
