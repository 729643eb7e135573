//! The GEMM-fed kernels ([`Family::GemmLogits`], portable module): the host's GEMM (cuBLAS, on the
//! same stream just before) writes the call's raw f32 logits, and these kernels sample them — the
//! same lane epilogue (through [`fragment::logits_row`]: the one logit pipeline, the screen, the keyed
//! noise, log-masses and top lists), block merge and reduction as every fused kernel, with no
//! mainloop. Chosen on the portable module for large batches ([`variant_for_call`]), where the
//! `mma.sync` mainloop is compute-bound and the GEMM library runs the GPU's own matrix instructions
//! (`wgmma` on Hopper, `tcgen05` on Blackwell).
//!
//! # Parameters
//! [`GemmLogitsParams`] by value: the launch's [`FusedParams`](crate::params::FusedParams) and the logits `[b, ld]`; launch with
//! `grid = n_vranges · n_btiles` blocks of [`FusedVariant::threads`] threads and
//! [`FusedVariant::smem_bytes`] bytes of dynamic shared memory (the merge area).
//!
//! # Thread mapping
//! A warp scores whole batch rows: warp `w` of the block's `THREADS / 32` takes block rows `w, w +
//! THREADS / 32, …` of its `BLOCK_B` (rows past B skipped, warp-uniform), and for each the block's
//! vocab tiles (`BLOCK_V = 128` rows each; [`fragment::logits_row`]): lane `lane` loads and scores
//! the Philox group `128·tile + 4·lane ..` of every tile (the warp reads 512 contiguous bytes of the
//! row per tile), [`fragment::ROW_GROUPS`] tiles per screen. The warp's lanes then merge the row
//! ([`fragment::put_row_warp`]: the row's one contributor; top lists: unit `lane`, [`fragment::put_top`]).
//!
//! One candidate (and one log-mass, one top list) a lane, not one per batch column as in the
//! `mma.sync` layout, and the row's parameters loaded once per row: registers for several blocks a
//! multiprocessor ([`GEMM_LOGITS_BLOCKS_PER_SM`]), whose warps hide the loads' latency.
//!
//! Samples equal every fused kernel's for the same logits: the noise is keyed by global vocab index
//! and row, never by tile. The logits themselves are the GEMM's sums, whose order (unlike the
//! kernels of one MMA family, which share theirs) is the library's.
//!
//! [`variant_for_call`]: crate::config::variant_for_call

use crate::candidate::Candidate;
#[cfg(doc)]
use crate::config::GEMM_LOGITS_BLOCKS_PER_SM;
use crate::config::{BLOCK_V, Epilogue, Family, FusedVariant, GEMM_LOGITS};
use crate::device::fragment;
use crate::device::merge::MergeArea;
use crate::device::schedule::{BlockWork, Thread};
use crate::params::{GemmLogitsParams, RowMass};
use crate::truncate::TopList;

/// The kernel body for `THREADS / 32` warps over `BLOCK_B` batch rows.
///
/// # Safety
/// Launched as documented in the module after the GEMM that wrote `p.logits` (`p.fused.b × p.ld`
/// floats, 16-byte aligned, `p.ld % 4 == 0`, `p.ld ≥ p.fused.v`), with `p.fused` validated by the
/// host as for any fused launch.
#[inline(always)]
unsafe fn body<const THREADS: u32, const BLOCK_B: u32, const LP: bool, const TOP: bool>(p: GemmLogitsParams) {
    const { assert!(LP || !TOP) };
    let f = &p.fused;
    let t = Thread::this();
    let work = BlockWork::of_this_block(f, BLOCK_B, BLOCK_V);
    let area = MergeArea::new(BLOCK_B, GEMM_LOGITS.merge_contributors());
    let mut r = t.warp; // warp-uniform
    while r < BLOCK_B {
        let b = work.b_first + r;
        let mut cand = Candidate::EMPTY;
        let mut mass = RowMass::EMPTY; // read and written only with LP
        let mut top = TopList::EMPTY; // read and written only with TOP
        if b < f.b {
            // SAFETY: b < B: row b of the logits (the launch contract: 16-byte aligned, as ld % 4 == 0);
            // the whole warp is here, converged (b and the tiles are warp-uniform).
            unsafe {
                let row = p.logits.add(b as usize * p.ld as usize);
                fragment::logits_row::<LP, TOP>(
                    f,
                    b,
                    (row, t.lane),
                    (work.first, work.end),
                    &mut cand,
                    (&mut mass, &mut top),
                );
            }
        }
        // SAFETY: the whole warp calls it for block row r < BLOCK_B (inside the merge area).
        unsafe { fragment::put_row_warp::<LP>(area, r, t.lane, cand, mass) };
        if TOP {
            // SAFETY: a truncation launch (TOP); unit lane < 32 = top_units; rows past B store nothing.
            unsafe { fragment::put_top(f, &work, b, t.lane, top) };
        }
        r += THREADS / 32;
    }
    // SAFETY: every thread of the block reaches the block merge and the final reduction, after its
    // rows' `put_row_warp` calls.
    unsafe { super::finish_block::<LP>(area, f, t.tid, THREADS, work) };
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
            unsafe { body::<{ V.threads() }, { V.block_b() }, $lp, $top>(p) }
        }
    };
}
entry!(gemm_logits_sample, Epilogue::Sample, false, false);
entry!(gemm_logits_sample_lp, Epilogue::LogProbs, true, false);
entry!(gemm_logits_sample_tk, Epilogue::Truncate, true, true);
