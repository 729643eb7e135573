//! `cargo bench`: FlashSampling against unfused baselines on the GPU, in one run.
//!
//! By default for D = 4096, V = 151936 (Qwen3-8B) and D = 8192, V = 128256 (Llama-3-70B) and
//! B ∈ {1, 2, 4, …, 256, 512, 1024, 2048} (speculative decoding verifies B × (k + 1) rows a step),
//! with random bf16 data (never zeros) and weights far larger than L2, it times on one stream with
//! CUDA events (warm-up, then the median of ≥ 50 runs; min and max kept):
//! 1. ours: the fused kernel + candidate reduction, T = 1 (and T = 0, the no-noise variant);
//! 2. cuBLAS bf16 GEMM alone, f32 logits;
//! 3. cuBLAS GEMM + this crate's softmax + inverse-CDF multinomial kernels;
//! 4. cuBLAS GEMM + this crate's Gumbel-max kernel over the logits (+ candidate reduction);
//! 5. a 2 GiB device-to-device copy and a 2 GiB read-only stream (HBM bandwidth: the faster of the two →
//!    HBM floor = weight bytes / bandwidth; on the H200 the read-only stream, ~5% above the copy rate)
//!    and an 8192³ bf16 cuBLAS GEMM (tensor-core rate → compute floor);
//! 6. the read-only stream of each config's own weight bytes, timed in the same loop as ours
//!    (alternate runs): the `/read` column is the median of the per-run ratios ours ÷ read, a floor
//!    that drifts with ours (a neighbour's load, temperature) where `/floor` uses the bandwidth
//!    measured once at the start.
//!
//! Every timed run of 1–4 and 6 follows an untimed read of 4 × L2 of other bytes, as a decode
//! step's layers would between two LM-head calls: no run finds in L2 the weight lines or logits a
//! run before it left there, nor pays for writing those logits back.
//!
//! Prints a table last, writes `target/flashsampling-bench/{results.csv, results.json, plot-*.svg}`
//! (one plot per config).
//!
//! Flags:
//! - `--quick`: B ∈ {1, 64, 256} (with `--variants`: B ≤ 64);
//! - `--batches 1,2,…`: the B list (overrides the default and `--quick`);
//! - `--shape D,V` (repeatable): LM-head shapes instead of the two defaults, each a config named
//!   `d{D}-v{V}` (e.g. `d4096-v151936`); D a multiple of 8. The baselines' softmax and Gumbel
//!   kernels need `V % 4 == 0`: for other V they run on V rounded up to a multiple of 4 (up to three
//!   extra random weight rows, printed as a note), ours on V;
//! - `--runs N` (default and minimum 50), `--out DIR`;
//! - `--replot CSV`: rebuild table and plots from a results.csv (no GPU needed);
//! - `--variants`: instead of the baselines, time every fused-kernel variant at every (config, B),
//!   print a table, write `variants.csv` (how the per-batch choice in `config::variant_for_batch` is
//!   made; variants that do not support a V are marked n/a); `--only a,b` keeps the variants whose
//!   entry point contains `a` or `b`. Takes `--shape`, `--batches` and `--quick` like the main run.
//! - `--controls`: instead of the baselines, time the fused call with per-request controls against
//!   the plain call at every (config, B) (default B ∈ {1, 8, 16, 32, 64, 128, 256}): per-row
//!   temperatures, log-probabilities, both, both with each row's 20 most likely tokens' processed
//!   log-probabilities (`top20`), an allowed-token mask in device memory (half the tokens),
//!   soft-capping, `n = 8` samples per row, sparse adjustments (32 penalized tokens per row), all of
//!   them together, and the plain call on f16 operands; prints a table of medians and ratios to the
//!   plain call and writes `controls.csv`. Takes `--shape`, `--batches`, and `--modes a,b` (only
//!   those modes besides the plain call: `temps`, `logprobs`, `exact` (log-probabilities on the
//!   exact log-sum-exp path, `SamplingParams::exact_logsumexp`), `temps+logprobs`, `top20`,
//!   `exact+top20` (`top20` on the exact path: every row through `fallback_sample_exact`), `mask`,
//!   `softcap`, `n=8`, `adjust`, `all`, `f16`).
//! - `--truncation`: instead of the baselines, time top-k (50) + top-p (0.9) per row in the fused
//!   call (the certificate path, its fallback when needed) against the plain fused call and against
//!   cuBLAS GEMM + the unfused top-k / top-p sampler over the logits (the fallback's exact per-row
//!   threshold search, every row), at every (config, B) (default B ∈ {1, 8, 16, 32, 64, 128, 256,
//!   512}); prints a table with each row's fallback share and writes `truncation.csv`. Takes
//!   `--shape`, `--batches`, and `--heavy-rows`: instead of the random head, one whose row `r` has
//!   exact heavy-tailed logits (hidden row `r` = `e_{r mod D}`; token `i`'s logit `−a·ln(rank)` with
//!   a random rank per row and `a` = 1.0, 1.25, 1.5, 2.0 by row: nuclei of hundreds to tens of
//!   thousands of tokens at top-p 0.9, where the certificate's 256-entry walk gives way to the
//!   fallback) — the fallback's share and cost on rows flatter than the random head's.
//! - `--score`: instead of the baselines, time scoring one given token per row (issue 52: prompt
//!   log-probabilities, a reference policy's log-probabilities) at prefill sizes (default B ∈ {1024,
//!   4096, 16384, 32768} rows): ours (`GpuBackend::score_device`: the fused pass, both
//!   log-probabilities and log-sum-exps, T = 1) against cuBLAS GEMM to f32 logits + this crate's
//!   `logsoftmax_gather` (one online log-sum-exp pass per row, the token gathered) and against the
//!   GEMM alone; the logits the unfused path materializes (B·V·4 bytes) against ours (none); the
//!   largest |difference| of the two log-probabilities. Writes `score.csv`. Takes `--shape`,
//!   `--batches`, and `--score-top K`: also ours with the rows' top K log-probabilities and the given
//!   tokens' ranks (the truncating pass; a rank the truncation step's prefix does not decide is
//!   counted by the fallback over the row's materialized logits), for the random tokens (ranked deep:
//!   nearly every row counted there, the worst case) and for each row's argmax (rank 1, decided by
//!   the step: the best case; on a random head even a row's T = 1 sample ranks anywhere).
//! - `--verify`: instead of the baselines, time speculative verification (issue 52) of R requests
//!   with K drafts each (default R ∈ {1, 8, 16, 32, 64} × K ∈ {1, 4, 8}): ours (one fused call over
//!   the R·(K + 1) rows with per-row positions: the target's keyed samples, which `speculative::verify`
//!   compares with the drafts) against cuBLAS GEMM over the same rows + softmax + the classic
//!   rejection sampler (`rejection_rows`: accept with min(1, p/q), residual draw, bonus token; the
//!   draft probabilities are given, from a perturbed copy of the hidden states, and their tokens drawn
//!   from them, outside the timing). Neither side's timing includes comparing tokens on the host.
//!   Writes `verify.csv`. Takes `--shape`, `--batches` (R) and `--ks 1,4,8`.
//!
//! Device memory at the largest B: the weights (V·D bf16), the hidden states (B·D bf16) and the
//! baselines' f32 logits and probabilities (2·B·V·4 bytes: 2.5 GB at B = 2048, V = 151936; 4.3 GB at
//! V = 262144), fine on an 80–141 GB GPU. The host generates the random weights first (V·D bf16, 8.6
//! GB at D = 16384, V = 262144).
//! Without a GPU it prints SKIP (fails with `FLASHSAMPLING_REQUIRE_GPU=1`).

