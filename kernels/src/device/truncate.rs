//! Top-k, top-p and min-p (issue 13): the truncation step after a fused truncation launch, and its
//! exact fallback. The certificate and the walk are the no_std core's ([`crate::truncate`]).
//!
//! 1. The fused kernel's [`Epilogue::Truncate`](crate::config::Epilogue::Truncate) instantiation
//!    samples as usual (the plain winner, the log-masses) and writes each lane's top list per
//!    (row, vocab range, unit).
//! 2. [`truncate_rows`]: per sample row, the lists' entries above the largest bound `β` are the row's
//!    exact sorted prefix down to `β`; [`KeptWalk`] takes them largest first until the threshold is
//!    proven, then the row samples within its kept set with the plain pass's scores (a kept plain
//!    winner wins again) and its log-probabilities are renormalized over the kept set. A row the
//!    walk cannot decide is listed for the fallback.
//! 3. [`fallback_logits`] and [`fallback_sample`]: the listed rows' logits materialized, their
//!    threshold found exactly by a bitwise search over the f32 order (no sort), and the row sampled
//!    with the same noise. Also the benchmark's unfused top-k / top-p sampler over GEMM logits.
//!
//! # Thread mapping
//! - `truncate_rows`: `grid = B` blocks of [`TRUNCATE_THREADS`] (= 256) threads, one per sample row;
//!   thread `t` merges units `t, t + 256, …` into a list of [`THREAD_LIST`] entries, lane `l` of warp
//!   0 the lists of threads `l, l + 32, …` into one of [`LANE_LIST`], and warp 0 walks; the lists and
//!   the prefix ([`MAX_KEPT`] × 16 bytes) live in [`TRUNCATE_SMEM`] bytes of dynamic shared memory.
//! - `fallback_logits`: `grid = ceil(V / 64)` blocks of [`FALLBACK_LOGITS_THREADS`] (= 256); per
//!   group of 8 listed rows, warp `w` computes vocab rows `64·block + w, + 8, …` ([`warp_dots`]:
//!   each weight chunk read once for the group).
//! - `fallback_sample`: `grid = B` blocks of [`FALLBACK_SAMPLE_THREADS`] (= 512), block `s` takes the
//!   `s`-th listed row (none: it returns); thread `t` takes vocab entries `t, t + 512, …` (and Philox
//!   groups likewise); [`FALLBACK_SAMPLE_SMEM`] bytes of dynamic shared memory for the block
//!   reductions and the radix histograms.

use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use super::dot::{warp_dot, warp_dots};
use super::fragment::exp;
use super::ptx::{
    atom_global_add_u32, bar_warp_sync, ld_shared_u64, ld_shared_v2_u32, ld_shared_v4_u32, mov_u32_dynamic_smem,
    red_shared_add_u64, shfl_sync_bfly_b32, st_shared_u64, st_shared_v2_u32, st_shared_v4_u32,
};
use super::reduce::{AdjRows, ln, merge_butterfly};
use crate::INVALID_INDEX;
use crate::candidate::Candidate;
#[cfg(doc)]
use crate::config::FALLBACK_LOGITS_THREADS;
use crate::config::{
    FALLBACK_LOGITS_ROWS, FALLBACK_SAMPLE_SMEM, FALLBACK_SAMPLE_THREADS, TRUNCATE_SMEM, TRUNCATE_THREADS,
};
use crate::logits::softcap;
use crate::params::{FallbackParams, TruncateParams};
use crate::truncate::{KeptWalk, MAX_KEPT, Step, TopList};

/// Entries of each thread's list in [`truncate_rows`] (phase 1).
pub const THREAD_LIST: usize = 8;
/// Entries of each lane's list of the walking warp (phase 2).
pub const LANE_LIST: usize = 16;
/// Bytes of one thread's list in shared memory: `THREAD_LIST` values, `THREAD_LIST` indices, the
/// bound, padding to 16 bytes.
const LIST_BYTES: u32 = 16 * (2 * THREAD_LIST as u32 / 4 + 1);
const _: () = assert!(TRUNCATE_SMEM == TRUNCATE_THREADS * LIST_BYTES + 16 * MAX_KEPT as u32);

