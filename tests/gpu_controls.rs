//! Per-request controls in the fused kernels (issue 12): per-row temperatures and seeds, `n` samples
//! per row, the allowed-token mask, soft-capping, sparse logit adjustments and fused
//! log-probabilities, on the GPU.
//!
//! - **GPU == CPU bit for bit** on LM heads whose logits are exact (hidden row `r` is the unit
//!   vector `e_{r mod D}`, so each logit is one weight entry and any summation order gives it):
//!   tokens and winning scores equal bit for bit, every control on, every kernel family; the
//!   log-probabilities within 1e-4 of the CPU's f64 ones, the log-sum-exp within 1e-5 relative.
//! - **Identities** on random LM heads (real matmuls): per-row lists equal to the scalar call; `n`
//!   samples equal `n` one-sample calls; an all-ones mask and an empty adjustment list equal none; log-probabilities on do not
//!   change a token or score.
//! - **Chi-squared** of a masked, soft-capped, tempered row against its f64 distribution, and each
//!   sampled token's fused log-probability against the f64 log-probability.
//! - **Typed errors** before any launch.
//!
//! Each test prints a visible SKIP line without a GPU (and fails with `FLASHSAMPLING_REQUIRE_GPU=1`).

mod common;

use common::*;
use flashsampling::controls::{SparseAdjustments, TokenMask};
use flashsampling::params::LogProbs;
use flashsampling::{CpuBackend, DeviceMatrix, Error, Matrix, SamplingParams};
use half::bf16;

#[test]
fn every_control_matches_the_cpu_bit_for_bit_on_exact_logits() {
    let Some(mut gpu) = gpu_or_skip("every_control_matches_the_cpu_bit_for_bit_on_exact_logits") else { return };
    let cpu = CpuBackend::new();
    // B around the variants' batch tiles; V not a multiple of 16 or 32 (and one that is).
    let shapes = [(5usize, 64usize, 1000usize), (37, 64, 3001), (70, 128, 5008), (150, 64, 777)];
    let entries = gpu.fused_variants();
    for &(b, d, v) in &shapes {
        let (hidden, weight) = exact_head(b, d, v, 1.5, 0xC0_0000 ^ (b * 31 + v) as u64);
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let streams: Vec<u64> = (0..b as u64).map(|r| 3 * r + 11).collect();
        let seeds: Vec<u64> = (0..b as u64).map(|r| 0x5EED ^ (r * 0x9E37)).collect();
        let base = SamplingParams::new(0.9, 17).with_streams(streams.clone());
        let cases = [
            ("per-row temperatures", base.clone().with_temperatures(mixed_temperatures(b))),
            ("per-row seeds", base.clone().with_seeds(seeds.clone())),
            ("n = 3 samples", base.clone().with_samples_per_row(3).with_sample(5)),
            ("mask", base.clone().with_allowed(random_mask(b, v, 0.4, 9))),
            ("soft-cap 1.25", base.clone().with_softcap(1.25)),
            ("log-probs", base.clone().with_logprobs(LogProbs::ProcessedAndRaw)),
            ("sparse adjustments", base.clone().with_adjustments(random_adjustments(b, v, 6, 21))),
            (
                "adjustments + mask + soft-cap + log-probs",
                base.clone()
                    .with_adjustments(random_adjustments(b, v, 40, 22))
                    .with_allowed(random_mask(b, v, 0.5, 23))
                    .with_softcap(1.5)
                    .with_temperatures(mixed_temperatures(b))
                    .with_logprobs(LogProbs::ProcessedAndRaw),
            ),
            (
                "everything",
                base.clone()
                    .with_temperatures(mixed_temperatures(b))
                    .with_seeds(seeds.clone())
                    .with_samples_per_row(4)
                    .with_allowed(random_mask(b, v, 0.25, 10))
                    .with_softcap(2.0)
                    .with_adjustments(random_adjustments(b, v, 8, 24))
                    .with_logprobs(LogProbs::ProcessedAndRaw),
            ),
        ];
        for (name, params) in &cases {
            let c = cpu.sample_scored(h, w, params).unwrap();
            on_every_variant(&mut gpu, (h, w), params, |entry, g| {
                assert_same(&format!("{name}, B={b} D={d} V={v}, {entry}"), &g, &c)
            });
        }
        visible(&format!("GPU controls == CPU bit for bit: B={b:>3} D={d} V={v:>5}, {} variants", entries.len()));
    }
}