mod cli;
mod report;

use std::path::PathBuf;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use flashsampling::baselines::{Baselines, gemm_bf16_f32};
use flashsampling::kernels::config::{Epilogue, Family};
use flashsampling::synthetic::SplitMix64;
use flashsampling::timing::{EventTimer, Stats};
use flashsampling::{DeviceMatrix, GpuBackend, SamplingParams, ScoreOutputs, ScoreTop};
use report::Row;

const DATA_SEED: u64 = 0xBE7C_0001;
const CONFIGS: [(&str, usize, usize); 2] = [("qwen3-8b", 4096, 151_936), ("llama3-70b", 8192, 128_256)];
const BATCHES: [usize; 12] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048];
const QUICK_BATCHES: [usize; 3] = [1, 64, 256];
/// `--variants --quick`: the default B up to this.
const QUICK_VARIANTS_BMAX: usize = 64;

struct Args {
    /// `--quick`, `--runs` (at least 50), `--out`, `--shape` (empty = [`CONFIGS`]), `--batches`.
    common: cli::Common,
    replot: Option<PathBuf>,
    variants: bool,
    controls: bool,
    truncation: bool,
    /// `--score`: scoring given tokens at prefill sizes; `--score-top K`: also with top lists and ranks.
    score: bool,
    score_top: u32,
    /// `--verify`: speculative verification against the rejection sampler; `--ks`: its K list.
    verify: bool,
    ks: Vec<usize>,
    /// `--heavy-rows` (with `--truncation`): the heavy-tailed head instead of the random one.
    heavy_rows: bool,
    /// `--only a,b`: the sweep times only the variants whose entry contains one of these.
    only: Vec<String>,
    /// `--modes a,b` (with `--controls`): time only these modes (and the plain call, the base).
    modes: Vec<String>,
}

impl std::ops::Deref for Args {
    type Target = cli::Common;
    fn deref(&self) -> &cli::Common {
        &self.common
    }
}

impl Args {
    /// The (config, D, V) list of the run.
    fn configs(&self) -> Vec<(String, usize, usize)> {
        self.common.configs(&CONFIGS)
    }

    /// The B list of the main run.
    fn batches(&self) -> Vec<usize> {
        self.common.batch_list(&QUICK_BATCHES, &BATCHES)
    }

    /// The B list of the `--variants` sweep.
    fn variant_batches(&self) -> Vec<usize> {
        match (&self.batches, self.quick) {
            (Some(b), _) => b.clone(),
            (None, true) => BATCHES.iter().copied().filter(|&b| b <= QUICK_VARIANTS_BMAX).collect(),
            (None, false) => BATCHES.to_vec(),
        }
    }
}

fn args() -> Args {
    let mut a = Args {
        common: cli::Common::new(50),
        replot: None,
        variants: false,
        controls: false,
        truncation: false,
        score: false,
        score_top: 0,
        verify: false,
        ks: vec![1, 4, 8],
        heavy_rows: false,
        only: Vec::new(),
        modes: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        if a.common.take(&x, &mut it) {
            continue;
        }
        match x.as_str() {
            "--variants" => a.variants = true,
            "--controls" => a.controls = true,
            "--truncation" => a.truncation = true,
            "--score" => a.score = true,
            "--score-top" => a.score_top = it.next().expect("--score-top K").parse().expect("--score-top: an integer"),
            "--verify" => a.verify = true,
            "--ks" => {
                a.ks = it.next().expect("--ks 1,4,8").split(',').map(|k| k.parse().expect("--ks: integers")).collect()
            }
            "--heavy-rows" => a.heavy_rows = true,
            "--only" => a.only = it.next().expect("--only a,b").split(',').map(str::to_string).collect(),
            "--modes" => a.modes = it.next().expect("--modes a,b").split(',').map(str::to_string).collect(),
            "--replot" => a.replot = Some(PathBuf::from(it.next().expect("--replot CSV"))),
            _ => {} // `--bench` and filters from cargo
        }
    }
    a
}

