//! The fused kernel on `wgmma` with **warp specialization** (sm_90a): a producer warpgroup fills the
//! staging ring, two consumer warpgroups take turns on the block's vocab tiles, and shared-memory
//! barriers (`mbarrier`) instead of block barriers hand each stage from one side to the other. While
//! one consumer runs its epilogue (transform, Philox noise, argmax), the other one's MMAs keep the
//! tensor cores busy, and no warp ever waits for the whole block inside the mainloop.
//!
//! # Parameters
//! [`FusedParams`] by value; launch with `grid = n_vranges · n_btiles` blocks of [`THREADS`] (384)
//! threads and [`FusedVariant::smem_bytes`](crate::config::FusedVariant::smem_bytes) bytes of dynamic
//! shared memory. Only in the sm_90a module; the link step gives these entries `.maxntid 384, 1, 1`,
//! so ptxas keeps them within the 168 registers per thread one 384-thread block per SM allows.
//!
//! # Thread mapping
//! `tid = threadIdx.x`, warpgroup `wg = tid / 128`, `warp = tid / 32`, `lane = tid % 32`.
//!
//! - **Grid**: as in `device::fused_wgmma`: block `blk` covers batch tile `blk % n_btiles` (`N` rows)
//!   and vocab range `blk / n_btiles` (an even share of the `ceil(V / 128)` block tiles).
//! - **Producer** (`wg = 0`): its 128 threads copy stage after stage (tile by tile, 64 D columns
//!   each) into an `S`-slot ring with `cp.async`, exactly as the one-warpgroup `wgmma` kernel does
//!   (same slab layout and vocab-row permutation). Before refilling a slot it waits on the slot's
//!   `empty` barrier. Each thread then waits until its copies of the stage `S − 2` back have landed,
//!   fences them into the async proxy and arrives on that stage's `full` barrier (128 arrivals).
//! - **Consumers** (`wg = 1, 2`): consumer `c = wg − 1` takes the tiles `first + c, first + c + 2, …`
//!   of the block's range. Per stage it waits on `full`, issues the stage's 8 `wgmma` as one group,
//!   waits until the previous stage's group is complete and releases that slot (lane 0 of each of its
//!   4 warps arrives on `empty`, 4 arrivals). After a tile's last stage it drains its MMAs, releases
//!   the slot, and runs the epilogue of `device::fused_wgmma` on its accumulators (warp `warp % 4`
//!   of the warpgroup owns the same vocab rows as warp `w` there).
//! - **Stage order**: stage `i` of the block (tile `first + i / n_k`, D step `i % n_k`) lives in slot
//!   `i % S`, in its `(i / S)`-th fill, so the barriers' phase parity is `(i / S) % 2`. Because the
//!   ring is filled in tile order, the consumers' mainloops alternate: one multiplies while the other
//!   finishes its epilogue.
//! - **Turns**: a phase-parity wait cannot tell the awaited phase from the one two phases earlier, so
//!   a consumer waits for its next tile's stages only after the other consumer has waited for the
//!   last stage of its own tile (`turn` barriers, one arrival each): every fill before the awaited
//!   one is then complete.
//! - **End**: all 12 warps merge candidates through shared memory (the producer's are empty) and the
//!   last block of the batch tile reduces them to tokens, as in every fused variant.
//!
//! # TMA variant ([`Staging::WgmmaTma`](crate::config::Staging::WgmmaTma), `TMA = true`)
//! The producer is one warp (warp 0; warps 1–3 of the producer warpgroup only take part in the final
//! merge). Per stage, after the slot's `empty` wait, lane 0 arrives on `full[slot]` with the stage's
//! byte count as expected transactions (`full` expects that one arrival), then copies the weight
//! slab — lane 0 as one 5-D box whose dimensions put the tile's rows in the permuted slab order of
//! the `cp.async` producer ([`TensorMaps::weight_tiles`]), or, for the last tile when `V % 128 ≠ 0`,
//! lanes 0–15 as 16 boxes of 8 rows 4 vocab rows apart (box `i` = slab rows `8i ..`, vocab rows
//! `vocab_of_slab_row(8i) + 4g`, [`TensorMaps::weight_rows`]) — and lane 16 the hidden box of
//! `BLOCK_B` rows, all with `cp.async.bulk.tensor` completing on `full[slot]`. No thread waits for
//! its own copies, so all `S` slots can be in flight; the tensor maps zero-fill rows past V and B,
//! and D columns past D.
//!
//! With `SPLIT = 2` (`warps_b = 2`) the consumers share every stage: consumer `c` multiplies the
//! weight slab with hidden rows `c·N ..` of a `2N`-row batch tile, both wait for every stage in
//! order (no turns needed) and both release it (`empty` expects 8 arrivals). Candidates merge per
//! batch slot: consumer warps are ordered so that `merge warp % 2` is their slot.
//!
//! Each logit is computed by the same `wgmma` instructions in the same order as in the one-warpgroup
//! kernel of the same `N`, so all of them draw bit-identical samples.

