//! GPU tests: device noise bit-identical to the host, the fused kernel against the CPU backend for the
//! same noise, chi-squared on the GPU, greedy against a cuBLAS-free f32 reference, the device-resident
//! API, NaN handling and device-buffer validation.
//!
//! Without a GPU each test prints a visible `SKIP` line and passes; with `FLASHSAMPLING_REQUIRE_GPU=1`
//! it fails instead. `FLASHSAMPLING_GPU_TEST_QUICK=1` (used under compute-sanitizer) keeps only the
//! smaller shapes.

mod common;

use common::*;
use flashsampling::kernels::INVALID_INDEX;
use flashsampling::kernels::config::{Epilogue, Family, FusedVariant};
use flashsampling::kernels::noise::{gumbel4_at, is_extreme};
use flashsampling::kernels::philox::philox4x32_10;
use flashsampling::{CpuBackend, DeviceMatrix, Error, Matrix, SamplingParams};
use half::bf16;

const SEED: u64 = 0x6E0_5EED;
const DATA_SEED: u64 = 0xDA7A_6E00;

fn quick() -> bool {
    std::env::var("FLASHSAMPLING_GPU_TEST_QUICK").is_ok_and(|v| v == "1")
}

fn counters(n: usize) -> Vec<[u32; 4]> {
    let mut rng = TestRng::new(DATA_SEED);
    let mut c: Vec<[u32; 4]> = (0..n)
        .map(|_| {
            let (a, b) = (rng.next_u64(), rng.next_u64());
            [a as u32, (a >> 32) as u32, b as u32, (b >> 32) as u32]
        })
        .collect();
    c[0] = [0; 4];
    c[1] = [u32::MAX; 4];
    c[2] = [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344];
    c
}

#[test]
fn philox_on_the_device_is_bit_identical_to_the_host() {
    let Some(gpu) = gpu_or_skip("philox_on_the_device_is_bit_identical_to_the_host") else { return };
    // Random123 known answers first.
    let kat = gpu.philox_on_device(&[[0; 4]], [0, 0]).unwrap();
    assert_eq!(kat[0], [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
    let kat = gpu.philox_on_device(&[[u32::MAX; 4]], [u32::MAX; 2]).unwrap();
    assert_eq!(kat[0], [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]);
    let kat =
        gpu.philox_on_device(&[[0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344]], [0xa4093822, 0x299f31d0]).unwrap();
    assert_eq!(kat[0], [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]);
    let c = counters(1 << 16);
    let key = [0xdead_beef, 0x0123_4567];
    let dev = gpu.philox_on_device(&c, key).unwrap();
    for (i, (ctr, got)) in c.iter().zip(&dev).enumerate() {
        assert_eq!(*got, philox4x32_10(*ctr, key), "counter {i}");
    }
}

#[test]
fn gumbel_noise_on_the_device_is_bit_identical_to_the_host() {
    let Some(gpu) = gpu_or_skip("gumbel_noise_on_the_device_is_bit_identical_to_the_host") else { return };
    let mut c = counters(1 << 16);
    let key = [7, 9];
    // Counters with an extreme word (4 · 2^-23 of groups), whose noise takes the refinement call.
    let mut group = 0u32;
    while c.len() < (1 << 16) + 16 {
        let ctr = [group, 5, 0xabcd, 1];
        if philox4x32_10(ctr, key).iter().any(|&x| is_extreme(x)) {
            c.push(ctr);
        }
        group += 1;
    }
    let dev = gpu.gumbel_on_device(&c, key).unwrap();
    for (i, (ctr, got)) in c.iter().zip(&dev).enumerate() {
        let want = gumbel4_at(*ctr, key).map(f32::to_bits);
        assert_eq!(*got, want, "counter {i}");
    }
}

#[test]
fn far_tail_rates_match_softmax_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("far_tail_rates_match_softmax_on_the_gpu") else { return };
    // Token 0 at logit 0, the other V − 1 = 262143 tokens `gap` below it (issue 18's rows): within the
    // old noise's reach (18 nats, where it sampled 16% of the rate) and beyond it (21, 24). The weight
    // and hidden rows stay on the device; each call draws B rows with fresh streams.
    let (v, b) = (1usize << 18, 4096usize);
    for (gap, rounds) in [(18.0f32, 64usize), (21.0, 256), (24.0, 2560)] {
        if quick() && gap > 18.0 {
            continue;
        }
        let (hidden, weight) = far_tail_setup(v, b, gap);
        let h_dev = gpu.stream().clone_htod(&hidden).unwrap();
        let w_dev = gpu.stream().clone_htod(&weight).unwrap();
        let mut out = gpu.alloc_samples(b, v).unwrap();
        let start = std::time::Instant::now();
        let mut count = 0u64;
        for r in 0..rounds {
            let p = params_round(1.0, SEED ^ 0xfa7, b, (r * b) as u64);
            let tokens = sample_on_device(&gpu, (&h_dev, b), (&w_dev, v), FAR_TAIL_D, &p, &mut out);
            assert!(tokens.iter().all(|&t| (t as usize) < v), "gap {gap}: token out of range");
            count += tokens.iter().filter(|&&t| t != 0).count() as u64;
        }
        let n = (b * rounds) as u64;
        let p = far_tail_probability(v, gap, 1.0);
        let expected = n as f64 * p;
        let z = (count as f64 - expected) / (expected * (1.0 - p)).sqrt();
        visible(&format!(
            "GPU far tail V={v} gap {gap}: {count} of {n} samples, expected {expected:.1}, z = {z:.2} ({:.1} s)",
            start.elapsed().as_secs_f64()
        ));
        assert!(count > 0 && z.abs() < 4.5, "gap {gap}: {count} tail samples, expected {expected:.1}, z = {z:.2}");
    }
}

#[test]
fn far_tail_tokens_beyond_the_old_reach_are_sampled_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("far_tail_tokens_beyond_the_old_reach_are_sampled_on_the_gpu") else { return };
    for (stream, margin) in FAR_TAIL_STREAMS {
        assert_eq!(far_tail_reach_case(stream, |h, w, p| gpu.sample(h, w, p).unwrap()), margin, "stream {stream}");
    }
}

/// Compares GPU and CPU tokens for the same noise. Returns the number of mismatching rows; each
/// mismatch must be explained by a top-2 perturbed-score gap below the f32 accumulation tolerance.
fn compare_with_cpu(gpu: &flashsampling::GpuBackend, b: usize, d: usize, v: usize, t: f32) -> usize {
    let mut rng = TestRng::new(DATA_SEED ^ (b * 1_000_003 + d * 7919 + v) as u64);
    let hidden = rng.normal_bf16(b * d, 1.0);
    // Logit standard deviation ≈ 2 whatever D is.
    let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
    let params = SamplingParams::new(t, SEED ^ v as u64).with_streams((0..b as u64).map(|i| 31 * i + 5).collect());
    let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
    let g = gpu.sample_scored(h, w, &params).unwrap();
    let c = CpuBackend::new().sample_scored(h, w, &params).unwrap();
    near_tie_mismatches(&format!("B={b} D={d} V={v}"), (&hidden, &weight, d), &params, t, &g.tokens, &c.tokens)
}

