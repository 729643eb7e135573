//! The sparse-adjustment kernel: the few adjusted tokens of each request (logit bias, repetition,
//! frequency and presence penalties: [`Adjustment`]) are taken out of the fused pass (their mask
//! bits cleared) and scored here with their adjusted logits — the same no_std functions as the CPU
//! backend (soft-cap, then [`Adjustment::apply`], then the row's transform and Gumbel noise keyed by
//! the global index) — so that the reduction merges them as extra candidates (and extra log-mass).
//! Exact: an adjusted token competes with its adjusted score only.
//!
//! # Parameters
//! [`AdjustParams`] by value; launch with `grid = ceil(entries / (ADJUST_THREADS / 32))` blocks of
//! [`ADJUST_THREADS`] threads, no shared memory; before the fused kernel, on the same stream.
//!
//! # Thread mapping
//! Warp `w` of the grid handles entry `w`: the lanes share the dot product (8 hidden entries per
//! lane and step, then a butterfly), lane 0 clears the mask bit and writes the `n` samples' results.

use core::arch::nvptx::{_block_dim_x, _block_idx_x, _thread_idx_x};

use super::dot::warp_dot;
use super::ptx::atom_global_and_b32;
#[cfg(doc)]
use crate::config::ADJUST_THREADS;
use crate::params::{AdjustParams, AdjustedToken};

/// One warp per adjusted token.
///
/// # Safety
/// Launched as documented in the module; the buffers hold what [`AdjustParams`] states (every
/// entry's row below B, its token below the mask's `32 · mask_words`).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn adjust_tokens(p: AdjustParams) {
    // SAFETY: special-register reads.
    let (tid, blk, dim) = unsafe { (_thread_idx_x(), _block_idx_x(), _block_dim_x()) };
    let (lane, e) = (tid % 32, blk * (dim / 32) + tid / 32);
    if e >= p.entries {
        return; // warp-uniform
    }
    // SAFETY: e < entries.
    let (r, t, adj) =
        unsafe { (*p.entry_rows.add(e as usize), *p.tokens.add(e as usize), *p.adjustments.add(e as usize)) };
    let n = p.n;
    let mine = t >= p.v_offset && t < p.v_end; // warp-uniform
    let mut y = 0.0f32;
    if mine {
        let d = p.d as usize;
        let (h, w) = (r as usize * d, (t - p.v_offset) as usize * d);
        // SAFETY: all 32 lanes (`mine` is warp-uniform); hidden row r and weight row t − v_offset hold
        // D elements, 16-byte aligned (the host checks the bases; D % 8 == 0).
        y = unsafe { warp_dot(p.hidden.add(h), p.weight.add(w), d, lane, p.elem) };
    }
    if lane != 0 {
        return;
    }
    let word = r as usize * p.mask_words as usize + (t / 32) as usize;
    // SAFETY: r < B, t / 32 < mask_words: inside the mask. Only this warp clears bit t % 32.
    let old = unsafe { atom_global_and_b32(p.mask.add(word), !(1u32 << (t % 32))) };
    let allowed = mine && (old >> (t % 32)) & 1 == 1;
    let z = p.logit_pipeline().process(y, Some(&adj), allowed);
    for j in 0..n {
        let b = r * n + j;
        // SAFETY: b < B·n.
        let row = unsafe { *p.rows.add(b as usize) };
        let tr = row.transform;
        let greedy = tr.is_greedy();
        let out = if mine {
            let g = if tr.draws_no_noise() { 0.0 } else { row.noise().gumbel_at(t) };
            let scaled = if greedy || !allowed { f32::NEG_INFINITY } else { tr.scaled(z) };
            AdjustedToken { score: tr.score(z, g), token: t, scaled, z }
        } else {
            AdjustedToken {
                score: f32::NEG_INFINITY,
                token: crate::INVALID_INDEX,
                scaled: f32::NEG_INFINITY,
                z: f32::NEG_INFINITY,
            }
        };
        // SAFETY: e·n + j < entries·n.
        unsafe { *p.out.add((e * n + j) as usize) = out };
    }
}