use core::arch::nvptx::_syncthreads;
use core::marker::PhantomData;

use super::fused::{LanePosition, reduce_if_last, wait_oldest_stage};
use super::fused_wgmma::{Place, Ring, WgmmaShape, advance, epilogue, issue_stage, mma_stage, write_wgmma_candidates};
use super::ptx::{
    bar_warp_sync, cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes,
    cp_async_bulk_tensor_5d_shared_cluster_global_tile_mbarrier_complete_tx_bytes, cp_async_wait_group,
    fence_mbarrier_init_release_cluster, fence_proxy_async_shared_cta, fence_proxy_tensormap_generic_acquire_gpu,
    mbarrier_arrive_expect_tx_shared_cta_b64, mbarrier_arrive_shared_cta_b64, mbarrier_init_shared_cta_b64,
    mbarrier_try_wait_parity_shared_cta_b64, mov_u32_dynamic_smem, wgmma_commit_group_sync_aligned,
    wgmma_fence_sync_aligned, wgmma_wait_group_sync_aligned,
};
use crate::candidate::Candidate;
use crate::config::{
    BLOCK_V, STAGE_K, STAGE_ROW_BYTES, TMA_T_TILE_V, TMA_WEIGHT_BOX_ROWS, TMA_WEIGHT_BOXES, WS_WARPS,
    vocab_of_slab_row, wgmma_candidate_smem_bytes,
};
use crate::params::{FusedParams, TensorMaps};

/// Threads per block: one producer and two consumer warpgroups.
pub const THREADS: u32 = 32 * WS_WARPS;
/// Threads of the producer warpgroup (arrivals per `full` phase of the `cp.async` producer).
const PRODUCER_THREADS: u32 = 128;
/// Arrivals per `empty` phase from one consumer: lane 0 of each of its 4 warps.
const CONSUMER_ARRIVALS: u32 = 4;

/// The block's barriers, 8 bytes each from `base`: `full[slot]`, `empty[slot]`, then `turn[c]`.
#[derive(Clone, Copy)]
pub(super) struct Barriers {
    base: u32,
    slots: u32,
}

impl Barriers {
    /// Completes a phase when the other consumer has waited for the last stage of its tile: consumer
    /// `c` may then wait for its next tile's stages (one arrival).
    #[inline(always)]
    fn turn(self, c: u32) -> u32 {
        self.base + 8 * (2 * self.slots + c)
    }
    /// Completes a phase when a stage has landed in `slot` (the producer's arrivals, and with TMA the
    /// stage's bytes).
    #[inline(always)]
    fn full(self, slot: u32) -> u32 {
        self.base + 8 * slot
    }
    /// Completes a phase when the MMAs reading `slot` are done (the consumers' arrivals).
    #[inline(always)]
    fn empty(self, slot: u32) -> u32 {
        self.base + 8 * (self.slots + slot)
    }
}

