//! f16 hidden states and weights on the GPU (issue 12, item 8): the kernels pick the f16 MMA
//! (`mma.sync` / `wgmma` `.f16`) and the f16 scalar dot products by the call's element type; products
//! are accumulated in f32 as with bf16.
//!
//! - **GPU == CPU** (the CPU backend's f16 path) on random f16 heads through real matmuls, every
//!   kernel variant: a row may differ only where its two best perturbed scores are within the f32
//!   summation tolerance (as for bf16, `tests/gpu.rs`).
//! - **Bit for bit** on heads whose logits are exact (hidden row `r` = `e_{r mod D}`): tokens and
//!   scores equal, every control on (per-row temperatures, `n` samples, mask, soft-cap, sparse
//!   adjustments, log-probabilities, top-k / top-p / min-p with the fallback), every variant.
//! - **Chi-squared** of f16 logits that bf16 cannot hold, against their f64 softmax.
//! - **The device API** with `DeviceMatrix<f16>` equals the host API.
//!
//! Each test prints a visible SKIP line without a GPU (and fails with `FLASHSAMPLING_REQUIRE_GPU=1`).

mod common;

use common::*;
use flashsampling::params::LogProbs;
use flashsampling::{CpuBackend, DeviceMatrix, Matrix, SamplingParams};
use half::f16;

/// `n` f16 values, normal with standard deviation `std` (f16 precision: ten mantissa bits).
fn normal_f16(rng: &mut TestRng, n: usize, std: f64) -> Vec<f16> {
    (0..n).map(|_| f16::from_f64(rng.normal() * std)).collect()
}

/// A head with exact logits in f16: hidden row `r` = `e_{r mod d}`, weight normal (`std`).
fn exact_head_f16(b: usize, d: usize, v: usize, std: f64, seed: u64) -> (Vec<f16>, Vec<f16>) {
    let mut rng = TestRng::new(seed);
    let weight = normal_f16(&mut rng, v * d, std);
    let mut hidden = vec![f16::ZERO; b * d];
    for r in 0..b {
        hidden[r * d + r % d] = f16::ONE;
    }
    (hidden, weight)
}

#[test]
fn f16_matches_the_cpu_through_real_matmuls_on_every_variant() {
    let Some(mut gpu) = gpu_or_skip("f16_matches_the_cpu_through_real_matmuls_on_every_variant") else { return };
    let cpu = CpuBackend::new();
    let (mut rows, mut differ) = (0usize, 0usize);
    for &(b, d, v) in
        &[(1usize, 136usize, 1008usize), (9, 4096, 20_001), (40, 200, 3001), (130, 1024, 5008), (257, 72, 999)]
    {
        let mut rng = TestRng::new(0xF16 ^ (b * 7919 + d + v * 31) as u64);
        let hidden = normal_f16(&mut rng, b * d, 1.0);
        let weight = normal_f16(&mut rng, v * d, 2.0 / (d as f64).sqrt());
        let params = SamplingParams::new(0.8, 5 + b as u64).with_streams((0..b as u64).map(|i| 7 * i + 1).collect());
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let want = cpu.sample_scored(h, w, &params).unwrap();
        on_every_variant(&mut gpu, (h, w), &params, |entry, got| {
            let at = format!("f16 {entry} B={b} D={d} V={v}");
            let m = near_tie_mismatches(&at, (&hidden, &weight, d), &params, 0.8, &got.tokens, &want.tokens);
            visible(&format!("f16 {entry:<30} B={b:>3} D={d:>4} V={v:>5}: {m} rows of {b} differ from the CPU"));
            rows += b;
            differ += m;
        });
    }
    assert!(differ * 1000 <= rows, "{differ} of {rows} rows differ (> 0.1%)");
}

