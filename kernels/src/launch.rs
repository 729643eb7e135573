//! The launch plan of a fused call: grid, block, shared memory, vocab ranges, stage balance and the
//! sizes of the buffers the launch writes, computed once from (variant, epilogue, B, V, the GPU's
//! multiprocessors and the kernel's occupancy) and read by the host's allocation, its check that
//! reused buffers fit, and the launch itself.

use crate::config::{Epilogue, FusedVariant, gemm_logits_ld};

/// Where a call's rows get their log-sum-exps (and so which kernels run): decided once per call
/// from its controls (the host's `SamplingParams::exact_logsumexp` and epilogue) and carried by its
/// [`LaunchPlan`], which the variant choice, the buffers and the launches read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LsePath {
    /// The fused pass's f32 log-masses merged over the vocab ranges (or no log-sum-exp at all).
    Masses,
    /// Exact log-masses without truncation: `fallback_logits` materializes the rows, the GEMM-fed
    /// kernels sample them, `exact_mass_rows` sums their [`ExactMass`](crate::exactmass::ExactMass)es
    /// and `reduce_rows_exact` reduces.
    Exact,
    /// Exact log-masses with truncation (top-k / top-p / min-p, top log-probabilities): no fused
    /// launch; `fallback_logits` materializes every row and `fallback_sample_exact` takes each one.
    ExactRows,
}

impl LsePath {
    /// The path of a call that asks for exact log-sum-exps (`exact`: asked, and something reads a
    /// log-sum-exp) with epilogue `epilogue`.
    pub const fn of(exact: bool, epilogue: Epilogue) -> Self {
        match (exact && epilogue.has_logprobs(), epilogue) {
            (false, _) => Self::Masses,
            (true, Epilogue::Truncate) => Self::ExactRows,
            (true, _) => Self::Exact,
        }
    }
}

/// One fused launch, planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchPlan {
    /// The kernel variant.
    pub variant: FusedVariant,
    /// Its epilogue.
    pub epilogue: Epilogue,
    /// Sample rows (`B·n`).
    pub rows: u32,
    /// Weight rows (the head's, or a vocab shard's).
    pub v: u32,
    /// Batch tiles.
    pub n_btiles: u32,
    /// Vocab ranges = candidates per row (persistent grid: `n_btiles · n_vranges ≤ SMs · per_sm`).
    pub n_vranges: u32,
    /// Ranges balanced to the pipeline stage ([`FusedVariant::balances_stages`]): the launch needs
    /// the handoff buffers ([`LaunchPlan::handoff_floats`], [`LaunchPlan::handoff_counters`]).
    pub balanced: bool,
    /// Where the rows' log-sum-exps come from ([`LaunchPlan::with_lse`]; [`LsePath::Masses`] from
    /// [`LaunchPlan::new`]).
    pub lse: LsePath,
}

impl LaunchPlan {
    /// The plan of `variant` with `epilogue` for `rows` sample rows of a `v`-row head on `sm_count`
    /// multiprocessors of `per_sm` resident blocks each; `balance` forces the stage-balanced ranges
    /// on (where the variant can) or off, `None` lets the variant choose.
    pub const fn new(
        variant: FusedVariant,
        epilogue: Epilogue,
        (rows, v): (u32, u32),
        (sm_count, per_sm): (u32, u32),
        balance: Option<bool>,
    ) -> Self {
        let n_btiles = variant.batch_tiles(rows);
        let n_vranges = variant.n_vranges(sm_count, per_sm, n_btiles, v);
        let tiles = v.div_ceil(variant.tile_v());
        let balanced = match balance {
            None => variant.balances_stages(epilogue, tiles, n_vranges, n_btiles),
            Some(on) => on && variant.can_balance_stages(epilogue, tiles, n_vranges, n_btiles),
        };
        Self { variant, epilogue, rows, v, n_btiles, n_vranges, balanced, lse: LsePath::Masses }
    }

    /// The plan with its rows' log-sum-exps from `lse`.
    pub const fn with_lse(self, lse: LsePath) -> Self {
        Self { lse, ..self }
    }

    /// Blocks of the grid: every (batch tile, vocab range).
    pub const fn grid(&self) -> u32 {
        self.n_btiles * self.n_vranges
    }

    /// Threads per block.
    pub const fn threads(&self) -> u32 {
        self.variant.threads()
    }

