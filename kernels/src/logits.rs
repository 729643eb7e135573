//! Per-row logit processing before the temperature and the noise: soft-capping, sparse adjustments
//! (logit bias, repetition / frequency / presence penalties) and the allowed-token mask, in the order a
//! serving stack applies them (vLLM's sampler: the model's soft-cap, then logit bias, then penalties,
//! then the mask, then the temperature).
//!
//! Plain IEEE f32 multiplies, adds and divides only, no fused multiply-add, so the GPU (built with FMA
//! contraction off) and the CPU round identically. Today the CPU backend applies them; the fused
//! kernels will call the same functions from their lane epilogue.

/// `cap · tanh(logit / cap)` (Gemma 2's final-logit soft-capping) for a finite `cap > 0`; `±∞` map to
/// `±cap`, NaN stays NaN.
#[inline(always)]
pub fn softcap(logit: f32, cap: f32) -> f32 {
    cap * tanh(logit / cap)
}

/// `tanh(x)` in f32 (relative error below 4e-7, tested against f64): Cephes `tanhf` — an odd
/// polynomial below `|x| = 0.625`, `1 − 2 / (e^{2|x|} + 1)` above, `±1` from `|x| ≥ 9.02` on.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = if x < 0.0 { -x } else { x };
    if a >= 9.02 {
        return if x < 0.0 { -1.0 } else { 1.0 };
    }
    if a < 0.625 {
        let z = x * x;
        let mut p = -5.704_988_7e-3;
        p = p * z + 2.063_908_9e-2;
        p = p * z - 5.373_971_6e-2;
        p = p * z + 1.333_144_2e-1;
        p = p * z - 3.333_328_2e-1;
        return p * z * x + x;
    }
    let y = 1.0 - 2.0 / (exp(a + a) + 1.0);
    if x < 0.0 { -y } else { y }
}

/// `e^x` in f32 (relative error below 2e-7 on `[-87, 88]`): Cephes `expf` — `x = k·ln 2 + r` with
/// `ln 2` in two parts, a degree-7 polynomial in `r`, then `2^k` from the exponent bits. Overflows to
/// `+∞` above 88.7, flushes to 0 below −87.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    if x > 88.72 {
        return f32::INFINITY;
    }
    if x < -87.33 {
        return 0.0;
    }
    // k = round(x / ln 2), without a float-to-int rounding mode: floor(x·log2e + 0.5).
    let t = x * core::f32::consts::LOG2_E + 0.5;
    let mut k = t as i32; // truncates toward zero
    if (k as f32) > t {
        k -= 1;
    }
    let kf = k as f32;
    let r = x - kf * 0.693_359_4;
    let r = r - kf * -2.121_944_4e-4;
    let z = r * r;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let e = p * z + r + 1.0;
    // 2^k in two steps, so k = 128 (x near 88.7) and k = -126.. stay representable.
    let half = k / 2;
    e * f32::from_bits(((half + 127) as u32) << 23) * f32::from_bits((((k - half) + 127) as u32) << 23)
}

/// A sparse adjustment of one token's logit `z` (after soft-capping):
/// `repetition(z + bias) − subtract`, where `repetition(x) = x / r` for `x > 0` and `x · r` otherwise
/// (`r = 1`: none). A request's logit bias, repetition penalty and frequency/presence penalties fold
/// into one adjustment per token.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adjustment {
    /// Added first (OpenAI's `logit_bias`).
    pub bias: f32,
    /// The repetition penalty `r > 0` (1 = none).
    pub repetition: f32,
    /// Subtracted last: `frequency · count + presence · [count > 0]`.
    pub subtract: f32,
}

impl Adjustment {
    /// No change.
    pub const NONE: Self = Self { bias: 0.0, repetition: 1.0, subtract: 0.0 };

    /// The adjusted logit.
    #[inline(always)]
    pub fn apply(&self, z: f32) -> f32 {
        let x = z + self.bias;
        let x = if x > 0.0 { x / self.repetition } else { x * self.repetition };
        x - self.subtract
    }
}

/// THE logit pipeline: what a logit becomes before the argmax and the log-probabilities, written once
/// and called by every site that processes a logit — the fused kernels' lane epilogue, the adjusted
/// tokens' kernel, the reduction, the truncation fallback, and the CPU backend. In order (vLLM's
/// sampler): the model's soft-cap ([`softcap`]), the token's sparse adjustment ([`Adjustment`]),
/// the allowed-token mask (`−∞` where not allowed); then the temperature, for the log-probabilities
/// ([`Transform::scaled`](crate::Transform::scaled)) and the sampled score
/// ([`Transform::score`](crate::Transform::score)).
///
/// A new per-logit transform is a field here (or in the row's parameters it is built from) and a
/// line in [`LogitPipeline::process`] (and [`LogitPipeline::capped_if`] when it belongs to step 1),
/// with its CPU test; no device file changes (`docs/dev/changing-the-kernel.md`, "A new logit transform").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogitPipeline {
    /// The launch's soft-cap (`0`: none; else finite and `> 0`).
    pub softcap: f32,
}

impl LogitPipeline {
    /// Nothing applied.
    pub const NONE: Self = Self { softcap: 0.0 };

    /// The pipeline of a launch soft-capping at `softcap` (`0`: none).
    #[inline(always)]
    pub const fn new(softcap: f32) -> Self {
        Self { softcap }
    }

