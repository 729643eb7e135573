//! The MMA mainloops: logits of one tile, accumulated in f32 over all of D.
//!
//! - **`mma.sync`** ([`MmaSyncMainloop`], portable, sm_80+): `mma.sync.m16n8k16` with the weight as
//!   the A operand (16 vocab rows per M tile) and the hidden states as B (8 batch rows per N tile).
//!   Each warp computes 32 vocab rows × `8·NB` batch rows of a 128-row block tile from the
//!   [`BlockRing`], one block barrier per stage, the producer's copies of a later stage issued right
//!   after each stage's MMAs.
//! - **`mma.sync` on the TMA ring** ([`mma_stage_slab`], the portable TMA kernels, sm_90 PTX): the
//!   same MMAs with `ldmatrix` fragments from the `wgmma` kernels' swizzled slabs, run by
//!   [`consume`] as a synchronous consumer (each warp hands its slot back after its MMAs).
//! - **`wgmma`** ([`consume`], sm_90a): a consumer warpgroup waits for each stage on its `full`
//!   barrier, issues the stage's `wgmma.mma_async` as one group straight from the ring's swizzled
//!   slabs, and releases the previous stage's slot once that group is complete; it runs the pieces
//!   of its block's range ([`crate::schedule::RangeStages`]), handing a head's accumulators to the block
//!   below and resuming a tail from the block above's (`super::handoff`). The operand roles
//!   are the [`Consumer`]'s: weight as A (`m64nNk16`, two 64-row halves of a 128-row tile,
//!   [`mma_stage_weight_a`]) or hidden as A (`m64n256k16`, a 256-row tile as B,
//!   [`mma_stage_hidden_a`]).
//!
//! Every block-staging `mma.sync` kernel computes each logit with the same MMAs in the same order;
//! every portable TMA kernel too, and every `wgmma` kernel of one MMA shape. Between them the k16
//! steps cover other D columns or the tensor cores add a step's products in another order, so
//! samples can differ only where two perturbed scores tie within f32 rounding.
//!
//! # Fragment k-permutation (block-staging `mma.sync`)
//! Lane `quad` takes the 16 bytes at `kc + 8·quad` of each of its rows and of its hidden row; the
//! eight 16-bit elements are the k slots of two consecutive k16 MMAs (any k-permutation shared by A and B
//! leaves the dot product unchanged). The portable TMA kernels' `ldmatrix` fragments keep the PTX
//! order: k16 step `kk` is D columns `16kk ..` of the stage.

use core::arch::nvptx::_syncthreads;

use super::pipeline::{BlockRing, Pipeline, wait, wait_oldest_stage};
use super::producer::BlockIssuer;
use super::ptx::{
    ld_shared_v4_u32, ldmatrix_sync_aligned_m8n8_x4_shared_b16, mbarrier_arrive_shared_cta_b64,
    mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32, mma_sync_aligned_m16n8k16_row_col_f32_f16_f16_f32,
    wgmma_commit_group_sync_aligned, wgmma_fence_sync_aligned, wgmma_mma_async_sync_aligned_m64n16k16_f32_bf16_bf16,
    wgmma_mma_async_sync_aligned_m64n16k16_f32_f16_f16, wgmma_mma_async_sync_aligned_m64n32k16_f32_bf16_bf16,
    wgmma_mma_async_sync_aligned_m64n32k16_f32_f16_f16, wgmma_mma_async_sync_aligned_m64n64k16_f32_bf16_bf16,
    wgmma_mma_async_sync_aligned_m64n64k16_f32_f16_f16, wgmma_mma_async_sync_aligned_m64n256k16_f32_bf16_bf16,
    wgmma_mma_async_sync_aligned_m64n256k16_f32_f16_f16, wgmma_wait_group_sync_aligned,
};
use super::schedule::{BlockWork, Thread};
use crate::config::{CHUNK_D, M_TILES_PER_WARP, ROWS_PER_LANE, STAGE_K, STAGE_ROW_BYTES, SlabLane, WARP_TILE_V};
use crate::params::{ElementType, FusedParams};
use crate::schedule::{Piece, PieceKind};

