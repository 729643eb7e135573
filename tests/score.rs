//! Scoring given tokens (issue 52.1) on the CPU backend: the log-probabilities of a token the
//! caller names, under the definitions sampling uses. Scoring the token a call sampled gives that
//! call's log-probabilities bit for bit; against an independent f64 reference; typed errors.

mod common;

use common::*;
use flashsampling::params::LogProbs;
use flashsampling::{CpuBackend, Error, Matrix, SamplingParams};
use half::bf16;

/// The controls the sampled-token identity runs under: plain, per-row temperatures (greedy rows
/// too), soft-cap, mask, adjustments, and each truncation.
fn cases(b: usize, v: usize) -> Vec<(&'static str, SamplingParams)> {
    let base = SamplingParams::new(0.8, 11).with_streams((0..b as u64).collect());
    vec![
        ("plain", base.clone()),
        ("temperatures", base.clone().with_temperatures(mixed_temperatures(b))),
        ("softcap", base.clone().with_softcap(4.0)),
        ("mask", base.clone().with_allowed(random_mask(b, v, 0.3, 5))),
        ("adjustments", base.clone().with_adjustments(random_adjustments(b, v, 6, 7))),
        ("top-k", base.clone().with_top_k((0..b as u32).map(|r| [1, 5, 40, 0][r as usize % 4]).collect())),
        ("top-p + min-p", base.clone().with_top_p(vec![0.7; b]).with_min_p(vec![0.02; b])),
        ("top-n", base.clone().with_top_logprobs(5, false)),
        ("top-n raw + softcap", base.clone().with_softcap(4.0).with_top_logprobs(3, true)),
        (
            "top-k + greedy rows + mask + top-n",
            base.clone()
                .with_temperatures(mixed_temperatures(b))
                .with_top_k(vec![20; b])
                .with_allowed(random_mask(b, v, 0.5, 9))
                .with_top_logprobs(4, false),
        ),
        (
            "top-k + greedy rows + mask",
            base.with_temperatures(mixed_temperatures(b))
                .with_top_k(vec![20; b])
                .with_allowed(random_mask(b, v, 0.5, 9)),
        ),
    ]
}

#[test]
fn scoring_the_sampled_token_gives_the_reported_log_probabilities() {
    let (b, d, v) = (12, 64, 700);
    let mut rng = TestRng::new(0x52_5C0);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 0.3);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let cpu = CpuBackend::new();
    for (name, params) in cases(b, v) {
        let sampled = cpu.sample_scored(h, w, &params.clone().with_logprobs(LogProbs::ProcessedAndRaw)).unwrap();
        let scored = cpu.score(h, w, &params, &sampled.tokens).unwrap();
        assert_eq!(bits(&scored.logprobs), bits(sampled.logprobs.as_ref().unwrap()), "{name}: log-probabilities");
        assert_eq!(bits(&scored.raw_logprobs), bits(sampled.raw_logprobs.as_ref().unwrap()), "{name}: raw");
        assert_eq!(bits(&scored.logsumexp), bits(sampled.logsumexp.as_ref().unwrap()), "{name}: log-sum-exp");
        // With top log-probabilities: sampling's lists, bit for bit, and each sampled token's rank is
        // its place in its row's list when it is listed (a sampled token is kept: rank ≤ kept count).
        assert_eq!(scored.top_logprobs.is_some(), params.top_logprobs > 0, "{name}");
        assert_eq!(scored.ranks.is_some(), params.top_logprobs > 0, "{name}");
        if let (Some(top), Some(ranks)) = (&scored.top_logprobs, &scored.ranks) {
            let want = sampled.top_logprobs.as_ref().unwrap();
            for (r, (a, b)) in top.iter().zip(want).enumerate() {
                assert_eq!(a.len(), b.len(), "{name}: row {r}");
                for ((ta, la), (tb, lb)) in a.iter().zip(b) {
                    assert_eq!((ta, la.to_bits()), (tb, lb.to_bits()), "{name}: row {r}");
                }
                match a.iter().position(|&(t, _)| t == sampled.tokens[r]) {
                    Some(j) => assert_eq!(ranks[r] as usize, j + 1, "{name}: row {r}"),
                    None => assert!(ranks[r] as usize > a.len(), "{name}: row {r}: rank {} unlisted", ranks[r]),
                }
            }
        }
        // Another token of each row: a greedy row's is −∞ unless it is the argmax.
        let others: Vec<u32> = sampled.tokens.iter().map(|&t| (t + 1) % v as u32).collect();
        let other = cpu.score(h, w, &params, &others).unwrap();
        for r in 0..b {
            if params.temperatures.as_ref().is_some_and(|t| t[r] == 0.0) {
                assert_eq!(other.logprobs[r], f32::NEG_INFINITY, "{name}: greedy row {r}");
                assert!(other.logsumexp[r].is_nan(), "{name}: greedy row {r}");
            } else {
                assert!(other.logprobs[r] <= 0.0, "{name}: row {r}: {}", other.logprobs[r]);
            }
            assert_eq!(other.raw_logsumexp[r].to_bits(), scored.raw_logsumexp[r].to_bits(), "{name}: row {r}");
        }
    }
}

