//! Shared helpers of the integration tests: deterministic synthetic data, f64 references, the
//! chi-squared goodness-of-fit test, and the GPU SKIP/REQUIRE gate.
#![allow(dead_code)]

use std::io::Write;

use flashsampling::controls::{SparseAdjustments, TokenMask};
use flashsampling::kernels::RowNoise;
use flashsampling::kernels::logits::Adjustment;
use flashsampling::{Element, GpuBackend, Matrix, SamplingParams};
use half::bf16;

/// Test data generator (the library's SplitMix64).
pub type TestRng = flashsampling::synthetic::SplitMix64;

/// f64 logits `hidden[row] · weight[v]` for every v (exact products of bf16 or f16, f64 sums).
pub fn logits_f64<T: Element>(hidden: &[T], weight: &[T], d: usize, row: usize) -> Vec<f64> {
    let h = &hidden[row * d..(row + 1) * d];
    weight.chunks(d).map(|w| h.iter().zip(w).map(|(a, b)| a.to_f32() as f64 * b.to_f32() as f64).sum()).collect()
}

/// `Σ_d |h_d · w_d|` for one (row, v): scales the f32 summation error bound.
pub fn abs_dot<T: Element>(hidden: &[T], weight: &[T], d: usize, row: usize, v: usize) -> f64 {
    let h = &hidden[row * d..(row + 1) * d];
    let w = &weight[v * d..(v + 1) * d];
    h.iter().zip(w).map(|(a, b)| (a.to_f32() as f64 * b.to_f32() as f64).abs()).sum()
}

/// A bound on |f32 dot − exact dot| for D terms summed in f32 in any order (both sides),
/// `2 · D · 2^-24 · Σ|h·w|`, plus a small absolute floor.
pub fn f32_dot_tolerance(d: usize, abs_dot: f64) -> f64 {
    2.0 * d as f64 * f64::powi(2.0, -24) * abs_dot + 1e-6
}

/// The perturbed score of (row, v) in f64: `y / T + g` with the exact Gumbel noise the kernels use.
pub fn perturbed_f64(logit: f64, v: u32, noise: &RowNoise, temperature: f32) -> f64 {
    if temperature == 0.0 { logit } else { logit * (1.0 / temperature) as f64 + noise.gumbel_at(v) as f64 }
}

/// Softmax of `logits / t` in f64.
pub fn softmax(logits: &[f64], t: f64) -> Vec<f64> {
    let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = logits.iter().map(|&y| ((y - m) / t).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

/// Regularized upper incomplete gamma Q(a, x) (series for x < a + 1, continued fraction otherwise).
pub fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let ln_gamma_a = ln_gamma(a);
    if x < a + 1.0 {
        let (mut sum, mut term, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        1.0 - sum * (-x + a * x.ln() - ln_gamma_a).exp()
    } else {
        // Lentz's continued fraction.
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-15 {
                break;
            }
        }
        (-x + a * x.ln() - ln_gamma_a).exp() * h
    }
}

/// ln Γ(x), Lanczos (g = 7, n = 9).
pub fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        std::f64::consts::PI.ln() - (std::f64::consts::PI * x).sin().ln() - ln_gamma(1.0 - x)
    } else {
        let x = x - 1.0;
        let mut a = C[0];
        let t = x + 7.5;
        for (i, c) in C.iter().enumerate().skip(1) {
            a += c / (x + i as f64);
        }
        0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
    }
}

/// Pearson chi-squared goodness of fit of `counts` against `probs`; bins with expected count < 5 are
/// pooled into one bin (kept only if its pooled expectation reaches 5). Returns (statistic, df, p).
pub fn chi_squared(counts: &[u64], probs: &[f64]) -> (f64, usize, f64) {
    let n: u64 = counts.iter().sum();
    let (mut stat, mut bins) = (0.0, 0usize);
    let (mut pool_obs, mut pool_exp) = (0.0, 0.0);
    for (&c, &p) in counts.iter().zip(probs) {
        let e = p * n as f64;
        if e < 5.0 {
            pool_obs += c as f64;
            pool_exp += e;
        } else {
            stat += (c as f64 - e).powi(2) / e;
            bins += 1;
        }
    }
    if pool_exp >= 5.0 {
        stat += (pool_obs - pool_exp).powi(2) / pool_exp;
        bins += 1;
    } else if bins > 0 {
        // Too little pooled mass for its own bin: it may not hide observations either.
        assert!(pool_obs <= 5.0 + 5.0 * pool_exp, "{pool_obs} samples fell in bins expecting {pool_exp}");
    }
    let df = bins.saturating_sub(1).max(1);
    (stat, df, gamma_q(df as f64 / 2.0, stat / 2.0))
}

