//! GPU tests of CUDA-graph capture (issue 51.6): a decode step's sampling call recorded into a graph
//! replays with the keys (and hidden states) written for each step, bit for bit what the same call
//! outside a graph gives for them, over plain sampling, the controls and truncation with top
//! log-probabilities; a call the graph could not replay is refused with nothing enqueued (the
//! capture stays valid), and buffers a graph uses refuse calls outside it.
//!
//! Without a GPU each test prints a visible `SKIP` line and passes; with `FLASHSAMPLING_REQUIRE_GPU=1`
//! it fails instead.

mod common;

use std::sync::Arc;

use common::*;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode, CUstreamCaptureStatus};
use cudarc::driver::{CudaSlice, CudaStream, CudaView};
use flashsampling::gpu::{GpuOptions, row_params_words};
use flashsampling::kernels::config::Epilogue;
use flashsampling::params::LogProbs;
use flashsampling::{DeviceMatrix, DeviceSamples, Error, GpuBackend, SamplingParams};
use half::bf16;

const DATA_SEED: u64 = 0xDA7A_6E51;

/// Every output of a call, as bits (NaN-safe comparisons).
#[derive(Debug, PartialEq)]
struct Outputs {
    tokens: Vec<u32>,
    scores: Vec<u32>,
    logprobs: Option<[Vec<u32>; 3]>,
    top: Option<(Vec<u32>, Vec<u32>)>,
    fallback: Option<Vec<u32>>,
}

fn read(stream: &Arc<CudaStream>, out: &DeviceSamples) -> Outputs {
    let f = |v: CudaView<'_, f32>| bits(&stream.clone_dtoh(&v).unwrap());
    Outputs {
        tokens: stream.clone_dtoh(&out.tokens()).unwrap(),
        scores: f(out.scores()),
        logprobs: out.logprobs().map(|l| [f(l), f(out.raw_logprobs().unwrap()), f(out.logsumexp().unwrap())]),
        top: out.top_logprobs().map(|(t, l)| (stream.clone_dtoh(&t).unwrap(), f(l))),
        fallback: out.truncation_fallback().map(|v| stream.clone_dtoh(&v).unwrap()),
    }
}

/// The backend for capture: cudarc's event tracking off for its context (see
/// `GpuBackend::sample_device_rows`), and a stream of its own to capture on.
fn capturing_backend(test: &str, options: Option<GpuOptions>) -> Option<(GpuBackend, Arc<CudaStream>)> {
    let gpu = gpu_or_skip(test)?;
    let gpu = match options {
        Some(o) => GpuBackend::with_options(0, o).unwrap(),
        None => gpu,
    };
    // SAFETY: each test below uses its buffers on one stream (`stream`); the backend orders its own
    // buffers by itself.
    unsafe { gpu.context().disable_event_tracking() };
    let stream = gpu.context().new_stream().unwrap();
    Some((gpu.on_stream(stream.clone()).unwrap(), stream))
}

/// One capture case: `b` rows of a `v × d` head, the step's keys from `keys(step)` (the other
/// controls from `keys(0)`), an optional device mask.
struct Case {
    name: &'static str,
    b: usize,
    d: usize,
    v: usize,
    keys: fn(usize, u32) -> SamplingParams,
    mask: bool,
}

/// The step's keys of request `r`: its own seed and its position `step`.
fn keyed(b: usize, step: u32, base: SamplingParams) -> SamplingParams {
    base.with_seeds((0..b as u64).map(|r| 77 + r).collect()).with_positions(vec![step; b])
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "plain",
            b: 8,
            d: 256,
            v: 3000,
            keys: |b, s| keyed(b, s, SamplingParams::new(1.0, 0)),
            mask: false,
        },
        Case {
            name: "temperatures, n = 2, log-probabilities, soft-cap",
            b: 5,
            d: 512,
            v: 4099,
            keys: |b, s| {
                keyed(b, s, SamplingParams::new(1.0, 0))
                    .with_temperatures(mixed_temperatures(b))
                    .with_samples_per_row(2)
                    .with_logprobs(LogProbs::ProcessedAndRaw)
                    .with_softcap(30.0)
            },
            mask: false,
        },
        Case {
            name: "device mask, log-probabilities",
            b: 6,
            d: 256,
            v: 5000,
            keys: |b, s| keyed(b, s, SamplingParams::new(0.9, 0)).with_logprobs(LogProbs::ProcessedAndRaw),
            mask: true,
        },
        Case {
            name: "top-k, top-p, min-p, top log-probabilities",
            b: 7,
            d: 256,
            v: 6000,
            keys: |b, s| {
                keyed(b, s, SamplingParams::new(1.0, 0))
                    .with_top_k((0..b as u32).map(|r| [0, 1, 20, 200][r as usize % 4]).collect())
                    .with_top_p((0..b).map(|r| [1.0, 0.9, 0.5][r % 3]).collect())
                    .with_min_p((0..b).map(|r| [0.0, 0.05][r % 2]).collect())
                    .with_top_logprobs(5, false)
                    .with_logprobs(LogProbs::ProcessedAndRaw)
            },
            mask: true,
        },
    ]
}

