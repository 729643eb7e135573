//! The staging pipelines: shared-memory rings of `S` stages and the synchronization that hands a
//! stage from its producer to its consumers.
//!
//! - [`BlockRing`] + [`wait_oldest_stage`]: the `mma.sync` kernel's ring, filled with `cp.async` by
//!   every thread and synchronized by one block barrier per stage (`producer::BlockIssuer`).
//! - [`Ring`] + [`Pipeline`]: the TMA kernels' ring of 128-byte-swizzled slabs (the `wgmma` kernels',
//!   and the portable TMA kernels' with `mma.sync` consumers), filled by the TMA producer warp
//!   (`producer::produce_tma`) and handed over by `mbarrier`s: `full[slot]` completes when a stage
//!   has landed, `empty[slot]` when the consumers' MMAs no longer read it, and `turn[c]` orders the
//!   two consumers that take turns on the tiles.
//!
//! A stage is `STAGE_K` = 64 D columns (one 128-byte line) of every staged weight and hidden row.
//! Stage `i` of a block (its `i`-th in the order of its range's pieces,
//! [`RangeStages::piece`]: with whole tiles, tile `first + i / n_k`, D step `i % n_k`) lives in slot
//! `i % S`, in its `(i / S)`-th fill, so the barriers' phase parity is `(i / S) % 2`.

use core::arch::nvptx::_syncthreads;

use super::ptx::{
    bar_warp_sync, cp_async_wait_group, fence_mbarrier_init_release_cluster, mbarrier_init_shared_cta_b64,
    mbarrier_try_wait_parity_shared_cta_b64, mov_u32_dynamic_smem,
};
use crate::config::{BLOCK_V, STAGE_ROW_BYTES};
use crate::schedule::RangeStages;

/// `cp.async.wait_group S − 2`: this thread's copies of the oldest of the `S − 1` stages in flight
/// have landed (an `S`-deep ring, one commit group per stage).
#[inline(always)]
pub(super) fn wait_oldest_stage<const S: u32>() {
    const { assert!(S >= 3 && S <= 10, "pipeline depth 3..=10") };
    match S {
        3 => cp_async_wait_group::<1>(),
        4 => cp_async_wait_group::<2>(),
        5 => cp_async_wait_group::<3>(),
        6 => cp_async_wait_group::<4>(),
        7 => cp_async_wait_group::<5>(),
        8 => cp_async_wait_group::<6>(),
        9 => cp_async_wait_group::<7>(),
        _ => cp_async_wait_group::<8>(),
    }
}

/// The `mma.sync` kernel's shared-memory ring of `S` stages. Stage `s` starts at
/// `base + s · stage_bytes`; weight row `r` (0..128) at `128·r`, hidden row `r` (0..BLOCK_B) at
/// `128·(128 + r)`. 16-byte piece `c` of a row is stored at piece `c ^ swizzle(row)`:
/// - weight rows: `r % 8`. A read phase (8 lanes: groups `2i, 2i + 1`) touches rows `4·group + j`,
///   whose swizzles differ in bit 2, so the 8 pieces are distinct.
/// - hidden rows: `((r & 1) << 2) | ((r >> 1) & 3)`. A read phase touches rows `8nt + 2i, 8nt + 2i + 1`,
///   again differing in bit 2.
///
/// Both are permutations of 0..8, so the 8 threads copying one line write 8 distinct pieces.
#[derive(Clone, Copy)]
pub(super) struct BlockRing {
    base: u32,
    stage_bytes: u32,
}

impl BlockRing {
    /// The ring after the first `merge_bytes` of the dynamic shared memory (the block merge's area).
    #[inline(always)]
    pub(super) fn new(merge_bytes: u32, block_b: u32) -> Self {
        Self { base: mov_u32_dynamic_smem() + merge_bytes, stage_bytes: (BLOCK_V + block_b) * STAGE_ROW_BYTES }
    }

    /// Shared address of piece `c` (0..8) of weight row `r` in slot `slot`.
    #[inline(always)]
    pub(super) fn weight(self, slot: u32, r: u32, c: u32) -> u32 {
        self.base + slot * self.stage_bytes + STAGE_ROW_BYTES * r + 16 * (c ^ (r % 8))
    }

    /// Shared address of piece `c` of hidden row `r` (row of the batch tile) in slot `slot`.
    #[inline(always)]
    pub(super) fn hidden(self, slot: u32, r: u32, c: u32) -> u32 {
        let swizzle = ((r & 1) << 2) | ((r >> 1) & 3);
        self.base + slot * self.stage_bytes + STAGE_ROW_BYTES * (BLOCK_V + r) + 16 * (c ^ swizzle)
    }
}

/// The `wgmma` kernels' ring: `S` slabs of `(W + N) × 128` bytes (`W` weight rows, then `N` hidden
/// rows) from a 1024-byte aligned base, in the 128-byte-swizzled K-major layout `wgmma` and the TMA
/// copies use (row `r` at `128·r`, its 16-byte piece `c` at piece `c ^ (r % 8)`).
#[derive(Clone, Copy)]
pub(super) struct Ring {
    base: u32,
    slab_bytes: u32,
    /// Weight rows per slab (`W`: the vocab tile, 128, or 256 in the hidden-as-A kernels).
    pub(super) w_rows: u32,
    /// Hidden rows per slab (`N`, the block's batch tile).
    pub(super) n: u32,
}