/// A chi-squared setup: `b` identical hidden rows (so each row is one independent draw of the same
/// distribution, through its own stream), a weight of `v` rows, and the exact probabilities.
pub struct ChiSetup {
    pub hidden: Vec<bf16>,
    pub weight: Vec<bf16>,
    pub d: usize,
    pub v: usize,
    pub b: usize,
    pub probs: Vec<f64>,
}

/// Kinds of logit distributions for the chi-squared tests.
#[derive(Clone, Copy, Debug)]
pub enum Logits {
    /// Logits of standard deviation about 1.5.
    Spread,
    /// The same, all shifted below −20.
    AllNegative,
    /// A peaked distribution: one token takes a large share of the mass.
    Peaked,
}

pub fn chi_setup(kind: Logits, v: usize, b: usize, temperature: f32, seed: u64) -> ChiSetup {
    let d = 64;
    let mut rng = TestRng::new(seed);
    let mut h_row = rng.normal_bf16(d, 1.0);
    let scale = match kind {
        Logits::Peaked => 0.6,
        _ => 0.19,
    };
    let mut weight = rng.normal_bf16(v * d, scale);
    if let Logits::AllNegative = kind {
        // Last hidden coordinate 1, last weight column −24: every logit shifts by −24 exactly.
        h_row[d - 1] = bf16::from_f32(1.0);
        for r in 0..v {
            weight[r * d + d - 1] = bf16::from_f32(-24.0);
        }
    }
    let hidden: Vec<bf16> = (0..b).flat_map(|_| h_row.iter().copied()).collect();
    let logits = logits_f64(&hidden[..d], &weight, d, 0);
    if let Logits::AllNegative = kind {
        assert!(logits.iter().all(|&y| y < 0.0), "setup must give all-negative logits");
    }
    let probs = softmax(&logits, temperature as f64);
    ChiSetup { hidden, weight, d, v, b, probs }
}

/// Histogram of tokens over `v` bins.
pub fn histogram(tokens: &[u32], v: usize) -> Vec<u64> {
    let mut counts = vec![0u64; v];
    for &t in tokens {
        counts[t as usize] += 1;
    }
    counts
}

/// Streams 0..b offset by `base` (fresh draws per round).
pub fn params_round(temperature: f32, seed: u64, b: usize, base: u64) -> SamplingParams {
    SamplingParams::new(temperature, seed).with_streams((0..b as u64).map(|i| base + i).collect())
}

