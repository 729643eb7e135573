//! Top-k, top-p and min-p, and top log-probabilities, on the GPU (issue 13): after the fused
//! kernel's truncation instantiation, the truncation step certifies each row's kept set from the top
//! lists and samples within it, and writes each request's top log-probabilities from the same sorted
//! prefix; the rows it cannot decide go to the exact fallback (their logits materialized, their
//! threshold searched, their top entries selected). Three launches after the fused one,
//! asynchronous, no host round trip: the step (which first reduces the fused kernel's candidates and
//! masses per row, and copies the hidden state of each row it lists), then the fallback's logits and
//! sampler, which return at once when no row needs them.
//! The truncation step and the fallback's kernels are launched with programmatic stream
//! serialization (each waits for the one before it; `GpuOptions::dependent_launch` off turns it off), and
//! what the step needs from the host (the truncation words, the list's zeroed count) is set up
//! before the fused launch, so only kernels stand between them. A tensor-parallel rank
//! (`crate::tp`) uses the same kernels in steps around its exchange: the step's export of the
//! shard's lists, the step over the merged lists, and the fallback's logits and sampler on rows
//! assembled from every rank's.
//! See `flashsampling_kernels::truncate`.

use cudarc::driver::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use flashsampling_kernels::config::{
    FALLBACK_GATHER_THREADS, FALLBACK_SAMPLE_SMEM, FALLBACK_SAMPLE_THREADS, TRUNCATE_SMEM, TRUNCATE_THREADS,
    TruncateStep,
};
use flashsampling_kernels::params::{
    AdjustedToken, ElementType, FALLBACK_ROW, FallbackLogitsParams, FallbackParams, FusedParams, MAX_TOP_N, RowParams,
    TopOutputs, TopSource, TruncateParams,
};
use flashsampling_kernels::truncate::{RANK_UNITS, StoredTop, Truncation};

use super::{ByValue, DeviceSamples, GpuBackend, ScoreTargets};
use crate::error::{Error, Result};
use crate::params::{LogProbs, SamplingParams};

// SAFETY: `#[repr(C)]`, `Copy`, plain integers, floats and device addresses (as `ByValue`'s others).
unsafe impl cudarc::driver::DeviceRepr for ByValue<TruncateParams> {}
// SAFETY: as above.
unsafe impl cudarc::driver::DeviceRepr for ByValue<FallbackParams> {}
// SAFETY: as above.
unsafe impl cudarc::driver::DeviceRepr for ByValue<FallbackLogitsParams> {}

/// The device buffers of truncating calls (part of [`DeviceSamples`], allocated by the first one).
#[derive(Debug)]
pub(crate) struct TruncationBuffers {
    /// The fused kernel's top lists, `[rows, units]` of [`StoredTop`] (three words each).
    pub(super) tops: CudaSlice<u64>,
    /// Per-request truncation, four words each.
    truncation: CudaSlice<u32>,
    /// Per sample row: 1 where the fallback sampled it.
    pub(super) flags: CudaSlice<u32>,
    /// The fallback's rows: count, then the rows.
    list: CudaSlice<u32>,
    /// The fallback's logits, `[rows, V]`.
    logits: CudaSlice<f32>,
    /// The fallback's rows' hidden states, gathered for its logits, `[rows, D]` 16-bit words.
    gathered: CudaSlice<u16>,
    /// Per sample row: the raw log-sum-exp (written by the fused kernel).
    pub(super) raw_lse: CudaSlice<f32>,
    /// Top log-probabilities: tokens and log-probabilities, `[requests, n]` (room for
    /// [`MAX_TOP_N`] per sample row).
    pub(super) top_tokens: CudaSlice<u32>,
    /// See `top_tokens`.
    pub(super) top_logprobs: CudaSlice<f32>,
    /// Capacity: sample rows, units per row, vocab size, hidden size.
    capacity: (usize, usize, usize, usize),
    /// Host copy of the words in `truncation` (skips the upload when a call reuses them: an upload
    /// from pageable memory waits for the stream).
    uploaded: Vec<u32>,
    /// Whether `list` holds every row of the last unfused-sampler call (`[b, 0, 1, …]`).
    list_is_all: bool,
    /// A tensor-parallel rank's last truncating launch, for its merge and fallback.
    rank: Option<RankLaunch>,
}

/// What a tensor-parallel rank's truncating launch leaves for the steps after the exchange (the
/// truncation step over the merged lists, the fallback): device addresses of the launch's operands
/// (the caller's buffers, alive for the call that made them) and its shape.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RankLaunch {
    /// Hidden states as launched (`B·n` rows: the expanded copy when `n > 1`), weight shard, mask
    /// (0: none), element type.
    operands: (u64, u64, u64, ElementType),
    /// Hidden size, the shard's scored rows, the model's vocabulary.
    d: usize,
    v: usize,
    vocab: usize,
    softcap: f32,
    /// The call's top log-probabilities (`n`, source).
    top: (u32, TopSource),
}

/// Device addresses of the truncation buffers (this backend's, written and read on its stream only,
/// so no guard needs to outlive the launches).
struct TruncationPtrs {
    list: u64,
    tops: u64,
    truncation: u64,
    flags: u64,
    logits: u64,
    gathered: u64,
    raw_lse: u64,
    top_tokens: u64,
    top_logprobs: u64,
}

impl TruncationPtrs {
    /// Where the call's top log-probabilities (`n`, source) go.
    fn top_outputs(&self, (n, source): (u32, TopSource)) -> TopOutputs {
        TopOutputs {
            tokens: self.top_tokens as *mut u32,
            logprobs: self.top_logprobs as *mut f32,
            n: if source == TopSource::Off { 0 } else { n },
            source,
        }
    }
}

impl TruncationBuffers {
    fn ptrs(&mut self, stream: &CudaStream) -> TruncationPtrs {
        let a = |p: (u64, _)| p.0;
        TruncationPtrs {
            list: a(self.list.device_ptr_mut(stream)),
            tops: a(self.tops.device_ptr_mut(stream)),
            truncation: a(self.truncation.device_ptr_mut(stream)),
            flags: a(self.flags.device_ptr_mut(stream)),
            logits: a(self.logits.device_ptr_mut(stream)),
            gathered: a(self.gathered.device_ptr_mut(stream)),
            raw_lse: a(self.raw_lse.device_ptr_mut(stream)),
            top_tokens: a(self.top_tokens.device_ptr_mut(stream)),
            top_logprobs: a(self.top_logprobs.device_ptr_mut(stream)),
        }
    }
}

