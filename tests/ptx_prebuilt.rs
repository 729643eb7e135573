//! The PTX shipped with the host crate (`flashsampling/ptx/*.ptx.xz`, what stable-Rust consumers embed,
//! xz-compressed) is exactly what the kernel sources build: this repository's build has the `build-ptx`
//! feature on, so `flashsampling::PTX*` are fresh builds, compared here byte for byte with the shipped
//! files decompressed.
//!
//! After a kernel change, refresh the shipped files with `./x.sh ptx`
//! (`FLASHSAMPLING_UPDATE_PTX=1 cargo test --release --test ptx_prebuilt`), which compresses them with
//! Python's `lzma` (xz, preset 9e, CRC32: the same bytes for the same PTX).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// `text` xz-compressed by Python's `lzma` (deterministic for a given input and preset).
fn xz(text: &str) -> Vec<u8> {
    const SCRIPT: &str = "import lzma, sys; sys.stdout.buffer.write(lzma.compress(sys.stdin.buffer.read(), \
                          format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32, preset=9 | lzma.PRESET_EXTREME))";
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (its lzma module compresses the shipped PTX)");
    let mut stdin = child.stdin.take().unwrap();
    let input = text.as_bytes().to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "python3's lzma failed");
    out.stdout
}

#[test]
fn the_shipped_ptx_is_what_the_kernel_sources_build() {
    // The repository the test was built in, or (a GPU bundle run elsewhere) the current directory's.
    let built_in = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("flashsampling/ptx");
    let dir = if built_in.is_dir() { built_in } else { PathBuf::from("flashsampling/ptx") };
    let built = [
        ("flashsampling.ptx.xz", flashsampling::PTX),
        ("flashsampling_sm90a.ptx.xz", flashsampling::PTX_SM90A),
        ("flashsampling_test.ptx.xz", flashsampling::PTX_TEST),
    ];
    assert_eq!(
        flashsampling::PTX_SM,
        "sm_90",
        "the shipped PTX is for sm_90: build it with the default FLASHSAMPLING_SM"
    );
    let update = std::env::var("FLASHSAMPLING_UPDATE_PTX").is_ok_and(|v| v == "1");
    for (name, text) in built {
        let path = dir.join(name);
        let packed = std::fs::read(&path).unwrap_or_default();
        let mut shipped = Vec::new();
        let valid = lzma_rs::xz_decompress(&mut &packed[..], &mut shipped).is_ok();
        if update {
            if !(valid && shipped == text.as_bytes()) {
                std::fs::write(&path, xz(text)).unwrap();
                println!("updated {}", path.display());
            }
            continue;
        }
        assert!(
            valid && shipped == text.as_bytes(),
            "{} differs from the PTX the kernel sources build ({} vs {} bytes): run ./x.sh ptx and commit it",
            path.display(),
            shipped.len(),
            text.len()
        );
    }
}
