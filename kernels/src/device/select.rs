//! The block-wide selection primitives of the truncation step and its fallback: the entries area
//! at the start of dynamic shared memory (processed logits with their vocab indices) and its
//! bitonic sort ([`sort_entries`]), and, over a materialized row, radix selects over the f32 order
//! ([`count_select`], [`select_top`]) with the per-thread row walk ([`for_each`]). Both users run
//! blocks of [`T`] threads.

use core::arch::nvptx::_syncthreads;

use super::collective::block_sum_u64;
use super::ptx::{
    atom_shared_add_u32, ld_shared_u32, ld_shared_u64, ld_shared_v2_u32, mov_u32_dynamic_smem, red_shared_add_u32,
    shfl_sync_bfly_b32, st_shared_u32, st_shared_u64, st_shared_v2_u32,
};
use crate::config::{FALLBACK_SAMPLE_SMEM, FALLBACK_SAMPLE_THREADS, TRUNCATE_THREADS};
use crate::params::MAX_TOP_N;

/// Warps of a [`truncate_rows`] block.

/// The block size of both users: the fallback sampler's, equal to the truncation step's.
pub(super) const T: u32 = FALLBACK_SAMPLE_THREADS;
/// Warps of a [`T`]-thread block.
pub(super) const WARPS: u32 = T / 32;
/// Warps of a `truncate_rows` block.
pub(super) const WARPS_T: u32 = TRUNCATE_THREADS / 32;

/// Bytes of one collected entry in shared memory: its value's bits, its index.
pub(super) const ENTRY_BYTES: u32 = 8;

/// A collected entry: a processed logit and its global vocab index.
pub(super) type Entry = (f32, u32);

/// Past the collected entries (ranks below every real one: they are above `β ≥ −∞`).
pub(super) const NO_ENTRY: Entry = (f32::NEG_INFINITY, u32::MAX);

/// Whether `a` ranks above `b`: larger value, ties to the lower index (the order of the top lists,
/// `crate::truncate`'s `above`; the entries are never NaN).
#[inline(always)]
pub(super) fn ranks_above(a: Entry, b: Entry) -> bool {
    (a.0 > b.0) | ((a.0 == b.0) & (a.1 < b.1))
}

/// Entry `i` of the entries area.
///
/// # Safety
/// `i < TRUNCATE_CAPACITY`; the block's dynamic shared memory holds [`TRUNCATE_SMEM`] bytes.
#[inline(always)]
pub(super) unsafe fn load_entry(i: u32) -> Entry {
    // SAFETY: inside the entries area (the caller's contract), 8-byte aligned.
    let [z, index] = unsafe { ld_shared_v2_u32(mov_u32_dynamic_smem() + ENTRY_BYTES * i) };
    (f32::from_bits(z), index)
}

/// Stores entry `i` of the entries area.
///
/// # Safety
/// As [`load_entry`].
#[inline(always)]
pub(super) unsafe fn store_entry(i: u32, e: Entry) {
    // SAFETY: as in `load_entry`.
    unsafe { st_shared_v2_u32(mov_u32_dynamic_smem() + ENTRY_BYTES * i, [e.0.to_bits(), e.1]) };
}

/// One compare-exchange of a bitonic merge of runs of `size` in registers: this lane's entry `x`
/// at position `i` against the one at `i ^ s` (`s < 32`), held by lane `lane ^ s`. A run whose
/// `size` bit of the position is 0 is sorted descending (the one above first), else ascending.
///
/// # Safety
/// All 32 lanes call it together with the same `s`.
#[inline(always)]
pub(super) unsafe fn exchange_lanes(x: Entry, i: u32, s: u32, size: u32) -> Entry {
    // SAFETY: all 32 lanes (the caller's contract).
    let (z, index) = unsafe { (shfl_sync_bfly_b32(x.0.to_bits(), s), shfl_sync_bfly_b32(x.1, s)) };
    let o = (f32::from_bits(z), index);
    // The lower position of a descending run keeps the entry above, as the upper of an ascending one.
    let keep_above = ((i & s) == 0) == ((i & size) == 0);
    if ranks_above(x, o) == keep_above { x } else { o }
}

