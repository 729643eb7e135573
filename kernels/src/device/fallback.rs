//! The exact fallback of the truncation step (see `truncate`): the listed rows' hidden states
//! gathered ([`fallback_gather`], over ranks), their logits materialized on the tensor cores
//! (`fallback_logits`, an entry of the portable `mma.sync` family: `fused/mma_sync.rs`), and each
//! row processed, truncated exactly and sampled with its own noise ([`fallback_sample`]). Also the
//! benchmark's unfused top-k / top-p sampler over GEMM logits, and the exact log-sum-exp path's
//! truncating calls ([`fallback_sample_exact`]: every row through the fallback).
//!
//! # Thread mapping
//! - `fallback_gather`: one thread per 16-byte chunk of `B` rows; slot `s < count` copies row
//!   `list[1 + s]`'s hidden state to slot `s` of `gathered`.
//! - `fallback_logits`: the portable `mma.sync` kernel's grid and thread mapping for
//!   [`FALLBACK_LOGITS_VARIANT`] (`n_vranges · ceil(B / 64)` persistent blocks of 256 threads, 64
//!   gathered rows per batch tile); blocks whose batch tile starts at or past the list's count
//!   return at once; the lanes store their logits instead of sampling them.
//! - `fallback_sample`: `grid = B` blocks of [`FALLBACK_SAMPLE_THREADS`] (= 512), block `s` takes the
//!   `s`-th listed row (none: it returns); thread `t` takes vocab entries `t, t + 512, …` (and Philox
//!   groups likewise); [`FALLBACK_SAMPLE_SMEM`] bytes of dynamic shared memory for the block
//!   reductions and the radix histograms. `fallback_sample_scored` and `fallback_sample_exact` alike
//!   (the latter's block `s` takes row `s`).

use core::arch::nvptx::{_block_dim_x, _block_idx_x, _syncthreads, _thread_idx_x};

use super::collective::{block_best, block_exact_mass, block_max, block_sum_u64, exp, ln};
use super::dot::{block_dot, warp_dot};
use super::ptx::{
    ex2_approx_ftz_f32, griddepcontrol_launch_dependents, griddepcontrol_wait, lg2_approx_f32, mov_u32_dynamic_smem,
};
use super::reduce::AdjRows;
use crate::INVALID_INDEX;
use crate::candidate::Candidate;
use crate::config::REDUCE_BLOCK_THREADS;
use crate::epilogue::Transform;
use crate::exactmass::ExactMass;
use crate::logits::LogitPipeline;
use crate::logmass::{log_prob, target_log_probs, token_log_probs};
use crate::params::{FALLBACK_KEEPS_SAMPLE, FALLBACK_ROW, FALLBACK_TOP, FallbackParams, RowParams, TopSource};
use crate::truncate::Truncation;

use super::select::{T, WARPS, count_select, for_each, key, radix_select, select_top};
use super::truncate::{top_entry, write_top};

/// The listed rows' hidden states into [`FallbackParams::gathered`] (slot `s` ← row `list[1 + s]`),
/// one 16-byte chunk per thread, for `fallback_logits`.
///
/// # Safety
/// Launched as documented in the module after [`truncate_rows`] on the same stream; `gathered` and
/// `hidden` hold `B × D` elements, 16-byte aligned, `D % 8 == 0`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fallback_gather(p: FallbackParams) {
    // Programmatic stream serialization: `fallback_logits` may be scheduled; wait for the truncation step.
    griddepcontrol_launch_dependents();
    griddepcontrol_wait();
    // SAFETY: the list's count, written by the truncation step before this launch; special registers.
    let (count, i) = unsafe { (*p.list, _block_idx_x() as u64 * _block_dim_x() as u64 + _thread_idx_x() as u64) };
    let chunks = p.d as u64 / 8;
    let (slot, chunk) = (i / chunks, i % chunks);
    if slot < count as u64 {
        // SAFETY: slot < count ≤ B: a listed row below B; both rows hold D / 8 chunks of 16 bytes.
        unsafe {
            let row = (*p.list.add(1 + slot as usize) & FALLBACK_ROW) as u64;
            *(p.gathered as *mut [u32; 4]).add((slot * chunks + chunk) as usize) =
                *(p.hidden as *const [u32; 4]).add((row * chunks + chunk) as usize);
        }
    }
}

/// Fixed-point scale of the fallback's probabilities (`2^40`): integer sums, exact and
/// order-independent, far below `u64::MAX` for any vocabulary.
const FIXED: f32 = (1u64 << 40) as f32;

