//! Tensor-parallel sampling over a vocab-sharded LM head on several GPUs, through NCCL
//! (`flashsampling::tp`):
//!
//! - **Bit-identical to one GPU**: every rank's tokens and scores equal the one-GPU call's on the
//!   whole head, bit for bit, for even (padded) and uneven shards, with every GPU control on
//!   (per-row temperatures with greedy rows, per-row seeds, `n` samples, a mask, soft-capping, sparse
//!   adjustments on tokens of both shards);
//!   padding rows past V, holding the largest logits, are never sampled. Log-probabilities within
//!   1e-4 of the one-GPU call's, the log-sum-exp within 1e-5 relative.
//! - **Top-k / top-p / min-p over the ranks**: each rank sends its shard's top list per row, every
//!   rank certifies the kept set from the merged lists or takes the exact fallback (the listed rows'
//!   logits all-gathered): tokens and scores equal the one-GPU call's, with both paths taken; what a
//!   truncating call over shards cannot compose yet is a typed `Unsupported` error.
//! - **Both ways to run**: a [`TpGroup`] (one process, all GPUs) and one [`TpRank`] per thread with
//!   a shared [`CommId`] (the one-process-per-GPU shape, here in threads).
//! - **Failures**: a rank that never takes part makes the others return `Error::Timeout`, not hang;
//!   bad layouts, mismatched D across ranks and unequal batches are typed errors before any launch.
//!
//! Needs two GPUs and NCCL: each test prints a visible SKIP line otherwise (and fails with
//! `FLASHSAMPLING_REQUIRE_GPUS=2`, or with `FLASHSAMPLING_REQUIRE_GPU=1` when there is no GPU at all). `NCCL_NVLS_ENABLE=0` must be set (NVLink multicast stays off).

mod common;

use std::time::{Duration, Instant};

use common::*;
use flashsampling::controls::{SparseAdjustments, TokenMask};
use flashsampling::kernels::logits::Adjustment;
use flashsampling::params::LogProbs;
use flashsampling::tp::nccl_available;
use flashsampling::{
    CommId, CpuBackend, DeviceMatrix, ElementType, Error, GpuBackend, Matrix, SamplingParams, ShardLayout, TpGroup,
    TpRank, VocabShard,
};
use half::{bf16, f16};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The number of GPUs when at least `n` are present with NCCL; else a visible SKIP (or a failure
/// with `FLASHSAMPLING_REQUIRE_GPUS=n`).
fn gpus_or_skip(test: &str, n: usize) -> bool {
    let require = std::env::var("FLASHSAMPLING_REQUIRE_GPUS").ok().and_then(|v| v.parse::<usize>().ok());
    let count =
        if flashsampling::gpu_available() { cudarc::driver::CudaContext::device_count().unwrap_or(0) } else { 0 };
    let reason = if (count as usize) < n {
        Some(format!("{count} GPUs, needs {n}"))
    } else if !nccl_available() {
        Some("no NCCL library (libnccl.so)".to_string())
    } else {
        None
    };
    // FLASHSAMPLING_REQUIRE_GPU=1 (a GPU machine's run) fails without any GPU; with one GPU these
    // tests skip unless FLASHSAMPLING_REQUIRE_GPUS asks for n.
    let require_any = std::env::var("FLASHSAMPLING_REQUIRE_GPU").is_ok_and(|v| v == "1");
    match reason {
        Some(r) if require.is_some_and(|m| m >= n) => panic!("FLASHSAMPLING_REQUIRE_GPUS={require:?} but {r}"),
        Some(r) if require_any && count == 0 => panic!("FLASHSAMPLING_REQUIRE_GPU=1 but {r}"),
        Some(r) => {
            visible(&format!("SKIP {test}: {r}; set FLASHSAMPLING_REQUIRE_GPUS={n} to fail instead"));
            false
        }
        None => {
            assert_eq!(
                std::env::var("NCCL_NVLS_ENABLE").as_deref(),
                Ok("0"),
                "NCCL_NVLS_ENABLE=0 must be set on multi-GPU hosts (NVLink multicast stays off)"
            );
            true
        }
    }
}

/// A random head `[padded, D]` whose padding rows (≥ `v`) hold the largest logits by far (each
/// hidden row has a positive first entry; padding weight rows are large there).
fn padded_head(b: usize, d: usize, v: usize, padded: usize, seed: u64) -> (Vec<bf16>, Vec<bf16>) {
    let mut rng = TestRng::new(seed);
    let mut hidden = rng.normal_bf16(b * d, 1.0);
    for r in 0..b {
        hidden[r * d] = bf16::from_f32(4.0);
    }
    let mut weight = rng.normal_bf16(padded * d, 2.0 / (d as f64).sqrt());
    for row in v..padded {
        weight[row * d] = bf16::from_f32(64.0);
    }
    (hidden, weight)
}

/// Layouts from shard ends (offsets multiples of 4), the last running to `padded`.
fn layouts(ends: &[usize], vocab: usize, d: usize) -> Vec<ShardLayout> {
    let mut start = 0;
    ends.iter()
        .map(|&e| {
            let l = ShardLayout { offset: start, rows: e - start, vocab, d, elem: ElementType::Bf16 };
            start = e;
            l
        })
        .collect()
}

fn shards<'a>(weight: &'a [bf16], ls: &[ShardLayout]) -> Vec<VocabShard<'a>> {
    ls.iter()
        .map(|l| {
            VocabShard::new(Matrix::new(&weight[l.offset * l.d..(l.offset + l.rows) * l.d], l.rows, l.d), l.offset)
        })
        .collect()
}

/// A random mask over `v` tokens allowing about half of each row (and token `7r mod v`).
fn half_mask(b: usize, v: usize, seed: u64) -> TokenMask {
    let mut rng = TestRng::new(seed);
    let words = v.div_ceil(32);
    let mut m = TokenMask { words: vec![0; b * words], words_per_row: words };
    for r in 0..b {
        for t in 0..v {
            if rng.uniform() < 0.5 || t == (7 * r) % v {
                m.words[r * words + t / 32] |= 1 << (t % 32);
            }
        }
    }
    m
}

/// Sparse adjustments on tokens of both shards: a large bias on one token near each end of the
/// vocabulary (so the adjusted tokens often win), a penalty on a third.
fn cross_shard_adjustments(b: usize, v: usize) -> SparseAdjustments {
    let mut adj = SparseAdjustments::none(0);
    for r in 0..b {
        let mut row = [((r * 13) % (v / 2)) as u32, (v / 2 + 5) as u32, (v - 1 - r % 7) as u32];
        row.sort_unstable();
        for (i, &t) in row.iter().enumerate() {
            adj.tokens.push(t);
            adj.adjustments.push(Adjustment {
                bias: [6.0, 0.0, 5.0][i],
                repetition: [1.0, 1.5, 1.0][i],
                subtract: [0.0, 0.5, 0.2][i],
            });
        }
        adj.offsets.push(adj.tokens.len());
    }
    adj
}

#[test]
fn f16_shards_are_bit_identical_to_one_gpu() {
    if !gpus_or_skip("f16_shards_are_bit_identical_to_one_gpu", 2) {
        return;
    }
    let (d, v, b) = (256usize, 50_003usize, 9usize);
    let ls: Vec<ShardLayout> =
        ShardLayout::even(v, d, 2, 64).unwrap().into_iter().map(|l| l.with_elem(ElementType::F16)).collect();
    let padded = ls[1].offset + ls[1].rows;
    let (hidden, weight) = padded_head(b, d, v, padded, 0x7A_F016);
    let (hidden, weight): (Vec<f16>, Vec<f16>) = (
        hidden.iter().map(|x| f16::from_f32(x.to_f32())).collect(),
        weight.iter().map(|x| f16::from_f32(x.to_f32() * (1.0 + 1.0 / 1024.0))).collect(), // f16, not bf16, values
    );
    let sh: Vec<VocabShard<'_, f16>> = ls
        .iter()
        .map(|l| VocabShard::new(Matrix::new(&weight[l.offset * d..(l.offset + l.rows) * d], l.rows, d), l.offset))
        .collect();
    let params = SamplingParams::new(0.9, 0xF16)
        .with_streams((0..b as u64).map(|r| 5 * r + 2).collect())
        .with_logprobs(LogProbs::Processed);
    let whole = GpuBackend::new(0)
        .unwrap()
        .sample_scored(Matrix::new(&hidden, b, d), Matrix::new(&weight[..v * d], v, d), &params)
        .unwrap();
    let mut group = TpGroup::new(&[0, 1], &ls, TIMEOUT).unwrap();
    for (r, got) in group.sample(Matrix::new(&hidden, b, d), &sh, &params).unwrap().iter().enumerate() {
        assert_eq!(got.tokens, whole.tokens, "f16 rank {r}: tokens");
        assert_eq!(bits(&got.scores), bits(&whole.scores), "f16 rank {r}: scores");
        for (x, y) in got.logprobs.as_ref().unwrap().iter().zip(whole.logprobs.as_ref().unwrap()) {
            assert!((x - y).abs() <= 1e-4, "f16 rank {r}: log-probability {x} against {y}");
        }
    }
    visible(&format!("f16 TP=2 V={v} B={b}: tokens and scores equal one GPU on both ranks"));
}

