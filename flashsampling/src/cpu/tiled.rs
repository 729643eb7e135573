//! The tiled path: the vocabulary in tiles over the workers, each folding its tiles into one running
//! candidate per (row, sample) — the GPU kernels' structure, with the same no_std epilogue — and the
//! rows' log-mass for log-probabilities.

use flashsampling_kernels::Candidate;
use flashsampling_kernels::epilogue::update_tile;

use super::{CHUNK_FLOATS, CpuBackend, Slot, dot};
use crate::Samples;
use crate::params::{Element, LogProbs, SamplingParams, Shape};

impl CpuBackend {
    /// Each slot's winning candidate over the weight rows `weight` (`[rows, D]`), which are global
    /// vocab rows `offset ..` of a vocabulary of `vocab` (`offset + rows ≤ vocab`; the noise is keyed
    /// by the global index), and, with `want_mass`, each hidden row's log-mass of its processed and
    /// raw logits. A slot is one sample of one hidden row (`[B, n]`): the logits of a row are computed
    /// once and serve all its samples. The vocab tiles are split into contiguous ranges, one per
    /// worker; a worker folds every tile of its range into one running candidate per slot (the merge
    /// is associative and commutative, so this is the kernel's `[B, n_tiles]` candidates reduced),
    /// and the workers' candidates are merged last.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn winners<T: Element>(
        &self,
        hidden: &[T],
        weight: &[T],
        (offset, vocab): (usize, usize),
        shape: Shape,
        slots: &[Slot],
        params: &SamplingParams,
        want_mass: bool,
    ) -> (Vec<Candidate>, Vec<RowMass>) {
        let (b, d) = (shape.b, shape.d);
        let row_logits: Vec<_> = (0..b).map(|r| params.row_logits(r)).collect();
        let n = slots.len() / b;
        let v = weight.len() / d; // the rows to score (local)
        debug_assert!(offset + v <= vocab && slots.len() == b * n);
        let bv = self.block_v;
        let n_tiles = v.div_ceil(bv);
        let hidden_f32: Vec<f32> = hidden.iter().map(|x| x.to_f32()).collect();
        let threads = self.threads.min(n_tiles).max(1);
        let per_thread = n_tiles.div_ceil(threads);
        // Chunk rows: a multiple of 4 (the Philox groups stay aligned), at least 4, at most the tile.
        let chunk_rows = ((CHUNK_FLOATS / d) & !3).clamp(4, bv);
        let work = |tiles: std::ops::Range<usize>| -> (Vec<Candidate>, Vec<RowMass>) {
            let mut best = vec![Candidate::EMPTY; slots.len()];
            let mut mass = vec![RowMass::EMPTY; if want_mass { b } else { 0 }];
            let rows_here = (tiles.len() * bv).min(v - (tiles.start * bv).min(v));
            let mut w_chunk = vec![0f32; chunk_rows.min(rows_here) * d];
            let mut logits = vec![0f32; chunk_rows.min(rows_here)];
            for tile in tiles {
                let tile_end = ((tile + 1) * bv).min(v);
                let mut v0 = tile * bv;
                while v0 < tile_end {
                    let rows = chunk_rows.min(tile_end - v0);
                    for (dst, src) in w_chunk.iter_mut().zip(&weight[v0 * d..(v0 + rows) * d]) {
                        *dst = src.to_f32();
                    }
                    for row in 0..b {
                        let h = &hidden_f32[row * d..(row + 1) * d];
                        for (j, l) in logits[..rows].iter_mut().enumerate() {
                            *l = dot(h, &w_chunk[j * d..(j + 1) * d]);
                        }
                        if want_mass {
                            logits[..rows].iter().for_each(|&y| mass[row].update_raw(y as f64));
                        }
                        // Soft-cap, adjustments, mask: the logits the row samples from.
                        let process = &row_logits[row];
                        if !process.is_identity() {
                            process.apply(&mut logits[..rows], offset + v0);
                        }
                        let (first, v_end) = ((offset + v0) as u32, vocab as u32);
                        for (slot, c) in slots[row * n..(row + 1) * n].iter().zip(&mut best[row * n..(row + 1) * n]) {
                            update_tile(c, &logits[..rows], first, v_end, &slot.noise, &slot.transform);
                        }
                        if want_mass {
                            let inv_t = slots[row * n].inv_temperature;
                            logits[..rows].iter().for_each(|&z| mass[row].update_processed(z as f64, inv_t));
                        }
                    }
                    v0 += rows;
                }
            }
            (best, mass)
        };
        let ranges: Vec<_> =
            (0..threads).map(|t| (t * per_thread).min(n_tiles)..((t + 1) * per_thread).min(n_tiles)).collect();
        let parts: Vec<(Vec<Candidate>, Vec<RowMass>)> = std::thread::scope(|s| {
            let work = &work;
            // A worker the OS cannot start (thread limits) runs on this thread after the others start.
            let started: Vec<_> = ranges
                .iter()
                .map(|r| {
                    let mine = r.clone();
                    std::thread::Builder::new().spawn_scoped(s, move || work(mine)).map_err(|_| r.clone())
                })
                .collect();
            started
                .into_iter()
                .map(|w| match w {
                    Ok(handle) => handle.join().expect("CPU worker panicked"),
                    Err(range) => work(range),
                })
                .collect()
        });
        let best = (0..slots.len()).map(|i| parts.iter().fold(Candidate::EMPTY, |acc, p| acc.merge(p.0[i]))).collect();
        let mass = if want_mass {
            (0..b).map(|row| parts.iter().fold(RowMass::EMPTY, |acc, p| acc.merge(p.1[row]))).collect()
        } else {
            Vec::new()
        };
        (best, mass)
    }
}