/// Writes straight to the process's stderr (not captured by the test harness).
pub fn visible(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The GPU backend, or `None` after a visible SKIP line when no GPU is present; with
/// `FLASHSAMPLING_REQUIRE_GPU=1` a missing GPU fails the test instead.
pub fn gpu_or_skip(test: &str) -> Option<GpuBackend> {
    let require = std::env::var("FLASHSAMPLING_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let options = flashsampling::gpu::GpuOptions::from_env().expect("valid FLASHSAMPLING_* tuning variables");
    match GpuBackend::with_options(0, options) {
        Ok(g) => Some(g),
        Err(e) if require => panic!("FLASHSAMPLING_REQUIRE_GPU=1 but no GPU: {e}"),
        Err(e) => {
            visible(&format!("SKIP {test}: no GPU ({e}); set FLASHSAMPLING_REQUIRE_GPU=1 to fail instead"));
            None
        }
    }
}

/// A far-tail row (D = 8): token 0 at logit 0 and the other `v − 1` tokens at logit `-logit_gap`
/// (exact in bf16 and in the f32 dot), `b` copies of it. Returns (hidden, weight).
pub fn far_tail_setup(v: usize, b: usize, logit_gap: f32) -> (Vec<bf16>, Vec<bf16>) {
    let gap = bf16::from_f32(logit_gap);
    assert_eq!(gap.to_f32(), logit_gap, "the gap must be exact in bf16");
    crafted_lm_head(v, b, FAR_TAIL_D, |r| if r == 0 { 0.0 } else { -logit_gap })
}

/// Rows the truncation certificate cannot decide, for the exact fallback's tests: 8 rows of `V`
/// = 4000 exact logits (a [`crafted_lm_head`] of width 8), nearly flat (the nucleus at p = 0.99
/// holds thousands of tokens, more than the certified path keeps) or tied (logits on a coarse grid,
/// so top-k's boundary is a tie of many tokens), and the per-row top-p / top-k that send most of
/// them there: `(name, hidden, weight, params)`, `params` at T = 1, seed 5.
pub fn fallback_rows() -> Vec<(&'static str, Vec<bf16>, Vec<bf16>, flashsampling::SamplingParams)> {
    let (v, b) = (4000usize, 8usize);
    let params = flashsampling::SamplingParams::new(1.0, 5)
        .with_top_p(vec![0.99, 0.99, 0.995, 0.9, 1.0, 0.99, 0.95, 0.999])
        .with_top_k(vec![0, 100, 0, 0, 64, 0, 500, 3]);
    let flat = crafted_lm_head(v, b, 8, |i| ((i * 7919) % 1000) as f32 * 1e-3);
    let ties = crafted_lm_head(v, b, 8, |i| ((i * 7919) % 5) as f32 * 0.5);
    vec![("flat", flat.0, flat.1, params.clone()), ("ties", ties.0, ties.1, params)]
}

/// An LM head with exact logits: `b` hidden rows `[1, 0, …, 0]` and `v` weight rows
/// `[logit(i), 0, …, 0]` (bf16-rounded) of width `d`, so row `i`'s logit is `logit(i)` in every batch row.
pub fn crafted_lm_head(v: usize, b: usize, d: usize, logit: impl Fn(usize) -> f32) -> (Vec<bf16>, Vec<bf16>) {
    let mut hidden = vec![bf16::ZERO; b * d];
    for r in 0..b {
        hidden[r * d] = bf16::ONE;
    }
    let mut weight = vec![bf16::ZERO; v * d];
    for i in 0..v {
        weight[i * d] = bf16::from_f32(logit(i));
    }
    (hidden, weight)
}

/// An all-ones problem (`b` hidden rows, `v` weight rows, width `d`) for the tests of bad input.
pub fn ones(b: usize, d: usize, v: usize) -> (Vec<bf16>, Vec<bf16>) {
    (vec![bf16::ONE; b * d], vec![bf16::ONE; v * d])
}

/// Samples on the device API (`hidden` `[b, d]` and `weight` `[v, d]` already on the device) into
/// `out` and returns the tokens.
pub fn sample_on_device(
    gpu: &GpuBackend,
    (hidden, b): (&cudarc::driver::CudaSlice<bf16>, usize),
    (weight, v): (&cudarc::driver::CudaSlice<bf16>, usize),
    d: usize,
    params: &SamplingParams,
    out: &mut flashsampling::DeviceSamples,
) -> Vec<u32> {
    gpu.sample_device(
        &flashsampling::DeviceMatrix { data: hidden.as_view(), rows: b, cols: d },
        &flashsampling::DeviceMatrix { data: weight.as_view(), rows: v, cols: d },
        params,
        out,
    )
    .unwrap();
    gpu.stream().clone_dtoh(&out.tokens()).unwrap()
}

/// Hidden size of [`far_tail_setup`].
pub const FAR_TAIL_D: usize = 8;

/// The exact probability that a far-tail row (see [`far_tail_setup`]) samples a token other than 0 at
/// temperature `t`: the scaled gap is `logit_gap · fl(1/T)`, as the kernels scale logits.
pub fn far_tail_probability(v: usize, logit_gap: f32, t: f32) -> f64 {
    let q = (v - 1) as f64 * (-(logit_gap as f64) * (1.0 / t) as f64).exp();
    q / (1.0 + q)
}

/// Counts tail tokens over `rounds` batches of `b` far-tail rows (fresh streams each round) drawn by
/// `sample`, and returns (count, samples, z-score against the exact binomial rate).
pub fn far_tail_count(
    sample: impl Fn(Matrix<'_>, Matrix<'_>, &SamplingParams) -> Vec<u32>,
    (v, b, rounds): (usize, usize, usize),
    logit_gap: f32,
    t: f32,
    seed: u64,
) -> (u64, u64, f64) {
    let (hidden, weight) = far_tail_setup(v, b, logit_gap);
    let mut count = 0u64;
    for r in 0..rounds {
        let p = params_round(t, seed, b, (r * b) as u64);
        let tokens = sample(Matrix::new(&hidden, b, FAR_TAIL_D), Matrix::new(&weight, v, FAR_TAIL_D), &p);
        assert!(tokens.iter().all(|&x| (x as usize) < v));
        count += tokens.iter().filter(|&&x| x != 0).count() as u64;
    }
    let n = (b * rounds) as u64;
    let p = far_tail_probability(v, logit_gap, t);
    let expected = n as f64 * p;
    (count, n, (count as f64 - expected) / (expected * (1.0 - p)).sqrt())
}

/// (stream, tail margin in eighths of a nat) under [`FAR_TAIL_SEED`]: streams whose group-0 noise puts
/// one of vocab entries 1..3 more than 20.5 nats above entry 0 (`max g[1..4] − g[0]`, a search over
/// 5·10^8 streams), with that margin rounded down to a multiple of 1/8 (bf16's spacing there).
pub const FAR_TAIL_STREAMS: [(u64, u32); 2] = [(261_857_743, 165), (540_165_957, 167)];

/// The seed of [`FAR_TAIL_STREAMS`].
pub const FAR_TAIL_SEED: u64 = 0x7A11_5EED;

/// Far-tail reach check for one stream of [`FAR_TAIL_STREAMS`]: a V = 4 far-tail row at the largest
/// bf16 gap below the noise margin must sample the tail token, and at the next bf16 gap token 0.
/// Returns the margin in eighths of a nat (what the stream table states).
pub fn far_tail_reach_case(stream: u64, sample: impl Fn(Matrix<'_>, Matrix<'_>, &SamplingParams) -> Vec<u32>) -> u32 {
    use flashsampling::kernels::noise::is_extreme;
    use flashsampling::kernels::philox::philox4x32_10;
    let noise = RowNoise { seed: FAR_TAIL_SEED, stream, sample: 0 };
    let g = noise.gumbel4(0);
    let tail = (1..4).max_by(|&a, &b| g[a].total_cmp(&g[b])).unwrap();
    let margin = g[tail] - g[0];
    let words = philox4x32_10(noise.counter(0), noise.key());
    assert!(
        is_extreme(words[tail]) && margin > 20.5,
        "stream {stream}: the noise changed (margin {margin}); search new streams for FAR_TAIL_STREAMS"
    );
    let eighths = (margin * 8.0).floor() as u32;
    let (inside, outside) = (eighths as f32 / 8.0, (eighths + 1) as f32 / 8.0);
    assert!(inside > 19.45 + 1.0, "the margin must be well beyond the old reach");
    for (gap, want) in [(inside, tail as u32), (outside, 0)] {
        let (hidden, weight) = far_tail_setup(4, 1, gap);
        let p = SamplingParams::new(1.0, FAR_TAIL_SEED).with_streams(vec![stream]);
        let got = sample(Matrix::new(&hidden, 1, FAR_TAIL_D), Matrix::new(&weight, 4, FAR_TAIL_D), &p);
        assert_eq!(got, vec![want], "stream {stream}, gap {gap} (noise margin {margin})");
    }
    eighths
}

/// An independent f64 reference of the truncated distribution of logits `y` (already processed), in
/// vLLM's V1 order: min-p on the whole distribution, then top-k, then top-p on the renormalized rest.
pub fn truncated(y: &[f64], t: f64, k: usize, p: f64, min_p: f64) -> Vec<f64> {
    let v = y.len();
    let mut order: Vec<usize> = (0..v).collect();
    order.sort_by(|&a, &b| y[b].partial_cmp(&y[a]).unwrap().then(a.cmp(&b)));
    let q = |i: usize| ((y[i] - y[order[0]]) / t).exp();
    let mut keep: Vec<bool> = (0..v).map(|i| !(min_p > 0.0) || q(i) >= min_p).collect();
    if k > 0 && k < v {
        // The k-th largest of what min-p kept (min-p keeps a top part, so of the whole row when
        // min-p keeps at least k; else everything min-p kept).
        let kth = y[order[k - 1]];
        (0..v).for_each(|i| keep[i] &= y[i] >= kth);
    }
    if p < 1.0 {
        let total: f64 = (0..v).filter(|&i| keep[i]).map(q).sum();
        let mut cum = 0.0;
        let mut last = y[order[0]];
        for &i in order.iter().filter(|&&i| keep[i]) {
            cum += q(i);
            last = y[i];
            if cum >= p * total {
                break;
            }
        }
        (0..v).for_each(|i| keep[i] &= y[i] >= last);
    }
    let total: f64 = (0..v).filter(|&i| keep[i]).map(q).sum();
    (0..v).map(|i| if keep[i] { q(i) / total } else { 0.0 }).collect()
}

pub fn bits(s: &[f32]) -> Vec<u32> {
    s.iter().map(|x| x.to_bits()).collect()
}

/// An LM head with exact logits: hidden row `r` = `e_{r mod d}`, weight `[v, d]` normal with standard
/// deviation `std` (bf16), so logit `(r, i)` = `weight[i, r mod d]` exactly.
pub fn exact_head(b: usize, d: usize, v: usize, std: f64, seed: u64) -> (Vec<bf16>, Vec<bf16>) {
    let mut rng = TestRng::new(seed);
    let weight = rng.normal_bf16(v * d, std);
    let mut hidden = vec![bf16::ZERO; b * d];
    for r in 0..b {
        hidden[r * d + r % d] = bf16::ONE;
    }
    (hidden, weight)
}

/// A random mask allowing about `share` of the tokens of each row (at least one).
pub fn random_mask(b: usize, v: usize, share: f64, seed: u64) -> TokenMask {
    let mut rng = TestRng::new(seed);
    let mut mask = TokenMask { words: vec![0; b * v.div_ceil(32)], words_per_row: v.div_ceil(32) };
    for r in 0..b {
        for t in 0..v {
            if rng.uniform() < share || t == (r * 7919) % v {
                mask.words[r * mask.words_per_row + t / 32] |= 1 << (t % 32);
            }
        }
    }
    mask
}

/// Sparse adjustments on about `per_row` random tokens of each row (at least one; none on row 1):
/// biases of both signs (some large enough to make the token win), repetition penalties above and
/// below one, frequency/presence subtractions.
pub fn random_adjustments(b: usize, v: usize, per_row: usize, seed: u64) -> SparseAdjustments {
    let mut rng = TestRng::new(seed);
    let mut adj = SparseAdjustments::none(0);
    for r in 0..b {
        let mut tokens: Vec<u32> =
            if r == 1 { Vec::new() } else { (0..per_row.max(1)).map(|_| (rng.next_u64() % v as u64) as u32).collect() };
        tokens.sort_unstable();
        tokens.dedup();
        for &t in &tokens {
            let k = rng.next_u64() % 4;
            adj.tokens.push(t);
            adj.adjustments.push(Adjustment {
                bias: [0.0, 3.5, -2.0, 25.0][k as usize],
                repetition: [1.0, 1.3, 0.8, 1.0][(rng.next_u64() % 4) as usize],
                subtract: [0.0, 0.4, 1.5, 0.0][(rng.next_u64() % 4) as usize],
            });
        }
        adj.offsets.push(adj.tokens.len());
    }
    adj
}

/// Per-row temperatures with greedy, tiny, below-one and above-one rows.
pub fn mixed_temperatures(b: usize) -> Vec<f32> {
    let t = [0.7, 0.0, 1.0, 1.8, 1e-3, 0.35, 2.5, 1.0];
    (0..b).map(|r| t[r % t.len()]).collect()
}

/// Asserts GPU == CPU: tokens and score bits equal; log-probabilities within 1e-4, the log-sum-exp
/// within 1e-5 relative (NaN where the CPU has NaN: greedy rows).
pub fn assert_same(what: &str, g: &flashsampling::Samples, c: &flashsampling::Samples) {
    assert_eq!(g.tokens, c.tokens, "{what}: tokens");
    assert_eq!(bits(&g.scores), bits(&c.scores), "{what}: scores");
    let close = |name: &str, a: &Option<Vec<f32>>, b: &Option<Vec<f32>>, abs: f64, rel: f64| {
        assert_eq!(a.is_some(), b.is_some(), "{what}: {name} present on one backend only");
        if let (Some(a), Some(b)) = (a, b) {
            assert_eq!(a.len(), b.len(), "{what}: {name} length");
            for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
                if y.is_nan() {
                    assert!(x.is_nan(), "{what}: {name}[{i}] = {x}, CPU NaN");
                    continue;
                }
                let tol = abs + rel * (y as f64).abs();
                assert!(((x - y) as f64).abs() <= tol, "{what}: {name}[{i}] GPU {x} CPU {y} (tolerance {tol:e})");
            }
        }
    };
    close("log-probabilities", &g.logprobs, &c.logprobs, 1e-4, 0.0);
    close("raw log-probabilities", &g.raw_logprobs, &c.raw_logprobs, 1e-4, 0.0);
    close("log-sum-exp", &g.logsumexp, &c.logsumexp, 0.0, 1e-5);
}

/// GPU == CPU scores: log-probabilities within 1e-4 (both `−∞` for a removed token), log-sum-exps
/// within 1e-5 relative (both NaN for a greedy row).
pub fn assert_scores_close(what: &str, g: &flashsampling::score::Scores, c: &flashsampling::score::Scores) {
    // `z / T − lse` in f32 resolves the larger of the two operands' ulps: at T = 0.001 a row's
    // log-sum-exp is in the thousands (ulp 2.4e-4) even where the log-probability is near 0, so each
    // log-probability's tolerance also has 4 ulps (5e-7 relative) of its row's log-sum-exp.
    let lse_of = |i: usize, name: &str| {
        let l = if name.starts_with("raw") { c.raw_logsumexp[i] } else { c.logsumexp[i] };
        if l.is_finite() { 5e-7 * (l as f64).abs() } else { 0.0 }
    };
    let close = |name: &str, a: &[f32], b: &[f32], abs: f64, rel: f64| {
        assert_eq!(a.len(), b.len(), "{what}: {name} length");
        for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
            if y.is_nan() || y.is_infinite() {
                assert_eq!(x.to_bits(), y.to_bits(), "{what}: {name}[{i}] GPU {x} CPU {y}");
                continue;
            }
            let scale = if name.contains("log-probabilities") { lse_of(i, name) } else { 0.0 };
            let tol = abs + rel * (y as f64).abs() + scale;
            assert!(((x - y) as f64).abs() <= tol, "{what}: {name}[{i}] GPU {x} CPU {y} (tolerance {tol:e})");
        }
    };
    // A given token's log-probability can be far from 0 (−2195 at T = 0.001): there f32 resolves
    // 2.4e-4, so the tolerance is 1e-4 plus 1e-6 relative (8 ulps).
    close("log-probabilities", &g.logprobs, &c.logprobs, 1e-4, 1e-6);
    close("raw log-probabilities", &g.raw_logprobs, &c.raw_logprobs, 1e-4, 1e-6);
    close("log-sum-exps", &g.logsumexp, &c.logsumexp, 0.0, 1e-5);
    close("raw log-sum-exps", &g.raw_logsumexp, &c.raw_logsumexp, 0.0, 1e-5);
    // Top lists: the same tokens in the same order, their log-probabilities as the given token's
    // (the tolerance of their row's log-sum-exp: the processed one, or the raw one when a row's
    // list is raw, told by its first entry: −lse there is the raw one's); the ranks exactly.
    assert_eq!(g.top_logprobs.is_some(), c.top_logprobs.is_some(), "{what}: top lists");
    assert_eq!(g.ranks, c.ranks, "{what}: the given tokens' ranks");
    if let (Some(gt), Some(ct)) = (&g.top_logprobs, &c.top_logprobs) {
        assert_eq!(gt.len(), ct.len(), "{what}: top lists' rows");
        for (r, (a, b)) in gt.iter().zip(ct).enumerate() {
            let tokens = |l: &[(u32, f32)]| l.iter().map(|e| e.0).collect::<Vec<_>>();
            assert_eq!(tokens(a), tokens(b), "{what}: row {r}'s top tokens");
            let lse = [c.logsumexp[r], c.raw_logsumexp[r]].map(|l| if l.is_finite() { (l as f64).abs() } else { 0.0 });
            for (&(t, x), &(_, y)) in a.iter().zip(b) {
                if !y.is_finite() {
                    assert_eq!(x.to_bits(), y.to_bits(), "{what}: row {r} top token {t}: GPU {x} CPU {y}");
                    continue;
                }
                let tol = 1e-4 + 1e-6 * (y as f64).abs() + 5e-7 * lse[0].max(lse[1]);
                assert!(((x - y) as f64).abs() <= tol, "{what}: row {r} top token {t}: GPU {x} CPU {y} ({tol:e})");
            }
        }
    }
}

