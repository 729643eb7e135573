//! The GEMM of the GEMM-fed kernels ([`Family::GemmLogits`]): cuBLAS writes a call's raw f32
//! logits into the call's buffers (`DeviceSamples`), on the call's stream, just before the kernel
//! that samples them (`launch::launch_fused`).
//!
//! One cuBLAS handle per backend (every handle of it shares it, behind a lock: its stream and
//! workspace are set per call), created where the portable kernels run and libcublas loads
//! ([`Gemm::new`]); without it the choice keeps the fused kernels ([`variant_for_call`]). Each
//! [`DeviceSamples`](super::DeviceSamples) that plans a GEMM-fed launch owns its logits and its
//! cuBLAS workspace ([`WORKSPACE_BYTES`]), so calls on different streams never share one, nothing is
//! allocated while a graph is captured, and the GEMM's algorithm (which cuBLAS picks by shape and
//! workspace size) is the same for every call of the same shape: its logits are bit-identical from
//! such call to call. Vocab shards never run it (`GpuBackend::launch_plan`).
//!
//! [`Family::GemmLogits`]: flashsampling_kernels::config::Family::GemmLogits
//! [`variant_for_call`]: flashsampling_kernels::config::variant_for_call

use std::sync::{Arc, Mutex, PoisonError};

use cudarc::cublas::result::gemm_ex;
use cudarc::cublas::{CudaBlas, sys as blas};
use cudarc::driver::CudaStream;
use flashsampling_kernels::params::ElementType;

use crate::error::{Error, Result};

/// Bytes of cuBLAS workspace each GEMM-fed call's buffers hold (NVIDIA's recommendation for Hopper
/// and later).
pub(crate) const WORKSPACE_BYTES: usize = 32 << 20;

/// The workspace bytes a GEMM-fed launch's buffers hold: [`WORKSPACE_BYTES`], or on the exact
/// log-sum-exp path (`exact`), which never calls cuBLAS, one byte.
pub(crate) const fn workspace_bytes(exact: bool) -> usize {
    if exact { 1 } else { WORKSPACE_BYTES }
}

/// The backend's cuBLAS handle.
pub(crate) struct Gemm {
    blas: Mutex<CudaBlas>,
}

impl Gemm {
    /// A handle on `stream`, or `None` where libcublas is not found or its handle cannot be
    /// created (the calls then keep the fused kernels).
    pub(crate) fn new(stream: &Arc<CudaStream>) -> Option<Self> {
        // SAFETY: only tries to open the library (no symbol is called unless it opens).
        if !unsafe { blas::is_culib_present() } {
            return None;
        }
        let blas = CudaBlas::new(stream.clone()).ok()?;
        Some(Self { blas: Mutex::new(blas) })
    }

    /// `logits[r, i] = Σ_k hidden[r, k] · weight[i, k]` (f32 accumulation, f32 out) for `rows` rows
    /// of hidden size `d` and `v` weight rows, row pitch `ld` floats, on `stream` with `workspace`.
    ///
    /// # Safety
    /// `hidden` and `weight` are device buffers of this context holding `rows × d` and `v × d`
    /// elements of `elem`, `logits` `rows × ld` floats (`ld ≥ v`) and `workspace`
    /// [`WORKSPACE_BYTES`], none of them used by another stream until `stream` reaches this GEMM.
    pub(crate) unsafe fn logits(
        &self,
        stream: &Arc<CudaStream>,
        (hidden, weight, elem): (u64, u64, ElementType),
        (rows, d, v, ld): (usize, usize, usize, usize),
        (logits, workspace): (u64, u64),
    ) -> Result<()> {
        let dim = |x: usize| i32::try_from(x).map_err(|_| too_large(x));
        let (rows, d, v, ld) = (dim(rows)?, dim(d)?, dim(v)?, dim(ld)?);
        let ty = if elem.is_f16() { blas::cudaDataType::CUDA_R_16F } else { blas::cudaDataType::CUDA_R_16BF };
        let (alpha, beta) = (1.0f32, 0.0f32);
        // A panic while the lock was held left the handle as valid as before (each call sets its
        // stream and workspace anew).
        let mut handle = self.blas.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the handle is ours (locked); the stream is this context's, the workspace holds
        // WORKSPACE_BYTES of device memory no other stream uses before this GEMM (the caller's
        // contract). `set_stream` resets the workspace to cuBLAS's pool, so it is set after it.
        // Column-major: C[v × rows] = Wᵀ[v × d] · H[d × rows], i.e. row-major logits[rows, ld].
        unsafe {
            handle.set_stream(stream.clone())?;
            blas::cublasSetWorkspace_v2(*handle.handle(), workspace as *mut _, WORKSPACE_BYTES).result()?;
            gemm_ex(
                *handle.handle(),
                blas::cublasOperation_t::CUBLAS_OP_T,
                blas::cublasOperation_t::CUBLAS_OP_N,
                v,
                rows,
                d,
                &alpha as *const f32 as *const _,
                weight as *const _,
                ty,
                d,
                hidden as *const _,
                ty,
                d,
                &beta as *const f32 as *const _,
                logits as *mut _,
                blas::cudaDataType::CUDA_R_32F,
                ld,
                blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )?;
        }
        Ok(())
    }
}

fn too_large(value: usize) -> Error {
    Error::TooLarge { what: "GEMM dimension", value, max: i32::MAX as usize }
}
