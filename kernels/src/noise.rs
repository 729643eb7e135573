//! Gumbel noise from Philox bits, keyed only by what identifies a draw.
//!
//! # Noise key
//! One Philox call yields four 32-bit words, used for four consecutive vocabulary entries:
//!
//! | Philox word | value |
//! |---|---|
//! | key\[0\], key\[1\] | seed, low and high 32 bits |
//! | ctr\[0\] | global vocab index / 4 (`v >> 2`) |
//! | ctr\[1\] | sample index (0 for the first sample of a row; below 2^31) |
//! | ctr\[2\], ctr\[3\] | the row's stream id, low and high 32 bits |
//!
//! and entry `v` takes word `v & 3`. A group whose words include an extreme one (below 2^8 or above
//! 2^32 − 1 − 2^8, probability 2^-23 per word) makes a second call, the *refinement*, with the same key
//! and counter except that the top bit of the sample word is set:
//!
//! | refinement counter | value |
//! |---|---|
//! | ctr\[0\] | global vocab index / 4 |
//! | ctr\[1\] | sample index `| 0x8000_0000` |
//! | ctr\[2\], ctr\[3\] | the row's stream id, low and high 32 bits |
//!
//! and an extreme word takes the refinement word of its own lane as 32 more low bits. Sample indices
//! must therefore be below 2^31 (the host validates this), so that the two counter spaces never meet.
//!
//! Nothing else enters the key: not the tile, block, thread or batch position. A row's draw is
//! therefore the same for any tile size, any batch it is placed in, any position in that batch, and any
//! split of the vocabulary across devices. A decode loop gives each (request, step) its own stream id
//! ([`stream_id`]) or its own seed.
//!
//! # Construction and precision
//! A word `x` splits the unit interval in halves. With `j = x` in the lower half (`x < 2^31`) and
//! `j = !x = 2^32 − 1 − x` in the upper half, the draw's distance from the nearer end (0 or 1) is
//!
//! - `t = (j + 0.5) · 2^-32` for an ordinary word (`j ≥ 2^8`), and
//! - `t = (j · 2^32 + x₂ + 0.5) · 2^-64` for an extreme word (`j < 2^8`, `x₂` its refinement word),
//!
//! so `t ∈ [2^-65, 1/2]`, the midpoint of a bucket of width 2^-32 (2^-64 within 2^-24 of either end),
//! rounded once to f32. The uniform is `u = t` in the lower half and `u = 1 − t` in the upper half,
//! and `E = -ln u` (an Exponential(1) variate) is computed from `t` with full relative precision at
//! both ends:
//!
//! - lower half: `E = -ln t`;
//! - upper half: `E = -ln(1 − t) = -log1p(-t)`, with the Cephes reduction `ln x = e·ln 2 + ln(1 + f)`
//!   taken as `e = 0, f = -t` for `t ≤ 1 − √½` (exact: `1 − t` is never rounded) and as
//!   `e = −1, f = 1 − 2t` (exact too) for larger `t`.
//!
//! Both reductions are computed and one is selected (no branch), then one polynomial evaluates the
//! logarithm; the Gumbel variate is `g = -ln E`. So `E ∈ [≈2^-65, 65·ln 2]` and
//! `g ∈ [GUMBEL_MIN, GUMBEL_MAX]` ≈ `[-3.81, 45.06]`. What that reach means for sampling (the
//! probability a row can lose, below 1e-13 for V ≤ 2^18) is derived in docs/design/how-the-kernel-works.md (Precision).
//!
//! The logarithm is [`ln`], a Cephes-style polynomial written with plain IEEE f32 multiplies and adds
//! only (no fused multiply-add, no `lg2.approx`, no libdevice). Its relative error is below 2.5e-7 on
//! the positive normal floats (tested against f64), and — more important here — it rounds identically
//! on the host and on the GPU, so the CPU backend and the PTX kernels draw bit-identical noise.

use crate::philox::philox4x32_10;

