//! The math and the warp/block collectives every role uses, below all of them (CUTLASS keeps these in
//! `cute/arch`, FlashAttention-3 in `hopper/utils.h`): the log-mass's `exp` and `ln`, the butterfly
//! merges of candidates and log-masses across a warp, the log-mass word format the merges move, and
//! the warp/block maximum, minimum, sum and best candidate. Nothing here imports a role.

use core::arch::nvptx::_syncthreads;

use super::ptx::{
    ex2_approx_ftz_f32, ld_shared_u64, ld_shared_v2_u32, lg2_approx_f32, mov_u32_dynamic_smem, shfl_sync_bfly_b32,
    st_shared_u64, st_shared_v2_u32,
};
use crate::candidate::Candidate;
use crate::exactmass::ExactMass;
use crate::params::RowMass;

/// e^x for the log-mass: `ex2.approx` of `x·log2(e)` (`−∞` → 0).
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    ex2_approx_ftz_f32(x * core::f32::consts::LOG2_E)
}

/// `ln x` from `lg2.approx`.
#[inline(always)]
pub(super) fn ln(x: f32) -> f32 {
    lg2_approx_f32(x) * core::f32::consts::LN_2
}

/// Merges `c` with the candidates of the lanes `lane ^ m` for each `m` in `masks` (butterfly).
///
/// # Safety
/// All 32 lanes must call it together with the same `masks`.
#[inline(always)]
pub(super) unsafe fn merge_butterfly<const K: usize>(mut c: Candidate, masks: [u32; K]) -> Candidate {
    for m in masks {
        // SAFETY: every lane executes the same shuffles (the caller's contract).
        let (score, index) = unsafe { (shfl_sync_bfly_b32(c.score.to_bits(), m), shfl_sync_bfly_b32(c.index, m)) };
        c = c.merge(Candidate { score: f32::from_bits(score), index });
    }
    c
}

/// A [`RowMass`] as four words (processed max and sum, raw max and sum).
#[inline(always)]
pub(super) fn mass_words(m: RowMass) -> [u32; 4] {
    [m.processed.max.to_bits(), m.processed.sum.to_bits(), m.raw.max.to_bits(), m.raw.sum.to_bits()]
}

/// The [`RowMass`] of four words ([`mass_words`]).
#[inline(always)]
pub(super) fn mass_of_words(w: [u32; 4]) -> RowMass {
    use crate::logmass::LogMass;
    RowMass {
        processed: LogMass { max: f32::from_bits(w[0]), sum: f32::from_bits(w[1]) },
        raw: LogMass { max: f32::from_bits(w[2]), sum: f32::from_bits(w[3]) },
    }
}

/// Merges two [`RowMass`]es with the device's exponential.
#[inline(always)]
pub(super) fn merge_mass(a: RowMass, b: RowMass) -> RowMass {
    RowMass { processed: a.processed.merge_with(b.processed, exp), raw: a.raw.merge_with(b.raw, exp) }
}

/// Merges `m` with the masses of the lanes `lane ^ k` for each `k` in `masks` (butterfly).
///
/// # Safety
/// All 32 lanes must call it together with the same `masks`.
#[inline(always)]
pub(super) unsafe fn merge_mass_butterfly<const K: usize>(mut m: RowMass, masks: [u32; K]) -> RowMass {
    for k in masks {
        let w = mass_words(m);
        // SAFETY: every lane executes the same shuffles (the caller's contract).
        let o = unsafe { w.map(|x| shfl_sync_bfly_b32(x, k)) };
        m = merge_mass(m, mass_of_words(o));
    }
    m
}

/// The warp's maximum of `x` (every lane gets it).
///
/// # Safety
/// All 32 lanes call it together.
#[inline(always)]
pub(super) unsafe fn warp_max(mut x: f32) -> f32 {
    for m in [1u32, 2, 4, 8, 16] {
        // SAFETY: all 32 lanes (the caller's contract).
        let o = f32::from_bits(unsafe { shfl_sync_bfly_b32(x.to_bits(), m) });
        if o > x {
            x = o;
        }
    }
    x
}

/// The warp's minimum of `x` (every lane gets it).
///
/// # Safety
/// All 32 lanes call it together.
#[inline(always)]
pub(super) unsafe fn warp_min_u32(mut x: u32) -> u32 {
    for m in [1u32, 2, 4, 8, 16] {
        // SAFETY: all 32 lanes (the caller's contract).
        x = x.min(unsafe { shfl_sync_bfly_b32(x, m) });
    }
    x
}

