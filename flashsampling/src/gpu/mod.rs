//! The CUDA backend: module loaded once, kernels looked up once, launches on one stream.

use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView, DevicePtr, DevicePtrMut, DeviceRepr,
    DeviceSlice, LaunchConfig, PushKernelArg, SyncOnDrop,
};
use cudarc::nvrtc::Ptx;
use flashsampling_kernels::config::{
    ADJUST_ENTRY, ADJUST_THREADS, BLOCK_V, EXPAND_ENTRY, EXPAND_THREADS, Epilogue, FALLBACK_GATHER_ENTRY,
    FALLBACK_LOGITS_ENTRY, FALLBACK_LOGITS_VARIANT, FALLBACK_SAMPLE_ENTRY, FUSED_VARIANTS, Family, FusedVariant,
    MAX_DIM, Module, REDUCE_BLOCK_ENTRY, REDUCE_BLOCK_SMEM, REDUCE_BLOCK_THREADS, TMA_T_VOCAB_ALIGN, TmaLayout,
    TruncateStep, tma_hidden, tma_weight_rows, tma_weight_tiles, tma_weight_tiles_t, variant_for_batch,
};
use flashsampling_kernels::logits::Adjustment;
use flashsampling_kernels::params::{
    AdjustParams, AdjustedToken, ExpandParams, FusedParams, LogitsParams, MergeRanksParams, NoiseTestParams,
    ReduceParams, RowMass, RowParams, TensorMap, TensorMaps,
};
use flashsampling_kernels::{Candidate, Transform};
use half::bf16;

use crate::error::{Error, Result};
use crate::modules::{Artifact, CUBIN, CUBIN_SM90A, PTX, PTX_SM90A};
use crate::params::{Element, ElementType, LogProbs, Matrix, SamplingParams, Shape, validate, validate_in_vocab};
use crate::{Samples, check_samples_of};

mod truncate;
use truncate::TruncationBuffers;

/// A kernel parameter struct passed by value (`#[repr(C)]`, identical layout on host and device); the
/// one wrapper for every launch of this crate (here and in `baselines`).
#[repr(transparent)]
pub(crate) struct ByValue<T>(pub(crate) T);
// SAFETY: the wrapped structs are `#[repr(C)]`, `Copy`, and hold only plain integers, floats and device
// addresses, which is what the kernels read from their `.param` space.
unsafe impl DeviceRepr for ByValue<FusedParams> {}
// SAFETY: as above.
unsafe impl DeviceRepr for ByValue<ReduceParams> {}
// SAFETY: as above.
unsafe impl DeviceRepr for ByValue<NoiseTestParams> {}
// SAFETY: as above.
unsafe impl DeviceRepr for ByValue<LogitsParams> {}
// SAFETY: as above.
unsafe impl DeviceRepr for ByValue<ExpandParams> {}
// SAFETY: as above.
unsafe impl DeviceRepr for ByValue<MergeRanksParams> {}
// SAFETY: as above.
unsafe impl DeviceRepr for ByValue<AdjustParams> {}

/// A [`RowParams`] as the four 64-bit words of its `#[repr(C)]` layout (seed, stream, transform,
/// sample and request), for the upload.
fn row_words(r: RowParams) -> [u64; 4] {
    const _: () = assert!(size_of::<RowParams>() == 32);
    let t = (r.transform.inv_temperature.to_bits() as u64) | ((r.transform.noise_scale.to_bits() as u64) << 32);
    [r.seed, r.stream, t, (r.sample as u64) | ((r.request as u64) << 32)]
}

/// Where a launch's weight sits in the vocabulary: global rows `offset ..` of a `vocab`-entry head
/// (`offset = 0`, `vocab = V` for a whole head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VocabRange {
    /// Global vocab index of the weight's row 0.
    pub offset: usize,
    /// The model's vocabulary size.
    pub vocab: usize,
}

/// Vocab shards on the GPU start at multiples of this many rows (one Philox counter and one mask
/// word hold four consecutive tokens; Megatron and vLLM pad shards to multiples of 64 or 128).
pub const SHARD_OFFSET_ALIGN: usize = 4;

/// The controls a tensor-parallel rank's truncating call cannot compose yet: typed errors, the
/// same on every rank, before any launch.
pub(crate) fn check_rank_truncation(params: &SamplingParams, vocab: usize) -> Result<()> {
    let path = "over vocab shards (tensor parallel) yet";
    if params.logprobs == LogProbs::ProcessedAndRaw && params.truncates(vocab) && params.softcap.is_some() {
        return Err(Error::Unsupported {
            control: "raw log-probabilities with top-k / top-p / min-p and a soft-cap",
            path,
        });
    }
    if params.adjustments.as_ref().is_some_and(|a| !a.tokens.is_empty())
        && (params.truncates(vocab) || params.top_logprobs > 0)
    {
        return Err(Error::Unsupported {
            control: "sparse adjustments with top-k / top-p / min-p or top log-probabilities",
            path,
        });
    }
    Ok(())
}

/// A launch's vocab range, for a rank its exchange buffer's device address, and the element type of
/// its hidden states and weight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ranged {
    range: VocabRange,
    staging: Option<u64>,
    elem: ElementType,
}

/// Device addresses of a call's outputs (and cudarc's guards, to drop after the launch that writes
/// them); 0 for the log-probability outputs when not asked for.
pub(crate) struct OutputPtrs<'a> {
    pub tokens: u64,
    pub scores: u64,
    pub logprobs: u64,
    pub raw_logprobs: u64,
    pub logsumexp: u64,
    _guards: Vec<SyncOnDrop<'a>>,
}

impl OutputPtrs<'_> {
    /// Tokens, scores, processed log-probabilities, processed log-sum-exps.
    pub(crate) fn addresses(&self) -> [u64; 4] {
        [self.tokens, self.scores, self.logprobs, self.logsumexp]
    }
}

/// How the fused kernel is launched for one (B, V).
#[derive(Clone, Copy, Debug)]
struct LaunchShape {
    /// The kernel variant.
    variant: FusedVariant,
    /// Its epilogue (log-probabilities or not).
    epilogue: Epilogue,
    /// Batch tiles.
    n_btiles: u32,
    /// Vocab ranges = candidates per row.
    n_vranges: u32,
    /// Ranges balanced to the pipeline stage ([`FusedVariant::balances_stages`]): the launch needs
    /// the handoff buffers ([`DeviceSamples::handoff_counters`]).
    balanced: bool,
}

impl LaunchShape {
    /// Floats of the handoff slots a balanced launch needs: 2 per range boundary (one per consumer
    /// slot), 128 consumer threads' accumulators each (`FusedParams::handoff`).
    fn handoff_floats(&self) -> usize {
        2 * self.n_vranges as usize * 128 * self.variant.handoff_floats_per_thread() as usize
    }
    /// Counters of the handoff slots.
    fn handoff_counters(&self) -> usize {
        2 * self.n_vranges as usize
    }
}

/// One loaded kernel of a variant.
struct LoadedEntry {
    func: CudaFunction,
    /// Resident blocks per multiprocessor (the driver's occupancy for the variant's block and
    /// shared memory): the persistent grid is this times the multiprocessor count.
    per_sm: u32,
}

impl LoadedEntry {
    /// Entry `name` of `module`, launched with `threads` threads and `smem` bytes of dynamic shared
    /// memory, with its attribute raised to that (the staging rings need more than the default 48
    /// KiB) and its resident blocks per multiprocessor at that shape.
    fn load(module: &Arc<CudaModule>, name: &str, threads: u32, smem: u32) -> Result<Self> {
        let func = module.load_function(name)?;
        func.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
        let per_sm = func.occupancy_max_active_blocks_per_multiprocessor(threads, smem as usize, None)?.max(1);
        Ok(LoadedEntry { func, per_sm })
    }
}

/// One loaded fused-kernel variant: its plain and its log-probability kernel.
struct LoadedVariant {
    variant: &'static FusedVariant,
    sample: LoadedEntry,
    logprobs: LoadedEntry,
    truncate: LoadedEntry,
}

impl LoadedVariant {
    fn entry(&self, e: Epilogue) -> &LoadedEntry {
        match e {
            Epilogue::Sample => &self.sample,
            Epilogue::LogProbs => &self.logprobs,
            Epilogue::Truncate => &self.truncate,
        }
    }
}

/// A row-major matrix in device memory, bf16 by default, or f16 ([`Element`]); the hidden states and
/// the weight of a call have the same element type.
#[derive(Debug)]
pub struct DeviceMatrix<'a, T = bf16> {
    /// The values, `rows · cols` of them, 16-byte aligned.
    pub data: CudaView<'a, T>,
    /// Rows.
    pub rows: usize,
    /// Columns (D).
    pub cols: usize,
}

