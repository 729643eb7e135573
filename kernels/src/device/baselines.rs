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
use crate::params::{LogitsParams, ReduceParams, StreamReadParams};
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
    let m = unsafe { merge_log_mass(m, mov_u32_dynamic_smem(), tid, WARPS) };
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

/// The unfused scoring of given tokens: one pass of an online log-sum-exp over `logits[row] / T`,
/// then `probs[row]` (the output, `[B]`) = the given token's `logits[row, tokens[row]] / T − lse`
/// (`tokens` is the input here, `[B]`, each below V).
///
/// # Safety
/// As [`gumbel_logits_body`]; `tokens[row] < V`.
#[inline(always)]
unsafe fn logsoftmax_gather_body(p: LogitsParams) {
    // SAFETY: special-register reads.
    let (tid, row) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let off = row as usize * p.v as usize;
    let inv_t = p.transform.inv_temperature;
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
    let m = unsafe { merge_log_mass(m, mov_u32_dynamic_smem(), tid, WARPS) };
    if tid == 0 {
        // SAFETY: row < B; the given token is below V (the caller's contract).
        unsafe {
            let t = *p.tokens.add(row as usize);
            *p.probs.add(row as usize) = *p.logits.add(off + t as usize) * inv_t - m.lse_with(ln);
        }
    }
}

/// Inverse-CDF multinomial draw from `probs[row]`: `u ~ U(0,1)` from Philox (row stream), then the
/// first index whose running sum exceeds `u`, found by block-wide scans over tiles of
/// `4 · BASELINE_THREADS` entries with an early exit.
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
    let smem = mov_u32_dynamic_smem();
    let mut running = 0.0f32;
    let mut base = 0u32;
    while base < p.v {
        let v0 = base + 4 * tid;
        let x = if v0 < p.v {
            // SAFETY: v0 + 4 <= V, aligned.
            unsafe { ld_global_nc_v4_f32(p.probs.add(off + v0 as usize)) }
        } else {
            [0.0; 4]
        };
        let local = (x[0] + x[1]) + (x[2] + x[3]);
        // SAFETY: block-uniform (every thread runs the same number of tiles).
        let (before, total) = unsafe { exclusive_scan(local, smem, tid, WARPS) };
        let last_tile = base + 4 * BASELINE_THREADS >= p.v;
        if u < running + total || last_tile {
            let mut acc = running + before;
            let in_mine = u >= acc && (u < acc + local || (last_tile && tid == BASELINE_THREADS - 1));
            if in_mine && v0 < p.v {
                let mut pick = v0 + 3;
                for (j, &q) in x.iter().enumerate() {
                    acc += q;
                    if u < acc {
                        pick = v0 + j as u32;
                        break;
                    }
                }
                // SAFETY: row < B.
                unsafe { *p.tokens.add(row as usize) = pick.min(p.v - 1) };
            }
            return; // uniform: every thread saw the same `running + total`
        }
        running += total;
        base += 4 * BASELINE_THREADS;
    }
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
