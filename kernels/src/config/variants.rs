//! The fused-kernel variants: families, modules, epilogues, the variant table ([`FUSED_VARIANTS`])
//! and each variant's geometry (threads, shared memory, tiles, ranges).

use super::*;

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
    /// `mma.sync.m16n8k16` (sm_80+) on the `wgmma` kernels' TMA pipeline, for the portable module (its
    /// PTX features are sm_90's, not sm_90a's: a Blackwell GPU JIT-compiles them): the TMA producer
    /// warp fills the ring of 128-byte-swizzled slabs in the weight-as-A row order
    /// ([`vocab_of_slab_row`]), and consumers of 4 warps (each 32 vocab rows × `8·NB` batch rows) read
    /// their fragments with `ldmatrix` and hand each slot back on its `mbarrier`: no block barrier
    /// per stage. `warps_b = 1`: two consumers take turns on the tiles; `warps_b = 2` or 4: as many
    /// consumers split a `8·NB·warps_b`-row batch tile. Needs the launch's tensor maps. See
    /// `device::fused::tma_mma_sync`.
    TmaMmaSync,
    /// No mainloop: a GEMM (cuBLAS, launched by the host on the same stream) writes the call's raw
    /// f32 logits `[rows, ld]` first, and the kernel's warps load them a batch row at a time (a warp
    /// per row, a lane per Philox group of each 128-row tile) and run the same lane epilogue, block
    /// merge and reduction. For batches where the portable family's `mma.sync` mainloop is
    /// compute-bound and the GEMM library reaches the tensor cores' rate (its native instructions on
    /// any GPU); needs `ld · rows · 4` bytes of logits. Loads on every GPU the portable module does.
    /// See `device::fused::gemm_logits`.
    GemmLogits,
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
    /// PTX entry point of the truncation kernel ([`Epilogue::Truncate`]), or `None` for a variant
    /// without one ([`variant_for_batch`] never picks it for a truncating call).
    pub entry_truncate: Option<&'static str>,
    /// Mainloop, producer and fragment layout.
    pub family: Family,
    /// `NB`: 8-row N tiles per warp (`mma.sync`, both families: a warp covers `8·NB` batch rows) or
    /// per consumer warpgroup (`wgmma`: `N = 8·NB`). [`Family::GemmLogits`]: sizes the block only
    /// ([`Self::block_b`] = `8·NB·warps_b` rows).
    pub n_tiles: u32,
    /// [`Family::MmaSync`]: warps splitting the batch (each `8·NB` rows; 4 more split the vocab).
    /// [`Family::GemmLogits`]: `4·warps_b` warps, each scoring whole rows.
    /// `wgmma` and [`Family::TmaMmaSync`]: 1 = the two consumers take turns on the tiles, 2 = they
    /// split the batch tile.
    pub warps_b: u32,
    /// Pipeline depth (`stages − 1` stages in flight while one is multiplied); 0 in the GEMM-fed
    /// kernels, which have no pipeline.
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
    entry_truncate: Some("fused_sample_block_nb2_tk"),
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
    entry_truncate: Some("fused_sample_block_nb4_s3_tk"),
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
    entry_truncate: Some("fused_sample_block_nb4x2_tk"),
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
    entry_truncate: Some("fused_sample_block_nb4x4_tk"),
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
    entry_truncate: Some("fused_sample_wgmma_tma_n16_tk"),
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
    entry_truncate: Some("fused_sample_wgmma_tma_n32_tk"),
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
    entry_truncate: Some("fused_sample_wgmma_tma_n64_tk"),
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
    entry_truncate: Some("fused_sample_wgmma_tma_n64x2_tk"),
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
    entry_truncate: Some("fused_sample_wgmma_tmat_n64_tk"),
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
    entry_truncate: Some("fused_sample_wgmma_tmat_n64x2_tk"),
    family: Family::WgmmaHiddenA,
    n_tiles: 8,
    warps_b: 2,
    stages: 4,
    stages_lp: 4,
};

