//! The deterministic randomness of the crash tests: a seed mixer and a small PRNG, so that a
//! failing round can be replayed exactly from its seed.

/// splitmix64's finalizer: spreads any `u64` (an index, a seed) over all 64 bits.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// xorshift64*: the PRNG of kill schedules, payload bytes and the children's choices.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        XorShift(mix(seed) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform enough in `0..n` for a test schedule.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform enough in `lo..=hi`.
    #[allow(dead_code)] // Used by some of the tests that include this file.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}
