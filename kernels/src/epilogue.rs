//! The tile epilogue: logits → transformed, perturbed scores → the tile's [`Candidate`].
//!
//! The GPU kernels and the CPU backend call the same functions here, so both apply the same transform
//! to the same noise and merge with the same rule; they differ only in how the logits were summed.

use crate::candidate::Candidate;
use crate::noise::{RowNoise, gumbel_bound, gumbel_of, select_draw};

/// `$body` once for each compile-time `$i < $n` (`$n ≤ 8`, a constant after monomorphization), as
/// separate blocks: a loop with a Philox call per iteration is too large for LLVM to unroll by itself,
/// and a rolled loop would index the group arrays in local memory on the GPU.
macro_rules! for_each {
    ($i:ident < $n:expr, $body:block) => {
        for_each!(@ $i, $n, $body, 0, 1, 2, 3, 4, 5, 6, 7)
    };
    (@ $i:ident, $n:expr, $body:block, $($k:literal),*) => {
        $( {
            const $i: usize = $k;
            if $i < $n $body
        } )*
    };
}

/// Temperatures below this (the subnormal ones, `0 < T < 2⁻¹²⁶ ≈ 1.18e-38`) decode greedily, as
/// `T = 0` does: there `T · gumbel` would be a subnormal with too few bits to rank anything, and the
/// distribution is the argmax up to ties of subnormal logits.
pub const MIN_SAMPLING_TEMPERATURE: f32 = f32::MIN_POSITIVE;

/// The per-row logit transform applied before the noise is added.
///
/// Sampling from `softmax(y / T)` is `argmax_i (y_i / T + g_i)`, and any positive multiple of that
/// score ranks the same. The score is computed as `y · s + g · n` with `s / n = 1 / T`, chosen so that
/// it cannot overflow for any finite logit and any finite noise:
///
/// | temperature | `s` (logit scale) | `n` (noise scale) | score |
/// |---|---|---|---|
/// | `T ≥ 1` | `fl(1/T)` ≤ 1 | 1 | `y · fl(1/T) + g` |
/// | `MIN_SAMPLING_TEMPERATURE ≤ T < 1` | 1 | `T` | `y + T · g` (= `T · (y/T + g)`) |
/// | `T = 0` or `0 < T < MIN_SAMPLING_TEMPERATURE` | 1 | 0 (greedy, no noise) | `y` |
/// | a scored row ([`Transform::noiseless`]), `T > 0` | `min(fl(1/T), 1)` | 0 (no noise) | `y · s` |
///
/// So a finite logit always gives a finite score (`|y · s| ≤ |y|` and `|g · n| < 2¹⁰³`, and a sum
/// below `f32::MAX + 2¹⁰³` rounds to at most `f32::MAX`), `±∞` gives `±∞` and NaN gives NaN. The
/// previous form `y · (1/T) + g` overflowed to `+∞` for `|y| > T · f32::MAX` (two such logits tied
/// and the lower index won) and `1/T` itself overflowed below `T ≈ 2.9e-39`. For `T ≥ 1` the score is
/// bit-identical to that form; for `T < 1` it is the same score multiplied by `T` (one rounding of
/// `T · g` instead of one of `y · fl(1/T)`), so the reported winning score is
/// `min(T, 1) · (y / T + g)`.
///
/// `#[repr(C)]`, 8 bytes: embedded in the kernels' parameter structs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transform {
    /// `fl(1/T)` (`+∞` when greedy, `T = 0` included); the logit scale is `min(inv_temperature, 1)`.
    /// The benchmark baselines read it as `1/T`.
    pub inv_temperature: f32,
    /// The noise scale `n`: 1 for `T ≥ 1`, `T` below, 0 for greedy decoding and for a scored row
    /// ([`Self::noiseless`]): no noise drawn.
    pub noise_scale: f32,
}

impl Transform {
    /// The transform for temperature `t`, which must be finite and ≥ 0 (the host validates it);
    /// `t = 0` (either sign) and `t < MIN_SAMPLING_TEMPERATURE` are greedy.
    #[inline]
    pub fn from_temperature(t: f32) -> Self {
        if !(t >= MIN_SAMPLING_TEMPERATURE) {
            // T = ±0, subnormal T (and, defensively, NaN or negative T): greedy.
            Self { inv_temperature: f32::INFINITY, noise_scale: 0.0 }
        } else if t < 1.0 {
            Self { inv_temperature: 1.0 / t, noise_scale: t }
        } else {
            Self { inv_temperature: 1.0 / t, noise_scale: 1.0 }
        }
    }

