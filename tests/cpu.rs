//! CPU-backend tests: exactness (chi-squared), greedy, invariance, NaN handling and input validation.
//! All seeds are fixed and named.

mod common;

use common::*;
use flashsampling::kernels::config::{BLOCK_V, D_ALIGN, MAX_DIM};
use flashsampling::{CpuBackend, Error, Matrix, SamplingParams};
use half::bf16;

const CHI_SEED: u64 = 0xC41_5EED;
const DATA_SEED: u64 = 0xDA7A_0001;

/// Draws `rounds · b` samples of one distribution with the CPU backend and returns the p-value.
fn cpu_chi_p(kind: Logits, v: usize, temperature: f32, sampled_temperature: f32) -> (f64, usize) {
    let (b, rounds) = (5000, 4);
    let s = chi_setup(kind, v, b, temperature, DATA_SEED ^ v as u64);
    let cpu = CpuBackend::new();
    let mut tokens = Vec::new();
    for r in 0..rounds {
        let p = params_round(sampled_temperature, CHI_SEED, b, (r * b) as u64);
        tokens.extend(cpu.sample(Matrix::new(&s.hidden, b, s.d), Matrix::new(&s.weight, v, s.d), &p).unwrap());
    }
    let (stat, df, p) = chi_squared(&histogram(&tokens, v), &s.probs);
    eprintln!("{kind:?} V={v} T={temperature}: chi2={stat:.1} df={df} p={p:.4}");
    (p, df)
}

#[test]
fn chi_squared_matches_softmax_for_vocab_sizes_off_the_tile() {
    for v in [100, 256, 512, 1000] {
        assert!(v % BLOCK_V as usize != 0 || v == 256 || v == 512);
        let (p, df) = cpu_chi_p(Logits::Spread, v, 1.0, 1.0);
        assert!(df > 20, "V={v}: only {df} degrees of freedom");
        assert!(p > 1e-3, "V={v}: p = {p}");
    }
}

#[test]
fn chi_squared_all_negative_logits() {
    let (p, _) = cpu_chi_p(Logits::AllNegative, 1000, 1.0, 1.0);
    assert!(p > 1e-3, "p = {p}");
}

#[test]
fn chi_squared_peaked_distribution_with_low_temperature() {
    let s = chi_setup(Logits::Peaked, 512, 1, 0.5, DATA_SEED ^ 512);
    let top = s.probs.iter().cloned().fold(0.0, f64::max);
    assert!(top > 0.2, "the peaked setup should put > 20% on one token, got {top}");
    let (p, _) = cpu_chi_p(Logits::Peaked, 512, 0.5, 0.5);
    assert!(p > 1e-3, "p = {p}");
}

#[test]
fn chi_squared_test_rejects_a_wrong_temperature() {
    // Power check: sampling at T = 1.3 while expecting T = 1 must be rejected.
    let (p, _) = cpu_chi_p(Logits::Spread, 256, 1.0, 1.3);
    assert!(p < 1e-3, "the test failed to notice a wrong temperature: p = {p}");
}

/// One far-tail case: (V, rows per call, calls, logit gap, temperature).
type FarTail = (usize, usize, usize, f32, f32);

fn cpu_far_tail(case: FarTail, seed: u64) -> (u64, f64) {
    let (v, b, rounds, gap, t) = case;
    let cpu = CpuBackend::new();
    let start = std::time::Instant::now();
    let (count, n, z) = far_tail_count(|h, w, p| cpu.sample(h, w, p).unwrap(), (v, b, rounds), gap, t, seed);
    let expected = n as f64 * far_tail_probability(v, gap, t);
    eprintln!(
        "far tail V={v} gap {gap} T={t} (scaled gap {}): {count} of {n} samples, expected {expected:.1}, z = {z:.2} ({:.1} s)",
        gap * (1.0 / t),
        start.elapsed().as_secs_f64()
    );
    (count, z)
}

