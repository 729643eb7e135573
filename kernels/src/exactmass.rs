//! Exact log-mass: `Σ e^x` over the values seen, held as integers at absolute binary places, so
//! its bits do not depend on how the values were grouped or in which order the groups were merged
//! (issue 52: a vocab shard's log-sum-exps merged over the ranks equal one device's bit for bit;
//! [`crate::logmass::LogMass`]'s f32 rescales and sums follow the partition).
//! Design and cost: docs/findings/49.
//!
//! # The representation
//! Values arrive four at a time — a Philox group, the smallest unit every partition of the vocab
//! keeps whole (tiles, blocks and shards start at multiples of 4). A group's term is a function of
//! its four values alone: with `t_j = x_j·log₂e` and `R = ⌈max t_j⌉`,
//! `s = (2^(t₀−R) + 2^(t₁−R)) + (2^(t₂−R) + 2^(t₃−R))` in that order, and the term `s·2^R = m·2^p`
//! (`m` the 24-bit significand of `s`, `p` an integer). Its bits are added into **bins** of
//! [`BIN_BITS`] binary places at absolute positions (bin `k` holds the places `40k ..< 40k + 40`;
//! a term's 24 bits touch two bins), each bin a `u64` sum of parts below 2^40: room for 2^24
//! addends, i.e. a vocabulary of 2^26 tokens.
//!
//! Only two bins are kept: `top`, the bin of the largest term's leading bit, and the one below;
//! parts in lower bins are dropped. `top` is a function of the largest term alone, so every
//! partition drops the same parts, and the kept parts are integer sums: any sequence of
//! [`ExactMass::add_group`] and [`ExactMass::merge`] over the same groups ends in the same state.
//! What is dropped is below `2^-40` of the largest term each: a relative error of at most
//! `groups · 2^-40` (below f32's `2^-24` for up to 2^16 groups, a vocabulary of 262,144; `2^-20`
//! at 2^22 tokens), beside the group's own f32 sum (`2^-24` relative a group).
//!
//! Outside the bins' range (`|max t| ≥ 2^29`, i.e. `|max x| ≥ 3.7·10^8`, where f32's spacing is
//! 32 or more and `ln V ≤ 15.3` for `V ≤ 2^22`) the correctly rounded log-sum-exp is the maximum
//! itself, which the state keeps exactly; groups whose `R` leaves `(−2^30, 2^30)` skip the bins.
//! `+∞` takes all the mass, a NaN makes the sum NaN (unless a `+∞` was seen), `−∞` adds nothing:
//! [`crate::logmass::LogMass`]'s rules.

use core::f32::consts::LOG2_E;

/// Binary places a bin holds.
pub const BIN_BITS: u32 = 40;

/// `top` of a state that holds no term.
const NO_BIN: i32 = i32::MIN;

/// A group whose `R` is outside `(−GROUP_LIMIT, GROUP_LIMIT)` skips the bins.
const GROUP_LIMIT: i32 = 1 << 30;

/// A state whose largest `t` is outside `(−RESULT_LIMIT, RESULT_LIMIT)` has its maximum for its
/// log-sum-exp: the skipped groups are then below `2^-(2^29)` of it.
const RESULT_LIMIT: f32 = (1u32 << 29) as f32;

/// Bin indices are floored through an unsigned division of `p + BIN_BIAS·40` (`|p| < 2^30 + 32`).
const BIN_BIAS: u32 = 1 << 25;

/// Mask of a bin's places.
const BIN_MASK: u64 = (1u64 << BIN_BITS) - 1;

/// Exact log-mass state: `Σ e^x ≈ (hi·2^40 + lo)·2^(40·(top − 1))` over the values seen, and their
/// maximum. Six words; `#[repr(C)]` for the buffers and exchanges that carry it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExactMass {
    /// The sum of the terms' parts in bin `top`.
    pub hi: u64,
    /// The sum of the terms' parts in bin `top − 1`.
    pub lo: u64,
    /// The bin of the largest term's leading bit (`i32::MIN` while no term is in the bins).
    pub top: i32,
    /// The largest value seen (`−∞` when none; `+∞` once a `+∞` was seen; NaN once a NaN was,
    /// unless a `+∞` was).
    pub max: f32,
}

