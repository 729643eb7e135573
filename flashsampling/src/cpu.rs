//! The CPU backend: the same tiles, the same noise, the same epilogue and merge as the GPU kernels
//! (the kernel crate's own functions), with logits summed in f32 on the host. The embedded default
//! when no GPU is present, and the reference the GPU tests compare against.

use flashsampling_kernels::config::BLOCK_V;
use flashsampling_kernels::epilogue::update_tile;
use flashsampling_kernels::{Candidate, RowNoise, Transform};
use half::bf16;

use crate::error::{Error, Result};
use crate::params::{LogProbs, Matrix, SamplingParams, Shape, validate};
use crate::shard::{VocabShard, merge_shard_candidates, validate_shards};
use crate::{Samples, check_samples_of};

/// Largest vocab tile [`CpuBackend::with_block_v`] accepts (2¹⁶). Memory does not grow with the tile
/// (see [`CpuBackend`]); the bound keeps tiles a tiling, not a typo.
pub const MAX_CPU_BLOCK_V: usize = 1 << 16;
/// Most worker threads [`CpuBackend::with_threads`] keeps (larger requests are clamped to it).
pub const MAX_CPU_THREADS: usize = 1024;
/// f32 weight values a worker converts at once (256 KiB): a chunk of `max(4, 2¹⁶ / D)` vocab rows,
/// a multiple of 4, never more than the tile (or than V).
const CHUNK_FLOATS: usize = 1 << 16;

