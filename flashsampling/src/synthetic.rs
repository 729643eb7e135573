//! Deterministic synthetic data for examples, tests and benchmarks (not the sampling noise).

use half::bf16;

use crate::error::{Error, Result};
use crate::params::check_shape;

/// SplitMix64's state increment.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64: a tiny, fast, seedable generator for test and benchmark data.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The generator as it is after `n` more draws (its state steps by a constant).
    pub fn skip(&mut self, n: u64) {
        self.0 = self.0.wrapping_add(GAMMA.wrapping_mul(n));
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// `n` bf16 values, approximately normal with standard deviation `std`: an Irwin–Hall sum of four
    /// 16-bit uniforms from one 64-bit draw, centred and scaled to unit variance (fast enough for
    /// billion-element LM heads; never all zeros; bounded by ±2√3·std).
    pub fn normal_bf16(&mut self, n: usize, std: f64) -> Vec<bf16> {
        self.normal_bf16_iter(std).take(n).collect()
    }

    /// [`Self::normal_bf16`] into memory reserved first: [`Error::HostMemory`] (naming `what`)
    /// when the system refuses it, never an abort.
    pub fn try_normal_bf16(&mut self, n: usize, std: f64, what: &'static str) -> Result<Vec<bf16>> {
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|_| Error::HostMemory { what, bytes: n.saturating_mul(2) })?;
        out.extend(self.normal_bf16_iter(std).take(n));
        Ok(out)
    }

    fn normal_bf16_iter(&mut self, std: f64) -> impl Iterator<Item = bf16> + '_ {
        let scale = (3.0f32).sqrt() * std as f32 / 65536.0;
        std::iter::repeat_with(move || {
            let x = self.next_u64();
            let sum = (x & 0xffff) + ((x >> 16) & 0xffff) + ((x >> 32) & 0xffff) + (x >> 48) + 2;
            bf16::from_f32((sum as f32 - 2.0 * 65536.0) * scale)
        })
    }
}

/// A synthetic LM head: weight `[V, D]` ~ N(0, (2/√D)²) (logits of standard deviation ≈ 2 for unit
/// hidden states) and hidden states `[B, D]` ~ N(0, 1), both from `seed`. Panics where the memory
/// cannot be had; [`try_lm_head`] checks first.
pub fn lm_head(b: usize, d: usize, v: usize, seed: u64) -> (Vec<bf16>, Vec<bf16>) {
    let mut rng = SplitMix64::new(seed);
    let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
    let hidden = rng.normal_bf16(b * d, 1.0);
    (hidden, weight)
}

/// [`lm_head`] for a shape from outside (a command line): the shape goes through the library's
/// checks first ([`check_shape`]: B, D, V positive and within the kernels' limits, D aligned), then
/// the memory of both parts is reserved ([`Error::HostMemory`] when refused) before either is drawn.
/// The same values as [`lm_head`].
pub fn try_lm_head(b: usize, d: usize, v: usize, seed: u64) -> Result<(Vec<bf16>, Vec<bf16>)> {
    let (hidden, weight) = try_lm_head_parts(b, d, v, seed, true, true)?;
    Ok((hidden.expect("asked for"), weight.expect("asked for")))
}

/// `(hidden states, weight)` of a synthetic head, each `None` when not asked for.
pub type HeadParts = (Option<Vec<bf16>>, Option<Vec<bf16>>);

/// The parts of [`try_lm_head`] asked for (`(hidden, weight)`; for a run that loads the other from
/// a file), each the same values as the whole head's: the shape checked, then the memory of every
/// part asked for reserved before any is drawn (a refused part costs no time drawing the other),
/// the weight's draws skipped, not made, when only the hidden states are asked for.
pub fn try_lm_head_parts(b: usize, d: usize, v: usize, seed: u64, hidden: bool, weight: bool) -> Result<HeadParts> {
    check_shape(b, d, v)?;
    // b, d, v ≤ 2³⁰: the products fit a 64-bit usize.
    let reserve = |want: bool, n: usize, what: &'static str| -> Result<Option<Vec<bf16>>> {
        if !want {
            return Ok(None);
        }
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|_| Error::HostMemory { what, bytes: n.saturating_mul(2) })?;
        Ok(Some(out))
    };
    let mut w = reserve(weight, v * d, "the synthetic LM-head weight")?;
    let mut h = reserve(hidden, b * d, "the synthetic hidden states")?;
    let mut rng = SplitMix64::new(seed);
    match &mut w {
        Some(w) => w.extend(rng.normal_bf16_iter(2.0 / (d as f64).sqrt()).take(v * d)),
        None => rng.skip((v * d) as u64),
    }
    if let Some(h) = &mut h {
        h.extend(rng.normal_bf16_iter(1.0).take(b * d));
    }
    Ok((h, w))
}

/// [`try_lm_head`]'s weight alone (for a run whose hidden states come from a file).
pub fn try_lm_head_weight(d: usize, v: usize, seed: u64) -> Result<Vec<bf16>> {
    Ok(try_lm_head_parts(1, d, v, seed, false, true)?.1.expect("asked for"))
}

/// [`try_lm_head`]'s hidden states alone (for a run whose weight comes from a file): the weight's
/// draws are skipped, not made.
pub fn try_lm_head_hidden(b: usize, d: usize, v: usize, seed: u64) -> Result<Vec<bf16>> {
    Ok(try_lm_head_parts(b, d, v, seed, true, false)?.0.expect("asked for"))
}
