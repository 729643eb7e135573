//! Embeds the kernel crate's PTX modules: the prebuilt ones shipped in `ptx/` (xz-compressed, decoded
//! here by the pure-Rust `lzma-rs`; default: any stable Rust builds the crate), or, with the cargo feature `build-ptx` (for researchers changing the
//! kernel; this repository's tests and benches turn it on), freshly built from `kernels/`.
//!
//! Building from source: a nested `cargo rustc` of `flashsampling-kernels` for `nvptx64-nvidia-cuda` with
//! `-Zbuild-std=core` (clean environment, its own target directory), linked by `kernels/link-ptx.sh`
//! with the toolchain's llvm-tools (`llvm-link`, `opt`, `llc`). Which entry point goes into which
//! module, and which entry gets a `.maxntid` bound, comes from the variant table
//! (`config::entry_points`), passed to the link step as `FS_MODULES` / `FS_MAXNTID`. The modules land
//! in `$OUT_DIR/<stem>.ptx` (`config::Module::stem`) and their paths in `FLASHSAMPLING_PTX_PATH`,
//! `FLASHSAMPLING_PTX_SM90A_PATH` and `FLASHSAMPLING_PTX_TEST_PATH`. Set `FLASHSAMPLING_SM` to build
//! the portable and test modules for another architecture (default `sm_90`).
//!
//! Cubins: when a `ptxas` is at hand (`FLASHSAMPLING_PTXAS`, this repository's `.tools/`, or `PATH`;
//! `FLASHSAMPLING_CUBIN=0` turns it off), the Hopper module is also assembled for sm_90a and the
//! portable one for sm_90, into `$OUT_DIR/<stem>.cubin` (`FLASHSAMPLING_CUBIN_PATH`,
//! `FLASHSAMPLING_CUBIN_SM90A_PATH`; empty files without `ptxas`), so that a compute capability 9.0
//! GPU loads machine code instead of waiting for the driver's JIT of the PTX (about two minutes for
//! the sm_90a module on a fresh H200).

use std::env;
use std::path::PathBuf;
use std::process::Command;

use flashsampling_kernels::config::{Module, entry_points};

fn fail(msg: &str) -> ! {
    eprintln!("\nflashsampling build: {msg}\n");
    panic!("flashsampling build: {msg}");
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    println!("cargo:rerun-if-env-changed=FLASHSAMPLING_SM");
    let ptx = if env::var_os("CARGO_FEATURE_BUILD_PTX").is_none() {
        use_prebuilt(&manifest.join("ptx"))
    } else {
        build_from_source(&manifest)
    };
    emit_cubins(&manifest, &ptx);
}

