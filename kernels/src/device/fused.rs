//! The fused LM-head matmul + Gumbel-max sampling kernel with **per-warp staging**, and the pieces
//! every fused variant shares: the MMA step, the epilogue (transform, noise, per-tile candidate) and
//! the candidate merges. The block-staging mainloop is in [`super::fused_block`].
//!
//! # Parameters
//! [`FusedParams`] by value; launch with `grid = n_vranges · n_btiles` blocks of
//! [`FusedVariant::threads`](crate::config::FusedVariant::threads) (128) threads and
//! [`FusedVariant::smem_bytes`](crate::config::FusedVariant::smem_bytes) bytes of dynamic shared memory.
//!
//! # Thread mapping
//! See [`crate::config`]. Persistent blocks: block `blk` takes batch tile `blk % n_btiles` (8·NB rows)
//! and vocab range `blk / n_btiles` (an even share of the `ceil(V / 32)` warp tiles). Its 4 warps
//! take the range's warp tiles round-robin, each through its own staging ring. Lanes carry one
//! candidate per batch column across tiles and merge once at the end; the last block of each batch
//! tile to finish reduces that tile's candidates to tokens (`reduce_if_last`), so one launch samples.
//! A weight byte is copied from global memory once, by one lane, and never written back; the `[B, V]`
//! logits never leave registers.

use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use super::ptx::{
    atom_global_add_u32, bar_warp_sync, cp_async_ca_shared_global_16, cp_async_cg_shared_global_16,
    cp_async_commit_group, cp_async_wait_group, fence_acq_rel_gpu, ld_global_cg_v2_u32, ld_shared_v2_u32,
    ld_shared_v4_u32, mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32 as mma, mov_u32_dynamic_smem,
    st_shared_v2_u32,
};
use super::warp::merge_butterfly;
use crate::candidate::Candidate;
use crate::config::{
    CHUNK_D, M_TILES_PER_WARP, ROWS_PER_LANE, STAGE_K, STAGE_ROW_BYTES, WARP_TILE_V, WARPS_PER_BLOCK,
    candidate_smem_bytes,
};
use crate::epilogue::update_aligned;
use crate::noise::RowNoise;
use crate::params::FusedParams;

/// Where one lane sits in the launch.
#[derive(Clone, Copy)]
pub(super) struct LanePosition {
    /// Warp index in the block.
    pub warp: u32,
    /// `lane / 4`: selects the lane's vocab rows and its hidden row within an N tile.
    pub group: u32,
    /// `lane % 4`: selects the lane's 16-byte slice of each 32-wide D chunk and its batch columns.
    pub quad: u32,
    /// The block's vocab range (= its candidate column).
    pub vrange: u32,
    /// First batch row of this warp's `8·NB` rows.
    pub b0: u32,
}

/// One warp's accumulators: `[M tile][N tile][fragment]`.
pub(super) type Accumulators<const NB: usize> = [[[f32; 4]; NB]; M_TILES_PER_WARP];

/// The per-warp-staging kernel body for warps of `8·NB` batch rows (4 warps, one batch tile of
/// `8·NB` rows per block).
///
/// # Safety
/// Launched as documented in the module, with `p` validated by the host (shapes, 16-byte aligned
/// buffers of the stated sizes, `d % D_ALIGN == 0`).
#[inline(always)]
pub unsafe fn fused_sample_warp<const NB: usize, const S: u32>(p: FusedParams) {
    // SAFETY: special-register reads.
    let (tid, blk) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    let (lane, warp) = (tid % 32, tid / 32);
    let block_rows = 8 * NB as u32;
    let n_btiles = p.b.div_ceil(block_rows).max(1);
    let pos = LanePosition {
        warp,
        group: lane / 4,
        quad: lane % 4,
        vrange: blk / n_btiles,
        b0: (blk % n_btiles) * block_rows,
    };
    let (first, end) = tile_range(p.v.div_ceil(WARP_TILE_V), p.n_vranges, pos.vrange);
    let hidden = hidden_rows::<NB>(&p, pos);
    let st = Staging::new::<NB, S>(mov_u32_dynamic_smem(), warp, lane);
    // One candidate per batch column the lane owns, carried across the block's warp tiles.
    let mut cands = [Candidate::EMPTY; 16];
    let mut tile = first + warp;
    while tile < end {
        let v0 = tile * WARP_TILE_V + pos.group * ROWS_PER_LANE as u32;
        // SAFETY: forwarded launch contract; the tile loop is warp-uniform. One warp per vocab tile:
        // the weight is streamed past L1.
        let acc = unsafe { mainloop::<NB, S>(&p, st, tile, &hidden, pos.group, pos.quad) };
        epilogue_tile::<NB>(&p, pos, v0, &acc, &mut cands);
        tile += WARPS_PER_BLOCK;
    }
    // SAFETY: every thread of the block reaches the block merge and the final reduction.
    unsafe {
        write_candidates::<NB, 16>(&p, pos, WARPS_PER_BLOCK, 1, &cands);
        reduce_if_last(&p, tid, WARPS_PER_BLOCK, blk % n_btiles, pos.b0, block_rows);
    }
}

