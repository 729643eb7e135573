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

mod dispatch;
mod entries;
mod tma;
mod variants;

pub use crate::schedule::{Piece, PieceKind, RangeStages};
pub use dispatch::*;
pub use entries::*;
pub use tma::*;
pub use variants::*;

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

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
