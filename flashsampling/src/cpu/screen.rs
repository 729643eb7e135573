//! Issue 54's study: sampling from the bf16 head while reading a 1-byte copy of it, exactly.
//!
//! A [`ScreenedHead`] holds a quantized copy `ŵ` of the LM head ([`Quant`]: e4m3 with a scale per row
//! or per 32 elements, or int8 with a scale per row), `k` hidden dimensions kept exact (their weight
//! columns in bf16), and per row two norms rounded up: the quantization residual over the other
//! dimensions `r_i ≥ ‖(w_i − ŵ_i)_R‖` and `n_i ≥ ‖w_i‖`. For a hidden row `h`, every token gets an
//! estimate `ŷ_i = h_O·w_{i,O} + h_R·ŵ_{i,R}` (f64) and a bound `|y_i − ŷ_i| ≤ E_i`, where `y_i` is the
//! f32 logit the bf16 path computes:
//!
//! `E_i = ‖h_R‖·r_i` (Cauchy–Schwarz on the quantization error) `+ γ_D·‖h‖·n_i` (the f32 summation
//! of the bf16 path, any order: `γ_D = D·u / (1 − D·u)`, `u = 2⁻²⁴`) `+` the f64 rounding of `ŷ`.
//!
//! The perturbed score is `y·s + g·n` ([`flashsampling_kernels::Transform::score`]); with `y` in
//! `[ŷ − E, ŷ + E]` it lies in `[L_i, U_i]` (widened by its own f32 rounding). A token whose `U_i` is
//! below the largest `L_j` cannot be the argmax; the others (the survivors) are rescored exactly —
//! their bf16 rows, the bf16 path's `dot` and transform — and their argmax is the bf16 path's sample,
//! bit for bit (token and score). [`ScreenStats`] records what the screen would have read.
//!
//! Plain sampling only (per-row temperatures, greedy rows, seeds, streams, sample indices); other
//! controls are [`Error::Unsupported`]. A CPU reference for the go/no-go of the GPU kernels, not a
//! fast path: see `docs/findings/40-fp8-screen-study.md`.

use flashsampling_kernels::Candidate;

use super::{CpuBackend, dot, slots};
use crate::error::{Error, Result};
use crate::params::{Element, Matrix, SamplingParams, validate};
use crate::{Samples, check_samples_of};

/// How the screen's copy of the weight is quantized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quant {
    /// e4m3 (OCP FP8, max 448, round to nearest even), one f32 scale per weight row (`max |w| / 448`).
    E4m3Row,
    /// e4m3 with one power-of-two scale per 32 consecutive elements of a row (MXFP8's layout).
    E4m3Block32,
    /// int8 (`−127 ..= 127`, round to nearest even), one f32 scale per weight row (`max |w| / 127`).
    Int8Row,
}

impl Quant {
    /// Bytes of the copy per weight row of `d` elements: the codes and the scales.
    pub fn bytes_per_row(self, d: usize) -> usize {
        match self {
            Quant::E4m3Row | Quant::Int8Row => d + 4,
            Quant::E4m3Block32 => d + d.div_ceil(32),
        }
    }
}

/// The e4m3 value nearest `x` (ties to even), saturating at ±448 (OCP FP8 E4M3: bias 7, subnormals
/// `m · 2⁻⁹`).
pub fn round_e4m3(x: f64) -> f64 {
    const MAX: f64 = 448.0;
    if x.abs() >= MAX {
        return MAX.copysign(x);
    }
    if x == 0.0 {
        return 0.0;
    }
    let e = x.abs().log2().floor().max(-6.0);
    let quantum = (e - 3.0).exp2();
    ((x / quantum).round_ties_even() * quantum).clamp(-MAX, MAX)
}

