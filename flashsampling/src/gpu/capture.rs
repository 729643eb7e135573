//! CUDA-graph capture of a sampling call: what a call recorded into a graph may enqueue, and what a
//! call on buffers a graph uses may change.
//!
//! A graph replays the launches, copies and memsets recorded during capture, with the addresses and
//! by-value parameters they had then; it does not replay host work. So a captured call must
//! enqueue nothing that reads host memory (an upload of pageable memory would be replayed from an
//! address the host may have reused), allocate nothing, wait on no event recorded outside the
//! capture (CUDA forbids it), and leave every buffer the graph reads unchanged between replays
//! unless the graph itself writes it first. Per call, that means:
//!
//! - the per-row keys come from device memory ([`GpuBackend::sample_device_rows`]): the replay copies
//!   them into the buffers first, so each replay draws the noise of the keys the caller wrote for
//!   that step; a host mask or sparse adjustments (uploaded every call) are refused;
//! - everything the call would otherwise set up once is already set up by a call before the
//!   capture, on the same stream, with the same operands and shapes (the "warm-up"): the buffers'
//!   sizes, the TMA descriptors, the truncation words;
//! - cudarc's per-buffer event tracking is off for the context (its waits would be waits on events
//!   recorded outside the capture); the call orders itself after the buffers' last use by its
//!   stream alone.
//!
//! After the capture, the buffers belong to the graph ([`DeviceSamples::is_captured`]): a call
//! outside a capture on them is refused, since it could move or rewrite what the graph reads.

use super::*;

/// The reason given when cudarc's event tracking would wait on events recorded before a capture.
const TRACKING: &str = "cudarc's event tracking is on for the context of the call's stream or of one of its \
     buffers, and would wait, inside the capture, on events recorded outside it: call \
     CudaContext::disable_event_tracking on every handle of the context (the backend's, and the one the streams \
     and buffers were made with) before capturing, as cudarc's own graph tests do";

impl GpuBackend {
    /// Whether this handle's stream is capturing into a CUDA graph; a capture that was invalidated
    /// (by earlier work on the stream) is [`Error::Capture`].
    pub(super) fn capturing(&self) -> Result<bool> {
        match self.stream.capture_status()? {
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => Ok(false),
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => Ok(true),
            _ => Err(Error::Capture { reason: "the stream's capture was invalidated by earlier work on it" }),
        }
    }

    /// The checks of a call in a capture that need only its arguments, made before anything is
    /// enqueued: inputs a graph can replay (device row keys, no host mask or adjustments, one GPU),
    /// no event tracking (`tracking`: cudarc's, on any of the call's streams' contexts), and buffers
    /// last used on this stream.
    pub(super) fn check_capture_inputs(
        &self,
        params: &SamplingParams,
        device_rows: bool,
        staging: bool,
        tracking: bool,
        out: &DeviceSamples,
    ) -> Result<()> {
        let reason = if staging {
            Some("a tensor-parallel rank's call exchanges results through the host's collective calls")
        } else if !device_rows {
            Some(
                "the per-row keys must come from device memory (sample_device_rows), so that each replay \
                 draws the noise of the keys written for its step",
            )
        } else if params.allowed.is_some() {
            Some("a host mask is uploaded every call: pass the mask in device memory")
        } else if params.adjustments.as_ref().is_some_and(|a| !a.tokens.is_empty()) {
            Some("sparse adjustments (penalties, logit bias) are uploaded from the host every call")
        } else if tracking {
            Some(TRACKING)
        } else if out.last_stream != Some(self.stream.cu_stream() as usize) && !self.last_use_finished(out)? {
            Some(
                "the buffers' last use, on another stream, has not finished: make the same call once on the \
                 capturing stream before the capture, or synchronize after it",
            )
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::Capture { reason }),
            None => Ok(()),
        }
    }
}

impl GpuBackend {
    /// Whether the last call on `out` (or its allocation), made on another stream than this
    /// handle's, has finished: then a captured call needs no wait for it (a wait on an event
    /// recorded outside the capture is not allowed in one). Queries only (no wait, nothing enqueued),
    /// made in the relaxed capture mode: in the global and thread-local modes a query during a
    /// capture invalidates it.
    fn last_use_finished(&self, out: &DeviceSamples) -> Result<bool> {
        let home = self.k.home.cu_stream() as usize;
        let _relaxed = RelaxedCapture::enter()?;
        match (out.last_stream, &out.fence) {
            (Some(last), _) if last == home => {
                // SAFETY: the home stream is live (the kernels hold it); a query enqueues nothing.
                match unsafe { sys::cuStreamQuery(self.k.home.cu_stream()) } {
                    sys::CUresult::CUDA_SUCCESS => Ok(true),
                    sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
                    e => Err(Error::Driver(cudarc::driver::DriverError(e))),
                }
            }
            (Some(_), Some(fence)) => Ok(fence.try_is_complete()?),
            _ => Ok(false),
        }
    }
}

/// This thread's stream-capture mode set to relaxed until dropped, then restored: a query of a
/// stream or event that is not capturing is then allowed while another stream captures.
struct RelaxedCapture(sys::CUstreamCaptureMode);