#[test]
fn far_tail_rates_match_softmax() {
    // Token 0 at logit 0, every other token `gap` below it, judged by a binomial z-score. A tail sample
    // costs about e^gap noise evaluations whatever V is, so the CPU can afford ~15 nats in CI time;
    // beyond that see `far_tail_tokens_beyond_the_old_reach_are_sampled` here, the noise-level rate
    // test `far_tail_noise_beats_a_rival_at_the_exact_rate` in the kernels crate and the GPU twin.
    for case in [
        (1024, 4096, 11, 13.0f32, 1.0f32),
        // T = 2: logits -30 scaled by fl(1/2) = 0.5 exactly, a 15-nat gap.
        (4096, 4096, 21, 30.0, 2.0),
    ] {
        let (v, b, rounds, gap, t) = case;
        let expected = (b * rounds) as f64 * far_tail_probability(v, gap, t);
        assert!(expected >= 100.0, "{case:?}: only {expected:.1} tail samples expected");
        let (count, z) = cpu_far_tail(case, CHI_SEED ^ gap.to_bits() as u64);
        assert!(count > 0 && z.abs() < 4.5, "{case:?}: {count} tail samples, z = {z:.2}");
    }
}

#[test]
fn far_tail_tokens_beyond_the_old_reach_are_sampled() {
    // Streams whose noise puts a tail token more than 20.5 nats above token 0 (found by a search over
    // streams, about 1 in 2·10^8). The sampler must pick that token up to the noise margin and token 0
    // beyond it. With the old 23-bit noise (g ≤ 16.64) no token 19.45 nats down could ever win.
    for (stream, margin) in FAR_TAIL_STREAMS {
        let sampled = far_tail_reach_case(stream, |h, w, p| CpuBackend::new().sample(h, w, p).unwrap());
        assert_eq!(sampled, margin, "stream {stream}");
    }
}

#[test]
fn sample_indices_of_2_pow_31_and_above_are_rejected() {
    let (h, w) = (vec![bf16::ONE; 2 * 16], vec![bf16::ONE; 10 * 16]);
    let cpu = CpuBackend::new();
    for (sample, ok) in [(0u32, true), ((1 << 31) - 1, true), (1 << 31, false), (u32::MAX, false)] {
        let p = SamplingParams::new(1.0, 0).with_sample(sample);
        let got = cpu.sample(Matrix::new(&h, 2, 16), Matrix::new(&w, 10, 16), &p);
        match ok {
            true => assert!(got.is_ok(), "sample {sample}: {got:?}"),
            false => assert_eq!(got.unwrap_err(), Error::InvalidSample(sample)),
        }
    }
    assert!(Error::InvalidSample(1 << 31).to_string().contains("below 2^31"));
}

#[test]
fn greedy_equals_argmax_of_the_logits() {
    let (b, d, v) = (16, 256, 3000);
    let mut rng = TestRng::new(DATA_SEED + 1);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 0.05);
    let tokens = CpuBackend::new()
        .sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &SamplingParams::greedy())
        .unwrap();
    for (row, &t) in tokens.iter().enumerate() {
        let y = logits_f64(&hidden, &weight, d, row);
        let best = (0..v).fold(0, |m, i| if y[i] > y[m] { i } else { m });
        if t as usize != best {
            let gap = (y[best] - y[t as usize]).abs();
            let tol = f32_dot_tolerance(
                d,
                abs_dot(&hidden, &weight, d, row, best).max(abs_dot(&hidden, &weight, d, row, t as usize)),
            );
            assert!(gap < tol, "row {row}: greedy {t}, argmax {best}, gap {gap} >= {tol}");
        }
    }
}

#[test]
fn greedy_ties_resolve_to_the_lower_index() {
    let d = 8;
    let hidden = vec![bf16::ONE; d];
    // Rows 2 and 5 tie for the maximum.
    let mut weight = vec![bf16::ZERO; 7 * d];
    for &r in &[2usize, 5] {
        weight[r * d] = bf16::from_f32(3.0);
    }
    for bv in [4, 128] {
        let cpu = CpuBackend::new().with_block_v(bv).unwrap();
        let t = cpu.sample(Matrix::new(&hidden, 1, d), Matrix::new(&weight, 7, d), &SamplingParams::greedy()).unwrap();
        assert_eq!(t, vec![2], "block_v {bv}");
    }
}

