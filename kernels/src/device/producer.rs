//! The producers: what fills a pipeline stage.
//!
//! - [`produce_tma`]: the TMA kernels' producer warp (the `wgmma` kernels' and the portable TMA
//!   kernels'). Per stage it waits until the slot is free,
//!   arms the slot's `full` barrier with the stage's byte count, and issues tensor-memory-accelerator
//!   copies (`cp.async.bulk.tensor`) that complete on that barrier: the weight slab — lane 0 as one
//!   5-D box whose dimensions put the tile's rows in the permuted slab order the MMA lanes need
//!   ([`TensorMaps::weight_tiles`](crate::params::TensorMaps::weight_tiles)), or, for the weight-as-A kernels' last tile when `V % 128 ≠ 0`,
//!   lanes 0–15 as 16 boxes of 8 rows 4 vocab rows apart ([`TensorMaps::weight_rows`](crate::params::TensorMaps::weight_rows)) — and lane 16
//!   the hidden box of `ring.n` rows. No thread waits for its own copies, so all `S` slots can be in
//!   flight; the tensor maps zero-fill rows past V and B, and D columns past D.
//! - [`BlockIssuer`]: the `mma.sync` kernel's producer, run by every thread of the block between its
//!   MMAs: `cp.async` copies of 16 bytes, each group of 8 threads moving one whole 128-byte line, one
//!   commit group per stage ([`super::pipeline::BlockRing`], [`super::pipeline::wait_oldest_stage`]).

use super::pipeline::{BlockRing, Pipeline};
use super::ptx::{
    bar_warp_sync, cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes,
    cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes_l2_cache_hint,
    cp_async_bulk_tensor_5d_shared_cluster_global_tile_mbarrier_complete_tx_bytes,
    cp_async_bulk_tensor_5d_shared_cluster_global_tile_mbarrier_complete_tx_bytes_l2_cache_hint,
    cp_async_cg_shared_global_16, cp_async_commit_group, createpolicy_fractional_l2_evict_first_b64,
    fence_proxy_tensormap_generic_acquire_gpu, mbarrier_arrive_expect_tx_shared_cta_b64,
};
use crate::config::{
    BLOCK_V, STAGE_K, STAGE_ROW_BYTES, TMA_T_TILE_V, TMA_WEIGHT_BOX_ROWS, TMA_WEIGHT_BOXES, vocab_of_slab_row,
};
use crate::params::FusedParams;

/// One 2-D weight copy (16 rows of a partial tile), with the L2 policy `policy` when given.
///
/// # Safety
/// As [`cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes`].
#[inline(always)]
unsafe fn copy_2d(dst: u32, map: u64, (x, y): (i32, i32), bar: u32, policy: Option<u64>) {
    // SAFETY: forwarded contract; the policy only changes L2 eviction priorities.
    unsafe {
        match policy {
            Some(p) => cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes_l2_cache_hint(
                dst,
                map,
                (x, y),
                bar,
                p,
            ),
            None => cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes(dst, map, x, y, bar),
        }
    }
}

/// One 5-D weight copy, with the L2 policy `policy` when given.
///
/// # Safety
/// As [`cp_async_bulk_tensor_5d_shared_cluster_global_tile_mbarrier_complete_tx_bytes`].
#[inline(always)]
unsafe fn copy_5d(dst: u32, map: u64, c: [i32; 5], bar: u32, policy: Option<u64>) {
    // SAFETY: forwarded contract; the policy only changes L2 eviction priorities.
    unsafe {
        match policy {
            Some(p) => cp_async_bulk_tensor_5d_shared_cluster_global_tile_mbarrier_complete_tx_bytes_l2_cache_hint(
                dst, map, c, bar, p,
            ),
            None => cp_async_bulk_tensor_5d_shared_cluster_global_tile_mbarrier_complete_tx_bytes(dst, map, c, bar),
        }
    }
}

