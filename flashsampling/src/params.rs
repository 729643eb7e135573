//! Sampling parameters, shapes and their validation.

use flashsampling_kernels::config::{D_ALIGN, Epilogue, MAX_DIM};
use flashsampling_kernels::launch::LsePath;
pub use flashsampling_kernels::params::ElementType;
use flashsampling_kernels::{RowNoise, Transform};
use half::bf16;

use crate::error::{Error, Result};

/// How to sample.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature `T`: tokens are drawn from `softmax(logits / T)`; `0` is greedy (argmax),
    /// and so is a subnormal `T` (below [`flashsampling_kernels::epilogue::MIN_SAMPLING_TEMPERATURE`]).
    /// Must be finite and ≥ 0.
    pub temperature: f32,
    /// Philox key. The same seed, stream and sample index always give the same token.
    pub seed: u64,
    /// Per-row stream ids (one per batch row); `None` means row `i` uses stream `i`. Give a request
    /// the same stream id wherever it sits in a batch (see [`flashsampling_kernels::stream_id`]) and
    /// its token does not depend on the batch.
    pub streams: Option<Vec<u64>>,
    /// Sample index (0 for the first sample of a row); below 2^31, as the top bit of the noise key's
    /// sample word marks the refinement draws (see [`flashsampling_kernels::noise`]).
    pub sample: u32,
    /// Per-row sample indices (one per batch row), overriding `sample`: a decode position, so that
    /// a request's token at position `p` is the same whichever step or batch draws it (speculative
    /// verification, [`crate::speculative`]). Below 2^31 (with `n` samples: `p + n − 1` too).
    pub positions: Option<Vec<u32>>,
    /// Per-row temperatures (one per batch row), overriding `temperature`; `0` is greedy for that
    /// row.
    pub temperatures: Option<Vec<f32>>,
    /// Per-row seeds (one per batch row), overriding `seed`: the noise key of row `r` is
    /// (`seeds[r]`, its stream, the sample index, the vocab index).
    pub seeds: Option<Vec<u64>>,
    /// Samples per row, `1 ..= MAX_SAMPLES_PER_ROW`: sample `j` of a row uses sample index
    /// `sample + j` and is the token a one-sample call with that index draws. Tokens come out
    /// `[B, n]`, row-major (on the GPU, one pass over the weights scores the `B·n` rows).
    pub n: u32,
    /// Which log-probabilities to return with the tokens ([`LogProbs`]).
    pub logprobs: LogProbs,
    /// Soft-capping of the logits, `cap · tanh(logit / cap)` (Gemma 2), before everything else;
    /// finite and > 0.
    pub softcap: Option<f32>,
    /// Allowed tokens per row ([`crate::controls::TokenMask`]).
    pub allowed: Option<crate::controls::TokenMask>,
    /// Sparse per-row logit adjustments ([`crate::controls::SparseAdjustments`]). CPU backend only
    /// for now.
    pub adjustments: Option<crate::controls::SparseAdjustments>,
    /// Per-row top-k (one per row; `0` or `≥ V`: off).
    pub top_k: Option<Vec<u32>>,
    /// Per-row top-p (one per row, in `(0, 1]`; `1`: off).
    pub top_p: Option<Vec<f32>>,
    /// Per-row min-p (one per row, in `[0, 1]`; `0`: off).
    pub min_p: Option<Vec<f32>>,
    /// Also return each row's `top_logprobs` most likely tokens with their log-probabilities (up to
    /// [`MAX_TOP_LOGPROBS`]; 0: off): of the processed distribution (the one sampled from,
    /// truncation included), or of `softmax(logits)` with `top_logprobs_raw`. On the GPU they come
    /// from the truncation step's sorted prefix of each row (a row whose prefix is too short, and
    /// every row of a raw request in a call that soft-caps, masks or adjusts, from the exact
    /// fallback); not over vocab shards yet.
    pub top_logprobs: u32,
    /// `top_logprobs` of the raw distribution (`softmax(logits)`, nothing applied) instead.
    pub top_logprobs_raw: bool,
    /// Exact log-sum-exps (GPU): each row's log-sum-exps are summed in integer bins at absolute
    /// binary places ([`flashsampling_kernels::exactmass`]), so every log-probability and
    /// log-sum-exp of the call is the same bits whatever splits the vocabulary — the blocks of one
    /// GPU or the ranks of a tensor-parallel group ([`crate::tp`]): a sharded call equals the
    /// one-GPU call bit for bit. The call then runs the exact path: its logits are materialized
    /// (one `mma.sync` pass over the weight, `B × V` f32 in the call's buffers), sampled and scored
    /// by the GEMM-fed kernels and summed exactly per row; tokens are the same as on the default
    /// path except at f32 near-ties of the logits; the call runs the GEMM-fed kernels whatever
    /// variant is forced ([`crate::GpuBackend::set_fused_variant`]). Off by default (the fused
    /// log-probabilities are then within ~1e-6 of these, and their last bits follow the partition).
    /// With top-k / top-p / min-p or top log-probabilities, a one-GPU call takes every row through the
    /// exact fallback instead (its logits materialized, the kept set found exactly, the kept set's and
    /// the raw log-sum-exps summed in the same bins): a request without truncation of its own gets
    /// the bits of the call without it; over tensor-parallel ranks that is not built yet
    /// (`Error::Unsupported`). No effect on a call that reads no log-sum-exp (no log-probabilities,
    /// top log-probabilities or given tokens); the CPU backend ignores it (its sums are f64).
    pub exact_logsumexp: bool,
}

