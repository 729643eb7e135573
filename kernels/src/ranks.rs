//! The vocab-parallel merge: each rank of a vocabulary-sharded LM head samples over its own rows
//! (noise keyed by the **global** vocab index, so its candidate is the whole head's restricted to
//! its rows) and the ranks exchange, per row, only their result: the winning (score, token), and
//! with log-probabilities the local log-probabilities and log-sum-exps. [`merge_rank_row`] folds
//! the ranks' results in rank order into the whole head's: the token is the [`Candidate`] merge
//! (order-independent, so bit-identical to one GPU), the log-sum-exps are log-mass merges, and the
//! winner's log-probabilities are rescaled from its shard's log-sum-exp to the global one.
//!
//! Used by the GPU's `merge_ranks` kernel (after an NCCL all-gather) and by the CPU backend's
//! in-memory simulation of ranks.

use crate::candidate::{Candidate, INVALID_INDEX};
use crate::logmass::{LogMass, log_prob, target_log_probs, token_log_probs};
use crate::params::RowExact;

/// One rank's result for one row: what the ranks exchange.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankRow {
    /// The rank's winning token (global index; [`INVALID_INDEX`] when none) and score.
    pub token: u32,
    /// Its perturbed score (NaN for a NaN logit, `−∞` when every token of the shard is masked).
    pub score: f32,
    /// Log-probabilities, when the launch computed them.
    pub logprobs: Option<RankLogProbs>,
}

/// A rank's log-probability outputs for one row, over its own shard.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankLogProbs {
    /// The rank's token's processed log-probability over the shard (`0` for a greedy row).
    pub logprob: f32,
    /// Its raw log-probability over the shard.
    pub raw_logprob: f32,
    /// The shard's log-sum-exp of `z / T` (NaN for a greedy row, `−∞` when nothing is allowed).
    pub logsumexp: f32,
    /// The shard's log-sum-exp of the raw logits.
    pub raw_logsumexp: f32,
}

impl RankRow {
    /// The row's candidate: (score, token). A rank without a token (NaN or `−∞` score) loses to
    /// every rank with one and merges to no token with every rank without one — the candidate's
    /// own semantics, so the merged token equals the merge of the ranks' full candidates.
    #[inline(always)]
    pub fn candidate(&self) -> Candidate {
        Candidate { score: self.score, index: self.token }
    }
}

/// The whole head's row from the ranks' rows (any count, taken in the order given).
///
/// Tokens and scores: the candidate merge, so the same as one GPU's bit for bit. Log-probabilities
/// (when every rank has them): the global log-sum-exps are the log-mass merge of the ranks'
/// (each rank's `lse` is a mass `(lse, 1)`), and the winning rank's log-probabilities are shifted by
/// its shard's log-sum-exp minus the global one. `exp`/`ln` are the backend's.
#[inline(always)]
pub fn merge_rank_row(
    rows: impl Iterator<Item = RankRow>,
    exp: impl Fn(f32) -> f32 + Copy,
    ln: impl Fn(f32) -> f32,
) -> RankRow {
    let mut best = Candidate::EMPTY;
    let mut winner: Option<RankLogProbs> = None;
    let (mut mass, mut raw_mass) = (LogMass::EMPTY, LogMass::EMPTY);
    let mut greedy = false;
    let mut all_lp = true;
    let mut any = false;
    for r in rows {
        any = true;
        let c = r.candidate();
        let wins = c.beats(best);
        if wins {
            best = c;
        }
        match r.logprobs {
            Some(l) => {
                if wins {
                    winner = Some(l);
                }
                greedy |= l.logsumexp.is_nan();
                mass = mass.merge_with(LogMass { max: l.logsumexp, sum: 1.0 }, exp);
                raw_mass = raw_mass.merge_with(LogMass { max: l.raw_logsumexp, sum: 1.0 }, exp);
            }
            None => all_lp = false,
        }
    }
    let token = best.token();
    let logprobs = if all_lp && any {
        let (lse, raw_lse) = (if greedy { f32::NAN } else { mass.lse_with(&ln) }, raw_mass.lse_with(&ln));
        // The winner's logit (over T) from its shard's values: `+∞` when its shard's log-sum-exp is
        // (its log-probability there is then 0), so the `+∞` rule carries over.
        let logit = |lp: f32, lse: f32| if lse == f32::INFINITY { lse } else { lp + lse };
        Some(match (token != INVALID_INDEX, winner) {
            (true, Some(w)) => RankLogProbs {
                logprob: if greedy { 0.0 } else { log_prob(logit(w.logprob, w.logsumexp), lse) },
                raw_logprob: log_prob(logit(w.raw_logprob, w.raw_logsumexp), raw_lse),
                logsumexp: lse,
                raw_logsumexp: raw_lse,
            },
            _ => RankLogProbs { logprob: f32::NAN, raw_logprob: f32::NAN, logsumexp: lse, raw_logsumexp: raw_lse },
        })
    } else {
        None
    };
    RankRow { token, score: best.score, logprobs }
}

