//! Loading the main job's inputs from files (`flashsampling::checkpoint`): LM-head weights from
//! safetensors files and sharded indexes, hidden states from `.npy` and safetensors. The tests write
//! small checkpoints themselves; a loaded head samples exactly what the same values in memory sample,
//! and bad files, missing tensors, other dtypes and other shapes are typed errors. Runs in CI.

mod common;

use std::path::{Path, PathBuf};

use common::TestRng;
use flashsampling::checkpoint::{CheckpointError, Values, load_hidden, load_safetensors};
use flashsampling::{CpuBackend, ElementType, Error, Matrix, SamplingParams};
use half::{bf16, f16};
use safetensors::{Dtype, tensor::TensorView};

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flashsampling-ckpt-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn le_bytes_bf16(v: &[bf16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
}

/// Writes a safetensors file of `(name, dtype, shape, bytes)` tensors.
fn write_safetensors(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| (*name, TensorView::new(*dtype, shape.clone(), bytes).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

/// Writes a version-1 `.npy` file.
fn write_npy(path: &Path, descr: &str, shape: &[usize], data: &[u8], fortran: bool) {
    let shape_text = match shape {
        [n] => format!("({n},)"),
        s => format!("({})", s.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!(
        "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape_text}, }}",
        if fortran { "True" } else { "False" }
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_loaded_lm_head_samples_what_the_same_values_sample_in_memory() {
    let dir = scratch("roundtrip");
    let (b, d, v) = (3usize, 64usize, 500usize);
    let mut rng = TestRng::new(0xC4E7);
    let weight = rng.normal_bf16(v * d, 0.25);
    let hidden_f32: Vec<f32> = (0..b * d).map(|_| rng.normal() as f32).collect();
    let hidden: Vec<bf16> = hidden_f32.iter().map(|&x| bf16::from_f32(x)).collect();
    // One file with the head and another tensor; a sharded checkpoint with the head in shard 2.
    let single = dir.join("model.safetensors");
    write_safetensors(
        &single,
        &[
            ("lm_head.weight", Dtype::BF16, vec![v, d], le_bytes_bf16(&weight)),
            ("model.norm.weight", Dtype::BF16, vec![d], le_bytes_bf16(&vec![bf16::ONE; d])),
        ],
    );
    write_safetensors(
        &dir.join("model-00001-of-00002.safetensors"),
        &[("embed", Dtype::BF16, vec![2, d], le_bytes_bf16(&weight[..2 * d]))],
    );
    write_safetensors(
        &dir.join("model-00002-of-00002.safetensors"),
        &[("lm_head.weight", Dtype::BF16, vec![v, d], le_bytes_bf16(&weight))],
    );
    let index = dir.join("model.safetensors.index.json");
    std::fs::write(
        &index,
        r#"{"metadata": {"total_size": 0}, "weight_map": {"embed": "model-00001-of-00002.safetensors", "lm_head.weight": "model-00002-of-00002.safetensors"}}"#,
    )
    .unwrap();
    // Hidden states as .npy (f32, converted to bf16) and as a bf16 safetensors tensor.
    let npy = dir.join("hidden.npy");
    write_npy(&npy, "<f4", &[b, d], &hidden_f32.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(), false);
    let hidden_st = dir.join("hidden.safetensors");
    write_safetensors(&hidden_st, &[("hidden_states", Dtype::BF16, vec![b, d], le_bytes_bf16(&hidden))]);

    let cpu = CpuBackend::new();
    let params = SamplingParams::new(0.9, 5);
    let want = cpu.sample(Matrix::new(&hidden, b, d), Matrix::new(&weight, v, d), &params).unwrap();
    for w_path in [&single, &index] {
        let w = load_safetensors(w_path, "lm_head.weight", None).unwrap();
        assert_eq!((w.rows, w.cols, w.converted_from), (v, d, None));
        assert_eq!(w.values, Values::Bf16(weight.clone()), "{}", w_path.display());
        for h in
            [load_hidden(&npy, None, Some(ElementType::Bf16)).unwrap(), load_hidden(&hidden_st, None, None).unwrap()]
        {
            assert_eq!(h.values, Values::Bf16(hidden.clone()));
            assert_eq!(cpu.sample(h.bf16().unwrap(), w.bf16().unwrap(), &params).unwrap(), want);
        }
    }
    assert_eq!(load_hidden(&npy, None, Some(ElementType::Bf16)).unwrap().converted_from, Some("f32"));
    // A 1-D .npy is one row; f16 loads as it is, without permission to convert.
    let one = dir.join("one.npy");
    let row16: Vec<f16> = hidden_f32[..d].iter().map(|&x| f16::from_f32(x)).collect();
    write_npy(&one, "<f2", &[d], &row16.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect::<Vec<_>>(), false);
    let h1 = load_hidden(&one, None, None).unwrap();
    assert_eq!((h1.rows, h1.cols, h1.converted_from, h1.elem()), (1, d, None, ElementType::F16));
    assert_eq!(h1.values, Values::F16(row16.clone()));
    // f16 checkpoints sample in f16: what the same values sample in memory, not their bf16 rounding.
    let weight16: Vec<f16> = weight.iter().map(|x| f16::from_f32(x.to_f32() * (1.0 + 1.0 / 1024.0))).collect();
    let w16 = dir.join("model16.safetensors");
    write_safetensors(
        &w16,
        &[(
            "lm_head.weight",
            Dtype::F16,
            vec![v, d],
            weight16.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        )],
    );
    let w = load_safetensors(&w16, "lm_head.weight", None).unwrap();
    assert_eq!((w.elem(), w.converted_from), (ElementType::F16, None));
    let got = cpu.sample_scored(h1.f16().unwrap(), w.f16().unwrap(), &params).unwrap();
    let mem = cpu.sample_scored(Matrix::new(&row16, 1, d), Matrix::new(&weight16, v, d), &params).unwrap();
    assert_eq!((got.tokens, got.scores), (mem.tokens, mem.scores));
    // Converting to the other 16-bit type rounds each value, and says from what.
    let as_bf16 = w.clone().converted(ElementType::Bf16);
    assert_eq!((as_bf16.elem(), as_bf16.converted_from), (ElementType::Bf16, Some("f16")));
    assert_eq!(as_bf16.bf16().unwrap().data[7], bf16::from_f32(weight16[7].to_f32()));
    assert_eq!(w.clone().converted(ElementType::F16), w);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn f16_loads_as_it_is_and_f32_converts_only_when_allowed() {
    let dir = scratch("dtypes");
    let (v, d) = (4usize, 8usize);
    let values: Vec<f32> = (0..v * d).map(|i| i as f32 * 0.37 - 3.0).collect();
    let f16_bytes: Vec<u8> = values.iter().flat_map(|&x| f16::from_f32(x).to_bits().to_le_bytes()).collect();
    let f32_bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
    let path = dir.join("m.safetensors");
    write_safetensors(
        &path,
        &[
            ("h16", Dtype::F16, vec![v, d], f16_bytes),
            ("h32", Dtype::F32, vec![v, d], f32_bytes),
            ("i32", Dtype::I32, vec![v, d], vec![0; v * d * 4]),
            ("cube", Dtype::BF16, vec![2, 2, d], vec![0; 2 * 2 * d * 2]),
        ],
    );
    // f16 loads as it is; f32 only with a type to round it to.
    let h16 = load_safetensors(&path, "h16", None).unwrap();
    assert_eq!(h16.values, Values::F16(values.iter().map(|&x| f16::from_f32(x)).collect()));
    let err = load_safetensors(&path, "h32", None).unwrap_err();
    assert!(matches!(&err, CheckpointError::Dtype { hint, .. } if hint.contains("conversion")), "{err}");
    let to_bf16 = load_safetensors(&path, "h32", Some(ElementType::Bf16)).unwrap();
    assert_eq!(to_bf16.values, Values::Bf16(values.iter().map(|&x| bf16::from_f32(x)).collect()));
    let to_f16 = load_safetensors(&path, "h32", Some(ElementType::F16)).unwrap();
    assert_eq!((to_f16.values, to_f16.converted_from), (h16.values, Some("f32")));
    assert!(matches!(load_safetensors(&path, "i32", Some(ElementType::Bf16)), Err(CheckpointError::Dtype { .. })));
    assert!(matches!(load_safetensors(&path, "cube", None), Err(CheckpointError::Shape { .. })));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_files_and_missing_tensors_are_typed_errors() {
    let dir = scratch("errors");
    let d = 8usize;
    let path = dir.join("m.safetensors");
    write_safetensors(&path, &[("lm_head.weight", Dtype::BF16, vec![4, d], vec![0; 4 * d * 2])]);
    // Missing file, missing tensor (the error lists the names there), a file that is not safetensors.
    assert!(matches!(load_safetensors(&dir.join("nope.safetensors"), "x", None), Err(CheckpointError::Io { .. })));
    match load_safetensors(&path, "output.weight", None) {
        Err(CheckpointError::MissingTensor { available, .. }) => assert!(available.contains("lm_head.weight")),
        other => panic!("{other:?}"),
    }
    let junk = dir.join("junk.safetensors");
    std::fs::write(&junk, b"not a checkpoint at all").unwrap();
    assert!(matches!(load_safetensors(&junk, "x", None), Err(CheckpointError::Format { .. })));
    let truncated = dir.join("truncated.safetensors");
    let full = std::fs::read(&path).unwrap();
    std::fs::write(&truncated, &full[..full.len() - 3]).unwrap();
    assert!(matches!(load_safetensors(&truncated, "lm_head.weight", None), Err(CheckpointError::Format { .. })));
    // Indexes: no weight_map, a tensor not in it, a shard that does not exist.
    let index = dir.join("bad.index.json");
    std::fs::write(&index, r#"{"metadata": {}}"#).unwrap();
    assert!(matches!(load_safetensors(&index, "lm_head.weight", None), Err(CheckpointError::Format { .. })));
    std::fs::write(&index, r#"{"weight_map": {"lm_head.weight": "missing.safetensors"}}"#).unwrap();
    assert!(matches!(load_safetensors(&index, "lm_head.weight", None), Err(CheckpointError::Io { .. })));
    assert!(matches!(load_safetensors(&index, "other", None), Err(CheckpointError::MissingTensor { .. })));
    // .npy: Fortran order, an unsupported dtype, data shorter than the shape, no conversion allowed.
    let npy = dir.join("h.npy");
    write_npy(&npy, "<f4", &[2, d], &vec![0; 2 * d * 4], true);
    assert!(matches!(load_hidden(&npy, None, Some(ElementType::Bf16)), Err(CheckpointError::Format { .. })));
    write_npy(&npy, "<i8", &[2, d], &vec![0; 2 * d * 8], false);
    assert!(matches!(load_hidden(&npy, None, Some(ElementType::Bf16)), Err(CheckpointError::Dtype { .. })));
    write_npy(&npy, "<f4", &[2, d], &vec![0; d * 4], false);
    assert!(matches!(load_hidden(&npy, None, Some(ElementType::Bf16)), Err(CheckpointError::Format { .. })));
    write_npy(&npy, "<f4", &[2, d], &vec![0; 2 * d * 4], false);
    assert!(matches!(load_hidden(&npy, None, None), Err(CheckpointError::Dtype { .. })));
    std::fs::write(dir.join("x.npy"), b"\x93NUMP").unwrap();
    assert!(matches!(
        load_hidden(&dir.join("x.npy"), None, Some(ElementType::Bf16)),
        Err(CheckpointError::Format { .. })
    ));
    // Hidden states of another D than the weight: the sampler's typed error.
    let h = load_hidden(&npy, None, Some(ElementType::Bf16)).unwrap();
    let w_other = vec![bf16::ZERO; 4 * 16];
    let err = CpuBackend::new()
        .sample(h.bf16().unwrap(), Matrix::new(&w_other, 4, 16), &SamplingParams::new(1.0, 1))
        .unwrap_err();
    assert!(matches!(err, Error::HiddenSizeMismatch { hidden: 8, weight: 16 }), "{err:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn index_cycles_empty_and_oversized_arrays_are_typed_errors() {
    // Issue 48, items 3-4: an index naming itself, or two naming each other, recursed until the stack
    // overflowed; a `.npy` header may declare any shape (2⁶² rows with no data was accepted, its
    // byte count wrapping to 0), and an empty array loaded as a matrix of 0 columns.
    let dir = scratch("cycles");
    let d = 8usize;
    let one = dir.join("self.index.json");
    std::fs::write(&one, r#"{"weight_map": {"lm_head.weight": "self.index.json"}}"#).unwrap();
    let (a, b) = (dir.join("a.index.json"), dir.join("b.index.json"));
    std::fs::write(&a, r#"{"weight_map": {"lm_head.weight": "b.index.json"}}"#).unwrap();
    std::fs::write(&b, r#"{"weight_map": {"lm_head.weight": "a.index.json"}}"#).unwrap();
    for index in [&one, &a, &b] {
        match load_safetensors(index, "lm_head.weight", None) {
            Err(CheckpointError::Format { reason, .. }) => assert!(reason.contains("another index"), "{reason}"),
            other => panic!("{}: {other:?}", index.display()),
        }
    }
    let npy = dir.join("h.npy");
    for shape in [[1usize << 62, 1], [1 << 61, 2], [usize::MAX, 1], [1 << 32, 1 << 32], [3, 1 << 62]] {
        for descr in ["<f4", "<f2"] {
            write_npy(&npy, descr, &shape, &[], false);
            let got = load_hidden(&npy, None, Some(ElementType::Bf16));
            assert!(matches!(got, Err(CheckpointError::Format { .. })), "{shape:?} {descr}: {got:?}");
        }
    }
    for shape in [vec![1usize << 62, 0], vec![0, d], vec![0]] {
        write_npy(&npy, "<f2", &shape, &[], false);
        let got = load_hidden(&npy, None, None);
        assert!(matches!(got, Err(CheckpointError::Shape { .. })), "{shape:?}: {got:?}");
    }
    let path = dir.join("empty.safetensors");
    write_safetensors(&path, &[("w", Dtype::BF16, vec![0, d], vec![])]);
    assert!(matches!(load_safetensors(&path, "w", None), Err(CheckpointError::Shape { .. })));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fuzzed_checkpoint_files_give_typed_errors_only() {
    // The loaders over random and mutated safetensors, index and `.npy` bytes (cycles, huge
    // declared sizes, cut and flipped bytes): every call returns, a loaded matrix holds exactly
    // rows × cols values, and nothing panics. Fixed seed, bounded in cases and time.
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::time::{Duration, Instant};
    let dir = scratch("fuzz");
    let d = 8usize;
    let mut rng = TestRng::new(0x48_F022);
    let weight = rng.normal_bf16(4 * d, 1.0);
    let st = dir.join("seed.safetensors");
    write_safetensors(
        &st,
        &[
            ("lm_head.weight", Dtype::BF16, vec![4, d], le_bytes_bf16(&weight)),
            ("hidden_states", Dtype::F32, vec![2, d], vec![0x3f; 2 * d * 4]),
        ],
    );
    let npy = dir.join("seed.npy");
    write_npy(&npy, "<f2", &[2, d], &vec![0x3c; 2 * d * 2], false);
    let seeds = [std::fs::read(&st).unwrap(), std::fs::read(&npy).unwrap()];
    let indexes = [
        r#"{"weight_map": {"lm_head.weight": "seed.safetensors"}}"#,
        r#"{"weight_map": {"lm_head.weight": "case.index.json"}}"#,
        r#"{"weight_map": {"lm_head.weight": "other.index.json", "x": 3}}"#,
        r#"{"weight_map": {"lm_head.weight": "../../../../../../dev/null"}}"#,
        r#"{"weight_map": {"lm_head.weight": "/"}}"#,
        r#"{"weight_map": {"lm_head.weight": "case.npy"}}"#,
        r#"{"weight_map": []}"#,
    ];
    std::fs::write(dir.join("other.index.json"), indexes[1]).unwrap();
    let start = Instant::now();
    let (mut loaded, mut errors, mut cases) = (0usize, 0usize, 0usize);
    while cases < 3000 && start.elapsed() < Duration::from_secs(20) {
        cases += 1;
        let kind = rng.next_u64() % 4;
        let mut bytes = match kind {
            0 | 1 => seeds[kind as usize].clone(),
            2 => indexes[(rng.next_u64() % indexes.len() as u64) as usize].as_bytes().to_vec(),
            _ => (0..rng.next_u64() % 300).map(|_| rng.next_u64() as u8).collect(),
        };
        // Mutations: flip bytes, overwrite digits with large numbers, cut or extend.
        for _ in 0..rng.next_u64() % 6 {
            if bytes.is_empty() {
                break;
            }
            let at = (rng.next_u64() % bytes.len() as u64) as usize;
            match rng.next_u64() % 5 {
                0 => bytes[at] ^= 1 << (rng.next_u64() % 8),
                1 => bytes[at] = rng.next_u64() as u8,
                2 => bytes.truncate(at),
                3 => {
                    let big = ["18446744073709551615", "4611686018427387904", "4294967296", "0", "-1"];
                    let s = big[(rng.next_u64() % big.len() as u64) as usize].as_bytes();
                    bytes.splice(at..at, s.iter().copied());
                }
                _ => bytes.extend((0..rng.next_u64() % 64).map(|_| rng.next_u64() as u8)),
            }
        }
        let name = ["case.safetensors", "case.npy", "case.index.json", "case.bin"][kind as usize];
        let path = dir.join(name);
        std::fs::write(&path, &bytes).unwrap();
        let to = [None, Some(ElementType::Bf16), Some(ElementType::F16)][(rng.next_u64() % 3) as usize];
        let result = catch_unwind(AssertUnwindSafe(|| match kind {
            1 => load_hidden(&path, None, to),
            _ => load_safetensors(&path, ["lm_head.weight", "hidden_states", "x"][cases % 3], to),
        }));
        match result {
            Ok(Ok(l)) => {
                let n = match &l.values {
                    Values::Bf16(v) => v.len(),
                    Values::F16(v) => v.len(),
                };
                assert!(
                    l.rows > 0 && l.cols > 0 && n == l.rows * l.cols,
                    "case {cases}: {} x {} of {n}",
                    l.rows,
                    l.cols
                );
                loaded += 1;
            }
            Ok(Err(_)) => errors += 1,
            Err(_) => panic!("case {cases} ({name}, {} bytes) panicked: {bytes:?}", bytes.len()),
        }
    }
    assert!(loaded > 20 && errors > 200, "{cases} cases: {loaded} loaded, {errors} errors");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An example's executable (`examples/NAME.rs`): where `cargo test` builds it beside the tests
/// (`target/release/examples/`), or beside the test in a GPU bundle (`gpu-bundle/bin/`).
fn example(name: &str) -> PathBuf {
    let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let places = [deps.parent().map(|t| t.join("examples").join(&file)), Some(deps.join(&file))];
    places.into_iter().flatten().find(|e| e.exists()).unwrap_or_else(|| {
        panic!("the example {name} was not built beside the tests (cargo test builds it; gpu-bundle copies it)")
    })
}

#[test]
fn the_main_jobs_flags_are_checked_before_anything_is_allocated() {
    // Issue 48, items 5-6: shapes past the library's limits aborted on a multi-terabyte allocation
    // (exit 134), and a non-UTF-8 path or name panicked (exit 101). Now: the library's typed error
    // and exit 1 (run) or 2 (arguments), quickly.
    use std::os::unix::ffi::OsStrExt;
    use std::process::Command;
    let exe = example("sample");
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(&exe).args(["--backend", "cpu"]).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    for (args, code, says) in [
        (vec!["--vocab", "1073741825", "--hidden", "4096"], 1, "exceeds the supported maximum"),
        (vec!["--vocab", "4000000000"], 1, "exceeds the supported maximum"),
        (vec!["--batch", "1073741825"], 1, "exceeds the supported maximum"),
        (vec!["--hidden", "1073741832", "--vocab", "8"], 1, "exceeds the supported maximum"),
        (vec!["--hidden", "12"], 1, "not a multiple of 8"),
        (vec!["--vocab", "0"], 1, "vocab size V is 0"),
        (vec!["--hidden", "1073741824", "--vocab", "1073741824"], 1, "could not allocate"),
        (vec!["--temperature", "-1"], 1, "temperature -1 is invalid"),
        (vec!["--vocab", "-3"], 2, "--vocab"),
        (vec!["--frobnicate"], 2, "unknown argument"),
    ] {
        let args: Vec<&std::ffi::OsStr> = args.into_iter().map(os).collect();
        let (got, stderr) = run(&args);
        assert_eq!(got, Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let bad = std::ffi::OsStr::from_bytes(b"/nonexistent/\xff\xfe.safetensors");
    let (got, stderr) = run(&[os("--weight"), bad]);
    assert_eq!(got, Some(1), "non-UTF-8 path: {stderr}");
    assert!(stderr.contains("No such file"), "{stderr}");
    let (got, stderr) = run(&[os("--tensor"), std::ffi::OsStr::from_bytes(b"lm\xff")]);
    assert_eq!(got, Some(2), "non-UTF-8 tensor name: {stderr}");
    assert!(stderr.contains("not valid UTF-8"), "{stderr}");
    let (got, stderr) = run(&[std::ffi::OsStr::from_bytes(b"--\xff")]);
    assert_eq!(got, Some(2), "non-UTF-8 flag: {stderr}");
    // A small valid call still runs.
    let (got, stderr) = run(&[os("--vocab"), os("64"), os("--hidden"), os("16"), os("--batch"), os("2")]);
    assert_eq!(got, Some(0), "{stderr}");
    // The tensor-parallel example checks its flags the same way (exit 2, before any rank starts).
    let tp = example("tp_ranks");
    for (args, says) in [
        (vec![os("--vocab"), os("4000000000")], "exceeds the supported maximum"),
        (vec![os("--world"), os("100000")], "ranks = 100000 exceeds"),
        (vec![os("--hidden"), os("12")], "not a multiple of 8"),
        (vec![os("--id"), std::ffi::OsStr::from_bytes(b"\xff")], "not valid UTF-8"),
    ] {
        let out = Command::new(&tp).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "tp_ranks {args:?}: {stderr}");
        assert!(stderr.contains(says), "tp_ranks {args:?}: {stderr}");
    }
}

#[test]
fn the_synthetic_parts_are_the_whole_heads_and_shapes_are_checked_first() {
    // The example makes only the operand it does not load (a checkpoint's weight beside synthetic
    // hidden states allocates no synthetic weight): the parts equal the whole synthetic head's.
    use flashsampling::synthetic::{lm_head, try_lm_head, try_lm_head_hidden, try_lm_head_weight};
    let (hidden, weight) = lm_head(3, 16, 40, 7);
    assert_eq!(try_lm_head_weight(16, 40, 7).unwrap(), weight);
    assert_eq!(try_lm_head_hidden(3, 16, 40, 7).unwrap(), hidden);
    assert_eq!(try_lm_head(3, 16, 40, 7).unwrap(), (hidden, weight));
    assert!(matches!(try_lm_head_weight(16, 1 << 31, 7), Err(Error::TooLarge { .. })));
    assert!(matches!(try_lm_head_hidden(1 << 31, 16, 40, 7), Err(Error::TooLarge { .. })));
    assert!(matches!(try_lm_head_hidden(3, 12, 40, 7), Err(Error::HiddenNotAligned { .. })));
}
