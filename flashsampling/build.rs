//! Builds the kernel crate to two PTX modules and embeds them.
//!
//! Steps: a nested `cargo rustc` of `flashsampling-kernels` for `nvptx64-nvidia-cuda` with
//! `-Zbuild-std=core` (clean environment, its own target directory), linked by `kernels/link-ptx.sh`
//! with the toolchain's llvm-tools (`llvm-link`, `opt`, `llc`). The main module (every kernel but the
//! `wgmma` ones) lands in `$OUT_DIR/flashsampling.ptx` (`FLASHSAMPLING_PTX_PATH`), the `wgmma` kernels,
//! built for the arch-specific sm_90a target, in `$OUT_DIR/flashsampling_sm90a.ptx`
//! (`FLASHSAMPLING_PTX_SM90A_PATH`). Set `FLASHSAMPLING_SM` to build the main module for another
//! architecture (default `sm_90`).

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn fail(msg: &str) -> ! {
    eprintln!("\nflashsampling build: {msg}\n");
    panic!("flashsampling build: {msg}");
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap().to_path_buf();
    let kernels = root.join("kernels");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed={}", kernels.join("src").display());
    println!("cargo:rerun-if-changed={}", kernels.join("Cargo.toml").display());
    println!("cargo:rerun-if-changed={}", kernels.join("link-ptx.sh").display());
    println!("cargo:rerun-if-env-changed=FLASHSAMPLING_SM");
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
    let status = cmd.status().unwrap_or_else(|e| fail(&format!("cannot run `{cargo}`: {e}")));
    if !status.success() {
        fail("the nested PTX build of flashsampling-kernels failed (see its output above)");
    }
    // The link step writes both modules next to rustc's output in deps/ (cargo copies up only the first).
    let read = |name: &str| {
        let built = target_dir.join("nvptx64-nvidia-cuda/release/deps").join(name);
        std::fs::read_to_string(&built).unwrap_or_else(|e| fail(&format!("no PTX at {}: {e}", built.display())))
    };
    let ptx = read("flashsampling_kernels.ptx");
    let ptx_sm90a = read("flashsampling_kernels_sm90a.ptx");
    for entry in flashsampling_kernels::config::ENTRY_POINTS {
        let module = if entry.contains("wgmma") { &ptx_sm90a } else { &ptx };
        if !module.contains(&format!(".entry {entry}(")) {
            fail(&format!("the PTX lacks the entry point `{entry}`"));
        }
    }
    // The warp-specialized kernels need their thread bound in the PTX (written by the link step).
    for variant in flashsampling_kernels::config::FUSED_VARIANTS {
        if variant.warp_specialized() {
            let at = ptx_sm90a.find(&format!(".entry {}(", variant.entry)).unwrap_or(0);
            let head = &ptx_sm90a[at..(at + 400).min(ptx_sm90a.len())];
            let bound = format!(".maxntid {}, 1, 1", variant.threads());
            if !head.split('{').next().unwrap_or("").contains(&bound) {
                fail(&format!("the PTX entry `{}` lacks `{bound}` (kernels/link-ptx.sh)", variant.entry));
            }
        }
    }
    let dest = out_dir.join("flashsampling.ptx");
    std::fs::write(&dest, &ptx).unwrap();
    println!("cargo:rustc-env=FLASHSAMPLING_PTX_PATH={}", dest.display());
    let dest = out_dir.join("flashsampling_sm90a.ptx");
    std::fs::write(&dest, &ptx_sm90a).unwrap();
    println!("cargo:rustc-env=FLASHSAMPLING_PTX_SM90A_PATH={}", dest.display());
    println!("cargo:rustc-env=FLASHSAMPLING_PTX_SM={sm}");
}
