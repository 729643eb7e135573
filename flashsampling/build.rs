//! Embeds the kernel crate's device code: the prebuilt modules shipped in `ptx/` (xz-compressed,
//! decoded here by the pure-Rust `lzma-rs`; default: any stable Rust builds the crate, and nothing is
//! assembled), or, with the cargo feature `build-ptx` (for researchers changing the kernel; this
//! repository's tests and benches turn it on), freshly built from `kernels/`.
//!
//! What ships (`ptx/`, refreshed by `./x.sh ptx`; the test `ptx_prebuilt` proves it is what the sources
//! build): the portable and test modules as PTX for sm_90 (`<stem>.ptx.xz`), and both fused modules as
//! cubins of the pinned ptxas (`<stem>.cubin.xz`: the portable one for sm_90, the Hopper one for
//! sm_90a), so that a compute capability 9.0 GPU loads machine code instead of waiting for the driver's
//! JIT (about two minutes for the sm_90a module). The Hopper PTX is not shipped (it loads on compute
//! capability 9.0 only, where its cubin serves); `ptx/MANIFEST` records its length and digest and the
//! ptxas that assembled the cubins.
//!
//! Building from source: a nested `cargo rustc` of `flashsampling-kernels` for `nvptx64-nvidia-cuda` with
//! `-Zbuild-std=core` (clean environment, its own target directory), linked by `kernels/link-ptx.sh`
//! with the toolchain's llvm-tools (`llvm-link`, `opt`, `llc`). Which entry point goes into which
//! module, and which entry gets a `.maxntid` bound, comes from the variant table
//! (`config::entry_points`), passed to the link step as `FS_MODULES` / `FS_MAXNTID`. The modules land
//! in `$OUT_DIR/<stem>.ptx` (`config::Module::stem`). Set `FLASHSAMPLING_SM` to build the portable and
//! test modules for another architecture (default `sm_90`). When a `ptxas` is at hand
//! (`FLASHSAMPLING_PTXAS`, this repository's `.tools/`, or `PATH`; `FLASHSAMPLING_CUBIN=0` turns it
//! off) the build assembles the cubins itself, once per module, with `-v`: its report (registers,
//! shared memory, spills per entry) goes to `$OUT_DIR/<stem>.ptxas.txt`
//! (`FLASHSAMPLING_PTXAS_REPORT_PATH`, `…_SM90A_PATH`), which `tests/ptxas.rs` reads. Without a ptxas,
//! a build whose PTX is the shipped PTX embeds the shipped cubins (they are its machine code), so a
//! fresh machine's `./x.sh sample` needs neither ptxas nor the driver's JIT.
//!
//! Embedding: every module is zstd-compressed (`ruzstd`, its fastest level) into
//! `$OUT_DIR/<file>.zst` and its path handed to the crate as `FLASHSAMPLING_EMBED_<NAME>` (an empty
//! file for a module this build does not have), which `src/modules.rs` includes as `static` bytes and
//! decodes when a GPU backend loads it: the library's metadata and every binary that links it carry
//! a few MB instead of 36.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use flashsampling_kernels::config::{Module, entry_points_for, sm_number};

fn fail(msg: &str) -> ! {
    eprintln!("\nflashsampling build: {msg}\n");
    panic!("flashsampling build: {msg}");
}

/// The architecture of the prebuilt portable and test modules.
const PREBUILT_SM: &str = "sm_90";

