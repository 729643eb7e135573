//! The module graph has no import circle (issue 50.2): in `kernels/src` (the device roles, bottom to
//! top: `ptx` → `collective` → `rows`, `schedule`, `pipeline` → … → `fused/*`) and in
//! `flashsampling/src`, no module reaches itself through `crate::` / `super::` paths. A module's
//! edges are the modules its code names (comments excluded); a parent and its children are not
//! edges of each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every module of the crate rooted at `root` (`a::b` for `a/b.rs` or `a/b/mod.rs`) and its source
/// without comments.
fn modules(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel: PathBuf = path.strip_prefix(root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            let src = std::fs::read_to_string(&path).unwrap();
            let code: String = src.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
            out.insert(parts.join("::"), code);
        }
    }
    out
}

/// The modules each module names through `crate::…` or `super::…` paths.
fn edges(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = BTreeMap::new();
    for (m, code) in mods {
        let parent = m.rsplit_once("::").map_or("", |(p, _)| p);
        let mut to = BTreeSet::new();
        for (base, prefix) in [("crate::", String::new()), ("super::", parent.to_string())] {
            for (at, _) in code.match_indices(base) {
                if code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                    continue;
                }
                let path: String = code[at + base.len()..].chars().take_while(|&c| is_ident(c)).collect();
                let full = if prefix.is_empty() { path } else { format!("{prefix}::{path}") };
                let segs: Vec<&str> = full.split("::").filter(|s| !s.is_empty()).collect();
                // The longest prefix that is a module; a module's own parent or child is no edge.
                if let Some(target) =
                    (1..=segs.len()).rev().map(|k| segs[..k].join("::")).find(|c| mods.contains_key(c))
                    && target != *m
                    && !m.starts_with(&format!("{target}::"))
                    && !target.starts_with(&format!("{m}::"))
                {
                    to.insert(target);
                }
            }
        }
        out.insert(m.clone(), to);
    }
    out
}

/// A circle through `start`, if any (depth-first search back to it).
fn circle_through(start: &str, g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((m, path)) = stack.pop() {
        for n in &g[&m] {
            if n == start {
                return Some([path.clone(), vec![n.clone()]].concat());
            }
            if seen.insert(n.clone()) {
                stack.push((n.clone(), [path.clone(), vec![n.clone()]].concat()));
            }
        }
    }
    None
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for krate in ["kernels/src", "flashsampling/src"] {
        let mods = modules(&root.join(krate));
        assert!(mods.len() > 10, "{krate}: {} modules found", mods.len());
        let g = edges(&mods);
        for m in g.keys() {
            if let Some(c) = circle_through(m, &g) {
                panic!("{krate}: an import circle: {}", c.join(" → "));
            }
        }
    }
}

#[test]
fn the_circle_check_finds_a_circle() {
    // The check itself: two modules naming each other are a circle, a child naming its parent is not.
    let mods: BTreeMap<String, String> = [
        ("a".to_string(), "use crate::b::f;".to_string()),
        ("b".to_string(), "fn f() { super::a::g() }".to_string()),
        ("c".to_string(), "".to_string()),
        ("c::d".to_string(), "use super::x;".to_string()),
    ]
    .into();
    let g = edges(&mods);
    assert_eq!(circle_through("a", &g), Some(vec!["a".into(), "b".into(), "a".into()]));
    assert_eq!(circle_through("c::d", &g), None);
}

/// Issue 50.1: the logit pipeline (`kernels::logits::LogitPipeline`, `Transform::scaled`) is the one
/// place a logit is soft-capped, masked or scaled by the temperature. No device role and no host
/// file calls `softcap(` itself or multiplies by `1/T` in f32 (the benchmark baselines and test
/// kernels excepted; the CPU backend's log-probabilities scale in f64, its own reference precision).
#[test]
fn every_logit_goes_through_the_one_pipeline() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut offenders = Vec::new();
    for krate in ["kernels/src/device", "flashsampling/src"] {
        for (m, code) in modules(&root.join(krate)) {
            if matches!(m.as_str(), "baselines" | "test_kernels") {
                continue;
            }
            for line in code.lines() {
                let l = line.replace(' ', "");
                let calls_softcap = l.contains("softcap(") && !l.contains("fnwith_softcap(");
                // Device code only: the CPU backend scales in f64 (`slot.inv_temperature`).
                let f32_scale = krate.contains("device")
                    && (l.contains("*inv_t")
                        || l.contains("inv_t*")
                        || (l.contains('*') && l.contains("inv_temperature")));
                if calls_softcap || f32_scale {
                    offenders.push(format!("{krate}/{m}: {}", line.trim()));
                }
            }
        }
    }
    assert!(offenders.is_empty(), "logit processing outside the pipeline:\n{}", offenders.join("\n"));
}

