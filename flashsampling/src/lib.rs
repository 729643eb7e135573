//! # FlashSampling
//!
//! Exact categorical sampling fused into the LM-head matmul. For hidden states `[B, D]` and an LM-head
//! weight `[V, D]` (bf16 or f16), each row gets a token drawn from `softmax(hidden · weightᵀ / T)` — without
//! the `[B, V]` logits ever reaching memory.
//!
//! The kernel computes one (batch tile × vocab tile) of logits on chip, adds Gumbel noise
//! `g = -ln(-ln u)` and keeps the tile's best (score, index); the last block of each batch tile to
//! finish reduces the candidates to one token per row, in the same launch. By the Gumbel-max trick, `argmax_i (y_i / T + g_i)` is an exact
//! sample of `softmax(y / T)`, and since an argmax decomposes over any partition of the vocabulary, the
//! tiled result is that same sample.
//!
//! ```no_run
//! use flashsampling::{Matrix, Sampler, SamplingParams};
//! # let (b, d, v) = (2, 64, 1000);
//! # let hidden = vec![half::bf16::ZERO; b * d];
//! # let weight = vec![half::bf16::ZERO; v * d];
//! let sampler = Sampler::new(flashsampling::BackendChoice::Auto)?; // GPU if present, else CPU
//! let tokens = sampler.sample(
//!     Matrix::new(&hidden, b, d),
//!     Matrix::new(&weight, v, d),
//!     &SamplingParams::new(0.8, 42), // temperature 0.8, seed 42; streams = row indices
//! )?;
//! # Ok::<(), flashsampling::Error>(())
//! ```
//!
//! The cargo feature `internals` adds what this repository's tests, benches and example use and a
//! library user does not need: the benchmark baselines (`baselines`), synthetic LM heads
//! (`synthetic`), CUDA-event timing (`timing`) and device test hooks (`GpuBackend::
//! philox_on_device`, `gumbel_on_device`), with the test PTX module they load.
#![warn(missing_docs)]

#[cfg(feature = "internals")]
pub mod baselines;
#[cfg(feature = "checkpoint")]
pub mod checkpoint;
pub mod controls;
pub mod cpu;
pub mod error;
pub mod gpu;
pub mod modules;
pub mod params;
pub mod score;
pub mod shard;
pub mod speculative;
#[cfg(feature = "internals")]
pub mod synthetic;
#[cfg(feature = "internals")]
pub mod timing;
pub mod tp;

pub use cpu::CpuBackend;
pub use error::{Error, Result};
/// The no_std kernel crate (tile and variant tables, parameter structs, the noise, the device code's
/// shared core): this repository's tests, benches and tools (feature `internals`); not part of the
/// supported API, which re-exports the few types a caller names below.
#[cfg(feature = "internals")]
pub use flashsampling_kernels as kernels;
pub use flashsampling_kernels::config::{Epilogue, FusedVariant, MAX_DIM, TruncateStep};
pub use flashsampling_kernels::logits::Adjustment;
pub use flashsampling_kernels::{INVALID_INDEX, stream_id};
pub use gpu::{
    DeviceMatrix, DeviceOutputs, DeviceSamples, GpuBackend, ModuleCode, ScoreOutputs, ScoreTop, gpu_available,
};
#[cfg(feature = "internals")]
pub use modules::PTX_TEST;
pub use modules::{
    Artifact, CUBIN, CUBIN_SM90A, CUBINS_ASSEMBLED, PTX, PTX_SM, PTX_SM90A, PTXAS_REPORT_PATHS, PTXAS_VERSION,
};
pub use params::{Element, ElementType, Matrix, SamplingParams, Shape};
pub use shard::{VocabShard, merge_shard_candidates};
pub use tp::{BorrowedNccl, Collective, CommId, CudarcComm, ShardLayout, TpGroup, TpRank};

/// Each request's top log-probabilities: `(token, log-probability)` pairs, most likely first.
pub type TopLogprobs = Vec<Vec<(u32, f32)>>;

