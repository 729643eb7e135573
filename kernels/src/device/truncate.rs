//! Top-k, top-p and min-p, and top-n log-probabilities (issue 13): the truncation step after a fused
//! truncation launch. The certificate and the walk are the no_std core's ([`crate::truncate`]).
//!
//! 1. The fused kernel's [`Epilogue::Truncate`](crate::config::Epilogue::Truncate) instantiation
//!    samples as usual (the plain winner, the log-masses) and writes each lane's top list per
//!    (row, vocab range, unit).
//! 2. [`truncate_rows`]: per sample row, first the row's reduction when [`TruncateParams::reduce`]
//!    is set (the plain token, its score, log-probabilities and log-sum-exps from the fused
//!    kernel's candidates and masses: [`reduce_row_block`], what `reduce_rows` does after a
//!    log-probability launch, so no kernel stands between the fused one and this step). Then the lists' entries above the largest bound `β` are the row's
//!    exact prefix down to `β`: the block collects them in shared memory and sorts them, and
//!    [`KeptWalk`] (warp 0, 32 counts at a time) takes them largest first until the threshold is proven; then the
//!    row samples within its kept set with the plain pass's scores (a kept plain winner wins again)
//!    and its log-probabilities are renormalized over the kept set. The request's first sample row
//!    writes its top log-probabilities from the same prefix ([`TopOutputs`]). A row the walk cannot
//!    decide, or whose top entries the prefix cannot give, is listed for the fallback (the latter
//!    flagged [`FALLBACK_TOP`], with [`FALLBACK_KEEPS_SAMPLE`] when its sample stands); with
//!    [`TruncateParams::gathered`] the block also copies a listed row's hidden state to its slot.
//!    Over tensor-parallel ranks the step runs twice: on each rank before the exchange with
//!    [`TruncateParams::export`] set, where it stops after sorting and writes the row's
//!    [`RANK_TOP`] largest entries of the shard with the bound of the rest; then on every rank
//!    over the all-gathered exports ([`TruncateParams::ranks`] blocks of [`RANK_UNITS`] units),
//!    with the merged tokens and log-sum-exps, as above (no raw log-probability: the weight is a
//!    shard).
//! 3. The listed rows go to the exact fallback (`super::fallback`: `fallback_gather` over ranks,
//!    `fallback_logits`, `fallback_sample`). The selection primitives both use (the entries area,
//!    its sort, the radix selects) are `super::select`'s.
//!
//! # Thread mapping
//! - `truncate_rows` and `truncate_rows_paired` (one body, two launch bounds:
//!   [`TruncateStep`](crate::config::TruncateStep)): `grid = B` blocks of [`TRUNCATE_THREADS`] (= 512) threads, one per sample row;
//!   thread `t` reads units `t, t + 512, …` (and adjusted tokens `t, t + 512, …`) in each pass over
//!   the row; the collected entries (up to [`TRUNCATE_CAPACITY`]) are sorted by the whole block (warp
//!   `w` takes the blocks of 64 entries `w, w + 16, …` for the strides below 64), warp 0 walks, and
//!   thread `j` samples kept entry `j`; [`TRUNCATE_SMEM`] bytes of dynamic shared memory hold the
//!   entries, the walk's running sums, the block reductions' slots and the control words.

use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use super::collective::{exp, ln, warp_max, warp_min_u32};
use super::dot::warp_dot;
use super::ptx::{
    atom_global_add_u32, atom_shared_add_u32, bar_warp_sync, griddepcontrol_launch_dependents, griddepcontrol_wait,
    ld_shared_u32, ld_shared_v4_u32, mov_u32_dynamic_smem, red_shared_add_u32, shfl_sync_bfly_b32, shfl_sync_idx_b32,
    shfl_sync_up_b32, st_shared_u32, st_shared_v4_u32,
};
use super::reduce::{AdjRows, reduce_row_block};
use super::select::{ENTRY_BYTES, NO_ENTRY, WARPS_T, key, load_entry, sort_entries, store_entry};
use crate::INVALID_INDEX;
use crate::candidate::Candidate;
use crate::config::{REDUCE_BLOCK_SMEM, REDUCE_BLOCK_THREADS, TRUNCATE_CAPACITY, TRUNCATE_SMEM, TRUNCATE_THREADS};
use crate::params::{FALLBACK_KEEPS_SAMPLE, FALLBACK_TOP, MAX_TOP_N, RowParams, TopOutputs, TopSource, TruncateParams};
use crate::truncate::{
    FirstOf, KeptWalk, LANE_TOP, MAX_KEPT, RANK_TOP, RANK_UNITS, Step, StoredTop, TopList, Truncation, Verdict,
};

/// [`truncate_rows`]' shared memory: the entries at 0, then the walk's running sums (one word per
/// entry taken), one 16-byte slot per warp for the block reductions, and the control words.
const MASSES_AT: u32 = ENTRY_BYTES * TRUNCATE_CAPACITY;
const SLOTS_AT: u32 = MASSES_AT + 4 * MAX_KEPT as u32;
const CONTROL_AT: u32 = SLOTS_AT + 16 * WARPS_T;
/// Collection rounds: the first over `β`; each overflow of the capacity raises the threshold for
/// the next (its count is control word `round`).
const ROUNDS: u32 = 4;
/// Control words: the rounds' counts, then the raised threshold, then the walk's step (kind, count,
/// mass).
const THRESHOLD_WORD: u32 = ROUNDS;
const STEP_WORD: u32 = ROUNDS + 1;
/// Control word: the fallback list's slot of the row (for the copy of its hidden state).
const LIST_WORD: u32 = STEP_WORD + 3;
/// Entries the walk reads at most: it decides (or gives up) before taking entry `MAX_KEPT`.
const WALK_ENTRIES: u32 = MAX_KEPT as u32 + 1;
use crate::logmass::log_prob;
const _: () = assert!(TRUNCATE_SMEM == CONTROL_AT + 64 && 4 * (RANK_WORD + 2) <= 64);
// The row's reduction ([`reduce_row_block`]) runs in the entries area, with its threads.
const _: () = assert!(REDUCE_BLOCK_SMEM <= MASSES_AT && REDUCE_BLOCK_THREADS <= TRUNCATE_THREADS);
const _: () = assert!(TRUNCATE_CAPACITY.is_power_of_two() && TRUNCATE_CAPACITY >= 64);
// The selection: its entries in registers, its 256-bin histogram in the walk's running sums.
const _: () = assert!(TRUNCATE_CAPACITY.is_multiple_of(TRUNCATE_THREADS) && MAX_KEPT >= 256 && TRUNCATE_THREADS >= 256);
const _: () = assert!(WALK_ENTRIES < SORT_CAP && SORT_CAP < TRUNCATE_CAPACITY);
const _: () = assert!(WALK_ENTRIES < TRUNCATE_CAPACITY && MAX_KEPT as u32 <= TRUNCATE_THREADS);
const _: () = assert!(TRUNCATE_THREADS.is_multiple_of(32) && TRUNCATE_THREADS <= 1024);
// The top log-probabilities: sorted in one block of 64 entries, written one per thread, after at
// least `MAX_KEPT + 1` entries when a round raised the threshold.
const _: () = assert!(MAX_TOP_N <= 64 && MAX_TOP_N <= MAX_KEPT as u32 + 1 && MAX_TOP_N <= TRUNCATE_THREADS);

/// Collected entries the truncation step sorts at most as they are: past it, [`select_prefix`]
/// keeps only the largest ones first (the walk reads at most [`WALK_ENTRIES`]).
const SORT_CAP: u32 = 512;
/// Entries one warp sorts alone ([`sort_entries`] of at most 64 entries is its first stage only:
/// warp 0's registers, no shared-memory stage between barriers).
const WARP_SORT: u32 = 64;