/// One `mma.sync` warp's accumulators: `[M tile][N tile][fragment]`.
pub(super) type Accumulators<const NB: usize> = [[[f32; 4]; NB]; M_TILES_PER_WARP];

/// One `mma.sync.m16n8k16` of the element type `F16` says (bf16 otherwise).
///
/// # Safety
/// As the wrapped instruction.
#[inline(always)]
unsafe fn mma<const F16: bool>(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    // SAFETY: forwarded contract.
    unsafe {
        if F16 {
            mma_sync_aligned_m16n8k16_row_col_f32_f16_f16_f32(d, a, b)
        } else {
            mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(d, a, b)
        }
    }
}

/// Two k16 MMAs per M tile and N tile on one chunk of fragments.
#[inline(always)]
unsafe fn mma_chunk<const NB: usize, const F16: bool>(
    acc: &mut Accumulators<NB>,
    a: &[[u32; 4]; ROWS_PER_LANE],
    h: &[[u32; 4]; NB],
) {
    for mt in 0..M_TILES_PER_WARP {
        let (lo, hi) = (a[2 * mt], a[2 * mt + 1]); // MMA rows `group` and `group + 8`
        for nt in 0..NB {
            // SAFETY: the caller runs this warp-uniformly (converged).
            unsafe {
                mma::<F16>(&mut acc[mt][nt], [lo[0], hi[0], lo[1], hi[1]], [h[nt][0], h[nt][1]]);
                mma::<F16>(&mut acc[mt][nt], [lo[2], hi[2], lo[3], hi[3]], [h[nt][2], h[nt][3]]);
            }
        }
    }
}

/// The `mma.sync` mainloop of one warp: the ring, the block's producer, and the warp's rows.
///
/// Warp `warp` of the `4·WB` warps takes the 32 vocab rows `32·(warp / WB) ..` of each 128-row block
/// tile and the batch rows `8·NB·(warp % WB) ..` of the batch tile; lane `(group, quad)` reads, for
/// MMA chunk `m` (D columns `32m ..` of the stage), piece `4m + quad` of its four weight rows
/// `w_row0 + j` and of its hidden rows `h_row0 + 8·nt`.
pub(super) struct MmaSyncMainloop<const THREADS: u32, const BLOCK_B: u32, const S: u32, const H: usize> {
    pub(super) ring: BlockRing,
    pub(super) issuer: BlockIssuer<THREADS, BLOCK_B, S, H>,
    /// The ring slot of the next stage to multiply.
    pub(super) slot: u32,
    /// The lane's first weight row in a block tile (`32·warp_v + 4·group`).
    pub(super) w_row0: u32,
    /// The lane's first hidden row in the batch tile (`8·NB·warp_b + group`).
    pub(super) h_row0: u32,
    pub(super) quad: u32,
}

impl<const THREADS: u32, const BLOCK_B: u32, const S: u32, const H: usize> MmaSyncMainloop<THREADS, BLOCK_B, S, H> {
    /// The mainloop of thread `t` in a block whose work is `work`, warps of `8·NB` batch rows, `WB`
    /// of them per vocab slice (warp `t.warp` takes batch rows `8·NB·(warp % WB) ..` and vocab rows
    /// `32·(warp / WB) ..`), over `ring`.
    #[inline(always)]
    pub(super) fn for_thread<const NB: usize, const WB: u32>(
        p: &FusedParams,
        ring: BlockRing,
        work: &BlockWork,
        t: Thread,
    ) -> Self {
        let (warp_b, warp_v) = (t.warp % WB, t.warp / WB);
        MmaSyncMainloop {
            ring,
            issuer: BlockIssuer::new(p, ring, (work.first, work.end), t.tid, work.b_first),
            slot: 0,
            w_row0: warp_v * WARP_TILE_V + ROWS_PER_LANE as u32 * t.group,
            h_row0: warp_b * 8 * NB as u32 + t.group,
            quad: t.quad,
        }
    }