/// The fallback's sampler: one block per listed row (see the module). Turns the row's raw logits
/// into processed ones in place (the logit pipeline, then its adjusted tokens), finds its kept set in vLLM's order
/// ([`KeptCut::find`]: min-p, then top-k's and top-p's thresholds by radix selects over the f32
/// order, no sort), samples the kept tokens with the row's noise ([`sample_row`]) and writes the
/// row's outputs ([`write_row`]); a listed row that keeps its sample only gets its top entries.
///
/// # Safety
/// Launched as documented in the module after `fallback_logits` (or a GEMM into `logits`), with
/// buffers of the sizes [`FallbackParams`] states and [`FALLBACK_SAMPLE_SMEM`] bytes of dynamic
/// shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fallback_sample(p: FallbackParams) {
    // SAFETY: the caller's contract, the same as the body's.
    unsafe { sample_listed::<false>(p) };
}

/// [`fallback_sample`] for a call that scores given tokens ([`FallbackParams::targets`],
/// non-null): a listed row that it samples also scores its given token over the kept set it finds
/// (`z / T − lse_kept` with the row's processed logit, the arithmetic of its sampled token's, or
/// `−∞` where the cut removes it), and takes its sample's raw log-probability when the token is
/// that sample. A token at or past V keeps the reduction's NaN. With ranks
/// ([`FallbackParams::target_ranks`], non-null) every listed row also ranks its given token over
/// its whole row ([`rank_listed`]: the raw logits before the body processes them in place, or the
/// processed ones after it): the truncation step lists the rows whose rank its sorted prefix
/// cannot decide.
///
/// # Safety
/// As [`fallback_sample`], and `targets` and their outputs (`target_ranks` too, when not null)
/// hold B entries.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fallback_sample_scored(p: FallbackParams) {
    // Nothing is read before `fallback_logits` is done (the body's wait, again, is then a no-op).
    griddepcontrol_wait();
    // The raw rank before the body processes the row in place, the processed one after it with the
    // row's cut. (No branch here: around the body, one would have it inlined twice.)
    // SAFETY: the caller's contract; every thread of the block.
    unsafe { rank_listed::<false>(&p, true, None) };
    // SAFETY: the caller's contract, the same as the body's.
    let cut = unsafe { sample_listed::<true>(p) };
    // SAFETY: as above; the body processed the row's logits in place and found its cut (when it
    // returns one).
    unsafe { rank_listed::<false>(&p, false, cut) };
}

/// The exact log-sum-exp path's truncating call (issue 52; `SamplingParams::exact_logsumexp` with
/// top-k / top-p / min-p or top log-probabilities): every sample row is a slot of its own (slot `s`
/// is row `s`; `list` holds only the count, `B`), its raw logits written by `fallback_logits`, and
/// [`fallback_sample_scored`]'s work done with the exact path's arithmetic ([`sample_exact`]): the
/// raw and the kept set's log-sum-exps are [`ExactMass`] sums in `exact_mass_rows`' grouping, and
/// the sampled and given tokens' logits come from `reduce_rows`' dot product, through the same
/// [`token_log_probs`] / [`target_log_probs`] — so a row whose cut keeps every token (no truncation
/// of its own, a greedy row) has the bits of the exact call without truncation, and every output is
/// a function of the row alone. Writes the raw log-sum-exps to `raw_logsumexp` (out here). Without
/// given tokens (`targets` null) it only samples.
///
/// # Safety
/// As [`fallback_sample_scored`], with `list[0]` = B (every sample row, in order) and
/// `raw_logsumexp` holding B entries to write; rows of `hidden` and `weight` as for a
/// log-probability launch (`D % 8 == 0`, 16-byte aligned).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fallback_sample_exact(p: FallbackParams) {
    griddepcontrol_wait();
    // SAFETY: as in `fallback_sample_scored`.
    unsafe { rank_listed::<true>(&p, true, None) };
    // SAFETY: the caller's contract.
    let cut = unsafe { sample_exact(&p) };
    // SAFETY: as in `fallback_sample_scored`.
    unsafe { rank_listed::<true>(&p, false, cut) };
}