/// The stages of a bitonic merge of runs of `size` with strides `top, top / 2, …, 1` (`top ≤ 32`)
/// on a block of 64 positions at `base`: lane `l` holds positions `base + l` (`a`) and
/// `base + 32 + l` (`b`).
///
/// # Safety
/// All 32 lanes call it together with the same `size` and `top`.
#[inline(always)]
pub(super) unsafe fn merge_in_warp(a: &mut Entry, b: &mut Entry, base: u32, lane: u32, size: u32, top: u32) {
    let i = base + lane;
    let mut s = top;
    while s > 0 {
        if s == 32 {
            // Within the lane: `a` is the lower position.
            if ranks_above(*b, *a) == ((i & size) == 0) {
                core::mem::swap(a, b);
            }
        } else {
            // SAFETY: all 32 lanes, the same stride.
            unsafe {
                *a = exchange_lanes(*a, i, s, size);
                *b = exchange_lanes(*b, i + 32, s, size);
            }
        }
        s /= 2;
    }
}

/// Sorts the first `n` entries of the entries area descending ([`ranks_above`]), a bitonic sort
/// over `p = max(64, n.next_power_of_two())` positions (past `n`: [`NO_ENTRY`]): the strides below
/// 64 in registers and shuffles (warp `w` takes the blocks of 64 positions `w, w + 16, …`), the
/// larger ones in shared memory (thread `t` takes the pairs `t, t + 512, …`), a barrier after each.
///
/// # Safety
/// Every thread of a [`TRUNCATE_THREADS`]-thread block calls it together with the same
/// `n ≤ TRUNCATE_CAPACITY`, after a barrier that made the entries visible; the block's dynamic
/// shared memory holds at least `8 · max(64, n.next_power_of_two())` bytes, none of them in use by
/// another part of the kernel until the barrier it ends with.
#[inline(always)]
pub(super) unsafe fn sort_entries(n: u32, tid: u32) {
    let (lane, warp) = (tid % 32, tid / 32);
    let p = n.next_power_of_two().max(64);
    // Runs of up to 64, per block of 64 positions.
    let mut blk = warp;
    while 64 * blk < p {
        let base = 64 * blk;
        let (i, j) = (base + lane, base + 32 + lane);
        // SAFETY: i, j < p ≤ TRUNCATE_CAPACITY.
        let (mut a, mut b) =
            unsafe { (if i < n { load_entry(i) } else { NO_ENTRY }, if j < n { load_entry(j) } else { NO_ENTRY }) };
        let mut size = 2;
        while size <= 64 {
            // SAFETY: all 32 lanes (the loop over blocks is warp-uniform).
            unsafe { merge_in_warp(&mut a, &mut b, base, lane, size, (size / 2).min(32)) };
            size *= 2;
        }
        // SAFETY: as above.
        unsafe {
            store_entry(i, a);
            store_entry(j, b);
        }
        blk += WARPS_T;
    }
    // SAFETY: every thread (the caller's contract).
    unsafe { _syncthreads() };
    let mut size = 128;
    while size <= p {
        let mut s = size / 2;
        while s >= 64 {
            let mut q = tid;
            while q < p / 2 {
                let i = ((q & !(s - 1)) << 1) | (q & (s - 1));
                // SAFETY: i < i + s < p; each pair is one thread's; a barrier before and after.
                unsafe {
                    let (x, y) = (load_entry(i), load_entry(i + s));
                    if ranks_above(y, x) == ((i & size) == 0) {
                        store_entry(i, y);
                        store_entry(i + s, x);
                    }
                }
                q += TRUNCATE_THREADS;
            }
            // SAFETY: every thread.
            unsafe { _syncthreads() };
            s /= 2;
        }
        let mut blk = warp;
        while 64 * blk < p {
            let base = 64 * blk;
            // SAFETY: base + 63 < p; the block is this warp's between the barriers; all 32 lanes.
            unsafe {
                let (mut a, mut b) = (load_entry(base + lane), load_entry(base + 32 + lane));
                merge_in_warp(&mut a, &mut b, base, lane, size, 32);
                store_entry(base + lane, a);
                store_entry(base + 32 + lane, b);
            }
            blk += WARPS_T;
        }
        // SAFETY: every thread.
        unsafe { _syncthreads() };
        size *= 2;
    }
}

/// The f32 order as a u32 order (for values that are not NaN).
#[inline(always)]
pub(super) fn key(x: f32) -> u32 {
    // `−0.0 + 0.0 = +0.0`: the two zeros, equal values, get one key (ties at a boundary are kept).
    let u = (x + 0.0).to_bits();
    if u >> 31 != 0 { !u } else { u | 0x8000_0000 }
}

