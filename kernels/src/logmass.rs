//! Online log-sum-exp state ("log-mass"): `max` and `sum = Σ exp(x - max)` of the values seen.
//!
//! The same `update` / associative `merge` shape as [`crate::Candidate`], so a tile can carry both and
//! the fused log-probability of the sampled token (`x_token - max - ln sum`) can be merged across tiles
//! and GPUs. Used today by the softmax baseline of the benchmark.

/// Online log-sum-exp state.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogMass {
    /// Largest value seen (−∞ when empty).
    pub max: f32,
    /// `Σ exp(x − max)` over the values seen.
    pub sum: f32,
}

impl LogMass {
    /// Nothing seen; the identity of [`LogMass::merge`].
    pub const EMPTY: Self = Self { max: f32::NEG_INFINITY, sum: 0.0 };

    /// Takes one more value, with `exp` the exponential to use.
    #[inline(always)]
    pub fn update(&mut self, x: f32, exp: impl Fn(f32) -> f32) {
        if x > self.max {
            self.sum = self.sum * exp(self.max - x) + 1.0;
            self.max = x;
        } else {
            self.sum += exp(x - self.max);
        }
    }

    /// Takes four more values at once (`−∞` ones add nothing), with one rescale: `max` becomes the
    /// largest of all, `sum` is rescaled to it and the four terms are added. Branch-free past the
    /// all-`−∞` test, so lanes of a warp stay converged. (`exp` must map `−∞` to 0.)
    #[inline(always)]
    pub fn update4(&mut self, x: [f32; 4], exp: impl Fn(f32) -> f32) {
        let m4 = x[0].max(x[1]).max(x[2].max(x[3]));
        let max = if m4 > self.max { m4 } else { self.max };
        if max == f32::NEG_INFINITY {
            return;
        }
        let terms = (exp(x[0] - max) + exp(x[1] - max)) + (exp(x[2] - max) + exp(x[3] - max));
        self.sum = self.sum * exp(self.max - max) + terms;
        self.max = max;
    }

    /// Combines two states with `exp`.
    #[inline(always)]
    pub fn merge_with(self, other: Self, exp: impl Fn(f32) -> f32) -> Self {
        if other.max == f32::NEG_INFINITY {
            return self;
        }
        if self.max == f32::NEG_INFINITY {
            return other;
        }
        let max = if self.max > other.max { self.max } else { other.max };
        Self { max, sum: self.sum * exp(self.max - max) + other.sum * exp(other.max - max) }
    }

    /// `ln Σ exp(x)` of the values seen, with `ln` the logarithm to use (`ln(0) = −∞`): `max +
    /// ln(sum)` (`−∞` when nothing was seen), or `+∞` when `max` is: a `+∞` value holds all the
    /// mass, whatever the sum became (`∞ − ∞` makes it NaN).
    #[inline(always)]
    pub fn lse_with(self, ln: impl Fn(f32) -> f32) -> f32 {
        if self.max == f32::INFINITY { self.max } else { self.max + ln(self.sum) }
    }

    /// Combines two states with the host's exponential ([`exp`]). Device code passes its own
    /// exponential to [`LogMass::merge_with`] (this crate's core imports nothing from `device`).
    #[cfg(not(target_arch = "nvptx64"))]
    #[inline(always)]
    pub fn merge(self, other: Self) -> Self {
        self.merge_with(other, exp)
    }
}

/// The log-probability `x − lse` of a value `x` (a logit over the temperature, or a raw logit) in a
/// distribution of log-sum-exp `lse`, where a `+∞` logit takes all the mass (the softmax limit; the
/// first `+∞` token is the one drawn): with `lse = +∞`, a `+∞` value has log-probability 0 and every
/// other value `−∞` (not `∞ − ∞`). Every log-probability site uses it: the CPU backend, and on the GPU
/// `reduce_rows`, the truncation step, its fallback and the rank merge.
#[inline(always)]
pub fn log_prob(x: f32, lse: f32) -> f32 {
    // `x − ∞` is already `−∞` for every other value: only `∞ − ∞` needs the rule.
    if x == f32::INFINITY && lse == x { 0.0 } else { x - lse }
}

/// A row's token's outputs from its logits and the row's log-sum-exps `(lse, lse_raw)`: (processed
/// log-probability, raw log-probability, the processed log-sum-exp as reported). `x` is the token's
/// processed logit over the temperature, `y` its raw logit. Without a token (`valid` false): NaN
/// and NaN; a greedy row (no processed distribution): 0 and a NaN log-sum-exp. The one definition
/// `reduce_rows` and the exact path's rank merge both write.
#[inline(always)]
pub fn token_log_probs(valid: bool, greedy: bool, (x, y): (f32, f32), (lse, lse_raw): (f32, f32)) -> (f32, f32, f32) {
    if !valid {
        (f32::NAN, f32::NAN, if greedy { f32::NAN } else { lse })
    } else {
        let lp = if greedy { 0.0 } else { log_prob(x, lse) };
        (lp, log_prob(y, lse_raw), if greedy { f32::NAN } else { lse })
    }
}