/// A scoring fallback's rank of its listed row's given token (`EXACT`: of
/// [`fallback_sample_exact`]'s row) ([`FallbackParams::target_ranks`])
/// over every token of the row, in the top log-probabilities' order, when the call asks ranks and
/// `raw` is that order's (else it returns at once): with `raw`, of its raw logits (before
/// [`sample_listed`] processes them in place); else, with the row's `cut` ([`sample_listed`]'s,
/// after it; none: no rank), of its processed ones, the tokens the cut removes at `−∞` (a greedy
/// row's all kept: it does not truncate). One plus the tokens with a larger value, or an equal one
/// (or one a NaN leaves unordered) at a lower index — the CPU's `partial_cmp` order; 0 for a token
/// at or past V.
///
/// # Safety
/// Every thread of the block; the list, the rows and their logits as [`fallback_sample`] reads
/// them (the logits raw without a cut, processed in place with the row's cut); `targets` and
/// `target_ranks` hold B entries.
#[inline(never)]
unsafe fn rank_listed<const EXACT: bool>(p: &FallbackParams, raw: bool, cut: Option<KeptCut>) {
    let raw_order = p.top.source != TopSource::Processed;
    if p.target_ranks.is_null() || raw != raw_order || !raw && cut.is_none() {
        return; // block-uniform
    }
    // SAFETY: special-register reads; the list's count.
    let (tid, s, count) = unsafe { (_thread_idx_x(), _block_idx_x(), *p.list) };
    if s >= count {
        return; // block-uniform
    }
    let v = p.v;
    // SAFETY: s < count ≤ B: a listed row b < B; slot s of `[count, V]`; the targets hold entry b.
    let (b, row, z, target) = unsafe {
        // On the exact path (`fallback_sample_exact`), slot s is row s.
        let b = if EXACT { s } else { *p.list.add(1 + s as usize) & FALLBACK_ROW };
        (b, *p.rows.add(b as usize), p.logits.add(s as usize * v as usize), *p.targets.add(b as usize))
    };
    // SAFETY: block-uniform barrier: the body's writes of the logits and its shared memory are done.
    unsafe { _syncthreads() };
    let cut = cut.filter(|_| !row.transform.is_greedy());
    let value = |x: f32| match cut {
        Some(c) if !c.keeps(x) => f32::NEG_INFINITY,
        _ => x,
    };
    let rank = if target < v {
        // SAFETY: target < V: inside the row.
        let x = value(unsafe { *z.add(target as usize) });
        let mut before = 0u64;
        // SAFETY: z holds V floats.
        unsafe {
            for_each(z, v, tid, |i, y| {
                let y = value(y);
                if y > x || (!(y < x) && i < target) {
                    before += 1;
                }
            })
        };
        // SAFETY: every thread (`target` is block-uniform).
        1 + unsafe { block_sum_u64::<WARPS>(before, tid) } as u32
    } else {
        0
    };
    // SAFETY: b < B; block-uniform barrier: every read of the logits and the reduction's slots is
    // done before the body processes the row in place (`raw`) or the block ends.
    unsafe {
        if tid == 0 {
            *p.target_ranks.add(b as usize) = rank;
        }
        _syncthreads();
    }
}

