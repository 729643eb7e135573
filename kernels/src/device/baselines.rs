//! Baseline sampling kernels over materialized logits (the test PTX module), for the benchmark only: what an unfused
//! serving stack runs after its cuBLAS GEMM has written `[B, V]` f32 logits to memory.
//!
//! # Parameters
//! [`LogitsParams`] by value; `V % 4 == 0` (16-byte row loads), checked by the host.
//!
//! | kernel | grid | block | what |
//! |---|---|---|---|
//! | `gumbel_logits` | `slabs · B · n_chunks` | [`BASELINE_THREADS`] | Gumbel-max per chunk of [`LOGITS_CHUNK`] → candidates (then `reduce_candidates`) |
//! | `softmax_rows` | `B` | [`BASELINE_THREADS`] | online max/sum pass, then `probs = softmax(logits / T)` written |
//! | `multinomial_rows` | `B` | [`BASELINE_THREADS`] | inverse-CDF draw over `probs`, block-wide scans, early exit |
//! | `rejection_rows` | `R` (requests) | [`BASELINE_THREADS`] | speculative verification's rejection sampler over `probs` and draft probabilities ([`RejectionParams`]) |
//! | `logsoftmax_gather` | `B` | [`BASELINE_THREADS`] | online max/sum pass, then `probs[row] = logits[row, tokens[row]] / T − lse` (scoring given tokens) |
//! | `reduce_candidates` | `ceil(B / REDUCE_ROWS_PER_BLOCK)` | `REDUCE_THREADS_PER_BLOCK` | the candidate reduction of `gumbel_logits` (`device::reduce`) |

use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use super::collective::{ln, merge_butterfly};
use super::ptx::{
    ex2_approx_ftz_f32, ld_global_nc_v4_f32, ld_shared_v2_u32, mov_u32_dynamic_smem, shfl_sync_bfly_b32,
    shfl_sync_up_b32, st_shared_v2_u32,
};
use super::reduce;
use crate::candidate::Candidate;
use crate::config::{BASELINE_THREADS, LOGITS_CHUNK, STREAM_READ_THREADS};
use crate::epilogue::update_group4_unpruned;
use crate::logmass::LogMass;
use crate::noise::{RowNoise, uniform_open};
use crate::params::{LogitsParams, ReduceParams, RejectionParams, StreamReadParams};
use crate::philox::philox4x32_10;

/// e^x on the device (`ex2.approx.ftz`): the baselines' softmax exponential.
#[inline(always)]
fn exp(x: f32) -> f32 {
    ex2_approx_ftz_f32(x * core::f32::consts::LOG2_E)
}

const WARPS: u32 = BASELINE_THREADS / 32;

/// Gumbel-max over materialized logits, one candidate per (row, chunk): the same noise and transform
/// as the fused kernel, so its tokens equal ours up to f32 summation differences of the logits.
///
/// # Safety
/// Launched as in the module table with buffers of the sizes `p` states.
#[inline(always)]
unsafe fn gumbel_logits_body(p: LogitsParams) {
    // SAFETY: special-register reads.
    let (tid, blk) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let (slab_row, chunk) = (blk / p.n_chunks, blk % p.n_chunks);
    let (slab, row) = (slab_row / p.b, slab_row % p.b);
    // SAFETY: slab < slabs, row < B: the row start is inside [slabs, B, V].
    let logits = unsafe { p.logits.add((slab as usize * p.b as usize + row as usize) * p.v as usize) };
    // Global vocab index of the slab's entry 0.
    let base = p.v_offset + slab * p.v;
    // SAFETY: row < B.
    let noise = RowNoise { seed: p.seed, stream: unsafe { *p.streams.add(row as usize) }, sample: p.sample };
    let mut cand = Candidate::EMPTY;
    let mut k = 0;
    while k < LOGITS_CHUNK / (4 * BASELINE_THREADS) {
        let v0 = chunk * LOGITS_CHUNK + 4 * (k * BASELINE_THREADS + tid);
        if v0 < p.v {
            // SAFETY: v0 + 4 <= V (V % 4 == 0), 16-byte aligned.
            let x = unsafe { ld_global_nc_v4_f32(logits.add(v0 as usize)) };
            update_group4_unpruned(&mut cand, x, base + v0, base + p.v, &noise, &p.transform);
        }
        k += 1;
    }
    // SAFETY: block-uniform; 8·WARPS bytes of dynamic shared memory.
    let cand = unsafe { merge_candidates(cand, mov_u32_dynamic_smem(), tid, WARPS) };
    if tid == 0 {
        // SAFETY: inside [B, slabs · n_chunks].
        unsafe { *p.candidates.add(((row * p.slabs + slab) * p.n_chunks + chunk) as usize) = cand };
    }
}

