//! Fragment → logits adapters: each MMA leaves a lane's logits in its own fragment layout; these
//! functions pick, for every batch row the lane scores, its logits of four consecutive vocab rows
//! (one Philox group) and hand them to the ONE lane epilogue, [`lane_epilogue`], which runs the
//! shared no_std [`update_groups_above`] (logit transform, Philox noise, argmax into the row's
//! [`Candidate`]) — the very function the CPU backend runs — after the per-row controls (soft-cap,
//! allowed-token mask; temperature and noise key from [`row_params`]), and, in the log-probability
//! kernels (`LP`), updates the row's [`RowMass`]. A per-row control is therefore written once: in
//! [`lane_epilogue`] and the no_std core.
//!
//! They also hand the lane's candidates to the block merge ([`put_columns`], [`put_rows`],
//! [`put_row_warp`]) with the shuffle masks that join the lanes holding the same batch row.
//!
//! | adapter | MMA | a lane holds, per tile |
//! |---|---|---|
//! | [`mma_sync_tile`] | `mma.sync.m16n8k16`, weight = A | 4 vocab rows × `2·NB` batch columns `8·(i/2) + 2·quad + i%2` |
//! | [`mma_sync_tile_wide`] | the same at `NB = 8` (portable TMA kernels; candidates and masses in shared memory) | the same, 16 columns |
//! | [`store_logits_columns`] | the same, for the fallback's logits (stored, not sampled) | the same |
//! | [`logits_row`] | none: a GEMM's logits, loaded from memory (the GEMM-fed kernels) | one batch row (the warp's), the Philox group `128·tile + 4·lane ..` of each tile |
//! | [`weight_a_tile`] | `wgmma.m64nNk16`, weight = A | 4 vocab rows × `N / 4` batch columns, same numbering |
//! | [`hidden_a_tile`] | `wgmma.m64n256k16`, hidden = A | 2 batch rows × 16 Philox groups `16J + 4q ..` |
//!
//! Register arrays are indexed with compile-time indices only (unrolled loops, selects among the
//! few constants an index can have), so accumulators and candidates stay in registers.

use super::collective::exp;
use super::mainloop::{Accumulators, WgmmaShape};
use super::merge::{MergeArea, SharedCands, SharedMasses, put_merged, put_merged_mass};
use super::ptx::{mov_b32, shfl_sync_bfly_b32};
use super::rows::{RowRef, row_params};
use crate::candidate::Candidate;
use crate::config::{ROWS_PER_LANE, TMA_T_TILE_V};
use crate::epilogue::update_groups_above;
use crate::logits::LogitPipeline;
use crate::params::{FusedParams, RowMass};
use crate::truncate::{LANE_TOP, LANE_TOP_WIDE, StoredTop, TopList};

/// The lane epilogue: logits `y[q]` of weight rows `v0 + stride·q .. + 4` for `q < G` (`v0 % 4 ==
/// 0`, `stride % 4 == 0`; global vocab indices from `v0 + v_offset`) of one batch row →
/// processed logits `z` (soft-cap, then the allowed-token mask: `−∞` where a token is not allowed)
/// → transformed, perturbed scores → the row's candidate (the no_std [`update_groups_above`]: a
/// branch-free screen of the `G` groups against the candidate and `floor`, then the noise of the few
/// entries that could win; rows at or past V skipped). With `LP`, the row's log-mass takes the raw
/// logits and `z / T` too; with `TOP`, the row's top list takes `z` (the truncation kernels; a list
/// must be offered its entries in ascending vocab index order, [`TopList::update_ascending`]). `SC`:
/// the launch soft-caps (`p.softcap > 0`); `MK`: it has a mask or a vocab offset (a shard). The adapters are instantiated for
/// each and pick one per tile ([`controls_dispatch`]), so the controls' code stays out of the plain
/// path's unrolled loop, whose instruction footprint decides its speed (docs/findings/13).
///
/// The column adapters pass one group (`G = 1`: a lane holds four vocab rows of a batch column),
/// the hidden-as-A adapter eight in the plain kernels (`G = 8`, stride 16: the lane's groups of one
/// batch row in a pass) and one at a time in the `_lp` and `_tk` kernels (fewer live registers), the
/// GEMM-fed row adapter [`ROW_GROUPS`] (stride 128: one group of each of that many tiles).
#[inline(always)]
pub(super) fn lane_epilogue<
    const LP: bool,
    const TOP: bool,
    const SC: bool,
    const MK: bool,
    const L: usize,
    const G: usize,