    /// The transform of a row that is scored and not sampled (`GpuBackend::score_device`): the
    /// temperature's `1/T` for the log-probabilities, and no noise (its candidate, the argmax of
    /// `y · min(1/T, 1)`, is the scoring pass's scratch: no sample is returned). A greedy
    /// temperature stays greedy.
    #[inline]
    pub fn noiseless(t: f32) -> Self {
        Self { noise_scale: 0.0, ..Self::from_temperature(t) }
    }

    /// Whether this is greedy decoding (`1/T = +∞`: the argmax of the logits, log-probability 0,
    /// no processed distribution; the noise is not drawn).
    #[inline(always)]
    pub fn is_greedy(&self) -> bool {
        self.inv_temperature == f32::INFINITY
    }

    /// Whether the epilogue draws no noise: greedy decoding, or a row that is only scored
    /// ([`Self::noiseless`]), whose argmax of the logits nothing reads.
    #[inline(always)]
    pub fn draws_no_noise(&self) -> bool {
        self.noise_scale == 0.0
    }

    /// The logit scale `s = min(1/T, 1)` (loop-invariant: computed once per tile by the compiler).
    #[inline(always)]
    pub fn logit_scale(&self) -> f32 {
        self.inv_temperature.min(1.0)
    }

    /// The perturbed score `y · s + g · n` of one logit given its noise (the epilogue passes noise 0
    /// when it draws none: greedy, where the score is the logit, or a scored row, `y · s`; a `-0.0`
    /// logit scores `+0.0`, which ranks the same).
    /// Two multiplies and an add, no select: the same cost as the former select + multiply + add.
    #[inline(always)]
    pub fn score(&self, logit: f32, noise: f32) -> f32 {
        logit * self.logit_scale() + noise * self.noise_scale
    }

    /// The temperature step of the logit pipeline for the log-probabilities: `z / T` as computed
    /// everywhere, `z · fl(1/T)` (meaningless for a greedy row, whose `1/T` is `+∞`; callers give it
    /// log-probability 0).
    #[inline(always)]
    pub fn scaled(&self, z: f32) -> f32 {
        z * self.inv_temperature
    }
}

/// Epilogue for four consecutive vocab entries `v0 .. v0 + 4` (`v0 % 4 == 0`) of one row: one Philox
/// call to screen them and one more per entry that could beat the candidate
/// ([`update_groups_above`]), entries at or beyond `vocab` skipped (never scored as 0).
///
/// **Pruned noise.** An entry's noise (two logarithms) is computed only when the entry could beat the
/// candidate: its score with the noise's upper bound [`gumbel_bound`] (a few integer and f32 operations
/// on the draw) is not below the candidate's score. Scores are monotone in the noise (`n ≥ 0`, and f32
/// multiplies and adds round monotonically), so a skipped entry's score is strictly below the
/// candidate's and [`Candidate::update`] would have left the candidate unchanged: the candidate after
/// every call is the one of [`update_group4_unpruned`], bit for bit (NaN and `−∞` candidates never skip:
/// `x < NaN` and `x < −∞` are false). Along a row the candidate rises, so most of a long row's noise is
/// skipped (a record among `j` draws has probability `1/j`).
#[inline(always)]
pub fn update_group4(
    cand: &mut Candidate,
    logits: [f32; 4],
    v0: u32,
    vocab: u32,
    noise: &RowNoise,
    transform: &Transform,
) {
    update_group4_above(cand, f32::NEG_INFINITY, logits, v0, vocab, noise, transform);
}

/// [`update_group4`] that also skips the entries whose bound is below `floor`, a score another unit's
/// candidate of the same row already holds (same transform and noise key), or `−∞` for none.
///
/// This unit's candidate may then miss entries, but only entries that lose to that other candidate,
/// so the row's merged candidate is the one of [`update_group4_unpruned`] bit for bit. Ties cannot be
/// lost: an entry is skipped only when even its bound is strictly below the floor. A NaN floor adds
/// nothing (`f32::max` ignores it: the screen is against the candidate alone); a NaN candidate keeps
/// winning (only a NaN replaces it).
#[inline(always)]
pub fn update_group4_above(
    cand: &mut Candidate,
    floor: f32,
    logits: [f32; 4],
    v0: u32,
    vocab: u32,
    noise: &RowNoise,
    transform: &Transform,
) {
    update_groups_above::<1>(cand, floor, &[logits], (v0, 0), vocab, noise, transform);
}

