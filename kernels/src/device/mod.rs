//! Device code (nvptx64 only): thin kernel entry points over the mainloop, epilogue and reduction.

/// Expands `$body` once per listed index, with `$i` a constant: arrays indexed by it (accumulators,
/// candidates) are then read with compile-time indices only and stay in registers.
macro_rules! unrolled {
    ($i:ident in [$($n:literal),*] $body:block) => {
        $( { const $i: usize = $n; $body } )*
    };
}

mod baselines;
mod block;
mod fused;
mod fused_block;
mod fused_wgmma;
mod fused_ws;
mod fused_ws_t;
mod ptx;
mod reduce;
mod warp;

use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};

use crate::config::{FUSED_VARIANTS, FusedVariant, Staging};
use crate::noise::gumbel4_at;
use crate::params::{FusedParams, LogitsParams, NoiseTestParams, ReduceParams};
use crate::philox::philox4x32_10;

/// Fused matmul + sampling, per-warp staging, 8 batch rows per block (`FUSED_VARIANTS[0]`).
///
/// # Safety
/// See [`fused::fused_sample_warp`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fused_sample_warp_nb1(p: FusedParams) {
    const V: FusedVariant = FUSED_VARIANTS[0];
    const { assert!(V.n_tiles == 1 && V.warps_b == 1 && matches!(V.staging, Staging::PerWarp)) };
    // SAFETY: forwarded launch contract.
    unsafe { fused::fused_sample_warp::<1, { V.stages }>(p) }
}

/// Fused matmul + sampling, block staging: the kernel of [`FUSED_VARIANTS`]`[$i]`.
macro_rules! fused_block_entry {
    ($name:ident, $i:literal) => {
        #[doc = concat!("Fused matmul + sampling, block staging (`FUSED_VARIANTS[", stringify!($i), "]`).")]
        ///
        /// # Safety
        /// See [`fused_block::fused_sample_block`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: FusedParams) {
            const V: FusedVariant = FUSED_VARIANTS[$i];
            const { assert!(matches!(V.staging, Staging::Block)) };
            // SAFETY: forwarded launch contract.
            unsafe {
                fused_block::fused_sample_block::<
                    { V.n_tiles as usize },
                    { V.warps_b },
                    { V.stages },
                    { V.threads() },
                    { V.block_b() },
                    { V.block_b().div_ceil(V.threads() / 8) as usize },
                >(p)
            }
        }
    };
}
fused_block_entry!(fused_sample_block_nb1, 1);
fused_block_entry!(fused_sample_block_nb2, 2);
fused_block_entry!(fused_sample_block_nb2_s3, 3);
fused_block_entry!(fused_sample_block_nb4, 4);
fused_block_entry!(fused_sample_block_nb4_s3, 5);
fused_block_entry!(fused_sample_block_nb4x2, 6);
fused_block_entry!(fused_sample_block_nb4x4, 7);

/// Fused matmul + sampling on `wgmma` (sm_90a module only): the kernel of [`FUSED_VARIANTS`]`[$i]`.
macro_rules! fused_wgmma_entry {
    ($name:ident, $i:literal, $shape:ty) => {
        #[doc = concat!("Fused matmul + sampling on `wgmma` (`FUSED_VARIANTS[", stringify!($i), "]`, sm_90a).")]
        ///
        /// # Safety
        /// See [`fused_wgmma::fused_sample_wgmma`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: FusedParams) {
            const V: FusedVariant = FUSED_VARIANTS[$i];
            const {
                assert!(matches!(V.staging, Staging::Wgmma));
                assert!(V.block_b() == <$shape as fused_wgmma::WgmmaShape>::N);
            };
            // SAFETY: forwarded launch contract.
            unsafe { fused_wgmma::fused_sample_wgmma::<$shape, { V.stages }>(p) }
        }
    };
}
fused_wgmma_entry!(fused_sample_wgmma_n32, 8, fused_wgmma::N32);
fused_wgmma_entry!(fused_sample_wgmma_n64, 9, fused_wgmma::N64);
fused_wgmma_entry!(fused_sample_wgmma_n128, 10, fused_wgmma::N128);

