//! The CUDA backend: module loaded once, kernels looked up once, launches on one stream.

use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView, DevicePtr, DevicePtrMut,
    DeviceRepr, DeviceSlice, LaunchConfig, PushKernelArg, SyncOnDrop,
};
use cudarc::nvrtc::Ptx;
use flashsampling_kernels::config::{
    ADJUST_ENTRY, ADJUST_THREADS, BLOCK_V, D_ALIGN, EXACT_MASS_ENTRY, EXACT_MASS_SMEM, EXACT_MASS_THREADS,
    EXPAND_ENTRY, EXPAND_THREADS, Epilogue, FALLBACK_GATHER_ENTRY, FALLBACK_LOGITS_ENTRY, FALLBACK_LOGITS_VARIANT,
    FALLBACK_SAMPLE_ENTRY, FALLBACK_SAMPLE_EXACT_ENTRY, FALLBACK_SAMPLE_SCORED_ENTRY, FUSED_VARIANTS, Family,
    FusedVariant, GEMM_LOGITS, KernelSet, MAX_DIM, Module, REDUCE_BLOCK_ENTRY, REDUCE_BLOCK_SMEM, REDUCE_BLOCK_THREADS,
    REDUCE_EXACT_ENTRY, TMA_T_VOCAB_ALIGN, TRUNCATE_SCORED_ENTRY, TmaLayout, TruncateStep, gemm_logits_ld,
    gemm_logits_max_rows, portable_module_has, sm_number, tma_hidden, tma_weight_rows, tma_weight_tiles,
    tma_weight_tiles_t, variant_for_call,
};
use flashsampling_kernels::launch::{LaunchPlan, LsePath};
use flashsampling_kernels::logits::Adjustment;
use flashsampling_kernels::params::{
    AdjustParams, AdjustedToken, ExpandParams, FallbackLogitsParams, FusedParams, GemmLogitsParams, LogitsParams,
    MergeRanksParams, NoiseTestParams, ReduceParams, RowExact, RowMass, RowParams, TensorMap, TensorMaps,
};
use flashsampling_kernels::{Candidate, Transform};
use half::bf16;

use crate::error::{Error, Result};
use crate::modules::{Artifact, CUBIN, CUBIN_SM90A, PTX, PTX_SM, PTX_SM90A};
use crate::params::{Element, ElementType, LogProbs, Matrix, SamplingParams, Shape, validate, validate_in_vocab};
use crate::{Samples, check_samples_of};

mod buffers;
mod capture;
mod gemm;
mod launch;
mod module;
mod options;
mod outputs;
mod score;
#[cfg(feature = "internals")]
mod test_hooks;
mod truncate;
mod validate;

use buffers::*;
pub use buffers::{DeviceMatrix, DeviceSamples};
use capture::Setup;
use gemm::Gemm;
pub use launch::row_params_words;
use launch::*;
pub use module::ModuleCode;
use module::*;
pub use options::GpuOptions;
use outputs::Destinations;
pub use outputs::DeviceOutputs;
pub use score::{ScoreOutputs, ScoreTop};
pub(crate) use score::{ScoreTargets, score_launch_rows, scoring_params};
use truncate::TruncationBuffers;
pub(crate) use truncate::rank_list_words;

pub(crate) use validate::check_rank_truncation;
use validate::*;

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
// SAFETY: as above (a `FusedParams`, a device address and two integers).
unsafe impl DeviceRepr for ByValue<GemmLogitsParams> {}

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

/// A launch's vocab range, for a rank its exchange buffer's device address, and the element type of
/// its hidden states and weight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ranged {
    range: VocabRange,
    staging: Option<u64>,
    elem: ElementType,
}

/// The hidden size the buffers of [`GpuBackend::alloc_samples`] are sized for (not known there):
/// the kernel choice's largest-D arm, whose launches have the most vocab ranges of any D
/// (`config::tests::the_launch_for_an_unknown_hidden_size_needs_the_largest_buffers`).
const ANY_D: usize = u32::MAX as usize;

/// Words before the rows' exact log-masses in [`DeviceSamples::exact`]: the rows' count, padded so
/// the `RowExact`s (8-byte fields) start 16-byte aligned.
const EXACT_WORDS_AT: usize = 4;

/// Words of a [`RowExact`] record.
pub(crate) const EXACT_RECORD_WORDS: usize = size_of::<RowExact>() / 4;

/// Words per row and rank in a tensor-parallel exchange with log-probabilities: tokens, scores, the
/// processed and raw log-probabilities and log-sum-exps (`[6, rows]`, field-major).
pub(crate) const RANK_WORDS_LOGPROBS: usize = 6;

/// Words per row and rank in a scoring call's exchange: [`RANK_WORDS_LOGPROBS`]' words, then the given
/// token's processed and raw log-probabilities over the shard (fields 6 and 7).
pub(crate) const RANK_WORDS_SCORE: usize = RANK_WORDS_LOGPROBS + 2;

/// Where a tensor-parallel rank's exact-path records start in its exchange block, in words: after
/// its `[k, rows]` result words, rounded up to 16 bytes.
pub(crate) fn exact_records_at(rows: usize, k: usize) -> usize {
    (k * rows).div_ceil(4) * 4
}

/// The CUDA backend: one device's loaded kernels (shared by every clone, see
/// [`GpuBackend::on_stream`]), the stream its launches go to and its tuning ([`GpuOptions`]).
///
/// A clone is cheap (two reference counts) and launches on the same stream; [`GpuBackend::on_stream`]
/// gives a handle that launches on the caller's stream instead (cudarc's `Arc<CudaStream>`, e.g. an
/// engine's or PyTorch's current stream), so a call is ordered after the caller's producer kernels
/// with no event or host synchronization.
#[derive(Clone)]
pub struct GpuBackend {
    /// The context, the modules and every kernel, loaded once per [`GpuBackend::with_options`].
    k: Arc<Kernels>,
    /// Tuning override of the persistent grid's blocks per multiprocessor
    /// ([`GpuOptions::blocks_per_sm`]); samples do not depend on it.
    blocks_per_sm_override: Option<u32>,
    /// `reduce_rows` and the truncation step's kernels are launched with programmatic stream
    /// serialization (off with [`GpuOptions::dependent_launch`] false, to measure it).
    dependent_launch: bool,
    /// Where every launch, allocation and copy of this handle goes.
    stream: Arc<CudaStream>,
    /// Measurement override of the truncation step's entry ([`GpuOptions::truncate_step`] or
    /// `paired`; [`TruncateStep::for_rows`] otherwise); samples do not depend on it.
    truncate_step_override: Option<TruncateStep>,
    /// Variant forced for every batch size and every epilogue it has ([`GpuOptions::fused_variant`]
    /// or [`GpuBackend::set_fused_variant`]); samples do not depend on it.
    variant_override: Option<&'static FusedVariant>,
    /// Stage-balanced vocab ranges forced on or off ([`GpuOptions::stage_balance`], or
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

/// [`device_address`] of an optional buffer: address 0 and no guard without one.
fn optional_address<'a, T>(view: Option<&'a CudaView<'_, T>>, stream: &'a CudaStream) -> (u64, Option<SyncOnDrop<'a>>) {
    match view.map(|v| device_address(v, stream)) {
        Some((ptr, guard)) => (ptr, Some(guard)),
        None => (0, None),
    }
}

