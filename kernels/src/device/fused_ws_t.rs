//! The warp-specialized TMA kernel with the `wgmma` operand roles swapped
//! ([`Staging::WgmmaTmaT`](crate::config::Staging::WgmmaTmaT), sm_90a): the hidden states are the A
//! operand (64 batch rows per consumer) and a 256-row vocab tile is the B operand of
//! `wgmma.m64n256k16`. A weight byte staged in shared memory then meets 64 batch rows per MMA, and
//! the tensor cores read 10 KB of operands per 64 × 256 × 16 MMA instead of 4 KB per 64 × 64 × 16:
//! 80 instead of 128 bytes of shared memory per 2048 multiply-adds, the rate the SM's tensor cores
//! consume them.
//!
//! # Parameters
//! [`FusedParams`] by value with this launch's [`TensorMaps`](crate::params::TensorMaps) (the
//! weight map of [`tma_weight_tiles_t`](crate::config::tma_weight_tiles_t)); launch with
//! `grid = n_vranges · n_btiles` blocks of 384 threads (`config::WS_WARPS` warps) and the variant's
//! shared memory.
//! Needs `V % 16 == 0`. The link step gives these entries `.maxntid 384, 1, 1`.
//!
//! # Thread mapping
//! `tid = threadIdx.x`, warpgroup `wg = tid / 128`, `w = warp % 4`, `g = lane / 4`, `q = lane % 4`.
//!
//! - **Grid**: block `blk` covers batch tile `blk % n_btiles` (`BLOCK_B = 64 · SPLIT` rows) and vocab
//!   range `blk / n_btiles` (an even share of the `ceil(V / 256)` tiles).
//! - **Producer** (`wg = 0`, warp 0): as in `device::fused_ws` with TMA: per stage one 5-D weight box
//!   (the 256-row tile in the permuted slab order of
//!   [`vocab_of_slab_row_t`](crate::config::vocab_of_slab_row_t)) and one hidden box of `BLOCK_B`
//!   rows complete on the slot's `full` barrier.
//! - **Consumers** (`wg = 1, 2`, `c = wg − 1`): taking turns on the tiles (`SPLIT = 1`, both on the
//!   block's 64 rows) or sharing every stage (`SPLIT = 2`, consumer `c` on rows `64c ..`), with the
//!   barrier protocol of `device::fused_ws::consume`. Per stage: 4 `wgmma.m64n256k16` (one per k16
//!   step), A = the consumer's 64 hidden rows, B = the 256 weight rows.
//! - **Accumulators**: 128 f32 per thread; element `4j + 2e + c'` is batch row `16w + g + 8e`,
//!   slab column `8j + 2q + c'` = vocab row `16J + 4q + 2i + c'` of the tile for `j = 2J + i`. So
//!   lane `(w, g, q)` scores, for each of its two batch rows, the 16 Philox groups
//!   `16J + 4q .. 16J + 4q + 4` (`J = 0..16`) of every tile, and keeps one candidate per batch row.
//! - **Registers**: 128 accumulators exceed the even share of 168 per thread with the epilogue, so
//!   the producer warpgroup lowers its budget to [`PRODUCER_REGS`] and the consumers raise theirs to
//!   [`CONSUMER_REGS`] (`setmaxnreg`); each role ends in its own copy of the block merge, so ptxas
//!   allocates each under its own budget.
//! - **End**: lanes `q = 1..4` merge into lane `q = 0` (shuffles), which stores the candidate of its
//!   batch row and consumer in shared memory; after a block barrier, consumer thread `128 + r`
//!   merges row `r` over the consumers that scored it and writes it to `[B, n_vranges]`; the last
//!   block of the batch tile reduces the candidates to tokens, as in every fused variant.
//!
//! The hidden rows past B are zeros (TMA fill) and never scored; vocab rows past V are zeros and
//! masked by the epilogue.

use core::arch::nvptx::_syncthreads;

use super::fused::reduce_if_last;
use super::fused_wgmma::{Place, Ring, smem_descriptor};
use super::fused_ws::{Consumer, Pipeline, consume, produce_tma, setup};
use super::ptx::{
    ld_shared_v2_u32, mov_u32_dynamic_smem, setmaxnreg_dec_sync_aligned_u32, setmaxnreg_inc_sync_aligned_u32,
    st_shared_v2_u32, wgmma_mma_async_sync_aligned_m64n256k16_f32_bf16_bf16,
};
use super::warp::merge_butterfly;
use crate::candidate::Candidate;
use crate::config::{STAGE_K, TMA_T_TILE_V, WS_WARPS, wgmma_candidate_smem_bytes};
use crate::epilogue::update_aligned;
use crate::noise::RowNoise;
use crate::params::FusedParams;

/// Batch rows per consumer: the M of `wgmma.m64n256k16`.
const M: u32 = 64;
/// Per-thread registers of the producer warpgroup after `setmaxnreg`.
const PRODUCER_REGS: u32 = 24;
/// Per-thread registers of a consumer warpgroup after `setmaxnreg`: the 168 of an even share plus
/// the producer's 144 given up, split over the two consumers.
const CONSUMER_REGS: u32 = 240;
const _: () = assert!(PRODUCER_REGS + 2 * CONSUMER_REGS <= 3 * 168);

