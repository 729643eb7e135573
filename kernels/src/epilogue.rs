//! The tile epilogue: logits → transformed, perturbed scores → the tile's [`Candidate`].
//!
//! The GPU kernels and the CPU backend call the same functions here, so both apply the same transform
//! to the same noise and merge with the same rule; they differ only in how the logits were summed.

use crate::candidate::Candidate;
use crate::noise::RowNoise;

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
}