    /// Fills the first `S − 1` stages.
    ///
    /// # Safety
    /// Every thread of the block, once, before [`Self::tile`]; the ring is untouched so far.
    #[inline(always)]
    pub(super) unsafe fn prologue(&mut self, p: &FusedParams) {
        for _ in 0..S - 1 {
            // SAFETY: forwarded contract.
            unsafe { self.issuer.issue(p) };
        }
    }

    /// The logits of the next tile: one block barrier per stage; after it, stage `g` has landed for
    /// every thread and every warp is done with stage `g − 1`, whose slot then receives stage
    /// `g + S − 1` (issued after this warp's MMAs on stage `g`, so they start right after the
    /// barrier). Warps whose batch rows are all past B (`active = false`) skip the MMAs.
    ///
    /// # Safety
    /// Every thread of the block calls it for every tile of the range (block-uniform trip counts).
    #[inline(always)]
    pub(super) unsafe fn tile<const NB: usize>(&mut self, p: &FusedParams, active: bool) -> Accumulators<NB> {
        let mut acc: Accumulators<NB> = [[[0.0; 4]; NB]; M_TILES_PER_WARP];
        let mut k0 = 0;
        while k0 < p.d {
            wait_oldest_stage::<S>();
            // SAFETY: block-uniform loop bounds: every thread reaches every barrier.
            unsafe { _syncthreads() };
            if active {
                // SAFETY: this stage has landed for every thread (wait + barrier); warp-uniform (and
                // so is the element type, a launch parameter).
                unsafe {
                    if p.elem.is_f16() {
                        self.mma_stage::<NB, true>(&mut acc)
                    } else {
                        self.mma_stage::<NB, false>(&mut acc)
                    }
                };
            }
            // Refill the slot of the previous stage (every warp finished it before the barrier
            // above). Issued after this stage's MMAs, so they start right after the barrier.
            // SAFETY: as stated.
            unsafe { self.issuer.issue(p) };
            self.slot = if self.slot + 1 == S { 0 } else { self.slot + 1 };
            k0 += STAGE_K;
        }
        acc
    }

    /// Multiplies one landed stage: two k16 chunks, fragments read as documented above, with the
    /// MMA of the element type (`F16`: IEEE halves, else bf16).
    #[inline(always)]
    unsafe fn mma_stage<const NB: usize, const F16: bool>(&self, acc: &mut Accumulators<NB>) {
        for m in 0..STAGE_K / CHUNK_D {
            let c = 4 * m + self.quad;
            let mut a = [[0u32; 4]; ROWS_PER_LANE];
            let mut h = [[0u32; 4]; NB];
            for (j, x) in a.iter_mut().enumerate() {
                // SAFETY: inside the landed slot.
                *x = unsafe { ld_shared_v4_u32(self.ring.weight(self.slot, self.w_row0 + j as u32, c)) };
            }
            for (nt, x) in h.iter_mut().enumerate() {
                // SAFETY: as above.
                *x = unsafe { ld_shared_v4_u32(self.ring.hidden(self.slot, self.h_row0 + 8 * nt as u32, c)) };
            }
            // SAFETY: warp-uniform (the caller's contract).
            unsafe { mma_chunk::<NB, F16>(acc, &a, &h) };
        }
    }
}

