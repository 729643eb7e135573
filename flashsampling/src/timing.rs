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
        f: impl FnMut() -> Result<()>,
    ) -> Result<Stats> {
        self.time_prepped(stream, (warmup, runs), || Ok(()), f)
    }

    /// [`Self::time`] with `prep` run before every timed run, on the stream ahead of the start event
    /// (so outside the timing), as in [`Self::time_paired`].
    pub fn time_prepped(
        &self,
        stream: &CudaStream,
        (warmup, runs): (usize, usize),
        mut prep: impl FnMut() -> Result<()>,
        mut f: impl FnMut() -> Result<()>,
    ) -> Result<Stats> {
        for _ in 0..warmup {
            f()?;
        }
        stream.synchronize()?;
        let mut times = Vec::with_capacity(runs.max(1));
        for _ in 0..runs.max(1) {
            times.push(self.once(stream, &mut prep, &mut f)?);
        }
        Ok(Stats::of(times))
    }

    /// Times `f` against a baseline `g` in one interleaved loop: both `warmup` times untimed, then
    /// `runs` rounds of one timed run each, the two in alternating order (`f` first in even rounds),
    /// so that a slow drift of the GPU (clocks, temperature, a neighbour's load) weighs on both
    /// alike. `prep` runs before every timed run, on the stream ahead of the start event (so outside
    /// the timing): e.g. a read of a buffer larger than L2, so that neither side finds what the other
    /// left there. Returns the stats of `f`, of `g`, and of the per-round ratio `f ÷ g` (whose median
    /// is the comparison to quote: it does not mix a fast moment of one with a slow one of the other).
    pub fn time_paired(
        &self,
        stream: &CudaStream,
        (warmup, runs): (usize, usize),
        mut prep: impl FnMut() -> Result<()>,
        mut f: impl FnMut() -> Result<()>,
        mut g: impl FnMut() -> Result<()>,
    ) -> Result<(Stats, Stats, Stats)> {
        for _ in 0..warmup {
            f()?;
            g()?;
        }
        stream.synchronize()?;
        let n = runs.max(1);
        let (mut tf, mut tg, mut ratio) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        for round in 0..n {
            let (a, b) = if round % 2 == 0 {
                let a = self.once(stream, &mut prep, &mut f)?;
                (a, self.once(stream, &mut prep, &mut g)?)
            } else {
                let b = self.once(stream, &mut prep, &mut g)?;
                (self.once(stream, &mut prep, &mut f)?, b)
            };
            tf.push(a);
            tg.push(b);
            ratio.push(a / b);
        }
        Ok((Stats::of(tf), Stats::of(tg), Stats::of(ratio)))
    }

    /// `prep` untimed, then one run of `f` bracketed by the events (ms); waits for it.
    fn once(
        &self,
        stream: &CudaStream,
        prep: &mut dyn FnMut() -> Result<()>,
        f: &mut dyn FnMut() -> Result<()>,
    ) -> Result<f64> {
        prep()?;
        self.start.record(stream)?;
        f()?;
        self.stop.record(stream)?;
        self.stop.synchronize()?;
        Ok(self.start.elapsed_ms(&self.stop)? as f64)
    }
}
