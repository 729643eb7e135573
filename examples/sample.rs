//! The main job: sample a batch from an LM head with FlashSampling.
//!
//! By default a synthetic LM head (seed `0x5EED_0F_F1A5`; weight `[V, D]` ~ N(0, (2/√D)²), hidden
//! `[B, D]` ~ N(0, 1), bf16). With `--weight`, the LM head comes from a checkpoint: a safetensors file
//! or a sharded checkpoint's `*.safetensors.index.json`, tensor `--tensor` (default `lm_head.weight`);
//! the hidden states from `--hidden-states` (a `.npy` file, or a safetensors file with tensor
//! `--hidden-tensor`, default `hidden_states`), else synthetic ones of the weight's D. bf16 and f16
//! tensors run as they are (the GPU kernels take either; the weight's type decides, and synthetic
//! inputs take it too); an f32 tensor, or hidden states of the other 16-bit type than the weight, are an
//! error unless `--convert` allows rounding them. Samples one token per row at the given
//! temperature and prints the tokens, the backend and the time. On a GPU it also times the
//! device-resident path (fused kernel + candidate reduction, CUDA events, median of 50 after warm-up)
//! and checks itself against the CPU backend.
//!
//! ```text
//! cargo run --release --example sample -- [--batch B] [--hidden D] [--vocab V] [--temperature T]
//!                                         [--seed S] [--backend auto|gpu|cpu]
//!                                         [--weight FILE [--tensor NAME]] [--hidden-states FILE
//!                                         [--hidden-tensor NAME]] [--convert] [--logprobs]
//! ```
//!
//! `--logprobs` also prints each token's log-probability (under the sampled distribution and under
//! `softmax(logits)`) and each row's log-sum-exp, from the backend that sampled: on the GPU the fused
//! kernel computes them in the same launch as the tokens (no `[B, V]` logits in memory), on the CPU the
//! CPU backend. Asking for them does not change the tokens (same noise); on the GPU they are also
//! checked against the CPU backend's.

use std::path::PathBuf;
use std::time::Instant;

use flashsampling::checkpoint::{Loaded, Values, load_hidden, load_safetensors};

use flashsampling::params::LogProbs;
use flashsampling::timing::EventTimer;
use flashsampling::{BackendChoice, CpuBackend, DeviceMatrix, Element, ElementType, Matrix, Sampler, SamplingParams};
use half::bf16;

const DATA_SEED: u64 = 0x005E_ED0F_F1A5;