/// Most tokens [`SamplingParams::top_logprobs`] returns per row.
pub const MAX_TOP_LOGPROBS: u32 = flashsampling_kernels::params::MAX_TOP_N;

/// Log-probabilities returned with the tokens ([`crate::Samples::logprobs`] and friends).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogProbs {
    /// None (the default: plain sampling computes nothing more).
    #[default]
    Off,
    /// Of each sampled token under the distribution sampled from (`softmax(logits / T)` of its row),
    /// and each row's log-sum-exp of `logits / T`.
    Processed,
    /// As `Processed`, and also under the model's own distribution (`softmax(logits)`: `T = 1`,
    /// nothing applied), as reinforcement-learning users need.
    ProcessedAndRaw,
}

/// Most samples per row in one call ([`SamplingParams::n`]).
pub const MAX_SAMPLES_PER_ROW: u32 = 1024;

impl SamplingParams {
    /// Temperature `temperature`, seed `seed`, streams = row indices, sample 0. The builders add the
    /// per-request controls:
    ///
    /// ```
    /// use flashsampling::params::LogProbs;
    /// use flashsampling::{SamplingParams, stream_id};
    ///
    /// let (b, step) = (3, 17);
    /// let params = SamplingParams::new(0.8, 42)
    ///     .with_streams((0..b as u32).map(|r| stream_id(r, step)).collect()) // a stream per request
    ///     .with_temperatures(vec![0.7, 0.0, 1.0]) // per row; 0 = greedy
    ///     .with_top_p(vec![0.9, 1.0, 0.95])
    ///     .with_min_p(vec![0.0, 0.0, 0.05])
    ///     .with_logprobs(LogProbs::Processed);
    /// assert_eq!(params.temperature, 0.8);
    /// ```
    pub fn new(temperature: f32, seed: u64) -> Self {
        Self {
            temperature,
            seed,
            streams: None,
            sample: 0,
            temperatures: None,
            seeds: None,
            positions: None,
            n: 1,
            logprobs: LogProbs::Off,
            softcap: None,
            allowed: None,
            adjustments: None,
            top_k: None,
            top_p: None,
            min_p: None,
            top_logprobs: 0,
            top_logprobs_raw: false,
            exact_logsumexp: false,
        }
    }

    /// Greedy decoding (temperature 0).
    pub fn greedy() -> Self {
        Self::new(0.0, 0)
    }

    /// Sets per-row stream ids.
    pub fn with_streams(mut self, streams: Vec<u64>) -> Self {
        self.streams = Some(streams);
        self
    }

    /// Sets the sample index.
    pub fn with_sample(mut self, sample: u32) -> Self {
        self.sample = sample;
        self
    }

