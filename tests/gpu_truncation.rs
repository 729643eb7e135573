//! Top-k, top-p and min-p in the fused pass on the GPU (issue 13): the certificate over the fused
//! pass's top lists, the sample within the kept set, and the exact fallback.
//!
//! - **GPU == CPU** on LM heads with exact logits (any summation order gives them), every kernel
//!   variant, mixed per-row truncations with per-row temperatures, `n` samples, the mask, soft-cap,
//!   sparse adjustments and log-probabilities: tokens and scores equal on at least 99.9 % of the
//!   rows (a top-p boundary within f32 rounding of `p` may differ; none does in these rows),
//!   log-probabilities within 1e-4.
//! - **Identities**: rows whose truncation keeps everything draw the plain call's sample bit for bit,
//!   also mixed into a truncating batch; top-k = 1 and min-p = 1 are greedy.
//! - **Chi-squared** of truncated rows (peaked and flat, ties) against an f64 reference.
//! - **The fallback**: flat rows whose nucleus is too large for the certificate are flagged, and
//!   stay exact (equal to the CPU, chi-squared).
//! - **Top log-probabilities** (processed and raw, with and without truncation, the mask, soft-cap
//!   and adjustments, every variant): the CPU's lists on exact logits, token for token, ties
//!   included (the truncation step's prefix and the fallback's selection); an f64 reference on a
//!   random head; asking for them changes no token or score.
//! - **Typed errors** for NaN and out-of-range top-p / min-p.
//!
//! Each test prints a visible SKIP line without a GPU (and fails with `FLASHSAMPLING_REQUIRE_GPU=1`).

mod common;

use common::*;
use flashsampling::params::LogProbs;
use flashsampling::{CpuBackend, Error, Matrix, SamplingParams};

/// Per-row truncations cycling through every combination the issue names (k from 1 to 64 and V,
/// p from 0.1 to 0.99, min-p), with some rows off.
fn row_truncations(b: usize, v: u32) -> (Vec<u32>, Vec<f32>, Vec<f32>) {
    let ks = [0, 1, 5, 50, 64, v, 20, 0, 3];
    let ps = [1.0, 0.1, 0.5, 0.9, 0.99, 0.9, 1.0];
    let ms = [0.0, 0.0, 0.05, 0.0, 0.2];
    (
        (0..b).map(|r| ks[r % ks.len()]).collect(),
        (0..b).map(|r| ps[r % ps.len()]).collect(),
        (0..b).map(|r| ms[r % ms.len()]).collect(),
    )
}

/// `params` with mixed per-row temperatures and [`row_truncations`] for `b` rows of a vocabulary of `v`.
fn with_mixed_truncations(params: SamplingParams, b: usize, v: usize) -> SamplingParams {
    let (k, p, m) = row_truncations(b, v as u32);
    params.with_temperatures(mixed_temperatures(b)).with_top_k(k).with_top_p(p).with_min_p(m)
}

/// Counts the rows where GPU and CPU disagree (token or score bits), and checks the log-probabilities
/// of the rows that agree.
fn mismatches(what: &str, g: &flashsampling::Samples, c: &flashsampling::Samples) -> usize {
    assert_eq!(g.tokens.len(), c.tokens.len(), "{what}");
    let mut bad = 0;
    for i in 0..g.tokens.len() {
        if g.tokens[i] != c.tokens[i] || g.scores[i].to_bits() != c.scores[i].to_bits() {
            visible(&format!(
                "{what}: row {i} GPU {} ({}) CPU {} ({})",
                g.tokens[i], g.scores[i], c.tokens[i], c.scores[i]
            ));
            bad += 1;
            continue;
        }
        for (name, a, b) in
            [("log-probability", &g.logprobs, &c.logprobs), ("raw log-probability", &g.raw_logprobs, &c.raw_logprobs)]
        {
            if let (Some(a), Some(b)) = (a, b) {
                let (x, y) = (a[i], b[i]);
                assert!(
                    y.is_nan() == x.is_nan() && (y.is_nan() || (x - y).abs() <= 1e-4),
                    "{what}: {name}[{i}] GPU {x} CPU {y}"
                );
            }
        }
    }
    bad
}

