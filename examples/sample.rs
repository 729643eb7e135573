//! The main job: sample a batch from a synthetic LM head with FlashSampling.
//!
//! Builds a synthetic LM head (seed `0x5EED_0F_F1A5`; weight `[V, D]` ~ N(0, (2/√D)²), hidden `[B, D]`
//! ~ N(0, 1), bf16), samples one token per row at the given temperature, and prints the tokens, the
//! backend and the time. On a GPU it also times the device-resident path (fused kernel + candidate
//! reduction, CUDA events, median of 50 after warm-up) and checks itself against the CPU backend.
//!
//! ```text
//! cargo run --release --example sample -- [--batch B] [--hidden D] [--vocab V] [--temperature T]
//!                                         [--seed S] [--backend auto|gpu|cpu]
//! ```

use std::time::Instant;

use flashsampling::timing::EventTimer;
use flashsampling::{BackendChoice, CpuBackend, DeviceMatrix, Matrix, Sampler, SamplingParams};

const DATA_SEED: u64 = 0x5EED_0F_F1A5;

struct Args {
    b: usize,
    d: usize,
    v: usize,
    temperature: f32,
    seed: u64,
    backend: BackendChoice,
}

fn parse() -> Result<Args, String> {
    let mut a = Args { b: 4, d: 4096, v: 151_936, temperature: 1.0, seed: 42, backend: BackendChoice::Auto };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--batch" => a.b = val()?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--hidden" => a.d = val()?.parse().map_err(|e| format!("--hidden: {e}"))?,
            "--vocab" => a.v = val()?.parse().map_err(|e| format!("--vocab: {e}"))?,
            "--temperature" => a.temperature = val()?.parse().map_err(|e| format!("--temperature: {e}"))?,
            "--seed" => a.seed = val()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--backend" => {
                a.backend = match val()?.as_str() {
                    "auto" => BackendChoice::Auto,
                    "gpu" => BackendChoice::Gpu,
                    "cpu" => BackendChoice::Cpu,
                    o => return Err(format!("--backend: unknown backend {o}")),
                }
            }
            "-h" | "--help" => {
                println!(
                    "usage: sample [--batch B] [--hidden D] [--vocab V] [--temperature T] [--seed S] [--backend auto|gpu|cpu]"
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

fn run(a: Args) -> Result<(), Box<dyn std::error::Error>> {
    println!("FlashSampling: B = {}, D = {}, V = {}, T = {}, seed = {}", a.b, a.d, a.v, a.temperature, a.seed);
    let (hidden, weight) = flashsampling::synthetic::lm_head(a.b, a.d, a.v, DATA_SEED);
    let (h, w) = (Matrix::new(&hidden, a.b, a.d), Matrix::new(&weight, a.v, a.d));
    let params = SamplingParams::new(a.temperature, a.seed);
    let sampler = Sampler::new(a.backend)?;
    println!("backend: {}", sampler.describe());
    let start = Instant::now();
    let tokens = sampler.sample(h, w, &params)?;
    let wall = start.elapsed();
    println!("tokens: {tokens:?}");
    let what = if matches!(sampler, Sampler::Gpu(_)) { "wall clock, incl. host<->device copies" } else { "wall clock" };
    println!("time ({what}): {:.3} ms", wall.as_secs_f64() * 1e3);

    if let Sampler::Gpu(gpu) = &sampler {
        // Device-resident path: weights and hidden states already on the GPU, tokens stay there.
        let stream = gpu.stream();
        let h_dev = stream.clone_htod(&hidden)?;
        let w_dev = stream.clone_htod(&weight)?;
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