    /// Sets per-row sample indices (decode positions), overriding [`Self::sample`].
    pub fn with_positions(mut self, positions: Vec<u32>) -> Self {
        self.positions = Some(positions);
        self
    }

    /// Sets per-row temperatures (`0` = greedy for that row).
    pub fn with_temperatures(mut self, temperatures: Vec<f32>) -> Self {
        self.temperatures = Some(temperatures);
        self
    }

    /// Sets per-row seeds.
    pub fn with_seeds(mut self, seeds: Vec<u64>) -> Self {
        self.seeds = Some(seeds);
        self
    }

    /// Sets the number of samples per row.
    pub fn with_samples_per_row(mut self, n: u32) -> Self {
        self.n = n;
        self
    }

    /// Asks for log-probabilities.
    pub fn with_logprobs(mut self, logprobs: LogProbs) -> Self {
        self.logprobs = logprobs;
        self
    }

    /// Soft-caps the logits at `cap`.
    pub fn with_softcap(mut self, cap: f32) -> Self {
        self.softcap = Some(cap);
        self
    }

    /// Sets the allowed-token mask.
    pub fn with_allowed(mut self, mask: crate::controls::TokenMask) -> Self {
        self.allowed = Some(mask);
        self
    }

    /// Sets the sparse logit adjustments.
    pub fn with_adjustments(mut self, adjustments: crate::controls::SparseAdjustments) -> Self {
        self.adjustments = Some(adjustments);
        self
    }

    /// Per-row top-k (`0` or `≥ V`: off for that row).
    pub fn with_top_k(mut self, k: Vec<u32>) -> Self {
        self.top_k = Some(k);
        self
    }

    /// Per-row top-p (`1`: off for that row).
    pub fn with_top_p(mut self, p: Vec<f32>) -> Self {
        self.top_p = Some(p);
        self
    }

    /// Per-row min-p (`0`: off for that row).
    pub fn with_min_p(mut self, min_p: Vec<f32>) -> Self {
        self.min_p = Some(min_p);
        self
    }

    /// Asks for each row's `n` most likely tokens with their log-probabilities, of the processed
    /// distribution, or of `softmax(logits)` when `raw`.
    pub fn with_top_logprobs(mut self, n: u32, raw: bool) -> Self {
        self.top_logprobs = n;
        self.top_logprobs_raw = raw;
        self
    }

    /// Sets [`Self::exact_logsumexp`].
    pub fn with_exact_logsumexp(mut self, on: bool) -> Self {
        self.exact_logsumexp = on;
        self
    }

    /// Whether a call with these parameters over a `vocab`-token head takes the truncating path: a
    /// row truncates (top-k / top-p / min-p) or top log-probabilities are asked (they come from the
    /// truncation's sorted prefix).
    pub(crate) fn runs_truncation(&self, vocab: usize) -> bool {
        self.truncates(vocab) || self.top_logprobs > 0
    }

    /// The fused kernel's epilogue for a call with these parameters over a `vocab`-token head: the
    /// truncation step where the call [`Self::runs_truncation`], else log-probabilities where asked,
    /// else sampling alone.
    pub(crate) fn epilogue(&self, vocab: usize) -> Epilogue {
        match (self.runs_truncation(vocab), self.logprobs) {
            (true, _) => Epilogue::Truncate,
            (false, LogProbs::Off) => Epilogue::Sample,
            (false, _) => Epilogue::LogProbs,
        }
    }

    /// Where a GPU call with these parameters (`scoring`: with given tokens) over a `vocab`-token
    /// head gets its log-sum-exps: an exact path with [`Self::exact_logsumexp`] where something reads
    /// a log-sum-exp — log-probabilities, top log-probabilities, or given tokens (a scoring call asks
    /// log-probabilities). A call that only truncates keeps the fused pass.
    pub(crate) fn lse_path(&self, vocab: usize, scoring: bool) -> LsePath {
        let reads_lse = self.logprobs != LogProbs::Off || self.top_logprobs > 0 || scoring;
        LsePath::of(self.exact_logsumexp && reads_lse, self.epilogue(vocab))
    }

