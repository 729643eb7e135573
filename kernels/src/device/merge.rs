//! The block merge: every lane's per-row candidates → one candidate per (batch row, vocab range) in
//! `FusedParams::candidates`.
//!
//! A kernel's lanes hold candidates for some of the block's batch rows; several *contributors*
//! (warps or warpgroups that scored other vocab rows of the same batch rows) hold candidates for the
//! same row. In two steps:
//! 1. the lanes that share a (contributor, row) merge by warp shuffles (which lanes those are is a
//!    property of the MMA fragment, so the fragment adapters call [`put_merged`] with their shuffle
//!    masks), and one of them stores the result in the merge area at `[contributor][row]`;
//! 2. after a block barrier, thread `t` takes block rows `t, t + threads, …`, merges each over the
//!    contributors and writes it to `candidates[b, vrange]` ([`finish`]). The entry point then
//!    composes the reduction: in the plain kernels the last block of the batch tile reduces the
//!    tile's candidates to tokens ([`super::reduce::reduce_if_last`]; the log-probability kernels'
//!    rows are reduced by a kernel of their own, `reduce_rows`).
//!
//! The merge is the candidate's associative, commutative maximum under a total order, so any
//! grouping and order gives the same winner.

use core::arch::nvptx::_syncthreads;

use super::collective::{mass_of_words, mass_words, merge_butterfly, merge_mass, merge_mass_butterfly};
use super::ptx::{ld_shared_v2_u32, ld_shared_v4_u32, mov_u32_dynamic_smem, st_shared_v2_u32, st_shared_v4_u32};
use super::schedule::BlockWork;
use crate::candidate::Candidate;
use crate::config::CONSUMER_THREADS;
use crate::params::{FusedParams, RowMass};

/// The merge area at the start of the dynamic shared memory (`config::FusedVariant::merge_bytes`):
/// `contributors × block_rows` candidates of 8 bytes, then (log-probability kernels) as many
/// [`RowMass`]es of 16 bytes.
#[derive(Clone, Copy)]
pub(super) struct MergeArea {
    base: u32,
    block_rows: u32,
    contributors: u32,
}

impl MergeArea {
    /// The block's batch rows (what the reduction after the merge reads).
    #[inline(always)]
    pub(super) fn block_rows(&self) -> u32 {
        self.block_rows
    }

    /// The area of a block of `block_rows` batch rows and `contributors` contributors per row.
    #[inline(always)]
    pub(super) fn new(block_rows: u32, contributors: u32) -> Self {
        MergeArea { base: mov_u32_dynamic_smem(), block_rows, contributors }
    }

    #[inline(always)]
    fn slot(self, contributor: u32, row: u32) -> u32 {
        self.base + 8 * (contributor * self.block_rows + row)
    }

    /// The [`RowMass`] slot (16-byte aligned: `block_rows` is a multiple of 16).
    #[inline(always)]
    fn mass_slot(self, contributor: u32, row: u32) -> u32 {
        self.base + 8 * self.contributors * self.block_rows + 16 * (contributor * self.block_rows + row)
    }
}

/// The lanes' candidates in shared memory (the portable TMA kernels of 64 batch rows a warp,
/// [`FusedVariant::lane_cands`](crate::config::FusedVariant::lane_cands)): candidate `i` of consumer
/// thread `t` at `8·(i·CONSUMER_THREADS + t)` from `offset` bytes into the dynamic shared memory, so
/// a warp's 32 lanes touch 256 consecutive bytes. Beside 64 accumulators a lane, 16 candidates in
/// registers (32 words) left the mainloop too few registers at the 168 a 288-thread block gets: it
/// reloaded spilled words and recomputed fragment addresses at the top of every stage. Each thread
/// reads and writes only its own candidates: no barrier.
#[derive(Clone, Copy)]
pub(super) struct SharedCands {
    at: u32,
}

