//! The reduction: `[B, n]` candidates → one token (and score) per row, on the device, so a decode
//! loop needs no copy to the host per token.
//!
//! One warp merges one row ([`reduce_row`]: lane `l` merges candidates `l, l + 32, …`, then a
//! butterfly merges the lanes). The fused kernels run it in the last block of each batch tile to
//! finish ([`reduce_if_last`]); the standalone `reduce_candidates` kernel (baselines) runs
//! [`reduce_candidates`], one warp per row.

use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use super::dot::warp_dot;
use super::fragment::{exp, row_params};
use super::merge::mass_of_words;
use super::ptx::{
    atom_global_add_u32, fence_acq_rel_gpu, ld_global_cg_v2_u32, ld_global_cg_v4_u32, ld_shared_v2_u32, lg2_approx_f32,
    mov_u32_dynamic_smem, shfl_sync_bfly_b32, st_shared_v2_u32,
};
use crate::candidate::Candidate;
use crate::config::REDUCE_ROWS_PER_BLOCK;
use crate::logits::softcap;
use crate::params::{AdjustedToken, FusedParams, ReduceParams, RowMass};

/// Merges `c` with the candidates of the lanes `lane ^ m` for each `m` in `masks` (butterfly).
///
/// # Safety
/// All 32 lanes must call it together with the same `masks`.
#[inline(always)]
pub(super) unsafe fn merge_butterfly<const K: usize>(mut c: Candidate, masks: [u32; K]) -> Candidate {
    for m in masks {
        // SAFETY: every lane executes the same shuffles (the caller's contract).
        let (score, index) = unsafe { (shfl_sync_bfly_b32(c.score.to_bits(), m), shfl_sync_bfly_b32(c.index, m)) };
        c = c.merge(Candidate { score: f32::from_bits(score), index });
    }
    c
}

/// Merges two [`RowMass`]es with the device's exponential.
#[inline(always)]
pub(super) fn merge_mass(a: RowMass, b: RowMass) -> RowMass {
    RowMass { processed: a.processed.merge_with(b.processed, exp), raw: a.raw.merge_with(b.raw, exp) }
}

/// Merges `m` with the masses of the lanes `lane ^ k` for each `k` in `masks` (butterfly).
///
/// # Safety
/// All 32 lanes must call it together with the same `masks`.
#[inline(always)]
pub(super) unsafe fn merge_mass_butterfly<const K: usize>(mut m: RowMass, masks: [u32; K]) -> RowMass {
    for k in masks {
        let w = super::merge::mass_words(m);
        // SAFETY: every lane executes the same shuffles (the caller's contract).
        let o = unsafe { w.map(|x| shfl_sync_bfly_b32(x, k)) };
        m = merge_mass(m, mass_of_words(o));
    }
    m
}

/// A sample row's adjusted tokens (sparse adjustments, `adjust_tokens`): entries `start .. end` of
/// its request, its sample `j` of `n` each; empty without adjustments.
#[derive(Clone, Copy)]
pub(super) struct AdjRows {
    ptr: *const AdjustedToken,
    start: u32,
    end: u32,
    n: u32,
    j: u32,
}

impl AdjRows {
    /// No adjusted token.
    pub(super) const NONE: Self = Self { ptr: core::ptr::null(), start: 0, end: 0, n: 1, j: 0 };

    /// Sample row `b`'s adjusted tokens in the launch `p`.
    ///
    /// # Safety
    /// `b < B`; with adjustments, `p.adj_offsets` holds `B / n + 1` offsets.
    #[inline(always)]
    pub(super) unsafe fn of(p: &FusedParams, b: u32) -> Self {
        // SAFETY: forwarded contract.
        unsafe { Self::from_parts(p.adj_offsets, p.adjusted, p.samples, b) }
    }

    /// Sample row `b`'s adjusted tokens given the CSR `offsets` and the results `adjusted` (null:
    /// none) of a launch with `samples` samples per request.
    ///
    /// # Safety
    /// `b < B`; with adjustments, `offsets` holds `B / n + 1` offsets and `adjusted` their results.
    #[inline(always)]
    pub(super) unsafe fn from_parts(offsets: *const u32, adjusted: *const AdjustedToken, samples: u32, b: u32) -> Self {
        if adjusted.is_null() {
            return Self::NONE;
        }
        let n = samples.max(1);
        let r = (b / n) as usize;
        // SAFETY: r < B / n: inside the offsets (the caller's contract).
        let (start, end) = unsafe { (*offsets.add(r), *offsets.add(r + 1)) };
        Self { ptr: adjusted, start, end, n, j: b % n }
    }

    /// The entries `start .. end` of this sample row.
    #[inline(always)]
    pub(super) fn range(&self) -> core::ops::Range<u32> {
        self.start..self.end
    }

