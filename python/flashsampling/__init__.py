"""FlashSampling: exact categorical sampling from softmax(hidden @ weight.T / T).

``sample(hidden, weight, ...)`` draws one token per row (or ``n``) with the Gumbel-max trick, the same
noise and the same rules as the Rust library. NumPy arrays run on the CPU backend; PyTorch CUDA tensors
(the fused GPU kernels) are not wired yet and raise ``NotImplementedError``.

Arrays: ``hidden`` ``[B, D]`` and ``weight`` ``[V, D]`` as float32 (rounded to bfloat16, ties to even, as
the kernels take bf16), uint16 holding bfloat16 bits, ml_dtypes' bfloat16, or float16 (both arrays
float16: sampled in f16 on the CPU backend, no rounding). Errors are ``ValueError``
(bad input, the Rust library's message) or ``RuntimeError``.
"""

import numpy as np

from ._flashsampling import sample_cpu as _sample_cpu

__all__ = ["sample", "bf16_bits"]


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


def _is_torch_cuda(x):
    return type(x).__module__.startswith("torch") and getattr(getattr(x, "device", None), "type", None) == "cuda"


def sample(hidden, weight, temperature=1.0, seed=0, *, streams=None, sample=0, temperatures=None, seeds=None,
           n=1, logprobs="off", top_k=None, top_p=None, min_p=None, softcap=None, top_logprobs=0,
           top_logprobs_raw=False, allowed=None, threads=None, return_dict=False):
    """Tokens drawn from softmax(hidden @ weight.T / T), one per row (``[B]``) or ``n`` per row (``[B, n]``).

    Per-row controls (lists of length B): ``temperatures`` (0 = greedy for that row), ``seeds``,
    ``streams``, ``top_k`` (0 = off), ``top_p`` (1 = off), ``min_p`` (0 = off). ``softcap`` soft-caps the
    logits; ``allowed`` is a boolean ``[B, V]`` array of allowed tokens (or ``[B, ceil(V/32)]`` uint32 words,
    bit j of word w = token 32w + j). ``logprobs`` is "off", "processed" or "processed_and_raw";
    ``top_logprobs`` asks for each row's most likely tokens. With ``return_dict`` (or any log-probability
    asked for) the result is a dict of NumPy arrays: tokens, scores, logprobs, raw_logprobs, logsumexp,
    top_logprobs (a list per row of (token, log-probability) pairs).
    """
    if _is_torch_cuda(hidden) or _is_torch_cuda(weight):
        raise NotImplementedError("CUDA tensors: the GPU path of the Python package is not wired yet; "
                                  "pass NumPy arrays (tensor.float().cpu().numpy())")
    f16 = np.asarray(hidden).dtype == np.float16 and np.asarray(weight).dtype == np.float16
    if f16:
        h, w = (np.ascontiguousarray(np.asarray(x)).view(np.uint16) for x in (hidden, weight))
    else:
        h, w = bf16_bits(hidden), bf16_bits(weight)
    if h.ndim == 1:
        h = h[None, :]
    if h.ndim != 2 or w.ndim != 2:
        raise ValueError(f"hidden must be [B, D] and weight [V, D]; got shapes {h.shape} and {w.shape}")
    (b, d), (v, wd) = h.shape, w.shape
    mask_words = None
    if allowed is not None:
        a = np.asarray(allowed)
        if a.dtype == np.bool_:
            if a.shape != (b, v):
                raise ValueError(f"allowed must be [B, V] = {(b, v)} booleans; got {a.shape}")
            padded = np.zeros((b, -(-v // 32) * 32), dtype=np.uint64)
            padded[:, :v] = a
            # Bit j of word w is token 32w + j.
            words = (padded.reshape(b, -1, 32) << np.arange(32, dtype=np.uint64)).sum(axis=-1)
            mask_words = words.astype(np.uint32).reshape(-1).tolist()
        else:
            mask_words = np.asarray(a, dtype=np.uint32).reshape(-1).tolist()
    lst = lambda x: None if x is None else [*map(lambda y: y.item() if hasattr(y, "item") else y, x)]
    out = _sample_cpu(
        np.ascontiguousarray(h).reshape(-1), b, d, np.ascontiguousarray(w).reshape(-1), v, wd,
        temperature=float(temperature), seed=int(seed), streams=lst(streams), sample=int(sample),
        temperatures=lst(temperatures), seeds=lst(seeds), n=int(n), logprobs=logprobs, top_k=lst(top_k),
        top_p=lst(top_p), min_p=lst(min_p), softcap=softcap, top_logprobs=int(top_logprobs),
        top_logprobs_raw=bool(top_logprobs_raw), mask_words=mask_words, threads=threads, f16=f16,
    )
    shape = (b,) if n == 1 else (b, n)
    tokens = np.asarray(out["tokens"], dtype=np.uint32).reshape(shape)
    if not return_dict and logprobs == "off" and not top_logprobs:
        return tokens
    res = {"tokens": tokens, "scores": np.asarray(out["scores"], dtype=np.float32).reshape(shape)}
    for key in ("logprobs", "raw_logprobs"):
        res[key] = None if out[key] is None else np.asarray(out[key], dtype=np.float32).reshape(shape)
    res["logsumexp"] = None if out["logsumexp"] is None else np.asarray(out["logsumexp"], dtype=np.float32)
    res["top_logprobs"] = out["top_logprobs"]
    return res
