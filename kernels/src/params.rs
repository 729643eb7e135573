//! Kernel parameter structs, passed by value (FlashAttention-2 style): one `#[repr(C)]` struct per
//! kernel, laid out identically on host and device (pointers are 64-bit device addresses).

use crate::candidate::Candidate;
use crate::epilogue::Transform;
use crate::exactmass::ExactMass;
use crate::logmass::LogMass;
use crate::truncate::{StoredTop, Truncation};

/// The element type of the hidden states and the LM-head weight (both the same): 16-bit floats whose
/// products the tensor cores accumulate in f32. The kernels take the operands as raw 16-bit words
/// (`*const u16`) and this tag; loads, copies and TMA boxes do not depend on it, only the MMA
/// instruction and the few scalar dot products (`device::dot`) do.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// bfloat16 (8 exponent bits, 7 mantissa bits).
    Bf16 = 0,
    /// IEEE half precision (5 exponent bits, 10 mantissa bits).
    F16 = 1,
}

impl ElementType {
    /// Whether the elements are IEEE halves.
    #[inline(always)]
    pub const fn is_f16(self) -> bool {
        matches!(self, ElementType::F16)
    }
    /// The name used in messages (`"bf16"`, `"f16"`).
    pub const fn name(self) -> &'static str {
        match self {
            ElementType::Bf16 => "bf16",
            ElementType::F16 => "f16",
        }
    }
}

/// One batch row's sampling parameters in a fused launch (`FusedParams::rows`, `[B]`): its noise key
/// (seed, stream, sample index), its temperature's transform and the request it samples for. With
/// `n` samples per request the launch has `B·n` rows, row `r·n + j` being request `r`'s sample `j`
/// (sample index `sample + j`, the hidden state of request `r` copied to row `r·n + j`).
///
/// `#[repr(C)]`, 32 bytes, 16-byte aligned: two 16-byte loads per row and tile.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowParams {
    /// Philox key (the row's seed).
    pub seed: u64,
    /// The row's stream id.
    pub stream: u64,
    /// The row's temperature transform (greedy rows: noise scale 0).
    pub transform: Transform,
    /// Sample index of the row's draw (below 2^31).
    pub sample: u32,
    /// The request row (row of the allowed-token mask).
    pub request: u32,
}

impl RowParams {
    /// The row's noise key.
    #[inline(always)]
    pub fn noise(&self) -> crate::noise::RowNoise {
        crate::noise::RowNoise { seed: self.seed, stream: self.stream, sample: self.sample }
    }
}

/// A row's log-mass over part of the vocabulary, as the log-probability kernels keep it per lane,
/// block and vocab range: of the processed logits over the temperature (`z / T`; empty for a greedy
/// row) and of the raw logits (`y`, nothing applied). Merged with [`LogMass::merge_with`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowMass {
    /// Log-mass of `z / T` over the allowed tokens.
    pub processed: LogMass,
    /// Log-mass of the raw logits `y` over every token.
    pub raw: LogMass,
}

impl RowMass {
    /// Nothing seen.
    pub const EMPTY: Self = Self { processed: LogMass::EMPTY, raw: LogMass::EMPTY };
}

