//! Scoring given tokens (issue 52.1): per row, the log-probability of a token the caller names —
//! prompt log-probabilities, the reference policy's log-probabilities in RL training, perplexity —
//! under the same definitions as sampling, without a `[rows, V]` logits buffer in the caller's
//! hands. [`crate::CpuBackend::score`] computes them, and [`crate::GpuBackend::score`] in the fused
//! pass (its truncating pass for top-k / top-p / min-p and top log-probabilities).

use crate::error::{Error, Result};

/// Per row (`[B]`), the log-probabilities of its given token and the row's log-sum-exps.
///
/// - `logprobs`: the processed log-probability — after the call's controls (soft-cap, adjustments,
///   mask, temperature, top-k / top-p / min-p), exactly as [`crate::Samples::logprobs`] defines it for
///   a sampled token: `z / T − logsumexp`; `−∞` for a token the mask or the truncation removes; for a
///   greedy row (`T = 0`) `0` for the token greedy sampling draws (the lowest-index argmax) and `−∞`
///   for every other.
/// - `raw_logprobs`: `log softmax(y)[t]` over the raw logits (`T = 1`, nothing applied).
/// - `logsumexp`: the row's log-sum-exp of `z / T` over its kept tokens (NaN for a greedy row);
///   `raw_logsumexp`: of the raw logits.
/// - With [`crate::SamplingParams::top_logprobs`] = `k > 0`: `top_logprobs`, each row's `k` most
///   likely tokens as sampling lists them ([`crate::Samples::top_logprobs`]: the processed
///   distribution, or the raw one with [`crate::SamplingParams::top_logprobs_raw`]), and `ranks`,
///   the given token's place in that order (1 = first: one plus the tokens with a larger logit, or
///   an equal one at a lower index; over every token, so a token the controls remove ranks after
///   every kept one).
///
/// Scoring the token a call sampled gives, bit for bit, the log-probabilities that call reported
/// (the same code computes both).
#[derive(Clone, Debug, PartialEq)]
pub struct Scores {
    /// Processed log-probability of each row's token.
    pub logprobs: Vec<f32>,
    /// Raw log-probability of each row's token.
    pub raw_logprobs: Vec<f32>,
    /// Each row's processed log-sum-exp (NaN when greedy).
    pub logsumexp: Vec<f32>,
    /// Each row's raw log-sum-exp.
    pub raw_logsumexp: Vec<f32>,
    /// With top log-probabilities asked for: each row's most likely tokens.
    pub top_logprobs: Option<crate::TopLogprobs>,
    /// With top log-probabilities asked for: each row's token's rank (1-based) in their order.
    pub ranks: Option<Vec<u32>>,
}

impl Scores {
    /// Room for `rows` rows.
    pub(crate) fn with_capacity(rows: usize) -> Self {
        let v = || Vec::with_capacity(rows);
        Self { logprobs: v(), raw_logprobs: v(), logsumexp: v(), raw_logsumexp: v(), top_logprobs: None, ranks: None }
    }

    /// Appends a row: (processed, raw) log-probabilities, then (processed, raw) log-sum-exps.
    pub(crate) fn push(&mut self, (logprob, raw_logprob): (f32, f32), (lse, raw_lse): (f32, f32)) {
        self.logprobs.push(logprob);
        self.raw_logprobs.push(raw_logprob);
        self.logsumexp.push(lse);
        self.raw_logsumexp.push(raw_lse);
    }

    /// Appends a row's top log-probabilities and its token's rank.
    pub(crate) fn push_top(&mut self, top: Vec<(u32, f32)>, rank: u32) {
        self.top_logprobs.get_or_insert_with(Vec::new).push(top);
        self.ranks.get_or_insert_with(Vec::new).push(rank);
    }
}

/// The given tokens of a `rows × v` call: one per row, each below `v` (typed errors, before any
/// work).
pub fn check_tokens(tokens: &[u32], rows: usize, v: usize) -> Result<()> {
    if tokens.len() != rows {
        return Err(Error::LengthMismatch { buffer: "tokens to score", expected: rows, actual: tokens.len() });
    }
    if let Some(row) = tokens.iter().position(|&t| t as usize >= v) {
        return Err(Error::TokenOutOfRange { row, token: tokens[row], v });
    }
    Ok(())
}
