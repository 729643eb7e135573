//! The portable fused kernel: `mma.sync` with block staging ([`Family::MmaSync`], sm_80+; the
//! kernel chosen where the sm_90a module does not load, e.g. on Blackwell through the driver's JIT).
//! The family has one more entry, `fallback_logits`: the same composition storing the logits of the
//! truncation's fallback rows instead of sampling them (its launch: `device/fallback.rs`).
//!
//! # Parameters
//! [`FusedParams`] by value; launch with `grid = n_vranges · n_btiles` blocks of
//! [`FusedVariant::threads`] (`128·WB`) threads and [`FusedVariant::smem_bytes`] bytes of dynamic
//! shared memory.
//!
//! # Thread mapping
//! `4·WB` warps; block tile `BLOCK_V = 128` vocab rows × `BLOCK_B = 8·NB·WB` batch rows. Warp `warp`
//! takes the 32 vocab rows `32·(warp / WB) ..` of each block tile and the batch rows
//! `8·NB·(warp % WB) ..` of the batch tile; lane `(group, quad)` owns the four consecutive vocab rows
//! `32·(warp / WB) + 4·group ..` (one Philox group) of each tile for its batch columns
//! `8·nt + 2·quad + e`.
//!
//! # Composition
//! [`BlockWork`] (tile scheduler) → [`BlockIssuer`] (producer: every thread, `cp.async`, one commit
//! group per stage) → [`MmaSyncMainloop`] (one block barrier per stage; the pipeline runs on across
//! tiles, so the next tile's first `S − 1` stages are in flight during a tile's epilogue) →
//! [`fragment::mma_sync_tile`] (fragment → logits → lane epilogue) → [`fragment::put_columns`] +
//! `finish_block` ([`merge::finish`](crate::device::merge::finish), then in the plain kernels the last block of the batch tile
//! reduces to tokens; the `_lp` / `_tk` kernels leave their rows to `reduce_rows`).
//!
//! [`BlockWork`]: crate::device::schedule::BlockWork
//! [`BlockIssuer`]: crate::device::producer::BlockIssuer
//! [`MmaSyncMainloop`]: crate::device::mainloop::MmaSyncMainloop

use crate::candidate::Candidate;
use crate::config::{
    BLOCK_V, Epilogue, FALLBACK_LOGITS_VARIANT, Family, FusedVariant, MMA_SYNC_N16, MMA_SYNC_N32, MMA_SYNC_N64,
    MMA_SYNC_N128,
};
use crate::device::fragment;
use crate::device::mainloop::MmaSyncMainloop;
use crate::device::merge::MergeArea;
use crate::device::pipeline::BlockRing;
use crate::device::ptx::griddepcontrol_wait;
use crate::device::schedule::{BlockWork, Thread};
use crate::params::{FallbackLogitsParams, FusedParams, RowMass};
use crate::truncate::{LANE_TOP, TopList};

/// The kernel body for `4·WB` warps of `8·NB` batch rows and an `S`-stage ring (`THREADS = 128·WB`,
/// `BLOCK_B = 8·NB·WB`, `H` hidden-row copy passes per stage).
///
/// # Safety
/// Launched as documented in the module, with `p` validated by the host (shapes, 16-byte aligned
/// buffers of the stated sizes, `d % D_ALIGN == 0`).
#[inline(always)]
unsafe fn body<
    const NB: usize,
    const WB: u32,
    const S: u32,
    const THREADS: u32,
    const BLOCK_B: u32,
    const H: usize,
    const LP: bool,
    const TOP: bool,
