//! Loading an LM head and hidden states from files (cargo feature `checkpoint`): a tensor by name from a
//! safetensors file or a sharded checkpoint (`*.safetensors.index.json`, as Hugging Face writes them),
//! and hidden states from a `.npy` file or a safetensors tensor.
//!
//! The kernels take bf16 or f16 (both operands of one type). A bf16 or f16 tensor loads as it is
//! ([`Values`]). An f32 one is a [`CheckpointError::Dtype`] unless the caller names a type to round it
//! to (`f32_to`: nearest, ties to even), which changes the logits slightly — the loader reports it in
//! [`Loaded::converted_from`]; [`Loaded::converted`] rounds bf16 to f16 or back, for hidden states and a
//! weight saved in different types. Safetensors files are memory-mapped, so only the tensor read is
//! paged in.

use std::path::{Path, PathBuf};

use half::{bf16, f16};

use crate::params::{ElementType, Matrix};

/// Why a checkpoint could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file cannot be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a valid safetensors, index or `.npy` file.
    #[error("{path}: not a valid {format} file: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What it should be.
        format: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// No tensor of that name (a few of the names there are listed).
    #[error("{path}: no tensor {name:?} (it has: {available})")]
    MissingTensor {
        /// The file (or index).
        path: PathBuf,
        /// The name asked for.
        name: String,
        /// Up to 8 of the names the file has.
        available: String,
    },
    /// A tensor that is not a matrix (`[rows, cols]`, or a vector: one row), or an empty one.
    #[error("{path}: tensor {name:?} has shape {shape:?}; a non-empty matrix [rows, cols] (or a vector) is needed")]
    Shape {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its shape.
        shape: Vec<usize>,
    },
    /// A dtype other than bf16 or f16 without permission to convert, or one that cannot be converted.
    #[error("{path}: tensor {name:?} is {dtype}; the kernels take bf16 or f16{hint}")]
    Dtype {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: String,
        /// What to do about it.
        hint: &'static str,
    },
}

/// Loaded values, row-major, in one of the kernels' element types.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// bfloat16.
    Bf16(Vec<bf16>),
    /// IEEE half.
    F16(Vec<f16>),
}

impl Values {
    /// The element type of the values.
    pub fn elem(&self) -> ElementType {
        match self {
            Values::Bf16(_) => ElementType::Bf16,
            Values::F16(_) => ElementType::F16,
        }
    }

    /// The values in `elem`: as they are, or each rounded to the nearest `elem` (ties to even; f16
    /// overflows to ±∞ beyond 65504).
    pub fn into_elem(self, elem: ElementType) -> Self {
        match (self, elem) {
            (Values::F16(v), ElementType::Bf16) => Values::Bf16(v.iter().map(|x| bf16::from_f32(x.to_f32())).collect()),
            (Values::Bf16(v), ElementType::F16) => Values::F16(v.iter().map(|x| f16::from_f32(x.to_f32())).collect()),
            (same, _) => same,
        }
    }
}

/// A loaded matrix in bf16 or f16.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// The values, row-major.
    pub values: Values,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// The dtype the file held when it was rounded to [`Loaded::elem`] (`None`: it held that type).
    pub converted_from: Option<&'static str>,
}

impl Loaded {
    /// The element type of the values.
    pub fn elem(&self) -> ElementType {
        self.values.elem()
    }

    /// The matrix view the samplers take, when the values are bf16.
    pub fn bf16(&self) -> Option<Matrix<'_, bf16>> {
        match &self.values {
            Values::Bf16(v) => Some(Matrix::new(v, self.rows, self.cols)),
            Values::F16(_) => None,
        }
    }

    /// The matrix view the samplers take, when the values are f16.
    pub fn f16(&self) -> Option<Matrix<'_, f16>> {
        match &self.values {
            Values::F16(v) => Some(Matrix::new(v, self.rows, self.cols)),
            Values::Bf16(_) => None,
        }
    }

    /// The values in `elem` ([`Values::into_elem`]), `converted_from` then naming the type they had.
    pub fn converted(self, elem: ElementType) -> Self {
        if self.elem() == elem {
            return self;
        }
        let from = self.converted_from.unwrap_or(self.elem().name());
        Self { values: self.values.into_elem(elem), converted_from: Some(from), ..self }
    }
}

