//! Build check: the generated PTX modules assemble with `ptxas -arch=sm_90 -v` and `-arch=sm_90a` (from the PyPI wheel
//! `nvidia-cuda-nvcc-cu12`, installed by `./x.sh test` into `.tools/`), within spill budgets: the
//! plain fused kernels spill at most [`PLAIN_SPILL_BUDGET`] bytes (the `wgmma` N = 64 kernels sit at
//! the 168-register ceiling of one 384-thread block per SM, and the per-row controls cost them a few
//! bytes of spill: up to 192 bytes since the screened noise, judged by the same-call A/Bs of docs/findings), the log-probability
//! kernels at most [`LOGPROBS_SPILL_BUDGET`] (their lanes' log-masses live in shared memory: about
//! the plain kernels' spills), the truncation kernels at most [`TRUNCATE_SPILL_BUDGET`], the truncation
//! step at most [`TRUNCATE_STEP_SPILL_BUDGET`], the reduction and the fallback none (up to 64 bytes).
//! Prints the register / shared memory / spill lines.
//!
//! The library's build already assembled the modules it embeds with `ptxas -v` when it found a ptxas
//! (its cubins); the test reads those reports (`flashsampling::PTXAS_REPORT_PATHS`) and assembles a
//! module itself only where there is none (a build without ptxas, `FLASHSAMPLING_CUBIN=0`, or the
//! binary moved to another machine). ptxas is looked up in `$FLASHSAMPLING_PTXAS`,
//! `.tools/nvcc/nvidia/cuda_nvcc/bin/ptxas`, then `PATH`. Without a report or a ptxas the test prints
//! a SKIP line, or fails when `FLASHSAMPLING_REQUIRE_PTXAS=1`.

mod common;

use std::path::PathBuf;
use std::process::Command;

fn find_ptxas() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("FLASHSAMPLING_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".tools/nvcc/nvidia/cuda_nvcc/bin/ptxas");
    if local.is_file() {
        return Some(local);
    }
    Command::new("ptxas").arg("--version").output().ok().filter(|o| o.status.success()).map(|_| PathBuf::from("ptxas"))
}

/// The build's ptxas report at `path`, when it assembled this module (a non-empty file).
fn build_report(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().filter(|log| log.contains("Compiling entry function"))
}

#[test]
fn ptx_assembles_for_sm_90_within_spill_budgets() {
    let [portable, hopper] = flashsampling::PTXAS_REPORT_PATHS;
    let (portable, hopper) = (build_report(portable), build_report(hopper));
    let ptxas = find_ptxas();
    if ptxas.is_none() && (portable.is_none() || hopper.is_none()) {
        if std::env::var("FLASHSAMPLING_REQUIRE_PTXAS").is_ok_and(|v| v == "1") {
            panic!("FLASHSAMPLING_REQUIRE_PTXAS=1 but no ptxas found (run ./x.sh test, which installs it)");
        }
        common::visible("SKIP ptx_assembles_for_sm_90_within_spill_budgets: no ptxas (./x.sh test installs it)");
        return;
    }
    let mut summary = Vec::new();
    for (report, ptx, arch) in
        [(portable, &flashsampling::PTX, flashsampling::PTX_SM), (hopper, &flashsampling::PTX_SM90A, "sm_90a")]
    {
        let log = match report {
            Some(log) => {
                common::visible(&format!("ptxas ({arch}): the library build's report"));
                log
            }
            None => assemble(ptxas.as_ref().expect("checked above"), &ptx.text().unwrap(), arch),
        };
        summary.extend(check_report(&log, arch));
    }
    for s in &summary {
        common::visible(s);
    }
    for s in summary.iter().filter(|s| s.contains("spill")) {
        let bytes = spill_bytes(s);
        let budget = if s.contains("reduce_candidates") || s.contains("expand_rows") {
            0
        } else if s.contains("truncate_rows") {
            TRUNCATE_STEP_SPILL_BUDGET
        } else if s.contains("fallback_") {
            64
        } else if s.contains("_tk ") {
            TRUNCATE_SPILL_BUDGET
        } else if s.contains("_lp ") {
            LOGPROBS_SPILL_BUDGET
        } else if s.contains("fused_sample") || s.contains("gemm_logits_sample") {
            PLAIN_SPILL_BUDGET
        } else {
            continue;
        };
        assert!(bytes <= budget, "register spills over the budget of {budget} bytes: {s}");
    }
    for variant in flashsampling::kernels::config::FUSED_VARIANTS {
        assert!(summary.iter().any(|s| s.contains(variant.entry)), "no {} in the ptxas report", variant.entry);
    }
}