#[test]
fn tensor_parallel_samples_are_bit_identical_to_one_gpu() {
    if !gpus_or_skip("tensor_parallel_samples_are_bit_identical_to_one_gpu", 2) {
        return;
    }
    let d = 256;
    let mut compared = 0;
    for &(v, b) in &[(50_003usize, 9usize), (32_000, 64), (151_936, 130)] {
        // Even (Megatron/vLLM: padded to 64 per rank) and uneven shards.
        let even = ShardLayout::even(v, d, 2, 64).unwrap();
        let padded = even.last().map(|l| l.offset + l.rows).unwrap();
        // Uneven: at B ≤ 32 an offset ≡ 8 (mod 16); above, a multiple of 16, so the shard runs the
        // whole head's kernel family (hidden-as-A kernels need V_r % 16 == 0).
        let cut = if b <= 32 { 4 * (v / 12) } else { 16 * (v / 48) };
        let uneven = layouts(&[cut, padded], v, d);
        let (hidden, weight) = padded_head(b, d, v, padded, 0x7A_0001 ^ v as u64);
        let h = Matrix::new(&hidden, b, d);
        let one = GpuBackend::new(0).unwrap();
        let temps: Vec<f32> = (0..b).map(|r| [0.7, 0.0, 1.0, 1.6][r % 4]).collect();
        let seeds: Vec<u64> = (0..b as u64).map(|r| 0xABC0 + 17 * r).collect();
        let base = SamplingParams::new(1.0, 0x5EED ^ v as u64).with_streams((0..b as u64).map(|r| 5 * r + 2).collect());
        let cases = [
            ("plain", base.clone()),
            ("per-row T and seeds", base.clone().with_temperatures(temps.clone()).with_seeds(seeds.clone())),
            ("n = 3", base.clone().with_samples_per_row(3).with_sample(40)),
            ("mask + soft-cap", base.clone().with_allowed(half_mask(b, v, 11)).with_softcap(20.0)),
            ("log-probs", base.clone().with_temperatures(temps.clone()).with_logprobs(LogProbs::ProcessedAndRaw)),
            (
                "sparse adjustments + log-probs",
                base.clone()
                    .with_adjustments(cross_shard_adjustments(b, v))
                    .with_temperatures(temps)
                    .with_logprobs(LogProbs::Processed),
            ),
        ];
        for (name, ls) in [("even", &even), ("uneven", &uneven)] {
            let mut group = TpGroup::new(&[0, 1], ls, TIMEOUT).unwrap();
            let sh = shards(&weight, ls);
            for (case, params) in &cases {
                let whole = one.sample_scored(h, Matrix::new(&weight[..v * d], v, d), params).unwrap();
                let ranks = group.sample(h, &sh, params).unwrap();
                for (r, got) in ranks.iter().enumerate() {
                    let at = format!("V={v} B={b} {name} shards, {case}, rank {r}");
                    assert!(got.tokens.iter().all(|&t| (t as usize) < v), "{at}: a padding row was sampled");
                    assert_eq!(got.tokens, whole.tokens, "{at}: tokens");
                    assert_eq!(bits(&got.scores), bits(&whole.scores), "{at}: scores");
                    if let Some(lp) = &whole.logprobs {
                        // The first row outside the tolerance (TP value, one-GPU value), if any.
                        let off = |a: &[f32], b: &[f32], tol: f32, rel: bool| {
                            a.iter()
                                .zip(b)
                                .enumerate()
                                .find(|(_, (x, y))| {
                                    !((x.is_nan() && y.is_nan())
                                        || (*x - *y).abs() <= if rel { tol * y.abs().max(1.0) } else { tol })
                                })
                                .map(|(i, (x, y))| (i, *x, *y, got.tokens[i]))
                        };
                        let close = |a: &[f32], b: &[f32], tol: f32, rel: bool| {
                            let o = off(a, b, tol, rel);
                            if let Some(o) = o {
                                visible(&format!("{at}: row {} TP {} one GPU {} (token {})", o.0, o.1, o.2, o.3));
                            }
                            o.is_none()
                        };
                        assert!(close(got.logprobs.as_ref().unwrap(), lp, 1e-4, false), "{at}: log-probabilities");
                        assert_eq!(
                            got.raw_logprobs.is_some(),
                            whole.raw_logprobs.is_some(),
                            "{at}: raw log-probabilities"
                        );
                        if let (Some(g), Some(w)) = (&got.raw_logprobs, &whole.raw_logprobs) {
                            assert!(close(g, w, 1e-4, false), "{at}: raw log-probabilities");
                        }
                        let lse = whole.logsumexp.as_ref().unwrap();
                        assert!(close(got.logsumexp.as_ref().unwrap(), lse, 1e-5, true), "{at}: log-sum-exp");
                    }
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 3 * 2 * 6 * 2);
}

#[test]
fn truncation_over_ranks_equals_one_gpu() {
    if !gpus_or_skip("truncation_over_ranks_equals_one_gpu", 2) {
        return;
    }
    truncation_over_ranks(2);
}

/// The whole exchange on one GPU (one rank: its export, the all-gather, the step over the merged
/// list, the fallback's gathered logits) against the plain one-GPU call.
#[test]
fn truncation_over_one_rank_equals_one_gpu() {
    if !gpus_or_skip("truncation_over_one_rank_equals_one_gpu", 1) {
        return;
    }
    truncation_over_ranks(1);
}

/// Top-k / top-p / min-p over `g` ranks (GPUs `0 .. g`) against one GPU, even shards and (with
/// two ranks) uneven ones; then what a truncating call over ranks cannot compose yet.
fn truncation_over_ranks(g: usize) {
    let ordinals: Vec<usize> = (0..g).collect();
    let d = 256;
    let (mut certified, mut fell_back, mut compared) = (0usize, 0usize, 0usize);
    for &(v, b) in &[(50_003usize, 9usize), (151_936, 70)] {
        let even = ShardLayout::even(v, d, g, 64).unwrap();
        let padded = even.last().map(|l| l.offset + l.rows).unwrap();
        let uneven = layouts(&[4 * (v / 12), padded], v, d);
        let splits: Vec<(&str, &Vec<ShardLayout>)> =
            if g == 2 { vec![("even", &even), ("uneven", &uneven)] } else { vec![("even", &even)] };
        let (mut hidden, mut weight) = padded_head(b, d, v, padded, 0x7A_7C00 ^ v as u64);
        // Row 1 picks weight column 1, flat over the vocabulary: its nucleus at p = 0.99 is most of
        // it, far more than the lists hold (the fallback, over both shards' logits).
        for k in 0..d {
            hidden[d + k] = bf16::from_f32(if k == 1 { 1.0 } else { 0.0 });
        }
        for i in 0..v {
            weight[i * d + 1] = bf16::from_f32(((i * 7919) % 97) as f32 * 1e-3);
        }
        let h = Matrix::new(&hidden, b, d);
        let one = GpuBackend::new(0).unwrap();
        let pick = |xs: &[f32]| -> Vec<f32> { (0..b).map(|r| xs[r % xs.len()]).collect() };
        let top_k: Vec<u32> = (0..b).map(|r| [50, 0, 5, 0, 1, 20, 0, 128, 300][r % 9]).collect();
        let base = SamplingParams::new(1.0, 0x7C ^ v as u64)
            .with_streams((0..b as u64).map(|r| 3 * r + 1).collect())
            .with_temperatures(pick(&[0.8, 1.0, 1.3, 0.0, 0.6, 2.0, 1.0, 0.9, 1.1]))
            .with_top_k(top_k.clone())
            .with_top_p(pick(&[0.9, 0.99, 0.7, 1.0, 1.0, 0.95, 0.8, 1.0, 0.9]))
            .with_min_p(pick(&[0.0, 0.0, 0.05, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0]))
            .with_samples_per_row(2);
        let cases = [
            ("top-k/top-p/min-p", base.clone()),
            ("+ log-probs", base.clone().with_logprobs(LogProbs::Processed)),
            ("+ raw log-probs", base.clone().with_logprobs(LogProbs::ProcessedAndRaw)),
            ("+ top 5", base.clone().with_logprobs(LogProbs::Processed).with_top_logprobs(5, false)),
            (
                "+ mask + raw top 5 (from the fallback's rows)",
                base.clone().with_allowed(half_mask(b, v, 6)).with_top_logprobs(5, true),
            ),
            (
                "top 20 alone (no truncation)",
                SamplingParams::new(0.9, 0x70 ^ v as u64)
                    .with_streams((0..b as u64).map(|r| 3 * r + 1).collect())
                    .with_top_logprobs(20, false),
            ),
            ("+ mask + soft-cap", base.clone().with_allowed(half_mask(b, v, 5)).with_softcap(15.0)),
        ];
        for &(name, ls) in &splits {
            let mut group = TpGroup::new(&ordinals, ls, TIMEOUT).unwrap();
            let sh = shards(&weight, ls);
            for (case, params) in &cases {
                let whole = one.sample_scored(h, Matrix::new(&weight[..v * d], v, d), params).unwrap();
                for (r, got) in group.sample(h, &sh, params).unwrap().iter().enumerate() {
                    let at = format!("V={v} B={b} {name} shards, {case}, rank {r}");
                    assert_eq!(got.tokens, whole.tokens, "{at}: tokens");
                    assert_eq!(bits(&got.scores), bits(&whole.scores), "{at}: scores");
                    for (name, g, w) in [
                        ("log-probability", &got.logprobs, &whole.logprobs),
                        ("raw log-probability", &got.raw_logprobs, &whole.raw_logprobs),
                    ] {
                        assert_eq!(g.is_some(), w.is_some(), "{at}: {name}s");
                        if let (Some(g), Some(w)) = (g, w) {
                            for (i, (x, y)) in g.iter().zip(w).enumerate() {
                                assert!((x - y).abs() <= 1e-4, "{at}: row {i} {name} {x} against {y}");
                            }
                        }
                    }
                    assert_eq!(got.top_logprobs.is_some(), whole.top_logprobs.is_some(), "{at}: top log-probs");
                    if let (Some(g), Some(w)) = (&got.top_logprobs, &whole.top_logprobs) {
                        for (r, (g, w)) in g.iter().zip(w).enumerate() {
                            let tokens = |l: &Vec<(u32, f32)>| l.iter().map(|e| e.0).collect::<Vec<_>>();
                            assert_eq!(tokens(g), tokens(w), "{at}: request {r}'s top tokens");
                            for (x, y) in g.iter().zip(w) {
                                assert!((x.1 - y.1).abs() <= 1e-4, "{at}: request {r}'s top {x:?} against {y:?}");
                            }
                        }
                    }
                    let Some(flags) = got.truncation_fallback.as_ref() else {
                        assert!(!params.truncates(v), "{at}: a truncating call reports its fallback");
                        compared += 1;
                        continue;
                    };
                    assert!(flags[2] && flags[3], "{at}: the flat row must take the fallback");
                    // A top-k of at most 50 is always certified: the merged lists hold at least
                    // RANK_TOP = 128 entries above their bound.
                    for (i, &f) in flags.iter().enumerate() {
                        let k = top_k[i / 2];
                        assert!(!(f && (1..=50).contains(&k)), "{at}: sample row {i} (top-k {k}) fell back");
                    }
                    fell_back += flags.iter().filter(|&&f| f).count();
                    certified += flags.iter().filter(|&&f| !f).count();
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 2 * g * 7 * g);
    assert!(certified > 0 && fell_back > 0, "both paths taken");
    visible(&format!(
        "TP={g} truncation: {certified} sample rows certified from the lists, {fell_back} by the fallback"
    ));

    // What a truncating call over ranks cannot compose yet: typed errors on every rank, before any
    // launch; the group still works afterwards.
    let (v, b) = (4096usize, 4usize);
    let ls = ShardLayout::even(v, d, g, 64).unwrap();
    let (hidden, weight) = padded_head(b, d, v, v, 0x7A_7C01);
    let (h, sh) = (Matrix::new(&hidden, b, d), shards(&weight, &ls));
    let mut group = TpGroup::new(&ordinals, &ls, TIMEOUT).unwrap();
    let p = SamplingParams::new(1.0, 9).with_top_k(vec![10; b]);
    for bad in [
        p.clone().with_adjustments(cross_shard_adjustments(b, v)),
        p.clone().with_logprobs(LogProbs::ProcessedAndRaw).with_softcap(20.0),
    ] {
        assert!(matches!(group.sample(h, &sh, &bad), Err(Error::Unsupported { .. })));
    }
    let whole = GpuBackend::new(0).unwrap().sample(h, Matrix::new(&weight, v, d), &p).unwrap();
    for got in group.sample(h, &sh, &p).unwrap() {
        assert_eq!(got.tokens, whole);
    }
}

/// How a thread's rank joins the group in [`ranks_in_threads`].
#[derive(Clone, Copy, Debug, PartialEq)]
enum Join {
    /// `TpRank::new`: an NCCL communicator of its own (non-blocking).
    Own,
    /// `TpRank::with_collective` with the caller's raw NCCL communicator (`BorrowedNccl`, blocking).
    Borrowed,
    /// With cudarc's communicator on the rank's stream (`CudarcComm`).
    Cudarc,
    /// With cudarc's communicator on a stream of its own (the all-gathers joined to the rank's).
    CudarcOtherStream,
    /// Both ranks on GPU 0, through [`ThreadGather`] (the engine's own all-gather, no NCCL).
    InProcess(&'static GatherShared),
}

#[test]
fn two_ranks_on_one_gpu_through_an_in_process_all_gather_match_one_gpu() {
    // Issue 51.5's `Collective` with an all-gather of the caller's own: two ranks in threads on one
    // GPU exchange through device copies (no NCCL, no second GPU), so the vocab-parallel merge, the
    // truncation over ranks (top lists, the fallback's logits) and `with_collective` run wherever one
    // GPU is lent.
    let Some(_gpu) = gpu_or_skip("two_ranks_on_one_gpu_through_an_in_process_all_gather_match_one_gpu") else {
        return;
    };
    let shared: &'static GatherShared = Box::leak(Box::new(GatherShared::new(2)));
    ranks_in_threads(Join::InProcess(shared));
}

/// What the ranks of one [`ThreadGather`] share: a barrier and, per round, each rank's send buffer
/// and the events the others wait for.
struct GatherShared {
    barrier: std::sync::Barrier,
    /// Per rank: its send address and an event recorded after the send buffer was written.
    posted: std::sync::Mutex<Vec<(u64, usize)>>,
    /// Per rank: an event recorded after its copies from the others' send buffers.
    copied: std::sync::Mutex<Vec<usize>>,
}

impl std::fmt::Debug for GatherShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GatherShared")
    }
}

impl PartialEq for GatherShared {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl GatherShared {
    fn new(world: usize) -> Self {
        Self {
            barrier: std::sync::Barrier::new(world),
            posted: std::sync::Mutex::new(vec![(0, 0); world]),
            copied: std::sync::Mutex::new(vec![0; world]),
        }
    }
}

/// An all-gather between ranks in threads of one process, all on one GPU (one context): each rank
/// posts its send buffer with an event recorded after it, copies every rank's words into its
/// receive buffer on its own stream after that rank's event, then every rank's stream waits for
/// every rank's copies (so that no rank overwrites its send buffer, in its next call, before the
/// others have read it). Blocking: every rank must call it (barriers), as with NCCL.
struct ThreadGather {
    rank: usize,
    shared: &'static GatherShared,
    aborted: bool,
}

// SAFETY: `all_gather_words` is an all-gather of `words` words from `send` into `recv` at
// `recv + 4·r·words` for each rank `r`, ordered on `stream` (its copies wait for each sender's
// event; later work on `stream` waits for every rank's copies); `rank_and_world` tells the truth.
unsafe impl flashsampling::Collective for ThreadGather {
    unsafe fn all_gather_words(
        &mut self,
        send: u64,
        recv: u64,
        words: usize,
        stream: &cudarc::driver::CudaStream,
    ) -> flashsampling::Result<()> {
        use cudarc::driver::sys;
        stream.context().bind_to_thread()?;
        let event = || -> flashsampling::Result<sys::CUevent> {
            let mut e = std::ptr::null_mut();
            // SAFETY: a valid out-pointer; the stream's context is current (the rank binds it).
            unsafe { sys::cuEventCreate(&mut e, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) }.result()?;
            // SAFETY: a live event and stream of one context.
            unsafe { sys::cuEventRecord(e, stream.cu_stream()) }.result()?;
            Ok(e)
        };
        let ready = event()?;
        self.shared.posted.lock().unwrap()[self.rank] = (send, ready as usize);
        self.shared.barrier.wait();
        let posted = self.shared.posted.lock().unwrap().clone();
        for (r, &(src, ev)) in posted.iter().enumerate() {
            // SAFETY: rank r's live event and send buffer of `words` words (it stays allocated until
            // the copies complete: its stream waits for them below); `recv` holds `world · words`.
            unsafe {
                sys::cuStreamWaitEvent(stream.cu_stream(), ev as sys::CUevent, 0).result()?;
                sys::cuMemcpyDtoDAsync_v2(recv + 4 * (r * words) as u64, src, 4 * words, stream.cu_stream())
                    .result()?;
            }
        }
        let copied = event()?;
        self.shared.copied.lock().unwrap()[self.rank] = copied as usize;
        self.shared.barrier.wait();
        let copied_all = self.shared.copied.lock().unwrap().clone();
        for &ev in &copied_all {
            // SAFETY: every rank's live event.
            unsafe { sys::cuStreamWaitEvent(stream.cu_stream(), ev as sys::CUevent, 0) }.result()?;
        }
        // Every wait is enqueued before any rank destroys its events (a destroyed event's pending
        // waits still complete) or posts the next round.
        self.shared.barrier.wait();
        // SAFETY: this rank's own events, no longer used by any call (waits already enqueued).
        unsafe {
            sys::cuEventDestroy_v2(ready).result()?;
            sys::cuEventDestroy_v2(copied).result()?;
        }
        Ok(())
    }

    fn rank_and_world(&self) -> flashsampling::Result<Option<(usize, usize)>> {
        Ok(Some((self.rank, self.shared.copied.lock().unwrap().len())))
    }

    fn abort(&mut self) {
        self.aborted = true;
    }

    fn is_aborted(&self) -> bool {
        self.aborted
    }
}

#[test]
fn one_rank_per_thread_with_a_shared_id_matches_the_group() {
    if !gpus_or_skip("one_rank_per_thread_with_a_shared_id_matches_the_group", 2) {
        return;
    }
    ranks_in_threads(Join::Own);
}

#[test]
fn ranks_on_the_callers_communicator_match_one_gpu() {
    // Issue 51.5: a rank built from an existing communicator (raw NCCL, or cudarc's on the rank's
    // stream or on its own) exchanges through it and draws the one-GPU tokens, truncation included.
    if !gpus_or_skip("ranks_on_the_callers_communicator_match_one_gpu", 2) {
        return;
    }
    for join in [Join::Borrowed, Join::Cudarc, Join::CudarcOtherStream] {
        ranks_in_threads(join);
    }
}

/// Two ranks, one per thread, joined as `join` says, sample a plain and a truncating call; every
/// rank's tokens equal one GPU's.
fn ranks_in_threads(join: Join) {
    let (b, d, v) = (16usize, 512usize, 100_003usize);
    let ls = ShardLayout::even(v, d, 2, 128).unwrap();
    let padded = ls[1].offset + ls[1].rows;
    let (hidden, weight) = padded_head(b, d, v, padded, 0x7A_0002);
    let plain = SamplingParams::new(0.9, 77).with_streams((0..b as u64).collect());
    // A truncating call too: the ranks' lists exchanged, rows 0 and 1 (top-p 0.9999) left to the
    // fallback, whose logits each rank's thread exchanges on its own.
    let top_p: Vec<f32> = (0..b).map(|r| if r < 2 { 0.9999 } else { 0.9 }).collect();
    let top_k: Vec<u32> = (0..b).map(|r| if r < 2 { 0 } else { 50 }).collect();
    let truncating = plain.clone().with_top_k(top_k).with_top_p(top_p);
    let one = GpuBackend::new(0).unwrap();
    let whole: Vec<Vec<u32>> = [&plain, &truncating]
        .iter()
        .map(|p| one.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight[..v * d], v, d), p).unwrap())
        .collect();
    // As another process would receive it (NCCL's; the in-process all-gather uses none).
    let id = match join {
        Join::InProcess(_) => CommId::from_hex(&"00".repeat(128)).unwrap(),
        _ => CommId::from_hex(&CommId::new().unwrap().to_hex()).unwrap(),
    };
    let tokens: Vec<Vec<Vec<u32>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|r| {
                let (hidden, weight, calls, l) = (&hidden, &weight, [&plain, &truncating], ls[r]);
                s.spawn(move || {
                    let (mut rank, raw) = join_rank(join, r, &id, l);
                    let stream = rank.gpu().stream().clone();
                    let hd = stream.clone_htod(hidden).unwrap();
                    let wd = stream.clone_htod(&weight[l.offset * d..(l.offset + l.rows) * d]).unwrap();
                    let mut out = rank.gpu().alloc_samples(b, l.rows).unwrap();
                    let hm = DeviceMatrix { data: hd.as_view(), rows: b, cols: d };
                    let wm = DeviceMatrix { data: wd.as_view(), rows: l.rows, cols: d };
                    let got = calls
                        .iter()
                        .map(|params| {
                            rank.sample_device(&hm, &wm, params, None, &mut out).unwrap();
                            rank.synchronize().unwrap();
                            stream.clone_dtoh(&out.tokens()).unwrap()
                        })
                        .collect();
                    drop(rank);
                    if let Some(raw) = raw {
                        // SAFETY: the communicator made in `join_rank`, no longer used (its rank is gone).
                        unsafe { cudarc::nccl::result::comm_destroy(raw) }.unwrap();
                    }
                    got
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(tokens[0], whole, "{join:?}: rank 0");
    assert_eq!(tokens[1], whole, "{join:?}: rank 1");
}

#[test]
fn many_fallback_rows_over_two_ranks_draw_the_one_gpu_tokens() {
    // The truncation step lists the rows it leaves to the fallback in the order its blocks arrive
    // (an atomic counter), which differs between ranks; the ranks' fallback exchanges their logits
    // slot by slot, so each rank puts its list in row order first. Hundreds of listed rows make the
    // two orders differ: both ranks (in threads on one GPU, through the in-process all-gather) must
    // draw one GPU's tokens and log-probabilities.
    let Some(one) = gpu_or_skip("many_fallback_rows_over_two_ranks_draw_the_one_gpu_tokens") else { return };
    let (b, d, v) = (1024usize, 64usize, 20_003usize);
    let ls = ShardLayout::even(v, d, 2, 128).unwrap();
    let padded = ls[1].offset + ls[1].rows;
    let (hidden, weight) = padded_head(b, d, v, padded, 0x7A_0003);
    // Top-p near 1 on a flat head: the merged lists cannot certify most rows.
    let params = SamplingParams::new(1.0, 0x5A)
        .with_streams((0..b as u64).collect())
        .with_top_p((0..b).map(|r| [0.9999, 0.999, 0.99][r % 3]).collect())
        .with_logprobs(LogProbs::Processed);
    let want = one.sample_scored(Matrix::new(&hidden, b, d), Matrix::new(&weight[..v * d], v, d), &params).unwrap();
    let fell = want.truncation_fallback.as_ref().unwrap().iter().filter(|&&f| f).count();
    assert!(fell >= b / 2, "{fell} of {b} rows in the fallback");
    let got = on_two_ranks((&hidden, &weight, d), &ls, |rank, (hm, wm), out| {
        rank.sample_device(hm, wm, &params, None, out).unwrap();
        rank.synchronize().unwrap();
        let stream = rank.gpu().stream();
        (stream.clone_dtoh(&out.tokens()).unwrap(), stream.clone_dtoh(&out.logprobs().unwrap()).unwrap())
    });
    for (r, (tokens, logprobs)) in got.iter().enumerate() {
        let wrong: Vec<usize> = (0..b).filter(|&i| tokens[i] != want.tokens[i]).collect();
        assert!(
            wrong.is_empty(),
            "rank {r}: {} of {b} tokens differ from one GPU's, first rows {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(8)]
        );
        let want_lp = want.logprobs.as_ref().unwrap();
        for i in 0..b {
            assert!(
                (logprobs[i] - want_lp[i]).abs() <= 1e-4 + 1e-6 * want_lp[i].abs(),
                "rank {r}, row {i}: log-probability {} vs {}",
                logprobs[i],
                want_lp[i]
            );
        }
    }
    assert_eq!(bits(&got[0].1), bits(&got[1].1), "the ranks' log-probabilities agree bit for bit");
    visible(&format!("{fell} of {b} rows through the fallback over two ranks == one GPU"));
}

/// `call` on each of two ranks (`ls`) in threads on one GPU, joined through one in-process
/// all-gather, with `hidden` (`[B, d]`) and the rank's shard of `weight` on its stream and sample
/// buffers for B rows: each rank's result.
fn on_two_ranks<R: Send>(
    (hidden, weight, d): (&[bf16], &[bf16], usize),
    ls: &[ShardLayout],
    call: impl Fn(&mut TpRank, (&DeviceMatrix<'_, bf16>, &DeviceMatrix<'_, bf16>), &mut flashsampling::DeviceSamples) -> R
    + Sync,
) -> Vec<R> {
    let b = hidden.len() / d;
    let shared: &'static GatherShared = Box::leak(Box::new(GatherShared::new(2)));
    let id = CommId::from_hex(&"00".repeat(128)).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|r| {
                let (l, id, call) = (ls[r], &id, &call);
                s.spawn(move || {
                    let (mut rank, _) = join_rank(Join::InProcess(shared), r, id, l);
                    let stream = rank.gpu().stream().clone();
                    let hd = stream.clone_htod(hidden).unwrap();
                    let wd = stream.clone_htod(&weight[l.offset * d..(l.offset + l.rows) * d]).unwrap();
                    let mut out = rank.gpu().alloc_samples(b, l.rows).unwrap();
                    let hm = DeviceMatrix { data: hd.as_view(), rows: b, cols: d };
                    let wm = DeviceMatrix { data: wd.as_view(), rows: l.rows, cols: d };
                    call(&mut rank, (&hm, &wm), &mut out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Rank `r` of two on GPU `r`, joined as `join` says; with `Join::Borrowed` also the raw
/// communicator to destroy after the rank.
fn join_rank(join: Join, r: usize, id: &CommId, l: ShardLayout) -> (TpRank, Option<cudarc::nccl::sys::ncclComm_t>) {
    use flashsampling::{BorrowedNccl, CudarcComm};
    if join == Join::Own {
        return (TpRank::new(r, r, 2, id, l, TIMEOUT).unwrap(), None);
    }
    if let Join::InProcess(shared) = join {
        let gather = ThreadGather { rank: r, shared, aborted: false };
        return (
            TpRank::with_collective(GpuBackend::new(0).unwrap(), Box::new(gather), r, 2, l, TIMEOUT).unwrap(),
            None,
        );
    }
    let gpu = GpuBackend::new(r).unwrap();
    let internal = id.as_bytes().map(|c| c as std::ffi::c_char);
    match join {
        Join::Borrowed => {
            gpu.context().bind_to_thread().unwrap();
            let mut raw = std::ptr::null_mut();
            let unique = cudarc::nccl::sys::ncclUniqueId { internal };
            // SAFETY: a valid out-pointer; rank 0 or 1 of 2 on this thread's current device.
            unsafe { cudarc::nccl::result::comm_init_rank(&mut raw, 2, unique, r as i32) }.unwrap();
            // SAFETY: the live communicator just made, of this device, rank r of 2; destroyed only after
            // the rank is dropped, used by nothing else.
            let comm = unsafe { BorrowedNccl::new(raw as *mut std::ffi::c_void) };
            (TpRank::with_collective(gpu, Box::new(comm), r, 2, l, TIMEOUT).unwrap(), Some(raw))
        }
        Join::Cudarc | Join::CudarcOtherStream => {
            let stream = if join == Join::Cudarc { gpu.stream().clone() } else { gpu.context().new_stream().unwrap() };
            let comm = cudarc::nccl::Comm::from_rank(stream, r, 2, cudarc::nccl::Id::uninit(internal)).unwrap();
            (TpRank::with_collective(gpu, Box::new(CudarcComm::new(comm)), r, 2, l, TIMEOUT).unwrap(), None)
        }
        Join::Own | Join::InProcess(_) => unreachable!("returned above"),
    }
}

#[test]
fn a_rank_that_never_samples_makes_the_others_time_out() {
    if !gpus_or_skip("a_rank_that_never_samples_makes_the_others_time_out", 2) {
        return;
    }
    let (b, d, v) = (4usize, 256usize, 8192usize);
    let ls = ShardLayout::even(v, d, 2, 64).unwrap();
    let (hidden, weight) = padded_head(b, d, v, v, 0x7A_0003);
    let id = CommId::new().unwrap();
    let (result, elapsed) = std::thread::scope(|s| {
        // Rank 1 joins the group, then leaves without sampling (a failed peer).
        let quitter = s.spawn(|| TpRank::new(1, 1, 2, &id, ls[1], TIMEOUT).map(|r| r.rank()));
        let mut rank = TpRank::new(0, 0, 2, &id, ls[0], TIMEOUT).unwrap();
        assert_eq!(quitter.join().unwrap().unwrap(), 1);
        rank.set_timeout(Duration::from_secs(3));
        let stream = rank.gpu().stream().clone();
        let hd = stream.clone_htod(&hidden).unwrap();
        let wd = stream.clone_htod(&weight[..ls[0].rows * d]).unwrap();
        let mut out = rank.gpu().alloc_samples(b, ls[0].rows).unwrap();
        let hm = DeviceMatrix { data: hd.as_view(), rows: b, cols: d };
        let wm = DeviceMatrix { data: wd.as_view(), rows: ls[0].rows, cols: d };
        let t0 = Instant::now();
        let r =
            rank.sample_device(&hm, &wm, &SamplingParams::new(1.0, 1), None, &mut out).and_then(|_| rank.synchronize());
        let elapsed = t0.elapsed();
        // The communicator is gone: later calls fail at once.
        let again = rank.sample_device(&hm, &wm, &SamplingParams::new(1.0, 1), None, &mut out);
        assert!(matches!(again, Err(Error::CommAborted)), "{again:?}");
        (r, elapsed)
    });
    assert!(matches!(result, Err(Error::Timeout { .. }) | Err(Error::Nccl { .. })), "{result:?}");
    assert!(elapsed < Duration::from_secs(30), "returned after {elapsed:?}");
}

#[test]
fn bad_layouts_and_batches_are_typed_errors_before_any_launch() {
    if !gpus_or_skip("bad_layouts_and_batches_are_typed_errors_before_any_launch", 2) {
        return;
    }
    let (d, v) = (128usize, 4096usize);
    let l = |offset, rows| ShardLayout { offset, rows, vocab: v, d, elem: ElementType::Bf16 };
    let err = |ls: &[ShardLayout]| TpGroup::new(&[0, 1], ls, TIMEOUT).unwrap_err();
    assert!(matches!(
        err(&[l(0, 2000), l(2004, 2092)]),
        Error::InvalidShards { reason: "a gap between shards", at: 2000 }
    ));
    assert!(matches!(err(&[l(0, 2002), l(2002, 2094)]), Error::InvalidShards { at: 2002, .. }));
    assert!(matches!(
        err(&[l(0, 2000), l(2000, 1000)]),
        Error::InvalidShards { reason: "the shards end before V", .. }
    ));
    let other_d = ShardLayout { d: 256, ..l(2048, 2048) };
    assert!(matches!(err(&[l(0, 2048), other_d]), Error::RankMismatch { rank: 1, what: "hidden size D", .. }));
    let f16_shard = l(2048, 2048).with_elem(ElementType::F16);
    assert!(matches!(err(&[l(0, 2048), f16_shard]), Error::RankMismatch { rank: 1, expected: 1, actual: 2, .. }));
    assert!(matches!(TpGroup::new(&[0, 1], &[l(0, v)], TIMEOUT), Err(Error::LengthMismatch { .. })));
    assert!(matches!(CommId::from_hex("zz"), Err(Error::InvalidCommId(_))));
    assert!(matches!(
        TpRank::new(0, 2, 2, &CommId::new().unwrap(), l(0, v), TIMEOUT),
        Err(Error::InvalidRank { rank: 2, world: 2 })
    ));

    // A group that works, then calls with bad inputs: typed errors, and the group still works.
    let ls = [l(0, 2048), l(2048, 2048)];
    let mut group = TpGroup::new(&[0, 1], &ls, TIMEOUT).unwrap();
    let (hidden, weight) = padded_head(8, d, v, v, 0x7A_0004);
    let sh = shards(&weight, &ls);
    let params = SamplingParams::new(1.0, 3);
    let bad_t = params.clone().with_temperatures(vec![f32::NAN; 8]);
    assert!(matches!(group.sample(Matrix::new(&hidden, 8, d), &sh, &bad_t), Err(Error::InvalidRowTemperature { .. })));
    let short_mask = params.clone().with_allowed(TokenMask { words: vec![u32::MAX; 8 * 10], words_per_row: 10 });
    assert!(group.sample(Matrix::new(&hidden, 8, d), &sh, &short_mask).is_err());
    assert!(matches!(group.sample(Matrix::new(&hidden, 8, d), &sh[..1], &params), Err(Error::LengthMismatch { .. })));
    // Unequal batches on the two ranks.
    let streams: Vec<_> = group.ranks().iter().map(|r| r.gpu().stream().clone()).collect();
    let hd: Vec<_> = streams.iter().map(|s| s.clone_htod(&hidden).unwrap()).collect();
    let wd: Vec<_> = streams.iter().zip(&sh).map(|(s, x)| s.clone_htod(x.weight.data).unwrap()).collect();
    let hm = [
        DeviceMatrix { data: hd[0].as_view(), rows: 8, cols: d },
        DeviceMatrix { data: hd[1].slice(..4 * d), rows: 4, cols: d },
    ];
    let wm: Vec<_> = wd.iter().map(|w| DeviceMatrix { data: w.as_view(), rows: 2048, cols: d }).collect();
    let mut outs: Vec<_> = group.ranks().iter().map(|r| r.gpu().alloc_samples(8, 2048).unwrap()).collect();
    assert!(matches!(group.sample_device(&hm, &wm, &params, None, &mut outs), Err(Error::LengthMismatch { .. })));
    // f16 elements on a bf16 group.
    let hidden16: Vec<f16> = hidden.iter().map(|x| f16::from_f32(x.to_f32())).collect();
    let sh16: Vec<Vec<f16>> =
        sh.iter().map(|x| x.weight.data.iter().map(|w| f16::from_f32(w.to_f32())).collect()).collect();
    let shards16: Vec<_> =
        sh16.iter().zip(&sh).map(|(w, x)| VocabShard::new(Matrix::new(w, x.weight.rows, d), x.offset)).collect();
    assert!(matches!(
        group.sample(Matrix::new(&hidden16, 8, d), &shards16, &params),
        Err(Error::RankMismatch { rank: 0, expected: 1, actual: 2, .. })
    ));
    let ok = group.sample(Matrix::new(&hidden, 8, d), &sh, &params).unwrap();
    let whole =
        GpuBackend::new(0).unwrap().sample(Matrix::new(&hidden, 8, d), Matrix::new(&weight, v, d), &params).unwrap();
    assert_eq!(ok[0].tokens, whole);
    assert_eq!(ok[1].tokens, whole);
}

#[test]
fn even_layouts_and_comm_ids_are_checked_without_a_gpu() {
    // Issue 48, items 8-9 (no GPU needed): sizes that would wrap around in a release build are
    // typed errors, and an NCCL id is exactly 256 hexadecimal digits.
    for (vocab, ranks, pad) in [(usize::MAX, 1, 4), (usize::MAX, 8, 4), (1 << 31, 2, 4), (10, usize::MAX, 4)] {
        let err = ShardLayout::even(vocab, 8, ranks, pad).unwrap_err();
        assert!(matches!(err, Error::TooLarge { .. }), "V = {vocab}, {ranks} ranks: {err:?}");
    }
    assert!(matches!(ShardLayout::even(1 << 30, 8, 3, usize::MAX - 3), Err(Error::TooLarge { .. })));
    assert!(matches!(ShardLayout::even(0, 8, 2, 4), Err(Error::EmptyVocab)));
    assert!(matches!(ShardLayout::even(10, 8, 0, 4), Err(Error::InvalidShards { .. })));
    assert!(matches!(ShardLayout::even(10, 8, 2, 6), Err(Error::InvalidShards { .. })));
    // Every layout that is returned tiles 0 .. V with no empty shard (padding past V allowed).
    for (vocab, ranks, pad) in [(10, 4, 4), (151_936, 8, 64), (1 << 30, 4, 128), (5, 16, 4)] {
        let ls = ShardLayout::even(vocab, 8, ranks, pad).unwrap();
        assert_eq!(ls.len(), ranks);
        assert!(ls.iter().all(|l| l.rows > 0 && l.rows % pad == 0), "{ls:?}");
        assert!(ls.windows(2).all(|w| w[1].offset == w[0].offset + w[0].rows));
        assert!(ls.last().map_or(0, |l| l.offset + l.rows) >= vocab);
    }
    let id = "0123456789abcdefABCDEF".repeat(12);
    assert!(CommId::from_hex(&id[..256]).is_ok());
    for bad in ["+1".repeat(128), "-1".repeat(128), " 1".repeat(128), "0x".repeat(128), format!("{}g", &id[..255])] {
        assert!(matches!(CommId::from_hex(&bad), Err(Error::InvalidCommId(_))), "{bad:?}");
    }
    assert!(matches!(CommId::from_hex(&id[..254]), Err(Error::InvalidCommId(_))));
    assert!(matches!(CommId::from_hex(&"é".repeat(128)), Err(Error::InvalidCommId(_))));
}

/// Issue 48 on the GPU: the layout property of `tests/shard.rs` (any layout × any control gives the
/// one-device result and never a token ≥ V) over the ranks of a [`TpGroup`]: one rank on one GPU
/// (its shard padded past V), and with two GPUs even, uneven and padded layouts (offsets multiples of
/// 4, as the GPU needs; a shard wholly past V in plain calls). Tokens and scores bit for bit those of
/// the one-GPU call on the whole head (and the CPU backend's `sample_sharded` of the same layout
/// equals its whole-head call), seeded cases; what the ranks cannot compose yet must be the
/// documented `Unsupported` or `InvalidShards`. SKIPs without a GPU and NCCL.
#[test]
fn any_layout_and_control_over_ranks_gives_the_one_device_result() {
    if !gpus_or_skip("any_layout_and_control_over_ranks_gives_the_one_device_result", 1) {
        return;
    }
    let count = cudarc::driver::CudaContext::device_count().unwrap_or(1).clamp(1, 2) as usize;
    let ordinals: Vec<usize> = (0..count).collect();
    let (cpu, one) = (CpuBackend::new(), GpuBackend::new(0).unwrap());
    let mut rng = TestRng::new(0x48_7A00);
    let (mut compared, mut refused) = (0usize, 0usize);
    for case in 0..24 {
        let (b, d) = ([1usize, 3, 9, 40][case % 4], [64usize, 128][case % 2]);
        let v = 4 * (50 + (rng.next_u64() % 3000) as usize) + (rng.next_u64() % 4) as usize;
        // Shard ends: multiples of 4, the last padded past V (by 4 to 64 rows, or a whole shard).
        let pad = 4 * (1 + (rng.next_u64() % 16) as usize);
        let padded = v.next_multiple_of(4) + pad;
        let ends: Vec<usize> = match (count, case % 3) {
            (1, _) => vec![padded],
            (_, 0) => {
                let rows = v.div_ceil(2).next_multiple_of(64);
                vec![rows, 2 * rows]
            }
            (_, 1) => vec![4 * (1 + (rng.next_u64() as usize % (v / 4 - 1))), padded],
            _ => vec![v.next_multiple_of(4), padded],
        };
        let ls = layouts(&ends, v, d);
        let padded = *ends.last().unwrap();
        let (hidden, weight) = padded_head(b, d, v, padded, 0x48_7A01 ^ case as u64);
        let (h, sh) = (Matrix::new(&hidden, b, d), shards(&weight, &ls));
        let base = SamplingParams::new(0.9, case as u64).with_streams((0..b as u64).map(|r| 3 * r + 1).collect());
        let k = |r: usize| [0u32, 1, 5, 40][r % 4];
        let params = match case % 8 {
            0 => base,
            1 => base.with_allowed(half_mask(b, v, case as u64)),
            2 => base.with_adjustments(cross_shard_adjustments(b, v)),
            3 => base.with_top_k((0..b).map(k).collect()),
            4 => base.with_top_p(vec![0.8; b]).with_min_p(vec![0.05; b]),
            5 => base.with_logprobs(LogProbs::ProcessedAndRaw).with_samples_per_row(2),
            6 => base.with_top_logprobs(5, false),
            _ => base.with_softcap(15.0).with_top_k((0..b).map(k).collect()),
        };
        let mut group = TpGroup::new(&ordinals[..ends.len()], &ls, TIMEOUT).unwrap();
        let at = format!("case {case}: B={b} D={d} V={v} shards ending at {ends:?}, {params:?}");
        match group.sample(h, &sh, &params) {
            Ok(ranks) => {
                let whole_w = Matrix::new(&weight[..v * d], v, d);
                let cpu_whole = cpu.sample_scored(h, whole_w, &params).unwrap();
                let sharded = cpu.sample_sharded(h, &sh, v, &params).unwrap();
                assert_eq!(sharded.tokens, cpu_whole.tokens, "{at}: the CPU's sharded call");
                let whole = one.sample_scored(h, whole_w, &params).unwrap();
                for got in &ranks {
                    assert!(got.tokens.iter().all(|&t| (t as usize) < v), "{at}: a padding row was sampled");
                    assert_eq!(got.tokens, whole.tokens, "{at}: tokens");
                    assert_eq!(bits(&got.scores), bits(&whole.scores), "{at}: scores");
                }
                compared += 1;
            }
            Err(Error::Unsupported { .. }) | Err(Error::InvalidShards { .. }) => refused += 1,
            Err(e) => panic!("{at}: {e:?}"),
        }
    }
    visible(&format!("layouts over {count} rank(s): {compared} compared, {refused} refused as documented"));
    assert!(compared >= 16, "{compared} compared");
}

/// One rank's scoring results: `[4, B]` scores (processed and raw log-probabilities, processed and
/// raw log-sum-exps) and, with top log-probabilities (`k`), the `[B, k]` lists' tokens and
/// log-probabilities and the `[B]` ranks.
#[derive(Debug, PartialEq)]
struct RankScores {
    scores: Vec<f32>,
    top: Option<(Vec<u32>, Vec<f32>, Vec<u32>)>,
}

/// `TpRank::score_device` of `tokens` under `params` on two ranks (`ls`) in threads on one GPU
/// through the in-process all-gather: each rank's results (its top outputs filled with all-ones
/// bytes first, as `GpuBackend::score` fills its own), or its error.
fn scores_on_two_ranks(
    head: (&[bf16], &[bf16], usize),
    ls: &[ShardLayout],
    params: &SamplingParams,
    tokens: &[u32],
) -> Vec<Result<RankScores, Error>> {
    let (b, k) = (tokens.len(), params.top_logprobs as usize);
    on_two_ranks(head, ls, |rank, (hm, wm), out| {
        let stream = rank.gpu().stream().clone();
        let td = stream.clone_htod(tokens).unwrap();
        let mut buf = stream.alloc_zeros::<f32>(4 * b).unwrap();
        let mut tt = stream.clone_htod(&vec![u32::MAX; b * k.max(1)]).unwrap();
        let mut tl = stream.clone_htod(&vec![f32::from_bits(u32::MAX); b * k.max(1)]).unwrap();
        let mut ranks = stream.clone_htod(&vec![u32::MAX; b]).unwrap();
        let result = {
            let mut scores = flashsampling::ScoreOutputs::rows_of(buf.as_view_mut(), b).unwrap();
            if k > 0 {
                let top = flashsampling::ScoreTop {
                    tokens: tt.as_view_mut(),
                    logprobs: tl.as_view_mut(),
                    ranks: ranks.as_view_mut(),
                };
                scores = scores.with_top(top);
            }
            rank.score_device(hm, wm, params, &td.as_view(), None, out, &mut scores)
        };
        result.and_then(|()| rank.synchronize()).map(|()| RankScores {
            scores: stream.clone_dtoh(&buf).unwrap(),
            top: (k > 0).then(|| {
                let lists = (stream.clone_dtoh(&tt).unwrap(), stream.clone_dtoh(&tl).unwrap());
                (lists.0, lists.1, stream.clone_dtoh(&ranks).unwrap())
            }),
        })
    })
}

/// Asserts two ranks' results (`got`) agree bit for bit and equal one GPU's (`want`): scores within
/// 1e-4 (+ 1e-6 relative) on log-probabilities and 1e-5 relative on log-sum-exps, `−∞` and NaN
/// exactly; top lists token for token, their log-probabilities within the same tolerance (plus
/// their row's log-sum-exp's rounding), the ranks exactly.
fn assert_rank_scores(at: &str, got: &[RankScores], want: &flashsampling::score::Scores, tokens: &[u32]) {
    let b = tokens.len();
    let (g0, g1) = (&got[0].scores, &got[1].scores);
    let differ: Vec<usize> = (0..4 * b).filter(|&i| g0[i].to_bits() != g1[i].to_bits()).collect();
    assert!(
        differ.is_empty(),
        "{at}: the ranks differ at {} of {} entries ([4, B]; B = {b}), first {:?}",
        differ.len(),
        4 * b,
        differ.iter().take(8).map(|&i| (i / b, i % b, g0[i], g1[i])).collect::<Vec<_>>()
    );
    let fields = [
        ("log-probabilities", &want.logprobs, 1e-4f32, 1e-6f32),
        ("raw log-probabilities", &want.raw_logprobs, 1e-4, 1e-6),
        ("log-sum-exps", &want.logsumexp, 0.0, 1e-5),
        ("raw log-sum-exps", &want.raw_logsumexp, 0.0, 1e-5),
    ];
    for (f, (what, want, abs, rel)) in fields.iter().enumerate() {
        for (i, (&x, &y)) in g0[f * b..(f + 1) * b].iter().zip(want.iter()).enumerate() {
            let at = format!("{at}, {what}[{i}]: ranks {x}, one GPU {y} (token {})", tokens[i]);
            if y.is_nan() || y.is_infinite() {
                assert_eq!(x.to_bits(), y.to_bits(), "{at}");
            } else {
                assert!((x - y).abs() <= abs + rel * y.abs(), "{at}");
            }
        }
    }
    let (t0, t1) = (got[0].top.as_ref(), got[1].top.as_ref());
    assert_eq!(t0.is_some(), want.ranks.is_some(), "{at}: top lists and ranks exactly when asked for");
    let (Some((tt, tl, ranks)), Some(want_lists), Some(want_ranks)) = (t0, &want.top_logprobs, &want.ranks) else {
        return;
    };
    let (tt1, tl1, ranks1) = t1.expect("both ranks have top lists");
    assert!(
        tt == tt1 && bits(tl) == bits(tl1) && ranks == ranks1,
        "{at}: the ranks' top lists and ranks agree bit for bit"
    );
    let ranked: Vec<usize> = (0..b).filter(|&i| ranks[i] != want_ranks[i]).collect();
    assert!(
        ranked.is_empty(),
        "{at}: {} ranks differ from one GPU's, first (row, ranks, one GPU) {:?}",
        ranked.len(),
        ranked.iter().take(8).map(|&i| (i, ranks[i], want_ranks[i])).collect::<Vec<_>>()
    );
    let k = tt.len() / b;
    for (r, want_list) in want_lists.iter().enumerate() {
        let row: Vec<(u32, f32)> = (0..k)
            .map(|j| (tt[r * k + j], tl[r * k + j]))
            .take_while(|e| e.0 != flashsampling::kernels::INVALID_INDEX)
            .collect();
        let tokens_of = |l: &[(u32, f32)]| l.iter().map(|e| e.0).collect::<Vec<_>>();
        assert_eq!(tokens_of(&row), tokens_of(want_list), "{at}: row {r}'s top tokens");
        let lse = [want.logsumexp[r], want.raw_logsumexp[r]].map(|l| if l.is_finite() { l.abs() } else { 0.0 });
        for (&(t, x), &(_, y)) in row.iter().zip(want_list) {
            if !y.is_finite() {
                assert_eq!(x.to_bits(), y.to_bits(), "{at}: row {r} top token {t}: ranks {x}, one GPU {y}");
                continue;
            }
            let tol = 1e-4 + 1e-6 * y.abs() + 5e-7 * lse[0].max(lse[1]);
            assert!((x - y).abs() <= tol, "{at}: row {r} top token {t}: ranks {x}, one GPU {y} ({tol:e})");
        }
    }
}

#[test]
fn scoring_over_two_ranks_on_one_gpu_equals_one_gpu() {
    // Issue 52: `TpRank::score_device` over two shards (even, padded: the padding rows hold the largest
    // logits), ranks in threads on one GPU through the in-process all-gather: every rank's scores
    // equal the one-GPU call's (`GpuBackend::score`) within 1e-4 (+ 1e-6 relative) on log-probabilities
    // and 1e-5 relative on log-sum-exps, −∞ and NaN exactly, the two ranks bit for bit each other's;
    // tokens of both shards, masked, adjusted and greedy rows; with top-k / top-p / min-p each token
    // scored over the kept set the step over the merged lists certifies or the ranks' fallback finds;
    // with top log-probabilities (processed and raw) the lists token for token and the ranks exactly.
    let Some(one) = gpu_or_skip("scoring_over_two_ranks_on_one_gpu_equals_one_gpu") else { return };
    let (b, d, v) = (16usize, 256usize, 20_003usize);
    let ls = ShardLayout::even(v, d, 2, 128).unwrap();
    let padded = ls[1].offset + ls[1].rows;
    let (hidden, weight) = padded_head(b, d, v, padded, 0x7A_52);
    let temps: Vec<f32> = (0..b).map(|r| [0.7, 0.0, 1.0, 1.6][r % 4]).collect();
    let base = SamplingParams::new(1.0, 0x52).with_streams((0..b as u64).collect());
    let trunc = base
        .clone()
        .with_temperatures(temps.clone())
        .with_top_k((0..b).map(|r| [5, 0, 40, 1][r % 4]).collect())
        .with_top_p((0..b).map(|r| [0.9, 1.0, 0.5][r % 3]).collect())
        .with_min_p((0..b).map(|r| [0.0, 0.05][r % 2]).collect());
    let cases = [
        ("plain", base.clone()),
        ("per-row T (greedy rows)", base.clone().with_temperatures(temps.clone())),
        (
            "mask + soft-cap + adjustments",
            base.clone()
                .with_temperatures(temps.clone())
                .with_allowed(half_mask(b, v, 12))
                .with_softcap(20.0)
                .with_adjustments(cross_shard_adjustments(b, v)),
        ),
        ("top-k / top-p / min-p", trunc.clone()),
        ("top-k / top-p / min-p + mask", trunc.clone().with_allowed(half_mask(b, v, 13))),
        ("top 5 + top-k / top-p / min-p", trunc.with_top_logprobs(5, false)),
        (
            "raw top 3, per-row T (greedy rows)",
            base.clone().with_temperatures(temps.clone()).with_top_logprobs(3, true),
        ),
        (
            "top 4 + mask + soft-cap",
            base.with_temperatures(temps)
                .with_allowed(half_mask(b, v, 14))
                .with_softcap(20.0)
                .with_top_logprobs(4, false),
        ),
    ];
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight[..v * d], v, d));
    let mut rng = TestRng::new(0x52_7A);
    for (name, params) in &cases {
        let sampled = one.sample(h, w, params).unwrap();
        // Per row: the sampled token, a token of each shard, an adjusted one, the last one.
        let sets: Vec<Vec<u32>> = vec![
            sampled.clone(),
            (0..b).map(|_| (rng.next_u64() % ls[1].offset as u64) as u32).collect(),
            (0..b).map(|_| (ls[1].offset as u64 + rng.next_u64() % (v - ls[1].offset) as u64) as u32).collect(),
            (0..b).map(|r| (v / 2 + 5 + r % 2) as u32).collect(),
            vec![v as u32 - 1; b],
        ];
        for (k, tokens) in sets.iter().enumerate() {
            let want = one.score(h, w, params, tokens).unwrap();
            let got: Vec<RankScores> = scores_on_two_ranks((&hidden, &weight, d), &ls, params, tokens)
                .into_iter()
                .map(Result::unwrap)
                .collect();
            assert_rank_scores(&format!("{name}, tokens {k}"), &got, &want, tokens);
        }
        visible(&format!("scoring over two ranks on one GPU == one GPU: {name}"));
    }
}

#[test]
fn exact_log_sum_exps_over_two_ranks_equal_one_gpu_bit_for_bit() {
    // Issue 52 (`SamplingParams::exact_logsumexp`): two ranks in threads on one GPU through the
    // in-process all-gather, shards split evenly (padded) and unevenly (an offset that is a multiple
    // of 4 but not of 128), sample with log-probabilities and score given tokens: tokens, scores,
    // log-probabilities, raw log-probabilities and log-sum-exps equal the one-GPU exact call's bit
    // for bit, with per-row temperatures (greedy rows), a mask, a soft-cap and adjustments across
    // the shards. A truncating exact call over shards is a typed error.
    let Some(one) = gpu_or_skip("exact_log_sum_exps_over_two_ranks_equal_one_gpu_bit_for_bit") else { return };
    let (b, d, v) = (24usize, 256usize, 20_003usize);
    let even = ShardLayout::even(v, d, 2, 128).unwrap();
    let padded = even[1].offset + even[1].rows;
    let (hidden, weight) = padded_head(b, d, v, padded, 0x7A_E4);
    let uneven = layouts(&[7_204, v], v, d);
    let temps: Vec<f32> = (0..b).map(|r| [0.7, 0.0, 1.0, 1.6, 1e-3][r % 5]).collect();
    let base = SamplingParams::new(0.9, 0xE4)
        .with_streams((0..b as u64).collect())
        .with_exact_logsumexp(true)
        .with_logprobs(LogProbs::ProcessedAndRaw);
    let cases = [
        ("plain", base.clone()),
        ("per-row T (greedy rows)", base.clone().with_temperatures(temps.clone())),
        (
            "mask + soft-cap + adjustments",
            base.clone()
                .with_temperatures(temps)
                .with_allowed(half_mask(b, v, 0xE4))
                .with_softcap(20.0)
                .with_adjustments(cross_shard_adjustments(b, v)),
        ),
    ];
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight[..v * d], v, d));
    for (lname, ls) in [("even", &even), ("uneven", &uneven)] {
        for (name, params) in &cases {
            let at = format!("{lname} shards, {name}");
            let want = one.sample_scored(h, w, params).unwrap();
            let got = on_two_ranks((&hidden, &weight, d), ls, |rank, (hm, wm), out| {
                rank.sample_device(hm, wm, params, None, out).unwrap();
                rank.synchronize().unwrap();
                let stream = rank.gpu().stream().clone();
                let get = |x: Option<cudarc::driver::CudaView<'_, f32>>| stream.clone_dtoh(&x.unwrap()).unwrap();
                (
                    stream.clone_dtoh(&out.tokens()).unwrap(),
                    [get(out.logprobs()), get(out.raw_logprobs()), get(out.logsumexp())],
                )
            });
            for (r, (tokens, lps)) in got.iter().enumerate() {
                assert_eq!(tokens, &want.tokens, "{at}: rank {r}'s tokens");
                let wants = [&want.logprobs, &want.raw_logprobs, &want.logsumexp].map(|x| bits(x.as_ref().unwrap()));
                for (k, what) in ["log-probabilities", "raw log-probabilities", "log-sum-exps"].iter().enumerate() {
                    assert_eq!(bits(&lps[k]), wants[k], "{at}: rank {r}'s {what}");
                }
            }
            // Scores of the sampled tokens and of a token of each shard.
            for (k, tokens) in [
                want.tokens.clone(),
                (0..b).map(|r| (r * 131 % ls[1].offset) as u32).collect(),
                (0..b).map(|r| (ls[1].offset + r * 977 % (v - ls[1].offset)) as u32).collect(),
            ]
            .iter()
            .enumerate()
            {
                let want = one.score(h, w, params, tokens).unwrap();
                let got = scores_on_two_ranks((&hidden, &weight, d), ls, params, tokens);
                for (r, got) in got.into_iter().enumerate() {
                    let got = got.unwrap().scores;
                    let fields = [&want.logprobs, &want.raw_logprobs, &want.logsumexp, &want.raw_logsumexp];
                    for (f, want) in fields.iter().enumerate() {
                        assert_eq!(
                            bits(&got[f * b..(f + 1) * b]),
                            bits(want),
                            "{at}, tokens {k}: rank {r}'s field {f}"
                        );
                    }
                }
            }
            visible(&format!("exact log-sum-exps over two ranks == one GPU bit for bit: {at}"));
        }
    }
    let truncating = base.with_top_k(vec![5; b]);
    let refused = scores_on_two_ranks((&hidden, &weight, d), &even, &truncating, &vec![0; b]);
    for r in refused {
        assert!(matches!(r, Err(Error::Unsupported { .. })), "a truncating exact call over shards: {r:?}");
    }
}

#[test]
fn truncating_scores_over_two_ranks_split_long_calls_and_refuse_what_ranks_cannot_score() {
    // A truncating scoring call of more rows than one launch's fallback logits hold
    // (`truncated_score_rows`: 3,354 at V = 20,003) runs as two launches on every rank, whose
    // exchanges pair up, with and without top lists (random tokens: most ranks counted in the ranks'
    // fallback); a soft-cap with truncation (a scoring call has raw log-probabilities: finding 22) and
    // sparse adjustments with top lists are `Unsupported` on every rank before anything is enqueued.
    let Some(one) = gpu_or_skip("truncating_scores_over_two_ranks_split_long_calls_and_refuse_what_ranks_cannot_score")
    else {
        return;
    };
    let (b, d, v) = (3400usize, 64usize, 20_003usize);
    let ls = ShardLayout::even(v, d, 2, 128).unwrap();
    let padded = ls[1].offset + ls[1].rows;
    let (hidden, weight) = padded_head(b, d, v, padded, 0x7A_53);
    let params = SamplingParams::new(0.9, 0x53)
        .with_streams((0..b as u64).collect())
        .with_top_p((0..b).map(|r| [0.9, 1.0, 0.6][r % 3]).collect())
        .with_top_k((0..b).map(|r| [0, 50, 7, 0][r % 4]).collect());
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight[..v * d], v, d));
    let mut rng = TestRng::new(0x53);
    let tokens: Vec<u32> = (0..b).map(|_| (rng.next_u64() % v as u64) as u32).collect();
    for params in [params.clone(), params.clone().with_top_logprobs(4, false)] {
        let want = one.score(h, w, &params, &tokens).unwrap();
        let got: Vec<RankScores> =
            scores_on_two_ranks((&hidden, &weight, d), &ls, &params, &tokens).into_iter().map(Result::unwrap).collect();
        let top = params.top_logprobs;
        assert_rank_scores(&format!("{b} rows (two launches), top {top}"), &got, &want, &tokens);
    }
    let few = &tokens[..8];
    let (h8, w8) = (&hidden[..8 * d], &weight[..]);
    let adjusted =
        params.rows(0..8).unwrap().with_top_logprobs(3, false).with_adjustments(cross_shard_adjustments(8, v));
    for bad in [adjusted, params.rows(0..8).unwrap().with_softcap(5.0)] {
        for r in scores_on_two_ranks((h8, w8, d), &ls, &bad, few) {
            assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
        }
    }
    visible(&format!(
        "truncating scores over two ranks on one GPU == one GPU: {b} rows in two launches, with top lists too; refusals"
    ));
}
