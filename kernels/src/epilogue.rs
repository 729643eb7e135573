//! The tile epilogue: logits → transformed, perturbed scores → the tile's [`Candidate`].
//!
//! The GPU kernels and the CPU backend call the same functions here, so both apply the same transform
//! to the same noise and merge with the same rule; they differ only in how the logits were summed.

use crate::candidate::Candidate;
use crate::noise::RowNoise;

/// Temperatures below this (the subnormal ones, `0 < T < 2⁻¹²⁶ ≈ 1.18e-38`) decode greedily, as
/// `T = 0` does: there `T · gumbel` would be a subnormal with too few bits to rank anything, and the
/// distribution is the argmax up to ties of subnormal logits.
pub const MIN_SAMPLING_TEMPERATURE: f32 = f32::MIN_POSITIVE;

/// The per-row logit transform applied before the noise is added.
///
/// Sampling from `softmax(y / T)` is `argmax_i (y_i / T + g_i)`, and any positive multiple of that
/// score ranks the same. The score is computed as `y · s + g · n` with `s / n = 1 / T`, chosen so that
/// it cannot overflow for any finite logit and any finite noise:
///
/// | temperature | `s` (logit scale) | `n` (noise scale) | score |
/// |---|---|---|---|
/// | `T ≥ 1` | `fl(1/T)` ≤ 1 | 1 | `y · fl(1/T) + g` |
/// | `MIN_SAMPLING_TEMPERATURE ≤ T < 1` | 1 | `T` | `y + T · g` (= `T · (y/T + g)`) |
/// | `T = 0` or `0 < T < MIN_SAMPLING_TEMPERATURE` | 1 | 0 (greedy, no noise) | `y` |
///
/// So a finite logit always gives a finite score (`|y · s| ≤ |y|` and `|g · n| < 2¹⁰³`, and a sum
/// below `f32::MAX + 2¹⁰³` rounds to at most `f32::MAX`), `±∞` gives `±∞` and NaN gives NaN. The
/// previous form `y · (1/T) + g` overflowed to `+∞` for `|y| > T · f32::MAX` (two such logits tied
/// and the lower index won) and `1/T` itself overflowed below `T ≈ 2.9e-39`. For `T ≥ 1` the score is
/// bit-identical to that form; for `T < 1` it is the same score multiplied by `T` (one rounding of
/// `T · g` instead of one of `y · fl(1/T)`), so the reported winning score is
/// `min(T, 1) · (y / T + g)`.
///
/// `#[repr(C)]`, 8 bytes: embedded in the kernels' parameter structs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transform {
    /// `fl(1/T)` (`+∞` when greedy, `T = 0` included); the logit scale is `min(inv_temperature, 1)`.
    /// The benchmark baselines read it as `1/T`.
    pub inv_temperature: f32,
    /// The noise scale `n`: 1 for `T ≥ 1`, `T` below, 0 for greedy decoding (no noise drawn).
    pub noise_scale: f32,
}

impl Transform {
    /// The transform for temperature `t`, which must be finite and ≥ 0 (the host validates it);
    /// `t = 0` (either sign) and `t < MIN_SAMPLING_TEMPERATURE` are greedy.
    #[inline]
    pub fn from_temperature(t: f32) -> Self {
        if !(t >= MIN_SAMPLING_TEMPERATURE) {
            // T = ±0, subnormal T (and, defensively, NaN or negative T): greedy.
            Self { inv_temperature: f32::INFINITY, noise_scale: 0.0 }
        } else if t < 1.0 {
            Self { inv_temperature: 1.0 / t, noise_scale: t }
        } else {
            Self { inv_temperature: 1.0 / t, noise_scale: 1.0 }
        }
    }

    /// Whether this is greedy decoding (argmax of the logits; the noise is not drawn).
    #[inline(always)]
    pub fn is_greedy(&self) -> bool {
        self.noise_scale == 0.0
    }

    /// The logit scale `s = min(1/T, 1)` (loop-invariant: computed once per tile by the compiler).
    #[inline(always)]
    pub fn logit_scale(&self) -> f32 {
        self.inv_temperature.min(1.0)
    }