/// Smallest distance `t` of a draw from 0 or from 1: `0.5 · 2^-64 = 2^-65` (exact in f32). The uniform
/// draw `u` lies in `[2^-65, 1 − 2^-65]` (the upper end is not representable in f32; the noise never
/// forms it, see the module documentation).
pub const UNIFORM_MIN: f32 = 1.0 / 36_893_488_147_419_103_232.0; // 2^-65
/// Smallest Gumbel value the generator can produce (`-ln(65·ln 2)`, at `u = 2^-65`), rounded down.
pub const GUMBEL_MIN: f32 = -3.808;
/// Largest Gumbel value the generator can produce (`-ln(-ln(1 − 2^-65))` = `65·ln 2`), rounded up.
pub const GUMBEL_MAX: f32 = 45.055;
/// Words `j` (distance from the nearer end of the word range) below this are refined with a second
/// Philox call: 2^8, so refined draws lie within `2^8 · 2^-32 = 2^-24` of 0 or 1.
pub const REFINE_BELOW: u32 = 1 << 8;
/// The bit set in the sample word of the refinement call's counter.
pub const REFINE_SAMPLE_BIT: u32 = 0x8000_0000;

/// 2^-32.
const TWO_POW_M32: f32 = 1.0 / 4_294_967_296.0;
/// 2^-64.
const TWO_POW_M64: f32 = TWO_POW_M32 * TWO_POW_M32;
/// `1 − √½`, the largest `t` whose `1 − t` the Cephes reduction keeps at exponent 0.
const ONE_MINUS_SQRT_HALF: f32 = 1.0 - SQRT_HALF;

/// Uniform in the open interval (0, 1) from one 32-bit draw with 23 random bits:
/// `((x >> 9) + 0.5) · 2^-23`, in `[2^-24, 1 − 2^-24]`.
///
/// Not used by the Gumbel noise (see [`RowNoise::gumbel4`]); the multinomial baseline kernel draws its
/// one uniform per row with it.
#[inline(always)]
pub fn uniform_open(x: u32) -> f32 {
    ((x >> 9) as f32 + 0.5) * (1.0 / 8_388_608.0)
}

const SQRT_HALF: f32 = core::f32::consts::FRAC_1_SQRT_2;

/// Cephes range reduction of a positive normal f32: `(e, f)` with `x = 2^e · (1 + f)`, `e` as f32 and
/// `f ∈ [√½ − 1, √2 − 1)`. Exact (no rounding).
#[inline(always)]
fn reduce(x: f32) -> (f32, f32) {
    let bits = x.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 126;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000); // m in [0.5, 1)
    if m < SQRT_HALF {
        e -= 1;
        m = m + m - 1.0;
    } else {
        m -= 1.0;
    }
    (e as f32, m)
}

/// `e · ln 2 + ln(1 + f)` for `f ∈ [√½ − 1, √2 − 1]` (Cephes `logf`'s polynomial, `ln 2` in two parts).
#[inline(always)]
fn ln_reduced(ef: f32, m: f32) -> f32 {
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
    let mut y = p * m * z;
    y += -2.121_944_4e-4 * ef;
    y += -0.5 * z;
    let r = m + y;
    r + 0.693_359_4 * ef
}

/// Natural logarithm of a positive, normal, finite f32 (the only inputs the Gumbel transform makes).
///
/// Cephes `logf`: `x = m·2^e` with `m ∈ [√½, √2)`, `ln x = e·ln 2 + ln(1 + f)` with a degree-9
/// polynomial in `f = m - 1` and `ln 2` split in two parts. Plain multiplies and adds, evaluated in
/// the written order: the PTX build disables FMA contraction, so host and device round identically.
/// Zero, subnormal, negative, infinite or NaN inputs give meaningless results.
#[inline(always)]
pub fn ln(x: f32) -> f32 {
    let (e, f) = reduce(x);
    ln_reduced(e, f)
}

/// Whether word `x` is extreme (within 2^8 of either end of the u32 range) and so refined.
#[inline(always)]
pub fn is_extreme(x: u32) -> bool {
    x.wrapping_add(REFINE_BELOW) < 2 * REFINE_BELOW
}

/// `j`: the word's distance from the nearer end of the u32 range (`x` or `!x`).
#[inline(always)]
fn fold(x: u32) -> u32 {
    x ^ ((x as i32 >> 31) as u32)
}

/// Distance `t = (j + 0.5) · 2^-32` of an unrefined draw from the nearer end of (0, 1).
#[inline(always)]
pub fn tail_distance(x: u32) -> f32 {
    (fold(x) as f32 + 0.5) * TWO_POW_M32
}

/// Distance `t = (j · 2^32 + x₂ + 0.5) · 2^-64` of a refined draw (`x` extreme, `x2` its refinement
/// word) from the nearer end of (0, 1). Meaningful only for extreme `x`.
#[inline(always)]
pub fn tail_distance_refined(x: u32, x2: u32) -> f32 {
    ((((fold(x) as u64) << 32) | x2 as u64) as f32 + 0.5) * TWO_POW_M64
}