/// Issue 49.4: on compute capability 9.0 the backend loads the embedded cubins (machine code of the
/// pinned ptxas; no driver JIT, so a fresh machine's first backend is ready in about a second), and
/// they draw what the CPU backend draws; elsewhere, or with `FLASHSAMPLING_JIT=1`, the PTX.
#[test]
fn compute_capability_9_loads_the_cubins_and_they_sample_exactly() {
    use cudarc::driver::sys::CUdevice_attribute as A;
    use flashsampling::ModuleCode;
    let Some(gpu) = common::gpu_or_skip("compute_capability_9_loads_the_cubins_and_they_sample_exactly") else {
        return;
    };
    let cc = (
        gpu.context().attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).unwrap(),
        gpu.context().attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).unwrap(),
    );
    let jit = std::env::var("FLASHSAMPLING_JIT").is_ok_and(|v| v == "1");
    let portable_only = std::env::var("FLASHSAMPLING_PORTABLE").is_ok_and(|v| v == "1");
    let (portable, hopper) = gpu.module_code();
    common::visible(&format!("module code on compute capability {cc:?}: portable {portable:?}, Hopper {hopper:?}"));
    if cc == (9, 0) && !jit {
        assert_eq!(portable, ModuleCode::Cubin, "the portable module's cubin did not load");
        if !portable_only {
            assert_eq!(hopper, Some(ModuleCode::Cubin), "the Hopper module's cubin did not load");
        }
    } else {
        assert_eq!(portable, ModuleCode::Ptx);
    }
    // A fresh backend from embedded cubins is ready in well under the driver JIT's minutes.
    if cc == (9, 0) && !jit {
        let t = std::time::Instant::now();
        drop(flashsampling::GpuBackend::new(0).unwrap());
        let took = t.elapsed();
        common::visible(&format!("a second GpuBackend::new took {took:?}"));
        assert!(took < std::time::Duration::from_secs(10), "{took:?}");
    }
    assert_eq!(compare_with_cpu(&gpu, 8, 256, 4096, 1.0), 0);
}

#[test]
fn fused_kernel_matches_the_cpu_backend() {
    let Some(gpu) = gpu_or_skip("fused_kernel_matches_the_cpu_backend") else { return };
    let (mut rows, mut mismatches) = (0usize, 0usize);
    for &v in &[1000usize, 151_936] {
        for &d in &[64usize, 4096] {
            // One batch size or more per default variant (see `fused_variant_for`; `n16` and `n32`
            // are chosen at D > 4096 only, and every variant runs forced in
            // `every_fused_variant_draws_the_same_samples`).
            for &b in &[1usize, 3, 16, 29, 64, 100, 257] {
                if quick() && (v * d > 1000 * 4096) && b > 3 {
                    continue;
                }
                let m = compare_with_cpu(&gpu, b, d, v, 1.0);
                let kernel = gpu.fused_variant_for(b, d, v, Epilogue::Sample);
                visible(&format!("fused vs CPU: B={b:>3} D={d:>4} V={v:>6} {kernel}: {m} mismatching rows of {b}"));
                rows += b;
                mismatches += m;
            }
        }
    }
    assert!(mismatches * 1000 <= rows, "{mismatches} of {rows} rows differ (> 0.1%)");
}

#[test]
fn every_fused_variant_draws_the_same_samples() {
    let Some(mut gpu) = gpu_or_skip("every_fused_variant_draws_the_same_samples") else { return };
    // Batch sizes around every batch tile (8, 16, 32, 64, 128 rows), D not a multiple of the 64-column
    // stage, V not a multiple of any vocab tile. Every mma.sync variant of one family (block staging;
    // the portable TMA kernels) computes each logit with the same MMAs in the same order, so their
    // tokens and scores must be bit-identical. The wgmma variants
    // (on compute capability 9.0) sum each k16 step in the tensor core's own order: they must match
    // the CPU backend within the f32 tolerance, like every variant.
    let shapes: &[(usize, usize, usize)] = if quick() {
        &[(3, 136, 1008), (40, 72, 777)]
    } else {
        &[(1, 136, 1008), (9, 4096, 20_001), (33, 200, 3001), (70, 64, 784), (130, 1024, 5008), (257, 72, 999)]
    };
    let entries = gpu.fused_variants();
    let names: Vec<&str> = entries.iter().map(|e| e.entry).collect();
    visible(&format!("fused-kernel variants on this GPU: {}", names.join(", ")));
    for &(b, d, v) in shapes {
        let mut rng = TestRng::new(DATA_SEED ^ 0x7A_u64 ^ (b * 7919 + d + v * 31) as u64);
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
        let params = SamplingParams::new(0.8, SEED + b as u64).with_streams((0..b as u64).map(|i| 7 * i + 1).collect());
        let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
        // The first variant of each mma.sync family.
        let mut first_mma_sync: Vec<(FusedVariant, flashsampling::Samples)> = Vec::new();
        let mut by_entry = std::collections::HashMap::new();
        let mut twins = 0;
        let bits = |x: &[f32]| x.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
        for &entry in &entries {
            gpu.set_fused_variant(Some(entry)).unwrap();
            if !entry.supports_vocab(v as u32) {
                // The hidden-as-A kernels need V % 16 == 0: a typed error before any launch.
                let err = gpu.sample_scored(h, w, &params).unwrap_err();
                assert!(matches!(err, Error::UnsupportedVocab { .. }), "{entry}, V={v}: {err:?}");
                continue;
            }
            let got = gpu.sample_scored(h, w, &params).unwrap();
            let m = compare_with_cpu(&gpu, b, d, v, 1.0);
            visible(&format!("variant {entry:<30} B={b:>3} D={d:>4} V={v:>5}: vs CPU {m} mismatching rows of {b}"));
            assert!(m * 50 <= b, "{entry}: {m} of {b} rows differ from the CPU");
            // Splitting the batch tile over the two consumer warpgroups (`…x2`) does not change any
            // logit's MMAs: bit-identical tokens and scores to the variant that takes turns.
            if let Some(twin) = entry.entry.strip_suffix("x2").and_then(|base| by_entry.get(base)) {
                twins += 1;
                let twin: &flashsampling::Samples = twin;
                assert_eq!(got.tokens, twin.tokens, "{entry} vs its twin: B={b} D={d} V={v}");
                assert_eq!(bits(&got.scores), bits(&twin.scores), "{entry} vs its twin: scores");
            }
            by_entry.insert(entry.entry, got.clone());
            // Every mma.sync variant of a family computes each logit with the same MMAs in the same order.
            if matches!(entry.family, Family::MmaSync | Family::TmaMmaSync) {
                match first_mma_sync.iter().find(|(f, _)| f.family == entry.family) {
                    None => first_mma_sync.push((entry, got)),
                    Some((f, first)) => {
                        assert_eq!(got.tokens, first.tokens, "{entry} vs {f}: B={b} D={d} V={v}");
                        assert_eq!(bits(&got.scores), bits(&first.scores), "{entry} vs {f}: scores");
                    }
                }
            }
        }
        // With the sm_90a module: tma_n64x2 and (V % 16 == 0) tmat_n64x2 have a twin.
        if gpu.hopper_kernels() {
            assert_eq!(twins, 1 + (v % 16 == 0) as usize, "twin comparisons for B={b} D={d} V={v}");
        }
    }
    gpu.set_fused_variant(None).unwrap();
}