/// One stage of a portable TMA consumer warp (`mma.sync` on `ldmatrix` fragments of the slab at
/// `slab`, read where [`SlabLane`] says): per k16 step, the A fragments of both M tiles, then per
/// pair of N tiles one `ldmatrix` of B and its 4 MMAs, with the MMA of element type `elem` (one
/// uniform branch per stage).
///
/// # Safety
/// The whole warp, converged; the slab holds a landed stage in the layout [`SlabLane`] states (the
/// lane's `f`); `NB` is even.
#[inline(always)]
pub(super) unsafe fn mma_stage_slab<const NB: usize>(
    slab: u32,
    f: &SlabLane,
    acc: &mut Accumulators<NB>,
    elem: ElementType,
) {
    #[inline(always)]
    unsafe fn stage<const NB: usize, const F16: bool>(slab: u32, f: &SlabLane, acc: &mut Accumulators<NB>) {
        const { assert!(NB % 2 == 0, "N tiles are read in pairs") };
        for kk in 0..STAGE_K / 16 {
            let mut a = [[0u32; 4]; M_TILES_PER_WARP];
            for (mt, a) in a.iter_mut().enumerate() {
                // SAFETY: inside the landed slab (the caller's contract); converged warp.
                *a = unsafe { ldmatrix_sync_aligned_m8n8_x4_shared_b16(slab + f.a_at(mt, kk)) };
            }
            for j in 0..NB / 2 {
                // SAFETY: as above.
                let b = unsafe { ldmatrix_sync_aligned_m8n8_x4_shared_b16(slab + f.b_at(j as u32, kk)) };
                for (mt, a) in a.iter().enumerate() {
                    // SAFETY: converged warp (the caller's contract).
                    unsafe {
                        mma::<F16>(&mut acc[mt][2 * j], *a, [b[0], b[1]]);
                        mma::<F16>(&mut acc[mt][2 * j + 1], *a, [b[2], b[3]]);
                    }
                }
            }
        }
    }
    // SAFETY: forwarded contract; `elem` is a launch parameter (warp-uniform).
    unsafe { if elem.is_f16() { stage::<NB, true>(slab, f, acc) } else { stage::<NB, false>(slab, f, acc) } }
}

/// A batch width `N` of the weight-as-A `m64nNk16` MMA and its accumulator array.
pub(super) trait WgmmaShape {
    /// Batch rows per consumer warpgroup.
    const N: u32;
    /// `N / 2` f32 accumulators per thread.
    type Acc: Copy;
    /// Zeroed accumulators.
    const ZERO: Self::Acc;
    /// One `wgmma.mma_async` of this shape on IEEE halves (`F16`) or bf16.
    ///
    /// # Safety
    /// As the wrapped instruction.
    unsafe fn mma<const F16: bool>(acc: &mut Self::Acc, desc_a: u64, desc_b: u64);
    /// Accumulator element `i` (compile-time index after unrolling).
    fn at(acc: &Self::Acc, i: usize) -> f32;
    /// Sets accumulator element `i` (compile-time index after unrolling).
    fn set(acc: &mut Self::Acc, i: usize, x: f32);
}

macro_rules! wgmma_shape {
    ($name:ident, $n:literal, $bf16:ident, $f16:ident) => {
        #[doc = concat!("`m64n", stringify!($n), "k16`.")]
        pub(super) struct $name;
        impl WgmmaShape for $name {
            const N: u32 = $n;
            type Acc = [f32; $n / 2];
            const ZERO: Self::Acc = [0.0; $n / 2];
            #[inline(always)]
            unsafe fn mma<const F16: bool>(acc: &mut Self::Acc, desc_a: u64, desc_b: u64) {
                // SAFETY: forwarded contract.
                unsafe { if F16 { $f16(acc, desc_a, desc_b) } else { $bf16(acc, desc_a, desc_b) } }
            }
            #[inline(always)]
            fn at(acc: &Self::Acc, i: usize) -> f32 {
                acc[i]
            }
            #[inline(always)]
            fn set(acc: &mut Self::Acc, i: usize, x: f32) {
                acc[i] = x;
            }
        }
    };
}
wgmma_shape!(
    N16,
    16,
    wgmma_mma_async_sync_aligned_m64n16k16_f32_bf16_bf16,
    wgmma_mma_async_sync_aligned_m64n16k16_f32_f16_f16
);
wgmma_shape!(
    N32,
    32,
    wgmma_mma_async_sync_aligned_m64n32k16_f32_bf16_bf16,
    wgmma_mma_async_sync_aligned_m64n32k16_f32_f16_f16
);
wgmma_shape!(
    N64,
    64,
    wgmma_mma_async_sync_aligned_m64n64k16_f32_bf16_bf16,
    wgmma_mma_async_sync_aligned_m64n64k16_f32_f16_f16
);