#[test]
fn truncation_matches_the_cpu_on_exact_logits() {
    let Some(mut gpu) = gpu_or_skip("truncation_matches_the_cpu_on_exact_logits") else { return };
    let cpu = CpuBackend::new();
    let entries = gpu.fused_variants();
    let (mut rows, mut bad, mut fell_back) = (0usize, 0usize, 0usize);
    // The last head is Qwen3-8B's vocabulary: its normal rows leave more than `SORT_CAP` entries
    // above `β`, so the step selects the largest before it sorts (the other heads sort them all).
    for &(b, d, v) in &[(5usize, 64usize, 1000usize), (37, 64, 3001), (70, 128, 5008), (150, 64, 777), (8, 64, 151_936)]
    {
        let (hidden, weight) = exact_head(b, d, v, 1.5, 0x13_0000 ^ (b * 31 + v) as u64);
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let streams = (0..b as u64).map(|r| 3 * r + 11).collect();
        let base = with_mixed_truncations(SamplingParams::new(0.9, 17).with_streams(streams), b, v);
        let cases = [
            ("truncation", base.clone()),
            (
                "truncation, n = 3, log-probs",
                base.clone().with_samples_per_row(3).with_logprobs(LogProbs::ProcessedAndRaw),
            ),
            (
                "truncation + mask + soft-cap + adjustments + log-probs",
                base.clone()
                    .with_allowed(random_mask(b, v, 0.5, 23))
                    .with_softcap(1.5)
                    .with_adjustments(random_adjustments(b, v, 20, 22))
                    .with_logprobs(LogProbs::ProcessedAndRaw),
            ),
        ];
        for (name, params) in &cases {
            let c = cpu.sample_scored(h, w, params).unwrap();
            on_every_variant(&mut gpu, (h, w), params, |entry, g| {
                let flags = g.truncation_fallback.as_ref().expect("a truncating GPU call reports its fallback rows");
                assert_eq!(flags.len(), g.tokens.len());
                fell_back += flags.iter().filter(|&&f| f).count();
                rows += g.tokens.len();
                bad += mismatches(&format!("{name}, B={b} D={d} V={v}, {entry}"), &g, &c);
            });
        }
        visible(&format!("GPU truncation == CPU: B={b:>3} D={d} V={v:>5}, {} variants", entries.len()));
    }
    visible(&format!("GPU truncation: {rows} sample rows, {bad} differ from the CPU, {fell_back} took the fallback"));
    assert!(bad * 1000 <= rows, "{bad} of {rows} rows differ from the CPU");
}

/// The step's two entries (one block per multiprocessor with every register, or two sharing it)
/// build one body: forced either way, a call gives the same tokens, scores, log-probabilities,
/// top log-probabilities and fallback rows bit for bit, below and above the multiprocessor count.
#[test]
fn both_truncation_step_entries_give_the_same_samples() {
    use flashsampling::kernels::config::TruncateStep;
    let Some(mut gpu) = gpu_or_skip("both_truncation_step_entries_give_the_same_samples") else { return };
    for &(b, d, v) in &[(3usize, 64usize, 151_936usize), (200, 64, 5008)] {
        let (hidden, weight) = exact_head(b, d, v, 1.5, 0x13_57E9 ^ (b * 31 + v) as u64);
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let streams = (0..b as u64).map(|r| 5 * r + 1).collect();
        let params = with_mixed_truncations(SamplingParams::new(0.9, 29).with_streams(streams), b, v)
            .with_logprobs(LogProbs::ProcessedAndRaw)
            .with_top_logprobs(5, false);
        let got = TruncateStep::ALL.map(|step| {
            gpu.set_truncate_step(Some(step));
            gpu.sample_scored(h, w, &params).unwrap()
        });
        gpu.set_truncate_step(None);
        let [a, p2] = &got;
        assert_eq!(a.tokens, p2.tokens, "B={b} V={v}: tokens");
        let opt_bits = |x: &Option<Vec<f32>>| x.as_deref().map(bits);
        assert_eq!(bits(&a.scores), bits(&p2.scores), "B={b} V={v}: scores");
        assert_eq!(opt_bits(&a.logprobs), opt_bits(&p2.logprobs), "B={b} V={v}: log-probabilities");
        assert_eq!(opt_bits(&a.raw_logprobs), opt_bits(&p2.raw_logprobs), "B={b} V={v}: raw log-probabilities");
        assert_eq!(opt_bits(&a.logsumexp), opt_bits(&p2.logsumexp), "B={b} V={v}: log-sum-exps");
        assert_eq!(a.truncation_fallback, p2.truncation_fallback, "B={b} V={v}: fallback rows");
        let top_bits = |x: &Option<Vec<Vec<(u32, f32)>>>| {
            x.as_ref().map(|x| {
                x.iter().map(|r| r.iter().map(|&(i, l)| (i, l.to_bits())).collect::<Vec<_>>()).collect::<Vec<_>>()
            })
        };
        assert_eq!(top_bits(&a.top_logprobs), top_bits(&p2.top_logprobs), "B={b} V={v}: top log-probabilities");
        visible(&format!("GPU truncation step: alone == paired bit for bit, B={b:>3} V={v}"));
    }
}