/// Device buffers of one batch: candidates, per-row parameters, the expanded hidden states of a call
/// with several samples per row, and the outputs (tokens, scores, log-probabilities). A call with
/// `n` samples per row over `B` rows uses `B·n` rows of every buffer (row `r·n + j` is row `r`'s
/// sample `j`).
/// Reused across calls (a decode loop allocates it once); grows when a larger batch comes.
///
/// **Outputs before and after a launch.** [`GpuBackend::alloc_samples`] fills the tokens with
/// [`flashsampling_kernels::INVALID_INDEX`] and the scores with NaN, so reading them before the first
/// launch gives no token. A call that fails validation does not touch the buffers (they keep the
/// previous call's results); a call that fails after validation (an upload or the launch) fills the
/// tokens with `INVALID_INDEX` and the scores with NaN again, best effort: when the failure is a
/// device fault the context is unusable and every later read fails anyway.
///
/// **Arrival counters.** The plain fused kernels' last-block reduction counts arrivals per batch tile
/// in `counters` (`u32`, at least `n_btiles` of them; the log-probability and truncation kernels leave
/// them alone: `reduce_rows` or the truncation step reduces their rows after them). They cannot be left non-zero in a way a
/// later call observes:
/// 1. `alloc_samples` zeroes them (stream-ordered before any launch that uses them), and a buffer
///    too small for a launch is replaced by a fresh, zeroed one before that launch.
/// 2. In a plain launch, every block of the grid (`n_btiles × n_vranges`, the same `n_vranges` as in
///    `FusedParams`) reaches the reduction exactly once: no kernel returns early. Batch tile `t`
///    therefore gets exactly `n_vranges` increments; the block that sees the count reach
///    `n_vranges` is the last one, and it stores 0 after its reduction. A launch that completes
///    leaves every counter at 0.
/// 3. A launch that does not complete either never started (`cuLaunchKernel` returned an error: no
///    block ran, the counters are untouched, still 0) or faulted (illegal address, trap, a killed
///    context): a device-side fault is a sticky error of the CUDA context, so no later launch, copy
///    or read in that context succeeds, and no later call can observe the counters.
/// 4. Launches that share a `DeviceSamples` never overlap: they are ordered on one stream, and a
///    launch from another `GpuBackend` (another stream) waits for the previous launch through
///    cudarc's per-buffer events (`device_ptr_mut` waits for the last write and the guard records
///    this launch's write after it is enqueued; event tracking is cudarc's default and is active
///    because every `GpuBackend` creates its own stream).
///
/// Hence every launch starts with all counters at zero, by induction over the launches on the
/// buffer. The GPU test `arrival_counters_are_zero_after_many_launches` reads them back after
/// launches of varying B and V.
#[derive(Debug)]
pub struct DeviceSamples {
    candidates: CudaSlice<u64>,
    /// Per-batch-tile arrival counters of the fused kernel (zero between launches; see above).
    counters: CudaSlice<u32>,
    /// Per-row parameters ([`RowParams`], four words per row).
    rows: CudaSlice<u64>,
    tokens: CudaSlice<u32>,
    scores: CudaSlice<f32>,
    /// Log-probability launches: each (row, vocab range)'s [`RowMass`] (two words), and the outputs.
    masses: Option<CudaSlice<u64>>,
    logprobs: Option<CudaSlice<f32>>,
    raw_logprobs: Option<CudaSlice<f32>>,
    logsumexp: Option<CudaSlice<f32>>,
    /// A call's allowed-token mask uploaded from the host.
    mask: Option<CudaSlice<u32>>,
    /// The hidden states of a call with several samples per row, `[B·n, D]` (16-bit elements of
    /// either type: the expansion copies bits).
    expanded: Option<CudaSlice<u16>>,
    /// A call's sparse adjustments (CSR offsets, entry rows, tokens, adjustments as words).
    adj: Option<CudaSlice<u32>>,
    /// The adjusted tokens' results (`AdjustedToken`, four words each, `[entries, n]`).
    adjusted: Option<CudaSlice<u32>>,
    /// Truncating calls' buffers (top-k, top-p, min-p).
    truncation: Option<TruncationBuffers>,
    /// Stage-balanced launches: the handoff slots (`FusedParams::handoff`) and their counters
    /// (zeroed at allocation; every launch leaves them zero, as the arrival counters).
    handoff: Option<(CudaSlice<f32>, CudaSlice<u32>)>,
    /// Whether the last call truncated (its fallback flags are valid).
    has_truncation: bool,
    /// Top log-probabilities per request of the last call (0: none asked).
    top_n: usize,
    /// Rows of the last call (`B·n`).
    b: usize,
    /// Samples per row of the last call.
    n: usize,
    /// Whether the last call computed log-probabilities.
    has_logprobs: bool,
    /// The last call asked for raw log-probabilities too ([`LogProbs::ProcessedAndRaw`]; a
    /// tensor-parallel merge fills them with every log-probability call).
    has_raw_logprobs: bool,
    /// Host copy of the words in `rows` (skips the upload when a call reuses them).
    uploaded_rows: Vec<u64>,
    /// The TMA kernels' tensor maps ([`TensorMaps`], 384 bytes: three 128-byte maps) in device memory.
    tensor_maps: CudaSlice<u64>,
    /// What the maps in `tensor_maps` describe; they are re-encoded and uploaded when a launch
    /// differs (another buffer, shape or batch tile).
    tensor_maps_for: Option<TensorMapKey>,
}

/// What a launch's tensor maps depend on: the two device addresses and their element type, B, D, V
/// and the variant (its `BLOCK_B` and weight layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TensorMapKey {
    hidden: u64,
    weight: u64,
    elem: ElementType,
    b: usize,
    d: usize,
    v: usize,
    variant: FusedVariant,
}

/// Encodes a tensor map of element type `elem` and geometry `layout` over device memory at
/// `address` (128-byte swizzle, zeros outside the tensor).
fn encode_tensor_map<const R: usize>(address: u64, layout: TmaLayout<R>, elem: ElementType) -> Result<TensorMap> {
    let data_type = match elem {
        ElementType::Bf16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        ElementType::F16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    };
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every pointer is to a live array of the length rank `R` needs (`R − 1` strides); the
    // driver only encodes the descriptor (no device access).
    let status = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            data_type,
            R as u32,
            address as *mut std::ffi::c_void,
            layout.dims.as_ptr(),
            layout.strides[1..].as_ptr(),
            layout.boxes.as_ptr(),
            layout.element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(Error::Driver(cudarc::driver::DriverError(status)));
    }
    Ok(TensorMap(map.opaque))
}

impl DeviceSamples {
    /// Sampled tokens of the last call, on the device (`[B, n]`, row-major;
    /// [`flashsampling_kernels::INVALID_INDEX`] for a sample without a token: NaN or every token
    /// masked).
    pub fn tokens(&self) -> CudaView<'_, u32> {
        self.tokens.slice(..self.b)
    }

    /// Winning perturbed scores of the last call, on the device (`[B, n]`).
    pub fn scores(&self) -> CudaView<'_, f32> {
        self.scores.slice(..self.b)
    }

    /// Log-probabilities of the last call's tokens under the processed distribution (`[B, n]`), when
    /// it asked for them ([`SamplingParams::logprobs`]); see [`crate::Samples::logprobs`].
    pub fn logprobs(&self) -> Option<CudaView<'_, f32>> {
        self.logprobs.as_ref().filter(|_| self.has_logprobs).map(|l| l.slice(..self.b))
    }

    /// Log-probabilities of the last call's tokens under `softmax(logits)` (`[B, n]`), when it asked
    /// for [`LogProbs::ProcessedAndRaw`] (a call asking [`LogProbs::Processed`] on one GPU neither
    /// computes nor writes them: its kernels skip the raw log-mass).
    pub fn raw_logprobs(&self) -> Option<CudaView<'_, f32>> {
        self.raw_logprobs.as_ref().filter(|_| self.has_raw_logprobs).map(|l| l.slice(..self.b))
    }

    /// Each sample row's log-sum-exp of `logits / T` (`[B, n]`: the same for the `n` samples of a
    /// row; NaN for a greedy row), when the last call asked for log-probabilities.
    pub fn logsumexp(&self) -> Option<CudaView<'_, f32>> {
        self.logsumexp.as_ref().filter(|_| self.has_logprobs).map(|l| l.slice(..self.b))
    }

    /// Per sample row of the last call when it truncated (top-k, top-p or min-p): 1 where the
    /// certificate could not decide the row and the exact fallback sampled it, else 0 (`[B, n]`).
    pub fn truncation_fallback(&self) -> Option<CudaView<'_, u32>> {
        self.truncation.as_ref().filter(|_| self.has_truncation).map(|t| t.flags.slice(..self.b))
    }

    /// Each request's top log-probabilities of the last call when it asked for them
    /// ([`SamplingParams::top_logprobs`] = `k`): tokens and log-probabilities, `[B, k]` row-major,
    /// most likely first (ties: the lower index first); a row with fewer than `k` tokens in its
    /// distribution ends with [`flashsampling_kernels::INVALID_INDEX`] and NaN.
    pub fn top_logprobs(&self) -> Option<(CudaView<'_, u32>, CudaView<'_, f32>)> {
        let requests = self.b / self.n.max(1);
        self.truncation
            .as_ref()
            .filter(|_| self.top_n > 0)
            .map(|t| (t.top_tokens.slice(..requests * self.top_n), t.top_logprobs.slice(..requests * self.top_n)))
    }

    /// Sample rows of the last call (`B·n`; before the first call: the rows it was allocated for).
    pub fn batch(&self) -> usize {
        self.b
    }

    /// Samples per row of the last call.
    pub fn samples_per_row(&self) -> usize {
        self.n
    }

    /// The fused kernel's arrival counters, on the device (tests: all zero between launches).
    #[doc(hidden)]
    pub fn counters(&self) -> CudaView<'_, u32> {
        self.counters.as_view()
    }

    /// The handoff slots' counters of stage-balanced launches, on the device (tests: all zero
    /// between launches); `None` before the first such launch.
    #[doc(hidden)]
    pub fn handoff_counters(&self) -> Option<CudaView<'_, u32>> {
        self.handoff.as_ref().map(|(_, c)| c.as_view())
    }

    /// Capacity: (batch rows, candidates, arrival counters) the buffers hold.
    #[doc(hidden)]
    pub fn capacity(&self) -> (usize, usize, usize) {
        let rows = (self.rows.len() / 4).min(self.tokens.len()).min(self.scores.len());
        (rows, self.candidates.len(), self.counters.len())
    }

    /// Whether the buffers serve a launch of `b` rows with `launch` on the context `ctx`.
    fn fits(&self, b: usize, launch: &LaunchShape, ctx: &CudaContext) -> bool {
        let n_cands = b.checked_mul(launch.n_vranges as usize);
        let masses_fit = match launch.epilogue {
            Epilogue::Sample => true,
            Epilogue::LogProbs | Epilogue::Truncate => {
                n_cands.is_some_and(|n| self.masses.as_ref().is_some_and(|m| m.len() >= 2 * n))
                    && [&self.logprobs, &self.raw_logprobs, &self.logsumexp]
                        .iter()
                        .all(|o| o.as_ref().is_some_and(|l| l.len() >= b))
            }
        };
        let handoff_fits = !launch.balanced
            || self
                .handoff
                .as_ref()
                .is_some_and(|(h, c)| h.len() >= launch.handoff_floats() && c.len() >= launch.handoff_counters());
        same_context(self.tokens.context(), ctx)
            && masses_fit
            && handoff_fits
            && n_cands.is_some_and(|n| self.candidates.len() >= n)
            && self.counters.len() >= launch.n_btiles as usize
            && self.rows.len() >= 4 * b
            && self.tokens.len() >= b
            && self.scores.len() >= b
            && self.tensor_maps.len() * 8 >= size_of::<TensorMaps>()
    }

    /// Records a call of `rows` sample rows (`n` per request) that wrote these outputs by other
    /// means than the fused launch (a rank's merge).
    pub(crate) fn set_call(&mut self, rows: usize, n: usize, logprobs: bool) {
        self.b = rows;
        self.n = n;
        self.has_logprobs = logprobs;
        self.has_raw_logprobs = logprobs;
        self.has_truncation = false;
        self.top_n = 0;
    }

    /// The outputs' device addresses for a write on `stream` (the log-probability ones with
    /// `logprobs`; they must exist: [`GpuBackend::ensure_outputs`]).
    pub(crate) fn output_ptrs<'a>(&'a mut self, stream: &'a CudaStream, logprobs: bool) -> OutputPtrs<'a> {
        let mut guards = Vec::new();
        let (tokens, g) = self.tokens.device_ptr_mut(stream);
        guards.push(g);
        let (scores, g) = self.scores.device_ptr_mut(stream);
        guards.push(g);
        let mut lp = [0u64; 3];
        if logprobs {
            for (i, buf) in [&mut self.logprobs, &mut self.raw_logprobs, &mut self.logsumexp].into_iter().enumerate() {
                if let Some(b) = buf.as_mut() {
                    let (ptr, g) = b.device_ptr_mut(stream);
                    lp[i] = ptr;
                    guards.push(g);
                }
            }
        }
        OutputPtrs { tokens, scores, logprobs: lp[0], raw_logprobs: lp[1], logsumexp: lp[2], _guards: guards }
    }

    /// Fills the tokens with `INVALID_INDEX` and the scores with NaN (all bits set: `u32::MAX`, and a
    /// quiet NaN), stream-ordered.
    fn invalidate(&mut self, stream: &CudaStream) -> Result<()> {
        let (token_bytes, score_bytes) = (self.tokens.num_bytes(), self.scores.num_bytes());
        let mut targets =
            vec![(self.tokens.device_ptr_mut(stream), token_bytes), (self.scores.device_ptr_mut(stream), score_bytes)];
        for out in [&mut self.logprobs, &mut self.raw_logprobs, &mut self.logsumexp].into_iter().flatten() {
            let bytes = out.num_bytes();
            targets.push((out.device_ptr_mut(stream), bytes));
        }
        for ((address, _guard), bytes) in targets {
            // SAFETY: `address` is a live allocation of `bytes` bytes (the guard keeps its events
            // ordered around this memset); all-ones bytes are a valid u32 and a valid f32.
            unsafe { cudarc::driver::result::memset_d8_async(address, 0xFF, bytes, stream.cu_stream()) }?;
        }
        Ok(())
    }
}

