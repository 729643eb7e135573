//! `flashsampling-suite`: the top-level package that holds FlashSampling's integration tests
//! (`tests/`), benchmarks (`benches/`) and the main-job example (`examples/sample.rs`), so that
//! `cargo test` and `cargo bench` from the repository root run all of them. It has no code of its own.
