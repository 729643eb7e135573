//! Scoring given tokens on the GPU (issue 52.1): the log-probability fused pass, with each row's
//! given token scored by `reduce_rows` as it scores the sampled one — the same dot product for its
//! logit, the same logit pipeline, the same log-sum-exps — so scoring a token a call sampled gives
//! that call's log-probabilities bit for bit.
//!
//! Memory is O(rows): the pass keeps `n_vranges` candidates and masses per row, and its persistent
//! grid has `n_btiles · n_vranges` blocks at most, so a long prefill has one vocab range per row;
//! no `[rows, V]` logits exist, except on the portable path's GEMM-fed kernels (129 rows or more
//! whose logits take at most `GEMM_LOGITS_MAX_BYTES`, `config::variant_for_call`), which hold them
//! in the call's buffers. A token sampled by a call of B·n rows scores that call's log-probabilities
//! bit for bit when both calls run the same kernel family (the GEMM-fed kernels' logits are
//! cuBLAS's sums for that call's shape).

use super::*;
use cudarc::driver::CudaViewMut;
use flashsampling_kernels::params::TopOutputs;

use crate::score::{Scores, check_tokens};

/// The device addresses of a scoring call's given tokens and outputs (read into
/// [`FusedParams::targets`] and the fields after it; `logsumexp` and `raw_logsumexp` into
/// [`FusedParams::logsumexp`] and [`FusedParams::raw_logsumexp`]; the top outputs, 0 without top
/// log-probabilities, into the truncation step's and the fallback's
/// [`flashsampling_kernels::params::TopOutputs`], and the ranks into their `target_ranks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ScoreTargets {
    pub(crate) tokens: u64,
    pub(crate) logprobs: u64,
    pub(crate) raw_logprobs: u64,
    pub(crate) logsumexp: u64,
    pub(crate) raw_logsumexp: u64,
    pub(crate) top_tokens: u64,
    pub(crate) top_logprobs: u64,
    pub(crate) ranks: u64,
    /// Whether the pass's samples are read ([`GpuBackend::sample_and_score`]'s); else the rows of a
    /// pass without truncation draw no noise.
    pub(crate) draws: bool,
}

impl ScoreTargets {
    /// Where a truncation step or fallback of this call writes its top lists and the given tokens'
    /// ranks: with top log-probabilities the call's own `[B, k]` lists in place of `top`'s and its
    /// ranks, else `top` and no ranks (0). The one-GPU truncation launch and a tensor-parallel
    /// rank's both take them from here.
    pub(crate) fn top_and_ranks(&self, top: TopOutputs) -> (TopOutputs, u64) {
        if self.top_tokens == 0 {
            return (top, 0);
        }
        (TopOutputs { tokens: self.top_tokens as *mut u32, logprobs: self.top_logprobs as *mut f32, ..top }, self.ranks)
    }
}

/// Device buffers of the caller that a scoring call ([`GpuBackend::score_device`]) writes its
/// per-row results into, `B` entries each (each may be longer; the call writes the first `B`).
/// Definitions: [`Scores`].
#[derive(Debug)]
pub struct ScoreOutputs<'a> {
    /// Each row's given token's log-probability under the processed distribution.
    pub logprobs: CudaViewMut<'a, f32>,
    /// Each row's given token's raw log-probability (`log softmax(y)[t]`).
    pub raw_logprobs: CudaViewMut<'a, f32>,
    /// Each row's log-sum-exp of the processed logits over the temperature (NaN for a greedy row).
    pub logsumexp: CudaViewMut<'a, f32>,
    /// Each row's log-sum-exp of the raw logits.
    pub raw_logsumexp: CudaViewMut<'a, f32>,
    /// With [`SamplingParams::top_logprobs`] = `k > 0` (and only then): each row's top
    /// log-probabilities and its given token's rank.
    pub top: Option<ScoreTop<'a>>,
}