type R<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> R<()> {
    let a = args();
    if let Some(csv) = &a.replot {
        let text = std::fs::read_to_string(csv)?;
        let mut rows = Vec::new();
        for (i, line) in text.lines().enumerate().skip(1).filter(|(_, l)| !l.trim().is_empty()) {
            match Row::from_csv(line) {
                Some(r) => rows.push(r),
                None => eprintln!("--replot: line {} of {} is not a results row; skipped", i + 1, csv.display()),
            }
        }
        for p in report::write_files(&a.out, &rows, "{\"replot\": true}")? {
            println!("wrote {}", p.display());
        }
        print!("{}", report::table(&rows));
        return Ok(());
    }
    let mut gpu = match GpuBackend::with_options(0, flashsampling::gpu::GpuOptions::from_env()?) {
        Ok(g) => g,
        Err(e) if std::env::var("FLASHSAMPLING_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            return Err(format!("FLASHSAMPLING_REQUIRE_GPU=1 but no GPU: {e}").into());
        }
        Err(e) => {
            println!("SKIP lm_head bench: no GPU ({e})");
            return Ok(());
        }
    };
    let stream = gpu.stream().clone();
    let timer = EventTimer::new(gpu.context())?;
    let runs = a.runs;

    // HBM bandwidth: 2 GiB device-to-device copy, bytes read + written.
    let copy_bytes = 2usize << 30;
    let src: CudaSlice<u8> = stream.alloc_zeros(copy_bytes)?;
    let mut dst: CudaSlice<u8> = stream.alloc_zeros(copy_bytes)?;
    let copy = timer.time(&stream, 3, 20, || Ok(stream.memcpy_dtod(&src, &mut dst)?))?;
    let copy_rate = 2.0 * copy_bytes as f64 / (copy.median * 1e-3); // bytes/s
    drop((src, dst));
    // Read-only streaming (issue 15): 2 GiB read once and folded. The weights are only read, so when
    // it beats the copy rate (the H200 reads ~5% faster than it copies) it is the floor to quote.
    let base = Baselines::new(&gpu)?;
    let read_src: CudaSlice<u8> = stream.alloc_zeros(copy_bytes)?;
    let blocks = 8 * gpu.sm_count();
    let mut read_out: CudaSlice<u32> = stream.alloc_zeros(blocks as usize)?;
    let read = timer.time(&stream, 3, 20, || base.stream_read(&read_src.as_view(), &mut read_out, blocks))?;
    let read_rate = copy_bytes as f64 / (read.median * 1e-3); // bytes/s
    drop(read_src);
    // The main table's L2 flush before each timed run: a buffer of 4 × L2 (at least 64 MiB).
    let l2 = gpu.context().attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?;
    let flush: CudaSlice<u8> = stream.alloc_zeros((4 * l2.max(0) as usize).max(64 << 20))?;
    let mut flush_out: CudaSlice<u32> = stream.alloc_zeros(blocks as usize)?;
    // The HBM floor's bandwidth: the faster of the two ways to stream the weights.
    let bandwidth = copy_rate.max(read_rate);
    eprintln!(
        "HBM: copy {:.3} TB/s (2 GiB, median {:.3} ms); read-only stream {:.3} TB/s (2 GiB, median {:.3} ms, {:.3} × the copy rate); floor bandwidth {:.3} TB/s",
        copy_rate / 1e12,
        copy.median,
        read_rate / 1e12,
        read.median,
        read_rate / copy_rate,
        bandwidth / 1e12
    );
    if a.variants {
        return variant_sweep(&mut gpu, &timer, &a, bandwidth);
    }
    if a.controls {
        return controls(&gpu, &timer, &a, bandwidth);
    }
    if a.truncation {
        return truncation(&gpu, &timer, &a, bandwidth);
    }
    if a.score {
        return score(&gpu, &timer, &a);
    }
    if a.verify {
        return verify(&gpu, &timer, &a);
    }
    // Tensor-core rate: 8192³ bf16 GEMM on random data, f32 output.
    let n = 8192;
    let mut rng = SplitMix64::new(DATA_SEED);
    let ga = stream.clone_htod(&rng.normal_bf16(n * n, 1.0))?;
    let gb = stream.clone_htod(&rng.normal_bf16(n * n, 1.0))?;
    let mut gc: CudaSlice<f32> = stream.alloc_zeros(n * n)?;
    let big = {
        let (pa, _a) = ga.device_ptr(&stream);
        let (pb, _b) = gb.device_ptr(&stream);
        let (pc, _c) = gc.device_ptr_mut(&stream);
        timer.time(&stream, 3, 20, || gemm_bf16_f32(base.blas(), (n, n, n), pa, pb, pc))?
    };
    let tc_rate = 2.0 * (n as f64).powi(3) / (big.median * 1e-3); // FLOP/s
    drop((ga, gb, gc));
    eprintln!("fused kernel occupancy (variant: blocks/SM): {}", occupancy(&gpu));
    eprintln!(
        "device {}: copy {:.3} TB/s (2 GiB, median {:.3} ms); read-only stream {:.3} TB/s (2 GiB, median {:.3} ms, {:.3} × the copy rate); bf16 GEMM 8192^3 {:.0} TFLOP/s (median {:.3} ms)",
        gpu.device_name(),
        copy_rate / 1e12,
        copy.median,
        read_rate / 1e12,
        read.median,
        read_rate / copy_rate,
        tc_rate / 1e12,
        big.median
    );

    let batches = a.batches();
    let bmax = *batches.iter().max().unwrap();
    let mut rows = Vec::new();
    for (config, d, v) in a.configs() {
        // The baselines' kernels need V % 4 == 0: they get `vb` rows (up to 3 extra random ones).
        let vb = v.next_multiple_of(4);
        if vb != v {
            eprintln!("{config}: V % 4 != 0, the baselines run on V = {vb} (ours on V = {v})");
        }
        let (h_dev, w_dev) = device_head(&stream, bmax, d, vb)?;
        let weight_bytes = (v * d * 2) as f64;
        for &b in &batches {
            let hm = DeviceMatrix { data: h_dev.slice(..b * d), rows: b, cols: d };
            let wm = DeviceMatrix { data: w_dev.slice(..v * d), rows: v, cols: d };
            let wb = w_dev.as_view();
            let sample = SamplingParams::new(1.0, 7);
            let greedy = SamplingParams::greedy();
            let mut out = gpu.alloc_samples(b, v)?;
            // Every timed run below follows an untimed read of 4 × L2 of other bytes (`flush_l2`), as a
            // decode step's layers would between two LM-head calls: no run finds the weight's lines or
            // the logits a run before it left in L2, nor pays for writing the latter back.
            let mut flush_l2 = || base.stream_read(&flush.as_view(), &mut flush_out, blocks);
            // Ours interleaved with a read-only stream of the same weight bytes (alternate runs): the
            // `/read` column, a floor taken beside each measurement, which a drift of the memory
            // system over the run (a neighbour's load, temperature) moves with ours.
            let (ours, weight_read, ours_over_read) = timer.time_paired(
                &stream,
                (10, runs),
                &mut flush_l2,
                || gpu.sample_device(&hm, &wm, &sample, &mut out),
                || base.stream_read(&wm.data, &mut read_out, blocks),
            )?;
            let ours_tokens = stream.clone_dtoh(&out.tokens())?;
            let mut out_g = gpu.alloc_samples(b, v)?;
            let ours_greedy = timer.time_prepped(&stream, (10, runs), &mut flush_l2, || {
                gpu.sample_device(&hm, &wm, &greedy, &mut out_g)
            })?;
            // Logits and probabilities, [B, vb] f32 each.
            let mut buf = base.alloc(b, vb, &sample)?;
            let gemm =
                timer.time_prepped(&stream, (10, runs), &mut flush_l2, || base.gemm(&hm.data, &wb, d, &mut buf))?;
            let mult = timer.time_prepped(&stream, (10, runs), &mut flush_l2, || {
                base.gemm(&hm.data, &wb, d, &mut buf)?;
                base.softmax_multinomial(&mut buf, &sample)
            })?;
            let gum = timer.time_prepped(&stream, (10, runs), &mut flush_l2, || {
                base.gemm(&hm.data, &wb, d, &mut buf)?;
                base.gumbel_over_logits(&mut buf, &sample)
            })?;
            let gum_tokens = stream.clone_dtoh(&buf.tokens)?;
            let agree = ours_tokens.iter().zip(&gum_tokens).filter(|(x, y)| x == y).count();
            let t3 = |s: Stats| (s.median, s.min, s.max);
            let row = Row {
                config: config.clone(),
                d,
                v,
                b,
                ours: t3(ours),
                ours_greedy: ours_greedy.median,
                gemm: t3(gemm),
                gemm_multinomial: t3(mult),
                gemm_gumbel: t3(gum),
                hbm_floor: weight_bytes / bandwidth * 1e3,
                read: Some((weight_read.median, ours_over_read.median)),
                compute_floor: 2.0 * (b * d * v) as f64 / tc_rate * 1e3,
                agree,
            };
            eprintln!("{}", report::table(std::slice::from_ref(&row)).lines().nth(1).unwrap_or(""));
            rows.push(row);
        }
    }
    let meta = format!(
        "{{\"device\": \"{}\", \"copy_tb_s\": {:.4}, \"read_tb_s\": {:.4}, \"floor_tb_s\": {:.4}, \"bf16_gemm_tflops\": {:.1}, \"runs\": {runs}, \"warmup\": 10, \"data_seed\": {DATA_SEED}, \"batches\": {batches:?}}}",
        gpu.device_name(),
        copy_rate / 1e12,
        read_rate / 1e12,
        bandwidth / 1e12,
        tc_rate / 1e12
    );
    for p in report::write_files(&a.out, &rows, &meta)? {
        println!("wrote {}", p.display());
    }
    println!(
        "\nHBM floor bandwidth {:.3} TB/s (the faster of copy and read-only streaming), bf16 GEMM {:.0} TFLOP/s; floor = max(HBM, compute); medians of {runs} runs (ms)",
        bandwidth / 1e12,
        tc_rate / 1e12
    );
    print!("{}", report::table(&rows));
    Ok(())
}

