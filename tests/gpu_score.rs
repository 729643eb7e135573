//! Scoring given tokens on the GPU (issue 52.1): `GpuBackend::score`, `sample_and_score` and
//! `score_device` — the log-probability fused pass with each row's given token scored by the
//! reduction, as it scores the sampled one, and with top-k / top-p / min-p the truncating pass
//! (each token scored over the kept set the truncation step certifies or the fallback finds).
//! Against the CPU backend (exact-logit heads, every control the GPU scores, every fused variant,
//! rows that take the fallback, a call split into launches), against an independent f64 reference
//! (a long prefill), the sampled token's identity bit for bit, and typed errors; the exact log-sum-exp
//! path (module `exact`). SKIP without a GPU.

mod common;

use common::*;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode, CUstreamCaptureStatus};
use flashsampling::params::LogProbs;
use flashsampling::score::Scores;
use flashsampling::{CpuBackend, DeviceMatrix, Error, Matrix, SamplingParams, ScoreOutputs, ScoreTop};
use half::bf16;

/// The controls the GPU scores: plain, per-row temperatures (greedy rows too), per-row seeds, soft-cap,
/// a mask, sparse adjustments, and all of them at once.
fn cases(b: usize, v: usize) -> Vec<(&'static str, SamplingParams)> {
    let base = SamplingParams::new(0.8, 11).with_streams((0..b as u64).map(|r| 5 * r + 1).collect());
    vec![
        ("plain", base.clone()),
        // Every row at T = 1 and nothing changes a logit: a scoring pass computes one log-mass.
        ("T = 1", SamplingParams { temperature: 1.0, ..base.clone() }),
        ("temperatures", base.clone().with_temperatures(mixed_temperatures(b))),
        ("seeds", base.clone().with_seeds((0..b as u64).map(|r| r ^ 0x5EED).collect())),
        ("softcap", base.clone().with_softcap(1.5)),
        ("mask", base.clone().with_allowed(random_mask(b, v, 0.3, 5))),
        ("adjustments", base.clone().with_adjustments(random_adjustments(b, v, 6, 7))),
        (
            "everything",
            base.with_temperatures(mixed_temperatures(b))
                .with_softcap(2.0)
                .with_allowed(random_mask(b, v, 0.5, 9))
                .with_adjustments(random_adjustments(b, v, 20, 10)),
        ),
    ]
}

/// The truncating controls over the controls of [`cases`]: per-row top-k, top-p and min-p (rows
/// that keep everything among them), each with greedy rows, and all of them with a mask, a
/// soft-cap and adjustments.
fn truncating_cases(b: usize, v: usize) -> Vec<(&'static str, SamplingParams)> {
    let base = SamplingParams::new(0.9, 13).with_streams((0..b as u64).map(|r| 3 * r + 2).collect());
    let ks: Vec<u32> = (0..b).map(|r| [5, 0, 1, 40, v as u32, 2][r % 6]).collect();
    let ps: Vec<f32> = (0..b).map(|r| [0.9, 1.0, 0.5, 0.99, 0.2][r % 5]).collect();
    let mins: Vec<f32> = (0..b).map(|r| [0.1, 0.0, 0.5, 0.02][r % 4]).collect();
    vec![
        ("top-k", base.clone().with_top_k(ks.clone()).with_temperatures(mixed_temperatures(b))),
        ("top-p", base.clone().with_top_p(ps.clone()).with_temperatures(mixed_temperatures(b))),
        ("min-p", base.clone().with_min_p(mins.clone())),
        (
            "truncation and everything",
            base.with_top_k(ks)
                .with_top_p(ps)
                .with_min_p(mins)
                .with_temperatures(mixed_temperatures(b))
                .with_softcap(2.0)
                .with_allowed(random_mask(b, v, 0.5, 19))
                .with_adjustments(random_adjustments(b, v, 20, 21)),
        ),
    ]
}

/// [`cases`], then [`truncating_cases`].
fn all_cases(b: usize, v: usize) -> Vec<(&'static str, SamplingParams)> {
    cases(b, v).into_iter().chain(truncating_cases(b, v)).collect()
}

/// Per row, the sampled token, the next token, a random one and (with a mask) a masked one.
fn token_sets(sampled: &[u32], v: usize, params: &SamplingParams, seed: u64) -> Vec<Vec<u32>> {
    let mut rng = TestRng::new(seed);
    let mut sets = vec![
        sampled.to_vec(),
        sampled.iter().map(|&t| (t + 1) % v as u32).collect(),
        (0..sampled.len()).map(|_| (rng.next_u64() % v as u64) as u32).collect(),
    ];
    if let Some(mask) = &params.allowed {
        let masked = (0..sampled.len())
            .map(|r| {
                let row = &mask.words[r * mask.words_per_row..(r + 1) * mask.words_per_row];
                (0..v as u32).find(|&t| (row[t as usize / 32] >> (t % 32)) & 1 == 0).unwrap_or(0)
            })
            .collect();
        sets.push(masked);
    }
    sets
}

#[test]
fn gpu_scores_match_the_cpu_on_every_control_and_variant() {
    let test = "gpu_scores_match_the_cpu_on_every_control_and_variant";
    let Some(mut gpu) = gpu_or_skip(test) else { return };
    let cpu = CpuBackend::new();
    for &(b, d, v) in &[(5usize, 64usize, 1000usize), (37, 128, 3001), (150, 64, 5008)] {
        let (hidden, weight) = exact_head(b, d, v, 1.5, 0x52_0000 ^ (b * 31 + v) as u64);
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        for (name, params) in all_cases(b, v) {
            let sampled = cpu.sample(h, w, &params).unwrap();
            for (k, tokens) in token_sets(&sampled, v, &params, 3).iter().enumerate() {
                let want = cpu.score(h, w, &params, tokens).unwrap();
                for entry in gpu.fused_variants() {
                    if !entry.supports_vocab(v as u32) {
                        continue;
                    }
                    gpu.set_fused_variant(Some(entry)).unwrap();
                    let got = gpu.score(h, w, &params, tokens).unwrap();
                    assert_scores_close(&format!("{name}, B={b} D={d} V={v}, tokens {k}, {entry}"), &got, &want);
                }
                gpu.set_fused_variant(None).unwrap();
            }
        }
        visible(&format!("GPU scores == CPU: B={b:>3} D={d} V={v:>5}, {} variants", gpu.fused_variants().len()));
    }
}