/// The warp's maximum of `x` (every lane gets it).
///
/// # Safety
/// All 32 lanes call it together.
#[inline(always)]
unsafe fn warp_max(mut x: f32) -> f32 {
    for m in [1u32, 2, 4, 8, 16] {
        // SAFETY: all 32 lanes (the caller's contract).
        let o = f32::from_bits(unsafe { shfl_sync_bfly_b32(x.to_bits(), m) });
        if o > x {
            x = o;
        }
    }
    x
}

/// The truncation step: one block per sample row (see the module).
///
/// 1. Every thread merges units `t, t + T, …` of the row (and its adjusted tokens, exact entries)
///    into a list of [`THREAD_LIST`] entries and stores it in shared memory.
/// 2. Lane `l` of warp 0 merges the lists of threads `l, l + 32, …` into one of [`LANE_LIST`].
/// 3. Warp 0 walks the row's sorted prefix: each round the lanes' heads above `β` (the largest
///    bound) are merged by shuffles, and [`KeptWalk`] decides.
///
/// # Safety
/// Launched as documented in the module after the fused truncation launch on the same stream, with
/// buffers of the sizes [`TruncateParams`] states and `fallback[0] == 0`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn truncate_rows(p: TruncateParams) {
    // SAFETY: special-register reads.
    let (tid, b) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let lane = tid % 32;
    if b >= p.b {
        return; // block-uniform
    }
    let n = p.samples.max(1);
    // SAFETY: b < B; the truncation holds B / n entries; the outputs B.
    let (row, trunc, token, lse) = unsafe {
        (
            *p.rows.add(b as usize),
            *p.truncation.add((b / n) as usize),
            *p.tokens.add(b as usize),
            *p.logsumexp.add(b as usize),
        )
    };
    let transform = row.transform;
    // SAFETY: b < B.
    let flag = unsafe { p.flags.add(b as usize) };
    if transform.is_greedy() || trunc.is_off(p.v) || token == INVALID_INDEX {
        // Greedy rows, rows that keep everything and rows without a token: the plain sample stands.
        if tid == 0 {
            // SAFETY: see above.
            unsafe { *flag = 0 };
        }
        return; // block-uniform
    }
    // 1. The thread's list over units tid, tid + T, … (two loads in flight), and adjusted tokens.
    let mut list = TopList::<THREAD_LIST>::EMPTY;
    // SAFETY: row b's units are inside `tops`.
    let units = unsafe { p.tops.add(b as usize * p.units as usize) };
    let mut u = tid;
    while u + TRUNCATE_THREADS < p.units {
        // SAFETY: u, u + T < units.
        let (x, y) = unsafe { (*units.add(u as usize), *units.add((u + TRUNCATE_THREADS) as usize)) };
        list.merge(&x.list);
        list.merge(&y.list);
        u += 2 * TRUNCATE_THREADS;
    }
    if u < p.units {
        // SAFETY: u < units.
        list.merge(unsafe { &(*units.add(u as usize)).list });
    }
    // SAFETY: b < B; the offsets and results hold the launch's adjustments (or are null).
    let adj = unsafe { AdjRows::from_parts(p.adj_offsets, p.adjusted, p.samples, b) };
    let mut i = adj.range().start + tid;
    while i < adj.range().end {
        let a = adj.get(i);
        if a.token != INVALID_INDEX {
            list.update(a.z, a.token);
        }
        i += TRUNCATE_THREADS;
    }
    let lists = mov_u32_dynamic_smem();
    let mine = lists + tid * LIST_BYTES;
    // SAFETY: this thread's slot of the lists area (TRUNCATE_THREADS × LIST_BYTES bytes).
    unsafe {
        for q in 0..THREAD_LIST / 4 {
            let z = [list.z[4 * q], list.z[4 * q + 1], list.z[4 * q + 2], list.z[4 * q + 3]];
            st_shared_v4_u32(mine + 16 * q as u32, z.map(f32::to_bits));
            let i = [list.index[4 * q], list.index[4 * q + 1], list.index[4 * q + 2], list.index[4 * q + 3]];
            st_shared_v4_u32(mine + 16 * (THREAD_LIST / 4 + q) as u32, i);
        }
        st_shared_v4_u32(mine + 16 * (THREAD_LIST / 2) as u32, [list.bound.to_bits(), 0, 0, 0]);
        _syncthreads();
    }
    if tid >= 32 {
        return; // warp-uniform: warp 0 walks
    }
    // 2. Lane l merges the lists of threads l, l + 32, ….
    let mut list = TopList::<LANE_LIST>::EMPTY;
    let mut t = lane;
    while t < TRUNCATE_THREADS {
        let at = lists + t * LIST_BYTES;
        let mut other = TopList::<THREAD_LIST>::EMPTY;
        // SAFETY: thread t's slot, stored before the barrier.
        unsafe {
            for q in 0..THREAD_LIST / 4 {
                let z = ld_shared_v4_u32(at + 16 * q as u32);
                let i = ld_shared_v4_u32(at + 16 * (THREAD_LIST / 4 + q) as u32);
                for j in 0..4 {
                    other.z[4 * q + j] = f32::from_bits(z[j]);
                    other.index[4 * q + j] = i[j];
                }
            }
            other.bound = f32::from_bits(ld_shared_v4_u32(at + 16 * (THREAD_LIST / 2) as u32)[0]);
        }
        list.merge(&other);
        t += 32;
    }
    // SAFETY: all 32 lanes of warp 0.
    let beta = unsafe { warp_max(list.bound) };
    // 3. The walk; the prefix lives after the lists.
    let smem = lists + TRUNCATE_THREADS * LIST_BYTES;
    // SAFETY (for the closure): j < count ≤ MAX_KEPT entries of the prefix, written below and made
    // visible by the warp barrier.
    let prefix = |j: u32| {
        let w = unsafe { ld_shared_v4_u32(smem + 16 * j) };
        (f32::from_bits(w[0]), f32::from_bits(w[2]))
    };
    let inv_t = transform.inv_temperature;
    let mut walk = KeptWalk::new(trunc, inv_t, lse, p.v);
    let outcome = loop {
        let head =
            if list.z[0] > beta { Candidate { score: list.z[0], index: list.index[0] } } else { Candidate::EMPTY };
        // SAFETY: all 32 lanes (the loop is warp-uniform: every lane sees the same merged head).
        let best = unsafe { merge_butterfly(head, [1, 2, 4, 8, 16]) };
        let exhausted = !(best.score > beta);
        let z = if exhausted { beta } else { best.score };
        match walk.next(z, exhausted, exp, prefix) {
            Step::More => {
                if lane == 0 {
                    let at = smem + 16 * (walk.count() - 1);
                    // SAFETY: count ≤ MAX_KEPT: inside this warp's prefix.
                    unsafe { st_shared_v4_u32(at, [z.to_bits(), best.index, walk.mass().to_bits(), 0]) };
                }
                bar_warp_sync();
                if head.index == best.index {
                    list.pop();
                }
            }
            done => break done,
        }
    };
    match outcome {
        Step::Kept { count, mass } => {
            // The sample within the kept prefix, with the plain pass's scores.
            let noise = row.noise();
            let mut c = Candidate::EMPTY;
            let mut j = lane;
            while j < count {
                // SAFETY: j < count.
                let w = unsafe { ld_shared_v4_u32(smem + 16 * j) };
                c.update(transform.score(f32::from_bits(w[0]), noise.gumbel_at(w[1])), w[1]);
                j += 32;
            }
            // SAFETY: all 32 lanes.
            let c = unsafe { merge_butterfly(c, [1, 2, 4, 8, 16]) };
            let mut zt = f32::NEG_INFINITY;
            let mut j = lane;
            while j < count {
                // SAFETY: j < count.
                let w = unsafe { ld_shared_v4_u32(smem + 16 * j) };
                if w[1] == c.index {
                    zt = f32::from_bits(w[0]);
                }
                j += 32;
            }
            // SAFETY: all 32 lanes.
            let zt = unsafe { warp_max(zt) };
            if lane == 0 {
                let lse_kept = lse + ln(mass);
                // SAFETY: b < B: the outputs hold entry b.
                unsafe {
                    *p.tokens.add(b as usize) = c.token();
                    *p.scores.add(b as usize) = c.score;
                    *p.logprobs.add(b as usize) = zt * inv_t - lse_kept;
                    *p.logsumexp.add(b as usize) = lse_kept;
                    *flag = 0;
                }
            }
            if c.index != token {
                // A new token: its raw log-probability from its recomputed logit.
                let d = p.d as usize;
                // SAFETY: all 32 lanes (`c` is warp-uniform); row b of the hidden states and row
                // `c.index < V` of the weight hold D elements, 16-byte aligned.
                let y = unsafe {
                    warp_dot(p.hidden.add(b as usize * d), p.weight.add(c.index as usize * d), d, lane, p.elem)
                };
                if lane == 0 {
                    // SAFETY: b < B.
                    unsafe { *p.raw_logprobs.add(b as usize) = y - *p.raw_logsumexp.add(b as usize) };
                }
            }
        }
        _ => {
            if lane == 0 {
                // SAFETY: the list holds B + 1 words; at most B rows are listed.
                unsafe {
                    *flag = 1;
                    let slot = atom_global_add_u32(p.fallback, 1);
                    *p.fallback.add(1 + slot as usize) = b;
                }
            }
        }
    }
}

