//! Top-k, top-p and min-p inside the fused pass, with a certificate (issue 13).
//!
//! Every one of the three keeps a top part of the row by processed logit `z` (after soft-cap, sparse
//! adjustments and the mask), so their composition keeps `{z ≥ τ}` for one threshold `τ` per row, and
//! the sample is `argmax over {z ≥ τ} of (z·s + g·n)` with the very noise of the plain pass (keyed by
//! the global vocab index): a row that keeps everything draws the plain sample bit for bit.
//!
//! **What the fused pass keeps.** Besides the candidate and the log-mass, each lane keeps per row a
//! [`TopList`]: its `L` largest `z` (with their indices) and a *bound*, the largest of its other
//! `z`. A list's merge is associative and commutative (the `L` largest of the union, and the largest
//! of the bounds and the dropped entries), so lanes, warps and vocab ranges merge in any order. For
//! any partition of the vocabulary into units, with `β` the largest bound, **every token with
//! `z > β` is in some unit's list**: the lists hold the row's exact sorted prefix down to `β`.
//!
//! **The certificate.** [`KeptWalk`] takes that prefix largest first (and, when it runs out, `β` as
//! an upper bound of everything else) and decides as soon as the prefix proves the threshold: `τ`
//! is known and the next value is below it, so the kept set is a prefix of the entries seen. If the
//! lists run out first (or the kept set would exceed [`MAX_KEPT`] tokens), the row is *uncertain*
//! and an exact fallback samples it from its materialized logits; nothing is approximated.
//!
//! Semantics (vLLM's V1 sampler order): temperature, then min-p (probability at least `min_p` times
//! the largest, on the whole processed distribution), then top-k (the `k` largest of what min-p kept,
//! and every token tied with the `k`-th), then top-p on the renormalized remainder (the smallest
//! most-probable prefix whose mass reaches `p` of what min-p and top-k kept; tokens tied with its last
//! stay). The most likely token always stays. Probabilities are `exp(z/T − lse)` in f32 with `lse`
//! the row's log-sum-exp of `z/T` from the fused log-mass; a row whose `lse` is `+∞` (a `+∞`
//! processed logit, or `z/T` past f32 at a tiny temperature) puts all the mass on its first entry
//! (the largest `z`, lowest index on ties: the token drawn), as the softmax's limit does.
//!
//! Min-p and top-k both keep a top part by `z` and min-p's cut depends only on the largest value, so
//! the two commute; the order matters for top-p, whose mass is that of the block both keep.

use crate::candidate::Candidate;

/// Entries a lane keeps per row in the fused pass (the column layouts: `N / 4` rows per lane).
pub const LANE_TOP: usize = 2;
/// Entries a lane of the hidden-as-A kernels keeps per row (two rows per lane, each over a quarter
/// of its block's vocab rows): stored as `LANE_TOP_WIDE / LANE_TOP` units of [`LANE_TOP`] entries
/// with the list's bound ([`TopList::part`]).
pub const LANE_TOP_WIDE: usize = 8;
/// Entries of one unit's list in the fused pass's output (a warp's lanes of one row merged).
pub const UNIT_TOP: usize = 4;
/// Most tokens a row's kept set may have on the certified path (more: the fallback).
pub const MAX_KEPT: usize = 256;
/// Entries of the list a vocab shard (a tensor-parallel rank) sends per sample row: its `RANK_TOP`
/// largest processed logits and the bound of the rest (the CPU backend's simulation of shards sends
/// the same). With `G` ranks the merged lists certify a kept set of up to `RANK_TOP` tokens at least
/// (more when the set spreads over the ranks); a row that needs more takes the exact fallback.
pub const RANK_TOP: usize = 128;
/// [`StoredTop`] units of a rank's list: [`RANK_TOP`] entries, [`LANE_TOP`] per unit, each unit
/// carrying the list's bound ([`TopList::part`]).
pub const RANK_UNITS: usize = RANK_TOP / LANE_TOP;
const _: () = assert!(RANK_TOP % LANE_TOP == 0 && RANK_TOP <= MAX_KEPT);

/// A lane's list as the truncation kernels store it per (row, vocab range, unit): 24 bytes.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StoredTop {
    /// The list.
    pub list: TopList<LANE_TOP>,
    /// Padding.
    pub _pad: u32,
}

/// Whether `(z, i)` ranks above `(z2, i2)`: larger `z`, ties to the lower index (the candidate order
/// without NaN, which the lists never hold).
#[inline(always)]
fn above(z: f32, i: u32, z2: f32, i2: u32) -> bool {
    (z > z2) | ((z == z2) & (i < i2))
}

/// A unit's `L` largest processed logits with their global indices, largest first (empty slots:
/// `−∞`, [`crate::INVALID_INDEX`]), and `bound`: every other `z` of the unit is at most `bound`
/// (`−∞`: the list holds all of the unit's tokens). NaN and `−∞` logits are not listed (a NaN row is
/// reported by its candidate; `−∞` is never kept).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TopList<const L: usize> {
    /// The largest `z`, descending.
    pub z: [f32; L],
    /// Their global vocab indices.
    pub index: [u32; L],
    /// Upper bound of the unit's unlisted `z`.
    pub bound: f32,
}

impl<const L: usize> TopList<L> {
    /// Nothing seen: the identity of [`TopList::merge`].
    pub const EMPTY: Self = Self { z: [f32::NEG_INFINITY; L], index: [u32::MAX; L], bound: f32::NEG_INFINITY };

