//! The exact path for rows that truncate (top-k, top-p, min-p) or ask for their top tokens: each
//! row's processed logits are materialized, the kept set found exactly, the rest set to `−∞`.

use std::cmp::Ordering;

use flashsampling_kernels::Candidate;
use flashsampling_kernels::epilogue::update_tile;
use flashsampling_kernels::truncate::{KeptWalk, Step, TopList, Truncation, sample_kept};

use super::{CpuBackend, Slot, dot, log_prob};
use crate::Samples;
use crate::params::{Element, LogProbs, Matrix, SamplingParams, Shape};
use crate::shard::VocabShard;

impl CpuBackend {
    /// The exact path for rows that truncate (top-k, top-p, min-p) or ask for their top tokens: each
    /// row's processed logits are materialized (one row of V floats per worker at a time), the row's
    /// kept set is found exactly ([`kept_threshold`]), every other token's logit becomes `−∞`, and the
    /// row is sampled from them with the same noise as everywhere (so a row that keeps everything
    /// draws exactly what the tiled path draws). Rows are split over the workers.
    pub(super) fn sample_materialized<T: Element>(
        &self,
        hidden: &[T],
        weight: &[T],
        shape: Shape,
        slots: &[Slot],
        params: &SamplingParams,
    ) -> Samples {
        let Shape { b, v, .. } = shape;
        let n = params.n as usize;
        let want_raw =
            params.logprobs == LogProbs::ProcessedAndRaw || (params.top_logprobs > 0 && params.top_logprobs_raw);
        let row = |r: usize| -> RowResult {
            let inv_t = slots[r * n].inv_temperature;
            let (raw, z) = materialize_row(hidden, weight, shape, r, params, inv_t, want_raw);
            let cands: Vec<Candidate> = slots[r * n..(r + 1) * n]
                .iter()
                .map(|slot| {
                    let mut c = Candidate::EMPTY;
                    update_tile(&mut c, &z, 0, v as u32, &slot.noise, &slot.transform);
                    c
                })
                .collect();
            RowResult::of(&z, raw.as_deref(), inv_t, &cands, params)
        };
        let threads = self.threads.min(b).max(1);
        let per = b.div_ceil(threads);
        let results: Vec<RowResult> = std::thread::scope(|s| {
            let row = &row;
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let rows = (t * per).min(b)..((t + 1) * per).min(b);
                    std::thread::Builder::new()
                        .spawn_scoped(s, move || rows.clone().map(row).collect::<Vec<_>>())
                        .map_err(|_| (t * per).min(b)..((t + 1) * per).min(b))
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| match h {
                    Ok(handle) => handle.join().expect("CPU worker panicked"),
                    Err(rows) => rows.map(row).collect(),
                })
                .collect()
        });
        RowResult::samples(results, params)
    }
}