/// Parameters of the fused matmul + sampling kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FusedParams {
    /// Hidden states `[B, D]`, [`Self::elem`], row-major, 16-byte aligned.
    pub hidden: *const u16,
    /// LM-head weight `[V, D]`, [`Self::elem`], row-major (the checkpoint layout), 16-byte aligned.
    pub weight: *const u16,
    /// Per-row sampling parameters `[B]` (seed, stream, sample index, temperature, request).
    pub rows: *const RowParams,
    /// Allowed-token bitmask `[B / n, mask_words]` (rows by [`RowParams::request`]; bit `j` of
    /// word `w` = token `32w + j`), or null: every token allowed.
    pub mask: *const u32,
    /// Output of the log-probability kernels: each (row, vocab range)'s [`RowMass`], `[B, n_vranges]`
    /// (null for the plain kernels).
    pub masses: *mut RowMass,
    /// Output of the log-probability kernels: each row's sampled token's log-probability under the
    /// processed distribution (`0` for a greedy row), `[B]`.
    pub logprobs: *mut f32,
    /// Output of the log-probability kernels: each row's sampled token's log-probability under
    /// `softmax(y)` (nothing applied), `[B]`. Null in a log-probability (`_lp`) launch: no raw
    /// log-probabilities, and the kernels skip the raw log-mass.
    pub raw_logprobs: *mut f32,
    /// Output of the log-probability kernels: each row's log-sum-exp of `z / T` (NaN for a greedy
    /// row), `[B]`.
    pub logsumexp: *mut f32,
    /// Output of the log-probability kernels when not null: each row's log-sum-exp of the raw
    /// logits `y`, `[B]` (what a vocab-parallel merge needs to rescale the raw log-probabilities).
    pub raw_logsumexp: *mut f32,
    /// Sparse adjustments (or null): the `[B/n + 1]` CSR offsets of the request rows' adjusted
    /// tokens; their results for every sample row are in `adjusted`.
    pub adj_offsets: *const u32,
    /// The adjusted tokens' results (`adjust_tokens`), `[entries, n]`: entry `e` of a request, its
    /// sample `j` at `e·n + j` (null without adjustments).
    pub adjusted: *const AdjustedToken,
    /// Output: candidates `[B, n_vranges]`, row-major.
    pub candidates: *mut Candidate,
    /// Per-batch-tile arrival counters `[n_btiles]`, zero before the launch; the last block of each
    /// batch tile resets its counter, so they are zero again afterwards.
    pub counters: *mut u32,
    /// Output: sampled token per row `[B]` ([`crate::INVALID_INDEX`] where the winning score is NaN).
    pub tokens: *mut u32,
    /// Output: winning perturbed score per row `[B]`.
    pub scores: *mut f32,
    /// Output of the truncation kernels: each lane's top list per (row, vocab range, unit),
    /// `[B, n_vranges, top_units]` (null for the others).
    pub tops: *mut StoredTop,
    /// Batch rows.
    pub b: u32,
    /// Hidden size (multiple of [`crate::config::D_ALIGN`]).
    pub d: u32,
    /// Weight rows scored (the vocab size; a vocab shard's rows below the model's vocabulary).
    pub v: u32,
    /// Global vocab index of weight row 0 (a multiple of 4; 0 unless the weight is a vocab shard):
    /// noise, mask bits and candidate indices use `v_offset + row`, so a shard's samples are the
    /// whole head's (`crate::shard`).
    pub v_offset: u32,
    /// `v_offset + v`: the global vocab index one past the launch's last scored row.
    pub v_end: u32,
    /// Samples per request (`n`): sample row `b` is request `b / n`'s sample `b % n`.
    pub samples: u32,
    /// Vocab ranges of the persistent grid: candidates per row.
    pub n_vranges: u32,
    /// 32-bit words per mask row (`ceil(V / 32)` of the whole vocabulary; 0 without a mask).
    pub mask_words: u32,
    /// Soft-cap of the logits, `cap · tanh(y / cap)` before everything else; 0: none.
    pub softcap: f32,
    /// The TMA descriptors of this launch's weight and hidden states, in device memory; read only
    /// by the `wgmma` kernels ([`FusedVariant::uses_tma`](crate::config::FusedVariant::uses_tma); null for the others).
    pub tensor_maps: *const TensorMaps,
    /// Vocab tiles `0 .. tma_whole_tiles` (`V / 128`, rounded down) are copied with the one-box
    /// [`TensorMaps::weight_tiles`] map, the rest with [`TensorMaps::weight_rows`] (TMA kernels only).
    pub tma_whole_tiles: u32,
    /// Top-list units per (row, vocab range) of the truncation kernels
    /// ([`FusedVariant::top_units`](crate::config::FusedVariant::top_units)).
    pub top_units: u32,
    /// Element type of `hidden` and `weight` (selects the MMA instruction per stage).
    pub elem: ElementType,
    /// Stage-balanced vocab ranges ([`crate::schedule::RangeStages::balanced`], weight-as-A kernels
    /// only; null: whole tiles): per range boundary `r` (1..n_vranges) and consumer slot `c` (0, or the
    /// consumer with split batch tiles), the f32 accumulators of the cut tile's head, which the block
    /// of range `r` hands to the block of range `r − 1` (`device::handoff`): slot `2r + c` holds
    /// `128 · acc` floats (`acc`: accumulators per consumer thread, the variant's batch width `N`).
    pub handoff: *mut f32,
    /// The handoff slots' counters `[2 · n_vranges]`, zero before the launch and after it (the last
    /// reader of a slot resets it).
    pub handoff_flags: *mut u32,
    /// Scoring given tokens (issue 52; read by `reduce_rows` only, null otherwise): each row's given
    /// token `[B]` (global vocab index; one outside `v_offset .. v_end` scores NaN). A
    /// log-probability launch (one GPU's, or a rank's into its exchange) with `samples` = 1 and
    /// `raw_logsumexp` given. With null `raw_logprobs` its processed logits are its raw ones (every
    /// row at T = 1, no soft-cap, mask or adjustment: the host's choice): the fused pass skips the
    /// raw log-mass and the reduction takes the processed one for it (the sampled tokens' raw
    /// log-probabilities, a rank's exchange word 3 included, are then not written: nothing reads
    /// them).
    pub targets: *const u32,
    /// With `targets`: each row's given token's log-probability under the processed distribution
    /// (as [`Self::logprobs`] defines it for a sampled token; `−∞` for a token the controls remove;
    /// for a greedy row 0 for the row's sampled token, `−∞` for any other), `[B]`.
    pub target_logprobs: *mut f32,
    /// With `targets`: each row's given token's raw log-probability (`log softmax(y)[t]`), `[B]`.
    pub target_raw_logprobs: *mut f32,
    /// Each row's exact log-masses `[B]` ([`RowExact`], written by `exact_mass_rows` after a
    /// GEMM-fed log-probability launch, `SamplingParams::exact_logsumexp` on the host), from which
    /// the reduction takes the row's log-sum-exps instead of the merged [`RowMass`]es; null: from
    /// the masses.
    pub exact: *mut RowExact,
}

