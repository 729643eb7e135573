//! Test kernels (the test PTX module): the noise path on the device, to compare bit-for-bit with
//! the host.
//!
//! # Parameters
//! [`NoiseTestParams`] by value; one thread per counter, any grid covering `n` threads.

use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};

use crate::noise::gumbel4_at;
use crate::params::NoiseTestParams;
use crate::philox::philox4x32_10;

/// Global thread index.
#[inline(always)]
fn global_thread() -> u32 {
    // SAFETY: special-register reads.
    unsafe { _block_idx_x() * _block_dim_x() + _thread_idx_x() }
}

/// `out[i] = philox4x32_10(counters[i], key)`.
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

/// `out[i] = gumbel4_at(counters[i], key)` as f32 bits: the noise of one Philox group, exactly as the
/// fused kernels' lane epilogue draws it (including the refinement call for extreme words).
///
/// # Safety
/// `counters` and `out` hold `n` entries.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn gumbel_test(p: NoiseTestParams) {
    let i = global_thread();
    if i < p.n {
        // SAFETY: i < n.
        unsafe { *p.out.add(i as usize) = gumbel4_at(*p.counters.add(i as usize), p.key).map(f32::to_bits) };
    }
}
