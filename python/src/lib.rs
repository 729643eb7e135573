//! `flashsampling._flashsampling`: the native half of the Python package. The Python module
//! (`flashsampling/__init__.py`) converts arrays to bf16 bits and calls [`sample_cpu`] (NumPy arrays, the
//! CPU backend), or passes PyTorch CUDA tensors' addresses to [`cuda::sample_cuda`] (the GPU backend);
//! this side builds the Rust `SamplingParams` and samples.

mod cuda;

use flashsampling::controls::{RowPenalties, SparseAdjustments, TokenMask};
use flashsampling::params::LogProbs;
use flashsampling::{CpuBackend, Error, Matrix, SamplingParams};
use half::bf16;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyMemoryError, PyNotImplementedError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Validation errors become `ValueError`, a control that this backend does not take yet
/// (`Error::Unsupported`) `NotImplementedError`, CUDA errors (and CUDA-graph capture's) `RuntimeError`; all with
/// the Rust message.
fn to_py(e: Error) -> PyErr {
    match e {
        Error::Driver(_)
        | Error::Cublas(_)
        | Error::NoGpu(_)
        | Error::EmbeddedModule { .. }
        | Error::Capture { .. } => PyRuntimeError::new_err(e.to_string()),
        Error::Unsupported { .. } => PyNotImplementedError::new_err(e.to_string()),
        Error::HostMemory { .. } => PyMemoryError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// The controls of one call as Python passes them: the `controls` dict of `sample_cpu` and
/// `sample_cuda` (built by the Python module's `_controls`), its keys these fields' names. A missing
/// key takes the default shown; an unknown key is an error (see [`ControlArgs::from_dict`]).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct ControlArgs {
    temperature: f32,
    seed: u64,
    #[pyo3(default)]
    streams: Option<Vec<u64>>,
    #[pyo3(default)]
    sample: u32,
    #[pyo3(default)]
    positions: Option<Vec<u32>>,
    #[pyo3(default)]
    temperatures: Option<Vec<f32>>,
    #[pyo3(default)]
    seeds: Option<Vec<u64>>,
    #[pyo3(default = 1)]
    n: u32,
    #[pyo3(default = String::from("off"))]
    logprobs: String,
    #[pyo3(default)]
    top_k: Option<Vec<u32>>,
    #[pyo3(default)]
    top_p: Option<Vec<f32>>,
    #[pyo3(default)]
    min_p: Option<Vec<f32>>,
    #[pyo3(default)]
    softcap: Option<f32>,
    #[pyo3(default)]
    top_logprobs: u32,
    #[pyo3(default)]
    top_logprobs_raw: bool,
    #[pyo3(default)]
    exact_logsumexp: bool,
    /// `[b, ceil(v / 32)]` allowed-token words from the host.
    #[pyo3(default)]
    mask_words: Option<Vec<u32>>,
    /// `(lengths [B], token ids, biases)`: row `r`'s `(token, bias)` pairs are the next `lengths[r]`
    /// of the ids and biases.
    #[pyo3(default)]
    logit_bias: Option<(Vec<usize>, Vec<u32>, Vec<f32>)>,
    #[pyo3(default)]
    repetition_penalty: Option<Vec<f32>>,
    #[pyo3(default)]
    frequency_penalty: Option<Vec<f32>>,
    #[pyo3(default)]
    presence_penalty: Option<Vec<f32>>,
    #[pyo3(default)]
    prompt_tokens: Option<FlatRows<u32>>,
    #[pyo3(default)]
    output_tokens: Option<FlatRows<u32>>,
}

/// The keys [`ControlArgs`] takes.
const CONTROL_KEYS: [&str; 23] = [
    "temperature",
    "seed",
    "streams",
    "sample",
    "positions",
    "temperatures",
    "seeds",
    "n",
    "logprobs",
    "top_k",
    "top_p",
    "min_p",
    "softcap",
    "top_logprobs",
    "top_logprobs_raw",
    "exact_logsumexp",
    "mask_words",
    "logit_bias",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "prompt_tokens",
    "output_tokens",
];

impl ControlArgs {
    /// The controls in `dict`: every key must be one of [`CONTROL_KEYS`] (a misspelt one would
    /// otherwise fall back to its default silently).
    fn from_dict(dict: &Bound<'_, PyDict>) -> PyResult<Self> {
        for key in dict.keys() {
            let key: String = key.extract()?;
            if !CONTROL_KEYS.contains(&key.as_str()) {
                return Err(PyValueError::new_err(format!("unknown control {key:?}")));
            }
        }
        dict.extract()
    }

    /// The Rust `SamplingParams` for `b` rows and vocab size `v` (the mask has `ceil(v / 32)` words
    /// per row; the logit bias and penalties become sparse adjustments). Values are validated by the
    /// backend, not here; only the `logprobs` name is checked.
    fn params(self, b: usize, v: usize) -> PyResult<SamplingParams> {
        let adjustments = Penalties {
            logit_bias: self.logit_bias,
            repetition_penalty: self.repetition_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            prompt_tokens: self.prompt_tokens,
            output_tokens: self.output_tokens,
        }
        .build(b, v)
        .map_err(to_py)?;
        let mut params =
            SamplingParams::new(self.temperature, self.seed).with_sample(self.sample).with_samples_per_row(self.n);
        params.streams = self.streams;
        params.temperatures = self.temperatures;
        params.seeds = self.seeds;
        params.positions = self.positions;
        params.top_k = self.top_k;
        params.top_p = self.top_p;
        params.min_p = self.min_p;
        params.softcap = self.softcap;
        params.top_logprobs = self.top_logprobs;
        params.top_logprobs_raw = self.top_logprobs_raw;
        params.exact_logsumexp = self.exact_logsumexp;
        params.logprobs = match self.logprobs.as_str() {
            "off" => LogProbs::Off,
            "processed" => LogProbs::Processed,
            "processed_and_raw" => LogProbs::ProcessedAndRaw,
            other => {
                return Err(PyValueError::new_err(format!(
                    "logprobs = {other:?}: one of off, processed, processed_and_raw"
                )));
            }
        };
        if let Some(words) = self.mask_words {
            params.allowed = Some(TokenMask { words, words_per_row: v.div_ceil(32) });
        }
        params.adjustments = adjustments;
        Ok(params)
    }
}

/// Per-row token lists in flat form, as Python passes them: each row's length (`[B]`) and the rows'
/// ids concatenated.
type FlatRows<T> = (Vec<usize>, Vec<T>);

/// The logit bias and penalties of one call as Python passes them (the controls `logit_bias`,
/// `repetition_penalty`, `frequency_penalty`, `presence_penalty`, `prompt_tokens`, `output_tokens`):
/// per-row values of length B, token lists in flat form. Turned into one [`SparseAdjustments`] through
/// [`RowPenalties`], so the semantics are the library's.
struct Penalties {
    /// `(lengths [B], token ids, biases)`: row `r`'s `(token, bias)` pairs are the next `lengths[r]`
    /// of the ids and biases.
    logit_bias: Option<(Vec<usize>, Vec<u32>, Vec<f32>)>,
    repetition_penalty: Option<Vec<f32>>,
    frequency_penalty: Option<Vec<f32>>,
    presence_penalty: Option<Vec<f32>>,
    prompt_tokens: Option<FlatRows<u32>>,
    output_tokens: Option<FlatRows<u32>>,
}

/// Splits `flat` into `b` rows of `lengths` (a length mismatch otherwise, naming `buffer`).
fn split_rows<'a, T>(buffer: &'static str, lengths: &[usize], flat: &'a [T], b: usize) -> Result<Vec<&'a [T]>, Error> {
    if lengths.len() != b {
        return Err(Error::LengthMismatch { buffer, expected: b, actual: lengths.len() });
    }
    let total = lengths.iter().try_fold(0usize, |a, &l| a.checked_add(l));
    if total != Some(flat.len()) {
        return Err(Error::LengthMismatch { buffer, expected: total.unwrap_or(usize::MAX), actual: flat.len() });
    }
    let mut start = 0;
    Ok(lengths
        .iter()
        .map(|&l| {
            start += l;
            &flat[start - l..start]
        })
        .collect())
}

impl Penalties {
    /// Whether no keyword was given (then no adjustments are passed at all).
    fn is_empty(&self) -> bool {
        self.logit_bias.is_none()
            && self.repetition_penalty.is_none()
            && self.frequency_penalty.is_none()
            && self.presence_penalty.is_none()
            && self.prompt_tokens.is_none()
            && self.output_tokens.is_none()
    }

    /// The sparse adjustments of `b` rows over a vocabulary of `v`, built with
    /// [`SparseAdjustments::from_rows`]; `None` when nothing was given or no row has an entry (the
    /// same tokens as no adjustments). Every token id given (bias, prompt, output) must be below `v`,
    /// also where no penalty counts it.
    fn build(self, b: usize, v: usize) -> Result<Option<SparseAdjustments>, Error> {
        if self.is_empty() {
            return Ok(None);
        }
        let bias: Vec<(u32, f32)> = match &self.logit_bias {
            Some((_, tokens, values)) => {
                if tokens.len() != values.len() {
                    return Err(Error::LengthMismatch {
                        buffer: "logit-bias values (one per token id)",
                        expected: tokens.len(),
                        actual: values.len(),
                    });
                }
                tokens.iter().copied().zip(values.iter().copied()).collect()
            }
            None => Vec::new(),
        };
        let bias_rows = match &self.logit_bias {
            Some((lengths, ..)) => Some(split_rows("per-row logit biases", lengths, &bias, b)?),
            None => None,
        };
        let prompt_rows = match &self.prompt_tokens {
            Some((lengths, flat)) => Some(split_rows("per-row prompt tokens", lengths, flat, b)?),
            None => None,
        };
        let output_rows = match &self.output_tokens {
            Some((lengths, flat)) => Some(split_rows("per-row output tokens", lengths, flat, b)?),
            None => None,
        };
        // Row `r`'s value: the list's (its length checked first), else the default. Nothing is
        // allocated per row for a control that was not given.
        fn per_row<'a>(
            b: usize,
            buffer: &'static str,
            values: &'a Option<Vec<f32>>,
            default: f32,
        ) -> Result<impl Fn(usize) -> f32 + 'a, Error> {
            match values {
                Some(x) if x.len() != b => Err(Error::LengthMismatch { buffer, expected: b, actual: x.len() }),
                _ => Ok(move |r: usize| values.as_ref().map_or(default, |x| x[r])),
            }
        }
        let repetition = per_row(b, "per-row repetition penalties", &self.repetition_penalty, 1.0)?;
        let frequency = per_row(b, "per-row frequency penalties", &self.frequency_penalty, 0.0)?;
        let presence = per_row(b, "per-row presence penalties", &self.presence_penalty, 0.0)?;
        let mut rows = Vec::new();
        let bytes = b.saturating_mul(std::mem::size_of::<RowPenalties>());
        rows.try_reserve_exact(b).map_err(|_| Error::HostMemory { what: "per-row penalties", bytes })?;
        for row in 0..b {
            let p = RowPenalties {
                logit_bias: bias_rows.as_ref().map_or(&[][..], |r| r[row]),
                repetition_penalty: repetition(row),
                frequency_penalty: frequency(row),
                presence_penalty: presence(row),
                prompt: prompt_rows.as_ref().map_or(&[][..], |r| r[row]),
                output: output_rows.as_ref().map_or(&[][..], |r| r[row]),
            };
            let ids =
                p.logit_bias.iter().map(|&(t, _)| t).chain(p.prompt.iter().copied()).chain(p.output.iter().copied());
            if let Some(token) = ids.into_iter().find(|&t| t as usize >= v) {
                return Err(Error::TokenOutOfRange { row, token, v });
            }
            rows.push(p);
        }
        let adjustments = SparseAdjustments::from_rows(&rows)?;
        Ok(if adjustments.tokens.is_empty() { None } else { Some(adjustments) })
    }
}