/// The fallback's raw logits: `logits[s, v]` for every listed row `s` (see the module).
///
/// # Safety
/// Launched as documented in the module after [`truncate_rows`] on the same stream; `logits` holds
/// `count · V` floats.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fallback_logits(p: FallbackParams) {
    // SAFETY: the list's count, written by the truncation step before this launch.
    let count = unsafe { *p.list };
    if count == 0 {
        return; // block-uniform
    }
    // SAFETY: special-register reads.
    let (tid, blk) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let (lane, warp) = (tid % 32, tid / 32);
    let first = blk * FALLBACK_LOGITS_ROWS;
    let end = (first + FALLBACK_LOGITS_ROWS).min(p.v);
    let d = p.d as usize;
    // Listed rows in groups of 8: each weight chunk is read once per group.
    let mut s0 = 0;
    while s0 < count {
        let rows = (count - s0).min(8) as usize;
        let mut hidden = [p.hidden; 8];
        for (j, h) in hidden.iter_mut().enumerate().take(rows) {
            // SAFETY: s0 + j < count ≤ B: a listed row below B, whose hidden row holds D elements.
            *h = unsafe { p.hidden.add(*p.list.add(1 + s0 as usize + j) as usize * d) };
        }
        let mut v = first + warp;
        while v < end {
            // SAFETY: all 32 lanes (warp-uniform loop); the listed hidden rows and weight row v < V
            // hold D elements, 16-byte aligned.
            let y = unsafe { warp_dots::<8>(hidden, rows, p.weight.add(v as usize * d), d, lane, p.elem) };
            if lane == 0 {
                for (j, &yj) in y.iter().enumerate().take(rows) {
                    // SAFETY: s0 + j < count, v < V: inside `[count, V]`.
                    unsafe { *p.logits.add((s0 as usize + j) * p.v as usize + v as usize) = yj };
                }
            }
            v += 8;
        }
        s0 += 8;
    }
}