/// Spins until the phase of parity `parity` of barrier `bar` has completed, then reconverges the warp.
///
/// # Safety
/// `bar` is an initialized barrier; every lane of the warp calls this with the same arguments.
#[inline(always)]
pub(super) unsafe fn wait(bar: u32, parity: u32) {
    // SAFETY: forwarded contract.
    while !unsafe { mbarrier_try_wait_parity_shared_cta_b64(bar, parity) } {}
    bar_warp_sync();
}

/// The warp-specialized fused kernel body: `N = T::N` batch rows per consumer, an `S`-slot ring
/// filled by `cp.async` (`TMA = false`) or TMA copies (`TMA = true`), consumers taking turns on the
/// tiles (`SPLIT = 1`) or splitting a `2N`-row batch tile (`SPLIT = 2`, TMA only).
///
/// # Safety
/// Launched as documented in the module ([`THREADS`] threads, the variant's shared memory, sm_90a),
/// with `p` validated by the host and, with `TMA`, `p.tensor_maps` encoded for this launch.
#[inline(always)]
pub unsafe fn fused_sample_ws<T: WgmmaShape, const S: u32, const TMA: bool, const SPLIT: u32>(p: FusedParams) {
    const { assert!(SPLIT == 1 || (TMA && SPLIT == 2)) };
    let n = T::N;
    let block_b = SPLIT * n;
    let Place { tid, btile, mut pos, first, end } = Place::of_this_thread(&p, block_b, BLOCK_V);
    let (lane, warp, b_first) = (tid % 32, pos.warp, pos.b0);
    let wg = tid / 128;
    // This thread's batch slot (N rows) and its warp's place in the candidate merge, which expects
    // `merge warp % SPLIT` = slot; the producer's warps (empty candidates) fill the remaining places.
    let (slot_b, merge_warp) = match (SPLIT, wg) {
        (1, _) => (0, warp),
        (_, 0) => (warp % 2, 8 + warp),
        _ => (wg - 1, 2 * (warp % 4) + wg - 1),
    };
    pos.warp = merge_warp;
    pos.b0 = b_first + slot_b * n;
    let full_arrivals = if TMA { 1 } else { PRODUCER_THREADS };
    // SAFETY: every thread of the block, once, before anything else touches shared memory.
    let (bars, ring) =
        unsafe { setup::<S>(tid, wgmma_candidate_smem_bytes(WS_WARPS, n), BLOCK_V, block_b, full_arrivals, SPLIT) };
    let pipe = Pipeline { bars, ring, first, end, n_k: p.d.div_ceil(STAGE_K) };
    let mut cands = [Candidate::EMPTY; 32];
    if wg == 0 {
        if !TMA {
            // SAFETY: the producer warpgroup; forwarded launch contract.
            unsafe { produce::<S>(&p, pipe, tid, b_first) };
        } else if warp == 0 {
            // SAFETY: the producer warp; forwarded launch contract (the tensor maps are encoded).
            unsafe { produce_tma::<S, false>(&p, pipe, lane, b_first) };
        }
    } else {
        let mut consumer = WeightA::<T> {
            p: &p,
            ring: pipe.ring,
            hidden: slot_b * n,
            pos,
            v_lane: 4 * (8 * (warp % 4) + pos.group),
            cands: &mut cands,
            shape: PhantomData,
        };
        // SAFETY: the whole consumer warpgroup, converged; forwarded launch contract.
        unsafe { consume::<_, S>(&mut consumer, pipe, wg - 1, SPLIT == 2, tid) };
    }
    // SAFETY: every thread of the block reaches the block merge and the final reduction.
    unsafe {
        write_wgmma_candidates::<T>(&p, pos, WS_WARPS, SPLIT, &cands);
        reduce_if_last(&p, tid, WS_WARPS, btile, b_first, block_b);
    }
}

