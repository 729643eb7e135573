//! The per-tile sampling state: the best (perturbed score, vocab index) seen so far.
//!
//! Gumbel-max sampling is an argmax, and an argmax decomposes over any partition of the vocabulary:
//! each tile keeps one [`Candidate`] per row, and candidates are merged in any order and any grouping
//! (warp shuffles, shared memory, the reduction kernel, other GPUs) to the same winner. That needs the
//! merge to be associative and commutative with an identity, which it is because it takes the maximum
//! under a total order:
//!
//! 1. a NaN score beats every non-NaN score (a NaN logit is reported, never silently outvoted —
//!    the host API turns it into an error and the device API into [`INVALID_INDEX`]);
//! 2. otherwise the larger score wins;
//! 3. equal scores (and two NaNs) resolve to the lower vocab index, so results are deterministic.
//!
//! [`Candidate::EMPTY`] (score −∞, index `u32::MAX`) is the identity for every candidate of a real
//! vocab entry, including one whose score is −∞ (a masked token still beats "nothing").
//!
//! Infinite scores come only from infinite logits (a finite logit always gives a finite score, see
//! [`crate::Transform`]). One `+∞` logit wins (the limit of the softmax puts all mass on it); several
//! tie and the lowest index wins, as for greedy ties. A row whose winning score is `−∞` (every logit
//! `−∞`: a fully masked row) has no token to sample: [`Candidate::token`] gives [`INVALID_INDEX`], as
//! for NaN, and the host API reports it as an error.

/// Index written for a row without a token: its winning score is NaN (a NaN logit) or `−∞` (every
/// logit `−∞`).
pub const INVALID_INDEX: u32 = u32::MAX;

/// One sampling candidate: the best perturbed score of a tile and its global vocab index.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// Perturbed score `logit / T + gumbel` (or the logit itself when greedy).
    pub score: f32,
    /// Global vocab index of that score.
    pub index: u32,
}

impl Candidate {
    /// The identity of [`Candidate::merge`]: nothing seen yet.
    pub const EMPTY: Self = Self { score: f32::NEG_INFINITY, index: u32::MAX };

    /// Whether `self` ranks above `other` (the order in the module documentation).
    #[inline(always)]
    pub fn beats(self, other: Self) -> bool {
        let self_nan = self.score.is_nan();
        let other_nan = other.score.is_nan();
        if self_nan | other_nan {
            return self_nan & (!other_nan | (self.index < other.index));
        }
        (self.score > other.score) | ((self.score == other.score) & (self.index < other.index))
    }

    /// Takes one more (score, index) into the state.
    #[inline(always)]
    pub fn update(&mut self, score: f32, index: u32) {
        let c = Candidate { score, index };
        if c.beats(*self) {
            *self = c;
        }
    }

    /// Combines two states; associative and commutative, with [`Candidate::EMPTY`] as identity.
    #[inline(always)]
    pub fn merge(self, other: Self) -> Self {
        if other.beats(self) { other } else { self }
    }

    /// The sampled token, or [`INVALID_INDEX`] when the winning score is NaN or `−∞` (no token).
    #[inline(always)]
    pub fn token(self) -> u32 {
        // `!(score > −∞)` is true exactly for NaN and −∞.
        if !(self.score > f32::NEG_INFINITY) { INVALID_INDEX } else { self.index }
    }
}

/// Merges a row's candidates (for example its `[n_vranges]` slice of the candidate buffer).
#[inline]
pub fn reduce(candidates: &[Candidate]) -> Candidate {
    candidates.iter().fold(Candidate::EMPTY, |acc, &c| acc.merge(c))
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    fn score() -> impl Strategy<Value = f32> {
        prop_oneof![
            4 => -4.0f32..4.0,
            1 => Just(f32::NEG_INFINITY),
            1 => Just(f32::INFINITY),
            1 => Just(f32::NAN),
            1 => Just(0.0f32),
            1 => Just(-0.0f32),
            2 => Just(1.5f32), // ties
        ]
    }

    /// Candidates with distinct indices (as in a real row).
    fn candidates(n: usize) -> impl Strategy<Value = Vec<Candidate>> {
        (proptest::collection::vec(score(), n), Just(n)).prop_perturb(|(scores, n), mut rng| {
            let mut idx: Vec<u32> = (0..n as u32).map(|i| i * 7 + 3).collect();
            for i in (1..n).rev() {
                idx.swap(i, rng.random_range(0..=i));
            }
            scores.into_iter().zip(idx).map(|(score, index)| Candidate { score, index }).collect()
        })
    }

    fn same(a: Candidate, b: Candidate) -> bool {
        a.index == b.index && a.score.to_bits() == b.score.to_bits()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, rng_seed: proptest::test_runner::RngSeed::Fixed(0x0f1a_5a3e), ..ProptestConfig::default() })]

        #[test]
        fn merge_is_associative_and_commutative(c in candidates(3)) {
            let (a, b, d) = (c[0], c[1], c[2]);
            prop_assert!(same(a.merge(b), b.merge(a)));
            prop_assert!(same(a.merge(b).merge(d), a.merge(b.merge(d))));
        }

        #[test]
        fn empty_is_the_identity(c in candidates(1)) {
            prop_assert!(same(Candidate::EMPTY.merge(c[0]), c[0]));
            prop_assert!(same(c[0].merge(Candidate::EMPTY), c[0]));
        }

        #[test]
        fn any_grouping_gives_the_same_winner(c in candidates(24), split in 1usize..23) {
            let whole = reduce(&c);
            let parts = reduce(&c[..split]).merge(reduce(&c[split..]));
            let mut rev = c.clone();
            rev.reverse();
            prop_assert!(same(whole, parts));
            prop_assert!(same(whole, reduce(&rev)));
        }
    }

    #[test]
    fn ties_go_to_the_lower_index_and_nan_is_never_outvoted() {
        let a = Candidate { score: 1.0, index: 5 };
        let b = Candidate { score: 1.0, index: 2 };
        assert_eq!(a.merge(b).index, 2);
        let nan = Candidate { score: f32::NAN, index: 9 };
        let inf = Candidate { score: f32::INFINITY, index: 0 };
        assert_eq!(inf.merge(nan).index, 9);
        assert_eq!(nan.merge(inf).token(), INVALID_INDEX);
        let masked = Candidate { score: f32::NEG_INFINITY, index: 4 };
        assert_eq!(Candidate::EMPTY.merge(masked).index, 4);
    }

    #[test]
    fn an_all_negative_infinity_row_has_no_token_and_positive_infinity_wins() {
        let masked = reduce(&[
            Candidate { score: f32::NEG_INFINITY, index: 0 },
            Candidate { score: f32::NEG_INFINITY, index: 1 },
        ]);
        assert_eq!(masked.token(), INVALID_INDEX);
        assert_eq!(Candidate::EMPTY.token(), INVALID_INDEX);
        let c = |score, index| Candidate { score, index };
        let one = reduce(&[c(f32::MAX, 0), c(f32::INFINITY, 7), c(f32::NEG_INFINITY, 2)]);
        assert_eq!(one.token(), 7);
        let two = reduce(&[c(f32::INFINITY, 9), c(1.0, 0), c(f32::INFINITY, 3)]);
        assert_eq!(two.token(), 3, "several +inf: the lowest index");
        assert_eq!(c(-f32::MAX, 5).token(), 5);
    }
}
