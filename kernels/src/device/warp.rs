//! Warp-level candidate merges.

use super::ptx::shfl_sync_bfly_b32;
use crate::candidate::Candidate;

/// Merges `c` with the candidates of the lanes `lane ^ m` for each `m` in `masks` (butterfly).
///
/// # Safety
/// All 32 lanes must call it together with the same `masks`.
#[inline(always)]
pub unsafe fn merge_butterfly<const K: usize>(mut c: Candidate, masks: [u32; K]) -> Candidate {
    for m in masks {
        // SAFETY: every lane executes the same shuffles (the caller's contract).
        let (score, index) = unsafe { (shfl_sync_bfly_b32(c.score.to_bits(), m), shfl_sync_bfly_b32(c.index, m)) };
        c = c.merge(Candidate { score: f32::from_bits(score), index });
    }
    c
}