>(
    p: &FusedParams,
    row: RowRef,
    (v0, stride): (u32, u32),
    y: [[f32; 4]; G],
    (cand, floor): (&mut Candidate, f32),
    (mass, top): (&mut RowMass, &mut TopList<L>),
) {
    // The global vocab index of a group: a vocab shard's rows start at `v_offset` (a multiple of 4,
    // so a group stays one Philox counter and one mask word). Only the `MK` instantiation adds it (a
    // shard's launch takes that path, see `controls_dispatch`): the plain loop is unchanged.
    let (offset, g_end) = if MK { (p.v_offset, p.v_end) } else { (0, p.v) };
    // The logit pipeline (`crate::logits::LogitPipeline`): soft-cap, then the mask, here; the
    // adjusted tokens are masked out of the fused pass and scored by their own kernel with the same
    // pipeline; the temperature in `scaled` and the candidate's score.
    let pipe = p.logit_pipeline();
    let mut z = y;
    unrolled!(Q in [0, 1, 2, 3, 4, 5, 6, 7] {
        if Q < G {
            let vq = v0 + stride * Q as u32;
            let gq = vq + offset;
            if SC {
                z[Q] = [
                    pipe.capped_if::<SC>(y[Q][0]),
                    pipe.capped_if::<SC>(y[Q][1]),
                    pipe.capped_if::<SC>(y[Q][2]),
                    pipe.capped_if::<SC>(y[Q][3]),
                ];
            }
            if MK && vq < p.v && !p.mask.is_null() {
                // SAFETY: request < B / n and gq / 32 < ceil(V_global / 32) = mask_words (gq < v_offset + v
                // ≤ the model's V): inside the mask. The four bits of the group are in one word (gq % 4 == 0).
                let word = unsafe { *p.mask.add(row.request() as usize * p.mask_words as usize + (gq / 32) as usize) };
                let bits = word >> (gq % 32);
                for (j, zj) in z[Q].iter_mut().enumerate() {
                    *zj = LogitPipeline::masked(*zj, (bits >> j) & 1 != 0);
                }
            }
        }
    });
    let transform = row.transform();
    // The log-mass and top-list updates first, the candidate last: then only `z` stays live through
    // the screen and the draw loop (after them, the raw logits too: the `_lp` kernels spilled 2 KiB).
    unrolled!(Q in [0, 1, 2, 3, 4, 5, 6, 7] {
        if Q < G {
            let vq = v0 + stride * Q as u32;
            if LP {
                let mut raw = [f32::NEG_INFINITY; 4];
                let mut processed = [f32::NEG_INFINITY; 4];
                for j in 0..4 {
                    if vq + (j as u32) < p.v {
                        raw[j] = y[Q][j];
                        // Greedy rows have no processed distribution (1/T = ∞): nothing is added.
                        if !transform.is_greedy() {
                            processed[j] = transform.scaled(z[Q][j]);
                        }
                    }
                }
                // The raw log-mass only when the launch asks for the raw distribution (a uniform
                // branch): the truncation kernels by `raw_logsumexp` (null: no raw log-probabilities,
                // raw top log-probabilities or tensor-parallel exchange), the log-probability kernels
                // by `raw_logprobs` (null: a one-GPU call without raw log-probabilities).
                if if TOP { !p.raw_logsumexp.is_null() } else { !p.raw_logprobs.is_null() } {
                    mass.raw.update4(raw, exp);
                }
                mass.processed.update4(processed, exp);
            }
            if TOP {
                // The truncation kernels: the row's largest processed logits (masked ones are −∞: skipped),
                // with selects only: a lane's list takes its entries in ascending index order (the
                // groups of a call ascend, `stride > 0` or one group; every adapter's calls for a list
                // ascend tile by tile within the block's range), the contract of `update_ascending`.
                for (j, &zj) in z[Q].iter().enumerate() {
                    if vq + (j as u32) < p.v {
                        top.update_ascending(zj, vq + offset + j as u32);
                    }
                }
            }
        }
    });
    update_groups_above::<G>(cand, floor, &z, (v0 + offset, stride), g_end, &row.noise(), &transform);
}

