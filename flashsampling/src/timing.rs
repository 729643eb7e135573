//! Timing with CUDA events on one stream: warm-up, then per-run elapsed times, reported as
//! median / min / max.

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, sys::CUevent_flags};

use crate::error::Result;

/// Median, min and max of a set of timings, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Median.
    pub median: f64,
    /// Fastest run.
    pub min: f64,
    /// Slowest run.
    pub max: f64,
    /// Number of timed runs.
    pub runs: usize,
}

impl Stats {
    /// Stats of `times` (ms); `times` must not be empty.
    pub fn of(mut times: Vec<f64>) -> Self {
        times.sort_by(f64::total_cmp);
        let n = times.len();
        let median = if n % 2 == 1 { times[n / 2] } else { 0.5 * (times[n / 2 - 1] + times[n / 2]) };
        Self { median, min: times[0], max: times[n - 1], runs: n }
    }
}

/// A pair of timing-enabled events.
pub struct EventTimer {
    start: CudaEvent,
    stop: CudaEvent,
}

impl EventTimer {
    /// Events on `ctx` with timing enabled (cudarc's default disables timing).
    pub fn new(ctx: &std::sync::Arc<CudaContext>) -> Result<Self> {
        Ok(Self {
            start: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
            stop: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
        })
    }

    /// Runs `f` `warmup` times untimed, then `runs` times, each bracketed by events on `stream`.
    pub fn time(
        &self,
        stream: &CudaStream,
        warmup: usize,
        runs: usize,
        mut f: impl FnMut() -> Result<()>,
    ) -> Result<Stats> {
        for _ in 0..warmup {
            f()?;
        }
        stream.synchronize()?;
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs.max(1) {
            self.start.record(stream)?;
            f()?;
            self.stop.record(stream)?;
            self.stop.synchronize()?;
            times.push(self.start.elapsed_ms(&self.stop)? as f64);
        }
        Ok(Stats::of(times))
    }
}
