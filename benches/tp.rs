//! `cargo bench --bench tp`: tensor-parallel sampling over a vocab-sharded LM head on G GPUs
//! (`flashsampling::tp`, through NCCL) against one GPU and against two unfused tensor-parallel
//! baselines.
//!
//! By default for D = 4096, V = 151936 (Qwen3-8B) and D = 8192, V = 128256 (Llama-3-70B),
//! B ∈ {1, 2, 4, …, 256} and G = 2, with random bf16 data (never zeros). The weight is split the way
//! Megatron and vLLM split it ([`ShardLayout::even`], `ceil(V / G)` rows per rank rounded up to 64,
//! the last shard padded past V with random rows); rank `r` runs on GPU `r` with the hidden states
//! uploaded to every GPU. Every mode samples with `SamplingParams::new(1.0, 7)`:
//! 1. `tp1_fused`: the fused kernel on GPU 0 over the whole `[V, D]` weight (rank 0's backend, so no
//!    second context or stream competes);
//! 2. `tp_fused`: [`TpGroup::sample_device`]: the fused kernel on every shard, the NCCL all-gather of
//!    the per-row winners (8 bytes a row and rank) and the merge, on every rank;
//!    `tp_fused_gpu`: the same with the host hidden (see Method): GPU time, what `tp_fused` costs
//!    when the host runs ahead (a decode loop);
//! 3. `tp_exchange`: that exchange alone (all-gather + merge of the staged results,
//!    `TpRank::exchange_only`), GPU time;
//! 4. `tp_allgather_logits` (baseline): per rank a cuBLAS GEMM of its shard to f32 logits, an NCCL
//!    all-gather of the logits (`G·B·V/G` floats on every rank), then this crate's Gumbel-max kernel
//!    over all gathered logits on every rank. It scores the last shard's padding rows too (a real
//!    stack masks them at the same cost; G = 2 has no padding for either default config);
//! 5. `tp_allgather_maxima` (baseline): per rank a cuBLAS GEMM of its shard, the Gumbel-max kernel
//!    over the shard's logits (per-row winner with global indices, the same noise as ours), then the
//!    exchange of per-row winners with this crate's all-gather and merge (`TpRank::exchange_results`);
//! 6. `tp_gemm_shard`: the cuBLAS GEMM of rank 0's shard alone on GPU 0 (reference);
//! 7. `shard_fused`: rank 0's fused call on its shard alone on GPU 0 (no exchange): what the
//!    rank-local step costs at `V / G` rows.
//!
//! Correctness first, at every (config, B): every rank's `tp_fused` tokens must equal the one-GPU
//! call's bit for bit (else a loud `MISMATCH` line and a non-zero exit at the end); the baselines'
//! tokens are compared with ours and the agreement printed (f32 summation order differs).
//!
//! Method: warm-up 10, then the median (min, max) of `--runs` runs. One GPU: CUDA events on its
//! stream (`EventTimer`). Several GPUs: per-rank timing events recorded on every rank's stream
//! around each iteration; the iteration's time is the slowest rank's `elapsed(start_r, stop_r)`.
//! `tp_fused` and `tp_allgather_logits` are driven from one thread (the NCCL calls of all ranks in
//! one group: [`TpGroup`] for ours, blocking communicators of their own for the logits baseline);
//! `tp_exchange` and `tp_allgather_maxima` from one thread per rank in lock step (their NCCL calls
//! are per rank and wait for their communicator before the merge, which one thread cannot do for
//! several ranks inside one group). `tp_fused_gpu` and `tp_exchange` are GPU time: each iteration
//! first enqueues a 2 GiB memset on every rank (untimed; its time is printed per config) so that
//! the host's launches, NCCL's enqueue and the readiness wait run while the GPUs are busy; every
//! other mode includes the host's time where the GPU waits for it (as `lm_head` does).
//!
//! Prints each row as it is measured, then a table (medians: TP=1, TP=G and its ratio to TP=1, TP=G
//! GPU-only, the exchange in µs, both baselines, the shard GEMM) and the target; writes `tp.csv`
//! (`config,d,v,b,mode,median_ms,min_ms,max_ms`) into `--out`.
//!
//! Flags:
//! - `--ranks G` (default 2): GPUs 0 .. G;
//! - `--quick`: B ∈ {1, 64, 256}; `--batches 1,2,…`: the B list (overrides the default and `--quick`);
//! - `--shape D,V` (repeatable): LM-head shapes instead of the two defaults, each a config named
//!   `d{D}-v{V}`; D a multiple of 8;
//! - `--runs N` (default 50), `--out DIR` (default `target/flashsampling-bench`).
//!
//! **`NCCL_NVLS_ENABLE=0` is required**: NVLink multicast (SHARP) must stay off on this project's
//! GPU hosts, so the bench refuses to start (exit 1) unless the variable is set to 0 — run it as
//! `NCCL_NVLS_ENABLE=0 cargo bench --bench tp`. Nothing here creates multicast objects.
//! With fewer than G GPUs or without NCCL it prints `SKIP tp bench: …` and exits 0 (fails with
//! `FLASHSAMPLING_REQUIRE_GPUS=G`).
//!
//! Device memory per GPU at B = 256: the shard (V/G·D bf16), on GPU 0 also the whole weight (2.1 GB
//! for Llama-3-70B), the gathered logits of the baseline (G·B·V/G·4 bytes, up to 156 MB) and the
//! 2 GiB memset buffer.