/// Calls `$f::<…, SC, MK>` for this launch's soft-cap (`SC`) and mask or vocab offset (`MK`): one
/// uniform branch per tile, four instantiations of the tile's epilogue.
macro_rules! controls_dispatch {
    ($p:expr, $f:ident::<$($g:tt),*>($($arg:expr),*)) => {
        match ($p.softcap > 0.0, !$p.mask.is_null() || $p.v_offset != 0) {
            (false, false) => $f::<$($g,)* false, false>($($arg),*),
            (true, false) => $f::<$($g,)* true, false>($($arg),*),
            (false, true) => $f::<$($g,)* false, true>($($arg),*),
            (true, true) => $f::<$($g,)* true, true>($($arg),*),
        }
    };
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

/// `mma.sync` tile: for each batch column `i` the lane owns (row `b0 + 8·(i/2) + 2·quad + i%2`, below
/// B), its four vocab rows from `v0`.
///
/// One heavy iteration (Philox + logs) per column: a real loop, so `column_logits` picks the
/// column's logits with constant indices, keeping `acc` in registers. Each column's screen skips
/// against the best candidate of the 8 lanes holding it ([`column_floor`]): the whole warp calls
/// this, converged.
#[inline(always)]
fn mma_sync_tile_with<const NB: usize, const LP: bool, const TOP: bool, const SC: bool, const MK: bool>(
    p: &FusedParams,
    (b0, quad): (u32, u32),
    v0: u32,
    acc: &Accumulators<NB>,
    cands: &mut [Candidate; 16],
    (masses, tops): (&mut [RowMass; 16], &mut [TopList<LANE_TOP>; 16]),
) {
    for i in 0..2 * NB as u32 {
        // Accumulator element `e` (+2 for MMA row group+8) is batch column 2·quad + e of N tile nt.
        let b = b0 + 8 * (i / 2) + 2 * quad + i % 2;
        // The column's floor ([`column_floor`]); every lane shuffles, its column below B or not.
        // SAFETY: the whole warp, converged (the callers' contract); the trip count is uniform.
        let floor = unsafe { column_floor(cands[i as usize].score) };
        if b < p.b {
            let logits = column_logits::<NB>(acc, i);
            let (cand, mass, top) = (&mut cands[i as usize], &mut masses[i as usize], &mut tops[i as usize]);
            lane_epilogue::<LP, TOP, SC, MK, LANE_TOP, 1>(
                p,
                row_params(p, b),
                (v0, 0),
                [logits],
                (cand, floor),
                (mass, top),
            );
        }
    }
}

/// [`mma_sync_tile_with`] for a lane of 16 columns (`NB = 8`: 64 batch rows per warp), with the
/// candidates and row masses in shared memory ([`SharedCands`], [`SharedMasses`]): the columns run
/// as two passes of 8 unrolled columns (pass `r`: columns `8r ..`, N tiles `4r ..`) in a rolled
/// loop, picking accumulators with selects between the two compile-time indices each can have.
/// [`mma_sync_tile_with`]'s real loop over the columns indexes them with the column: with 64
/// accumulators LLVM then kept them in local memory, in the mainloop too (docs/findings/43). 16
/// masses in registers beside them spilled 2.9 KiB in the `_lp` kernels, and 16 candidates
/// 80–150 bytes that the mainloop reloaded at every stage (168 registers: the most a 288-thread
/// block gets; docs/findings/50).
#[inline(always)]
fn mma_sync_tile_passes<const NB: usize, const LP: bool, const TOP: bool, const SC: bool, const MK: bool>(
    p: &FusedParams,
    (b0, quad): (u32, u32),
    v0: u32,
    acc: &Accumulators<NB>,
    cands: SharedCands,
    masses: SharedMasses,
) {
    // No truncation kernel has 16 columns a lane (their top lists spilled 9.5 KiB, docs/findings/48):
    // `TOP` only in the never-called `NB ≤ 4` instantiations, whose indices `% NB` keeps in bounds.
    const { assert!(!TOP || NB <= 4) };
    // Only lanes of 16 columns have candidates in shared memory (`FusedVariant::lane_cands`): the
    // `NB ≤ 4` instantiations (the other branch of `SlabWarp::epilogue`, never taken) do nothing.
    if NB != 8 {
        return;
    }
    // An opaque trip count keeps the loop rolled (one copy of the 8 columns' epilogue).
    let passes = mov_b32(2);
    let mut r = 0;
    while r < passes {
        let second = r != 0;
        unrolled!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
            // Column 8r + I: N tile 4r + I / 2, element I % 2 of the MMA's column pair.
            let (nt, c) = (I / 2, I % 2);
            let b = b0 + 8 * (4 * r + nt as u32) + 2 * quad + c as u32;
            // SAFETY: column 8r + I < 16 = the lane's candidates (`FusedVariant::lane_cands`).
            let mut cand = unsafe { cands.get(8 * r + I as u32) };
            // The column's floor ([`column_floor`]); every lane shuffles, its column below B or not.
            // SAFETY: the whole warp, converged (the callers' contract); the passes are uniform.
            let floor = unsafe { column_floor(cand.score) };
            if b < p.b {
                // Lane row j = 2·mt + h is MMA row group + 8h of M tile mt (`column_logits`).
                let pick = |mt: usize, h: usize| {
                    if second { acc[mt][(nt + 4) % NB][2 * h + c] } else { acc[mt][nt % NB][2 * h + c] }
                };
                let logits = [pick(0, 0), pick(0, 1), pick(1, 0), pick(1, 1)];
                // SAFETY: column 8r + I < 16 = the lane's masses (`FusedVariant::lane_masses`).
                let mut mass = if LP { unsafe { masses.get(8 * r + I as u32) } } else { RowMass::EMPTY };
                let mut top = TopList::EMPTY;
                lane_epilogue::<LP, TOP, SC, MK, LANE_TOP, 1>(
                    p,
                    row_params(p, b),
                    (v0, 0),
                    [logits],
                    (&mut cand, floor),
                    (&mut mass, &mut top),
                );
                // SAFETY: as for the load.
                unsafe { cands.set(8 * r + I as u32, cand) };
                if LP {
                    // SAFETY: as for the load.
                    unsafe { masses.set(8 * r + I as u32, mass) };
                }
            }
        });
        r += 1;
    }
}

/// The fallback's logits (`truncate::fallback_logits`, no sampling), [`mma_sync_tile`]'s layout:
/// for each of the lane's batch columns `b < count` (row `b0 + 8·(i/2) + 2·quad + i%2` of the
/// gathered rows), its logits of the four vocab rows from `v0` (those below `v`) are stored to
/// `logits[b·ld + v0 ..]`.
///
/// # Safety
/// `logits` holds `count × ld` floats, `ld ≥ v`.
#[inline(always)]
pub(super) unsafe fn store_logits_columns<const NB: usize>(
    (logits, count, v, ld): (*mut f32, u32, u32, u32),
    (b0, quad): (u32, u32),
    v0: u32,
    acc: &Accumulators<NB>,
) {
    for i in 0..2 * NB as u32 {
        let b = b0 + 8 * (i / 2) + 2 * quad + i % 2;
        if b < count {
            let y = column_logits::<NB>(acc, i);
            for (j, &yj) in y.iter().enumerate() {
                let vj = v0 + j as u32;
                if vj < v {
                    // SAFETY: b < count, vj < v ≤ ld: inside `[count, ld]` (the caller's contract).
                    unsafe { *logits.add(b as usize * ld as usize + vj as usize) = yj };
                }
            }
        }
    }
}

