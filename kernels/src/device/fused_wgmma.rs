//! The fused kernel on Hopper's warpgroup MMA (`wgmma`, sm_90a): one warpgroup per block computes a
//! 128-row vocab tile × `N` batch rows with the tensor cores reading both operands from shared memory.
//!
//! # Parameters
//! [`FusedParams`] by value; launch with `grid = n_vranges · n_btiles` blocks of 128 threads and
//! [`FusedVariant::smem_bytes`](crate::config::FusedVariant::smem_bytes) bytes of dynamic shared memory.
//! Only in the sm_90a module (`wgmma` needs it).
//!
//! # Thread mapping
//! `tid = threadIdx.x` (one warpgroup: warps `w = 0..4`), `lane = tid % 32`, `g = lane / 4`,
//! `q = lane % 4`.
//!
//! - **Grid**: persistent, as for the other variants: block `blk` covers batch tile `blk % n_btiles`
//!   (`N` rows) and vocab range `blk / n_btiles` (an even share of the `ceil(V / 128)` block tiles).
//! - **Shared-memory slab per stage**: 128 weight rows, then `N` hidden rows, 128 bytes each (64 D
//!   columns), in the 128-byte-swizzled K-major layout `wgmma` reads (row `r` at `128·r`, its 16-byte
//!   piece `c` at piece `c ^ (r % 8)`, slabs 1024-byte aligned). Thread `tid` copies piece `tid % 8`
//!   of slab rows `tid / 8 + 16·i` with `cp.async`.
//! - **Weight row order**: the two 64-row halves `h` of the slab are the A operands of two
//!   `m64nNk16` MMAs. Slab row `64h + 16w + g + 8e` holds vocab row `tile·128 + 4·(8w + g) + 2h + e`,
//!   so the accumulators of lane `(w, g, q)` (MMA rows `16w + g` and `16w + g + 8` of both halves)
//!   are the four consecutive vocab rows `4·(8w + g) ..`: one Philox group, as in the other variants.
//! - **Accumulators**: per half, `N / 2` f32 per thread; element `4j + 2e + c` is MMA row
//!   `16w + g + 8e`, batch column `8j + 2q + c`. A lane scores its `N / 4` batch columns.
//! - **Synchronization per stage**: `cp.async.wait_group S − 2`, `fence.proxy.async.shared::cta`
//!   (landed copies become visible to the tensor cores), block barrier, 8 `wgmma` (4 k16 steps × 2
//!   halves) as one group, `wgmma.wait_group 1` (the group of stage `g − 1` is complete: it read its
//!   slot for the last time, while stage `g`'s group may still run), then the copies of stage
//!   `g + S − 1` into that slot. The block is one warpgroup, so its `wgmma` completion is the whole
//!   block's. At the end of a tile, `wgmma.wait_group 0` before the epilogue reads the accumulators.
//!
//! Every logit is the same f32 sum of bf16 products as in the `mma.sync` variants, but the tensor
//! cores may add the products of a k16 step in another order, so samples can differ from the other
//! variants' only where two perturbed scores tie within f32 rounding (the tests compare with the CPU
//! backend under that tolerance).

use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use super::fused::{LanePosition, reduce_if_last, tile_range, wait_oldest_stage, write_candidates};
use super::ptx::{
    cp_async_cg_shared_global_16, cp_async_commit_group, fence_proxy_async_shared_cta, mov_u32_dynamic_smem,
    wgmma_commit_group_sync_aligned, wgmma_fence_sync_aligned, wgmma_mma_async_sync_aligned_m64n16k16_f32_bf16_bf16,
    wgmma_mma_async_sync_aligned_m64n32k16_f32_bf16_bf16, wgmma_mma_async_sync_aligned_m64n64k16_f32_bf16_bf16,
    wgmma_mma_async_sync_aligned_m64n128k16_f32_bf16_bf16, wgmma_wait_group_sync_aligned,
};
use crate::candidate::Candidate;
use crate::config::{
    BLOCK_V, STAGE_K, STAGE_ROW_BYTES, WARPS_PER_BLOCK, vocab_of_slab_row, wgmma_candidate_smem_bytes,
};
use crate::epilogue::update_aligned;
use crate::noise::RowNoise;
use crate::params::FusedParams;