#[test]
fn a_row_samples_the_same_alone_in_a_batch_and_with_other_tiles() {
    let (d, v) = (128, 1000);
    let mut rng = TestRng::new(DATA_SEED + 2);
    let weight = rng.normal_bf16(v * d, 0.1);
    let cpu = CpuBackend::new();
    for trial in 0..40u64 {
        let row = rng.normal_bf16(d, 1.0);
        let stream = 1_000 + trial * 7;
        let params = SamplingParams::new(1.0, 0xF00D + trial);
        let alone = cpu
            .sample(Matrix::new(&row, 1, d), Matrix::new(&weight, v, d), &params.clone().with_streams(vec![stream]))
            .unwrap()[0];
        // In a batch of 7 at position 3, with other rows and streams around it.
        let mut batch = rng.normal_bf16(7 * d, 1.0);
        batch[3 * d..4 * d].copy_from_slice(&row);
        let streams = vec![11, 12, 13, stream, 15, 16, 17];
        let in_batch = cpu
            .sample(Matrix::new(&batch, 7, d), Matrix::new(&weight, v, d), &params.clone().with_streams(streams))
            .unwrap()[3];
        assert_eq!(alone, in_batch, "trial {trial}: batch position changed the sample");
        for bv in [4usize, 64, 100, 1000] {
            let other = CpuBackend::new()
                .with_block_v(bv)
                .unwrap()
                .sample(Matrix::new(&row, 1, d), Matrix::new(&weight, v, d), &params.clone().with_streams(vec![stream]))
                .unwrap()[0];
            assert_eq!(alone, other, "trial {trial}: vocab tile {bv} changed the sample");
        }
    }
}

#[test]
fn streams_default_to_row_indices_and_seeds_matter() {
    let (b, d, v) = (8, 64, 500);
    let mut rng = TestRng::new(DATA_SEED + 3);
    let row = rng.normal_bf16(d, 1.0);
    let hidden: Vec<bf16> = (0..b).flat_map(|_| row.iter().copied()).collect();
    let weight = rng.normal_bf16(v * d, 0.05);
    let cpu = CpuBackend::new();
    let run = |p: &SamplingParams| cpu.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), p).unwrap();
    let default = run(&SamplingParams::new(1.0, 5));
    assert_eq!(default, run(&SamplingParams::new(1.0, 5).with_streams((0..b as u64).collect())));
    assert_ne!(default, run(&SamplingParams::new(1.0, 6)), "another seed should change some of 8 draws");
    assert_ne!(default, run(&SamplingParams::new(1.0, 5).with_sample(1)), "another sample index should too");
    // Identical rows with different streams are independent draws: not all equal.
    assert!(default.iter().any(|&t| t != default[0]));
}

#[test]
fn a_nan_logit_is_an_error_never_a_silent_winner() {
    let (b, d, v) = (3, 16, 300);
    let mut rng = TestRng::new(DATA_SEED + 4);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let mut weight = rng.normal_bf16(v * d, 0.1);
    weight[200 * d + 5] = bf16::NAN;
    for p in [SamplingParams::new(1.0, 1), SamplingParams::greedy()] {
        let err = CpuBackend::new().sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &p).unwrap_err();
        assert_eq!(err, Error::NanLogit { row: 0 });
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let cpu = CpuBackend::new();
    let h = vec![bf16::ONE; 2 * 16];
    let w = vec![bf16::ONE; 10 * 16];
    let ok = SamplingParams::new(1.0, 0);
    let run = |h: Matrix<'_>, w: Matrix<'_>, p: &SamplingParams| cpu.sample(h, w, p).unwrap_err();
    assert_eq!(run(Matrix::new(&[], 0, 16), Matrix::new(&w, 10, 16), &ok), Error::EmptyBatch);
    assert_eq!(run(Matrix::new(&h, 2, 16), Matrix::new(&[], 0, 16), &ok), Error::EmptyVocab);
    assert_eq!(run(Matrix::new(&[], 2, 0), Matrix::new(&[], 10, 0), &ok), Error::EmptyHidden);
    assert_eq!(
        run(Matrix::new(&h, 4, 8), Matrix::new(&w, 10, 16), &ok),
        Error::HiddenSizeMismatch { hidden: 8, weight: 16 }
    );
    let h12 = vec![bf16::ONE; 2 * 12];
    let w12 = vec![bf16::ONE; 10 * 12];
    assert_eq!(
        run(Matrix::new(&h12, 2, 12), Matrix::new(&w12, 10, 12), &ok),
        Error::HiddenNotAligned { d: 12, multiple: D_ALIGN as usize }
    );
    assert_eq!(
        run(Matrix::new(&h[..31], 2, 16), Matrix::new(&w, 10, 16), &ok),
        Error::LengthMismatch { buffer: "hidden states", expected: 32, actual: 31 }
    );
    assert_eq!(
        run(Matrix::new(&h, 2, 16), Matrix::new(&w, 11, 16), &ok),
        Error::LengthMismatch { buffer: "LM-head weight", expected: 176, actual: 160 }
    );
    assert_eq!(
        run(Matrix::new(&h, 2, 16), Matrix::new(&w, 10, 16), &ok.clone().with_streams(vec![1, 2, 3])),
        Error::LengthMismatch { buffer: "streams", expected: 2, actual: 3 }
    );
    let big = MAX_DIM as usize + 1;
    assert_eq!(
        run(Matrix::new(&h, big, 16), Matrix::new(&w, 10, 16), &ok),
        Error::TooLarge { what: "batch size B", value: big, max: MAX_DIM as usize }
    );
    assert_eq!(
        run(Matrix::new(&h, 2, 16), Matrix::new(&w, big, 16), &ok),
        Error::TooLarge { what: "vocab size V", value: big, max: MAX_DIM as usize }
    );
    for t in [f32::NAN, -0.5, f32::INFINITY, f32::NEG_INFINITY] {
        match run(Matrix::new(&h, 2, 16), Matrix::new(&w, 10, 16), &SamplingParams::new(t, 0)) {
            Error::InvalidTemperature(x) => assert!(x.is_nan() == t.is_nan() && (t.is_nan() || x == t)),
            e => panic!("temperature {t}: {e:?}"),
        }
    }
    for bv in [0usize, 3, 130] {
        assert_eq!(
            CpuBackend::new().with_block_v(bv).unwrap_err(),
            Error::InvalidTileSize { block_v: bv, max: flashsampling::cpu::MAX_CPU_BLOCK_V }
        );
    }
    // Every error has a readable message.
    assert!(Error::HiddenNotAligned { d: 12, multiple: 8 }.to_string().contains("multiple of 8"));
}

