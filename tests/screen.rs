//! Issue 54's study on the CPU: the FP8 / int8 screen (`flashsampling::cpu::screen`) returns the bf16
//! path's samples bit for bit (tokens and scores) on every test head, quantization and temperature;
//! and, run by hand, the window statistics behind docs/findings/40-fp8-screen-study.md (about 5
//! minutes; without the variable the test prints a SKIP line):
//!
//! `FS_SCREEN_STUDY=1 cargo test --release --test screen study_window_statistics -- --nocapture`

mod common;

use common::*;
use flashsampling::cpu::screen::{Quant, ScreenedHead, round_e4m3, score_interval};
use flashsampling::kernels::{RowNoise, Transform};
use flashsampling::{CpuBackend, Matrix, SamplingParams};
use half::{bf16, f16};

const QUANTS: [Quant; 3] = [Quant::E4m3Row, Quant::E4m3Block32, Quant::Int8Row];

#[test]
fn e4m3_rounding_is_the_formats() {
    // Every e4m3 value rounds to itself; midpoints go to the even neighbour; past 448 saturates.
    let mut values = vec![0.0];
    for e in -6..=8 {
        for m in 0..8 {
            values.push((1.0 + m as f64 / 8.0) * (e as f64).exp2());
        }
    }
    for m in 1..8 {
        values.push(m as f64 * (-9f64).exp2()); // subnormals
    }
    values.retain(|&x| x <= 448.0);
    for &x in &values {
        assert_eq!(round_e4m3(x), x, "{x}");
        assert_eq!(round_e4m3(-x), -x, "{x}");
    }
    assert_eq!(round_e4m3(1.0625), 1.0); // halfway between 1 and 1.125: even mantissa
    assert_eq!(round_e4m3(1.1875), 1.25);
    assert_eq!(round_e4m3(1000.0), 448.0);
    assert_eq!(round_e4m3(0.5 * (-9f64).exp2()), 0.0);
}

/// The screen's samples against `sample_scored`'s over three parameter sets, every quantization, with
/// and without exact dimensions; with `prunes`, the screen must also leave under a tenth of V.
fn check_exact<T: flashsampling::Element>(
    what: &str,
    hidden: &[T],
    weight: &[T],
    (b, d, v): (usize, usize, usize),
    prunes: bool,
) {
    let (h, w) = (Matrix::new(hidden, b, d), Matrix::new(weight, v, d));
    let cpu = CpuBackend::new();
    let temps = mixed_temperatures(b);
    for params in [
        SamplingParams::new(1.0, 3),
        SamplingParams::new(0.6, 4).with_streams((0..b as u64).map(|r| 100 + r).collect()),
        SamplingParams::new(1.0, 5).with_temperatures(temps.clone()),
    ] {
        let want = cpu.sample_scored(h, w, &params).unwrap();
        for quant in QUANTS {
            for outliers in [vec![], vec![0, d / 2, d - 1]] {
                let head = ScreenedHead::prepare(w, quant, &outliers).unwrap();
                let (got, stats) = cpu.sample_screened(h, w, &head, &params).unwrap();
                let at = format!("{what}, {quant:?}, {} exact dims, T {}", outliers.len(), params.temperature);
                assert_eq!(got.tokens, want.tokens, "{at}: tokens");
                assert_eq!(bits(&got.scores), bits(&want.scores), "{at}: scores");
                assert!(stats.survivors.iter().all(|&s| (1..=v).contains(&s)), "{at}");
                assert!(stats.union <= v);
                assert!(!prunes || stats.union < v / 10, "{at}: {} survivors", stats.union);
                if std::env::var("SCREEN_DEBUG").is_ok() {
                    eprintln!("{at}: {:?} union {}", stats.survivors, stats.union);
                }
            }
        }
    }
}

#[test]
fn the_screen_draws_the_bf16_paths_samples_bit_for_bit() {
    let (b, d, v) = (8, 128, 3000);
    // Random heads at three logit spreads (the wider, the fewer survivors).
    for (std, seed) in [(0.05, 1), (0.3, 2), (1.5, 3)] {
        let mut rng = TestRng::new(0x54_0000 + seed);
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, std / (d as f64).sqrt());
        check_exact(&format!("random head, logit std {std}"), &hidden, &weight, (b, d, v), std > 1.0);
    }
    // Exact logits with many exact ties (bf16 weights of a narrow range): ties go to the lower index.
    let (hidden, weight) = exact_head(b, d, v, 0.5, 0x54_0010);
    let coarse: Vec<bf16> = weight.iter().map(|x| bf16::from_f32((x.to_f32() * 4.0).round() / 4.0)).collect();
    check_exact("exact head with ties", &hidden, &coarse, (b, d, v), true);
    // f16 weights (products exact in f32 there too).
    let mut rng = TestRng::new(0x54_0020);
    let hidden: Vec<f16> = (0..b * d).map(|_| f16::from_f64(rng.normal())).collect();
    let weight: Vec<f16> = (0..v * d).map(|_| f16::from_f64(rng.normal() * 0.05)).collect();
    check_exact("f16 head", &hidden, &weight, (b, d, v), false);
}