#[test]
fn sampling_and_scoring_in_one_pass_give_the_two_calls_results() {
    // Issue 52.1: `sample_and_score` reads the head once (n = 1) and returns, bit for bit, what
    // `sample_scored` and `score` return, for every control set, with and without log-probabilities;
    // n = 3 takes two passes and still agrees.
    let (b, d, v) = (12, 64, 700);
    let mut rng = TestRng::new(0x52_5C2);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 0.3);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let tokens: Vec<u32> = (0..b).map(|_| (rng.next_u64() % v as u64) as u32).collect();
    let cpu = CpuBackend::new();
    for (name, base) in cases(b, v) {
        for params in [
            base.clone(),
            base.clone().with_logprobs(LogProbs::Processed),
            base.clone().with_logprobs(LogProbs::ProcessedAndRaw),
            base.clone().with_samples_per_row(3).with_logprobs(LogProbs::Processed),
        ] {
            let at = format!("{name}, {:?}, n {}", params.logprobs, params.n);
            let (samples, scores) = cpu.sample_and_score(h, w, &params, &tokens).unwrap();
            let want = cpu.sample_scored(h, w, &params).unwrap();
            assert_eq!(samples.tokens, want.tokens, "{at}: tokens");
            assert_eq!(bits(&samples.scores), bits(&want.scores), "{at}: scores");
            for (what, a, b) in [
                ("log-probabilities", &samples.logprobs, &want.logprobs),
                ("raw log-probabilities", &samples.raw_logprobs, &want.raw_logprobs),
                ("log-sum-exps", &samples.logsumexp, &want.logsumexp),
            ] {
                assert_eq!(a.as_deref().map(bits), b.as_deref().map(bits), "{at}: {what}");
            }
            assert_eq!(samples.top_logprobs, want.top_logprobs, "{at}: top log-probabilities");
            let alone = cpu.score(h, w, &params, &tokens).unwrap();
            for (what, a, b) in [
                ("log-probabilities", &scores.logprobs, &alone.logprobs),
                ("raw log-probabilities", &scores.raw_logprobs, &alone.raw_logprobs),
                ("log-sum-exps", &scores.logsumexp, &alone.logsumexp),
                ("raw log-sum-exps", &scores.raw_logsumexp, &alone.raw_logsumexp),
            ] {
                assert_eq!(bits(a), bits(b), "{at}: the given tokens' {what}");
            }
            assert_eq!((&scores.top_logprobs, &scores.ranks), (&alone.top_logprobs, &alone.ranks), "{at}");
        }
    }
}

/// The f64 reference of row `r` of an exact-logit head (hidden row `r` = `e_{r mod d}`): its raw logits,
/// and its processed ones (soft-cap 3, the mask, top-`k`; not divided by T) with every removed token `−∞`.
fn reference_row(
    weight: &[bf16],
    (d, v): (usize, usize),
    r: usize,
    mask: &flashsampling::controls::TokenMask,
    k: usize,
) -> (Vec<f64>, Vec<f64>) {
    let y: Vec<f64> = (0..v).map(|i| weight[i * d + r % d].to_f64()).collect();
    let allowed = |i: usize| (mask.words[r * mask.words_per_row + i / 32] >> (i % 32)) & 1 == 1;
    let z: Vec<f64> = (0..v).map(|i| if allowed(i) { 3.0 * (y[i] / 3.0).tanh() } else { f64::NEG_INFINITY }).collect();
    let mut sorted: Vec<f64> = z.iter().copied().filter(|x| x.is_finite()).collect();
    sorted.sort_by(|a, b| b.partial_cmp(a).unwrap());
    let kth = if k > 0 && k < sorted.len() { sorted[k - 1] } else { f64::NEG_INFINITY };
    let kept = z.iter().map(|&x| if x >= kth { x } else { f64::NEG_INFINITY }).collect();
    (y, kept)
}

