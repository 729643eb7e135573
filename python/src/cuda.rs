//! The CUDA path: PyTorch CUDA tensors in (their device addresses, from `tensor.data_ptr()`), tokens and
//! scores written into tensors that Python allocated, all ordered on PyTorch's current stream.
//!
//! **Contexts.** `GpuBackend::new(ordinal)` opens the device through cudarc's `CudaContext::new`, which
//! retains the device's *primary* context (`cuDevicePrimaryCtxRetain`): the context the CUDA runtime,
//! and so PyTorch, uses. PyTorch's pointers and streams are therefore valid in the backend's context.
//! One backend per device ordinal is opened on first use and kept for the life of the process.
//!
//! **Memory.** PyTorch owns every buffer passed in. They are wrapped for one call as cudarc slices
//! ([`Borrowed`]) and leaked afterwards, never freed here. No input is copied, and no output: the
//! kernels write the tokens and scores (and, when asked for, the fused log-probabilities, raw
//! log-probabilities, log-sum-exps and top log-probabilities) straight into PyTorch's output tensors
//! (`GpuBackend::sample_device_into`); the backend's own [`DeviceSamples`] (kept per device, reused)
//! hold the call's scratch. Nothing goes through the host.
//!
//! **Streams.** Every call is enqueued on PyTorch's current stream ([`GpuBackend::on_stream`]): no
//! event and no host synchronization. So the call is a PyTorch operation on the current stream: it
//! runs after the work that produced its inputs, later work on that stream sees the tokens, and memory
//! that PyTorch's caching allocator hands out again on that stream is reused only after the kernel has
//! read it. (As for any PyTorch operation, memory freed and reused on *another* stream needs the
//! caller's `Tensor.record_stream`.) The backend's reused buffers live on its own stream; a call on
//! another PyTorch stream than the last one is ordered after it by the buffers' fence.
//!
//! **CUDA graphs.** A call made while PyTorch's current stream captures (`torch.cuda.graph`) is
//! recorded into the graph (`GpuBackend::sample_device_rows`' rules: the per-row keys from CUDA
//! tensors, no host mask or penalties, the same call made once before the capture); the buffers it
//! used then belong to that graph for the life of the process, and later calls get new ones.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, LazyLock, Mutex};

use cudarc::driver::sys::{self, CUdevice_attribute};
use cudarc::driver::{CudaSlice, CudaStream, CudaView};
use flashsampling::params::LogProbs;
use flashsampling::{
    DeviceMatrix, DeviceOutputs, DeviceSamples, Element, Error, GpuBackend, SamplingParams, ScoreOutputs, ScoreTop,
};
use half::{bf16, f16};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{ControlArgs, to_py};

/// One device's backend and its reused buffers.
struct Device {
    gpu: GpuBackend,
    /// The fused kernels' scratch (candidates, row parameters, truncation buffers, ...); allocated on
    /// the first call and regrown by `sample_device_into` when a larger batch comes.
    out: Option<DeviceSamples>,
    /// Buffers that captured CUDA graphs use (a call recorded into a graph binds `out` to it): kept
    /// for the life of the process, since a graph may replay at any time.
    graphs: Vec<DeviceSamples>,
}

impl Device {
    fn open(ordinal: usize) -> Result<Self, Error> {
        let gpu = GpuBackend::new(ordinal)?;
        // SAFETY: every buffer of this device is used on PyTorch's current stream of the call, or
        // is the backend's own, which orders itself across streams (its fences); the wrapped tensors'
        // ordering is PyTorch's (see the module documentation). Without cudarc's events a call can be
        // recorded into a CUDA graph (`GpuBackend::sample_device_rows`).
        unsafe { gpu.context().disable_event_tracking() };
        Ok(Self { gpu, out: None, graphs: Vec::new() })
    }
}