#[test]
fn tokens_are_in_range_and_reproducible() {
    let (b, d, v) = (9, 32, 777);
    let mut rng = TestRng::new(DATA_SEED + 5);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 0.3);
    let p = SamplingParams::new(0.7, 99);
    let cpu = CpuBackend::new();
    let a = cpu.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &p).unwrap();
    let b2 =
        CpuBackend::new().with_threads(1).sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &p).unwrap();
    assert_eq!(a, b2, "thread count must not change samples");
    assert!(a.iter().all(|&t| (t as usize) < v));
}

#[test]
fn chi_squared_helpers_match_closed_forms() {
    use approx::assert_relative_eq;
    // Q(1, x) = e^-x; Q(1/2, x) = erfc(sqrt(x)); chi-squared with 2 df has p = e^(-stat/2).
    for x in [0.1f64, 1.0, 3.0, 10.0, 40.0] {
        assert_relative_eq!(gamma_q(1.0, x), (-x).exp(), max_relative = 1e-10);
    }
    // erfc(1) = 0.157299207050285..., erfc(2) = 0.004677734981047...
    assert_relative_eq!(gamma_q(0.5, 1.0), 0.157_299_207_050_285_13, max_relative = 1e-9);
    assert_relative_eq!(gamma_q(0.5, 4.0), 0.004_677_734_981_047_266, max_relative = 1e-9);
    // Γ(5) = 24, Γ(0.5) = sqrt(pi).
    assert_relative_eq!(ln_gamma(5.0), 24f64.ln(), max_relative = 1e-12);
    assert_relative_eq!(ln_gamma(0.5), std::f64::consts::PI.sqrt().ln(), max_relative = 1e-12);
    // Counts equal to expectations: statistic 0, p = 1. Counts 130/100/70 against 100 each:
    // (900 + 0 + 900) / 100 = 18 with 2 df, p = e^-9.
    let (stat, df, p) = chi_squared(&[100, 200, 700], &[0.1, 0.2, 0.7]);
    assert_eq!((stat, df), (0.0, 2));
    assert_relative_eq!(p, 1.0);
    let probs = [1.0 / 3.0; 3];
    let (s, df, p) = chi_squared(&[130, 100, 70], &probs);
    assert_eq!(df, 2);
    assert_relative_eq!(s, 18.0, max_relative = 1e-12);
    assert_relative_eq!(p, (-9.0f64).exp(), max_relative = 1e-9);
}

