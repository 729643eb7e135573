//! Per-request controls on the CPU backend (issue 12, the part before the GPU kernels take them): per-row
//! temperatures and seeds, several samples per row, and log-probabilities. Identities that must hold
//! bit for bit, chi-squared against the f64 reference of each row's distribution, log-probabilities
//! against f64, and the typed errors. Runs in CI.

mod common;

use common::*;
use flashsampling::params::{LogProbs, MAX_SAMPLES_PER_ROW};
use flashsampling::{CpuBackend, Error, Matrix, SamplingParams, VocabShard};

#[test]
fn per_row_temperatures_and_seeds_equal_the_scalar_calls_bit_for_bit() {
    let cpu = CpuBackend::new();
    let (b, d, v) = (6usize, 64usize, 777usize);
    let mut rng = TestRng::new(0x12_0001);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 0.3);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let temps = vec![0.5, 1.0, 0.0, 2.0, 1e-3, 0.8];
    let seeds: Vec<u64> = (0..b as u64).map(|r| 1000 + 7 * r).collect();
    let streams: Vec<u64> = (0..b as u64).map(|r| 40 + r).collect();
    let base = SamplingParams::new(0.9, 3).with_streams(streams.clone());
    let mixed =
        cpu.sample_scored(h, w, &base.clone().with_temperatures(temps.clone()).with_seeds(seeds.clone())).unwrap();
    for r in 0..b {
        let scalar =
            cpu.sample_scored(h, w, &SamplingParams::new(temps[r], seeds[r]).with_streams(streams.clone())).unwrap();
        assert_eq!(mixed.tokens[r], scalar.tokens[r], "row {r}");
        assert_eq!(mixed.scores[r].to_bits(), scalar.scores[r].to_bits(), "row {r}");
    }
    // All per-row values equal to the call's: the same as no per-row lists at all.
    let same = base.clone().with_temperatures(vec![0.9; b]).with_seeds(vec![3; b]);
    let (a, c) = (cpu.sample_scored(h, w, &base).unwrap(), cpu.sample_scored(h, w, &same).unwrap());
    assert_eq!((a.tokens, bits(&a.scores)), (c.tokens, bits(&c.scores)));
}

#[test]
fn n_samples_per_row_equal_n_one_sample_calls() {
    let cpu = CpuBackend::new().with_threads(3);
    let (b, d, v) = (3usize, 72usize, 1001usize);
    let mut rng = TestRng::new(0x12_0002);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 0.3);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let n = 9u32;
    let params =
        SamplingParams::new(0.7, 11).with_sample(5).with_samples_per_row(n).with_temperatures(vec![0.7, 0.0, 1.3]);
    let many = cpu.sample_scored(h, w, &params).unwrap();
    assert_eq!(many.tokens.len(), b * n as usize);
    for j in 0..n {
        let one = cpu.sample_scored(h, w, &params.clone().with_samples_per_row(1).with_sample(5 + j)).unwrap();
        for r in 0..b {
            let k = r * n as usize + j as usize;
            assert_eq!(many.tokens[k], one.tokens[r], "row {r} sample {j}");
            assert_eq!(many.scores[k].to_bits(), one.scores[r].to_bits(), "row {r} sample {j}");
        }
    }
    // The greedy row draws its argmax every time.
    assert!(many.tokens[n as usize..2 * n as usize].windows(2).all(|p| p[0] == p[1]));
    // Sharded, per-row controls and several samples give the same as one device.
    let shards = VocabShard::split(w, &[300, 301, 1001]).unwrap();
    let sharded = cpu.sample_sharded(h, &shards, v, &params).unwrap();
    assert_eq!((sharded.tokens, bits(&sharded.scores)), (many.tokens, bits(&many.scores)));
}