/// `probs[row] = softmax(logits[row] · (1/T))`: an online (max, sum) pass, then a write pass.
///
/// # Safety
/// As [`gumbel_logits_body`].
#[inline(always)]
unsafe fn softmax_rows_body(p: LogitsParams) {
    // SAFETY: special-register reads.
    let (tid, row) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let off = row as usize * p.v as usize;
    let inv_t = p.transform.inv_temperature;
    // SAFETY: row `off / V` of the logits; block-uniform.
    let m = unsafe { row_log_mass(&p, off, inv_t, tid) };
    let inv_sum = 1.0 / m.sum;
    let mut v0 = 4 * tid;
    while v0 < p.v {
        // SAFETY: as above; probs has the same shape.
        unsafe {
            let x = ld_global_nc_v4_f32(p.logits.add(off + v0 as usize));
            let out = p.probs.add(off + v0 as usize) as *mut [f32; 4];
            *out = x.map(|y| exp(y * inv_t - m.max) * inv_sum);
        }
        v0 += 4 * BASELINE_THREADS;
    }
}

/// The log-mass of `logits[off .. off + V] · inv_t` over the block (every thread gets it): one
/// online pass, then the block merge.
///
/// # Safety
/// Every thread of a `BASELINE_THREADS`-thread block calls it; `off` starts a row of `p.logits`.
#[inline(always)]
unsafe fn row_log_mass(p: &LogitsParams, off: usize, inv_t: f32, tid: u32) -> LogMass {
    let mut m = LogMass::EMPTY;
    let mut v0 = 4 * tid;
    while v0 < p.v {
        // SAFETY: v0 + 4 <= V, aligned.
        let x = unsafe { ld_global_nc_v4_f32(p.logits.add(off + v0 as usize)) };
        for y in x {
            m.update(y * inv_t, exp);
        }
        v0 += 4 * BASELINE_THREADS;
    }
    // SAFETY: block-uniform; 8·WARPS bytes of dynamic shared memory.
    unsafe { merge_log_mass(m, mov_u32_dynamic_smem(), tid, WARPS) }
}

/// The unfused scoring of given tokens: one pass of an online log-sum-exp over `logits[row] / T`,
/// then `probs[row]` (the output, `[B]`) = the given token's `logits[row, tokens[row]] / T − lse`
/// (`tokens` is the input here, `[B]`; a token at or past V gives NaN and is not read).
///
/// # Safety
/// As [`gumbel_logits_body`].
#[inline(always)]
unsafe fn logsoftmax_gather_body(p: LogitsParams) {
    // SAFETY: special-register reads.
    let (tid, row) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let off = row as usize * p.v as usize;
    let inv_t = p.transform.inv_temperature;
    // SAFETY: row `off / V` of the logits; block-uniform.
    let m = unsafe { row_log_mass(&p, off, inv_t, tid) };
    if tid == 0 {
        // SAFETY: row < B; the given token is read only below V (NaN past it).
        unsafe {
            let t = *p.tokens.add(row as usize);
            let y = if t < p.v { *p.logits.add(off + t as usize) } else { f32::NAN };
            *p.probs.add(row as usize) = y * inv_t - m.lse_with(ln);
        }
    }
}

/// Inverse-CDF multinomial draw from `probs[row]`: `u ~ U(0,1)` from Philox (row stream), then the
/// first index whose running sum exceeds `u` ([`inverse_cdf`]).
///
/// # Safety
/// As [`gumbel_logits_body`].
#[inline(always)]
unsafe fn multinomial_rows_body(p: LogitsParams) {
    // SAFETY: special-register reads.
    let (tid, row) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let off = row as usize * p.v as usize;
    // SAFETY: row < B.
    let stream = unsafe { *p.streams.add(row as usize) };
    let bits =
        philox4x32_10([0, p.sample, stream as u32, (stream >> 32) as u32], [p.seed as u32, (p.seed >> 32) as u32]);
    let u = uniform_open(bits[0]);
    // SAFETY: v0 + 4 <= V, aligned (the helper's contract); block-uniform.
    let pick = unsafe {
        inverse_cdf(u, p.v, |v0| ld_global_nc_v4_f32(p.probs.add(off + v0 as usize)), mov_u32_dynamic_smem(), tid)
    };
    if let Some(pick) = pick {
        // SAFETY: row < B.
        unsafe { *p.tokens.add(row as usize) = pick };
    }
}