mod cli;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, CudaView, DevicePtr};
use cudarc::nccl::result::{NcclError, NcclStatus};
use flashsampling::baselines::{Baselines, UnfusedBuffers};
use flashsampling::timing::{EventTimer, Stats};
use flashsampling::tp::{DEFAULT_TIMEOUT, nccl_available};
use flashsampling::{DeviceMatrix, DeviceSamples, SamplingParams, ShardLayout, TpGroup, TpRank};
use half::bf16;

const DATA_SEED: u64 = 0xBE7C_0001;
const CONFIGS: [(&str, usize, usize); 2] = [("qwen3-8b", 4096, 151_936), ("llama3-70b", 8192, 128_256)];
const BATCHES: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
const QUICK_BATCHES: [usize; 3] = [1, 64, 256];
/// Shard rows are rounded up to a multiple of this (as serving engines pad their vocab shards; a
/// multiple of 4, as the baselines' Gumbel kernel needs).
const SHARD_PAD: usize = 64;
const WARMUP: usize = 10;
/// The untimed memset ahead of each `tp_exchange` iteration (hides the host's enqueue).
const SPACER_BYTES: usize = 2 << 30;
/// The target of the issue: TP=G at most this fraction of TP=1 for B ≤ [`TARGET_BMAX`].
const TARGET_RATIO: f64 = 0.55;
const TARGET_BMAX: usize = 64;

struct Args {
    /// `--quick`, `--runs` (at least 1), `--out`, `--shape` (empty = [`CONFIGS`]), `--batches`.
    common: cli::Common,
    /// `--ranks G`: GPUs of the group.
    ranks: usize,
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

    /// The B list.
    fn batches(&self) -> Vec<usize> {
        self.common.batch_list(&QUICK_BATCHES, &BATCHES)
    }
}

fn args() -> Args {
    let mut a = Args { common: cli::Common::new(1), ranks: 2 };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        if a.common.take(&x, &mut it) {
            continue;
        }
        if x == "--ranks" {
            a.ranks = it.next().and_then(|s| s.parse::<usize>().ok()).filter(|&g| g > 0).expect("--ranks G (G ≥ 1)");
        } // else `--bench` and filters from cargo
    }
    a
}

type R<T> = Result<T, Box<dyn std::error::Error>>;

/// An NCCL call's result (cudarc's error has no `Display`).
fn nccl(r: Result<NcclStatus, NcclError>, call: &str) -> R<()> {
    r.map(|_| ()).map_err(|e| format!("{call}: NCCL error {:?}", e.0).into())
}

/// Why the bench cannot run here (fewer than `g` GPUs, no NCCL), if it cannot.
fn missing(g: usize) -> Option<String> {
    let count =
        if flashsampling::gpu_available() { CudaContext::device_count().unwrap_or(0).max(0) as usize } else { 0 };
    if count < g {
        Some(format!("{count} GPUs, needs {g}"))
    } else if !nccl_available() {
        Some("no NCCL library (libnccl.so)".to_string())
    } else {
        None
    }
}