/// What the selection keeps before the sort: at least `need` of the largest entries (every one
/// that anything after it reads), in a key range of at most `cap` entries.
#[derive(Clone, Copy, PartialEq)]
struct Keep {
    need: u32,
    cap: u32,
}

impl Keep {
    /// Everything the walk, the top log-probabilities or a rank's export can read.
    const WALK: Keep = Keep { need: WALK_ENTRIES, cap: SORT_CAP };

    /// A row that truncates with top-k on (`k < V`) and, in a one-GPU step, needs at most
    /// [`WARP_SORT`] entries — its `k` largest, the next one (which proves the `k`-th's threshold,
    /// ties with the `k`-th included in its key range) and its top log-probabilities' `top_n` —
    /// keeps only those, so one warp sorts them: the walk never takes more than the top-k block and
    /// its ties, and decides on the entry after them, which the selection keeps. Any other row:
    /// [`Keep::WALK`].
    #[inline(always)]
    fn of_row(truncating: bool, t: Truncation, v: u32, top_n: u32, export: bool) -> Keep {
        let k_on = t.top_k_on(v);
        if truncating && k_on && !export && t.top_k < WARP_SORT && top_n <= WARP_SORT {
            Keep { need: (t.top_k + 1).max(top_n), cap: WARP_SORT }
        } else {
            Keep::WALK
        }
    }
}
const _: () = assert!(WARP_SORT <= 64 && MAX_TOP_N <= WARP_SORT);
/// Control words of [`select_prefix`]: the level's digit, the entries above its bin, the entries
/// in its bin; then the compaction's counter.
const SELECT_WORD: u32 = LIST_WORD + 1;
const KEPT_WORD: u32 = SELECT_WORD + 3;
/// Control words of a scoring step's rank ([`rank_in_prefix`]): the given token's place in the
/// sorted entries plus one (0: not among them), then the entries at a lower index.
const RANK_WORD: u32 = KEPT_WORD + 1;
/// Collected entries per thread (the selection holds them in registers).
const PER_THREAD: usize = (TRUNCATE_CAPACITY / TRUNCATE_THREADS) as usize;

/// Warp 0's part of a selection level: over the 256 bins of `hist` (bin `d` counts the entries with
/// digit `d`; lane `l` takes bins `255 − 8l` down to `248 − 8l`), the digit `d` at which the count
/// from the top reaches `need` (`1 ≤ need ≤` the bins' total) and the count above it, in the
/// control words ([`SELECT_WORD`]: `d`, the count of bins above `d`, bin `d`).
///
/// # Safety
/// All 32 lanes of one warp; `hist` holds 256 words, written before a barrier; `control` is the
/// control words' shared address.
#[inline(always)]
unsafe fn find_digit(hist: u32, need: u32, lane: u32, control: u32) {
    let top = 255 - 8 * lane;
    let mut bins = [0u32; 8];
    let mut own = 0;
    for (j, bin) in bins.iter_mut().enumerate() {
        // SAFETY: top − j ≤ 255: inside the histogram.
        *bin = unsafe { ld_shared_u32(hist + 4 * (top - j as u32)) };
        own += *bin;
    }
    // Inclusive scan over the lanes (lane 0 holds the top bins).
    let mut upto = own;
    for s in [1u32, 2, 4, 8, 16] {
        // SAFETY: all 32 lanes.
        let o = unsafe { shfl_sync_up_b32(upto, s) };
        if lane >= s {
            upto += o;
        }
    }
    let before = upto - own;
    if before < need && need <= upto {
        // The one lane whose bins reach `need`.
        let mut acc = before;
        let mut j = 0;
        while acc + bins[j] < need {
            acc += bins[j];
            j += 1;
        }
        // SAFETY: the control words.
        unsafe {
            st_shared_u32(control + 4 * SELECT_WORD, top - j as u32);
            st_shared_u32(control + 4 * (SELECT_WORD + 1), acc);
            st_shared_u32(control + 4 * (SELECT_WORD + 2), bins[j]);
        }
    }
}

/// Keeps at the front of the entries area only the `n` collected entries whose key is at least
/// the `keep.need`-th largest's, rounded down to the first of a radix select's levels (8 bits
/// each, from the top) whose bin leaves at most `keep.cap` entries: every entry the walk, the top
/// log-probabilities or a rank's export can read ([`Keep`]) is among them, in the same order once
/// sorted. Returns their count and the smallest value of their key range (every dropped entry is
/// below it); `None` (nothing moved) when even the exact key keeps more than `keep.cap` (ties).
///
/// # Safety
/// Every thread of the block together with the same `keep` (`1 ≤ need ≤ cap ≤` [`SORT_CAP`]),
/// `keep.cap < n ≤` [`TRUNCATE_CAPACITY`], after a barrier that
/// made the entries visible; `hist` is 256 free shared words; `control` the control words (those
/// of [`SELECT_WORD`] and [`KEPT_WORD`] free). Ends with a barrier.
#[inline(always)]
unsafe fn select_prefix(n: u32, keep: Keep, hist: u32, control: u32, tid: u32) -> Option<(u32, f32)> {
    let mut mine = [NO_ENTRY; PER_THREAD];
    for (k, e) in mine.iter_mut().enumerate() {
        let i = tid + k as u32 * TRUNCATE_THREADS;
        if i < n {
            // SAFETY: i < n ≤ capacity: a collected entry.
            *e = unsafe { load_entry(i) };
        }
    }
    let (lane, warp) = (tid % 32, tid / 32);
    let (mut prefix, mut above) = (0u32, 0u32);
    let mut kept = None;
    for level in 0..4u32 {
        let shift = 24 - 8 * level;
        // SAFETY: block-uniform barriers (the level loop and its exit are the same everywhere);
        // the bins inside `hist`; warp 0 reads them between the second and the third barrier.
        let (d, a, h) = unsafe {
            if tid < 256 {
                st_shared_u32(hist + 4 * tid, 0);
            }
            if level == 0 && tid == 0 {
                st_shared_u32(control + 4 * KEPT_WORD, 0);
            }
            _syncthreads();
            for e in mine {
                let k = key(e.0);
                if e.1 != NO_ENTRY.1 && (level == 0 || (k >> (shift + 8)) == (prefix >> (shift + 8))) {
                    red_shared_add_u32(hist + 4 * ((k >> shift) & 0xFF), 1);
                }
            }
            _syncthreads();
            if warp == 0 {
                find_digit(hist, keep.need - above, lane, control);
            }
            _syncthreads();
            let word = |j: u32| ld_shared_u32(control + 4 * (SELECT_WORD + j));
            (word(0), word(1), word(2))
        };
        prefix |= d << shift;
        above += a;
        if above + h <= keep.cap {
            kept = Some(prefix);
            break; // block-uniform
        }
    }
    let t = kept?;
    for e in mine {
        if e.1 != NO_ENTRY.1 && key(e.0) >= t {
            // SAFETY: every entry was read into registers before the first barrier above; slots
            // below the kept count ≤ cap < capacity are unique (the atomic).
            unsafe {
                let slot = atom_shared_add_u32(control + 4 * KEPT_WORD, 1);
                store_entry(slot, e);
            }
        }
    }
    // SAFETY: every thread; block-uniform barrier; the count is final after it.
    let c = unsafe {
        _syncthreads();
        ld_shared_u32(control + 4 * KEPT_WORD)
    };
    let bits = if t >> 31 != 0 { t & 0x7FFF_FFFF } else { !t };
    Some((c, f32::from_bits(bits)))
}

