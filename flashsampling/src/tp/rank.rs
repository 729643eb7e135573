//! One rank of a vocab-parallel sampler ([`TpRank`]): its calls, the exchange of per-row results and
//! the truncation's fallback rows over NCCL.

use super::*;
use crate::ScoreOutputs;
use crate::gpu::{
    EXACT_RECORD_WORDS, RANK_WORDS_LOGPROBS, RANK_WORDS_SCORE, ScoreTargets, exact_records_at, rank_list_words,
    score_launch_rows, scoring_params,
};
use flashsampling_kernels::launch::LsePath;
use flashsampling_kernels::params::RowExact;

/// Words per row and rank in the exchange: tokens, scores, and with log-probabilities the processed
/// and raw log-probabilities and log-sum-exps.
pub(super) const WORDS_PLAIN: usize = 2;

pub(super) const WORDS_LOGPROBS: usize = RANK_WORDS_LOGPROBS;

/// Exchange words per row of a scoring call: the log-probability words, then the given token's
/// processed and raw log-probabilities over the shard.
pub(super) const WORDS_SCORE: usize = RANK_WORDS_SCORE;

/// One rank's device buffers of the exchange.
pub(super) struct Exchange {
    /// This rank's results `[K, rows]` (the fused launch writes them), with truncation followed by
    /// its top lists `[rows, RANK_UNITS]` (the truncation step's export).
    pub(super) staging: CudaSlice<u32>,
    /// Every rank's results, `G` blocks like `staging` (the all-gather writes them).
    pub(super) gathered: CudaSlice<u32>,
}

/// One rank's device buffers of a truncating call's fallback: the listed rows' raw logits over the
/// shard, every rank's (all-gathered), and the whole rows assembled from them.
pub(super) struct FallbackExchange {
    /// `[count, v_max]` (this rank's shard uses `v_r` columns of each row's `v_max`).
    pub(super) local: CudaSlice<f32>,
    /// `G` blocks like `local`.
    pub(super) gathered: CudaSlice<f32>,
    /// `[count, V]`.
    pub(super) full: CudaSlice<f32>,
    /// Rows they hold.
    pub(super) rows: usize,
}

/// One rank of a vocab-parallel sampler: its GPU, its shard's layout and its NCCL communicator.
pub struct TpRank {
    pub(super) gpu: GpuBackend,
    pub(super) comm: Box<dyn Collective>,
    pub(super) rank: usize,
    pub(super) world: usize,
    pub(super) layout: ShardLayout,
    /// Every rank's layout (rank order).
    pub(super) layouts: Vec<ShardLayout>,
    pub(super) exchange: Option<Exchange>,
    pub(super) fallback: Option<FallbackExchange>,
    /// The ranks' merge kernels: `merge_ranks`, and on the exact log-sum-exp path `merge_ranks_exact`.
    pub(super) merge: (CudaFunction, CudaFunction),
    pub(super) done: CudaEvent,
    pub(super) timeout: Duration,
}

impl std::fmt::Debug for TpRank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TpRank")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("layout", &self.layout)
            .finish()
    }
}

/// A call's shape as a rank sees it.
pub(super) struct CallShape {
    /// Sample rows `B·n`.
    pub(super) rows: usize,
    /// Exchange words per row.
    pub(super) k: usize,
    /// Whether the ranks exchange top lists (top-k / top-p / min-p).
    pub(super) truncating: bool,
    /// A scoring call's given tokens and outputs (issue 52; `k` = [`WORDS_SCORE`]).
    pub(super) targets: Option<ScoreTargets>,
    /// The exact path ([`SamplingParams::exact_logsumexp`] with log-probabilities): after the `K`
    /// words each row's exact-path record ([`flashsampling_kernels::params::RowExact`]).
    pub(super) exact: bool,
}

impl CallShape {
    /// 32-bit words each rank sends: `K` per row, and with truncation (`K` padded to whole
    /// six-word units: [`rank_list_words`]) each row's [`RANK_UNITS`] six-word units; on the exact
    /// path the rows' records after the `K` words ([`Self::exact_at`]).
    pub(super) fn words(&self) -> usize {
        match (self.truncating, self.exact) {
            (true, _) => self.rows * (self.lists() + WORDS_LOGPROBS * RANK_UNITS),
            (false, true) => self.exact_at() + EXACT_RECORD_WORDS * self.rows,
            (false, false) => self.rows * self.k,
        }
    }

