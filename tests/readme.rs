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

/// Every relative link of the documentation (README, BENCHMARKS, CHANGELOG, `docs/`) names a file that
/// exists, and every `#anchor` into a Markdown file a heading (or `<a id>`) there.
#[test]
fn every_documentation_link_resolves() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = ["README.md", "BENCHMARKS.md", "CHANGELOG.md"].iter().map(|f| root.join(f)).collect();
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            }
        }
    }
    // Outside fenced code blocks.
    let prose = |path: &PathBuf| -> String {
        let text = std::fs::read_to_string(path).unwrap();
        text.split("```").step_by(2).collect::<Vec<_>>().join("\n")
    };
    let slug = |h: &str| -> String {
        h.trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    };
    let anchors = |path: &PathBuf| -> Vec<String> {
        let text = prose(path);
        let mut a: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim_start_matches('#').strip_prefix(' ').filter(|_| l.starts_with('#')))
            .map(slug)
            .collect();
        for part in text.split("<a id=\"").skip(1) {
            a.push(part.split('"').next().unwrap().to_string());
        }
        a
    };
    let mut bad = Vec::new();
    for file in &files {
        let text = prose(file);
        for part in text.split("](").skip(1) {
            let target = part.split([')', ' ']).next().unwrap();
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            let (path, frag) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            if !resolved.exists() {
                bad.push(format!("{}: {target} (missing)", file.display()));
            } else if !frag.is_empty()
                && resolved.extension().is_some_and(|x| x == "md")
                && !anchors(&resolved).iter().any(|a| a == frag)
            {
                bad.push(format!("{}: {target} (no such anchor)", file.display()));
            }
        }
    }
    assert!(bad.is_empty(), "broken documentation links:\n{}", bad.join("\n"));
}