/// The device code one build embeds (each empty when this build has none).
#[derive(Default)]
struct Embedded {
    ptx: Vec<u8>,
    ptx_sm90a: Vec<u8>,
    ptx_test: Vec<u8>,
    cubin: Vec<u8>,
    cubin_sm90a: Vec<u8>,
    /// `ptxas --version`'s last line for the ptxas that made the cubins ("" without cubins).
    ptxas_version: String,
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-env-changed=FLASHSAMPLING_SM");
    println!("cargo:rerun-if-env-changed=FLASHSAMPLING_PTXAS");
    println!("cargo:rerun-if-env-changed=FLASHSAMPLING_CUBIN");
    let report = |m: Module| out_dir.join(format!("{}.ptxas.txt", m.stem()));
    for m in [Module::Portable, Module::Hopper] {
        let _ = std::fs::remove_file(report(m)); // this build's ptxas writes them again
    }
    let embedded = if env::var_os("CARGO_FEATURE_BUILD_PTX").is_none() {
        println!("cargo:rustc-env=FLASHSAMPLING_CUBINS_ASSEMBLED=0");
        println!("cargo:rustc-env=FLASHSAMPLING_PTX_SM90A_DIGEST="); // no Hopper PTX here
        use_prebuilt(&manifest.join("ptx"), &out_dir)
    } else {
        embed_from_source(&manifest, &out_dir)
    };
    for (module, var) in [
        (Module::Portable, "FLASHSAMPLING_PTXAS_REPORT_PATH"),
        (Module::Hopper, "FLASHSAMPLING_PTXAS_REPORT_SM90A_PATH"),
    ] {
        if !report(module).exists() {
            std::fs::write(report(module), "").unwrap();
        }
        println!("cargo:rustc-env={var}={}", report(module).display());
    }
    println!("cargo:rustc-env=FLASHSAMPLING_PTXAS_VERSION={}", embedded.ptxas_version);
    for (name, bytes, var) in [
        ("flashsampling.ptx", &embedded.ptx, "FLASHSAMPLING_EMBED_PTX"),
        ("flashsampling_sm90a.ptx", &embedded.ptx_sm90a, "FLASHSAMPLING_EMBED_PTX_SM90A"),
        ("flashsampling_test.ptx", &embedded.ptx_test, "FLASHSAMPLING_EMBED_PTX_TEST"),
        ("flashsampling.cubin", &embedded.cubin, "FLASHSAMPLING_EMBED_CUBIN"),
        ("flashsampling_sm90a.cubin", &embedded.cubin_sm90a, "FLASHSAMPLING_EMBED_CUBIN_SM90A"),
    ] {
        let dest = out_dir.join(format!("{name}.zst"));
        let packed = if bytes.is_empty() {
            Vec::new()
        } else {
            ruzstd::encoding::compress_to_vec(&bytes[..], ruzstd::encoding::CompressionLevel::Fastest)
        };
        std::fs::write(&dest, packed).unwrap();
        println!("cargo:rustc-env={var}={}", dest.display());
    }
}

/// The modules built from `kernels/` (feature `build-ptx`): written to `$OUT_DIR/<stem>.ptx`, the
/// fused ones assembled by the first ptxas found (both at once: the Hopper one takes most of the
/// time); without a ptxas that works, where the sources build exactly the shipped PTX, the shipped
/// cubins (this PTX's machine code, the pinned ptxas's), so a fresh machine's `./x.sh sample` needs
/// no JIT on a GPU. Also hands the crate the Hopper PTX's digest line (`ptx/MANIFEST`'s format),
/// which `tests/ptx_prebuilt.rs` compares with the shipped one.
fn embed_from_source(manifest: &Path, out_dir: &Path) -> Embedded {
    let ptx = build_from_source(manifest);
    let sm = env::var("FLASHSAMPLING_SM").unwrap_or_else(|_| PREBUILT_SM.into());
    check_entries(&ptx, &sm);
    for (module, text) in &ptx {
        std::fs::write(out_dir.join(format!("{}.ptx", module.stem())), text).unwrap();
    }
    println!("cargo:rustc-env=FLASHSAMPLING_PTX_SM={sm}");
    let [portable, hopper, test] = Module::ALL.map(|m| ptx.iter().find(|(n, _)| *n == m).unwrap().1.as_bytes());
    let digest = hopper_digest_line(hopper);
    println!("cargo:rustc-env=FLASHSAMPLING_PTX_SM90A_DIGEST={digest}");
    let off = env::var("FLASHSAMPLING_CUBIN").is_ok_and(|v| v == "0");
    let ptxas = if off { None } else { find_ptxas(manifest) };
    let version = ptxas.as_deref().map(ptxas_version).unwrap_or_default();
    let (cubin, cubin_sm90a) = match &ptxas {
        Some(ptxas) => std::thread::scope(|s| {
            let hopper = s.spawn(|| assemble(ptxas, &version, Module::Hopper, "sm_90a", out_dir));
            // The portable cubin only where the portable PTX is for sm_90 (what the GPUs that load
            // cubins run).
            let portable =
                if sm == "sm_90" { assemble(ptxas, &version, Module::Portable, "sm_90", out_dir) } else { Vec::new() };
            (portable, hopper.join().unwrap())
        }),
        None => (Vec::new(), Vec::new()),
    };
    let assembled = !cubin_sm90a.is_empty();
    println!("cargo:rustc-env=FLASHSAMPLING_CUBINS_ASSEMBLED={}", assembled as u8);
    let shipped =
        if assembled || off || sm != PREBUILT_SM { None } else { shipped_cubins_for(manifest, portable, &digest) };
    if !assembled && shipped.is_none() && ptxas.is_none() && !off {
        println!(
            "cargo:warning=no ptxas and the kernels differ from the shipped ones: a GPU loads them as PTX \
             through the driver's JIT (minutes on its first run; ./x.sh test installs ptxas)"
        );
    }
    let (cubin, cubin_sm90a, ptxas_version) = match shipped {
        Some(shipped) => shipped,
        None => (cubin, cubin_sm90a, if assembled { version } else { String::new() }),
    };
    Embedded {
        ptx: portable.to_vec(),
        ptx_sm90a: hopper.to_vec(),
        ptx_test: test.to_vec(),
        cubin,
        cubin_sm90a,
        ptxas_version,
    }
}

