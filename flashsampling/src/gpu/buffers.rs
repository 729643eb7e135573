//! Device buffers: the caller's operands ([`DeviceMatrix`]), the reusable outputs and scratch of a
//! call ([`DeviceSamples`]) with their TMA descriptors, and the output addresses a launch writes.

use super::*;

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
/// device fault the context is unusable and every later read fails anyway. A call into caller-owned
/// outputs ([`GpuBackend::sample_device_into`]) leaves no results here (the accessors give an empty
/// view and `None`), and on failure fills the caller's outputs instead.
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
///    call on another stream first waits for the previous call on these buffers (a fence recorded
///    at the end of every call on a stream other than the backend's own; also cudarc's per-buffer
///    events while its event tracking is on). Replays of a captured graph are ordered by the
///    caller's stream ([`Self::is_captured`]).
///
/// Hence every launch starts with all counters at zero, by induction over the launches on the
/// buffer. The GPU test `arrival_counters_are_zero_after_many_launches` reads them back after
/// launches of varying B and V.
#[derive(Debug)]
pub struct DeviceSamples {
    pub(super) candidates: CudaSlice<u64>,
    /// Per-batch-tile arrival counters of the fused kernel (zero between launches; see above).
    pub(super) counters: CudaSlice<u32>,
    /// Per-row parameters ([`RowParams`], four words per row).
    pub(super) rows: CudaSlice<u64>,
    pub(super) tokens: CudaSlice<u32>,
    pub(super) scores: CudaSlice<f32>,
    /// Log-probability launches: each (row, vocab range)'s [`RowMass`] (two words), and the outputs.
    pub(super) masses: Option<CudaSlice<u64>>,
    pub(super) logprobs: Option<CudaSlice<f32>>,
    pub(super) raw_logprobs: Option<CudaSlice<f32>>,
    pub(super) logsumexp: Option<CudaSlice<f32>>,
    /// Exact log-sum-exp launches ([`crate::SamplingParams::exact_logsumexp`]): the rows' count for
    /// `fallback_logits` (word 0 of [`EXACT_WORDS_AT`]), then each row's
    /// [`flashsampling_kernels::params::RowExact`] ([`EXACT_RECORD_WORDS`] words).
    pub(super) exact: Option<CudaSlice<u32>>,
    /// A call's allowed-token mask uploaded from the host.
    pub(super) mask: Option<CudaSlice<u32>>,
    /// The hidden states of a call with several samples per row, `[B·n, D]` (16-bit elements of
    /// either type: the expansion copies bits).
    pub(super) expanded: Option<CudaSlice<u16>>,
    /// A call's sparse adjustments (CSR offsets, entry rows, tokens, adjustments as words).
    pub(super) adj: Option<CudaSlice<u32>>,
    /// The adjusted tokens' results (`AdjustedToken`, four words each, `[entries, n]`).
    pub(super) adjusted: Option<CudaSlice<u32>>,
    /// Truncating calls' buffers (top-k, top-p, min-p).
    pub(super) truncation: Option<TruncationBuffers>,
    /// Stage-balanced launches: the handoff slots (`FusedParams::handoff`) and their counters
    /// (zeroed at allocation; every launch leaves them zero, as the arrival counters).
    pub(super) handoff: Option<(CudaSlice<f32>, CudaSlice<u32>)>,
    /// GEMM-fed launches ([`LaunchPlan::gemm_logits_floats`]): the GEMM's f32 logits and its cuBLAS
    /// workspace (`gemm::workspace_bytes`: none to speak of on the exact path).
    pub(super) gemm: Option<(CudaSlice<f32>, CudaSlice<u8>)>,
    /// Whether the last call truncated (its fallback flags are valid).
    pub(super) has_truncation: bool,
    /// Top log-probabilities per request of the last call (0: none asked).
    pub(super) top_n: usize,
    /// Rows of the last call (`B·n`).
    pub(super) b: usize,
    /// Samples per row of the last call.
    pub(super) n: usize,
    /// Whether the last call computed log-probabilities.
    pub(super) has_logprobs: bool,
    /// The last call asked for raw log-probabilities too ([`LogProbs::ProcessedAndRaw`]; a
    /// tensor-parallel merge fills them with every log-probability call).
    pub(super) has_raw_logprobs: bool,
    /// Host copy of the words in `rows` (skips the upload when a call reuses them).
    pub(super) uploaded_rows: Vec<u64>,
    /// The TMA kernels' tensor maps ([`TensorMaps`], 384 bytes: three 128-byte maps) in device memory.
    pub(super) tensor_maps: CudaSlice<u64>,
    /// What the maps in `tensor_maps` describe; they are re-encoded and uploaded when a launch
    /// differs (another buffer, shape or batch tile).
    pub(super) tensor_maps_for: Option<TensorMapKey>,
    /// The stream of the last call on these buffers (its `CUstream`, compared only), `None` before
    /// the first.
    pub(super) last_stream: Option<usize>,
    /// Recorded at the end of every call on a stream other than the home stream: what a call on
    /// another stream, and the frees on the home stream at drop, wait for.
    pub(super) fence: Option<CudaEvent>,
    /// Whether a call on these buffers was recorded into a CUDA graph ([`Self::is_captured`]).
    pub(super) captured: bool,
    /// During a call into caller-owned outputs ([`GpuBackend::sample_device_into`]): where its
    /// results go.
    pub(super) dst: Option<Destinations>,
    /// During a scoring call ([`GpuBackend::score_device`]): its given tokens and score outputs.
    pub(super) targets: Option<ScoreTargets>,
    /// The last call wrote its results into caller-owned outputs: these buffers' own outputs hold
    /// none (the accessors give empty views and `None`).
    pub(super) results_elsewhere: bool,
}