/// A row's exact-path record (`SamplingParams::exact_logsumexp` on the host): its exact log-masses
/// ([`ExactMass`]: integer bins, the same bits for any grouping of the vocabulary) — of the
/// processed logits over the temperature (empty for a greedy row) and of the raw logits, over every
/// vocab row of the launch and, in the processed one, its adjusted tokens (`exact_mass_rows`) — and
/// the logits its log-probabilities subtract the log-sum-exps from (`reduce_rows`): what a
/// tensor-parallel rank exchanges so that the ranks' merge computes the one-GPU bits.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowExact {
    /// Of `z / T` over the allowed tokens.
    pub processed: ExactMass,
    /// Of the raw logits `y` over every token.
    pub raw: ExactMass,
    /// The row's token's processed logit over the temperature (`z / T`, its adjusted `z` where an
    /// adjusted token won) and raw logit `y`; NaN without a token.
    pub token: [f32; 2],
    /// A scoring launch's given token's processed logit over the temperature (`−∞` where the
    /// controls remove it) and raw logit; NaN where the launch's rows do not hold it.
    pub target: [f32; 2],
}

impl RowExact {
    /// Nothing seen, no logits.
    pub const EMPTY: Self =
        Self { processed: ExactMass::EMPTY, raw: ExactMass::EMPTY, token: [f32::NAN; 2], target: [f32::NAN; 2] };

    /// `self` with its masses combined with `other`'s (exact: any grouping gives the same bits);
    /// the logits stay `self`'s.
    #[inline(always)]
    pub fn merge_masses(self, other: Self) -> Self {
        Self { processed: self.processed.merge(other.processed), raw: self.raw.merge(other.raw), ..self }
    }
}

impl FusedParams {
    /// No operand, output or work (every pointer null): the base of the parameters of a launch
    /// that reads only some fields, and of a truncation step that reduces nothing
    /// ([`TruncateParams::reduce`]).
    pub const NONE: Self = Self {
        hidden: core::ptr::null(),
        weight: core::ptr::null(),
        rows: core::ptr::null(),
        mask: core::ptr::null(),
        masses: core::ptr::null_mut(),
        logprobs: core::ptr::null_mut(),
        raw_logprobs: core::ptr::null_mut(),
        logsumexp: core::ptr::null_mut(),
        raw_logsumexp: core::ptr::null_mut(),
        adj_offsets: core::ptr::null(),
        adjusted: core::ptr::null(),
        candidates: core::ptr::null_mut(),
        counters: core::ptr::null_mut(),
        tokens: core::ptr::null_mut(),
        scores: core::ptr::null_mut(),
        tops: core::ptr::null_mut(),
        b: 0,
        d: 0,
        v: 0,
        v_offset: 0,
        v_end: 0,
        samples: 1,
        n_vranges: 0,
        mask_words: 0,
        softcap: 0.0,
        tensor_maps: core::ptr::null(),
        tma_whole_tiles: 0,
        top_units: 0,
        elem: ElementType::Bf16,
        handoff: core::ptr::null_mut(),
        handoff_flags: core::ptr::null_mut(),
        targets: core::ptr::null(),
        target_logprobs: core::ptr::null_mut(),
        target_raw_logprobs: core::ptr::null_mut(),
        exact: core::ptr::null_mut(),
    };
}

/// One CUDA tensor map (`CUtensorMap`): an opaque 128-byte TMA descriptor that the host encodes
/// with `cuTensorMapEncodeTiled` and the TMA copies read from device memory (64-byte aligned).
#[repr(C, align(128))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMap(pub [u64; 16]);

