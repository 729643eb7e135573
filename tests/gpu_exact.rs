//! The exact log-sum-exp path on one GPU (issue 52, `SamplingParams::exact_logsumexp`): a call's
//! logits materialized by `fallback_logits`, sampled and scored by the GEMM-fed kernels, each row's
//! log-sum-exps summed in integer bins (`exact_mass_rows`). Against the CPU backend on every control
//! (`n` samples a row included; top-k / top-p / min-p refused), scoring the sampled token bit for
//! bit, log-probabilities that do not depend on the batch a row is in, bounded launches for long
//! scoring calls, and the default path within 1e-5 of it. The same calls over vocab shards: `tests/tp.rs`. SKIP without a GPU.

mod common;

use common::*;
use flashsampling::params::LogProbs;
use flashsampling::{CpuBackend, Matrix, SamplingParams};

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
            assert_eq!(bits(&scored.logprobs), bits(&first(g.logprobs.as_ref().unwrap())), "{at}: scoring the samples");
            assert_eq!(bits(&scored.raw_logprobs), bits(&first(g.raw_logprobs.as_ref().unwrap())), "{at}: raw");
            assert_eq!(bits(&scored.logsumexp), bits(g.logsumexp.as_ref().unwrap()), "{at}: log-sum-exps");
            let others: Vec<u32> = tokens.iter().map(|&t| (t + 1) % v as u32).collect();
            assert_scores_close(
                &at,
                &gpu.score(h, w, &params, &others).unwrap(),
                &cpu.score(h, w, &params, &others).unwrap(),
            );
        }
        // Not composed with truncation yet: a typed error before any launch.
        let truncating = SamplingParams::new(0.8, 1).with_top_k(vec![5; b]).with_exact_logsumexp(true);
        for lp in [LogProbs::Processed, LogProbs::Off] {
            let p =
                truncating.clone().with_logprobs(lp).with_top_logprobs(if lp == LogProbs::Off { 3 } else { 0 }, false);
            let err = gpu.sample_scored(h, w, &p).unwrap_err();
            assert!(matches!(err, flashsampling::Error::Unsupported { .. }), "{err:?}");
        }
        assert!(matches!(gpu.score(h, w, &truncating, &vec![0; b]), Err(flashsampling::Error::Unsupported { .. })));
        // A truncating call that reads no log-sum-exp keeps the fused pass (the option has no effect).
        let plain = truncating.clone().with_exact_logsumexp(false);
        assert_eq!(gpu.sample(h, w, &truncating).unwrap(), gpu.sample(h, w, &plain).unwrap(), "top-k alone");
        visible(&format!("exact path == CPU, scores its samples bit for bit: B={b:>3} D={d} V={v:>5}"));
    }
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
        let one = gpu.score(Matrix::new(&hidden[r * d..(r + 1) * d], 1, d), w, &params(r..r + 1), &tokens[r..r + 1]);
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
    for (name, x, y) in [("log-probabilities", &g.logprobs, &c.logprobs), ("raw", &g.raw_logprobs, &c.raw_logprobs)] {
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