/// The body of [`fallback_sample`] (`SCORE`: [`fallback_sample_scored`]).
///
/// # Safety
/// As [`fallback_sample`] (with `SCORE`, as [`fallback_sample_scored`]).
#[inline(always)]
unsafe fn sample_listed<const SCORE: bool>(p: FallbackParams) -> Option<KeptCut> {
    // Launched with programmatic stream serialization after `fallback_logits` (or plainly after the
    // unfused sampler's GEMM): wait for it before anything is read or written.
    griddepcontrol_wait();
    // SAFETY: special-register reads; the list's count.
    let (tid, s, count) = unsafe { (_thread_idx_x(), _block_idx_x(), *p.list) };
    if s >= count {
        return None; // block-uniform
    }
    let n = p.samples.max(1);
    let v = p.v;
    // SAFETY: s < count ≤ B: a listed row b < B; the truncation holds B / n entries.
    let (entry, b, row) = unsafe {
        let entry = *p.list.add(1 + s as usize);
        let b = entry & FALLBACK_ROW;
        (entry, b, *p.rows.add(b as usize))
    };
    let keeps_sample = entry & FALLBACK_KEEPS_SAMPLE != 0;
    let (top, request) = (entry & FALLBACK_TOP != 0, b / n);
    let raw_top = top && p.top.source != TopSource::Processed;
    // SAFETY: as above.
    let trunc = unsafe { *p.truncation.add((b / n) as usize) };
    // SAFETY: slot s of `[count, V]`.
    let z = unsafe { p.logits.add(s as usize * v as usize) };
    if raw_top {
        // The raw distribution's top entries, before the row is processed in place.
        // SAFETY: every thread (`raw_top` is block-uniform); z holds V floats; b < B; the top outputs
        // hold B / n requests; j < count: a sorted entry.
        unsafe {
            let count = select_top(z, v, tid, p.top.n, |x| x > f32::NEG_INFINITY);
            let l = *p.raw_logsumexp.add(b as usize);
            write_top(&p.top, request, count, tid, |j| top_entry(j, 1.0, l));
            _syncthreads(); // every read of the logits is done before they change below
        }
        if keeps_sample {
            return None; // block-uniform
        }
    }
    // The row's raw logits turned into processed ones in place: the logit pipeline
    // (`LogitPipeline::process`: soft-cap, mask) over the row, then its adjusted tokens (masked out
    // there, like the fused pass's) take the processed logits the adjusted tokens' kernel wrote.
    if p.softcap > 0.0 || !p.mask.is_null() {
        let pipe = p.logit_pipeline();
        let mut i = tid;
        while i < v {
            // SAFETY: i < V; the mask row `request` holds mask_words words (i / 32 < mask_words).
            unsafe {
                let allowed = p.mask.is_null()
                    || (*p.mask.add(row.request as usize * p.mask_words as usize + (i / 32) as usize) >> (i % 32)) & 1
                        != 0;
                *z.add(i as usize) = pipe.process(*z.add(i as usize), None, allowed);
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
    let transform = row.transform;
    // SAFETY: every thread; z holds V processed floats.
    let cut = unsafe { KeptCut::find(z, v, tid, trunc, transform) };
    let (c, lse_kept) = if keeps_sample {
        // The row's sample stands (it is here for its top entries) and it does not truncate: its
        // log-sum-exp is the fused pass's.
        // SAFETY: b < B.
        (Candidate::EMPTY, unsafe { *p.logsumexp.add(b as usize) })
    } else {
        // SAFETY: every thread (`keeps_sample` is block-uniform); z as above.
        unsafe { sample_row(z, v, tid, row, cut) }
    };
    if top && !raw_top {
        // The processed distribution's top entries: of the kept tokens, over the kept mass.
        // SAFETY: every thread (block-uniform); z as above; the top outputs hold B / n requests;
        // j < count: a sorted entry.
        unsafe {
            let count = select_top(z, v, tid, p.top.n, |x| cut.keeps(x));
            write_top(&p.top, request, count, tid, |j| top_entry(j, transform.inv_temperature, lse_kept));
        }
    }
    if keeps_sample {
        return Some(cut); // block-uniform
    }
    // SAFETY: every thread; b < B; z as above; c is the block's sample.
    unsafe { write_row(&p, b, z, (c, lse_kept), transform, tid) };
    if SCORE && tid == 0 {
        // SAFETY: b < B: `targets` and their outputs hold entry b; a target below V is inside z;
        // thread 0 wrote the sample's raw log-probability in `write_row` (program order).
        unsafe {
            let target = *p.targets.add(b as usize);
            if target < v {
                let x = *z.add(target as usize);
                *p.target_logprobs.add(b as usize) =
                    if cut.keeps(x) { log_prob(transform.scaled(x), lse_kept) } else { f32::NEG_INFINITY };
                if target == c.token() && !p.raw_logprobs.is_null() {
                    *p.target_raw_logprobs.add(b as usize) = *p.raw_logprobs.add(b as usize);
                }
            }
        }
    }
    Some(cut)
}

/// A row's kept set, found exactly over its processed logits: every token with `x ≥ tm` (min-p)
/// and `key(x) ≥ tp` (top-k, then top-p on what min-p and top-k keep), `−∞` never.
#[derive(Clone, Copy)]
struct KeptCut {
    /// The row's largest processed logit.
    zmax: f32,
    /// Min-p's cut as a value (`−∞`: off).
    tm: f32,
    /// The key at or above which tokens are kept (top-p's threshold, at least top-k's; 0: all).
    tp: u32,
    transform: Transform,
}

impl KeptCut {
    /// The cut of a row (`z`: V processed logits; `trunc`, `transform`: its truncation and logit
    /// transform), in vLLM's order: min-p relative to the largest probability, top-k of those,
    /// top-p on their renormalized mass.
    ///
    /// # Safety
    /// Every thread of the block (its reductions); `z` holds V floats.
    #[inline(always)]
    unsafe fn find(z: *const f32, v: u32, tid: u32, trunc: Truncation, transform: Transform) -> Self {
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
        let zmax = unsafe { block_max::<WARPS>(m, tid) };
        // Relative probabilities ([`Self::e`], [`Self::fixed`]), as locals for the passes below.
        let e = |x: f32| if x == zmax { 1.0 } else { exp(transform.scaled(x - zmax)) };
        let fixed = |x: f32| (e(x) * FIXED) as u64;
        // Min-p first (vLLM's order): the live tokens with probability at least `min_p` times the
        // largest. `e` is monotone, so they are those at or above the smallest that passes (`tm`: one
        // pass here, then a compare wherever a token is tested).
        let tm = if trunc.min_p > 0.0 {
            let mut lo = f32::NEG_INFINITY; // the largest −x of the passing tokens
            // SAFETY: z holds V floats.
            unsafe {
                for_each(z, v, tid, |_, x| {
                    if x > f32::NEG_INFINITY && e(x) >= trunc.min_p && -x > lo {
                        lo = -x;
                    }
                })
            };
            // SAFETY: every thread (`min_p` is block-uniform).
            -unsafe { block_max::<WARPS>(lo, tid) }
        } else {
            f32::NEG_INFINITY
        };
        let live = |x: f32| x > f32::NEG_INFINITY && x >= tm;
        // Top-k of those: the k-th largest key (everything when fewer than k tokens are live).
        let tk = if trunc.top_k_on(v) {
            // SAFETY: every thread; z as above.
            unsafe { count_select(z, v, tid, trunc.top_k as u64, |_, x| live(x).then(|| key(x))) }
        } else {
            0
        };
        // Top-p on the min-p and top-k remainder: the largest key whose tokens at or above it hold p of
        // its mass.
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
            let mk = unsafe { block_sum_u64::<WARPS>(mk, tid) };
            let want = trunc.top_p as f64 * mk as f64;
            let mut target = want as u64;
            if (target as f64) < want {
                target += 1;
            }
            let at_least_tk = |_, x| if live(x) && key(x) >= tk { Some(key(x)) } else { None };
            // SAFETY: every thread; z as above.
            tp = unsafe { radix_select::<false>(z, v, tid, target, at_least_tk, fixed) }.max(tk);
        }
        Self { zmax, tm, tp, transform }
    }

    /// The relative probability of `x`: the largest value weighs 1 (also `+∞`, where `∞ − ∞` would
    /// be NaN: a `+∞` logit holds all the mass).
    #[inline(always)]
    fn e(&self, x: f32) -> f32 {
        if x == self.zmax { 1.0 } else { exp(self.transform.scaled(x - self.zmax)) }
    }

    /// [`Self::e`] in fixed point ([`FIXED`]).
    #[inline(always)]
    fn fixed(&self, x: f32) -> u64 {
        (self.e(x) * FIXED) as u64
    }

    /// Whether `x` passes min-p (and is not `−∞`).
    #[inline(always)]
    fn live(&self, x: f32) -> bool {
        x > f32::NEG_INFINITY && x >= self.tm
    }

    /// Whether `x` is kept.
    #[inline(always)]
    fn keeps(&self, x: f32) -> bool {
        self.live(x) && key(x) >= self.tp
    }
}

/// The sample over a row's kept tokens (four per Philox call) and the kept set's log-sum-exp.
///
/// # Safety
/// Every thread of the block (its reductions); `z` holds V processed floats.
#[inline(always)]
unsafe fn sample_row(z: *const f32, v: u32, tid: u32, row: RowParams, cut: KeptCut) -> (Candidate, f32) {
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
                if cut.keeps(x) {
                    c.update(cut.transform.score(x, gum[j as usize]), i);
                    mass += cut.fixed(x);
                }
            }
        }
        g += T;
    }
    // SAFETY: every thread.
    let (c, mass) = unsafe { (block_best::<WARPS>(c, tid), block_sum_u64::<WARPS>(mass, tid)) };
    (c, cut.transform.scaled(cut.zmax) + ln(mass as f32 / FIXED))
}