    /// Row `row`'s truncation: (top-k, top-p, min-p), each at its "off" value where not set.
    pub fn row_truncation(&self, row: usize) -> (u32, f32, f32) {
        let get = |v: &Option<Vec<f32>>, off: f32| v.as_ref().and_then(|v| v.get(row).copied()).unwrap_or(off);
        (
            self.top_k.as_ref().and_then(|k| k.get(row).copied()).unwrap_or(0),
            get(&self.top_p, 1.0),
            get(&self.min_p, 0.0),
        )
    }

    /// The parameters of rows `range` of a call (its per-row lists cut to the range; the default
    /// streams, row indices, made explicit; the mask's and adjustments' rows cut too), so that each
    /// row keeps its noise key, temperature and controls: a batch split into calls (as a long
    /// truncating scoring call is split into launches) draws and scores what the whole call would.
    ///
    /// ```
    /// use flashsampling::SamplingParams;
    ///
    /// let p = SamplingParams::new(0.8, 7).with_top_p(vec![0.9, 1.0, 0.5]);
    /// let tail = p.rows(1..3)?;
    /// assert_eq!((tail.streams, tail.top_p), (Some(vec![1, 2]), Some(vec![1.0, 0.5])));
    /// assert!(p.rows(2..4).is_err()); // top-p has 3 rows
    /// # Ok::<(), flashsampling::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `range` is not inside every per-row list, the mask's rows or
    /// the adjustments' offsets (or is reversed), before anything is copied.
    pub fn rows(&self, range: std::ops::Range<usize>) -> Result<Self> {
        self.check_rows(&range)?;
        let cut = |v: &Option<Vec<f32>>| v.as_ref().map(|v| v[range.clone()].to_vec());
        let allowed = self.allowed.as_ref().map(|m| crate::controls::TokenMask {
            words: m.words[range.start * m.words_per_row..range.end * m.words_per_row].to_vec(),
            words_per_row: m.words_per_row,
        });
        let adjustments = self.adjustments.as_ref().map(|a| {
            let (first, last) = (a.offsets[range.start], a.offsets[range.end]);
            crate::controls::SparseAdjustments {
                offsets: a.offsets[range.start..=range.end].iter().map(|&o| o - first).collect(),
                tokens: a.tokens[first..last].to_vec(),
                adjustments: a.adjustments[first..last].to_vec(),
            }
        });
        // Field by field (no clone of the whole call's lists or mask).
        Ok(Self {
            temperature: self.temperature,
            seed: self.seed,
            streams: Some(range.clone().map(|r| self.stream(r).expect("validated")).collect()),
            sample: self.sample,
            positions: self.positions.as_ref().map(|p| p[range.clone()].to_vec()),
            temperatures: cut(&self.temperatures),
            seeds: self.seeds.as_ref().map(|s| s[range.clone()].to_vec()),
            n: self.n,
            logprobs: self.logprobs,
            softcap: self.softcap,
            allowed,
            adjustments,
            top_k: self.top_k.as_ref().map(|k| k[range.clone()].to_vec()),
            top_p: cut(&self.top_p),
            min_p: cut(&self.min_p),
            top_logprobs: self.top_logprobs,
            top_logprobs_raw: self.top_logprobs_raw,
            exact_logsumexp: self.exact_logsumexp,
        })
    }

