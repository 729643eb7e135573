//! Validation before any allocation or launch: a call's shapes, controls and device buffers.

use super::*;

/// The controls a tensor-parallel rank's truncating call cannot compose yet: typed errors, the
/// same on every rank, before any launch.
pub(crate) fn check_rank_truncation(params: &SamplingParams, vocab: usize) -> Result<()> {
    let path = "over vocab shards (tensor parallel) yet";
    if params.logprobs == LogProbs::ProcessedAndRaw && params.truncates(vocab) && params.softcap.is_some() {
        return Err(Error::Unsupported {
            control: "raw log-probabilities with top-k / top-p / min-p and a soft-cap",
            path,
        });
    }
    if params.adjustments.as_ref().is_some_and(|a| !a.tokens.is_empty()) && params.runs_truncation(vocab) {
        return Err(Error::Unsupported {
            control: "sparse adjustments with top-k / top-p / min-p or top log-probabilities",
            path,
        });
    }
    Ok(())
}

/// `Error::Misaligned` unless the hidden states' and the weight's device addresses are 16-byte
/// aligned (the kernels' 16-byte loads and the TMA boxes need it).
pub(super) fn check_aligned(hidden: u64, weight: u64) -> Result<()> {
    for (buffer, address) in [("hidden states", hidden), ("LM-head weight", weight)] {
        if address % 16 != 0 {
            return Err(Error::Misaligned { buffer, address, alignment: 16 });
        }
    }
    Ok(())
}

/// Whether two contexts are the same CUDA context (two `CudaContext::new` of one ordinal share the
/// primary context).
pub(super) fn same_context(a: &CudaContext, b: &CudaContext) -> bool {
    a.cu_ctx() == b.cu_ctx()
}

impl GpuBackend {
    /// The checks of [`Self::sample_device_in`] that need no device address: shapes, parameters,
    /// the vocab range, the mask's length, every buffer on this context.
    pub(crate) fn validate_call<T: Element>(
        &self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        mask: Option<&CudaView<'_, u32>>,
        range: VocabRange,
    ) -> Result<Shape> {
        let (shape, _) = validate_in_vocab(
            (hidden.rows, hidden.cols, hidden.data.len()),
            (weight.rows, weight.cols, weight.data.len()),
            params,
            range.vocab,
        )?;
        if range.offset % SHARD_OFFSET_ALIGN != 0 {
            return Err(Error::InvalidShards {
                reason: "a shard on the GPU must start at a multiple of 4 vocab rows",
                at: range.offset,
            });
        }
        if range.offset + weight.rows > MAX_DIM as usize {
            return Err(Error::TooLarge {
                what: "shard end (global vocab row)",
                value: range.offset + weight.rows,
                max: MAX_DIM as usize,
            });
        }
        let words_per_row = range.vocab.div_ceil(32);
        if let Some(m) = mask {
            if params.allowed.is_some() {
                return Err(Error::Unsupported {
                    control: "a host mask and a device mask together",
                    path: "on the GPU backend",
                });
            }
            if m.len() != shape.b * words_per_row {
                return Err(Error::LengthMismatch {
                    buffer: "allowed-token mask (B × ceil(V / 32) words)",
                    expected: shape.b * words_per_row,
                    actual: m.len(),
                });
            }
            if !same_context(m.stream().context(), &self.k.ctx) {
                return Err(Error::ForeignBuffer { buffer: "allowed-token mask" });
            }
        }
        for (buffer, data) in [("hidden states", &hidden.data), ("LM-head weight", &weight.data)] {
            if !same_context(data.stream().context(), &self.k.ctx) {
                return Err(Error::ForeignBuffer { buffer });
            }
        }
        Ok(shape)
    }

    /// [`Self::validate_call`] and the alignment of the hidden states and the weight: every check a
    /// launch makes, for callers that validate several launches before making any (a
    /// [`crate::TpGroup`]). A single launch checks the alignment on the addresses it takes anyway.
    pub(crate) fn validate_launch<T: Element>(
        &self,
        hidden: &DeviceMatrix<'_, T>,
        weight: &DeviceMatrix<'_, T>,
        params: &SamplingParams,
        mask: Option<&CudaView<'_, u32>>,
        range: VocabRange,
    ) -> Result<Shape> {
        let shape = self.validate_call(hidden, weight, params, mask, range)?;
        let (h, _h) = device_address(&hidden.data, &self.stream);
        let (w, _w) = device_address(&weight.data, &self.stream);
        check_aligned(h, w)?;
        Ok(shape)
    }
}