/// Device buffers of the caller for a scoring call's top log-probabilities
/// ([`SamplingParams::top_logprobs`] = `k`): definitions as [`Scores::top_logprobs`] and
/// [`Scores::ranks`].
#[derive(Debug)]
pub struct ScoreTop<'a> {
    /// Each row's `k` most likely tokens, `[B, k]` row-major (`INVALID_INDEX` past a row's last).
    pub tokens: CudaViewMut<'a, u32>,
    /// Their log-probabilities, `[B, k]` (NaN past a row's last entry).
    pub logprobs: CudaViewMut<'a, f32>,
    /// Each row's given token's rank in that order over every token (1 = first), `[B]`; 0 for a
    /// token at or past V.
    pub ranks: CudaViewMut<'a, u32>,
}

impl<'a> ScoreOutputs<'a> {
    /// The four outputs as the rows of one `[4, B]` buffer of exactly `4·B` entries, in the order of
    /// the fields (processed and raw log-probabilities, processed and raw log-sum-exps).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] unless `B > 0` and the buffer holds `4·B` entries.
    pub fn rows_of(buf: CudaViewMut<'a, f32>, b: usize) -> Result<Self> {
        if b == 0 || buf.len() != 4 * b {
            return Err(Error::LengthMismatch {
                buffer: "scores ([4, B], B > 0)",
                expected: 4 * b.max(1),
                actual: buf.len(),
            });
        }
        let mut rows = buf.chunks_exact_mut(b);
        let mut row = || rows.next().expect("four rows of B");
        Ok(Self { logprobs: row(), raw_logprobs: row(), logsumexp: row(), raw_logsumexp: row(), top: None })
    }

    /// These outputs with `top` ([`Self::top`]) for a call with top log-probabilities.
    pub fn with_top(self, top: ScoreTop<'a>) -> Self {
        Self { top: Some(top), ..self }
    }

    /// Entries `rows` of the outputs (the outputs of those rows of a split call; `k` top entries a
    /// row).
    ///
    /// # Panics
    /// If `rows` is not inside every output (a checked call's row ranges are).
    pub(crate) fn rows(&mut self, rows: std::ops::Range<usize>, k: usize) -> ScoreOutputs<'_> {
        ScoreOutputs {
            logprobs: self.logprobs.slice_mut(rows.clone()),
            raw_logprobs: self.raw_logprobs.slice_mut(rows.clone()),
            logsumexp: self.logsumexp.slice_mut(rows.clone()),
            raw_logsumexp: self.raw_logsumexp.slice_mut(rows.clone()),
            top: self.top.as_mut().map(|t| ScoreTop {
                tokens: t.tokens.slice_mut(rows.start * k..rows.end * k),
                logprobs: t.logprobs.slice_mut(rows.start * k..rows.end * k),
                ranks: t.ranks.slice_mut(rows),
            }),
        }
    }
}

/// Most bytes of fallback logits (`[rows, V]` f32, [`GpuBackend::score_device`]'s truncation
/// buffers) one launch of a truncating scoring call may need: a longer call is split into launches
/// of [`truncated_score_rows`] rows, so its memory stays O(rows), never O(rows · V).
pub(crate) const TRUNCATED_SCORE_LOGITS_BYTES: usize = 256 << 20;

/// Rows per launch of a truncating scoring call over a `v`-token head (at least one).
pub(crate) fn truncated_score_rows(v: usize) -> usize {
    (TRUNCATED_SCORE_LOGITS_BYTES / (4 * v.max(1))).max(1)
}

/// Whether a scoring call over a `v`-token head runs the truncating pass, whose fallback may
/// materialize any row's logits: top-k / top-p / min-p, or top log-probabilities (and ranks).
pub(crate) fn scores_through_fallback(params: &SamplingParams, v: usize) -> bool {
    params.runs_truncation(v)
}

/// Rows per launch of a scoring call of `b` rows over a `v`-token head: all of them, or for a call
/// through the fallback [`truncated_score_rows`] (every rank of a vocab-parallel call splits alike);
/// on the exact path ([`SamplingParams::exact_logsumexp`]) at most the rows whose materialized
/// logits take [`GEMM_LOGITS_MAX_BYTES`] (883 of a 151,936-token head), so a long prefill's logits
/// stay bounded.
///
/// [`GEMM_LOGITS_MAX_BYTES`]: flashsampling_kernels::config::GEMM_LOGITS_MAX_BYTES
pub(crate) fn score_launch_rows(params: &SamplingParams, v: usize, b: usize) -> usize {
    let rows = if scores_through_fallback(params, v) { truncated_score_rows(v) } else { b };
    match params.exact_logsumexp {
        true => rows.min(flashsampling_kernels::config::gemm_logits_max_rows(v as u32).max(1) as usize),
        false => rows,
    }
}