    /// Where the exact path's records start in a rank's words ([`exact_records_at`]).
    pub(super) fn exact_at(&self) -> usize {
        exact_records_at(self.rows, self.k)
    }

    /// Words per row before a truncating call's lists ([`rank_list_words`]).
    pub(super) fn lists(&self) -> usize {
        rank_list_words(self.targets.is_some())
    }
}

impl TpRank {
    /// Joins the group as rank `rank` of `world` on GPU `ordinal` (one process per GPU): every rank
    /// calls it with the same `id`, in any order, within `timeout` of each other. The ranks'
    /// layouts are then exchanged and checked (they must tile the vocabulary in rank order, agree on
    /// V and D): a bad layout is the same typed error on every rank.
    pub fn new(
        ordinal: usize,
        rank: usize,
        world: usize,
        id: &CommId,
        layout: ShardLayout,
        timeout: Duration,
    ) -> Result<Self> {
        ensure_nccl()?;
        if world == 0 || rank >= world || world > MAX_RANKS {
            return Err(Error::InvalidRank { rank, world });
        }
        let gpu = GpuBackend::new(ordinal)?;
        let comm = start_init(&gpu, rank, world, id)?;
        let mut me = Self::from_parts(gpu, Box::new(comm), rank, world, layout, timeout)?;
        let deadline = Instant::now() + timeout;
        wait_ready(&mut [&mut me.comm], deadline, "joining the NCCL group", timeout)?;
        let layouts = me.exchange_layouts(deadline)?;
        validate_layouts(&layouts)?;
        me.layouts = layouts;
        Ok(me)
    }

    /// Joins the group through the caller's communicator instead of one of its own: an engine that
    /// already has an NCCL communicator for its tensor-parallel ranks passes it ([`BorrowedNccl`]
    /// for a raw `ncclComm_t`, [`CudarcComm`] for cudarc's), or any all-gather it has
    /// ([`Collective`]). `gpu` is this rank's backend (its device and stream: the engine's stream
    /// through [`GpuBackend::on_stream`], so that the exchange is ordered with the engine's work).
    /// Every rank calls it together, with its own rank and the same `world`; the ranks' layouts are
    /// then exchanged and checked as in [`Self::new`], through `collective`.
    ///
    /// ```no_run
    /// use flashsampling::{BorrowedNccl, GpuBackend, ShardLayout, TpRank};
    /// # let (raw_comm, rank, world) = (std::ptr::null_mut(), 0, 2);
    /// # let layout = ShardLayout::even(151_936, 4096, world, 64)?[rank];
    /// // `raw_comm`: the engine's ncclComm_t for this rank (e.g. vLLM's PyNcclCommunicator.comm).
    /// // SAFETY: a live communicator of this device, rank and world, used by nothing else meanwhile.
    /// let comm = unsafe { BorrowedNccl::new(raw_comm) };
    /// let gpu = GpuBackend::new(rank)?;
    /// let tp = TpRank::with_collective(gpu, Box::new(comm), rank, world, layout, std::time::Duration::from_secs(60))?;
    /// # Ok::<(), flashsampling::Error>(())
    /// ```
    pub fn with_collective(
        gpu: GpuBackend,
        collective: Box<dyn Collective>,
        rank: usize,
        world: usize,
        layout: ShardLayout,
        timeout: Duration,
    ) -> Result<Self> {
        if world == 0 || rank >= world || world > MAX_RANKS {
            return Err(Error::InvalidRank { rank, world });
        }
        if let Some((their_rank, their_world)) = collective.rank_and_world()? {
            for (what, expected, actual) in
                [("the communicator's world size", world, their_world), ("the communicator's rank", rank, their_rank)]
            {
                if expected != actual {
                    return Err(Error::RankMismatch { rank, what, expected, actual });
                }
            }
        }
        let mut me = Self::from_parts(gpu, collective, rank, world, layout, timeout)?;
        let deadline = Instant::now() + timeout;
        let layouts = me.exchange_layouts(deadline)?;
        validate_layouts(&layouts)?;
        me.layouts = layouts;
        Ok(me)
    }

    pub(super) fn from_parts(
        gpu: GpuBackend,
        comm: Box<dyn Collective>,
        rank: usize,
        world: usize,
        layout: ShardLayout,
        timeout: Duration,
    ) -> Result<Self> {
        // The backend's own portable module: not loaded (nor decoded) a second time.
        let merge = (
            gpu.portable_module().load_function(MERGE_RANKS_ENTRY)?,
            gpu.portable_module().load_function(MERGE_RANKS_EXACT_ENTRY)?,
        );
        let done = gpu.context().new_event(None)?;
        let layouts = vec![layout];
        Ok(Self { gpu, comm, rank, world, layout, layouts, exchange: None, fallback: None, merge, done, timeout })
    }

