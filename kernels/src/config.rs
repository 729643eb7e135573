//! Tile configuration, kernel variants and thread-mapping constants, defined once and shared by the
//! kernels and the host code that launches them.
//!
//! # Variants
//! Every compiled fused kernel is a [`FusedVariant`]: a typed value (entry point, [`Family`],
//! batch width, stages) from which the host derives its launch (threads, shared memory, grid) and
//! the build derives its PTX module ([`FusedVariant::module`]) and thread bound
//! ([`FusedVariant::max_threads`]). [`FUSED_VARIANTS`] lists the kernels the library launches;
//! [`variant_for_batch`] picks one per batch size. Three families, one mainloop each:
//!
//! | family | MMA | module | chosen |
//! |---|---|---|---|
//! | [`Family::MmaSync`] | `mma.sync.m16n8k16`, weight = A, `cp.async` block staging | portable (sm_90 PTX, any sm_80+ GPU through the driver's JIT) | where the sm_90a module does not load |
//! | [`Family::WgmmaWeightA`] | `wgmma.m64nNk16`, weight = A, TMA producer warp + 2 consumer warpgroups | sm_90a | B ≤ 64 (and > 64 when `V % 16 ≠ 0`) |
//! | [`Family::WgmmaHiddenA`] | `wgmma.m64n256k16`, hidden = A, same producer and consumers | sm_90a | B > 64 (from 33 where its vocab ranges are no longer), `V % 16 == 0` |
//!
//! Each family's thread mapping is documented in its kernel file (`device/fused/`). Within a family
//! (and one MMA shape) every variant computes each logit with the same MMAs in the same order, so
//! they draw bit-identical samples; across families the tensor cores may sum a k16 step in another
//! order (same samples up to f32 near-ties).
//!
//! # Tiles
//!
//! | constant | value | meaning |
//! |---|---|---|
//! | [`WARP_TILE_V`] | 32 | vocab rows per `mma.sync` warp (2 M tiles of 16) |
//! | [`BLOCK_V`] | 128 | vocab rows of a `mma.sync` or weight-as-A tile; the CPU backend's default tile |
//! | [`TMA_T_TILE_V`] | 256 | vocab rows of a hidden-as-A tile |
//! | [`STAGE_K`] | 64 | D columns per pipeline stage (one cache line per staged row) |
//! | [`D_ALIGN`] | 8 | D must be a multiple of this (16-byte loads) |
//!
//! Lanes always own whole Philox groups: four consecutive vocab rows of a batch row, so one Philox
//! call gives their noise.

/// Warps splitting the vocab in a `mma.sync` block (whose tile is therefore `4 × 32 = 128` vocab
/// rows).
pub const WARPS_PER_BLOCK: u32 = 4;
/// 16-row MMA M tiles per warp (even, so each lane owns whole Philox groups).
pub const M_TILES_PER_WARP: usize = 2;
/// Vocab rows per lane.
pub const ROWS_PER_LANE: usize = 2 * M_TILES_PER_WARP;
/// Vocab rows per warp tile: the unit of work of one warp.
pub const WARP_TILE_V: u32 = 16 * M_TILES_PER_WARP as u32;
/// Vocab rows of a `mma.sync` or weight-as-A tile; also the CPU backend's default vocab tile
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
/// Threads per block of the candidate-reduction kernel (one warp per batch row).
pub const REDUCE_THREADS_PER_BLOCK: u32 = 128;
/// Batch rows per block of the candidate-reduction kernel.
pub const REDUCE_ROWS_PER_BLOCK: u32 = REDUCE_THREADS_PER_BLOCK / 32;

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

/// Vocab rows per tile of the hidden-as-A kernels ([`Family::WgmmaHiddenA`]): the N of `m64n256k16`.
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

/// Warps per block of the warp-specialized `wgmma` kernels: a producer and two consumer warpgroups.
pub const WS_WARPS: u32 = 12;
/// Threads of the two consumer warpgroups of the `wgmma` kernels.
pub const CONSUMER_THREADS: u32 = 256;

/// The kernel family: which mainloop, producer and fragment adapter a fused kernel composes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `mma.sync.m16n8k16` (sm_80+), weight as the A operand; one `cp.async` ring per block filled by
    /// all threads, one block barrier per stage; `4·warps_b` warps, 128-row vocab tiles. The portable
    /// path (see `device::fused::mma_sync`).
    MmaSync,
    /// `wgmma.m64nNk16` (sm_90a), weight as A, `N = 8·n_tiles` hidden rows as B; a TMA producer warp
    /// and two consumer warpgroups taking turns on 128-row tiles (`warps_b = 1`) or splitting a
    /// `2N`-row batch tile (`warps_b = 2`). Needs the launch's tensor maps. See
    /// `device::fused::wgmma`.
    WgmmaWeightA,
    /// `wgmma.m64n256k16` (sm_90a) with the roles swapped: 64 hidden rows per consumer as A, a
    /// 256-row vocab tile as B. Needs `V % 16 == 0` ([`tma_weight_tiles_t`]). See
    /// `device::fused::wgmma_t`.
    WgmmaHiddenA,
}

/// The PTX module a kernel is compiled into (each a separate `.ptx` the host embeds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Module {
    /// Built for the portable target (`FLASHSAMPLING_SM`, default sm_90): loads on any GPU whose
    /// driver can compile sm_90 PTX.
    Portable,
    /// Built for the arch-specific sm_90a target (`wgmma`, `setmaxnreg`): loads on compute
    /// capability 9.0 only.
    Hopper,
    /// Test and benchmark-baseline kernels (portable target), loaded only by tests and benches.
    Test,
}

impl Module {
    /// Every module, in build order.
    pub const ALL: [Module; 3] = [Module::Portable, Module::Hopper, Module::Test];
    /// The module's file stem (`<stem>.ptx`).
    pub const fn stem(self) -> &'static str {
        match self {
            Module::Portable => "flashsampling",
            Module::Hopper => "flashsampling_sm90a",
            Module::Test => "flashsampling_test",
        }
    }
}

/// What a fused kernel computes besides the sample: each variant is compiled once per epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// The sample only (tokens and winning scores): the plain kernels.
    Sample,
    /// The sample, and the log-mass of each row (processed and raw, `params::RowMass`) kept per lane
    /// beside the candidate, merged like it, and turned into the sampled token's log-probabilities
    /// and the row's log-sum-exp by the reduction.
    LogProbs,
    /// [`Epilogue::LogProbs`], and each lane's top list of processed logits per row
    /// ([`crate::truncate::TopList`]), written per (row, vocab range, unit) for the truncation step
    /// (top-k, top-p, min-p; `device::truncate`).
    Truncate,
}

impl Epilogue {
    /// Every epilogue.
    pub const ALL: [Epilogue; 3] = [Epilogue::Sample, Epilogue::LogProbs, Epilogue::Truncate];
    /// Bytes of one row's state in the block merge's area: a candidate, and a `RowMass`.
    #[inline]
    pub const fn state_bytes(self) -> u32 {
        match self {
            Epilogue::Sample => 8,
            Epilogue::LogProbs | Epilogue::Truncate => 8 + 16,
        }
    }
    /// Whether the kernel keeps the log-mass (and writes the log-probabilities).
    #[inline]
    pub const fn has_logprobs(self) -> bool {
        !matches!(self, Epilogue::Sample)
    }
}

