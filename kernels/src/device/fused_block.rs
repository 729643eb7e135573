//! The fused kernel with **block staging**: one `cp.async` ring per block, shared by all its warps.
//!
//! # Parameters
//! [`FusedParams`] by value; launch with `grid = n_vranges · n_btiles` blocks of
//! [`FusedVariant::threads`](crate::config::FusedVariant::threads) threads and
//! [`FusedVariant::smem_bytes`](crate::config::FusedVariant::smem_bytes) bytes of dynamic shared memory,
//! for the variant with `NB`, `WB` and `S` as below.
//!
//! # Thread mapping
//! `tid = threadIdx.x`, `warp = tid / 32`; `4·WB` warps. The block tile is `BLOCK_V = 128` vocab rows
//! × `BLOCK_B = 8·NB·WB` batch rows. Warp `warp` takes the 32 vocab rows `32·(warp / WB) ..` of the
//! block tile and the batch rows `8·NB·(warp % WB) ..` of the batch tile; within the warp, lanes map
//! exactly as in the per-warp kernel (see [`crate::config`]), so the epilogue and the fragments'
//! k-permutation are shared.
//!
//! - **Grid**: persistent. Block `blk` covers batch tile `blk % n_btiles` and vocab range
//!   `blk / n_btiles`, an even share of the `ceil(V / 128)` block tiles, taken in order.
//! - **Pipeline**: stage `g` of the block is D columns `64·(g mod n_k) ..` of block tile
//!   `first + g / n_k` (`n_k = ceil(D / 64)`). It runs on across block tiles: while one tile's
//!   epilogue runs, the next tile's first `S − 1` stages are already in flight.
//! - **Copies**: a stage is `128 + BLOCK_B` rows × 128 bytes (weight rows, then hidden rows). Thread
//!   `tid` copies piece `tid % 8` (16 bytes) of rows `tid / 8 + i · (threads / 8)`: each group of 8
//!   threads moves one whole 128-byte line. Weight rows past V and hidden rows past B are clamped to
//!   the last row (they feed only results the epilogue skips); columns past D are zero-filled.
//! - **Reads**: lane `(group, quad)` of a warp reads, for MMA chunk `m` (D columns `32m ..` of the
//!   stage), piece `4m + quad` of its four weight rows `32·warp_v + 4·group + j` and of its hidden rows
//!   `8·NB·warp_b + 8·nt + group`. Pieces are XOR-swizzled per row (see [`BlockRing`]) so that both the
//!   line-wide copies and these reads are free of bank conflicts.
//! - **Synchronization**: one block barrier per stage. After `cp.async.wait_group S−2` and the
//!   barrier, stage `g` has landed for every thread and every warp is done with stage `g − 1`, whose
//!   slot then receives stage `g + S − 1` (issued after the warp's MMAs on stage `g`, so the MMAs
//!   start right after the barrier).

use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use super::fused::{
    Accumulators, LanePosition, epilogue_tile, mma_chunk, reduce_if_last, tile_range, wait_oldest_stage,
    write_candidates,
};
use super::ptx::{cp_async_cg_shared_global_16, cp_async_commit_group, ld_shared_v4_u32, mov_u32_dynamic_smem};
use crate::candidate::Candidate;
use crate::config::{
    BLOCK_V, CHUNK_D, M_TILES_PER_WARP, ROWS_PER_LANE, STAGE_K, STAGE_ROW_BYTES, WARP_TILE_V, WARPS_PER_BLOCK,
    candidate_smem_bytes,
};
use crate::params::FusedParams;

/// The block's shared-memory ring of `S` stages. Stage `s` starts at `base + s · stage_bytes`; weight
/// row `r` (0..128) at `128·r`, hidden row `r` (0..BLOCK_B) at `128·(128 + r)`. 16-byte piece `c` of a
/// row is stored at piece `c ^ swizzle(row)`:
/// - weight rows: `r % 8`. A read phase (8 lanes: groups `2i, 2i + 1`) touches rows `4·group + j`,
///   whose swizzles differ in bit 2, so the 8 pieces are distinct.
/// - hidden rows: `((r & 1) << 2) | ((r >> 1) & 3)`. A read phase touches rows `8nt + 2i, 8nt + 2i + 1`,
///   again differing in bit 2.
///
/// Both are permutations of 0..8, so the 8 threads copying one line write 8 distinct pieces.
#[derive(Clone, Copy)]
struct BlockRing {
    base: u32,
    stage_bytes: u32,
}

impl BlockRing {
    #[inline(always)]
    fn new(smem: u32, warps: u32, block_b: u32) -> Self {
        Self { base: smem + candidate_smem_bytes(warps), stage_bytes: (BLOCK_V + block_b) * STAGE_ROW_BYTES }
    }

    /// Shared address of piece `c` (0..8) of weight row `r` in slot `slot`.
    #[inline(always)]
    fn weight(self, slot: u32, r: u32, c: u32) -> u32 {
        self.base + slot * self.stage_bytes + STAGE_ROW_BYTES * r + 16 * (c ^ (r % 8))
    }