/// [`crafted_lm_head`] with the logits `logits` (D = 8).
fn crafted(logits: &[f32], b: usize) -> (Vec<bf16>, Vec<bf16>, usize) {
    let (hidden, weight) = crafted_lm_head(logits.len(), b, 8, |i| logits[i]);
    (hidden, weight, 8)
}

fn cpu_tokens(logits: &[f32], t: f32) -> flashsampling::Result<Vec<u32>> {
    let (hidden, weight, d) = crafted(logits, 2);
    CpuBackend::new().sample(
        Matrix::new(&hidden, 2, d),
        Matrix::new(&weight, logits.len(), d),
        &SamplingParams::new(t, 7),
    )
}

#[test]
fn tiny_temperatures_and_huge_logits_give_the_right_token() {
    // Issue 11 item 4: 1/T or y/T overflowed to +inf, tied, and the lower index won; or inf·0 = NaN.
    assert_eq!(cpu_tokens(&[1.0, 5.0, 3.0], 1e-40).unwrap(), vec![1, 1]);
    assert_eq!(cpu_tokens(&[50.0, 100.0], 1e-37).unwrap(), vec![1, 1]);
    assert_eq!(cpu_tokens(&[0.0, 1.0], 1e-45).unwrap(), vec![1, 1]);
    assert_eq!(cpu_tokens(&[3.0e38, 3.2e38, -3.3e38], 0.5).unwrap(), vec![1, 1]);
    assert_eq!(cpu_tokens(&[-3.3e38, -3.0e38], 1e-20).unwrap(), vec![1, 1]);
    assert_eq!(cpu_tokens(&[2.0, 3.3e38, 3.0e38], 1e-30).unwrap(), vec![1, 1]);
    // Subnormal temperatures are greedy (documented): exact argmax, ties to the lower index.
    assert_eq!(cpu_tokens(&[4.0, 9.0, 9.0, -1.0], 1e-42).unwrap(), vec![1, 1]);
    // Huge temperatures: finite, in range.
    for t in [1e30f32, f32::MAX] {
        assert!(cpu_tokens(&[3.0e38, -3.0e38, 0.0], t).unwrap().iter().all(|&x| x < 3));
    }
}

#[test]
fn infinite_logits_and_fully_masked_rows_are_defined() {
    let inf = f32::INFINITY;
    // Every logit −∞: no token, a typed error naming the row.
    for t in [0.0, 1e-30, 0.7, 1.0, 5.0] {
        assert_eq!(cpu_tokens(&[-inf, -inf, -inf], t).unwrap_err(), Error::AllLogitsNegInfinite { row: 0 }, "T = {t}");
        // One +∞ wins; several tie and the lowest index wins.
        assert_eq!(cpu_tokens(&[3.0e38, inf, -inf, 1.0], t).unwrap(), vec![1, 1], "T = {t}");
        assert_eq!(cpu_tokens(&[1.0, inf, 2.0, inf], t).unwrap(), vec![1, 1], "T = {t}");
        // Some −∞ (masked) tokens are never drawn while another is finite.
        assert_eq!(cpu_tokens(&[-inf, -3.0e38, -inf], t).unwrap(), vec![1, 1], "T = {t}");
    }
    // Only the masked row fails, and the error names it.
    let d = 8;
    let mut hidden = vec![bf16::ZERO; 3 * d];
    hidden[0] = bf16::ONE;
    hidden[2 * d] = bf16::ONE;
    hidden[d] = bf16::from_f32(-1.0); // row 1 sees the negated logits: +inf → −inf
    let mut weight = vec![bf16::ZERO; 2 * d];
    weight[0] = bf16::INFINITY;
    weight[d] = bf16::INFINITY;
    let err = CpuBackend::new()
        .sample(Matrix::new(&hidden, 3, d), Matrix::new(&weight, 2, d), &SamplingParams::new(1.0, 0))
        .unwrap_err();
    assert_eq!(err, Error::AllLogitsNegInfinite { row: 1 });
    // ∞ − ∞ in a dot product without any NaN input: its own error, and a message that says so.
    let mut h = vec![bf16::ZERO; d];
    h[0] = bf16::ONE;
    h[1] = bf16::ONE;
    let mut w = vec![bf16::ZERO; 2 * d];
    w[0] = bf16::INFINITY;
    w[1] = bf16::NEG_INFINITY;
    let err =
        CpuBackend::new().sample(Matrix::new(&h, 1, d), Matrix::new(&w, 2, d), &SamplingParams::greedy()).unwrap_err();
    assert_eq!(err, Error::UndefinedLogit { row: 0 });
    assert!(err.to_string().contains("infinite"), "{err}");
    // Finite bf16 inputs whose products overflow f32 (3e38 · 3e38 = +inf, then −inf): the same.
    h[0] = bf16::from_f32(3.0e38);
    h[1] = bf16::from_f32(3.0e38);
    w[0] = bf16::from_f32(3.0e38);
    w[1] = bf16::from_f32(-3.0e38);
    let err =
        CpuBackend::new().sample(Matrix::new(&h, 1, d), Matrix::new(&w, 2, d), &SamplingParams::greedy()).unwrap_err();
    assert_eq!(err, Error::UndefinedLogit { row: 0 });
    // A NaN input stays NanLogit, and its message names NaN inputs.
    w[3] = bf16::NAN;
    let err =
        CpuBackend::new().sample(Matrix::new(&h, 1, d), Matrix::new(&w, 2, d), &SamplingParams::greedy()).unwrap_err();
    assert_eq!(err, Error::NanLogit { row: 0 });
    assert!(err.to_string().contains("inputs contain NaN"), "{err}");
}

