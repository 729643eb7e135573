//! Which variant runs for which call: [`variant_for_batch`].

use super::*;

/// The variant the host launches for batch size `b`, hidden size `d`, vocab size `v` and `epilogue` on `sm_count`
/// multiprocessors, from the kernels the GPU runs (`kernels`, [`KernelSet`]), chosen from the
/// `cargo bench -- --variants` sweeps on the H200 (BENCHMARKS.md,
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
/// - Portable, sm_90 PTX (every GPU but compute capability 9.0 with the sm_90a module: Blackwell
///   through the JIT; a Hopper GPU with `portable_only`): the portable TMA family. Up to 64 rows
///   and D = [`TMA_MMA_TURNS_MAX_D`] `tma_mma_n64t` (64 batch rows a warp, the two consumers taking
///   turns on 64-row tiles), plain and with log-probabilities; at larger D 16 rows up to 16, 32 up
///   to 32, and at 33–64 rows `tma_mma_n64t` for log-probabilities, else `tma_mma_n64` (64-row
///   tiles the consumers split, 32 rows a warp); truncation 16, 32, then `tma_mma_n64`. Beyond 64 rows
///   `tma_mma_n128` (128-row tiles the consumers split, 64 rows a warp) where it pads no more rows
///   than `tma_mma_n64`, else `tma_mma_n64` (129–192 rows, 257–320, …). Truncation beyond 32 rows
///   always `tma_mma_n64`: the 64-rows-a-warp variants have no truncation kernel (a lane's 16 top
///   lists spilled 9.5 KiB and top-k / top-p took 2.2 × `tma_mma_n64_tk`'s time at B = 64).
///   Same-call sweeps in `benchmarks/2026-12-06-portable-wide-consumers` (H100: calls 1–2; H200:
///   calls 4–5; Qwen3-8B's and Llama-3-70B's heads, docs/findings/48): `n128` 0.73–0.95 × `n64`'s
///   time at B = 96–128 and 0.87–0.98 × at 224–256, `n64` 0.77–0.90 × `n128`'s at 160–192; with
///   log-probabilities `n128` 0.74–0.77 × at 128–256, scoring 1k–4k rows 0.68–0.74 × (H200). Since
///   its candidates live in shared memory (docs/findings/50) `n64t` took 0.96–0.99 × the time of
///   `n16` / `n32` at 1–32 rows and D = 4096 (H100, `benchmarks/2026-12-06-mma-sync-ceiling` call 6;
///   with log-probabilities 0.95–1.00 ×), 0.98–1.00 × at D = 8192 (0.98 × with log-probabilities at
///   17–32, where `n32` keeps them so that its log-probability kernel is chosen somewhere): above
///   D = 4096 the 1–32-row choice is a policy that keeps `n16` and `n32` in use, not a measured
///   optimum.
/// - Portable built below sm_90 (`FLASHSAMPLING_SM=sm_80`: no TMA): the block-staging `mma.sync`
///   kernels, 16, 32, 64 or 128-row batch tiles by B.
///
/// Every choice supports `v` ([`FusedVariant::supports_vocab`]).
#[inline]
pub const fn variant_for_batch(
    (b, d, v): (u32, u32, u32),
    epilogue: Epilogue,
    kernels: KernelSet,
    sm_count: u32,
) -> FusedVariant {
    let hidden_as_a = v % TMA_T_VOCAB_ALIGN == 0;
    if let KernelSet::Hopper = kernels {
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
    } else if let KernelSet::Portable = kernels {
        let truncate = matches!(epilogue, Epilogue::Truncate);
        match b {
            0..=64 if !truncate && d <= TMA_MMA_TURNS_MAX_D => TMA_MMA_N64T,
            0..=16 => TMA_MMA_N16,
            17..=32 => TMA_MMA_N32,
            _ if truncate => TMA_MMA_N64,
            33..=64 if matches!(epilogue, Epilogue::LogProbs) => TMA_MMA_N64T,
            33..=64 => TMA_MMA_N64,
            _ if TMA_MMA_N128.padded_rows(b) <= TMA_MMA_N64.padded_rows(b) => TMA_MMA_N128,
            _ => TMA_MMA_N64,
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

/// The variant the host launches for a call: [`variant_for_batch`]'s fused kernel, or on the portable
/// module ([`KernelSet::Portable`], [`KernelSet::PortableBlock`]: every GPU without the sm_90a
/// kernels) from [`GEMM_LOGITS_MIN_ROWS`] rows on [`GEMM_LOGITS`] where the host has a GEMM
/// library (`gemm`: cuBLAS loaded) — the batches where the portable `mma.sync` mainloop is
/// compute-bound and the GEMM library runs the GPU's own matrix instructions — as long as the
/// logits it materializes take at most [`GEMM_LOGITS_MAX_BYTES`] (larger calls, e.g. scoring a long
/// prefill, keep the fused kernels and their O(rows) memory).
#[inline]
pub const fn variant_for_call(
    shape: (u32, u32, u32),
    epilogue: Epilogue,
    kernels: KernelSet,
    sm_count: u32,
    gemm: bool,
) -> FusedVariant {
    let portable = matches!(kernels, KernelSet::Portable | KernelSet::PortableBlock);
    if gemm && portable && shape.0 >= GEMM_LOGITS_MIN_ROWS && shape.0 <= gemm_logits_max_rows(shape.2) {
        GEMM_LOGITS
    } else {
        variant_for_batch(shape, epilogue, kernels, sm_count)
    }
}

/// Rows from which a portable call runs [`GEMM_LOGITS`] ([`variant_for_call`]): the first batch the
/// fused kernels pad to more than one 128-row tile. Same-call sweeps on an H100 (the portable module,
/// `benchmarks/2026-12-06-gemm-fed-portable-kernels`, calls 2–3; Qwen3-8B / Llama-3-70B): at 128 rows
/// `tma_mma_n128` took 0.54 / 0.85 ms against the GEMM-fed 0.60 / 0.90, at 192 `tma_mma_n64` 0.90 / 1.43
/// against 0.66 / 0.95, at 256 `n128` 0.99 / 1.60 against 0.74 / 1.13, at 512 1.92 / 3.10 against 1.30 /
/// 1.96: the fused kernels' time steps with each 64- or 128-row tile, the GEMM's grows with the rows.
pub const GEMM_LOGITS_MIN_ROWS: u32 = 129;

/// Largest logits buffer (bytes) a [`GEMM_LOGITS`] launch may take ([`variant_for_call`]): 512 MiB,
/// 883 rows of a 151 936-token head.
pub const GEMM_LOGITS_MAX_BYTES: u64 = 512 << 20;

/// The most rows whose logits of vocab size `v` fit [`GEMM_LOGITS_MAX_BYTES`] (883 at V = 151 936).
#[inline]
pub const fn gemm_logits_max_rows(v: u32) -> u32 {
    let rows = GEMM_LOGITS_MAX_BYTES / (4 * gemm_logits_ld(v) as u64);
    if rows > u32::MAX as u64 { u32::MAX } else { rows as u32 }
}

/// Row pitch (floats) of the logits a [`GEMM_LOGITS`] launch reads for vocab size `v`: `v` rounded up
/// to a multiple of 4, so each lane's Philox group of four is one aligned 16-byte load.
#[inline]
pub const fn gemm_logits_ld(v: u32) -> u32 {
    v.div_ceil(4) * 4
}

/// Largest hidden size at which the portable `tma_mma_n64t` (the consumers taking turns on 64-row
/// tiles) is chosen for every call of up to 64 rows but truncation ([`variant_for_batch`]): at
/// D = 4096 it took 0.94–1.00 × the time of `tma_mma_n64` at 33–64 rows (H100 and H200) and, since
/// docs/findings/50, 0.96–0.99 × that of `n16` / `n32` at 1–32 (H100); at D = 8192 1.03–1.12 × `n64`'s
/// on the H200 (0.99–1.01 × on the H100, `benchmarks/2026-12-06-portable-wide-consumers`), where a
/// tile's epilogue weighs half as much against its mainloop. Calls of 33–64 rows with
/// log-probabilities take it at any D (0.86–0.92 × at D = 4096, 0.99–1.01 × at 8192).
pub const TMA_MMA_TURNS_MAX_D: u32 = 4096;

/// The fused kernels a GPU runs, which [`variant_for_batch`] chooses from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelSet {
    /// The sm_90a module is loaded (compute capability 9.0, not `portable_only`): the `wgmma`
    /// kernels.
    Hopper,
    /// The portable module built for sm_90 or later (the default and the shipped PTX): the
    /// portable TMA family.
    Portable,
    /// The portable module built for an older target (`FLASHSAMPLING_SM=sm_80`): the block-staging
    /// `mma.sync` kernels.
    PortableBlock,
}

impl KernelSet {
    /// Every set.
    pub const ALL: [KernelSet; 3] = [KernelSet::Hopper, KernelSet::Portable, KernelSet::PortableBlock];
    /// The set of a GPU where the sm_90a module is loaded or not (`sm90a`), with the portable module
    /// built for `portable_sm` (a [`sm_number`]).
    pub const fn of(sm90a: bool, portable_sm: u32) -> Self {
        if sm90a {
            KernelSet::Hopper
        } else if portable_sm >= 90 {
            KernelSet::Portable
        } else {
            KernelSet::PortableBlock
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