struct Args {
    b: usize,
    d: usize,
    v: usize,
    temperature: f32,
    seed: u64,
    backend: BackendChoice,
    weight: Option<PathBuf>,
    tensor: String,
    hidden_states: Option<PathBuf>,
    hidden_tensor: Option<String>,
    convert: bool,
    logprobs: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        b: 4,
        d: 4096,
        v: 151_936,
        temperature: 1.0,
        seed: 42,
        backend: BackendChoice::Auto,
        weight: None,
        tensor: "lm_head.weight".into(),
        hidden_states: None,
        hidden_tensor: None,
        convert: false,
        logprobs: false,
    };
    // Arguments as the OS gives them: a path need not be UTF-8 (a non-UTF-8 one is used as it is;
    // any other non-UTF-8 argument is an error, not a panic).
    let mut it = std::env::args_os().skip(1);
    while let Some(flag) = it.next() {
        let flag = flag.into_string().map_err(|f| format!("unknown argument {}", f.to_string_lossy()))?;
        let mut raw = || it.next().ok_or(format!("{flag} needs a value"));
        let text = |v: std::ffi::OsString| v.into_string().map_err(|v| format!("{flag}: {v:?} is not valid UTF-8"));
        match flag.as_str() {
            "--batch" => a.b = text(raw()?)?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--hidden" => a.d = text(raw()?)?.parse().map_err(|e| format!("--hidden: {e}"))?,
            "--vocab" => a.v = text(raw()?)?.parse().map_err(|e| format!("--vocab: {e}"))?,
            "--temperature" => a.temperature = text(raw()?)?.parse().map_err(|e| format!("--temperature: {e}"))?,
            "--seed" => a.seed = text(raw()?)?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--backend" => {
                a.backend = match text(raw()?)?.as_str() {
                    "auto" => BackendChoice::Auto,
                    "gpu" => BackendChoice::Gpu,
                    "cpu" => BackendChoice::Cpu,
                    o => return Err(format!("--backend: unknown backend {o}")),
                }
            }
            "--weight" => a.weight = Some(PathBuf::from(raw()?)),
            "--tensor" => a.tensor = text(raw()?)?,
            "--hidden-states" => a.hidden_states = Some(PathBuf::from(raw()?)),
            "--hidden-tensor" => a.hidden_tensor = Some(text(raw()?)?),
            "--convert" => a.convert = true,
            "--logprobs" => a.logprobs = true,
            "-h" | "--help" => {
                println!(
                    "usage: sample [--batch B] [--hidden D] [--vocab V] [--temperature T] [--seed S] [--backend auto|gpu|cpu]\n              [--weight FILE [--tensor NAME]] [--hidden-states FILE [--hidden-tensor NAME]] [--convert] [--logprobs]"
                );
                std::process::exit(0);
            }
            o => return Err(format!("unknown argument {o}")),
        }
    }
    Ok(a)
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// The LM head and hidden states: from the files given, else synthetic, all in one element type (the
/// weight's, else the hidden states', else bf16).
fn inputs(a: &mut Args) -> Result<(Values, Values), Box<dyn std::error::Error>> {
    let note = |what: &str, l: &Loaded, path: &PathBuf| {
        let conv = l.converted_from.map_or(String::new(), |d| format!(", converted from {d}"));
        println!("{what}: {} [{}, {}] {}{conv}", path.display(), l.rows, l.cols, l.elem().name());
    };
    // f32 tensors round to bf16 for the weight and to the weight's type for the hidden states.
    let weight = match &a.weight {
        Some(path) => {
            let w = load_safetensors(path, &a.tensor, a.convert.then_some(ElementType::Bf16))?;
            (a.v, a.d) = (w.rows, w.cols);
            Some((w, path))
        }
        None => None,
    };
    let want = weight.as_ref().map(|(w, _)| w.elem());
    let hidden = match &a.hidden_states {
        Some(path) => {
            let mut h =
                load_hidden(path, a.hidden_tensor.as_deref(), a.convert.then_some(want.unwrap_or(ElementType::Bf16)))?;
            if let Some(elem) = want.filter(|&e| e != h.elem()) {
                if !a.convert {
                    return Err(format!(
                        "the hidden states are {} and the weight {}: both must have one type (--convert rounds the hidden states to the weight's)",
                        h.elem().name(),
                        elem.name()
                    )
                    .into());
                }
                h = h.converted(elem);
            }
            a.b = h.rows;
            if weight.is_none() {
                a.d = h.cols; // a synthetic weight of the hidden states' D
            }
            Some((h, path))
        }
        None => None,
    };
    if let Some((w, path)) = &weight {
        note("LM-head weight", w, path);
    }
    if let Some((h, path)) = &hidden {
        note("hidden states", h, path);
    }
    let elem = want.or(hidden.as_ref().map(|(h, _)| h.elem())).unwrap_or(ElementType::Bf16);
    // Synthetic inputs (bf16 values, exact in f16 too) in the run's element type.
    // The library's shape checks come before anything is built of the shape (a typed error for
    // `--vocab 4000000000`, not an allocation that aborts).
    flashsampling::params::check_shape(a.b, a.d, a.v)?;
    SamplingParams::new(a.temperature, a.seed).transform()?;
    // Only the operand not loaded is made (the same values as the whole synthetic head's part).
    // Both reserved before either is drawn: a shape whose memory cannot be had fails at once.
    let (h_made, w_made) =
        flashsampling::synthetic::try_lm_head_parts(a.b, a.d, a.v, DATA_SEED, hidden.is_none(), weight.is_none())?;
    let synthetic = |v: Option<Vec<bf16>>| Values::Bf16(v.expect("made when not loaded")).into_elem(elem);
    let h = match hidden {
        Some((h, _)) => h.values,
        None => synthetic(h_made),
    };
    let w = match weight {
        Some((w, _)) => w.values,
        None => synthetic(w_made),
    };
    Ok((h, w))
}

fn run(mut a: Args) -> Result<(), Box<dyn std::error::Error>> {
    match inputs(&mut a)? {
        (Values::Bf16(h), Values::Bf16(w)) => run_with(&a, &h, &w),
        (Values::F16(h), Values::F16(w)) => run_with(&a, &h, &w),
        _ => unreachable!("inputs() gives one element type"),
    }
}