    /// All-gathers every rank's layout words (blocking, with the deadline).
    pub(super) fn exchange_layouts(&mut self, deadline: Instant) -> Result<Vec<ShardLayout>> {
        let stream = self.gpu.stream().clone();
        let send = stream.clone_htod(&self.layout.words(self.rank, self.world))?;
        let mut recv = stream.alloc_zeros::<u64>(8 * self.world)?;
        {
            let (s, _s) = send.device_ptr(&stream);
            let (r, _r) = recv.device_ptr_mut(&stream);
            // SAFETY: 8 u64 sent, 8·G received, on this rank's stream.
            unsafe { self.comm.all_gather_words(s, r, 16, &stream) }?;
        }
        wait_ready(&mut [&mut self.comm], deadline, "exchanging shard layouts", self.timeout)?;
        self.done.record(&stream)?;
        self.wait_event(deadline, "exchanging shard layouts")?;
        let words = stream.clone_dtoh(&recv)?;
        words
            .chunks(8)
            .enumerate()
            .map(|(rank, w)| {
                let expected = self.layout.words(rank, self.world);
                // Magic, rank, world and dtype must match what this rank would send for `rank`.
                for (i, what) in
                    [(0, "protocol"), (1, "rank"), (2, "world size"), (7, "element type (1 = bf16, 2 = f16)")]
                {
                    if w[i] != expected[i] {
                        return Err(Error::RankMismatch {
                            rank,
                            what,
                            expected: expected[i] as usize,
                            actual: w[i] as usize,
                        });
                    }
                }
                let (offset, rows, vocab, d) = (w[3] as usize, w[4] as usize, w[5] as usize, w[6] as usize);
                Ok(ShardLayout { offset, rows, vocab, d, elem: self.layout.elem })
            })
            .collect()
    }

    /// Polls `done` until it completes or the deadline passes (then aborts the communicator).
    pub(super) fn wait_event(&mut self, deadline: Instant, what: &'static str) -> Result<()> {
        let start = Instant::now();
        loop {
            if self.comm.is_aborted() {
                return Err(Error::CommAborted);
            }
            // SAFETY: a live event of this rank's context.
            match unsafe { cu::cuEventQuery(self.done.cu_event()) } {
                cu::CUresult::CUDA_SUCCESS => return Ok(()),
                cu::CUresult::CUDA_ERROR_NOT_READY => {}
                e => return Err(Error::Driver(cudarc::driver::DriverError(e))),
            }
            if let Err(e) = self.comm.poll() {
                self.comm.abort();
                return Err(e);
            }
            if Instant::now() >= deadline {
                self.comm.abort();
                return Err(Error::Timeout { what, ms: self.timeout.as_millis() as u64 });
            }
            backoff(start.elapsed());
        }
    }

    /// How long waits for peers last (joining, the exchange, [`Self::synchronize`]).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// This rank's index.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the group.
    pub fn world(&self) -> usize {
        self.world
    }

    /// This rank's shard.
    pub fn layout(&self) -> ShardLayout {
        self.layout
    }

    /// This rank's GPU backend (its context and stream: allocate the shard, hidden states and
    /// outputs there).
    pub fn gpu(&self) -> &GpuBackend {
        &self.gpu
    }

    /// Samples: the fused kernel on this rank's shard, the all-gather of the per-row results and
    /// their merge, all on this rank's stream, asynchronous. Every rank of the group must call it
    /// with the same hidden states and parameters (the same batch); afterwards `out` holds the
    /// whole head's tokens (and log-probabilities) on every rank. Wait with [`Self::synchronize`]
    /// (which has a deadline) rather than synchronizing the stream directly, so that a failed peer
    /// is an error and not a hang. A call with top-k / top-p / min-p returns only after its
    /// truncation step (the host reads how many rows need the fallback, with the deadline) and,
    /// when some do, with their exchange enqueued.
    pub fn sample_device<T: Element>(
        &mut self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        mask: Option<&CudaView<'_, u32>>,
        out: &mut DeviceSamples,
    ) -> Result<()> {
        let call = self.launch_local(hidden, weight, params, mask, out, None)?;
        self.exchange(&call, out)
    }

