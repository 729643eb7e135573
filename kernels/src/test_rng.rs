//! SplitMix64, the unit tests' generator of words and values (test builds only).

/// SplitMix64 (Steele, Lea and Flood): a 64-bit state, one word a step.
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    /// The next 64-bit word.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next word's upper 32 bits.
    pub(crate) fn word(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }

    /// Uniform in `[0, 1)` (53 bits).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0 .. n` (`n > 0`; the modulo's bias does not matter to the tests).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Roughly normal: the sum of four uniforms, centred.
    pub(crate) fn normal(&mut self) -> f64 {
        (0..4).map(|_| self.unit()).sum::<f64>() * 1.7 - 3.4
    }
}