/// Portable TMA, up to 16 rows where D > 4096 or with truncation (`variant_for_batch`): two
/// consumers of 4 warps taking turns on the tiles, 16 batch rows.
pub const TMA_MMA_N16: FusedVariant = FusedVariant {
    entry: "fused_sample_mma_tma_n16",
    entry_logprobs: "fused_sample_mma_tma_n16_lp",
    entry_truncate: Some("fused_sample_mma_tma_n16_tk"),
    family: Family::TmaMmaSync,
    n_tiles: 2,
    warps_b: 1,
    stages: 10,
    stages_lp: 10,
};
/// Portable TMA, up to 32 rows where D > 4096 or with truncation: two consumers taking turns, 32
/// batch rows.
pub const TMA_MMA_N32: FusedVariant = FusedVariant {
    entry: "fused_sample_mma_tma_n32",
    entry_logprobs: "fused_sample_mma_tma_n32_lp",
    entry_truncate: Some("fused_sample_mma_tma_n32_tk"),
    family: Family::TmaMmaSync,
    n_tiles: 4,
    warps_b: 1,
    stages: 10,
    stages_lp: 10,
};
/// Portable TMA, beyond 32 rows where the 64-row-a-warp variants would pad more rows (129–192, …)
/// and for truncation: two consumers splitting 64-row batch tiles (32 rows each).
pub const TMA_MMA_N64: FusedVariant = FusedVariant {
    entry: "fused_sample_mma_tma_n64",
    entry_logprobs: "fused_sample_mma_tma_n64_lp",
    entry_truncate: Some("fused_sample_mma_tma_n64_tk"),
    family: Family::TmaMmaSync,
    n_tiles: 4,
    warps_b: 2,
    stages: 8,
    stages_lp: 8,
};
/// Portable TMA, up to 64 rows (all but truncation up to D = 4096; log-probabilities at 33–64 rows
/// beyond): 64-row batch tiles of one consumer, two consumers of 4 warps taking
/// turns on the tiles, each warp 32 vocab rows × 64 batch rows (`NB = 8`: the columns' epilogue in
/// two passes of selects, `fragment::mma_sync_tile_wide`). The lanes' 16 candidates live in 32 KiB
/// of shared memory ([`FusedVariant::lane_cands`]: 7 stages), and in the log-probability kernel
/// their 16 masses in 64 KiB more (4 stages). No truncation kernel (its lanes' 16 top lists
/// spilled 9.5 KiB; docs/findings/48).
pub const TMA_MMA_N64T: FusedVariant = FusedVariant {
    entry: "fused_sample_mma_tma_n64t",
    entry_logprobs: "fused_sample_mma_tma_n64t_lp",
    entry_truncate: None,
    family: Family::TmaMmaSync,
    n_tiles: 8,
    warps_b: 1,
    stages: 7,
    stages_lp: 4,
};
/// Portable TMA, beyond 64 rows where it pads no more rows than [`TMA_MMA_N64`]: 128-row batch
/// tiles the two consumers split, each warp 32 vocab rows × 64 batch rows (`NB = 8`; candidates in
/// shared memory: 5 stages; with the masses too, the log-probability kernel 3). No truncation
/// kernel.
pub const TMA_MMA_N128: FusedVariant = FusedVariant {
    entry: "fused_sample_mma_tma_n128",
    entry_logprobs: "fused_sample_mma_tma_n128_lp",
    entry_truncate: None,
    family: Family::TmaMmaSync,
    n_tiles: 8,
    warps_b: 2,
    stages: 5,
    stages_lp: 3,
};
/// Portable, GEMM-fed ([`Family::GemmLogits`]): 8 warps over 32-row batch tiles, each batch row
/// scored whole by one warp (4 rows a warp), the logits from a GEMM before it. (`n_tiles` and
/// `warps_b` only size the block here: `8·n_tiles·warps_b` rows, `4·warps_b` warps.)
pub const GEMM_LOGITS: FusedVariant = FusedVariant {
    entry: "gemm_logits_sample",
    entry_logprobs: "gemm_logits_sample_lp",
    entry_truncate: Some("gemm_logits_sample_tk"),
    family: Family::GemmLogits,
    n_tiles: 2,
    warps_b: 2,
    stages: 0,
    stages_lp: 0,
};
/// Resident blocks per multiprocessor the GEMM-fed kernels' registers are budgeted for
/// ([`FusedVariant::max_threads`]): 128 registers a thread (120 / 108 / 116 used, no spills), 16 warps
/// a multiprocessor. Three blocks (80 registers, 104–764 bytes of spills) and four tiles a screen
/// were up to 8% and 11% slower at 136–512 rows on an H100 (one point of the ten 1% faster;
/// docs/findings/53).
pub const GEMM_LOGITS_BLOCKS_PER_SM: u32 = 2;
/// Every fused-kernel variant the library launches (each chosen by [`variant_for_call`] for some
/// [`KernelSet`]).
pub const FUSED_VARIANTS: [FusedVariant; 16] = [
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
    TMA_MMA_N16,
    TMA_MMA_N32,
    TMA_MMA_N64,
    TMA_MMA_N64T,
    TMA_MMA_N128,
    GEMM_LOGITS,
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
    /// Whether the plain kernel's entry point is `name` ([`Self::is_entry`] with [`Epilogue::Sample`]).
    pub const fn is_named(&self, name: &str) -> bool {
        self.is_entry(Epilogue::Sample, name)
    }
    /// The entry point of the kernel with epilogue `e` (`None`: the variant has no such kernel).
    #[inline]
    pub const fn entry_for(&self, e: Epilogue) -> Option<&'static str> {
        match e {
            Epilogue::Sample => Some(self.entry),
            Epilogue::LogProbs => Some(self.entry_logprobs),
            Epilogue::Truncate => self.entry_truncate,
        }
    }
    /// Whether the variant has a kernel with epilogue `e` ([`Self::entry_for`]).
    #[inline]
    pub const fn has_epilogue(&self, e: Epilogue) -> bool {
        self.entry_for(e).is_some()
    }
    /// Whether `name` is the entry point of the variant's kernel with epilogue `e` (the device entry
    /// points assert it at compile time).
    pub const fn is_entry(&self, e: Epilogue, name: &str) -> bool {
        match self.entry_for(e) {
            Some(entry) => str_eq(entry, name),
            None => false,
        }
    }
    /// The PTX module the kernel is compiled into.
    #[inline]
    pub const fn module(&self) -> Module {
        match self.family {
            Family::MmaSync | Family::TmaMmaSync | Family::GemmLogits => Module::Portable,
            Family::WgmmaWeightA | Family::WgmmaHiddenA => Module::Hopper,
        }
    }
    /// Warps per block.
    #[inline]
    pub const fn warps(&self) -> u32 {
        match self.family {
            Family::MmaSync | Family::GemmLogits => WARPS_PER_BLOCK * self.warps_b,
            Family::WgmmaWeightA | Family::WgmmaHiddenA => WS_WARPS,
            // The producer warp and the consumers' warps.
            Family::TmaMmaSync => 1 + WARPS_PER_BLOCK * self.consumers(),
        }
    }
    /// Consumers of the warp-specialized kernels: two (the `wgmma` warpgroups; in the portable TMA
    /// kernels, groups of 4 warps), taking turns or splitting the batch tile. 0 in the
    /// block-staging `mma.sync` kernels (every warp copies and multiplies).
    #[inline]
    pub const fn consumers(&self) -> u32 {
        match self.family {
            Family::MmaSync | Family::GemmLogits => 0,
            Family::WgmmaWeightA | Family::WgmmaHiddenA | Family::TmaMmaSync => 2,
        }
    }
    /// Whether the consumers take turns on the tiles (`warps_b = 1`) instead of splitting the batch
    /// tile (warp-specialized kernels only).
    #[inline]
    pub const fn takes_turns(&self) -> bool {
        self.consumers() > 0 && self.warps_b == 1
    }
    /// Threads per block.
    #[inline]
    pub const fn threads(&self) -> u32 {
        32 * self.warps()
    }
    /// The thread bound the link step writes into the PTX entry (`.maxntid`), so ptxas budgets
    /// registers for at least one block of that size per multiprocessor (a block of 512 threads
    /// cannot launch with more than 128 registers per thread: `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`).
    /// The GEMM-fed kernels bound [`GEMM_LOGITS_BLOCKS_PER_SM`] blocks' threads, so that ptxas
    /// leaves registers for that many resident blocks (their loads and epilogue need warps, not
    /// registers).
    #[inline]
    pub const fn max_threads(&self) -> Option<u32> {
        match self.family {
            Family::GemmLogits => Some(GEMM_LOGITS_BLOCKS_PER_SM * self.threads()),
            _ => Some(self.threads()),
        }
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
            Family::MmaSync | Family::TmaMmaSync | Family::GemmLogits => false,
            Family::WgmmaWeightA => 8 * self.n_tiles == 64,
            Family::WgmmaHiddenA => true,
        }
    }
    /// Whether the kernel reads logits a GEMM wrote before it ([`Family::GemmLogits`]) instead of
    /// multiplying: the host runs the GEMM and passes [`crate::params::GemmLogitsParams`].
    #[inline]
    pub const fn reads_gemm_logits(&self) -> bool {
        matches!(self.family, Family::GemmLogits)
    }
    /// Whether the kernel copies with TMA and so needs the launch's tensor maps.
    #[inline]
    pub const fn uses_tma(&self) -> bool {
        matches!(self.family, Family::WgmmaWeightA | Family::WgmmaHiddenA | Family::TmaMmaSync)
    }
    /// Whether the kernel needs PTX for sm_90 or later (TMA, `mbarrier` transaction counts): the
    /// `wgmma` kernels and the portable TMA family. A portable module built for an older target
    /// (`FLASHSAMPLING_SM=sm_80`) leaves the portable TMA family out.
    #[inline]
    pub const fn needs_sm90(&self) -> bool {
        self.uses_tma()
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
            Family::MmaSync | Family::WgmmaWeightA | Family::TmaMmaSync | Family::GemmLogits => BLOCK_V,
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
            // The one warp that scores the row.
            Family::GemmLogits => 1,
            // The consumers' warps: all 8 when taking turns, the 4 of each consumer when splitting.
            Family::WgmmaWeightA | Family::TmaMmaSync => 8 / self.warps_b,
            // The consumers: both when taking turns, one per row when splitting.
            Family::WgmmaHiddenA => 2 / self.warps_b,
        }
    }
    /// Top-list units per batch row of a block in the truncation kernels: the lanes that score the
    /// row with different vocab rows (`device::fragment::put_tops_columns`, `put_tops_rows`,
    /// `put_top`) — the 8 lane groups of each contributing warp (column layouts), the 4 lanes of a
    /// group (hidden-as-A), each of whose lists is stored as 4 units (`truncate::LANE_TOP_WIDE`), the
    /// 32 lanes of the row's warp (GEMM-fed).
    #[inline]
    pub const fn top_units(&self) -> u32 {
        match self.family {
            Family::MmaSync | Family::WgmmaWeightA | Family::TmaMmaSync => 8 * self.merge_contributors(),
            // The 32 lanes of the row's warp (`device::fragment::put_top`, unit = lane).
            Family::GemmLogits => 32,
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
    /// Row masses ([`crate::params::RowMass`]) a consumer lane keeps in shared memory for its batch
    /// rows: in a `wgmma` kernel one per batch column of the weight-as-A layout (`N / 4`), one per
    /// batch row of the hidden-as-A layout (2); in a portable TMA kernel of 64 batch rows per warp one
    /// per column (`2·NB` = 16); none in the other `mma.sync` kernels, whose masses stay in registers.
    #[inline]
    pub const fn lane_masses(&self) -> u32 {
        match self.family {
            Family::MmaSync | Family::GemmLogits => 0,
            Family::TmaMmaSync if self.n_tiles > 4 => 2 * self.n_tiles,
            Family::TmaMmaSync => 0,
            Family::WgmmaWeightA => 2 * self.n_tiles,
            Family::WgmmaHiddenA => 2,
        }
    }
    /// Bytes of the lanes' row masses in shared memory with epilogue `e` ([`Self::lane_masses`]: the
    /// `wgmma` log-probability and truncation kernels, the portable TMA `_lp` kernels at `NB = 8`),
    /// after the merge area: mass `i` of consumer thread `t` (0..256) at `16·(i·256 + t)`. In
    /// registers, the masses of 16 batch columns pushed the N = 64 kernels into 2.8 KiB of spills
    /// (docs/findings/17); in shared memory they cost a load and a store per column and tile and keep
    /// the order of every sum, so the log-probabilities stay bit-identical.
    #[inline]
    pub const fn lane_masses_bytes(&self, e: Epilogue) -> u32 {
        if e.has_logprobs() { 16 * CONSUMER_THREADS * self.lane_masses() } else { 0 }
    }
    /// Bytes of the lanes' state in shared memory: their row masses ([`Self::lane_masses_bytes`]),
    /// then their candidates ([`Self::lane_cands`]: candidate `i` of consumer thread `t` at
    /// `8·(i·256 + t)` after the masses).
    #[inline]
    pub const fn lane_state_bytes(&self, e: Epilogue) -> u32 {
        self.lane_masses_bytes(e) + 8 * CONSUMER_THREADS * self.lane_cands(e)
    }
    /// Candidates a consumer lane keeps in shared memory with epilogue `e`: in the portable TMA
    /// kernels of 64 batch rows a warp one per column (`2·NB` = 16: beside 64 accumulators, 32 more
    /// words in registers left the `mma.sync` mainloop reloading spilled words at every stage,
    /// docs/findings/50); none elsewhere (registers).
    #[inline]
    pub const fn lane_cands(&self, e: Epilogue) -> u32 {
        match (self.family, e) {
            (Family::TmaMmaSync, Epilogue::Sample | Epilogue::LogProbs) if self.n_tiles > 4 => 2 * self.n_tiles,
            _ => 0,
        }
    }
    /// Where the lanes' candidates ([`Self::lane_cands`]) start in the dynamic shared memory: after
    /// the merge area and the masses.
    #[inline]
    pub const fn lane_cands_offset(&self, e: Epilogue) -> u32 {
        self.merge_bytes(e) + self.lane_masses_bytes(e)
    }
    /// Bytes before the ring: the merge area ([`Self::merge_bytes`]) and the lanes' row masses and
    /// candidates ([`Self::lane_state_bytes`]).
    #[inline]
    pub const fn prefix_bytes(&self, e: Epilogue) -> u32 {
        self.merge_bytes(e) + self.lane_state_bytes(e)
    }
    /// Dynamic shared memory: the merge area and the lanes' state ([`Self::prefix_bytes`]; the
    /// GEMM-fed kernels nothing more), then (the TMA kernels) 1024 bytes of slack for the ring's 1024-byte alignment and the 8-byte barriers
    /// (full and empty per slot, two turns), then the ring of [`Self::stages_for`] stages.
    #[inline]
    pub const fn smem_bytes(&self, e: Epilogue) -> u32 {
        let stages = self.stages_for(e);
        match self.family {
            Family::MmaSync => self.prefix_bytes(e) + stages * self.stage_bytes(),
            // No ring: the merge area only.
            Family::GemmLogits => self.prefix_bytes(e),
            Family::WgmmaWeightA | Family::WgmmaHiddenA | Family::TmaMmaSync => {
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
    /// `FLASHSAMPLING_BALANCE_STAGES=1`, still needs): only the weight-as-A kernels (`wgmma`, and the
    /// portable TMA family's, whose consumers read the same slabs) of the plain and the
    /// log-probability epilogues (their consumers hand a part-done tile's accumulators over,
    /// `device::handoff`; the truncation kernels keep whole tiles: the handoff code cost their
    /// register-bound consumers spills and up to 8.6% at Qwen3-8B B = 64, docs/findings/34), only one
    /// batch tile (every block of the grid is then resident at once, which the handoff's wait needs:
    /// at most one block per multiprocessor), at least two tiles per range.
    #[inline]
    pub const fn can_balance_stages(&self, e: Epilogue, tiles: u32, n: u32, n_btiles: u32) -> bool {
        matches!(self.family, Family::WgmmaWeightA | Family::TmaMmaSync)
            && !matches!(e, Epilogue::Truncate)
            && n_btiles == 1
            && n >= 2
            && tiles >= 2 * n
    }
    /// f32 accumulators per consumer thread of the weight-as-A kernels (`N`: two 64-row halves of
    /// `N / 2`; the portable TMA family: 2 M tiles × `NB` N tiles × 4 = `8·NB`, the same), which a
    /// head hands over (`FusedParams::handoff`).
    #[inline]
    pub const fn handoff_floats_per_thread(&self) -> u32 {
        8 * self.n_tiles
    }
}