/// The tensor maps of one fused launch, in device memory. All use the 128-byte swizzle, so a box
/// lands in the slab layout the `wgmma` descriptors read.
#[repr(C, align(128))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMaps {
    /// The weight rows `0 .. 32·⌊V/32⌋` as a 5-D tensor of 16-bit elements whose one box is a whole 128-row tile
    /// in the `wgmma` slab order: dimensions (innermost first) D (box 64), `g` (8, stride 4 rows),
    /// `e` (2, stride 1 row), `w` (`⌊V/32⌋`, stride 32 rows), `h` (2, stride 2 rows), so box element
    /// `(k, g, e, w, h)` of the tile at `w = 4·tile` is vocab row `tile·128 + 32w + 2h + e + 4g` at
    /// slab row `64h + 16w + 8e + g`. Zeros when V < 32 (then unused).
    pub weight_tiles: TensorMap,
    /// The weight `[V, D]` as a 2-D tensor of 16-bit elements (D innermost), box `64 × 32` with element strides
    /// `1 × 4`: [`TMA_WEIGHT_BOX_ROWS`](crate::config::TMA_WEIGHT_BOX_ROWS) rows that are
    /// [`TMA_WEIGHT_ROW_STEP`](crate::config::TMA_WEIGHT_ROW_STEP) apart, rows past V zeros; 16 boxes
    /// make the last, partial tile.
    pub weight_rows: TensorMap,
    /// The hidden states `[B, D]`, box `64 × BLOCK_B`; rows past B read as zeros.
    pub hidden: TensorMap,
}

/// Parameters of the candidate-reduction kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ReduceParams {
    /// Candidates `[B, n_candidates]` written by the fused kernel (or a baseline).
    pub candidates: *const Candidate,
    /// Output: sampled token per row `[B]` ([`crate::INVALID_INDEX`] where the winning score is NaN).
    pub tokens: *mut u32,
    /// Output: winning perturbed score per row `[B]`.
    pub scores: *mut f32,
    /// Batch rows.
    pub b: u32,
    /// Candidates per row.
    pub n_candidates: u32,
}

/// Parameters of the vocab-parallel merge kernel (`merge_ranks`): per row, the ranks' results
/// folded into the whole head's ([`crate::ranks::merge_rank_row`]). A rank's results are `K` words
/// per row, laid out `[K, B]`: tokens, scores (f32 bits), and with log-probabilities (`K = 6`) the
/// processed and raw log-probabilities and the processed and raw log-sum-exps — what the fused
/// kernel writes for one rank, gathered rank-major (an NCCL all-gather's output: `G` blocks of
/// [`Self::rank_words`] words, each starting with its `[K, B]` results).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MergeRanksParams {
    /// The ranks' results, `G` blocks of `[K, B]` (32-bit words) `rank_words` apart.
    pub gathered: *const u32,
    /// Output: tokens `[B]`.
    pub tokens: *mut u32,
    /// Output: scores `[B]`.
    pub scores: *mut f32,
    /// Output with `K ≥ 6`: processed log-probabilities `[B]`.
    pub logprobs: *mut f32,
    /// Output with `K = 6`: raw log-probabilities `[B]`.
    pub raw_logprobs: *mut f32,
    /// Output with `K = 6`: processed log-sum-exps `[B]`.
    pub logsumexp: *mut f32,
    /// Output with `K = 6` (or null): raw log-sum-exps `[B]` (what a truncation step after the merge
    /// reads).
    pub raw_logsumexp: *mut f32,
    /// Rows.
    pub b: u32,
    /// Ranks.
    pub g: u32,
    /// Words per row and rank: 2 (tokens, scores), 6 (with log-probabilities) or 8 (scoring given
    /// tokens too).
    pub k: u32,
    /// Words between two ranks' results in `gathered` (`K·B`, more when the exchange carries the
    /// ranks' top lists after them).
    pub rank_words: u32,
    /// With `K = 8` (a scoring call, issue 52): each row's given token `[B]`; the ranks' words 6 and
    /// 7 are their target scores ([`crate::ranks::RankTarget`]).
    pub targets: *const u32,
    /// Output with `K = 8`: the given tokens' processed log-probabilities `[B]`.
    pub target_logprobs: *mut f32,
    /// Output with `K = 8`: the given tokens' raw log-probabilities `[B]`.
    pub target_raw_logprobs: *mut f32,
    /// `merge_ranks_exact` (the exact path, `SamplingParams::exact_logsumexp` on the host): where
    /// each rank's `B` [`RowExact`] records start in its block of `gathered`, in words (a multiple of
    /// 4, at least `K·B`); `merge_ranks` reads no record (0).
    pub exact_at: u32,
    /// Padding (zero).
    pub _pad: u32,
}

/// One adjusted token's result for one sample row (the `adjust_tokens` kernel's output): its
/// candidate and, for the log-probabilities, its processed logit.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdjustedToken {
    /// Perturbed score of the adjusted logit (`−∞` when the mask disallows the token; `−∞` with
    /// index [`crate::INVALID_INDEX`] when the token is not in this launch's rows).
    pub score: f32,
    /// The token (global index).
    pub token: u32,
    /// `z' / T`: the adjusted logit over the temperature (`−∞` when disallowed or greedy).
    pub scaled: f32,
    /// The adjusted logit `z'` (soft-capped, then adjusted; `−∞` when disallowed).
    pub z: f32,
}

