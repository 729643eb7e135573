//! Exact top-k, top-p and min-p on the CPU backend (issue 13's reference for the fused kernels'
//! certificate path, `tests/gpu_truncation.rs`): the order vLLM's V1 sampler applies them (temperature,
//! min-p, top-k, top-p on the renormalized remainder), ties at a boundary kept (`−0.0` = `+0.0`), `+∞`
//! rows, identities, chi-squared against an independent f64
//! reference, top-n log-probabilities, typed errors. Runs in CI.

mod common;

use common::*;
use flashsampling::params::LogProbs;
use flashsampling::{CpuBackend, Error, Matrix, SamplingParams, VocabShard};

#[test]
fn no_truncation_is_bit_identical_to_plain_sampling() {
    let cpu = CpuBackend::new();
    let (b, d, v) = (5usize, 64usize, 1003usize);
    let mut rng = TestRng::new(0x13_0001);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 0.3);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let p = SamplingParams::new(0.8, 5).with_samples_per_row(3).with_temperatures(vec![0.8, 0.0, 1.5, 0.3, 1.0]);
    let plain = cpu.sample_scored(h, w, &p).unwrap();
    let off = p.clone().with_top_k(vec![0, v as u32, 5000, 0, 0]).with_top_p(vec![1.0; b]).with_min_p(vec![0.0; b]);
    // The "off" values, and the exact path itself (forced by asking for top tokens) with nothing cut.
    for params in [off, p.clone().with_top_logprobs(3, false)] {
        let got = cpu.sample_scored(h, w, &params).unwrap();
        assert_eq!((&got.tokens, bits(&got.scores)), (&plain.tokens, bits(&plain.scores)));
    }
}

#[test]
fn truncated_rows_sample_the_exact_truncated_distribution() {
    let cpu = CpuBackend::new();
    let v = 60usize;
    // (T, top-k, top-p, min-p) per row, mixed in one call: each alone, all three, and a flat row
    // whose nucleus at p = 0.95 keeps most of the vocabulary.
    let rows: [(f32, u32, f32, f32); 6] = [
        (1.0, 7, 1.0, 0.0),
        (0.8, 0, 0.7, 0.0),
        (1.2, 0, 1.0, 0.05),
        (0.9, 20, 0.8, 0.02),
        (2.0, 0, 0.95, 0.0),
        (0.5, 3, 0.99, 0.0),
    ];
    let b = rows.len();
    let s = chi_setup(Logits::Spread, v, b, 1.0, 0x13_0002);
    let y = logits_f64(&s.hidden[..s.d], &s.weight, s.d, 0);
    let (h, w) = (Matrix::new(&s.hidden, b, s.d), Matrix::new(&s.weight, v, s.d));
    let (n, rounds) = (64u32, 500u64);
    let mut counts = vec![vec![0u64; v]; b];
    for round in 0..rounds {
        let tokens = cpu.sample(h, w, &truncation_round(&rows, n, round)).unwrap();
        count_rows(&mut counts, &tokens, n as usize);
    }
    for (r, &(t, k, p, m)) in rows.iter().enumerate() {
        let want = truncated(&y, t as f64, k as usize, p as f64, m as f64);
        let kept = want.iter().filter(|&&q| q > 0.0).count();
        assert!(counts[r].iter().zip(&want).all(|(&c, &q)| q > 0.0 || c == 0), "row {r}: a token outside the kept set");
        let (stat, df, pv) = chi_squared(&counts[r], &want);
        visible(&format!(
            "truncation row {r} (T {t}, k {k}, p {p}, min-p {m}; {kept} kept): chi-squared {stat:.1} on {df} df, p = {pv:.3}"
        ));
        assert!(pv > 1e-4, "row {r}: chi-squared {stat} on {df} df, p = {pv}");
    }
}