/// The candidate reduction, folded in: the last block of a batch tile to finish (counted with an
/// atomic after a device-wide fence) merges that tile's `[rows, n_vranges]` candidates into tokens.
/// Deterministic: the merge is order-independent. The counter is reset for the next launch.
///
/// # Safety
/// Every thread of the block calls it (`warps` warps), after [`write_candidates`].
#[inline(always)]
pub(super) unsafe fn reduce_if_last(
    p: &FusedParams,
    tid: u32,
    warps: u32,
    btile: u32,
    first_row: u32,
    block_rows: u32,
) {
    let flag = mov_u32_dynamic_smem(); // the candidate area is free again after write_candidates
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
        let row = b as usize * p.n_vranges as usize;
        let mut c = Candidate::EMPTY;
        let mut i = lane;
        while i < p.n_vranges {
            // SAFETY: i < n_vranges, b < B: inside the candidate buffer; L2-coherent load.
            let [s, idx] = unsafe { ld_global_cg_v2_u32(p.candidates.add(row + i as usize) as *const u32) };
            c = c.merge(Candidate { score: f32::from_bits(s), index: idx });
            i += 32;
        }
        // SAFETY: all 32 lanes of this warp are here.
        let c = unsafe { merge_butterfly(c, [1, 2, 4, 8, 16]) };
        if lane == 0 {
            // SAFETY: b < B.
            unsafe {
                *p.tokens.add(b as usize) = c.token();
                *p.scores.add(b as usize) = c.score;
            }
        }
        r += warps;
    }
    if tid == 0 {
        // SAFETY: btile < n_btiles. The next launch on the stream starts after this one completes.
        unsafe { *p.counters.add(btile as usize) = 0 };
    }
}

/// `cp.async.wait_group S − 2`: this thread's copies of the oldest of the `S − 1` stages in flight
/// have landed (an `S`-deep ring, one commit group per stage).
#[inline(always)]
pub(super) fn wait_oldest_stage<const S: u32>() {
    const { assert!(S >= 3 && S <= 10, "pipeline depth 3..=10") };
    match S {
        3 => cp_async_wait_group::<1>(),
        4 => cp_async_wait_group::<2>(),
        5 => cp_async_wait_group::<3>(),
        6 => cp_async_wait_group::<4>(),
        7 => cp_async_wait_group::<5>(),
        8 => cp_async_wait_group::<6>(),
        9 => cp_async_wait_group::<7>(),
        _ => cp_async_wait_group::<8>(),
    }
}

/// The tiles `[first, end)` of vocab range `r` of `n`: `tiles` tiles split as evenly as integers allow.
#[inline(always)]
pub(super) fn tile_range(tiles: u32, n: u32, r: u32) -> (u32, u32) {
    let tiles = tiles as u64;
    let n = n.max(1) as u64;
    ((tiles * r as u64 / n) as u32, (tiles * (r as u64 + 1) / n) as u32)
}

/// Start of the lane's hidden row in each N tile (`b0 + 8nt + group`). Rows beyond B are clamped to
/// row B − 1: they only feed accumulator columns the epilogue skips.
#[inline(always)]
fn hidden_rows<const NB: usize>(p: &FusedParams, pos: LanePosition) -> [*const u16; NB] {
    let mut rows = [core::ptr::null::<u16>(); NB];
    for (nt, row) in rows.iter_mut().enumerate() {
        let b = (pos.b0 + 8 * nt as u32 + pos.group).min(p.b - 1);
        // SAFETY: b < B, so the row start is inside the [B, D] hidden states.
        *row = unsafe { (p.hidden as *const u16).add(b as usize * p.d as usize) };
    }
    rows
}