/// Spill stores + loads (bytes) a plain fused kernel may have: 192 in `tmat_n64` and 152 in `tma_n64x2`
/// since the screened noise (a few words around each pass's row parameters; 0 and 100 before the pruned
/// noise). `tmat_n64`'s calls got 3% faster with them (B = 65–128, the same-call A/B of docs/findings/26);
/// `tma_n64x2` runs only for V % 16 != 0 and was not in that A/B.
const PLAIN_SPILL_BUDGET: u32 = 224;
/// Spill stores + loads (bytes) a log-probability kernel may have: the `wgmma` lanes' row masses
/// live in shared memory (`FusedVariant::lane_state_bytes`; 368 bytes in `tma_n64x2_lp`, which
/// spilled 5.9 KiB with them in registers, docs/findings/18).
const LOGPROBS_SPILL_BUDGET: u32 = 512;
/// Spill stores + loads (bytes) a truncation kernel may have: a two-entry top list per column beside
/// the N = 64 accumulators, or eight-entry lists of two rows beside the hidden-as-A kernels' 128
/// (the log-masses in shared memory; its cost is in BENCHMARKS.md): 1.7 KiB in `tmat_n64_tk`; the
/// weight-as-A N = 64 kernels 0.9–1.1 KiB since their consumers take the producer's registers
/// (`setmaxnreg`, 5.3–5.5 KiB before, docs/findings/27).
const TRUNCATE_SPILL_BUDGET: u32 = 2048;

/// Spill stores + loads (bytes) of the truncation step (`truncate_rows`, 64 registers a thread at 512
/// threads): 496 since its own reduction, the selection and warp 0's walk joined it (24 before), which
/// the same-call A/B of docs/findings/24 judged (1.7–4% faster truncating calls with them).
const TRUNCATE_STEP_SPILL_BUDGET: u32 = 512;

/// Spill stores + spill loads of one ptxas summary line.
fn spill_bytes(line: &str) -> u32 {
    let num = |key: &str| -> u32 {
        let at = line.find(key).unwrap_or_else(|| panic!("no {key:?} in {line}"));
        line[..at].trim_end().rsplit(' ').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
    };
    num("bytes spill stores") + num("bytes spill loads")
}

/// Assembles one PTX module for `arch` with `-v`; returns ptxas's report. Panics if ptxas fails.
fn assemble(ptxas: &PathBuf, ptx_text: &str, arch: &str) -> String {
    let dir = std::env::temp_dir().join(format!("flashsampling-ptxas-{}-{arch}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ptx = dir.join("flashsampling.ptx");
    std::fs::write(&ptx, ptx_text).unwrap();
    let out = Command::new(ptxas)
        .args(["-arch", arch, "-v"])
        .arg(&ptx)
        .arg("-o")
        .arg(dir.join("flashsampling.cubin"))
        .output()
        .expect("run ptxas");
    let log = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "ptxas ({arch}) failed:\n{log}");
    log
}

/// Checks a ptxas `-v` report of one module for `arch` (no warning, no serialized `wgmma`, no ignored
/// `setmaxnreg`); returns its per-entry summary lines (registers, shared memory, stack, spills).
fn check_report(log: &str, arch: &str) -> Vec<String> {
    assert!(!log.contains("warning"), "ptxas ({arch}) warned:\n{log}");
    // C7511: "Potential Performance Loss: wgmma.mma_async instructions are serialized due to …" (an
    // info line, not a warning): each MMA then waits for the one before, and its accumulators may
    // live in local memory (an N = 128 weight-as-A experiment ran 15–22× slower with it,
    // docs/findings/35).
    assert!(!log.contains("C7511"), "ptxas ({arch}) serialized wgmma instructions:\n{log}");
    // C7508: "'setmaxnreg' ignored; unable to determine register count at entry" (an info line): the
    // kernels that move registers between warpgroups would then run within the even share.
    assert!(!log.contains("C7508"), "ptxas ({arch}) ignored a setmaxnreg (an entry without `.minnctapersm 1`):\n{log}");
    // "Function properties for F" precedes F's stack/spill line; callees of an entry get their own.
    let mut entry = String::new();
    let mut props_of_entry = false;
    let mut summary = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            entry = rest.split('\'').next().unwrap_or("").to_string();
        } else if let Some(name) = line.split("Function properties for ").nth(1) {
            props_of_entry = name.trim() == entry;
        } else if (line.contains("spill stores") && props_of_entry) || (line.contains("Used ") && !entry.is_empty()) {
            summary.push(format!("ptxas {entry} ({arch}): {}", line.trim().trim_start_matches("ptxas info    : ")));
        }
    }
    summary
}
