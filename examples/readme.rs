//! The README's Rust example, compiled and run by `tests/readme.rs` (and built by `cargo test`), which also checks
//! that the README shows exactly the lines between the markers.

pub fn main() -> Result<(), flashsampling::Error> {
    let (b, d, v) = (4, 64, 1000);
    let hidden = vec![half::bf16::from_f32(0.01); b * d]; // your hidden states [B, D] (bf16 or f16)
    let weight = vec![half::bf16::from_f32(0.02); v * d]; // your LM head [V, D]
    // README begin
    use flashsampling::{BackendChoice, Matrix, Sampler, SamplingParams};

    let sampler = Sampler::new(BackendChoice::Auto)?; // the GPU if one is usable, else the CPU backend
    let params = SamplingParams::new(0.8, 42) // temperature 0.8, seed 42
        .with_top_p(vec![0.9; b]); // per-row controls: top-k/p, min-p, masks, penalties, log-probs …
    let tokens: Vec<u32> = sampler.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &params)?;
    // README end
    assert_eq!(tokens.len(), b);
    println!("{tokens:?}");
    Ok(())
}