/// The quantized head, its exact columns and per-row bounds (see the module documentation).
#[derive(Clone, Debug)]
pub struct ScreenedHead {
    quant: Quant,
    v: usize,
    d: usize,
    /// The dimensions kept exact (sorted), and a flag per dimension.
    outliers: Vec<usize>,
    exact_dim: Vec<bool>,
    /// `ŵ` as f32 (every e4m3 or int8 value times its scale is computed in f64 at use; stored here
    /// as the code's value `q` and the scale apart).
    codes: Vec<f32>,
    /// Per row (`E4m3Row`, `Int8Row`) or per 32-element block (`E4m3Block32`).
    scales: Vec<f32>,
    /// `r_i ≥ ‖(w_i − ŵ_i)_R‖`, rounded up to f32.
    residual: Vec<f32>,
    /// `n_i ≥ ‖w_i‖`, rounded up to f32.
    norm: Vec<f32>,
    /// The exact columns `w_{i,O}` (`[V, k]`, f32 values of the bf16 / f16 weights).
    exact_cols: Vec<f32>,
}

/// The next f32 above a non-negative f64 (a bound rounded up).
fn up(x: f64) -> f32 {
    let f = x as f32;
    if (f as f64) < x { f.next_up() } else { f }
}

impl ScreenedHead {
    /// Quantizes `weight` (`[V, D]`) with `quant`, keeping the dimensions `outliers` exact.
    pub fn prepare<T: Element>(weight: Matrix<'_, T>, quant: Quant, outliers: &[usize]) -> Result<Self> {
        let (v, d) = (weight.rows, weight.cols);
        if weight.data.len() != v * d {
            return Err(Error::LengthMismatch { buffer: "LM-head weight", expected: v * d, actual: weight.data.len() });
        }
        let mut exact_dim = vec![false; d];
        let mut outliers: Vec<usize> = outliers.to_vec();
        outliers.sort_unstable();
        outliers.dedup();
        if let Some(&bad) = outliers.iter().find(|&&o| o >= d) {
            return Err(Error::TokenOutOfRange { row: 0, token: bad as u32, v: d });
        }
        for &o in &outliers {
            exact_dim[o] = true;
        }
        let blocks = d.div_ceil(32);
        let mut head = Self {
            quant,
            v,
            d,
            exact_cols: Vec::with_capacity(v * outliers.len()),
            outliers,
            exact_dim,
            codes: vec![0.0; v * d],
            scales: Vec::with_capacity(if quant == Quant::E4m3Block32 { v * blocks } else { v }),
            residual: Vec::with_capacity(v),
            norm: Vec::with_capacity(v),
        };
        let mut w = vec![0f64; d];
        for i in 0..v {
            for (dst, src) in w.iter_mut().zip(&weight.data[i * d..(i + 1) * d]) {
                *dst = src.to_f32() as f64;
            }
            let codes = &mut head.codes[i * d..(i + 1) * d];
            let max_of = |xs: &[f64]| xs.iter().fold(0f64, |m, x| m.max(x.abs()));
            match quant {
                Quant::E4m3Row | Quant::Int8Row => {
                    let top = if quant == Quant::Int8Row { 127.0 } else { 448.0 };
                    let s = (max_of(&w) / top) as f32;
                    let s = if s > 0.0 { s } else { 1.0 };
                    for (c, &x) in codes.iter_mut().zip(&w) {
                        let q = x / s as f64;
                        *c = if quant == Quant::Int8Row {
                            q.round_ties_even().clamp(-127.0, 127.0) as f32
                        } else {
                            round_e4m3(q) as f32
                        };
                    }
                    head.scales.push(s);
                }
                Quant::E4m3Block32 => {
                    for (cb, wb) in codes.chunks_mut(32).zip(w.chunks(32)) {
                        let m = max_of(wb);
                        // The smallest power of two with max / s ≤ 448.
                        let s = if m > 0.0 { (m / 448.0).log2().ceil().exp2() } else { 1.0 };
                        for (c, &x) in cb.iter_mut().zip(wb) {
                            *c = round_e4m3(x / s) as f32;
                        }
                        head.scales.push(s as f32);
                    }
                }
            }
            let (mut res2, mut norm2) = (0f64, 0f64);
            for (j, &x) in w.iter().enumerate() {
                norm2 += x * x;
                if head.exact_dim[j] {
                    continue;
                }
                let err = x - head.dequantized(i, j);
                res2 += err * err;
            }
            // f64 sums of squares are within a relative 2·D·2⁻⁵³ of the truth: round up past it.
            let slack = 1.0 + 4.0 * d as f64 * f64::EPSILON;
            head.residual.push(up(res2.sqrt() * slack));
            head.norm.push(up(norm2.sqrt() * slack));
            head.exact_cols.extend(head.outliers.iter().map(|&o| w[o] as f32));
        }
        Ok(head)
    }