#[test]
fn the_screen_refuses_what_it_does_not_take() {
    let (b, d, v) = (2, 64, 100);
    let (hidden, weight) = exact_head(b, d, v, 0.5, 7);
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let head = ScreenedHead::prepare(w, Quant::E4m3Row, &[]).unwrap();
    let cpu = CpuBackend::new();
    for params in [
        SamplingParams::new(1.0, 0).with_softcap(5.0),
        SamplingParams::new(1.0, 0).with_top_k(vec![5; b]),
        SamplingParams::new(1.0, 0).with_samples_per_row(2),
    ] {
        assert!(matches!(cpu.sample_screened(h, w, &head, &params), Err(flashsampling::Error::Unsupported { .. })));
    }
    let other = ScreenedHead::prepare(Matrix::new(&weight[..50 * d], 50, d), Quant::E4m3Row, &[]).unwrap();
    assert!(cpu.sample_screened(h, w, &other, &SamplingParams::new(1.0, 0)).is_err());
    assert!(ScreenedHead::prepare(w, Quant::Int8Row, &[d]).is_err());
}

/// A synthetic LM head for the study (see the finding for the statistics it imitates): RMS-normed
/// hidden states (`‖h‖ = √D`) whose `k` outlier dimensions hold a share `energy` of `‖h‖²`, weights
/// with logit standard deviation `logit_std` across the vocabulary (the outlier columns scaled so
/// they contribute to the logits like any other dimension), and, with `boost`, one token per row
/// raised by `boost` (a peaked next-token distribution).
struct StudyHead {
    hidden: Vec<bf16>,
    weight: Vec<bf16>,
    outliers: Vec<usize>,
}

fn study_head(b: usize, (d, v): (usize, usize), (k, energy): (usize, f64), logit_std: f64, boost: f64) -> StudyHead {
    let mut rng = TestRng::new(0x54_5EED ^ (d * 31 + k * 7 + (energy * 100.0) as usize) as u64);
    let outliers: Vec<usize> = (0..k).map(|j| (j * 977 + 13) % d).collect();
    let mut hidden = vec![0f64; b * d];
    for r in 0..b {
        let x = &mut hidden[r * d..(r + 1) * d];
        for v in x.iter_mut() {
            *v = rng.normal();
        }
        if k > 0 {
            let rest: f64 = (0..d).filter(|j| !outliers.contains(j)).map(|j| x[j] * x[j]).sum();
            let each = (energy / (1.0 - energy) * rest / k as f64).sqrt();
            for (j, &o) in outliers.iter().enumerate() {
                x[o] = if (r + j) % 2 == 0 { each } else { -each };
            }
        }
        let rms = (x.iter().map(|v| v * v).sum::<f64>() / d as f64).sqrt();
        x.iter_mut().for_each(|v| *v /= rms);
    }
    // Outlier columns: scaled by rms(h_R) / |h_O| so they add to the logits like an average dimension.
    let h_r = if k > 0 { (1.0 - energy).sqrt() } else { 1.0 };
    let h_o = if k > 0 { (energy * d as f64 / k as f64).sqrt() } else { 1.0 };
    let sigma_w = logit_std / (d as f64 * (1.0 - energy)).sqrt();
    let mut weight = vec![0f64; v * d];
    for i in 0..v {
        for j in 0..d {
            let c = if outliers.contains(&j) { h_r / h_o } else { 1.0 };
            weight[i * d + j] = rng.normal() * sigma_w * c;
        }
    }
    if boost > 0.0 {
        // Row r's hidden state leans toward token (r · 7919) mod V by `boost` in logit.
        for r in 0..b {
            let t = (r * 7919 + 11) % v;
            let wt = &weight[t * d..(t + 1) * d];
            let n2: f64 = wt.iter().map(|x| x * x).sum();
            for j in 0..d {
                hidden[r * d + j] += boost * wt[j] / n2;
            }
        }
    }
    StudyHead {
        hidden: hidden.iter().map(|&x| bf16::from_f64(x)).collect(),
        weight: weight.iter().map(|&x| bf16::from_f64(x)).collect(),
        outliers,
    }
}