/// Calls `f(i, x)` for this thread's entries `x = z[i]` of a row of `v` (16-byte loads, two in
/// flight, when `v % 4 == 0`).
///
/// # Safety
/// `z` holds `v` floats (16-byte aligned when `v % 4 == 0`).
#[inline(always)]
pub(super) unsafe fn for_each(z: *const f32, v: u32, tid: u32, mut f: impl FnMut(u32, f32)) {
    if v % 4 == 0 {
        let groups = v / 4;
        let mut g = tid;
        while g < groups {
            let g2 = g + T;
            // SAFETY: g < V / 4 (and g2 when below): 16 bytes inside the row, 16-byte aligned.
            let a = unsafe { *(z.add(4 * g as usize) as *const [f32; 4]) };
            let b = if g2 < groups { unsafe { *(z.add(4 * g2 as usize) as *const [f32; 4]) } } else { [0.0; 4] };
            for j in 0..4 {
                f(4 * g + j as u32, a[j]);
            }
            if g2 < groups {
                for j in 0..4 {
                    f(4 * g2 + j as u32, b[j]);
                }
            }
            g += 2 * T;
        }
    } else {
        let mut i = tid;
        while i < v {
            // SAFETY: i < V.
            f(i, unsafe { *z.add(i as usize) });
            i += T;
        }
    }
}

/// Adds `w` to the 64-bit histogram bin at `addr` (low word first) with native 32-bit shared
/// atomics: the low word by `atom.shared.add.u32`, then its carry and the high word by
/// `red.shared.add.u32` (skipped when both are zero). Every wrap of the low word is seen by exactly
/// the add that made it, so the bin ends with the exact 64-bit sum. (`red.shared.add.u64` compiles to
/// a compare-and-swap loop on sm_90, which the contended bins of a row retried ~6 times an entry:
/// docs/findings/21.)
///
/// # Safety
/// `addr` is an 8-byte aligned shared-memory address.
#[inline(always)]
pub(super) unsafe fn bin_add(addr: u32, w: u64) {
    let (lo, hi) = (w as u32, (w >> 32) as u32);
    // SAFETY: the caller's address (the low word, then the high word at + 4).
    unsafe {
        let old = atom_shared_add_u32(addr, lo);
        let high = hi.wrapping_add((old.wrapping_add(lo) < old) as u32);
        if high != 0 {
            red_shared_add_u32(addr + 4, high);
        }
    }
}

/// The largest `t` such that the entries `z[i]` with a key `key_of(i, z[i]) ≥ t` weigh at least
/// `target` together (`weight` of each; entries without a key count nothing; 0 when they all weigh
/// less): a radix select, 8 bits a pass, histograms with integer shared-memory atomics (so the
/// result does not depend on timing). `COUNT`: every entry weighs 1 (`weight` is not called;
/// [`count_select`]), one `red.shared.add.u32` an entry.
///
/// # Safety
/// As [`block_sum_u64`]; `z` as [`for_each`].
#[inline(always)]
pub(super) unsafe fn radix_select<const COUNT: bool>(
    z: *const f32,
    v: u32,
    tid: u32,
    target: u64,
    key_of: impl Fn(u32, f32) -> Option<u32>,
    weight: impl Fn(f32) -> u64,
) -> u32 {
    // One histogram per warp (`WARPS × 256` bins after the reduction slots): the logits of a row
    // share their high key bits, so one shared histogram would serialize every thread on a few bins.
    let hist = mov_u32_dynamic_smem() + 32 * 8;
    let mine = hist + (tid / 32) * 256 * 8;
    let mut prefix = 0u32;
    let mut above = 0u64;
    for level in 0..4u32 {
        let shift = 24 - 8 * level;
        // SAFETY: block-uniform barriers; the bins are inside the histogram area.
        unsafe {
            let mut d = tid;
            while d < WARPS * 256 {
                st_shared_u64(hist + 8 * d, 0);
                d += T;
            }
            _syncthreads();
            for_each(z, v, tid, |i, x| {
                if let Some(k) = key_of(i, x) {
                    let same_high = level == 0 || (k >> (shift + 8)) == (prefix >> (shift + 8));
                    if same_high {
                        let bin = mine + 8 * ((k >> shift) & 0xFF);
                        if COUNT {
                            // Counts stay below 2^32 (at most V entries): the low word alone.
                            red_shared_add_u32(bin, 1);
                        } else {
                            bin_add(bin, weight(x));
                        }
                    }
                }
            });
            _syncthreads();
            // Bin d of the block: the sum over the warps' histograms, into warp 0's.
            let mut d = tid;
            while d < 256 {
                let mut total = 0u64;
                for w in 0..WARPS {
                    total += ld_shared_u64(hist + 8 * (w * 256 + d));
                }
                st_shared_u64(hist + 8 * d, total);
                d += T;
            }
            _syncthreads();
            // Every thread scans the same bins from the top: the same digit everywhere.
            let mut d = 255u32;
            let mut acc = above;
            loop {
                let h = ld_shared_u64(hist + 8 * d);
                if acc + h >= target || d == 0 {
                    break;
                }
                acc += h;
                d -= 1;
            }
            prefix |= d << shift;
            above = acc;
            _syncthreads();
        }
    }
    prefix
}