/// The first index of a row of `v` weights (`v % 4 == 0`, `load(v0)` gives entries `v0 .. v0 + 4`)
/// whose running sum exceeds `u` (the last index when rounding leaves `u` at or past the total), by
/// block-wide scans over tiles of `4 · BASELINE_THREADS` entries with an early exit: `Some` on the
/// one thread that holds it, `None` on the others.
///
/// # Safety
/// Every thread of a `BASELINE_THREADS`-thread block calls it with the same `u` and `v`; `load(v0)`
/// may read entries `v0 .. v0 + 4` for `v0 + 4 <= v`; `smem` holds `8 · WARPS` free bytes.
#[inline(always)]
unsafe fn inverse_cdf(u: f32, v: u32, load: impl Fn(u32) -> [f32; 4], smem: u32, tid: u32) -> Option<u32> {
    let mut running = 0.0f32;
    let mut base = 0u32;
    while base < v {
        let v0 = base + 4 * tid;
        let x = if v0 < v { load(v0) } else { [0.0; 4] };
        let local = (x[0] + x[1]) + (x[2] + x[3]);
        // SAFETY: block-uniform (every thread runs the same number of tiles).
        let (before, total) = unsafe { exclusive_scan(local, smem, tid, WARPS) };
        let last_tile = base + 4 * BASELINE_THREADS >= v;
        if u < running + total || last_tile {
            let mut acc = running + before;
            let in_mine = u >= acc && (u < acc + local || (last_tile && tid == BASELINE_THREADS - 1));
            if in_mine && v0 < v {
                let mut pick = v0 + 3;
                for (j, &q) in x.iter().enumerate() {
                    acc += q;
                    if u < acc {
                        pick = v0 + j as u32;
                        break;
                    }
                }
                return Some(pick.min(v - 1));
            }
            return None; // uniform: every thread saw the same `running + total`
        }
        running += total;
        base += 4 * BASELINE_THREADS;
    }
    None
}

/// The sum of a row of `v` weights (`load` as for [`inverse_cdf`]), the same on every thread.
///
/// # Safety
/// As [`inverse_cdf`].
#[inline(always)]
unsafe fn block_total(v: u32, load: impl Fn(u32) -> [f32; 4], smem: u32, tid: u32) -> f32 {
    let mut sum = 0.0f32;
    let mut base = 0u32;
    while base < v {
        let v0 = base + 4 * tid;
        let x = if v0 < v { load(v0) } else { [0.0; 4] };
        // SAFETY: block-uniform.
        let (_, total) = unsafe { exclusive_scan((x[0] + x[1]) + (x[2] + x[3]), smem, tid, WARPS) };
        sum += total;
        base += 4 * BASELINE_THREADS;
    }
    sum
}

/// The classic speculative-decoding rejection sampler over materialized probabilities (what vLLM's
/// and FlashInfer's rejection samplers compute), request `r` per block: draft `i` (token `d`) is
/// accepted when `u_i · q_i(d) ≤ p_i(d)` (probability `min(1, p/q)`); at the first rejection a token
/// is drawn from the residual `max(p_i − q_i, 0)` (normalized by its sum) and the request ends; after
/// `K` acceptances the bonus token is drawn from `p_K`. Uniforms from Philox keyed by (seed, request,
/// position).
///
/// # Safety
/// Launched with `grid = R`, `BASELINE_THREADS` threads and `BASELINE_SMEM_BYTES` of dynamic shared
/// memory, with buffers of the sizes `p` states.
#[inline(always)]
unsafe fn rejection_rows_body(p: RejectionParams) {
    // SAFETY: special-register reads.
    let (tid, r) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let (k, v) = (p.k, p.v as usize);
    let smem = mov_u32_dynamic_smem();
    let key = [p.seed as u32, (p.seed >> 32) as u32];
    let out = (r * (k + 1)) as usize;
    let mut i = 0;
    while i < k {
        let (prow, qrow) = ((r * (k + 1) + i) as usize * v, (r * k + i) as usize * v);
        let bits = philox4x32_10([i, r, 0x5EC, 0], key);
        // SAFETY: draft (r, i) is inside [R·K]; its token is below V (the launch's contract).
        let (t, pt, qt) = unsafe {
            let t = *p.draft_tokens.add((r * k + i) as usize) as usize;
            (t, *p.target.add(prow + t), *p.draft.add(qrow + t))
        };
        if uniform_open(bits[0]) * qt <= pt {
            if tid == 0 {
                // SAFETY: slot i of request r.
                unsafe { *p.tokens.add(out + i as usize) = t as u32 };
            }
            i += 1;
            continue;
        }
        // SAFETY: v0 + 4 <= V (the helpers' contract), rows inside [R·(K+1), V] and [R·K, V].
        let residual = |v0: u32| unsafe {
            let (a, b) = (
                ld_global_nc_v4_f32(p.target.add(prow + v0 as usize)),
                ld_global_nc_v4_f32(p.draft.add(qrow + v0 as usize)),
            );
            [0, 1, 2, 3].map(|j| (a[j] - b[j]).max(0.0))
        };
        // SAFETY: block-uniform calls.
        let pick = unsafe {
            let total = block_total(p.v, residual, smem, tid);
            inverse_cdf(uniform_open(bits[1]) * total, p.v, residual, smem, tid)
        };
        if let Some(pick) = pick {
            // SAFETY: slot i of request r.
            unsafe { *p.tokens.add(out + i as usize) = pick };
        }
        if tid == 0 {
            // SAFETY: r < R.
            unsafe { *p.accepted.add(r as usize) = i };
        }
        return;
    }
    // Every draft accepted: the bonus token from the last row.
    let prow = (r * (k + 1) + k) as usize * v;
    let u = uniform_open(philox4x32_10([k, r, 0x5EC, 0], key)[0]);
    // SAFETY: v0 + 4 <= V, the row inside [R·(K+1), V]; block-uniform.
    let pick = unsafe { inverse_cdf(u, p.v, |v0| ld_global_nc_v4_f32(p.target.add(prow + v0 as usize)), smem, tid) };
    // SAFETY: slot K of request r; r < R.
    unsafe {
        if let Some(pick) = pick {
            *p.tokens.add(out + k as usize) = pick;
        }
        if tid == 0 {
            *p.accepted.add(r as usize) = k;
        }
    }
}