    /// Entry `i` (`start ≤ i < end`) for this sample row.
    #[inline(always)]
    pub(super) fn get(&self, i: u32) -> AdjustedToken {
        // SAFETY: start ≤ i < end ≤ entries: inside `[entries, n]` (the kernel wrote it before this
        // launch, on the same stream).
        unsafe { *self.ptr.add((i * self.n + self.j) as usize) }
    }
}

/// `ln x` from `lg2.approx`.
#[inline(always)]
pub(super) fn ln(x: f32) -> f32 {
    lg2_approx_f32(x) * core::f32::consts::LN_2
}

/// The log-probability kernels' last step for row `b`, whose merged candidate is `cand` and whose
/// lane's share of the `n_vranges` masses is `mass` ([`reduce_row`]): merges the masses over the
/// warp, recomputes the sampled token's logit `y` (one dot product over the
/// warp, f32) and writes the token's log-probabilities (processed: `z / T − lse`, `z` = `y`
/// soft-capped, `0` for a greedy row; raw: `y − lse_raw`) and the row's log-sum-exp of `z / T` (NaN
/// for a greedy row). A row without a token gets NaN everywhere.
///
/// # Safety
/// All 32 lanes of the warp call it together; `b < B`; `p` is a log-probability launch.
#[inline(always)]
unsafe fn logprobs_row(p: &FusedParams, b: u32, (cand, mut mass): (Candidate, RowMass), lane: u32, adj: AdjRows) {
    // The adjusted tokens' processed mass (their raw logits are in the fused pass's raw mass).
    let mut i = adj.start + lane;
    while i < adj.end {
        let x = adj.get(i).scaled;
        if x != f32::NEG_INFINITY {
            mass.processed.update(x, exp);
        }
        i += 32;
    }
    // SAFETY: all 32 lanes (the caller's contract).
    let mass = unsafe { merge_mass_butterfly(mass, [1, 2, 4, 8, 16]) };
    let token = cand.token();
    let valid = token != crate::INVALID_INDEX; // warp-uniform: every lane has the merged candidate
    let mut y = 0.0f32;
    if valid {
        let d = p.d as usize;
        // The token's weight row: its global index minus the shard's first (`v_offset ≤ token`).
        let (h, w) = (b as usize * d, (token - p.v_offset) as usize * d);
        // SAFETY: all 32 lanes (the caller's contract; `valid` is warp-uniform); row b of the hidden
        // states and row `token − v_offset < V` of the weight hold D elements, 16-byte aligned.
        y = unsafe { warp_dot::<8>(p.hidden.add(h), p.weight.add(w), d, lane, p.elem) };
    }
    if lane == 0 {
        let row = row_params(p, b);
        let lse = mass.processed.max + ln(mass.processed.sum);
        let lse_raw = mass.raw.max + ln(mass.raw.sum);
        let transform = row.transform();
        let greedy = transform.is_greedy();
        let (lp, raw, lse) = if !valid {
            (f32::NAN, f32::NAN, if greedy { f32::NAN } else { lse })
        } else {
            let mut z = if p.softcap > 0.0 { softcap(y, p.softcap) } else { y };
            // An adjusted token won as its entry: its processed logit is the adjusted one.
            for i in adj.start..adj.end {
                let a = adj.get(i);
                if a.token == token {
                    z = a.z;
                }
            }
            let lp = if greedy { 0.0 } else { z * transform.inv_temperature - lse };
            (lp, y - lse_raw, if greedy { f32::NAN } else { lse })
        };
        // SAFETY: b < B; the log-probability outputs hold B entries (`raw_logsumexp` when not null).
        unsafe {
            *p.logprobs.add(b as usize) = lp;
            *p.raw_logprobs.add(b as usize) = raw;
            *p.logsumexp.add(b as usize) = lse;
            if !p.raw_logsumexp.is_null() {
                *p.raw_logsumexp.add(b as usize) = lse_raw;
            }
        }
    }
}