/// The fused kernels this GPU runs with their resident blocks per multiprocessor.
fn occupancy(gpu: &GpuBackend) -> String {
    gpu.fused_occupancy().iter().map(|(v, n)| format!("{v}: {n}")).collect::<Vec<_>>().join(", ")
}

/// `--variants`: every fused-kernel variant at every (config, B), T = 1, same method as the main
/// table; prints ms and ms / HBM floor per variant and marks the one the library picks.
fn variant_sweep(gpu: &mut GpuBackend, timer: &EventTimer, a: &Args, bandwidth: f64) -> R<()> {
    let stream = gpu.stream().clone();
    let mut entries = gpu.fused_variants();
    if !a.only.is_empty() {
        entries.retain(|e| a.only.iter().any(|o| e.entry.contains(o.as_str())));
    }
    eprintln!("fused kernel occupancy (variant: blocks/SM): {}", occupancy(gpu));
    let mut csv = String::from("config,d,v,b,variant,default,median_ms,min_ms,max_ms,hbm_floor_ms\n");
    let names: Vec<&str> = entries.iter().map(|e| e.entry).collect();
    let mut table = format!("| config | B | {} |\n|---|---|{}\n", names.join(" | "), "---|".repeat(entries.len()));
    let batches = a.variant_batches();
    let bmax = *batches.iter().max().unwrap();
    for (config, d, v) in a.configs() {
        let (h_dev, w_dev) = device_head(&stream, bmax, d, v)?;
        let floor = (v * d * 2) as f64 / bandwidth * 1e3;
        for &b in &batches {
            let hm = DeviceMatrix { data: h_dev.slice(..b * d), rows: b, cols: d };
            let wm = DeviceMatrix { data: w_dev.as_view(), rows: v, cols: d };
            let sample = SamplingParams::new(1.0, 7);
            gpu.set_fused_variant(None)?;
            let default = gpu.fused_variant_for(b, d, v, Epilogue::Sample);
            let mut cells = Vec::new();
            let mut tokens: Option<Vec<u32>> = None;
            // The first tokens of each mma.sync family (its variants must agree bit for bit).
            let mut family_tokens: Vec<(Family, Vec<u32>)> = Vec::new();
            for &entry in &entries {
                if !entry.supports_vocab(v as u32) {
                    cells.push("n/a".to_string());
                    continue;
                }
                gpu.set_fused_variant(Some(entry))?;
                let mut out = gpu.alloc_samples(b, v)?;
                let t = timer.time(&stream, 10, a.runs, || gpu.sample_device(&hm, &wm, &sample, &mut out))?;
                let got = stream.clone_dtoh(&out.tokens())?;
                // Rows whose token differs from the first variant's (the variants of one mma.sync family
                // must agree bit for bit; other families sum a k16 step in another order, so near-ties
                // may flip).
                let differ = tokens
                    .as_ref()
                    .map_or(0, |first: &Vec<u32>| first.iter().zip(&got).filter(|(x, y)| x != y).count());
                if matches!(entry.family, Family::MmaSync | Family::TmaMmaSync) {
                    match family_tokens.iter().find(|(f, _)| *f == entry.family) {
                        Some((_, first)) if *first != got => {
                            return Err(format!(
                                "{config} B={b}: {entry} draws other tokens than the first variant of its family"
                            )
                            .into());
                        }
                        Some(_) => {}
                        None => family_tokens.push((entry.family, got.clone())),
                    }
                }
                tokens.get_or_insert(got);
                let mark = if entry == default { "*" } else { "" };
                let note = if differ > 0 { format!(" [{differ} rows differ]") } else { String::new() };
                cells.push(format!("{:.4}{mark} ({:.2}){note}", t.median, t.median / floor));
                csv += &format!(
                    "{config},{d},{v},{b},{entry},{},{:.5},{:.5},{:.5},{floor:.5}\n",
                    entry == default,
                    t.median,
                    t.min,
                    t.max
                );
            }
            eprintln!("{config} B={b}: {}", cells.join("  "));
            table += &format!("| {config} | {b} | {} |\n", cells.join(" | "));
        }
    }
    gpu.set_fused_variant(None)?;
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("variants.csv"), csv)?;
    println!("wrote {}", a.out.join("variants.csv").display());
    println!(
        "\nfused-kernel variants, T = 1: median ms of {} runs (ms / HBM floor at {:.3} TB/s); * = the library's choice; the mma.sync variants drew identical tokens",
        a.runs,
        bandwidth / 1e12
    );
    print!("{table}");
    Ok(())
}

