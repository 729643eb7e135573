//! Caller-owned outputs: device buffers of the caller (an engine's, PyTorch's tensors) that a call's
//! kernels write their results into, instead of the [`DeviceSamples`]' own outputs.

use super::*;
use cudarc::driver::CudaViewMut;

/// Device buffers of the caller that one call writes its results into
/// ([`GpuBackend::sample_device_into`]), in the layouts of [`DeviceSamples`]' accessors: `B·n`
/// entries each for tokens, scores, log-probabilities, raw log-probabilities and log-sum-exps (row
/// `r·n + j` is row `r`'s sample `j`), `B × k` for the top log-probabilities. Each buffer may be
/// longer; the call writes the first entries.
///
/// The log-probability outputs are given exactly when the call asks for them
/// ([`SamplingParams::logprobs`]: `logprobs` with [`LogProbs::Processed`] or
/// [`LogProbs::ProcessedAndRaw`], `raw_logprobs` with the latter; `logsumexp` is optional with
/// either), the top log-probabilities exactly when it asks for them
/// ([`SamplingParams::top_logprobs`]); else [`Error::OutputMismatch`].
#[derive(Debug)]
pub struct DeviceOutputs<'a> {
    /// Sampled tokens (`INVALID_INDEX` for a sample without a token).
    pub tokens: CudaViewMut<'a, u32>,
    /// Winning perturbed scores.
    pub scores: CudaViewMut<'a, f32>,
    /// The tokens' log-probabilities under the processed distribution.
    pub logprobs: Option<CudaViewMut<'a, f32>>,
    /// The tokens' log-probabilities under `softmax(logits)`.
    pub raw_logprobs: Option<CudaViewMut<'a, f32>>,
    /// Each sample row's log-sum-exp of the processed logits.
    pub logsumexp: Option<CudaViewMut<'a, f32>>,
    /// Each request's top log-probabilities: tokens and log-probabilities, `[B, k]`.
    pub top_logprobs: Option<(CudaViewMut<'a, u32>, CudaViewMut<'a, f32>)>,
}

/// The device addresses a call writes its results to, 0 for the [`DeviceSamples`]' own buffer of
/// that output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Destinations {
    pub(super) tokens: u64,
    pub(super) scores: u64,
    pub(super) logprobs: u64,
    pub(super) raw_logprobs: u64,
    pub(super) logsumexp: u64,
    pub(super) top_tokens: u64,
    pub(super) top_logprobs: u64,
}

impl Destinations {
    /// `own` unless this output has a destination of the caller's.
    pub(super) fn or(dst: Option<Destinations>, pick: impl Fn(&Destinations) -> u64, own: u64) -> u64 {
        match dst.map(|d| pick(&d)) {
            Some(a) if a != 0 => a,
            _ => own,
        }
    }
}

impl Destinations {
    /// [`Error::Misaligned`] unless every given address is non-null and 4-byte aligned (the kernels'
    /// 32-bit stores); `absent` lists the outputs not given (address 0 means "the own buffer").
    pub(super) fn check_aligned(&self, absent: [bool; 5]) -> Result<()> {
        let d = self;
        for ((buffer, address), skip) in [
            ("tokens", d.tokens),
            ("scores", d.scores),
            ("logprobs", d.logprobs),
            ("raw_logprobs", d.raw_logprobs),
            ("logsumexp", d.logsumexp),
            ("top log-probabilities' tokens", d.top_tokens),
            ("top log-probabilities", d.top_logprobs),
        ]
        .into_iter()
        .zip([false, false, absent[0], absent[1], absent[2], absent[3], absent[4]])
        {
            if !skip && (address == 0 || address % 4 != 0) {
                return Err(Error::Misaligned { buffer, address, alignment: 4 });
            }
        }
        Ok(())
    }
}

