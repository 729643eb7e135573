//! Loading the device code: the embedded cubins on compute capability 9.0, else the PTX through
//! the driver's JIT ([`crate::modules`]), and the kernels looked up with their occupancy.

use super::*;

/// One loaded kernel of a variant.
pub(super) struct LoadedEntry {
    pub(super) func: CudaFunction,
    /// Resident blocks per multiprocessor (the driver's occupancy for the variant's block and
    /// shared memory): the persistent grid is this times the multiprocessor count.
    pub(super) per_sm: u32,
}

impl LoadedEntry {
    /// Entry `name` of `module`, launched with `threads` threads and `smem` bytes of dynamic shared
    /// memory, with its attribute raised to that (the staging rings need more than the default 48
    /// KiB) and its resident blocks per multiprocessor at that shape.
    pub(super) fn load(module: &Arc<CudaModule>, name: &str, threads: u32, smem: u32) -> Result<Self> {
        let func = module.load_function(name)?;
        func.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
        let per_sm = func.occupancy_max_active_blocks_per_multiprocessor(threads, smem as usize, None)?.max(1);
        Ok(LoadedEntry { func, per_sm })
    }
}

/// One loaded fused-kernel variant: its plain, log-probability and (where it has one) truncation
/// kernel.
pub(super) struct LoadedVariant {
    pub(super) variant: &'static FusedVariant,
    pub(super) sample: LoadedEntry,
    pub(super) logprobs: LoadedEntry,
    pub(super) truncate: Option<LoadedEntry>,
}

impl LoadedVariant {
    /// The kernel with epilogue `e`. A launch's variant always has it: `variant_for_batch` picks
    /// only variants with the call's epilogue, and a forced variant applies only to the epilogues it
    /// has (`GpuBackend::fused_variant_for`).
    pub(super) fn entry(&self, e: Epilogue) -> &LoadedEntry {
        match e {
            Epilogue::Sample => &self.sample,
            Epilogue::LogProbs => &self.logprobs,
            Epilogue::Truncate => self.truncate.as_ref().expect("a launch's variant has its epilogue's kernel"),
        }
    }
}