/// One (config, B) measurement: every mode's stats, and the tokens' agreement.
struct Row {
    config: String,
    d: usize,
    v: usize,
    b: usize,
    tp1: Stats,
    tp: Stats,
    /// `tp_fused` with the host hidden (a memset ahead on every rank): GPU time.
    tp_gpu: Stats,
    exchange: Stats,
    ag_logits: Stats,
    ag_maxima: Stats,
    gemm: Stats,
    /// Rank 0's fused call on its shard alone (no exchange), on GPU 0.
    shard: Stats,
    /// Top-k 50 + top-p 0.9 (every row): TP=1, and TP=G (the ranks' top lists exchanged).
    tp1_trunc: Stats,
    tp_trunc: Stats,
}

impl Row {
    fn modes(&self) -> [(&'static str, Stats); 10] {
        [
            ("tp1_fused", self.tp1),
            ("tp_fused", self.tp),
            ("tp_fused_gpu", self.tp_gpu),
            ("tp_exchange", self.exchange),
            ("tp_allgather_logits", self.ag_logits),
            ("tp_allgather_maxima", self.ag_maxima),
            ("tp_gemm_shard", self.gemm),
            ("shard_fused", self.shard),
            ("tp1_truncate", self.tp1_trunc),
            ("tp_truncate", self.tp_trunc),
        ]
    }

    fn csv(&self) -> String {
        self.modes()
            .iter()
            .map(|(mode, s)| {
                format!(
                    "{},{},{},{},{mode},{:.5},{:.5},{:.5}\n",
                    self.config, self.d, self.v, self.b, s.median, s.min, s.max
                )
            })
            .collect()
    }

    fn line(&self) -> String {
        format!(
            "| {} | {} | {:.4} | {:.4} ({:.3}) | {:.4} ({:.3}) | {:.4} | {:.1} | {:.4} | {:.4} | {:.4} |",
            self.config,
            self.b,
            self.tp1.median,
            self.tp.median,
            self.tp.median / self.tp1.median,
            self.tp_gpu.median,
            self.tp_gpu.median / self.tp1.median,
            self.shard.median,
            self.exchange.median * 1e3,
            self.ag_logits.median,
            self.ag_maxima.median,
            self.gemm.median
        )
    }

    fn truncation_line(&self) -> String {
        format!(
            "| {} | {} | {:.4} | {:.4} ({:.3}) |",
            self.config,
            self.b,
            self.tp1_trunc.median,
            self.tp_trunc.median,
            self.tp_trunc.median / self.tp1_trunc.median
        )
    }

    /// Where this row misses the target, if it does.
    fn target_miss(&self) -> Option<String> {
        let mut why = Vec::new();
        if self.b <= TARGET_BMAX && self.tp.median > TARGET_RATIO * self.tp1.median {
            why.push(format!("{:.3}× TP=1", self.tp.median / self.tp1.median));
        }
        if self.tp.median >= self.ag_logits.median {
            why.push("not faster than all-gather-logits".to_string());
        }
        if self.tp.median >= self.ag_maxima.median {
            why.push("not faster than all-gather-maxima".to_string());
        }
        (!why.is_empty()).then(|| format!("{} B={}: {}", self.config, self.b, why.join(", ")))
    }
}

fn table_header(g: usize) -> String {
    let columns = [
        "config".to_string(),
        "B".to_string(),
        "TP=1 fused ms".to_string(),
        format!("TP={g} fused ms (×TP=1)"),
        format!("TP={g} GPU-only ms (×TP=1)"),
        "shard alone ms".to_string(),
        "exchange µs".to_string(),
        "all-gather-logits ms".to_string(),
        "all-gather-maxima ms".to_string(),
        "GEMM shard ms".to_string(),
    ];
    format!("| {} |\n|{}\n", columns.join(" | "), "---|".repeat(columns.len()))
}

fn main() -> R<()> {
    let a = args();
    let g = a.ranks;
    if let Some(reason) = missing(g) {
        let required = std::env::var("FLASHSAMPLING_REQUIRE_GPUS").ok().and_then(|v| v.parse::<usize>().ok());
        let require_any = std::env::var("FLASHSAMPLING_REQUIRE_GPU").is_ok_and(|v| v == "1");
        if require_any && !flashsampling::gpu_available() {
            return Err(format!("FLASHSAMPLING_REQUIRE_GPU=1 but the tp bench cannot run: {reason}").into());
        }
        if required.is_some_and(|n| n >= g) {
            return Err(format!(
                "FLASHSAMPLING_REQUIRE_GPUS={} but the tp bench cannot run: {reason}",
                required.unwrap()
            )
            .into());
        }
        println!("SKIP tp bench: {reason}");
        return Ok(());
    }
    let nvls = std::env::var("NCCL_NVLS_ENABLE");
    if nvls.as_deref() != Ok("0") {
        eprintln!(
            "error: tp bench: NCCL_NVLS_ENABLE must be set to 0 ({}): NVLink multicast must stay off on these \
             hosts; run `NCCL_NVLS_ENABLE=0 cargo bench --bench tp`",
            nvls.map_or_else(|_| "it is unset".to_string(), |v| format!("found {v:?}"))
        );
        std::process::exit(1);
    }
    let batches = a.batches();
    let bmax = *batches.iter().max().unwrap();
    let ordinals: Vec<usize> = (0..g).collect();
    let mut rows = Vec::new();
    let mut mismatches = Vec::new();
    for (config, d, v) in a.configs() {
        let layouts = ShardLayout::even(v, d, g, SHARD_PAD)?;
        if layouts.iter().any(|l| l.offset >= v) {
            eprintln!("{config}: skipped: with G = {g} a shard lies entirely past V (padding only)");
            continue;
        }
        let mut group = TpGroup::new(&ordinals, &layouts, DEFAULT_TIMEOUT)?;
        rows.extend(run_config(&mut group, &a, (&config, d, v), &layouts, &batches, bmax, &mut mismatches)?);
    }

    std::fs::create_dir_all(&a.out)?;
    let path = a.out.join("tp.csv");
    let csv: String = std::iter::once("config,d,v,b,mode,median_ms,min_ms,max_ms\n".to_string())
        .chain(rows.iter().map(Row::csv))
        .collect();
    std::fs::write(&path, csv)?;
    println!("wrote {}", path.display());
    println!("\nvocab-parallel LM head on {g} GPUs vs one: medians of {} runs (ms; exchange µs, GPU time)", a.runs);
    print!("{}", table_header(g));
    for r in &rows {
        println!("{}", r.line());
    }
    println!("target: TP={g} ≤ {TARGET_RATIO}× TP=1 for B ≤ {TARGET_BMAX} and faster than both baselines at every B");
    println!("\ntop-k 50 + top-p 0.9 on every row: medians of {} runs (ms)", a.runs);
    println!("| config | B | TP=1 ms | TP={g} ms (×TP=1) |\n|---|---|---|---|");
    for r in &rows {
        println!("{}", r.truncation_line());
    }
    let misses: Vec<String> = rows.iter().filter_map(Row::target_miss).collect();
    if misses.is_empty() {
        println!("target met at every (config, B)");
    } else {
        println!("target missed at {} of {} (config, B): {}", misses.len(), rows.len(), misses.join("; "));
    }
    if !mismatches.is_empty() {
        return Err(format!(
            "MISMATCH: TP={g} tokens differ from TP=1 at {} (config, B): {}",
            mismatches.len(),
            mismatches.join("; ")
        )
        .into());
    }
    Ok(())
}

/// Every B of one config on `group`: data upload, the correctness check, the timings.
fn run_config(
    group: &mut TpGroup,
    a: &Args,
    (config, d, v): (&str, usize, usize),
    layouts: &[ShardLayout],
    batches: &[usize],
    bmax: usize,
    mismatches: &mut Vec<String>,
) -> R<Vec<Row>> {
    let g = layouts.len();
    let runs = a.runs;
    let rows = layouts[0].rows;
    let padded = layouts.iter().map(|l| l.offset + l.rows).max().unwrap_or(v);
    let ctxs: Vec<Arc<CudaContext>> = group.ranks().iter().map(|r| r.gpu().context().clone()).collect();
    let streams: Vec<Arc<CudaStream>> = group.ranks().iter().map(|r| r.gpu().stream().clone()).collect();
    let names: Vec<String> = group.ranks().iter().map(|r| r.gpu().device_name()).collect();
    eprintln!(
        "{config}: D = {d}, V = {v}, {g} ranks × {rows} rows ({} padding rows past V); GPUs: {}",
        padded - v,
        names.join(", ")
    );

    // Host data: the padded head [G·rows, D] (padding rows random too) and the hidden states.
    let (hidden, weight) = flashsampling::synthetic::lm_head(bmax, d, padded, DATA_SEED ^ d as u64);
    let h_dev = streams.iter().map(|s| s.clone_htod(&hidden)).collect::<Result<Vec<_>, _>>()?;
    let w_dev = layouts
        .iter()
        .zip(&streams)
        .map(|(l, s)| s.clone_htod(&weight[l.offset * d..(l.offset + l.rows) * d]))
        .collect::<Result<Vec<_>, _>>()?;
    let w_full = streams[0].clone_htod(&weight[..v * d])?;
    drop((hidden, weight));
    let mut spacers = streams.iter().map(|s| s.alloc_zeros::<u8>(SPACER_BYTES)).collect::<Result<Vec<_>, _>>()?;
    // Rows of each shard that the maxima baseline scores: the real ones (a multiple of 4 for its
    // Gumbel kernel: up to three padding rows when V % 4 != 0).
    let real: Vec<usize> = layouts.iter().map(|l| l.rows.min(v - l.offset).next_multiple_of(4).min(l.rows)).collect();
    if real.iter().zip(layouts).any(|(&r, l)| r > l.rows.min(v - l.offset)) {
        eprintln!("{config}: V % 4 != 0: the all-gather-maxima baseline scores up to three padding rows");
    }

    let bases = group.ranks().iter().map(|r| Baselines::new(r.gpu())).collect::<Result<Vec<_>, _>>()?;
    // The logits baseline's own communicators (blocking: a grouped all-gather is enqueued when
    // `group_end` returns, so the Gumbel kernel after it is ordered after it on each stream).
    let comms = cudarc::nccl::Comm::from_devices(streams.clone())
        .map_err(|e| format!("ncclCommInitAll for the all-gather-logits baseline: {:?}", e.0))?;
    let timer0 = EventTimer::new(&ctxs[0])?;
    let events = ctxs.iter().map(timing_events).collect::<R<Vec<_>>>()?;
    let params = SamplingParams::new(1.0, 7);
    // The spacer must outlast the host's enqueue for the GPU-only numbers to be GPU time.
    let spacer = timer0.time(&streams[0], 2, 10, || Ok(streams[0].memset_zeros(&mut spacers[0])?))?;
    eprintln!("{config}: spacer ({} GiB memset) {:.3} ms", SPACER_BYTES >> 30, spacer.median);

    let mut out_rows = Vec::new();
    for &b in batches {
        let hm = |r: usize| DeviceMatrix { data: h_dev[r].slice(..b * d), rows: b, cols: d };
        let hs: Vec<DeviceMatrix<'_>> = (0..g).map(hm).collect();
        let ws: Vec<DeviceMatrix<'_>> =
            w_dev.iter().map(|w| DeviceMatrix { data: w.as_view(), rows, cols: d }).collect();

        // 1. TP=1 on rank 0's backend: the reference tokens, then its time.
        ctxs[0].bind_to_thread()?;
        let (tp1, tokens1) = {
            let gpu0 = group.ranks()[0].gpu();
            let whole = DeviceMatrix { data: w_full.as_view(), rows: v, cols: d };
            let mut out1 = gpu0.alloc_samples(b, v)?;
            gpu0.sample_device(&hs[0], &whole, &params, &mut out1)?;
            let tokens1 = streams[0].clone_dtoh(&out1.tokens())?;
            let t =
                timer0.time(&streams[0], WARMUP, runs, || gpu0.sample_device(&hs[0], &whole, &params, &mut out1))?;
            (t, tokens1)
        };

        // 1b. Rank 0's shard alone, one GPU, no exchange.
        let shard = {
            let gpu0 = group.ranks()[0].gpu();
            let mut o = gpu0.alloc_samples(b, rows)?;
            timer0.time(&streams[0], WARMUP, runs, || gpu0.sample_device(&hs[0], &ws[0], &params, &mut o))?
        };

        // 2. TP=G: every rank's tokens must be TP=1's, bit for bit.
        let mut outs = group.ranks().iter().map(|r| r.gpu().alloc_samples(b, rows)).collect::<Result<Vec<_>, _>>()?;
        group.sample_device(&hs, &ws, &params, None, &mut outs)?;
        group.synchronize()?;
        let tp_tokens = download_tokens(&outs, &streams)?;
        for (r, t) in tp_tokens.iter().enumerate() {
            let differ = t.iter().zip(&tokens1).filter(|(x, y)| x != y).count();
            if differ > 0 || t.len() != tokens1.len() {
                eprintln!(
                    "MISMATCH {config} B={b}: rank {r}'s TP={g} tokens differ from TP=1 in {differ} of {b} rows \
                     (first: {:?} vs {:?})",
                    &t[..t.len().min(8)],
                    &tokens1[..tokens1.len().min(8)]
                );
                mismatches.push(format!("{config} B={b} rank {r}: {differ} rows"));
            }
        }
        let tp = time_group(group, &events, (WARMUP, runs), None, |grp| {
            Ok(grp.sample_device(&hs, &ws, &params, None, &mut outs)?)
        })?;
        let tp_gpu = time_group(group, &events, (WARMUP, runs), Some(&mut spacers), |grp| {
            Ok(grp.sample_device(&hs, &ws, &params, None, &mut outs)?)
        })?;

        // 3. The exchange alone (the staged results of the last TP call), GPU time.
        let mut states: Vec<(&mut DeviceSamples, &mut CudaSlice<u8>)> =
            outs.iter_mut().zip(spacers.iter_mut()).collect();
        let exchange = time_threads(
            group.ranks_mut(),
            &mut states,
            WARMUP,
            runs,
            |rank, (_, spacer)| Ok(rank.gpu().stream().memset_zeros(*spacer)?),
            |rank, (out, _)| Ok(rank.exchange_only(b, false, out)?),
        )?;
        drop(states);

        // 4. Baseline: GEMM per shard, all-gather the logits, Gumbel-max over all of them on every rank.
        let mut locals = bases.iter().map(|base| base.alloc(b, rows, &params)).collect::<Result<Vec<_>, _>>()?;
        let mut gathered = bases
            .iter()
            .map(|base| -> R<UnfusedBuffers> {
                let mut buf = base.alloc_slabs(b, rows, g, &params)?;
                buf.set_slabs(g, 0)?;
                Ok(buf)
            })
            .collect::<R<Vec<_>>>()?;
        let ag_logits = time_group(group, &events, (WARMUP, runs), None, |_| {
            for r in 0..g {
                ctxs[r].bind_to_thread()?;
                bases[r].gemm(&hs[r].data, &ws[r].data, d, &mut locals[r])?;
            }
            nccl(cudarc::nccl::group_start(), "ncclGroupStart")?;
            let sent: R<()> = (0..g).try_for_each(|r| {
                nccl(comms[r].all_gather(&locals[r].logits, &mut gathered[r].logits), "ncclAllGather")
            });
            nccl(cudarc::nccl::group_end(), "ncclGroupEnd")?;
            sent?;
            for r in 0..g {
                ctxs[r].bind_to_thread()?;
                bases[r].gumbel_over_logits(&mut gathered[r], &params)?;
            }
            Ok(())
        })?;
        let logits_tokens: Vec<Vec<u32>> =
            gathered.iter().zip(&streams).map(|(buf, s)| s.clone_dtoh(&buf.tokens)).collect::<Result<_, _>>()?;

        // 5. Baseline: GEMM per shard, Gumbel-max over the shard, exchange of per-row winners.
        let mut maxima = Vec::with_capacity(g);
        for r in 0..g {
            let mut local = bases[r].alloc(b, real[r], &params)?;
            local.set_slabs(1, layouts[r].offset)?;
            let out = group.ranks()[r].gpu().alloc_samples(b, rows)?;
            let weight = w_dev[r].slice(..real[r] * d);
            maxima.push(MaximaState { base: &bases[r], local, out, hidden: h_dev[r].slice(..b * d), weight });
        }
        let ag_maxima = time_threads(
            group.ranks_mut(),
            &mut maxima,
            WARMUP,
            runs,
            |_, _| Ok(()),
            |rank, st| {
                st.base.gemm(&st.hidden, &st.weight, d, &mut st.local)?;
                st.base.gumbel_over_logits(&mut st.local, &params)?;
                let stream = rank.gpu().stream().clone();
                let (tokens, _t) = st.local.tokens.device_ptr(&stream);
                let (scores, _s) = st.local.scores.device_ptr(&stream);
                Ok(rank.exchange_results(tokens, scores, b, &mut st.out)?)
            },
        )?;
        let maxima_outs: Vec<DeviceSamples> = maxima.into_iter().map(|m| m.out).collect();
        let maxima_tokens = download_tokens(&maxima_outs, &streams)?;

        // 6. Top-k 50 + top-p 0.9: TP=1, then TP=G (tokens checked against TP=1's).
        let trunc = params.clone().with_top_k(vec![50; b]).with_top_p(vec![0.9; b]);
        ctxs[0].bind_to_thread()?;
        let (tp1_trunc, trunc_tokens1) = {
            let gpu0 = group.ranks()[0].gpu();
            let whole = DeviceMatrix { data: w_full.as_view(), rows: v, cols: d };
            let mut out1 = gpu0.alloc_samples(b, v)?;
            gpu0.sample_device(&hs[0], &whole, &trunc, &mut out1)?;
            let tokens1 = streams[0].clone_dtoh(&out1.tokens())?;
            let t = timer0.time(&streams[0], WARMUP, runs, || gpu0.sample_device(&hs[0], &whole, &trunc, &mut out1))?;
            (t, tokens1)
        };
        group.sample_device(&hs, &ws, &trunc, None, &mut outs)?;
        group.synchronize()?;
        for (r, t) in download_tokens(&outs, &streams)?.iter().enumerate() {
            let differ = t.iter().zip(&trunc_tokens1).filter(|(x, y)| x != y).count();
            if differ > 0 || t.len() != trunc_tokens1.len() {
                eprintln!("MISMATCH {config} B={b} top-k/top-p: rank {r}'s TP={g} tokens differ in {differ} rows");
                mismatches.push(format!("{config} B={b} top-k/top-p rank {r}: {differ} rows"));
            }
        }
        let tp_trunc = time_group(group, &events, (WARMUP, runs), None, |grp| {
            Ok(grp.sample_device(&hs, &ws, &trunc, None, &mut outs)?)
        })?;

        // 7. cuBLAS GEMM of rank 0's shard alone.
        ctxs[0].bind_to_thread()?;
        let gemm =
            timer0.time(&streams[0], WARMUP, runs, || bases[0].gemm(&hs[0].data, &ws[0].data, d, &mut locals[0]))?;

        let row = Row {
            config: config.to_string(),
            d,
            v,
            b,
            tp1,
            tp,
            tp_gpu,
            exchange,
            ag_logits,
            ag_maxima,
            gemm,
            shard,
            tp1_trunc,
            tp_trunc,
        };
        eprintln!(
            "{}  agreement with ours: all-gather-maxima {}, all-gather-logits {}",
            row.line(),
            agreement(&maxima_tokens, &tp_tokens),
            agreement(&logits_tokens, &tp_tokens)
        );
        out_rows.push(row);
    }
    Ok(out_rows)
}

/// A rank's buffers of the all-gather-maxima baseline.
struct MaximaState<'a> {
    base: &'a Baselines,
    /// The shard's logits `[B, real rows]` and the rank-local winners (global indices).
    local: UnfusedBuffers,
    /// The merged winners.
    out: DeviceSamples,
    hidden: CudaView<'a, bf16>,
    /// The shard's real rows (the padding past V left out).
    weight: CudaView<'a, bf16>,
}