#[test]
fn mixed_temperatures_sample_each_rows_distribution() {
    // Every row has the same logits and its own temperature; n samples per row per call, fresh
    // streams per round. Each row's histogram against softmax(y / T_row) in f64.
    let cpu = CpuBackend::new();
    let (v, temps) = (40usize, [0.4f32, 1.0, 2.5]);
    let s = chi_setup(Logits::Spread, v, temps.len(), 1.0, 0x12_0003);
    let logits = logits_f64(&s.hidden[..s.d], &s.weight, s.d, 0);
    let (h, w) = (Matrix::new(&s.hidden, s.b, s.d), Matrix::new(&s.weight, v, s.d));
    let (n, rounds) = (64u32, 1600u64);
    let mut counts = vec![vec![0u64; v]; temps.len()];
    for round in 0..rounds {
        let params =
            params_round(1.0, 0xC41, s.b, 1000 * round).with_temperatures(temps.to_vec()).with_samples_per_row(n);
        let tokens = cpu.sample(h, w, &params).unwrap();
        for (r, c) in counts.iter_mut().enumerate() {
            for &t in &tokens[r * n as usize..(r + 1) * n as usize] {
                c[t as usize] += 1;
            }
        }
    }
    for (r, &t) in temps.iter().enumerate() {
        let (stat, df, p) = chi_squared(&counts[r], &softmax(&logits, t as f64));
        visible(&format!(
            "per-row T = {t}: chi-squared {stat:.1} on {df} df, p = {p:.3} ({} samples)",
            n as u64 * rounds
        ));
        assert!(p > 1e-4, "T = {t}: chi-squared {stat} on {df} df, p = {p}");
    }
}

#[test]
fn logprobs_match_an_f64_reference() {
    let cpu = CpuBackend::new().with_threads(2);
    let (b, d, v) = (4usize, 64usize, 3001usize);
    let mut rng = TestRng::new(0x12_0004);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 0.5);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let temps = vec![1.0f32, 0.6, 0.0, 1.7];
    let params = SamplingParams::new(1.0, 8).with_temperatures(temps.clone()).with_samples_per_row(3);
    let plain = cpu.sample_scored(h, w, &params).unwrap();
    assert!(plain.logprobs.is_none() && plain.raw_logprobs.is_none() && plain.logsumexp.is_none());
    let got = cpu.sample_scored(h, w, &params.clone().with_logprobs(LogProbs::ProcessedAndRaw)).unwrap();
    // Asking for log-probabilities does not change the tokens or scores.
    assert_eq!((&got.tokens, bits(&got.scores)), (&plain.tokens, bits(&plain.scores)));
    let (lp, raw, lse) = (got.logprobs.unwrap(), got.raw_logprobs.unwrap(), got.logsumexp.unwrap());
    for r in 0..b {
        let y = logits_f64(&hidden, &weight, d, r);
        let lse_of = |t: f64| {
            let m = y.iter().map(|x| x / t).fold(f64::NEG_INFINITY, f64::max);
            m + y.iter().map(|x| (x / t - m).exp()).sum::<f64>().ln()
        };
        let t = temps[r] as f64;
        if t > 0.0 {
            assert!(
                ((lse[r] as f64) - lse_of(t)).abs() <= 1e-5 * lse_of(t).abs().max(1.0),
                "row {r}: lse {} vs {}",
                lse[r],
                lse_of(t)
            );
        } else {
            assert!(lse[r].is_nan(), "greedy row: no log-sum-exp");
        }
        for j in 0..3 {
            let k = r * 3 + j;
            let tok = got.tokens[k] as usize;
            let want = if t > 0.0 { y[tok] / t - lse_of(t) } else { 0.0 };
            assert!(((lp[k] as f64) - want).abs() < 1e-4, "row {r} sample {j}: log-prob {} vs {want}", lp[k]);
            assert!(((raw[k] as f64) - (y[tok] - lse_of(1.0))).abs() < 1e-4, "row {r} sample {j}: raw");
        }
    }
    let processed_only = cpu.sample_scored(h, w, &params.with_logprobs(LogProbs::Processed)).unwrap();
    assert!(processed_only.logprobs.is_some() && processed_only.raw_logprobs.is_none());
}