    /// `ŵ_{i,j}` (exact in f64: an f32 scale times a 4-bit-mantissa or 8-bit integer code).
    fn dequantized(&self, i: usize, j: usize) -> f64 {
        let s = match self.quant {
            Quant::E4m3Row | Quant::Int8Row => self.scales[i],
            Quant::E4m3Block32 => self.scales[i * self.d.div_ceil(32) + j / 32],
        };
        self.codes[i * self.d + j] as f64 * s as f64
    }

    /// The quantization.
    pub fn quant(&self) -> Quant {
        self.quant
    }

    /// The dimensions kept exact.
    pub fn outliers(&self) -> &[usize] {
        &self.outliers
    }

    /// For hidden row `h` (f32 values): every token's estimate `ŷ_i` and bound `E_i` (see the module
    /// documentation).
    pub fn estimate(&self, h: &[f32]) -> (Vec<f64>, Vec<f64>) {
        let d = self.d;
        let h64: Vec<f64> = h.iter().map(|&x| x as f64).collect();
        let norm_h = h64.iter().map(|x| x * x).sum::<f64>().sqrt();
        let norm_r = h64.iter().zip(&self.exact_dim).filter(|(_, e)| !**e).map(|(x, _)| x * x).sum::<f64>().sqrt();
        let u = (-24f64).exp2();
        let gamma = d as f64 * u / (1.0 - d as f64 * u);
        let k = self.outliers.len();
        let mut est = Vec::with_capacity(self.v);
        let mut bound = Vec::with_capacity(self.v);
        for i in 0..self.v {
            let mut y = 0f64;
            let mut abs = 0f64;
            for (j, &o) in self.outliers.iter().enumerate() {
                let t = h64[o] * self.exact_cols[i * k + j] as f64;
                y += t;
                abs += t.abs();
            }
            for (j, &x) in h64.iter().enumerate() {
                if !self.exact_dim[j] {
                    let t = x * self.dequantized(i, j);
                    y += t;
                    abs += t.abs();
                }
            }
            // The f64 sum's own rounding: γ_D in f64 times Σ|terms|, doubled, plus the norms'
            // rounding (relative 4·D·2⁻⁵³, covered by the same factor of 2 on a larger term); and the
            // bf16 path's products or partial sums that fall below f32's normal range, whose error is
            // absolute (at most 2⁻¹⁵⁰ each, one per term and sum: 2D of them).
            let e = norm_r * self.residual[i] as f64 + gamma * norm_h * self.norm[i] as f64;
            let underflow = 2.0 * d as f64 * (-150f64).exp2();
            est.push(y);
            bound.push(e * (1.0 + 8.0 * d as f64 * f64::EPSILON) + 2.0 * d as f64 * f64::EPSILON * abs + underflow);
        }
        (est, bound)
    }
}

/// What one screened row cost: the tokens left to rescore in bf16.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScreenStats {
    /// Survivors (rescored tokens) per row, `[B]`.
    pub survivors: Vec<usize>,
    /// The distinct survivors of the whole call (weight rows rescoring reads once for the batch).
    pub union: usize,
}