#[test]
fn scores_match_an_independent_f64_reference() {
    // Exact logits (hidden rows are unit vectors), so the reference is f64 arithmetic on them:
    // soft-cap, mask, temperature, top-k (an order-free truncation), then log-softmax.
    let (b, d, v) = (9, 16, 300);
    let (hidden, weight) = exact_head(b, d, v, 1.5, 0x52_5C1);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let mask = random_mask(b, v, 0.6, 3);
    let temps: Vec<f32> = (0..b).map(|r| [0.5, 1.0, 1.7][r % 3]).collect();
    let ks: Vec<u32> = (0..b as u32).map(|r| [0, 10, 60][r as usize % 3]).collect();
    let params = SamplingParams::new(1.0, 1)
        .with_temperatures(temps.clone())
        .with_softcap(3.0)
        .with_allowed(mask.clone())
        .with_top_k(ks.clone());
    let mut rng = TestRng::new(4);
    let tokens: Vec<u32> = (0..b).map(|_| (rng.next_u64() % v as u64) as u32).collect();
    let got = CpuBackend::new().score(h, w, &params, &tokens).unwrap();
    let reference = |r: usize| reference_row(&weight, (d, v), r, &mask, ks[r] as usize);
    for r in 0..b {
        let (y, kept) = reference(r);
        let t = temps[r] as f64;
        let kept: Vec<f64> = kept.iter().map(|&x| x / t).collect();
        let lse_of = |xs: &[f64]| {
            let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            m + xs.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
        };
        let (lse, raw_lse) = (lse_of(&kept), lse_of(&y));
        let want = kept[tokens[r] as usize] - lse;
        let lp = got.logprobs[r] as f64;
        if want == f64::NEG_INFINITY {
            assert_eq!(lp, f64::NEG_INFINITY, "row {r}: a removed token");
        } else {
            assert!((lp - want).abs() < 1e-4, "row {r}: {lp} vs {want}");
        }
        assert!(((got.logsumexp[r] as f64 - lse) / lse).abs() < 1e-5, "row {r}: lse {} vs {lse}", got.logsumexp[r]);
        assert!(((got.raw_logsumexp[r] as f64 - raw_lse) / raw_lse).abs() < 1e-5, "row {r}: raw lse");
        let raw_want = y[tokens[r] as usize] - raw_lse;
        assert!(
            (got.raw_logprobs[r] as f64 - raw_want).abs() < 1e-4,
            "row {r}: raw {} vs {raw_want}",
            got.raw_logprobs[r]
        );
    }
    // Some rows' tokens were removed (masked or past top-k) and some kept: both branches ran.
    assert!(got.logprobs.iter().any(|x| x.is_finite()) && got.logprobs.iter().any(|x| x.is_infinite()));
    // Top log-probabilities and ranks against the same reference: the order by processed logit
    // (ties: the lower id first; removed tokens last), the first 6 listed with their log-probabilities.
    let with_top = CpuBackend::new().score(h, w, &params.clone().with_top_logprobs(6, false), &tokens).unwrap();
    assert_eq!(bits(&with_top.logprobs), bits(&got.logprobs), "top log-probabilities change no log-probability");
    let (top, ranks) = (with_top.top_logprobs.unwrap(), with_top.ranks.unwrap());
    for r in 0..b {
        let (_, kept) = reference(r);
        let mut order: Vec<usize> = (0..v).collect();
        order.sort_by(|&a, &b| kept[b].partial_cmp(&kept[a]).unwrap().then(a.cmp(&b)));
        let t = tokens[r] as usize;
        assert_eq!(ranks[r] as usize, 1 + order.iter().position(|&i| i == t).unwrap(), "row {r}: rank");
        let listed: Vec<usize> = order.iter().copied().filter(|&i| kept[i].is_finite()).take(6).collect();
        assert_eq!(top[r].iter().map(|&(i, _)| i as usize).collect::<Vec<_>>(), listed, "row {r}: top tokens");
        let lse = {
            let xs: Vec<f64> = kept.iter().map(|x| x / temps[r] as f64).collect();
            let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            m + xs.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
        };
        for &(i, lp) in &top[r] {
            let want = kept[i as usize] / temps[r] as f64 - lse;
            assert!((lp as f64 - want).abs() < 1e-4, "row {r}: token {i}: {lp} vs {want}");
        }
    }
    // The random tokens rank past the list; each row's second listed token ranks 2.
    assert!(ranks.iter().all(|&x| x > 6), "{ranks:?}");
    let second: Vec<u32> = top.iter().map(|l| l[1].0).collect();
    let again = CpuBackend::new().score(h, w, &params.with_top_logprobs(6, false), &second).unwrap();
    assert_eq!(again.ranks.unwrap(), vec![2; b]);
    for (r, (lp, listed)) in again.logprobs.iter().zip(&top).enumerate() {
        assert_eq!(lp.to_bits(), listed[1].1.to_bits(), "row {r}: the listed log-probability");
    }
}

