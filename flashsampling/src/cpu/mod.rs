//! The CPU backend: the same tiles, the same noise, the same epilogue and merge as the GPU kernels
//! (the kernel crate's own functions), with logits summed in f32 on the host. The embedded default
//! when no GPU is present, and the reference the GPU tests compare against.

mod exact;
mod score;
#[cfg(feature = "internals")]
pub mod screen;
mod tiled;

use tiled::{RowMass, add_logprobs, log_prob};

use flashsampling_kernels::config::BLOCK_V;
use flashsampling_kernels::{Candidate, RowNoise, Transform};

use crate::error::{Error, Result};
use crate::params::{Element, LogProbs, Matrix, SamplingParams, validate, validate_in_vocab};
use crate::shard::{VocabShard, validate_shards};
use crate::{Samples, check_samples_of};
use flashsampling_kernels::INVALID_INDEX;
use flashsampling_kernels::ranks::{RankLogProbs, RankRow, merge_rank_row};

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
/// tile or with `B · V`. Calls that truncate (top-k, top-p, min-p) or ask for top log-probs take the
/// exact path instead: one row's V logits in f32 (and its raw copy for raw log-probs) per worker.
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
            return Err(Error::InvalidTileSize { block_v, max: MAX_CPU_BLOCK_V });
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
    ///
    /// ```
    /// use flashsampling::{CpuBackend, Matrix, SamplingParams};
    /// use half::bf16;
    ///
    /// let (b, d, v) = (2, 16, 100);
    /// let hidden = vec![bf16::from_f32(0.5); b * d];
    /// // Row t of the weight is t / 100 everywhere: the last token has the largest logit.
    /// let weight: Vec<bf16> = (0..v * d).map(|i| bf16::from_f32((i / d) as f32 * 0.01)).collect();
    /// let params = SamplingParams::new(0.0, 0); // temperature 0: greedy
    /// let tokens = CpuBackend::new().sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &params)?;
    /// assert_eq!(tokens, vec![v as u32 - 1; b]);
    /// # Ok::<(), flashsampling::Error>(())
    /// ```
    pub fn sample<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
    ) -> Result<Vec<u32>> {
        Ok(self.sample_scored(hidden, weight, params)?.tokens)
    }

    /// Tokens and winning perturbed scores (and the log-probabilities `params` asks for).
    ///
    /// ```
    /// use flashsampling::params::LogProbs;
    /// use flashsampling::{CpuBackend, Matrix, SamplingParams};
    ///
    /// let (b, d, v) = (1, 8, 4);
    /// let hidden = vec![half::bf16::ONE; b * d];
    /// let weight = vec![half::bf16::ZERO; v * d]; // every logit 0: uniform over 4 tokens
    /// let params = SamplingParams::new(1.0, 42).with_logprobs(LogProbs::Processed);
    /// let out = CpuBackend::new().sample_scored(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &params)?;
    /// let lp = out.logprobs.unwrap()[0];
    /// assert!((lp - (0.25f32).ln()).abs() < 1e-6);
    /// # Ok::<(), flashsampling::Error>(())
    /// ```
    pub fn sample_scored<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
    ) -> Result<Samples> {
        let samples = self.sample_scored_rows(hidden, weight, params)?;
        check_samples_of(&samples, params.n as usize, hidden, &[weight.data])?;
        Ok(samples)
    }

    /// [`Self::sample_scored`], except that a row without a token (a NaN winning score, or every
    /// token masked) is reported in place — [`INVALID_INDEX`] with its NaN
    /// or `−∞` score — instead of failing the call: what [`crate::GpuBackend::sample_device`]
    /// gives, for callers that treat every row alike on both backends (Python). Invalid input is
    /// still an error.
    ///
    /// ```
    /// use flashsampling::{CpuBackend, INVALID_INDEX, Matrix, SamplingParams};
    ///
    /// let (d, v) = (8, 4);
    /// let mut hidden = vec![half::bf16::ONE; 2 * d];
    /// hidden[d + 3] = half::bf16::NAN; // row 1's logits are NaN
    /// let weight = vec![half::bf16::ONE; v * d];
    /// let (h, w) = (Matrix::new(&hidden, 2, d), Matrix::new(&weight, v, d));
    /// let out = CpuBackend::new().sample_scored_rows(h, w, &SamplingParams::new(1.0, 3))?;
    /// assert!(out.tokens[0] < 4 && out.tokens[1] == INVALID_INDEX && out.scores[1].is_nan());
    /// assert!(CpuBackend::new().sample_scored(h, w, &SamplingParams::new(1.0, 3)).is_err());
    /// # Ok::<(), flashsampling::Error>(())
    /// ```
    pub fn sample_scored_rows<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
    ) -> Result<Samples> {
        let (shape, _) = validate(
            (hidden.rows, hidden.cols, hidden.data.len()),
            (weight.rows, weight.cols, weight.data.len()),
            params,
        )?;
        let slots = slots(params, shape.b);
        if params.runs_truncation(shape.v) {
            return Ok(self.sample_materialized(hidden.data, weight.data, shape, &slots, params));
        }
        let want_mass = params.logprobs != LogProbs::Off;
        let (winners, mass) = self.winners(hidden.data, weight.data, (0, shape.v), shape, &slots, params, want_mass);
        Ok(tiled_samples(&winners, &mass, params, &slots, (hidden, weight)))
    }

    /// The rank-local step of vocab-parallel sampling ([`crate::shard`]): for every row of `hidden`
    /// (and sample, `[B, n]`), the best (perturbed score, **global** vocab index) among the shard's
    /// rows below `vocab` (the model's vocabulary; rows past it are padding). Merged over the shards
    /// that tile the vocabulary ([`crate::shard::merge_shard_candidates`]), the candidates give
    /// [`Self::sample_scored`]'s result on the whole weight, bit for bit. A shard entirely past
    /// `vocab` gives [`Candidate::EMPTY`] rows. With log-probabilities, a rank sends
    /// [`Self::shard_results`] instead.
    pub fn shard_candidates<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        shard: VocabShard<'_, T>,
        vocab: usize,
        params: &SamplingParams,
    ) -> Result<Vec<Candidate>> {
        let w = shard.weight;
        let shape = validate_shard(hidden, shard, vocab, params, false)?;
        let slots = slots(params, shape.b);
        let rows = shard.rows_in(vocab);
        if rows == 0 {
            return Ok(vec![Candidate::EMPTY; slots.len()]);
        }
        Ok(self.winners(hidden.data, &w.data[..rows * shape.d], (shard.offset, vocab), shape, &slots, params, false).0)
    }

    /// The rank-local step with log-probabilities: per row and sample, what a rank sends in the
    /// exchange ([`RankRow`]: its winner among the shard's rows below `vocab`, global index, and with
    /// [`SamplingParams::logprobs`] its log-probabilities and log-sum-exps over the shard, in f64
    /// rounded to f32). [`merge_rank_row`] of the shards' rows (the GPU's `merge_ranks` runs the same
    /// function) gives the whole head's result.
    pub fn shard_results<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        shard: VocabShard<'_, T>,
        vocab: usize,
        params: &SamplingParams,
    ) -> Result<Vec<RankRow>> {
        let w = shard.weight;
        let shape = validate_shard(hidden, shard, vocab, params, true)?;
        let slots = slots(params, shape.b);
        let want_mass = params.logprobs != LogProbs::Off;
        let rows = shard.rows_in(vocab);
        if rows == 0 {
            let none = RankLogProbs {
                logprob: f32::NAN,
                raw_logprob: f32::NAN,
                logsumexp: f32::NEG_INFINITY,
                raw_logsumexp: f32::NEG_INFINITY,
            };
            let row = RankRow { token: INVALID_INDEX, score: f32::NEG_INFINITY, logprobs: want_mass.then_some(none) };
            return Ok(vec![row; slots.len()]);
        }
        let d = shape.d;
        let (winners, mass) =
            self.winners(hidden.data, &w.data[..rows * d], (shard.offset, vocab), shape, &slots, params, want_mass);
        let n = params.n as usize;
        Ok(winners
            .iter()
            .zip(&slots)
            .enumerate()
            .map(|(i, (c, slot))| {
                let (row, token) = (i / n, c.token());
                let logprobs = want_mass.then(|| {
                    let m = &mass[row];
                    let greedy = slot.inv_temperature == 0.0;
                    let (lse, raw_lse) = (m.processed_lse(), m.raw_lse());
                    let (logprob, raw_logprob) = if token == INVALID_INDEX {
                        (f32::NAN, f32::NAN)
                    } else {
                        let t = token as usize - shard.offset;
                        let h: Vec<f32> = hidden.data[row * d..(row + 1) * d].iter().map(|x| x.to_f32()).collect();
                        let wt: Vec<f32> = w.data[t * d..(t + 1) * d].iter().map(|x| x.to_f32()).collect();
                        let y = dot(&h, &wt);
                        let z = params.row_logits(row).one(y, token as usize) as f64;
                        let lp = if greedy { 0.0 } else { log_prob(z * slot.inv_temperature, lse) };
                        (lp as f32, log_prob(y as f64, raw_lse) as f32)
                    };
                    RankLogProbs {
                        logprob,
                        raw_logprob,
                        logsumexp: if greedy { f32::NAN } else { lse as f32 },
                        raw_logsumexp: raw_lse as f32,
                    }
                });
                RankRow { token, score: c.score, logprobs }
            })
            .collect())
    }

    /// Vocab-parallel sampling simulated in memory: each shard's results
    /// ([`Self::shard_results`], the ranks' work), then their merge in rank order with the kernel
    /// crate's [`merge_rank_row`] (the exchange; the GPU's merge kernel runs the same function).
    /// `shards` must tile `0 .. vocab` in order ([`validate_shards`]); the result equals
    /// [`Self::sample_scored`] on the whole weight, tokens and scores bit for bit, log-probabilities
    /// within f32 rounding of the merge. With top-k / top-p / min-p the shards exchange their top
    /// lists instead (the certificate, and the exact fallback for the rows it leaves:
    /// [`Samples::truncation_fallback`]); top log-probabilities come from the rows' logits gathered
    /// from the shards (as the fallback gathers them).
    pub fn sample_sharded<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        shards: &[VocabShard<'_, T>],
        vocab: usize,
        params: &SamplingParams,
    ) -> Result<Samples> {
        validate_shards(shards, vocab)?;
        if params.runs_truncation(vocab) {
            // Truncation: the shards exchange their top lists (simulated); see `exact.rs`. Top
            // log-probabilities come from the rows gathered from the shards.
            for &shard in shards {
                let w = shard.weight;
                validate_in_vocab(
                    (hidden.rows, hidden.cols, hidden.data.len()),
                    (w.rows, w.cols, w.data.len()),
                    params,
                    vocab,
                )?;
            }
            let samples = self.sample_sharded_truncated(hidden, shards, vocab, params);
            check_samples_of(&samples, params.n as usize, hidden, &scored_rows(shards, vocab))?;
            return Ok(samples);
        }
        let parts =
            shards.iter().map(|&shard| self.shard_results(hidden, shard, vocab, params)).collect::<Result<Vec<_>>>()?;
        let slots = parts.first().map_or(0, Vec::len);
        let exp = |x: f32| (x as f64).exp() as f32;
        let ln = |x: f32| (x as f64).ln() as f32;
        let merged: Vec<RankRow> = (0..slots).map(|i| merge_rank_row(parts.iter().map(|p| p[i]), exp, ln)).collect();
        let mut samples =
            Samples::plain(merged.iter().map(|r| r.token).collect(), merged.iter().map(|r| r.score).collect());
        if params.logprobs != LogProbs::Off {
            let lp: Vec<RankLogProbs> = merged.iter().map(|r| r.logprobs.expect("every shard computed them")).collect();
            samples.logprobs = Some(lp.iter().map(|l| l.logprob).collect());
            if params.logprobs == LogProbs::ProcessedAndRaw {
                samples.raw_logprobs = Some(lp.iter().map(|l| l.raw_logprob).collect());
            }
            samples.logsumexp = Some(lp.iter().step_by(params.n as usize).map(|l| l.logsumexp).collect());
        }
        check_samples_of(&samples, params.n as usize, hidden, &scored_rows(shards, vocab))?;
        Ok(samples)
    }
}