impl Ring {
    /// The ring of `w_rows` weight and `n` hidden rows per slab at the first 1024-byte boundary from
    /// `start`.
    #[inline(always)]
    pub(super) fn new(start: u32, w_rows: u32, n: u32) -> Self {
        Ring { base: start.next_multiple_of(1024), slab_bytes: (w_rows + n) * STAGE_ROW_BYTES, w_rows, n }
    }
    /// Shared address of slab `slot` (its first weight row).
    #[inline(always)]
    pub(super) fn slab(self, slot: u32) -> u32 {
        self.base + slot * self.slab_bytes
    }
    /// Shared address of hidden row `r` of slab `slot`.
    #[inline(always)]
    pub(super) fn hidden(self, slot: u32, r: u32) -> u32 {
        self.slab(slot) + STAGE_ROW_BYTES * (self.w_rows + r)
    }
}

/// Arrivals per `empty` phase from one consumer warpgroup: lane 0 of each of its 4 warps.
pub(super) const CONSUMER_ARRIVALS: u32 = 4;

/// The block's barriers, 8 bytes each from `base`: `full[slot]`, `empty[slot]`, then `turn[c]`.
#[derive(Clone, Copy)]
pub(super) struct Barriers {
    base: u32,
    slots: u32,
}

impl Barriers {
    /// Completes a phase when the other consumer has waited for the last stage of its tile: consumer
    /// `c` may then wait for its next tile's stages (an arrival from each of the other consumer's 4
    /// warps).
    #[inline(always)]
    pub(super) fn turn(self, c: u32) -> u32 {
        self.base + 8 * (2 * self.slots + c)
    }
    /// Completes a phase when a stage has landed in `slot` (the producer's arrival and the stage's
    /// TMA bytes).
    #[inline(always)]
    pub(super) fn full(self, slot: u32) -> u32 {
        self.base + 8 * slot
    }
    /// Completes a phase when the MMAs reading `slot` are done (the consumers' arrivals).
    #[inline(always)]
    pub(super) fn empty(self, slot: u32) -> u32 {
        self.base + 8 * (self.slots + slot)
    }
}

/// Spins until the phase of parity `parity` of barrier `bar` has completed, then reconverges the warp.
///
/// # Safety
/// `bar` is an initialized barrier; every lane of the warp calls this with the same arguments.
#[inline(always)]
pub(super) unsafe fn wait(bar: u32, parity: u32) {
    // SAFETY: forwarded contract.
    while !unsafe { mbarrier_try_wait_parity_shared_cta_b64(bar, parity) } {}
    bar_warp_sync();
}

/// A `wgmma` block's staging pipeline: its barriers, its ring, and the stages it runs: the pieces of
/// `range` in order (head, whole tiles, tail), the block's stage `i` in slot `i % S`.
#[derive(Clone, Copy)]
pub(super) struct Pipeline {
    pub(super) bars: Barriers,
    pub(super) ring: Ring,
    pub(super) range: RangeStages,
}

impl Pipeline {
    /// Places the barriers after the block merge's area and the lanes' state (`prefix_bytes`,
    /// `FusedVariant::prefix_bytes`) and the ring (`w_rows` weight
    /// and `block_b` hidden rows per slot) after them, and initializes the barriers: `full` expects
    /// one arrival (the TMA producer's, with the stage's bytes), `empty` the 4 warps of one consumer
    /// (taking turns, `split = 1`) or of both (sharing every stage, `split = 2`), `turn[c]` the 4
    /// warps of the other consumer (see [`consume`](super::mainloop::consume) for why every warp;
    /// used only when the consumers take turns).
    /// Ends with a block barrier.
    ///
    /// # Safety
    /// Every thread of the block calls it once, first; the variant's shared memory holds the layout.
    #[inline(always)]
    pub(super) unsafe fn setup<const S: u32>(
        tid: u32,
        prefix_bytes: u32,
        (w_rows, block_b): (u32, u32),
        split: u32,
        range: RangeStages,
    ) -> Self {
        let bars = Barriers { base: mov_u32_dynamic_smem() + prefix_bytes, slots: S };
        let ring = Ring::new(bars.base + 8 * (2 * S + 2), w_rows, block_b);
        if tid == 0 {
            for slot in 0..S {
                // SAFETY: 8-byte aligned slots of the barrier area, before any thread uses them.
                unsafe {
                    mbarrier_init_shared_cta_b64(bars.full(slot), 1);
                    mbarrier_init_shared_cta_b64(bars.empty(slot), split * CONSUMER_ARRIVALS);
                }
            }
            for c in 0..2 {
                // SAFETY: as above.
                unsafe { mbarrier_init_shared_cta_b64(bars.turn(c), CONSUMER_ARRIVALS) };
            }
            fence_mbarrier_init_release_cluster();
        }
        // SAFETY: every thread of the block reaches it (the caller's contract).
        unsafe { _syncthreads() };
        Pipeline { bars, ring, range }
    }

    /// Before stage `stage` refills `slot` (`stage % S`): waits until the consumers have released
    /// the slot's previous fill (none for the first `S` stages).
    ///
    /// # Safety
    /// The whole warp, converged, with the barriers of [`Pipeline::setup`].
    #[inline(always)]
    pub(super) unsafe fn wait_until_free<const S: u32>(self, stage: u32, slot: u32) {
        if stage >= S {
            // SAFETY: forwarded contract.
            unsafe { wait(self.bars.empty(slot), (stage / S - 1) % 2) };
        }
    }
}