    /// The perturbed score `y · s + g · n` of one logit given its noise (the epilogue passes noise 0
    /// when greedy, so the score is the logit; a `-0.0` logit scores `+0.0`, which ranks the same).
    /// Two multiplies and an add, no select: the same cost as the former select + multiply + add.
    #[inline(always)]
    pub fn score(&self, logit: f32, noise: f32) -> f32 {
        logit * self.logit_scale() + noise * self.noise_scale
    }
}

/// Epilogue for four consecutive vocab entries `v0 .. v0 + 4` (`v0 % 4 == 0`) of one row: one Philox
/// call, four scores, entries at or beyond `vocab` skipped (never scored as 0).
#[inline(always)]
pub fn update_group4(
    cand: &mut Candidate,
    logits: [f32; 4],
    v0: u32,
    vocab: u32,
    noise: &RowNoise,
    transform: &Transform,
) {
    let g = if transform.is_greedy() { [0.0; 4] } else { noise.gumbel4(v0 >> 2) };
    let mut j = 0;
    while j < 4 {
        let v = v0 + j as u32;
        if v < vocab {
            cand.update(transform.score(logits[j], g[j]), v);
        }
        j += 1;
    }
}

/// Epilogue for `N` consecutive vocab entries starting at `v0` (`v0 % 4 == 0`, `N % 4 == 0`), as one
/// GPU lane holds them: constant indices only, so the logits stay in registers.
#[inline(always)]
pub fn update_aligned<const N: usize>(
    cand: &mut Candidate,
    logits: &[f32; N],
    v0: u32,
    vocab: u32,
    noise: &RowNoise,
    transform: &Transform,
) {
    let mut q = 0;
    while q < N / 4 {
        let group = [logits[4 * q], logits[4 * q + 1], logits[4 * q + 2], logits[4 * q + 3]];
        update_group4(cand, group, v0 + 4 * q as u32, vocab, noise, transform);
        q += 1;
    }
}