/// Shared-memory matrix descriptor of a K-major operand in the 128-byte swizzle layout: start
/// address `addr` (16-byte units, bits 0–13), leading byte offset 1 (unused by this layout, bits
/// 16–29), stride byte offset 1024 bytes between 8-row groups (bits 32–45), base offset 0 (the
/// slabs are 1024-byte aligned), layout type 1 = 128-byte swizzle (bits 62–63).
#[inline(always)]
fn smem_descriptor(addr: u32) -> u64 {
    ((addr as u64 >> 4) & 0x3FFF) | (1u64 << 16) | ((1024u64 >> 4) << 32) | (1u64 << 62)
}

/// The 8 `wgmma` of one weight-as-A stage (4 k16 steps × the two 64-row halves of a 128-row weight
/// tile) on the weight rows at `weights` and the `N` hidden rows at `hidden` of a slab, into `acc`,
/// with the MMA of element type `elem` (one uniform branch per stage); the caller fences before and
/// commits after.
///
/// # Safety
/// The whole warpgroup runs this converged, after `wgmma.fence`; the slab holds a landed stage, made
/// visible to the async proxy, in the layout the descriptors describe; `weights` and `hidden` are
/// 1024-byte aligned (whole 8-row swizzle atoms).
#[inline(always)]
pub(super) unsafe fn mma_stage_weight_a<T: WgmmaShape>(
    weights: u32,
    hidden: u32,
    acc: &mut [T::Acc; 2],
    elem: ElementType,
) {
    #[inline(always)]
    unsafe fn stage<T: WgmmaShape, const F16: bool>(weights: u32, hidden: u32, acc: &mut [T::Acc; 2]) {
        for kk in 0..STAGE_K / 16 {
            let b_desc = smem_descriptor(hidden + 32 * kk);
            for (h, a) in acc.iter_mut().enumerate() {
                let a_desc = smem_descriptor(weights + STAGE_ROW_BYTES * 64 * h as u32 + 32 * kk);
                // SAFETY: forwarded contract.
                unsafe { T::mma::<F16>(a, a_desc, b_desc) };
            }
        }
    }
    // SAFETY: forwarded contract; `elem` is a launch parameter (warpgroup-uniform).
    unsafe {
        if elem.is_f16() { stage::<T, true>(weights, hidden, acc) } else { stage::<T, false>(weights, hidden, acc) }
    }
}

/// The 4 `wgmma.m64n256k16` of one hidden-as-A stage (one per k16 step): A = the 64 hidden rows at
/// `hidden`, B = the 256 weight rows at `weights`, into `acc`, with the MMA of element type `elem`;
/// the caller fences before and commits after.
///
/// # Safety
/// As [`mma_stage_weight_a`].
#[inline(always)]
pub(super) unsafe fn mma_stage_hidden_a(hidden: u32, weights: u32, acc: &mut [f32; 128], elem: ElementType) {
    #[inline(always)]
    unsafe fn stage<const F16: bool>(hidden: u32, weights: u32, acc: &mut [f32; 128]) {
        for kk in 0..STAGE_K / 16 {
            let (a, b) = (smem_descriptor(hidden + 32 * kk), smem_descriptor(weights + 32 * kk));
            // SAFETY: forwarded contract.
            unsafe {
                if F16 {
                    wgmma_mma_async_sync_aligned_m64n256k16_f32_f16_f16(acc, a, b)
                } else {
                    wgmma_mma_async_sync_aligned_m64n256k16_f32_bf16_bf16(acc, a, b)
                }
            };
        }
    }
    // SAFETY: forwarded contract; `elem` is a launch parameter (warpgroup-uniform): one branch per
    // stage, not per k16 step.
    unsafe { if elem.is_f16() { stage::<true>(hidden, weights, acc) } else { stage::<false>(hidden, weights, acc) } }
}