impl RelaxedCapture {
    fn enter() -> Result<Self> {
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: `mode` is a valid pointer for the call, which swaps it with the thread's mode.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) }.result()?;
        Ok(Self(mode))
    }
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        // SAFETY: as in `enter`; this puts back the mode `enter` replaced.
        let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut self.0) };
    }
}

/// The reason given for an allocation during a capture.
pub(super) const ALLOCATION: &str = "buffers cannot be allocated during a capture: allocate them (alloc_samples) \
     and make the same call once on the capturing stream before the capture";

/// The reason given for the entry points that cannot be captured.
pub(super) const NOT_CAPTURABLE: &str = "only the one-GPU fused calls (sample_device, sample_device_masked, \
     sample_device_rows) can be recorded into a CUDA graph";

/// The reason given for a scoring call in a capture.
pub(super) const SCORING: &str = "a scoring call (score_device) uploads its per-row parameters from the host every \
     call: it cannot be recorded into a CUDA graph";

/// The reason given for a call outside a capture on buffers a graph uses.
const CAPTURED: &str = "these buffers are used by a captured graph, and a call outside it could reallocate or \
     rewrite what the graph reads: use another DeviceSamples outside the graph";

/// What a call would set up in its buffers before its launches, each `true` when it would: any one
/// during a capture is [`Error::Capture`].
pub(super) struct Setup {
    /// New buffers (a larger batch or vocab, another epilogue or variant than they were made for).
    pub(super) realloc: bool,
    /// New truncation buffers.
    pub(super) truncation_realloc: bool,
    /// A larger buffer for the `n`-times expanded hidden states.
    pub(super) expanded_realloc: bool,
    /// TMA descriptors of other operands or shapes, uploaded.
    pub(super) tensor_maps: bool,
    /// Other truncation words (top-k, top-p, min-p per request), uploaded.
    pub(super) truncation_words: bool,
}

impl Setup {
    /// `Ok` when a captured call would set nothing up; else the first thing it would.
    pub(super) fn check(&self) -> Result<()> {
        let reasons = [
            (
                self.realloc,
                "the buffers would be reallocated (a larger batch or vocab, or other controls, than the last \
                 call's): make the same call once on the capturing stream before the capture",
            ),
            (
                self.truncation_realloc,
                "the truncation buffers would be reallocated: make the same call once on the capturing \
                 stream before the capture",
            ),
            (
                self.expanded_realloc,
                "the n-times expanded hidden states would be reallocated: make the same call once on the \
                 capturing stream before the capture",
            ),
            (
                self.tensor_maps,
                "the TMA descriptors would be uploaded (other hidden-state or weight buffers or shapes than \
                 the last call's): make the same call once on the capturing stream before the capture",
            ),
            (
                self.truncation_words,
                "the truncation words (top-k / top-p / min-p per request) would be uploaded: make a call \
                 with the same truncation once on the capturing stream before the capture",
            ),
        ];
        match reasons.iter().find(|(on, _)| *on) {
            Some(&(_, reason)) => Err(Error::Capture { reason }),
            None => Ok(()),
        }
    }
}

impl DeviceSamples {
    /// Whether a call on these buffers was recorded into a CUDA graph: the graph reads and writes
    /// them at every replay, so they must outlive it, and calls outside a capture on them are
    /// refused ([`Error::Capture`]); another capture of a call that sets nothing up in them is
    /// allowed. A captured call that fails after its checks binds them too (what it enqueued may be
    /// in the graph): use a fresh set after an aborted capture. Dropping captured buffers first
    /// waits for all work on the context (replays included) to finish; don't drop them while a
    /// capture on the backend's own stream is in progress.
    pub fn is_captured(&self) -> bool {
        self.captured
    }

    /// `Ok` unless a graph uses these buffers: the check of every call outside a capture.
    pub(super) fn check_not_captured(&self) -> Result<()> {
        if self.captured { Err(Error::Capture { reason: CAPTURED }) } else { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(setup: Setup) -> Option<&'static str> {
        match setup.check() {
            Ok(()) => None,
            Err(Error::Capture { reason }) => Some(reason),
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_captured_call_may_set_nothing_up_and_the_first_change_is_named() {
        let none = || Setup {
            realloc: false,
            truncation_realloc: false,
            expanded_realloc: false,
            tensor_maps: false,
            truncation_words: false,
        };
        assert_eq!(reason(none()), None);
        let each = [
            (Setup { realloc: true, ..none() }, "the buffers would be reallocated"),
            (Setup { truncation_realloc: true, ..none() }, "the truncation buffers"),
            (Setup { expanded_realloc: true, ..none() }, "expanded hidden states"),
            (Setup { tensor_maps: true, ..none() }, "TMA descriptors"),
            (Setup { truncation_words: true, ..none() }, "truncation words"),
        ];
        for (setup, what) in each {
            let r = reason(setup).expect("refused");
            assert!(r.contains(what) && r.contains("before the capture"), "{what}: {r}");
        }
        let all = Setup { tensor_maps: true, truncation_words: true, ..none() };
        assert!(reason(all).unwrap().contains("TMA"));
    }
}
