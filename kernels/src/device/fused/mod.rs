//! The fused kernels' entry points, one file per family: each composes the roles (scheduler,
//! producer, mainloop, fragment adapter, block merge, reduction) into a kernel body and instantiates
//! it once per variant of [`crate::config::FUSED_VARIANTS`]. No family file imports another.

mod gemm_logits;
mod mma_sync;
mod tma_mma_sync;
mod wgmma;
mod wgmma_t;

use crate::device::merge::{self, MergeArea};
use crate::device::reduce::reduce_if_last;
use crate::device::schedule::BlockWork;
use crate::params::FusedParams;

/// The end of every fused kernel's block: the block merge ([`merge::finish`]), then, in the plain
/// kernels (`!LP`), the reduction of the batch tile by its last block ([`reduce_if_last`]; the
/// log-probability and truncation kernels' rows are reduced by the kernels launched after them).
///
/// # Safety
/// As [`merge::finish`]: every thread of the block calls it once, after its lanes' `put_merged`
/// calls.
#[inline(always)]
unsafe fn finish_block<const LP: bool>(area: MergeArea, p: &FusedParams, tid: u32, threads: u32, work: BlockWork) {
    // SAFETY: forwarded contract.
    unsafe { merge::finish::<LP>(area, p, tid, threads, work) };
    if !LP {
        // SAFETY: every thread of the block calls it, after the candidates are written.
        unsafe { reduce_if_last(p, tid, threads / 32, work.btile, work.b_first, area.block_rows()) };
    }
}