/// What a consumer (a `wgmma` warpgroup, or the 4 `mma.sync` warps of a portable TMA kernel's
/// consumer) does with a stage and with a finished tile.
pub(super) trait Consumer {
    /// The consumer thread's accumulators for one tile.
    type Acc: Copy;
    /// Zeroed accumulators.
    const ZERO: Self::Acc;
    /// Whether it runs the head and tail pieces of stage-balanced ranges ([`Self::hand_off`],
    /// [`Self::resume`]); a consumer that does not is only given whole tiles.
    const HANDS_OFF: bool;
    /// Whether its MMAs are asynchronous (`wgmma`: a stage's slot is read until its group is
    /// complete, so [`consume`] releases the previous stage's slot) or synchronous (`mma.sync` on
    /// `ldmatrix` fragments: the slot is free once every lane's fragments are in registers, so
    /// [`consume`] releases the stage's own slot).
    const ASYNC: bool;
    /// The stage's MMAs on the slab in `slot` into `acc`.
    ///
    /// # Safety
    /// The whole consumer, converged (a `wgmma` warpgroup after `wgmma.fence`; a synchronous
    /// consumer's warps each converged); the slot holds a landed stage.
    unsafe fn mma(&self, slot: u32, acc: &mut Self::Acc);
    /// Issues the stage's MMAs ([`Self::mma`]); asynchronous ones (the default) fenced before and
    /// committed as one `wgmma` group after.
    ///
    /// # Safety
    /// As [`Self::mma`], without the fence.
    #[inline(always)]
    unsafe fn issue(&self, slot: u32, acc: &mut Self::Acc) {
        // SAFETY: forwarded contract.
        unsafe {
            wgmma_fence_sync_aligned();
            self.mma(slot, acc);
            wgmma_commit_group_sync_aligned();
        }
    }
    /// Waits until at most `N` of the consumer's issued MMA groups are pending (the default:
    /// `wgmma.wait_group N`); a synchronous consumer's MMAs are done when issued: it only
    /// reconverges the warp, whose lanes' shared-memory reads are then complete.
    ///
    /// # Safety
    /// The whole consumer, converged.
    #[inline(always)]
    unsafe fn wait_mmas<const N: u32>() {
        // SAFETY: forwarded contract.
        unsafe { wgmma_wait_group_sync_aligned::<N>() };
    }
    /// Transform + noise + argmax of tile `tile` from its final accumulators.
    fn epilogue(&mut self, tile: u32, acc: &Self::Acc);
    /// Hands the accumulators of the block's head piece to the block of the range below
    /// (`super::handoff`).
    ///
    /// # Safety
    /// The whole consumer, once, after the head's MMAs are complete; a launch with handoff buffers.
    unsafe fn hand_off(&self, acc: &Self::Acc);
    /// The accumulators the block of the range above handed over for this block's tail piece.
    ///
    /// # Safety
    /// The whole consumer, once, before the tail's MMAs; a launch with handoff buffers.
    unsafe fn resume(&self) -> Self::Acc;
}