fn upload_words(stream: &Arc<CudaStream>, params: &SamplingParams, b: usize, to: &mut CudaSlice<u64>) {
    stream.memcpy_htod(&row_params_words(params, b).unwrap(), to).unwrap();
}

fn run_case(gpu: &GpuBackend, stream: &Arc<CudaStream>, case: &Case, seed: u64) {
    const STEPS: u32 = 4;
    let (b, d, v) = (case.b, case.d, case.v);
    let mut rng = TestRng::new(DATA_SEED + seed);
    let weight = rng.normal_bf16(v * d, 3.0 / (d as f64).sqrt());
    let hiddens: Vec<Vec<bf16>> = (0..STEPS).map(|_| rng.normal_bf16(b * d, 1.0)).collect();
    let w = stream.clone_htod(&weight).unwrap();
    let mut h = stream.clone_htod(&hiddens[0]).unwrap();
    let mask = case.mask.then(|| stream.clone_htod(&random_mask(b, v, 0.3, DATA_SEED + seed).words).unwrap());
    let params = (case.keys)(b, 0);
    let n = params.n as usize;
    let mut rows = stream.clone_htod(&row_params_words(&params, b).unwrap()).unwrap();
    // The same call outside any graph, on buffers of its own: each step's reference.
    let mut eager_out = gpu.alloc_samples(b, v).unwrap();
    let mut eager_rows = stream.clone_htod(&row_params_words(&params, b).unwrap()).unwrap();
    let mut want = Vec::new();
    for step in 0..STEPS {
        stream.memcpy_htod(&hiddens[step as usize], &mut h).unwrap();
        upload_words(stream, &(case.keys)(b, step), b, &mut eager_rows);
        let (hm, wm) = (
            DeviceMatrix { data: h.as_view(), rows: b, cols: d },
            DeviceMatrix { data: w.as_view(), rows: v, cols: d },
        );
        let m = mask.as_ref().map(|m| m.as_view());
        gpu.sample_device_rows(&hm, &wm, &params, &eager_rows.as_view(), m.as_ref(), &mut eager_out).unwrap();
        want.push(read(stream, &eager_out));
    }
    assert_eq!(want[0].tokens.len(), b * n);
    assert!(
        want.iter().skip(1).any(|o| o.tokens != want[0].tokens),
        "{}: the steps' keys and hidden states should draw other tokens",
        case.name
    );
    // Warm-up on the capturing stream, then the capture of the same call.
    let mut out = gpu.alloc_samples(b, v).unwrap();
    stream.memcpy_htod(&hiddens[0], &mut h).unwrap();
    let graph = {
        let (hm, wm) = (
            DeviceMatrix { data: h.as_view(), rows: b, cols: d },
            DeviceMatrix { data: w.as_view(), rows: v, cols: d },
        );
        let m = mask.as_ref().map(|m| m.as_view());
        gpu.sample_device_rows(&hm, &wm, &params, &rows.as_view(), m.as_ref(), &mut out).unwrap();
        assert_eq!(read(stream, &out), want[0], "{}: the warm-up call", case.name);
        assert!(!out.is_captured());
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
        let captured = gpu.sample_device_rows(&hm, &wm, &params, &rows.as_view(), m.as_ref(), &mut out);
        let graph = stream.end_capture(CUgraphInstantiate_flags(0));
        captured.unwrap_or_else(|e| panic!("{}: the captured call: {e}", case.name));
        graph.unwrap().expect("a graph of the captured call")
    };
    assert!(out.is_captured());
    // Replays: each step's hidden states and keys written between them, outside the graph.
    for round in 0..2 {
        for step in 0..STEPS {
            stream.memcpy_htod(&hiddens[step as usize], &mut h).unwrap();
            upload_words(stream, &(case.keys)(b, step), b, &mut rows);
            graph.launch().unwrap();
            assert_eq!(read(stream, &out), want[step as usize], "{}: round {round}, step {step}", case.name);
        }
    }
    // Calls outside the graph on its buffers are refused, nothing enqueued.
    let (hm, wm) =
        (DeviceMatrix { data: h.as_view(), rows: b, cols: d }, DeviceMatrix { data: w.as_view(), rows: v, cols: d });
    let m = mask.as_ref().map(|m| m.as_view());
    let err = gpu.sample_device_rows(&hm, &wm, &params, &rows.as_view(), m.as_ref(), &mut out).unwrap_err();
    assert!(matches!(err, Error::Capture { .. }), "{}: {err:?}", case.name);
    graph.launch().unwrap();
    assert_eq!(read(stream, &out), want[STEPS as usize - 1], "{}: after the refused call", case.name);
    stream.synchronize().unwrap();
    drop(graph);
}