/// Tokens and their winning perturbed scores.
#[derive(Clone, Debug, PartialEq)]
pub struct Samples {
    /// One token per row, or `n` per row (`[B, n]`, row-major) with [`SamplingParams::n`].
    pub tokens: Vec<u32>,
    /// Each token's winning score: `min(T, 1) · (logit / T + gumbel)` (see [`flashsampling_kernels::Transform`]),
    /// the logit when greedy; NaN or `−∞` for a row without a token.
    pub scores: Vec<f32>,
    /// With [`params::LogProbs::Processed`] or more: each token's log-probability under the
    /// distribution sampled from, `logit / T − logsumexp` (`0` for a greedy row: the argmax has
    /// probability 1). Same layout as `tokens`.
    pub logprobs: Option<Vec<f32>>,
    /// With [`params::LogProbs::ProcessedAndRaw`]: each token's log-probability under
    /// `softmax(logits)` (`T = 1`, nothing applied). Same layout as `tokens`.
    pub raw_logprobs: Option<Vec<f32>>,
    /// With log-probabilities: each row's log-sum-exp of `logits / T` (over the kept tokens when
    /// the row truncates; `[B]`; NaN for a greedy row, where it is not defined).
    pub logsumexp: Option<Vec<f32>>,
    /// With [`SamplingParams::top_logprobs`]: each row's most likely tokens, most likely first (ties:
    /// lower id first), with their log-probabilities under the processed distribution (truncation
    /// included: at most the kept tokens), or under `softmax(logits)` with
    /// [`SamplingParams::top_logprobs_raw`].
    pub top_logprobs: Option<TopLogprobs>,
    /// When the call truncated (top-k, top-p, min-p) on the GPU backend or over vocab shards
    /// (`CpuBackend::sample_sharded`): per sample (`[B, n]`), whether the certificate could not
    /// decide the row's kept set from the top lists and the exact fallback sampled it (its logits
    /// materialized). The CPU backend's whole-head calls sample truncating rows from their
    /// materialized logits and leave this `None`.
    pub truncation_fallback: Option<Vec<bool>>,
}

impl Samples {
    /// Tokens and scores, no log-probabilities.
    pub fn plain(tokens: Vec<u32>, scores: Vec<f32>) -> Self {
        Self {
            tokens,
            scores,
            logprobs: None,
            raw_logprobs: None,
            logsumexp: None,
            top_logprobs: None,
            truncation_fallback: None,
        }
    }
}

/// Rows without a token ([`INVALID_INDEX`]) become errors: a `−∞` winning score is
/// [`Error::AllLogitsNegInfinite`]; a NaN one is [`Error::NanLogit`] when the inputs hold a NaN (the
/// row's hidden state or the weight; scanned only on this error path), else [`Error::UndefinedLogit`]
/// (`∞ − ∞` or `0 · ∞` from infinite inputs or f32 overflow). `n` samples per row; the weight in
/// one or several parts (vocab shards).
pub(crate) fn check_samples_of<T: params::Element>(
    samples: &Samples,
    n: usize,
    hidden: Matrix<'_, T>,
    weights: &[&[T]],
) -> Result<()> {
    let Some(slot) = samples.tokens.iter().position(|&t| t == INVALID_INDEX) else {
        return Ok(());
    };
    let row = slot / n.max(1);
    if samples.scores[slot] == f32::NEG_INFINITY {
        return Err(Error::AllLogitsNegInfinite { row });
    }
    let d = hidden.cols;
    let nan_input = hidden.data[row * d..(row + 1) * d].iter().any(|x| x.is_nan())
        || weights.iter().any(|w| w.iter().any(|x| x.is_nan()));
    Err(if nan_input { Error::NanLogit { row } } else { Error::UndefinedLogit { row } })
}

/// Which backend [`Sampler::new`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// The GPU when one is usable, else the CPU ([`Sampler::fallback_reason`] says why).
    Auto,
    /// The GPU (device 0); an error when none is usable.
    Gpu,
    /// The CPU backend.
    Cpu,
}

impl BackendChoice {
    /// The choice a `FLASHSAMPLING_BACKEND` value makes of [`BackendChoice::Auto`]: unset, empty or
    /// `auto` keep `Auto`; `cpu` and `gpu` force one; anything else is [`Error::UnknownBackend`].
    pub fn from_env_value(value: Option<&str>) -> Result<Self> {
        match value {
            None | Some("") | Some("auto") => Ok(BackendChoice::Auto),
            Some("cpu") => Ok(BackendChoice::Cpu),
            Some("gpu") => Ok(BackendChoice::Gpu),
            Some(other) => Err(Error::UnknownBackend(other.to_string())),
        }
    }

    /// The choice `FLASHSAMPLING_BACKEND` makes ([`Self::from_env_value`]; a value that is not UTF-8
    /// is [`Error::UnknownBackend`]), for programs that let their environment choose (the example,
    /// the benches); the library itself never reads it.
    pub fn from_env() -> Result<Self> {
        match std::env::var("FLASHSAMPLING_BACKEND") {
            Ok(s) => Self::from_env_value(Some(&s)),
            Err(std::env::VarError::NotPresent) => Ok(BackendChoice::Auto),
            Err(std::env::VarError::NotUnicode(s)) => Err(Error::UnknownBackend(s.to_string_lossy().into())),
        }
    }
}