#[test]
fn ties_at_a_boundary_are_kept() {
    let cpu = CpuBackend::new();
    // Logits 3, 2, 2, 2, 1, 0: top-2 keeps the three tokens tied at 2 as well; top-p 0.5 at T = 1
    // (the first token holds 0.40 of the mass) reaches into the tie and keeps all of it.
    let logits = [3.0f32, 2.0, 2.0, 2.0, 1.0, 0.0];
    let (hidden, weight) = crafted_lm_head(logits.len(), 256, 8, |i| logits[i]);
    let (h, w) = (Matrix::new(&hidden, 256, 8), Matrix::new(&weight, logits.len(), 8));
    for params in [
        SamplingParams::new(1.0, 3).with_top_k(vec![2; 256]),
        SamplingParams::new(1.0, 3).with_top_p(vec![0.5; 256]),
        SamplingParams::new(1.0, 3).with_min_p(vec![0.36; 256]), // e^-1 = 0.368 ≥ 0.36: the ties stay
    ] {
        let tokens = cpu.sample(h, w, &params).unwrap();
        let hist = histogram(&tokens, logits.len());
        assert!(hist[0] > 0 && hist[1] > 0 && hist[2] > 0 && hist[3] > 0, "{hist:?}");
        assert_eq!(hist[4] + hist[5], 0, "{hist:?}");
    }
    // top-k 1 and min-p 1 keep only the maximum: greedy in effect.
    let tokens = cpu.sample(h, w, &SamplingParams::new(1.0, 3).with_top_k(vec![1; 256])).unwrap();
    assert!(tokens.iter().all(|&t| t == 0));
    let tokens = cpu.sample(h, w, &SamplingParams::new(1.0, 3).with_min_p(vec![1.0; 256])).unwrap();
    assert!(tokens.iter().all(|&t| t == 0));
}

#[test]
fn top_logprobs_match_an_f64_reference() {
    let cpu = CpuBackend::new();
    let (b, d, v) = TOP_CASE;
    for raw in [false, true] {
        let (hidden, weight, params) = top_logprob_case(raw);
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let got = cpu.sample_scored(h, w, &params.with_logprobs(LogProbs::ProcessedAndRaw)).unwrap();
        assert_top_case("CPU", &hidden, &weight, raw, got.top_logprobs.as_ref().unwrap());
        // The sampled token's log-probability is that of the truncated distribution.
        for r in 0..b {
            let sampled = top_case_probs(&hidden, &weight, r, false)[got.tokens[r] as usize];
            assert!((got.logprobs.as_ref().unwrap()[r] as f64 - sampled.ln()).abs() < 1e-4, "row {r}");
        }
    }
}

#[test]
fn bad_truncation_values_are_typed_errors() {
    let cpu = CpuBackend::new();
    let (b, d, v) = (2usize, 8usize, 10usize);
    let (hidden, weight) = ones(b, d, v);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let p = SamplingParams::new(1.0, 1);
    let err = |params: SamplingParams| cpu.sample(h, w, &params).unwrap_err();
    for bad in [0.0f32, -0.1, 1.5, f32::NAN] {
        assert!(
            matches!(err(p.clone().with_top_p(vec![0.9, bad])), Error::InvalidTruncation { row: 1, what: "top-p", .. }),
            "{bad}"
        );
    }
    for bad in [-0.1f32, 1.01, f32::NAN] {
        assert!(
            matches!(err(p.clone().with_min_p(vec![bad, 0.0])), Error::InvalidTruncation { row: 0, what: "min-p", .. }),
            "{bad}"
        );
    }
    assert!(matches!(err(p.clone().with_top_k(vec![1])), Error::LengthMismatch { buffer: "per-row top-k", .. }));
    assert!(matches!(err(p.clone().with_top_logprobs(65, false)), Error::TooLarge { .. }));
    let shards = VocabShard::split(w, &[5, 10]).unwrap();
    let e = cpu.shard_candidates(h, shards[0], v, &p.clone().with_top_k(vec![2, 2])).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
}

