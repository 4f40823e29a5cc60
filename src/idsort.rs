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
//! last few IDs: 0.5 ms for the same list.
//!
//! Invariants: what [`sort_nearly_ordered`] leaves is exactly what a stable sort by the same
//! key leaves (records with equal keys keep their order), or, when it gives up, the input
//! unchanged; its work is at most a few times the input's length before it gives up, so a list
//! in no order costs the caller's own sort a bounded amount more.

/// Sorts `v` by `key`, stably, when it is nearly in order; returns false, leaving `v` as it was,
/// once sorting it this way would take more than a few passes over it (the caller then sorts
/// it another way).
pub(crate) fn sort_nearly_ordered<T: Copy, K: Ord>(v: &mut Vec<T>, key: impl Fn(&T) -> K) -> bool {
    if v.windows(2).all(|w| key(&w[0]) <= key(&w[1])) {
        return true;
    }
    // Element steps the merges may take in all: back over the sorted part, and merged.
    let mut budget = v
        .len()
        .saturating_mul(WORK_PER_ELEMENT)
        .saturating_add(WORK_MIN);
    let mut out: Vec<T> = Vec::with_capacity(v.len());
    let mut merged: Vec<T> = Vec::new();
    let mut start = 0;
    while let Some(first) = v.get(start) {
        let first = key(first);
        let end = run_end(v, start, &key);
        // Everything in `out` up to `p` sorts before or with the run's first record (and so
        // before or with all of it), and came before it: it stays where it is.
        let mut p = out.len();
        while p > 0 && out.get(p - 1).is_some_and(|r| key(r) > first) {
            p -= 1;
            budget = match budget.checked_sub(1) {
                Some(b) => b,
                None => return false,
            };
        }
        let run = v.get(start..end).unwrap_or_default();
        let tail = out.get(p..).unwrap_or_default();
        if tail.is_empty() {
            out.extend_from_slice(run);
            start = end;
            continue;
        }
        budget = match budget.checked_sub(tail.len() + run.len()) {
            Some(b) => b,
            None => return false,
        };
        merge_stable(tail, run, &key, &mut merged);
        out.truncate(p);
        out.extend_from_slice(&merged);
        start = end;
    }
    *v = out;
    true
}

/// Steps of merging allowed per element of the input, beyond [`WORK_MIN`]: a list whose runs
/// each overlap the last few records' worth of the sorted part takes two to three per element.
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
    fn a_list_in_no_order_is_given_back_unchanged() {
        let input: Vec<u64> = (0..100_000u64).rev().collect();
        let mut got = input.clone();
        assert!(!sort_nearly_ordered(&mut got, |r| *r));
        assert_eq!(got, input);
    }

    proptest! {
        /// Whatever the input, the result is the stable sort's, or the input untouched. Keys
        /// from a small range make equal keys common; the second field tells their order.
        #[test]
        fn same_as_the_stable_sort_or_unchanged(
            keys in prop::collection::vec(0u8..16, 0..3000),
        ) {
            let input: Vec<(u8, usize)> = keys.into_iter().enumerate().map(|(i, k)| (k, i)).collect();
            let mut expected = input.clone();
            expected.sort_by_key(|r| r.0);
            let mut got = input.clone();
            if sort_nearly_ordered(&mut got, |r| r.0) {
                prop_assert_eq!(got, expected);
            } else {
                prop_assert_eq!(got, input);
            }
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
