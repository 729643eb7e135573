//! The GEMM-fed kernels ([`Family::GemmLogits`], portable module): the host's GEMM (cuBLAS, on the
//! same stream just before) writes the call's raw f32 logits, and these kernels sample them — the
//! same lane epilogue ([`fragment::mma_sync_tile`]: the one logit pipeline, the screen, the keyed
//! noise, log-masses and top lists), block merge and reduction as every fused kernel, with no
//! mainloop. Chosen on the portable module for large batches ([`variant_for_call`]), where the
//! `mma.sync` mainloop is compute-bound and the GEMM library runs the GPU's own matrix instructions
//! (`wgmma` on Hopper, `tcgen05` on Blackwell).
//!
//! # Parameters
//! [`GemmLogitsParams`] by value: the launch's [`FusedParams`](crate::params::FusedParams) and the logits `[b, ld]`; launch with
//! `grid = n_vranges · n_btiles` blocks of [`FusedVariant::threads`] (`128·WB`) threads and
//! [`FusedVariant::smem_bytes`] bytes of dynamic shared memory (the merge area).
//!
//! # Thread mapping
//! The block-staging `mma.sync` kernels' (`fused/mma_sync.rs`): `4·WB` warps; block tile `BLOCK_V =
//! 128` vocab rows × `BLOCK_B = 8·NB·WB` batch rows; warp `warp` takes the 32 vocab rows `32·(warp /
//! WB) ..` of each tile and the batch rows `8·NB·(warp % WB) ..`; lane `(group, quad)` loads
//! ([`fragment::load_logits_columns`]) and scores the four vocab rows `32·(warp / WB) + 4·group ..`
//! (one Philox group) of each tile for its batch columns `8·nt + 2·quad + e`. Each tile's loads are
//! issued before the previous tile's epilogue runs.
//!
//! Samples equal every fused kernel's for the same logits: the noise is keyed by global vocab index
//! and row, never by tile. The logits themselves are the GEMM's sums, whose order (unlike the
//! kernels of one MMA family, which share theirs) is the library's.
//!
//! [`variant_for_call`]: crate::config::variant_for_call

use crate::candidate::Candidate;
use crate::config::{BLOCK_V, Epilogue, Family, FusedVariant, GEMM_LOGITS, ROWS_PER_LANE, WARP_TILE_V};
use crate::device::fragment;
use crate::device::merge::MergeArea;
use crate::device::schedule::{BlockWork, Thread};
use crate::params::{GemmLogitsParams, RowMass};
use crate::truncate::{LANE_TOP, TopList};

/// The kernel body for `4·WB` warps of `8·NB` batch rows (`THREADS = 128·WB`, `BLOCK_B = 8·NB·WB`).
///
/// # Safety
/// Launched as documented in the module after the GEMM that wrote `p.logits` (`p.fused.b × p.ld`
/// floats, 16-byte aligned, `p.ld % 4 == 0`, `p.ld ≥ p.fused.v`), with `p.fused` validated by the
/// host as for any fused launch.
#[inline(always)]
unsafe fn body<
    const NB: usize,
    const WB: u32,
    const THREADS: u32,
    const BLOCK_B: u32,
    const LP: bool,
    const TOP: bool,
>(
    p: GemmLogitsParams,
) {
    const { assert!(LP || !TOP) };
    let f = &p.fused;
    let t = Thread::this();
    let work = BlockWork::of_this_block(f, BLOCK_B, BLOCK_V);
    let (warp_b, warp_v) = (t.warp % WB, t.warp / WB);
    let b0 = work.b_first + warp_b * 8 * NB as u32; // this warp's first batch row
    let active = b0 < f.b; // warp-uniform: this warp has batch rows to score
    let v_lane = warp_v * WARP_TILE_V + ROWS_PER_LANE as u32 * t.group;
    let source = (p.logits, p.ld, f.b, f.v);
    let lane = (b0, t.quad);
    let mut cands = [Candidate::EMPTY; 16];
    let mut masses = [RowMass::EMPTY; 16]; // read and written only with LP
    let mut tops = [TopList::<LANE_TOP>::EMPTY; 16]; // read and written only with TOP
    if active {
        let mut tile = work.first;
        // SAFETY: the launch contract (`logits`, `ld`); v0 % 4 == 0.
        let mut next = unsafe { fragment::load_logits_columns::<NB>(source, lane, tile * BLOCK_V + v_lane) };
        while tile < work.end {
            let acc = next;
            if tile + 1 < work.end {
                // SAFETY: as above.
                next = unsafe { fragment::load_logits_columns::<NB>(source, lane, (tile + 1) * BLOCK_V + v_lane) };
            }
            // The whole warp, converged (warp-uniform `active` and trip count): the column floors shuffle.
            fragment::mma_sync_tile::<NB, LP, TOP>(
                f,
                lane,
                tile * BLOCK_V + v_lane,
                &acc,
                &mut cands,
                (&mut masses, &mut tops),
            );
            tile += 1;
        }
    }
    let area = MergeArea::new(BLOCK_B, GEMM_LOGITS.merge_contributors());
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
            fragment::put_tops_columns::<16>(f, &work, (warp_v, warp_b * 8 * NB as u32), lanes, &tops, 2 * NB);
        }
        super::finish_block::<LP>(area, f, t.tid, THREADS, work);
    }
}

macro_rules! entry {
    ($name:ident, $epilogue:expr, $lp:literal, $top:literal) => {
        #[doc = concat!("The GEMM-fed kernel (portable module), epilogue `", stringify!($epilogue), "`.")]
        ///
        /// # Safety
        /// See the module: the launch the host derives from the variant after its GEMM, with validated
        /// parameters.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: GemmLogitsParams) {
            const V: FusedVariant = GEMM_LOGITS;
            const { assert!(V.is_entry($epilogue, stringify!($name)) && matches!(V.family, Family::GemmLogits)) };
            // SAFETY: forwarded launch contract.
            unsafe { body::<{ V.n_tiles as usize }, { V.warps_b }, { V.threads() }, { V.block_b() }, $lp, $top>(p) }
        }
    };
}
entry!(gemm_logits_sample, Epilogue::Sample, false, false);
entry!(gemm_logits_sample_lp, Epilogue::LogProbs, true, false);
entry!(gemm_logits_sample_tk, Epilogue::Truncate, true, true);