    /// Step 1, the soft-cap, where `SC` says at compile time whether the launch soft-caps (`SC` only
    /// when `softcap > 0`): the fused kernels specialise on it, so the plain path's unrolled loop
    /// holds none of it.
    #[inline(always)]
    pub fn capped_if<const SC: bool>(self, y: f32) -> f32 {
        if SC { softcap(y, self.softcap) } else { y }
    }

    /// Step 1 for a caller that does not specialise.
    #[inline(always)]
    pub fn capped(self, y: f32) -> f32 {
        if self.softcap > 0.0 { self.capped_if::<true>(y) } else { y }
    }

    /// Step 3, the mask: `z`, or `−∞` where the token is not allowed.
    #[inline(always)]
    pub fn masked(z: f32, allowed: bool) -> f32 {
        if allowed { z } else { f32::NEG_INFINITY }
    }

    /// Steps 1–3: the processed logit `z` of a token of logit `y`, its adjustment (`None`: none) and
    /// whether the mask allows it.
    #[inline(always)]
    pub fn process(self, y: f32, adjustment: Option<&Adjustment>, allowed: bool) -> f32 {
        let z = self.capped(y);
        let z = match adjustment {
            Some(a) if allowed => a.apply(z),
            _ => z,
        };
        Self::masked(z, allowed)
    }
}

/// Whether token `v` is allowed by a row's bitmask (32-bit words, bit `j` of word `w` = token
/// `32·w + j`: vLLM's and xgrammar's layout).
#[inline(always)]
pub fn allowed(mask_words: &[u32], v: u32) -> bool {
    (mask_words[(v / 32) as usize] >> (v % 32)) & 1 == 1
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn exp_and_tanh_match_f64() {
        let mut worst = (0.0f64, 0.0f64);
        let mut x = -87.0f32;
        while x < 88.0 {
            let e = ((exp(x) as f64) / (x as f64).exp() - 1.0).abs();
            worst.0 = worst.0.max(e);
            x += 0.0137;
        }
        let mut x = -12.0f32;
        while x < 12.0 {
            let want = (x as f64).tanh();
            let got = tanh(x) as f64;
            let e = if want.abs() > 1e-30 { ((got - want) / want).abs() } else { got.abs() };
            worst.1 = worst.1.max(e);
            x += 0.000_97;
        }
        assert!(worst.0 < 2e-7, "exp: worst relative error {:e}", worst.0);
        assert!(worst.1 < 4e-7, "tanh: worst relative error {:e}", worst.1);
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!((tanh(0.0), tanh(20.0), tanh(-20.0)), (0.0, 1.0, -1.0));
        assert!(tanh(f32::NAN).is_nan());
    }

    #[test]
    fn softcap_adjustments_and_masks() {
        assert!((softcap(100.0, 30.0) as f64 - 30.0 * (100.0f64 / 30.0).tanh()).abs() < 1e-5);
        assert_eq!(softcap(f32::INFINITY, 30.0), 30.0);
        assert_eq!(softcap(f32::NEG_INFINITY, 30.0), -30.0);
        assert_eq!(Adjustment::NONE.apply(-3.25), -3.25);
        let a = Adjustment { bias: 1.0, repetition: 2.0, subtract: 0.5 };
        assert_eq!(a.apply(3.0), 1.5); // (3 + 1) / 2 − 0.5
        assert_eq!(a.apply(-3.0), -4.5); // (−3 + 1) · 2 − 0.5
        assert_eq!(Adjustment { bias: -100.0, ..Adjustment::NONE }.apply(2.0), -98.0);
        let mask = [0b101u32, 1 << 31];
        assert!(allowed(&mask, 0) && !allowed(&mask, 1) && allowed(&mask, 2) && allowed(&mask, 63));
        assert!(!allowed(&mask, 32));
    }

    #[test]
    fn the_pipeline_caps_then_adjusts_then_masks() {
        let a = Adjustment { bias: 1.5, repetition: 1.3, subtract: 0.25 };
        let none = LogitPipeline::NONE;
        let cap = LogitPipeline::new(30.0);
        for y in [-1e30f32, -50.0, -3.0, -0.0, 0.0, 0.7, 2.0, 45.0, 1e30, f32::INFINITY, f32::NEG_INFINITY] {
            // Identities, bit for bit.
            assert_eq!(none.process(y, None, true).to_bits(), y.to_bits());
            assert_eq!(none.capped(y).to_bits(), y.to_bits());
            assert_eq!(cap.process(y, None, true).to_bits(), softcap(y, 30.0).to_bits());
            assert_eq!(cap.capped_if::<true>(y).to_bits(), cap.capped(y).to_bits());
            assert_eq!(cap.capped_if::<false>(y).to_bits(), y.to_bits());
            // The order: the adjustment applies to the capped logit; the mask last, whatever came before.
            assert_eq!(cap.process(y, Some(&a), true).to_bits(), a.apply(softcap(y, 30.0)).to_bits());
            assert_eq!(none.process(y, Some(&a), true).to_bits(), a.apply(y).to_bits());
            assert_eq!(cap.process(y, Some(&a), false), f32::NEG_INFINITY);
            assert_eq!(none.process(y, None, false), f32::NEG_INFINITY);
            assert_eq!(LogitPipeline::masked(y, true).to_bits(), y.to_bits());
        }
        assert!(cap.process(f32::NAN, None, true).is_nan() && none.process(f32::NAN, Some(&a), true).is_nan());
        // The temperature step: z · fl(1/T).
        let t = crate::Transform::from_temperature(0.7);
        assert_eq!(t.scaled(2.0).to_bits(), (2.0f32 * (1.0 / 0.7f32)).to_bits());
    }
}
