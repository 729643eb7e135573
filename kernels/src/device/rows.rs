//! The per-row view of a launch ([`RowRef`], [`row_params`]: what the lane epilogue and the reduction
//! read of a batch row), and the row-expansion kernel of launches with several samples per request: the fused kernel then
//! scores `B·n` rows, row `r·n + j` being request `r`'s hidden state (sample index `sample + j` in
//! its `RowParams`), so one pass over the weights draws every sample.
//!
//! # Parameters
//! [`ExpandParams`] by value; launch with `grid = ceil(B·n·D/8 / EXPAND_THREADS)` blocks of
//! [`EXPAND_THREADS`] threads, no shared memory.
//!
//! # Thread mapping
//! Thread `i` copies the 16-byte chunk `i % (D/8)` of output row `i / (D/8)` from request row
//! `i / (D/8) / n`.

use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};

use crate::params::{ExpandParams, FusedParams, RowParams};

#[cfg(doc)]
use crate::config::EXPAND_THREADS;

/// `out[r·n + j, :] = hidden[r, :]`.
///
/// # Safety
/// Launched as documented in the module; `hidden` holds `B·D` and `out` `B·n·D` 16-bit elements, both 16-byte
/// aligned, not overlapping.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn expand_rows(p: ExpandParams) {
    // SAFETY: special-register reads.
    let i = unsafe { _block_idx_x() as u64 * _block_dim_x() as u64 + _thread_idx_x() as u64 };
    let chunks = p.chunks as u64;
    let total = p.b as u64 * p.n as u64 * chunks;
    if i < total {
        let (row, chunk) = (i / chunks, i % chunks);
        let src = (row / p.n as u64) * chunks + chunk;
        // SAFETY: src < B·D/8 and i < B·n·D/8 chunks of 16 bytes, inside the buffers, 16-byte aligned.
        unsafe { *(p.out as *mut [u32; 4]).add(i as usize) = *(p.hidden as *const [u32; 4]).add(src as usize) };
    }
}

/// Batch row `b`'s parameters (`b < B`), loaded once per row and tile (32 bytes, L1-resident).
#[derive(Clone, Copy)]
pub(super) struct RowRef(RowParams);

impl RowRef {
    /// The row's noise key.
    #[inline(always)]
    pub(super) fn noise(self) -> crate::noise::RowNoise {
        self.0.noise()
    }
    /// The row's temperature transform.
    #[inline(always)]
    pub(super) fn transform(self) -> crate::epilogue::Transform {
        self.0.transform
    }
    /// The row's request (its mask row).
    #[inline(always)]
    pub(super) fn request(self) -> u32 {
        self.0.request
    }
}

/// Batch row `b`'s parameters (`b < B`: the caller's contract).
#[inline(always)]
pub(super) fn row_params(p: &FusedParams, b: u32) -> RowRef {
    // SAFETY: b < B (the caller's contract) and `rows` holds B entries.
    RowRef(unsafe { *p.rows.add(b as usize) })
}
