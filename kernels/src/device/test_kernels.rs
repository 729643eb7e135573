//! Test kernels (the test PTX module): the noise path on the device, to compare bit-for-bit with
//! the host.
//!
//! # Parameters
//! [`NoiseTestParams`] by value; one thread per counter, any grid covering `n` threads.

use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};

use crate::noise::gumbel;
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

/// `out[i] = gumbel(philox4x32_10(counters[i], key))` as f32 bits (the noise path of the fused
/// kernel).
///
/// # Safety
/// `counters` and `out` hold `n` entries.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn gumbel_test(p: NoiseTestParams) {
    let i = global_thread();
    if i < p.n {
        // SAFETY: i < n.
        unsafe {
            let w = philox4x32_10(*p.counters.add(i as usize), p.key);
            *p.out.add(i as usize) = w.map(|x| gumbel(x).to_bits());
        }
    }
}
