//! Tensor-parallel sampling the way serving engines run it: one process per GPU.
//!
//! The LM head `[V, D]` is split by vocabulary rows across `--world` ranks (the even split of
//! Megatron and vLLM, `ceil(V / G)` rows per rank rounded up to 64; the last shard is padded past V
//! with zero rows, which are never scored). Each rank is its own process on its own GPU
//! ([`flashsampling::TpRank`]): it runs the fused kernel on its shard, the ranks all-gather their
//! per-row winners through NCCL and merge them, and every rank ends with the same tokens — those
//! of one device sampling the whole head with the same seed.
//!
//! ```text
//! cargo run --release --example tp_ranks -- [--world 2] [--batch B] [--hidden D] [--vocab V]
//!                                           [--seed S] [--top-k K] [--top-p P] [--timeout-ms MS]
//!                                           [--fail-rank R]
//! ```
//!
//! Run without `--rank`, the example is the **launcher**: it makes an NCCL unique id
//! ([`flashsampling::CommId`]), starts `--world` copies of itself with `--rank r --id <hex>` (rank
//! `r` on GPU ordinal `r`; `CUDA_VISIBLE_DEVICES` is passed through unchanged), collects the line
//! each prints (`RANK r TOKENS t0,t1,...`, or `RANK r ERROR <message>`) and checks that every rank
//! printed the same tokens and that they equal the CPU backend's sample of the whole head (same
//! synthetic data, same `SamplingParams::new(0.8, seed)`), bit for bit. Defaults: 2 ranks, B = 8,
//! D = 1024, V = 32003 (not a multiple of 4: the last shard holds padding), seed 42. `--top-k K` and
//! `--top-p P` truncate every row (the ranks then exchange their shards' top lists, and rows the
//! merged lists cannot decide take the exact fallback over the ranks' gathered logits).
//!
//! `--fail-rank R` shows that a failed rank does not hang the others: rank R exits (code 3, printing
//! `RANK R EXITING WITHOUT SAMPLING`) right after the group is formed, before sampling, like a
//! crashed worker; every other rank must get `Error::Timeout` from its wait within `--timeout-ms`
//! (default 5000 in this mode, else 60000) and exit with code 2. Joining the group waits at least
//! 60 s whatever `--timeout-ms` says (start-up times differ between processes); the launcher kills
//! any rank still running after the joining timeout, the sampling timeout and 60 s more, so the
//! example itself never hangs.
//!
//! Rank exit codes: 0 sampled, 1 an error, 2 a timeout waiting for the other ranks, 3 the
//! `--fail-rank` rank. Launcher exit codes: 0 success (or `SKIP tp_ranks: <reason>` when NCCL or
//! enough GPUs are missing), 1 a failed check, 2 bad arguments.
//!
//! **`NCCL_NVLS_ENABLE=0`.** NVLink SHARP (multicast) must stay off on this project's GPU hosts, so
//! the launcher sets `NCCL_NVLS_ENABLE=0` explicitly in every rank's environment, and a rank refuses
//! to start (exit 1) when it finds any other value. A serving engine that starts its workers itself
//! must do the same.

use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flashsampling::tp::{DEFAULT_TIMEOUT, nccl_available};
use flashsampling::{CommId, CpuBackend, DeviceMatrix, Error, Matrix, SamplingParams, ShardLayout, TpRank};
use half::bf16;

const TEMPERATURE: f32 = 0.8;
/// Shard rows are rounded up to a multiple of this (as serving engines pad their vocab shards).
const SHARD_PAD: usize = 64;
/// Rank exit codes.
const EXIT_ERROR: i32 = 1;
const EXIT_TIMEOUT: i32 = 2;
const EXIT_FAIL_RANK: i32 = 3;
/// How much longer than its timeouts the launcher lets a rank run before it kills it.
const KILL_GRACE: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
struct Args {
    world: usize,
    b: usize,
    d: usize,
    v: usize,
    seed: u64,
    /// `--top-k`, `--top-p` (0 and 1: off).
    top_k: u32,
    top_p: f32,
    /// `--timeout-ms`; `None`: the mode's default.
    timeout_ms: Option<u64>,
    fail_rank: Option<usize>,
    /// Child mode: this process's rank and the group's id (hexadecimal).
    rank: Option<usize>,
    id: Option<String>,
}

