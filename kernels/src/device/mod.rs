//! Device code (nvptx64 only), organised by role as in CUTLASS 3:
//!
//! | module | role |
//! |---|---|
//! | `collective` | the math and warp/block collectives every role uses (`exp`, `ln`, butterfly merges, block sums), below all of them |
//! | [`schedule`] | tile scheduler: a block's batch tile and vocab range (persistent grid), thread coordinates |
//! | [`pipeline`] | shared-memory rings and their synchronization (`cp.async` groups, `mbarrier`s) |
//! | `handoff` | a cut tile's accumulators from one block to the next (stage-balanced vocab ranges) |
//! | [`producer`] | what fills a stage: the TMA producer warp, the `cp.async` block producer |
//! | [`mainloop`] | the MMA mainloops: `mma.sync` (portable), `wgmma` consumers (sm_90a) |
//! | [`fragment`] | fragment → logits adapters feeding the one lane epilogue (the no_std core's) |
//! | [`merge`] | the block merge: lanes' candidates → one per (row, vocab range) |
//! | [`reduce`] | the reduction: candidates → tokens (the fused kernel's last block; the standalone kernel) |
//! | `fused` | entry points of the fused kernels, one file per family, composing the roles |
//! | `rows` | the per-row view of a launch (`RowRef`), and the row expansion of launches with several samples per request |
//! | `adjust` | the sparse logit adjustments: adjusted tokens scored apart from the fused pass |
//! | `select` | the truncation's selection primitives: the shared entries area and its sort, radix selects over a row |
//! | `truncate` | top-k / top-p / min-p: the truncation step over the fused pass's top lists |
//! | `fallback` | the truncation's exact fallback: gathered rows, their logits, an exact sampler |
//! | `dot` | the warp dot product of the few logits recomputed outside the fused pass |
//! | `exact` | the exact log-sum-exp path: each row's exact log-masses over a call's materialized logits |
//! | `ranks` | the vocab-parallel merge of the ranks' gathered results (tensor parallelism) |
//! | `baselines`, `test_kernels` | benchmark baselines and test kernels (their own PTX module) |
//! | `ptx` | inline PTX: the only `asm!`, one instruction per function |
//!
//! Which entry point goes into which PTX module (portable, sm_90a, test) is a field of the kernel's
//! variant ([`crate::config::Module`]); the host's build step reads it.

/// Expands `$body` once per listed index, with `$i` a constant: arrays indexed by it (accumulators,
/// candidates) are then read with compile-time indices only and stay in registers.
macro_rules! unrolled {
    ($i:ident in [$($n:literal),*] $body:block) => {
        $( { const $i: usize = $n; $body } )*
    };
}

mod adjust;
mod baselines;
mod collective;
mod dot;
mod exact;
mod fallback;
mod fragment;
mod fused;
mod handoff;
mod mainloop;
mod merge;
mod pipeline;
mod producer;
mod ptx;
mod ranks;
mod reduce;
mod rows;
mod schedule;
mod select;
mod test_kernels;
mod truncate;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` aborts the kernel; nothing after it runs.
    unsafe { core::arch::nvptx::trap() }
}
