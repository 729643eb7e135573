//! One process driving several local GPUs as the ranks of one group ([`TpGroup`]).

use super::*;

/// Several local GPUs driven by one process: one [`TpRank`] per GPU, their collectives grouped.
pub struct TpGroup {
    pub(super) ranks: Vec<TpRank>,
}

impl std::fmt::Debug for TpGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.ranks.iter()).finish()
    }
}

impl TpGroup {
    /// One rank per entry of `ordinals` (distinct GPUs), rank `r` holding `layouts[r]`; the
    /// layouts are checked first (tiling, V, D, alignment).
    pub fn new(ordinals: &[usize], layouts: &[ShardLayout], timeout: Duration) -> Result<Self> {
        ensure_nccl()?;
        if ordinals.len() != layouts.len() || ordinals.is_empty() {
            return Err(Error::LengthMismatch {
                buffer: "shard layouts (one per GPU)",
                expected: ordinals.len(),
                actual: layouts.len(),
            });
        }
        validate_layouts(layouts)?;
        let world = ordinals.len();
        let id = CommId::new()?;
        let gpus = ordinals.iter().map(|&o| GpuBackend::new(o)).collect::<Result<Vec<_>>>()?;
        // Several ranks from one thread: their inits are one NCCL group.
        // SAFETY: paired with the group end below.
        check(unsafe { nccl::ncclGroupStart() }, "ncclGroupStart", None)?;
        let comms: Vec<Result<Comm>> = gpus.iter().enumerate().map(|(r, g)| start_init(g, r, world, &id)).collect();
        // SAFETY: ends the group started above.
        check(unsafe { nccl::ncclGroupEnd() }, "ncclGroupEnd", None)?;
        let comms = comms.into_iter().collect::<Result<Vec<_>>>()?;
        let mut ranks = gpus
            .into_iter()
            .zip(comms)
            .enumerate()
            .map(|(r, (gpu, comm))| {
                let mut rank = TpRank::from_parts(gpu, Box::new(comm), r, world, layouts[r], timeout)?;
                rank.layouts = layouts.to_vec();
                Ok(rank)
            })
            .collect::<Result<Vec<_>>>()?;
        let deadline = Instant::now() + timeout;
        let mut comms: Vec<&mut Box<dyn Collective>> = ranks.iter_mut().map(|r| &mut r.comm).collect();
        wait_ready(&mut comms, deadline, "forming the NCCL group", timeout)?;
        Ok(Self { ranks })
    }

    /// The ranks (rank `r` at index `r`).
    pub fn ranks(&self) -> &[TpRank] {
        &self.ranks
    }

    /// Mutable access to the ranks (their GPUs' buffers, timeouts).
    pub fn ranks_mut(&mut self) -> &mut [TpRank] {
        &mut self.ranks
    }

