//! The portable TMA fused kernel ([`Family::TmaMmaSync`], the portable module built for sm_90: TMA
//! and `mbarrier` transaction counts are sm_90 PTX features, not sm_90a ones, so a Blackwell GPU
//! JIT-compiles this kernel): the `wgmma` kernels' TMA producer warp and pipeline feeding
//! `mma.sync` consumer warps, warp-specialized — no block barrier per stage.
//!
//! # Parameters
//! [`FusedParams`] by value with this launch's [`TensorMaps`](crate::params::TensorMaps) (the
//! weight-as-A maps: [`tma_weight_tiles`](crate::config::tma_weight_tiles),
//! [`tma_weight_rows`](crate::config::tma_weight_rows), and a hidden map of `BLOCK_B` rows); launch
//! with `grid = n_vranges · n_btiles` blocks of [`FusedVariant::threads`] (288: a producer warp and
//! two consumers of 4 warps; the link step writes that `.maxntid`) and [`FusedVariant::smem_bytes`] bytes of
//! dynamic shared memory.
//!
//! # Thread mapping
//! `tid = threadIdx.x`, `warp = tid / 32`, `g = lane / 4`, `q = lane % 4`.
//!
//! - **Producer** (warp 0): [`produce_tma`] fills an `S`-slot ring of slabs of 128 weight rows (the
//!   weight-as-A slab order, [`vocab_of_slab_row`](crate::config::vocab_of_slab_row)) and `BLOCK_B`
//!   hidden rows, each stage completing on its `full` barrier.
//! - **Consumers** (warps `1 + 4c + w`, `w < 4`; `c < 2`): warp `w` takes vocab rows `32w ..` of each
//!   tile, read as two M tiles whose MMA rows `g`, `g + 8` are slab rows
//!   [`mma_slab_row`](crate::config::mma_slab_row)`(w, mt, 0 | 1, g)`: vocab rows `32w + 4g + 2mt`,
//!   `+ 1`, so lane `(g, q)` holds the four vocab rows `32w + 4g ..` (one Philox group) of each tile
//!   for its batch columns `8·nt + 2q + {0, 1}` — the block-staging kernels' accumulator layout, fed
//!   to the same [`fragment::mma_sync_tile`]. Per stage [`consume`] waits for `full`, the warp reads
//!   its fragments with `ldmatrix` and multiplies ([`mma_stage_slab`]), then lane 0 arrives on the
//!   slot's `empty` barrier. `warps_b = 1`: two consumers take turns on the tiles (`c`, `c + 2`, …:
//!   one's epilogue runs while the other's MMAs keep the tensor cores busy), 8·NB batch rows;
//!   `warps_b = 2`: the two consumers split a `16·NB`-row batch tile, consumer `c` on rows
//!   `8·NB·c ..`, each reading every stage.
//! - **Lane state**: `NB ≤ 4` (n16, n32, n64) keeps the candidates and row masses of its `2·NB`
//!   columns in registers ([`fragment::mma_sync_tile`]); `NB = 8` (n64t, n128: 64 batch rows a warp,
//!   64 accumulators a lane at the 168 registers of a 288-thread block) walks its 16 columns in two
//!   passes of selects and keeps the candidates and masses in shared memory
//!   ([`fragment::mma_sync_tile_wide`], [`FusedVariant::lane_cands`], [`FusedVariant::lane_masses`]:
//!   in registers they left the mainloop reloading spilled words at every stage), and has no
//!   truncation kernel.
//! - **Ranges**: whole tiles, or (plain and log-probability kernels, where the host balances them)
//!   stage-balanced ranges whose cut tile's accumulators pass from the block above to the block
//!   below (`device::handoff`, one slot per consumer slot, its 128 threads' `8·NB` floats each), as
//!   in the weight-as-A `wgmma` kernels.
//! - **End**: block merge (contributors: the 8 consumer warps when taking turns, warp `w` of each
//!   consumer when splitting) and, in the plain kernels, the last block's reduction (the `_lp` /
//!   `_tk` kernels leave their rows to `reduce_rows`).
//!
//! Every variant of the family computes each logit with the same MMAs in the same order, so they
//! draw bit-identical samples.