    /// Takes token `index` with processed logit `z`.
    #[inline(always)]
    pub fn update(&mut self, z: f32, index: u32) {
        if !(z > f32::NEG_INFINITY) {
            return;
        }
        if !above(z, index, self.z[L - 1], self.index[L - 1]) {
            if z > self.bound {
                self.bound = z;
            }
            return;
        }
        // Insert: carry the entry down the list (constant indices), the last one drops out.
        let (mut cz, mut ci) = (z, index);
        let mut j = 0;
        while j < L {
            if above(cz, ci, self.z[j], self.index[j]) {
                let (tz, ti) = (self.z[j], self.index[j]);
                self.z[j] = cz;
                self.index[j] = ci;
                cz = tz;
                ci = ti;
            }
            j += 1;
        }
        if cz > self.bound {
            self.bound = cz;
        }
    }

    /// [`TopList::update`] for a list whose tokens come in ascending index order: `index` is above
    /// every index this list was offered before (a lane's entries in the fused pass: its vocab
    /// rows ascend within a tile and its tiles ascend within the block's range). The list and
    /// bound afterwards are [`TopList::update`]'s bit for bit.
    ///
    /// Every listed index is then below `index`, so a listed entry tied with `z` ranks above it:
    /// the new entry goes below the slots with `z[j] ≥ z` (`p_j = z > z[j]`, false then true down
    /// the sorted list), each slot `j` with `p_j` takes slot `j − 1`'s entry (or the new one where
    /// `p_{j−1}` is false), and the last slot's entry (when `p_{L−1}`) or the new one is the
    /// dropped entry that may raise the bound. `−∞` and NaN compare false everywhere: nothing
    /// changes, as [`TopList::update`] returns early for them. With selects only, for lists of at
    /// most 2 entries (the column kernels' lane lists, where a good share of a lane's few entries
    /// go in); longer lists (the hidden-as-A kernels' 8, which most entries stay out of) take
    /// [`TopList::update`] itself, whose insertion is a branch past one test of the last slot (the
    /// selects of 8 slots spilled more there: ptxas, `tmat_n64_tk` 1104 → 1200 bytes of loads).
    #[inline(always)]
    pub fn update_ascending(&mut self, z: f32, index: u32) {
        if L > 2 {
            self.update(z, index);
            return;
        }
        let (z_old, i_old) = (self.z, self.index);
        let mut j = 0;
        let mut above_prev = false; // p_{j−1}; slot −1 is +∞ (never below the new entry)
        while j < L {
            let p = z > z_old[j];
            if p {
                let (zj, ij) = if above_prev { (z_old[j - 1], i_old[j - 1]) } else { (z, index) };
                self.z[j] = zj;
                self.index[j] = ij;
            }
            above_prev = p;
            j += 1;
        }
        let out = if above_prev { z_old[L - 1] } else { z };
        if out > self.bound {
            self.bound = out;
        }
    }

    /// Takes another unit's list (any size): associative and commutative, [`TopList::EMPTY`] the
    /// identity.
    #[inline(always)]
    pub fn merge<const M: usize>(&mut self, other: &TopList<M>) {
        let mut j = 0;
        while j < M {
            self.update(other.z[j], other.index[j]);
            j += 1;
        }
        if other.bound > self.bound {
            self.bound = other.bound;
        }
    }

    /// Entries `j·M .. (j + 1)·M` with this list's bound: the parts of a list, each bounded by its
    /// bound, together say what the list says.
    #[inline(always)]
    pub fn part<const M: usize>(&self, j: usize) -> TopList<M> {
        let mut out = TopList::<M> { bound: self.bound, ..TopList::EMPTY };
        let mut k = 0;
        while k < M {
            out.z[k] = self.z[j * M + k];
            out.index[k] = self.index[j * M + k];
            k += 1;
        }
        out
    }

    /// Drops the first entry (the largest), shifting the others up; the bound is unchanged.
    #[inline(always)]
    pub fn pop(&mut self) {
        let mut j = 0;
        while j + 1 < L {
            self.z[j] = self.z[j + 1];
            self.index[j] = self.index[j + 1];
            j += 1;
        }
        self.z[L - 1] = f32::NEG_INFINITY;
        self.index[L - 1] = u32::MAX;
    }
}

/// One row's truncation, `#[repr(C)]`, 16 bytes (the fused truncation launch's per-request array).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Truncation {
    /// Top-k (`0` or `≥ V`: off).
    pub top_k: u32,
    /// Top-p in `(0, 1]` (`1`: off).
    pub top_p: f32,
    /// Min-p in `[0, 1]` (`0`: off).
    pub min_p: f32,
    /// Padding.
    pub _pad: u32,
}

impl Truncation {
    /// Keeps everything.
    pub const NONE: Self = Self { top_k: 0, top_p: 1.0, min_p: 0.0, _pad: 0 };

    /// Whether top-k truncates a vocabulary of `v`: `0 < k < V` (`0` and `≥ V` keep every token).
    /// The one definition of "top-k on": the certificate's walk, the truncation step's selection and
    /// its fallback ask this.
    #[inline(always)]
    pub const fn top_k_on(&self, v: u32) -> bool {
        self.top_k > 0 && self.top_k < v
    }

    /// Whether it keeps every token of a vocabulary of `v` (all three off).
    #[inline(always)]
    pub fn is_off(&self, v: u32) -> bool {
        !self.top_k_on(v) && !(self.top_p < 1.0) && !(self.min_p > 0.0)
    }
}

/// What [`KeptWalk::next`] decided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// Take this value into the prefix and offer the next one.
    More,
    /// Certified: the kept set is the first `count` entries of the prefix, whose probabilities sum
    /// to `mass` (relative to the whole row: `exp(z/T − lse)` each).
    Kept {
        /// Entries kept.
        count: u32,
        /// Their probability under the untruncated processed distribution.
        mass: f32,
    },
    /// The prefix cannot prove the threshold: the exact fallback must sample the row.
    Uncertain,
}