/// Row `b`'s outputs: its token and score, and with log-probabilities its processed one (over the
/// kept set's log-sum-exp `lse_kept`), that log-sum-exp, and its raw one (the sampled token's raw
/// logit, one warp's dot product, over the raw log-sum-exp; [`log_prob`]'s `+∞` rule everywhere).
///
/// # Safety
/// Every thread of the block (`c` is block-uniform); `b < B`; `z` holds V processed floats; the
/// outputs hold entry b; with raw log-probabilities, row b of the hidden states and every row
/// below V of the weight hold D elements, 16-byte aligned.
#[inline(always)]
unsafe fn write_row(
    p: &FallbackParams,
    b: u32,
    z: *const f32,
    (c, lse_kept): (Candidate, f32),
    transform: Transform,
    tid: u32,
) {
    if tid == 0 {
        // SAFETY: b < B: the outputs hold entry b; c.index < V when valid.
        unsafe {
            *p.tokens.add(b as usize) = c.token();
            *p.scores.add(b as usize) = c.score;
            if !p.logprobs.is_null() {
                let valid = c.token() != INVALID_INDEX;
                *p.logprobs.add(b as usize) =
                    if valid { log_prob(transform.scaled(*z.add(c.index as usize)), lse_kept) } else { f32::NAN };
                *p.logsumexp.add(b as usize) = lse_kept;
            }
        }
    }
    if !p.raw_logprobs.is_null() && tid < 32 && c.token() != INVALID_INDEX {
        let d = p.d as usize;
        // SAFETY: warp 0, all 32 lanes (`c` is block-uniform); row b of the hidden states and row
        // c.index < V of the weight hold D elements, 16-byte aligned; without a weight (tensor-parallel
        // ranks: no soft-cap or adjustment) the processed logit of the allowed token is its raw one.
        let y = if p.weight.is_null() {
            unsafe { *z.add(c.index as usize) }
        } else {
            unsafe { warp_dot(p.hidden.add(b as usize * d), p.weight.add(c.index as usize * d), d, tid, p.elem) }
        };
        if tid == 0 {
            // SAFETY: b < B.
            unsafe { *p.raw_logprobs.add(b as usize) = log_prob(y, *p.raw_logsumexp.add(b as usize)) };
        }
    }
}