/// The hidden-as-A kernel body: an `S`-slot ring, consumers taking turns (`SPLIT = 1`) or splitting
/// a 128-row batch tile (`SPLIT = 2`).
///
/// # Safety
/// Launched as documented in the module, with `p` validated by the host (`V % 16 == 0`) and
/// `p.tensor_maps` encoded for this launch.
#[inline(always)]
pub unsafe fn fused_sample_ws_t<const S: u32, const SPLIT: u32>(p: FusedParams) {
    const { assert!(SPLIT == 1 || SPLIT == 2) };
    let block_b = SPLIT * M;
    let Place { tid, btile, pos, first, end } = Place::of_this_thread(&p, block_b, TMA_T_TILE_V);
    let (lane, warp, b_first) = (tid % 32, pos.warp, pos.b0);
    let wg = tid / 128;
    // SAFETY: every thread of the block, once, before anything else touches shared memory.
    let (bars, ring) =
        unsafe { setup::<S>(tid, wgmma_candidate_smem_bytes(WS_WARPS, M), TMA_T_TILE_V, block_b, 1, SPLIT) };
    let pipe = Pipeline { bars, ring, first, end, n_k: p.d.div_ceil(STAGE_K) };
    if wg == 0 {
        // SAFETY: the whole producer warpgroup, converged; the producer needs few registers.
        unsafe { setmaxnreg_dec_sync_aligned_u32::<PRODUCER_REGS>() };
        if warp == 0 {
            // SAFETY: the producer warp; forwarded launch contract (the tensor maps are encoded).
            unsafe { produce_tma::<S, true>(&p, pipe, lane, b_first) };
        }
        // SAFETY: every thread of the block reaches one `finish` (the consumers theirs).
        unsafe { finish::<SPLIT>(&p, tid, (btile, pos.vrange, b_first), None) };
    } else {
        // SAFETY: the whole consumer warpgroup, converged; the producer's release leaves the pool
        // enough for both consumers (PRODUCER_REGS + 2 · CONSUMER_REGS ≤ 3 · 168).
        unsafe { setmaxnreg_inc_sync_aligned_u32::<CONSUMER_REGS>() };
        let c = wg - 1;
        let slot_b = if SPLIT == 2 { c } else { 0 };
        // The lane's two batch rows (block-relative) and its Philox groups' offset in a tile.
        let rows = [slot_b * M + 16 * (warp % 4) + pos.group, slot_b * M + 16 * (warp % 4) + pos.group + 8];
        let mut cands = [Candidate::EMPTY; 2];
        let mut consumer = HiddenA {
            p: &p,
            ring,
            hidden: slot_b * M,
            b: [b_first + rows[0], b_first + rows[1]],
            q: pos.quad,
            cands: &mut cands,
        };
        // SAFETY: the whole consumer warpgroup, converged; forwarded launch contract.
        unsafe { consume::<_, S>(&mut consumer, pipe, c, SPLIT == 2, tid) };
        // SAFETY: every thread of the block reaches one `finish`.
        unsafe { finish::<SPLIT>(&p, tid, (btile, pos.vrange, b_first), Some((c, rows, pos.quad, &cands))) };
    }
}

/// The consumer of the hidden-as-A kernels: its 64 hidden rows from slab row `256 + hidden`, the
/// lane's batch rows `b` and quad `q`, one candidate per batch row.
struct HiddenA<'a> {
    p: &'a FusedParams,
    ring: Ring,
    hidden: u32,
    b: [u32; 2],
    q: u32,
    cands: &'a mut [Candidate; 2],
}

impl Consumer for HiddenA<'_> {
    type Acc = [f32; 128];
    const ZERO: Self::Acc = [0.0; 128];
    #[inline(always)]
    unsafe fn mma(&self, slot: u32, acc: &mut Self::Acc) {
        // SAFETY: forwarded contract.
        unsafe { mma_stage(self.ring.hidden(slot, self.hidden), self.ring.slab(slot), acc) };
    }
    #[inline(always)]
    fn epilogue(&mut self, tile: u32, acc: &Self::Acc) {
        epilogue(self.p, self.b, tile, self.q, acc, self.cands);
    }
}

/// The 4 `wgmma.m64n256k16` of one stage (one per k16 step): A = the 64 hidden rows at `hidden`,
/// B = the 256 weight rows at `weights`, into `acc`; the caller fences before and commits after.
///
/// # Safety
/// The whole warpgroup runs this converged, after `wgmma.fence`; the slab holds a landed stage in
/// the 128-byte swizzled K-major layout, both addresses 1024-byte aligned.
#[inline(always)]
unsafe fn mma_stage(hidden: u32, weights: u32, acc: &mut [f32; 128]) {
    for kk in 0..STAGE_K / 16 {
        // SAFETY: forwarded contract.
        unsafe {
            wgmma_mma_async_sync_aligned_m64n256k16_f32_bf16_bf16(
                acc,
                smem_descriptor(hidden + 32 * kk),
                smem_descriptor(weights + 32 * kk),
            )
        };
    }
}