#[test]
fn greedy_matches_a_cublas_free_f32_reference() {
    let Some(gpu) = gpu_or_skip("greedy_matches_a_cublas_free_f32_reference") else { return };
    for &(b, d, v) in &[(5usize, 4096usize, 151_936usize), (70, 64, 1000)] {
        let mut rng = TestRng::new(DATA_SEED + 77 + b as u64);
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
        let tokens =
            gpu.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &SamplingParams::greedy()).unwrap();
        for row in 0..b {
            // Plain f32 reference: logits summed on the CPU, argmax with ties to the lower index.
            let h: Vec<f32> = hidden[row * d..(row + 1) * d].iter().map(|x| x.to_f32()).collect();
            let logit = |i: usize| -> f32 {
                let w: Vec<f32> = weight[i * d..(i + 1) * d].iter().map(|x| x.to_f32()).collect();
                flashsampling::cpu::dot(&h, &w)
            };
            let y: Vec<f32> = (0..v).map(logit).collect();
            let best = (0..v).fold(0, |m, i| if y[i] > y[m] { i } else { m });
            let t = tokens[row] as usize;
            if t != best {
                let gap = (y[best] - y[t]).abs() as f64;
                let tol = f32_dot_tolerance(
                    d,
                    abs_dot(&hidden, &weight, d, row, best).max(abs_dot(&hidden, &weight, d, row, t)),
                );
                assert!(gap < tol, "B={b} row {row}: GPU greedy {t}, reference argmax {best}, gap {gap:e} >= {tol:e}");
            }
        }
    }
}

#[test]
fn chi_squared_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("chi_squared_on_the_gpu") else { return };
    for (kind, v, t) in [(Logits::Spread, 512usize, 1.0f32), (Logits::Spread, 1000, 1.0), (Logits::Peaked, 1000, 0.5)] {
        let (b, rounds) = (5000usize, 8usize);
        let s = chi_setup(kind, v, b, t, DATA_SEED ^ v as u64);
        let mut tokens = Vec::new();
        for r in 0..rounds {
            let p = params_round(t, SEED, b, (r * b) as u64);
            tokens.extend(gpu.sample(Matrix::new(&s.hidden, b, s.d), Matrix::new(&s.weight, v, s.d), &p).unwrap());
        }
        let (stat, df, p) = chi_squared(&histogram(&tokens, v), &s.probs);
        visible(&format!(
            "GPU chi-squared {kind:?} V={v} T={t}: chi2={stat:.1} df={df} p={p:.4} ({} samples)",
            tokens.len()
        ));
        assert!(p > 1e-3, "{kind:?} V={v}: p = {p}");
    }
}

#[test]
fn device_api_keeps_tokens_on_the_device_and_reuses_buffers() {
    let Some(gpu) = gpu_or_skip("device_api_keeps_tokens_on_the_device_and_reuses_buffers") else { return };
    let (d, v) = (256, 5000);
    let mut rng = TestRng::new(DATA_SEED + 9);
    let weight = rng.normal_bf16(v * d, 0.1);
    let w_dev = gpu.stream().clone_htod(&weight).unwrap();
    let mut out = gpu.alloc_samples(4, v).unwrap();
    for (step, b) in [(0u32, 4usize), (1, 40), (2, 2)] {
        let hidden = rng.normal_bf16(b * d, 1.0);
        let h_dev = gpu.stream().clone_htod(&hidden).unwrap();
        let params = SamplingParams::new(0.9, 3)
            .with_streams((0..b as u32).map(|r| flashsampling::stream_id(r, step)).collect());
        let on_device = sample_on_device(&gpu, (&h_dev, b), (&w_dev, v), d, &params, &mut out);
        assert_eq!(out.batch(), b);
        let host_path = gpu.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &params).unwrap();
        assert_eq!(on_device, host_path, "step {step}");
    }
    // Misaligned device views are rejected before any launch.
    let h = gpu.stream().clone_htod(&vec![bf16::ONE; 2 * d + 1]).unwrap();
    let err = gpu
        .sample_device(
            &DeviceMatrix { data: h.slice(1..), rows: 2, cols: d },
            &DeviceMatrix { data: w_dev.as_view(), rows: v, cols: d },
            &SamplingParams::new(1.0, 0),
            &mut out,
        )
        .unwrap_err();
    assert!(matches!(err, Error::Misaligned { buffer: "hidden states", .. }), "{err:?}");
}

#[test]
fn tma_kernels_follow_their_buffers_through_the_device_api() {
    let Some(mut gpu) = gpu_or_skip("tma_kernels_follow_their_buffers_through_the_device_api") else { return };
    // The TMA kernels read the launch's buffers through tensor maps cached in `DeviceSamples`. One
    // `out` serves launches that alternate between two live hidden-state buffers, two batch sizes and
    // two weights: each must sample its own inputs, as the host path (fresh buffers) does.
    let tma: Vec<FusedVariant> = gpu.fused_variants().into_iter().filter(|e| e.uses_tma()).collect();
    if tma.is_empty() {
        visible("SKIP tma_kernels_follow_their_buffers_through_the_device_api: no TMA variant on this GPU (sm_90 PTX)");
        return;
    }
    let d = 200;
    let mut rng = TestRng::new(DATA_SEED + 21);
    let weights: Vec<(usize, Vec<bf16>)> =
        // V % 16 == 0 (the hidden-as-A kernels), V % 128 ≠ 0 (a partial last tile).
        [3008usize, 1008].iter().map(|&v| (v, rng.normal_bf16(v * d, 0.1))).collect();
    let w_dev: Vec<_> = weights.iter().map(|(_, w)| gpu.stream().clone_htod(w).unwrap()).collect();
    let hiddens: Vec<(usize, Vec<bf16>)> =
        [(70usize, 1.0), (70, 1.5), (5, 1.0)].iter().map(|&(b, std)| (b, rng.normal_bf16(b * d, std))).collect();
    let h_dev: Vec<_> = hiddens.iter().map(|(_, h)| gpu.stream().clone_htod(h).unwrap()).collect();
    for entry in tma {
        gpu.set_fused_variant(Some(entry)).unwrap();
        let mut out = gpu.alloc_samples(70, 3008).unwrap();
        for (step, (hi, wi)) in [(0, 0), (1, 0), (0, 0), (2, 0), (2, 1), (1, 1)].into_iter().enumerate() {
            let ((b, hidden), (v, weight)) = (&hiddens[hi], &weights[wi]);
            let params =
                SamplingParams::new(0.9, 11).with_streams((0..*b as u64).map(|r| 3 * r + step as u64).collect());
            let on_device = sample_on_device(&gpu, (&h_dev[hi], *b), (&w_dev[wi], *v), d, &params, &mut out);
            let host_path = gpu.sample(Matrix::new(hidden, *b, d), Matrix::new(weight, *v, d), &params).unwrap();
            assert_eq!(on_device, host_path, "{entry}, step {step}: hidden {hi}, weight {wi}");
        }
        visible(&format!("{entry}: 6 device-API launches over 3 hidden buffers and 2 weights match the host path"));
    }
    gpu.set_fused_variant(None).unwrap();
}

#[test]
fn nan_logits_are_reported_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("nan_logits_are_reported_on_the_gpu") else { return };
    let (b, d, v) = (4, 64, 3000);
    let mut rng = TestRng::new(DATA_SEED + 10);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let mut weight = rng.normal_bf16(v * d, 0.1);
    weight[2500 * d + 3] = bf16::NAN;
    for p in [SamplingParams::new(1.0, 1), SamplingParams::greedy()] {
        let err = gpu.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &p).unwrap_err();
        assert_eq!(err, Error::NanLogit { row: 0 });
    }
    // The device API marks the row with INVALID_INDEX instead of a token.
    let h_dev = gpu.stream().clone_htod(&hidden).unwrap();
    let w_dev = gpu.stream().clone_htod(&weight).unwrap();
    let mut out = gpu.alloc_samples(b, v).unwrap();
    let tokens = sample_on_device(&gpu, (&h_dev, b), (&w_dev, v), d, &SamplingParams::new(1.0, 1), &mut out);
    assert_eq!(tokens, vec![INVALID_INDEX; b]);
}

