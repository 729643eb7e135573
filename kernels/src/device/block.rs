//! Block-wide reductions and scans over shared memory (used by the baseline kernels).

use core::arch::nvptx::_syncthreads;

use super::ptx::{ld_shared_v2_u32, shfl_sync_bfly_b32, shfl_sync_up_b32, st_shared_v2_u32};
use super::warp::merge_butterfly;
use crate::candidate::Candidate;
use crate::logmass::LogMass;

/// Merges every thread's candidate; the result is returned to every thread.
///
/// # Safety
/// All threads of the block call it together; `smem` points at ≥ 8·(warps + 1) bytes of shared memory.
#[inline(always)]
pub unsafe fn merge_candidates(c: Candidate, smem: u32, tid: u32, warps: u32) -> Candidate {
    // SAFETY: block-uniform call (caller's contract); slots are inside `smem`.
    unsafe {
        let c = merge_butterfly(c, [1, 2, 4, 8, 16]);
        if tid % 32 == 0 {
            st_shared_v2_u32(smem + 8 * (tid / 32), [c.score.to_bits(), c.index]);
        }
        _syncthreads();
        let mut all = Candidate::EMPTY;
        for w in 0..warps {
            let [s, i] = ld_shared_v2_u32(smem + 8 * w);
            all = all.merge(Candidate { score: f32::from_bits(s), index: i });
        }
        _syncthreads();
        all
    }
}

/// Merges every thread's [`LogMass`]; the result is returned to every thread.
///
/// # Safety
/// As [`merge_candidates`].
#[inline(always)]
pub unsafe fn merge_log_mass(m: LogMass, smem: u32, tid: u32, warps: u32) -> LogMass {
    let mut m = m;
    // SAFETY: block-uniform call (caller's contract); slots are inside `smem`.
    unsafe {
        for mask in [1, 2, 4, 8, 16] {
            let max = f32::from_bits(shfl_sync_bfly_b32(m.max.to_bits(), mask));
            let sum = f32::from_bits(shfl_sync_bfly_b32(m.sum.to_bits(), mask));
            m = m.merge(LogMass { max, sum });
        }
        if tid % 32 == 0 {
            st_shared_v2_u32(smem + 8 * (tid / 32), [m.max.to_bits(), m.sum.to_bits()]);
        }
        _syncthreads();
        let mut all = LogMass::EMPTY;
        for w in 0..warps {
            let [a, b] = ld_shared_v2_u32(smem + 8 * w);
            all = all.merge(LogMass { max: f32::from_bits(a), sum: f32::from_bits(b) });
        }
        _syncthreads();
        all
    }
}

/// Exclusive prefix sum of `x` over the block's threads (in thread order), and the block total.
///
/// # Safety
/// As [`merge_candidates`].
#[inline(always)]
pub unsafe fn exclusive_scan(x: f32, smem: u32, tid: u32, warps: u32) -> (f32, f32) {
    let lane = tid % 32;
    let mut incl = x;
    // SAFETY: block-uniform call (caller's contract); slots are inside `smem`.
    unsafe {
        let mut delta = 1;
        while delta < 32 {
            let y = f32::from_bits(shfl_sync_up_b32(incl.to_bits(), delta));
            if lane >= delta {
                incl += y;
            }
            delta *= 2;
        }
        if lane == 31 {
            st_shared_v2_u32(smem + 8 * (tid / 32), [incl.to_bits(), 0]);
        }
        _syncthreads();
        let (mut before, mut total) = (0.0f32, 0.0f32);
        for w in 0..warps {
            let [s, _] = ld_shared_v2_u32(smem + 8 * w);
            let s = f32::from_bits(s);
            if w < tid / 32 {
                before += s;
            }
            total += s;
        }
        _syncthreads();
        (before + incl - x, total)
    }
}