/// [`KeptWalk`] over the `n` sorted entries (`theta` bounding every other token), 32 counts at a
/// time: in chunk `c`, lane `l` takes count `j = 32c + l`, the running sums are added in order
/// through one chain of shuffles (the sums after `j` and after `j + 1` takes; the latter stored in
/// `masses` for the decision), the walk after `j` takes is rebuilt ([`KeptWalk::after`]: the first
/// value, that sum, the `k`-th value, the first count whose sum reached `top_p`) and asked its
/// verdict on entry `j`; the first count that does not take decides, the whole warp computing
/// the same [`KeptWalk::decide`]. Every state is the one the sequential walk holds, so the step is
/// its step bit for bit (`truncate::tests::the_walk_by_counts_is_the_sequential_walk`), without
/// one dependent round of loads and branches per entry in a single thread.
///
/// # Safety
/// All 32 lanes of one warp; `n ≤` [`TRUNCATE_CAPACITY`] sorted entries are visible in shared
/// memory; `masses` holds [`MAX_KEPT`] free words.
#[inline(always)]
unsafe fn warp_walk(n: u32, theta: f32, walk: (Truncation, f32, f32, u32), masses: u32, lane: u32) -> Step {
    let (t, inv_t, lse, v) = walk;
    let fresh = KeptWalk::new(t, inv_t, lse, v);
    // The walk decides at count min(n, MAX_KEPT) at the latest (exhausted, or full).
    let last = n.min(MAX_KEPT as u32);
    // SAFETY: entry 0 < n, a sorted entry.
    let zmax = if n > 0 { unsafe { load_entry(0).0 } } else { f32::NEG_INFINITY };
    // SAFETY: entry k − 1 < n, a sorted entry.
    let tau_k = if t.top_k > 0 && t.top_k <= n { unsafe { load_entry(t.top_k - 1).0 } } else { f32::NEG_INFINITY };
    let (mut base, mut p_reached) = (0.0f32, (0u32, f32::NEG_INFINITY));
    let mut c = 0;
    loop {
        let j = 32 * c + lane;
        // SAFETY: j < n: a sorted entry.
        let (z, exhausted) = if j < n { (unsafe { load_entry(j).0 }, false) } else { (theta, true) };
        let prob = if j < n { fresh.prob_at(j, z, exp) } else { 0.0 };
        // The running sums in order: lane l's before and after its own take.
        let (mut s, mut before, mut after) = (base, 0.0f32, 0.0f32);
        for i in 0..32 {
            if lane == i {
                before = s;
            }
            // SAFETY: all 32 lanes.
            s += f32::from_bits(unsafe { shfl_sync_idx_b32(prob.to_bits(), i) });
            if lane == i {
                after = s;
            }
        }
        if j < last {
            // SAFETY: j < MAX_KEPT: inside the running sums.
            unsafe { st_shared_u32(masses + 4 * j, after.to_bits()) };
        }
        if p_reached.0 == 0 {
            // SAFETY: all 32 lanes.
            let m = unsafe { warp_min_u32(if j < n && after >= t.top_p { j + 1 } else { u32::MAX }) };
            if m != u32::MAX {
                // SAFETY: all 32 lanes; entry m − 1 is lane (m − 1) % 32's of this chunk.
                p_reached = (m, f32::from_bits(unsafe { shfl_sync_idx_b32(z.to_bits(), (m - 1) % 32) }));
            }
        }
        let w = KeptWalk::after(walk, j, zmax, before, tau_k, p_reached);
        let verdict = if j <= last { w.verdict(z, exhausted, exp) } else { Verdict::Take };
        // SAFETY: all 32 lanes.
        let stop = unsafe { warp_min_u32(if verdict == Verdict::Take { u32::MAX } else { j }) };
        if stop != u32::MAX {
            // The running sums stored above are visible to the whole warp after this.
            bar_warp_sync();
            // SAFETY: all 32 lanes; `stop` is lane stop % 32's count of this chunk.
            let (uncertain, before) = unsafe {
                let src = stop % 32;
                (
                    shfl_sync_idx_b32((verdict == Verdict::Uncertain) as u32, src) != 0,
                    shfl_sync_idx_b32(before.to_bits(), src),
                )
            };
            if uncertain {
                return Step::Uncertain;
            }
            let w = KeptWalk::after(walk, stop, zmax, f32::from_bits(before), tau_k, p_reached);
            // SAFETY: the decision reads entries and running sums below `stop` ≤ last.
            // SAFETY (the searches): all 32 lanes of the warp call them together.
            let search = WarpSearch { lane };
            return w
                .decide_by(|i| unsafe { (load_entry(i).0, f32::from_bits(ld_shared_u32(masses + 4 * i))) }, search);
        }
        base = s;
        c += 1;
    }
}

/// [`FirstOf`] for warp 0's decision ([`warp_walk`]): lane `l` tests count `base + l` of each
/// chunk of 32, the warp's smallest hit is the first — the count the search in order finds.
/// Every lane of the warp must search together (the walk's contract).
#[derive(Clone, Copy)]
struct WarpSearch {
    lane: u32,
}

impl FirstOf for WarpSearch {
    #[inline(always)]
    fn first(self, lo: u32, hi: u32, hit: impl Fn(u32) -> bool) -> u32 {
        let mut base = lo;
        while base < hi {
            let j = base + self.lane;
            let found = j < hi && hit(j);
            // SAFETY: all 32 lanes (`lo`, `hi` are the same in every lane: the search is uniform).
            let m = unsafe { warp_min_u32(if found { j } else { u32::MAX }) };
            if m != u32::MAX {
                return m;
            }
            base += 32;
        }
        hi
    }
}

/// A sample row's units: `n` per rank, `ranks` ranks `stride` units apart (one rank on one GPU;
/// the all-gathered exports of a tensor-parallel call's ranks).
#[derive(Clone, Copy)]
struct RowUnits {
    /// The row's first unit of rank 0.
    first: *const StoredTop,
    n: u32,
    ranks: u32,
    stride: u32,
}

impl RowUnits {
    /// Rank `g`'s units of the row (`n` of them).
    ///
    /// # Safety
    /// `g < ranks`; each rank's row holds `n` units at `first + rank · stride`.
    #[inline(always)]
    unsafe fn of_rank(&self, g: u32) -> *const StoredTop {
        // SAFETY: the caller's contract.
        unsafe { self.first.add(g as usize * self.stride as usize) }
    }
}

/// Appends this thread's entries above `theta` to the entries area (its first
/// [`TRUNCATE_CAPACITY`]; the count, in the shared word `counter`, goes on past it): units
/// `tid, tid + T, …` of the row (four loads in flight), then its adjusted tokens `tid, tid + T, …`.
///
/// # Safety
/// `units` is the row's ([`RowUnits::get`]); `counter` is a shared word zeroed before a barrier; the
/// block's dynamic shared memory holds [`TRUNCATE_SMEM`] bytes.
#[inline(always)]
unsafe fn collect(row: RowUnits, adj: &AdjRows, theta: f32, counter: u32, tid: u32) {
    for g in 0..row.ranks {
        // SAFETY: g < ranks (the caller's contract).
        unsafe { collect_units(row.of_rank(g), row.n, theta, counter, tid) };
    }
    let mut i = adj.range().start + tid;
    while i < adj.range().end {
        let a = adj.get(i);
        if a.token != INVALID_INDEX && a.z > theta {
            // SAFETY: as above.
            unsafe {
                let slot = atom_shared_add_u32(counter, 1);
                if slot < TRUNCATE_CAPACITY {
                    store_entry(slot, (a.z, a.token));
                }
            }
        }
        i += TRUNCATE_THREADS;
    }
}