/// The block's sum of `x` (every thread gets it): integers, so the order does not matter.
///
/// # Safety
/// Every thread of a `32·WARPS`-thread block calls it together; the block's dynamic shared memory
/// holds at least `8·WARPS` bytes, which it overwrites.
#[inline(always)]
pub(super) unsafe fn block_sum_u64<const WARPS: u32>(mut x: u64, tid: u32) -> u64 {
    for m in [1u32, 2, 4, 8, 16] {
        // SAFETY: all lanes (the caller's contract).
        let (lo, hi) = unsafe { (shfl_sync_bfly_b32(x as u32, m), shfl_sync_bfly_b32((x >> 32) as u32, m)) };
        x += (hi as u64) << 32 | lo as u64;
    }
    let base = mov_u32_dynamic_smem();
    // SAFETY: block-uniform barriers; WARPS slots of 8 bytes.
    unsafe {
        _syncthreads();
        if tid % 32 == 0 {
            st_shared_u64(base + 8 * (tid / 32), x);
        }
        _syncthreads();
        let mut total = 0u64;
        for w in 0..WARPS {
            total += ld_shared_u64(base + 8 * w);
        }
        total
    }
}

/// The block's maximum of `x` (every thread gets it).
///
/// # Safety
/// As [`block_sum_u64`].
#[inline(always)]
pub(super) unsafe fn block_max<const WARPS: u32>(x: f32, tid: u32) -> f32 {
    // SAFETY: all lanes.
    let x = unsafe { warp_max(x) };
    let base = mov_u32_dynamic_smem();
    // SAFETY: as in `block_sum_u64`.
    unsafe {
        _syncthreads();
        if tid % 32 == 0 {
            st_shared_v2_u32(base + 8 * (tid / 32), [x.to_bits(), 0]);
        }
        _syncthreads();
        let mut m = f32::NEG_INFINITY;
        for w in 0..WARPS {
            let y = f32::from_bits(ld_shared_v2_u32(base + 8 * w)[0]);
            if y > m {
                m = y;
            }
        }
        m
    }
}

/// The block's best candidate (every thread gets it).
///
/// # Safety
/// As [`block_sum_u64`].
#[inline(always)]
pub(super) unsafe fn block_best<const WARPS: u32>(c: Candidate, tid: u32) -> Candidate {
    // SAFETY: all lanes.
    let c = unsafe { merge_butterfly(c, [1, 2, 4, 8, 16]) };
    let base = mov_u32_dynamic_smem();
    // SAFETY: as in `block_sum_u64`.
    unsafe {
        _syncthreads();
        if tid % 32 == 0 {
            st_shared_v2_u32(base + 8 * (tid / 32), [c.score.to_bits(), c.index]);
        }
        _syncthreads();
        let mut best = Candidate::EMPTY;
        for w in 0..WARPS {
            let [s, i] = ld_shared_v2_u32(base + 8 * w);
            best = best.merge(Candidate { score: f32::from_bits(s), index: i });
        }
        best
    }
}

/// The block's exact log-mass ([`ExactMass::merge`] of every thread's `m`; every thread gets it,
/// the same bits whatever order the merges take).
///
/// # Safety
/// As [`block_sum_u64`], with 24 bytes of shared memory a warp.
#[inline(always)]
pub(super) unsafe fn block_exact_mass<const WARPS: u32>(mut m: ExactMass, tid: u32) -> ExactMass {
    for k in [1u32, 2, 4, 8, 16] {
        // SAFETY: all lanes (the caller's contract).
        let o = m.to_words().map(|x| unsafe { shfl_sync_bfly_b32(x, k) });
        m = m.merge(ExactMass::from_words(o));
    }
    let base = mov_u32_dynamic_smem();
    // SAFETY: as in `block_sum_u64`; WARPS slots of 24 bytes.
    unsafe {
        _syncthreads();
        if tid % 32 == 0 {
            let w = m.to_words();
            let at = base + 24 * (tid / 32);
            st_shared_v2_u32(at, [w[0], w[1]]);
            st_shared_v2_u32(at + 8, [w[2], w[3]]);
            st_shared_v2_u32(at + 16, [w[4], w[5]]);
        }
        _syncthreads();
        let mut all = ExactMass::EMPTY;
        for w in 0..WARPS {
            let at = base + 24 * w;
            let (a, b, c) = (ld_shared_v2_u32(at), ld_shared_v2_u32(at + 8), ld_shared_v2_u32(at + 16));
            all = all.merge(ExactMass::from_words([a[0], a[1], b[0], b[1], c[0], c[1]]));
        }
        all
    }
}