    /// Scores one given token per row over the vocab-sharded head ([`GpuBackend::score_device`]
    /// over the ranks): each rank scores the tokens among its rows in its fused pass, the ranks
    /// exchange their shard's log-probabilities with the usual per-row results, and every rank's
    /// `scores` get the whole head's (the given token's shard's values rescaled to the merged
    /// log-sum-exps: within 1e-4 of one GPU's, as the log-probabilities of sampling over ranks are).
    /// Every rank calls it with the same hidden states, parameters and tokens; wait with
    /// [`Self::synchronize`]. `out` is the call's scratch and holds no results afterwards. With
    /// top-k / top-p / min-p (truncation's limits over ranks: [`Self::sample_device`]'s) each token
    /// is scored over the kept set the step over the merged lists certifies or the ranks' fallback
    /// finds. With top log-probabilities (`scores.top`) every rank gets the lists of the whole head
    /// (sampling's over ranks) and each token's rank, from the step over the merged lists where
    /// their sorted prefix holds every token before it, else from the ranks' fallback, which counts
    /// it over the assembled row. Either way a call of more rows than 256 MiB of fallback logits
    /// runs as launches of that many (every rank splits it alike). A token at or past V scores NaN
    /// (rank 0).
    #[allow(clippy::too_many_arguments)]
    pub fn score_device<T: Element>(
        &mut self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        tokens: &CudaView<'_, u32>,
        mask: Option<&CudaView<'_, u32>>,
        out: &mut DeviceSamples,
        scores: &mut ScoreOutputs<'_>,
    ) -> Result<()> {
        self.gpu.check_score_call(params, hidden.rows, tokens, scores)?;
        let p = scoring_params(params);
        let gpu = self.gpu.clone();
        let vocab = self.layout.vocab;
        // A long truncating call runs in launches as on one GPU: every rank splits the same call the
        // same way, so the exchanges pair up. Its checks come first (the same on every rank), so a
        // bad input enqueues nothing.
        if hidden.rows > score_launch_rows(&p, vocab, hidden.rows) {
            self.check_truncation(&p)?;
            let range = VocabRange { offset: self.layout.offset, vocab };
            gpu.validate_launch(hidden, weight, &p, mask, range)?;
        }
        gpu.score_in_launches((hidden, &p, tokens, mask), scores, (vocab, false), |h, pr, m, targets| {
            let call = self.launch_local(h, weight, pr, m, out, Some(targets))?;
            let result = self.exchange(&call, out);
            out.set_results_elsewhere();
            result
        })
    }

    /// The exchange of a staged call: the all-gather (once the communicator has taken it: it is
    /// non-blocking), then the merge into `out`.
    pub(super) fn exchange(&mut self, call: &CallShape, out: &mut DeviceSamples) -> Result<()> {
        let result = self.exchange_and_merge(call, out);
        // The call's end on `out` is after the merge (and the fallback), not the local launch.
        let left = self.gpu.leave(out);
        result.and(left)
    }

    /// [`Self::exchange`] without the fence.
    fn exchange_and_merge(&mut self, call: &CallShape, out: &mut DeviceSamples) -> Result<()> {
        self.enqueue_exchange(call)?;
        let deadline = Instant::now() + self.timeout;
        wait_ready(&mut [&mut self.comm], deadline, "the vocab-parallel exchange", self.timeout)?;
        self.launch_merge(call, out)?;
        if !call.truncating {
            return Ok(());
        }
        let count = self.fallback_rows(out)?;
        if count > 0 {
            self.fallback_local(count, out)?;
            self.enqueue_fallback_exchange(count)?;
            let deadline = Instant::now() + self.timeout;
            wait_ready(&mut [&mut self.comm], deadline, "the fallback's exchange", self.timeout)?;
            self.fallback_finish(count, out, call.targets)?;
        }
        Ok(())
    }

    /// Waits until this rank's last call finished, at most the timeout; a peer that does not take
    /// part in the exchange makes it [`Error::Timeout`] (and aborts the communicator).
    pub fn synchronize(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        self.wait_event(deadline, "the vocab-parallel exchange")
    }