/// A block's staging pipeline: its barriers, its ring, and the stages it runs: `n_k` per tile of
/// `[first, end)`, stage `i` in slot `i % S`.
#[derive(Clone, Copy)]
pub(super) struct Pipeline {
    pub(super) bars: Barriers,
    pub(super) ring: Ring,
    pub(super) first: u32,
    pub(super) end: u32,
    pub(super) n_k: u32,
}

impl Pipeline {
    /// Stages of the block: `n_k` per tile.
    #[inline(always)]
    fn stages(self) -> u32 {
        (self.end - self.first) * self.n_k
    }

    /// Before stage `stage` refills `slot` (`stage % S`): waits until the consumers have released
    /// the slot's previous fill (none for the first `S` stages).
    ///
    /// # Safety
    /// The whole warp, converged, with the barriers of [`setup`].
    #[inline(always)]
    unsafe fn wait_until_free<const S: u32>(self, stage: u32, slot: u32) {
        if stage >= S {
            // SAFETY: forwarded contract.
            unsafe { wait(self.bars.empty(slot), (stage / S - 1) % 2) };
        }
    }
}

/// Places the barriers after the candidate area (`merge_bytes`) and the ring (`w_rows` weight and
/// `block_b` hidden rows per slot) after them, and initializes the barriers: `full` expects
/// `full_arrivals`, `empty` the 4 warps of one consumer (taking turns, `split = 1`) or of both
/// (sharing every stage, `split = 2`). Ends with a block barrier.
///
/// # Safety
/// Every thread of the block calls it once, first; the variant's shared memory holds the layout.
#[inline(always)]
pub(super) unsafe fn setup<const S: u32>(
    tid: u32,
    merge_bytes: u32,
    w_rows: u32,
    block_b: u32,
    full_arrivals: u32,
    split: u32,
) -> (Barriers, Ring) {
    let bars = Barriers { base: mov_u32_dynamic_smem() + merge_bytes, slots: S };
    let ring = Ring::new(bars.base + 8 * (2 * S + 2), w_rows, block_b);
    if tid == 0 {
        for slot in 0..S {
            // SAFETY: 8-byte aligned slots of the barrier area, before any thread uses them.
            unsafe {
                mbarrier_init_shared_cta_b64(bars.full(slot), full_arrivals);
                mbarrier_init_shared_cta_b64(bars.empty(slot), split * CONSUMER_ARRIVALS);
            }
        }
        for c in 0..2 {
            // SAFETY: as above.
            unsafe { mbarrier_init_shared_cta_b64(bars.turn(c), 1) };
        }
        fence_mbarrier_init_release_cluster();
    }
    // SAFETY: every thread of the block reaches it (the caller's contract).
    unsafe { _syncthreads() };
    (bars, ring)
}

/// What a consumer warpgroup does with a stage and with a finished tile.
pub(super) trait Consumer {
    /// The warpgroup's accumulators for one tile.
    type Acc: Copy;
    /// Zeroed accumulators.
    const ZERO: Self::Acc;
    /// Issues the stage's `wgmma` on the slab in `slot` into `acc`.
    ///
    /// # Safety
    /// The whole warpgroup, converged, after `wgmma.fence`; the slot holds a landed stage.
    unsafe fn mma(&self, slot: u32, acc: &mut Self::Acc);
    /// Transform + noise + argmax of tile `tile` from its final accumulators.
    fn epilogue(&mut self, tile: u32, acc: &Self::Acc);
}

/// The consumer of the weight-as-A kernels: `N` hidden rows from slab row `128 + hidden`, the
/// `device::fused_wgmma` epilogue.
struct WeightA<'a, T: WgmmaShape> {
    p: &'a FusedParams,
    ring: Ring,
    hidden: u32,
    pos: LanePosition,
    v_lane: u32,
    cands: &'a mut [Candidate; 32],
    shape: PhantomData<T>,
}

