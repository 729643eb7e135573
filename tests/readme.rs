//! The README's examples are the ones the tests run: its Rust block is `examples/readme.rs` between
//! the `README begin` / `README end` markers (compiled into this test and run), and
//! its Python block is run by `python/tests/test_readme.py`.

use std::path::PathBuf;

/// The first fenced block of `lang` in `text`.
fn block<'a>(text: &'a str, lang: &str) -> &'a str {
    let open = format!("```{lang}\n");
    let at = text.find(&open).unwrap_or_else(|| panic!("no {lang} block")) + open.len();
    &text[at..at + text[at..].find("```").unwrap()]
}

#[test]
fn the_readme_shows_the_example_the_tests_build() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let example = std::fs::read_to_string(root.join("examples/readme.rs")).unwrap();
    let body = &example[example.find("// README begin\n").unwrap() + 16..example.find("    // README end").unwrap()];
    let dedented: String =
        body.lines().map(|l| l.strip_prefix("    ").unwrap_or(l)).collect::<Vec<_>>().join("\n") + "\n";
    assert_eq!(block(&readme, "rust"), dedented, "README's Rust block differs from examples/readme.rs");
}

/// The example itself, compiled into this test (`cargo test --test readme` builds no examples).
#[path = "../examples/readme.rs"]
mod readme_example;

#[test]
fn the_readme_example_runs() {
    readme_example::main().unwrap();
}