/// A pair of timing-enabled events on `ctx` (cudarc's default disables timing).
fn timing_events(ctx: &Arc<CudaContext>) -> R<(CudaEvent, CudaEvent)> {
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    Ok((ctx.new_event(flags)?, ctx.new_event(flags)?))
}

fn download_tokens(outs: &[DeviceSamples], streams: &[Arc<CudaStream>]) -> R<Vec<Vec<u32>>> {
    Ok(outs.iter().zip(streams).map(|(o, s)| s.clone_dtoh(&o.tokens())).collect::<Result<_, _>>()?)
}

/// "equal / compared (percent)" over every rank's rows.
fn agreement(got: &[Vec<u32>], ours: &[Vec<u32>]) -> String {
    let total: usize = ours.iter().map(Vec::len).sum();
    let same: usize = got.iter().zip(ours).map(|(x, y)| x.iter().zip(y).filter(|(a, b)| a == b).count()).sum();
    format!("{same}/{total} rank-rows ({:.2}%)", 100.0 * same as f64 / total.max(1) as f64)
}

/// Times `f` on all ranks from this thread: per iteration (with `spacers`, first an untimed memset
/// of each rank's spacer on its stream) a start event on every rank's stream, `f`, a stop event on
/// every rank's stream, then [`TpGroup::synchronize`] (with its deadline) and the stop events; the
/// iteration's time is the slowest rank's. `warmup` untimed iterations first.
fn time_group(
    group: &mut TpGroup,
    events: &[(CudaEvent, CudaEvent)],
    (warmup, runs): (usize, usize),
    mut spacers: Option<&mut [CudaSlice<u8>]>,
    mut f: impl FnMut(&mut TpGroup) -> R<()>,
) -> R<Stats> {
    let streams: Vec<Arc<CudaStream>> = group.ranks().iter().map(|r| r.gpu().stream().clone()).collect();
    let mut times = Vec::with_capacity(runs);
    for i in 0..warmup + runs {
        if let Some(spacers) = spacers.as_deref_mut() {
            for (spacer, s) in spacers.iter_mut().zip(&streams) {
                s.memset_zeros(spacer)?;
            }
        }
        for ((start, _), s) in events.iter().zip(&streams) {
            start.record(s)?;
        }
        f(group)?;
        for ((_, stop), s) in events.iter().zip(&streams) {
            stop.record(s)?;
        }
        group.synchronize()?;
        let mut slowest = 0.0f64;
        for (start, stop) in events {
            stop.synchronize()?;
            slowest = slowest.max(start.elapsed_ms(stop)? as f64);
        }
        if i >= warmup {
            times.push(slowest);
        }
    }
    Ok(Stats::of(times))
}

