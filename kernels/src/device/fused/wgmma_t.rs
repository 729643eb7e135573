//! The Hopper fused kernel with the hidden states as the `wgmma` A operand
//! ([`Family::WgmmaHiddenA`], sm_90a): 64 batch rows per consumer are the A operand and a 256-row
//! vocab tile the B operand of `wgmma.m64n256k16`. A weight byte staged in shared memory then meets
//! 64 batch rows per MMA, and the tensor cores read 80 instead of 128 bytes of shared memory per
//! 2048 multiply-adds, the rate the SM's tensor cores consume them.
//!
//! # Parameters
//! [`FusedParams`] by value with this launch's [`TensorMaps`](crate::params::TensorMaps) (the weight
//! map of [`tma_weight_tiles_t`](crate::config::tma_weight_tiles_t)); launch with
//! `grid = n_vranges · n_btiles` blocks of 384 threads (`.maxntid 384, 1, 1` and `.minnctapersm 1`
//! from the link step: ptxas honours `setmaxnreg` only with the entry's register count known) and
//! [`FusedVariant::smem_bytes`] bytes of dynamic shared memory. Needs `V % 16 == 0`.
//!
//! # Thread mapping
//! `tid = threadIdx.x`, warpgroup `wg = tid / 128`, `w = warp % 4`, `g = lane / 4`, `q = lane % 4`.
//!
//! - **Producer** (`wg = 0`, warp 0): [`produce_tma`] per stage: one 5-D weight box (the 256-row
//!   tile in the permuted slab order of [`vocab_of_slab_row_t`](crate::config::vocab_of_slab_row_t))
//!   and one hidden box of `BLOCK_B` rows.
//! - **Consumers** (`wg = 1, 2`, `c = wg − 1`): taking turns on the tiles (`SPLIT = 1`, both on the
//!   block's 64 rows) or sharing every stage (`SPLIT = 2`, consumer `c` on rows `64c ..`), with the
//!   barrier protocol of [`consume`]. Per stage: 4 `wgmma.m64n256k16` (one per k16 step).
//! - **Accumulators**: 128 f32 per thread; element `4j + 2e + c'` is batch row `16w + g + 8e`,
//!   slab column `8j + 2q + c'` = vocab row `16J + 4q + 2i + c'` of the tile for `j = 2J + i`. So
//!   lane `(w, g, q)` scores, for each of its two batch rows, the 16 Philox groups
//!   `16J + 4q .. 16J + 4q + 4` (`J = 0..16`) of every tile ([`fragment::hidden_a_tile`]), and keeps
//!   one candidate per batch row.
//! - **Registers**: 128 accumulators exceed the even share of 168 per thread with the epilogue, so
//!   the producer warpgroup lowers its budget to [`PRODUCER_REGS`] and the consumers raise theirs to
//!   [`CONSUMER_REGS`] (`setmaxnreg`); each role ends in its own copy of `finish_block` (the block merge, [`merge::finish`](crate::device::merge::finish), and the reduction), so ptxas
//!   allocates each under its own budget.
//! - **End**: block merge (contributors: the two consumers when taking turns, one when splitting)
//!   and, in the plain kernels, the last block's reduction (the `_lp` / `_tk` kernels leave their
//!   rows to `reduce_rows`).
//!
//! The hidden rows past B are zeros (TMA fill) and never scored; vocab rows past V are zeros and
//! skipped by the lane epilogue.

use crate::candidate::Candidate;
use crate::config::{Epilogue, Family, FusedVariant, TMA_T_TILE_V, TMAT_N64, TMAT_N64X2, WS_WARPS};
use crate::device::fragment;
use crate::device::mainloop::{Consumer, consume, mma_stage_hidden_a};
use crate::device::merge::{MergeArea, SharedMasses};
use crate::device::pipeline::{Pipeline, Ring};
use crate::device::producer::produce_tma;
use crate::device::ptx::{setmaxnreg_dec_sync_aligned_u32, setmaxnreg_inc_sync_aligned_u32};
use crate::device::schedule::{BlockWork, Thread};
use crate::params::FusedParams;
use crate::truncate::{LANE_TOP_WIDE, TopList};