#[test]
fn rows_that_keep_everything_draw_the_plain_sample() {
    let Some(gpu) = gpu_or_skip("rows_that_keep_everything_draw_the_plain_sample") else { return };
    for &(b, d, v) in &[(6usize, 256usize, 20_001usize), (40, 512, 32_000), (100, 256, 5008)] {
        let mut rng = TestRng::new(0x13_1D ^ (b * 7 + v) as u64);
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let base = SamplingParams::new(0.8, 42).with_streams((0..b as u64).map(|r| 100 + r).collect());
        let plain = gpu.sample_scored(h, w, &base).unwrap();
        // Every "off" value: the plain path.
        for (what, p) in [
            ("top-k = V", base.clone().with_top_k(vec![v as u32; b])),
            ("top-k = 0", base.clone().with_top_k(vec![0; b])),
            ("top-p = 1", base.clone().with_top_p(vec![1.0; b])),
            ("min-p = 0", base.clone().with_min_p(vec![0.0; b])),
        ] {
            let got = gpu.sample_scored(h, w, &p).unwrap();
            assert_eq!((&got.tokens, bits(&got.scores)), (&plain.tokens, bits(&plain.scores)), "{what}, B={b} V={v}");
        }
        // Mixed into a truncating batch (the truncation kernels): the rows that keep everything are
        // the plain call's bit for bit, with and without log-probabilities.
        let k: Vec<u32> = (0..b).map(|r| if r % 2 == 0 { 0 } else { 40 }).collect();
        let p: Vec<f32> = (0..b).map(|r| if r % 2 == 0 { 1.0 } else { 0.9 }).collect();
        for lp in [LogProbs::Off, LogProbs::ProcessedAndRaw] {
            let got = gpu
                .sample_scored(h, w, &base.clone().with_top_k(k.clone()).with_top_p(p.clone()).with_logprobs(lp))
                .unwrap();
            for r in (0..b).step_by(2) {
                assert_eq!(
                    (got.tokens[r], got.scores[r].to_bits()),
                    (plain.tokens[r], plain.scores[r].to_bits()),
                    "row {r}, B={b} V={v}"
                );
            }
        }
        // Top-k = 1 and min-p = 1 keep the argmax only: the greedy call's token.
        let greedy = gpu.sample(h, w, &SamplingParams::greedy()).unwrap();
        for p in [base.clone().with_top_k(vec![1; b]), base.clone().with_min_p(vec![1.0; b])] {
            assert_eq!(gpu.sample(h, w, &p).unwrap(), greedy, "B={b} V={v}");
        }
        visible(&format!("GPU truncation identities hold: B={b:>3} D={d} V={v}"));
    }
}

