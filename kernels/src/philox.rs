//! Philox4x32-10, the counter-based generator of Salmon et al., "Parallel random numbers: as easy as
//! 1, 2, 3" (SC 2011), as specified by Random123.
//!
//! A counter-based generator is a pure function `(counter, key) -> 128 random bits`: no state, so any
//! thread can draw the bits for any (row, vocab index) directly, and the same draw comes out on the GPU
//! and on the CPU. Only 32-bit integer multiply (`mul.lo`/`mul.hi`), xor and add are used, so the
//! results are bit-identical on every target.

/// First round multiplier.
pub const PHILOX_M0: u32 = 0xD251_1F53;
/// Second round multiplier.
pub const PHILOX_M1: u32 = 0xCD9E_8D57;
/// Key increment of the first key word (golden ratio).
pub const PHILOX_W0: u32 = 0x9E37_79B9;
/// Key increment of the second key word (sqrt(3) - 1).
pub const PHILOX_W1: u32 = 0xBB67_AE85;
/// Number of rounds (the "-10" in Philox4x32-10).
pub const PHILOX_ROUNDS: usize = 10;

/// High and low words of the 64-bit product; lowers to `mul.hi.u32` + `mul.lo.u32` on nvptx.
#[inline(always)]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let product = a as u64 * b as u64;
    ((product >> 32) as u32, product as u32)
}

#[inline(always)]
fn round(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (hi0, lo0) = mulhilo(PHILOX_M0, ctr[0]);
    let (hi1, lo1) = mulhilo(PHILOX_M1, ctr[2]);
    [hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0]
}

/// Philox4x32 with 10 rounds: 128 random bits for a 128-bit counter under a 64-bit key.
#[inline(always)]
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut ctr = ctr;
    let mut key = key;
    ctr = round(ctr, key);
    let mut i = 1;
    while i < PHILOX_ROUNDS {
        key = [key[0].wrapping_add(PHILOX_W0), key[1].wrapping_add(PHILOX_W1)];
        ctr = round(ctr, key);
        i += 1;
    }
    ctr
}

#[cfg(test)]
mod tests {
    use super::*;

    // Random123 `tests/kat_vectors`, philox4x32_10 (the published known-answer vectors).
    pub const KAT: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
        ([0, 0, 0, 0], [0, 0], [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]),
        ([0xffffffff; 4], [0xffffffff; 2], [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]),
        (
            [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
            [0xa4093822, 0x299f31d0],
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
        ),
    ];

    #[test]
    fn known_answers() {
        for (ctr, key, want) in KAT {
            assert_eq!(philox4x32_10(ctr, key), want, "ctr {ctr:08x?} key {key:08x?}");
        }
    }

    #[test]
    fn every_output_bit_depends_on_the_counter() {
        // Flipping one counter bit must change about half of the 128 output bits.
        let base = philox4x32_10([1, 2, 3, 4], [5, 6]);
        for bit in 0..128 {
            let mut ctr = [1u32, 2, 3, 4];
            ctr[bit / 32] ^= 1 << (bit % 32);
            let out = philox4x32_10(ctr, [5, 6]);
            let flipped: u32 = (0..4).map(|i| (out[i] ^ base[i]).count_ones()).sum();
            assert!((32..=96).contains(&flipped), "bit {bit}: {flipped} output bits changed");
        }
    }
}