use crate::candidate::Candidate;
use crate::config::{
    BLOCK_V, Epilogue, Family, FusedVariant, M_TILES_PER_WARP, ROWS_PER_LANE, SlabLane, TMA_MMA_N16, TMA_MMA_N32,
    TMA_MMA_N64, TMA_MMA_N64T, TMA_MMA_N128, WARP_TILE_V, WARPS_PER_BLOCK,
};
use crate::device::fragment;
use crate::device::handoff::Handoff;
use crate::device::mainloop::{Accumulators, Consumer, consume, mma_stage_slab};
use crate::device::merge::{MergeArea, SharedCands, SharedMasses};
use crate::device::pipeline::{Pipeline, Ring};
use crate::device::producer::produce_tma;
use crate::device::ptx::bar_warp_sync;
use crate::device::schedule::{BlockWork, Thread};
use crate::params::{FusedParams, RowMass};
use crate::truncate::{LANE_TOP, TopList};

/// A consumer warp: its fragments' rows in the slab, its batch rows and its lane state.
struct SlabWarp<'a, const NB: usize, const LP: bool, const TOP: bool> {
    p: &'a FusedParams,
    ring: Ring,
    frags: SlabLane,
    /// Whether the warp's batch rows start below B (consumer-uniform): otherwise it only keeps the
    /// pipeline's count, with no MMA and no epilogue.
    active: bool,
    /// First batch row of the warp's columns, and the lane's quad.
    b0_quad: (u32, u32),
    /// Offset of the lane's Philox group in a tile: `32w + 4g`.
    v_lane: u32,
    /// The lane's candidates: in registers up to `NB = 4`, in shared memory at `NB = 8`
    /// ([`FusedVariant::lane_cands`]; `shared_cands`, `cands` then only their copy for the merge).
    cands: &'a mut [Candidate; 16],
    shared_cands: SharedCands,
    /// The lane's row masses: in registers up to `NB = 4`, in shared memory at `NB = 8`
    /// ([`FusedVariant::lane_masses`]).
    masses: &'a mut [RowMass; 16],
    shared: SharedMasses,
    tops: &'a mut [TopList<LANE_TOP>; 16],
    /// The handoff slots of the block's range boundaries (stage-balanced ranges): (vocab range,
    /// consumer slot, consumer thread 0..128).
    handoff: (u32, u32, u32),
}

impl<const NB: usize, const LP: bool, const TOP: bool> SlabWarp<'_, NB, LP, TOP> {
    /// The thread's view of the handoff slot of range boundary `boundary`: its `8·NB` accumulators
    /// as `2·NB` groups of 4 (group `NB·mt + nt` is `acc[mt][nt]`).
    ///
    /// # Safety
    /// A launch with handoff buffers; `boundary < n_vranges`.
    #[inline(always)]
    unsafe fn slot(&self, boundary: u32) -> Handoff {
        let (_, c, t) = self.handoff;
        // SAFETY: forwarded contract; c < 2, t < 128, 8·NB floats per thread
        // (`FusedVariant::handoff_floats_per_thread`).
        unsafe { Handoff::at(self.p, boundary, c, t, 8 * NB as u32) }
    }
}

impl<const NB: usize, const LP: bool, const TOP: bool> Consumer for SlabWarp<'_, NB, LP, TOP> {
    type Acc = Accumulators<NB>;
    const ZERO: Self::Acc = [[[0.0; 4]; NB]; M_TILES_PER_WARP];
    // The truncation kernels keep whole tiles, as the `wgmma` ones do (`can_balance_stages`).
    const HANDS_OFF: bool = !TOP;
    const ASYNC: bool = false;
    #[inline(always)]
    unsafe fn mma(&self, slot: u32, acc: &mut Self::Acc) {
        if self.active {
            // SAFETY: forwarded contract (the converged warp, a landed slot); NB is even (the entry's
            // assertion).
            unsafe { mma_stage_slab::<NB>(self.ring.slab(slot), &self.frags, acc, self.p.elem) };
        }
    }
    #[inline(always)]
    fn epilogue(&mut self, tile: u32, acc: &Self::Acc) {
        if self.active {
            let v0 = tile * BLOCK_V + self.v_lane;
            if NB <= 4 {
                fragment::mma_sync_tile::<NB, LP, TOP>(
                    self.p,
                    self.b0_quad,
                    v0,
                    acc,
                    self.cands,
                    (self.masses, self.tops),
                );
            } else {
                fragment::mma_sync_tile_wide::<NB, LP, TOP>(
                    self.p,
                    self.b0_quad,
                    v0,
                    acc,
                    self.shared_cands,
                    self.shared,
                );
            }
        }
    }
    #[inline(always)]
    unsafe fn issue(&self, slot: u32, acc: &mut Self::Acc) {
        // SAFETY: forwarded contract; no fence or group: `mma.sync` is synchronous.
        unsafe { self.mma(slot, acc) };
    }
    #[inline(always)]
    unsafe fn wait_mmas<const N: u32>() {
        // Every lane's `ldmatrix` reads of the slot are done once the warp reconverges.
        bar_warp_sync();
    }
    #[inline(always)]
    unsafe fn hand_off(&self, acc: &Self::Acc) {
        // The head's tile is the last of the range below: boundary = this range. An inactive warp
        // hands over its zeros too: the reader counts all 128 writers.
        // SAFETY: a handoff launch (the caller's contract); the block's range is > 0 (it has a head).
        let slot = unsafe { self.slot(self.handoff.0) };
        // SAFETY: once per thread; 2·NB groups of 4 = the thread's 8·NB floats.
        unsafe { slot.hand_over(2 * NB as u32, |q| acc[q as usize / NB][q as usize % NB]) };
    }
    #[inline(always)]
    unsafe fn resume(&self) -> Self::Acc {
        // The tail's tile is the first (head) of the range above: boundary = this range + 1.
        // SAFETY: a handoff launch; the block has a tail, so a range above.
        let slot = unsafe { self.slot(self.handoff.0 + 1) };
        let mut acc = Self::ZERO;
        // SAFETY: once per thread, as in `hand_off`; the writer is the block of the range above,
        // which runs its head first.
        unsafe { slot.take_over(2 * NB as u32, |q, x| acc[q as usize / NB][q as usize % NB] = x) };
        acc
    }
}