#[test]
fn scoring_the_sampled_token_gives_the_reported_log_probabilities_on_the_gpu() {
    // A head with inexact logits (random hidden states): the identity holds bit for bit because the
    // score and the sample's log-probability come from the same dot product and log-sum-exps.
    let test = "scoring_the_sampled_token_gives_the_reported_log_probabilities_on_the_gpu";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let (b, d, v) = (24, 256, 3000);
    let mut rng = TestRng::new(0x52_5C0);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 3.0 / (d as f64).sqrt());
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    for (name, params) in all_cases(b, v) {
        let sampled = gpu.sample_scored(h, w, &params.clone().with_logprobs(LogProbs::ProcessedAndRaw)).unwrap();
        let scored = gpu.score(h, w, &params, &sampled.tokens).unwrap();
        assert_eq!(bits(&scored.logprobs), bits(sampled.logprobs.as_ref().unwrap()), "{name}: log-probabilities");
        assert_eq!(bits(&scored.raw_logprobs), bits(sampled.raw_logprobs.as_ref().unwrap()), "{name}: raw");
        assert_eq!(bits(&scored.logsumexp), bits(sampled.logsumexp.as_ref().unwrap()), "{name}: log-sum-exp");
        // Other tokens: a greedy row's is −∞ (not its argmax); the rows' log-sum-exps do not move.
        let others: Vec<u32> = sampled.tokens.iter().map(|&t| (t + 1) % v as u32).collect();
        let other = gpu.score(h, w, &params, &others).unwrap();
        assert_eq!(bits(&other.raw_logsumexp), bits(&scored.raw_logsumexp), "{name}");
        assert_eq!(bits(&other.logsumexp), bits(&scored.logsumexp), "{name}");
        if params.truncates(v) {
            // The kept sets' log-sum-exps, and each sample row's fallback flag as sampling's.
            let (want, got) = (sampled.truncation_fallback.as_ref(), gpu.sample_and_score(h, w, &params, &others));
            assert_eq!(got.unwrap().0.truncation_fallback.as_ref(), want, "{name}: fallback rows");
        }
        for r in 0..b {
            if params.temperatures.as_ref().is_some_and(|t| t[r] == 0.0) {
                assert_eq!(other.logprobs[r], f32::NEG_INFINITY, "{name}: greedy row {r}");
                assert_eq!(scored.logprobs[r], 0.0, "{name}: greedy row {r}");
            } else {
                assert!(other.logprobs[r] <= 0.0, "{name}: row {r}: {}", other.logprobs[r]);
            }
        }
    }
}

#[test]
fn sampling_and_scoring_in_one_pass_give_the_two_calls_results_on_the_gpu() {
    let test = "sampling_and_scoring_in_one_pass_give_the_two_calls_results_on_the_gpu";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let (b, d, v) = (12, 128, 2000);
    let mut rng = TestRng::new(0x52_5C2);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 3.0 / (d as f64).sqrt());
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let tokens: Vec<u32> = (0..b).map(|_| (rng.next_u64() % v as u64) as u32).collect();
    for (name, base) in all_cases(b, v) {
        for params in [
            base.clone(),
            base.clone().with_logprobs(LogProbs::Processed),
            base.clone().with_logprobs(LogProbs::ProcessedAndRaw),
            base.clone().with_samples_per_row(3).with_logprobs(LogProbs::Processed),
        ] {
            let at = format!("{name}, {:?}, n {}", params.logprobs, params.n);
            let (samples, scores) = gpu.sample_and_score(h, w, &params, &tokens).unwrap();
            let want = gpu.sample_scored(h, w, &params).unwrap();
            assert_eq!(samples.tokens, want.tokens, "{at}: tokens");
            assert_eq!(bits(&samples.scores), bits(&want.scores), "{at}: scores");
            assert_eq!(samples.truncation_fallback, want.truncation_fallback, "{at}: fallback rows");
            for (what, a, b) in [
                ("log-probabilities", &samples.logprobs, &want.logprobs),
                ("raw log-probabilities", &samples.raw_logprobs, &want.raw_logprobs),
                ("log-sum-exps", &samples.logsumexp, &want.logsumexp),
            ] {
                assert_eq!(a.as_deref().map(bits), b.as_deref().map(bits), "{at}: {what}");
            }
            let alone = gpu.score(h, w, &params, &tokens).unwrap();
            for (what, a, b) in [
                ("log-probabilities", &scores.logprobs, &alone.logprobs),
                ("raw log-probabilities", &scores.raw_logprobs, &alone.raw_logprobs),
                ("log-sum-exps", &scores.logsumexp, &alone.logsumexp),
                ("raw log-sum-exps", &scores.raw_logsumexp, &alone.raw_logsumexp),
            ] {
                assert_eq!(bits(a), bits(b), "{at}: the given tokens' {what}");
            }
        }
    }
}

#[test]
fn a_long_prefill_matches_an_independent_f64_reference() {
    // 4,096 rows in one call (memory O(rows): no [rows, V] buffer), exact logits, so the reference
    // is f64 arithmetic on the weight's entries: soft-cap, temperature, log-softmax.
    let test = "a_long_prefill_matches_an_independent_f64_reference";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let (b, d, v) = (4096, 128, 3000);
    let (hidden, weight) = exact_head(b, d, v, 1.5, 0x52_4096);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let temps: Vec<f32> = (0..b).map(|r| [0.5, 1.0, 1.7][r % 3]).collect();
    let params = SamplingParams::new(1.0, 1).with_temperatures(temps.clone()).with_softcap(3.0);
    let mut rng = TestRng::new(4);
    let tokens: Vec<u32> = (0..b).map(|_| (rng.next_u64() % v as u64) as u32).collect();
    let got = gpu.score(h, w, &params, &tokens).unwrap();
    let lse_of = |xs: &[f64]| {
        let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        m + xs.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
    };
    for r in 0..b {
        let y: Vec<f64> = (0..v).map(|i| weight[i * d + r % d].to_f64()).collect();
        let z: Vec<f64> = y.iter().map(|&x| 3.0 * (x / 3.0).tanh() / temps[r] as f64).collect();
        let (lse, raw_lse) = (lse_of(&z), lse_of(&y));
        let t = tokens[r] as usize;
        assert!((got.logprobs[r] as f64 - (z[t] - lse)).abs() < 1e-4, "row {r}: {} vs {}", got.logprobs[r], z[t] - lse);
        assert!((got.raw_logprobs[r] as f64 - (y[t] - raw_lse)).abs() < 1e-4, "row {r}: raw");
        assert!(((got.logsumexp[r] as f64 - lse) / lse).abs() < 1e-5, "row {r}: lse {} vs {lse}", got.logsumexp[r]);
        assert!(((got.raw_logsumexp[r] as f64 - raw_lse) / raw_lse).abs() < 1e-5, "row {r}: raw lse");
    }
    visible(&format!("GPU scores of a {b}-row prefill == the f64 reference (V={v})"));
}