    /// That every per-row part of these parameters has rows `range` ([`Self::rows`]' errors).
    fn check_rows(&self, range: &std::ops::Range<usize>) -> Result<()> {
        let end = range.end;
        let short = |buffer: &'static str, actual: usize| Error::LengthMismatch { buffer, expected: end, actual };
        if range.start > end {
            return Err(short("row range (start ≤ end)", range.start));
        }
        let lists = [
            ("streams", self.streams.as_ref().map(Vec::len)),
            ("positions", self.positions.as_ref().map(Vec::len)),
            ("temperatures", self.temperatures.as_ref().map(Vec::len)),
            ("seeds", self.seeds.as_ref().map(Vec::len)),
            ("top_k", self.top_k.as_ref().map(Vec::len)),
            ("top_p", self.top_p.as_ref().map(Vec::len)),
            ("min_p", self.min_p.as_ref().map(Vec::len)),
            ("allowed-token mask (rows)", self.allowed.as_ref().map(|m| m.words.len() / m.words_per_row.max(1))),
        ];
        for (buffer, len) in lists {
            if let Some(len) = len.filter(|&l| l < end) {
                return Err(short(buffer, len));
            }
        }
        if let Some(a) = &self.adjustments {
            let rows = a.offsets.len().saturating_sub(1);
            let (first, last) = (a.offsets.get(range.start), a.offsets.get(end));
            let fits =
                matches!((first, last), (Some(f), Some(l)) if f <= l && *l <= a.tokens.len().min(a.adjustments.len()));
            if !fits {
                return Err(short("adjustment offsets (rows, in range of the tokens)", rows));
            }
        }
        Ok(())
    }

    /// Whether any row truncates its distribution (top-k, top-p or min-p on) for a vocabulary of `v`.
    pub fn truncates(&self, v: usize) -> bool {
        self.top_k.as_ref().is_some_and(|k| k.iter().any(|&k| k > 0 && (k as usize) < v))
            || self.top_p.as_ref().is_some_and(|p| p.iter().any(|&p| p < 1.0))
            || self.min_p.as_ref().is_some_and(|m| m.iter().any(|&m| m > 0.0))
    }

    /// What row `row`'s logits go through before the temperature.
    pub(crate) fn row_logits(&self, row: usize) -> crate::controls::RowLogits<'_> {
        crate::controls::RowLogits {
            softcap: self.softcap,
            mask: self.allowed.as_ref().map(|m| m.row(row)),
            adjust: self.adjustments.as_ref().map_or((&[][..], &[][..]), |a| a.row(row)),
        }
    }

    /// The temperature of row `row` (the per-row list's entry, else the call's); `None` past the end
    /// of the list.
    pub fn row_temperature(&self, row: usize) -> Option<f32> {
        match &self.temperatures {
            Some(t) => t.get(row).copied(),
            None => Some(self.temperature),
        }
    }

    /// The seed of row `row` (the per-row list's entry, else the call's); `None` past the end of the
    /// list.
    pub fn row_seed(&self, row: usize) -> Option<u64> {
        match &self.seeds {
            Some(s) => s.get(row).copied(),
            None => Some(self.seed),
        }
    }

    /// The stream id of row `row`: `streams[row]`, or `row` when no list is set; `None` past the end
    /// of the list (the API validates the list's length against B before it calls this).
    pub fn stream(&self, row: usize) -> Option<u64> {
        match &self.streams {
            Some(s) => s.get(row).copied(),
            None => Some(row as u64),
        }
    }

    /// The per-row streams of a batch of `b` rows; `None` when the list is shorter than `b`.
    pub fn streams_for(&self, b: usize) -> Option<Vec<u64>> {
        (0..b).map(|r| self.stream(r)).collect()
    }

    /// The noise of row `row` (its seed and stream, the first sample index: its position, or the
    /// call's `sample`); `None` past the end of the stream, seed or position list.
    pub fn row_noise(&self, row: usize) -> Option<RowNoise> {
        let sample = match &self.positions {
            Some(p) => *p.get(row)?,
            None => self.sample,
        };
        Some(RowNoise { seed: self.row_seed(row)?, stream: self.stream(row)?, sample })
    }

    /// The kernel transform for this temperature (validated first: finite and ≥ 0, else
    /// [`Error::InvalidTemperature`]). `T = 0` and `0 < T < 2⁻¹²⁶` (subnormal) are greedy; see
    /// [`Transform`] for how every other `T` avoids overflow.
    pub fn transform(&self) -> Result<Transform> {
        let t = self.temperature;
        if !t.is_finite() || t < 0.0 {
            return Err(Error::InvalidTemperature(t));
        }
        Ok(Transform::from_temperature(t))
    }
}