/// The shipped cubins and the ptxas that made them, when the shipped files are of this PTX: the
/// portable PTX byte for byte, the Hopper PTX by its `MANIFEST` digest line `digest`.
fn shipped_cubins_for(manifest: &Path, portable: &[u8], digest: &str) -> Option<(Vec<u8>, Vec<u8>, String)> {
    let dir = manifest.join("ptx");
    println!("cargo:rerun-if-changed={}", dir.display());
    let listed = std::fs::read_to_string(dir.join("MANIFEST")).unwrap_or_default();
    let ptxas = listed.lines().find_map(|l| l.strip_prefix("ptxas: "))?.to_string();
    if !listed.lines().any(|l| l == digest) || read_xz(&dir.join("flashsampling.ptx.xz")).ok()?.as_slice() != portable {
        return None;
    }
    Some((unxz(&dir, "flashsampling.cubin.xz"), unxz(&dir, "flashsampling_sm90a.cubin.xz"), ptxas))
}

/// `MANIFEST`'s line for the Hopper PTX (which is not shipped): its length and FNV-1a 64 digest (a
/// check against drift, not tampering; the sm_90a cubin compared byte for byte is the full check).
fn hopper_digest_line(ptx: &[u8]) -> String {
    format!("flashsampling_sm90a.ptx: {} bytes, FNV-1a 64 {:016x}", ptx.len(), fnv1a64(ptx))
}

/// `module`'s PTX in `out_dir` assembled by `ptxas -arch=<arch> -v` (on every core where it can) into
/// `$OUT_DIR/<stem>.cubin`, its report into `$OUT_DIR/<stem>.ptxas.txt` (its warnings shown as build
/// warnings); empty when ptxas fails (a build warning then: the crate loads the PTX instead). A cubin of the
/// same PTX, architecture and ptxas version (`ptxas_version`) that a build of this target directory made
/// before is taken from its cache ([`shared_dir`]) instead: ptxas is deterministic, and another profile or
/// `cargo clippy` then does not assemble the 22 MB Hopper module again.
fn assemble(ptxas: &Path, ptxas_version: &str, module: Module, arch: &str, out_dir: &Path) -> Vec<u8> {
    let ptx = out_dir.join(format!("{}.ptx", module.stem()));
    let dest = out_dir.join(format!("{}.cubin", module.stem()));
    let report = out_dir.join(format!("{}.ptxas.txt", module.stem()));
    let text = std::fs::read(&ptx).unwrap();
    let key = fnv1a64(&[&text[..], ptxas_version.as_bytes(), arch.as_bytes()].concat());
    let cache = shared_dir(out_dir).join("cubins");
    let (cached, cached_report) =
        (cache.join(format!("{arch}-{key:016x}.cubin")), cache.join(format!("{arch}-{key:016x}.ptxas.txt")));
    if !ptxas_version.is_empty()
        && let (Ok(cubin), Ok(log)) = (std::fs::read(&cached), std::fs::read_to_string(&cached_report))
    {
        std::fs::write(&dest, &cubin).unwrap();
        std::fs::write(&report, &log).unwrap();
        return cubin;
    }
    let mut cmd = Command::new(ptxas);
    cmd.arg(format!("-arch={arch}")).arg("-v");
    if splits_compile(ptxas) {
        // Its functions optimized on every core: the same cubin and report lines (compile times
        // aside), the Hopper module in about half the time on two cores.
        cmd.args(["--split-compile", "0"]);
    }
    let out = cmd.arg(&ptx).arg("-o").arg(&dest).output();
    match out {
        Ok(o) if o.status.success() => {
            let log = String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
            for line in log.lines().filter(|l| l.contains("warning")) {
                println!("cargo:warning=ptxas ({arch}): {line}");
            }
            std::fs::write(&report, &log).unwrap();
            let cubin = std::fs::read(&dest).unwrap();
            if !ptxas_version.is_empty() {
                // Written under a temporary name, then renamed: a concurrent build never reads half a file.
                let _ = std::fs::create_dir_all(&cache);
                let tmp = cache.join(format!("{arch}-{key:016x}.{}.tmp", std::process::id()));
                for (file, bytes) in [(&cached_report, log.as_bytes()), (&cached, &cubin[..])] {
                    if std::fs::write(&tmp, bytes).is_ok() {
                        let _ = std::fs::rename(&tmp, file);
                    }
                }
            }
            cubin
        }
        other => {
            let why = other.map_or_else(|e| e.to_string(), |o| String::from_utf8_lossy(&o.stderr).into_owned());
            println!(
                "cargo:warning=ptxas {} for {arch} failed ({}): the PTX is loaded instead",
                ptx.display(),
                why.lines().next().unwrap_or("")
            );
            std::fs::write(&report, "").unwrap();
            Vec::new()
        }
    }
}