/// Runs `cmd` in `dir`, panicking with its output when it fails.
fn run_in(dir: &Path, cmd: &mut std::process::Command) {
    let out = cmd.current_dir(dir).output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The guide's worked example (docs/dev/changing-the-kernel.md, "A new logit transform") as a test:
/// `docs/dev/worked-example-logit-scale.patch` adds a launch-wide logit scale to the one pipeline.
/// It touches `kernels/src/logits.rs` and `kernels/src/params.rs` only — no file under `device/` —,
/// applies to a copy of this tree's kernel crate, and with it the device code compiles for
/// nvptx64 unchanged and the pipeline's unit tests pass (its new one included: scale 1 is no
/// change, bit for bit; the scale comes after the soft-cap, before the adjustment and the mask).
/// SKIPs without `git` (it applies the patch).
#[test]
fn the_guides_worked_example_is_one_function_and_no_device_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let patch = root.join("docs/dev/worked-example-logit-scale.patch");
    let text = std::fs::read_to_string(&patch).unwrap();
    let files: BTreeSet<&str> =
        text.lines().filter_map(|l| l.strip_prefix("diff --git a/")).filter_map(|l| l.split(" b/").next()).collect();
    assert_eq!(files, BTreeSet::from(["kernels/src/logits.rs", "kernels/src/params.rs"]), "the patch's files");
    if std::process::Command::new("git").arg("--version").output().is_err() {
        println!("SKIP the_guides_worked_example_is_one_function_and_no_device_file: no git to apply the patch");
        return;
    }
    // A workspace of the kernel crate alone: the root manifest's workspace sections (members: kernels),
    // its lock file and toolchain, and a copy of `kernels/`.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("worked-example");
    let _ = std::fs::remove_dir_all(dir.join("kernels"));
    let copy = |from: &Path, to: &Path| {
        let mut stack = vec![from.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                let dest = to.join(path.strip_prefix(from).unwrap());
                if path.is_dir() {
                    stack.push(path);
                } else {
                    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
                    std::fs::copy(&path, &dest).unwrap();
                }
            }
        }
    };
    copy(&root.join("kernels"), &dir.join("kernels"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let workspace: String = manifest
        .split("\n[package]")
        .next()
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("default-members") && !l.contains("path = \"flashsampling\""))
        .map(|l| if l.starts_with("members") { "members = [\"kernels\"]" } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(dir.join("Cargo.toml"), workspace + "\n").unwrap();
    for f in ["Cargo.lock", "rust-toolchain.toml"] {
        std::fs::copy(root.join(f), dir.join(f)).unwrap();
    }
    // Outside any repository (the copy sits under target/, inside this one, where `git apply` would
    // skip paths outside its directory).
    let ceiling = dir.parent().unwrap();
    run_in(&dir, std::process::Command::new("git").args(["apply"]).arg(&patch).env("GIT_CEILING_DIRECTORIES", ceiling));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target = dir.join("target");
    // The device code with the new field: every device site's `logit_pipeline()` picks it up.
    run_in(
        &dir,
        std::process::Command::new(&cargo)
            .args(["check", "-q", "-p", "flashsampling-kernels", "--lib", "--release"])
            .args(["--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core"])
            .env("CARGO_TARGET_DIR", &target),
    );
    // The pipeline's unit tests on the host, the worked example's own included.
    let out = std::process::Command::new(&cargo)
        .args(["test", "-q", "-p", "flashsampling-kernels", "--lib", "logits::"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("4 passed"), "the pipeline's three tests and the example's: {stdout}");
}
