//! Vocab-parallel sampling simulated on the CPU backend (`flashsampling::shard`): G ranks' shards of
//! the LM head, each rank's candidates with global noise keys, merged — bit-identical to the unsharded
//! call for every G, uneven shards, padded vocabularies and any merge order, with serving controls and
//! log-probabilities (merged like the GPU ranks'). Runs in CI (no GPU).

mod common;

use common::{TestRng, bits, crafted_lm_head};
use flashsampling::kernels::Candidate;
use flashsampling::shard::validate_shards;
use flashsampling::{CpuBackend, Error, Matrix, SamplingParams, VocabShard, merge_shard_candidates};
use half::bf16;

/// `g` increasing shard ends over `0 .. v`, uneven: random cut points (some shards of one row, offsets
/// not multiples of 4) from `rng`.
fn uneven_ends(v: usize, g: usize, rng: &mut TestRng) -> Vec<usize> {
    assert!(g <= v);
    let mut cuts: Vec<usize> = Vec::new();
    while cuts.len() < g - 1 {
        // Mix tiny shards (next to an existing cut) with arbitrary ones.
        let c = if rng.next_u64() % 3 == 0 && !cuts.is_empty() {
            cuts[rng.next_u64() as usize % cuts.len()] + 1
        } else {
            1 + rng.next_u64() as usize % (v - 1)
        };
        if c < v && !cuts.contains(&c) {
            cuts.push(c);
        }
    }
    cuts.sort_unstable();
    cuts.push(v);
    cuts
}

