//! Tile configuration and thread mapping, defined once and shared by the kernels and the host code
//! that launches them.
//!
//! # Tiles
//! The `mma.sync` kernels compute logits with `mma.sync.m16n8k16` (bf16 × bf16 → f32). The weight is
//! the MMA's A operand (16 vocab rows per M tile) and the hidden states its B operand (8 batch rows
//! per N tile), so a decode batch of 1–8 rows wastes only the unused N columns of a cheap MMA while
//! every weight byte is read once. The `wgmma` kernels ([`Staging::Wgmma`], sm_90a) use
//! `wgmma.mma_async.m64nNk16` with the same operand roles: two 64-row A tiles (128 vocab rows) per
//! tile and N = `BLOCK_B` batch rows; their thread mapping is in `device::fused_wgmma` (one warpgroup
//! per block) and `device::fused_ws` ([`Staging::WgmmaWs`], [`Staging::WgmmaTma`]: a producer and two
//! consumer warpgroups). `device::fused_ws_t` ([`Staging::WgmmaTmaT`]) swaps the roles: the hidden
//! states are the A operand (64 batch rows per consumer) and a 256-row vocab tile the B operand.
//!
//! | constant | value | meaning |
//! |---|---|---|
//! | [`WARPS_PER_BLOCK`] | 4 | warps per block (per-warp staging); vocab-splitting warps (block staging) |
//! | [`M_TILES_PER_WARP`] | 2 | 16-row M tiles per warp |
//! | [`WARP_TILE_V`] | 32 | vocab rows per warp tile |
//! | [`BLOCK_V`] | 128 | vocab rows of a block tile (block staging); the CPU backend's default tile |
//! | `BLOCK_B` | 8 · NB · warps_b | batch rows per block ([`FusedVariant::block_b`]) |
//! | [`CHUNK_D`] | 32 | D consumed per mainloop step (two k16 MMAs) |
//! | [`STAGE_K`] | 64 | D columns per pipeline stage (one cache line per staged row) |
//! | [`FusedVariant::stages`] | 3–6 | `cp.async` pipeline depth |
//! | [`D_ALIGN`] | 8 | D must be a multiple of this (16-byte loads) |
//!
//! Every compiled kernel variant (staging, NB, warps_b, stages) is one entry of [`FUSED_VARIANTS`];
//! [`variant_for_batch`] picks one per batch size. All `mma.sync` variants compute each logit with the
//! same MMAs in the same order, so they draw bit-identical samples; `wgmma` sums each k16 step in its
//! own order (same samples up to f32 near-ties).
//!
//! The thread mapping below is that of the `mma.sync` kernels.
//!
//! # Thread mapping (fused kernels)
//! `lane = tid % 32`, `warp = tid / 32`, `group = lane / 4`, `quad = lane % 4`.
//!
//! - **Grid**: persistent, as many blocks per multiprocessor as the kernel's occupancy allows (the
//!   host asks the driver). Block `blk` covers batch tile `blk % n_btiles` and vocab range
//!   `blk / n_btiles`. A range is an even share of the `ceil(V / tile_v)` tiles
//!   ([`FusedVariant::tile_v`]: 32-row warp tiles or 128-row block tiles); the batch tiles of one range
//!   are adjacent, so they share its weight rows through L2.
//! - **Warps**: per-warp staging: 4 warps of one 8·NB-row batch tile take the range's warp tiles
//!   round-robin. Block staging: `4 × warps_b` warps; warp `w` computes the 32 vocab rows
//!   `32·(w / warps_b) ..` of each block tile for batch rows `8·NB·(w % warps_b) ..` of the batch tile.
//! - **Rows per lane**: in warp tile `t`, lane `(group, quad)` owns the `ROWS_PER_LANE` consecutive
//!   vocab rows starting at `t·WARP_TILE_V + group·ROWS_PER_LANE`. M tile `mt`, half `h` (MMA row
//!   `group + 8h`) is vocab row `… + 2mt + h`, so a lane's rows form whole Philox groups of four.
//! - **Along D**: lane `quad` takes the 16 bytes at `kc + 8·quad` of each of its rows and of hidden
//!   row `b0 + 8nt + group`. The eight bf16 are the k-slots of two consecutive k16 MMAs (any
//!   k-permutation shared by A and B leaves the dot product unchanged).
//! - **Staging**: fragments are read from shared memory that `cp.async` fills in whole 128-byte lines,
//!   XOR-swizzled so the 16-byte fragment reads are conflict-free. Per-warp staging: each warp's own
//!   ring of weight slabs (then `bar.warp.sync`), and each lane stages its own hidden pieces. Block
//!   staging: one ring of weight + hidden slabs per block (then a block barrier); see
//!   `device::fused_block`.