/// A row-major matrix on the host: `rows × cols` values, bf16 by default, or f16 ([`Element`]).
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a, T = bf16> {
    /// The values, `rows · cols` of them.
    pub data: &'a [T],
    /// Rows (B for hidden states, V for the LM-head weight).
    pub rows: usize,
    /// Columns (D).
    pub cols: usize,
}

impl<'a, T> Matrix<'a, T> {
    /// A `rows × cols` view of `data`.
    pub fn new(data: &'a [T], rows: usize, cols: usize) -> Self {
        Self { data, rows, cols }
    }
}

/// An element type of the hidden states and the LM-head weight: bf16 or f16, on every backend (the
/// GPU kernels pick their MMA instruction by [`Element::TYPE`]). Products are accumulated in f32
/// either way.
pub trait Element:
    Copy + Send + Sync + std::fmt::Debug + 'static + cudarc::driver::DeviceRepr + private::Sealed
{
    /// The kernels' tag of this type.
    const TYPE: ElementType;
    /// The value in f32 (exact for both types).
    fn to_f32(self) -> f32;
    /// Whether the value is NaN.
    fn is_nan(self) -> bool;
}

impl Element for bf16 {
    const TYPE: ElementType = ElementType::Bf16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        bf16::is_nan(self)
    }
}

impl Element for half::f16 {
    const TYPE: ElementType = ElementType::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        half::f16::is_nan(self)
    }
}

