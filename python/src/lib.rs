//! `flashsampling._flashsampling`: the native half of the Python package. The Python module
//! (`flashsampling/__init__.py`) converts arrays to bf16 bits and calls [`sample_cpu`]; this side builds
//! the Rust `SamplingParams`, samples on the CPU backend and returns plain lists.

use flashsampling::controls::TokenMask;
use flashsampling::params::LogProbs;
use flashsampling::{CpuBackend, Error, Matrix, SamplingParams};
use half::bf16;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Validation errors become `ValueError`, everything else `RuntimeError`, with the Rust message.
fn to_py(e: Error) -> PyErr {
    match e {
        Error::Driver(_) | Error::Cublas(_) | Error::NoGpu(_) => PyRuntimeError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// Samples on the CPU backend. `hidden_bits` `[b, hidden_d]` and `weight_bits` `[v, weight_d]` hold
/// bf16 bits (f16 bits with `f16`);
/// `mask_words` `[b, ceil(v / 32)]` the allowed tokens. Returns a dict of lists.
#[pyfunction]
#[pyo3(signature = (
    hidden_bits, b, hidden_d, weight_bits, v, weight_d, *, temperature, seed, streams=None, sample=0, temperatures=None,
    seeds=None, n=1, logprobs="off", top_k=None, top_p=None, min_p=None, softcap=None, top_logprobs=0,
    top_logprobs_raw=false, mask_words=None, threads=None, f16=false
))]
#[allow(clippy::too_many_arguments)]
fn sample_cpu<'py>(
    py: Python<'py>,
    hidden_bits: PyBuffer<u16>,
    b: usize,
    hidden_d: usize,
    weight_bits: PyBuffer<u16>,
    v: usize,
    weight_d: usize,
    temperature: f32,
    seed: u64,
    streams: Option<Vec<u64>>,
    sample: u32,
    temperatures: Option<Vec<f32>>,
    seeds: Option<Vec<u64>>,
    n: u32,
    logprobs: &str,
    top_k: Option<Vec<u32>>,
    top_p: Option<Vec<f32>>,
    min_p: Option<Vec<f32>>,
    softcap: Option<f32>,
    top_logprobs: u32,
    top_logprobs_raw: bool,
    mask_words: Option<Vec<u32>>,
    threads: Option<usize>,
    f16: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let mut params = SamplingParams::new(temperature, seed).with_sample(sample).with_samples_per_row(n);
    params.streams = streams;
    params.temperatures = temperatures;
    params.seeds = seeds;
    params.top_k = top_k;
    params.top_p = top_p;
    params.min_p = min_p;
    params.softcap = softcap;
    params.top_logprobs = top_logprobs;
    params.top_logprobs_raw = top_logprobs_raw;
    params.logprobs = match logprobs {
        "off" => LogProbs::Off,
        "processed" => LogProbs::Processed,
        "processed_and_raw" => LogProbs::ProcessedAndRaw,
        other => {
            return Err(PyValueError::new_err(format!(
                "logprobs = {other:?}: one of off, processed, processed_and_raw"
            )));
        }
    };
    if let Some(words) = mask_words {
        params.allowed = Some(TokenMask { words, words_per_row: v.div_ceil(32) });
    }
    let cpu = match threads {
        Some(t) => CpuBackend::new().with_threads(t),
        None => CpuBackend::new(),
    };
    // The words are bf16 bits, or f16 bits with `f16`. Long calls release the GIL.
    let (hw, ww) = (hidden_bits.to_vec(py)?, weight_bits.to_vec(py)?);
    let out = if f16 {
        let (h, w): (Vec<half::f16>, Vec<half::f16>) =
            (hw.into_iter().map(half::f16::from_bits).collect(), ww.into_iter().map(half::f16::from_bits).collect());
        py.detach(|| cpu.sample_scored(Matrix::new(&h, b, hidden_d), Matrix::new(&w, v, weight_d), &params))
    } else {
        let (h, w): (Vec<bf16>, Vec<bf16>) =
            (hw.into_iter().map(bf16::from_bits).collect(), ww.into_iter().map(bf16::from_bits).collect());
        py.detach(|| cpu.sample_scored(Matrix::new(&h, b, hidden_d), Matrix::new(&w, v, weight_d), &params))
    }
    .map_err(to_py)?;
    let dict = PyDict::new(py);
    dict.set_item("tokens", out.tokens)?;
    dict.set_item("scores", out.scores)?;
    dict.set_item("logprobs", out.logprobs)?;
    dict.set_item("raw_logprobs", out.raw_logprobs)?;
    dict.set_item("logsumexp", out.logsumexp)?;
    dict.set_item("top_logprobs", out.top_logprobs)?;
    Ok(dict)
}

#[pymodule]
fn _flashsampling(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sample_cpu, m)?)?;
    Ok(())
}