/// A batch width `N` of the `m64nNk16` MMA and its accumulator array.
pub trait WgmmaShape {
    /// Batch rows per block.
    const N: u32;
    /// `N / 2` f32 accumulators per thread.
    type Acc: Copy;
    /// Zeroed accumulators.
    const ZERO: Self::Acc;
    /// One `wgmma.mma_async` of this shape.
    ///
    /// # Safety
    /// As the wrapped instruction.
    unsafe fn mma(acc: &mut Self::Acc, desc_a: u64, desc_b: u64);
    /// Accumulator element `i` (compile-time index after unrolling).
    fn at(acc: &Self::Acc, i: usize) -> f32;
}

macro_rules! wgmma_shape {
    ($name:ident, $n:literal, $f:ident) => {
        #[doc = concat!("`m64n", stringify!($n), "k16`.")]
        pub struct $name;
        impl WgmmaShape for $name {
            const N: u32 = $n;
            type Acc = [f32; $n / 2];
            const ZERO: Self::Acc = [0.0; $n / 2];
            #[inline(always)]
            unsafe fn mma(acc: &mut Self::Acc, desc_a: u64, desc_b: u64) {
                // SAFETY: forwarded contract.
                unsafe { $f(acc, desc_a, desc_b) }
            }
            #[inline(always)]
            fn at(acc: &Self::Acc, i: usize) -> f32 {
                acc[i]
            }
        }
    };
}
wgmma_shape!(N16, 16, wgmma_mma_async_sync_aligned_m64n16k16_f32_bf16_bf16);
wgmma_shape!(N32, 32, wgmma_mma_async_sync_aligned_m64n32k16_f32_bf16_bf16);
wgmma_shape!(N64, 64, wgmma_mma_async_sync_aligned_m64n64k16_f32_bf16_bf16);
wgmma_shape!(N128, 128, wgmma_mma_async_sync_aligned_m64n128k16_f32_bf16_bf16);

/// Shared-memory matrix descriptor of a K-major operand in the 128-byte swizzle layout: start
/// address `addr` (16-byte units, bits 0–13), leading byte offset 1 (unused by this layout, bits
/// 16–29), stride byte offset 1024 bytes between 8-row groups (bits 32–45), base offset 0 (the
/// slabs are 1024-byte aligned), layout type 1 = 128-byte swizzle (bits 62–63).
#[inline(always)]
pub(super) fn smem_descriptor(addr: u32) -> u64 {
    ((addr as u64 >> 4) & 0x3FFF) | (1u64 << 16) | ((1024u64 >> 4) << 32) | (1u64 << 62)
}

/// The ring: `S` slabs of `(W + N) × 128` bytes (`W` weight rows, then `N` hidden rows) from a
/// 1024-byte aligned `base`.
#[derive(Clone, Copy)]
pub(super) struct Ring {
    base: u32,
    slab_bytes: u32,
    /// Weight rows per slab (`W`: the vocab tile, 128, or 256 in the hidden-as-A kernels).
    pub(super) w_rows: u32,
    /// Hidden rows per slab (`N`, the block's batch tile).
    pub(super) n: u32,
}

impl Ring {
    /// The ring of `w_rows` weight and `n` hidden rows per slab at the first 1024-byte boundary from
    /// `start`.
    #[inline(always)]
    pub(super) fn new(start: u32, w_rows: u32, n: u32) -> Self {
        Ring { base: start.next_multiple_of(1024), slab_bytes: (w_rows + n) * STAGE_ROW_BYTES, w_rows, n }
    }
    /// Shared address of slab `slot` (its first weight row).
    #[inline(always)]
    pub(super) fn slab(self, slot: u32) -> u32 {
        self.base + slot * self.slab_bytes
    }
    /// Shared address of hidden row `r` of slab `slot`.
    #[inline(always)]
    pub(super) fn hidden(self, slot: u32, r: u32) -> u32 {
        self.slab(slot) + STAGE_ROW_BYTES * (self.w_rows + r)
    }