impl SharedCands {
    /// Consumer thread `consumer_tid`'s `n` candidates from `offset` bytes into the dynamic shared
    /// memory, emptied.
    ///
    /// # Safety
    /// The launch reserved `8·CONSUMER_THREADS·n` bytes there
    /// ([`FusedVariant::lane_state_bytes`](crate::config::FusedVariant::lane_state_bytes));
    /// `consumer_tid < CONSUMER_THREADS`.
    #[inline(always)]
    pub(super) unsafe fn for_lane(offset: u32, consumer_tid: u32, n: u32) -> Self {
        let cands = SharedCands { at: mov_u32_dynamic_smem() + offset + 8 * consumer_tid };
        for i in 0..n {
            // SAFETY: i < n (the caller's contract).
            unsafe { cands.set(i, Candidate::EMPTY) };
        }
        cands
    }

    #[inline(always)]
    fn slot(self, i: u32) -> u32 {
        self.at + 8 * CONSUMER_THREADS * i
    }

    /// Candidate `i`.
    ///
    /// # Safety
    /// `i < n` of [`SharedCands::for_lane`], whose contract holds.
    #[inline(always)]
    pub(super) unsafe fn get(self, i: u32) -> Candidate {
        // SAFETY: inside the candidates' area (the caller's contract).
        let [score, index] = unsafe { ld_shared_v2_u32(self.slot(i)) };
        Candidate { score: f32::from_bits(score), index }
    }

    /// Stores candidate `i`.
    ///
    /// # Safety
    /// As [`SharedCands::get`].
    #[inline(always)]
    pub(super) unsafe fn set(self, i: u32, c: Candidate) {
        // SAFETY: inside the candidates' area (the caller's contract).
        unsafe { st_shared_v2_u32(self.slot(i), [c.score.to_bits(), c.index]) };
    }
}

/// The lanes' row masses in shared memory (the `wgmma` log-probability and truncation kernels and
/// the portable TMA log-probability kernels of 64 batch rows a warp,
/// [`FusedVariant::lane_state_bytes`](crate::config::FusedVariant::lane_state_bytes)): mass `i` of
/// consumer thread `t` at `16·(i·CONSUMER_THREADS + t)` after the merge area, so the 32 lanes of a
/// warp touch 512 consecutive bytes (no bank conflict beyond the four phases of a 16-byte access).
/// Each thread reads and writes only its own masses: no barrier.
#[derive(Clone, Copy)]
pub(super) struct SharedMasses {
    at: u32,
}

impl SharedMasses {
    /// Consumer thread `consumer_tid`'s masses, after a merge area of `merge_bytes` bytes.
    ///
    /// # Safety
    /// The launch reserved the masses' area after `merge_bytes` (`FusedVariant::lane_state_bytes`)
    /// when [`SharedMasses::get`] or [`SharedMasses::set`] is called; `consumer_tid < CONSUMER_THREADS`.
    #[inline(always)]
    unsafe fn new(merge_bytes: u32, consumer_tid: u32) -> Self {
        SharedMasses { at: mov_u32_dynamic_smem() + merge_bytes + 16 * consumer_tid }
    }

    #[inline(always)]
    fn slot(self, i: u32) -> u32 {
        self.at + 16 * CONSUMER_THREADS * i
    }

    /// Mass `i`.
    ///
    /// # Safety
    /// `i < lane_masses` of the variant, and [`SharedMasses::new`]'s contract holds.
    #[inline(always)]
    pub(super) unsafe fn get(self, i: u32) -> RowMass {
        // SAFETY: inside the masses' area (the caller's contract).
        mass_of_words(unsafe { ld_shared_v4_u32(self.slot(i)) })
    }

    /// Stores mass `i`.
    ///
    /// # Safety
    /// As [`SharedMasses::get`].
    #[inline(always)]
    pub(super) unsafe fn set(self, i: u32, m: RowMass) {
        // SAFETY: inside the masses' area (the caller's contract).
        unsafe { st_shared_v4_u32(self.slot(i), mass_words(m)) };
    }

    /// Consumer thread `consumer_tid`'s `n` masses after a merge area of `merge_bytes` bytes, emptied
    /// in the log-probability kernels (`LP`; the others never touch them).
    ///
    /// # Safety
    /// As [`SharedMasses::new`], and with `LP` as [`SharedMasses::get`] for every `i < n`.
    #[inline(always)]
    pub(super) unsafe fn for_lane<const LP: bool>(merge_bytes: u32, consumer_tid: u32, n: u32) -> Self {
        // SAFETY: forwarded contract.
        let masses = unsafe { Self::new(merge_bytes, consumer_tid) };
        if LP {
            for i in 0..n {
                // SAFETY: forwarded contract (i < n).
                unsafe { masses.set(i, RowMass::EMPTY) };
            }
        }
        masses
    }
}