    /// Validation and the rank-local launch into the exchange buffer.
    pub(super) fn launch_local<T: Element>(
        &mut self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        mask: Option<&CudaView<'_, u32>>,
        out: &mut DeviceSamples,
        targets: Option<ScoreTargets>,
    ) -> Result<CallShape> {
        if self.comm.is_aborted() {
            return Err(Error::CommAborted);
        }
        // After the last call on `out` if it ran on another stream (the padding-only branch below
        // writes `out` without the fused launch's own `enter`).
        self.gpu.enter(out)?;
        let l = self.layout;
        l.check_elem(self.rank, T::TYPE)?;
        if weight.rows != l.rows || weight.cols != l.d {
            return Err(Error::LengthMismatch {
                buffer: "rank's weight shard (rows)",
                expected: l.rows,
                actual: weight.rows,
            });
        }
        let rows = hidden.rows.checked_mul(params.n as usize).filter(|&r| r > 0 && r <= MAX_DIM as usize);
        let rows = rows.ok_or(Error::TooLarge {
            what: "sample rows (B × n)",
            value: hidden.rows * params.n as usize,
            max: MAX_DIM as usize,
        })?;
        let truncating = self.check_truncation(params)?;
        let k = match (targets, params.logprobs == LogProbs::Off && !truncating) {
            (Some(_), _) => WORDS_SCORE,
            (None, true) => WORDS_PLAIN,
            (None, false) => WORDS_LOGPROBS,
        };
        let lse = params.lse_path(l.vocab, targets.is_some());
        let exact = lse == LsePath::Exact;
        if lse == LsePath::ExactRows {
            return Err(Error::Unsupported {
                control: "exact log-sum-exps with top-k / top-p / min-p or top log-probabilities",
                path: "over tensor-parallel ranks yet",
            });
        }
        let call = CallShape { rows, k, truncating, targets, exact };
        if call.words() > u32::MAX as usize {
            return Err(Error::TooLarge {
                what: "exchange words per rank",
                value: call.words(),
                max: u32::MAX as usize,
            });
        }
        self.ensure_exchange(&call)?;
        let staging = self.exchange.as_mut().expect("allocated above");
        let (base, _guard) = staging.staging.device_ptr_mut(self.gpu.stream());
        let range = VocabRange { offset: l.offset, vocab: l.vocab };
        if l.offset >= l.vocab {
            // A shard entirely past V (padding only): no token, no mass.
            self.gpu.validate_launch(hidden, weight, params, mask, range)?;
            self.gpu.ensure_outputs(out, rows, k >= WORDS_LOGPROBS)?;
            let fill = [
                u32::MAX,
                f32::NEG_INFINITY.to_bits(),
                f32::NAN.to_bits(),
                f32::NAN.to_bits(),
                f32::NEG_INFINITY.to_bits(),
                f32::NEG_INFINITY.to_bits(),
                f32::NAN.to_bits(),
                f32::NAN.to_bits(),
            ];
            for (field, value) in fill.iter().enumerate().take(k) {
                // SAFETY: `rows` words of the staging buffer (it holds K·rows), on this stream.
                unsafe {
                    cu::cuMemsetD32Async(base + 4 * (field * rows) as u64, *value, rows, self.gpu.stream().cu_stream())
                }
                .result()?;
            }
            if exact {
                // Every row's record: empty masses, no logits.
                let record: [u32; EXACT_RECORD_WORDS] = record_words(RowExact::EMPTY);
                let at = base + 4 * call.exact_at() as u64;
                for (w, value) in record.iter().enumerate() {
                    // SAFETY: word `w` of each of the `rows` records (`EXACT_RECORD_WORDS` words
                    // apart) inside the staging buffer (it holds `call.words()`), on this stream.
                    unsafe {
                        cu::cuMemsetD2D32Async(
                            at + 4 * w as u64,
                            4 * EXACT_RECORD_WORDS,
                            *value,
                            1,
                            rows,
                            self.gpu.stream().cu_stream(),
                        )
                    }
                    .result()?;
                }
            }
            out.set_call(rows, params.n as usize, k >= WORDS_LOGPROBS);
        } else {
            self.gpu.sample_device_in(hidden, weight, params, mask, out, range, Some(base), None, None, targets)?;
        }
        Ok(call)
    }

    /// Whether the call runs the truncation step (top-k / top-p / min-p, top log-probabilities: the
    /// ranks then exchange top lists), after the checks of what such a call over shards cannot do
    /// yet (the same on every rank).
    pub(super) fn check_truncation(&self, params: &SamplingParams) -> Result<bool> {
        let vocab = self.layout.vocab;
        check_rank_truncation(params, vocab)?;
        let truncating = params.runs_truncation(vocab);
        if let Some(l) = self.layouts.iter().find(|l| l.offset >= l.vocab).filter(|_| truncating) {
            return Err(Error::InvalidShards {
                reason: "top-k / top-p / min-p or top log-probabilities over shards need every shard to hold vocabulary rows",
                at: l.offset,
            });
        }
        Ok(truncating)
    }