/// Warps per block of the per-warp-staging kernel; also the warps splitting the vocab in a
/// block-staging kernel (whose block tile is therefore `4 × 32 = 128` vocab rows).
pub const WARPS_PER_BLOCK: u32 = 4;
/// 16-row MMA M tiles per warp (even, so each lane owns whole Philox groups).
pub const M_TILES_PER_WARP: usize = 2;
/// Vocab rows per lane.
pub const ROWS_PER_LANE: usize = 2 * M_TILES_PER_WARP;
/// Vocab rows per warp tile: the unit of work of one warp.
pub const WARP_TILE_V: u32 = 16 * M_TILES_PER_WARP as u32;
/// Vocab rows of a block-staging kernel's block tile; also the CPU backend's default vocab tile
/// (samples do not depend on tile sizes).
pub const BLOCK_V: u32 = WARPS_PER_BLOCK * WARP_TILE_V;
/// D consumed by one mainloop step (two k16 MMAs fed by one 16-byte load per row and lane).
pub const CHUNK_D: u32 = 32;
/// D must be a multiple of this: every 16-byte load is then either fully inside a row or fully out.
pub const D_ALIGN: u32 = 8;
/// Largest supported D, V and B: all offsets are computed in u32 element counts per row, and
/// `V · D` / `B · D` element offsets in u64.
pub const MAX_DIM: u32 = 1 << 30;
/// D columns per pipeline stage: 64 bf16 = one 128-byte cache line of each staged row.
pub const STAGE_K: u32 = 64;
/// Bytes of one staged row (weight or hidden) in a pipeline stage.
pub const STAGE_ROW_BYTES: u32 = STAGE_K * 2;
/// Shared memory reserved at the start of the dynamic window of a block of `warps` warps for its
/// candidate merge: one 8-byte candidate per warp and batch row of the widest warp (32 rows).
#[inline]
pub const fn candidate_smem_bytes(warps: u32) -> u32 {
    warps * 32 * 8
}
/// The candidate-merge area of a `wgmma` block (`warps` warps × `n` batch columns × 8 bytes).
#[inline]
pub const fn wgmma_candidate_smem_bytes(warps: u32, n: u32) -> u32 {
    warps * n * 8
}

/// Threads per block of the candidate-reduction kernel (one warp per batch row).
pub const REDUCE_THREADS_PER_BLOCK: u32 = 128;
/// Batch rows per block of the candidate-reduction kernel.
pub const REDUCE_ROWS_PER_BLOCK: u32 = REDUCE_THREADS_PER_BLOCK / 32;

/// Where a fused kernel stages its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staging {
    /// Each warp owns a ring of 32-row weight slabs and stages its own hidden pieces; warps run
    /// independently (no block barriers). Best when the batch is tiny: the hidden pieces cost little.
    PerWarp,
    /// One ring per block holds a `128 × STAGE_K` weight slab and the block's `BLOCK_B × STAGE_K`
    /// hidden slab per stage, filled by all threads and read by all warps after a block barrier: a
    /// hidden byte is staged once per 128 vocab rows, and the pipeline runs on across vocab tiles.
    Block,
    /// As `Block`, with one warpgroup per block whose `wgmma` (sm_90a) reads both operands straight
    /// from the ring; `NB = N / 8` only sets the batch width `N`. In the sm_90a module only.
    Wgmma,
    /// As `Wgmma`, warp-specialized: a producer warpgroup fills the ring with `cp.async`, two consumer
    /// warpgroups take turns on the tiles, and `mbarrier`s hand each stage over ([`WS_WARPS`] warps;
    /// see `device::fused_ws`). In the sm_90a module only.
    WgmmaWs,
    /// As `WgmmaWs`, but one producer warp fills each stage with tensor-memory-accelerator copies
    /// (`cp.async.bulk.tensor`, [TMA boxes](TMA_WEIGHT_ROW_STEP)) that complete on the stage's
    /// `mbarrier`; the consumer warpgroups take turns on the tiles (`warps_b = 1`) or split the batch
    /// tile, `N` rows each, sharing every stage's weight slab (`warps_b = 2`). Needs the launch's
    /// tensor maps ([`crate::params::TensorMaps`]). In the sm_90a module only.
    WgmmaTma,
    /// As `WgmmaTma` with the operand roles swapped: the hidden states are the `wgmma` A operand
    /// (64 batch rows per consumer) and a 256-row vocab tile the B operand (`m64n256k16`), so a
    /// weight byte staged in shared memory meets 64 batch rows per MMA and the tensor cores read
    /// 80 instead of 128 bytes per 2048 multiply-adds. Vocab tiles are 256 rows; V must be a
    /// multiple of 16 ([`tma_weight_tiles_t`]). See `device::fused_ws_t`. In the sm_90a module only.
    WgmmaTmaT,
}