#[test]
fn truncated_rows_pass_chi_squared_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("truncated_rows_pass_chi_squared_on_the_gpu") else { return };
    // (T, top-k, top-p, min-p) per row, mixed in one call; a small V (every token in one tile) and a
    // larger one whose top tokens spread over vocab ranges.
    let rows: [(f32, u32, f32, f32); 6] = [
        (1.0, 7, 1.0, 0.0),
        (0.8, 0, 0.7, 0.0),
        (1.2, 0, 1.0, 0.05),
        (0.9, 20, 0.8, 0.02),
        (2.0, 0, 0.95, 0.0),
        (0.5, 3, 0.99, 0.0),
    ];
    for (kind, v, rounds) in [(Logits::Spread, 60usize, 300u64), (Logits::Peaked, 3001, 300)] {
        let b = rows.len();
        let s = chi_setup(kind, v, b, 1.0, 0x13_0C00 ^ v as u64);
        let y = logits_f64(&s.hidden[..s.d], &s.weight, s.d, 0);
        let (h, w) = (Matrix::new(&s.hidden, b, s.d), Matrix::new(&s.weight, v, s.d));
        let n = 64u32;
        let mut counts = vec![vec![0u64; v]; b];
        let mut fell_back = 0usize;
        for round in 0..rounds {
            let got = gpu.sample_scored(h, w, &truncation_round(&rows, n, round)).unwrap();
            fell_back += got.truncation_fallback.unwrap().iter().filter(|&&f| f).count();
            count_rows(&mut counts, &got.tokens, n as usize);
        }
        for (r, &(t, k, p, m)) in rows.iter().enumerate() {
            let want = truncated(&y, t as f64, k as usize, p as f64, m as f64);
            let kept = want.iter().filter(|&&q| q > 0.0).count();
            assert!(
                counts[r].iter().zip(&want).all(|(&c, &q)| q > 0.0 || c == 0),
                "V={v} row {r}: a token outside the kept set"
            );
            let (stat, df, pv) = chi_squared(&counts[r], &want);
            visible(&format!(
                "GPU truncation V={v} row {r} (T {t}, k {k}, p {p}, min-p {m}; {kept} kept): chi-squared {stat:.1} on {df} df, p = {pv:.3}"
            ));
            assert!(pv > 1e-4, "V={v} row {r}: chi-squared {stat} on {df} df, p = {pv}");
        }
        visible(&format!(
            "GPU truncation V={v}: {fell_back} of {} samples took the fallback",
            rounds as usize * b * n as usize
        ));
    }
}

#[test]
fn flat_rows_take_the_exact_fallback() {
    let Some(gpu) = gpu_or_skip("flat_rows_take_the_exact_fallback") else { return };
    let cpu = CpuBackend::new();
    // Nearly flat and tied rows (`fallback_rows`): most take the fallback.
    for (what, hidden, weight, params) in fallback_rows() {
        let (b, v) = (hidden.len() / 8, weight.len() / 8);
        let (h, w) = (Matrix::new(&hidden, b, 8), Matrix::new(&weight, v, 8));
        let params = params.with_samples_per_row(16).with_logprobs(LogProbs::Processed);
        let g = gpu.sample_scored(h, w, &params).unwrap();
        let c = cpu.sample_scored(h, w, &params).unwrap();
        let flags = g.truncation_fallback.clone().unwrap();
        let n_fell = flags.iter().filter(|&&f| f).count();
        let bad = mismatches(&format!("{what} rows"), &g, &c);
        visible(&format!(
            "GPU truncation, {what} rows: {n_fell} of {} samples took the fallback; {bad} differ from the CPU",
            flags.len()
        ));
        assert!(n_fell > 0, "{what}: no row needed the fallback");
        assert!(bad * 1000 <= flags.len().max(1000), "{what}: {bad} rows differ from the CPU");
        // The distribution of a fallback row: chi-squared against the f64 reference.
        let y: Vec<f64> = (0..v).map(|i| weight[i * 8].to_f64()).collect(); // row i = [logit(i), 0, …]
        let mut counts = vec![0u64; v];
        for round in 0..100u64 {
            let p = params_round(1.0, 0xF1A7, b, 10_000 * round).with_top_p(vec![0.99; b]).with_samples_per_row(64);
            for t in gpu.sample(h, w, &p).unwrap() {
                counts[t as usize] += 1;
            }
        }
        let want = truncated(&y, 1.0, 0, 0.99, 0.0);
        assert!(counts.iter().zip(&want).all(|(&c, &q)| q > 0.0 || c == 0), "{what}: a token outside the nucleus");
        let (stat, df, pv) = chi_squared(&counts, &want);
        visible(&format!("GPU fallback, {what} rows, p = 0.99: chi-squared {stat:.1} on {df} df, p = {pv:.3}"));
        assert!(pv > 1e-4, "{what}: chi-squared {stat} on {df} df, p = {pv}");
    }
}