#[test]
fn bad_input_is_a_typed_error_and_device_tokens_past_v_score_nan() {
    let test = "bad_input_is_a_typed_error_and_device_tokens_past_v_score_nan";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let (b, d, v) = (3, 64, 100);
    let (hidden, weight) = (vec![bf16::ONE; b * d], vec![bf16::ZERO; v * d]);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let p = SamplingParams::new(1.0, 0);
    assert!(matches!(gpu.score(h, w, &p, &[0, 1]), Err(Error::LengthMismatch { expected: 3, actual: 2, .. })));
    assert!(matches!(gpu.score(h, w, &p, &[0, 100, 1]), Err(Error::TokenOutOfRange { row: 1, token: 100, v: 100 })));
    assert!(matches!(gpu.score(h, w, &SamplingParams::new(-1.0, 0), &[0; 3]), Err(Error::InvalidTemperature(_))));
    // Top-k 5 of uniform rows keeps them whole (the k-th value's ties are kept), as on the CPU; of
    // rows with logits −i/16 (exact), tokens 0 … 4.
    let k5 = p.clone().with_top_k(vec![5; b]);
    let s = gpu.score(h, w, &k5, &[4, 5, 0]).unwrap();
    assert_scores_close("uniform rows, top-k 5", &s, &CpuBackend::new().score(h, w, &k5, &[4, 5, 0]).unwrap());
    assert!(s.logprobs.iter().all(|&x| (x - 0.01f32.ln()).abs() < 1e-5), "{:?}", s.logprobs);
    let mut sloped = weight.clone();
    for i in 0..v {
        sloped[i * d] = bf16::from_f32(-(i as f32) / 16.0);
    }
    let s = gpu.score(h, Matrix::new(&sloped, v, d), &k5, &[4, 5, 0]).unwrap();
    let lse5 = (0..5).map(|i| (-(i as f64) / 16.0).exp()).sum::<f64>().ln();
    assert!((s.logprobs[0] as f64 - (-0.25 - lse5)).abs() < 1e-5 && s.logprobs[1] == f32::NEG_INFINITY, "{s:?}");
    assert!((s.logsumexp[2] as f64 - lse5).abs() < 1e-5, "{s:?}");
    // Uniform rows: ln(1/100) for every token.
    let s = gpu.score(h, w, &p, &[0, 50, 99]).unwrap();
    assert!(s.logprobs.iter().all(|&x| (x - 0.01f32.ln()).abs() < 1e-5), "{:?}", s.logprobs);
    // A row with nothing allowed is sampling's error.
    let none = flashsampling::controls::TokenMask { words: vec![0; b * v.div_ceil(32)], words_per_row: v.div_ceil(32) };
    assert!(matches!(gpu.score(h, w, &p.clone().with_allowed(none), &[0; 3]), Err(Error::AllLogitsNegInfinite { .. })));
    // The device API: wrong lengths are typed errors; tokens at or past V (not checked on the host)
    // score NaN and are not read (memcheck runs this test).
    let s = gpu.stream();
    let (hd, wd) = (s.clone_htod(&hidden).unwrap(), s.clone_htod(&weight).unwrap());
    let (hm, wm) =
        (DeviceMatrix { data: hd.as_view(), rows: b, cols: d }, DeviceMatrix { data: wd.as_view(), rows: v, cols: d });
    let mut out = gpu.alloc_samples(b, v).unwrap();
    let mut buf = s.alloc_zeros::<f32>(4 * b).unwrap();
    let short = s.clone_htod(&[0u32, 1]).unwrap();
    let tokens = s.clone_htod(&[7u32, 100, u32::MAX]).unwrap();
    {
        // Truncating: the same NaN for the tokens past V (the step and the fallback do not read them).
        let mut scores = ScoreOutputs::rows_of(buf.as_view_mut(), b).unwrap();
        let top_p = p.clone().with_top_p(vec![0.5; b]);
        gpu.score_device(&hm, &wm, &top_p, &tokens.as_view(), None, &mut out, &mut scores).unwrap();
    }
    let all = s.clone_dtoh(&buf).unwrap();
    assert!(all[1].is_nan() && all[2].is_nan() && all[b + 1].is_nan() && all[b + 2].is_nan(), "{all:?}");
    assert!((all[0] - 0.01f32.ln()).abs() < 1e-5, "uniform rows, top-p 0.5 keeps them whole (ties): {all:?}");
    {
        // Top log-probabilities: the ranks of tokens past V are 0; their outputs are the caller's, and
        // a call that asks them without them (or gives them unasked) is a typed error.
        let (mut tt, mut tl, mut ranks) = (
            s.alloc_zeros::<u32>(2 * b).unwrap(),
            s.alloc_zeros::<f32>(2 * b).unwrap(),
            s.alloc_zeros::<u32>(b).unwrap(),
        );
        let top2 = p.clone().with_top_logprobs(2, false);
        let mut scores = ScoreOutputs::rows_of(buf.as_view_mut(), b).unwrap();
        let e = gpu.score_device(&hm, &wm, &top2, &tokens.as_view(), None, &mut out, &mut scores).unwrap_err();
        assert!(matches!(e, Error::OutputMismatch { asked: true, .. }), "{e:?}");
        let top = ScoreTop { tokens: tt.as_view_mut(), logprobs: tl.as_view_mut(), ranks: ranks.as_view_mut() };
        let mut scores = scores.with_top(top);
        let e = gpu.score_device(&hm, &wm, &p, &tokens.as_view(), None, &mut out, &mut scores).unwrap_err();
        assert!(matches!(e, Error::OutputMismatch { asked: false, .. }), "{e:?}");
        let e = gpu.score_device(
            &hm,
            &wm,
            &p.clone().with_top_logprobs(3, false),
            &tokens.as_view(),
            None,
            &mut out,
            &mut scores,
        );
        assert!(matches!(e, Err(Error::LengthMismatch { expected: 9, actual: 6, .. })), "{e:?}");
        gpu.score_device(&hm, &wm, &top2, &tokens.as_view(), None, &mut out, &mut scores).unwrap();
        // Uniform rows: token 7 comes after the 7 tokens below it; tokens 0 and 1 head the lists.
        assert_eq!(s.clone_dtoh(&ranks).unwrap(), [8, 0, 0]);
        assert_eq!(s.clone_dtoh(&tt).unwrap(), [0, 1, 0, 1, 0, 1]);
    }
    {
        // A buffer that is not [4, B] is a typed error.
        let e = ScoreOutputs::rows_of(buf.slice_mut(..4 * b - 1), b).unwrap_err();
        assert!(matches!(e, Error::LengthMismatch { expected: 12, actual: 11, .. }), "{e:?}");
        let mut scores = ScoreOutputs::rows_of(buf.as_view_mut(), b).unwrap();
        let e = gpu.score_device(&hm, &wm, &p, &short.as_view(), None, &mut out, &mut scores).unwrap_err();
        assert!(matches!(e, Error::LengthMismatch { expected: 3, actual: 2, .. }), "{e:?}");
        // Inside a CUDA-graph capture: refused before anything is taken or enqueued (the capture
        // stays valid, even with cudarc's event tracking on).
        let cs = gpu.context().new_stream().unwrap();
        let on = gpu.on_stream(cs.clone()).unwrap();
        cs.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
        let e = on.score_device(&hm, &wm, &p, &tokens.as_view(), None, &mut out, &mut scores).unwrap_err();
        let status = cs.capture_status().unwrap();
        let graph = cs.end_capture(CUgraphInstantiate_flags(0));
        assert!(matches!(e, Error::Capture { .. }), "{e:?}");
        assert_eq!(status, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE, "the refusal broke the capture");
        graph.expect("an empty capture ends cleanly");
        gpu.score_device(&hm, &wm, &p, &tokens.as_view(), None, &mut out, &mut scores).unwrap();
    }
    {
        let mut small = s.alloc_zeros::<f32>(2).unwrap();
        let mut big = s.alloc_zeros::<f32>(3 * b).unwrap();
        let mut views = big.as_view_mut();
        let (lp, mut rest) = views.split_at_mut(b);
        let (raw, lse) = rest.split_at_mut(b);
        let mut short_out = ScoreOutputs {
            logprobs: lp,
            raw_logprobs: raw,
            logsumexp: lse,
            raw_logsumexp: small.as_view_mut(),
            top: None,
        };
        let e = gpu.score_device(&hm, &wm, &p, &tokens.as_view(), None, &mut out, &mut short_out).unwrap_err();
        assert!(matches!(e, Error::LengthMismatch { expected: 3, actual: 2, .. }), "{e:?}");
    }
    // The scoring call leaves no results in `out`.
    assert_eq!(out.tokens().len(), 0);
    let all = s.clone_dtoh(&buf).unwrap();
    let (lp, raw) = (&all[..b], &all[b..2 * b]);
    assert!((lp[0] - 0.01f32.ln()).abs() < 1e-5 && (raw[0] - 0.01f32.ln()).abs() < 1e-5, "{lp:?}");
    assert!(lp[1].is_nan() && lp[2].is_nan() && raw[1].is_nan() && raw[2].is_nan(), "{lp:?} {raw:?}");
    for lse in [&all[2 * b..3 * b], &all[3 * b..]] {
        assert!(lse.iter().all(|&x| (x - 100f32.ln()).abs() < 1e-5), "{lse:?}");
    }
}