type Result<T> = std::result::Result<T, CheckpointError>;

const CONVERT_HINT: &str = " (allow conversion, `--convert` in `./x.sh sample`, to round it)";

/// f32 little-endian bytes rounded to `to`.
fn round_f32(bytes: &[u8], to: ElementType) -> Values {
    let f = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    match to {
        ElementType::Bf16 => Values::Bf16(f.map(bf16::from_f32).collect()),
        ElementType::F16 => Values::F16(f.map(f16::from_f32).collect()),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io { path: path.to_path_buf(), source }
}

fn format_error(path: &Path, format: &'static str, reason: impl ToString) -> CheckpointError {
    CheckpointError::Format { path: path.to_path_buf(), format, reason: reason.to_string() }
}

/// Loads tensor `name` from a safetensors file, or from the shard a sharded checkpoint's index
/// (`*.index.json`, `{"weight_map": {name: file}}`, files relative to the index) names for it: bf16
/// and f16 as they are, f32 rounded to `f32_to` (else an error).
pub fn load_safetensors(path: &Path, name: &str, f32_to: Option<ElementType>) -> Result<Loaded> {
    if is_index(path) {
        let text = std::fs::read_to_string(path).map_err(io(path))?;
        let index: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format_error(path, "safetensors index", e))?;
        let map = index
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| format_error(path, "safetensors index", "no \"weight_map\" object"))?;
        let Some(file) = map.get(name) else {
            let available: Vec<&str> = map.keys().take(8).map(String::as_str).collect();
            return Err(CheckpointError::MissingTensor {
                path: path.to_path_buf(),
                name: name.to_string(),
                available: available.join(", "),
            });
        };
        let file =
            file.as_str().ok_or_else(|| format_error(path, "safetensors index", "a shard name is not a string"))?;
        // A shard is a safetensors file: an index naming an index (itself, or two naming each
        // other) would otherwise recurse without end.
        if is_index(Path::new(file)) {
            let reason = format!("the shard of {name:?} is {file:?}, another index; it must name a safetensors file");
            return Err(format_error(path, "safetensors index", reason));
        }
        let shard = path.parent().unwrap_or(Path::new(".")).join(file);
        return load_tensor_file(&shard, name, f32_to);
    }
    load_tensor_file(path, name, f32_to)
}

/// Whether `path` is read as a sharded checkpoint's index (its name ends in `.json`).
fn is_index(path: &Path) -> bool {
    path.to_string_lossy().ends_with(".json")
}

/// Tensor `name` of one safetensors file (no index).
fn load_tensor_file(path: &Path, name: &str, f32_to: Option<ElementType>) -> Result<Loaded> {
    let file = std::fs::File::open(path).map_err(io(path))?;
    // SAFETY: the map is read-only and lives only inside this function; a concurrent writer to the
    // file could change the bytes under it, which the parse below would see as a format error or
    // other values, never as memory unsafety (the bytes are only read and copied).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io(path))?;
    let tensors = safetensors::SafeTensors::deserialize(&map).map_err(|e| format_error(path, "safetensors", e))?;
    let view = tensors.tensor(name).map_err(|_| {
        let names: Vec<&str> = tensors.names().into_iter().take(8).collect();
        CheckpointError::MissingTensor { path: path.to_path_buf(), name: name.to_string(), available: names.join(", ") }
    })?;
    let (rows, cols) = matrix_shape(path, name, view.shape())?;
    let bytes = view.data();
    use safetensors::Dtype;
    let (values, from) = match (view.dtype(), f32_to) {
        (Dtype::BF16, _) => (Values::Bf16(words(bytes).map(bf16::from_bits).collect()), None),
        (Dtype::F16, _) => (Values::F16(words(bytes).map(f16::from_bits).collect()), None),
        (Dtype::F32, Some(to)) => (round_f32(bytes, to), Some("f32")),
        (other, _) => {
            let hint = if matches!(other, Dtype::F32) { CONVERT_HINT } else { "" };
            return Err(CheckpointError::Dtype {
                path: path.to_path_buf(),
                name: name.to_string(),
                dtype: format!("{other:?}"),
                hint,
            });
        }
    };
    Ok(Loaded { values, rows, cols, converted_from: from })
}

