//! [`CpuBackend::score`]: the log-probabilities of given tokens ([`crate::score`]), on the paths
//! sampling takes — the tiled pass's log-mass for rows that keep every token, the materialized rows
//! for rows that truncate — so that a sampled token scores what its call reported.

use flashsampling_kernels::Candidate;
use flashsampling_kernels::epilogue::update_tile;

use super::exact::{RowResult, lse_f64, materialize_row, rank_of, top_list};
use super::{CpuBackend, Slot, log_prob, logit_of, samples_of, slots, tiled_samples};
use crate::error::Result;
use crate::params::Shape;
use crate::params::{Element, LogProbs, Matrix, SamplingParams, validate};
use crate::score::{Scores, check_tokens};
use crate::{Samples, check_samples_of};

impl CpuBackend {
    /// Per row of `hidden`, the log-probabilities of `tokens[row]` under `params`' controls, and the
    /// row's log-sum-exps ([`Scores`]); with [`SamplingParams::top_logprobs`] = `k > 0` also each
    /// row's top `k` and its token's rank. `params.n` and `params.logprobs` do not matter (the
    /// distribution of a row does not depend on them); the sample index does not either. Validation
    /// is sampling's, then one token per row below V; a row sampling would refuse (every logit `−∞`,
    /// a NaN logit) is the same error here. Memory: O(B) results (O(B·k) with top log-probabilities),
    /// plus one materialized row at a time when the call truncates or asks for the top `k` (rows
    /// are scored one after another: a prefill of any length needs no `[rows, V]` buffer).
    ///
    /// ```
    /// use flashsampling::{CpuBackend, Matrix, SamplingParams};
    ///
    /// let (d, v) = (8, 4);
    /// let hidden = vec![half::bf16::ONE; d];
    /// let weight = vec![half::bf16::ZERO; v * d]; // every logit 0: uniform over 4 tokens
    /// let s = CpuBackend::new().score(Matrix::new(&hidden, 1, d), Matrix::new(&weight, v, d), &SamplingParams::new(1.0, 0), &[3])?;
    /// assert!((s.logprobs[0] - 0.25f32.ln()).abs() < 1e-6 && (s.raw_logsumexp[0] - 4f32.ln()).abs() < 1e-6);
    /// # Ok::<(), flashsampling::Error>(())
    /// ```
    pub fn score<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
        tokens: &[u32],
    ) -> Result<Scores> {
        Ok(self.score_and_sample(hidden, weight, params, tokens, false)?.0)
    }

    /// Samples as [`Self::sample_scored`] does and scores `tokens` as [`Self::score`] does, in one
    /// pass over the weight when `params.n` is 1 (the samples are the pass's winners, the scores read
    /// its log-mass or materialized rows); both results bit for bit those of the two calls. A
    /// speculative or RL step that draws a token and scores a given one (the draft's, the
    /// reference's) reads the head once.
    ///
    /// ```
    /// use flashsampling::{CpuBackend, Matrix, SamplingParams};
    ///
    /// let (d, v) = (8, 4);
    /// let hidden = vec![half::bf16::ONE; d];
    /// let weight = vec![half::bf16::ZERO; v * d];
    /// let (h, w, p) = (Matrix::new(&hidden, 1, d), Matrix::new(&weight, v, d), SamplingParams::new(1.0, 5));
    /// let (samples, scores) = CpuBackend::new().sample_and_score(h, w, &p, &[2])?;
    /// assert_eq!(samples.tokens, CpuBackend::new().sample(h, w, &p)?);
    /// assert!((scores.logprobs[0] - 0.25f32.ln()).abs() < 1e-6);
    /// # Ok::<(), flashsampling::Error>(())
    /// ```
    pub fn sample_and_score<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
        tokens: &[u32],
    ) -> Result<(Samples, Scores)> {
        let (scores, samples) = self.score_and_sample(hidden, weight, params, tokens, params.n == 1)?;
        let samples = match samples {
            Some(s) => s,
            None => self.sample_scored(hidden, weight, params)?,
        };
        check_samples_of(&samples, params.n as usize, hidden, &[weight.data])?;
        Ok((samples, scores))
    }

    /// [`Self::score`], and with `want_samples` (for `params.n = 1`) the samples of the same pass.
    fn score_and_sample<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
        tokens: &[u32],
        want_samples: bool,
    ) -> Result<(Scores, Option<Samples>)> {
        let (shape, _) = validate(
            (hidden.rows, hidden.cols, hidden.data.len()),
            (weight.rows, weight.cols, weight.data.len()),
            params,
        )?;
        check_tokens(tokens, shape.b, shape.v)?;
        let mut p = params.clone();
        (p.n, p.logprobs) = (1, LogProbs::ProcessedAndRaw);
        let slots = slots(&p, shape.b);
        if p.runs_truncation(shape.v) {
            let want = want_samples.then_some(params);
            return self.score_materialized(hidden, weight, (shape, &slots), &p, tokens, want);
        }
        let (winners, mass) = self.winners(hidden.data, weight.data, (0, shape.v), shape, &slots, &p, true);
        check_samples_of(&samples_of(&winners), 1, hidden, &[weight.data])?;
        // As `sample_scored_rows` builds them from its winners and log-mass.
        let samples = want_samples.then(|| tiled_samples(&winners, &mass, params, &slots, (hidden, weight)));
        let mut out = Scores::with_capacity(shape.b);
        for (r, &t) in tokens.iter().enumerate() {
            let y = logit_of(hidden, weight, r, t);
            // The same arithmetic as the sampled token's (`tiled::add_logprobs`).
            let z = p.row_logits(r).one(y, t as usize) as f64;
            let inv_t = slots[r].inv_temperature;
            let (lse, raw_lse) = (mass[r].processed_lse(), mass[r].raw_lse());
            let processed = if inv_t > 0.0 {
                log_prob(z * inv_t, lse) as f32
            } else if t == winners[r].token() {
                0.0
            } else {
                f32::NEG_INFINITY
            };
            let lse = if inv_t > 0.0 { lse as f32 } else { f32::NAN };
            out.push((processed, log_prob(y as f64, raw_lse) as f32), (lse, raw_lse as f32));
        }
        Ok((out, samples))
    }

    /// [`Self::score`] for a call that truncates or asks for top log-probabilities: each row
    /// materialized as sampling materializes it (`exact::materialize_row`), its log-probabilities
    /// as `exact::RowResult::of` computes them, its top list as `exact::top_list`. With `sampling`
    /// (the call's own parameters, `n = 1`), also its samples, as `sample_materialized` gives them.
    fn score_materialized<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        (shape, slots): (Shape, &[Slot]),
        params: &SamplingParams,
        tokens: &[u32],
        sampling: Option<&SamplingParams>,
    ) -> Result<(Scores, Option<Samples>)> {
        let mut out = Scores::with_capacity(shape.b);
        let mut winners = Vec::with_capacity(shape.b);
        let mut rows = Vec::new();
        for (r, &t) in tokens.iter().enumerate() {
            let slot = &slots[r];
            let inv_t = slot.inv_temperature;
            let (raw, z) = materialize_row(hidden.data, weight.data, shape, r, params, inv_t, true);
            // The row's sample (as `sample_materialized` draws it): its errors, and a greedy row's token.
            let mut c = Candidate::EMPTY;
            update_tile(&mut c, &z, 0, shape.v as u32, &slot.noise, &slot.transform);
            winners.push(c);
            let y = raw.expect("asked for");
            if let Some(sp) = sampling {
                rows.push(RowResult::of(&z, Some(&y), inv_t, &[c], sp));
            }
            let raw_lse = lse_f64(y.iter().map(|&x| x as f64));
            let greedy = inv_t == 0.0;
            let lse = if greedy { f64::NAN } else { lse_f64(z.iter().map(|&x| x as f64 * inv_t)) };
            let processed = match greedy {
                false => log_prob(z[t as usize] as f64 * inv_t, lse) as f32,
                true if t == c.token() => 0.0,
                true => f32::NEG_INFINITY,
            };
            out.push((processed, log_prob(y[t as usize] as f64, raw_lse) as f32), (lse as f32, raw_lse as f32));
            if params.top_logprobs > 0 {
                // As sampling lists them (`exact::RowResult::of`), and the token's place in that order.
                let k = params.top_logprobs;
                let (top, rank) = if params.top_logprobs_raw {
                    (top_list(&y, (raw_lse, 1.0), k, false), rank_of(&y, t as usize))
                } else {
                    (top_list(&z, (lse, inv_t), k, greedy), rank_of(&z, t as usize))
                };
                out.push_top(top, rank);
            }
        }
        check_samples_of(&samples_of(&winners), 1, hidden, &[weight.data])?;
        Ok((out, sampling.map(|sp| RowResult::samples(rows, sp))))
    }
}