/// Fused matmul + sampling on `wgmma`, warp-specialized with a `cp.async` or a TMA producer (sm_90a
/// module only): the kernel of [`FUSED_VARIANTS`]`[$i]`.
macro_rules! fused_ws_entry {
    ($name:ident, $i:literal, $shape:ty) => {
        #[doc = concat!("Fused matmul + sampling on `wgmma`, warp-specialized (`FUSED_VARIANTS[", stringify!($i), "]`, sm_90a).")]
        ///
        /// # Safety
        /// See [`fused_ws::fused_sample_ws`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: FusedParams) {
            const V: FusedVariant = FUSED_VARIANTS[$i];
            const {
                assert!(V.warp_specialized());
                assert!(V.threads() == fused_ws::THREADS);
                assert!(8 * V.n_tiles == <$shape as fused_wgmma::WgmmaShape>::N);
            };
            // SAFETY: forwarded launch contract.
            unsafe {
                fused_ws::fused_sample_ws::<$shape, { V.stages }, { V.uses_tma() }, { V.warps_b }>(p)
            }
        }
    };
}
fused_ws_entry!(fused_sample_wgmma_ws_n16, 11, fused_wgmma::N16);
fused_ws_entry!(fused_sample_wgmma_ws_n32, 12, fused_wgmma::N32);
fused_ws_entry!(fused_sample_wgmma_ws_n64, 13, fused_wgmma::N64);
fused_ws_entry!(fused_sample_wgmma_tma_n16, 14, fused_wgmma::N16);
fused_ws_entry!(fused_sample_wgmma_tma_n32, 15, fused_wgmma::N32);
fused_ws_entry!(fused_sample_wgmma_tma_n64, 16, fused_wgmma::N64);
fused_ws_entry!(fused_sample_wgmma_tma_n32x2, 17, fused_wgmma::N32);
fused_ws_entry!(fused_sample_wgmma_tma_n64x2, 18, fused_wgmma::N64);

/// Fused matmul + sampling on `wgmma` with the hidden states as the A operand, warp-specialized with
/// a TMA producer (sm_90a module only): the kernel of [`FUSED_VARIANTS`]`[$i]`.
macro_rules! fused_ws_t_entry {
    ($name:ident, $i:literal) => {
        #[doc = concat!("Fused matmul + sampling, hidden states as the `wgmma` A operand (`FUSED_VARIANTS[", stringify!($i), "]`, sm_90a).")]
        ///
        /// # Safety
        /// See [`fused_ws_t::fused_sample_ws_t`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: FusedParams) {
            const V: FusedVariant = FUSED_VARIANTS[$i];
            const {
                assert!(matches!(V.staging, Staging::WgmmaTmaT));
                assert!(V.threads() == fused_ws::THREADS && V.n_tiles == 8);
            };
            // SAFETY: forwarded launch contract.
            unsafe { fused_ws_t::fused_sample_ws_t::<{ V.stages }, { V.warps_b }>(p) }
        }
    };
}
fused_ws_t_entry!(fused_sample_wgmma_tmat_n64, 19);
fused_ws_t_entry!(fused_sample_wgmma_tmat_n64x2, 20);

/// Candidate reduction.
///
/// # Safety
/// See [`reduce::reduce_candidates`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn reduce_candidates(p: ReduceParams) {
    // SAFETY: forwarded launch contract.
    unsafe { reduce::reduce_candidates(p) }
}

/// 2^x on the device (`ex2.approx.ftz.f32`).
#[inline(always)]
pub(crate) fn exp2(x: f32) -> f32 {
    ptx::ex2_approx_ftz_f32(x)
}

/// Benchmark baseline: Gumbel-max over materialized logits.
///
/// # Safety
/// See [`baselines::gumbel_logits`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn gumbel_logits(p: LogitsParams) {
    // SAFETY: forwarded launch contract.
    unsafe { baselines::gumbel_logits(p) }
}

/// Benchmark baseline: row softmax writing probabilities.
///
/// # Safety
/// See [`baselines::softmax_rows`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn softmax_rows(p: LogitsParams) {
    // SAFETY: forwarded launch contract.
    unsafe { baselines::softmax_rows(p) }
}

/// Benchmark baseline: inverse-CDF multinomial sampling from probabilities.
///
/// # Safety
/// See [`baselines::multinomial_rows`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn multinomial_rows(p: LogitsParams) {
    // SAFETY: forwarded launch contract.
    unsafe { baselines::multinomial_rows(p) }
}

/// Global thread index, for the test kernels.
#[inline(always)]
fn global_thread() -> u32 {
    // SAFETY: special-register reads.
    unsafe { _block_idx_x() * _block_dim_x() + _thread_idx_x() }
}

/// Test kernel: `out[i] = philox4x32_10(counters[i], key)`.
///
/// # Safety
/// `counters` and `out` hold `n` entries.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn philox_test(p: NoiseTestParams) {
    let i = global_thread();
    if i < p.n {
        // SAFETY: i < n.
        unsafe { *p.out.add(i as usize) = philox4x32_10(*p.counters.add(i as usize), p.key) };
    }
}

/// Test kernel: `out[i] = gumbel4_at(counters[i], key)` as f32 bits (the noise path of the fused kernel,
/// refinement included, to compare bit-for-bit with the host).
///
/// # Safety
/// `counters` and `out` hold `n` entries.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn gumbel_test(p: NoiseTestParams) {
    let i = global_thread();
    if i < p.n {
        // SAFETY: i < n.
        unsafe {
            *p.out.add(i as usize) = gumbel4_at(*p.counters.add(i as usize), p.key).map(f32::to_bits);
        }
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` aborts the kernel; nothing after it runs.
    unsafe { core::arch::nvptx::trap() }
}