/// Transform + noise + argmax of one 256-row tile: for each of the lane's two batch rows `b[e]`
/// (skipped past B), the 16 Philox groups `tile·256 + 16J + 4q ..` (`J = 0..16`).
///
/// The 32 (row, group) pairs run as 4 passes of 8 unrolled groups: pass `r` takes batch row
/// `e = r % 2` and groups `J = 8·(r / 2) ..`, picking its accumulators with selects among the 4
/// compile-time indices they can have. Fully unrolled, the code of 32 groups overflows the
/// instruction cache (ncu, `benchmarks/h200-2026-11-29o`: 39% of stalls on instruction fetch).
#[inline(always)]
fn epilogue(p: &FusedParams, b: [u32; 2], tile: u32, q: u32, acc: &[f32; 128], cands: &mut [Candidate; 2]) {
    let v_lane = tile * TMA_T_TILE_V + 4 * q;
    for r in 0..4u32 {
        let (e, j_hi) = (r % 2, r / 2);
        let row = if e == 0 { b[0] } else { b[1] };
        if row < p.b {
            // SAFETY: row < B and `streams` holds B entries.
            let stream = unsafe { *p.streams.add(row as usize) };
            let noise = RowNoise { seed: p.seed, stream, sample: p.sample };
            let mut cand = if e == 0 { cands[0] } else { cands[1] };
            // Accumulator 4j + 2e + c with j = 2J + i, J = 8·j_hi + J_lo: 64·j_hi + 8·J_lo + 4i + 2e + c.
            let pick = |i: usize| match r {
                0 => acc[i],
                1 => acc[i + 2],
                2 => acc[i + 64],
                _ => acc[i + 66],
            };
            unrolled!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                // Columns 8j + 2q + c for j = 2J, 2J + 1: vocab rows 16J + 4q + 0..4.
                let logits = [pick(8 * J), pick(8 * J + 1), pick(8 * J + 4), pick(8 * J + 5)];
                let v0 = v_lane + 16 * (8 * j_hi + J as u32);
                update_aligned(&mut cand, &logits, v0, p.v, &noise, &p.transform);
            });
            if e == 0 {
                cands[0] = cand;
            } else {
                cands[1] = cand;
            }
        }
    }
}

/// The block merge and the final reduction. Consumer lanes (`Some((c, rows, q, cands))`) merge
/// their candidates over the 4 lanes of a batch row and store them at `[c][row]` in shared memory;
/// after a block barrier, thread `128 + r` merges block row `r` over the consumers that scored it
/// (both when taking turns, consumer `r / 64` when splitting) and writes its `[B, n_vranges]` entry.
///
/// # Safety
/// Every thread of the block calls it once; consumer lanes with their warp converged.
#[inline(always)]
unsafe fn finish<const SPLIT: u32>(
    p: &FusedParams,
    tid: u32,
    (btile, vrange, b_first): (u32, u32, u32),
    consumer: Option<(u32, [u32; 2], u32, &[Candidate; 2])>,
) {
    let block_b = SPLIT * M;
    let smem = mov_u32_dynamic_smem();
    let slot = |c: u32, r: u32| smem + 8 * (c * block_b + r);
    if let Some((c, rows, q, cands)) = consumer {
        for e in 0..2 {
            // SAFETY: the whole warp is here (warp-uniform branch).
            let cand = unsafe { merge_butterfly(cands[e], [1, 2]) };
            if q == 0 {
                // SAFETY: 2 · block_b · 8 bytes ≤ the candidate area (12 warps · 64 · 8).
                unsafe { st_shared_v2_u32(slot(c, rows[e]), [cand.score.to_bits(), cand.index]) };
            }
        }
    }
    // SAFETY: every thread of the block reaches it once (the caller's contract).
    unsafe { _syncthreads() };
    if tid >= 128 && tid - 128 < block_b {
        let r = tid - 128;
        let b = b_first + r;
        if b < p.b {
            let mut cand = Candidate::EMPTY;
            let (c0, c1) = if SPLIT == 2 { (r / M, r / M + 1) } else { (0, 2) };
            for c in c0..c1 {
                // SAFETY: written above for (c, r), after the barrier.
                let [s, i] = unsafe { ld_shared_v2_u32(slot(c, r)) };
                cand = cand.merge(Candidate { score: f32::from_bits(s), index: i });
            }
            // SAFETY: b < B, vrange < n_vranges: inside the [B, n_vranges] candidate buffer.
            unsafe { *p.candidates.add(b as usize * p.n_vranges as usize + vrange as usize) = cand };
        }
    }
    // SAFETY: every thread of the block calls it, after the candidates are written.
    unsafe { reduce_if_last(p, tid, WS_WARPS, btile, b_first, block_b) };
}