/// The device's compute capability (major, minor).
pub(super) fn compute_capability(ctx: &CudaContext) -> Result<(i32, i32)> {
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
/// the cubin is empty, does not load, or `jit` ([`GpuOptions::jit`](super::GpuOptions::jit)), from
/// its PTX through the driver's JIT; `None` when neither is embedded (a prebuilt build's Hopper PTX
/// with `jit`).
pub(super) fn load_module(
    ctx: &Arc<CudaContext>,
    ptx: &Artifact,
    cubin: &Artifact,
    cc: (i32, i32),
    jit: bool,
) -> Result<Option<(Arc<CudaModule>, ModuleCode)>> {
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

/// The portable module ([`PTX`], or its sm_90 cubin on compute capability 9.0; through the JIT
/// when `jit`; [`load_module`]).
fn load_portable_module(ctx: &Arc<CudaContext>, jit: bool) -> Result<(Arc<CudaModule>, ModuleCode)> {
    let loaded = load_module(ctx, &PTX, &CUBIN, compute_capability(ctx)?, jit)?;
    Ok(loaded.expect("every build embeds the portable PTX (build.rs)"))
}

/// One device's context, modules and kernels, loaded once and shared by every handle of a
/// [`GpuBackend`] (its clones and [`GpuBackend::on_stream`]'s): nothing here depends on a stream.
pub(super) struct Kernels {
    pub(super) ctx: Arc<CudaContext>,
    /// The backend's own stream (non-blocking, created with the backend): the default stream of
    /// its handles, and where every buffer a handle allocates lives and is freed, whichever stream
    /// the handle launches on ([`GpuBackend::on_stream`]). An allocation waits for the handle's
    /// stream and the handle's stream for it (`GpuBackend::on_home`); a [`DeviceSamples`] orders its
    /// frees after its last call (its fence).
    pub(super) home: Arc<CudaStream>,
    pub(super) sm_count: u32,
    /// Every fused-kernel variant, in [`FUSED_VARIANTS`] order; `None` where this GPU cannot run it
    /// (the Hopper module's variants outside compute capability 9.0).
    pub(super) fused: Vec<Option<LoadedVariant>>,
    /// The row-expansion kernel (portable module).
    pub(super) expand: CudaFunction,
    /// The sparse-adjustment kernel (portable module).
    pub(super) adjust: CudaFunction,
    /// The log-probability reduction (portable module), launched after every log-probability and
    /// truncation fused kernel.
    pub(super) reduce_rows: CudaFunction,
    /// The truncation step's two entries (portable module: [`TruncateStep::Alone`], then
    /// [`TruncateStep::Paired`]) and the fallback's kernels: its gather, its logits on the tensor
    /// cores (with their occupancy, as a fused variant's) and its sampler.
    pub(super) truncate: (CudaFunction, CudaFunction),
    pub(super) fallback_gather: CudaFunction,
    pub(super) fallback_logits: LoadedEntry,
    pub(super) fallback_sample: CudaFunction,
    /// A scoring call's truncation step and fallback sampler (`truncate_rows_scored`,
    /// `fallback_sample_scored`: the given tokens scored over the kept sets).
    pub(super) scored: (CudaFunction, CudaFunction),
    /// The exact log-sum-exp path's truncating calls (`fallback_sample_exact`).
    pub(super) fallback_exact: CudaFunction,
    /// The exact log-sum-exp path ([`crate::SamplingParams::exact_logsumexp`]): the GEMM-fed
    /// kernels (loaded whether or not cuBLAS is: the path feeds them `fallback_logits`' logits),
    /// `exact_mass_rows` and `reduce_rows_exact`.
    pub(super) exact: (LoadedVariant, CudaFunction, CudaFunction),
    /// The portable module (its other entries, e.g. the ranks' merge, are looked up by `tp`).
    pub(super) portable: Arc<CudaModule>,
    /// What the portable and (when loaded) the Hopper module run ([`GpuBackend::module_code`]).
    pub(super) module_code: (ModuleCode, Option<ModuleCode>),
    /// cuBLAS for the GEMM-fed kernels (`gemm`): where the portable kernels run and libcublas
    /// loads; `None` elsewhere (the calls keep the fused kernels).
    pub(super) gemm: Option<Gemm>,
}

impl Kernels {
    /// Loads the portable module and, on compute capability 9.0 unless `portable_only`, the Hopper
    /// (sm_90a) module, from cubins or (with `jit`) PTX, and looks up every kernel with its occupancy.
    pub(super) fn load(ctx: Arc<CudaContext>, jit: bool, portable_only: bool) -> Result<Self> {
        let sm_count =
            ctx.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let home = ctx.new_stream()?;
        let (module, portable_code) = load_portable_module(&ctx, jit)?;
        // The arch-specific sm_90a module (`wgmma`) loads on compute capability 9.0 only;
        // `portable_only` keeps it unloaded, so a Hopper GPU runs the portable kernels the way other
        // GPUs do (to measure and test that path).
        let cc = compute_capability(&ctx)?;
        let loaded_sm90a =
            if cc == (9, 0) && !portable_only { load_module(&ctx, &PTX_SM90A, &CUBIN_SM90A, cc, jit)? } else { None };
        let hopper_code = loaded_sm90a.as_ref().map(|(_, code)| *code);
        let module_sm90a = loaded_sm90a.map(|(m, _)| m);
        // Only the portable kernel set chooses the GEMM-fed kernels (`variant_for_call`).
        let gemm = if module_sm90a.is_none() { Gemm::new(&home) } else { None };
        // The persistent grid fills every multiprocessor to the occupancy its registers allow.
        let fused = FUSED_VARIANTS
            .iter()
            .map(|variant| {
                let module = match (variant.module(), &module_sm90a) {
                    // A portable module built for an older target than sm_90 lacks the TMA family.
                    (Module::Portable, _) if !portable_module_has(variant, portable_sm()) => {
                        return Ok(None);
                    }
                    // The GEMM-fed kernels only with cuBLAS to feed them.
                    (Module::Portable, _) if variant.reads_gemm_logits() && gemm.is_none() => return Ok(None),
                    (Module::Portable, _) => &module,
                    (Module::Hopper, Some(m)) => m,
                    (Module::Hopper, None) => return Ok(None),
                    (Module::Test, _) => unreachable!("no fused kernel is in the test module"),
                };
                let load = |entry: &str, e: Epilogue| {
                    LoadedEntry::load(module, entry, variant.threads(), variant.smem_bytes(e))
                };
                Ok(Some(LoadedVariant {
                    variant,
                    sample: load(variant.entry, Epilogue::Sample)?,
                    logprobs: load(variant.entry_logprobs, Epilogue::LogProbs)?,
                    truncate: variant.entry_truncate.map(|entry| load(entry, Epilogue::Truncate)).transpose()?,
                }))
            })
            .collect::<Result<Vec<_>>>()?;
        let lv = FALLBACK_LOGITS_VARIANT;
        let g = &GEMM_LOGITS;
        let load = |entry: &str, e: Epilogue| LoadedEntry::load(&module, entry, g.threads(), g.smem_bytes(e));
        let exact = (
            LoadedVariant {
                variant: g,
                sample: load(g.entry, Epilogue::Sample)?,
                logprobs: load(g.entry_logprobs, Epilogue::LogProbs)?,
                truncate: g.entry_truncate.map(|entry| load(entry, Epilogue::Truncate)).transpose()?,
            },
            module.load_function(EXACT_MASS_ENTRY)?,
            module.load_function(REDUCE_EXACT_ENTRY)?,
        );
        Ok(Self {
            exact,
            gemm,
            expand: module.load_function(EXPAND_ENTRY)?,
            adjust: module.load_function(ADJUST_ENTRY)?,
            reduce_rows: module.load_function(REDUCE_BLOCK_ENTRY)?,
            truncate: (
                module.load_function(TruncateStep::Alone.entry())?,
                module.load_function(TruncateStep::Paired.entry())?,
            ),
            fallback_gather: module.load_function(FALLBACK_GATHER_ENTRY)?,
            fallback_logits: LoadedEntry::load(
                &module,
                FALLBACK_LOGITS_ENTRY,
                lv.threads(),
                lv.smem_bytes(Epilogue::Sample),
            )?,
            fallback_sample: module.load_function(FALLBACK_SAMPLE_ENTRY)?,
            fallback_exact: module.load_function(FALLBACK_SAMPLE_EXACT_ENTRY)?,
            scored: (module.load_function(TRUNCATE_SCORED_ENTRY)?, module.load_function(FALLBACK_SAMPLE_SCORED_ENTRY)?),
            portable: module,
            module_code: (portable_code, hopper_code),
            fused,
            ctx,
            home,
            sm_count,
        })
    }
}
