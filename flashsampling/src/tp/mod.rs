//! Tensor-parallel sampling over a vocab-sharded LM head, through NCCL.
//!
//! Rank `r` holds global vocab rows `offset_r .. offset_r + rows_r` of the weight (`[V_r, D]`, the
//! layout of Megatron's and vLLM's vocab-parallel LM heads; the last shard may run past V: padding,
//! never scored). Each rank runs the fused kernel on its shard with its global offset — the noise of
//! token `i` is keyed by `i` — so its per-row winner is the whole head's restricted to its rows
//! ([`crate::shard`]). The ranks then all-gather, per row, only that result: token and score
//! (8 bytes), plus four floats with log-probabilities — never the logits — and every rank merges the
//! gathered results in rank order ([`flashsampling_kernels::ranks`], the `merge_ranks` kernel). Every
//! rank ends with the same tokens on its device, bit-identical to the one-GPU call with the same
//! seeds, streams and sample indices. (On the portable path from 129 rows a one-GPU call runs the
//! GEMM-fed kernels, whose logits are cuBLAS's sums; ranks keep the fused kernels, so there the
//! ranks equal the one-GPU call with that fused kernel forced, and its default up to f32 near-ties.)
//!
//! **Top-k / top-p / min-p** (issue 13's certificate, over ranks): each rank's truncation step ends
//! early and exports, per sample row, its shard's [`RANK_TOP`](flashsampling_kernels::truncate::RANK_TOP)
//! largest processed logits with the bound of the rest; the exchange carries them after the
//! result words (`B·n × 1.5 KiB` per rank), and every rank runs the truncation step over the
//! merged lists with the merged log-sum-exp: the same certified rows, sampled with the same noise.
//! Rows the lists cannot certify go to the exact fallback: the host reads their count (one wait on
//! the truncation step, with the deadline; the only host round trip of a truncating call), each
//! rank computes their raw logits over its shard, those are all-gathered (`count × V_max` floats
//! per rank) and assembled into whole rows, and every rank samples them as on one GPU. Raw
//! log-probabilities come from the merged raw log-sum-exp (a changed token's raw logit is its
//! processed one: no soft-cap). Top log-probabilities come from the same merged lists or the
//! fallback's assembled rows. Not composed yet (typed [`Error::Unsupported`] before any launch):
//! sparse adjustments with truncation or top log-probabilities, raw log-probabilities with
//! truncation and a soft-cap; a shard entirely past V is [`Error::InvalidShards`] for a truncating
//! call.
//!
//! Two ways to run it:
//! - [`TpGroup`]: one process driving several local GPUs (tests, benchmarks);
//! - [`TpRank`]: one process per GPU, with rank, world size and the NCCL id ([`CommId`]) supplied by
//!   the caller — how serving engines run (`examples/tp_ranks.rs` starts two processes).
//!
//! **Failures do not hang.** Communicators are created non-blocking and every wait has a deadline
//! ([`TpRank::set_timeout`], default [`DEFAULT_TIMEOUT`]): a peer that never joins, fails before the
//! exchange or dies makes the others return [`Error::Timeout`] (their communicator is then aborted
//! and every later call returns [`Error::CommAborted`]). Inputs are validated on every rank before
//! any launch, and shard layouts (tiling, D, dtype, V) are checked across ranks when the group is
//! formed, so a bad layout is a typed error on every rank.
//!
//! **NVLink multicast.** Keep `NCCL_NVLS_ENABLE=0` in the environment of every process that uses
//! this module on machines where NVLink SHARP must stay off (this project's GPU hosts); the library
//! never creates multicast objects itself.

mod comm;
mod group;
mod layout;
mod rank;

use comm::*;
pub use comm::{BorrowedNccl, Collective, CommId, CudarcComm, nccl_available};
pub use group::TpGroup;
use layout::*;
pub use layout::{MAX_RANKS, ShardLayout};
pub use rank::TpRank;

use std::ffi::{CStr, c_void};
use std::time::{Duration, Instant};

use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
    sys as cu,
};
use cudarc::nccl::sys as nccl;
use flashsampling_kernels::config::{MAX_DIM, MERGE_RANKS_ENTRY, MERGE_RANKS_EXACT_ENTRY, MERGE_RANKS_THREADS};
use flashsampling_kernels::params::MergeRanksParams;
use flashsampling_kernels::truncate::RANK_UNITS;

use crate::error::{Error, Result};
use crate::gpu::{
    ByValue, DeviceMatrix, DeviceSamples, GpuBackend, SHARD_OFFSET_ALIGN, VocabRange, check_rank_truncation,
};
use crate::params::{Element, ElementType, LogProbs, Matrix, SamplingParams};
use crate::{Samples, VocabShard};

/// How long a rank waits for its peers (joining the group, the exchange) before it gives up.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