#[test]
fn invariance_holds_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("invariance_holds_on_the_gpu") else { return };
    // A row drawn alone (batch tile of 8) and at position 3 of a batch of 40 (batch tile of 64)
    // gets the same token, and the CPU with another vocab tile agrees.
    let (d, v) = (512, 20_000);
    let mut rng = TestRng::new(DATA_SEED + 11);
    let weight = rng.normal_bf16(v * d, 0.08);
    for trial in 0..20u64 {
        let row = rng.normal_bf16(d, 1.0);
        let stream = 500 + trial;
        let params = SamplingParams::new(1.0, 0xABC + trial);
        let alone = gpu
            .sample(Matrix::new(&row, 1, d), Matrix::new(&weight, v, d), &params.clone().with_streams(vec![stream]))
            .unwrap()[0];
        let mut batch = rng.normal_bf16(40 * d, 1.0);
        batch[3 * d..4 * d].copy_from_slice(&row);
        let mut streams: Vec<u64> = (0..40).map(|i| 10_000 + i).collect();
        streams[3] = stream;
        let in_batch = gpu
            .sample(Matrix::new(&batch, 40, d), Matrix::new(&weight, v, d), &params.clone().with_streams(streams))
            .unwrap()[3];
        let cpu = CpuBackend::new()
            .with_block_v(1000)
            .unwrap()
            .sample(Matrix::new(&row, 1, d), Matrix::new(&weight, v, d), &params.clone().with_streams(vec![stream]))
            .unwrap()[0];
        assert_eq!(alone, in_batch, "trial {trial}");
        assert_eq!(alone, cpu, "trial {trial}");
    }
}

#[test]
fn small_vocab_and_hidden_sizes_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("small_vocab_and_hidden_sizes_match_the_cpu") else { return };
    // V < 32 (no whole 32-row group: the zero tensor-map path of the TMA kernels), V = 1, D < 64
    // (one partial 64-column stage), for a batch size per default variant family.
    for &v in &[1usize, 2, 5, 31, 33] {
        for &d in &[8usize, 16, 40] {
            for &b in &[1usize, 3, 40, 100] {
                for t in [1.0f32, 0.0] {
                    compare_with_cpu(&gpu, b, d, v, t);
                }
                // V = 1: the only token.
                if v == 1 {
                    let hidden = vec![bf16::ONE; b * d];
                    let weight = vec![bf16::from_f32(-2.0); d];
                    let t = gpu.sample(
                        Matrix::new(&hidden, b, d),
                        Matrix::new(&weight, 1, d),
                        &SamplingParams::new(0.8, 1),
                    );
                    assert_eq!(t.unwrap(), vec![0; b], "B={b} D={d} V=1");
                }
            }
        }
    }
}

#[test]
fn large_batches_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("large_batches_match_the_cpu") else { return };
    // B ≥ 512: several batch tiles of the largest tile, and B not a multiple of any tile.
    for &(b, d, v) in &[(513usize, 64usize, 100usize), (1024, 64, 1000), (600, 40, 31)] {
        for t in [1.0f32, 0.0] {
            let m = compare_with_cpu(&gpu, b, d, v, t);
            visible(&format!(
                "large batch: B={b} D={d} V={v} T={t} {}: {m} mismatching rows",
                gpu.fused_variant_for(b, d, v, Epilogue::Sample)
            ));
        }
    }
}

/// [`crafted_lm_head`] with the logits `logits` (D = 64).
fn crafted(logits: &[f32], b: usize) -> (Vec<bf16>, Vec<bf16>, usize) {
    let (hidden, weight) = crafted_lm_head(logits.len(), b, 64, |i| logits[i]);
    (hidden, weight, 64)
}

#[test]
fn tiny_temperatures_and_infinite_logits_on_the_device() {
    let Some(gpu) = gpu_or_skip("tiny_temperatures_and_infinite_logits_on_the_device") else { return };
    let inf = f32::INFINITY;
    let cpu = CpuBackend::new();
    // (logits, temperature, expected token or None for "no token"): issue 11 items 4 and 5.
    let cases: &[(&[f32], f32, Option<u32>)] = &[
        (&[1.0, 5.0, 3.0], 1e-40, Some(1)),
        (&[50.0, 100.0], 1e-37, Some(1)),
        (&[0.0, 1.0], 1e-45, Some(1)),
        (&[3.0e38, 3.2e38, -3.3e38], 0.5, Some(1)),
        (&[2.0, 3.3e38, 3.0e38], 1e-30, Some(1)),
        (&[-inf, -inf, -inf], 1.0, None),
        (&[-inf, -inf], 0.0, None),
        (&[3.0e38, inf, -inf, 1.0], 0.7, Some(1)),
        (&[1.0, inf, 2.0, inf], 1.0, Some(1)),
        (&[-inf, -3.0e38, -inf], 0.3, Some(1)),
    ];
    for &(logits, t, want) in cases {
        // Pad the vocabulary past one tile with masked tokens so every kernel path sees the row;
        // B = 3 and 70 reach different variants.
        let mut padded = logits.to_vec();
        padded.resize(300, -inf);
        for vocab in [logits, &padded[..]] {
            for b in [3usize, 70] {
                let (hidden, weight, d) = crafted(vocab, b);
                let v = vocab.len();
                let params = SamplingParams::new(t, 9);
                let (h, w) = (Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d));
                let host = gpu.sample(h, w, &params);
                match want {
                    Some(tok) => assert_eq!(host.unwrap(), vec![tok; b], "{logits:?} T={t} V={v} B={b}"),
                    None => assert_eq!(host.unwrap_err(), Error::AllLogitsNegInfinite { row: 0 }),
                }
                assert_eq!(cpu.sample(h, w, &params), gpu.sample(h, w, &params), "CPU vs GPU: {logits:?} T={t}");
                // The device API writes INVALID_INDEX (and a −∞ score) for a row without a token.
                let (h_dev, w_dev) =
                    (gpu.stream().clone_htod(&hidden).unwrap(), gpu.stream().clone_htod(&weight).unwrap());
                let mut out = gpu.alloc_samples(b, v).unwrap();
                let tokens = sample_on_device(&gpu, (&h_dev, b), (&w_dev, v), d, &params, &mut out);
                assert_eq!(tokens, vec![want.unwrap_or(INVALID_INDEX); b], "device API: {logits:?} T={t}");
                if want.is_none() {
                    let scores = gpu.stream().clone_dtoh(&out.scores()).unwrap();
                    assert!(scores.iter().all(|&s| s == f32::NEG_INFINITY), "{scores:?}");
                }
            }
        }
    }
}