/// `--controls`: the fused call with per-request controls against the plain call (T = 1), same
/// method as the main run; the mask lives in device memory (the decode-loop shape).
fn controls(gpu: &GpuBackend, timer: &EventTimer, a: &Args, bandwidth: f64) -> R<()> {
    use flashsampling::params::LogProbs;
    let stream = gpu.stream().clone();
    let batches = a.batches.clone().unwrap_or_else(|| vec![1, 8, 16, 32, 64, 128, 256]);
    let bmax = *batches.iter().max().unwrap();
    let runs = a.runs;
    const MODES: [&str; 13] = [
        "plain",
        "temps",
        "logprobs",
        "exact",
        "temps+logprobs",
        "top20",
        "exact+top20",
        "mask",
        "softcap",
        "n=8",
        "adjust",
        "all",
        "f16",
    ];
    if let Some(m) = a.modes.iter().find(|m| !MODES.contains(&m.as_str())) {
        return Err(format!("--modes: no mode {m:?} (modes: {})", MODES.join(", ")).into());
    }
    // The plain call is always timed first: the base of every ratio.
    let modes: Vec<&str> = MODES
        .iter()
        .copied()
        .filter(|m| *m == "plain" || a.modes.is_empty() || a.modes.iter().any(|x| x == m))
        .collect();
    let mut table = format!(
        "| config | B | floor ms | {} |\n|---|---|---|{}\n",
        modes.iter().map(|m| format!("{m} ms (×plain)")).collect::<Vec<_>>().join(" | "),
        "---|".repeat(modes.len())
    );
    let mut csv = String::from("config,d,v,b,mode,median_ms,min_ms,max_ms,ratio_to_plain\n");
    for (config, d, v) in a.configs() {
        // The run's head, and the same values in f16 (exact there) for the plain call on f16 operands.
        let (hidden, weight) = synthetic_head(bmax, d, v);
        let to_f16 =
            |x: &[half::bf16]| -> Vec<half::f16> { x.iter().map(|y| half::f16::from_f32(y.to_f32())).collect() };
        let (h_dev, w_dev) = (stream.clone_htod(&hidden)?, stream.clone_htod(&weight)?);
        let (h16, w16) = (stream.clone_htod(&to_f16(&hidden))?, stream.clone_htod(&to_f16(&weight))?);
        drop((hidden, weight));
        let mut rng = SplitMix64::new(DATA_SEED ^ 0x3A5C);
        let words = v.div_ceil(32);
        let mask_host: Vec<u32> = (0..bmax * words).map(|_| rng.next_u64() as u32).collect();
        let mask_dev = stream.clone_htod(&mask_host)?;
        let floor = (v * d * 2) as f64 / bandwidth * 1e3;
        for &b in &batches {
            let hm = DeviceMatrix { data: h_dev.slice(..b * d), rows: b, cols: d };
            let wm = DeviceMatrix { data: w_dev.slice(..v * d), rows: v, cols: d };
            let mask = mask_dev.slice(..b * words);
            let temps: Vec<f32> = (0..b).map(|r| [0.7, 1.0, 0.0, 1.3][r % 4]).collect();
            let plain = SamplingParams::new(1.0, 7);
            let tp = plain.clone().with_temperatures(temps.clone());
            let lp = plain.clone().with_logprobs(LogProbs::Processed);
            let exact = lp.clone().with_exact_logsumexp(true);
            let tl = tp.clone().with_logprobs(LogProbs::Processed);
            let top20 = tl.clone().with_top_logprobs(20, false);
            let exact_top20 = top20.clone().with_exact_logsumexp(true);
            let cap = plain.clone().with_softcap(30.0);
            let n8 = plain.clone().with_samples_per_row(8);
            // 32 adjusted tokens per row (a penalized history: repetition 1.2, frequency 0.3).
            let mut adj = flashsampling::controls::SparseAdjustments::none(0);
            for r in 0..b {
                let mut t: Vec<u32> = (0..32u64).map(|k| ((r as u64 * 7919 + k * 4099) % v as u64) as u32).collect();
                t.sort_unstable();
                t.dedup();
                for tok in t {
                    adj.tokens.push(tok);
                    adj.adjustments.push(flashsampling::kernels::logits::Adjustment {
                        bias: 0.0,
                        repetition: 1.2,
                        subtract: 0.3,
                    });
                }
                adj.offsets.push(adj.tokens.len());
            }
            let adjusted = plain.clone().with_adjustments(adj.clone());
            let all = tl.clone().with_softcap(30.0).with_samples_per_row(8).with_adjustments(adj);
            let cases: [(&str, &SamplingParams, bool); 12] = [
                ("plain", &plain, false),
                ("temps", &tp, false),
                ("logprobs", &lp, false),
                ("exact", &exact, false),
                ("temps+logprobs", &tl, false),
                ("top20", &top20, false),
                ("exact+top20", &exact_top20, false),
                ("mask", &plain, true),
                ("softcap", &cap, false),
                ("n=8", &n8, false),
                ("adjust", &adjusted, false),
                ("all", &all, true),
            ];
            let mut out = gpu.alloc_samples(b, v)?;
            let mut medians = Vec::new();
            let mut record = |mode: &str, s: Stats| {
                let ratio = s.median / medians.first().copied().unwrap_or(s.median);
                csv += &format!("{config},{d},{v},{b},{mode},{:.5},{:.5},{:.5},{ratio:.4}\n", s.median, s.min, s.max);
                medians.push(s.median);
            };
            let hm16 = DeviceMatrix { data: h16.slice(..b * d), rows: b, cols: d };
            let wm16 = DeviceMatrix { data: w16.slice(..v * d), rows: v, cols: d };
            for &mode in &modes {
                let stats = if mode == "f16" {
                    timer.time(&stream, 10, runs, || gpu.sample_device(&hm16, &wm16, &plain, &mut out))?
                } else {
                    let &(_, params, masked) = cases.iter().find(|c| c.0 == mode).expect("every mode has a case");
                    let m = masked.then_some(&mask);
                    timer.time(&stream, 10, runs, || gpu.sample_device_masked(&hm, &wm, params, m, &mut out))?
                };
                record(mode, stats);
            }
            let cells: Vec<String> = medians.iter().map(|m| format!("{m:.4} ({:.3})", m / medians[0])).collect();
            let line = format!("| {config} | {b} | {floor:.4} | {} |", cells.join(" | "));
            eprintln!("{line}");
            table += &line;
            table.push('\n');
        }
    }
    finish_mode(
        a,
        "controls.csv",
        &csv,
        &format!("fused call with per-request controls, medians of {runs} runs (ms) and ratio to the plain call"),
        &table,
    )
}