/// Parameters of the sparse-adjustment kernel (`adjust_tokens`): one warp per adjusted token.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AdjustParams {
    /// Hidden states `[B, D]` of the request rows (not expanded), 16-byte aligned.
    pub hidden: *const u16,
    /// The launch's weight rows `[V, D]`, 16-byte aligned.
    pub weight: *const u16,
    /// Per-sample-row parameters `[B·n]`.
    pub rows: *const RowParams,
    /// The launch's allowed-token mask `[B, mask_words]` (this call's own copy): each adjusted
    /// token's bit is cleared, so the fused pass skips it.
    pub mask: *mut u32,
    /// Request row of each entry `[entries]`.
    pub entry_rows: *const u32,
    /// Token of each entry `[entries]` (global index).
    pub tokens: *const u32,
    /// Adjustment of each entry `[entries]`.
    pub adjustments: *const crate::logits::Adjustment,
    /// Output `[entries, n]`.
    pub out: *mut AdjustedToken,
    /// Entries.
    pub entries: u32,
    /// Samples per request.
    pub n: u32,
    /// Hidden size.
    pub d: u32,
    /// Global index of weight row 0.
    pub v_offset: u32,
    /// `v_offset` + weight rows scored.
    pub v_end: u32,
    /// Words per mask row.
    pub mask_words: u32,
    /// Soft-cap (0: none).
    pub softcap: f32,
    /// Element type of `hidden` and `weight`.
    pub elem: ElementType,
}

/// Parameters of the row-expansion kernel (`expand_rows`): `out[r·n + j, :] = hidden[r, :]`, the
/// hidden states of a launch with `n` samples per request.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ExpandParams {
    /// Hidden states `[B, D]`, 16-byte aligned.
    pub hidden: *const u16,
    /// Output `[B·n, D]`, 16-byte aligned.
    pub out: *mut u16,
    /// Request rows.
    pub b: u32,
    /// 16-byte chunks per row (`D / 8`).
    pub chunks: u32,
    /// Copies per row.
    pub n: u32,
    /// Padding.
    pub _pad: u32,
}

/// Parameters of the read-only streaming kernel (`stream_read`): reads `chunks` 16-byte chunks
/// once, each thread folding its words with XOR, and writes one word per block.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StreamReadParams {
    /// The data, `chunks` × 16 bytes, 16-byte aligned.
    pub src: *const [u32; 4],
    /// Output: one word per block (so the loads cannot be elided).
    pub out: *mut u32,
    /// 16-byte chunks.
    pub chunks: u64,
}

/// Parameters of the Philox / Gumbel test kernels: one Philox call per thread.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NoiseTestParams {
    /// Counters `[n][4]`.
    pub counters: *const [u32; 4],
    /// Output `[n][4]`: Philox words (`philox_test`) or f32 Gumbel bits (`gumbel_test`).
    pub out: *mut [u32; 4],
    /// Key.
    pub key: [u32; 2],
    /// Number of counters.
    pub n: u32,
    /// Padding.
    pub _pad: u32,
}

/// Parameters of the speculative-decoding baseline `rejection_rows` (test module): the classic
/// rejection sampler over materialized probabilities, one block per request, `K` drafts each.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RejectionParams {
    /// Target probabilities `[R·(K + 1), V]` (`softmax_rows`' output), request `r`'s rows at
    /// `r·(K + 1) ..`.
    pub target: *const f32,
    /// Draft probabilities `[R·K, V]`.
    pub draft: *const f32,
    /// Draft tokens `[R·K]`, each below V.
    pub draft_tokens: *const u32,
    /// Output: emitted tokens `[R·(K + 1)]`, request `r`'s first `accepted[r] + 1` slots written.
    pub tokens: *mut u32,
    /// Output: accepted drafts per request `[R]`.
    pub accepted: *mut u32,
    /// Philox key of the uniforms.
    pub seed: u64,
    /// Requests.
    pub requests: u32,
    /// Drafts per request.
    pub k: u32,
    /// Vocabulary entries per row (`V % 4 == 0`).
    pub v: u32,
    /// Padding (the struct is a multiple of 8 bytes).
    pub _pad: u32,
}

