//! The Hopper fused kernel with the weight as the `wgmma` A operand ([`Family::WgmmaWeightA`],
//! sm_90a): a TMA producer warp and two consumer warpgroups, warp-specialized.
//!
//! # Parameters
//! [`FusedParams`] by value with this launch's [`TensorMaps`](crate::params::TensorMaps) (weight maps
//! of [`tma_weight_tiles`](crate::config::tma_weight_tiles) and
//! [`tma_weight_rows`](crate::config::tma_weight_rows), hidden map of `BLOCK_B` rows); launch with
//! `grid = n_vranges · n_btiles` blocks of 384 threads (the link step writes `.maxntid 384, 1, 1`,
//! so ptxas keeps them within the 168 registers per thread one such block per SM allows, and for
//! the N = 64 kernels `.minnctapersm 1`, so it honours their `setmaxnreg`) and
//! [`FusedVariant::smem_bytes`] bytes of dynamic shared memory.
//!
//! # Thread mapping
//! `tid = threadIdx.x`, warpgroup `wg = tid / 128`, `w = warp % 4`, `g = lane / 4`, `q = lane % 4`.
//!
//! - **Producer** (`wg = 0`, warp 0; warps 1–3 only join the block merge): [`produce_tma`] fills an
//!   `S`-slot ring of slabs of 128 weight rows (one 5-D box in the permuted order of
//!   [`vocab_of_slab_row`](crate::config::vocab_of_slab_row)) and `BLOCK_B` hidden rows.
//! - **Consumers** (`wg = 1, 2`, `c = wg − 1`): [`consume`] per stage: 8 `wgmma.m64nNk16` (4 k16
//!   steps × the two 64-row halves of the tile), A = weight, B = the consumer's `N` hidden rows.
//!   `SPLIT = 1`: consumer `c` takes tiles `first + c, first + c + 2, …` (while one runs its epilogue
//!   the other's MMAs keep the tensor cores busy); `SPLIT = 2`: both take every tile, consumer `c` on
//!   batch rows `c·N ..` of a `2N`-row batch tile.
//! - **Accumulators**: per half `h`, `N / 2` f32; element `4j + 2e + c'` is MMA row `16w + g + 8e`,
//!   batch column `8j + 2q + c'`; slab row `64h + 16w + 8e + g` holds vocab row
//!   `4·(8w + g) + 2h + e`, so lane `(w, g, q)` holds the four consecutive vocab rows
//!   `4·(8w + g) ..` (one Philox group) of each tile for its `N / 4` batch columns
//!   ([`fragment::weight_a_tile`]).
//! - **Registers**: the N = 64 kernels (16 columns per lane: their candidates, and in the `_tk`
//!   kernels 16 top lists, beside 32 accumulators) lower the producer warpgroup's budget to
//!   [`PRODUCER_REGS`] and raise the consumers' to [`CONSUMER_REGS`] (`setmaxnreg`), each role ending
//!   in its own copy of `finish_block` (the block merge, [`merge::finish`](crate::device::merge::finish), and the reduction); N = 16 and 32 fit the even share of 168.
//! - **End**: block merge (contributors: the 8 consumer warps when taking turns, the 4 warps `w` when
//!   splitting) and, in the plain kernels, the last block's reduction (the `_lp` / `_tk` kernels
//!   leave their rows to `reduce_rows`).
//!
//! All variants of one `N` compute each logit with the same `wgmma` instructions in the same order,
//! so they draw bit-identical samples.

use core::marker::PhantomData;

use crate::candidate::Candidate;
use crate::config::{BLOCK_V, Epilogue, Family, FusedVariant, TMA_N16, TMA_N32, TMA_N64, TMA_N64X2, WS_WARPS};
use crate::device::fragment;
use crate::device::handoff::Handoff;
use crate::device::mainloop::{Consumer, N16, N32, N64, WgmmaShape, consume, mma_stage_weight_a};
use crate::device::merge::{MergeArea, SharedMasses};
use crate::device::pipeline::{Pipeline, Ring};
use crate::device::producer::produce_tma;
use crate::device::ptx::{setmaxnreg_dec_sync_aligned_u32, setmaxnreg_inc_sync_aligned_u32};
use crate::device::schedule::{BlockWork, Thread};
use crate::params::FusedParams;
use crate::truncate::{LANE_TOP, TopList};

