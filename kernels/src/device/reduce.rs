//! The reduction: `[B, n]` candidates → one token (and score) per row, on the device, so a decode
//! loop needs no copy to the host per token.
//!
//! One warp merges one row ([`reduce_row`]: lane `l` merges candidates `l, l + 32, …`, then a
//! butterfly merges the lanes). The plain fused kernels run it in the last block of each batch tile
//! to finish ([`reduce_if_last`]); the standalone `reduce_candidates` kernel (baselines) runs
//! [`reduce_candidates`], one warp per row. The log-probability and truncation kernels end with
//! their candidates and masses written; each row is then reduced by a whole block
//! ([`reduce_row_block`]: the merged masses, the token's logit, its log-probabilities): in the
//! `reduce_rows` kernel launched after a log-probability launch, and at the start of the
//! truncation step after a truncation launch.

use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use super::collective::{exp, ln, mass_of_words, mass_words, merge_butterfly, merge_mass, merge_mass_butterfly};
use super::dot::block_dot;
use super::ptx::{
    atom_global_add_u32, fence_acq_rel_gpu, griddepcontrol_launch_dependents, griddepcontrol_wait, ld_global_cg_v2_u32,
    ld_global_cg_v4_u32, ld_shared_v2_u32, ld_shared_v4_u32, lg2_approx_f32, mov_u32_dynamic_smem, st_shared_v2_u32,
    st_shared_v4_u32,
};
use super::rows::row_params;
use crate::candidate::Candidate;
use crate::config::{REDUCE_BLOCK_THREADS, REDUCE_ROWS_PER_BLOCK};
use crate::logmass::{target_log_probs, token_log_probs};
use crate::params::{AdjustedToken, FusedParams, ReduceParams, RowMass};

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

/// Row `b`'s log-probability outputs (one thread): the token's processed log-probability `z / T −
/// lse` ([`log_prob`]'s `+∞` rule: 0 for a `+∞` token, whose row's `lse` is `+∞`) (`z` = the
/// token's logit `y` soft-capped, or its adjusted logit when an adjusted token won;
/// `0` for a greedy row), its raw one `y − lse_raw`, and the row's log-sum-exp of `z / T` (NaN for a
/// greedy row). A row without a token (`valid` false) gets NaN everywhere. Null `logprobs` (a
/// truncation step whose call asks for no log-probabilities; `y` is then not computed): the
/// log-sum-exps alone. Null `raw_logprobs` (a one-GPU log-probability call without raw ones, or a
/// scoring launch whose processed logits are its raw ones; either way the fused kernels skipped the
/// raw log-mass, which the scoring launch took from the processed one): no raw log-probability.
///
/// # Safety
/// `b < B`; `p` is a log-probability launch (its outputs hold B entries; `raw_logprobs` null or
/// not, and null when `logprobs` is).
#[inline(always)]
unsafe fn write_logprobs<const EXACT: bool>(
    p: &FusedParams,
    b: u32,
    (cand, (lse, lse_raw)): (Candidate, (f32, f32)),
    y: f32,
    adj: AdjRows,
) {
    let token = cand.token();
    let valid = token != crate::INVALID_INDEX;
    let row = row_params(p, b);
    let transform = row.transform();
    let greedy = transform.is_greedy();
    let logits = if !valid {
        (f32::NAN, f32::NAN)
    } else {
        // The logit pipeline's soft-cap (the token was allowed: it won).
        let mut z = p.logit_pipeline().capped(y);
        // An adjusted token won as its entry: its processed logit is the adjusted one.
        for i in adj.start..adj.end {
            let a = adj.get(i);
            if a.token == token {
                z = a.z;
            }
        }
        (transform.scaled(z), y)
    };
    let (lp, raw, lse) = token_log_probs(valid, greedy, logits, (lse, lse_raw));
    if EXACT {
        // SAFETY: b < B: inside `exact` (the exact path's launch).
        unsafe { (*p.exact.add(b as usize)).token = [logits.0, logits.1] };
    }
    // SAFETY: b < B; the log-probability outputs hold B entries (`logprobs`, `raw_logprobs` and
    // `raw_logsumexp` when not null).
    unsafe {
        if !p.logprobs.is_null() {
            *p.logprobs.add(b as usize) = lp;
            if !p.raw_logprobs.is_null() {
                *p.raw_logprobs.add(b as usize) = raw;
            }
        }
        *p.logsumexp.add(b as usize) = lse;
        if !p.raw_logsumexp.is_null() {
            *p.raw_logsumexp.add(b as usize) = lse_raw;
        }
    }
}