/// One rank's scores of a row's given token (issue 52): its log-probabilities over the rank's shard
/// (`reduce_rows`' target outputs), NaN when the token is not among the shard's rows or the row has
/// a NaN logit; the processed one `−∞` when the controls remove the token, `0` / `−∞` for a greedy
/// row by the shard's own token (the merge decides that by the whole head's token).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankTarget {
    /// The token's processed log-probability over the shard.
    pub logprob: f32,
    /// Its raw log-probability over the shard.
    pub raw_logprob: f32,
}

/// The whole head's (processed, raw) log-probabilities of a row's given token `target` from the
/// ranks' (in rank order: each rank's shard log-probabilities with its target scores) and their
/// merge `merged` ([`merge_rank_row`]'s result, with log-probabilities): the token's shard is the
/// one rank whose raw score is not NaN, and its values are rescaled from that shard's
/// log-sum-exps to the global ones, as [`merge_rank_row`] rescales the winner's. A greedy row: 0
/// for the whole head's token, `−∞` for any other. NaN for both when no rank holds the token, or
/// the row has a NaN logit.
#[inline(always)]
pub fn merge_target(
    rows: impl Iterator<Item = (RankLogProbs, RankTarget)>,
    merged: &RankRow,
    target: u32,
) -> (f32, f32) {
    let Some(global) = merged.logprobs else { return (f32::NAN, f32::NAN) };
    if merged.score.is_nan() {
        return (f32::NAN, f32::NAN);
    }
    let mut own = None;
    for (shard, t) in rows {
        if !t.raw_logprob.is_nan() {
            own = Some((shard, t));
        }
    }
    let Some((shard, t)) = own else { return (f32::NAN, f32::NAN) };
    let logit = |lp: f32, lse: f32| if lse == f32::INFINITY { lse } else { lp + lse };
    let processed = if global.logsumexp.is_nan() {
        if target == merged.token { 0.0 } else { f32::NEG_INFINITY }
    } else if t.logprob == f32::NEG_INFINITY {
        f32::NEG_INFINITY
    } else {
        log_prob(logit(t.logprob, shard.logsumexp), global.logsumexp)
    };
    (processed, log_prob(logit(t.raw_logprob, shard.raw_logsumexp), global.raw_logsumexp))
}

/// The exact path's merge of a row ([`RowExact`], issue 52): the ranks' rows (token and score;
/// log-probabilities whose `logsumexp` is NaN for a greedy row) with their records (each shard's
/// exact log-masses and its token's logits), in any order. The token is the candidate merge, as in
/// [`merge_rank_row`]; the log-sum-exps are those of the merged exact masses (`log2` the backend's
/// `log₂` on `[1, 2)`, [`crate::exactmass::ExactMass::lse_with`]), and the log-probabilities the
/// winner's logits minus them ([`token_log_probs`]): the arithmetic `reduce_rows` does on one GPU
/// over the same values, so the same bits. Returns the merged row and the merged masses.
#[inline(always)]
pub fn merge_exact_rank_row(
    rows: impl Iterator<Item = (RankRow, RowExact)>,
    log2: impl Fn(f32) -> f32 + Copy,
) -> (RankRow, RowExact) {
    let mut best = Candidate::EMPTY;
    let mut winner = RowExact::EMPTY;
    let mut masses = RowExact::EMPTY;
    let mut greedy = false;
    for (r, e) in rows {
        let c = r.candidate();
        if c.beats(best) {
            best = c;
            winner = e;
        }
        greedy |= r.logprobs.is_some_and(|l| l.logsumexp.is_nan());
        masses = masses.merge_masses(e);
    }
    let lses = (masses.processed.lse_with(log2), masses.raw.lse_with(log2));
    let token = best.token();
    let valid = token != INVALID_INDEX;
    let logits = if valid { (winner.token[0], winner.token[1]) } else { (f32::NAN, f32::NAN) };
    let (logprob, raw_logprob, logsumexp) = token_log_probs(valid, greedy, logits, lses);
    let logprobs = RankLogProbs { logprob, raw_logprob, logsumexp, raw_logsumexp: lses.1 };
    (RankRow { token, score: best.score, logprobs: Some(logprobs) }, masses)
}