/// One compiled variant of the fused kernel: its entry points and tile shape, defined once here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusedVariant {
    /// PTX entry point of the plain kernel ([`Epilogue::Sample`]).
    pub entry: &'static str,
    /// PTX entry point of the log-probability kernel ([`Epilogue::LogProbs`]).
    pub entry_logprobs: &'static str,
    /// PTX entry point of the truncation kernel ([`Epilogue::Truncate`]).
    pub entry_truncate: &'static str,
    /// Mainloop, producer and fragment layout.
    pub family: Family,
    /// `NB`: 8-row N tiles per warp ([`Family::MmaSync`]: a warp covers `8·NB` batch rows) or per
    /// consumer warpgroup (`wgmma`: `N = 8·NB`).
    pub n_tiles: u32,
    /// [`Family::MmaSync`]: warps splitting the batch (each `8·NB` rows; 4 more split the vocab).
    /// `wgmma`: 1 = the consumer warpgroups take turns on the tiles, 2 = they split the batch tile.
    pub warps_b: u32,
    /// Pipeline depth (`stages − 1` stages in flight while one is multiplied).
    pub stages: u32,
    /// Pipeline depth of the log-probability and truncation kernels ([`FusedVariant::stages_for`]):
    /// in the `wgmma` kernels their lanes' row masses take shared memory
    /// ([`FusedVariant::lane_state_bytes`]), which leaves room for fewer stages.
    pub stages_lp: u32,
}

/// Portable, up to 16 rows: 4 warps of 16 batch rows.
pub const MMA_SYNC_N16: FusedVariant = FusedVariant {
    entry: "fused_sample_block_nb2",
    entry_logprobs: "fused_sample_block_nb2_lp",
    entry_truncate: "fused_sample_block_nb2_tk",
    family: Family::MmaSync,
    n_tiles: 2,
    warps_b: 1,
    stages: 4,
    stages_lp: 4,
};
/// Portable, up to 32 rows: 4 warps of 32 batch rows.
pub const MMA_SYNC_N32: FusedVariant = FusedVariant {
    entry: "fused_sample_block_nb4_s3",
    entry_logprobs: "fused_sample_block_nb4_s3_lp",
    entry_truncate: "fused_sample_block_nb4_s3_tk",
    family: Family::MmaSync,
    n_tiles: 4,
    warps_b: 1,
    stages: 3,
    stages_lp: 3,
};
/// Portable, up to 64 rows: 8 warps, two batch slots of 32 rows.
pub const MMA_SYNC_N64: FusedVariant = FusedVariant {
    entry: "fused_sample_block_nb4x2",
    entry_logprobs: "fused_sample_block_nb4x2_lp",
    entry_truncate: "fused_sample_block_nb4x2_tk",
    family: Family::MmaSync,
    n_tiles: 4,
    warps_b: 2,
    stages: 4,
    stages_lp: 4,
};
/// Portable, beyond 64 rows: 16 warps, four batch slots of 32 rows (128-row batch tiles).
pub const MMA_SYNC_N128: FusedVariant = FusedVariant {
    entry: "fused_sample_block_nb4x4",
    entry_logprobs: "fused_sample_block_nb4x4_lp",
    entry_truncate: "fused_sample_block_nb4x4_tk",
    family: Family::MmaSync,
    n_tiles: 4,
    warps_b: 4,
    stages: 6,
    stages_lp: 6,
};
/// Hopper, up to 16 rows: weight-as-A `wgmma`, N = 16.
pub const TMA_N16: FusedVariant = FusedVariant {
    entry: "fused_sample_wgmma_tma_n16",
    entry_logprobs: "fused_sample_wgmma_tma_n16_lp",
    entry_truncate: "fused_sample_wgmma_tma_n16_tk",
    family: Family::WgmmaWeightA,
    n_tiles: 2,
    warps_b: 1,
    stages: 10,
    stages_lp: 10,
};
/// Hopper, up to 32 rows: N = 32.
pub const TMA_N32: FusedVariant = FusedVariant {
    entry: "fused_sample_wgmma_tma_n32",
    entry_logprobs: "fused_sample_wgmma_tma_n32_lp",
    entry_truncate: "fused_sample_wgmma_tma_n32_tk",
    family: Family::WgmmaWeightA,
    n_tiles: 4,
    warps_b: 1,
    stages: 10,
    stages_lp: 9,
};
/// Hopper, up to 64 rows: N = 64.
pub const TMA_N64: FusedVariant = FusedVariant {
    entry: "fused_sample_wgmma_tma_n64",
    entry_logprobs: "fused_sample_wgmma_tma_n64_lp",
    entry_truncate: "fused_sample_wgmma_tma_n64_tk",
    family: Family::WgmmaWeightA,
    n_tiles: 8,
    warps_b: 1,
    stages: 8,
    stages_lp: 6,
};
/// Hopper, beyond 64 rows when `V % 16 ≠ 0`: N = 64, the consumers split 128-row batch tiles.
pub const TMA_N64X2: FusedVariant = FusedVariant {
    entry: "fused_sample_wgmma_tma_n64x2",
    entry_logprobs: "fused_sample_wgmma_tma_n64x2_lp",
    entry_truncate: "fused_sample_wgmma_tma_n64x2_tk",
    family: Family::WgmmaWeightA,
    n_tiles: 8,
    warps_b: 2,
    stages: 6,
    stages_lp: 4,
};
/// Hopper, 65–128 rows (and 33–64 where its vocab ranges are no longer): hidden-as-A, 64 rows.
pub const TMAT_N64: FusedVariant = FusedVariant {
    entry: "fused_sample_wgmma_tmat_n64",
    entry_logprobs: "fused_sample_wgmma_tmat_n64_lp",
    entry_truncate: "fused_sample_wgmma_tmat_n64_tk",
    family: Family::WgmmaHiddenA,
    n_tiles: 8,
    warps_b: 1,
    stages: 5,
    stages_lp: 5,
};
/// Hopper, beyond 128 rows: hidden-as-A, the consumers split 128-row batch tiles.
pub const TMAT_N64X2: FusedVariant = FusedVariant {
    entry: "fused_sample_wgmma_tmat_n64x2",
    entry_logprobs: "fused_sample_wgmma_tmat_n64x2_lp",
    entry_truncate: "fused_sample_wgmma_tmat_n64x2_tk",
    family: Family::WgmmaHiddenA,
    n_tiles: 8,
    warps_b: 2,
    stages: 4,
    stages_lp: 4,
};

/// Every fused-kernel variant the library launches (each chosen by [`variant_for_batch`]).
pub const FUSED_VARIANTS: [FusedVariant; 10] = [
    MMA_SYNC_N16,
    MMA_SYNC_N32,
    MMA_SYNC_N64,
    MMA_SYNC_N128,
    TMA_N16,
    TMA_N32,
    TMA_N64,
    TMA_N64X2,
    TMAT_N64,
    TMAT_N64X2,
];

impl core::fmt::Display for FusedVariant {
    /// The entry point.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.pad(self.entry)
    }
}