#[test]
fn bad_controls_are_typed_errors() {
    let cpu = CpuBackend::new();
    let (b, d, v) = (2usize, 8usize, 10usize);
    let (hidden, weight) = ones(b, d, v);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let p = SamplingParams::new(1.0, 1);
    let err = |params: SamplingParams| cpu.sample(h, w, &params).unwrap_err();
    assert!(matches!(
        err(p.clone().with_temperatures(vec![1.0])),
        Error::LengthMismatch { buffer: "per-row temperatures", .. }
    ));
    assert!(matches!(err(p.clone().with_seeds(vec![1, 2, 3])), Error::LengthMismatch { buffer: "per-row seeds", .. }));
    assert!(matches!(
        err(p.clone().with_temperatures(vec![1.0, f32::NAN])),
        Error::InvalidRowTemperature { row: 1, .. }
    ));
    assert!(matches!(err(p.clone().with_temperatures(vec![-0.5, 1.0])), Error::InvalidRowTemperature { row: 0, .. }));
    assert!(matches!(
        err(p.clone().with_temperatures(vec![f32::INFINITY, 1.0])),
        Error::InvalidRowTemperature { row: 0, .. }
    ));
    assert!(matches!(err(p.clone().with_samples_per_row(0)), Error::InvalidSampleCount { n: 0, .. }));
    assert!(matches!(err(p.clone().with_samples_per_row(MAX_SAMPLES_PER_ROW + 1)), Error::InvalidSampleCount { .. }));
    assert!(matches!(err(p.clone().with_sample((1 << 31) - 2).with_samples_per_row(3)), Error::InvalidSample(_)));
    assert!(cpu.sample(h, w, &p.clone().with_sample((1 << 31) - 3).with_samples_per_row(3)).is_ok());
    // Not over shards (truncation, top log-probabilities): said before any work.
    let shards = VocabShard::split(w, &[5, 10]).unwrap();
    // Truncation over shards runs through the exchanged top lists, top log-probabilities through the
    // gathered rows (tests/shard.rs); a rank-local step cannot send either.
    assert!(cpu.sample_sharded(h, &shards, v, &p.clone().with_top_k(vec![3, 3])).is_ok());
    let e = cpu.shard_results(h, shards[0], v, &p.clone().with_top_k(vec![3, 3])).unwrap_err();
    assert!(matches!(e, Error::Unsupported { path: "over vocab shards", .. }), "{e:?}");
    let top = p.clone().with_top_logprobs(2, false);
    let e = cpu.shard_results(h, shards[0], v, &top).unwrap_err();
    assert!(matches!(e, Error::Unsupported { path: "over vocab shards", .. }), "{e:?}");
    let whole = cpu.sample_scored(h, w, &top).unwrap();
    assert_eq!(cpu.sample_sharded(h, &shards, v, &top).unwrap().top_logprobs, whole.top_logprobs);
    // Log-probabilities over shards work (tests/shard.rs compares them with the whole head).
    assert!(cpu.sample_sharded(h, &shards, v, &p.with_logprobs(LogProbs::Processed)).is_ok());
}

/// f64 reference of processed logits: soft-cap, adjustments (as `Adjustment::apply`), mask.
fn processed_f64(y: &[f64], cap: Option<f64>, adj: &[(usize, f64, f64, f64)], allowed: Option<&[bool]>) -> Vec<f64> {
    let mut z: Vec<f64> = y.iter().map(|&x| cap.map_or(x, |c| c * (x / c).tanh())).collect();
    for &(t, bias, rep, sub) in adj {
        let x = z[t] + bias;
        z[t] = (if x > 0.0 { x / rep } else { x * rep }) - sub;
    }
    if let Some(a) = allowed {
        for (zi, &ok) in z.iter_mut().zip(a) {
            if !ok {
                *zi = f64::NEG_INFINITY;
            }
        }
    }
    z
}

