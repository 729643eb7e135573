//! The fused LM-head matmul + Gumbel-max sampling kernel: mainloop (logits of one tile in registers)
//! and epilogue (transform, noise, per-tile candidate), as separate pieces.
//!
//! # Parameters
//! [`FusedParams`] by value; launch with `grid = n_vtiles · n_btiles` blocks of
//! [`THREADS_PER_BLOCK`] threads and [`fused_smem_bytes`]`(NB)` bytes of dynamic shared memory.
//!
//! # Thread mapping
//! See [`crate::config`]. Every weight byte is loaded by exactly one lane of one block per batch tile
//! and never written back; the `[B, V]` logits never leave registers.

use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use super::ptx::{
    ld_global_nc_l1_no_allocate_v4_u32, ld_global_nc_v4_u32, ld_shared_v2_u32,
    mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32 as mma, mov_u32_dynamic_smem,
    st_shared_v2_u32,
};
use super::warp::merge_butterfly;
use crate::candidate::Candidate;
use crate::config::{BLOCK_V, CHUNK_D, M_TILES_PER_WARP, ROWS_PER_LANE, WARPS_PER_BLOCK};
use crate::epilogue::update_aligned;
use crate::noise::RowNoise;
use crate::params::FusedParams;

/// Where one lane sits in the launch.
#[derive(Clone, Copy)]
struct LanePosition {
    warp: u32,
    /// `lane / 4`: selects the lane's vocab rows and its hidden row within an N tile.
    group: u32,
    /// `lane % 4`: selects the lane's 16-byte slice of each 32-wide D chunk and its batch columns.
    quad: u32,
    vtile: u32,
    /// First of the lane's `ROWS_PER_LANE` consecutive vocab rows.
    v0: u32,
    /// First batch row of the block's batch tile.
    b0: u32,
}

/// One warp's accumulators: `[M tile][N tile][fragment]`.
type Accumulators<const NB: usize> = [[[f32; 4]; NB]; M_TILES_PER_WARP];

/// The fused kernel body for a batch tile of `8·NB` rows.
///
/// # Safety
/// Launched as documented in the module, with `p` validated by the host (shapes, 16-byte aligned
/// buffers of the stated sizes, `d % D_ALIGN == 0`).
#[inline(always)]
pub unsafe fn fused_sample<const NB: usize>(p: FusedParams) {
    // SAFETY: special-register reads.
    let (tid, blk) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let lane = tid % 32;
    let warp = tid / 32;
    let n_btiles = p.b.div_ceil(8 * NB as u32).max(1);
    let vtile = blk / n_btiles;
    let pos = LanePosition {
        warp,
        group: lane / 4,
        quad: lane % 4,
        vtile,
        v0: vtile * BLOCK_V + warp * 16 * M_TILES_PER_WARP as u32 + (lane / 4) * ROWS_PER_LANE as u32,
        b0: (blk % n_btiles) * 8 * NB as u32,
    };
    // SAFETY: forwarded launch contract.
    unsafe {
        let acc = mainloop::<NB>(&p, pos);
        epilogue::<NB>(&p, pos, &acc);
    }
}

/// Logits of the lane's vocab rows × the block's batch tile, accumulated in f32 over all of D.
///
/// Rows beyond V and batch rows beyond B load zeros (no memory access); so does the part of the last
/// chunk beyond D. The loop trip count is the same for every lane, so the MMAs run converged.
#[inline(always)]
unsafe fn mainloop<const NB: usize>(p: &FusedParams, pos: LanePosition) -> Accumulators<NB> {
    let d = p.d as usize;
    let weight = p.weight as *const u16;
    let hidden = p.hidden as *const u16;
    let mut w_rows = [core::ptr::null::<u16>(); ROWS_PER_LANE];
    for (j, row) in w_rows.iter_mut().enumerate() {
        let v = pos.v0 + j as u32;
        if v < p.v {
            // SAFETY: v < V, so the row start is inside the [V, D] weight.
            *row = unsafe { weight.add(v as usize * d) };
        }
    }
    let mut h_rows = [core::ptr::null::<u16>(); NB];
    for (nt, row) in h_rows.iter_mut().enumerate() {
        let b = pos.b0 + 8 * nt as u32 + pos.group;
        if b < p.b {
            // SAFETY: b < B, so the row start is inside the [B, D] hidden states.
            *row = unsafe { hidden.add(b as usize * d) };
        }
    }

    let mut acc: Accumulators<NB> = [[[0.0; 4]; NB]; M_TILES_PER_WARP];
    let mut kc = 0u32;
    while kc < p.d {
        let k = kc + 8 * pos.quad;
        let in_d = k < p.d;
        let mut a = [[0u32; 4]; ROWS_PER_LANE];
        for j in 0..ROWS_PER_LANE {
            if in_d && !w_rows[j].is_null() {
                // SAFETY: k + 8 <= D (D % 8 == 0), 16-byte aligned (base and D·2 are), read-only.
                a[j] = unsafe { ld_global_nc_l1_no_allocate_v4_u32(w_rows[j].add(k as usize) as *const u32) };
            }
        }
        let mut h = [[0u32; 4]; NB];
        for nt in 0..NB {
            if in_d && !h_rows[nt].is_null() {
                // SAFETY: as above, for the hidden row.
                h[nt] = unsafe { ld_global_nc_v4_u32(h_rows[nt].add(k as usize) as *const u32) };
            }
        }
        for mt in 0..M_TILES_PER_WARP {
            let (lo, hi) = (a[2 * mt], a[2 * mt + 1]); // MMA rows `group` and `group + 8`
            for nt in 0..NB {
                // SAFETY: every lane runs the same trip count, so the warp is converged here.
                unsafe {
                    mma(&mut acc[mt][nt], [lo[0], hi[0], lo[1], hi[1]], [h[nt][0], h[nt][1]]);
                    mma(&mut acc[mt][nt], [lo[2], hi[2], lo[3], hi[3]], [h[nt][2], h[nt][3]]);
                }
            }
        }
        kc += CHUNK_D;
    }
    acc
}