    /// Room in the exchange buffers for `call` (at least the plain exchange with log-probabilities).
    pub(super) fn ensure_exchange(&mut self, call: &CallShape) -> Result<()> {
        let cap = call.words().max(WORDS_SCORE * call.rows);
        if self.exchange.as_ref().is_some_and(|e| e.staging.len() >= cap) {
            return Ok(());
        }
        let stream = self.gpu.stream();
        self.exchange =
            Some(Exchange { staging: stream.alloc_zeros(cap)?, gathered: stream.alloc_zeros(cap * self.world)? });
        Ok(())
    }

    /// Enqueues the all-gather of `[K, rows]` words per rank on this rank's stream (inside an
    /// NCCL group when a [`TpGroup`] drives several ranks).
    pub(super) fn enqueue_exchange(&mut self, call: &CallShape) -> Result<()> {
        let stream = self.gpu.stream().clone();
        self.gpu.context().bind_to_thread()?;
        let ex = self.exchange.as_mut().expect("allocated by launch_local");
        let (s, _s) = ex.staging.device_ptr(&stream);
        let (r, _r) = ex.gathered.device_ptr_mut(&stream);
        let count = call.words();
        // SAFETY: `count` words sent from the staging buffer (sized for the call), G·count received;
        // both on this rank's stream and context.
        unsafe { self.comm.all_gather_words(s, r, count, &stream) }
    }