#[test]
fn min_p_comes_before_top_p_as_in_vllm() {
    // Issue 56, item 3: probabilities [0.5, 0.3, 0.1, 0.1], top-p 0.6, min-p 0.25. vLLM's V1 order
    // (min-p, then top-k / top-p on the renormalized rest) keeps {0}; min-p last kept {0, 1}.
    let cpu = CpuBackend::new();
    let logits: Vec<f32> = [0.5f64, 0.3, 0.1, 0.1].iter().map(|q| q.ln() as f32).collect();
    // Exact in bf16? ln values are not; the weights hold them rounded, the rule is on those values.
    let (hidden, weight) = crafted_lm_head(4, 64, 8, |i| logits[i]);
    let (h, w) = (Matrix::new(&hidden, 64, 8), Matrix::new(&weight, 4, 8));
    let params = SamplingParams::new(1.0, 56).with_top_p(vec![0.6; 64]).with_min_p(vec![0.25; 64]);
    let tokens = cpu.sample(h, w, &params).unwrap();
    assert!(tokens.iter().all(|&t| t == 0), "{tokens:?}");
    // Over shards (the certificate's walk and the fallback's threshold) the same.
    for ends in [vec![2, 4], vec![1, 2, 3, 4]] {
        let got = cpu.sample_sharded(h, &VocabShard::split(w, &ends).unwrap(), 4, &params).unwrap();
        assert_eq!(got.tokens, tokens, "shards ending at {ends:?}");
    }
    // Top-p alone keeps {0, 1}.
    let tokens = cpu.sample(h, w, &SamplingParams::new(1.0, 56).with_top_p(vec![0.6; 64])).unwrap();
    let hist = histogram(&tokens, 4);
    assert!(hist[0] > 0 && hist[1] > 0 && hist[2] + hist[3] == 0, "{hist:?}");
}

#[test]
fn signed_zeros_tie_at_a_boundary() {
    // Issue 56, item 1: +0.0 and −0.0 are one value. z = [+0, −0, −1, −2] (a repetition penalty of
    // 0.4 turns a −0 weight product into −0.0 on the GPU; here the logits are the weights'): top-k 1
    // keeps both zeros, and the top-n list orders them by id.
    let cpu = CpuBackend::new();
    let logits = [0.0f32, -0.0, -1.0, -2.0];
    let (hidden, weight) = crafted_lm_head(4, 256, 8, |i| logits[i]);
    assert_eq!(weight[8].to_bits(), half::bf16::NEG_ZERO.to_bits());
    let (h, w) = (Matrix::new(&hidden, 256, 8), Matrix::new(&weight, 4, 8));
    let params = SamplingParams::new(1.0, 7).with_top_k(vec![1; 256]).with_top_logprobs(4, false);
    let got = cpu.sample_scored(h, w, &params).unwrap();
    let hist = histogram(&got.tokens, 4);
    assert!(hist[0] > 0 && hist[1] > 0 && hist[2] + hist[3] == 0, "{hist:?}");
    for top in got.top_logprobs.as_ref().unwrap() {
        assert_eq!(top.iter().map(|e| e.0).collect::<Vec<_>>(), vec![0, 1], "{top:?}");
    }
    let raw = cpu.sample_scored(h, w, &SamplingParams::new(1.0, 7).with_top_logprobs(4, true)).unwrap();
    for top in raw.top_logprobs.as_ref().unwrap() {
        assert_eq!(top.iter().map(|e| e.0).collect::<Vec<_>>(), vec![0, 1, 2, 3], "{top:?}");
    }
}