#[test]
fn control_identities_hold_bit_for_bit_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("control_identities_hold_bit_for_bit_on_the_gpu") else { return };
    for &(b, d, v) in &[(6usize, 256usize, 20_001usize), (40, 512, 32_000), (100, 256, 5008)] {
        let mut rng = TestRng::new(0x1D ^ (b * 7 + v) as u64);
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let streams: Vec<u64> = (0..b as u64).map(|r| 100 + r).collect();
        let base = SamplingParams::new(0.8, 42).with_streams(streams.clone());
        let plain = gpu.sample_scored(h, w, &base).unwrap();
        let same = |what: &str, p: &SamplingParams| {
            let got = gpu.sample_scored(h, w, p).unwrap();
            assert_eq!((&got.tokens, bits(&got.scores)), (&plain.tokens, bits(&plain.scores)), "{what}, B={b} V={v}");
        };
        same(
            "per-row lists equal to the call's",
            &base.clone().with_temperatures(vec![0.8; b]).with_seeds(vec![42; b]),
        );
        same("an all-ones mask", &base.clone().with_allowed(TokenMask::all(b, v)));
        same("an empty adjustment list", &base.clone().with_adjustments(SparseAdjustments::none(b)));

        same("log-probabilities on", &base.clone().with_logprobs(LogProbs::ProcessedAndRaw));
        same("processed log-probabilities on", &base.clone().with_logprobs(LogProbs::Processed));
        // Without raw log-probabilities the kernels skip the raw log-mass: the processed outputs
        // are the same bits (each log-mass is its own sum), and no raw ones come back.
        for params in [base.clone(), base.clone().with_temperatures(mixed_temperatures(b)).with_softcap(2.0)] {
            let both = gpu.sample_scored(h, w, &params.clone().with_logprobs(LogProbs::ProcessedAndRaw)).unwrap();
            let processed = gpu.sample_scored(h, w, &params.with_logprobs(LogProbs::Processed)).unwrap();
            assert!(processed.raw_logprobs.is_none() && both.raw_logprobs.is_some(), "B={b} V={v}");
            let opt_bits = |x: &Option<Vec<f32>>| x.as_deref().map(bits);
            assert_eq!(
                (&processed.tokens, opt_bits(&processed.logprobs), opt_bits(&processed.logsumexp)),
                (&both.tokens, opt_bits(&both.logprobs), opt_bits(&both.logsumexp)),
                "processed log-probabilities with and without the raw ones, B={b} V={v}"
            );
        }
        // Per-row temperatures and seeds: row r equals the scalar call with row r's values.
        let temps = mixed_temperatures(b);
        let seeds: Vec<u64> = (0..b as u64).map(|r| 7 * r + 1).collect();
        let mixed =
            gpu.sample_scored(h, w, &base.clone().with_temperatures(temps.clone()).with_seeds(seeds.clone())).unwrap();
        for r in [0, 1, b / 2, b - 1] {
            let one = gpu
                .sample_scored(h, w, &SamplingParams::new(temps[r], seeds[r]).with_streams(streams.clone()))
                .unwrap();
            assert_eq!(
                (mixed.tokens[r], mixed.scores[r].to_bits()),
                (one.tokens[r], one.scores[r].to_bits()),
                "row {r}"
            );
        }
        // n samples: sample j of row r is the one-sample call with sample index 3 + j.
        let n = 5;
        let many = gpu.sample_scored(h, w, &base.clone().with_samples_per_row(n).with_sample(3)).unwrap();
        assert_eq!(many.tokens.len(), b * n as usize);
        for j in 0..n {
            let one = gpu.sample_scored(h, w, &base.clone().with_sample(3 + j)).unwrap();
            for r in 0..b {
                let i = r * n as usize + j as usize;
                assert_eq!(
                    (many.tokens[i], many.scores[i].to_bits()),
                    (one.tokens[r], one.scores[r].to_bits()),
                    "r {r} j {j}"
                );
            }
        }
        visible(&format!("GPU control identities hold: B={b:>3} D={d} V={v}"));
    }
}