/// Round `round` of a truncation chi-squared test: `n` samples of each row with its (T, top-k,
/// top-p, min-p), fresh streams per round.
pub fn truncation_round(rows: &[(f32, u32, f32, f32)], n: u32, round: u64) -> SamplingParams {
    params_round(1.0, 0x70B, rows.len(), 100_000 * round)
        .with_samples_per_row(n)
        .with_temperatures(rows.iter().map(|r| r.0).collect())
        .with_top_k(rows.iter().map(|r| r.1).collect())
        .with_top_p(rows.iter().map(|r| r.2).collect())
        .with_min_p(rows.iter().map(|r| r.3).collect())
}

/// Adds row `r`'s `n` tokens of `tokens` (`[rows, n]`) to `counts[r]`.
pub fn count_rows(counts: &mut [Vec<u64>], tokens: &[u32], n: usize) {
    for (r, c) in counts.iter_mut().enumerate() {
        for &t in &tokens[r * n..(r + 1) * n] {
            c[t as usize] += 1;
        }
    }
}

/// `gpu.sample_scored(h, w, params)` on every fused-kernel variant this GPU runs that supports V
/// (the portable ones and, on Hopper, the `wgmma` ones), handed to `check` with the variant; the
/// library's own choice is restored afterwards.
pub fn on_every_variant<T: Element>(
    gpu: &mut GpuBackend,
    (h, w): (Matrix<'_, T>, Matrix<'_, T>),
    params: &SamplingParams,
    mut check: impl FnMut(flashsampling::kernels::config::FusedVariant, flashsampling::Samples),
) {
    for entry in gpu.fused_variants() {
        if !entry.supports_vocab(w.rows as u32) {
            continue;
        }
        gpu.set_fused_variant(Some(entry)).unwrap();
        check(entry, gpu.sample_scored(h, w, params).unwrap());
    }
    gpu.set_fused_variant(None).unwrap();
}