#[test]
fn memory_does_not_grow_with_the_tile_or_hidden_size() {
    // Issue 11 item 1: V = 1, D = 2^26 (128 MiB of weights) allocated a 128-row f32 tile (32 GiB).
    let d = 1 << 26;
    let hidden = vec![bf16::ONE; d];
    let mut weight = vec![bf16::ZERO; d];
    weight[d - 1] = bf16::ONE;
    let cpu = CpuBackend::new();
    let s =
        cpu.sample_scored(Matrix::new(&hidden, 1, d), Matrix::new(&weight, 1, d), &SamplingParams::greedy()).unwrap();
    assert_eq!((s.tokens, s.scores), (vec![0], vec![1.0]));
}

#[test]
fn tile_size_and_thread_count_are_bounded() {
    use flashsampling::cpu::{MAX_CPU_BLOCK_V, MAX_CPU_THREADS};
    // Issue 11 item 2: a huge tile was accepted and the next call aborted on allocation.
    for bv in [MAX_CPU_BLOCK_V + 4, 1 << 31, u32::MAX as usize - 3, usize::MAX - 3] {
        assert_eq!(
            CpuBackend::new().with_block_v(bv).unwrap_err(),
            Error::InvalidTileSize { block_v: bv, max: MAX_CPU_BLOCK_V }
        );
    }
    assert!(
        Error::InvalidTileSize { block_v: 3, max: MAX_CPU_BLOCK_V }.to_string().contains(&MAX_CPU_BLOCK_V.to_string())
    );
    let cpu = CpuBackend::new().with_block_v(MAX_CPU_BLOCK_V).unwrap();
    let (b, d, v) = (3, 16, 70_000);
    let mut rng = TestRng::new(DATA_SEED + 40);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 0.3);
    let p = SamplingParams::new(0.9, 4);
    let want = CpuBackend::new().sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &p).unwrap();
    assert_eq!(cpu.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &p).unwrap(), want);
    // Thread counts are clamped; many workers (one per tile) still give the same samples.
    assert_eq!(CpuBackend::new().with_threads(usize::MAX).threads(), MAX_CPU_THREADS);
    assert_eq!(CpuBackend::new().with_threads(0).threads(), 1);
    let many = CpuBackend::new().with_threads(5000).with_block_v(64).unwrap();
    assert_eq!(many.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &p).unwrap(), want);
}

#[test]
fn stream_lookups_past_the_list_are_none_not_panics() {
    // Issue 11 item 10.
    let p = SamplingParams::new(1.0, 3).with_streams(vec![10, 20]);
    assert_eq!(p.stream(1), Some(20));
    assert_eq!(p.stream(2), None);
    assert!(p.row_noise(5).is_none());
    assert_eq!(p.streams_for(2), Some(vec![10, 20]));
    assert_eq!(p.streams_for(3), None);
    let default = SamplingParams::new(1.0, 3);
    assert_eq!(default.stream(usize::MAX), Some(usize::MAX as u64));
    assert_eq!(default.streams_for(3), Some(vec![0, 1, 2]));
}