/// One row of the study's table: `what` (the head, and the share of `‖h‖²` in its outlier
/// dimensions), then per quantization, exact dimensions (none, or `outliers`) and temperature, the
/// mean bound over `logit_std`, the survivors per row (mean, p90, max), their union over the rows and
/// the bytes a kernel would read relative to the bf16 head at B = 1 and at B = rows.
fn window_rows<T: flashsampling::Element>(
    what: &str,
    (hidden, weight): (&[T], &[T]),
    (b, d, v): (usize, usize, usize),
    outliers: &[usize],
    logit_std: f64,
) -> Vec<String> {
    let w = Matrix::new(weight, v, d);
    let mut rows = Vec::new();
    for quant in QUANTS {
        for exact in [false, true] {
            if exact && outliers.is_empty() {
                continue;
            }
            let kept: &[usize] = if exact { outliers } else { &[] };
            let screened = ScreenedHead::prepare(w, quant, kept).unwrap();
            let estimates: Vec<(Vec<f64>, Vec<f64>)> = (0..b)
                .map(|r| {
                    let h: Vec<f32> = hidden[r * d..(r + 1) * d].iter().map(|x| x.to_f32()).collect();
                    screened.estimate(&h)
                })
                .collect();
            let mean_e = estimates.iter().flat_map(|(_, e)| e.iter()).sum::<f64>() / (b * v) as f64;
            for t in [0.0f32, 0.6, 1.0] {
                let tr = Transform::from_temperature(t);
                let mut survivors = Vec::new();
                let mut union = vec![false; v];
                for (r, (est, bound)) in estimates.iter().enumerate() {
                    let noise = RowNoise { seed: 9, stream: r as u64, sample: 0 };
                    let g = |i: usize| if tr.is_greedy() { 0.0 } else { noise.gumbel_at(i as u32) };
                    let iv: Vec<(f64, f64)> = (0..v)
                        .map(|i| score_interval(est[i], bound[i], g(i), tr.logit_scale(), tr.noise_scale))
                        .collect();
                    let best = iv.iter().map(|x| x.0).fold(f64::NEG_INFINITY, f64::max);
                    let alive: Vec<usize> = (0..v).filter(|&i| iv[i].1 >= best).collect();
                    alive.iter().for_each(|&i| union[i] = true);
                    survivors.push(alive.len());
                }
                let union = union.iter().filter(|&&x| x).count();
                survivors.sort_unstable();
                let mean = survivors.iter().sum::<usize>() as f64 / b as f64;
                let p90 = survivors[(b * 9 / 10).min(b - 1)];
                let copy = quant.bytes_per_row(d) + 8 + 2 * kept.len();
                let ratio = |u: f64| (v as f64 * copy as f64 + u * 2.0 * d as f64) / (v * d * 2) as f64;
                rows.push(format!(
                    "| {d} | {quant:?} | {} | {what} | {t} | {:.2} | {mean:.0}, {p90}, {} | {union} | {:.3} | {:.3} |",
                    kept.len(),
                    mean_e / logit_std,
                    survivors[b - 1],
                    ratio(mean),
                    ratio(union as f64),
                ));
            }
        }
    }
    rows
}

const TABLE_HEAD: &str = "| D | quant | exact dims | head | T | E / logit std | survivors / row (mean, p90, max) | union | bytes / bf16 B=1 | B=rows |\n|---|---|---|---|---|---|---|---|---|---|";

#[test]
fn study_window_statistics() {
    if std::env::var("FS_SCREEN_STUDY").is_err() {
        visible("SKIP study_window_statistics: the study's measurement (minutes); set FS_SCREEN_STUDY=1 to run it");
        return;
    }
    let (b, v) = (8usize, 32_768usize);
    println!("{TABLE_HEAD}");
    for d in [1024usize, 4096] {
        for (k, energy) in [(0usize, 0.0f64), (4, 0.5), (4, 0.9)] {
            for (name, logit_std, boost) in [("flat σ=3", 3.0, 0.0), ("peaked σ=2 +10", 2.0, 10.0)] {
                let head = study_head(b, (d, v), (k, energy), logit_std, boost);
                let what = format!("{name}, outliers {energy}");
                for row in window_rows(&what, (&head.hidden, &head.weight), (b, d, v), &head.outliers, logit_std) {
                    println!("{row}");
                }
            }
        }
    }
}