/// Philox groups a lane of a GEMM-fed row takes in one [`lane_epilogue`] call ([`logits_row`]): one
/// 16-byte load from each of this many consecutive tiles, screened together.
pub(super) const ROW_GROUPS: usize = 2;

/// The four logits of vocab rows `v0 .. v0 + 4` of a GEMM's logits row `row` (`v` of them valid):
/// one 16-byte load where all four are below `v`, else those below `v` one at a time and 0 beyond
/// (the lane epilogue skips rows at or past V).
///
/// # Safety
/// `row` is a 16-byte aligned global address of `ld ≥ v` floats (`ld % 4 == 0`) not written during
/// the kernel; `v0 % 4 == 0`.
#[inline(always)]
pub(super) unsafe fn load_logits_group(row: *const f32, v: u32, v0: u32) -> [f32; 4] {
    if v0 + 4 <= v {
        // SAFETY: v0 + 4 ≤ v ≤ ld: inside the row; 16-byte aligned (the row and v0 are), read-only
        // during the kernel (the caller's contract).
        unsafe { super::ptx::ld_global_nc_v4_f32(row.add(v0 as usize)) }
    } else {
        let mut y = [0.0f32; 4];
        for (j, yj) in y.iter_mut().enumerate() {
            if v0 + (j as u32) < v {
                // SAFETY: v0 + j < v ≤ ld: inside the row.
                *yj = unsafe { *row.add(v0 as usize + j) };
            }
        }
        y
    }
}

/// A GEMM-fed row, scored whole by one warp (`fused/gemm_logits.rs`): batch row `b`'s logits at
/// `row`, the block's vocab tiles `[first, end)`; lane `lane` takes the Philox group `128·tile +
/// 4·lane ..` of every tile, [`ROW_GROUPS`] tiles a call (stride 128: ascending, as the top list
/// needs), the range's remaining tiles (fewer than [`ROW_GROUPS`]) one at a time. Each call's
/// screen skips against the best candidate of the warp's 32 lanes (all on this row) before it
/// ([`lanes_best`]), so after the first call of a row few entries draw their noise.
///
/// # Safety
/// The whole warp, converged (`b` and the tiles are warp-uniform); `b < B`; `row` as for
/// [`load_logits_group`], holding row `b`'s `p.v` logits.
#[inline(always)]
unsafe fn logits_row_with<const LP: bool, const TOP: bool, const SC: bool, const MK: bool>(
    p: &FusedParams,
    b: u32,
    (row, lane): (*const f32, u32),
    (first, end): (u32, u32),
    cand: &mut Candidate,
    (mass, top): (&mut RowMass, &mut TopList<LANE_TOP>),
) {
    let params = row_params(p, b);
    let tile_v = crate::config::BLOCK_V;
    // SAFETY: `row`'s contract; 128·tile + 4·lane is a multiple of 4.
    let load = |tile: u32| unsafe { load_logits_group(row, p.v, tile * tile_v + 4 * lane) };
    const ALL: [u32; 5] = [1, 2, 4, 8, 16];
    let mut tile = first;
    while tile + ROW_GROUPS as u32 <= end {
        let mut y = [[0.0f32; 4]; ROW_GROUPS];
        unrolled!(Q in [0, 1, 2, 3, 4, 5, 6, 7] {
            if Q < ROW_GROUPS {
                y[Q] = load(tile + Q as u32);
            }
        });
        // SAFETY: the whole warp, converged (the caller's contract; uniform trip counts).
        let floor = unsafe { lanes_best(cand.score, ALL) };
        lane_epilogue::<LP, TOP, SC, MK, LANE_TOP, ROW_GROUPS>(
            p,
            params,
            (tile * tile_v + 4 * lane, tile_v),
            y,
            (cand, floor),
            (mass, top),
        );
        tile += ROW_GROUPS as u32;
    }
    while tile < end {
        let y = load(tile);
        // SAFETY: as above.
        let floor = unsafe { lanes_best(cand.score, ALL) };
        lane_epilogue::<LP, TOP, SC, MK, LANE_TOP, 1>(
            p,
            params,
            (tile * tile_v + 4 * lane, 0),
            [y],
            (cand, floor),
            (mass, top),
        );
        tile += 1;
    }
}

/// Weight-as-A `wgmma` tile: the lane's four vocab rows from `v0`, for each of its `N / 4` batch
/// columns (column `8j + 2q + c` for index `i = 2j + c`; accumulator `4j + 2e + c` of half `h` is
/// vocab row `v0 + 2h + e`).
///
/// The columns run as passes of 8 unrolled columns (pass `r`: `i = 8r ..`), picking accumulators and
/// candidates with selects among the compile-time indices they can have: fully unrolled, the code of
/// 16 columns crowded the instruction cache (`tma_n64`, Qwen3-8B B = 64: 0.3233 → 0.3157 ms,
/// docs/findings).
#[inline(always)]
fn weight_a_tile_with<
    T: WgmmaShape,
    const LP: bool,
    const TOP: bool,
    const P: usize,
    const SC: bool,
    const MK: bool,