impl Args {
    /// The sampling timeout: `--timeout-ms`, else 5 s with `--fail-rank` and 60 s without.
    fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.unwrap_or(if self.fail_rank.is_some() { 5_000 } else { 60_000 }))
    }

    /// The call every rank makes, and the reference on the whole head.
    fn params(&self) -> SamplingParams {
        let p = SamplingParams::new(TEMPERATURE, self.seed);
        if self.top_k == 0 && self.top_p >= 1.0 {
            return p;
        }
        p.with_top_k(vec![self.top_k; self.b]).with_top_p(vec![self.top_p; self.b])
    }

    /// How long joining the group may take: the sampling timeout, but at least [`DEFAULT_TIMEOUT`].
    fn join_timeout(&self) -> Duration {
        self.timeout().max(DEFAULT_TIMEOUT)
    }
}

const USAGE: &str = "usage: tp_ranks [--world 2] [--batch B] [--hidden D] [--vocab V] [--seed S] [--top-k K] [--top-p P] [--timeout-ms MS] [--fail-rank R]\n       (internal, set by the launcher: --rank R --id HEX)";

fn parse() -> Result<Args, String> {
    let mut a = Args {
        world: 2,
        b: 8,
        d: 1024,
        v: 32_003,
        seed: 42,
        top_k: 0,
        top_p: 1.0,
        timeout_ms: None,
        fail_rank: None,
        rank: None,
        id: None,
    };
    // Non-UTF-8 arguments are errors, not panics.
    let mut it = std::env::args_os().skip(1);
    while let Some(flag) = it.next() {
        let flag = flag.into_string().map_err(|f| format!("unknown argument {}", f.to_string_lossy()))?;
        let mut val = || {
            let v = it.next().ok_or(format!("{flag} needs a value"))?;
            v.into_string().map_err(|v| format!("{flag}: {v:?} is not valid UTF-8"))
        };
        match flag.as_str() {
            "--world" => a.world = val()?.parse().map_err(|e| format!("--world: {e}"))?,
            "--batch" => a.b = val()?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--hidden" => a.d = val()?.parse().map_err(|e| format!("--hidden: {e}"))?,
            "--vocab" => a.v = val()?.parse().map_err(|e| format!("--vocab: {e}"))?,
            "--seed" => a.seed = val()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--top-k" => a.top_k = val()?.parse().map_err(|e| format!("--top-k: {e}"))?,
            "--top-p" => a.top_p = val()?.parse().map_err(|e| format!("--top-p: {e}"))?,
            "--timeout-ms" => a.timeout_ms = Some(val()?.parse().map_err(|e| format!("--timeout-ms: {e}"))?),
            "--fail-rank" => a.fail_rank = Some(val()?.parse().map_err(|e| format!("--fail-rank: {e}"))?),
            "--rank" => a.rank = Some(val()?.parse().map_err(|e| format!("--rank: {e}"))?),
            "--id" => a.id = Some(val()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            o => return Err(format!("unknown argument {o}")),
        }
    }
    if a.world == 0 || a.b == 0 || a.d == 0 || a.v == 0 {
        return Err("--world, --batch, --hidden and --vocab must be positive".into());
    }
    // The library's own limits, before anything is built of these sizes.
    flashsampling::params::check_shape(a.b, a.d, a.v).map_err(|e| e.to_string())?;
    ShardLayout::even(a.v, a.d, a.world, SHARD_PAD).map_err(|e| e.to_string())?;
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        return Err("--top-p must be in (0, 1]".into());
    }
    if a.rank.is_some() != a.id.is_some() {
        return Err("--rank and --id go together (the launcher passes both)".into());
    }
    if let Some(r) = a.rank.filter(|&r| r >= a.world) {
        return Err(format!("--rank {r} is not below --world {}", a.world));
    }
    if let Some(r) = a.fail_rank {
        if r >= a.world {
            return Err(format!("--fail-rank {r} is not below --world {}", a.world));
        }
        if a.world < 2 {
            return Err("--fail-rank needs --world 2 or more (other ranks to time out)".into());
        }
    }
    Ok(a)
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    match (args.rank, args.id.clone()) {
        (Some(rank), Some(id)) => child(&args, rank, &id),
        _ => std::process::exit(launcher(&args)),
    }
}