#[test]
fn bad_truncation_values_are_typed_errors_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("bad_truncation_values_are_typed_errors_on_the_gpu") else { return };
    let (hidden, weight) = ones(2, 8, 100);
    let (h, w) = (Matrix::new(&hidden, 2, 8), Matrix::new(&weight, 100, 8));
    for p in [f32::NAN, 0.0, -0.5, 1.5] {
        let e = gpu.sample(h, w, &SamplingParams::new(1.0, 0).with_top_p(vec![0.9, p])).unwrap_err();
        assert!(matches!(e, Error::InvalidTruncation { row: 1, what: "top-p", .. }), "{e}");
    }
    for m in [f32::NAN, -0.1, 1.01] {
        let e = gpu.sample(h, w, &SamplingParams::new(1.0, 0).with_min_p(vec![m, 0.0])).unwrap_err();
        assert!(matches!(e, Error::InvalidTruncation { row: 0, what: "min-p", .. }), "{e}");
    }
    let e = gpu.sample(h, w, &SamplingParams::new(1.0, 0).with_top_k(vec![3])).unwrap_err();
    assert!(matches!(e, Error::LengthMismatch { .. }), "{e}");
    visible("GPU truncation: bad values are typed errors");
}

/// Asserts the GPU's top log-probabilities are the CPU's: the same tokens in the same order, the
/// log-probabilities of row `r` within `tol(r)`.
fn assert_same_top(what: &str, g: &flashsampling::Samples, c: &flashsampling::Samples, tol: impl Fn(usize) -> f64) {
    let (gt, ct) =
        (g.top_logprobs.as_ref().expect("the GPU returns top log-probabilities"), c.top_logprobs.as_ref().unwrap());
    assert_eq!(gt.len(), ct.len(), "{what}: rows");
    for (r, (a, b)) in gt.iter().zip(ct).enumerate() {
        let tokens = |l: &[(u32, f32)]| l.iter().map(|e| e.0).collect::<Vec<_>>();
        assert_eq!(tokens(a), tokens(b), "{what}: row {r}'s top tokens");
        for (&(t, x), &(_, y)) in a.iter().zip(b) {
            let tol = tol(r);
            assert!(((x - y) as f64).abs() <= tol, "{what}: row {r} token {t}: GPU {x} CPU {y} (tolerance {tol:e})");
        }
    }
}

#[test]
fn top_logprobs_match_the_cpu_on_exact_logits() {
    let Some(mut gpu) = gpu_or_skip("top_logprobs_match_the_cpu_on_exact_logits") else { return };
    let cpu = CpuBackend::new();
    let (mut rows, mut bad) = (0usize, 0usize);
    for &(b, d, v) in &[(5usize, 64usize, 1000usize), (37, 64, 3001), (70, 128, 5008)] {
        // bf16 weights: many exact ties among the logits.
        let (hidden, weight) = exact_head(b, d, v, 1.5, 0x13_7000 ^ (b * 31 + v) as u64);
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let (k, p, m) = row_truncations(b, v as u32);
        let base = SamplingParams::new(0.9, 17)
            .with_streams((0..b as u64).map(|r| 5 * r + 1).collect())
            .with_temperatures(mixed_temperatures(b));
        let trunc = base.clone().with_top_k(k).with_top_p(p).with_min_p(m);
        // 1e-4; a row of a tiny temperature computes `z / T` in f32 (|z / T| up to thousands), whose
        // rounding alone exceeds that: there, 8 f32 ulps of the largest |z| / T (|z| ≤ max |y| +
        // the adjustments' largest bias 25).
        let temps = mixed_temperatures(b);
        let tol = |r: usize| {
            let y = (0..v).map(|i| weight[i * d + r % d].to_f32().abs()).fold(0f32, f32::max) as f64;
            let t = temps[r] as f64;
            if t == 0.0 || t >= 0.1 { 1e-4 } else { 1e-4 + 8.0 * f32::EPSILON as f64 * (y + 26.0) / t }
        };
        let controls = |p: SamplingParams| {
            p.with_allowed(random_mask(b, v, 0.5, 31))
                .with_softcap(1.5)
                .with_adjustments(random_adjustments(b, v, 20, 32))
        };
        let cases = [
            ("processed top 20", base.clone().with_top_logprobs(20, false)),
            ("raw top 20", base.clone().with_top_logprobs(20, true)),
            (
                "truncation, n = 3, log-probs, processed top 5",
                trunc
                    .clone()
                    .with_samples_per_row(3)
                    .with_logprobs(LogProbs::ProcessedAndRaw)
                    .with_top_logprobs(5, false),
            ),
            ("truncation, raw top 64", trunc.clone().with_top_logprobs(64, true)),
            ("truncation + controls, processed top 20", controls(trunc.clone()).with_top_logprobs(20, false)),
            ("controls, raw top 20 (in the fallback)", controls(base.clone()).with_top_logprobs(20, true)),
            (
                "truncation + controls, n = 2, raw top 7",
                controls(trunc).with_samples_per_row(2).with_top_logprobs(7, true),
            ),
        ];
        for (name, params) in &cases {
            let c = cpu.sample_scored(h, w, params).unwrap();
            on_every_variant(&mut gpu, (h, w), params, |entry, g| {
                let what = format!("{name}, B={b} D={d} V={v}, {entry}");
                assert_same_top(&what, &g, &c, tol);
                rows += g.tokens.len();
                bad += mismatches(&what, &g, &c);
            });
        }
        visible(&format!("GPU top log-probabilities == CPU: B={b:>3} D={d} V={v:>5}, {} cases", cases.len()));
    }
    visible(&format!("GPU top log-probabilities: {rows} sample rows, {bad} tokens differ from the CPU"));
    assert!(bad * 1000 <= rows, "{bad} of {rows} rows differ from the CPU");
}