    /// Shared address of piece `c` of hidden row `r` (row of the batch tile) in slot `slot`.
    #[inline(always)]
    fn hidden(self, slot: u32, r: u32, c: u32) -> u32 {
        let swizzle = ((r & 1) << 2) | ((r >> 1) & 3);
        self.base + slot * self.stage_bytes + STAGE_ROW_BYTES * (BLOCK_V + r) + 16 * (c ^ swizzle)
    }
}

/// Where the next stage to be issued comes from (block tile, D offset, ring slot), and this thread's
/// fixed part of every copy: its piece, its first weight row and its hidden rows' starts.
#[derive(Clone, Copy)]
struct Issuer<const H: usize> {
    tile: u32,
    k0: u32,
    slot: u32,
    /// `tid % 8`: the 16-byte piece of each line this thread copies.
    piece: u32,
    /// `tid / 8`: this thread's first row; it copies rows `row + i · threads / 8`.
    row: u32,
    /// Start of hidden row `min(b_first + row + i · threads / 8, B − 1)` for each pass `i` (null
    /// where that row is past the batch tile).
    hidden: [*const u16; H],
}

impl<const H: usize> Issuer<H> {
    #[inline(always)]
    fn new<const THREADS: u32, const BLOCK_B: u32>(p: &FusedParams, first: u32, tid: u32, b_first: u32) -> Self {
        let mut hidden = [core::ptr::null(); H];
        for (i, h) in hidden.iter_mut().enumerate() {
            let r = tid / 8 + i as u32 * (THREADS / 8);
            if r < BLOCK_B {
                let b = (b_first + r).min(p.b - 1);
                // SAFETY: b < B: the start of a row of the [B, D] hidden states.
                *h = unsafe { (p.hidden as *const u16).add(b as usize * p.d as usize) };
            }
        }
        Self { tile: first, k0: 0, slot: 0, piece: tid % 8, row: tid / 8, hidden }
    }
}

/// Issues this thread's copies of the next stage (if any tile is left), commits them as one group
/// (an empty group past the last tile, so group counting stays uniform) and advances.
///
/// # Safety
/// Launch contract of [`fused_sample_block`]; the slot's previous stage has been read by every warp
/// (a block barrier separates those reads from this call).
#[inline(always)]
unsafe fn issue_stage<const THREADS: u32, const BLOCK_B: u32, const S: u32, const H: usize>(
    p: &FusedParams,
    ring: BlockRing,
    it: &mut Issuer<H>,
    end: u32,
) {
    if it.tile < end {
        let rows_per_pass = THREADS / 8;
        let k = it.k0 + 8 * it.piece;
        let (k, size) = if k < p.d { (k as usize, 16) } else { (0, 0) };
        let first_row = it.tile * BLOCK_V + it.row;
        if it.tile * BLOCK_V + BLOCK_V <= p.v {
            // A whole tile: consecutive passes are `rows_per_pass` rows apart in memory.
            // SAFETY: every row is < V and k + 8 ≤ D (or size 0 at the row start).
            let src = unsafe { (p.weight as *const u16).add(first_row as usize * p.d as usize + k) };
            let stride = rows_per_pass as usize * p.d as usize;
            for i in 0..BLOCK_V / rows_per_pass {
                // SAFETY: as above: 16 aligned readable bytes per copy.
                unsafe {
                    cp_async_cg_shared_global_16(
                        ring.weight(it.slot, it.row + i * rows_per_pass, it.piece),
                        src.add(i as usize * stride) as *const u32,
                        size,
                    )
                };
            }
        } else {
            // The last tile of the vocab: rows past V are clamped to row V − 1 (they feed only
            // accumulator rows the epilogue never scores).
            for i in 0..BLOCK_V / rows_per_pass {
                let v = (first_row + i * rows_per_pass).min(p.v - 1);
                // SAFETY: v < V, as above.
                unsafe {
                    let src = (p.weight as *const u16).add(v as usize * p.d as usize + k) as *const u32;
                    cp_async_cg_shared_global_16(ring.weight(it.slot, it.row + i * rows_per_pass, it.piece), src, size);
                }
            }
        }
        for (i, h) in it.hidden.iter().enumerate() {
            let r = it.row + i as u32 * rows_per_pass;
            if r < BLOCK_B {
                // SAFETY: `h` starts a hidden row (r < BLOCK_B); k as above.
                unsafe {
                    cp_async_cg_shared_global_16(ring.hidden(it.slot, r, it.piece), h.add(k) as *const u32, size)
                };
            }
        }
    }
    cp_async_commit_group();
    it.k0 += STAGE_K;
    if it.k0 >= p.d {
        it.k0 = 0;
        it.tile += 1;
    }
    it.slot = if it.slot + 1 == S { 0 } else { it.slot + 1 };
}