impl Device {
    /// PyTorch's stream `torch_stream` of this device wrapped for one call, the backend's handle on
    /// it, and the reused buffers ready for a `b × v` call (buffers a captured graph uses are kept
    /// for it, and the call gets new ones).
    ///
    /// # Safety
    /// `torch_stream` is PyTorch's current stream of this device: a live stream of the device's
    /// primary context, which is the backend's (see the module documentation), kept alive by PyTorch
    /// during the call. The wrapper never destroys it; drop it by the end of the call (nothing
    /// allocated on it outlives the call: the backend's buffers live on its own stream).
    unsafe fn on_torch(
        &mut self,
        torch_stream: u64,
        (b, v): (usize, usize),
    ) -> Result<(Arc<CudaStream>, GpuBackend), Error> {
        let ctx = self.gpu.context().clone();
        // SAFETY: the caller's contract.
        let stream = unsafe { ctx.wrap_borrowed_stream(torch_stream as usize as sys::CUstream) };
        let on_torch = self.gpu.on_stream(stream.clone())?;
        if self.out.as_ref().is_some_and(DeviceSamples::is_captured) {
            // Bound to a graph by the last call: kept for it; the next calls get new buffers.
            self.graphs.extend(self.out.take());
        }
        if self.out.is_none() {
            self.out = Some(self.gpu.alloc_samples(b, v)?);
        }
        Ok((stream, on_torch))
    }
}

/// The open devices by ordinal. One lock for all: a call holds it for its host-side work only (the
/// launches are asynchronous), and it serializes the use of each device's `DeviceSamples`.
static DEVICES: LazyLock<Mutex<HashMap<usize, Device>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Runs `f` on the device `ordinal`, opening it first if needed (a failed open is not cached: the
/// next call tries again).
fn with_device<R>(ordinal: usize, f: impl FnOnce(&mut Device) -> Result<R, Error>) -> Result<R, Error> {
    // A panic while the lock was held cannot leave a device half-updated in a way that matters: the
    // next launch re-checks every buffer (`sample_device`), so a poisoned lock is taken over.
    let mut devices = DEVICES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let device = match devices.entry(ordinal) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(Device::open(ordinal)?),
    };
    f(device)
}

/// Device memory that PyTorch owns, seen for one call as a cudarc slice on PyTorch's stream. It is
/// never freed here: dropping it (also on an early error return or a panic) leaks the slice, which
/// hands the address back and drops only cudarc's bookkeeping (two events).
struct Borrowed<T>(Option<CudaSlice<T>>);

impl<T> Borrowed<T> {
    /// Wraps `len` elements of `T` at device address `address`.
    ///
    /// # Safety
    ///
    /// `address .. address + len · size_of::<T>()` must lie in one live allocation of the context of
    /// `stream`, hold valid values of `T` wherever it is read, and stay allocated until the work this
    /// call enqueues on it has completed (the caller keeps the tensor alive, and PyTorch reuses its
    /// memory on `stream`, PyTorch's current stream, after that work: see the module documentation).
    unsafe fn new(stream: &Arc<CudaStream>, address: u64, len: usize) -> Self {
        // SAFETY: forwarded to the caller (above); the slice is leaked in `drop`, so cudarc never frees
        // memory it does not own.
        Self(Some(unsafe { stream.upgrade_device_ptr::<T>(address, len) }))
    }
}

impl<T> Deref for Borrowed<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        self.0.as_ref().expect("present until drop")
    }
}

impl<T> DerefMut for Borrowed<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        self.0.as_mut().expect("present until drop")
    }
}

impl<T> Drop for Borrowed<T> {
    fn drop(&mut self) {
        if let Some(slice) = self.0.take() {
            // Not freed: PyTorch owns the memory. (`leak` makes PyTorch's stream wait on the slice's
            // own read/write events, which were recorded on that same stream: no effect.)
            let _ = slice.leak();
        }
    }
}

/// `rows · cols` as a length, or a `ValueError` naming the buffer.
fn elements(buffer: &str, rows: usize, cols: usize) -> PyResult<usize> {
    rows.checked_mul(cols)
        .filter(|&n| n <= isize::MAX as usize / 2)
        .ok_or_else(|| PyValueError::new_err(format!("{buffer}: {rows} × {cols} elements is too large")))
}