/// Whether two strings are equal (usable in constants).
pub const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl FusedVariant {
    /// The variant whose entry point is `name`.
    pub fn by_name(name: &str) -> Option<FusedVariant> {
        FUSED_VARIANTS.iter().copied().find(|v| v.entry == name)
    }
    /// Whether the entry point is `name` (the device entry points assert it at compile time).
    pub const fn is_named(&self, name: &str) -> bool {
        str_eq(self.entry, name)
    }
    /// The entry point of the kernel with epilogue `e`.
    #[inline]
    pub const fn entry_for(&self, e: Epilogue) -> &'static str {
        match e {
            Epilogue::Sample => self.entry,
            Epilogue::LogProbs => self.entry_logprobs,
            Epilogue::Truncate => self.entry_truncate,
        }
    }
    /// The PTX module the kernel is compiled into.
    #[inline]
    pub const fn module(&self) -> Module {
        match self.family {
            Family::MmaSync => Module::Portable,
            Family::WgmmaWeightA | Family::WgmmaHiddenA => Module::Hopper,
        }
    }
    /// Warps per block.
    #[inline]
    pub const fn warps(&self) -> u32 {
        match self.family {
            Family::MmaSync => WARPS_PER_BLOCK * self.warps_b,
            Family::WgmmaWeightA | Family::WgmmaHiddenA => WS_WARPS,
        }
    }
    /// Threads per block.
    #[inline]
    pub const fn threads(&self) -> u32 {
        32 * self.warps()
    }
    /// The thread bound the link step writes into the PTX entry (`.maxntid`), so ptxas budgets
    /// registers for at least one block of that size per multiprocessor (a block of 512 threads
    /// cannot launch with more than 128 registers per thread: `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`).
    #[inline]
    pub const fn max_threads(&self) -> Option<u32> {
        Some(self.threads())
    }
    /// Whether the kernel's warpgroups move registers (`setmaxnreg`: the producer warpgroup gives
    /// its share to the consumers): the hidden-as-A kernels (128 accumulators per thread) and the
    /// weight-as-A ones with N = 64 (16 batch columns per lane). Their entries also carry
    /// `.minnctapersm 1` ([`entry_points`]): without a known register count at entry ptxas ignores
    /// `setmaxnreg` (its info line C7508) and keeps the whole kernel within the even share of 168
    /// (`tma_n64_tk` then spilled 2 KiB, 352 bytes with it).
    #[inline]
    pub const fn moves_registers(&self) -> bool {
        match self.family {
            Family::MmaSync => false,
            Family::WgmmaWeightA => 8 * self.n_tiles == 64,
            Family::WgmmaHiddenA => true,
        }
    }
    /// Whether the kernel copies with TMA and so needs the launch's tensor maps.
    #[inline]
    pub const fn uses_tma(&self) -> bool {
        matches!(self.family, Family::WgmmaWeightA | Family::WgmmaHiddenA)
    }
    /// Whether the kernel runs for vocab size `v` (the hidden-as-A kernels need `v % 16 == 0`).
    #[inline]
    pub const fn supports_vocab(&self, v: u32) -> bool {
        !matches!(self.family, Family::WgmmaHiddenA) || v % TMA_T_VOCAB_ALIGN == 0
    }
    /// Batch rows per block (`BLOCK_B`).
    #[inline]
    pub const fn block_b(&self) -> u32 {
        8 * self.n_tiles * self.warps_b
    }
    /// Vocab rows of a tile (the unit a vocab range is made of).
    #[inline]
    pub const fn tile_v(&self) -> u32 {
        match self.family {
            Family::MmaSync | Family::WgmmaWeightA => BLOCK_V,
            Family::WgmmaHiddenA => TMA_T_TILE_V,
        }
    }
    /// Bytes of one pipeline stage: weight rows and hidden rows, [`STAGE_ROW_BYTES`] each.
    #[inline]
    pub const fn stage_bytes(&self) -> u32 {
        (self.tile_v() + self.block_b()) * STAGE_ROW_BYTES
    }
    /// Contributors per batch row in the block merge: the warps or warpgroups whose candidates for
    /// the same batch rows come from other vocab rows (`device::merge`).
    #[inline]
    pub const fn merge_contributors(&self) -> u32 {
        match self.family {
            // The 4 warps that split each 128-row tile.
            Family::MmaSync => WARPS_PER_BLOCK,
            // The consumers' warps: all 8 when taking turns, the 4 of each consumer when splitting.
            Family::WgmmaWeightA => 8 / self.warps_b,
            // The consumers: both when taking turns, one per row when splitting.
            Family::WgmmaHiddenA => 2 / self.warps_b,
        }
    }
    /// Top-list units per batch row of a block in the truncation kernels: the lanes that score the
    /// row with different vocab rows (`device::fragment::put_tops_columns`, `put_tops_rows`) — the
    /// 8 lane groups of each contributing warp (column layouts), the 4 lanes of a group (hidden-as-A),
    /// each of whose lists is stored as 4 units (`truncate::LANE_TOP_WIDE`).
    #[inline]
    pub const fn top_units(&self) -> u32 {
        match self.family {
            Family::MmaSync | Family::WgmmaWeightA => 8 * self.merge_contributors(),
            Family::WgmmaHiddenA => 16 * self.merge_contributors(),
        }
    }
    /// Bytes of the block merge's area at the start of the dynamic shared memory: one row state
    /// ([`Epilogue::state_bytes`]: an 8-byte candidate, and its 16-byte log-mass with
    /// [`Epilogue::LogProbs`]) per contributor and batch row of the block.
    #[inline]
    pub const fn merge_bytes(&self, e: Epilogue) -> u32 {
        e.state_bytes() * self.merge_contributors() * self.block_b()
    }
    /// The pipeline depth of the kernel with epilogue `e`: [`Self::stages`] for the plain kernels,
    /// [`Self::stages_lp`] for the log-probability and truncation kernels.
    #[inline]
    pub const fn stages_for(&self, e: Epilogue) -> u32 {
        if e.has_logprobs() { self.stages_lp } else { self.stages }
    }
    /// Row masses ([`crate::params::RowMass`]) a consumer lane of a `wgmma` kernel keeps for its
    /// batch rows: one per batch column of the weight-as-A layout (`N / 4`), one per batch row of the
    /// hidden-as-A layout (2); none in the `mma.sync` kernels, whose masses stay in registers.
    #[inline]
    pub const fn lane_masses(&self) -> u32 {
        match self.family {
            Family::MmaSync => 0,
            Family::WgmmaWeightA => 2 * self.n_tiles,
            Family::WgmmaHiddenA => 2,
        }
    }
    /// Bytes of the lanes' row masses in shared memory (`wgmma` log-probability and truncation
    /// kernels), after the merge area: mass `i` of consumer thread `t` (0..256) at
    /// `16·(i·256 + t)`. In registers, the masses of 16 batch columns pushed the N = 64 kernels
    /// into 2.8 KiB of spills (docs/findings/17); in shared memory they cost a load and a store per
    /// column and tile and keep the order of every sum, so the log-probabilities stay bit-identical.
    #[inline]
    pub const fn lane_state_bytes(&self, e: Epilogue) -> u32 {
        if e.has_logprobs() { 16 * CONSUMER_THREADS * self.lane_masses() } else { 0 }
    }
    /// Bytes before the ring: the merge area ([`Self::merge_bytes`]) and the lanes' row masses
    /// ([`Self::lane_state_bytes`]).
    #[inline]
    pub const fn prefix_bytes(&self, e: Epilogue) -> u32 {
        self.merge_bytes(e) + self.lane_state_bytes(e)
    }
    /// Dynamic shared memory: the merge area and the lanes' row masses ([`Self::prefix_bytes`]),
    /// then (`wgmma`) 1024 bytes of slack for the ring's 1024-byte alignment and the 8-byte barriers
    /// (full and empty per slot, one turn per consumer), then the ring of [`Self::stages_for`] stages.
    #[inline]
    pub const fn smem_bytes(&self, e: Epilogue) -> u32 {
        let stages = self.stages_for(e);
        match self.family {
            Family::MmaSync => self.prefix_bytes(e) + stages * self.stage_bytes(),
            Family::WgmmaWeightA | Family::WgmmaHiddenA => {
                1024 + self.prefix_bytes(e) + 8 * (2 * stages + 2) + stages * self.stage_bytes()
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
    /// Batch tiles of a launch of `b` rows: `⌈b / block_b⌉`, at least one.
    #[inline]
    pub const fn batch_tiles(&self, b: u32) -> u32 {
        let n = b.div_ceil(self.block_b());
        if n == 0 { 1 } else { n }
    }
    /// Batch rows `b` rows occupy in this variant's batch tiles: [`Self::batch_tiles`] · `block_b`
    /// (every tile multiplies and streams its weights for all of its rows, used or not).
    #[inline]
    pub const fn padded_rows(&self, b: u32) -> u32 {
        self.batch_tiles(b) * self.block_b()
    }
    /// Rows of the last batch tile of `b` rows (`1 ..= block_b`; `0` for `b = 0`).
    #[inline]
    pub const fn last_tile_rows(&self, b: u32) -> u32 {
        b - (self.batch_tiles(b) - 1) * self.block_b()
    }
    /// Vocab rows of the largest vocab range (whole tiles) for `b` rows and vocab size `v` on
    /// `sm_count` multiprocessors with one block each: what the block that finishes last streams.
    #[inline]
    pub const fn largest_range_rows(&self, sm_count: u32, b: u32, v: u32) -> u32 {
        let n = self.n_vranges(sm_count, 1, self.batch_tiles(b), v);
        v.div_ceil(self.tile_v()).div_ceil(n) * self.tile_v()
    }
    /// Whether a launch of this variant with epilogue `e` over `tiles` vocab tiles in `n` vocab
    /// ranges, with `n_btiles` batch tiles, balances its ranges to the pipeline stage
    /// ([`RangeStages::balanced`]) instead of whole tiles: where it can ([`Self::can_balance_stages`])
    /// and only where whole tiles leave the largest range more than 1/64 above the mean (Llama-3-70B:
    /// 1002 tiles over 132 ranges, 8 against 7.59; Qwen3-8B's 1187 over 132, 9 against 8.99, stays
    /// whole).
    #[inline]
    pub const fn balances_stages(&self, e: Epilogue, tiles: u32, n: u32, n_btiles: u32) -> bool {
        let n = if n == 0 { 1 } else { n };
        self.can_balance_stages(e, tiles, n, n_btiles) && (tiles.div_ceil(n) * n - tiles) as u64 * 64 > tiles as u64
    }
    /// Whether such a launch can run stage-balanced ranges at all (what a forced balance,
    /// `FLASHSAMPLING_BALANCE_STAGES=1`, still needs): only the weight-as-A kernels of the plain and
    /// the log-probability epilogues (their consumers hand a part-done tile's accumulators over,
    /// `device::handoff`; the truncation kernels keep whole tiles: the handoff code cost their
    /// register-bound consumers spills and up to 8.6% at Qwen3-8B B = 64, docs/findings/34), only one
    /// batch tile (every block of the grid is then resident at once, which the handoff's wait needs:
    /// at most one block per multiprocessor), at least two tiles per range.
    #[inline]
    pub const fn can_balance_stages(&self, e: Epilogue, tiles: u32, n: u32, n_btiles: u32) -> bool {
        matches!(self.family, Family::WgmmaWeightA)
            && !matches!(e, Epilogue::Truncate)
            && n_btiles == 1
            && n >= 2
            && tiles >= 2 * n
    }
    /// f32 accumulators per consumer thread of the weight-as-A kernels (`N`: two 64-row halves of
    /// `N / 2`), which a head hands over (`FusedParams::handoff`).
    #[inline]
    pub const fn handoff_floats_per_thread(&self) -> u32 {
        8 * self.n_tiles
    }
}

/// What one part of a block's work is: a whole vocab tile, or one of the two parts of a tile that a
/// range boundary cuts ([`RangeStages::balanced`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceKind {
    /// Every D step of the tile, then its epilogue.
    Whole,
    /// The first D steps of a tile whose rest the block of the range below runs: the accumulators
    /// are handed over, no epilogue.
    Head,
    /// The last D steps of a tile, continuing from the accumulators the block of the range above
    /// handed over, then the tile's epilogue.
    Tail,
}

/// One part of a block's work: the D steps `[k0, k1)` of vocab tile `tile`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The vocab tile.
    pub tile: u32,
    /// First D step (pipeline stage of the tile).
    pub k0: u32,
    /// One past the last D step.
    pub k1: u32,
    /// Whole tile, head or tail.
    pub kind: PieceKind,
}

