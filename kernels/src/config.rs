//! Tile configuration and thread mapping, defined once and shared by the kernels and the host code
//! that launches them.
//!
//! # Tiles
//! The fused kernel computes logits with `mma.sync.m16n8k16` (bf16 × bf16 → f32). The weight is the
//! MMA's A operand (16 vocab rows per M tile) and the hidden states its B operand (8 batch rows per N
//! tile), so a decode batch of 1–8 rows wastes only the unused N columns of a cheap MMA while every
//! weight byte is read once.
//!
//! | constant | value | meaning |
//! |---|---|---|
//! | [`WARPS_PER_BLOCK`] | 4 | warps per block |
//! | [`M_TILES_PER_WARP`] | 2 | 16-row M tiles per warp |
//! | [`WARP_TILE_V`] | 32 | vocab rows per warp tile (the unit of work) |
//! | [`BLOCK_V`] | 128 | vocab tile of the CPU backend (any multiple of 4 gives the same samples) |
//! | `BLOCK_B` | 8 · NB · warps_b | batch rows per block, NB ∈ [`N_TILE_VARIANTS`], warps_b ∈ {1, 2, 4} (≤ 128) |
//! | [`CHUNK_D`] | 32 | D consumed per mainloop step (two k16 MMAs) |
//! | [`STAGE_K`] | 64 | D columns per pipeline stage (one cache line per weight row) |
//! | [`stages`]`(NB)` | 4 or 3 | `cp.async` pipeline depth per warp |
//! | [`D_ALIGN`] | 8 | D must be a multiple of this (16-byte loads) |
//!
//! # Thread mapping (fused kernel)
//! `lane = tid % 32`, `warp = tid / 32`, `group = lane / 4`, `quad = lane % 4`.
//!
//! - **Grid**: persistent, as many blocks per multiprocessor as the kernel's occupancy allows (the
//!   host asks the driver). Block `blk` covers batch tile `blk % n_btiles` and vocab range
//!   `blk / n_btiles`. A range is an even share of the `ceil(V / WARP_TILE_V)` warp tiles; the batch
//!   tiles of one range are adjacent, so they share its weight rows through L2.
//! - **Warps**: a `warps_v × warps_b` grid ([`warps_b_for_batch`]). Warp `w` serves batch rows
//!   `b0 = btile·BLOCK_B + (w % warps_b)·8·NB …` and takes warp tiles
//!   `first + w / warps_b, first + w / warps_b + warps_v, …` of the range.
//! - **Rows per lane**: in warp tile `t`, lane `(group, quad)` owns the `ROWS_PER_LANE` consecutive
//!   vocab rows starting at `t·WARP_TILE_V + group·ROWS_PER_LANE`. M tile `mt`, half `h` (MMA row
//!   `group + 8h`) is vocab row `… + 2mt + h`, so a lane's rows form whole Philox groups of four.
//! - **Along D**: lane `quad` takes the 16 bytes at `kc + 8·quad` of each of its rows and of hidden
//!   row `b0 + 8nt + group`. The eight bf16 are the k-slots of two consecutive k16 MMAs (any
//!   k-permutation shared by A and B leaves the dot product unchanged).
//! - **Staging**: weights reach those fragments through the warp's shared-memory ring. `cp.async`
//!   copies whole 128-byte lines (4 rows per instruction), then a `bar.warp.sync`, then swizzled,
//!   conflict-free 16-byte reads (see [`fused_smem_bytes`]). Each lane stages its own hidden pieces.

/// Warps per block of the fused kernel.
pub const WARPS_PER_BLOCK: u32 = 4;
/// Threads per block of the fused kernel.
pub const THREADS_PER_BLOCK: u32 = WARPS_PER_BLOCK * 32;
/// 16-row MMA M tiles per warp (even, so each lane owns whole Philox groups).
pub const M_TILES_PER_WARP: usize = 2;
/// Vocab rows per lane.
pub const ROWS_PER_LANE: usize = 2 * M_TILES_PER_WARP;
/// Vocab rows per warp tile: the unit of work of one warp.
pub const WARP_TILE_V: u32 = 16 * M_TILES_PER_WARP as u32;
/// The CPU backend's default vocab tile (samples do not depend on tile sizes).
pub const BLOCK_V: u32 = WARPS_PER_BLOCK * WARP_TILE_V;
/// D consumed by one mainloop step (two k16 MMAs fed by one 16-byte load per row and lane).
pub const CHUNK_D: u32 = 32;
/// D must be a multiple of this: every 16-byte load is then either fully inside a row or fully out.
pub const D_ALIGN: u32 = 8;
/// Largest supported D, V and B: all offsets are computed in u32 element counts per row, and
/// `V · D` / `B · D` element offsets in u64.
pub const MAX_DIM: u32 = 1 << 30;
/// Per-warp batch variants: `NB` N tiles of 8 rows (a 64-row variant needs more than 255 registers
/// with this mainloop and is not built).
pub const N_TILE_VARIANTS: [u32; 3] = [1, 2, 4];

/// Threads per block of the candidate-reduction kernel (one warp per batch row).
pub const REDUCE_THREADS_PER_BLOCK: u32 = 128;
/// Batch rows per block of the candidate-reduction kernel.
pub const REDUCE_ROWS_PER_BLOCK: u32 = REDUCE_THREADS_PER_BLOCK / 32;

