//! Top-k, top-p and min-p, and top log-probabilities, on the GPU (issue 13): after the fused
//! kernel's truncation instantiation, the truncation step certifies each row's kept set from the top
//! lists and samples within it, and writes each request's top log-probabilities from the same sorted
//! prefix; the rows it cannot decide go to the exact fallback (their logits materialized, their
//! threshold searched, their top entries selected). Three launches after the fused one,
//! asynchronous, no host round trip: the fallback's kernels return at once when no row needs them.
//! The truncation step and the fallback's kernels are launched with programmatic stream
//! serialization (each waits for the one before it; `FLASHSAMPLING_PDL=0` turns it off), and
//! what the step needs from the host (the truncation words, the list's zeroed count) is set up
//! before the fused launch, so only kernels stand between them.
//! See `flashsampling_kernels::truncate`.

use cudarc::driver::sys;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use flashsampling_kernels::config::{
    BLOCK_V, Epilogue, FALLBACK_GATHER_THREADS, FALLBACK_LOGITS_VARIANT, FALLBACK_SAMPLE_SMEM, FALLBACK_SAMPLE_THREADS,
    TRUNCATE_SMEM, TRUNCATE_THREADS,
};
use flashsampling_kernels::params::{
    AdjustedToken, ElementType, FallbackLogitsParams, FallbackParams, FusedParams, MAX_TOP_N, RowParams, TopOutputs,
    TopSource, TruncateParams,
};
use flashsampling_kernels::truncate::{StoredTop, Truncation};