/// Assembles the Hopper module for sm_90a and (when built for sm_90) the portable one for sm_90 with
/// the first `ptxas` found, into `$OUT_DIR/<stem>.cubin`; an empty file where there is no `ptxas`,
/// it is turned off, or it fails (a build warning then: the crate loads the PTX instead). ptxas runs
/// with `-v`: its report (registers, shared memory, spills per entry) goes to
/// `$OUT_DIR/<stem>.ptxas.txt` (`FLASHSAMPLING_PTXAS_REPORT_PATH`, `…_SM90A_PATH`; empty when not
/// assembled), which `tests/ptxas.rs` reads instead of assembling the modules again, and its
/// warnings are shown as build warnings.
fn emit_cubins(manifest: &std::path::Path, ptx: &[(Module, String, PathBuf)]) {
    println!("cargo:rerun-if-env-changed=FLASHSAMPLING_PTXAS");
    println!("cargo:rerun-if-env-changed=FLASHSAMPLING_CUBIN");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let off = env::var("FLASHSAMPLING_CUBIN").is_ok_and(|v| v == "0");
    let ptxas = if off { None } else { find_ptxas(manifest) };
    for (module, arch, var, report_var) in [
        (Module::Portable, "sm_90", "FLASHSAMPLING_CUBIN_PATH", "FLASHSAMPLING_PTXAS_REPORT_PATH"),
        (Module::Hopper, "sm_90a", "FLASHSAMPLING_CUBIN_SM90A_PATH", "FLASHSAMPLING_PTXAS_REPORT_SM90A_PATH"),
    ] {
        let (_, _, ptx_path) = ptx.iter().find(|(m, _, _)| *m == module).unwrap();
        let dest = out_dir.join(format!("{}.cubin", module.stem()));
        let report = out_dir.join(format!("{}.ptxas.txt", module.stem()));
        let portable_sm = env::var("FLASHSAMPLING_SM").unwrap_or_else(|_| PREBUILT_SM.into());
        let wanted = module == Module::Hopper || portable_sm == arch;
        let mut log = String::new();
        let built = match (&ptxas, wanted) {
            (Some(ptxas), true) => {
                let out = Command::new(ptxas)
                    .arg(format!("-arch={arch}"))
                    .arg("-v")
                    .arg(ptx_path)
                    .arg("-o")
                    .arg(&dest)
                    .output();
                match out {
                    Ok(o) if o.status.success() => {
                        log = String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
                        for line in log.lines().filter(|l| l.contains("warning")) {
                            println!("cargo:warning=ptxas ({arch}): {line}");
                        }
                        true
                    }
                    other => {
                        let why =
                            other.map_or_else(|e| e.to_string(), |o| String::from_utf8_lossy(&o.stderr).into_owned());
                        println!(
                            "cargo:warning=ptxas {} for {arch} failed ({}): the PTX is loaded instead",
                            ptx_path.display(),
                            why.lines().next().unwrap_or("")
                        );
                        false
                    }
                }
            }
            _ => false,
        };
        if !built {
            std::fs::write(&dest, b"").unwrap();
        }
        std::fs::write(&report, log).unwrap();
        println!("cargo:rustc-env={var}={}", dest.display());
        println!("cargo:rustc-env={report_var}={}", report.display());
    }
}

