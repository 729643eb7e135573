//! Typed errors. Every user-input problem is reported before any launch; nothing panics on user input.

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
    /// A device buffer that is not 16-byte aligned.
    #[error("device buffer {buffer} is not 16-byte aligned (address {address:#x})")]
    Misaligned {
        /// Which buffer.
        buffer: &'static str,
        /// Its device address.
        address: u64,
    },
    /// Temperature NaN, negative or infinite.
    #[error("temperature {0} is invalid: it must be finite and >= 0 (0 = greedy)")]
    InvalidTemperature(f32),
    /// A sample index of 2^31 or more (the top bit of the sample word keys the noise's refinement call).
    #[error("sample index {0} is too large: it must be below 2^31")]
    InvalidSample(u32),
    /// The winning score of a row is NaN: the row has a NaN logit (or NaN/inf inputs).
    #[error("row {row}: a logit is NaN (NaN or infinite inputs); no token can be sampled")]
    NanLogit {
        /// The first such row.
        row: usize,
    },
    /// A CPU tile size that is not a positive multiple of 4.
    #[error("vocab tile size {0} must be a positive multiple of 4")]
    InvalidTileSize(usize),
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
    /// No usable CUDA GPU (no driver library, no device, or context creation failed).
    #[error("no CUDA GPU available: {0}")]
    NoGpu(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver error: {0}")]
    Driver(String),
}

impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        Error::Driver(e.to_string())
    }
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