/// Step 1: merges `cand` over the lanes `lane ^ m` (`m` in `masks`, the lanes that hold the same
/// batch row of the same contributor), and the `leader` among them stores it at
/// `[contributor][row]`.
///
/// # Safety
/// All 32 lanes of the warp call it together with the same `masks`; `contributor` and `row` are
/// inside the area the variant reserves.
#[inline(always)]
pub(super) unsafe fn put_merged<const K: usize, const LP: bool>(
    area: MergeArea,
    contributor: u32,
    row: u32,
    (cand, mass): (Candidate, impl FnOnce() -> RowMass),
    masks: [u32; K],
    leader: bool,
) {
    // SAFETY: forwarded contract.
    let cand = unsafe { merge_butterfly(cand, masks) };
    if leader {
        // SAFETY: inside the merge area (the caller's contract).
        unsafe { st_shared_v2_u32(area.slot(contributor, row), [cand.score.to_bits(), cand.index]) };
    }
    if LP {
        // SAFETY: forwarded contract.
        unsafe { put_merged_mass(area, contributor, row, mass(), masks, leader) };
    }
}

/// Step 1 of the log-mass: merges `mass` over the lanes `lane ^ m` and the `leader` stores it at
/// `[contributor][row]` of the masses.
///
/// # Safety
/// As [`put_merged`], in a log-probability kernel's merge area (which holds the masses).
#[inline(always)]
pub(super) unsafe fn put_merged_mass<const K: usize>(
    area: MergeArea,
    contributor: u32,
    row: u32,
    mass: RowMass,
    masks: [u32; K],
    leader: bool,
) {
    // SAFETY: forwarded contract (all lanes, the same masks).
    let mass = unsafe { merge_mass_butterfly(mass, masks) };
    if leader {
        // SAFETY: inside the merge area, which holds the masses in the log-probability kernels.
        unsafe { st_shared_v4_u32(area.mass_slot(contributor, row), mass_words(mass)) };
    }
}

/// Step 2: a block barrier, then thread `tid` of `threads` merges block rows `tid, tid + threads, …`
/// (below B) over `contributors` and writes them to `candidates[b, vrange]` (with `LP`, their masses
/// to `masses[b, vrange]`). The block's candidates are then merged; the entry point composes what
/// follows (`fused::finish_block`: the reduction of the plain kernels).
///
/// # Safety
/// Every thread of the block calls it once, after its lanes' [`put_merged`] calls; every
/// `[contributor][row]` slot with `contributor < contributors` and `row < block_rows` was stored.
#[inline(always)]
pub(super) unsafe fn finish<const LP: bool>(area: MergeArea, p: &FusedParams, tid: u32, threads: u32, work: BlockWork) {
    let contributors = area.contributors;
    // SAFETY: every thread of the block reaches it once (the caller's contract).
    unsafe { _syncthreads() };
    let mut r = tid;
    while r < area.block_rows {
        let b = work.b_first + r;
        if b < p.b {
            let mut cand = Candidate::EMPTY;
            for c in 0..contributors {
                // SAFETY: stored in step 1, visible after the barrier.
                let [s, i] = unsafe { ld_shared_v2_u32(area.slot(c, r)) };
                cand = cand.merge(Candidate { score: f32::from_bits(s), index: i });
            }
            let at = b as usize * p.n_vranges as usize + work.vrange as usize;
            // SAFETY: b < B, vrange < n_vranges: inside the [B, n_vranges] candidate buffer.
            unsafe { *p.candidates.add(at) = cand };
            if LP {
                let mut mass = RowMass::EMPTY;
                for c in 0..contributors {
                    // SAFETY: stored in step 1 (the log-probability kernels), visible after the barrier.
                    let m = mass_of_words(unsafe { ld_shared_v4_u32(area.mass_slot(c, r)) });
                    mass = merge_mass(mass, m);
                }
                // SAFETY: the log-probability kernels' `masses` holds [B, n_vranges] entries.
                unsafe { *p.masses.add(at) = mass };
            }
        }
        r += threads;
    }
}