/// [`fallback_sample_exact`]'s body for its slot `s` = row `b`: as [`sample_listed`] takes a listed
/// row that it samples (its top entries where it is its request's first sample and the call asks
/// for them), with the exact path's log-sum-exps ([`raw_exact_lse`] before the row is processed in
/// place, [`sample_row_exact`] after it) and outputs ([`write_row_exact`]); a greedy row's
/// processed top entry is its token at log-probability 0 (the truncation step's rule).
///
/// # Safety
/// As [`fallback_sample_exact`].
#[inline(always)]
unsafe fn sample_exact(p: &FallbackParams) -> Option<KeptCut> {
    // SAFETY: special-register reads; the list's count.
    let (tid, s, count) = unsafe { (_thread_idx_x(), _block_idx_x(), *p.list) };
    if s >= count {
        return None; // block-uniform
    }
    let (n, v, b) = (p.samples.max(1), p.v, s);
    let (top, request) = (p.top.n > 0 && b % n == 0, b / n);
    let raw_top = top && p.top.source != TopSource::Processed;
    // SAFETY: b < count = B: the rows hold entry b, the truncation B / n; slot s of `[B, V]`.
    let (row, trunc, z) = unsafe {
        (*p.rows.add(b as usize), *p.truncation.add(request as usize), p.logits.add(s as usize * v as usize))
    };
    // SAFETY: every thread (block-uniform); z holds V floats; `raw_logsumexp` (out here) holds entry b.
    let raw_lse = unsafe {
        let l = raw_exact_lse(z, v, tid);
        if tid == 0 {
            *(p.raw_logsumexp as *mut f32).add(b as usize) = l;
        }
        l
    };
    if raw_top {
        // SAFETY: as in `sample_listed`.
        unsafe {
            // A row with a NaN raw logit (its raw log-sum-exp NaN: block-uniform) lists none, as the
            // truncation step.
            let count = if raw_lse.is_nan() { 0 } else { select_top(z, v, tid, p.top.n, |x| x > f32::NEG_INFINITY) };
            write_top(&p.top, request, count, tid, |j| top_entry(j, 1.0, raw_lse));
            _syncthreads(); // every read of the logits is done before they change below
        }
    }
    // SAFETY: every thread; z as above; b < B.
    let adj = unsafe { process_in_place(p, z, (b, row), tid) };
    let transform = row.transform;
    // SAFETY: every thread; z holds V processed floats.
    let cut = unsafe { KeptCut::find(z, v, tid, trunc, transform) };
    // SAFETY: every thread; z as above; b < B.
    let (c, lse) = unsafe { sample_row_exact(p, z, tid, row, cut, adj) };
    if top && !raw_top {
        // SAFETY: every thread (block-uniform); z as above; the top outputs hold B / n requests; j <
        // count: a sorted entry.
        unsafe {
            if transform.is_greedy() || c.token() == INVALID_INDEX {
                // A row without a token (a NaN, or nothing allowed) lists none, as the truncation step.
                write_top(&p.top, request, (c.token() != INVALID_INDEX) as u32, tid, |_| (c.token(), 0.0));
            } else {
                let count = select_top(z, v, tid, p.top.n, |x| cut.keeps(x));
                write_top(&p.top, request, count, tid, |j| top_entry(j, transform.inv_temperature, lse));
            }
        }
    }
    // SAFETY: every thread; b < B; z as above; c is the block's sample.
    unsafe { write_row_exact(p, (b, row), z, (c, (lse, raw_lse)), cut, (tid, adj)) };
    Some(cut)
}

/// Row `b`'s raw logits `z` turned into processed ones in place, as [`sample_listed`] does: the
/// logit pipeline (soft-cap, mask) over the row, then its adjusted tokens (masked out there, like the
/// fused pass's) take their processed logits. Returns the row's adjusted tokens.
///
/// # Safety
/// Every thread of the block; `z` holds V floats of row `b` < B; the mask (non-null) holds the
/// request's words.
#[inline(always)]
unsafe fn process_in_place(p: &FallbackParams, z: *mut f32, (b, row): (u32, RowParams), tid: u32) -> AdjRows {
    let v = p.v;
    if p.softcap > 0.0 || !p.mask.is_null() {
        let pipe = p.logit_pipeline();
        let mut i = tid;
        while i < v {
            // SAFETY: i < V; the mask row `request` holds mask_words words (i / 32 < mask_words).
            unsafe {
                let allowed = p.mask.is_null()
                    || (*p.mask.add(row.request as usize * p.mask_words as usize + (i / 32) as usize) >> (i % 32)) & 1
                        != 0;
                *z.add(i as usize) = pipe.process(*z.add(i as usize), None, allowed);
            }
            i += T;
        }
    }
    // SAFETY: block-uniform barrier (global writes of the block visible to it after it); b < B: the
    // offsets and results hold the launch's adjustments (or are null).
    let adj = unsafe {
        _syncthreads();
        AdjRows::from_parts(p.adj_offsets, p.adjusted, p.samples, b)
    };
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
    adj
}

