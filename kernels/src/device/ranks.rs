//! The vocab-parallel merge kernel: after the ranks' results are all-gathered (NCCL), every rank
//! folds them into the whole head's tokens, scores and log-probabilities with the no_std
//! [`merge_rank_row`] — in rank order, so every rank writes the same bits.
//!
//! # Parameters
//! [`MergeRanksParams`] by value; launch with `grid = ceil(B / MERGE_RANKS_THREADS)` blocks of
//! [`MERGE_RANKS_THREADS`] threads, no shared memory.
//!
//! # Thread mapping
//! Thread `i` merges row `i` over the `G` ranks.

use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};

use super::collective::exp;
use super::ptx::lg2_approx_f32;
#[cfg(doc)]
use crate::config::MERGE_RANKS_THREADS;
use crate::params::{MergeRanksParams, RowExact};
use crate::ranks::{
    RankLogProbs, RankRow, RankTarget, merge_exact_rank_row, merge_exact_target, merge_rank_row, merge_target,
};

/// Merges row `i` of the gathered results.
///
/// # Safety
/// Launched as documented in the module; `gathered` holds `G` blocks of `K·B` words, `rank_words`
/// apart; the outputs hold `B` entries (the log-probability ones when `K ≥ 6`, the target ones and
/// the given tokens when `K = 8`).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn merge_ranks(p: MergeRanksParams) {
    // SAFETY: special-register reads.
    let i = unsafe { _block_idx_x() * _block_dim_x() + _thread_idx_x() };
    if i >= p.b {
        return;
    }
    let (b, k, stride) = (p.b as usize, p.k as usize, p.rank_words as usize);
    let word = |rank: u32, field: usize| -> u32 {
        // SAFETY: rank < G, field < K, i < B: inside rank `rank`'s `[K, B]` block.
        unsafe { *p.gathered.add(rank as usize * stride + field * b + i as usize) }
    };
    let lps = |r: u32| RankLogProbs {
        logprob: f32::from_bits(word(r, 2)),
        raw_logprob: f32::from_bits(word(r, 3)),
        logsumexp: f32::from_bits(word(r, 4)),
        raw_logsumexp: f32::from_bits(word(r, 5)),
    };
    let rows = (0..p.g).map(|r| RankRow {
        token: word(r, 0),
        score: f32::from_bits(word(r, 1)),
        logprobs: (k >= 6).then(|| lps(r)),
    });
    let ln = |x: f32| lg2_approx_f32(x) * core::f32::consts::LN_2;
    let m = merge_rank_row(rows, exp, ln);
    if k == 8 {
        let targets = (0..p.g).map(|r| {
            (lps(r), RankTarget { logprob: f32::from_bits(word(r, 6)), raw_logprob: f32::from_bits(word(r, 7)) })
        });
        // SAFETY: i < B: inside the given tokens and the target outputs (present when K = 8).
        unsafe {
            let (lp, raw) = merge_target(targets, &m, *p.targets.add(i as usize));
            *p.target_logprobs.add(i as usize) = lp;
            *p.target_raw_logprobs.add(i as usize) = raw;
        }
    }
    // SAFETY: i < B: inside the outputs (the log-probability ones exist when K ≥ 6).
    unsafe {
        *p.tokens.add(i as usize) = m.token;
        *p.scores.add(i as usize) = m.score;
        if let Some(l) = m.logprobs {
            *p.logprobs.add(i as usize) = l.logprob;
            *p.raw_logprobs.add(i as usize) = l.raw_logprob;
            *p.logsumexp.add(i as usize) = l.logsumexp;
            if !p.raw_logsumexp.is_null() {
                *p.raw_logsumexp.add(i as usize) = l.raw_logsumexp;
            }
        }
    }
}

/// [`merge_ranks`] on the exact log-sum-exp path (`SamplingParams::exact_logsumexp` on the host):
/// row `i`'s ranks' bins merged and its log-probabilities subtracted from the winner's (and the
/// given token's) logits with the one-GPU reduction's functions ([`merge_exact_rank_row`],
/// [`merge_exact_target`]): the one-GPU exact call's bits.
///
/// # Safety
/// As [`merge_ranks`] with `K ≥ 6`, and each rank's block holds `B` [`RowExact`] records
/// `exact_at` words in (16-byte aligned, `exact_at ≥ K·B`).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn merge_ranks_exact(p: MergeRanksParams) {
    // SAFETY: special-register reads.
    let i = unsafe { _block_idx_x() * _block_dim_x() + _thread_idx_x() };
    if i >= p.b {
        return;
    }
    let (b, stride) = (p.b as usize, p.rank_words as usize);
    let word = |rank: u32, field: usize| -> u32 {
        // SAFETY: rank < G, field < K, i < B: inside rank `rank`'s `[K, B]` block.
        unsafe { *p.gathered.add(rank as usize * stride + field * b + i as usize) }
    };
    // The ranks' tokens and scores; their log-sum-exp word says whether the row is greedy (NaN).
    let row = |r: u32| RankRow {
        token: word(r, 0),
        score: f32::from_bits(word(r, 1)),
        logprobs: Some(RankLogProbs {
            logprob: 0.0,
            raw_logprob: 0.0,
            logsumexp: f32::from_bits(word(r, 4)),
            raw_logsumexp: 0.0,
        }),
    };
    // SAFETY: i < B: rank `r`'s record `i` is inside its block (the caller's contract).
    let record = |r: u32| unsafe {
        *(p.gathered.add(r as usize * stride + p.exact_at as usize) as *const RowExact).add(i as usize)
    };
    let (m, _) = merge_exact_rank_row((0..p.g).map(|r| (row(r), record(r))), lg2_approx_f32);
    // SAFETY: i < B: inside the outputs (the log-probability ones; the target ones and the given
    // tokens with K = 8).
    unsafe {
        if p.k == 8 {
            let (lp, raw) = merge_exact_target((0..p.g).map(record), &m, *p.targets.add(i as usize));
            *p.target_logprobs.add(i as usize) = lp;
            *p.target_raw_logprobs.add(i as usize) = raw;
        }
        *p.tokens.add(i as usize) = m.token;
        *p.scores.add(i as usize) = m.score;
        if let Some(l) = m.logprobs {
            *p.logprobs.add(i as usize) = l.logprob;
            *p.raw_logprobs.add(i as usize) = l.raw_logprob;
            *p.logsumexp.add(i as usize) = l.logsumexp;
            if !p.raw_logsumexp.is_null() {
                *p.raw_logsumexp.add(i as usize) = l.raw_logsumexp;
            }
        }
    }
}