    /// Shared address of piece `c` of slab row `r` (weight rows, then hidden rows).
    #[inline(always)]
    fn piece(self, slot: u32, r: u32, c: u32) -> u32 {
        self.slab(slot) + STAGE_ROW_BYTES * r + 16 * (c ^ (r % 8))
    }
}

/// Issues this thread's copies of stage (`tile`, `k0`) into `slot` and commits them; an empty group
/// when `tile >= end`.
///
/// # Safety
/// Launch contract; every MMA reading `slot` has completed (behind a block barrier).
#[inline(always)]
pub(super) unsafe fn issue_stage(
    p: &FusedParams,
    ring: Ring,
    slot: u32,
    tile: u32,
    k0: u32,
    end: u32,
    tid: u32,
    b_first: u32,
) {
    if tile < end {
        let piece = tid % 8;
        let k = k0 + 8 * piece;
        let (k, size) = if k < p.d { (k as usize, 16) } else { (0, 0) };
        for i in 0..BLOCK_V / 16 {
            let s = tid / 8 + 16 * i;
            let v = (tile * BLOCK_V + vocab_of_slab_row(s)).min(p.v - 1);
            // SAFETY: v < V, k + 8 ≤ D or size 0: 16 aligned readable bytes.
            unsafe {
                let src = (p.weight as *const u16).add(v as usize * p.d as usize + k) as *const u32;
                cp_async_cg_shared_global_16(ring.piece(slot, s, piece), src, size);
            }
        }
        let mut r = tid / 8;
        while r < ring.n {
            // Rows past B are clamped to row B − 1: they feed only columns the epilogue skips.
            let b = (b_first + r).min(p.b - 1);
            // SAFETY: b < B, k as above.
            unsafe {
                let src = (p.hidden as *const u16).add(b as usize * p.d as usize + k) as *const u32;
                cp_async_cg_shared_global_16(ring.piece(slot, BLOCK_V + r, piece), src, size);
            }
            r += 16;
        }
    }
    cp_async_commit_group();
}

/// Where a `wgmma` block and one of its threads sit in the launch (the grid mapping of the module doc).
#[derive(Clone, Copy)]
pub(super) struct Place {
    /// `threadIdx.x`.
    pub tid: u32,
    /// The block's batch tile (`blockIdx.x % n_btiles`).
    pub btile: u32,
    /// The lane's position; `warp = tid / 32` and `b0` = the batch tile's first row.
    pub pos: LanePosition,
    /// The block's vocab tiles `[first, end)`.
    pub first: u32,
    /// See `first`.
    pub end: u32,
}

impl Place {
    /// This thread's place for `N = n` batch rows and `tile_v` vocab rows per block tile.
    #[inline(always)]
    pub(super) fn of_this_thread(p: &FusedParams, n: u32, tile_v: u32) -> Self {
        // SAFETY: special-register reads.
        let (tid, blk) = unsafe { (_thread_idx_x(), _block_idx_x()) };
        let lane = tid % 32;
        let n_btiles = p.b.div_ceil(n).max(1);
        let btile = blk % n_btiles;
        let pos =
            LanePosition { warp: tid / 32, group: lane / 4, quad: lane % 4, vrange: blk / n_btiles, b0: btile * n };
        let (first, end) = tile_range(p.v.div_ceil(tile_v), p.n_vranges, pos.vrange);
        Place { tid, btile, pos, first, end }
    }
}