/// The TMA weight box: a tensor map over the weight `[V, D]` copies `TMA_WEIGHT_BOX_ROWS` rows that
/// are `TMA_WEIGHT_ROW_STEP` vocab rows apart (its element stride along V), 64 D columns each.
/// Sixteen such boxes fill a stage's 128-row weight slab in the permuted row order of the `wgmma`
/// kernels (slab rows `64h + 16w + 8e + g`, `g = 0..8`, are vocab rows `32w + 2h + e + 4g` of the
/// tile), so each lane's accumulators stay whole Philox groups of four vocab rows.
pub const TMA_WEIGHT_ROW_STEP: u32 = 4;
/// Rows of one TMA weight box (see [`TMA_WEIGHT_ROW_STEP`]).
pub const TMA_WEIGHT_BOX_ROWS: u32 = 8;
/// TMA weight boxes per stage: 128 slab rows / 8.
pub const TMA_WEIGHT_BOXES: u32 = BLOCK_V / TMA_WEIGHT_BOX_ROWS;

/// Slab row `s` of a `wgmma` stage → offset of its vocab row in the 128-row tile. The two 64-row
/// halves `h` of the slab are the A operands of two `m64nNk16` MMAs; slab row `64h + 16w + 8e + g`
/// holds vocab row `4·(8w + g) + 2h + e`, so the accumulators of lane `(w, g, q)` (MMA rows
/// `16w + g` and `16w + g + 8` of both halves) are four consecutive vocab rows: one Philox group.
#[inline]
pub const fn vocab_of_slab_row(s: u32) -> u32 {
    let (h, w, g, e) = (s / 64, (s % 64) / 16, s % 8, (s % 16) / 8);
    4 * (8 * w + g) + 2 * h + e
}

/// A TMA tensor map's geometry (`R` dimensions, innermost first), as `cuTensorMapEncodeTiled`
/// takes it; the data type is bf16, the swizzle 128 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TmaLayout<const R: usize> {
    /// Elements per dimension.
    pub dims: [u64; R],
    /// Bytes between consecutive indices of each dimension (`strides[0]` = 2, the element size;
    /// the driver takes `strides[1..]`).
    pub strides: [u64; R],
    /// Box: elements traversed per dimension.
    pub boxes: [u32; R],
    /// Traversal step per dimension (`boxes[i] / element_strides[i]` elements are copied).
    pub element_strides: [u32; R],
}

impl<const R: usize> TmaLayout<R> {
    /// Byte offset of box element `at` (box coordinates, the box at the origin).
    pub const fn offset(&self, at: [u64; R]) -> u64 {
        let mut off = 0;
        let mut i = 0;
        while i < R {
            off += at[i] * self.element_strides[i] as u64 * self.strides[i];
            i += 1;
        }
        off
    }
}

/// The one-box-per-tile weight map over rows `0 .. 32·⌊V/32⌋` of the weight `[V, D]`: dimensions
/// D, `g` (stride 4 rows), `e` (1 row), `w` (32 rows), `h` (2 rows), box `64 × 8 × 2 × 4 × 2`, so box
/// element `(k, g, e, w, h)` lands at slab row `g + 8e + 16w + 64h` and is vocab row
/// [`vocab_of_slab_row`] of it (the tile at `w = 4·tile`). `None` when V < 32.
pub const fn tma_weight_tiles(d: u32, v: u32) -> Option<TmaLayout<5>> {
    let row = 2 * d as u64;
    if v < 32 {
        return None;
    }
    Some(TmaLayout {
        dims: [d as u64, 8, 2, (v / 32) as u64, 2],
        strides: [2, 4 * row, row, 32 * row, 2 * row],
        boxes: [STAGE_K, 8, 2, 4, 2],
        element_strides: [1; 5],
    })
}

/// Vocab rows per tile of the hidden-as-A kernels ([`Staging::WgmmaTmaT`]): the N of `m64n256k16`.
pub const TMA_T_TILE_V: u32 = 256;
/// V must be a multiple of this for the hidden-as-A kernels: their one-box weight map covers whole
/// 16-row groups, and rows past V are then exactly the ones outside the map (zeros).
pub const TMA_T_VOCAB_ALIGN: u32 = 16;

/// Slab row `n` of a hidden-as-A stage (the B operand, 256 vocab rows) → offset of its vocab row in
/// the tile. Accumulator `4j + 2e + c` of lane `(w, g, q)` is batch row `16w + g + 8e`, column
/// `n = 8j + 2q + c`; slab row `16J + 8i + 2q + c` holds vocab row `16J + 4q + 2i + c`, so the
/// columns of `j = 2J` and `2J + 1` are the four consecutive vocab rows `16J + 4q ..`: one Philox
/// group per lane and batch row.
#[inline]
pub const fn vocab_of_slab_row_t(n: u32) -> u32 {
    let (big_j, i, q, c) = (n / 16, (n / 8) % 2, (n / 2) % 4, n % 2);
    16 * big_j + 4 * q + 2 * i + c
}