/// CPU backend.
///
/// Memory: besides its inputs, a call holds the hidden states in f32 (`4·B·D` bytes), one f32 weight
/// chunk per worker (`4 · D · max(4, 2¹⁶ / D)` bytes at most, and never more rows than V has), one
/// running candidate per row per worker (`8·B` bytes), and the outputs. Nothing grows with the vocab
/// tile or with `B · V`.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    block_v: usize,
    threads: usize,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuBackend {
    /// The GPU's vocab tile ([`BLOCK_V`]) on all available cores.
    pub fn new() -> Self {
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        Self { block_v: BLOCK_V as usize, threads: threads.min(MAX_CPU_THREADS) }
    }

    /// Another vocab tile size: a positive multiple of 4, at most [`MAX_CPU_BLOCK_V`] (else
    /// [`Error::InvalidTileSize`]). Samples do not depend on it.
    pub fn with_block_v(mut self, block_v: usize) -> Result<Self> {
        if block_v == 0 || block_v % 4 != 0 || block_v > MAX_CPU_BLOCK_V {
            return Err(Error::InvalidTileSize(block_v));
        }
        self.block_v = block_v;
        Ok(self)
    }

    /// A fixed number of worker threads, clamped to `1 ..= MAX_CPU_THREADS`. Samples do not depend
    /// on it. A worker the OS refuses to start runs on the calling thread instead.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.clamp(1, MAX_CPU_THREADS);
        self
    }

    /// The vocab tile size.
    pub fn block_v(&self) -> usize {
        self.block_v
    }

    /// The worker thread count.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// One token per row of `hidden`.
    pub fn sample(&self, hidden: Matrix<'_>, weight: Matrix<'_>, params: &SamplingParams) -> Result<Vec<u32>> {
        Ok(self.sample_scored(hidden, weight, params)?.tokens)
    }

    /// Tokens and winning perturbed scores (and the log-probabilities `params` asks for).
    pub fn sample_scored(&self, hidden: Matrix<'_>, weight: Matrix<'_>, params: &SamplingParams) -> Result<Samples> {
        let (shape, _) = validate(
            (hidden.rows, hidden.cols, hidden.data.len()),
            (weight.rows, weight.cols, weight.data.len()),
            params,
        )?;
        let slots = slots(params, shape.b)?;
        if params.truncates(shape.v) || params.top_logprobs > 0 {
            let samples = self.sample_materialized(hidden.data, weight.data, shape, &slots, params);
            check_samples_of(&samples, params.n as usize, hidden, &[weight.data])?;
            return Ok(samples);
        }
        let want_mass = params.logprobs != LogProbs::Off;
        let (winners, mass) = self.winners(hidden.data, weight.data, (0, shape.v), shape, &slots, params, want_mass);
        let mut samples = samples_of(&winners);
        if want_mass {
            add_logprobs(&mut samples, params, &slots, &mass, |row, token| {
                let (d, t) = (shape.d, token as usize);
                let h: Vec<f32> = hidden.data[row * d..(row + 1) * d].iter().map(|x| x.to_f32()).collect();
                let w: Vec<f32> = weight.data[t * d..(t + 1) * d].iter().map(|x| x.to_f32()).collect();
                dot(&h, &w)
            });
        }
        check_samples_of(&samples, params.n as usize, hidden, &[weight.data])?;
        Ok(samples)
    }

    /// The rank-local step of vocab-parallel sampling ([`crate::shard`]): for every row of `hidden`
    /// (and sample, `[B, n]`), the best (perturbed score, **global** vocab index) among the shard's
    /// rows below `vocab` (the model's vocabulary; rows past it are padding). Merged over the shards
    /// that tile the vocabulary ([`merge_shard_candidates`]), the candidates give
    /// [`Self::sample_scored`]'s result on the whole weight, bit for bit. A shard entirely past
    /// `vocab` gives [`Candidate::EMPTY`] rows. Log-probabilities are not available over shards yet.
    pub fn shard_candidates(
        &self,
        hidden: Matrix<'_>,
        shard: VocabShard<'_>,
        vocab: usize,
        params: &SamplingParams,
    ) -> Result<Vec<Candidate>> {
        let w = shard.weight;
        let (shape, _) =
            validate((hidden.rows, hidden.cols, hidden.data.len()), (w.rows, w.cols, w.data.len()), params)?;
        if params.logprobs != LogProbs::Off {
            return Err(Error::Unsupported { control: "log-probabilities", path: "over vocab shards" });
        }
        if params.truncates(vocab) || params.top_logprobs > 0 {
            return Err(Error::Unsupported {
                control: "top-k / top-p / min-p and top log-probabilities",
                path: "over vocab shards",
            });
        }
        let max = flashsampling_kernels::config::MAX_DIM as usize;
        for (what, value) in [("vocab size V", vocab), ("shard end (global vocab row)", shard.end())] {
            if value > max {
                return Err(Error::TooLarge { what, value, max });
            }
        }
        if vocab == 0 {
            return Err(Error::EmptyVocab);
        }
        let slots = slots(params, shape.b)?;
        let rows = w.rows.min(vocab.saturating_sub(shard.offset));
        if rows == 0 {
            return Ok(vec![Candidate::EMPTY; slots.len()]);
        }
        Ok(self.winners(hidden.data, &w.data[..rows * shape.d], (shard.offset, vocab), shape, &slots, params, false).0)
    }

    /// Vocab-parallel sampling simulated in memory: each shard's candidates
    /// ([`Self::shard_candidates`], the ranks' work), then their merge (the exchange). `shards` must
    /// tile `0 .. vocab` in order ([`validate_shards`]); the result equals [`Self::sample_scored`] on
    /// the whole weight, tokens and scores bit for bit.
    pub fn sample_sharded(
        &self,
        hidden: Matrix<'_>,
        shards: &[VocabShard<'_>],
        vocab: usize,
        params: &SamplingParams,
    ) -> Result<Samples> {
        validate_shards(shards, vocab)?;
        let parts = shards
            .iter()
            .map(|&shard| self.shard_candidates(hidden, shard, vocab, params))
            .collect::<Result<Vec<_>>>()?;
        let samples = samples_of(&merge_shard_candidates(&parts)?);
        let weights: Vec<&[bf16]> = shards.iter().map(|s| s.weight.data).collect();
        check_samples_of(&samples, params.n as usize, hidden, &weights)?;
        Ok(samples)
    }

    /// Each slot's winning candidate over the weight rows `weight` (`[rows, D]`), which are global
    /// vocab rows `offset ..` of a vocabulary of `vocab` (`offset + rows ≤ vocab`; the noise is keyed
    /// by the global index), and, with `want_mass`, each hidden row's log-mass of its processed and
    /// raw logits. A slot is one sample of one hidden row (`[B, n]`): the logits of a row are computed
    /// once and serve all its samples. The vocab tiles are split into contiguous ranges, one per
    /// worker; a worker folds every tile of its range into one running candidate per slot (the merge
    /// is associative and commutative, so this is the kernel's `[B, n_tiles]` candidates reduced),
    /// and the workers' candidates are merged last.
    #[allow(clippy::too_many_arguments)]
    fn winners(
        &self,
        hidden: &[bf16],
        weight: &[bf16],
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

impl CpuBackend {
    /// The exact path for rows that truncate (top-k, top-p, min-p) or ask for their top tokens: each
    /// row's processed logits are materialized (one row of V floats per worker at a time), the row's
    /// kept set is found exactly ([`kept_threshold`]), every other token's logit becomes `−∞`, and the
    /// row is sampled from them with the same noise as everywhere (so a row that keeps everything
    /// draws exactly what the tiled path draws). Rows are split over the workers.
    fn sample_materialized(
        &self,
        hidden: &[bf16],
        weight: &[bf16],
        shape: Shape,
        slots: &[Slot],
        params: &SamplingParams,
    ) -> Samples {
        let Shape { b, d, v } = shape;
        let n = params.n as usize;
        let want_raw =
            params.logprobs == LogProbs::ProcessedAndRaw || (params.top_logprobs > 0 && params.top_logprobs_raw);
        let row = |r: usize| -> RowResult {
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
            let inv_t = slots[r * n].inv_temperature;
            if inv_t > 0.0 {
                let (k, p, min_p) = params.row_truncation(r);
                let t = kept_threshold(&z, 1.0 / inv_t, k, p, min_p);
                for x in z.iter_mut() {
                    if (*x as f64) < t {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
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
        let mut samples = Samples::plain(Vec::with_capacity(b * n), Vec::with_capacity(b * n));
        for r in &results {
            samples.tokens.extend(r.cands.iter().map(|c| c.token()));
            samples.scores.extend(r.cands.iter().map(|c| c.score));
        }
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
}

/// One row of the materialized path: its candidates and log-probabilities.
struct RowResult {
    cands: Vec<Candidate>,
    logprobs: Vec<f32>,
    raw_logprobs: Vec<f32>,
    lse: f32,
    top: Vec<(u32, f32)>,
}

impl RowResult {
    /// From the row's kept processed logits `z` (`−∞` outside the kept set), its raw logits, `1/T`
    /// (0: greedy) and its candidates.
    fn of(z: &[f32], raw: Option<&[f32]>, inv_t: f64, cands: &[Candidate], params: &SamplingParams) -> Self {
        let lse_of = |x: &mut dyn Iterator<Item = f64>| -> f64 {
            let xs: Vec<f64> = x.collect();
            let m = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            if m == f64::NEG_INFINITY { m } else { m + xs.iter().map(|&y| (y - m).exp()).sum::<f64>().ln() }
        };
        let greedy = inv_t == 0.0;
        let lse = if greedy { f64::NAN } else { lse_of(&mut z.iter().map(|&x| x as f64 * inv_t)) };
        let raw_lse = raw.map(|y| lse_of(&mut y.iter().map(|&x| x as f64)));
        let valid = |c: &Candidate| c.token() != flashsampling_kernels::INVALID_INDEX;
        let logprobs = cands
            .iter()
            .map(|c| match (valid(c), greedy) {
                (false, _) => f32::NAN,
                (true, true) => 0.0,
                (true, false) => (z[c.index as usize] as f64 * inv_t - lse) as f32,
            })
            .collect();
        let raw_logprobs = match (raw, raw_lse) {
            (Some(y), Some(l)) => cands
                .iter()
                .map(|c| if valid(c) { (y[c.index as usize] as f64 - l) as f32 } else { f32::NAN })
                .collect(),
            _ => Vec::new(),
        };
        let top = if params.top_logprobs == 0 {
            Vec::new()
        } else {
            let (vals, l, scale) = match (params.top_logprobs_raw, raw, raw_lse) {
                (true, Some(y), Some(l)) => (y, l, 1.0),
                _ if greedy => (z, 0.0, 0.0),
                _ => (z, lse, inv_t),
            };
            let mut order: Vec<u32> =
                (0..vals.len() as u32).filter(|&i| vals[i as usize] > f32::NEG_INFINITY).collect();
            order.sort_by(|&a, &b| vals[b as usize].total_cmp(&vals[a as usize]).then(a.cmp(&b)));
            if greedy && !params.top_logprobs_raw {
                // A greedy row's distribution is its argmax, with probability 1.
                order.truncate(1);
                order.iter().map(|&i| (i, 0.0)).collect()
            } else {
                order.truncate(params.top_logprobs as usize);
                order.iter().map(|&i| (i, (vals[i as usize] as f64 * scale - l) as f32)).collect()
            }
        };
        Self { cands: cands.to_vec(), logprobs, raw_logprobs, lse: lse as f32, top }
    }
}

/// The smallest processed logit a token may have to stay in a row's kept set (`−∞`: all kept), for
/// temperature `t`, then top-k (`k`; 0 or ≥ V: off), then top-p (`p`; 1: off) on the renormalized
/// remainder, then min-p (`min_p`; 0: off): the order vLLM's sampler applies them. Every one of them
/// keeps a top part of the row by logit, so their composition is a threshold on the logit:
///
/// - top-k: the k-th largest logit (every token tied with it stays, so ties may keep more than k);
/// - top-p: the logit of the last token of the smallest most-probable prefix (among the top-k) whose
///   probability reaches `p` of their mass (tokens tied with it stay);
/// - min-p: `max + T · ln(min_p)` (probability at least `min_p` times the largest).
///
/// Probabilities in f64 from the f32 logits; the most likely token is always kept.
pub(crate) fn kept_threshold(z: &[f32], t: f64, k: u32, p: f32, min_p: f32) -> f64 {
    let mut order: Vec<usize> = (0..z.len()).filter(|&i| z[i] > f32::NEG_INFINITY).collect();
    if order.is_empty() {
        return f64::NEG_INFINITY;
    }
    order.sort_by(|&a, &b| z[b].total_cmp(&z[a]).then(a.cmp(&b)));
    let zmax = z[order[0]] as f64;
    let mut threshold = f64::NEG_INFINITY;
    if k > 0 && (k as usize) < order.len() {
        threshold = z[order[k as usize - 1]] as f64;
    }
    if p < 1.0 {
        let kept: Vec<f64> = order
            .iter()
            .map(|&i| z[i] as f64)
            .take_while(|&x| x >= threshold)
            .map(|x| ((x - zmax) / t).exp())
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
    if min_p > 0.0 {
        threshold = threshold.max(zmax + t * (min_p as f64).ln());
    }
    threshold.min(zmax)
}

/// One sample of one batch row: its noise key (seed, stream, sample index) and logit transform.
struct Slot {
    noise: RowNoise,
    transform: Transform,
    /// `1 / T` in f64 for the log-probabilities (0 for a greedy row: no processed distribution).
    inv_temperature: f64,
}

/// The `[B, n]` slots of a validated call: row `r`'s temperature and seed (per-row or the call's),
/// its stream, sample indices `sample .. sample + n`.
fn slots(params: &SamplingParams, b: usize) -> Result<Vec<Slot>> {
    let mut out = Vec::with_capacity(b * params.n as usize);
    for row in 0..b {
        // `validate` checked every list's length and every temperature.
        let t = params.row_temperature(row).expect("validated per-row temperatures");
        let transform = SamplingParams::new(t, 0).transform()?;
        let noise = params.row_noise(row).expect("validated stream and seed lists");
        let inv_temperature = if transform.is_greedy() { 0.0 } else { 1.0 / t as f64 };
        for j in 0..params.n {
            out.push(Slot { noise: RowNoise { sample: noise.sample + j, ..noise }, transform, inv_temperature });
        }
    }
    Ok(out)
}

/// Online log-sum-exp in f64 of a row's processed (`logit / T`) and raw logits.
#[derive(Clone, Copy, Debug)]
struct RowMass {
    processed: (f64, f64),
    raw: (f64, f64),
}

impl RowMass {
    const EMPTY: Self = Self { processed: (f64::NEG_INFINITY, 0.0), raw: (f64::NEG_INFINITY, 0.0) };

    fn add((max, sum): &mut (f64, f64), x: f64) {
        if x > *max {
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
            if max == f64::NEG_INFINITY {
                return (max, 0.0);
            }
            (max, a.1 * (a.0 - max).exp() + b.1 * (b.0 - max).exp())
        }
        Self { processed: join(self.processed, o.processed), raw: join(self.raw, o.raw) }
    }

    fn lse((max, sum): (f64, f64)) -> f64 {
        max + sum.ln()
    }
}

/// Fills the log-probabilities of `samples` from the rows' log-mass and each sampled token's logit
/// (`logit(row, token)`, the same f32 dot product the scan used).
fn add_logprobs(
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
        let processed =
            if slot.inv_temperature > 0.0 { z * slot.inv_temperature - RowMass::lse(mass[row].processed) } else { 0.0 };
        lp.push(processed as f32);
        raw.push((y - RowMass::lse(mass[row].raw)) as f32);
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

/// Tokens and scores of the winning candidates.
fn samples_of(winners: &[Candidate]) -> Samples {
    Samples::plain(winners.iter().map(|c| c.token()).collect(), winners.iter().map(|c| c.score).collect())
}

/// f32 dot product with eight interleaved partial sums (fixed order: deterministic, and vectorizable).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for k in 0..8 {
            acc[k] += a[8 * c + k] * b[8 * c + k];
        }
    }
    let mut tail = 0f32;
    for i in 8 * chunks..a.len() {
        tail += a[i] * b[i];
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail
}
