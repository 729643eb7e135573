//! The entry points of the non-fused kernels (row expansion, adjustments, reductions, the truncation
//! step and fallback, tests and baselines), their launch constants, and every entry's PTX module and
//! thread bound ([`entry_points`]).

use super::*;

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

/// PTX entry point of the vocab-parallel merge on the exact log-sum-exp path (portable module): the
/// ranks' bins merged, each row's log-probabilities from the winner's logits
/// (`params::MergeRanksParams::exact_at`, `crate::ranks::merge_exact_rank_row`).
pub const MERGE_RANKS_EXACT_ENTRY: &str = "merge_ranks_exact";

/// PTX entry point of the block-per-row reduction (portable module): launched after every
/// log-probability and truncation fused kernel with its `params::FusedParams`, one block per sample
/// row (`device::reduce`).
pub const REDUCE_BLOCK_ENTRY: &str = "reduce_rows";
/// PTX entry point of the block-per-row reduction on the exact log-sum-exp path (portable module):
/// each row's log-sum-exps from its exact masses (`params::FusedParams::exact`), after
/// `exact_mass_rows`; launched like `reduce_rows`.
pub const REDUCE_EXACT_ENTRY: &str = "reduce_rows_exact";
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

/// PTX entry point of the truncation step of a call that scores given tokens (portable module;
/// [`TruncateStep::Alone`]'s body and launch bound, the given tokens scored over each certified kept
/// set: `device::truncate::truncate_rows_scored`).
pub const TRUNCATE_SCORED_ENTRY: &str = "truncate_rows_scored";
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
/// PTX entry point of the fallback's sampler of a call that scores given tokens (portable module;
/// `fallback_sample`'s body and launch bound, the given tokens scored over each row's kept set).
pub const FALLBACK_SAMPLE_SCORED_ENTRY: &str = "fallback_sample_scored";
/// PTX entry point of the exact log-sum-exp path's truncating calls (portable module;
/// `fallback_sample_scored`'s body and launch bound over every sample row, the log-sum-exps exact
/// and the tokens' logits the reduction's).
pub const FALLBACK_SAMPLE_EXACT_ENTRY: &str = "fallback_sample_exact";
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
/// Scoring baseline: log-softmax of the given tokens over materialized logits.
pub const LOGSOFTMAX_GATHER_ENTRY: &str = "logsoftmax_gather";
/// Speculative-decoding baseline: the rejection sampler over materialized probabilities.
pub const REJECTION_ENTRY: &str = "rejection_rows";
/// Every entry point of the test module.
pub const TEST_ENTRIES: [&str; 9] = [
    REJECTION_ENTRY,
    PHILOX_ENTRY,
    GUMBEL_ENTRY,
    GUMBEL_LOGITS_ENTRY,
    SOFTMAX_ENTRY,
    MULTINOMIAL_ENTRY,
    LOGSOFTMAX_GATHER_ENTRY,
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

/// Every entry point with its module and launch bound (what the build's link step needs), for the
/// portable module built for sm_90 (the default and the shipped PTX): [`entry_points_for`]`(90)`.
pub fn entry_points() -> impl Iterator<Item = (&'static str, Module, Option<EntryBound>)> {
    entry_points_for(90)
}

/// PTX entry point of the exact log-masses (portable module): each row's processed and raw
/// [`crate::exactmass::ExactMass`] over a call's materialized logits, for the exact log-sum-exp
/// path (`params::GemmLogitsParams`, `FusedParams::exact`).
pub const EXACT_MASS_ENTRY: &str = "exact_mass_rows";
/// Threads per block of `exact_mass_rows` (one block per sample row).
pub const EXACT_MASS_THREADS: u32 = 256;
/// Dynamic shared memory of `exact_mass_rows`: one row's two [`crate::exactmass::ExactMass`]es
/// (48 bytes) per warp.
pub const EXACT_MASS_SMEM: u32 = 48 * (EXACT_MASS_THREADS / 32);

/// The compute capability (`major · 10 + minor`) of a PTX target name `sm_XY`, or its arch- or
/// family-specific `sm_XYa` / `sm_XYf` (`sm_90a` → 90); `None` for anything else.
pub fn sm_number(target: &str) -> Option<u32> {
    let digits = target.strip_prefix("sm_")?;
    let digits = digits.strip_suffix(['a', 'f']).unwrap_or(digits);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether the portable module built for `portable_sm` (a [`sm_number`]) has the kernels of
/// `variant`: all but the portable TMA family ([`FusedVariant::needs_sm90`]) below sm_90.
pub const fn portable_module_has(variant: &FusedVariant, portable_sm: u32) -> bool {
    !matches!(variant.module(), Module::Portable) || !variant.needs_sm90() || portable_sm >= 90
}

/// [`entry_points`] with the portable module built for `portable_sm` (a [`sm_number`]): below 90 it
/// leaves out the kernels that need sm_90 PTX ([`portable_module_has`]).
pub fn entry_points_for(portable_sm: u32) -> impl Iterator<Item = (&'static str, Module, Option<EntryBound>)> {
    FUSED_VARIANTS
        .iter()
        .filter(move |v| portable_module_has(v, portable_sm))
        .flat_map(|v| {
            let bound = v.max_threads().map(|threads| EntryBound { threads, pinned: v.moves_registers() });
            Epilogue::ALL.into_iter().filter_map(move |e| Some((v.entry_for(e)?, v.module(), bound)))
        })
        .chain([
            (EXPAND_ENTRY, Module::Portable, None),
            (MERGE_RANKS_ENTRY, Module::Portable, None),
            (ADJUST_ENTRY, Module::Portable, None),
            (REDUCE_BLOCK_ENTRY, Module::Portable, EntryBound::unpinned(Some(REDUCE_BLOCK_THREADS))),
            (REDUCE_EXACT_ENTRY, Module::Portable, EntryBound::unpinned(Some(REDUCE_BLOCK_THREADS))),
            (MERGE_RANKS_EXACT_ENTRY, Module::Portable, None),
            (FALLBACK_GATHER_ENTRY, Module::Portable, None),
            (FALLBACK_LOGITS_ENTRY, Module::Portable, EntryBound::unpinned(FALLBACK_LOGITS_VARIANT.max_threads())),
            (FALLBACK_SAMPLE_ENTRY, Module::Portable, EntryBound::unpinned(Some(FALLBACK_SAMPLE_THREADS))),
            (FALLBACK_SAMPLE_SCORED_ENTRY, Module::Portable, EntryBound::unpinned(Some(FALLBACK_SAMPLE_THREADS))),
            (FALLBACK_SAMPLE_EXACT_ENTRY, Module::Portable, EntryBound::unpinned(Some(FALLBACK_SAMPLE_THREADS))),
            (EXACT_MASS_ENTRY, Module::Portable, EntryBound::unpinned(Some(EXACT_MASS_THREADS))),
        ])
        .chain(TruncateStep::ALL.map(|t| (t.entry(), Module::Portable, Some(t.bound()))))
        .chain([(TRUNCATE_SCORED_ENTRY, Module::Portable, Some(TruncateStep::Alone.bound()))])
        .chain(TEST_ENTRIES.iter().map(|&e| (e, Module::Test, None)))
}