/// The one-box-per-tile weight map of the hidden-as-A kernels over the weight `[V, D]`
/// (`V % 16 == 0`): dimensions D, `c` (stride 1 row), `q` (4 rows), `i` (2 rows), `J` (16 rows,
/// `V / 16` of them), box `64 × 2 × 4 × 2 × 16`, so box element `(k, c, q, i, J)` lands at slab row
/// `c + 2q + 8i + 16J` and is vocab row [`vocab_of_slab_row_t`] of it (the tile at `J = 16·tile`);
/// rows past V lie outside the map (zeros). `None` when `V % 16 ≠ 0`.
pub const fn tma_weight_tiles_t(d: u32, v: u32) -> Option<TmaLayout<5>> {
    let row = 2 * d as u64;
    if v % TMA_T_VOCAB_ALIGN != 0 {
        return None;
    }
    Some(TmaLayout {
        dims: [d as u64, 2, 4, 2, (v / 16) as u64],
        strides: [2, row, 4 * row, 2 * row, 16 * row],
        boxes: [STAGE_K, 2, 4, 2, 16],
        element_strides: [1; 5],
    })
}

/// The row-box weight map over the whole weight `[V, D]`: box `64 × 32` with element strides
/// `1 × 4` ([`TMA_WEIGHT_BOX_ROWS`] rows [`TMA_WEIGHT_ROW_STEP`] apart); box `i` of a tile starts
/// at vocab row [`vocab_of_slab_row`]`(8i)` and lands at slab row `8i`. Rows past V are zeros.
pub const fn tma_weight_rows(d: u32, v: u32) -> TmaLayout<2> {
    TmaLayout {
        dims: [d as u64, v as u64],
        strides: [2, 2 * d as u64],
        boxes: [STAGE_K, TMA_WEIGHT_BOX_ROWS * TMA_WEIGHT_ROW_STEP],
        element_strides: [1, TMA_WEIGHT_ROW_STEP],
    }
}

/// The hidden-state map over `[B, D]`: box `64 × block_b` rows; rows past B are zeros.
pub const fn tma_hidden(d: u32, b: u32, block_b: u32) -> TmaLayout<2> {
    TmaLayout {
        dims: [d as u64, b as u64],
        strides: [2, 2 * d as u64],
        boxes: [STAGE_K, block_b],
        element_strides: [1, 1],
    }
}

/// Warps per block of a warp-specialized kernel ([`Staging::WgmmaWs`]): three warpgroups.
pub const WS_WARPS: u32 = 12;

/// One compiled variant of the fused kernel: its entry point and tile shape, defined once here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusedVariant {
    /// PTX entry point.
    pub entry: &'static str,
    /// `NB`: 8-row MMA N tiles per warp (a warp covers `8·NB` batch rows).
    pub n_tiles: u32,
    /// Warps splitting the batch (each `8·NB` rows); the others split the vocab. For
    /// [`Staging::WgmmaTma`]: 1 = the consumer warpgroups take turns on the tiles, 2 = they split the
    /// batch tile (`N = 8·NB` rows each) and share every stage's weight slab.
    pub warps_b: u32,
    /// Operand staging.
    pub staging: Staging,
    /// `cp.async` pipeline depth (`stages − 1` stages in flight while one is multiplied).
    pub stages: u32,
}

/// Every fused-kernel variant in the PTX module. `NB = 8` per warp would need more than 255
/// registers with this mainloop, so wide batches use more warps instead.
#[rustfmt::skip]
pub const FUSED_VARIANTS: [FusedVariant; 21] = [
    FusedVariant { entry: "fused_sample_warp_nb1",          n_tiles: 1,  warps_b: 1, staging: Staging::PerWarp,  stages: 4 },
    FusedVariant { entry: "fused_sample_block_nb1",         n_tiles: 1,  warps_b: 1, staging: Staging::Block,    stages: 4 },
    FusedVariant { entry: "fused_sample_block_nb2",         n_tiles: 2,  warps_b: 1, staging: Staging::Block,    stages: 4 },
    FusedVariant { entry: "fused_sample_block_nb2_s3",      n_tiles: 2,  warps_b: 1, staging: Staging::Block,    stages: 3 },
    FusedVariant { entry: "fused_sample_block_nb4",         n_tiles: 4,  warps_b: 1, staging: Staging::Block,    stages: 5 },
    FusedVariant { entry: "fused_sample_block_nb4_s3",      n_tiles: 4,  warps_b: 1, staging: Staging::Block,    stages: 3 },
    FusedVariant { entry: "fused_sample_block_nb4x2",       n_tiles: 4,  warps_b: 2, staging: Staging::Block,    stages: 4 },
    FusedVariant { entry: "fused_sample_block_nb4x4",       n_tiles: 4,  warps_b: 4, staging: Staging::Block,    stages: 6 },
    FusedVariant { entry: "fused_sample_wgmma_n32",         n_tiles: 4,  warps_b: 1, staging: Staging::Wgmma,    stages: 4 },
    FusedVariant { entry: "fused_sample_wgmma_n64",         n_tiles: 8,  warps_b: 1, staging: Staging::Wgmma,    stages: 4 },
    FusedVariant { entry: "fused_sample_wgmma_n128",        n_tiles: 16, warps_b: 1, staging: Staging::Wgmma,    stages: 3 },
    FusedVariant { entry: "fused_sample_wgmma_ws_n16",      n_tiles: 2,  warps_b: 1, staging: Staging::WgmmaWs,  stages: 10 },
    FusedVariant { entry: "fused_sample_wgmma_ws_n32",      n_tiles: 4,  warps_b: 1, staging: Staging::WgmmaWs,  stages: 10 },
    FusedVariant { entry: "fused_sample_wgmma_ws_n64",      n_tiles: 8,  warps_b: 1, staging: Staging::WgmmaWs,  stages: 8 },
    FusedVariant { entry: "fused_sample_wgmma_tma_n16",     n_tiles: 2,  warps_b: 1, staging: Staging::WgmmaTma, stages: 10 },
    FusedVariant { entry: "fused_sample_wgmma_tma_n32",     n_tiles: 4,  warps_b: 1, staging: Staging::WgmmaTma, stages: 10 },
    FusedVariant { entry: "fused_sample_wgmma_tma_n64",     n_tiles: 8,  warps_b: 1, staging: Staging::WgmmaTma, stages: 8 },
    FusedVariant { entry: "fused_sample_wgmma_tma_n32x2",   n_tiles: 4,  warps_b: 2, staging: Staging::WgmmaTma, stages: 8 },
    FusedVariant { entry: "fused_sample_wgmma_tma_n64x2",   n_tiles: 8,  warps_b: 2, staging: Staging::WgmmaTma, stages: 6 },
    FusedVariant { entry: "fused_sample_wgmma_tmat_n64",    n_tiles: 8,  warps_b: 1, staging: Staging::WgmmaTmaT, stages: 5 },
    FusedVariant { entry: "fused_sample_wgmma_tmat_n64x2",  n_tiles: 8,  warps_b: 2, staging: Staging::WgmmaTmaT, stages: 4 },
];