/// Samples, prints and checks, on hidden states and weight of element type `T`.
fn run_with<T: Element>(a: &Args, hidden: &[T], weight: &[T]) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "FlashSampling: B = {}, D = {}, V = {}, T = {}, seed = {}, {}",
        a.b,
        a.d,
        a.v,
        a.temperature,
        a.seed,
        T::TYPE.name()
    );
    let (h, w) = (Matrix::new(hidden, a.b, hidden.len() / a.b.max(1)), Matrix::new(weight, a.v, a.d));
    let params = SamplingParams::new(a.temperature, a.seed);
    // The environment chooses what the flags leave open: `FLASHSAMPLING_BACKEND` for `--backend auto`,
    // and the GPU backend's tuning (`flashsampling::gpu::GpuOptions::from_env`).
    let choice = if a.backend == BackendChoice::Auto { BackendChoice::from_env()? } else { a.backend };
    let sampler = Sampler::with_options(choice, flashsampling::gpu::GpuOptions::from_env()?)?;
    println!("backend: {}", sampler.describe());
    let start = Instant::now();
    let tokens = sampler.sample(h, w, &params)?;
    let wall = start.elapsed();
    println!("tokens: {tokens:?}");
    if a.logprobs {
        // The same call with log-probabilities, on the same backend: the GPU's fused values there.
        let with = params.clone().with_logprobs(LogProbs::ProcessedAndRaw);
        let s = sampler.sample_scored(h, w, &with)?;
        let from = if matches!(sampler, Sampler::Gpu(_)) { "GPU, fused" } else { "CPU backend" };
        println!("log-probs (sampled distribution; {from}): {:?}", s.logprobs.as_deref().unwrap_or_default());
        println!("log-probs (softmax of the logits; {from}): {:?}", s.raw_logprobs.as_deref().unwrap_or_default());
        println!("log-sum-exp of logits / T ({from}): {:?}", s.logsumexp.as_deref().unwrap_or_default());
        if s.tokens != tokens {
            println!("  (tokens with log-probs on {:?} differ from {tokens:?}: they should not)", s.tokens);
        }
        if matches!(sampler, Sampler::Gpu(_)) {
            let c = CpuBackend::new().sample_scored(h, w, &with)?;
            // Rows where both backends drew the same token (they differ only on f32 near-ties).
            let same: Vec<usize> = (0..a.b).filter(|&r| c.tokens[r] == s.tokens[r]).collect();
            let max_diff = |g: &Option<Vec<f32>>, c: &Option<Vec<f32>>| -> f32 {
                let (Some(g), Some(c)) = (g, c) else { return f32::NAN };
                same.iter().map(|&r| (g[r] - c[r]).abs()).filter(|d| !d.is_nan()).fold(0.0, f32::max)
            };
            println!(
                "  vs the CPU backend on {}/{} rows with the same token: log-probs max |diff| {:.2e}, raw {:.2e}, \
                 log-sum-exp {:.2e}",
                same.len(),
                a.b,
                max_diff(&s.logprobs, &c.logprobs),
                max_diff(&s.raw_logprobs, &c.raw_logprobs),
                max_diff(&s.logsumexp, &c.logsumexp),
            );
        }
    }
    let what = if matches!(sampler, Sampler::Gpu(_)) { "wall clock, incl. host<->device copies" } else { "wall clock" };
    println!("time ({what}): {:.3} ms", wall.as_secs_f64() * 1e3);

    if let Sampler::Gpu(gpu) = &sampler {
        // Device-resident path: weights and hidden states already on the GPU, tokens stay there.
        let stream = gpu.stream();
        let h_dev = stream.clone_htod(hidden)?;
        let w_dev = stream.clone_htod(weight)?;
        let hm = DeviceMatrix { data: h_dev.as_view(), rows: a.b, cols: a.d };
        let wm = DeviceMatrix { data: w_dev.as_view(), rows: a.v, cols: a.d };
        let mut out = gpu.alloc_samples(a.b, a.v)?;
        let timer = EventTimer::new(gpu.context())?;
        let t = timer.time(stream, 10, 50, || gpu.sample_device(&hm, &wm, &params, &mut out))?;
        let device_tokens = stream.clone_dtoh(&out.tokens())?;
        assert_eq!(device_tokens, tokens, "device-resident path and host path disagree");
        println!(
            "fused sample on device (kernel + reduction, CUDA events): median {:.4} ms, min {:.4}, max {:.4} over {} runs",
            t.median, t.min, t.max, t.runs
        );
        let cpu = CpuBackend::new().sample(h, w, &params)?;
        let same = cpu.iter().zip(&tokens).filter(|(a, b)| a == b).count();
        println!("self-check against the CPU backend (same noise): {same}/{} rows identical", a.b);
        if same != a.b {
            println!("  (rows may differ only where two perturbed scores are closer than f32 summation error)");
        }
    }
    Ok(())
}