/// Times `body` on every rank, each rank in its own thread (one thread per GPU: each rank's NCCL
/// calls stay ungrouped and wait for their own communicator), the threads in lock step (a barrier
/// per iteration). An iteration: `before` (untimed), a start event, `body`, a stop event on the
/// rank's stream, then the rank's synchronize (with its deadline) and the stop event; its time is
/// the slowest rank's. `warmup` untimed iterations first. An error on one rank stops every rank
/// at the next iteration (no thread is left waiting at the barrier).
fn time_threads<S: Send>(
    ranks: &mut [TpRank],
    states: &mut [S],
    warmup: usize,
    runs: usize,
    before: impl Fn(&mut TpRank, &mut S) -> R<()> + Sync,
    body: impl Fn(&mut TpRank, &mut S) -> R<()> + Sync,
) -> R<Stats> {
    let barrier = Barrier::new(ranks.len());
    let failed = AtomicBool::new(false);
    let per_rank: Vec<Result<Vec<f64>, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ranks
            .iter_mut()
            .zip(states.iter_mut())
            .map(|(rank, state)| {
                let (barrier, failed, before, body) = (&barrier, &failed, &before, &body);
                scope.spawn(move || {
                    let mut times = Vec::with_capacity(runs);
                    let mut error = None;
                    let ctx = rank.gpu().context().clone();
                    let stream = rank.gpu().stream().clone();
                    let events = timing_events(&ctx).map_err(|e| e.to_string());
                    if let Err(e) = &events {
                        error = Some(e.clone());
                        failed.store(true, Ordering::SeqCst);
                    }
                    for i in 0..warmup + runs {
                        barrier.wait();
                        if failed.load(Ordering::SeqCst) {
                            break;
                        }
                        let Ok((start, stop)) = &events else { break };
                        let step = catch_unwind(AssertUnwindSafe(|| -> R<f64> {
                            ctx.bind_to_thread()?;
                            before(rank, state)?;
                            start.record(&stream)?;
                            body(rank, state)?;
                            stop.record(&stream)?;
                            rank.synchronize()?;
                            stop.synchronize()?;
                            Ok(start.elapsed_ms(stop)? as f64)
                        }));
                        let message = match step {
                            Ok(Ok(t)) => {
                                if i >= warmup {
                                    times.push(t);
                                }
                                continue;
                            }
                            Ok(Err(e)) => e.to_string(),
                            Err(_) => "panicked".to_string(),
                        };
                        error = Some(message);
                        failed.store(true, Ordering::SeqCst);
                    }
                    match error {
                        Some(e) => Err(format!("rank {}: {e}", rank.rank())),
                        None => Ok(times),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a rank's thread panicked".into()))).collect()
    });
    let errors: Vec<&String> = per_rank.iter().filter_map(|r| r.as_ref().err()).collect();
    if !errors.is_empty() {
        return Err(errors.iter().map(|e| e.as_str()).collect::<Vec<_>>().join("; ").into());
    }
    let per_rank: Vec<Vec<f64>> = per_rank.into_iter().map(|r| r.unwrap_or_default()).collect();
    let times = (0..runs).map(|i| per_rank.iter().map(|t| t[i]).fold(0.0, f64::max)).collect();
    Ok(Stats::of(times))
}