#[test]
fn outputs_read_before_any_launch_are_invalid_and_alloc_is_validated() {
    let Some(gpu) = gpu_or_skip("outputs_read_before_any_launch_are_invalid_and_alloc_is_validated") else { return };
    // Issue 11 item 7: tokens and scores were uninitialised.
    for (b, v) in [(1usize, 1usize), (5, 1000), (513, 151_936)] {
        let out = gpu.alloc_samples(b, v).unwrap();
        assert_eq!(out.batch(), b);
        assert_eq!(gpu.stream().clone_dtoh(&out.tokens()).unwrap(), vec![INVALID_INDEX; b]);
        assert!(gpu.stream().clone_dtoh(&out.scores()).unwrap().iter().all(|s| s.is_nan()));
        assert!(gpu.stream().clone_dtoh(&out.counters()).unwrap().iter().all(|&c| c == 0));
        let (rows, cands, counters) = out.capacity();
        assert!(rows >= b && cands >= b && counters >= 1);
    }
    // Issue 11 item 3: b and v are validated (a huge b was truncated to u32 and under-allocated).
    let max = flashsampling::kernels::config::MAX_DIM as usize;
    assert_eq!(gpu.alloc_samples(0, 10).unwrap_err(), Error::EmptyBatch);
    assert_eq!(gpu.alloc_samples(10, 0).unwrap_err(), Error::EmptyVocab);
    for huge in [max + 1, 1 << 40, usize::MAX] {
        assert!(matches!(gpu.alloc_samples(huge, 10).unwrap_err(), Error::TooLarge { what: "batch size B", .. }));
        assert!(matches!(gpu.alloc_samples(10, huge).unwrap_err(), Error::TooLarge { what: "vocab size V", .. }));
    }
    // A call rejected by validation leaves the outputs alone; a later good call fills them.
    let (b, d, v) = (4, 64, 1000);
    let mut rng = TestRng::new(DATA_SEED + 50);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 0.2);
    let (h_dev, w_dev) = (gpu.stream().clone_htod(&hidden).unwrap(), gpu.stream().clone_htod(&weight).unwrap());
    let mut out = gpu.alloc_samples(b, v).unwrap();
    let err = gpu
        .sample_device(
            &DeviceMatrix { data: h_dev.as_view(), rows: b, cols: d },
            &DeviceMatrix { data: w_dev.as_view(), rows: v, cols: d },
            &SamplingParams::new(f32::NAN, 0),
            &mut out,
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidTemperature(_)));
    assert_eq!(gpu.stream().clone_dtoh(&out.tokens()).unwrap(), vec![INVALID_INDEX; b]);
}

#[test]
fn a_writer_on_another_stream_waits_for_the_kernel() {
    let Some(gpu) = gpu_or_skip("a_writer_on_another_stream_waits_for_the_kernel") else { return };
    // Issue 11 item 6: the read events of hidden and weight were recorded before the launch, so a
    // write on another stream right after the call could race the kernel. With the guards kept
    // across the launch, the writer waits and the tokens are those of an undisturbed call.
    let ctx = gpu.context().clone();
    assert!(ctx.is_event_tracking(), "cudarc's event tracking is on by default");
    let other = ctx.new_stream().unwrap();
    let (b, d, v) = if quick() { (16usize, 1024usize, 32_000usize) } else { (64, 4096, 151_936) };
    let mut rng = TestRng::new(DATA_SEED + 60);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
    let zeros = vec![bf16::ZERO; b * d];
    let mut h_dev = gpu.stream().clone_htod(&hidden).unwrap();
    let mut w_dev = gpu.stream().clone_htod(&weight).unwrap();
    let params = SamplingParams::new(1.0, 77);
    let want = gpu.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &params).unwrap();
    let mut out = gpu.alloc_samples(b, v).unwrap();
    for trial in 0..6 {
        // Restore the inputs on the other stream (the launch waits for these writes).
        other.memcpy_htod(&hidden, &mut h_dev).unwrap();
        if trial == 3 {
            other.memcpy_htod(&weight, &mut w_dev).unwrap();
        }
        gpu.sample_device(
            &DeviceMatrix { data: h_dev.as_view(), rows: b, cols: d },
            &DeviceMatrix { data: w_dev.as_view(), rows: v, cols: d },
            &params,
            &mut out,
        )
        .unwrap();
        // Overwrite the hidden states right away, from the other stream (a copy engine write, so it
        // does not wait for free multiprocessors); on odd trials also zero the weight's first rows.
        other.memcpy_htod(&zeros, &mut h_dev).unwrap();
        if trial % 2 == 1 {
            other.memset_zeros(&mut w_dev.slice_mut(0..64 * d)).unwrap();
        }
        let got = gpu.stream().clone_dtoh(&out.tokens()).unwrap();
        assert_eq!(got, want, "trial {trial}: the kernel saw the overwritten inputs");
        if trial % 2 == 1 {
            other.memcpy_htod(&weight, &mut w_dev).unwrap();
        }
    }
    other.synchronize().unwrap();
}

#[test]
fn arrival_counters_are_zero_after_many_launches() {
    let Some(gpu) = gpu_or_skip("arrival_counters_are_zero_after_many_launches") else { return };
    // Issue 11 item 8: one DeviceSamples through launches of varying B and V (and buffer growth);
    // after each, the counters read back all zero and the tokens match the host path.
    let d = 64;
    let mut rng = TestRng::new(DATA_SEED + 70);
    let mut out = gpu.alloc_samples(1, 10).unwrap();
    let shapes: &[(usize, usize)] =
        &[(1, 10), (3, 1000), (70, 5000), (2, 31), (513, 1000), (16, 151_936), (1, 1), (129, 3001), (1024, 100)];
    for (step, &(b, v)) in shapes.iter().enumerate() {
        let hidden = rng.normal_bf16(b * d, 1.0);
        let weight = rng.normal_bf16(v * d, 0.25);
        let (h_dev, w_dev) = (gpu.stream().clone_htod(&hidden).unwrap(), gpu.stream().clone_htod(&weight).unwrap());
        let params = SamplingParams::new(if step % 3 == 2 { 0.0 } else { 0.9 }, step as u64);
        for _ in 0..3 {
            gpu.sample_device(
                &DeviceMatrix { data: h_dev.as_view(), rows: b, cols: d },
                &DeviceMatrix { data: w_dev.as_view(), rows: v, cols: d },
                &params,
                &mut out,
            )
            .unwrap();
            let counters = gpu.stream().clone_dtoh(&out.counters()).unwrap();
            assert!(counters.iter().all(|&c| c == 0), "B={b} V={v}: counters {counters:?}");
        }
        let on_device = gpu.stream().clone_dtoh(&out.tokens()).unwrap();
        let host = gpu.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &params).unwrap();
        assert_eq!(on_device, host, "B={b} V={v}");
    }
}