/// `Error::Misaligned` unless the hidden states' and the weight's device addresses are 16-byte
/// aligned (the kernels' 16-byte loads and the TMA boxes need it).
fn check_aligned(hidden: u64, weight: u64) -> Result<()> {
    for (buffer, address) in [("hidden states", hidden), ("LM-head weight", weight)] {
        if address % 16 != 0 {
            return Err(Error::Misaligned { buffer, address });
        }
    }
    Ok(())
}

/// Whether two contexts are the same CUDA context (two `CudaContext::new` of one ordinal share the
/// primary context).
fn same_context(a: &CudaContext, b: &CudaContext) -> bool {
    a.cu_ctx() == b.cu_ctx()
}

/// The hidden size the buffers of [`GpuBackend::alloc_samples`] are sized for (not known there):
/// the kernel choice's largest-D arm, whose launches have the most vocab ranges of any D
/// (`config::tests::the_launch_for_an_unknown_hidden_size_needs_the_largest_buffers`).
const ANY_D: usize = u32::MAX as usize;

/// The CUDA backend.
pub struct GpuBackend {
    ctx: Arc<CudaContext>,
    sm_count: u32,
    /// Tuning override of the persistent grid's blocks per multiprocessor
    /// (`FLASHSAMPLING_BLOCKS_PER_SM`); samples do not depend on it.
    blocks_per_sm_override: Option<u32>,
    /// `reduce_rows` and the truncation step's kernels are launched with programmatic stream
    /// serialization (off with `FLASHSAMPLING_PDL=0`, to measure it).
    dependent_launch: bool,
    stream: Arc<CudaStream>,
    /// Every fused-kernel variant, in [`FUSED_VARIANTS`] order; `None` where this GPU cannot run it
    /// (the Hopper module's variants outside compute capability 9.0).
    fused: Vec<Option<LoadedVariant>>,
    /// The row-expansion kernel (portable module).
    expand: CudaFunction,
    /// The sparse-adjustment kernel (portable module).
    adjust: CudaFunction,
    /// The log-probability reduction (portable module), launched after every log-probability and
    /// truncation fused kernel.
    reduce_rows: CudaFunction,
    /// The truncation step's two entries (portable module: [`TruncateStep::Alone`], then
    /// [`TruncateStep::Paired`]) and the fallback's kernels: its gather, its logits on the tensor
    /// cores (with their occupancy, as a fused variant's) and its sampler.
    truncate: (CudaFunction, CudaFunction),
    /// Measurement override of the truncation step's entry (`FLASHSAMPLING_TRUNCATE_STEP=alone` or
    /// `paired`; [`TruncateStep::for_rows`] otherwise); samples do not depend on it.
    truncate_step_override: Option<TruncateStep>,
    fallback_gather: CudaFunction,
    fallback_logits: LoadedEntry,
    fallback_sample: CudaFunction,
    /// Whether the Hopper (sm_90a) module is loaded.
    sm90a: bool,
    /// What the portable and (when loaded) the Hopper module run ([`GpuBackend::module_code`]).
    module_code: (ModuleCode, Option<ModuleCode>),
    /// Variant forced for every batch size (`FLASHSAMPLING_FUSED_VARIANT` or
    /// [`GpuBackend::set_fused_variant`]); samples do not depend on it.
    variant_override: Option<FusedVariant>,
    /// Stage-balanced vocab ranges forced on or off (`FLASHSAMPLING_BALANCE_STAGES=1` or `0`, or
    /// [`GpuBackend::set_stage_balance`]); samples do not depend on it.
    stage_balance_override: Option<bool>,
}

impl std::fmt::Debug for GpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuBackend").field("device", &self.device_name()).finish()
    }
}

/// Whether a CUDA driver library and at least one device are present.
pub fn gpu_available() -> bool {
    // SAFETY: only probes whether the driver library can be opened.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return false;
    }
    CudaContext::device_count().map(|n| n > 0).unwrap_or(false)
}

/// The device address of `view` for a read on `stream`, and cudarc's guard: `stream` waits for the
/// buffer's last write now, and the guard, when dropped, records the buffer's read event on
/// `stream`. Drop it only after the launch that reads the buffer is enqueued, so that a later writer
/// (on any stream) and the buffer's own free wait for that launch.
fn device_address<'a, T>(view: &'a CudaView<'_, T>, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
    view.device_ptr(stream)
}

/// The device's compute capability (major, minor).
fn compute_capability(ctx: &CudaContext) -> Result<(i32, i32)> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    Ok((
        ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    ))
}

/// What a loaded module runs: machine code (a cubin) or PTX the driver JIT-compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleCode {
    /// The embedded cubin (compute capability 9.0): no JIT.
    Cubin,
    /// The embedded PTX through the driver's JIT.
    Ptx,
}

/// A module from its cubin (see [`crate::modules`]) on a compute capability 9.0 GPU, else, or when
/// the cubin is empty, does not load, or `FLASHSAMPLING_JIT=1`, from its PTX through the driver's
/// JIT; `None` when neither is embedded (a prebuilt build's Hopper PTX under `FLASHSAMPLING_JIT=1`).
fn load_module(
    ctx: &Arc<CudaContext>,
    ptx: &Artifact,
    cubin: &Artifact,
    cc: (i32, i32),
) -> Result<Option<(Arc<CudaModule>, ModuleCode)>> {
    let jit = std::env::var("FLASHSAMPLING_JIT").is_ok_and(|v| v == "1");
    if cc == (9, 0)
        && !jit
        && !cubin.is_empty()
        && let Ok(m) = ctx.load_module(Ptx::from_binary(cubin.bytes()?))
    {
        return Ok(Some((m, ModuleCode::Cubin)));
    }
    if ptx.is_empty() {
        return Ok(None);
    }
    Ok(Some((ctx.load_module(Ptx::from_src(ptx.text()?))?, ModuleCode::Ptx)))
}

/// The portable module ([`PTX`], or its sm_90 cubin on compute capability 9.0; [`load_module`]).
pub(crate) fn load_portable_module(ctx: &Arc<CudaContext>) -> Result<(Arc<CudaModule>, ModuleCode)> {
    let loaded = load_module(ctx, &PTX, &CUBIN, compute_capability(ctx)?)?;
    Ok(loaded.expect("every build embeds the portable PTX (build.rs)"))
}

/// Launches `func` with the one parameter `p` on `stream` with programmatic stream serialization
/// (`cuLaunchKernelEx`, `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`): the grid may be
/// scheduled as soon as every block of the kernel before it on the stream has executed
/// `griddepcontrol.launch_dependents`, and must itself wait (`griddepcontrol.wait`) before it reads
/// what that kernel wrote.
///
/// # Safety
/// As for any launch: `p` is what `func` takes, `cfg` its launch shape, every buffer `p` names
/// outlives the kernel on `stream`; and `func` executes `griddepcontrol.wait` before its first
/// access to memory the previous kernel writes.
unsafe fn launch_dependent<T: DeviceRepr>(
    stream: &CudaStream,
    func: &CudaFunction,
    cfg: LaunchConfig,
    p: &T,
) -> Result<()> {
    let mut attr = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value: sys::CUlaunchAttributeValue { programmaticStreamSerializationAllowed: 1 },
    };
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    stream.context().bind_to_thread()?;
    let mut args = [p as *const T as *mut core::ffi::c_void];
    // SAFETY: `config` and `attr` live across the call; `args` holds the address of the one
    // parameter, which the driver copies before returning; the rest is the caller's contract.
    unsafe { sys::cuLaunchKernelEx(&config, func.cu_function(), args.as_mut_ptr(), std::ptr::null_mut()) }.result()?;
    Ok(())
}