/// Most groups one [`update_groups_above`] call takes: the bits of its screening mask.
pub const MAX_GROUPS: usize = 8;

/// [`update_group4_above`] for `G` groups of one row at once: group `q` is vocab entries
/// `v0 + stride·q .. + 4` (`v0` and `stride` multiples of 4), its logits `logits[q]`. The candidate
/// afterwards is the one of `G` calls of [`update_group4_above`] (and so of [`update_group4_unpruned`])
/// bit for bit.
///
/// Two passes, so that the common case runs without a branch and the rare one exists once:
///
/// 1. **Screen** (unrolled, branch-free): each group's Philox words and unrefined distances, each
///    entry's score with its noise bound [`gumbel_bound`] against `lim = max(candidate, floor)` at
///    entry; an entry that could reach `lim` (or lies in a group with an extreme word, whose
///    distance needs the refinement) sets its bit in a `4·G`-bit mask. Entries past `vocab` never do.
/// 2. **Draw** (a loop over the set bits, lowest first): the entry's draw again ([`RowNoise::draw_at`],
///    refined where extreme), its bound against the candidate *now* (which may have risen), and only
///    then its two logarithms and [`Candidate::update`].
///
/// Exact: an entry left out in either pass has a score strictly below the candidate or the floor
/// at that point, and both only rise, so it loses to the row's final candidate; the candidate is the
/// maximum of the entries taken under a total order, whatever order they come in. On a GPU the screen
/// of `G` groups gives the scheduler `G` independent Philox chains, and the draw loop is one copy of
/// the two logarithms instead of one per entry (whose code, 4·`G` times over, overflowed the
/// instruction cache: docs/findings/26).
#[inline(always)]
// `for_each!` unrolls `Q` up to `MAX_GROUPS` behind `Q < G` tests; clippy checks the arms that never run.
#[allow(clippy::out_of_bounds_indexing)]
pub fn update_groups_above<const G: usize>(
    cand: &mut Candidate,
    floor: f32,
    logits: &[[f32; 4]; G],
    (v0, stride): (u32, u32),
    vocab: u32,
    noise: &RowNoise,
    transform: &Transform,
) {
    const { assert!(G >= 1 && G <= MAX_GROUPS) };
    if transform.draws_no_noise() {
        for_each!(Q < G, {
            for_each!(J < 4, {
                let v = v0 + stride * Q as u32 + J as u32;
                if v < vocab {
                    cand.update(transform.score(logits[Q][J], 0.0), v);
                }
            });
        });
        return;
    }
    // 1. Screen. One group (the column adapters' call) refines its extreme words right away and keeps
    // its draws for the second pass; wider passes draw again there.
    let lim = cand.score.max(floor);
    let mut need = 0u32;
    let mut kept = ([0u32; 4], [0.0f32; 4]);
    for_each!(Q < G, {
        let g0 = v0 + stride * Q as u32;
        let (x, t, extreme) = if G == 1 {
            let (x, t) = noise.draws4(g0 >> 2);
            kept = (x, t);
            (x, t, false)
        } else {
            noise.draws4_unrefined(g0 >> 2)
        };
        for_each!(J < 4, {
            let reach = !(transform.score(logits[Q][J], gumbel_bound(x[J], t[J])) < lim);
            let bit = (g0 + (J as u32) < vocab) & (extreme | reach);
            need |= (bit as u32) << (4 * Q + J);
        });
    });
    // 2. Draw.
    while need != 0 {
        let k = need.trailing_zeros();
        need &= need - 1;
        let v = v0 + stride * (k / 4) + k % 4;
        let y = pick(logits, k);
        let (x, t) = if G == 1 { select_draw(kept, k) } else { noise.draw_at(v) };
        if !(transform.score(y, gumbel_bound(x, t)) < cand.score.max(floor)) {
            cand.update(transform.score(y, gumbel_of(x, t)), v);
        }
    }
}