impl TruncationBuffers {
    /// Whether they serve `rows` sample rows of `units` units over `v` vocab entries and hidden size
    /// `d`.
    fn fits(&self, rows: usize, units: usize, (v, d): (usize, usize)) -> bool {
        self.capacity.0 >= rows
            && self.capacity.0 * self.capacity.1 >= rows * units
            && self.capacity.2 >= v
            && self.capacity.0 * self.capacity.2 >= rows * v
            && self.capacity.3 >= d
    }

    /// What a truncating call of `b` requests, `rows` sample rows, `units` top-list units per row over
    /// `v` vocab entries and hidden size `d` would set up in `tr`: (new buffers, new truncation words).
    pub(super) fn setup(
        tr: Option<&Self>,
        params: &SamplingParams,
        (b, rows, units): (usize, usize, usize),
        (v, d): (usize, usize),
    ) -> (bool, bool) {
        match tr {
            Some(t) => (!t.fits(rows, units, (v, d)), t.uploaded != truncation_words(params, b)),
            None => (true, true),
        }
    }
}

impl GpuBackend {
    /// Makes `out` hold truncation buffers for `rows` sample rows with `units` top-list units each
    /// over `v` vocab entries and hidden size `d`.
    pub(super) fn ensure_truncation(
        &self,
        out: &mut DeviceSamples,
        rows: usize,
        units: usize,
        (v, d): (usize, usize),
    ) -> Result<()> {
        if out.truncation.as_ref().is_some_and(|t| t.fits(rows, units, (v, d))) {
            return Ok(());
        }
        let too_large = |what| Error::TooLarge { what, value: usize::MAX, max: isize::MAX as usize / 8 };
        let n_units =
            rows.checked_mul(units).filter(|&n| n <= isize::MAX as usize / 24).ok_or(too_large("top lists"))?;
        let n_logits =
            rows.checked_mul(v).filter(|&n| n <= isize::MAX as usize / 4).ok_or(too_large("fallback logits"))?;
        let n_gathered =
            rows.checked_mul(d).filter(|&n| n <= isize::MAX as usize / 2).ok_or(too_large("fallback rows"))?;
        // SAFETY: every buffer is written before it is read: the lists, flags and raw log-sum-exps by
        // the fused kernel and the truncation step, the top log-probabilities (the `n` slots of each
        // request a call asks for) by the truncation step or the fallback, the truncation by its upload, the
        // list's count by the memset before each truncation step, the gathered rows by the truncation step or
        // `fallback_gather` (the listed ones only), the logits by `fallback_logits` (of the listed rows only;
        // `fallback_sample` reads no others).
        out.truncation = Some(self.on_home(|home| {
            Ok(unsafe {
                TruncationBuffers {
                    tops: home.alloc::<u64>(3 * n_units.max(1))?,
                    truncation: home.alloc::<u32>(4 * rows)?,
                    flags: home.alloc_zeros::<u32>(rows)?,
                    list: home.alloc_zeros::<u32>(rows + 1)?,
                    logits: home.alloc::<f32>(n_logits.max(1))?,
                    gathered: home.alloc::<u16>(n_gathered.max(8))?,
                    raw_lse: home.alloc::<f32>(rows)?,
                    top_tokens: home.alloc::<u32>(rows * MAX_TOP_N as usize)?,
                    top_logprobs: home.alloc::<f32>(rows * MAX_TOP_N as usize)?,
                    capacity: (rows, units, v, d),
                    uploaded: Vec::new(),
                    list_is_all: false,
                    rank: None,
                }
            })
        })?);
        Ok(())
    }