>(
    p: FusedParams,
    v: FusedVariant,
) {
    const { assert!(LP || !TOP) };
    let e = match (LP, TOP) {
        (_, true) => Epilogue::Truncate,
        (true, false) => Epilogue::LogProbs,
        _ => Epilogue::Sample,
    };
    let t = Thread::this();
    let work = BlockWork::of_this_block(&p, BLOCK_B, BLOCK_V);
    let (warp_b, warp_v) = (t.warp % WB, t.warp / WB);
    let b0 = work.b_first + warp_b * 8 * NB as u32; // this warp's first batch row
    let active = b0 < p.b; // warp-uniform: this warp has batch rows to score
    let ring = BlockRing::new(v.prefix_bytes(e), BLOCK_B);
    let mut mainloop = MmaSyncMainloop::<THREADS, BLOCK_B, S, H>::for_thread::<NB, WB>(&p, ring, &work, t);
    let w_row0 = mainloop.w_row0;
    // SAFETY: every thread of the block, before the first tile.
    unsafe { mainloop.prologue(&p) };
    let mut cands = [Candidate::EMPTY; 16];
    let mut masses = [RowMass::EMPTY; 16]; // read and written only with LP
    let mut tops = [TopList::<LANE_TOP>::EMPTY; 16]; // read and written only with TOP
    let mut tile = work.first;
    while tile < work.end {
        // SAFETY: every thread of the block, for every tile of the range.
        let acc = unsafe { mainloop.tile::<NB>(&p, active) };
        if active {
            let v0 = tile * BLOCK_V + w_row0;
            fragment::mma_sync_tile::<NB, LP, TOP>(&p, (b0, t.quad), v0, &acc, &mut cands, (&mut masses, &mut tops));
        }
        tile += 1;
    }
    let area = MergeArea::new(BLOCK_B, v.merge_contributors());
    // SAFETY: every thread of the block reaches the block merge and the final reduction; warp `w`
    // contributes vocab rows `w / WB` for batch rows `8·NB·(w % WB) ..` of the block.
    unsafe {
        let lanes = (t.group, t.quad);
        fragment::put_columns::<16, LP, false>(
            area,
            warp_v,
            warp_b * 8 * NB as u32,
            lanes,
            (&cands, |i| masses[i]),
            2 * NB,
        );
        if TOP && active {
            fragment::put_tops_columns::<16>(&p, &work, (warp_v, warp_b * 8 * NB as u32), lanes, &tops, 2 * NB);
        }
        super::finish_block::<LP>(area, &p, t.tid, THREADS, work);
    }
}

macro_rules! entry {
    ($name:ident, $name_lp:ident, $name_tk:ident, $variant:expr) => {
        entry!(@one $name, $variant, Epilogue::Sample, false, false);
        entry!(@one $name_lp, $variant, Epilogue::LogProbs, true, false);
        entry!(@one $name_tk, $variant, Epilogue::Truncate, true, true);
    };
    (@one $name:ident, $variant:expr, $epilogue:expr, $lp:literal, $top:literal) => {
        #[doc = concat!("The fused kernel `", stringify!($variant), "` (`mma.sync`, portable module), epilogue `", stringify!($epilogue), "`.")]
        ///
        /// # Safety
        /// See the module: the launch the host derives from the variant, with validated parameters.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: FusedParams) {
            const V: FusedVariant = $variant;
            const {
                assert!(V.is_entry($epilogue, stringify!($name)) && matches!(V.family, Family::MmaSync))
            };
            // SAFETY: forwarded launch contract.
            unsafe {
                body::<
                    { V.n_tiles as usize },
                    { V.warps_b },
                    { V.stages_for($epilogue) },
                    { V.threads() },
                    { V.block_b() },
                    { V.block_b().div_ceil(V.threads() / 8) as usize },
                    $lp,
                    $top,
                >(p, V)
            }
        }
    };
}
entry!(fused_sample_block_nb2, fused_sample_block_nb2_lp, fused_sample_block_nb2_tk, MMA_SYNC_N16);
entry!(fused_sample_block_nb4_s3, fused_sample_block_nb4_s3_lp, fused_sample_block_nb4_s3_tk, MMA_SYNC_N32);
entry!(fused_sample_block_nb4x2, fused_sample_block_nb4x2_lp, fused_sample_block_nb4x2_tk, MMA_SYNC_N64);
entry!(fused_sample_block_nb4x4, fused_sample_block_nb4x4_lp, fused_sample_block_nb4x4_tk, MMA_SYNC_N128);