#[test]
fn a_captured_sampling_call_replays_each_steps_keys_bit_for_bit() {
    let test = "a_captured_sampling_call_replays_each_steps_keys_bit_for_bit";
    let Some((gpu, stream)) = capturing_backend(test, None) else { return };
    for (i, case) in cases().iter().enumerate() {
        run_case(&gpu, &stream, case, i as u64);
    }
}

#[test]
fn a_captured_call_without_programmatic_dependent_launch_replays_the_same() {
    let test = "a_captured_call_without_programmatic_dependent_launch_replays_the_same";
    let options = GpuOptions { dependent_launch: false, ..GpuOptions::default() };
    let Some((gpu, stream)) = capturing_backend(test, Some(options)) else { return };
    for (i, case) in cases().iter().enumerate().filter(|(_, c)| c.name.starts_with("top-k") || c.name == "plain") {
        run_case(&gpu, &stream, case, 10 + i as u64);
    }
}

/// `f` inside a capture on `stream`: its error, after checking that the capture is still valid
/// (nothing was enqueued) and ending it.
fn refused_in_capture(stream: &Arc<CudaStream>, f: impl FnOnce() -> flashsampling::Result<()>) -> Error {
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
    let result = f();
    let status = stream.capture_status().unwrap();
    let graph = stream.end_capture(CUgraphInstantiate_flags(0));
    assert_eq!(status, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE, "the refused call broke the capture");
    graph.expect("an empty capture ends cleanly");
    result.expect_err("the call must be refused in a capture")
}