/// The fused kernel body on `wgmma`, `N = T::N` batch rows per block, an `S`-stage ring.
///
/// # Safety
/// Launched as documented in the module (128 threads, the variant's shared memory, sm_90a), with
/// `p` validated by the host.
#[inline(always)]
pub unsafe fn fused_sample_wgmma<T: WgmmaShape, const S: u32>(p: FusedParams) {
    let n = T::N;
    let Place { tid, btile, pos, first, end } = Place::of_this_thread(&p, n, BLOCK_V);
    let (warp, b_first) = (pos.warp, pos.b0);
    let smem = mov_u32_dynamic_smem();
    let ring = Ring::new(smem + wgmma_candidate_smem_bytes(WARPS_PER_BLOCK, n), BLOCK_V, n);
    let n_k = p.d.div_ceil(STAGE_K);
    // Issue position (tile, k step, slot), running ahead of the consumer by S − 1 stages.
    let (mut it, mut ik, mut islot) = (first, 0u32, 0u32);
    for _ in 0..S - 1 {
        // SAFETY: the ring is untouched so far.
        unsafe { issue_stage(&p, ring, islot, it, ik * STAGE_K, end, tid, b_first) };
        advance(&mut it, &mut ik, &mut islot, n_k, S);
    }
    let mut cands = [Candidate::EMPTY; 32];
    let mut slot = 0;
    let mut tile = first;
    let v_lane = 4 * (8 * warp + pos.group);
    while tile < end {
        let mut acc = [T::ZERO; 2];
        for _ in 0..n_k {
            wait_oldest_stage::<S>();
            fence_proxy_async_shared_cta();
            // SAFETY: block-uniform loop bounds.
            unsafe { _syncthreads() };
            // SAFETY: the whole block (one warpgroup) runs this converged; the slab holds the landed,
            // fenced stage in the layout the descriptors describe.
            unsafe {
                wgmma_fence_sync_aligned();
                mma_stage::<T>(ring.slab(slot), ring.hidden(slot, 0), &mut acc);
                wgmma_commit_group_sync_aligned();
                // The previous stage's group is done; this one may still run.
                wgmma_wait_group_sync_aligned::<1>();
            }
            // SAFETY: the previous stage's MMAs (the block's only warpgroup) completed, so its slot
            // (`islot`) is free; this stage's MMAs read another slot.
            unsafe { issue_stage(&p, ring, islot, it, ik * STAGE_K, end, tid, b_first) };
            advance(&mut it, &mut ik, &mut islot, n_k, S);
            slot = if slot + 1 == S { 0 } else { slot + 1 };
        }
        // SAFETY: the whole warpgroup; the accumulators are final after this.
        unsafe { wgmma_wait_group_sync_aligned::<0>() };
        epilogue::<T>(&p, pos, tile * BLOCK_V + v_lane, &acc, &mut cands);
        tile += 1;
    }
    // SAFETY: every thread of the block reaches the block merge and the final reduction.
    unsafe {
        write_wgmma_candidates::<T>(&p, pos, WARPS_PER_BLOCK, 1, &cands);
        reduce_if_last(&p, tid, WARPS_PER_BLOCK, btile, b_first, n);
    }
}

/// The 8 `wgmma` of one stage (4 k16 steps × the two 64-row halves of a 128-row weight tile) on the
/// weight rows at `weights` and the `N` hidden rows at `hidden` of a slab, into `acc`; the caller
/// fences before and commits after.
///
/// # Safety
/// The whole warpgroup runs this converged, after `wgmma.fence`; the slab holds a landed stage, made
/// visible to the async proxy, in the layout the descriptors describe; `weights` and `hidden` are
/// 1024-byte aligned (whole 8-row swizzle atoms).
#[inline(always)]
pub(super) unsafe fn mma_stage<T: WgmmaShape>(weights: u32, hidden: u32, acc: &mut [T::Acc; 2]) {
    for kk in 0..STAGE_K / 16 {
        let b_desc = smem_descriptor(hidden + 32 * kk);
        for (h, a) in acc.iter_mut().enumerate() {
            let a_desc = smem_descriptor(weights + STAGE_ROW_BYTES * 64 * h as u32 + 32 * kk);
            // SAFETY: forwarded contract.
            unsafe { T::mma(a, a_desc, b_desc) };
        }
    }
}

/// [`write_candidates`] for a `wgmma` block of `warps` warps in `warps_b` batch slots of `N` rows
/// (slot `warp % warps_b`), each lane holding `N / 4` columns.
///
/// # Safety
/// As [`write_candidates`]; the candidate area holds `wgmma_candidate_smem_bytes(warps, N)` bytes.
#[inline(always)]
pub(super) unsafe fn write_wgmma_candidates<T: WgmmaShape>(
    p: &FusedParams,
    pos: LanePosition,
    warps: u32,
    warps_b: u32,
    cands: &[Candidate; 32],
) {
    // SAFETY: forwarded contract.
    unsafe {
        match T::N {
            16 => write_candidates::<2, 32>(p, pos, warps, warps_b, cands),
            32 => write_candidates::<4, 32>(p, pos, warps, warps_b, cands),
            64 => write_candidates::<8, 32>(p, pos, warps, warps_b, cands),
            _ => write_candidates::<16, 32>(p, pos, warps, warps_b, cands),
        }
    }
}