const T: u32 = FALLBACK_SAMPLE_THREADS;
const WARPS: u32 = T / 32;

/// The block's sum of `x` (every thread gets it): integers, so the order does not matter.
///
/// # Safety
/// Every thread of a [`FALLBACK_SAMPLE_THREADS`]-thread block calls it together; the block's dynamic
/// shared memory holds [`FALLBACK_SAMPLE_SMEM`] bytes.
#[inline(always)]
unsafe fn block_sum_u64(mut x: u64, tid: u32) -> u64 {
    for m in [1u32, 2, 4, 8, 16] {
        // SAFETY: all lanes (the caller's contract).
        let (lo, hi) = unsafe { (shfl_sync_bfly_b32(x as u32, m), shfl_sync_bfly_b32((x >> 32) as u32, m)) };
        x += (hi as u64) << 32 | lo as u64;
    }
    let base = mov_u32_dynamic_smem();
    // SAFETY: block-uniform barriers; WARPS slots of 8 bytes.
    unsafe {
        _syncthreads();
        if tid % 32 == 0 {
            st_shared_u64(base + 8 * (tid / 32), x);
        }
        _syncthreads();
        let mut total = 0u64;
        for w in 0..WARPS {
            total += ld_shared_u64(base + 8 * w);
        }
        total
    }
}

