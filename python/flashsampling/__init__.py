"""FlashSampling: exact categorical sampling from softmax(hidden @ weight.T / T).

``sample(hidden, weight, ...)`` draws one token per row (or ``n``) with the Gumbel-max trick, the same
noise and the same rules as the Rust library. NumPy arrays run on the CPU backend; PyTorch CUDA tensors
run on the GPU backend (the fused kernels, on the tensors' device and PyTorch's current stream; see
``sample_cuda``). PyTorch is optional: it is imported only when CUDA tensors come in.

Arrays: ``hidden`` ``[B, D]`` and ``weight`` ``[V, D]`` as float32 (rounded to bfloat16, ties to even:
the kernels take bf16 or f16), uint16 holding bfloat16 bits, ml_dtypes' bfloat16, or float16 (both arrays
float16: sampled in f16, no rounding); CPU tensors are taken as NumPy arrays
(bfloat16 as its bits). CUDA tensors: torch.bfloat16 or torch.float16 (both the same). Errors are
``ValueError`` (bad input, the Rust library's message), ``TypeError`` (a CUDA tensor of another dtype, or
hidden and weight of two dtypes), ``NotImplementedError`` (a control the
backend does not take yet) or ``RuntimeError`` (CUDA errors)."""

import dataclasses
import inspect
from typing import Any

import numpy as np

from ._flashsampling import cuda_device_info as _cuda_device_info
from ._flashsampling import sample_cpu as _sample_cpu
from ._flashsampling import sample_cuda as _sample_cuda
from ._flashsampling import score_cuda as _score_cuda

__all__ = ["sample", "sample_cuda", "score", "verify", "bf16_bits", "SamplingParams", "Samples", "Verified"]


@dataclasses.dataclass(frozen=True)
class Samples:
    """What ``sample`` returns, whatever the controls: NumPy arrays from NumPy input (the CPU backend), CUDA
    tensors on the input's device from CUDA tensors (the GPU backend), the same dtypes and shapes on both.

    ``tokens``: int32, ``[B]`` (``[B, n]`` with ``n``); -1 for a row without a token (its winning score NaN, e.g.
    from NaN inputs, or every token masked: ``scores`` says which, NaN or -inf) — on both backends.
    ``scores``: float32, the winning perturbed scores ``min(T, 1) · (logit / T + gumbel)`` (the logit when
    greedy). With ``logprobs`` "processed" or "processed_and_raw": ``logprobs`` (float32, shaped like
    ``tokens``; 0 for a greedy row) and ``logsumexp`` (float32 ``[B]``, of ``logits / T``; NaN for a greedy
    row), and with "processed_and_raw" ``raw_logprobs`` (under ``softmax(logits)``). With ``top_logprobs`` =
    k > 0: ``top_logprobs`` = ``(tokens, logprobs)``, int32 and float32 ``[B, k]``, each row's most likely
    tokens first (ties: the lower id first), -1 and NaN past a row's last entry. Entries not asked for are
    None."""

    tokens: Any
    scores: Any
    logprobs: Any = None
    raw_logprobs: Any = None
    logsumexp: Any = None
    top_logprobs: Any = None


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """The controls of a call as one value (the keyword form of ``sample`` stays): pass it as
    ``sample(hidden, weight, params=...)``; a control given both here and as a keyword is a TypeError. The fields
    and their meaning are ``sample``'s keywords."""

    temperature: Any = 1.0
    seed: Any = 0
    streams: Any = None
    sample: Any = 0
    positions: Any = None
    temperatures: Any = None
    seeds: Any = None
    n: Any = 1
    logprobs: Any = "off"
    top_k: Any = None
    top_p: Any = None
    min_p: Any = None
    softcap: Any = None
    top_logprobs: Any = 0
    top_logprobs_raw: Any = False
    allowed: Any = None
    logit_bias: Any = None
    repetition_penalty: Any = None
    frequency_penalty: Any = None
    presence_penalty: Any = None
    prompt_tokens: Any = None
    output_tokens: Any = None
    exact_logsumexp: Any = False


_CONTROLS = [f.name for f in dataclasses.fields(SamplingParams)]


def _given(names):
    """The control keywords of a call, from its ``locals()`` (the names are ``SamplingParams``' fields)."""
    return {k: names[k] for k in _CONTROLS}


def _with_params(fn, params, given):
    """``given`` (a call's control keywords) with ``params``' values, after checking that no keyword was given too."""
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a flashsampling.SamplingParams, not {type(params).__name__}")
    defaults = {k: p.default for k, p in inspect.signature(fn).parameters.items()}
    clash = [k for k in _CONTROLS if given[k] is not defaults[k] and not _same_default(given[k], defaults[k])]
    if clash:
        raise TypeError(f"{', '.join(clash)} given both in params and as keywords")
    return {k: getattr(params, k) for k in _CONTROLS}


def _same_default(value, default):
    """Whether ``value`` is the keyword's default (scalars compared by value; arrays never are)."""
    try:
        return type(value) is type(default) and bool(value == default)
    except (TypeError, ValueError):
        return False


def bf16_bits(x):
    """bfloat16 bits (uint16) of an array: float32 rounded to nearest even, uint16 and bfloat16 as they are."""
    a = np.asarray(x)
    if a.dtype == np.uint16:
        return np.ascontiguousarray(a)
    if a.dtype.itemsize == 2 and a.dtype.name == "bfloat16":  # ml_dtypes
        return np.ascontiguousarray(a).view(np.uint16)
    if a.dtype != np.float32:
        raise ValueError(f"dtype {a.dtype}: pass float32, uint16 (bfloat16 bits) or bfloat16")
    u = np.ascontiguousarray(a).view(np.uint32).astype(np.uint64)
    nan = np.isnan(a)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, np.uint16(0x7FC0), rounded)