impl Drop for DeviceSamples {
    fn drop(&mut self) {
        // The buffers are freed on the home stream (they were allocated there); after the last call
        // when it ran on another stream. (A failure here is the context's sticky error: nothing
        // later on it runs.)
        let home = self.tokens.stream();
        if self.captured {
            // A graph may still replay on any stream: after all work on the context.
            let _ = home.context().synchronize();
        }
        if let (Some(last), Some(fence)) = (self.last_stream, &self.fence)
            && last != home.cu_stream() as usize
        {
            let _ = home.wait(fence);
        }
    }
}

/// What a launch's tensor maps depend on: the two device addresses and their element type, B, D, V
/// and the variant (its `BLOCK_B` and weight layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TensorMapKey {
    pub(super) hidden: u64,
    pub(super) weight: u64,
    pub(super) elem: ElementType,
    pub(super) b: usize,
    pub(super) d: usize,
    pub(super) v: usize,
    pub(super) variant: FusedVariant,
}

impl TensorMapKey {
    /// The key of `launch` over `hidden` (its rows as the fused kernel reads them: the expanded
    /// ones with several samples per row) and `weight`, of element type `elem`, with `shape`'s D and
    /// V (its B is the launch's rows).
    pub(super) fn of(launch: LaunchPlan, (hidden, weight, elem): (u64, u64, ElementType), shape: Shape) -> Self {
        Self { hidden, weight, elem, b: launch.rows as usize, d: shape.d, v: shape.v, variant: launch.variant }
    }
}