/// The block's maximum of `x` (every thread gets it).
///
/// # Safety
/// As [`block_sum_u64`].
#[inline(always)]
unsafe fn block_max(x: f32, tid: u32) -> f32 {
    // SAFETY: all lanes.
    let x = unsafe { warp_max(x) };
    let base = mov_u32_dynamic_smem();
    // SAFETY: as in `block_sum_u64`.
    unsafe {
        _syncthreads();
        if tid % 32 == 0 {
            st_shared_v2_u32(base + 8 * (tid / 32), [x.to_bits(), 0]);
        }
        _syncthreads();
        let mut m = f32::NEG_INFINITY;
        for w in 0..WARPS {
            let y = f32::from_bits(ld_shared_v2_u32(base + 8 * w)[0]);
            if y > m {
                m = y;
            }
        }
        m
    }
}

/// The block's best candidate (every thread gets it).
///
/// # Safety
/// As [`block_sum_u64`].
#[inline(always)]
unsafe fn block_best(c: Candidate, tid: u32) -> Candidate {
    // SAFETY: all lanes.
    let c = unsafe { merge_butterfly(c, [1, 2, 4, 8, 16]) };
    let base = mov_u32_dynamic_smem();
    // SAFETY: as in `block_sum_u64`.
    unsafe {
        _syncthreads();
        if tid % 32 == 0 {
            st_shared_v2_u32(base + 8 * (tid / 32), [c.score.to_bits(), c.index]);
        }
        _syncthreads();
        let mut best = Candidate::EMPTY;
        for w in 0..WARPS {
            let [s, i] = ld_shared_v2_u32(base + 8 * w);
            best = best.merge(Candidate { score: f32::from_bits(s), index: i });
        }
        best
    }
}

/// The f32 order as a u32 order (for values that are not NaN).
#[inline(always)]
fn key(x: f32) -> u32 {
    let u = x.to_bits();
    if u >> 31 != 0 { !u } else { u | 0x8000_0000 }
}

/// Calls `f(i, x)` for this thread's entries `x = z[i]` of a row of `v` (16-byte loads, two in
/// flight, when `v % 4 == 0`).
///
/// # Safety
/// `z` holds `v` floats (16-byte aligned when `v % 4 == 0`).
#[inline(always)]
unsafe fn for_each(z: *const f32, v: u32, tid: u32, mut f: impl FnMut(u32, f32)) {
    if v % 4 == 0 {
        let groups = v / 4;
        let mut g = tid;
        while g < groups {
            let g2 = g + T;
            // SAFETY: g < V / 4 (and g2 when below): 16 bytes inside the row, 16-byte aligned.
            let a = unsafe { *(z.add(4 * g as usize) as *const [f32; 4]) };
            let b = if g2 < groups { unsafe { *(z.add(4 * g2 as usize) as *const [f32; 4]) } } else { [0.0; 4] };
            for j in 0..4 {
                f(4 * g + j as u32, a[j]);
            }
            if g2 < groups {
                for j in 0..4 {
                    f(4 * g2 + j as u32, b[j]);
                }
            }
            g += 2 * T;
        }
    } else {
        let mut i = tid;
        while i < v {
            // SAFETY: i < V.
            f(i, unsafe { *z.add(i as usize) });
            i += T;
        }
    }
}