/// `--truncation`: top-k 50 + top-p 0.9 per row in the fused call (certificate, and the fallback for
/// the rows it leaves) against the plain fused call and against cuBLAS GEMM + the unfused top-k /
/// top-p sampler over the logits (every row through the exact threshold search), same method as the
/// main run. Also reports the share of rows that took the fallback, and whether the fused and the
/// unfused tokens agree (they sample the same distribution with the same noise; they differ where
/// the logits' summation orders round differently).
fn truncation(gpu: &GpuBackend, timer: &EventTimer, a: &Args, bandwidth: f64) -> R<()> {
    let stream = gpu.stream().clone();
    let base = Baselines::new(gpu)?;
    let batches = a.batches.clone().unwrap_or_else(|| vec![1, 8, 16, 32, 64, 128, 256, 512]);
    let bmax = *batches.iter().max().unwrap();
    let runs = a.runs;
    let mut table = String::from(
        "| config | B | floor ms | plain ms | top-k/top-p ms (×plain) | back to back: plain, top-k/top-p ms (×) | GEMM + unfused top-k/top-p ms (×ours) | fallback rows | tokens equal |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut csv = String::from(
        "config,d,v,b,plain_ms,truncated_ms,plain_b2b_ms,truncated_b2b_ms,unfused_ms,gemm_ms,fallback_share,equal_share\n",
    );
    for (config, d, v) in a.configs() {
        let (h_dev, w_dev) =
            if a.heavy_rows { heavy_head(&stream, bmax, d, v)? } else { device_head(&stream, bmax, d, v)? };
        let floor = (v * d * 2) as f64 / bandwidth * 1e3;
        for &b in &batches {
            let hm = DeviceMatrix { data: h_dev.slice(..b * d), rows: b, cols: d };
            let wm = DeviceMatrix { data: w_dev.slice(..v * d), rows: v, cols: d };
            let plain = SamplingParams::new(1.0, 7);
            // The heavy-tailed rows: top-p alone (top-k 50 would bound every nucleus to 50 tokens).
            let top_k = if a.heavy_rows { 0 } else { 50 };
            let cut = plain.clone().with_top_k(vec![top_k; b]).with_top_p(vec![0.9; b]);
            let mut out = gpu.alloc_samples(b, v)?;
            let p = timer.time(&stream, 10, runs, || gpu.sample_device(&hm, &wm, &plain, &mut out))?;
            let p10 = timer.time(&stream, 2, runs, || {
                for _ in 0..10 {
                    gpu.sample_device(&hm, &wm, &plain, &mut out)?;
                }
                Ok(())
            })?;
            let t = timer.time(&stream, 10, runs, || gpu.sample_device(&hm, &wm, &cut, &mut out))?;
            // Ten calls between two events (a decode loop's back-to-back calls: the host enqueues
            // the next call's launches while the GPU runs), per call.
            let t10 = timer.time(&stream, 2, runs, || {
                for _ in 0..10 {
                    gpu.sample_device(&hm, &wm, &cut, &mut out)?;
                }
                Ok(())
            })?;

            let fused_tokens = stream.clone_dtoh(&out.tokens())?;
            let flags = stream.clone_dtoh(&out.truncation_fallback().expect("a truncating call"))?;
            let fallback = flags.iter().filter(|&&f| f != 0).count() as f64 / b as f64;
            if v % 4 != 0 {
                eprintln!("{config}: V % 4 != 0: no unfused baseline (its GEMM buffers need V % 4 == 0)");
                continue;
            }
            let mut buf = base.alloc(b, v, &plain)?;
            let mut out_u = gpu.alloc_samples(b, v)?;
            let gemm = timer.time(&stream, 10, runs, || base.gemm(&hm.data, &wm.data, d, &mut buf))?;
            let u = timer.time(&stream, 10, runs, || {
                base.gemm(&hm.data, &wm.data, d, &mut buf)?;
                gpu.sample_truncated_logits(&mut buf.logits, (b, v), &cut, &mut out_u)
            })?;
            let unfused_tokens = stream.clone_dtoh(&out_u.tokens())?;
            let equal = fused_tokens.iter().zip(&unfused_tokens).filter(|(a, b)| a == b).count() as f64 / b as f64;
            csv += &format!(
                "{config},{d},{v},{b},{:.5},{:.5},{:.5},{:.5},{:.5},{:.5},{fallback:.4},{equal:.4}\n",
                p.median,
                t.median,
                p10.median / 10.0,
                t10.median / 10.0,
                u.median,
                gemm.median
            );
            let line = format!(
                "| {config} | {b} | {floor:.4} | {:.4} | {:.4} ({:.3}) | {:.4}, {:.4} ({:.3}) | {:.4} ({:.2}) | {:.1} % | {:.1} % |",
                p.median,
                t.median,
                t.median / p.median,
                p10.median / 10.0,
                t10.median / 10.0,
                t10.median / p10.median,
                u.median,
                u.median / t.median,
                100.0 * fallback,
                100.0 * equal
            );
            eprintln!("{line}");
            table += &line;
            table.push('\n');
        }
    }
    finish_mode(
        a,
        "truncation.csv",
        &csv,
        &format!(
            "{} per row, medians of {runs} runs (ms)",
            if a.heavy_rows { "top-p 0.9 on heavy-tailed rows (--heavy-rows)" } else { "top-k 50 + top-p 0.9" }
        ),
        &table,
    )
}