impl<T: WgmmaShape> Consumer for WeightA<'_, T> {
    type Acc = [T::Acc; 2];
    const ZERO: Self::Acc = [T::ZERO; 2];
    #[inline(always)]
    unsafe fn mma(&self, slot: u32, acc: &mut Self::Acc) {
        // SAFETY: forwarded contract.
        unsafe { mma_stage::<T>(self.ring.slab(slot), self.ring.hidden(slot, self.hidden), acc) };
    }
    #[inline(always)]
    fn epilogue(&mut self, tile: u32, acc: &Self::Acc) {
        epilogue::<T>(self.p, self.pos, tile * BLOCK_V + self.v_lane, acc, self.cands);
    }
}

/// One consumer warpgroup's pass over the pipeline's tiles `[first, end)` of `n_k` stages each: tiles
/// `first + c, first + c + 2, …` taking turns with the other consumer (`shared = false`), or every
/// tile when both share each stage. Per stage it waits for `full`, issues the consumer's `mma` as
/// one `wgmma` group, and releases the previous stage's slot once that group is complete; after a
/// tile's last stage it drains its MMAs and runs the consumer's `epilogue`.
///
/// # Safety
/// The 128 threads of consumer warpgroup `c` (`wg = c + 1`) call it converged, with the barriers of
/// [`setup`] and a producer filling stage `i` of the block into slot `i % S`.
#[inline(always)]
pub(super) unsafe fn consume<C: Consumer, const S: u32>(
    consumer: &mut C,
    Pipeline { bars, first, end, n_k, .. }: Pipeline,
    c: u32,
    shared: bool,
    tid: u32,
) {
    let lane = tid % 32;
    // Taking turns: every other tile; sharing: every tile.
    let (mut tile, step) = if shared { (first, 1) } else { (first + c, 2) };
    let mut j = 0; // this consumer's tile count
    while tile < end {
        // A phase-parity wait is only sound while the barrier is at most one phase short of the
        // awaited one: wait until the other consumer has seen its tile's stages land (so the fills
        // before ours are complete). Consumer 0's first tile needs no turn. Sharing, each consumer
        // waits for every stage in order, which keeps it so by itself.
        if !shared && (c == 1 || j > 0) {
            // SAFETY: warpgroup-uniform; an initialized barrier.
            unsafe { wait(bars.turn(c), (j + c + 1) % 2) };
        }
        let mut acc = C::ZERO;
        let mut stage = (tile - first) * n_k;
        let mut held = 0; // slot of the previous stage, still read by its MMAs
        for k in 0..n_k {
            let slot = stage % S;
            // SAFETY: warpgroup-uniform control flow: the whole consumer runs this loop converged.
            // The barrier orders the landed stage (fenced into the async proxy, or written by it)
            // before the MMAs that read it.
            unsafe {
                wait(bars.full(slot), (stage / S) % 2);
                if !shared && k + 1 == n_k && tid % 128 == 0 {
                    mbarrier_arrive_shared_cta_b64(bars.turn(1 - c));
                }
                wgmma_fence_sync_aligned();
                consumer.mma(slot, &mut acc);
                wgmma_commit_group_sync_aligned();
                // The previous stage's group is done; this one may still run.
                wgmma_wait_group_sync_aligned::<1>();
                if k > 0 && lane == 0 {
                    mbarrier_arrive_shared_cta_b64(bars.empty(held));
                }
            }
            held = slot;
            stage += 1;
        }
        // SAFETY: the whole warpgroup; the accumulators are final after this and the last slot is
        // no longer read.
        unsafe {
            wgmma_wait_group_sync_aligned::<0>();
            if lane == 0 {
                mbarrier_arrive_shared_cta_b64(bars.empty(held));
            }
        }
        consumer.epilogue(tile, &acc);
        tile += step;
        j += 1;
    }
}