/// The largest key `t ≥ floor` whose live tokens at or above it (and at or above `floor`) weigh at
/// least `target` (`weight` of each; 0 when none does): a radix select over the f32 order, 8 bits a
/// pass, histograms with integer shared-memory atomics (so the result does not depend on timing).
///
/// # Safety
/// As [`block_sum_u64`]; `z` as [`for_each`].
#[inline(always)]
unsafe fn radix_select(z: *const f32, v: u32, tid: u32, floor: u32, target: u64, weight: impl Fn(f32) -> u64) -> u32 {
    // One histogram per warp (`WARPS × 256` bins after the reduction slots): the logits of a row
    // share their high key bits, so one shared histogram would serialize every thread on a few bins.
    let hist = mov_u32_dynamic_smem() + 32 * 8;
    let mine = hist + (tid / 32) * 256 * 8;
    let mut prefix = 0u32;
    let mut above = 0u64;
    for level in 0..4u32 {
        let shift = 24 - 8 * level;
        // SAFETY: block-uniform barriers; the bins are inside the histogram area.
        unsafe {
            let mut d = tid;
            while d < WARPS * 256 {
                st_shared_u64(hist + 8 * d, 0);
                d += T;
            }
            _syncthreads();
            for_each(z, v, tid, |_, x| {
                if x > f32::NEG_INFINITY {
                    let k = key(x);
                    let same_high = level == 0 || (k >> (shift + 8)) == (prefix >> (shift + 8));
                    if k >= floor && same_high {
                        red_shared_add_u64(mine + 8 * ((k >> shift) & 0xFF), weight(x));
                    }
                }
            });
            _syncthreads();
            // Bin d of the block: the sum over the warps' histograms, into warp 0's.
            let mut d = tid;
            while d < 256 {
                let mut total = 0u64;
                for w in 0..WARPS {
                    total += ld_shared_u64(hist + 8 * (w * 256 + d));
                }
                st_shared_u64(hist + 8 * d, total);
                d += T;
            }
            _syncthreads();
            // Every thread scans the same bins from the top: the same digit everywhere.
            let mut d = 255u32;
            let mut acc = above;
            loop {
                let h = ld_shared_u64(hist + 8 * d);
                if acc + h >= target || d == 0 {
                    break;
                }
                acc += h;
                d -= 1;
            }
            prefix |= d << shift;
            above = acc;
            _syncthreads();
        }
    }
    prefix
}

/// Fixed-point scale of the fallback's probabilities (`2^40`): integer sums, exact and
/// order-independent, far below `u64::MAX` for any vocabulary.
const FIXED: f32 = (1u64 << 40) as f32;