/// PyTorch's output tensors of one call, by device address: `len` elements each (`B·n`), int32 tokens
/// and float32 for the rest. The log-probability ones are given exactly when the call asks for them.
struct Outputs {
    tokens: u64,
    scores: u64,
    /// Processed log-probabilities (with `LogProbs::Processed` or more).
    logprobs: Option<u64>,
    /// Raw log-probabilities (with `LogProbs::ProcessedAndRaw`).
    raw_logprobs: Option<u64>,
    /// Each sample row's log-sum-exp (`[B·n]`, as the backend writes it; Python keeps one per request
    /// row).
    logsumexp: Option<u64>,
    len: usize,
    /// Top log-probabilities (with `top_logprobs = k > 0`): int32 tokens and float32
    /// log-probabilities, `[B, k]` each: their addresses and `B·k`.
    top: Option<(u64, u64, usize)>,
}

/// PyTorch's output tensors of one call wrapped for it ([`Outputs::borrow`]).
struct BorrowedOutputs {
    tokens: Borrowed<u32>,
    scores: Borrowed<f32>,
    logprobs: Option<Borrowed<f32>>,
    raw_logprobs: Option<Borrowed<f32>>,
    logsumexp: Option<Borrowed<f32>>,
    top: Option<(Borrowed<u32>, Borrowed<f32>)>,
}

impl BorrowedOutputs {
    /// The tensors as the outputs of a call.
    fn views(&mut self) -> DeviceOutputs<'_> {
        DeviceOutputs {
            tokens: self.tokens.as_view_mut(),
            scores: self.scores.as_view_mut(),
            logprobs: self.logprobs.as_mut().map(|l| l.as_view_mut()),
            raw_logprobs: self.raw_logprobs.as_mut().map(|l| l.as_view_mut()),
            logsumexp: self.logsumexp.as_mut().map(|l| l.as_view_mut()),
            top_logprobs: self.top.as_mut().map(|(t, l)| (t.as_view_mut(), l.as_view_mut())),
        }
    }
}

impl Outputs {
    /// The tensors wrapped as cudarc slices on `stream` for one call.
    ///
    /// # Safety
    /// Every address is the data of a live CUDA tensor of `stream`'s device with `self.len` elements
    /// (the top ones: their `B·k`) of the type's size, held by the caller until the work enqueued on
    /// them has completed.
    unsafe fn borrow(&self, stream: &Arc<CudaStream>) -> BorrowedOutputs {
        let len = self.len;
        // SAFETY: forwarded contract (each wrapper is leaked at drop, never freed here).
        unsafe {
            BorrowedOutputs {
                tokens: Borrowed::new(stream, self.tokens, len),
                scores: Borrowed::new(stream, self.scores, len),
                logprobs: self.logprobs.map(|a| Borrowed::new(stream, a, len)),
                raw_logprobs: self.raw_logprobs.map(|a| Borrowed::new(stream, a, len)),
                logsumexp: self.logsumexp.map(|a| Borrowed::new(stream, a, len)),
                top: self.top.map(|(t, l, n)| (Borrowed::new(stream, t, n), Borrowed::new(stream, l, n))),
            }
        }
    }

    /// Checks that the log-probability tensors given are the ones `logprobs` fills (a `ValueError`
    /// otherwise): none when off, processed ones and log-sum-exps with `Processed`, raw ones too with
    /// `ProcessedAndRaw`.
    fn check(&self, logprobs: LogProbs, top_logprobs: u32) -> PyResult<()> {
        if self.top.is_some() != (top_logprobs > 0) {
            let verb = if top_logprobs > 0 { "needs" } else { "does not fill" };
            return Err(PyValueError::new_err(format!(
                "top_tokens_ptr, top_logprobs_ptr: top_logprobs = {top_logprobs} {verb} these output tensors"
            )));
        }
        let (option, wanted) = match logprobs {
            LogProbs::Off => ("off", [false, false, false]),
            LogProbs::Processed => ("processed", [true, false, true]),
            LogProbs::ProcessedAndRaw => ("processed_and_raw", [true, true, true]),
        };
        let given = [self.logprobs, self.raw_logprobs, self.logsumexp].map(|p| p.is_some());
        let names = ["logprobs_ptr", "raw_logprobs_ptr", "logsumexp_ptr"];
        for ((name, want), have) in names.into_iter().zip(wanted).zip(given) {
            if want != have {
                let verb = if want { "needs" } else { "does not fill" };
                return Err(PyValueError::new_err(format!("{name}: logprobs = {option:?} {verb} this output tensor")));
            }
        }
        Ok(())
    }
}

