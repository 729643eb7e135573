//! Fuzz loop over the CPU backend (issue 11), kept as a CI test: random shapes (edge values
//! included), buffer lengths (wrong ones must be typed errors), temperatures (0, tiny, subnormal,
//! huge, NaN, negative, infinite), NaN/±inf/huge data, fully masked rows, tile sizes, thread counts
//! and stream lists, with fixed seeds. Every call must return (no panic, no abort); every error must
//! be the one the inputs call for; every token must be what an f64 reference says:
//!
//! - greedy (`T = 0` or subnormal `T`): exactly the argmax of the f32 logits, lowest index on ties;
//! - sampling: `+∞` logits win (the lowest such index); otherwise the token's reference score
//!   `y·S + g` (f64, the kernel's f32 noise `g`, `S = fl(1/T)` for `T ≥ 1` and `1/T` below) is
//!   within f32 rounding of the best reference score (documented f32 near-ties);
//! - a row whose logits are all `−∞` is `AllLogitsNegInfinite`; a NaN logit is `NanLogit` when an
//!   input is NaN, else `UndefinedLogit`;
//! - the tile size and thread count never change a result.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use common::TestRng;
use flashsampling::cpu::{MAX_CPU_BLOCK_V, dot};
use flashsampling::kernels::config::{D_ALIGN, MAX_DIM};
use flashsampling::kernels::epilogue::MIN_SAMPLING_TEMPERATURE;
use flashsampling::params::MAX_SAMPLE;
use flashsampling::{CpuBackend, Error, Matrix, SamplingParams};
use half::bf16;

const SEED: u64 = 0xF022_5EED;
const CASES: usize = 30_000;
/// Safety cap on the loop's wall time (the cases normally take a few seconds).
const TIME_CAP: Duration = Duration::from_secs(25);

fn pick<T: Copy>(rng: &mut TestRng, xs: &[T]) -> T {
    xs[(rng.next_u64() % xs.len() as u64) as usize]
}