mod private {
    pub trait Sealed {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

/// A validated problem shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Batch rows.
    pub b: usize,
    /// Hidden size.
    pub d: usize,
    /// Vocab size.
    pub v: usize,
}

/// Sample indices must be below this: the noise's refinement call sets the sample word's top bit.
pub const MAX_SAMPLE: u32 = flashsampling_kernels::noise::REFINE_SAMPLE_BIT;

/// The shape checks of every call, in the order the calls make them: B, V, D positive
/// ([`Error::EmptyBatch`], [`Error::EmptyVocab`], [`Error::EmptyHidden`]), each at most
/// [`MAX_DIM`] ([`Error::TooLarge`]), D a multiple of [`D_ALIGN`] ([`Error::HiddenNotAligned`]).
/// For callers that build inputs of a shape (a CLI's synthetic LM head, a binding's buffers): check
/// here before allocating them.
pub fn check_shape(b: usize, d: usize, v: usize) -> Result<Shape> {
    if b == 0 {
        return Err(Error::EmptyBatch);
    }
    if v == 0 {
        return Err(Error::EmptyVocab);
    }
    if d == 0 {
        return Err(Error::EmptyHidden);
    }
    let max = MAX_DIM as usize;
    for (what, value) in [("batch size B", b), ("vocab size V", v), ("hidden size D", d)] {
        if value > max {
            return Err(Error::TooLarge { what, value, max });
        }
    }
    if d % D_ALIGN as usize != 0 {
        return Err(Error::HiddenNotAligned { d, multiple: D_ALIGN as usize });
    }
    Ok(Shape { b, d, v })
}

/// The checks of a call's operands, before its parameters and in the calls' order: the hidden
/// states `(B, D, length)` and the weight `(V, D, length)` agree on D
/// ([`Error::HiddenSizeMismatch`], after B and V are found positive), [`check_shape`], then each
/// buffer holds exactly its shape's elements ([`Error::LengthMismatch`]). For bindings that take
/// buffers from outside: check here before building anything per row.
pub fn check_inputs(
    (b, hd, hidden_len): (usize, usize, usize),
    (v, wd, weight_len): (usize, usize, usize),
) -> Result<Shape> {
    if hd != wd && b != 0 && v != 0 {
        return Err(Error::HiddenSizeMismatch { hidden: hd, weight: wd });
    }
    let shape = check_shape(b, hd, v)?;
    // B, D, V ≤ 2³⁰: the products fit a 64-bit usize.
    for (buffer, expected, actual) in [("hidden states", b * hd, hidden_len), ("LM-head weight", v * hd, weight_len)] {
        if expected != actual {
            return Err(Error::LengthMismatch { buffer, expected, actual });
        }
    }
    Ok(shape)
}

/// Validates shapes, lengths and parameters; `hidden_len`/`weight_len` are the buffers' lengths.
pub(crate) fn validate(
    hidden: (usize, usize, usize),
    weight: (usize, usize, usize),
    params: &SamplingParams,
) -> Result<(Shape, Transform)> {
    validate_in_vocab(hidden, weight, params, weight.0)
}

/// [`validate`] for a weight that is a vocab shard of a `vocab`-entry head: the per-token controls
/// (mask, adjustments) are validated against the whole vocabulary (their indices are global).
pub(crate) fn validate_in_vocab(
    (b, hd, hidden_len): (usize, usize, usize),
    (v, wd, weight_len): (usize, usize, usize),
    params: &SamplingParams,
    vocab: usize,
) -> Result<(Shape, Transform)> {
    let Shape { b, d, v } = check_inputs((b, hd, hidden_len), (v, wd, weight_len))?;
    let max = MAX_DIM as usize;
    if let Some(s) = &params.streams
        && s.len() != b
    {
        return Err(Error::LengthMismatch { buffer: "streams", expected: b, actual: s.len() });
    }
    for (buffer, len) in [
        ("per-row temperatures", params.temperatures.as_ref().map(Vec::len)),
        ("per-row seeds", params.seeds.as_ref().map(Vec::len)),
        ("per-row positions", params.positions.as_ref().map(Vec::len)),
    ] {
        if let Some(actual) = len.filter(|&l| l != b) {
            return Err(Error::LengthMismatch { buffer, expected: b, actual });
        }
    }
    if params.n == 0 || params.n > MAX_SAMPLES_PER_ROW {
        return Err(Error::InvalidSampleCount { n: params.n, max: MAX_SAMPLES_PER_ROW });
    }
    // The last sample index of the call must stay below 2^31 too.
    // (With per-row positions, the largest of them.)
    let first = params.positions.as_ref().map_or(params.sample, |p| p.iter().copied().max().unwrap_or(0));
    let last = first as u64 + params.n as u64 - 1;
    if last >= MAX_SAMPLE as u64 {
        return Err(Error::InvalidSample(last.min(u32::MAX as u64) as u32));
    }
    if let Some(t) = &params.temperatures
        && let Some(row) = t.iter().position(|t| !t.is_finite() || *t < 0.0)
    {
        return Err(Error::InvalidRowTemperature { row, temperature: t[row] });
    }
    for (buffer, len) in [
        ("per-row top-k", params.top_k.as_ref().map(Vec::len)),
        ("per-row top-p", params.top_p.as_ref().map(Vec::len)),
        ("per-row min-p", params.min_p.as_ref().map(Vec::len)),
    ] {
        if let Some(actual) = len.filter(|&l| l != b) {
            return Err(Error::LengthMismatch { buffer, expected: b, actual });
        }
    }
    for (what, values, ok) in [
        ("top-p", &params.top_p, (|x: f32| x > 0.0 && x <= 1.0) as fn(f32) -> bool),
        ("min-p", &params.min_p, |x: f32| (0.0..=1.0).contains(&x)),
    ] {
        if let Some(row) = values.as_ref().and_then(|v| v.iter().position(|&x| !ok(x))) {
            return Err(Error::InvalidTruncation { row, what, value: values.as_ref().unwrap()[row] });
        }
    }
    if params.top_logprobs > MAX_TOP_LOGPROBS {
        return Err(Error::TooLarge {
            what: "top log-probabilities per row",
            value: params.top_logprobs as usize,
            max: MAX_TOP_LOGPROBS as usize,
        });
    }
    if let Some(cap) = params.softcap
        && !(cap.is_finite() && cap > 0.0)
    {
        return Err(Error::InvalidSoftcap(cap));
    }
    if vocab == 0 {
        return Err(Error::EmptyVocab);
    }
    if vocab > max {
        return Err(Error::TooLarge { what: "vocab size V", value: vocab, max });
    }
    if let Some(mask) = &params.allowed {
        mask.validate(b, vocab)?;
    }
    if let Some(adj) = &params.adjustments {
        adj.validate(b, vocab)?;
    }
    let transform = params.transform()?;
    Ok((Shape { b, d, v }, transform))
}