// ---------------------------------------------------------------------------------------------
// Child mode: one rank.
// ---------------------------------------------------------------------------------------------

/// Prints `RANK r ERROR <stage>: <error>` and exits: code 2 for a timeout, 1 for anything else.
///
/// It exits without running destructors, on purpose: after a timeout the rank's NCCL communicator
/// is already aborted, and the process's end releases the GPU; nothing left to do may block.
fn die(rank: usize, stage: &str, e: &Error) -> ! {
    let code = if matches!(e, Error::Timeout { .. }) { EXIT_TIMEOUT } else { EXIT_ERROR };
    println!("RANK {rank} ERROR {stage}: {e}");
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

/// `.or_die(rank, stage)`: the value, or [`die`].
trait OrDie<T> {
    fn or_die(self, rank: usize, stage: &str) -> T;
}

impl<T, E: Into<Error>> OrDie<T> for Result<T, E> {
    fn or_die(self, rank: usize, stage: &str) -> T {
        self.unwrap_or_else(|e| die(rank, stage, &e.into()))
    }
}

/// Rank `rank` of the group `id`: its shard of the synthetic head on GPU `rank`; prints its tokens.
fn child(a: &Args, rank: usize, id: &str) -> ! {
    let nvls = std::env::var("NCCL_NVLS_ENABLE");
    if nvls.as_deref() != Ok("0") {
        println!(
            "RANK {rank} ERROR NCCL_NVLS_ENABLE must be set to 0 in every rank's environment (found {}); \
             start the ranks through the launcher, or set it yourself",
            nvls.map_or_else(|_| "it unset".to_string(), |v| format!("{v:?}"))
        );
        std::process::exit(EXIT_ERROR);
    }
    let id = CommId::from_hex(id).or_die(rank, "parsing --id");
    let layouts = ShardLayout::even(a.v, a.d, a.world, SHARD_PAD).or_die(rank, "splitting the vocabulary");
    let layout = layouts[rank];

    // The whole synthetic head, the same on every rank (deterministic from the seed); this rank
    // keeps rows `offset .. offset + rows` of the weight, zero rows past V.
    let (hidden, weight) =
        flashsampling::synthetic::try_lm_head(a.b, a.d, a.v, a.seed).or_die(rank, "building the synthetic head");
    let mut shard = vec![bf16::ZERO; layout.rows * a.d];
    let real_rows = layout.rows.min(a.v.saturating_sub(layout.offset));
    shard[..real_rows * a.d].copy_from_slice(&weight[layout.offset * a.d..(layout.offset + real_rows) * a.d]);
    drop(weight);

    // Join the group on GPU `rank`: generous for joining (start-up times differ), then the sampling
    // timeout for everything after.
    let mut tp = TpRank::new(rank, rank, a.world, &id, layout, a.join_timeout()).or_die(rank, "joining the group");
    tp.set_timeout(a.timeout());

    if a.fail_rank == Some(rank) {
        // A worker that dies between two steps: no sampling, no clean shutdown of its communicator.
        println!("RANK {rank} EXITING WITHOUT SAMPLING");
        let _ = std::io::stdout().flush();
        std::process::exit(EXIT_FAIL_RANK);
    }

    let stream = tp.gpu().stream().clone();
    let h_dev = stream.clone_htod(&hidden).or_die(rank, "uploading the hidden states");
    let w_dev = stream.clone_htod(&shard).or_die(rank, "uploading the weight shard");
    let hm = DeviceMatrix { data: h_dev.as_view(), rows: a.b, cols: a.d };
    let wm = DeviceMatrix { data: w_dev.as_view(), rows: layout.rows, cols: a.d };
    let mut out = tp.gpu().alloc_samples(a.b, layout.rows).or_die(rank, "allocating the outputs");
    let params = a.params();

    tp.sample_device(&hm, &wm, &params, None, &mut out).or_die(rank, "sampling");
    // Wait with the rank's deadline, never on the stream directly: a dead peer is then a timeout.
    tp.synchronize().or_die(rank, "waiting for the exchange");
    let tokens = stream.clone_dtoh(&out.tokens()).or_die(rank, "downloading the tokens");

    let list: Vec<String> = tokens.iter().map(u32::to_string).collect();
    println!("RANK {rank} TOKENS {}", list.join(","));
    let _ = std::io::stdout().flush();
    drop(out);
    drop((h_dev, w_dev));
    drop(tp);
    std::process::exit(0)
}

// ---------------------------------------------------------------------------------------------
// Launcher mode.
// ---------------------------------------------------------------------------------------------

/// Why this machine cannot run the example, if it cannot.
fn skip_reason(world: usize) -> Option<String> {
    if !flashsampling::gpu_available() {
        return Some("no CUDA driver or no GPU".into());
    }
    match cudarc::driver::CudaContext::device_count() {
        Ok(n) if (n.max(0) as usize) < world => {
            return Some(format!("{world} ranks need {world} GPUs, {n} visible"));
        }
        Ok(_) => {}
        Err(e) => return Some(format!("cannot count the GPUs: {e}")),
    }
    if !nccl_available() {
        return Some("the NCCL library (libnccl.so) is not on the loader path".into());
    }
    None
}

/// One started rank: the process, its stdout (read by a thread), when it ended.
struct Rank {
    child: Child,
    stdout: Option<JoinHandle<String>>,
    /// Whether it ended (or was killed), and its status when one could be read.
    done: bool,
    status: Option<ExitStatus>,
    killed: bool,
    elapsed: Duration,
}

/// How a rank ended, as the checks see it.
struct Outcome {
    rank: usize,
    /// The exit code (`None`: killed by a signal, ours or another).
    code: Option<i32>,
    killed: bool,
    elapsed: Duration,
    stdout: String,
}

impl Outcome {
    /// The tokens of its `RANK r TOKENS ...` line, if it printed one that parses.
    fn tokens(&self) -> Option<Vec<u32>> {
        let prefix = format!("RANK {} TOKENS ", self.rank);
        let line = self.stdout.lines().find_map(|l| l.strip_prefix(prefix.as_str()))?;
        line.split(',').map(|t| t.trim().parse().ok()).collect()
    }

    /// The message of its `RANK r ERROR ...` line.
    fn error(&self) -> Option<&str> {
        let prefix = format!("RANK {} ERROR ", self.rank);
        self.stdout.lines().find_map(|l| l.strip_prefix(prefix.as_str()))
    }

    fn describe(&self) -> String {
        let how = match (self.code, self.killed) {
            (_, true) => "killed by the launcher (ran too long)".to_string(),
            (Some(c), _) => format!("exit code {c}"),
            (None, _) => "ended by a signal".to_string(),
        };
        format!("rank {}: {how} after {:.2} s", self.rank, self.elapsed.as_secs_f64())
    }
}

/// Starts rank `r` of the group `id`.
fn spawn_rank(a: &Args, r: usize, id: &CommId) -> std::io::Result<Rank> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(["--world", &a.world.to_string()])
        .args(["--batch", &a.b.to_string()])
        .args(["--hidden", &a.d.to_string()])
        .args(["--vocab", &a.v.to_string()])
        .args(["--seed", &a.seed.to_string()])
        .args(["--top-k", &a.top_k.to_string()])
        .args(["--top-p", &a.top_p.to_string()])
        .args(["--timeout-ms", &a.timeout().as_millis().to_string()]);
    if let Some(f) = a.fail_rank {
        cmd.args(["--fail-rank", &f.to_string()]);
    }
    cmd.args(["--rank", &r.to_string()])
        .args(["--id", &id.to_hex()])
        // NVLink SHARP stays off on this project's GPU hosts: set it for every rank explicitly.
        .env("NCCL_NVLS_ENABLE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn()?;
    let mut pipe = child.stdout.take().expect("stdout is piped");
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    });
    Ok(Rank { child, stdout: Some(stdout), done: false, status: None, killed: false, elapsed: Duration::ZERO })
}