/// [`collect`]'s part for one rank's `n_units` units of the row.
///
/// # Safety
/// As [`collect`]; `units` holds `n_units` units.
#[inline(always)]
unsafe fn collect_units(units: *const StoredTop, n_units: u32, theta: f32, counter: u32, tid: u32) {
    const K: u32 = 4;
    let mut u = tid;
    while u < n_units {
        let mut z = [[f32::NEG_INFINITY; 2]; K as usize];
        let mut index = [[0u32; 2]; K as usize];
        for k in 0..K {
            let v = u + k * TRUNCATE_THREADS;
            if v < n_units {
                // SAFETY: v < n_units.
                let list = unsafe { &(*units.add(v as usize)).list };
                z[k as usize] = list.z;
                index[k as usize] = list.index;
            }
        }
        let mut count = 0;
        for zk in &z {
            for &x in zk {
                count += (x > theta) as u32;
            }
        }
        if count > 0 {
            // SAFETY: the shared counter (the caller's contract).
            let mut slot = unsafe { atom_shared_add_u32(counter, count) };
            for k in 0..K as usize {
                for q in 0..2 {
                    if z[k][q] > theta {
                        if slot < TRUNCATE_CAPACITY {
                            // SAFETY: slot < capacity; slots are unique (the atomic).
                            unsafe { store_entry(slot, (z[k][q], index[k][q])) };
                        }
                        slot += 1;
                    }
                }
            }
        }
        u += K * TRUNCATE_THREADS;
    }
}

/// What the truncation step does for a sample row's top log-probabilities.
#[derive(Clone, Copy, PartialEq)]
enum TopPlan {
    /// None: the call asks none, or the row is not its request's first sample.
    None,
    /// Written at once: the token with log-probability 0 (a greedy row's processed distribution
    /// is its argmax), or no entry (`INVALID_INDEX`: the row has no token).
    Direct { token: u32 },
    /// From the sorted prefix: the processed logits (scaled by `1/T`) or, `raw`, the raw ones.
    Prefix { raw: bool },
    /// The fallback's, from the row's materialized raw logits.
    Fallback,
}

impl TopPlan {
    /// The plan of a sample row with the call's `top`, whether it is its request's first sample,
    /// whether it is greedy, and its plain token.
    #[inline(always)]
    fn of(top: &TopOutputs, first: bool, greedy: bool, token: u32) -> Self {
        if !first || top.n == 0 {
            return Self::None;
        }
        match top.source {
            TopSource::Off => Self::None,
            TopSource::RawInFallback => Self::Fallback,
            _ if token == INVALID_INDEX => Self::Direct { token },
            TopSource::Processed if greedy => Self::Direct { token },
            TopSource::Processed => Self::Prefix { raw: false },
            TopSource::RawFromLists => Self::Prefix { raw: true },
        }
    }
}

/// Thread `j < top.n` writes request `request`'s top slot `j`: `entry(j)` (token, log-probability)
/// for `j < count`, else `INVALID_INDEX` and NaN.
///
/// # Safety
/// `top`'s outputs hold `(request + 1) · top.n` entries; `entry(j)` is safe for `j < count`.
#[inline(always)]
pub(super) unsafe fn write_top(
    top: &TopOutputs,
    request: u32,
    count: u32,
    tid: u32,
    entry: impl Fn(u32) -> (u32, f32),
) {
    if tid < top.n {
        let (token, lp) = if tid < count { entry(tid) } else { (INVALID_INDEX, f32::NAN) };
        let at = request as usize * top.n as usize + tid as usize;
        // SAFETY: at < (request + 1) · n (the caller's contract).
        unsafe {
            *top.tokens.add(at) = token;
            *top.logprobs.add(at) = lp;
        }
    }
}

/// Sorted entry `j` as a top log-probability: its token and `z · scale − l` ([`log_prob`]: with
/// `l = +∞` the first entry holds all the mass, 0, and every later one `−∞`).
///
/// # Safety
/// As [`load_entry`].
#[inline(always)]
pub(super) unsafe fn top_entry(j: u32, scale: f32, l: f32) -> (u32, f32) {
    // SAFETY: the caller's contract.
    let (z, i) = unsafe { load_entry(j) };
    (i, if j > 0 && l == f32::INFINITY { f32::NEG_INFINITY } else { log_prob(z * scale, l) })
}

/// The log-sum-exp of a row's kept set: the row's `lse` and the kept set's share `mass` of it
/// (`+∞` stays `+∞`).
#[inline(always)]
pub(super) fn kept_lse(lse: f32, mass: f32) -> f32 {
    if lse == f32::INFINITY { lse } else { lse + ln(mass) }
}

/// A tensor-parallel rank's export of a sample row: thread `j <` [`RANK_UNITS`] writes unit `j`,
/// entries `2j, 2j + 1` of the sorted prefix (those below `n`) with `bound`.
///
/// # Safety
/// `out` holds [`RANK_UNITS`] units; `n ≤ RANK_TOP` sorted entries are visible in shared memory.
#[inline(always)]
unsafe fn export_list(out: *mut StoredTop, n: u32, bound: f32, tid: u32) {
    if tid < RANK_UNITS as u32 {
        let mut list = TopList::<LANE_TOP>::EMPTY;
        list.bound = bound;
        for q in 0..LANE_TOP {
            let j = tid * LANE_TOP as u32 + q as u32;
            if j < n {
                // SAFETY: j < n: a sorted entry.
                let (z, i) = unsafe { load_entry(j) };
                list.z[q] = z;
                list.index[q] = i;
            }
        }
        // SAFETY: tid < RANK_UNITS.
        unsafe { *out.add(tid as usize) = StoredTop { list, _pad: 0 } };
    }
}

/// Lists sample row `b` with `flags` for the fallback (thread 0) and, with
/// [`TruncateParams::gathered`], copies its row of the hidden states to its slot there (thread `t`
/// the 16-byte chunks `t, t + T, …`).
///
/// # Safety
/// Every thread of the row's block calls it together, once; `word` is the shared control word
/// [`LIST_WORD`]; the list holds `B + 1` words; `b < B`; with `gathered`, it and `hidden` hold
/// `B × D` elements, 16-byte aligned, `D % 8 == 0`.
#[inline(always)]
unsafe fn list_row(p: &TruncateParams, b: u32, flags: u32, tid: u32, word: u32) {
    if tid == 0 {
        // SAFETY: one thread per listed row, at most B rows listed: inside the list.
        unsafe {
            let slot = atom_global_add_u32(p.fallback, 1);
            *p.fallback.add(1 + slot as usize) = b | flags;
            st_shared_u32(word, slot);
        }
    }
    if p.gathered.is_null() {
        return; // block-uniform
    }
    // SAFETY: block-uniform barrier; the slot is visible after it.
    let slot = unsafe {
        _syncthreads();
        ld_shared_u32(word)
    } as usize;
    let chunks = p.d as usize / 8;
    let (src, dst) = (p.hidden as *const [u32; 4], p.gathered as *mut [u32; 4]);
    let mut c = tid as usize;
    while c < chunks {
        // SAFETY: b < B and slot < B: chunk c < D / 8 of both rows.
        unsafe { *dst.add(slot * chunks + c) = *src.add(b as usize * chunks + c) };
        c += TRUNCATE_THREADS as usize;
    }
}

/// The truncation step: one block per sample row (see the module).
///
/// 0. With [`TruncateParams::reduce`]: the row's reduction ([`reduce_row_block`], its first
///    [`REDUCE_BLOCK_THREADS`] threads), then a barrier.
/// 1. `β`: the largest bound over the row's units (a block max; adjusted tokens have no bound).
/// 2. Every thread appends its units' entries above `β` (and its adjusted tokens' entries above
///    `β`) to shared memory through a shared atomic counter: the row's exact prefix down to `β`.
///    More than [`TRUNCATE_CAPACITY`] of them: the first ones collected are sorted and the next
///    round collects above a higher threshold that still leaves [`MAX_KEPT`]` + 1` entries above it
///    (all the walk can read, so its result is the same); after `ROUNDS` (4) rounds, the row is
///    uncertain.
/// 3. The block sorts them descending (value, then the lower index first: the lists' order); past
///    [`SORT_CAP`] entries only those [`select_prefix`] keeps (every one the walk can read), and
///    for a row with top-k below [`WARP_SORT`], past that many only its `k + 1` largest (and its
///    top log-probabilities' entries) with their key range, which warp 0 sorts alone ([`Keep`]).
/// 4. Warp 0 walks them with [`KeptWalk`] (`β` when they run out), 32 counts at a time
///    ([`warp_walk`]), storing the running sums in shared memory, added in the order of the CPU
///    reference: the same f32 sums, the same step.
/// 5. Certified: thread `j` scores kept entry `j` with the plain pass's noise, a block argmax
///    picks the sample, and warp 0 recomputes a changed token's raw logit (when the call asks for
///    log-probabilities). Uncertain: the row is
///    listed for the fallback (and, with [`TruncateParams::gathered`], its hidden state copied).
///
/// # Safety
/// Launched as documented in the module after the fused truncation launch on the same stream, with
/// buffers of the sizes [`TruncateParams`] states, [`TRUNCATE_SMEM`] bytes of dynamic shared memory
/// and `fallback[0] == 0`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn truncate_rows(p: TruncateParams) {
    // SAFETY: the caller's contract, the same as the body's.
    unsafe { truncate_row::<false>(p) }
}