#[test]
fn masks_adjustments_and_softcap_sample_the_processed_distribution() {
    use flashsampling::controls::{RowPenalties, SparseAdjustments, TokenMask};
    let cpu = CpuBackend::new();
    let v = 48usize;
    let s = chi_setup(Logits::Spread, v, 3, 1.0, 0x12_0005);
    let y = logits_f64(&s.hidden[..s.d], &s.weight, s.d, 0);
    let (h, w) = (Matrix::new(&s.hidden, s.b, s.d), Matrix::new(&s.weight, v, s.d));
    // Row 0: a grammar allowing every third token. Row 1: bias, repetition and frequency/presence
    // penalties from a request's history. Row 2: both, at another temperature. Soft-cap 4 everywhere.
    let allowed_row: Vec<u32> = (0..v as u32).filter(|t| t % 3 == 0).collect();
    let all: Vec<u32> = (0..v as u32).collect();
    let mask = TokenMask::from_allowed(v, &[&allowed_row, &all, &allowed_row]).unwrap();
    let bias = [(5u32, 2.5f32), (6, -1.0)];
    let (prompt, output) = ([3u32, 5, 9], [9u32, 9, 12, 30]);
    let pen = RowPenalties {
        logit_bias: &bias,
        repetition_penalty: 1.3,
        frequency_penalty: 0.4,
        presence_penalty: 0.2,
        prompt: &prompt,
        output: &output,
    };
    let adjustments = SparseAdjustments::from_rows(&[RowPenalties::default(), pen.clone(), pen]).unwrap();
    // The helper's definitions: bias on 5 and 6; repetition on prompt ∪ output = {3, 5, 9, 12, 30};
    // frequency · count + presence on the output's {9: 2, 12: 1, 30: 1}.
    let want_adj: Vec<(usize, f64, f64, f64)> = vec![
        (3, 0.0, 1.3, 0.0),
        (5, 2.5, 1.3, 0.0),
        (6, -1.0, 1.0, 0.0),
        (9, 0.0, 1.3, 1.0),
        (12, 0.0, 1.3, 0.6),
        (30, 0.0, 1.3, 0.6),
    ];
    let (tokens1, adj1) = adjustments.row(1);
    assert_eq!(tokens1, &[3, 5, 6, 9, 12, 30]);
    for ((t, a), &(wt, bias, rep, sub)) in tokens1.iter().zip(adj1).zip(&want_adj) {
        assert_eq!(*t as usize, wt);
        assert!(
            (a.bias as f64 - bias).abs() < 1e-6
                && (a.repetition as f64 - rep).abs() < 1e-6
                && (a.subtract as f64 - sub).abs() < 1e-6,
            "{t}: {a:?}"
        );
    }
    let temps = [1.0f32, 1.0, 0.6];
    let allowed: Vec<bool> = (0..v).map(|t| t % 3 == 0).collect();
    let refs = [
        processed_f64(&y, Some(4.0), &[], Some(&allowed)),
        processed_f64(&y, Some(4.0), &want_adj, None),
        processed_f64(&y, Some(4.0), &want_adj, Some(&allowed)),
    ];
    let (n, rounds) = (64u32, 800u64);
    let mut counts = vec![vec![0u64; v]; 3];
    for round in 0..rounds {
        let params = params_round(1.0, 0xAD1, 3, 10_000 * round)
            .with_temperatures(temps.to_vec())
            .with_samples_per_row(n)
            .with_softcap(4.0)
            .with_allowed(mask.clone())
            .with_adjustments(adjustments.clone());
        let tokens = cpu.sample(h, w, &params).unwrap();
        for (r, c) in counts.iter_mut().enumerate() {
            for &t in &tokens[r * n as usize..(r + 1) * n as usize] {
                c[t as usize] += 1;
            }
        }
    }
    for r in 0..3 {
        if r != 1 {
            assert!(counts[r].iter().enumerate().all(|(t, &c)| c == 0 || t % 3 == 0), "row {r} sampled a masked token");
        }
        let (stat, df, p) = chi_squared(&counts[r], &softmax(&refs[r], temps[r] as f64));
        visible(&format!("controls row {r}: chi-squared {stat:.1} on {df} df, p = {p:.3}"));
        assert!(p > 1e-4, "row {r}: chi-squared {stat} on {df} df, p = {p}");
    }
    // Log-probabilities are those of the processed distribution.
    let params = params_round(1.0, 0xAD2, 3, 7)
        .with_temperatures(temps.to_vec())
        .with_softcap(4.0)
        .with_allowed(mask.clone())
        .with_adjustments(adjustments.clone())
        .with_logprobs(LogProbs::Processed);
    let got = cpu.sample_scored(h, w, &params).unwrap();
    for r in 0..3 {
        let t = temps[r] as f64;
        let scaled: Vec<f64> = refs[r].iter().map(|z| z / t).collect();
        let m = scaled.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + scaled.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
        let tok = got.tokens[r] as usize;
        let lp = got.logprobs.as_ref().unwrap()[r] as f64;
        assert!((lp - (scaled[tok] - lse)).abs() < 1e-4, "row {r}: log-prob {lp} vs {}", scaled[tok] - lse);
    }
}

#[test]
fn neutral_controls_change_nothing() {
    use flashsampling::controls::{SparseAdjustments, TokenMask};
    let cpu = CpuBackend::new();
    let (b, d, v) = (5usize, 64usize, 999usize);
    let mut rng = TestRng::new(0x12_0006);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 0.3);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let p = SamplingParams::new(0.8, 21).with_samples_per_row(2);
    let plain = cpu.sample_scored(h, w, &p).unwrap();
    for params in [p.clone().with_allowed(TokenMask::all(b, v)), p.clone().with_adjustments(SparseAdjustments::none(b))]
    {
        let got = cpu.sample_scored(h, w, &params).unwrap();
        assert_eq!((&got.tokens, bits(&got.scores)), (&plain.tokens, bits(&plain.scores)));
    }
    // A row with nothing allowed has no token: a typed error, never a silent one.
    let mut mask = TokenMask::all(b, v);
    mask.words[2 * mask.words_per_row..3 * mask.words_per_row].fill(0);
    assert!(matches!(cpu.sample(h, w, &p.clone().with_allowed(mask)), Err(Error::AllLogitsNegInfinite { row: 2 })));
}

