//! The tile epilogue: logits → transformed, perturbed scores → the tile's [`Candidate`].
//!
//! The GPU kernels and the CPU backend call the same functions here, so both apply the same transform
//! to the same noise and merge with the same rule; they differ only in how the logits were summed.

use crate::candidate::Candidate;
use crate::noise::{GUMBEL_MAX, RowNoise, ln, uniform_open};

/// The per-row logit transform applied before the noise is added.
///
/// Temperature `T > 0` gives `score = logit · (1/T) + gumbel` (the reciprocal is rounded once, on
/// construction; sampling is from `softmax(logit · fl(1/T))`). `T = 0` is greedy: `score = logit`, no
/// noise. Later transforms (bias, soft-cap, masks) go here.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transform {
    /// `1 / T`, or 0 when greedy.
    pub inv_temperature: f32,
    /// 1 to add Gumbel noise, 0 for greedy decoding.
    pub add_noise: u32,
}

impl Transform {
    /// The transform for temperature `t`, which must be finite and ≥ 0 (the host validates it).
    #[inline]
    pub fn from_temperature(t: f32) -> Self {
        if t == 0.0 {
            Self { inv_temperature: 0.0, add_noise: 0 }
        } else {
            Self { inv_temperature: 1.0 / t, add_noise: 1 }
        }
    }

    /// Whether this is greedy decoding (argmax of the logits).
    #[inline(always)]
    pub fn is_greedy(&self) -> bool {
        self.add_noise == 0
    }

    /// The perturbed score of one logit given its noise.
    #[inline(always)]
    pub fn score(&self, logit: f32, noise: f32) -> f32 {
        if self.is_greedy() { logit } else { logit * self.inv_temperature + noise }
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
/// GPU lane holds them: constant indices only, so the logits stay in registers. Skips the noise of
/// entries that provably cannot reach the candidate's score ([`update_group4_pruned`]), so it ends
/// in exactly the state [`update_group4`] would.
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
        update_group4_pruned(cand, group, v0 + 4 * q as u32, vocab, noise, transform, crate::logmass::exp);
        q += 1;
    }
}

/// Margin in `u` of [`cannot_reach`]: covers the error of two `exp` evaluations (relative error up to
/// 2⁻²⁰ each, `ex2.approx` on the GPU) and of the f32 arithmetic around them.
pub const PRUNE_U_MARGIN: f32 = 1e-5;

/// Whether an entry with scaled logit `a` (`logit / T`) and uniform draw `u` provably scores below
/// `bound` — `a + gumbel(u) < bound` after f32 rounding, so it cannot change a candidate whose score
/// is `bound`, nor win a row where some entry already scored `bound`. `exp` is e^x with relative error
/// at most 2⁻²⁰ (larger errors make the test unsound).
///
/// `gumbel(u) = -ln(-ln u)` grows with `u`, so the entry can reach `d = bound - a` only if
/// `u ≥ e^(-e^(-d))`. The test lowers `d` by `1e-3 + 1e-6·(|bound| + |a|)` (the Cephes [`ln`]'s error
/// on `gumbel`, below 1e-4 for every draw, and the rounding of the score and of `d`) and the threshold
/// by [`PRUNE_U_MARGIN`]. NaN or infinite inputs, or an empty candidate (`bound = -∞`), give `false`.
#[inline(always)]
pub fn cannot_reach(u: f32, a: f32, bound: f32, exp: impl Fn(f32) -> f32) -> bool {
    let d = (bound - a) - (1e-3 + 1e-6 * (bound.abs() + a.abs()));
    u < exp(-exp(-d)) - PRUNE_U_MARGIN
}