#[test]
fn calls_a_graph_could_not_replay_are_refused_and_leave_the_capture_valid() {
    let test = "calls_a_graph_could_not_replay_are_refused_and_leave_the_capture_valid";
    let Some((gpu, stream)) = capturing_backend(test, None) else { return };
    let (b, d, v) = (4usize, 256usize, 3000usize);
    let mut rng = TestRng::new(DATA_SEED + 99);
    let weight = rng.normal_bf16(v * d, 3.0 / (d as f64).sqrt());
    let hidden = rng.normal_bf16(b * d, 1.0);
    let w = stream.clone_htod(&weight).unwrap();
    let h = stream.clone_htod(&hidden).unwrap();
    let h2 = stream.clone_htod(&hidden).unwrap();
    let params = keyed(b, 0, SamplingParams::new(1.0, 0)).with_top_p(vec![0.9; b]);
    let rows = stream.clone_htod(&row_params_words(&params, b).unwrap()).unwrap();
    let hm = DeviceMatrix { data: h.as_view(), rows: b, cols: d };
    let hm2 = DeviceMatrix { data: h2.as_view(), rows: b, cols: d };
    let wm = DeviceMatrix { data: w.as_view(), rows: v, cols: d };
    let capture_error = |e: Error, what: &str| match e {
        Error::Capture { reason } => reason,
        other => panic!("{what}: {other:?}"),
    };
    // No call on the capturing stream yet.
    let mut out = gpu.alloc_samples(b, v).unwrap();
    let e = refused_in_capture(&stream, || gpu.sample_device_rows(&hm, &wm, &params, &rows.as_view(), None, &mut out));
    assert!(capture_error(e, "no warm-up").contains("before the capture"));
    gpu.sample_device_rows(&hm, &wm, &params, &rows.as_view(), None, &mut out).unwrap();
    // Keys from the host.
    let e = refused_in_capture(&stream, || gpu.sample_device(&hm, &wm, &params, &mut out));
    assert!(capture_error(e, "host keys").contains("device memory"));
    // Other operands (new TMA descriptors, for the TMA kernels) or other truncation words.
    let e = refused_in_capture(&stream, || {
        gpu.sample_device_rows(&hm, &wm, &params.clone().with_top_p(vec![0.5; b]), &rows.as_view(), None, &mut out)
    });
    assert!(capture_error(e, "other truncation").contains("truncation words"));
    // (Outside a capture, other operands are fine: the TMA kernels' descriptors are rewritten.)
    gpu.sample_device_rows(&hm2, &wm, &params, &rows.as_view(), None, &mut out).unwrap();
    if gpu.fused_variant_for(b, d, v, Epilogue::Truncate).uses_tma() {
        let e =
            refused_in_capture(&stream, || gpu.sample_device_rows(&hm, &wm, &params, &rows.as_view(), None, &mut out));
        assert!(capture_error(e, "other operands than the warm-up's").contains("TMA"));
    }
    // A larger batch than the warm-up's.
    let params8 = keyed(2 * b, 0, SamplingParams::new(1.0, 0)).with_top_p(vec![0.9; 2 * b]);
    let rows8 = stream.clone_htod(&row_params_words(&params8, 2 * b).unwrap()).unwrap();
    let h8 = stream.clone_htod(&[hidden.clone(), hidden.clone()].concat()).unwrap();
    let hm8 = DeviceMatrix { data: h8.as_view(), rows: 2 * b, cols: d };
    gpu.sample_device_rows(&hm, &wm, &params, &rows.as_view(), None, &mut out).unwrap();
    let e =
        refused_in_capture(&stream, || gpu.sample_device_rows(&hm8, &wm, &params8, &rows8.as_view(), None, &mut out));
    assert!(capture_error(e, "a larger batch").contains("reallocated"));
    // An allocation (the buffers of a call are made before the capture).
    let e = refused_in_capture(&stream, || gpu.alloc_samples(b, v).map(drop));
    assert!(capture_error(e, "an allocation").contains("allocated"));
    // A host mask, sparse adjustments.
    let masked = params.clone().with_allowed(random_mask(b, v, 0.5, 3));
    let e = refused_in_capture(&stream, || gpu.sample_device_rows(&hm, &wm, &masked, &rows.as_view(), None, &mut out));
    assert!(capture_error(e, "host mask").contains("host mask"));
    let adjusted = params.clone().with_adjustments(random_adjustments(b, v, 3, 4));
    let e =
        refused_in_capture(&stream, || gpu.sample_device_rows(&hm, &wm, &adjusted, &rows.as_view(), None, &mut out));
    assert!(capture_error(e, "adjustments").contains("adjustments"));
    // The warm-up's call is captured after all the refusals, and replays its result.
    let want = read(&stream, &out);
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
    let captured = gpu.sample_device_rows(&hm, &wm, &params, &rows.as_view(), None, &mut out);
    let graph = stream.end_capture(CUgraphInstantiate_flags(0));
    captured.unwrap();
    let graph = graph.unwrap().unwrap();
    graph.launch().unwrap();
    assert_eq!(read(&stream, &out), want);
    // Event tracking on: refused (a backend of its own: tracking is a setting of its context).
    let tracked = gpu_or_skip(test).unwrap();
    let s2 = tracked.context().new_stream().unwrap();
    let on = tracked.on_stream(s2.clone()).unwrap();
    let (w2, hh) = (s2.clone_htod(&weight).unwrap(), s2.clone_htod(&hidden).unwrap());
    let (hm, wm) =
        (DeviceMatrix { data: hh.as_view(), rows: b, cols: d }, DeviceMatrix { data: w2.as_view(), rows: v, cols: d });
    let rows2 = s2.clone_htod(&row_params_words(&params, b).unwrap()).unwrap();
    let mut out2 = on.alloc_samples(b, v).unwrap();
    on.sample_device_rows(&hm, &wm, &params, &rows2.as_view(), None, &mut out2).unwrap();
    let e = refused_in_capture(&s2, || on.sample_device_rows(&hm, &wm, &params, &rows2.as_view(), None, &mut out2));
    assert!(capture_error(e, "event tracking").contains("event tracking"));
    s2.synchronize().unwrap();
    stream.synchronize().unwrap();
}