/// The kernel body: `8·NB` batch rows per consumer warp, an `S`-slot ring, two consumers taking
/// turns (`WB = 1`) or splitting the batch tile (`WB = 2`).
///
/// # Safety
/// Launched as documented in the module, with `p` validated by the host and `p.tensor_maps`
/// encoded for this launch.
#[inline(always)]
unsafe fn body<const NB: usize, const S: u32, const WB: u32, const LP: bool, const TOP: bool>(
    p: FusedParams,
    v: FusedVariant,
) {
    const { assert!((WB == 1 || WB == 2) && NB % 2 == 0 && (LP || !TOP)) };
    let e = match (LP, TOP) {
        (_, true) => Epilogue::Truncate,
        (true, false) => Epilogue::LogProbs,
        _ => Epilogue::Sample,
    };
    let turns = WB == 1;
    let block_b = 8 * NB as u32 * WB;
    let t = Thread::this();
    let work = BlockWork::of_this_block(&p, block_b, BLOCK_V);
    // SAFETY: every thread of the block, once, before anything else touches shared memory. Each
    // stage is read by one consumer (taking turns) or by all `WB` of them (splitting).
    let pipe = unsafe {
        Pipeline::setup::<S>(
            t.tid,
            v.prefix_bytes(e),
            (BLOCK_V, block_b),
            WB,
            work.stages(&p, BLOCK_V, !TOP && !p.handoff.is_null()),
        )
    };
    let area = MergeArea::new(block_b, v.merge_contributors());
    let mut cands = [Candidate::EMPTY; 16];
    let mut masses = [RowMass::EMPTY; 16]; // read and written only with LP
    let mut tops = [TopList::<LANE_TOP>::EMPTY; 16]; // read and written only with TOP
    if t.warp == 0 {
        // SAFETY: the producer warp; forwarded launch contract (the tensor maps are encoded); the
        // truncation kernels' ranges are whole tiles.
        unsafe { produce_tma::<S, false, TOP>(&p, pipe, t.lane, work.b_first) };
    } else {
        let (c, w) = ((t.warp - 1) / WARPS_PER_BLOCK, (t.warp - 1) % WARPS_PER_BLOCK);
        let h0 = if turns { 0 } else { c * 8 * NB as u32 }; // the consumer's first row of the batch tile
        let b0 = work.b_first + h0;
        // SAFETY: the log-probability kernels' launches reserve the masses at NB = 8
        // (`FusedVariant::smem_bytes`), 16 per lane; a consumer's tid − 32 < 256.
        let shared = unsafe { SharedMasses::for_lane::<LP>(v.merge_bytes(e), t.tid - 32, v.lane_masses()) };
        // SAFETY: the launch reserves them at NB = 8 (`FusedVariant::smem_bytes`; the entries assert
        // it), 16 per lane, and only NB = 8 touches them; a consumer's tid − 32 < 256.
        let shared_cands = unsafe { SharedCands::for_lane(v.lane_cands_offset(e), t.tid - 32, v.lane_cands(e)) };
        let mut warp = SlabWarp::<NB, LP, TOP> {
            p: &p,
            ring: pipe.ring,
            frags: SlabLane::new(w, t.lane, h0, BLOCK_V),
            active: b0 < p.b,
            b0_quad: (b0, t.quad),
            v_lane: w * WARP_TILE_V + ROWS_PER_LANE as u32 * t.group,
            cands: &mut cands,
            shared_cands,
            masses: &mut masses,
            shared,
            tops: &mut tops,
            handoff: (work.vrange, if turns { 0 } else { c }, (t.tid - 32) % 128),
        };
        let active = warp.active;
        // SAFETY: the consumer's 4 warps, each converged; forwarded launch contract.
        unsafe { consume::<_, S>(&mut warp, pipe, c, !turns, t.tid) };
        if NB > 4 {
            for (i, cand) in cands.iter_mut().enumerate() {
                // SAFETY: i < 16 = the lane's candidates (`FusedVariant::lane_cands` at NB = 8).
                *cand = unsafe { shared_cands.get(i as u32) };
            }
        }
        let contributor = if turns { WARPS_PER_BLOCK * c + w } else { w };
        // SAFETY: the whole warp is here (warp-uniform branch); inside the merge area.
        unsafe {
            let lanes = (t.group, t.quad);
            if NB <= 4 {
                fragment::put_columns::<16, LP, false>(area, contributor, h0, lanes, (&cands, |i| masses[i]), 2 * NB);
            } else {
                // (Column i < 16, the lane's masses, read only with LP.)
                fragment::put_columns::<16, LP, true>(
                    area,
                    contributor,
                    h0,
                    lanes,
                    (&cands, |i| shared.get(i as u32)),
                    2 * NB,
                );
            }
            if TOP && active {
                fragment::put_tops_columns::<16>(&p, &work, (contributor, h0), lanes, &tops, 2 * NB);
            }
        };
    }
    // SAFETY: every thread of the block reaches the block merge and the final reduction.
    unsafe { super::finish_block::<LP>(area, &p, t.tid, v.threads(), work) };
}

