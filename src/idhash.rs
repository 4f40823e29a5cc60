//! A fast, seeded hasher for maps keyed by 16-byte IDs (event IDs, handles).
//!
//! The journal's ID index and the manifest store hash one 16-byte key per event; SipHash spends
//! more on that than the rest of the lookup. The keys are UUIDs whose low 62 bits are random, so a
//! multiply-rotate mix of the two words is enough for dispersion; the per-process random seed
//! keeps a caller from predicting bucket collisions.

use std::hash::{BuildHasher, Hasher};

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
}