/// Benchmark baseline `rejection_rows` (see the module table).
///
/// # Safety
/// See [`rejection_rows_body`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn rejection_rows(p: RejectionParams) {
    // SAFETY: forwarded launch contract.
    unsafe { rejection_rows_body(p) }
}

macro_rules! logits_entry {
    ($name:ident, $body:ident) => {
        #[doc = concat!("Benchmark baseline `", stringify!($name), "` (see the module table).")]
        ///
        /// # Safety
        #[doc = concat!("See [`", stringify!($body), "`].")]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: LogitsParams) {
            // SAFETY: forwarded launch contract.
            unsafe { $body(p) }
        }
    };
}
logits_entry!(gumbel_logits, gumbel_logits_body);
logits_entry!(softmax_rows, softmax_rows_body);
logits_entry!(multinomial_rows, multinomial_rows_body);
logits_entry!(logsoftmax_gather, logsoftmax_gather_body);

/// The read-only streaming kernel: thread `t` of the grid's `T` threads reads chunks `t, t + T, …`
/// (four in flight), folds their words with XOR, the block folds its threads', and thread 0 writes
/// the block's word. One pass over the data: its time is the read floor of the machine.
///
/// # Safety
/// `p.src` holds `p.chunks` 16-byte chunks, 16-byte aligned; `p.out` one word per block; launched
/// with `STREAM_READ_THREADS` threads per block.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn stream_read(p: StreamReadParams) {
    // SAFETY: special-register reads.
    let (tid, blk, blocks) = unsafe { (_thread_idx_x(), _block_idx_x(), core::arch::nvptx::_grid_dim_x()) };
    let stride = blocks as u64 * STREAM_READ_THREADS as u64;
    let mut i = blk as u64 * STREAM_READ_THREADS as u64 + tid as u64;
    let mut acc = 0u32;
    while i + 3 * stride < p.chunks {
        // SAFETY: i + 3·stride < chunks: four chunks inside the data.
        let c = unsafe {
            [
                ld_global_nc_v4_f32(p.src.add(i as usize) as *const f32),
                ld_global_nc_v4_f32(p.src.add((i + stride) as usize) as *const f32),
                ld_global_nc_v4_f32(p.src.add((i + 2 * stride) as usize) as *const f32),
                ld_global_nc_v4_f32(p.src.add((i + 3 * stride) as usize) as *const f32),
            ]
        };
        for v in c {
            acc ^= v[0].to_bits() ^ v[1].to_bits() ^ v[2].to_bits() ^ v[3].to_bits();
        }
        i += 4 * stride;
    }
    while i < p.chunks {
        // SAFETY: i < chunks.
        let v = unsafe { ld_global_nc_v4_f32(p.src.add(i as usize) as *const f32) };
        acc ^= v[0].to_bits() ^ v[1].to_bits() ^ v[2].to_bits() ^ v[3].to_bits();
        i += stride;
    }
    for m in [1u32, 2, 4, 8, 16] {
        // SAFETY: all lanes of every warp reach this point.
        acc ^= unsafe { shfl_sync_bfly_b32(acc, m) };
    }
    let smem = mov_u32_dynamic_smem();
    // SAFETY: block-uniform barriers; STREAM_READ_THREADS / 32 slots of 8 bytes in the launch's
    // dynamic shared memory; `out` holds one word per block.
    unsafe {
        if tid % 32 == 0 {
            st_shared_v2_u32(smem + 8 * (tid / 32), [acc, 0]);
        }
        _syncthreads();
        if tid == 0 {
            let mut block = 0u32;
            for w in 0..STREAM_READ_THREADS / 32 {
                block ^= ld_shared_v2_u32(smem + 8 * w)[0];
            }
            *p.out.add(blk as usize) = block;
        }
    }
}