#[test]
fn masked_softcapped_rows_follow_their_distribution_and_log_probs_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("masked_softcapped_rows_follow_their_distribution_and_log_probs_on_the_gpu") else {
        return;
    };
    let (b, d, v, n) = (4usize, 64usize, 1000usize, 1000u32);
    let (t, cap) = (0.7f32, 3.0f32);
    // Every batch row is the same exact-logit row (hidden e_0), so all rows share one distribution.
    let (mut hidden, weight) = exact_head(b, d, v, 1.2, 0xC41);
    for r in 0..b {
        hidden[r * d..(r + 1) * d].fill(bf16::ZERO);
        hidden[r * d] = bf16::ONE;
    }
    let mask = random_mask(1, v, 0.5, 77);
    let masks = TokenMask { words: mask.words.repeat(b), words_per_row: mask.words_per_row };
    // The f64 reference: softmax(softcap(y) / T) over the allowed tokens.
    let z: Vec<f64> = (0..v)
        .map(|i| {
            let y = weight[i * d].to_f32() as f64;
            let allowed = (mask.words[i / 32] >> (i % 32)) & 1 == 1;
            if allowed { cap as f64 * (y / cap as f64).tanh() / t as f64 } else { f64::NEG_INFINITY }
        })
        .collect();
    let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + z.iter().map(|&x| (x - max).exp()).sum::<f64>().ln();
    let probs: Vec<f64> = z.iter().map(|&x| (x - lse).exp()).collect();
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let mut tokens = Vec::new();
    let mut worst_lp = 0.0f64;
    for round in 0..5u32 {
        let params = SamplingParams::new(t, 2026)
            .with_samples_per_row(n)
            .with_sample(round * n)
            .with_allowed(masks.clone())
            .with_softcap(cap)
            .with_logprobs(LogProbs::Processed);
        let s = gpu.sample_scored(h, w, &params).unwrap();
        for (i, &tok) in s.tokens.iter().enumerate() {
            assert!(probs[tok as usize] > 0.0, "masked token {tok} sampled");
            let lp = s.logprobs.as_ref().unwrap()[i] as f64;
            worst_lp = worst_lp.max((lp - probs[tok as usize].ln()).abs());
        }
        for &l in s.logsumexp.as_ref().unwrap() {
            assert!(((l as f64) - lse).abs() <= 1e-5 * lse.abs(), "log-sum-exp {l} vs f64 {lse}");
        }
        tokens.extend(s.tokens);
    }
    assert!(worst_lp <= 1e-4, "fused log-probability off the f64 one by {worst_lp:e}");
    let (stat, df, p) = chi_squared(&histogram(&tokens, v), &probs);
    visible(&format!(
        "GPU chi-squared (mask + soft-cap + T={t}, n={n}): {} samples, chi2 = {stat:.1}, df = {df}, p = {p:.4}; \
         worst |log-prob - f64| = {worst_lp:.2e}",
        tokens.len()
    ));
    assert!(p > 1e-4, "chi-squared p = {p}");
}

#[test]
fn log_probs_of_wide_rows_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("log_probs_of_wide_rows_match_the_cpu") else { return };
    let cpu = CpuBackend::new();
    // D ≥ 1024: the sampled token's logit is recomputed four 16-byte chunks per lane at a time, then
    // the remainder (D = 1032: one chunk on lane 0); real matmuls, so GPU and CPU sums round apart.
    for &(b, d, v) in &[(3usize, 4096usize, 20_000usize), (70, 1032, 5008), (9, 8192, 4096)] {
        let mut rng = TestRng::new(0x1D_0000 ^ (d * 7 + b) as u64);
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let params = SamplingParams::new(0.8, 41)
            .with_streams((0..b as u64).map(|r| 9 * r + 4).collect())
            .with_logprobs(LogProbs::ProcessedAndRaw);
        let (g, c) = (gpu.sample_scored(h, w, &params).unwrap(), cpu.sample_scored(h, w, &params).unwrap());
        let mut same = 0;
        for r in 0..b {
            if g.tokens[r] != c.tokens[r] {
                continue; // an f32 near-tie (tests/gpu.rs bounds those)
            }
            same += 1;
            for (name, x, y) in [
                ("processed", g.logprobs.as_ref().unwrap()[r], c.logprobs.as_ref().unwrap()[r]),
                ("raw", g.raw_logprobs.as_ref().unwrap()[r], c.raw_logprobs.as_ref().unwrap()[r]),
            ] {
                assert!((x - y).abs() <= 1e-4, "D={d} row {r}: {name} log-probability GPU {x}, CPU {y}");
            }
        }
        assert!(same * 10 >= b * 9, "D={d}: only {same} of {b} rows drew the CPU's token");
        visible(&format!("wide-row log-probs: B={b} D={d} V={v}: {same} rows compared within 1e-4"));
    }
}