/// The lane's `ROWS_PER_LANE` logits (consecutive vocab rows) of its batch column `i` (N tile `i / 2`,
/// element `i % 2`): lane row `j = 2·mt + h` is MMA row `group + 8h` of M tile `mt`.
#[inline(always)]
fn column_logits<const NB: usize>(acc: &Accumulators<NB>, i: u32) -> [f32; ROWS_PER_LANE] {
    let mut out = [0.0f32; ROWS_PER_LANE];
    for k in 0..2 * NB {
        let (nt, e) = (k / 2, k % 2);
        if k as u32 == i {
            for (j, o) in out.iter_mut().enumerate() {
                *o = acc[j / 2][nt][2 * (j % 2) + e];
            }
        }
    }
    out
}

/// Transform + noise + argmax of the tile: one candidate per batch row of the tile, merged over the
/// eight lane groups (shuffles) and the block's warps (shared memory), written to
/// `candidates[b, vtile]`.
#[inline(always)]
unsafe fn epilogue<const NB: usize>(p: &FusedParams, pos: LanePosition, acc: &Accumulators<NB>) {
    let block_b = 8 * NB as u32;
    let smem = mov_u32_dynamic_smem();
    // One heavy iteration (Philox + logs) per batch column the lane owns: a real loop, so the lane's
    // logits for column `i` are picked with constant indices by `column_logits`, keeping `acc` in
    // registers (a run-time index would move it to local memory).
    for i in 0..2 * NB as u32 {
        // Accumulator element `e` (+2 for MMA row group+8) is batch column 2·quad + e of N tile nt.
        let col = 8 * (i / 2) + 2 * pos.quad + i % 2;
        let b = pos.b0 + col;
        let mut cand = Candidate::EMPTY;
        if b < p.b {
            // SAFETY: b < B and `streams` holds B entries.
            let stream = unsafe { *p.streams.add(b as usize) };
            let noise = RowNoise { seed: p.seed, stream, sample: p.sample };
            update_aligned(&mut cand, &column_logits::<NB>(acc, i), pos.v0, p.v, &noise, &p.transform);
        }
        // SAFETY: all lanes reach this point (no early exit above).
        let cand = unsafe { merge_butterfly(cand, [4, 8, 16]) };
        if pos.group == 0 {
            let slot = smem + 8 * (pos.warp * block_b + col);
            // SAFETY: slot < WARPS_PER_BLOCK · BLOCK_B · 8 = the launch's dynamic shared memory.
            unsafe { st_shared_v2_u32(slot, [cand.score.to_bits(), cand.index]) };
        }
    }
    // SAFETY: every thread of the block reaches the barrier.
    unsafe { _syncthreads() };
    let t = pos.warp * 32 + 4 * pos.group + pos.quad;
    if t < block_b && pos.b0 + t < p.b {
        let mut cand = Candidate::EMPTY;
        for w in 0..WARPS_PER_BLOCK {
            // SAFETY: inside the shared memory written above, after the barrier.
            let [s, i] = unsafe { ld_shared_v2_u32(smem + 8 * (w * block_b + t)) };
            cand = cand.merge(Candidate { score: f32::from_bits(s), index: i });
        }
        let b = (pos.b0 + t) as usize;
        // SAFETY: b < B, vtile < n_vtiles: inside the [B, n_vtiles] candidate buffer.
        unsafe { *p.candidates.add(b * p.n_vtiles as usize + pos.vtile as usize) = cand };
    }
}
