//! A fast, seeded hasher for maps keyed by 16-byte IDs (event IDs, handles), and the integer key
//! that sorts such IDs in their bytes' order.
//!
//! The journal's ID index and the manifest store hash one 16-byte key per event; SipHash spends
//! more on that than the rest of the lookup. The keys are UUIDs whose low 62 bits are random, so a
//! multiply-rotate mix of the two words is enough for dispersion; the per-process random seed
//! keeps a caller from predicting bucket collisions.

use std::hash::{BuildHasher, Hasher};

/// A 16-byte ID as the integer that orders as its bytes do (lexicographically): sorting by it
/// compares two words at once where the byte arrays' order walks them a byte at a time, which
/// was most of the time a large sort of IDs took.
#[expect(
    clippy::big_endian_bytes,
    reason = "big-endian is what makes the integer's order the bytes' order; nothing is stored"
)]
pub(crate) fn order_key(id: [u8; 16]) -> u128 {
    u128::from_be_bytes(id)
}

#[derive(Debug, Clone, Copy)]
pub struct IdHashBuilder {
    seed: u64,
}

impl Default for IdHashBuilder {
    fn default() -> Self {
        IdHashBuilder {
            seed: std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64),
        }
    }
}

impl BuildHasher for IdHashBuilder {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher { state: self.seed }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct IdHasher {
    state: u64,
}

const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.state = (self.state ^ u64::from_le_bytes(word))
                .wrapping_mul(MIX)
                .rotate_left(29);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.state = (self.state ^ n as u64).wrapping_mul(MIX);
    }

    fn finish(&self) -> u64 {
        let x = self.state.wrapping_mul(MIX);
        x ^ (x >> 32)
    }
}

/// A `HashMap` with the ID hasher.
pub type IdMap<K, V> = std::collections::HashMap<K, V, IdHashBuilder>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_v7_ids_spread_over_buckets() {
        let builder = IdHashBuilder::default();
        let mut low_bits = std::collections::HashSet::new();
        for _ in 0..4096 {
            let id = *uuid::Uuid::now_v7().as_bytes();
            low_bits.insert(builder.hash_one(id) & 0xfff);
        }
        // 4096 keys into 4096 buckets: a uniform hash fills about 63 % of them.
        assert!(
            low_bits.len() > 2300,
            "only {} distinct buckets",
            low_bits.len()
        );
    }

    proptest::proptest! {
        /// Sorting by the key is sorting by the bytes, for any two IDs: bytes that differ only
        /// late, or only early, included.
        #[test]
        fn the_order_key_orders_as_the_bytes_do(
            a in proptest::array::uniform16(proptest::prelude::any::<u8>()),
            b in proptest::array::uniform16(proptest::prelude::any::<u8>()),
            at in 0usize..16,
        ) {
            proptest::prop_assert_eq!(order_key(a).cmp(&order_key(b)), a.cmp(&b));
            let mut near = a;
            near[at] = near[at].wrapping_add(1);
            proptest::prop_assert_eq!(order_key(a).cmp(&order_key(near)), a.cmp(&near));
        }
    }
}