/// Counts the rows where `got` (GPU tokens) differ from `want` (the CPU backend's, same noise) for
/// `hidden` `[B, D]` and `weight` `[V, D]` sampled at temperature `t` with `params`, asserting that each
/// such row is an f32 near-tie: its two tokens' perturbed scores (f64 logits) closer than the f32
/// summation tolerance. `what` names the case in the messages.
pub fn near_tie_mismatches<T: Element>(
    what: &str,
    (hidden, weight, d): (&[T], &[T], usize),
    params: &SamplingParams,
    t: f32,
    got: &[u32],
    want: &[u32],
) -> usize {
    let v = weight.len() / d;
    let mut mismatches = 0;
    for (row, (&tg, &tc)) in got.iter().zip(want).enumerate() {
        assert!((tg as usize) < v, "{what} row {row}: GPU token {tg} out of range (V = {v})");
        if tg == tc {
            continue;
        }
        mismatches += 1;
        let y = |tok: u32| -> f64 {
            let (hr, wr) = (&hidden[row * d..(row + 1) * d], &weight[tok as usize * d..(tok as usize + 1) * d]);
            hr.iter().zip(wr).map(|(a, b)| a.to_f32() as f64 * b.to_f32() as f64).sum()
        };
        let noise = params.row_noise(row).unwrap();
        let (sg, sc) = (perturbed_f64(y(tg), tg, &noise, t), perturbed_f64(y(tc), tc, &noise, t));
        let gap = (sg - sc).abs();
        let abs = abs_dot(hidden, weight, d, row, tg as usize).max(abs_dot(hidden, weight, d, row, tc as usize));
        let tol = f32_dot_tolerance(d, abs) / if t == 0.0 { 1.0 } else { t as f64 };
        assert!(
            gap < tol,
            "{what} row {row}: GPU {tg} (score {sg}), CPU {tc} (score {sc}); gap {gap:e} >= tolerance {tol:e}"
        );
    }
    mismatches
}