/// `E = -ln u` for a draw of word `x` (which picks the half: `u = t` or `u = 1 − t`) at distance `t`
/// from the nearer end, with full relative precision at both ends. Branch-free: both range reductions
/// are formed and one is selected, then one polynomial.
#[inline(always)]
pub fn neg_ln_uniform(x: u32, t: f32) -> f32 {
    let lower = (x as i32) >= 0;
    // Lower half: u = t, reduced from its bits.
    let (e_lo, f_lo) = reduce(t);
    // Upper half: ln(1 − t) with 1 − t = 2^e (1 + f), both parts exact.
    let far = t > ONE_MINUS_SQRT_HALF;
    let e_hi = if far { -1.0 } else { 0.0 };
    let f_hi = if far { 1.0 - (t + t) } else { -t };
    let (e, f) = if lower { (e_lo, f_lo) } else { (e_hi, f_hi) };
    -ln_reduced(e, f)
}

/// Gumbel(0, 1) variate `-ln(-ln u)` for a draw of word `x` at distance `t` from the nearer end.
#[inline(always)]
pub fn gumbel_of(x: u32, t: f32) -> f32 {
    -ln(neg_ln_uniform(x, t))
}

/// The distances of the four draws of a group, refined where a word is extreme (`x2` the refinement
/// call's words). The same arithmetic as the common path for the other words.
#[inline(always)]
fn refined_distances(x: [u32; 4], x2: [u32; 4]) -> [f32; 4] {
    let mut t = [0.0f32; 4];
    let mut l = 0;
    while l < 4 {
        t[l] = if is_extreme(x[l]) { tail_distance_refined(x[l], x2[l]) } else { tail_distance(x[l]) };
        l += 1;
    }
    t
}

/// The rare path of [`gumbel4_at`]: the refinement call and the refined distances.
///
/// Inlined on purpose. Out of line (`#[inline(never)]`, one `.func` for the whole kernel) every fused
/// kernel got a 48-byte stack frame for the call's parameters, most gained registers, and
/// `fused_sample_wgmma_n128` spilled 52 bytes (ptxas 12.9, sm_90a); inlined, the kernels keep their
/// stack frames and do not spill, at the price of a second Philox body per unrolled group (cold code,
/// behind one warp-uniform-in-practice branch).
#[inline(always)]
fn refine(ctr: [u32; 4], key: [u32; 2], x: [u32; 4]) -> [f32; 4] {
    let x2 = philox4x32_10([ctr[0], ctr[1] | REFINE_SAMPLE_BIT, ctr[2], ctr[3]], key);
    refined_distances(x, x2)
}

/// The four draws of Philox counter `ctr` under `key`: their words `x` and distances `t` from the
/// nearer end of (0, 1), refining extreme words with a second call (the counter with
/// [`REFINE_SAMPLE_BIT`] set in `ctr[1]`). Draw `l`'s noise is `gumbel_of(x[l], t[l])`, bounded above by
/// `gumbel_bound(x[l], t[l])`.
#[inline(always)]
pub fn draws4_at(ctr: [u32; 4], key: [u32; 2]) -> ([u32; 4], [f32; 4]) {
    let (x, mut t, extreme) = draws4_unrefined_at(ctr, key);
    // One test per group; taken with probability 4 · 2^-23.
    if extreme {
        t = refine(ctr, key, x);
    }
    (x, t)
}

/// [`draws4_at`] without the refinement: the words, their unrefined distances [`tail_distance`], and
/// whether any word is extreme (then its distance is not the draw's). One Philox call, no branch.
#[inline(always)]
pub fn draws4_unrefined_at(ctr: [u32; 4], key: [u32; 2]) -> ([u32; 4], [f32; 4], bool) {
    let x = philox4x32_10(ctr, key);
    let t = [tail_distance(x[0]), tail_distance(x[1]), tail_distance(x[2]), tail_distance(x[3])];
    (x, t, is_extreme(x[0]) | is_extreme(x[1]) | is_extreme(x[2]) | is_extreme(x[3]))
}

/// Draw `k % 4` of a group's draws `(x, t)`, by selects on the bits of `k` (no array index, so nothing
/// goes to local memory on the GPU).
#[inline(always)]
pub fn select_draw((x, t): ([u32; 4], [f32; 4]), k: u32) -> (u32, f32) {
    let odd = k & 1 != 0;
    let lo = if odd { (x[1], t[1]) } else { (x[0], t[0]) };
    let hi = if odd { (x[3], t[3]) } else { (x[2], t[2]) };
    if k & 2 != 0 { hi } else { lo }
}

