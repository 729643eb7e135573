//! Vocab-parallel sampling: an LM head split by vocabulary over ranks, as Megatron's and vLLM's
//! vocab-parallel LM heads hold it.
//!
//! Rank `r` holds a contiguous block of the weight's rows, `[V_r, D]`, starting at global vocab row
//! `offset_r`. The noise of token `i` is keyed by its **global** index (see `kernels::noise`), so each
//! rank computes, for every batch row, the best (perturbed score, global index) of its own rows — a
//! [`Candidate`], 8 bytes — and the token is the merge of the ranks' candidates, in any order. That is
//! the only thing ranks exchange: `B × 8` bytes each, not the `[B, V]` logits. The result is
//! bit-identical to the unsharded call with the same seed, streams and sample index.
//!
//! The last shard may extend past the model's vocabulary V (padding up to a multiple of the rank
//! count); rows at or past V are never scored. A shard entirely past V contributes nothing
//! ([`Candidate::EMPTY`] for every row).
//!
//! Here: the layout check ([`validate_shards`]), the exchange's merge ([`merge_shard_candidates`]),
//! and on the CPU backend the rank-local step ([`crate::CpuBackend::shard_candidates`]) and an
//! in-memory simulation of G ranks ([`crate::CpuBackend::sample_sharded`]), which the tests use to
//! check sharding invariance without GPUs. The GPU ranks (NCCL) are the tensor-parallel issue's work.

use flashsampling_kernels::Candidate;

use crate::error::{Error, Result};
use crate::params::Matrix;
use half::bf16;

/// One rank's shard of the LM head: `weight` holds global vocab rows `offset .. offset + weight.rows`
/// (row-major `[V_r, D]`).
#[derive(Clone, Copy, Debug)]
pub struct VocabShard<'a, T = bf16> {
    /// The shard's rows of the weight.
    pub weight: Matrix<'a, T>,
    /// Global vocab index of the shard's first row.
    pub offset: usize,
}

impl<'a, T> VocabShard<'a, T> {
    /// The shard of `weight.rows` rows starting at global row `offset`.
    pub fn new(weight: Matrix<'a, T>, offset: usize) -> Self {
        Self { weight, offset }
    }

    /// Splits a whole `[V, D]` weight into shards at the given global row boundaries
    /// (`ends[k]` = end of shard `k`, increasing, the last one `weight.rows`). For tests and
    /// simulations; a rank holds only its own shard.
    pub fn split(weight: Matrix<'a, T>, ends: &[usize]) -> Result<Vec<Self>> {
        let mut start = 0;
        let mut shards = Vec::with_capacity(ends.len());
        for &end in ends {
            if end <= start || end > weight.rows {
                return Err(Error::InvalidShards { reason: "boundaries must increase up to V", at: end });
            }
            let d = weight.cols;
            let data = weight.data.get(start * d..end * d).ok_or(Error::LengthMismatch {
                buffer: "LM-head weight",
                expected: weight.rows * d,
                actual: weight.data.len(),
            })?;
            shards.push(Self::new(Matrix::new(data, end - start, d), start));
            start = end;
        }
        if start != weight.rows {
            return Err(Error::InvalidShards { reason: "boundaries must end at V", at: start });
        }
        Ok(shards)
    }

    /// Global row one past the shard's last.
    pub fn end(&self) -> usize {
        self.offset + self.weight.rows
    }

    /// How many of the shard's rows are vocabulary rows of a `vocab`-entry head (those below it; the
    /// rest is padding, never scored).
    pub fn rows_in(&self, vocab: usize) -> usize {
        self.weight.rows.min(vocab.saturating_sub(self.offset))
    }
}

/// Checks that `shards`, in rank order, tile the vocabulary `0 .. vocab`: the first starts at 0,
/// each starts where the previous one ends, none is empty, and together they reach `vocab` (the
/// last may go past it: padding). The per-shard shape checks (D, lengths) come with the call.
pub fn validate_shards<T>(shards: &[VocabShard<'_, T>], vocab: usize) -> Result<()> {
    if vocab == 0 {
        return Err(Error::EmptyVocab);
    }
    if shards.is_empty() {
        return Err(Error::InvalidShards { reason: "no shards", at: 0 });
    }
    let mut next = 0;
    for s in shards {
        if s.weight.rows == 0 {
            return Err(Error::InvalidShards { reason: "an empty shard", at: s.offset });
        }
        if s.offset != next {
            let reason = if s.offset > next { "a gap between shards" } else { "overlapping shards" };
            return Err(Error::InvalidShards { reason, at: next.min(s.offset) });
        }
        next = s.end();
    }
    if next < vocab {
        return Err(Error::InvalidShards { reason: "the shards end before V", at: next });
    }
    Ok(())
}

/// The exchange's merge: per batch row, the best of the ranks' candidates (any order: the merge is
/// associative and commutative). Every rank must send the same number of rows.
pub fn merge_shard_candidates(parts: &[Vec<Candidate>]) -> Result<Vec<Candidate>> {
    let Some(first) = parts.first() else {
        return Err(Error::InvalidShards { reason: "no shards", at: 0 });
    };
    let b = first.len();
    if let Some(p) = parts.iter().find(|p| p.len() != b) {
        return Err(Error::LengthMismatch { buffer: "shard candidates", expected: b, actual: p.len() });
    }
    Ok((0..b).map(|row| parts.iter().fold(Candidate::EMPTY, |acc, p| acc.merge(p[row]))).collect())
}