/// Batch rows per consumer: the M of `wgmma.m64n256k16`.
const M: u32 = 64;
/// Per-thread registers of the producer warpgroup after `setmaxnreg`.
const PRODUCER_REGS: u32 = 24;
/// Per-thread registers of a consumer warpgroup after `setmaxnreg`: the 168 of an even share plus
/// the producer's 144 given up, split over the two consumers.
const CONSUMER_REGS: u32 = 240;
const _: () = assert!(PRODUCER_REGS + 2 * CONSUMER_REGS <= 3 * 168);

/// The consumer: its 64 hidden rows from slab row `256 + hidden`, the lane's batch rows `b` and quad
/// `q`, one candidate per batch row.
struct HiddenA<'a, const LP: bool, const TOP: bool> {
    p: &'a FusedParams,
    ring: Ring,
    hidden: u32,
    b: [u32; 2],
    q: u32,
    cands: &'a mut [Candidate; 2],
    /// The rows' log-mass in shared memory (log-probability kernels only).
    masses: SharedMasses,
    /// The rows' top lists (truncation kernels only).
    tops: &'a mut [TopList<LANE_TOP_WIDE>; 2],
}

impl<const LP: bool, const TOP: bool> Consumer for HiddenA<'_, LP, TOP> {
    type Acc = [f32; 128];
    const ZERO: Self::Acc = [0.0; 128];
    const HANDS_OFF: bool = false;
    const ASYNC: bool = true;
    #[inline(always)]
    unsafe fn mma(&self, slot: u32, acc: &mut Self::Acc) {
        // SAFETY: forwarded contract.
        unsafe { mma_stage_hidden_a(self.ring.hidden(slot, self.hidden), self.ring.slab(slot), acc, self.p.elem) };
    }
    #[inline(always)]
    fn epilogue(&mut self, tile: u32, acc: &Self::Acc) {
        fragment::hidden_a_tile::<LP, TOP>(self.p, self.b, tile, self.q, acc, self.cands, (self.masses, self.tops));
    }
    // Never called: this kernel runs whole tiles only (`HANDS_OFF = false`).
    unsafe fn hand_off(&self, _: &Self::Acc) {}
    unsafe fn resume(&self) -> Self::Acc {
        Self::ZERO
    }
}