/// Multiplies one landed stage: two k16 chunks, fragments read as documented in the module.
///
/// # Safety
/// The stage in `slot` has landed and is visible (after the block barrier); warp-uniform call.
#[inline(always)]
unsafe fn mma_stage<const NB: usize>(
    ring: BlockRing,
    slot: u32,
    acc: &mut Accumulators<NB>,
    w_row0: u32,
    h_row0: u32,
    quad: u32,
) {
    for m in 0..STAGE_K / CHUNK_D {
        let c = 4 * m + quad;
        let mut a = [[0u32; 4]; ROWS_PER_LANE];
        let mut h = [[0u32; 4]; NB];
        for (j, x) in a.iter_mut().enumerate() {
            // SAFETY: inside the landed slot.
            *x = unsafe { ld_shared_v4_u32(ring.weight(slot, w_row0 + j as u32, c)) };
        }
        for (nt, x) in h.iter_mut().enumerate() {
            // SAFETY: as above.
            *x = unsafe { ld_shared_v4_u32(ring.hidden(slot, h_row0 + 8 * nt as u32, c)) };
        }
        // SAFETY: warp-uniform (the caller's contract).
        unsafe { mma_chunk::<NB>(acc, &a, &h) };
    }
}

/// The fused kernel body with block staging: `4·WB` warps of `8·NB` batch rows, an `S`-stage ring.
///
/// # Safety
/// Launched as documented in the module with `THREADS = 128·WB` and the variant's shared memory, and
/// `p` validated by the host (shapes, 16-byte aligned buffers of the stated sizes, `d % D_ALIGN == 0`).
#[inline(always)]
pub unsafe fn fused_sample_block<
    const NB: usize,
    const WB: u32,
    const S: u32,
    const THREADS: u32,
    const BLOCK_B: u32,
    const H: usize,
>(
    p: FusedParams,
) {
    const {
        assert!(THREADS == 32 * WARPS_PER_BLOCK * WB && BLOCK_B == 8 * NB as u32 * WB && M_TILES_PER_WARP == 2);
        assert!(H as u32 == BLOCK_B.div_ceil(THREADS / 8), "H = hidden-row passes per stage");
    };
    // SAFETY: special-register reads.
    let (tid, blk) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let (lane, warp) = (tid % 32, tid / 32);
    let n_btiles = p.b.div_ceil(BLOCK_B).max(1);
    let (warp_b, warp_v) = (warp % WB, warp / WB);
    let b_first = (blk % n_btiles) * BLOCK_B;
    let pos = LanePosition {
        warp,
        group: lane / 4,
        quad: lane % 4,
        vrange: blk / n_btiles,
        b0: b_first + warp_b * 8 * NB as u32,
    };
    let (first, end) = tile_range(p.v.div_ceil(BLOCK_V), p.n_vranges, pos.vrange);
    let ring = BlockRing::new(mov_u32_dynamic_smem(), WARPS_PER_BLOCK * WB, BLOCK_B);
    let active = pos.b0 < p.b; // warp-uniform: this warp has batch rows to score
    let w_row0 = warp_v * WARP_TILE_V + ROWS_PER_LANE as u32 * pos.group;
    let h_row0 = warp_b * 8 * NB as u32 + pos.group;
    let mut cands = [Candidate::EMPTY; 16];
    let mut it = Issuer::<H>::new::<THREADS, BLOCK_B>(&p, first, tid, b_first);
    for _ in 0..S - 1 {
        // SAFETY: the ring is untouched so far.
        unsafe { issue_stage::<THREADS, BLOCK_B, S, H>(&p, ring, &mut it, end) };
    }
    let mut slot = 0;
    let mut tile = first;
    while tile < end {
        let mut acc: Accumulators<NB> = [[[0.0; 4]; NB]; M_TILES_PER_WARP];
        let mut k0 = 0;
        while k0 < p.d {
            wait_oldest_stage::<S>();
            // SAFETY: block-uniform loop bounds: every thread reaches every barrier.
            unsafe { _syncthreads() };
            if active {
                // SAFETY: this stage has landed for every thread (wait + barrier); warp-uniform.
                unsafe { mma_stage::<NB>(ring, slot, &mut acc, w_row0, h_row0, pos.quad) };
            }
            // Refill the slot of the previous stage (every warp finished it before the barrier
            // above). Issued after this stage's MMAs, so they start right after the barrier.
            // SAFETY: as stated.
            unsafe { issue_stage::<THREADS, BLOCK_B, S, H>(&p, ring, &mut it, end) };
            slot = if slot + 1 == S { 0 } else { slot + 1 };
            k0 += STAGE_K;
        }
        if active {
            let v0 = tile * BLOCK_V + w_row0;
            epilogue_tile::<NB>(&p, pos, v0, &acc, &mut cands);
        }
        tile += 1;
    }
    // SAFETY: every thread of the block reaches the block merge and the final reduction.
    unsafe {
        write_candidates::<NB, 16>(&p, pos, WARPS_PER_BLOCK * WB, WB, &cands);
        reduce_if_last(&p, tid, WARPS_PER_BLOCK * WB, blk % n_btiles, b_first, BLOCK_B);
    }
}