>(
    p: &FusedParams,
    (b0, quad): (u32, u32),
    v0: u32,
    acc: &[T::Acc; 2],
    cands: &mut [Candidate; 32],
    (masses, tops): (SharedMasses, &mut [TopList<LANE_TOP>; 32]),
) {
    let cols = T::N as usize / 4;
    // Columns per pass `P`: 8, or 4 for the log-probability kernels up to N = 32 ([`weight_a_tile`]).
    let pass = P;
    for r in 0..cols.div_ceil(pass) {
        // Accumulator 4j + c (+ 2) of column i = pass·r + I: 2·pass·r + 4·(I / 2) + c. (With passes
        // of 8 the arms past r = 1 are never taken; they keep the selects' form of the measured
        // build.)
        let pick = |h: usize, i: usize| match r {
            0 => T::at(&acc[h], i),
            1 => T::at(&acc[h], i + 2 * pass),
            2 => T::at(&acc[h], i + 4 * pass),
            _ => T::at(&acc[h], i + 6 * pass),
        };
        unrolled!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
            // (Without `LP` the condition of the measured build: passes of 8.)
            if if pass == 4 { I < pass && pass * r + I < cols } else { I < cols } {
                let (j, c) = ((pass / 2) * r + I / 2, I % 2);
                let b = b0 + 8 * j as u32 + 2 * quad + c as u32;
                let mut cand = match r {
                    0 => cands[I],
                    1 => cands[I + pass],
                    2 => cands[I + 2 * pass],
                    _ => cands[I + 3 * pass],
                };
                // The column's floor: the best score the 8 lanes holding this batch column (lanes
                // q, q + 4, …, q + 28) had before this tile. No entry below another lane's candidate
                // can be the row's sample, so the screen skips against it too (`update_groups_above`).
                // SAFETY: the whole warp calls the epilogue converged (`consume`, after its aligned
                // wgmma wait); the column index is warp-uniform, so every lane shuffles here.
                let floor = unsafe { column_floor(cand.score) };
                if b < p.b {
                    let a = 4 * (I / 2) + c;
                    let logits = [pick(0, a), pick(0, a + 2), pick(1, a), pick(1, a + 2)];
                    // SAFETY: column pass·r + I < N / 4, the lane's masses.
                    let mut mass = if !LP { RowMass::EMPTY } else { unsafe { masses.get((pass * r + I) as u32) } };
                    let mut top = if !TOP {
                        TopList::EMPTY
                    } else {
                        match r {
                            0 => tops[I],
                            1 => tops[I + pass],
                            2 => tops[I + 2 * pass],
                            _ => tops[I + 3 * pass],
                        }
                    };
                    lane_epilogue::<LP, TOP, SC, MK, LANE_TOP, 1>(
                        p,
                        row_params(p, b),
                        (v0, 0),
                        [logits],
                        (&mut cand, floor),
                        (&mut mass, &mut top),
                    );
                    if TOP {
                        match r {
                            0 => tops[I] = top,
                            1 => tops[I + pass] = top,
                            2 => tops[I + 2 * pass] = top,
                            _ => tops[I + 3 * pass] = top,
                        }
                    }
                    match r {
                        0 => cands[I] = cand,
                        1 => cands[I + pass] = cand,
                        2 => cands[I + 2 * pass] = cand,
                        _ => cands[I + 3 * pass] = cand,
                    }
                    if LP {
                        // SAFETY: as for the load.
                        unsafe { masses.set((pass * r + I) as u32, mass) };
                    }
                }
            }
        });
    }
}

/// The screen floor of a weight-as-A lane's batch column (`mma.sync` and `wgmma`): the best candidate
/// score of the 8 lanes holding it (lanes `quad`, `quad + 4`, …, `quad + 28`: MMA row groups `0..8`,
/// other vocab rows of the same column; docs/findings/28 for `wgmma`, 51 for `mma.sync`). An entry whose
/// noise bound is strictly below another lane's candidate cannot be the row's sample, so the screen
/// skips it with the tokens unchanged, and fewer entries draw their noise.
///
/// # Safety
/// The whole warp, converged.
#[inline(always)]
unsafe fn column_floor(score: f32) -> f32 {
    // SAFETY: forwarded contract.
    unsafe { lanes_best(score, [4, 8, 16]) }
}

/// The largest `score` of the lanes that differ from this one only in the bits of `masks` (a
/// butterfly max; NaN ignored unless all are NaN): `[1, 2]` the lane's quad (lanes `4g .. 4g + 4`,
/// the hidden-as-A layout's batch row), `[4, 8, 16]` the 8 lanes `q, q + 4, …, q + 28` (`q = lane %
/// 4`) that hold the lane's batch columns in the weight-as-A layout, `[1, 2, 4, 8, 16]` the whole warp
/// (the GEMM-fed row layout: all on one batch row).
///
/// # Safety
/// All 32 lanes of the warp call it together (converged).
#[inline(always)]
unsafe fn lanes_best<const N: usize>(score: f32, masks: [u32; N]) -> f32 {
    let mut s = score;
    for m in masks {
        // SAFETY: the whole warp, converged (the caller's contract).
        let other = f32::from_bits(unsafe { shfl_sync_bfly_b32(s.to_bits(), m) });
        s = s.max(other);
    }
    s
}