/// The exact path's given-token scores of a row: from the record of the rank whose rows hold
/// `target` (its raw logit not NaN) and the merge `merged` ([`merge_exact_rank_row`]'s row), by
/// [`target_log_probs`], as `reduce_rows` scores it on one GPU. NaN for both where no rank holds it.
#[inline(always)]
pub fn merge_exact_target(records: impl Iterator<Item = RowExact>, merged: &RankRow, target: u32) -> (f32, f32) {
    let Some(l) = merged.logprobs else { return (f32::NAN, f32::NAN) };
    let mut own = (f32::NAN, f32::NAN);
    for e in records {
        if !e.target[1].is_nan() {
            own = (e.target[0], e.target[1]);
        }
    }
    let flags = (merged.score.is_nan(), l.logsumexp.is_nan(), target == merged.token);
    target_log_probs(flags, own, (l.logsumexp, l.raw_logsumexp))
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::logmass::exp;

    fn ln(x: f32) -> f32 {
        (x as f64).ln() as f32
    }

    fn lp(logprob: f32, lse: f32, raw: f32, raw_lse: f32) -> Option<RankLogProbs> {
        Some(RankLogProbs { logprob, raw_logprob: raw, logsumexp: lse, raw_logsumexp: raw_lse })
    }

    #[test]
    fn the_token_is_the_candidate_merge_in_any_order() {
        let a = RankRow { token: 7, score: 1.5, logprobs: None };
        let b = RankRow { token: 900, score: 2.5, logprobs: None };
        let none = RankRow { token: INVALID_INDEX, score: f32::NEG_INFINITY, logprobs: None };
        for order in [[a, b, none], [none, b, a], [b, none, a]] {
            let m = merge_rank_row(order.into_iter(), exp, ln);
            assert_eq!((m.token, m.score), (900, 2.5));
        }
        let m = merge_rank_row([none, none].into_iter(), exp, ln);
        assert_eq!(m.token, INVALID_INDEX);
        let nan = RankRow { token: INVALID_INDEX, score: f32::NAN, logprobs: None };
        assert_eq!(merge_rank_row([b, nan].into_iter(), exp, ln).token, INVALID_INDEX);
        // Ties go to the lower index, as on one GPU.
        let tie = RankRow { token: 3, score: 2.5, logprobs: None };
        assert_eq!(merge_rank_row([b, tie].into_iter(), exp, ln).token, 3);
    }

    #[test]
    fn log_probabilities_are_rescaled_to_the_global_mass() {
        // Two shards with processed lse 1.0 and 2.0 → global ln(e + e²); the winner (rank 1, its
        // token with z/T = 1.5) has local lp 1.5 − 2.0.
        let r0 = RankRow { token: 1, score: 0.5, logprobs: lp(0.2 - 1.0, 1.0, 0.3 - 3.0, 3.0) };
        let r1 = RankRow { token: 40, score: 0.9, logprobs: lp(1.5 - 2.0, 2.0, 1.7 - 4.0, 4.0) };
        let m = merge_rank_row([r0, r1].into_iter(), exp, ln);
        let l = m.logprobs.unwrap();
        let lse = (1f64.exp() + 2f64.exp()).ln();
        let raw_lse = (3f64.exp() + 4f64.exp()).ln();
        assert_eq!(m.token, 40);
        assert!((l.logsumexp as f64 - lse).abs() < 1e-5);
        assert!((l.logprob as f64 - (1.5 - lse)).abs() < 1e-5);
        assert!((l.raw_logprob as f64 - (1.7 - raw_lse)).abs() < 1e-5);
        // A greedy row: NaN processed lse everywhere, log-probability 0, raw still defined.
        let g0 = RankRow { token: 1, score: 0.5, logprobs: lp(0.0, f32::NAN, 0.3 - 3.0, 3.0) };
        let g1 = RankRow { token: 40, score: 0.9, logprobs: lp(0.0, f32::NAN, 1.7 - 4.0, 4.0) };
        let g = merge_rank_row([g0, g1].into_iter(), exp, ln).logprobs.unwrap();
        assert_eq!(g.logprob, 0.0);
        assert!(g.logsumexp.is_nan());
        assert!((g.raw_logprob as f64 - (1.7 - raw_lse)).abs() < 1e-5);
        // A shard with everything masked contributes no processed mass.
        let masked = RankRow {
            token: INVALID_INDEX,
            score: f32::NEG_INFINITY,
            logprobs: lp(f32::NAN, f32::NEG_INFINITY, 0.0, 3.0),
        };
        let l = merge_rank_row([masked, r1].into_iter(), exp, ln).logprobs.unwrap();
        assert!((l.logsumexp - 2.0).abs() < 1e-6 && (l.logprob - (1.5 - 2.0)).abs() < 1e-6);
        // Nothing allowed anywhere: no token, NaN log-probabilities.
        let none = merge_rank_row([masked, masked].into_iter(), exp, ln);
        assert_eq!(none.token, INVALID_INDEX);
        assert!(none.logprobs.unwrap().logprob.is_nan());
    }

    #[test]
    fn a_given_tokens_log_probabilities_come_from_its_shard_rescaled() {
        let r0 = RankRow { token: 1, score: 0.5, logprobs: lp(0.2 - 1.0, 1.0, 0.3 - 3.0, 3.0) };
        let r1 = RankRow { token: 40, score: 0.9, logprobs: lp(1.5 - 2.0, 2.0, 1.7 - 4.0, 4.0) };
        let m = merge_rank_row([r0, r1].into_iter(), exp, ln);
        let g = m.logprobs.unwrap();
        let outside = RankTarget { logprob: f32::NAN, raw_logprob: f32::NAN };
        // Token 7 in rank 0's shard, z/T = 0.7, raw y = 0.4.
        let t0 = RankTarget { logprob: 0.7 - 1.0, raw_logprob: 0.4 - 3.0 };
        let rows = [(r0.logprobs.unwrap(), t0), (r1.logprobs.unwrap(), outside)];
        let (p, raw) = merge_target(rows.into_iter(), &m, 7);
        assert!((p - (0.7 - g.logsumexp)).abs() < 1e-6 && (raw - (0.4 - g.raw_logsumexp)).abs() < 1e-6);
        // Removed by the controls: −∞ (also from a shard with nothing allowed, whose lse is −∞).
        let removed = RankTarget { logprob: f32::NEG_INFINITY, raw_logprob: 0.4 - 3.0 };
        let masked = lp(f32::NAN, f32::NEG_INFINITY, 0.3 - 3.0, 3.0).unwrap();
        let (p, raw) = merge_target([(masked, removed), (r1.logprobs.unwrap(), outside)].into_iter(), &m, 7);
        assert_eq!(p, f32::NEG_INFINITY);
        assert!(raw.is_finite());
        // In no shard: NaN.
        let (p, raw) = merge_target(rows.map(|(l, _)| (l, outside)).into_iter(), &m, 7);
        assert!(p.is_nan() && raw.is_nan());
        // A greedy row: by the whole head's token, whatever the shard said.
        let g0 = RankRow { token: 1, score: 0.5, logprobs: lp(0.0, f32::NAN, 0.3 - 3.0, 3.0) };
        let g1 = RankRow { token: 40, score: 0.9, logprobs: lp(0.0, f32::NAN, 1.7 - 4.0, 4.0) };
        let gm = merge_rank_row([g0, g1].into_iter(), exp, ln);
        let local_winner = RankTarget { logprob: 0.0, raw_logprob: 0.3 - 3.0 };
        let rows = [(g0.logprobs.unwrap(), local_winner), (g1.logprobs.unwrap(), outside)];
        assert_eq!(merge_target(rows.into_iter(), &gm, 1).0, f32::NEG_INFINITY);
        let rows =
            [(g0.logprobs.unwrap(), outside), (g1.logprobs.unwrap(), RankTarget { logprob: 0.0, raw_logprob: -2.3 })];
        assert_eq!(merge_target(rows.into_iter(), &gm, 40).0, 0.0);
    }

    #[test]
    fn the_exact_merge_of_shards_is_the_whole_rows_arithmetic_bit_for_bit() {
        // A row of 2,003 values split into shards at multiples of 4 (as ranks are): each shard's
        // exact masses, its winner (the largest value: a greedy-like candidate, noise aside) and its
        // record; the merge gives what `token_log_probs` / `target_log_probs` give over the whole
        // row's masses, bit for bit, for every split, in any rank order; greedy rows and a target in
        // either shard too.
        let ex2 = |x: f32| x.exp2();
        let log2 = |x: f32| x.log2();
        let v = 2003usize;
        let raw: std::vec::Vec<f32> = (0..v).map(|i| ((i * 7919 % 1000) as f32 / 97.0).sin() * 6.0).collect();
        let processed: std::vec::Vec<f32> = raw.iter().map(|&y| y / 0.7).collect();
        let group = |xs: &[f32], g: usize| {
            core::array::from_fn::<f32, 4, _>(|j| xs.get(4 * g + j).copied().unwrap_or(f32::NEG_INFINITY))
        };
        let masses = |range: core::ops::Range<usize>| {
            let mut m = RowExact::EMPTY;
            for g in range.start / 4..range.end.div_ceil(4) {
                m.processed.add_group(group(&processed, g), ex2);
                m.raw.add_group(group(&raw, g), ex2);
            }
            m
        };
        let best =
            |range: core::ops::Range<usize>| range.max_by(|&a, &b| raw[a].total_cmp(&raw[b]).then(b.cmp(&a))).unwrap();
        let whole = masses(0..v);
        let lses = (whole.processed.lse_with(log2), whole.raw.lse_with(log2));
        let top = best(0..v);
        let target = 1234usize;
        for greedy in [false, true] {
            let want = token_log_probs(true, greedy, (processed[top], raw[top]), lses);
            let want_t = target_log_probs((false, greedy, target == top), (processed[target], raw[target]), lses);
            for cut in [4usize, 1000, 1232, 1236, 2000] {
                let parts = [0..cut, cut..v];
                let mut rows = std::vec::Vec::new();
                for r in parts.clone() {
                    let w = best(r.clone());
                    let mut e = masses(r.clone());
                    e.token = [processed[w], raw[w]];
                    e.target = if r.contains(&target) { [processed[target], raw[target]] } else { [f32::NAN; 2] };
                    let lse = if greedy { f32::NAN } else { e.processed.lse_with(log2) };
                    let l = RankLogProbs { logprob: 0.0, raw_logprob: 0.0, logsumexp: lse, raw_logsumexp: 0.0 };
                    rows.push((RankRow { token: w as u32, score: raw[w], logprobs: Some(l) }, e));
                }
                for order in [[0usize, 1], [1, 0]] {
                    let (m, merged) = merge_exact_rank_row(order.iter().map(|&i| rows[i]), log2);
                    assert_eq!(merged.processed, whole.processed, "cut {cut}");
                    assert_eq!(merged.raw, whole.raw, "cut {cut}");
                    let l = m.logprobs.unwrap();
                    assert_eq!(m.token, top as u32, "cut {cut}");
                    let got = (l.logprob.to_bits(), l.raw_logprob.to_bits(), l.logsumexp.to_bits());
                    assert_eq!(
                        got,
                        (want.0.to_bits(), want.1.to_bits(), want.2.to_bits()),
                        "cut {cut}, greedy {greedy}"
                    );
                    assert_eq!(l.raw_logsumexp.to_bits(), lses.1.to_bits());
                    let t = merge_exact_target(order.iter().map(|&i| rows[i].1), &m, target as u32);
                    assert_eq!((t.0.to_bits(), t.1.to_bits()), (want_t.0.to_bits(), want_t.1.to_bits()), "cut {cut}");
                }
            }
        }
        // The record the ranks exchange: 16 words, 8-byte aligned (the host's `EXACT_RECORD_WORDS`).
        assert_eq!((core::mem::size_of::<RowExact>(), core::mem::align_of::<RowExact>()), (64, 8));
        // No rank holds the target: NaN.
        let (m, _) =
            merge_exact_rank_row([(RankRow { token: 0, score: 1.0, logprobs: None }, masses(0..8))].into_iter(), log2);
        assert!(merge_exact_target([RowExact::EMPTY].into_iter(), &m, 5).0.is_nan());
    }
}