/// Samples on the GPU backend of device `ordinal` from PyTorch CUDA tensors given by address:
/// `hidden_ptr` `[b, hidden_d]` and `weight_ptr` `[v, weight_d]` row-major bf16 (f16 with `f16`; 16-byte aligned,
/// rows packed back to back), ordered on `torch_stream` (PyTorch's current stream of that device, the
/// raw `CUstream`), with the call's `controls` ([`ControlArgs`], as for `sample_cpu`). Writes `out_len` u32 tokens (`[B]`, or `[B, n]`) to `tokens_ptr` and as many f32
/// winning scores to `scores_ptr` (tensors Python allocated on the device), ordered on `torch_stream`
/// as well. With the control `logprobs` other than "off", also `out_len` f32 processed log-probabilities to
/// `logprobs_ptr`, the sample rows' log-sum-exps of `logits / T` to `logsumexp_ptr` (`[B·n]`: the
/// same value for the `n` samples of a row, NaN for a greedy row) and, with "processed_and_raw", the
/// raw log-probabilities to `raw_logprobs_ptr`: the GPU backend's fused values, written there by its
/// kernels (these tensors must be given exactly when the option fills them). The logit bias, the
/// penalties and the token lists are host data: the backend uploads the sparse adjustments they make.
/// `mask_ptr` (with `mask_len` elements) is an int32 CUDA tensor of allowed-token words on this device,
/// read there (instead of the control `mask_words` from the host). With the control `top_logprobs` =
/// `k > 0`, each row's top log-probabilities land in `top_tokens_ptr` (int32, `[b, k]`, -1 past a
/// row's last) and `top_logprobs_ptr` (float32, `[b, k]`, NaN past it), given exactly then. Returns
/// without waiting for the GPU.
#[pyfunction]
#[pyo3(signature = (
    ordinal, torch_stream, hidden_ptr, b, hidden_d, weight_ptr, v, weight_d, tokens_ptr, scores_ptr, out_len,
    controls, *, logprobs_ptr=None, raw_logprobs_ptr=None, logsumexp_ptr=None, f16=false, mask_ptr=None, mask_len=0,
    top_tokens_ptr=None, top_logprobs_ptr=None, rows_ptr=None, rows_len=0
))]
#[allow(clippy::too_many_arguments)]
pub fn sample_cuda(
    py: Python<'_>,
    ordinal: usize,
    torch_stream: u64,
    hidden_ptr: u64,
    b: usize,
    hidden_d: usize,
    weight_ptr: u64,
    v: usize,
    weight_d: usize,
    tokens_ptr: u64,
    scores_ptr: u64,
    out_len: usize,
    controls: &Bound<'_, PyDict>,
    logprobs_ptr: Option<u64>,
    raw_logprobs_ptr: Option<u64>,
    logsumexp_ptr: Option<u64>,
    f16: bool,
    mask_ptr: Option<u64>,
    mask_len: usize,
    top_tokens_ptr: Option<u64>,
    top_logprobs_ptr: Option<u64>,
    rows_ptr: Option<u64>,
    rows_len: usize,
) -> PyResult<()> {
    // The shapes first (the buffers' lengths are their shapes' here: only pointers cross), so that
    // nothing is built per row of a `b` past the library's limits.
    flashsampling::params::check_inputs(
        (b, hidden_d, b.saturating_mul(hidden_d)),
        (v, weight_d, v.saturating_mul(weight_d)),
    )
    .map_err(to_py)?;
    let params = ControlArgs::from_dict(controls)?.params(b, v)?;
    let top = match (top_tokens_ptr, top_logprobs_ptr) {
        (Some(t), Some(l)) => Some((t, l, elements("top log-probabilities", b, params.top_logprobs as usize)?)),
        (None, None) => None,
        _ => return Err(PyValueError::new_err("top_tokens_ptr and top_logprobs_ptr: give both or neither")),
    };
    let outputs = Outputs {
        tokens: tokens_ptr,
        scores: scores_ptr,
        logprobs: logprobs_ptr,
        raw_logprobs: raw_logprobs_ptr,
        logsumexp: logsumexp_ptr,
        len: out_len,
        top,
    };
    outputs.check(params.logprobs, params.top_logprobs)?;
    if Some(out_len) != b.checked_mul(params.n as usize) {
        return Err(PyValueError::new_err(format!(
            "out_len: {out_len}, but the call has B·n = {b}·{} sample rows",
            params.n
        )));
    }
    let hidden_len = elements("hidden states", b, hidden_d)?;
    let weight_len = elements("LM-head weight", v, weight_d)?;
    // The GIL is not needed from here on (no Python objects); opening a device loads the PTX modules.
    py.detach(|| {
        with_device(ordinal, |dev| {
            // SAFETY: `torch_stream` is PyTorch's current stream of device `ordinal`, read by the
            // Python side from `torch.cuda.current_stream(device)` (`Device::on_torch`'s contract).
            let (stream, on_torch) = unsafe { dev.on_torch(torch_stream, (b, v)) }?;
            let operands = ((hidden_ptr, hidden_len, b, hidden_d), (weight_ptr, weight_len, v, weight_d));
            // SAFETY: as for the operands below: `mask_ptr` is `data_ptr()` of a contiguous int32 CUDA
            // tensor of `mask_len` elements on this device, built by the Python side on PyTorch's current
            // stream (before this call's work on it) and held during the call.
            let mask = mask_ptr.map(|ptr| unsafe { Borrowed::<u32>::new(&stream, ptr, mask_len) });
            // SAFETY: as for the mask: `rows_ptr` is `data_ptr()` of a contiguous int64 CUDA tensor of
            // `rows_len` elements on this device, written on PyTorch's current stream before this call's
            // work and held during the call (u64 words of the same bits).
            let rows = rows_ptr.map(|ptr| unsafe { Borrowed::<u64>::new(&stream, ptr, rows_len) });
            // SAFETY: the output tensors are `data_ptr()` of contiguous CUDA tensors on this device that
            // Python allocated for this call (`torch.empty` on the current stream, `stream`, before the
            // kernels that write them) and holds during it, `out_len` elements each (`[B·n]`; int32 tokens
            // as u32, float32 for the rest), the top ones `B·k`; the kernels only write them.
            let mut outs = unsafe { outputs.borrow(&stream) };
            let mut into = outs.views();
            // SAFETY: the Python side passes `data_ptr()` of CUDA tensors of device `ordinal` (checked
            // there) with exactly these many elements, contiguous, of the dtype `f16` says (both
            // torch.float16, else both torch.bfloat16); it holds the tensors during the call, and the
            // work is on PyTorch's stream, which reuses their memory only after it.
            unsafe {
                let mask = mask.as_ref().map(|m| m.as_view());
                let rows = rows.as_ref().map(|r| r.as_view());
                if f16 {
                    launch::<f16>(dev, &on_torch, operands, &params, (mask.as_ref(), rows.as_ref()), &mut into)
                } else {
                    launch::<bf16>(dev, &on_torch, operands, &params, (mask.as_ref(), rows.as_ref()), &mut into)
                }
            }
        })
    })
    .map_err(to_py)
}