/// The fallback's sampler: one block per listed row (see the module). Turns the row's raw logits
/// into processed ones in place (soft-cap, mask, adjusted tokens), finds top-k's threshold (the
/// largest key with at least `k` tokens at or above it) and top-p's (the largest key whose tokens at
/// or above it hold `p` of the top-k mass) by radix selects over the f32 order (no sort), applies
/// min-p, and samples the kept tokens with the row's noise.
///
/// # Safety
/// Launched as documented in the module after `fallback_logits` (or a GEMM into `logits`), with
/// buffers of the sizes [`FallbackParams`] states and [`FALLBACK_SAMPLE_SMEM`] bytes of dynamic
/// shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fallback_sample(p: FallbackParams) {
    // SAFETY: special-register reads; the list's count.
    let (tid, s, count) = unsafe { (_thread_idx_x(), _block_idx_x(), *p.list) };
    if s >= count {
        return; // block-uniform
    }
    let n = p.samples.max(1);
    let v = p.v;
    // SAFETY: s < count ≤ B: a listed row b < B; the truncation holds B / n entries.
    let (b, row) = unsafe {
        let b = *p.list.add(1 + s as usize);
        (b, *p.rows.add(b as usize))
    };
    // SAFETY: as above.
    let trunc = unsafe { *p.truncation.add((b / n) as usize) };
    // SAFETY: slot s of `[count, V]`.
    let z = unsafe { p.logits.add(s as usize * v as usize) };
    if p.softcap > 0.0 || !p.mask.is_null() {
        let mut i = tid;
        while i < v {
            // SAFETY: i < V; the mask row `request` holds mask_words words (i / 32 < mask_words).
            unsafe {
                let mut x = *z.add(i as usize);
                if p.softcap > 0.0 {
                    x = softcap(x, p.softcap);
                }
                if !p.mask.is_null() {
                    let w = *p.mask.add(row.request as usize * p.mask_words as usize + (i / 32) as usize);
                    if (w >> (i % 32)) & 1 == 0 {
                        x = f32::NEG_INFINITY;
                    }
                }
                *z.add(i as usize) = x;
            }
            i += T;
        }
    }
    // SAFETY: block-uniform barrier (global writes of the block visible to it after it).
    unsafe { _syncthreads() };
    // SAFETY: b < B; the offsets and results hold the launch's adjustments (or are null).
    let adj = unsafe { AdjRows::from_parts(p.adj_offsets, p.adjusted, p.samples, b) };
    let mut i = adj.range().start + tid;
    while i < adj.range().end {
        let a = adj.get(i);
        if a.token < v {
            // SAFETY: a.token < V. Distinct entries of a row have distinct tokens (validated).
            unsafe { *z.add(a.token as usize) = a.z };
        }
        i += T;
    }
    // SAFETY: block-uniform barrier.
    unsafe { _syncthreads() };
    // The row's largest processed logit.
    let mut m = f32::NEG_INFINITY;
    // SAFETY: z holds V floats.
    unsafe {
        for_each(z, v, tid, |_, x| {
            if x > m {
                m = x;
            }
        })
    };
    // SAFETY: every thread (the reductions below are reached by all).
    let zmax = unsafe { block_max(m, tid) };
    let transform = row.transform;
    let inv_t = transform.inv_temperature;
    let e = |x: f32| exp((x - zmax) * inv_t);
    let fixed = |x: f32| (e(x) * FIXED) as u64;
    let live = |x: f32| x > f32::NEG_INFINITY;
    // Top-k: the k-th largest key (everything when fewer than k tokens are live).
    let tk = if trunc.top_k > 0 && trunc.top_k < v {
        // SAFETY: every thread; z as above.
        unsafe { radix_select(z, v, tid, 0, trunc.top_k as u64, |_| 1) }
    } else {
        0
    };
    // Top-p on the top-k remainder: the largest key whose tokens at or above it hold p of its mass.
    let mut tp = tk;
    if trunc.top_p < 1.0 {
        let mut mk = 0u64;
        // SAFETY: z as above.
        unsafe {
            for_each(z, v, tid, |_, x| {
                if live(x) && key(x) >= tk {
                    mk += fixed(x);
                }
            })
        };
        // SAFETY: every thread.
        let mk = unsafe { block_sum_u64(mk, tid) };
        let want = trunc.top_p as f64 * mk as f64;
        let mut target = want as u64;
        if (target as f64) < want {
            target += 1;
        }
        // SAFETY: every thread; z as above.
        tp = unsafe { radix_select(z, v, tid, tk, target, fixed) }.max(tk);
    }
    let keeps = |x: f32| live(x) && key(x) >= tp && (!(trunc.min_p > 0.0) || e(x) >= trunc.min_p);
    // The sample over the kept tokens, four per Philox call.
    let noise = row.noise();
    let mut c = Candidate::EMPTY;
    let mut mass = 0u64;
    let mut g = tid;
    while 4 * g < v {
        let gum = noise.gumbel4(g);
        for j in 0..4u32 {
            let i = 4 * g + j;
            if i < v {
                // SAFETY: i < V.
                let x = unsafe { *z.add(i as usize) };
                if keeps(x) {
                    c.update(transform.score(x, gum[j as usize]), i);
                    mass += fixed(x);
                }
            }
        }
        g += T;
    }
    // SAFETY: every thread.
    let (c, mass) = unsafe { (block_best(c, tid), block_sum_u64(mass, tid)) };
    if tid == 0 {
        // SAFETY: b < B: the outputs hold entry b; c.index < V when valid.
        unsafe {
            *p.tokens.add(b as usize) = c.token();
            *p.scores.add(b as usize) = c.score;
            if !p.logprobs.is_null() {
                let lse_kept = zmax * inv_t + ln(mass as f32 / FIXED);
                let valid = c.token() != INVALID_INDEX;
                *p.logprobs.add(b as usize) =
                    if valid { *z.add(c.index as usize) * inv_t - lse_kept } else { f32::NAN };
                *p.logsumexp.add(b as usize) = lse_kept;
            }
        }
    }
    if !p.raw_logprobs.is_null() && tid < 32 && c.token() != INVALID_INDEX {
        let d = p.d as usize;
        // SAFETY: warp 0, all 32 lanes (`c` is block-uniform); row b of the hidden states and row
        // c.index < V of the weight hold D elements, 16-byte aligned.
        let y = unsafe { warp_dot(p.hidden.add(b as usize * d), p.weight.add(c.index as usize * d), d, tid, p.elem) };
        if tid == 0 {
            // SAFETY: b < B.
            unsafe { *p.raw_logprobs.add(b as usize) = y - *p.raw_logsumexp.add(b as usize) };
        }
    }
}