/// [`radix_select`] with every entry weighing 1: the largest key `t` with at least `target` keyed
/// entries at or above it (one `red.shared.add.u32` an entry).
///
/// # Safety
/// As [`radix_select`].
#[inline(always)]
pub(super) unsafe fn count_select(
    z: *const f32,
    v: u32,
    tid: u32,
    target: u64,
    key_of: impl Fn(u32, f32) -> Option<u32>,
) -> u32 {
    // SAFETY: forwarded contract.
    unsafe { radix_select::<true>(z, v, tid, target, key_of, |_| 1) }
}

/// [`select_top`]'s counter, past the 64 entries it sorts at the start of shared memory.
pub(super) const TOP_COUNTER_AT: u32 = 8 * 64;

const _: () = assert!(T == TRUNCATE_THREADS && FALLBACK_SAMPLE_SMEM >= TOP_COUNTER_AT + 4 && MAX_TOP_N <= 64);

/// The `n ≤ 64` largest entries `z[i]` that pass `pred` (ties: the lower index first), sorted
/// largest first into the entries area ([`load_entry`]`(j)`), and their count (below `n` when fewer
/// pass): the `n`-th largest key by a radix select, then among the entries at that key the lowest
/// indices that complete `n` by another, then one pass collecting them.
///
/// # Safety
/// As [`block_sum_u64`]; `z` as [`for_each`]; `n ≤ 64`.
#[inline(always)]
pub(super) unsafe fn select_top(z: *const f32, v: u32, tid: u32, n: u32, pred: impl Fn(f32) -> bool) -> u32 {
    let key_at = |x: f32| if pred(x) { Some(key(x)) } else { None };
    // SAFETY: every thread (the caller's contract).
    let t = unsafe { count_select(z, v, tid, n as u64, |_, x| key_at(x)) };
    let mut above = 0u64;
    // SAFETY: z as above.
    unsafe { for_each(z, v, tid, |_, x| above += key_at(x).is_some_and(|k| k > t) as u64) };
    // SAFETY: every thread.
    let above = unsafe { block_sum_u64::<WARPS>(above, tid) };
    // Of the entries at `t`, those with the largest `!i` (the lowest indices) that complete `n`.
    let ti = if above < n as u64 {
        let tied = |i: u32, x: f32| if key_at(x) == Some(t) { Some(!i) } else { None };
        // SAFETY: every thread (`above` is block-uniform).
        unsafe { count_select(z, v, tid, n as u64 - above, tied) }
    } else {
        u32::MAX
    };
    let counter = mov_u32_dynamic_smem() + TOP_COUNTER_AT;
    // SAFETY: the counter word, zeroed before a block-uniform barrier; the selects' last barriers
    // ended every read of the shared memory the entries overwrite; slots are unique (the atomic)
    // and below 64 (exactly min(n, passing) entries are taken).
    unsafe {
        if tid == 0 {
            st_shared_u32(counter, 0);
        }
        _syncthreads();
        for_each(z, v, tid, |i, x| {
            if let Some(k) = key_at(x)
                && (k > t || (k == t && !i >= ti))
            {
                let slot = atom_shared_add_u32(counter, 1);
                if slot < 64 {
                    store_entry(slot, (x, i));
                }
            }
        });
        _syncthreads();
        let count = ld_shared_u32(counter).min(n);
        sort_entries(count, tid);
        count
    }
}