/// Scores one given token per row on PyTorch's current stream `torch_stream` of device `ordinal`
/// (`GpuBackend::score_device`): `tokens_ptr` is an int32 CUDA tensor of `b` token ids (ids at or
/// past V, or negative, score NaN), `out_ptr` a float32 CUDA tensor `[4, b]` that receives the
/// processed log-probabilities, the raw ones, the processed log-sum-exps and the raw ones, in that
/// order. With top log-probabilities (`controls`' `top_logprobs` = k > 0), `top_ptrs` are the
/// CUDA tensors that receive them: int32 tokens `[b, k]` (-1 past a row's last entry), float32
/// log-probabilities `[b, k]` and int32 ranks `[b]` of the given tokens (0 for an id outside the
/// vocabulary). The other arguments are [`sample_cuda`]'s (`controls` without keys, `n` or
/// log-probability options: they do not matter here). Returns without waiting for the GPU.
#[pyfunction]
#[pyo3(signature = (
    ordinal, torch_stream, hidden_ptr, b, hidden_d, weight_ptr, v, weight_d, tokens_ptr, out_ptr, controls, *,
    f16=false, mask_ptr=None, mask_len=0, top_ptrs=None
))]
#[allow(clippy::too_many_arguments)]
pub fn score_cuda(
    py: Python<'_>,
    ordinal: usize,
    torch_stream: u64,
    hidden_ptr: u64,
    b: usize,
    hidden_d: usize,
    weight_ptr: u64,
    v: usize,
    weight_d: usize,
    tokens_ptr: u64,
    out_ptr: u64,
    controls: &Bound<'_, PyDict>,
    f16: bool,
    mask_ptr: Option<u64>,
    mask_len: usize,
    top_ptrs: Option<(u64, u64, u64)>,
) -> PyResult<()> {
    flashsampling::params::check_inputs(
        (b, hidden_d, b.saturating_mul(hidden_d)),
        (v, weight_d, v.saturating_mul(weight_d)),
    )
    .map_err(to_py)?;
    let params = ControlArgs::from_dict(controls)?.params(b, v)?;
    let hidden_len = elements("hidden states", b, hidden_d)?;
    let weight_len = elements("LM-head weight", v, weight_d)?;
    let out_len = elements("scores", 4, b)?;
    let top_len = elements("top log-probabilities", b, params.top_logprobs as usize)?;
    py.detach(|| {
        with_device(ordinal, |dev| {
            // SAFETY: as in `sample_cuda`.
            let (stream, on_torch) = unsafe { dev.on_torch(torch_stream, (b, v)) }?;
            // SAFETY: `data_ptr()` of contiguous CUDA tensors of this device that Python made for this
            // call on PyTorch's current stream and holds during it: `b` int32 tokens (read as u32),
            // `[4, b]` float32 outputs (only written), with `top_ptrs` `[b, k]` int32 and float32
            // and `[b]` int32 outputs (only written), the mask's `mask_len` int32 words (read), the
            // operands' elements of the dtype `f16` says; the work is on that stream, which reuses
            // their memory only after it.
            unsafe {
                let tokens = Borrowed::<u32>::new(&stream, tokens_ptr, b);
                let mut out = Borrowed::<f32>::new(&stream, out_ptr, out_len);
                let mask = mask_ptr.map(|ptr| Borrowed::<u32>::new(&stream, ptr, mask_len));
                let mask = mask.as_ref().map(|m| m.as_view());
                let mut top = top_ptrs.map(|(t, l, r)| {
                    (
                        Borrowed::<u32>::new(&stream, t, top_len),
                        Borrowed::<f32>::new(&stream, l, top_len),
                        Borrowed::<u32>::new(&stream, r, b),
                    )
                });
                let mut scores = ScoreOutputs::rows_of(out.as_view_mut(), b)?;
                if let Some((t, l, r)) = top.as_mut() {
                    let (tokens, logprobs, ranks) = (t.as_view_mut(), l.as_view_mut(), r.as_view_mut());
                    scores = scores.with_top(ScoreTop { tokens, logprobs, ranks });
                }
                let operands = ((hidden_ptr, hidden_len, b, hidden_d), (weight_ptr, weight_len, v, weight_d));
                let call = (&tokens.as_view(), mask.as_ref());
                if f16 {
                    score::<f16>(dev, &on_torch, operands, &params, call, &mut scores)
                } else {
                    score::<bf16>(dev, &on_torch, operands, &params, call, &mut scores)
                }
            }
        })
    })
    .map_err(to_py)
}