/// The standalone candidate reduction (after `gumbel_logits`).
///
/// # Safety
/// See `device::reduce::reduce_candidates`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn reduce_candidates(p: ReduceParams) {
    // SAFETY: forwarded launch contract.
    unsafe { reduce::reduce_candidates(p) }
}

/// Block-wide merges and scans over shared memory.
/// Merges every thread's candidate; the result is returned to every thread.
///
/// # Safety
/// All threads of the block call it together; `smem` points at ≥ 8·(warps + 1) bytes of shared memory.
#[inline(always)]
unsafe fn merge_candidates(c: Candidate, smem: u32, tid: u32, warps: u32) -> Candidate {
    // SAFETY: block-uniform call (caller's contract); slots are inside `smem`.
    unsafe {
        let c = merge_butterfly(c, [1, 2, 4, 8, 16]);
        if tid % 32 == 0 {
            st_shared_v2_u32(smem + 8 * (tid / 32), [c.score.to_bits(), c.index]);
        }
        _syncthreads();
        let mut all = Candidate::EMPTY;
        for w in 0..warps {
            let [s, i] = ld_shared_v2_u32(smem + 8 * w);
            all = all.merge(Candidate { score: f32::from_bits(s), index: i });
        }
        _syncthreads();
        all
    }
}

/// Merges every thread's [`LogMass`]; the result is returned to every thread.
///
/// # Safety
/// As [`merge_candidates`].
#[inline(always)]
unsafe fn merge_log_mass(m: LogMass, smem: u32, tid: u32, warps: u32) -> LogMass {
    let mut m = m;
    // SAFETY: block-uniform call (caller's contract); slots are inside `smem`.
    unsafe {
        for mask in [1, 2, 4, 8, 16] {
            let max = f32::from_bits(shfl_sync_bfly_b32(m.max.to_bits(), mask));
            let sum = f32::from_bits(shfl_sync_bfly_b32(m.sum.to_bits(), mask));
            m = m.merge_with(LogMass { max, sum }, exp);
        }
        if tid % 32 == 0 {
            st_shared_v2_u32(smem + 8 * (tid / 32), [m.max.to_bits(), m.sum.to_bits()]);
        }
        _syncthreads();
        let mut all = LogMass::EMPTY;
        for w in 0..warps {
            let [a, b] = ld_shared_v2_u32(smem + 8 * w);
            all = all.merge_with(LogMass { max: f32::from_bits(a), sum: f32::from_bits(b) }, exp);
        }
        _syncthreads();
        all
    }
}

/// Exclusive prefix sum of `x` over the block's threads (in thread order), and the block total.
///
/// # Safety
/// As [`merge_candidates`].
#[inline(always)]
unsafe fn exclusive_scan(x: f32, smem: u32, tid: u32, warps: u32) -> (f32, f32) {
    let lane = tid % 32;
    let mut incl = x;
    // SAFETY: block-uniform call (caller's contract); slots are inside `smem`.
    unsafe {
        let mut delta = 1;
        while delta < 32 {
            let y = f32::from_bits(shfl_sync_up_b32(incl.to_bits(), delta));
            if lane >= delta {
                incl += y;
            }
            delta *= 2;
        }
        if lane == 31 {
            st_shared_v2_u32(smem + 8 * (tid / 32), [incl.to_bits(), 0]);
        }
        _syncthreads();
        let (mut before, mut total) = (0.0f32, 0.0f32);
        for w in 0..warps {
            let [s, _] = ld_shared_v2_u32(smem + 8 * w);
            let s = f32::from_bits(s);
            if w < tid / 32 {
                before += s;
            }
            total += s;
        }
        _syncthreads();
        (before + incl - x, total)
    }
}