/// A row's given token's (processed, raw) log-probabilities from its logits `(xt, yt)` (as
/// [`token_log_probs`]' `x`, `y`; `xt = −∞` where the controls remove it) and the row's
/// log-sum-exps: `−∞` for a removed token (also where nothing is allowed and `lse` is `−∞`); for a
/// greedy row 0 when it is the row's token (`is_token`), else `−∞`; NaN for both when the row has
/// a NaN (`nan`: its candidate's score or `yt`). The one definition `reduce_rows` and the exact
/// path's rank merge both write.
#[inline(always)]
pub fn target_log_probs(
    (nan, greedy, is_token): (bool, bool, bool),
    (xt, yt): (f32, f32),
    (lse, lse_raw): (f32, f32),
) -> (f32, f32) {
    if nan || yt.is_nan() {
        return (f32::NAN, f32::NAN);
    }
    let lp = match greedy {
        false if xt == f32::NEG_INFINITY => f32::NEG_INFINITY,
        false => log_prob(xt, lse),
        true if is_token => 0.0,
        true => f32::NEG_INFINITY,
    };
    (lp, log_prob(yt, lse_raw))
}

/// e^x on the host (`core` has no `exp`): a range-reduced degree-6 polynomial (relative error below
/// 1e-6 on the range the tests use).
#[cfg(not(target_arch = "nvptx64"))]
pub fn exp(x: f32) -> f32 {
    // Range reduction x = k ln2 + r, |r| <= ln2/2, then a degree-6 Taylor polynomial.
    if x == f32::NEG_INFINITY {
        return 0.0;
    }
    let k = (x * core::f32::consts::LOG2_E + if x >= 0.0 { 0.5 } else { -0.5 }) as i32;
    let r = x - k as f32 * core::f32::consts::LN_2;
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r / 720.0)))));
    p * f32::from_bits(((k + 127).clamp(0, 255) as u32) << 23)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn merge_equals_sequential_update() {
        let xs = [0.5f32, -3.0, 2.0, 7.5, -1.0, 7.5, 0.0];
        let mut all = LogMass::EMPTY;
        for &x in &xs {
            all.update(x, exp);
        }
        let (mut a, mut b) = (LogMass::EMPTY, LogMass::EMPTY);
        xs[..3].iter().for_each(|&x| a.update(x, exp));
        xs[3..].iter().for_each(|&x| b.update(x, exp));
        let m = a.merge(b);
        let want: f64 = xs.iter().map(|&x| ((x - 7.5) as f64).exp()).sum();
        assert_eq!(m.max, 7.5);
        assert!(((m.sum as f64) - want).abs() < 1e-5 * want, "{} vs {want}", m.sum);
        assert!(((all.sum as f64) - want).abs() < 1e-5 * want);
        assert_eq!(LogMass::EMPTY.merge(m), m);
        // Four at a time, −∞ entries skipped: the same mass.
        let mut four = LogMass::EMPTY;
        four.update4([f32::NEG_INFINITY; 4], exp);
        assert_eq!(four, LogMass::EMPTY);
        four.update4([0.5, -3.0, f32::NEG_INFINITY, 2.0], exp);
        four.update4([7.5, -1.0, 7.5, 0.0], exp);
        assert_eq!(four.max, 7.5);
        assert!(((four.sum as f64) - want).abs() < 1e-5 * want, "{} vs {want}", four.sum);
    }

    #[test]
    fn a_positive_infinite_value_holds_all_the_mass() {
        let ln = |x: f32| (x as f64).ln() as f32;
        // A +∞ value seen among others: the sum becomes NaN (∞ − ∞), the log-sum-exp is still +∞.
        let mut m = LogMass::EMPTY;
        m.update4([1.0, f32::INFINITY, 2.0, f32::INFINITY], exp);
        m = m.merge(LogMass { max: 3.0, sum: 1.0 });
        assert_eq!(m.lse_with(ln), f32::INFINITY);
        assert_eq!(LogMass::EMPTY.lse_with(ln), f32::NEG_INFINITY);
        assert_eq!(LogMass { max: 2.0, sum: 1.0 }.lse_with(ln), 2.0);
        assert_eq!(log_prob(f32::INFINITY, f32::INFINITY), 0.0);
        assert_eq!(log_prob(5.0, f32::INFINITY), f32::NEG_INFINITY);
        assert_eq!(log_prob(f32::NEG_INFINITY, f32::INFINITY), f32::NEG_INFINITY);
        assert_eq!(log_prob(1.5, 2.0).to_bits(), (1.5f32 - 2.0).to_bits());
    }
}