// The family's store-logits entry: the exact fallback's raw logits (`device/fallback.rs` samples
// them), and a call's logits on the exact log-sum-exp path (the GEMM-fed kernels and
// `device/exact.rs` read them): logits whose every bit is a function of its row and vocab row, as
// over vocab shards the same bits are what that path needs.

/// Raw logits on the tensor cores: `logits[s, v]` for every listed row `s` (see the module), the
/// portable `mma.sync` mainloop of [`FALLBACK_LOGITS_VARIANT`] over the gathered rows: one read of
/// the weight per 64 listed rows, in the fused kernels' pipeline, instead of CUDA-core dot
/// products. Each logit's sum runs over `D` in the mainloop's fixed order, whatever the launch's
/// rows, vocab rows or grid.
///
/// # Safety
/// Launched as documented in the module after `fallback_gather` (`device/fallback.rs`) on the same stream; `p.fused` as
/// [`FallbackLogitsParams`] states, `logits` holds `count · ld` floats (`ld ≥ V`).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fallback_logits(p: FallbackLogitsParams) {
    const V: FusedVariant = FALLBACK_LOGITS_VARIANT;
    const { assert!(matches!(V.family, Family::MmaSync)) };
    // SAFETY: forwarded launch contract.
    unsafe {
        logits_body::<
            { V.n_tiles as usize },
            { V.warps_b },
            { V.stages },
            { V.threads() },
            { V.block_b() },
            { V.block_b().div_ceil(V.threads() / 8) as usize },
        >(p)
    }
}

/// [`fallback_logits`] for `4·WB` warps of `8·NB` batch rows and an `S`-stage ring (the fused
/// `mma.sync` kernel's composition without the sampling: the tile scheduler, the block producer,
/// the mainloop and [`fragment::store_logits_columns`]).
///
/// # Safety
/// As [`fallback_logits`].
#[inline(always)]
unsafe fn logits_body<
    const NB: usize,
    const WB: u32,
    const S: u32,
    const THREADS: u32,
    const BLOCK_B: u32,
    const H: usize,
>(
    p: FallbackLogitsParams,
) {
    // Programmatic stream serialization: wait for `fallback_gather` (and the truncation step before
    // it); `BlockWork::of_this_block` lets `fallback_sample` be scheduled.
    griddepcontrol_wait();
    // SAFETY: the list's count, written by the truncation step before this launch.
    let count = unsafe { *p.list };
    let f = &p.fused;
    let t = Thread::this();
    let work = BlockWork::of_this_block(f, BLOCK_B, BLOCK_V);
    if work.b_first >= count {
        return; // block-uniform, before any barrier: no listed row in this batch tile
    }
    let b0 = work.b_first + (t.warp % WB) * 8 * NB as u32; // this warp's first gathered row
    let active = b0 < count; // warp-uniform
    let ring = BlockRing::new(0, BLOCK_B);
    let mut mainloop = MmaSyncMainloop::<THREADS, BLOCK_B, S, H>::for_thread::<NB, WB>(f, ring, &work, t);
    let w_row0 = mainloop.w_row0;
    // SAFETY: every thread of the block, before the first tile.
    unsafe { mainloop.prologue(f) };
    let mut tile = work.first;
    while tile < work.end {
        // SAFETY: every thread of the block, for every tile of the range.
        let acc = unsafe { mainloop.tile::<NB>(f, active) };
        if active {
            let v0 = tile * BLOCK_V + w_row0;
            // SAFETY: `logits` holds `count × ld` floats, `ld ≥ V` (the launch contract).
            unsafe { fragment::store_logits_columns::<NB>((p.logits, count, f.v, p.ld), (b0, t.quad), v0, &acc) };
        }
        tile += 1;
    }
}