/// Merges row `b`'s `n` candidates from `candidates[b·n ..]` over the warp and writes its token and
/// score (lane 0). Loads are L2-coherent (`ld.global.cg`): other blocks of the same launch may have
/// written the candidates.
///
/// # Safety
/// All 32 lanes of the warp call it together; `candidates` holds `n` entries for row `b`, `tokens`
/// and `scores` hold entry `b`.
#[inline(always)]
pub(super) unsafe fn reduce_row(
    candidates: *const Candidate,
    n: u32,
    b: u32,
    (tokens, scores): (*mut u32, *mut f32),
    lane: u32,
    adj: AdjRows,
) {
    let row = b as usize * n as usize;
    let mut c = Candidate::EMPTY;
    let mut i = lane;
    while i < n {
        // SAFETY: i < n: inside the row (the caller's contract).
        let [s, idx] = unsafe { ld_global_cg_v2_u32(candidates.add(row + i as usize) as *const u32) };
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
}

/// The plain fused kernels' reduction: the last block of a batch tile to finish (counted with an
/// atomic after a device-wide fence) reduces that tile's rows `first_row .. first_row + block_rows`
/// (below B), one warp per row. Deterministic: the merge is order-independent. The counter is reset
/// for the next launch. (The log-probability kernels leave their rows to [`reduce_row_block`].)
///
/// # Safety
/// Every thread of the block (`warps` warps) calls it, after writing its candidates; the block's
/// first 8 bytes of dynamic shared memory are free.
#[inline(always)]
pub(super) unsafe fn reduce_if_last(
    p: &FusedParams,
    tid: u32,
    warps: u32,
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
    let mut r = warp;
    while r < block_rows {
        let b = first_row + r;
        if b >= p.b {
            break; // warp-uniform
        }
        // SAFETY: b < B (and the offsets hold B / n + 1 entries with adjustments).
        let adj = unsafe { AdjRows::of(p, b) };
        // SAFETY: b < B; the whole warp is here (warp-uniform loop); every block's candidates are
        // visible (acquired).
        unsafe { reduce_row(p.candidates, p.n_vranges, b, (p.tokens, p.scores), lane, adj) };
        r += warps;
    }
    if tid == 0 {
        // SAFETY: btile < n_btiles. The next launch on the stream starts after this one completes.
        unsafe { *p.counters.add(btile as usize) = 0 };
    }
}

/// The block-per-row reduction of sample row `b` after a log-probability (`_lp`) or truncation
/// (`_tk`) fused launch `p`, run by the `reduce_rows` kernel (one block per row, launched after
/// every log-probability launch) and at the start of the truncation step (`truncate_rows`, which
/// then needs no `reduce_rows` before it). `PARTS` = [`REDUCE_BLOCK_THREADS`] threads of the block
/// take part (the others only meet the barriers), so the sums are taken in the same order whatever
/// the block's size: thread `t` merges the row's candidates and masses `t, t + PARTS, …` and its
/// adjusted tokens, each warp merges its lanes, every thread merges the first `PARTS / 32` warps'
/// results in order (so all hold the row's candidate and mass); then the sampled token's logit `y`,
/// one block-wide dot product (skipped without `logprobs`); thread 0 writes the token, its score and
/// [`write_logprobs`]. In the
/// fused kernel's last block this took one warp per row, 12–15 µs each (docs/findings/18); here
/// the rows run on B multiprocessors at once.
///
/// # Safety
/// Every thread of a block of at least `PARTS` threads calls it (`tid` its index), `b < p.b`, after
/// `griddepcontrol.wait` when launched with programmatic stream serialization, after the fused
/// launch with the same `p` on the same stream; `smem` is the shared address of
/// [`REDUCE_BLOCK_SMEM`](crate::config::REDUCE_BLOCK_SMEM) free bytes (`28 · PARTS / 32`, 16-byte
/// aligned), not used by the caller until after its next barrier. Outputs are written by thread 0:
/// the caller's other threads see them after a barrier.
#[inline(always)]
pub(super) unsafe fn reduce_row_block<const SCORE: bool, const EXACT: bool>(
    p: &FusedParams,
    b: u32,
    tid: u32,
    smem: u32,
) {
    const PARTS: u32 = REDUCE_BLOCK_THREADS;
    const W: u32 = PARTS / 32;
    let part = tid < PARTS; // warp-uniform
    let (cand_slots, mass_slots, dot_slots) = (smem, smem + 8 * W, smem + 24 * W);
    let n = p.n_vranges;
    let row = b as usize * n as usize;
    let (candidates, masses) = (p.candidates as *const Candidate, p.masses as *const RowMass);
    let mut c = Candidate::EMPTY;
    let mut mass = RowMass::EMPTY;
    let mut i = tid;
    while part && i < n {
        // SAFETY: i < n: inside the row's candidates and masses ([B, n_vranges] each), written by
        // the fused kernel before this launch (waited for: the caller's contract).
        let (cw, mw) = unsafe {
            (
                ld_global_cg_v2_u32(candidates.add(row + i as usize) as *const u32),
                ld_global_cg_v4_u32(masses.add(row + i as usize) as *const u32),
            )
        };
        c = c.merge(Candidate { score: f32::from_bits(cw[0]), index: cw[1] });
        mass = merge_mass(mass, mass_of_words(mw));
        i += PARTS;
    }
    // SAFETY: b < B (the offsets hold B / n + 1 entries with adjustments).
    let adj = unsafe { AdjRows::of(p, b) };
    // The adjusted tokens compete with their adjusted scores and add their processed mass (their
    // raw logits are in the fused pass's raw mass; the fused pass skipped them otherwise).
    let mut i = adj.start + tid;
    while part && i < adj.end {
        let a = adj.get(i);
        c = c.merge(Candidate { score: a.score, index: a.token });
        if a.scaled != f32::NEG_INFINITY {
            mass.processed.update(a.scaled, exp);
        }
        i += PARTS;
    }
    // SAFETY: every lane of every warp; the slots are inside the caller's `28 · W` bytes; a
    // block-uniform barrier.
    unsafe {
        let c = merge_butterfly(c, [1, 2, 4, 8, 16]);
        let m = merge_mass_butterfly(mass, [1, 2, 4, 8, 16]);
        if part && tid % 32 == 0 {
            st_shared_v2_u32(cand_slots + 8 * (tid / 32), [c.score.to_bits(), c.index]);
            st_shared_v4_u32(mass_slots + 16 * (tid / 32), mass_words(m));
        }
        _syncthreads();
    }
    let (mut c, mut mass) = (Candidate::EMPTY, RowMass::EMPTY);
    for w in 0..W {
        // SAFETY: stored above, visible after the barrier.
        let (cw, mw) = unsafe { (ld_shared_v2_u32(cand_slots + 8 * w), ld_shared_v4_u32(mass_slots + 16 * w)) };
        c = c.merge(Candidate { score: f32::from_bits(cw[0]), index: cw[1] });
        mass = merge_mass(mass, mass_of_words(mw));
    }
    if SCORE && !p.targets.is_null() && p.raw_logprobs.is_null() {
        // A scoring launch whose processed logits are its raw ones (`FusedParams::targets`): the
        // fused pass skipped the raw log-mass, which is the processed one.
        mass.raw = mass.processed;
    }
    // The row's log-sum-exps (`+∞` when a `+∞` logit holds all the mass, whatever its sum became):
    // from the exact log-masses on the exact path (`FusedParams::exact`), else the merged masses.
    // (Evaluated where thread 0 writes, after the dot products: fewer registers live across them.)
    let lses = || {
        if !EXACT {
            (mass.processed.lse_with(ln), mass.raw.lse_with(ln))
        } else {
            // SAFETY: b < B: inside `exact`, written by `exact_mass_rows` before this launch.
            let e = unsafe { *p.exact.add(b as usize) };
            (e.processed.lse_with(lg2_approx_f32), e.raw.lse_with(lg2_approx_f32))
        }
    };
    let token = c.token();
    let mut y = 0.0f32;
    // The token's logit only for its log-probabilities (a truncation step whose call asks none
    // passes no `logprobs`).
    if token != crate::INVALID_INDEX && !p.logprobs.is_null() {
        // Block-uniform: every thread merged the same entries in the same order; `p` is uniform.
        let d = p.d as usize;
        // The token's weight row: its global index minus the shard's first (`v_offset ≤ token`).
        let rows = (p.hidden.wrapping_add(b as usize * d), p.weight.wrapping_add((token - p.v_offset) as usize * d));
        // SAFETY: every thread (block-uniform branch); row b of the hidden states and row `token −
        // v_offset < V` of the weight hold D elements, 16-byte aligned; one slot per taking-part warp.
        y = unsafe { block_dot(rows, d, (tid, PARTS), dot_slots, p.elem) };
    }
    if tid == 0 {
        // SAFETY: b < B: entry b of every output; a log-probability launch.
        unsafe {
            *p.tokens.add(b as usize) = token;
            *p.scores.add(b as usize) = c.score;
            write_logprobs::<EXACT>(p, b, (c, lses()), y, adj);
        }
    }
    if SCORE && !p.targets.is_null() {
        // SAFETY: b < B, `targets` holds B entries (block-uniform load).
        let target = unsafe { *p.targets.add(b as usize) };
        // A token outside this launch's rows (the device API does not validate them on the host)
        // scores NaN, and nothing is read for it.
        let inside = target.wrapping_sub(p.v_offset) < p.v;
        // The given token's logit: the same dot product as a sampled token's (bit for bit the sampled
        // token's when they are the same token).
        let yt = if !inside {
            f32::NAN
        } else if target == token && !p.logprobs.is_null() {
            y
        } else {
            let d = p.d as usize;
            let rows =
                (p.hidden.wrapping_add(b as usize * d), p.weight.wrapping_add((target - p.v_offset) as usize * d));
            // SAFETY: every thread (block-uniform branch); the barrier orders the reads of the slots
            // of the dot above (thread 0's) before this one's stores; row `target − v_offset < V` of
            // the weight (`inside`) and row b of the hidden states hold D elements.
            unsafe {
                _syncthreads();
                block_dot(rows, d, (tid, PARTS), dot_slots, p.elem)
            }
        };
        if tid == 0 {
            // SAFETY: b < B: entry b of the target outputs.
            unsafe { write_target_logprobs::<EXACT>(p, b, target, (c, lses()), yt, adj) };
        }
    }
}

/// Row `b`'s given token's log-probabilities (`targets`): `target` with logit `yt` goes through
/// the logit pipeline as sampling's tokens do (soft-cap, then its adjustment or the mask; `−∞` when
/// not allowed), then `z / T − lse` ([`log_prob`]; `−∞` for a removed token); its raw one
/// `yt − lse_raw`. A greedy row: 0 for its sampled token, `−∞` for any other. A row with a NaN
/// logit, or a token outside the launch's rows (`yt` NaN): NaN for both (the host reports the
/// row's error, as sampling does). (Over vocab shards, docs/findings/41's patch, the ranks' merge
/// takes the token's shard and decides a greedy row by the whole head's token.)
///
/// # Safety
/// `b < B`; `p.targets`' outputs hold B entries; `p` is a one-GPU log-probability launch.
#[inline(always)]
unsafe fn write_target_logprobs<const EXACT: bool>(
    p: &FusedParams,
    b: u32,
    target: u32,
    (c, (lse, lse_raw)): (Candidate, (f32, f32)),
    yt: f32,
    adj: AdjRows,
) {
    let row = row_params(p, b);
    let transform = row.transform();
    let token = c.token();
    // The given token's processed logit over the temperature (`−∞` where removed), where the
    // launch's rows hold it (`yt` not NaN).
    let xt = if yt.is_nan() {
        f32::NAN
    } else {
        let pipe = p.logit_pipeline();
        // SAFETY: the mask row `request` holds mask_words words (target < v_end ≤ 32 · mask_words).
        let allowed = p.mask.is_null()
            || unsafe { *p.mask.add(row.request() as usize * p.mask_words as usize + (target / 32) as usize) }
                >> (target % 32)
                & 1
                != 0;
        let mut z = crate::logits::LogitPipeline::masked(pipe.capped(yt), allowed);
        // An adjusted token's processed logit is its adjusted one (its mask bit was cleared for the
        // fused pass; `z` holds the mask).
        for i in adj.start..adj.end {
            let a = adj.get(i);
            if a.token == target {
                z = a.z;
            }
        }
        transform.scaled(z)
    };
    let flags = (c.score.is_nan(), transform.is_greedy(), target == token);
    let (lp, raw) = target_log_probs(flags, (xt, yt), (lse, lse_raw));
    // SAFETY: b < B (the caller's contract; `exact` holds B entries on the exact path).
    unsafe {
        *p.target_logprobs.add(b as usize) = lp;
        *p.target_raw_logprobs.add(b as usize) = raw;
        if EXACT {
            (*p.exact.add(b as usize)).target = [xt, yt];
        }
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
            let outputs = (p.tokens, p.scores);
            reduce_row(p.candidates as *const Candidate, p.n_candidates, row, outputs, tid % 32, AdjRows::NONE)
        };
    }
}