/// The TMA producer warp: per stage of the block's range (its pieces in order: head, whole tiles,
/// tail, [`RangeStages::piece`](crate::schedule::RangeStages::piece)), waits until the slot is
/// released, announces the stage's bytes on its `full` barrier and copies the weight slab (one tile
/// box from lane 0, or 16 row boxes from lanes 0–15 for a partial last tile) and the hidden box of
/// `ring.n` rows (lane 16) into it. `WHOLE`: the range has no head or tail (whole tiles).
///
/// # Safety
/// Called by the 32 lanes of warp 0 of a kernel launched as documented, whose `p.tensor_maps` hold
/// this launch's weight and hidden maps.
#[inline(always)]
pub(super) unsafe fn produce_tma<const S: u32, const HIDDEN_A: bool, const WHOLE: bool>(
    p: &FusedParams,
    pipe: Pipeline,
    lane: u32,
    b_first: u32,
) {
    let Pipeline { bars, ring, range } = pipe;
    let maps = p.tensor_maps;
    // SAFETY: `tensor_maps` points at this launch's maps in device memory (launch contract).
    let (tiles_map, rows_map, hidden_map) = unsafe {
        (
            &raw const (*maps).weight_tiles as u64,
            &raw const (*maps).weight_rows as u64,
            &raw const (*maps).hidden as u64,
        )
    };
    if lane <= TMA_WEIGHT_BOXES {
        // Every lane that copies acquires the maps it may copy through.
        for map in [tiles_map, rows_map, hidden_map] {
            // SAFETY: 128 readable bytes of global memory.
            unsafe { fence_proxy_tensormap_generic_acquire_gpu(map) };
        }
    }
    let stage_bytes = (ring.w_rows + ring.n) * STAGE_ROW_BYTES;
    // The weights are read once per batch tile. With one batch tile (every launch of up to
    // `ring.n` rows) no block reads a weight byte again, so their copies ask L2 to evict those lines
    // first: the lines that are read again stay (the hidden rows every block reads each stage, the
    // kernels' code, the candidates and top lists the next kernel reads). With more batch tiles the
    // other tiles' blocks read each weight tile again through L2: no hint (an `evict_normal` hint
    // there took 4–6% longer at B = 128–256, docs/findings/36).
    let evict_first = p.b <= ring.n;
    let policy = createpolicy_fractional_l2_evict_first_b64();
    let (mut stage, mut slot) = (0, 0);
    // Without head and tail pieces (`WHOLE`: whole tiles) the pieces are the tiles.
    let pieces = if WHOLE { range.end - range.first } else { range.pieces() };
    for j in 0..pieces {
        let (tile, k0, k1) = if WHOLE {
            (range.first + j, 0, range.n_k)
        } else {
            let piece = range.piece(j);
            (piece.tile, piece.k0, piece.k1)
        };
        for k in k0..k1 {
            // SAFETY: barriers of this block, waited by the whole warp; the copies write only `slot`, which
            // no MMA reads any more once its previous fill has been released, and complete on the phase
            // of `full[slot]` that lane 0 has just armed with exactly their bytes (one tile box of
            // 128 × 128 bytes or 16 boxes of 8 × 128 bytes, and one hidden box of `ring.n` × 128 bytes,
            // zero-filled where outside).
            unsafe {
                pipe.wait_until_free::<S>(stage, slot);
                if lane == 0 {
                    mbarrier_arrive_expect_tx_shared_cta_b64(bars.full(slot), stage_bytes);
                }
                bar_warp_sync();
                let x = (k * STAGE_K) as i32;
                let dst = ring.slab(slot);
                if HIDDEN_A {
                    // One box of the 256-row tile (`config::tma_weight_tiles_t`: J = 16·tile).
                    if lane == 0 {
                        let c = [x, 0, 0, 0, (tile * (TMA_T_TILE_V / 16)) as i32];
                        copy_5d(dst, tiles_map, c, bars.full(slot), evict_first.then_some(policy));
                    }
                } else if tile < p.tma_whole_tiles {
                    if lane == 0 {
                        let w = (tile * (BLOCK_V / 32)) as i32;
                        copy_5d(dst, tiles_map, [x, 0, 0, w, 0], bars.full(slot), evict_first.then_some(policy));
                    }
                } else if lane < TMA_WEIGHT_BOXES {
                    let row = lane * TMA_WEIGHT_BOX_ROWS;
                    let y = (tile * BLOCK_V + vocab_of_slab_row(row)) as i32;
                    let dst = dst + row * STAGE_ROW_BYTES;
                    copy_2d(dst, rows_map, (x, y), bars.full(slot), evict_first.then_some(policy));
                }
                if lane == TMA_WEIGHT_BOXES {
                    let dst = ring.hidden(slot, 0);
                    cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes(
                        dst,
                        hidden_map,
                        x,
                        b_first as i32,
                        bars.full(slot),
                    );
                }
            }
            stage += 1;
            slot = if slot + 1 == S { 0 } else { slot + 1 };
        }
    }
}