/// Whether every one of a call's `b` rows has processed logits equal to its raw ones: T = 1 (not
/// greedy), no soft-cap, mask or sparse adjustment. A scoring pass over such rows computes one
/// log-mass (the launch's device mask, if any, is checked beside this).
pub(crate) fn processed_is_raw(params: &SamplingParams, b: usize) -> bool {
    params.softcap.is_none()
        && params.allowed.is_none()
        && params.adjustments.as_ref().is_none_or(|a| a.tokens.is_empty())
        && (0..b).all(|r| params.row_temperature(r) == Some(1.0))
}

/// `params` as a scoring launch runs them: one sample per row, both log-probabilities.
pub(crate) fn scoring_params(params: &SamplingParams) -> SamplingParams {
    let mut p = params.clone();
    (p.n, p.logprobs) = (1, LogProbs::ProcessedAndRaw);
    p
}

impl GpuBackend {
    /// Scores one given token per row on the device: `tokens[r]` (`B` entries, global vocab
    /// indices) under `params`' controls, into the caller's `scores` ([`ScoreOutputs`]), enqueued on
    /// this handle's stream, no synchronization. `params.n` and `params.logprobs` do not matter (the
    /// pass keeps no sample: without a truncation step it draws no noise at all, and where every row
    /// is at T = 1 with nothing applied it sums one log-mass for both distributions; `out` holds no
    /// results after this call, as after [`Self::sample_device_into`]; `out` is its scratch). A token at or past V
    /// scores NaN (it is not read: nothing checks device-resident tokens on the host); so does a
    /// row with a NaN logit in a call that does not truncate (in one that does, its values are
    /// unspecified); in a row where nothing is allowed every token's processed log-probability is
    /// `−∞` (the host API refuses both rows, as sampling does). The definitions are [`Scores`]'.
    /// With top-k / top-p / min-p the pass is the truncating one: each row's token is scored over
    /// the kept set that sampling certifies or, where it cannot, that the exact fallback finds (a
    /// call of more rows than 256 MiB of f32 logits hold, 441 at V = 151,936, runs as launches of
    /// that many, so the fallback's logits stay within 256 MiB). There a token that a sampling call with the same
    /// keys drew as a new (truncated) sample scores that call's raw log-probability bit for bit;
    /// any other token's raw log-probability comes from the row's reduction (another summation
    /// order than a truncated sample's: equal within f32 rounding). With top log-probabilities
    /// (`top_logprobs = k > 0`: `scores.top` holds `[B, k]` lists and `[B]` ranks, else
    /// [`Error::OutputMismatch`]) the pass is the truncating one too: the lists are sampling's, and
    /// each given token's rank comes from the truncation step's sorted prefix where it holds every
    /// token before it, else from the fallback's count over the row (0 for a token at or past V).
    /// Not capturable into a CUDA graph ([`Error::Capture`]: the per-row parameters are uploaded
    /// from the host).
    ///
    /// # Errors
    /// Sampling's validation ([`Self::sample_device_masked`]); `tokens` or an output shorter than
    /// `B` ([`Error::LengthMismatch`]) or of another context ([`Error::ForeignBuffer`]); all before
    /// anything is enqueued. (A launch error past the first launch of a split call leaves the
    /// launches before it enqueued.)
    #[allow(clippy::too_many_arguments)]
    pub fn score_device<T: Element>(
        &self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        tokens: &CudaView<'_, u32>,
        mask: Option<&CudaView<'_, u32>>,
        out: &mut DeviceSamples,
        scores: &mut ScoreOutputs<'_>,
    ) -> Result<()> {
        self.score_device_in(hidden, weight, params, tokens, mask, out, scores, false)
    }