/// Epilogue for a tile of consecutive logits starting at `v0` (any `v0`, any length), as the CPU backend
/// holds them. Entries at or beyond `vocab` are skipped.
pub fn update_tile(cand: &mut Candidate, logits: &[f32], v0: u32, vocab: u32, noise: &RowNoise, transform: &Transform) {
    let mut i = 0usize;
    // Unaligned head, one entry at a time (same bits as the grouped path).
    while i < logits.len() && (v0 + i as u32) % 4 != 0 {
        let v = v0 + i as u32;
        if v < vocab {
            let g = if transform.is_greedy() { 0.0 } else { noise.gumbel_at(v) };
            cand.update(transform.score(logits[i], g), v);
        }
        i += 1;
    }
    while i + 4 <= logits.len() {
        let group = [logits[i], logits[i + 1], logits[i + 2], logits[i + 3]];
        update_group4(cand, group, v0 + i as u32, vocab, noise, transform);
        i += 4;
    }
    while i < logits.len() {
        let v = v0 + i as u32;
        if v < vocab {
            let g = if transform.is_greedy() { 0.0 } else { noise.gumbel_at(v) };
            cand.update(transform.score(logits[i], g), v);
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    #[test]
    fn tile_epilogue_is_independent_of_alignment_and_split() {
        let noise = RowNoise { seed: 11, stream: 5, sample: 0 };
        let t = Transform::from_temperature(0.7);
        let logits: Vec<f32> = (0..103).map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.0).collect();
        let vocab = 100; // the last 3 entries are out of range
        let mut whole = Candidate::EMPTY;
        update_tile(&mut whole, &logits, 0, vocab, &noise, &t);
        for split in [1usize, 3, 5, 50, 99] {
            let mut a = Candidate::EMPTY;
            let mut b = Candidate::EMPTY;
            update_tile(&mut a, &logits[..split], 0, vocab, &noise, &t);
            update_tile(&mut b, &logits[split..], split as u32, vocab, &noise, &t);
            assert_eq!(a.merge(b), whole, "split {split}");
        }
        assert!(whole.index < vocab);
        let mut aligned = Candidate::EMPTY;
        for q in 0..25 {
            let chunk: &[f32; 4] = logits[4 * q..4 * q + 4].try_into().unwrap();
            update_aligned(&mut aligned, chunk, 4 * q as u32, vocab, &noise, &t);
        }
        assert_eq!(aligned, whole);
    }

    #[test]
    fn greedy_ignores_noise_and_out_of_range_entries_never_win() {
        let noise = RowNoise { seed: 1, stream: 0, sample: 0 };
        let t = Transform::from_temperature(0.0);
        assert!(t.is_greedy());
        let mut c = Candidate::EMPTY;
        // Entry 3 has the largest logit but is outside a vocab of 3; out-of-range lanes are skipped,
        // not scored as 0 (which would beat the negative logits).
        update_group4(&mut c, [-3.0, -1.0, -2.0, 9.0], 0, 3, &noise, &t);
        assert_eq!(c, Candidate { score: -1.0, index: 1 });
    }

    fn winner(logits: &[f32], t: f32) -> Candidate {
        let noise = RowNoise { seed: 3, stream: 1, sample: 0 };
        let mut c = Candidate::EMPTY;
        update_tile(&mut c, logits, 0, logits.len() as u32, &noise, &Transform::from_temperature(t));
        c
    }

    #[test]
    fn tiny_temperatures_and_huge_logits_pick_the_right_token() {
        // Issue 11 item 4: 1/T overflowed (T = 1e-40, 1e-45) or y/T did (T = 1e-37, and y = 3e38 at
        // T = 0.5): ties at +inf went to the lower index, or inf·0 made a NaN.
        assert_eq!(winner(&[1.0, 5.0, 3.0], 1e-40).token(), 1);
        assert_eq!(winner(&[50.0, 100.0], 1e-37).token(), 1);
        assert_eq!(winner(&[0.0, 1.0], 1e-45).token(), 1);
        assert_eq!(winner(&[3.0e38, 3.2e38, -3.3e38], 0.5).token(), 1);
        assert_eq!(winner(&[f32::MAX, -f32::MAX, 1.0], 1e-30).token(), 0);
        assert_eq!(winner(&[-f32::MAX, -3.0e38], 0.25).token(), 1);
        // Every finite logit gives a finite score at every valid temperature.
        let noise = RowNoise { seed: 9, stream: 2, sample: 0 };
        let temps = [0.0, -0.0, 1e-45, 1e-40, f32::MIN_POSITIVE, 1e-37, 1e-20, 0.5, 1.0, 1.5, 1e20, 1e38, f32::MAX];
        for &t in &temps {
            let tr = Transform::from_temperature(t);
            assert!(tr.logit_scale() > 0.0 && tr.logit_scale() <= 1.0, "T = {t}");
            assert!(tr.noise_scale >= 0.0 && tr.noise_scale <= 1.0, "T = {t}");
            assert_eq!(tr.is_greedy(), t < MIN_SAMPLING_TEMPERATURE, "T = {t}");
            for &y in &[f32::MAX, -f32::MAX, 0.0, -0.0, 1e-45, 3.0e38, -1.0] {
                for v in 0..8 {
                    let g = if tr.is_greedy() { 0.0 } else { noise.gumbel_at(v) };
                    let s = tr.score(y, g);
                    assert!(s.is_finite(), "T = {t}, y = {y}: score {s}");
                }
            }
            assert_eq!(tr.score(f32::INFINITY, 1.0), f32::INFINITY);
            assert_eq!(tr.score(f32::NEG_INFINITY, 1.0), f32::NEG_INFINITY);
            assert!(tr.score(f32::NAN, 1.0).is_nan());
        }
        // T >= 1: bit-identical to the former y · fl(1/T) + g.
        for &(t, y, g) in &[(1.0f32, 2.5f32, 0.3f32), (1.7, -4.0, 1.25), (1e30, 3e38, -2.0)] {
            assert_eq!(Transform::from_temperature(t).score(y, g).to_bits(), (y * (1.0 / t) + g).to_bits());
        }
    }
}
