//! Gumbel noise from Philox bits, keyed only by what identifies a draw.
//!
//! # Noise key
//! One Philox call yields four 32-bit words, used for four consecutive vocabulary entries:
//!
//! | Philox word | value |
//! |---|---|
//! | key\[0\], key\[1\] | seed, low and high 32 bits |
//! | ctr\[0\] | global vocab index / 4 (`v >> 2`) |
//! | ctr\[1\] | sample index (0 for the first sample of a row) |
//! | ctr\[2\], ctr\[3\] | the row's stream id, low and high 32 bits |
//!
//! and entry `v` takes word `v & 3`. Nothing else enters the key: not the tile, block, thread or batch
//! position. A row's draw is therefore the same for any tile size, any batch it is placed in, any
//! position in that batch, and any split of the vocabulary across devices. A decode loop gives each
//! (request, step) its own stream id ([`stream_id`]) or its own seed.
//!
//! # Precision
//! The uniform has 23 random bits: `u = (k + 0.5) / 2^23` for `k = x >> 9`, so `u` lies in
//! `[2^-24, 1 - 2^-24]`, never 0 or 1, and every value is exact in f32. The Gumbel variate
//! `g = -ln(-ln u)` therefore lies in `[GUMBEL_MIN, GUMBEL_MAX]` ≈ `[-2.81, 16.64]`; the probability
//! mass cut off by the discretisation is below 1e-7 per draw.
//!
//! The logarithm is [`ln`], a Cephes-style polynomial written with plain IEEE f32 multiplies and adds
//! only (no fused multiply-add, no `lg2.approx`, no libdevice). Its relative error is below 2.5e-7 on
//! the positive normal floats (tested against f64), and — more important here — it rounds identically
//! on the host and on the GPU, so the CPU backend and the PTX kernels draw bit-identical noise.

use crate::philox::philox4x32_10;

/// Smallest uniform draw: `0.5 / 2^23 = 2^-24`.
pub const UNIFORM_MIN: f32 = 1.0 / 16_777_216.0;
/// Largest uniform draw: `1 - 2^-24`.
pub const UNIFORM_MAX: f32 = 1.0 - 1.0 / 16_777_216.0;
/// Smallest Gumbel value the generator can produce (`-ln(-ln(2^-24))`), rounded down.
pub const GUMBEL_MIN: f32 = -2.812;
/// Largest Gumbel value the generator can produce (`-ln(-ln(1 - 2^-24))`), rounded up.
pub const GUMBEL_MAX: f32 = 16.636;

/// Uniform in the open interval (0, 1) from one 32-bit draw: `((x >> 9) + 0.5) * 2^-23`.
#[inline(always)]
pub fn uniform_open(x: u32) -> f32 {
    ((x >> 9) as f32 + 0.5) * (1.0 / 8_388_608.0)
}

const SQRT_HALF: f32 = core::f32::consts::FRAC_1_SQRT_2;

/// Natural logarithm of a positive, normal, finite f32 (the only inputs the Gumbel transform makes).
///
/// Cephes `logf`: `x = m·2^e` with `m ∈ [√½, √2)`, `ln x = e·ln 2 + ln(1 + f)` with a degree-9
/// polynomial in `f = m - 1` and `ln 2` split in two parts. Plain multiplies and adds, evaluated in
/// the written order: the PTX build disables FMA contraction, so host and device round identically.
/// Zero, subnormal, negative, infinite or NaN inputs give meaningless results.
#[inline(always)]
pub fn ln(x: f32) -> f32 {
    let bits = x.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 126;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000); // m in [0.5, 1)
    if m < SQRT_HALF {
        e -= 1;
        m = m + m - 1.0;
    } else {
        m -= 1.0;
    }
    let z = m * m;
    let mut p = 7.037_683_6e-2;
    p = p * m - 1.151_461_0e-1;
    p = p * m + 1.167_699_9e-1;
    p = p * m - 1.242_014_1e-1;
    p = p * m + 1.424_932_3e-1;
    p = p * m - 1.666_805_8e-1;
    p = p * m + 2.000_071_5e-1;
    p = p * m - 2.499_999_4e-1;
    p = p * m + 3.333_333_1e-1;
    let ef = e as f32;
    let mut y = p * m * z;
    y += -2.121_944_4e-4 * ef;
    y += -0.5 * z;
    let r = m + y;
    r + 0.693_359_4 * ef
}

/// Gumbel(0, 1) variate `-ln(-ln u)` from one 32-bit draw.
#[inline(always)]
pub fn gumbel(x: u32) -> f32 {
    -ln(-ln(uniform_open(x)))
}

/// A stream id for (request, decode step): `request << 32 | step`.
///
/// Any u64 works as a stream id; this helper just gives every (request, step) its own stream so that a
/// request keeps its noise sequence when batches are reshuffled between steps.
#[inline(always)]
pub const fn stream_id(request: u32, step: u32) -> u64 {
    ((request as u64) << 32) | step as u64
}

/// The noise of one row: seed, the row's stream id and the sample index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowNoise {
    /// Philox key (the sampling seed).
    pub seed: u64,
    /// The row's stream id (by default its row index in the batch).
    pub stream: u64,
    /// Which sample of this row (0 for the first).
    pub sample: u32,
}