/// The log-probability reduction: one block per sample row ([`reduce_row_block`]).
///
/// # Safety
/// Launched with `grid = B` (`p.b`), [`REDUCE_BLOCK_THREADS`] threads and
/// [`REDUCE_BLOCK_SMEM`](crate::config::REDUCE_BLOCK_SMEM) bytes of dynamic shared memory, after
/// (on the same stream) the log-probability fused kernel with the same `p`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn reduce_rows(p: FusedParams) {
    // SAFETY: forwarded contract.
    unsafe { reduce_rows_with::<false>(p) }
}

/// [`reduce_rows`] on the exact log-sum-exp path: each row's log-sum-exps from its exact masses
/// (`p.exact`, which `exact_mass_rows` wrote), and its token's and given token's logits written
/// beside them (what a tensor-parallel rank exchanges).
///
/// # Safety
/// As [`reduce_rows`], after `exact_mass_rows` with the same `p` (`p.exact` holds `B` records).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn reduce_rows_exact(p: FusedParams) {
    // SAFETY: forwarded contract.
    unsafe { reduce_rows_with::<true>(p) }
}

/// The body of [`reduce_rows`] and [`reduce_rows_exact`].
///
/// # Safety
/// As theirs.
#[inline(always)]
unsafe fn reduce_rows_with<const EXACT: bool>(p: FusedParams) {
    // SAFETY: special-register reads.
    let (tid, b) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    if b >= p.b {
        return; // block-uniform
    }
    // Launched with programmatic stream serialization, this block may be resident before the fused
    // kernel has finished: wait for it (and its candidates and masses). A kernel launched after it
    // the same way may be scheduled from now on.
    griddepcontrol_launch_dependents();
    griddepcontrol_wait();
    // SAFETY: every thread of a REDUCE_BLOCK_THREADS-thread block, b < B, after the wait; the
    // launch's REDUCE_BLOCK_SMEM bytes of dynamic shared memory.
    unsafe { reduce_row_block::<true, EXACT>(&p, b, tid, mov_u32_dynamic_smem()) }
}