/// [`truncate_rows`] built with room for two blocks per multiprocessor
/// ([`TruncateStep::Paired`](crate::config::TruncateStep::Paired)): the same body, the same results.
///
/// # Safety
/// As [`truncate_rows`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn truncate_rows_paired(p: TruncateParams) {
    // SAFETY: the caller's contract, the same as the body's.
    unsafe { truncate_row::<false>(p) }
}

/// [`truncate_rows`] for a call that scores given tokens ([`TruncateParams::reduce`]'s
/// `targets`, non-null): step 0 also scores each row's given token as `reduce_rows` does (its raw
/// log-probability, and its processed one over the whole row), and a certified truncating row then
/// rescores it over its kept set ([`score_kept`]); an uncertain row's is the fallback's
/// (`fallback_sample_scored`). Built with [`truncate_rows`]' launch bound
/// ([`TruncateStep::Alone`](crate::config::TruncateStep::Alone)).
///
/// # Safety
/// As [`truncate_rows`], and the reduction's `targets` and their outputs hold B entries.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn truncate_rows_scored(p: TruncateParams) {
    // SAFETY: the caller's contract, the same as the body's.
    unsafe { truncate_row::<true>(p) }
}

/// The body of the truncation-step entries (their launch bounds differ:
/// [`TruncateStep`](crate::config::TruncateStep); `SCORE`: [`truncate_rows_scored`]).
///
/// # Safety
/// As [`truncate_rows`] (with `SCORE`, as [`truncate_rows_scored`]).
#[inline(always)]
unsafe fn truncate_row<const SCORE: bool>(p: TruncateParams) {
    // Launched with programmatic stream serialization: the fallback's launches may be scheduled
    // now; nothing is read or written before the kernel before it (the fused one; `reduce_rows` or
    // the exchange's merge over ranks) is done.
    griddepcontrol_launch_dependents();
    griddepcontrol_wait();
    // SAFETY: special-register reads.
    let (tid, b) = unsafe { (_thread_idx_x(), _block_idx_x()) };
    if b >= p.b {
        return; // block-uniform
    }
    let smem = mov_u32_dynamic_smem();
    let (masses, slots, control) = (smem + MASSES_AT, smem + SLOTS_AT, smem + CONTROL_AT);
    if !p.reduce.candidates.is_null() {
        // 0. The row's candidates and masses reduced (the plain token, its score, the
        // log-probabilities and log-sum-exps), as `reduce_rows` does after a log-probability launch.
        // SAFETY: every thread of the block (block-uniform branch; TRUNCATE_THREADS ≥
        // REDUCE_BLOCK_THREADS), b < B, after the wait; the entries area is free until the
        // collection; the barrier makes thread 0's outputs visible to the block and frees the area.
        unsafe {
            reduce_row_block::<SCORE, false>(&p.reduce, b, tid, smem);
            _syncthreads();
        }
    }
    let n_samples = p.samples.max(1);
    // SAFETY: b < B; the truncation holds B / n entries; the outputs B.
    let (row, trunc, token, lse) = unsafe {
        (
            *p.rows.add(b as usize),
            *p.truncation.add((b / n_samples) as usize),
            *p.tokens.add(b as usize),
            *p.logsumexp.add(b as usize),
        )
    };
    let transform = row.transform;
    // SAFETY: b < B.
    let flag = unsafe { p.flags.add(b as usize) };
    let greedy = transform.is_greedy();
    // Greedy rows, rows that keep everything and rows without a token: the plain sample stands.
    let truncating = !(greedy || trunc.is_off(p.v) || token == INVALID_INDEX);
    let request = b / n_samples;
    let top = TopPlan::of(&p.top, b % n_samples == 0, greedy, token);
    // SAFETY: b < B: the export holds B rows of RANK_UNITS units (when not null).
    let export = (!p.export.is_null()).then(|| unsafe { p.export.add(b as usize * RANK_UNITS) });
    if let Some(out) = export
        && !(truncating || matches!(top, TopPlan::Prefix { .. }))
    {
        // A rank's row that neither truncates nor takes top entries from its prefix (or has no live
        // token in its shard): nothing to send. (An export writes no output: `top` only says what
        // the step over the merged lists will need.)
        // SAFETY: no entries are read.
        unsafe { export_list(out, 0, f32::NEG_INFINITY, tid) };
        return; // block-uniform
    }
    if !truncating && !matches!(top, TopPlan::Prefix { .. }) {
        if let TopPlan::Direct { token } = top {
            // SAFETY: the top outputs hold B / n requests; the entry is the token itself.
            unsafe { write_top(&p.top, request, (token != INVALID_INDEX) as u32, tid, |_| (token, 0.0)) };
        }
        if tid == 0 {
            // SAFETY: b < B.
            unsafe { *flag = 0 };
        }
        // A scoring step's rank: a greedy row's token is first when it is the row's argmax (the
        // plain token); any other goes to the fallback's count (as does a raw list's rank).
        // SAFETY: b < B: the targets and ranks hold entry b.
        let rank_listed = SCORE && !p.target_ranks.is_null() && !unsafe { rank_direct(&p, b, top, tid) };
        if top == TopPlan::Fallback || rank_listed {
            let flags = if top == TopPlan::Fallback { FALLBACK_TOP } else { 0 } | FALLBACK_KEEPS_SAMPLE;
            // SAFETY: every thread (block-uniform branch), once.
            unsafe { list_row(&p, b, flags, tid, control + 4 * LIST_WORD) };
        }
        return; // block-uniform
    }
    if tid < ROUNDS {
        // SAFETY: the rounds' counters, zeroed before the barrier below.
        unsafe { st_shared_u32(control + 4 * tid, 0) };
    }
    if SCORE && tid < 2 {
        // SAFETY: the rank's control words, zeroed before the barrier below (nothing else uses them).
        unsafe { st_shared_u32(control + 4 * (RANK_WORD + tid), 0) };
    }
    let units = RowUnits {
        // SAFETY: row b's units (of rank 0) are inside `tops`.
        first: unsafe { p.tops.add(b as usize * p.units as usize) },
        n: p.units,
        ranks: p.ranks.max(1),
        stride: p.rank_stride,
    };
    // 1. β: the largest bound.
    // SAFETY: every thread of the block; the warps' slots.
    let beta = unsafe { largest_bound(&units, tid, slots) };
    // 2. The entries above the threshold (β, or raised after an overflow).
    // SAFETY: b < B; the offsets and results hold the launch's adjustments (or are null).
    let adj = unsafe { AdjRows::from_parts(p.adj_offsets, p.adjusted, p.samples, b) };
    // SAFETY: every thread of the block; the rounds' counters were zeroed before the bound's barrier.
    let (collected, mut theta) = unsafe { collect_above(&units, &adj, beta, control, tid) };
    // 3. Sorted, largest first: past `keep.cap` entries, only the largest ones that anything after
    // reads (with their bin of a radix select; [`Keep`]), and the threshold raised to their range's
    // bound. A top-k row keeps at most [`WARP_SORT`], which one warp sorts; when ties defeat that,
    // the walk's selection.
    let top_n = if matches!(top, TopPlan::Prefix { .. }) { p.top.n } else { 0 };
    let keep = Keep::of_row(truncating, trunc, p.v, top_n, export.is_some());
    // SAFETY: every thread of the block (`collected` and `keep` are block-uniform); the entries are
    // visible (the collection's barrier).
    let collected = unsafe { select_kept(collected, keep, &mut theta, (masses, control), tid) };
    if let Some(n) = collected
        && n > 0
    {
        // SAFETY: every thread (n is block-uniform); the entries are visible.
        unsafe { sort_entries(n, tid) };
    }
    if let Some(out) = export {
        // A rank's step ends here: its shard's largest entries and the bound of the rest (the next
        // entry, or the collection's threshold; none when it overflowed: `+∞`, the merged row is
        // uncertain).
        let (n, bound) = match collected {
            // SAFETY: RANK_TOP < n ≤ capacity: a sorted entry.
            Some(n) if n > RANK_TOP as u32 => (RANK_TOP as u32, unsafe { load_entry(RANK_TOP as u32).0 }),
            Some(n) => (n, theta),
            None => (0, f32::INFINITY),
        };
        // SAFETY: every thread; the sorted entries are visible (the sort ends with a barrier).
        unsafe { export_list(out, n, bound, tid) };
        return; // block-uniform
    }
    // 4. The walk (a truncating row), by warp 0 ([`warp_walk`]); `None` for a row that does not
    // truncate.
    let outcome = if !truncating {
        None
    } else if let Some(n) = collected {
        // SAFETY: every thread of the block (n is block-uniform); the n sorted entries are visible
        // (the sort ends with a barrier; the selection too); the running sums' area is free.
        Some(unsafe { walk_kept(n, theta, (trunc, &row.transform, lse, p.v), (masses, control), tid) })
    } else {
        Some(Step::Uncertain)
    };
    match outcome {
        Some(Step::Kept { count, mass }) => {
            // 5. The sample within the kept prefix.
            // SAFETY: every thread of the block (the outcome is block-uniform); the kept entries are
            // sorted and visible; the warps' slots are free.
            unsafe { sample_kept(&p, b, (&row, token, lse), (count, mass), (tid, slots)) };
            if SCORE {
                // SAFETY: every thread of the block; the kept entries are still sorted and visible;
                // thread 0 wrote the row's sample and its raw log-probability in `sample_kept`.
                unsafe { score_kept(&p, b, (row.transform, lse), (count, mass), tid) };
            }
        }
        _ => {}
    }
    // 6. The top log-probabilities from the prefix, the row's flag, and its listing for the fallback.
    // SAFETY: every thread of the block (the outcome and the top plan are block-uniform); b < B.
    unsafe {
        finish_row::<SCORE>(&p, (b, request), top, (collected, theta, outcome), (transform, lse), (tid, control))
    };
}