/// Warp tiles of a vocab of size `v`.
#[inline]
pub const fn n_warp_tiles(v: u32) -> u32 {
    v.div_ceil(WARP_TILE_V)
}

/// Depth of each warp's `cp.async` pipeline (`stages - 1` slabs in flight while one is multiplied), by
/// N-tile count: 4 for 8-row warps, 3 for wider ones so two blocks fit in shared memory per SM.
#[inline]
pub const fn stages(n_tiles: u32) -> u32 {
    if n_tiles == 1 { 4 } else { 3 }
}
/// D columns per pipeline stage: 64 bf16 = one 128-byte cache line of each of the warp tile's rows.
pub const STAGE_K: u32 = 64;
/// Shared memory reserved at the start of the dynamic window for the block's candidate merge:
/// one 8-byte candidate per warp and batch row of the widest (32-row) warp.
pub const CANDIDATE_SMEM_BYTES: u32 = WARPS_PER_BLOCK * 32 * 8;

/// Vocab ranges (= candidates per batch row) for `sm_count` multiprocessors running `per_sm` blocks
/// each (the host uses the kernel's occupancy), `n_btiles` batch tiles and vocab size `v`: enough blocks to
/// fill the persistent grid, at least one warp tile each.
#[inline]
pub const fn n_vranges(sm_count: u32, per_sm: u32, n_btiles: u32, v: u32) -> u32 {
    let want = sm_count * per_sm / n_btiles;
    let want = if want == 0 { 1 } else { want };
    let tiles = n_warp_tiles(v);
    if want < tiles { want } else { tiles }
}
/// The batch tile (number of 8-row N tiles) the host picks for batch size `b`.
#[inline]
pub const fn n_tiles_for_batch(b: u32) -> u32 {
    if b <= 8 {
        1
    } else if b <= 16 {
        2
    } else {
        4
    }
}

/// Warps of a block that split the batch (each `8·NB` rows), the rest splitting the vocab: 1 up to
/// 32 rows, then 2 up to 64 and 4 beyond, so one block covers up to 128 batch rows and reads each
/// weight tile from HBM once for all of them (sibling warps hit L1).
#[inline]
pub const fn warps_b_for_batch(b: u32) -> u32 {
    if b <= 32 {
        1
    } else if b <= 64 {
        2
    } else {
        WARPS_PER_BLOCK
    }
}

/// Batch rows per block for a given N-tile count and `warps_b`.
#[inline]
pub const fn block_b(n_tiles: u32, warps_b: u32) -> u32 {
    8 * n_tiles * warps_b
}

/// Dynamic shared memory of the fused kernel: the candidate merge area, then each warp's staging ring
/// of `stages(NB)` slots × (a `WARP_TILE_V × STAGE_K` bf16 weight slab + `STAGE_K / CHUNK_D · NB` hidden
/// pieces of 32 lanes × 16 bytes).
#[inline]
pub const fn fused_smem_bytes(n_tiles: u32) -> u32 {
    CANDIDATE_SMEM_BYTES
        + WARPS_PER_BLOCK * stages(n_tiles) * (WARP_TILE_V * STAGE_K * 2 + STAGE_K / CHUNK_D * n_tiles * 512)
}

/// PTX entry-point name of the fused kernel for `n_tiles`.
pub const fn fused_entry(n_tiles: u32) -> &'static str {
    match n_tiles {
        1 => "fused_sample_nb1",
        2 => "fused_sample_nb2",
        _ => "fused_sample_nb4",
    }
}

/// PTX entry point of the candidate-reduction kernel.
pub const REDUCE_ENTRY: &str = "reduce_candidates";
/// PTX entry point of the Philox test kernel.
pub const PHILOX_ENTRY: &str = "philox_test";
/// PTX entry point of the Gumbel-noise test kernel.
pub const GUMBEL_ENTRY: &str = "gumbel_test";

/// Benchmark baselines over materialized logits (`device::baselines`).
pub const GUMBEL_LOGITS_ENTRY: &str = "gumbel_logits";
/// Softmax baseline.
pub const SOFTMAX_ENTRY: &str = "softmax_rows";
/// Inverse-CDF multinomial baseline.
pub const MULTINOMIAL_ENTRY: &str = "multinomial_rows";
/// Threads per block of the baseline kernels.
pub const BASELINE_THREADS: u32 = 512;
/// Logits per block of the Gumbel-over-logits baseline (one candidate per row per chunk).
pub const LOGITS_CHUNK: u32 = 4 * BASELINE_THREADS * 4;
/// Shared memory of the baseline kernels (one 8-byte slot per warp).
pub const BASELINE_SMEM_BYTES: u32 = 8 * (BASELINE_THREADS / 32);

/// Every kernel entry point in the PTX module (the link step keeps exactly these).
pub const ENTRY_POINTS: [&str; 9] = [
    GUMBEL_LOGITS_ENTRY,
    SOFTMAX_ENTRY,
    MULTINOMIAL_ENTRY,
    "fused_sample_nb1",
    "fused_sample_nb2",
    "fused_sample_nb4",
    REDUCE_ENTRY,
    PHILOX_ENTRY,
    GUMBEL_ENTRY,
];