impl RowNoise {
    /// Gumbel noise of vocab entries `4·group .. 4·group + 4` (one Philox call).
    #[inline(always)]
    pub fn gumbel4(&self, group: u32) -> [f32; 4] {
        let bits = philox4x32_10(
            [group, self.sample, self.stream as u32, (self.stream >> 32) as u32],
            [self.seed as u32, (self.seed >> 32) as u32],
        );
        [gumbel(bits[0]), gumbel(bits[1]), gumbel(bits[2]), gumbel(bits[3])]
    }

    /// Gumbel noise of one vocab entry (the same bits as [`Self::gumbel4`] gives it).
    #[inline(always)]
    pub fn gumbel_at(&self, v: u32) -> f32 {
        self.gumbel4(v >> 2)[(v & 3) as usize]
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn uniform_never_reaches_zero_or_one() {
        assert_eq!(uniform_open(0), UNIFORM_MIN);
        assert_eq!(uniform_open(u32::MAX), UNIFORM_MAX);
        assert!(UNIFORM_MIN > 0.0 && UNIFORM_MAX < 1.0);
        assert_eq!(uniform_open(1 << 9) - uniform_open(0), 1.0 / 8_388_608.0);
    }

    #[test]
    fn gumbel_of_extreme_draws_is_finite_and_inside_bounds() {
        for x in [0u32, 1, 511, 512, 1 << 31, u32::MAX - 511, u32::MAX - 1, u32::MAX] {
            let g = gumbel(x);
            assert!(g.is_finite(), "gumbel({x:#x}) = {g}");
            assert!((GUMBEL_MIN..=GUMBEL_MAX).contains(&g), "gumbel({x:#x}) = {g}");
        }
        let lo = -(-(UNIFORM_MIN as f64).ln()).ln();
        let hi = -(-(UNIFORM_MAX as f64).ln()).ln();
        assert!((gumbel(0) as f64 - lo).abs() < 1e-5, "{} vs {lo}", gumbel(0));
        assert!((gumbel(u32::MAX) as f64 - hi).abs() < 1e-3, "{} vs {hi}", gumbel(u32::MAX));
        assert!(GUMBEL_MIN as f64 <= lo && GUMBEL_MAX as f64 >= hi);
    }

    #[test]
    fn ln_matches_f64_to_a_few_ulps() {
        // Sweep every 97th float from 2^-126 to 2^127: exercises exponent handling and the
        // sqrt(1/2) split.
        let mut worst = 0.0f64;
        let mut bits = 0x0080_0000u32;
        while bits < 0x7f80_0000 {
            let x = f32::from_bits(bits);
            let want = (x as f64).ln();
            let got = ln(x) as f64;
            let err = if want.abs() > 1e-3 { ((got - want) / want).abs() } else { (got - want).abs() };
            worst = worst.max(err);
            bits += 97;
        }
        assert!(worst < 2.5e-7, "worst relative error {worst:e}");
    }

    #[test]
    fn ln_near_one_keeps_relative_accuracy() {
        for k in 1..2000u32 {
            let x = 1.0 - k as f32 * f32::EPSILON / 2.0;
            let want = (x as f64).ln();
            let got = ln(x) as f64;
            assert!(((got - want) / want).abs() < 2.5e-7, "ln({x}) = {got}, want {want}");
        }
    }

    #[test]
    fn gumbel_moments() {
        // Mean of Gumbel(0,1) is the Euler–Mascheroni constant, variance pi^2/6.
        let noise = RowNoise { seed: 0x5eed_0001, stream: 7, sample: 0 };
        let n = 1 << 20;
        let (mut s, mut s2) = (0.0f64, 0.0f64);
        for v in 0..n {
            let g = noise.gumbel_at(v) as f64;
            s += g;
            s2 += g * g;
        }
        let mean = s / n as f64;
        let var = s2 / n as f64 - mean * mean;
        // Standard error of the mean: sqrt(1.645 / 2^20) = 1.25e-3.
        assert!((mean - 0.577_215_66).abs() < 6e-3, "mean {mean}");
        assert!((var - 1.644_934).abs() < 2e-2, "variance {var}");
    }

    #[test]
    fn gumbel_at_agrees_with_gumbel4_and_key_fields_matter() {
        let a = RowNoise { seed: 1, stream: 2, sample: 3 };
        let g4 = a.gumbel4(10);
        for j in 0..4 {
            assert_eq!(a.gumbel_at(40 + j).to_bits(), g4[j as usize].to_bits());
        }
        for other in
            [RowNoise { seed: 1 << 40, ..a }, RowNoise { stream: 2 | 1 << 33, ..a }, RowNoise { sample: 4, ..a }]
        {
            assert_ne!(other.gumbel4(10), g4, "{other:?}");
        }
    }

    #[test]
    fn stream_id_packs_request_and_step() {
        assert_eq!(stream_id(3, 9), (3u64 << 32) | 9);
        assert_ne!(stream_id(1, 0), stream_id(0, 1));
    }
}