/// The scoring launch by `gpu` on the tensors `hidden` and `weight` (elements `T`): `tokens` and the
/// optional device mask, into PyTorch's `[4, B]` output (`GpuBackend::score_device`).
///
/// # Safety
/// As for [`launch`].
unsafe fn score<T: Element>(
    dev: &mut Device,
    gpu: &GpuBackend,
    operands: (Operand, Operand),
    params: &SamplingParams,
    (tokens, mask): (&CudaView<'_, u32>, Option<&CudaView<'_, u32>>),
    scores: &mut ScoreOutputs<'_>,
) -> Result<(), Error> {
    // SAFETY: forwarded contract; `score_device` validates shapes before it reads anything.
    unsafe {
        on_operands::<T, _>(dev, gpu, operands, |h, w, out| gpu.score_device(h, w, params, tokens, mask, out, scores))
    }
}

/// A tensor given by address: `(address, elements, rows, cols)`.
type Operand = (u64, usize, usize, usize);

/// The fused launch by `gpu` (the device's backend on PyTorch's stream) on the tensors `hidden` and
/// `weight` (elements `T`), with the allowed-token words `mask` and the per-row parameter words
/// `rows` on the device if given, writing its results into PyTorch's output tensors `into` (the
/// device's buffers hold the scratch: `sample_device_into`).
///
/// # Safety
/// Both addresses are the data of live tensors of the device of `gpu` holding their stated number
/// of elements of `T`, held by the caller until the work enqueued here has completed.
unsafe fn launch<T: Element>(
    dev: &mut Device,
    gpu: &GpuBackend,
    operands: (Operand, Operand),
    params: &SamplingParams,
    (mask, rows): (Option<&CudaView<'_, u32>>, Option<&CudaView<'_, u64>>),
    into: &mut DeviceOutputs<'_>,
) -> Result<(), Error> {
    // SAFETY: forwarded contract; `sample_device_into` validates shapes (the mask's length too)
    // before it reads anything.
    unsafe {
        on_operands::<T, _>(dev, gpu, operands, |h, w, out| gpu.sample_device_into(h, w, params, rows, mask, out, into))
    }
}