/// Per-thread registers of the producer warpgroup after `setmaxnreg` (the N = 64 kernels).
const PRODUCER_REGS: u32 = 24;
/// Per-thread registers of a consumer warpgroup after `setmaxnreg` (the N = 64 kernels): the 168 of
/// an even share plus the producer's 144 given up, split over the two consumers.
const CONSUMER_REGS: u32 = 240;
const _: () = assert!(PRODUCER_REGS + 2 * CONSUMER_REGS <= 3 * 168);

/// The consumer: `N` hidden rows from slab row `128 + hidden`, the weight-as-A fragment adapter.
struct WeightA<'a, T: WgmmaShape, const LP: bool, const TOP: bool> {
    p: &'a FusedParams,
    ring: Ring,
    hidden: u32,
    /// First batch row of the lane's columns, and its quad.
    b0_quad: (u32, u32),
    /// Offset of the lane's Philox group in a tile: `4·(8w + g)`.
    v_lane: u32,
    cands: &'a mut [Candidate; 32],
    /// The columns' log-mass in shared memory (log-probability kernels only).
    masses: SharedMasses,
    /// The rows' top lists (truncation kernels only).
    tops: &'a mut [TopList<LANE_TOP>; 32],
    /// The handoff slots of the block's range boundaries (stage-balanced ranges):
    /// (vocab range, consumer slot, consumer thread 0..128).
    handoff: (u32, u32, u32),
    shape: PhantomData<T>,
}

impl<T: WgmmaShape, const LP: bool, const TOP: bool> WeightA<'_, T, LP, TOP> {
    /// The thread's view of the handoff slot of range boundary `boundary`.
    ///
    /// # Safety
    /// A launch with handoff buffers; `boundary < n_vranges`.
    #[inline(always)]
    unsafe fn slot(&self, boundary: u32) -> Handoff {
        let (_, c, t) = self.handoff;
        // SAFETY: forwarded contract; c < 2, t < 128, `2N` floats per thread (the variant's `N`).
        unsafe { Handoff::at(self.p, boundary, c, t, 2 * (T::N / 2)) }
    }
}

impl<T: WgmmaShape, const LP: bool, const TOP: bool> Consumer for WeightA<'_, T, LP, TOP> {
    type Acc = [T::Acc; 2];
    const ZERO: Self::Acc = [T::ZERO; 2];
    // The truncation kernels keep whole tiles: the handoff code cost their register-bound consumers
    // spills (docs/findings/34).
    const HANDS_OFF: bool = !TOP;
    const ASYNC: bool = true;
    #[inline(always)]
    unsafe fn mma(&self, slot: u32, acc: &mut Self::Acc) {
        // SAFETY: forwarded contract.
        unsafe { mma_stage_weight_a::<T>(self.ring.slab(slot), self.ring.hidden(slot, self.hidden), acc, self.p.elem) };
    }
    #[inline(always)]
    fn epilogue(&mut self, tile: u32, acc: &Self::Acc) {
        let v0 = tile * BLOCK_V + self.v_lane;
        fragment::weight_a_tile::<T, LP, TOP>(self.p, self.b0_quad, v0, acc, self.cands, (self.masses, self.tops));
    }
    #[inline(always)]
    unsafe fn hand_off(&self, acc: &Self::Acc) {
        // The head's tile is the last of the range below: boundary = this range.
        // SAFETY: a handoff launch (the caller's contract); the block's range is > 0 (it has a head).
        let slot = unsafe { self.slot(self.handoff.0) };
        // Group q: floats 4q' .. 4q' + 4 of half h (q = h·N/8 + q').
        let groups = T::N / 8;
        let at = |q: u32| {
            let (h, i) = ((q / groups) as usize, (4 * (q % groups)) as usize);
            [T::at(&acc[h], i), T::at(&acc[h], i + 1), T::at(&acc[h], i + 2), T::at(&acc[h], i + 3)]
        };
        // SAFETY: once; the thread's 2·(N/2) floats are N/4 groups.
        unsafe { slot.hand_over(2 * groups, at) };
    }
    #[inline(always)]
    unsafe fn resume(&self) -> Self::Acc {
        // The tail's tile is the first (head) of the range above: boundary = this range + 1.
        // SAFETY: a handoff launch; the block has a tail, so a range above.
        let slot = unsafe { self.slot(self.handoff.0 + 1) };
        let mut acc = Self::ZERO;
        let groups = T::N / 8;
        let put = |q: u32, x: [f32; 4]| {
            let (h, i) = ((q / groups) as usize, (4 * (q % groups)) as usize);
            for (e, x) in x.into_iter().enumerate() {
                T::set(&mut acc[h], i + e, x);
            }
        };
        // SAFETY: once; the groups of `hand_off`; the writer is the block of the range above, which
        // runs its head first.
        unsafe { slot.take_over(2 * groups, put) };
        acc
    }
}