    /// The launches after a fused truncation launch `fused` (its parameters): the truncation step,
    /// which first reduces each row's candidates and masses (no `reduce_rows` stands between the
    /// fused kernel and it) and copies the hidden state of each row it lists for the fallback, then
    /// the fallback's logits and sampler (which return at once when no row was left to them).
    /// `hidden` is the fused launch's (`B·n` rows), `mask` its mask (the adjusted tokens' bits
    /// cleared), `elem` the element type of hidden states and weight, `adjusted` its adjustments
    /// (offsets, results). The top log-probabilities `params` asks for land in the truncation
    /// buffers.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_truncation(
        &self,
        params: &SamplingParams,
        (b, d, v): (usize, usize, usize),
        (operands, fused): ((u64, u64, u64, ElementType), FusedParams),
        units: usize,
        adjusted: Option<(u64, u64)>,
        out: &mut DeviceSamples,
    ) -> Result<()> {
        // The row parameters and outputs are this backend's, written and read on its stream only.
        let row_params = {
            let (ptr, _s) = out.rows.device_ptr(&self.stream);
            ptr
        };
        let mut taken = out.truncation.take();
        let tr = taken.as_mut().expect("allocated before the fused launch");
        let top = top_source(params, operands.2 != 0 || adjusted.is_some());
        let result = self.launch_truncation_with(
            params,
            (b, d, v),
            (operands, fused),
            units,
            adjusted,
            (row_params, top),
            tr,
            out,
        );
        out.truncation = taken;
        result
    }

    /// What a truncating call sets up before its fused launch, so that nothing but kernels stands
    /// between the fused kernel and the truncation step's launches (each launched with programmatic
    /// stream serialization after the one before): the per-request truncation words (uploaded when
    /// they changed) and the fallback list's count, zeroed.
    pub(super) fn prepare_truncation(&self, params: &SamplingParams, b: usize, out: &mut DeviceSamples) -> Result<()> {
        let words = truncation_words(params, b);
        let tr = out.truncation.as_mut().expect("allocated before the fused launch");
        tr.list_is_all = false;
        if tr.uploaded != words {
            tr.uploaded.clear();
            self.stream.memcpy_htod(&words, &mut tr.truncation.slice_mut(..words.len()))?;
            tr.uploaded = words;
        }
        let (list, _l) = tr.list.device_ptr_mut(&self.stream);
        // SAFETY: `list` holds rows + 1 words (ours, this stream's): the count starts at zero. The
        // previous call's fallback kernels, which read it, come before on this stream.
        unsafe { sys::cuMemsetD32Async(list, 0, 1, self.stream.cu_stream()).result()? };
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_truncation_with(
        &self,
        params: &SamplingParams,
        (_b, d, v): (usize, usize, usize),
        ((hidden, weight, mask, elem), fused): ((u64, u64, u64, ElementType), FusedParams),
        units: usize,
        adjusted: Option<(u64, u64)>,
        (row_params, (top_n, source)): (u64, (u32, TopSource)),
        tr: &mut TruncationBuffers,
        out: &mut DeviceSamples,
    ) -> Result<()> {
        let (rows, n) = (out.b, out.n);
        let t = tr.ptrs(&self.stream);
        let mut top = t.top_outputs((top_n, source));
        if let Some(d) = out.dst.filter(|d| d.top_tokens != 0) {
            // Caller-owned top outputs (`sample_device_into`), `[B, k]` like the own ones.
            (top.tokens, top.logprobs) = (d.top_tokens as *mut u32, d.top_logprobs as *mut f32);
        }
        // A scoring call's (`score_device`): its top lists and its given tokens' ranks.
        let (top, ranks) = out.targets.map_or((top, 0), |t| t.top_and_ranks(top));
        let o = out.output_ptrs(&self.stream, true);
        let (offsets, results) = adjusted.unwrap_or((0, 0));
        // A call without log-probabilities computes no token's logit for them: not the plain
        // token's (the reduction's dot product) nor a changed token's raw one. The log-sum-exps
        // (the walk's, the raw top log-probabilities') are still written.
        let wants = params.logprobs != LogProbs::Off;
        let raw_logprobs = if wants { o.raw_logprobs } else { 0 };
        let null = std::ptr::null_mut();
        let fused = if wants { fused } else { FusedParams { logprobs: null, raw_logprobs: null, ..fused } };
        // A scoring call (given tokens: `fused.targets`) has its rows' log-sum-exps in its scores,
        // where the step's reduction writes them (`launch_fused`): the step, the walk and the fallback
        // read and overwrite them there, so the processed one ends as the kept set's.
        let scoring = !fused.targets.is_null();
        let mut outputs = o.addresses();
        let mut raw_lse = t.raw_lse;
        if scoring {
            (outputs[3], raw_lse) = (fused.logsumexp as u64, fused.raw_logsumexp as u64);
        }
        let p = ByValue(TruncateParams {
            reduce: fused,
            gathered: t.gathered as *mut u16,
            tops: t.tops as *const StoredTop,
            adj_offsets: offsets as *const u32,
            adjusted: results as *const AdjustedToken,
            hidden: hidden as *const u16,
            weight: weight as *const u16,
            raw_logprobs: raw_logprobs as *mut f32,
            raw_logsumexp: raw_lse as *const f32,
            units: units as u32,
            top,
            target_ranks: ranks as *mut u32,
            ..truncate_params(&t, outputs, row_params, (rows, n, v, d), elem)
        });
        // A scoring call's step scores its given tokens too (over the whole row in its reduction, then
        // over each certified kept set), at the unpaired step's bound.
        let step = if scoring { &self.k.scored.0 } else { self.truncate_step(rows) };
        // SAFETY: written by the fused launch just before on this stream: the top lists (`rows ×
        // units`), the candidates and masses (`fused`'s, reduced by the step itself into the plain
        // tokens, scores, log-probabilities and log-sum-exps, `rows` each, and the raw log-sum-exps);
        // the row parameters hold `rows`, the truncation `b` requests, the list rows + 1 words (count
        // zeroed above), the flags `rows`; hidden and `gathered` `rows × D`, weight `V × D` elements
        // of `elem`, 16-byte aligned (validated); the adjustments as in the fused launch; the top
        // outputs `rows × MAX_TOP_N ≥ requests × n` entries (`n ≤ MAX_TOP_N`, validated). With
        // programmatic stream serialization (`GpuOptions::dependent_launch`) each of the three kernels
        // below waits (`griddepcontrol.wait`) for the one before it before any memory access. A
        // scoring call's given tokens and their outputs hold `rows` entries (`check_score_call`).
        unsafe { self.launch_after(step, truncate_cfg(rows), &p) }?;
        let call = FallbackCall {
            operands: (hidden, weight, mask),
            adjusted: (offsets, results),
            softcap: params.softcap.unwrap_or(0.0),
            raw: (raw_logprobs, raw_lse),
            top,
            targets: (fused.targets, fused.target_logprobs, fused.target_raw_logprobs, ranks as *mut u32),
        };
        let f = ByValue(call.over(fallback_params(&t, outputs, row_params, (v, d, n), elem)));
        // SAFETY: the list (count and rows < B·n) and the listed rows' hidden states in `gathered`
        // are written by the truncation step before, on this stream; `gathered` holds `rows × D`
        // elements, 16-byte aligned, `D % 8 == 0` (validated); the weight `V × D` elements of
        // `elem`; the logits `rows × V` floats.
        unsafe { self.launch_fallback_logits(&f, (rows, false), (d, v), t.logits) }?;
        let sampler = if scoring { &self.k.scored.1 } else { &self.k.fallback_sample };
        // SAFETY: as above; the mask (non-null) holds B × ceil(V/32) words, the outputs `rows`
        // (a scoring call's given tokens and their outputs too).
        unsafe { self.launch_after(sampler, fallback_sample_cfg(rows), &f) }?;
        Ok(())
    }

    /// The exact log-sum-exp path's truncating call on one GPU (issue 52;
    /// [`SamplingParams::exact_logsumexp`] with top-k / top-p / min-p or top log-probabilities): no
    /// fused pass or truncation step; every sample row's raw logits by `fallback_logits` (each a
    /// function of its row and vocab row alone), then `fallback_sample_exact` takes every row as
    /// the fallback takes a listed one, with exact log-sum-exps (the row's count in the list, the
    /// flags all set: every row is the fallback's). `hidden` is the launch's (`B·n` rows), `mask`
    /// its mask (the adjusted tokens' bits cleared), `adjusted` its adjustments; the truncation
    /// words were uploaded ([`Self::prepare_truncation`]).
    pub(super) fn launch_exact_truncation(
        &self,
        params: &SamplingParams,
        (d, v): (usize, usize),
        (hidden, weight, mask, elem): (u64, u64, u64, ElementType),
        adjusted: Option<(u64, u64)>,
        out: &mut DeviceSamples,
    ) -> Result<()> {
        let (rows, n) = (out.b, out.n);
        let row_params = {
            let (ptr, _s) = out.rows.device_ptr(&self.stream);
            ptr
        };
        let targets = out.targets;
        let mut taken = out.truncation.take();
        let tr = taken.as_mut().expect("allocated before the launch");
        let result = (|| -> Result<()> {
            let t = tr.ptrs(&self.stream);
            let mut top = t.top_outputs(top_source(params, mask != 0 || adjusted.is_some()));
            if let Some(d) = out.dst.filter(|d| d.top_tokens != 0) {
                // Caller-owned top outputs (`sample_device_into`), `[B, k]` like the own ones.
                (top.tokens, top.logprobs) = (d.top_tokens as *mut u32, d.top_logprobs as *mut f32);
            }
            let (top, ranks) = targets.map_or((top, 0), |t| t.top_and_ranks(top));
            let o = out.output_ptrs(&self.stream, true);
            // Without log-probabilities, no token's logit is computed (the log-sum-exps are written).
            let wants = params.logprobs != LogProbs::Off;
            let mut outputs = o.addresses();
            if !wants {
                outputs[2] = 0;
            }
            let raw_logprobs = if wants { o.raw_logprobs } else { 0 };
            // A scoring call's log-sum-exps go to its scores.
            let raw_lse = match targets {
                Some(tg) => {
                    outputs[3] = tg.logsumexp;
                    tg.raw_logsumexp
                }
                None => t.raw_lse,
            };
            let call = FallbackCall {
                operands: (hidden, weight, mask),
                adjusted: adjusted.unwrap_or((0, 0)),
                softcap: params.softcap.unwrap_or(0.0),
                raw: (raw_logprobs, raw_lse),
                top,
                targets: (
                    targets.map_or(0, |t| t.tokens) as *const u32,
                    targets.map_or(0, |t| t.logprobs) as *mut f32,
                    targets.map_or(0, |t| t.raw_logprobs) as *mut f32,
                    ranks as *mut u32,
                ),
            };
            let f = ByValue(call.over(fallback_params(&t, outputs, row_params, (v, d, n), elem)));
            // SAFETY: the list (`rows + 1` words) and the flags (`rows`) are ours, on this stream: every
            // sample row is the fallback's, in order.
            unsafe {
                sys::cuMemsetD32Async(t.list, rows as u32, 1, self.stream.cu_stream()).result()?;
                sys::cuMemsetD32Async(t.flags, 1, rows, self.stream.cu_stream()).result()?;
            }
            // SAFETY: hidden (`rows × d`) and weight (`v × d`) elements of `elem`, 16-byte aligned,
            // `d % 8 == 0` (validated); the count was set just before on this stream; the logits hold
            // `rows × v` floats (`ensure_truncation`).
            unsafe { self.launch_store_logits((hidden, weight, elem), (rows, d, v), (t.list, t.logits, v as u32)) }?;
            // SAFETY: after the logits on this stream (the kernel waits for them); the list's count is
            // `rows`, one block each; the row parameters, outputs, raw log-sum-exps and flags hold
            // `rows` entries, the truncation `rows / n`, the top outputs `rows × MAX_TOP_N`; the mask
            // (non-null) `B × ceil(v/32)` words and the adjustments as in the adjusted tokens' launch;
            // a scoring call's given tokens and outputs `rows` entries (`check_score_call`); hidden and
            // weight as above.
            unsafe { self.launch_after(&self.k.fallback_exact, fallback_sample_cfg(rows), &f) }?;
            Ok(())
        })();
        out.truncation = taken;
        result
    }

    /// With `gather`, `fallback_gather` (the listed rows' hidden states into `f.gathered`), then
    /// `fallback_logits` into `logits` (`[count, v]` of the listed rows): each waits for the kernel
    /// before it. Without `gather`, the step that listed the rows copied them.
    ///
    /// # Safety
    /// `f`'s list holds the listed rows (written before on this stream), and without `gather`
    /// `f.gathered` their hidden states; `f.hidden` (with `gather`) and `f.gathered` hold `rows ×
    /// d`, `f.weight` `v × d` elements of `f.elem`, 16-byte aligned, `d % 8 == 0`; `logits` holds
    /// `rows × v` floats.
    unsafe fn launch_fallback_logits(
        &self,
        f: &ByValue<FallbackParams>,
        (rows, gather): (usize, bool),
        (d, v): (usize, usize),
        logits: u64,
    ) -> Result<()> {
        if gather {
            let chunks = (rows * d / 8) as u32;
            let cfg = LaunchConfig {
                grid_dim: (chunks.div_ceil(FALLBACK_GATHER_THREADS), 1, 1),
                block_dim: (FALLBACK_GATHER_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the caller's contract.
            unsafe { self.launch_after(&self.k.fallback_gather, cfg, f) }?;
        }
        // SAFETY: the list's count and the gathered rows were written before, on this stream;
        // `gathered` holds `rows × d` and the weight `v × d` elements, 16-byte aligned; the logits
        // `rows × v` floats.
        unsafe {
            self.launch_store_logits(
                (f.0.gathered as u64, f.0.weight as u64, f.0.elem),
                (rows, d, v),
                (f.0.list as u64, logits, v as u32),
            )
        }
    }

    /// A tensor-parallel rank's truncation step before the exchange: each sample row's list of the
    /// shard into the exchange buffer after its result words (`staging`; [`rank_list_words`] per
    /// row): [`RANK_UNITS`] units, the shard's [`flashsampling_kernels::truncate::RANK_TOP`] largest
    /// processed logits and the bound of the rest. Keeps in the truncation buffers what the steps after the
    /// exchange need.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_truncation_export(
        &self,
        params: &SamplingParams,
        (d, v, vocab): (usize, usize, usize),
        operands: (u64, u64, u64, ElementType),
        units: usize,
        staging: u64,
        out: &mut DeviceSamples,
    ) -> Result<()> {
        let (rows, n) = (out.b, out.n);
        let row_params = {
            let (ptr, _s) = out.rows.device_ptr(&self.stream);
            ptr
        };
        let tr = out.truncation.as_mut().expect("allocated before the fused launch");
        let top = top_source(params, operands.2 != 0);
        tr.rank = Some(RankLaunch { operands, d, v, vocab, softcap: params.softcap.unwrap_or(0.0), top });
        let t = tr.ptrs(&self.stream);
        let field = |k: u64| staging + 4 * k * rows as u64;
        let lists = rank_list_words(out.targets.is_some()) as u64;
        let p = ByValue(TruncateParams {
            tops: t.tops as *const StoredTop,
            units: units as u32,
            export: field(lists) as *mut StoredTop,
            // Which rows the step after the exchange takes top entries from (nothing is written).
            top: TopOutputs { n: top.0, source: top.1, ..TopOutputs::OFF },
            ..truncate_params(&t, [field(0), field(1), field(2), field(4)], row_params, (rows, n, vocab, d), operands.3)
        });
        // SAFETY: written by the fused launch and `reduce_rows` just before on this stream: the top
        // lists (`rows × units`) and the plain tokens and log-sum-exps in the exchange buffer (read
        // only in this mode); the row parameters hold `rows`, the truncation the requests; the
        // exchange buffer holds `lists · rows` words and then `rows × RANK_UNITS` units.
        unsafe { self.launch_after(self.truncate_step(rows), truncate_cfg(rows), &p) }
    }

    /// The device address of the raw log-sum-exps a truncating call's steps read (`[rows]`): where
    /// a tensor-parallel rank's merge writes the merged ones. `None` before a truncating call.
    pub(crate) fn truncation_raw_lse(&self, out: &mut DeviceSamples) -> Option<u64> {
        out.truncation.as_mut().map(|t| t.raw_lse.device_ptr_mut(&self.stream).0)
    }

    /// Runs `launch` with what a tensor-parallel rank's steps after the exchange build their
    /// parameters from: the truncation buffers' and the outputs' addresses (this backend's, on its
    /// stream only; the raw log-probabilities' last), the row parameters, the rank's launch, and
    /// `(rows, n)`.
    fn rank_step(
        &self,
        out: &mut DeviceSamples,
        launch: impl FnOnce(&TruncationPtrs, ([u64; 4], u64), u64, RankLaunch, (usize, usize)) -> Result<()>,
    ) -> Result<()> {
        let (rows, n) = (out.b, out.n);
        let row_params = {
            let (ptr, _s) = out.rows.device_ptr(&self.stream);
            ptr
        };
        let mut taken = out.truncation.take();
        let tr = taken.as_mut().expect("a truncating rank launch allocated them");
        let rank = tr.rank.expect("set by the rank's export step");
        let t = tr.ptrs(&self.stream);
        let outputs = {
            let o = out.output_ptrs(&self.stream, true);
            (o.addresses(), o.raw_logprobs)
        };
        let result = launch(&t, outputs, row_params, rank, (rows, n));
        out.truncation = taken;
        result
    }

    /// A tensor-parallel rank's truncation step after the exchange, over every rank's lists
    /// (`gathered`: `ranks` blocks of `[rows, RANK_UNITS]` units, `rank_stride` units apart), with
    /// the merged tokens, scores and log-sum-exps already in `out` (a scoring call's, `targets`: its
    /// log-sum-exps and given tokens' log-probabilities in its scores, which the scoring step
    /// rescores over each certified kept set): certified rows are sampled, the others listed for the
    /// fallback (the host reads their count: [`Self::fallback_count`]).
    pub(crate) fn launch_truncation_merge(
        &self,
        out: &mut DeviceSamples,
        gathered: u64,
        (ranks, rank_stride): (usize, usize),
        targets: Option<ScoreTargets>,
    ) -> Result<()> {
        self.rank_step(out, |t, (mut outputs, raw), row_params, rank, (rows, n)| {
            let s = rank_scoring(targets, &mut outputs, t.raw_lse, t.top_outputs(rank.top));
            let p = ByValue(TruncateParams {
                reduce: s.reduce,
                tops: gathered as *const StoredTop,
                units: RANK_UNITS as u32,
                ranks: ranks as u32,
                rank_stride: rank_stride as u32,
                raw_logprobs: raw as *mut f32,
                raw_logsumexp: s.raw_lse as *const f32,
                top: s.top,
                target_ranks: s.ranks,
                ..truncate_params(t, outputs, row_params, (rows, n, rank.vocab, rank.d), rank.operands.3)
            });
            let step = if targets.is_some() { &self.k.scored.0 } else { self.truncate_step(rows) };
            // SAFETY: `gathered` holds `ranks` blocks of `rows × RANK_UNITS` units `rank_stride`
            // apart (the all-gather and the merge before on this stream, which also wrote the merged
            // raw log-sum-exps); the outputs, row parameters, truncation, flags and list as for the
            // one-GPU step (the list's count zeroed before the fused launch); no adjustments; no
            // weight (null: a changed token's raw logit is its processed one, the call has no
            // soft-cap); a scoring call's given tokens and outputs hold `rows` entries, its top
            // lists `rows × top_logprobs` (checked).
            unsafe { self.launch_after(step, truncate_cfg(rows), &p) }
        })
    }

    /// The number of rows the last truncation step listed for the fallback (a read from the
    /// device: call it once that step is known to be done).
    pub(crate) fn fallback_count(&self, out: &DeviceSamples) -> Result<usize> {
        let tr = out.truncation.as_ref().expect("a truncating call allocated them");
        Ok(self.stream.clone_dtoh(&tr.list.slice(..1))?[0] as usize)
    }

    /// Puts the `count` rows the last truncation step listed for the fallback in row order (a read
    /// from the device and, where they were not, a write back). The step gives each listed row the
    /// slot its block took from an atomic counter, in the order the blocks got there: one GPU's
    /// fallback does not care, but a tensor-parallel rank's pairs its slot `s` of logits with every
    /// other rank's slot `s`, so every rank must hold the same row there.
    pub(crate) fn order_fallback_list(&self, out: &mut DeviceSamples, count: usize) -> Result<()> {
        let tr = out.truncation.as_mut().expect("a truncating call allocated them");
        let mut rows = self.stream.clone_dtoh(&tr.list.slice(1..1 + count))?;
        if in_row_order(&mut rows) {
            return Ok(());
        }
        self.stream.memcpy_htod(&rows, &mut tr.list.slice_mut(1..1 + count))?;
        Ok(())
    }
}

/// Sorts fallback list entries (a row in the [`FALLBACK_ROW`] bits, flags above) by row; whether
/// they already were in that order.
fn in_row_order(entries: &mut [u32]) -> bool {
    let row = |e: &u32| e & FALLBACK_ROW;
    if entries.is_sorted_by_key(row) {
        return true;
    }
    entries.sort_unstable_by_key(row);
    false
}

impl GpuBackend {
    /// A tensor-parallel rank's part of the fallback: the listed rows' raw logits over the shard
    /// into `local` (`[count, v]`, `v` the shard's scored rows; room for every sample row), for the
    /// exchange.
    pub(crate) fn launch_rank_fallback_logits(&self, out: &mut DeviceSamples, local: u64) -> Result<()> {
        self.rank_step(out, |t, _, _, rank, (rows, n)| {
            let (hidden, weight, _, elem) = rank.operands;
            let f = ByValue(FallbackParams {
                hidden: hidden as *const u16,
                weight: weight as *const u16,
                ..fallback_params(t, [0; 4], 0, (rank.v, rank.d, n), elem)
            });
            // SAFETY: the list was written by the truncation step before, on this stream; the
            // launch's hidden states (`rows × d`, the caller's buffers, alive for this call) and
            // `gathered` hold `rows × d`, the shard `v × d` elements of `elem`, 16-byte aligned;
            // `local` holds `count × v` floats for the list's count, and only listed rows are stored.
            unsafe { self.launch_fallback_logits(&f, (rows, true), (rank.d, rank.v), local) }
        })
    }

    /// The rest of a tensor-parallel rank's fallback: the listed rows sampled from their whole raw
    /// logits `full` (`[count, vocab]`, assembled from every rank's), as on one GPU (a scoring
    /// call's, `targets`, scoring each given token over the cut it finds).
    pub(crate) fn launch_rank_fallback_sample(
        &self,
        out: &mut DeviceSamples,
        full: u64,
        targets: Option<ScoreTargets>,
    ) -> Result<()> {
        self.rank_step(out, |t, (mut outputs, raw), row_params, rank, (rows, n)| {
            let (_, _, mask, elem) = rank.operands;
            let s = rank_scoring(targets, &mut outputs, t.raw_lse, t.top_outputs(rank.top));
            let call = FallbackCall {
                operands: (0, 0, mask),
                adjusted: (0, 0),
                softcap: rank.softcap,
                raw: (raw, s.raw_lse),
                top: s.top,
                targets: (s.reduce.targets, s.reduce.target_logprobs, s.reduce.target_raw_logprobs, s.ranks),
            };
            let base = fallback_params(t, outputs, row_params, (rank.vocab, rank.d, n), elem);
            let f = ByValue(FallbackParams { logits: full as *mut f32, ..call.over(base) });
            // SAFETY: the list and `full` (`count × vocab` floats of the listed rows) were written
            // before on this stream; the mask (non-null: the launch's, B × ceil(vocab/32) words); the
            // outputs and the merged raw log-sum-exps `rows`; no adjustments; no weight (null: hidden
            // states and weight are not read; the sampled token's raw logit is its processed one); a
            // scoring call's given tokens and outputs hold `rows` entries, its top lists `rows ×
            // top_logprobs` (checked).
            let sampler = if targets.is_some() { &self.k.scored.1 } else { &self.k.fallback_sample };
            unsafe { self.launch_after(sampler, fallback_sample_cfg(rows), &f) }
        })
    }
}

/// Words per row before a tensor-parallel rank's lists in its exchange buffer: its per-row results
/// (six words; a scoring call's eight, padded to whole six-word units so that every rank's block is
/// whole units apart).
pub(crate) const fn rank_list_words(scoring: bool) -> usize {
    if scoring { 12 } else { 6 }
}

/// What a rank's steps after the exchange take from a call: for a scoring one, its given tokens
/// and their outputs as a reduction-less [`FusedParams`] (null `candidates`: the merge reduced the
/// rows), the log-sum-exps where the merge wrote them (the scores'), and with top log-probabilities
/// its own top lists and ranks; else none of it.
struct RankScoring {
    reduce: FusedParams,
    /// The merged raw log-sum-exps.
    raw_lse: u64,
    top: TopOutputs,
    /// The given tokens' ranks (null: none asked for).
    ranks: *mut u32,
}

/// [`RankScoring`] of a call (`targets`: a scoring one's) whose steps would otherwise write
/// `outputs` (`outputs[3]` becomes the scores' processed log-sum-exps), read the raw log-sum-exps
/// at `raw_lse` and write top lists to `top`.
fn rank_scoring(targets: Option<ScoreTargets>, outputs: &mut [u64; 4], raw_lse: u64, top: TopOutputs) -> RankScoring {
    let Some(t) = targets else {
        return RankScoring { reduce: FusedParams::NONE, raw_lse, top, ranks: std::ptr::null_mut() };
    };
    outputs[3] = t.logsumexp;
    let reduce = FusedParams {
        targets: t.tokens as *const u32,
        target_logprobs: t.logprobs as *mut f32,
        target_raw_logprobs: t.raw_logprobs as *mut f32,
        ..FusedParams::NONE
    };
    let (top, ranks) = t.top_and_ranks(top);
    RankScoring { reduce, raw_lse: t.raw_logsumexp, top, ranks: ranks as *mut u32 }
}

impl GpuBackend {
    /// The benchmark's unfused top-k / top-p / min-p sampler (what a serving stack runs after its
    /// GEMM): the fallback's exact per-row threshold search (`fallback_sample`: a bitwise search
    /// over the f32 order, no sort) over `[b, v]` f32 logits already in device memory, every row
    /// listed, `params`' temperature, noise and truncation (no mask, soft-cap, adjustments or
    /// log-probabilities). The logits are overwritten. Tokens and scores land in `out`.
    #[doc(hidden)]
    pub fn sample_truncated_logits(
        &self,
        logits: &mut CudaSlice<f32>,
        (b, v): (usize, usize),
        params: &SamplingParams,
        out: &mut DeviceSamples,
    ) -> Result<()> {
        if params.n != 1
            || params.allowed.is_some()
            || params.adjustments.is_some()
            || params.softcap.is_some()
            || params.top_logprobs > 0
        {
            return Err(Error::Unsupported { control: "controls besides truncation", path: "in the unfused sampler" });
        }
        if logits.len() < b * v || b == 0 || v == 0 {
            return Err(Error::LengthMismatch { buffer: "logits (B × V)", expected: b * v, actual: logits.len() });
        }
        crate::params::validate((b, 8, 8 * b), (v, 8, 8 * v), params)?;
        self.enter(out)?;
        self.ensure_outputs(out, b, false)?;
        if out.rows.len() < 4 * b {
            *out = self.alloc_samples(b, 1)?;
        }
        self.ensure_truncation(out, b, 1, (1, 8))?;
        let words = Self::row_words(params, b, false)?;
        if words != out.uploaded_rows {
            self.stream.memcpy_htod(&words, &mut out.rows.slice_mut(..4 * b))?;
            out.uploaded_rows = words;
        }
        out.b = b;
        out.n = 1;
        out.results_elsewhere = false;
        out.has_logprobs = false;
        out.has_raw_logprobs = false;
        out.has_truncation = false;
        out.top_n = 0;
        let trunc = truncation_words(params, b);
        let list: Vec<u32> = std::iter::once(b as u32).chain(0..b as u32).collect();
        let row_params = {
            let (ptr, _s) = out.rows.device_ptr(&self.stream);
            ptr
        };
        let mut taken = out.truncation.take();
        let tr = taken.as_mut().expect("allocated above");
        let result = (|| -> Result<()> {
            // Uploads (from pageable memory: they wait for the stream) only when the call differs.
            if tr.uploaded != trunc || !tr.list_is_all {
                tr.uploaded.clear();
                self.stream.memcpy_htod(&trunc, &mut tr.truncation.slice_mut(..4 * b))?;
                self.stream.memcpy_htod(&list, &mut tr.list.slice_mut(..b + 1))?;
                tr.uploaded = trunc.clone();
                tr.list_is_all = true;
            }
            let (logits_ptr, _g) = logits.device_ptr_mut(&self.stream);
            let o = out.output_ptrs(&self.stream, false);
            let t = tr.ptrs(&self.stream);
            let f = ByValue(FallbackParams {
                logits: logits_ptr as *mut f32,
                // No hidden states or weight are read: the element type is a placeholder.
                ..fallback_params(&t, o.addresses(), row_params, (v, 8, 1), ElementType::Bf16)
            });
            // SAFETY: the list holds b rows (uploaded above), the logits `b × v` floats (checked), the
            // row parameters and truncation `b` entries, the outputs `b`; no mask, adjustments or
            // log-probability outputs (null), so hidden and weight are never read.
            unsafe { self.stream.launch_builder(&self.k.fallback_sample).arg(&f).launch(fallback_sample_cfg(b)) }?;
            Ok(())
        })();
        out.truncation = taken;
        let left = self.leave(out);
        result.and(left)
    }
}

/// `fallback_sample`'s launch shape: one block per slot of the list, `slots` ≥ the list's count.
fn fallback_sample_cfg(slots: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (slots as u32, 1, 1),
        block_dim: (FALLBACK_SAMPLE_THREADS, 1, 1),
        shared_mem_bytes: FALLBACK_SAMPLE_SMEM,
    }
}