/// Row `r`'s logits materialized: its raw logits (with `want_raw`) and its processed ones with
/// every token outside its kept set `−∞` ([`kept_threshold`]; a greedy row, `inv_t = 0`, keeps
/// all). What [`CpuBackend::sample_materialized`] samples and `score` reads.
pub(super) fn materialize_row<T: Element>(
    hidden: &[T],
    weight: &[T],
    Shape { d, v, .. }: Shape,
    r: usize,
    params: &SamplingParams,
    inv_t: f64,
    want_raw: bool,
) -> (Option<Vec<f32>>, Vec<f32>) {
    let h: Vec<f32> = hidden[r * d..(r + 1) * d].iter().map(|x| x.to_f32()).collect();
    let mut w = vec![0f32; d];
    let mut z: Vec<f32> = (0..v)
        .map(|i| {
            for (dst, src) in w.iter_mut().zip(&weight[i * d..(i + 1) * d]) {
                *dst = src.to_f32();
            }
            dot(&h, &w)
        })
        .collect();
    let raw = if want_raw { Some(z.clone()) } else { None };
    params.row_logits(r).apply(&mut z, 0);
    if inv_t > 0.0 {
        let (k, p, min_p) = params.row_truncation(r);
        let t = kept_threshold(&z, 1.0 / inv_t, k, p, min_p);
        for x in z.iter_mut() {
            if (*x as f64) < t {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    (raw, z)
}

/// One row of the materialized path: its candidates and log-probabilities.
pub(super) struct RowResult {
    cands: Vec<Candidate>,
    logprobs: Vec<f32>,
    raw_logprobs: Vec<f32>,
    lse: f32,
    top: Vec<(u32, f32)>,
}

impl RowResult {
    /// The call's samples from its rows' results (in row order).
    pub(super) fn samples(results: Vec<RowResult>, params: &SamplingParams) -> Samples {
        let mut samples = Samples::plain(
            results.iter().flat_map(|r| r.cands.iter().map(|c| c.token())).collect(),
            results.iter().flat_map(|r| r.cands.iter().map(|c| c.score)).collect(),
        );
        if params.logprobs != LogProbs::Off {
            samples.logprobs = Some(results.iter().flat_map(|r| r.logprobs.clone()).collect());
            samples.logsumexp = Some(results.iter().map(|r| r.lse).collect());
            if params.logprobs == LogProbs::ProcessedAndRaw {
                samples.raw_logprobs = Some(results.iter().flat_map(|r| r.raw_logprobs.clone()).collect());
            }
        }
        if params.top_logprobs > 0 {
            samples.top_logprobs = Some(results.into_iter().map(|r| r.top).collect());
        }
        samples
    }

    /// From the row's kept processed logits `z` (`−∞` outside the kept set), its raw logits, `1/T`
    /// (0: greedy) and its candidates.
    pub(super) fn of(z: &[f32], raw: Option<&[f32]>, inv_t: f64, cands: &[Candidate], params: &SamplingParams) -> Self {
        let greedy = inv_t == 0.0;
        let lse = if greedy { f64::NAN } else { lse_f64(z.iter().map(|&x| x as f64 * inv_t)) };
        let raw_lse = raw.map(|y| lse_f64(y.iter().map(|&x| x as f64)));
        let valid = |c: &Candidate| c.token() != flashsampling_kernels::INVALID_INDEX;
        let logprobs = cands
            .iter()
            .map(|c| match (valid(c), greedy) {
                (false, _) => f32::NAN,
                (true, true) => 0.0,
                (true, false) => log_prob(z[c.index as usize] as f64 * inv_t, lse) as f32,
            })
            .collect();
        let raw_logprobs = match (raw, raw_lse) {
            (Some(y), Some(l)) => cands
                .iter()
                .map(|c| if valid(c) { log_prob(y[c.index as usize] as f64, l) as f32 } else { f32::NAN })
                .collect(),
            _ => Vec::new(),
        };
        let top = match raw_lse {
            _ if params.top_logprobs == 0 => Vec::new(),
            Some(raw_lse) if params.top_logprobs_raw => {
                top_list(raw.expect("with its log-sum-exp"), (raw_lse, 1.0), params.top_logprobs, false)
            }
            _ => top_list(z, (lse, inv_t), params.top_logprobs, greedy),
        };
        Self { cands: cands.to_vec(), logprobs, raw_logprobs, lse: lse as f32, top }
    }
}

/// A row's `k` most likely tokens with their log-probabilities, most likely first (ties: the lower
/// index first; `−∞` tokens never listed): of `vals` (the processed logits `z`, or the raw ones) at
/// `(log-sum-exp, scale)` (`vals · scale − lse`). A `greedy` row's processed distribution is its
/// argmax, with probability 1: the list is that one token, at 0.
pub(super) fn top_list(vals: &[f32], (l, scale): (f64, f64), k: u32, greedy: bool) -> Vec<(u32, f32)> {
    let mut order: Vec<u32> = (0..vals.len() as u32).filter(|&i| vals[i as usize] > f32::NEG_INFINITY).collect();
    // By value (`−0.0` and `+0.0` tie: one value), then by id; no NaN is listed.
    let by_value = |a: u32, b: u32| vals[b as usize].partial_cmp(&vals[a as usize]).unwrap_or(Ordering::Equal);
    order.sort_by(|&a, &b| by_value(a, b).then(a.cmp(&b)));
    if greedy {
        order.truncate(1);
        return order.iter().map(|&i| (i, 0.0)).collect();
    }
    order.truncate(k as usize);
    // With +∞ logits (`l = +∞`) the first (lowest index) takes all the mass, the others none.
    order
        .iter()
        .enumerate()
        .map(|(j, &i)| {
            let lp = if j > 0 && l == f64::INFINITY {
                f64::NEG_INFINITY
            } else {
                log_prob(vals[i as usize] as f64 * scale, l)
            };
            (i, lp as f32)
        })
        .collect()
}

/// Token `t`'s rank in [`top_list`]'s order of `vals` (1 = first): one plus the tokens before it —
/// a larger value, or an equal one (`−0.0` and `+0.0` are equal) at a lower index.
pub(super) fn rank_of(vals: &[f32], t: usize) -> u32 {
    let x = vals[t];
    let before = vals
        .iter()
        .enumerate()
        .filter(|&(i, y)| y.partial_cmp(&x).unwrap_or(Ordering::Equal).then(t.cmp(&i)).is_gt())
        .count();
    1 + before as u32
}

/// The smallest processed logit a token may have to stay in a row's kept set (`−∞`: all kept), for
/// temperature `t`, then min-p (`min_p`; 0: off), then top-k (`k`; 0 or ≥ V: off), then top-p (`p`;
/// 1: off) on the renormalized remainder: the order vLLM's V1 sampler applies them. Every one of
/// them keeps a top part of the row by logit, so their composition is a threshold on the logit:
///
/// - min-p: `max + T · ln(min_p)` (probability at least `min_p` times the largest);
/// - top-k: the k-th largest logit (every token tied with it stays, so ties may keep more than k);
///   min-p and top-k commute (min-p's cut depends only on the largest logit);
/// - top-p: the logit of the last token of the smallest most-probable prefix (of what min-p and
///   top-k keep) whose probability reaches `p` of their mass (tokens tied with it stay).
///
/// Probabilities in f64 from the f32 logits; the most likely token is always kept. A `+∞` logit
/// holds all the mass (the softmax limit): the kept set is then the `+∞` tokens.
pub(crate) fn kept_threshold(z: &[f32], t: f64, k: u32, p: f32, min_p: f32) -> f64 {
    let mut order: Vec<usize> = (0..z.len()).filter(|&i| z[i] > f32::NEG_INFINITY).collect();
    if order.is_empty() {
        return f64::NEG_INFINITY;
    }
    order.sort_by(|&a, &b| z[b].total_cmp(&z[a]).then(a.cmp(&b)));
    let zmax = z[order[0]] as f64;
    let mut threshold = f64::NEG_INFINITY;
    if min_p > 0.0 {
        threshold = zmax + t * (min_p as f64).ln();
    }
    if k > 0 && (k as usize) < order.len() {
        threshold = threshold.max(z[order[k as usize - 1]] as f64);
    }
    if p < 1.0 {
        // `x == zmax` weighs 1 (also for `zmax = +∞`, where the difference would be NaN).
        let kept: Vec<f64> = order
            .iter()
            .map(|&i| z[i] as f64)
            .take_while(|&x| x >= threshold)
            .map(|x| if x == zmax { 1.0 } else { ((x - zmax) / t).exp() })
            .collect();
        let total: f64 = kept.iter().sum();
        let mut cum = 0.0;
        for (j, q) in kept.iter().enumerate() {
            cum += q;
            if cum >= p as f64 * total {
                threshold = threshold.max(z[order[j]] as f64);
                break;
            }
        }
    }
    threshold.min(zmax)
}

/// Entries each shard sends per row in the simulated exchange of a truncating sharded call: what a
/// GPU rank sends.
pub(crate) const SHARD_TOP: usize = flashsampling_kernels::truncate::RANK_TOP;

/// `ln Σ exp(x)` in f64 over `xs` (`−∞` when empty or all `−∞`; `+∞` when a value is: it holds all
/// the mass).
pub(super) fn lse_f64(xs: impl Iterator<Item = f64> + Clone) -> f64 {
    let m = xs.clone().fold(f64::NEG_INFINITY, f64::max);
    if m.is_infinite() { m } else { m + xs.map(|x| (x - m).exp()).sum::<f64>().ln() }
}

impl CpuBackend {
    /// Truncation (top-k, top-p, min-p) over vocab shards, simulated: each shard sends per row its
    /// [`SHARD_TOP`] largest processed logits with a bound ([`TopList`]) — what a rank would
    /// exchange — and the merged lists go through the certificate ([`KeptWalk`]) with the row's
    /// log-sum-exp; a certified row is sampled over its kept prefix with the same noise
    /// ([`sample_kept`]), an uncertain one from its logits gathered from the shards (the exact
    /// fallback). The result equals [`Self::sample_scored`] on the whole weight, tokens and scores
    /// bit for bit; [`Samples::truncation_fallback`] says which rows took the fallback.
    pub(super) fn sample_sharded_truncated<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        shards: &[VocabShard<'_, T>],
        vocab: usize,
        params: &SamplingParams,
    ) -> Samples {
        let (b, d, n) = (hidden.rows, hidden.cols, params.n as usize);
        let slots = super::slots(params, b);
        let want_raw =
            params.logprobs == LogProbs::ProcessedAndRaw || (params.top_logprobs > 0 && params.top_logprobs_raw);
        let (mut results, mut fell) = (Vec::with_capacity(b), Vec::with_capacity(b * n));
        for r in 0..b {
            let h: Vec<f32> = hidden.data[r * d..(r + 1) * d].iter().map(|x| x.to_f32()).collect();
            let mut w = vec![0f32; d];
            // Each shard: its raw and processed logits and its list (the rank's part of the exchange).
            let (mut y, mut z) = (Vec::with_capacity(vocab), Vec::with_capacity(vocab));
            let mut list = TopList::<SHARD_TOP>::EMPTY;
            for shard in shards {
                // Rows at or past V are padding: never scored (as in the plain sharded path).
                let ys: Vec<f32> = (0..shard.rows_in(vocab))
                    .map(|i| {
                        for (dst, src) in w.iter_mut().zip(&shard.weight.data[i * d..(i + 1) * d]) {
                            *dst = src.to_f32();
                        }
                        dot(&h, &w)
                    })
                    .collect();
                let mut zs = ys.clone();
                params.row_logits(r).apply(&mut zs, shard.offset);
                let mut part = TopList::<SHARD_TOP>::EMPTY;
                for (i, &x) in zs.iter().enumerate() {
                    part.update(x, (shard.offset + i) as u32);
                }
                list.merge(&part);
                y.extend(ys);
                z.extend(zs);
            }
            let inv_t = slots[r * n].inv_temperature;
            let (k, p, min_p) = params.row_truncation(r);
            let t = Truncation { top_k: k, top_p: p, min_p, _pad: 0 };
            // The kept prefix from the certificate, or `None` (nothing cut, or the fallback).
            let mut certified: Option<Vec<(f32, u32)>> = None;
            let mut fallback = false;
            if inv_t > 0.0 && !t.is_off(vocab as u32) {
                let lse = lse_f64(z.iter().map(|&x| x as f64 * inv_t));
                let entries: Vec<(f32, u32)> =
                    (0..SHARD_TOP).map(|j| (list.z[j], list.index[j])).filter(|e| e.0 > list.bound).collect();
                let exp = |x: f32| (x as f64).exp() as f32;
                let mut walk = KeptWalk::new(t, inv_t as f32, lse as f32, vocab as u32);
                let mut cums: Vec<f32> = Vec::new();
                loop {
                    let j = cums.len();
                    let (x, exhausted) = if j < entries.len() { (entries[j].0, false) } else { (list.bound, true) };
                    match walk.next(x, exhausted, exp, |i| (entries[i as usize].0, cums[i as usize])) {
                        Step::More => cums.push(walk.mass()),
                        Step::Kept { count, .. } => {
                            certified = Some(entries[..count as usize].to_vec());
                            break;
                        }
                        Step::Uncertain => {
                            fallback = true;
                            break;
                        }
                    }
                }
                // The kept set is `{z ≥ τ}`: the certified prefix's last value (every tie of it is in
                // the prefix), or the fallback's exact threshold.
                let tau = match &certified {
                    Some(kept) => kept.last().map_or(f64::NEG_INFINITY, |e| e.0 as f64),
                    None => kept_threshold(&z, 1.0 / inv_t, k, p, min_p),
                };
                for x in z.iter_mut() {
                    if (*x as f64) < tau {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
            let cands: Vec<Candidate> = slots[r * n..(r + 1) * n]
                .iter()
                .map(|slot| match &certified {
                    // The sample over the kept prefix alone: what a rank holds after the exchange.
                    Some(kept) => sample_kept(kept.len() as u32, |j| kept[j as usize], &slot.noise, &slot.transform),
                    None => {
                        let mut c = Candidate::EMPTY;
                        update_tile(&mut c, &z, 0, vocab as u32, &slot.noise, &slot.transform);
                        c
                    }
                })
                .collect();
            fell.extend(std::iter::repeat_n(fallback, n));
            results.push(RowResult::of(&z, want_raw.then_some(&y[..]), inv_t, &cands, params));
        }
        let mut samples = RowResult::samples(results, params);
        // Only a call that truncates reports its fallback rows (a top-n call does not truncate).
        samples.truncation_fallback = params.truncates(vocab).then_some(fell);
        samples
    }
}