/// The certificate: the row's sorted prefix (largest `z` first) offered one value at a time, with
/// `exp` the exponential to use. Before taking value `z` (the next largest; when the lists are
/// exhausted, the largest bound `β` with `exhausted`, which bounds every unseen token), it decides
/// whether the kept set is already a proven prefix of what it took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeptWalk {
    t: Truncation,
    inv_t: f32,
    lse: f32,
    v: u32,
    /// Entries taken, their largest `z`, and the running probability sum.
    n: u32,
    zmax: f32,
    cum: f32,
    /// The `k`-th entry's `z` (valid once `n ≥ k`).
    tau_k: f32,
    /// Top-p without top-k: the `z` at which the running sum reached `p`, and its count (valid once
    /// `p_count > 0`).
    tau_p: f32,
    p_count: u32,
}

impl KeptWalk {
    /// A row with truncation `t` (not off), `1/T` (> 0: not greedy), the log-sum-exp `lse` of its
    /// `z/T` over every allowed token, and `v` vocab entries.
    #[inline(always)]
    pub fn new(t: Truncation, inv_t: f32, lse: f32, v: u32) -> Self {
        Self {
            t,
            inv_t,
            lse,
            v,
            n: 0,
            zmax: f32::NEG_INFINITY,
            cum: 0.0,
            tau_k: f32::NEG_INFINITY,
            tau_p: f32::NEG_INFINITY,
            p_count: 0,
        }
    }

    fn k_on(&self) -> bool {
        self.t.top_k_on(self.v)
    }

    /// The probability of `z`, the prefix's entry `j` (from 0), under the untruncated processed
    /// distribution: `exp(z/T − lse)`, or with `lse = +∞` all of it on entry 0 (1 there, 0 after).
    #[inline(always)]
    pub fn prob_at(&self, j: u32, z: f32, exp: impl Fn(f32) -> f32) -> f32 {
        if self.lse == f32::INFINITY { (j == 0) as u32 as f32 } else { exp(z * self.inv_t - self.lse) }
    }

    fn m_on(&self) -> bool {
        self.t.min_p > 0.0
    }

    /// Whether `z` passes min-p (probability at least `min_p` times the largest: `z` equal to the
    /// largest always does, `+∞` included).
    #[inline(always)]
    fn min_p_keeps(&self, z: f32, exp: impl Fn(f32) -> f32) -> bool {
        !self.m_on() || z == self.zmax || exp((z - self.zmax) * self.inv_t) >= self.t.min_p
    }

    /// Whether top-p runs on its own (neither min-p nor top-k before it): its running sum is then
    /// over the whole row, and the walk can stop where it reaches `p`.
    fn p_alone(&self) -> bool {
        self.t.top_p < 1.0 && !self.k_on() && !self.m_on()
    }

    /// Entries taken so far.
    #[inline(always)]
    pub fn count(&self) -> u32 {
        self.n
    }

    /// The running probability sum after `count` entries.
    #[inline(always)]
    pub fn mass(&self) -> f32 {
        self.cum
    }