impl DeviceOutputs<'_> {
    /// Checks the buffers against a call of `b` requests with `params`: presence, lengths and
    /// context (their alignment: [`Destinations::check_aligned`]).
    pub(super) fn check(&self, params: &SamplingParams, b: usize, ctx: &Arc<CudaContext>) -> Result<()> {
        let rows = b * params.n as usize;
        let lp = params.logprobs != LogProbs::Off;
        let presence = [
            ("logprobs", self.logprobs.is_some(), lp),
            ("raw_logprobs", self.raw_logprobs.is_some(), params.logprobs == LogProbs::ProcessedAndRaw),
            ("top_logprobs", self.top_logprobs.is_some(), params.top_logprobs > 0),
        ];
        for (output, given, asked) in presence {
            if given != asked {
                return Err(Error::OutputMismatch { output, asked });
            }
        }
        if self.logsumexp.is_some() && !lp {
            return Err(Error::OutputMismatch { output: "logsumexp", asked: false });
        }
        let top = b * params.top_logprobs as usize;
        let views = [
            ("tokens", Some(info(&self.tokens)), rows),
            ("scores", Some(info(&self.scores)), rows),
            ("logprobs", self.logprobs.as_ref().map(info), rows),
            ("raw_logprobs", self.raw_logprobs.as_ref().map(info), rows),
            ("logsumexp", self.logsumexp.as_ref().map(info), rows),
            ("top log-probabilities' tokens", self.top_logprobs.as_ref().map(|t| info(&t.0)), top),
            ("top log-probabilities", self.top_logprobs.as_ref().map(|t| info(&t.1)), top),
        ];
        for (buffer, view, expected) in views {
            let Some((len, stream)) = view else { continue };
            if len < expected {
                return Err(Error::LengthMismatch { buffer, expected, actual: len });
            }
            if !same_context(stream.context(), ctx) {
                return Err(Error::ForeignBuffer { buffer });
            }
        }
        Ok(())
    }

    /// The contexts (cudarc's handles) of the buffers' streams.
    pub(super) fn contexts(&self) -> Vec<&Arc<CudaContext>> {
        let mut c = vec![self.tokens.stream().context(), self.scores.stream().context()];
        for v in [&self.logprobs, &self.raw_logprobs, &self.logsumexp].into_iter().flatten() {
            c.push(v.stream().context());
        }
        if let Some((t, l)) = &self.top_logprobs {
            c.extend([t.stream().context(), l.stream().context()]);
        }
        c
    }

    /// Which optional outputs are not given: log-probabilities, raw ones, log-sum-exps, top tokens,
    /// top log-probabilities.
    pub(super) fn absent(&self) -> [bool; 5] {
        let top = self.top_logprobs.is_none();
        [self.logprobs.is_none(), self.raw_logprobs.is_none(), self.logsumexp.is_none(), top, top]
    }

    /// The buffers' device addresses for writes on `stream`, and cudarc's guards (to drop after the
    /// launches that write them).
    pub(super) fn destinations<'s>(&'s mut self, stream: &'s CudaStream) -> (Destinations, Vec<SyncOnDrop<'s>>) {
        let mut guards = Vec::new();
        let mut take = |p: (u64, SyncOnDrop<'s>)| {
            guards.push(p.1);
            p.0
        };
        let tokens = take(self.tokens.device_ptr_mut(stream));
        let scores = take(self.scores.device_ptr_mut(stream));
        let logprobs = self.logprobs.as_mut().map_or(0, |v| take(v.device_ptr_mut(stream)));
        let raw_logprobs = self.raw_logprobs.as_mut().map_or(0, |v| take(v.device_ptr_mut(stream)));
        let logsumexp = self.logsumexp.as_mut().map_or(0, |v| take(v.device_ptr_mut(stream)));
        let (top_tokens, top_logprobs) = match self.top_logprobs.as_mut() {
            Some((t, l)) => (take(t.device_ptr_mut(stream)), take(l.device_ptr_mut(stream))),
            None => (0, 0),
        };
        (Destinations { tokens, scores, logprobs, raw_logprobs, logsumexp, top_tokens, top_logprobs }, guards)
    }
}

/// A view's length and stream (for the checks).
fn info<'a, T>(v: &'a CudaViewMut<'_, T>) -> (usize, &'a Arc<CudaStream>) {
    (v.len(), v.stream())
}