#[test]
fn bad_masks_adjustments_and_caps_are_typed_errors() {
    use flashsampling::controls::{RowPenalties, SparseAdjustments, TokenMask};
    use flashsampling::kernels::logits::Adjustment;
    let cpu = CpuBackend::new();
    let (b, d, v) = (2usize, 8usize, 40usize);
    let (hidden, weight) = ones(b, d, v);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let p = SamplingParams::new(1.0, 1);
    let err = |params: SamplingParams| cpu.sample(h, w, &params).unwrap_err();
    for cap in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
        assert!(matches!(err(p.clone().with_softcap(cap)), Error::InvalidSoftcap(_)), "cap {cap}");
    }
    assert!(matches!(err(p.clone().with_allowed(TokenMask::all(b, 70))), Error::LengthMismatch { .. }));
    assert!(matches!(err(p.clone().with_allowed(TokenMask::all(3, v))), Error::LengthMismatch { .. }));
    assert!(matches!(TokenMask::from_allowed(v, &[&[40]]), Err(Error::TokenOutOfRange { token: 40, .. })));
    let adj = |tokens: Vec<u32>, a: Adjustment| SparseAdjustments {
        offsets: vec![0, tokens.len(), tokens.len()],
        adjustments: vec![a; tokens.len()],
        tokens,
    };
    let bias = Adjustment { bias: 1.0, ..Adjustment::NONE };
    assert!(matches!(
        err(p.clone().with_adjustments(adj(vec![3, 40], bias))),
        Error::TokenOutOfRange { row: 0, token: 40, .. }
    ));
    assert!(matches!(err(p.clone().with_adjustments(adj(vec![5, 5], bias))), Error::InvalidAdjustments { row: 0, .. }));
    assert!(matches!(
        err(p.clone().with_adjustments(adj(vec![5], Adjustment { repetition: 0.0, ..bias }))),
        Error::InvalidAdjustments { .. }
    ));
    assert!(matches!(
        err(p.clone().with_adjustments(adj(vec![5], Adjustment { bias: f32::NAN, ..bias }))),
        Error::InvalidAdjustments { .. }
    ));
    assert!(matches!(err(p.clone().with_adjustments(SparseAdjustments::none(3))), Error::LengthMismatch { .. }));
    let bad = RowPenalties { repetition_penalty: -1.0, ..Default::default() };
    assert!(matches!(SparseAdjustments::from_rows(&[bad]), Err(Error::InvalidAdjustments { .. })));
}