    /// The walk after taking the prefix's first `n` values, rebuilt from the prefix alone: `zmax`
    /// its first value, `cum` the running sum after `n` (each taken value's [`Self::prob_at`] added
    /// in order), `tau_k` its `k`-th value (read once `n ≥ k`), and `p_reached` the first count at
    /// which the running sum reached `top_p`, with the value taken last then (read once that count
    /// is at most `n`; `(0, _)`: not yet). It holds what [`Self::next`] holds after `n` takes, so
    /// that the steps of several counts can be decided at once (the GPU's warp takes 32).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn after(
        (t, inv_t, lse, v): (Truncation, f32, f32, u32),
        n: u32,
        zmax: f32,
        cum: f32,
        tau_k: f32,
        p_reached: (u32, f32),
    ) -> Self {
        let mut w = Self::new(t, inv_t, lse, v);
        w.n = n;
        w.cum = cum;
        if n > 0 {
            w.zmax = zmax;
        }
        if w.k_on() && n >= t.top_k {
            w.tau_k = tau_k;
        }
        if w.p_alone() && p_reached.0 > 0 && p_reached.0 <= n {
            (w.p_count, w.tau_p) = p_reached;
        }
        w
    }

    /// What the walk does with `z`, the next largest value (`exhausted`: `β`, bounding every unseen
    /// token), before taking it: decide ([`Self::decide`]), give up, or take it ([`Self::take`]).
    #[inline(always)]
    pub fn verdict(&self, z: f32, exhausted: bool, exp: impl Fn(f32) -> f32 + Copy) -> Verdict {
        let k_on = self.k_on();
        if self.n > 0 {
            // Is `z` (and so everything after it) excluded by a proven criterion? Min-p or top-k
            // ends the block they keep; top-p on its own stops where its sum reached `p` (top-p
            // after them decides inside the complete block, with its mass).
            let below_k = k_on && self.n >= self.t.top_k && z < self.tau_k;
            let below_p = self.p_alone() && self.p_count > 0 && z < self.tau_p;
            let below_m = !self.min_p_keeps(z, exp);
            if below_k | below_p | below_m {
                return Verdict::Decide;
            }
        }
        if exhausted || self.n as usize >= MAX_KEPT {
            return Verdict::Uncertain;
        }
        Verdict::Take
    }

    /// The kept set once [`Self::verdict`] said [`Verdict::Decide`], given `prefix(j)`: the `j`-th
    /// value taken and the running sum after it (`j < count`), which top-p after min-p or top-k
    /// reads back.
    #[inline(always)]
    pub fn decide(&self, prefix: impl Fn(u32) -> (f32, f32)) -> Step {
        self.decide_by(prefix, InOrder)
    }

    /// [`Self::decide`] with its two searches (each the first count in a range whose entry
    /// passes a test) done by `search`: [`InOrder`] here, 32 counts at a time on the GPU. Every
    /// search returns the same count however it looks, so the step is the same.
    #[inline(always)]
    pub fn decide_by(&self, prefix: impl Fn(u32) -> (f32, f32), search: impl FirstOf) -> Step {
        let mut count = self.n;
        if self.t.top_p < 1.0 && !self.p_alone() {
            // The block min-p and top-k keep is the prefix taken (every value taken passed both):
            // the smallest prefix reaching p of its mass, then the ties of its last entry.
            let target = self.t.top_p * self.cum;
            let j = search.first(1, self.n, |j| !(prefix(j - 1).1 < target));
            let last = prefix(j - 1).0;
            count = search.first(j, self.n, |j| prefix(j).0 != last);
        }
        let mass = if count == self.n { self.cum } else { prefix(count - 1).1 };
        Step::Kept { count, mass }
    }

    /// Takes `z` into the prefix.
    #[inline(always)]
    pub fn take(&mut self, z: f32, exp: impl Fn(f32) -> f32 + Copy) {
        if self.n == 0 {
            self.zmax = z;
        }
        self.cum += self.prob_at(self.n, z, exp);
        self.n += 1;
        if self.k_on() && self.n == self.t.top_k {
            self.tau_k = z;
        }
        if self.p_alone() && self.p_count == 0 && self.cum >= self.t.top_p {
            self.tau_p = z;
            self.p_count = self.n;
        }
    }

    /// Decides on `z`, the next largest value (`exhausted`: `β`, bounding every unseen token), given
    /// `prefix(j)`: the `j`-th value taken and the running sum after it (`j < count`; the caller
    /// stores them), which top-p after min-p or top-k reads back once their block is complete:
    /// [`Self::verdict`], then [`Self::decide`] or [`Self::take`].
    #[inline(always)]
    pub fn next(
        &mut self,
        z: f32,
        exhausted: bool,
        exp: impl Fn(f32) -> f32 + Copy,
        prefix: impl Fn(u32) -> (f32, f32),
    ) -> Step {
        match self.verdict(z, exhausted, exp) {
            Verdict::Decide => self.decide(prefix),
            Verdict::Uncertain => Step::Uncertain,
            Verdict::Take => {
                self.take(z, exp);
                Step::More
            }
        }
    }
}

/// A search of [`KeptWalk::decide_by`]: the first `j` in `lo..hi` with `hit(j)`, else `hi`.
pub trait FirstOf: Copy {
    /// See the trait.
    fn first(self, lo: u32, hi: u32, hit: impl Fn(u32) -> bool) -> u32;
}

/// [`FirstOf`] one count after the other.
#[derive(Clone, Copy, Debug)]
pub struct InOrder;

impl FirstOf for InOrder {
    #[inline(always)]
    fn first(self, lo: u32, hi: u32, hit: impl Fn(u32) -> bool) -> u32 {
        let mut j = lo;
        while j < hi && !hit(j) {
            j += 1;
        }
        j
    }
}

/// What [`KeptWalk::verdict`] does with the next value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Take it and offer the next one.
    Take,
    /// The kept set is proven: [`KeptWalk::decide`].
    Decide,
    /// The prefix cannot prove the threshold: the exact fallback.
    Uncertain,
}