/// One warp's shared-memory staging ring of `S` slots, each holding a `WARP_TILE_V × STAGE_K`
/// slab of weight (row `r` at `128·r` bytes; its 16-byte piece `c` stored at piece `c ^ (r % 8)`, so
/// the fragment reads below are bank-conflict free) followed by this lane's own hidden pieces.
///
/// Weights are copied coalesced — each copy instruction moves 4 rows × 128 contiguous bytes (whole
/// cache lines) — and read back by other lanes, so a `bar.warp.sync` separates copies and reads.
#[derive(Clone, Copy)]
struct Staging {
    /// Shared address of this warp's ring.
    warp_base: u32,
    lane: u32,
}

/// Weight slab bytes of one stage: 32 rows × 128 bytes.
const SLAB_BYTES: u32 = WARP_TILE_V * STAGE_ROW_BYTES;

impl Staging {
    #[inline(always)]
    fn new<const NB: usize, const S: u32>(smem: u32, warp: u32, lane: u32) -> Self {
        Self { warp_base: smem + candidate_smem_bytes(WARPS_PER_BLOCK) + warp * Self::stage_bytes::<NB>() * S, lane }
    }

    /// Bytes of one stage: the weight slab, then `2·NB` hidden rows of 32 lanes × 16 bytes.
    #[inline(always)]
    const fn stage_bytes<const NB: usize>() -> u32 {
        SLAB_BYTES + 2 * NB as u32 * 512
    }

    /// Shared address of 16-byte piece `c` (0..8) of slab row `r` in `stage`.
    #[inline(always)]
    fn weight<const NB: usize>(self, stage: u32, r: u32, c: u32) -> u32 {
        self.warp_base + stage * Self::stage_bytes::<NB>() + 128 * r + 16 * (c ^ (r % 8))
    }

    /// Shared address of this lane's hidden piece for N tile `nt`, MMA chunk `m` of `stage`.
    #[inline(always)]
    fn hidden<const NB: usize>(self, stage: u32, m: u32, nt: u32) -> u32 {
        self.warp_base + stage * Self::stage_bytes::<NB>() + SLAB_BYTES + ((m * NB as u32 + nt) * 32 + self.lane) * 16
    }
}

/// Issues the asynchronous copies of one stage (D columns `k0 .. k0 + STAGE_K`) as one commit group:
/// the warp tile's weight slab, coalesced (lane `l` copies piece `l % 8` of rows `4i + l / 8`), and
/// this lane's hidden pieces for both MMA chunks. Past D the copies zero-fill (source size 0).
#[inline(always)]
unsafe fn issue_stage<const NB: usize>(
    p: &FusedParams,
    st: Staging,
    stage: u32,
    tile: u32,
    h_rows: &[*const u16; NB],
    k0: u32,
    quad: u32,
) {
    let d = p.d;
    let piece = st.lane % 8;
    let k = k0 + 8 * piece;
    let (k, size) = if k < d { (k as usize, 16) } else { (0, 0) };
    for i in 0..8 {
        let r = 4 * i + st.lane / 8;
        // Rows beyond V are clamped to row V − 1: they only feed accumulator rows the epilogue never
        // scores. Addresses are recomputed here rather than kept in registers.
        let v = (tile * WARP_TILE_V + r).min(p.v - 1);
        // SAFETY: v < V and k + 8 <= D (or size 0 at the row start): 16 aligned readable bytes. The
        // slot's previous contents were read by every lane before the preceding `bar.warp.sync`.
        unsafe {
            let src = (p.weight as *const u16).add(v as usize * d as usize + k) as *const u32;
            cp_async_cg_shared_global_16(st.weight::<NB>(stage, r, piece), src, size);
        }
    }
    for m in 0..STAGE_K / CHUNK_D {
        let k = k0 + m * CHUNK_D + 8 * quad;
        let (k, size) = if k < d { (k as usize, 16) } else { (0, 0) };
        for (nt, row) in h_rows.iter().enumerate() {
            // SAFETY: as above, for the lane's own hidden piece.
            unsafe {
                cp_async_ca_shared_global_16(st.hidden::<NB>(stage, m, nt as u32), row.add(k) as *const u32, size)
            };
        }
    }
    cp_async_commit_group();
}