#[test]
fn rows_with_nothing_allowed_and_device_masks() {
    let Some(gpu) = gpu_or_skip("rows_with_nothing_allowed_and_device_masks") else { return };
    let (b, d, v) = (3usize, 64usize, 300usize);
    let (hidden, weight) = exact_head(b, d, v, 1.0, 5);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let mut mask = random_mask(b, v, 0.5, 1);
    // Row 1 allows nothing: the host API says so, the device API gives no token for that row.
    mask.words[mask.words_per_row..2 * mask.words_per_row].fill(0);
    let params = SamplingParams::new(1.0, 3).with_allowed(mask.clone());
    assert!(matches!(gpu.sample_scored(h, w, &params), Err(Error::AllLogitsNegInfinite { row: 1 })));
    assert!(matches!(CpuBackend::new().sample_scored(h, w, &params), Err(Error::AllLogitsNegInfinite { row: 1 })));
    let dh = gpu.stream().clone_htod(&hidden).unwrap();
    let dw = gpu.stream().clone_htod(&weight).unwrap();
    let dm = gpu.stream().clone_htod(&mask.words).unwrap();
    let (hm, wm) =
        (DeviceMatrix { data: dh.as_view(), rows: b, cols: d }, DeviceMatrix { data: dw.as_view(), rows: v, cols: d });
    let mut out = gpu.alloc_samples(b, v).unwrap();
    let plain = SamplingParams::new(1.0, 3);
    gpu.sample_device_masked(&hm, &wm, &plain, Some(&dm.as_view()), &mut out).unwrap();
    let tokens = gpu.stream().clone_dtoh(&out.tokens()).unwrap();
    let scores = gpu.stream().clone_dtoh(&out.scores()).unwrap();
    assert_eq!(tokens[1], flashsampling::kernels::INVALID_INDEX);
    assert_eq!(scores[1], f32::NEG_INFINITY);
    // The other rows: the host-mask call's tokens on the CPU.
    let mut ok = mask.clone();
    ok.words[ok.words_per_row..2 * ok.words_per_row].fill(u32::MAX);
    let cpu = CpuBackend::new().sample(h, w, &plain.clone().with_allowed(ok)).unwrap();
    assert_eq!((tokens[0], tokens[2]), (cpu[0], cpu[2]));
    // Bad device masks and combinations are typed errors before any launch.
    let short = gpu.stream().clone_htod(&mask.words[1..]).unwrap();
    let err = gpu.sample_device_masked(&hm, &wm, &plain, Some(&short.as_view()), &mut out).unwrap_err();
    assert!(matches!(err, Error::LengthMismatch { .. }), "{err:?}");
    let both = plain.clone().with_allowed(mask.clone());
    let err = gpu.sample_device_masked(&hm, &wm, &both, Some(&dm.as_view()), &mut out).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
}