macro_rules! entry {
    ($name:ident, $name_lp:ident, $name_tk:ident, $variant:expr) => {
        entry!($name, $name_lp, $variant);
        entry!(@one $name_tk, $variant, Epilogue::Truncate, true, true);
    };
    // A variant without a truncation kernel (`entry_truncate: None`).
    ($name:ident, $name_lp:ident, $variant:expr) => {
        entry!(@one $name, $variant, Epilogue::Sample, false, false);
        entry!(@one $name_lp, $variant, Epilogue::LogProbs, true, false);
    };
    (@one $name:ident, $variant:expr, $epilogue:expr, $lp:literal, $top:literal) => {
        #[doc = concat!("The fused kernel `", stringify!($variant), "` (`mma.sync` on the TMA pipeline, portable module), epilogue `", stringify!($epilogue), "`.")]
        ///
        /// # Safety
        /// See the module: the launch the host derives from the variant, with validated parameters.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: FusedParams) {
            const V: FusedVariant = $variant;
            const {
                assert!(V.is_entry($epilogue, stringify!($name)) && matches!(V.family, Family::TmaMmaSync));
                assert!(V.threads() == 32 * (1 + WARPS_PER_BLOCK * V.consumers()));
                // 16 columns a lane: their candidates in shared memory (`SharedCands`).
                assert!(V.n_tiles <= 4 || V.lane_cands($epilogue) == 16);
            };
            // SAFETY: forwarded launch contract.
            unsafe { body::<{ V.n_tiles as usize }, { V.stages_for($epilogue) }, { V.warps_b }, $lp, $top>(p, V) }
        }
    };
}
entry!(fused_sample_mma_tma_n16, fused_sample_mma_tma_n16_lp, fused_sample_mma_tma_n16_tk, TMA_MMA_N16);
entry!(fused_sample_mma_tma_n32, fused_sample_mma_tma_n32_lp, fused_sample_mma_tma_n32_tk, TMA_MMA_N32);
entry!(fused_sample_mma_tma_n64, fused_sample_mma_tma_n64_lp, fused_sample_mma_tma_n64_tk, TMA_MMA_N64);
// No truncation kernels at NB = 8: the lanes' 16 top lists spilled 9.5 KiB at the 168 registers of a
// 288-thread block, and top-k / top-p took 2.2 × `tma_mma_n64_tk`'s time at B = 64 (docs/findings/48).
entry!(fused_sample_mma_tma_n64t, fused_sample_mma_tma_n64t_lp, TMA_MMA_N64T);
entry!(fused_sample_mma_tma_n128, fused_sample_mma_tma_n128_lp, TMA_MMA_N128);