/// The per-request truncation words the kernels read ([`Truncation`]'s layout: top-k, top-p and
/// min-p bits, padding), `[b, 4]`.
fn truncation_words(params: &SamplingParams, b: usize) -> Vec<u32> {
    (0..b)
        .flat_map(|r| {
            let (top_k, top_p, min_p) = params.row_truncation(r);
            [top_k, top_p.to_bits(), min_p.to_bits(), 0]
        })
        .collect()
}

impl GpuBackend {
    /// The truncation step's entry for a launch of `rows` blocks ([`TruncateStep::for_rows`], or
    /// `GpuOptions::truncate_step`'s).
    fn truncate_step(&self, rows: usize) -> &cudarc::driver::CudaFunction {
        let rows = u32::try_from(rows).unwrap_or(u32::MAX);
        match self.truncate_step_override.unwrap_or(TruncateStep::for_rows(rows, self.k.sm_count)) {
            TruncateStep::Alone => &self.k.truncate.0,
            TruncateStep::Paired => &self.k.truncate.1,
        }
    }
}

/// The truncation step's launch shape: one block per sample row.
fn truncate_cfg(rows: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (TRUNCATE_THREADS, 1, 1), shared_mem_bytes: TRUNCATE_SMEM }
}

/// `truncate_rows`' parameters with the truncation buffers `t`, the outputs (tokens, scores,
/// log-probabilities, log-sum-exps), the row parameters and `(rows, n, v, d)`; one rank, no
/// reduction, top lists, adjustments, raw log-probabilities, top log-probabilities, export or
/// copy of the listed rows (the callers set theirs).
fn truncate_params(
    t: &TruncationPtrs,
    [tokens, scores, logprobs, logsumexp]: [u64; 4],
    row_params: u64,
    (rows, n, v, d): (usize, usize, usize, usize),
    elem: ElementType,
) -> TruncateParams {
    TruncateParams {
        reduce: FusedParams::NONE,
        gathered: std::ptr::null_mut(),
        tops: std::ptr::null(),
        rows: row_params as *const RowParams,
        truncation: t.truncation as *const Truncation,
        adj_offsets: std::ptr::null(),
        adjusted: std::ptr::null(),
        hidden: std::ptr::null(),
        weight: std::ptr::null(),
        tokens: tokens as *mut u32,
        scores: scores as *mut f32,
        logprobs: logprobs as *mut f32,
        raw_logprobs: std::ptr::null_mut(),
        logsumexp: logsumexp as *mut f32,
        raw_logsumexp: std::ptr::null(),
        flags: t.flags as *mut u32,
        fallback: t.list as *mut u32,
        b: rows as u32,
        units: 0,
        v: v as u32,
        d: d as u32,
        samples: n as u32,
        elem,
        top: TopOutputs::OFF,
        export: std::ptr::null_mut(),
        ranks: 1,
        rank_stride: 0,
        target_ranks: std::ptr::null_mut(),
    }
}