/// Advances an issue position (tile, D step, ring slot) by one stage.
#[inline(always)]
pub(super) fn advance(tile: &mut u32, k: &mut u32, slot: &mut u32, n_k: u32, s: u32) {
    *k += 1;
    if *k == n_k {
        *k = 0;
        *tile += 1;
    }
    *slot = if *slot + 1 == s { 0 } else { *slot + 1 };
}

/// Transform + noise + argmax of one tile: the lane's four vocab rows from `v0`, for each of its
/// `N / 4` batch columns (column `8j + 2q + c` for index `i = 2j + c`).
///
/// Up to N = 64 the columns run as passes of 8 unrolled columns (pass `r < 2`: `i = 8r ..`),
/// picking accumulators and candidates with selects among the compile-time indices they can have:
/// fully unrolled, the code of 16 columns crowded the instruction cache (`tma_n64`, Qwen3-8B B = 64:
/// 0.3233 → 0.3157 ms, `benchmarks/h200-2026-11-29p`). N = 128 stays one unrolled pass (in passes
/// it spills).
#[inline(always)]
pub(super) fn epilogue<T: WgmmaShape>(
    p: &FusedParams,
    pos: LanePosition,
    v0: u32,
    acc: &[T::Acc; 2],
    cands: &mut [Candidate; 32],
) {
    let cols = T::N as usize / 4;
    if cols > 16 {
        unrolled!(I in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] {
            if I < cols {
                let (j, c) = (I / 2, I % 2);
                let b = pos.b0 + 8 * j as u32 + 2 * pos.quad + c as u32;
                if b < p.b {
                    let logits = [
                        T::at(&acc[0], 4 * j + c),
                        T::at(&acc[0], 4 * j + 2 + c),
                        T::at(&acc[1], 4 * j + c),
                        T::at(&acc[1], 4 * j + 2 + c),
                    ];
                    // SAFETY: b < B and `streams` holds B entries.
                    let stream = unsafe { *p.streams.add(b as usize) };
                    let noise = RowNoise { seed: p.seed, stream, sample: p.sample };
                    update_aligned(&mut cands[I], &logits, v0, p.v, &noise, &p.transform);
                }
            }
        });
        return;
    }
    for r in 0..cols.div_ceil(8) {
        // Accumulator 4j + c (+ 2) of column i = 8r + I: 16r + 4·(I / 2) + c. (The arms past r = 1
        // are never taken; they keep the selects' form of the measured build.)
        let pick = |h: usize, i: usize| match r {
            0 => T::at(&acc[h], i),
            1 => T::at(&acc[h], i + 16),
            2 => T::at(&acc[h], i + 32),
            _ => T::at(&acc[h], i + 48),
        };
        unrolled!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
            if I < cols {
                let (j, c) = (4 * r + I / 2, I % 2);
                let b = pos.b0 + 8 * j as u32 + 2 * pos.quad + c as u32;
                if b < p.b {
                    let a = 4 * (I / 2) + c;
                    let logits = [pick(0, a), pick(0, a + 2), pick(1, a), pick(1, a + 2)];
                    // SAFETY: b < B and `streams` holds B entries.
                    let stream = unsafe { *p.streams.add(b as usize) };
                    let noise = RowNoise { seed: p.seed, stream, sample: p.sample };
                    let mut cand = match r {
                        0 => cands[I],
                        1 => cands[I + 8],
                        2 => cands[I + 16],
                        _ => cands[I + 24],
                    };
                    update_aligned(&mut cand, &logits, v0, p.v, &noise, &p.transform);
                    match r {
                        0 => cands[I] = cand,
                        1 => cands[I + 8] = cand,
                        2 => cands[I + 16] = cand,
                        _ => cands[I + 24] = cand,
                    }
                }
            }
        });
    }
}