/// Waits for every rank, killing (by its process id) any still running at `deadline`.
fn wait_all(ranks: &mut [Rank], start: Instant, deadline: Instant) {
    while ranks.iter().any(|r| !r.done) {
        let past = Instant::now() >= deadline;
        for r in ranks.iter_mut().filter(|r| !r.done) {
            let kill = match r.child.try_wait() {
                Ok(Some(status)) => {
                    r.status = Some(status);
                    false
                }
                Ok(None) => past,
                Err(e) => {
                    eprintln!("launcher: waiting for a rank failed ({e}); killing it");
                    true
                }
            };
            if kill {
                let _ = r.child.kill();
                r.killed = true;
                r.status = r.child.wait().ok();
            }
            if r.status.is_some() || r.killed {
                r.done = true;
                r.elapsed = start.elapsed();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The launcher: starts the ranks, checks what they printed; returns the exit code.
fn launcher(a: &Args) -> i32 {
    if let Some(reason) = skip_reason(a.world) {
        println!("SKIP tp_ranks: {reason}");
        return 0;
    }
    let layouts = match ShardLayout::even(a.v, a.d, a.world, SHARD_PAD) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: splitting the vocabulary: {e}");
            return 2;
        }
    };
    let id = match CommId::new() {
        Ok(id) => id,
        Err(e) => {
            eprintln!("error: making the NCCL id: {e}");
            return 1;
        }
    };
    println!(
        "tp_ranks: {} ranks (one process per GPU), B = {}, D = {}, V = {}, T = {TEMPERATURE}, seed = {}, \
         timeout {} ms (joining: {} ms)",
        a.world,
        a.b,
        a.d,
        a.v,
        a.seed,
        a.timeout().as_millis(),
        a.join_timeout().as_millis()
    );
    for (r, l) in layouts.iter().enumerate() {
        let end = l.offset + l.rows;
        let pad = end.saturating_sub(l.vocab.max(l.offset));
        println!("  rank {r}: GPU {r}, vocab rows [{}, {end}), {pad} padding rows", l.offset);
    }
    if let Some(f) = a.fail_rank {
        println!("  rank {f} will exit right after joining; the others should time out");
    }

    let start = Instant::now();
    let deadline = start + a.join_timeout() + a.timeout() + KILL_GRACE;
    let mut ranks = Vec::with_capacity(a.world);
    for r in 0..a.world {
        match spawn_rank(a, r, &id) {
            Ok(rank) => ranks.push(rank),
            Err(e) => {
                eprintln!("error: starting rank {r}: {e}");
                for started in &mut ranks {
                    let _ = started.child.kill();
                    let _ = started.child.wait();
                }
                return 1;
            }
        }
    }

    // The one-device reference, computed while the ranks run (not needed with --fail-rank).
    let reference = if a.fail_rank.is_none() {
        let params = a.params();
        Some(flashsampling::synthetic::try_lm_head(a.b, a.d, a.v, a.seed).and_then(|(hidden, weight)| {
            CpuBackend::new().sample(Matrix::new(&hidden, a.b, a.d), Matrix::new(&weight, a.v, a.d), &params)
        }))
    } else {
        None
    };

    wait_all(&mut ranks, start, deadline);
    let outcomes: Vec<Outcome> = ranks
        .iter_mut()
        .enumerate()
        .map(|(rank, r)| Outcome {
            rank,
            code: r.status.and_then(|s| s.code()),
            killed: r.killed,
            elapsed: r.elapsed,
            stdout: r.stdout.take().and_then(|h| h.join().ok()).unwrap_or_default(),
        })
        .collect();
    for o in &outcomes {
        println!("{}", o.describe());
        for line in o.stdout.lines() {
            println!("  {line}");
        }
    }

    let verdict = match (a.fail_rank, reference) {
        (Some(f), _) => check_failure(&outcomes, f, a.timeout()),
        (None, Some(reference)) => check_tokens(&outcomes, a, reference),
        (None, None) => unreachable!("the reference is computed without --fail-rank"),
    };
    match verdict {
        Ok(msg) => {
            println!("OK: {msg}");
            0
        }
        Err(msg) => {
            println!("FAILED: {msg}");
            1
        }
    }
}

/// Every rank sampled, all printed the same tokens, and they are the one-device reference's.
fn check_tokens(outcomes: &[Outcome], a: &Args, reference: flashsampling::Result<Vec<u32>>) -> Result<String, String> {
    let reference = reference.map_err(|e| format!("the CPU reference failed: {e}"))?;
    let mut problems = Vec::new();
    let mut tokens: Vec<(usize, Vec<u32>)> = Vec::new();
    for o in outcomes {
        match (o.code, o.tokens()) {
            (Some(0), Some(t)) => tokens.push((o.rank, t)),
            (Some(0), None) => problems.push(format!("rank {} exited 0 without a TOKENS line", o.rank)),
            _ => problems.push(format!("{} ({})", o.describe(), o.error().unwrap_or("no error line"))),
        }
    }
    if let Some((first_rank, first)) = tokens.first() {
        for (r, t) in &tokens[1..] {
            if t != first {
                problems.push(format!("rank {r} printed other tokens than rank {first_rank}: {t:?} vs {first:?}"));
            }
        }
        if *first != reference {
            let rows: Vec<String> = (0..reference.len().max(first.len()))
                .filter(|&i| first.get(i) != reference.get(i))
                .map(|i| format!("row {i}: ranks {:?}, reference {:?}", first.get(i), reference.get(i)))
                .collect();
            problems.push(format!(
                "the ranks' tokens differ from the one-device CPU reference in {} of {} rows ({})",
                rows.len(),
                reference.len(),
                rows.join("; ")
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("\n        "));
    }
    Ok(format!(
        "{} ranks, B={}, D={}, V={}, tokens identical to the one-device reference",
        outcomes.len(),
        a.b,
        a.d,
        a.v
    ))
}

/// Rank `f` left as asked (code 3) and every other rank returned a timeout (code 2) in time.
fn check_failure(outcomes: &[Outcome], f: usize, timeout: Duration) -> Result<String, String> {
    let mut problems = Vec::new();
    for o in outcomes {
        if o.rank == f {
            if o.code != Some(EXIT_FAIL_RANK) {
                problems.push(format!(
                    "{}: expected it to exit with code {EXIT_FAIL_RANK} after joining ({})",
                    o.describe(),
                    o.error().unwrap_or("no error line")
                ));
            }
        } else if o.code != Some(EXIT_TIMEOUT) {
            let what = match o.code {
                Some(0) => "sampled although a rank was missing".to_string(),
                _ => o.error().unwrap_or("no error line").to_string(),
            };
            problems.push(format!("{}: expected a timeout error (exit code {EXIT_TIMEOUT}): {what}", o.describe()));
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("\n        "));
    }
    let slowest = outcomes.iter().filter(|o| o.rank != f).map(|o| o.elapsed).max().unwrap_or_default();
    println!(
        "the other ranks returned within {:.2} s of the start (sampling timeout {} ms)",
        slowest.as_secs_f64(),
        timeout.as_millis()
    );
    Ok(format!("rank {f} failed, the others returned a timeout error instead of hanging"))
}