#[test]
fn fuzzed_controls_never_panic_and_respect_masks() {
    use flashsampling::controls::{RowPenalties, SparseAdjustments, TokenMask};
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let mut rng = TestRng::new(0x12_F022);
    let (mut oks, mut errors) = (0, 0);
    for case in 0..3000 {
        let b = 1 + (rng.next_u64() % 4) as usize;
        let v = 1 + (rng.next_u64() % 70) as usize;
        let d = 8 * (1 + (rng.next_u64() % 3) as usize);
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, 1.0);
        let pick = |rng: &mut TestRng, xs: &[f32]| xs[(rng.next_u64() % xs.len() as u64) as usize];
        let temps = [0.0f32, 1e-30, 0.3, 1.0, 4.0, -1.0, f32::NAN];
        let len = |rng: &mut TestRng| if rng.next_u64() % 10 == 0 { b + 1 } else { b };
        let mut p = SamplingParams::new(1.0, rng.next_u64()).with_samples_per_row(1 + (rng.next_u64() % 3) as u32);
        if rng.next_u64() % 2 == 0 {
            let n = len(&mut rng);
            p = p.with_temperatures((0..n).map(|_| pick(&mut rng, &temps)).collect());
        }
        if rng.next_u64() % 3 == 0 {
            let n = len(&mut rng);
            p = p.with_top_k((0..n).map(|_| (rng.next_u64() % 8) as u32).collect());
        }
        if rng.next_u64() % 3 == 0 {
            let n = len(&mut rng);
            p = p.with_top_p((0..n).map(|_| pick(&mut rng, &[0.1, 0.5, 0.99, 1.0, 0.0, 1.5])).collect());
        }
        if rng.next_u64() % 3 == 0 {
            let n = len(&mut rng);
            p = p.with_min_p((0..n).map(|_| pick(&mut rng, &[0.0, 0.05, 0.5, 1.0, -0.1])).collect());
        }
        if rng.next_u64() % 3 == 0 {
            p = p.with_softcap(pick(&mut rng, &[5.0, 30.0, 0.0]));
        }
        let mask_rows: Vec<Vec<u32>> =
            (0..b).map(|_| (0..v as u32).filter(|_| rng.next_u64() % 3 != 0).collect()).collect();
        if rng.next_u64() % 2 == 0 {
            let refs: Vec<&[u32]> = mask_rows.iter().map(Vec::as_slice).collect();
            p = p.with_allowed(TokenMask::from_allowed(v, &refs).unwrap());
        }
        if rng.next_u64() % 3 == 0 {
            let bias = [(0u32, 3.0f32), ((v as u32).saturating_sub(1), -2.0)];
            let rows: Vec<RowPenalties<'_>> = (0..b)
                .map(|_| RowPenalties { logit_bias: &bias, repetition_penalty: 1.2, ..Default::default() })
                .collect();
            p = p.with_adjustments(SparseAdjustments::from_rows(&rows).unwrap());
        }
        if rng.next_u64() % 4 == 0 {
            p = p.with_logprobs(LogProbs::ProcessedAndRaw).with_top_logprobs((rng.next_u64() % 4) as u32, false);
        }
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let got = catch_unwind(AssertUnwindSafe(|| CpuBackend::new().with_threads(2).sample_scored(h, w, &p)))
            .unwrap_or_else(|_| panic!("case {case}: panicked with {p:?}"));
        match got {
            Ok(s) => {
                oks += 1;
                let n = p.n as usize;
                assert_eq!(s.tokens.len(), b * n, "case {case}");
                for (k, &t) in s.tokens.iter().enumerate() {
                    assert!((t as usize) < v, "case {case}: token {t} of V = {v}");
                    if let Some(m) = &p.allowed {
                        assert!(
                            flashsampling::kernels::logits::allowed(m.row(k / n), t),
                            "case {case}: masked token {t}"
                        );
                    }
                }
                if let Some(lp) = &s.logprobs {
                    assert!(lp.iter().all(|x| *x <= 1e-5), "case {case}: a log-probability above 0: {lp:?}");
                }
            }
            Err(_) => errors += 1,
        }
    }
    assert!(oks > 100 && errors > 20, "{oks} sampled, {errors} errors: the generator lost its balance");
}

#[test]
fn f16_inputs_on_the_cpu_backend() {
    use half::f16;
    let cpu = CpuBackend::new();
    // Values exact in both formats: the same logits, so the same tokens and scores as bf16.
    let (b, d, v) = (4usize, 16usize, 300usize);
    let mut rng = TestRng::new(0x12_0F16);
    let hb: Vec<half::bf16> = (0..b * d).map(|_| half::bf16::from_f32((rng.next_u64() % 9) as f32 - 4.0)).collect();
    let wb: Vec<half::bf16> =
        (0..v * d).map(|_| half::bf16::from_f32(((rng.next_u64() % 17) as f32 - 8.0) / 8.0)).collect();
    let (hf, wf): (Vec<f16>, Vec<f16>) = (
        hb.iter().map(|x| f16::from_f32(x.to_f32())).collect(),
        wb.iter().map(|x| f16::from_f32(x.to_f32())).collect(),
    );
    let p = SamplingParams::new(0.9, 4).with_samples_per_row(2).with_logprobs(LogProbs::Processed);
    let a = cpu.sample_scored(Matrix::new(&hb, b, d), Matrix::new(&wb, v, d), &p).unwrap();
    let c = cpu.sample_scored(Matrix::new(&hf, b, d), Matrix::new(&wf, v, d), &p).unwrap();
    assert_eq!((&a.tokens, bits(&a.scores)), (&c.tokens, bits(&c.scores)));
    assert_eq!(a.logprobs, c.logprobs);
    // f16 keeps what bf16 would round away: logits 1 + 2^-10 and 1 tie in bf16 (the lower id wins)
    // but not in f16 (the larger wins).
    let hidden = vec![f16::ONE; 8];
    let mut weight = vec![f16::ZERO; 2 * 8];
    weight[0] = f16::ONE;
    weight[8] = f16::from_f32(1.0 + 1.0 / 1024.0);
    let t = cpu.sample(Matrix::new(&hidden, 1, 8), Matrix::new(&weight, 2, 8), &SamplingParams::greedy()).unwrap();
    assert_eq!(t, vec![1]);
    // NaN inputs are found in f16 too.
    weight[3] = f16::NAN;
    let e = cpu.sample(Matrix::new(&hidden, 1, 8), Matrix::new(&weight, 2, 8), &SamplingParams::greedy()).unwrap_err();
    assert!(matches!(e, Error::NanLogit { row: 0 }), "{e:?}");
}