/// Top log-probabilities as the kernels write them (`[rows, k]` tokens and log-probabilities) per
/// row, each list up to its last entry (`INVALID_INDEX` ends it).
fn top_lists(tokens: &[u32], logprobs: &[f32], k: usize) -> crate::TopLogprobs {
    let per = k.max(1);
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
        .collect()
}

/// The compute capability the embedded portable PTX was built for (`FLASHSAMPLING_SM`; 0 if its
/// name does not parse, which the build refuses).
fn portable_sm() -> u32 {
    sm_number(PTX_SM).unwrap_or(0)
}

impl GpuBackend {
    /// Opens device `ordinal`, loads the embedded kernels and looks up every one, with the default
    /// [`GpuOptions`] (the library reads no environment variable).
    pub fn new(ordinal: usize) -> Result<Self> {
        Self::with_options(ordinal, GpuOptions::default())
    }

    /// [`GpuBackend::new`] with the tuning `options` (benches and tests build them with
    /// [`GpuOptions::from_env`]). A forced variant this GPU does not run is an error.
    pub fn with_options(ordinal: usize, options: GpuOptions) -> Result<Self> {
        options.check()?;
        if !gpu_available() {
            return Err(Error::NoGpu("no CUDA driver library or no device".into()));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::NoGpu(e.to_string()))?;
        let k = Arc::new(Kernels::load(ctx, options.jit, options.portable_only)?);
        let mut gpu = Self {
            stream: k.home.clone(),
            k,
            variant_override: None,
            stage_balance_override: options.stage_balance,
            dependent_launch: options.dependent_launch,
            truncate_step_override: options.truncate_step,
            blocks_per_sm_override: options.blocks_per_sm,
        };
        if options.fused_variant.is_some() {
            gpu.set_fused_variant(options.fused_variant)?;
        }
        Ok(gpu)
    }

    /// What the portable module and the Hopper module (`None`: not loaded, outside compute capability
    /// 9.0 or with [`GpuOptions::portable_only`]) run: their cubins on compute capability 9.0 (loaded in
    /// milliseconds), else their PTX through the driver's JIT (see [`crate::modules`]).
    pub fn module_code(&self) -> (ModuleCode, Option<ModuleCode>) {
        self.k.module_code
    }

    /// Every fused-kernel variant this GPU runs with its resident blocks per multiprocessor (the
    /// persistent grid's size is that times the multiprocessor count).
    pub fn fused_occupancy(&self) -> Vec<(FusedVariant, u32)> {
        self.k.fused.iter().flatten().map(|f| (*f.variant, f.sample.per_sm)).collect()
    }

    /// The fused-kernel variants this GPU runs, in [`FUSED_VARIANTS`] order.
    pub fn fused_variants(&self) -> Vec<FusedVariant> {
        self.k.fused.iter().flatten().map(|f| *f.variant).collect()
    }

    /// The loaded kernel of `variant`, if this GPU runs it.
    fn loaded(&self, variant: FusedVariant) -> Option<&LoadedVariant> {
        let i = FUSED_VARIANTS.iter().position(|f| *f == variant)?;
        self.k.fused[i].as_ref()
    }

    /// [`Self::loaded`], or for the GEMM-fed variant the exact path's copy, loaded without cuBLAS
    /// too (the variant a launch plan names: [`Self::launch_plan`] chooses the GEMM-fed kernels
    /// without cuBLAS only on the exact path).
    fn launchable(&self, variant: FusedVariant) -> Option<&LoadedVariant> {
        self.loaded(variant).or_else(|| (variant == GEMM_LOGITS).then_some(&self.k.exact.0))
    }

    fn unknown_variant(&self, name: &str) -> Error {
        let known: Vec<&str> = self.fused_variants().iter().map(|v| v.entry).collect();
        Error::UnknownVariant(name.into(), known.join(", "))
    }

    /// Forces `variant` for every batch size, or restores the choice by batch size (`None`). For
    /// tuning and tests: every variant samples the same distribution from the same noise (the
    /// variants of one family and MMA shape bit-identically). A call whose epilogue the variant
    /// has no kernel for (truncation on `tma_mma_n64t`, `tma_mma_n128`) keeps the choice by batch
    /// size. [`GpuOptions::fused_variant`] sets it at construction; an error when this GPU does not
    /// run the variant. The GEMM-fed variant forced runs every call through cuBLAS's logits, whose
    /// buffers then take `rows × V × 4` bytes whatever the rows (the choice keeps them within
    /// `GEMM_LOGITS_MAX_BYTES`).
    pub fn set_fused_variant(&mut self, variant: Option<FusedVariant>) -> Result<()> {
        self.variant_override = match variant {
            // The loaded variant's entry of the table (this GPU runs it).
            Some(v) => Some(self.loaded(v).ok_or_else(|| self.unknown_variant(v.entry))?.variant),
            None => None,
        };
        Ok(())
    }

    /// Forces the vocab ranges of the weight-as-A kernels balanced to the pipeline stage (`Some(true)`,
    /// where the launch allows it: a plain or log-probability launch, one batch tile, at least two
    /// tiles per range, [`FusedVariant::can_balance_stages`]) or to whole tiles
    /// (`Some(false)`); `None`, the default, balances where whole tiles leave the largest range more
    /// than 1/64 above the mean ([`FusedVariant::balances_stages`]). Samples, scores and
    /// log-probabilities do not depend on it: a cut tile's logits are the same MMAs in the same
    /// order. [`GpuOptions::stage_balance`] sets it at
    /// construction.
    pub fn set_stage_balance(&mut self, on: Option<bool>) {
        self.stage_balance_override = on;
    }