/// Parameters of the benchmark baselines over materialized `[B, V]` f32 logits.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct LogitsParams {
    /// Logits `[slabs, B, V]`, f32, row-major, `V % 4 == 0`: one slab per vocab shard (an
    /// all-gather's output), or one.
    pub logits: *const f32,
    /// Softmax output / multinomial input `[B, V]`.
    pub probs: *mut f32,
    /// Gumbel baseline output: candidates `[B, slabs · n_chunks]`.
    pub candidates: *mut Candidate,
    /// Multinomial output: tokens `[B]`.
    pub tokens: *mut u32,
    /// Per-row stream ids `[B]`.
    pub streams: *const u64,
    /// Philox key.
    pub seed: u64,
    /// Batch rows.
    pub b: u32,
    /// Vocab entries per slab and row.
    pub v: u32,
    /// Chunks per row and slab of the Gumbel baseline.
    pub n_chunks: u32,
    /// Sample index.
    pub sample: u32,
    /// Slabs of the logits (Gumbel baseline; 1 for the others).
    pub slabs: u32,
    /// Global vocab index of slab 0's entry 0 (a multiple of 4); slab `s`'s entry `j` is
    /// `v_offset + s·V + j` (Gumbel baseline).
    pub v_offset: u32,
    /// Temperature transform.
    pub transform: Transform,
}

/// Parameters of the truncation step (`truncate_rows`): per sample row, the certificate over the
/// fused pass's top lists, the sample within the kept set, and the rows left to the fallback.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TruncateParams {
    /// The fused truncation launch's parameters when this step first reduces each sample row's
    /// candidates and masses itself (what `reduce_rows` does after a log-probability launch: the
    /// token, score, log-probabilities and log-sum-exps land in the outputs below, which are the
    /// launch's); [`FusedParams::NONE`] (null `candidates`) when they were reduced before (a
    /// tensor-parallel rank's step after the exchange).
    pub reduce: FusedParams,
    /// The fused pass's top lists, `[B, units]`.
    pub tops: *const StoredTop,
    /// Per-sample-row parameters `[B]`.
    pub rows: *const RowParams,
    /// Per-request truncation `[B / n]`.
    pub truncation: *const Truncation,
    /// Sparse adjustments (or null), as in [`FusedParams`].
    pub adj_offsets: *const u32,
    /// The adjusted tokens' results, as in [`FusedParams`].
    pub adjusted: *const AdjustedToken,
    /// Hidden states of the launch `[B, D]` (the raw logit of a changed token).
    pub hidden: *const u16,
    /// Weight `[V, D]` (null over tensor-parallel ranks, where the call has no soft-cap or adjustment:
    /// a token's raw logit is then its processed one, which the kernel has).
    pub weight: *const u16,
    /// In and out: the plain sample's token and score `[B]`, replaced by the truncated one.
    pub tokens: *mut u32,
    /// See `tokens`.
    pub scores: *mut f32,
    /// In and out: log-probabilities `[B]` (processed, raw), the processed log-sum-exp `[B]`.
    pub logprobs: *mut f32,
    /// See `logprobs`.
    pub raw_logprobs: *mut f32,
    /// See `logprobs` (in: over every allowed token; out: over the kept ones).
    pub logsumexp: *mut f32,
    /// In: the raw log-sum-exp `[B]`.
    pub raw_logsumexp: *const f32,
    /// Out: 1 where the row needs the fallback, else 0, `[B]`.
    pub flags: *mut u32,
    /// Out: the fallback's rows: `[0]` their count (zero before the launch), then the rows.
    pub fallback: *mut u32,
    /// Out (or null): the listed rows' hidden states, slot-major as
    /// [`FallbackParams::gathered`]: the block that lists a row copies its row of `hidden` to its
    /// slot, so that `fallback_logits` needs no `fallback_gather` before it.
    pub gathered: *mut u16,
    /// Sample rows.
    pub b: u32,
    /// Units per row (`n_vranges · top_units`).
    pub units: u32,
    /// Vocab size.
    pub v: u32,
    /// Hidden size.
    pub d: u32,
    /// Samples per request.
    pub samples: u32,
    /// Element type of `hidden` and `weight`.
    pub elem: ElementType,
    /// Top log-probabilities (the rows this step cannot answer go to the fallback, flagged
    /// [`FALLBACK_TOP`], and [`FALLBACK_KEEPS_SAMPLE`] when their sample stands).
    pub top: TopOutputs,
    /// A tensor-parallel rank's step (or null): the kernel only exports each sample row's list of
    /// this rank's shard, `[B, RANK_UNITS]` units ([`crate::truncate::RANK_UNITS`]): its
    /// [`crate::truncate::RANK_TOP`] largest processed logits, largest first, with the bound of the
    /// rest in every unit (`+∞` when the rank cannot bound them: the merged row is then uncertain),
    /// and writes nothing else (its `top` says only which rows the step after the exchange takes top
    /// entries from: their lists are exported too).
    pub export: *mut StoredTop,
    /// The ranks whose units `tops` holds: `1` on one GPU; after the exchange `G` blocks of
    /// `[B, units]` units, `rank_stride` units apart (the all-gathered exports).
    pub ranks: u32,
    /// See `ranks` (units; unused with one rank).
    pub rank_stride: u32,
    /// Out (or null): a scoring call's ranks of its given tokens `[B]` when it asks top
    /// log-probabilities, written by the scoring entries (`truncate_rows_scored`,
    /// `fallback_sample_scored`) only: each row's token's place in [`Self::top`]'s order over every
    /// token (1 = first: one plus the tokens with a larger logit, or an equal one at a lower index;
    /// a token the controls remove ranks after every kept one, among them by index); 0 for a token
    /// at or past V. The step writes those its sorted prefix decides and lists the others for the
    /// fallback.
    pub target_ranks: *mut u32,
}

