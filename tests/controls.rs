//! Per-request controls on the CPU backend (issue 12, the part before the GPU kernels take them): per-row
//! temperatures and seeds, several samples per row, and log-probabilities. Identities that must hold
//! bit for bit, chi-squared against the f64 reference of each row's distribution, log-probabilities
//! against f64, and the typed errors. Runs in CI.

mod common;

use common::*;
use flashsampling::params::{LogProbs, MAX_SAMPLES_PER_ROW};
use flashsampling::{CpuBackend, Error, Matrix, SamplingParams, VocabShard};

fn bits(s: &[f32]) -> Vec<u32> {
    s.iter().map(|x| x.to_bits()).collect()
}

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
    let hidden = vec![half::bf16::ONE; b * d];
    let weight = vec![half::bf16::ONE; v * d];
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
    // Not yet on the GPU, nor over shards (log-probabilities): said before any work.
    assert_eq!(p.cpu_only_control(), None);
    assert_eq!(p.clone().with_seeds(vec![1, 2]).cpu_only_control(), Some("per-row seed"));
    let shards = VocabShard::split(w, &[5, 10]).unwrap();
    let e = cpu.sample_sharded(h, &shards, v, &p.with_logprobs(LogProbs::Processed)).unwrap_err();
    assert!(matches!(e, Error::Unsupported { control: "log-probabilities", .. }), "{e:?}");
}