#[test]
fn bad_controls_are_typed_errors_on_the_gpu_backend() {
    let Some(gpu) = gpu_or_skip("bad_controls_are_typed_errors_on_the_gpu_backend") else { return };
    let (b, d, v) = (2usize, 64usize, 100usize);
    let (hidden, weight) = ones(b, d, v);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let p = SamplingParams::new(1.0, 1);
    type Case = (SamplingParams, fn(&Error) -> bool);
    let cases: Vec<Case> = vec![
        (p.clone().with_temperatures(vec![1.0]), |e| matches!(e, Error::LengthMismatch { .. })),
        (p.clone().with_temperatures(vec![1.0, f32::NAN]), |e| {
            matches!(e, Error::InvalidRowTemperature { row: 1, .. })
        }),
        (p.clone().with_temperatures(vec![-1.0, 1.0]), |e| matches!(e, Error::InvalidRowTemperature { row: 0, .. })),
        (p.clone().with_seeds(vec![1, 2, 3]), |e| matches!(e, Error::LengthMismatch { .. })),
        (p.clone().with_samples_per_row(0), |e| matches!(e, Error::InvalidSampleCount { .. })),
        (p.clone().with_samples_per_row(100_000), |e| matches!(e, Error::InvalidSampleCount { .. })),
        (p.clone().with_softcap(0.0), |e| matches!(e, Error::InvalidSoftcap(_))),
        (p.clone().with_softcap(f32::INFINITY), |e| matches!(e, Error::InvalidSoftcap(_))),
        (p.clone().with_allowed(TokenMask::all(b, v + 40)), |e| matches!(e, Error::LengthMismatch { .. })),
        (p.clone().with_top_logprobs(65, false), |e| matches!(e, Error::TooLarge { .. })),
        (p.clone().with_top_p(vec![0.5, f32::NAN]), |e| matches!(e, Error::InvalidTruncation { row: 1, .. })),
    ];
    for (params, ok) in cases {
        let err = gpu.sample(h, w, &params).unwrap_err();
        assert!(ok(&err), "{params:?}: {err:?}");
    }
    assert!(gpu.sample(h, w, &p).is_ok());
    // The last call's log-probability buffers: none after a plain call.
    let mut out = gpu.alloc_samples(b, v).unwrap();
    let (dh, dw) = (gpu.stream().clone_htod(&hidden).unwrap(), gpu.stream().clone_htod(&weight).unwrap());
    sample_on_device(&gpu, (&dh, b), (&dw, v), d, &p, &mut out);
    assert!(out.logprobs().is_none());
    sample_on_device(&gpu, (&dh, b), (&dw, v), d, &p.clone().with_logprobs(LogProbs::Processed), &mut out);
    assert!(out.logprobs().is_some() && out.logsumexp().is_some());
    assert!(out.raw_logprobs().is_none(), "processed log-probabilities only: no raw ones");
    sample_on_device(&gpu, (&dh, b), (&dw, v), d, &p.clone().with_logprobs(LogProbs::ProcessedAndRaw), &mut out);
    assert!(out.logprobs().is_some() && out.raw_logprobs().is_some() && out.logsumexp().is_some());
    sample_on_device(&gpu, (&dh, b), (&dw, v), d, &p, &mut out);
    assert!(out.logprobs().is_none(), "a plain call after a log-probability call: no stale log-probabilities");
}

/// Issue 48, item 11, on the GPU (written without a GPU; the GPU issue runs it): a `+∞` logit takes
/// all the mass in the fused log-probabilities, as on the CPU backend: the drawn `+∞` token
/// log-probability 0 (processed and raw), the row's log-sum-exp `+∞` — every kernel variant, with
/// `n` samples and greedy rows, equal to the CPU's.
#[test]
fn a_positive_infinite_logit_takes_all_the_mass_on_the_gpu() {
    let Some(mut gpu) = gpu_or_skip("a_positive_infinite_logit_takes_all_the_mass_on_the_gpu") else { return };
    let cpu = CpuBackend::new();
    let (b, d, v) = (4usize, 8usize, 4096usize);
    let (hidden, weight) = infinite_logit_head(b, d, v);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let params = SamplingParams::new(0.8, 0x11)
        .with_temperatures(vec![0.8, 0.0, 1.5, 1.0])
        .with_samples_per_row(3)
        .with_logprobs(LogProbs::ProcessedAndRaw);
    let c = cpu.sample_scored(h, w, &params).unwrap();
    assert_eq!(c.tokens, (0..b as u32).flat_map(|r| [40 + r; 3]).collect::<Vec<_>>());
    on_every_variant(&mut gpu, (h, w), &params, |entry, g| {
        assert_eq!(g.tokens, c.tokens, "{entry}: tokens");
        assert_eq!(g.logprobs, c.logprobs, "{entry}: log-probabilities");
        assert_eq!(g.raw_logprobs, c.raw_logprobs, "{entry}: raw log-probabilities");
        for (x, y) in g.logsumexp.iter().flatten().zip(c.logsumexp.iter().flatten()) {
            assert!(x == y || (x.is_nan() && y.is_nan()), "{entry}: log-sum-exp {x} vs {y}");
        }
    });
}