/// A call's controls and extra outputs as the fallback's kernels read them, beside the buffers and
/// outputs [`fallback_params`] sets: what every launch of `fallback_sample*` for a call's rows fills
/// in the same way ([`Self::over`]).
#[derive(Clone, Copy)]
struct FallbackCall {
    /// The hidden states and weight (0: not read) and the allowed-token mask (0: none).
    operands: (u64, u64, u64),
    /// The adjustments' CSR offsets and their adjusted tokens' results (0: none).
    adjusted: (u64, u64),
    /// The soft-cap (0: off).
    softcap: f32,
    /// The raw log-probabilities (0: not asked) and the rows' raw log-sum-exps.
    raw: (u64, u64),
    /// The top log-probabilities' outputs and source.
    top: TopOutputs,
    /// A scoring call's given tokens, their processed and raw log-probabilities and their ranks
    /// (null: none).
    targets: (*const u32, *mut f32, *mut f32, *mut u32),
}

impl FallbackCall {
    /// `base` with this call's controls and outputs (the mask's words per row from `base.v`).
    fn over(self, base: FallbackParams) -> FallbackParams {
        let ((hidden, weight, mask), (offsets, results), (raw_logprobs, raw_lse)) =
            (self.operands, self.adjusted, self.raw);
        let (targets, target_logprobs, target_raw_logprobs, target_ranks) = self.targets;
        FallbackParams {
            hidden: hidden as *const u16,
            weight: weight as *const u16,
            mask: mask as *const u32,
            mask_words: if mask != 0 { base.v.div_ceil(32) } else { 0 },
            adj_offsets: offsets as *const u32,
            adjusted: results as *const AdjustedToken,
            raw_logprobs: raw_logprobs as *mut f32,
            raw_logsumexp: raw_lse as *const f32,
            softcap: self.softcap,
            top: self.top,
            targets,
            target_logprobs,
            target_raw_logprobs,
            target_ranks,
            ..base
        }
    }
}