/// The interval `[L, U]` of the perturbed score `fl(fl(y·s) + fl(g·n))` for `y` in `[ŷ − E, ŷ + E]`.
pub fn score_interval(est: f64, bound: f64, g: f32, s: f32, n: f32) -> (f64, f64) {
    let (lo, hi) = ((est - bound) * s as f64, (est + bound) * s as f64);
    let noise = g as f64 * n as f64;
    // Three f32 roundings (two products, the sum), each within 2⁻²⁴ of its magnitude: 2⁻²¹ covers them;
    // a result in f32's subnormal range errs by an absolute 2⁻¹⁴⁹ at most (three of them).
    let slack = (-21f64).exp2() * (lo.abs().max(hi.abs()) + noise.abs()) + 3.0 * (-149f64).exp2();
    (lo + noise - slack, hi + noise + slack)
}

impl CpuBackend {
    /// [`Self::sample_scored`] through `head`'s screen: the same tokens and scores, bit for bit
    /// (plain sampling; `n = 1`), and what the screen left to rescore ([`ScreenStats`]). Other controls
    /// are [`Error::Unsupported`]; `head` must be `weight`'s ([`ScreenedHead::prepare`]).
    pub fn sample_screened<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        head: &ScreenedHead,
        params: &SamplingParams,
    ) -> Result<(Samples, ScreenStats)> {
        let (shape, _) = validate(
            (hidden.rows, hidden.cols, hidden.data.len()),
            (weight.rows, weight.cols, weight.data.len()),
            params,
        )?;
        let plain = params.n == 1
            && params.allowed.is_none()
            && params.adjustments.is_none()
            && params.softcap.is_none()
            && !params.truncates(shape.v)
            && params.top_logprobs == 0
            && params.logprobs == crate::params::LogProbs::Off;
        if !plain {
            return Err(Error::Unsupported {
                control: "controls besides temperature",
                path: "in the FP8 screen study",
            });
        }
        if (head.v, head.d) != (shape.v, shape.d) {
            let (expected, actual) = (head.v * head.d, shape.v * shape.d);
            return Err(Error::LengthMismatch { buffer: "screened head (V × D)", expected, actual });
        }
        let slots = slots(params, shape.b);
        let d = shape.d;
        let mut winners = Vec::with_capacity(shape.b);
        let mut stats = ScreenStats::default();
        let mut rescored = vec![false; shape.v];
        let mut w = vec![0f32; d];
        for (r, slot) in slots.iter().enumerate() {
            let h: Vec<f32> = hidden.data[r * d..(r + 1) * d].iter().map(|x| x.to_f32()).collect();
            let (est, bound) = head.estimate(&h);
            let t = &slot.transform;
            let greedy = t.is_greedy();
            let noise = |i: usize| if greedy { 0.0 } else { slot.noise.gumbel_at(i as u32) };
            let (s, n) = (t.logit_scale(), t.noise_scale);
            let intervals: Vec<(f64, f64)> =
                (0..shape.v).map(|i| score_interval(est[i], bound[i], noise(i), s, n)).collect();
            let best_low = intervals.iter().map(|&(lo, _)| lo).fold(f64::NEG_INFINITY, f64::max);
            let mut c = Candidate::EMPTY;
            let mut count = 0;
            for (i, &(_, hi)) in intervals.iter().enumerate() {
                // NaN bounds (NaN inputs) survive: the rescoring decides as the bf16 path does.
                if hi >= best_low || hi.is_nan() || best_low.is_nan() {
                    for (dst, src) in w.iter_mut().zip(&weight.data[i * d..(i + 1) * d]) {
                        *dst = src.to_f32();
                    }
                    c.update(t.score(dot(&h, &w), noise(i)), i as u32);
                    count += 1;
                    rescored[i] = true;
                }
            }
            winners.push(c);
            stats.survivors.push(count);
        }
        stats.union = rescored.iter().filter(|&&x| x).count();
        let samples =
            Samples::plain(winners.iter().map(|c| c.token()).collect(), winners.iter().map(|c| c.score).collect());
        check_samples_of(&samples, 1, hidden, &[weight.data])?;
        Ok((samples, stats))
    }
}