def _is_torch_tensor(x):
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr")


def _is_torch_cuda(x):
    return _is_torch_tensor(x) and getattr(getattr(x, "device", None), "type", None) == "cuda"


def _list(x):
    """A per-row list as plain Python numbers (from a list, a NumPy array or a tensor)."""
    if x is None:
        return None
    if hasattr(x, "tolist"):
        x = x.tolist()
    return [y.item() if hasattr(y, "item") else y for y in x]


def _mask_words(allowed, b, v):
    """Allowed tokens as uint32 words (bit j of word w = token 32w + j), a flat list; from a boolean
    ``[B, V]`` array or ``[B, ceil(V/32)]`` words. A tensor is copied to the host first."""
    if allowed is None:
        return None
    if _is_torch_tensor(allowed):
        allowed = allowed.detach().cpu().numpy()
    a = np.asarray(allowed)
    if a.dtype == np.bool_:
        if a.shape != (b, v):
            raise ValueError(f"allowed must be [B, V] = {(b, v)} booleans; got {a.shape}")
        padded = np.zeros((b, -(-v // 32) * 32), dtype=np.uint64)
        padded[:, :v] = a
        # Bit j of word w is token 32w + j.
        words = (padded.reshape(b, -1, 32) << np.arange(32, dtype=np.uint64)).sum(axis=-1)
        return words.astype(np.uint32).reshape(-1).tolist()
    return np.asarray(a, dtype=np.uint32).reshape(-1).tolist()


def _device_mask_words(torch, allowed, b, v, device):
    """A CUDA ``allowed`` as int32 words ``[B, ceil(V/32)]`` on ``device`` (bit j of word w = token 32w + j),
    built on PyTorch's current stream with no host copy: from booleans ``[B, V]``, or int32/uint32 words
    taken as they are."""
    if allowed.device != device:
        raise ValueError(f"allowed is on {allowed.device}, the tensors on {device}: it must be on their device")
    words = -(-v // 32)
    if allowed.dtype == torch.bool:
        if tuple(allowed.shape) != (b, v):
            raise ValueError(f"allowed must be [B, V] = {(b, v)} booleans; got {tuple(allowed.shape)}")
        padded = torch.zeros((b, words * 32), dtype=torch.int64, device=device)
        padded[:, :v] = allowed
        bits = torch.arange(32, dtype=torch.int64, device=device)
        w = (padded.view(b, words, 32) << bits).sum(dim=-1)  # in [0, 2^32)
        return torch.where(w >= 2**31, w - 2**32, w).to(torch.int32).contiguous()
    if allowed.dtype in (torch.int32, getattr(torch, "uint32", torch.int32)):
        if allowed.numel() != b * words:
            raise ValueError(f"allowed words must be [B, ceil(V/32)] = {(b, words)}; got {tuple(allowed.shape)}")
        return allowed.reshape(-1).view(torch.int32).contiguous()
    raise TypeError(f"allowed is {allowed.dtype}: a CUDA mask is torch.bool [B, V] or int32/uint32 words")


def _is_bool(x):
    return isinstance(x, (bool, np.bool_)) or str(getattr(x, "dtype", "")) in ("bool", "torch.bool")


def _scalar(x):
    """A 0-d NumPy array or tensor as its Python number (anything else as it is)."""
    if _is_torch_tensor(x) and x.dim() == 0:
        return x.item()
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return x.item()
    return x


def _int(x, name):
    """An integer control: a Python or NumPy integer, or a 0-d integer array or tensor. A float (even
    2.0), a string or a bool is a TypeError: nothing is rounded or parsed silently."""
    if not _is_bool(x):
        x = _scalar(x)
        if isinstance(x, (int, np.integer)) and not _is_bool(x):
            return int(x)
    raise TypeError(f"{name} must be an integer; got {type(x).__name__} {x!r}")


def _float(x, name):
    """A real-number control: a Python or NumPy int or float, or a 0-d real array or tensor; a string or
    a bool is a TypeError."""
    if not _is_bool(x):
        x = _scalar(x)
        if isinstance(x, (int, float, np.integer, np.floating)) and not _is_bool(x):
            return float(x)
    raise TypeError(f"{name} must be a real number; got {type(x).__name__} {x!r}")


def _controls(b, temperature, seed, streams, sample, temperatures, seeds, n, logprobs, top_k, top_p, min_p,
              softcap, top_logprobs, top_logprobs_raw, mask_words, penalties, positions=None, exact_logsumexp=False):
    """The ``controls`` dict of the native calls (their ``ControlArgs``: one key per control). Integer
    controls must be integers (``_int``), per-row integer lists too (the native side refuses floats)."""
    return dict(
        temperature=_float(temperature, "temperature"), seed=_int(seed, "seed"), streams=_list(streams),
        sample=_int(sample, "sample"), temperatures=_list(temperatures), seeds=_list(seeds), n=_int(n, "n"),
        logprobs=logprobs, top_k=_list(top_k), top_p=_list(top_p), min_p=_list(min_p),
        softcap=None if softcap is None else _float(softcap, "softcap"),
        top_logprobs=_int(top_logprobs, "top_logprobs"), top_logprobs_raw=bool(top_logprobs_raw),
        exact_logsumexp=bool(exact_logsumexp), mask_words=mask_words, positions=_list(positions), **penalties,
    )


def _device_row_words(torch, device, b, n, temperature, seed, streams, sample, positions, temperatures, seeds):
    """The per-row parameter words (the Rust library's ``gpu::row_params_words``: seed, stream, the temperature's
    transform, sample index | request << 32; int64 ``[B·n, 4]``) built on ``device`` with no host synchronization,
    when a key control (``temperatures``, ``seeds``, ``streams``, ``positions``) is a CUDA tensor there; else None
    (the controls go to the native side as lists). On the device nothing can raise: a NaN or negative temperature
    is greedy (as the kernels' transform treats it), and sample indices are taken modulo 2^31."""
    keys = (temperatures, seeds, streams, positions)
    if not any(_is_torch_cuda(x) for x in keys):
        return None
    for name, x in zip(("temperatures", "seeds", "streams", "positions"), keys):
        if x is not None and not (_is_torch_cuda(x) and x.device == device and x.shape == (b,)):
            raise ValueError(f"{name}: with per-row controls as CUDA tensors, each must be a [B] = [{b}] tensor on "
                             f"{device} (or None)")
    i64 = dict(dtype=torch.int64, device=device)
    rows = torch.arange(b, **i64)
    scalar = _float(temperature, "temperature")
    if temperatures is None and not (scalar >= 0 and scalar != float("inf")):
        # A host scalar is checked as the native side checks it (only device values cannot be).
        raise ValueError(f"temperature {scalar} is invalid: it must be finite and >= 0 (0 = greedy)")
    t = (temperatures.to(torch.float32) if temperatures is not None
         else torch.full((b,), scalar, dtype=torch.float32, device=device))
    sampling = t >= torch.finfo(torch.float32).tiny  # False for NaN, negative, zero and subnormal T: greedy
    one = torch.ones_like(t)
    inv = torch.where(sampling, one / torch.where(sampling, t, one), torch.full_like(t, float("inf")))
    noise = torch.where(sampling, torch.where(t < 1, t, one), torch.zeros_like(t))
    transform = (inv.view(torch.int32).to(torch.int64) & 0xFFFFFFFF) | (noise.view(torch.int32).to(torch.int64) << 32)
    s = _int(seed, "seed")
    if not 0 <= s < 1 << 64:
        raise ValueError(f"seed {s} is out of range (0 .. 2^64)")
    # Seeds and streams are u64 keys: int64 tensors carry their bits.
    seed_w = seeds.to(torch.int64) if seeds is not None else torch.full((b,), s - (1 << 64) * (s >> 63), **i64)
    stream_w = streams.to(torch.int64) if streams is not None else rows
    first = positions.to(torch.int64) if positions is not None else torch.full((b,), _int(sample, "sample"), **i64)
    j = torch.arange(n, **i64)
    index = ((first[:, None] + j[None, :]) & 0x7FFFFFFF) | (rows[:, None] << 32)
    words = torch.stack([seed_w[:, None].expand(b, n), stream_w[:, None].expand(b, n),
                         transform[:, None].expand(b, n), index], dim=2)
    return words.reshape(b * n, 4).contiguous()


def _per_row_floats(x, b, name):
    """A per-row float control: a number applies to every row; a list (array, tensor) of numbers is taken
    as it is (its length is checked natively). A string, bytes or a bool is a TypeError (``_float``)."""
    if x is None:
        return None
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a real number or a per-row list of them; got {type(x).__name__} {x!r}")
    if isinstance(x, (int, float, np.number, bool, np.bool_)) or getattr(x, "ndim", None) == 0:
        return [_float(x, name)] * b
    return [_float(y, f"{name}[{r}]") for r, y in enumerate(_list(x))]


def _token_ids(row, what):
    """A row's token ids (a list, NumPy array or tensor of integers) as a list of Python ints; negative
    ids, ids past uint32 and non-integers raise ValueError (ids ≥ V are reported natively)."""
    if _is_torch_tensor(row):
        row = row.detach().cpu().numpy()
    a = np.asarray(row)
    if a.ndim != 1:
        raise ValueError(f"{what} has shape {a.shape}: each row is a 1-D list of token ids (or None)")
    if a.size == 0:
        return []
    if a.dtype.kind not in "iu":
        raise ValueError(f"{what}: token ids must be integers; got {a.dtype}")
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or hi >= 2**32:
        raise ValueError(f"{what}: token id {lo if lo < 0 else hi} is out of range")
    return a.tolist()


def _token_rows(rows, name):
    """Per-row token lists (B entries, each a list, array or tensor of ids, or None = empty) in the native
    side's flat form: (lengths [B], ids concatenated). The number of rows is checked natively."""
    if rows is None:
        return None
    if _is_torch_tensor(rows):
        rows = rows.detach().cpu().numpy()
    lengths, flat = [], []
    for r, row in enumerate(rows):
        ids = [] if row is None else _token_ids(row, f"{name}[{r}]")
        lengths.append(len(ids))
        flat.extend(ids)
    return lengths, flat


def _bias_token(t, what):
    """A logit_bias key: an integer token id, or its decimal string (as in OpenAI's JSON)."""
    if isinstance(t, str) and t.strip().isdigit():
        t = int(t)
    if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
        raise ValueError(f"{what}: token id {t!r} is not an integer")
    if not 0 <= int(t) < 2**32:
        raise ValueError(f"{what}: token id {int(t)} is out of range")
    return int(t)


def _logit_bias(logit_bias, b):
    """OpenAI-style biases: B dicts {token id: bias} (None = no bias on that row; a single dict applies to
    every row), in the native side's flat form: (lengths [B], ids, biases)."""
    if logit_bias is None:
        return None
    if isinstance(logit_bias, dict):
        logit_bias = [logit_bias] * b
    lengths, ids, values = [], [], []
    for r, row in enumerate(logit_bias):
        row = {} if row is None else row
        if not isinstance(row, dict):
            raise ValueError(f"logit_bias[{r}] is a {type(row).__name__}: each row is a dict {{token id: bias}} "
                             "(or None)")
        lengths.append(len(row))
        for t, x in row.items():
            ids.append(_bias_token(t, f"logit_bias[{r}]"))
            values.append(float(x))
    return lengths, ids, values


def _penalties(b, logit_bias=None, repetition_penalty=None, frequency_penalty=None, presence_penalty=None,
               prompt_tokens=None, output_tokens=None):
    """The logit bias and penalty keywords in the native side's form (each None when not given)."""
    return dict(
        logit_bias=_logit_bias(logit_bias, b),
        repetition_penalty=_per_row_floats(repetition_penalty, b, "repetition_penalty"),
        frequency_penalty=_per_row_floats(frequency_penalty, b, "frequency_penalty"),
        presence_penalty=_per_row_floats(presence_penalty, b, "presence_penalty"),
        prompt_tokens=_token_rows(prompt_tokens, "prompt_tokens"),
        output_tokens=_token_rows(output_tokens, "output_tokens"),
    )


def _cpu_tensor_to_numpy(x):
    """A CPU tensor as a NumPy array (bfloat16 as its uint16 bits)."""
    import torch

    x = x.detach().contiguous()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    return x.numpy()


def sample(hidden, weight, temperature=1.0, seed=0, *, streams=None, sample=0, positions=None, temperatures=None,
           seeds=None,
           n=1, logprobs="off", top_k=None, top_p=None, min_p=None, softcap=None, top_logprobs=0,
           top_logprobs_raw=False, exact_logsumexp=False, allowed=None, logit_bias=None, repetition_penalty=None, frequency_penalty=None,
           presence_penalty=None, prompt_tokens=None, output_tokens=None, threads=None, params=None):
    """Tokens drawn from softmax(hidden @ weight.T / T), one per row (``[B]``) or ``n`` per row (``[B, n]``), as a
    ``Samples`` (``.tokens``, ``.scores``, and the log-probabilities asked for).

    Per-row controls (lists of length B): ``temperatures`` (0 = greedy for that row), ``seeds``,
    ``streams``, ``top_k`` (0 = off), ``top_p`` (1 = off), ``min_p`` (0 = off). ``softcap`` soft-caps the
    logits; ``allowed`` is a boolean ``[B, V]`` array of allowed tokens (or ``[B, ceil(V/32)]`` uint32 words,
    bit j of word w = token 32w + j). Sparse logit adjustments, with vLLM's definitions (applied after
    ``softcap``, before ``allowed`` and the temperature): ``logit_bias`` is a list of B dicts
    ``{token_id: bias}`` (None: none on that row; one dict: every row), added to the logits;
    ``repetition_penalty`` (> 0, 1 = off; 0 is read as 1) divides a positive and multiplies a negative
    logit of every token in the row's ``prompt_tokens`` or ``output_tokens``; ``frequency_penalty``
    subtracts its value times the token's count in ``output_tokens``, ``presence_penalty`` its value once
    for a token in ``output_tokens``. The penalties are numbers (every row) or lists of length B; the token
    lists are B lists (arrays, tensors) of ids, or None entries. Bias first, then the repetition penalty,
    then frequency and presence. ``logprobs`` is "off", "processed" or "processed_and_raw";
    ``top_logprobs`` asks for each row's most likely tokens (see ``Samples`` for what comes back).
    ``exact_logsumexp`` (GPU) sums each row's log-sum-exps exactly, in integer bins, so log-probabilities are the
    same bits however the vocabulary is split (tensor-parallel ranks included) and whatever batch a row is in; the
    call then materializes its ``[B, V]`` float32 logits (with top-k / top-p / min-p or ``top_logprobs``, every row
    goes through the exact fallback; not over ranks yet). The CPU backend's sums are float64 and ignore it.
    ``params`` (a ``SamplingParams``) gives the controls as one value instead of keywords.

    NumPy arrays (and CPU tensors) run on the CPU backend and give NumPy arrays. PyTorch CUDA tensors run on the
    GPU backend, see ``sample_cuda``.
    """
    controls = _given(locals())
    if params is not None:
        return globals()["sample"](hidden, weight, **_with_params(globals()["sample"], params, controls),
                                   threads=threads)
    if _is_torch_cuda(hidden) or _is_torch_cuda(weight):
        if threads is not None:
            raise ValueError("threads is a CPU backend setting; CUDA tensors run on the GPU backend")
        return sample_cuda(hidden, weight, **controls)
    h, w, f16 = _cpu_operands(hidden, weight)
    (b, d), (v, wd) = h.shape, w.shape
    mask_words = _mask_words(allowed, b, v)
    penalties = _penalties(b, logit_bias, repetition_penalty, frequency_penalty, presence_penalty, prompt_tokens,
                           output_tokens)
    controls = _controls(b, temperature, seed, streams, sample, temperatures, seeds, n, logprobs, top_k, top_p, min_p,
                         softcap, top_logprobs, top_logprobs_raw, mask_words, penalties, positions=positions,
                         exact_logsumexp=exact_logsumexp)
    out = _sample_cpu(h.reshape(-1), b, d, w.reshape(-1), v, wd, controls, threads=threads, f16=f16)
    shape = (b,) if n == 1 else (b, n)

    def floats(key, shape):
        return None if out[key] is None else np.asarray(out[key], dtype=np.float32).reshape(shape)

    return Samples(
        # int32 like the CUDA path's tensors (a row without a token: -1 on both).
        tokens=np.asarray(out["tokens"], dtype=np.uint32).reshape(shape).view(np.int32),
        scores=floats("scores", shape),
        logprobs=floats("logprobs", shape),
        raw_logprobs=floats("raw_logprobs", shape),
        logsumexp=floats("logsumexp", (b,)),
        top_logprobs=_top_arrays(out["top_logprobs"], b, _int(top_logprobs, "top_logprobs")),
    )


@dataclasses.dataclass(frozen=True)
class Verified:
    """What ``verify`` returns: ``accepted`` (int32 ``[R]``, accepted drafts per request), ``tokens`` (per request,
    an int32 array of its emitted tokens: the accepted drafts, then the target's next token) and, with ``logprobs``
    asked for, ``logprobs`` (and ``raw_logprobs`` with "processed_and_raw"): per request, float32 arrays of the
    emitted tokens' log-probabilities, what plain decoding reports for them; None otherwise."""

    accepted: Any
    tokens: Any
    logprobs: Any = None
    raw_logprobs: Any = None


def _top_arrays(rows, b, k):
    """The native side's top log-probabilities (a list per row of (token, log-probability) pairs) as the CUDA
    path gives them: int32 tokens and float32 log-probabilities ``[B, k]``, -1 and NaN past a row's last."""
    if rows is None:
        return None
    tokens = np.full((b, k), -1, dtype=np.int32)
    logprobs = np.full((b, k), np.nan, dtype=np.float32)
    for r, row in enumerate(rows):
        for j, (t, lp) in enumerate(row[:k]):
            tokens[r, j], logprobs[r, j] = t, lp
    return tokens, logprobs


def _cpu_operands(hidden, weight):
    """The CPU backend's operands: contiguous bf16 bits (or f16 bits when both are float16) of ``hidden``
    ``[B, D]`` (a 1-d row is one row) and ``weight`` ``[V, D]``, and whether they are f16."""
    if _is_torch_tensor(hidden):
        hidden = _cpu_tensor_to_numpy(hidden)
    if _is_torch_tensor(weight):
        weight = _cpu_tensor_to_numpy(weight)
    f16 = np.asarray(hidden).dtype == np.float16 and np.asarray(weight).dtype == np.float16
    if f16:
        h, w = (np.ascontiguousarray(np.asarray(x)).view(np.uint16) for x in (hidden, weight))
    else:
        h, w = bf16_bits(hidden), bf16_bits(weight)
    if h.ndim == 1:
        h = h[None, :]
    if h.ndim != 2 or w.ndim != 2:
        raise ValueError(f"hidden must be [B, D] and weight [V, D]; got shapes {h.shape} and {w.shape}")
    return np.ascontiguousarray(h), np.ascontiguousarray(w), f16


def score(hidden, weight, tokens, temperature=1.0, *, temperatures=None, top_k=None, top_p=None, min_p=None,
          softcap=None, top_logprobs=0, top_logprobs_raw=False, exact_logsumexp=False, allowed=None, logit_bias=None, repetition_penalty=None,
          frequency_penalty=None, presence_penalty=None, prompt_tokens=None, output_tokens=None, threads=None):
    """The log-probabilities of one given token per row (the Rust library's ``CpuBackend::score``), under the
    controls ``sample`` takes (same keywords and definitions; noise keys do not matter). Returns a dict of float32
    ``[B]`` arrays: ``logprobs`` (processed: after soft-cap, adjustments, mask, temperature, top-k/top-p/min-p;
    -inf for a token they remove; a greedy row gives 0 for its argmax, -inf otherwise), ``raw_logprobs``
    (``log softmax(logits)[token]``), ``logsumexp`` (processed, NaN when greedy) and ``raw_logsumexp``. With
    ``top_logprobs`` = k > 0 also ``top_logprobs`` (each row's top k as ``sample`` gives them: int32 tokens and
    float32 log-probabilities ``[B, k]``, -1 / NaN padded) and ``ranks`` (int32 ``[B]``: the token's place in that
    order, 1 = first). Scoring the tokens a call sampled gives exactly the log-probabilities it reported (on the GPU
    under top-k / top-p / min-p the raw ones within f32 rounding where truncation changed the sample: scoring draws
    with its own keys).

    With PyTorch CUDA tensors the GPU backend scores in its fused pass, on the current stream, without waiting:
    the four results are float32 CUDA tensors ``[B]`` (views of one ``[4, B]`` tensor), with ``top_logprobs`` =
    k > 0 ``top_logprobs`` a pair of CUDA tensors (int32 tokens and float32 log-probabilities ``[B, k]``, -1 / NaN
    padded) and ``ranks`` an int32 CUDA tensor ``[B]`` (0 for an id outside the vocabulary), else both None;
    ``tokens`` may be an integer CUDA tensor ``[B]`` (not checked on the host: an id outside ``0 .. V - 1``
    scores NaN) or a list (checked). Top-k / top-p / min-p are scored over each row's kept set, as sampling
    certifies or its fallback finds it; a call inside a CUDA-graph capture raises RuntimeError (scoring is not capturable,
    and a scoring call between a ``sample`` warm-up and its capture may make that capture refuse)."""
    if _is_torch_cuda(hidden) or _is_torch_cuda(weight):
        adjust = (logit_bias, repetition_penalty, frequency_penalty, presence_penalty, prompt_tokens, output_tokens)
        return _score_cuda_tensors(hidden, weight, tokens, temperature, temperatures, top_k, top_p, min_p, softcap,
                                   top_logprobs, top_logprobs_raw, allowed, adjust, exact_logsumexp)
    h, w, f16 = _cpu_operands(hidden, weight)
    (b, d), (v, wd) = h.shape, w.shape
    toks = [_int(t, "tokens") for t in _list(tokens)]
    if len(toks) != b:
        raise ValueError(f"tokens: one per row ({b} rows); got {len(toks)}")
    if any(t < 0 or t >= v for t in toks):
        raise ValueError(f"tokens: every id must be in 0 .. {v - 1} (V = {v})")
    penalties = _penalties(b, logit_bias, repetition_penalty, frequency_penalty, presence_penalty, prompt_tokens,
                           output_tokens)
    k = _int(top_logprobs, "top_logprobs")
    controls = _controls(b, temperature, 0, None, 0, temperatures, None, 1, "off", top_k, top_p, min_p, softcap, k,
                         top_logprobs_raw, _mask_words(allowed, b, v), penalties, exact_logsumexp=exact_logsumexp)
    out = _sample_cpu(h.reshape(-1), b, d, w.reshape(-1), v, wd, controls, threads=threads, f16=f16,
                      score_tokens=toks)
    res = {key: np.asarray(out[key], dtype=np.float32) for key in ("logprobs", "raw_logprobs", "logsumexp",
                                                                   "raw_logsumexp")}
    res["top_logprobs"] = _top_arrays(out["top_logprobs"], b, k)
    res["ranks"] = None if out["ranks"] is None else np.asarray(out["ranks"], dtype=np.int32)
    return res


_checked_devices = set()


def _check_device(torch, ordinal):
    """Opens the GPU backend of device ``ordinal`` once and checks that it is the GPU PyTorch calls
    ``cuda:ordinal`` (same PCI location), so that a different device order of the CUDA runtime and
    driver API cannot pair tensors of one GPU with kernels on another."""
    if ordinal in _checked_devices:
        return
    info = _cuda_device_info(ordinal)
    props = torch.cuda.get_device_properties(ordinal)
    keys = ("pci_domain_id", "pci_bus_id", "pci_device_id")
    theirs = tuple(getattr(props, k, None) for k in keys)
    ours = tuple(info[k] for k in keys)
    if None not in theirs and tuple(int(x) for x in theirs) != ours:
        raise RuntimeError(f"cuda:{ordinal} is PCI {theirs} to PyTorch but {ours} to the CUDA driver API "
                           "(CUDA_DEVICE_ORDER differs?); flashsampling would use another GPU")
    _checked_devices.add(ordinal)


def _check_tensor(torch, name, t):
    if not _is_torch_tensor(t):
        raise TypeError(f"{name} is a {type(t).__name__}: with CUDA tensors, hidden and weight must both be "
                        "PyTorch CUDA tensors on one device (or both NumPy arrays for the CPU backend)")
    if t.device.type != "cuda":
        raise ValueError(f"{name} is on {t.device}: hidden and weight must both be CUDA tensors on one device")
    if t.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"{name} is {t.dtype}: the GPU kernels take torch.bfloat16 or torch.float16")


def _check_rows(name, t):
    rows, cols = t.shape
    row_stride, col_stride = t.stride()
    if (cols > 1 and col_stride != 1) or (rows > 1 and row_stride != cols):
        raise ValueError(f"{name} {tuple(t.shape)} has strides {tuple(t.stride())}: the GPU kernels need "
                         f"contiguous rows (strides ({cols}, 1)); pass {name}.contiguous()")


def _cuda_operands(torch, hidden, weight):
    """Checks PyTorch CUDA operands (one device, one dtype of bf16 / f16, ``[B, D]`` and ``[V, D]``,
    rows the kernels can read); returns them (a 1-D ``hidden`` as one row) and the device ordinal."""
    _check_tensor(torch, "hidden", hidden)
    _check_tensor(torch, "weight", weight)
    if hidden.device != weight.device:
        raise ValueError(f"hidden is on {hidden.device} and weight on {weight.device}: they must be on one device")
    if hidden.dtype != weight.dtype:
        raise TypeError(f"hidden is {hidden.dtype} and weight {weight.dtype}: both must be torch.bfloat16 or both "
                        "torch.float16 (convert one with .to(other.dtype))")
    if hidden.dim() == 1:
        hidden = hidden.unsqueeze(0)
    if hidden.dim() != 2 or weight.dim() != 2:
        raise ValueError(f"hidden must be [B, D] and weight [V, D]; got shapes {tuple(hidden.shape)} and "
                         f"{tuple(weight.shape)}")
    _check_rows("hidden", hidden)
    _check_rows("weight", weight)
    device = hidden.device
    return hidden, weight, device.index if device.index is not None else torch.cuda.current_device()


def _score_cuda_tensors(hidden, weight, tokens, temperature, temperatures, top_k, top_p, min_p, softcap,
                        top_logprobs, top_logprobs_raw, allowed, adjust, exact_logsumexp):
    """``score`` on PyTorch CUDA tensors (the GPU backend's fused pass, on the current stream)."""
    import torch
    hidden, weight, ordinal = _cuda_operands(torch, hidden, weight)
    (b, d), (v, wd) = hidden.shape, weight.shape
    penalties = _penalties(b, *adjust)
    device = hidden.device
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("flashsampling.score cannot be recorded into a CUDA graph (its per-row parameters are "
                           "uploaded from the host every call): call it outside the capture")
    integer = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
    if _is_torch_cuda(tokens):
        if tokens.device != device or tokens.dim() != 1 or tokens.numel() != b or tokens.dtype not in integer:
            raise ValueError(f"tokens: an integer CUDA tensor [B] = [{b}] on {device}; got {tuple(tokens.shape)} "
                             f"{tokens.dtype} on {tokens.device}")
    else:
        toks = [_int(t, "tokens") for t in _list(tokens)]
        if len(toks) != b:
            raise ValueError(f"tokens: one per row ({b} rows); got {len(toks)}")
        if any(t < 0 or t >= v for t in toks):
            raise ValueError(f"tokens: every id must be in 0 .. {v - 1} (V = {v})")
        tokens = torch.tensor(toks, dtype=torch.int32)
    device_mask = _is_torch_cuda(allowed)
    mask_words = None if device_mask else _mask_words(allowed, b, v)
    k = _int(top_logprobs, "top_logprobs")
    with torch.cuda.device(ordinal):
        _check_device(torch, ordinal)
        # Ids past int32 (or negative) stay out of range as int32 words (-1 is u32::MAX): they score NaN.
        toks = tokens.to(device=device, dtype=torch.int64).clamp(-1, 2**31 - 1).to(torch.int32).contiguous()
        mask = _device_mask_words(torch, allowed, b, v, device) if device_mask else None
        out = torch.empty((4, b), dtype=torch.float32, device=device)
        top = None
        if k > 0:
            top = (torch.empty((b, k), dtype=torch.int32, device=device),
                   torch.empty((b, k), dtype=torch.float32, device=device),
                   torch.empty(b, dtype=torch.int32, device=device))
        controls = _controls(b, temperature, 0, None, 0, temperatures, None, 1, "off", top_k, top_p, min_p, softcap,
                             k, top_logprobs_raw, mask_words, penalties, exact_logsumexp=exact_logsumexp)
        _score_cuda(ordinal, torch.cuda.current_stream(ordinal).cuda_stream, hidden.data_ptr(), b, d,
                    weight.data_ptr(), v, wd, toks.data_ptr(), out.data_ptr(), controls,
                    f16=hidden.dtype == torch.float16, mask_ptr=None if mask is None else mask.data_ptr(),
                    mask_len=0 if mask is None else mask.numel(),
                    top_ptrs=None if top is None else tuple(t.data_ptr() for t in top))
    return {"logprobs": out[0], "raw_logprobs": out[1], "logsumexp": out[2], "raw_logsumexp": out[3],
            "top_logprobs": None if top is None else (top[0], top[1]), "ranks": None if top is None else top[2]}


def sample_cuda(hidden, weight, temperature=1.0, seed=0, *, streams=None, sample=0, positions=None, temperatures=None,
                seeds=None, n=1, logprobs="off", top_k=None, top_p=None, min_p=None, softcap=None,
                top_logprobs=0, top_logprobs_raw=False, exact_logsumexp=False, allowed=None, logit_bias=None,
                repetition_penalty=None, frequency_penalty=None, presence_penalty=None, prompt_tokens=None,
                output_tokens=None, params=None):
    """``sample`` on PyTorch CUDA tensors: the fused GPU kernel, on the tensors' device.

    ``hidden`` ``[B, D]`` (or ``[D]``) and ``weight`` ``[V, D]``: CUDA tensors on one device, both
    torch.bfloat16 or both torch.float16 (products accumulated in float32 either way), with contiguous
    rows (strides ``(D, 1)``) and 16-byte aligned data (D a multiple of 8). Returns a ``Samples`` of CUDA tensors
    on the same device (torch.int32 tokens, torch.float32 for the rest; the GPU kernel's fused log-probabilities
    and top log-probabilities), as the CPU path's arrays.

    Stream semantics are PyTorch's: the call is ordered on ``torch.cuda.current_stream(device)``
    (the kernel waits for the work queued there before the call, and work queued there after the call
    sees the tokens), without any host synchronization and without copying the inputs (the first call
    on a device opens the GPU backend, which synchronizes that device once). Capturable into a CUDA graph
    (``torch.cuda.graph``) when the per-row keys are CUDA tensors (``seeds``, ``positions``, ...: each replay
    reads the values they then hold), ``allowed`` is a CUDA tensor or None, there are no penalties or logit
    bias, and the same call ran once before the capture; else RuntimeError, with nothing recorded. Per-row
    controls are passed to the GPU backend as they are; those it does not take yet raise NotImplementedError with the library's
    message. ``allowed`` may be a CUDA tensor on the same device (torch.bool ``[B, V]`` or int32/uint32
    words ``[B, ceil(V/32)]``): the words are built on the current stream and the kernel reads them there,
    no host copy (a host array is uploaded). The per-row keys ``temperatures``, ``seeds`` (int64 holding the u64
    bits), ``streams`` (likewise) and ``positions`` may be ``[B]`` CUDA tensors on the same device (all of those given):
    the per-row parameter words are then built on the current stream and read there, no host synchronization (a NaN
    or negative temperature is greedy there and sample indices wrap at 2^31: nothing can raise without a sync).
    Token lists given as CUDA tensors are copied to the host (the logit bias and penalties go to the backend as host
    data, which uploads the sparse adjustments they make).
    """
    import torch

    if params is not None:
        given = _given(locals())
        return sample_cuda(hidden, weight, **_with_params(sample_cuda, params, given))
    hidden, weight, ordinal = _cuda_operands(torch, hidden, weight)
    (b, d), (v, wd) = hidden.shape, weight.shape
    device = hidden.device
    device_mask = _is_torch_cuda(allowed)
    mask_words = None if device_mask else _mask_words(allowed, b, v)
    penalties = _penalties(b, logit_bias, repetition_penalty, frequency_penalty, presence_penalty, prompt_tokens,
                           output_tokens)
    shape = (b,) if n == 1 else (b, n)
    with torch.cuda.device(ordinal):
        _check_device(torch, ordinal)
        mask = _device_mask_words(torch, allowed, b, v, device) if device_mask else None
        tokens = torch.empty(shape, dtype=torch.int32, device=device)
        scores = torch.empty(shape, dtype=torch.float32, device=device)
        # Log-probability outputs (an unknown option name is reported by the native side).
        lp = logprobs != "off"
        lps = torch.empty(shape, dtype=torch.float32, device=device) if lp else None
        raw = torch.empty(shape, dtype=torch.float32, device=device) if logprobs == "processed_and_raw" else None
        lse = torch.empty((b * n,), dtype=torch.float32, device=device) if lp else None  # per sample row
        k = _int(top_logprobs, "top_logprobs")
        top = (torch.empty((b, k), dtype=torch.int32, device=device),
               torch.empty((b, k), dtype=torch.float32, device=device)) if k > 0 else None
        rows = _device_row_words(torch, device, b, _int(n, "n"), temperature, seed, streams, sample, positions,
                                 temperatures, seeds)
        if rows is not None:
            # The keys are in `rows`, built on the device; the native side reads the other controls.
            temperature, seed, streams, sample, positions, temperatures, seeds = 1.0, 0, None, 0, None, None, None
        controls = _controls(b, temperature, seed, streams, sample, temperatures, seeds, n, logprobs, top_k, top_p,
                             min_p, softcap, top_logprobs, top_logprobs_raw, mask_words, penalties, positions=positions,
                             exact_logsumexp=exact_logsumexp)
        _sample_cuda(
            ordinal, torch.cuda.current_stream(ordinal).cuda_stream, hidden.data_ptr(), b, d,
            weight.data_ptr(), v, wd, tokens.data_ptr(), scores.data_ptr(), tokens.numel(), controls,
            logprobs_ptr=None if lps is None else lps.data_ptr(),
            raw_logprobs_ptr=None if raw is None else raw.data_ptr(),
            logsumexp_ptr=None if lse is None else lse.data_ptr(), f16=hidden.dtype == torch.float16,
            mask_ptr=None if mask is None else mask.data_ptr(), mask_len=0 if mask is None else mask.numel(),
            top_tokens_ptr=None if top is None else top[0].data_ptr(),
            top_logprobs_ptr=None if top is None else top[1].data_ptr(),
            rows_ptr=None if rows is None else rows.data_ptr(), rows_len=0 if rows is None else rows.numel(),
        )
        if lse is not None and n != 1:
            # The same value for the n samples of a row: one per request row, as on the CPU path (a
            # copy on the current stream, ordered after the native call's outputs).
            lse = lse.view(b, n)[:, 0].contiguous()
    return Samples(tokens=tokens, scores=scores, logprobs=lps, raw_logprobs=raw, logsumexp=lse, top_logprobs=top)


def verify(hidden, weight, offsets, draft_tokens, positions, **controls):
    """Exact speculative verification with keyed noise (the Rust library's ``speculative::verify``).

    Request ``r`` owns hidden rows ``offsets[r] .. offsets[r + 1]`` (the target's hidden states at its ``K_r + 1``
    positions), draft tokens ``draft_tokens[offsets[r] - r .. offsets[r + 1] - r - 1]`` (``K_r``), and its first row
    is at decode position ``positions[r]``. Every row is sampled once with its position as the noise key's sample
    index (the other controls as ``sample``'s keywords, per row; or ``params=``); drafts are accepted while the
    target's sample equals them. Returns a ``Verified``: accepted drafts per request (int32 ``[R]``) and per
    request its emitted tokens (int32 arrays: the accepted drafts, then the target's next token) — the tokens plain
    decoding with the same keys draws, whatever the drafts — and, with ``logprobs`` asked for, their log-probabilities
    (what plain decoding reports). CUDA tensors sample on the GPU; the acceptance reads the tokens (and
    log-probabilities) on the host (one copy each)."""
    offsets = [_int(o, "offsets") for o in _list(offsets)]
    positions = [_int(p, "positions") for p in _list(positions)]
    drafts = [_int(t, "draft_tokens") for t in _list(draft_tokens)]
    requests = len(offsets) - 1
    if requests < 1 or offsets[0] != 0 or any(b <= a for a, b in zip(offsets, offsets[1:])):
        raise ValueError("offsets must start at 0 and increase strictly (every request has at least one row)")
    rows = offsets[-1]
    if len(positions) != requests or len(drafts) != rows - requests:
        raise ValueError(f"{requests} requests need {requests} positions and {rows - requests} draft tokens; "
                         f"got {len(positions)} and {len(drafts)}")
    params = controls.pop("params", None)
    if params is not None:
        if any(k != "threads" for k in controls):
            raise TypeError("give the controls either as params or as keywords")
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a flashsampling.SamplingParams, not {type(params).__name__}")
        controls.update({k: getattr(params, k) for k in _CONTROLS})
        if controls.pop("positions") is not None or controls.pop("sample") != 0:
            raise TypeError("verify keys every row by its position: give positions, not a sample or positions control")
    elif "positions" in controls or "sample" in controls:
        raise TypeError("verify keys every row by its position: give positions, not a sample or positions control")
    row_positions = [p + i for r, p in enumerate(positions) for i in range(offsets[r + 1] - offsets[r])]
    got = sample(hidden, weight, positions=row_positions, **controls)

    def host(x, dtype):
        return None if x is None else np.asarray(x.cpu() if _is_torch_tensor(x) else x, dtype=dtype).reshape(-1)

    target = host(got.tokens, np.int32)
    lps, raws = host(got.logprobs, np.float32), host(got.raw_logprobs, np.float32)
    if len(target) != rows:
        raise ValueError(f"hidden has {len(target)} rows; offsets end at {rows}")
    v = int(weight.shape[0])
    if any(not 0 <= t < v for t in drafts):
        raise ValueError(f"a draft token is out of range (V = {v})")
    accepted, tokens = [], []
    for r in range(requests):
        row = target[offsets[r]:offsets[r + 1]]
        draft = drafts[offsets[r] - r:offsets[r + 1] - r - 1]
        k = 0
        while k < len(draft) and draft[k] == row[k]:
            k += 1
        accepted.append(k)
        tokens.append(row[:k + 1].copy())

    def emitted(xs):
        return None if xs is None else [xs[offsets[r]:offsets[r] + accepted[r] + 1].copy() for r in range(requests)]

    return Verified(np.asarray(accepted, dtype=np.int32), tokens, emitted(lps), emitted(raws))
