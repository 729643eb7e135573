//! Speculative verification with keyed noise (issue 52, part B, on the CPU backend): the emitted tokens
//! are bit-identical to plain decoding with the same keys, one position per step, whatever the drafts
//! (random, always right, always wrong), with every per-row control; bad drafts are typed errors.

mod common;

use common::TestRng;
use flashsampling::controls::TokenMask;
use flashsampling::speculative::{Drafts, verify};
use flashsampling::{BackendChoice, Error, Matrix, Sampler, SamplingParams};
use half::bf16;

const D: usize = 32;
const V: usize = 200;

/// A request's controls: stream, seed, temperature, top-p, top-k, min-p, and whether its rows are
/// masked (an allowed-token mask keyed by the request: `mask_row`).
#[derive(Clone, Copy)]
struct Req {
    stream: u64,
    seed: u64,
    t: f32,
    top_p: f32,
    top_k: u32,
    min_p: f32,
    masked: bool,
}

/// The allowed-token words of a request's rows (every token when it is not masked): tokens whose
/// id is not a multiple of 3, and token 3 · stream.
fn mask_row(req: Req) -> Vec<u32> {
    let mut words = vec![u32::MAX; V.div_ceil(32)];
    if req.masked {
        for t in (0..V).step_by(3) {
            words[t / 32] &= !(1 << (t % 32));
        }
        let t = (3 * req.stream as usize) % V;
        words[t / 32] |= 1 << (t % 32);
    }
    words
}

/// `verify` on `rows` hidden rows of width [`D`] and the `[V, D]` weight, unwrapped.
fn verify_rows(
    sampler: &Sampler,
    (hidden, rows, weight): (&[bf16], usize, &[bf16]),
    params: &SamplingParams,
    (offsets, tokens, positions): (&[usize], &[u32], &[u32]),
) -> flashsampling::speculative::Verified {
    verify(
        sampler,
        Matrix::new(hidden, rows, D),
        Matrix::new(weight, V, D),
        params,
        Drafts { offsets, tokens, positions },
    )
    .unwrap()
}

/// Plain decoding: the token at `position` of a request, its row sampled alone.
fn plain(sampler: &Sampler, h: &[bf16], w: &[bf16], req: Req, position: u32) -> u32 {
    let params = SamplingParams::new(req.t, req.seed)
        .with_streams(vec![req.stream])
        .with_sample(position)
        .with_seeds(vec![req.seed])
        .with_top_p(vec![req.top_p])
        .with_top_k(vec![req.top_k])
        .with_min_p(vec![req.min_p])
        .with_allowed(TokenMask { words: mask_row(req), words_per_row: V.div_ceil(32) });
    sampler.sample(Matrix::new(h, 1, D), Matrix::new(w, V, D), &params).unwrap()[0]
}