/// The kernel body: `N = T::N` batch rows per consumer, an `S`-slot ring, consumers taking turns
/// (`SPLIT = 1`) or splitting a `2N`-row batch tile (`SPLIT = 2`).
///
/// # Safety
/// Launched as documented in the module, with `p` validated by the host and `p.tensor_maps`
/// encoded for this launch.
#[inline(always)]
unsafe fn body<T: WgmmaShape, const S: u32, const SPLIT: u32, const LP: bool, const TOP: bool>(
    p: FusedParams,
    v: FusedVariant,
) {
    const { assert!((SPLIT == 1 || SPLIT == 2) && (LP || !TOP)) };
    let e = match (LP, TOP) {
        (_, true) => Epilogue::Truncate,
        (true, false) => Epilogue::LogProbs,
        _ => Epilogue::Sample,
    };
    let n = T::N;
    let block_b = SPLIT * n;
    let t = Thread::this();
    let work = BlockWork::of_this_block(&p, block_b, BLOCK_V);
    let wg = t.tid / 128;
    // SAFETY: every thread of the block, once, before anything else touches shared memory.
    let pipe = unsafe {
        Pipeline::setup::<S>(
            t.tid,
            v.prefix_bytes(e),
            (BLOCK_V, block_b),
            SPLIT,
            work.stages(&p, BLOCK_V, !TOP && !p.handoff.is_null()),
        )
    };
    let area = MergeArea::new(block_b, v.merge_contributors());
    let threads = 32 * WS_WARPS;
    let mut cands = [Candidate::EMPTY; 32];
    let mut tops = [TopList::<LANE_TOP>::EMPTY; 32]; // read and written only with TOP
    // The N = 64 kernels move registers from the producer to the consumers (`setmaxnreg`), as the
    // hidden-as-A kernels do: their 16 columns' candidates (and top lists) beside 32 accumulators
    // spilled within the even share of 168 (`tma_n64_tk`: 2 KiB). Each role then ends in its own
    // copy of `finish_block`, so ptxas allocates each under its own budget.
    let regs = v.moves_registers();
    if wg == 0 {
        if regs {
            // SAFETY: the whole producer warpgroup, converged (warpgroup-uniform branch).
            unsafe { setmaxnreg_dec_sync_aligned_u32::<PRODUCER_REGS>() };
        }
        if t.warp == 0 {
            // SAFETY: the producer warp; forwarded launch contract (the tensor maps are encoded).
            unsafe { produce_tma::<S, false, TOP>(&p, pipe, t.lane, work.b_first) };
        }
        if regs {
            // SAFETY: every thread of the block reaches one `finish` (the consumers theirs).
            unsafe { super::finish_block::<LP>(area, &p, t.tid, threads, work) };
            return;
        }
    } else {
        if regs {
            // SAFETY: the whole consumer warpgroup, converged; the producer's release leaves the pool
            // enough for both consumers (PRODUCER_REGS + 2 · CONSUMER_REGS ≤ 3 · 168).
            unsafe { setmaxnreg_inc_sync_aligned_u32::<CONSUMER_REGS>() };
        }
        let c = wg - 1;
        let slot_b = if SPLIT == 2 { c } else { 0 };
        // SAFETY: the log-probability kernels' launches reserve the masses
        // (`FusedVariant::smem_bytes`), N / 4 per lane; a consumer's tid − 128 < 256.
        let masses = unsafe { SharedMasses::for_lane::<LP>(v.merge_bytes(e), t.tid - 128, n / 4) };
        let mut consumer = WeightA::<T, LP, TOP> {
            p: &p,
            ring: pipe.ring,
            hidden: slot_b * n,
            b0_quad: (work.b_first + slot_b * n, t.quad),
            v_lane: 4 * (8 * (t.warp % 4) + t.group),
            cands: &mut cands,
            masses,
            tops: &mut tops,
            handoff: (work.vrange, slot_b, t.tid % 128),
            shape: PhantomData,
        };
        // SAFETY: the whole consumer warpgroup, converged; forwarded launch contract.
        unsafe { consume::<_, S>(&mut consumer, pipe, c, SPLIT == 2, t.tid) };
        // Contributors: warp w of each consumer (taking turns: 8 of them), or of both (splitting: 4).
        let contributor = if SPLIT == 2 { t.warp % 4 } else { 4 * c + t.warp % 4 };
        // SAFETY: the whole warp is here (warpgroup-uniform branch); inside the merge area.
        unsafe {
            let lanes = (t.group, t.quad);
            // (Inside the block's `unsafe`: column i < N / 4, the lane's masses, read only with LP.)
            let state = (&cands, |i| masses.get(i as u32));
            fragment::put_columns::<32, LP, true>(area, contributor, slot_b * n, lanes, state, n as usize / 4);
            if TOP {
                fragment::put_tops_columns::<32>(&p, &work, (contributor, slot_b * n), lanes, &tops, n as usize / 4);
            }
        };
        if regs {
            // SAFETY: every thread of the block reaches one `finish` (the producer warpgroup its own).
            unsafe { super::finish_block::<LP>(area, &p, t.tid, threads, work) };
            return;
        }
    }
    // SAFETY: every thread of the block reaches the block merge and the final reduction.
    unsafe { super::finish_block::<LP>(area, &p, t.tid, threads, work) };
}

