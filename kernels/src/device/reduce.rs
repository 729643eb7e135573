//! The candidate-reduction kernel: `[B, n_candidates]` candidates → one token (and score) per row, on the
//! device, so a decode loop needs no copy to the host per token.
//!
//! # Parameters
//! [`ReduceParams`] by value; `grid = ceil(B / REDUCE_ROWS_PER_BLOCK)` blocks of
//! [`REDUCE_THREADS_PER_BLOCK`](crate::config::REDUCE_THREADS_PER_BLOCK) threads, no shared memory.
//!
//! # Thread mapping
//! One warp per batch row: lane `l` merges candidates `l, l + 32, …`, then a butterfly merges the lanes.

use core::arch::nvptx::{_block_idx_x, _thread_idx_x};

use super::warp::merge_butterfly;
use crate::candidate::Candidate;
use crate::config::REDUCE_ROWS_PER_BLOCK;
use crate::params::ReduceParams;

/// # Safety
/// Launched as documented in the module, with buffers of the sizes `p` states.
#[inline(always)]
pub unsafe fn reduce_candidates(p: ReduceParams) {
    // SAFETY: special-register reads.
    let (tid, blk) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let lane = tid % 32;
    let row = blk * REDUCE_ROWS_PER_BLOCK + tid / 32;
    if row >= p.b {
        return; // the whole warp leaves together
    }
    // SAFETY: row < B: the row's n_candidates candidates are inside the buffer.
    let cands = unsafe { p.candidates.add(row as usize * p.n_candidates as usize) };
    let mut c = Candidate::EMPTY;
    let mut i = lane;
    while i < p.n_candidates {
        // SAFETY: i < n_candidates.
        c = c.merge(unsafe { *cands.add(i as usize) });
        i += 32;
    }
    // SAFETY: all 32 lanes of this warp are here (the early return is per warp).
    let c = unsafe { merge_butterfly(c, [1, 2, 4, 8, 16]) };
    if lane == 0 {
        // SAFETY: row < B.
        unsafe {
            *p.tokens.add(row as usize) = c.token();
            *p.scores.add(row as usize) = c.score;
        }
    }
}