/// Step 1 of [`truncate_row`]: the largest bound `β` of the row's units over every rank (eight loads
/// in flight), the block's maximum through the warps' `slots`.
///
/// # Safety
/// Every thread of the block calls it once; `units` are the row's (inside `tops`); `slots` holds
/// 16 bytes per warp of shared memory.
#[inline(always)]
unsafe fn largest_bound(units: &RowUnits, tid: u32, slots: u32) -> f32 {
    let (lane, warp) = (tid % 32, tid / 32);
    let mut m = f32::NEG_INFINITY;
    for g in 0..units.ranks {
        // SAFETY: g < ranks.
        let rank = unsafe { units.of_rank(g) };
        let mut u = tid;
        while u < units.n {
            let mut x = [f32::NEG_INFINITY; 8];
            for (k, x) in x.iter_mut().enumerate() {
                let v = u + k as u32 * TRUNCATE_THREADS;
                if v < units.n {
                    // SAFETY: v < n: one of the rank's units of the row.
                    *x = unsafe { (*rank.add(v as usize)).list.bound };
                }
            }
            for x in x {
                if x > m {
                    m = x;
                }
            }
            u += 8 * TRUNCATE_THREADS;
        }
    }
    // SAFETY: every thread; the warps' slots; block-uniform barrier.
    unsafe {
        let m = warp_max(m);
        if lane == 0 {
            st_shared_u32(slots + 16 * warp, m.to_bits());
        }
        _syncthreads();
        let mut beta = f32::NEG_INFINITY;
        for w in 0..WARPS_T {
            let x = f32::from_bits(ld_shared_u32(slots + 16 * w));
            if x > beta {
                beta = x;
            }
        }
        beta
    }
}

/// Step 2 of [`truncate_row`]: the entries above the threshold (`beta`, or raised after an overflow,
/// at most [`ROUNDS`] rounds) collected into the entries area; their count (`None`: every round
/// overflowed) and the threshold they are above.
///
/// # Safety
/// Every thread of the block calls it once; the rounds' counters at `control` were zeroed before a
/// barrier; the entries area is free.
#[inline(always)]
unsafe fn collect_above(units: &RowUnits, adj: &AdjRows, beta: f32, control: u32, tid: u32) -> (Option<u32>, f32) {
    let mut theta = beta;
    let mut round = 0;
    let collected = loop {
        let counter = control + 4 * round;
        // SAFETY: every thread; the counter was zeroed before the first barrier; block-uniform
        // barrier; `n` is the same in every thread (nothing writes this counter after it).
        let n = unsafe {
            collect(*units, adj, theta, counter, tid);
            _syncthreads();
            ld_shared_u32(counter)
        };
        if n <= TRUNCATE_CAPACITY {
            break Some(n);
        }
        if round + 1 == ROUNDS {
            break None;
        }
        // Overflow: the first entries collected, sorted; the next threshold is the largest of their
        // values below their (MAX_KEPT + 1)-th, so that at least MAX_KEPT + 1 entries lie above it.
        // SAFETY: every thread (n is block-uniform); the entries are visible (the barrier above).
        unsafe { sort_entries(TRUNCATE_CAPACITY, tid) };
        if tid == 0 {
            // SAFETY: sorted entries below the capacity; the threshold word.
            unsafe {
                let last = load_entry(WALK_ENTRIES - 1).0;
                let mut j = WALK_ENTRIES;
                while j < TRUNCATE_CAPACITY && load_entry(j).0 >= last {
                    j += 1;
                }
                let next = if j < TRUNCATE_CAPACITY { load_entry(j).0 } else { f32::NAN };
                st_shared_u32(control + 4 * THRESHOLD_WORD, next.to_bits());
            }
        }
        // SAFETY: every thread; after it, thread 0's reads of the entries are done, so the next
        // round may overwrite them.
        let next = f32::from_bits(unsafe {
            _syncthreads();
            ld_shared_u32(control + 4 * THRESHOLD_WORD)
        });
        if next.is_nan() {
            break None; // block-uniform: every entry ties with the (MAX_KEPT + 1)-th
        }
        theta = next;
        round += 1;
    };
    (collected, theta)
}