/// The exact log-sum-exp of a row's raw logits `z` ([`ExactMass`] over the Philox groups of four
/// vocab entries, `exact_mass_rows`' raw sum; every thread gets it).
///
/// # Safety
/// Every thread of the block (its reduction); `z` holds V floats.
#[inline(always)]
unsafe fn raw_exact_lse(z: *const f32, v: u32, tid: u32) -> f32 {
    let mut m = ExactMass::EMPTY;
    let mut g = tid;
    while 4 * g < v {
        // SAFETY: each read below V.
        let x: [f32; 4] = core::array::from_fn(|j| {
            if 4 * g + (j as u32) < v { unsafe { *z.add((4 * g) as usize + j) } } else { f32::NEG_INFINITY }
        });
        m.add_group(x, ex2_approx_ftz_f32);
        g += T;
    }
    // SAFETY: every thread; the barrier after it lets the callers' next reduction reuse the slots.
    unsafe {
        let m = block_exact_mass::<WARPS>(m, tid);
        _syncthreads();
        m.lse_with(lg2_approx_f32)
    }
}

/// [`sample_row`] on the exact path: the sample over the kept tokens, and their exact log-sum-exp
/// over the temperature in `exact_mass_rows`' grouping — the Philox groups of the processed logits
/// with the adjusted tokens left out (their mask bits are clear), then each kept adjusted token a
/// group of its own (its `z' / T`) — so a row whose cut keeps every token sums exactly the groups
/// of the exact path without truncation. A NaN logit competes and is summed (the row has no token,
/// its log-sum-exp is NaN, as there); a greedy row has no processed mass (`−∞`).
///
/// # Safety
/// Every thread of the block (its reductions); `z` holds V processed floats of row `row` (a row of
/// the launch's, its adjusted tokens `adj`); the mask (non-null) holds the request's words.
#[inline(always)]
unsafe fn sample_row_exact(
    p: &FallbackParams,
    z: *const f32,
    tid: u32,
    row: RowParams,
    cut: KeptCut,
    adj: AdjRows,
) -> (Candidate, f32) {
    let v = p.v;
    let noise = row.noise();
    let greedy = cut.transform.is_greedy();
    let summed = |x: f32| cut.keeps(x) || x.is_nan();
    let mut c = Candidate::EMPTY;
    let mut m = ExactMass::EMPTY;
    let mut g = tid;
    while 4 * g < v {
        // No noise where the row draws none (a greedy row: the fused pass's `+0.0`, not `g · 0`).
        let gum = if cut.transform.draws_no_noise() { [0.0; 4] } else { noise.gumbel4(g) };
        let bits = if p.mask.is_null() {
            u32::MAX
        } else {
            let i = 4 * g;
            // SAFETY: the request's mask row holds mask_words words, i / 32 < mask_words (i < V); the
            // group's four bits are in one word (i % 4 == 0).
            unsafe { *p.mask.add(row.request as usize * p.mask_words as usize + (i / 32) as usize) >> (i % 32) }
        };
        let mut group = [f32::NEG_INFINITY; 4];
        for j in 0..4u32 {
            let i = 4 * g + j;
            if i < v {
                // SAFETY: i < V.
                let x = unsafe { *z.add(i as usize) };
                // A NaN logit competes (and wins: `Candidate`'s rule, the row has no token), as in the
                // fused pass.
                if summed(x) {
                    c.update(cut.transform.score(x, gum[j as usize]), i);
                }
                if summed(x) && (bits >> j) & 1 != 0 {
                    group[j as usize] = cut.transform.scaled(x);
                }
            }
        }
        if !greedy {
            m.add_group(group, ex2_approx_ftz_f32);
        }
        g += T;
    }
    let mut i = adj.range().start + tid;
    while i < adj.range().end {
        let a = adj.get(i);
        if !greedy && a.token < v && summed(a.z) {
            let inf = f32::NEG_INFINITY;
            m.add_group([a.scaled, inf, inf, inf], ex2_approx_ftz_f32);
        }
        i += T;
    }
    // SAFETY: every thread.
    let (c, m) = unsafe { (block_best::<WARPS>(c, tid), block_exact_mass::<WARPS>(m, tid)) };
    (c, m.lse_with(lg2_approx_f32))
}