    /// Samples on every rank: `hidden[r]`, `weights[r]`, `outs[r]` on rank `r`'s GPU (the same
    /// batch on every rank). Every rank's inputs are validated before any launch; then the local
    /// launches, the grouped all-gather and the merges are enqueued, asynchronous (with top-k /
    /// top-p / min-p the call waits for the truncation step, as [`TpRank::sample_device`] does).
    pub fn sample_device<T: Element>(
        &mut self,
        hidden: &[DeviceMatrix<'_, T>],
        weights: &[DeviceMatrix<'_, T>],
        params: &SamplingParams,
        masks: Option<&[CudaView<'_, u32>]>,
        outs: &mut [DeviceSamples],
    ) -> Result<()> {
        let g = self.ranks.len();
        for (buffer, len) in [
            ("hidden states (one per rank)", hidden.len()),
            ("weight shards (one per rank)", weights.len()),
            ("outputs (one per rank)", outs.len()),
            ("masks (one per rank)", masks.map_or(g, <[_]>::len)),
        ] {
            if len != g {
                return Err(Error::LengthMismatch { buffer, expected: g, actual: len });
            }
        }
        if let Some(h) = hidden.iter().find(|h| (h.rows, h.cols) != (hidden[0].rows, hidden[0].cols)) {
            return Err(Error::LengthMismatch {
                buffer: "hidden states (the same batch on every rank)",
                expected: hidden[0].rows,
                actual: h.rows,
            });
        }
        for (r, rank) in self.ranks.iter().enumerate() {
            rank.layout.check_elem(r, T::TYPE)?;
            rank.check_truncation(params)?;
            rank.gpu.validate_launch(
                &hidden[r],
                &weights[r],
                params,
                masks.map(|m| &m[r]),
                VocabRange { offset: rank.layout.offset, vocab: rank.layout.vocab },
            )?;
        }
        let mut calls = Vec::with_capacity(g);
        for (r, rank) in self.ranks.iter_mut().enumerate() {
            calls.push(rank.launch_local(&hidden[r], &weights[r], params, masks.map(|m| &m[r]), &mut outs[r], None)?);
        }
        let result = self.exchange_and_merge(&calls, outs);
        // Each rank's call on its outputs ends after its merge (and fallback): their fences.
        for (rank, out) in self.ranks.iter().zip(outs.iter_mut()) {
            rank.gpu.leave(out)?;
        }
        result
    }

    /// The grouped exchanges and merges of [`Self::sample_device`] after the local launches `calls`.
    fn exchange_and_merge(&mut self, calls: &[super::rank::CallShape], outs: &mut [DeviceSamples]) -> Result<()> {
        // SAFETY: paired with the group end below.
        check(unsafe { nccl::ncclGroupStart() }, "ncclGroupStart", None)?;
        let enq: Result<()> = self.ranks.iter_mut().zip(calls).try_for_each(|(rank, call)| rank.enqueue_exchange(call));
        // SAFETY: ends the group started above.
        let end = check(unsafe { nccl::ncclGroupEnd() }, "ncclGroupEnd", None);
        enq?;
        end?;
        let timeout = self.ranks[0].timeout;
        let deadline = Instant::now() + timeout;
        let mut comms: Vec<&mut Box<dyn Collective>> = self.ranks.iter_mut().map(|r| &mut r.comm).collect();
        wait_ready(&mut comms, deadline, "the vocab-parallel exchange", timeout)?;
        for ((rank, call), out) in self.ranks.iter_mut().zip(calls).zip(outs.iter_mut()) {
            rank.launch_merge(call, out)?;
        }
        if !calls[0].truncating {
            return Ok(());
        }
        // The fallback's rows (the same on every rank: the same merged lists), then their logits'
        // exchange, grouped like the first.
        let counts = self
            .ranks
            .iter_mut()
            .zip(outs.iter())
            .map(|(rank, out)| rank.fallback_rows(out))
            .collect::<Result<Vec<_>>>()?;
        let count = counts[0];
        if let Some((r, &c)) = counts.iter().enumerate().find(|&(_, &c)| c != count) {
            return Err(Error::RankMismatch { rank: r, what: "rows left to the fallback", expected: count, actual: c });
        }
        if count == 0 {
            return Ok(());
        }
        for (rank, out) in self.ranks.iter_mut().zip(outs.iter_mut()) {
            rank.fallback_local(count, out)?;
        }
        // SAFETY: paired with the group end below.
        check(unsafe { nccl::ncclGroupStart() }, "ncclGroupStart", None)?;
        let enq: Result<()> = self.ranks.iter_mut().try_for_each(|rank| rank.enqueue_fallback_exchange(count));
        // SAFETY: ends the group started above.
        let end = check(unsafe { nccl::ncclGroupEnd() }, "ncclGroupEnd", None);
        enq?;
        end?;
        let deadline = Instant::now() + timeout;
        let mut comms: Vec<&mut Box<dyn Collective>> = self.ranks.iter_mut().map(|r| &mut r.comm).collect();
        wait_ready(&mut comms, deadline, "the fallback's exchange", timeout)?;
        for (rank, out) in self.ranks.iter_mut().zip(outs.iter_mut()) {
            rank.fallback_finish(count, out, None)?;
        }
        Ok(())
    }

    /// Waits for every rank's last call (each with its deadline).
    pub fn synchronize(&mut self) -> Result<()> {
        self.ranks.iter_mut().try_for_each(TpRank::synchronize)
    }

    /// Host buffers in and out, for tests and small tools: uploads `hidden` to every GPU and
    /// `shards[r]` to rank `r`, samples, and returns every rank's [`Samples`] (identical by
    /// construction; the tests check it).
    pub fn sample<T: Element>(
        &mut self,
        hidden: Matrix<'_, T>,
        shards: &[VocabShard<'_, T>],
        params: &SamplingParams,
    ) -> Result<Vec<Samples>> {
        if shards.len() != self.ranks.len() {
            return Err(Error::LengthMismatch {
                buffer: "weight shards (one per rank)",
                expected: self.ranks.len(),
                actual: shards.len(),
            });
        }
        for (rank, s) in self.ranks.iter().zip(shards) {
            if s.offset != rank.layout.offset || s.weight.rows != rank.layout.rows {
                return Err(Error::InvalidShards { reason: "a shard differs from its rank's layout", at: s.offset });
            }
        }
        let mut h = Vec::new();
        let mut w = Vec::new();
        let mut outs = Vec::new();
        for (rank, s) in self.ranks.iter().zip(shards) {
            let stream = rank.gpu.stream();
            h.push(stream.clone_htod(hidden.data)?);
            w.push(stream.clone_htod(s.weight.data)?);
            outs.push(rank.gpu.alloc_samples(hidden.rows * params.n as usize, s.weight.rows)?);
        }
        let hv: Vec<DeviceMatrix<'_, T>> =
            h.iter().map(|d| DeviceMatrix { data: d.as_view(), rows: hidden.rows, cols: hidden.cols }).collect();
        let wv: Vec<DeviceMatrix<'_, T>> = w
            .iter()
            .zip(shards)
            .map(|(d, s)| DeviceMatrix { data: d.as_view(), rows: s.weight.rows, cols: s.weight.cols })
            .collect();
        self.sample_device(&hv, &wv, params, None, &mut outs)?;
        self.synchronize()?;
        self.ranks
            .iter()
            .zip(&outs)
            .map(|(rank, out)| {
                let s = rank.gpu.stream();
                let mut samples = Samples::plain(s.clone_dtoh(&out.tokens())?, s.clone_dtoh(&out.scores())?);
                if params.logprobs != LogProbs::Off {
                    let get = |v: Option<CudaView<'_, f32>>| -> Result<Vec<f32>> {
                        Ok(s.clone_dtoh(&v.expect("a log-probability call fills them"))?)
                    };
                    samples.logprobs = Some(get(out.logprobs())?);
                    if params.logprobs == LogProbs::ProcessedAndRaw {
                        samples.raw_logprobs = Some(get(out.raw_logprobs())?);
                    }
                    samples.logsumexp = Some(get(out.logsumexp())?.into_iter().step_by(params.n as usize).collect());
                }
                if let Some(flags) = out.truncation_fallback() {
                    samples.truncation_fallback = Some(s.clone_dtoh(&flags)?.into_iter().map(|f| f != 0).collect());
                }
                samples.top_logprobs = rank.gpu.download_top_logprobs(out)?;
                Ok(samples)
            })
            .collect()
    }
}
