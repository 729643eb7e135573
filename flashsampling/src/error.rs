//! Typed errors. Every user-input problem is reported before any launch; nothing panics on user input.

use cudarc::cublas::result::CublasError;
use cudarc::driver::{DriverError, sys::CUresult};

/// Errors of the FlashSampling API.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// B = 0.
    #[error("batch size B is 0: the hidden states have no rows")]
    EmptyBatch,
    /// V = 0.
    #[error("vocab size V is 0: the LM-head weight has no rows")]
    EmptyVocab,
    /// D = 0.
    #[error("hidden size D is 0")]
    EmptyHidden,
    /// Hidden states and weight disagree on D.
    #[error("hidden size mismatch: hidden states have D = {hidden}, the LM-head weight has D = {weight}")]
    HiddenSizeMismatch {
        /// Columns of the hidden states.
        hidden: usize,
        /// Columns of the weight.
        weight: usize,
    },
    /// A dimension beyond what the kernels' indexing supports.
    #[error("{what} = {value} exceeds the supported maximum {max}")]
    TooLarge {
        /// Which dimension.
        what: &'static str,
        /// Its value.
        value: usize,
        /// The limit.
        max: usize,
    },
    /// D not a multiple of what the 16-byte loads need.
    #[error("hidden size D = {d} is not a multiple of {multiple} (the kernels load rows in 16-byte pieces)")]
    HiddenNotAligned {
        /// D.
        d: usize,
        /// Required multiple.
        multiple: usize,
    },
    /// A buffer whose length does not match its stated shape.
    #[error("{buffer} has {actual} elements, but its shape needs {expected}")]
    LengthMismatch {
        /// Which buffer.
        buffer: &'static str,
        /// Length the shape needs.
        expected: usize,
        /// Length given.
        actual: usize,
    },
    /// A device buffer that is null or not aligned as the kernels need: 16 bytes for the hidden
    /// states and the weight, 4 for caller-owned outputs ([`crate::gpu::DeviceOutputs`]).
    #[error("device buffer {buffer} is null or not {alignment}-byte aligned (address {address:#x})")]
    Misaligned {
        /// Which buffer.
        buffer: &'static str,
        /// Its device address.
        address: u64,
        /// The alignment it needs, in bytes.
        alignment: u64,
    },
    /// A device buffer of another CUDA context (another GPU) than the backend's.
    #[error("device buffer {buffer} belongs to another CUDA context than this GpuBackend's")]
    ForeignBuffer {
        /// Which buffer.
        buffer: &'static str,
    },
    /// A stream of another CUDA context (another GPU) than the backend's
    /// ([`crate::GpuBackend::on_stream`]).
    #[error("the stream belongs to another CUDA context than this GpuBackend's")]
    ForeignStream,
    /// Caller-owned outputs ([`crate::gpu::DeviceOutputs`]) that do not match the call: a
    /// log-probability or top log-probability output given for a call that does not ask for it, or
    /// missing for one that does.
    #[error("output {output}: {}", if *asked { "the call asks for it, but no buffer was given" } else { "a buffer was given, but the call does not ask for it" })]
    OutputMismatch {
        /// Which output.
        output: &'static str,
        /// Whether the call asks for it.
        asked: bool,
    },
    /// A call that cannot be recorded into a CUDA graph as it stands (its stream is capturing), or a
    /// call on buffers a captured graph uses that would change what the graph reads
    /// ([`crate::DeviceSamples::is_captured`]). `reason` says what and what to do instead; nothing
    /// was enqueued.
    #[error("CUDA-graph capture: {reason}")]
    Capture {
        /// What stands in the way.
        reason: &'static str,
    },
    /// Temperature NaN, negative or infinite.
    #[error("temperature {0} is invalid: it must be finite and >= 0 (0 = greedy)")]
    InvalidTemperature(f32),
    /// A sample index of 2^31 or more (the top bit of the sample word keys the noise's refinement call).
    #[error("sample index {0} is too large: it must be below 2^31")]
    InvalidSample(u32),
    /// A per-row temperature that is NaN, negative or infinite.
    #[error("row {row}: temperature {temperature} is invalid: it must be finite and >= 0 (0 = greedy)")]
    InvalidRowTemperature {
        /// The row.
        row: usize,
        /// Its temperature.
        temperature: f32,
    },
    /// A top-p outside `(0, 1]` or a min-p outside `[0, 1]` (NaN included).
    #[error("row {row}: {what} {value} is out of range (top-p in (0, 1], min-p in [0, 1])")]
    InvalidTruncation {
        /// The row.
        row: usize,
        /// "top-p" or "min-p".
        what: &'static str,
        /// The value.
        value: f32,
    },
    /// A soft-cap that is not finite and positive.
    #[error("soft-cap {0} is invalid: it must be finite and > 0")]
    InvalidSoftcap(f32),
    /// A token id at or past V in a mask or adjustment list.
    #[error("row {row}: token id {token} is out of range (V = {v})")]
    TokenOutOfRange {
        /// The row.
        row: usize,
        /// The token id.
        token: u32,
        /// The vocab size.
        v: usize,
    },
    /// Sparse adjustments that are not well formed.
    #[error("row {row}: invalid logit adjustments: {reason}")]
    InvalidAdjustments {
        /// The row.
        row: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// Samples per row of 0 or above the limit.
    #[error("{n} samples per row: it must be 1 ..= {max}")]
    InvalidSampleCount {
        /// Asked for.
        n: u32,
        /// The limit.
        max: u32,
    },
    /// A control not available on this path yet: on the GPU backend, top log-probabilities (the CPU
    /// backend has them); over vocab shards, what the path cannot exchange (`shard_candidates`
    /// without log-probabilities; truncation in the rank-local steps and in tensor parallelism, top
    /// log-probabilities anywhere); on the GPU backend also a launch its buffer sizing would not cover
    /// (a guard: it is returned instead of a launch past the end of a buffer).
    #[error("{control} is not available {path} yet")]
    Unsupported {
        /// The control.
        control: &'static str,
        /// Where: "on the GPU backend", "over vocab shards".
        path: &'static str,
    },
    /// Vocab shards that do not tile the vocabulary: they must be given in order, each starting
    /// where the previous one ends, from global row 0, and reach at least V (rows at or past V are
    /// padding and never sampled).
    #[error("vocab shards do not tile the vocabulary: {reason} (at global row {at})")]
    InvalidShards {
        /// What is wrong.
        reason: &'static str,
        /// The global vocab row where it shows.
        at: usize,
    },
    /// The winning score of a row is NaN and the inputs hold a NaN (in the row's hidden state or in
    /// the LM-head weight): a NaN logit ranks above every number, so it is reported, never outvoted.
    #[error("row {row}: a logit is NaN (the inputs contain NaN); no token can be sampled")]
    NanLogit {
        /// The first row without a token.
        row: usize,
    },
    /// The winning score of a row is NaN although no input is NaN: a dot product met `∞ − ∞` or
    /// `0 · ∞` (infinite bf16 inputs, or f32 overflow of finite products).
    #[error(
        "row {row}: a logit is NaN from infinite values (∞ − ∞ or 0 · ∞ in the dot product: infinite inputs or f32 overflow); no token can be sampled"
    )]
    UndefinedLogit {
        /// The first row without a token.
        row: usize,
    },
    /// Every logit of a row is `−∞` (a fully masked row): there is no token to sample.
    #[error("row {row}: every logit is -inf (a fully masked row); no token can be sampled")]
    AllLogitsNegInfinite {
        /// The first row without a token.
        row: usize,
    },
    /// A CPU tile size that is not a positive multiple of 4 at most `max`
    /// ([`MAX_CPU_BLOCK_V`](crate::cpu::MAX_CPU_BLOCK_V)).
    #[error("vocab tile size {block_v} must be a positive multiple of 4, at most {max}")]
    InvalidTileSize {
        /// The tile size asked for.
        block_v: usize,
        /// The largest tile size.
        max: usize,
    },
    /// `FLASHSAMPLING_BACKEND` holds a value other than `auto`, `cpu` or `gpu` (or is not UTF-8).
    #[error("FLASHSAMPLING_BACKEND = {0:?} is not one of auto, cpu, gpu")]
    UnknownBackend(String),
    /// A fused-kernel variant name that this GPU does not run (name, the variants it runs).
    #[error("unknown fused-kernel variant {0:?} (known: {1})")]
    UnknownVariant(String, String),
    /// A fused-kernel variant (forced with `set_fused_variant`) that needs V to be a multiple of
    /// `multiple`.
    #[error("fused-kernel variant {variant} needs V to be a multiple of {multiple}; V = {v}")]
    UnsupportedVocab {
        /// The variant's entry point.
        variant: &'static str,
        /// V.
        v: usize,
        /// Required multiple.
        multiple: usize,
    },
    /// Ranks of a tensor-parallel group disagree on something they must share (V, D, dtype, world
    /// size, the exchange's protocol).
    #[error("rank {rank} disagrees on the {what}: expected {expected}, got {actual}")]
    RankMismatch {
        /// The rank whose value differs (from the reporting rank's view).
        rank: usize,
        /// What differs.
        what: &'static str,
        /// This rank's value.
        expected: usize,
        /// The other rank's.
        actual: usize,
    },
    /// A rank index outside `0 .. world`.
    #[error("rank {rank} is not in 0..{world}")]
    InvalidRank {
        /// The rank.
        rank: usize,
        /// The world size.
        world: usize,
    },
    /// An NCCL unique id that is not 256 hexadecimal digits (its first characters).
    #[error("not an NCCL unique id (256 hexadecimal digits): {0:?}…")]
    InvalidCommId(String),
    /// The NCCL library cannot be opened.
    #[error("NCCL is not available: {0}")]
    NoNccl(String),
    /// An NCCL call failed.
    #[error("NCCL error in {call} (code {code}): {message}")]
    Nccl {
        /// The NCCL function.
        call: &'static str,
        /// Its `ncclResult_t`.
        code: i32,
        /// NCCL's last error message.
        message: String,
    },
    /// Peers did not take part within the timeout (a rank that failed, died or never joined): the
    /// communicator was aborted.
    #[error("timed out after {ms} ms waiting for the other ranks ({what}); the communicator was aborted")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// The timeout.
        ms: u64,
    },
    /// The rank's communicator was aborted by an earlier failure; form a new group.
    #[error("the NCCL communicator was aborted by an earlier failure; create a new rank or group")]
    CommAborted,
    /// No usable CUDA GPU (no driver library, no device, or context creation failed).
    #[error("no CUDA GPU available: {0}")]
    NoGpu(String),
    /// A CUDA driver call failed; the `CUresult` is kept (see [`Error::is_out_of_memory`]).
    #[error("CUDA driver error: {0}")]
    Driver(#[from] DriverError),
    /// Host memory for inputs a helper builds (a synthetic LM head) could not be had: the
    /// allocation was refused, not attempted past what the system gives.
    #[error("could not allocate {bytes} bytes of host memory for {what}")]
    HostMemory {
        /// What was to be allocated.
        what: &'static str,
        /// Its size in bytes (`usize::MAX` when the size itself overflows).
        bytes: usize,
    },
    /// A speculative verification's drafts that do not describe its rows ([`crate::speculative`]).
    #[error("invalid drafts: {0}")]
    InvalidDrafts(String),
    /// A module embedded in this build does not decode (a corrupted build).
    #[error("the embedded {name} does not decode ({reason}): rebuild the crate")]
    EmbeddedModule {
        /// The module's file name.
        name: &'static str,
        /// What the decoder said.
        reason: String,
    },
    /// A [`GpuOptions`](crate::gpu::GpuOptions) value from the environment that is not one of the
    /// documented ones.
    #[error("{name} = {value:?} is not a valid value (see GpuOptions)")]
    InvalidOption {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
    },
    /// A cuBLAS call failed (benchmark baselines only); the status is kept.
    #[error("cuBLAS error: {0}")]
    Cublas(#[from] CublasError),
}

impl Error {
    /// Whether this is a device out-of-memory error (`CUDA_ERROR_OUT_OF_MEMORY` from the driver, or
    /// `CUBLAS_STATUS_ALLOC_FAILED`): the caller may free memory or shrink the batch and retry.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            Error::Driver(e) => e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            Error::Cublas(e) => e.0 == cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED,
            _ => false,
        }
    }

    /// The CUDA driver result, for [`Error::Driver`].
    pub fn cuda_result(&self) -> Option<CUresult> {
        match self {
            Error::Driver(e) => Some(e.0),
            _ => None,
        }
    }
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