/// The pipeline stages of one vocab range: an optional head (the first `head` D steps of tile
/// `first − 1`), the whole tiles `[first, end)`, and an optional tail (the last `tail` D steps of tile
/// `end`), `n_k` D steps per tile. The block runs them in that order ([`Self::piece`]); the tiles it
/// scores (the whole ones, then the tail's) ascend, and each logit is the same MMA sequence in D
/// order as with whole tiles (the tail continues from the head's accumulators).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeStages {
    /// D steps of the head piece (0: none).
    pub head: u32,
    /// First whole tile.
    pub first: u32,
    /// One past the last whole tile (= the tail's tile).
    pub end: u32,
    /// D steps of the tail piece (0: none).
    pub tail: u32,
    /// D steps per tile.
    pub n_k: u32,
}

impl RangeStages {
    /// Range `r` of `n` over `tiles` tiles in whole tiles, as even as integers allow: tiles
    /// `[tiles·r/n, tiles·(r+1)/n)`.
    #[inline]
    pub const fn whole(tiles: u32, n: u32, r: u32, n_k: u32) -> Self {
        let n = if n == 0 { 1 } else { n } as u64;
        let first = (tiles as u64 * r as u64 / n) as u32;
        let end = (tiles as u64 * (r as u64 + 1) / n) as u32;
        RangeStages { head: 0, first, end, tail: 0, n_k }
    }

    /// Range `r` of `n` balanced to the stage: the `tiles · n_k` stages split as evenly as integers
    /// allow, range `r` taking `s1 − s0` of them with `s = tiles·n_k·r / n`. A boundary `s` inside tile
    /// `t = s / n_k` gives the range above the tile's first `n_k − s % n_k` D steps (its head) and the
    /// range below the last `s % n_k` (its tail): the same counts as the cut in stage order, but in D
    /// order across the two blocks. Needs `tiles ≥ 2n` (every range then holds a whole tile besides
    /// its head and tail).
    #[inline]
    pub const fn balanced(tiles: u32, n: u32, r: u32, n_k: u32) -> Self {
        let n = if n == 0 { 1 } else { n } as u64;
        let total = tiles as u64 * n_k as u64;
        let s0 = (total * r as u64 / n) as u32;
        let s1 = (total * (r as u64 + 1) / n) as u32;
        let (c0, c1) = (s0 % n_k, s1 % n_k);
        RangeStages { head: if c0 == 0 { 0 } else { n_k - c0 }, first: s0.div_ceil(n_k), end: s1 / n_k, tail: c1, n_k }
    }

    /// Pieces in the block's order: the head (if any), the whole tiles, the tail (if any).
    #[inline]
    pub const fn pieces(&self) -> u32 {
        (self.head > 0) as u32 + (self.end - self.first) + (self.tail > 0) as u32
    }

    /// Piece `j < pieces()`.
    #[inline]
    pub const fn piece(&self, j: u32) -> Piece {
        let h = (self.head > 0) as u32;
        if j < h {
            return Piece { tile: self.first - 1, k0: 0, k1: self.head, kind: PieceKind::Head };
        }
        let tile = self.first + (j - h);
        if tile < self.end {
            Piece { tile, k0: 0, k1: self.n_k, kind: PieceKind::Whole }
        } else {
            Piece { tile: self.end, k0: self.n_k - self.tail, k1: self.n_k, kind: PieceKind::Tail }
        }
    }

    /// The block's stage count before piece `j` (its first stage's index; stage `i` fills ring slot
    /// `i % S`).
    #[inline]
    pub const fn first_stage(&self, j: u32) -> u32 {
        if self.head > 0 { if j == 0 { 0 } else { self.head + (j - 1) * self.n_k } } else { j * self.n_k }
    }

    /// Every stage of the range.
    #[inline]
    pub const fn stages(&self) -> u32 {
        self.head + (self.end - self.first) * self.n_k + self.tail
    }
}