/// [`update_group4`] with the noise skipped where it cannot matter, ending in the same state:
///
/// - when each of the four scaled logits is below `cand.score - GUMBEL_MAX` (no draw can lift it to
///   the candidate), the group's Philox call is skipped;
/// - otherwise each entry's two logarithms are skipped when [`cannot_reach`] its current candidate.
///
/// Every skipped entry would have scored strictly below the candidate, so the candidate (score and
/// index, ties and NaN included) is the one [`update_group4`] gives.
#[inline(always)]
pub fn update_group4_pruned(
    cand: &mut Candidate,
    logits: [f32; 4],
    v0: u32,
    vocab: u32,
    noise: &RowNoise,
    transform: &Transform,
    exp: impl Fn(f32) -> f32 + Copy,
) {
    if transform.is_greedy() {
        update_group4(cand, logits, v0, vocab, noise, transform);
        return;
    }
    let a = [
        logits[0] * transform.inv_temperature,
        logits[1] * transform.inv_temperature,
        logits[2] * transform.inv_temperature,
        logits[3] * transform.inv_temperature,
    ];
    // fl(a + g) ≤ fl(a + GUMBEL_MAX) for every draw g, so `a + GUMBEL_MAX < score` rules the entry out
    // (false for NaN and for an empty candidate).
    let below = |a: f32, score: f32| a + GUMBEL_MAX < score;
    let score = cand.score;
    if below(a[0], score) & below(a[1], score) & below(a[2], score) & below(a[3], score) {
        return;
    }
    let bits = noise.bits4(v0 >> 2);
    // One entry; called with constant indices so that nothing is indexed at run time.
    let mut entry = |v: u32, a: f32, bits: u32| {
        let u = uniform_open(bits);
        if v < vocab && !below(a, cand.score) && !cannot_reach(u, a, cand.score, exp) {
            cand.update(a + -ln(-ln(u)), v);
        }
    };
    entry(v0, a[0], bits[0]);
    entry(v0 + 1, a[1], bits[1]);
    entry(v0 + 2, a[2], bits[2]);
    entry(v0 + 3, a[3], bits[3]);
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

    /// e^x in f64, rounded to f32, times `1 + rel`: an `exp` at the error bound `cannot_reach` allows.
    fn perturbed_exp(rel: f64) -> impl Fn(f32) -> f32 + Copy {
        move |x: f32| ((x as f64).exp() * (1.0 + rel)) as f32
    }

    #[test]
    fn pruning_never_skips_an_entry_that_could_reach_the_bound() {
        // The noise of every one of the 2^23 draws, and its running maximum over smaller draws:
        // `cannot_reach` falls with `u`, so checking the largest draw it rules out against the largest
        // noise up to there covers every draw it rules out.
        let k_max = 1usize << 23;
        let mut running = Vec::with_capacity(k_max);
        let mut best = f32::NEG_INFINITY;
        for k in 0..k_max {
            best = best.max(crate::noise::gumbel((k as u32) << 9));
            running.push(best);
        }
        let u = |k: usize| uniform_open((k as u32) << 9);
        let mut ruled_out = 0u64;
        for rel in [-1.0 / 1_048_576.0, 0.0, 1.0 / 1_048_576.0] {
            let exp = perturbed_exp(rel);
            for a in [0.0f32, 7.3, -1000.5, 3.0e4, -2.5] {
                for step in 0..4000 {
                    let bound = a + (step as f32 * 0.01 - 5.0);
                    if !cannot_reach(u(0), a, bound, exp) {
                        continue;
                    }
                    // Largest k that `cannot_reach` rules out.
                    let (mut lo, mut hi) = (0usize, k_max);
                    while hi - lo > 1 {
                        let mid = (lo + hi) / 2;
                        if cannot_reach(u(mid), a, bound, exp) { lo = mid } else { hi = mid }
                    }
                    assert!(a + running[lo] < bound, "a = {a}, bound = {bound}, k = {lo}, exp error {rel}");
                    ruled_out += lo as u64 + 1;
                }
            }
        }
        // The test rules out most draws once the bound is a few units above the logit.
        assert!(ruled_out > 10_000_000_000, "ruled out {ruled_out}");
        // Inputs it must never rule out.
        let exp = perturbed_exp(0.0);
        for (a, bound) in [(0.0, f32::NEG_INFINITY), (f32::NAN, 1.0), (1.0, f32::NAN), (f32::INFINITY, 1.0)] {
            assert!(!cannot_reach(u(0), a, bound, exp), "a = {a}, bound = {bound}");
        }
    }

    #[test]
    fn the_pruned_epilogue_ends_in_the_plain_ones_state() {
        // Wide logit ranges (where pruning skips most entries), ties, NaN, ±∞ and masked entries:
        // the lane epilogue with pruning and the plain group epilogue must agree bit for bit.
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for trial in 0..400 {
            let noise = RowNoise { seed: next(), stream: next() % 1000, sample: (trial % 3) as u32 };
            let t = Transform::from_temperature([0.3, 1.0, 2.0, 0.0][trial % 4]);
            let spread = [1.0, 10.0, 40.0, 200.0][(trial / 4) % 4];
            let mut logits: Vec<f32> =
                (0..256).map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.8) * spread).collect();
            match trial % 7 {
                0 => logits[(next() % 256) as usize] = f32::NAN,
                1 => logits[(next() % 256) as usize] = f32::INFINITY,
                2 => logits[(next() % 256) as usize] = f32::NEG_INFINITY,
                3 => {
                    let v = logits[5];
                    logits[200] = v;
                }
                _ => {}
            }
            let vocab = [256, 255, 130][trial % 3];
            let mut plain = Candidate::EMPTY;
            for q in 0..64 {
                let group = [logits[4 * q], logits[4 * q + 1], logits[4 * q + 2], logits[4 * q + 3]];
                update_group4(&mut plain, group, 4 * q as u32, vocab, &noise, &t);
            }
            let mut pruned = Candidate::EMPTY;
            for chunk in 0..8 {
                let part: &[f32; 32] = logits[32 * chunk..32 * chunk + 32].try_into().unwrap();
                update_aligned(&mut pruned, part, 32 * chunk as u32, vocab, &noise, &t);
            }
            assert_eq!((pruned.score.to_bits(), pruned.index), (plain.score.to_bits(), plain.index), "trial {trial}");
        }
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
}