/// Encodes a tensor map of element type `elem` and geometry `layout` over device memory at
/// `address` (128-byte swizzle, zeros outside the tensor).
pub(super) fn encode_tensor_map<const R: usize>(
    address: u64,
    layout: TmaLayout<R>,
    elem: ElementType,
) -> Result<TensorMap> {
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
        self.tokens.slice(..self.own_rows())
    }

    /// Winning perturbed scores of the last call, on the device (`[B, n]`).
    pub fn scores(&self) -> CudaView<'_, f32> {
        self.scores.slice(..self.own_rows())
    }

    /// Log-probabilities of the last call's tokens under the processed distribution (`[B, n]`), when
    /// it asked for them ([`SamplingParams::logprobs`]); see [`crate::Samples::logprobs`].
    pub fn logprobs(&self) -> Option<CudaView<'_, f32>> {
        self.logprobs.as_ref().filter(|_| self.has_logprobs && !self.results_elsewhere).map(|l| l.slice(..self.b))
    }

    /// Log-probabilities of the last call's tokens under `softmax(logits)` (`[B, n]`), when it asked
    /// for [`LogProbs::ProcessedAndRaw`] (a call asking [`LogProbs::Processed`] on one GPU neither
    /// computes nor writes them: its kernels skip the raw log-mass).
    pub fn raw_logprobs(&self) -> Option<CudaView<'_, f32>> {
        self.raw_logprobs
            .as_ref()
            .filter(|_| self.has_raw_logprobs && !self.results_elsewhere)
            .map(|l| l.slice(..self.b))
    }

    /// Each sample row's log-sum-exp of `logits / T` (`[B, n]`: the same for the `n` samples of a
    /// row; NaN for a greedy row), when the last call asked for log-probabilities.
    pub fn logsumexp(&self) -> Option<CudaView<'_, f32>> {
        self.logsumexp.as_ref().filter(|_| self.has_logprobs && !self.results_elsewhere).map(|l| l.slice(..self.b))
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
            .filter(|_| self.top_n > 0 && !self.results_elsewhere)
            .map(|t| (t.top_tokens.slice(..requests * self.top_n), t.top_logprobs.slice(..requests * self.top_n)))
    }

    /// The rows the own outputs hold results for: the last call's, none when it wrote into
    /// caller-owned outputs.
    fn own_rows(&self) -> usize {
        if self.results_elsewhere { 0 } else { self.b }
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

    /// Whether the buffers serve the planned launch `launch` (its rows, candidates, masses, counters and
    /// handoff slots) on the context `ctx`.
    pub(super) fn fits(&self, launch: &LaunchPlan, ctx: &CudaContext) -> bool {
        let b = launch.rows as usize;
        let exact = launch.lse == LsePath::Exact;
        let exact_fits =
            !exact || self.exact.as_ref().is_some_and(|e| e.len() >= EXACT_WORDS_AT + EXACT_RECORD_WORDS * b);
        let n_cands = launch.candidates();
        let masses_fit = match launch.epilogue {
            Epilogue::Sample => true,
            Epilogue::LogProbs | Epilogue::Truncate => {
                launch.mass_words().is_some_and(|n| self.masses.as_ref().is_some_and(|m| m.len() >= n))
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
        let gemm_fits = match launch.gemm_logits_floats() {
            0 => true,
            n => {
                self.gemm.as_ref().is_some_and(|(l, w)| l.len() >= n && w.len() >= super::gemm::workspace_bytes(exact))
            }
        };
        same_context(self.tokens.context(), ctx)
            && masses_fit
            && exact_fits
            && handoff_fits
            && gemm_fits
            && n_cands.is_some_and(|n| self.candidates.len() >= n)
            && self.counters.len() >= launch.n_btiles as usize
            && self.rows.len() >= 4 * b
            && self.tokens.len() >= b
            && self.scores.len() >= b
            && self.tensor_maps.len() * 8 >= size_of::<TensorMaps>()
    }

    /// Marks the last call's results as written elsewhere (a scoring call's: the accessors give
    /// none).
    pub(crate) fn set_results_elsewhere(&mut self) {
        self.results_elsewhere = true;
    }

    /// Records a call of `rows` sample rows (`n` per request) that wrote these outputs by other
    /// means than the fused launch (a rank's merge).
    pub(crate) fn set_call(&mut self, rows: usize, n: usize, logprobs: bool) {
        self.results_elsewhere = false;
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
        let or = |pick: fn(&Destinations) -> u64, own| Destinations::or(self.dst, pick, own);
        OutputPtrs {
            tokens: or(|d| d.tokens, tokens),
            scores: or(|d| d.scores, scores),
            logprobs: or(|d| d.logprobs, lp[0]),
            raw_logprobs: or(|d| d.raw_logprobs, lp[1]),
            logsumexp: or(|d| d.logsumexp, lp[2]),
            _guards: guards,
        }
    }

    /// Orders `stream` after the last call on these buffers when that ran on another stream: after
    /// the home stream's work (allocations, a call there) or after the fence of a call elsewhere. The
    /// buffers' own events (cudarc's) order each launch's reads and writes too, but the truncation
    /// scratch's addresses are taken before its launches, so the call as a whole is what orders them.
    ///
    /// After a call on a stream other than the home stream, the fence is always waited for, even
    /// when `stream` looks like that same stream (a destroyed stream's handle may be reused by a new
    /// one; waiting on work already ordered before is free).
    pub(super) fn enter(&mut self, stream: &CudaStream, home: &CudaStream) -> Result<()> {
        let (here, home_id) = (stream.cu_stream() as usize, home.cu_stream() as usize);
        match (self.last_stream, &self.fence) {
            (Some(last), _) if last == home_id && here != home_id => stream.join(home)?,
            (Some(last), Some(fence)) if last != home_id => stream.wait(fence)?,
            _ => {}
        }
        Ok(())
    }

    /// Marks the end of a call on `stream`: records the fence there unless it is the home stream.
    pub(super) fn leave(&mut self, stream: &CudaStream, home: &CudaStream) -> Result<()> {
        if stream.cu_stream() != home.cu_stream() {
            if self.fence.is_none() {
                self.fence = Some(stream.context().new_event(None)?);
            }
            self.fence.as_ref().expect("made above").record(stream)?;
        }
        self.last_stream = Some(stream.cu_stream() as usize);
        Ok(())
    }

    /// Marks the end of a call recorded into a graph on `stream`: the buffers are the graph's
    /// ([`Self::is_captured`]). No fence is recorded: an event recorded during a capture could not be
    /// waited for outside it, and nothing outside the graph uses these buffers any more.
    pub(super) fn captured_on(&mut self, stream: &CudaStream) {
        self.captured = true;
        self.last_stream = Some(stream.cu_stream() as usize);
        // The fence of an eager call before the capture says nothing of the graph's replays: a
        // capture on another stream must not take it for the buffers' last use.
        self.fence = None;
    }

    /// Fills the tokens with `INVALID_INDEX` and the scores with NaN (all bits set: `u32::MAX`, and a
    /// quiet NaN), stream-ordered.
    pub(super) fn invalidate(&mut self, stream: &CudaStream) -> Result<()> {
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

/// Device addresses of a call's outputs (and cudarc's guards, to drop after the launch that writes
/// them); 0 for the log-probability outputs when not asked for.
pub(crate) struct OutputPtrs<'a> {
    pub tokens: u64,
    pub scores: u64,
    pub logprobs: u64,
    pub raw_logprobs: u64,
    pub logsumexp: u64,
    pub(super) _guards: Vec<SyncOnDrop<'a>>,
}

impl OutputPtrs<'_> {
    /// Tokens, scores, processed log-probabilities, processed log-sum-exps.
    pub(crate) fn addresses(&self) -> [u64; 4] {
        [self.tokens, self.scores, self.logprobs, self.logsumexp]
    }
}