    /// [`Self::score_device`]; `draws`: the pass's samples are read (a pass without truncation
    /// otherwise draws no noise: [`flashsampling_kernels::Transform::noiseless`]).
    #[allow(clippy::too_many_arguments)]
    fn score_device_in<T: Element>(
        &self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        tokens: &CudaView<'_, u32>,
        mask: Option<&CudaView<'_, u32>>,
        out: &mut DeviceSamples,
        scores: &mut ScoreOutputs<'_>,
        draws: bool,
    ) -> Result<()> {
        self.check_score_call(params, hidden.rows, tokens, scores)?;
        let p = scoring_params(params);
        let whole = VocabRange { offset: 0, vocab: weight.rows };
        if hidden.rows > score_launch_rows(&p, weight.rows, hidden.rows) {
            // A long truncating call is validated whole first, so a bad input enqueues nothing.
            self.validate_call(hidden, weight, &p, mask, whole)?;
        }
        self.score_in_launches((hidden, &p, tokens, mask), scores, (weight.rows, draws), |h, pr, m, targets| {
            self.sample_device_in(h, weight, pr, m, out, whole, None, None, None, Some(targets))
        })
    }

    /// Runs a scoring call (`p`: [`scoring_params`]'s) over a `vocab`-entry head as
    /// [`score_launch_rows`] splits it: `launch(hidden, params, mask, targets)` once with the whole
    /// call, or once per launch of a long truncating call with those rows' hidden states, parameters
    /// ([`SamplingParams::rows`]: each row keeps its noise key, controls and mask row, so each
    /// scores what the whole call would), mask rows, tokens and outputs. `draws`:
    /// [`ScoreTargets::draws`]. The caller validated the whole call.
    pub(crate) fn score_in_launches<T: Element>(
        &self,
        (hidden, p, tokens, mask): (
            &DeviceMatrix<'_, T>,
            &SamplingParams,
            &CudaView<'_, u32>,
            Option<&CudaView<'_, u32>>,
        ),
        scores: &mut ScoreOutputs<'_>,
        (vocab, draws): (usize, bool),
        mut launch: impl FnMut(
            &DeviceMatrix<'_, T>,
            &SamplingParams,
            Option<&CudaView<'_, u32>>,
            ScoreTargets,
        ) -> Result<()>,
    ) -> Result<()> {
        let (b, d) = (hidden.rows, hidden.cols);
        let chunk = score_launch_rows(p, vocab, b);
        if b <= chunk {
            let (targets, _guards) = self.score_targets(tokens, scores);
            return launch(hidden, p, mask, ScoreTargets { draws, ..targets });
        }
        let words = vocab.div_ceil(32);
        for r0 in (0..b).step_by(chunk) {
            let rows = r0..b.min(r0 + chunk);
            let h = DeviceMatrix { data: hidden.data.slice(rows.start * d..rows.end * d), rows: rows.len(), cols: d };
            let m = mask.map(|m| m.slice(rows.start * words..rows.end * words));
            let t = tokens.slice(rows.clone());
            let mut part = scores.rows(rows.clone(), p.top_logprobs as usize);
            let (targets, _guards) = self.score_targets(&t, &mut part);
            launch(&h, &p.rows(rows)?, m.as_ref(), ScoreTargets { draws, ..targets })?;
        }
        Ok(())
    }

    /// The checks of a scoring call with `b` rows (one GPU's or a vocab-parallel rank's), before
    /// anything is taken or enqueued: not in a capture, one token and at least one output entry per
    /// row (top lists and ranks exactly when asked for), buffers of this context.
    pub(crate) fn check_score_call(
        &self,
        params: &SamplingParams,
        b: usize,
        tokens: &CudaView<'_, u32>,
        scores: &ScoreOutputs<'_>,
    ) -> Result<()> {
        // Before any cudarc pointer is taken (its event waits would break a capture).
        if self.capturing()? {
            return Err(Error::Capture { reason: capture::SCORING });
        }
        if tokens.len() != b {
            return Err(Error::LengthMismatch { buffer: "tokens to score", expected: b, actual: tokens.len() });
        }
        if !same_context(tokens.stream().context(), &self.k.ctx) {
            return Err(Error::ForeignBuffer { buffer: "tokens to score" });
        }
        let k = params.top_logprobs as usize;
        if scores.top.is_some() != (k > 0) {
            return Err(Error::OutputMismatch { output: "score top log-probabilities", asked: k > 0 });
        }
        // Each output: (name, its length, the entries the call writes, its stream).
        let mut outputs = vec![
            ("score logprobs", scores.logprobs.len(), b, scores.logprobs.stream()),
            ("score raw_logprobs", scores.raw_logprobs.len(), b, scores.raw_logprobs.stream()),
            ("score logsumexp", scores.logsumexp.len(), b, scores.logsumexp.stream()),
            ("score raw_logsumexp", scores.raw_logsumexp.len(), b, scores.raw_logsumexp.stream()),
        ];
        if let Some(top) = &scores.top {
            outputs.extend([
                ("score top tokens", top.tokens.len(), b * k, top.tokens.stream()),
                ("score top logprobs", top.logprobs.len(), b * k, top.logprobs.stream()),
                ("score ranks", top.ranks.len(), b, top.ranks.stream()),
            ]);
        }
        for (name, len, want, stream) in outputs {
            if len < want {
                return Err(Error::LengthMismatch { buffer: name, expected: want, actual: len });
            }
            if !same_context(stream.context(), &self.k.ctx) {
                return Err(Error::ForeignBuffer { buffer: name });
            }
        }
        Ok(())
    }