#[test]
fn top_logprobs_and_ranks_of_given_tokens_match_the_cpu() {
    let test = "top_logprobs_and_ranks_of_given_tokens_match_the_cpu";
    let Some(mut gpu) = gpu_or_skip(test) else { return };
    let cpu = CpuBackend::new();
    for &(b, d, v) in &[(5usize, 64usize, 1000usize), (37, 64, 3001), (70, 128, 5008)] {
        let (hidden, weight) = exact_head(b, d, v, 1.5, 0x52_7000 ^ (b * 31 + v) as u64);
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        // Every control with processed and raw lists: ranks from the truncation step's sorted prefix
        // where it decides them, else from the fallback's count (greedy rows' other tokens, tokens
        // below the prefix, raw lists of a call that changes logits).
        let cases = all_cases(b, v).into_iter().flat_map(|(name, params)| {
            [
                (name, "processed top 20", params.clone().with_top_logprobs(20, false)),
                (name, "raw top 7", params.with_top_logprobs(7, true)),
            ]
        });
        let (mut calls, mut ranked) = (0, 0);
        for (name, top, params) in cases {
            let sampled = cpu.sample(h, w, &params).unwrap();
            for (k, tokens) in token_sets(&sampled, v, &params, 5).iter().enumerate() {
                let want = cpu.score(h, w, &params, tokens).unwrap();
                // Every fused variant on the smallest head (they write the lists the step reads).
                let mut variants = if b == 5 { gpu.fused_variants() } else { vec![] };
                variants.retain(|e| e.supports_vocab(v as u32));
                for entry in variants.iter().map(Some).chain([None]) {
                    gpu.set_fused_variant(entry.copied()).unwrap();
                    let got = gpu.score(h, w, &params, tokens).unwrap();
                    let at = format!("{name}, {top}, B={b} D={d} V={v}, tokens {k}, {entry:?}");
                    assert_scores_close(&at, &got, &want);
                    calls += 1;
                }
                ranked += want.ranks.as_ref().map_or(0, |r| r.iter().filter(|&&r| r > 20).count());
            }
        }
        gpu.set_fused_variant(None).unwrap();
        visible(&format!("GPU top lists and ranks == CPU: B={b:>3} D={d} V={v:>5}, {calls} calls"));
        assert!(ranked > 0, "no given token ranked past the lists");
    }
    // `sample_and_score`'s samples carry the lists too: those of the sampling call.
    let (b, d, v) = (12, 64, 2000);
    let (hidden, weight) = exact_head(b, d, v, 1.5, 0x52_7001);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    for (name, params) in all_cases(b, v) {
        let params = params.with_top_logprobs(4, false);
        let tokens: Vec<u32> = (0..b as u32).map(|r| 97 * r % v as u32).collect();
        let (samples, scores) = gpu.sample_and_score(h, w, &params, &tokens).unwrap();
        let want = gpu.sample_scored(h, w, &params).unwrap();
        assert_eq!(samples.tokens, want.tokens, "{name}");
        assert_eq!(samples.top_logprobs, want.top_logprobs, "{name}: the samples' top lists");
        assert_eq!(scores.top_logprobs, want.top_logprobs, "{name}: the scores' top lists");
    }
}