/// Which distribution a call's top log-probabilities describe, and where the kernels find them
/// (chosen by the host per call).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopSource {
    /// No top log-probabilities.
    Off = 0,
    /// The processed distribution (the one sampled from, truncation included): the truncation
    /// step's sorted prefix of each row, or the fallback's materialized row when the prefix holds
    /// too few entries.
    Processed = 1,
    /// `softmax(logits)` when the call changes no logit (no soft-cap, mask or adjustments): the
    /// processed logits are then the raw ones, so the same sorted prefix serves.
    RawFromLists = 2,
    /// `softmax(logits)` with logits the call changes: every request's row is materialized by the
    /// fallback, which selects them before it processes the row.
    RawInFallback = 3,
}

/// Where the truncation step and the fallback write each request's top log-probabilities:
/// `[B / n, n]` tokens and log-probabilities (slot `j` of request `r` at `r·n + j`, most likely
/// first, ties to the lower index; past a row's last entry: `INVALID_INDEX` and NaN). Written by the
/// request's first sample row only.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TopOutputs {
    /// Tokens `[B / n, n]`.
    pub tokens: *mut u32,
    /// Log-probabilities `[B / n, n]`.
    pub logprobs: *mut f32,
    /// Entries per request (at most `MAX_TOP_N`; 0: off).
    pub n: u32,
    /// Which distribution, and where from.
    pub source: TopSource,
}

impl TopOutputs {
    /// None asked for.
    pub const OFF: Self =
        Self { tokens: core::ptr::null_mut(), logprobs: core::ptr::null_mut(), n: 0, source: TopSource::Off };
}

/// Most top log-probabilities per request the kernels write (the truncation step sorts them in one
/// block of 64).
pub const MAX_TOP_N: u32 = 64;

/// A fallback list entry's flag: the row's sample stands (the truncation step decided it, or the
/// row does not truncate); the fallback only selects its top log-probabilities (flagged
/// [`FALLBACK_TOP`]) and, in a scoring call with ranks, counts its given
/// token's rank ([`FallbackParams::target_ranks`]: every listed row's; a row listed with neither a
/// sample to draw nor top entries to select is there for its rank).
pub const FALLBACK_KEEPS_SAMPLE: u32 = 1 << 31;
/// A fallback list entry's flag: the fallback selects the row's top log-probabilities (the
/// truncation step could not).
pub const FALLBACK_TOP: u32 = 1 << 30;
/// A fallback list entry's row (below `config::MAX_DIM` = 2^30: clear of the flags).
pub const FALLBACK_ROW: u32 = FALLBACK_TOP - 1;