/// The variant the host launches for batch size `b`, hidden size `d`, vocab size `v` and `epilogue` on `sm_count`
/// multiprocessors, with `sm90a` telling whether the Hopper module is loaded (compute capability
/// 9.0), chosen from the `cargo bench -- --variants` sweeps on the H200 (BENCHMARKS.md,
/// `benchmarks/2026-11-29-h200-sweep-tma-kernels`):
/// - sm_90a: weight-as-A `wgmma`, N = 16 up to 16 rows and 32 up to 32; up to 64 rows N = 64, or the
///   hidden-as-A kernel with log-probabilities (each weight-as-A lane then updates 16 columns' masses
///   per tile from 64 KiB of shared memory, with 6 pipeline stages instead of 8; the hidden-as-A lane
///   2 rows from 8 KiB: temps + log-probs at B = 33–64 0.354–0.363 ms against 0.379–0.430 on Qwen3-8B,
///   0.542–0.550 against 0.596–0.636 on Llama-3-70B), never with truncation (there the hidden-as-A
///   kernel's wider top lists cost more: 0.66–0.71 ms against 0.53–0.65 on Qwen3-8B, 0.78–0.82
///   against 0.71–0.82 on Llama-3-70B; both same-call, forced, in
///   `benchmarks/2026-12-01-h200-reduce-rows-and-tensor-core-fallback/call4-*`), and for the plain
///   call when its largest vocab range is no longer. With log-probabilities from 17 rows only where its
///   largest range is strictly shorter: since the weight-as-A kernels' rolled mass merge
///   (docs/findings/36) `tma_n32_lp` is the faster at equal ranges (Llama-3-70B, 1024 rows both:
///   temps + log-probs 0.509–0.510 ms against 0.525–0.529 with `tmat_n64_lp` at B = 17–32, same
///   call, forced; before it 0.549–0.559 against 0.542–0.551, `call6-*`; Qwen3-8B: 1280 against 1152)
///   ([`FusedVariant::largest_range_rows`]: both run one 384-thread block per multiprocessor and
///   stream their weights at about the same rate, hidden-as-A with a quarter instead of half a weight
///   byte of hidden rows per weight byte through L2; Llama-3-70B: 1024 rows each, hidden-as-A 1–2%
///   faster; Qwen3-8B: 1280 against 1152 rows, weight-as-A 4–6% faster); beyond 64 rows hidden-as-A
///   (`tmat_n64` or `tmat_n64x2` by how the rows fill their batch tiles: [`hidden_as_a_beyond_64`]).
///   Hidden-as-A needs `v % 16 == 0`, else `tma_n64` and `tma_n64x2`.
/// - Portable (`mma.sync`): 16, 32, 64 or 128-row batch tiles by B.
///
/// Every choice supports `v` ([`FusedVariant::supports_vocab`]).
#[inline]
pub const fn variant_for_batch(
    (b, d, v): (u32, u32, u32),
    epilogue: Epilogue,
    sm90a: bool,
    sm_count: u32,
) -> FusedVariant {
    let hidden_as_a = v % TMA_T_VOCAB_ALIGN == 0;
    if sm90a {
        match b {
            0..=16 => TMA_N16,
            17..=32
                if hidden_as_a
                    && matches!(epilogue, Epilogue::LogProbs)
                    && TMAT_N64.largest_range_rows(sm_count, b, v) < TMA_N32.largest_range_rows(sm_count, b, v) =>
            {
                TMAT_N64
            }
            17..=32 => TMA_N32,
            33..=64 if matches!(epilogue, Epilogue::Truncate) => TMA_N64,
            33..=64
                if hidden_as_a
                    && (matches!(epilogue, Epilogue::LogProbs)
                        || TMAT_N64.largest_range_rows(sm_count, b, v)
                            <= TMA_N64.largest_range_rows(sm_count, b, v)) =>
            {
                TMAT_N64
            }
            33..=64 => TMA_N64,
            _ if hidden_as_a => hidden_as_a_beyond_64(b, d),
            _ => TMA_N64X2,
        }
    } else {
        match b {
            0..=16 => MMA_SYNC_N16,
            17..=32 => MMA_SYNC_N32,
            33..=64 => MMA_SYNC_N64,
            _ => MMA_SYNC_N128,
        }
    }
}

/// Largest hidden size at which `tmat_n64` is chosen for 80–128 rows ([`hidden_as_a_beyond_64`]):
/// between the sweeps' 5120, where it took 0.92–0.99 × the time of `tmat_n64x2`, and 6144, where
/// it took 1.01–1.04 ×.
pub const TMAT_TURNS_MAX_D: u32 = 5120;

/// The hidden-as-A kernel for `b > 64` rows of hidden size `d`, by how the rows fill the batch
/// tiles of `tmat_n64` (64 rows, the consumers taking turns) and `tmat_n64x2` (128 rows the
/// consumers split):
/// - 65–79 rows: `tmat_n64x2`. `tmat_n64`'s second tile is then less than a quarter full, its
///   blocks run ahead of the full tile's, the two stop sharing each weight tile through L2 and the
///   weights stream twice (Qwen3-8B B = 65: 0.549 ms, 1.96 × the floor, against 0.405 ms).
/// - 80–128 rows (equal padding): `tmat_n64` up to `d` = [`TMAT_TURNS_MAX_D`], where overlapping
///   one consumer's epilogue with the other's MMAs pays (the epilogue's share of a tile falls as
///   `1 / d`): at D = 2048–5120 it takes 0.88–0.98 × `tmat_n64x2`'s time at 96–128 rows
///   (0.99–1.03 × at 80); from D = 6144 `tmat_n64x2`, which reads each weight tile once:
///   `tmat_n64` took 1.01–1.23 × its time at D = 6144–16384 (0.97–0.99 × at D = 8192, V = 152064,
///   112–128 rows: the rule's one measured loss, up to 3%).
/// - 129–192 rows: `tmat_n64`, which pads fewer rows (192 against 256): 3–18% faster with every
///   epilogue (plain, log-probabilities, mask, truncation), at every D swept (2048–16384).
/// - beyond: `tmat_n64x2`. Where `tmat_n64` would pad fewer rows again (257–320, 513–576) its
///   five or more batch tiles lost (B = 288, 320, 576: up to 1.15 × slower).
///
/// Measured in `benchmarks/2026-12-04-h200-hidden-as-a-batch-tiles` (calls 2–5: sweeps of both kernels over
/// ten LM-head shapes, the same-call A/Bs against the previous rule).
#[inline]
pub const fn hidden_as_a_beyond_64(b: u32, d: u32) -> FusedVariant {
    let quarter_full = 4 * TMAT_N64.last_tile_rows(b) >= TMAT_N64.block_b();
    let pads_fewer = TMAT_N64.padded_rows(b) < TMAT_N64X2.padded_rows(b);
    if TMAT_N64.batch_tiles(b) <= 3 && (pads_fewer || (quarter_full && d <= TMAT_TURNS_MAX_D)) {
        TMAT_N64
    } else {
        TMAT_N64X2
    }
}

/// PTX entry point of the row-expansion kernel (portable module): the hidden states of a launch with
/// several samples per request (`params::ExpandParams`).
pub const EXPAND_ENTRY: &str = "expand_rows";
/// Threads per block of the row-expansion kernel (one 16-byte chunk each).
pub const EXPAND_THREADS: u32 = 256;

/// PTX entry point of the sparse-adjustment kernel (portable module): adjusted tokens scored
/// apart from the fused pass (`params::AdjustParams`).
pub const ADJUST_ENTRY: &str = "adjust_tokens";
/// Threads per block of the sparse-adjustment kernel (one warp per adjusted token).
pub const ADJUST_THREADS: u32 = 256;

/// PTX entry point of the vocab-parallel merge kernel (portable module): the ranks' gathered
/// results → the whole head's (`params::MergeRanksParams`, `crate::ranks`).
pub const MERGE_RANKS_ENTRY: &str = "merge_ranks";
/// Threads per block of the vocab-parallel merge kernel (one row each).
pub const MERGE_RANKS_THREADS: u32 = 128;