/// The fallback's parameters with the truncation buffers `t` (list, logits, gathered rows), the
/// outputs (tokens, scores, log-probabilities, log-sum-exps), the row parameters and `(v, d, n)`;
/// no operands, mask, soft-cap, adjustments, raw or top log-probabilities (the callers set theirs).
fn fallback_params(
    t: &TruncationPtrs,
    [tokens, scores, logprobs, logsumexp]: [u64; 4],
    row_params: u64,
    (v, d, n): (usize, usize, usize),
    elem: ElementType,
) -> FallbackParams {
    FallbackParams {
        list: t.list as *const u32,
        logits: t.logits as *mut f32,
        hidden: std::ptr::null(),
        weight: std::ptr::null(),
        gathered: t.gathered as *mut u16,
        mask: std::ptr::null(),
        rows: row_params as *const RowParams,
        truncation: t.truncation as *const Truncation,
        adj_offsets: std::ptr::null(),
        adjusted: std::ptr::null(),
        tokens: tokens as *mut u32,
        scores: scores as *mut f32,
        logprobs: logprobs as *mut f32,
        raw_logprobs: std::ptr::null_mut(),
        logsumexp: logsumexp as *mut f32,
        raw_logsumexp: std::ptr::null(),
        v: v as u32,
        d: d as u32,
        samples: n as u32,
        mask_words: 0,
        softcap: 0.0,
        elem,
        top: TopOutputs::OFF,
        targets: std::ptr::null(),
        target_logprobs: std::ptr::null_mut(),
        target_raw_logprobs: std::ptr::null_mut(),
        target_ranks: std::ptr::null_mut(),
    }
}