impl FusedVariant {
    /// Warps per block.
    #[inline]
    pub const fn warps(&self) -> u32 {
        match self.staging {
            Staging::PerWarp | Staging::Wgmma => WARPS_PER_BLOCK,
            Staging::Block => WARPS_PER_BLOCK * self.warps_b,
            Staging::WgmmaWs | Staging::WgmmaTma | Staging::WgmmaTmaT => WS_WARPS,
        }
    }
    /// Whether the variant is warp-specialized (a producer and two consumer warpgroups).
    #[inline]
    pub const fn warp_specialized(&self) -> bool {
        matches!(self.staging, Staging::WgmmaWs | Staging::WgmmaTma | Staging::WgmmaTmaT)
    }
    /// Whether the variant copies with TMA and so needs the launch's tensor maps.
    #[inline]
    pub const fn uses_tma(&self) -> bool {
        matches!(self.staging, Staging::WgmmaTma | Staging::WgmmaTmaT)
    }
    /// Whether the kernel runs for vocab size `v` (the hidden-as-A kernels need `v % 16 == 0`).
    #[inline]
    pub const fn supports_vocab(&self, v: u32) -> bool {
        !matches!(self.staging, Staging::WgmmaTmaT) || v % TMA_T_VOCAB_ALIGN == 0
    }
    /// Whether the variant is in the sm_90a module (needs a compute capability 9.0 GPU).
    #[inline]
    pub const fn needs_sm90a(&self) -> bool {
        matches!(self.staging, Staging::Wgmma | Staging::WgmmaWs | Staging::WgmmaTma | Staging::WgmmaTmaT)
    }
    /// Threads per block.
    #[inline]
    pub const fn threads(&self) -> u32 {
        32 * self.warps()
    }
    /// Batch rows per block (`BLOCK_B`).
    #[inline]
    pub const fn block_b(&self) -> u32 {
        8 * self.n_tiles * self.warps_b
    }
    /// Vocab rows of the unit a vocab range is made of: a warp tile (per-warp staging) or a block
    /// tile of `WARPS_PER_BLOCK` warp tiles (block staging).
    #[inline]
    pub const fn tile_v(&self) -> u32 {
        match self.staging {
            Staging::PerWarp => WARP_TILE_V,
            Staging::Block | Staging::Wgmma | Staging::WgmmaWs | Staging::WgmmaTma => BLOCK_V,
            Staging::WgmmaTmaT => TMA_T_TILE_V,
        }
    }
    /// Bytes of one pipeline stage (the whole ring's share for block staging, one warp's for
    /// per-warp staging): weight rows and hidden rows, [`STAGE_ROW_BYTES`] each.
    #[inline]
    pub const fn stage_bytes(&self) -> u32 {
        match self.staging {
            // 32 weight rows, then 2·NB hidden pieces of 32 lanes × 16 bytes (= NB·8 rows).
            Staging::PerWarp => (WARP_TILE_V + 8 * self.n_tiles) * STAGE_ROW_BYTES,
            Staging::Block | Staging::Wgmma | Staging::WgmmaWs | Staging::WgmmaTma | Staging::WgmmaTmaT => {
                (self.tile_v() + self.block_b()) * STAGE_ROW_BYTES
            }
        }
    }
    /// Dynamic shared memory: the candidate merge area, then the staging ring(s).
    #[inline]
    pub const fn smem_bytes(&self) -> u32 {
        match self.staging {
            Staging::PerWarp => candidate_smem_bytes(self.warps()) + WARPS_PER_BLOCK * self.stages * self.stage_bytes(),
            Staging::Block => candidate_smem_bytes(self.warps()) + self.stages * self.stage_bytes(),
            // 1024 bytes of slack: the ring starts at the next 1024-byte boundary (swizzle atoms).
            Staging::Wgmma => {
                1024 + wgmma_candidate_smem_bytes(WARPS_PER_BLOCK, self.block_b()) + self.stages * self.stage_bytes()
            }
            // 8-byte barriers between the merge area (each warp's `N = 8·NB` columns) and the ring:
            // full and empty per ring slot, and one turn per consumer warpgroup.
            Staging::WgmmaWs | Staging::WgmmaTma | Staging::WgmmaTmaT => {
                1024 + wgmma_candidate_smem_bytes(WS_WARPS, 8 * self.n_tiles)
                    + 8 * (2 * self.stages + 2)
                    + self.stages * self.stage_bytes()
            }
        }
    }
    /// Vocab ranges (= candidates per batch row) for `sm_count` multiprocessors running `per_sm`
    /// blocks each (the host uses the kernel's occupancy), `n_btiles` batch tiles and vocab size
    /// `v`: enough blocks to fill the persistent grid, at least one tile each.
    #[inline]
    pub const fn n_vranges(&self, sm_count: u32, per_sm: u32, n_btiles: u32, v: u32) -> u32 {
        let want = sm_count * per_sm / n_btiles;
        let want = if want == 0 { 1 } else { want };
        let tiles = v.div_ceil(self.tile_v());
        if want < tiles { want } else { tiles }
    }
    /// Vocab rows of the largest vocab range (whole tiles) for `b` rows and vocab size `v` on
    /// `sm_count` multiprocessors with one block each: what the block that finishes last streams.
    #[inline]
    pub const fn largest_range_rows(&self, sm_count: u32, b: u32, v: u32) -> u32 {
        let n_btiles = b.div_ceil(self.block_b());
        let n_btiles = if n_btiles == 0 { 1 } else { n_btiles };
        let n = self.n_vranges(sm_count, 1, n_btiles, v);
        v.div_ceil(self.tile_v()).div_ceil(n) * self.tile_v()
    }
}