/// `ceil(t)` as an integer, for `|t| < 2^31` (exact: `t` is integral from 2^23 on).
#[inline(always)]
fn ceil_i32(t: f32) -> i32 {
    let i = t as i32;
    if (i as f32) < t { i + 1 } else { i }
}

/// The larger of two maxima under the state's rules: `+∞` first, then NaN, then the numbers, `+0`
/// over `−0` (so the result does not depend on the order).
#[inline(always)]
fn join_max(a: f32, b: f32) -> f32 {
    if a == f32::INFINITY || b == f32::INFINITY {
        f32::INFINITY
    } else if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if b > a || (b == a && b.is_sign_positive()) {
        b
    } else {
        a
    }
}

impl ExactMass {
    /// Nothing seen; the identity of [`ExactMass::merge`].
    pub const EMPTY: Self = Self { hi: 0, lo: 0, top: NO_BIN, max: f32::NEG_INFINITY };

    /// Takes a group of four values (`−∞` ones add nothing), with `ex2` the backend's `2^x` (it must
    /// map `−∞` to 0; the same function for every group of a sum, so a group's term is a function
    /// of its values). Branch-free past the range test, so a warp's lanes stay converged.
    #[inline(always)]
    pub fn add_group(&mut self, x: [f32; 4], ex2: impl Fn(f32) -> f32) {
        let m = join_max(join_max(x[0], x[1]), join_max(x[2], x[3]));
        self.max = join_max(self.max, m);
        // NaN and ±∞ groups, and those outside the bins' range, are decided by `max` alone.
        let tmax = m * LOG2_E;
        if !(tmax > -(GROUP_LIMIT as f32) && tmax < GROUP_LIMIT as f32) {
            return;
        }
        let r = ceil_i32(tmax);
        let rf = r as f32;
        let s =
            (ex2(x[0] * LOG2_E - rf) + ex2(x[1] * LOG2_E - rf)) + (ex2(x[2] * LOG2_E - rf) + ex2(x[3] * LOG2_E - rf));
        let bits = s.to_bits();
        // `s ≥ 2^(tmax − R) > 1/2`: a normal number, its significand `m` with the hidden bit.
        let sig = (bits & 0x007f_ffff | 0x0080_0000) as u64;
        let p = r + ((bits >> 23) as i32 - 127 - 23);
        // `p > −2^30 − 32`: positive as u32 once biased (u32 arithmetic: `p + 2^25·40` passes i32::MAX).
        let biased = (p as u32).wrapping_add(BIN_BIAS * BIN_BITS);
        let k = (biased / BIN_BITS) as i32 - BIN_BIAS as i32;
        let v = sig << (biased % BIN_BITS);
        // The term's leading bit (place `p + 23`) is in bin `k + 1` when it is past bin `k`'s places.
        let lead = if v >> BIN_BITS != 0 { k + 1 } else { k };
        self.raise(lead);
        self.add_part(k + 1, v >> BIN_BITS);
        self.add_part(k, v & BIN_MASK);
    }

    /// Makes `top` at least `bin`, dropping the parts that fall below the kept two bins.
    #[inline(always)]
    fn raise(&mut self, bin: i32) {
        if bin > self.top {
            self.lo = if bin == self.top.wrapping_add(1) { self.hi } else { 0 };
            self.hi = 0;
            self.top = bin;
        }
    }

    /// Adds `w` at bin `bin` (`bin ≤ top`): into `hi` or `lo`, or dropped below them.
    #[inline(always)]
    fn add_part(&mut self, bin: i32, w: u64) {
        if bin == self.top {
            self.hi = self.hi.wrapping_add(w);
        } else if bin == self.top.wrapping_sub(1) {
            self.lo = self.lo.wrapping_add(w);
        }
    }

    /// Combines two states: associative and commutative bit for bit (integer sums of the same
    /// parts, the same parts dropped).
    #[inline(always)]
    pub fn merge(self, other: Self) -> Self {
        let (mut a, b) = if other.top > self.top { (other, self) } else { (self, other) };
        a.max = join_max(self.max, other.max);
        if b.top != NO_BIN {
            a.add_part(b.top, b.hi);
            a.add_part(b.top.wrapping_sub(1), b.lo);
        }
        a
    }