/// Reads MMA chunk `m` of a staged slab back as fragments: lane `(group, quad)` takes its rows
/// `ROWS_PER_LANE·group + j`, piece `4m + quad` (D columns `32m + 8quad ..`), and its hidden pieces.
#[inline(always)]
unsafe fn read_chunk<const NB: usize>(
    st: Staging,
    stage: u32,
    m: u32,
    group: u32,
    quad: u32,
) -> ([[u32; 4]; ROWS_PER_LANE], [[u32; 4]; NB]) {
    let mut a = [[0u32; 4]; ROWS_PER_LANE];
    let mut h = [[0u32; 4]; NB];
    for (j, x) in a.iter_mut().enumerate() {
        let r = ROWS_PER_LANE as u32 * group + j as u32;
        // SAFETY: a slot whose copies completed and were made visible by `bar.warp.sync`.
        *x = unsafe { ld_shared_v4_u32(st.weight::<NB>(stage, r, 4 * m + quad)) };
    }
    for (nt, x) in h.iter_mut().enumerate() {
        // SAFETY: as above (this lane's own copies).
        *x = unsafe { ld_shared_v4_u32(st.hidden::<NB>(stage, m, nt as u32)) };
    }
    (a, h)
}

/// Two k16 MMAs per M tile and N tile on one chunk of fragments.
#[inline(always)]
pub(super) unsafe fn mma_chunk<const NB: usize>(
    acc: &mut Accumulators<NB>,
    a: &[[u32; 4]; ROWS_PER_LANE],
    h: &[[u32; 4]; NB],
) {
    for mt in 0..M_TILES_PER_WARP {
        let (lo, hi) = (a[2 * mt], a[2 * mt + 1]); // MMA rows `group` and `group + 8`
        for nt in 0..NB {
            // SAFETY: the caller runs this warp-uniformly (converged).
            unsafe {
                mma(&mut acc[mt][nt], [lo[0], hi[0], lo[1], hi[1]], [h[nt][0], h[nt][1]]);
                mma(&mut acc[mt][nt], [lo[2], hi[2], lo[3], hi[3]], [h[nt][2], h[nt][3]]);
            }
        }
    }
}