/// Step 5 of [`truncate_row`]: the sample within the kept prefix of `count` entries holding `mass` of
/// the row, with the plain pass's scores: thread `j` scores entry `j` (count ≤ MAX_KEPT ≤ threads),
/// a block argmax carrying the winner's value; thread 0 writes the token, its score and the
/// renormalized log-probabilities, warp 0 a new token's raw log-probability.
///
/// # Safety
/// Every thread of the block calls it once; the `count` sorted entries are visible; the warps'
/// `slots` are free; `b < B`.
#[inline(always)]
unsafe fn sample_kept(
    p: &TruncateParams,
    b: u32,
    (row, token, lse): (&RowParams, u32, f32),
    (count, mass): (u32, f32),
    (tid, slots): (u32, u32),
) {
    let (lane, warp) = (tid % 32, tid / 32);
    let transform = row.transform;
    // 5. The sample within the kept prefix, with the plain pass's scores: thread j scores
    // entry j (count ≤ MAX_KEPT ≤ threads), a block argmax carrying the winner's value.
    let mut c = Candidate::EMPTY;
    let mut zc = f32::NEG_INFINITY;
    if tid < count {
        // SAFETY: tid < count ≤ n: a sorted entry.
        let (z, i) = unsafe { load_entry(tid) };
        c.update(transform.score(z, row.noise().gumbel_at(i)), i);
        zc = z;
    }
    for s in [1u32, 2, 4, 8, 16] {
        // SAFETY: all 32 lanes of every warp.
        let (score, index, z) = unsafe {
            (
                shfl_sync_bfly_b32(c.score.to_bits(), s),
                shfl_sync_bfly_b32(c.index, s),
                shfl_sync_bfly_b32(zc.to_bits(), s),
            )
        };
        let o = Candidate { score: f32::from_bits(score), index };
        if o.beats(c) {
            c = o;
            zc = f32::from_bits(z);
        }
    }
    // SAFETY: the warps' slots (last read before the collection's barrier); every thread,
    // block-uniform barrier; every thread merges the same slots in the same order.
    let (c, zt) = unsafe {
        if lane == 0 {
            st_shared_v4_u32(slots + 16 * warp, [c.score.to_bits(), c.index, zc.to_bits(), 0]);
        }
        _syncthreads();
        let mut best = Candidate::EMPTY;
        let mut zt = f32::NEG_INFINITY;
        for w in 0..WARPS_T {
            let [score, index, z, _] = ld_shared_v4_u32(slots + 16 * w);
            let o = Candidate { score: f32::from_bits(score), index };
            if o.beats(best) {
                best = o;
                zt = f32::from_bits(z);
            }
        }
        (best, zt)
    };
    if tid == 0 {
        let lse_kept = kept_lse(lse, mass);
        // SAFETY: b < B: the outputs hold entry b.
        unsafe {
            *p.tokens.add(b as usize) = c.token();
            *p.scores.add(b as usize) = c.score;
            *p.logprobs.add(b as usize) = log_prob(transform.scaled(zt), lse_kept);
            *p.logsumexp.add(b as usize) = lse_kept;
        }
    }
    if warp == 0 && c.index != token && !p.raw_logprobs.is_null() {
        // A new token: its raw log-probability from its recomputed logit; over ranks (no
        // weight: a shard) from its processed one, which is the raw one (no soft-cap or
        // adjustment there).
        let d = p.d as usize;
        // SAFETY: all 32 lanes of warp 0 (`c` is block-uniform); row b of the hidden states
        // and row `c.index < V` of the weight hold D elements, 16-byte aligned.
        let y = if p.weight.is_null() {
            zt
        } else {
            unsafe { warp_dot(p.hidden.add(b as usize * d), p.weight.add(c.index as usize * d), d, lane, p.elem) }
        };
        if lane == 0 {
            // SAFETY: b < B.
            unsafe { *p.raw_logprobs.add(b as usize) = log_prob(y, *p.raw_logsumexp.add(b as usize)) };
        }
    }
}

/// A scoring step's certified truncating row ([`truncate_rows_scored`]): its given token's
/// processed log-probability over the kept set — `z / T − lse_kept` with the value of its kept
/// entry, the arithmetic [`sample_kept`] gives a sampled one, or `−∞` when it is not among the
/// `count` kept entries (the kept set is exactly that prefix: every entry at or above the last
/// one's value) — and, when it is the row's (new) sample, the raw log-probability `sample_kept`
/// wrote for it. A token at or past V keeps the reduction's NaN.
///
/// # Safety
/// Every thread of the block calls it once, after [`sample_kept`] (thread 0 wrote the row's token
/// and raw log-probability there); the `count ≤ MAX_KEPT ≤ TRUNCATE_THREADS` sorted entries are
/// visible; `b < B`; the reduction's `targets` and their outputs hold B entries.
#[inline(always)]
unsafe fn score_kept(
    p: &TruncateParams,
    b: u32,
    (transform, lse): (crate::Transform, f32),
    (count, mass): (u32, f32),
    tid: u32,
) {
    let r = &p.reduce;
    // SAFETY: b < B (a block-uniform load).
    let target = unsafe { *r.targets.add(b as usize) };
    if target >= p.v {
        return; // block-uniform
    }
    if tid == 0 {
        // SAFETY: b < B. Removed unless an entry below says otherwise (after the barrier).
        unsafe {
            *r.target_logprobs.add(b as usize) = f32::NEG_INFINITY;
            if *p.tokens.add(b as usize) == target && !p.raw_logprobs.is_null() {
                *r.target_raw_logprobs.add(b as usize) = *p.raw_logprobs.add(b as usize);
            }
        }
    }
    // SAFETY: block-uniform barrier: thread 0's store comes before the one below.
    unsafe { _syncthreads() };
    if tid < count {
        // SAFETY: tid < count: a sorted entry.
        let (z, i) = unsafe { load_entry(tid) };
        if i == target {
            // SAFETY: b < B; one entry per token, so one thread at most.
            unsafe { *r.target_logprobs.add(b as usize) = log_prob(transform.scaled(z), kept_lse(lse, mass)) };
        }
    }
}

/// Step 3 of [`truncate_row`], before the sort: past `keep.cap` collected entries, only the largest
/// ones that anything after reads (with their bin of a radix select, [`select_prefix`]), and
/// `theta` raised to their range's bound; the count kept.
///
/// # Safety
/// Every thread of the block calls it once with the same arguments; the collected entries are
/// visible; the running sums at `masses` and the selection's control words at `control` are free.
#[inline(always)]
unsafe fn select_kept(
    collected: Option<u32>,
    keep: Keep,
    theta: &mut f32,
    (masses, control): (u32, u32),
    tid: u32,
) -> Option<u32> {
    match collected {
        Some(n) if n > keep.cap => {
            // One inlined selection, run again with the walk's bounds when ties defeat the small
            // one (a loop, not a second inlined copy: the paired kernel's registers).
            let mut keep = keep;
            let kept = loop {
                // SAFETY: every thread (n and keep are block-uniform); the entries are visible (the
                // collection's barrier); the running sums (256 words) and the selection's control
                // words are free until the walk; a selection that keeps nothing moves nothing and
                // ends with a barrier, so the second one starts from the same entries.
                let kept = unsafe { select_prefix(n, keep, masses, control, tid) };
                if kept.is_none() && keep != Keep::WALK && n > SORT_CAP {
                    keep = Keep::WALK;
                    continue; // block-uniform
                }
                break kept;
            };
            match kept {
                Some((kept, bound)) => {
                    *theta = bound;
                    Some(kept)
                }
                None => Some(n),
            }
        }
        c => c,
    }
}

/// Step 4 of [`truncate_row`]: the walk of a truncating row over its `n` sorted entries by warp 0
/// ([`warp_walk`]), its outcome handed to the block through the step's control words.
///
/// # Safety
/// Every thread of the block calls it once; the `n` sorted entries are visible; the running sums at
/// `masses` are free.
#[inline(always)]
unsafe fn walk_kept(
    n: u32,
    theta: f32,
    (trunc, transform, lse, v): (Truncation, &crate::Transform, f32, u32),
    (masses, control): (u32, u32),
    tid: u32,
) -> Step {
    let (lane, warp) = (tid % 32, tid / 32);
    if warp == 0 {
        // SAFETY: all 32 lanes of warp 0; the n sorted entries are visible (the sort ends with a
        // barrier; the selection too); the running sums' area is free (the selection's
        // histogram is read before its last barrier).
        let step = unsafe { warp_walk(n, theta, (trunc, transform.inv_temperature, lse, v), masses, lane) };
        let words = match step {
            Step::Kept { count, mass } => [1, count, mass.to_bits()],
            _ => [0; 3],
        };
        if lane == 0 {
            // SAFETY: the step's control words.
            unsafe {
                for (k, w) in words.into_iter().enumerate() {
                    st_shared_u32(control + 4 * (STEP_WORD + k as u32), w);
                }
            }
        }
    }
    // SAFETY: every thread; block-uniform barrier; the step is the same in every thread.
    unsafe {
        _syncthreads();
        let word = |k: u32| ld_shared_u32(control + 4 * (STEP_WORD + k));
        if word(0) == 1 { Step::Kept { count: word(1), mass: f32::from_bits(word(2)) } } else { Step::Uncertain }
    }
}