    /// Whether a call with `b` sample rows, hidden size `d`, vocab size `v` and `epilogue` runs
    /// stage-balanced vocab ranges (tests, benchmarks).
    #[doc(hidden)]
    pub fn balances_stages_for(&self, b: usize, d: usize, v: usize, epilogue: Epilogue) -> bool {
        self.launch_plan(b, d, v, v, (epilogue, LsePath::Masses)).balanced
    }

    /// Forces the truncation step's entry ([`TruncateStep`]; `None`: [`TruncateStep::for_rows`]
    /// per launch, the default). Both build the same body: samples, log-probabilities and fallback
    /// rows do not depend on it (tests, benchmarks). [`GpuOptions::truncate_step`] sets it at
    /// construction.
    pub fn set_truncate_step(&mut self, step: Option<TruncateStep>) {
        self.truncate_step_override = step;
    }

    /// The fused-kernel variant a call with `b` rows, hidden size `d`, vocab size `v` and
    /// `epilogue` launches (`Epilogue::Sample` without log-probabilities and truncation; `LogProbs`
    /// with log-probabilities; `Truncate` with top-k / top-p / min-p). A forced variant
    /// ([`Self::set_fused_variant`]) without a kernel for `epilogue` (the portable `tma_mma_n64t` and
    /// `tma_mma_n128` have no truncation kernel) leaves that epilogue to the choice by batch size.
    pub fn fused_variant_for(&self, b: usize, d: usize, v: usize, epilogue: Epilogue) -> FusedVariant {
        self.variant_for(b, d, v, epilogue, true)
    }

    /// [`Self::fused_variant_for`], with the GEMM-fed kernels allowed (`gemm`) or not (a vocab
    /// shard: neither chosen nor forced there, see [`Self::launch_plan`]).
    fn variant_for(&self, b: usize, d: usize, v: usize, epilogue: Epilogue, gemm: bool) -> FusedVariant {
        let shape = (b as u32, d.min(u32::MAX as usize) as u32, v as u32);
        let forced =
            self.variant_override.copied().filter(|f| f.has_epilogue(epilogue) && (gemm || !f.reads_gemm_logits()));
        let gemm = gemm && self.k.gemm.is_some();
        forced.unwrap_or(variant_for_call(shape, epilogue, self.kernel_set(), self.k.sm_count, gemm))
    }

    /// The fused kernels this GPU chooses from: the sm_90a ones where that module is loaded
    /// ([`Self::hopper_kernels`]), else the portable TMA family, or the block-staging kernels of a
    /// portable module built below sm_90.
    pub fn kernel_set(&self) -> KernelSet {
        KernelSet::of(self.hopper_kernels(), portable_sm())
    }

    /// Whether the Hopper (sm_90a) module is loaded: compute capability 9.0 and
    /// [`GpuOptions::portable_only`] off. Otherwise only the portable kernels run.
    pub fn hopper_kernels(&self) -> bool {
        self.k.module_code.1.is_some()
    }

    /// Multiprocessors of the device.
    pub fn sm_count(&self) -> u32 {
        self.k.sm_count
    }

    /// The device's name.
    pub fn device_name(&self) -> String {
        self.k.ctx.name().unwrap_or_else(|_| "unknown CUDA device".into())
    }

    /// The portable module this backend loaded (cubin or PTX, as [`GpuBackend::module_code`] says).
    pub(crate) fn portable_module(&self) -> &Arc<CudaModule> {
        &self.k.portable
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.k.ctx
    }