#[test]
fn auto_says_why_it_runs_on_the_cpu() {
    use flashsampling::{BackendChoice, Sampler};
    // Issue 11 item 9: Auto fell back to the CPU silently.
    let s = Sampler::with_choice(BackendChoice::Auto).unwrap();
    match (&s, flashsampling::gpu_available()) {
        (Sampler::Gpu(_), _) => assert!(s.fallback_reason().is_none()),
        (Sampler::CpuFallback(..), _) => {
            let why = s.fallback_reason().expect("a reason");
            if !flashsampling::gpu_available() {
                assert!(matches!(why, Error::NoGpu(_)), "{why:?}");
            }
            assert!(s.describe().contains("GPU not used"), "{}", s.describe());
        }
        (Sampler::Cpu(_), _) => panic!("Auto must not choose the plain CPU variant"),
    }
    assert!(Sampler::with_choice(BackendChoice::Cpu).unwrap().fallback_reason().is_none());
    // FLASHSAMPLING_BACKEND values (the environment itself: tests/backend_env.rs).
    assert_eq!(BackendChoice::from_env_value(None).unwrap(), BackendChoice::Auto);
    assert_eq!(BackendChoice::from_env_value(Some("")).unwrap(), BackendChoice::Auto);
    assert_eq!(BackendChoice::from_env_value(Some("auto")).unwrap(), BackendChoice::Auto);
    assert_eq!(BackendChoice::from_env_value(Some("cpu")).unwrap(), BackendChoice::Cpu);
    assert_eq!(BackendChoice::from_env_value(Some("gpu")).unwrap(), BackendChoice::Gpu);
    for bad in ["GPU", "cuda", "cpu ", "1"] {
        assert_eq!(BackendChoice::from_env_value(Some(bad)).unwrap_err(), Error::UnknownBackend(bad.into()));
    }
}

#[test]
fn driver_errors_keep_their_cuda_code() {
    use cudarc::driver::{DriverError, sys::CUresult};
    // Issue 11 item 9 / issue 10 item 4: out-of-memory is matchable.
    let oom: Error = DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY).into();
    assert!(oom.is_out_of_memory());
    assert!(matches!(oom, Error::Driver(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY))));
    assert_eq!(oom.cuda_result(), Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
    let other: Error = DriverError(CUresult::CUDA_ERROR_INVALID_VALUE).into();
    assert!(!other.is_out_of_memory());
    assert!(!Error::EmptyBatch.is_out_of_memory());
    assert!(std::error::Error::source(&oom).is_some(), "the driver error is the source");
}