/// `FLASHSAMPLING_PTXAS`, this repository's `.tools/nvcc/nvidia/cuda_nvcc/bin/ptxas` (what
/// `./x.sh test` installs), or `ptxas` on `PATH`.
fn find_ptxas(manifest: &std::path::Path) -> Option<PathBuf> {
    if let Ok(p) = env::var("FLASHSAMPLING_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let tools = manifest.parent()?.join(".tools/nvcc/nvidia/cuda_nvcc/bin/ptxas");
    if tools.is_file() {
        return Some(tools);
    }
    let on_path = Command::new("ptxas").arg("--version").output().is_ok_and(|o| o.status.success());
    on_path.then(|| PathBuf::from("ptxas"))
}

/// The PTX shipped with the crate (`ptx/<stem>.ptx.xz`, built for sm_90 by `./x.sh ptx` from the
/// kernel sources and xz-compressed; the tests check that a fresh build reproduces them byte for
/// byte), decompressed into `$OUT_DIR/<stem>.ptx`.
fn use_prebuilt(dir: &std::path::Path) -> Vec<(Module, String, PathBuf)> {
    if env::var("FLASHSAMPLING_SM").is_ok_and(|sm| sm != PREBUILT_SM) {
        fail(&format!(
            "FLASHSAMPLING_SM asks for another architecture than the prebuilt PTX ({PREBUILT_SM}): \
             enable the `build-ptx` feature to build the kernels from source"
        ));
    }
    println!("cargo:rerun-if-changed={}", dir.display());
    let ptx: Vec<(Module, String)> = Module::ALL
        .iter()
        .map(|&m| {
            let path = dir.join(format!("{}.ptx.xz", m.stem()));
            let packed =
                std::fs::read(&path).unwrap_or_else(|e| fail(&format!("no prebuilt PTX at {}: {e}", path.display())));
            let mut text = Vec::new();
            lzma_rs::xz_decompress(&mut &packed[..], &mut text)
                .unwrap_or_else(|e| fail(&format!("{}: not a valid xz file: {e:?}", path.display())));
            let text =
                String::from_utf8(text).unwrap_or_else(|_| fail(&format!("{}: the PTX is not UTF-8", path.display())));
            (m, text)
        })
        .collect();
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    check_and_emit(&ptx, &out_dir, PREBUILT_SM, true)
}

/// The architecture of the prebuilt portable and test modules.
const PREBUILT_SM: &str = "sm_90";

fn build_from_source(manifest: &std::path::Path) -> Vec<(Module, String, PathBuf)> {
    let root = manifest.parent().unwrap().to_path_buf();
    let kernels = root.join("kernels");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed={}", kernels.join("src").display());
    println!("cargo:rerun-if-changed={}", kernels.join("Cargo.toml").display());
    println!("cargo:rerun-if-changed={}", kernels.join("link-ptx.sh").display());
    let sm = env::var("FLASHSAMPLING_SM").unwrap_or_else(|_| "sm_90".into());

    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .unwrap_or_else(|| fail(&format!("cannot run `{rustc} --print sysroot`")));
    let version = Command::new(&rustc).arg("-V").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let version = version.unwrap_or_default();
    if !version.contains("nightly") {
        fail(&format!(
            "the PTX build needs the pinned nightly toolchain (found `{}`). Run `rustup toolchain install` \
             in the repository root (it reads rust-toolchain.toml).",
            version.trim()
        ));
    }
    if !sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        fail(
            "the toolchain component `rust-src` is missing (needed by -Zbuild-std=core). Run `rustup toolchain install` in the repository root, or `rustup component add rust-src`.",
        );
    }
    let host = env::var("HOST").unwrap();
    let llvm_bin = sysroot.join("lib/rustlib").join(&host).join("bin");
    for tool in ["llvm-link", "opt", "llc", "llvm-ar"] {
        if !llvm_bin.join(tool).is_file() {
            fail(&format!(
                "`{tool}` not found in {}: the toolchain component `llvm-tools` is missing. Run `rustup toolchain install` in the repository root, or `rustup component add llvm-tools`.",
                llvm_bin.display()
            ));
        }
    }

    // The link step is outside cargo's fingerprint of the nested build: hand its hash over as an
    // (ignored) linker argument, so editing the script relinks the PTX.
    let script = std::fs::read(kernels.join("link-ptx.sh")).unwrap_or_else(|e| fail(&format!("link-ptx.sh: {e}")));
    let script_hash =
        script.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));

    let arch = |m: Module| if m == Module::Hopper { "sm_90a" } else { "portable" };
    let modules: Vec<String> = Module::ALL
        .iter()
        .map(|&m| {
            let entries: Vec<&str> = entry_points().filter(|e| e.1 == m).map(|e| e.0).collect();
            format!("{}:{}:{}", m.stem(), arch(m), entries.join(","))
        })
        .collect();
    // `entry=threads`, or `entry=threads+` for a pinned bound (`.minnctapersm 1` too).
    let bounds: Vec<String> = entry_points()
        .filter_map(|(e, _, b)| b.map(|b| format!("{e}={}{}", b.threads, if b.pinned { "+" } else { "" })))
        .collect();

    let target_dir = out_dir.join("ptx-target");
    let mut cmd = Command::new(&cargo);
    // A clean environment: nothing of the outer build (profile, target, flags, jobserver) leaks in.
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        let keep = key == "CARGO_HOME" || key == "CARGO_NET_OFFLINE" || key == "CARGO_REGISTRIES_CRATES_IO_PROTOCOL";
        if !keep
            && (key.starts_with("CARGO")
                || key.starts_with("RUSTC")
                || key.starts_with("RUSTDOC")
                || key == "RUSTFLAGS"
                || key.starts_with("DEP_")
                || key == "TARGET"
                || key == "HOST"
                || key == "OUT_DIR"
                || key == "OPT_LEVEL"
                || key == "PROFILE"
                || key == "DEBUG"
                || key == "NUM_JOBS"
                || key == "MAKEFLAGS"
                || key == "MFLAGS"
                || key == "CARGO_MAKEFLAGS")
        {
            cmd.env_remove(&key);
        }
    }
    cmd.current_dir(&root)
        .env("FS_LLVM_BIN", &llvm_bin)
        .env("FS_SM", &sm)
        .env("FS_MODULES", modules.join(";"))
        .env("FS_MAXNTID", bounds.join(","))
        .args(["rustc", "--manifest-path"])
        .arg(kernels.join("Cargo.toml"))
        .args(["--lib", "--crate-type", "cdylib", "--release", "--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core"])
        .arg("--target-dir")
        .arg(&target_dir)
        .args(["--config", "profile.release.codegen-units=1", "--", "-C"])
        .arg(format!("target-cpu={sm}"))
        .arg("-C")
        .arg(format!("linker={}", kernels.join("link-ptx.sh").display()))
        .arg(format!("-Clink-arg=--fs-link-script={script_hash:016x}"));
    let out = cmd.output().unwrap_or_else(|e| fail(&format!("cannot run `{cargo}`: {e}")));
    let log = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        eprintln!("{log}");
        fail("the nested PTX build of flashsampling-kernels failed (see its output above)");
    }
    // Its warnings (the device code's), which cargo would otherwise hide: each with its location.
    let lines: Vec<&str> = log.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("warning") && !line.contains("generated") {
            // Its location: the `-->` line before the next diagnostic, if any.
            let next = lines[i + 1..].iter().take_while(|l| !l.starts_with("warning") && !l.starts_with("error"));
            let at = next.clone().find(|l| l.trim_start().starts_with("-->")).map_or("", |l| l.trim());
            println!("cargo:warning=device code (nvptx): {line} {at}");
        }
    }
    // The link step writes every module next to rustc's output in deps/ (cargo copies up only the
    // first, which rustc names after the crate).
    let read = |module: Module| {
        let name =
            if module == Module::Portable { "flashsampling_kernels".to_string() } else { module.stem().to_string() };
        let built = target_dir.join("nvptx64-nvidia-cuda/release/deps").join(format!("{name}.ptx"));
        std::fs::read_to_string(&built).unwrap_or_else(|e| fail(&format!("no PTX at {}: {e}", built.display())))
    };
    let ptx: Vec<(Module, String)> = Module::ALL.iter().map(|&m| (m, read(m))).collect();
    check_and_emit(&ptx, &out_dir, &sm, true)
}