impl GpuBackend {
    /// Opens device `ordinal`, loads the embedded PTX and looks up every kernel.
    pub fn new(ordinal: usize) -> Result<Self> {
        if !gpu_available() {
            return Err(Error::NoGpu("no CUDA driver library or no device".into()));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::NoGpu(e.to_string()))?;
        let sm_count =
            ctx.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let stream = ctx.new_stream()?;
        let (module, portable_code) = load_portable_module(&ctx)?;
        // The arch-specific sm_90a module (`wgmma`) loads on compute capability 9.0 only.
        let cc = compute_capability(&ctx)?;
        // `FLASHSAMPLING_PORTABLE=1` keeps it unloaded, so a Hopper GPU runs the portable kernels the
        // way other GPUs do (to measure and test that path).
        let portable_only = std::env::var("FLASHSAMPLING_PORTABLE").is_ok_and(|v| v == "1");
        let loaded_sm90a =
            if cc == (9, 0) && !portable_only { load_module(&ctx, &PTX_SM90A, &CUBIN_SM90A, cc)? } else { None };
        let hopper_code = loaded_sm90a.as_ref().map(|(_, code)| *code);
        let module_sm90a = loaded_sm90a.map(|(m, _)| m);
        // The persistent grid fills every multiprocessor to the occupancy its registers allow.
        let fused = FUSED_VARIANTS
            .iter()
            .map(|variant| {
                let module = match (variant.module(), &module_sm90a) {
                    (Module::Portable, _) => &module,
                    (Module::Hopper, Some(m)) => m,
                    (Module::Hopper, None) => return Ok(None),
                    (Module::Test, _) => unreachable!("no fused kernel is in the test module"),
                };
                let load = |e: Epilogue| {
                    LoadedEntry::load(module, variant.entry_for(e), variant.threads(), variant.smem_bytes(e))
                };
                Ok(Some(LoadedVariant {
                    variant,
                    sample: load(Epilogue::Sample)?,
                    logprobs: load(Epilogue::LogProbs)?,
                    truncate: load(Epilogue::Truncate)?,
                }))
            })
            .collect::<Result<Vec<_>>>()?;
        let expand = module.load_function(EXPAND_ENTRY)?;
        let adjust = module.load_function(ADJUST_ENTRY)?;
        let reduce_rows = module.load_function(REDUCE_BLOCK_ENTRY)?;
        let truncate =
            (module.load_function(TruncateStep::Alone.entry())?, module.load_function(TruncateStep::Paired.entry())?);
        let fallback_gather = module.load_function(FALLBACK_GATHER_ENTRY)?;
        let lv = FALLBACK_LOGITS_VARIANT;
        let fallback_logits =
            LoadedEntry::load(&module, FALLBACK_LOGITS_ENTRY, lv.threads(), lv.smem_bytes(Epilogue::Sample))?;
        let fallback_sample = module.load_function(FALLBACK_SAMPLE_ENTRY)?;
        let mut gpu = Self {
            truncate,
            fallback_gather,
            fallback_logits,
            fallback_sample,
            variant_override: None,
            stage_balance_override: match std::env::var("FLASHSAMPLING_BALANCE_STAGES").as_deref() {
                Ok("1") => Some(true),
                Ok("0") => Some(false),
                _ => None,
            },
            sm90a: module_sm90a.is_some(),
            module_code: (portable_code, hopper_code),
            fused,
            expand,
            adjust,
            reduce_rows,
            stream,
            ctx,
            sm_count,
            dependent_launch: std::env::var("FLASHSAMPLING_PDL").map_or(true, |v| v != "0"),
            truncate_step_override: match std::env::var("FLASHSAMPLING_TRUNCATE_STEP").as_deref() {
                Ok("alone") => Some(TruncateStep::Alone),
                Ok("paired") => Some(TruncateStep::Paired),
                _ => None,
            },
            blocks_per_sm_override: std::env::var("FLASHSAMPLING_BLOCKS_PER_SM")
                .ok()
                .and_then(|s| s.parse().ok())
                .filter(|&n: &u32| (1..=32).contains(&n)),
        };
        if let Ok(name) = std::env::var("FLASHSAMPLING_FUSED_VARIANT")
            && !name.is_empty()
        {
            let variant = FusedVariant::by_name(&name).ok_or_else(|| gpu.unknown_variant(&name))?;
            gpu.set_fused_variant(Some(variant))?;
        }
        Ok(gpu)
    }

    /// What the portable module and the Hopper module (`None`: not loaded, outside compute capability
    /// 9.0 or with `FLASHSAMPLING_PORTABLE=1`) run: their cubins on compute capability 9.0 (loaded in
    /// milliseconds), else their PTX through the driver's JIT (see [`crate::modules`]).
    pub fn module_code(&self) -> (ModuleCode, Option<ModuleCode>) {
        self.module_code
    }

    /// Every fused-kernel variant this GPU runs with its resident blocks per multiprocessor (the
    /// persistent grid's size is that times the multiprocessor count).
    pub fn fused_occupancy(&self) -> Vec<(FusedVariant, u32)> {
        self.fused.iter().flatten().map(|f| (*f.variant, f.sample.per_sm)).collect()
    }

    /// The fused-kernel variants this GPU runs, in [`FUSED_VARIANTS`] order.
    pub fn fused_variants(&self) -> Vec<FusedVariant> {
        self.fused.iter().flatten().map(|f| *f.variant).collect()
    }

    /// The loaded kernel of `variant`, if this GPU runs it.
    fn loaded(&self, variant: FusedVariant) -> Option<&LoadedVariant> {
        let i = FUSED_VARIANTS.iter().position(|f| *f == variant)?;
        self.fused[i].as_ref()
    }

    fn unknown_variant(&self, name: &str) -> Error {
        let known: Vec<&str> = self.fused_variants().iter().map(|v| v.entry).collect();
        Error::UnknownVariant(name.into(), known.join(", "))
    }

    /// Forces `variant` for every batch size, or restores the choice by batch size (`None`). For
    /// tuning and tests: every variant samples the same distribution from the same noise (the
    /// variants of one family and MMA shape bit-identically). The environment variable
    /// `FLASHSAMPLING_FUSED_VARIANT=<entry point>` sets it at construction; an error when this GPU
    /// does not run the variant.
    pub fn set_fused_variant(&mut self, variant: Option<FusedVariant>) -> Result<()> {
        if let Some(v) = variant
            && self.loaded(v).is_none()
        {
            return Err(self.unknown_variant(v.entry));
        }
        self.variant_override = variant;
        Ok(())
    }

    /// Forces the vocab ranges of the weight-as-A kernels balanced to the pipeline stage (`Some(true)`,
    /// where the launch allows it: a plain or log-probability launch, one batch tile, at least two
    /// tiles per range, [`FusedVariant::can_balance_stages`]) or to whole tiles
    /// (`Some(false)`); `None`, the default, balances where whole tiles leave the largest range more
    /// than 1/64 above the mean ([`FusedVariant::balances_stages`]). Samples, scores and
    /// log-probabilities do not depend on it: a cut tile's logits are the same MMAs in the same
    /// order. The environment variable `FLASHSAMPLING_BALANCE_STAGES=1` or `0` sets it at
    /// construction.
    pub fn set_stage_balance(&mut self, on: Option<bool>) {
        self.stage_balance_override = on;
    }

    /// Whether a call with `b` sample rows, hidden size `d`, vocab size `v` and `epilogue` runs
    /// stage-balanced vocab ranges (tests, benchmarks).
    #[doc(hidden)]
    pub fn balances_stages_for(&self, b: usize, d: usize, v: usize, epilogue: Epilogue) -> bool {
        self.launch_shape_in(b, d, v, v, epilogue).balanced
    }

    /// Forces the truncation step's entry ([`TruncateStep`]; `None`: [`TruncateStep::for_rows`]
    /// per launch, the default). Both build the same body: samples, log-probabilities and fallback
    /// rows do not depend on it (tests, benchmarks). The environment variable
    /// `FLASHSAMPLING_TRUNCATE_STEP=alone` or `paired` sets it at construction.
    pub fn set_truncate_step(&mut self, step: Option<TruncateStep>) {
        self.truncate_step_override = step;
    }

    /// The fused-kernel variant a call with `b` rows, hidden size `d`, vocab size `v` and
    /// `epilogue` launches (`Epilogue::Sample` without log-probabilities and truncation; `LogProbs`
    /// with log-probabilities; `Truncate` with top-k / top-p / min-p).
    pub fn fused_variant_for(&self, b: usize, d: usize, v: usize, epilogue: Epilogue) -> FusedVariant {
        let shape = (b as u32, d.min(u32::MAX as usize) as u32, v as u32);
        self.variant_override.unwrap_or(variant_for_batch(shape, epilogue, self.sm90a, self.sm_count))
    }

    /// Whether the Hopper (sm_90a) module is loaded: compute capability 9.0 and
    /// `FLASHSAMPLING_PORTABLE` not set to 1. Otherwise only the portable kernels run.
    pub fn hopper_kernels(&self) -> bool {
        self.sm90a
    }