    /// Bytes of dynamic shared memory per block.
    pub const fn smem_bytes(&self) -> u32 {
        self.variant.smem_bytes(self.epilogue)
    }

    /// Floats of the logits a GEMM-fed launch reads (`rows × gemm_logits_ld(v)`, [`GemmLogitsParams`]);
    /// 0 for the other variants.
    ///
    /// [`GemmLogitsParams`]: crate::params::GemmLogitsParams
    pub const fn gemm_logits_floats(&self) -> usize {
        if self.variant.reads_gemm_logits() { self.rows as usize * gemm_logits_ld(self.v) as usize } else { 0 }
    }

    /// Candidates the launch writes (`rows × n_vranges`, 8 bytes each; `None` past `isize::MAX / 16`).
    pub const fn candidates(&self) -> Option<usize> {
        match (self.rows as usize).checked_mul(self.n_vranges as usize) {
            Some(n) if n <= isize::MAX as usize / 16 => Some(n),
            _ => None,
        }
    }

    /// 8-byte words of the log-masses the launch writes (two per candidate with log-probabilities or
    /// truncation, else none).
    pub const fn mass_words(&self) -> Option<usize> {
        match (self.epilogue.has_logprobs(), self.candidates()) {
            (false, _) => Some(0),
            (true, Some(n)) => Some(2 * n),
            (true, None) => None,
        }
    }

    /// Arrival counters (one per batch tile; at least one per row, so a buffer serves any call of
    /// up to `rows` rows).
    pub const fn counters(&self) -> usize {
        let (r, t) = (self.rows as usize, self.n_btiles as usize);
        if r > t { r } else { t }
    }

    /// Floats of the handoff slots a balanced launch needs: 2 per range boundary (one per consumer
    /// slot), 128 consumer threads' accumulators each (`FusedParams::handoff`); 0 unbalanced.
    pub const fn handoff_floats(&self) -> usize {
        if !self.balanced {
            return 0;
        }
        2 * self.n_vranges as usize * 128 * self.variant.handoff_floats_per_thread() as usize
    }