/// The kernel body: an `S`-slot ring, consumers taking turns (`SPLIT = 1`) or splitting a 128-row
/// batch tile (`SPLIT = 2`).
///
/// # Safety
/// Launched as documented in the module, with `p` validated by the host (`V % 16 == 0`) and
/// `p.tensor_maps` encoded for this launch.
#[inline(always)]
unsafe fn body<const S: u32, const SPLIT: u32, const LP: bool, const TOP: bool>(p: FusedParams, v: FusedVariant) {
    const { assert!((SPLIT == 1 || SPLIT == 2) && (LP || !TOP)) };
    let e = match (LP, TOP) {
        (_, true) => Epilogue::Truncate,
        (true, false) => Epilogue::LogProbs,
        _ => Epilogue::Sample,
    };
    let block_b = SPLIT * M;
    let t = Thread::this();
    let work = BlockWork::of_this_block(&p, block_b, TMA_T_TILE_V);
    let wg = t.tid / 128;
    // SAFETY: every thread of the block, once, before anything else touches shared memory.
    let pipe = unsafe {
        Pipeline::setup::<S>(
            t.tid,
            v.prefix_bytes(e),
            (TMA_T_TILE_V, block_b),
            SPLIT,
            work.stages(&p, TMA_T_TILE_V, false),
        )
    };
    let area = MergeArea::new(block_b, v.merge_contributors());
    let threads = 32 * WS_WARPS;
    if wg == 0 {
        // SAFETY: the whole producer warpgroup, converged; the producer needs few registers.
        unsafe { setmaxnreg_dec_sync_aligned_u32::<PRODUCER_REGS>() };
        if t.warp == 0 {
            // SAFETY: the producer warp; forwarded launch contract (the tensor maps are encoded).
            unsafe { produce_tma::<S, true, true>(&p, pipe, t.lane, work.b_first) };
        }
        // SAFETY: every thread of the block reaches one `finish` (the consumers theirs).
        unsafe { super::finish_block::<LP>(area, &p, t.tid, threads, work) };
    } else {
        // SAFETY: the whole consumer warpgroup, converged; the producer's release leaves the pool
        // enough for both consumers (PRODUCER_REGS + 2 · CONSUMER_REGS ≤ 3 · 168).
        unsafe { setmaxnreg_inc_sync_aligned_u32::<CONSUMER_REGS>() };
        let c = wg - 1;
        let slot_b = if SPLIT == 2 { c } else { 0 };
        // The lane's two batch rows (block-relative).
        let rows = [slot_b * M + 16 * (t.warp % 4) + t.group, slot_b * M + 16 * (t.warp % 4) + t.group + 8];
        let mut cands = [Candidate::EMPTY; 2];
        // SAFETY: the log-probability kernels' launches reserve the masses
        // (`FusedVariant::smem_bytes`), two per lane; a consumer's tid − 128 < 256.
        let masses = unsafe { SharedMasses::for_lane::<LP>(v.merge_bytes(e), t.tid - 128, 2) };
        let mut tops = [TopList::<LANE_TOP_WIDE>::EMPTY; 2]; // read and written only with TOP
        let mut consumer = HiddenA::<LP, TOP> {
            p: &p,
            ring: pipe.ring,
            hidden: slot_b * M,
            b: [work.b_first + rows[0], work.b_first + rows[1]],
            q: t.quad,
            cands: &mut cands,
            masses,
            tops: &mut tops,
        };
        // SAFETY: the whole consumer warpgroup, converged; forwarded launch contract.
        unsafe { consume::<_, S>(&mut consumer, pipe, c, SPLIT == 2, t.tid) };
        // Contributors: the two consumers when taking turns; splitting, each row has one (index 0).
        let contributor = if SPLIT == 2 { 0 } else { c };
        // SAFETY: the whole warp is here; inside the merge area. Every thread reaches one `finish`.
        unsafe {
            // (Inside the block's `unsafe`: row e < 2, the lane's masses, read only with LP.)
            let state = (&cands, |e| masses.get(e));
            fragment::put_rows::<LP>(area, contributor, rows, t.quad, state);
            if TOP {
                fragment::put_tops_rows(&p, &work, contributor, rows, t.quad, &tops);
            }
            super::finish_block::<LP>(area, &p, t.tid, threads, work);
        }
    }
}

macro_rules! entry {
    ($name:ident, $name_lp:ident, $name_tk:ident, $variant:expr) => {
        entry!(@one $name, $variant, Epilogue::Sample, false, false);
        entry!(@one $name_lp, $variant, Epilogue::LogProbs, true, false);
        entry!(@one $name_tk, $variant, Epilogue::Truncate, true, true);
    };
    (@one $name:ident, $variant:expr, $epilogue:expr, $lp:literal, $top:literal) => {
        #[doc = concat!("The fused kernel `", stringify!($variant), "` (`wgmma`, hidden as A, sm_90a module), epilogue `", stringify!($epilogue), "`.")]
        ///
        /// # Safety
        /// See the module: the launch the host derives from the variant, with validated parameters.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: FusedParams) {
            const V: FusedVariant = $variant;
            const {
                assert!(V.is_entry($epilogue, stringify!($name)) && matches!(V.family, Family::WgmmaHiddenA));
                assert!(V.threads() == 32 * WS_WARPS && V.n_tiles == 8 && V.moves_registers());
            };
            // SAFETY: forwarded launch contract.
            unsafe { body::<{ V.stages_for($epilogue) }, { V.warps_b }, $lp, $top>(p, V) }
        }
    };
}
entry!(fused_sample_wgmma_tmat_n64, fused_sample_wgmma_tmat_n64_lp, fused_sample_wgmma_tmat_n64_tk, TMAT_N64);
entry!(fused_sample_wgmma_tmat_n64x2, fused_sample_wgmma_tmat_n64x2_lp, fused_sample_wgmma_tmat_n64x2_tk, TMAT_N64X2);