/// FNV-1a, 64 bits (cache keys, the link script's hash, the Hopper PTX's digest).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// A folder every build of this crate in this target directory and profile shares (the nested PTX
/// build's target directory, the cubin cache): `<target>/<profile>/flashsampling-ptx`, beside the
/// `build/` folder that holds `$OUT_DIR`; `$OUT_DIR` itself where the layout is another.
fn shared_dir(out_dir: &Path) -> PathBuf {
    match out_dir.ancestors().nth(3) {
        Some(profile) if out_dir.ancestors().nth(2).and_then(Path::file_name) == Some("build".as_ref()) => {
            profile.join("flashsampling-ptx")
        }
        _ => out_dir.to_path_buf(),
    }
}

/// The last line of `ptxas --version` (e.g. `Cuda compilation tools, release 12.9, V12.9.86`).
fn ptxas_version(ptxas: &Path) -> String {
    let out = Command::new(ptxas).arg("--version").output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    text.lines().rfind(|l| l.contains("release")).unwrap_or("").trim().to_string()
}

/// Whether `ptxas` takes `--split-compile` (recent releases do; the pinned 12.9 does).
fn splits_compile(ptxas: &Path) -> bool {
    let out = Command::new(ptxas).arg("--help").output();
    out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--split-compile"))
}

