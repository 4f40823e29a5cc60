//! A sort for records keyed by time-ordered IDs, which mostly arrive in order already.
//!
//! An open hands the journal's index the retained IDs of every manifest of its snapshot (each
//! manifest's in order, the manifests in registration order), and a seal hands a run the
//! handles and reservations of the manifests registered since the last. UUIDv7 IDs sort by their
//! millisecond, so such a list is in order but where two processes were registered in the same
//! millisecond: an ID derived from one (a UUIDv8 of the same millisecond, `EventId::derived`)
//! sorts after the next one's. std's sorts find runs only when they are long (a list of 5 000
//! manifests' IDs is 5 000 short runs to them) and sorted 55 000 such IDs in 1.5 to 2.2 ms, most
//! of the time an open of a root of 5 000 processes spent sorting. [`sort_nearly_ordered`]
//! merges each ascending run into what it sorted so far, which for such a list touches only the
//! last few IDs: 0.16 ms for a list of that shape (a synthetic one, timed alone).
//!
//! Invariants: what [`sort_nearly_ordered`] leaves is exactly what a stable sort by the same
//! key leaves (records with equal keys keep their order); when it gives up, a permutation of
//! the input in which records with equal keys still keep their order, so that the caller's
//! stable sort of it gives what it would have given of the input (and any sort does, when no
//! two keys are equal). Its work is at most a few times the input's length before it gives up,
//! so a list in no order costs the caller's own sort a bounded amount more, and it sorts in
//! place, with a scratch buffer only as large as one merge.

/// Sorts `v` by `key`, stably, when it is nearly in order; returns false once sorting it this
/// way would take more than a few passes over it, leaving a permutation the caller then sorts
/// another way (module doc).
pub(crate) fn sort_nearly_ordered<T: Copy, K: Ord>(v: &mut [T], key: impl Fn(&T) -> K) -> bool {
    // Element steps the merges may take in all: back over the sorted part, and merged.
    let mut budget = v
        .len()
        .saturating_mul(WORK_PER_ELEMENT)
        .saturating_add(WORK_MIN);
    let mut merged: Vec<T> = Vec::new();
    // `v[..start]` is sorted; each step merges the ascending run that follows it.
    let mut start = 0;
    while let Some(first) = v.get(start) {
        let first = key(first);
        let end = run_end(v, start, &key);
        // Everything before `p` sorts before or with the run's first record (and so before or
        // with all of it), and came before it: it stays where it is.
        let mut p = start;
        while p > 0 && v.get(p - 1).is_some_and(|r| key(r) > first) {
            p -= 1;
            budget = match budget.checked_sub(1) {
                Some(b) => b,
                None => return false,
            };
        }
        if p < start {
            budget = match budget.checked_sub(end - p) {
                Some(b) => b,
                None => return false,
            };
            let (before, rest) = v.split_at_mut(start);
            let (Some(tail), Some(run)) = (before.get(p..), rest.get(..end - start)) else {
                return false;
            };
            merge_stable(tail, run, &key, &mut merged);
            if let Some(into) = v.get_mut(p..end) {
                into.copy_from_slice(&merged);
            }
        }
        start = end;
    }
    true
}

/// Steps of merging allowed per element of the input, beyond [`WORK_MIN`]: the synthetic list
/// of a 5 000-process snapshot's shape took 1.2 per element, so this leaves room for runs that
/// overlap several times as far back.
const WORK_PER_ELEMENT: usize = 8;
const WORK_MIN: usize = 1024;

/// The end of the ascending run that starts at `start` (non-decreasing by `key`).
fn run_end<T, K: Ord>(v: &[T], start: usize, key: &impl Fn(&T) -> K) -> usize {
    let mut end = start + 1;
    while let (Some(a), Some(b)) = (v.get(end - 1), v.get(end)) {
        if key(a) > key(b) {
            break;
        }
        end += 1;
    }
    end
}

/// `earlier` and `later`, each sorted, merged into `out` (cleared first); of equal keys,
/// `earlier`'s come first.
fn merge_stable<T: Copy, K: Ord>(
    earlier: &[T],
    later: &[T],
    key: &impl Fn(&T) -> K,
    out: &mut Vec<T>,
) {
    out.clear();
    let (mut a, mut b) = (earlier.iter().peekable(), later.iter().peekable());
    while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
        if key(y) < key(x) {
            out.push(**y);
            b.next();
        } else {
            out.push(**x);
            a.next();
        }
    }
    out.extend(a.copied());
    out.extend(b.copied());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Blocks of `per` ascending keys, each block starting a little below where the one before
    /// ended: the shape of a snapshot's retained IDs.
    fn overlapping_blocks(blocks: u64, per: u64) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        for b in 0..blocks {
            for i in 0..per {
                v.push((b * 10 + i * 3, v.len() as u64));
            }
        }
        v
    }

    #[test]
    fn overlapping_runs_sort_as_a_stable_sort_does() {
        let input = overlapping_blocks(5_000, 11);
        let mut expected = input.clone();
        expected.sort_by_key(|r| r.0);
        let mut got = input;
        assert!(sort_nearly_ordered(&mut got, |r| r.0));
        assert_eq!(got, expected);
    }

    #[test]
    fn a_list_in_no_order_is_given_up_on_early() {
        let input: Vec<u64> = (0..100_000u64).rev().collect();
        let mut got = input.clone();
        assert!(!sort_nearly_ordered(&mut got, |r| *r));
        // A descending list: each record is a run, merged back over the whole sorted part, so
        // the budget of a few passes runs out a few thousand records in.
        let touched = got.iter().zip(&input).filter(|(a, b)| a != b).count();
        assert!(touched > 0 && touched < 10_000, "touched {touched}");
    }

    proptest! {
        /// Whatever the input, the result is the stable sort's, or a permutation whose stable
        /// sort is. Keys from a small range make equal keys common; the second field tells
        /// their order.
        #[test]
        fn the_stable_sorts_result_either_way(
            keys in prop::collection::vec(0u8..16, 0..3000),
        ) {
            let input: Vec<(u8, usize)> = keys.into_iter().enumerate().map(|(i, k)| (k, i)).collect();
            let mut expected = input.clone();
            expected.sort_by_key(|r| r.0);
            let mut got = input;
            if !sort_nearly_ordered(&mut got, |r| r.0) {
                got.sort_by_key(|r| r.0);
            }
            prop_assert_eq!(got, expected);
        }

        /// Nearly sorted input (ascending, with neighbours swapped here and there) is sorted,
        /// never given up on.
        #[test]
        fn nearly_sorted_input_is_sorted(
            len in 0usize..5000,
            swaps in prop::collection::vec(any::<prop::sample::Index>(), 0..200),
        ) {
            let mut input: Vec<(u32, usize)> = (0..len).map(|i| (i as u32, i)).collect();
            for s in swaps {
                if len >= 2 {
                    let at = s.index(len - 1);
                    input.swap(at, at + 1);
                }
            }
            let mut expected = input.clone();
            expected.sort_by_key(|r| r.0);
            let mut got = input;
            prop_assert!(sort_nearly_ordered(&mut got, |r| r.0));
            prop_assert_eq!(got, expected);
        }
    }
}