/// `--score`: scoring given tokens at prefill sizes, ours against GEMM + log-softmax + gather.
fn score(gpu: &GpuBackend, timer: &EventTimer, a: &Args) -> R<()> {
    let stream = gpu.stream().clone();
    let base = Baselines::new(gpu)?;
    let batches = a.batches.clone().unwrap_or_else(|| vec![1024, 4096, 16384, 32768]);
    let bmax = *batches.iter().max().unwrap();
    let runs = a.runs;
    let k = a.score_top;
    let mut table = String::from(
        "| config | rows | ours ms | GEMM + log-softmax + gather ms (×ours) | GEMM alone ms (ours ×) | logits GB (unfused) | max abs Δ log-prob |",
    );
    if k > 0 {
        table += &format!(" ours + top {k} and ranks, argmax tokens ms (× ours) | random tokens ms (× ours) |");
    }
    table += if k > 0 { "\n|---|---|---|---|---|---|---|---|---|\n" } else { "\n|---|---|---|---|---|---|---|\n" };
    let mut csv = String::from(
        "config,d,v,b,ours_ms,unfused_ms,gemm_ms,logits_bytes,max_abs_diff,top_k,top_argmax_ms,top_random_ms\n",
    );
    for (config, d, v) in a.configs() {
        if v % 4 != 0 {
            eprintln!("{config}: V % 4 != 0: no unfused baseline (its kernel reads 16-byte rows)");
            continue;
        }
        let (h_dev, w_dev) = device_head(&stream, bmax, d, v)?;
        let mut rng = SplitMix64::new(DATA_SEED ^ 0x5C0E);
        let tokens: Vec<u32> = (0..bmax).map(|_| (rng.next_u64() % v as u64) as u32).collect();
        let t_dev = stream.clone_htod(&tokens)?;
        for &b in &batches {
            let hm = DeviceMatrix { data: h_dev.slice(..b * d), rows: b, cols: d };
            let wm = DeviceMatrix { data: w_dev.slice(..v * d), rows: v, cols: d };
            let params = SamplingParams::new(1.0, 7);
            let tv = t_dev.slice(..b);
            let mut out = gpu.alloc_samples(b, v)?;
            let mut buf: CudaSlice<f32> = stream.alloc_zeros(4 * b)?;
            let ours = {
                let mut scores = ScoreOutputs::rows_of(buf.as_view_mut(), b)?;
                timer
                    .time(&stream, 3, runs, || gpu.score_device(&hm, &wm, &params, &tv, None, &mut out, &mut scores))?
            };
            let ours_lp = stream.clone_dtoh(&buf.slice(b..2 * b))?;
            // With top lists and ranks: each row's argmax (rank 1), then the random tokens.
            let mut tops = [f64::NAN; 2];
            if k > 0 {
                let topped = params.clone().with_top_logprobs(k, false);
                gpu.sample_device(&hm, &wm, &SamplingParams::new(0.0, 7), &mut out)?;
                let argmax = stream.clone_dtoh(&out.tokens())?;
                let argmax = stream.clone_htod(&argmax)?;
                let (mut tt, mut tl, mut ranks) = (
                    stream.alloc_zeros::<u32>(b * k as usize)?,
                    stream.alloc_zeros::<f32>(b * k as usize)?,
                    stream.alloc_zeros::<u32>(b)?,
                );
                for (slot, given) in tops.iter_mut().zip([argmax.as_view(), t_dev.slice(..b)]) {
                    let top =
                        ScoreTop { tokens: tt.as_view_mut(), logprobs: tl.as_view_mut(), ranks: ranks.as_view_mut() };
                    let mut scores = ScoreOutputs::rows_of(buf.as_view_mut(), b)?.with_top(top);
                    *slot = timer
                        .time(&stream, 1, runs, || {
                            gpu.score_device(&hm, &wm, &topped, &given, None, &mut out, &mut scores)
                        })?
                        .median;
                }
            }
            drop((out, buf));
            let mut buf = base.alloc_logits(b, v)?;
            let mut lp: CudaSlice<f32> = stream.alloc_zeros(b)?;
            let bt = stream.clone_htod(&tokens[..b])?;
            let gemm = timer.time(&stream, 3, runs, || base.gemm(&hm.data, &wm.data, d, &mut buf))?;
            let unfused = timer.time(&stream, 3, runs, || {
                base.gemm(&hm.data, &wm.data, d, &mut buf)?;
                base.logsoftmax_gather(&buf.logits, (b, v), &bt, &mut lp, &params)
            })?;
            let base_lp = stream.clone_dtoh(&lp)?;
            drop(buf);
            let diff = ours_lp.iter().zip(&base_lp).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            let logits_bytes = (b * v * 4) as f64;
            csv += &format!(
                "{config},{d},{v},{b},{:.5},{:.5},{:.5},{logits_bytes:.0},{diff:e},{k},{:.5},{:.5}\n",
                ours.median, unfused.median, gemm.median, tops[0], tops[1]
            );
            let mut line = format!(
                "| {config} | {b} | {:.3} | {:.3} ({:.2}) | {:.3} ({:.2}) | {:.2} | {diff:.1e} |",
                ours.median,
                unfused.median,
                unfused.median / ours.median,
                gemm.median,
                ours.median / gemm.median,
                logits_bytes / 1e9
            );
            if k > 0 {
                let r = |t: f64| format!(" {t:.3} ({:.2}) |", t / ours.median);
                line += &(r(tops[0]) + &r(tops[1]));
            }
            eprintln!("{line}");
            table += &line;
            table.push('\n');
        }
    }
    finish_mode(
        a,
        "score.csv",
        &csv,
        &format!(
            "scoring one given token per row (raw and processed log-probabilities, T = 1), medians of {runs} runs (ms)"
        ),
        &table,
    )
}