    /// The merge kernel: gathered results → `out`'s tokens, scores (and log-probabilities); with
    /// truncation then the truncation step over every rank's lists.
    pub(super) fn launch_merge(&mut self, call: &CallShape, out: &mut DeviceSamples) -> Result<()> {
        let stream = self.gpu.stream().clone();
        let ex = self.exchange.as_ref().expect("allocated by launch_local");
        let (g, _g) = ex.gathered.device_ptr(&stream);
        // With truncation the merged raw log-sum-exps go where the truncation step reads them.
        let raw_lse = if call.truncating { self.gpu.truncation_raw_lse(out).unwrap_or(0) } else { 0 };
        let outs = out.output_ptrs(&stream, call.k >= WORDS_LOGPROBS);
        // A scoring call's log-sum-exps and given tokens' log-probabilities go to its scores.
        let t = call.targets;
        let (lse, raw_lse) = t.map_or((outs.logsumexp, raw_lse), |t| (t.logsumexp, t.raw_logsumexp));
        let p = ByValue(MergeRanksParams {
            gathered: g as *const u32,
            tokens: outs.tokens as *mut u32,
            scores: outs.scores as *mut f32,
            logprobs: outs.logprobs as *mut f32,
            raw_logprobs: outs.raw_logprobs as *mut f32,
            logsumexp: lse as *mut f32,
            raw_logsumexp: raw_lse as *mut f32,
            b: call.rows as u32,
            g: self.world as u32,
            k: call.k as u32,
            rank_words: call.words() as u32,
            targets: t.map_or(0, |t| t.tokens) as *const u32,
            target_logprobs: t.map_or(0, |t| t.logprobs) as *mut f32,
            target_raw_logprobs: t.map_or(0, |t| t.raw_logprobs) as *mut f32,
            exact_at: if call.exact { call.exact_at() as u32 } else { 0 },
            _pad: 0,
        });
        let cfg = LaunchConfig {
            grid_dim: ((call.rows as u32).div_ceil(MERGE_RANKS_THREADS), 1, 1),
            block_dim: (MERGE_RANKS_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `gathered` holds G blocks of `call.words()` ≥ K·rows words; the outputs hold
        // `rows` entries each (`out` was sized by the local launch), the log-probability ones when
        // K ≥ 6; a scoring call's tokens and outputs hold `rows` entries (checked by
        // `check_score_call`), guarded by its caller until after this launch.
        let merge = if call.exact { &self.merge.1 } else { &self.merge.0 };
        // SAFETY: as above; on the exact path each rank's block holds `rows` records from
        // `call.exact_at()` (`call.words()` counts them), 16-byte aligned.
        unsafe { stream.launch_builder(merge).arg(&p).launch(cfg) }?;
        drop(outs);
        if call.truncating {
            // Every rank's lists follow its result words (`[lists, rows]`): units of six words.
            let tops = g + 4 * (call.lists() * call.rows) as u64;
            let stride = call.words() / WORDS_LOGPROBS;
            self.gpu.launch_truncation_merge(out, tops, (self.world, stride), call.targets)?;
        }
        self.done.record(&stream)?;
        Ok(())
    }

    /// The rows the truncation step over the merged lists left to the fallback (the same on every
    /// rank): waits for it (with the deadline), then reads their count.
    pub(super) fn fallback_rows(&mut self, out: &DeviceSamples) -> Result<usize> {
        let deadline = Instant::now() + self.timeout;
        self.wait_event(deadline, "the vocab-parallel exchange")?;
        self.gpu.fallback_count(out)
    }

    /// Columns of the fallback's per-rank blocks: the most vocabulary rows a shard scores.
    pub(super) fn fallback_columns(&self) -> usize {
        self.layouts.iter().map(|l| l.rows.min(l.vocab.saturating_sub(l.offset))).max().unwrap_or(0)
    }

    /// This rank's part of the fallback of `count` rows: their raw logits over its shard, slot by
    /// slot in row order (every rank's step lists the same rows, each in the order its blocks
    /// arrived; the exchange pairs the ranks' slots).
    pub(super) fn fallback_local(&mut self, count: usize, out: &mut DeviceSamples) -> Result<()> {
        self.gpu.order_fallback_list(out, count)?;
        let (cols, vocab) = (self.fallback_columns(), self.layout.vocab);
        if self.fallback.as_ref().is_none_or(|f| f.rows < count) {
            let stream = self.gpu.stream();
            // SAFETY: each is written before it is read: `local` by `fallback_logits` (the columns
            // of this shard), `gathered` by the all-gather, `full` by the copies from `gathered`
            // (every column of the vocabulary: the shards tile it).
            self.fallback = Some(unsafe {
                FallbackExchange {
                    local: stream.alloc(count * cols)?,
                    gathered: stream.alloc(count * cols * self.world)?,
                    full: stream.alloc(count * vocab)?,
                    rows: count,
                }
            });
        }
        let stream = self.gpu.stream().clone();
        let fb = self.fallback.as_mut().expect("allocated above");
        let (local, _l) = fb.local.device_ptr_mut(&stream);
        self.gpu.launch_rank_fallback_logits(out, local)
    }

    /// Enqueues the all-gather of the fallback rows' logits (`[count, v_max]` per rank).
    pub(super) fn enqueue_fallback_exchange(&mut self, count: usize) -> Result<()> {
        let stream = self.gpu.stream().clone();
        self.gpu.context().bind_to_thread()?;
        let n = count * self.fallback_columns();
        let fb = self.fallback.as_mut().expect("allocated by fallback_local");
        let (s, _s) = fb.local.device_ptr(&stream);
        let (r, _r) = fb.gathered.device_ptr_mut(&stream);
        // SAFETY: `n` floats sent from `local` (it holds `rows ≥ count` rows of `v_max`), `G·n`
        // received; both on this rank's stream and context.
        unsafe { self.comm.all_gather_words(s, r, n, &stream) }
    }

    /// The fallback's rows assembled (each rank's columns copied to their global place) and
    /// sampled, as on one GPU (a scoring call's, `targets`, scored too).
    pub(super) fn fallback_finish(
        &mut self,
        count: usize,
        out: &mut DeviceSamples,
        targets: Option<ScoreTargets>,
    ) -> Result<()> {
        let stream = self.gpu.stream().clone();
        let cols = self.fallback_columns();
        let vocab = self.layout.vocab;
        let fb = self.fallback.as_mut().expect("allocated by fallback_local");
        let (gathered, _g) = fb.gathered.device_ptr(&stream);
        let (full, _f) = fb.full.device_ptr_mut(&stream);
        for (r, l) in self.layouts.iter().enumerate() {
            let width = l.rows.min(vocab - l.offset);
            let copy = cu::CUDA_MEMCPY2D {
                srcXInBytes: 0,
                srcY: 0,
                srcMemoryType: cu::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                srcHost: std::ptr::null(),
                srcDevice: gathered + 4 * (r * count * cols) as u64,
                srcArray: std::ptr::null_mut(),
                srcPitch: 4 * width,
                dstXInBytes: 4 * l.offset,
                dstY: 0,
                dstMemoryType: cu::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstHost: std::ptr::null_mut(),
                dstDevice: full,
                dstArray: std::ptr::null_mut(),
                dstPitch: 4 * vocab,
                WidthInBytes: 4 * width,
                Height: count,
            };
            // SAFETY: rank r's block holds `count` rows of `width ≤ v_max` floats at pitch `width`
            // (how `fallback_logits` stores a shard's rows); `full` holds `count` rows of `vocab`
            // floats and columns `offset .. offset + width ≤ vocab` of each; device memory of this
            // rank's context, on its stream.
            unsafe { cu::cuMemcpy2DAsync_v2(&copy, stream.cu_stream()) }.result()?;
        }
        self.gpu.launch_rank_fallback_sample(out, full, targets)?;
        self.done.record(&stream)?;
        Ok(())
    }

    /// All-gathers `send` (`n` f32 on this rank) into `recv` (`G·n`, rank-major) on this rank's
    /// stream: the benchmark's "all-gather the logits" baseline.
    #[cfg(feature = "internals")]
    pub fn all_gather_f32(&mut self, send: &CudaView<'_, f32>, recv: &mut CudaSlice<f32>) -> Result<()> {
        let stream = self.gpu.stream().clone();
        if recv.len() < send.len() * self.world {
            return Err(Error::LengthMismatch {
                buffer: "all-gather output",
                expected: send.len() * self.world,
                actual: recv.len(),
            });
        }
        self.gpu.context().bind_to_thread()?;
        let (s, _s) = send.device_ptr(&stream);
        let (r, _r) = recv.device_ptr_mut(&stream);
        // SAFETY: n floats sent, G·n received (checked), on this rank's stream.
        unsafe { self.comm.all_gather_words(s, r, send.len(), &stream) }?;
        // Non-blocking: the all-gather is on the stream only once the communicator is ready.
        let deadline = Instant::now() + self.timeout;
        wait_ready(&mut [&mut self.comm], deadline, "an all-gather", self.timeout)
    }

    /// Exchanges and merges per-row results that something other than the fused kernel computed
    /// (`tokens`, `scores` of `rows` rows on this rank, global indices): the benchmark's "Gumbel pass
    /// over the shard's logits, then all-gather the per-row maxima" baseline, with this module's
    /// exchange. The results land in `out`'s tokens and scores.
    #[cfg(feature = "internals")]
    pub fn exchange_results(&mut self, tokens: u64, scores: u64, rows: usize, out: &mut DeviceSamples) -> Result<()> {
        let call = CallShape { rows, k: WORDS_PLAIN, truncating: false, targets: None, exact: false };
        self.ensure_exchange(&call)?;
        self.gpu.enter(out)?;
        let stream = self.gpu.stream().clone();
        {
            let ex = self.exchange.as_mut().expect("allocated above");
            let (base, _b) = ex.staging.device_ptr_mut(&stream);
            for (field, src) in [(0u64, tokens), (1, scores)] {
                // SAFETY: `rows` words from the caller's device buffers into the staging buffer.
                unsafe { cu::cuMemcpyDtoDAsync_v2(base + 4 * field * rows as u64, src, 4 * rows, stream.cu_stream()) }
                    .result()?;
            }
        }
        self.gpu.ensure_outputs(out, rows, false)?;
        out.set_call(rows, 1, false);
        self.exchange(&call, out)
    }

    /// The exchange alone (all-gather + merge of the last call's staged results): what the
    /// benchmark times as the exchange.
    #[cfg(feature = "internals")]
    pub fn exchange_only(&mut self, rows: usize, logprobs: bool, out: &mut DeviceSamples) -> Result<()> {
        let call = CallShape {
            rows,
            k: if logprobs { WORDS_LOGPROBS } else { WORDS_PLAIN },
            truncating: false,
            targets: None,
            exact: false,
        };
        self.ensure_exchange(&call)?;
        self.gpu.enter(out)?;
        self.exchange(&call, out)
    }
}

/// A record's words, as the device reads them (`#[repr(C)]`, no padding: six-word masses, then
/// four floats).
fn record_words(r: RowExact) -> [u32; EXACT_RECORD_WORDS] {
    let (p, q) = (r.processed.to_words(), r.raw.to_words());
    let mut w = [0u32; EXACT_RECORD_WORDS];
    w[..6].copy_from_slice(&p);
    w[6..12].copy_from_slice(&q);
    for (i, x) in r.token.iter().chain(&r.target).enumerate() {
        w[12 + i] = x.to_bits();
    }
    w
}