/// The study on a real head: `FS_SCREEN_HEAD` (a safetensors checkpoint or index), its tensor
/// `FS_SCREEN_TENSOR` (default `lm_head.weight`), hidden states `FS_SCREEN_HIDDEN` (`.npy` or
/// safetensors, `[B, D]`, f32 rounded to the head's type); the exact dimensions are the
/// `FS_SCREEN_OUTLIERS` (default 4) with the largest mean `|h|`; the bound is reported over the
/// rows' measured logit standard deviation.
fn real_head_rows(head: &std::path::Path, tensor: &str, hidden: &std::path::Path, k: usize) -> Vec<String> {
    use flashsampling::checkpoint::{load_hidden, load_safetensors};
    let w = load_safetensors(head, tensor, Some(flashsampling::ElementType::Bf16)).unwrap();
    let h = load_hidden(hidden, None, Some(w.elem())).unwrap().converted(w.elem());
    let (b, d, v) = (h.rows, h.cols, w.rows);
    assert_eq!(w.cols, d, "hidden size");
    fn run<T: flashsampling::Element>(h: &[T], w: &[T], (b, d, v): (usize, usize, usize), k: usize) -> Vec<String> {
        let mut mean_abs = vec![0f64; d];
        for r in 0..b {
            for j in 0..d {
                mean_abs[j] += (h[r * d + j].to_f32() as f64).abs() / b as f64;
            }
        }
        let mut dims: Vec<usize> = (0..d).collect();
        dims.sort_by(|&a, &c| mean_abs[c].total_cmp(&mean_abs[a]));
        dims.truncate(k);
        // The rows' logit spread, f64 (the reference `E / σ` is over).
        let std = (0..b)
            .map(|r| {
                let y = logits_f64(h, w, d, r);
                let m = y.iter().sum::<f64>() / v as f64;
                (y.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v as f64).sqrt()
            })
            .sum::<f64>()
            / b as f64;
        window_rows(&format!("real head, logit std {std:.2}"), (h, w), (b, d, v), &dims, std)
    }
    match (w.bf16(), h.bf16(), w.f16(), h.f16()) {
        (Some(w), Some(h), _, _) => run(h.data, w.data, (b, d, v), k),
        (_, _, Some(w), Some(h)) => run(h.data, w.data, (b, d, v), k),
        _ => unreachable!("the hidden states are converted to the head's type"),
    }
}

#[test]
fn study_a_real_head() {
    if std::env::var("FS_SCREEN_HEAD").is_err() {
        visible("SKIP study_a_real_head: set FS_SCREEN_HEAD and FS_SCREEN_HIDDEN (a real head and its hidden states)");
        return;
    }
    let var = |n: &str| std::env::var(n).unwrap_or_else(|_| panic!("set {n}"));
    let tensor = std::env::var("FS_SCREEN_TENSOR").unwrap_or("lm_head.weight".into());
    let k = std::env::var("FS_SCREEN_OUTLIERS").map_or(4, |s| s.parse().expect("FS_SCREEN_OUTLIERS: a count"));
    println!("{TABLE_HEAD}");
    for row in real_head_rows(var("FS_SCREEN_HEAD").as_ref(), &tensor, var("FS_SCREEN_HIDDEN").as_ref(), k) {
        println!("{row}");
    }
}

#[test]
fn the_real_head_study_reads_a_checkpoint() {
    // The real-head entry point on a small head written as a checkpoint and `.npy` hidden states.
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screen-study");
    std::fs::create_dir_all(&dir).unwrap();
    let (b, d, v) = (3usize, 32usize, 256usize);
    let mut rng = TestRng::new(0x54_F11E);
    let weight = rng.normal_bf16(v * d, 0.2);
    let hidden: Vec<f32> = (0..b * d).map(|i| if i % d == 5 { 20.0 } else { rng.normal() as f32 }).collect();
    let bytes: Vec<u8> = weight.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, vec![v, d], &bytes).unwrap();
    safetensors::serialize_to_file([("lm_head.weight", view)], None, &dir.join("head.safetensors")).unwrap();
    let header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({b}, {d}), }}");
    let pad = 64 - (10 + header.len() + 1) % 64;
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend(((header.len() + pad + 1) as u16).to_le_bytes());
    npy.extend(header.bytes().chain(std::iter::repeat_n(b' ', pad)).chain([b'\n']));
    npy.extend(hidden.iter().flat_map(|x| x.to_le_bytes()));
    std::fs::write(dir.join("hidden.npy"), npy).unwrap();
    let rows = real_head_rows(&dir.join("head.safetensors"), "lm_head.weight", &dir.join("hidden.npy"), 2);
    // Three quantizations, with and without the 2 exact dimensions (dimension 5 among them), three T.
    assert_eq!(rows.len(), 3 * 2 * 3, "{rows:?}");
    assert!(rows.iter().all(|r| r.starts_with("| 32 |") && r.contains("real head")), "{rows:?}");
}