fn temperature(rng: &mut TestRng) -> f32 {
    let specials = [
        0.0,
        -0.0,
        1e-45,
        1e-40,
        MIN_SAMPLING_TEMPERATURE,
        1e-37,
        1e-20,
        1e-3,
        0.5,
        1.0,
        1.7,
        1e10,
        1e30,
        f32::MAX,
        f32::NAN,
        -1.0,
        -1e-30,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    if rng.next_u64() % 2 == 0 { (rng.next_u64() % 3000) as f32 / 1000.0 } else { pick(rng, &specials) }
}

/// Data of `n` values: normal with a random scale, with NaN / ±inf / huge values sprinkled in.
fn data(rng: &mut TestRng, n: usize, specials: u64) -> Vec<bf16> {
    let scale = pick(rng, &[1.0, 1e-3, 1e18, 1e36]);
    let mut x = rng.normal_bf16(n, scale);
    if specials > 0 {
        for v in x.iter_mut() {
            if rng.next_u64() % 1000 < specials {
                *v = pick(rng, &[bf16::NAN, bf16::INFINITY, bf16::NEG_INFINITY, bf16::MAX, bf16::MIN, bf16::ZERO]);
            }
        }
    }
    x
}

/// The error validation must return, in its order, or `None` when the inputs are valid.
fn validation_error(
    (b, hd, hl): (usize, usize, usize),
    (v, wd, wl): (usize, usize, usize),
    p: &SamplingParams,
) -> Option<Error> {
    let max = MAX_DIM as usize;
    Some(if b == 0 {
        Error::EmptyBatch
    } else if v == 0 {
        Error::EmptyVocab
    } else if hd != wd {
        Error::HiddenSizeMismatch { hidden: hd, weight: wd }
    } else if hd == 0 {
        Error::EmptyHidden
    } else if b > max || v > max || hd > max {
        return Some(Error::TooLarge { what: "", value: 0, max }); // compared by variant only
    } else if hd % D_ALIGN as usize != 0 {
        Error::HiddenNotAligned { d: hd, multiple: D_ALIGN as usize }
    } else if b * hd != hl {
        Error::LengthMismatch { buffer: "hidden states", expected: b * hd, actual: hl }
    } else if v * wd != wl {
        Error::LengthMismatch { buffer: "LM-head weight", expected: v * wd, actual: wl }
    } else if p.streams.as_ref().is_some_and(|s| s.len() != b) {
        Error::LengthMismatch { buffer: "streams", expected: b, actual: p.streams.as_ref().unwrap().len() }
    } else if p.sample >= MAX_SAMPLE {
        Error::InvalidSample(p.sample)
    } else if !p.temperature.is_finite() || p.temperature < 0.0 {
        Error::InvalidTemperature(p.temperature)
    } else {
        return None;
    })
}

/// The reference outcome of one row: `Ok(token)` or the row's error. `Err(None)` means "any token
/// within the tolerance of the best reference score" is checked by [`check_token`].
enum RowRef {
    Token(u32),
    Near { scores: Vec<f64>, slack: Vec<f64> },
    NoToken(Error),
}

fn row_reference(y: &[f32], row: usize, t: f32, p: &SamplingParams, nan_input: bool) -> RowRef {
    if y.iter().any(|x| x.is_nan()) {
        return RowRef::NoToken(if nan_input { Error::NanLogit { row } } else { Error::UndefinedLogit { row } });
    }
    if y.iter().all(|&x| x == f32::NEG_INFINITY) {
        return RowRef::NoToken(Error::AllLogitsNegInfinite { row });
    }
    if t < MIN_SAMPLING_TEMPERATURE || y.contains(&f32::INFINITY) {
        // Greedy, or +inf logits: the first maximum.
        let best = (0..y.len()).fold(0, |m, i| if y[i] > y[m] { i } else { m });
        return RowRef::Token(best as u32);
    }
    let s = if t >= 1.0 { (1.0 / t) as f64 } else { 1.0 / t as f64 };
    let noise = p.row_noise(row).unwrap();
    let mut scores = Vec::with_capacity(y.len());
    let mut slack = Vec::with_capacity(y.len());
    for (i, &yi) in y.iter().enumerate() {
        let g = noise.gumbel_at(i as u32) as f64;
        let r = yi as f64 * s + g;
        scores.push(r);
        // Two f32 roundings of the score (relative 2⁻²⁴ each), in reference units.
        slack.push(f64::powi(2.0, -21) * (r.abs() + (yi as f64 * s).abs() + g.abs() + 1.0));
    }
    RowRef::Near { scores, slack }
}

#[test]
fn fuzz_the_cpu_backend_against_an_f64_reference() {
    let start = Instant::now();
    let mut rng = TestRng::new(SEED);
    let (mut oks, mut errors, mut near_ties) = (0usize, 0usize, 0usize);
    let mut case = 0;
    while case < CASES && start.elapsed() < TIME_CAP {
        case += 1;
        let b = pick(&mut rng, &[0, 1, 1, 2, 2, 3, 3, 5, 8, 9, 17, 33, 1, 2, 3, 4, 6, 7, 10, 12]);
        let d = if rng.next_u64() % 25 == 0 {
            pick(&mut rng, &[0, 4, 12])
        } else {
            pick(&mut rng, &[8, 16, 24, 40, 64, 72])
        };
        let v = pick(&mut rng, &[0, 1, 1, 2, 2, 3, 4, 5, 7, 31, 32, 33, 127, 128, 129, 300, 1, 2, 3, 9]);
        let wd = if rng.next_u64() % 40 == 0 { d + 8 } else { d };
        let t = temperature(&mut rng);
        let specials = pick(&mut rng, &[0, 0, 0, 0, 0, 1, 5, 30, 150]);
        let mut hidden = data(&mut rng, b * d, specials);
        let mut weight = data(&mut rng, v * wd, specials);
        // Masked rows: hidden row `[1, 0, …]`, and weight column 0 mostly −∞.
        if rng.next_u64() % 6 == 0 && d > 0 && wd == d {
            for r in 0..b {
                if rng.next_u64() % 2 == 0 {
                    hidden[r * d..(r + 1) * d].fill(bf16::ZERO);
                    hidden[r * d] = bf16::ONE;
                }
            }
            for i in 0..v {
                weight[i * d] = if rng.next_u64() % 5 == 0 { bf16::from_f32(-3.0e38) } else { bf16::NEG_INFINITY };
            }
        }
        let (mut hl, mut wl) = (hidden.len(), weight.len());
        match rng.next_u64() % 50 {
            0 => hl = hl.saturating_sub(1),
            1 => wl = wl.saturating_sub(1),
            2 => hidden.push(bf16::ONE),
            3 => weight.push(bf16::ONE),
            _ => {}
        }
        hl = hl.min(hidden.len());
        wl = wl.min(weight.len());
        let streams = match rng.next_u64() % 16 {
            0 => None,
            1 => Some((0..b as u64 + 1).collect::<Vec<_>>()),
            2 if b > 0 => Some((0..b as u64 - 1).map(|i| i * 3).collect()),
            3..=8 => Some((0..b).map(|_| rng.next_u64()).collect()),
            _ => None,
        };
        // Sample indices: mostly valid (< 2^31, the noise's refinement bit), one case in eight any u32.
        let sample = (rng.next_u64() as u32) >> if rng.next_u64() % 8 == 0 { 0 } else { 1 };
        let mut params = SamplingParams::new(t, rng.next_u64()).with_sample(sample);
        params.streams = streams;
        let block_v = pick(&mut rng, &[4, 8, 12, 64, 128, 1000, MAX_CPU_BLOCK_V, 0, 3, MAX_CPU_BLOCK_V + 4]);
        let threads = pick(&mut rng, &[1, 2, 3, 7, 64]);
        let what = format!(
            "case {case}: B={b} D={d} (weight D={wd}) V={v} T={t:e} hidden len {hl} weight len {wl} streams {:?} block_v {block_v} threads {threads}",
            params.streams.as_ref().map(Vec::len)
        );
        // The public helpers never panic either.
        let probe = catch_unwind(AssertUnwindSafe(|| {
            let _ = (params.stream(b + 3), params.row_noise(usize::MAX), params.streams_for(b + 1), params.transform());
        }));
        assert!(probe.is_ok(), "{what}: a SamplingParams helper panicked");
        let backend = match CpuBackend::new().with_block_v(block_v) {
            Ok(c) => c.with_threads(threads),
            Err(e) => {
                assert!(block_v == 0 || block_v % 4 != 0 || block_v > MAX_CPU_BLOCK_V, "{what}");
                assert_eq!(e, Error::InvalidTileSize { block_v, max: MAX_CPU_BLOCK_V });
                CpuBackend::new().with_threads(threads)
            }
        };
        let h = Matrix::new(&hidden[..hl], b, d);
        let w = Matrix::new(&weight[..wl], v, wd);
        let got = catch_unwind(AssertUnwindSafe(|| backend.sample_scored(h, w, &params)))
            .unwrap_or_else(|_| panic!("{what}: panicked"));
        if let Some(want) = validation_error((b, d, hl), (v, wd, wl), &params) {
            let err = got.expect_err(&what);
            match want {
                Error::TooLarge { .. } => assert!(matches!(err, Error::TooLarge { .. }), "{what}: {err:?}"),
                Error::InvalidTemperature(x) => {
                    assert!(
                        matches!(err, Error::InvalidTemperature(e) if e.to_bits() == x.to_bits()),
                        "{what}: {err:?}"
                    )
                }
                want => assert_eq!(err, want, "{what}"),
            }
            errors += 1;
            continue;
        }
        // Tile size and thread count never change a result.
        let single = CpuBackend::new().with_threads(1).sample_scored(h, w, &params);
        assert_eq!(format!("{got:?}"), format!("{single:?}"), "{what}: tiles/threads changed the result");
        // The reference, row by row, from the CPU's own f32 logits.
        let hf: Vec<f32> = hidden[..hl].iter().map(|x| x.to_f32()).collect();
        let wf: Vec<f32> = weight[..wl].iter().map(|x| x.to_f32()).collect();
        let weight_nan = weight[..wl].iter().any(|x| x.is_nan());
        let mut first_error = None;
        let mut refs = Vec::new();
        for row in 0..b {
            let hr = &hf[row * d..(row + 1) * d];
            let y: Vec<f32> = (0..v).map(|i| dot(hr, &wf[i * d..(i + 1) * d])).collect();
            let nan_input = weight_nan || hidden[row * d..(row + 1) * d].iter().any(|x| x.is_nan());
            let r = row_reference(&y, row, t, &params, nan_input);
            if let (RowRef::NoToken(e), None) = (&r, &first_error) {
                first_error = Some(e.clone());
            }
            refs.push(r);
        }
        match (got, first_error) {
            (Err(e), Some(want)) => {
                assert_eq!(e, want, "{what}");
                errors += 1;
            }
            (Ok(s), None) => {
                for (row, r) in refs.iter().enumerate() {
                    let tok = s.tokens[row];
                    assert!((tok as usize) < v, "{what}: row {row}: token {tok} out of range");
                    match r {
                        RowRef::Token(want) => assert_eq!(tok, *want, "{what}: row {row} (greedy or +inf)"),
                        RowRef::Near { scores, slack } => {
                            let best = (0..v).fold(0, |m, i| if scores[i] > scores[m] { i } else { m });
                            let t_ = tok as usize;
                            if t_ != best {
                                let gap = scores[best] - scores[t_];
                                assert!(
                                    gap <= slack[best] + slack[t_],
                                    "{what}: row {row}: token {tok} (ref score {}), reference argmax {best} ({}): gap {gap:e}",
                                    scores[t_],
                                    scores[best]
                                );
                                near_ties += 1;
                            }
                        }
                        RowRef::NoToken(_) => unreachable!(),
                    }
                }
                oks += 1;
            }
            (got, want) => panic!("{what}: got {got:?}, the reference expects {want:?}"),
        }
    }
    eprintln!(
        "fuzz: {case} cases in {:.1} s: {oks} sampled, {errors} typed errors, {near_ties} f32 near-ties",
        start.elapsed().as_secs_f64()
    );
    assert!(case >= 500, "only {case} cases ran before the time cap");
    assert!(oks > case / 10 && errors > case / 10, "{oks} ok, {errors} errors: the generator lost its balance");
}