/// Row `b`'s outputs on the exact path, as `reduce_rows` writes them there: its token and score;
/// with log-probabilities the token's logit `y` (the reduction's dot product: [`block_dot`] over
/// [`REDUCE_BLOCK_THREADS`] threads), its processed logit (soft-capped, or its adjusted one) over
/// the temperature, and [`token_log_probs`] over the kept set's log-sum-exp `lse` and the raw one
/// `lse_raw`; with given tokens (`targets` not null), the given token's by [`target_log_probs`] (its logit
/// by the same dot product, `−∞` where the cut or the mask removes it, NaN outside V).
///
/// # Safety
/// Every thread of the block (`c` and the given token are block-uniform); `b < B`; `z` holds V
/// processed floats of row `b`; the outputs (and the given tokens' when not null) hold entry b; rows b of the
/// hidden states and every row below V of the weight hold D elements, 16-byte aligned.
#[inline(always)]
unsafe fn write_row_exact(
    p: &FallbackParams,
    (b, row): (u32, RowParams),
    z: *const f32,
    (c, (lse, lse_raw)): (Candidate, (f32, f32)),
    cut: KeptCut,
    (tid, adj): (u32, AdjRows),
) {
    let token = c.token();
    let valid = token != INVALID_INDEX;
    let transform = row.transform;
    let greedy = transform.is_greedy();
    let d = p.d as usize;
    let slots = mov_u32_dynamic_smem();
    // The logit of token `t` (thread 0's), as the reduction's: after a barrier, so that no thread
    // still reads the slots of the reduction before.
    let dot = |t: u32| {
        let rows = (p.hidden.wrapping_add(b as usize * d), p.weight.wrapping_add(t as usize * d));
        // SAFETY: every thread (the callers' branches are block-uniform); rows b and t < V hold D
        // elements (the caller's contract).
        unsafe {
            _syncthreads();
            block_dot(rows, d, (tid, REDUCE_BLOCK_THREADS), slots, p.elem)
        }
    };
    // The processed logit of token `t` of logit `y` over the temperature: soft-capped, masked, or
    // its adjusted logit (`reduce_rows`' order).
    let processed = |t: u32, y: f32, allowed: bool| {
        let mut z = LogitPipeline::masked(p.logit_pipeline().capped(y), allowed);
        for i in adj.range() {
            let a = adj.get(i);
            if a.token == t {
                z = a.z;
            }
        }
        transform.scaled(z)
    };
    let y = if valid && !p.logprobs.is_null() { dot(token) } else { 0.0 };
    if tid == 0 {
        let logits = if valid { (processed(token, y, true), y) } else { (f32::NAN, f32::NAN) };
        let (lp, raw, lse_out) = token_log_probs(valid, greedy, logits, (lse, lse_raw));
        // SAFETY: b < B: entry b of every output (the log-probabilities' where not null).
        unsafe {
            *p.tokens.add(b as usize) = token;
            *p.scores.add(b as usize) = c.score;
            if !p.logprobs.is_null() {
                *p.logprobs.add(b as usize) = lp;
                if !p.raw_logprobs.is_null() {
                    *p.raw_logprobs.add(b as usize) = raw;
                }
            }
            if !p.logsumexp.is_null() {
                *p.logsumexp.add(b as usize) = lse_out;
            }
        }
    }
    if p.targets.is_null() {
        return; // block-uniform
    }
    // SAFETY: b < B: the targets hold entry b (block-uniform load).
    let target = unsafe { *p.targets.add(b as usize) };
    let inside = target < p.v;
    let yt = if !inside {
        f32::NAN
    } else if target == token && !p.logprobs.is_null() {
        y
    } else {
        dot(target)
    };
    if tid == 0 {
        let xt = if !inside {
            f32::NAN
        } else {
            // SAFETY: the request's mask row holds mask_words words (target < V); target < V is
            // inside z.
            let (allowed, kept) = unsafe {
                let allowed = p.mask.is_null()
                    || (*p.mask.add(row.request as usize * p.mask_words as usize + (target / 32) as usize)
                        >> (target % 32))
                        & 1
                        != 0;
                (allowed, cut.keeps(*z.add(target as usize)))
            };
            if greedy || kept { processed(target, yt, allowed) } else { f32::NEG_INFINITY }
        };
        let (lp, raw) = target_log_probs((c.score.is_nan(), greedy, target == token), (xt, yt), (lse, lse_raw));
        // SAFETY: b < B: entry b of the given tokens' outputs.
        unsafe {
            *p.target_logprobs.add(b as usize) = lp;
            *p.target_raw_logprobs.add(b as usize) = raw;
        }
    }
}