/// The producer warpgroup: fills stage after stage of the block's tiles `[first, end)` and signals
/// each one `S − 2` stages later, once this thread's copies of it have landed.
///
/// # Safety
/// Called by the 128 threads of warpgroup 0 (`tid < 128`) of a kernel launched as documented.
#[inline(always)]
unsafe fn produce<const S: u32>(p: &FusedParams, pipe: Pipeline, tid: u32, b_first: u32) {
    let Pipeline { bars, ring, first, end, n_k } = pipe;
    let stages = pipe.stages();
    let lag = S - 2; // stages whose copies may still be in flight (wait_oldest_stage)
    let (mut tile, mut k, mut slot) = (first, 0, 0);
    for stage in 0..stages {
        // SAFETY: barriers of this block; `issue_stage` writes only `slot`, which no MMA reads any
        // more once its previous fill has been released.
        unsafe {
            pipe.wait_until_free::<S>(stage, slot);
            issue_stage(p, ring, slot, tile, k * STAGE_K, end, tid, b_first);
        }
        advance(&mut tile, &mut k, &mut slot, n_k, S);
        if stage >= lag {
            wait_oldest_stage::<S>();
            fence_proxy_async_shared_cta();
            // SAFETY: one of the 128 arrivals the stage's phase expects.
            unsafe { mbarrier_arrive_shared_cta_b64(bars.full((stage - lag) % S)) };
        }
    }
    cp_async_wait_group::<0>();
    fence_proxy_async_shared_cta();
    for stage in stages.saturating_sub(lag)..stages {
        // SAFETY: as above, for the stages not yet signalled.
        unsafe { mbarrier_arrive_shared_cta_b64(bars.full(stage % S)) };
    }
}

/// The TMA producer warp: per stage of the block's tiles `[first, end)`, waits until the slot is
/// released, announces the stage's bytes on its `full` barrier and copies the weight slab (one tile
/// box from lane 0, or 16 row boxes from lanes 0–15 for a partial last tile) and the hidden box of
/// `ring.n` rows (lane 16) into it.
///
/// # Safety
/// Called by the 32 lanes of warp 0 of a kernel launched as documented, whose `p.tensor_maps` hold
/// this launch's weight and hidden maps.
#[inline(always)]
pub(super) unsafe fn produce_tma<const S: u32, const HIDDEN_A: bool>(
    p: &FusedParams,
    pipe: Pipeline,
    lane: u32,
    b_first: u32,
) {
    let Pipeline { bars, ring, first, n_k, .. } = pipe;
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
    let stages = pipe.stages();
    let (mut tile, mut k, mut slot) = (first, 0, 0);
    for stage in 0..stages {
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
                    cp_async_bulk_tensor_5d_shared_cluster_global_tile_mbarrier_complete_tx_bytes(
                        dst,
                        tiles_map,
                        [x, 0, 0, 0, (tile * (TMA_T_TILE_V / 16)) as i32],
                        bars.full(slot),
                    );
                }
            } else if tile < p.tma_whole_tiles {
                if lane == 0 {
                    let w = (tile * (BLOCK_V / 32)) as i32;
                    cp_async_bulk_tensor_5d_shared_cluster_global_tile_mbarrier_complete_tx_bytes(
                        dst,
                        tiles_map,
                        [x, 0, 0, w, 0],
                        bars.full(slot),
                    );
                }
            } else if lane < TMA_WEIGHT_BOXES {
                let row = lane * TMA_WEIGHT_BOX_ROWS;
                let y = (tile * BLOCK_V + vocab_of_slab_row(row)) as i32;
                cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes(
                    dst + row * STAGE_ROW_BYTES,
                    rows_map,
                    x,
                    y,
                    bars.full(slot),
                );
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
        advance(&mut tile, &mut k, &mut slot, n_k, S);
    }
}