/// Samples on the CPU backend. `hidden_bits` `[b, hidden_d]` and `weight_bits` `[v, weight_d]` hold
/// bf16 bits (f16 bits with `f16`); `controls` is the call's [`ControlArgs`]. Returns a dict of lists
/// ([`CpuBackend::sample_scored_rows`]: a row without a token is `u32::MAX`, not an error).
/// With `score_tokens` (one token per row) it scores them instead ([`CpuBackend::score`]): a dict
/// of the `Scores` fields.
#[pyfunction]
#[pyo3(signature = (hidden_bits, b, hidden_d, weight_bits, v, weight_d, controls, *, threads=None, f16=false, score_tokens=None))]
#[allow(clippy::too_many_arguments)]
fn sample_cpu<'py>(
    py: Python<'py>,
    hidden_bits: PyBuffer<u16>,
    b: usize,
    hidden_d: usize,
    weight_bits: PyBuffer<u16>,
    v: usize,
    weight_d: usize,
    controls: &Bound<'py, PyDict>,
    threads: Option<usize>,
    f16: bool,
    score_tokens: Option<Vec<u32>>,
) -> PyResult<Bound<'py, PyDict>> {
    // The operands first (shapes against the library's limits, lengths against the buffers), so
    // that nothing is built per row of a `b` that the buffers do not hold.
    flashsampling::params::check_inputs(
        (b, hidden_d, hidden_bits.item_count()),
        (v, weight_d, weight_bits.item_count()),
    )
    .map_err(to_py)?;
    let params = ControlArgs::from_dict(controls)?.params(b, v)?;
    let cpu = match threads {
        Some(t) => CpuBackend::new().with_threads(t),
        None => CpuBackend::new(),
    };
    // The words are bf16 bits, or f16 bits with `f16`. Long calls release the GIL.
    let (hw, ww) = (hidden_bits.to_vec(py)?, weight_bits.to_vec(py)?);
    /// Samples, or scores the given tokens.
    enum Out {
        Sampled(flashsampling::Samples),
        Scored(flashsampling::score::Scores),
    }
    fn run<T: flashsampling::Element>(
        cpu: &CpuBackend,
        (h, w): (Matrix<'_, T>, Matrix<'_, T>),
        params: &flashsampling::SamplingParams,
        tokens: Option<&[u32]>,
    ) -> flashsampling::Result<Out> {
        match tokens {
            Some(t) => cpu.score(h, w, params, t).map(Out::Scored),
            // A row without a token is -1 with its NaN / -inf score, as on the CUDA path (which
            // cannot raise without waiting for the GPU).
            None => cpu.sample_scored_rows(h, w, params).map(Out::Sampled),
        }
    }
    let tokens = score_tokens.as_deref();
    let out = if f16 {
        let (h, w): (Vec<half::f16>, Vec<half::f16>) =
            (hw.into_iter().map(half::f16::from_bits).collect(), ww.into_iter().map(half::f16::from_bits).collect());
        py.detach(|| run(&cpu, (Matrix::new(&h, b, hidden_d), Matrix::new(&w, v, weight_d)), &params, tokens))
    } else {
        let (h, w): (Vec<bf16>, Vec<bf16>) =
            (hw.into_iter().map(bf16::from_bits).collect(), ww.into_iter().map(bf16::from_bits).collect());
        py.detach(|| run(&cpu, (Matrix::new(&h, b, hidden_d), Matrix::new(&w, v, weight_d)), &params, tokens))
    }
    .map_err(to_py)?;
    let out = match out {
        Out::Sampled(out) => out,
        Out::Scored(s) => {
            let dict = PyDict::new(py);
            dict.set_item("logprobs", s.logprobs)?;
            dict.set_item("raw_logprobs", s.raw_logprobs)?;
            dict.set_item("logsumexp", s.logsumexp)?;
            dict.set_item("raw_logsumexp", s.raw_logsumexp)?;
            dict.set_item("top_logprobs", s.top_logprobs)?;
            dict.set_item("ranks", s.ranks)?;
            return Ok(dict);
        }
    };
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
    m.add_function(wrap_pyfunction!(cuda::sample_cuda, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::score_cuda, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::cuda_device_info, m)?)?;
    Ok(())
}