#[test]
fn emitted_tokens_are_plain_decoding_whatever_the_drafts() {
    let sampler = Sampler::new(BackendChoice::Cpu).unwrap();
    let mut rng = TestRng::new(0x52_5BEC);
    let weight = rng.normal_bf16(V * D, 2.0 / (D as f64).sqrt());
    let reqs = [
        Req { stream: 11, seed: 7, t: 1.0, top_p: 1.0, top_k: 0, min_p: 0.0, masked: false },
        Req { stream: 12, seed: 7, t: 0.7, top_p: 0.9, top_k: 0, min_p: 0.0, masked: true },
        Req { stream: 5, seed: 99, t: 0.0, top_p: 1.0, top_k: 0, min_p: 0.0, masked: false },
        Req { stream: 40, seed: 3, t: 1.3, top_p: 0.8, top_k: 0, min_p: 0.0, masked: false },
        Req { stream: 41, seed: 3, t: 1.1, top_p: 1.0, top_k: 12, min_p: 0.0, masked: true },
        Req { stream: 42, seed: 8, t: 0.9, top_p: 0.95, top_k: 30, min_p: 0.05, masked: false },
    ];
    for round in 0..40u64 {
        let ks: Vec<usize> = (0..reqs.len()).map(|r| (round as usize * 7 + r * 3) % 6).collect(); // 0..=5 drafts
        let positions: Vec<u32> = (0..reqs.len()).map(|r| (round * 13 + r as u64 * 101) as u32).collect();
        let mut offsets = vec![0usize];
        for &k in &ks {
            offsets.push(offsets.last().unwrap() + k + 1);
        }
        let rows = *offsets.last().unwrap();
        let hidden = rng.normal_bf16(rows * D, 1.0);
        // The reference: every position decoded alone.
        let want: Vec<Vec<u32>> = (0..reqs.len())
            .map(|r| {
                (0..=ks[r])
                    .map(|i| {
                        let row = offsets[r] + i;
                        plain(&sampler, &hidden[row * D..(row + 1) * D], &weight, reqs[r], positions[r] + i as u32)
                    })
                    .collect()
            })
            .collect();
        // Per-row controls: each request's, on each of its rows.
        let per_row = |f: &dyn Fn(&Req) -> f64| -> Vec<f64> {
            (0..reqs.len()).flat_map(|r| std::iter::repeat_n(f(&reqs[r]), ks[r] + 1)).collect()
        };
        let params = SamplingParams::new(1.0, 0)
            .with_streams(per_row(&|q| q.stream as f64).iter().map(|&x| x as u64).collect())
            .with_seeds(per_row(&|q| q.seed as f64).iter().map(|&x| x as u64).collect())
            .with_temperatures(per_row(&|q| q.t as f64).iter().map(|&x| x as f32).collect())
            .with_top_p(per_row(&|q| q.top_p as f64).iter().map(|&x| x as f32).collect())
            .with_top_k(per_row(&|q| q.top_k as f64).iter().map(|&x| x as u32).collect())
            .with_min_p(per_row(&|q| q.min_p as f64).iter().map(|&x| x as f32).collect())
            .with_allowed(TokenMask {
                words: (0..reqs.len()).flat_map(|r| (0..=ks[r]).flat_map(move |_| mask_row(reqs[r]))).collect(),
                words_per_row: V.div_ceil(32),
            });
        for kind in ["random", "right", "wrong", "right then wrong"] {
            let drafts: Vec<u32> = (0..reqs.len())
                .flat_map(|r| {
                    let (w, k) = (&want[r], ks[r]);
                    (0..k).map(move |i| match kind {
                        "right" => w[i],
                        "wrong" => (w[i] + 1) % V as u32,
                        "right then wrong" => {
                            if i < k / 2 {
                                w[i]
                            } else {
                                (w[i] + 1) % V as u32
                            }
                        }
                        _ => ((w[i] as u64 * 31 + i as u64 + round) % V as u64) as u32,
                    })
                })
                .collect();
            let got = verify_rows(&sampler, (&hidden, rows, &weight), &params, (&offsets, &drafts, &positions));
            for r in 0..reqs.len() {
                let d = &drafts[offsets[r] - r..offsets[r + 1] - r - 1];
                let k = d.iter().zip(&want[r]).take_while(|(a, b)| a == b).count();
                assert_eq!(got.accepted[r] as usize, k, "round {round} {kind} request {r}");
                assert_eq!(got.tokens[r], want[r][..=k], "round {round} {kind} request {r}");
                match kind {
                    "right" => assert_eq!(k, ks[r]),
                    "wrong" => assert_eq!(k, 0),
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn bad_drafts_are_typed_errors() {
    let sampler = Sampler::new(BackendChoice::Cpu).unwrap();
    let (h, w) = (vec![bf16::ONE; 3 * D], vec![bf16::ZERO; V * D]);
    let call = |offsets: &[usize], tokens: &[u32], positions: &[u32], n: u32| {
        let params = SamplingParams::new(1.0, 0).with_samples_per_row(n);
        verify(&sampler, Matrix::new(&h, 3, D), Matrix::new(&w, V, D), &params, Drafts { offsets, tokens, positions })
    };
    assert!(call(&[0, 2, 3], &[1], &[0, 0], 1).is_ok());
    for offsets in [&[0usize, 3][..], &[1, 3], &[0, 2, 2, 3], &[0, 3, 2], &[]] {
        if offsets == [0, 3] {
            continue;
        }
        assert!(matches!(call(offsets, &[1], &[0, 0], 1), Err(Error::InvalidDrafts(_))), "{offsets:?}");
    }
    assert!(matches!(call(&[0, 2, 3], &[1, 2], &[0, 0], 1), Err(Error::LengthMismatch { .. })));
    assert!(matches!(call(&[0, 2, 3], &[1], &[0], 1), Err(Error::LengthMismatch { .. })));
    assert_eq!(
        call(&[0, 2, 3], &[V as u32], &[0, 0], 1),
        Err(Error::TokenOutOfRange { row: 0, token: V as u32, v: V })
    );
    assert!(matches!(call(&[0, 2, 3], &[1], &[0, 0], 2), Err(Error::InvalidDrafts(_))));
    assert_eq!(call(&[0, 2, 3], &[1], &[u32::MAX, 0], 1), Err(Error::InvalidSample(u32::MAX)));
    assert!(matches!(call(&[0, 2, 3], &[1], &[(1 << 31) - 1, 0], 1), Err(Error::InvalidSample(_))));
}

/// The GPU twin (SKIP without a GPU): on exact logits (`common::exact_head`), the GPU's verification —
/// one fused call with per-row positions — accepts and emits exactly what the CPU's does, for random,
/// right and wrong drafts, with per-row temperatures, top-p and greedy rows, on every row count the
/// variants split differently (1 to 130 rows).
#[test]
fn the_gpu_verifies_what_the_cpu_verifies() {
    let Some(gpu) = common::gpu_or_skip("the_gpu_verifies_what_the_cpu_verifies") else { return };
    let gpu = Sampler::Gpu(gpu);
    let cpu = Sampler::new(BackendChoice::Cpu).unwrap();
    let (d, v) = (64usize, 4096usize);
    for (round, ks) in [vec![0usize], vec![3, 0, 5, 1], vec![7; 16]].into_iter().enumerate() {
        let mut offsets = vec![0usize];
        for &k in &ks {
            offsets.push(offsets.last().unwrap() + k + 1);
        }
        let rows = *offsets.last().unwrap();
        let (hidden, weight) = common::exact_head(rows, d, v, 2.0, 0x52_60 + round as u64);
        let positions: Vec<u32> = (0..ks.len() as u32).map(|r| 1000 * r + 7).collect();
        let t: Vec<f32> = (0..rows).map(|i| [1.0, 0.6, 0.0, 1.4][i % 4]).collect();
        let p: Vec<f32> = (0..rows).map(|i| [1.0, 0.9, 1.0, 0.75][i % 4]).collect();
        let params = SamplingParams::new(1.0, 11)
            .with_streams((0..rows as u64).map(|i| 3 * i + 1).collect())
            .with_temperatures(t)
            .with_top_p(p);
        let (h, w) = (Matrix::new(&hidden, rows, d), Matrix::new(&weight, v, d));
        // The CPU's target tokens at the rows' positions.
        let target: Vec<u32> = {
            let keyed = params.clone().with_positions(
                (0..ks.len()).flat_map(|r| (0..=ks[r] as u32).map(|i| i + positions[r]).collect::<Vec<_>>()).collect(),
            );
            cpu.sample(h, w, &keyed).unwrap()
        };
        for kind in 0..3u32 {
            // Drafts: the target tokens (right), shifted (wrong), or arbitrary.
            let drafts: Vec<u32> = (0..ks.len())
                .flat_map(|r| offsets[r]..offsets[r + 1] - 1)
                .map(|row| match kind {
                    0 => target[row],
                    1 => (target[row] + 1) % v as u32,
                    _ => (row as u32 * 97 + 5) % v as u32,
                })
                .collect();
            let drafts = Drafts { offsets: &offsets, tokens: &drafts, positions: &positions };
            let want = verify(&cpu, h, w, &params, drafts).unwrap();
            let got = verify(&gpu, h, w, &params, drafts).unwrap();
            assert_eq!(got, want, "round {round}, drafts {kind}");
        }
    }
}

/// `with_positions`: row `r` draws what a call with sample index `positions[r]` draws (with `n`
/// samples, `positions[r] + j`), and the positions are checked like sample indices.
#[test]
fn positions_are_per_row_sample_indices() {
    let cpu = flashsampling::CpuBackend::new();
    let mut rng = TestRng::new(0x9051);
    let (b, v) = (5usize, V);
    let (hidden, weight) = (rng.normal_bf16(b * D, 1.0), rng.normal_bf16(v * D, 2.0 / (D as f64).sqrt()));
    let positions = vec![0u32, 9, 3, 1 << 20, (1 << 31) - 3];
    let params = SamplingParams::new(1.1, 4).with_positions(positions.clone()).with_samples_per_row(3);
    let got = cpu.sample(Matrix::new(&hidden, b, D), Matrix::new(&weight, v, D), &params).unwrap();
    for r in 0..b {
        let one =
            SamplingParams::new(1.1, 4).with_streams(vec![r as u64]).with_sample(positions[r]).with_samples_per_row(3);
        let want =
            cpu.sample(Matrix::new(&hidden[r * D..(r + 1) * D], 1, D), Matrix::new(&weight, v, D), &one).unwrap();
        assert_eq!(got[3 * r..3 * r + 3], want[..], "row {r}");
    }
    let call = |p: SamplingParams| cpu.sample(Matrix::new(&hidden, b, D), Matrix::new(&weight, v, D), &p).unwrap_err();
    assert_eq!(
        call(SamplingParams::new(1.0, 0).with_positions(vec![0; 4])),
        Error::LengthMismatch { buffer: "per-row positions", expected: b, actual: 4 }
    );
    assert_eq!(
        call(SamplingParams::new(1.0, 0).with_positions(vec![0, 0, 1 << 31, 0, 0])),
        Error::InvalidSample(1 << 31)
    );
    // The last of n samples too: (2^31 - 3) + 3 - 1 = 2^31 - 1 is fine above; + 4 - 1 is not.
    assert_eq!(call(params.with_samples_per_row(4)), Error::InvalidSample(1 << 31));
}

/// A target head and a draft head over `V2` tokens, with exact logits: hidden row `i` (position `i`
/// of a request) is `e_i`, so the logit of token `t` at position `i` is `weight[t, i]`. The draft's
/// weights are the target's plus noise (a draft that mostly agrees). Per position, both heads' exact
/// probabilities at temperature `t`.
fn coupled_heads(k: usize, t: f64) -> (Vec<bf16>, Vec<bf16>, PerPosition, PerPosition) {
    let mut rng = TestRng::new(0x52_C0DE);
    let target = rng.normal_bf16(V2 * D2, 1.2);
    let noise = rng.normal_bf16(V2 * D2, 0.6);
    let draft: Vec<bf16> = target.iter().zip(&noise).map(|(a, b)| bf16::from_f32(a.to_f32() + b.to_f32())).collect();
    let probs = |w: &[bf16], i: usize| common::softmax(&(0..V2).map(|v| w[v * D2 + i].to_f64()).collect::<Vec<_>>(), t);
    let pt = (0..=k).map(|i| probs(&target, i)).collect();
    let pd = (0..=k).map(|i| probs(&draft, i)).collect();
    (target, draft, pt, pd)
}

/// Per position, a distribution over the `V2` tokens.
type PerPosition = Vec<Vec<f64>>;

const D2: usize = 16;
const V2: usize = 24;

/// Issue 52.2 (b) and (c) on the CPU backend. `R` requests of `K` drafts each, their positions
/// `0..=K` at hidden rows `e_0 … e_K`, the drafts sampled from the draft head through this library
/// with the target's keys (seed, stream, position) — coupled by the shared noise. Per position:
/// (b) the emitted token, where one is emitted, follows the target's distribution (chi-squared,
/// fixed seeds); (c) the draft agrees with the target's sample at least `(1 − TV) / (1 + TV)` of
/// the time (the Gumbel coupling's bound; TV between the exact distributions), measured beside the
/// classic rejection sampler's `1 − TV`.
#[test]
fn emitted_tokens_follow_the_target_and_coupled_drafts_agree_within_the_coupling_bound() {
    const K: usize = 3;
    const R: usize = 2500;
    let t = 0.9f32;
    let (target, draft, pt, pd) = coupled_heads(K, t as f64);
    let sampler = Sampler::new(BackendChoice::Cpu).unwrap();
    let rows = R * (K + 1);
    let mut hidden = vec![bf16::ZERO; rows * D2];
    for row in 0..rows {
        hidden[row * D2 + row % (K + 1)] = bf16::ONE;
    }
    let offsets: Vec<usize> = (0..=R).map(|r| r * (K + 1)).collect();
    let positions = vec![0u32; R];
    let mut emitted = vec![vec![0u64; V2]; K + 1];
    let mut agree = [0u64; K + 1];
    let rounds = 8u64;
    for round in 0..rounds {
        let streams: Vec<u64> = (0..rows).map(|row| round * R as u64 + (row / (K + 1)) as u64).collect();
        let params = SamplingParams::new(t, 0x5EED ^ round).with_streams(streams);
        // The draft model's tokens: its head at every position, keyed as the target is (the drafts
        // are its first K; the draft's last row is not a draft).
        let drafted = sampler
            .sample(
                Matrix::new(&hidden, rows, D2),
                Matrix::new(&draft, V2, D2),
                &params.clone().with_positions((0..rows).map(|row| (row % (K + 1)) as u32).collect()),
            )
            .unwrap();
        let drafts: Vec<u32> = (0..rows).filter(|row| row % (K + 1) < K).map(|row| drafted[row]).collect();
        let got = verify(
            &sampler,
            Matrix::new(&hidden, rows, D2),
            Matrix::new(&target, V2, D2),
            &params,
            Drafts { offsets: &offsets, tokens: &drafts, positions: &positions },
        )
        .unwrap();
        // The target's own samples at every position (what verification compares with).
        let target_at = sampler
            .sample(
                Matrix::new(&hidden, rows, D2),
                Matrix::new(&target, V2, D2),
                &params.clone().with_positions((0..rows).map(|row| (row % (K + 1)) as u32).collect()),
            )
            .unwrap();
        for r in 0..R {
            for (i, &tok) in got.tokens[r].iter().enumerate() {
                emitted[i][tok as usize] += 1;
                assert_eq!(tok, target_at[r * (K + 1) + i], "emitted = the target's sample");
            }
            for i in 0..K {
                agree[i] += (drafted[r * (K + 1) + i] == target_at[r * (K + 1) + i]) as u64;
            }
        }
    }
    let trials = (rounds as usize * R) as f64;
    for i in 0..=K {
        let (stat, df, p) = common::chi_squared(&emitted[i], &pt[i]);
        let n: u64 = emitted[i].iter().sum();
        assert!(p > 1e-4, "position {i}: chi2 {stat:.1} on {df} df, p = {p:e}, {n} emitted");
        if i < K {
            let tv = 0.5 * pt[i].iter().zip(&pd[i]).map(|(a, b)| (a - b).abs()).sum::<f64>();
            let bound = (1.0 - tv) / (1.0 + tv);
            let rate = agree[i] as f64 / trials;
            let sigma = (rate * (1.0 - rate) / trials).sqrt();
            common::visible(&format!(
                "position {i}: TV {tv:.3}; coupled drafts agree {rate:.4} (bound (1-TV)/(1+TV) = {bound:.4}; \
                 rejection sampling's 1-TV = {:.4}); chi2 p = {p:.3} over {n} emitted",
                1.0 - tv
            ));
            assert!(rate >= bound - 4.0 * sigma, "position {i}: agreement {rate} below the bound {bound}");
        }
    }
}

/// Issue 52.2 (e) on the CPU: verification is one sampling call with per-row positions, so it is
/// invariant under vocab sharding when that call is. Over uneven shards (the CPU's in-memory ranks),
/// per-row positions draw the whole head's tokens and scores bit for bit, plain and truncating.
#[test]
fn positions_over_vocab_shards_draw_the_whole_heads_tokens() {
    use flashsampling::{CpuBackend, VocabShard};
    let (b, d) = (12, D);
    let mut rng = TestRng::new(0x52_7A);
    let weight = rng.normal_bf16(V * d, 2.0 / (d as f64).sqrt());
    let hidden = rng.normal_bf16(b * d, 1.0);
    let cpu = CpuBackend::new();
    let positions: Vec<u32> = (0..b as u32).map(|r| 1000 + 7 * r).collect();
    let base = SamplingParams::new(0.9, 5).with_streams((0..b as u64).collect()).with_positions(positions);
    for params in [base.clone(), base.clone().with_top_p(vec![0.8; b]).with_top_k(vec![25; b])] {
        for ends in [vec![V], vec![60, V], vec![8, 120, 124, V]] {
            let mut from = 0;
            let shards: Vec<_> = ends
                .iter()
                .map(|&to| {
                    let s = VocabShard::new(Matrix::new(&weight[from * d..to * d], to - from, d), from);
                    from = to;
                    s
                })
                .collect();
            let whole = cpu.sample_scored(Matrix::new(&hidden, b, d), Matrix::new(&weight, V, d), &params).unwrap();
            let sharded = cpu.sample_sharded(Matrix::new(&hidden, b, d), &shards, V, &params).unwrap();
            assert_eq!(sharded.tokens, whole.tokens, "shards ending at {ends:?}");
            assert_eq!(common::bits(&sharded.scores), common::bits(&whole.scores), "shards ending at {ends:?}");
        }
    }
}

#[test]
fn emitted_log_probabilities_are_plain_decodings_bit_for_bit() {
    // Issue 52.2: with log-probabilities asked for, each emitted token comes with the log-probabilities
    // plain decoding reports for it. Either no row truncates or every row does (a call's rows take
    // one path: tiled, or materialized), so the single-row references take the verify call's path.
    let sampler = Sampler::new(BackendChoice::Cpu).unwrap();
    let mut rng = TestRng::new(0x52_5BED);
    let weight = rng.normal_bf16(V * D, 2.0 / (D as f64).sqrt());
    let temps = [1.0f32, 0.7, 0.0, 1.4];
    for top_k in [0u32, 25] {
        let ks = [3usize, 0, 2, 5];
        let positions = [7u32, 100, 0, 33];
        let mut offsets = vec![0usize];
        for &k in &ks {
            offsets.push(offsets.last().unwrap() + k + 1);
        }
        let rows = *offsets.last().unwrap();
        let hidden = rng.normal_bf16(rows * D, 1.0);
        let per_row = |f: &dyn Fn(usize) -> f64| -> Vec<f64> {
            (0..ks.len()).flat_map(|r| std::iter::repeat_n(f(r), ks[r] + 1)).collect()
        };
        let lp = flashsampling::params::LogProbs::ProcessedAndRaw;
        let params = SamplingParams::new(1.0, 5)
            .with_streams(per_row(&|r| 20.0 + r as f64).iter().map(|&x| x as u64).collect())
            .with_temperatures(per_row(&|r| temps[r] as f64).iter().map(|&x| x as f32).collect())
            .with_top_k(vec![top_k; rows])
            .with_logprobs(lp);
        // Plain decoding, one position at a time: tokens and log-probabilities.
        let plain: Vec<Vec<(u32, f32, f32)>> = (0..ks.len())
            .map(|r| {
                (0..=ks[r])
                    .map(|i| {
                        let row = offsets[r] + i;
                        let p = SamplingParams::new(temps[r], 5)
                            .with_streams(vec![20 + r as u64])
                            .with_sample(positions[r] + i as u32)
                            .with_top_k(vec![top_k])
                            .with_logprobs(lp);
                        let s = sampler
                            .sample_scored(
                                Matrix::new(&hidden[row * D..(row + 1) * D], 1, D),
                                Matrix::new(&weight, V, D),
                                &p,
                            )
                            .unwrap();
                        (s.tokens[0], s.logprobs.unwrap()[0], s.raw_logprobs.unwrap()[0])
                    })
                    .collect()
            })
            .collect();
        // Always-right drafts (every row emitted), then always-wrong ones (only the first).
        for right in [true, false] {
            let drafts: Vec<u32> = (0..ks.len())
                .flat_map(|r| {
                    let p = &plain[r];
                    (0..ks[r]).map(move |i| if right { p[i].0 } else { (p[i].0 + 1) % V as u32 })
                })
                .collect();
            let got = verify_rows(&sampler, (&hidden, rows, &weight), &params, (&offsets, &drafts, &positions));
            let (lps, raws) = (got.logprobs.unwrap(), got.raw_logprobs.unwrap());
            for r in 0..ks.len() {
                let n = got.tokens[r].len();
                assert_eq!(n, if right { ks[r] + 1 } else { 1 }, "top-k {top_k} request {r}");
                for i in 0..n {
                    let (t, lp, raw) = plain[r][i];
                    let at = format!("top-k {top_k} right {right} request {r} position {i}");
                    assert_eq!(got.tokens[r][i], t, "{at}");
                    assert_eq!(lps[r][i].to_bits(), lp.to_bits(), "{at}: {} vs {lp}", lps[r][i]);
                    assert_eq!(raws[r][i].to_bits(), raw.to_bits(), "{at}");
                }
            }
        }
    }
    // Without log-probabilities asked for, none come back.
    let got = verify(
        &sampler,
        Matrix::new(&[bf16::ONE; 2 * D], 2, D),
        Matrix::new(&weight, V, D),
        &SamplingParams::new(1.0, 0),
        Drafts { offsets: &[0, 2], tokens: &[0], positions: &[0] },
    )
    .unwrap();
    assert!(got.logprobs.is_none() && got.raw_logprobs.is_none());
}

/// The benchmark's baseline, the classic rejection sampler (`Baselines::rejection`, SKIP without a
/// GPU): drafts drawn from the target's own probabilities are all accepted (`u·q ≤ p` with `q = p`);
/// drafts scored by another head's probabilities are rejected somewhere, and every token emitted at a
/// rejection lies in the residual's support (`p > q` there).
#[test]
fn the_rejection_sampler_baseline_accepts_the_targets_own_drafts_and_draws_from_the_residual() {
    let Some(gpu) = common::gpu_or_skip(
        "the_rejection_sampler_baseline_accepts_the_targets_own_drafts_and_draws_from_the_residual",
    ) else {
        return;
    };
    let base = flashsampling::baselines::Baselines::new(&gpu).unwrap();
    let s = gpu.stream().clone();
    let (requests, k, d, v) = (6usize, 3usize, 64usize, 1024usize);
    let rows = requests * (k + 1);
    let mut rng = TestRng::new(0x5EC);
    let hidden = rng.normal_bf16(rows * d, 1.0);
    let (w1, w2) = (rng.normal_bf16(v * d, 0.4), rng.normal_bf16(v * d, 0.4));
    let h = s.clone_htod(&hidden).unwrap();
    let plain = SamplingParams::new(1.0, 3);
    let probs = |w: &[bf16]| {
        let wd = s.clone_htod(w).unwrap();
        let mut buf = base.alloc(rows, v, &plain).unwrap();
        base.gemm(&h.as_view(), &wd.as_view(), d, &mut buf).unwrap();
        base.softmax_multinomial(&mut buf, &plain).unwrap();
        (buf.probs.clone(), s.clone_dtoh(&buf.tokens).unwrap(), s.clone_dtoh(&buf.probs).unwrap())
    };
    let (p, p_tokens, p_host) = probs(&w1);
    let (q_other, _, q_host) = probs(&w2);
    // The draft rows: each request's first K rows (its last is the bonus position).
    let draft_rows: Vec<usize> = (0..requests).flat_map(|r| (0..k).map(move |i| r * (k + 1) + i)).collect();
    let pick = |host: &[f32]| -> Vec<f32> {
        draft_rows.iter().flat_map(|&row| host[row * v..(row + 1) * v].to_vec()).collect()
    };
    let tokens_of = |t: &[u32]| s.clone_htod(&draft_rows.iter().map(|&row| t[row]).collect::<Vec<u32>>()).unwrap();
    let mut out = s.alloc_zeros::<u32>(rows).unwrap();
    let mut accepted = s.alloc_zeros::<u32>(requests).unwrap();
    // q = p: every draft accepted.
    let q_same = s.clone_htod(&pick(&p_host)).unwrap();
    base.rejection(&p, &q_same, &tokens_of(&p_tokens), (requests, k, v), &mut out, &mut accepted, 5).unwrap();
    assert_eq!(s.clone_dtoh(&accepted).unwrap(), vec![k as u32; requests]);
    let emitted = s.clone_dtoh(&out).unwrap();
    for &row in &draft_rows {
        assert_eq!(emitted[row], p_tokens[row], "row {row}: an accepted draft is emitted");
    }
    // q from another head, the drafts its argmax (likely under q, often not under p): rejections.
    let q_other_rows = s.clone_htod(&pick(&q_host)).unwrap();
    let argmax: Vec<u32> = (0..rows)
        .map(|row| {
            let r = &q_host[row * v..(row + 1) * v];
            (0..v).max_by(|&a, &b| r[a].partial_cmp(&r[b]).unwrap()).unwrap() as u32
        })
        .collect();
    base.rejection(&p, &q_other_rows, &tokens_of(&argmax), (requests, k, v), &mut out, &mut accepted, 6).unwrap();
    let (acc, emitted) = (s.clone_dtoh(&accepted).unwrap(), s.clone_dtoh(&out).unwrap());
    assert!(acc.iter().any(|&a| (a as usize) < k), "{acc:?}: some draft is rejected");
    for (r, &a) in acc.iter().enumerate() {
        let row = r * (k + 1) + a as usize;
        let t = emitted[row] as usize;
        assert!(t < v, "request {r}: token {t}");
        if (a as usize) < k {
            let (pt, qt) = (p_host[row * v + t], q_host[row * v + t]);
            assert!(pt > qt, "request {r}: the token drawn at the rejection ({t}) has p {pt} ≤ q {qt}");
        }
    }
    drop(q_other);
}