/// The variant the host launches for batch size `b` and vocab size `v` (an index into
/// [`FUSED_VARIANTS`]) on `sm_count` multiprocessors, with `sm90a` telling whether the `wgmma`
/// variants are loaded (compute capability 9.0), chosen from the `cargo bench -- --variants` sweeps
/// on the H200 (BENCHMARKS.md, `benchmarks/h200-2026-11-29p`): the warp-specialized TMA kernels,
/// N = 16 up to 16 rows and 32 up to 32; up to 64 rows `tma_n64`, or `tmat_n64` when its largest
/// vocab range is no longer ([`FusedVariant::largest_range_rows`]: both run one 384-thread block per
/// multiprocessor and stream their weights at about the same rate, `tmat_n64` with a quarter instead
/// of half a weight byte of hidden rows per weight byte through L2; Llama-3-70B: 1024 rows each,
/// `tmat_n64` 1–2% faster in sweeps `p` and `x`; Qwen3-8B: 1280 against 1152 rows, `tma_n64` 4–6%
/// faster); beyond 64 rows the hidden-as-A kernels (`tmat_n64` up to 128 rows, `tmat_n64x2` beyond).
/// The hidden-as-A kernels need `v % 16 == 0`, else `tma_n64` and `tma_n64x2`. Without sm_90a,
/// per-warp staging up to 16 rows, then block staging with 32-row warps (4 warps up to 32 rows,
/// 8 up to 64, 16 beyond). Every choice supports `v` ([`FusedVariant::supports_vocab`]).
#[inline]
pub const fn variant_for_batch(b: u32, v: u32, sm90a: bool, sm_count: u32) -> usize {
    let hidden_as_a = v % TMA_T_VOCAB_ALIGN == 0;
    if sm90a {
        let (weight_a, hidden_a) = (&FUSED_VARIANTS[16], &FUSED_VARIANTS[19]);
        match b {
            0..=16 => 14,
            17..=32 => 15,
            33..=64
                if hidden_as_a
                    && hidden_a.largest_range_rows(sm_count, b, v) <= weight_a.largest_range_rows(sm_count, b, v) =>
            {
                19
            }
            33..=64 => 16,
            65..=128 if hidden_as_a => 19,
            _ if hidden_as_a => 20,
            _ => 18,
        }
    } else {
        match b {
            0..=16 => 0,
            17..=32 => 5,
            33..=64 => 6,
            _ => 7,
        }
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
pub const ENTRY_POINTS: [&str; 27] = [
    GUMBEL_LOGITS_ENTRY,
    SOFTMAX_ENTRY,
    MULTINOMIAL_ENTRY,
    FUSED_VARIANTS[0].entry,
    FUSED_VARIANTS[1].entry,
    FUSED_VARIANTS[2].entry,
    FUSED_VARIANTS[3].entry,
    FUSED_VARIANTS[4].entry,
    FUSED_VARIANTS[5].entry,
    FUSED_VARIANTS[6].entry,
    FUSED_VARIANTS[7].entry,
    FUSED_VARIANTS[8].entry,
    FUSED_VARIANTS[9].entry,
    FUSED_VARIANTS[10].entry,
    FUSED_VARIANTS[11].entry,
    FUSED_VARIANTS[12].entry,
    FUSED_VARIANTS[13].entry,
    FUSED_VARIANTS[14].entry,
    FUSED_VARIANTS[15].entry,
    FUSED_VARIANTS[16].entry,
    FUSED_VARIANTS[17].entry,
    FUSED_VARIANTS[18].entry,
    FUSED_VARIANTS[19].entry,
    FUSED_VARIANTS[20].entry,
    REDUCE_ENTRY,
    PHILOX_ENTRY,
    GUMBEL_ENTRY,
];

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    /// Shared memory one block may have on compute capability 9.0 (227 KiB).
    const SM90_MAX_SMEM: u32 = 227 * 1024;

    #[test]
    fn every_variant_fits_and_is_named_once() {
        for (i, v) in FUSED_VARIANTS.iter().enumerate() {
            assert!(v.smem_bytes() <= SM90_MAX_SMEM, "{}: {} bytes of shared memory", v.entry, v.smem_bytes());
            assert!(FUSED_VARIANTS[..i].iter().all(|w| w.entry != v.entry), "{} listed twice", v.entry);
            assert!(ENTRY_POINTS.contains(&v.entry), "{} not in ENTRY_POINTS", v.entry);
            // The module split (link step, host loader) goes by the name.
            assert_eq!(v.needs_sm90a(), v.entry.contains("wgmma"), "{}", v.entry);
            // The link step bounds the warp-specialized entries to 384 threads by these names.
            assert_eq!(v.staging == Staging::WgmmaWs, v.entry.contains("_ws_"), "{}", v.entry);
            assert_eq!(v.staging == Staging::WgmmaTma, v.entry.contains("_tma_"), "{}", v.entry);
            assert_eq!(v.staging == Staging::WgmmaTmaT, v.entry.contains("_tmat_"), "{}", v.entry);
            if v.needs_sm90a() {
                // wgmma slabs are whole 1024-byte swizzle atoms; N is a wgmma width with a shape.
                assert_eq!(v.stage_bytes() % 1024, 0, "{}", v.entry);
                assert!(matches!(8 * v.n_tiles, 16 | 32 | 64 | 128), "{}", v.entry);
                let split = if v.warps_b > 1 { format!("x{}", v.warps_b) } else { std::string::String::new() };
                assert!(v.entry.ends_with(&format!("_n{}{split}", 8 * v.n_tiles)), "{}", v.entry);
                // Only the TMA kernels split the batch tile over their consumers, and at most in two.
                assert!(v.warps_b == 1 || (v.uses_tma() && v.warps_b == 2), "{}", v.entry);
                // The hidden-as-A kernels: 64 batch rows (one m64 A tile) per consumer.
                assert!(v.staging != Staging::WgmmaTmaT || v.n_tiles == 8, "{}", v.entry);
            }
            if v.uses_tma() {
                // A TMA box is at most 256 rows.
                assert!(v.block_b() <= 256, "{}", v.entry);
            }
        }
        assert_eq!(FUSED_VARIANTS.iter().filter(|v| v.warp_specialized()).count(), 10);
        assert!(FUSED_VARIANTS.iter().filter(|v| v.warp_specialized()).all(|v| v.threads() == 384));
        // Sixteen boxes of 8 rows, 4 apart, cover a 128-row tile's 32 Philox groups.
        assert_eq!(TMA_WEIGHT_BOXES * TMA_WEIGHT_BOX_ROWS, BLOCK_V);
        assert_eq!(TMA_WEIGHT_ROW_STEP * TMA_WEIGHT_BOX_ROWS, WARP_TILE_V);
    }

    #[test]
    fn the_tma_weight_maps_put_each_vocab_row_at_its_slab_row() {
        let d = 4096;
        let row = 2 * d as u64;
        let tiles = tma_weight_tiles(d, 151_936).unwrap();
        let rows = tma_weight_rows(d, 151_936);
        let mut seen = [false; BLOCK_V as usize];
        for s in 0..BLOCK_V {
            let (g, e, w, h) = ((s % 8) as u64, ((s / 8) % 2) as u64, ((s / 16) % 4) as u64, (s / 64) as u64);
            // Box elements are laid out innermost dimension first: (k, g, e, w, h) at slab row s.
            assert_eq!(tiles.offset([0, g, e, w, h]), row * vocab_of_slab_row(s) as u64, "slab row {s}");
            // Row box s / 8 starts at vocab_of_slab_row(8·(s / 8)); its element g is TMA_WEIGHT_ROW_STEP·g on.
            let start = vocab_of_slab_row(s - s % 8) as u64 * row;
            assert_eq!(start + rows.offset([0, g]), row * vocab_of_slab_row(s) as u64, "slab row {s}");
            seen[vocab_of_slab_row(s) as usize] = true;
        }
        assert!(seen.iter().all(|&x| x), "the permutation covers the tile");
        // The tile box is a whole 128-row tile of 64 columns; a row box 8 rows.
        assert_eq!(tiles.boxes.iter().map(|&x| x as u64).product::<u64>(), (BLOCK_V * STAGE_K) as u64);
        assert_eq!(rows.boxes[1] / rows.element_strides[1], TMA_WEIGHT_BOX_ROWS);
        assert!(tma_weight_tiles(d, 31).is_none());
        assert_eq!(tma_weight_tiles(d, 1000).unwrap().dims[3], 31, "only whole 32-row groups");
    }

    #[test]
    fn the_hidden_as_a_weight_map_puts_each_vocab_row_at_its_slab_row() {
        let d = 8192;
        let row = 2 * d as u64;
        let map = tma_weight_tiles_t(d, 128_256).unwrap();
        let mut seen = [false; TMA_T_TILE_V as usize];
        for n in 0..TMA_T_TILE_V {
            let (c, q, i, big_j) = ((n % 2) as u64, ((n / 2) % 4) as u64, ((n / 8) % 2) as u64, (n / 16) as u64);
            assert_eq!(map.offset([0, c, q, i, big_j]), row * vocab_of_slab_row_t(n) as u64, "slab row {n}");
            seen[vocab_of_slab_row_t(n) as usize] = true;
        }
        assert!(seen.iter().all(|&x| x), "the permutation covers the tile");
        // A lane's columns 8j + 2q + c for j = 2J, 2J + 1 are one Philox group of four vocab rows.
        for big_j in 0..16 {
            for q in 0..4 {
                let rows: std::vec::Vec<u32> = [(0, 0), (0, 1), (1, 0), (1, 1)]
                    .iter()
                    .map(|&(i, c)| vocab_of_slab_row_t(8 * (2 * big_j + i) + 2 * q + c))
                    .collect();
                assert_eq!(rows, [0, 1, 2, 3].map(|k| 16 * big_j + 4 * q + k));
            }
        }
        assert_eq!(map.boxes.iter().map(|&x| x as u64).product::<u64>(), (TMA_T_TILE_V * STAGE_K) as u64);
        assert!(tma_weight_tiles_t(d, 151_937).is_none());
        assert!(FUSED_VARIANTS.iter().all(|v| v.staging != Staging::WgmmaTmaT || !v.supports_vocab(1000)));
        assert!(FUSED_VARIANTS.iter().all(|v| v.supports_vocab(151_936)));
    }

    #[test]
    fn the_batch_size_choice_respects_the_modules() {
        for b in [1, 2, 8, 9, 16, 17, 32, 33, 64, 65, 128, 256, 1000] {
            for v in [1000, 1008, 151_937, 151_936, 128_256] {
                assert!(!FUSED_VARIANTS[variant_for_batch(b, v, false, 132)].needs_sm90a(), "B = {b} without sm_90a");
                let f = FUSED_VARIANTS[variant_for_batch(b, v, true, 132)];
                assert!(f.uses_tma(), "B = {b} with sm_90a: {}", f.entry);
                assert!(f.supports_vocab(v), "B = {b}, V = {v}: {}", f.entry);
            }
            // Qwen3-8B's and Llama-3-70B's vocabularies get the hidden-as-A kernels beyond 64 rows;
            // from 33 rows on an H200 (132 multiprocessors) Llama-3-70B's already: both kernels'
            // largest range is 1024 rows there, where Qwen3-8B's would be 1280 against 1152.
            let qwen = FUSED_VARIANTS[variant_for_batch(b, 151_936, true, 132)];
            assert_eq!(qwen.staging == Staging::WgmmaTmaT, b > 64, "B = {b}: {}", qwen.entry);
            let llama = FUSED_VARIANTS[variant_for_batch(b, 128_256, true, 132)];
            assert_eq!(llama.staging == Staging::WgmmaTmaT, b > 32, "B = {b}: {}", llama.entry);
        }
        assert_eq!(
            (
                FUSED_VARIANTS[16].largest_range_rows(132, 64, 151_936),
                FUSED_VARIANTS[19].largest_range_rows(132, 64, 151_936)
            ),
            (1152, 1280)
        );
        assert_eq!(
            (
                FUSED_VARIANTS[16].largest_range_rows(132, 64, 128_256),
                FUSED_VARIANTS[19].largest_range_rows(132, 64, 128_256)
            ),
            (1024, 1024)
        );
    }
}
