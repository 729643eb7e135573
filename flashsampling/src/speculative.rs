//! Exact speculative verification with keyed noise (issue 52, part B).
//!
//! Request `r` brings `K_r` draft tokens and the target model's hidden states at its `K_r + 1`
//! positions `p_r, p_r + 1, …, p_r + K_r`. Every row is sampled once, with the row's request
//! controls and its **position** as the sample index of the noise key (seed, stream, position, vocab
//! index); drafts are accepted while the target's sample equals the draft, and the first target sample
//! that differs (or, after `K_r` matches, the one at the last position) is emitted after them.
//!
//! The emitted tokens are therefore exactly the tokens plain decoding draws with the same keys, one
//! position per step, whatever the draft: the target's sample at a position does not depend on the
//! batch, the step or the draft, only on its key and its hidden state. (Same hidden states: the
//! target's at the accepted prefix, which is what a speculative engine computes.) A draft model
//! sampled through this library with the same keys is coupled to the target through the shared
//! noise, and agrees wherever the two perturbed argmaxes agree.
//!
//! One sampling call scores every row (on either backend: [`crate::Sampler`]), so the cost is the
//! fused pass over the rows; the acceptance is a host loop over the tokens.

use crate::{Error, Matrix, Result, Sampler, SamplingParams};

/// The drafts of a verification call: request `r` owns hidden rows `offsets[r] .. offsets[r + 1]`
/// (`K_r + 1` of them, at least 1) and draft tokens `tokens[offsets[r] - r .. offsets[r + 1] - r - 1]`
/// (`K_r`), and its first row is at decode position `positions[r]`.
#[derive(Clone, Copy, Debug)]
pub struct Drafts<'a> {
    /// `R + 1` row offsets, from 0, strictly increasing, the last the hidden states' row count.
    pub offsets: &'a [usize],
    /// The draft tokens, `Σ K_r = rows − R`, request by request.
    pub tokens: &'a [u32],
    /// Each request's first position (the noise key's sample index of its first row).
    pub positions: &'a [u32],
}

/// What a verification call accepted and emits.
#[derive(Clone, Debug, PartialEq)]
pub struct Verified {
    /// Accepted drafts per request (`0 ..= K_r`).
    pub accepted: Vec<u32>,
    /// Emitted tokens per request: its accepted drafts, then the target's next token
    /// (`accepted[r] + 1` tokens).
    pub tokens: Vec<Vec<u32>>,
    /// With [`SamplingParams::logprobs`]: each emitted token's log-probability under the processed
    /// distribution at its position ([`crate::Samples::logprobs`]: what plain decoding reports for
    /// it, bit for bit), laid out as `tokens`.
    pub logprobs: Option<Vec<Vec<f32>>>,
    /// With [`crate::params::LogProbs::ProcessedAndRaw`]: the raw log-probabilities, likewise.
    pub raw_logprobs: Option<Vec<Vec<f32>>>,
}

/// Verifies `drafts` against the target's LM head: `hidden` holds every request's `K_r + 1` rows,
/// `params` the per-row controls of those rows (streams and seeds per row: give a request's rows its
/// stream and seed; its per-row temperatures, top-k/p, masks likewise). `params.positions` is set
/// here from `drafts.positions` (row `offsets[r] + i` at position `positions[r] + i`); `params.n`
/// must be 1. With `params.logprobs` the emitted tokens' log-probabilities come back too (the same
/// sampling call computes them). Bad offsets, lengths or tokens are typed errors before any sampling.
pub fn verify<T: crate::params::Element>(
    sampler: &Sampler,
    hidden: Matrix<'_, T>,
    weight: Matrix<'_, T>,
    params: &SamplingParams,
    drafts: Drafts<'_>,
) -> Result<Verified> {
    let rows = hidden.rows;
    let o = drafts.offsets;
    let bad = |reason: &str| Err(Error::InvalidDrafts(reason.into()));
    if o.len() < 2 || o[0] != 0 || *o.last().unwrap() != rows {
        return bad("offsets must run from 0 to the hidden states' row count, one more than the requests");
    }
    if o.windows(2).any(|w| w[1] <= w[0]) {
        return bad("every request needs at least one row (offsets strictly increasing)");
    }
    let requests = o.len() - 1;
    if drafts.positions.len() != requests {
        return Err(Error::LengthMismatch {
            buffer: "draft positions",
            expected: requests,
            actual: drafts.positions.len(),
        });
    }
    if drafts.tokens.len() != rows - requests {
        return Err(Error::LengthMismatch {
            buffer: "draft tokens",
            expected: rows - requests,
            actual: drafts.tokens.len(),
        });
    }
    if let Some(j) = drafts.tokens.iter().position(|&t| t as usize >= weight.rows) {
        // Draft `j` of request `r` is scored at hidden row `j + r` (its request's rows less its
        // last are the drafts' rows).
        let r = (0..requests).find(|&r| j < o[r + 1] - r - 1).unwrap_or(0);
        return Err(Error::TokenOutOfRange { row: j + r, token: drafts.tokens[j], v: weight.rows });
    }
    if params.n != 1 {
        return bad("one sample per row (n = 1)");
    }
    let mut positions = Vec::with_capacity(rows);
    for (r, &p) in drafts.positions.iter().enumerate() {
        for i in 0..(o[r + 1] - o[r]) {
            let Some(pos) = p.checked_add(i as u32) else { return Err(Error::InvalidSample(u32::MAX)) };
            positions.push(pos);
        }
    }
    let params = params.clone().with_positions(positions);
    let target = sampler.sample_scored(hidden, weight, &params)?;
    let mut accepted = Vec::with_capacity(requests);
    let mut tokens = Vec::with_capacity(requests);
    for r in 0..requests {
        let (rows_r, drafts_r) = (&target.tokens[o[r]..o[r + 1]], &drafts.tokens[o[r] - r..o[r + 1] - r - 1]);
        let k = drafts_r.iter().zip(rows_r).take_while(|(d, t)| d == t).count();
        accepted.push(k as u32);
        tokens.push(rows_r[..=k].to_vec());
    }
    // The emitted tokens are the target's samples of each request's first `accepted + 1` rows.
    let emitted = |all: &Option<Vec<f32>>| {
        all.as_ref().map(|lp| (0..requests).map(|r| lp[o[r]..=o[r] + accepted[r] as usize].to_vec()).collect())
    };
    let (logprobs, raw_logprobs) = (emitted(&target.logprobs), emitted(&target.raw_logprobs));
    Ok(Verified { accepted, tokens, logprobs, raw_logprobs })
}