/// A scoring step's rank of row `b`'s given token ([`TruncateParams::target_ranks`]) where no
/// sorted prefix is read (a row that neither truncates nor lists top entries from it): a token at
/// or past V is 0; a greedy row's token is 1 when it is the row's plain token (its lowest-index
/// argmax). Returns whether it wrote the rank (else the fallback counts it).
///
/// # Safety
/// `b < B`; the targets and ranks hold entry `b`.
#[inline(always)]
unsafe fn rank_direct(p: &TruncateParams, b: u32, top: TopPlan, tid: u32) -> bool {
    // SAFETY: b < B (a block-uniform load).
    let target = unsafe { *p.reduce.targets.add(b as usize) };
    let rank = match top {
        _ if target >= p.v => 0,
        TopPlan::Direct { token } if token == target => 1,
        _ => return false,
    };
    if tid == 0 {
        // SAFETY: b < B.
        unsafe { *p.target_ranks.add(b as usize) = rank };
    }
    true
}

/// A scoring step's rank of row `b`'s given token ([`TruncateParams::target_ranks`]) from the
/// first `n` sorted entries, which hold every token that comes before it in the order when it is
/// among them: its place there plus one. When it is not, and every token outside them is `−∞`
/// (`rest_removed`: a certified row's kept set, or a prefix collected down to `−∞`), it comes after
/// all `n` and the tokens outside them at a lower index: `1 + n + t − (entries below t)`. Else
/// nothing is written. Returns whether the rank was written (a token at or past V: 0).
///
/// # Safety
/// Every thread of the block calls it once with the same arguments; the `n` sorted entries are
/// visible; the rank's control words ([`RANK_WORD`]) were zeroed before a barrier and not used
/// since; `b < B`; the targets and ranks hold entry `b`. Its one barrier comes before its reads of
/// the rank's words (a later use of them needs one more).
#[inline(always)]
unsafe fn rank_in_prefix(
    p: &TruncateParams,
    b: u32,
    (n, rest_removed): (u32, bool),
    (tid, control): (u32, u32),
) -> bool {
    // SAFETY: b < B (a block-uniform load).
    let target = unsafe { *p.reduce.targets.add(b as usize) };
    let (place, below) = (control + 4 * RANK_WORD, control + 4 * (RANK_WORD + 1));
    let mut mine = 0;
    let mut j = tid;
    while j < n {
        // SAFETY: j < n: a sorted entry.
        let i = unsafe { load_entry(j) }.1;
        if i == target {
            // SAFETY: the rank's control word; one entry per token: one thread at most.
            unsafe { st_shared_u32(place, j + 1) };
        }
        mine += (i < target) as u32;
        j += TRUNCATE_THREADS;
    }
    // SAFETY: the rank's control words; every thread, block-uniform barrier: every add and the
    // place are visible after it.
    let (place, below) = unsafe {
        if mine > 0 {
            red_shared_add_u32(below, mine);
        }
        _syncthreads();
        (ld_shared_u32(place), ld_shared_u32(below))
    };
    let rank = match () {
        _ if target >= p.v => 0,
        _ if place > 0 => place,
        _ if rest_removed => 1 + n + target - below,
        _ => return false,
    };
    if tid == 0 {
        // SAFETY: b < B.
        unsafe { *p.target_ranks.add(b as usize) = rank };
    }
    true
}

/// Step 6 of [`truncate_row`]: the top log-probabilities from the sorted prefix (a certified row's
/// kept entries, or the first `n` entries of a row that does not truncate when the prefix holds
/// them: at least `n` entries, or every live token), the row's fallback flag, and its listing for
/// the fallback (its sample, its top entries, or both).
///
/// # Safety
/// Every thread of the block calls it once with the same arguments; the sorted entries are visible;
/// `b < B`, `request = b / n`; the list's control word at `control` is free.
#[inline(always)]
unsafe fn finish_row<const SCORE: bool>(
    p: &TruncateParams,
    (b, request): (u32, u32),
    top: TopPlan,
    (collected, theta, outcome): (Option<u32>, f32, Option<Step>),
    (transform, lse): (crate::Transform, f32),
    (tid, control): (u32, u32),
) {
    let inv_t = transform.inv_temperature;
    // 6. The top log-probabilities from the sorted prefix: a certified row's kept entries, or the
    // first `n` entries of a row that does not truncate when the prefix holds them (at least `n`
    // entries, or every live token: nothing was left below the threshold).
    let mut top_in_fallback = top == TopPlan::Fallback;
    if let TopPlan::Prefix { raw } = top {
        let whole = |count: u32| count >= p.top.n || theta == f32::NEG_INFINITY;
        let answer = match (collected, raw, outcome) {
            (Some(_), false, Some(Step::Kept { count, mass })) => Some((count, inv_t, kept_lse(lse, mass))),
            (Some(count), false, None) if whole(count) => Some((count, inv_t, lse)),
            // SAFETY: b < B.
            (Some(count), true, _) if whole(count) => Some((count, 1.0, unsafe { *p.raw_logsumexp.add(b as usize) })),
            _ => None,
        };
        match answer {
            // SAFETY: the top outputs hold B / n requests; j < count: a sorted entry.
            Some((count, scale, l)) => unsafe { write_top(&p.top, request, count, tid, |j| top_entry(j, scale, l)) },
            None => top_in_fallback = true,
        }
    }
    let sample_in_fallback = matches!(outcome, Some(Step::Uncertain));
    if tid == 0 {
        // SAFETY: b < B.
        unsafe { *p.flags.add(b as usize) = sample_in_fallback as u32 };
    }
    // A scoring step's rank, where the sorted prefix decides it (a row whose sample goes to the
    // fallback is ranked there).
    let mut rank_in_fallback = false;
    if SCORE && !p.target_ranks.is_null() && !sample_in_fallback {
        // The sorted entries that hold every token before the given one, when it is among them, and
        // whether every token outside them is `−∞` (then it ranks after them, by index).
        let prefix = match (collected, top, outcome) {
            (Some(_), TopPlan::Prefix { raw: false }, Some(Step::Kept { count, .. })) => Some((count, true)),
            (Some(n), TopPlan::Prefix { .. }, _) => Some((n, theta == f32::NEG_INFINITY)),
            _ => None,
        };
        rank_in_fallback = match prefix {
            // SAFETY: every thread (block-uniform); the n sorted entries are visible; the rank's
            // control words were zeroed before the bound's barrier; b < B.
            Some((n, rest_removed)) => !unsafe { rank_in_prefix(p, b, (n, rest_removed), (tid, control)) },
            None => true,
        };
    }
    if sample_in_fallback || top_in_fallback || rank_in_fallback {
        let flags =
            if top_in_fallback { FALLBACK_TOP } else { 0 } | if sample_in_fallback { 0 } else { FALLBACK_KEEPS_SAMPLE };
        // SAFETY: every thread (block-uniform: the outcome and the top plan are), once; the control
        // word is not otherwise used.
        unsafe { list_row(p, b, flags, tid, control + 4 * LIST_WORD) };
    }
}
