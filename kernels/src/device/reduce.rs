//! The reduction: `[B, n]` candidates → one token (and score) per row, on the device, so a decode
//! loop needs no copy to the host per token.
//!
//! One warp merges one row ([`reduce_row`]: lane `l` merges candidates `l, l + 32, …`, then a
//! butterfly merges the lanes). The fused kernels run it in the last block of each batch tile to
//! finish ([`reduce_if_last`]); the standalone `reduce_candidates` kernel (baselines) runs
//! [`reduce_candidates`], one warp per row.

use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use super::ptx::{
    atom_global_add_u32, fence_acq_rel_gpu, ld_global_cg_v2_u32, ld_shared_v2_u32, mov_u32_dynamic_smem,
    shfl_sync_bfly_b32, st_shared_v2_u32,
};
use crate::candidate::Candidate;
use crate::config::REDUCE_ROWS_PER_BLOCK;
use crate::params::{FusedParams, ReduceParams};

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

/// Merges row `b`'s `n` candidates from `candidates[b·n ..]` over the warp and writes its token and
/// score (lane 0). Loads are L2-coherent (`ld.global.cg`): other blocks of the same launch may have
/// written the candidates.
///
/// # Safety
/// All 32 lanes of the warp call it together; `candidates` holds `n` entries for row `b`, `tokens`
/// and `scores` hold entry `b`.
#[inline(always)]
pub(super) unsafe fn reduce_row(
    candidates: *const Candidate,
    n: u32,
    b: u32,
    tokens: *mut u32,
    scores: *mut f32,
    lane: u32,
) {
    let row = b as usize * n as usize;
    let mut c = Candidate::EMPTY;
    let mut i = lane;
    while i < n {
        // SAFETY: i < n: inside the row (the caller's contract).
        let [s, idx] = unsafe { ld_global_cg_v2_u32(candidates.add(row + i as usize) as *const u32) };
        c = c.merge(Candidate { score: f32::from_bits(s), index: idx });
        i += 32;
    }
    // SAFETY: all 32 lanes of this warp are here (the caller's contract).
    let c = unsafe { merge_butterfly(c, [1, 2, 4, 8, 16]) };
    if lane == 0 {
        // SAFETY: entry b of the outputs (the caller's contract).
        unsafe {
            *tokens.add(b as usize) = c.token();
            *scores.add(b as usize) = c.score;
        }
    }
}

/// The fused kernels' reduction: the last block of a batch tile to finish (counted with an atomic
/// after a device-wide fence) reduces that tile's rows `first_row .. first_row + block_rows` (below
/// B), one warp per row. Deterministic: the merge is order-independent. The counter is reset for the
/// next launch.
///
/// # Safety
/// Every thread of the block (`warps` warps) calls it, after writing its candidates; the block's
/// first 8 bytes of dynamic shared memory are free.
#[inline(always)]
pub(super) unsafe fn reduce_if_last(
    p: &FusedParams,
    tid: u32,
    warps: u32,
    btile: u32,
    first_row: u32,
    block_rows: u32,
) {
    let flag = mov_u32_dynamic_smem();
    fence_acq_rel_gpu(); // this thread's candidate stores are visible device-wide before the count
    // SAFETY: block-uniform barriers; `counters` holds n_btiles entries; `flag` is in shared memory.
    unsafe {
        _syncthreads();
        if tid == 0 {
            let arrived = atom_global_add_u32(p.counters.add(btile as usize), 1);
            st_shared_v2_u32(flag, [(arrived + 1 == p.n_vranges) as u32, 0]);
        }
        _syncthreads();
        if ld_shared_v2_u32(flag)[0] == 0 {
            return;
        }
    }
    fence_acq_rel_gpu(); // acquire: every block's candidates are visible to this one
    let (lane, warp) = (tid % 32, tid / 32);
    let mut r = warp;
    while r < block_rows {
        let b = first_row + r;
        if b >= p.b {
            break; // warp-uniform
        }
        // SAFETY: b < B; the whole warp is here (warp-uniform loop).
        unsafe { reduce_row(p.candidates, p.n_vranges, b, p.tokens, p.scores, lane) };
        r += warps;
    }
    if tid == 0 {
        // SAFETY: btile < n_btiles. The next launch on the stream starts after this one completes.
        unsafe { *p.counters.add(btile as usize) = 0 };
    }
}

/// The standalone reduction: `grid = ceil(B / REDUCE_ROWS_PER_BLOCK)` blocks of
/// `REDUCE_THREADS_PER_BLOCK` threads, one warp per row.
///
/// # Safety
/// Launched so, with buffers of the sizes `p` states.
#[inline(always)]
pub(super) unsafe fn reduce_candidates(p: ReduceParams) {
    // SAFETY: special-register reads.
    let (tid, blk) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let row = blk * REDUCE_ROWS_PER_BLOCK + tid / 32;
    if row < p.b {
        // SAFETY: row < B; the early exit is per warp, so the whole warp is here.
        unsafe { reduce_row(p.candidates, p.n_candidates, row, p.tokens, p.scores, tid % 32) };
    }
}