#[test]
fn sharded_sampling_is_bit_identical_to_one_device_for_every_shard_count() {
    let cpu = CpuBackend::new();
    let mut rng = TestRng::new(0x5_4A7D);
    let mut checked = 0;
    for &(b, d, v) in &[(1usize, 64usize, 1000usize), (7, 72, 4099), (33, 136, 2050), (5, 8, 9)] {
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        for t in [1.0f32, 0.7, 0.0] {
            let params =
                SamplingParams::new(t, 0xC0FFEE ^ v as u64).with_streams((0..b as u64).map(|r| 3 * r + 1).collect());
            let whole = cpu.sample_scored(h, w, &params).unwrap();
            for g in 1..=8.min(v) {
                for _ in 0..3 {
                    let ends = uneven_ends(v, g, &mut rng);
                    let shards = VocabShard::split(w, &ends).unwrap();
                    let got = cpu.sample_sharded(h, &shards, v, &params).unwrap();
                    assert_eq!(got.tokens, whole.tokens, "B={b} D={d} V={v} T={t} shards ending at {ends:?}");
                    assert_eq!(bits(&got.scores), bits(&whole.scores), "scores, shards ending at {ends:?}");
                    // The exchange is order-free: the ranks' candidates merged in reverse give the same.
                    let mut parts: Vec<Vec<Candidate>> =
                        shards.iter().map(|&s| cpu.shard_candidates(h, s, v, &params).unwrap()).collect();
                    parts.reverse();
                    let merged = merge_shard_candidates(&parts).unwrap();
                    assert_eq!(merged.iter().map(|c| c.token()).collect::<Vec<_>>(), whole.tokens);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 200, "{checked} sharded calls compared");
}

#[test]
fn padded_vocab_rows_are_never_sampled() {
    // Vocab-parallel heads pad V up to a multiple of the rank count; the padding rows may hold
    // anything. Here they hold the largest logits by far, and a rank of only padding exists.
    let cpu = CpuBackend::new().with_threads(2);
    let (v, padded, b) = (10usize, 16usize, 64usize);
    let (hidden, weight) = crafted_lm_head(padded, b, 8, |i| if i < v { (i % 3) as f32 } else { 1000.0 });
    let h = Matrix::new(&hidden, b, 8);
    let params = SamplingParams::new(1.0, 9).with_streams((0..b as u64).collect());
    let whole = cpu.sample_scored(h, Matrix::new(&weight[..v * 8], v, 8), &params).unwrap();
    // 4 ranks of 4 rows: rank 2 holds rows 8..12 (two real, two padding), rank 3 only padding.
    let shards = VocabShard::split(Matrix::new(&weight, padded, 8), &[4, 8, 12, 16]).unwrap();
    let got = cpu.sample_sharded(h, &shards, v, &params).unwrap();
    assert!(got.tokens.iter().all(|&t| (t as usize) < v), "{:?}", got.tokens);
    assert_eq!(got.tokens, whole.tokens);
    assert_eq!(bits(&got.scores), bits(&whole.scores));
    assert_eq!(cpu.shard_candidates(h, shards[3], v, &params).unwrap(), vec![Candidate::EMPTY; b]);
}

#[test]
fn shards_that_do_not_tile_the_vocabulary_are_typed_errors() {
    let cpu = CpuBackend::new();
    let (d, v) = (8usize, 12usize);
    let weight: Vec<bf16> = (0..v * d).map(|i| bf16::from_f32((i % 7) as f32)).collect();
    let hidden = vec![bf16::ONE; 2 * d];
    let h = Matrix::new(&hidden, 2, d);
    let part = |from: usize, to: usize| VocabShard::new(Matrix::new(&weight[from * d..to * d], to - from, d), from);
    let params = SamplingParams::new(1.0, 1);
    let layout = |shards: &[VocabShard<'_>], vocab: usize| match cpu.sample_sharded(h, shards, vocab, &params) {
        Err(Error::InvalidShards { reason, at }) => (reason, at),
        other => panic!("expected InvalidShards, got {other:?}"),
    };
    assert_eq!(layout(&[part(0, 4), part(5, 12)], v), ("a gap between shards", 4));
    assert_eq!(layout(&[part(0, 6), part(4, 12)], v), ("overlapping shards", 4));
    assert_eq!(layout(&[part(2, 12)], v), ("a gap between shards", 0));
    assert_eq!(layout(&[part(0, 4), part(4, 8)], v), ("the shards end before V", 8));
    assert_eq!(layout(&[], v), ("no shards", 0));
    assert!(matches!(validate_shards(&[part(0, 12)], 0), Err(Error::EmptyVocab)));
    // A shard of another hidden size, or whose buffer does not match its shape.
    let narrow: Vec<bf16> = vec![bf16::ONE; 4 * 16];
    let wrong_d = [part(0, 8), VocabShard::new(Matrix::new(&narrow, 4, 16), 8)];
    assert!(matches!(
        cpu.sample_sharded(h, &wrong_d, v, &params),
        Err(Error::HiddenSizeMismatch { hidden: 8, weight: 16 })
    ));
    let short = [part(0, 8), VocabShard::new(Matrix::new(&weight[8 * d..11 * d], 4, d), 8)];
    assert!(matches!(cpu.sample_sharded(h, &short, v, &params), Err(Error::LengthMismatch { .. })));
    // Splitting at bad boundaries, and merging ranks that disagree on B.
    assert!(matches!(VocabShard::split(Matrix::new(&weight, v, d), &[4, 4, 12]), Err(Error::InvalidShards { .. })));
    assert!(matches!(VocabShard::split(Matrix::new(&weight, v, d), &[4, 8]), Err(Error::InvalidShards { .. })));
    let err = merge_shard_candidates(&[vec![Candidate::EMPTY; 2], vec![Candidate::EMPTY; 3]]).unwrap_err();
    assert!(matches!(err, Error::LengthMismatch { expected: 2, actual: 3, .. }), "{err:?}");
    // The valid tiling of the same parts works.
    assert!(cpu.sample_sharded(h, &[part(0, 5), part(5, 12)], v, &params).is_ok());
}

#[test]
fn sharded_sampling_with_serving_controls_is_bit_identical() {
    // Per-row temperatures (greedy rows too) and seeds, n samples, an allowed-token mask over the
    // whole vocabulary (global token ids), soft-capping and sparse adjustments: each rank applies
    // them to its own rows by global index, and the merge gives the whole head's samples.
    use flashsampling::controls::TokenMask;
    let cpu = CpuBackend::new();
    let mut rng = TestRng::new(0x5_4A7E);
    let (b, d, v) = (6usize, 64usize, 3001usize);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let words = v.div_ceil(32);
    let mut mask = TokenMask { words: vec![0; b * words], words_per_row: words };
    for r in 0..b {
        for t in 0..v {
            if rng.uniform() < 0.3 || t == 11 * r {
                mask.words[r * words + t / 32] |= 1 << (t % 32);
            }
        }
    }
    let params = SamplingParams::new(1.0, 0xFEED)
        .with_temperatures(vec![0.7, 0.0, 1.3, 1.0, 0.2, 2.0])
        .with_seeds((0..b as u64).map(|r| 99 + r).collect())
        .with_samples_per_row(2)
        .with_allowed(mask)
        .with_softcap(3.0);
    let whole = cpu.sample_scored(h, w, &params).unwrap();
    for g in 1..=5 {
        for _ in 0..4 {
            let ends = uneven_ends(v, g, &mut rng);
            let shards = VocabShard::split(w, &ends).unwrap();
            let got = cpu.sample_sharded(h, &shards, v, &params).unwrap();
            assert_eq!(got.tokens, whole.tokens, "shards ending at {ends:?}");
            assert_eq!(bits(&got.scores), bits(&whole.scores), "shards ending at {ends:?}");
        }
    }
}

#[test]
fn sharded_log_probabilities_match_the_whole_head() {
    // The ranks' log-probabilities and log-sum-exps over their shards, merged with the kernel crate's
    // merge_rank_row (the GPU merge kernel's function): the whole head's log-probabilities within the
    // f32 rounding of the merge; tokens and scores bit for bit.
    use flashsampling::controls::TokenMask;
    use flashsampling::params::LogProbs;
    let cpu = CpuBackend::new();
    let mut rng = TestRng::new(0x5_4A7F);
    for &(b, d, v) in &[(5usize, 64usize, 2003usize), (3, 32, 700)] {
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        let words = v.div_ceil(32);
        let mut mask = TokenMask { words: vec![u32::MAX; b * words], words_per_row: words };
        for t in (0..v).step_by(3) {
            mask.words[t / 32] &= !(1 << (t % 32)); // row 0 loses every third token
        }
        let temps: Vec<f32> = (0..b).map(|r| [0.8, 0.0, 1.4][r % 3]).collect();
        let base = SamplingParams::new(1.0, 0xBEE).with_temperatures(temps).with_logprobs(LogProbs::ProcessedAndRaw);
        for params in [base.clone(), base.clone().with_allowed(mask).with_softcap(4.0).with_samples_per_row(2)] {
            let whole = cpu.sample_scored(h, w, &params).unwrap();
            for g in 1..=5 {
                let ends = uneven_ends(v, g, &mut rng);
                let got = cpu.sample_sharded(h, &VocabShard::split(w, &ends).unwrap(), v, &params).unwrap();
                let at = format!("B={b} V={v} shards ending at {ends:?}");
                assert_eq!(got.tokens, whole.tokens, "{at}");
                assert_eq!(bits(&got.scores), bits(&whole.scores), "{at}");
                for (name, a, e, tol) in [
                    ("log-probs", &got.logprobs, &whole.logprobs, 1e-5),
                    ("raw log-probs", &got.raw_logprobs, &whole.raw_logprobs, 1e-5),
                    ("log-sum-exp", &got.logsumexp, &whole.logsumexp, 1e-5),
                ] {
                    let (a, e) = (a.as_ref().unwrap(), e.as_ref().unwrap());
                    assert_eq!(a.len(), e.len(), "{at}: {name}");
                    for (i, (x, y)) in a.iter().zip(e).enumerate() {
                        let ok = (x.is_nan() && y.is_nan()) || (x - y).abs() <= tol * y.abs().max(1.0);
                        assert!(ok, "{at}: {name}[{i}] sharded {x} whole {y}");
                    }
                }
            }
        }
    }
}

#[test]
fn truncation_over_shards_equals_the_whole_head() {
    // Top-k / top-p / min-p over G = 1..8 uneven shards: each shard sends its 64 largest processed
    // logits with a bound (the no_std TopList), the merged lists go through the certificate
    // (KeptWalk), uncertain rows through the exact fallback: the whole head's tokens and scores bit for
    // bit, log-probabilities within f32 rounding, with both paths taken.
    use flashsampling::controls::TokenMask;
    use flashsampling::params::LogProbs;
    let cpu = CpuBackend::new();
    let mut rng = TestRng::new(0x5_7C0F);
    let (b, d, v) = (9usize, 64usize, 2003usize);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let mut weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
    // Row 8's hidden state picks weight column 0, which is flat: its nucleus at p = 0.99 is most of
    // the vocabulary, more than the lists hold (the fallback).
    let mut hidden = hidden;
    for k in 0..d {
        hidden[8 * d + k] = half::bf16::from_f32(if k == 0 { 1.0 } else { 0.0 });
    }
    for i in 0..v {
        weight[i * d] = half::bf16::from_f32(((i * 7919) % 97) as f32 * 1e-3);
    }
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let words = v.div_ceil(32);
    let mut mask = TokenMask { words: vec![u32::MAX; b * words], words_per_row: words };
    for t in (0..v).step_by(5) {
        mask.words[3 * words + t / 32] &= !(1 << (t % 32));
    }
    let base = SamplingParams::new(1.0, 0x7C)
        .with_temperatures(vec![0.8, 0.0, 1.3, 1.0, 0.6, 2.0, 1.0, 0.9, 1.0])
        .with_top_k(vec![50, 5, 0, 1, 20, 0, 64, 0, 0])
        .with_top_p(vec![0.9, 0.5, 0.7, 1.0, 1.0, 0.95, 0.8, 0.99, 0.99])
        .with_min_p(vec![0.0, 0.0, 0.05, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0])
        .with_samples_per_row(2);
    let cases = [
        base.clone(),
        base.clone().with_logprobs(LogProbs::ProcessedAndRaw),
        base.clone().with_allowed(mask).with_softcap(3.0).with_logprobs(LogProbs::Processed),
    ];
    let (mut certified, mut fell_back) = (0usize, 0usize);
    for params in &cases {
        let whole = cpu.sample_scored(h, w, params).unwrap();
        for g in 1..=8 {
            let ends = uneven_ends(v, g, &mut rng);
            let got = cpu.sample_sharded(h, &VocabShard::split(w, &ends).unwrap(), v, params).unwrap();
            let at = format!("shards ending at {ends:?}");
            assert_eq!(got.tokens, whole.tokens, "{at}");
            assert_eq!(bits(&got.scores), bits(&whole.scores), "{at}");
            for (name, a, e) in [
                ("log-probs", &got.logprobs, &whole.logprobs),
                ("raw log-probs", &got.raw_logprobs, &whole.raw_logprobs),
                ("log-sum-exp", &got.logsumexp, &whole.logsumexp),
            ] {
                assert_eq!(a.is_some(), e.is_some(), "{at}: {name}");
                if let (Some(a), Some(e)) = (a, e) {
                    for (x, y) in a.iter().zip(e) {
                        assert!(
                            (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                            "{at}: {name} {x} vs {y}"
                        );
                    }
                }
            }
            let flags = got.truncation_fallback.expect("a truncating sharded call reports its fallback rows");
            // Rows 1 (greedy) and those that keep everything never walk; row 8 is flat.
            assert!(flags[16] && flags[17], "{at}: the flat row must take the fallback");
            fell_back += flags.iter().filter(|&&f| f).count();
            certified += flags.len() - flags.iter().filter(|&&f| f).count();
        }
    }
    common::visible(&format!(
        "truncation over shards: {certified} sample rows without the fallback, {fell_back} with it"
    ));
}

#[test]
fn truncating_and_top_n_calls_over_padded_shards_never_score_the_padding() {
    // Issue 48, items 1-2: the last shard padded past V with the largest logits by far (50), or a
    // shard entirely past V. Top-k / top-p / min-p, a mask with top-k (V = 32 puts padding rows
    // past the mask's words) and top log-probabilities draw the whole head's tokens, never ≥ V.
    use flashsampling::controls::TokenMask;
    let cpu = CpuBackend::new().with_threads(2);
    let (b, d) = (4usize, 8usize);
    for (v, padded, layouts) in [
        (11usize, 16usize, vec![vec![6usize, 16], vec![4, 8, 12, 16], vec![11, 16], vec![8, 12, 16]]),
        (32, 40, vec![vec![20, 40], vec![32, 40], vec![12, 24, 36, 40]]),
    ] {
        let (hidden, weight) = crafted_lm_head(padded, b, d, |i| if i < v { (i % 4) as f32 } else { 50.0 });
        let h = Matrix::new(&hidden, b, d);
        let whole_w = Matrix::new(&weight[..v * d], v, d);
        let words = v.div_ceil(32);
        let allowed = (0..v).filter(|i| i % 3 != 1).fold(0u32, |m, i| m | (1 << i));
        let mask = TokenMask { words: vec![allowed; b * words], words_per_row: words };
        let base = SamplingParams::new(1.0, 0x48).with_streams((0..b as u64).collect());
        let cases = [
            base.clone().with_top_k(vec![3; b]),
            base.clone().with_top_p(vec![0.5; b]),
            base.clone().with_min_p(vec![0.2; b]),
            base.clone().with_allowed(mask).with_top_k(vec![2; b]),
            base.clone().with_top_logprobs(5, false),
            base.clone().with_top_logprobs(5, true).with_top_k(vec![3; b]),
        ];
        for params in &cases {
            let whole = cpu.sample_scored(h, whole_w, params).unwrap();
            for ends in &layouts {
                let shards = VocabShard::split(Matrix::new(&weight, padded, d), ends).unwrap();
                let got = cpu.sample_sharded(h, &shards, v, params).unwrap();
                let at = format!("V = {v}, shards ending at {ends:?}, {params:?}");
                assert!(got.tokens.iter().all(|&t| (t as usize) < v), "{at}: {:?}", got.tokens);
                assert_eq!(got.tokens, whole.tokens, "{at}");
                assert_eq!(bits(&got.scores), bits(&whole.scores), "{at}");
                assert_eq!(got.top_logprobs, whole.top_logprobs, "{at}");
            }
        }
    }
}

mod layouts {
    //! The class, not the case (issue 48): any shard layout (even and padded, uneven, with shards
    //! past V) × any control gives the one-device result, and never a token ≥ V.
    use super::common::{TestRng, bits, random_adjustments, random_mask};
    use flashsampling::params::LogProbs;
    use flashsampling::{CpuBackend, Matrix, SamplingParams, VocabShard};
    use half::bf16;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed};

    /// Shard ends over `0 .. padded` (`padded ≥ v`): `kind` 0 even (G ranks of `ceil(V / G)` rows
    /// rounded up to 4, the last padded), 1 uneven cuts below V then padding, 2 uneven with whole
    /// shards past V.
    fn ends(v: usize, g: usize, kind: u8, rng: &mut TestRng) -> Vec<usize> {
        match kind {
            0 => {
                let rows = v.div_ceil(g).next_multiple_of(4);
                (1..=g).map(|r| r * rows).collect()
            }
            _ => {
                let mut cuts: Vec<usize> = (1..g).map(|_| 1 + rng.next_u64() as usize % (v - 1).max(1)).collect();
                cuts.sort_unstable();
                cuts.dedup();
                cuts.retain(|&c| c < v);
                let pad = 1 + rng.next_u64() as usize % 9;
                cuts.push(v + pad);
                if kind == 2 {
                    cuts.push(v + pad + 3);
                    cuts.push(v + pad + 8);
                }
                cuts
            }
        }
    }

    /// One of the controls, by `which`, for `b` rows of a `v`-token head.
    fn control(which: u8, b: usize, v: usize, seed: u64) -> SamplingParams {
        let base = SamplingParams::new(0.9, seed).with_streams((0..b as u64).map(|r| 7 * r + 1).collect());
        let k = |r: usize| [0u32, 1, 3, 17][r % 4];
        match which {
            0 => base,
            1 => base.with_allowed(random_mask(b, v, 0.5, seed)),
            2 => base.with_adjustments(random_adjustments(b, v, 3, seed)),
            3 => base.with_top_k((0..b).map(k).collect()),
            4 => base.with_top_p((0..b).map(|r| [0.3, 0.9, 1.0][r % 3]).collect()).with_top_k((0..b).map(k).collect()),
            5 => base.with_min_p((0..b).map(|r| [0.0, 0.1, 0.5][r % 3]).collect()),
            6 => base.with_logprobs(LogProbs::ProcessedAndRaw).with_softcap(5.0).with_samples_per_row(2),
            7 => base.with_top_logprobs(4, seed.is_multiple_of(2)),
            8 => base.with_allowed(random_mask(b, v, 0.3, seed)).with_top_k((0..b).map(k).collect()),
            _ => base
                .with_logprobs(LogProbs::Processed)
                .with_top_p(vec![0.8; b])
                .with_temperatures((0..b).map(|r| [0.0, 1.3, 0.5][r % 3]).collect()),
        }
    }

    fn close(what: &str, a: &Option<Vec<f32>>, e: &Option<Vec<f32>>) -> Result<(), TestCaseError> {
        prop_assert_eq!(a.is_some(), e.is_some(), "{}", what);
        if let (Some(a), Some(e)) = (a, e) {
            prop_assert_eq!(a.len(), e.len(), "{} length", what);
            for (x, y) in a.iter().zip(e) {
                let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-5 * y.abs().max(1.0);
                prop_assert!(ok, "{}: {} vs {}", what, x, y);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(Config {
            cases: 96,
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(0x48_5AAD),
            ..Config::default()
        })]
        #[test]
        fn any_layout_and_control_gives_the_one_device_result(
            b in 1usize..5,
            d in prop::sample::select(vec![8usize, 16]),
            v in 2usize..200,
            g in 1usize..6,
            kind in 0u8..3,
            which in 0u8..10,
            seed in any::<u64>(),
        ) {
            let mut rng = TestRng::new(seed);
            let ends = ends(v, g, kind, &mut rng);
            let padded = *ends.last().unwrap();
            let hidden = rng.normal_bf16(b * d, 1.0);
            let mut weight = rng.normal_bf16(padded * d, 2.0 / (d as f64).sqrt());
            // The padding holds what would win by far, NaN included: never scored.
            for (i, x) in weight[v * d..].iter_mut().enumerate() {
                *x = if i % 5 == 0 { bf16::NAN } else { bf16::from_f32(60.0) };
            }
            let params = control(which, b, v, seed);
            let h = Matrix::new(&hidden, b, d);
            let cpu = CpuBackend::new().with_threads(1);
            let whole = cpu.sample_scored(h, Matrix::new(&weight[..v * d], v, d), &params).unwrap();
            let shards = VocabShard::split(Matrix::new(&weight, padded, d), &ends).unwrap();
            let got = cpu.sample_sharded(h, &shards, v, &params).unwrap();
            prop_assert!(got.tokens.iter().all(|&t| (t as usize) < v), "tokens {:?}", got.tokens);
            prop_assert_eq!(&got.tokens, &whole.tokens, "shards ending at {:?}", ends);
            prop_assert_eq!(bits(&got.scores), bits(&whole.scores));
            close("log-probs", &got.logprobs, &whole.logprobs)?;
            close("raw log-probs", &got.raw_logprobs, &whole.raw_logprobs)?;
            close("log-sum-exp", &got.logsumexp, &whole.logsumexp)?;
            match (&got.top_logprobs, &whole.top_logprobs) {
                (Some(a), Some(e)) => {
                    for (ra, re) in a.iter().zip(e) {
                        prop_assert_eq!(ra.iter().map(|t| t.0).collect::<Vec<_>>(), re.iter().map(|t| t.0).collect::<Vec<_>>());
                        close("top log-probs", &Some(ra.iter().map(|t| t.1).collect()), &Some(re.iter().map(|t| t.1).collect()))?;
                    }
                }
                (a, e) => prop_assert_eq!(a.is_some(), e.is_some()),
            }
        }
    }
}

#[test]
fn sharded_scoring_matches_the_whole_head() {
    // Issue 52: scoring given tokens over shards (what the GPU's ranks do: each scores the tokens among
    // its rows, the merge rescales the token's shard values with the kernel crate's merge_target):
    // the whole head's scores within the f32 rounding of the merge, −∞ and NaN exactly; tokens of
    // every shard, masked, adjusted and greedy rows, shards of one row and offsets not multiples of 4.
    use flashsampling::controls::TokenMask;
    let cpu = CpuBackend::new();
    let mut rng = TestRng::new(0x5_4A80);
    let (b, d, v) = (8usize, 64usize, 2003usize);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let words = v.div_ceil(32);
    let mut mask = TokenMask { words: vec![0; b * words], words_per_row: words };
    for r in 0..b {
        for t in 0..v {
            if rng.uniform() < 0.4 || t == 5 * r {
                mask.words[r * words + t / 32] |= 1 << (t % 32);
            }
        }
    }
    let temps: Vec<f32> = (0..b).map(|r| [0.8, 0.0, 1.4, 1.0][r % 4]).collect();
    let base = SamplingParams::new(1.0, 0xBEF).with_temperatures(temps.clone());
    let cases = [
        ("per-row T", base.clone()),
        ("mask + soft-cap", base.clone().with_allowed(mask).with_softcap(3.0)),
        ("adjustments", base.clone().with_adjustments(common::random_adjustments(b, v, 5, 8))),
    ];
    for (name, params) in &cases {
        let sampled = cpu.sample(h, w, params).unwrap();
        let sets: Vec<Vec<u32>> = vec![
            sampled.clone(),
            sampled.iter().map(|&t| (t + 1) % v as u32).collect(),
            (0..b).map(|_| (rng.next_u64() % v as u64) as u32).collect(),
        ];
        for tokens in &sets {
            let whole = cpu.score(h, w, params, tokens).unwrap();
            for g in 1..=5 {
                let ends = uneven_ends(v, g, &mut rng);
                let got = cpu.score_sharded(h, &VocabShard::split(w, &ends).unwrap(), v, params, tokens).unwrap();
                let at = format!("{name}, shards ending at {ends:?}");
                for (what, a, e, tol) in [
                    ("log-probs", &got.logprobs, &whole.logprobs, 1e-5f32),
                    ("raw log-probs", &got.raw_logprobs, &whole.raw_logprobs, 1e-5),
                    ("log-sum-exps", &got.logsumexp, &whole.logsumexp, 1e-5),
                    ("raw log-sum-exps", &got.raw_logsumexp, &whole.raw_logsumexp, 1e-5),
                ] {
                    for (i, (x, y)) in a.iter().zip(e.iter()).enumerate() {
                        let ok = if y.is_nan() || y.is_infinite() {
                            x.to_bits() == y.to_bits()
                        } else {
                            (x - y).abs() <= tol * y.abs().max(1.0)
                        };
                        assert!(ok, "{at}: {what}[{i}] sharded {x} whole {y} (token {})", tokens[i]);
                    }
                }
            }
        }
    }
    // Some removed tokens (−∞) and greedy rows were among them.
    let whole = cpu.score(h, w, &cases[1].1, &vec![1u32; b]).unwrap();
    assert!(whole.logprobs.iter().any(|x| x.is_infinite()) && whole.logsumexp.iter().any(|x| x.is_nan()));
}