#[test]
fn validation_errors_come_in_the_documented_order() {
    // Issue 48, item 12: docs/guide/errors.md's "Validation errors" table lists the checks in the order the code
    // makes them. Each row's problem is set on a valid call, the later rows' first (an earlier row's
    // setting wins where two touch one field); with rows k.. present the call reports row k's error.
    // Row 13 (a sharded call's vocabulary) is a rank-local step's: checked at the end.
    use flashsampling::controls::{SparseAdjustments, TokenMask};
    use flashsampling::kernels::logits::Adjustment;
    use flashsampling::params::MAX_TOP_LOGPROBS;
    #[derive(Clone)]
    struct Case {
        b: usize,
        hd: usize,
        wd: usize,
        v: usize,
        hidden_extra: usize,
        p: SamplingParams,
    }
    type Problem = (usize, fn(&mut Case), fn(&Error) -> bool);
    let problems: [Problem; 14] = [
        (1, |c| c.wd = c.hd + 8, |e| matches!(e, Error::HiddenSizeMismatch { .. })),
        (2, |c| (c.hd, c.wd) = (0, 0), |e| matches!(e, Error::EmptyHidden)),
        (3, |c| c.v = 1 << 31, |e| matches!(e, Error::TooLarge { what: "vocab size V", .. })),
        (4, |c| (c.hd, c.wd) = (12, 12), |e| matches!(e, Error::HiddenNotAligned { d: 12, .. })),
        (
            5,
            |c| (c.hidden_extra, c.p.streams) = (1, Some(vec![0; 3])),
            |e| matches!(e, Error::LengthMismatch { buffer: "hidden states", .. }),
        ),
        (6, |c| c.p.n = 0, |e| matches!(e, Error::InvalidSampleCount { n: 0, .. })),
        (7, |c| c.p.sample = 1 << 31, |e| matches!(e, Error::InvalidSample(_))),
        (
            8,
            |c| c.p.temperatures = Some(vec![1.0, f32::NAN]),
            |e| matches!(e, Error::InvalidRowTemperature { row: 1, .. }),
        ),
        (9, |c| c.p.top_k = Some(vec![1]), |e| matches!(e, Error::LengthMismatch { buffer: "per-row top-k", .. })),
        (10, |c| c.p.top_p = Some(vec![0.5, 2.0]), |e| matches!(e, Error::InvalidTruncation { what: "top-p", .. })),
        (
            11,
            |c| c.p.top_logprobs = MAX_TOP_LOGPROBS + 1,
            |e| matches!(e, Error::TooLarge { what: "top log-probabilities per row", .. }),
        ),
        (12, |c| c.p.softcap = Some(-1.0), |e| matches!(e, Error::InvalidSoftcap(_))),
        (
            14,
            |c| {
                c.p.allowed = Some(TokenMask { words: vec![u32::MAX; 1], words_per_row: 2 });
                let a = Adjustment { bias: 1.0, repetition: 1.0, subtract: 0.0 };
                c.p.adjustments =
                    Some(SparseAdjustments { offsets: vec![0, 1, 1], tokens: vec![1000], adjustments: vec![a] });
            },
            |e| matches!(e, Error::LengthMismatch { .. }),
        ),
        (15, |c| c.p.temperature = f32::NAN, |e| matches!(e, Error::InvalidTemperature(_))),
    ];
    let cpu = CpuBackend::new().with_threads(1);
    let valid = Case { b: 2, hd: 16, wd: 16, v: 40, hidden_extra: 0, p: SamplingParams::new(1.0, 1) };
    let data = vec![bf16::ONE; 4096];
    for k in 0..=problems.len() {
        let mut c = valid.clone();
        for (_, set, _) in problems[k..].iter().rev() {
            set(&mut c);
        }
        let h = Matrix::new(&data[..c.b * c.hd + c.hidden_extra], c.b, c.hd);
        let w = Matrix::new(&data[..c.v.min(64) * c.wd], c.v, c.wd);
        let got = cpu.sample(h, w, &c.p);
        match problems.get(k) {
            Some((row, _, is)) => {
                let e = got.unwrap_err();
                assert!(is(&e), "with rows {row}.. of the table present, row {row}'s error; got {e:?}");
            }
            None => assert!(got.is_ok(), "the valid call: {got:?}"),
        }
    }
    // Row 2's other errors, and the host mask before the adjustments (row 14).
    let (one, p) = (&data[..16], SamplingParams::new(f32::NAN, 1));
    assert!(matches!(cpu.sample(Matrix::new(&[], 0, 16), Matrix::new(one, 1, 8), &p), Err(Error::EmptyBatch)));
    assert!(matches!(cpu.sample(Matrix::new(one, 1, 16), Matrix::new(&[], 0, 8), &p), Err(Error::EmptyVocab)));
    let mut c = valid.clone();
    problems[12].1(&mut c);
    c.p.allowed = None;
    let e = cpu.sample(Matrix::new(&data[..32], 2, 16), Matrix::new(&data[..640], 40, 16), &c.p).unwrap_err();
    assert!(matches!(e, Error::TokenOutOfRange { row: 0, token: 1000, v: 40 }), "{e:?}");
    // Row 13 after row 12, before row 14: a rank's shard of a vocabulary past 2³⁰.
    let shard = flashsampling::VocabShard::new(Matrix::new(&data[..640], 40, 16), 0);
    let (h, mut p) = (Matrix::new(&data[..32], 2, 16), SamplingParams::new(1.0, 1).with_softcap(-1.0));
    assert!(matches!(cpu.shard_candidates(h, shard, 1 << 31, &p), Err(Error::InvalidSoftcap(_))));
    p.softcap = None;
    p.allowed = Some(TokenMask { words: vec![0; 1], words_per_row: 1 });
    let e = cpu.shard_candidates(h, shard, 1 << 31, &p).unwrap_err();
    assert!(matches!(e, Error::TooLarge { what: "vocab size V", .. }), "{e:?}");
}