#[test]
fn top_logprobs_change_no_sample() {
    let Some(gpu) = gpu_or_skip("top_logprobs_change_no_sample") else { return };
    for &(b, d, v) in &[(8usize, 64usize, 4096usize), (48, 128, 20_000)] {
        let (hidden, weight) = exact_head(b, d, v, 1.0, 0x13_7100 ^ v as u64);
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let base = SamplingParams::new(1.0, 3).with_temperatures(mixed_temperatures(b));
        let (k, p, m) = row_truncations(b, v as u32);
        for (what, params) in [
            ("plain", base.clone()),
            ("log-probs", base.clone().with_logprobs(LogProbs::Processed)),
            ("truncation, n = 4", base.clone().with_top_k(k).with_top_p(p).with_min_p(m).with_samples_per_row(4)),
            ("mask", base.clone().with_allowed(random_mask(b, v, 0.3, 9))),
        ] {
            let want = gpu.sample_scored(h, w, &params).unwrap();
            for (n, raw) in [(1, false), (20, false), (64, true)] {
                let got = gpu.sample_scored(h, w, &params.clone().with_top_logprobs(n, raw)).unwrap();
                assert_eq!(
                    (&got.tokens, bits(&got.scores)),
                    (&want.tokens, bits(&want.scores)),
                    "{what}, top {n} (raw: {raw}), B={b} V={v}"
                );
                assert!(got.top_logprobs.as_ref().is_some_and(|t| t.len() == b), "{what}: one list per request");
                if let (Some(a), Some(c)) = (&got.logprobs, &want.logprobs) {
                    assert!(a.iter().zip(c).all(|(x, y)| (x - y).abs() <= 1e-5 || (x.is_nan() && y.is_nan())));
                }
            }
        }
        visible(&format!("GPU top log-probabilities change no sample: B={b} V={v}"));
    }
}

#[test]
fn top_logprobs_match_an_f64_reference_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("top_logprobs_match_an_f64_reference_on_the_gpu") else { return };
    let (b, d, v) = TOP_CASE;
    for raw in [false, true] {
        let (hidden, weight, params) = top_logprob_case(raw);
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let got = gpu.sample_scored(h, w, &params).unwrap();
        // Two tokens within f32 rounding of each other could swap; none does in these rows.
        assert_top_case("GPU", &hidden, &weight, raw, got.top_logprobs.as_ref().unwrap());
    }
    visible("GPU top log-probabilities == f64 reference (processed with top-k / top-p, and raw)");
}

