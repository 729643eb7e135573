//! The exact log-masses of a call's rows (issue 52; [`crate::exactmass`], docs/findings/49). On the
//! exact log-sum-exp path a call's logits are materialized by `fallback_logits` (each logit a
//! function of its row and vocab row alone), the GEMM-fed kernels sample and score them, and this
//! kernel sums every logit of each row into its processed and raw [`ExactMass`] — integer bins, so
//! the bits do not depend on how the block's threads, or vocab shards, split the row — and writes
//! them to `FusedParams::exact`, from which `reduce_rows` takes the row's log-sum-exps.
//!
//! The processed values are the lane epilogue's: soft-cap, then the allowed-token mask (an adjusted
//! token's bit is cleared for the fused pass), over the temperature ([`LogitPipeline`],
//! [`crate::epilogue::Transform::scaled`]); the row's adjusted tokens then add their processed
//! logits, each as a group of its own, as `reduce_rows` adds them to the f32 masses. A greedy row
//! has no processed mass.
//!
//! # Parameters
//! [`GemmLogitsParams`] by value: the fused launch's parameters and the logits `[B, ld]`; launch
//! with `grid = B` blocks of [`EXACT_MASS_THREADS`] threads and [`EXACT_MASS_SMEM`] bytes of dynamic
//! shared memory, after the GEMM-fed launch on the same stream and before `reduce_rows`.
//!
//! # Thread mapping
//! Block `b` takes sample row `b`; thread `t` its Philox groups `t, t + THREADS, …` (one 16-byte
//! load each) and its adjusted tokens `t, t + THREADS, …`; each warp merges its lanes (butterfly),
//! then thread 0 merges the warps in order and writes the row.

use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use super::fragment::load_logits_group;
use super::ptx::{
    ex2_approx_ftz_f32, griddepcontrol_wait, ld_shared_v4_u32, mov_u32_dynamic_smem, shfl_sync_bfly_b32,
    st_shared_v4_u32,
};
use super::reduce::AdjRows;
use super::rows::row_params;
#[cfg(doc)]
use crate::config::EXACT_MASS_SMEM;
use crate::config::EXACT_MASS_THREADS;
use crate::exactmass::ExactMass;
use crate::logits::LogitPipeline;
use crate::params::{GemmLogitsParams, RowExact};

/// A [`RowExact`]'s masses as twelve words (processed, then raw).
#[inline(always)]
fn words(m: RowExact) -> [u32; 12] {
    let (p, r) = (m.processed.to_words(), m.raw.to_words());
    [p[0], p[1], p[2], p[3], p[4], p[5], r[0], r[1], r[2], r[3], r[4], r[5]]
}

/// The masses of twelve words ([`words`]), no logits.
#[inline(always)]
fn of_words(w: [u32; 12]) -> RowExact {
    RowExact {
        processed: ExactMass::from_words([w[0], w[1], w[2], w[3], w[4], w[5]]),
        raw: ExactMass::from_words([w[6], w[7], w[8], w[9], w[10], w[11]]),
        ..RowExact::EMPTY
    }
}

/// Writes row `blockIdx.x`'s exact log-masses.
///
/// # Safety
/// Launched as documented in the module, with `p` the GEMM-fed launch's parameters whose logits
/// (`p.fused.b × p.ld` floats, 16-byte aligned, `ld % 4 == 0`, `ld ≥ v`) were written before on this
/// stream, and `p.fused.exact` holding `B` entries.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn exact_mass_rows(p: GemmLogitsParams) {
    const THREADS: u32 = EXACT_MASS_THREADS;
    // SAFETY: special-register reads.
    let (tid, b) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let f = &p.fused;
    if b >= f.b {
        return; // block-uniform
    }
    // Launched with programmatic stream serialization, the block may be resident before the GEMM-fed
    // kernel (which ran after the logits' producer) has finished.
    griddepcontrol_wait();
    let row = row_params(f, b);
    let transform = row.transform();
    let greedy = transform.is_greedy();
    let pipe = f.logit_pipeline();
    let groups = f.v.div_ceil(4);
    let row_logits = p.logits.wrapping_add(b as usize * p.ld as usize);
    let mut m = RowExact::EMPTY;
    let mut g = tid;
    while g < groups {
        let v0 = 4 * g;
        // SAFETY: row b of the logits (b < B), 16-byte aligned, `ld ≥ v` floats, written before this
        // launch; v0 % 4 == 0.
        let y = unsafe { load_logits_group(row_logits, f.v, v0) };
        // The group's mask bits (global vocab index: a shard's rows start at `v_offset`, a multiple of
        // 4, so the four bits are in one word).
        let bits = if f.mask.is_null() {
            u32::MAX
        } else {
            let gq = v0 + f.v_offset;
            // SAFETY: request < B / n and gq / 32 < mask_words (gq < v_end ≤ the model's V).
            unsafe { *f.mask.add(row.request() as usize * f.mask_words as usize + (gq / 32) as usize) >> (gq % 32) }
        };
        let inside = |j: usize| v0 + (j as u32) < f.v;
        let raw: [f32; 4] = core::array::from_fn(|j| if inside(j) { y[j] } else { f32::NEG_INFINITY });
        let processed: [f32; 4] = core::array::from_fn(|j| {
            if inside(j) && !greedy {
                transform.scaled(LogitPipeline::masked(pipe.capped(y[j]), (bits >> j) & 1 != 0))
            } else {
                f32::NEG_INFINITY
            }
        });
        m.raw.add_group(raw, ex2_approx_ftz_f32);
        m.processed.add_group(processed, ex2_approx_ftz_f32);
        g += THREADS;
    }
    // SAFETY: b < B (the offsets hold B / n + 1 entries with adjustments).
    let adj = unsafe { AdjRows::of(f, b) };
    let range = adj.range();
    let mut i = range.start + tid;
    while i < range.end {
        let a = adj.get(i);
        if !greedy {
            m.processed
                .add_group([a.scaled, f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY], ex2_approx_ftz_f32);
        }
        i += THREADS;
    }
    for k in [1u32, 2, 4, 8, 16] {
        // SAFETY: every lane of the warp (the loops above are per thread; all lanes reach here).
        let o = unsafe { words(m).map(|x| shfl_sync_bfly_b32(x, k)) };
        m = m.merge_masses(of_words(o));
    }
    let base = mov_u32_dynamic_smem();
    // SAFETY: block-uniform barrier; 48 bytes a warp inside EXACT_MASS_SMEM.
    unsafe {
        if tid % 32 == 0 {
            let w = words(m);
            let at = base + 48 * (tid / 32);
            st_shared_v4_u32(at, [w[0], w[1], w[2], w[3]]);
            st_shared_v4_u32(at + 16, [w[4], w[5], w[6], w[7]]);
            st_shared_v4_u32(at + 32, [w[8], w[9], w[10], w[11]]);
        }
        _syncthreads();
    }
    if tid == 0 {
        let mut all = RowExact::EMPTY;
        for w in 0..THREADS / 32 {
            let at = base + 48 * w;
            // SAFETY: stored above, visible after the barrier.
            let (a, c, d) = unsafe { (ld_shared_v4_u32(at), ld_shared_v4_u32(at + 16), ld_shared_v4_u32(at + 32)) };
            all = all.merge_masses(of_words([a[0], a[1], a[2], a[3], c[0], c[1], c[2], c[3], d[0], d[1], d[2], d[3]]));
        }
        // SAFETY: b < B: inside `exact` (the launch contract). The logits are `reduce_rows`'.
        unsafe { *f.exact.add(b as usize) = all };
    }
}