/// Gumbel noise of the four words of Philox counter `ctr` under `key` ([`draws4_at`], then
/// [`gumbel_of`]). [`RowNoise::gumbel4`] is this function of the counter in the module documentation.
#[inline(always)]
pub fn gumbel4_at(ctr: [u32; 4], key: [u32; 2]) -> [f32; 4] {
    let (x, t) = draws4_at(ctr, key);
    [gumbel_of(x[0], t[0]), gumbel_of(x[1], t[1]), gumbel_of(x[2], t[2]), gumbel_of(x[3], t[3])]
}

/// Slack added to [`gumbel_bound`] for the roundings of the computed noise and of the bound itself
/// (each below 2e-5 nats; see [`gumbel_bound`]).
pub const GUMBEL_BOUND_SLACK: f32 = 1.0 / 256.0;
/// `-ln(ln 2)` (0.366 513 …) rounded up, plus [`GUMBEL_BOUND_SLACK`]: the bound of a lower-half draw.
const LOWER_HALF_BOUND: f32 = 0.366_514 + GUMBEL_BOUND_SLACK;

/// An upper bound of the noise `gumbel_of(x, t)` of a draw, for a few integer and f32 operations
/// instead of two logarithms: the fused epilogue skips the noise of a logit that cannot beat its
/// row's candidate even with this bound ([`crate::epilogue::update_groups_above`]).
///
/// - Lower half (`u = t ≤ 1/2`): `E = -ln t ≥ ln 2`, so `g = -ln E ≤ -ln(ln 2)`.
/// - Upper half (`u = 1 − t`): `E = -ln(1 − t) ≥ t`, so `g ≤ -ln t = ln 2 · (−log₂ t)`. With
///   `t = 2^e · m`, `m ∈ [1, 2)`, the bits of the f32 `t` read as a number are `2^23 · (e + 127 + (m − 1))`
///   and `m − 1 ≤ log₂ m` on `[1, 2]`, so `−log₂ t ≤ 127 − bits · 2^-23` (at most 0.086 above it).
///
/// Both hold for every `t` the generator forms, refined or not (`t ∈ [2^-65, 1/2]`, normal floats).
/// The computed noise exceeds the exact `-ln(-ln u)` of its `t` by less than 2e-5 (the logarithm's
/// relative error below 2.5e-7, tested; `|g| < 46`), and the bound's own f32 evaluation (the bits'
/// conversion, a multiply and a subtraction, each within 2^-24 relative of values below 2^30, 89 and
/// 89, with the two constants rounded to nearest) rounds by less than 2e-5; [`GUMBEL_BOUND_SLACK`]
/// covers both with a factor of 100 to spare. The constants are folded (`127·ln 2 + slack − bits ·
/// (ln 2 · 2^-23)`: a conversion, a multiply and an add per entry). The tests
/// `gumbel_bound_holds_on_every_word` and `gumbel_bound_is_above_every_draw` check the bound on every
/// unrefined 32-bit word (least margin about 3.9e-3: the slack) and on refined draws.
#[inline(always)]
pub fn gumbel_bound(x: u32, t: f32) -> f32 {
    let upper = UPPER_HALF_BOUND_AT_ONE - t.to_bits() as f32 * UPPER_HALF_BOUND_PER_BIT;
    if (x as i32) >= 0 { LOWER_HALF_BOUND } else { upper }
}

/// `127 · ln 2 + GUMBEL_BOUND_SLACK`: [`gumbel_bound`]'s upper-half bound at `bits(t) = 0`.
const UPPER_HALF_BOUND_AT_ONE: f32 = 127.0 * core::f32::consts::LN_2 + GUMBEL_BOUND_SLACK;
/// `ln 2 · 2^-23`: what one unit of `bits(t)` takes off the upper-half bound.
const UPPER_HALF_BOUND_PER_BIT: f32 = core::f32::consts::LN_2 / 8_388_608.0;

/// [`gumbel4_at`] as a function of the words: `x` the group's Philox words, `x2` the refinement call's
/// words (used only where `x` is extreme).
#[inline(always)]
pub fn gumbel4_of_words(x: [u32; 4], x2: [u32; 4]) -> [f32; 4] {
    let t = refined_distances(x, x2);
    [gumbel_of(x[0], t[0]), gumbel_of(x[1], t[1]), gumbel_of(x[2], t[2]), gumbel_of(x[3], t[3])]
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
    /// Which sample of this row (0 for the first); below 2^31 (the top bit keys the refinement call).
    pub sample: u32,
}