    /// The stream this handle's launches, uploads and downloads go to: the backend's own stream,
    /// or the caller's given to [`Self::on_stream`].
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// This backend launching on the caller's `stream` (a stream of the same context, e.g. an
    /// engine's, or PyTorch's current stream wrapped with cudarc's `CudaContext::wrap_borrowed_stream`):
    /// every call of the returned handle is enqueued there, after the caller's earlier work on it and
    /// before its later work, with no event or host synchronization in between. The handle shares
    /// the loaded kernels (a clone: two reference counts) and keeps this handle's tuning.
    ///
    /// The buffers the backend allocates ([`DeviceSamples`]) live on the backend's own stream
    /// whichever handle allocates them: the caller's stream waits for an allocation before its
    /// first use, and a `DeviceSamples` used on one stream and then on another (or dropped) orders
    /// the later work after the earlier call, so one set of buffers may serve calls on any streams.
    /// A stream of another context is [`Error::ForeignStream`].
    ///
    /// ```no_run
    /// use flashsampling::{DeviceMatrix, GpuBackend, SamplingParams};
    /// # let (b, d, v) = (4, 4096, 151_936);
    /// # let (hidden, weight) = (vec![half::bf16::ZERO; b * d], vec![half::bf16::ZERO; v * d]);
    /// let gpu = GpuBackend::new(0)?;
    /// let engine_stream = gpu.context().new_stream()?; // the stream the engine's forward pass runs on
    /// let on_engine = gpu.on_stream(engine_stream.clone())?;
    /// let w = engine_stream.clone_htod(&weight)?;
    /// let h = engine_stream.clone_htod(&hidden)?; // written by the engine on its stream
    /// let mut out = on_engine.alloc_samples(b, v)?;
    /// on_engine.sample_device(
    ///     &DeviceMatrix { data: h.as_view(), rows: b, cols: d },
    ///     &DeviceMatrix { data: w.as_view(), rows: v, cols: d },
    ///     &SamplingParams::new(1.0, 7),
    ///     &mut out,
    /// )?; // enqueued on engine_stream, after the upload of `h`
    /// let tokens = engine_stream.clone_dtoh(&out.tokens())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_stream(&self, stream: Arc<CudaStream>) -> Result<Self> {
        if !same_context(stream.context(), &self.k.ctx) {
            return Err(Error::ForeignStream);
        }
        Ok(Self { stream, ..self.clone() })
    }

    /// Runs `alloc` on the home stream (see [`Kernels::home`]), ordered after everything enqueued
    /// so far on this handle's stream — the buffer it replaces is freed on the home stream, after
    /// the kernels that used it — and orders this handle's stream after it (the allocation and its
    /// initialization); nothing extra when they are one stream. Refused while this handle's stream
    /// captures ([`Error::Capture`]): allocations are made before a capture.
    pub(super) fn on_home<R>(&self, alloc: impl FnOnce(&Arc<CudaStream>) -> Result<R>) -> Result<R> {
        if self.capturing()? {
            return Err(Error::Capture { reason: capture::ALLOCATION });
        }
        let other = self.stream.cu_stream() != self.k.home.cu_stream();
        if other {
            self.k.home.join(&self.stream)?;
        }
        let r = alloc(&self.k.home)?;
        if other {
            self.stream.join(&self.k.home)?;
        }
        Ok(r)
    }

    /// Orders this handle's stream after the last call on `out` when that ran on another stream
    /// ([`DeviceSamples::enter`]): the first step of every call that uses `out`, except the fused
    /// calls (which may be captured: [`Self::sample_device_rows`]). A capturing stream, or buffers a
    /// captured graph uses, are [`Error::Capture`].
    pub(crate) fn enter(&self, out: &mut DeviceSamples) -> Result<()> {
        if self.capturing()? {
            return Err(Error::Capture { reason: capture::NOT_CAPTURABLE });
        }
        self.enter_uncaptured(out)
    }

    /// [`Self::enter`] for a call known not to be in a capture.
    fn enter_uncaptured(&self, out: &mut DeviceSamples) -> Result<()> {
        out.check_not_captured()?;
        // A call that panicked between setting and clearing its caller-owned outputs left them here.
        out.dst = None;
        out.enter(&self.stream, &self.k.home)
    }

    /// Marks the end of a call that used `out` on this handle's stream (its fence; see
    /// [`DeviceSamples::enter`]).
    pub(crate) fn leave(&self, out: &mut DeviceSamples) -> Result<()> {
        out.leave(&self.stream, &self.k.home)
    }

    /// The launch of the fused kernel for `v` weight rows of a `vocab`-entry head (`v = vocab` for a
    /// whole head) and epilogue `epilogue`: the variant is the one the
    /// whole head would get (so a vocab shard sums its logits like the one-GPU call and its samples
    /// are bit-identical), unless it cannot run `v` rows (hidden-as-A kernels need `v % 16 == 0`).
    /// A shard (`v < vocab`) never runs the GEMM-fed kernels: cuBLAS may pick another algorithm (and
    /// sum order) for a shard's rows than for the whole head's, and a rank's logits would be
    /// allocated per call; it runs the fused kernel of
    /// [`variant_for_batch`](flashsampling_kernels::config::variant_for_batch) instead, whose logits a
    /// forced one-GPU call ([`Self::set_fused_variant`]) reproduces bit for bit.
    ///
    /// On the exact log-sum-exp path without truncation ([`LsePath::Exact`]:
    /// [`SamplingParams::exact_logsumexp`]) every launch, a shard's too, runs the GEMM-fed kernels
    /// over `fallback_logits`' logits, which are the same bits for a row and vocab row however the
    /// vocabulary is split. (With truncation, [`LsePath::ExactRows`], no fused kernel runs: the plan
    /// is a truncating call's, for its buffers.)
    fn launch_plan(
        &self,
        b: usize,
        d: usize,
        v: usize,
        vocab: usize,
        (epilogue, lse): (Epilogue, LsePath),
    ) -> LaunchPlan {
        let whole_head = v == vocab;
        let variant = if lse == LsePath::Exact {
            GEMM_LOGITS
        } else {
            let whole = self.variant_for(b, d, vocab, epilogue, whole_head);
            if whole.supports_vocab(v as u32) { whole } else { self.variant_for(b, d, v, epilogue, whole_head) }
        };
        let loaded = self.launchable(variant).expect("only loaded variants are chosen");
        let per_sm = self.blocks_per_sm_override.unwrap_or(loaded.entry(epilogue).per_sm);
        LaunchPlan::new(variant, epilogue, (b as u32, v as u32), (self.k.sm_count, per_sm), self.stage_balance_override)
            .with_lse(lse)
    }

    /// Allocates the per-batch buffers for up to `b` rows and vocab size `v`: `B × n_vranges`
    /// candidates (n_vranges ≤ resident blocks per SM × multiprocessors, from the kernel's
    /// occupancy), `B` arrival counters (zeroed; the kernel uses `n_btiles ≤ B`), stream ids, tokens
    /// (filled with `INVALID_INDEX`) and scores (NaN). `b` and `v` must be in `1 ..= MAX_DIM`
    /// ([`Error::EmptyBatch`], [`Error::EmptyVocab`], [`Error::TooLarge`]); a device out of memory is
    /// [`Error::Driver`] with [`Error::is_out_of_memory`].
    ///
    /// The kernel also depends on the hidden size (beyond 64 rows with the sm_90a module, up to 64
    /// rows with the portable one), which this does not know: the candidates are sized for the
    /// launch with the most vocab ranges of any hidden size, and the stage-balanced handoff slots
    /// for the larger of the launches at the smallest and the largest hidden size, so a call of up
    /// to `b` rows and vocab `v` never allocates again.
    ///
    /// Where the portable kernels run with cuBLAS, from [`GEMM_LOGITS_MIN_ROWS`] rows the buffers
    /// also hold the GEMM-fed launch's f32 logits (`b × v × 4` bytes, `v` rounded up to a multiple
    /// of 4: 155 MB at 256 rows of a 151 936-token head; at most [`GEMM_LOGITS_MAX_BYTES`], beyond
    /// which the fused kernels run, unless the GEMM-fed variant is forced: then `b` rows' worth) and
    /// a 32 MiB cuBLAS workspace.
    ///
    /// [`GEMM_LOGITS_MIN_ROWS`]: flashsampling_kernels::config::GEMM_LOGITS_MIN_ROWS
    /// [`GEMM_LOGITS_MAX_BYTES`]: flashsampling_kernels::config::GEMM_LOGITS_MAX_BYTES
    pub fn alloc_samples(&self, b: usize, v: usize) -> Result<DeviceSamples> {
        self.alloc_for(b, v, Epilogue::Sample)
    }

    /// [`Self::alloc_samples`] for `b` sample rows (`B·n`) and kernels with epilogue `epilogue` (the
    /// log-probability buffers with [`Epilogue::LogProbs`]).
    fn alloc_for(&self, b: usize, v: usize, epilogue: Epilogue) -> Result<DeviceSamples> {
        self.alloc_for_in(b, ANY_D, v, v, (epilogue, LsePath::Masses))
    }

    /// [`Self::alloc_for`] for hidden size `d` ([`ANY_D`]: not known) and `v` weight rows of a
    /// `vocab`-entry head (the launch [`Self::launch_plan`] makes).
    fn alloc_for_in(
        &self,
        b: usize,
        d: usize,
        v: usize,
        vocab: usize,
        (epilogue, lse): (Epilogue, LsePath),
    ) -> Result<DeviceSamples> {
        // The exact path's records (with truncation, its buffers are a truncating call's).
        let exact = lse == LsePath::Exact;
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
        let launch = self.launch_plan(b, d, v, vocab.max(v), (epilogue, lse));
        // The GEMM-fed logits of the launch at `b` rows, and also of the largest call of up to `b` rows
        // that the choice runs there (a call of more rows than `GEMM_LOGITS_MAX_BYTES` allows keeps
        // the fused kernels, fewer rows do not), so a smaller call never allocates again. The launch
        // at `b` itself counts where the GEMM-fed variant is forced (`set_fused_variant`): then every
        // call runs it, beyond the cap too.
        let gemm_floats = match (gemm_logits_max_rows(v as u32) as usize).min(b) {
            0 => launch.gemm_logits_floats(),
            cap => launch
                .gemm_logits_floats()
                .max(self.launch_plan(cap, d, v, vocab.max(v), (epilogue, lse)).gemm_logits_floats()),
        };
        // Without D, the handoff slots also of the launch at the smallest D: the portable choice up
        // to 64 rows depends on D (`TMA_MMA_TURNS_MAX_D`), and its two variants' slots differ (8·NB
        // floats a thread); their vocab ranges do not.
        let handoff = match d {
            ANY_D => {
                let small = self.launch_plan(b, D_ALIGN as usize, v, vocab.max(v), (epilogue, lse));
                (
                    launch.handoff_floats().max(small.handoff_floats()),
                    launch.handoff_counters().max(small.handoff_counters()),
                )
            }
            _ => (launch.handoff_floats(), launch.handoff_counters()),
        };
        let too_large =
            Error::TooLarge { what: "candidates (B × vocab ranges)", value: usize::MAX, max: isize::MAX as usize / 8 };
        let n_cands = launch.candidates().ok_or(too_large)?;
        let counters = launch.counters();
        let lp = epilogue.has_logprobs();
        // SAFETY: the candidates, masses, row parameters and tensor maps are written (by the kernel,
        // an upload or the tensor-map upload) before they are read; the counters are zeroed and the
        // outputs filled below, on the home stream, which this handle's stream then waits for
        // (`on_home`). Every buffer lives on the home stream (see `Kernels::home`).
        self.on_home(|home| {
            let mut out = unsafe {
                DeviceSamples {
                    candidates: home.alloc::<u64>(n_cands.max(1))?,
                    counters: home.alloc_zeros::<u32>(counters)?,
                    rows: home.alloc::<u64>(4 * b)?,
                    tokens: home.alloc::<u32>(b)?,
                    scores: home.alloc::<f32>(b)?,
                    masses: if lp { Some(home.alloc::<u64>(launch.mass_words().unwrap_or(0).max(2))?) } else { None },
                    // The exact path's count word (`fallback_logits` reads the rows' count from
                    // device memory), padded to 16 bytes, then the rows' `RowExact`s.
                    exact: if lp && exact {
                        Some(home.alloc::<u32>(EXACT_WORDS_AT + EXACT_RECORD_WORDS * b)?)
                    } else {
                        None
                    },
                    logprobs: if lp { Some(home.alloc::<f32>(b)?) } else { None },
                    raw_logprobs: if lp { Some(home.alloc::<f32>(b)?) } else { None },
                    logsumexp: if lp { Some(home.alloc::<f32>(b)?) } else { None },
                    mask: None,
                    expanded: None,
                    adj: None,
                    adjusted: None,
                    truncation: None,
                    handoff: if handoff.1 > 0 {
                        Some((home.alloc::<f32>(handoff.0)?, home.alloc_zeros::<u32>(handoff.1)?))
                    } else {
                        None
                    },
                    // A GEMM-fed launch's logits (written by its GEMM before they are read) and
                    // cuBLAS workspace (none on the exact path, whose logits are `fallback_logits`').
                    gemm: match gemm_floats {
                        0 => None,
                        n => Some((home.alloc::<f32>(n)?, home.alloc::<u8>(gemm::workspace_bytes(exact))?)),
                    },
                    has_truncation: false,
                    top_n: 0,
                    b,
                    n: 1,
                    has_logprobs: false,
                    has_raw_logprobs: false,
                    uploaded_rows: Vec::new(),
                    tensor_maps: home.alloc::<u64>(size_of::<TensorMaps>() / 8)?,
                    tensor_maps_for: None,
                    // As if last used on the home stream: a call on another stream joins it first.
                    last_stream: Some(home.cu_stream() as usize),
                    fence: None,
                    captured: false,
                    dst: None,
                    targets: None,
                    results_elsewhere: false,
                }
            };
            out.invalidate(home)?;
            Ok(out)
        })
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
        Ok(Some(top_lists(&tokens, &logprobs, out.top_n)))
    }

    /// Samples on device buffers: one launch of the fused kernel on [`Self::stream`] (two with
    /// several samples per row: the hidden rows are first copied `n` times, device to device),
    /// asynchronous (its last block per batch tile reduces the candidates). Tokens stay on the
    /// device in `out` ([`DeviceSamples::tokens`], and the log-probabilities when asked for);
    /// nothing is copied to the host, so a decode loop needs no host round trip per token. The
    /// per-row parameters (`[B·n]` of 32 bytes) are uploaded when they differ from the last call's;
    /// a host mask ([`SamplingParams::allowed`]) is uploaded every call — a decode loop that keeps
    /// its masks on the device passes them to [`Self::sample_device_masked`] instead.
    ///
    /// ```no_run
    /// use flashsampling::{DeviceMatrix, GpuBackend, SamplingParams, stream_id};
    /// # let (b, d, v) = (4, 4096, 151_936);
    /// # let (hidden, weight) = (vec![half::bf16::ZERO; b * d], vec![half::bf16::ZERO; v * d]);
    /// let gpu = GpuBackend::new(0)?;
    /// let w = gpu.stream().clone_htod(&weight)?; // the LM head, uploaded once
    /// let mut out = gpu.alloc_samples(b, v)?; // reused across steps
    /// for step in 0..8u32 {
    ///     let h = gpu.stream().clone_htod(&hidden)?; // this step's hidden states
    ///     let params = SamplingParams::new(0.8, 42).with_streams((0..b as u32).map(|r| stream_id(r, step)).collect());
    ///     gpu.sample_device(
    ///         &DeviceMatrix { data: h.as_view(), rows: b, cols: d },
    ///         &DeviceMatrix { data: w.as_view(), rows: v, cols: d },
    ///         &params,
    ///         &mut out,
    ///     )?;
    ///     let _tokens = out.tokens(); // on the device, ordered on gpu.stream()
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
        self.sample_device_in(hidden, weight, params, mask, out, whole, None, None, None, None)
    }

    /// [`Self::sample_device_masked`] with the per-row parameters in device memory: `rows` holds the
    /// `[B·n, 4]` words [`row_params_words`] gives on the host (seed, stream, the temperature's
    /// transform, sample index and request: [`flashsampling_kernels::params::RowParams`]), written
    /// by the caller on its stream — a decode step's keys and temperatures without a host round trip.
    /// They are copied device to device into `out` before the launch; `params`' temperatures,
    /// seeds, streams and sample index are not read (its other controls are, and its `n`). Nothing
    /// checks the words on the host: a builder on the device must follow
    /// [`flashsampling_kernels::Transform::from_temperature`] (a NaN or negative temperature is
    /// greedy there) and keep sample indices below 2³¹. A `rows` of another length is
    /// [`Error::LengthMismatch`], before any launch.
    ///
    /// # CUDA graphs
    ///
    /// This call can be recorded into a CUDA graph with the rest of a decode step (stream capture on
    /// this handle's stream), and the graph replayed with new noise: each replay copies the keys
    /// from `rows`, which the caller rewrites between replays. Before the capture, make the same call
    /// once (it sizes the buffers and writes the TMA descriptors and truncation words that the graph
    /// then reads) on the capturing stream, or on another one and let it finish (synchronize), and
    /// turn cudarc's event tracking off on every handle of the context the call's streams and
    /// buffers come from (its waits on events recorded before the capture would invalidate it). Plain
    /// sampling, several samples per row, log-probabilities, a device mask, soft-cap and top-k /
    /// top-p / min-p with top log-probabilities are capturable on one GPU; a host mask, sparse
    /// adjustments, keys from the host, a call that would reallocate or re-upload anything, and a
    /// tensor-parallel rank are [`Error::Capture`] during a capture, with nothing enqueued.
    ///
    /// The graph holds the addresses of `out`, the operands and `rows`: keep them alive while it may
    /// replay. From the capture on, `out` belongs to the graph ([`DeviceSamples::is_captured`]):
    /// calls outside the capture on it are refused; read its outputs after each replay.
    ///
    /// ```no_run
    /// use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    /// use flashsampling::gpu::row_params_words;
    /// use flashsampling::{DeviceMatrix, GpuBackend, SamplingParams, stream_id};
    /// # let (b, d, v) = (4, 4096, 151_936);
    /// # let (hidden, weight) = (vec![half::bf16::ZERO; b * d], vec![half::bf16::ZERO; v * d]);
    /// let gpu = GpuBackend::new(0)?;
    /// // SAFETY: every buffer below is used on `stream` only (the backend orders its own).
    /// unsafe { gpu.context().disable_event_tracking() };
    /// let stream = gpu.context().new_stream()?;
    /// let on = gpu.on_stream(stream.clone())?;
    /// let (w, h) = (stream.clone_htod(&weight)?, stream.clone_htod(&hidden)?);
    /// let (hm, wm) = (
    ///     DeviceMatrix { data: h.as_view(), rows: b, cols: d },
    ///     DeviceMatrix { data: w.as_view(), rows: v, cols: d },
    /// );
    /// let step_keys = |step: u32| SamplingParams::new(0.8, 42).with_streams((0..b as u32).map(|r| stream_id(r, step)).collect());
    /// let params = step_keys(0).with_top_p(vec![0.9; b]);
    /// let mut rows = stream.clone_htod(&row_params_words(&params, b)?)?;
    /// let mut out = on.alloc_samples(b, v)?;
    /// on.sample_device_rows(&hm, &wm, &params, &rows.as_view(), None, &mut out)?; // the warm-up call
    /// stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    /// on.sample_device_rows(&hm, &wm, &params, &rows.as_view(), None, &mut out)?;
    /// let graph = stream.end_capture(CUgraphInstantiate_flags(0))?.expect("one call was captured");
    /// for step in 1..8 {
    ///     stream.memcpy_htod(&row_params_words(&step_keys(step), b)?, &mut rows)?; // this step's keys
    ///     graph.launch()?;
    ///     let _tokens = stream.clone_dtoh(&out.tokens())?;
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample_device_rows<T: Element>(
        &self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        rows: &CudaView<'_, u64>,
        mask: Option<&CudaView<'_, u32>>,
        out: &mut DeviceSamples,
    ) -> Result<()> {
        let whole = VocabRange { offset: 0, vocab: weight.rows };
        self.sample_device_in(hidden, weight, params, mask, out, whole, None, Some(rows), None, None)
    }

    /// [`Self::sample_device_rows`] (with `rows`; else [`Self::sample_device_masked`]) writing its
    /// results into the caller's device buffers `outputs` ([`DeviceOutputs`]: tokens, scores and the
    /// log-probability outputs the call asks for) instead of into `out`'s own outputs: an engine's
    /// or PyTorch's output tensors get the results without a copy. `out` still holds the call's
    /// scratch (candidates, row parameters, truncation buffers) and reports its fallback flags; its
    /// own outputs hold no results after this call (`tokens()` is empty, `logprobs()` `None`).
    /// Outputs that do not match the call are [`Error::OutputMismatch`] or
    /// [`Error::LengthMismatch`], before any launch. Capturable into a CUDA graph as
    /// [`Self::sample_device_rows`] is (with `rows`); the graph keeps the outputs' addresses.
    ///
    /// ```no_run
    /// use flashsampling::params::LogProbs;
    /// use flashsampling::{DeviceMatrix, DeviceOutputs, GpuBackend, SamplingParams};
    /// # let (b, d, v) = (4, 4096, 151_936);
    /// # let (hidden, weight) = (vec![half::bf16::ZERO; b * d], vec![half::bf16::ZERO; v * d]);
    /// let gpu = GpuBackend::new(0)?;
    /// let s = gpu.stream();
    /// let (w, h) = (s.clone_htod(&weight)?, s.clone_htod(&hidden)?);
    /// let (mut tokens, mut scores, mut logprobs) = (s.alloc_zeros::<u32>(b)?, s.alloc_zeros::<f32>(b)?, s.alloc_zeros::<f32>(b)?);
    /// let mut out = gpu.alloc_samples(b, v)?;
    /// let mut into = DeviceOutputs {
    ///     tokens: tokens.as_view_mut(),
    ///     scores: scores.as_view_mut(),
    ///     logprobs: Some(logprobs.as_view_mut()),
    ///     raw_logprobs: None,
    ///     logsumexp: None,
    ///     top_logprobs: None,
    /// };
    /// let params = SamplingParams::new(0.8, 42).with_logprobs(LogProbs::Processed);
    /// gpu.sample_device_into(
    ///     &DeviceMatrix { data: h.as_view(), rows: b, cols: d },
    ///     &DeviceMatrix { data: w.as_view(), rows: v, cols: d },
    ///     &params,
    ///     None,
    ///     None,
    ///     &mut out,
    ///     &mut into,
    /// )?;
    /// drop(into);
    /// let tokens = s.clone_dtoh(&tokens)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn sample_device_into<T: Element>(
        &self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        rows: Option<&CudaView<'_, u64>>,
        mask: Option<&CudaView<'_, u32>>,
        out: &mut DeviceSamples,
        outputs: &mut DeviceOutputs<'_>,
    ) -> Result<()> {
        let whole = VocabRange { offset: 0, vocab: weight.rows };
        self.sample_device_in(hidden, weight, params, mask, out, whole, None, rows, Some(outputs), None)
    }

    /// [`Self::sample_device_masked`] for a weight holding global vocab rows `range.offset ..` of a
    /// `range.vocab`-entry head (rows at or past `range.vocab` are padding, never scored). With
    /// `staging` (a rank's exchange buffer, `[6, B·n]` words), the launch writes its per-row results
    /// there ([`flashsampling_kernels::params::MergeRanksParams`]'s layout) instead of into `out`.
    /// With `device_rows`, the per-row parameters come from there ([`Self::sample_device_rows`]);
    /// with `outputs`, the results go there ([`Self::sample_device_into`]); with `targets` (a
    /// log-probability call with `n` = 1), the given tokens are scored too ([`Self::score_device`];
    /// a rank's scores go to its exchange).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sample_device_in<T: Element>(
        &self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        mask: Option<&CudaView<'_, u32>>,
        out: &mut DeviceSamples,
        range: VocabRange,
        staging: Option<u64>,
        device_rows: Option<&CudaView<'_, u64>>,
        outputs: Option<&mut DeviceOutputs<'_>>,
        targets: Option<ScoreTargets>,
    ) -> Result<()> {
        let mut shape = self.validate_call(hidden, weight, params, mask, range)?;
        debug_assert!(
            targets.is_none() || (params.n == 1 && params.logprobs == LogProbs::ProcessedAndRaw),
            "a scoring call is a log-probability call with one sample per row"
        );
        if let Some(o) = &outputs {
            debug_assert!(staging.is_none(), "a rank's results go to its exchange");
            o.check(params, shape.b, &self.k.ctx)?;
        }
        if let Some(r) = device_rows {
            let words = 4 * shape.b * params.n as usize;
            if r.len() != words {
                return Err(Error::LengthMismatch {
                    buffer: "row parameters (B·n × 4 words)",
                    expected: words,
                    actual: r.len(),
                });
            }
            if !same_context(r.stream().context(), &self.k.ctx) {
                return Err(Error::ForeignBuffer { buffer: "row parameters" });
            }
        }
        if range.offset >= range.vocab {
            return Err(Error::InvalidShards { reason: "the shard starts at or past V", at: range.offset });
        }
        // A call recorded into a CUDA graph enqueues nothing the graph cannot replay (see `capture`).
        // Otherwise, after the last call on `out` if it ran on another stream (before anything
        // touches `out`); a captured call's ran on this stream (checked).
        let capturing = self.capturing()?;
        if capturing {
            // cudarc waits on a buffer's events per the context of the buffer's stream, and records
            // them per the launch stream's: every one of those handles must have tracking off.
            let mut contexts = vec![&self.k.ctx, self.stream.context()];
            contexts.extend([hidden.data.stream().context(), weight.data.stream().context()]);
            contexts.extend(mask.map(|m| m.stream().context()));
            contexts.extend(device_rows.map(|r| r.stream().context()));
            if let Some(o) = &outputs {
                contexts.extend(o.contexts());
            }
            let tracking = contexts.iter().any(|c| c.is_managing_stream_synchronization());
            self.check_capture_inputs(params, device_rows.is_some(), staging.is_some(), tracking, out)?;
        } else {
            self.enter_uncaptured(out)?;
        }
        // Rows past the model's vocabulary are padding: not scored (nor read).
        shape.v = weight.rows.min(range.vocab - range.offset);
        // The guards stay alive until the launch is enqueued (see `device_address`).
        let (hidden_ptr, _hidden_guard) = device_address(&hidden.data, &self.stream);
        let (weight_ptr, _weight_guard) = device_address(&weight.data, &self.stream);
        let (mask_ptr, _mask_guard) = optional_address(mask, &self.stream);
        let (rows_ptr, _rows_guard) = optional_address(device_rows, &self.stream);
        check_aligned(hidden_ptr, weight_ptr)?;
        let (dst, _dst_guards) = match outputs {
            Some(o) => {
                let absent = o.absent();
                let (d, guards) = o.destinations(&self.stream);
                d.check_aligned(absent)?;
                (Some(d), guards)
            }
            None => (None, Vec::new()),
        };
        // `n` samples per row: the kernel scores B·n rows (row r·n + j is row r's sample j).
        let n = params.n as usize;
        let rows = shape.b * n;
        if rows > MAX_DIM as usize {
            return Err(Error::TooLarge { what: "sample rows (B × n)", value: rows, max: MAX_DIM as usize });
        }
        let truncates = params.truncates(range.vocab);
        let epilogue = params.epilogue(range.vocab);
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
        let lse = params.lse_path(range.vocab, targets.is_some());
        if lse == LsePath::ExactRows && staging.is_some() {
            // A rank's truncation step reduces its rows with the fused pass's f32 masses.
            return Err(Error::Unsupported {
                control: "exact log-sum-exps with top-k / top-p / min-p or top log-probabilities",
                path: "over tensor-parallel ranks yet",
            });
        }
        let launch = self.launch_plan(rows, shape.d, shape.v, range.vocab, (epilogue, lse));
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
        if capturing {
            let units = launch.n_vranges as usize * variant.top_units() as usize;
            let (truncation_realloc, truncation_words) = match epilogue {
                Epilogue::Truncate => TruncationBuffers::setup(
                    out.truncation.as_ref(),
                    params,
                    (shape.b, rows, units),
                    (shape.v, shape.d),
                ),
                _ => (false, false),
            };
            let expanded = out.expanded.as_ref().filter(|e| e.len() >= rows * shape.d);
            let key_hidden = if n > 1 { expanded.map_or(0, |e| e.device_ptr(&self.stream).0) } else { hidden_ptr };
            let key = TensorMapKey::of(launch, (key_hidden, weight_ptr, T::TYPE), shape);
            Setup {
                realloc: !out.fits(&launch, &self.k.ctx),
                truncation_realloc,
                expanded_realloc: n > 1 && expanded.is_none(),
                tensor_maps: variant.uses_tma() && out.tensor_maps_for != Some(key),
                truncation_words,
            }
            .check()?;
        }
        // Every buffer the launch touches must be large enough for it (and on this context): else a
        // fresh set, sized by the same launch shape (zeroed counters, invalid tokens).
        if !out.fits(&launch, &self.k.ctx) {
            *out = self.alloc_for_in(rows, shape.d, shape.v, range.vocab, (epilogue, lse))?;
            // Sized by this launch's own plan; should a sizing rule ever miss a buffer, a typed error
            // here rather than a launch past its end.
            if !out.fits(&launch, &self.k.ctx) {
                return Err(Error::Unsupported {
                    control: "a launch shape the buffer sizing does not cover",
                    path: "on the GPU backend",
                });
            }
        }
        if epilogue == Epilogue::Truncate {
            let units = launch.n_vranges as usize * variant.top_units() as usize;
            self.ensure_truncation(out, rows, units, (shape.v, shape.d))?;
        }
        let words = match device_rows {
            Some(_) => RowWords::Device(rows_ptr),
            // A scoring call's rows that no truncation step samples from draw no noise (nothing
            // reads their argmax; the log-probabilities do not depend on it).
            None => {
                let noiseless = targets.is_some_and(|t| !t.draws) && epilogue != Epilogue::Truncate;
                RowWords::Host(Self::row_words(params, shape.b, noiseless)?)
            }
        };
        out.b = rows;
        out.n = n;
        out.has_logprobs = epilogue.has_logprobs() && params.logprobs != LogProbs::Off;
        out.has_raw_logprobs = epilogue.has_logprobs() && params.logprobs == LogProbs::ProcessedAndRaw;
        out.has_truncation = truncates;
        out.top_n = params.top_logprobs as usize;
        let ranged = Ranged { range, staging, elem: T::TYPE };
        out.dst = dst;
        out.targets = targets;
        let result =
            self.upload_and_launch(shape, params, (hidden_ptr, weight_ptr, mask_ptr), words, out, launch, ranged);
        (out.dst, out.targets) = (None, None);
        out.results_elsewhere = dst.is_some() || targets.is_some();
        if result.is_err() {
            // Best effort: no stale tokens after a failed call (see `DeviceSamples`), and no top
            // log-probabilities (their buffers hold a previous call's, or nothing yet). Not recorded
            // into a graph: the capture fails with the call.
            if !capturing {
                let _ = out.invalidate(&self.stream);
                let top = shape.b * params.top_logprobs as usize;
                let given = dst.iter().flat_map(|d| {
                    [
                        (d.tokens, rows),
                        (d.scores, rows),
                        (d.logprobs, rows),
                        (d.raw_logprobs, rows),
                        (d.logsumexp, rows),
                        (d.top_tokens, top),
                        (d.top_logprobs, top),
                    ]
                });
                let scored = targets.iter().flat_map(|t| {
                    [
                        (t.logprobs, rows),
                        (t.raw_logprobs, rows),
                        (t.logsumexp, rows),
                        (t.raw_logsumexp, rows),
                        (t.top_tokens, top),
                        (t.top_logprobs, top),
                        (t.ranks, rows),
                    ]
                });
                for (address, entries) in given.chain(scored).filter(|&(a, _)| a != 0) {
                    // SAFETY: each given caller output holds at least `entries` 4-byte entries
                    // (checked), guarded until after this; all-ones bytes are `INVALID_INDEX` and a NaN.
                    let _ = unsafe {
                        cudarc::driver::result::memset_d8_async(address, 0xFF, 4 * entries, self.stream.cu_stream())
                    };
                }
            }
            out.top_n = 0;
        }
        // Only now may the read events of hidden, weight, mask and outputs be recorded: after the
        // launches.
        drop((_hidden_guard, _weight_guard, _mask_guard, _rows_guard, _dst_guards));
        let left = if capturing {
            out.captured_on(&self.stream);
            Ok(())
        } else {
            self.leave(out)
        };
        result.and(left)
    }

    /// Makes `out` hold `rows` sample rows of outputs (and the log-probability outputs with
    /// `logprobs`) on this context, replacing it by a fresh set when it does not.
    pub(crate) fn ensure_outputs(&self, out: &mut DeviceSamples, rows: usize, logprobs: bool) -> Result<()> {
        let lp_fit = !logprobs
            || [&out.logprobs, &out.raw_logprobs, &out.logsumexp]
                .iter()
                .all(|o| o.as_ref().is_some_and(|l| l.len() >= rows));
        if !(same_context(out.tokens.context(), &self.k.ctx)
            && out.tokens.len() >= rows
            && out.scores.len() >= rows
            && lp_fit)
        {
            let epilogue = if logprobs { Epilogue::LogProbs } else { Epilogue::Sample };
            *out = self.alloc_for(rows, 1, epilogue)?;
        }
        Ok(())
    }

    /// Launches `func` after the kernel before it on this stream: with programmatic stream
    /// serialization ([`launch_dependent`]) unless [`GpuOptions::dependent_launch`] is off, then the ordinary way.
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
}