#[test]
fn a_captured_call_into_caller_owned_outputs_replays_into_them() {
    // Issues 51.2 + 51.6: a captured `sample_device_into` writes each replay's results into the
    // caller's buffers (the graph keeps their addresses): bit for bit the eager call's own outputs for
    // the step's keys, with truncation, log-probabilities and top log-probabilities.
    use flashsampling::DeviceOutputs;
    let test = "a_captured_call_into_caller_owned_outputs_replays_into_them";
    let Some((gpu, stream)) = capturing_backend(test, None) else { return };
    let case = cases().into_iter().find(|c| c.name.starts_with("top-k")).expect("the truncation case");
    let (b, d, v) = (case.b, case.d, case.v);
    let mut rng = TestRng::new(DATA_SEED + 40);
    let weight = rng.normal_bf16(v * d, 3.0 / (d as f64).sqrt());
    let hidden = rng.normal_bf16(b * d, 1.0);
    let (w, h) = (stream.clone_htod(&weight).unwrap(), stream.clone_htod(&hidden).unwrap());
    let hm = DeviceMatrix { data: h.as_view(), rows: b, cols: d };
    let wm = DeviceMatrix { data: w.as_view(), rows: v, cols: d };
    let params = (case.keys)(b, 0);
    let k = params.top_logprobs as usize;
    // Each step's reference: the eager call's own outputs.
    let mut eager = gpu.alloc_samples(b, v).unwrap();
    let want: Vec<Outputs> = (0..3)
        .map(|step| {
            let rows = stream.clone_htod(&row_params_words(&(case.keys)(b, step), b).unwrap()).unwrap();
            gpu.sample_device_rows(&hm, &wm, &params, &rows.as_view(), None, &mut eager).unwrap();
            read(&stream, &eager)
        })
        .collect();
    let mut rows = stream.clone_htod(&row_params_words(&params, b).unwrap()).unwrap();
    let (mut tokens, mut scores) = (stream.alloc_zeros::<u32>(b).unwrap(), stream.alloc_zeros::<f32>(b).unwrap());
    let (mut lps, mut raws, mut lses) = (
        stream.alloc_zeros::<f32>(b).unwrap(),
        stream.alloc_zeros::<f32>(b).unwrap(),
        stream.alloc_zeros::<f32>(b).unwrap(),
    );
    let (mut top_t, mut top_l) = (stream.alloc_zeros::<u32>(b * k).unwrap(), stream.alloc_zeros::<f32>(b * k).unwrap());
    let mut out = gpu.alloc_samples(b, v).unwrap();
    let graph = {
        let mut into = DeviceOutputs {
            tokens: tokens.as_view_mut(),
            scores: scores.as_view_mut(),
            logprobs: Some(lps.as_view_mut()),
            raw_logprobs: Some(raws.as_view_mut()),
            logsumexp: Some(lses.as_view_mut()),
            top_logprobs: Some((top_t.as_view_mut(), top_l.as_view_mut())),
        };
        gpu.sample_device_into(&hm, &wm, &params, Some(&rows.as_view()), None, &mut out, &mut into).unwrap();
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
        let captured = gpu.sample_device_into(&hm, &wm, &params, Some(&rows.as_view()), None, &mut out, &mut into);
        let graph = stream.end_capture(CUgraphInstantiate_flags(0));
        captured.unwrap();
        graph.unwrap().unwrap()
    };
    for step in [2u32, 0, 1] {
        upload_words(&stream, &(case.keys)(b, step), b, &mut rows);
        graph.launch().unwrap();
        let w = &want[step as usize];
        let f = |x: &CudaSlice<f32>| bits(&stream.clone_dtoh(x).unwrap());
        assert_eq!(stream.clone_dtoh(&tokens).unwrap(), w.tokens, "step {step}: tokens");
        assert_eq!(f(&scores), w.scores, "step {step}: scores");
        assert_eq!(Some([f(&lps), f(&raws), f(&lses)]), w.logprobs, "step {step}: log-probabilities");
        assert_eq!(Some((stream.clone_dtoh(&top_t).unwrap(), f(&top_l))), w.top, "step {step}: top");
    }
    stream.synchronize().unwrap();
}