    /// `ln Σ e^x` over the values seen, with `log2` the backend's `log₂` on `[1, 2)` (the same
    /// function for a result to be the same bits): `−∞` when nothing (or only `−∞`) was seen, `+∞`
    /// once a `+∞` was, NaN once a NaN was (without a `+∞`), the maximum outside the bins' range,
    /// else `(e + 40·(top − 1) + log₂ f)·ln 2` for `hi·2^40 + lo` rounded to f32 as `f·2^e`
    /// (`1 ≤ f < 2`), the integer and the fraction added and scaled in f64, then rounded once — and
    /// never below the maximum (the groups' `x·log₂e` are rounded to f32, which can leave the sum an
    /// ulp short of a lone dominant value).
    #[inline(always)]
    pub fn lse_with(self, log2: impl Fn(f32) -> f32) -> f32 {
        let t = self.max * LOG2_E;
        if self.top == NO_BIN || !(t > -RESULT_LIMIT && t < RESULT_LIMIT) {
            return self.max;
        }
        // `hi ≥ 1`: the largest term's leading bit is in bin `top`; so `n ≥ 2^40`, a normal f32.
        let n = (self.hi as f32 * (1u64 << BIN_BITS) as f32 + self.lo as f32).to_bits();
        let e = (n >> 23) as i32 - 127 + BIN_BITS as i32 * (self.top - 1);
        let f = log2(f32::from_bits(n & 0x007f_ffff | 0x3f80_0000));
        let lse = ((e as f64 + f as f64) * core::f64::consts::LN_2) as f32;
        if lse < self.max { self.max } else { lse }
    }

    /// The state as six words (for shuffles, shared memory and exchanges): `hi`, `lo` (low word
    /// first), `top`, `max`.
    #[inline(always)]
    pub fn to_words(self) -> [u32; 6] {
        [
            self.hi as u32,
            (self.hi >> 32) as u32,
            self.lo as u32,
            (self.lo >> 32) as u32,
            self.top as u32,
            self.max.to_bits(),
        ]
    }

