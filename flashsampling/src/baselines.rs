//! Unfused baselines for the benchmark, on the same stream as the fused kernel:
//! cuBLAS bf16 GEMM to f32 logits, then either this crate's softmax + inverse-CDF multinomial kernel
//! pair or its Gumbel-max kernel over the materialized logits (what FlashInfer's
//! `sampling_from_logits` does). Not part of the sampling API.

use std::sync::Arc;

use cudarc::cublas::{CudaBlas, result::gemm_ex, sys as blas};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use flashsampling_kernels::Candidate;
use flashsampling_kernels::config::{
    BASELINE_SMEM_BYTES, BASELINE_THREADS, GUMBEL_LOGITS_ENTRY, LOGITS_CHUNK, LOGSOFTMAX_GATHER_ENTRY,
    MULTINOMIAL_ENTRY, REDUCE_ENTRY, REDUCE_ROWS_PER_BLOCK, REDUCE_THREADS_PER_BLOCK, REJECTION_ENTRY, SOFTMAX_ENTRY,
    STREAM_READ_ENTRY, STREAM_READ_THREADS,
};
use flashsampling_kernels::params::{LogitsParams, ReduceParams, RejectionParams, StreamReadParams};
use half::bf16;

use crate::error::{Error, Result};
use crate::gpu::ByValue;
use crate::{GpuBackend, PTX_TEST, SamplingParams};

/// Device buffers of the unfused pipelines for one (B, V).
pub struct UnfusedBuffers {
    /// `[B, V]` f32 logits written by the GEMM.
    pub logits: CudaSlice<f32>,
    /// `[B, V]` f32 probabilities (softmax output).
    pub probs: CudaSlice<f32>,
    /// `[B, n_chunks]` candidates of the Gumbel baseline.
    pub candidates: CudaSlice<u64>,
    /// `[B]` tokens.
    pub tokens: CudaSlice<u32>,
    /// `[B]` scores.
    pub scores: CudaSlice<f32>,
    /// `[B]` stream ids.
    pub streams: CudaSlice<u64>,
    b: usize,
    v: usize,
    /// Slabs of `logits` the Gumbel baseline reads (`[slabs, B, V]`: the all-gathered logits of
    /// `slabs` vocab shards of `V` entries each); 1 otherwise.
    slabs: usize,
    /// Global vocab index of slab 0's first entry (a rank's shard offset).
    v_offset: usize,
}

impl UnfusedBuffers {
    /// The logits the Gumbel baseline reads are `[slabs, B, V]` (all-gathered shards) and start at
    /// global vocab index `v_offset`; `logits` must hold that many. For the tensor-parallel baselines.
    pub fn set_slabs(&mut self, slabs: usize, v_offset: usize) -> Result<()> {
        let n = slabs * self.b * self.v;
        if slabs == 0 || self.logits.len() < n {
            return Err(Error::LengthMismatch { buffer: "baseline logits", expected: n, actual: self.logits.len() });
        }
        let n_chunks = self.v.div_ceil(LOGITS_CHUNK as usize);
        if self.candidates.len() < slabs * self.b * n_chunks {
            self.candidates = self.stream_alloc_like(slabs * self.b * n_chunks)?;
        }
        self.slabs = slabs;
        self.v_offset = v_offset;
        Ok(())
    }

    fn stream_alloc_like(&self, n: usize) -> Result<CudaSlice<u64>> {
        Ok(self.candidates.stream().alloc_zeros(n)?)
    }

    /// Batch rows.
    pub fn batch(&self) -> usize {
        self.b
    }
}

/// The baselines: a cuBLAS handle and the baseline kernels, on the fused backend's stream.
pub struct Baselines {
    blas: CudaBlas,
    stream: Arc<CudaStream>,
    gumbel: CudaFunction,
    softmax: CudaFunction,
    multinomial: CudaFunction,
    logsoftmax_gather: CudaFunction,
    rejection: CudaFunction,
    reduce: CudaFunction,
    stream_read: CudaFunction,
}

// SAFETY: `#[repr(C)]`, `Copy`, plain integers and device addresses (as `ByValue`'s others).
unsafe impl cudarc::driver::DeviceRepr for ByValue<StreamReadParams> {}
// SAFETY: as above (`#[repr(C)]`, `Copy`, integers and device addresses).
unsafe impl cudarc::driver::DeviceRepr for ByValue<RejectionParams> {}