/// A call's top log-probabilities: how many, and where the kernels find them. The raw logits are
/// the processed ones (the truncation step's prefix holds them) unless the call soft-caps them or
/// `masks_or_adjusts`.
fn top_source(params: &SamplingParams, masks_or_adjusts: bool) -> (u32, TopSource) {
    let changes_logits = params.softcap.is_some() || masks_or_adjusts;
    let source = match (params.top_logprobs, params.top_logprobs_raw, changes_logits) {
        (0, _, _) => TopSource::Off,
        (_, false, _) => TopSource::Processed,
        (_, true, false) => TopSource::RawFromLists,
        (_, true, true) => TopSource::RawInFallback,
    };
    (params.top_logprobs, source)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashsampling_kernels::params::{FALLBACK_KEEPS_SAMPLE, FALLBACK_TOP};

    #[test]
    fn fallback_lists_are_put_in_row_order_with_their_flags() {
        // The order two ranks' steps may list the same rows in (their blocks arrive differently).
        let mut a = vec![7 | FALLBACK_TOP, 2, 9 | FALLBACK_KEEPS_SAMPLE, 0, 3 | FALLBACK_TOP | FALLBACK_KEEPS_SAMPLE];
        let mut b = vec![0, 3 | FALLBACK_TOP | FALLBACK_KEEPS_SAMPLE, 9 | FALLBACK_KEEPS_SAMPLE, 7 | FALLBACK_TOP, 2];
        assert!(!in_row_order(&mut a) && !in_row_order(&mut b));
        assert_eq!(a, b, "every rank holds the same row in every slot");
        assert_eq!(a, [0, 2, 3 | FALLBACK_TOP | FALLBACK_KEEPS_SAMPLE, 7 | FALLBACK_TOP, 9 | FALLBACK_KEEPS_SAMPLE]);
        // Already in order (flags do not count): nothing to write back.
        assert!(in_row_order(&mut a));
        assert!(in_row_order(&mut [1 | FALLBACK_KEEPS_SAMPLE, 4]) && in_row_order(&mut []));
    }
}