/// PTX entry point of the block-per-row reduction (portable module): launched after every
/// log-probability and truncation fused kernel with its `params::FusedParams`, one block per sample
/// row (`device::reduce`).
pub const REDUCE_BLOCK_ENTRY: &str = "reduce_rows";
/// Threads per block of the block-per-row reduction.
pub const REDUCE_BLOCK_THREADS: u32 = 256;
/// Dynamic shared memory of the block-per-row reduction: per warp a candidate (8 bytes), a mass
/// (16) and a partial dot product (4).
pub const REDUCE_BLOCK_SMEM: u32 = 28 * (REDUCE_BLOCK_THREADS / 32);

/// The truncation step (portable module; per sample row, the certificate over the fused pass's top
/// lists and the sample within the kept set, `params::TruncateParams`) is one body built as two
/// entry points that differ only in their launch bound: how many of its blocks a multiprocessor
/// holds, and so how many registers a thread gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TruncateStep {
    /// `truncate_rows`: `.maxntid 512` + `.minnctapersm 1`, up to 128 registers a thread (no
    /// spills). For launches of at most one block per multiprocessor, where a second resident block
    /// would have nothing to do.
    Alone,
    /// `truncate_rows_paired`: `.maxntid 512` only; ptxas then keeps two blocks per multiprocessor
    /// (64 registers a thread, a few hundred bytes of spills), so a launch of more rows than
    /// multiprocessors runs in one wave of overlapping blocks instead of two.
    Paired,
}

impl TruncateStep {
    /// Both, in the order the host loads them.
    pub const ALL: [Self; 2] = [Self::Alone, Self::Paired];

    /// The PTX entry point.
    pub const fn entry(self) -> &'static str {
        match self {
            Self::Alone => "truncate_rows",
            Self::Paired => "truncate_rows_paired",
        }
    }

    /// The step for a launch of `rows` blocks on `sm_count` multiprocessors.
    pub const fn for_rows(rows: u32, sm_count: u32) -> Self {
        if rows <= sm_count { Self::Alone } else { Self::Paired }
    }

    /// Its launch bound.
    const fn bound(self) -> EntryBound {
        EntryBound { threads: TRUNCATE_THREADS, pinned: matches!(self, Self::Alone) }
    }
}

/// Threads per block of the truncation step (one block per sample row; its entries carry this
/// bound, so ptxas keeps a block's registers within the multiprocessor's 64 K).
pub const TRUNCATE_THREADS: u32 = 512;
/// Entries above the threshold the truncation step collects and sorts per row (a power of two). The
/// entries above `β` number about `(6·units²)^(1/3)` when the top tokens fall into the units at
/// random (≈ 750 for the 8448 units per row at B ≤ 16): more than this capacity is then improbable
/// (≈ e⁻²⁰), and an overflow only costs a round with a higher threshold.
pub const TRUNCATE_CAPACITY: u32 = 2048;
/// Dynamic shared memory of the truncation step: the collected entries (value, index: 8 bytes
/// each), the walk's running sums (4 bytes per kept entry), 16 bytes per warp for the block
/// reductions, and 64 bytes of control words (17 728 bytes).
pub const TRUNCATE_SMEM: u32 =
    8 * TRUNCATE_CAPACITY + 4 * crate::truncate::MAX_KEPT as u32 + 16 * (TRUNCATE_THREADS / 32) + 64;
/// PTX entry point of the fallback's gather (portable module): the listed rows' hidden states into
/// one compact block (`params::FallbackParams::gathered`).
pub const FALLBACK_GATHER_ENTRY: &str = "fallback_gather";
/// Threads per block of `fallback_gather` (one 16-byte chunk each).
pub const FALLBACK_GATHER_THREADS: u32 = 256;
/// PTX entry point of the fallback's logits (portable module): the raw logits of the rows the
/// certificate left, on the tensor cores (`params::FallbackLogitsParams`).
pub const FALLBACK_LOGITS_ENTRY: &str = "fallback_logits";
/// The tile shape and pipeline of `fallback_logits`: the portable `mma.sync` mainloop of this
/// variant (64-row batch tiles, so one read of the weight serves 64 listed rows; launched like the
/// variant with `Epilogue::Sample`'s threads and shared memory, persistent over its vocab ranges).
pub const FALLBACK_LOGITS_VARIANT: FusedVariant = MMA_SYNC_N64;
/// PTX entry point of the fallback's sampler (portable module): exact threshold search over one
/// row's materialized logits per block (`params::FallbackParams`).
pub const FALLBACK_SAMPLE_ENTRY: &str = "fallback_sample";
/// Threads per block of `fallback_sample` (its entry carries this bound, so ptxas keeps a block's
/// registers within the multiprocessor's 64 K).
pub const FALLBACK_SAMPLE_THREADS: u32 = 512;
/// Dynamic shared memory of `fallback_sample`: 32 reduction slots of 8 bytes, then one histogram of
/// 256 bins of 8 bytes per warp (its radix selects).
pub const FALLBACK_SAMPLE_SMEM: u32 = 32 * 8 + (FALLBACK_SAMPLE_THREADS / 32) * 256 * 8;

/// PTX entry point of the candidate-reduction kernel (test module; the baselines use it).
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
/// Every entry point of the test module.
pub const TEST_ENTRIES: [&str; 7] = [
    PHILOX_ENTRY,
    GUMBEL_ENTRY,
    GUMBEL_LOGITS_ENTRY,
    SOFTMAX_ENTRY,
    MULTINOMIAL_ENTRY,
    REDUCE_ENTRY,
    STREAM_READ_ENTRY,
];
/// PTX entry point of the read-only streaming kernel (`params::StreamReadParams`): the benchmark's
/// second bandwidth floor, every byte read once and folded, nothing written but one word per block.
pub const STREAM_READ_ENTRY: &str = "stream_read";
/// Threads per block of the read-only streaming kernel.
pub const STREAM_READ_THREADS: u32 = 512;
/// Threads per block of the baseline kernels.
pub const BASELINE_THREADS: u32 = 512;
/// Logits per block of the Gumbel-over-logits baseline (one candidate per row per chunk).
pub const LOGITS_CHUNK: u32 = 4 * BASELINE_THREADS * 4;
/// Shared memory of the baseline kernels (one 8-byte slot per warp).
pub const BASELINE_SMEM_BYTES: u32 = 8 * (BASELINE_THREADS / 32);

/// An entry point's launch bound, as the link step writes it into the PTX entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryBound {
    /// `.maxntid threads, 1, 1`: ptxas budgets registers for one block of that size per multiprocessor.
    pub threads: u32,
    /// Also `.minnctapersm 1`: the entry's register count is then known, which ptxas needs to honour
    /// the kernel's `setmaxnreg` ([`FusedVariant::moves_registers`]); without it ptxas may budget
    /// registers for two blocks per multiprocessor ([`TruncateStep::Alone`] takes all of them).
    pub pinned: bool,
}

impl EntryBound {
    /// `.maxntid threads, 1, 1` only (for an entry with a thread bound).
    fn unpinned(threads: Option<u32>) -> Option<Self> {
        threads.map(|threads| Self { threads, pinned: false })
    }
}

