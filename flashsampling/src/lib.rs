//! # FlashSampling
//!
//! Exact categorical sampling fused into the LM-head matmul. For hidden states `[B, D]` and an LM-head
//! weight `[V, D]` (bf16), each row gets a token drawn from `softmax(hidden · weightᵀ / T)` — without
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
//! library user does not need: the benchmark baselines ([`baselines`]), synthetic LM heads
//! ([`synthetic`]), CUDA-event timing ([`timing`]) and device test hooks (`GpuBackend::
//! philox_on_device`, `gumbel_on_device`), with the test PTX module they load.
#![warn(missing_docs)]

#[cfg(feature = "internals")]
pub mod baselines;
pub mod cpu;
pub mod error;
pub mod gpu;
pub mod params;
#[cfg(feature = "internals")]
pub mod synthetic;
#[cfg(feature = "internals")]
pub mod timing;

pub use cpu::CpuBackend;
pub use error::{Error, Result};
pub use flashsampling_kernels as kernels;
pub use flashsampling_kernels::stream_id;
pub use gpu::{DeviceMatrix, DeviceSamples, GpuBackend, gpu_available};
pub use params::{Matrix, SamplingParams, Shape};

/// The portable PTX module ([`kernels::config::Module::Portable`]: the `mma.sync` kernels), built
/// by build.rs for `FLASHSAMPLING_PTX_SM` (default sm_90).
pub const PTX: &str = include_str!(env!("FLASHSAMPLING_PTX_PATH"));
/// Where build.rs wrote the portable PTX.
pub const PTX_PATH: &str = env!("FLASHSAMPLING_PTX_PATH");
/// The architecture the portable PTX was built for.
pub const PTX_SM: &str = env!("FLASHSAMPLING_PTX_SM");
/// The Hopper PTX module ([`kernels::config::Module::Hopper`]: the `wgmma` kernels), compiled for
/// the arch-specific sm_90a target (loaded on compute capability 9.0 GPUs only).
pub const PTX_SM90A: &str = include_str!(env!("FLASHSAMPLING_PTX_SM90A_PATH"));
/// The test PTX module ([`kernels::config::Module::Test`]: device noise tests and benchmark
/// baselines), loaded only by the `internals` feature's test hooks and baselines.
#[cfg(feature = "internals")]
pub const PTX_TEST: &str = include_str!(env!("FLASHSAMPLING_PTX_TEST_PATH"));

/// Tokens and their winning perturbed scores.
#[derive(Clone, Debug, PartialEq)]
pub struct Samples {
    /// One token per row.
    pub tokens: Vec<u32>,
    /// The row's winning score (`logit / T + gumbel`, or the logit when greedy).
    pub scores: Vec<f32>,
}

/// NaN rows become [`Error::NanLogit`].
pub(crate) fn check_tokens(tokens: &[u32]) -> Result<()> {
    match tokens.iter().position(|&t| t == kernels::INVALID_INDEX) {
        Some(row) => Err(Error::NanLogit { row }),
        None => Ok(()),
    }
}

/// Which backend [`Sampler::new`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// The GPU when one is usable, else the CPU. `FLASHSAMPLING_BACKEND=cpu|gpu` overrides it.
    Auto,
    /// The GPU (device 0); an error when none is usable.
    Gpu,
    /// The CPU backend.
    Cpu,
}

/// A sampler on one backend.
#[derive(Debug)]
pub enum Sampler {
    /// CUDA backend.
    Gpu(GpuBackend),
    /// CPU backend.
    Cpu(CpuBackend),
}

impl Sampler {
    /// Opens the chosen backend.
    pub fn new(choice: BackendChoice) -> Result<Self> {
        let choice = match (choice, std::env::var("FLASHSAMPLING_BACKEND").as_deref()) {
            (BackendChoice::Auto, Ok("cpu")) => BackendChoice::Cpu,
            (BackendChoice::Auto, Ok("gpu")) => BackendChoice::Gpu,
            (c, _) => c,
        };
        match choice {
            BackendChoice::Cpu => Ok(Sampler::Cpu(CpuBackend::new())),
            BackendChoice::Gpu => Ok(Sampler::Gpu(GpuBackend::new(0)?)),
            BackendChoice::Auto if gpu_available() => match GpuBackend::new(0) {
                Ok(g) => Ok(Sampler::Gpu(g)),
                Err(_) => Ok(Sampler::Cpu(CpuBackend::new())),
            },
            BackendChoice::Auto => Ok(Sampler::Cpu(CpuBackend::new())),
        }
    }

    /// A short description of the backend ("GPU (NVIDIA H200)" or "CPU (16 threads)").
    pub fn describe(&self) -> String {
        match self {
            Sampler::Gpu(g) => format!("GPU ({})", g.device_name()),
            Sampler::Cpu(_) => {
                format!("CPU ({} threads)", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
            }
        }
    }

    /// One token per row of `hidden`, drawn from `softmax(hidden · weightᵀ / T)`.
    pub fn sample(&self, hidden: Matrix<'_>, weight: Matrix<'_>, params: &SamplingParams) -> Result<Vec<u32>> {
        match self {
            Sampler::Gpu(g) => g.sample(hidden, weight, params),
            Sampler::Cpu(c) => c.sample(hidden, weight, params),
        }
    }

    /// Tokens and winning scores.
    pub fn sample_scored(&self, hidden: Matrix<'_>, weight: Matrix<'_>, params: &SamplingParams) -> Result<Samples> {
        match self {
            Sampler::Gpu(g) => g.sample_scored(hidden, weight, params),
            Sampler::Cpu(c) => c.sample_scored(hidden, weight, params),
        }
    }
}
