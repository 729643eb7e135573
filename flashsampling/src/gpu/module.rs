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

/// One loaded fused-kernel variant: its plain and its log-probability kernel.
pub(super) struct LoadedVariant {
    pub(super) variant: &'static FusedVariant,
    pub(super) sample: LoadedEntry,
    pub(super) logprobs: LoadedEntry,
    pub(super) truncate: LoadedEntry,
}

impl LoadedVariant {
    pub(super) fn entry(&self, e: Epilogue) -> &LoadedEntry {
        match e {
            Epilogue::Sample => &self.sample,
            Epilogue::LogProbs => &self.logprobs,
            Epilogue::Truncate => &self.truncate,
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
pub(super) fn load_portable_module(ctx: &Arc<CudaContext>, jit: bool) -> Result<(Arc<CudaModule>, ModuleCode)> {
    let loaded = load_module(ctx, &PTX, &CUBIN, compute_capability(ctx)?, jit)?;
    Ok(loaded.expect("every build embeds the portable PTX (build.rs)"))
}