impl RowNoise {
    /// The Philox counter of group `group` (the first call; see the module documentation).
    #[inline(always)]
    pub fn counter(&self, group: u32) -> [u32; 4] {
        [group, self.sample, self.stream as u32, (self.stream >> 32) as u32]
    }

    /// The Philox key.
    #[inline(always)]
    pub fn key(&self) -> [u32; 2] {
        [self.seed as u32, (self.seed >> 32) as u32]
    }

    /// Gumbel noise of vocab entries `4·group .. 4·group + 4` (one Philox call, and a second for the
    /// rare group with an extreme word).
    #[inline(always)]
    pub fn gumbel4(&self, group: u32) -> [f32; 4] {
        gumbel4_at(self.counter(group), self.key())
    }

    /// The draws (words and distances) of vocab entries `4·group .. 4·group + 4` ([`draws4_at`]).
    #[inline(always)]
    pub fn draws4(&self, group: u32) -> ([u32; 4], [f32; 4]) {
        draws4_at(self.counter(group), self.key())
    }

    /// The group's words, their *unrefined* distances [`tail_distance`], and whether any word is
    /// extreme (then the distances of the extreme words are not the draws': [`Self::draws4`] refines
    /// them). One Philox call and no branch: the screening pass of
    /// [`crate::epilogue::update_groups_above`].
    #[inline(always)]
    pub fn draws4_unrefined(&self, group: u32) -> ([u32; 4], [f32; 4], bool) {
        draws4_unrefined_at(self.counter(group), self.key())
    }