/// Logits of one warp tile (the lane's vocab rows × the warp's batch rows), accumulated in f32 over
/// all of D through an `S`-deep `cp.async` pipeline of `STAGE_K`-column slabs: while one slab is
/// multiplied, the next ones are in flight, whatever the compiler's instruction schedule (the copies
/// hold no registers). Trip counts are warp-uniform, so the MMAs run converged.
#[inline(always)]
unsafe fn mainloop<const NB: usize, const S: u32>(
    p: &FusedParams,
    st: Staging,
    tile: u32,
    h_rows: &[*const u16; NB],
    group: u32,
    quad: u32,
) -> Accumulators<NB> {
    let mut acc: Accumulators<NB> = [[[0.0; 4]; NB]; M_TILES_PER_WARP];
    let s_depth = S;
    let n_stages = p.d.div_ceil(STAGE_K);
    for s in 0..s_depth - 1 {
        if s < n_stages {
            // SAFETY: every lane finished reading the ring (previous tile) before the barrier below.
            unsafe { issue_stage::<NB>(p, st, s, tile, h_rows, s * STAGE_K, quad) };
        } else {
            cp_async_commit_group();
        }
    }
    for c in 0..n_stages {
        wait_oldest_stage::<S>(); // stage c: at most S - 2 newer groups stay pending
        bar_warp_sync(); // every lane's copies of stage c are visible; every lane is done with c - 1
        let next = c + s_depth - 1;
        if next < n_stages {
            // SAFETY: slot `next % s_depth` held stage c - 1, which every lane read before the barrier.
            unsafe { issue_stage::<NB>(p, st, next % s_depth, tile, h_rows, next * STAGE_K, quad) };
        } else {
            cp_async_commit_group();
        }
        for m in 0..STAGE_K / CHUNK_D {
            // SAFETY: stage c has landed; warp-uniform trip counts.
            unsafe {
                let (a, h) = read_chunk::<NB>(st, c % s_depth, m, group, quad);
                mma_chunk::<NB>(&mut acc, &a, &h);
            }
        }
    }
    // All lanes are done with the ring before the next tile's prologue overwrites it.
    bar_warp_sync();
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

/// Transform + noise + argmax of one warp tile into the lane's per-column candidates.
///
/// One heavy iteration (Philox + logs) per batch column the lane owns: a real loop, so the lane's
/// logits for column `i` are picked with constant indices by `column_logits`, keeping `acc` in
/// registers (a run-time index would move it to local memory).
#[inline(always)]
pub(super) fn epilogue_tile<const NB: usize>(
    p: &FusedParams,
    pos: LanePosition,
    v0: u32,
    acc: &Accumulators<NB>,
    cands: &mut [Candidate; 16],
) {
    for i in 0..2 * NB as u32 {
        // Accumulator element `e` (+2 for MMA row group+8) is batch column 2·quad + e of N tile nt.
        let b = pos.b0 + 8 * (i / 2) + 2 * pos.quad + i % 2;
        if b < p.b {
            // SAFETY: b < B and `streams` holds B entries.
            let stream = unsafe { *p.streams.add(b as usize) };
            let noise = RowNoise { seed: p.seed, stream, sample: p.sample };
            update_aligned(&mut cands[i as usize], &column_logits::<NB>(acc, i), v0, p.v, &noise, &p.transform);
        }
    }
}

/// Merges the lanes' candidates over the eight lane groups (shuffles) and over the block's warps that
/// hold the same batch rows (shared memory), and writes `candidates[b, vrange]`. The block has `warps`
/// warps; warp `w` holds batch slot `w % warps_b` (rows `8·NB·(w % warps_b) ..` of the batch tile).
///
/// # Safety
/// Every thread of the block calls it; `8·NB ≤ 32`, so the slots fit in `candidate_smem_bytes(warps)`.
#[inline(always)]
pub(super) unsafe fn write_candidates<const NB: usize, const C: usize>(
    p: &FusedParams,
    pos: LanePosition,
    warps: u32,
    warps_b: u32,
    cands: &[Candidate; C],
) {
    let warp_rows = 8 * NB as u32;
    let smem = mov_u32_dynamic_smem();
    // Constant indices: `cands` stays in registers in the kernels whose epilogue indexes it so too.
    unrolled!(I in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] {
        if I < 2 * NB {
            let col = 8 * (I as u32 / 2) + 2 * pos.quad + I as u32 % 2;
            // SAFETY: all lanes reach this point (no early exit above).
            let cand = unsafe { merge_butterfly(cands[I], [4, 8, 16]) };
            if pos.group == 0 {
                let slot = smem + 8 * (pos.warp * warp_rows + col);
                // SAFETY: slot < warps · 8·NB · 8, inside the candidate area at the window's start.
                unsafe { st_shared_v2_u32(slot, [cand.score.to_bits(), cand.index]) };
            }
        }
    });
    // SAFETY: every thread of the block reaches the barrier.
    unsafe { _syncthreads() };
    // Thread t takes batch rows t, t + 32·warps, … of the block's warps_b · 8NB rows: warp slot
    // row / 8NB, column row % 8NB, merged over the warps / warps_b warps that hold that slot.
    let block_first = pos.b0 - (pos.warp % warps_b) * warp_rows;
    let mut row = pos.warp * 32 + 4 * pos.group + pos.quad;
    while row < warps_b * warp_rows {
        let (wb, col) = (row / warp_rows, row % warp_rows);
        let b = block_first + row;
        if b < p.b {
            let mut cand = Candidate::EMPTY;
            for wv in 0..warps / warps_b {
                let w = wv * warps_b + wb;
                // SAFETY: inside the shared memory written above, after the barrier.
                let [s, i] = unsafe { ld_shared_v2_u32(smem + 8 * (w * warp_rows + col)) };
                cand = cand.merge(Candidate { score: f32::from_bits(s), index: i });
            }
            // SAFETY: b < B, vrange < n_vranges: inside the [B, n_vranges] candidate buffer.
            unsafe { *p.candidates.add(b as usize * p.n_vranges as usize + pos.vrange as usize) = cand };
        }
        row += 32 * warps;
    }
}