/// Hidden-as-A `wgmma` tile `tile` (256 vocab rows): for each of the lane's two batch rows `b[e]`
/// (skipped past B), the 16 Philox groups `tile·256 + 16J + 4q ..` (`J = 0..16`). Accumulator
/// `4j + 2e + c` is batch row `e`, slab column `8j + 2q + c` = vocab row `16J + 4q + 2i + c` for
/// `j = 2J + i`.
///
/// The 32 (row, group) pairs run as 4 passes of 8 groups: pass `r` takes batch row `e = r % 2` and
/// groups `J = 8·(r / 2) ..`, picking its accumulators with selects among the 4 compile-time indices
/// they can have (blends on the bits of `r`), and hands the 8 groups to one [`lane_epilogue`] (`G = 8`:
/// a branch-free screen of the 32 entries, then the noise of the few that could win; the `_lp` and
/// `_tk` kernels one group at a time). Fully unrolled, the code of 32 groups
/// overflows the instruction cache (ncu: 39% of stalls on instruction fetch, docs/findings); so did one
/// copy of the two logarithms per entry (27% of the epilogue's stalls, docs/findings/26).
#[inline(always)]
fn hidden_a_tile_with<const LP: bool, const TOP: bool, const SC: bool, const MK: bool>(
    p: &FusedParams,
    b: [u32; 2],
    tile: u32,
    q: u32,
    acc: &[f32; 128],
    cands: &mut [Candidate; 2],
    (masses, tops): (SharedMasses, &mut [TopList<LANE_TOP_WIDE>; 2]),
) {
    let v_lane = tile * TMA_T_TILE_V + 4 * q;
    // Each row's floor: the best score the quad's four lanes (lanes 4g .. 4g + 4, the lanes scoring
    // these two batch rows) held after the previous tile. No entry below it can be the row's sample,
    // so the pruned noise skips against it too (`update_groups_above`).
    // SAFETY: the whole warp calls the epilogue converged (`consume`, after its aligned wgmma wait).
    let floors = unsafe { [lanes_best(cands[0].score, [1, 2]), lanes_best(cands[1].score, [1, 2])] };
    for r in 0..4u32 {
        let (e, j_hi) = (r % 2, r / 2);
        let row = if e == 0 { b[0] } else { b[1] };
        if row < p.b {
            let params = row_params(p, row);
            let mut cand = if e == 0 { cands[0] } else { cands[1] };
            // SAFETY: row e < 2, the lane's masses.
            let mut mass = if LP { unsafe { masses.get(e) } } else { RowMass::EMPTY };
            // (Only the truncation kernels touch the lists: otherwise the selects of the two 68-byte
            // lists became byte-wise copies in local memory once the pruned noise grew the loop.)
            let mut top = if !TOP {
                TopList::EMPTY
            } else if e == 0 {
                tops[0]
            } else {
                tops[1]
            };
            // Accumulator 4j + 2e + c with j = 2J + i, J = 8·j_hi + J_lo: 64·j_hi + 8·J_lo + 4i + 2e + c.
            // Pass r's accumulator of index i: a blend on the bits of r (uniform masks, one `lop3` per
            // step), not a `match`, which became a tree of four branches per logit (docs/findings/26).
            let (odd_row, high_half) = (mov_b32(0u32.wrapping_sub(e)), mov_b32(0u32.wrapping_sub(j_hi)));
            let blend = |a: f32, b: f32, m: u32| f32::from_bits((b.to_bits() & m) | (a.to_bits() & !m));
            let pick = |i: usize| {
                blend(blend(acc[i], acc[i + 2], odd_row), blend(acc[i + 64], acc[i + 66], odd_row), high_half)
            };
            // Columns 8j + 2q + c for j = 2J, 2J + 1: vocab rows 16J + 4q + 0..4 of group J of the pass.
            let mut logits = [[0.0f32; 4]; 8];
            unrolled!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                logits[J] = [pick(8 * J), pick(8 * J + 1), pick(8 * J + 4), pick(8 * J + 5)];
            });
            let v0 = v_lane + 16 * 8 * j_hi;
            let floor = if e == 0 { floors[0] } else { floors[1] };
            if LP || TOP {
                // The log-probability and truncation kernels screen one group at a time: the eight
                // groups' logits live through the screen and the draw loop spilled 2–6 KiB there
                // (ptxas, `tmat_n64x2_lp` / `_tk`; docs/findings/26).
                unrolled!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                    lane_epilogue::<LP, TOP, SC, MK, LANE_TOP_WIDE, 1>(
                        p,
                        params,
                        (v0 + 16 * J as u32, 0),
                        [logits[J]],
                        (&mut cand, floor),
                        (&mut mass, &mut top),
                    );
                });
            } else {
                lane_epilogue::<LP, TOP, SC, MK, LANE_TOP_WIDE, 8>(
                    p,
                    params,
                    (v0, 16),
                    logits,
                    (&mut cand, floor),
                    (&mut mass, &mut top),
                );
            }
            if e == 0 {
                cands[0] = cand;
            } else {
                cands[1] = cand;
            }
            if TOP {
                if e == 0 {
                    tops[0] = top;
                } else {
                    tops[1] = top;
                }
            }
            if LP {
                // SAFETY: as for the load.
                unsafe { masses.set(e, mass) };
            }
        }
    }
}