/// Every entry point with its module and launch bound (what the build's link step needs).
pub fn entry_points() -> impl Iterator<Item = (&'static str, Module, Option<EntryBound>)> {
    FUSED_VARIANTS
        .iter()
        .flat_map(|v| {
            let bound = v.max_threads().map(|threads| EntryBound { threads, pinned: v.moves_registers() });
            Epilogue::ALL.map(|e| (v.entry_for(e), v.module(), bound))
        })
        .chain([
            (EXPAND_ENTRY, Module::Portable, None),
            (MERGE_RANKS_ENTRY, Module::Portable, None),
            (ADJUST_ENTRY, Module::Portable, None),
            (REDUCE_BLOCK_ENTRY, Module::Portable, EntryBound::unpinned(Some(REDUCE_BLOCK_THREADS))),
            (FALLBACK_GATHER_ENTRY, Module::Portable, None),
            (FALLBACK_LOGITS_ENTRY, Module::Portable, EntryBound::unpinned(FALLBACK_LOGITS_VARIANT.max_threads())),
            (FALLBACK_SAMPLE_ENTRY, Module::Portable, EntryBound::unpinned(Some(FALLBACK_SAMPLE_THREADS))),
        ])
        .chain(TruncateStep::ALL.map(|t| (t.entry(), Module::Portable, Some(t.bound()))))
        .chain(TEST_ENTRIES.iter().map(|&e| (e, Module::Test, None)))
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    /// Every (tile, D step) of the vocab exactly once; head and tail of a cut tile complementary
    /// and owned by neighbouring ranges; each range's scored tiles ascending and above the range
    /// below's; every range within one stage of the mean.
    fn check_balanced(tiles: u32, n: u32, n_k: u32) {
        let mut seen = std::vec![0u8; (tiles * n_k) as usize];
        let mut scored = std::vec::Vec::new();
        let total = tiles as u64 * n_k as u64;
        for r in 0..n {
            let rs = RangeStages::balanced(tiles, n, r, n_k);
            let mut stage = 0;
            for j in 0..rs.pieces() {
                let pc = rs.piece(j);
                assert_eq!(rs.first_stage(j), stage, "{tiles} {n} {n_k} r {r} piece {j}");
                assert!(pc.k0 < pc.k1 && pc.k1 <= n_k && pc.tile < tiles);
                match pc.kind {
                    PieceKind::Head => assert!(j == 0 && pc.k0 == 0 && pc.k1 < n_k && r > 0),
                    PieceKind::Tail => assert!(j + 1 == rs.pieces() && pc.k0 > 0 && pc.k1 == n_k && r + 1 < n),
                    PieceKind::Whole => assert!(pc.k0 == 0 && pc.k1 == n_k),
                }
                if pc.kind == PieceKind::Head {
                    // The range below ends with the rest of this tile.
                    let below = RangeStages::balanced(tiles, n, r - 1, n_k);
                    let last = below.piece(below.pieces() - 1);
                    assert_eq!((last.kind, last.tile, last.k0), (PieceKind::Tail, pc.tile, pc.k1));
                } else {
                    scored.push(pc.tile);
                }
                for k in pc.k0..pc.k1 {
                    seen[(pc.tile * n_k + k) as usize] += 1;
                }
                stage += pc.k1 - pc.k0;
            }
            assert_eq!(stage, rs.stages());
            let (lo, hi) = (total * r as u64 / n as u64, total * (r as u64 + 1) / n as u64);
            assert_eq!(rs.stages() as u64, hi - lo);
            assert!(rs.stages() as u64 * n as u64 <= total + n as u64);
        }
        assert!(seen.iter().all(|&c| c == 1), "{tiles} tiles, {n} ranges, {n_k} steps");
        assert!(scored.windows(2).all(|w| w[0] < w[1]) && scored.len() == tiles as usize);
    }

    #[test]
    fn balanced_ranges_cover_every_stage_once_in_d_order_and_stay_within_one_stage_of_the_mean() {
        // Llama-3-70B (V 128256, D 8192) and Qwen3-8B (V 151936, D 4096) on 132 multiprocessors.
        check_balanced(1002, 132, 128);
        check_balanced(1187, 132, 64);
        let mut x = 0x9E37_79B9u32;
        let mut next = |m: u32| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % m
        };
        for _ in 0..300 {
            let n = 1 + next(140);
            let tiles = 2 * n + next(10 * n);
            let n_k = 1 + next(160);
            check_balanced(tiles, n, n_k);
        }
        // Whole tiles are the balanced split with n_k = 1.
        for r in 0..7 {
            assert_eq!(RangeStages::balanced(50, 7, r, 1), RangeStages::whole(50, 7, r, 1));
        }
    }

    #[test]
    fn stage_balancing_is_chosen_for_the_weight_as_a_kernels_when_whole_tiles_are_uneven() {
        let (s, l, t) = (Epilogue::Sample, Epilogue::LogProbs, Epilogue::Truncate);
        assert!(TMA_N16.balances_stages(s, 1002, 132, 1) && TMA_N16.balances_stages(l, 1002, 132, 1));
        assert!(!TMA_N16.balances_stages(t, 1002, 132, 1), "truncation kernels keep whole tiles");
        assert!(TMA_N32.balances_stages(s, 1002, 132, 1));
        assert!(!TMA_N32.balances_stages(s, 1187, 132, 1), "Qwen3-8B: 9 against 8.99");
        assert!(!TMA_N32.balances_stages(s, 1002, 66, 2), "two batch tiles");
        assert!(!TMAT_N64.balances_stages(s, 1002, 132, 1) && !MMA_SYNC_N16.balances_stages(s, 1002, 132, 1));
        assert!(!TMA_N16.balances_stages(s, 200, 132, 1), "fewer than two tiles per range");
        assert!(!TMA_N16.balances_stages(s, 1056, 132, 1), "8 tiles each");
        assert!(TMA_N16.can_balance_stages(s, 1056, 132, 1) && !TMA_N16.can_balance_stages(s, 1056, 1, 1));
        assert_eq!(TMA_N64X2.handoff_floats_per_thread(), 64);
    }

    /// Shared memory one block may have on compute capability 9.0 (227 KiB).
    const SM90_MAX_SMEM: u32 = 227 * 1024;

    #[test]
    fn every_variant_fits_and_is_named_once() {
        for (i, v) in FUSED_VARIANTS.iter().enumerate() {
            for e in Epilogue::ALL {
                let bytes = v.smem_bytes(e);
                assert!(bytes <= SM90_MAX_SMEM, "{} ({e:?}): {bytes} bytes of shared memory", v.entry);
                // The reduction's flag (8 bytes) reuses the merge area.
                assert!(v.merge_bytes(e) >= 8);
            }
            assert!(v.stages_lp <= v.stages && v.stages_lp >= 3, "{}", v.entry);
            if v.family == Family::MmaSync {
                assert_eq!(v.stages_lp, v.stages, "{}", v.entry);
            }
            // The masses (16-byte words) start 16-byte aligned after the merge area.
            assert_eq!(v.merge_bytes(Epilogue::LogProbs) % 16, 0, "{}", v.entry);
            assert_eq!(v.lane_state_bytes(Epilogue::Sample), 0);
            assert_eq!(v.entry_logprobs.strip_suffix("_lp"), Some(v.entry));
            assert_eq!(v.entry_truncate.strip_suffix("_tk"), Some(v.entry));
            assert!(FUSED_VARIANTS[..i].iter().all(|w| w.entry != v.entry), "{} listed twice", v.entry);
            assert_eq!(FusedVariant::by_name(v.entry), Some(*v));
            assert!(v.is_named(v.entry) && !v.is_named("fused_sample"));
            match v.family {
                Family::MmaSync => {
                    assert_eq!(v.module(), Module::Portable);
                    assert_eq!(v.max_threads(), Some(v.threads()));
                    assert!(v.warps_b <= 4 && 8 * v.n_tiles <= 32, "{}", v.entry);
                }
                Family::WgmmaWeightA | Family::WgmmaHiddenA => {
                    assert_eq!(v.module(), Module::Hopper);
                    assert_eq!(v.max_threads(), Some(384));
                    // The kernels that move registers have one producer and two consumer warpgroups.
                    assert_eq!(v.moves_registers(), v.family == Family::WgmmaHiddenA || 8 * v.n_tiles == 64);
                    // wgmma slabs are whole 1024-byte swizzle atoms; N is a wgmma width with a shape.
                    assert_eq!(v.stage_bytes() % 1024, 0, "{}", v.entry);
                    assert!(matches!(8 * v.n_tiles, 16 | 32 | 64), "{}", v.entry);
                    assert!(v.warps_b == 1 || v.warps_b == 2, "{}", v.entry);
                    // A TMA box is at most 256 rows.
                    assert!(v.block_b() <= 256, "{}", v.entry);
                }
            }
            if v.family == Family::WgmmaHiddenA {
                // 64 batch rows (one m64 A tile) per consumer.
                assert_eq!(v.n_tiles, 8, "{}", v.entry);
            }
        }
        // The test module's entries are not fused-kernel names, and every entry appears once.
        let all: std::vec::Vec<_> = entry_points().collect();
        for (i, (e, _, _)) in all.iter().enumerate() {
            assert!(all[..i].iter().all(|(f, _, _)| f != e), "{e} listed twice");
        }
        assert_eq!(all.len(), Epilogue::ALL.len() * FUSED_VARIANTS.len() + 9 + TEST_ENTRIES.len());
        // Sixteen boxes of 8 rows, 4 apart, cover a 128-row tile's 32 Philox groups.
        assert_eq!(TMA_WEIGHT_BOXES * TMA_WEIGHT_BOX_ROWS, BLOCK_V);
        assert_eq!(TMA_WEIGHT_ROW_STEP * TMA_WEIGHT_BOX_ROWS, WARP_TILE_V);
    }

    #[test]
    fn the_truncation_step_takes_a_multiprocessor_alone_up_to_one_block_each() {
        for sms in [1u32, 114, 132, 148] {
            for rows in 1..=2 * sms + 1 {
                let want = if rows <= sms { TruncateStep::Alone } else { TruncateStep::Paired };
                assert_eq!(TruncateStep::for_rows(rows, sms), want, "{rows} rows on {sms} SMs");
            }
        }
        let bounds: std::vec::Vec<_> =
            entry_points().filter(|(e, _, _)| TruncateStep::ALL.iter().any(|t| t.entry() == *e)).collect();
        assert_eq!(bounds.len(), 2);
        for (e, module, bound) in bounds {
            assert_eq!(module, Module::Portable, "{e}");
            let b = bound.expect("the step's entries carry a bound");
            assert_eq!((b.threads, b.pinned), (TRUNCATE_THREADS, e == TruncateStep::Alone.entry()), "{e}");
        }
    }

    #[test]
    fn every_variant_is_chosen_somewhere() {
        let mut chosen = std::vec::Vec::new();
        for b in 1..=512 {
            for v in [1000, 128_256, 151_936, 151_937] {
                for sm90a in [false, true] {
                    chosen.push(variant_for_batch((b, 4096, v), Epilogue::Sample, sm90a, 132));
                }
            }
        }
        for v in FUSED_VARIANTS {
            assert!(chosen.contains(&v), "{} is never chosen", v.entry);
        }
    }

    #[test]
    fn the_launch_for_an_unknown_hidden_size_needs_the_largest_buffers() {
        // `GpuBackend::alloc_samples` knows no D and sizes its candidates (`B × vocab ranges`) by the
        // launch of `d = u32::MAX`: it must have at least the vocab ranges of the launch of any D
        // (one block per multiprocessor, as every kernel that the choice depends on D for runs).
        let ranges = |f: FusedVariant, b: u32, v: u32| f.n_vranges(132, 1, f.batch_tiles(b), v);
        for b in 1..=2048 {
            for v in [1000, 32_768, 128_256, 151_936, 151_937] {
                for e in Epilogue::ALL {
                    let any = ranges(variant_for_batch((b, u32::MAX, v), e, true, 132), b, v);
                    for d in [64, 2048, 4096, TMAT_TURNS_MAX_D, TMAT_TURNS_MAX_D + 1, 16384] {
                        let this = ranges(variant_for_batch((b, d, v), e, true, 132), b, v);
                        assert!(any >= this, "B = {b}, D = {d}, V = {v}, {e:?}: {any} < {this} ranges");
                    }
                }
            }
        }
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
        assert!(FUSED_VARIANTS.iter().all(|v| v.family != Family::WgmmaHiddenA || !v.supports_vocab(1000)));
        assert!(FUSED_VARIANTS.iter().all(|v| v.supports_vocab(151_936)));
    }

    #[test]
    fn the_batch_size_choice_respects_the_modules() {
        for b in [1, 2, 8, 9, 16, 17, 32, 33, 64, 65, 128, 256, 1000] {
            for v in [1000, 1008, 151_937, 151_936, 128_256] {
                for e in Epilogue::ALL {
                    assert_eq!(
                        variant_for_batch((b, 4096, v), e, false, 132).module(),
                        Module::Portable,
                        "B = {b} without sm_90a"
                    );
                    let f = variant_for_batch((b, 4096, v), e, true, 132);
                    assert!(f.uses_tma(), "B = {b} with sm_90a: {}", f.entry);
                    assert!(f.supports_vocab(v), "B = {b}, V = {v}: {}", f.entry);
                }
            }
            // Qwen3-8B's and Llama-3-70B's vocabularies get the hidden-as-A kernels beyond 64 rows;
            // from 33 rows on an H200 (132 multiprocessors) Llama-3-70B's already: both kernels'
            // largest range is 1024 rows there, where Qwen3-8B's would be 1280 against 1152.
            let qwen = variant_for_batch((b, 4096, 151_936), Epilogue::Sample, true, 132);
            assert_eq!(qwen.family == Family::WgmmaHiddenA, b > 64, "B = {b}: {}", qwen.entry);
            let llama = variant_for_batch((b, 8192, 128_256), Epilogue::Sample, true, 132);
            assert_eq!(llama.family == Family::WgmmaHiddenA, b > 32, "B = {b}: {}", llama.entry);
            // With log-probabilities both from 33 rows on (at 17–32 the hidden-as-A kernel only where its
            // largest range is strictly shorter: Llama-3-70B's is equal), with truncation both from 65;
            // V % 16 ≠ 0 never.
            for (e, v, from) in [
                (Epilogue::LogProbs, 151_936, 32),
                (Epilogue::LogProbs, 128_256, 32),
                (Epilogue::Truncate, 151_936, 64),
                (Epilogue::Truncate, 128_256, 64),
            ] {
                let f = variant_for_batch((b, 4096, v), e, true, 132);
                assert_eq!(f.family == Family::WgmmaHiddenA, b > from, "B = {b}, V = {v}, {e:?}: {}", f.entry);
                assert_ne!(variant_for_batch((b, 4096, 151_937), e, true, 132).family, Family::WgmmaHiddenA);
            }
        }
        // Beyond 64 rows the hidden-as-A kernel by how the rows fill the batch tiles (and at 80–128
        // rows by D), every epilogue.
        for (d, turns) in
            [(2048, true), (4096, true), (TMAT_TURNS_MAX_D, true), (6144, false), (8192, false), (16384, false)]
        {
            let at_80 = if turns { TMAT_N64 } else { TMAT_N64X2 };
            for (bs, want) in
                [(65..=79, TMAT_N64X2), (80..=128, at_80), (129..=192, TMAT_N64), (193..=2048, TMAT_N64X2)]
            {
                for b in bs {
                    for e in Epilogue::ALL {
                        for v in [151_936, 128_256] {
                            assert_eq!(
                                variant_for_batch((b, d, v), e, true, 132),
                                want,
                                "B = {b}, D = {d}, V = {v}, {e:?}"
                            );
                        }
                    }
                }
            }
        }
        assert_eq!((TMAT_N64.padded_rows(65), TMAT_N64X2.padded_rows(65), TMAT_N64.last_tile_rows(65)), (128, 128, 1));
        assert_eq!(
            (TMAT_N64.padded_rows(129), TMAT_N64X2.padded_rows(129), TMAT_N64X2.last_tile_rows(256)),
            (192, 256, 128)
        );
        assert_eq!(
            (TMA_N64.largest_range_rows(132, 64, 151_936), TMAT_N64.largest_range_rows(132, 64, 151_936)),
            (1152, 1280)
        );
        assert_eq!(
            (TMA_N64.largest_range_rows(132, 64, 128_256), TMAT_N64.largest_range_rows(132, 64, 128_256)),
            (1024, 1024)
        );
    }
}