    /// Multiprocessors of the device.
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// The device's name.
    pub fn device_name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "unknown CUDA device".into())
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream every launch goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The launch of the fused kernel for `v` weight rows of a `vocab`-entry head (`v = vocab` for a
    /// whole head) and epilogue `epilogue`: the variant is the one the
    /// whole head would get (so a vocab shard sums its logits like the one-GPU call and its samples
    /// are bit-identical), unless it cannot run `v` rows (hidden-as-A kernels need `v % 16 == 0`).
    fn launch_shape_in(&self, b: usize, d: usize, v: usize, vocab: usize, epilogue: Epilogue) -> LaunchShape {
        let whole = self.fused_variant_for(b, d, vocab, epilogue);
        let variant = if whole.supports_vocab(v as u32) { whole } else { self.fused_variant_for(b, d, v, epilogue) };
        let loaded = self.loaded(variant).expect("only loaded variants are chosen");
        let n_btiles = variant.batch_tiles(b as u32);
        let per_sm = self.blocks_per_sm_override.unwrap_or(loaded.entry(epilogue).per_sm);
        let n_vranges = variant.n_vranges(self.sm_count, per_sm, n_btiles, v as u32);
        let tiles = (v as u32).div_ceil(variant.tile_v());
        let balanced = match self.stage_balance_override {
            None => variant.balances_stages(epilogue, tiles, n_vranges, n_btiles),
            Some(on) => on && variant.can_balance_stages(epilogue, tiles, n_vranges, n_btiles),
        };
        LaunchShape { variant, epilogue, n_btiles, n_vranges, balanced }
    }

    /// Allocates the per-batch buffers for up to `b` rows and vocab size `v`: `B × n_vranges`
    /// candidates (n_vranges ≤ resident blocks per SM × multiprocessors, from the kernel's
    /// occupancy), `B` arrival counters (zeroed; the kernel uses `n_btiles ≤ B`), stream ids, tokens
    /// (filled with `INVALID_INDEX`) and scores (NaN). `b` and `v` must be in `1 ..= MAX_DIM`
    /// ([`Error::EmptyBatch`], [`Error::EmptyVocab`], [`Error::TooLarge`]); a device out of memory is
    /// [`Error::Driver`] with [`Error::is_out_of_memory`].
    ///
    /// The kernel beyond 64 rows also depends on the hidden size, which this does not know: the
    /// candidates are sized for the launch with the most vocab ranges of any hidden size, so a call
    /// of up to `b` rows and vocab `v` never allocates again.
    pub fn alloc_samples(&self, b: usize, v: usize) -> Result<DeviceSamples> {
        self.alloc_for(b, v, Epilogue::Sample)
    }

    /// [`Self::alloc_samples`] for `b` sample rows (`B·n`) and kernels with epilogue `epilogue` (the
    /// log-probability buffers with [`Epilogue::LogProbs`]).
    fn alloc_for(&self, b: usize, v: usize, epilogue: Epilogue) -> Result<DeviceSamples> {
        self.alloc_for_in(b, ANY_D, v, v, epilogue)
    }

    /// [`Self::alloc_for`] for hidden size `d` ([`ANY_D`]: not known) and `v` weight rows of a
    /// `vocab`-entry head (the launch [`Self::launch_shape_in`] makes).
    fn alloc_for_in(&self, b: usize, d: usize, v: usize, vocab: usize, epilogue: Epilogue) -> Result<DeviceSamples> {
        if b == 0 {
            return Err(Error::EmptyBatch);
        }
        if v == 0 {
            return Err(Error::EmptyVocab);
        }
        let max = MAX_DIM as usize;
        for (what, value) in [("batch size B", b), ("vocab size V", v)] {
            if value > max {
                return Err(Error::TooLarge { what, value, max });
            }
        }
        let launch = self.launch_shape_in(b, d, v, vocab.max(v), epilogue);
        let n_cands = b.checked_mul(launch.n_vranges as usize).filter(|&n| n <= isize::MAX as usize / 16).ok_or(
            Error::TooLarge { what: "candidates (B × vocab ranges)", value: usize::MAX, max: isize::MAX as usize / 8 },
        )?;
        let counters = b.max(launch.n_btiles as usize);
        let lp = epilogue.has_logprobs();
        // SAFETY: the candidates, masses, row parameters and tensor maps are written (by the kernel,
        // an upload or the tensor-map upload) before they are read; the counters are zeroed and the
        // outputs filled below, stream-ordered before anything else on the stream.
        let mut out = unsafe {
            DeviceSamples {
                candidates: self.stream.alloc::<u64>(n_cands.max(1))?,
                counters: self.stream.alloc_zeros::<u32>(counters)?,
                rows: self.stream.alloc::<u64>(4 * b)?,
                tokens: self.stream.alloc::<u32>(b)?,
                scores: self.stream.alloc::<f32>(b)?,
                masses: if lp { Some(self.stream.alloc::<u64>(2 * n_cands.max(1))?) } else { None },
                logprobs: if lp { Some(self.stream.alloc::<f32>(b)?) } else { None },
                raw_logprobs: if lp { Some(self.stream.alloc::<f32>(b)?) } else { None },
                logsumexp: if lp { Some(self.stream.alloc::<f32>(b)?) } else { None },
                mask: None,
                expanded: None,
                adj: None,
                adjusted: None,
                truncation: None,
                handoff: if launch.balanced {
                    Some((
                        self.stream.alloc::<f32>(launch.handoff_floats())?,
                        self.stream.alloc_zeros::<u32>(launch.handoff_counters())?,
                    ))
                } else {
                    None
                },
                has_truncation: false,
                top_n: 0,
                b,
                n: 1,
                has_logprobs: false,
                has_raw_logprobs: false,
                uploaded_rows: Vec::new(),
                tensor_maps: self.stream.alloc::<u64>(size_of::<TensorMaps>() / 8)?,
                tensor_maps_for: None,
            }
        };
        out.invalidate(&self.stream)?;
        Ok(out)
    }

    /// One token per row (`[B, n]` with [`SamplingParams::n`]); host buffers in, host tokens out
    /// (uploads, samples, downloads).
    pub fn sample<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
    ) -> Result<Vec<u32>> {
        Ok(self.sample_scored(hidden, weight, params)?.tokens)
    }

    /// Tokens, winning perturbed scores and the log-probabilities `params` asks for; host buffers in
    /// and out.
    pub fn sample_scored<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
    ) -> Result<Samples> {
        validate((hidden.rows, hidden.cols, hidden.data.len()), (weight.rows, weight.cols, weight.data.len()), params)?;
        let h = self.stream.clone_htod(hidden.data)?;
        let w = self.stream.clone_htod(weight.data)?;
        let mut out = self.alloc_samples(hidden.rows, weight.rows)?;
        self.sample_device(
            &DeviceMatrix { data: h.as_view(), rows: hidden.rows, cols: hidden.cols },
            &DeviceMatrix { data: w.as_view(), rows: weight.rows, cols: weight.cols },
            params,
            &mut out,
        )?;
        let n = params.n as usize;
        let mut samples =
            Samples::plain(self.stream.clone_dtoh(&out.tokens())?, self.stream.clone_dtoh(&out.scores())?);
        if params.logprobs != LogProbs::Off {
            let get = |v: Option<CudaView<'_, f32>>| -> Result<Vec<f32>> {
                Ok(self.stream.clone_dtoh(&v.expect("a log-probability launch fills them"))?)
            };
            samples.logprobs = Some(get(out.logprobs())?);
            if params.logprobs == LogProbs::ProcessedAndRaw {
                samples.raw_logprobs = Some(get(out.raw_logprobs())?);
            }
            samples.logsumexp = Some(get(out.logsumexp())?.into_iter().step_by(n).collect());
        }
        if let Some(flags) = out.truncation_fallback() {
            samples.truncation_fallback = Some(self.stream.clone_dtoh(&flags)?.into_iter().map(|f| f != 0).collect());
        }
        samples.top_logprobs = self.download_top_logprobs(&out)?;
        check_samples_of(&samples, n, hidden, &[weight.data])?;
        Ok(samples)
    }

    /// The last call's top log-probabilities in `out`, per request (each list up to its last entry).
    pub(crate) fn download_top_logprobs(&self, out: &DeviceSamples) -> Result<Option<crate::TopLogprobs>> {
        let Some((tokens, logprobs)) = out.top_logprobs() else {
            return Ok(None);
        };
        let (tokens, logprobs) = (self.stream.clone_dtoh(&tokens)?, self.stream.clone_dtoh(&logprobs)?);
        let per = out.top_n.max(1);
        Ok(Some(
            tokens
                .chunks(per)
                .zip(logprobs.chunks(per))
                .map(|(t, l)| {
                    t.iter()
                        .zip(l)
                        .take_while(|(t, _)| **t != flashsampling_kernels::INVALID_INDEX)
                        .map(|(&t, &l)| (t, l))
                        .collect()
                })
                .collect(),
        ))
    }

    /// Samples on device buffers: one launch of the fused kernel on [`Self::stream`] (two with
    /// several samples per row: the hidden rows are first copied `n` times, device to device),
    /// asynchronous (its last block per batch tile reduces the candidates). Tokens stay on the
    /// device in `out` ([`DeviceSamples::tokens`], and the log-probabilities when asked for);
    /// nothing is copied to the host, so a decode loop needs no host round trip per token. The
    /// per-row parameters (`[B·n]` of 32 bytes) are uploaded when they differ from the last call's;
    /// a host mask ([`SamplingParams::allowed`]) is uploaded every call — a decode loop that keeps
    /// its masks on the device passes them to [`Self::sample_device_masked`] instead.
    pub fn sample_device<T: Element>(
        &self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        out: &mut DeviceSamples,
    ) -> Result<()> {
        self.sample_device_masked(hidden, weight, params, None, out)
    }

    /// [`Self::sample_device`] with the allowed-token mask in device memory: `[B, ceil(V / 32)]`
    /// words (bit `j` of word `w` = token `32w + j`, vLLM's and xgrammar's layout), instead of
    /// [`SamplingParams::allowed`] (give one or the other). A row with no allowed token gets
    /// [`flashsampling_kernels::INVALID_INDEX`] and a `−∞` score.
    pub fn sample_device_masked<T: Element>(
        &self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        mask: Option<&CudaView<'_, u32>>,
        out: &mut DeviceSamples,
    ) -> Result<()> {
        let whole = VocabRange { offset: 0, vocab: weight.rows };
        self.sample_device_in(hidden, weight, params, mask, out, whole, None)
    }

    /// [`Self::sample_device_masked`] for a weight holding global vocab rows `range.offset ..` of a
    /// `range.vocab`-entry head (rows at or past `range.vocab` are padding, never scored). With
    /// `staging` (a rank's exchange buffer, `[6, B·n]` words), the launch writes its per-row results
    /// there ([`flashsampling_kernels::params::MergeRanksParams`]'s layout) instead of into `out`.
    pub(crate) fn sample_device_in<T: Element>(
        &self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        mask: Option<&CudaView<'_, u32>>,
        out: &mut DeviceSamples,
        range: VocabRange,
        staging: Option<u64>,
    ) -> Result<()> {
        let mut shape = self.validate_call(hidden, weight, params, mask, range)?;
        if range.offset >= range.vocab {
            return Err(Error::InvalidShards { reason: "the shard starts at or past V", at: range.offset });
        }
        // Rows past the model's vocabulary are padding: not scored (nor read).
        shape.v = weight.rows.min(range.vocab - range.offset);
        // The guards stay alive until the launch is enqueued (see `device_address`).
        let (hidden_ptr, _hidden_guard) = device_address(&hidden.data, &self.stream);
        let (weight_ptr, _weight_guard) = device_address(&weight.data, &self.stream);
        let (mask_ptr, _mask_guard) = match mask {
            Some(m) => {
                let (ptr, guard) = device_address(m, &self.stream);
                (ptr, Some(guard))
            }
            None => (0, None),
        };
        check_aligned(hidden_ptr, weight_ptr)?;
        // `n` samples per row: the kernel scores B·n rows (row r·n + j is row r's sample j).
        let n = params.n as usize;
        let rows = shape.b * n;
        if rows > MAX_DIM as usize {
            return Err(Error::TooLarge { what: "sample rows (B × n)", value: rows, max: MAX_DIM as usize });
        }
        let truncates = params.truncates(range.vocab);
        // Top log-probabilities come from the truncation step's sorted prefix.
        let epilogue = match (truncates || params.top_logprobs > 0, params.logprobs) {
            (true, _) => Epilogue::Truncate,
            (false, LogProbs::Off) => Epilogue::Sample,
            (false, _) => Epilogue::LogProbs,
        };
        if epilogue == Epilogue::Truncate {
            if staging.is_none() && (range.offset != 0 || shape.v != range.vocab) {
                return Err(Error::Unsupported {
                    control: "top-k / top-p / min-p or top log-probabilities on a vocab shard",
                    path: "outside a tensor-parallel group",
                });
            }
            if staging.is_some() {
                check_rank_truncation(params, range.vocab)?;
            }
        }
        let launch = self.launch_shape_in(rows, shape.d, shape.v, range.vocab, epilogue);
        let variant = launch.variant;
        if !variant.supports_vocab(shape.v as u32) {
            return Err(Error::UnsupportedVocab {
                variant: variant.entry,
                v: shape.v,
                multiple: TMA_T_VOCAB_ALIGN as usize,
            });
        }
        let blocks = launch.n_btiles as usize * launch.n_vranges as usize;
        if blocks > i32::MAX as usize {
            return Err(Error::TooLarge {
                what: "grid blocks (B tiles × V ranges)",
                value: blocks,
                max: i32::MAX as usize,
            });
        }
        // Every buffer the launch touches must be large enough for it (and on this context): else a
        // fresh set, sized by the same launch shape (zeroed counters, invalid tokens).
        if !out.fits(rows, &launch, &self.ctx) {
            *out = self.alloc_for_in(rows, shape.d, shape.v, range.vocab, epilogue)?;
        }
        if epilogue == Epilogue::Truncate {
            let units = launch.n_vranges as usize * variant.top_units() as usize;
            self.ensure_truncation(out, rows, units, (shape.v, shape.d))?;
        }
        let words = self.row_words(params, shape.b)?;
        out.b = rows;
        out.n = n;
        out.has_logprobs = epilogue.has_logprobs() && params.logprobs != LogProbs::Off;
        out.has_raw_logprobs = epilogue.has_logprobs() && params.logprobs == LogProbs::ProcessedAndRaw;
        out.has_truncation = truncates;
        out.top_n = params.top_logprobs as usize;
        let ranged = Ranged { range, staging, elem: T::TYPE };
        let result =
            self.upload_and_launch(shape, params, (hidden_ptr, weight_ptr, mask_ptr), words, out, launch, ranged);
        if result.is_err() {
            // Best effort: no stale tokens after a failed call (see `DeviceSamples`), and no top
            // log-probabilities (their buffers hold a previous call's, or nothing yet).
            let _ = out.invalidate(&self.stream);
            out.top_n = 0;
        }
        // Only now may the read events of hidden, weight and mask be recorded: after the launch.
        drop((_hidden_guard, _weight_guard, _mask_guard));
        result
    }

    /// The checks of [`Self::sample_device_in`] that need no device address: shapes, parameters,
    /// the vocab range, the mask's length, every buffer on this context.
    pub(crate) fn validate_call<T: Element>(
        &self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        mask: Option<&CudaView<'_, u32>>,
        range: VocabRange,
    ) -> Result<Shape> {
        let (shape, _) = validate_in_vocab(
            (hidden.rows, hidden.cols, hidden.data.len()),
            (weight.rows, weight.cols, weight.data.len()),
            params,
            range.vocab,
        )?;
        if range.offset % SHARD_OFFSET_ALIGN != 0 {
            return Err(Error::InvalidShards {
                reason: "a shard on the GPU must start at a multiple of 4 vocab rows",
                at: range.offset,
            });
        }
        if range.offset + weight.rows > MAX_DIM as usize {
            return Err(Error::TooLarge {
                what: "shard end (global vocab row)",
                value: range.offset + weight.rows,
                max: MAX_DIM as usize,
            });
        }
        let words_per_row = range.vocab.div_ceil(32);
        if let Some(m) = mask {
            if params.allowed.is_some() {
                return Err(Error::Unsupported {
                    control: "a host mask and a device mask together",
                    path: "on the GPU backend",
                });
            }
            if m.len() != shape.b * words_per_row {
                return Err(Error::LengthMismatch {
                    buffer: "allowed-token mask (B × ceil(V / 32) words)",
                    expected: shape.b * words_per_row,
                    actual: m.len(),
                });
            }
            if !same_context(m.stream().context(), &self.ctx) {
                return Err(Error::ForeignBuffer { buffer: "allowed-token mask" });
            }
        }
        for (buffer, data) in [("hidden states", &hidden.data), ("LM-head weight", &weight.data)] {
            if !same_context(data.stream().context(), &self.ctx) {
                return Err(Error::ForeignBuffer { buffer });
            }
        }
        Ok(shape)
    }

    /// [`Self::validate_call`] and the alignment of the hidden states and the weight: every check a
    /// launch makes, for callers that validate several launches before making any (a
    /// [`crate::TpGroup`]). A single launch checks the alignment on the addresses it takes anyway.
    pub(crate) fn validate_launch<T: Element>(
        &self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        mask: Option<&CudaView<'_, u32>>,
        range: VocabRange,
    ) -> Result<Shape> {
        let shape = self.validate_call(hidden, weight, params, mask, range)?;
        let (h, _h) = device_address(&hidden.data, &self.stream);
        let (w, _w) = device_address(&weight.data, &self.stream);
        check_aligned(h, w)?;
        Ok(shape)
    }

    /// Makes `out` hold `rows` sample rows of outputs (and the log-probability outputs with
    /// `logprobs`) on this context, replacing it by a fresh set when it does not.
    pub(crate) fn ensure_outputs(&self, out: &mut DeviceSamples, rows: usize, logprobs: bool) -> Result<()> {
        let lp_fit = !logprobs
            || [&out.logprobs, &out.raw_logprobs, &out.logsumexp]
                .iter()
                .all(|o| o.as_ref().is_some_and(|l| l.len() >= rows));
        if !(same_context(out.tokens.context(), &self.ctx)
            && out.tokens.len() >= rows
            && out.scores.len() >= rows
            && lp_fit)
        {
            let epilogue = if logprobs { Epilogue::LogProbs } else { Epilogue::Sample };
            *out = self.alloc_for(rows, 1, epilogue)?;
        }
        Ok(())
    }

    /// The per-row parameters of a validated call, `[B·n]`, as upload words.
    fn row_words(&self, params: &SamplingParams, b: usize) -> Result<Vec<u64>> {
        let mut words = Vec::with_capacity(4 * b * params.n as usize);
        for r in 0..b {
            let lengths = || Error::LengthMismatch {
                buffer: "streams",
                expected: b,
                actual: params.streams.as_ref().map_or(0, Vec::len),
            };
            let noise = params.row_noise(r).ok_or_else(lengths)?;
            // `validate` checked the per-row temperatures (finite, ≥ 0) and the lists' lengths.
            let transform = Transform::from_temperature(params.row_temperature(r).ok_or_else(lengths)?);
            for j in 0..params.n {
                words.extend(row_words(RowParams {
                    seed: noise.seed,
                    stream: noise.stream,
                    transform,
                    sample: noise.sample + j,
                    request: r as u32,
                }));
            }
        }
        Ok(words)
    }

    /// The uploads (row parameters when changed, a host mask), the row expansion of `n > 1`, and
    /// the launch.
    fn upload_and_launch(
        &self,
        shape: Shape,
        params: &SamplingParams,
        (hidden, weight, device_mask): (u64, u64, u64),
        words: Vec<u64>,
        out: &mut DeviceSamples,
        launch: LaunchShape,
        ranged: Ranged,
    ) -> Result<()> {
        let rows = out.b;
        if words != out.uploaded_rows {
            out.uploaded_rows.clear();
            self.stream.memcpy_htod(&words, &mut out.rows.slice_mut(..4 * rows))?;
            out.uploaded_rows = words;
        }
        let mut mask_buf = match &params.allowed {
            Some(m) => {
                if out.mask.as_ref().is_none_or(|b| b.len() < m.words.len()) {
                    out.mask = Some(self.stream.alloc_zeros::<u32>(m.words.len().max(1))?);
                }
                let buf = out.mask.as_mut().expect("allocated above");
                self.stream.memcpy_htod(&m.words, &mut buf.slice_mut(..m.words.len()))?;
                true
            }
            None => false,
        };
        // Sparse adjustments: the adjusted tokens leave the fused pass through the mask (this call's
        // own copy: the host mask just uploaded, the caller's device mask copied, or all ones) and
        // are scored by `adjust_tokens`.
        let adjustments = params.adjustments.as_ref().filter(|a| !a.tokens.is_empty());
        if adjustments.is_some() && !mask_buf {
            let len = shape.b * ranged.range.vocab.div_ceil(32);
            if out.mask.as_ref().is_none_or(|b| b.len() < len) {
                out.mask = Some(self.stream.alloc_zeros::<u32>(len.max(1))?);
            }
            let buf = out.mask.as_mut().expect("allocated above");
            let (dst, _g) = buf.device_ptr_mut(&self.stream);
            // SAFETY: `dst` holds ≥ len words (ours, this stream's); a device mask (validated: B ×
            // ceil(V/32) words, guarded by the caller until after the launch) holds len words.
            unsafe {
                if device_mask != 0 {
                    sys::cuMemcpyDtoDAsync_v2(dst, device_mask, 4 * len, self.stream.cu_stream()).result()?;
                } else {
                    sys::cuMemsetD32Async(dst, u32::MAX, len, self.stream.cu_stream()).result()?;
                }
            }
            mask_buf = true;
        }
        let adjusted = match adjustments {
            Some(a) => {
                Some(self.launch_adjust(shape, a, params.softcap.unwrap_or(0.0), (hidden, weight), out, ranged)?)
            }
            None => None,
        };
        let hidden = if out.n > 1 {
            let len = rows * shape.d;
            if out.expanded.as_ref().is_none_or(|e| e.len() < len) {
                // SAFETY: written by the expansion below before the fused kernel reads it.
                out.expanded = Some(unsafe { self.stream.alloc::<u16>(len) }?);
            }
            let expanded = out.expanded.as_mut().expect("allocated above");
            let (dst, _e) = expanded.device_ptr_mut(&self.stream);
            let chunks = (shape.d / 8) as u32;
            let p = ByValue(ExpandParams {
                hidden: hidden as *const u16,
                out: dst as *mut u16,
                b: shape.b as u32,
                chunks,
                n: out.n as u32,
                _pad: 0,
            });
            let blocks = (rows as u64 * chunks as u64).div_ceil(EXPAND_THREADS as u64);
            if blocks > i32::MAX as u64 {
                return Err(Error::TooLarge {
                    what: "row-expansion blocks",
                    value: blocks as usize,
                    max: i32::MAX as usize,
                });
            }
            let cfg = LaunchConfig {
                grid_dim: (blocks as u32, 1, 1),
                block_dim: (EXPAND_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: `hidden` holds B·D elements (validated, 16-byte aligned, guarded by the caller),
            // `dst` B·n·D (allocated above, 256-byte aligned, ours: only this stream writes it);
            // D % 8 == 0; the grid covers the B·n·D/8 chunks.
            unsafe { self.stream.launch_builder(&self.expand).arg(&p).launch(cfg) }?;
            dst
        } else {
            hidden
        };
        // The mask and expansion buffers are this backend's, written and read on its stream only, so
        // their guards need not outlive the launch.
        let mask = if mask_buf {
            let (ptr, _g) = out.mask.as_ref().expect("uploaded above").device_ptr(&self.stream);
            ptr
        } else {
            device_mask
        };
        if launch.epilogue == Epilogue::Truncate {
            self.prepare_truncation(params, shape.b, out)?;
        }
        let fused = self.launch_fused(shape, params, (hidden, weight, mask), out, launch, ranged, adjusted)?;
        if launch.epilogue == Epilogue::Truncate {
            let units = launch.n_vranges as usize * launch.variant.top_units() as usize;
            let operands = (hidden, weight, mask, ranged.elem);
            match ranged.staging {
                Some(staging) => {
                    let shape = (shape.d, shape.v, ranged.range.vocab);
                    self.launch_truncation_export(params, shape, operands, units, staging, out)?;
                }
                None => {
                    let shape = (shape.b, shape.d, shape.v);
                    self.launch_truncation(params, shape, (operands, fused), units, adjusted, out)?
                }
            }
        }
        Ok(())
    }

    /// Uploads a call's sparse adjustments (CSR offsets, each entry's request row, tokens,
    /// adjustments) and launches `adjust_tokens`: each adjusted token's mask bit is cleared in the
    /// call's own mask (`out.mask`, ready) and its results for the `n` samples are written to
    /// `out.adjusted`. Returns the device addresses of the offsets and the results.
    fn launch_adjust(
        &self,
        shape: Shape,
        adj: &crate::controls::SparseAdjustments,
        softcap: f32,
        (hidden, weight): (u64, u64),
        out: &mut DeviceSamples,
        ranged: Ranged,
    ) -> Result<(u64, u64)> {
        let (b, e, n) = (shape.b, adj.tokens.len(), out.n);
        if e.checked_mul(n).is_none_or(|x| x > u32::MAX as usize / 4) {
            return Err(Error::TooLarge {
                what: "adjusted tokens × samples per row",
                value: e * n,
                max: u32::MAX as usize / 4,
            });
        }
        // [offsets (B + 1) | entry rows (E) | tokens (E) | adjustments (3E: bias, repetition, subtract)]
        let mut pack: Vec<u32> = Vec::with_capacity(b + 1 + 5 * e);
        pack.extend(adj.offsets.iter().map(|&o| o as u32));
        for r in 0..b {
            pack.extend(std::iter::repeat_n(r as u32, adj.offsets[r + 1] - adj.offsets[r]));
        }
        pack.extend(&adj.tokens);
        for a in &adj.adjustments {
            pack.extend([a.bias.to_bits(), a.repetition.to_bits(), a.subtract.to_bits()]);
        }
        if out.adj.as_ref().is_none_or(|x| x.len() < pack.len()) {
            out.adj = Some(self.stream.alloc_zeros::<u32>(pack.len())?);
        }
        if out.adjusted.as_ref().is_none_or(|x| x.len() < 4 * e * n) {
            // SAFETY: written by the kernel below before the fused kernel reads it.
            out.adjusted = Some(unsafe { self.stream.alloc::<u32>(4 * e * n) }?);
        }
        let pack_buf = out.adj.as_mut().expect("allocated above");
        self.stream.memcpy_htod(&pack, &mut pack_buf.slice_mut(..pack.len()))?;
        let (base, _p) = pack_buf.device_ptr(&self.stream);
        let (results, _r) = out.adjusted.as_mut().expect("allocated above").device_ptr_mut(&self.stream);
        let (mask, _m) = out.mask.as_mut().expect("made by the caller").device_ptr_mut(&self.stream);
        let (rows, _s) = out.rows.device_ptr(&self.stream);
        let at = |words: usize| base + 4 * words as u64;
        let p = ByValue(AdjustParams {
            hidden: hidden as *const u16,
            weight: weight as *const u16,
            rows: rows as *const RowParams,
            mask: mask as *mut u32,
            entry_rows: at(b + 1) as *const u32,
            tokens: at(b + 1 + e) as *const u32,
            adjustments: at(b + 1 + 2 * e) as *const Adjustment,
            out: results as *mut AdjustedToken,
            entries: e as u32,
            n: n as u32,
            d: shape.d as u32,
            v_offset: ranged.range.offset as u32,
            v_end: (ranged.range.offset + shape.v) as u32,
            mask_words: ranged.range.vocab.div_ceil(32) as u32,
            softcap,
            elem: ranged.elem,
        });
        let warps = ADJUST_THREADS / 32;
        let cfg = LaunchConfig {
            grid_dim: ((e as u32).div_ceil(warps), 1, 1),
            block_dim: (ADJUST_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `hidden` holds B·D and `weight` the launch's rows × D elements (validated, 16-byte
        // aligned, guarded by the caller); the pack holds what the pointers above say (`validate`
        // checked the CSR: rows < B, tokens < V, entries consistent); `rows` holds B·n row
        // parameters (uploaded above), the mask B × ceil(V/32) words, the results E·n entries.
        unsafe { self.stream.launch_builder(&self.adjust).arg(&p).launch(cfg) }?;
        Ok((base, results))
    }

    /// The fused launch, and `reduce_rows` after a log-probability launch (or a truncation launch
    /// of a tensor-parallel rank, whose results go to the exchange). A one-GPU truncation launch
    /// leaves its rows' reduction to the truncation step (`TruncateParams::reduce`): returns the
    /// launch's parameters for it.
    fn launch_fused(
        &self,
        shape: Shape,
        params: &SamplingParams,
        (hidden, weight, mask): (u64, u64, u64),
        out: &mut DeviceSamples,
        launch: LaunchShape,
        ranged: Ranged,
        adjusted: Option<(u64, u64)>,
    ) -> Result<FusedParams> {
        let loaded = self.loaded(launch.variant).expect("only loaded variants are chosen");
        let entry = loaded.entry(launch.epilogue);
        let variant = launch.variant;
        let rows = out.b;
        if variant.uses_tma() {
            let elem = ranged.elem;
            let key = TensorMapKey { hidden, weight, elem, b: rows, d: shape.d, v: shape.v, variant: launch.variant };
            if out.tensor_maps_for != Some(key) {
                let (d, v) = (shape.d as u32, shape.v as u32);
                let maps = TensorMaps {
                    weight_tiles: match (variant.family, tma_weight_tiles_t(d, v), tma_weight_tiles(d, v)) {
                        (Family::WgmmaHiddenA, Some(layout), _) => encode_tensor_map(weight, layout, elem)?,
                        (Family::WgmmaHiddenA, None, _) => unreachable!("V % 16 is checked before the launch"),
                        (_, _, Some(layout)) => encode_tensor_map(weight, layout, elem)?,
                        (_, _, None) => TensorMap([0; 16]), // V < 32: no whole tile, never read
                    },
                    weight_rows: encode_tensor_map(weight, tma_weight_rows(d, v), elem)?,
                    hidden: encode_tensor_map(hidden, tma_hidden(d, rows as u32, variant.block_b()), elem)?,
                };
                let words: Vec<u64> =
                    [maps.weight_tiles, maps.weight_rows, maps.hidden].iter().flat_map(|m| m.0).collect();
                // Stream-ordered before the launch below.
                self.stream.memcpy_htod(&words, &mut out.tensor_maps)?;
                out.tensor_maps_for = Some(key);
            }
        }
        let lp = launch.epilogue.has_logprobs();
        let (tops, raw_lse) = match (&mut out.truncation, launch.epilogue) {
            (Some(t), Epilogue::Truncate) => {
                let (tops, _t) = t.tops.device_ptr_mut(&self.stream);
                let (raw, _r) = t.raw_lse.device_ptr_mut(&self.stream);
                (tops, raw) // this backend's buffers, on its stream only
            }
            _ => (0, 0),
        };
        let (maps, _m) = out.tensor_maps.device_ptr(&self.stream);
        let (row_params, _s) = out.rows.device_ptr(&self.stream);
        let (cands, _c) = out.candidates.device_ptr_mut(&self.stream);
        let (counters, _n) = out.counters.device_ptr_mut(&self.stream);
        let (tokens, _t) = out.tokens.device_ptr_mut(&self.stream);
        let (scores, _r) = out.scores.device_ptr_mut(&self.stream);
        let (handoff, handoff_flags, _h) = match (&mut out.handoff, launch.balanced) {
            (Some((h, c)), true) => {
                let (h, gh) = h.device_ptr_mut(&self.stream);
                let (c, gc) = c.device_ptr_mut(&self.stream);
                (h, c, Some((gh, gc)))
            }
            _ => (0, 0, None),
        };
        let mut lp_ptrs = [0u64; 5];
        let mut _lp_guards = Vec::new();
        if lp {
            for (i, buf) in [
                out.masses.as_mut().map(|m| m.device_ptr_mut(&self.stream)),
                out.logprobs.as_mut().map(|m| m.device_ptr_mut(&self.stream)),
                out.raw_logprobs.as_mut().map(|m| m.device_ptr_mut(&self.stream)),
                out.logsumexp.as_mut().map(|m| m.device_ptr_mut(&self.stream)),
            ]
            .into_iter()
            .enumerate()
            {
                let (ptr, guard) = buf.expect("a log-probability launch's buffers fit (checked before)");
                lp_ptrs[i] = ptr;
                _lp_guards.push(guard);
            }
        }
        // A rank's launch writes its results into the exchange buffer, `[6, rows]` words.
        let (tokens, scores) = match ranged.staging {
            Some(base) => {
                let field = |k: u64| base + 4 * k * rows as u64;
                if lp {
                    lp_ptrs[1..].copy_from_slice(&[field(2), field(3), field(4), field(5)]);
                }
                (field(0), field(1))
            }
            None => (tokens, scores),
        };
        // A one-GPU log-probability launch without raw log-probabilities leaves them unwritten (null
        // `raw_logprobs`): its kernels then skip the raw log-mass. (A rank's go to the exchange; the
        // truncation kernels decide by `raw_logsumexp`, below.)
        if launch.epilogue == Epilogue::LogProbs
            && ranged.staging.is_none()
            && params.logprobs != LogProbs::ProcessedAndRaw
        {
            lp_ptrs[2] = 0;
        }
        // A one-GPU truncation launch writes the raw log-sum-exps (through the step's reduction) only
        // when something reads them: raw log-probabilities or raw top log-probabilities. Without
        // them the truncation kernels skip the raw log-mass (`FusedParams::raw_logsumexp` null).
        let wants_raw = params.logprobs != LogProbs::Off || (params.top_logprobs > 0 && params.top_logprobs_raw);
        if raw_lse != 0 && ranged.staging.is_none() && wants_raw {
            lp_ptrs[4] = raw_lse;
        }
        let p = ByValue(FusedParams {
            hidden: hidden as *const u16,
            weight: weight as *const u16,
            rows: row_params as *const RowParams,
            mask: mask as *const u32,
            masses: lp_ptrs[0] as *mut RowMass,
            logprobs: lp_ptrs[1] as *mut f32,
            raw_logprobs: lp_ptrs[2] as *mut f32,
            logsumexp: lp_ptrs[3] as *mut f32,
            raw_logsumexp: lp_ptrs[4] as *mut f32,
            adj_offsets: adjusted.map_or(0, |a| a.0) as *const u32,
            adjusted: adjusted.map_or(0, |a| a.1) as *const AdjustedToken,
            candidates: cands as *mut Candidate,
            counters: counters as *mut u32,
            tokens: tokens as *mut u32,
            scores: scores as *mut f32,
            tops: tops as *mut flashsampling_kernels::truncate::StoredTop,
            b: rows as u32,
            d: shape.d as u32,
            v: shape.v as u32,
            v_offset: ranged.range.offset as u32,
            v_end: (ranged.range.offset + shape.v) as u32,
            samples: out.n as u32,
            n_vranges: launch.n_vranges,
            mask_words: if mask != 0 { ranged.range.vocab.div_ceil(32) as u32 } else { 0 },
            softcap: params.softcap.unwrap_or(0.0),
            tensor_maps: if variant.uses_tma() { maps as *const TensorMaps } else { std::ptr::null() },
            tma_whole_tiles: shape.v as u32 / BLOCK_V,
            top_units: variant.top_units(),
            elem: ranged.elem,
            handoff: handoff as *mut f32,
            handoff_flags: handoff_flags as *mut u32,
        });
        let cfg = LaunchConfig {
            grid_dim: (launch.n_btiles * launch.n_vranges, 1, 1),
            block_dim: (loaded.variant.threads(), 1, 1),
            shared_mem_bytes: loaded.variant.smem_bytes(launch.epilogue),
        };
        // SAFETY: shapes validated above; hidden (B·n rows: the caller's or the expanded copy) and
        // weight hold rows·D and V·D elements of `elem` and are 16-byte aligned; the row parameters, tokens and
        // scores hold `rows` entries, candidates rows·n_vranges, counters ≥ n_btiles zeros (each
        // launch leaves them zero); a mask (non-null) holds B·ceil(V/32) words, every request index
        // < B; a log-probability launch's masses hold rows·n_vranges and its outputs `rows` entries;
        // the grid matches `FusedParams`; a TMA variant's tensor maps (256-byte aligned
        // allocation) describe exactly these buffers and shapes; a stage-balanced launch
        // (one batch tile, every block resident) has its handoff slots (`fits`: 2 · n_vranges ·
        // 128 · N floats) and their zero counters (each launch leaves them zero).
        unsafe { self.stream.launch_builder(&entry.func).arg(&p).launch(cfg) }?;
        let reduced_by_step = launch.epilogue == Epilogue::Truncate && ranged.staging.is_none();
        if lp && !reduced_by_step {
            // The log-probability kernels (and a rank's truncation kernel) leave their rows'
            // reduction to this one.
            let cfg = LaunchConfig {
                grid_dim: (rows as u32, 1, 1),
                block_dim: (REDUCE_BLOCK_THREADS, 1, 1),
                shared_mem_bytes: REDUCE_BLOCK_SMEM,
            };
            // SAFETY: the same parameters as the fused launch just before it on this stream, whose
            // candidates and masses (rows·n_vranges each) it reads; one block per row (`rows` =
            // B·n), with the entry's threads and shared memory; the kernel waits
            // (`griddepcontrol.wait`) for the fused kernel before it reads anything.
            unsafe { self.launch_after(&self.reduce_rows, cfg, &p) }?;
        }
        Ok(p.0)
    }

    /// Launches `func` after the kernel before it on this stream: with programmatic stream
    /// serialization ([`launch_dependent`]) unless `FLASHSAMPLING_PDL=0`, then the ordinary way.
    /// `reduce_rows` after the fused kernel, and the truncation step's kernels each after the one
    /// before.
    ///
    /// # Safety
    /// As for any launch of `func` with `p` and `cfg`; `func` executes `griddepcontrol.wait` before
    /// its first access to memory an earlier kernel writes.
    pub(super) unsafe fn launch_after<T: DeviceRepr>(
        &self,
        func: &CudaFunction,
        cfg: LaunchConfig,
        p: &T,
    ) -> Result<()> {
        if self.dependent_launch {
            // SAFETY: forwarded contract.
            unsafe { launch_dependent(&self.stream, func, cfg, p) }
        } else {
            // SAFETY: forwarded contract.
            unsafe { self.stream.launch_builder(func).arg(p).launch(cfg) }?;
            Ok(())
        }
    }

    /// Runs Philox4x32-10 on the device for each counter (tests: bit-identical to the host). Loads
    /// the test PTX module.
    #[cfg(feature = "internals")]
    pub fn philox_on_device(&self, counters: &[[u32; 4]], key: [u32; 2]) -> Result<Vec<[u32; 4]>> {
        self.noise_test(flashsampling_kernels::config::PHILOX_ENTRY, counters, key)
    }

    /// Gumbel noise (f32 bits) of each counter's four Philox words, on the device (the test module).
    #[cfg(feature = "internals")]
    pub fn gumbel_on_device(&self, counters: &[[u32; 4]], key: [u32; 2]) -> Result<Vec<[u32; 4]>> {
        self.noise_test(flashsampling_kernels::config::GUMBEL_ENTRY, counters, key)
    }

    #[cfg(feature = "internals")]
    fn noise_test(&self, entry: &str, counters: &[[u32; 4]], key: [u32; 2]) -> Result<Vec<[u32; 4]>> {
        let func = self.ctx.load_module(Ptx::from_src(crate::PTX_TEST.text()?))?.load_function(entry)?;
        let func = &func;
        let n = counters.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let flat: Vec<u32> = counters.iter().flatten().copied().collect();
        let ctr = self.stream.clone_htod(&flat)?;
        let mut out = self.stream.alloc_zeros::<u32>(4 * n)?;
        {
            let (c, _c) = ctr.device_ptr(&self.stream);
            let (o, _o) = out.device_ptr_mut(&self.stream);
            let p = ByValue(NoiseTestParams {
                counters: c as *const [u32; 4],
                out: o as *mut [u32; 4],
                key,
                n: n as u32,
                _pad: 0,
            });
            // SAFETY: counters and out hold n entries of 16 bytes.
            unsafe { self.stream.launch_builder(func).arg(&p).launch(LaunchConfig::for_num_elems(n as u32)) }?;
        }
        let host = self.stream.clone_dtoh(&out)?;
        Ok(host.chunks(4).map(|c| [c[0], c[1], c[2], c[3]]).collect())
    }
}
