//! The device code shipped with the host crate (`flashsampling/ptx/`, what stable-Rust consumers
//! embed) is exactly what the kernel sources build. This repository's build has the `build-ptx`
//! feature on, so `flashsampling::{PTX, PTX_SM90A, PTX_TEST, CUBIN, CUBIN_SM90A}` are fresh builds,
//! compared here with the shipped files:
//!
//! - the portable and test PTX byte for byte with `flashsampling.ptx.xz` and `flashsampling_test.ptx.xz`;
//! - the Hopper PTX (not shipped) by its length and digest (computed by build.rs) in `MANIFEST`;
//! - the cubins byte for byte with `flashsampling.cubin.xz` and `flashsampling_sm90a.cubin.xz`, when
//!   the build's ptxas is the one `MANIFEST` names (ptxas is deterministic: the same PTX and version
//!   give the same bytes); else a SKIP line, or a failure with `FLASHSAMPLING_REQUIRE_PTXAS=1` (as
//!   `./x.sh test` sets, with the pinned ptxas it installs).
//!
//! After a kernel change, `./x.sh ptx` (`FLASHSAMPLING_UPDATE_PTX=1 cargo test --release --test
//! ptx_prebuilt`) refreshes them, compressed by Python's `lzma` (xz, preset 9e, CRC32: the same bytes
//! for the same input).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `bytes` xz-compressed by Python's `lzma` (deterministic for a given input and preset).
fn xz(bytes: &[u8]) -> Vec<u8> {
    const SCRIPT: &str = "import lzma, sys; sys.stdout.buffer.write(lzma.compress(sys.stdin.buffer.read(), \
                          format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32, preset=9 | lzma.PRESET_EXTREME))";
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (its lzma module compresses the shipped files)");
    let mut stdin = child.stdin.take().unwrap();
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "python3's lzma failed");
    out.stdout
}

/// The shipped file `path` decoded, `None` when it is missing or not valid xz.
fn unxz(path: &Path) -> Option<Vec<u8>> {
    let packed = std::fs::read(path).ok()?;
    let mut bytes = Vec::new();
    lzma_rs::xz_decompress(&mut &packed[..], &mut bytes).ok()?;
    Some(bytes)
}

/// `MANIFEST` for these modules, with the ptxas that made the cubins.
fn manifest(ptxas: &str) -> String {
    format!(
        "# Written by ./x.sh ptx (tests/ptx_prebuilt.rs): what the files beside it were made from.\n\
         ptxas: {ptxas}\n{}\n",
        flashsampling::modules::PTX_SM90A_DIGEST
    )
}

fn require_ptxas() -> bool {
    std::env::var("FLASHSAMPLING_REQUIRE_PTXAS").is_ok_and(|v| v == "1")
}

#[test]
fn the_shipped_modules_are_what_the_kernel_sources_build() {
    // The repository the test was built in, or (a GPU bundle run elsewhere) the current directory's.
    let built_in = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("flashsampling/ptx");
    let dir = if built_in.is_dir() { built_in } else { PathBuf::from("flashsampling/ptx") };
    assert_eq!(
        flashsampling::PTX_SM,
        "sm_90",
        "the shipped PTX is for sm_90: build it with the default FLASHSAMPLING_SM"
    );
    let update = std::env::var("FLASHSAMPLING_UPDATE_PTX").is_ok_and(|v| v == "1");
    let bytes = |a: &flashsampling::Artifact| a.bytes().unwrap();
    assert!(!flashsampling::PTX_SM90A.is_empty(), "a build from source embeds the Hopper PTX");
    // The build's digest line of the Hopper PTX it embeds (build.rs, the format MANIFEST keeps).
    let digest = flashsampling::modules::PTX_SM90A_DIGEST;
    assert!(digest.starts_with("flashsampling_sm90a.ptx: "), "{digest}");
    let ptxas = flashsampling::PTXAS_VERSION;
    let cubins = [
        ("flashsampling.cubin.xz", bytes(&flashsampling::CUBIN)),
        ("flashsampling_sm90a.cubin.xz", bytes(&flashsampling::CUBIN_SM90A)),
    ];
    let shipped_manifest = std::fs::read_to_string(dir.join("MANIFEST")).unwrap_or_default();
    let shipped_ptxas = shipped_manifest.lines().find_map(|l| l.strip_prefix("ptxas: ")).unwrap_or("");

    let mut files = vec![
        ("flashsampling.ptx.xz", bytes(&flashsampling::PTX)),
        ("flashsampling_test.ptx.xz", bytes(&flashsampling::PTX_TEST)),
    ];
    let compare_cubins = flashsampling::CUBINS_ASSEMBLED && cubins.iter().all(|(_, c)| !c.is_empty());
    if update {
        assert!(
            compare_cubins,
            "./x.sh ptx assembles the shipped cubins: it needs the pinned ptxas (./x.sh installs it into .tools/)"
        );
    }
    if compare_cubins && (update || ptxas == shipped_ptxas) {
        files.extend(cubins);
    } else {
        let why = if !flashsampling::CUBINS_ASSEMBLED {
            "this build assembled no cubins (no ptxas, or FLASHSAMPLING_CUBIN=0)".to_string()
        } else {
            format!("this build's ptxas ({ptxas}) is not the one that made the shipped cubins ({shipped_ptxas})")
        };
        assert!(!require_ptxas(), "FLASHSAMPLING_REQUIRE_PTXAS=1 but the cubins cannot be compared: {why}");
        common::visible(&format!("SKIP the shipped cubins' comparison: {why}"));
    }
    for (name, built) in files {
        let path = dir.join(name);
        let shipped = unxz(&path);
        if update {
            if shipped.as_deref() != Some(&built[..]) {
                std::fs::write(&path, xz(&built)).unwrap();
                println!("updated {}", path.display());
            }
            continue;
        }
        assert!(
            shipped.as_deref() == Some(&built[..]),
            "{} differs from what the kernel sources build ({} vs {} bytes): run ./x.sh ptx and commit it",
            path.display(),
            shipped.as_ref().map_or(0, Vec::len),
            built.len()
        );
    }
    if update {
        let text = manifest(ptxas);
        if text != shipped_manifest {
            std::fs::write(dir.join("MANIFEST"), text).unwrap();
            println!("updated {}", dir.join("MANIFEST").display());
        }
        return;
    }
    assert!(
        shipped_manifest.lines().any(|l| l == digest),
        "{}: no line `{digest}`: the Hopper PTX differs from the shipped one's; run ./x.sh ptx and commit it",
        dir.join("MANIFEST").display()
    );
}