impl CpuBackend {
    /// [`Self::score`] over a vocab-sharded head, simulated in memory as the GPU's ranks run it
    /// (`TpRank::score_device`): each shard's results ([`Self::shard_results`]) and its scores of
    /// the given tokens among its rows (NaN for the others; `−∞` for a token the controls remove),
    /// then the merge in rank order with the kernel crate's [`merge_rank_row`] and
    /// [`merge_target`] (the GPU's `merge_ranks` runs the same functions). `shards` must tile
    /// `0 .. vocab` in order; the results equal [`Self::score`] on the whole weight within f32
    /// rounding of the merge (−∞ and NaN exactly). Truncating controls and top log-probabilities
    /// are [`crate::Error::Unsupported`], as on the GPU's ranks.
    ///
    /// [`merge_rank_row`]: flashsampling_kernels::ranks::merge_rank_row
    /// [`merge_target`]: flashsampling_kernels::ranks::merge_target
    pub fn score_sharded<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        shards: &[crate::shard::VocabShard<'_, T>],
        vocab: usize,
        params: &SamplingParams,
        tokens: &[u32],
    ) -> Result<Scores> {
        use flashsampling_kernels::ranks::{RankTarget, merge_rank_row, merge_target};
        crate::shard::validate_shards(shards, vocab)?;
        check_tokens(tokens, hidden.rows, vocab)?;
        let mut p = params.clone();
        (p.n, p.logprobs) = (1, LogProbs::ProcessedAndRaw);
        let slots = slots(&p, hidden.rows);
        let d = hidden.cols;
        let parts = shards.iter().map(|&s| self.shard_results(hidden, s, vocab, &p)).collect::<Result<Vec<_>>>()?;
        // Each shard's scores of the given tokens among its rows (what a rank's reduction writes).
        let target = |s: &crate::shard::VocabShard<'_, T>, part: &[flashsampling_kernels::ranks::RankRow], r: usize| {
            let t = tokens[r] as usize;
            let l = part[r].logprobs.expect("log-probabilities asked for");
            if t < s.offset || t >= s.offset + s.rows_in(vocab) || part[r].score.is_nan() {
                return (l, RankTarget { logprob: f32::NAN, raw_logprob: f32::NAN });
            }
            let y = logit_of(hidden, Matrix::new(s.weight.data, s.weight.rows, d), r, (t - s.offset) as u32);
            let zt = p.row_logits(r).one(y, t) as f64 * slots[r].inv_temperature;
            let logprob = if slots[r].inv_temperature == 0.0 {
                if part[r].token == t as u32 { 0.0 } else { f32::NEG_INFINITY }
            } else if zt == f64::NEG_INFINITY {
                f32::NEG_INFINITY
            } else {
                log_prob(zt, l.logsumexp as f64) as f32
            };
            (l, RankTarget { logprob, raw_logprob: log_prob(y as f64, l.raw_logsumexp as f64) as f32 })
        };
        let exp = |x: f32| (x as f64).exp() as f32;
        let ln = |x: f32| (x as f64).ln() as f32;
        let mut out = Scores::with_capacity(hidden.rows);
        let mut merged_rows = Vec::with_capacity(hidden.rows);
        for r in 0..hidden.rows {
            let merged = merge_rank_row(parts.iter().map(|part| part[r]), exp, ln);
            let (lp, raw) =
                merge_target(shards.iter().zip(&parts).map(|(s, part)| target(s, part, r)), &merged, tokens[r]);
            let g = merged.logprobs.expect("log-probabilities asked for");
            out.push((lp, raw), (g.logsumexp, g.raw_logsumexp));
            merged_rows.push(Candidate { score: merged.score, index: merged.token });
        }
        // A row sampling would refuse is this call's error too.
        let scored: Vec<&[T]> =
            shards.iter().map(|s| &s.weight.data[..(s.rows_in(vocab) * d).min(s.weight.data.len())]).collect();
        check_samples_of(&samples_of(&merged_rows), 1, hidden, &scored)?;
        Ok(out)
    }
}