/// Checks that every entry point is in its module with its thread bound, and hands the modules to
/// the crate: written to `dir` when `write`, their paths in `FLASHSAMPLING_PTX_PATH`,
/// `FLASHSAMPLING_PTX_SM90A_PATH`, `FLASHSAMPLING_PTX_TEST_PATH`, and the portable architecture in
/// `FLASHSAMPLING_PTX_SM`.
fn check_and_emit(
    ptx: &[(Module, String)],
    dir: &std::path::Path,
    sm: &str,
    write: bool,
) -> Vec<(Module, String, PathBuf)> {
    let module_of = |m: Module| &ptx.iter().find(|(n, _)| *n == m).unwrap().1;
    for (entry, module, bound) in entry_points() {
        let text = module_of(module);
        let Some(at) = text.find(&format!(".entry {entry}(")) else {
            fail(&format!("the {} PTX module lacks the entry point `{entry}`", module.stem()))
        };
        // Entries that run one block per multiprocessor carry their thread bound (the link step), and
        // those that move registers between warpgroups `.minnctapersm 1` (else ptxas ignores
        // `setmaxnreg`).
        if let Some(bound) = bound {
            let head = &text[at..(at + 600).min(text.len())];
            let head = head.split('{').next().unwrap_or("");
            let want = format!(".maxntid {}, 1, 1", bound.threads);
            if !head.contains(&want) {
                fail(&format!("the PTX entry `{entry}` lacks `{want}` (kernels/link-ptx.sh)"));
            }
            if head.contains(".minnctapersm 1") != bound.pinned {
                fail(&format!(
                    "the PTX entry `{entry}`: `.minnctapersm 1` expected {} (kernels/link-ptx.sh)",
                    bound.pinned
                ));
            }
        }
    }
    let mut paths = Vec::new();
    for (module, text) in ptx {
        let dest = dir.join(format!("{}.ptx", module.stem()));
        if write {
            std::fs::write(&dest, text).unwrap();
        }
        let var = match module {
            Module::Portable => "FLASHSAMPLING_PTX_PATH",
            Module::Hopper => "FLASHSAMPLING_PTX_SM90A_PATH",
            Module::Test => "FLASHSAMPLING_PTX_TEST_PATH",
        };
        println!("cargo:rustc-env={var}={}", dest.display());
        paths.push((*module, text.clone(), dest));
    }
    println!("cargo:rustc-env=FLASHSAMPLING_PTX_SM={sm}");
    paths
}