use super::{ByValue, DeviceSamples, GpuBackend};
use crate::error::{Error, Result};
use crate::params::SamplingParams;

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
        // request a call asks for) by the truncation step or the fallback, the truncation by its upload, the list's count by
        // the memset before each truncation step, the gathered rows by `fallback_gather`, the logits
        // by `fallback_logits` (of the listed rows only; `fallback_sample` reads no others).
        out.truncation = Some(unsafe {
            TruncationBuffers {
                tops: self.stream.alloc::<u64>(3 * n_units.max(1))?,
                truncation: self.stream.alloc::<u32>(4 * rows)?,
                flags: self.stream.alloc_zeros::<u32>(rows)?,
                list: self.stream.alloc_zeros::<u32>(rows + 1)?,
                logits: self.stream.alloc::<f32>(n_logits.max(1))?,
                gathered: self.stream.alloc::<u16>(n_gathered.max(8))?,
                raw_lse: self.stream.alloc::<f32>(rows)?,
                top_tokens: self.stream.alloc::<u32>(rows * MAX_TOP_N as usize)?,
                top_logprobs: self.stream.alloc::<f32>(rows * MAX_TOP_N as usize)?,
                capacity: (rows, units, v, d),
                uploaded: Vec::new(),
                list_is_all: false,
            }
        });
        Ok(())
    }

    /// The launches after a fused truncation launch: the truncation step, then the fallback's
    /// logits and sampler (which return at once when no row was left to them). `hidden` is the
    /// fused launch's (`B·n` rows), `mask` its mask (the adjusted tokens' bits cleared), `elem` the
    /// element type of hidden states and weight, `adjusted` its adjustments (offsets, results). The
    /// top log-probabilities `params` asks for land in the truncation buffers.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_truncation(
        &self,
        params: &SamplingParams,
        (b, d, v): (usize, usize, usize),
        operands: (u64, u64, u64, ElementType),
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
        // The raw logits are the processed ones (the truncation step's prefix holds them) unless the
        // call soft-caps, masks or adjusts them.
        let changes_logits = params.softcap.is_some() || operands.2 != 0 || adjusted.is_some();
        let source = match (params.top_logprobs, params.top_logprobs_raw, changes_logits) {
            (0, _, _) => TopSource::Off,
            (_, false, _) => TopSource::Processed,
            (_, true, false) => TopSource::RawFromLists,
            (_, true, true) => TopSource::RawInFallback,
        };
        let top = (params.top_logprobs, source);
        let result =
            self.launch_truncation_with(params, (b, d, v), operands, units, adjusted, (row_params, top), tr, out);
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
        (hidden, weight, mask, elem): (u64, u64, u64, ElementType),
        units: usize,
        adjusted: Option<(u64, u64)>,
        (row_params, (top_n, source)): (u64, (u32, TopSource)),
        tr: &mut TruncationBuffers,
        out: &mut DeviceSamples,
    ) -> Result<()> {
        let (rows, n) = (out.b, out.n);
        let (list, _l) = tr.list.device_ptr_mut(&self.stream);
        let (tops, _t) = tr.tops.device_ptr(&self.stream);
        let (truncation, _u) = tr.truncation.device_ptr(&self.stream);
        let (flags, _f) = tr.flags.device_ptr_mut(&self.stream);
        let (logits, _g) = tr.logits.device_ptr_mut(&self.stream);
        let (gathered, _h) = tr.gathered.device_ptr_mut(&self.stream);
        let (raw_lse, _r) = tr.raw_lse.device_ptr(&self.stream);
        let (top_tokens, _tt) = tr.top_tokens.device_ptr_mut(&self.stream);
        let (top_logprobs, _tl) = tr.top_logprobs.device_ptr_mut(&self.stream);
        let top = TopOutputs {
            tokens: top_tokens as *mut u32,
            logprobs: top_logprobs as *mut f32,
            n: if source == TopSource::Off { 0 } else { top_n },
            source,
        };
        let o = out.output_ptrs(&self.stream, true);
        let (offsets, results) = adjusted.unwrap_or((0, 0));
        let p = ByValue(TruncateParams {
            tops: tops as *const StoredTop,
            rows: row_params as *const RowParams,
            truncation: truncation as *const Truncation,
            adj_offsets: offsets as *const u32,
            adjusted: results as *const AdjustedToken,
            hidden: hidden as *const u16,
            weight: weight as *const u16,
            tokens: o.tokens as *mut u32,
            scores: o.scores as *mut f32,
            logprobs: o.logprobs as *mut f32,
            raw_logprobs: o.raw_logprobs as *mut f32,
            logsumexp: o.logsumexp as *mut f32,
            raw_logsumexp: raw_lse as *const f32,
            flags: flags as *mut u32,
            fallback: list as *mut u32,
            b: rows as u32,
            units: units as u32,
            v: v as u32,
            d: d as u32,
            samples: n as u32,
            elem,
            top,
        });
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (TRUNCATE_THREADS, 1, 1),
            shared_mem_bytes: TRUNCATE_SMEM,
        };
        // SAFETY: written by the fused launch just before on this stream: the top lists (`rows ×
        // units`), the plain tokens, scores, log-probabilities and log-sum-exps (`rows` each) and the
        // raw log-sum-exps; the row parameters hold `rows`, the truncation `b` requests, the list
        // rows + 1 words (count zeroed above), the flags `rows`; hidden `rows × D` and weight `V × D`
        // elements of `elem`, 16-byte aligned (validated); the adjustments as in the fused launch; the
        // top outputs `rows × MAX_TOP_N ≥ requests × n` entries (`n ≤ MAX_TOP_N`, validated).
        // With programmatic stream serialization (`FLASHSAMPLING_PDL` not 0) each of the four kernels
        // below waits (`griddepcontrol.wait`) for the one before it before any memory access.
        unsafe { self.launch_after(&self.truncate, cfg, &p) }?;
        let f = ByValue(FallbackParams {
            list: list as *const u32,
            logits: logits as *mut f32,
            hidden: hidden as *const u16,
            weight: weight as *const u16,
            gathered: gathered as *mut u16,
            mask: mask as *const u32,
            rows: row_params as *const RowParams,
            truncation: truncation as *const Truncation,
            adj_offsets: offsets as *const u32,
            adjusted: results as *const AdjustedToken,
            tokens: o.tokens as *mut u32,
            scores: o.scores as *mut f32,
            logprobs: o.logprobs as *mut f32,
            raw_logprobs: o.raw_logprobs as *mut f32,
            logsumexp: o.logsumexp as *mut f32,
            raw_logsumexp: raw_lse as *const f32,
            v: v as u32,
            d: d as u32,
            samples: n as u32,
            mask_words: if mask != 0 { v.div_ceil(32) as u32 } else { 0 },
            softcap: params.softcap.unwrap_or(0.0),
            elem,
            top,
        });
        let chunks = (rows * d / 8) as u32;
        let cfg = LaunchConfig {
            grid_dim: (chunks.div_ceil(FALLBACK_GATHER_THREADS), 1, 1),
            block_dim: (FALLBACK_GATHER_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the list (count and rows < B·n) was written by the truncation step before, on this
        // stream; hidden and `gathered` hold `rows × D` elements, 16-byte aligned, `D % 8 == 0`
        // (validated).
        unsafe { self.launch_after(&self.fallback_gather, cfg, &f) }?;
        let lv = FALLBACK_LOGITS_VARIANT;
        let n_btiles = (rows as u32).div_ceil(lv.block_b()).max(1);
        let n_vranges = lv.n_vranges(self.sm_count, self.fallback_logits.per_sm, n_btiles, v as u32);
        let l = ByValue(FallbackLogitsParams {
            fused: FusedParams {
                hidden: gathered as *const u16,
                weight: weight as *const u16,
                rows: std::ptr::null(),
                mask: std::ptr::null(),
                masses: std::ptr::null_mut(),
                logprobs: std::ptr::null_mut(),
                raw_logprobs: std::ptr::null_mut(),
                logsumexp: std::ptr::null_mut(),
                raw_logsumexp: std::ptr::null_mut(),
                adj_offsets: std::ptr::null(),
                adjusted: std::ptr::null(),
                candidates: std::ptr::null_mut(),
                counters: std::ptr::null_mut(),
                tokens: std::ptr::null_mut(),
                scores: std::ptr::null_mut(),
                tops: std::ptr::null_mut(),
                b: rows as u32,
                d: d as u32,
                v: v as u32,
                v_offset: 0,
                v_end: v as u32,
                samples: 1,
                n_vranges,
                mask_words: 0,
                softcap: 0.0,
                tensor_maps: std::ptr::null(),
                tma_whole_tiles: v as u32 / BLOCK_V,
                top_units: 0,
                elem,
            },
            list: list as *const u32,
            logits: logits as *mut f32,
        });
        let cfg = LaunchConfig {
            grid_dim: (n_vranges * n_btiles, 1, 1),
            block_dim: (lv.threads(), 1, 1),
            shared_mem_bytes: lv.smem_bytes(Epilogue::Sample),
        };
        // SAFETY: the list's count was written by the truncation step, the gathered rows by
        // `fallback_gather` before, on this stream; `gathered` holds `rows × D` and the weight `V × D`
        // elements of `elem`, 16-byte aligned; the logits hold `rows × V` floats; the kernel reads no
        // other pointer of `fused` (null) and its blocks past the count return at once.
        unsafe { self.launch_after(&self.fallback_logits.func, cfg, &l) }?;
        // SAFETY: as above; the mask (non-null) holds B × ceil(V/32) words, the outputs `rows`.
        unsafe { self.launch_after(&self.fallback_sample, fallback_sample_cfg(rows), &f) }?;
        Ok(())
    }
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
        self.ensure_outputs(out, b, false)?;
        if out.rows.len() < 4 * b {
            *out = self.alloc_samples(b, 1)?;
        }
        self.ensure_truncation(out, b, 1, (1, 8))?;
        let words = self.row_words(params, b)?;
        if words != out.uploaded_rows {
            self.stream.memcpy_htod(&words, &mut out.rows.slice_mut(..4 * b))?;
            out.uploaded_rows = words;
        }
        out.b = b;
        out.n = 1;
        out.has_logprobs = false;
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
            let (list_ptr, _l) = tr.list.device_ptr(&self.stream);
            let (truncation, _u) = tr.truncation.device_ptr(&self.stream);
            let (logits_ptr, _g) = logits.device_ptr_mut(&self.stream);
            let o = out.output_ptrs(&self.stream, false);
            let f = ByValue(FallbackParams {
                list: list_ptr as *const u32,
                logits: logits_ptr as *mut f32,
                hidden: std::ptr::null(),
                weight: std::ptr::null(),
                gathered: std::ptr::null_mut(),
                mask: std::ptr::null(),
                rows: row_params as *const RowParams,
                truncation: truncation as *const Truncation,
                adj_offsets: std::ptr::null(),
                adjusted: std::ptr::null(),
                tokens: o.tokens as *mut u32,
                scores: o.scores as *mut f32,
                logprobs: std::ptr::null_mut(),
                raw_logprobs: std::ptr::null_mut(),
                logsumexp: std::ptr::null_mut(),
                raw_logsumexp: std::ptr::null(),
                v: v as u32,
                d: 8,
                samples: 1,
                mask_words: 0,
                softcap: 0.0,
                elem: ElementType::Bf16, // no hidden states or weight are read
                top: TopOutputs::OFF,
            });
            // SAFETY: the list holds b rows (uploaded above), the logits `b × v` floats (checked), the
            // row parameters and truncation `b` entries, the outputs `b`; no mask, adjustments or
            // log-probability outputs (null), so hidden and weight are never read.
            unsafe { self.stream.launch_builder(&self.fallback_sample).arg(&f).launch(fallback_sample_cfg(b)) }?;
            Ok(())
        })();
        out.truncation = taken;
        result
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
