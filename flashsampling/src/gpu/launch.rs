//! The launches of a call: the per-row parameters uploaded, then the adjusted tokens' kernel, the
//! fused kernel (with programmatic dependent launch where it helps) and what follows it.

use super::*;

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
pub(super) unsafe fn launch_dependent<T: DeviceRepr>(
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

/// Where a call's per-row parameters come from: words to upload (skipped when the buffer holds them
/// already), or the device address of the caller's words (copied device to device).
pub(super) enum RowWords {
    Host(Vec<u64>),
    Device(u64),
}

/// The per-row parameters of `params` for `b` rows, `[B·n, 4]` words
/// ([`flashsampling_kernels::params::RowParams`]: seed, stream, the temperature's transform, sample
/// index and request): what [`GpuBackend::sample_device_rows`] takes from device memory. The
/// temperatures, seeds, streams, sample index or positions and `n` are validated as sampling
/// validates them ([`Error`] for a bad temperature or list length); the other controls do not enter.
///
/// ```
/// use flashsampling::{SamplingParams, gpu::row_params_words};
///
/// let words = row_params_words(&SamplingParams::new(0.5, 42).with_sample(7), 2)?;
/// assert_eq!(words.len(), 8);
/// assert_eq!((words[0], words[1]), (42, 0)); // seed, stream (row index by default)
/// assert_eq!(words[2], (2.0f32.to_bits() as u64) | ((0.5f32.to_bits() as u64) << 32)); // 1/T, noise scale T
/// assert_eq!(words[7], 7 | (1 << 32)); // sample index 7, request 1
/// # Ok::<(), flashsampling::Error>(())
/// ```
pub fn row_params_words(params: &SamplingParams, b: usize) -> Result<Vec<u64>> {
    // Only the fields the words hold: the per-token controls' checks need a vocabulary.
    let keys = SamplingParams {
        temperature: params.temperature,
        seed: params.seed,
        streams: params.streams.clone(),
        sample: params.sample,
        positions: params.positions.clone(),
        temperatures: params.temperatures.clone(),
        seeds: params.seeds.clone(),
        n: params.n,
        ..SamplingParams::new(1.0, 0)
    };
    crate::params::validate((b, 8, 8 * b), (1, 8, 8), &keys)?;
    GpuBackend::row_words(&keys, b, false)
}

impl GpuBackend {
    /// The per-row parameters of a validated call, `[B·n]`, as upload words (`noiseless`: a scoring
    /// call's rows, which draw no noise: [`Transform::noiseless`]).
    pub(super) fn row_words(params: &SamplingParams, b: usize, noiseless: bool) -> Result<Vec<u64>> {
        let mut words = Vec::with_capacity(4 * b * params.n as usize);
        for r in 0..b {
            let lengths = || Error::LengthMismatch {
                buffer: "streams",
                expected: b,
                actual: params.streams.as_ref().map_or(0, Vec::len),
            };
            let noise = params.row_noise(r).ok_or_else(lengths)?;
            // `validate` checked the per-row temperatures (finite, ≥ 0) and the lists' lengths.
            let t = params.row_temperature(r).ok_or_else(lengths)?;
            let transform = if noiseless { Transform::noiseless(t) } else { Transform::from_temperature(t) };
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
    pub(super) fn upload_and_launch(
        &self,
        shape: Shape,
        params: &SamplingParams,
        (hidden, weight, device_mask): (u64, u64, u64),
        words: RowWords,
        out: &mut DeviceSamples,
        launch: LaunchPlan,
        ranged: Ranged,
    ) -> Result<()> {
        let rows = out.b;
        match words {
            RowWords::Host(words) if words != out.uploaded_rows => {
                out.uploaded_rows.clear();
                self.stream.memcpy_htod(&words, &mut out.rows.slice_mut(..4 * rows))?;
                out.uploaded_rows = words;
            }
            RowWords::Host(_) => {}
            RowWords::Device(src) => {
                // The next host call uploads its words again (the buffer no longer holds these).
                out.uploaded_rows.clear();
                let (dst, _g) = out.rows.device_ptr_mut(&self.stream);
                // SAFETY: `src` holds the call's 4·rows words (checked, guarded by the caller until
                // after the launch), `dst` at least as many (`out` fits the launch), both this context's.
                unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, 32 * rows, self.stream.cu_stream()) }.result()?;
            }
        }
        let mut mask_buf = match &params.allowed {
            Some(m) => {
                if out.mask.as_ref().is_none_or(|b| b.len() < m.words.len()) {
                    out.mask = Some(self.on_home(|home| Ok(home.alloc_zeros::<u32>(m.words.len().max(1))?))?);
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
                out.mask = Some(self.on_home(|home| Ok(home.alloc_zeros::<u32>(len.max(1))?))?);
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
                out.expanded = Some(self.on_home(|home| Ok(unsafe { home.alloc::<u16>(len) }?))?);
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
            unsafe { self.stream.launch_builder(&self.k.expand).arg(&p).launch(cfg) }?;
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
            if launch.lse == LsePath::ExactRows {
                // The exact path's truncating call: no fused pass (`launch_exact_truncation`; one
                // GPU's: a rank's is refused before).
                let operands = (hidden, weight, mask, ranged.elem);
                return self.launch_exact_truncation(params, (shape.d, shape.v), operands, adjusted, out);
            }
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
    pub(super) fn launch_adjust(
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
            out.adj = Some(self.on_home(|home| Ok(home.alloc_zeros::<u32>(pack.len())?))?);
        }
        if out.adjusted.as_ref().is_none_or(|x| x.len() < 4 * e * n) {
            // SAFETY: written by the kernel below before the fused kernel reads it.
            out.adjusted = Some(self.on_home(|home| Ok(unsafe { home.alloc::<u32>(4 * e * n) }?))?);
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
        unsafe { self.stream.launch_builder(&self.k.adjust).arg(&p).launch(cfg) }?;
        Ok((base, results))
    }

    /// The fused launch, and `reduce_rows` after a log-probability launch (or a truncation launch
    /// of a tensor-parallel rank, whose results go to the exchange). A one-GPU truncation launch
    /// leaves its rows' reduction to the truncation step (`TruncateParams::reduce`): returns the
    /// launch's parameters for it.
    pub(super) fn launch_fused(
        &self,
        shape: Shape,
        params: &SamplingParams,
        (hidden, weight, mask): (u64, u64, u64),
        out: &mut DeviceSamples,
        launch: LaunchPlan,
        ranged: Ranged,
        adjusted: Option<(u64, u64)>,
    ) -> Result<FusedParams> {
        let loaded = self.launchable(launch.variant).expect("only loaded variants are chosen");
        let entry = loaded.entry(launch.epilogue);
        let variant = launch.variant;
        let rows = out.b;
        if variant.uses_tma() {
            let elem = ranged.elem;
            let key = TensorMapKey::of(launch, (hidden, weight, elem), shape);
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
        // The exact log-sum-exp path: the GEMM-fed kernels over `fallback_logits`' logits, then
        // `exact_mass_rows` (`launch_plan` chose the GEMM-fed variant for it).
        let exact = launch.lse == LsePath::Exact;
        let (exact_base, _x) = match (&mut out.exact, exact) {
            (Some(e), true) => {
                let (ptr, guard) = e.device_ptr_mut(&self.stream);
                (ptr, Some(guard)) // this backend's buffer, on its stream only
            }
            _ => (0, None),
        };
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
        // A rank's launch writes its results into the exchange buffer, `[6, rows]` words (`[8, rows]`
        // when it scores given tokens).
        let (tokens, scores) = match ranged.staging {
            Some(base) => {
                let field = |k: u64| base + 4 * k * rows as u64;
                if lp {
                    lp_ptrs[1..].copy_from_slice(&[field(2), field(3), field(4), field(5)]);
                }
                (field(0), field(1))
            }
            None => {
                // Caller-owned outputs, where given (`sample_device_into`).
                let dst = out.dst;
                if lp {
                    lp_ptrs[1] = Destinations::or(dst, |d| d.logprobs, lp_ptrs[1]);
                    lp_ptrs[2] = Destinations::or(dst, |d| d.raw_logprobs, lp_ptrs[2]);
                    lp_ptrs[3] = Destinations::or(dst, |d| d.logsumexp, lp_ptrs[3]);
                }
                (Destinations::or(dst, |d| d.tokens, tokens), Destinations::or(dst, |d| d.scores, scores))
            }
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
        // A scoring launch whose samples nothing reads, with processed logits equal to the raw ones
        // (every row at T = 1, no soft-cap, mask or adjustment), computes one log-mass: null
        // `raw_logprobs` (the sampled tokens' raw log-probabilities, unread), and the reduction takes
        // the processed mass as the raw one (`FusedParams::targets`). The same bits: the two masses
        // sum the same values in the same order. (A rank's launch too: its exchange word 3, the
        // sampled token's raw log-probability, is then unwritten and nothing reads its merge.)
        let targets = out.targets;
        if launch.epilogue == Epilogue::LogProbs
            && targets.is_some_and(|t| !t.draws)
            && mask == 0
            && adjusted.is_none()
            && super::score::processed_is_raw(params, shape.b)
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
        // A scoring call writes the rows' log-sum-exps into its scores, and the given tokens'
        // log-probabilities there too; a rank's, into words 6 and 7 of its exchange (`[8, rows]`),
        // which the merge of the ranks reads.
        let target_outputs = match (targets, ranged.staging) {
            (Some(t), None) => {
                (lp_ptrs[3], lp_ptrs[4]) = (t.logsumexp, t.raw_logsumexp);
                (t.logprobs, t.raw_logprobs)
            }
            (Some(_), Some(base)) => {
                let field = |k: usize| base + 4 * (k * rows) as u64;
                (field(RANK_WORDS_LOGPROBS), field(RANK_WORDS_LOGPROBS + 1))
            }
            (None, _) => (0, 0),
        };
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
            targets: targets.map_or(0, |t| t.tokens) as *const u32,
            target_logprobs: target_outputs.0 as *mut f32,
            target_raw_logprobs: target_outputs.1 as *mut f32,
            exact: match (exact, ranged.staging) {
                (false, _) => std::ptr::null_mut(),
                (true, None) => (exact_base + 4 * EXACT_WORDS_AT as u64) as *mut RowExact,
                // A rank's records go to its exchange, after its result words.
                (true, Some(base)) => {
                    let k = if targets.is_some() { RANK_WORDS_SCORE } else { RANK_WORDS_LOGPROBS };
                    (base + 4 * exact_records_at(rows, k) as u64) as *mut RowExact
                }
            },
        });
        let cfg = LaunchConfig {
            grid_dim: (launch.grid(), 1, 1),
            block_dim: (launch.threads(), 1, 1),
            shared_mem_bytes: launch.smem_bytes(),
        };
        if variant.reads_gemm_logits() {
            // The GEMM-fed kernels: cuBLAS (or on the exact path `fallback_logits`) writes the
            // logits on this stream, then the kernel reads them with this launch's parameters.
            let (logits, workspace) = out.gemm.as_mut().expect("the buffers fit the launch (checked before)");
            let (logits, _l) = logits.device_ptr_mut(&self.stream);
            let (workspace, _w) = workspace.device_ptr_mut(&self.stream);
            let ld = gemm_logits_ld(shape.v as u32);
            if exact {
                // SAFETY: hidden (rows × D) and weight (V × D) as for the fused launch, D % 8 == 0;
                // the logits hold rows × ld floats; the count word is ours, on this stream.
                unsafe {
                    self.launch_exact_logits(
                        (hidden, weight, ranged.elem),
                        (rows, shape.d, shape.v),
                        (exact_base, logits, ld),
                    )
                }?;
            } else {
                let gemm =
                    self.k.gemm.as_ref().expect("off the exact path, a GEMM-fed variant is chosen only with cuBLAS");
                // SAFETY: hidden (rows × D) and weight (V × D) as for the fused launch; the logits hold
                // rows × ld floats and the workspace WORKSPACE_BYTES (`fits`), this backend's buffers,
                // used on this stream only.
                unsafe {
                    gemm.logits(
                        &self.stream,
                        (hidden, weight, ranged.elem),
                        (rows, shape.d, shape.v, ld as usize),
                        (logits, workspace),
                    )?
                };
            }
            let g = ByValue(GemmLogitsParams { fused: p.0, logits: logits as *const f32, ld, _pad: 0 });
            // SAFETY: as for a fused launch (the same parameters and grid) after the GEMM that wrote
            // the logits on this stream: rows × ld floats, 256-byte aligned, ld % 4 == 0, ld ≥ V.
            unsafe { self.stream.launch_builder(&entry.func).arg(&g).launch(cfg) }?;
            if exact {
                let cfg = LaunchConfig {
                    grid_dim: (rows as u32, 1, 1),
                    block_dim: (EXACT_MASS_THREADS, 1, 1),
                    shared_mem_bytes: EXACT_MASS_SMEM,
                };
                // SAFETY: the GEMM-fed launch's parameters, after it on this stream (the kernel waits
                // for it before reading): its logits (rows × ld floats), row parameters, mask and
                // adjusted tokens; `exact` holds `rows` entries (`fits`); one block per row.
                unsafe { self.launch_after(&self.k.exact.1, cfg, &g) }?;
            }
        } else {
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
        }
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
            let reduce = if exact { &self.k.exact.2 } else { &self.k.reduce_rows };
            unsafe { self.launch_after(reduce, cfg, &p) }?;
        }
        Ok(p.0)
    }

    /// The exact path's logits: its count word at `count` (set here), then [`Self::launch_store_logits`]
    /// over the call's `rows` hidden states.
    ///
    /// # Safety
    /// `hidden` holds `rows × d` and `weight` `v × d` elements of `elem`, 16-byte aligned, `d % 8
    /// == 0`; `count` is a word and `logits` `rows × ld` floats (`ld ≥ v`) of this backend's, used
    /// on this stream only.
    unsafe fn launch_exact_logits(
        &self,
        operands: (u64, u64, ElementType),
        (rows, d, v): (usize, usize, usize),
        (count, logits, ld): (u64, u64, u32),
    ) -> Result<()> {
        // SAFETY: `count` is one word of ours (the caller's contract), on this stream.
        unsafe { sys::cuMemsetD32Async(count, rows as u32, 1, self.stream.cu_stream()) }.result()?;
        // SAFETY: the caller's contract; the count was set just before on this stream.
        unsafe { self.launch_store_logits(operands, (rows, d, v), (count, logits, ld)) }
    }

    /// `fallback_logits` (after the kernel before it: it waits for it): `logits[r·ld + i]` for the
    /// first `list[0]` of `rows` hidden-state rows and every vocab row `i < v` of the weight — the
    /// `mma.sync` mainloop's sums, whose bits depend only on the row and the vocab row. The exact
    /// fallback's logits and the exact path's.
    ///
    /// # Safety
    /// `list[0]` (≤ `rows`) was written before on this stream; `hidden` holds `rows × d` and
    /// `weight` `v × d` elements of `elem`, 16-byte aligned, `d % 8 == 0`; `logits` holds `rows ×
    /// ld` floats, `ld ≥ v`; the kernel reads no other pointer of `fused` (null) and its blocks past
    /// the count return at once.
    pub(super) unsafe fn launch_store_logits(
        &self,
        (hidden, weight, elem): (u64, u64, ElementType),
        (rows, d, v): (usize, usize, usize),
        (list, logits, ld): (u64, u64, u32),
    ) -> Result<()> {
        let lv = FALLBACK_LOGITS_VARIANT;
        let n_btiles = lv.batch_tiles(rows as u32);
        let n_vranges = lv.n_vranges(self.k.sm_count, self.k.fallback_logits.per_sm, n_btiles, v as u32);
        let l = ByValue(FallbackLogitsParams {
            fused: FusedParams {
                hidden: hidden as *const u16,
                weight: weight as *const u16,
                b: rows as u32,
                d: d as u32,
                v: v as u32,
                v_end: v as u32,
                n_vranges,
                tma_whole_tiles: v as u32 / BLOCK_V,
                elem,
                ..FusedParams::NONE
            },
            list: list as *const u32,
            logits: logits as *mut f32,
            ld,
            _pad: 0,
        });
        let cfg = LaunchConfig {
            grid_dim: (n_vranges * n_btiles, 1, 1),
            block_dim: (lv.threads(), 1, 1),
            shared_mem_bytes: lv.smem_bytes(Epilogue::Sample),
        };
        // SAFETY: the caller's contract (operands, count, logits); the launch shape is the variant's.
        unsafe { self.launch_after(&self.k.fallback_logits.func, cfg, &l) }
    }
}