/// Parameters of the exact fallback (`fallback_logits`, `fallback_sample`) for the rows the
/// certificate could not decide — and, over all rows of materialized logits, the benchmark's unfused
/// top-k / top-p sampler.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FallbackParams {
    /// The rows: `[0]` their count, then the sample rows ([`FALLBACK_ROW`] bits), with the flags
    /// [`FALLBACK_TOP`] and [`FALLBACK_KEEPS_SAMPLE`].
    pub list: *const u32,
    /// Logits of each listed row, `[count, v]` (slot-major), f32: the raw logits written by
    /// `fallback_logits` (or the benchmark's GEMM), turned into the processed ones in place by
    /// `fallback_sample`.
    pub logits: *mut f32,
    /// Hidden states `[B, D]`.
    pub hidden: *const u16,
    /// Weight `[V, D]` (null over tensor-parallel ranks, where the call has no soft-cap or adjustment:
    /// a token's raw logit is then its processed one, which the kernel has).
    pub weight: *const u16,
    /// The listed rows' hidden states, slot-major (`[B, D]` of [`Self::elem`]: slot `s` holds row
    /// `list[1 + s]`), written by `fallback_gather` for `fallback_logits`.
    pub gathered: *mut u16,
    /// Allowed-token mask (or null), as in [`FusedParams`] (adjusted tokens' bits cleared).
    pub mask: *const u32,
    /// Per-sample-row parameters `[B]`.
    pub rows: *const RowParams,
    /// Per-request truncation `[B / n]`.
    pub truncation: *const Truncation,
    /// Sparse adjustments (or null), as in [`FusedParams`].
    pub adj_offsets: *const u32,
    /// See `adj_offsets`.
    pub adjusted: *const AdjustedToken,
    /// Outputs `[B]`, as in [`TruncateParams`] (null log-probability pointers: none).
    pub tokens: *mut u32,
    /// See `tokens`.
    pub scores: *mut f32,
    /// See `tokens`.
    pub logprobs: *mut f32,
    /// See `tokens`.
    pub raw_logprobs: *mut f32,
    /// See `tokens`.
    pub logsumexp: *mut f32,
    /// In: the raw log-sum-exp `[B]` (with `raw_logprobs`).
    pub raw_logsumexp: *const f32,
    /// Vocab size.
    pub v: u32,
    /// Hidden size.
    pub d: u32,
    /// Samples per request.
    pub samples: u32,
    /// Words per mask row.
    pub mask_words: u32,
    /// Soft-cap (0: none).
    pub softcap: f32,
    /// Element type of `hidden` and `weight`.
    pub elem: ElementType,
    /// Top log-probabilities of the listed rows flagged [`FALLBACK_TOP`].
    pub top: TopOutputs,
    /// A scoring call's given tokens `[B]` (global indices; null: none), read by
    /// `fallback_sample_scored` only: each listed row scores its token over the kept set it finds.
    pub targets: *const u32,
    /// Out: the given tokens' processed log-probabilities `[B]` (with `targets`).
    pub target_logprobs: *mut f32,
    /// Out: the given tokens' raw log-probabilities `[B]` (with `targets`; written only where the
    /// given token is the row's new sample, as the sampled token's: bit for bit the sampling call's).
    pub target_raw_logprobs: *mut f32,
    /// Out (or null): the given tokens' ranks `[B]`, as [`TruncateParams::target_ranks`]: every
    /// listed row's (`fallback_sample_scored`).
    pub target_ranks: *mut u32,
}

/// Parameters of `fallback_logits`: the listed rows' raw logits by the portable `mma.sync` mainloop
/// of `config::FALLBACK_LOGITS_VARIANT`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FallbackLogitsParams {
    /// The mainloop's operands and schedule: `hidden` = [`FallbackParams::gathered`], `weight`, `b`
    /// = the most rows the list can hold (the launch's batch tiles; rows past the list's count are
    /// multiplied but never stored), `d`, `v`, `n_vranges` (the launch's grid is `n_vranges` ×
    /// `ceil(b / 64)` blocks) and `elem`; every other pointer null.
    pub fused: FusedParams,
    /// The rows: `[0]` their count, then the sample rows (only the count is read).
    pub list: *const u32,
    /// Out: the listed rows' raw logits, `[count, ld]`, f32 (row `s`'s logit of vocab row `i < v`
    /// at `s·ld + i`).
    pub logits: *mut f32,
    /// Row pitch of `logits` in floats, `≥ v`: `v` for the fallback, [`gemm_logits_ld`] for the
    /// GEMM-fed kernels that read them (`SamplingParams::exact_logsumexp` on the host).
    ///
    /// [`gemm_logits_ld`]: crate::config::gemm_logits_ld
    pub ld: u32,
    /// Padding (zero).
    pub _pad: u32,
}

/// Parameters of the GEMM-fed kernels ([`Family::GemmLogits`](crate::config::Family::GemmLogits)):
/// the launch's fused parameters and the logits a GEMM wrote before it on the same stream.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GemmLogitsParams {
    /// Everything of the fused launch but the operands: `hidden` and `weight` are not read (the
    /// logits replace them), `d` is informative; rows, controls, outputs, `b`, `v`, `n_vranges` as
    /// in any fused launch.
    pub fused: FusedParams,
    /// The launch's raw logits, `[b, ld]` f32 row-major (row `r`'s logit of vocab row `i < v` at
    /// `r·ld + i`), 16-byte aligned.
    pub logits: *const f32,
    /// Row pitch of `logits` in floats: `v` rounded up to a multiple of 4
    /// ([`gemm_logits_ld`](crate::config::gemm_logits_ld)), so a lane's four vocab rows are one
    /// aligned 16-byte load.
    pub ld: u32,
    /// Padding (zero).
    pub _pad: u32,
}

/// The launch's logit pipeline ([`LogitPipeline`]), from the fields of its parameters: the one
/// constructor every device site calls, so a new launch-wide transform is a field of these structs
/// and of the pipeline, and no device file changes.
macro_rules! logit_pipeline_of {
    ($($params:ty),*) => {$(
        impl $params {
            /// This launch's logit pipeline.
            #[inline(always)]
            pub fn logit_pipeline(&self) -> crate::logits::LogitPipeline {
                crate::logits::LogitPipeline::new(self.softcap)
            }
        }
    )*};
}
logit_pipeline_of!(FusedParams, AdjustParams, FallbackParams);