#[test]
fn top_logprobs_of_tied_and_short_rows_take_the_fallback_exactly() {
    let Some(gpu) = gpu_or_skip("top_logprobs_of_tied_and_short_rows_take_the_fallback_exactly") else { return };
    let cpu = CpuBackend::new();
    // Five logit values over 4000 tokens: 800 tie at the top, so no lane's list bound lies below
    // the top value and the truncation step's prefix is empty; the fallback selects the lowest
    // indices among the tied.
    let v = 4000usize;
    let b = 6;
    let (hidden, weight) = crafted_lm_head(v, b, 8, |i| ((i * 7919) % 5) as f32 * 0.5);
    let (h, w) = (Matrix::new(&hidden, b, 8), Matrix::new(&weight, v, 8));
    // A mask that leaves row 2 with 7 tokens (fewer than asked) and row 4 with 40.
    let mut mask = random_mask(b, v, 0.6, 77);
    for (r, keep) in [(2usize, 7usize), (4, 40)] {
        let row = &mut mask.words[r * mask.words_per_row..(r + 1) * mask.words_per_row];
        row.fill(0);
        for t in 0..keep {
            let t = (t * 97 + 13) % v;
            row[t / 32] |= 1 << (t % 32);
        }
    }
    let base = SamplingParams::new(1.0, 5).with_temperatures(vec![1.0, 0.5, 1.0, 0.0, 2.0, 1.0]);
    for (what, params) in [
        ("processed top 20", base.clone().with_top_logprobs(20, false)),
        ("raw top 64", base.clone().with_top_logprobs(64, true)),
        ("top-k 100, processed top 64", base.clone().with_top_k(vec![100; b]).with_top_logprobs(64, false)),
        (
            "top-p 0.99, n = 4, processed top 20",
            base.clone().with_top_p(vec![0.99; b]).with_samples_per_row(4).with_top_logprobs(20, false),
        ),
        ("mask, processed top 20", base.clone().with_allowed(mask.clone()).with_top_logprobs(20, false)),
        ("mask, raw top 20", base.clone().with_allowed(mask.clone()).with_top_logprobs(20, true)),
    ] {
        let g = gpu.sample_scored(h, w, &params).unwrap();
        let c = cpu.sample_scored(h, w, &params).unwrap();
        assert_same_top(what, &g, &c, |_| 1e-4);
        let bad = mismatches(what, &g, &c);
        assert!(bad * 1000 <= g.tokens.len().max(1000), "{what}: {bad} rows differ from the CPU");
        let lens: Vec<usize> = g.top_logprobs.as_ref().unwrap().iter().map(|l| l.len()).collect();
        visible(&format!("GPU top log-probabilities, tied rows, {what}: list lengths {lens:?}, == CPU"));
    }
}