/// One consumer's pass over the pipeline's range: its pieces
/// ([`RangeStages::piece`](crate::schedule::RangeStages::piece): head, whole tiles, tail)
/// `c, c + 2, …` taking turns with the other consumer (`shared = false`), or
/// every piece when all consumers share each stage. Per stage it waits for `full` and issues the
/// consumer's `mma`: asynchronous (`C::ASYNC`, `wgmma`) as one group, releasing the previous stage's
/// slot once that group is complete; synchronous (`mma.sync`) releasing the stage's own slot right
/// after. After a piece's last stage (its MMAs drained) it runs the consumer's `epilogue` — or, for
/// a head, hands the accumulators over. A tail starts from the accumulators handed over instead of
/// zeros. Each of the consumer's 4 warps arrives on `empty` and `turn` (lane 0), so a synchronous
/// consumer's warps need not run in step.
///
/// # Safety
/// The 128 threads of consumer `c` call it (a `wgmma` warpgroup converged; the 4 warps of a
/// synchronous consumer each converged), with the barriers of [`Pipeline::setup`] and a producer
/// filling stage `i` of the block into slot `i % S`; the range has a head or a tail only if
/// `C::HANDS_OFF` (else it is read as its whole tiles).
#[inline(always)]
pub(super) unsafe fn consume<C: Consumer, const S: u32>(
    consumer: &mut C,
    Pipeline { bars, range, .. }: Pipeline,
    c: u32,
    shared: bool,
    tid: u32,
) {
    let lane = tid % 32;
    // Taking turns: every other piece; sharing: every piece.
    let (mut j, step) = if shared { (0, 1) } else { (c, 2) };
    let mut n = 0; // this consumer's piece count
    // A consumer that never hands off runs whole tiles only: the pieces are then the tiles, known so
    // at compile time (no piece arithmetic, no handoff code in its registers).
    let pieces = if C::HANDS_OFF { range.pieces() } else { range.end - range.first };
    while j < pieces {
        // A phase-parity wait is only sound while the barrier is at most one phase past the awaited
        // one: wait until the other consumer has seen its piece's stages land (so the fills before
        // ours are complete). Consumer 0's first piece needs no turn. Every warp of the other
        // consumer arrives (the barrier counts 4): the turn's next phase then needs each of them at
        // its next piece, which needs this turn of every warp here — this warp's included — so no
        // warp can find the barrier two phases on. (With one arrival per consumer, its first warp
        // could hand over while this consumer's last warp was still in the previous tile's epilogue;
        // with one stage per tile and epilogues that take different times per warp, the other
        // consumer then completed a second phase and that warp waited for a third: a deadlock,
        // docs/findings/25.) Sharing, each consumer waits for every stage in order, which keeps it
        // so by itself.
        if !shared && (c == 1 || n > 0) {
            // SAFETY: warpgroup-uniform; an initialized barrier.
            unsafe { wait(bars.turn(c), (n + c + 1) % 2) };
        }
        let (piece, mut stage) = if C::HANDS_OFF {
            (range.piece(j), range.first_stage(j))
        } else {
            (Piece { tile: range.first + j, k0: 0, k1: range.n_k, kind: PieceKind::Whole }, j * range.n_k)
        };
        let tail = C::HANDS_OFF && piece.kind == PieceKind::Tail;
        // SAFETY: the whole warpgroup, once for the tail (the last piece), before its MMAs.
        let mut acc = if tail { unsafe { consumer.resume() } } else { C::ZERO };
        let mut held = 0; // slot of the previous stage, still read by its MMAs
        for k in piece.k0..piece.k1 {
            let slot = stage % S;
            // SAFETY: consumer-uniform control flow: the whole consumer runs this loop converged.
            // The barrier orders the landed stage (fenced into the async proxy, or written by it)
            // before the MMAs that read it.
            unsafe {
                wait(bars.full(slot), (stage / S) % 2);
                if !shared && k + 1 == piece.k1 && lane == 0 {
                    mbarrier_arrive_shared_cta_b64(bars.turn(1 - c));
                }
                consumer.issue(slot, &mut acc);
                // Asynchronous: the previous stage's group is done, this one may still run.
                // Synchronous: this stage's MMAs are done too.
                C::wait_mmas::<1>();
                let (done, release) = if C::ASYNC { (held, k > piece.k0) } else { (slot, true) };
                if release && lane == 0 {
                    mbarrier_arrive_shared_cta_b64(bars.empty(done));
                }
            }
            held = slot;
            stage += 1;
        }
        // SAFETY: the whole consumer; the accumulators are final after this and the last slot is
        // no longer read (a synchronous consumer released it already).
        unsafe {
            C::wait_mmas::<0>();
            if C::ASYNC && lane == 0 {
                mbarrier_arrive_shared_cta_b64(bars.empty(held));
            }
        }
        if C::HANDS_OFF && piece.kind == PieceKind::Head {
            // SAFETY: the whole warpgroup, once (the head is the first piece), its MMAs complete.
            unsafe { consumer.hand_off(&acc) };
        } else {
            consumer.epilogue(piece.tile, &acc);
        }
        j += step;
        n += 1;
    }
}