    /// The draw (word and distance, refined where extreme) of vocab entry `v`: [`Self::draws4`] of its
    /// group, entry `v & 3` taken by [`select_draw`].
    #[inline(always)]
    pub fn draw_at(&self, v: u32) -> (u32, f32) {
        select_draw(self.draws4(v >> 2), v)
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
    use std::vec::Vec;

    use crate::test_rng::SplitMix64 as Mix;

    /// `t` of the construction in f64, before any f32 rounding.
    fn t_exact(x: u32, x2: u32) -> f64 {
        let j = fold(x) as f64;
        if is_extreme(x) {
            (j * 4_294_967_296.0 + x2 as f64 + 0.5) * 2f64.powi(-64)
        } else {
            (j + 0.5) * 2f64.powi(-32)
        }
    }

    /// `E = -ln u` of the construction in f64, from the f32 `t` the noise uses.
    fn e_f64(x: u32, t: f32) -> f64 {
        let t = t as f64;
        if (x as i32) >= 0 { -t.ln() } else { -(-t).ln_1p() }
    }

    /// Words covering both halves and both ends: a stride sweep, the ends, the refinement boundary.
    fn test_words() -> Vec<u32> {
        let mut w: Vec<u32> = (0..=u32::MAX).step_by(65_537).collect();
        for j in (0..600u32).chain([1 << 20, (1 << 24) - 1, 1 << 24, (1 << 31) - 1]) {
            w.push(j);
            w.push(!j);
        }
        w
    }

    #[test]
    fn uniform_open_is_the_baselines_23_bit_uniform() {
        assert_eq!(uniform_open(0), 1.0 / 16_777_216.0);
        assert_eq!(uniform_open(u32::MAX), 1.0 - 1.0 / 16_777_216.0);
        assert_eq!(uniform_open(1 << 9) - uniform_open(0), 1.0 / 8_388_608.0);
    }

    #[test]
    fn refinement_is_triggered_exactly_for_extreme_words() {
        for x in (0..=u32::MAX).step_by(4099).chain(0..1024).chain((0..1024).map(|j| !j)) {
            let want = !(REFINE_BELOW..=u32::MAX - REFINE_BELOW).contains(&x);
            assert_eq!(is_extreme(x), want, "{x:#x}");
        }
        assert!(is_extreme(255) && !is_extreme(256) && is_extreme(u32::MAX - 255) && !is_extreme(u32::MAX - 256));
        // The refined grid continues the unrefined one: the largest refined t stays below the smallest
        // unrefined t, in both halves.
        for x in [255u32, u32::MAX - 255] {
            assert!(tail_distance_refined(x, u32::MAX) < tail_distance(if x == 255 { 256 } else { x - 1 }));
        }
        assert_eq!(tail_distance_refined(0, 0), UNIFORM_MIN);
        assert_eq!(tail_distance_refined(u32::MAX, 0), UNIFORM_MIN);
    }

    #[test]
    fn neg_ln_uniform_has_full_relative_precision_at_both_ends() {
        let mut rng = Mix(0x0e1e);
        let mut worst = 0.0f64;
        let mut check = |x: u32, x2: u32| {
            let t = if is_extreme(x) { tail_distance_refined(x, x2) } else { tail_distance(x) };
            // t is the construction's t rounded to f32 (the word's conversion, then the + 0.5).
            assert!(((t as f64 - t_exact(x, x2)) / t_exact(x, x2)).abs() <= 2f64.powi(-23), "{x:#x} {x2:#x}");
            let got = neg_ln_uniform(x, t) as f64;
            let want = e_f64(x, t);
            assert!(got > 0.0, "E({x:#x}, {x2:#x}) = {got}");
            worst = worst.max(((got - want) / want).abs());
        };
        for x in test_words() {
            check(x, rng.word());
        }
        for _ in 0..100_000 {
            let j = rng.word() % REFINE_BELOW;
            check(j, rng.word());
            check(!j, rng.word());
        }
        for x2 in [0, 1, 2, u32::MAX] {
            for j in [0u32, 1, 255] {
                check(j, x2);
                check(!j, x2);
            }
        }
        assert!(worst < 5e-7, "worst relative error of E: {worst:e}");
    }

    #[test]
    fn gumbel_reach_covers_the_refined_extremes() {
        let hi = gumbel_of(u32::MAX, tail_distance_refined(u32::MAX, 0));
        let lo = gumbel_of(0, tail_distance_refined(0, 0));
        let hi_want = -(-(-(UNIFORM_MIN as f64)).ln_1p()).ln();
        let lo_want = -(-(UNIFORM_MIN as f64).ln()).ln();
        assert!((hi as f64 - hi_want).abs() < 1e-5 * hi_want, "{hi} vs {hi_want}");
        assert!((lo as f64 - lo_want).abs() < 1e-5, "{lo} vs {lo_want}");
        assert!(GUMBEL_MIN as f64 <= lo_want && (lo_want - GUMBEL_MIN as f64) < 1e-3);
        assert!(GUMBEL_MAX as f64 >= hi_want && (GUMBEL_MAX as f64 - hi_want) < 1e-3);
        assert!(hi > 45.0 && lo < -3.8, "reach [{lo}, {hi}]");
        // Every word stays inside the bounds, and g does not fall as u rises through both halves and the
        // refined grids.
        let mut rng = Mix(0x5eac);
        for x in test_words() {
            let x2 = rng.word();
            let t = if is_extreme(x) { tail_distance_refined(x, x2) } else { tail_distance(x) };
            let g = gumbel_of(x, t);
            assert!(g.is_finite() && (GUMBEL_MIN..=GUMBEL_MAX).contains(&g), "g({x:#x}) = {g}");
        }
        let g_of = |x: u32, x2: u32| gumbel4_of_words([x; 4], [x2; 4])[0];
        let mut prev = f32::NEG_INFINITY;
        let ladder = (0..4u32)
            .flat_map(|j| [0u32, 1 << 31, u32::MAX].map(move |x2| (j, x2)))
            .chain([(255, u32::MAX), (256, 0), (1000, 0), (1 << 30, 0)])
            .chain([(!(1u32 << 30), 0), (!1000u32, 0), (!256u32, 0)])
            .chain((0..4u32).rev().flat_map(|j| [u32::MAX, 1 << 31, 0].map(move |x2| (!j, x2))));
        for (x, x2) in ladder {
            let g = g_of(x, x2);
            assert!(g >= prev, "g({x:#x}, {x2:#x}) = {g} below {prev}");
            prev = g;
        }
    }

    #[test]
    fn gumbel4_matches_an_f64_reference_of_the_construction() {
        // Ordinary groups, and groups with an extreme word (found by search, then forced words).
        let key = [0x1234_5678, 0x9abc_def0];
        let mut rng = Mix(0x6e4);
        let check = |x: [u32; 4], x2: [u32; 4], got: [f32; 4]| {
            for l in 0..4 {
                let e = if (x[l] as i32) >= 0 { -t_exact(x[l], x2[l]).ln() } else { -(-t_exact(x[l], x2[l])).ln_1p() };
                let want = -e.ln();
                let err = (got[l] as f64 - want).abs();
                assert!(err <= 1e-6 * want.abs().max(1.0), "word {:#x}/{:#x}: {} vs {want}", x[l], x2[l], got[l]);
            }
        };
        for i in 0..200_000u32 {
            let ctr = [i, 3, 17, 0];
            let x = philox4x32_10(ctr, key);
            let x2 = philox4x32_10([i, 3 | REFINE_SAMPLE_BIT, 17, 0], key);
            check(x, x2, gumbel4_at(ctr, key));
        }
        for _ in 0..20_000 {
            let mut x = [rng.word(), rng.word(), rng.word(), rng.word()];
            let lane = (rng.word() % 4) as usize;
            let j = rng.word() % REFINE_BELOW;
            x[lane] = if rng.word() & 1 == 0 { j } else { !j };
            let x2 = [rng.word(), rng.word(), rng.word(), rng.word()];
            check(x, x2, gumbel4_of_words(x, x2));
        }
    }

    #[test]
    fn gumbel4_refines_with_the_second_call_exactly_when_a_word_is_extreme() {
        // Search counters until a few groups with an extreme word turn up (4 · 2^-23 per group).
        let noise = RowNoise { seed: 0xfeed_f00d_0000_0001, stream: 0x0123_4567_89ab, sample: 2 };
        let (mut found, mut group) = (0, 0u32);
        while found < 3 {
            let ctr = noise.counter(group);
            let x = philox4x32_10(ctr, noise.key());
            let x2 = philox4x32_10([ctr[0], ctr[1] | REFINE_SAMPLE_BIT, ctr[2], ctr[3]], noise.key());
            let g = noise.gumbel4(group);
            assert_eq!(g.map(f32::to_bits), gumbel4_of_words(x, x2).map(f32::to_bits), "group {group}");
            if x.iter().any(|&w| is_extreme(w)) {
                found += 1;
                for l in 0..4 {
                    let plain = gumbel_of(x[l], tail_distance(x[l]));
                    // The refined lane's noise differs from its unrefined value; the others do not.
                    assert_eq!(g[l].to_bits() == plain.to_bits(), !is_extreme(x[l]), "group {group} lane {l}");
                }
            }
            group += 1;
        }
    }

    /// Fraction of `n` forced-extreme draws (upper end, refined) whose noise beats a Gumbel rival by more
    /// than `gap`: the conditional win rate of a token `gap` nats below a single rival, given that its
    /// word is extreme (t < 2^-24). Exact: `a (1 − e^(-1/a))` with `a = 2^24 e^-gap`.
    fn conditional_tail_rate(gap: f32, n: u32, seed: u64) -> (u64, f64) {
        let mut rng = Mix(seed);
        let mut hits = 0u64;
        for _ in 0..n {
            let j = rng.word() % REFINE_BELOW;
            let tail = gumbel4_of_words([!j, 0, 0, 0], [rng.word(), 0, 0, 0])[0];
            let rival_words = [rng.word(), rng.word(), rng.word(), rng.word()];
            let rival = gumbel4_of_words(rival_words, [rng.word(); 4])[0];
            if -gap + tail > rival {
                hits += 1;
            }
        }
        let a = 2f64.powi(24) * (-(gap as f64)).exp();
        (hits, a * (1.0 - (-1.0 / a).exp()))
    }

    #[test]
    fn far_tail_noise_beats_a_rival_at_the_exact_rate() {
        // Before the refinement, g ≤ 16.64: nothing beyond 19.45 nats could win, and 18 nats won at a
        // sixth of its rate.
        for (gap, n) in [(17.0f32, 200_000u32), (21.0, 200_000), (24.0, 1_000_000), (27.0, 4_000_000)] {
            let (hits, p) = conditional_tail_rate(gap, n, 0x7a11 ^ gap.to_bits() as u64);
            let expected = n as f64 * p;
            let z = (hits as f64 - expected) / (expected * (1.0 - p)).sqrt();
            std::eprintln!("gap {gap}: {hits} hits of {n}, expected {expected:.1}, z = {z:.2}");
            assert!(expected >= 100.0, "gap {gap}: too few expected hits ({expected})");
            assert!(z.abs() < 4.5, "gap {gap}: {hits} hits, expected {expected:.1} (z = {z:.2})");
        }
    }

    /// Checks `gumbel_bound` above the computed noise of word `x` (unrefined, and refined with `x2`
    /// where extreme); returns the bound's excess.
    fn bound_excess(x: u32, x2: u32) -> f32 {
        let t = if is_extreme(x) { tail_distance_refined(x, x2) } else { tail_distance(x) };
        let (g, b) = (gumbel_of(x, t), gumbel_bound(x, t));
        assert!(g < b, "word {x:#x}/{x2:#x}: noise {g} above its bound {b}");
        b - g
    }

    #[test]
    fn gumbel_bound_is_above_every_draw() {
        let mut rng = Mix(0xb0d);
        let mut worst = 0.0f32;
        for x in test_words().into_iter().chain((0..1u32 << 16).flat_map(|j| [j, !j, j << 16, !(j << 16)])) {
            let e = bound_excess(x, rng.word());
            // Tight where skipping matters, the large noise of draws near 1 (`t ≤ 2^-6`, noise above
            // 4.1): within 0.1 nats (the bits' 0.086 of log₂ and `E ≥ t`'s `ln(1 + t/2)`).
            if (x as i32) < 0 && tail_distance(x) <= 1.0 / 64.0 {
                worst = worst.max(e);
            }
        }
        for _ in 0..200_000 {
            let j = rng.word() % REFINE_BELOW;
            bound_excess(j, rng.word());
            bound_excess(!j, rng.word());
            bound_excess(rng.word(), 0);
        }
        for x2 in [0, 1, u32::MAX] {
            bound_excess(0, x2);
            bound_excess(u32::MAX, x2);
        }
        assert!(worst < 0.1, "the bound is {worst} nats above an upper-half draw's noise");
        // The largest bound is the generator's reach, a bit above it.
        let top = gumbel_bound(u32::MAX, tail_distance_refined(u32::MAX, 0));
        assert!((GUMBEL_MAX..GUMBEL_MAX + 0.01).contains(&top), "{top}");
    }

    /// Every unrefined 32-bit word (13 s on two cores in a release build: the slow tier, run by
    /// `./x.sh test --slow` and CI); the refined ones are sampled by `gumbel_bound_is_above_every_draw`.
    #[test]
    #[ignore = "slow tier (the 2^32-word walk): ./x.sh test --slow"]
    fn gumbel_bound_holds_on_every_word() {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
        let span = (1u64 << 32) / threads + 1;
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                std::thread::spawn(move || {
                    let (lo, hi) = (k * span, ((k + 1) * span).min(1 << 32));
                    let mut worst = f32::INFINITY;
                    for x in lo..hi {
                        let x = x as u32;
                        if !is_extreme(x) {
                            let t = tail_distance(x);
                            worst = worst.min(gumbel_bound(x, t) - gumbel_of(x, t));
                        }
                    }
                    worst
                })
            })
            .collect();
        let least = handles.into_iter().map(|h| h.join().unwrap()).fold(f32::INFINITY, f32::min);
        std::println!("least margin of the bound over every unrefined word: {least:e}");
        assert!(least > 0.0);
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
    fn screening_draws_are_the_draws_where_no_word_is_extreme() {
        // `draws4_unrefined` = `draws4` with the refinement left out (and flagged), `draw_at` = entry
        // `v & 3` of `draws4`; over ordinary groups and the extreme ones found among 2^22 groups.
        let noise = RowNoise { seed: 0x5151, stream: 77, sample: 0 };
        let mut extremes = 0;
        for group in 0..1u32 << 22 {
            let (x, t, extreme) = noise.draws4_unrefined(group);
            let want = is_extreme(x[0]) | is_extreme(x[1]) | is_extreme(x[2]) | is_extreme(x[3]);
            assert_eq!(extreme, want, "group {group}");
            if extreme || group % 4096 == 0 {
                let (x_r, t_r) = noise.draws4(group);
                assert_eq!(x, x_r);
                for j in 0..4 {
                    assert_eq!(t[j].to_bits() == t_r[j].to_bits(), !is_extreme(x[j]), "group {group} entry {j}");
                    let (xa, ta) = noise.draw_at(4 * group + j as u32);
                    assert_eq!((xa, ta.to_bits()), (x_r[j], t_r[j].to_bits()));
                }
                extremes += extreme as u32;
            }
        }
        assert!(extremes >= 1, "no extreme group among 2^22");
    }

    #[test]
    fn stream_id_packs_request_and_step() {
        assert_eq!(stream_id(3, 9), (3u64 << 32) | 9);
        assert_ne!(stream_id(1, 0), stream_id(0, 1));
    }
}