/// Merges row `b`'s `n` candidates from `candidates[b·n ..]` over the warp and writes its token and
/// score (lane 0). Loads are L2-coherent (`ld.global.cg`): other blocks of the same launch may have
/// written the candidates. With `masses` not null (the log-probability kernels), the same pass loads
/// the row's masses too (both loads in flight) and returns the lane's merge of masses `lane, lane +
/// 32, …` ([`logprobs_row`] merges them over the warp); else [`RowMass::EMPTY`].
///
/// # Safety
/// All 32 lanes of the warp call it together; `candidates` (and `masses` when not null) hold `n`
/// entries for row `b`, `tokens` and `scores` hold entry `b`.
#[inline(always)]
pub(super) unsafe fn reduce_row(
    (candidates, masses): (*const Candidate, *const RowMass),
    n: u32,
    b: u32,
    tokens: *mut u32,
    scores: *mut f32,
    lane: u32,
    adj: AdjRows,
) -> (Candidate, RowMass) {
    let row = b as usize * n as usize;
    let mut c = Candidate::EMPTY;
    let mut mass = RowMass::EMPTY;
    let mut i = lane;
    while i < n {
        // SAFETY: i < n: inside the row (the caller's contract).
        let [s, idx] = unsafe { ld_global_cg_v2_u32(candidates.add(row + i as usize) as *const u32) };
        if !masses.is_null() {
            // SAFETY: inside the row's masses (the caller's contract); written in this launch by
            // other blocks (L2).
            let w = unsafe { ld_global_cg_v4_u32(masses.add(row + i as usize) as *const u32) };
            mass = merge_mass(mass, mass_of_words(w));
        }
        c = c.merge(Candidate { score: f32::from_bits(s), index: idx });
        i += 32;
    }
    // The row's adjusted tokens compete with their adjusted scores (the fused pass skipped them).
    let mut i = adj.start + lane;
    while i < adj.end {
        let a = adj.get(i);
        c = c.merge(Candidate { score: a.score, index: a.token });
        i += 32;
    }
    // SAFETY: all 32 lanes of this warp are here (the caller's contract).
    let c = unsafe { merge_butterfly(c, [1, 2, 4, 8, 16]) };
    if lane == 0 {
        // SAFETY: entry b of the outputs (the caller's contract).
        unsafe {
            *tokens.add(b as usize) = c.token();
            *scores.add(b as usize) = c.score;
        }
    }
    (c, mass)
}

/// The fused kernels' reduction: the last block of a batch tile to finish (counted with an atomic
/// after a device-wide fence) reduces that tile's rows `first_row .. first_row + block_rows` (below
/// B), one warp per row, on warps `first_warp .. warps` (and, with `LP`, computes their
/// log-probabilities; the hidden-as-A kernels leave their producer warpgroup, which runs on 24
/// registers, out of that). Deterministic: the merge is order-independent. The counter is reset
/// for the next launch.
///
/// # Safety
/// Every thread of the block (`warps` warps) calls it, after writing its candidates; the block's
/// first 8 bytes of dynamic shared memory are free; `first_warp < warps`.
#[inline(always)]
pub(super) unsafe fn reduce_if_last<const LP: bool>(
    p: &FusedParams,
    tid: u32,
    (first_warp, warps): (u32, u32),
    btile: u32,
    first_row: u32,
    block_rows: u32,
) {
    let flag = mov_u32_dynamic_smem();
    fence_acq_rel_gpu(); // this thread's candidate stores are visible device-wide before the count
    // SAFETY: block-uniform barriers; `counters` holds n_btiles entries; `flag` is in shared memory.
    unsafe {
        _syncthreads();
        if tid == 0 {
            let arrived = atom_global_add_u32(p.counters.add(btile as usize), 1);
            st_shared_v2_u32(flag, [(arrived + 1 == p.n_vranges) as u32, 0]);
        }
        _syncthreads();
        if ld_shared_v2_u32(flag)[0] == 0 {
            return;
        }
    }
    fence_acq_rel_gpu(); // acquire: every block's candidates are visible to this one
    let (lane, warp) = (tid % 32, tid / 32);
    // Warp-uniform: the warps before `first_warp` take no row.
    let mut r = if warp >= first_warp { warp - first_warp } else { block_rows };
    while r < block_rows {
        let b = first_row + r;
        if b >= p.b {
            break; // warp-uniform
        }
        // SAFETY: b < B (and the offsets hold B / n + 1 entries with adjustments).
        let adj = unsafe { AdjRows::of(p, b) };
        let masses = if LP { p.masses as *const RowMass } else { core::ptr::null() };
        // SAFETY: b < B; the whole warp is here (warp-uniform loop); a log-probability launch's
        // `masses` holds [B, n_vranges] entries, every block's visible (acquired).
        let row = unsafe { reduce_row((p.candidates, masses), p.n_vranges, b, p.tokens, p.scores, lane, adj) };
        if LP {
            // SAFETY: as above.
            unsafe { logprobs_row(p, b, row, lane, adj) };
        }
        r += warps - first_warp;
    }
    if tid == 0 {
        // SAFETY: btile < n_btiles. The next launch on the stream starts after this one completes.
        unsafe { *p.counters.add(btile as usize) = 0 };
    }
}

/// The standalone reduction: `grid = ceil(B / REDUCE_ROWS_PER_BLOCK)` blocks of
/// `REDUCE_THREADS_PER_BLOCK` threads, one warp per row.
///
/// # Safety
/// Launched so, with buffers of the sizes `p` states.
#[inline(always)]
pub(super) unsafe fn reduce_candidates(p: ReduceParams) {
    // SAFETY: special-register reads.
    let (tid, blk) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let row = blk * REDUCE_ROWS_PER_BLOCK + tid / 32;
    if row < p.b {
        // SAFETY: row < B; the early exit is per warp, so the whole warp is here.
        unsafe {
            let inputs = (p.candidates as *const Candidate, core::ptr::null());
            reduce_row(inputs, p.n_candidates, row, p.tokens, p.scores, tid % 32, AdjRows::NONE)
        };
    }
}