/// Online log-sum-exp in f64 of a row's processed (`logit / T`) and raw logits.
#[derive(Clone, Copy, Debug)]
pub(super) struct RowMass {
    processed: (f64, f64),
    raw: (f64, f64),
}

impl RowMass {
    const EMPTY: Self = Self { processed: (f64::NEG_INFINITY, 0.0), raw: (f64::NEG_INFINITY, 0.0) };

    fn add((max, sum): &mut (f64, f64), x: f64) {
        if *max == f64::INFINITY {
            // A +∞ logit holds all the mass (see `log_prob`): the rest adds nothing.
            return;
        }
        if x == f64::INFINITY {
            (*max, *sum) = (x, 1.0);
        } else if x > *max {
            *sum = *sum * (*max - x).exp() + 1.0;
            *max = x;
        } else if x > f64::NEG_INFINITY {
            *sum += (x - *max).exp();
        }
    }

    /// A raw logit (`T = 1`, nothing applied).
    fn update_raw(&mut self, y: f64) {
        Self::add(&mut self.raw, y);
    }

    /// A processed logit `z` (soft-capped, adjusted, masked) of a row with `1/T = inv_t` (0: greedy,
    /// no processed distribution).
    fn update_processed(&mut self, z: f64, inv_t: f64) {
        if inv_t > 0.0 {
            Self::add(&mut self.processed, z * inv_t);
        }
    }

    fn merge(self, o: Self) -> Self {
        fn join(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
            let max = a.0.max(b.0);
            if max.is_infinite() {
                return (max, if max == f64::INFINITY { 1.0 } else { 0.0 });
            }
            (max, a.1 * (a.0 - max).exp() + b.1 * (b.0 - max).exp())
        }
        Self { processed: join(self.processed, o.processed), raw: join(self.raw, o.raw) }
    }

    fn lse((max, sum): (f64, f64)) -> f64 {
        if max == f64::INFINITY { max } else { max + sum.ln() }
    }

    /// The log-sum-exp of the processed logits over the temperature (`−∞` when none was seen).
    pub(super) fn processed_lse(&self) -> f64 {
        Self::lse(self.processed)
    }

    /// The log-sum-exp of the raw logits.
    pub(super) fn raw_lse(&self) -> f64 {
        Self::lse(self.raw)
    }
}

/// The f64 twin of `kernels::logmass::log_prob`: the log-probability `x − lse` of a value `x` (a
/// logit over the temperature, or a raw logit) under a distribution of log-sum-exp `lse`. A `+∞`
/// logit takes all the mass (the softmax limit; the first `+∞` token is the one drawn): with
/// `lse = +∞` a `+∞` value has log-probability 0 and every other value `−∞`, not `∞ − ∞`.
pub(super) fn log_prob(x: f64, lse: f64) -> f64 {
    if lse == f64::INFINITY { if x == f64::INFINITY { 0.0 } else { f64::NEG_INFINITY } } else { x - lse }
}

/// Fills the log-probabilities of `samples` from the rows' log-mass and each sampled token's logit
/// (`logit(row, token)`, the same f32 dot product the scan used).
pub(super) fn add_logprobs(
    samples: &mut Samples,
    params: &SamplingParams,
    slots: &[Slot],
    mass: &[RowMass],
    logit: impl Fn(usize, u32) -> f32,
) {
    let n = params.n as usize;
    let (mut lp, mut raw) = (Vec::with_capacity(slots.len()), Vec::with_capacity(slots.len()));
    for (i, (slot, &token)) in slots.iter().zip(&samples.tokens).enumerate() {
        let row = i / n;
        if token == flashsampling_kernels::INVALID_INDEX {
            lp.push(f32::NAN);
            raw.push(f32::NAN);
            continue;
        }
        let y = logit(row, token);
        let z = params.row_logits(row).one(y, token as usize) as f64;
        let y = y as f64;
        let processed = if slot.inv_temperature > 0.0 {
            log_prob(z * slot.inv_temperature, RowMass::lse(mass[row].processed))
        } else {
            0.0
        };
        lp.push(processed as f32);
        raw.push(log_prob(y, RowMass::lse(mass[row].raw)) as f32);
    }
    let lse = (0..mass.len())
        .map(
            |row| {
                if slots[row * n].inv_temperature > 0.0 { RowMass::lse(mass[row].processed) as f32 } else { f32::NAN }
            },
        )
        .collect();
    samples.logprobs = Some(lp);
    samples.raw_logprobs = (params.logprobs == LogProbs::ProcessedAndRaw).then_some(raw);
    samples.logsumexp = Some(lse);
}