#[test]
fn bad_tokens_are_typed_errors() {
    let (b, d, v) = (3, 8, 10);
    let (hidden, weight) = (vec![bf16::ONE; b * d], vec![bf16::ZERO; v * d]);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let cpu = CpuBackend::new();
    let p = SamplingParams::new(1.0, 0);
    assert!(matches!(cpu.score(h, w, &p, &[0, 1]), Err(Error::LengthMismatch { expected: 3, actual: 2, .. })));
    assert!(matches!(cpu.score(h, w, &p, &[0, 10, 1]), Err(Error::TokenOutOfRange { row: 1, token: 10, v: 10 })));
    assert!(matches!(cpu.score(h, w, &SamplingParams::new(-1.0, 0), &[0, 0, 0]), Err(Error::InvalidTemperature(_))));
    // Every token of a uniform row: ln(1/10) each, and the mass sums to one.
    let s = cpu.score(h, w, &p, &[0, 5, 9]).unwrap();
    assert!(s.logprobs.iter().all(|&x| (x - 0.1f32.ln()).abs() < 1e-6), "{:?}", s.logprobs);
    // A row with nothing allowed is sampling's error.
    let none = flashsampling::controls::TokenMask { words: vec![0; b], words_per_row: 1 };
    assert!(matches!(
        cpu.score(h, w, &p.clone().with_allowed(none), &[0, 0, 0]),
        Err(Error::AllLogitsNegInfinite { row: 0 })
    ));
}

#[test]
fn the_rows_of_a_call_sample_and_score_what_the_whole_call_does() {
    // `SamplingParams::rows` (how a long truncating GPU scoring call is split into launches): each
    // part, called alone on its rows, draws and scores what the whole call gives them — the noise
    // keys (default streams and per-row seeds, positions), temperatures, truncation, the mask's and
    // the adjustments' rows all follow the rows. A part that lost a row's key or control fails.
    let (b, d, v) = (23, 32, 700);
    let (hidden, weight) = exact_head(b, d, v, 1.5, 0x52_0123);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let params = SamplingParams::new(0.9, 3)
        .with_seeds((0..b as u64).map(|r| r * 977).collect())
        .with_positions((0..b as u32).map(|r| 5 + r % 3).collect())
        .with_temperatures(mixed_temperatures(b))
        .with_top_k((0..b as u32).map(|r| [0, 7, 30][r as usize % 3]).collect())
        .with_top_p((0..b).map(|r| [0.8, 1.0][r % 2]).collect())
        .with_min_p(vec![0.01; b])
        .with_softcap(3.0)
        .with_allowed(random_mask(b, v, 0.4, 31))
        .with_adjustments(random_adjustments(b, v, 9, 32))
        .with_logprobs(LogProbs::ProcessedAndRaw);
    let cpu = CpuBackend::new();
    let mut rng = TestRng::new(33);
    let tokens: Vec<u32> = (0..b).map(|_| (rng.next_u64() % v as u64) as u32).collect();
    let whole = cpu.sample_scored(h, w, &params).unwrap();
    let scores = cpu.score(h, w, &params, &tokens).unwrap();
    for range in [0..9, 9..10, 10..23] {
        let part = params.rows(range.clone()).unwrap();
        let hp = Matrix::new(&hidden[range.start * d..range.end * d], range.len(), d);
        let got = cpu.sample_scored(hp, w, &part).unwrap();
        assert_eq!(got.tokens, whole.tokens[range.clone()], "rows {range:?}: tokens");
        assert_eq!(bits(got.logprobs.as_ref().unwrap()), bits(&whole.logprobs.as_ref().unwrap()[range.clone()]));
        let s = cpu.score(hp, w, &part, &tokens[range.clone()]).unwrap();
        assert_eq!(bits(&s.logprobs), bits(&scores.logprobs[range.clone()]), "rows {range:?}: scores");
        assert_eq!(bits(&s.logsumexp), bits(&scores.logsumexp[range.clone()]), "rows {range:?}: log-sum-exps");
    }
    // Without per-row streams the default (row index) is made explicit: a part's first row keeps stream 9.
    assert_eq!(SamplingParams::new(1.0, 0).rows(9..11).unwrap().streams, Some(vec![9, 10]));
    // Rows past a per-row list, the mask or the adjustments, or a reversed range: typed errors.
    let past = params.rows(20..24);
    assert!(matches!(past, Err(Error::LengthMismatch { buffer: "positions", expected: 24, actual: 23 })), "{past:?}");
    let reversed = std::ops::Range { start: 5, end: 3 };
    assert!(matches!(params.rows(reversed), Err(Error::LengthMismatch { buffer: "row range (start ≤ end)", .. })));
    let only_mask = SamplingParams::new(1.0, 0).with_allowed(random_mask(2, v, 0.5, 1));
    assert!(matches!(only_mask.rows(1..3), Err(Error::LengthMismatch { expected: 3, actual: 2, .. })));
    let only_adjust = SamplingParams::new(1.0, 0).with_adjustments(random_adjustments(2, v, 3, 2));
    assert!(matches!(only_adjust.rows(0..3), Err(Error::LengthMismatch { actual: 2, .. })));
}