/// `FLASHSAMPLING_PTXAS`, this repository's `.tools/nvcc/nvidia/cuda_nvcc/bin/ptxas` (what
/// `./x.sh test` installs), or `ptxas` on `PATH`.
fn find_ptxas(manifest: &Path) -> Option<PathBuf> {
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

/// The xz file `path` decoded.
fn read_xz(path: &Path) -> Result<Vec<u8>, String> {
    let packed = std::fs::read(path).map_err(|e| format!("no prebuilt file at {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    lzma_rs::xz_decompress(&mut &packed[..], &mut bytes)
        .map_err(|e| format!("{}: not a valid xz file: {e:?}", path.display()))?;
    Ok(bytes)
}

/// `dir/<name>` xz-decoded (a prebuilt file; a build failure when it is missing or not xz).
fn unxz(dir: &Path, name: &str) -> Vec<u8> {
    read_xz(&dir.join(name)).unwrap_or_else(|e| fail(&e))
}

/// The modules shipped with the crate (`ptx/`, see the crate's docs above), decoded. The PTX entry
/// points are checked as in a build from source; the Hopper module's are in its cubin.
fn use_prebuilt(dir: &Path, out_dir: &Path) -> Embedded {
    if env::var("FLASHSAMPLING_SM").is_ok_and(|sm| sm != PREBUILT_SM) {
        fail(&format!(
            "FLASHSAMPLING_SM asks for another architecture than the prebuilt PTX ({PREBUILT_SM}): \
             enable the `build-ptx` feature to build the kernels from source"
        ));
    }
    println!("cargo:rerun-if-changed={}", dir.display());
    let text = |m: Module| {
        let name = format!("{}.ptx", m.stem());
        String::from_utf8(unxz(dir, &format!("{name}.xz")))
            .unwrap_or_else(|_| fail(&format!("{name}.xz: the PTX is not UTF-8")))
    };
    let ptx = [(Module::Portable, text(Module::Portable)), (Module::Test, text(Module::Test))];
    check_entries(&ptx, PREBUILT_SM);
    for (module, text) in &ptx {
        std::fs::write(out_dir.join(format!("{}.ptx", module.stem())), text).unwrap();
    }
    println!("cargo:rustc-env=FLASHSAMPLING_PTX_SM={PREBUILT_SM}");
    let manifest = std::fs::read_to_string(dir.join("MANIFEST")).unwrap_or_default();
    let ptxas_version = manifest.lines().find_map(|l| l.strip_prefix("ptxas: ")).unwrap_or("").to_string();
    let [ptx, ptx_test] = ptx.map(|(_, t)| t.into_bytes());
    Embedded {
        ptx,
        ptx_sm90a: Vec::new(),
        ptx_test,
        cubin: unxz(dir, "flashsampling.cubin.xz"),
        cubin_sm90a: unxz(dir, "flashsampling_sm90a.cubin.xz"),
        ptxas_version,
    }
}

fn build_from_source(manifest: &Path) -> Vec<(Module, String)> {
    let root = manifest.parent().unwrap().to_path_buf();
    let kernels = root.join("kernels");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed={}", kernels.join("src").display());
    println!("cargo:rerun-if-changed={}", kernels.join("Cargo.toml").display());
    println!("cargo:rerun-if-changed={}", kernels.join("link-ptx.sh").display());
    let sm = env::var("FLASHSAMPLING_SM").unwrap_or_else(|_| "sm_90".into());
    let portable_sm = portable_sm(&sm);

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
    let script_hash = fnv1a64(&script);

    let arch = |m: Module| if m == Module::Hopper { "sm_90a" } else { "portable" };
    let modules: Vec<String> = Module::ALL
        .iter()
        .map(|&m| {
            let entries: Vec<&str> = entry_points_for(portable_sm).filter(|e| e.1 == m).map(|e| e.0).collect();
            format!("{}:{}:{}", m.stem(), arch(m), entries.join(","))
        })
        .collect();
    // The entries this target leaves out (the portable TMA family below sm_90): the link step drops them.
    let dropped: Vec<&str> =
        entry_points_for(90).map(|e| e.0).filter(|e| entry_points_for(portable_sm).all(|k| k.0 != *e)).collect();
    // `entry=threads`, or `entry=threads+` for a pinned bound (`.minnctapersm 1` too).
    let bounds: Vec<String> = entry_points_for(portable_sm)
        .filter_map(|(e, _, b)| b.map(|b| format!("{e}={}{}", b.threads, if b.pinned { "+" } else { "" })))
        .collect();

    // Shared by every run of this build script in this target directory and profile (`cargo clippy`,
    // other feature sets): the nested cargo finds its build up to date instead of starting over.
    let target_dir = shared_dir(&out_dir).join("target");
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
        .env("FS_DROPPED", dropped.join(","))
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
    Module::ALL.iter().map(|&m| (m, read(m))).collect()
}

/// The compute capability of the portable module's target `sm` (`FLASHSAMPLING_SM`); a build
/// failure for a name that is not `sm_XY`.
fn portable_sm(sm: &str) -> u32 {
    sm_number(sm).unwrap_or_else(|| fail(&format!("FLASHSAMPLING_SM={sm}: expected a PTX target such as sm_90")))
}

/// Checks that every entry point of the modules in `ptx` (the portable one built for `sm`) is there
/// with its thread bound (a module not in `ptx`, the prebuilt Hopper one, is not checked here).
fn check_entries(ptx: &[(Module, String)], sm: &str) {
    for (entry, module, bound) in entry_points_for(portable_sm(sm)) {
        let Some((_, text)) = ptx.iter().find(|(m, _)| *m == module) else { continue };
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
}