/// `f` on the operands `hidden` and `weight` (elements `T`) as device matrices on `gpu`'s stream,
/// with the device's reused buffers.
///
/// # Safety
/// As for [`launch`]; `f` validates the shapes before it reads anything.
unsafe fn on_operands<T: Element, R>(
    dev: &mut Device,
    gpu: &GpuBackend,
    ((hidden_ptr, hidden_len, b, hidden_d), (weight_ptr, weight_len, v, weight_d)): (Operand, Operand),
    f: impl FnOnce(&DeviceMatrix<'_, T>, &DeviceMatrix<'_, T>, &mut DeviceSamples) -> Result<R, Error>,
) -> Result<R, Error> {
    // SAFETY: the caller's contract.
    let hidden = unsafe { Borrowed::<T>::new(gpu.stream(), hidden_ptr, hidden_len) };
    // SAFETY: as for `hidden`.
    let weight = unsafe { Borrowed::<T>::new(gpu.stream(), weight_ptr, weight_len) };
    let out = dev.out.as_mut().expect("allocated by the caller");
    let (h, w) = (
        DeviceMatrix { data: hidden.as_view(), rows: b, cols: hidden_d },
        DeviceMatrix { data: weight.as_view(), rows: v, cols: weight_d },
    );
    f(&h, &w, out)
}

/// The device `ordinal` as the GPU backend sees it (opening the backend if needed): its name, PCI
/// domain, bus and device ids (Python compares them with PyTorch's view of the same ordinal), and
/// whether the Hopper kernels are loaded.
#[pyfunction]
pub fn cuda_device_info(py: Python<'_>, ordinal: usize) -> PyResult<Bound<'_, PyDict>> {
    let (name, pci, hopper) = py
        .detach(|| {
            with_device(ordinal, |dev| {
                let ctx = dev.gpu.context();
                let mut pci = [0i32; 3];
                for (slot, attribute) in pci.iter_mut().zip([
                    CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
                    CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
                    CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
                ]) {
                    *slot = ctx.attribute(attribute)?;
                }
                Ok((dev.gpu.device_name(), pci, dev.gpu.hopper_kernels()))
            })
        })
        .map_err(to_py)?;
    let dict = PyDict::new(py);
    dict.set_item("name", name)?;
    dict.set_item("pci_domain_id", pci[0])?;
    dict.set_item("pci_bus_id", pci[1])?;
    dict.set_item("pci_device_id", pci[2])?;
    dict.set_item("hopper_kernels", hopper)?;
    Ok(dict)
}