impl Baselines {
    /// Creates the cuBLAS handle (needs libcublas at run time) and loads the baseline kernels.
    pub fn new(gpu: &GpuBackend) -> Result<Self> {
        let stream = gpu.stream().clone();
        let blas = CudaBlas::new(stream.clone())?;
        let module = gpu.context().load_module(Ptx::from_src(PTX_TEST.text()?))?;
        Ok(Self {
            blas,
            gumbel: module.load_function(GUMBEL_LOGITS_ENTRY)?,
            softmax: module.load_function(SOFTMAX_ENTRY)?,
            multinomial: module.load_function(MULTINOMIAL_ENTRY)?,
            logsoftmax_gather: module.load_function(LOGSOFTMAX_GATHER_ENTRY)?,
            rejection: module.load_function(REJECTION_ENTRY)?,
            reduce: module.load_function(REDUCE_ENTRY)?,
            stream_read: module.load_function(STREAM_READ_ENTRY)?,
            stream,
        })
    }

    /// Reads `src` once (the read-only streaming kernel: 16-byte loads, four in flight per thread,
    /// `blocks` blocks), folding it into one word per block of `out` (at least `blocks` words).
    /// `src` (any element type: a buffer of bytes, or an LM head's weight) is used in whole 16-byte
    /// chunks and must start 16-byte aligned.
    pub fn stream_read<T>(&self, src: &CudaView<'_, T>, out: &mut CudaSlice<u32>, blocks: u32) -> Result<()> {
        if out.len() < blocks as usize || blocks == 0 {
            return Err(Error::LengthMismatch {
                buffer: "stream_read output",
                expected: blocks as usize,
                actual: out.len(),
            });
        }
        let (s, _s) = src.device_ptr(&self.stream);
        if s % 16 != 0 {
            return Err(Error::Misaligned { buffer: "stream_read source", address: s, alignment: 16 });
        }
        let (o, _o) = out.device_ptr_mut(&self.stream);
        let p = ByValue(StreamReadParams {
            src: s as *const [u32; 4],
            out: o as *mut u32,
            chunks: (src.len() * size_of::<T>() / 16) as u64,
        });
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (STREAM_READ_THREADS, 1, 1),
            shared_mem_bytes: 8 * STREAM_READ_THREADS / 32,
        };
        // SAFETY: `src` holds `chunks` whole 16-byte chunks from a 16-byte-aligned start (checked
        // above), `out` `blocks` words; both this stream's.
        unsafe { self.stream.launch_builder(&self.stream_read).arg(&p).launch(cfg) }?;
        Ok(())
    }

    /// Buffers for batch `b`, vocab `v` (`v % 4 == 0`) with the row streams of `params`.
    pub fn alloc(&self, b: usize, v: usize, params: &SamplingParams) -> Result<UnfusedBuffers> {
        self.alloc_slabs(b, v, 1, params)
    }

    /// Buffers with the `[B, V]` logits only (the other buffers hold one entry): for [`Self::gemm`]
    /// and [`Self::logsoftmax_gather`], whose prefill sizes would not fit the probabilities too.
    pub fn alloc_logits(&self, b: usize, v: usize) -> Result<UnfusedBuffers> {
        Ok(UnfusedBuffers {
            logits: self.stream.alloc_zeros(b * v)?,
            probs: self.stream.alloc_zeros(1)?,
            candidates: self.stream.alloc_zeros(1)?,
            tokens: self.stream.alloc_zeros(1)?,
            scores: self.stream.alloc_zeros(1)?,
            streams: self.stream.alloc_zeros(1)?,
            b,
            v,
            slabs: 1,
            v_offset: 0,
        })
    }

    /// [`Self::alloc`] with logits for `slabs` shards of `v` entries each (`[slabs, B, V]`).
    pub fn alloc_slabs(&self, b: usize, v: usize, slabs: usize, params: &SamplingParams) -> Result<UnfusedBuffers> {
        if v % 4 != 0 {
            return Err(Error::HiddenNotAligned { d: v, multiple: 4 });
        }
        let n_chunks = v.div_ceil(LOGITS_CHUNK as usize);
        let streams = params.streams_for(b).ok_or_else(|| Error::LengthMismatch {
            buffer: "streams",
            expected: b,
            actual: params.streams.as_ref().map_or(0, Vec::len),
        })?;
        let slabs = slabs.max(1);
        Ok(UnfusedBuffers {
            logits: self.stream.alloc_zeros(slabs * b * v)?,
            probs: self.stream.alloc_zeros(b * v)?,
            candidates: self.stream.alloc_zeros(slabs * b * n_chunks)?,
            tokens: self.stream.alloc_zeros(b)?,
            scores: self.stream.alloc_zeros(b)?,
            streams: self.stream.clone_htod(&streams)?,
            b,
            v,
            slabs: 1,
            v_offset: 0,
        })
    }

    /// `logits[B, V] = hidden[B, D] · weight[V, D]ᵀ` with cuBLAS (bf16 in, f32 out, f32 compute).
    pub fn gemm(
        &self,
        hidden: &CudaView<'_, bf16>,
        weight: &CudaView<'_, bf16>,
        d: usize,
        buf: &mut UnfusedBuffers,
    ) -> Result<()> {
        let (b, v) = (buf.b, buf.v);
        let (h, _h) = hidden.device_ptr(&self.stream);
        let (w, _w) = weight.device_ptr(&self.stream);
        let (c, _c) = buf.logits.device_ptr_mut(&self.stream);
        gemm_bf16_f32(&self.blas, (v, b, d), w, h, c)
    }

    fn params(&self, buf: &mut UnfusedBuffers, params: &SamplingParams) -> Result<LogitsParams> {
        let transform = params.transform()?;
        // Buffers from `alloc_logits` hold the logits only: no sampling kernel may read them.
        let (b, v) = (buf.b, buf.v);
        let chunks = buf.slabs * b * v.div_ceil(LOGITS_CHUNK as usize);
        let short = [
            ("baseline probabilities", b * v, buf.probs.len()),
            ("baseline candidates", chunks, buf.candidates.len()),
            ("baseline tokens", b, buf.tokens.len()),
            ("baseline streams", b, buf.streams.len()),
        ];
        if let Some(&(buffer, expected, actual)) = short.iter().find(|(_, want, have)| have < want) {
            return Err(Error::LengthMismatch { buffer, expected, actual });
        }
        let (logits, _a) = buf.logits.device_ptr(&self.stream);
        let (probs, _b) = buf.probs.device_ptr_mut(&self.stream);
        let (cands, _c) = buf.candidates.device_ptr_mut(&self.stream);
        let (tokens, _d) = buf.tokens.device_ptr_mut(&self.stream);
        let (streams, _e) = buf.streams.device_ptr(&self.stream);
        Ok(LogitsParams {
            logits: logits as *const f32,
            probs: probs as *mut f32,
            candidates: cands as *mut Candidate,
            tokens: tokens as *mut u32,
            streams: streams as *const u64,
            seed: params.seed,
            b: buf.b as u32,
            v: buf.v as u32,
            n_chunks: buf.v.div_ceil(LOGITS_CHUNK as usize) as u32,
            sample: params.sample,
            transform,
            slabs: buf.slabs as u32,
            v_offset: buf.v_offset as u32,
        })
    }

    /// Softmax kernel (writes `probs`) then inverse-CDF multinomial kernel (writes `tokens`).
    pub fn softmax_multinomial(&self, buf: &mut UnfusedBuffers, params: &SamplingParams) -> Result<()> {
        self.launch_rows(buf, params, &[&self.softmax, &self.multinomial])
    }

    /// Softmax kernel alone: `probs = softmax(logits / T)` (the rejection sampler's input).
    pub fn softmax(&self, buf: &mut UnfusedBuffers, params: &SamplingParams) -> Result<()> {
        self.launch_rows(buf, params, &[&self.softmax])
    }

    /// The row kernels `funcs` (one block per row) with `buf`'s parameters, in order.
    fn launch_rows(&self, buf: &mut UnfusedBuffers, params: &SamplingParams, funcs: &[&CudaFunction]) -> Result<()> {
        let p = ByValue(self.params(buf, params)?);
        let cfg = LaunchConfig {
            grid_dim: (buf.b as u32, 1, 1),
            block_dim: (BASELINE_THREADS, 1, 1),
            shared_mem_bytes: BASELINE_SMEM_BYTES,
        };
        for f in funcs {
            // SAFETY: buffers sized [B, V] / [B] by `alloc` (checked by `params`), V % 4 == 0; grid
            // as the kernels document.
            unsafe { self.stream.launch_builder(f).arg(&p).launch(cfg) }?;
        }
        Ok(())
    }

    /// The unfused scoring of given tokens after [`gemm_bf16_f32`] wrote `logits` (`[B, V]` f32,
    /// `V % 4 == 0`): `out[r] = logits[r, tokens[r]] / T − logsumexp(logits[r] / T)`, one block per
    /// row (one pass over the row, the given token gathered; NaN for a token at or past V).
    pub fn logsoftmax_gather(
        &self,
        logits: &CudaSlice<f32>,
        (b, v): (usize, usize),
        tokens: &CudaSlice<u32>,
        out: &mut CudaSlice<f32>,
        params: &SamplingParams,
    ) -> Result<()> {
        if v % 4 != 0 {
            return Err(Error::HiddenNotAligned { d: v, multiple: 4 });
        }
        if logits.len() < b * v || tokens.len() < b || out.len() < b {
            return Err(Error::LengthMismatch {
                buffer: "scoring baseline buffers",
                expected: b * v,
                actual: logits.len(),
            });
        }
        let (l, _l) = logits.device_ptr(&self.stream);
        let (t, _t) = tokens.device_ptr(&self.stream);
        let (o, _o) = out.device_ptr_mut(&self.stream);
        let p = ByValue(LogitsParams {
            logits: l as *const f32,
            probs: o as *mut f32,
            candidates: std::ptr::null_mut(),
            tokens: t as *mut u32,
            streams: std::ptr::null(),
            seed: 0,
            b: b as u32,
            v: v as u32,
            n_chunks: 0,
            sample: 0,
            transform: params.transform()?,
            slabs: 1,
            v_offset: 0,
        });
        let cfg = LaunchConfig {
            grid_dim: (b as u32, 1, 1),
            block_dim: (BASELINE_THREADS, 1, 1),
            shared_mem_bytes: BASELINE_SMEM_BYTES,
        };
        // SAFETY: logits hold B·V entries (V % 4 == 0), tokens and out B each (checked; a token at
        // or past V gives NaN, unread); one block per row as the kernel documents.
        unsafe { self.stream.launch_builder(&self.logsoftmax_gather).arg(&p).launch(cfg) }?;
        Ok(())
    }

    /// The classic speculative-decoding rejection sampler (`rejection_rows`) over `target`
    /// (`[R·(K + 1), V]` probabilities, `softmax_multinomial`'s or `softmax_rows`' output) and the
    /// drafts' probabilities `draft` (`[R·K, V]`) and tokens (`[R·K]`, each below V): `tokens`
    /// (`[R·(K + 1)]`) gets each request's accepted drafts and its next token, `accepted` (`[R]`) the
    /// accepted count. `V % 4 == 0`.
    #[allow(clippy::too_many_arguments)]
    pub fn rejection(
        &self,
        target: &CudaSlice<f32>,
        draft: &CudaSlice<f32>,
        draft_tokens: &CudaSlice<u32>,
        (requests, k, v): (usize, usize, usize),
        tokens: &mut CudaSlice<u32>,
        accepted: &mut CudaSlice<u32>,
        seed: u64,
    ) -> Result<()> {
        if v % 4 != 0 {
            return Err(Error::HiddenNotAligned { d: v, multiple: 4 });
        }
        let rows = requests * (k + 1);
        let short = [
            ("target probabilities", rows * v, target.len()),
            ("draft probabilities", requests * k * v, draft.len()),
            ("draft tokens", requests * k, draft_tokens.len()),
            ("emitted tokens", rows, tokens.len()),
            ("accepted counts", requests, accepted.len()),
        ];
        if let Some(&(buffer, expected, actual)) = short.iter().find(|(_, want, have)| have < want) {
            return Err(Error::LengthMismatch { buffer, expected, actual });
        }
        let (t, _t) = target.device_ptr(&self.stream);
        let (q, _q) = draft.device_ptr(&self.stream);
        let (d, _d) = draft_tokens.device_ptr(&self.stream);
        let (o, _o) = tokens.device_ptr_mut(&self.stream);
        let (a, _a) = accepted.device_ptr_mut(&self.stream);
        let p = ByValue(RejectionParams {
            target: t as *const f32,
            draft: q as *const f32,
            draft_tokens: d as *const u32,
            tokens: o as *mut u32,
            accepted: a as *mut u32,
            seed,
            requests: requests as u32,
            k: k as u32,
            v: v as u32,
            _pad: 0,
        });
        let cfg = LaunchConfig {
            grid_dim: (requests as u32, 1, 1),
            block_dim: (BASELINE_THREADS, 1, 1),
            shared_mem_bytes: BASELINE_SMEM_BYTES,
        };
        // SAFETY: every buffer holds what the kernel reads or writes (checked above), V % 4 == 0;
        // the draft tokens below V are the caller's contract (a benchmark baseline); one block per
        // request as the kernel documents.
        unsafe { self.stream.launch_builder(&self.rejection).arg(&p).launch(cfg) }?;
        Ok(())
    }

    /// Gumbel-max kernel over the logits (candidates per chunk), then the candidate reduction.
    pub fn gumbel_over_logits(&self, buf: &mut UnfusedBuffers, params: &SamplingParams) -> Result<()> {
        let (tokens, _t) = buf.tokens.device_ptr_mut(&self.stream);
        let (scores, _s) = buf.scores.device_ptr_mut(&self.stream);
        // The guards are dropped before the launch (it borrows `buf` again): the buffers are this
        // stream's only, so the launch stays ordered after their last use without their events.
        drop((_t, _s));
        // SAFETY: the buffer's own tokens and scores, B entries each, on this stream.
        unsafe { self.gumbel_over_logits_into(buf, params, tokens, scores) }
    }

    /// [`Self::gumbel_over_logits`] writing the tokens and scores to `tokens` and `scores`.
    ///
    /// # Safety
    /// `tokens` and `scores` are device addresses of `B` u32 / f32 on this stream's context, not
    /// in use by another stream.
    pub unsafe fn gumbel_over_logits_into(
        &self,
        buf: &mut UnfusedBuffers,
        params: &SamplingParams,
        tokens: u64,
        scores: u64,
    ) -> Result<()> {
        let p = self.params(buf, params)?;
        let cfg = LaunchConfig {
            grid_dim: (buf.slabs as u32 * buf.b as u32 * p.n_chunks, 1, 1),
            block_dim: (BASELINE_THREADS, 1, 1),
            shared_mem_bytes: BASELINE_SMEM_BYTES,
        };
        let r = ByValue(ReduceParams {
            candidates: p.candidates,
            tokens: tokens as *mut u32,
            scores: scores as *mut f32,
            b: buf.b as u32,
            n_candidates: p.slabs * p.n_chunks,
        });
        let rcfg = LaunchConfig {
            grid_dim: ((buf.b as u32).div_ceil(REDUCE_ROWS_PER_BLOCK), 1, 1),
            block_dim: (REDUCE_THREADS_PER_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let p = ByValue(p);
        // SAFETY: as in `softmax_multinomial`; logits hold slabs · B · V, candidates B · slabs ·
        // n_chunks; the outputs B (the caller's contract).
        unsafe {
            self.stream.launch_builder(&self.gumbel).arg(&p).launch(cfg)?;
            self.stream.launch_builder(&self.reduce).arg(&r).launch(rcfg)?;
        }
        Ok(())
    }

    /// The cuBLAS handle (for the compute-floor GEMM of the benchmark).
    pub fn blas(&self) -> &CudaBlas {
        &self.blas
    }
}

/// Column-major cuBLAS call for row-major operands: `C[n, m] = B[n, k] · A[m, k]ᵀ` where `a` is
/// `[m, k]` bf16 (row-major), `b` is `[n, k]` bf16 and `c` is `[n, m]` f32 (row-major). With
/// `(m, n, k) = (V, B, D)`, `a` = weight, `b` = hidden: logits.
pub fn gemm_bf16_f32(blas: &CudaBlas, (m, n, k): (usize, usize, usize), a: u64, b: u64, c: u64) -> Result<()> {
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: the caller passes device buffers of m·k, n·k bf16 and n·m f32 on the handle's stream.
    unsafe {
        gemm_ex(
            *blas.handle(),
            blas::cublasOperation_t::CUBLAS_OP_T,
            blas::cublasOperation_t::CUBLAS_OP_N,
            m as i32,
            n as i32,
            k as i32,
            &alpha as *const f32 as *const _,
            a as *const _,
            blas::cudaDataType::CUDA_R_16BF,
            k as i32,
            b as *const _,
            blas::cudaDataType::CUDA_R_16BF,
            k as i32,
            &beta as *const f32 as *const _,
            c as *mut _,
            blas::cudaDataType::CUDA_R_32F,
            m as i32,
            blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(Error::from)
}
