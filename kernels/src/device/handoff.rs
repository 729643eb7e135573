//! The hand-off of a cut tile's accumulators between two blocks: with stage-balanced vocab ranges
//! ([`RangeStages::balanced`](crate::schedule::RangeStages::balanced)) the block of range `r` runs
//! the first D steps of the tile its range shares with range `r − 1` first thing (its head), stores
//! its consumers' f32 accumulators in global memory and publishes them; the block of range `r − 1`
//! waits for them at its very end, loads them and runs the tile's last D steps on top (its tail),
//! so the tile's logits are the same `wgmma` sequence in D order as one block's.
//!
//! # Layout and protocol
//! Slot `2r + c` of [`FusedParams::handoff`] (boundary `r`, consumer slot `c`) holds `128 · acc`
//! floats: float `i` of consumer thread `t` (0..128) at `4·((i / 4)·128 + t) + i % 4`, so a warp's
//! 16-byte stores and loads are contiguous. Its counter [`FusedParams::handoff_flags`]`[2r + c]`:
//! - writer (each of the 128 threads): stores, `fence.acq_rel.gpu`, `atom.add 1`;
//! - reader (each of the 128 threads of the consumer that runs the tail): spins with
//!   `ld.acquire.gpu` until the count reaches 128, loads with `ld.global.cg` (L2: the writer is
//!   another multiprocessor), then `atom.add 1`; the thread that brings it to 256 resets it to 0,
//!   so every counter is zero again when the launch completes (no reader passes 128 before every
//!   writer is done, and nothing touches the slot after its 256th arrival).
//!
//! # Progress
//! The reader waits for a block with a higher index that runs its head before anything else; the
//! host balances only one-batch-tile grids of at most one block per multiprocessor
//! ([`FusedVariant::balances_stages`](crate::config::FusedVariant::balances_stages)), all resident
//! together on an idle GPU; with fewer multiprocessors free, blocks that wait only for resident
//! blocks' heads finish and free theirs for the next in launch order.

use super::ptx::{
    atom_global_add_u32, atom_global_and_b32, fence_acq_rel_gpu, ld_acquire_gpu_global_u32, ld_global_cg_v4_u32,
};
use crate::params::FusedParams;

/// Threads of one consumer warpgroup: writers, and readers, of one slot.
const SLOT_THREADS: u32 = 128;

/// One consumer thread's view of one handoff slot.
#[derive(Clone, Copy)]
pub(super) struct Handoff {
    /// The thread's first float: slot base + 4·t.
    at: *mut f32,
    /// The slot's counter.
    flag: *mut u32,
}

impl Handoff {
    /// Thread `t` (0..128) of consumer slot `c` at range boundary `boundary` (the head's range), with
    /// `acc` floats per thread.
    ///
    /// # Safety
    /// `p.handoff` and `p.handoff_flags` are this launch's buffers (non-null), `boundary < n_vranges`,
    /// `c < 2`, `acc` the variant's accumulators per thread (a multiple of 4).
    #[inline(always)]
    pub(super) unsafe fn at(p: &FusedParams, boundary: u32, c: u32, t: u32, acc: u32) -> Self {
        let slot = (2 * boundary + c) as usize;
        // SAFETY: inside the slot's `128 · acc` floats and the `2 · n_vranges` counters (contract).
        unsafe {
            Handoff {
                at: p.handoff.add(slot * (SLOT_THREADS * acc) as usize + 4 * t as usize),
                flag: p.handoff_flags.add(slot),
            }
        }
    }

    /// Stores floats `4q .. 4q + 4` of the thread's accumulators.
    ///
    /// # Safety
    /// `4q + 4 ≤ acc`; the writer's side of the protocol (before [`Self::publish`]).
    #[inline(always)]
    unsafe fn store(self, q: u32, x: [f32; 4]) {
        // SAFETY: inside the slot (contract); 16-byte aligned (allocation and layout).
        unsafe { (self.at.add((4 * SLOT_THREADS * q) as usize) as *mut [f32; 4]).write(x) };
    }

    /// Makes this thread's stores visible device-wide, then counts it.
    ///
    /// # Safety
    /// Once per writer thread, after its stores.
    #[inline(always)]
    unsafe fn publish(self) {
        fence_acq_rel_gpu();
        // SAFETY: the slot's counter (contract).
        unsafe { atom_global_add_u32(self.flag, 1) };
    }

    /// Waits until every writer has published.
    ///
    /// # Safety
    /// A reader thread, before its loads; the slot's writers run (see the module on progress).
    #[inline(always)]
    unsafe fn wait(self) {
        // SAFETY: the slot's counter (contract).
        while unsafe { ld_acquire_gpu_global_u32(self.flag) } < SLOT_THREADS {}
    }

    /// Loads floats `4q .. 4q + 4` the writer thread of the same `t` stored.
    ///
    /// # Safety
    /// After [`Self::wait`]; `4q + 4 ≤ acc`.
    #[inline(always)]
    unsafe fn load(self, q: u32) -> [f32; 4] {
        // SAFETY: inside the slot, 16-byte aligned (contract).
        let w = unsafe { ld_global_cg_v4_u32(self.at.add((4 * SLOT_THREADS * q) as usize) as *const u32) };
        w.map(f32::from_bits)
    }

    /// The writer's side: stores the thread's `groups` float groups (`group(q)`: floats `4q .. 4q + 4`),
    /// then publishes them.
    ///
    /// # Safety
    /// Once per writer thread; `4·groups ≤ acc`.
    #[inline(always)]
    pub(super) unsafe fn hand_over(self, groups: u32, group: impl Fn(u32) -> [f32; 4]) {
        for q in 0..groups {
            // SAFETY: 4q + 4 ≤ acc (contract), before the publish.
            unsafe { self.store(q, group(q)) };
        }
        // SAFETY: once, after this thread's stores.
        unsafe { self.publish() };
    }

    /// The reader's side: waits for the writers, hands the thread's `groups` float groups to
    /// `take(q, floats 4q .. 4q + 4)`, then counts this reader done.
    ///
    /// # Safety
    /// Once per reader thread; `4·groups ≤ acc`; the slot's writers run (see the module on progress).
    #[inline(always)]
    pub(super) unsafe fn take_over(self, groups: u32, mut take: impl FnMut(u32, [f32; 4])) {
        // SAFETY: forwarded contract.
        unsafe { self.wait() };
        for q in 0..groups {
            // SAFETY: after the wait; 4q + 4 ≤ acc.
            take(q, unsafe { self.load(q) });
        }
        // SAFETY: once, after this thread's loads.
        unsafe { self.release() };
    }

    /// Counts this reader done; the last of the 128 resets the counter to zero.
    ///
    /// # Safety
    /// Once per reader thread, after its loads.
    #[inline(always)]
    unsafe fn release(self) {
        // SAFETY: the slot's counter (contract).
        unsafe {
            if atom_global_add_u32(self.flag, 1) + 1 == 2 * SLOT_THREADS {
                atom_global_and_b32(self.flag, 0);
            }
        }
    }
}