#[test]
fn stage_balanced_ranges_draw_what_whole_tiles_draw_bit_for_bit() {
    let Some(mut gpu) = gpu_or_skip("stage_balanced_ranges_draw_what_whole_tiles_draw_bit_for_bit") else { return };
    // Issue 15.1: vocab ranges balanced to the pipeline stage cut tiles between two blocks; the
    // upper block's head hands its accumulators to the lower block's tail, so every logit is the
    // same MMA sequence in D order and tokens and scores must be bit-identical to whole tiles, for
    // every weight-as-A variant (`wgmma` and the portable TMA family; both consumer layouts: taking
    // turns, and splitting the batch tile), plain
    // and with log-probabilities; a truncating call keeps whole tiles even when balancing is forced.
    // Log-probabilities may differ by rounding only (the ranges' log-masses group other tiles). D not a multiple of the 64-column stage; V whose tiles leave whole ranges uneven.
    use flashsampling::params::LogProbs;
    let variants: Vec<FusedVariant> = gpu
        .fused_variants()
        .into_iter()
        .filter(|v| matches!(v.family, Family::WgmmaWeightA | Family::TmaMmaSync))
        .collect();
    if variants.is_empty() {
        visible(
            "SKIP stage_balanced_ranges_draw_what_whole_tiles_draw_bit_for_bit: no weight-as-A variant on this GPU",
        );
        return;
    }
    let shapes: &[(usize, usize, usize)] =
        if quick() { &[(3, 1000, 40_000)] } else { &[(1, 1000, 40_000), (5, 520, 128_256), (37, 200, 33_800)] };
    let mut runs = 0;
    for &(b0, d, v) in shapes {
        let mut rng = TestRng::new(DATA_SEED ^ 0x15A ^ (b0 * 31 + d + v) as u64);
        let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
        let w_dev = gpu.stream().clone_htod(&weight).unwrap();
        for &variant in &variants {
            // A batch inside the variant's one batch tile (balancing needs one).
            // Splitting: rows for the last consumer too.
            let split = variant.consumers() > 0 && !variant.takes_turns();
            let b = b0.min(variant.block_b() as usize).max(if split { variant.block_b() as usize / 2 + 1 } else { 1 });
            let hidden = rng.normal_bf16(b * d, 1.0);
            let h_dev = gpu.stream().clone_htod(&hidden).unwrap();
            gpu.set_fused_variant(Some(variant)).unwrap();
            let base =
                SamplingParams::new(0.8, SEED ^ b as u64).with_streams((0..b as u64).map(|i| 3 * i + 2).collect());
            let calls = [
                ("plain", Epilogue::Sample, base.clone()),
                ("log-probs", Epilogue::LogProbs, base.clone().with_logprobs(LogProbs::Processed)),
                (
                    "top-k + top-p",
                    Epilogue::Truncate,
                    base.clone().with_top_k(vec![40; b]).with_top_p(vec![0.9; b]).with_logprobs(LogProbs::Processed),
                ),
            ];
            for (what, epilogue, params) in calls {
                let mut results = Vec::new();
                for on in [false, true] {
                    gpu.set_stage_balance(Some(on));
                    // The truncation kernels keep whole tiles even when balancing is forced.
                    let balanced = on && epilogue != Epilogue::Truncate;
                    assert_eq!(gpu.balances_stages_for(b, d, v, epilogue), balanced, "{variant} B={b} V={v} {what}");
                    let mut out = gpu.alloc_samples(b, v).unwrap();
                    for _ in 0..2 {
                        gpu.sample_device(
                            &DeviceMatrix { data: h_dev.as_view(), rows: b, cols: d },
                            &DeviceMatrix { data: w_dev.as_view(), rows: v, cols: d },
                            &params,
                            &mut out,
                        )
                        .unwrap();
                        if balanced {
                            let c = gpu.stream().clone_dtoh(&out.handoff_counters().unwrap()).unwrap();
                            assert!(c.iter().all(|&c| c == 0), "{variant} B={b} V={v} {what}: handoff counters {c:?}");
                        }
                    }
                    let tokens = gpu.stream().clone_dtoh(&out.tokens()).unwrap();
                    let scores: Vec<u32> =
                        gpu.stream().clone_dtoh(&out.scores()).unwrap().iter().map(|s| s.to_bits()).collect();
                    let lp = out.logprobs().map(|l| gpu.stream().clone_dtoh(&l).unwrap());
                    results.push((tokens, scores, lp));
                }
                let ((t0, s0, l0), (t1, s1, l1)) = (&results[0], &results[1]);
                assert!(t0.iter().all(|&t| (t as usize) < v), "{variant} {what}: a row without a token");
                assert_eq!(t1, t0, "{variant} B={b} D={d} V={v} {what}: tokens, balanced vs whole tiles");
                assert_eq!(s1, s0, "{variant} B={b} D={d} V={v} {what}: scores, balanced vs whole tiles");
                assert_eq!(l0.is_some(), epilogue != Epilogue::Sample);
                if let (Some(l0), Some(l1)) = (l0, l1) {
                    for (r, (a, c)) in l0.iter().zip(l1).enumerate() {
                        assert!((a - c).abs() <= 1e-5, "{variant} {what} row {r}: log-probability {a} vs {c}");
                    }
                }
                runs += 1;
            }
            visible(&format!("stage-balanced {variant:<28} B={b:>3} D={d:>4} V={v:>6}: bit-identical to whole tiles"));
        }
    }
    assert_eq!(runs, 3 * shapes.len() * variants.len());
    gpu.set_stage_balance(None);
    gpu.set_fused_variant(None).unwrap();
}

/// A producer kernel for the caller's-stream test: every thread first waits until `cycles` cycles
/// of its multiprocessor's clock (`%clock64`) have passed since it started, then copies word `i` of
/// `src` to `dst` (`n` words). Hand-written PTX, loaded through the driver's JIT.
const PRODUCER_PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64
.visible .entry slow_copy(.param .u64 src, .param .u64 dst, .param .u32 n, .param .u64 cycles)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    ld.param.u32 %r1, [n];
    ld.param.u64 %rd3, [cycles];
    mov.u64 %rd4, %clock64;
WAIT:
    mov.u64 %rd5, %clock64;
    sub.u64 %rd6, %rd5, %rd4;
    setp.lt.u64 %p1, %rd6, %rd3;
    @%p1 bra WAIT;
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %ctaid.x;
    mad.lo.u32 %r5, %r4, %r3, %r2;
    setp.ge.u32 %p2, %r5, %r1;
    @%p2 bra DONE;
    mul.wide.u32 %rd7, %r5, 4;
    add.u64 %rd8, %rd1, %rd7;
    add.u64 %rd9, %rd2, %rd7;
    ld.u32 %r6, [%rd8];
    st.u32 [%rd9], %r6;
DONE:
    ret;
}
"#;