/// The top-log-probability case both backends check against f64: 3 rows of a random head (D = 64,
/// V = 500) at temperatures 0.7 / 1.0 / 1.3, row 0 with top-p 0.9, row 1 with top-k 50, 20 entries of
/// the processed distribution or, `raw`, of `softmax(logits)`. Returns the head and the parameters.
pub fn top_logprob_case(raw: bool) -> (Vec<bf16>, Vec<bf16>, SamplingParams) {
    let (b, d, v) = TOP_CASE;
    let mut rng = TestRng::new(0x13_0003);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 0.4);
    let params = SamplingParams::new(1.0, 9)
        .with_temperatures(TOP_CASE_TEMPS.to_vec())
        .with_top_k(TOP_CASE_K.map(|k| k as u32).to_vec())
        .with_top_p(TOP_CASE_P.map(|p| p as f32).to_vec())
        .with_top_logprobs(20, raw);
    (hidden, weight, params)
}

/// B, D, V of [`top_logprob_case`].
pub const TOP_CASE: (usize, usize, usize) = (3, 64, 500);
/// Its rows' temperatures.
pub const TOP_CASE_TEMPS: [f32; 3] = [0.7, 1.0, 1.3];
/// Its rows' top-k (0: off).
pub const TOP_CASE_K: [usize; 3] = [0, 50, 0];
/// Its rows' top-p.
pub const TOP_CASE_P: [f64; 3] = [0.9, 1.0, 1.0];