#[test]
fn truncating_scores_match_the_cpu_where_rows_take_the_fallback_and_over_split_launches() {
    let test = "truncating_scores_match_the_cpu_where_rows_take_the_fallback_and_over_split_launches";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let cpu = CpuBackend::new();
    // Nearly flat and tied rows (`fallback_rows`): the exact fallback scores most of them.
    for (what, hidden, weight, params) in fallback_rows() {
        let (b, v) = (hidden.len() / 8, weight.len() / 8);
        let (h, w) = (Matrix::new(&hidden, b, 8), Matrix::new(&weight, v, 8));
        let params = params.with_min_p(vec![0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0]);
        let sampled = cpu.sample(h, w, &params).unwrap();
        let (mut fell, mut boundary) = (0, 0);
        for (k, tokens) in token_sets(&sampled, v, &params, 8).iter().enumerate() {
            // Every other token set with top log-probabilities and ranks (the fallback's, on these
            // rows), processed and raw by turns; they change no sample.
            let params = match k % 4 {
                1 => params.clone().with_top_logprobs(5, false),
                3 => params.clone().with_top_logprobs(3, true),
                _ => params.clone(),
            };
            let (samples, got) = gpu.sample_and_score(h, w, &params, tokens).unwrap();
            fell += samples.truncation_fallback.unwrap().iter().filter(|&&f| f).count();
            let want = cpu.score(h, w, &params, tokens).unwrap();
            for (r, (&g, &c)) in samples.tokens.iter().zip(&sampled).enumerate() {
                // The kept sets are the same on both backends but at a top-p boundary within rounding
                // (the fallback sums fixed point, the CPU f64: `flat_rows_take_the_exact_fallback`
                // allows such rows too); a row whose samples differ is such a row, one at most.
                if g != c {
                    boundary += 1;
                    continue;
                }
                let row = |s: &Scores| Scores {
                    logprobs: vec![s.logprobs[r]],
                    raw_logprobs: vec![s.raw_logprobs[r]],
                    logsumexp: vec![s.logsumexp[r]],
                    raw_logsumexp: vec![s.raw_logsumexp[r]],
                    top_logprobs: s.top_logprobs.as_ref().map(|t| vec![t[r].clone()]),
                    ranks: s.ranks.as_ref().map(|k| vec![k[r]]),
                };
                assert_scores_close(&format!("{what} rows, tokens {k}, row {r}"), &row(&got), &row(&want));
            }
        }
        assert!(boundary <= 4, "{what}: {boundary} row scorings (of 4 token sets) at a differing boundary");
        assert!(fell > 0, "{what}: no row took the fallback");
        visible(&format!("GPU truncating scores == CPU, {what} rows: {fell} row scorings took the fallback"));
    }
    // More rows than one launch holds at V = 151,936 (`truncated_score_rows`: 441): two launches, each
    // row with its own key and controls; the same scores as the CPU's.
    let (b, d, v) = (450usize, 64usize, 151_936usize);
    let (hidden, weight) = exact_head(b, d, v, 1.5, 0x52_7FFF);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let params = SamplingParams::new(0.8, 17)
        .with_temperatures(mixed_temperatures(b))
        .with_top_p((0..b).map(|r| [0.9, 1.0, 0.6][r % 3]).collect())
        .with_top_k((0..b).map(|r| [0, 50, 7, 0][r % 4]).collect());
    let sampled = cpu.sample(h, w, &params).unwrap();
    let mut rng = TestRng::new(9);
    let tokens: Vec<u32> =
        sampled.iter().map(|&t| if rng.next_u64() % 2 == 0 { t } else { (rng.next_u64() % v as u64) as u32 }).collect();
    let (samples, got) = gpu.sample_and_score(h, w, &params, &tokens).unwrap();
    assert_eq!(samples.tokens, sampled, "the samples of both launches");
    assert_scores_close("two launches", &got, &cpu.score(h, w, &params, &tokens).unwrap());
    visible(&format!("GPU truncating scores over {b} rows (two launches, V={v}) == CPU"));
}

/// The exact log-sum-exp path on one GPU (`SamplingParams::exact_logsumexp`; finding 55): a call's
/// logits materialized by `fallback_logits`, sampled and scored by the GEMM-fed kernels, each row's
/// log-sum-exps summed in integer bins (`exact_mass_rows`). Against the CPU backend on every control
/// (`n` samples a row included; top-k / top-p / min-p and top log-probabilities through the exact
/// fallback), scoring the sampled token bit for bit, log-probabilities that do not depend on the batch a row
/// is in, bounded launches for long scoring calls, and the default path within 1e-5 of it. The same calls
/// over vocab shards: `tests/tp.rs`. (A module of this file, not a test binary of its own: CI links fewer.)
mod exact {
    use super::*;

    /// The controls, exact: plain, per-row temperatures (greedy and T = 1e-3 rows), soft-cap, a mask,
    /// sparse adjustments, `n = 3` samples a row, and all of them.
    fn cases(b: usize, v: usize) -> Vec<(&'static str, SamplingParams)> {
        let base = SamplingParams::new(0.8, 0xE4).with_streams((0..b as u64).map(|r| 7 * r + 3).collect());
        let everything = base
            .clone()
            .with_temperatures(mixed_temperatures(b))
            .with_softcap(2.0)
            .with_allowed(random_mask(b, v, 0.5, 0xE5))
            .with_adjustments(random_adjustments(b, v, 20, 0xE6));
        [
            ("plain", base.clone()),
            ("temperatures", base.clone().with_temperatures(mixed_temperatures(b))),
            ("softcap", base.clone().with_softcap(1.5)),
            ("mask", base.clone().with_allowed(random_mask(b, v, 0.3, 0xE7))),
            ("adjustments", base.clone().with_adjustments(random_adjustments(b, v, 6, 0xE8))),
            ("n = 3 samples a row", base.with_samples_per_row(3).with_temperatures(mixed_temperatures(b))),
            ("everything", everything),
        ]
        .into_iter()
        .map(|(name, p)| (name, p.with_exact_logsumexp(true)))
        .collect()
    }

    #[test]
    fn the_exact_path_matches_the_cpu_and_scores_what_it_samples_bit_for_bit() {
        let test = "the_exact_path_matches_the_cpu_and_scores_what_it_samples_bit_for_bit";
        let Some(gpu) = gpu_or_skip(test) else { return };
        let cpu = CpuBackend::new();
        // V not a multiple of 4 (a partial last group) and of 128 (a partial last tile).
        for &(b, d, v) in &[(5usize, 64usize, 1001usize), (37, 128, 3001), (150, 64, 5008)] {
            let (hidden, weight) = exact_head(b, d, v, 1.5, 0xE4_0000 ^ (b * 31 + v) as u64);
            let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
            for (name, params) in cases(b, v) {
                let at = format!("{name}, B={b} D={d} V={v}");
                let lp = params.clone().with_logprobs(LogProbs::ProcessedAndRaw);
                let (g, c) = (gpu.sample_scored(h, w, &lp).unwrap(), cpu.sample_scored(h, w, &lp).unwrap());
                assert_close_at_f32_resolution(&at, &g, &c, params.n as usize);
                // Each row's first sample, scored: its log-probabilities bit for bit.
                let n = params.n as usize;
                let first = |x: &[f32]| x.iter().step_by(n).copied().collect::<Vec<f32>>();
                let tokens: Vec<u32> = g.tokens.iter().step_by(n).copied().collect();
                let scored = gpu.score(h, w, &params, &tokens).unwrap();
                assert_eq!(
                    bits(&scored.logprobs),
                    bits(&first(g.logprobs.as_ref().unwrap())),
                    "{at}: scoring the samples"
                );
                assert_eq!(bits(&scored.raw_logprobs), bits(&first(g.raw_logprobs.as_ref().unwrap())), "{at}: raw");
                assert_eq!(bits(&scored.logsumexp), bits(g.logsumexp.as_ref().unwrap()), "{at}: log-sum-exps");
                let others: Vec<u32> = tokens.iter().map(|&t| (t + 1) % v as u32).collect();
                assert_scores_close(
                    &at,
                    &gpu.score(h, w, &params, &others).unwrap(),
                    &cpu.score(h, w, &params, &others).unwrap(),
                );
            }
            // A truncating call that reads no log-sum-exp keeps the fused pass (the option has no effect;
            // truncating calls that read one: `exact_truncating_calls_…`).
            let truncating = SamplingParams::new(0.8, 1).with_top_k(vec![5; b]).with_exact_logsumexp(true);
            let plain = truncating.clone().with_exact_logsumexp(false);
            assert_eq!(gpu.sample(h, w, &truncating).unwrap(), gpu.sample(h, w, &plain).unwrap(), "top-k alone");
            visible(&format!("exact path == CPU, scores its samples bit for bit: B={b:>3} D={d} V={v:>5}"));
        }
    }

