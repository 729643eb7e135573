//! The tile scheduler: which batch tile and which vocab range a block covers, and where a thread and
//! its lane sit in the launch.
//!
//! # Grid
//! Persistent: the host launches `n_vranges · n_btiles` blocks, as many per multiprocessor as the
//! kernel's occupancy allows. Block `blk` covers batch tile `blk % n_btiles` (the kernel's
//! `BLOCK_B` rows) and vocab range `blk / n_btiles`, an even share of the `ceil(V / tile_v)` vocab
//! tiles (as even as integers allow), taken in order — or, in the weight-as-A kernels when the host
//! asks ([`FusedParams::handoff`]), an even share of the tiles' pipeline stages
//! ([`BlockWork::stages`], `super::handoff`). The batch tiles of one range are adjacent block
//! indices, so they run together and share that range's weight rows through L2. Vocab range `r` is
//! also the candidate column `r` of `FusedParams::candidates`.

use core::arch::nvptx::{_block_idx_x, _thread_idx_x};

use super::ptx::griddepcontrol_launch_dependents;
use crate::config::STAGE_K;
use crate::params::FusedParams;
use crate::schedule::RangeStages;

/// What a block covers: its batch tile, its vocab range and the range's tiles.
#[derive(Clone, Copy)]
pub(super) struct BlockWork {
    /// The batch tile (`blockIdx.x % n_btiles`): index of its arrival counter.
    pub btile: u32,
    /// First batch row of the batch tile.
    pub b_first: u32,
    /// The vocab range (`blockIdx.x / n_btiles`) = the block's candidate column.
    pub vrange: u32,
    /// The range's vocab tiles `[first, end)`.
    pub first: u32,
    /// See `first`.
    pub end: u32,
}

impl BlockWork {
    /// This block's work for `block_b` batch rows and `tile_v` vocab rows per tile.
    ///
    /// It also lets the launch's dependent grid (the host launches `reduce_rows` with programmatic
    /// stream serialization after the log-probability kernels) be scheduled now: its blocks then take
    /// each multiprocessor as this grid's blocks leave it, and wait there (`griddepcontrol.wait`)
    /// for this grid to complete, instead of starting after it completes.
    #[inline(always)]
    pub(super) fn of_this_block(p: &FusedParams, block_b: u32, tile_v: u32) -> Self {
        griddepcontrol_launch_dependents();
        // SAFETY: special-register read.
        let blk = unsafe { _block_idx_x() };
        let n_btiles = p.b.div_ceil(block_b).max(1);
        let (btile, vrange) = (blk % n_btiles, blk / n_btiles);
        let RangeStages { first, end, .. } = RangeStages::whole(p.v.div_ceil(tile_v), p.n_vranges, vrange, 1);
        BlockWork { btile, b_first: btile * block_b, vrange, first, end }
    }

    /// The pipeline stages of the block's range for tiles of `tile_v` rows and `STAGE_K` D columns
    /// per stage: balanced to the stage ([`RangeStages::balanced`]) when `balanced` (a kernel whose
    /// consumers hand off accumulators, launched with [`FusedParams::handoff`]), else its whole
    /// tiles `[first, end)`.
    #[inline(always)]
    pub(super) fn stages(&self, p: &FusedParams, tile_v: u32, balanced: bool) -> RangeStages {
        let n_k = p.d.div_ceil(STAGE_K);
        if balanced {
            RangeStages::balanced(p.v.div_ceil(tile_v), p.n_vranges, self.vrange, n_k)
        } else {
            RangeStages { head: 0, first: self.first, end: self.end, tail: 0, n_k }
        }
    }
}

/// This thread's coordinates: `tid = threadIdx.x`, `warp = tid / 32`, `lane = tid % 32`, and the
/// MMA fragment coordinates `group = lane / 4`, `quad = lane % 4`.
#[derive(Clone, Copy)]
pub(super) struct Thread {
    /// `threadIdx.x`.
    pub tid: u32,
    /// `tid / 32`.
    pub warp: u32,
    /// `tid % 32`.
    pub lane: u32,
    /// `lane / 4`: selects the lane's rows of an MMA fragment.
    pub group: u32,
    /// `lane % 4`: selects the lane's columns (or k slice) of an MMA fragment.
    pub quad: u32,
}

impl Thread {
    /// The calling thread.
    #[inline(always)]
    pub(super) fn this() -> Self {
        // SAFETY: special-register read.
        let tid = unsafe { _thread_idx_x() };
        let lane = tid % 32;
        Thread { tid, warp: tid / 32, lane, group: lane / 4, quad: lane % 4 }
    }
}