#[test]
fn a_row_with_a_positive_infinite_logit_keeps_it_under_every_truncation() {
    // Issue 56, item 2: with a +∞ logit the kept set is the +∞ tokens (all the mass) and the first is
    // drawn, with log-probability 0 and a kept log-sum-exp of +∞ — top-p, top-k + top-p, min-p, and
    // over shards (certificate and fallback) alike. Logits 2·bf16::MAX (f32 +∞) at tokens 3 and 9.
    let cpu = CpuBackend::new();
    let (b, d, v) = (4usize, 8usize, 40usize);
    let (mut hidden, weight) = crafted_lm_head(v, b, d, |i| if i == 3 || i == 9 { f32::MAX } else { (i % 5) as f32 });
    for r in 0..b {
        hidden[r * d] = half::bf16::from_f32(2.0);
    }
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let base = SamplingParams::new(1.0, 9).with_logprobs(LogProbs::Processed).with_samples_per_row(2);
    for params in [
        base.clone().with_top_p(vec![0.9; b]),
        base.clone().with_top_k(vec![5; b]).with_top_p(vec![0.5; b]),
        base.clone().with_min_p(vec![0.1; b]),
        base.clone().with_top_k(vec![1; b]).with_top_logprobs(3, false),
    ] {
        let whole = cpu.sample_scored(h, w, &params).unwrap();
        assert!(whole.tokens.iter().all(|&t| t == 3), "{params:?}: {:?}", whole.tokens);
        assert!(whole.logprobs.as_ref().unwrap().iter().all(|&l| l == 0.0), "{params:?}: {:?}", whole.logprobs);
        assert!(whole.logsumexp.as_ref().unwrap().iter().all(|&l| l == f32::INFINITY), "{:?}", whole.logsumexp);
        if let Some(top) = &whole.top_logprobs {
            assert!(top.iter().all(|t| t[0] == (3, 0.0) && t[1..].iter().all(|e| e.1 == f32::NEG_INFINITY)), "{top:?}");
        }
        for ends in [vec![5, 40], vec![4, 8, 12, 40]] {
            let got = cpu.sample_sharded(h, &VocabShard::split(w, &ends).unwrap(), v, &params).unwrap();
            assert_eq!(got.tokens, whole.tokens, "{params:?} over shards ending at {ends:?}");
            assert_eq!(got.logprobs, whole.logprobs, "{params:?} over shards ending at {ends:?}");
            assert_eq!(got.logsumexp, whole.logsumexp, "{params:?} over shards ending at {ends:?}");
        }
    }
}

#[test]
fn a_tiny_temperature_gives_the_greedy_limit_of_the_log_probabilities() {
    // Issue 56, item 4: at a tiny (normal) temperature `z / T` passes f32's range (T = 2e-38, z = 10:
    // 5e38), and the GPU's certified rows reported NaN. The limit: the greedy token, log-probability
    // 0, and a log-sum-exp of z_max / T rounded to f32: +∞. (Subnormal T, such as 1e-38, is greedy:
    // log-probability 0 and a NaN log-sum-exp, as every greedy row.)
    let cpu = CpuBackend::new();
    let logits = [10.0f32, 9.875, 9.0, -1.0, 0.5];
    let (hidden, weight) = crafted_lm_head(logits.len(), 16, 8, |i| logits[i]);
    let (h, w) = (Matrix::new(&hidden, 16, 8), Matrix::new(&weight, logits.len(), 8));
    let params = SamplingParams::new(2e-38, 4)
        .with_top_k(vec![3; 16])
        .with_top_p(vec![0.9; 16])
        .with_logprobs(LogProbs::Processed);
    let got = cpu.sample_scored(h, w, &params).unwrap();
    assert!(got.tokens.iter().all(|&t| t == 0), "{:?}", got.tokens);
    assert!(got.logprobs.as_ref().unwrap().iter().all(|&l| l == 0.0), "{:?}", got.logprobs);
    assert!(got.logsumexp.as_ref().unwrap().iter().all(|&l| l == f32::INFINITY), "{:?}", got.logsumexp);
    let sharded = cpu.sample_sharded(h, &VocabShard::split(w, &[2, 5]).unwrap(), logits.len(), &params).unwrap();
    assert_eq!(sharded.tokens, got.tokens);
    assert!(sharded.logprobs.as_ref().unwrap().iter().all(|&l| l == 0.0), "{:?}", sharded.logprobs);
    let greedy = cpu.sample_scored(h, w, &params.clone().with_temperatures(vec![1e-38; 16])).unwrap();
    assert_eq!(greedy.tokens, got.tokens);
    assert!(greedy.logprobs.as_ref().unwrap().iter().all(|&l| l == 0.0));
    assert!(greedy.logsumexp.as_ref().unwrap().iter().all(|l| l.is_nan()));
}