/// `--verify`: speculative verification, ours against GEMM + softmax + the rejection sampler.
fn verify(gpu: &GpuBackend, timer: &EventTimer, a: &Args) -> R<()> {
    let stream = gpu.stream().clone();
    let base = Baselines::new(gpu)?;
    let requests = a.batches.clone().unwrap_or_else(|| vec![1, 8, 16, 32, 64]);
    let kmax = *a.ks.iter().max().unwrap();
    let rmax = *requests.iter().max().unwrap();
    let runs = a.runs;
    let mut table = String::from(
        "| config | R | K | rows | ours ms | GEMM + softmax + rejection ms (× ours) | GEMM alone ms | accepted / K (baseline) |\n|---|---|---|---|---|---|---|---|\n",
    );
    let mut csv = String::from("config,d,v,requests,k,rows,ours_ms,unfused_ms,gemm_ms,accepted_share\n");
    for (config, d, v) in a.configs() {
        if v % 4 != 0 {
            eprintln!("{config}: V % 4 != 0: no rejection-sampler baseline (its kernels read 16-byte rows)");
            continue;
        }
        let bmax = rmax * (kmax + 1);
        let (hidden, weight) = synthetic_head(bmax, d, v);
        // The draft model's hidden states: the target's, perturbed (its distributions are close to
        // the target's but not equal, as a draft model's are).
        let mut rng = SplitMix64::new(DATA_SEED ^ 0xD2AF7);
        let draft_hidden: Vec<half::bf16> =
            hidden.iter().map(|x| half::bf16::from_f64(x.to_f64() + 0.5 * rng.normal())).collect();
        let (h_dev, w_dev) = (stream.clone_htod(&hidden)?, stream.clone_htod(&weight)?);
        let hd_dev = stream.clone_htod(&draft_hidden)?;
        drop((hidden, weight, draft_hidden));
        for &r in &requests {
            for &k in &a.ks {
                let rows = r * (k + 1);
                let wm = DeviceMatrix { data: w_dev.slice(..v * d), rows: v, cols: d };
                let hm = DeviceMatrix { data: h_dev.slice(..rows * d), rows, cols: d };
                // Ours: the target's samples at every row, keyed by (seed, request stream, position).
                let positions: Vec<u32> = (0..r).flat_map(|_| 100..100 + (k as u32 + 1)).collect();
                let streams: Vec<u64> = (0..r as u64).flat_map(|q| std::iter::repeat_n(q, k + 1)).collect();
                let params = SamplingParams::new(1.0, 7).with_streams(streams).with_positions(positions);
                let mut out = gpu.alloc_samples(rows, v)?;
                let ours = timer.time(&stream, 10, runs, || gpu.sample_device(&hm, &wm, &params, &mut out))?;
                drop(out);
                // The drafts: the draft model's probabilities at each request's K positions and its
                // tokens drawn from them (setup, not timed).
                let plain = SamplingParams::new(1.0, 9);
                let mut qbuf = base.alloc(r * k.max(1), v, &plain)?;
                let draft_rows: Vec<usize> = (0..r).flat_map(|q| (0..k).map(move |i| q * (k + 1) + i)).collect();
                let qh = {
                    let host = stream.clone_dtoh(&hd_dev.slice(..rows * d))?;
                    let picked: Vec<half::bf16> =
                        draft_rows.iter().flat_map(|&row| host[row * d..(row + 1) * d].to_vec()).collect();
                    stream.clone_htod(&picked)?
                };
                let (draft_tokens, draft_probs) = if k > 0 {
                    base.gemm(&qh.slice(..r * k * d), &wm.data, d, &mut qbuf)?;
                    base.softmax_multinomial(&mut qbuf, &plain)?;
                    (qbuf.tokens.clone(), qbuf.probs.clone())
                } else {
                    (stream.alloc_zeros(1)?, stream.alloc_zeros(4)?)
                };
                drop(qbuf);
                // The baseline: GEMM over the rows, softmax, the rejection sampler.
                let mut buf = base.alloc(rows, v, &plain)?;
                let mut tokens: CudaSlice<u32> = stream.alloc_zeros(rows)?;
                let mut accepted: CudaSlice<u32> = stream.alloc_zeros(r)?;
                let gemm = timer.time(&stream, 10, runs, || base.gemm(&hm.data, &wm.data, d, &mut buf))?;
                let unfused = timer.time(&stream, 10, runs, || {
                    base.gemm(&hm.data, &wm.data, d, &mut buf)?;
                    base.softmax(&mut buf, &plain)?;
                    base.rejection(&buf.probs, &draft_probs, &draft_tokens, (r, k, v), &mut tokens, &mut accepted, 11)
                })?;
                let acc = stream.clone_dtoh(&accepted)?;
                let share = if k == 0 { 1.0 } else { acc.iter().map(|&x| x as f64).sum::<f64>() / (r * k) as f64 };
                csv += &format!(
                    "{config},{d},{v},{r},{k},{rows},{:.5},{:.5},{:.5},{share:.4}\n",
                    ours.median, unfused.median, gemm.median
                );
                let line = format!(
                    "| {config} | {r} | {k} | {rows} | {:.4} | {:.4} ({:.2}) | {:.4} | {:.2} |",
                    ours.median,
                    unfused.median,
                    unfused.median / ours.median,
                    gemm.median,
                    share
                );
                eprintln!("{line}");
                table += &line;
                table.push('\n');
            }
        }
    }
    finish_mode(
        a,
        "verify.csv",
        &csv,
        &format!("speculative verification of R requests with K drafts each (T = 1), medians of {runs} runs (ms)"),
        &table,
    )
}

/// The run's synthetic LM head on the host: `bmax` hidden rows of size `d`, `v` weight rows.
fn synthetic_head(bmax: usize, d: usize, v: usize) -> (Vec<half::bf16>, Vec<half::bf16>) {
    flashsampling::synthetic::lm_head(bmax, d, v, DATA_SEED ^ d as u64)
}

/// [`synthetic_head`] uploaded to the device (the host copies are freed before the next
/// configuration's are made).
fn device_head(
    stream: &std::sync::Arc<CudaStream>,
    bmax: usize,
    d: usize,
    v: usize,
) -> R<(CudaSlice<half::bf16>, CudaSlice<half::bf16>)> {
    let (hidden, weight) = synthetic_head(bmax, d, v);
    Ok((stream.clone_htod(&hidden)?, stream.clone_htod(&weight)?))
}

/// `--heavy-rows`: an LM head whose row `r` (of `bmax`, hidden row `e_{r mod d}`) has exact heavy-tailed
/// logits: token `i`'s weight in column `r` is `−a·ln(rank_r(i))`, bf16-rounded, with `rank_r` a random
/// permutation of `1 ..= v` and `a` cycling through 1.0, 1.25, 1.5, 2.0 over the rows; the other
/// columns are zero (never read by the one-hot rows). Uploaded like [`device_head`].
fn heavy_head(
    stream: &std::sync::Arc<CudaStream>,
    bmax: usize,
    d: usize,
    v: usize,
) -> R<(CudaSlice<half::bf16>, CudaSlice<half::bf16>)> {
    let mut hidden = vec![half::bf16::ZERO; bmax * d];
    for r in 0..bmax {
        hidden[r * d + r % d] = half::bf16::ONE;
    }
    let mut weight = vec![half::bf16::ZERO; v * d];
    let mut rng = SplitMix64::new(DATA_SEED ^ 0x4EA7);
    let mut rank: Vec<u32> = (1..=v as u32).collect();
    for c in 0..bmax.min(d) {
        let a = [1.0f64, 1.25, 1.5, 2.0][c % 4];
        // Fisher–Yates: a fresh random rank of every token for this row.
        for i in (1..v).rev() {
            rank.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        for (i, &k) in rank.iter().enumerate() {
            weight[i * d + c] = half::bf16::from_f64(-a * (k as f64).ln());
        }
    }
    Ok((stream.clone_htod(&hidden)?, stream.clone_htod(&weight)?))
}

/// Writes a mode's CSV into the output folder, then prints its title and table (last, as the main run).
fn finish_mode(a: &Args, file: &str, csv: &str, title: &str, table: &str) -> R<()> {
    std::fs::create_dir_all(&a.out)?;
    let path = a.out.join(file);
    std::fs::write(&path, csv)?;
    println!("wrote {}", path.display());
    println!("\n{title}");
    print!("{table}");
    Ok(())
}