#[test]
fn the_callers_stream_orders_a_call_after_its_producer_with_no_host_sync() {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    let name = "the_callers_stream_orders_a_call_after_its_producer_with_no_host_sync";
    let Some(gpu) = gpu_or_skip(name) else { return };
    // Issue 51.2: a handle on the caller's stream enqueues there, after the caller's producer
    // kernel (which writes the hidden states only after spinning for `SPIN_CYCLES`), without waiting
    // on the host: the call returns while the producer still runs, and its tokens are those of
    // the produced hidden states, not of the zeros the buffer held before. "While the producer
    // still runs" is read off an event recorded after the producer, not off the host's clock: the
    // other tests of this binary run in parallel threads, and their module loads held this thread
    // past 100 ms in a call that did not wait (call 2 of benchmarks/2026-12-06-mma-sync-ceiling).
    // The spin counts its multiprocessor's cycles (`%clock64`, which only moves forward), not
    // `%globaltimer`, which the driver may set: a round of a full run once found the producer done
    // 0.9 ms after its launch (call 6 of benchmarks/2026-12-06-smem-ring-probe). A second at 2 GHz;
    // far longer than the test needs at any clock.
    const SPIN_CYCLES: u64 = 2_000_000_000;
    let ctx = gpu.context().clone();
    let module = ctx.load_module(cudarc::nvrtc::Ptx::from_src(PRODUCER_PTX)).unwrap();
    let slow_copy = module.load_function("slow_copy").unwrap();
    let caller = ctx.new_stream().unwrap();
    let on_caller = gpu.on_stream(caller.clone()).unwrap();
    assert_eq!(on_caller.stream().cu_stream(), caller.cu_stream());
    let (b, d, v) = (8usize, 512usize, 32_000usize);
    let mut rng = TestRng::new(DATA_SEED + 61);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 4.0 / (d as f64).sqrt());
    let w_dev = caller.clone_htod(&weight).unwrap();
    let src = caller.clone_htod(&hidden).unwrap();
    let params = SamplingParams::new(1.0, 78).with_logprobs(flashsampling::params::LogProbs::Processed);
    let want = gpu.sample_scored(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &params).unwrap();
    let zeros = gpu.sample(Matrix::new(&vec![bf16::ZERO; b * d], b, d), Matrix::new(&weight, v, d), &params).unwrap();
    assert_ne!(want.tokens, zeros, "the test needs the zero rows to draw other tokens");
    // One set of buffers serves both handles. A first call on the caller's stream uploads what
    // later calls reuse (row parameters, tensor maps: uploads from pageable memory may wait for
    // the stream); every call reads the same hidden-state buffer.
    let mut out = gpu.alloc_samples(b, v).unwrap();
    let mut h_dev = caller.clone_htod(&hidden).unwrap();
    type Slice = cudarc::driver::CudaSlice<bf16>;
    fn operands<'a>(h: &'a Slice, w: &'a Slice, (b, d, v): (usize, usize, usize)) -> [DeviceMatrix<'a>; 2] {
        [DeviceMatrix { data: h.as_view(), rows: b, cols: d }, DeviceMatrix { data: w.as_view(), rows: v, cols: d }]
    }
    {
        let [h, w] = operands(&h_dev, &w_dev, (b, d, v));
        on_caller.sample_device(&h, &w, &params, &mut out).unwrap();
    }
    assert_eq!(caller.clone_dtoh(&out.tokens()).unwrap(), want.tokens);
    let words = (b * d / 2) as u32;
    let cfg = LaunchConfig { grid_dim: (words.div_ceil(256), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    // A round is judged by the producer's event just before and just after the call. Another test's
    // thread that synchronizes the device (a free, a module load) can hold this thread until the
    // producer is done (a full run once found it done 0.0 ms after a call that did not wait, round 0
    // of call 1 of benchmarks/2026-12-06-row-per-warp-gemm-fed): then the attempt proves nothing
    // and is made again, up to `ATTEMPTS` times. A call that waits for its producer fails every
    // attempt, so the test still fails for it.
    const ATTEMPTS: usize = 4;
    for round in 0..3 {
        let mut seen = Vec::new();
        let mut shown = false;
        for _attempt in 0..ATTEMPTS {
            caller.memset_zeros(&mut h_dev).unwrap();
            let mut launch = caller.launch_builder(&slow_copy);
            launch.arg(&src).arg(&mut h_dev).arg(&words).arg(&SPIN_CYCLES);
            // SAFETY: `src` and `h_dev` hold `words` u32 words each (b·d bf16); the kernel reads
            // `src` and writes `h_dev` only below `n`.
            unsafe { launch.launch(cfg) }.unwrap();
            let produced = caller.record_event(None).unwrap();
            let handle = if round == 1 { gpu.on_stream(caller.clone()).unwrap() } else { on_caller.clone() };
            let running_before = !produced.try_is_complete().unwrap();
            let t0 = std::time::Instant::now();
            {
                let [h, w] = operands(&h_dev, &w_dev, (b, d, v));
                handle.sample_device(&h, &w, &params, &mut out).unwrap();
            }
            let host_ms = t0.elapsed().as_secs_f64() * 1e3;
            let running_after = !produced.try_is_complete().unwrap();
            // In every attempt the tokens are those of the produced rows (stream order).
            let tokens = caller.clone_dtoh(&out.tokens()).unwrap();
            let logprobs = caller.clone_dtoh(&out.logprobs().unwrap()).unwrap();
            assert_eq!(tokens, want.tokens, "round {round}: the call did not wait for its producer");
            assert_eq!(logprobs, *want.logprobs.as_ref().unwrap(), "round {round}");
            if running_before && running_after {
                shown = true;
                break;
            }
            seen.push(format!("running before the call: {running_before}, after: {running_after} ({host_ms:.1} ms)"));
        }
        assert!(shown, "round {round}: no attempt saw the call return while its producer ran: {seen:?}");
        // Back on the backend's own stream with the same buffers, after the call above.
        {
            let [h, w] = operands(&h_dev, &w_dev, (b, d, v));
            gpu.sample_device(&h, &w, &params, &mut out).unwrap();
        }
        assert_eq!(gpu.stream().clone_dtoh(&out.tokens()).unwrap(), want.tokens, "round {round}: own stream");
    }
    caller.synchronize().unwrap();
}

#[test]
fn per_row_parameters_from_device_memory_draw_what_the_host_ones_draw() {
    // Issue 51.7: the row words built once (`row_params_words`), uploaded by the caller and passed
    // as device memory, give the host path's tokens and log-probabilities bit for bit, with per-row
    // temperatures (greedy rows too), seeds, positions and truncation; the buffers' cached upload
    // does not leak across the two paths.
    use flashsampling::gpu::row_params_words;
    use flashsampling::params::LogProbs;
    let Some(gpu) = gpu_or_skip("per_row_parameters_from_device_memory_draw_what_the_host_ones_draw") else {
        return;
    };
    let (b, d, v) = (12usize, 256usize, 5000usize);
    let mut rng = TestRng::new(DATA_SEED + 62);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 2.0 / (d as f64).sqrt());
    let (h, w) = (gpu.stream().clone_htod(&hidden).unwrap(), gpu.stream().clone_htod(&weight).unwrap());
    let hm = DeviceMatrix { data: h.as_view(), rows: b, cols: d };
    let wm = DeviceMatrix { data: w.as_view(), rows: v, cols: d };
    let base = SamplingParams::new(1.0, 3)
        .with_temperatures(mixed_temperatures(b))
        .with_seeds((0..b as u64).map(|r| 1000 + r).collect())
        .with_positions((0..b as u32).map(|r| 17 * r).collect())
        .with_logprobs(LogProbs::ProcessedAndRaw);
    let mut out = gpu.alloc_samples(b, v).unwrap();
    for (i, params) in
        [base.clone(), base.clone().with_top_k(vec![30; b]), base.with_samples_per_row(3)].iter().enumerate()
    {
        let host_call = |out: &mut flashsampling::DeviceSamples| {
            gpu.sample_device(&hm, &wm, params, out).unwrap();
            (
                gpu.stream().clone_dtoh(&out.tokens()).unwrap(),
                gpu.stream().clone_dtoh(&out.logprobs().unwrap()).unwrap(),
            )
        };
        let want = host_call(&mut out);
        let rows = gpu.stream().clone_htod(&row_params_words(params, b).unwrap()).unwrap();
        // Other keys in `params` are not read: the device words decide.
        let ignored = params.clone().with_seeds(vec![0; b]).with_temperatures(vec![0.0; b]);
        gpu.sample_device_rows(&hm, &wm, &ignored, &rows.as_view(), None, &mut out).unwrap();
        let got = (
            gpu.stream().clone_dtoh(&out.tokens()).unwrap(),
            gpu.stream().clone_dtoh(&out.logprobs().unwrap()).unwrap(),
        );
        assert_eq!(got.0, want.0, "case {i}: tokens");
        assert_eq!(bits(&got.1), bits(&want.1), "case {i}: log-probabilities");
        // The host path again after the device words: its own words are uploaded again.
        let greedy = params.clone().with_temperatures(vec![0.0; b]);
        gpu.sample_device(&hm, &wm, &greedy, &mut out).unwrap();
        assert_eq!(host_call(&mut out), want, "case {i}: the host path after the device words");
        let short = rows.slice(1..);
        let err = gpu.sample_device_rows(&hm, &wm, params, &short, None, &mut out).unwrap_err();
        assert!(matches!(err, Error::LengthMismatch { .. }), "{err:?}");
    }
}