/// A sampler on one backend.
#[derive(Debug)]
pub enum Sampler {
    /// CUDA backend.
    Gpu(GpuBackend),
    /// CPU backend (chosen).
    Cpu(CpuBackend),
    /// CPU backend that [`BackendChoice::Auto`] fell back to: the error says why the GPU backend did
    /// not start ([`Error::NoGpu`] when there is no driver or device).
    CpuFallback(CpuBackend, Error),
}

impl Sampler {
    /// Opens the chosen backend (the GPU one with the default [`gpu::GpuOptions`]; to let the
    /// environment choose, pass [`BackendChoice::from_env`]).
    pub fn new(choice: BackendChoice) -> Result<Self> {
        Self::with_choice(choice)
    }

    /// [`Sampler::new`] (kept for callers of the name).
    pub fn with_choice(choice: BackendChoice) -> Result<Self> {
        Self::with_options(choice, gpu::GpuOptions::default())
    }

    /// [`Sampler::new`] with the GPU backend's tuning `options`.
    pub fn with_options(choice: BackendChoice, options: gpu::GpuOptions) -> Result<Self> {
        match choice {
            BackendChoice::Cpu => Ok(Sampler::Cpu(CpuBackend::new())),
            BackendChoice::Gpu => Ok(Sampler::Gpu(GpuBackend::with_options(0, options)?)),
            BackendChoice::Auto => match GpuBackend::with_options(0, options) {
                Ok(g) => Ok(Sampler::Gpu(g)),
                Err(e) => Ok(Sampler::CpuFallback(CpuBackend::new(), e)),
            },
        }
    }

    /// Why [`BackendChoice::Auto`] runs on the CPU (the GPU backend's start-up error), or `None`.
    pub fn fallback_reason(&self) -> Option<&Error> {
        match self {
            Sampler::CpuFallback(_, e) => Some(e),
            _ => None,
        }
    }

    /// A short description of the backend ("GPU (NVIDIA H200)" or "CPU (16 threads)").
    pub fn describe(&self) -> String {
        match self {
            Sampler::Gpu(g) => format!("GPU ({})", g.device_name()),
            Sampler::Cpu(c) => format!("CPU ({} threads)", c.threads()),
            Sampler::CpuFallback(c, e) => format!("CPU ({} threads; GPU not used: {e})", c.threads()),
        }
    }

    /// One token per row of `hidden`, drawn from `softmax(hidden · weightᵀ / T)`.
    ///
    /// ```
    /// use flashsampling::{BackendChoice, Matrix, Sampler, SamplingParams};
    ///
    /// let (b, d, v) = (2, 8, 50);
    /// let hidden = vec![half::f16::from_f32(0.25); b * d]; // f16 works as bf16 does
    /// let weight: Vec<half::f16> = (0..v * d).map(|i| half::f16::from_f32((i % 5) as f32 * 0.1)).collect();
    /// let sampler = Sampler::new(BackendChoice::Cpu)?; // BackendChoice::Auto: the GPU when one is usable
    /// let tokens = sampler.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &SamplingParams::new(1.0, 3))?;
    /// assert!(tokens.iter().all(|&t| t < v as u32));
    /// # Ok::<(), flashsampling::Error>(())
    /// ```
    pub fn sample<T: params::Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
    ) -> Result<Vec<u32>> {
        match self {
            Sampler::Gpu(g) => g.sample(hidden, weight, params),
            Sampler::Cpu(c) | Sampler::CpuFallback(c, _) => c.sample(hidden, weight, params),
        }
    }

    /// Tokens and winning scores.
    pub fn sample_scored<T: params::Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
    ) -> Result<Samples> {
        match self {
            Sampler::Gpu(g) => g.sample_scored(hidden, weight, params),
            Sampler::Cpu(c) | Sampler::CpuFallback(c, _) => c.sample_scored(hidden, weight, params),
        }
    }

    /// The log-probabilities of one given token per row ([`CpuBackend::score`], [`score::Scores`]);
    /// on the GPU ([`GpuBackend::score`]).
    pub fn score<T: params::Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
        tokens: &[u32],
    ) -> Result<score::Scores> {
        match self {
            Sampler::Gpu(g) => g.score(hidden, weight, params, tokens),
            Sampler::Cpu(c) | Sampler::CpuFallback(c, _) => c.score(hidden, weight, params, tokens),
        }
    }

    /// Samples and scores one given token per row in one call ([`CpuBackend::sample_and_score`],
    /// [`GpuBackend::sample_and_score`]: one pass over the weight for `n = 1`).
    pub fn sample_and_score<T: params::Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
        tokens: &[u32],
    ) -> Result<(Samples, score::Scores)> {
        match self {
            Sampler::Gpu(g) => g.sample_and_score(hidden, weight, params, tokens),
            Sampler::Cpu(c) | Sampler::CpuFallback(c, _) => c.sample_and_score(hidden, weight, params, tokens),
        }
    }
}