/// [`mma_sync_tile_with`] for this launch's controls (the whole warp, converged: the column floors'
/// shuffles).
#[inline(always)]
pub(super) fn mma_sync_tile<const NB: usize, const LP: bool, const TOP: bool>(
    p: &FusedParams,
    lane: (u32, u32),
    v0: u32,
    acc: &Accumulators<NB>,
    cands: &mut [Candidate; 16],
    state: (&mut [RowMass; 16], &mut [TopList<LANE_TOP>; 16]),
) {
    controls_dispatch!(p, mma_sync_tile_with::<NB, LP, TOP>(p, lane, v0, acc, cands, state))
}

/// [`mma_sync_tile_passes`] for this launch's controls: the `NB = 8` lanes of the portable TMA
/// kernels, candidates and masses in shared memory (the whole warp, converged: the column floors'
/// shuffles).
#[inline(always)]
pub(super) fn mma_sync_tile_wide<const NB: usize, const LP: bool, const TOP: bool>(
    p: &FusedParams,
    lane: (u32, u32),
    v0: u32,
    acc: &Accumulators<NB>,
    cands: SharedCands,
    masses: SharedMasses,
) {
    controls_dispatch!(p, mma_sync_tile_passes::<NB, LP, TOP>(p, lane, v0, acc, cands, masses))
}

/// [`weight_a_tile_with`] for this launch's controls.
#[inline(always)]
pub(super) fn weight_a_tile<T: WgmmaShape, const LP: bool, const TOP: bool>(
    p: &FusedParams,
    lane: (u32, u32),
    v0: u32,
    acc: &[T::Acc; 2],
    cands: &mut [Candidate; 32],
    state: (SharedMasses, &mut [TopList<LANE_TOP>; 32]),
) {
    // Passes of 4 columns for the log-probability kernels up to N = 32: half the unrolled code (the
    // hypothesis of docs/findings/18 is that 8 columns' worth of log-mass updates overflows the
    // instruction cache); at N = 64 four passes make the compiler index the candidates in local
    // memory, so they keep passes of 8 like the plain kernels.
    if LP && T::N <= 32 {
        controls_dispatch!(p, weight_a_tile_with::<T, LP, TOP, 4>(p, lane, v0, acc, cands, state))
    } else {
        controls_dispatch!(p, weight_a_tile_with::<T, LP, TOP, 8>(p, lane, v0, acc, cands, state))
    }
}

/// [`hidden_a_tile_with`] for this launch's controls.
#[inline(always)]
pub(super) fn hidden_a_tile<const LP: bool, const TOP: bool>(
    p: &FusedParams,
    b: [u32; 2],
    tile: u32,
    q: u32,
    acc: &[f32; 128],
    cands: &mut [Candidate; 2],
    state: (SharedMasses, &mut [TopList<LANE_TOP_WIDE>; 2]),
) {
    controls_dispatch!(p, hidden_a_tile_with::<LP, TOP>(p, b, tile, q, acc, cands, state))
}

/// [`logits_row_with`] for this launch's controls (one uniform branch per row).
///
/// # Safety
/// As [`logits_row_with`].
#[inline(always)]
pub(super) unsafe fn logits_row<const LP: bool, const TOP: bool>(
    p: &FusedParams,
    b: u32,
    row: (*const f32, u32),
    tiles: (u32, u32),
    cand: &mut Candidate,
    state: (&mut RowMass, &mut TopList<LANE_TOP>),
) {
    // SAFETY: forwarded contract.
    unsafe { controls_dispatch!(p, logits_row_with::<LP, TOP>(p, b, row, tiles, cand, state)) }
}

/// Block merge, step 1, for the column layouts of [`mma_sync_tile`] and [`weight_a_tile`]: the
/// lane's candidate `I < columns` (batch column `8·(I/2) + 2·quad + I%2`; `columns` = `N / 4`, at
/// most 16, a compile-time constant after inlining) is merged over the eight lane groups (shuffles
/// 4, 8, 16) and stored by group 0 at `[contributor][row0 + column]`; with `LP` its log-mass too.
///
/// `ROLLED`: the masses are merged in a loop over the columns rather than one unrolled copy per
/// column (the `wgmma` kernels, whose masses are in shared memory; `mma_sync` keeps them in a
/// register array, which a loop would put in local memory). This code runs once per block, after
/// the last tile, from a cold instruction cache while the weights stream through L2: sixteen
/// copies of the mass butterfly kept the log-probability kernels' blocks 8–18 µs past their last
/// epilogue (the plain kernels' 1–2 µs; docs/findings/36). The merges are the same in either form.
///
/// # Safety
/// All 32 lanes of the warp call it together; the slots are inside the merge area.
#[inline(always)]
pub(super) unsafe fn put_columns<const C: usize, const LP: bool, const ROLLED: bool>(
    area: MergeArea,
    contributor: u32,
    row0: u32,
    (group, quad): (u32, u32),
    (cands, mass): (&[Candidate; C], impl Fn(usize) -> RowMass),
    columns: usize,
) {
    let column = |i: u32| 8 * (i / 2) + 2 * quad + i % 2;
    // Constant indices: `cands` stays in registers.
    unrolled!(I in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
        if I < columns && I < C {
            let lp = LP && !ROLLED;
            // SAFETY: forwarded contract (all lanes reach this point).
            unsafe {
                if lp {
                    put_merged::<_, true>(area, contributor, row0 + column(I as u32), (cands[I], || mass(I)), [4, 8, 16], group == 0)
                } else {
                    put_merged::<_, false>(area, contributor, row0 + column(I as u32), (cands[I], || RowMass::EMPTY), [4, 8, 16], group == 0)
                }
            };
        }
    });
    if LP && ROLLED {
        // An opaque trip count keeps the loop rolled (one copy of the butterfly).
        let n = mov_b32(columns.min(C) as u32);
        let mut i = 0;
        while i < n {
            // SAFETY: forwarded contract (all lanes run the same iterations: `n` is warp-uniform).
            unsafe { put_merged_mass(area, contributor, row0 + column(i), mass(i as usize), [4, 8, 16], group == 0) };
            i += 1;
        }
    }
}