/// The weight rows of `shards` that are scored: those below `vocab` (padding past it never is, so a
/// NaN there does not make a row's error [`Error::NanLogit`]).
fn scored_rows<'a, T>(shards: &[VocabShard<'a, T>], vocab: usize) -> Vec<&'a [T]> {
    shards.iter().map(|s| &s.weight.data[..(s.rows_in(vocab) * s.weight.cols).min(s.weight.data.len())]).collect()
}

/// The checks of a rank-local step: shapes and parameters against the whole vocabulary (`vocab`:
/// V > 0 and within the kernels' limit), log-probabilities only where the step sends them
/// (`logprobs`), no truncation (it cannot be exchanged yet), the shard's end within the limit.
fn validate_shard<T: Element>(
    hidden: Matrix<'_, T>,
    shard: VocabShard<'_, T>,
    vocab: usize,
    params: &SamplingParams,
    logprobs: bool,
) -> Result<crate::params::Shape> {
    let w = shard.weight;
    let (shape, _) = validate_in_vocab(
        (hidden.rows, hidden.cols, hidden.data.len()),
        (w.rows, w.cols, w.data.len()),
        params,
        vocab,
    )?;
    if !logprobs && params.logprobs != LogProbs::Off {
        return Err(Error::Unsupported { control: "log-probabilities", path: "over vocab shards" });
    }
    if params.runs_truncation(vocab) {
        return Err(Error::Unsupported {
            control: "top-k / top-p / min-p and top log-probabilities",
            path: "over vocab shards",
        });
    }
    let max = flashsampling_kernels::config::MAX_DIM as usize;
    if shard.end() > max {
        return Err(Error::TooLarge { what: "shard end (global vocab row)", value: shard.end(), max });
    }
    Ok(shape)
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
fn slots(params: &SamplingParams, b: usize) -> Vec<Slot> {
    let mut out = Vec::with_capacity(b * params.n as usize);
    for row in 0..b {
        // `validate` checked every list's length and every temperature.
        let t = params.row_temperature(row).expect("validated per-row temperatures");
        let transform = Transform::from_temperature(t);
        let noise = params.row_noise(row).expect("validated stream and seed lists");
        let inv_temperature = if transform.is_greedy() { 0.0 } else { 1.0 / t as f64 };
        for j in 0..params.n {
            out.push(Slot { noise: RowNoise { sample: noise.sample + j, ..noise }, transform, inv_temperature });
        }
    }
    out
}

/// The tiled path's samples: the winners, with the log-probabilities `params` asks for from the
/// pass's log-mass `mass` (`tiled::add_logprobs`; each token's logit by [`logit_of`]).
fn tiled_samples<T: Element>(
    winners: &[Candidate],
    mass: &[RowMass],
    params: &SamplingParams,
    slots: &[Slot],
    (hidden, weight): (Matrix<'_, T>, Matrix<'_, T>),
) -> Samples {
    let mut samples = samples_of(winners);
    if params.logprobs != LogProbs::Off {
        add_logprobs(&mut samples, params, slots, mass, |row, token| logit_of(hidden, weight, row, token));
    }
    samples
}

/// The f32 logit of (`row`, `token`): the hidden row and the weight row in f32, [`dot`] — the
/// arithmetic of every path that scores one token alone.
fn logit_of<T: Element>(hidden: Matrix<'_, T>, weight: Matrix<'_, T>, row: usize, token: u32) -> f32 {
    let (d, t) = (hidden.cols, token as usize);
    let h: Vec<f32> = hidden.data[row * d..(row + 1) * d].iter().map(|x| x.to_f32()).collect();
    let w: Vec<f32> = weight.data[t * d..(t + 1) * d].iter().map(|x| x.to_f32()).collect();
    dot(&h, &w)
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