    /// `params` with each request's truncation by `r % 3`: none (top-k 0, top-p 1, min-p 0), top-k
    /// 20 with top-p 0.9, or top-p 0.7 with min-p 0.05.
    fn truncated(params: SamplingParams, rows: std::ops::Range<usize>) -> SamplingParams {
        params
            .with_top_k(rows.clone().map(|r| [0, 20, 0][r % 3]).collect())
            .with_top_p(rows.clone().map(|r| [1.0, 0.9, 0.7][r % 3]).collect())
            .with_min_p(rows.map(|r| [0.0, 0.0, 0.05][r % 3]).collect())
    }

    /// `x`'s entries of request `r` (of `requests`): its `n` sample rows', or its one.
    fn of_request(x: &[f32], r: usize, requests: usize) -> Vec<u32> {
        let per = x.len() / requests;
        bits(&x[r * per..(r + 1) * per])
    }

    #[test]
    fn exact_truncating_calls_match_the_cpu_and_keep_untruncated_rows_bit_for_bit() {
        // The exact path's truncating calls (top-k / top-p / min-p, top log-probabilities): every row
        // through `fallback_sample_exact` (the raw logits materialized, the kept set found exactly, its
        // log-sum-exp and the raw one summed in integer bins). Against the CPU on every control; a
        // request that does not truncate has the bits of the same call without truncation (the exact
        // path's GEMM-fed kernels: the same groups summed, the same dot product for its token's logit);
        // scoring the samples gives their log-probabilities bit for bit; every row is the fallback's.
        let test = "exact_truncating_calls_match_the_cpu_and_keep_untruncated_rows_bit_for_bit";
        let Some(gpu) = gpu_or_skip(test) else { return };
        let cpu = CpuBackend::new();
        for &(b, d, v) in &[(6usize, 64usize, 1001usize), (37, 128, 3001)] {
            let (hidden, weight) = exact_head(b, d, v, 1.5, 0xE5_0000 ^ (b * 31 + v) as u64);
            let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
            for (name, params) in cases(b, v) {
                let at = format!("{name}, truncating, B={b} D={d} V={v}");
                let n = params.n as usize;
                let lp = params.clone().with_logprobs(LogProbs::ProcessedAndRaw);
                let t = truncated(lp.clone(), 0..b);
                let (g, c) = (gpu.sample_scored(h, w, &t).unwrap(), cpu.sample_scored(h, w, &t).unwrap());
                assert_close_at_f32_resolution(&at, &g, &c, n);
                assert_eq!(g.truncation_fallback, Some(vec![true; b * n]), "{at}: every row the fallback's");
                // The requests without truncation: the bits of the call without it.
                let u = gpu.sample_scored(h, w, &lp).unwrap();
                for r in (0..b).filter(|r| r % 3 == 0) {
                    assert_eq!(g.tokens[r * n..(r + 1) * n], u.tokens[r * n..(r + 1) * n], "{at}: request {r}");
                    for (what, x, y) in [
                        ("scores", Some(&g.scores), Some(&u.scores)),
                        ("log-probabilities", g.logprobs.as_ref(), u.logprobs.as_ref()),
                        ("raw log-probabilities", g.raw_logprobs.as_ref(), u.raw_logprobs.as_ref()),
                        ("log-sum-exps", g.logsumexp.as_ref(), u.logsumexp.as_ref()),
                    ] {
                        let (x, y) = (x.unwrap(), y.unwrap());
                        assert_eq!(of_request(x, r, b), of_request(y, r, b), "{at}: request {r}'s {what}");
                    }
                }
                // Each request's first sample, scored under the same controls: its log-probabilities
                // bit for bit.
                let first = |x: &[f32]| x.iter().step_by(n).copied().collect::<Vec<f32>>();
                let tokens: Vec<u32> = g.tokens.iter().step_by(n).copied().collect();
                let scored = gpu.score(h, w, &truncated(params.clone(), 0..b), &tokens).unwrap();
                assert_eq!(bits(&scored.logprobs), bits(&first(g.logprobs.as_ref().unwrap())), "{at}: scoring");
                assert_eq!(bits(&scored.raw_logprobs), bits(&first(g.raw_logprobs.as_ref().unwrap())), "{at}: raw");
                let others: Vec<u32> = tokens.iter().map(|&t| (t + 1) % v as u32).collect();
                let p = truncated(params.clone(), 0..b);
                assert_scores_close(
                    &at,
                    &gpu.score(h, w, &p, &others).unwrap(),
                    &cpu.score(h, w, &p, &others).unwrap(),
                );
                // Top log-probabilities, processed and raw (no log-probabilities: the call still reads
                // the log-sum-exps).
                for raw in [false, true] {
                    let p = truncated(params.clone(), 0..b).with_top_logprobs(4, raw);
                    let (g, c) = (gpu.sample_scored(h, w, &p).unwrap(), cpu.sample_scored(h, w, &p).unwrap());
                    assert_eq!(g.tokens, c.tokens, "{at}: tokens with top log-probabilities (raw {raw})");
                    let (gt, ct) = (g.top_logprobs.unwrap(), c.top_logprobs.unwrap());
                    for (r, (x, y)) in gt.iter().zip(&ct).enumerate() {
                        let ids = |l: &Vec<(u32, f32)>| l.iter().map(|e| e.0).collect::<Vec<_>>();
                        assert_eq!(ids(x), ids(y), "{at}: request {r}'s top tokens (raw {raw})");
                        for (&(_, a), &(_, e)) in x.iter().zip(y) {
                            let ok = if e.is_finite() { (a - e).abs() <= 1e-4 + 5e-7 * e.abs() } else { a == e };
                            assert!(ok, "{at}: request {r}'s top log-probabilities (raw {raw}): GPU {a}, CPU {e}");
                        }
                    }
                }
            }
            visible(&format!("exact truncating calls == CPU, untruncated rows bit for bit: B={b:>3} D={d} V={v:>5}"));
        }
        // A row's outputs are its own: alone or in a batch of 40, the same bits.
        let (b, d, v) = (40usize, 256usize, 30_011usize);
        let mut rng = TestRng::new(0xE5_BA7C);
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, 3.0 / (d as f64).sqrt());
        let temps = mixed_temperatures(b);
        let params = |rows: std::ops::Range<usize>| {
            let p = SamplingParams::new(1.0, 0xE5)
                .with_streams(rows.clone().map(|r| r as u64).collect())
                .with_temperatures(temps[rows.clone()].to_vec())
                .with_logprobs(LogProbs::ProcessedAndRaw)
                .with_exact_logsumexp(true);
            truncated(p, rows)
        };
        let w = Matrix::new(&weight, v, d);
        let all = gpu.sample_scored(Matrix::new(&hidden, b, d), w, &params(0..b)).unwrap();
        for r in [0usize, 1, 2, 17, 39] {
            let one = gpu.sample_scored(Matrix::new(&hidden[r * d..(r + 1) * d], 1, d), w, &params(r..r + 1)).unwrap();
            assert_eq!(one.tokens[0], all.tokens[r], "row {r}'s token");
            for (what, x, y) in [
                ("log-probability", one.logprobs.as_ref(), all.logprobs.as_ref()),
                ("raw log-probability", one.raw_logprobs.as_ref(), all.raw_logprobs.as_ref()),
                ("log-sum-exp", one.logsumexp.as_ref(), all.logsumexp.as_ref()),
            ] {
                let (x, y) = (x.unwrap()[0], y.unwrap()[r]);
                assert_eq!(x.to_bits(), y.to_bits(), "row {r}'s {what}: alone {x}, in the batch {y}");
            }
        }
        visible("exact truncating calls: a row's bits alone and in a batch of 40");
    }

    #[test]
    fn the_exact_paths_take_nan_and_infinite_logits_as_the_cpu_does() {
        // NaN, ±∞ and near-overflow logits on the exact path, with and without truncation: the same tokens,
        // scores and errors as the CPU, log-probabilities and log-sum-exps equal where not finite (a `+∞`
        // logit holds all the mass: log-probability 0, log-sum-exp `+∞`) and close where finite.
        let test = "the_exact_paths_take_nan_and_infinite_logits_as_the_cpu_does";
        let Some(gpu) = gpu_or_skip(test) else { return };
        let cpu = CpuBackend::new();
        let inf = f32::INFINITY;
        let exact =
            |t: f32| SamplingParams::new(t, 9).with_logprobs(LogProbs::ProcessedAndRaw).with_exact_logsumexp(true);
        let mut wrong = Vec::new();
        let mut same = |at: &str, what: &str, a: f32, e: f32| {
            let ok = a.to_bits() == e.to_bits()
                || (a.is_nan() && e.is_nan())
                || (e.is_finite() && ((a - e) as f64).abs() <= 1e-4 + 1e-5 * (e as f64).abs());
            if !ok {
                wrong.push(format!("{at}: {what} GPU {a}, CPU {e}"));
            }
        };
        let cases: &[&[f32]] = &[
            &[3.0e38, inf, -inf, 1.0],
            &[1.0, inf, 2.0, inf],
            &[-inf, -3.0e38, -inf],
            &[2.0, 3.3e38, 3.0e38],
            &[1.0, 5.0, 3.0, -inf, 0.5],
            &[-inf, -inf, -inf],
        ];
        for &logits in cases {
            let mut padded = logits.to_vec();
            padded.resize(300, -inf);
            for t in [1.0f32, 0.7, 0.0] {
                for top_k in [0u32, 2] {
                    let b = 5;
                    let (hidden, weight) = crafted_lm_head(padded.len(), b, 64, |i| padded[i]);
                    let (h, w) = (Matrix::new(&hidden, b, 64), Matrix::new(&weight, padded.len(), 64));
                    let params = exact(t).with_top_k(vec![top_k; b]);
                    let at = format!("{logits:?} T={t} top-k {top_k}");
                    // Where every finite logit overflows f32 at z / T, the processed values are `−∞` or
                    // `+∞` on the GPU (a sampled token's processed log-probability `−∞ − (−∞)` is NaN)
                    // and finite on the CPU (f64): only the raw ones compare (finding 56's limits).
                    let overflows =
                        t > 0.0 && logits.iter().filter(|z| z.is_finite()).all(|&z| (z * (1.0 / t)).is_infinite());
                    match (gpu.sample_scored(h, w, &params), cpu.sample_scored(h, w, &params)) {
                        (Ok(g), Ok(c)) => {
                            assert_eq!(g.tokens, c.tokens, "{at}: tokens");
                            assert_eq!(bits(&g.scores), bits(&c.scores), "{at}: scores");
                            // The default path's values, for the report.
                            let d = gpu.sample_scored(h, w, &params.clone().with_exact_logsumexp(false)).unwrap();
                            for (what, x, y, z) in [
                                ("log-probabilities", &g.logprobs, &c.logprobs, &d.logprobs),
                                ("raw log-probabilities", &g.raw_logprobs, &c.raw_logprobs, &d.raw_logprobs),
                                ("log-sum-exps", &g.logsumexp, &c.logsumexp, &d.logsumexp),
                            ] {
                                let (x, y, z) = (x.as_ref().unwrap(), y.as_ref().unwrap(), z.as_ref().unwrap());
                                if overflows && !what.starts_with("raw") {
                                    continue;
                                }
                                for ((&a, &e), &f) in x.iter().zip(y).zip(z) {
                                    same(&format!("{at} (default path {f})"), what, a, e);
                                }
                            }
                        }
                        (g, c) => assert_eq!(g.map(|s| s.tokens), c.map(|s| s.tokens), "{at}"),
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{} values differ:\n{}", wrong.len(), wrong.join("\n"));
        // A NaN logit: the row has no token, on both paths (a typed error from the host API).
        let (b, d, v) = (4, 64, 3000);
        let mut rng = TestRng::new(0xE5_0A0);
        let hidden = rng.normal_bf16(b * d, 1.0);
        let mut weight = rng.normal_bf16(v * d, 0.1);
        weight[2500 * d + 3] = bf16::NAN;
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        for params in [exact(1.0), exact(1.0).with_top_p(vec![0.9; b]), exact(0.0).with_top_k(vec![5; b])] {
            assert_eq!(gpu.sample_scored(h, w, &params).unwrap_err(), Error::NanLogit { row: 0 });
        }
        visible("the exact paths: NaN and infinite logits as the CPU takes them");
    }

    #[test]
    fn exact_log_probabilities_do_not_depend_on_the_batch() {
        // A row's logits and exact log-sum-exps are functions of the row alone: scored in a batch of 40
        // or alone, its outputs are the same bits (per-row streams and temperatures keep its key and
        // controls). The default path's sums follow the blocks' vocab ranges, which follow the batch.
        let test = "exact_log_probabilities_do_not_depend_on_the_batch";
        let Some(gpu) = gpu_or_skip(test) else { return };
        let (b, d, v) = (40usize, 256usize, 30_011usize);
        let mut rng = TestRng::new(0xE4_BA7C);
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, 3.0 / (d as f64).sqrt());
        let temps = mixed_temperatures(b);
        let params = |rows: std::ops::Range<usize>| {
            SamplingParams::new(1.0, 0xE4)
                .with_streams(rows.clone().map(|r| r as u64).collect())
                .with_temperatures(temps[rows].to_vec())
                .with_exact_logsumexp(true)
        };
        let (w, tokens) = (Matrix::new(&weight, v, d), (0..b).map(|r| (r * 7919 % v) as u32).collect::<Vec<_>>());
        let all = gpu.score(Matrix::new(&hidden, b, d), w, &params(0..b), &tokens).unwrap();
        for r in [0usize, 1, 17, 39] {
            let one =
                gpu.score(Matrix::new(&hidden[r * d..(r + 1) * d], 1, d), w, &params(r..r + 1), &tokens[r..r + 1]);
            let one = one.unwrap();
            for (what, x, y) in [
                ("log-probability", one.logprobs[0], all.logprobs[r]),
                ("raw log-probability", one.raw_logprobs[0], all.raw_logprobs[r]),
                ("log-sum-exp", one.logsumexp[0], all.logsumexp[r]),
                ("raw log-sum-exp", one.raw_logsumexp[0], all.raw_logsumexp[r]),
            ] {
                assert_eq!(x.to_bits(), y.to_bits(), "row {r}'s {what}: alone {x}, in the batch {y}");
            }
        }
        // The default path's log-probabilities are within 1e-5 of the exact ones (+ 2 ulps of the
        // row's log-sum-exp, which at T = 1e-3 is in the thousands).
        let mut default = params(0..b);
        default.exact_logsumexp = false;
        let fused = gpu.score(Matrix::new(&hidden, b, d), w, &default, &tokens).unwrap();
        for (what, x, y) in
            [("log-probabilities", &fused.logprobs, &all.logprobs), ("log-sum-exps", &fused.logsumexp, &all.logsumexp)]
        {
            for (i, (&a, &e)) in x.iter().zip(y).enumerate() {
                let lse = all.logsumexp[i];
                if e.is_finite() {
                    let tol = 1e-5 + 2.5e-7 * (e.abs() + if lse.is_finite() { lse.abs() } else { 0.0 });
                    assert!((a - e).abs() <= tol, "{what}[{i}]: default {a}, exact {e}");
                } else {
                    assert_eq!(a.to_bits(), e.to_bits(), "{what}[{i}]");
                }
            }
        }
        visible("exact log-probabilities: the same bits alone and in a batch of 40");
    }

    #[test]
    fn a_long_exact_scoring_call_runs_in_bounded_launches_with_the_same_bits() {
        // 900 rows of a 151,936-token head: their logits would take 547 MB, past the 512 MiB a launch
        // materializes (883 rows), so the call runs as launches of 883 and 17 rows; every row's scores
        // are the bits it gets in a call of its own chunking (rows 870..900: one launch).
        let test = "a_long_exact_scoring_call_runs_in_bounded_launches_with_the_same_bits";
        let Some(gpu) = gpu_or_skip(test) else { return };
        let (b, d, v) = (900usize, 64usize, 151_936usize);
        let mut rng = TestRng::new(0xE4_10);
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, 3.0 / (d as f64).sqrt());
        let params = |rows: std::ops::Range<usize>| {
            SamplingParams::new(0.8, 0xE4).with_streams(rows.map(|r| r as u64).collect()).with_exact_logsumexp(true)
        };
        let tokens: Vec<u32> = (0..b).map(|r| (r * 104_729 % v) as u32).collect();
        let w = Matrix::new(&weight, v, d);
        let all = gpu.score(Matrix::new(&hidden, b, d), w, &params(0..b), &tokens).unwrap();
        let tail = gpu.score(Matrix::new(&hidden[870 * d..], b - 870, d), w, &params(870..b), &tokens[870..]).unwrap();
        for (what, x, y) in [
            ("log-probabilities", &all.logprobs, &tail.logprobs),
            ("raw log-probabilities", &all.raw_logprobs, &tail.raw_logprobs),
            ("log-sum-exps", &all.logsumexp, &tail.logsumexp),
        ] {
            assert_eq!(bits(&x[870..]), bits(y), "{what} of rows 870..900");
        }
        visible("a 900-row exact scoring call over V = 151,936: two launches, the bits of any other chunking");
    }

    /// GPU == CPU: tokens and scores bit for bit; log-probabilities within 1e-4 plus 4 ulps (5e-7
    /// relative) of their row's log-sum-exp, which at T = 1e-3 is in the thousands, where `z / T − lse`
    /// resolves 2.4e-4 (`assert_scores_close`'s rule); log-sum-exps within 1e-5 relative; NaN alike.
    fn assert_close_at_f32_resolution(at: &str, g: &flashsampling::Samples, c: &flashsampling::Samples, n: usize) {
        assert_eq!(g.tokens, c.tokens, "{at}: tokens");
        assert_eq!(bits(&g.scores), bits(&c.scores), "{at}: scores");
        let lse = c.logsumexp.as_ref().unwrap();
        for (name, x, y) in [("log-probabilities", &g.logprobs, &c.logprobs), ("raw", &g.raw_logprobs, &c.raw_logprobs)]
        {
            for (i, (&a, &e)) in x.as_ref().unwrap().iter().zip(y.as_ref().unwrap()).enumerate() {
                let l = lse[i / n];
                let tol = 1e-4 + 1e-6 * e.abs() as f64 + if l.is_finite() { 5e-7 * l.abs() as f64 } else { 0.0 };
                if e.is_nan() || e.is_infinite() {
                    assert_eq!(a.to_bits(), e.to_bits(), "{at}: {name}[{i}] GPU {a} CPU {e}");
                } else {
                    assert!(((a - e) as f64).abs() <= tol, "{at}: {name}[{i}] GPU {a} CPU {e} (tolerance {tol:e})");
                }
            }
        }
        for (i, (&a, &e)) in g.logsumexp.as_ref().unwrap().iter().zip(lse).enumerate() {
            if e.is_nan() {
                assert!(a.is_nan(), "{at}: log-sum-exp[{i}] GPU {a}, CPU NaN");
            } else {
                assert!(((a - e) as f64).abs() <= 1e-5 * (e as f64).abs(), "{at}: log-sum-exp[{i}] GPU {a} CPU {e}");
            }
        }
    }
}