/// The sample of a certified row: the argmax of the perturbed scores over its kept prefix
/// (`entry(j)` = (`z`, index) for `j < count`), with the row's noise and transform — the scores
/// of the plain pass, so a row whose plain winner is kept draws it.
#[inline(always)]
pub fn sample_kept(
    count: u32,
    entry: impl Fn(u32) -> (f32, u32),
    noise: &crate::noise::RowNoise,
    transform: &crate::epilogue::Transform,
) -> Candidate {
    let mut c = Candidate::EMPTY;
    let mut j = 0;
    while j < count {
        let (z, i) = entry(j);
        c.update(transform.score(z, noise.gumbel_at(i)), i);
        j += 1;
    }
    c
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::logmass::exp;
    use std::vec::Vec;

    fn reference_tau(z: &[f32], t: &Truncation, inv_t: f32) -> f32 {
        // f64 reference of the threshold (the CPU backend's `kept_threshold` semantics).
        let mut order: Vec<usize> = (0..z.len()).filter(|&i| z[i] > f32::NEG_INFINITY).collect();
        order.sort_by(|&a, &b| z[b].total_cmp(&z[a]).then(a.cmp(&b)));
        let zmax = z[order[0]] as f64;
        let tt = 1.0 / inv_t as f64;
        let mut th = f64::NEG_INFINITY;
        if t.min_p > 0.0 {
            th = zmax + tt * (t.min_p as f64).ln();
        }
        if t.top_k > 0 && (t.top_k as usize) < order.len() {
            th = th.max(z[order[t.top_k as usize - 1]] as f64);
        }
        if t.top_p < 1.0 {
            let kept: Vec<f64> =
                order.iter().map(|&i| z[i] as f64).take_while(|&x| x >= th).map(|x| ((x - zmax) / tt).exp()).collect();
            let total: f64 = kept.iter().sum();
            let mut cum = 0.0;
            for (j, q) in kept.iter().enumerate() {
                cum += q;
                if cum >= t.top_p as f64 * total {
                    th = th.max(z[order[j]] as f64);
                    break;
                }
            }
        }
        th.min(zmax) as f32
    }

    struct Mix(u64);
    impl Mix {
        fn next(&mut self) -> f64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Runs the walk over units of `unit` consecutive tokens with lists of `L`.
    fn walk<const L: usize>(z: &[f32], unit: usize, t: Truncation, inv_t: f32) -> Option<(Vec<(f32, u32)>, u32)> {
        let mut lists: Vec<TopList<L>> = Vec::new();
        for (u, chunk) in z.chunks(unit).enumerate() {
            let mut l = TopList::<L>::EMPTY;
            for (j, &x) in chunk.iter().enumerate() {
                l.update(x, (u * unit + j) as u32);
            }
            lists.push(l);
        }
        let beta = lists.iter().fold(f32::NEG_INFINITY, |b, l| b.max(l.bound));
        let mut all: Vec<(f32, u32)> =
            lists.iter().flat_map(|l| (0..L).map(|j| (l.z[j], l.index[j]))).filter(|e| e.0 > beta).collect();
        all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let m = z.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let lse = m * inv_t + z.iter().map(|&x| exp(x * inv_t - m * inv_t)).sum::<f32>().ln();
        let mut w = KeptWalk::new(t, inv_t, lse, z.len() as u32);
        let mut cums: Vec<f32> = Vec::new();
        let mut j = 0;
        loop {
            let (x, exhausted) = if j < all.len() { (all[j].0, false) } else { (beta, true) };
            match w.next(x, exhausted, exp, |i| (all[i as usize].0, cums[i as usize])) {
                Step::More => {
                    cums.push(w.mass());
                    j += 1;
                }
                Step::Kept { count, .. } => return Some((all, count)),
                Step::Uncertain => return None,
            }
        }
    }

    #[test]
    fn lists_merge_associatively_and_bound_what_they_drop() {
        let mut g = Mix(7);
        let z: Vec<f32> = (0..200).map(|_| (g.next() * 8.0).floor() as f32).collect(); // many ties
        let mut whole = TopList::<4>::EMPTY;
        for (i, &x) in z.iter().enumerate() {
            whole.update(x, i as u32);
        }
        for split in [1usize, 37, 100, 199] {
            let (mut a, mut b) = (TopList::<4>::EMPTY, TopList::<4>::EMPTY);
            z[..split].iter().enumerate().for_each(|(i, &x)| a.update(x, i as u32));
            z[split..].iter().enumerate().for_each(|(i, &x)| b.update(x, (split + i) as u32));
            let mut ab = a;
            ab.merge(&b);
            let mut ba = b;
            ba.merge(&a);
            assert_eq!(ab, whole);
            assert_eq!(ba, whole);
        }
        // Every unlisted token is at most the bound; listed ones are the largest, ties by index.
        let mut order: Vec<usize> = (0..z.len()).collect();
        order.sort_by(|&a, &b| z[b].total_cmp(&z[a]).then(a.cmp(&b)));
        for (j, &i) in order.iter().enumerate().take(4) {
            assert_eq!(whole.index[j] as usize, i);
        }
        assert_eq!(whole.bound, z[order[4]]);
        let mut two = TopList::<2>::EMPTY;
        two.update(f32::NAN, 3);
        two.update(f32::NEG_INFINITY, 4);
        assert_eq!(two, TopList::<2>::EMPTY);
    }

    /// A list's words, for bit-for-bit comparisons (`±0` differ, as the stored floats do).
    fn list_bits<const L: usize>(l: &TopList<L>) -> ([u32; L], [u32; L], u32) {
        (l.z.map(f32::to_bits), l.index, l.bound.to_bits())
    }

    fn ascending_updates_are_updates<const L: usize>(seed: u64) -> (u64, u64) {
        // Streams in ascending index order (gaps between indices, as a lane's rows have) of coarse
        // values (ties with listed entries and with the bound), specials and spread values; both
        // updates from the same state after every entry.
        const SPECIALS: [f32; 8] = [f32::NAN, f32::NEG_INFINITY, f32::INFINITY, 0.0, -0.0, f32::MAX, -f32::MAX, 1e-40];
        let mut g = Mix(seed);
        let (mut inserted, mut kept_out) = (0u64, 0u64);
        for case in 0..400u32 {
            let len = 1 + (g.next() * 60.0) as usize;
            let coarse = [1.0f64, 3.0, 16.0][case as usize % 3];
            let (mut a, mut b) = (TopList::<L>::EMPTY, TopList::<L>::EMPTY);
            let mut index = (g.next() * 100.0) as u32;
            for _ in 0..len {
                let r = g.next();
                let z = if r < 0.06 {
                    SPECIALS[(g.next() * 8.0) as usize % 8]
                } else if r < 0.7 {
                    (g.next() * coarse).floor() as f32 - 1.0
                } else {
                    (g.next() * 40.0 - 20.0) as f32
                };
                let last = a.z[L - 1];
                a.update(z, index);
                b.update_ascending(z, index);
                assert_eq!(list_bits(&a), list_bits(&b), "L {L} case {case} z {z} index {index}");
                if z > last {
                    inserted += 1
                } else {
                    kept_out += 1
                }
                index += 1 + (g.next() * 3.0) as u32;
            }
        }
        (inserted, kept_out)
    }

    #[test]
    fn ascending_updates_give_the_lists_of_updates_bit_for_bit() {
        for (seed, (inserted, kept_out)) in
            [(1, ascending_updates_are_updates::<1>(1)), (2, ascending_updates_are_updates::<2>(2))]
        {
            // Not vacuous: entries go into the list and stay out of it many times.
            assert!(inserted > 500 && kept_out > 500, "seed {seed}: {inserted} inserted, {kept_out} kept out");
        }
        // Out of order the shortcut is not `update` (why the lanes' order is its contract): a tie
        // with a listed entry of a higher index ranks above it.
        let mut a = TopList::<2>::EMPTY;
        a.update(1.0, 9);
        let (mut u, mut w) = (a, a);
        u.update(1.0, 4);
        w.update_ascending(1.0, 4);
        assert_eq!(u.index, [4, 9]);
        assert_eq!(w.index, [9, 4]);
    }

    #[test]
    fn certified_thresholds_match_the_f64_reference() {
        let mut g = Mix(11);
        let mut certified = 0;
        let mut total = 0;
        for case in 0..400 {
            let v = 500 + case * 7;
            let peaked = case % 2 == 0;
            let ties = case % 5 == 0;
            let z: Vec<f32> = (0..v)
                .map(|_| {
                    let x = if peaked { -(g.next() * 40.0) as f32 } else { (g.next() * 2.0) as f32 };
                    if ties { (x * 2.0).round() / 2.0 } else { x }
                })
                .collect();
            let t = Truncation {
                top_k: [0, 1, 5, 50, 64][case % 5],
                top_p: [1.0, 0.1, 0.5, 0.9, 0.99][(case / 5) % 5],
                min_p: [0.0, 0.0, 0.05, 0.2][(case / 25) % 4],
                _pad: 0,
            };
            if t.is_off(v as u32) {
                continue;
            }
            let inv_t = [1.0f32, 1.0 / 0.7, 1.0 / 1.5][case % 3];
            total += 1;
            if let Some((prefix, count)) = walk::<4>(&z, 16, t, inv_t) {
                certified += 1;
                let tau = reference_tau(&z, &t, inv_t);
                let want = z.iter().filter(|&&x| x >= tau).count() as u32;
                // The f32 certificate and the f64 reference agree except where a probability sum
                // lands within rounding of p (none in these rows).
                assert_eq!(count, want, "case {case}: {t:?}");
                assert!(prefix[..count as usize].iter().all(|e| e.0 >= tau));
            }
        }
        std::eprintln!("{certified} of {total} certified");
        assert!(certified * 2 > total, "{certified} of {total} certified");
    }

    /// The walk over a strided partition (unit `u` holds tokens `u, u + units, …`, as a lane holds
    /// every `units`-th group of a vocab range) with lists of `L`.
    fn walk_strided<const L: usize>(z: &[f32], units: usize, t: Truncation, inv_t: f32) -> Option<u32> {
        let mut lists = std::vec![TopList::<L>::EMPTY; units];
        for (i, &x) in z.iter().enumerate() {
            lists[i % units].update(x, i as u32);
        }
        // Merge in an arbitrary grouping (pairs, then the rest): the merge is associative.
        let mut merged = TopList::<64>::EMPTY;
        for pair in lists.chunks(2) {
            let mut m = pair[0];
            if pair.len() > 1 {
                m.merge(&pair[1]);
            }
            merged.merge(&m);
        }
        let beta = merged.bound;
        let all: Vec<(f32, u32)> = (0..64).map(|j| (merged.z[j], merged.index[j])).filter(|e| e.0 > beta).collect();
        let m = z.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let lse = m * inv_t + z.iter().map(|&x| exp(x * inv_t - m * inv_t)).sum::<f32>().ln();
        let mut w = KeptWalk::new(t, inv_t, lse, z.len() as u32);
        let mut cums: Vec<f32> = Vec::new();
        loop {
            let j = cums.len();
            let (x, exhausted) = if j < all.len() { (all[j].0, false) } else { (beta, true) };
            match w.next(x, exhausted, exp, |i| (all[i as usize].0, cums[i as usize])) {
                Step::More => cums.push(w.mass()),
                Step::Kept { count, .. } => return Some(count),
                Step::Uncertain => return None,
            }
        }
    }

    #[test]
    fn certified_counts_hold_for_any_partition_and_list_size() {
        let mut g = Mix(29);
        let (mut certified, mut total) = (0, 0);
        for case in 0..300 {
            let v = 200 + (g.next() * 3000.0) as usize;
            let z: Vec<f32> = (0..v)
                .map(|_| match case % 3 {
                    0 => -(g.next() * 30.0) as f32,
                    1 => (g.next() * 3.0) as f32,
                    _ => ((g.next() * 12.0).floor() * 0.5) as f32, // ties
                })
                .collect();
            let t = Truncation {
                top_k: [0, 1, 3, 10, 40, 64][(g.next() * 6.0) as usize],
                top_p: [1.0, 0.2, 0.6, 0.9, 0.97][(g.next() * 5.0) as usize],
                min_p: [0.0, 0.0, 0.01, 0.3][(g.next() * 4.0) as usize],
                _pad: 0,
            };
            if t.is_off(v as u32) {
                continue;
            }
            let inv_t = [1.0f32, 2.0, 0.5][case % 3];
            let tau = reference_tau(&z, &t, inv_t);
            let want = z.iter().filter(|&&x| x >= tau).count() as u32;
            let units = 1 + (g.next() * 200.0) as usize;
            for got in [
                walk_strided::<1>(&z, units, t, inv_t),
                walk_strided::<2>(&z, units, t, inv_t),
                walk_strided::<8>(&z, units, t, inv_t),
            ] {
                total += 1;
                if let Some(count) = got {
                    certified += 1;
                    assert_eq!(count, want, "case {case}: {t:?}, {units} units");
                }
            }
        }
        std::eprintln!("{certified} of {total} certified");
        assert!(certified * 3 > total, "{certified} of {total} certified");
    }

    /// [`FirstOf`] as the GPU's warp searches (`device::truncate`): every count of a chunk of 32
    /// tested at once, the smallest hit taken.
    #[derive(Clone, Copy)]
    struct By32;

    impl FirstOf for By32 {
        fn first(self, lo: u32, hi: u32, hit: impl Fn(u32) -> bool) -> u32 {
            let mut base = lo;
            while base < hi {
                if let Some(j) = (base..(base + 32).min(hi)).filter(|&j| hit(j)).min() {
                    return j;
                }
                base += 32;
            }
            hi
        }
    }

    /// The walk as the GPU's warp runs it: the running sums added in order, then every count `j`
    /// rebuilt with [`KeptWalk::after`] and asked its verdict on value `j` (the first that does not
    /// take decides), 32 counts at a time as the warp does, with the first count at which the sum
    /// reached `top_p` carried over from earlier chunks.
    fn walk_by_counts(prefix: &[f32], beta: f32, t: Truncation, inv_t: f32, lse: f32, v: u32) -> Step {
        let n = prefix.len() as u32;
        let w0 = KeptWalk::new(t, inv_t, lse, v);
        let last = n.min(MAX_KEPT as u32);
        let zmax = prefix.first().copied().unwrap_or(f32::NEG_INFINITY);
        let tau_k = if t.top_k > 0 && t.top_k <= n { prefix[t.top_k as usize - 1] } else { f32::NEG_INFINITY };
        let mut cums = std::vec![0.0f32; n as usize];
        let (mut base, mut p_reached) = (0.0f32, (0u32, f32::NEG_INFINITY));
        for c in 0.. {
            let js: Vec<u32> = (32 * c..32 * c + 32).collect();
            let mut before = [0.0f32; 32];
            let mut s = base;
            for (l, &j) in js.iter().enumerate() {
                before[l] = s;
                if j < n {
                    s += w0.prob_at(j, prefix[j as usize], exp);
                    cums[j as usize] = s;
                }
            }
            if p_reached.0 == 0
                && let Some(&j) = js.iter().find(|&&j| j < n && cums[j as usize] >= t.top_p)
            {
                p_reached = (j + 1, prefix[j as usize]);
            }
            for (l, &j) in js.iter().enumerate() {
                if j > last {
                    break;
                }
                let (z, exhausted) = if j < n { (prefix[j as usize], false) } else { (beta, true) };
                let w = KeptWalk::after((t, inv_t, lse, v), j, zmax, before[l], tau_k, p_reached);
                match w.verdict(z, exhausted, exp) {
                    Verdict::Take => {}
                    Verdict::Uncertain => return Step::Uncertain,
                    Verdict::Decide => return w.decide_by(|i| (prefix[i as usize], cums[i as usize]), By32),
                }
            }
            base = s;
        }
        unreachable!()
    }

    #[test]
    fn the_walk_by_counts_is_the_sequential_walk() {
        let mut g = Mix(41);
        let (mut decided, mut states) = (0, 0);
        for case in 0..600 {
            let n = (g.next() * 320.0) as usize;
            let mut prefix: Vec<f32> = (0..n)
                .map(|_| match case % 3 {
                    0 => -(g.next() * 20.0) as f32,
                    1 => (g.next() * 2.0) as f32,
                    _ => ((g.next() * 8.0).floor() * 0.5) as f32, // ties
                })
                .collect();
            prefix.sort_by(|a, b| b.total_cmp(a));
            let beta = prefix.last().map_or(0.0, |&x| x - (g.next() as f32));
            let t = Truncation {
                top_k: [0, 1, 3, 31, 32, 33, 50, 64, 300][(g.next() * 9.0) as usize],
                top_p: [1.0, 0.1, 0.5, 0.9, 0.99, 0.999][(g.next() * 6.0) as usize],
                min_p: [0.0, 0.0, 0.01, 0.3][(g.next() * 4.0) as usize],
                _pad: 0,
            };
            let v = 100_000;
            if t.is_off(v) {
                continue;
            }
            let inv_t = [1.0f32, 2.0, 0.5][case % 3];
            // A log-sum-exp at least the prefix's (the rest of the row adds mass).
            let m = prefix.first().copied().unwrap_or(0.0);
            let lse = m * inv_t
                + (1.0 + g.next() as f32 * 3.0)
                + prefix.iter().map(|&x| exp((x - m) * inv_t)).sum::<f32>().ln();
            // The sequential walk, and its state after each take against the rebuilt one.
            let mut w = KeptWalk::new(t, inv_t, lse, v);
            let mut cums: Vec<f32> = Vec::new();
            let mut p_reached = (0u32, f32::NEG_INFINITY);
            let tau_k =
                if t.top_k > 0 && t.top_k as usize <= n { prefix[t.top_k as usize - 1] } else { f32::NEG_INFINITY };
            let sequential = loop {
                let j = cums.len();
                let rebuilt = KeptWalk::after(
                    (t, inv_t, lse, v),
                    j as u32,
                    prefix.first().copied().unwrap_or(f32::NEG_INFINITY),
                    w.mass(),
                    tau_k,
                    p_reached,
                );
                assert_eq!(rebuilt, w, "case {case}: state after {j} takes");
                states += 1;
                let (x, exhausted) = if j < n { (prefix[j], false) } else { (beta, true) };
                match w.next(x, exhausted, exp, |i| (prefix[i as usize], cums[i as usize])) {
                    Step::More => {
                        cums.push(w.mass());
                        if p_reached.0 == 0 && w.mass() >= t.top_p {
                            p_reached = (cums.len() as u32, x);
                        }
                    }
                    done => break done,
                }
            };
            decided += matches!(sequential, Step::Kept { .. }) as u32;
            assert_eq!(walk_by_counts(&prefix, beta, t, inv_t, lse, v), sequential, "case {case}: {t:?}, n = {n}");
        }
        std::eprintln!("{decided} rows decided, {states} states compared");
        assert!(decided > 200 && states > 10_000, "{decided} decided, {states} states");
    }

    #[test]
    fn exhausted_lists_are_uncertain_and_ties_at_the_bound_are_never_certified() {
        // All tokens equal: top-k = 3 keeps all of them (ties), which no small list can prove.
        let z = [1.0f32; 64];
        let t = Truncation { top_k: 3, ..Truncation::NONE };
        assert!(walk::<4>(&z, 8, t, 1.0).is_none());
        // A unit of one token per list holds everything: certified, all tied tokens kept.
        let (_, count) = walk::<1>(&z, 1, t, 1.0).expect("one token per unit is complete");
        assert_eq!(count, 64);
    }

    /// The walk over a complete prefix (every token listed: `β = −∞`) with a given `lse`.
    fn walk_prefix(prefix: &[f32], t: Truncation, inv_t: f32, lse: f32) -> Step {
        let mut w = KeptWalk::new(t, inv_t, lse, 100_000);
        let mut cums: Vec<f32> = Vec::new();
        let mut j = 0;
        loop {
            let (x, exhausted) = if j < prefix.len() { (prefix[j], false) } else { (f32::NEG_INFINITY, true) };
            match w.next(x, exhausted, exp, |i| (prefix[i as usize], cums[i as usize])) {
                Step::More => {
                    cums.push(w.mass());
                    j += 1;
                }
                done => return done,
            }
        }
    }

    #[test]
    fn min_p_comes_before_top_k_and_top_p() {
        // Issue 56's row (vLLM's V1 order): probabilities [0.5, 0.3, 0.1, 0.1], top-p 0.6, min-p
        // 0.25. Min-p keeps {0, 1} (0.1 < 0.25 · 0.5); top-p over their renormalized mass keeps
        // {0} (0.5 / 0.8 ≥ 0.6). Min-p last would keep {0, 1}.
        let prefix: Vec<f32> = [0.5f32, 0.3, 0.1, 0.1].iter().map(|q| q.ln()).collect();
        let t = Truncation { top_p: 0.6, min_p: 0.25, ..Truncation::NONE };
        assert!(matches!(walk_prefix(&prefix, t, 1.0, 0.0), Step::Kept { count: 1, .. }));
        assert_eq!(reference_tau(&prefix, &t, 1.0), prefix[0]);
        // Top-p alone keeps {0, 1}; with top-k 3 as well, over {0, 1, 2}'s mass 0.9: 0.5 < 0.54,
        // 0.8 ≥ 0.54 → {0, 1}; min-p 0.25 then cuts the block to {0, 1}: 0.5 / 0.8 → {0}.
        let p_only = Truncation { top_p: 0.6, ..Truncation::NONE };
        assert!(matches!(walk_prefix(&prefix, p_only, 1.0, 0.0), Step::Kept { count: 2, .. }));
        let kp = Truncation { top_k: 3, top_p: 0.6, ..Truncation::NONE };
        assert!(matches!(walk_prefix(&prefix, kp, 1.0, 0.0), Step::Kept { count: 2, .. }));
        let kpm = Truncation { top_k: 3, top_p: 0.6, min_p: 0.25, _pad: 0 };
        assert!(matches!(walk_prefix(&prefix, kpm, 1.0, 0.0), Step::Kept { count: 1, .. }));
        for t in [t, p_only, kp, kpm] {
            let count = match walk_prefix(&prefix, t, 1.0, 0.0) {
                Step::Kept { count, .. } => count as usize,
                other => panic!("{other:?}"),
            };
            let tau = reference_tau(&prefix, &t, 1.0);
            assert_eq!(count, prefix.iter().filter(|&&z| z >= tau).count(), "{t:?}");
        }
    }

    #[test]
    fn a_row_whose_lse_is_infinite_keeps_its_first_entry_with_all_the_mass() {
        // Issue 56: a `+∞` logit (or `z/T` past f32 at a tiny temperature) makes `lse = +∞`; the
        // probabilities `exp(z/T − lse)` were NaN and top-p never decided. All the mass is the
        // first entry's: every truncation keeps it (and its ties), with mass 1.
        let prefix = [f32::INFINITY, f32::INFINITY, 3.0, 2.0, 1.0];
        for t in [
            Truncation { top_p: 0.9, ..Truncation::NONE },
            Truncation { top_k: 3, top_p: 0.5, ..Truncation::NONE },
            Truncation { min_p: 0.1, ..Truncation::NONE },
            Truncation { top_k: 4, top_p: 0.99, min_p: 0.5, _pad: 0 },
        ] {
            assert_eq!(walk_prefix(&prefix, t, 1.0, f32::INFINITY), Step::Kept { count: 2, mass: 1.0 }, "{t:?}");
        }
        // At T = 1e-38 (z/T overflows): the largest z alone, mass 1.
        let tiny = [5.0f32, 4.9, 4.0, -1.0];
        let t = Truncation { top_k: 3, top_p: 0.9, ..Truncation::NONE };
        assert_eq!(walk_prefix(&tiny, t, 1e38, f32::INFINITY), Step::Kept { count: 1, mass: 1.0 });
    }
}