/// The `mma.sync` kernel's producer: where the next stage to be issued comes from (block tile, D
/// offset, ring slot), and this thread's fixed part of every copy: its piece, its first row and its
/// hidden rows' starts. `H` = hidden-row passes per stage (`ceil(BLOCK_B / (THREADS / 8))`).
#[derive(Clone, Copy)]
pub(super) struct BlockIssuer<const THREADS: u32, const BLOCK_B: u32, const S: u32, const H: usize> {
    ring: BlockRing,
    tile: u32,
    end: u32,
    k0: u32,
    slot: u32,
    /// `tid % 8`: the 16-byte piece of each line this thread copies.
    piece: u32,
    /// `tid / 8`: this thread's first row; it copies rows `row + i · THREADS / 8`.
    row: u32,
    /// Start of hidden row `min(b_first + row + i · THREADS / 8, B − 1)` for each pass `i` (null
    /// where that row is past the batch tile).
    hidden: [*const u16; H],
}

impl<const THREADS: u32, const BLOCK_B: u32, const S: u32, const H: usize> BlockIssuer<THREADS, BLOCK_B, S, H> {
    /// The issuer of thread `tid` for the tiles `[first, end)` of batch tile `b_first ..`.
    #[inline(always)]
    pub(super) fn new(p: &FusedParams, ring: BlockRing, (first, end): (u32, u32), tid: u32, b_first: u32) -> Self {
        const { assert!(H as u32 == BLOCK_B.div_ceil(THREADS / 8), "H = hidden-row passes per stage") };
        let mut hidden = [core::ptr::null(); H];
        for (i, h) in hidden.iter_mut().enumerate() {
            let r = tid / 8 + i as u32 * (THREADS / 8);
            if r < BLOCK_B {
                let b = (b_first + r).min(p.b - 1);
                // SAFETY: b < B: the start of a row of the [B, D] hidden states.
                *h = unsafe { (p.hidden as *const u16).add(b as usize * p.d as usize) };
            }
        }
        Self { ring, tile: first, end, k0: 0, slot: 0, piece: tid % 8, row: tid / 8, hidden }
    }

    /// Issues this thread's copies of the next stage (if any tile is left), commits them as one
    /// group (an empty group past the last tile, so group counting stays uniform) and advances.
    /// Weight rows past V and hidden rows past B are clamped to the last row (they feed only results
    /// the epilogue skips); columns past D are zero-filled (source size 0).
    ///
    /// # Safety
    /// Launch contract of the `mma.sync` kernel; the slot's previous stage has been read by every
    /// warp (a block barrier separates those reads from this call).
    #[inline(always)]
    pub(super) unsafe fn issue(&mut self, p: &FusedParams) {
        if self.tile < self.end {
            let rows_per_pass = THREADS / 8;
            let k = self.k0 + 8 * self.piece;
            let (k, size) = if k < p.d { (k as usize, 16) } else { (0, 0) };
            let first_row = self.tile * BLOCK_V + self.row;
            if self.tile * BLOCK_V + BLOCK_V <= p.v {
                // A whole tile: consecutive passes are `rows_per_pass` rows apart in memory.
                // SAFETY: every row is < V and k + 8 ≤ D (or size 0 at the row start).
                let src = unsafe { (p.weight as *const u16).add(first_row as usize * p.d as usize + k) };
                let stride = rows_per_pass as usize * p.d as usize;
                for i in 0..BLOCK_V / rows_per_pass {
                    // SAFETY: as above: 16 aligned readable bytes per copy.
                    unsafe {
                        cp_async_cg_shared_global_16(
                            self.ring.weight(self.slot, self.row + i * rows_per_pass, self.piece),
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
                        cp_async_cg_shared_global_16(
                            self.ring.weight(self.slot, self.row + i * rows_per_pass, self.piece),
                            src,
                            size,
                        );
                    }
                }
            }
            for (i, h) in self.hidden.iter().enumerate() {
                let r = self.row + i as u32 * rows_per_pass;
                if r < BLOCK_B {
                    // SAFETY: `h` starts a hidden row (r < BLOCK_B); k as above.
                    unsafe {
                        cp_async_cg_shared_global_16(
                            self.ring.hidden(self.slot, r, self.piece),
                            h.add(k) as *const u32,
                            size,
                        )
                    };
                }
            }
        }
        cp_async_commit_group();
        self.k0 += STAGE_K;
        if self.k0 >= p.d {
            self.k0 = 0;
            self.tile += 1;
        }
        self.slot = if self.slot + 1 == S { 0 } else { self.slot + 1 };
    }
}