    /// Counters of the handoff slots (0 unbalanced).
    pub const fn handoff_counters(&self) -> usize {
        if self.balanced { 2 * self.n_vranges as usize } else { 0 }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::config::{
        D_ALIGN, FUSED_VARIANTS, KernelSet, MAX_DIM, TMA_MMA_TURNS_MAX_D, TMAT_TURNS_MAX_D, variant_for_batch,
    };

    #[test]
    fn only_gemm_fed_launches_need_logits_and_they_cover_every_row_at_an_aligned_pitch() {
        use crate::config::{GEMM_LOGITS, gemm_logits_ld};
        for v in [1, 3, 4, 1001, 3001, 128_256, 151_936, MAX_DIM] {
            let ld = gemm_logits_ld(v);
            assert!(ld >= v && ld % 4 == 0 && ld - v < 4, "V = {v}: ld {ld}");
            for rows in [1, 129, 300, 2048] {
                for e in Epilogue::ALL {
                    let plan = LaunchPlan::new(GEMM_LOGITS, e, (rows, v), (132, 2), None);
                    assert_eq!(plan.gemm_logits_floats(), rows as usize * ld as usize);
                    assert!(!plan.balanced);
                    for other in FUSED_VARIANTS.iter().filter(|f| !f.reads_gemm_logits()) {
                        assert_eq!(LaunchPlan::new(*other, e, (rows, v), (132, 1), None).gemm_logits_floats(), 0);
                    }
                }
            }
        }
    }

    #[test]
    fn the_log_sum_exp_path_follows_the_request_and_the_epilogue() {
        use crate::config::GEMM_LOGITS;
        assert_eq!(LsePath::of(true, Epilogue::Sample), LsePath::Masses, "nothing reads a log-sum-exp");
        assert_eq!(LsePath::of(true, Epilogue::LogProbs), LsePath::Exact);
        assert_eq!(LsePath::of(true, Epilogue::Truncate), LsePath::ExactRows);
        for e in Epilogue::ALL {
            assert_eq!(LsePath::of(false, e), LsePath::Masses);
        }
        let plan = LaunchPlan::new(GEMM_LOGITS, Epilogue::LogProbs, (16, 151_936), (132, 2), None);
        assert_eq!(plan.lse, LsePath::Masses);
        let exact = plan.with_lse(LsePath::Exact);
        assert_eq!(LaunchPlan { lse: LsePath::Masses, ..exact }, plan, "only the path differs");
    }

    #[test]
    fn the_handoff_slots_for_an_unknown_hidden_size_cover_every_hidden_size() {
        // `GpuBackend::alloc_samples` knows no D: it sizes the stage-balanced handoff slots by the
        // larger of the launches at the largest and the smallest D (one block per multiprocessor),
        // which must cover the launch of any D (the portable choice up to 64 rows depends on D, and
        // `tma_mma_n64t`'s slots are twice `tma_mma_n64`'s, four times `tma_mma_n16`'s).
        for b in 1..=2048 {
            for v in [1000, 32_768, 128_256, 151_936, 151_937] {
                for (e, set) in Epilogue::ALL.into_iter().flat_map(|e| KernelSet::ALL.map(|s| (e, s))) {
                    let slots = |d: u32| {
                        let plan =
                            LaunchPlan::new(variant_for_batch((b, d, v), e, set, 132), e, (b, v), (132, 1), None);
                        (plan.handoff_floats(), plan.handoff_counters())
                    };
                    let (big, small) = (slots(u32::MAX), slots(D_ALIGN));
                    let any = (big.0.max(small.0), big.1.max(small.1));
                    for d in [64, 2048, 4096, TMAT_TURNS_MAX_D, TMAT_TURNS_MAX_D + 1, TMA_MMA_TURNS_MAX_D + 1, 16384] {
                        let this = slots(d);
                        assert!(any.0 >= this.0 && any.1 >= this.1, "B = {b}, D = {d}, V = {v}, {e:?}, {set:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_plan_is_a_persistent_grid_with_buffers_for_its_rows() {
        for variant in FUSED_VARIANTS {
            for epilogue in [Epilogue::Sample, Epilogue::LogProbs, Epilogue::Truncate] {
                for (sms, per_sm) in [(132u32, 1u32), (132, 2), (78, 1), (1, 1)] {
                    for rows in [1u32, 3, 16, 64, 65, 128, 257, 1024] {
                        for v in [128u32, 1000, 32_000, 151_936, 262_144] {
                            if !variant.supports_vocab(v) {
                                continue;
                            }
                            let plan = LaunchPlan::new(variant, epilogue, (rows, v), (sms, per_sm), None);
                            let what = (variant.entry, epilogue, rows, v, sms, per_sm);
                            assert!(plan.n_btiles >= 1 && plan.n_vranges >= 1, "{what:?}");
                            assert!(plan.n_btiles * variant.block_b() >= rows, "{what:?}: the tiles cover the rows");
                            assert!(
                                plan.grid() <= (sms * per_sm).max(plan.n_btiles),
                                "{what:?}: {} blocks on {sms} x {per_sm}",
                                plan.grid()
                            );
                            assert_eq!(plan.candidates(), Some(rows as usize * plan.n_vranges as usize));
                            let words = plan.mass_words().unwrap();
                            assert_eq!(words == 0, !epilogue.has_logprobs(), "{what:?}");
                            assert!(plan.counters() >= plan.n_btiles as usize && plan.counters() >= rows as usize);
                            assert_eq!(plan.handoff_counters() == 0, !plan.balanced);
                            assert_eq!(plan.handoff_floats() == 0, !plan.balanced);
                            assert_eq!(plan.threads(), variant.threads());
                            assert_eq!(plan.smem_bytes(), variant.smem_bytes(epilogue));
                            // Forcing the balance off is whole tiles; forcing it on only where the
                            // variant can balance.
                            assert!(
                                !LaunchPlan::new(variant, epilogue, (rows, v), (sms, per_sm), Some(false)).balanced
                            );
                            let on = LaunchPlan::new(variant, epilogue, (rows, v), (sms, per_sm), Some(true));
                            let tiles = v.div_ceil(variant.tile_v());
                            assert_eq!(
                                on.balanced,
                                variant.can_balance_stages(epilogue, tiles, on.n_vranges, on.n_btiles),
                                "{what:?}"
                            );
                        }
                    }
                }
            }
        }
        // The largest shapes do not overflow the sizes.
        let big = LaunchPlan::new(FUSED_VARIANTS[0], Epilogue::LogProbs, (MAX_DIM, MAX_DIM), (1024, 32), None);
        assert!(big.candidates().is_some() && big.mass_words().is_some());
    }
}