/// `logits[k / 4][k % 4]` by a tree of selects on the bits of `k` (five levels for 32 entries), with
/// compile-time indices only. A chain of `k / 4 == q` tests or a dynamic index would let LLVM turn the
/// pick into a jump table over an array in local memory (seen in the PTX: a 128-byte stack frame per
/// hidden-as-A kernel).
#[inline(always)]
fn pick<const G: usize>(logits: &[[f32; 4]; G], k: u32) -> f32 {
    let mut v = [0.0f32; 4 * MAX_GROUPS];
    for_each!(Q < G, {
        v[4 * Q] = logits[Q][0];
        v[4 * Q + 1] = logits[Q][1];
        v[4 * Q + 2] = logits[Q][2];
        v[4 * Q + 3] = logits[Q][3];
    });
    // Level `l` halves the entries by bit `l` of `k`; levels past the array's width (4·G) are left out.
    macro_rules! level {
        ($bit:literal, [$($i:literal),*]) => {
            if (1usize << $bit) < 4 * G {
                let odd = (k >> $bit) & 1 != 0;
                $( v[$i] = if odd { v[2 * $i + 1] } else { v[2 * $i] }; )*
            }
        };
    }
    level!(0, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
    level!(1, [0, 1, 2, 3, 4, 5, 6, 7]);
    level!(2, [0, 1, 2, 3]);
    level!(3, [0, 1]);
    level!(4, [0]);
    v[0]
}

/// [`update_group4`] with every entry's noise computed (no bound, no skip): the reference its
/// identity test compares against, and the Gumbel-max baseline over materialized logits (the way
/// FlashInfer's `sampling_from_logits` draws every entry's noise).
#[inline(always)]
pub fn update_group4_unpruned(
    cand: &mut Candidate,
    logits: [f32; 4],
    v0: u32,
    vocab: u32,
    noise: &RowNoise,
    transform: &Transform,
) {
    let g = if transform.draws_no_noise() { [0.0; 4] } else { noise.gumbel4(v0 >> 2) };
    let mut j = 0;
    while j < 4 {
        let v = v0 + j as u32;
        if v < vocab {
            cand.update(transform.score(logits[j], g[j]), v);
        }
        j += 1;
    }
}

/// Epilogue for `N` consecutive vocab entries starting at `v0` (`v0 % 4 == 0`, `N % 4 == 0`), as one
/// GPU lane holds them: constant indices only, so the logits stay in registers.
#[inline(always)]
pub fn update_aligned<const N: usize>(
    cand: &mut Candidate,
    logits: &[f32; N],
    v0: u32,
    vocab: u32,
    noise: &RowNoise,
    transform: &Transform,
) {
    let mut q = 0;
    while q < N / 4 {
        let group = [logits[4 * q], logits[4 * q + 1], logits[4 * q + 2], logits[4 * q + 3]];
        update_group4(cand, group, v0 + 4 * q as u32, vocab, noise, transform);
        q += 1;
    }
}

/// Epilogue for a tile of consecutive logits starting at `v0` (any `v0`, any length), as the CPU backend
/// holds them. Entries at or beyond `vocab` are skipped.
pub fn update_tile(cand: &mut Candidate, logits: &[f32], v0: u32, vocab: u32, noise: &RowNoise, transform: &Transform) {
    let mut i = 0usize;
    // Unaligned head, one entry at a time (same bits as the grouped path).
    while i < logits.len() && (v0 + i as u32) % 4 != 0 {
        let v = v0 + i as u32;
        if v < vocab {
            let g = if transform.draws_no_noise() { 0.0 } else { noise.gumbel_at(v) };
            cand.update(transform.score(logits[i], g), v);
        }
        i += 1;
    }
    // Aligned groups, `MAX_GROUPS` at a time where the slice allows (the screen-and-draw passes of the
    // GPU's hidden-as-A lanes, here with consecutive groups), then one at a time.
    while i + 4 * MAX_GROUPS <= logits.len() {
        let groups: [[f32; 4]; MAX_GROUPS] = core::array::from_fn(|q| {
            let k = i + 4 * q;
            [logits[k], logits[k + 1], logits[k + 2], logits[k + 3]]
        });
        update_groups_above(cand, f32::NEG_INFINITY, &groups, (v0 + i as u32, 4), vocab, noise, transform);
        i += 4 * MAX_GROUPS;
    }
    while i + 4 <= logits.len() {
        let group = [logits[i], logits[i + 1], logits[i + 2], logits[i + 3]];
        update_group4(cand, group, v0 + i as u32, vocab, noise, transform);
        i += 4;
    }
    while i < logits.len() {
        let v = v0 + i as u32;
        if v < vocab {
            let g = if transform.draws_no_noise() { 0.0 } else { noise.gumbel_at(v) };
            cand.update(transform.score(logits[i], g), v);
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    #[test]
    fn tile_epilogue_is_independent_of_alignment_and_split() {
        let noise = RowNoise { seed: 11, stream: 5, sample: 0 };
        let t = Transform::from_temperature(0.7);
        let logits: Vec<f32> = (0..103).map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.0).collect();
        let vocab = 100; // the last 3 entries are out of range
        let mut whole = Candidate::EMPTY;
        update_tile(&mut whole, &logits, 0, vocab, &noise, &t);
        for split in [1usize, 3, 5, 50, 99] {
            let mut a = Candidate::EMPTY;
            let mut b = Candidate::EMPTY;
            update_tile(&mut a, &logits[..split], 0, vocab, &noise, &t);
            update_tile(&mut b, &logits[split..], split as u32, vocab, &noise, &t);
            assert_eq!(a.merge(b), whole, "split {split}");
        }
        assert!(whole.index < vocab);
        let mut aligned = Candidate::EMPTY;
        for q in 0..25 {
            let chunk: &[f32; 4] = logits[4 * q..4 * q + 4].try_into().unwrap();
            update_aligned(&mut aligned, chunk, 4 * q as u32, vocab, &noise, &t);
        }
        assert_eq!(aligned, whole);
    }

    /// Xorshift64 words for the pruning tests.
    fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }

    /// A uniform value in `[-spread/2, spread/2)` from the top 53 bits of `r`.
    fn centered(r: u64, spread: f32) -> f32 {
        spread * (((r >> 11) as f64 / (1u64 << 53) as f64) as f32 - 0.5)
    }

    /// Special values, for [`mixed_logit`].
    const SPECIALS: [f32; 8] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, -f32::MAX, 0.0, -0.0, 1e-40];

    /// The identity tests' logit from word `r`: a special value (1 in 97), a coarse value (1 in 5: ties
    /// between entries and with the candidate), else uniform over `spread`.
    fn mixed_logit(r: u64, spread: f32) -> f32 {
        if r % 97 == 0 {
            SPECIALS[(r >> 8) as usize % SPECIALS.len()]
        } else if r % 5 == 0 {
            ((r >> 16) % 9) as f32 * 0.25
        } else {
            centered(r, spread)
        }
    }

    /// The floor tests' logit from word `r`: NaN (1 in 251), a coarse value (1 in 3), else uniform.
    fn floor_logit(r: u64, spread: f32) -> f32 {
        if r % 251 == 0 {
            f32::NAN
        } else if r % 3 == 0 {
            ((r >> 16) % 5) as f32 * 0.5
        } else {
            centered(r, spread)
        }
    }

    /// The best score of the units other than `u`: unit `u`'s floor.
    fn others_best(units: &[Candidate; 4], u: usize) -> f32 {
        (0..4).filter(|&o| o != u).map(|o| units[o].score).fold(f32::NEG_INFINITY, f32::max)
    }

    #[test]
    fn pruned_noise_gives_the_unpruned_candidate_bit_for_bit() {
        // Rows of groups fed to both epilogues from the same start; the candidate must agree after every
        // group (score bits and index). Logits: spread rows (most noise skipped), flat rows, ties, and
        // special values; temperatures on both sides of 1, subnormal-greedy, huge.
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let (mut skipped, mut computed) = (0u64, 0u64);
        for case in 0..3000u32 {
            let t = [1.0f32, 0.7, 1e-3, 1.7, 40.0, 0.0, 1e-39, 1e30][case as usize % 8];
            let transform = Transform::from_temperature(t);
            let noise = RowNoise { seed: next(), stream: next(), sample: case % 5 };
            let spread = [0.0f32, 0.5, 4.0, 30.0][(case / 8) as usize % 4];
            let vocab = 4 * 64 - (case % 3);
            let mut a = Candidate::EMPTY;
            let mut b = Candidate::EMPTY;
            if case % 7 == 3 {
                a = Candidate { score: (next() % 40) as f32 * 0.25, index: 7 };
                b = a;
            }
            for q in 0..64u32 {
                let mut y = [0.0f32; 4];
                for yj in y.iter_mut() {
                    *yj = mixed_logit(next(), spread);
                }
                if !transform.is_greedy() {
                    let (x, tt) = noise.draws4(q);
                    for j in 0..4 {
                        let up = transform.score(y[j], crate::noise::gumbel_bound(x[j], tt[j]));
                        if up < a.score { skipped += 1 } else { computed += 1 }
                    }
                }
                update_group4(&mut a, y, 4 * q, vocab, &noise, &transform);
                update_group4_unpruned(&mut b, y, 4 * q, vocab, &noise, &transform);
                assert_eq!((a.score.to_bits(), a.index), (b.score.to_bits(), b.index), "case {case} group {q}");
            }
        }
        // Not vacuous: both branches are taken many times.
        assert!(skipped > 100_000 && computed > 100_000, "skipped {skipped}, computed {computed}");
    }

    #[test]
    fn floors_from_other_units_keep_the_merged_candidate() {
        // Four units take turns on a row's groups (as the four lanes of a quad do, tile by tile), each
        // with the best score of the others as its floor after every round; their merge must be the
        // unpruned candidate of the whole row.
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        for case in 0..400u32 {
            let transform = Transform::from_temperature([1.0f32, 0.6, 2.5, 1e-4][case as usize % 4]);
            let noise = RowNoise { seed: next(), stream: next(), sample: 0 };
            let spread = [0.5f32, 3.0, 20.0][(case / 4) as usize % 3];
            let mut units = [Candidate::EMPTY; 4];
            let mut whole = Candidate::EMPTY;
            for round in 0..24u32 {
                let floors: [f32; 4] = core::array::from_fn(|u| others_best(&units, u));
                for u in 0..4u32 {
                    for k in 0..4u32 {
                        let group = (round * 4 + k) * 4 + u;
                        let mut y = [0.0f32; 4];
                        for yj in y.iter_mut() {
                            *yj = floor_logit(next(), spread);
                        }
                        let c = &mut units[u as usize];
                        update_group4_above(c, floors[u as usize], y, 4 * group, 1 << 20, &noise, &transform);
                        update_group4_unpruned(&mut whole, y, 4 * group, 1 << 20, &noise, &transform);
                    }
                }
            }
            let merged = units.iter().fold(Candidate::EMPTY, |a, &b| a.merge(b));
            assert_eq!((merged.score.to_bits(), merged.index), (whole.score.to_bits(), whole.index), "case {case}");
        }
    }

    #[test]
    fn screened_passes_give_the_unpruned_candidate_bit_for_bit() {
        // Rows in passes of G groups (strides 4 and 16, as the CPU's tiles and the GPU's hidden-as-A
        // lanes lay them out), from the same start as the unpruned epilogue over the same groups; the
        // candidates must agree after every pass. Same value mix as the per-group test, plus vocab ends
        // inside a pass.
        let mut next = xorshift(0x5bd1_e995_1b87_3593);
        for case in 0..1500u32 {
            let t = [1.0f32, 0.7, 1e-3, 1.7, 40.0, 0.0, 1e-39, 1e30][case as usize % 8];
            let transform = Transform::from_temperature(t);
            let noise = RowNoise { seed: next(), stream: next(), sample: case % 3 };
            let spread = [0.0f32, 0.5, 4.0, 30.0][(case / 8) as usize % 4];
            let stride = if case % 2 == 0 { 4 } else { 16 };
            let vocab = 16 * 8 * 6 - (case % 37);
            let mut a = Candidate::EMPTY;
            let mut b = Candidate::EMPTY;
            if case % 7 == 3 {
                a = Candidate { score: (next() % 40) as f32 * 0.25, index: 7 };
                b = a;
            }
            for pass in 0..6u32 {
                let v0 = pass * stride * 8;
                let y: [[f32; 4]; 8] = core::array::from_fn(|_| core::array::from_fn(|_| mixed_logit(next(), spread)));
                if case % 3 == 0 {
                    // An odd pass width: three groups.
                    let y3 = [y[0], y[1], y[2]];
                    update_groups_above(&mut a, f32::NEG_INFINITY, &y3, (v0, stride), vocab, &noise, &transform);
                    for (q, g) in y3.iter().enumerate() {
                        update_group4_unpruned(&mut b, *g, v0 + stride * q as u32, vocab, &noise, &transform);
                    }
                } else {
                    update_groups_above(&mut a, f32::NEG_INFINITY, &y, (v0, stride), vocab, &noise, &transform);
                    for (q, g) in y.iter().enumerate() {
                        update_group4_unpruned(&mut b, *g, v0 + stride * q as u32, vocab, &noise, &transform);
                    }
                }
                assert_eq!((a.score.to_bits(), a.index), (b.score.to_bits(), b.index), "case {case} pass {pass}");
            }
        }
    }

    #[test]
    fn screened_passes_refine_extreme_words() {
        // A group with an extreme upper-half word (found once by a search over this key's groups, 4 min in
        // a release build): its unrefined distance is not the draw's, and its refined noise exceeds the
        // bound computed from the unrefined one, so a screen trusting that bound would skip a logit
        // between the two. Such an entry must still win.
        let noise = RowNoise { seed: 0x0dd_ba11, stream: 0x5eed, sample: 1 };
        let (group, j) = (815_981_970u32, 1usize);
        let (x, t_raw, extreme) = noise.draws4_unrefined(group);
        let (_, t) = noise.draws4(group);
        let (g, b_raw) = (gumbel_of(x[j], t[j]), gumbel_bound(x[j], t_raw[j]));
        assert!(extreme && crate::noise::is_extreme(x[j]) && (x[j] as i32) < 0 && g > b_raw + 0.5, "{x:08x?}");
        // Candidate at 0; the entry's logit puts its unrefined bound 0.25 below it and its noise above.
        let mut y = [[-100.0f32; 4]; 8];
        y[(group % 8) as usize][j] = -(b_raw + 0.25);
        let v0 = 4 * (group - group % 8);
        let start = Candidate { score: 0.0, index: 0 };
        let t1 = Transform::from_temperature(1.0);
        let (mut a, mut b) = (start, start);
        update_groups_above(&mut a, f32::NEG_INFINITY, &y, (v0, 4), u32::MAX, &noise, &t1);
        for (q, g4) in y.iter().enumerate() {
            update_group4_unpruned(&mut b, *g4, v0 + 4 * q as u32, u32::MAX, &noise, &t1);
        }
        assert_eq!(b.index, 4 * group + j as u32, "the entry wins without pruning");
        assert_eq!((a.score.to_bits(), a.index), (b.score.to_bits(), b.index));
    }

    #[test]
    fn floors_hold_for_screened_passes() {
        // The quad of the hidden-as-A kernels: four units, each a pass of 8 groups at stride 16 per
        // round with the others' best as its floor; their merge is the unpruned candidate of the row.
        let mut next = xorshift(0x2127_599b_f432_5c37);
        for case in 0..300u32 {
            let transform = Transform::from_temperature([1.0f32, 0.6, 2.5, 1e-4][case as usize % 4]);
            let noise = RowNoise { seed: next(), stream: next(), sample: 0 };
            let spread = [0.5f32, 3.0, 20.0][(case / 4) as usize % 3];
            let mut units = [Candidate::EMPTY; 4];
            let mut whole = Candidate::EMPTY;
            for round in 0..12u32 {
                let floors: [f32; 4] = core::array::from_fn(|u| others_best(&units, u));
                for u in 0..4u32 {
                    let v0 = round * 128 + 4 * u;
                    let y: [[f32; 4]; 8] =
                        core::array::from_fn(|_| core::array::from_fn(|_| floor_logit(next(), spread)));
                    let c = &mut units[u as usize];
                    update_groups_above(c, floors[u as usize], &y, (v0, 16), 1 << 20, &noise, &transform);
                    for (q, g) in y.iter().enumerate() {
                        update_group4_unpruned(&mut whole, *g, v0 + 16 * q as u32, 1 << 20, &noise, &transform);
                    }
                }
            }
            let merged = units.iter().fold(Candidate::EMPTY, |a, &b| a.merge(b));
            assert_eq!((merged.score.to_bits(), merged.index), (whole.score.to_bits(), whole.index), "case {case}");
        }
    }

    #[test]
    fn greedy_ignores_noise_and_out_of_range_entries_never_win() {
        let noise = RowNoise { seed: 1, stream: 0, sample: 0 };
        let t = Transform::from_temperature(0.0);
        assert!(t.is_greedy());
        let mut c = Candidate::EMPTY;
        // Entry 3 has the largest logit but is outside a vocab of 3; out-of-range lanes are skipped,
        // not scored as 0 (which would beat the negative logits).
        update_group4(&mut c, [-3.0, -1.0, -2.0, 9.0], 0, 3, &noise, &t);
        assert_eq!(c, Candidate { score: -1.0, index: 1 });
    }

    #[test]
    fn scored_rows_draw_no_noise_but_keep_their_temperature() {
        // `Transform::noiseless`: a scoring call's row keeps 1/T for its log-probabilities (it is not
        // greedy) and takes the argmax of its logits (scaled by min(1/T, 1)) without drawing noise.
        let noise = RowNoise { seed: 5, stream: 2, sample: 0 };
        for t in [0.5f32, 1.0, 2.0] {
            let (plain, scored) = (Transform::from_temperature(t), Transform::noiseless(t));
            assert!(!scored.is_greedy() && scored.draws_no_noise() && !plain.draws_no_noise());
            assert_eq!(scored.inv_temperature.to_bits(), plain.inv_temperature.to_bits(), "T = {t}");
            assert_eq!(scored.scaled(3.0).to_bits(), plain.scaled(3.0).to_bits());
            let logits: Vec<f32> = (0..37).map(|i| ((i * 7919) % 37) as f32 * 0.25 - 4.0).collect();
            let best = (0..37).max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a))).unwrap();
            let mut c = Candidate::EMPTY;
            update_tile(&mut c, &logits, 0, 37, &noise, &scored);
            assert_eq!(c, Candidate { score: logits[best] * scored.logit_scale(), index: best as u32 }, "T = {t}");
        }
        // A greedy temperature stays greedy.
        for t in [0.0f32, 1e-40] {
            let (plain, scored) = (Transform::from_temperature(t), Transform::noiseless(t));
            assert_eq!(scored, plain);
            assert!(scored.is_greedy() && scored.draws_no_noise());
        }
    }

    fn winner(logits: &[f32], t: f32) -> Candidate {
        let noise = RowNoise { seed: 3, stream: 1, sample: 0 };
        let mut c = Candidate::EMPTY;
        update_tile(&mut c, logits, 0, logits.len() as u32, &noise, &Transform::from_temperature(t));
        c
    }

    #[test]
    fn tiny_temperatures_and_huge_logits_pick_the_right_token() {
        // Issue 11 item 4: 1/T overflowed (T = 1e-40, 1e-45) or y/T did (T = 1e-37, and y = 3e38 at
        // T = 0.5): ties at +inf went to the lower index, or inf·0 made a NaN.
        assert_eq!(winner(&[1.0, 5.0, 3.0], 1e-40).token(), 1);
        assert_eq!(winner(&[50.0, 100.0], 1e-37).token(), 1);
        assert_eq!(winner(&[0.0, 1.0], 1e-45).token(), 1);
        assert_eq!(winner(&[3.0e38, 3.2e38, -3.3e38], 0.5).token(), 1);
        assert_eq!(winner(&[f32::MAX, -f32::MAX, 1.0], 1e-30).token(), 0);
        assert_eq!(winner(&[-f32::MAX, -3.0e38], 0.25).token(), 1);
        // Every finite logit gives a finite score at every valid temperature.
        let noise = RowNoise { seed: 9, stream: 2, sample: 0 };
        let temps = [0.0, -0.0, 1e-45, 1e-40, f32::MIN_POSITIVE, 1e-37, 1e-20, 0.5, 1.0, 1.5, 1e20, 1e38, f32::MAX];
        for &t in &temps {
            let tr = Transform::from_temperature(t);
            assert!(tr.logit_scale() > 0.0 && tr.logit_scale() <= 1.0, "T = {t}");
            assert!(tr.noise_scale >= 0.0 && tr.noise_scale <= 1.0, "T = {t}");
            assert_eq!(tr.is_greedy(), t < MIN_SAMPLING_TEMPERATURE, "T = {t}");
            for &y in &[f32::MAX, -f32::MAX, 0.0, -0.0, 1e-45, 3.0e38, -1.0] {
                for v in 0..8 {
                    let g = if tr.is_greedy() { 0.0 } else { noise.gumbel_at(v) };
                    let s = tr.score(y, g);
                    assert!(s.is_finite(), "T = {t}, y = {y}: score {s}");
                }
            }
            assert_eq!(tr.score(f32::INFINITY, 1.0), f32::INFINITY);
            assert_eq!(tr.score(f32::NEG_INFINITY, 1.0), f32::NEG_INFINITY);
            assert!(tr.score(f32::NAN, 1.0).is_nan());
        }
        // T >= 1: bit-identical to the former y · fl(1/T) + g.
        for &(t, y, g) in &[(1.0f32, 2.5f32, 0.3f32), (1.7, -4.0, 1.25), (1e30, 3e38, -2.0)] {
            assert_eq!(Transform::from_temperature(t).score(y, g).to_bits(), (y * (1.0 / t) + g).to_bits());
        }
    }
}