#[test]
fn results_into_caller_owned_outputs_equal_the_own_outputs_bit_for_bit() {
    // Issue 51.2: `sample_device_into` writes the call's results into the caller's buffers (what the
    // Python path hands PyTorch's tensors to), bit for bit what the own outputs hold for the same
    // call, over plain sampling, n samples with both log-probabilities, a device mask, truncation with
    // top log-probabilities; outputs that do not match the call are typed errors before any launch.
    use flashsampling::DeviceOutputs;
    use flashsampling::params::LogProbs;
    let Some(gpu) = gpu_or_skip("results_into_caller_owned_outputs_equal_the_own_outputs_bit_for_bit") else {
        return;
    };
    let s = gpu.stream().clone();
    let (b, d, v) = (6usize, 256usize, 4100usize);
    let mut rng = TestRng::new(DATA_SEED + 63);
    let hidden = rng.normal_bf16(b * d, 1.0);
    let weight = rng.normal_bf16(v * d, 3.0 / (d as f64).sqrt());
    let (h, w) = (s.clone_htod(&hidden).unwrap(), s.clone_htod(&weight).unwrap());
    let hm = DeviceMatrix { data: h.as_view(), rows: b, cols: d };
    let wm = DeviceMatrix { data: w.as_view(), rows: v, cols: d };
    let mask = s.clone_htod(&random_mask(b, v, 0.4, DATA_SEED + 64).words).unwrap();
    let base = SamplingParams::new(0.9, 5).with_temperatures(mixed_temperatures(b));
    let cases: Vec<(&str, SamplingParams, bool)> = vec![
        ("plain", base.clone(), false),
        (
            "n = 3, both log-probabilities",
            base.clone().with_samples_per_row(3).with_logprobs(LogProbs::ProcessedAndRaw),
            false,
        ),
        ("device mask, processed log-probabilities", base.clone().with_logprobs(LogProbs::Processed), true),
        (
            "top-k / top-p, top-5 log-probabilities",
            base.clone().with_top_k(vec![40; b]).with_top_p(vec![0.8; b]).with_top_logprobs(5, false),
            false,
        ),
        (
            "truncation with log-probabilities",
            base.clone().with_min_p(vec![0.05; b]).with_logprobs(LogProbs::ProcessedAndRaw),
            true,
        ),
    ];
    let mut own = gpu.alloc_samples(b, v).unwrap();
    let mut scratch = gpu.alloc_samples(b, v).unwrap();
    let f = |v: cudarc::driver::CudaView<'_, f32>| bits(&s.clone_dtoh(&v).unwrap());
    for (name, params, masked) in &cases {
        let m = masked.then(|| mask.as_view());
        gpu.sample_device_masked(&hm, &wm, params, m.as_ref(), &mut own).unwrap();
        let rows = b * params.n as usize;
        let lp = params.logprobs != LogProbs::Off;
        let raw = params.logprobs == LogProbs::ProcessedAndRaw;
        let k = params.top_logprobs as usize;
        let mut tokens = s.alloc_zeros::<u32>(rows).unwrap();
        let mut scores = s.alloc_zeros::<f32>(rows).unwrap();
        let mut lps = s.alloc_zeros::<f32>(rows).unwrap();
        let mut raws = s.alloc_zeros::<f32>(rows).unwrap();
        let mut lses = s.alloc_zeros::<f32>(rows).unwrap();
        let mut top_t = s.alloc_zeros::<u32>((b * k).max(1)).unwrap();
        let mut top_l = s.alloc_zeros::<f32>((b * k).max(1)).unwrap();
        {
            let mut into = DeviceOutputs {
                tokens: tokens.as_view_mut(),
                scores: scores.as_view_mut(),
                logprobs: lp.then(|| lps.as_view_mut()),
                raw_logprobs: raw.then(|| raws.as_view_mut()),
                logsumexp: lp.then(|| lses.as_view_mut()),
                top_logprobs: (k > 0).then(|| (top_t.as_view_mut(), top_l.as_view_mut())),
            };
            gpu.sample_device_into(&hm, &wm, params, None, m.as_ref(), &mut scratch, &mut into).unwrap();
        }
        assert_eq!(s.clone_dtoh(&tokens).unwrap(), s.clone_dtoh(&own.tokens()).unwrap(), "{name}: tokens");
        assert_eq!(bits(&s.clone_dtoh(&scores).unwrap()), f(own.scores()), "{name}: scores");
        if lp {
            assert_eq!(bits(&s.clone_dtoh(&lps).unwrap()), f(own.logprobs().unwrap()), "{name}: log-probabilities");
            assert_eq!(bits(&s.clone_dtoh(&lses).unwrap()), f(own.logsumexp().unwrap()), "{name}: log-sum-exps");
        }
        if raw {
            assert_eq!(bits(&s.clone_dtoh(&raws).unwrap()), f(own.raw_logprobs().unwrap()), "{name}: raw");
        }
        if k > 0 {
            let (t, l) = own.top_logprobs().unwrap();
            assert_eq!(s.clone_dtoh(&top_t).unwrap(), s.clone_dtoh(&t).unwrap(), "{name}: top tokens");
            assert_eq!(bits(&s.clone_dtoh(&top_l).unwrap()), f(l), "{name}: top log-probabilities");
        }
        // The scratch buffers' own outputs hold no results after a call into the caller's.
        assert_eq!(scratch.tokens().len(), 0, "{name}");
        assert!(scratch.logprobs().is_none() && scratch.top_logprobs().is_none(), "{name}");
    }
    // Outputs that do not match the call: typed errors, nothing written.
    let params = base.clone().with_logprobs(LogProbs::Processed);
    let sentinel = vec![7u32; b];
    let mut tokens = s.clone_htod(&sentinel).unwrap();
    let mut scores = s.alloc_zeros::<f32>(b).unwrap();
    let mut lps = s.alloc_zeros::<f32>(b).unwrap();
    let mut call = |lp: bool, short: bool, p: &SamplingParams| {
        let n = if short { b - 1 } else { b };
        let mut into = DeviceOutputs {
            tokens: tokens.slice_mut(..n),
            scores: scores.as_view_mut(),
            logprobs: lp.then(|| lps.as_view_mut()),
            raw_logprobs: None,
            logsumexp: None,
            top_logprobs: None,
        };
        gpu.sample_device_into(&hm, &wm, p, None, None, &mut scratch, &mut into).unwrap_err()
    };
    assert!(matches!(call(false, false, &params), Error::OutputMismatch { output: "logprobs", asked: true }));
    assert!(matches!(call(true, false, &base), Error::OutputMismatch { output: "logprobs", asked: false }));
    assert!(matches!(call(true, true, &params), Error::LengthMismatch { .. }));
    let raw = params.clone().with_logprobs(LogProbs::ProcessedAndRaw);
    assert!(matches!(call(true, false, &raw), Error::OutputMismatch { output: "raw_logprobs", asked: true }));
    assert_eq!(s.clone_dtoh(&tokens).unwrap(), sentinel, "a refused call wrote the caller's tokens");
}