/// Issue 56's rows on the GPU (written without a GPU; the GPU issue runs them): on every kernel
/// variant, tokens, scores, log-probabilities and top lists equal the CPU backend's.
///
/// 1. Signed zeros: V = 4096, D = 8, hidden `[2⁻⁷⁵, 0, …]`, weight row 1 `[−2⁻⁷⁴, 0, …]`, the others
///    zero; a repetition penalty 0.4 on token 1 makes its logit `−0.0`, every other `+0.0`. Top-k 1
///    keeps every token (one value), through the fallback; the top-64 list is `0, 1, 2, …`.
/// 2. A `+∞` logit with top-p 0.9: hidden `[3e38, 0, …]`, weight row 0 `[3e38, 0, …]`, rows `i ≥ 1`
///    `[i · 1e-38, 0, …]`: token 0, log-probability 0, log-sum-exp `+∞` (and with top-k + top-p and
///    min-p, which reach the fallback or the certificate).
/// 3. Min-p before top-p (vLLM's order): probabilities `[0.5, 0.3, 0.1, 0.1]` (padded with `−∞`
///    tokens), top-p 0.6, min-p 0.25: token 0 only.
/// 4. T = 2e-38 with top-k + top-p (`z / T` past f32): the greedy token, log-probability 0, log-sum-exp
///    `+∞`; T = 1e-38 (subnormal: greedy) as every greedy row.
#[test]
fn truncation_edges_match_the_cpu() {
    use flashsampling::controls::SparseAdjustments;
    use flashsampling::kernels::logits::Adjustment;
    let Some(mut gpu) = gpu_or_skip("truncation_edges_match_the_cpu") else { return };
    let cpu = CpuBackend::new();
    let (b, d, v) = (4usize, 8usize, 4096usize);
    let bf = half::bf16::from_f32;
    let row_head = |h0: f32, w: &dyn Fn(usize) -> f32| {
        let mut hidden = vec![half::bf16::ZERO; b * d];
        (0..b).for_each(|r| hidden[r * d] = bf(h0));
        let mut weight = vec![half::bf16::ZERO; v * d];
        (0..v).for_each(|i| weight[i * d] = bf(w(i)));
        (hidden, weight)
    };
    /// A case: its name, (hidden, weight), its controls.
    type Case = (&'static str, (Vec<half::bf16>, Vec<half::bf16>), SamplingParams);
    let mut cases: Vec<Case> = Vec::new();
    // 1. Signed zeros.
    let mut adj = SparseAdjustments::none(0);
    for _ in 0..b {
        adj.tokens.push(1);
        adj.adjustments.push(Adjustment { bias: 0.0, repetition: 0.4, subtract: 0.0 });
        adj.offsets.push(adj.tokens.len());
    }
    let zeros = row_head(2f32.powi(-75), &|i| if i == 1 { -(2f32.powi(-74)) } else { 0.0 });
    let p = SamplingParams::new(1.0, 56).with_adjustments(adj).with_top_k(vec![1; b]).with_top_logprobs(64, false);
    cases.push(("signed zeros", zeros, p));
    // 2. A +∞ logit.
    let inf = row_head(3e38, &|i| if i == 0 { 3e38 } else { i as f32 * 1e-38 });
    let lp = SamplingParams::new(1.0, 56).with_logprobs(LogProbs::Processed);
    cases.push(("+inf, top-p", inf.clone(), lp.clone().with_top_p(vec![0.9; b])));
    cases.push(("+inf, top-k + top-p", inf.clone(), lp.clone().with_top_k(vec![3000; b]).with_top_p(vec![0.5; b])));
    cases.push(("+inf, min-p", inf.clone(), lp.clone().with_min_p(vec![0.2; b]).with_top_logprobs(5, false)));
    // 3. Min-p before top-p.
    let q = [0.5f32, 0.3, 0.1, 0.1];
    let order = row_head(1.0, &|i| if i < 4 { q[i].ln() } else { f32::NEG_INFINITY });
    cases.push(("min-p before top-p", order, lp.clone().with_top_p(vec![0.6; b]).with_min_p(vec![0.25; b])));
    // 4. A tiny normal temperature (z / T past f32), and a subnormal one (greedy).
    let tiny = row_head(1.0, &|i| [10.0, 9.875, 9.0, -1.0][i % 4] - (i / 4) as f32);
    let t = SamplingParams::new(2e-38, 56).with_logprobs(LogProbs::Processed);
    cases.push(("T = 2e-38", tiny.clone(), t.clone().with_top_k(vec![3; b]).with_top_p(vec![0.9; b])));
    cases.push(("T = 1e-38 (greedy)", tiny, t.with_temperatures(vec![1e-38; b]).with_top_k(vec![3; b])));
    for (name, (hidden, weight), params) in &cases {
        let (h, w) = (Matrix::new(hidden, b, d), Matrix::new(weight, v, d));
        let c = cpu.sample_scored(h, w, params).unwrap();
        on_every_variant(&mut gpu, (h, w), params, |entry, g| {
            let what = format!("{name}, {entry}");
            assert_eq!(g.tokens, c.tokens, "{what}: tokens");
            assert_eq!(bits(&g.scores), bits(&c.scores), "{what}: scores");
            for (x, y) in g.logprobs.iter().flatten().zip(c.logprobs.iter().flatten()) {
                assert!(x == y || (x - y).abs() <= 1e-4, "{what}: log-probability {x} vs {y}");
            }
            for (x, y) in g.logsumexp.iter().flatten().zip(c.logsumexp.iter().flatten()) {
                let same = x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-5 * y.abs();
                assert!(same, "{what}: log-sum-exp {x} vs {y}");
            }
            if let (Some(gt), Some(ct)) = (&g.top_logprobs, &c.top_logprobs) {
                for (gr, cr) in gt.iter().zip(ct) {
                    assert_eq!(gr.iter().map(|e| e.0).collect::<Vec<_>>(), cr.iter().map(|e| e.0).collect::<Vec<_>>());
                }
            }
        });
    }
}