/// The +∞ rule's outputs of one call (issue 48, item 11), checked against the rule: the drawn token
/// is the first `+∞` logit, its log-probability (processed and raw) 0, the row's log-sum-exp `+∞`, in
/// top lists the first `+∞` token 0 and every other `−∞`.
fn assert_infinite_rule(what: &str, s: &flashsampling::Samples, first_inf: &[u32], n: usize, greedy: &[bool]) {
    for (i, &t) in s.tokens.iter().enumerate() {
        let row = i / n;
        assert_eq!(t, first_inf[row], "{what}: sample {i}");
        if let Some(lp) = &s.logprobs {
            assert_eq!(lp[i], 0.0, "{what}: log-prob of sample {i}");
        }
        if let Some(raw) = &s.raw_logprobs {
            assert_eq!(raw[i], 0.0, "{what}: raw log-prob of sample {i}");
        }
    }
    if let Some(lse) = &s.logsumexp {
        for (row, &l) in lse.iter().enumerate() {
            if greedy[row] {
                assert!(l.is_nan(), "{what}: greedy row {row} log-sum-exp {l}");
            } else {
                assert_eq!(l, f32::INFINITY, "{what}: row {row} log-sum-exp");
            }
        }
    }
    if let Some(top) = &s.top_logprobs {
        for (row, list) in top.iter().enumerate() {
            assert_eq!(list[0], (first_inf[row], 0.0), "{what}: row {row} top list {list:?}");
            assert!(list[1..].iter().all(|e| e.1 == f32::NEG_INFINITY), "{what}: row {row} top list {list:?}");
        }
    }
}

#[test]
fn a_positive_infinite_logit_takes_all_the_mass_in_the_log_probabilities() {
    // Issue 48, item 11: a +∞ logit made every log-probability and the log-sum-exp NaN. The rule
    // (the softmax limit; ties to the lowest index, as the token): the drawn +∞ token has log-prob
    // 0, every other −∞, and the log-sum-exp is +∞ — on the tiled, materialized (top-n, top-k) and
    // sharded paths alike.
    let cpu = CpuBackend::new().with_threads(2);
    let (b, d, v) = (4usize, 8usize, 300usize);
    let (hidden, weight) = infinite_logit_head(b, d, v);
    let first_inf: Vec<u32> = (0..b as u32).map(|r| 40 + r).collect();
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let greedy = [false, true, false, false];
    let base = SamplingParams::new(0.8, 0x11)
        .with_temperatures(vec![0.8, 0.0, 1.5, 1.0])
        .with_samples_per_row(3)
        .with_logprobs(LogProbs::ProcessedAndRaw);
    for (what, params) in [
        ("tiled", base.clone()),
        ("top-n", base.clone().with_top_logprobs(5, false)),
        ("raw top-n", base.clone().with_top_logprobs(5, true)),
        ("top-k", base.clone().with_top_k(vec![3; b])),
        ("top-p", base.clone().with_top_p(vec![0.9; b])),
    ] {
        let s = cpu.sample_scored(h, w, &params).unwrap();
        assert_infinite_rule(what, &s, &first_inf, 3, &greedy);
        for ends in [vec![100, 300], vec![41, 42, 251, 300]] {
            let shards = VocabShard::split(w, &ends).unwrap();
            let got = cpu.sample_sharded(h, &shards, v, &params).unwrap();
            assert_infinite_rule(&format!("{what} over shards ending at {ends:?}"), &got, &first_inf, 3, &greedy);
        }
    }
}