/// Row `r`'s distribution in [`top_logprob_case`] in f64 (processed: truncated; `raw`: the softmax).
pub fn top_case_probs(hidden: &[bf16], weight: &[bf16], r: usize, raw: bool) -> Vec<f64> {
    let y = logits_f64(hidden, weight, TOP_CASE.1, r);
    let (k, p) = (TOP_CASE_K[r], TOP_CASE_P[r]);
    if raw { truncated(&y, 1.0, 0, 1.0, 0.0) } else { truncated(&y, TOP_CASE_TEMPS[r] as f64, k, p, 0.0) }
}

/// Asserts a call's top log-probabilities for [`top_logprob_case`] equal the f64 reference: the 20
/// most likely tokens in order (ties to the lower id), log-probabilities within 1e-4.
pub fn assert_top_case(what: &str, hidden: &[bf16], weight: &[bf16], raw: bool, top: &[Vec<(u32, f32)>]) {
    for (r, row) in top.iter().enumerate() {
        let probs = top_case_probs(hidden, weight, r, raw);
        let mut order: Vec<usize> = (0..probs.len()).filter(|&i| probs[i] > 0.0).collect();
        order.sort_by(|&a, &c| probs[c].partial_cmp(&probs[a]).unwrap().then(a.cmp(&c)));
        order.truncate(20);
        assert_eq!(row.len(), order.len(), "{what}, raw {raw}, row {r}");
        for (j, (&(tok, lp), &want)) in row.iter().zip(&order).enumerate() {
            assert_eq!(tok as usize, want, "{what}, raw {raw}, row {r}, entry {j}");
            let l = probs[want].ln();
            assert!((lp as f64 - l).abs() < 1e-4, "{what}, raw {raw}, row {r} token {tok}: {lp} vs {l}");
        }
    }
}

/// A head whose rows each hold `+∞` logits (issue 48, item 11): row `r`'s logits are `2 (i % 7 − 3)`,
/// and `+∞` at tokens `40 + r` and 250 (the first is drawn): finite bf16 products beyond f32's range
/// (`2 · bf16::MAX`), no `∞` input, so no `0 · ∞`. `b ≤ d − 1`, `v > 250`. Returns (hidden, weight).
pub fn infinite_logit_head(b: usize, d: usize, v: usize) -> (Vec<bf16>, Vec<bf16>) {
    assert!(b < d && v > 250);
    let two = bf16::from_f32(2.0);
    let mut hidden = vec![bf16::ZERO; b * d];
    let mut weight = vec![bf16::ZERO; v * d];
    for r in 0..b {
        hidden[r * d] = two;
        hidden[r * d + 1 + r] = two;
        weight[(40 + r) * d + 1 + r] = bf16::MAX;
    }
    for i in 0..v {
        weight[i * d] = if i == 250 { bf16::MAX } else { bf16::from_f32((i % 7) as f32 - 3.0) };
    }
    (hidden, weight)
}