/// Little-endian 16-bit words.
fn words(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]))
}

/// `[rows, cols]` of a 2-D tensor, `[1, n]` of a vector; an empty one (a dimension of 0) is a
/// [`CheckpointError::Shape`] too: it holds nothing to sample with.
fn matrix_shape(path: &Path, name: &str, shape: &[usize]) -> Result<(usize, usize)> {
    let (rows, cols) = match *shape {
        [n] => (1, n),
        [rows, cols] => (rows, cols),
        _ => (0, 0),
    };
    if rows == 0 || cols == 0 {
        return Err(CheckpointError::Shape { path: path.to_path_buf(), name: name.to_string(), shape: shape.to_vec() });
    }
    Ok((rows, cols))
}

/// Loads hidden states `[B, D]`: a `.npy` file (by its extension), or tensor `name` (default
/// `"hidden_states"`) of a safetensors file.
///
/// `.npy`: versions 1–3, C order, little-endian `<f2` (f16, as it is) or `<f4` (f32, rounded to
/// `f32_to`, else an error; NumPy has no bf16 dtype of its own), 1-D (one row) or 2-D.
pub fn load_hidden(path: &Path, name: Option<&str>, f32_to: Option<ElementType>) -> Result<Loaded> {
    if path.extension().is_some_and(|e| e == "npy") {
        return load_npy(path, f32_to);
    }
    let name = name.unwrap_or("hidden_states");
    load_safetensors(path, name, f32_to)
}

fn load_npy(path: &Path, f32_to: Option<ElementType>) -> Result<Loaded> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    let bad = |reason: &str| format_error(path, ".npy", reason);
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("no \\x93NUMPY magic"));
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        _ => return Err(bad("unknown format version")),
    };
    let header = bytes.get(start..start + header_len).ok_or_else(|| bad("truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad("header is not text"))?;
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
        Some(rest)
    };
    let descr = field("descr").and_then(|r| r.strip_prefix('\'')).and_then(|r| r.split('\'').next());
    let descr = descr.ok_or_else(|| bad("no 'descr'"))?;
    if field("fortran_order").is_some_and(|r| r.starts_with("True")) {
        return Err(bad("Fortran order is not supported: save a C-ordered array"));
    }
    let shape = field("shape").and_then(|r| r.strip_prefix('(')).and_then(|r| r.split(')').next());
    let shape: Vec<usize> = shape
        .ok_or_else(|| bad("no 'shape'"))?
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| bad("shape is not a tuple of integers")))
        .collect::<Result<_>>()?;
    let (rows, cols) = matrix_shape(path, "array", &shape)?;
    let data = &bytes[start + header_len..];
    let (width, from) = match descr {
        "<f4" => (4, "f32"),
        "<f2" => (2, "f16"),
        other => {
            return Err(CheckpointError::Dtype {
                path: path.to_path_buf(),
                name: "array".into(),
                dtype: other.to_string(),
                hint: " (save it as float32 or float16)",
            });
        }
    };
    // The declared size, without wrapping: a header may declare any shape.
    let size = rows.checked_mul(cols).and_then(|n| n.checked_mul(width));
    if size != Some(data.len()) {
        return Err(bad(&format!("{} data bytes for shape {shape:?} of {descr}", data.len())));
    }
    let (values, converted_from) = match (width, f32_to) {
        (2, _) => (Values::F16(words(data).map(f16::from_bits).collect()), None),
        (_, Some(to)) => (round_f32(data, to), Some(from)),
        (_, None) => {
            return Err(CheckpointError::Dtype {
                path: path.to_path_buf(),
                name: "array".into(),
                dtype: descr.into(),
                hint: CONVERT_HINT,
            });
        }
    };
    Ok(Loaded { values, rows, cols, converted_from })
}