    /// The device addresses of a checked scoring call's tokens and outputs on this handle's stream,
    /// with the guards that record their use when dropped (after the launches).
    pub(crate) fn score_targets<'a>(
        &'a self,
        tokens: &'a CudaView<'_, u32>,
        scores: &'a mut ScoreOutputs<'_>,
    ) -> (ScoreTargets, Vec<SyncOnDrop<'a>>) {
        let (tokens, g0) = device_address(tokens, &self.stream);
        let (logprobs, g1) = scores.logprobs.device_ptr_mut(&self.stream);
        let (raw_logprobs, g2) = scores.raw_logprobs.device_ptr_mut(&self.stream);
        let (logsumexp, g3) = scores.logsumexp.device_ptr_mut(&self.stream);
        let (raw_logsumexp, g4) = scores.raw_logsumexp.device_ptr_mut(&self.stream);
        let mut guards = vec![g0, g1, g2, g3, g4];
        let (mut top_tokens, mut top_logprobs, mut ranks) = (0, 0, 0);
        if let Some(top) = scores.top.as_mut() {
            let (t, g5) = top.tokens.device_ptr_mut(&self.stream);
            let (l, g6) = top.logprobs.device_ptr_mut(&self.stream);
            let (r, g7) = top.ranks.device_ptr_mut(&self.stream);
            (top_tokens, top_logprobs, ranks) = (t, l, r);
            guards.extend([g5, g6, g7]);
        }
        let targets = ScoreTargets {
            tokens,
            logprobs,
            raw_logprobs,
            logsumexp,
            raw_logsumexp,
            top_tokens,
            top_logprobs,
            ranks,
            draws: false,
        };
        (targets, guards)
    }

    /// Per row of `hidden`, the log-probabilities of `tokens[row]` under `params`' controls and the
    /// row's log-sum-exps: [`crate::CpuBackend::score`]'s results on the GPU (host buffers in and
    /// out: uploads, one fused pass, downloads), with the controls [`Self::score_device`] takes.
    /// Validation is sampling's, then one token per row below V ([`Error::TokenOutOfRange`]), before
    /// anything is uploaded; a row sampling would refuse is the same error here.
    pub fn score<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
        tokens: &[u32],
    ) -> Result<Scores> {
        Ok(self.score_host(hidden, weight, params, tokens, false)?.1)
    }

    /// Samples as [`Self::sample_scored`] does and scores `tokens` as [`Self::score`] does, in one
    /// pass over the weight when `params.n` is 1; both results bit for bit those of the two calls.
    pub fn sample_and_score<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
        tokens: &[u32],
    ) -> Result<(Samples, Scores)> {
        if params.n != 1 {
            let scores = self.score(hidden, weight, params, tokens)?;
            return Ok((self.sample_scored(hidden, weight, params)?, scores));
        }
        let (mut samples, scores) = self.score_host(hidden, weight, params, tokens, true)?;
        // The pass computed both log-probabilities: keep what `params` asks for.
        match params.logprobs {
            LogProbs::Off => (samples.logprobs, samples.raw_logprobs, samples.logsumexp) = (None, None, None),
            LogProbs::Processed => samples.raw_logprobs = None,
            LogProbs::ProcessedAndRaw => {}
        }
        Ok((samples, scores))
    }

    /// The scoring pass with host buffers: its samples (`n = 1`, both log-probabilities; drawn with
    /// the call's noise when `draws`, else the argmax of a pass without truncation) and scores.
    fn score_host<T: Element>(
        &self,
        hidden: Matrix<'_, T>,
        weight: Matrix<'_, T>,
        params: &SamplingParams,
        tokens: &[u32],
        draws: bool,
    ) -> Result<(Samples, Scores)> {
        let (shape, _) = validate(
            (hidden.rows, hidden.cols, hidden.data.len()),
            (weight.rows, weight.cols, weight.data.len()),
            params,
        )?;
        check_tokens(tokens, shape.b, shape.v)?;
        let h = self.stream.clone_htod(hidden.data)?;
        let w = self.stream.clone_htod(weight.data)?;
        let t = self.stream.clone_htod(tokens)?;
        let (b, d, v) = (shape.b, hidden.cols, shape.v);
        // A truncating call (or one with top log-probabilities) runs in launches of at most `chunk`
        // rows (as `score_device` splits it), here one `score_device` call each, so that each
        // launch's samples are read before the next.
        let truncating = params.truncates(v);
        let chunk = score_launch_rows(params, v, b).min(b);
        let mut out = self.alloc_samples(chunk, v)?;
        let mut buf = self.stream.alloc_zeros::<f32>(4 * b)?;
        let k = params.top_logprobs as usize;
        let mut top = match k {
            0 => None,
            _ => Some((
                self.stream.alloc_zeros::<u32>(b * k)?,
                self.stream.alloc_zeros::<f32>(b * k)?,
                self.stream.alloc_zeros::<u32>(b)?,
            )),
        };
        let mut samples = Samples::plain(Vec::with_capacity(b), Vec::with_capacity(b));
        let (mut logprobs, mut raw_logprobs, mut fell) = (Vec::with_capacity(b), Vec::with_capacity(b), Vec::new());
        {
            let mut all = ScoreOutputs::rows_of(buf.as_view_mut(), b)?;
            if let Some((tokens, logprobs, ranks)) = top.as_mut() {
                let (tokens, logprobs, ranks) = (tokens.as_view_mut(), logprobs.as_view_mut(), ranks.as_view_mut());
                all = all.with_top(ScoreTop { tokens, logprobs, ranks });
            }
            let weight_dev = DeviceMatrix { data: w.as_view(), rows: weight.rows, cols: weight.cols };
            for r0 in (0..b).step_by(chunk) {
                let rows = r0..b.min(r0 + chunk);
                let n = rows.len();
                let cut;
                let pr = if n == b {
                    params
                } else {
                    cut = params.rows(rows.clone())?;
                    &cut
                };
                let mut part = all.rows(rows.clone(), k);
                self.score_device_in(
                    &DeviceMatrix { data: h.slice(rows.start * d..rows.end * d), rows: n, cols: d },
                    &weight_dev,
                    pr,
                    &t.slice(rows.clone()),
                    None,
                    &mut out,
                    &mut part,
                    draws,
                )?;
                // The pass's samples, from the buffers' own outputs (the accessors show none after a
                // scoring call, but the fallback's flags).
                let get = |v: Option<&CudaSlice<f32>>| -> Result<Vec<f32>> {
                    Ok(self.stream.clone_dtoh(&v.expect("a log-probability launch's buffers").slice(..n))?)
                };
                samples.tokens.extend(self.stream.clone_dtoh(&out.tokens.slice(..n))?);
                samples.scores.extend(self.stream.clone_dtoh(&out.scores.slice(..n))?);
                logprobs.extend(get(out.logprobs.as_ref())?);
                raw_logprobs.extend(get(out.raw_logprobs.as_ref())?);
                match out.truncation_fallback() {
                    Some(flags) => fell.extend(self.stream.clone_dtoh(&flags)?.into_iter().map(|f| f != 0)),
                    // A launch whose rows all keep everything takes the plain log-probability pass.
                    None => fell.extend(std::iter::repeat_n(false, n)),
                }
            }
        }
        let all = self.stream.clone_dtoh(&buf)?;
        let (top_logprobs, ranks) = match &top {
            None => (None, None),
            Some((tokens, logprobs, ranks)) => {
                let (tokens, logprobs) = (self.stream.clone_dtoh(tokens)?, self.stream.clone_dtoh(logprobs)?);
                (Some(top_lists(&tokens, &logprobs, k)), Some(self.stream.clone_dtoh(ranks)?))
            }
        };
        (samples.logprobs, samples.raw_logprobs) = (Some(logprobs), Some(raw_logprobs));
        // The log-sum-exps are the scores' (the kept sets' where rows truncate).
        samples.logsumexp = Some(all[2 * b..3 * b].to_vec());
        samples.truncation_fallback = truncating.then_some(fell);
        // Its top log-probabilities are the scores' (one sample per row).
        samples.top_logprobs = top_logprobs.clone();
        // A row sampling refuses is this call's error too.
        check_samples_of(&samples, 1, hidden, &[weight.data])?;
        let scores = Scores {
            logprobs: all[..b].to_vec(),
            raw_logprobs: all[b..2 * b].to_vec(),
            logsumexp: all[2 * b..3 * b].to_vec(),
            raw_logsumexp: all[3 * b..].to_vec(),
            top_logprobs,
            ranks,
        };
        Ok((samples, scores))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashsampling_kernels::params::TopSource;

    #[test]
    fn a_scoring_call_with_top_lists_writes_its_own_lists_and_ranks() {
        let sampling =
            TopOutputs { tokens: 0x100 as *mut u32, logprobs: 0x200 as *mut f32, n: 5, source: TopSource::Processed };
        let none = ScoreTargets {
            tokens: 1,
            logprobs: 2,
            raw_logprobs: 3,
            logsumexp: 4,
            raw_logsumexp: 5,
            top_tokens: 0,
            top_logprobs: 0,
            ranks: 0,
            draws: false,
        };
        let (top, ranks) = none.top_and_ranks(sampling);
        assert_eq!((top.tokens as u64, top.logprobs as u64, ranks), (0x100, 0x200, 0));
        let with = ScoreTargets { top_tokens: 0x300, top_logprobs: 0x400, ranks: 0x500, ..none };
        let (top, ranks) = with.top_and_ranks(sampling);
        assert_eq!((top.tokens as u64, top.logprobs as u64, ranks), (0x300, 0x400, 0x500));
        assert_eq!((top.n, top.source), (5, TopSource::Processed), "the count and source stay the call's");
    }

    #[test]
    fn truncation_and_top_lists_score_through_the_fallback_in_launches_of_256_mib() {
        let v = 1000;
        let base = SamplingParams::new(0.8, 1);
        let top = base.clone().with_top_logprobs(5, true);
        let trunc = base.clone().with_top_k(vec![4]);
        // Both run the truncating pass, whose fallback may materialize a row: split into launches.
        assert!(scores_through_fallback(&top, v) && scores_through_fallback(&trunc, v));
        assert!(!scores_through_fallback(&base, v));
        assert_eq!(truncated_score_rows(151_936), 441);
        assert_eq!(truncated_score_rows(20_003), 3354);
        assert_eq!(truncated_score_rows(usize::MAX), 1);
    }

    #[test]
    fn only_rows_at_t_1_with_nothing_changing_a_logit_score_in_one_mass() {
        let b = 3;
        let t1 = SamplingParams::new(1.0, 7);
        assert!(processed_is_raw(&t1, b));
        assert!(processed_is_raw(&t1.clone().with_temperatures(vec![1.0; b]), b));
        let mask = crate::controls::TokenMask::all(b, 64);
        for (what, p) in [
            ("T = 0.8", SamplingParams::new(0.8, 7)),
            ("greedy", SamplingParams::new(0.0, 7)),
            ("one row at T = 1.0001", t1.clone().with_temperatures(vec![1.0, 1.0001, 1.0])),
            ("soft-cap", SamplingParams { softcap: Some(30.0), ..t1.clone() }),
            ("mask", t1.clone().with_allowed(mask)),
        ] {
            assert!(!processed_is_raw(&p, b), "{what}");
        }
    }
}