    /// The state of six words ([`ExactMass::to_words`]).
    #[inline(always)]
    pub fn from_words(w: [u32; 6]) -> Self {
        Self {
            hi: (w[1] as u64) << 32 | w[0] as u64,
            lo: (w[3] as u64) << 32 | w[2] as u64,
            top: w[4] as i32,
            max: f32::from_bits(w[5]),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    use crate::test_rng::SplitMix64 as Rng;

    fn ex2(x: f32) -> f32 {
        x.exp2()
    }

    fn log2(x: f32) -> f32 {
        x.log2()
    }

    fn mass_of(groups: &[[f32; 4]]) -> ExactMass {
        let mut m = ExactMass::EMPTY;
        for &g in groups {
            m.add_group(g, ex2);
        }
        m
    }

    /// The groups' state over a random partition into runs, each run's states merged in a random
    /// tree: what lanes, blocks and ranks do.
    fn mass_over_random_partition(groups: &[[f32; 4]], rng: &mut Rng) -> ExactMass {
        // Random order of the groups inside each part too: a lane's order is its tile order.
        let mut parts: Vec<ExactMass> = Vec::new();
        let mut i = 0;
        while i < groups.len() {
            let len = 1 + rng.below(1 + groups.len() / 3);
            let end = (i + len).min(groups.len());
            let mut idx: Vec<usize> = (i..end).collect();
            for j in (1..idx.len()).rev() {
                idx.swap(j, rng.below(j + 1));
            }
            let mut m = ExactMass::EMPTY;
            for j in idx {
                m.add_group(groups[j], ex2);
            }
            parts.push(m);
            i = end;
        }
        while parts.len() > 1 {
            let a = parts.swap_remove(rng.below(parts.len()));
            let b = parts.swap_remove(rng.below(parts.len()));
            parts.push(if rng.below(2) == 0 { a.merge(b) } else { b.merge(a) });
        }
        parts.pop().unwrap_or(ExactMass::EMPTY)
    }

    fn lse_f64(groups: &[[f32; 4]]) -> f64 {
        let xs: Vec<f64> = groups.iter().flatten().map(|&x| x as f64).collect();
        let m = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        m + xs.iter().map(|&x| (x - m).exp()).sum::<f64>().ln()
    }

    fn random_groups(rng: &mut Rng, n: usize, scale: f64, masked: f64) -> Vec<[f32; 4]> {
        (0..n)
            .map(|_| {
                [0; 4].map(|_| if rng.unit() < masked { f32::NEG_INFINITY } else { (rng.normal() * scale) as f32 })
            })
            .collect()
    }

    #[test]
    fn any_partition_and_merge_order_gives_the_same_bits() {
        let mut rng = Rng(7);
        // Logit-like spreads (a temperature of 1, 0.05, 0.002), masked entries, and small and large rows.
        for (trial, &(n, scale, masked)) in [
            (1usize, 1.0, 0.0),
            (3, 4.0, 0.0),
            (100, 3.0, 0.1),
            (2000, 20.0, 0.0),
            (4000, 300.0, 0.3),
            (500, 4000.0, 0.0),
        ]
        .iter()
        .cycle()
        .take(60)
        .enumerate()
        {
            let groups = random_groups(&mut rng, n, scale, masked);
            let want = mass_of(&groups);
            for _ in 0..8 {
                let got = mass_over_random_partition(&groups, &mut rng);
                assert_eq!(got, want, "trial {trial}: n {n} scale {scale}");
                assert_eq!(got.lse_with(log2).to_bits(), want.lse_with(log2).to_bits());
            }
        }
    }

    #[test]
    fn the_bins_hold_the_log_sum_exp_to_f32_accuracy() {
        let mut rng = Rng(11);
        for &(n, scale) in &[(1usize, 1.0), (10, 1.0), (38_000, 3.0), (38_000, 30.0), (1000, 1e4), (200, 1e6)] {
            for _ in 0..3 {
                let groups = random_groups(&mut rng, n, scale, 0.05);
                let (got, want) = (mass_of(&groups).lse_with(log2) as f64, lse_f64(&groups));
                assert!((got - want).abs() <= 2e-6 * want.abs().max(1.0), "n {n} scale {scale}: {got} vs {want}");
            }
        }
        // A wide spread: one dominant value and a tail 20–60 nats below it, every value in the bins'
        // reach or not (the dropped tail is below 2^-40 of the largest term each).
        let mut groups = vec_of(38_000, |i| -20.0 - (i % 4000) as f32 / 100.0);
        groups[17][2] = 5.0;
        let (got, want) = (mass_of(&groups).lse_with(log2) as f64, lse_f64(&groups));
        assert!((got - want).abs() <= 1e-6, "{got} vs {want}");
        // The largest term at the bottom of its bin (t = 23.5: R = 24, p = 0) and a tail of 40,000
        // values 2^-30 below it, in the bin below: the top is the bin of the leading bit, so the
        // tail is kept (3.7e-5 of the mass, about 20 of f32's steps at 16.3).
        let mut groups = vec_of(40_000, |_| -6.5 * core::f32::consts::LN_2);
        groups[0] = [23.5 * core::f32::consts::LN_2, f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY];
        let (got, want) = (mass_of(&groups).lse_with(log2) as f64, lse_f64(&groups));
        assert!((got - want).abs() <= 2e-6, "{got} vs {want}");
        // Equal values: ln(4n) above them.
        let groups = vec_of(1000, |_| 2.5);
        let got = mass_of(&groups).lse_with(log2) as f64;
        assert!((got - (2.5 + 4000f64.ln())).abs() <= 1e-6, "{got}");
    }

    fn vec_of(n: usize, f: impl Fn(usize) -> f32) -> Vec<[f32; 4]> {
        (0..n).map(|g| [0, 1, 2, 3].map(|j| f(4 * g + j))).collect()
    }

    #[test]
    fn every_placement_of_a_term_in_its_bins_is_exact() {
        // Values sweeping every offset of a term's bits inside a bin (p mod 40), alone and in pairs
        // of bins: merging per group equals adding in sequence, and one term alone gives its own
        // log-sum-exp.
        for i in 0..400 {
            let x = -40.0 + i as f32 * 0.173;
            let g = [x, f32::NEG_INFINITY, x - 1.0, f32::NEG_INFINITY];
            let m = mass_of(&[g]);
            let want = lse_f64(&[g]);
            assert!(((m.lse_with(log2) as f64) - want).abs() <= 1e-6 * want.abs().max(1.0), "{x}");
            let groups = vec_of(64, |j| x + (j % 7) as f32 * 0.61 - (j % 5) as f32 * 3.3);
            let seq = mass_of(&groups);
            let tree = groups.iter().map(|&g| mass_of(&[g])).fold(ExactMass::EMPTY, |a, b| b.merge(a));
            assert_eq!(seq, tree, "{x}");
        }
    }

    #[test]
    fn infinities_nans_and_the_ends_of_the_range() {
        let (inf, nan, ninf) = (f32::INFINITY, f32::NAN, f32::NEG_INFINITY);
        assert_eq!(ExactMass::EMPTY.lse_with(log2), ninf);
        assert_eq!(mass_of(&[[ninf; 4]]).lse_with(log2), ninf);
        assert_eq!(mass_of(&[[ninf; 4]]), ExactMass::EMPTY);
        assert_eq!(mass_of(&[[1.0, inf, 2.0, ninf]]).lse_with(log2), inf);
        assert!(mass_of(&[[1.0, nan, 2.0, 3.0]]).lse_with(log2).is_nan());
        // +∞ holds all the mass, NaN or not, in any order.
        let parts = [mass_of(&[[1.0, nan, 2.0, 3.0]]), mass_of(&[[0.0, 0.0, inf, 0.0]]), mass_of(&[[5.0; 4]])];
        for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
            let m = order.iter().fold(ExactMass::EMPTY, |a, &i| a.merge(parts[i]));
            assert_eq!(m.lse_with(log2), inf);
        }
        assert!(parts[0].merge(parts[2]).lse_with(log2).is_nan());
        // Beyond the bins' range the maximum is the correctly rounded result.
        for big in [4e8f32, 1e12, 3e38, -4e8, -1e20, -3e38] {
            let m = mass_of(&[[big, big, ninf, big - big.abs() * 1e-6]]).merge(mass_of(&[[big - 1.0; 4]]));
            assert_eq!(m.lse_with(log2), big, "{big}");
            let far = mass_of(&[[big, 0.0, ninf, 1.0]]);
            assert_eq!(far.lse_with(log2), if big > 0.0 { big } else { (1.0f64 + 1.0f64.exp()).ln() as f32 }, "{big}");
        }
        // Just inside the range: still from the bins, and exact over partitions.
        let groups = vec_of(400, |j| 3.0e8 + (j % 13) as f32 * 64.0);
        let mut rng = Rng(3);
        assert_eq!(mass_over_random_partition(&groups, &mut rng), mass_of(&groups));
        assert_eq!(mass_of(&groups).lse_with(log2), 3.0e8 + 12.0 * 64.0);
    }

    #[test]
    fn signed_zeros_the_upper_range_and_the_maximum() {
        // −0 and +0 merge to +0 in either order (the state, not only the result, is order-free).
        let (a, b) = (mass_of(&[[-0.0, f32::NEG_INFINITY, -1.0, -2.0]]), mass_of(&[[0.0, -3.0, -1.5, -2.5]]));
        assert_eq!(a.merge(b).max.to_bits(), b.merge(a).max.to_bits());
        assert_eq!(a.merge(b).max.to_bits(), 0.0f32.to_bits());
        // Values between 5.6e8 and 7.4e8 (biased bin index past i32::MAX before it was u32): in the bins,
        // exact over partitions, and the maximum as the result.
        for x in [5.6e8f32, 6e8, 7.4e8, -6e8] {
            let groups = vec_of(64, |j| x - (j % 5) as f32 * 64.0);
            let mut rng = Rng(x.to_bits() as u64);
            assert_eq!(mass_over_random_partition(&groups, &mut rng), mass_of(&groups), "{x}");
            assert_eq!(mass_of(&groups).lse_with(log2), x, "{x}");
        }
        // A lone value (or a dominant one): the log-sum-exp is never below it.
        let mut rng = Rng(17);
        for _ in 0..20_000 {
            let x = (rng.normal() * 10f64.powi(rng.below(9) as i32 - 2)) as f32;
            let m = mass_of(&[[x, f32::NEG_INFINITY, f32::NEG_INFINITY, x - 30.0]]);
            assert!(m.lse_with(log2) >= x, "{x}: {}", m.lse_with(log2));
        }
        // Six words, as `to_words` and the buffers that carry a state assume.
        assert_eq!(core::mem::size_of::<ExactMass>(), 24);
    }

    #[test]
    fn words_round_trip() {
        let m = mass_of(&vec_of(100, |j| (j as f32 * 0.37).sin() * 9.0));
        assert_eq!(ExactMass::from_words(m.to_words()), m);
        assert_eq!(ExactMass::from_words(ExactMass::EMPTY.to_words()), ExactMass::EMPTY);
    }
}