#[test]
fn f16_every_control_matches_the_cpu_bit_for_bit_on_exact_logits() {
    let Some(mut gpu) = gpu_or_skip("f16_every_control_matches_the_cpu_bit_for_bit_on_exact_logits") else { return };
    let cpu = CpuBackend::new();
    for &(b, d, v) in &[(5usize, 64usize, 1000usize), (37, 64, 3001), (70, 128, 5008), (150, 64, 777)] {
        let (hidden, weight) = exact_head_f16(b, d, v, 1.5, 0xF16_0000 ^ (b * 31 + v) as u64);
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let base = SamplingParams::new(0.9, 17).with_streams((0..b as u64).map(|r| 3 * r + 11).collect());
        let k: Vec<u32> = (0..b as u32).map(|r| [0, 1, 5, 40][r as usize % 4]).collect();
        let p: Vec<f32> = (0..b).map(|r| [1.0, 0.9, 0.5, 0.99][r % 4]).collect();
        let cases = [
            ("plain", base.clone()),
            (
                "per-row temperatures + log-probs",
                base.clone().with_temperatures(mixed_temperatures(b)).with_logprobs(LogProbs::ProcessedAndRaw),
            ),
            ("n = 3 samples", base.clone().with_samples_per_row(3).with_sample(5)),
            (
                "mask + soft-cap + adjustments + log-probs",
                base.clone()
                    .with_allowed(random_mask(b, v, 0.5, 23))
                    .with_softcap(1.5)
                    .with_adjustments(random_adjustments(b, v, 20, 22))
                    .with_logprobs(LogProbs::ProcessedAndRaw),
            ),
            (
                "top-k / top-p / min-p + adjustments + log-probs",
                base.clone()
                    .with_top_k(k.clone())
                    .with_top_p(p.clone())
                    .with_min_p((0..b).map(|r| [0.0, 0.0, 0.05, 0.0][r % 4]).collect())
                    .with_adjustments(random_adjustments(b, v, 10, 24))
                    .with_temperatures(mixed_temperatures(b))
                    .with_logprobs(LogProbs::ProcessedAndRaw),
            ),
        ];
        for (what, params) in &cases {
            let want = cpu.sample_scored(h, w, params).unwrap();
            on_every_variant(&mut gpu, (h, w), params, |entry, got| {
                assert_same(&format!("f16 {what}, {entry}, B={b} D={d} V={v}"), &got, &want);
            });
        }
        visible(&format!(
            "f16 exact logits B={b:>3} D={d} V={v:>4}: {} cases equal the CPU on every variant",
            cases.len()
        ));
    }
}

#[test]
fn f16_chi_squared_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("f16_chi_squared_on_the_gpu") else { return };
    // One row of f16 logits (weight column 0; hidden e_0), spread over ten mantissa bits.
    let (b, d, v, rounds) = (5000usize, 8usize, 1000usize, 8u64);
    for (t, std) in [(1.0f32, 1.2f64), (0.6, 0.9)] {
        let (mut hidden, weight) = exact_head_f16(b, d, v, std, 0xC41 ^ v as u64);
        for r in 0..b {
            hidden[r * d..(r + 1) * d].fill(f16::ZERO);
            hidden[r * d] = f16::ONE;
        }
        let probs = softmax(&logits_f64(&hidden, &weight, d, 0), t as f64);
        let mut tokens = Vec::new();
        for round in 0..rounds {
            let params = params_round(t, 0xC41, b, round * b as u64);
            tokens.extend(gpu.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &params).unwrap());
        }
        let (stat, df, p) = chi_squared(&histogram(&tokens, v), &probs);
        visible(&format!(
            "f16 GPU chi-squared V={v} T={t}: chi2={stat:.1} df={df} p={p:.4} ({} samples)",
            tokens.len()
        ));
        assert!(p > 1e-3, "T = {t}: p = {p}");
    }
}

#[test]
fn f16_device_api_equals_the_host_api() {
    let Some(gpu) = gpu_or_skip("f16_device_api_equals_the_host_api") else { return };
    let (b, d, v) = (48usize, 256usize, 4096usize);
    let mut rng = TestRng::new(0xDE_F16);
    let hidden = normal_f16(&mut rng, b * d, 1.0);
    let weight = normal_f16(&mut rng, v * d, 0.125);
    let params = SamplingParams::new(1.0, 3).with_logprobs(LogProbs::Processed);
    let host = gpu.sample_scored(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &params).unwrap();
    let stream = gpu.stream().clone();
    let (hd, wd) = (stream.clone_htod(&hidden).unwrap(), stream.clone_htod(&weight).unwrap());
    let mut out = gpu.alloc_samples(b, v).unwrap();
    gpu.sample_device(
        &DeviceMatrix { data: hd.as_view(), rows: b, cols: d },
        &DeviceMatrix { data: wd.as_view(), rows: v, cols: d },
        &params,
        &mut out,
    )
    .unwrap();
    assert_eq!(stream.clone_dtoh(&out.tokens()).unwrap(), host.tokens);
    assert_eq!(bits(&stream.clone_dtoh(&out.scores()).unwrap()), bits(&host.scores));
    assert_eq!(bits(&stream.clone_dtoh(&out.logprobs().unwrap()).unwrap()), bits(host.logprobs.as_ref().unwrap()));
}
