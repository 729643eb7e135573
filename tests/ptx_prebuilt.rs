//! The PTX shipped with the host crate (`flashsampling/ptx/`, what stable-Rust consumers embed) is
//! exactly what the kernel sources build: this repository's build has the `build-ptx` feature on, so
//! `flashsampling::PTX*` are fresh builds, compared here byte for byte with the shipped files.
//!
//! After a kernel change, refresh the shipped files with `./x.sh ptx`
//! (`FLASHSAMPLING_UPDATE_PTX=1 cargo test --release --test ptx_prebuilt`).

use std::path::PathBuf;

#[test]
fn the_shipped_ptx_is_what_the_kernel_sources_build() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("flashsampling/ptx");
    let built = [
        ("flashsampling.ptx", flashsampling::PTX),
        ("flashsampling_sm90a.ptx", flashsampling::PTX_SM90A),
        ("flashsampling_test.ptx", flashsampling::PTX_TEST),
    ];
    assert_eq!(
        flashsampling::PTX_SM,
        "sm_90",
        "the shipped PTX is for sm_90: build it with the default FLASHSAMPLING_SM"
    );
    let update = std::env::var("FLASHSAMPLING_UPDATE_PTX").is_ok_and(|v| v == "1");
    for (name, text) in built {
        let path = dir.join(name);
        if update {
            std::fs::write(&path, text).unwrap();
            println!("updated {}", path.display());
            continue;
        }
        let shipped = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            shipped == text,
            "{} differs from the PTX the kernel sources build ({} vs {} bytes): run ./x.sh ptx and commit it",
            path.display(),
            shipped.len(),
            text.len()
        );
    }
}
