//! Samples a small batch through the public API (GPU if one is usable, else the CPU) and checks the
//! tokens against the CPU backend; prints one line that `.ci/run` counts.

use flashsampling::{BackendChoice, CpuBackend, Matrix, Sampler, SamplingParams};
use half::bf16;

fn main() -> Result<(), flashsampling::Error> {
    let (b, d, v) = (4usize, 64usize, 1000usize);
    let hidden: Vec<bf16> = (0..b * d).map(|i| bf16::from_f32(((i * 7919) % 17) as f32 / 8.0 - 1.0)).collect();
    let weight: Vec<bf16> = (0..v * d).map(|i| bf16::from_f32(((i * 104_729) % 23) as f32 / 16.0 - 0.7)).collect();
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let params = SamplingParams::new(0.8, 42);
    let sampler = Sampler::new(BackendChoice::Auto)?;
    let tokens = sampler.sample(h, w, &params)?;
    let cpu = CpuBackend::new().sample(h, w, &params)?;
    // On the CPU the two are the same computation; a GPU sums the logits in another order (f32 near-ties).
    let on_gpu = matches!(sampler, Sampler::Gpu(_));
    let ok = tokens.iter().all(|&t| (t as usize) < v) && (on_gpu || tokens == cpu);
    println!("stable consumer on {}: tokens {tokens:?}", sampler.describe());
    println!("stable consumer: {} passed, {} failed", ok as u32, !ok as u32);
    if ok { Ok(()) } else { std::process::exit(1) }
}
