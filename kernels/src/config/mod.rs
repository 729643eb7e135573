//! Tile configuration, kernel variants and thread-mapping constants, defined once and shared by the
//! kernels and the host code that launches them.
//!
//! # Variants
//! Every compiled fused kernel is a [`FusedVariant`]: a typed value (entry point, [`Family`],
//! batch width, stages) from which the host derives its launch (threads, shared memory, grid) and
//! the build derives its PTX module ([`FusedVariant::module`]) and thread bound
//! ([`FusedVariant::max_threads`]). [`FUSED_VARIANTS`] lists the kernels the library launches;
//! [`variant_for_call`] picks one per call (the fused kernels by batch size, [`variant_for_batch`]).
//! Five families, one mainloop each (the GEMM-fed one's is the host's cuBLAS GEMM):
//!
//! | family | MMA | module | chosen |
//! |---|---|---|---|
//! | [`Family::MmaSync`] | `mma.sync.m16n8k16`, weight = A, `cp.async` block staging | portable (sm_90 PTX by default: any GPU from the H100 on, others through the driver's JIT; `FLASHSAMPLING_SM=sm_80` builds it for the A100) | a portable module built below sm_90 ([`KernelSet::PortableBlock`]); the truncation fallback's logits |
//! | [`Family::WgmmaWeightA`] | `wgmma.m64nNk16`, weight = A, TMA producer warp + 2 consumer warpgroups | sm_90a | B ≤ 64 (and > 64 when `V % 16 ≠ 0`) |
//! | [`Family::WgmmaHiddenA`] | `wgmma.m64n256k16`, hidden = A, same producer and consumers | sm_90a | B > 64 (from 33 where its vocab ranges are no longer), `V % 16 == 0` |
//! | [`Family::TmaMmaSync`] | `mma.sync.m16n8k16` from `ldmatrix`, weight = A, the same TMA producer warp + consumers of 4 warps | portable, sm_90 PTX (any GPU from the H100 on, Blackwell through the JIT) | where the sm_90a module does not load ([`KernelSet::Portable`]); `tma_mma_n64t` and `tma_mma_n128` (64 batch rows a warp) have no truncation kernel |
//! | [`Family::GemmLogits`] | none in the kernel: cuBLAS writes the f32 logits, the kernel loads them a warp per batch row | portable | where the portable kernels run, libcublas loads, B ≥ [`GEMM_LOGITS_MIN_ROWS`] (the `mma.sync` mainloops are compute-bound there) and the logits take at most [`GEMM_LOGITS_MAX_BYTES`]; never on a vocab shard |
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
        // The portable TMA family reads the weight-as-A slabs and hands tiles over the same way.
        for v in [TMA_MMA_N16, TMA_MMA_N32, TMA_MMA_N64] {
            assert!(v.balances_stages(s, 1002, 132, 1) && v.balances_stages(l, 1002, 132, 1), "{}", v.entry);
            assert!(!v.balances_stages(t, 1002, 132, 1) && !v.balances_stages(s, 1187, 132, 1), "{}", v.entry);
            // 2 M tiles × NB N tiles × 4 floats per consumer thread.
            assert_eq!(v.handoff_floats_per_thread(), 2 * v.n_tiles * 4, "{}", v.entry);
        }
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
            if v.family == Family::GemmLogits {
                assert_eq!((v.stages, v.stages_lp), (0, 0), "{}: no pipeline", v.entry);
            } else {
                assert!(v.stages_lp <= v.stages && v.stages_lp >= 3, "{}", v.entry);
            }
            if v.family == Family::MmaSync {
                assert_eq!(v.stages_lp, v.stages, "{}", v.entry);
            }
            // The masses (16-byte words) start 16-byte aligned after the merge area.
            assert_eq!(v.merge_bytes(Epilogue::LogProbs) % 16, 0, "{}", v.entry);
            // Only the plain kernels of 64 batch rows a warp keep lane state (their candidates).
            assert_eq!(v.lane_state_bytes(Epilogue::Sample), 8 * CONSUMER_THREADS * v.lane_cands(Epilogue::Sample));
            assert_eq!(v.lane_cands(Epilogue::Truncate), 0);
            for e in [Epilogue::Sample, Epilogue::LogProbs] {
                // The candidates (8-byte words) end where the ring's prefix ends, after the masses.
                let cands_end = v.lane_cands_offset(e) + 8 * CONSUMER_THREADS * v.lane_cands(e);
                assert_eq!(cands_end, v.prefix_bytes(e), "{} ({e:?})", v.entry);
                assert!(v.lane_cands_offset(e) >= v.merge_bytes(e) + v.lane_masses_bytes(e));
                assert_eq!(v.lane_cands(e) != 0, v.family == Family::TmaMmaSync && v.n_tiles == 8, "{}", v.entry);
            }
            assert_eq!(v.entry_logprobs.strip_suffix("_lp"), Some(v.entry));
            if let Some(tk) = v.entry_truncate {
                assert_eq!(tk.strip_suffix("_tk"), Some(v.entry));
            }
            assert!(FUSED_VARIANTS[..i].iter().all(|w| w.entry != v.entry), "{} listed twice", v.entry);
            assert_eq!(FusedVariant::by_name(v.entry), Some(*v));
            assert!(v.is_named(v.entry) && !v.is_named("fused_sample"));
            match v.family {
                Family::MmaSync => {
                    assert_eq!(v.module(), Module::Portable);
                    assert_eq!(v.max_threads(), Some(v.threads()));
                    assert!(v.warps_b <= 4 && 8 * v.n_tiles <= 32, "{}", v.entry);
                }
                Family::TmaMmaSync => {
                    assert_eq!(v.module(), Module::Portable);
                    assert!(v.uses_tma() && v.needs_sm90() && !v.moves_registers());
                    assert_eq!(v.max_threads(), Some(32 * (1 + 4 * v.consumers())));
                    // Slabs of whole 1024-byte swizzle atoms; pairs of N tiles per `ldmatrix.x4`.
                    assert_eq!(v.stage_bytes() % 1024, 0, "{}", v.entry);
                    // At most 16 batch columns per lane (its candidate arrays).
                    assert!(v.n_tiles % 2 == 0 && 8 * v.n_tiles <= 64, "{}", v.entry);
                    assert!(v.warps_b == 1 || v.warps_b == 2, "{}", v.entry);
                    assert!(v.block_b() <= 256, "{}", v.entry);
                }
                Family::GemmLogits => {
                    // A warp per batch row (one contributor, its 32 lanes' top lists), the merge area only.
                    assert_eq!(v.module(), Module::Portable);
                    assert!(!v.uses_tma() && !v.needs_sm90() && !v.moves_registers() && v.reads_gemm_logits());
                    assert_eq!(v.threads(), 128 * v.warps_b);
                    assert_eq!(v.max_threads(), Some(GEMM_LOGITS_BLOCKS_PER_SM * v.threads()));
                    assert!(v.max_threads().unwrap() <= 1024);
                    assert!(v.warps_b <= 4 && v.block_b() % v.warps() == 0, "{}", v.entry);
                    assert_eq!((v.merge_contributors(), v.top_units()), (1, 32), "{}", v.entry);
                    for e in Epilogue::ALL {
                        assert_eq!(v.smem_bytes(e), v.merge_bytes(e), "{} ({e:?})", v.entry);
                        assert!(!v.can_balance_stages(e, 1000, 10, 1));
                    }
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
        let kernels: usize =
            FUSED_VARIANTS.iter().map(|v| Epilogue::ALL.iter().filter(|&&e| v.has_epilogue(e)).count()).sum();
        assert_eq!(all.len(), kernels + 15 + TEST_ENTRIES.len());
        // Sixteen boxes of 8 rows, 4 apart, cover a 128-row tile's 32 Philox groups.
        assert_eq!(TMA_WEIGHT_BOXES * TMA_WEIGHT_BOX_ROWS, BLOCK_V);
        assert_eq!(TMA_WEIGHT_ROW_STEP * TMA_WEIGHT_BOX_ROWS, WARP_TILE_V);
    }

    /// `ldmatrix.x4` as the PTX ISA defines it, over a stage of 16-bit values (indexed by byte
    /// offset / 2): lane `8i + r` gives the address of row `r` of matrix `i`; register `i` of lane
    /// `4g + q` is elements `2q, 2q + 1` of row `g` of matrix `i`.
    fn ldmatrix_x4(stage: &[i64], addr: impl Fn(u32) -> u32) -> [[[i64; 2]; 4]; 32] {
        let mut regs = [[[0; 2]; 4]; 32];
        for (lane, regs) in regs.iter_mut().enumerate() {
            let (g, q) = (lane as u32 / 4, lane as u32 % 4);
            for (i, reg) in regs.iter_mut().enumerate() {
                let row = addr(8 * i as u32 + g);
                assert_eq!(row % 16, 0, "16-byte aligned rows");
                let at = (row / 2 + 2 * q) as usize;
                *reg = [stage[at], stage[at + 1]];
            }
        }
        regs
    }

    /// `mma.sync.m16n8k16.row.col` on the lanes' fragments as the PTX ISA lays them out: `d += a·b`.
    fn mma_m16n8k16(d: &mut [[i64; 4]; 32], a: &[[[i64; 2]; 4]; 32], b: &[[[i64; 2]; 2]; 32]) {
        let (mut am, mut bm) = ([[0i64; 16]; 16], [[0i64; 8]; 16]);
        for lane in 0..32 {
            let (g, q) = (lane / 4, 2 * (lane % 4));
            for c in 0..2 {
                am[g][q + c] = a[lane][0][c];
                am[g + 8][q + c] = a[lane][1][c];
                am[g][q + 8 + c] = a[lane][2][c];
                am[g + 8][q + 8 + c] = a[lane][3][c];
                bm[q + c][g] = b[lane][0][c];
                bm[q + 8 + c][g] = b[lane][1][c];
            }
        }
        let dot = |r: usize, n: usize| (0..16).map(|k| am[r][k] * bm[k][n]).sum::<i64>();
        for (lane, d) in d.iter_mut().enumerate() {
            let (g, q) = (lane / 4, 2 * (lane % 4));
            for (j, d) in d.iter_mut().enumerate() {
                *d += dot(g + 8 * (j / 2), q + j % 2);
            }
        }
    }

    /// The portable TMA kernels' stage (`device::mainloop::mma_stage_slab`, device-only code, whose
    /// loop this mirrors: per k16 step both M tiles' A fragments, then per pair of N tiles one B
    /// `ldmatrix` and its MMAs) with the addresses of [`SlabLane`], simulated lane by lane.
    #[test]
    fn the_portable_tma_fragments_multiply_the_rows_each_lane_owns() {
        // A stage as the TMA copies write it (128-byte swizzle): slab row s, element k at byte
        // 128·s + 16·((k / 8) ^ (s % 8)) + 2·(k % 8); weight slab row s holds vocab row
        // `vocab_of_slab_row(s)` of the tile, hidden slab row 128 + h batch row h.
        let weight = |v: u32, k: u32| ((v * 7 + k * 3) % 11) as i64 - 5;
        let hidden = |b: u32, k: u32| ((b * 5 + k * 13) % 7) as i64 - 3;
        let tma_variants = FUSED_VARIANTS.iter().filter(|v| v.family == Family::TmaMmaSync);
        for v in tma_variants {
            let (nb, block_b) = (v.n_tiles, v.block_b());
            let mut stage = std::vec![0i64; ((BLOCK_V + block_b) * STAGE_K) as usize];
            for s in 0..BLOCK_V + block_b {
                for k in 0..STAGE_K {
                    let at = STAGE_ROW_BYTES * s + 16 * ((k / 8) ^ (s % 8)) + 2 * (k % 8);
                    let x = if s < BLOCK_V { weight(vocab_of_slab_row(s), k) } else { hidden(s - BLOCK_V, k) };
                    stage[at as usize / 2] = x;
                }
            }
            for c in 0..v.consumers() {
                let h0 = if v.takes_turns() { 0 } else { c * 8 * nb };
                for w in 0..WARPS_PER_BLOCK {
                    let lanes: std::vec::Vec<SlabLane> = (0..32).map(|l| SlabLane::new(w, l, h0, BLOCK_V)).collect();
                    let mut acc = std::vec![[[[0i64; 4]; 32]; 16]; M_TILES_PER_WARP];
                    for kk in 0..STAGE_K / 16 {
                        for (mt, acc) in acc.iter_mut().enumerate() {
                            let a = ldmatrix_x4(&stage, |l| lanes[l as usize].a_at(mt, kk));
                            for j in 0..nb / 2 {
                                let b = ldmatrix_x4(&stage, |l| lanes[l as usize].b_at(j, kk));
                                let pair = |n: usize| core::array::from_fn(|l| [b[l][2 * n], b[l][2 * n + 1]]);
                                mma_m16n8k16(&mut acc[2 * j as usize], &a, &pair(0));
                                mma_m16n8k16(&mut acc[2 * j as usize + 1], &a, &pair(1));
                            }
                        }
                    }
                    // Lane (g, q), element 2e + c of [mt][nt]: vocab row 32w + 4g + 2mt + e of the
                    // tile, batch row h0 + 8nt + 2q + c (`fragment::mma_sync_tile`'s layout).
                    for (mt, acc) in acc.iter().enumerate() {
                        for (nt, acc) in acc.iter().enumerate().take(nb as usize) {
                            for (lane, d) in acc.iter().enumerate() {
                                let (g, q) = (lane as u32 / 4, lane as u32 % 4);
                                for (j, d) in d.iter().enumerate() {
                                    let vocab = w * WARP_TILE_V + 4 * g + 2 * mt as u32 + j as u32 / 2;
                                    let b = h0 + 8 * nt as u32 + 2 * q + j as u32 % 2;
                                    let want: i64 = (0..STAGE_K).map(|k| weight(vocab, k) * hidden(b, k)).sum();
                                    assert_eq!(
                                        *d, want,
                                        "{}: consumer {c}, warp {w}, lane {lane}, [{mt}][{nt}][{j}]",
                                        v.entry
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_portable_module_below_sm_90_leaves_out_the_portable_tma_family() {
        assert_eq!(
            (sm_number("sm_90"), sm_number("sm_90a"), sm_number("sm_80"), sm_number("sm_100f")),
            (Some(90), Some(90), Some(80), Some(100))
        );
        assert!(
            [sm_number("sm_"), sm_number("90"), sm_number("sm_9x"), sm_number("compute_90")]
                .iter()
                .all(|n| n.is_none())
        );
        let at = |sm: u32| entry_points_for(sm).map(|(e, _, _)| e).collect::<std::vec::Vec<_>>();
        let (at_80, at_90) = (at(80), at(90));
        assert_eq!(at_90, entry_points().map(|(e, _, _)| e).collect::<std::vec::Vec<_>>());
        for v in FUSED_VARIANTS {
            let kept = portable_module_has(&v, 80);
            assert_eq!(kept, v.family != Family::TmaMmaSync, "{}", v.entry);
            assert!(portable_module_has(&v, 90) && portable_module_has(&v, 100));
            for e in Epilogue::ALL {
                let Some(entry) = v.entry_for(e) else { continue };
                assert_eq!(at_80.contains(&entry), kept, "{entry}");
                assert!(at_90.contains(&entry));
            }
        }
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
        // Hidden sizes on both sides of the choices' D thresholds (Qwen3-8B's and Llama-3-70B's).
        for (b, d) in (1..=512).flat_map(|b| [4096, 8192].map(|d| (b, d))) {
            for (v, e) in [1000, 128_256, 151_936, 151_937].into_iter().flat_map(|v| Epilogue::ALL.map(|e| (v, e))) {
                for (set, gemm) in KernelSet::ALL.into_iter().flat_map(|s| [(s, false), (s, true)]) {
                    let f = variant_for_call((b, d, v), e, set, 132, gemm);
                    assert!(f.has_epilogue(e), "{set:?} B = {b}: {} has no {e:?} kernel", f.entry);
                    // Each set chooses among its own kernels; the portable ones the GEMM-fed kernel
                    // from GEMM_LOGITS_MIN_ROWS rows where a GEMM library is loaded, and only there.
                    let gemm_fed = gemm
                        && set != KernelSet::Hopper
                        && b >= GEMM_LOGITS_MIN_ROWS
                        && b as u64 * gemm_logits_ld(v) as u64 * 4 <= GEMM_LOGITS_MAX_BYTES;
                    assert_eq!(
                        b <= gemm_logits_max_rows(v),
                        b as u64 * gemm_logits_ld(v) as u64 * 4 <= GEMM_LOGITS_MAX_BYTES
                    );
                    let family_ok = match set {
                        _ if gemm_fed => f == GEMM_LOGITS,
                        KernelSet::Hopper => f.module() == Module::Hopper,
                        KernelSet::Portable => f.family == Family::TmaMmaSync,
                        KernelSet::PortableBlock => f.family == Family::MmaSync,
                    };
                    assert!(family_ok, "{set:?} (GEMM {gemm}) B = {b}: {}", f.entry);
                    if !gemm_fed {
                        assert_eq!(f, variant_for_batch((b, d, v), e, set, 132));
                    }
                    chosen.push((f, e));
                }
            }
        }
        // Every kernel (variant and epilogue) is chosen for some call.
        for v in FUSED_VARIANTS {
            for e in Epilogue::ALL.into_iter().filter(|&e| v.has_epilogue(e)) {
                assert!(chosen.contains(&(v, e)), "{} ({e:?}) is never chosen", v.entry);
            }
        }
        // A long prefill's logits would outgrow GEMM_LOGITS_MAX_BYTES: the fused kernels keep it.
        assert_eq!(gemm_logits_max_rows(151_936), 883);
        for set in [KernelSet::Portable, KernelSet::PortableBlock] {
            let e = Epilogue::LogProbs;
            assert_eq!(variant_for_call((883, 4096, 151_936), e, set, 132, true), GEMM_LOGITS);
            assert_ne!(variant_for_call((884, 4096, 151_936), e, set, 132, true), GEMM_LOGITS);
            assert_ne!(variant_for_call((32_768, 4096, 151_936), e, set, 132, true), GEMM_LOGITS);
        }
        assert_eq!(KernelSet::of(true, 90), KernelSet::Hopper);
        assert_eq!((KernelSet::of(false, 90), KernelSet::of(false, 100)), (KernelSet::Portable, KernelSet::Portable));
        assert_eq!(KernelSet::of(false, 80), KernelSet::PortableBlock);
    }

    #[test]
    fn the_portable_set_takes_64_rows_a_warp_where_they_were_measured_faster() {
        let pick = |b: u32, d: u32, e: Epilogue| variant_for_batch((b, d, 151_936), e, KernelSet::Portable, 132);
        // Up to 64 rows and D = 4096 the consumers take turns on 64-row tiles (docs/findings/50);
        // above, 16 and 32 rows as before; truncation always (no NB = 8 truncation kernel).
        for b in [1, 16, 17, 32] {
            assert_eq!(pick(b, 4096, Epilogue::Sample), TMA_MMA_N64T, "B = {b}");
            assert_eq!(pick(b, 4096, Epilogue::LogProbs), TMA_MMA_N64T, "B = {b}");
        }
        for e in Epilogue::ALL {
            assert_eq!(pick(16, 8192, e), TMA_MMA_N16);
            assert_eq!(pick(32, 8192, e), TMA_MMA_N32);
        }
        assert_eq!(pick(16, 4096, Epilogue::Truncate), TMA_MMA_N16);
        assert_eq!(pick(32, 4096, Epilogue::Truncate), TMA_MMA_N32);
        // 33–64 rows: the consumers take turns on 64-row tiles with log-probabilities, and for plain
        // calls up to D = 4096; truncation always splits 64-row tiles (no NB = 8 truncation kernel).
        for b in [33, 48, 64] {
            assert_eq!(pick(b, 4096, Epilogue::Sample), TMA_MMA_N64T);
            assert_eq!(pick(b, 8192, Epilogue::Sample), TMA_MMA_N64);
            assert_eq!(pick(b, 8192, Epilogue::LogProbs), TMA_MMA_N64T);
            assert_eq!(pick(b, 4096, Epilogue::Truncate), TMA_MMA_N64);
        }
        // Beyond: 128-row tiles where they pad no more rows than 64-row ones.
        for (b, want) in [(65, TMA_MMA_N128), (128, TMA_MMA_N128), (129, TMA_MMA_N64), (192, TMA_MMA_N64)] {
            assert_eq!(pick(b, 4096, Epilogue::Sample), want, "B = {b}");
            assert_eq!(pick(b, 8192, Epilogue::LogProbs), want, "B = {b}");
        }
        for (b, want) in [(193, TMA_MMA_N128), (256, TMA_MMA_N128), (320, TMA_MMA_N64), (4096, TMA_MMA_N128)] {
            assert_eq!(pick(b, 4096, Epilogue::LogProbs), want, "B = {b}");
        }
        assert_eq!(pick(4096, 4096, Epilogue::Truncate), TMA_MMA_N64);
        assert!(!TMA_MMA_N64T.has_epilogue(Epilogue::Truncate) && !TMA_MMA_N128.has_epilogue(Epilogue::Truncate));
        // Their masses (16 a lane) are in shared memory, with fewer stages for the log-probability kernels.
        assert_eq!((TMA_MMA_N64T.lane_masses(), TMA_MMA_N128.lane_masses(), TMA_MMA_N64.lane_masses()), (16, 16, 0));
    }

    #[test]
    fn the_launch_for_an_unknown_hidden_size_needs_the_largest_buffers() {
        // `GpuBackend::alloc_samples` knows no D and sizes its candidates (`B × vocab ranges`) by the
        // launch of `d = u32::MAX`: it must have at least the vocab ranges of the launch of any D
        // (one block per multiprocessor, as every kernel that the choice depends on D for runs). Its
        // handoff slots: `launch::tests`.
        let ranges = |f: FusedVariant, b: u32, v: u32| f.n_vranges(132, 1, f.batch_tiles(b), v);
        for b in 1..=2048 {
            for v in [1000, 32_768, 128_256, 151_936, 151_937] {
                for (e, set) in Epilogue::ALL.into_iter().flat_map(|e| KernelSet::ALL.map(|s| (e, s))) {
                    let any = ranges(variant_for_batch((b, u32::MAX, v), e, set, 132), b, v);
                    let ds = [64, 2048, 4096, TMAT_TURNS_MAX_D, TMAT_TURNS_MAX_D + 1, TMA_MMA_TURNS_MAX_D + 1, 16384];
                    for d in ds {
                        let this = ranges(variant_for_batch((b, d, v), e, set, 132), b, v);
                        assert!(any >= this, "B = {b}, D = {d}, V = {v}, {e:?}, {set:?}: {any} < {this} ranges");
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
    fn the_portable_tma_kernels_read_whole_philox_groups_without_bank_conflicts() {
        let mut seen = [false; BLOCK_V as usize];
        for w in 0..WARPS_PER_BLOCK {
            for mt in 0..M_TILES_PER_WARP as u32 {
                for e in 0..2 {
                    let rows: std::vec::Vec<u32> = (0..8).map(|g| mma_slab_row(w, mt, e, g)).collect();
                    for (g, &s) in rows.iter().enumerate() {
                        // Lane row 2·mt + e of lane group g: the block-staging kernels' vocab rows.
                        let vocab = vocab_of_slab_row(s);
                        assert_eq!(vocab, w * WARP_TILE_V + ROWS_PER_LANE as u32 * g as u32 + 2 * mt + e);
                        seen[vocab as usize] = true;
                    }
                    // One `ldmatrix` matrix: its 8 rows' 16-byte pieces land in 8 distinct bank groups
                    // under the 128-byte swizzle (piece c of row s at c ^ (s % 8)), for every piece.
                    for c in 0..8 {
                        let mut banks: std::vec::Vec<u32> = rows.iter().map(|s| c ^ (s % 8)).collect();
                        banks.sort_unstable();
                        banks.dedup();
                        assert_eq!(banks.len(), 8, "warp {w}, M tile {mt}, half {e}, piece {c}");
                    }
                }
            }
        }
        assert!(seen.iter().all(|&x| x), "the warps' fragments cover the tile");
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
                        variant_for_batch((b, 4096, v), e, KernelSet::Portable, 132).module(),
                        Module::Portable,
                        "B = {b} without sm_90a"
                    );
                    let f = variant_for_batch((b, 4096, v), e, KernelSet::Hopper, 132);
                    assert!(f.uses_tma(), "B = {b} with sm_90a: {}", f.entry);
                    assert!(f.supports_vocab(v), "B = {b}, V = {v}: {}", f.entry);
                }
            }
            // Qwen3-8B's and Llama-3-70B's vocabularies get the hidden-as-A kernels beyond 64 rows;
            // from 33 rows on an H200 (132 multiprocessors) Llama-3-70B's already: both kernels'
            // largest range is 1024 rows there, where Qwen3-8B's would be 1280 against 1152.
            let qwen = variant_for_batch((b, 4096, 151_936), Epilogue::Sample, KernelSet::Hopper, 132);
            assert_eq!(qwen.family == Family::WgmmaHiddenA, b > 64, "B = {b}: {}", qwen.entry);
            let llama = variant_for_batch((b, 8192, 128_256), Epilogue::Sample, KernelSet::Hopper, 132);
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
                let f = variant_for_batch((b, 4096, v), e, KernelSet::Hopper, 132);
                assert_eq!(f.family == Family::WgmmaHiddenA, b > from, "B = {b}, V = {v}, {e:?}: {}", f.entry);
                assert_ne!(
                    variant_for_batch((b, 4096, 151_937), e, KernelSet::Hopper, 132).family,
                    Family::WgmmaHiddenA
                );
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
                                variant_for_batch((b, d, v), e, KernelSet::Hopper, 132),
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