#[test]
fn large_portable_batches_run_the_gemm_fed_kernel_and_match_the_cpu_bit_for_bit() {
    // Issue 55: from GEMM_LOGITS_MIN_ROWS rows the portable path (every GPU without the sm_90a
    // module) lets cuBLAS write the logits and samples them with the one lane epilogue. On exact
    // logits every control must give the CPU's tokens and scores bit for bit, across ten 32-row
    // batch tiles (the last one part full) and a V that is not a multiple of 4 (padded row pitch,
    // a part-filled last Philox group).
    use flashsampling::kernels::config::{Epilogue, GEMM_LOGITS, GEMM_LOGITS_MIN_ROWS};
    let test = "large_portable_batches_run_the_gemm_fed_kernel_and_match_the_cpu_bit_for_bit";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let (b, d, v) = (300usize, 64usize, 3001usize);
    assert!(b >= GEMM_LOGITS_MIN_ROWS as usize && b % GEMM_LOGITS.block_b() as usize != 0);
    if gpu.fused_variant_for(b, d, v, Epilogue::Sample) != GEMM_LOGITS {
        visible(&format!(
            "SKIP {test}: B = {b} does not run the GEMM-fed kernel here (the sm_90a module is loaded, or libcublas \
             is missing; FLASHSAMPLING_PORTABLE=1 runs the portable path)"
        ));
        return;
    }
    for e in [Epilogue::LogProbs, Epilogue::Truncate] {
        assert_eq!(gpu.fused_variant_for(b, d, v, e), GEMM_LOGITS, "{e:?}");
    }
    // Below the threshold the fused kernels run (unless a variant is forced for every call).
    let below = GEMM_LOGITS_MIN_ROWS as usize - 1;
    if !std::env::var("FLASHSAMPLING_FUSED_VARIANT").is_ok_and(|v| !v.trim().is_empty()) {
        assert_ne!(gpu.fused_variant_for(below, d, v, Epilogue::Sample), GEMM_LOGITS);
    }
    let cpu = CpuBackend::new();
    let (hidden, weight) = exact_head(b, d, v, 1.5, 0xC0_6E33);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let base = SamplingParams::new(0.9, 29).with_streams((0..b as u64).map(|r| 5 * r + 3).collect());
    // Log-probabilities at T ≥ 0.35 (and greedy rows): at T = 1e-3 these logits (std 1.5) scale to
    // ~10³, where an f32 log-probability of a near tie is ~1e-4 from the CPU's f64 one in any kernel
    // (a first run here: row 36, −0.69336 against −0.69315). Tiny temperatures are checked on
    // tokens and scores, bit for bit.
    let temps: Vec<f32> = (0..b).map(|r| [0.7, 0.0, 1.0, 1.8, 0.35, 2.5][r % 6]).collect();
    let cases = [
        ("plain", base.clone()),
        ("mixed temperatures (1e-3 too)", base.clone().with_temperatures(mixed_temperatures(b))),
        ("temperatures + log-probs", base.clone().with_temperatures(temps).with_logprobs(LogProbs::ProcessedAndRaw)),
        (
            "mask + soft-cap + adjustments + n = 2",
            base.clone()
                .with_allowed(random_mask(b, v, 0.3, 41))
                .with_softcap(1.5)
                .with_adjustments(random_adjustments(b, v, 12, 42))
                .with_samples_per_row(2),
        ),
        (
            "top-k + top-p + log-probs",
            base.clone()
                .with_top_k((0..b as u32).map(|r| 1 + r % 50).collect())
                .with_top_p((0..b).map(|r| [1.0, 0.9, 0.5][r % 3]).collect())
                .with_logprobs(LogProbs::ProcessedAndRaw),
        ),
    ];
    for (name, params) in &cases {
        let c = cpu.sample_scored(h, w, params).unwrap();
        let g = gpu.sample_scored(h, w, params).unwrap();
        assert_same(&format!("{name}, B={b} D={d} V={v}, {GEMM_LOGITS}"), &g, &c);
    }
    visible(&format!("{GEMM_LOGITS} == CPU bit for bit: B={b} D={d} V={v}, {} cases", cases.len()));
}