/// Block merge, step 1, for [`hidden_a_tile`]: each of the lane's two batch rows (block rows
/// `rows[e]`) is merged over the 4 lanes `q` of its group (shuffles 1, 2) and stored by `q = 0` at
/// `[contributor][row]`.
///
/// # Safety
/// As [`put_columns`].
#[inline(always)]
pub(super) unsafe fn put_rows<const LP: bool>(
    area: MergeArea,
    contributor: u32,
    rows: [u32; 2],
    q: u32,
    (cands, mass): (&[Candidate; 2], impl Fn(u32) -> RowMass),
) {
    for e in 0..2u32 {
        // SAFETY: forwarded contract.
        unsafe {
            put_merged::<_, LP>(area, contributor, rows[e as usize], (cands[e as usize], || mass(e)), [1, 2], q == 0)
        };
    }
}

/// Block merge, step 1, for [`logits_row`]: block row `row`'s candidate (and with `LP` its log-mass)
/// merged over the warp's 32 lanes and stored by lane 0 at `[0][row]` (the row's one contributor).
///
/// # Safety
/// As [`put_columns`].
#[inline(always)]
pub(super) unsafe fn put_row_warp<const LP: bool>(
    area: MergeArea,
    row: u32,
    lane: u32,
    cand: Candidate,
    mass: RowMass,
) {
    // SAFETY: forwarded contract.
    unsafe { put_merged::<_, LP>(area, 0, row, (cand, || mass), [1, 2, 4, 8, 16], lane == 0) };
}

/// The truncation kernels' top lists, column layouts ([`mma_sync_tile`], [`weight_a_tile`]): the
/// lane's list `I < columns` (batch column `8·(I/2) + 2·quad + I%2` from block row `row0`) is
/// written to unit `contributor·8 + group` of its (row, vocab range) in `p.tops`.
///
/// # Safety
/// `p` is a truncation launch (`tops` holds `[B, n_vranges, top_units]`), `work` this block's,
/// `contributor·8 + group < top_units`.
#[inline(always)]
pub(super) unsafe fn put_tops_columns<const C: usize>(
    p: &FusedParams,
    work: &super::schedule::BlockWork,
    (contributor, row0): (u32, u32),
    (group, quad): (u32, u32),
    tops: &[TopList<LANE_TOP>; C],
    columns: usize,
) {
    unrolled!(I in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
        if I < columns && I < C {
            let b = work.b_first + row0 + 8 * (I as u32 / 2) + 2 * quad + I as u32 % 2;
            // SAFETY: forwarded contract.
            unsafe { put_top(p, work, b, 8 * contributor + group, tops[I]) };
        }
    });
}

/// The truncation kernels' top lists, [`hidden_a_tile`]: each of the lane's two rows (block rows
/// `rows[e]`) goes to units `16·contributor + 4·q ..` as four parts ([`TopList::part`]).
///
/// # Safety
/// As [`put_tops_columns`], with `16·contributor + 4·q + 3 < top_units`.
#[inline(always)]
pub(super) unsafe fn put_tops_rows(
    p: &FusedParams,
    work: &super::schedule::BlockWork,
    contributor: u32,
    rows: [u32; 2],
    q: u32,
    tops: &[TopList<LANE_TOP_WIDE>; 2],
) {
    for e in 0..2 {
        for j in 0..LANE_TOP_WIDE / LANE_TOP {
            let unit = 16 * contributor + 4 * q + j as u32;
            // SAFETY: forwarded contract.
            unsafe { put_top(p, work, work.b_first + rows[e], unit, tops[e].part::<LANE_TOP>(j)) };
        }
    }
}

/// Stores `list` as row `b`'s unit `unit` of this block's vocab range (rows at or past B: nothing).
/// [`logits_row`]'s lanes call it directly: lane `lane`'s list of its row is unit `lane`.
///
/// # Safety
/// As [`put_tops_columns`] (`unit < top_units`).
#[inline(always)]
pub(super) unsafe fn put_top(
    p: &FusedParams,
    work: &super::schedule::BlockWork,
    b: u32,
    unit: u32,
    list: TopList<LANE_TOP>,
) {
    if b < p.b {
        let at = (b as usize * p.n_vranges as usize + work.vrange as usize) * p.top_units as usize + unit as usize;
        // SAFETY: b < B, vrange < n_vranges, unit < top_units: inside `tops` (the caller's contract).
        unsafe { *p.tops.add(at) = StoredTop { list, _pad: 0 } };
    }
}