macro_rules! entry {
    ($name:ident, $name_lp:ident, $name_tk:ident, $variant:expr, $shape:ty) => {
        entry!(@one $name, $variant, $shape, Epilogue::Sample, false, false);
        entry!(@one $name_lp, $variant, $shape, Epilogue::LogProbs, true, false);
        entry!(@one $name_tk, $variant, $shape, Epilogue::Truncate, true, true);
    };
    (@one $name:ident, $variant:expr, $shape:ty, $epilogue:expr, $lp:literal, $top:literal) => {
        #[doc = concat!("The fused kernel `", stringify!($variant), "` (`wgmma`, weight as A, sm_90a module), epilogue `", stringify!($epilogue), "`.")]
        ///
        /// # Safety
        /// See the module: the launch the host derives from the variant, with validated parameters.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: FusedParams) {
            const V: FusedVariant = $variant;
            const {
                assert!(V.is_entry($epilogue, stringify!($name)) && matches!(V.family, Family::WgmmaWeightA));
                assert!(V.threads() == 32 * WS_WARPS && 8 * V.n_tiles == <$shape as WgmmaShape>::N);
            };
            // SAFETY: forwarded launch contract.
            unsafe { body::<$shape, { V.stages_for($epilogue) }, { V.warps_b }, $lp, $top>(p, V) }
        }
    };
}
entry!(fused_sample_wgmma_tma_n16, fused_sample_wgmma_tma_n16_lp, fused_sample_wgmma_tma_n16_tk, TMA_N16, N16);
entry!(fused_sample_wgmma_tma_n32, fused_sample_wgmma_tma_n32_lp, fused_sample_wgmma_tma_n32_tk, TMA_N32, N32);
entry!(fused_sample_wgmma_tma_n64, fused_sample_wgmma_tma_n64_lp, fused_sample_wgmma_tma_n64_tk, TMA_N64, N64);
entry!(fused_sample_wgmma_tma_n64x2, fused_sample_wgmma_tma_n64x2_lp, fused_sample_wgmma_tma_n64x2_tk, TMA_N64X2, N64);
